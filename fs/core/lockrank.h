/* SPDX-License-Identifier: MIT */
/*
 * lockrank.h — the daemon's lock order, written once and checked.
 *
 * Every mutex of the daemon's layers (fs/) has a rank below; a thread takes mutexes in rising
 * rank only, so no two threads can each hold what the other waits for. In a build without
 * NDEBUG (meson's default, -Db_ndebug=false; CI's builds and the sanitizer build) every
 * ckpt_lock checks that the thread holds no mutex of the same or a higher rank, and every
 * ckpt_cond_wait that the mutex it releases is the highest the thread holds (waking, it takes
 * that mutex again while holding the others); a breach logs both ranks and aborts, so a test
 * that reaches it fails where the order broke, not in a rare deadlock. With NDEBUG the calls
 * are pthread_mutex_lock and friends. The store's and the index's own locks (store/, index/)
 * are below every rank here: they are taken inside them and never call up. fs->fuse.inval_mu
 * (fuse/daemon.c fs_flush_inval) is outside the order: it is taken with a deadline, before
 * fs->mu, and a wait that passes the deadline gives up.
 *
 * The order, outermost first, and why each sits where it does:
 */
#ifndef CKPTFS_LOCKRANK_H
#define CKPTFS_LOCKRANK_H

#include <pthread.h>
#include <time.h>

enum ckpt_rank {
	CKPT_RANK_DIRSNAP = 0, /* a directory handle's snapshot (fuse/ops_dir.c): a READDIR holds
				  it across its whole reply, index reads under fs->mu included */
	CKPT_RANK_FS,          /* fs->mu: the index, the open-file table, step state */
	CKPT_RANK_NODE,        /* the node's parts and keys (node/): read by tracker answers
				  under fs->mu */
	CKPT_RANK_NODE_JOB,    /* one node job's result (node/node.c) */
	CKPT_RANK_COMMIT,      /* the commit queue (write/commit.c): queued to under fs->mu */
	CKPT_RANK_PINS,        /* the pins' recode state (write/pins.c) */
	CKPT_RANK_FLY,         /* an open file's chunks in flight (oi->fly_mu) */
	CKPT_RANK_WB,          /* the write-back pool (write/wb.c) */
	CKPT_RANK_RA,          /* the read-ahead pool (write/ra.c) */
	CKPT_RANK_SPACE,       /* the space reserve (write/space.c) */
	CKPT_RANK_REPORT,      /* the mount's report (steps/steps_report.c) */
	CKPT_RANK_STATS,       /* the whole-store figures' scan (fs->fuse.stats.mu): held across
				  a scan of the index on the figures' own reader handle */
	CKPT_RANK_STATS_KEPT,  /* the figures kept (fs->fuse.stats.kept_mu): held only to copy
				  them, so a stat(2) never waits for a scan */
	CKPT_RANK_NODE_FETCH,  /* the node's idle object buffers (node/node.c fetch_buf_get):
				  held only to take or give back one */
	CKPT_RANK_COUNT
};

#ifdef NDEBUG
static inline void ckpt_lock(pthread_mutex_t *m, enum ckpt_rank r)
{
	(void)r;
	pthread_mutex_lock(m);
}

static inline void ckpt_unlock(pthread_mutex_t *m, enum ckpt_rank r)
{
	(void)r;
	pthread_mutex_unlock(m);
}

static inline int ckpt_cond_wait(pthread_cond_t *cv, pthread_mutex_t *m, enum ckpt_rank r,
				 const struct timespec *until)
{
	(void)r;
	return until ? pthread_cond_timedwait(cv, m, until) : pthread_cond_wait(cv, m);
}
#else
/*
 * ckpt_lock - pthread_mutex_lock(m), m of rank r; aborts (after a log line naming the ranks)
 * when this thread holds a mutex of rank r or higher. Thread-safe (the held ranks are the
 * thread's own).
 */
void ckpt_lock(pthread_mutex_t *m, enum ckpt_rank r);
/* ckpt_unlock - pthread_mutex_unlock(m), m of rank r; aborts when the thread holds no rank r. */
void ckpt_unlock(pthread_mutex_t *m, enum ckpt_rank r);
/*
 * ckpt_cond_wait - pthread_cond_wait(cv, m), or pthread_cond_timedwait until `until` (the
 * clock cv was made with) when until is not NULL; m of rank r. Returns what the pthread call
 * returns (0, ETIMEDOUT). Aborts when the thread holds a mutex above rank r, or not r.
 */
int ckpt_cond_wait(pthread_cond_t *cv, pthread_mutex_t *m, enum ckpt_rank r,
		   const struct timespec *until);
#endif

#endif /* CKPTFS_LOCKRANK_H */
