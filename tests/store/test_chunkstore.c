/*
 * test_chunkstore.c — the chunk directory: put/pread, dedup, stat, delete, foreach, corruption
 * detection, temporary-file sweep, read-only mode, ENOSPC and concurrency (the read cache:
 * test_chunkcache.c).
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
#include "chunkstore_fixture.h"

TestSuite(chunkstore, .init = setup, .fini = teardown);

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

/* The file's bytes of chunk h: header then payload (tu_malloc'd, *ret_len bytes). */
static uint8_t *chunk_file(const struct store *st, const struct store_hash *h, size_t *ret_len)
{
	char path[512];
	struct stat sb;
	uint8_t *b;
	int fd;

	cr_assert_eq(store_chunk_path(st, h, path, sizeof(path)), 0);
	fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(fd, &sb), 0);
	b = tu_malloc((size_t)sb.st_size);
	cr_assert_eq(pread(fd, b, (size_t)sb.st_size, 0), sb.st_size);
	close(fd);
	*ret_len = (size_t)sb.st_size;
	return b;
}

/* store_chunk_object sends the stored payload as it is (its codec, not encoded again at the
 * level asked, here 19 against the store's 1); a deferred copy goes encoded, never as
 * DEFERRED; a damaged copy, a wrong size and a missing chunk are refused. Every object
 * decodes to the chunk's bytes. */
Test(chunkstore, object_is_the_stored_payload)
{
	struct store *st = open_store(0, false);
	size_t len = 512 * KiB, flen, olen;
	uint8_t *buf = tu_malloc(len), *file, *raw;
	struct store_chunk_info info;
	struct store_hash h, hd;
	uint32_t rlen;
	void *obj;

	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(i % 251 < 200 ? 'a' : i * 7);
	h = put_ok(st, buf, len, false);
	file = chunk_file(st, &h, &flen);
	cr_assert_eq(store_chunk_object(st, &h, len, 19, &obj, &olen), 0);
	cr_assert_eq(olen, flen - STORE_HDR_LEN + STORE_OBJECT_HEADER);
	cr_assert_eq(((uint8_t *)obj)[0], file[4], "the stored codec");
	cr_assert(memcmp((uint8_t *)obj + STORE_OBJECT_HEADER, file + STORE_HDR_LEN,
			 flen - STORE_HDR_LEN) == 0, "the stored payload, not encoded again");
	cr_assert_eq(store_object_decode(obj, olen, &h, &raw, &rlen), 0);
	cr_assert_eq(rlen, len);
	cr_assert(memcmp(raw, buf, len) == 0);
	free(raw);
	free(obj);
	free(file);
	cr_assert_eq(store_chunk_object(st, &h, len - 1, 1, &obj, &olen), -EIO);

	/* another chunk, stored deferred: compressed once, the copy stored here and the object
	 * the same payload, nothing left for the idle recode */
	buf[0] ^= 1;
	store_hash_buf(buf, len, &hd);
	cr_assert_eq(store_chunk_put_hashed(st, buf, len, &hd, STORE_PUT_DEFER, &info), 0);
	cr_assert_eq(info.codec, STORE_CODEC_DEFERRED);
	cr_assert_eq(store_chunk_object(st, &hd, len, 1, &obj, &olen), 0);
	cr_assert_neq(((uint8_t *)obj)[0], STORE_CODEC_DEFERRED);
	cr_assert_lt(olen, len / 4, "encoded");
	cr_assert_eq(store_object_decode(obj, olen, &hd, &raw, &rlen), 0);
	cr_assert(memcmp(raw, buf, len) == 0);
	free(raw);
	file = chunk_file(st, &hd, &flen);
	cr_assert_eq(file[4], ((uint8_t *)obj)[0], "the stored copy was compressed too");
	cr_assert(flen - STORE_HDR_LEN == olen - STORE_OBJECT_HEADER &&
		  memcmp(file + STORE_HDR_LEN, (uint8_t *)obj + STORE_OBJECT_HEADER,
			 olen - STORE_OBJECT_HEADER) == 0, "one encode for both");
	free(file);
	free(obj);
	check_chunk(st, &hd, buf, len);

	flip_byte(st, &h, STORE_HDR_LEN + 100);
	cr_assert_eq(store_chunk_object(st, &h, len, 1, &obj, &olen), -EBADMSG);
	flip_byte(st, &hd, STORE_HDR_LEN + 100);
	cr_assert_eq(store_chunk_object(st, &hd, len, 1, &obj, &olen), -EBADMSG);
	cr_assert_eq(store_chunk_delete(st, &h), 0);
	cr_assert_eq(store_chunk_object(st, &h, len, 1, &obj, &olen), -ENOENT);
	store_close(st);
	free(buf);
}

/* store_chunk_put_object stores a fetched object's payload as it came (here encoded at level 19,
 * the store's own level being 1), readable and checked like any chunk; an object whose bytes are
 * not h's, or that does not decode, stores nothing; a second put finds the copy there. */
Test(chunkstore, put_object_keeps_the_senders_encoding)
{
	struct store *st = open_store(0, false);
	size_t len = 512 * KiB, flen, olen;
	uint8_t *buf = tu_malloc(len), *file;
	struct store_chunk_info info;
	struct store_fetched got = { 0 };
	struct store_hash h, other;
	char path[512];
	void *obj;

	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(i % 251 < 200 ? 'a' : i * 7);
	store_hash_buf(buf, len, &h);
	store_hash_buf("x", 1, &other);
	cr_assert_eq(store_object_encode(buf, len, 19, &obj, &olen), 0);

	cr_assert_eq(store_chunk_put_object(st, obj, olen, &other, &info, NULL), -EBADMSG);
	cr_assert_eq(store_chunk_put_object(st, obj, olen - 1, &h, &info, &got), -EBADMSG);
	cr_assert_null(got.data, "nothing handed on from a failed put");
	cr_assert_eq(store_chunk_put_object(st, obj, 3, &h, &info, NULL), -EBADMSG);
	cr_assert_eq(count_in_shards(""), 0, "nothing stored");

	cr_assert_eq(store_chunk_put_object(st, obj, olen, &h, &info, &got), 0);
	cr_assert_not(info.existed);
	cr_assert(got.data && got.size == len && got.cap >= len &&
		  memcmp(got.data, buf, len) == 0, "the decoded bytes handed on");
	store_buf_put(st, got.data, got.cap);
	cr_assert_eq(info.raw_size, len);
	file = chunk_file(st, &h, &flen);
	cr_assert_eq(flen - STORE_HDR_LEN, olen - STORE_OBJECT_HEADER);
	cr_assert_eq(file[4], ((uint8_t *)obj)[0]);
	cr_assert(memcmp(file + STORE_HDR_LEN, (uint8_t *)obj + STORE_OBJECT_HEADER,
			 flen - STORE_HDR_LEN) == 0, "the sender's payload, not encoded again");
	free(file);
	check_chunk(st, &h, buf, len);
	cr_assert_eq(store_chunk_verify(st, &h), 0);
	cr_assert_eq(store_chunk_put_object(st, obj, olen, &h, &info, NULL), 0);
	cr_assert(info.existed);
	store_close(st);

	st = open_store(0, true);
	cr_assert_eq(store_chunk_put_object(st, obj, olen, &other, &info, NULL), -EROFS);
	cr_assert_eq(store_chunk_path(st, &h, path, sizeof(path)), 0);
	store_close(st);
	free(obj);
	free(buf);
}

/* A fetch function for warm_fetches_only_when_asked: puts the bytes at arg as the chunk. */
static int fetch_calls;

static int fetch_from(struct store *st, const struct store_hash *h, void *arg,
		      struct store_fetched *got)
{
	struct store_chunk_info info;

	(void)got; /* stored with store_chunk_put_hashed: the read reads the file */
	fetch_calls++;
	return store_chunk_put_hashed(st, arg, 300 * KiB, h, 0, &info);
}

/* store_chunk_warm fetches a chunk missing here only when the caller says so (read-ahead on a
 * node of a job, fs/write/ra.c), and then the reader's read is a cache hit. */
Test(chunkstore, warm_fetches_only_when_asked)
{
	struct store *st = open_store(64 * MiB, false);
	size_t len = 300 * KiB;
	uint8_t *a = tu_malloc(len);
	uint64_t hits, loads, rec, warmed;
	struct store_hash h;

	tu_fill_random(a, len, 43);
	store_hash_buf(a, len, &h);
	store_set_fetch(st, fetch_from, a);
	fetch_calls = 0;
	cr_assert_eq(store_chunk_warm(st, &h, false), -ENOENT);
	cr_assert_eq(fetch_calls, 0);
	cr_assert_eq(store_chunk_warm(st, &h, true), 0);
	cr_assert_eq(fetch_calls, 1);
	check_chunk(st, &h, a, len);
	store_cache_figures(st, &hits, &loads, &warmed, &rec);
	cr_assert(hits >= 1 && loads == 0 && warmed == 2, /* the failed warm counts too */
		  "hits %" PRIu64 " loads %" PRIu64 " warmed %" PRIu64, hits, loads, warmed);
	cr_assert_eq(fetch_calls, 1, "the reader fetched nothing");
	store_set_fetch(st, NULL, NULL);
	store_close(st);
	free(a);
}

/* A fetch function that stores a chunk's object, then damages the stored file (one payload byte
 * flipped) before the read that asked goes on. */
struct fetch_obj {
	const void *obj;
	size_t olen;
};

static int fetch_then_damage(struct store *st, const struct store_hash *h, void *arg,
			     struct store_fetched *got)
{
	const struct fetch_obj *f = arg;
	struct store_chunk_info info;
	char path[512];
	uint8_t byte;
	int fd, rc;

	fetch_calls++;
	if ((rc = store_chunk_put_object(st, f->obj, f->olen, h, &info, got)) < 0)
		return rc;
	cr_assert_eq(store_chunk_path(st, h, path, sizeof(path)), 0);
	fd = open(path, O_RDWR);
	cr_assert(fd >= 0 && pread(fd, &byte, 1, STORE_HDR_LEN + 100) == 1);
	byte ^= 0x5a;
	cr_assert(pwrite(fd, &byte, 1, STORE_HDR_LEN + 100) == 1);
	close(fd);
	return 0;
}

/* The read that fetched a chunk is served the bytes the fetch decoded and checked: the chunk's
 * file is not read back, decoded and hashed a second time (a cold node's reads, issue 41 item
 * 11). Seen through a file damaged right after the fetch stored it: the fetching read returns
 * the chunk's bytes, and a later read of the damaged file, once out of the cache, fails. */
Test(chunkstore, a_fetching_read_is_served_the_fetched_bytes)
{
	struct store *st = open_store(64 * MiB, false);
	size_t len = 300 * KiB, olen;
	uint8_t *a = tu_malloc(len), *out = tu_malloc(len);
	struct store_hash h;
	struct fetch_obj f;
	void *obj;

	tu_fill_random(a, len, 47);
	store_hash_buf(a, len, &h);
	cr_assert_eq(store_object_encode(a, len, 1, &obj, &olen), 0);
	f.obj = obj;
	f.olen = olen;
	store_set_fetch(st, fetch_then_damage, &f);
	fetch_calls = 0;
	cr_assert_eq(store_chunk_pread(st, &h, out, len, 0), (ssize_t)len);
	cr_assert_eq(fetch_calls, 1);
	cr_assert(memcmp(out, a, len) == 0, "the fetched bytes, not the file read back");
	store_cache_drop(st, &h);
	cr_assert_eq(store_chunk_pread(st, &h, out, len, 0), -EBADMSG,
		     "the stored file was damaged: a read of it fails");
	cr_assert_eq(fetch_calls, 1);
	store_set_fetch(st, NULL, NULL);
	store_close(st);
	free(obj);
	free(out);
	free(a);
}
