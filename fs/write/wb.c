/*
 * wb.c — the write-back pool: worker threads that cut, hash, compress and store the bytes
 * appended to files being written, off the FUSE threads, with a bounded amount of memory in
 * flight.
 *
 * A writer (oinode.c, under its file's write lock) only copies its bytes into the file's
 * segments (struct seg), after wb_reserve has charged them to the pool's budget, and schedules
 * the file's cutter (wb_cut_schedule). A worker runs the cutter (oi_cut_run): it feeds the new
 * bytes to the chunker and the file's hasher and queues each chunk it cuts as a job
 * (wb_submit). A worker takes a job (oi_job_run): XXH3-128, codec choice, zstd, chunk file, pin,
 * then publishes the result on the job. A segment is freed when the last chunk cut from it is
 * stored and the cutter is past it (wb_seg_free): its buffer is kept for the next segment when
 * all its pages were touched, else unmapped and its bytes given back to the budget.
 *
 * Deferred compression (-o defer_compress, wb_should_defer): while the workers are behind the
 * writer (WB_DEFER_QUEUE jobs per worker wait) and the disk takes a byte sooner than the
 * compressor does (store_defer_pays), a job stores its chunk raw (STORE_CODEC_DEFERRED; RAW for
 * good when its sample does not compress, store.h STORE_PUT_DEFER), so the step is durable at
 * the speed of the disk rather than of zstd on the CPU the trainer leaves.
 * Once the pool has been idle WB_IDLE_LAZY_S, one worker compresses the deferred chunks the
 * index lists (pins_recode_idle, store_chunk_recode), yielding between chunks as soon as work
 * arrives. Why: with the CPUs shared with the trainer, a save becomes durable sooner when its
 * chunks reach the disk raw and are compressed afterwards, in idle time (figures:
 * tests/bench/RESULTS.md).
 *
 * Invariants:
 *   1. used == the resident bytes of the segments alive (seg.resident) + the charged bytes of
 *      each kept buffer: a bound on the memory the written data takes. A reserve frees kept
 *      buffers, then waits, while used + n > budget and the pool has work queued or running
 *      (that work frees segments); with the pool idle it goes on, so the bytes a file holds
 *      that cannot be freed before more are written (the chunk being cut, at most two
 *      segments) never block it.
 *   2. active == the cutters and jobs queued or running; cv_space is signalled when used goes
 *      down and when active reaches 0.
 *   3. Cutters are taken before jobs (a cutter's chunks feed the jobs), each in the order
 *      queued; any worker may finish any job, so files harvest their jobs in file order and
 *      stop at the first one not yet done.
 *   4. wb_stop runs every cutter and job already queued before the workers exit.
 *   5. Each keep list holds buffers of one size (WB_SEG for segments, STORE_CHUNK_MAX for the
 *      copies of chunks spanning two segments) that no segment uses, v[0..n), each with the bytes
 *      charged for it, which cover every page of it ever touched (a buffer is touched only as far
 *      as it is charged: stream_append populates a range as it charges it, and a buffer taken
 *      from the list is charged up to what it had). v[0..n_lazy) have been handed to the kernel
 *      with MADV_FREE (it may reclaim their pages under memory pressure; a write takes a page
 *      back), v[n_lazy..n) not yet. Once the pool has been idle (active == 0) for WB_IDLE_LAZY_S,
 *      n_lazy = n in both. While lazy_keep_locked gives them, the buffers it gives are off the
 *      list (and still in used and charged).
 *   6. At most one worker runs pins_recode_idle (recoding), only while active == 0 when it
 *      starts; recode stays set while deferred chunks may remain unseen: until a pass finds
 *      none and no file holding deferred chunks was committed meanwhile (defer_gen).
 *
 * Lock order: oinode.lock -> pool.mu (wb_reserve is called with the file's write lock held);
 * pool.mu is a leaf, never taken with a file's fly_mu held. A cutter or job never takes an
 * oinode lock: the writers it would wait for may be waiting in wb_reserve for it.
 */
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/core/lockrank.h"
#include "fs/core/workers.h"
#include "fs/write/write.h"

/*
 * Default workers per online CPU. A worker that stores a chunk waits for its O_DIRECT write,
 * so workers are not all on the CPU at once: with one worker per CPU the CPUs sit partly idle
 * while both workers wait on the disk. More than two per CPU compress more inline
 * (WB_DEFER_QUEUE counts per worker), which costs more than the extra overlap gains. Figures:
 * tests/bench/RESULTS.md.
 */
#define WB_WORKERS_PER_CPU 2

/*
 * Workers run at this nice value (setpriority(2) on the thread; Linux nice is per thread): the
 * trainer and the FUSE threads that take its writes come first, the workers get the CPU left
 * over, which on a training node is most of it between saves and during the GPU's compute. Under
 * contention nice 10 gets about a tenth of the CPU weight of nice 0 (sched_prio_to_weight in
 * kernel/sched/core.c: 110 vs 1024), never none. A save's close returns sooner this way and it
 * is durable no later (figures: tests/bench/RESULTS.md).
 */
#define WB_NICE 10

/*
 * Segment buffers are kept between saves (invariant 5): a fresh buffer is a fresh mapping (mmap
 * threshold 128 KiB, daemon.c) whose pages the kernel must fault in and zero while the writer
 * copies into it, on the FUSE threads (clear_page_erms and exc_page_fault in a profile). Every
 * touched buffer is kept, within the budget (invariant 1), so the next save of the same size
 * writes into pages already mapped, and a writer of many small files reuses one buffer rather
 * than mapping and unmapping 8 MiB per file: each munmap of a multi-threaded process shoots down
 * the TLB of every CPU (flush_tlb_mm_range, smp_call_function_many_cond in a profile of 1 KiB
 * files: tests/bench/RESULTS.md). Kept memory must not be memory the machine cannot get back, so
 * after WB_IDLE_LAZY_S of idleness the kept buffers are given to the kernel with MADV_FREE (Linux
 * 4.5): under memory pressure it reclaims their pages instead of swapping anything; otherwise
 * they stay mapped, and the next write into one only sets its dirty bit (madvise(2); jemalloc's
 * default purge works the same way). Buffers are not trimmed when the pool catches up with the
 * writer: it does so many times in a save, and each trim would leave the next segments fresh. The
 * copies of spanning chunks, one per segment boundary, have a list of their own, so they neither
 * take WB_SEG buffers nor leave segment buffers fresh.
 */
#define WB_IDLE_LAZY_S 1

/*
 * A job is stored deferred (raw now, compressed when the pool is idle) under
 * -o defer_compress=auto when at least this many jobs per worker wait behind it, and
 * store_defer_pays says raw is the quicker way to disk. Two per worker: each worker has its
 * next job and one more waiting, i.e. the cutter is outrunning the workers, which happens only
 * while a writer outruns them (as a large torch.save does with every chunk compressed: figures in
 * tests/bench/RESULTS.md).
 */
#define WB_DEFER_QUEUE 2

/* A buffer kept for reuse and the bytes charged for it (invariant 5). */
struct kept {
	uint8_t *buf;
	size_t charged;
};

/* Buffers of one size kept for reuse (invariant 5). */
struct keep_list {
	struct kept *v; /* room for cap */
	size_t n, n_lazy, cap;
	size_t size;    /* bytes of each buffer */
	size_t charged; /* sum of v[0..n).charged */
};

struct wb_pool {
	struct ckfs *fs;
	pthread_mutex_t mu;     /* guards everything below */
	pthread_cond_t cv_work; /* a cutter or job was queued, or stopping */
	pthread_cond_t cv_space; /* used went down, or active reached 0 */
	struct oinode *cut_head, *cut_tail; /* files whose cutter is queued (cut_qnext) */
	struct fly_job *head, *tail;        /* jobs queued (qnext) */
	size_t used, budget;    /* bytes (invariant 1) */
	size_t peak;            /* highest used seen, bytes */
	unsigned active;        /* invariant 2 */
	unsigned queued;        /* jobs queued, not yet taken by a worker */
	bool recode;            /* deferred chunks may exist: look for them when idle */
	uint64_t defer_gen;     /* wb_note_deferred calls so far */
	bool recoding;          /* a worker is in pins_recode_idle */
	struct keep_list keep[2]; /* invariant 5: [0] WB_SEG, [1] STORE_CHUNK_MAX bytes each */
	bool stopping;
	struct ckpt_workers w;
};

/*
 * MADV_FREE the kept buffers of k not yet given to the kernel (invariant 5). Called and returns
 * with the pool lock held, but drops it for the madvise calls (they take time in proportion to
 * the buffers' size), so a writer starting the next save does not wait for them. The buffers
 * are off the list meanwhile, so no writer takes one and writes into a page while it is being
 * freed (that write could be lost with it); they stay counted in used and k->charged. They go
 * back below the buffers kept meanwhile (not yet given); any that no longer fit are freed. Best
 * effort: without memory for the list of them, or on a kernel without MADV_FREE (EINVAL), they
 * stay as they are. The first partial page of a malloc'd buffer holds malloc's header and is
 * left alone.
 */
static void lazy_keep_locked(struct wb_pool *p, struct keep_list *k)
{
	long psz = sysconf(_SC_PAGESIZE);
	uintptr_t mask = psz > 0 ? (uintptr_t)psz - 1 : 4095;
	size_t m = k->n - k->n_lazy, back;
	struct kept *out;

	if (m == 0 || !(out = malloc(m * sizeof(*out))))
		return;
	memcpy(out, k->v + k->n_lazy, m * sizeof(*out));
	k->n = k->n_lazy;
	ckpt_unlock(&p->mu, CKPT_RANK_WB);
	for (size_t i = 0; i < m; i++) {
		uintptr_t b = (uintptr_t)out[i].buf;
		uintptr_t start = (b + mask) & ~mask, end = (b + out[i].charged) & ~mask;

		if (end > start)
			(void)madvise((void *)start, end - start, MADV_FREE);
	}
	ckpt_lock(&p->mu, CKPT_RANK_WB);
	back = k->cap - k->n < m ? k->cap - k->n : m;
	memmove(k->v + k->n_lazy + back, k->v + k->n_lazy, (k->n - k->n_lazy) * sizeof(*k->v));
	memcpy(k->v + k->n_lazy, out, back * sizeof(*out));
	k->n += back;
	k->n_lazy += back;
	for (size_t i = back; i < m; i++) {
		free(out[i].buf);
		k->charged -= out[i].charged;
		p->used -= out[i].charged;
	}
	if (back < m)
		pthread_cond_broadcast(&p->cv_space);
	free(out);
}

/* Take the top kept buffer of k (k->n > 0), its charged bytes to *ret_charged (still counted
 * in used). Pool lock held. */
static uint8_t *pop_keep_locked(struct keep_list *k, size_t *ret_charged)
{
	struct kept e = k->v[--k->n];

	if (k->n_lazy > k->n)
		k->n_lazy = k->n;
	k->charged -= e.charged;
	*ret_charged = e.charged;
	return e.buf;
}

/* The keep list of buffers of size bytes, or NULL when that size is not kept. */
static struct keep_list *keep_of(struct wb_pool *p, size_t size)
{
	for (int i = 0; i < 2; i++)
		if (p->keep[i].size == size)
			return &p->keep[i];
	return NULL;
}

/* Whether some kept buffer is not yet given to the kernel. Pool lock held. */
static bool keep_warm_locked(const struct wb_pool *p)
{
	return p->keep[0].n_lazy < p->keep[0].n || p->keep[1].n_lazy < p->keep[1].n;
}

static void *wb_main(void *arg)
{
	struct wb_pool *p = arg;

	/* best effort: a worker that keeps the daemon's priority only competes harder */
	(void)setpriority(PRIO_PROCESS, (id_t)gettid(), WB_NICE);
	(void)pthread_setname_np(pthread_self(), "ckptfs-wb"); /* for top -H and perf; best effort */
	for (;;) {
		struct oinode *oi = NULL;
		struct fly_job *j = NULL;

		ckpt_lock(&p->mu, CKPT_RANK_WB);
		while (!p->cut_head && !p->head && !p->stopping) {
			if (p->active == 0 &&
			    (keep_warm_locked(p) || (p->recode && !p->recoding))) {
				struct timespec ts;

				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_sec += WB_IDLE_LAZY_S;
				if (ckpt_cond_wait(&p->cv_work, &p->mu, CKPT_RANK_WB, &ts) != ETIMEDOUT ||
				    p->active != 0 || p->cut_head || p->head)
					continue;
				lazy_keep_locked(p, &p->keep[0]);
				lazy_keep_locked(p, &p->keep[1]);
				if (p->recode && !p->recoding && !p->stopping) {
					uint64_t gen = p->defer_gen;

					p->recoding = true;
					ckpt_unlock(&p->mu, CKPT_RANK_WB);
					bool more = pins_recode_idle(p->fs);

					ckpt_lock(&p->mu, CKPT_RANK_WB);
					p->recoding = false;
					/* chunks committed meanwhile may not have been seen */
					p->recode = more || gen != p->defer_gen;
				}
				continue;
			}
			ckpt_cond_wait(&p->cv_work, &p->mu, CKPT_RANK_WB, NULL);
		}
		if ((oi = p->cut_head)) {
			p->cut_head = oi->cut_qnext;
			if (!p->cut_head)
				p->cut_tail = NULL;
		} else if ((j = p->head)) {
			p->head = j->qnext;
			if (!p->head)
				p->tail = NULL;
			p->queued--;
		} else { /* stopping and nothing left (invariant 4) */
			ckpt_unlock(&p->mu, CKPT_RANK_WB);
			return NULL;
		}
		ckpt_unlock(&p->mu, CKPT_RANK_WB);

		if (oi)
			oi_cut_run(p->fs, oi); /* oi is off limits once it returns */
		else
			oi_job_run(p->fs, j);  /* so is j */

		ckpt_lock(&p->mu, CKPT_RANK_WB);
		if (--p->active == 0)
			pthread_cond_broadcast(&p->cv_space);
		ckpt_unlock(&p->mu, CKPT_RANK_WB);
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
	p->recode = true; /* a store may hold deferred chunks from an earlier mount */
	p->keep[0].size = WB_SEG;
	p->keep[1].size = STORE_CHUNK_MAX;
	for (int i = 0; i < 2; i++) {
		p->keep[i].cap = budget / p->keep[i].size + 1;
		p->keep[i].v = calloc(p->keep[i].cap, sizeof(*p->keep[i].v));
	}
	if (!p->keep[0].v || !p->keep[1].v) {
		free(p->keep[0].v);
		free(p->keep[1].v);
		free(p);
		return -ENOMEM;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv_work, NULL);
	pthread_cond_init(&p->cv_space, NULL);
	if ((rc = ckpt_workers_start(&p->w, nthreads, wb_main, p)) < 0) {
		pthread_cond_destroy(&p->cv_space);
		pthread_cond_destroy(&p->cv_work);
		pthread_mutex_destroy(&p->mu);
		free(p->keep[0].v);
		free(p->keep[1].v);
		free(p);
		return rc;
	}
	fs->wr.wb = p;
	return 0;
}

void wb_stop(struct ckfs *fs)
{
	struct wb_pool *p = fs->wr.wb;

	if (!p)
		return;
	ckpt_workers_stop(&p->w, &p->mu, &p->cv_work, &p->stopping);
	fs->wr.wb = NULL;
	for (int i = 0; i < 2; i++) { /* the workers are gone: nobody else holds p */
		size_t charged;

		while (p->keep[i].n)
			free(pop_keep_locked(&p->keep[i], &charged));
		free(p->keep[i].v);
	}
	pthread_cond_destroy(&p->cv_space);
	pthread_cond_destroy(&p->cv_work);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

void wb_submit(struct wb_pool *p, struct fly_job *j)
{
	ckpt_lock(&p->mu, CKPT_RANK_WB);
	j->qnext = NULL;
	if (p->tail)
		p->tail->qnext = j;
	else
		p->head = j;
	p->tail = j;
	p->active++;
	p->queued++;
	pthread_cond_signal(&p->cv_work);
	ckpt_unlock(&p->mu, CKPT_RANK_WB);
}

bool wb_should_defer(struct wb_pool *p)
{
	bool behind;

	if (!p || p->fs->wr.defer == FS_DEFER_NEVER)
		return false;
	if (p->fs->wr.defer == FS_DEFER_ALWAYS)
		return true;
	ckpt_lock(&p->mu, CKPT_RANK_WB);
	behind = p->queued >= WB_DEFER_QUEUE * p->w.n;
	ckpt_unlock(&p->mu, CKPT_RANK_WB);
	return behind && store_defer_pays(p->fs->st);
}

void wb_note_deferred(struct wb_pool *p)
{
	if (!p)
		return;
	ckpt_lock(&p->mu, CKPT_RANK_WB);
	p->recode = true;
	p->defer_gen++;
	pthread_cond_signal(&p->cv_work); /* an idle worker waits untimed: start its timer */
	ckpt_unlock(&p->mu, CKPT_RANK_WB);
}

bool wb_busy(struct wb_pool *p)
{
	bool busy;

	if (!p)
		return false;
	ckpt_lock(&p->mu, CKPT_RANK_WB);
	busy = p->cut_head || p->head || p->stopping || p->active;
	ckpt_unlock(&p->mu, CKPT_RANK_WB);
	return busy;
}

void wb_cut_schedule(struct wb_pool *p, struct oinode *oi)
{
	ckpt_lock(&p->mu, CKPT_RANK_WB);
	oi->cut_qnext = NULL;
	if (p->cut_tail)
		p->cut_tail->cut_qnext = oi;
	else
		p->cut_head = oi;
	p->cut_tail = oi;
	p->active++;
	pthread_cond_signal(&p->cv_work);
	ckpt_unlock(&p->mu, CKPT_RANK_WB);
}

static void charge_locked(struct wb_pool *p, size_t n)
{
	p->used += n;
	if (p->used > p->peak)
		p->peak = p->used;
}

void wb_reserve(struct wb_pool *p, size_t n)
{
	if (!p)
		return;
	ckpt_lock(&p->mu, CKPT_RANK_WB);
	while (p->used > 0 && p->used + n > p->budget &&
	       (p->keep[0].n || p->keep[1].n || p->active > 0)) {
		/* a kept buffer is memory nobody writes: give it back first */
		struct keep_list *k = p->keep[1].n ? &p->keep[1] : &p->keep[0];

		if (k->n) {
			size_t charged;

			free(pop_keep_locked(k, &charged));
			p->used -= charged;
			continue;
		}
		ckpt_cond_wait(&p->cv_space, &p->mu, CKPT_RANK_WB, NULL);
	}
	charge_locked(p, n);
	ckpt_unlock(&p->mu, CKPT_RANK_WB);
}

void wb_charge(struct wb_pool *p, size_t n)
{
	if (!p)
		return;
	ckpt_lock(&p->mu, CKPT_RANK_WB);
	charge_locked(p, n);
	ckpt_unlock(&p->mu, CKPT_RANK_WB);
}

uint8_t *wb_seg_get(struct wb_pool *p, size_t size, size_t *ret_charged)
{
	struct keep_list *k;
	uint8_t *buf = NULL;

	*ret_charged = 0;
	if (!p)
		return NULL;
	ckpt_lock(&p->mu, CKPT_RANK_WB);
	if ((k = keep_of(p, size)) && k->n) /* stays counted in used: the segment's resident */
		buf = pop_keep_locked(k, ret_charged);
	ckpt_unlock(&p->mu, CKPT_RANK_WB);
	return buf;
}

void wb_seg_free(struct wb_pool *p, uint8_t *buf, size_t cap, size_t resident)
{
	struct keep_list *k = p && resident ? keep_of(p, cap) : NULL;

	if (k) { /* invariant 5 */
		ckpt_lock(&p->mu, CKPT_RANK_WB);
		/* kept within the budget: idle memory never exceeds it */
		if (k->n < k->cap && !p->stopping && p->used <= p->budget) {
			k->v[k->n].buf = buf; /* stays counted (invariant 1) */
			k->v[k->n++].charged = resident;
			k->charged += resident;
			buf = NULL;
		}
		ckpt_unlock(&p->mu, CKPT_RANK_WB);
	}
	if (buf) {
		free(buf);
		wb_release(p, resident);
	}
}

void wb_release(struct wb_pool *p, size_t n)
{
	if (!p || n == 0)
		return;
	ckpt_lock(&p->mu, CKPT_RANK_WB);
	p->used -= n < p->used ? n : p->used;
	pthread_cond_broadcast(&p->cv_space);
	ckpt_unlock(&p->mu, CKPT_RANK_WB);
}

void wb_figures(struct ckfs *fs, size_t *ret_budget, size_t *ret_used, size_t *ret_kept,
		size_t *ret_peak, unsigned *ret_threads)
{
	struct wb_pool *p = fs->wr.wb;

	if (!p) {
		*ret_budget = *ret_used = *ret_kept = *ret_peak = 0;
		*ret_threads = 0;
		return;
	}
	ckpt_lock(&p->mu, CKPT_RANK_WB);
	*ret_budget = p->budget;
	/* the kept buffers hold no data */
	*ret_kept = p->keep[0].charged + p->keep[1].charged;
	*ret_used = p->used - *ret_kept;
	*ret_peak = p->peak;
	*ret_threads = p->w.n;
	ckpt_unlock(&p->mu, CKPT_RANK_WB);
}

unsigned wb_default_threads(void)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	long n = (ncpu > 0 ? ncpu : 1) * WB_WORKERS_PER_CPU;

	return n > WB_MAX_THREADS ? WB_MAX_THREADS : (unsigned)n;
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
