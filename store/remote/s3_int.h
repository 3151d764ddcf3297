/*
 * s3_int.h — private to the S3 backend: the backend's state, one HTTP request with retries
 * (s3_http.c) and the XML answers it parses (s3_xml.c).
 */
#ifndef CKPTFS_S3_INT_H
#define CKPTFS_S3_INT_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>

#include "store/remote/remote_int.h"

/*
 * One set of credentials. Never changed once made: s3_creds_refresh puts a new set in use, and
 * the old one lives on while calls that took it still run (refs).
 */
struct s3_creds {
	atomic_uint refs;  /* remote_s3.creds's own reference, plus one per s3_creds_get */
	unsigned gen;      /* 1 at remote_s3_open, one more per set s3_creds_refresh puts in use */
	char *access_key;  /* for messages */
	char *profile;     /* the AWS profile they were read for, for messages */
	char *userpwd;     /* "ACCESS:SECRET" for CURLOPT_USERPWD */
	char *token_hdr;   /* "x-amz-security-token: ..." or NULL */
};

/*
 * The backend. Immutable after remote_s3_open except share, which libcurl locks via share_mu,
 * and creds, replaced whole under creds_mu (remote.h invariant 4).
 */
/* Connections of one remote whose sockets s3_http.c tracks: more than libcurl's connection cache
 * keeps (its default, 5 per handle or share, CURLOPT_MAXCONNECTS) plus those in use. */
#define S3_SOCKS_MAX 64

struct remote_s3 {
	struct remote base;
	char *endpoint;   /* "http://host:port", no trailing '/' */
	char *region;
	char *bucket;
	char *prefix;     /* "" or "p/q/" (with the trailing '/') */
	char *sigv4;      /* "aws:amz:REGION:s3" for CURLOPT_AWS_SIGV4 */
	bool plaintext;   /* remote_endpoint_plaintext(endpoint) */
	pthread_mutex_t creds_mu; /* guards the pointer creds only; a leaf lock */
	struct s3_creds *creds;   /* in use; creds_mu */
	bool creds_fixed; /* remote_opts gave them: nothing to read again */
	long timeout_ms;
	long connect_timeout_ms;
	int max_tries;
	size_t multipart_threshold;
	size_t part_size;
	CURLSH *share;          /* DNS and connection caches shared by all calls' easy handles */
	pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST]; /* leaf locks, one per curl_lock_data */
	pthread_mutex_t socks_mu; /* guards socks; a leaf lock */
	int socks[S3_SOCKS_MAX]; /* the open connections' sockets, -1 a free slot (s3_http.c
				    invariant 6); one past the table is not acknowledged early */
};

/* A growable response body, or a caller's fixed buffer (fixed != NULL). */
struct s3_body {
	char *buf;
	size_t len;
	size_t cap;
	char *fixed;      /* remote_get_range, remote_get_into: write here, at most cap bytes */
	bool whole;       /* fixed holds a whole object (remote_get_into): more than cap bytes,
			   * said or sent, stops the transfer (too_big) */
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
	bool unsigned_payload; /* sign x-amz-content-sha256: UNSIGNED-PAYLOAD (remote_call's
				* self_checked, on an endpoint that is not plaintext) */
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
	bool creds_rejected;        /* the credentials were rejected, also after reading them
				     * again (remote.h invariant 4): the call fails with -EACCES */
};

/*
 * s3_perform - send req, retrying with exponential backoff and equal jitter on network errors,
 * timeouts, HTTP 5xx and 429 (up to s->max_tries attempts, and within lim's deadline); never on
 * other 4xx. Credentials rejected as expired or unknown: read again and, when they changed, the
 * request sent once more with them, not counted as a try (remote.h invariant 4).
 * resp: zero-initialised by the caller (body.fixed/cap set for a fixed buffer); the caller frees
 * resp->body.buf. Returns 0 when an HTTP answer came (any status: see s3_resp_errno), or
 * -ECONNREFUSED, -EHOSTUNREACH, -ETIMEDOUT (an attempt's limits or lim's deadline), -EPROTO
 * (TLS), -EFBIG (a body above lim->max_len), -ENOMEM, -EIO when none did. Writes a message into
 * lim->err for every outcome but a 2xx answer. Thread-safe.
 */
int s3_perform(struct remote_s3 *s, const struct s3_req *req, const struct remote_lim *lim,
	       struct s3_resp *resp);

/* s3_status_errno - 0 for 2xx, else 404 -ENOENT, 403/401 -EACCES, 412 -EEXIST, 400 -EINVAL,
 * 416 -ERANGE, 429 -EAGAIN, others -EIO. */
int s3_status_errno(long status);

/* s3_resp_errno - s3_status_errno of resp's status, but -EACCES when resp->creds_rejected. */
int s3_resp_errno(const struct s3_resp *resp);

/*
 * s3_creds_new - a set of credentials (refs 1, generation gen) from the access key, secret
 * key, session token (may be "") and profile name. Returns it, or NULL (out of memory).
 * s3_creds_get - the set in use, with a reference the caller drops with s3_creds_put. Takes
 * s->creds_mu. s3_creds_put - drop a reference; the last one zeroes the secrets and frees.
 * NULL is a no-op.
 */
struct s3_creds *s3_creds_new(const char *access_key, const char *secret_key, const char *token,
			      const char *profile, unsigned gen);
struct s3_creds *s3_creds_get(struct remote_s3 *s);
void s3_creds_put(struct s3_creds *c);

/*
 * s3_creds_refresh - the endpoint rejected the credentials of generation gen: read them again
 * (s3_conf_resolve: the environment, then the AWS shared files) and put them in use when they
 * differ. Returns 1 when the set in use now differs from generation gen (this call or a
 * concurrent one replaced it: send again), 0 when the same came back or none did (or remote_opts
 * gave them: never read again), -ENOMEM. Reads the environment and files without a lock held;
 * takes s->creds_mu to swap. Thread-safe, provided no thread changes the environment.
 */
int s3_creds_refresh(struct remote_s3 *s, unsigned gen);

/* s3_encode - percent-encode s into out (cap bytes) per SigV4 (unreserved bytes kept, and '/'
 * when keep_slash). Returns 0 or -ENAMETOOLONG. */
int s3_encode(const char *s, bool keep_slash, char *out, size_t cap);

/* s3_init_share / s3_free_share - the CURLSH of s, its mutexes and the table of sockets. */
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
