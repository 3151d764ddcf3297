/* SPDX-License-Identifier: MIT */
/*
 * layout_int.h — what layout.c and layout_mf1.c share: byte-span helpers and a bounded output
 * buffer. Internal to fs/policy/; no state, no allocation, thread-safe.
 */
#ifndef CKPTFS_FS_POLICY_LAYOUT_INT_H
#define CKPTFS_FS_POLICY_LAYOUT_INT_H

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fs/policy/layout.h"

static inline bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* s[0, n) is one or more ASCII digits whose value fits int64_t: store it in *out. */
static inline bool parse_digits(const char *s, size_t n, int64_t *out)
{
	int64_t v = 0;

	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (!is_digit(s[i]))
			return false;
		int d = s[i] - '0';
		if (v > (INT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

static inline bool eq(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* A bare file name: non-empty, no '/', no NUL, not "." or "..", at most NAME_MAX bytes. */
static inline bool bare_name(const char *s, size_t n)
{
	return n > 0 && n <= LAYOUT_NAME_MAX && memchr(s, '/', n) == NULL &&
	       memchr(s, '\0', n) == NULL && !eq(s, n, ".") && !eq(s, n, "..");
}


/* ---- bounded output: writes into buf[0, cap), always NUL-terminated; full once it would not
 * fit, and then every later write is dropped and out_done says -ENOSPC ---------------------- */

struct out {
	char *buf;
	size_t cap;
	size_t len;
	bool full;
};

static inline void out_bytes(struct out *o, const char *s, size_t n)
{
	if (o->full || o->cap - o->len <= n) { /* keep a byte for the NUL */
		o->full = true;
		return;
	}
	memcpy(o->buf + o->len, s, n);
	o->len += n;
	o->buf[o->len] = '\0';
}

static inline void out_str(struct out *o, const char *s)
{
	out_bytes(o, s, strlen(s));
}

static inline void out_i64(struct out *o, int64_t v, unsigned width)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof(tmp), "%0*" PRId64, (int)width, v);

	assert(n > 0 && (size_t)n < sizeof(tmp));
	out_bytes(o, tmp, (size_t)n);
}

static inline int out_done(struct out *o)
{
	if (o->full)
		return -ENOSPC;
	assert(o->len > 0 && o->len <= INT32_MAX);
	return (int)o->len;
}

/* Room for cap bytes: -EINVAL for NULL with cap > 0; cap 0 always gives -ENOSPC. */
static inline int out_init(struct out *o, char *buf, size_t cap)
{
	if (buf == NULL && cap > 0)
		return -EINVAL;
	*o = (struct out){ .buf = buf, .cap = cap, .len = 0, .full = cap == 0 };
	if (cap > 0)
		buf[0] = '\0';
	return 0;
}

/*
 * layout_mf1_json_parse - MindFormers 1.0's meta.json (buf, len bytes, len <= LAYOUT_TRACKER_MAX)
 * into *ret (step, epoch, ckpt_file). Returns 0 or -EINVAL (not such a tracker; jansson out of
 * memory is reported as -EINVAL too: the tracker is then unreadable). Thread-safe.
 */
int layout_mf1_json_parse(const char *buf, size_t len, struct layout_tracker *ret);

/*
 * layout_mf1_json_format - append t as MindFormers 1.0 writes meta.json (json.dump of three keys,
 * ensure_ascii) to o. Returns 0, or -EINVAL (epoch < 0, ckpt_file not a bare UTF-8 name); o may
 * be full afterwards (out_done says so). Thread-safe.
 */
int layout_mf1_json_format(const struct layout_tracker *t, struct out *o);

#endif
