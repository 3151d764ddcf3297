/*
 * test_chunkcache.c — the chunk store's read cache, continued from test_chunkstore.c: LRU and its
 * bound, recycled buffers, the page cache around puts, refused O_DIRECT reads, concurrent misses
 * of one chunk loaded once, held bytes, and the mount check's reads kept for the reader.
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

TestSuite(chunkcache, .init = setup, .fini = teardown);

/* ---- cache ---- */

Test(chunkcache, cache_is_lru_and_bounded)
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
Test(chunkcache, evicted_buffers_are_recycled)
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
Test(chunkcache, puts_write_whole_blocks_around_the_page_cache)
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
Test(chunkcache, refused_direct_reads_fall_back)
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

Test(chunkcache, concurrent_misses_load_once)
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
Test(chunkcache, held_bytes_outlive_eviction_and_delete)
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
Test(chunkcache, verify_many_on_threads)
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
Test(chunkcache, verify_keeps_for_the_reader)
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

/* Pages of the file at path in the page cache and up to date (mincore of a mapping). */
static size_t resident_pages(const char *path)
{
	int fd = open(path, O_RDONLY);
	struct stat sb;
	size_t n = 0, pg = (size_t)sysconf(_SC_PAGESIZE);

	cr_assert(fd >= 0 && fstat(fd, &sb) == 0 && sb.st_size > 0, "%s", path);
	size_t np = ((size_t)sb.st_size + pg - 1) / pg;
	void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
	unsigned char *vec = tu_malloc(np);

	cr_assert(map != MAP_FAILED);
	cr_assert_eq(mincore(map, (size_t)sb.st_size, vec), 0);
	for (size_t i = 0; i < np; i++)
		n += vec[i] & 1;
	munmap(map, (size_t)sb.st_size);
	free(vec);
	close(fd);
	return n;
}

/*
 * A chunk the mount's check left in the page cache whose pages the kernel then reclaimed (the
 * trainer's own data, memory pressure; a benchmark's drop_caches) is read from the disk once,
 * with O_DIRECT: the try of the page cache starts no read of its own. It did: preadv2 with
 * RWF_NOWAIT starts the read-ahead of a page it does not find before it fails, so the disk read
 * those bytes a second time, into the page cache, beside the O_DIRECT read (a 1 GiB step's cold
 * load through a remounted, cache-dropped mount read 1,334 MiB from the disk instead of its 882
 * MiB stored; RESULTS.md, "Two cold loads that disagreed").
 */
Test(chunkcache, a_checked_chunk_evicted_from_the_page_cache_is_read_once)
{
	struct store *st = open_store(0, false);
	size_t len = 2 * MiB;
	uint8_t *data = tu_malloc(len), *got = tu_malloc(len);
	char path[PATH_MAX];
	struct store_hash h;
	uint64_t checked, kept, primed, back;
	int res, fd;

	tu_fill_random(data, len, 77); /* incompressible: a raw file of 2 MiB and a header */
	h = put_ok(st, data, len, false);
	store_close(st);
	st = open_store(0, false);
	struct store_keep keep = { .cache_bytes = 0, .page_bytes = 8 * len };

	store_chunks_verify(st, &h, 1, 1, &keep, &res);
	cr_assert_eq(res, 0);
	cr_assert_eq(store_chunk_path(st, &h, path, sizeof(path)), 0);
	cr_assert_gt(resident_pages(path), 0, "the check left nothing in the page cache");
	fd = open(path, O_RDONLY);
	cr_assert(fd >= 0);
	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
	cr_assert_eq(resident_pages(path), 0, "the page cache kept the chunk file");
	cr_assert_eq(store_chunk_pread(st, &h, got, len, 0), (ssize_t)len);
	cr_assert_eq(memcmp(got, data, len), 0);
	usleep(100 * 1000); /* a read-ahead started by the load would complete meanwhile */
	cr_assert_eq(resident_pages(path), 0, "the load of an evicted chunk read it into the page "
		     "cache too");
	store_check_figures(st, &checked, &kept, &primed, &back);
	cr_assert(checked == 1 && primed == 1 && back == 0,
		  "checked %" PRIu64 " primed %" PRIu64 " back %" PRIu64, checked, primed, back);
	store_close(st);
	free(data);
	free(got);
}

/*
 * A chunk the mount's check left in the page cache and then compressed (store_chunk_recode of a
 * deferred chunk, the daemon's idle work) is read back from the page cache all the same: the
 * new copy is written through it (chunkstore.c invariant 13), and reads back right.
 */
Test(chunkcache, recode_of_a_checked_chunk_stays_in_the_page_cache)
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
Test(chunkcache, warm_loads_once_for_the_reader)
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
	cr_assert_eq(store_chunk_warm(st, &h, false), 0);
	store_cache_figures(st, &hits, &loads, &warmed, &rec);
	cr_assert(hits == 0 && loads == 0 && warmed == 1,
		  "after a warm: hits %" PRIu64 " loads %" PRIu64 " warmed %" PRIu64, hits, loads,
		  warmed);
	cr_assert_eq(store_chunk_warm(st, &h, false), 0, "a cached chunk warms as a no-op");
	check_chunk(st, &h, a, len);
	store_cache_figures(st, &hits, &loads, &warmed, &rec);
	cr_assert(hits >= 1 && loads == 0 && warmed == 1, /* check_chunk reads in pieces */
		  "the reader after a warm: hits %" PRIu64 " loads %" PRIu64 " warmed %" PRIu64,
		  hits, loads, warmed);

	flip_byte(st, &hb, 32 + 1000);
	cr_assert_eq(store_chunk_warm(st, &hb, false), -EBADMSG);
	cr_assert_eq(store_chunk_pread(st, &hb, b, 16, 0), -EBADMSG,
		     "a failed warm cached nothing");
	memset(missing.b, 0x5a, sizeof(missing.b));
	cr_assert_eq(store_chunk_warm(st, &missing, false), -ENOENT);
	store_close(st);
	free(a);
	free(b);
}
