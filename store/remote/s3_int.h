/*
 * s3_int.h — private to the S3 backend: the backend's state, one HTTP request with retries
 * (s3_http.c) and the XML answers it parses (s3_xml.c).
 */
#ifndef CKPTFS_S3_INT_H
#define CKPTFS_S3_INT_H

#include <curl/curl.h>
#include <pthread.h>

#include "store/remote/remote_int.h"

/* The backend. Immutable after remote_s3_open except share, which libcurl locks via share_mu. */
struct remote_s3 {
	struct remote base;
	char *endpoint;   /* "http://host:port", no trailing '/' */
	char *region;
	char *bucket;
	char *prefix;     /* "" or "p/q/" (with the trailing '/') */
	char *userpwd;    /* "ACCESS:SECRET" for CURLOPT_USERPWD */
	char *sigv4;      /* "aws:amz:REGION:s3" for CURLOPT_AWS_SIGV4 */
	char *token_hdr;  /* "x-amz-security-token: ..." or NULL */
	long timeout_ms;
	long connect_timeout_ms;
	int max_tries;
	size_t multipart_threshold;
	size_t part_size;
	CURLSH *share;          /* DNS and connection caches shared by all calls' easy handles */
	pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST]; /* leaf locks, one per curl_lock_data */
};

/* A growable response body, or a caller's fixed buffer (fixed != NULL). */
struct s3_body {
	char *buf;
	size_t len;
	size_t cap;
	char *fixed;      /* remote_get_range: write here, at most cap bytes */
	bool overflow;    /* the server sent more than a fixed buffer holds */
	size_t limit;     /* a growable body's most bytes (remote_lim.max_len); set by s3_perform */
	bool too_big;     /* the answer said or sent more than limit: the transfer was stopped */
};

/* One request. key NULL: the bucket itself. query: already sorted and percent-encoded, or NULL. */
struct s3_req {
	const char *method; /* "GET", "HEAD", "PUT", "POST", "DELETE" */
	const char *key;    /* a key under the prefix, already validated */
	bool raw_key;       /* key is a full object name (no prefix added) */
	const char *query;
	const void *body;   /* PUT/POST payload, body_len bytes */
	size_t body_len;
	const char *hdr[3]; /* extra request headers ("If-None-Match: *", "Range: ..."), or NULL */
};

/* What came back. */
struct s3_resp {
	long status;                /* HTTP status, 0 when no answer */
	struct s3_body body;
	char etag[128];             /* the ETag header, quotes kept, or "" */
	int64_t content_length;     /* -1 unknown */
	int tries;                  /* attempts made (1 when the first answer was final) */
	char curl_msg[CURL_ERROR_SIZE]; /* libcurl's message when status is 0 */
	char errdoc[2048];          /* the start of a non-2xx answer's body (S3 error documents
				     * are a few hundred bytes), also with a fixed body */
	size_t errdoc_len;
	char code[64];              /* a non-2xx answer's error <Code>, or "" */
};

/*
 * s3_perform - send req, retrying with exponential backoff and equal jitter on network errors,
 * timeouts, HTTP 5xx and 429 (up to s->max_tries attempts, and within lim's deadline); never on
 * other 4xx.
 * resp: zero-initialised by the caller (body.fixed/cap set for a fixed buffer); the caller frees
 * resp->body.buf. Returns 0 when an HTTP answer came (any status: see s3_status_errno), or
 * -ECONNREFUSED, -EHOSTUNREACH, -ETIMEDOUT (an attempt's limits or lim's deadline), -EPROTO
 * (TLS), -EFBIG (a body above lim->max_len), -ENOMEM, -EIO when none did. Writes a message into
 * lim->err for every outcome but a 2xx answer. Thread-safe.
 */
int s3_perform(struct remote_s3 *s, const struct s3_req *req, const struct remote_lim *lim,
	       struct s3_resp *resp);

/* s3_status_errno - 0 for 2xx, else 404 -ENOENT, 403/401 -EACCES, 412 -EEXIST, 400 -EINVAL,
 * 416 -ERANGE, 429 -EAGAIN, others -EIO. */
int s3_status_errno(long status);


/* s3_encode - percent-encode s into out (cap bytes) per SigV4 (unreserved bytes kept, and '/'
 * when keep_slash). Returns 0 or -ENAMETOOLONG. */
int s3_encode(const char *s, bool keep_slash, char *out, size_t cap);

/* s3_init_share / s3_free_share - the CURLSH of s and its mutexes. */
int s3_init_share(struct remote_s3 *s);
void s3_free_share(struct remote_s3 *s);

/* s3_global_init - curl_global_init once per process (pthread_once). Returns 0 or -ENOMEM. */
int s3_global_init(void);

/* s3_xml_error_code - the <Code> of an S3 <Error> document into code (cap bytes), or "". */
void s3_xml_error_code(const char *xml, size_t len, char *code, size_t cap);

/*
 * s3_xml_list - parse a ListObjectsV2 answer: fn(key, size, arg) per <Contents> (key without the
 * first strip bytes; a key of strip bytes or fewer, the prefix's own "directory marker", is
 * skipped), then *ret_token = NextContinuationToken (malloc'd) when IsTruncated, else
 * NULL. Returns 0, fn's nonzero value, -EPROTO (not a listing), -ENOMEM.
 */
int s3_xml_list(const char *xml, size_t len, size_t strip, remote_list_fn fn, void *arg,
		char **ret_token);

/* s3_xml_upload_id - the <UploadId> of an InitiateMultipartUploadResult, malloc'd into *ret_id.
 * Returns 0, -EPROTO, -ENOMEM. */
int s3_xml_upload_id(const char *xml, size_t len, char **ret_id);

#endif /* CKPTFS_S3_INT_H */
