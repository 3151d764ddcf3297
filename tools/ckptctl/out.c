/*
 * out.c — ckptctl's output: JSON documents through jansson, and the one progress line on
 * stderr that verify, export and import update.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"

int ctl_print(json_t *obj)
{
	int rc;

	if (!obj)
		return -ENOMEM;
	rc = json_dumpf(obj, stdout, JSON_INDENT(2)) < 0 ? -EIO : 0;
	fputc('\n', stdout);
	json_decref(obj);
	return rc;
}

json_t *ctl_u64(uint64_t v)
{
	return json_integer((json_int_t)v);
}

json_t *ctl_store_json(const char *root, const struct ckpt_repo *r)
{
	return json_pack("{s:s, s:b, s:o}", "store", root, "mounted", (int)r->mounted, "owner_pid",
			 r->mounted ? json_integer(r->owner_pid) : json_null());
}

void ctl_progress_init(struct ctl_progress *p)
{
	p->tty = isatty(STDERR_FILENO);
	p->last = (struct timespec){ 0 };
}

bool ctl_progress_due(struct ctl_progress *p, bool force)
{
	struct timespec now;

	if (!p->tty)
		return false;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (!force && (now.tv_sec - p->last.tv_sec) * 1000000000L + (now.tv_nsec - p->last.tv_nsec) <
			      100000000L)
		return false;
	p->last = now;
	return true;
}

void ctl_progress_line(const struct ctl_progress *p, const char *fmt, ...)
{
	va_list ap;

	if (!p->tty)
		return;
	fputs("\r", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\033[K", stderr);
	fflush(stderr);
}

void ctl_progress_clear(const struct ctl_progress *p)
{
	if (p->tty) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
}
