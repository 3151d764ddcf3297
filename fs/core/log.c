/* SPDX-License-Identifier: MIT */
/*
 * log.c — the daemon's one logging helper (STYLE.md: fs/ logs once, at the boundary).
 */
#include "fs/ckptfs.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* a log line longer than this is cut (a path is at most PATH_MAX) */
#define CKPT_LOG_LINE 8192

void ckpt_log(const char *fmt, ...)
{
	char line[CKPT_LOG_LINE];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line))
		n = (int)sizeof(line) - 1;
	/* one stdio call per line, so lines of several threads do not interleave */
	fprintf(stderr, "ckptfs: %s%s", line, n > 0 && line[n - 1] == '\n' ? "" : "\n");
}
