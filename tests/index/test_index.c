/*
 * test_index.c — unit tests of index/ against real SQLite databases in a fresh temporary
 * directory per test. Raw sqlite3 is used only to damage or inspect a database from outside.
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

/* ---- helpers ---- */

static void copy_file(const char *from, const char *to)
{
	char buf[65536];
	ssize_t n;
	int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	cr_assert(in >= 0 && out >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		cr_assert_eq(write(out, buf, (size_t)n), n);
	close(in);
	close(out);
}

/* ---- open, schema ---- */

Test(open, create_reopen_persists, .init = setup, .fini = teardown)
{
	struct idx_inode root, a;
	uint64_t ino, got;

	cr_assert_eq(idx_open(dbpath, 0, 1000, 1001, 123, &ix), 0);
	cr_assert_eq(idx_inode_get(ix, IDX_ROOT_INO, &root), 0);
	cr_assert_eq(root.ino, IDX_ROOT_INO);
	cr_assert_eq(root.mode, S_IFDIR | 0755);
	cr_assert_eq(root.nlink, 2);
	cr_assert_eq(root.uid, 1000);
	cr_assert_eq(root.gid, 1001);
	cr_assert_eq(root.mtime_ns, 123);
	cr_assert_eq(root.ctime_ns, 123);
	cr_assert_eq(root.atime_ns, 123);
	cr_assert_not(root.has_hash);

	cr_assert_eq(idx_begin(ix), 0);
	ino = new_file(IDX_ROOT_INO, "model.pt");
	cr_assert_eq(idx_commit(ix), 0);
	idx_close(ix);
	ix = NULL;

	cr_assert_eq(ct_raw_i64(dbpath, "PRAGMA user_version"), IDX_SCHEMA_VERSION);

	/* reopening does not recreate: other uid/gid/time are ignored */
	cr_assert_eq(idx_open(dbpath, 0, 1, 2, 456, &ix), 0);
	cr_assert_eq(idx_inode_get(ix, IDX_ROOT_INO, &root), 0);
	cr_assert_eq(root.uid, 1000);
	cr_assert_eq(root.mtime_ns, 123);
	cr_assert_eq(idx_dentry_lookup(ix, IDX_ROOT_INO, "model.pt", &got), 0);
	cr_assert_eq(got, ino);
	cr_assert_eq(idx_inode_get(ix, ino, &a), 0);
	cr_assert_eq(a.mode, S_IFREG | 0644);
	cr_assert_eq(a.nlink, 1);
	cr_assert_eq(a.mtime_ns, 6);
	assert_check_ok();
	cr_assert_eq(ct_raw_i64(dbpath, "SELECT count(*) FROM pragma_journal_mode WHERE "
				     "journal_mode = 'wal'"),
		     1);
}

Test(open, refuses_newer_schema, .init = setup, .fini = teardown)
{
	char copy[160];

	snprintf(copy, sizeof(copy), "%s/copy.db", tdir);
	cr_assert_eq(idx_open(dbpath, 0, 0, 0, 1, &ix), 0);
	idx_close(ix);
	ix = NULL;
	copy_file(dbpath, copy);
	ct_raw_exec(copy, "PRAGMA user_version = 99");

	cr_assert_eq(idx_open(copy, 0, 0, 0, 1, &ix), -EPROTO);
	cr_assert_null(ix);
	cr_assert_eq(idx_open(copy, IDX_RDONLY, 0, 0, 1, &ix), -EPROTO);
	/* untouched by the refusal */
	cr_assert_eq(ct_raw_i64(copy, "PRAGMA user_version"), 99);
	/* the original is fine */
	cr_assert_eq(idx_open(dbpath, 0, 0, 0, 1, &ix), 0);
}

Test(open, refuses_foreign_databases, .init = setup, .fini = teardown)
{
	char other[160], meta[160], junk[160], empty[160], nodir[160], text[4096];
	int fd;

	snprintf(other, sizeof(other), "%s/other.db", tdir);
	ct_raw_exec(other, "CREATE TABLE photos(id INTEGER PRIMARY KEY, jpeg BLOB)");
	cr_assert_eq(idx_open(other, 0, 0, 0, 1, &ix), -EPROTO);
	cr_assert_eq(idx_open(other, IDX_RDONLY, 0, 0, 1, &ix), -EPROTO);
	cr_assert_eq(ct_raw_i64(other, "SELECT count(*) FROM sqlite_master"), 1, "left as found");

	/* right version, wrong format tag */
	snprintf(meta, sizeof(meta), "%s/meta.db", tdir);
	ct_raw_exec(meta, "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
		       "INSERT INTO meta VALUES('format', 'something-else');"
		       "PRAGMA user_version = 1;");
	cr_assert_eq(idx_open(meta, 0, 0, 0, 1, &ix), -EPROTO);

	/* not SQLite at all */
	snprintf(junk, sizeof(junk), "%s/junk.db", tdir);
	fd = open(junk, O_WRONLY | O_CREAT, 0600);
	memset(text, 'x', sizeof(text));
	cr_assert_eq(write(fd, text, sizeof(text)), (ssize_t)sizeof(text));
	close(fd);
	cr_assert_eq(idx_open(junk, 0, 0, 0, 1, &ix), -EIO);

	/* missing: read-only does not create */
	snprintf(nodir, sizeof(nodir), "%s/none/index.db", tdir);
	cr_assert_eq(idx_open(dbpath, IDX_RDONLY, 0, 0, 1, &ix), -ENOENT);
	cr_assert_eq(access(dbpath, F_OK), -1);
	cr_assert_eq(idx_open(nodir, 0, 0, 0, 1, &ix), -ENOENT);

	/* an empty file: not an index yet for a reader, created by a writer */
	snprintf(empty, sizeof(empty), "%s/empty.db", tdir);
	fd = open(empty, O_WRONLY | O_CREAT, 0600);
	close(fd);
	cr_assert_eq(idx_open(empty, IDX_RDONLY, 0, 0, 1, &ix), -ENOENT);
	cr_assert_eq(idx_open(empty, 0, 0, 0, 1, &ix), 0);
	assert_check_ok();
	cr_assert_null(NULL);
}

Test(open, unreadable_is_eacces, .init = setup, .fini = teardown)
{
	if (geteuid() == 0) {
		teardown(); /* a skipped test does not reach .fini */
		cr_skip_test("root reads files whatever their mode");
	}
	cr_assert_eq(idx_open(dbpath, 0, 0, 0, 1, &ix), 0);
	idx_close(ix);
	ix = NULL;
	cr_assert_eq(chmod(dbpath, 0), 0);
	cr_assert_eq(idx_open(dbpath, IDX_RDONLY, 0, 0, 1, &ix), -EACCES);
	chmod(dbpath, 0600);
}

/* ---- namespace ---- */

struct list_log {
	int n, stop_at;
	char names[16][32];
	uint64_t inos[16];
	uint32_t modes[16];
	int64_t cookies[16];
};

static int list_cb(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct list_log *l = arg;

	cr_assert_lt(l->n, 16);
	cr_assert_gt(cookie, 0);
	snprintf(l->names[l->n], sizeof(l->names[0]), "%s", name);
	l->inos[l->n] = ino;
	l->modes[l->n] = mode;
	l->cookies[l->n] = cookie;
	l->n++;
	return l->n == l->stop_at ? 7 : 0;
}

/*
 * A temporary table (OpenEphemeral: an IN list or subquery, a sort no index gives) or a sorter
 * is opened, allocated and freed at every run of a statement: IX_STEP_BY_NAME_AT's two made a
 * tracker read cost 2.5x passthrough_ll's (tests/bench/RESULTS.md, "A tracker read without
 * temporary tables"). Only the statements listed may have one, each for the reason given; EXPLAIN
 * of every prepared statement of the handle, on a database as idx_open leaves it.
 */
Test(schema, temporary_tables_only_where_listed, .init = setup_open, .fini = teardown)
{
	static const enum ix_stmt allowed[] = {
		IX_EXT_DECREF, IX_EXT_ZEROS, IX_EXT_DELETE, /* after IX_EXT_ANY found extents */
		IX_DIR_HAS_BAD_CHUNK,            /* a recursion, once per readdir of a damaged store */
		IX_STORED_BYTES,                 /* GROUP BY the chunks of one file (a sorter) */
		IX_RECOVER_UNCOMMITTED_DENTRIES, /* recovery, once per mount */
		IX_STEP_ALL, IX_XATTR_LIST,      /* listings, ordered by what no index holds */
		IX_CHECK_TILE_GAP,               /* idx_check */
	};
	char found[4096] = "";

	for (int i = 0; i < IX__COUNT; i++) {
		sqlite3_stmt *st;
		char q[8192];
		int n = 0;
		bool ok = false;

		if (!ix->st[i])
			continue;
		snprintf(q, sizeof(q), "EXPLAIN %s", sqlite3_sql(ix->st[i]));
		cr_assert_eq(sqlite3_prepare_v2(ix->db, q, -1, &st, NULL), SQLITE_OK, "%s", q);
		while (sqlite3_step(st) == SQLITE_ROW) {
			const char *op = (const char *)sqlite3_column_text(st, 1);

			n += !strcmp(op, "OpenEphemeral") || !strcmp(op, "SorterOpen");
		}
		sqlite3_finalize(st);
		for (size_t k = 0; k < sizeof(allowed) / sizeof(allowed[0]); k++)
			ok |= allowed[k] == (enum ix_stmt)i;
		if (n && !ok)
			snprintf(found + strlen(found), sizeof(found) - strlen(found), "\n%d: %.100s", i,
				 sqlite3_sql(ix->st[i]));
	}
	cr_assert_str_empty(found, "statements with a temporary table or sorter:%s", found);
}

Test(ns, dentries_lookup_move_remove_list, .init = setup_open, .fini = teardown)
{
	struct list_log l = { 0 }, l2 = { 0 };
	uint64_t d, fa, fb, fc, fx, got;
	int64_t ca, cb;

	cr_assert_eq(idx_begin(ix), 0);
	d = new_inode(IDX_ROOT_INO, "d", S_IFDIR | 0750);
	fb = new_file(d, "b");
	fa = new_file(d, "a");
	fc = new_file(d, "c");
	fx = new_file(d, "\xff\xfe-raw");

	cr_assert_eq(idx_dentry_lookup(ix, d, "a", &got), 0);
	cr_assert_eq(got, fa);
	cr_assert_eq(idx_dentry_lookup(ix, d, "\xff\xfe-raw", &got), 0);
	cr_assert_eq(got, fx);
	got = 4242;
	cr_assert_eq(idx_dentry_lookup(ix, d, "\xff\xfe-RAW", &got), -ENOENT);
	cr_assert_eq(idx_dentry_lookup(ix, d, "A", &got), -ENOENT, "case matters");
	cr_assert_eq(idx_dentry_lookup(ix, IDX_ROOT_INO, "a", &got), -ENOENT);
	cr_assert_eq(got, 4242, "ret untouched on failure");
	cr_assert_eq(idx_dentry_add(ix, d, "a", fb), -EEXIST);
	cr_assert_eq(idx_dentry_lookup(ix, d, "a", &got), 0);
	cr_assert_eq(got, fa, "a failed add changes nothing");

	/* listing: cookie (creation) order, not name order */
	cr_assert_eq(idx_dir_list(ix, d, 0, list_cb, &l), 0);
	cr_assert_eq(l.n, 4);
	cr_assert_str_eq(l.names[0], "b");
	cr_assert_str_eq(l.names[1], "a");
	cr_assert_str_eq(l.names[2], "c");
	cr_assert_str_eq(l.names[3], "\xff\xfe-raw");
	cr_assert_eq(l.inos[1], fa);
	cr_assert_eq(l.modes[1], S_IFREG | 0644);
	cr_assert(l.cookies[0] < l.cookies[1] && l.cookies[1] < l.cookies[2]);
	cb = l.cookies[0];
	ca = l.cookies[1];

	/* rename keeps the cookie, in the same directory and across directories */
	cr_assert_eq(idx_dentry_move(ix, d, "a", d, "zz"), 0);
	cr_assert_eq(idx_dentry_lookup(ix, d, "a", &got), -ENOENT);
	cr_assert_eq(idx_dentry_lookup(ix, d, "zz", &got), 0);
	cr_assert_eq(got, fa);
	cr_assert_eq(idx_dentry_move(ix, d, "b", IDX_ROOT_INO, "b2"), 0);
	cr_assert_eq(idx_dentry_move(ix, d, "c", d, "zz"), -EEXIST);
	cr_assert_eq(idx_dentry_move(ix, d, "nope", d, "x"), -ENOENT);
	cr_assert_eq(idx_dentry_lookup(ix, d, "c", &got), 0, "failed move changes nothing");

	memset(&l, 0, sizeof(l));
	cr_assert_eq(idx_dir_list(ix, d, 0, list_cb, &l), 0);
	cr_assert_eq(l.n, 3);
	cr_assert_str_eq(l.names[0], "zz");
	cr_assert_eq(l.cookies[0], ca);
	memset(&l, 0, sizeof(l));
	cr_assert_eq(idx_dir_list(ix, IDX_ROOT_INO, 0, list_cb, &l), 0);
	cr_assert_eq(l.n, 2);
	cr_assert_str_eq(l.names[0], "d");
	cr_assert_str_eq(l.names[1], "b2");
	cr_assert_eq(l.cookies[1], cb);

	/* resume after a cookie; stop early with the callback's value */
	cr_assert_eq(idx_dir_list(ix, d, ca, list_cb, &l2), 0);
	cr_assert_eq(l2.n, 2);
	cr_assert_str_eq(l2.names[0], "c");
	cr_assert_str_eq(l2.names[1], "\xff\xfe-raw");
	memset(&l2, 0, sizeof(l2));
	l2.stop_at = 1;
	cr_assert_eq(idx_dir_list(ix, d, 0, list_cb, &l2), 7);
	cr_assert_eq(l2.n, 1);

	/* remove */
	cr_assert_eq(idx_dir_is_empty(ix, d), 0);
	cr_assert_eq(idx_dentry_remove(ix, d, "c"), 0);
	cr_assert_eq(idx_dentry_remove(ix, d, "c"), -ENOENT);
	cr_assert_eq(idx_dentry_remove(ix, d, "zz"), 0);
	cr_assert_eq(idx_dentry_remove(ix, d, "\xff\xfe-raw"), 0);
	cr_assert_eq(idx_dir_is_empty(ix, d), 1);
	cr_assert_eq(idx_dir_is_empty(ix, fc), 1);
	/* a new entry never reuses a cookie */
	cr_assert_eq(idx_dentry_add(ix, d, "a", fa), 0);
	memset(&l, 0, sizeof(l));
	cr_assert_eq(idx_dir_list(ix, d, 0, list_cb, &l), 0);
	cr_assert_eq(l.n, 1);
	cr_assert_gt(l.cookies[0], ca);
	cr_assert_eq(idx_commit(ix), 0);
}

Test(ns, parent_and_path, .init = setup_open, .fini = teardown)
{
	uint64_t d, e, f, orphan, x, y, p = 0;
	char buf[64];

	cr_assert_eq(idx_begin(ix), 0);
	d = new_inode(IDX_ROOT_INO, "iter_0000100", S_IFDIR | 0755);
	e = new_inode(d, "mp_rank_00", S_IFDIR | 0755);
	f = new_file(e, "model_optim_rng.pt");
	orphan = new_file(0, NULL);
	cr_assert_eq(idx_dentry_parent(ix, e, &p, buf, sizeof(buf)), 0);
	cr_assert_eq(p, d);
	cr_assert_str_eq(buf, "mp_rank_00");
	cr_assert_eq(idx_dentry_parent(ix, d, &p, NULL, 0), 0);
	cr_assert_eq(p, IDX_ROOT_INO);
	cr_assert_eq(idx_dentry_parent(ix, IDX_ROOT_INO, &p, buf, sizeof(buf)), 0);
	cr_assert_eq(p, IDX_ROOT_INO);
	cr_assert_eq(idx_dentry_parent(ix, e, &p, buf, 4), 0);
	cr_assert_str_eq(buf, "mp_");
	p = 77;
	cr_assert_eq(idx_dentry_parent(ix, orphan, &p, buf, sizeof(buf)), -ENOENT);
	cr_assert_eq(p, 77);

	cr_assert_eq(idx_path(ix, IDX_ROOT_INO, buf, sizeof(buf)), 1);
	cr_assert_str_eq(buf, "/");
	cr_assert_eq(idx_path(ix, f, buf, sizeof(buf)), 43);
	cr_assert_str_eq(buf, "/iter_0000100/mp_rank_00/model_optim_rng.pt");
	cr_assert_eq(idx_path(ix, f, buf, 6), 43, "full length even when truncated");
	cr_assert_str_eq(buf, "/iter");
	cr_assert_eq(idx_path(ix, orphan, buf, sizeof(buf)), -ENOENT);

	/* a cycle that never reaches the root */
	x = new_inode(0, NULL, S_IFDIR | 0755);
	y = new_inode(x, "y", S_IFDIR | 0755);
	cr_assert_eq(idx_dentry_add(ix, y, "x", x), 0);
	cr_assert_eq(idx_path(ix, x, buf, sizeof(buf)), -ELOOP);
	idx_rollback(ix);
	cr_assert_eq(idx_path(ix, f, buf, sizeof(buf)), -ENOENT, "rolled back");
}

/* idx_path and idx_dentry_parent keep recent answers (struct ix_pent): a move, a removal or a
 * rollback must never leave one stale */
Test(ns, path_follows_moves_removals_and_rollbacks, .init = setup_open, .fini = teardown)
{
	uint64_t d, e, f, q, p = 0;
	char buf[80];

	cr_assert_eq(idx_begin(ix), 0);
	q = new_inode(IDX_ROOT_INO, "q", S_IFDIR | 0755);
	d = new_inode(IDX_ROOT_INO, "iter_0000100", S_IFDIR | 0755);
	e = new_inode(d, "mp_rank_00", S_IFDIR | 0755);
	f = new_file(e, "model_optim_rng.pt");
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_path(ix, f, buf, sizeof(buf)), 43);
	cr_assert_str_eq(buf, "/iter_0000100/mp_rank_00/model_optim_rng.pt");
	p = 77;
	cr_assert_eq(idx_dentry_parent(ix, 0, &p, buf, sizeof(buf)), -ENOENT, "no inode 0");
	cr_assert_eq(p, 77);

	/* the step directory set aside, as quarantine does (steps_move_to_quarantine) */
	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_dentry_move(ix, IDX_ROOT_INO, "iter_0000100", q, "iter_0000100.1"), 0);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_path(ix, f, buf, sizeof(buf)), 47);
	cr_assert_str_eq(buf, "/q/iter_0000100.1/mp_rank_00/model_optim_rng.pt");
	cr_assert_eq(idx_dentry_parent(ix, d, &p, buf, sizeof(buf)), 0);
	cr_assert_eq(p, q);
	cr_assert_str_eq(buf, "iter_0000100.1");

	/* a second link, then the first one removed: the file's first dentry is the second */
	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_dentry_add(ix, IDX_ROOT_INO, "hard", f), 0);
	cr_assert_eq(idx_dentry_parent(ix, f, &p, buf, sizeof(buf)), 0);
	cr_assert_eq(p, e, "the first dentry still");
	cr_assert_eq(idx_dentry_remove(ix, e, "model_optim_rng.pt"), 0);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_dentry_parent(ix, f, &p, buf, sizeof(buf)), 0);
	cr_assert_eq(p, IDX_ROOT_INO);
	cr_assert_str_eq(buf, "hard");
	cr_assert_eq(idx_path(ix, f, buf, sizeof(buf)), 5);
	cr_assert_str_eq(buf, "/hard");

	/* a move seen inside its transaction, then rolled back */
	cr_assert_eq(idx_path(ix, e, buf, sizeof(buf)), 28);
	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_dentry_move(ix, IDX_ROOT_INO, "q", IDX_ROOT_INO, "r"), 0);
	cr_assert_eq(idx_path(ix, e, buf, sizeof(buf)), 28);
	cr_assert_str_eq(buf, "/r/iter_0000100.1/mp_rank_00");
	idx_rollback(ix);
	cr_assert_eq(idx_path(ix, e, buf, sizeof(buf)), 28);
	cr_assert_str_eq(buf, "/q/iter_0000100.1/mp_rank_00");
}

Test(ns, inode_update_delete_symlink, .init = setup_open, .fini = teardown)
{
	struct idx_inode a, b;
	uint64_t f, s;
	char buf[8];

	cr_assert_eq(idx_begin(ix), 0);
	f = new_file(IDX_ROOT_INO, "f");
	s = new_inode(IDX_ROOT_INO, "latest", S_IFLNK | 0777);
	cr_assert_eq(idx_inode_get(ix, f, &a), 0);
	a.mode = S_IFREG | 0600;
	a.uid = 7;
	a.gid = 8;
	a.nlink = 3;
	a.size = 1ull << 40;
	a.atime_ns = -5;
	a.mtime_ns = INT64_MAX;
	a.ctime_ns = 1;
	a.rdev = 0xdeadbeefcafeull;
	a.has_hash = true;
	mkhash(a.hash, 17);
	cr_assert_eq(idx_inode_update(ix, &a), 0);
	cr_assert_eq(idx_inode_get(ix, f, &b), 0);
	cr_assert_eq(memcmp(&a, &b, sizeof(a)), 0);
	a.has_hash = false;
	a.size = 0; /* invariant 4: no extents, so size 0 */
	cr_assert_eq(idx_inode_update(ix, &a), 0);
	cr_assert_eq(idx_inode_get(ix, f, &b), 0);
	cr_assert_not(b.has_hash);
	a.ino = 9999;
	cr_assert_eq(idx_inode_update(ix, &a), -ENOENT);
	cr_assert_eq(idx_inode_get(ix, 9999, &b), -ENOENT);

	cr_assert_eq(idx_symlink_get(ix, s, buf, sizeof(buf)), -ENOENT);
	cr_assert_eq(idx_symlink_set(ix, s, "global_step100/\xfe"), 0);
	cr_assert_eq(idx_symlink_get(ix, s, buf, sizeof(buf)), 16);
	cr_assert_str_eq(buf, "global_");
	cr_assert_eq(idx_symlink_set(ix, 9999, "x"), -ENOENT);

	cr_assert_eq(idx_inode_delete(ix, 9999, NULL, NULL), -ENOENT);
	cr_assert_eq(idx_inode_delete(ix, f, NULL, NULL), -EEXIST, "still has a dentry");
	cr_assert_eq(idx_dentry_remove(ix, IDX_ROOT_INO, "latest"), 0);
	cr_assert_eq(idx_inode_delete(ix, s, NULL, NULL), 0);
	cr_assert_eq(idx_inode_get(ix, s, &b), -ENOENT);
	cr_assert_eq(idx_symlink_get(ix, s, buf, sizeof(buf)), -ENOENT);
	cr_assert_eq(idx_inode_delete(ix, IDX_ROOT_INO, NULL, NULL), -EBUSY);
	cr_assert_eq(idx_commit(ix), 0);
	/* inode numbers are not reused */
	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_gt(new_file(IDX_ROOT_INO, "g"), s);
	cr_assert_eq(idx_commit(ix), 0);
	assert_check_ok();
}

/* ---- content and chunks ---- */

Test(data, refcounts_exact, .init = setup_open, .fini = teardown)
{
	struct rel_log del = { .answer = true }, keep = { .answer = false };
	struct idx_extent e1[] = { ext(0, 100, 'A', 50), ext(100, 10, 'B', 9),
				   ext(110, 100, 'A', 50) };
	struct idx_extent e2[] = { ext(0, 10, 'B', 9), ext(10, 30, 'C', 20) };
	struct idx_extent e1b[] = { ext(0, 30, 'C', 20), ext(30, 40, 'D', 5) };
	struct idx_extent e2b[] = { ext(0, 40, 'D', 5) };
	struct idx_extent e2c[] = { ext(0, 10, 'B', 777), ext(10, 10, 'B', 777) };
	struct idx_extent *got;
	struct idx_inode a;
	size_t n;
	uint64_t f1, f2;

	cr_assert_eq(idx_begin(ix), 0);
	f1 = new_file(IDX_ROOT_INO, "f1");
	f2 = new_file(IDX_ROOT_INO, "f2");
	set_content(f1, e1, 3, 210, &del);
	set_content(f2, e2, 2, 40, &del);
	cr_assert_eq(refs('A'), 2, "one chunk twice in a file");
	cr_assert_eq(refs('B'), 2, "shared by two files");
	cr_assert_eq(refs('C'), 1);
	cr_assert_eq(del.n, 0);
	cr_assert_eq(idx_inode_get(ix, f1, &a), 0);
	cr_assert_eq(a.size, 210);
	cr_assert_eq(a.mtime_ns, 99);
	cr_assert_eq(a.ctime_ns, 99);
	cr_assert_eq(a.atime_ns, 5);
	cr_assert(a.has_hash);
	cr_assert_eq(idx_file_extents(ix, f1, &got, &n), 0);
	cr_assert_eq(n, 3);
	cr_assert_eq(got[2].offset, 110);
	cr_assert_eq(got[2].length, 100);
	cr_assert_eq(got[2].stored_size, 50);
	cr_assert_eq(got[2].codec, 2);
	cr_assert_eq(memcmp(got[2].hash, e1[2].hash, IDX_HASH_LEN), 0);
	free(got);
	assert_check_ok();

	/* replace: A leaves (twice), C and D arrive */
	set_content(f1, e1b, 2, 70, &del);
	cr_assert_eq(del.n, 1);
	cr_assert(released(&del, 'A'));
	cr_assert_eq(refs('A'), -1, "deleted: release returned true");
	cr_assert_eq(idx_chunk_exists(ix, e1[0].hash), 0);
	cr_assert_eq(refs('B'), 1);
	cr_assert_eq(refs('C'), 2);
	cr_assert_eq(refs('D'), 1);
	assert_check_ok();

	/* release says keep: B stays at refs 0 */
	set_content(f2, e2b, 1, 40, &keep);
	cr_assert_eq(keep.n, 1);
	cr_assert(released(&keep, 'B'));
	cr_assert_eq(refs('B'), 0);
	cr_assert_eq(idx_chunk_exists(ix, e2[0].hash), 1);
	cr_assert_eq(refs('C'), 1);
	cr_assert_eq(refs('D'), 2);
	assert_check_ok();

	/* a kept chunk comes back; its stored size is the recorded one */
	set_content(f2, e2c, 2, 20, &del);
	cr_assert_eq(refs('B'), 2);
	cr_assert_eq(refs('D'), 1);
	cr_assert_eq(del.n, 1, "D is still used by f1");
	cr_assert_eq(idx_file_extents(ix, f2, &got, &n), 0);
	cr_assert_eq(n, 2);
	cr_assert_eq(got[0].stored_size, 9);
	free(got);

	/* empty the file */
	set_content(f2, NULL, 0, 0, &del);
	cr_assert(released(&del, 'B'));
	cr_assert_eq(idx_file_extents(ix, f2, &got, &n), 0);
	cr_assert_eq(n, 0);
	cr_assert_null(got);

	/* delete an inode: its chunks are released */
	cr_assert_eq(idx_dentry_remove(ix, IDX_ROOT_INO, "f1"), 0);
	cr_assert_eq(idx_inode_delete(ix, f1, rel_cb, &del), 0);
	cr_assert(released(&del, 'C'));
	cr_assert(released(&del, 'D'));
	cr_assert_eq(del.n, 4);
	cr_assert_eq(refs('C'), -1);
	cr_assert_eq(refs('D'), -1);
	assert_check_ok();
	cr_assert_eq(idx_commit(ix), 0);
}

struct users_log {
	int n;
	uint64_t ino[8], off[8];
};

static int users_cb(uint64_t ino, uint64_t offset, void *arg)
{
	struct users_log *u = arg;

	u->ino[u->n] = ino;
	u->off[u->n] = offset;
	return ++u->n == 8;
}

Test(data, chunk_bad_users_stats, .init = setup_open, .fini = teardown)
{
	struct idx_extent e1[] = { ext(0, 10, 'B', 4), ext(10, 20, 'C', 15), ext(30, 10, 'B', 4) };
	struct idx_extent e2[] = { ext(0, 10, 'B', 4) };
	struct users_log u = { 0 };
	struct idx_stats s;
	uint8_t h[IDX_HASH_LEN];
	uint64_t f1, f2;

	cr_assert_eq(idx_begin(ix), 0);
	f1 = new_file(IDX_ROOT_INO, "f1");
	f2 = new_file(IDX_ROOT_INO, "f2");
	new_inode(IDX_ROOT_INO, "dir", S_IFDIR | 0755);
	new_inode(IDX_ROOT_INO, "link", S_IFLNK | 0777);
	set_content(f1, e1, 3, 40, NULL);
	set_content(f2, e2, 1, 10, NULL);

	mkhash(h, 'B');
	cr_assert_eq(idx_chunk_users(ix, h, users_cb, &u), 0);
	cr_assert_eq(u.n, 3);
	cr_assert(u.ino[0] == f1 && u.off[0] == 0);
	cr_assert(u.ino[1] == f1 && u.off[1] == 30);
	cr_assert(u.ino[2] == f2 && u.off[2] == 0);

	cr_assert_eq(idx_stats_get(ix, &s), 0);
	cr_assert_eq(s.files, 2);
	cr_assert_eq(s.dirs, 2);
	cr_assert_eq(s.symlinks, 1);
	cr_assert_eq(s.logical_bytes, 50);
	cr_assert_eq(s.chunks, 2);
	cr_assert_eq(s.chunk_raw_bytes, 30);
	cr_assert_eq(s.stored_bytes, 19);
	cr_assert_eq(s.bad_chunks, 0);

	cr_assert_eq(idx_chunk_mark_bad(ix, h), 0);
	cr_assert_eq(idx_stats_get(ix, &s), 0);
	cr_assert_eq(s.bad_chunks, 1);
	{
		struct refs_q q = { .refs = -1 };

		memcpy(q.hash, h, IDX_HASH_LEN);
		cr_assert_eq(idx_chunk_foreach(ix, refs_cb, &q), 1, "stops with fn's value");
		cr_assert(q.bad);
		cr_assert_eq(q.refs, 3);
	}
	cr_assert_eq(idx_chunk_clear_bad(ix, h), 0);
	cr_assert_eq(idx_stats_get(ix, &s), 0);
	cr_assert_eq(s.bad_chunks, 0);
	mkhash(h, 'Z');
	cr_assert_eq(idx_chunk_mark_bad(ix, h), -ENOENT);
	cr_assert_eq(idx_chunk_clear_bad(ix, h), -ENOENT);
	cr_assert_eq(idx_chunk_exists(ix, h), 0);
	cr_assert_eq(idx_commit(ix), 0);
}

/* idx_dir_has_bad_chunk: steps/a/f1 and steps/b/f2 share chunk 'B'; f1 is also linked as
 * other/f1; 'C' is f1's alone. The answer climbs every dentry of every user to the root. */
Test(data, dir_has_bad_chunk_climbs_every_link, .init = setup_open, .fini = teardown)
{
	struct idx_extent e1[] = { ext(0, 10, 'B', 4), ext(10, 20, 'C', 15) };
	struct idx_extent e2[] = { ext(0, 10, 'B', 4) };
	struct idx *ro;
	uint8_t h[IDX_HASH_LEN];
	uint64_t steps, a, b, other, f1, f2;

	cr_assert_eq(idx_begin(ix), 0);
	steps = new_inode(IDX_ROOT_INO, "steps", S_IFDIR | 0755);
	a = new_inode(steps, "a", S_IFDIR | 0755);
	b = new_inode(steps, "b", S_IFDIR | 0755);
	other = new_inode(IDX_ROOT_INO, "other", S_IFDIR | 0755);
	f1 = new_file(a, "f1");
	f2 = new_file(b, "f2");
	set_content(f1, e1, 2, 30, NULL);
	set_content(f2, e2, 1, 10, NULL);
	cr_assert_eq(idx_commit(ix), 0);
	/* none marked bad: no, everywhere (one probe of chunks_bad) */
	uint64_t dirs[] = { IDX_ROOT_INO, steps, a, b, other, f1 };

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		cr_assert_eq(idx_dir_has_bad_chunk(ix, dirs[i]), 0, "dir %zu", i);
	/* 'C' bad: f1's directories only, up to the root; a file is its own top */
	mkhash(h, 'C');
	cr_assert_eq(idx_chunk_mark_bad(ix, h), 0);
	cr_assert_eq(idx_dir_has_bad_chunk(ix, a), 1);
	cr_assert_eq(idx_dir_has_bad_chunk(ix, steps), 1);
	cr_assert_eq(idx_dir_has_bad_chunk(ix, IDX_ROOT_INO), 1);
	cr_assert_eq(idx_dir_has_bad_chunk(ix, f1), 1);
	cr_assert_eq(idx_dir_has_bad_chunk(ix, b), 0);
	cr_assert_eq(idx_dir_has_bad_chunk(ix, other), 0);
	cr_assert_eq(idx_dir_has_bad_chunk(ix, 999999), 0, "no such directory");
	/* a second link of f1 in other: other holds a bad chunk too */
	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_dentry_add(ix, other, "f1", f1), 0);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_dir_has_bad_chunk(ix, other), 1);
	/* 'B' bad, 'C' repaired: both f1's and f2's directories */
	cr_assert_eq(idx_chunk_clear_bad(ix, h), 0);
	cr_assert_eq(idx_dir_has_bad_chunk(ix, a), 0);
	mkhash(h, 'B');
	cr_assert_eq(idx_chunk_mark_bad(ix, h), 0);
	cr_assert_eq(idx_dir_has_bad_chunk(ix, a), 1);
	cr_assert_eq(idx_dir_has_bad_chunk(ix, b), 1);
	/* the read-write open made the partial index the probe uses */
	cr_assert_eq(ct_raw_i64(dbpath, "SELECT count(*) FROM sqlite_master WHERE type = 'index' "
					"AND name = 'chunks_bad'"),
		     1);
	/* a read-only handle answers the same (without the index it would scan) */
	cr_assert_eq(idx_open(dbpath, IDX_RDONLY, 0, 0, 1, &ro), 0);
	cr_assert_eq(idx_dir_has_bad_chunk(ro, b), 1);
	cr_assert_eq(idx_dir_has_bad_chunk(ro, other), 1);
	idx_close(ro);
}

/* idx_data_version: a read-only handle beside the writer (the daemon's status figures,
 * fs/fuse/meta.c fs_meta_stats) sees a new value after each commit of the writer and the same
 * value while nothing was committed; a rolled-back transaction changes nothing. */
Test(data, data_version_moves_with_the_other_handles_commits, .init = setup_open,
     .fini = teardown)
{
	struct idx_stats s;
	struct idx *ro;
	int64_t v0, v1, v2, v3, own0, own1;

	cr_assert_eq(idx_open(dbpath, IDX_RDONLY, 0, 0, 1, &ro), 0);
	cr_assert_eq(idx_data_version(ro, &v0), 0);
	cr_assert_eq(idx_data_version(ro, &v1), 0);
	cr_assert_eq(v1, v0, "nothing committed");
	cr_assert_eq(idx_data_version(ix, &own0), 0);
	cr_assert_eq(idx_begin(ix), 0);
	new_file(IDX_ROOT_INO, "f");
	cr_assert_eq(idx_data_version(ro, &v1), 0);
	cr_assert_eq(v1, v0, "a transaction not committed yet");
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_data_version(ro, &v1), 0);
	cr_assert_neq(v1, v0, "the writer committed");
	cr_assert_eq(idx_stats_get(ro, &s), 0);
	cr_assert_eq(s.files, 1);
	cr_assert_eq(idx_data_version(ix, &own1), 0);
	cr_assert_eq(own1, own0, "a handle's own commits do not move its value");
	cr_assert_eq(idx_begin(ix), 0);
	new_file(IDX_ROOT_INO, "g");
	idx_rollback(ix);
	cr_assert_eq(idx_data_version(ro, &v2), 0);
	cr_assert_eq(v2, v1, "a rollback committed nothing");
	cr_assert_eq(idx_begin_lazy(ix), 0);
	new_file(IDX_ROOT_INO, "h");
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_data_version(ro, &v3), 0);
	cr_assert_neq(v3, v2, "a lazy commit is a commit");
	idx_close(ro);
}

Test(data, stored_bytes_sharing, .init = setup_open, .fini = teardown)
{
	struct idx_extent e1[] = { ext(0, 100, 'A', 100), ext(100, 10, 'B', 10),
				   ext(110, 10, 'B', 10) };
	struct idx_extent e2[] = { ext(0, 100, 'A', 100), ext(100, 10, 'B', 10) };
	struct idx_extent e3[] = { ext(0, 9, 'C', 7) };
	struct idx_extent ex[] = { ext(0, 1000, 'X', 300) };
	uint64_t f1, f2, f3, f4, x[3], b = 12345;

	cr_assert_eq(idx_begin(ix), 0);
	f1 = new_file(IDX_ROOT_INO, "f1");
	f2 = new_file(IDX_ROOT_INO, "f2");
	f3 = new_file(IDX_ROOT_INO, "f3");
	f4 = new_file(IDX_ROOT_INO, "f4");
	set_content(f1, e1, 3, 120, NULL);
	set_content(f2, e2, 2, 110, NULL);
	set_content(f3, e3, 1, 9, NULL);
	/* A: 100 bytes, 2 refs; B: 10 bytes, 3 refs */
	cr_assert_eq(idx_file_stored_bytes(ix, f1, &b), 0);
	cr_assert_eq(b, 57, "50 + 2 * 10 / 3 = 56.67 -> 57, got %lu", (unsigned long)b);
	cr_assert_eq(idx_file_stored_bytes(ix, f2, &b), 0);
	cr_assert_eq(b, 54, "50 + 10 / 3 = 53.33 -> 54, got %lu", (unsigned long)b);
	cr_assert_eq(idx_file_stored_bytes(ix, f3, &b), 0);
	cr_assert_eq(b, 7);
	cr_assert_eq(idx_file_stored_bytes(ix, f4, &b), 0);
	cr_assert_eq(b, 0, "no extents");
	/* thirds that add up exactly do not round up */
	for (int i = 0; i < 3; i++) {
		char name[8];

		snprintf(name, sizeof(name), "x%d", i);
		x[i] = new_file(IDX_ROOT_INO, name);
		set_content(x[i], ex, 1, 1000, NULL);
	}
	cr_assert_eq(idx_file_stored_bytes(ix, x[0], &b), 0);
	cr_assert_eq(b, 100);
	cr_assert_eq(idx_commit(ix), 0);
}

struct snapshot {
	int64_t ra, rb;
	struct idx_inode a;
	size_t n;
};

static void snap(uint64_t f, struct snapshot *s)
{
	struct idx_extent *e;

	s->ra = refs('A');
	s->rb = refs('B');
	cr_assert_eq(idx_inode_get(ix, f, &s->a), 0);
	cr_assert_eq(idx_file_extents(ix, f, &e, &s->n), 0);
	free(e);
}

/* Gaps are holes (invariant 4): the inode becomes sparse, and dense again when they go. */
Test(data, holes_make_a_file_sparse, .init = setup_open, .fini = teardown)
{
	struct idx_extent good[] = { ext(0, 100, 'A', 60), ext(100, 50, 'B', 30) };
	struct idx_extent gap[] = { ext(0, 100, 'A', 60), ext(150, 50, 'B', 30) };
	struct idx_extent late[] = { ext(10, 100, 'A', 60) };
	struct {
		const struct idx_extent *e;
		size_t n;
		uint64_t size;
		bool sparse;
	} cases[] = {
		{ gap, 2, 200, true },  { late, 1, 110, true },	      { good, 2, 151, true },
		{ NULL, 0, 1, true },   { good, 1, 150, true },	      { good, 2, 150, false },
		{ NULL, 0, 0, false },  { NULL, 0, 1ULL << 44, true }, { gap, 2, 1ULL << 44, true },
	};
	struct rel_log log = { .answer = true };
	uint8_t h[IDX_HASH_LEN] = { 0 };
	struct idx_inode a;
	uint64_t f;
	char msg[256];

	cr_assert_eq(idx_begin(ix), 0);
	f = new_file(IDX_ROOT_INO, "f");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cr_assert_eq(idx_file_set_content(ix, f, cases[i].e, cases[i].n, cases[i].size, h,
						  1000, rel_cb, &log),
			     0, "case %zu", i);
		cr_assert_eq(idx_inode_get(ix, f, &a), 0);
		cr_assert_eq(a.size, cases[i].size, "case %zu", i);
		cr_assert_eq((a.flags & IDX_INODE_SPARSE) != 0, cases[i].sparse, "case %zu", i);
		/* an update given other flags keeps the bit set_content chose */
		a.flags = IDX_INODE_VALID | (cases[i].sparse ? 0 : IDX_INODE_SPARSE);
		cr_assert_eq(idx_inode_update(ix, &a), 0);
		cr_assert_eq(idx_inode_get(ix, f, &a), 0);
		cr_assert_eq((a.flags & IDX_INODE_SPARSE) != 0, cases[i].sparse, "case %zu", i);
		cr_assert_eq(a.flags & ~(uint32_t)IDX_INODE_SPARSE, IDX_INODE_VALID);
		cr_assert_eq(idx_check(ix, msg, sizeof(msg)), 0, "case %zu: %s", i, msg);
	}
	cr_assert_eq(idx_commit(ix), 0);
}

/* A chown after the last write and before the commit keeps its ctime: set_content moves mtime to
 * the write time but never moves ctime back (a commit is not a change of attributes). */
Test(data, set_content_keeps_a_later_ctime, .init = setup_open, .fini = teardown)
{
	struct idx_extent e[] = { ext(0, 100, 'A', 60) };
	uint8_t h[IDX_HASH_LEN] = { 0 };
	struct idx_inode a;
	uint64_t f;

	cr_assert_eq(idx_begin(ix), 0);
	f = new_file(IDX_ROOT_INO, "f");
	cr_assert_eq(idx_inode_get(ix, f, &a), 0);
	a.ctime_ns = 5000; /* the chown */
	cr_assert_eq(idx_inode_update(ix, &a), 0);
	cr_assert_eq(idx_file_set_content(ix, f, e, 1, 100, h, 3000, NULL, NULL), 0);
	cr_assert_eq(idx_inode_get(ix, f, &a), 0);
	cr_assert_eq(a.mtime_ns, 3000);
	cr_assert_eq(a.ctime_ns, 5000);
	cr_assert_eq(idx_file_set_content(ix, f, e, 1, 100, h, 7000, NULL, NULL), 0);
	cr_assert_eq(idx_inode_get(ix, f, &a), 0);
	cr_assert_eq(a.mtime_ns, 7000);
	cr_assert_eq(a.ctime_ns, 7000);
	cr_assert_eq(idx_commit(ix), 0);
}

Test(data, invalid_tiling_changes_nothing, .init = setup_open, .fini = teardown)
{
	struct idx_extent good[] = { ext(0, 100, 'A', 60), ext(100, 50, 'B', 30) };
	struct idx_extent gap[] = { ext(0, 100, 'A', 60), ext(150, 50, 'B', 30) };
	struct idx_extent overlap[] = { ext(0, 100, 'A', 60), ext(90, 50, 'B', 30) };
	struct idx_extent late[] = { ext(10, 100, 'A', 60) };
	struct idx_extent zero[] = { ext(0, 100, 'A', 60), ext(100, 0, 'B', 30),
				     ext(100, 50, 'B', 30) };
	struct idx_extent unordered[] = { ext(100, 50, 'B', 30), ext(0, 100, 'A', 60) };
	/* a known chunk with another raw size: caught after the first rows are written */
	struct idx_extent clash[] = { ext(0, 50, 'B', 30), ext(50, 99, 'A', 60) };
	struct {
		const struct idx_extent *e;
		size_t n;
		uint64_t size;
	} bad[] = {
		{ gap, 2, 199 },       { overlap, 2, 140 }, { late, 1, 109 }, { zero, 3, 150 },
		{ unordered, 2, 150 }, { good, 2, 149 },    { clash, 2, 149 },
	};
	struct snapshot before, after;
	struct rel_log log = { .answer = true };
	uint8_t h[IDX_HASH_LEN] = { 0 };
	uint64_t f, d;

	cr_assert_eq(idx_begin(ix), 0);
	f = new_file(IDX_ROOT_INO, "f");
	d = new_inode(IDX_ROOT_INO, "d", S_IFDIR | 0755);
	set_content(f, good, 2, 150, &log);
	snap(f, &before);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(idx_file_set_content(ix, f, bad[i].e, bad[i].n, bad[i].size, h, 1000,
						  rel_cb, &log),
			     -EINVAL, "case %zu", i);
		snap(f, &after);
		cr_assert_eq(memcmp(&before, &after, sizeof(before)), 0, "case %zu changed", i);
	}
	cr_assert_eq(log.n, 0);
	cr_assert_eq(idx_file_set_content(ix, d, good, 2, 150, h, 1, NULL, NULL), -EINVAL);
	cr_assert_eq(idx_file_set_content(ix, 9999, good, 2, 150, h, 1, NULL, NULL), -ENOENT);
	cr_assert_eq(refs('A'), 1);
	assert_check_ok();
	/* the transaction is still usable after the failures */
	cr_assert_eq(idx_commit(ix), 0);
	snap(f, &after);
	cr_assert_eq(memcmp(&before, &after, sizeof(before)), 0);
}

Test(data, rollback_undoes, .init = setup_open, .fini = teardown)
{
	struct idx_extent e[] = { ext(0, 100, 'A', 60) };
	struct idx_extent e2[] = { ext(0, 10, 'B', 6) };
	struct idx_stats s0, s1;
	uint64_t f, g, got;

	cr_assert_eq(idx_begin(ix), 0);
	g = new_file(IDX_ROOT_INO, "kept");
	set_content(g, e, 1, 100, NULL);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_stats_get(ix, &s0), 0);

	cr_assert_eq(idx_begin(ix), 0);
	f = new_file(IDX_ROOT_INO, "gone");
	set_content(f, e, 1, 100, NULL);
	set_content(g, e2, 1, 10, NULL);
	cr_assert_eq(idx_dentry_move(ix, IDX_ROOT_INO, "kept", IDX_ROOT_INO, "moved"), 0);
	cr_assert_eq(refs('A'), 1);
	idx_rollback(ix);
	idx_rollback(ix); /* harmless without a transaction */

	cr_assert_eq(idx_dentry_lookup(ix, IDX_ROOT_INO, "gone", &got), -ENOENT);
	cr_assert_eq(idx_inode_get(ix, f, &(struct idx_inode){ 0 }), -ENOENT);
	cr_assert_eq(idx_dentry_lookup(ix, IDX_ROOT_INO, "kept", &got), 0);
	cr_assert_eq(refs('A'), 1);
	cr_assert_eq(refs('B'), -1);
	cr_assert_eq(idx_stats_get(ix, &s1), 0);
	cr_assert_eq(memcmp(&s0, &s1, sizeof(s0)), 0);
	assert_check_ok();
	/* and the handle still works */
	cr_assert_eq(idx_begin(ix), 0);
	new_file(IDX_ROOT_INO, "after");
	cr_assert_eq(idx_commit(ix), 0);
}
