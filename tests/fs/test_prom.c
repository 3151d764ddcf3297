/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of fs/core/prom.c, the one writer of the Prometheus text exposition format: the
 * escapes the format requires (HELP: '\' and newline; label values: also '"'), integers printed
 * exactly, NaN and infinities by name, a histogram's cumulative buckets, and text longer than any
 * fixed buffer (node_metrics wrote into 4096 bytes before).
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fs/core/prom.h"

Test(prom, family_and_samples)
{
	struct ckpt_text p = { 0 };

	prom_family(&p, "ckptfs_x_total", "counter", "A \\ back\nslash.");
	prom_u64(&p, "ckptfs_x_total", NULL, NULL, UINT64_MAX);
	prom_i64(&p, "ckptfs_x_total", "layout", "a\"b\\c\nd", -2);
	prom_double(&p, "ckptfs_x_total", "k", "v", 0.25);
	prom_double(&p, "ckptfs_x_total", NULL, NULL, NAN);
	prom_double(&p, "ckptfs_x_total", NULL, NULL, -INFINITY);
	cr_assert_eq(p.err, 0);
	cr_assert_str_eq(p.buf, "# HELP ckptfs_x_total A \\\\ back\\nslash.\n"
				"# TYPE ckptfs_x_total counter\n"
				"ckptfs_x_total 18446744073709551615\n"
				"ckptfs_x_total{layout=\"a\\\"b\\\\c\\nd\"} -2\n"
				"ckptfs_x_total{k=\"v\"} 0.25\n"
				"ckptfs_x_total NaN\n"
				"ckptfs_x_total -Inf\n");
	cr_assert_eq(p.len, strlen(p.buf));
	ckpt_text_free(&p);
	cr_assert_null(p.buf);
	cr_assert_eq(p.len, 0);
}

Test(prom, histogram)
{
	struct ckpt_hist h = { 0 };
	struct ckpt_text p = { 0 };
	char want[128];

	ckpt_hist_observe(&h, 3000000);	      /* 3 ms: in every bucket */
	ckpt_hist_observe(&h, 4000000000LL); /* 4 s: from the 5 s bucket on */
	prom_hist(&p, "ckptfs_save_seconds", "Save.", &h);
	cr_assert_eq(p.err, 0);
	cr_assert(strstr(p.buf, "# TYPE ckptfs_save_seconds histogram\n"));
	cr_assert(strstr(p.buf, "ckptfs_save_seconds_bucket{le=\"0.005\"} 1\n"));
	cr_assert(strstr(p.buf, "ckptfs_save_seconds_bucket{le=\"2.5\"} 1\n"));
	cr_assert(strstr(p.buf, "ckptfs_save_seconds_bucket{le=\"5\"} 2\n"));
	cr_assert(strstr(p.buf, "ckptfs_save_seconds_bucket{le=\"+Inf\"} 2\n"));
	snprintf(want, sizeof(want), "ckptfs_save_seconds_sum %.6f\nckptfs_save_seconds_count 2\n",
		 4.003);
	cr_assert(strstr(p.buf, want), "%s", p.buf);
	ckpt_text_free(&p);
}

Test(prom, grows_past_any_fixed_buffer)
{
	struct ckpt_text p = { 0 };
	char label[32];

	for (int i = 0; i < 2000; i++) {
		snprintf(label, sizeof(label), "node%04d", i);
		prom_u64(&p, "ckptfs_remote_parts", "node", label, (uint64_t)i);
	}
	cr_assert_eq(p.err, 0);
	cr_assert_gt(p.len, 60000);
	cr_assert(strstr(p.buf, "ckptfs_remote_parts{node=\"node1999\"} 1999\n"));
	ckpt_text_free(&p);
}
