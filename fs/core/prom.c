/* SPDX-License-Identifier: MIT */
/*
 * prom.c — the Prometheus text exposition format (prom.h).
 */
#include "fs/core/prom.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#define append ckpt_text_printf

/* escaped - s with '\' and newline (and '"' when quote) escaped, as the format asks of HELP
 * text and label values. */
static void escaped(struct ckpt_text *p, const char *s, int quote)
{
	for (; *s; s++) {
		if (*s == '\\')
			append(p, "\\\\");
		else if (*s == '\n')
			append(p, "\\n");
		else if (*s == '"' && quote)
			append(p, "\\\"");
		else
			append(p, "%c", *s);
	}
}

void prom_family(struct ckpt_text *p, const char *name, const char *type, const char *help)
{
	append(p, "# HELP %s ", name);
	escaped(p, help, 0);
	append(p, "\n# TYPE %s %s\n", name, type);
}

/* head - "name" or "name{label=\"lvalue\"}", and the space before the value. */
static void head(struct ckpt_text *p, const char *name, const char *label, const char *lvalue)
{
	append(p, "%s", name);
	if (label) {
		append(p, "{%s=\"", label);
		escaped(p, lvalue ? lvalue : "", 1);
		append(p, "\"}");
	}
	append(p, " ");
}

void prom_u64(struct ckpt_text *p, const char *name, const char *label, const char *lvalue,
	      uint64_t value)
{
	head(p, name, label, lvalue);
	append(p, "%" PRIu64 "\n", value);
}

void prom_i64(struct ckpt_text *p, const char *name, const char *label, const char *lvalue,
	      int64_t value)
{
	head(p, name, label, lvalue);
	append(p, "%" PRId64 "\n", value);
}

void prom_double(struct ckpt_text *p, const char *name, const char *label, const char *lvalue,
		 double value)
{
	head(p, name, label, lvalue);
	if (isnan(value))
		append(p, "NaN\n");
	else if (isinf(value))
		append(p, "%sInf\n", value > 0 ? "+" : "-");
	else
		append(p, "%.9g\n", value);
}

void prom_hist(struct ckpt_text *p, const char *name, const char *help, struct ckpt_hist *h)
{
	uint64_t cum[CKPT_HIST_BUCKETS + 1];
	char le[32];
	double sum;

	ckpt_hist_read(h, cum, &sum);
	prom_family(p, name, "histogram", help);
	for (size_t i = 0; i < CKPT_HIST_BUCKETS; i++) {
		snprintf(le, sizeof(le), "%g", ckpt_hist_bound(i));
		append(p, "%s_bucket{le=\"%s\"} %" PRIu64 "\n", name, le, cum[i]);
	}
	append(p, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, cum[CKPT_HIST_BUCKETS]);
	append(p, "%s_sum %.6f\n%s_count %" PRIu64 "\n", name, sum, name, cum[CKPT_HIST_BUCKETS]);
}
