/* SPDX-License-Identifier: MIT */
/* workers.c — see workers.h. */
#include <errno.h>

#include "fs/core/workers.h"

int ckpt_workers_start(struct ckpt_workers *w, unsigned want, void *(*fn)(void *), void *arg)
{
	int rc = 0;

	if (want == 0)
		return -EINVAL;
	if (want > CKPT_WORKERS_MAX)
		want = CKPT_WORKERS_MAX;
	w->n = 0;
	while (w->n < want && (rc = pthread_create(&w->th[w->n], NULL, fn, arg)) == 0)
		w->n++;
	return w->n ? (int)w->n : -rc;
}

void ckpt_workers_stop(struct ckpt_workers *w, pthread_mutex_t *mu, pthread_cond_t *cv,
		       bool *stop)
{
	pthread_mutex_lock(mu);
	*stop = true;
	pthread_cond_broadcast(cv);
	pthread_mutex_unlock(mu);
	for (unsigned i = 0; i < w->n; i++)
		pthread_join(w->th[i], NULL);
	w->n = 0;
}
