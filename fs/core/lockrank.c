/* SPDX-License-Identifier: MIT */
/* lockrank.c — see lockrank.h. */
#include "fs/core/lockrank.h"

#ifndef NDEBUG
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fs/ckptfs.h"

_Static_assert(CKPT_RANK_COUNT <= 32, "the held ranks are one 32-bit mask");

/* The ranks this thread holds, one bit each. */
static _Thread_local uint32_t held;

static const char *const rank_names[CKPT_RANK_COUNT] = {
	"dirsnap", "fs", "node", "node job", "commit", "pins", "fly", "write-back",
	"read-ahead", "space", "report", "stats", "stats kept",
};

static void breach(const char *what, enum ckpt_rank r)
{
	int top = 31 - __builtin_clz(held | 1u);

	ckpt_log("lock order broken: %s the '%s' lock (rank %d) while holding ranks 0x%x "
		 "(highest '%s'); fs/core/lockrank.h gives the order", what, rank_names[r], (int)r,
		 held, held ? rank_names[top] : "none");
	fprintf(stderr, "ckptfs: lock order broken: %s '%s' (rank %d), held 0x%x\n", what,
		rank_names[r], (int)r, held);
	abort();
}

void ckpt_lock(pthread_mutex_t *m, enum ckpt_rank r)
{
	if (held >> r)
		breach("taking", r);
	pthread_mutex_lock(m);
	held |= 1u << r;
}

void ckpt_unlock(pthread_mutex_t *m, enum ckpt_rank r)
{
	if (!(held & (1u << r)))
		breach("releasing", r);
	held &= ~(1u << r);
	pthread_mutex_unlock(m);
}

int ckpt_cond_wait(pthread_cond_t *cv, pthread_mutex_t *m, enum ckpt_rank r,
		   const struct timespec *until)
{
	if ((held >> r) != 1u)
		breach("waiting on", r);
	return until ? pthread_cond_timedwait(cv, m, until) : pthread_cond_wait(cv, m);
}
#endif
