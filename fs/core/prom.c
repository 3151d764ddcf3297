/* SPDX-License-Identifier: MIT */
/*
 * prom.c — the Prometheus text exposition format (prom.h).
 */
#include "fs/core/prom.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void prom_free(struct prom *p)
{
	free(p->buf);
	memset(p, 0, sizeof(*p));
}

/* append - vsnprintf onto the text, growing the buffer; on failure remember -ENOMEM. */
static void append(struct prom *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void append(struct prom *p, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (p->err)
		return;
	va_start(ap, fmt);
	n = vsnprintf(p->buf ? p->buf + p->len : NULL, p->buf ? p->cap - p->len : 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		p->err = -EIO;
		return;
	}
	if (p->buf && p->len + (size_t)n < p->cap) {
		p->len += (size_t)n;
		return;
	}
	size_t nc = p->cap ? p->cap : 4096;

	while (nc < p->len + (size_t)n + 1)
		nc *= 2;
	char *b = realloc(p->buf, nc);

	if (!b) {
		p->err = -ENOMEM;
		return;
	}
	p->buf = b;
	p->cap = nc;
	va_start(ap, fmt);
	vsnprintf(p->buf + p->len, p->cap - p->len, fmt, ap);
	va_end(ap);
	p->len += (size_t)n;
}

/* escaped - s with '\' and newline (and '"' when quote) escaped, as the format asks of HELP
 * text and label values. */
static void escaped(struct prom *p, const char *s, int quote)
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

void prom_family(struct prom *p, const char *name, const char *type, const char *help)
{
	append(p, "# HELP %s ", name);
	escaped(p, help, 0);
	append(p, "\n# TYPE %s %s\n", name, type);
}

/* head - "name" or "name{label=\"lvalue\"}", and the space before the value. */
static void head(struct prom *p, const char *name, const char *label, const char *lvalue)
{
	append(p, "%s", name);
	if (label) {
		append(p, "{%s=\"", label);
		escaped(p, lvalue ? lvalue : "", 1);
		append(p, "\"}");
	}
	append(p, " ");
}

void prom_u64(struct prom *p, const char *name, const char *label, const char *lvalue,
	      uint64_t value)
{
	head(p, name, label, lvalue);
	append(p, "%" PRIu64 "\n", value);
}

void prom_i64(struct prom *p, const char *name, const char *label, const char *lvalue,
	      int64_t value)
{
	head(p, name, label, lvalue);
	append(p, "%" PRId64 "\n", value);
}

void prom_double(struct prom *p, const char *name, const char *label, const char *lvalue,
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

void prom_hist(struct prom *p, const char *name, const char *help, struct ckpt_hist *h)
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
