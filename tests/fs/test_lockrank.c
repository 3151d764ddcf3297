/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of fs/core/lockrank.c, the daemon's lock order: locks taken in rising rank pass,
 * a lock of a lower or the same rank taken while a higher one is held aborts, and so does a
 * condition wait on a mutex below one the thread holds. Built without NDEBUG only (the checks
 * exist only there; tests/fs/meson.build).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "fs/core/lockrank.h"

static pthread_mutex_t fs_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t node_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t fly_a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t fly_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

Test(lockrank, rising_order_passes)
{
	struct timespec now;

	ckpt_lock(&fs_mu, CKPT_RANK_FS);
	ckpt_lock(&node_mu, CKPT_RANK_NODE);
	ckpt_lock(&fly_a, CKPT_RANK_FLY);
	ckpt_unlock(&fly_a, CKPT_RANK_FLY);
	clock_gettime(CLOCK_REALTIME, &now);
	/* the highest held: may wait */
	cr_assert_eq(ckpt_cond_wait(&cv, &node_mu, CKPT_RANK_NODE, &now), ETIMEDOUT);
	ckpt_unlock(&node_mu, CKPT_RANK_NODE);
	ckpt_unlock(&fs_mu, CKPT_RANK_FS);
	/* released: the lower rank may be taken again */
	ckpt_lock(&node_mu, CKPT_RANK_NODE);
	ckpt_unlock(&node_mu, CKPT_RANK_NODE);
	ckpt_lock(&fs_mu, CKPT_RANK_FS);
	ckpt_unlock(&fs_mu, CKPT_RANK_FS);
}

Test(lockrank, lower_rank_under_higher_aborts, .signal = SIGABRT)
{
	ckpt_lock(&node_mu, CKPT_RANK_NODE);
	ckpt_lock(&fs_mu, CKPT_RANK_FS); /* a tracker read's order reversed */
}

Test(lockrank, same_rank_twice_aborts, .signal = SIGABRT)
{
	ckpt_lock(&fly_a, CKPT_RANK_FLY);
	ckpt_lock(&fly_b, CKPT_RANK_FLY); /* two open files' locks: no order between them */
}

Test(lockrank, wait_below_a_held_lock_aborts, .signal = SIGABRT)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	ckpt_lock(&fs_mu, CKPT_RANK_FS);
	ckpt_lock(&node_mu, CKPT_RANK_NODE);
	/* waking, it would take fs->mu again while holding the node's */
	ckpt_cond_wait(&cv, &fs_mu, CKPT_RANK_FS, &now);
}

Test(lockrank, release_of_a_rank_not_held_aborts, .signal = SIGABRT)
{
	ckpt_unlock(&fs_mu, CKPT_RANK_FS);
}

static void *take_fs(void *arg)
{
	(void)arg;
	ckpt_lock(&fs_mu, CKPT_RANK_FS);
	ckpt_unlock(&fs_mu, CKPT_RANK_FS);
	return NULL;
}

Test(lockrank, each_thread_its_own_ranks)
{
	pthread_t t;

	ckpt_lock(&node_mu, CKPT_RANK_NODE);
	/* another thread, holding nothing, may take fs->mu while this one holds the node's */
	cr_assert_eq(pthread_create(&t, NULL, take_fs, NULL), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	ckpt_unlock(&node_mu, CKPT_RANK_NODE);
}
