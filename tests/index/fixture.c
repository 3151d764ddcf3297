/* fixture.c — see fixture.h. */
#include <criterion/criterion.h>
#include <stdio.h>

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
