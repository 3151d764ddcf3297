/*
 * remote.c — the public entry points of remote.h: URL parsing, key validation, dispatch to the
 * backend (remote_dir.c, remote_s3.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "store/remote/remote_int.h"

int remote_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

uint64_t remote_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int remote_lim_init(struct remote_lim *lim, const struct remote_call *call)
{
	static const struct remote_call none;

	if (!call)
		call = &none;
	lim->err = call->errlen ? call->err : NULL;
	lim->errlen = lim->err ? call->errlen : 0;
	if (lim->errlen)
		lim->err[0] = '\0';
	lim->max_len = call->max_len ? call->max_len : REMOTE_GET_MAX;
	lim->self_checked = call->self_checked;
	lim->deadline_ms = call->deadline_ms > 0 ? call->deadline_ms : 0;
	lim->deadline_ns = 0;
	if (lim->deadline_ms)
		lim->deadline_ns = remote_now_ns() + (uint64_t)lim->deadline_ms * 1000000u;
	if (call->deadline_ms < 0)
		return remote_errf(lim->err, lim->errlen, -EINVAL, "negative deadline %ld ms",
				   call->deadline_ms);
	return 0;
}

long remote_lim_left_ms(const struct remote_lim *lim)
{
	uint64_t now;

	if (!lim->deadline_ns)
		return LONG_MAX;
	now = remote_now_ns();
	if (now >= lim->deadline_ns)
		return 0;
	/* rounded up: time left before the deadline is never an attempt of no time */
	return (long)((lim->deadline_ns - now + 999999u) / 1000000u);
}

struct remote_lim remote_lim_quiet(const struct remote_lim *lim)
{
	struct remote_lim q = *lim;

	q.err = NULL;
	q.errlen = 0;
	return q;
}

/* Whether key is valid per remote.h: 1..REMOTE_KEY_MAX bytes of non-empty components. */
static bool key_ok(const char *key)
{
	size_t n;
	const char *c, *slash;

	if (!key)
		return false;
	n = strnlen(key, REMOTE_KEY_MAX + 1);
	if (n == 0 || n > REMOTE_KEY_MAX)
		return false;
	for (c = key;; c = slash + 1) {
		size_t clen;

		slash = strchr(c, '/');
		clen = slash ? (size_t)(slash - c) : strlen(c);
		if (clen == 0 || (clen == 1 && c[0] == '.') ||
		    (clen == 2 && c[0] == '.' && c[1] == '.') ||
		    strncmp(c, REMOTE_TMP_PREFIX, strlen(REMOTE_TMP_PREFIX)) == 0)
			return false;
		if (!slash)
			return true;
	}
}

static int open_s3(const char *rest, const struct remote_opts *opts, struct remote **ret_remote,
		   char *err, size_t errlen)
{
	const char *slash = strchr(rest, '/');
	size_t blen = slash ? (size_t)(slash - rest) : strlen(rest);
	char bucket[64], prefix[REMOTE_KEY_MAX + 1];
	size_t plen;

	if (blen < 3 || blen > 63)
		return remote_errf(err, errlen, -EINVAL,
				   "bad S3 URL 's3://%s': the bucket name must have 3 to 63 characters",
				   rest);
	memcpy(bucket, rest, blen);
	bucket[blen] = '\0';
	if (strspn(bucket, "abcdefghijklmnopqrstuvwxyz0123456789.-") != blen)
		return remote_errf(err, errlen, -EINVAL,
				   "bad S3 bucket name '%s': use lowercase letters, digits, '.' and '-'",
				   bucket);
	snprintf(prefix, sizeof(prefix), "%s", slash ? slash + 1 : "");
	plen = strlen(prefix);
	while (plen > 0 && prefix[plen - 1] == '/')
		prefix[--plen] = '\0';
	if (plen > 0 && !key_ok(prefix))
		return remote_errf(err, errlen, -EINVAL,
				   "bad S3 URL 's3://%s': the prefix must be '/'-separated names, "
				   "none empty, '.', '..' or starting with '" REMOTE_TMP_PREFIX "'",
				   rest);
	return remote_s3_open(bucket, prefix, opts, ret_remote, err, errlen);
}

int remote_open(const char *url, const struct remote_opts *opts, struct remote **ret_remote,
		char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
	if (!url || !ret_remote)
		return remote_errf(err, errlen, -EINVAL, "no remote URL given");
	if (strncmp(url, "s3://", 5) == 0)
		return open_s3(url + 5, opts, ret_remote, err, errlen);
	if (strncmp(url, "file://", 7) == 0) {
		if (url[7] != '/')
			return remote_errf(err, errlen, -EINVAL,
					   "bad URL '%s': use file:///ABSOLUTE/PATH (three slashes)",
					   url);
		return remote_dir_open(url + 7, !(opts && opts->unchecked), ret_remote, err,
				       errlen);
	}
	if (url[0] == '/')
		return remote_dir_open(url, !(opts && opts->unchecked), ret_remote, err, errlen);
	return remote_errf(err, errlen, -EINVAL,
			   "bad remote URL '%s': use s3://BUCKET/PREFIX, file:///ABSOLUTE/PATH or "
			   "an absolute path", url);
}

bool remote_endpoint_plaintext(const char *endpoint)
{
	char host[256];
	const char *h, *end;
	size_t n;
	struct in6_addr a6;
	struct in_addr a4;

	if (!endpoint || strncasecmp(endpoint, "http://", 7) != 0)
		return false; /* https://, or no network at all */
	h = endpoint + 7;
	if (*h == '[') { /* [v6]:port */
		h++;
		end = strchr(h, ']');
	} else {
		end = h + strcspn(h, ":/");
	}
	if (!end || (n = (size_t)(end - h)) == 0 || n >= sizeof(host))
		return true; /* not a host we can tell is this machine */
	memcpy(host, h, n);
	host[n] = '\0';
	if (strcasecmp(host, "localhost") == 0)
		return false;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) != 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return !IN6_IS_ADDR_LOOPBACK(&a6) &&
		       !(IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
	return true; /* a name: resolved elsewhere, maybe to another host */
}

const char *remote_endpoint(const struct remote *r)
{
	return r && r->ops->endpoint ? r->ops->endpoint(r) : NULL;
}

void remote_close(struct remote *r)
{
	if (r)
		r->ops->close(r);
}

/* When a call failed without a message of its backend's: what failed, on which key. */
static int done(const struct remote_lim *lim, int rc, const char *what, const char *key)
{
	if (rc < 0 && lim->errlen && !lim->err[0])
		snprintf(lim->err, lim->errlen, "cannot %s '%s' on the remote: %s", what, key,
			 strerror(-rc));
	return rc;
}

/* remote_put_with and remote_put_if_absent_with: the backend's put, if_absent or not. */
static int put_with(struct remote *r, const char *key, const void *buf, size_t len, bool if_absent,
		    const struct remote_call *call)
{
	struct remote_lim lim;
	int rc = remote_lim_init(&lim, call);

	if (rc == 0 && (!key_ok(key) || (!buf && len)))
		rc = -EINVAL;
	if (rc == 0)
		rc = r->ops->put(r, key, buf, len, if_absent, &lim);
	return done(&lim, rc, "store", key ? key : "");
}

int remote_put_if_absent_with(struct remote *r, const char *key, const void *buf, size_t len,
			      const struct remote_call *call)
{
	return put_with(r, key, buf, len, true, call);
}

int remote_put_if_absent(struct remote *r, const char *key, const void *buf, size_t len)
{
	return remote_put_if_absent_with(r, key, buf, len, NULL);
}

int remote_put_with(struct remote *r, const char *key, const void *buf, size_t len,
		    const struct remote_call *call)
{
	return put_with(r, key, buf, len, false, call);
}

int remote_put(struct remote *r, const char *key, const void *buf, size_t len)
{
	return remote_put_with(r, key, buf, len, NULL);
}

int remote_get_with(struct remote *r, const char *key, const struct remote_call *call,
		    void **ret_buf, size_t *ret_len)
{
	struct remote_lim lim;
	int rc = remote_lim_init(&lim, call);

	if (rc == 0 && (!key_ok(key) || !ret_buf || !ret_len))
		rc = -EINVAL;
	if (rc == 0)
		rc = r->ops->get(r, key, &lim, ret_buf, ret_len);
	return done(&lim, rc, "read", key ? key : "");
}

int remote_get(struct remote *r, const char *key, void **ret_buf, size_t *ret_len)
{
	return remote_get_with(r, key, NULL, ret_buf, ret_len);
}

int remote_get_range_with(struct remote *r, const char *key, uint64_t off, void *buf, size_t len,
			  const struct remote_call *call, size_t *ret_got)
{
	struct remote_lim lim;
	int rc = remote_lim_init(&lim, call);

	if (rc == 0 && (!key_ok(key) || (!buf && len) || !ret_got))
		rc = -EINVAL;
	if (rc == 0 && len == 0) {
		rc = r->ops->head(r, key, &lim, NULL);
		if (rc == 0)
			*ret_got = 0;
	} else if (rc == 0) {
		rc = r->ops->get_range(r, key, off, buf, len, &lim, ret_got);
	}
	return done(&lim, rc, "read", key ? key : "");
}

int remote_get_range(struct remote *r, const char *key, uint64_t off, void *buf, size_t len,
		     size_t *ret_got)
{
	return remote_get_range_with(r, key, off, buf, len, NULL, ret_got);
}

int remote_get_into_with(struct remote *r, const char *key, const struct remote_call *call,
			 void *buf, size_t cap, size_t *ret_len)
{
	struct remote_lim lim;
	int rc = remote_lim_init(&lim, call);

	if (rc == 0 && (!key_ok(key) || (!buf && cap) || !ret_len))
		rc = -EINVAL;
	/* the call's bound is the buffer's, for the backend's checks and messages alike */
	if (cap && cap < lim.max_len)
		lim.max_len = cap;
	if (rc == 0 && !r->ops->get_into)
		rc = -EOPNOTSUPP; /* both backends have it; a test's wrapper without it never fetches */
	if (rc == 0)
		rc = r->ops->get_into(r, key, buf, cap, &lim, ret_len);
	return done(&lim, rc, "read", key ? key : "");
}

int remote_get_into(struct remote *r, const char *key, void *buf, size_t cap, size_t *ret_len)
{
	return remote_get_into_with(r, key, NULL, buf, cap, ret_len);
}

int remote_head_with(struct remote *r, const char *key, const struct remote_call *call,
		     uint64_t *ret_size)
{
	struct remote_lim lim;
	int rc = remote_lim_init(&lim, call);

	if (rc == 0 && !key_ok(key))
		rc = -EINVAL;
	if (rc == 0)
		rc = r->ops->head(r, key, &lim, ret_size);
	return done(&lim, rc, "look up", key ? key : "");
}

int remote_head(struct remote *r, const char *key, uint64_t *ret_size)
{
	return remote_head_with(r, key, NULL, ret_size);
}

/* The listing of remote_list_after as its caller asked for it. */
struct after_ctx {
	const char *after;
	remote_list_fn fn;
	void *arg;
};

/* Pass on only the keys above after: the contract holds with an S3-compatible endpoint that
 * ignores start-after and answers the whole listing. */
static int after_cb(const char *key, uint64_t size, void *arg)
{
	const struct after_ctx *c = arg;

	return strcmp(key, c->after) > 0 ? c->fn(key, size, c->arg) : 0;
}

int remote_list_after_with(struct remote *r, const char *prefix, const char *after,
			   remote_list_fn fn, void *arg, const struct remote_call *call)
{
	struct remote_lim lim;
	int rc = remote_lim_init(&lim, call);

	if (!prefix)
		prefix = "";
	if (!after)
		after = "";
	if (rc == 0 && (!fn || strnlen(prefix, REMOTE_KEY_MAX + 1) > REMOTE_KEY_MAX ||
			strnlen(after, REMOTE_KEY_MAX + 1) > REMOTE_KEY_MAX))
		rc = -EINVAL;
	if (rc == 0 && after[0]) {
		struct after_ctx c = { after, fn, arg };

		rc = r->ops->list(r, prefix, after, after_cb, &c, &lim);
	} else if (rc == 0) {
		rc = r->ops->list(r, prefix, after, fn, arg, &lim);
	}
	return done(&lim, rc, "list the keys starting with", prefix);
}

int remote_list_after(struct remote *r, const char *prefix, const char *after,
		      remote_list_fn fn, void *arg)
{
	return remote_list_after_with(r, prefix, after, fn, arg, NULL);
}

int remote_list_with(struct remote *r, const char *prefix, remote_list_fn fn, void *arg,
		     const struct remote_call *call)
{
	return remote_list_after_with(r, prefix, NULL, fn, arg, call);
}

int remote_list(struct remote *r, const char *prefix, remote_list_fn fn, void *arg)
{
	return remote_list_with(r, prefix, fn, arg, NULL);
}

int remote_delete_with(struct remote *r, const char *key, const struct remote_call *call)
{
	struct remote_lim lim;
	int rc = remote_lim_init(&lim, call);

	if (rc == 0 && !key_ok(key))
		rc = -EINVAL;
	if (rc == 0)
		rc = r->ops->del(r, key, &lim);
	return done(&lim, rc, "delete", key ? key : "");
}

int remote_delete(struct remote *r, const char *key)
{
	return remote_delete_with(r, key, NULL);
}
