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

int json_print(json_t *obj)
{
	int rc;

	if (!obj)
		return -ENOMEM;
	rc = json_dumpf(obj, stdout, JSON_INDENT(2)) < 0 ? -EIO : 0;
	fputc('\n', stdout);
	json_decref(obj);
	return rc;
}

json_t *json_u64(uint64_t v)
{
	return json_integer((json_int_t)v);
}

/* utf8_seq - length of the valid UTF-8 sequence (RFC 3629: no overlong form, no surrogate)
 * at p (n bytes left, n > 0), or 0 when p[0] does not start one. */
static size_t utf8_seq(const uint8_t *p, size_t n)
{
	/* the second byte's range excludes overlong forms (e0, f0), surrogates (ed) and code
	 * points above U+10FFFF (f4) */
	uint8_t lo = p[0] == 0xe0 ? 0xa0 : p[0] == 0xf0 ? 0x90 : 0x80;
	uint8_t hi = p[0] == 0xed ? 0x9f : p[0] == 0xf4 ? 0x8f : 0xbf;
	size_t len;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++)
		if (p[i] < (i == 1 ? lo : 0x80) || p[i] > (i == 1 ? hi : 0xbf))
			return 0;
	return len;
}

json_t *json_name(const char *name)
{
	const uint8_t *p = (const uint8_t *)name;
	size_t n = strlen(name), o = 0;
	json_t *j = json_string(name);
	char *buf;

	if (j)
		return j;
	buf = malloc(3 * n + 1);
	if (!buf)
		return NULL;
	for (size_t i = 0; i < n;) {
		size_t k = utf8_seq(p + i, n - i);

		if (k) {
			memcpy(buf + o, p + i, k);
			o += k;
			i += k;
		} else {
			memcpy(buf + o, "\xef\xbf\xbd", 3); /* U+FFFD */
			o += 3;
			i++;
		}
	}
	buf[o] = '\0';
	j = json_string(buf);
	free(buf);
	return j;
}

json_t *json_time(int64_t ns)
{
	char t[40];

	return ns ? json_string(fmt_time(ns, t, sizeof(t))) : json_null();
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
