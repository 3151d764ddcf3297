/*
 * wb.c — the write-back pool: worker threads that hash, compress and store the chunks cut from
 * files being written, off the FUSE threads, with a bounded amount of memory in flight.
 *
 * A writer (oinode.c, under its file's write lock) fills its tail buffer up to a chunk cut,
 * hands that buffer to a struct fly_job (and takes a new one from wb_buf_get for the next tail),
 * appends the job to its file's in-flight list and hands it to wb_submit, which waits
 * while the pool's budget is used up (backpressure: writers wait, never fail). A worker takes the
 * oldest job, stores it (fs_chunk_put: XXH3-128, codec choice, zstd, chunk file, pin), then
 * publishes the result on the job under the file's fly_mu and keeps the raw bytes' buffer for
 * the next job (wb_buf_get, up to WB_KEEP_BUFS).
 *
 * Invariants:
 *   1. used == the sum of len over jobs submitted and not yet finished by a worker; a submit
 *      waits while used + len > budget, unless used == 0 (a job larger than the budget still runs).
 *   2. A job's buf is valid until done is set; both change only under its file's fly_mu, and the
 *      worker never touches the job or its oinode after releasing fly_mu (the file may be freed as
 *      soon as fly_busy reaches 0).
 *   3. Jobs are taken in submission order; any worker may finish any job, so files harvest their
 *      jobs in file order and stop at the first one not yet done.
 *   4. wb_stop runs every job already queued before the workers exit.
 *
 * Lock order: oinode.lock -> pool.mu (wb_submit is called with the file's write lock held);
 * a worker takes fly_mu and pool.mu one after the other, never together, and no other lock.
 */
#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/fs_int.h"

#define WB_MAX_THREADS 16

/*
 * Chunk buffers (STORE_CHUNK_MAX bytes each) kept for reuse after a worker is done with them: a
 * fresh one per chunk is a fresh mapping (mmap threshold 128 KiB, daemon.c) that page-faults
 * while the writer copies into it. 8 buffers, for a few writers each starting a new tail per
 * chunk; at most 32 MiB kept, outside the write buffer.
 */
#define WB_KEEP_BUFS 8

/*
 * Workers run at this nice value (setpriority(2) on the thread; Linux nice is per thread): the
 * trainer and the FUSE threads that take its writes come first, the workers get the CPU left
 * over, which on a training node is most of it between saves and during the GPU's compute. Under
 * contention nice 10 gets about a tenth of the CPU weight of nice 0 (sched_prio_to_weight in
 * kernel/sched/core.c: 110 vs 1024), never none. One 1 GiB torch.save on the 2-core VM: close
 * returned in 1.17-1.27 s at nice 0, 1.04-1.09 s at nice 10, durable at 1.23-1.29 s either way.
 */
#define WB_NICE 10

struct wb_pool {
	struct ckfs *fs;
	pthread_mutex_t mu;     /* guards everything below */
	pthread_cond_t cv_work; /* a job was queued, or stopping */
	pthread_cond_t cv_space; /* used went down */
	struct fly_job *head, *tail;
	size_t used, budget;    /* bytes (invariant 1) */
	size_t peak;            /* highest used seen, bytes */
	bool stopping;
	uint8_t *keep[WB_KEEP_BUFS]; /* free chunk buffers for wb_buf_get */
	unsigned n_keep;
	unsigned nthreads;
	pthread_t threads[WB_MAX_THREADS];
};

static void *wb_main(void *arg)
{
	struct wb_pool *p = arg;

	/* best effort: a worker that keeps the daemon's priority only competes harder */
	(void)setpriority(PRIO_PROCESS, (id_t)gettid(), WB_NICE);
	(void)pthread_setname_np(pthread_self(), "ckptfs-wb"); /* for top -H and perf; best effort */
	for (;;) {
		struct fly_job *j;

		pthread_mutex_lock(&p->mu);
		while (!p->head && !p->stopping)
			pthread_cond_wait(&p->cv_work, &p->mu);
		j = p->head;
		if (!j) { /* stopping and nothing left (invariant 4) */
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		p->head = j->qnext;
		if (!p->head)
			p->tail = NULL;
		pthread_mutex_unlock(&p->mu);

		struct store_chunk_info info;
		int rc = fs_chunk_put(p->fs, j->buf, j->len, &info);
		size_t len = j->len;
		struct oinode *oi = j->oi;

		pthread_mutex_lock(&oi->fly_mu);
		if (rc == 0)
			j->info = info;
		j->err = rc;
		j->done = true;
		uint8_t *buf = j->buf;

		j->buf = NULL;
		oi->fly_busy--;
		pthread_cond_broadcast(&oi->fly_cv);
		pthread_mutex_unlock(&oi->fly_mu); /* invariant 2: j and oi are off limits now */

		pthread_mutex_lock(&p->mu);
		if (p->n_keep < WB_KEEP_BUFS)
			p->keep[p->n_keep++] = buf;
		else
			free(buf);
		p->used -= len;
		pthread_cond_broadcast(&p->cv_space);
		pthread_mutex_unlock(&p->mu);
	}
}

int wb_start(struct ckfs *fs, size_t budget, unsigned nthreads)
{
	struct wb_pool *p;
	int rc;

	if (budget == 0 || nthreads == 0)
		return -EINVAL;
	if (nthreads > WB_MAX_THREADS)
		nthreads = WB_MAX_THREADS;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->fs = fs;
	p->budget = budget;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv_work, NULL);
	pthread_cond_init(&p->cv_space, NULL);
	for (unsigned i = 0; i < nthreads; i++) {
		rc = pthread_create(&p->threads[i], NULL, wb_main, p);
		if (rc != 0) {
			if (i == 0) {
				pthread_cond_destroy(&p->cv_space);
				pthread_cond_destroy(&p->cv_work);
				pthread_mutex_destroy(&p->mu);
				free(p);
				return -rc;
			}
			break; /* fewer workers than asked: still a pool */
		}
		p->nthreads++;
	}
	fs->wb = p;
	return 0;
}

void wb_stop(struct ckfs *fs)
{
	struct wb_pool *p = fs->wb;

	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stopping = true;
	pthread_cond_broadcast(&p->cv_work);
	pthread_mutex_unlock(&p->mu);
	for (unsigned i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	fs->wb = NULL;
	while (p->n_keep)
		free(p->keep[--p->n_keep]);
	pthread_cond_destroy(&p->cv_space);
	pthread_cond_destroy(&p->cv_work);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

uint8_t *wb_buf_get(struct wb_pool *p)
{
	uint8_t *b = NULL;

	pthread_mutex_lock(&p->mu);
	if (p->n_keep)
		b = p->keep[--p->n_keep];
	pthread_mutex_unlock(&p->mu);
	return b ? b : malloc(STORE_CHUNK_MAX);
}

void wb_submit(struct wb_pool *p, struct fly_job *j)
{
	pthread_mutex_lock(&p->mu);
	while (p->used > 0 && p->used + j->len > p->budget)
		pthread_cond_wait(&p->cv_space, &p->mu);
	p->used += j->len;
	if (p->used > p->peak)
		p->peak = p->used;
	j->qnext = NULL;
	if (p->tail)
		p->tail->qnext = j;
	else
		p->head = j;
	p->tail = j;
	pthread_cond_signal(&p->cv_work);
	pthread_mutex_unlock(&p->mu);
}

void wb_figures(struct wb_pool *p, size_t *ret_budget, size_t *ret_used, size_t *ret_peak,
		unsigned *ret_threads)
{
	if (!p) {
		*ret_budget = *ret_used = *ret_peak = 0;
		*ret_threads = 0;
		return;
	}
	pthread_mutex_lock(&p->mu);
	*ret_budget = p->budget;
	*ret_used = p->used;
	*ret_peak = p->peak;
	*ret_threads = p->nthreads;
	pthread_mutex_unlock(&p->mu);
}

size_t wb_default_budget(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	size_t ram = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : (size_t)4 << 30;
	size_t b = ram / 8;

	if (b < ((size_t)64 << 20))
		b = (size_t)64 << 20;
	if (b > ((size_t)16 << 30))
		b = (size_t)16 << 30;
	return b;
}
