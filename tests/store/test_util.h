/*
 * test_util.h — helpers shared by the store/ unit tests: deterministic pseudo-random bytes and
 * temporary store directories.
 */
#ifndef CKPTFS_TEST_STORE_UTIL_H
#define CKPTFS_TEST_STORE_UTIL_H

#include <criterion/criterion.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* splitmix64 step (Steele, Lea, Flood, OOPSLA 2014; S. Vigna's splitmix64.c constants). */
static inline uint64_t tu_splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Fill len bytes with the splitmix64 stream of seed. */
static inline void tu_fill_random(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t s = seed;
	size_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		uint64_t v = tu_splitmix64(&s);

		memcpy(p + i, &v, 8);
	}
	if (i < len) {
		uint64_t v = tu_splitmix64(&s);

		memcpy(p + i, &v, len - i);
	}
}

/* malloc that fails the test instead of returning NULL. */
static inline void *tu_malloc(size_t len)
{
	void *p = malloc(len ? len : 1);

	cr_assert_not_null(p, "out of memory allocating %zu bytes", len);
	return p;
}

/* Create a fresh temporary directory; path must hold 64 bytes. */
static inline void tu_mkdtemp(char *path)
{
	strcpy(path, "/tmp/ckptfs-store-test-XXXXXX");
	cr_assert_not_null(mkdtemp(path), "mkdtemp failed");
}

static inline int tu_rm_cb(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb;
	(void)type;
	(void)ftw;
	return remove(path);
}

/* Remove a directory tree made by tu_mkdtemp. */
static inline void tu_rmtree(const char *path)
{
	nftw(path, tu_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

#endif /* CKPTFS_TEST_STORE_UTIL_H */
