/*
 * remote_contract.h — the contract of store/remote/remote.h as Criterion checks, shared by the
 * directory backend's unit test and the S3/CephFS tests (STYLE.md: test helpers live once in
 * tests/lib/). Each check takes an open remote and a key prefix of its own ("t-XXXX/"), so tests
 * can share one bucket or directory. Header-only: functions are static.
 */
#ifndef CKPTFS_TESTS_REMOTE_CONTRACT_H
#define CKPTFS_TESTS_REMOTE_CONTRACT_H

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "store/remote/remote.h"

/* rk_key - base + name into a static-size buffer of the caller. */
static __attribute__((unused)) const char *rk_key(char *buf, size_t cap, const char *base,
						  const char *name)
{
	snprintf(buf, cap, "%s%s", base, name);
	return buf;
}

/* rk_base - a fresh key prefix "tag-RANDOM/" into buf. */
static __attribute__((unused)) void rk_base(char *buf, size_t cap, const char *tag)
{
	uint64_t r = 0;

	cr_assert_eq(getrandom(&r, sizeof(r), 0), (ssize_t)sizeof(r));
	snprintf(buf, cap, "%s-%016llx/", tag, (unsigned long long)r);
}

/* rk_expect - the object at key holds exactly len bytes equal to want. */
static __attribute__((unused)) void rk_expect(struct remote *r, const char *key, const void *want,
					      size_t len)
{
	void *got = NULL;
	size_t glen = 0;
	uint64_t size = 0;
	int rc = remote_get(r, key, &got, &glen);

	cr_assert_eq(rc, 0, "remote_get '%s': %s", key, strerror(-rc));
	cr_assert_eq(glen, len, "'%s': %zu bytes, want %zu", key, glen, len);
	cr_assert(len == 0 || memcmp(got, want, len) == 0, "'%s': content differs", key);
	free(got);
	cr_assert_eq(remote_head(r, key, &size), 0);
	cr_assert_eq(size, len);
}

/* rc_basic - put_if_absent twice, put, get, get_range, get_into, head, delete, absent objects. */
static __attribute__((unused)) void rc_basic(struct remote *r, const char *base)
{
	char key[256], miss[256];
	const char *one = "first version of the object", *two = "second";
	char rbuf[64];
	size_t got = 99;
	void *p = NULL;
	size_t len = 0;
	uint64_t size = 0;

	rk_key(key, sizeof(key), base, "dir/obj");
	rk_key(miss, sizeof(miss), base, "dir/missing");
	cr_assert_eq(remote_put_if_absent(r, key, one, strlen(one)), 0);
	cr_assert_eq(remote_put_if_absent(r, key, two, strlen(two)), -EEXIST);
	rk_expect(r, key, one, strlen(one));

	cr_assert_eq(remote_get_range(r, key, 6, rbuf, 7, &got), 0);
	cr_assert_eq(got, 7);
	cr_assert_eq(memcmp(rbuf, "version", 7), 0);
	cr_assert_eq(remote_get_range(r, key, strlen(one) - 3, rbuf, sizeof(rbuf), &got), 0);
	cr_assert_eq(got, 3, "short range at the end: %zu bytes", got);
	cr_assert_eq(memcmp(rbuf, "ect", 3), 0);
	cr_assert_eq(remote_get_range(r, key, strlen(one), rbuf, sizeof(rbuf), &got), 0);
	cr_assert_eq(got, 0);
	cr_assert_eq(remote_get_range(r, key, 1000, rbuf, sizeof(rbuf), &got), 0);
	cr_assert_eq(got, 0);

	/* the whole object into the caller's buffer: an exact fit, room to spare, one byte short */
	memset(rbuf, 'x', sizeof(rbuf));
	cr_assert_eq(remote_get_into(r, key, rbuf, strlen(one), &got), 0);
	cr_assert_eq(got, strlen(one));
	cr_assert_eq(memcmp(rbuf, one, strlen(one)), 0);
	got = 99;
	cr_assert_eq(remote_get_into(r, key, rbuf, sizeof(rbuf), &got), 0);
	cr_assert_eq(got, strlen(one));
	cr_assert_eq(rbuf[strlen(one)], 'x', "a byte past the object was written");
	cr_assert_eq(remote_get_into(r, key, rbuf, strlen(one) - 1, &got), -EFBIG);
	cr_assert_eq(remote_get_into(r, miss, rbuf, sizeof(rbuf), &got), -ENOENT);

	cr_assert_eq(remote_put(r, key, two, strlen(two)), 0);
	rk_expect(r, key, two, strlen(two));

	cr_assert_eq(remote_get(r, miss, &p, &len), -ENOENT);
	cr_assert_eq(remote_head(r, miss, &size), -ENOENT);
	cr_assert_eq(remote_get_range(r, miss, 0, rbuf, 4, &got), -ENOENT);
	cr_assert_eq(remote_delete(r, key), 0);
	cr_assert_eq(remote_head(r, key, NULL), -ENOENT);
	cr_assert_eq(remote_get(r, key, &p, &len), -ENOENT);
	cr_assert_eq(remote_delete(r, key), 0, "deleting an absent object is 0");

	/* Empty objects exist. */
	cr_assert_eq(remote_put_if_absent(r, miss, "", 0), 0);
	rk_expect(r, miss, "", 0);
	cr_assert_eq(remote_put_if_absent(r, miss, "x", 1), -EEXIST);
	cr_assert_eq(remote_delete(r, miss), 0);

	/* Keys the interface refuses. */
	cr_assert_eq(remote_put(r, "", "x", 1), -EINVAL);
	cr_assert_eq(remote_put(r, "/abs", "x", 1), -EINVAL);
	cr_assert_eq(remote_put(r, "a//b", "x", 1), -EINVAL);
	cr_assert_eq(remote_put(r, "a/../b", "x", 1), -EINVAL);
	cr_assert_eq(remote_put(r, "a/.tmp-x", "x", 1), -EINVAL);
	cr_assert_eq(remote_put(r, "a/", "x", 1), -EINVAL);
}

struct rk_seen {
	const char *base;
	char keys[64][256];
	uint64_t sizes[64];
	int n;
	int stop_after; /* 0: never stop */
};

static __attribute__((unused)) int rk_collect(const char *key, uint64_t size, void *arg)
{
	struct rk_seen *s = arg;
	size_t blen = strlen(s->base);

	cr_assert_lt(s->n, 64);
	cr_assert_eq(strncmp(key, s->base, blen), 0, "listed key '%s' outside '%s'", key, s->base);
	snprintf(s->keys[s->n], sizeof(s->keys[0]), "%s", key + blen);
	s->sizes[s->n++] = size;
	return s->stop_after && s->n == s->stop_after ? 42 : 0;
}

static __attribute__((unused)) bool rk_has(const struct rk_seen *s, const char *name, uint64_t size)
{
	int i;

	for (i = 0; i < s->n; i++)
		if (strcmp(s->keys[i], name) == 0)
			return s->sizes[i] == size;
	return false;
}

/* rc_list - list with prefixes: whole tree, one "directory", a partial name, nothing, early stop. */
static __attribute__((unused)) void rc_list(struct remote *r, const char *base)
{
	static const char *names[] = { "a/1", "a/2", "a/b/3", "ab", "c", "a/b/c/d/4" };
	struct rk_seen s = { .base = base };
	char key[256], pre[256];
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		cr_assert_eq(remote_put(r, rk_key(key, sizeof(key), base, names[i]), names[i],
					strlen(names[i])), 0);
	cr_assert_eq(remote_list(r, base, rk_collect, &s), 0);
	cr_assert_eq(s.n, 6, "listed %d keys", s.n);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		cr_assert(rk_has(&s, names[i], strlen(names[i])), "'%s' not listed", names[i]);

	s.n = 0;
	cr_assert_eq(remote_list(r, rk_key(pre, sizeof(pre), base, "a/"), rk_collect, &s), 0);
	cr_assert_eq(s.n, 4);
	cr_assert(!rk_has(&s, "ab", 2));
	s.n = 0;
	cr_assert_eq(remote_list(r, rk_key(pre, sizeof(pre), base, "a"), rk_collect, &s), 0);
	cr_assert_eq(s.n, 5);
	cr_assert(rk_has(&s, "ab", 2));
	s.n = 0;
	cr_assert_eq(remote_list(r, rk_key(pre, sizeof(pre), base, "a/b/c/"), rk_collect, &s), 0);
	cr_assert_eq(s.n, 1);
	s.n = 0;
	cr_assert_eq(remote_list(r, rk_key(pre, sizeof(pre), base, "zz"), rk_collect, &s), 0);
	cr_assert_eq(s.n, 0);
	s.n = 0;
	s.stop_after = 2;
	cr_assert_eq(remote_list(r, base, rk_collect, &s), 42);
	cr_assert_eq(s.n, 2);

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		cr_assert_eq(remote_delete(r, rk_key(key, sizeof(key), base, names[i])), 0);
	s.n = 0;
	s.stop_after = 0;
	cr_assert_eq(remote_list(r, base, rk_collect, &s), 0);
	cr_assert_eq(s.n, 0, "%d keys left after deleting all", s.n);
}

/*
 * rc_list_after - list after a key: only keys above it in byte order (a shorter key below one
 * it begins; UTF-8's bytes above ASCII), with and without a prefix, from a key that is not an
 * object, from the last key (nothing), from "" (everything), and a key put below it later is
 * not seen while one put above it is.
 */
static __attribute__((unused)) void rc_list_after(struct remote *r, const char *base)
{
	static const char *names[] = { "m/0/0009/x", "m/0/0010/a", "m/0/0010/b", "m/1/0001/a",
				       "m/\xc3\xa9", "n" };
	struct rk_seen s = { .base = base };
	char key[256], after[256], pre[256], longk[REMOTE_KEY_MAX + 2];
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		cr_assert_eq(remote_put(r, rk_key(key, sizeof(key), base, names[i]), names[i],
					strlen(names[i])), 0);

	rk_key(after, sizeof(after), base, "m/0/0010");
	cr_assert_eq(remote_list_after(r, base, after, rk_collect, &s), 0);
	cr_assert_eq(s.n, 5, "listed %d keys after 'm/0/0010'", s.n);
	cr_assert(!rk_has(&s, "m/0/0009/x", 10));
	for (i = 1; i < sizeof(names) / sizeof(names[0]); i++)
		cr_assert(rk_has(&s, names[i], strlen(names[i])), "'%s' not listed", names[i]);

	s.n = 0;
	rk_key(after, sizeof(after), base, "m/0/0010/a");
	cr_assert_eq(remote_list_after(r, rk_key(pre, sizeof(pre), base, "m/"), after, rk_collect,
				       &s), 0);
	cr_assert_eq(s.n, 3, "listed %d keys of 'm/' after 'm/0/0010/a'", s.n);
	cr_assert(rk_has(&s, "m/0/0010/b", 10) && rk_has(&s, "m/1/0001/a", 10));
	cr_assert(rk_has(&s, "m/\xc3\xa9", 4), "a UTF-8 key sorts above ASCII ones");

	s.n = 0; /* from a key that is no object, between two */
	rk_key(after, sizeof(after), base, "m/0/0009/y");
	cr_assert_eq(remote_list_after(r, base, after, rk_collect, &s), 0);
	cr_assert_eq(s.n, 5);
	cr_assert(!rk_has(&s, "m/0/0009/x", 10));

	s.n = 0;
	rk_key(after, sizeof(after), base, "n");
	cr_assert_eq(remote_list_after(r, base, after, rk_collect, &s), 0);
	cr_assert_eq(s.n, 0, "listed %d keys after the last", s.n);
	cr_assert_eq(remote_list_after(r, base, "", rk_collect, &s), 0);
	cr_assert_eq(s.n, 6, "listed %d keys after \"\"", s.n);

	/* a key put below the position is not seen, one put above is */
	cr_assert_eq(remote_put(r, rk_key(key, sizeof(key), base, "m/0/0008/z"), "z", 1), 0);
	cr_assert_eq(remote_put(r, rk_key(key, sizeof(key), base, "m/0/0011/z"), "z", 1), 0);
	s.n = 0;
	rk_key(after, sizeof(after), base, "m/0/0010/b");
	cr_assert_eq(remote_list_after(r, base, after, rk_collect, &s), 0);
	cr_assert_eq(s.n, 4, "listed %d keys after 'm/0/0010/b'", s.n);
	cr_assert(rk_has(&s, "m/0/0011/z", 1) && !rk_has(&s, "m/0/0008/z", 1));

	memset(longk, 'a', REMOTE_KEY_MAX + 1);
	longk[REMOTE_KEY_MAX + 1] = '\0';
	cr_assert_eq(remote_list_after(r, base, longk, rk_collect, &s), -EINVAL);

	cr_assert_eq(remote_delete(r, rk_key(key, sizeof(key), base, "m/0/0008/z")), 0);
	cr_assert_eq(remote_delete(r, rk_key(key, sizeof(key), base, "m/0/0011/z")), 0);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		cr_assert_eq(remote_delete(r, rk_key(key, sizeof(key), base, names[i])), 0);
}

struct rk_racer {
	struct remote *r;
	const char *key;
	pthread_barrier_t *go;
	char body[64];
	int rc;
};

static __attribute__((unused)) void *rk_race_one(void *arg)
{
	struct rk_racer *a = arg;

	pthread_barrier_wait(a->go);
	a->rc = remote_put_if_absent(a->r, a->key, a->body, strlen(a->body));
	return NULL;
}

/*
 * rc_race - n threads (n <= 16) put_if_absent different bodies under one key, thread i through
 * rs[i % nr] (several remotes: the same store seen from several mounts or clients): exactly one
 * gets 0, the others -EEXIST, and every remote then reads the winner's body.
 */
static __attribute__((unused)) void rc_race(struct remote **rs, int nr, const char *key, int n)
{
	struct rk_racer a[16];
	pthread_t t[16];
	pthread_barrier_t go;
	int i, wins = 0, winner = -1;

	cr_assert_leq(n, 16);
	pthread_barrier_init(&go, NULL, (unsigned)n);
	for (i = 0; i < n; i++) {
		a[i] = (struct rk_racer){ .r = rs[i % nr], .key = key, .go = &go };
		snprintf(a[i].body, sizeof(a[i].body), "written by racer %d", i);
		cr_assert_eq(pthread_create(&t[i], NULL, rk_race_one, &a[i]), 0);
	}
	for (i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&go);
	for (i = 0; i < n; i++) {
		cr_assert(a[i].rc == 0 || a[i].rc == -EEXIST, "racer %d: %s", i, strerror(-a[i].rc));
		if (a[i].rc == 0) {
			wins++;
			winner = i;
		}
	}
	cr_assert_eq(wins, 1, "%d racers won put_if_absent on '%s'", wins, key);
	for (i = 0; i < nr; i++)
		rk_expect(rs[i], key, a[winner].body, strlen(a[winner].body));
}

#endif /* CKPTFS_TESTS_REMOTE_CONTRACT_H */
