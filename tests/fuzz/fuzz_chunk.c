/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the on-disk chunk reader (store/chunkfile.c, store/chunkcache.c,
 * store/codec.c): the input
 * is written as the chunk file of the digest its own header names (bytes 16..31), in a store
 * made once per process under $TMPDIR, then read back with store_chunk_verify() and
 * store_chunk_pread() (header checks, zstd and byte-group decoding, digest check). The same
 * bytes also go straight to store_decode() with the codec and raw size of the first 5 bytes.
 * Checks the documented contract: verify returns 0, -EBADMSG or -EIO; pread returns what verify
 * promised (bytes only from a sound chunk, and then the same bytes twice); decode 0, -EINVAL or
 * -EIO; nothing reads or writes out of bounds (AddressSanitizer).
 * Fuzzed by scripts/fuzz.sh; corpus/chunk/ (real chunk files of each codec) is replayed by
 * meson's unit suite (replay.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store.h"
#include "tests/fuzz/fuzz.h"

static struct store *st;

static void cleanup(void)
{
	store_close(st);
}

static struct store *the_store(void)
{
	if (st)
		return st;
	CHECK(store_open(fuzz_tmpdir("chunk"), NULL, &st) == 0);
	atexit(cleanup); /* runs before fuzz_tmpdir's removal (atexit order is reversed) */
	return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct store *s = the_store();
	struct store_hash h = { { 0 } };
	char path[4096];

	/* 1. store_decode on the raw bytes: codec, raw size (le24), payload */
	if (size >= 4) {
		uint8_t codec = data[0] & 7;
		size_t raw = (size_t)data[1] | (size_t)data[2] << 8 | (size_t)(data[3] & 0x3f) << 16;
		uint8_t *out = malloc(raw ? raw : 1);

		if (out) {
			int rc = store_decode(codec, data + 4, size - 4, out, raw);

			CHECK(rc == 0 || rc == -EINVAL || rc == -EIO || rc == -ENOMEM);
			CHECK(rc != -EINVAL || codec > STORE_CODEC_MAX);
			free(out);
		}
	}

	/* 2. the whole input as the chunk file of the digest in its header */
	if (size >= 32)
		memcpy(h.b, data + 16, STORE_HASH_LEN);
	CHECK(store_chunk_path(s, &h, path, sizeof(path)) == 0);
	char *slash = strrchr(path, '/');
	*slash = '\0';
	(void)mkdir(path, 0700);
	*slash = '/';
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	CHECK(write(fd, data, size) == (ssize_t)size);
	CHECK(close(fd) == 0);

	int v = store_chunk_verify(s, &h);
	CHECK(v == 0 || v == -EBADMSG || v == -EIO || v == -ENOMEM);
	static uint8_t a[STORE_CHUNK_MAX], b[STORE_CHUNK_MAX];
	ssize_t n1 = store_chunk_pread(s, &h, a, sizeof(a), 0);
	if (v == 0) {
		CHECK(n1 >= 0);
		ssize_t n2 = store_chunk_pread(s, &h, b, sizeof(b), 0);
		CHECK(n2 == n1 && memcmp(a, b, (size_t)n1) == 0);
		struct store_hash again;
		store_hash_buf(a, (size_t)n1, &again);
		CHECK(memcmp(again.b, h.b, STORE_HASH_LEN) == 0);
	} else {
		CHECK(n1 < 0);
	}
	/* the cache must not keep a chunk once its file is gone */
	CHECK(store_chunk_delete(s, &h) == 0);
	CHECK(store_chunk_pread(s, &h, a, 1, 0) == -ENOENT);
	return 0;
}
