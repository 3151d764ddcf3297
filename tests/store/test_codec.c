/*
 * test_codec.c — store_encode / store_decode: round trips of every codec, codec choice on
 * float-like and random data, strict rejection of malformed payloads; the chunk object of a
 * remote (store_object_encode / store_object_decode).
 */
#include <criterion/criterion.h>
#include <errno.h>
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

static const uint8_t all_codecs[] = { STORE_CODEC_RAW,	  STORE_CODEC_ZSTD,
				      STORE_CODEC_ZSTD_BG2, STORE_CODEC_ZSTD_BG4,
				      STORE_CODEC_PLANES2,  STORE_CODEC_PLANES4 };

/* A PLANES payload carries no checksum of its own (codec.c invariants 2 and 5). */
static bool has_checksum(uint8_t codec)
{
	return codec != STORE_CODEC_RAW && codec != STORE_CODEC_PLANES2 &&
	       codec != STORE_CODEC_PLANES4;
}

/* Roughly normal floats, mean 0, standard deviation about 0.02 (like trained weights). */
static float weight_like(uint64_t *s)
{
	double u = 0;
	int i;

	for (i = 0; i < 4; i++)
		u += (double)(tu_splitmix64(s) >> 11) / 9007199254740992.0;
	return (float)((u - 2.0) * 0.035);
}

/* len bytes of little-endian bf16 weights (round to nearest even from fp32). */
static void fill_bf16(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t s = seed;
	size_t i;

	for (i = 0; i + 2 <= len; i += 2) {
		float f = weight_like(&s);
		uint32_t bits;
		uint16_t b;

		memcpy(&bits, &f, 4);
		b = (uint16_t)((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
		buf[i] = (uint8_t)b;
		buf[i + 1] = (uint8_t)(b >> 8);
	}
	if (i < len)
		buf[i] = 0x3f;
}

/* len bytes of little-endian fp32 weights. */
static void fill_fp32(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t s = seed;
	size_t i;

	for (i = 0; i + 4 <= len; i += 4) {
		float f = weight_like(&s);

		memcpy(buf + i, &f, 4);
	}
	memset(buf + i, 0, len - i);
}

/* Text-like bytes: words from a small vocabulary. */
static void fill_text(uint8_t *buf, size_t len, uint64_t seed)
{
	static const char *words[] = { "model.", "layers.", "weight ", "bias ", "attn.", "mlp.",
				       "q_proj ", "k_proj ", "v_proj ", "\"dtype\": \"bf16\", " };
	uint64_t s = seed;
	size_t off = 0;

	while (off < len) {
		const char *w = words[tu_splitmix64(&s) % 10];
		size_t n = strlen(w);

		if (n > len - off)
			n = len - off;
		memcpy(buf + off, w, n);
		off += n;
	}
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Encode raw with codec, decode, compare. */
static void round_trip_as(uint8_t codec, const uint8_t *raw, size_t len)
{
	void *payload = NULL;
	size_t plen = 0;
	uint8_t *out = tu_malloc(len);
	int err;

	err = store_encode_as(codec, raw, len, 1, &payload, &plen);
	cr_assert_eq(err, 0, "encode codec %u len %zu: %d", codec, len, err);
	err = store_decode(codec, payload, plen, out, len);
	cr_assert_eq(err, 0, "decode codec %u len %zu: %d", codec, len, err);
	cr_assert(len == 0 || memcmp(out, raw, len) == 0, "codec %u len %zu differs", codec, len);
	free(payload);
	free(out);
}

/* store_encode with its own choice, then decode and compare; returns the codec. */
static uint8_t round_trip_auto(const uint8_t *raw, size_t len, size_t *ret_plen)
{
	void *payload = NULL;
	size_t plen = 0;
	uint8_t codec = 0xff;
	uint8_t *out = tu_malloc(len);
	int err;

	err = store_encode(raw, len, 1, &payload, &plen, &codec);
	cr_assert_eq(err, 0, "encode len %zu: %d", len, err);
	cr_assert(codec <= STORE_CODEC_MAX);
	if (codec != STORE_CODEC_RAW)
		cr_assert(plen * 100 <= len * 97, "codec %u kept at %zu/%zu", codec, plen, len);
	else
		cr_assert_eq(plen, len);
	err = store_decode(codec, payload, plen, out, len);
	cr_assert_eq(err, 0, "decode codec %u len %zu: %d", codec, len, err);
	cr_assert(len == 0 || memcmp(out, raw, len) == 0);
	free(payload);
	free(out);
	*ret_plen = plen;
	return codec;
}

Test(codec, round_trip_every_codec_every_size)
{
	static const size_t sizes[] = { 0, 1, 3, 4095, MiB, 4 * MiB };
	uint8_t *buf = tu_malloc(4 * MiB);
	size_t i, j, k, plen;

	for (k = 0; k < 3; k++) {
		for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			if (k == 0)
				tu_fill_random(buf, sizes[i], i + 1);
			else if (k == 1)
				fill_bf16(buf, sizes[i], i + 1);
			else
				fill_text(buf, sizes[i], i + 1);
			for (j = 0; j < sizeof(all_codecs); j++)
				round_trip_as(all_codecs[j], buf, sizes[i]);
			round_trip_auto(buf, sizes[i], &plen);
		}
	}
	free(buf);
}

Test(codec, tail_bytes_of_byte_grouping)
{
	uint8_t buf[64];
	size_t len, j;

	/* Every length mod 2 and mod 4, so tails of 1, 2 and 3 bytes are exercised. */
	tu_fill_random(buf, sizeof(buf), 3);
	for (len = 0; len <= sizeof(buf); len++)
		for (j = 0; j < sizeof(all_codecs); j++)
			round_trip_as(all_codecs[j], buf, len);
}

/*
 * encode_report - encode buf (len bytes) with the automatic choice, check it decodes to buf, and
 * print the ratio against plain zstd and the rates (printed, never asserted: figures belong to
 * the benchmark). Returns the codec chosen; its payload size in *plen, plain zstd's in *zlen.
 */
static uint8_t encode_report(const char *what, const uint8_t *buf, uint8_t *out, size_t len,
			     size_t *plen, size_t *zlen)
{
	void *payload;
	uint8_t codec;
	double t0, t1, t2;

	t0 = now_s();
	cr_assert_eq(store_encode(buf, len, 1, &payload, plen, &codec), 0);
	t1 = now_s();
	cr_assert_eq(store_decode(codec, payload, *plen, out, len), 0);
	t2 = now_s();
	cr_assert_eq(memcmp(buf, out, len), 0);
	if (codec == STORE_CODEC_PLANES2) {
		/* the mantissa plane (byte 0) is random-looking: stored raw, not compressed */
		const uint8_t *p = payload;

		cr_assert_eq(p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24, len / 2,
			     "%s: plane 0 not stored raw", what);
	}
	free(payload);
	cr_assert(store_encode_as(STORE_CODEC_ZSTD, buf, len, 1, &payload, zlen) == 0);
	free(payload);
	fprintf(stderr, "codec: %s 4 MiB -> codec %u ratio %.3f (plain zstd %.3f), "
		"encode %.0f MB/s, decode %.0f MB/s\n", what, codec, (double)*plen / len,
		(double)*zlen / len, len / (t1 - t0) / 1e6, len / (t2 - t1) / 1e6);
	return codec;
}

Test(codec, bf16_and_fp32_use_byte_grouping)
{
	size_t len = 4 * MiB, plen, zlen;
	uint8_t *buf = tu_malloc(len);
	uint8_t *out = tu_malloc(len);
	uint8_t codec;

	fill_bf16(buf, len, 11);
	codec = encode_report("bf16", buf, out, len, &plen, &zlen);
	cr_assert_eq(codec, STORE_CODEC_PLANES2, "bf16 got codec %u", codec);
	cr_assert_lt((double)plen / len, 0.72);

	fill_fp32(buf, len, 12);
	codec = encode_report("fp32", buf, out, len, &plen, &zlen);
	cr_assert_eq(codec, STORE_CODEC_PLANES4, "fp32 got codec %u", codec);
	cr_assert_lt(plen, zlen);
	free(out);
	free(buf);
}

Test(codec, random_and_text_choices)
{
	size_t len = MiB;
	uint8_t *buf = tu_malloc(len);
	size_t plen;

	tu_fill_random(buf, len, 13);
	cr_assert_eq(round_trip_auto(buf, len, &plen), STORE_CODEC_RAW);
	cr_assert_eq(plen, len);
	fill_text(buf, len, 14);
	cr_assert_eq(round_trip_auto(buf, len, &plen), STORE_CODEC_ZSTD);
	cr_assert_lt(plen, len / 4);
	/* Mostly random with a compressible sample region still must obey the 3% rule. */
	tu_fill_random(buf, len, 15);
	memset(buf + len / 2 - 40000, 0, 80000);
	round_trip_auto(buf, len, &plen);
	free(buf);
}

/* store_sample_compresses: 0 exactly where store_encode's sample gives up (it then stores RAW),
 * 1 for float weights, optimizer moments and text. */
Test(codec, sample_verdict_matches_the_encoder)
{
	size_t len = MiB, plen;
	uint8_t *buf = tu_malloc(len);
	void *p;
	uint8_t codec;

	for (int kind = 0; kind < 5; kind++) {
		int want = kind != 3;

		if (kind == 0)
			fill_bf16(buf, len, 31);
		else if (kind == 1)
			fill_fp32(buf, len, 32);
		else if (kind == 2)
			fill_text(buf, len, 33);
		else if (kind == 3)
			tu_fill_random(buf, len, 34);
		else
			memset(buf, 0, len);
		cr_assert_eq(store_sample_compresses(buf, len, 1), want, "kind %d", kind);
		cr_assert_eq(store_encode(buf, len, 1, &p, &plen, &codec), 0);
		cr_assert_eq(codec == STORE_CODEC_RAW, !want, "kind %d: codec %u", kind, codec);
		free(p);
	}
	/* compressible only in the sample: 1, and store_encode's 3% rule still stores it RAW */
	tu_fill_random(buf, len, 35);
	memset(buf + len / 2 - 10000, 0, 20000);
	cr_assert_eq(store_sample_compresses(buf, len, 1), 1);
	cr_assert_eq(store_encode(buf, len, 1, &p, &plen, &codec), 0);
	cr_assert_eq(codec, STORE_CODEC_RAW);
	free(p);
	free(buf);
}

/* store_encode_tls: the same payloads as store_encode, in one buffer of the thread reused from
 * call to call (so a payload is gone at the next call), RAW as the raw bytes themselves. */
Test(codec, thread_buffer_encode_matches)
{
	size_t len = 4 * MiB;
	uint8_t *bf = tu_malloc(len), *fp = tu_malloc(len), *rnd = tu_malloc(MiB);
	uint8_t *out = tu_malloc(len);
	const void *t1, *t2;
	void *own;
	size_t l1, l2, lown;
	uint8_t c1, c2, cown;

	fill_bf16(bf, len, 21);
	fill_fp32(fp, len, 22);
	tu_fill_random(rnd, MiB, 23);
	cr_assert_eq(store_encode_tls(bf, len, 1, &t1, &l1, &c1), 0);
	cr_assert_eq(store_encode(bf, len, 1, &own, &lown, &cown), 0);
	cr_assert_eq(c1, cown);
	cr_assert_eq(l1, lown);
	cr_assert_eq(memcmp(t1, own, l1), 0, "the thread's payload differs from store_encode's");
	free(own);
	cr_assert_eq(store_decode(c1, t1, l1, out, len), 0);
	cr_assert_eq(memcmp(out, bf, len), 0);
	cr_assert_eq(store_encode_tls(fp, len, 1, &t2, &l2, &c2), 0);
	cr_assert_eq(t2, t1, "the thread's buffer was not reused");
	/* room for a chunk file header in front, the whole aligned for O_DIRECT */
	cr_assert_eq(store_encode_tls_head(t2), (const uint8_t *)t2 - STORE_HDR_LEN);
	cr_assert_eq((uintptr_t)store_encode_tls_head(t2) % STORE_DIRECT_ALIGN, 0);
	cr_assert_null(store_encode_tls_head(fp));
	cr_assert_eq(store_decode(c2, t2, l2, out, len), 0);
	cr_assert_eq(memcmp(out, fp, len), 0);
	cr_assert_eq(store_encode_tls(rnd, MiB, 1, &t1, &l1, &c1), 0);
	cr_assert_eq(c1, STORE_CODEC_RAW);
	cr_assert_eq(t1, (const void *)rnd, "a RAW payload is the raw bytes, not a copy");
	cr_assert_null(store_encode_tls_head(t1));
	cr_assert_eq(l1, MiB);
	free(out);
	free(rnd);
	free(fp);
	free(bf);
}

Test(codec, malformed_payloads_are_rejected, .timeout = 120)
{
	size_t len = 16 * 1024;
	uint8_t *raw = tu_malloc(len);
	uint8_t *out = tu_malloc(len + 8);
	uint8_t *bad;
	size_t j, i, plen, eio, total;
	void *payload;
	int err;

	fill_bf16(raw, len / 2, 21);
	fill_text(raw + len / 2, len / 2, 22);
	cr_assert_eq(store_decode(7, raw, len, out, len), -EINVAL);
	cr_assert_eq(store_decode(STORE_CODEC_RAW, raw, len - 1, out, len), -EIO);
	cr_assert_eq(store_decode(STORE_CODEC_RAW, raw, len, out, len - 1), -EIO);
	for (j = 1; j < sizeof(all_codecs); j++) {
		uint8_t c = all_codecs[j];

		cr_assert_eq(store_encode_as(c, raw, len, 1, &payload, &plen), 0);
		bad = tu_malloc(plen + 16);
		memcpy(bad, payload, plen);
		/* Wrong expected size, either way. */
		cr_assert_eq(store_decode(c, bad, plen, out, len - 1), -EIO);
		cr_assert_eq(store_decode(c, bad, plen, out, len + 1), -EIO);
		/* Every truncation. */
		for (i = 0; i < plen; i++)
			cr_assert_eq(store_decode(c, bad, i, out, len), -EIO,
				     "codec %u truncated to %zu accepted", c, i);
		/* Trailing garbage, and a second frame appended. */
		memset(bad + plen, 0, 16);
		cr_assert_eq(store_decode(c, bad, plen + 1, out, len), -EIO);
		cr_assert_eq(store_decode(c, bad, plen + 16, out, len), -EIO);
		/* Every byte garbled: an error, or (a harmless bit such as the window size) the
		 * exact original bytes; never different bytes. Without a checksum (PLANES), a
		 * garbled plane may decode to other bytes, which the chunk's digest catches
		 * (test_chunkstore), but a garbled stored length is always an error. */
		eio = total = 0;
		for (i = 0; i < plen; i++) {
			memcpy(bad, payload, plen);
			bad[i] ^= (uint8_t)(1u << (i % 8));
			memset(out, 0xee, len);
			err = store_decode(c, bad, plen, out, len);
			total++;
			if (err == -EIO) {
				eio++;
				continue;
			}
			cr_assert_eq(err, 0, "codec %u byte %zu: %d", c, i, err);
			if (!has_checksum(c)) {
				/* the header: one u32 per plane */
				cr_assert_geq(i, c == STORE_CODEC_PLANES2 ? 8u : 16u,
					      "codec %u: garbled stored length %zu accepted", c,
					      i / 4);
				continue;
			}
			cr_assert_eq(memcmp(out, raw, len), 0,
				     "codec %u: garbled byte %zu decoded to other bytes", c, i);
		}
		fprintf(stderr, "codec: %u garbled payloads rejected: %zu of %zu\n", c, eio, total);
		if (has_checksum(c))
			cr_assert_geq(eio * 100, total * 95);
		free(bad);
		free(payload);
	}
	free(out);
	free(raw);
}

/*
 * The frame's XXH64 content checksum: store_decode checks it, store_decode_digested (whose caller
 * checks the XXH3-128 of the output itself) does not. A frame whose last 4 bytes, the checksum,
 * are damaged: store_decode -EIO, store_decode_digested the right bytes. Both decode every codec
 * of an intact frame to the same bytes.
 */
Test(codec, digested_decode_skips_only_the_frame_checksum)
{
	size_t len = 1 * MiB + 6;
	uint8_t *buf = tu_malloc(len), *out = tu_malloc(len);
	static const uint8_t codecs[] = { STORE_CODEC_ZSTD, STORE_CODEC_ZSTD_BG2,
					  STORE_CODEC_ZSTD_BG4 };

	fill_bf16(buf, len, 77);
	for (size_t i = 0; i < sizeof(codecs); i++) {
		void *payload;
		size_t plen;

		cr_assert_eq(store_encode_as(codecs[i], buf, len, 1, &payload, &plen), 0);
		memset(out, 0, len);
		cr_assert_eq(store_decode_digested(codecs[i], payload, plen, out, len), 0);
		cr_assert(memcmp(buf, out, len) == 0, "codec %u", codecs[i]);
		((uint8_t *)payload)[plen - 1] ^= 0x5a; /* the checksum's last byte */
		cr_assert_eq(store_decode(codecs[i], payload, plen, out, len), -EIO,
			     "codec %u: a wrong checksum passed store_decode", codecs[i]);
		memset(out, 0, len);
		cr_assert_eq(store_decode_digested(codecs[i], payload, plen, out, len), 0,
			     "codec %u", codecs[i]);
		cr_assert(memcmp(buf, out, len) == 0, "codec %u", codecs[i]);
		free(payload);
	}
	free(buf);
	free(out);
}

/* store_object_encode/decode: the chunk object of a remote (fs/node) round-trips weight-like
 * and random bytes, and refuses a wrong digest, a short object, an unknown codec and a raw
 * size that does not match its payload. */
Test(codec, chunk_object_round_trip_and_refusals)
{
	size_t len = 300000, olen;
	uint8_t *buf = malloc(len), *raw;
	struct store_hash h, other;
	uint64_t s = 42;
	uint32_t rlen;
	void *obj;

	cr_assert_not_null(buf);
	for (size_t i = 0; i + 4 <= len; i += 4) {
		float f = weight_like(&s);

		memcpy(buf + i, &f, 4);
	}
	store_hash_buf(buf, len, &h);
	cr_assert_eq(store_object_encode(buf, len, 3, &obj, &olen), 0);
	cr_assert_lt(olen, len, "weight-like bytes compress");
	cr_assert_eq(store_object_decode(obj, olen, &h, &raw, &rlen), 0);
	cr_assert_eq(rlen, len);
	cr_assert(memcmp(raw, buf, len) == 0);
	free(raw);

	store_hash_buf("x", 1, &other);
	cr_assert_eq(store_object_decode(obj, olen, &other, &raw, &rlen), -EBADMSG);
	cr_assert_eq(store_object_decode(obj, STORE_OBJECT_HEADER - 1, &h, &raw, &rlen), -EIO);
	((uint8_t *)obj)[0] = 0xee; /* no such codec */
	cr_assert_eq(store_object_decode(obj, olen, &h, &raw, &rlen), -EIO);
	free(obj);

	cr_assert_eq(store_object_encode(buf, 1000, 3, &obj, &olen), 0);
	((uint8_t *)obj)[1] ^= 1; /* raw size 1001 or 999: the payload decodes to 1000 */
	cr_assert_eq(store_object_decode(obj, olen, &h, &raw, &rlen), -EIO);
	free(obj);
	cr_assert_eq(store_object_encode(buf, STORE_CHUNK_MAX + 1, 3, &obj, &olen), -EINVAL);
	free(buf);
}
