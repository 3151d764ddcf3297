/* SPDX-License-Identifier: MIT */
/*
 * test_index_txn.c — index unit tests, continued from test_index.c: a read-only handle beside the
 * writer (in this process and another), recovery of orphans, idx_check finding corruption, a
 * file of 100k extents, and the transactions (lazy commits, a held read).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "index/index.h"
#include "index/index_int.h" /* the connection: PRAGMA synchronous read back (txn tests) */
#define CTEST_SQLITE
#include "tests/lib/ctest.h"
#include "tests/index/fixture.h"

Test(data, readonly_sees_commits_refuses_writes, .init = setup_open, .fini = teardown)
{
	struct idx_extent e[] = { ext(0, 100, 'A', 60) };
	struct idx *ro = NULL;
	struct idx_inode a = { .mode = S_IFREG | 0644, .nlink = 1 };
	uint8_t h[IDX_HASH_LEN] = { 0 };
	uint64_t f, got;
	char msg[128];

	cr_assert_eq(idx_open(dbpath, IDX_RDONLY, 0, 0, 0, &ro), 0);
	cr_assert_eq(idx_dentry_lookup(ro, IDX_ROOT_INO, "f", &got), -ENOENT);

	cr_assert_eq(idx_begin(ix), 0);
	f = new_file(IDX_ROOT_INO, "f");
	set_content(f, e, 1, 100, NULL);
	/* uncommitted: invisible to the reader, and the reader is not blocked */
	cr_assert_eq(idx_dentry_lookup(ro, IDX_ROOT_INO, "f", &got), -ENOENT);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_dentry_lookup(ro, IDX_ROOT_INO, "f", &got), 0);
	cr_assert_eq(got, f);
	cr_assert_eq(idx_chunk_exists(ro, e[0].hash), 1);

	cr_assert_eq(idx_begin(ro), -EROFS);
	cr_assert_eq(idx_dentry_add(ro, IDX_ROOT_INO, "g", f), -EROFS);
	cr_assert_eq(idx_inode_create(ro, &a, &got), -EROFS);
	cr_assert_eq(idx_file_set_content(ro, f, NULL, 0, 0, h, 0, NULL, NULL), -EROFS);
	cr_assert_eq(idx_recover(ro, NULL, NULL), -EROFS);
	cr_assert_eq(idx_check(ro, msg, sizeof(msg)), 0, "%s", msg);
	idx_rollback(ro);

	/* a second commit is seen too */
	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_dentry_move(ix, IDX_ROOT_INO, "f", IDX_ROOT_INO, "f2"), 0);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_dentry_lookup(ro, IDX_ROOT_INO, "f2", &got), 0);
	idx_close(ro);

	/* a reader alone, after the writer closed (no -wal/-shm left) */
	idx_close(ix);
	ix = NULL;
	cr_assert_eq(idx_open(dbpath, IDX_RDONLY, 0, 0, 0, &ix), 0);
	cr_assert_eq(idx_dentry_lookup(ix, IDX_ROOT_INO, "f2", &got), 0);
	cr_assert_eq(idx_dentry_remove(ix, IDX_ROOT_INO, "f2"), -EROFS);
}

/* the reader in its own process (ckptctl next to the daemon): POSIX locks are per process */
static int child_reader(uint64_t want)
{
	struct idx *ro = NULL;
	uint64_t got = 0;

	if (idx_open(dbpath, IDX_RDONLY, 0, 0, 0, &ro) != 0)
		return 1;
	if (idx_dentry_lookup(ro, IDX_ROOT_INO, "committed", &got) != 0 || got != want)
		return 2;
	if (idx_dentry_lookup(ro, IDX_ROOT_INO, "pending", &got) != -ENOENT)
		return 3;
	if (idx_begin(ro) != -EROFS || idx_dentry_remove(ro, IDX_ROOT_INO, "committed") != -EROFS)
		return 4;
	idx_close(ro);
	return 0;
}

Test(data, readonly_other_process, .init = setup_open, .fini = teardown)
{
	uint64_t f;
	pid_t pid;
	int status;

	cr_assert_eq(idx_begin(ix), 0);
	f = new_file(IDX_ROOT_INO, "committed");
	cr_assert_eq(idx_commit(ix), 0);
	/* the writer holds a write transaction while the reader opens and reads */
	cr_assert_eq(idx_begin(ix), 0);
	new_file(IDX_ROOT_INO, "pending");
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(child_reader(f));
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status));
	cr_assert_eq(WEXITSTATUS(status), 0, "reader step %d failed", WEXITSTATUS(status));
	cr_assert_eq(idx_commit(ix), 0);
}

Test(data, recover_deletes_orphans, .init = setup_open, .fini = teardown)
{
	struct idx_extent e1[] = { ext(0, 10, 'A', 6), ext(10, 10, 'B', 6) };
	struct idx_extent e2[] = { ext(0, 10, 'B', 6) };
	struct idx_extent ez[] = { ext(0, 10, 'Z', 6) };
	struct rel_log keep = { .answer = false }, del = { .answer = true };
	struct idx_inode a;
	uint64_t orphan, live, named, fresh, dir;

	cr_assert_eq(idx_begin(ix), 0);
	orphan = new_file(IDX_ROOT_INO, "orphan");
	live = new_file(IDX_ROOT_INO, "live");
	named = new_file(IDX_ROOT_INO, "named");
	dir = new_inode(IDX_ROOT_INO, "dir", S_IFDIR | 0755);
	fresh = new_file(dir, "created-never-committed"); /* no digest: never durable */
	set_content(orphan, e1, 2, 20, NULL);
	set_content(named, NULL, 0, 0, NULL);
	set_content(live, ez, 1, 10, NULL);
	set_content(live, e2, 1, 10, &keep); /* Z kept at refs 0 */
	cr_assert_eq(refs('Z'), 0);
	/* unlinked while open, then the daemon crashed */
	cr_assert_eq(idx_dentry_remove(ix, IDX_ROOT_INO, "orphan"), 0);
	cr_assert_eq(idx_inode_get(ix, orphan, &a), 0);
	a.nlink = 0;
	cr_assert_eq(idx_inode_update(ix, &a), 0);
	/* nlink 0 but still named: inconsistent, left alone for idx_check */
	cr_assert_eq(idx_inode_get(ix, named, &a), 0);
	a.nlink = 0;
	cr_assert_eq(idx_inode_update(ix, &a), 0);
	cr_assert_eq(idx_commit(ix), 0);

	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_recover(ix, rel_cb, &del), 2);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_inode_get(ix, orphan, &a), -ENOENT);
	cr_assert_eq(idx_inode_get(ix, fresh, &a), -ENOENT);
	cr_assert_eq(idx_dentry_lookup(ix, dir, "created-never-committed", &a.ino), -ENOENT);
	cr_assert_eq(idx_dir_is_empty(ix, dir), 1);
	cr_assert_eq(idx_inode_get(ix, live, &a), 0);
	cr_assert_eq(idx_inode_get(ix, named, &a), 0);
	cr_assert_eq(del.n, 2);
	cr_assert(released(&del, 'A'));
	cr_assert(released(&del, 'Z'));
	cr_assert_eq(refs('A'), -1);
	cr_assert_eq(refs('Z'), -1);
	cr_assert_eq(refs('B'), 1);
	assert_check_ok();

	/* nothing left to do */
	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_recover(ix, rel_cb, &del), 0);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(del.n, 2);
}

Test(check, detects_corruption, .init = setup_open, .fini = teardown)
{
	struct idx_extent e[] = { ext(0, 10, 'A', 6), ext(10, 10, 'A', 6) };
	char msg[256];
	uint64_t f, d;

	cr_assert_eq(idx_begin(ix), 0);
	f = new_file(IDX_ROOT_INO, "f");
	cr_assert_gt(f, IDX_ROOT_INO);
	d = new_inode(IDX_ROOT_INO, "d", S_IFDIR | 0755);
	set_content(f, e, 2, 20, NULL);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_check(ix, msg, sizeof(msg)), 0, "%s", msg);

	/* 3: a refcount off by one, written behind the index's back */
	ct_raw_exec(dbpath, "UPDATE chunks SET refs = refs + 1");
	cr_assert_eq(idx_check(ix, msg, sizeof(msg)), -EUCLEAN);
	cr_assert(strstr(msg, "invariant 3") && strstr(msg, "refs 3 but 2"), "%s", msg);
	ct_raw_exec(dbpath, "UPDATE chunks SET refs = refs - 1");
	assert_check_ok();

	/* 4: size does not match the extents; then a hole */
	ct_raw_exec(dbpath, "UPDATE inodes SET size = size + 1 WHERE (mode & 61440) = 32768");
	cr_assert_eq(idx_check(ix, msg, sizeof(msg)), -EUCLEAN);
	cr_assert(strstr(msg, "invariant 4"), "%s", msg);
	ct_raw_exec(dbpath, "UPDATE inodes SET size = size - 1 WHERE (mode & 61440) = 32768;"
			 "UPDATE extents SET offset = 11 WHERE offset = 10");
	cr_assert_eq(idx_check(ix, msg, sizeof(msg)), -EUCLEAN);
	cr_assert(strstr(msg, "invariant 4") && strstr(msg, "expected 10"), "%s", msg);
	ct_raw_exec(dbpath, "UPDATE extents SET offset = 10 WHERE offset = 11");
	assert_check_ok();

	/* 2: a directory with two names */
	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_dentry_add(ix, IDX_ROOT_INO, "d-again", d), 0);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_check(ix, msg, sizeof(msg)), -EUCLEAN);
	cr_assert(strstr(msg, "invariant 2"), "%s", msg);
	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_dentry_remove(ix, IDX_ROOT_INO, "d-again"), 0);
	cr_assert_eq(idx_commit(ix), 0);
	assert_check_ok();

	/* 1: no root */
	ct_raw_exec(dbpath, "UPDATE inodes SET mode = 33188 WHERE ino = 1");
	cr_assert_eq(idx_check(ix, msg, sizeof(msg)), -EUCLEAN);
	cr_assert(strstr(msg, "invariant 1"), "%s", msg);
}

/* ---- scale ---- */

#define BIG 100000

static bool count_true(const uint8_t hash[IDX_HASH_LEN], void *arg)
{
	++*(size_t *)arg;
	return true;
}

Test(scale, set_content_100k_extents, .init = setup_open, .fini = teardown, .timeout = 240)
{
	struct idx_extent *e = calloc(BIG, sizeof(*e));
	struct idx_stats s;
	struct idx_extent *got;
	size_t n, nrel = 0;
	uint64_t f, b;
	double t0, t1, t2, t3;
	const uint32_t len = 1 << 20;

	cr_assert(e);
	for (uint32_t i = 0; i < BIG; i++)
		e[i] = ext((uint64_t)i * len, len, 1000000 + i, len / 2);
	cr_assert_eq(idx_begin(ix), 0);
	f = new_file(IDX_ROOT_INO, "big.safetensors");
	cr_assert_eq(idx_commit(ix), 0);

	t0 = now_s();
	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_file_set_content(ix, f, e, BIG, (uint64_t)BIG * len, NULL, 1, NULL, NULL),
		     0);
	cr_assert_eq(idx_commit(ix), 0);
	t1 = now_s();

	/* replace: every other chunk kept, the rest new, and one chunk repeated 1000 times */
	for (uint32_t i = 0; i < BIG; i++)
		if (i % 2)
			mkhash(e[i].hash, i < 1000 ? 7 : 3000000 + i);
	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_file_set_content(ix, f, e, BIG, (uint64_t)BIG * len, NULL, 2, NULL, NULL),
		     0);
	cr_assert_eq(idx_commit(ix), 0);
	t2 = now_s();
	cr_assert_eq(refs(7), 500);
	cr_assert_eq(refs(1000000), 1);
	cr_assert_eq(refs(1000001), 0, "dropped chunk kept at 0 (release NULL keeps)");
	cr_assert_eq(idx_stats_get(ix, &s), 0);
	cr_assert_eq(s.chunks, BIG + 1 + (BIG / 2 - 500));
	cr_assert_eq(idx_file_extents(ix, f, &got, &n), 0);
	cr_assert_eq(n, BIG);
	cr_assert_eq(got[BIG - 1].offset, (uint64_t)(BIG - 1) * len);
	free(got);
	cr_assert_eq(idx_file_stored_bytes(ix, f, &b), 0);
	/* chunk 7's 500 extents share its one stored copy */
	cr_assert_eq(b, (uint64_t)(BIG - 500 + 1) * (len / 2));
	assert_check_ok();

	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_dentry_remove(ix, IDX_ROOT_INO, "big.safetensors"), 0);
	cr_assert_eq(idx_inode_delete(ix, f, NULL, NULL), 0);
	cr_assert_eq(idx_recover(ix, count_true, &nrel), 0);
	cr_assert_eq(idx_commit(ix), 0);
	t3 = now_s();
	cr_assert_eq(nrel, s.chunks);
	cr_assert_eq(idx_stats_get(ix, &s), 0);
	cr_assert_eq(s.chunks, 0);
	fprintf(stderr,
		"index: 100k extents: set_content new %.3f s, replace %.3f s, "
		"delete+recover %.3f s\n",
		t1 - t0, t2 - t1, t3 - t2);
	cr_assert_lt(t1 - t0, 10.0);
	cr_assert_lt(t2 - t1, 10.0);
	free(e);
}

/* ---- lazy transactions (idx_begin_lazy) ---- */

/* PRAGMA synchronous of the handle under test: 1 NORMAL, 2 FULL. */
static int synchronous(void)
{
	sqlite3_stmt *st;
	int v = -1;

	cr_assert_eq(sqlite3_prepare_v2(ix->db, "PRAGMA synchronous", -1, &st, NULL), SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return v;
}

Test(txn, lazy_commit_is_kept_and_full_comes_back, .init = setup_open, .fini = teardown)
{
	struct idx_inode a;
	uint64_t f, g, h;

	cr_assert_eq(synchronous(), 2);
	cr_assert_eq(idx_begin_lazy(ix), 0);
	int v = synchronous();

	cr_assert_eq(v, 1, "a lazy transaction commits with synchronous=NORMAL (got %d)", v);
	f = new_inode(IDX_ROOT_INO, "lazy", S_IFREG | 0644);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_inode_get(ix, f, &a), 0);

	cr_assert_eq(idx_begin_lazy(ix), 0);
	cr_assert_eq(synchronous(), 1, "NORMAL from one lazy transaction to the next");
	g = new_inode(IDX_ROOT_INO, "gone", S_IFREG | 0644);
	idx_rollback(ix);
	cr_assert_eq(idx_inode_get(ix, g, &a), -ENOENT);

	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(synchronous(), 2, "an idx_begin transaction is never lazy: FULL is back");
	h = new_inode(IDX_ROOT_INO, "durable", S_IFREG | 0644);
	cr_assert_eq(idx_commit(ix), 0);

	/* a new connection (as after a daemon's exit) finds the lazy commit and the other */
	idx_close(ix);
	ix = NULL;
	cr_assert_eq(idx_open(dbpath, 0, 1000, 1001, 123, &ix), 0);
	cr_assert_eq(idx_inode_get(ix, f, &a), 0);
	cr_assert_eq(idx_inode_get(ix, h, &a), 0);
	cr_assert_eq(idx_dentry_lookup(ix, IDX_ROOT_INO, "gone", &g), -ENOENT);
	cr_assert_eq(synchronous(), 2);
}

/* ---- deferred changes (idx_begin_deferred) ---- */

Test(txn, deferred_changes_share_one_commit_and_roll_back_alone, .init = setup_open,
     .fini = teardown)
{
	struct idx *other = NULL;
	struct idx_inode a;
	uint64_t f, g, h, x;

	cr_assert_eq(idx_open(dbpath, IDX_RDONLY, 1000, 1001, 123, &other), 0);
	cr_assert_eq(idx_begin_deferred(ix), 1, "the first change opens the transaction");
	f = new_inode(IDX_ROOT_INO, "first", S_IFREG | 0644);
	cr_assert_eq(idx_commit_deferred(ix), 0);
	cr_assert_eq(idx_begin_deferred(ix), 0, "the next one joins it");
	g = new_inode(IDX_ROOT_INO, "undone", S_IFREG | 0644);
	idx_rollback_deferred(ix);
	cr_assert_eq(idx_begin_deferred(ix), 0);
	h = new_inode(IDX_ROOT_INO, "third", S_IFREG | 0644);
	cr_assert_eq(idx_commit_deferred(ix), 0);

	/* this handle reads its deferred changes; another connection does not, yet */
	cr_assert_eq(idx_inode_get(ix, f, &a), 0);
	cr_assert_eq(idx_dentry_lookup(ix, IDX_ROOT_INO, "undone", &x), -ENOENT,
		     "a rollback undoes its own change");
	cr_assert_eq(g, h, "its inode number is free again: it was never handed out");
	cr_assert_eq(idx_dentry_lookup(other, IDX_ROOT_INO, "first", &x), -ENOENT);
	/* a caller's rollback without a transaction of its own leaves them */
	idx_rollback(ix);
	cr_assert_eq(idx_inode_get(ix, h, &a), 0);

	/* any transaction of a caller commits them first: its rollback cannot undo them */
	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_dentry_lookup(other, IDX_ROOT_INO, "first", &x), 0);
	cr_assert_eq(x, f);
	new_inode(IDX_ROOT_INO, "abandoned", S_IFREG | 0644);
	idx_rollback(ix);
	cr_assert_eq(idx_dentry_lookup(other, IDX_ROOT_INO, "third", &x), 0);
	cr_assert_eq(idx_dentry_lookup(other, IDX_ROOT_INO, "undone", &x), -ENOENT);
	cr_assert_eq(idx_dentry_lookup(other, IDX_ROOT_INO, "abandoned", &x), -ENOENT);

	/* idx_flush commits; with nothing open it does nothing */
	cr_assert_eq(idx_begin_deferred(ix), 1);
	new_inode(IDX_ROOT_INO, "flushed", S_IFREG | 0644);
	cr_assert_eq(idx_commit_deferred(ix), 0);
	cr_assert_eq(idx_dentry_lookup(other, IDX_ROOT_INO, "flushed", &x), -ENOENT);
	cr_assert_eq(idx_flush(ix), 0);
	cr_assert_eq(idx_dentry_lookup(other, IDX_ROOT_INO, "flushed", &x), 0);
	cr_assert_eq(idx_flush(ix), 0);
	cr_assert(sqlite3_get_autocommit(ix->db), "no transaction left open");

	/* a deferred change left open at close is committed by it */
	cr_assert_eq(idx_begin_deferred(ix), 1);
	new_inode(IDX_ROOT_INO, "at-close", S_IFREG | 0644);
	cr_assert_eq(idx_commit_deferred(ix), 0);
	idx_close(ix);
	ix = NULL;
	cr_assert_eq(idx_dentry_lookup(other, IDX_ROOT_INO, "at-close", &x), 0);
	char msg[512];

	cr_assert_eq(idx_check(other, msg, sizeof(msg)), 0, "%s", msg);
	idx_close(other);
}

Test(txn, a_deferred_transaction_lost_never_hands_its_inode_numbers_out_again,
     .init = setup_open, .fini = teardown)
{
	uint64_t f, g, x;

	cr_assert_eq(idx_begin_deferred(ix), 1);
	f = new_inode(IDX_ROOT_INO, "lost", S_IFREG | 0644);
	/* a row whose foreign key is checked only at COMMIT, which then fails */
	cr_assert_eq(sqlite3_exec(ix->db, "PRAGMA defer_foreign_keys = ON; INSERT INTO dentries"
				  "(parent, name, ino) VALUES (987654, x'78', 1)", NULL, NULL, NULL),
		     SQLITE_OK);
	cr_assert_eq(idx_commit_deferred(ix), 0);
	cr_assert_eq(idx_flush(ix), -EEXIST, "a constraint broken at COMMIT");
	cr_assert(sqlite3_get_autocommit(ix->db), "rolled back, nothing left open");
	cr_assert_eq(idx_dentry_lookup(ix, IDX_ROOT_INO, "lost", &x), -ENOENT);

	/* the kernel may still hold inode f: the next create must not be given it */
	cr_assert_eq(idx_begin(ix), 0);
	g = new_inode(IDX_ROOT_INO, "next", S_IFREG | 0644);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_gt(g, f, "inode %lu handed out again", (unsigned long)g);
	char msg[512];

	cr_assert_eq(idx_check(ix, msg, sizeof(msg)), 0, "%s", msg);
}

/* ---- held read transactions (idx_hold) ---- */

Test(txn, hold_shares_one_read_and_never_delays_a_write, .init = setup_open, .fini = teardown)
{
	struct idx *other = NULL;
	struct idx_inode a;
	uint64_t seen, mine;

	cr_assert_eq(idx_open(dbpath, 0, 1000, 1001, 123, &other), 0);
	idx_hold(ix);
	cr_assert(sqlite3_get_autocommit(ix->db), "nothing opened before the first read");
	cr_assert_eq(idx_inode_get(ix, IDX_ROOT_INO, &a), 0);
	cr_assert_not(sqlite3_get_autocommit(ix->db), "the first read opens the held transaction");

	/* another connection commits; the held reads share one snapshot, so they miss it */
	struct idx *save = ix;

	ix = other;
	cr_assert_eq(idx_begin(other), 0);
	uint64_t theirs = new_inode(IDX_ROOT_INO, "theirs", S_IFREG | 0644);

	cr_assert_eq(idx_commit(other), 0);
	ix = save;
	cr_assert_eq(idx_dentry_lookup(ix, IDX_ROOT_INO, "theirs", &seen), -ENOENT,
		     "a second read of the hold runs in the first one's transaction");

	/* a write inside the hold begins at once and its commit is seen by the reads after it */
	cr_assert_eq(idx_begin(ix), 0);
	mine = new_inode(IDX_ROOT_INO, "mine", S_IFREG | 0644);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_dentry_lookup(ix, IDX_ROOT_INO, "mine", &seen), 0);
	cr_assert_eq(seen, mine);
	cr_assert_eq(idx_dentry_lookup(ix, IDX_ROOT_INO, "theirs", &seen), 0,
		     "the write ended the held snapshot; the next read opens a new one");
	cr_assert_eq(seen, theirs);

	/* holds nest; the last unhold ends the transaction */
	idx_hold(ix);
	idx_unhold(ix);
	cr_assert_not(sqlite3_get_autocommit(ix->db));
	idx_unhold(ix);
	cr_assert(sqlite3_get_autocommit(ix->db), "idx_unhold ends the read transaction");

	/* outside a hold, reads open nothing that outlives them */
	cr_assert_eq(idx_inode_get(ix, mine, &a), 0);
	cr_assert(sqlite3_get_autocommit(ix->db));
	idx_close(other);
}

/* ---- checkpoints apart (idx_checkpoint_apart, idx_checkpoint) ---- */

static off_t db_size(void)
{
	struct stat sb;

	cr_assert_eq(stat(dbpath, &sb), 0);
	return sb.st_size;
}

/* commits rewriting a 60,000-byte attribute of a new file `name`, about 16 WAL frames each */
static void fill_wal_named(const char *name, int commits)
{
	static char v[60000];
	uint64_t f;

	cr_assert_eq(idx_begin(ix), 0);
	f = new_file(IDX_ROOT_INO, name);
	cr_assert_eq(idx_commit(ix), 0);
	for (int i = 0; i < commits; i++) {
		memset(v, 'a' + i % 26, sizeof(v));
		cr_assert_eq(idx_begin(ix), 0);
		cr_assert_eq(idx_xattr_set(ix, f, "user.x", v, sizeof(v), 0), 0);
		cr_assert_eq(idx_commit(ix), 0);
	}
}

static void fill_wal(int commits)
{
	fill_wal_named("big", commits);
}

Test(txn, commits_checkpoint_by_default, .init = setup_open, .fini = teardown)
{
	off_t s0 = db_size();

	fill_wal(100); /* past SQLite's 1,000 frames: a commit copies them into the database */
	cr_assert_gt(db_size(), s0);
	cr_assert_eq(idx_checkpoint(ix), 0, "not apart: idx_checkpoint does nothing");
}

Test(txn, checkpoint_apart_only_in_idx_checkpoint, .init = setup_open, .fini = teardown)
{
	static char value[60000];
	struct idx *ro = NULL;
	uint64_t big, got;
	off_t s0;

	cr_assert_eq(idx_checkpoint_apart(ix), 0);
	cr_assert_eq(idx_checkpoint(ix), 0, "nothing due");
	s0 = db_size();
	fill_wal(100);
	cr_assert_eq(db_size(), s0, "a commit checkpointed");
	cr_assert_eq(idx_checkpoint(ix), 1);
	cr_assert_gt(db_size(), s0);
	cr_assert_eq(idx_checkpoint(ix), 0, "done: not due until the WAL grows again");
	/* the writer goes on, and what was copied reads back on another handle */
	cr_assert_eq(idx_begin(ix), 0);
	new_file(IDX_ROOT_INO, "after");
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_open(dbpath, IDX_RDONLY, 0, 0, 0, &ro), 0);
	cr_assert_eq(idx_dentry_lookup(ro, IDX_ROOT_INO, "big", &big), 0);
	cr_assert_eq(idx_dentry_lookup(ro, IDX_ROOT_INO, "after", &got), 0);
	cr_assert_eq(idx_xattr_get(ro, big, "user.x", value, sizeof(value)), 60000);
	cr_assert_eq(value[0], 'a' + 99 % 26);
	idx_close(ro);
}

static off_t wal_size(void)
{
	char p[PATH_MAX];
	struct stat sb;

	snprintf(p, sizeof(p), "%s-wal", dbpath);
	cr_assert_eq(stat(p, &sb), 0);
	return sb.st_size;
}

/*
 * A checkpoint that copied all of the WAL, with nobody writing or reading from it, has the next
 * commits reuse the WAL from its beginning: its file does not grow. A reader's snapshot in the
 * WAL keeps it (it grows), and what the reader sees still reads back. The daemon's case, a
 * writer inside a transaction during every checkpoint, is test_writeback.py SmallFilesTest
 * (the WAL grew to 67.5 MB).
 */
/*
 * The daemon's case: a writer inside a transaction while the checkpoint copies all of the WAL,
 * so the restart cannot be made, and its commit lands after the copied frames. The next call
 * copies those and restarts, though 1,000 frames have not been added since; before, it waited
 * for 1,000 more, each miss let the WAL grow by 4 MiB, and under CI's load test_writeback.py
 * SmallFilesTest saw 25 MB.
 */
Test(txn, a_missed_restart_is_tried_again_at_the_next_call, .init = setup_open,
     .fini = teardown)
{
	uint64_t got;
	off_t full;

	cr_assert_eq(idx_checkpoint_apart(ix), 0);
	fill_wal(100);
	cr_assert_eq(idx_begin(ix), 0);
	new_file(IDX_ROOT_INO, "mid"); /* a writer inside a transaction: no restart */
	cr_assert_eq(idx_checkpoint(ix), 1);
	cr_assert_eq(idx_commit(ix), 0);
	full = wal_size(); /* its frames after the copied ones */
	cr_assert_eq(idx_checkpoint(ix), 1, "the missed restart is tried again");
	cr_assert_eq(idx_checkpoint(ix), 0, "made: nothing owed, nothing due");
	fill_wal_named("again", 100);
	cr_assert_leq(wal_size(), full, "restarted: the WAL is reused from its beginning");
	cr_assert_eq(idx_dentry_lookup(ix, IDX_ROOT_INO, "mid", &got), 0);
	cr_assert_eq(idx_dentry_lookup(ix, IDX_ROOT_INO, "again", &got), 0);
}

Test(txn, a_copied_wal_is_reused_unless_read, .init = setup_open, .fini = teardown)
{
	struct idx *ro = NULL;
	uint64_t got;
	off_t full;

	cr_assert_eq(idx_checkpoint_apart(ix), 0);
	fill_wal(100);
	full = wal_size();
	cr_assert_gt(full, 1000 * 4096);
	cr_assert_eq(idx_checkpoint(ix), 1);
	fill_wal_named("again", 100);
	cr_assert_leq(wal_size(), full, "all of it copied, nobody reading: the WAL is reused");
	cr_assert_eq(idx_checkpoint(ix), 1);

	/* a reader's snapshot in the WAL keeps it, and what it holds still reads back */
	cr_assert_eq(idx_begin(ix), 0);
	new_file(IDX_ROOT_INO, "seen");
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_open(dbpath, IDX_RDONLY, 0, 0, 0, &ro), 0);
	idx_hold(ro);
	cr_assert_eq(idx_dentry_lookup(ro, IDX_ROOT_INO, "seen", &got), 0);
	fill_wal_named("big2", 100);
	cr_assert_eq(idx_checkpoint(ix), 1);
	fill_wal_named("big3", 100);
	cr_assert_gt(wal_size(), full, "a reader still reads from it: kept, and grown");
	cr_assert_eq(idx_dentry_lookup(ro, IDX_ROOT_INO, "seen", &got), 0);
	cr_assert_neq(idx_dentry_lookup(ro, IDX_ROOT_INO, "big3", &got), 0, "its snapshot");
	idx_unhold(ro);
	idx_close(ro);
	cr_assert_eq(idx_dentry_lookup(ix, IDX_ROOT_INO, "big3", &got), 0);
}
