/*
 * ra.c — read-ahead of stored chunks for sequential readers.
 *
 * The kernel reads ahead of a sequential reader by FS_READ_AHEAD_KB (4 MiB, one STORE_CHUNK_MAX)
 * and sends that window as FUSE reads that all land in the one or two chunks it covers: the
 * daemon reads a chunk file, decodes it and re-hashes it while the reader waits, then the next.
 * Here threads of their own load the chunks that follow into the chunk cache
 * (store_chunk_warm) while the replies of the current one go out, so the disk, zstd and the
 * replies overlap. On a node of a job (-o remote) they fetch the chunks of other nodes' files
 * from the remote the same way, several requests in flight ahead of the reader.
 *
 * A read is sequential when it starts within RA_SLACK of where the file's previous read ended
 * (the kernel's read-ahead requests of one window arrive out of order on several threads). Each
 * open file (struct oinode) keeps how far its chunks have been queued (ra_to); a read queues the
 * stored extents from there up to its end plus the window, once at least half a window is
 * missing (fewer, larger batches). The window is -o readahead_mb (ra_start), divided among the
 * files read at once so that their chunks queued and not yet read fit in half the cache: with
 * more readers than that allows (the window would fall under RA_MIN), there is no read-ahead
 * and each reader loads its own chunks, as without this file.
 *
 * Invariants:
 *   1. The queue holds at most RA_QUEUE digests, none twice; a digest that does not fit is
 *      dropped (its reader loads it).
 *   2. Nothing here holds a chunk: a warmed chunk is an ordinary cache entry, evicted like any.
 *      A failed load is dropped: the reader that needs the chunk meets the error itself and
 *      reports it (oi_read.c chunk_bad), so read-ahead never marks a chunk bad.
 *   3. p->mu is a leaf; ra_note_read runs under oinode.lock (read) and takes only p->mu.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs/core/lockrank.h"
#include "fs/core/workers.h"
#include "fs/write/oi_int.h"

/* Queue length, chunks: 4 windows of 16 MiB of 4 MiB chunks (invariant 1). */
#define RA_QUEUE 64
/* A read within this many bytes of the previous read's end continues a sequential run: twice
 * the kernel's window (FS_READ_AHEAD_KB, fuse_int.h), whose requests arrive out of order. */
#define RA_SLACK (8ull << 20)
/* Below this window (bytes) read-ahead stops: one STORE_CHUNK_MAX. */
#define RA_MIN ((uint64_t)STORE_CHUNK_MAX)
/* Files read at once, tracked to divide the window among them; a file counts for RA_ACTIVE_NS
 * after its last queueing. */
#define RA_FILES 16
#define RA_ACTIVE_NS 1000000000ll
#define RA_MAX_THREADS 4

struct ra_pool {
	struct ckfs *fs;
	pthread_mutex_t mu;      /* a leaf (invariant 3): guards everything below */
	pthread_cond_t cv;       /* work queued, or stopping */
	struct store_hash q[RA_QUEUE];
	unsigned head, n;
	bool stop;
	uint64_t window;         /* -o readahead_mb, bytes */
	uint64_t half_cache;     /* half the chunk cache, bytes */
	bool fetch;              /* a node of a job (fs->node): chunks missing here are another
				  * node's, fetched ahead too (store_chunk_warm) */
	struct {
		uint64_t ino;
		int64_t at_ns;
	} files[RA_FILES];       /* the files that queued lately */
	struct ckpt_workers w;
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static void *ra_main(void *arg)
{
	struct ra_pool *p = arg;

	(void)pthread_setname_np(pthread_self(), "ckptfs-ra"); /* for top -H and perf */
	ckpt_lock(&p->mu, CKPT_RANK_RA);
	for (;;) {
		while (!p->stop && p->n == 0)
			ckpt_cond_wait(&p->cv, &p->mu, CKPT_RANK_RA, NULL);
		if (p->stop)
			break;
		struct store_hash h = p->q[p->head];

		p->head = (p->head + 1) % RA_QUEUE;
		p->n--;
		ckpt_unlock(&p->mu, CKPT_RANK_RA);
		(void)store_chunk_warm(p->fs->st, &h, p->fetch); /* errors: invariant 2 */
		ckpt_lock(&p->mu, CKPT_RANK_RA);
	}
	ckpt_unlock(&p->mu, CKPT_RANK_RA);
	return NULL;
}

int ra_start(struct ckfs *fs, uint64_t window, unsigned nthreads)
{
	struct ra_pool *p;
	int rc;

	if (window == 0 || nthreads == 0)
		return 0;
	if (nthreads > RA_MAX_THREADS)
		nthreads = RA_MAX_THREADS;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->fs = fs;
	p->window = window;
	p->half_cache = store_cache_bytes(fs->st) / 2;
	p->fetch = fs->node != NULL;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	if ((rc = ckpt_workers_start(&p->w, nthreads, ra_main, p)) < 0) {
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
		free(p);
		return rc;
	}
	fs->wr.ra = p;
	return 0;
}

void ra_stop(struct ckfs *fs)
{
	struct ra_pool *p = fs->wr.ra;

	if (!p)
		return;
	ckpt_workers_stop(&p->w, &p->mu, &p->cv, &p->stop);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	fs->wr.ra = NULL;
	free(p);
}

/* The window for file ino now, bytes (0: none); notes ino as read. Caller holds p->mu. */
static uint64_t window_locked(struct ra_pool *p, uint64_t ino)
{
	int64_t now = now_ns();
	unsigned active = 1, slot = RA_FILES, oldest = 0;

	for (unsigned i = 0; i < RA_FILES; i++) {
		if (p->files[i].ino == ino) {
			slot = i;
			continue;
		}
		if (p->files[i].at_ns && now - p->files[i].at_ns < RA_ACTIVE_NS)
			active++;
		if (p->files[i].at_ns < p->files[oldest].at_ns)
			oldest = i;
	}
	if (slot == RA_FILES)
		slot = oldest;
	p->files[slot].ino = ino;
	p->files[slot].at_ns = now;
	uint64_t w = p->half_cache / active;

	if (w > p->window)
		w = p->window;
	return w < RA_MIN ? 0 : w;
}

/* Queue h unless queued already or the queue is full (invariant 1). Caller holds p->mu. */
static void queue_locked(struct ra_pool *p, const uint8_t *h)
{
	for (unsigned i = 0; i < p->n; i++)
		if (memcmp(p->q[(p->head + i) % RA_QUEUE].b, h, STORE_HASH_LEN) == 0)
			return;
	if (p->n == RA_QUEUE)
		return;
	memcpy(p->q[(p->head + p->n) % RA_QUEUE].b, h, STORE_HASH_LEN);
	p->n++;
}

void ra_note_read(struct ckfs *fs, struct oinode *oi, uint64_t off, size_t len)
{
	struct ra_pool *p = fs->wr.ra;
	uint64_t end = off + len, last, to, w, want;
	size_t i;

	if (!p || len == 0 || oi->stage_fd >= 0)
		return;
	last = atomic_exchange(&oi->ra_last, end);
	if (off + RA_SLACK < last || off > last + RA_SLACK) {
		atomic_store(&oi->ra_to, end); /* a seek: no run yet */
		return;
	}
	to = atomic_load(&oi->ra_to);
	if (to < end)
		to = end;
	if (to >= oi->ext_end || to >= end + p->window / 2)
		return; /* nothing stored past to, or at least half the largest window queued */
	ckpt_lock(&p->mu, CKPT_RANK_RA);
	w = window_locked(p, oi->ino);
	want = end + w;
	if (want > oi->ext_end)
		want = oi->ext_end;
	if (w == 0 || to + w / 2 > want) {
		ckpt_unlock(&p->mu, CKPT_RANK_RA);
		return;
	}
	/* the extents overlapping [to, want): binary search for the first, then in order */
	size_t lo = 0, hi = oi->n_ext;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (oi->ext[mid].offset + oi->ext[mid].length <= to)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (i = lo; i < oi->n_ext && oi->ext[i].offset < want; i++)
		queue_locked(p, oi->ext[i].hash);
	if (i > lo)
		pthread_cond_broadcast(&p->cv);
	ckpt_unlock(&p->mu, CKPT_RANK_RA);
	atomic_store(&oi->ra_to, want);
}
