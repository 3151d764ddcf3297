/*
 * remote.h — ckptfs remote object store: immutable objects named by keys, behind one small
 * interface with two backends:
 *   s3://BUCKET/PREFIX      an S3 bucket (AWS, Ceph RGW, ...) over HTTP(S), SigV4-signed
 *                           (libcurl CURLOPT_AWS_SIGV4), path-style URLs ENDPOINT/BUCKET/KEY
 *   file:///ABS/DIR or /ABS/DIR
 *                           a POSIX directory, typically shared between nodes (CephFS, NFS)
 *
 * Keys: 1..1024 bytes, '/'-separated components, none empty, "." or "..", none starting with
 * ".tmp-" (the directory backend's temporary files), no NUL; a key never starts or ends with '/'.
 * In the directory backend, "a/b/c" is the file DIR/a/b/c; in S3 it is the object PREFIX/a/b/c.
 * So in the directory backend a key cannot also be a directory of other keys ("a/b" and
 * "a/b/c"): the second put fails with -EEXIST (a file in the way) or -EISDIR (a directory there).
 *
 * Invariants:
 *   1. An object is visible under its key only with its complete content: the directory backend
 *      writes a temporary file in the target directory, fsyncs it, then links (put_if_absent) or
 *      renames (put) it into place, then fsyncs the directory (git's object-file.c publishes the
 *      same way); S3 makes an object visible only when its PUT or CompleteMultipartUpload succeeds.
 *   2. remote_put_if_absent never replaces an object: of any number of concurrent callers on one
 *      key, across processes and nodes sharing the store, exactly one gets 0 and the others
 *      -EEXIST. S3: a single PUT with "If-None-Match: *" (HTTP 412 when the object exists; Ceph
 *      RGW honours it on single PUTs only, so put_if_absent never uses multipart upload).
 *   3. A remote is immutable after remote_open but for the S3 credentials, which a call
 *      replaces whole (never in place) when the endpoint rejects them as expired (invariant 4):
 *      every function below may be called from any number of threads at once on one struct
 *      remote. S3 calls use one CURL easy handle per call and share libcurl's connection and DNS
 *      caches (a CURLSH under a mutex).
 *   4. S3: an answer 400/401/403 whose error code says the credentials are expired or unknown
 *      (ExpiredToken, TokenRefreshRequired, InvalidToken, InvalidAccessKeyId,
 *      SignatureDoesNotMatch; a HEAD's answer has no body, so any 400/401/403 to a HEAD) makes
 *      the call read the credentials again, as remote_open does (the environment, then the AWS
 *      shared files; not when remote_opts gave them), and when they changed, repeat the request
 *      once with them, for this and every later call. Rejected again, or unchanged: -EACCES.
 *   5. Every call is bounded: in time by its deadline (struct remote_call; S3 only) or else by
 *      remote_opts' per-attempt limits times max_tries; in memory by max_len (remote_get), which
 *      a Content-Length, the bytes actually received or a file's size must not pass.
 *
 * Links libcurl, libxml2 and libcrypto (OpenSSL, for SHA-256); never store/'s libckstore. Does
 * not log: every failure is a negative errno, and remote_open also writes a message for people.
 */
#ifndef CKPTFS_REMOTE_H
#define CKPTFS_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

/* The file in a STORE where a daemon mounted with -o remote records its remote (JSON: url, node,
 * nodes, keep_checkpoint_max; fs/node/node.c writes it, `ckptctl STORE remote` reads it). */
#define REMOTE_STORE_RECORD "remote.json"

/* Longest key in bytes (S3's limit, less room for a prefix). */
#define REMOTE_KEY_MAX 1024

/*
 * The largest object remote_get accepts unless the call says otherwise, in bytes: 16 times
 * STORE_CHUNK_MAX, 64 MiB. What ckptfs reads whole is small next to it: a chunk object is
 * STORE_OBJECT_HEADER plus its encoded payload (about STORE_CHUNK_MAX at most), a step directory
 * object a few bytes, and a manifest (fs/node/manifest.c) about 60 bytes of compact JSON per
 * extent, so 64 MiB holds a node's part of a step of about a million chunks (1 TiB at
 * STORE_CHUNK_AVG). A larger answer is a broken or hostile endpoint, not an object to allocate.
 */
#define REMOTE_GET_MAX (16u * (size_t)STORE_CHUNK_MAX)

/* Options of remote_open. Zero-initialise, then set what you need; NULL/0 means the default. */
struct remote_opts {
	/*
	 * S3 only. Each string: this field, else the environment (AWS_ENDPOINT_URL_S3 or
	 * AWS_ENDPOINT_URL, AWS_REGION
	 * or AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), else
	 * the AWS shared files (~/.aws/credentials, ~/.aws/config; AWS_SHARED_CREDENTIALS_FILE and
	 * AWS_CONFIG_FILE override the paths) in profile AWS_PROFILE, else "default".
	 * endpoint defaults to https://s3.REGION.amazonaws.com, region to "us-east-1".
	 */
	const char *endpoint;   /* "http://127.0.0.1:7480", "https://host"; no path */
	const char *region;     /* SigV4 region, e.g. "us-east-1" */
	const char *access_key; /* access key id */
	const char *secret_key; /* secret access key */
	const char *session_token; /* temporary credentials' token, or NULL */
	long timeout_ms;        /* an attempt fails when no byte moved for this long: 0 means 60000 */
	long connect_timeout_ms; /* per connection attempt: 0 means 5000 */
	int max_tries;          /* attempts per request on 5xx, 429 and network errors: 0 means 5 */
	size_t multipart_threshold; /* remote_put uses multipart upload above this: 0 means 16 MiB */
	size_t part_size;       /* multipart part size in bytes, >= 5 MiB: 0 means 8 MiB */
	/* open without checking that the remote answers (S3: no listing; directory: only the
	 * path's length): for a node that used this remote before and must mount while it is
	 * away; each call then says what is wrong */
	bool unchecked;
};

struct remote;

/*
 * Limits of one call, and where its failure is explained (the remote_*_with functions below).
 * Zero-initialise, then set what you need; a NULL struct remote_call means all defaults. Only
 * read during the call; err is written during the call only.
 */
struct remote_call {
	/*
	 * The whole call in milliseconds, counted from its start on CLOCK_MONOTONIC: every attempt,
	 * every backoff wait between attempts and, for a call made of several requests (multipart
	 * upload, a listing's pages, the read-back of put_if_absent, the repeat with credentials
	 * read again), all of them. 0 means none: each attempt is then bounded only by remote_opts'
	 * timeout_ms (no byte moved) and connect_timeout_ms, max_tries times. An attempt the
	 * deadline cuts short fails the call with -ETIMEDOUT; when an attempt failed on its own
	 * (refused, 5xx) and the deadline leaves no room for the wait before another, the call
	 * returns that attempt's error. Negative: -EINVAL.
	 * S3 only: the directory backend's system calls cannot be cut short (a hung NFS or CephFS
	 * mount blocks them in the kernel), so it ignores the deadline.
	 */
	long deadline_ms;
	/* remote_get: the largest object accepted, in bytes (-EFBIG above it); 0 means
	 * REMOTE_GET_MAX. S3 bounds every body it keeps by it (listing pages, error documents). */
	size_t max_len;
	/* errlen bytes for a one-line message for people, written when the call fails
	 * (NUL-terminated, truncated to errlen), unspecified on success; NULL when errlen is 0. */
	char *err;
	size_t errlen;
	/*
	 * Puts only: every reader of the object checks its bytes against a digest of its own (a
	 * chunk, named by its XXH3-128). S3 then signs the request without the payload's SHA-256
	 * (x-amz-content-sha256: UNSIGNED-PAYLOAD, AWS's "Signature Calculations for the
	 * Authorization Header", also accepted by Ceph RGW), which spares a SHA-256 pass over
	 * every byte on both ends, but only when the endpoint is https:// or this machine's
	 * loopback (remote_endpoint_plaintext false): there TLS or the host keeps the body as it was
	 * sent. Over plain http:// to another host the hash is kept, since XXH3 detects damage but
	 * not a body altered on purpose. The directory backend ignores it.
	 */
	bool self_checked;
};

/*
 * remote_open - open the store at url and check that it works.
 * url: "s3://BUCKET" or "s3://BUCKET/PREFIX" (PREFIX without leading or trailing '/'), or
 *   "file:///ABS/DIR" or "/ABS/DIR" (an existing directory). opts: may be NULL.
 * S3: lists at most one object under PREFIX (ListObjectsV2), which checks endpoint, credentials
 * and bucket at once. Directory: checks it is a directory, writable (access(2) W_OK|X_OK), and
 * creates and removes an empty temporary file in it (-EROFS, -ENOTCONN, -EIO, ... from that).
 * err: errlen bytes for a one-line message saying what is wrong and what to do, written on
 * every failure (NUL-terminated, truncated to errlen); may be NULL when errlen is 0.
 * Returns 0 and *ret_remote (owned by the caller: free with remote_close), or
 *   -EINVAL    url malformed, or options invalid (part_size < 5 MiB), or no credentials found
 *   -ENOENT    no such bucket (S3 404 NoSuchBucket) or no such directory
 *   -ENOTDIR   the path is not a directory; -EROFS it is on a read-only file system
 *   -EACCES    bad credentials or no permission (S3 403, e.g. SignatureDoesNotMatch,
 *              InvalidAccessKeyId, AccessDenied), or the directory is not writable
 *   -ECONNREFUSED nothing listens at the endpoint; -EHOSTUNREACH host unknown or unreachable;
 *   -ETIMEDOUT no answer in time; -EPROTO TLS failure or an answer that is not S3;
 *   -EIO       other HTTP errors (5xx after all tries); -ENOMEM.
 * Thread-safe (curl_global_init runs once, under pthread_once), provided no other thread
 * changes the environment meanwhile (it reads AWS_* variables with getenv(3)).
 */
int remote_open(const char *url, const struct remote_opts *opts, struct remote **ret_remote,
		char *err, size_t errlen);

/*
 * remote_endpoint - the URL r's requests go to (S3: the endpoint, "http://127.0.0.1:7480"), or
 * NULL when r sends nothing over a network (the directory backend) or r is NULL. Owned by r,
 * valid until remote_close. Thread-safe (read-only after remote_open).
 *
 * remote_endpoint_plaintext - is endpoint an http:// URL (not https://) whose host is not this
 * machine's loopback (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104, "localhost")? Then every chunk
 * and manifest crosses the network readable by anyone on the path, and SigV4 signs requests
 * without hiding them. A host name other than localhost answers true: it may resolve to
 * another host. false for NULL. Pure.
 */
const char *remote_endpoint(const struct remote *r);
bool remote_endpoint_plaintext(const char *endpoint);

/* remote_close - free r and everything it holds; NULL is a no-op. Not concurrently with calls on r. */
void remote_close(struct remote *r);

/*
 * Every operation below comes in two forms: remote_OP(...) and remote_OP_with(..., call), where
 * call (may be NULL) bounds it and receives a message on failure (struct remote_call);
 * remote_OP is remote_OP_with with call NULL: no deadline, REMOTE_GET_MAX, no message.
 * Errors every S3 call may return, besides those listed per operation:
 *   -ECONNREFUSED, -EHOSTUNREACH, -EPROTO, -EIO (5xx after all tries) as remote_open;
 *   -ETIMEDOUT  no answer within remote_opts' per-attempt limits, or within call's deadline;
 *   -EACCES     no permission, or credentials rejected as expired or unknown, also after
 *               reading them again (invariant 4: call->err then says they have expired);
 *   -EFBIG      an answer's body above call->max_len (a listing page, an error document);
 *   -EINVAL     a bad key, or call->deadline_ms < 0; -ENOMEM.
 * Every call is thread-safe (invariant 3), provided no other thread changes the environment
 * while an S3 call reads the credentials again (getenv(3), as remote_open).
 */

/*
 * remote_put_if_absent - store len bytes of buf under key unless an object is there already.
 * Durable on return (directory: fsync of file and directory; S3: the PUT's 200).
 * Returns 0 when this call created the object, or
 *   -EEXIST  an object was already there (its content is unchanged);
 *            S3: when a lost answer made this call retry and the retry found the object, it
 *            reads it back: exactly these bytes count as this call's own write (0), so a writer
 *            racing with identical bytes may also get 0;
 *   -EDQUOT  S3: the bucket or user is over its quota (403 QuotaExceeded, Ceph RGW);
 *   -EFBIG   len above 5 GiB (S3's single-PUT limit); the S3 errors above; directory: any errno
 *   of open, write, fsync, link (-ENOSPC, -EDQUOT, -EIO, ...). The temporary file is removed on
 *   every failure. A call that fails by its deadline may still have stored the object.
 * See invariant 2 for concurrent callers.
 */
int remote_put_if_absent(struct remote *r, const char *key, const void *buf, size_t len);
int remote_put_if_absent_with(struct remote *r, const char *key, const void *buf, size_t len,
			      const struct remote_call *call);

/*
 * remote_put - store len bytes of buf under key, replacing any object there.
 * S3: multipart upload when len > multipart_threshold (parts of part_size bytes, aborted on
 * failure; an abort the deadline leaves no time for is not sent, so the parts stay until a
 * bucket lifecycle rule removes them). Durable on return as remote_put_if_absent. Returns 0, or
 * the errors of remote_put_if_absent except -EEXIST (-EFBIG only above 10000 parts).
 */
int remote_put(struct remote *r, const char *key, const void *buf, size_t len);
int remote_put_with(struct remote *r, const char *key, const void *buf, size_t len,
		    const struct remote_call *call);

/*
 * remote_get - read the whole object at key.
 * Returns 0, *ret_buf (malloc'd, owned by the caller: free(3); not NUL-terminated; non-NULL even
 * for an empty object) and *ret_len in bytes, or
 *   -ENOENT no such object; -EFBIG the object is larger than call->max_len (REMOTE_GET_MAX by
 *   default): S3 by its Content-Length, before any allocation, or by the bytes received when
 *   there is none; directory by the file's size; the S3 errors above; directory: errors of open,
 *   fstat, pread.
 */
int remote_get(struct remote *r, const char *key, void **ret_buf, size_t *ret_len);
int remote_get_with(struct remote *r, const char *key, const struct remote_call *call,
		    void **ret_buf, size_t *ret_len);

/*
 * remote_get_range - read up to len bytes of the object at key from byte offset off into buf.
 * *ret_got is the number of bytes read: len, or fewer when the object ends first (0 when off is at
 * or past the end). Returns 0, or -ENOENT, the S3 errors above, directory: errors of open, pread.
 */
int remote_get_range(struct remote *r, const char *key, uint64_t off, void *buf, size_t len,
		     size_t *ret_got);
int remote_get_range_with(struct remote *r, const char *key, uint64_t off, void *buf, size_t len,
			  const struct remote_call *call, size_t *ret_got);

/*
 * remote_get_into - read the whole object at key into the caller's buf of cap bytes (owned by the
 * caller throughout), for a reader that receives many objects of a known largest size and keeps
 * one buffer for them: a body allocated afresh for each has every page faulted in and cleared
 * again (tests/bench/RESULTS.md, "A cold node's fetches"). One GET without a Range header (RGW
 * serves a ranged GET slower: the same RESULTS.md section). *ret_len gets the object's length.
 * Returns 0, or -EFBIG (the object has more than cap bytes: S3 by its Content-Length before a
 * byte of the body is read, or by the bytes received; directory by the file's size; buf's
 * content is then undefined), -ENOENT, -EOPNOTSUPP (a backend without the op: only a test's
 * wrapper), the S3 errors above, directory: errors of open, fstat, pread. Thread-safe as
 * remote_get.
 */
int remote_get_into(struct remote *r, const char *key, void *buf, size_t cap, size_t *ret_len);
int remote_get_into_with(struct remote *r, const char *key, const struct remote_call *call,
			 void *buf, size_t cap, size_t *ret_len);

/*
 * remote_head - the size in bytes of the object at key, into *ret_size (may be NULL to test for
 * existence). Returns 0, or -ENOENT, the S3 errors above, directory: errors of stat.
 */
int remote_head(struct remote *r, const char *key, uint64_t *ret_size);
int remote_head_with(struct remote *r, const char *key, const struct remote_call *call,
		     uint64_t *ret_size);

/*
 * remote_list_fn - called once per object by remote_list with its key (borrowed: valid during the
 * call only) and size in bytes. Return 0 to go on; any other value stops the listing, and
 * remote_list returns it.
 */
typedef int (*remote_list_fn)(const char *key, uint64_t size, void *arg);

/*
 * remote_list - call fn for every object whose key starts with prefix (a plain string prefix,
 * "" or NULL for all; "a/b" matches "a/b/c" and "a/bc"). Order: S3 in lexicographic byte order
 * of the keys; directory unspecified. Objects put or deleted during the listing may or may not
 * be seen. Directory: temporary files are skipped. S3: pages of up to 1000 keys, followed by
 * continuation token; the deadline covers every page and the time fn takes.
 * Returns 0 when all were listed, fn's nonzero value when it stopped the listing, or -EINVAL
 * (prefix longer than REMOTE_KEY_MAX), -EPROTO (an S3 answer that does not parse), the S3
 * errors above; directory: errors of opendir/readdir/stat other than -ENOENT (an entry
 * deleted during the walk is skipped).
 */
int remote_list(struct remote *r, const char *prefix, remote_list_fn fn, void *arg);
int remote_list_with(struct remote *r, const char *prefix, remote_list_fn fn, void *arg,
		     const struct remote_call *call);

/*
 * remote_list_after - remote_list, but only the objects whose key is above after in byte order
 * (memcmp of the bytes, a shorter key below any key it begins; S3 calls it "UTF-8 binary
 * order"): a caller that saw the keys up to K lists only what was put above K since. after ""
 * or NULL: every key, as remote_list. Keys at or below after that were put or deleted since are
 * not seen: only a whole listing learns them.
 * S3: ListObjectsV2 with start-after (AWS S3 API Reference, ListObjectsV2: "StartAfter is where
 * you want Amazon S3 to start listing from. Amazon S3 starts listing after this specified key";
 * results "in UTF-8 binary order"), so the endpoint sends only the keys after it; the keys are
 * also checked here, for an endpoint that ignores the parameter. Directory: the walk skips the
 * directories whose keys all sort at or below after, so it reads the directories of the newer
 * keys only. Order and the rest as remote_list.
 * Returns as remote_list; -EINVAL also when after is longer than REMOTE_KEY_MAX.
 * Thread-safe (invariant 3).
 */
int remote_list_after(struct remote *r, const char *prefix, const char *after,
		      remote_list_fn fn, void *arg);
int remote_list_after_with(struct remote *r, const char *prefix, const char *after,
			   remote_list_fn fn, void *arg, const struct remote_call *call);

/*
 * remote_delete - delete the object at key. Deleting an absent object returns 0 (S3's DELETE
 * cannot tell the two apart). Directory: the file is unlinked and the directory fsynced; empty
 * parent directories are left in place. Returns 0, or the S3 errors above; directory: errors of
 * unlink and fsync (-EACCES, -EIO, ...).
 */
int remote_delete(struct remote *r, const char *key);
int remote_delete_with(struct remote *r, const char *key, const struct remote_call *call);

#endif /* CKPTFS_REMOTE_H */
