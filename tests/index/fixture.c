/* fixture.c — see fixture.h. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tests/index/fixture.h"
#include "tests/lib/ctest.h"

char tdir[64];
char dbpath[128];
struct idx *ix;

void setup(void)
{
	ct_tmpdir(tdir, sizeof(tdir), "ckidx");
	snprintf(dbpath, sizeof(dbpath), "%s/index.db", tdir);
	ix = NULL;
}

void setup_open(void)
{
	setup();
	cr_assert_eq(idx_open(dbpath, 0, 1000, 1001, 123, &ix), 0);
}

void setup_open_txn(void)
{
	setup_open();
	cr_assert_eq(idx_begin(ix), 0);
}

void teardown(void)
{
	idx_close(ix);
	ix = NULL;
	ct_rmtree(tdir);
}

uint64_t new_inode(uint64_t parent, const char *name, uint32_t mode)
{
	struct idx_inode a = {
		.mode = mode,
		.uid = 1000,
		.gid = 1001,
		.nlink = S_ISDIR(mode) ? 2 : 1,
		.atime_ns = 5,
		.mtime_ns = 6,
		.ctime_ns = 7,
	};
	uint64_t ino = 0;

	cr_assert_eq(idx_inode_create(ix, &a, &ino), 0);
	cr_assert_gt(ino, IDX_ROOT_INO);
	if (name)
		cr_assert_eq(idx_dentry_add(ix, parent, name, ino), 0);
	return ino;
}

void mkhash(uint8_t h[IDX_HASH_LEN], uint32_t seed)
{
	for (int i = 0; i < IDX_HASH_LEN; i++)
		h[i] = (uint8_t)((seed >> (8 * (i % 4))) + 31 * i + 7);
	memcpy(h, &seed, sizeof(seed));
}

struct idx_extent ext(uint64_t off, uint32_t len, uint32_t seed, uint32_t stored)
{
	struct idx_extent e = { .offset = off, .length = len, .stored_size = stored, .codec = 2 };

	mkhash(e.hash, seed);
	return e;
}

uint64_t new_file(uint64_t parent, const char *name)
{
	return new_inode(parent, name, S_IFREG | 0644);
}

int refs_cb(const uint8_t hash[IDX_HASH_LEN], uint32_t raw_size, uint32_t stored_size,
		   uint8_t codec, int64_t refs, bool bad, void *arg)
{
	struct refs_q *q = arg;

	if (memcmp(hash, q->hash, IDX_HASH_LEN) == 0) {
		q->refs = refs;
		q->bad = bad;
		return 1;
	}
	return 0;
}

/* refs of chunk seed, -1 if it has no row */
int64_t refs(uint32_t seed)
{
	struct refs_q q = { .refs = -1 };

	mkhash(q.hash, seed);
	idx_chunk_foreach(ix, refs_cb, &q);
	return q.refs;
}

bool rel_cb(const uint8_t hash[IDX_HASH_LEN], void *arg)
{
	struct rel_log *l = arg;

	cr_assert_lt(l->n, 64);
	memcpy(l->hashes[l->n++], hash, IDX_HASH_LEN);
	return l->answer;
}

bool released(const struct rel_log *l, uint32_t seed)
{
	uint8_t h[IDX_HASH_LEN];
	int k = 0;

	mkhash(h, seed);
	for (int i = 0; i < l->n; i++)
		k += memcmp(l->hashes[i], h, IDX_HASH_LEN) == 0;
	cr_assert_leq(k, 1, "chunk %u released %d times", seed, k);
	return k == 1;
}

void assert_check_ok(void)
{
	char msg[256];

	cr_assert_eq(idx_check(ix, msg, sizeof(msg)), 0, "%s", msg);
}

void set_content(uint64_t ino, const struct idx_extent *e, size_t n, uint64_t size,
			struct rel_log *log)
{
	uint8_t h[IDX_HASH_LEN];

	mkhash(h, 0xabcdef);
	cr_assert_eq(idx_file_set_content(ix, ino, e, n, size, h, 99, rel_cb, log), 0);
}

double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
