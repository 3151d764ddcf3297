/*
 * chunkstore_fixture.h — what the chunk store's unit tests share (test_chunkstore.c,
 * test_chunkcache.c): a fresh store directory per test (setup, teardown: each file's
 * TestSuite), a store opened on it, a put that must succeed, a chunk read back in pieces, and a
 * byte of a chunk file flipped on disk. Criterion runs each test in its own process.
 */
#ifndef CKPTFS_TEST_STORE_CHUNKSTORE_FIXTURE_H
#define CKPTFS_TEST_STORE_CHUNKSTORE_FIXTURE_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store.h"
#include "test_util.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

static char root[64]; /* this test's store directory (setup) */

static inline void setup(void)
{
	tu_mkdtemp(root);
}

static inline void teardown(void)
{
	tu_rmtree(root);
}

static inline struct store *open_store(size_t cache_bytes, bool ro)
{
	struct store_opts o = { .cache_bytes = cache_bytes, .read_only = ro };
	struct store *st = NULL;
	int err = store_open(root, &o, &st);

	cr_assert_eq(err, 0, "store_open: %d", err);
	cr_assert_not_null(st);
	return st;
}

static inline struct store_hash put_ok(struct store *st, const void *buf, size_t len, bool existed)
{
	struct store_chunk_info info;
	int err = store_chunk_put(st, buf, len, &info);

	cr_assert_eq(err, 0, "put %zu bytes: %d", len, err);
	cr_assert_eq(info.existed, existed);
	cr_assert_eq(info.raw_size, len);
	return info.hash;
}

/* Read the whole chunk back (in pieces) and compare with want. */
static inline void check_chunk(struct store *st, const struct store_hash *h, const uint8_t *want,
			size_t len)
{
	uint8_t *got = tu_malloc(len + 100);
	size_t off = 0, step = 777;
	ssize_t r;

	while (off < len) {
		r = store_chunk_pread(st, h, got + off, step, off);
		cr_assert_gt(r, 0, "pread at %zu: %zd", off, r);
		off += (size_t)r;
		step = step * 5;
	}
	cr_assert_eq(memcmp(got, want, len), 0);
	cr_assert_eq(store_chunk_pread(st, h, got, 100, len), 0);
	cr_assert_eq(store_chunk_pread(st, h, got, 100, len + 5000), 0);
	cr_assert_eq(store_chunk_pread(st, h, got, len + 100, 0), (ssize_t)len);
	free(got);
}

static inline void flip_byte(const struct store *st, const struct store_hash *h, off_t off)
{
	char path[512];
	uint8_t b;
	int fd;

	cr_assert_eq(store_chunk_path(st, h, path, sizeof(path)), 0);
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &b, 1, off), 1);
	b ^= 0x40;
	cr_assert_eq(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

#endif
