/* SPDX-License-Identifier: MIT */
/*
 * workers.h — the start and stop of the daemon's long-lived worker threads (write-back, the
 * committer, read-ahead, the step reaper, the node thread), written once.
 *
 * Every such pool has the same shape: threads that wait on a condition variable under the
 * pool's mutex until there is work or a stop flag is set. Only the start and the stop are here;
 * what a worker does, and the pool's lock and condition, stay with its owner. A short-lived
 * fan-out that returns when the work is done is store_parallel (store/store.h) instead.
 */
#ifndef CKPTFS_WORKERS_H
#define CKPTFS_WORKERS_H

#include <pthread.h>
#include <stdbool.h>

/* The most threads one pool runs (write.h WB_MAX_THREADS is the largest pool). */
#define CKPT_WORKERS_MAX 16

struct ckpt_workers {
	pthread_t th[CKPT_WORKERS_MAX];
	unsigned n; /* threads running: 0 before ckpt_workers_start and after ckpt_workers_stop */
};

/*
 * ckpt_workers_start - start up to want threads (1..CKPT_WORKERS_MAX; more count as the most),
 * each running fn(arg). w must be zeroed or stopped. A thread that cannot be started ends the
 * start with fewer: a smaller pool still serves. Returns how many run (1..want), -EINVAL when
 * want is 0, or the -errno of pthread_create when none could start (w->n is then 0). Not
 * thread-safe against another call on w.
 */
int ckpt_workers_start(struct ckpt_workers *w, unsigned want, void *(*fn)(void *), void *arg);

/*
 * ckpt_workers_stop - set *stop under mu, wake every thread waiting on cv, and join them all;
 * w->n is then 0. Each worker must return once it sees *stop (read under mu). Does nothing but
 * set the flag when no thread runs. mu must not be held by the caller. Not thread-safe against
 * another call on w.
 */
void ckpt_workers_stop(struct ckpt_workers *w, pthread_mutex_t *mu, pthread_cond_t *cv,
		       bool *stop);

#endif /* CKPTFS_WORKERS_H */
