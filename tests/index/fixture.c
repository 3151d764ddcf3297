/* fixture.c — see fixture.h. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <sys/stat.h>

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
