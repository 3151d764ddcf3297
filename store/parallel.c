/* SPDX-License-Identifier: MIT */
/*
 * parallel.c — one way to run a function on several threads at once (store_parallel, store.h),
 * for the work that shares itself out: chunk verification here, the node's chunk uploads,
 * ckptctl import's chunk puts.
 */
#include <pthread.h>

#include "store/store.h"

unsigned store_parallel(unsigned nthreads, void *(*fn)(void *), void *arg)
{
	pthread_t th[STORE_PARALLEL_MAX];
	unsigned started = 0;

	if (nthreads > STORE_PARALLEL_MAX)
		nthreads = STORE_PARALLEL_MAX;
	/* the caller is one of the threads; a thread that cannot start leaves its share to the
	 * others (fn shares the work out itself) */
	while (started + 1 < nthreads && pthread_create(&th[started], NULL, fn, arg) == 0)
		started++;
	fn(arg);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	return started + 1;
}
