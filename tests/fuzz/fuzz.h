/* SPDX-License-Identifier: MIT */
/*
 * Shared by the fuzz targets of tests/fuzz/: the libFuzzer entry point each defines, and CHECK,
 * which reports a violated property on stderr and abort()s - libFuzzer (scripts/fuzz.sh) then
 * keeps the input as a crasher, and replay.c (meson's unit suite) fails.
 */
#ifndef CKPTFS_TESTS_FUZZ_H
#define CKPTFS_TESTS_FUZZ_H

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

#endif /* CKPTFS_TESTS_FUZZ_H */
