/*
 * test_chunker.c — store_cdc_cut: bounds, purity, determinism, average size and boundary
 * stability under insertions (the reason for content-defined chunking, see DESIGN.md).
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/store.h"
#include "store/store_int.h"
#include "test_util.h"

#define MiB (1024u * 1024u)

/* Chunk a whole buffer; returns the number of chunks, lengths in *ret_lens (owned). */
static size_t chunk_all(const uint8_t *buf, size_t len, size_t **ret_lens)
{
	size_t cap = len / STORE_CHUNK_MIN + 2;
	size_t *lens = tu_malloc(cap * sizeof(*lens));
	size_t n = 0, off = 0;

	while (off < len) {
		size_t c = store_cdc_cut(buf + off, len - off, true);

		cr_assert(c >= 1 && c <= len - off, "cut %zu at offset %zu out of range", c, off);
		cr_assert(n < cap);
		lens[n++] = c;
		off += c;
	}
	*ret_lens = lens;
	return n;
}

/*
 * Chunk as a streaming writer would: windows of at most STORE_CHUNK_MAX bytes, at_eof only when
 * the window reaches the end, growing the window by 64 KiB when the chunker asks for more.
 */
static size_t chunk_streaming(const uint8_t *buf, size_t len, size_t *lens, size_t cap)
{
	size_t n = 0, off = 0;

	while (off < len) {
		size_t avail = 64 * 1024;
		size_t c;

		for (;;) {
			if (avail > len - off)
				avail = len - off;
			c = store_cdc_cut(buf + off, avail, off + avail == len);
			if (c)
				break;
			cr_assert(avail < STORE_CHUNK_MAX, "no cut with a full window");
			avail += 64 * 1024;
		}
		cr_assert(n < cap);
		lens[n++] = c;
		off += c;
	}
	return n;
}

static int cmp_hash(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(struct store_hash));
}

/* Digests of the chunks of buf, sorted. */
static struct store_hash *chunk_digests(const uint8_t *buf, size_t len, size_t *ret_n)
{
	size_t *lens;
	size_t n = chunk_all(buf, len, &lens);
	struct store_hash *hs = tu_malloc(n * sizeof(*hs));
	size_t i, off = 0;

	for (i = 0; i < n; i++) {
		store_hash_buf(buf + off, lens[i], &hs[i]);
		off += lens[i];
	}
	free(lens);
	qsort(hs, n, sizeof(*hs), cmp_hash);
	*ret_n = n;
	return hs;
}

Test(chunker, gear_table_is_splitmix64)
{
	uint64_t s = STORE_GEAR_SEED;
	int i;

	for (i = 0; i < 256; i++)
		cr_assert_eq(store_gear_table[i], tu_splitmix64(&s), "gear[%d] differs", i);
}

Test(chunker, small_inputs)
{
	uint8_t *buf = tu_malloc(STORE_CHUNK_MAX + 1);

	tu_fill_random(buf, STORE_CHUNK_MAX + 1, 1);
	cr_assert_eq(store_cdc_cut(buf, 0, false), 0);
	cr_assert_eq(store_cdc_cut(buf, 0, true), 0);
	cr_assert_eq(store_cdc_cut(buf, 1, true), 1);
	cr_assert_eq(store_cdc_cut(buf, 1, false), 0);
	cr_assert_eq(store_cdc_cut(buf, STORE_CHUNK_MIN, false), 0);
	cr_assert_eq(store_cdc_cut(buf, STORE_CHUNK_MIN, true), STORE_CHUNK_MIN);
	cr_assert_eq(store_cdc_cut(buf, STORE_CHUNK_MIN - 1, true), STORE_CHUNK_MIN - 1);
	free(buf);
}

Test(chunker, forced_cut_at_max_on_constant_data)
{
	size_t len = 2 * STORE_CHUNK_MAX + 12345;
	uint8_t *buf = tu_malloc(len);
	size_t *lens;
	size_t n;

	/* Constant bytes drive the Gear hash to a fixed point: only the MAX cut fires. */
	memset(buf, 0, len);
	cr_assert_eq(store_cdc_cut(buf, STORE_CHUNK_MAX - 1, false), 0);
	cr_assert_eq(store_cdc_cut(buf, STORE_CHUNK_MAX - 1, true), STORE_CHUNK_MAX - 1);
	cr_assert_eq(store_cdc_cut(buf, STORE_CHUNK_MAX, false), STORE_CHUNK_MAX);
	cr_assert_eq(store_cdc_cut(buf, len, false), STORE_CHUNK_MAX);
	n = chunk_all(buf, len, &lens);
	cr_assert_eq(n, 3);
	cr_assert_eq(lens[0], STORE_CHUNK_MAX);
	cr_assert_eq(lens[1], STORE_CHUNK_MAX);
	cr_assert_eq(lens[2], 12345);
	free(lens);
	free(buf);
}

Test(chunker, bounds_purity_and_determinism)
{
	size_t len = 96 * MiB;
	uint8_t *buf = tu_malloc(len);
	uint8_t *copy = tu_malloc(len);
	size_t *lens, *lens2;
	size_t n, n2, i, off = 0;

	tu_fill_random(buf, len, 42);
	n = chunk_all(buf, len, &lens);
	cr_assert_gt(n, 10);
	for (i = 0; i < n; i++) {
		bool last = i == n - 1;

		cr_assert(lens[i] <= STORE_CHUNK_MAX, "chunk %zu is %zu bytes", i, lens[i]);
		cr_assert(last || lens[i] >= STORE_CHUNK_MIN, "chunk %zu is %zu bytes", i, lens[i]);
		/* Pure: the cut does not depend on the bytes after it, nor on at_eof. */
		if (!last) {
			cr_assert_eq(store_cdc_cut(buf + off, lens[i], true), lens[i]);
			cr_assert_eq(store_cdc_cut(buf + off, lens[i] + 1, false), lens[i]);
		}
		off += lens[i];
	}
	cr_assert_eq(off, len);

	/* Deterministic: same bytes elsewhere in memory give the same chunks. */
	memcpy(copy, buf, len);
	n2 = chunk_all(copy, len, &lens2);
	cr_assert_eq(n2, n);
	cr_assert_eq(memcmp(lens, lens2, n * sizeof(*lens)), 0);

	/* A streaming writer with growing windows finds the same boundaries. */
	n2 = chunk_streaming(buf, len, lens2, n);
	cr_assert_eq(n2, n);
	cr_assert_eq(memcmp(lens, lens2, n * sizeof(*lens)), 0);
	free(lens);
	free(lens2);
	free(copy);
	free(buf);
}

/* Percentage of the chunks of b (by digest) that also occur among the chunks of a. */
static double shared_pct(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
			 size_t *ret_nb)
{
	size_t na, nb, i, hits = 0;
	struct store_hash *ha = chunk_digests(a, alen, &na);
	struct store_hash *hb = chunk_digests(b, blen, &nb);

	for (i = 0; i < nb; i++)
		if (bsearch(&hb[i], ha, na, sizeof(*ha), cmp_hash))
			hits++;
	free(ha);
	free(hb);
	*ret_nb = nb;
	return 100.0 * (double)hits / (double)nb;
}

Test(chunker, average_size_and_insertion_stability, .timeout = 240)
{
	size_t len = 256 * MiB;
	uint8_t *orig = tu_malloc(len);
	uint8_t *mod = tu_malloc(len + 64);
	size_t *lens;
	size_t n, nb;
	double avg, pct;

	tu_fill_random(orig, len, 7);
	n = chunk_all(orig, len, &lens);
	free(lens);
	avg = (double)len / (double)n;
	fprintf(stderr, "chunker: %zu chunks over 256 MiB, average %.0f KiB\n", n, avg / 1024);
	cr_assert(avg >= 0.5 * STORE_CHUNK_AVG && avg <= 2.0 * STORE_CHUNK_AVG,
		  "average chunk %.0f bytes", avg);

	/* 64 bytes inserted at the front. */
	tu_fill_random(mod, 64, 99);
	memcpy(mod + 64, orig, len);
	pct = shared_pct(orig, len, mod, len + 64, &nb);
	fprintf(stderr, "chunker: 64 B inserted at front: %.2f%% of %zu chunks already stored\n",
		pct, nb);
	cr_assert_geq(pct, 95.0, "only %.2f%% of chunks shared after a front insertion", pct);

	/* 64 bytes inserted in the middle. */
	memcpy(mod, orig, len / 2);
	tu_fill_random(mod + len / 2, 64, 100);
	memcpy(mod + len / 2 + 64, orig + len / 2, len - len / 2);
	pct = shared_pct(orig, len, mod, len + 64, &nb);
	fprintf(stderr, "chunker: 64 B inserted in the middle: %.2f%% of %zu chunks already "
		"stored\n", pct, nb);
	cr_assert_geq(pct, 95.0, "only %.2f%% of chunks shared after a middle insertion", pct);
	free(mod);
	free(orig);
}

/*
 * store_cdc_feed: a stream fed in pieces of any size (single bytes, odd sizes, 1 MiB like FUSE
 * writes, pieces longer than STORE_CHUNK_MAX) is cut exactly where store_cdc_cut cuts the whole,
 * both in random bytes and in a run of zeros (only forced cuts at STORE_CHUNK_MAX).
 */
Test(chunker, feeding_in_pieces_cuts_like_the_whole, .timeout = 120)
{
	size_t len = 40 * MiB + 777;
	uint8_t *buf = tu_malloc(len);
	size_t *lens, n;
	/* bytes per piece; 0: random sizes 1..2 MiB */
	static const size_t pieces[] = { 1, 7, 0, 65536 + 3, MiB, 3 * MiB + 1, 5 * MiB };

	tu_fill_random(buf, len, 42);
	memset(buf + 20 * MiB, 0, 9 * MiB + 5); /* forced cuts in the middle */
	n = chunk_all(buf, len, &lens);
	cr_assert_gt(n, 20);
	for (size_t p = 0; p < sizeof(pieces) / sizeof(pieces[0]); p++) {
		struct store_cdc st = { 0 };
		size_t off = 0, start = 0, k = 0;
		uint64_t seed = p + 1;

		while (off < len) {
			/* 1-byte pieces only over the first 2 MiB: they are slow */
			size_t want = pieces[p] == 1 && off > 2 * MiB ? MiB - 5 : pieces[p];

			if (pieces[p] == 0)
				want = 1 + (size_t)(tu_splitmix64(&seed) % (2 * MiB));
			if (want > len - off)
				want = len - off;
			size_t c = store_cdc_feed(&st, buf + off, want);

			if (c == 0) {
				off += want;
				continue;
			}
			cr_assert(c <= want, "piece %zu: cut %zu past the %zu bytes fed", pieces[p], c,
				  want);
			cr_assert(k < n, "piece %zu: more chunks than store_cdc_cut's %zu", pieces[p],
				  n);
			cr_assert_eq(off + c - start, lens[k],
				     "piece %zu: chunk %zu is %zu bytes, not %zu", pieces[p], k,
				     off + c - start, lens[k]);
			cr_assert_eq(st.len, 0);
			k++;
			off += c;
			start = off;
		}
		/* the last chunk ends at EOF without a cut point */
		cr_assert_eq(k, n - 1, "piece %zu: %zu cuts, want %zu", pieces[p], k, n - 1);
		cr_assert_eq(len - start, lens[n - 1]);
		cr_assert_eq(st.len, len - start);
	}
	free(lens);
	free(buf);
}

/*
 * The chunker as its invariants (chunker.c) describe it, one byte at a time: no cut before
 * STORE_CHUNK_MIN, the Gear hash from 0 at STORE_CHUNK_MIN, a cut where the top 22 bits are zero
 * up to STORE_CHUNK_AVG and the top 18 after it, forced at STORE_CHUNK_MAX.
 */
static size_t plain_gear_cut(const uint8_t *p, size_t len)
{
	uint64_t h = 0;

	for (size_t i = STORE_CHUNK_MIN; i < len && i < STORE_CHUNK_MAX; i++) {
		h = (h << 1) + store_gear_table[p[i]];
		if (!(h & (~0ull << (i < STORE_CHUNK_AVG ? 64 - 22 : 64 - 18))))
			return i + 1;
	}
	return len < STORE_CHUNK_MAX ? len : STORE_CHUNK_MAX;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * The chunker's cuts are those of plain_gear_cut, with its AVX-512 filter (where the CPU has it)
 * and with its scalar loop alone, on 256 MiB of random bytes (~230 cuts, at every offset within
 * the filter's 2 KiB stripes) followed by runs that make the hash constant (zeros, a repeated
 * byte) and a periodic pattern. Prints the time of both scans, which is the filter's measurement.
 */
Test(chunker, vector_filter_cuts_like_the_plain_gear, .timeout = 240)
{
	size_t len = 256 * MiB + 20 * MiB;
	uint8_t *buf = tu_malloc(len);
	size_t *lens[2], n[2];
	double t[2];

	tu_fill_random(buf, 256 * MiB, 77);
	memset(buf + 256 * MiB, 0, 6 * MiB);
	memset(buf + 262 * MiB, 0xa5, 6 * MiB);
	for (size_t i = 268 * MiB; i < len; i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 13);
	for (int v = 0; v < 2; v++) {
		atomic_store(&store_cdc_scalar_only, v);
		t[v] = now_s();
		n[v] = chunk_all(buf, len, &lens[v]);
		t[v] = now_s() - t[v];
	}
	atomic_store(&store_cdc_scalar_only, 0);
	cr_log_info("chunking %zu MiB: %.3f s with the filter, %.3f s scalar", len / MiB, t[0],
		    t[1]);
	fprintf(stderr, "chunking %zu MiB: %.3f s with the filter, %.3f s scalar\n", len / MiB,
		t[0], t[1]);
	cr_assert_gt(n[0], 200);
	cr_assert_eq(n[0], n[1], "%zu cuts with the filter, %zu without", n[0], n[1]);
	for (size_t i = 0, off = 0; i < n[0]; off += lens[0][i], i++) {
		cr_assert_eq(lens[0][i], lens[1][i], "chunk %zu at %zu: %zu vs %zu", i, off,
			     lens[0][i], lens[1][i]);
		cr_assert_eq(lens[0][i], plain_gear_cut(buf + off, len - off), "chunk %zu at %zu",
			     i, off);
	}
	free(lens[0]);
	free(lens[1]);
	free(buf);
}
