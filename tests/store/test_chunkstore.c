/*
 * test_chunkstore.c — the chunk directory: put/pread, dedup, stat, delete, foreach, corruption
 * detection, temporary-file sweep, read-only mode, ENOSPC, concurrency and the read cache.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "store/store.h"
#include "store/store_int.h"
#include "test_util.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

static char root[64];

static void setup(void)
{
	tu_mkdtemp(root);
}

static void teardown(void)
{
	tu_rmtree(root);
}

TestSuite(chunkstore, .init = setup, .fini = teardown);

static struct store *open_store(size_t cache_bytes, bool ro)
{
	struct store_opts o = { .cache_bytes = cache_bytes, .read_only = ro };
	struct store *st = NULL;
	int err = store_open(root, &o, &st);

	cr_assert_eq(err, 0, "store_open: %d", err);
	cr_assert_not_null(st);
	return st;
}

static struct store_hash put_ok(struct store *st, const void *buf, size_t len, bool existed)
{
	struct store_chunk_info info;
	int err = store_chunk_put(st, buf, len, &info);

	cr_assert_eq(err, 0, "put %zu bytes: %d", len, err);
	cr_assert_eq(info.existed, existed);
	cr_assert_eq(info.raw_size, len);
	return info.hash;
}

/* Read the whole chunk back (in pieces) and compare with want. */
static void check_chunk(struct store *st, const struct store_hash *h, const uint8_t *want,
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

/*
 * Number of entries in the shard directories root/chunks/XX/ whose names start with prefix, or,
 * for "", that do not start with a dot (chunk files and strangers, not temporary files).
 */
static int count_in_shards(const char *prefix)
{
	char path[256];
	int n = 0, s;

	for (s = 0; s < 256; s++) {
		DIR *d;
		struct dirent *de;

		snprintf(path, sizeof(path), "%s/chunks/%02x", root, s);
		d = opendir(path);
		if (!d)
			continue;
		while ((de = readdir(d))) {
			if (!*prefix ? de->d_name[0] != '.'
				     : !strncmp(de->d_name, prefix, strlen(prefix)))
				n++;
		}
		closedir(d);
	}
	return n;
}

static void flip_byte(const struct store *st, const struct store_hash *h, off_t off)
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

Test(chunkstore, layout_put_pread_stat)
{
	struct store *st = open_store(0, false);
	size_t len = 300 * KiB;
	uint8_t *buf = tu_malloc(len);
	struct store_chunk_info info, sinfo;
	struct store_hash h;
	char path[512], hex[33];
	struct stat sb;

	cr_assert_eq(stat(root, &sb), 0);
	cr_assert_eq(sb.st_mode & 0777, 0700);
	snprintf(path, sizeof(path), "%s/chunks/ff", root);
	cr_assert_eq(stat(path, &sb), 0);
	cr_assert_eq(sb.st_mode & 0777, 0700);

	tu_fill_random(buf, len, 1);
	cr_assert_eq(store_chunk_put(st, buf, len, &info), 0);
	cr_assert_eq(info.existed, false);
	cr_assert_eq(info.codec, STORE_CODEC_RAW);
	cr_assert_eq(info.stored_size, len + 32);
	store_hash_buf(buf, len, &h);
	cr_assert_eq(memcmp(&h, &info.hash, sizeof(h)), 0);
	check_chunk(st, &h, buf, len);

	cr_assert_eq(store_chunk_path(st, &h, path, sizeof(path)), 0);
	cr_assert(strstr(path, store_hash_hex(&h, hex)));
	cr_assert_eq(stat(path, &sb), 0);
	cr_assert_eq((uint64_t)sb.st_size, info.stored_size);
	cr_assert_eq(store_chunk_path(st, &h, path, 10), -ENAMETOOLONG);

	cr_assert_eq(store_chunk_stat(st, &h, &sinfo), 0);
	cr_assert_eq(memcmp(&sinfo.hash, &h, sizeof(h)), 0);
	cr_assert_eq(sinfo.raw_size, len);
	cr_assert_eq(sinfo.stored_size, info.stored_size);
	cr_assert_eq(sinfo.codec, info.codec);
	cr_assert(sinfo.existed);
	cr_assert_eq(store_chunk_verify(st, &h), 0);
	cr_assert_eq(store_sync(st), 0);

	/* A compressible chunk, read back through a fresh handle (cold cache). */
	memset(buf, 'x', len);
	h = put_ok(st, buf, len, false);
	cr_assert_eq(store_chunk_stat(st, &h, &sinfo), 0);
	cr_assert_eq(sinfo.codec, STORE_CODEC_ZSTD);
	cr_assert_lt(sinfo.stored_size, 1000);
	store_close(st);
	st = open_store(0, false);
	check_chunk(st, &h, buf, len);
	cr_assert_eq(store_chunk_verify(st, &h), 0);

	/* Bad lengths. */
	cr_assert_eq(store_chunk_put(st, buf, 0, &info), -EINVAL);
	cr_assert_eq(store_chunk_put(st, buf, STORE_CHUNK_MAX + 1, &info), -EINVAL);
	store_close(st);
	store_close(NULL);
	free(buf);
}

/* store_chunk_put_hashed stores under the digest given: the right one gives the same chunk as
 * store_chunk_put; a wrong one is caught by every read of that name, never returned as data. */
Test(chunkstore, put_hashed)
{
	struct store *st = open_store(0, false);
	size_t len = 200 * KiB;
	uint8_t *buf = tu_malloc(len), *out = tu_malloc(len);
	struct store_chunk_info info;
	struct store_hash h, wrong;

	tu_fill_random(buf, len, 7);
	store_hash_buf(buf, len, &h);
	cr_assert_eq(store_chunk_put_hashed(st, buf, len, &h, 0, &info), 0);
	cr_assert_not(info.existed);
	cr_assert_eq(memcmp(&info.hash, &h, sizeof(h)), 0);
	check_chunk(st, &h, buf, len);
	cr_assert_eq(store_chunk_put(st, buf, len, &info), 0);
	cr_assert(info.existed, "the same bytes by store_chunk_put are a dedup hit");

	wrong = h;
	wrong.b[0] ^= 1;
	buf[0] ^= 1; /* other bytes than those h names */
	cr_assert_eq(store_chunk_put_hashed(st, buf, len, &wrong, 0, &info), 0);
	cr_assert_eq(store_chunk_pread(st, &wrong, out, len, 0), -EBADMSG);
	cr_assert_eq(store_chunk_verify(st, &wrong), -EBADMSG);
	cr_assert_eq(store_chunk_put_hashed(st, buf, 0, &h, 0, &info), -EINVAL);
	store_close(st);
	free(buf);
	free(out);
}

/* No file but final names in chunks/XX: no temporary or free file left behind. */
static void assert_shard_clean(const struct store *st, const struct store_hash *h)
{
	char path[512];
	DIR *d;
	struct dirent *e;

	cr_assert_eq(store_chunk_path(st, h, path, sizeof(path)), 0);
	*strrchr(path, '/') = '\0';
	cr_assert_not_null(d = opendir(path));
	while ((e = readdir(d)))
		cr_assert_neq(e->d_name[0] == '.' && e->d_name[1] && e->d_name[1] != '.', true,
			      "left behind: %s/%s", path, e->d_name);
	closedir(d);
}

static ino_t chunk_ino(const struct store *st, const struct store_hash *h)
{
	char path[512];
	struct stat sb;

	cr_assert_eq(store_chunk_path(st, h, path, sizeof(path)), 0);
	cr_assert_eq(stat(path, &sb), 0);
	return sb.st_ino;
}

/* A deferred put stores the raw bytes at once; store_chunk_recode compresses them in place
 * later, keeps them readable throughout, and leaves a chunk deleted meanwhile deleted. */
Test(chunkstore, deferred_put_and_recode)
{
	struct store *st = open_store(0, false);
	size_t len = 512 * KiB;
	uint8_t *buf = tu_malloc(len), *noise = tu_malloc(len);
	struct store_chunk_info info;
	struct store_hash h, hn;
	char path[512];
	ino_t ino;

	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(i % 251 < 200 ? 'a' : i);
	store_hash_buf(buf, len, &h);
	cr_assert_eq(store_chunk_put_hashed(st, buf, len, &h, STORE_PUT_DEFER, &info), 0);
	cr_assert_eq(info.codec, STORE_CODEC_DEFERRED);
	cr_assert_eq(info.stored_size, len + STORE_HDR_LEN);
	check_chunk(st, &h, buf, len);
	cr_assert_eq(store_chunk_verify(st, &h), 0);
	/* a second put of the same bytes, not deferred, is a dedup hit: nothing changes */
	cr_assert_eq(store_chunk_put(st, buf, len, &info), 0);
	cr_assert(info.existed);
	cr_assert_eq(info.codec, STORE_CODEC_DEFERRED);

	ino = chunk_ino(st, &h);
	cr_assert_eq(store_chunk_recode(st, &h, &info), 0);
	cr_assert_eq(info.codec, STORE_CODEC_ZSTD);
	cr_assert_lt(info.stored_size, len / 4);
	cr_assert_neq(chunk_ino(st, &h), ino, "a new file was swapped in");
	assert_shard_clean(st, &h);
	store_close(st);
	st = open_store(0, false); /* cold cache: read from the new file */
	check_chunk(st, &h, buf, len);
	cr_assert_eq(store_chunk_stat(st, &h, &info), 0);
	cr_assert_eq(info.codec, STORE_CODEC_ZSTD);
	/* not deferred (any more): nothing is written */
	ino = chunk_ino(st, &h);
	cr_assert_eq(store_chunk_recode(st, &h, &info), 0);
	cr_assert_eq(info.codec, STORE_CODEC_ZSTD);
	cr_assert_eq(chunk_ino(st, &h), ino);

	/* incompressible: stored RAW at once, for good; the recode writes nothing */
	tu_fill_random(noise, len, 3);
	store_hash_buf(noise, len, &hn);
	cr_assert_eq(store_chunk_put_hashed(st, noise, len, &hn, STORE_PUT_DEFER, &info), 0);
	cr_assert_eq(info.codec, STORE_CODEC_RAW);
	cr_assert_eq(info.stored_size, len + STORE_HDR_LEN);
	ino = chunk_ino(st, &hn);
	cr_assert_eq(store_chunk_recode(st, &hn, &info), 0);
	cr_assert_eq(info.codec, STORE_CODEC_RAW);
	cr_assert_eq(chunk_ino(st, &hn), ino, "nothing was rewritten");
	check_chunk(st, &hn, noise, len);
	cr_assert_eq(store_chunk_delete(st, &hn), 0);

	/* deleted before the recode: stays deleted (compressible bytes, so deferred) */
	for (size_t i = 0; i < len; i++)
		noise[i] = (uint8_t)(i % 241 < 200 ? 'b' : i);
	store_hash_buf(noise, len, &hn);
	cr_assert_eq(store_chunk_put_hashed(st, noise, len, &hn, STORE_PUT_DEFER, &info), 0);
	cr_assert_eq(info.codec, STORE_CODEC_DEFERRED);
	cr_assert_eq(store_chunk_delete(st, &hn), 0);
	cr_assert_eq(store_chunk_recode(st, &hn, &info), -ENOENT);
	cr_assert_eq(store_chunk_path(st, &hn, path, sizeof(path)), 0);
	cr_assert_eq(access(path, F_OK), -1);

	/* damaged on disk: refused, left as it is */
	cr_assert_eq(store_chunk_put_hashed(st, noise, len, &hn, STORE_PUT_DEFER, &info), 0);
	int fd = open(path, O_WRONLY);

	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, "X", 1, STORE_HDR_LEN + 100), 1);
	close(fd);
	ino = chunk_ino(st, &hn);
	cr_assert_eq(store_chunk_recode(st, &hn, &info), -EBADMSG);
	cr_assert_eq(chunk_ino(st, &hn), ino);
	cr_assert_eq(store_chunk_stat(st, &hn, &info), 0);
	cr_assert_eq(info.codec, STORE_CODEC_DEFERRED);
	cr_assert_eq(store_chunk_recode(st, &h, &info), 0);
	store_close(st);
	st = open_store(0, true);
	cr_assert_eq(store_chunk_recode(st, &h, &info), -EROFS);
	store_close(st);
	free(buf);
	free(noise);
}

Test(chunkstore, max_size_chunk)
{
	struct store *st = open_store(0, false);
	uint8_t *buf = tu_malloc(STORE_CHUNK_MAX);
	struct store_hash h;

	tu_fill_random(buf, STORE_CHUNK_MAX, 2);
	memset(buf, 0, STORE_CHUNK_MAX / 2);
	h = put_ok(st, buf, STORE_CHUNK_MAX, false);
	check_chunk(st, &h, buf, STORE_CHUNK_MAX);
	store_close(st);
	free(buf);
}

Test(chunkstore, dedup)
{
	struct store *st = open_store(0, false);
	size_t len = 100 * KiB;
	uint8_t *buf = tu_malloc(len);
	struct store_chunk_info a, b;

	tu_fill_random(buf, len, 3);
	cr_assert_eq(store_chunk_put(st, buf, len, &a), 0);
	cr_assert_eq(a.existed, false);
	cr_assert_eq(store_chunk_put(st, buf, len, &b), 0);
	cr_assert_eq(b.existed, true);
	cr_assert_eq(memcmp(&a.hash, &b.hash, sizeof(a.hash)), 0);
	cr_assert_eq(a.stored_size, b.stored_size);
	cr_assert_eq(a.codec, b.codec);
	cr_assert_eq(a.raw_size, b.raw_size);
	cr_assert_eq(count_in_shards(""), 1);
	cr_assert_eq(count_in_shards(".tmp-"), 0);
	store_close(st);

	/* The same with verify_dedup_hits: the bytes compare equal. */
	{
		struct store_opts o = { .verify_dedup_hits = true };

		cr_assert_eq(store_open(root, &o, &st), 0);
		cr_assert_eq(store_chunk_put(st, buf, len, &b), 0);
		cr_assert_eq(b.existed, true);
		store_close(st);
	}
	cr_assert_eq(count_in_shards(""), 1);
	free(buf);
}

Test(chunkstore, damaged_copy_is_replaced_by_put)
{
	struct store_opts o = { .verify_dedup_hits = true };
	struct store *st;
	size_t len = 100 * KiB;
	uint8_t *buf = tu_malloc(len);
	struct store_chunk_info info;
	struct store_hash h;
	char path[512];

	cr_assert_eq(store_open(root, &o, &st), 0);
	tu_fill_random(buf, len, 4);
	h = put_ok(st, buf, len, false);

	/* A payload byte flipped: the header is fine, only verify_dedup_hits notices. */
	flip_byte(st, &h, 32 + 5000);
	cr_assert_eq(store_chunk_put(st, buf, len, &info), 0);
	cr_assert_eq(info.existed, false, "damaged copy kept");
	cr_assert_eq(store_chunk_verify(st, &h), 0);

	/* A truncated file: even a plain put rewrites it. */
	store_close(st);
	st = open_store(0, false);
	cr_assert_eq(store_chunk_path(st, &h, path, sizeof(path)), 0);
	cr_assert_eq(truncate(path, 20), 0);
	cr_assert_eq(store_chunk_put(st, buf, len, &info), 0);
	cr_assert_eq(info.existed, false);
	check_chunk(st, &h, buf, len);
	store_close(st);
	free(buf);
}

/* Size in bytes of the first entry of the shard directories whose name starts with prefix, and
 * its inode number in *ret_ino; -1 when there is none. */
static off_t first_in_shards(const char *prefix, ino_t *ret_ino)
{
	char path[512];

	for (int s = 0; s < 256; s++) {
		DIR *d;
		struct dirent *de;
		struct stat sb;

		snprintf(path, sizeof(path), "%s/chunks/%02x", root, s);
		if (!(d = opendir(path)))
			continue;
		while ((de = readdir(d))) {
			if (strncmp(de->d_name, prefix, strlen(prefix)))
				continue;
			snprintf(path, sizeof(path), "%s/chunks/%02x/%s", root, s, de->d_name);
			closedir(d);
			cr_assert_eq(stat(path, &sb), 0);
			*ret_ino = sb.st_ino;
			return sb.st_size;
		}
		closedir(d);
	}
	return -1;
}

/*
 * A deleted chunk's file becomes an empty free file (chunkstore.c invariant 10) that the next
 * put writes into under its own name, so no inode is freed and allocated; store_open sweeps
 * free files left over.
 */
Test(chunkstore, deleted_files_are_reused)
{
	struct store *st = open_store(0, false);
	size_t len = 300 * KiB;
	uint8_t *a = tu_malloc(len), *b = tu_malloc(len);
	struct store_hash ha, hb;
	char path[512];
	struct stat sb;
	ino_t ino, free_ino;

	tu_fill_random(a, len, 31);
	tu_fill_random(b, len, 32);
	ha = put_ok(st, a, len, false);
	cr_assert_eq(store_chunk_path(st, &ha, path, sizeof(path)), 0);
	cr_assert_eq(stat(path, &sb), 0);
	ino = sb.st_ino;
	cr_assert_eq(store_chunk_delete(st, &ha), 0);
	cr_assert_eq(count_in_shards(""), 0);
	cr_assert_eq(first_in_shards(".free-", &free_ino), 0, "the free file is not empty");
	cr_assert_eq(free_ino, ino);
	hb = put_ok(st, b, len, false);
	cr_assert_eq(count_in_shards(".free-"), 0);
	cr_assert_eq(store_chunk_path(st, &hb, path, sizeof(path)), 0);
	cr_assert_eq(stat(path, &sb), 0);
	cr_assert_eq(sb.st_ino, ino, "the put did not reuse the deleted chunk's file");
	check_chunk(st, &hb, b, len);
	/* a was deleted, and its bytes are gone with it */
	cr_assert_eq(store_chunk_verify(st, &ha), -ENOENT);
	cr_assert_eq(store_sync(st), 0);
	/* a free file left at close is swept by the next open */
	cr_assert_eq(store_chunk_delete(st, &hb), 0);
	cr_assert_eq(count_in_shards(".free-"), 1);
	store_close(st);
	st = open_store(0, false);
	cr_assert_eq(count_in_shards(".free-"), 0);
	cr_assert_eq(count_in_shards(""), 0);
	put_ok(st, a, len, false);
	check_chunk(st, &ha, a, len);
	store_close(st);
	free(a);
	free(b);
}

Test(chunkstore, delete)
{
	struct store *st = open_store(0, false);
	size_t len = 10 * KiB;
	uint8_t *buf = tu_malloc(len);
	struct store_chunk_info info;
	struct store_hash h;
	uint8_t tmp[16];

	tu_fill_random(buf, len, 5);
	h = put_ok(st, buf, len, false);
	check_chunk(st, &h, buf, len); /* now cached */
	cr_assert_eq(store_chunk_delete(st, &h), 0);
	cr_assert_eq(store_chunk_pread(st, &h, tmp, sizeof(tmp), 0), -ENOENT,
		     "served after delete");
	cr_assert_eq(store_chunk_stat(st, &h, &info), -ENOENT);
	cr_assert_eq(store_chunk_verify(st, &h), -ENOENT);
	cr_assert_eq(store_chunk_delete(st, &h), -ENOENT);
	cr_assert_eq(count_in_shards(""), 0);
	put_ok(st, buf, len, false);
	check_chunk(st, &h, buf, len);
	cr_assert_eq(store_sync(st), 0);
	store_close(st);
	free(buf);
}

struct walk {
	struct store_hash seen[64];
	uint64_t sizes[64];
	int n;
	int stop_after;
};

static int walk_fn(const struct store_hash *h, uint64_t stored_size, void *arg)
{
	struct walk *w = arg;

	cr_assert_lt(w->n, 64);
	w->seen[w->n] = *h;
	w->sizes[w->n] = stored_size;
	w->n++;
	return w->n == w->stop_after ? 7 : 0;
}

Test(chunkstore, foreach)
{
	struct store *st = open_store(0, false);
	struct store_hash hs[20];
	uint64_t sizes[20];
	struct walk w = { .n = 0 };
	struct store_chunk_info info;
	uint8_t buf[3000];
	char path[512];
	int i, j, fd;

	for (i = 0; i < 20; i++) {
		tu_fill_random(buf, sizeof(buf), 100 + (uint64_t)i);
		if (i % 2)
			memset(buf, 0, 2000);
		cr_assert_eq(store_chunk_put(st, buf, sizeof(buf) - (size_t)i, &info), 0);
		hs[i] = info.hash;
		sizes[i] = info.stored_size;
	}
	/* A stranger in a shard directory is skipped. */
	snprintf(path, sizeof(path), "%s/chunks/%02x/notes.txt", root, hs[0].b[0]);
	fd = open(path, O_CREAT | O_WRONLY, 0600);
	cr_assert_geq(fd, 0);
	close(fd);

	cr_assert_eq(store_chunk_foreach(st, walk_fn, &w), 0);
	cr_assert_eq(w.n, 20);
	for (i = 0; i < 20; i++) {
		for (j = 0; j < w.n; j++)
			if (!memcmp(&w.seen[j], &hs[i], sizeof(hs[i])))
				break;
		cr_assert_lt(j, w.n, "chunk %d not walked", i);
		cr_assert_eq(w.sizes[j], sizes[i]);
	}
	w.n = 0;
	w.stop_after = 5;
	cr_assert_eq(store_chunk_foreach(st, walk_fn, &w), 7);
	cr_assert_eq(w.n, 5);
	store_close(st);
}

Test(chunkstore, tampering_is_detected)
{
	struct store *st = open_store(0, false);
	size_t len = 200 * KiB;
	uint8_t *rnd = tu_malloc(len);
	uint8_t *txt = tu_malloc(len);
	struct store_chunk_info info;
	struct store_hash hr, ht, missing;
	char path[512];
	uint8_t tmp[64];
	size_t i;

	tu_fill_random(rnd, len, 6);
	for (i = 0; i < len; i++)
		txt[i] = (uint8_t)("checkpoint"[i % 10] + (i / 4096) % 3);
	hr = put_ok(st, rnd, len, false);
	ht = put_ok(st, txt, len, false);
	cr_assert_eq(store_chunk_stat(st, &ht, &info), 0);
	cr_assert_neq(info.codec, STORE_CODEC_RAW);
	/* Cache both in this handle: a later pread here is served from verified memory. */
	check_chunk(st, &hr, rnd, len);

	flip_byte(st, &hr, 32 + 1234);
	flip_byte(st, &ht, 32 + info.stored_size / 2 - 16);
	cr_assert_eq(store_chunk_pread(st, &hr, tmp, sizeof(tmp), 1200), (ssize_t)sizeof(tmp));
	cr_assert_eq(memcmp(tmp, rnd + 1200, sizeof(tmp)), 0);
	cr_assert_eq(store_chunk_verify(st, &hr), -EBADMSG, "verify must bypass the cache");
	store_close(st);

	st = open_store(0, false);
	cr_assert_eq(store_chunk_pread(st, &hr, tmp, sizeof(tmp), 0), -EBADMSG);
	cr_assert_eq(store_chunk_pread(st, &ht, tmp, sizeof(tmp), 0), -EBADMSG);
	cr_assert_eq(store_chunk_verify(st, &hr), -EBADMSG);
	cr_assert_eq(store_chunk_verify(st, &ht), -EBADMSG);
	/* The header still reads fine: stat does not read the payload. */
	cr_assert_eq(store_chunk_stat(st, &hr, &info), 0);

	/* Truncated file. */
	cr_assert_eq(store_chunk_path(st, &hr, path, sizeof(path)), 0);
	cr_assert_eq(truncate(path, 32 + len / 2), 0);
	{
		ssize_t r = store_chunk_pread(st, &hr, tmp, sizeof(tmp), 0);

		cr_assert(r == -EIO || r == -EBADMSG, "truncated chunk: %zd", r);
	}
	cr_assert_eq(store_chunk_stat(st, &hr, &info), -EIO);
	cr_assert_eq(truncate(path, 7), 0);
	cr_assert_eq(store_chunk_pread(st, &hr, tmp, sizeof(tmp), 0), -EIO);
	cr_assert_eq(store_chunk_stat(st, &hr, &info), -EIO);

	/* Garbled header: bad magic, then a digest that is not the file's name. */
	cr_assert_eq(store_chunk_path(st, &ht, path, sizeof(path)), 0);
	flip_byte(st, &ht, 0);
	cr_assert_eq(store_chunk_stat(st, &ht, &info), -EIO);
	cr_assert_eq(store_chunk_pread(st, &ht, tmp, sizeof(tmp), 0), -EIO);
	flip_byte(st, &ht, 0);
	flip_byte(st, &ht, 20);
	cr_assert_eq(store_chunk_stat(st, &ht, &info), -EIO);
	flip_byte(st, &ht, 20);
	cr_assert_eq(store_chunk_stat(st, &ht, &info), 0);

	/* Missing file. */
	store_hash_buf("not stored", 10, &missing);
	cr_assert_eq(store_chunk_pread(st, &missing, tmp, sizeof(tmp), 0), -ENOENT);
	cr_assert_eq(store_chunk_stat(st, &missing, &info), -ENOENT);
	cr_assert_eq(store_chunk_verify(st, &missing), -ENOENT);
	store_close(st);
	free(rnd);
	free(txt);
}

Test(chunkstore, temp_files_are_swept_on_open)
{
	struct store *st = open_store(0, false);
	char path[512];
	int fd, i;

	store_close(st);
	for (i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/chunks/%02x/.tmp-abc%d", root, i * 70, i);
		fd = open(path, O_CREAT | O_WRONLY, 0600);
		cr_assert_geq(fd, 0);
		cr_assert_eq(write(fd, "partial", 7), 7);
		close(fd);
	}
	snprintf(path, sizeof(path), "%s/chunks/00/keep-me", root);
	fd = open(path, O_CREAT | O_WRONLY, 0600);
	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert_eq(count_in_shards(".tmp-"), 3);

	/* read_only leaves them alone. */
	st = open_store(0, true);
	store_close(st);
	cr_assert_eq(count_in_shards(".tmp-"), 3);

	st = open_store(0, false);
	cr_assert_eq(count_in_shards(".tmp-"), 0);
	cr_assert_eq(access(path, F_OK), 0, "a non-temporary file was removed");
	store_close(st);
}

Test(chunkstore, read_only)
{
	struct store_opts ro = { .read_only = true };
	struct store *st = NULL;
	char missing[128];
	uint8_t buf[5000], tmp[100];
	struct store_chunk_info info;
	struct store_hash h;
	struct stat sb;

	snprintf(missing, sizeof(missing), "%s/nothing-here", root);
	cr_assert_eq(store_open(missing, &ro, &st), -ENOENT);
	cr_assert_null(st);
	cr_assert_neq(stat(missing, &sb), 0, "read_only open created the root");

	st = open_store(0, false);
	tu_fill_random(buf, sizeof(buf), 8);
	h = put_ok(st, buf, sizeof(buf), false);
	store_close(st);

	st = open_store(0, true);
	cr_assert_eq(store_chunk_put(st, buf, sizeof(buf), &info), -EROFS);
	cr_assert_eq(store_chunk_put(st, buf + 1, 100, &info), -EROFS);
	cr_assert_eq(store_chunk_delete(st, &h), -EROFS);
	cr_assert_eq(store_chunk_pread(st, &h, tmp, sizeof(tmp), 10), (ssize_t)sizeof(tmp));
	cr_assert_eq(memcmp(tmp, buf + 10, sizeof(tmp)), 0);
	cr_assert_eq(store_chunk_verify(st, &h), 0);
	cr_assert_eq(store_sync(st), 0);
	store_close(st);
	cr_assert_eq(count_in_shards(""), 1);
}

Test(chunkstore, enospc_leaves_nothing_behind)
{
	struct store *st = open_store(0, false);
	size_t len = 50 * KiB;
	uint8_t *buf = tu_malloc(len);
	struct store_chunk_info info;
	struct store_hash h;
	uint8_t tmp[10];

	tu_fill_random(buf, len, 9);
	store_hash_buf(buf, len, &h);
	atomic_store(&store_fault_write_errno, ENOSPC);
	cr_assert_eq(store_chunk_put(st, buf, len, &info), -ENOSPC);
	cr_assert_eq(count_in_shards(".tmp-"), 0, "temporary file left behind");
	cr_assert_eq(count_in_shards(""), 0);
	cr_assert_eq(store_chunk_pread(st, &h, tmp, sizeof(tmp), 0), -ENOENT);
	atomic_store(&store_fault_write_errno, EIO);
	cr_assert_eq(store_chunk_put(st, buf, len, &info), -EIO);
	cr_assert_eq(count_in_shards(".tmp-"), 0);
	/* The fault is one-shot: the next put succeeds. */
	put_ok(st, buf, len, false);
	check_chunk(st, &h, buf, len);
	store_close(st);
	free(buf);
}

/* ---- concurrency ---- */

#define NTHREADS 4
#define NCHUNKS 48

struct conc {
	struct store *st;
	uint8_t *data[NCHUNKS];
	size_t len[NCHUNKS];
	struct store_hash h[NCHUNKS];
	atomic_int failures;
};

struct conc_arg {
	struct conc *c;
	int tid;
};

/* Each thread puts every chunk (same digests from 4 threads) in its own order, then reads. */
static void *conc_worker(void *p)
{
	struct conc_arg *a = p;
	struct conc *c = a->c;
	uint8_t *tmp = malloc(STORE_CHUNK_MAX);
	uint64_t s = 1000 + (uint64_t)a->tid;
	int i, round;

	if (!tmp) {
		atomic_fetch_add(&c->failures, 1);
		return NULL;
	}
	for (i = 0; i < NCHUNKS; i++) {
		int k = (i * 7 + a->tid * 13) % NCHUNKS;
		struct store_chunk_info info;

		if (store_chunk_put(c->st, c->data[k], c->len[k], &info) ||
		    memcmp(&info.hash, &c->h[k], sizeof(info.hash)))
			atomic_fetch_add(&c->failures, 1);
	}
	for (round = 0; round < 300; round++) {
		int k = (int)(tu_splitmix64(&s) % NCHUNKS);
		size_t off = tu_splitmix64(&s) % c->len[k];
		size_t want = c->len[k] - off;
		ssize_t r = store_chunk_pread(c->st, &c->h[k], tmp, STORE_CHUNK_MAX, off);

		if (r != (ssize_t)want || memcmp(tmp, c->data[k] + off, want))
			atomic_fetch_add(&c->failures, 1);
	}
	free(tmp);
	return NULL;
}

Test(chunkstore, concurrent_puts_and_preads, .timeout = 200)
{
	static struct conc c;
	struct conc_arg args[NTHREADS];
	pthread_t th[NTHREADS];
	int i;

	/* A cache of about 6 chunks, so that threads evict each other's entries. */
	c.st = open_store(6 * 200 * KiB, false);
	for (i = 0; i < NCHUNKS; i++) {
		c.len[i] = 50 * KiB + (size_t)i * 7 * KiB;
		c.data[i] = tu_malloc(c.len[i]);
		tu_fill_random(c.data[i], c.len[i], 500 + (uint64_t)i);
		if (i % 3 == 1)
			memset(c.data[i], i, c.len[i] / 2); /* compressible ones too */
		store_hash_buf(c.data[i], c.len[i], &c.h[i]);
	}
	atomic_init(&c.failures, 0);
	for (i = 0; i < NTHREADS; i++) {
		args[i].c = &c;
		args[i].tid = i;
		cr_assert_eq(pthread_create(&th[i], NULL, conc_worker, &args[i]), 0);
	}
	for (i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(atomic_load(&c.failures), 0, "%d failures", atomic_load(&c.failures));
	cr_assert_eq(count_in_shards(""), NCHUNKS);
	cr_assert_eq(count_in_shards(".tmp-"), 0);
	cr_assert_eq(store_sync(c.st), 0);
	store_close(c.st);
	for (i = 0; i < NCHUNKS; i++)
		free(c.data[i]);
}

/* ---- cache ---- */

Test(chunkstore, cache_is_lru_and_bounded)
{
	/* Room for two 100 KiB chunks, not three. */
	struct store *st = open_store(250 * KiB, false);
	size_t len = 100 * KiB, big = 400 * KiB;
	uint8_t *a = tu_malloc(len), *b = tu_malloc(len), *c = tu_malloc(len), *d = tu_malloc(big);
	struct store_hash ha, hb, hc, hd;
	uint8_t tmp[32];

	tu_fill_random(a, len, 21);
	tu_fill_random(b, len, 22);
	tu_fill_random(c, len, 23);
	tu_fill_random(d, big, 24);
	ha = put_ok(st, a, len, false);
	hb = put_ok(st, b, len, false);
	hc = put_ok(st, c, len, false);
	hd = put_ok(st, d, big, false);

	/* Read A, B, A, C: B is the least recently used and is evicted, A and C stay. */
	check_chunk(st, &ha, a, len);
	check_chunk(st, &hb, b, len);
	check_chunk(st, &ha, a, len);
	check_chunk(st, &hc, c, len);

	/* Damage all files on disk: only cached chunks can still be read. */
	flip_byte(st, &ha, 32 + 10);
	flip_byte(st, &hb, 32 + 10);
	flip_byte(st, &hc, 32 + 10);
	cr_assert_eq(store_chunk_pread(st, &ha, tmp, sizeof(tmp), 0), (ssize_t)sizeof(tmp));
	cr_assert_eq(memcmp(tmp, a, sizeof(tmp)), 0);
	cr_assert_eq(store_chunk_pread(st, &hc, tmp, sizeof(tmp), 0), (ssize_t)sizeof(tmp));
	cr_assert_eq(memcmp(tmp, c, sizeof(tmp)), 0);
	cr_assert_eq(store_chunk_pread(st, &hb, tmp, sizeof(tmp), 0), -EBADMSG, "B not evicted");
	/* A failed load inserts nothing: A and C are still cached. */
	cr_assert_eq(store_chunk_pread(st, &ha, tmp, sizeof(tmp), 0), (ssize_t)sizeof(tmp));
	cr_assert_eq(store_chunk_pread(st, &hc, tmp, sizeof(tmp), 0), (ssize_t)sizeof(tmp));

	/* A chunk larger than the cache is served, never cached, and does not evict. */
	check_chunk(st, &hd, d, big);
	flip_byte(st, &hd, 32 + 10);
	cr_assert_eq(store_chunk_pread(st, &hd, tmp, sizeof(tmp), 0), -EBADMSG);
	cr_assert_eq(store_chunk_pread(st, &ha, tmp, sizeof(tmp), 0), (ssize_t)sizeof(tmp));
	cr_assert_eq(store_chunk_pread(st, &hc, tmp, sizeof(tmp), 0), (ssize_t)sizeof(tmp));

	/* Restore B on disk; reading B evicts A (C was used after A). */
	flip_byte(st, &hb, 32 + 10);
	check_chunk(st, &hb, b, len);
	cr_assert_eq(store_chunk_pread(st, &hc, tmp, sizeof(tmp), 0), (ssize_t)sizeof(tmp));
	cr_assert_eq(store_chunk_pread(st, &ha, tmp, sizeof(tmp), 0), -EBADMSG, "A not evicted");
	store_close(st);
	free(a);
	free(b);
	free(c);
	free(d);
}

/*
 * Invariant 9: a sequential reader through a small cache decodes into the buffers of the
 * entries it evicts (store_cache_figures' recycled count), not into new allocations, and every
 * byte it reads back is right, including chunks of other sizes than the buffer they land in.
 */
Test(chunkstore, evicted_buffers_are_recycled)
{
	enum { N = 12 };
	struct store *st = open_store(2 * 300 * KiB, false); /* room for two chunks */
	uint8_t *data[N];
	size_t len[N];
	struct store_hash h[N];
	uint64_t hits, loads, rec, warmed;

	for (int i = 0; i < N; i++) {
		len[i] = 200 * KiB + (size_t)(i % 3) * 50 * KiB; /* 200, 250, 300 KiB */
		data[i] = tu_malloc(len[i]);
		tu_fill_random(data[i], len[i], 100 + (unsigned)i);
		h[i] = put_ok(st, data[i], len[i], false);
	}
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < N; i++)
			check_chunk(st, &h[i], data[i], len[i]);
	store_cache_figures(st, &hits, &loads, &warmed, &rec);
	cr_assert_eq(loads, 2 * N, "every read missed a two-chunk cache: %" PRIu64, loads);
	/* the first three loads find an empty pool (nothing evicted yet); the rest reuse */
	cr_assert_geq(rec, 2 * N - 3, "%" PRIu64 " of %d loads recycled a buffer", rec, 2 * N);
	store_close(st);
	for (int i = 0; i < N; i++)
		free(data[i]);
}

/*
 * Pages of chunk h's file in the page cache: *whole of those in its whole 4 KiB blocks (the
 * O_DIRECT part of a put), *last of its last partial block (0 or 1). mincore(2) on a mapping.
 */
static void cached_pages(const struct store *st, const struct store_hash *h, size_t *whole,
			 size_t *last)
{
	char path[512];
	struct stat sb;
	unsigned char vec[1100];
	size_t pages, full;
	void *m;
	int fd;

	cr_assert_eq(store_chunk_path(st, h, path, sizeof(path)), 0);
	fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(fd, &sb), 0);
	pages = ((size_t)sb.st_size + 4095) / 4096;
	full = (size_t)sb.st_size / 4096;
	cr_assert_leq(pages, sizeof(vec));
	m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
	cr_assert_neq(m, MAP_FAILED);
	cr_assert_eq(mincore(m, (size_t)sb.st_size, vec), 0);
	*whole = *last = 0;
	for (size_t i = 0; i < pages; i++) {
		if (i < full)
			*whole += vec[i] & 1;
		else
			*last += vec[i] & 1;
	}
	munmap(m, (size_t)sb.st_size);
	close(fd);
}

/*
 * A put writes a chunk file's whole 4 KiB blocks with O_DIRECT, around the page cache, and its
 * last partial block through it: for file sizes below, at and around block boundaries, the whole
 * blocks are not in the page cache afterwards and the chunk reads back intact. A filesystem that
 * refuses O_DIRECT writes (EINVAL) gets the whole file through the page cache.
 */
Test(chunkstore, puts_write_whole_blocks_around_the_page_cache)
{
	static const size_t lens[] = { 1, 4064 - 1, 4064, 4064 + 1, 8192 - 32, 300 * KiB + 123,
				       STORE_CHUNK_MAX };
	struct store *st = open_store(0, false);
	uint8_t *a = tu_malloc(STORE_CHUNK_MAX);
	struct statfs sf;
	bool observable;
	size_t whole, last;

	/* on tmpfs every page is memory: the O_DIRECT path runs but cannot be told apart */
	cr_assert_eq(statfs(root, &sf), 0);
	observable = sf.f_type != TMPFS_MAGIC;
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		struct store_hash h;

		tu_fill_random(a, lens[i], 50 + i); /* random: a RAW payload, file = 32 + len bytes */
		h = put_ok(st, a, lens[i], false);
		cached_pages(st, &h, &whole, &last);
		if (observable)
			cr_assert_eq(whole, 0, "len %zu: %zu whole blocks in the page cache", lens[i],
				     whole);
		cr_assert_eq(last, (32 + lens[i]) % 4096 ? 1 : 0, "len %zu: last block cached %zu",
			     lens[i], last);
		check_chunk(st, &h, a, lens[i]);
	}
	tu_fill_random(a, 300 * KiB, 70);
	atomic_store(&store_fault_direct_einval, 1);
	struct store_hash h = put_ok(st, a, 300 * KiB, false);

	cr_assert_eq(atomic_load(&store_fault_direct_einval), 0, "the put tried O_DIRECT first");
	cached_pages(st, &h, &whole, &last);
	cr_assert_eq(whole, (32 + 300 * KiB) / 4096, "refused: all through the page cache");
	check_chunk(st, &h, a, 300 * KiB);
	store_close(st);
	free(a);
}

/*
 * A filesystem that refuses O_DIRECT reads (EINVAL) is read through the page cache: the bytes
 * and the damage checks are the same either way.
 */
Test(chunkstore, refused_direct_reads_fall_back)
{
	struct store *st = open_store(0, false);
	size_t len = 300 * KiB + 123; /* not a multiple of the O_DIRECT alignment */
	uint8_t *a = tu_malloc(len), *b = tu_malloc(len);
	struct store_hash ha, hb;

	tu_fill_random(a, len, 41);
	memset(b, 7, len); /* compresses: a zstd payload */
	ha = put_ok(st, a, len, false);
	hb = put_ok(st, b, len, false);
	atomic_store(&store_fault_direct_einval, 2);
	check_chunk(st, &ha, a, len);
	check_chunk(st, &hb, b, len);
	cr_assert_eq(atomic_load(&store_fault_direct_einval), 0, "both loads tried O_DIRECT first");
	flip_byte(st, &ha, 32 + 10);
	atomic_store(&store_fault_direct_einval, 1);
	cr_assert_eq(store_chunk_verify(st, &ha), -EBADMSG, "damage found through the fallback");
	cr_assert_eq(store_chunk_verify(st, &hb), 0);
	atomic_store(&store_fault_direct_einval, 0);
	store_close(st);
	free(a);
	free(b);
}

/* ---- concurrent misses of one chunk (invariant 3: one load, the others wait for it) ---- */

#define NREADERS 6

struct same_arg {
	struct store *st;
	struct store_hash h;
	const uint8_t *want;
	size_t len;
	pthread_barrier_t *go;
	ssize_t rc;
	bool same;
};

static void *same_reader(void *p)
{
	struct same_arg *a = p;
	uint8_t *got = tu_malloc(a->len);

	pthread_barrier_wait(a->go);
	a->rc = store_chunk_pread(a->st, &a->h, got, a->len, 0);
	a->same = a->rc == (ssize_t)a->len && memcmp(got, a->want, a->len) == 0;
	free(got);
	return NULL;
}

/* Start NREADERS threads reading chunk h at the same moment; return how many loads it took. */
static uint64_t read_together(struct store *st, const struct store_hash *h, const uint8_t *want,
			      size_t len, struct same_arg *args)
{
	pthread_t th[NREADERS];
	pthread_barrier_t go;
	uint64_t hits0, loads0, hits, loads, rec, warmed;

	store_cache_figures(st, &hits0, &loads0, &warmed, &rec);
	pthread_barrier_init(&go, NULL, NREADERS);
	for (int i = 0; i < NREADERS; i++) {
		args[i] = (struct same_arg){ .st = st, .h = *h, .want = want, .len = len, .go = &go };
		cr_assert_eq(pthread_create(&th[i], NULL, same_reader, &args[i]), 0);
	}
	for (int i = 0; i < NREADERS; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&go);
	store_cache_figures(st, &hits, &loads, &warmed, &rec);
	cr_assert_eq((hits - hits0) + (loads - loads0), NREADERS, "every read counted once");
	return loads - loads0;
}

Test(chunkstore, concurrent_misses_load_once)
{
	struct store *st = open_store(64 * MiB, false);
	size_t len = STORE_CHUNK_MAX;
	uint8_t *a = tu_malloc(len);
	struct same_arg args[NREADERS];
	struct store_hash h;
	uint64_t loads;

	tu_fill_random(a, len, 31);
	h = put_ok(st, a, len, false);
	/* a 4 MiB chunk takes milliseconds to load: the other readers arrive while it loads */
	loads = read_together(st, &h, a, len, args);
	for (int i = 0; i < NREADERS; i++)
		cr_assert(args[i].same, "reader %d: rc %zd or wrong bytes", i, args[i].rc);
	cr_assert_eq(loads, 1, "%llu loads of one chunk read by %d threads at once",
		     (unsigned long long)loads, NREADERS);

	/* a failing load: every waiter gets the error (each retries the load itself), none hangs */
	struct store *st2 = open_store(64 * MiB, false);

	flip_byte(st2, &h, 32 + 1000);
	read_together(st2, &h, a, len, args);
	for (int i = 0; i < NREADERS; i++)
		cr_assert_eq(args[i].rc, -EBADMSG, "reader %d: %zd", i, args[i].rc);
	store_close(st2);
	store_close(st);
	free(a);
}

/*
 * store_chunk_hold: the bytes are the chunk's, in place in the cache, and stay valid and
 * unchanged while held although the entry is evicted (a two-chunk cache, then other chunks
 * read), its buffer would be recycled, and the chunk file is deleted; a damaged chunk is
 * refused as by store_chunk_pread.
 */
Test(chunkstore, held_bytes_outlive_eviction_and_delete)
{
	enum { N = 6 };
	struct store *st = open_store(2 * 300 * KiB, false);
	uint8_t *data[N];
	size_t len = 300 * KiB - 17;
	struct store_hash h[N];
	const uint8_t *p;
	size_t size;
	struct store_hold *hold, *h2;
	uint64_t hits, loads, rec, warmed;

	for (int i = 0; i < N; i++) {
		data[i] = tu_malloc(len);
		tu_fill_random(data[i], len, 300 + (unsigned)i);
		h[i] = put_ok(st, data[i], len, false);
	}
	cr_assert_eq(store_chunk_hold(st, &h[0], &p, &size, &hold), 0);
	cr_assert_eq(size, len);
	cr_assert(memcmp(p, data[0], len) == 0);
	/* a second hold of a cached chunk is the same bytes, not a copy */
	const uint8_t *p2;

	cr_assert_eq(store_chunk_hold(st, &h[0], &p2, &size, &h2), 0);
	cr_assert_eq(p2, p);
	store_cache_figures(st, &hits, &loads, &warmed, &rec);
	cr_assert(hits == 1 && loads == 1, "hits %" PRIu64 " loads %" PRIu64, hits, loads);
	store_chunk_release(st, h2);
	for (int pass = 0; pass < 2; pass++)
		for (int i = 1; i < N; i++)
			check_chunk(st, &h[i], data[i], len);
	cr_assert_eq(store_chunk_delete(st, &h[0]), 0);
	cr_assert(memcmp(p, data[0], len) == 0, "held bytes changed after eviction and delete");
	store_chunk_release(st, hold);
	store_chunk_release(st, NULL);
	cr_assert_eq(store_chunk_hold(st, &h[0], &p, &size, &hold), -ENOENT);
	flip_byte(st, &h[1], 32 + 10); /* not cached: h[4] and h[5] were read last */
	cr_assert_eq(store_chunk_hold(st, &h[1], &p, &size, &hold), -EBADMSG);
	store_close(st);
	for (int i = 0; i < N; i++)
		free(data[i]);
}

/*
 * store_chunks_verify (the newest step's check at mount, fs/steps/steps.c verify_tree): every
 * entry gets its own chunk's result, on one thread or several, a damaged chunk -EBADMSG and a
 * missing one -ENOENT wherever they sit in the list (0 threads: the default count); an empty
 * list is fine.
 */
Test(chunkstore, verify_many_on_threads)
{
	enum { N = 24 };
	struct store *st = open_store(64 * MiB, false);
	size_t len = 200 * KiB + 3;
	uint8_t *buf = tu_malloc(len);
	struct store_hash h[N];
	int res[N];

	for (int i = 0; i < N; i++) {
		tu_fill_random(buf, len, 500 + (unsigned)i);
		h[i] = put_ok(st, buf, len, false);
	}
	flip_byte(st, &h[3], 32 + 77);
	flip_byte(st, &h[N - 1], 32 + 4000);
	cr_assert_eq(store_chunk_delete(st, &h[10]), 0);
	for (unsigned threads = 0; threads <= 8; threads = threads ? threads * 2 : 1) {
		for (int i = 0; i < N; i++)
			res[i] = 12345;
		store_chunks_verify(st, h, N, threads, NULL, res);
		for (int i = 0; i < N; i++) {
			int want = i == 3 || i == N - 1 ? -EBADMSG : i == 10 ? -ENOENT : 0;

			cr_assert_eq(res[i], want, "%u threads: chunk %d: %d, not %d", threads, i,
				     res[i], want);
		}
	}
	store_chunks_verify(st, h, 0, 4, NULL, res);
	store_close(st);
	free(buf);
}

/*
 * store_chunks_verify with keep (the mount's check feeding the resume's read, chunkstore.c
 * invariant 13): the first chunks in the order given go into the cache up to keep.cache_bytes
 * and into the page cache up to keep.page_bytes, those not in the cache are read back from the
 * page cache once, the rest are only verified; every chunk reads back right, a damaged one is -EBADMSG to the
 * check and to the reader and kept nowhere, and a chunk already cached is not read again.
 */
Test(chunkstore, verify_keeps_for_the_reader)
{
	enum { N = 12 };
	struct store *st = open_store(64 * MiB, false);
	size_t len = 1 * MiB;
	uint8_t *data[N];
	struct store_hash h[N];
	int res[N];
	uint64_t checked, kept, primed, back, hits, loads, warmed, rec;

	for (int i = 0; i < N; i++) {
		data[i] = tu_malloc(len);
		tu_fill_random(data[i], len, 900 + (unsigned)i);
		h[i] = put_ok(st, data[i], len, false);
	}
	store_close(st);
	st = open_store(64 * MiB, false);
	flip_byte(st, &h[5], 32 + 99);
	/* 3 chunks fit in the cache's share; the first 7 sound ones in the page cache's (the
	 * threads in flight may each leave one more there); the rest only verified */
	struct store_keep keep = { .cache_bytes = 3 * len + len / 2, .page_bytes = 7 * len };

	store_chunks_verify(st, h, N, 1, &keep, res);
	for (int i = 0; i < N; i++)
		cr_assert_eq(res[i], i == 5 ? -EBADMSG : 0, "chunk %d: %d", i, res[i]);
	store_check_figures(st, &checked, &kept, &primed, &back);
	cr_assert(checked == N && kept == 3 && primed == 7 && back == 0,
		  "checked %" PRIu64 " kept %" PRIu64 " primed %" PRIu64 " back %" PRIu64, checked,
		  kept, primed, back);
	for (int i = 0; i < N; i++) {
		uint8_t *got = tu_malloc(len);

		cr_assert_eq(store_chunk_pread(st, &h[i], got, len, 0), i == 5 ? -EBADMSG : (ssize_t)len,
			     "chunk %d", i);
		if (i != 5)
			cr_assert_eq(memcmp(got, data[i], len), 0, "chunk %d", i);
		free(got);
	}
	store_check_figures(st, &checked, &kept, &primed, &back);
	store_cache_figures(st, &hits, &loads, &warmed, &rec);
	cr_assert_eq(back, 4, "the 4 not in the cache read back from the page cache: %" PRIu64, back);
	cr_assert(hits == 3 && loads == N - 3, "hits %" PRIu64 " loads %" PRIu64, hits, loads);
	/* the check of chunks the cache holds reads nothing */
	store_chunks_verify(st, h, 3, 1, &keep, res);
	store_check_figures(st, &checked, &kept, &primed, &back);
	cr_assert_eq(checked, N, "cached chunks were read again: %" PRIu64, checked);
	store_close(st);
	for (int i = 0; i < N; i++)
		free(data[i]);
}

/*
 * A chunk the mount's check left in the page cache and then compressed (store_chunk_recode of a
 * deferred chunk, the daemon's idle work) is read back from the page cache all the same: the
 * new copy is written through it (chunkstore.c invariant 13), and reads back right.
 */
Test(chunkstore, recode_of_a_checked_chunk_stays_in_the_page_cache)
{
	struct store *st = open_store(64 * MiB, false);
	size_t len = 1 * MiB;
	uint8_t *data = tu_malloc(len), *got = tu_malloc(len);
	struct store_chunk_info info;
	struct store_hash h;
	int res;
	uint64_t checked, kept, primed, back;

	for (size_t i = 0; i < len; i++)
		data[i] = (uint8_t)(i % 251 < 128 ? 0 : i); /* compressible */
	store_hash_buf(data, len, &h);
	cr_assert_eq(store_chunk_put_hashed(st, data, len, &h, STORE_PUT_DEFER, &info), 0);
	cr_assert_eq(info.codec, STORE_CODEC_DEFERRED);
	store_close(st);
	st = open_store(64 * MiB, false);
	struct store_keep keep = { .cache_bytes = 0, .page_bytes = 8 * len };

	store_chunks_verify(st, &h, 1, 1, &keep, &res);
	cr_assert_eq(res, 0);
	cr_assert_eq(store_chunk_recode(st, &h, &info), 0);
	cr_assert_neq(info.codec, STORE_CODEC_DEFERRED);
	cr_assert_eq(store_chunk_pread(st, &h, got, len, 0), (ssize_t)len);
	cr_assert_eq(memcmp(got, data, len), 0);
	store_check_figures(st, &checked, &kept, &primed, &back);
	cr_assert(checked == 1 && kept == 0 && primed == 1 && back == 2,
		  "checked %" PRIu64 " kept %" PRIu64 " primed %" PRIu64 " back %" PRIu64
		  " (the recode's read and the reader's)", checked, kept, primed, back);
	store_close(st);
	free(data);
	free(got);
}

/*
 * store_chunk_warm (read-ahead, fs/write/ra.c): it loads a chunk into the cache, so the reader's
 * next read of it is a hit and no load; a chunk already cached is not loaded again; a damaged or
 * missing chunk gives the reader's own error and caches nothing.
 */
Test(chunkstore, warm_loads_once_for_the_reader)
{
	struct store *st = open_store(64 * MiB, false);
	size_t len = 1 * MiB + 5;
	uint8_t *a = tu_malloc(len), *b = tu_malloc(len);
	struct store_hash h, hb, missing;
	uint64_t hits, loads, rec, warmed;

	tu_fill_random(a, len, 41);
	tu_fill_random(b, len, 42);
	h = put_ok(st, a, len, false);
	hb = put_ok(st, b, len, false);
	cr_assert_eq(store_chunk_warm(st, &h), 0);
	store_cache_figures(st, &hits, &loads, &warmed, &rec);
	cr_assert(hits == 0 && loads == 0 && warmed == 1,
		  "after a warm: hits %" PRIu64 " loads %" PRIu64 " warmed %" PRIu64, hits, loads,
		  warmed);
	cr_assert_eq(store_chunk_warm(st, &h), 0, "a cached chunk warms as a no-op");
	check_chunk(st, &h, a, len);
	store_cache_figures(st, &hits, &loads, &warmed, &rec);
	cr_assert(hits >= 1 && loads == 0 && warmed == 1, /* check_chunk reads in pieces */
		  "the reader after a warm: hits %" PRIu64 " loads %" PRIu64 " warmed %" PRIu64,
		  hits, loads, warmed);

	flip_byte(st, &hb, 32 + 1000);
	cr_assert_eq(store_chunk_warm(st, &hb), -EBADMSG);
	cr_assert_eq(store_chunk_pread(st, &hb, b, 16, 0), -EBADMSG,
		     "a failed warm cached nothing");
	memset(missing.b, 0x5a, sizeof(missing.b));
	cr_assert_eq(store_chunk_warm(st, &missing), -ENOENT);
	store_close(st);
	free(a);
	free(b);
}
