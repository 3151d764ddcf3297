/*
 * fixture.h — the per-test fixture of the index unit tests (test_index.c, test_steps.c): a fresh
 * temporary directory, the database path in it, and the handle under test. Criterion runs each
 * test in its own process, so the globals are per test.
 */
#ifndef CKPTFS_TESTS_INDEX_FIXTURE_H
#define CKPTFS_TESTS_INDEX_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index/index.h"

extern char tdir[64];    /* the test's temporary directory */
extern char dbpath[128]; /* tdir/index.db */
extern struct idx *ix;   /* the handle under test, or NULL; closed by teardown */

/* setup - a fresh tdir, nothing opened. */
void setup(void);

/* setup_open - setup, then ix opened read-write as uid 1000, gid 1001, time 123 ns. */
void setup_open(void);

/* setup_open_txn - setup_open, then a transaction begun (idx_begin). */
void setup_open_txn(void);

/* teardown - close ix (if open) and remove tdir. */
void teardown(void);

/*
 * new_inode - create an inode of mode (uid 1000, gid 1001, times 5/6/7 ns, nlink 2 for a
 * directory, else 1) and, when name is not NULL, its dentry under parent. Returns its ino.
 */
uint64_t new_inode(uint64_t parent, const char *name, uint32_t mode);

/* ---- helpers of the index tests (test_index.c, test_index_txn.c) ---- */

/* mkhash - a digest made from seed: distinct seeds, distinct digests. */
void mkhash(uint8_t h[IDX_HASH_LEN], uint32_t seed);

/* ext - an extent at off of len bytes, chunk seed (mkhash), stored_size stored, codec 2. */
struct idx_extent ext(uint64_t off, uint32_t len, uint32_t seed, uint32_t stored);

/* new_file - new_inode of a 0644 regular file. */
uint64_t new_file(uint64_t parent, const char *name);

/* A chunk looked for by refs_cb: its digest in, its row's refs and bad flag out. */
struct refs_q {
	uint8_t hash[IDX_HASH_LEN];
	int64_t refs;
	bool bad;
};

/* refs_cb - idx_chunk_foreach callback filling arg (a struct refs_q) from the chunk whose digest
 * it names; returns 1 there (the walk stops), else 0. */
int refs_cb(const uint8_t hash[IDX_HASH_LEN], uint32_t raw_size, uint32_t stored_size,
	    uint8_t codec, int64_t refs, bool bad, void *arg);

/* refs - the reference count of chunk seed in ix, -1 when it has no row. */
int64_t refs(uint32_t seed);

/* The chunks a set_content released (rel_cb), and what rel_cb answers. */
struct rel_log {
	bool answer;
	int n;
	uint8_t hashes[64][IDX_HASH_LEN];
};

/* rel_cb - idx_release_fn logging each released digest into arg (a struct rel_log, at most 64). */
bool rel_cb(const uint8_t hash[IDX_HASH_LEN], void *arg);

/* released - whether l logged chunk seed once (asserts: never twice). */
bool released(const struct rel_log *l, uint32_t seed);

/* assert_check_ok - idx_check finds nothing wrong. */
void assert_check_ok(void);

/* set_content - idx_file_set_content of ino (n extents, size bytes, digest 0xabcdef, 99 ns),
 * released chunks logged into log (may be NULL when none can be). */
void set_content(uint64_t ino, const struct idx_extent *e, size_t n, uint64_t size,
		 struct rel_log *log);

/* now_s - CLOCK_MONOTONIC, seconds. */
double now_s(void);

#endif
