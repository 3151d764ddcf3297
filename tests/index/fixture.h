/*
 * fixture.h — the per-test fixture of the index unit tests (test_index.c, test_steps.c): a fresh
 * temporary directory, the database path in it, and the handle under test. Criterion runs each
 * test in its own process, so the globals are per test.
 */
#ifndef CKPTFS_TESTS_INDEX_FIXTURE_H
#define CKPTFS_TESTS_INDEX_FIXTURE_H

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

#endif
