/*
 * out.c — ckptctl's output: JSON documents through jansson, and the one progress line on
 * stderr that verify, export, import, gc and fsck update.
 *
 * Invariants of the progress line:
 *   1. At most one line is up at a time (there is one stderr); line_up says whether one is.
 *   2. A line is up only while stderr is a terminal: nothing progress-related is ever written
 *      to a pipe or a file.
 *   3. ctl_err erases an up line first (ctl_progress_hide), so an error message never lands at
 *      the end of a progress line.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"

int ctl_print(const char *schema, json_t *obj)
{
	json_t *doc;
	int rc;

	if (!json_is_object(obj)) {
		json_decref(obj);
		return -ENOMEM;
	}
	/* jansson keeps members in insertion order: "schema" comes first, as a reader expects */
	doc = json_pack("{s:s}", "schema", schema);
	if (!doc || json_object_update(doc, obj) < 0) {
		json_decref(doc);
		json_decref(obj);
		return -ENOMEM;
	}
	json_decref(obj);
	rc = json_dumpf(doc, stdout, JSON_INDENT(2)) < 0 ? -EIO : 0;
	fputc('\n', stdout);
	json_decref(doc);
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

/* invariant 1: whether a progress line is up on stderr */
static bool line_up;

/* elapsed_ns - nanoseconds from a to b (b later). */
static int64_t elapsed_ns(const struct timespec *a, const struct timespec *b)
{
	return (int64_t)(b->tv_sec - a->tv_sec) * 1000000000 + (b->tv_nsec - a->tv_nsec);
}

void ctl_progress_init(struct ctl_progress *p)
{
	p->tty = isatty(STDERR_FILENO);
	p->last = (struct timespec){ 0 };
	clock_gettime(CLOCK_MONOTONIC, &p->start);
}

bool ctl_progress_due(struct ctl_progress *p, bool force)
{
	struct timespec now;

	if (!p->tty)
		return false;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (!force && elapsed_ns(&p->last, &now) < 100000000)
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
	line_up = true;
}

/*
 * fmt_left - seconds as "M:SS" below an hour, else "H:MM:SS", into buf (cap bytes); rounded up,
 * so that "0:00" means done.
 */
static char *fmt_left(double secs, char *buf, size_t cap)
{
	uint64_t s;

	if (secs > 1e8) /* over three years: no estimate worth printing */
		secs = 1e8;
	s = (uint64_t)secs;
	if ((double)s < secs)
		s++;
	if (s < 3600)
		snprintf(buf, cap, "%" PRIu64 ":%02" PRIu64, s / 60, s % 60);
	else
		snprintf(buf, cap, "%" PRIu64 ":%02" PRIu64 ":%02" PRIu64, s / 3600, s / 60 % 60,
			 s % 60);
	return buf;
}

void ctl_progress_work(struct ctl_progress *p, bool force, const char *what, const char *noun,
		       uint64_t done, uint64_t total, uint64_t bytes_done, uint64_t bytes_total)
{
	char sdone[32], stotal[32], srate[32] = "--", sleft[32] = "--";
	struct timespec now;
	double secs;

	if (!ctl_progress_due(p, force))
		return;
	/* totals are estimates for some phases (gc's scan): never show more done than there is */
	if (total < done)
		total = done;
	if (bytes_total < bytes_done)
		bytes_total = bytes_done;
	clock_gettime(CLOCK_MONOTONIC, &now);
	secs = (double)elapsed_ns(&p->start, &now) / 1e9;
	if (bytes_done && secs > 0)
		ctl_short_size((uint64_t)((double)bytes_done / secs), srate, sizeof(srate));
	/* time left by bytes; by count when the phase has no bytes to go by */
	if (bytes_total ? bytes_done == bytes_total : done == total)
		fmt_left(0, sleft, sizeof(sleft));
	else if (bytes_total && bytes_done && secs > 0)
		fmt_left((double)(bytes_total - bytes_done) * secs / (double)bytes_done, sleft,
			 sizeof(sleft));
	else if (!bytes_total && done && secs > 0)
		fmt_left((double)(total - done) * secs / (double)done, sleft, sizeof(sleft));
	ctl_progress_line(p, "%s: %" PRIu64 "/%" PRIu64 " %s, %s/%s, %s/s, %s left", what, done,
			  total, noun, ctl_short_size(bytes_done, sdone, sizeof(sdone)),
			  ctl_short_size(bytes_total, stotal, sizeof(stotal)), srate, sleft);
}

void ctl_progress_hide(void)
{
	if (line_up) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
		line_up = false;
	}
}

void ctl_progress_clear(const struct ctl_progress *p)
{
	if (p->tty)
		ctl_progress_hide();
}
