/*
 * lease.c — the leases of the gc protocol: format, parse, judge, read and write (lease.h).
 *
 * Invariants:
 *   1. A lease is judged in lease_judge only: the daemon and ckptctl both call it, through
 *      lease_read or directly.
 *   2. Doubt counts as live: an object that does not parse is -EBADMSG, which callers treat as
 *      a live lease, and a renewal time ahead of the reader's clock is live. A lease judged
 *      stale by mistake lets an upload and a gc run at once (a chunk an upload found on the
 *      remote could be removed under it); one judged live by mistake only delays one of them.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "fs/node/lease.h"

#define NS_PER_S ((int64_t)1000000000)

int64_t lease_now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * NS_PER_S + t.tv_nsec;
}

void lease_init(struct lease *ret, const char *holder, int64_t expiry_s, int64_t now_ns)
{
	memset(ret, 0, sizeof(*ret));
	snprintf(ret->holder, sizeof(ret->holder), "%s", holder);
	if (gethostname(ret->host, sizeof(ret->host)) < 0)
		snprintf(ret->host, sizeof(ret->host), "?");
	ret->host[sizeof(ret->host) - 1] = '\0';
	ret->pid = (int64_t)getpid();
	ret->created_ns = ret->renewed_ns = now_ns;
	ret->expiry_s = expiry_s;
}

int lease_format(const struct lease *l, char *buf, size_t cap)
{
	json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I}", "format", LEASE_FORMAT,
			      "holder", l->holder, "host", l->host, "pid", (json_int_t)l->pid,
			      "created_ns", (json_int_t)l->created_ns, "renewed_ns",
			      (json_int_t)l->renewed_ns, "expiry_s", (json_int_t)l->expiry_s);
	size_t len;

	if (!o)
		return -ENOMEM;
	len = json_dumpb(o, buf, cap, JSON_COMPACT);
	json_decref(o);
	if (len == 0)
		return -ENOMEM;
	if (len >= cap)
		return -ENAMETOOLONG;
	buf[len] = '\0';
	return (int)len;
}

int lease_parse(const void *buf, size_t len, struct lease *ret)
{
	json_t *o = json_loadb(buf, len, 0, NULL);
	json_t *created = json_object_get(o, "created_ns"), *renewed = json_object_get(o, "renewed_ns");
	json_t *expiry = json_object_get(o, "expiry_s"), *pid = json_object_get(o, "pid");
	const char *format = json_string_value(json_object_get(o, "format"));
	const char *holder = json_string_value(json_object_get(o, "holder"));
	const char *host = json_string_value(json_object_get(o, "host"));
	struct lease l = { 0 };
	int rc = -EBADMSG;

	if (!o || !format || strcmp(format, LEASE_FORMAT) != 0 || !json_is_integer(created) ||
	    !json_is_integer(expiry) || (renewed && !json_is_integer(renewed)))
		goto out;
	l.created_ns = json_integer_value(created);
	l.renewed_ns = renewed ? json_integer_value(renewed) : l.created_ns;
	l.expiry_s = json_integer_value(expiry);
	/* an expiry past a century could overflow the judgement's nanoseconds */
	if (l.expiry_s < 1 || l.expiry_s > 100LL * 366 * 86400 || l.renewed_ns < l.created_ns)
		goto out;
	l.pid = json_is_integer(pid) ? json_integer_value(pid) : 0;
	snprintf(l.holder, sizeof(l.holder), "%s", holder ? holder : "?");
	snprintf(l.host, sizeof(l.host), "%s", host ? host : "?");
	*ret = l;
	rc = 0;
out:
	json_decref(o);
	return rc;
}

int lease_judge(const struct lease *l, int64_t now_ns)
{
	/* the difference in uint64: exact for any now > renewed; expiry_s is at most a century
	 * (lease_parse), so its nanoseconds fit too */
	if (now_ns <= l->renewed_ns)
		return LEASE_LIVE;
	if ((uint64_t)now_ns - (uint64_t)l->renewed_ns > (uint64_t)l->expiry_s * NS_PER_S)
		return LEASE_STALE;
	return LEASE_LIVE;
}

int lease_read(struct remote *r, const char *key, int64_t now_ns, struct lease *ret)
{
	struct lease l;
	size_t len;
	void *buf;
	int rc = remote_get(r, key, &buf, &len);

	if (rc == -ENOENT)
		return LEASE_ABSENT;
	if (rc < 0)
		return rc;
	rc = lease_parse(buf, len, &l);
	free(buf);
	if (rc < 0)
		return rc;
	*ret = l;
	return lease_judge(&l, now_ns);
}

int lease_put(struct remote *r, const char *key, const struct lease *l, bool if_absent)
{
	char text[LEASE_TEXT_MAX];
	int len = lease_format(l, text, sizeof(text));

	if (len < 0)
		return len;
	return if_absent ? remote_put_if_absent(r, key, text, (size_t)len)
			 : remote_put(r, key, text, (size_t)len);
}

bool lease_same(const struct lease *a, const struct lease *b)
{
	return a->pid == b->pid && a->created_ns == b->created_ns &&
	       strcmp(a->holder, b->holder) == 0 && strcmp(a->host, b->host) == 0;
}

char *lease_time(int64_t t, char *buf, size_t cap)
{
	time_t s = (time_t)(t / NS_PER_S);
	struct tm tm;

	if (!gmtime_r(&s, &tm) || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(buf, cap, "%" PRId64 " ns", t);
	return buf;
}

char *lease_describe(const struct lease *l, char *buf, size_t cap)
{
	char since[32];

	snprintf(buf, cap, "'%s' pid %" PRId64 " on '%s' since %s", l->holder, l->pid, l->host,
		 lease_time(l->created_ns, since, sizeof(since)));
	return buf;
}
