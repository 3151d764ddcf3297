/* SPDX-License-Identifier: MIT */
/*
 * text.c — a growing text buffer (text.h).
 */
#include "fs/core/text.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ckpt_text_printf(struct ckpt_text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->err)
		return;
	va_start(ap, fmt);
	n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? t->cap - t->len : 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		t->err = -EIO;
		return;
	}
	if (t->buf && t->len + (size_t)n < t->cap) {
		t->len += (size_t)n;
		return;
	}
	size_t nc = t->cap ? t->cap : 4096;

	while (nc < t->len + (size_t)n + 1)
		nc *= 2;
	char *b = realloc(t->buf, nc);

	if (!b) {
		t->err = -ENOMEM;
		return;
	}
	t->buf = b;
	t->cap = nc;
	va_start(ap, fmt);
	vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
	va_end(ap);
	t->len += (size_t)n;
}

void ckpt_text_free(struct ckpt_text *t)
{
	free(t->buf);
	memset(t, 0, sizeof(*t));
}
