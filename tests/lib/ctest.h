/*
 * ctest.h — helpers the Criterion unit tests share (STYLE.md: test helpers live once in
 * tests/lib/): a fresh temporary directory per test, removed with everything in it, and raw
 * SQLite access to an index file from outside the index module (to build an old schema or
 * damage one). Header-only: each test executable includes it once; functions are static.
 */
#ifndef CKPTFS_TESTS_CTEST_H
#define CKPTFS_TESTS_CTEST_H

#include <criterion/criterion.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/*
 * CT_INDEX_PARAMETERS - the parameters of a Criterion ParameterizedTest(size_t *ci, suite, name)
 * over a table of n cases: the indices 0..n-1, not the cases, because Criterion re-executes the
 * test binary for each test, and a pointer into this process's static data means nothing in
 * the child (PIE).
 */
#define CT_INDEX_PARAMETERS(suite, name, n)                             \
	ParameterizedTestParameters(suite, name)                        \
	{                                                               \
		static size_t idx[n];                                   \
		for (size_t i = 0; i < (n); i++)                        \
			idx[i] = i;                                     \
		return cr_make_param_array(size_t, idx, (n));           \
	}

#ifdef CTEST_SQLITE
#include <sqlite3.h>
#endif

static __attribute__((unused)) int ct_rm_one(const char *p, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb;
	(void)type;
	(void)ftw;
	return remove(p);
}

/* ct_tmpdir - make a fresh, uniquely named directory under /tmp whose name starts with prefix,
 * its path into buf (cap >= 64 bytes); mkdtemp(3) gives the uniqueness. */
static __attribute__((unused)) void ct_tmpdir(char *buf, size_t cap, const char *prefix)
{
	snprintf(buf, cap, "/tmp/%s-XXXXXX", prefix);
	cr_assert_not_null(mkdtemp(buf), "mkdtemp %s", buf);
}

/* ct_rmtree - remove path and everything under it (symlinks not followed). */
static __attribute__((unused)) void ct_rmtree(const char *path)
{
	nftw(path, ct_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

#ifdef CTEST_SQLITE
/* ct_raw_exec - run sql on the SQLite file at path, outside the index module. */
static __attribute__((unused)) void ct_raw_exec(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	char *err = NULL;

	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &err), SQLITE_OK, "%s: %s", sql,
		     err ? err : "?");
	sqlite3_close(db);
}

/* ct_raw_i64 - the first column of the first row of sql on the SQLite file at path. */
static __attribute__((unused)) int64_t ct_raw_i64(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int64_t v;

	cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sql);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", sql);
	v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}
#endif

#endif /* CKPTFS_TESTS_CTEST_H */
