/*
 * remote.c — the public entry points of remote.h: URL parsing, key validation, dispatch to the
 * backend (remote_dir.c, remote_s3.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void remote_close(struct remote *r)
{
	if (r)
		r->ops->close(r);
}

int remote_put_if_absent(struct remote *r, const char *key, const void *buf, size_t len)
{
	if (!key_ok(key) || (!buf && len))
		return -EINVAL;
	return r->ops->put(r, key, buf, len, true);
}

int remote_put(struct remote *r, const char *key, const void *buf, size_t len)
{
	if (!key_ok(key) || (!buf && len))
		return -EINVAL;
	return r->ops->put(r, key, buf, len, false);
}

int remote_get(struct remote *r, const char *key, void **ret_buf, size_t *ret_len)
{
	if (!key_ok(key) || !ret_buf || !ret_len)
		return -EINVAL;
	return r->ops->get(r, key, ret_buf, ret_len);
}

int remote_get_range(struct remote *r, const char *key, uint64_t off, void *buf, size_t len,
		     size_t *ret_got)
{
	if (!key_ok(key) || (!buf && len) || !ret_got)
		return -EINVAL;
	if (len == 0) {
		int rc = r->ops->head(r, key, NULL);

		if (rc == 0)
			*ret_got = 0;
		return rc;
	}
	return r->ops->get_range(r, key, off, buf, len, ret_got);
}

int remote_head(struct remote *r, const char *key, uint64_t *ret_size)
{
	if (!key_ok(key))
		return -EINVAL;
	return r->ops->head(r, key, ret_size);
}

int remote_list(struct remote *r, const char *prefix, remote_list_fn fn, void *arg)
{
	if (!prefix)
		prefix = "";
	if (!fn || strnlen(prefix, REMOTE_KEY_MAX + 1) > REMOTE_KEY_MAX)
		return -EINVAL;
	return r->ops->list(r, prefix, fn, arg);
}

int remote_delete(struct remote *r, const char *key)
{
	if (!key_ok(key))
		return -EINVAL;
	return r->ops->del(r, key);
}
