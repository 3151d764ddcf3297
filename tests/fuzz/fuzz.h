/* SPDX-License-Identifier: MIT */
/*
 * Shared by the fuzz targets of tests/fuzz/: the libFuzzer entry point each defines, and CHECK,
 * which reports a violated property on stderr and abort()s - libFuzzer (scripts/fuzz.sh) then
 * keeps the input as a crasher, and replay.c (meson's unit suite) fails.
 */
#ifndef CKPTFS_TESTS_FUZZ_H
#define CKPTFS_TESTS_FUZZ_H

#include <ftw.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The libFuzzer entry point: run one input of size bytes; always returns 0. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                                \
	do {                                                                                    \
		if (!(x)) {                                                                     \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #x);   \
			abort();                                                                \
		}                                                                               \
	} while (0)

static char fuzz_tmp[4000]; /* fuzz_tmpdir's directory, "" before it is made */

static int fuzz_rm_one(const char *path, const struct stat *sb, int type, struct FTW *f)
{
	remove(path); /* best effort: go on with the rest */
	return 0;
}

/* At exit: remove fuzz_tmpdir's directory and all under it. */
static void fuzz_rm_tmp(void)
{
	if (fuzz_tmp[0])
		nftw(fuzz_tmp, fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/*
 * fuzz_tmpdir - a new directory $TMPDIR/ckptfs-fuzz-NAME-XXXXXX (TMPDIR unset or empty: /tmp),
 * removed with everything in it when the process exits (atexit: libFuzzer's time limit and
 * replay.c both end with exit()). Call once per process; CHECK-fails when it cannot be made.
 * Returns the directory's path, valid for the process's lifetime. Not thread-safe.
 */
static inline const char *fuzz_tmpdir(const char *name)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(fuzz_tmp, sizeof(fuzz_tmp), "%s/ckptfs-fuzz-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp",
		 name);
	CHECK(mkdtemp(fuzz_tmp) != NULL);
	atexit(fuzz_rm_tmp);
	return fuzz_tmp;
}

#endif /* CKPTFS_TESTS_FUZZ_H */
