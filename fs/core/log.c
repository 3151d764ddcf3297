/* SPDX-License-Identifier: MIT */
/*
 * log.c — the daemon's one logging helper (STYLE.md: fs/ logs once, at the boundary).
 */
#include "fs/ckptfs.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* a log line longer than this is cut (a path is at most PATH_MAX) */
#define CKPT_LOG_LINE 8192

static void ckpt_logv(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

void ckpt_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ckpt_logv(fmt, ap);
	va_end(ap);
}

void ckpt_logv_limited(struct ckpt_ratelimit *rl, const char *fmt, va_list ap)
{
	struct timespec ts;
	unsigned long held = 0;
	bool write = false;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;

	pthread_mutex_lock(&rl->mu);
	if (rl->start_ns == 0 || now - rl->start_ns >= rl->window_ns) {
		rl->start_ns = now;
		rl->n = 0;
	}
	if (rl->n < rl->burst) {
		rl->n++;
		write = true;
		held = rl->held;
		rl->held = 0;
	} else {
		rl->held++;
	}
	pthread_mutex_unlock(&rl->mu);
	if (!write)
		return;
	if (held)
		ckpt_log("(%lu lines like the next one held back)", held);
	ckpt_logv(fmt, ap);
}

static void ckpt_logv(const char *fmt, va_list ap)
{
	char line[CKPT_LOG_LINE];
	int n;

	n = vsnprintf(line, sizeof(line), fmt, ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line))
		n = (int)sizeof(line) - 1;
	/* one stdio call per line, so lines of several threads do not interleave */
	fprintf(stderr, "ckptfs: %s%s", line, n > 0 && line[n - 1] == '\n' ? "" : "\n");
}
