/* SPDX-License-Identifier: MIT */
/*
 * hist.c — latency histograms for the Prometheus metrics (.ckptfs/metrics and -o metrics=):
 * cumulative buckets in the exposition format's histogram shape, updated with atomics so the
 * committer and the step engine observe without a lock while meta.c renders.
 */
#include "fs/ckptfs.h"

/* Upper bounds in seconds. Prometheus client libraries' default buckets (.005 .. 10 s, e.g.
 * client_golang prometheus.DefBuckets) extended to 30 min, since saving a large step takes
 * minutes. */
static const double bounds[CKPT_HIST_BUCKETS] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
						  1,	 2.5,  5,     10,   30,	 60,   300,
						  1800 };

double ckpt_hist_bound(size_t i)
{
	return i < CKPT_HIST_BUCKETS ? bounds[i] : 0;
}

void ckpt_hist_observe(struct ckpt_hist *h, int64_t ns)
{
	double s = ns > 0 ? (double)ns / 1e9 : 0;
	size_t i = 0;

	while (i < CKPT_HIST_BUCKETS && s > bounds[i])
		i++;
	atomic_fetch_add(&h->bucket[i], 1); /* i == CKPT_HIST_BUCKETS: only in +Inf */
	atomic_fetch_add(&h->sum_ns, (uint64_t)(ns > 0 ? ns : 0));
}

void ckpt_hist_read(struct ckpt_hist *h, uint64_t cumulative[CKPT_HIST_BUCKETS + 1],
		    double *ret_sum_s)
{
	uint64_t run = 0;

	for (size_t i = 0; i <= CKPT_HIST_BUCKETS; i++) {
		run += atomic_load(&h->bucket[i]);
		cumulative[i] = run;
	}
	*ret_sum_s = (double)atomic_load(&h->sum_ns) / 1e9;
}
