/*
 * test_remote_s3.c — store/remote/remote.h against a real Ceph (no mocks): the S3 backend on
 * the RADOS Gateway, and the directory backend on two ceph-fuse mounts of one CephFS (as two
 * nodes would see it). tests/store/run_remote.sh starts Ceph with scripts/ceph.sh and runs this
 * with its DIR/env: AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 * CKPTFS_TEST_BUCKET, CKPTFS_CEPHFS_1, CKPTFS_CEPHFS_2.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/lib/remote_contract.h"
#include "tests/store/test_util.h"

#define MiB (1024u * 1024u)

static const char *need_env(const char *name)
{
	const char *v = getenv(name);

	cr_assert(v && v[0], "%s is not set: run this test through tests/store/run_remote.sh "
			     "(meson test --suite remote), which starts Ceph", name);
	return v;
}

/* Open s3://BUCKET[/prefix] with the environment's settings; fails the test on error. */
static struct remote *open_s3(const char *prefix)
{
	char url[256], err[512];
	struct remote *r = NULL;
	int rc;

	snprintf(url, sizeof(url), "s3://%s%s%s", need_env("CKPTFS_TEST_BUCKET"),
		 prefix ? "/" : "", prefix ? prefix : "");
	rc = remote_open(url, NULL, &r, err, sizeof(err));
	cr_assert_eq(rc, 0, "remote_open '%s': %s (%s)", url, err, strerror(-rc));
	return r;
}

Test(remote_s3, basic)
{
	struct remote *r = open_s3(NULL);
	char base[64];

	rk_base(base, sizeof(base), "basic");
	rc_basic(r, base);
	remote_close(r);
}

Test(remote_s3, list)
{
	struct remote *r = open_s3(NULL);
	char base[64];

	rk_base(base, sizeof(base), "list");
	rc_list(r, base);
	remote_close(r);
}

Test(remote_s3, list_after)
{
	struct remote *r = open_s3(NULL);
	char base[64];

	rk_base(base, sizeof(base), "list_after");
	rc_list_after(r, base);
	remote_close(r);
}

/* A URL prefix is invisible to keys: s3://B/p/q plus "k" is object p/q/k. */
Test(remote_s3, url_prefix)
{
	struct remote *r = open_s3("pfx/sub"), *top = open_s3(NULL);
	struct rk_seen s = { .base = "" };

	cr_assert_eq(remote_put(r, "k/one", "1", 1), 0);
	rk_expect(top, "pfx/sub/k/one", "1", 1);
	cr_assert_eq(remote_list(r, "k/", rk_collect, &s), 0);
	cr_assert_eq(s.n, 1);
	cr_assert_str_eq(s.keys[0], "k/one");
	rc_basic(r, "p/");
	cr_assert_eq(remote_delete(r, "k/one"), 0);
	remote_close(r);
	remote_close(top);
}

Test(remote_s3, race_put_if_absent)
{
	struct remote *rs[2] = { open_s3(NULL), open_s3(NULL) };
	char base[64], key[128];
	int round;

	rk_base(base, sizeof(base), "race");
	for (round = 0; round < 10; round++) {
		snprintf(key, sizeof(key), "%sstep-%d/commit", base, round);
		rc_race(rs, 2, key, 8);
		cr_assert_eq(remote_delete(rs[0], key), 0);
	}
	remote_close(rs[0]);
	remote_close(rs[1]);
}

/*
 * A put whose readers check it themselves (remote_call.self_checked: chunk objects) is signed
 * with x-amz-content-sha256: UNSIGNED-PAYLOAD on this loopback endpoint (test_remote_fault
 * checks the header): RGW must accept libcurl's signature of it, put_if_absent must still
 * refuse a second writer, and the bytes must come back exact.
 */
Test(remote_s3, self_checked_put)
{
	const struct remote_call chunk = { .self_checked = true };
	struct remote *r = open_s3(NULL);
	size_t len = 4 * MiB + 17, glen = 0;
	char base[64], key[128];
	unsigned char *buf = malloc(len);
	void *got = NULL;

	cr_assert_not_null(buf);
	for (size_t i = 0; i < len; i++)
		buf[i] = (unsigned char)(i * 2654435761u >> 13);
	rk_base(base, sizeof(base), "unsigned");
	snprintf(key, sizeof(key), "%schunk", base);
	cr_assert_eq(remote_put_if_absent_with(r, key, buf, len, &chunk), 0);
	cr_assert_eq(remote_put_if_absent_with(r, key, buf, len, &chunk), -EEXIST);
	cr_assert_eq(remote_put_with(r, key, buf, len, &chunk), 0);
	cr_assert_eq(remote_get(r, key, &got, &glen), 0);
	cr_assert_eq(glen, len);
	cr_assert(memcmp(got, buf, len) == 0, "the object came back changed");
	cr_assert_eq(remote_delete(r, key), 0);
	free(got);
	free(buf);
	remote_close(r);
}

/* 40 MiB through remote_put is a 5-part multipart upload; it must come back bit-exact. */
Test(remote_s3, multipart_40mib, .timeout = 120)
{
	struct remote *r = open_s3(NULL);
	size_t len = 40 * MiB, got = 0;
	char *buf = malloc(len), *back = NULL, range[4096], base[64], key[128];
	uint64_t size = 0;
	void *p = NULL;

	cr_assert_not_null(buf);
	tu_fill_random(buf, len, 40);
	rk_base(base, sizeof(base), "mpu");
	rk_key(key, sizeof(key), base, "big");
	cr_assert_eq(remote_put(r, key, buf, len), 0);
	cr_assert_eq(remote_head(r, key, &size), 0);
	cr_assert_eq(size, len);
	cr_assert_eq(remote_get(r, key, &p, &got), 0);
	back = p;
	cr_assert_eq(got, len);
	cr_assert(memcmp(back, buf, len) == 0, "40 MiB object differs after the round trip");
	/* the same into the caller's buffer; one byte short is refused by its Content-Length */
	memset(back, 0, len);
	cr_assert_eq(remote_get_into(r, key, back, len, &got), 0);
	cr_assert_eq(got, len);
	cr_assert(memcmp(back, buf, len) == 0, "40 MiB object differs in the caller's buffer");
	cr_assert_eq(remote_get_into(r, key, back, len - 1, &got), -EFBIG);
	/* A range across the first part boundary (8 MiB). */
	cr_assert_eq(remote_get_range(r, key, 8 * MiB - 2048, range, sizeof(range), &got), 0);
	cr_assert_eq(got, sizeof(range));
	cr_assert(memcmp(range, buf + 8 * MiB - 2048, sizeof(range)) == 0);
	/* put_if_absent of a large object is a single PUT, and refuses to replace it. */
	cr_assert_eq(remote_put_if_absent(r, key, buf, 20 * MiB), -EEXIST);
	cr_assert_eq(remote_delete(r, key), 0);
	free(back);
	free(buf);
	remote_close(r);
}

struct many {
	struct remote *r;
	const char *base;
	int from, to;
	bool del;
	int rc;
};

static void *many_one(void *arg)
{
	struct many *m = arg;
	char key[128];
	int i;

	for (i = m->from; i < m->to && m->rc == 0; i++) {
		snprintf(key, sizeof(key), "%sk%05d", m->base, i);
		m->rc = m->del ? remote_delete(m->r, key) : remote_put(m->r, key, key, strlen(key));
	}
	return NULL;
}

static void many_run(struct remote *r, const char *base, int n, bool del)
{
	struct many m[8];
	pthread_t t[8];
	int i;

	for (i = 0; i < 8; i++) {
		m[i] = (struct many){ r, base, n * i / 8, n * (i + 1) / 8, del, 0 };
		cr_assert_eq(pthread_create(&t[i], NULL, many_one, &m[i]), 0);
	}
	for (i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(m[i].rc, 0, "%s: %s", del ? "delete" : "put", strerror(-m[i].rc));
	}
}

struct count {
	const char *base;
	int n;
	char last[128];
	bool seen[1200];
};

static int count_one(const char *key, uint64_t size, void *arg)
{
	struct count *c = arg;
	int i = atoi(key + strlen(c->base) + 1);

	cr_assert_gt(strcmp(key, c->last), 0, "keys out of order: '%s' after '%s'", key, c->last);
	snprintf(c->last, sizeof(c->last), "%s", key);
	cr_assert_eq(size, strlen(key));
	cr_assert(i >= 0 && i < 1200 && !c->seen[i], "key '%s' unexpected or listed twice", key);
	c->seen[i] = true;
	c->n++;
	return 0;
}

/* More than one page of ListObjectsV2 (1000 keys): continuation tokens, also after a key. */
Test(remote_s3, list_1100, .timeout = 120)
{
	struct remote *r = open_s3(NULL);
	struct count c = { 0 };
	char base[64], after[128];

	rk_base(base, sizeof(base), "many");
	c.base = base;
	many_run(r, base, 1100, false);
	cr_assert_eq(remote_list(r, base, count_one, &c), 0);
	cr_assert_eq(c.n, 1100, "listed %d of 1100 keys", c.n);
	/* after a key: start-after on the first page, the continuation token on the second */
	c.n = 0;
	c.last[0] = '\0';
	memset(c.seen, 0, sizeof(c.seen));
	snprintf(after, sizeof(after), "%sk%05d", base, 49);
	cr_assert_eq(remote_list_after(r, base, after, count_one, &c), 0);
	cr_assert_eq(c.n, 1050, "listed %d of the 1050 keys after the 50th", c.n);
	cr_assert(!c.seen[49] && c.seen[50] && c.seen[1099]);
	many_run(r, base, 1100, true);
	c.n = 0;
	c.last[0] = '\0';
	memset(c.seen, 0, sizeof(c.seen));
	cr_assert_eq(remote_list(r, base, count_one, &c), 0);
	cr_assert_eq(c.n, 0);
	remote_close(r);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * A small bound on a read is the object's, not the error document's: a missing object is
 * -ENOENT whatever the bound, although RGW's 404 document (NoSuchKey) is longer than it.
 */
Test(remote_s3, a_missing_object_under_a_small_bound)
{
	struct remote *r = open_s3(NULL);
	char base[64], key[128], err[512], buf[3];
	struct remote_call call = { .max_len = 3, .err = err, .errlen = sizeof(err) };
	void *p = NULL;
	size_t len = 0;

	rk_base(base, sizeof(base), "bound");
	rk_key(key, sizeof(key), base, "missing");
	err[0] = '\0';
	cr_assert_eq(remote_get_with(r, key, &call, &p, &len), -ENOENT, "%s", err);
	cr_assert_null(p);
	cr_assert_eq(remote_get_into(r, key, buf, sizeof(buf), &len), -ENOENT);
	cr_assert_eq(remote_put(r, key, "abcd", 4), 0);
	cr_assert_eq(remote_get_with(r, key, &call, &p, &len), -EFBIG);
	cr_assert_eq(remote_delete(r, key), 0);
	remote_close(r);
}

/*
 * An answer is not held back by Nagle's algorithm on RGW's side waiting for the client's delayed
 * acknowledgement of the headers (s3_http.c invariant 6): RGW's beast frontend (tcp_nodelay 0,
 * as scripts/ceph.sh leaves it) sends a small body only once the headers are acknowledged, which
 * Linux delays up to 40 ms. Twenty GETs of a 1 KiB object on one connection took 44 ms each
 * before (880 ms in all), under 1 ms each after; the bound is the timer's own 40 ms times the
 * twenty, which only waiting for it on every GET reaches.
 */
Test(remote_s3, small_answers_do_not_wait_for_the_delayed_ack)
{
	struct remote *r = open_s3(NULL);
	char base[64], key[128], buf[1024];
	size_t len = 0;
	double t0, took;

	memset(buf, 'a', sizeof(buf));
	rk_base(base, sizeof(base), "quickack");
	rk_key(key, sizeof(key), base, "small");
	cr_assert_eq(remote_put(r, key, buf, sizeof(buf)), 0);
	cr_assert_eq(remote_get_into(r, key, buf, sizeof(buf), &len), 0); /* the connection */
	t0 = now_s();
	for (int i = 0; i < 20; i++) {
		cr_assert_eq(remote_get_into(r, key, buf, sizeof(buf), &len), 0);
		cr_assert_eq(len, sizeof(buf));
	}
	took = now_s() - t0;
	cr_log_info("20 GETs of 1 KiB: %.1f ms", took * 1e3);
	cr_assert_lt(took, 20 * 0.040, "20 GETs of 1 KiB took %.0f ms: each waited for the "
		     "client's delayed ACK", took * 1e3);
	cr_assert_eq(remote_delete(r, key), 0);
	remote_close(r);
}

/*
 * Connection errors are retried with backoff (s3_http.c: the waits before tries 2..4 are at
 * least 50, 100 and 200 ms); a 403 is not retried at all (8 tries would wait at least 3.5 s).
 */
Test(remote_s3, retries)
{
	struct remote_opts o = { .endpoint = "http://127.0.0.1:1", .max_tries = 4 };
	struct remote *x = NULL;
	char err[1024], url[256];
	double t0, dt;

	snprintf(url, sizeof(url), "s3://%s", need_env("CKPTFS_TEST_BUCKET"));
	t0 = now_s();
	cr_assert_eq(remote_open(url, &o, &x, err, sizeof(err)), -ECONNREFUSED);
	dt = now_s() - t0;
	cr_assert(dt >= 0.35 && dt < 5, "4 tries on a refused connection took %.2f s", dt);

	o = (struct remote_opts){ .secret_key = "wrong", .max_tries = 8 };
	t0 = now_s();
	cr_assert_eq(remote_open(url, &o, &x, err, sizeof(err)), -EACCES);
	dt = now_s() - t0;
	cr_assert(dt < 2, "a 403 took %.2f s: was it retried?", dt);
}

Test(remote_s3, open_errors)
{
	struct remote_opts o = { .secret_key = "not-the-secret" };
	struct remote *x = NULL;
	char err[1024], url[256];
	int rc;

	snprintf(url, sizeof(url), "s3://%s", need_env("CKPTFS_TEST_BUCKET"));
	rc = remote_open(url, &o, &x, err, sizeof(err));
	cr_assert_eq(rc, -EACCES, "wrong secret: %d %s", rc, err);
	cr_assert_not_null(strstr(err, "credentials"), "message: %s", err);

	o = (struct remote_opts){ .endpoint = "http://127.0.0.1:1", .max_tries = 2 };
	rc = remote_open(url, &o, &x, err, sizeof(err));
	cr_assert_eq(rc, -ECONNREFUSED, "wrong port: %d %s", rc, err);
	cr_assert_not_null(strstr(err, "cannot connect"), "message: %s", err);
	cr_assert_not_null(strstr(err, "127.0.0.1:1"), "message: %s", err);

	rc = remote_open("s3://ckptfs-no-such-bucket", NULL, &x, err, sizeof(err));
	cr_assert_eq(rc, -ENOENT, "missing bucket: %d %s", rc, err);
	cr_assert_not_null(strstr(err, "ckptfs-no-such-bucket"), "message: %s", err);

	o = (struct remote_opts){ .access_key = "NOSUCHACCESSKEY", .secret_key = "x" };
	rc = remote_open(url, &o, &x, err, sizeof(err));
	cr_assert_eq(rc, -EACCES, "unknown access key: %d %s", rc, err);
	cr_assert_not_null(strstr(err, "credentials"), "message: %s", err);
	cr_assert_null(x);
}

/* Settings from ~/.aws/credentials and ~/.aws/config when the environment has none. */
Test(remote_s3, aws_files)
{
	char dir[64], path[128], err[512], url[256];
	struct remote *r = NULL;
	FILE *f;
	int rc;

	snprintf(url, sizeof(url), "s3://%s", need_env("CKPTFS_TEST_BUCKET"));
	tu_mkdtemp(dir);
	snprintf(path, sizeof(path), "%s/credentials", dir);
	f = fopen(path, "w");
	fprintf(f, "[default]\naws_access_key_id = wrong\n\n[ckpt]\naws_access_key_id = %s\n"
		   "aws_secret_access_key = %s\n", need_env("AWS_ACCESS_KEY_ID"),
		need_env("AWS_SECRET_ACCESS_KEY"));
	fclose(f);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	snprintf(path, sizeof(path), "%s/config", dir);
	f = fopen(path, "w");
	fprintf(f, "[profile ckpt]\nregion = %s\nendpoint_url = %s\n", need_env("AWS_REGION"),
		need_env("AWS_ENDPOINT_URL"));
	fclose(f);
	setenv("AWS_CONFIG_FILE", path, 1);
	setenv("AWS_PROFILE", "ckpt", 1);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_ENDPOINT_URL");
	rc = remote_open(url, NULL, &r, err, sizeof(err));
	cr_assert_eq(rc, 0, "from the AWS files: %s", err);
	remote_close(r);
	unsetenv("AWS_PROFILE");
	rc = remote_open(url, NULL, &r, err, sizeof(err));
	cr_assert_neq(rc, 0, "profile default has no secret and no endpoint: must fail");
	tu_rmtree(dir);
}

/* The directory backend on CephFS, seen through two ceph-fuse mounts (two "nodes"). */
static struct remote *open_dir(const char *env)
{
	char err[512];
	struct remote *r = NULL;
	int rc = remote_open(need_env(env), NULL, &r, err, sizeof(err));

	cr_assert_eq(rc, 0, "remote_open %s: %s", getenv(env), err);
	return r;
}

Test(remote_cephfs, contract)
{
	struct remote *r = open_dir("CKPTFS_CEPHFS_1");
	char base[64];

	rk_base(base, sizeof(base), "basic");
	rc_basic(r, base);
	rk_base(base, sizeof(base), "list");
	rc_list(r, base);
	rk_base(base, sizeof(base), "list_after");
	rc_list_after(r, base);
	remote_close(r);
}

Test(remote_cephfs, race_across_mounts)
{
	struct remote *rs[2] = { open_dir("CKPTFS_CEPHFS_1"), open_dir("CKPTFS_CEPHFS_2") };
	char base[64], key[128];
	int round;

	rk_base(base, sizeof(base), "race");
	for (round = 0; round < 5; round++) {
		snprintf(key, sizeof(key), "%sstep-%d/commit", base, round);
		rc_race(rs, 2, key, 8);
	}
	/* What one mount publishes the other lists. */
	struct rk_seen s = { .base = base };
	cr_assert_eq(remote_put(rs[0], rk_key(key, sizeof(key), base, "manifest"), "m", 1), 0);
	cr_assert_eq(remote_list(rs[1], base, rk_collect, &s), 0);
	cr_assert_eq(s.n, 6, "mount 2 lists %d keys, want 6", s.n);
	remote_close(rs[0]);
	remote_close(rs[1]);
}
