/*
 * test_remote_fault.c — the S3 backend of store/remote/remote.h against an endpoint that
 * misbehaves: a tiny HTTP server on loopback, in this file, that answers remote_open's listing
 * and then, as the test asks, never answers, answers 503 forever, announces or streams a body
 * larger than any object, or rejects one access key as expired. What each test checks is
 * remote.h's invariant 5 (every call bounded, in time and memory) and invariant 4 (expired
 * credentials read again once).
 *
 * The server does not check signatures: it reads the access key from the Authorization
 * header's Credential= (what SigV4 signs with), which is all the credential tests need.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tests/lib/ctest.h"
#include "store/remote/remote.h"

/* What the server does with a request other than a listing. */
enum fault_mode {
	FAULT_OK,           /* GET: 200 "hello"; HEAD: 200, 5 bytes; PUT, DELETE: 200 */
	FAULT_HANG,         /* accept, read the request, never answer */
	FAULT_503,          /* 503 SlowDown, every time */
	FAULT_HUGE_LENGTH,  /* 200 with Content-Length: 1 TiB, a few bytes, then nothing */
	FAULT_HUGE_CHUNKED, /* 200, chunked, FAULT_STREAM_BYTES of body unless the client quits */
};

#define FAULT_STREAM_BYTES (REMOTE_GET_MAX + 16u * 1024 * 1024)
#define FAULT_PARKED_MAX 64

static struct fault_srv {
	int lfd, stop[2];
	int port;
	pthread_t th;
	_Atomic int mode;
	_Atomic int requests;          /* requests read, the listing of remote_open included */
	pthread_mutex_t mu;
	char reject_key[64];           /* requests signed with it: 400/403 reject_code; mu */
	char reject_code[64];          /* mu */
	char last_key[64];             /* the access key of the last request; mu */
	char last_method[16];          /* mu */
	char last_sha[80];             /* the last request's x-amz-content-sha256; mu */
	int parked[FAULT_PARKED_MAX];  /* connections never answered: closed at fault_stop */
	int nparked;
} srv;

static void send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n <= 0)
			return; /* the client gave up: what the test wants to see */
		p += n;
		len -= (size_t)n;
	}
}

static void answer(int fd, const char *status, const char *extra, const char *body)
{
	char head[512];

	snprintf(head, sizeof(head),
		 "HTTP/1.1 %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n", status,
		 strlen(body), extra);
	send_all(fd, head, strlen(head));
	send_all(fd, body, strlen(body));
}

/* Stream FAULT_STREAM_BYTES in chunks of 64 KiB; stops when the client closes. */
static void stream_chunked(int fd)
{
	static char chunk[64 * 1024 + 16];
	const char *head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
			   "Connection: close\r\n\r\n";
	size_t sent = 0;
	int hl;

	send_all(fd, head, strlen(head));
	hl = snprintf(chunk, sizeof(chunk), "%x\r\n", 64 * 1024);
	memset(chunk + hl, 'x', 64 * 1024);
	memcpy(chunk + hl + 64 * 1024, "\r\n", 2);
	while (sent < FAULT_STREAM_BYTES) {
		ssize_t n = send(fd, chunk, (size_t)hl + 64 * 1024 + 2, MSG_NOSIGNAL);

		if (n <= 0)
			return;
		sent += 64 * 1024;
	}
	send_all(fd, "0\r\n\r\n", 5);
}

/* Read one request's head and body (Content-Length) from fd into req (cap bytes). */
static bool read_request(int fd, char *req, size_t cap)
{
	size_t len = 0, body = 0, want;
	char *end = NULL, *cl;

	while (!end) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (len + 1 >= cap || poll(&p, 1, 2000) <= 0)
			return false;
		n = recv(fd, req + len, cap - 1 - len, 0);
		if (n <= 0)
			return false;
		len += (size_t)n;
		req[len] = '\0';
		end = strstr(req, "\r\n\r\n");
	}
	cl = strcasestr(req, "\r\nContent-Length:");
	if (cl && cl < end)
		body = strtoul(cl + 17, NULL, 10);
	want = (size_t)(end + 4 - req) + body;
	/* libcurl asks before a PUT's body, and waits a second for an answer that never comes */
	if (len < want && strcasestr(req, "\r\nExpect: 100-continue"))
		send_all(fd, "HTTP/1.1 100 Continue\r\n\r\n", 25);
	while (len < want) { /* the body: read and dropped */
		char sink[4096];
		ssize_t n = recv(fd, sink, sizeof(sink), 0);

		if (n <= 0)
			return false;
		len += (size_t)n;
	}
	return true;
}

static void serve(int fd)
{
	char req[16384], key[64] = "", method[16] = "", sha[80] = "", *cred, *sh;
	bool reject;

	if (!read_request(fd, req, sizeof(req))) {
		close(fd);
		return;
	}
	atomic_fetch_add(&srv.requests, 1);
	sscanf(req, "%15s", method);
	cred = strstr(req, "Credential=");
	if (cred)
		sscanf(cred + 11, "%63[^/]", key);
	sh = strcasestr(req, "\r\nx-amz-content-sha256:");
	if (sh)
		sscanf(sh + 24, " %79[^\r]", sha);
	pthread_mutex_lock(&srv.mu);
	snprintf(srv.last_sha, sizeof(srv.last_sha), "%s", sha);
	snprintf(srv.last_key, sizeof(srv.last_key), "%s", key);
	snprintf(srv.last_method, sizeof(srv.last_method), "%s", method);
	reject = srv.reject_key[0] && strcmp(key, srv.reject_key) == 0;
	if (reject) {
		char body[256];

		snprintf(body, sizeof(body), "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>"
			 "<Code>%s</Code><Message>rejected</Message></Error>", srv.reject_code);
		answer(fd, strcmp(srv.reject_code, "InvalidAccessKeyId") == 0 ? "403 Forbidden"
									      : "400 Bad Request",
		       "", strcmp(method, "HEAD") == 0 ? "" : body);
	}
	pthread_mutex_unlock(&srv.mu);
	if (reject) {
		close(fd);
		return;
	}
	if (strstr(req, "list-type=2")) {
		answer(fd, "200 OK", "Content-Type: application/xml\r\n",
		       "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>");
		close(fd);
		return;
	}
	switch (atomic_load(&srv.mode)) {
	case FAULT_HANG:
		if (srv.nparked < FAULT_PARKED_MAX) {
			srv.parked[srv.nparked++] = fd;
			return;
		}
		break;
	case FAULT_503:
		answer(fd, "503 Slow Down", "", "<Error><Code>SlowDown</Code></Error>");
		break;
	case FAULT_HUGE_LENGTH: {
		const char *h = "HTTP/1.1 200 OK\r\nContent-Length: 1099511627776\r\n\r\nxxxx";

		send_all(fd, h, strlen(h));
		if (srv.nparked < FAULT_PARKED_MAX) {
			srv.parked[srv.nparked++] = fd;
			return;
		}
		break;
	}
	case FAULT_HUGE_CHUNKED:
		stream_chunked(fd);
		break;
	default:
		if (strcmp(method, "HEAD") == 0) {
			const char *h = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
					"Connection: close\r\n\r\n";

			send_all(fd, h, strlen(h));
		} else {
			answer(fd, "200 OK", "ETag: \"5d41402abc4b2a76b9719d911017c592\"\r\n",
			       strcmp(method, "GET") == 0 ? "hello" : "");
		}
		break;
	}
	close(fd);
}

static void *serve_loop(void *arg)
{
	for (;;) {
		struct pollfd p[2] = { { .fd = srv.lfd, .events = POLLIN },
				       { .fd = srv.stop[0], .events = POLLIN } };
		int fd;

		if (poll(p, 2, -1) < 0 || p[1].revents)
			return NULL;
		fd = accept(srv.lfd, NULL, NULL);
		if (fd >= 0)
			serve(fd);
	}
}

static void fault_start(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);

	memset(&srv, 0, sizeof(srv));
	pthread_mutex_init(&srv.mu, NULL);
	srv.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(srv.lfd, 0);
	cr_assert_eq(bind(srv.lfd, (struct sockaddr *)&a, sizeof(a)), 0, "bind: %s",
		     strerror(errno));
	cr_assert_eq(listen(srv.lfd, 16), 0);
	cr_assert_eq(getsockname(srv.lfd, (struct sockaddr *)&a, &alen), 0);
	srv.port = ntohs(a.sin_port);
	cr_assert_eq(pipe(srv.stop), 0);
	cr_assert_eq(pthread_create(&srv.th, NULL, serve_loop, NULL), 0);
	/* the tests choose where credentials come from; none from the machine's own */
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_SESSION_TOKEN");
	unsetenv("AWS_PROFILE");
	unsetenv("AWS_ENDPOINT_URL");
	unsetenv("AWS_ENDPOINT_URL_S3");
	setenv("AWS_CONFIG_FILE", "/nonexistent/ckptfs-test-aws-config", 1);
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/ckptfs-test-aws-credentials", 1);
}

static void fault_stop(void)
{
	if (write(srv.stop[1], "x", 1) == 1)
		pthread_join(srv.th, NULL);
	for (int i = 0; i < srv.nparked; i++)
		close(srv.parked[i]);
	close(srv.lfd);
	close(srv.stop[0]);
	close(srv.stop[1]);
}

TestSuite(remote_fault, .init = fault_start, .fini = fault_stop, .timeout = 20);

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Open s3://ckpt-test on the fault server; credentials from o, else the environment/files. */
static struct remote *open_fault(struct remote_opts *o)
{
	char url[] = "s3://ckpt-test", err[512], endpoint[64];
	struct remote_opts dflt = { .access_key = "AKIDTEST", .secret_key = "secret" };
	struct remote *r = NULL;
	int rc;

	if (!o)
		o = &dflt;
	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", srv.port);
	o->endpoint = endpoint;
	o->region = "us-east-1";
	rc = remote_open(url, o, &r, err, sizeof(err));
	cr_assert_eq(rc, 0, "remote_open on the fault server: %s (%s)", err, strerror(-rc));
	return r;
}

/*
 * An endpoint that accepts and never answers: with the defaults (5 tries, each ended only by
 * 60 s without a byte) a call would wait minutes; the deadline ends it, retries included.
 */
Test(remote_fault, deadline_no_answer)
{
	struct remote *r = open_fault(NULL);
	char err[512];
	struct remote_call call = { .deadline_ms = 1000, .err = err, .errlen = sizeof(err) };
	void *buf = NULL;
	size_t len = 0;
	double t0, dt;
	int rc;

	atomic_store(&srv.mode, FAULT_HANG);
	t0 = now_s();
	rc = remote_get_with(r, "dirs/iter_0000100", &call, &buf, &len);
	dt = now_s() - t0;
	cr_assert_eq(rc, -ETIMEDOUT, "get: %d (%s)", rc, err);
	cr_assert(dt >= 0.9 && dt < 2.5, "a 1000 ms deadline took %.2f s", dt);
	cr_assert_not_null(strstr(err, "1000 ms"), "message: %s", err);
	cr_assert_not_null(strstr(err, "dirs/iter_0000100"), "message: %s", err);

	t0 = now_s();
	rc = remote_put_if_absent_with(r, "dirs/iter_0000100", "0755\n", 5, &call);
	dt = now_s() - t0;
	cr_assert_eq(rc, -ETIMEDOUT, "put_if_absent: %d (%s)", rc, err);
	cr_assert(dt >= 0.9 && dt < 2.5, "a 1000 ms deadline took %.2f s", dt);
	remote_close(r);
}

/*
 * The message names the deadline every time it ended the call, however close libcurl's own clock
 * (CLOCK_MONOTONIC_RAW, whole milliseconds) put the attempt's end to the deadline as ckptfs's
 * clock sees it. Short deadlines, many calls: each ends within a few milliseconds of it.
 */
Test(remote_fault, deadline_named_every_time)
{
	struct remote *r = open_fault(NULL);
	char err[512], want[64];
	struct remote_call call = { .deadline_ms = 15, .err = err, .errlen = sizeof(err) };
	void *buf = NULL;
	size_t len = 0;
	int rc;

	atomic_store(&srv.mode, FAULT_HANG);
	snprintf(want, sizeof(want), "deadline of %ld ms", call.deadline_ms);
	for (int i = 0; i < FAULT_PARKED_MAX - 4; i++) {
		rc = remote_get_with(r, "dirs/iter_0000100", &call, &buf, &len);
		cr_assert_eq(rc, -ETIMEDOUT, "call %d: get: %d (%s)", i, rc, err);
		cr_assert_not_null(strstr(err, want), "call %d: message: %s", i, err);
	}
	remote_close(r);
}

/* An endpoint that answers 503 forever: retries go on only while the deadline leaves time. */
Test(remote_fault, deadline_covers_retries)
{
	struct remote_opts o = { .access_key = "AKIDTEST", .secret_key = "secret",
				 .max_tries = 1000 };
	struct remote *r = open_fault(&o);
	char err[512];
	struct remote_call call = { .deadline_ms = 1500, .err = err, .errlen = sizeof(err) };
	double t0, dt;
	int rc, before;

	atomic_store(&srv.mode, FAULT_503);
	before = atomic_load(&srv.requests);
	t0 = now_s();
	rc = remote_head_with(r, "chunks/0123", &call, NULL);
	dt = now_s() - t0;
	cr_assert_eq(rc, -EIO, "head: %d (%s)", rc, err);
	cr_assert(dt < 2.5, "a 1500 ms deadline took %.2f s", dt);
	cr_assert_geq(atomic_load(&srv.requests) - before, 3, "retried %d times only",
		      atomic_load(&srv.requests) - before);
	cr_assert_not_null(strstr(err, "503"), "message: %s", err);

	/* a deadline shorter than the first backoff wait (50 ms at least): one attempt only */
	call.deadline_ms = 40;
	before = atomic_load(&srv.requests);
	rc = remote_head_with(r, "chunks/0123", &call, NULL);
	cr_assert(rc == -EIO || rc == -ETIMEDOUT, "head: %d (%s)", rc, err);
	cr_assert_eq(atomic_load(&srv.requests) - before, 1);
	call.deadline_ms = -1;
	cr_assert_eq(remote_head_with(r, "chunks/0123", &call, NULL), -EINVAL);
	remote_close(r);
}

/* A Content-Length of 1 TiB: refused from the header, before any allocation. */
Test(remote_fault, get_huge_content_length)
{
	struct remote *r = open_fault(NULL);
	char err[512];
	struct remote_call call = { .err = err, .errlen = sizeof(err) };
	void *buf = NULL;
	size_t len = 0;
	double t0 = now_s();
	int rc;

	atomic_store(&srv.mode, FAULT_HUGE_LENGTH);
	rc = remote_get(r, "chunks/0123", &buf, &len);
	cr_assert_eq(rc, -EFBIG, "plain get: %d", rc);
	rc = remote_get_with(r, "chunks/0123", &call, &buf, &len);
	cr_assert_eq(rc, -EFBIG, "get: %d (%s)", rc, err);
	cr_assert_not_null(strstr(err, "1099511627776"), "message: %s", err);
	cr_assert(now_s() - t0 < 2, "refusing took %.2f s: was it retried?", now_s() - t0);
	cr_assert_null(buf);
	remote_close(r);
}

/* No Content-Length, a body that goes on: the bytes received are counted against the cap. */
Test(remote_fault, get_huge_chunked)
{
	struct remote *r = open_fault(NULL);
	struct remote_call call = { .max_len = 1024 * 1024 };
	void *buf = NULL;
	size_t len = 0;
	int rc, before;

	atomic_store(&srv.mode, FAULT_HUGE_CHUNKED);
	before = atomic_load(&srv.requests);
	rc = remote_get(r, "manifests/1/100/n0.json", &buf, &len);
	cr_assert_eq(rc, -EFBIG, "default cap (%zu bytes): %d, %zu bytes", REMOTE_GET_MAX, rc,
		     len);
	cr_assert_eq(atomic_load(&srv.requests) - before, 1, "-EFBIG is not retried");
	rc = remote_get_with(r, "manifests/1/100/n0.json", &call, &buf, &len);
	cr_assert_eq(rc, -EFBIG, "1 MiB cap: %d", rc);
	cr_assert_null(buf);

	/* at the cap exactly is fine */
	atomic_store(&srv.mode, FAULT_OK);
	call.max_len = 5;
	cr_assert_eq(remote_get_with(r, "k", &call, &buf, &len), 0);
	cr_assert_eq(len, 5);
	cr_assert_eq(memcmp(buf, "hello", 5), 0);
	free(buf);
	call.max_len = 4;
	cr_assert_eq(remote_get_with(r, "k", &call, &buf, &len), -EFBIG);
	remote_close(r);
}

/* A credentials file as ~/.aws/credentials, profile default. */
static void write_creds(const char *path, const char *key)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	fprintf(f, "[default]\naws_access_key_id = %s\naws_secret_access_key = s-%s\n"
		   "aws_session_token = t-%s\n", key, key, key);
	fclose(f);
}

/* Reject requests signed with key as code, from now on. */
static void reject(const char *key, const char *code)
{
	pthread_mutex_lock(&srv.mu);
	snprintf(srv.reject_key, sizeof(srv.reject_key), "%s", key);
	snprintf(srv.reject_code, sizeof(srv.reject_code), "%s", code);
	pthread_mutex_unlock(&srv.mu);
}

static void expect_last_key(const char *key)
{
	pthread_mutex_lock(&srv.mu);
	cr_expect_str_eq(srv.last_key, key);
	pthread_mutex_unlock(&srv.mu);
}

/* The session expires; whoever renews it rewrites ~/.aws/credentials: the next call reads it. */
Test(remote_fault, expired_token_read_again)
{
	char dir[128], path[192], err[512];
	struct remote_opts o = { 0 };
	struct remote_call call = { .err = err, .errlen = sizeof(err) };
	struct remote *r;
	void *buf = NULL;
	size_t len = 0;
	int rc, before;

	ct_tmpdir(dir, sizeof(dir), "ckptfs-creds");
	snprintf(path, sizeof(path), "%s/credentials", dir);
	write_creds(path, "AKIDOLD");
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	r = open_fault(&o);
	expect_last_key("AKIDOLD");

	reject("AKIDOLD", "ExpiredToken");
	write_creds(path, "AKIDNEW");
	before = atomic_load(&srv.requests);
	rc = remote_get_with(r, "manifests/1/100/n0.json", &call, &buf, &len);
	cr_assert_eq(rc, 0, "get after renewal: %d (%s)", rc, err);
	cr_assert_eq(len, 5);
	free(buf);
	cr_assert_eq(atomic_load(&srv.requests) - before, 2, "one rejected, one sent again");
	expect_last_key("AKIDNEW");

	/* the new set stays in use: the next call goes straight through */
	before = atomic_load(&srv.requests);
	cr_assert_eq(remote_put_if_absent(r, "dirs/iter_0000200", "0755\n", 5), 0);
	cr_assert_eq(atomic_load(&srv.requests) - before, 1);

	/* expired again, and nobody renewed them: -EACCES saying so, after one reading */
	reject("AKIDNEW", "ExpiredToken");
	before = atomic_load(&srv.requests);
	rc = remote_get_with(r, "manifests/1/100/n0.json", &call, &buf, &len);
	cr_assert_eq(rc, -EACCES, "still expired: %d (%s)", rc, err);
	cr_assert_not_null(strstr(err, "expired"), "message: %s", err);
	cr_assert_not_null(strstr(err, "AKIDNEW"), "message: %s", err);
	cr_assert_eq(atomic_load(&srv.requests) - before, 1, "nothing new to send again with");
	remote_close(r);
	ct_rmtree(dir);
}

/* The environment comes first, as at remote_open; a HEAD's rejection has no body to read. */
Test(remote_fault, unknown_key_read_again_from_env)
{
	struct remote_opts o = { 0 };
	uint64_t size = 0;
	struct remote *r;
	int rc;

	setenv("AWS_ACCESS_KEY_ID", "AKIDENV1", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "secret1", 1);
	r = open_fault(&o);
	reject("AKIDENV1", "InvalidAccessKeyId");
	setenv("AWS_ACCESS_KEY_ID", "AKIDENV2", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "secret2", 1);
	rc = remote_head(r, "chunks/0123", &size);
	cr_assert_eq(rc, 0, "head after renewal: %d", rc);
	cr_assert_eq(size, 5);
	expect_last_key("AKIDENV2");

	/* rejected with nothing new: -EACCES (not -EINVAL for the 400 a HEAD gets) */
	reject("AKIDENV2", "ExpiredToken");
	cr_assert_eq(remote_head(r, "chunks/0123", &size), -EACCES);
	remote_close(r);
}

/* Credentials given in remote_opts are the caller's to renew: never read again. */
Test(remote_fault, opts_credentials_not_read_again)
{
	struct remote *r = open_fault(NULL);
	void *buf = NULL;
	size_t len = 0;
	int before;

	setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "secret", 1);
	reject("AKIDTEST", "ExpiredToken");
	before = atomic_load(&srv.requests);
	cr_assert_eq(remote_get(r, "k", &buf, &len), -EACCES);
	cr_assert_eq(atomic_load(&srv.requests) - before, 1);
	expect_last_key("AKIDTEST");
	remote_close(r);
}

/*
 * Issue 41: a plain http:// endpoint on another host was accepted without a word. The node
 * warns at mount when remote_endpoint_plaintext says so; this is that rule, and the endpoint
 * an S3 remote reports (opened unchecked: nothing is asked of a server).
 */
Test(remote_fault, endpoint_plaintext)
{
	struct remote_opts o = { .access_key = "AKIDTEST", .secret_key = "secret",
				 .endpoint = "http://10.1.2.3:7480/", .region = "us-east-1",
				 .unchecked = true };
	struct remote *r = NULL;
	char err[512];

	cr_assert_eq(remote_open("s3://ckpt-test", &o, &r, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(remote_endpoint(r), "http://10.1.2.3:7480");
	cr_assert(remote_endpoint_plaintext(remote_endpoint(r)));
	remote_close(r);
	cr_assert_null(remote_endpoint(NULL));

	static const char *const plain[] = { "http://10.1.2.3:7480", "HTTP://rgw.example.org",
					     "http://[2001:db8::1]:80", "http://128.0.0.1" };
	static const char *const not_plain[] = { "https://10.1.2.3", "http://127.0.0.1:7480",
						 "http://127.9.9.9", "http://localhost:9000",
						 "http://[::1]:7480", "http://[::ffff:127.0.0.1]:1",
						 NULL };

	for (size_t i = 0; i < sizeof(plain) / sizeof(*plain); i++)
		cr_expect(remote_endpoint_plaintext(plain[i]), "%s is plain HTTP", plain[i]);
	for (size_t i = 0; i < sizeof(not_plain) / sizeof(*not_plain); i++)
		cr_expect(!remote_endpoint_plaintext(not_plain[i]), "%s is not",
			  not_plain[i] ? not_plain[i] : "NULL");
}

static void expect_last_sha(const char *want, const char *why)
{
	pthread_mutex_lock(&srv.mu);
	cr_expect_str_eq(srv.last_sha, want, "x-amz-content-sha256 %s", why);
	pthread_mutex_unlock(&srv.mu);
}

/*
 * A put whose readers check the object themselves (remote_call.self_checked: chunks) is signed
 * without hashing its body on loopback, and keeps the body's SHA-256 on plain http:// to
 * another host, reached here through the fault server acting as libcurl's HTTP proxy (the
 * request is the same; only the endpoint's name differs). An ordinary put always hashes.
 */
Test(remote_fault, self_checked_puts_unsigned_unless_plaintext)
{
	/* sha256("hello"), sha256sum(1) */
	static const char hello_sha[] =
		"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
	const struct remote_call chunk = { .self_checked = true };
	struct remote_opts o = { .access_key = "AKIDTEST", .secret_key = "secret",
				 .endpoint = "http://10.1.2.3:7480", .region = "us-east-1" };
	struct remote *r = open_fault(NULL);
	char proxy[64], err[512];
	int before;

	cr_assert_eq(remote_put_with(r, "chunks/ab", "hello", 5, &chunk), 0);
	expect_last_sha("UNSIGNED-PAYLOAD", "of a chunk put on loopback");
	cr_assert_eq(remote_put_if_absent_with(r, "chunks/cd", "hello", 5, &chunk), 0);
	expect_last_sha("UNSIGNED-PAYLOAD", "of a chunk put_if_absent on loopback");
	cr_assert_eq(remote_put(r, "manifests/x", "hello", 5), 0);
	expect_last_sha(hello_sha, "of an ordinary put");
	remote_close(r);

	snprintf(proxy, sizeof(proxy), "http://127.0.0.1:%d", srv.port);
	setenv("http_proxy", proxy, 1);
	unsetenv("no_proxy");
	unsetenv("NO_PROXY");
	r = NULL;
	cr_assert_eq(remote_open("s3://ckpt-test", &o, &r, err, sizeof(err)), 0, "%s", err);
	cr_assert(remote_endpoint_plaintext(remote_endpoint(r)));
	before = atomic_load(&srv.requests);
	cr_assert_eq(remote_put_with(r, "chunks/ab", "hello", 5, &chunk), 0);
	cr_assert_eq(atomic_load(&srv.requests), before + 1, "the put went through the proxy");
	expect_last_sha(hello_sha, "of a chunk put on plain http:// to another host");
	remote_close(r);
	unsetenv("http_proxy");
}

/*
 * The AWS shared files, read with libinih (issue 43: no hand-written INI parser): comments,
 * blank lines, whitespace around '=', the config file's "[profile NAME]" sections against the
 * credentials file's "[NAME]", and the first value of a key winning. Opened unchecked: only the
 * files are read.
 */
Test(remote_fault, aws_files_parsed)
{
	struct remote_opts o = { .unchecked = true };
	char dir[256], cred[300], conf[300], err[512];
	struct remote *r = NULL;
	FILE *f;

	ct_tmpdir(dir, sizeof(dir), "ckptfs-awsfiles");
	snprintf(cred, sizeof(cred), "%s/credentials", dir);
	snprintf(conf, sizeof(conf), "%s/config", dir);
	f = fopen(cred, "w");
	cr_assert_not_null(f);
	fprintf(f, "# made by hand\n[default]\naws_access_key_id = AKIDDEFAULT\n\n[ckpt]\n"
		   "  aws_access_key_id=AKIDFILE\n; a comment\naws_secret_access_key =  s3cr3t  \n"
		   "aws_access_key_id = AKIDLATER\n");
	fclose(f);
	f = fopen(conf, "w");
	cr_assert_not_null(f);
	fprintf(f, "[default]\nendpoint_url = http://10.0.0.1:1\n[profile ckpt]\nregion = eu-west-1\n"
		   "endpoint_url = http://10.9.8.7:7480\n");
	fclose(f);
	setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
	setenv("AWS_CONFIG_FILE", conf, 1);
	setenv("AWS_PROFILE", "ckpt", 1);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	cr_assert_eq(remote_open("s3://ckpt-test", &o, &r, err, sizeof(err)), 0, "%s", err);
	cr_expect_str_eq(remote_endpoint(r), "http://10.9.8.7:7480", "[profile ckpt] of config");
	remote_close(r);
	struct remote_opts served = { 0 }; /* on the fault server: it records the key signed with */

	r = open_fault(&served);
	expect_last_key("AKIDFILE");
	remote_close(r);
	setenv("AWS_PROFILE", "nobody", 1);
	cr_expect_neq(remote_open("s3://ckpt-test", &o, &r, err, sizeof(err)), 0,
		      "a profile with no credentials is refused");
	cr_expect(strstr(err, "credentials") != NULL, "%s", err);
	unsetenv("AWS_PROFILE");
	ct_rmtree(dir);
}
