/*
 * s3_http.c — one S3 request over libcurl: SigV4 signing (CURLOPT_AWS_SIGV4), the payload hash
 * header, retries with backoff, and the mapping of libcurl and HTTP failures to errno.
 *
 * libcurl 7.88 (Debian 12) facts this file builds on (/work/shared/research/distributed.md):
 *   - the URL's query string goes verbatim into the canonical request: callers pass it sorted by
 *     name and percent-encoded, valueless parameters as "uploads=";
 *   - every header in CURLOPT_HTTPHEADER is signed, so an empty "Expect:" (which libcurl then
 *     does not send) breaks the signature: none is ever added;
 *   - RGW requires x-amz-content-sha256: the hex SHA-256 of the payload is added here (so the
 *     server also checks the bytes it stores), or UNSIGNED-PAYLOAD for a request that asks for
 *     it (s3_req.unsigned_payload); libcurl's SigV4 takes the header's value as the payload
 *     hash of the canonical request (lib/http_aws_sigv4.c, curl 7.88: an x-amz-content-sha256
 *     header given is used, not computed).
 * Invariants:
 *   1. One easy handle per s3_perform call, never shared between threads; the CURLSH they share
 *      (DNS and connection caches) is locked by the share_mu mutexes (leaf locks).
 *   2. A request is retried only on errors that leave the object unchanged or a retry
 *      idempotent: PUT of a whole object, GET, HEAD, DELETE, and the multipart calls (a part PUT
 *      replaces the part; a repeated Complete of a finished upload answers 404 NoSuchUpload,
 *      which remote_s3.c checks with a HEAD).
 *   3. A call ends by its deadline (remote_lim), measured like every backoff wait on
 *      CLOCK_MONOTONIC: each attempt's CURLOPT_TIMEOUT_MS is what is left of it, and no wait
 *      starts that would reach it. Whether the deadline ended a call is recorded as it happens
 *      (call.out_of_time), not read from the clock after. Without one, an attempt ends only
 *      when no byte moved for timeout_ms (CURLOPT_LOW_SPEED_TIME) or a connection took
 *      connect_timeout_ms.
 *   4. A body kept in memory never grows past lim->max_len: on_header refuses a Content-Length
 *      above it before any allocation, on_write the byte that would pass it (a body without a
 *      Content-Length, or longer than it said). Either stops the transfer: -EFBIG, not retried.
 *   5. Each call signs with one reference to a credential set (s3_creds.c), exchanged only by
 *      renew() after a rejection, at most once per call.
 *   6. Every answer's bytes are acknowledged as soon as libcurl hands them over (ack_now): a
 *      server that writes its headers and its body apart with Nagle's algorithm on (Ceph RGW's
 *      beast frontend by default: its `tcp_nodelay` option is 0) holds the body until the
 *      client acknowledges the headers, and Linux delays that acknowledgement up to 40 ms on a
 *      connection in request-answer use (TCP_DELACK_MIN, include/net/tcp.h). Measured on RGW
 *      over loopback: a GET of a 1 KiB object took 44 ms, one of 900 KB 2 ms or, one time in
 *      five, 45 ms (tests/bench/RESULTS.md, "Nagle and the delayed ACK"). libcurl 7.88 has no
 *      socket for a transfer in progress (CURLINFO_ACTIVESOCKET is the last finished one's), so
 *      s->socks lists the sockets it opens (on_sockopt, on_closesocket) and ack_now finds this
 *      transfer's by its local port (CURLINFO_LOCAL_PORT).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libxml/parser.h>
#include <openssl/evp.h>

#include "store/remote/s3_int.h"

#define BACKOFF_BASE_MS 100
#define BACKOFF_CAP_MS 4000

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static int global_rc;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -ENOMEM;
	xmlInitParser();
}

int s3_global_init(void)
{
	pthread_once(&global_once, global_init);
	return global_rc;
}

static void share_lock(CURL *h, curl_lock_data d, curl_lock_access a, void *p)
{
	struct remote_s3 *s = p;

	pthread_mutex_lock(&s->share_mu[d]);
}

static void share_unlock(CURL *h, curl_lock_data d, void *p)
{
	struct remote_s3 *s = p;

	pthread_mutex_unlock(&s->share_mu[d]);
}

int s3_init_share(struct remote_s3 *s)
{
	int i;

	for (i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&s->share_mu[i], NULL);
	pthread_mutex_init(&s->socks_mu, NULL);
	for (i = 0; i < S3_SOCKS_MAX; i++)
		s->socks[i] = -1;
	s->share = curl_share_init();
	if (!s->share)
		return -ENOMEM;
	curl_share_setopt(s->share, CURLSHOPT_LOCKFUNC, share_lock);
	curl_share_setopt(s->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
	curl_share_setopt(s->share, CURLSHOPT_USERDATA, s);
	curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
	return 0;
}

void s3_free_share(struct remote_s3 *s)
{
	int i;

	if (s->share)
		curl_share_cleanup(s->share);
	s->share = NULL;
	for (i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&s->share_mu[i]);
	pthread_mutex_destroy(&s->socks_mu); /* after the cleanup, which closes the connections */
}

/* A new connection's socket (CURLOPT_SOCKOPTFUNCTION): listed for ack_now (invariant 6). */
static int on_sockopt(void *p, curl_socket_t fd, curlsocktype purpose)
{
	struct remote_s3 *s = p;

	if (purpose != CURLSOCKTYPE_IPCXN)
		return CURL_SOCKOPT_OK;
	pthread_mutex_lock(&s->socks_mu);
	for (int i = 0; i < S3_SOCKS_MAX; i++) {
		if (s->socks[i] < 0) {
			s->socks[i] = fd;
			break;
		}
	}
	pthread_mutex_unlock(&s->socks_mu);
	return CURL_SOCKOPT_OK;
}

/* A connection's end (CURLOPT_CLOSESOCKETFUNCTION): off the list before its number is reused.
 * libcurl calls it with the data of the handle that opened the connection, always s. */
static int on_closesocket(void *p, curl_socket_t fd)
{
	struct remote_s3 *s = p;

	pthread_mutex_lock(&s->socks_mu);
	for (int i = 0; i < S3_SOCKS_MAX; i++) {
		if (s->socks[i] == fd)
			s->socks[i] = -1;
	}
	pthread_mutex_unlock(&s->socks_mu);
	return close(fd);
}

/* The listed socket whose local port is port, or -1. */
static int sock_of_port(struct remote_s3 *s, long port)
{
	int fd = -1;

	pthread_mutex_lock(&s->socks_mu);
	for (int i = 0; i < S3_SOCKS_MAX && fd < 0; i++) {
		struct sockaddr_storage a;
		socklen_t alen = sizeof(a);
		long p = -1;

		if (s->socks[i] < 0 || getsockname(s->socks[i], (struct sockaddr *)&a, &alen) < 0)
			continue;
		if (a.ss_family == AF_INET)
			p = ntohs(((struct sockaddr_in *)&a)->sin_port);
		else if (a.ss_family == AF_INET6)
			p = ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
		if (p == port)
			fd = s->socks[i];
	}
	pthread_mutex_unlock(&s->socks_mu);
	return fd;
}

int s3_status_errno(long status)
{
	if (status >= 200 && status < 300)
		return 0;
	switch (status) {
	case 404:
		return -ENOENT;
	case 401:
	case 403:
		return -EACCES;
	case 412:
		return -EEXIST;
	case 400:
		return -EINVAL;
	case 416:
		return -ERANGE;
	case 429:
		return -EAGAIN;
	default:
		return -EIO;
	}
}

int s3_resp_errno(const struct s3_resp *resp)
{
	return resp->creds_rejected ? -EACCES : s3_status_errno(resp->status);
}

int s3_encode(const char *s, bool keep_slash, char *out, size_t cap)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/')) {
			if (o + 1 >= cap)
				return -ENAMETOOLONG;
			out[o++] = (char)c;
		} else {
			if (o + 3 >= cap)
				return -ENAMETOOLONG;
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	if (o >= cap)
		return -ENAMETOOLONG;
	out[o] = '\0';
	return 0;
}

/* The hex SHA-256 of len bytes at buf into hex (65 bytes). */
static int sha256_hex(const void *buf, size_t len, char *hex)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0, i;

	if (!EVP_Digest(buf ? buf : "", len, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
		return -ENOMEM;
	for (i = 0; i < mdlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	return 0;
}

/* Per-call state the libcurl callbacks see. */
struct call {
	struct remote_s3 *s;
	CURL *h;
	const struct s3_req *req;
	struct s3_resp *resp;
	const struct remote_lim *lim;
	struct s3_creds *creds; /* the set this call signs with (a reference: s3_creds_get) */
	struct curl_slist *hdrs;
	size_t sent;           /* payload bytes handed to libcurl in this attempt */
	int ack_fd;            /* this attempt's socket (ack_now): -1 not looked up, -2 not found */
	/* The call's deadline ended it: no time left for an attempt or a backoff wait, or libcurl
	 * timed out an attempt given what was left. Kept rather than asked of the clock at the end:
	 * libcurl ends an attempt by its own clock, CLOCK_MONOTONIC_RAW in whole milliseconds
	 * (curl 7.88 lib/timeval.c Curl_now, Curl_timediff), which need not agree to the
	 * millisecond with remote_now_ns's CLOCK_MONOTONIC. */
	bool out_of_time;
};

/* Acknowledge what this attempt's connection received now, not after the delayed-ACK timer
 * (invariant 6): TCP_QUICKACK sends an acknowledgement that is due at once (tcp(7); the flag
 * does not stay, hence once per batch of bytes). The transfer owns its connection meanwhile, so
 * the socket found stays its own. Best effort: failing leaves the kernel's own timing. */
static void ack_now(struct call *c)
{
	long port = -1;
	int one = 1;

	if (c->ack_fd == -1) {
		c->ack_fd = -2;
		if (curl_easy_getinfo(c->h, CURLINFO_LOCAL_PORT, &port) == CURLE_OK && port > 0) {
			int fd = sock_of_port(c->s, port);

			if (fd >= 0)
				c->ack_fd = fd;
		}
	}
	if (c->ack_fd >= 0)
		(void)setsockopt(c->ack_fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
}

static size_t on_read(char *dst, size_t size, size_t n, void *p)
{
	struct call *c = p;
	size_t left = c->req->body_len - c->sent, take = size * n < left ? size * n : left;

	memcpy(dst, (const char *)c->req->body + c->sent, take);
	c->sent += take;
	return take;
}

static int on_seek(void *p, curl_off_t off, int origin)
{
	struct call *c = p;

	if (origin != SEEK_SET || off < 0 || (uint64_t)off > c->req->body_len)
		return CURL_SEEKFUNC_FAIL;
	c->sent = (size_t)off;
	return CURL_SEEKFUNC_OK;
}

/* Keep the start of a non-2xx answer's body, where S3 puts its error document. */
static void keep_errdoc(struct s3_resp *resp, const char *src, size_t len)
{
	size_t room = sizeof(resp->errdoc) - 1 - resp->errdoc_len;

	if (len > room)
		len = room;
	memcpy(resp->errdoc + resp->errdoc_len, src, len);
	resp->errdoc_len += len;
	resp->errdoc[resp->errdoc_len] = '\0';
}

static size_t on_write(char *src, size_t size, size_t n, void *p)
{
	struct call *c = p;
	struct s3_body *b = &c->resp->body;
	size_t len = size * n;
	long status = 0;

	ack_now(c);
	curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &status);
	if (status < 200 || status >= 300)
		keep_errdoc(c->resp, src, len);
	if (b->fixed && status >= 200 && status < 300) {
		size_t take = len < b->cap - b->len ? len : b->cap - b->len;

		if (b->whole && take < len) {
			b->too_big = true;
			return 0; /* CURLE_WRITE_ERROR */
		}

		memcpy(b->fixed + b->len, src, take);
		b->len += take;
		b->overflow |= take < len;
		return len;
	}
	if (b->fixed)
		return len; /* an error document in place of the range: errdoc has its start */
	if (len > b->limit - b->len) {
		/* an error document past the call's bound, which is the object's: errdoc has its
		 * start, the rest is dropped and the status decides */
		if (status < 200 || status >= 300)
			return len;
		/* more than the Content-Length on_header checked, or a body without one */
		b->too_big = true;
		return 0; /* CURLE_WRITE_ERROR */
	}
	if (b->len + len + 1 > b->cap) {
		curl_off_t cl = -1;
		size_t cap = b->cap ? b->cap : 4096;
		char *nb;

		/* The first write of a body of known size: room for all of it at once (on_header
		 * refused a Content-Length above limit). */
		if (!b->cap && curl_easy_getinfo(c->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) ==
				       CURLE_OK && cl > 0 && (uint64_t)cl <= b->limit)
			cap = (size_t)cl + 1;
		while (cap < b->len + len + 1)
			cap *= 2;
		nb = realloc(b->buf, cap);
		if (!nb)
			return 0; /* CURLE_WRITE_ERROR */
		b->buf = nb;
		b->cap = cap;
	}
	memcpy(b->buf + b->len, src, len);
	b->len += len;
	b->buf[b->len] = '\0';
	return len;
}

/*
 * The end of a final answer's headers: refuse a body the Content-Length says is above the limit
 * before a byte of it is read or allocated. Returns false to stop the transfer.
 */
static bool headers_done(struct call *c)
{
	struct s3_body *b = &c->resp->body;
	curl_off_t cl = -1;
	long status = 0;

	curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &status);
	/* 1xx: another header block follows. HEAD: Content-Length is the object's, no body. A
	 * fixed buffer for a range never grows: what does not fit is dropped (on_write). */
	if (status < 200 || (b->fixed && !b->whole) || strcmp(c->req->method, "HEAD") == 0)
		return true;
	if (status >= 300)
		return true; /* an error document, not the object the bound is for: on_write */
	if (curl_easy_getinfo(c->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) == CURLE_OK &&
	    cl > 0 && (uint64_t)cl > (b->fixed ? b->cap : b->limit)) {
		c->resp->content_length = cl;
		b->too_big = true;
		return false;
	}
	return true;
}

static size_t on_header(char *src, size_t size, size_t n, void *p)
{
	struct call *c = p;
	size_t len = size * n;

	if ((len == 2 && src[0] == '\r' && src[1] == '\n') || (len == 1 && src[0] == '\n')) {
		ack_now(c); /* the body may wait behind the headers' acknowledgement */
		return headers_done(c) ? len : 0;
	}
	if (len > 5 && strncasecmp(src, "ETag:", 5) == 0) {
		const char *v = src + 5;
		size_t vlen = len - 5;

		while (vlen && (*v == ' ' || *v == '\t'))
			v++, vlen--;
		while (vlen && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
			vlen--;
		snprintf(c->resp->etag, sizeof(c->resp->etag), "%.*s", (int)vlen, v);
	}
	return len;
}

/* The request URL: endpoint/bucket[/prefix+key][?query]. malloc'd. */
static char *make_url(const struct remote_s3 *s, const struct s3_req *req)
{
	char full[2 * REMOTE_KEY_MAX + 2], enc[3 * sizeof(full)], *url;
	size_t cap;

	enc[0] = '\0';
	if (req->key) {
		snprintf(full, sizeof(full), "%s%s", req->raw_key ? "" : s->prefix, req->key);
		if (s3_encode(full, true, enc, sizeof(enc)) < 0)
			return NULL;
	}
	cap = strlen(s->endpoint) + strlen(s->bucket) + strlen(enc) +
	      (req->query ? strlen(req->query) : 0) + 4;
	url = malloc(cap);
	if (url)
		snprintf(url, cap, "%s/%s%s%s%s%s", s->endpoint, s->bucket, req->key ? "/" : "", enc,
			 req->query ? "?" : "", req->query ? req->query : "");
	return url;
}

/* The signed headers and the credentials of c->creds on the easy handle. Returns 0, -ENOMEM. */
static int set_auth(struct call *c)
{
	const struct s3_req *req = c->req;
	struct curl_slist *hdrs;
	char line[128], hex[65];
	int i;

	if (req->unsigned_payload)
		snprintf(hex, sizeof(hex), "UNSIGNED-PAYLOAD");
	else if (sha256_hex(req->body, req->body_len, hex) < 0)
		return -ENOMEM;
	snprintf(line, sizeof(line), "x-amz-content-sha256: %s", hex);
	hdrs = curl_slist_append(NULL, line);
	for (i = 0; hdrs && i < 3 && req->hdr[i]; i++)
		hdrs = curl_slist_append(hdrs, req->hdr[i]);
	if (hdrs && c->creds->token_hdr)
		hdrs = curl_slist_append(hdrs, c->creds->token_hdr);
	if (hdrs && strcmp(req->method, "POST") == 0)
		hdrs = curl_slist_append(hdrs, "Content-Type: application/xml");
	if (!hdrs)
		return -ENOMEM;
	curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(c->h, CURLOPT_USERPWD, c->creds->userpwd);
	curl_slist_free_all(c->hdrs); /* after the handle no longer points to it */
	c->hdrs = hdrs;
	return 0;
}

/* Build the easy handle for c->req. Returns 0, or -ENOMEM. */
static int setup(struct remote_s3 *s, struct call *c, const char *url)
{
	const struct s3_req *req = c->req;
	CURL *h = c->h;

	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_SHARE, s->share);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_AWS_SIGV4, s->sigv4);
	/* A stall, not a slow transfer, fails an attempt: objects may be gigabytes. */
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, s->timeout_ms >= 1000 ? s->timeout_ms / 1000 : 1L);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->resp->curl_msg);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, c);
	curl_easy_setopt(h, CURLOPT_SOCKOPTFUNCTION, on_sockopt);
	curl_easy_setopt(h, CURLOPT_SOCKOPTDATA, s);
	curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, on_closesocket);
	curl_easy_setopt(h, CURLOPT_CLOSESOCKETDATA, s);
	if (strcmp(req->method, "PUT") == 0) {
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(h, CURLOPT_READDATA, c);
		curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
		curl_easy_setopt(h, CURLOPT_SEEKDATA, c);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->body_len);
	} else if (strcmp(req->method, "POST") == 0) {
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->body ? req->body : "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
	} else if (strcmp(req->method, "HEAD") == 0) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (strcmp(req->method, "DELETE") == 0) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
	}
	return set_auth(c);
}

/* errno for a libcurl failure; *retry set when another attempt may succeed. */
static int curl_errno(CURL *h, CURLcode cc, bool *retry)
{
	long os = 0;

	*retry = true;
	switch (cc) {
	case CURLE_COULDNT_CONNECT:
		curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &os);
		return os == EHOSTUNREACH || os == ENETUNREACH ? -EHOSTUNREACH : -ECONNREFUSED;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return -EHOSTUNREACH;
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return -EIO;
	case CURLE_OUT_OF_MEMORY:
	case CURLE_WRITE_ERROR:
		*retry = false;
		return -ENOMEM;
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_WEIRD_SERVER_REPLY:
	case CURLE_UNSUPPORTED_PROTOCOL:
		*retry = false;
		return -EPROTO;
	default:
		*retry = false;
		return -EIO;
	}
}

/*
 * Sleep before the retry that follows failed attempt number try (1-based): "equal jitter" over
 * d = min(cap, base * 2^(try-1)), i.e. uniformly in [d/2, d] (M. Brooker, "Exponential Backoff
 * And Jitter", AWS Architecture Blog, 2015): 50-100 ms, 100-200 ms, 200-400 ms, ...
 * Measured on CLOCK_MONOTONIC, as lim's deadline. Returns false, without sleeping, when the wait
 * would reach the deadline: no time is left for another attempt.
 */
static bool backoff(int try, const struct remote_lim *lim)
{
	unsigned long ms = BACKOFF_BASE_MS << (try < 10 ? try - 1 : 9), rnd = 0;
	uint64_t until;
	struct timespec ts;

	if (ms > BACKOFF_CAP_MS)
		ms = BACKOFF_CAP_MS;
	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd))
		rnd = (unsigned long)remote_now_ns();
	ms = ms / 2 + rnd % (ms / 2 + 1);
	until = remote_now_ns() + (uint64_t)ms * 1000000u;
	if (lim->deadline_ns && until >= lim->deadline_ns)
		return false;
	ts.tv_sec = (time_t)(until / 1000000000u);
	ts.tv_nsec = (long)(until % 1000000000u);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
	return true;
}

/*
 * Whether resp says the credentials are expired or unknown (remote.h invariant 4): S3 error
 * codes (AWS "S3 error responses": ExpiredToken and TokenRefreshRequired are 400, InvalidToken
 * 400, InvalidAccessKeyId and SignatureDoesNotMatch 403), or any 400/401/403 to a HEAD, whose
 * answer carries no body to tell.
 */
static bool creds_rejected(const struct s3_req *req, const struct s3_resp *resp)
{
	static const char *const codes[] = { "ExpiredToken", "TokenRefreshRequired", "InvalidToken",
					     "InvalidAccessKeyId", "SignatureDoesNotMatch" };

	if (resp->status != 400 && resp->status != 401 && resp->status != 403)
		return false;
	if (strcmp(req->method, "HEAD") == 0 && !resp->code[0])
		return true;
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		if (strcmp(resp->code, codes[i]) == 0)
			return true;
	return false;
}

/*
 * One attempt of c->req, bounded by what is left of the deadline. Returns 0 when an answer came
 * (*retry: a 5xx or 429, worth another attempt), or -errno of a network failure (*retry: whether
 * another attempt may succeed), -EFBIG (a body above the limit), -ETIMEDOUT (no time left).
 */
static int attempt(struct remote_s3 *s, struct call *c, int try, bool *retry)
{
	struct s3_resp *resp = c->resp;
	long left = remote_lim_left_ms(c->lim);
	curl_off_t cl = -1;
	CURLcode cc;
	int rc;

	*retry = false;
	if (left == 0) {
		c->out_of_time = true;
		return -ETIMEDOUT;
	}
	/* the whole transfer, not only a stall, within the deadline; none without one */
	curl_easy_setopt(c->h, CURLOPT_TIMEOUT_MS, left == LONG_MAX ? 0L : left);
	curl_easy_setopt(c->h, CURLOPT_CONNECTTIMEOUT_MS,
			 left < s->connect_timeout_ms ? left : s->connect_timeout_ms);
	c->sent = 0;
	c->ack_fd = -1; /* a retry may run on another connection */
	resp->body.len = 0;
	resp->body.overflow = false;
	resp->body.too_big = false;
	resp->errdoc_len = 0;
	resp->errdoc[0] = '\0';
	resp->code[0] = '\0';
	resp->etag[0] = '\0';
	resp->curl_msg[0] = '\0';
	resp->status = 0;
	resp->content_length = -1;
	resp->tries = try;
	cc = curl_easy_perform(c->h);
	if (cc == CURLE_OK) {
		curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &resp->status);
		curl_easy_getinfo(c->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
		resp->content_length = cl;
		if (resp->status >= 300)
			s3_xml_error_code(resp->errdoc, resp->errdoc_len, resp->code,
					  sizeof(resp->code));
		*retry = resp->status >= 500 || resp->status == 429;
		return 0;
	}
	if (resp->body.too_big)
		return -EFBIG;
	rc = curl_errno(c->h, cc, retry);
	/* a timeout is the deadline's when no other limit of the attempt came first: the
	 * connection's (connect_timeout_ms) and a stall's (timeout_ms) were no shorter than left */
	if (cc == CURLE_OPERATION_TIMEDOUT && left != LONG_MAX && left <= s->connect_timeout_ms &&
	    left <= s->timeout_ms)
		c->out_of_time = true;
	if (!resp->curl_msg[0])
		snprintf(resp->curl_msg, sizeof(resp->curl_msg), "%s", curl_easy_strerror(cc));
	return rc;
}

/* The object a request names, for messages. */
static const char *what(const struct s3_req *req)
{
	return req->key ? req->key : "(the bucket)";
}

/* Explain the outcome rc of c's last attempt in c->lim->err (s3_perform). */
static void describe(struct remote_s3 *s, const struct call *c, int rc)
{
	const struct remote_lim *lim = c->lim;
	const struct s3_resp *resp = c->resp;
	const char *m = c->req->method;

	if (!lim->errlen || (rc == 0 && resp->status >= 200 && resp->status < 300))
		return;
	if (rc == -ETIMEDOUT && c->out_of_time)
		remote_errf(lim->err, lim->errlen, rc,
			    "no answer from the S3 endpoint '%s' to %s '%s' within the call's "
			    "deadline of %ld ms (%d attempt%s)", s->endpoint, m, what(c->req),
			    lim->deadline_ms, resp->tries, resp->tries == 1 ? "" : "s");
	else if (rc == -EFBIG && resp->content_length >= 0)
		remote_errf(lim->err, lim->errlen, rc,
			    "the S3 endpoint '%s' answered %s '%s' with %lld bytes, more than the "
			    "%zu this call accepts", s->endpoint, m, what(c->req),
			    (long long)resp->content_length, lim->max_len);
	else if (rc == -EFBIG)
		remote_errf(lim->err, lim->errlen, rc,
			    "the S3 endpoint '%s' answered %s '%s' with more than the %zu bytes "
			    "this call accepts", s->endpoint, m, what(c->req), lim->max_len);
	else if (rc < 0)
		remote_errf(lim->err, lim->errlen, rc,
			    "cannot reach the S3 endpoint '%s' for %s '%s': %s (%s)", s->endpoint,
			    m, what(c->req), strerror(-rc), resp->curl_msg);
	else if (resp->creds_rejected)
		remote_errf(lim->err, lim->errlen, -EACCES,
			    "the S3 endpoint '%s' rejected access key '%s' (HTTP %ld %s), also "
			    "after reading the credentials again: they have expired (or are "
			    "wrong); renew them in AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and "
			    "AWS_SESSION_TOKEN or in profile '%s' of ~/.aws/credentials",
			    s->endpoint, c->creds->access_key, resp->status, resp->code,
			    c->creds->profile);
	else
		remote_errf(lim->err, lim->errlen, -EIO,
			    "the S3 endpoint '%s' answered %s '%s' with HTTP %ld %s%s",
			    s->endpoint, m, what(c->req), resp->status, resp->code,
			    resp->tries > 1 ? " after all tries" : "");
}

/* After a rejection of c->creds: the set in use now, when it differs. 1: send again, 0: not,
 * -ENOMEM. */
static int renew(struct remote_s3 *s, struct call *c)
{
	int rc = s3_creds_refresh(s, c->creds->gen);

	if (rc <= 0)
		return rc;
	s3_creds_put(c->creds);
	c->creds = s3_creds_get(s);
	rc = set_auth(c);
	return rc < 0 ? rc : 1;
}

int s3_perform(struct remote_s3 *s, const struct s3_req *req, const struct remote_lim *lim,
	       struct s3_resp *resp)
{
	struct call c = { .s = s, .req = req, .resp = resp, .lim = lim, .creds = s3_creds_get(s) };
	char *url = make_url(s, req);
	bool renewed = false, retry = false;
	int rc, try = 0;

	resp->content_length = -1;
	resp->body.limit = lim->max_len;
	c.h = curl_easy_init();
	rc = url && c.h ? setup(s, &c, url) : -ENOMEM;
	while (rc == 0) {
		rc = attempt(s, &c, ++try, &retry);
		if (rc == 0 && !renewed && creds_rejected(req, resp)) {
			renewed = true; /* once per call: a second rejection is final */
			rc = renew(s, &c);
			if (rc > 0) {
				try--; /* a rejected request stored nothing: not a try */
				rc = 0;
				continue;
			}
			if (rc < 0)
				break;
		}
		if (!retry || try >= s->max_tries)
			break;
		if (!backoff(try, lim)) {
			c.out_of_time = true;
			break;
		}
		rc = 0;
	}
	if (rc == 0 && creds_rejected(req, resp))
		resp->creds_rejected = true;
	describe(s, &c, rc);
	if (c.h)
		curl_easy_cleanup(c.h);
	curl_slist_free_all(c.hdrs);
	s3_creds_put(c.creds);
	free(url);
	return rc;
}
