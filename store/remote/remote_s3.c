/*
 * remote_s3.c — the S3 backend of remote.h: objects are BUCKET/PREFIX/KEY, path-style URLs.
 *
 * Invariants:
 *   1. put_if_absent is one PUT with "If-None-Match: *" (412: the object exists). It never uses
 *      multipart upload: RGW 16.2 has no conditional CompleteMultipartUpload (distributed.md).
 *   2. put above multipart_threshold: CreateMultipartUpload, parts of part_size bytes in order,
 *      CompleteMultipartUpload; any failure aborts the upload (best effort), so no parts linger
 *      unless the abort itself fails.
 *   3. Every request goes through s3_perform (s3_http.c), which signs, retries and maps
 *      network failures; this file maps HTTP statuses per operation.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/remote/s3_conf.h"
#include "store/remote/s3_int.h"

#define MiB (1024u * 1024u)
#define S3_PART_MIN (5u * MiB)               /* S3's smallest part but the last */
#define S3_PARTS_MAX 10000                   /* S3's most parts per upload */
#define S3_PUT_MAX (5ull * 1024 * 1024 * 1024) /* S3's largest single PUT */

static struct remote_s3 *to_s3(struct remote *r)
{
	return (struct remote_s3 *)r;
}

/* The -errno of an answer: by its status, but a 403 whose error code is QuotaExceeded (Ceph
 * RGW's bucket and user quotas) is -EDQUOT, so that a caller can tell a full remote from
 * missing permissions (a gc frees space then: tools/ckptctl/remote_gc.c). */
static int status_rc(const struct s3_resp *resp)
{
	char code[64];

	if (resp->status == 403 && !resp->creds_rejected && resp->body.buf) {
		s3_xml_error_code(resp->body.buf, resp->body.len, code, sizeof(code));
		if (strcmp(code, "QuotaExceeded") == 0)
			return -EDQUOT;
	}
	return s3_resp_errno(resp);
}

/* Whether the object at key holds exactly len bytes equal to buf, read within lim's deadline; a
 * read that fails counts as "not the same" and leaves lim's message alone. */
static bool same_bytes(struct remote_s3 *s, const char *key, const void *buf, size_t len,
		       const struct remote_lim *lim)
{
	struct remote_lim q = remote_lim_quiet(lim);
	void *got = NULL;
	size_t glen = 0;
	bool same;

	q.max_len = len ? len : 1; /* a larger object is not these bytes: no need to read it */
	same = s->base.ops->get(&s->base, key, &q, &got, &glen) == 0 && glen == len &&
	       (len == 0 || memcmp(got, buf, len) == 0);
	free(got);
	return same;
}

static int put_single(struct remote_s3 *s, const char *key, const void *buf, size_t len,
		      bool if_absent, const struct remote_lim *lim)
{
	struct s3_req req = { .method = "PUT", .key = key, .body = buf, .body_len = len,
			      .unsigned_payload = lim->self_checked && !s->plaintext };
	struct s3_resp resp = { 0 };
	int rc = -EIO, i;

	if (len > S3_PUT_MAX)
		return -EFBIG;
	if (if_absent)
		req.hdr[0] = "If-None-Match: *";
	/* AWS answers 409 ConditionalRequestConflict while a racing conditional PUT is in flight:
	 * asking again gets the final answer (200 or 412). */
	for (i = 0; i < s->max_tries; i++) {
		rc = s3_perform(s, &req, lim, &resp);
		if (rc < 0 || resp.status != 409 || !if_absent)
			break;
	}
	if (rc == 0)
		rc = status_rc(&resp);
	/* 412 after a retry may answer this call's own earlier attempt, which the server stored
	 * but whose answer was lost: the object holding exactly these bytes counts as ours. */
	if (rc == -EEXIST && resp.tries > 1 && same_bytes(s, key, buf, len, lim))
		rc = 0;
	free(resp.body.buf);
	return rc;
}

/* Abort the upload, best effort, within what is left of lim's deadline (remote_put says what
 * stays when nothing is). */
static void mpu_abort(struct remote_s3 *s, const char *key, const char *qid,
		      const struct remote_lim *lim)
{
	char query[1200];
	struct s3_req req = { .method = "DELETE", .key = key, .query = query };
	struct s3_resp resp = { 0 };
	struct remote_lim q = remote_lim_quiet(lim);

	snprintf(query, sizeof(query), "uploadId=%s", qid);
	s3_perform(s, &req, &q, &resp);
	free(resp.body.buf);
}

/* Upload part number n (1-based); its ETag appended to the Complete document xml. */
static int mpu_part(struct remote_s3 *s, const char *key, const char *qid, unsigned n,
		    const char *p, size_t plen, char *xml, size_t xcap,
		    const struct remote_lim *lim)
{
	char query[1200];
	struct s3_req req = { .method = "PUT", .key = key, .query = query, .body = p,
			      .body_len = plen,
			      .unsigned_payload = lim->self_checked && !s->plaintext };
	struct s3_resp resp = { 0 };
	size_t xl = strlen(xml);
	int rc;

	snprintf(query, sizeof(query), "partNumber=%u&uploadId=%s", n, qid);
	rc = s3_perform(s, &req, lim, &resp);
	if (rc == 0)
		rc = status_rc(&resp);
	if (rc == 0 && !resp.etag[0])
		rc = -EPROTO;
	if (rc == 0 && (size_t)snprintf(xml + xl, xcap - xl,
					"<Part><PartNumber>%u</PartNumber><ETag>%s</ETag></Part>",
					n, resp.etag) >= xcap - xl)
		rc = -ENOMEM;
	free(resp.body.buf);
	return rc;
}

/* CompleteMultipartUpload with the parts listed in xml. */
static int mpu_complete(struct remote_s3 *s, const char *key, const char *qid, char *xml,
			size_t xcap, size_t len, const struct remote_lim *lim)
{
	struct remote_lim q = remote_lim_quiet(lim);
	char query[1200], code[64];
	size_t xl = strlen(xml);
	struct s3_req req = { .method = "POST", .key = key, .query = query };
	struct s3_resp resp = { 0 };
	uint64_t size = 0;
	int rc;

	if ((size_t)snprintf(xml + xl, xcap - xl, "</CompleteMultipartUpload>") >= xcap - xl)
		return -ENOMEM;
	req.body = xml;
	req.body_len = strlen(xml);
	snprintf(query, sizeof(query), "uploadId=%s", qid);
	rc = s3_perform(s, &req, lim, &resp);
	if (rc == 0) {
		/* A 200 may still carry an <Error> (S3 sends it once the body has started). */
		s3_xml_error_code(resp.body.buf, resp.body.len, code, sizeof(code));
		rc = status_rc(&resp);
		if (rc == 0 && code[0])
			rc = -EIO;
		/* A retried Complete of an upload that did complete: 404 NoSuchUpload. */
		if (rc == -ENOENT && strcmp(code, "NoSuchUpload") == 0 &&
		    s->base.ops->head(&s->base, key, &q, &size) == 0 && size == len)
			rc = 0;
	}
	free(resp.body.buf);
	return rc;
}

static int put_multipart(struct remote_s3 *s, const char *key, const void *buf, size_t len,
			 const struct remote_lim *lim)
{
	struct s3_req req = { .method = "POST", .key = key, .query = "uploads=" };
	struct s3_resp resp = { 0 };
	size_t nparts = (len + s->part_size - 1) / s->part_size, xcap, off;
	char *id = NULL, *xml = NULL, qid[1024];
	unsigned n;
	int rc;

	if (nparts > S3_PARTS_MAX)
		return -EFBIG;
	rc = s3_perform(s, &req, lim, &resp);
	if (rc == 0)
		rc = status_rc(&resp);
	if (rc == 0)
		rc = s3_xml_upload_id(resp.body.buf, resp.body.len, &id);
	free(resp.body.buf);
	if (rc < 0)
		return rc;
	if (s3_encode(id, false, qid, sizeof(qid)) < 0) {
		free(id);
		return -EPROTO;
	}
	xcap = 64 + nparts * 256;
	xml = malloc(xcap);
	rc = xml ? 0 : -ENOMEM;
	if (xml)
		snprintf(xml, xcap, "<CompleteMultipartUpload>");
	for (n = 1, off = 0; rc == 0 && off < len; n++, off += s->part_size) {
		size_t plen = len - off < s->part_size ? len - off : s->part_size;

		rc = mpu_part(s, key, qid, n, (const char *)buf + off, plen, xml, xcap, lim);
	}
	if (rc == 0)
		rc = mpu_complete(s, key, qid, xml, xcap, len, lim);
	if (rc < 0)
		mpu_abort(s, key, qid, lim);
	free(xml);
	free(id);
	return rc;
}

static int s3_put(struct remote *r, const char *key, const void *buf, size_t len, bool if_absent,
		  const struct remote_lim *lim)
{
	struct remote_s3 *s = to_s3(r);

	if (!if_absent && len > s->multipart_threshold)
		return put_multipart(s, key, buf, len, lim);
	return put_single(s, key, buf, len, if_absent, lim);
}

static int s3_get(struct remote *r, const char *key, const struct remote_lim *lim, void **ret_buf,
		  size_t *ret_len)
{
	struct s3_req req = { .method = "GET", .key = key };
	struct s3_resp resp = { 0 };
	int rc = s3_perform(to_s3(r), &req, lim, &resp);

	if (rc == 0)
		rc = status_rc(&resp);
	if (rc == 0 && resp.content_length >= 0 && (uint64_t)resp.content_length != resp.body.len)
		rc = -EIO;
	if (rc == 0 && !resp.body.buf && !(resp.body.buf = malloc(1)))
		rc = -ENOMEM;
	if (rc < 0) {
		free(resp.body.buf);
		return rc;
	}
	*ret_buf = resp.body.buf;
	*ret_len = resp.body.len;
	return 0;
}

static int s3_get_into(struct remote *r, const char *key, void *buf, size_t cap,
		       const struct remote_lim *lim, size_t *ret_len)
{
	struct s3_req req = { .method = "GET", .key = key };
	struct s3_resp resp = { .body = { .fixed = buf, .cap = cap, .whole = true } };
	int rc = s3_perform(to_s3(r), &req, lim, &resp);

	if (rc == 0)
		rc = status_rc(&resp);
	if (rc == 0 && resp.content_length >= 0 && (uint64_t)resp.content_length != resp.body.len)
		rc = -EIO;
	free(resp.body.buf);
	if (rc == 0)
		*ret_len = resp.body.len;
	return rc;
}

static int s3_get_range(struct remote *r, const char *key, uint64_t off, void *buf, size_t len,
			const struct remote_lim *lim, size_t *ret_got)
{
	char range[64];
	struct s3_req req = { .method = "GET", .key = key, .hdr = { range } };
	struct s3_resp resp = { .body = { .fixed = buf, .cap = len } };
	int rc;

	snprintf(range, sizeof(range), "Range: bytes=%" PRIu64 "-%" PRIu64, off,
		 off + (uint64_t)len - 1);
	rc = s3_perform(to_s3(r), &req, lim, &resp);
	if (rc == 0) {
		if (resp.status == 416) {
			resp.body.len = 0; /* off at or past the end */
		} else {
			rc = status_rc(&resp);
			if (rc == 0 && resp.status == 200 && off > 0)
				rc = -EIO; /* the range was ignored */
		}
	}
	free(resp.body.buf);
	if (rc == 0)
		*ret_got = resp.body.len;
	return rc;
}

static int s3_head(struct remote *r, const char *key, const struct remote_lim *lim,
		   uint64_t *ret_size)
{
	struct s3_req req = { .method = "HEAD", .key = key };
	struct s3_resp resp = { 0 };
	int rc = s3_perform(to_s3(r), &req, lim, &resp);

	if (rc == 0)
		rc = status_rc(&resp);
	if (rc == 0 && resp.content_length < 0)
		rc = -EPROTO;
	free(resp.body.buf);
	if (rc == 0 && ret_size)
		*ret_size = (uint64_t)resp.content_length;
	return rc;
}

/*
 * The ListObjectsV2 query for prefix pre (full, encoded) after continuation token tok (or NULL),
 * starting after key eafter (full, encoded; "" for none). AWS S3 API Reference, ListObjectsV2:
 * "start-after: StartAfter is where you want Amazon S3 to start listing from. Amazon S3 starts
 * listing after this specified key", and keys are returned "in UTF-8 binary order"; a page
 * after the first follows its continuation token, which already carries the position, so
 * start-after is sent with the first page only.
 */
static int list_query(const char *tok, const char *pre, const char *eafter, int max_keys,
		      char *q, size_t cap)
{
	char etok[2048], mk[32] = "";
	int n;

	if (tok && s3_encode(tok, false, etok, sizeof(etok)) < 0)
		return -EPROTO;
	if (max_keys > 0)
		snprintf(mk, sizeof(mk), "&max-keys=%d", max_keys);
	/* Names in byte order (SigV4's canonical query string): continuation-token, list-type,
	 * max-keys, prefix, start-after. */
	n = snprintf(q, cap, "%s%s%slist-type=2%s%s%s%s%s", tok ? "continuation-token=" : "",
		     tok ? etok : "", tok ? "&" : "", mk, pre[0] ? "&prefix=" : "", pre,
		     !tok && eafter[0] ? "&start-after=" : "", !tok ? eafter : "");
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* One ListObjectsV2 page: the full answer in resp (caller frees resp->body.buf). */
static int list_page(struct remote_s3 *s, const char *tok, const char *epre, const char *eafter,
		     int max_keys, const struct remote_lim *lim, struct s3_resp *resp)
{
	char query[16384];
	struct s3_req req = { .method = "GET", .query = query };
	int rc = list_query(tok, epre, eafter, max_keys, query, sizeof(query));

	if (rc == 0)
		rc = s3_perform(s, &req, lim, resp);
	return rc;
}

static int s3_list(struct remote *r, const char *prefix, const char *after, remote_list_fn fn,
		   void *arg, const struct remote_lim *lim)
{
	struct remote_s3 *s = to_s3(r);
	char full[2 * REMOTE_KEY_MAX + 2], epre[3 * sizeof(full)], eafter[3 * sizeof(full)] = "";
	char *tok = NULL;
	int rc;

	snprintf(full, sizeof(full), "%s%s", s->prefix, prefix);
	if (s3_encode(full, false, epre, sizeof(epre)) < 0)
		return -EINVAL;
	/* the bucket's key is PREFIX/after: "" stays "" (no start-after, every key) */
	if (after[0]) {
		snprintf(full, sizeof(full), "%s%s", s->prefix, after);
		if (s3_encode(full, false, eafter, sizeof(eafter)) < 0)
			return -EINVAL;
	}
	do {
		struct s3_resp resp = { 0 };
		char *next = NULL;

		rc = list_page(s, tok, epre, eafter, 0, lim, &resp);
		if (rc == 0)
			rc = status_rc(&resp);
		if (rc == 0)
			rc = s3_xml_list(resp.body.buf, resp.body.len, strlen(s->prefix), fn, arg,
					 &next);
		free(resp.body.buf);
		free(tok);
		tok = rc == 0 ? next : NULL;
	} while (rc == 0 && tok);
	return rc;
}

static int s3_del(struct remote *r, const char *key, const struct remote_lim *lim)
{
	struct s3_req req = { .method = "DELETE", .key = key };
	struct s3_resp resp = { 0 };
	int rc = s3_perform(to_s3(r), &req, lim, &resp);

	if (rc == 0)
		rc = status_rc(&resp);
	free(resp.body.buf);
	return rc == -ENOENT ? 0 : rc;
}

static void s3_close(struct remote *r)
{
	struct remote_s3 *s = to_s3(r);

	s3_free_share(s);
	free(s->endpoint);
	free(s->region);
	free(s->bucket);
	free(s->prefix);
	free(s->sigv4);
	s3_creds_put(s->creds);
	pthread_mutex_destroy(&s->creds_mu);
	free(s);
}

static const char *s3_endpoint(const struct remote *r)
{
	return ((const struct remote_s3 *)r)->endpoint;
}

static const struct remote_ops s3_ops = {
	.endpoint = s3_endpoint,
	.close = s3_close,
	.put = s3_put,
	.get = s3_get,
	.get_range = s3_get_range,
	.get_into = s3_get_into,
	.head = s3_head,
	.list = s3_list,
	.del = s3_del,
};

/* asprintf into *out; 0 or -ENOMEM. */
__attribute__((format(printf, 2, 3))) static int dup_fmt(char **out, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(out, fmt, ap);
	va_end(ap);
	if (n < 0)
		*out = NULL;
	return n < 0 ? -ENOMEM : 0;
}

/* Fill s from the resolved settings c and opts. */
static int s3_fill(struct remote_s3 *s, const struct s3_conf *c, const struct remote_opts *o,
		   const char *bucket, const char *prefix)
{
	size_t elen = strlen(c->endpoint);
	int rc;

	while (elen > 0 && c->endpoint[elen - 1] == '/')
		elen--;
	rc = dup_fmt(&s->endpoint, "%.*s", (int)elen, c->endpoint);
	if (rc == 0)
		s->plaintext = remote_endpoint_plaintext(s->endpoint);
	if (rc == 0)
		rc = dup_fmt(&s->region, "%s", c->region);
	if (rc == 0)
		rc = dup_fmt(&s->bucket, "%s", bucket);
	if (rc == 0)
		rc = dup_fmt(&s->prefix, "%s%s", prefix, prefix[0] ? "/" : "");
	if (rc == 0)
		rc = dup_fmt(&s->sigv4, "aws:amz:%s:s3", c->region);
	if (rc == 0 && !(s->creds = s3_creds_new(c->access_key, c->secret_key, c->session_token,
						 c->profile, 1)))
		rc = -ENOMEM;
	/* credentials the caller gave are not read again when rejected (remote.h invariant 4) */
	s->creds_fixed = o && ((o->access_key && o->access_key[0]) ||
			       (o->secret_key && o->secret_key[0]) ||
			       (o->session_token && o->session_token[0]));
	if (rc == 0)
		rc = s3_init_share(s);
	s->timeout_ms = o && o->timeout_ms > 0 ? o->timeout_ms : 60000;
	s->connect_timeout_ms = o && o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 5000;
	s->max_tries = o && o->max_tries > 0 ? o->max_tries : 5;
	s->multipart_threshold = o && o->multipart_threshold ? o->multipart_threshold : 16 * MiB;
	s->part_size = o && o->part_size ? o->part_size : 8 * MiB;
	return rc;
}

/* Explain why the check of remote_s3_open failed: rc from the request, resp its answer. */
static int explain(struct remote_s3 *s, const struct s3_conf *c, int rc, struct s3_resp *resp,
		   char *err, size_t errlen)
{
	char code[64] = "";

	if (rc == -ECONNREFUSED)
		return remote_errf(err, errlen, rc,
				   "cannot connect to the S3 endpoint '%s': connection refused (%s); "
				   "check the endpoint (AWS_ENDPOINT_URL or ~/.aws/config "
				   "endpoint_url) and that the server is running", s->endpoint,
				   resp->curl_msg);
	if (rc < 0)
		return remote_errf(err, errlen, rc,
				   "cannot reach the S3 endpoint '%s': %s (%s); check the endpoint "
				   "(AWS_ENDPOINT_URL) and the network", s->endpoint, strerror(-rc),
				   resp->curl_msg);
	s3_xml_error_code(resp->body.buf, resp->body.len, code, sizeof(code));
	rc = status_rc(resp);
	if (rc == -EACCES)
		return remote_errf(err, errlen, rc,
				   "the S3 endpoint '%s' rejected the credentials of access key '%s' "
				   "(HTTP %ld %s): check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or "
				   "profile '%s' in ~/.aws/credentials, and the bucket's permissions",
				   s->endpoint, c->access_key, resp->status, code[0] ? code : "",
				   c->profile);
	if (rc == -ENOENT)
		return remote_errf(err, errlen, rc,
				   "no bucket '%s' at the S3 endpoint '%s' (HTTP 404 %s): create it "
				   "or fix the URL s3://BUCKET/PREFIX", s->bucket, s->endpoint, code);
	if (rc == 0)
		return remote_errf(err, errlen, -EPROTO,
				   "'%s' answered HTTP %ld but not with an S3 bucket listing: is it "
				   "an S3 endpoint?", s->endpoint, resp->status);
	return remote_errf(err, errlen, rc == -EEXIST ? -EIO : rc,
			   "the S3 endpoint '%s' answered HTTP %ld %s to a listing of bucket '%s'",
			   s->endpoint, resp->status, code, s->bucket);
}

static int count_one(const char *key, uint64_t size, void *arg)
{
	return 0;
}

/* List at most one key under the prefix: checks endpoint, credentials and bucket at once. */
static int s3_check(struct remote_s3 *s, const struct s3_conf *c, char *err, size_t errlen)
{
	char epre[3 * (REMOTE_KEY_MAX + 2)], *tok = NULL;
	struct s3_resp resp = { 0 };
	struct remote_lim lim;
	int rc = s3_encode(s->prefix, false, epre, sizeof(epre));

	remote_lim_init(&lim, NULL); /* explain() writes the message */
	if (rc == 0)
		rc = list_page(s, NULL, epre, "", 1, &lim, &resp);
	if (rc < 0 || resp.status < 200 || resp.status >= 300) {
		rc = explain(s, c, rc, &resp, err, errlen);
	} else {
		rc = s3_xml_list(resp.body.buf, resp.body.len, 0, count_one, NULL, &tok);
		if (rc < 0)
			rc = explain(s, c, 0, &resp, err, errlen);
	}
	free(tok);
	free(resp.body.buf);
	return rc;
}

int remote_s3_open(const char *bucket, const char *prefix, const struct remote_opts *opts,
		   struct remote **ret_remote, char *err, size_t errlen)
{
	struct s3_conf *c;
	struct remote_s3 *s;
	int rc = s3_global_init();

	if (rc < 0)
		return remote_errf(err, errlen, rc, "cannot initialise libcurl");
	if (opts && opts->part_size && opts->part_size < S3_PART_MIN)
		return remote_errf(err, errlen, -EINVAL, "S3 part size %zu is below 5 MiB",
				   opts->part_size);
	c = calloc(1, sizeof(*c));
	s = calloc(1, sizeof(*s));
	if (!c || !s) {
		free(c);
		free(s);
		return remote_errf(err, errlen, -ENOMEM, "out of memory");
	}
	s->base.ops = &s3_ops;
	pthread_mutex_init(&s->creds_mu, NULL);
	s3_conf_resolve(opts, c);
	if (!c->access_key[0] || !c->secret_key[0])
		rc = remote_errf(err, errlen, -EINVAL,
				 "no S3 credentials: set AWS_ACCESS_KEY_ID and "
				 "AWS_SECRET_ACCESS_KEY, or put them in ~/.aws/credentials "
				 "(profile '%s')", c->profile);
	else if (strncmp(c->endpoint, "http://", 7) && strncmp(c->endpoint, "https://", 8))
		rc = remote_errf(err, errlen, -EINVAL,
				 "bad S3 endpoint '%s': use http://HOST:PORT or https://HOST",
				 c->endpoint);
	else if ((rc = s3_fill(s, c, opts, bucket, prefix)) < 0)
		remote_errf(err, errlen, rc, "out of memory");
	else if (!(opts && opts->unchecked))
		rc = s3_check(s, c, err, errlen);
	explicit_bzero(c, sizeof(*c));
	free(c);
	if (rc < 0) {
		s3_close(&s->base);
		return rc;
	}
	*ret_remote = &s->base;
	return 0;
}
