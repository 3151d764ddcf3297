/*
 * codec.c — payload codecs of chunk files: RAW, zstd, and 2-/4-byte byte-grouping, each byte
 * plane stored raw or as its own zstd frame (PLANES2/4, what new chunks of float data get) or
 * all planes in one zstd frame (ZSTD_BG2/4: decoded, never chosen by store_encode).
 *
 * Byte-grouping (the "byte plane" split of ZipNN, arXiv 2411.05239): the raw bytes are read as
 * n = len / w words of w bytes and written as w planes of n bytes, plane p holding byte p of every
 * word; the len % w tail bytes that do not fill a word follow the planes unchanged. The exponent
 * bytes of bf16 (w = 2) and fp32 (w = 4) then sit together and compress better than the
 * interleaved words do.
 *
 * Invariants:
 *   1. store_decode accepts a payload only if it decodes to exactly raw_size bytes: RAW payloads
 *      are exactly raw_size long; zstd payloads are exactly one frame that fills payload_len and
 *      declares raw_size as its content size. Anything else is -EIO, never a crash.
 *   2. store_encode returns a non-RAW codec only when the payload is at most 97% of len.
 *      Every zstd frame carries its content size. A ZSTD or ZSTD_BG2/4 frame also carries an
 *      XXH64 checksum of its content (4 bytes), so a garbled payload fails in zstd rather than
 *      only at the caller's digest check; store_decode_digested, for a caller that does that
 *      check, skips this one. A PLANES payload has no checksum of its own (invariant 5): its
 *      integrity is the chunk's XXH3-128 digest, which the chunk store checks on every read
 *      (store.h invariant 2), as it does for RAW.
 *   3. Each thread owns one struct codec_tls (zstd contexts and scratch buffers), created on first
 *      use and freed by the pthread key destructor when the thread exits; nothing is shared, so
 *      there is no lock.
 *   4. In a byte-grouped frame no zstd block holds bytes of two planes: each block gets its own
 *      entropy tables, which is where the gain of grouping comes from (zstd blocks are up to
 *      128 KiB, so without this a 16 KiB sample or a small chunk would show no gain at all).
 *   5. A PLANES payload of raw_size bytes in w planes of n = raw_size / w bytes is: w stored
 *      lengths (u32 little-endian, plane 0 first), then each plane's bytes in order, then the
 *      raw_size % w tail bytes unchanged. A stored length of n means the plane is stored raw; one
 *      below n means a zstd frame (content size n, no checksum) that long; above n is malformed.
 *      The encoder compresses only the planes whose sample shrank (a mantissa plane of float
 *      data does not), so zstd never spends a histogram, a literal copy and a checksum on a
 *      plane it would store raw.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif
/* ZSTD_c_literalCompressionMode (experimental in zstd 1.5; Debian 12 ships 1.5.4) */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#include <zstd_errors.h>

#include "store/store.h"
#include "store/store_int.h"

/*
 * Bytes compressed with each candidate codec to choose one: 16 KiB from the middle of the chunk,
 * away from the framework headers that often start a file. About 3 x 16 KiB of trial compression
 * per 1 MiB chunk: large enough that bf16 weights and fp32 Adam moments get the same codec
 * choices as a larger sample would give them, small enough to cost little beside the chunk's own
 * encoding.
 */
#define SAMPLE_LEN (16u * 1024u)

/*
 * A sample whose best trial is not at least this much smaller (1/64, ~1.6%) is taken as
 * incompressible and the chunk is stored RAW without compressing it whole (saves a full zstd pass
 * on random-looking data; the 3% rule of invariant 2 would reject it anyway in almost all cases).
 */
#define SAMPLE_GIVE_UP_SHIFT 6

/* Byte-grouping must beat plain zstd on the sample by 1/64 to be worth its transposition. */
#define BG_MARGIN_SHIFT 6

/* A PLANES payload's header, bytes: one u32 stored length per plane (invariant 5). */
#define PLANES_HDR(w) (4u * (w))

/*
 * Byte planes at the default level (1) are entropy-coded rather than LZ-compressed: zstd's fast
 * strategy at acceleration 1000 finds almost no matches, and Huffman coding of the literals is
 * forced on (negative levels leave it off by default). A byte plane of floats has no repeats
 * worth finding; what it has is a skewed byte distribution (ZipNN, arXiv 2411.05239, codes
 * exponents with Huffman only): on byte planes of bf16 and fp32 it compresses a little better
 * than level 1 and encodes and decodes faster.
 * The frames are standard zstd frames: the decoder does not depend on the level they were
 * written at.
 * A -o zstd_level above 1 is used as given (LZ at that level) for every codec.
 */
#define BG_ENTROPY_LEVEL (-1000)

struct codec_tls {
	ZSTD_CCtx *cctx;
	ZSTD_DCtx *dctx;
	uint8_t *scratch; /* byte planes of a whole chunk */
	size_t scratch_cap;
	uint8_t *sample_dst; /* ZSTD_compressBound(SAMPLE_LEN) bytes */
	uint8_t *out;        /* STORE_DIRECT_ALIGN-aligned: STORE_HDR_LEN bytes of room for a
			      * chunk file header, then store_encode_tls's payloads */
	size_t out_cap;      /* bytes of payload out has room for */
	uint8_t sample_planes[SAMPLE_LEN];
};

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static int tls_key_err;

/* Free one thread's codec state; the pthread key destructor, also used on setup failure. */
static void tls_free(void *p)
{
	struct codec_tls *t = p;

	if (!t)
		return;
	ZSTD_freeCCtx(t->cctx);
	ZSTD_freeDCtx(t->dctx);
	free(t->scratch);
	free(t->sample_dst);
	free(t->out);
	free(t);
}

/* pthread_once routine creating the key of the per-thread state. */
static void tls_key_init(void)
{
	tls_key_err = pthread_key_create(&tls_key, tls_free);
}

/* This thread's codec state, created on first use (invariant 3); NULL on ENOMEM. */
static struct codec_tls *tls_get(void)
{
	struct codec_tls *t;

	pthread_once(&tls_once, tls_key_init);
	if (tls_key_err)
		return NULL;
	t = pthread_getspecific(tls_key);
	if (t)
		return t;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->cctx = ZSTD_createCCtx();
	t->dctx = ZSTD_createDCtx();
	t->sample_dst = malloc(ZSTD_compressBound(SAMPLE_LEN));
	if (!t->cctx || !t->dctx || !t->sample_dst || pthread_setspecific(tls_key, t)) {
		tls_free(t);
		return NULL;
	}
	return t;
}

/* Make t->scratch at least len bytes. Returns 0 or -ENOMEM. */
static int tls_scratch(struct codec_tls *t, size_t len)
{
	uint8_t *p;

	if (len == 0)
		len = 1; /* never leave scratch NULL: callers do pointer arithmetic on it */
	if (t->scratch_cap >= len)
		return 0;
	p = realloc(t->scratch, len);
	if (!p)
		return -ENOMEM;
	t->scratch = p;
	t->scratch_cap = len;
	return 0;
}

#ifdef __SSE2__
/*
 * SSE2 (part of x86-64 itself) for whole groups of 16 words; returns how many words it did.
 * The byte loops below do the rest, and all of it elsewhere. gcc -O2 does not vectorize the
 * strided loops, which run over every byte store_decode decodes from byte planes.
 */
static size_t bg_split_simd(const uint8_t *restrict in, size_t n, unsigned w,
			    uint8_t *restrict out)
{
	size_t i = 0;

	if (w == 2) {
		const __m128i lo = _mm_set1_epi16(0x00ff);

		for (; i + 16 <= n; i += 16) {
			__m128i x0 = _mm_loadu_si128((const __m128i *)(in + 2 * i));
			__m128i x1 = _mm_loadu_si128((const __m128i *)(in + 2 * i + 16));

			_mm_storeu_si128((__m128i *)(out + i),
					 _mm_packus_epi16(_mm_and_si128(x0, lo), _mm_and_si128(x1, lo)));
			_mm_storeu_si128((__m128i *)(out + n + i),
					 _mm_packus_epi16(_mm_srli_epi16(x0, 8), _mm_srli_epi16(x1, 8)));
		}
		return i;
	}
	const __m128i lo = _mm_set1_epi32(0xff);

	for (; i + 16 <= n; i += 16) {
		__m128i x[4];

		for (int k = 0; k < 4; k++)
			x[k] = _mm_loadu_si128((const __m128i *)(in + 4 * i + 16 * k));
		for (int b = 0; b < 4; b++) {
			__m128i y[4];

			for (int k = 0; k < 4; k++) /* byte b of each word, 0..255 in an int32 */
				y[k] = _mm_and_si128(_mm_srli_epi32(x[k], 8 * b), lo);
			/* 0..255 survive the signed saturation of packs_epi32 exactly */
			_mm_storeu_si128((__m128i *)(out + (size_t)b * n + i),
					 _mm_packus_epi16(_mm_packs_epi32(y[0], y[1]),
							  _mm_packs_epi32(y[2], y[3])));
		}
	}
	return i;
}

static size_t bg_join_simd(const uint8_t *const pl[4], size_t n, unsigned w,
			   uint8_t *restrict out)
{
	size_t i = 0;

	if (w == 2) {
		for (; i + 16 <= n; i += 16) {
			__m128i a = _mm_loadu_si128((const __m128i *)(pl[0] + i));
			__m128i b = _mm_loadu_si128((const __m128i *)(pl[1] + i));

			_mm_storeu_si128((__m128i *)(out + 2 * i), _mm_unpacklo_epi8(a, b));
			_mm_storeu_si128((__m128i *)(out + 2 * i + 16), _mm_unpackhi_epi8(a, b));
		}
		return i;
	}
	for (; i + 16 <= n; i += 16) {
		__m128i p0 = _mm_loadu_si128((const __m128i *)(pl[0] + i));
		__m128i p1 = _mm_loadu_si128((const __m128i *)(pl[1] + i));
		__m128i p2 = _mm_loadu_si128((const __m128i *)(pl[2] + i));
		__m128i p3 = _mm_loadu_si128((const __m128i *)(pl[3] + i));
		__m128i t0 = _mm_unpacklo_epi8(p0, p1), t1 = _mm_unpackhi_epi8(p0, p1);
		__m128i t2 = _mm_unpacklo_epi8(p2, p3), t3 = _mm_unpackhi_epi8(p2, p3);

		_mm_storeu_si128((__m128i *)(out + 4 * i), _mm_unpacklo_epi16(t0, t2));
		_mm_storeu_si128((__m128i *)(out + 4 * i + 16), _mm_unpackhi_epi16(t0, t2));
		_mm_storeu_si128((__m128i *)(out + 4 * i + 32), _mm_unpacklo_epi16(t1, t3));
		_mm_storeu_si128((__m128i *)(out + 4 * i + 48), _mm_unpackhi_epi16(t1, t3));
	}
	return i;
}
#else
static size_t bg_split_simd(const uint8_t *restrict in, size_t n, unsigned w,
			    uint8_t *restrict out)
{
	return 0;
}

static size_t bg_join_simd(const uint8_t *const pl[4], size_t n, unsigned w,
			   uint8_t *restrict out)
{
	return 0;
}
#endif

/* Split len bytes of in into w byte planes at out (w = 2 or 4); the tail is copied unchanged. */
static void bg_split(const uint8_t *restrict in, size_t len, unsigned w, uint8_t *restrict out)
{
	size_t n = len / w;
	size_t i = bg_split_simd(in, n, w, out);

	if (w == 2) {
		for (; i < n; i++) {
			out[i] = in[2 * i];
			out[n + i] = in[2 * i + 1];
		}
	} else {
		for (; i < n; i++) {
			out[i] = in[4 * i];
			out[n + i] = in[4 * i + 1];
			out[2 * n + i] = in[4 * i + 2];
			out[3 * n + i] = in[4 * i + 3];
		}
	}
	if (len > n * w)
		memcpy(out + n * w, in + n * w, len - n * w);
}

/*
 * Inverse of bg_split, from planes anywhere: pl[0..w) are the w planes of n = len / w bytes each,
 * tail the len % w bytes after them. The planes of a PLANES payload stored raw are joined
 * straight from the payload (invariant 5), without a copy into the scratch buffer first.
 */
static void bg_join(const uint8_t *const pl[4], const uint8_t *tail, size_t len, unsigned w,
		    uint8_t *restrict out)
{
	size_t n = len / w;
	size_t i = bg_join_simd(pl, n, w, out);

	if (w == 2) {
		for (; i < n; i++) {
			out[2 * i] = pl[0][i];
			out[2 * i + 1] = pl[1][i];
		}
	} else {
		for (; i < n; i++) {
			out[4 * i] = pl[0][i];
			out[4 * i + 1] = pl[1][i];
			out[4 * i + 2] = pl[2][i];
			out[4 * i + 3] = pl[3][i];
		}
	}
	if (len > n * w)
		memcpy(out + n * w, tail, len - n * w);
}

/* Word width of a byte-grouped codec, 0 for the others. */
static unsigned codec_width(uint8_t codec)
{
	switch (codec) {
	case STORE_CODEC_ZSTD_BG2:
	case STORE_CODEC_PLANES2:
		return 2;
	case STORE_CODEC_ZSTD_BG4:
	case STORE_CODEC_PLANES4:
		return 4;
	default:
		return 0;
	}
}

static bool codec_is_planes(uint8_t codec)
{
	return codec == STORE_CODEC_PLANES2 || codec == STORE_CODEC_PLANES4;
}

/*
 * Compress len bytes at src into dst (cap bytes) as one zstd frame with its content size.
 * When w > 0, src holds w byte planes of len / w bytes (then the tail): the frame is flushed at
 * each plane's end so that no zstd block straddles two planes (invariant 4). When plane, src is
 * one byte plane of a PLANES payload. Byte planes at level 1 are entropy-coded only
 * (BG_ENTROPY_LEVEL). Every frame but a plane's carries an XXH64 content checksum (invariant 2).
 * Returns the frame size, 0 when it does not fit in cap, or -EIO.
 */
static ssize_t zstd_frame(struct codec_tls *t, void *dst, size_t cap, const void *src, size_t len,
			  unsigned w, int level, bool plane)
{
	ZSTD_outBuffer out = { dst, cap, 0 };
	size_t plane_len = w ? len / w : 0;
	unsigned p;
	size_t r;

	bool entropy = (w || plane) && level <= 1;

	r = ZSTD_CCtx_reset(t->cctx, ZSTD_reset_session_only);
	if (!ZSTD_isError(r))
		r = ZSTD_CCtx_setParameter(t->cctx, ZSTD_c_compressionLevel,
					   entropy ? BG_ENTROPY_LEVEL : level);
	/* ZSTD_ps_auto (0) restores the level's default for the next frame of this context */
	if (!ZSTD_isError(r))
		r = ZSTD_CCtx_setParameter(t->cctx, ZSTD_c_literalCompressionMode,
					   entropy ? ZSTD_ps_enable : ZSTD_ps_auto);
	if (!ZSTD_isError(r))
		r = ZSTD_CCtx_setParameter(t->cctx, ZSTD_c_checksumFlag, !plane);
	if (!ZSTD_isError(r) && !w)
		r = ZSTD_compress2(t->cctx, dst, cap, src, len);
	if (!ZSTD_isError(r) && w)
		r = ZSTD_CCtx_setPledgedSrcSize(t->cctx, len);
	for (p = 0; w && p <= w && !ZSTD_isError(r); p++) {
		/* Piece p < w is plane p, flushed; piece w is the tail, and ends the frame. */
		ZSTD_EndDirective mode = p < w ? ZSTD_e_flush : ZSTD_e_end;
		ZSTD_inBuffer in;

		in.src = (const uint8_t *)src + p * plane_len;
		in.size = p < w ? plane_len : len - w * plane_len;
		in.pos = 0;

		do {
			r = ZSTD_compressStream2(t->cctx, &out, &in, mode);
			if (ZSTD_isError(r))
				break;
			if ((r || in.pos < in.size) && out.pos == out.size) {
				ZSTD_CCtx_reset(t->cctx, ZSTD_reset_session_only);
				return 0; /* does not fit */
			}
		} while (r || in.pos < in.size);
		if (!ZSTD_isError(r))
			r = out.pos;
	}
	if (!ZSTD_isError(r))
		return (ssize_t)r;
	ZSTD_CCtx_reset(t->cctx, ZSTD_reset_session_only);
	if (ZSTD_getErrorCode(r) == ZSTD_error_dstSize_tooSmall)
		return 0;
	return -EIO;
}

/*
 * Encode w byte planes of n = len / w bytes at src (then the tail) as a PLANES payload
 * (invariant 5) into dst (cap bytes): plane p as a zstd frame when bit p of mask is set and the
 * frame comes out shorter than the plane, else raw. Returns the payload size, 0 when it does
 * not fit in cap, or -EIO.
 */
static ssize_t planes_payload(struct codec_tls *t, uint8_t *dst, size_t cap, const uint8_t *src,
			      size_t len, unsigned w, int level, unsigned mask)
{
	size_t n = len / w, tail = len - w * n, pos = PLANES_HDR(w);

	if (cap < pos)
		return 0;
	for (unsigned p = 0; p < w; p++) {
		const uint8_t *plane = src + p * n;
		size_t stored = n;

		if ((mask >> p & 1) && n > 1 && cap > pos) {
			/* a frame must be shorter than the plane: a stored length of n means raw */
			size_t fcap = cap - pos < n - 1 ? cap - pos : n - 1;
			ssize_t r = zstd_frame(t, dst + pos, fcap, plane, n, 0, level, true);

			if (r < 0)
				return r;
			if (r > 0)
				stored = (size_t)r;
		}
		if (stored == n) {
			if (cap - pos < n)
				return 0;
			memcpy(dst + pos, plane, n);
		}
		store_put_le32(dst + 4 * p, (uint32_t)stored);
		pos += stored;
	}
	if (cap - pos < tail)
		return 0;
	memcpy(dst + pos, src + w * n, tail);
	return (ssize_t)(pos + tail);
}

/* The sample choose_codec and store_sample_compresses trial: 16 KiB from the middle of raw. */
static const uint8_t *sample_of(const uint8_t *raw, size_t len, size_t *ret_len)
{
	if (len <= SAMPLE_LEN) {
		*ret_len = len;
		return raw;
	}
	*ret_len = SAMPLE_LEN;
	/* 4-aligned so the sample's words are the chunk's words. */
	return raw + (((len - SAMPLE_LEN) / 2) & ~(size_t)3);
}

/* Whether a trial of total bytes for a sample of slen bytes gives up (stored RAW). */
static bool trial_gives_up(ssize_t total, size_t slen)
{
	return (size_t)total >= slen - (slen >> SAMPLE_GIVE_UP_SHIFT);
}

/*
 * Trial of the sample s (slen bytes) as a PLANES payload of w-byte words: each plane's zstd
 * frame counted when it shrinks the plane by 1/2^SAMPLE_GIVE_UP_SHIFT (its bit set in
 * *ret_mask), else the plane's own length. Returns the total payload bytes or -EIO.
 */
static ssize_t planes_trial(struct codec_tls *t, const uint8_t *s, size_t slen, unsigned w,
			    int level, unsigned *ret_mask)
{
	size_t cap = ZSTD_compressBound(SAMPLE_LEN), n = slen / w;
	ssize_t total = (ssize_t)(PLANES_HDR(w) + slen - w * n), r;
	unsigned mask = 0;

	bg_split(s, slen, w, t->sample_planes);
	for (unsigned p = 0; p < w; p++) {
		r = zstd_frame(t, t->sample_dst, cap, t->sample_planes + p * n, n, 0, level, true);
		if (r <= 0 && n > 0)
			return -EIO;
		if (n > 0 && (size_t)r < n - (n >> SAMPLE_GIVE_UP_SHIFT)) {
			mask |= 1u << p;
			total += r;
		} else {
			total += (ssize_t)n;
		}
	}
	*ret_mask = mask;
	return total;
}

/*
 * Trial-compress a sample of raw plainly and as byte planes of 2 and 4 bytes and return the
 * best codec (PLANES2/4 with *ret_mask, the planes worth compressing), or RAW when even the
 * best does not shrink the sample by 1/2^SAMPLE_GIVE_UP_SHIFT. Returns a codec or -EIO.
 */
static int choose_codec(struct codec_tls *t, const uint8_t *raw, size_t len, int level,
			unsigned *ret_mask)
{
	static const uint8_t planes[] = { STORE_CODEC_PLANES2, STORE_CODEC_PLANES4 };
	size_t slen;
	const uint8_t *s = sample_of(raw, len, &slen);
	ssize_t best_len;
	int best = STORE_CODEC_ZSTD;

	*ret_mask = 0;
	best_len =
	    zstd_frame(t, t->sample_dst, ZSTD_compressBound(SAMPLE_LEN), s, slen, 0, level, false);
	if (best_len <= 0)
		return -EIO; /* cap is the bound: 0 cannot happen */
	for (size_t i = 0; i < sizeof(planes); i++) {
		unsigned mask;
		ssize_t total = planes_trial(t, s, slen, codec_width(planes[i]), level, &mask);

		if (total < 0)
			return (int)total;
		/* a trial that passes where the best so far gives up wins whatever the margin:
		 * then RAW means that every trial gives up, as store_sample_compresses says */
		if ((best == STORE_CODEC_ZSTD ? total < best_len - (best_len >> BG_MARGIN_SHIFT)
					      : total < best_len) ||
		    (trial_gives_up(best_len, slen) && !trial_gives_up(total, slen))) {
			best = planes[i];
			best_len = total;
			*ret_mask = mask;
		}
	}
	if (trial_gives_up(best_len, slen))
		return STORE_CODEC_RAW;
	return best;
}

int store_sample_compresses(const void *raw, size_t len, int level)
{
	struct codec_tls *t = tls_get();
	size_t slen;
	const uint8_t *s = sample_of(raw, len, &slen);
	unsigned mask;
	ssize_t r;

	if (!t)
		return -ENOMEM;
	if (level < 1)
		level = 1;
	/* the byte-plane trials first: entropy coding only at level 1, and what float data
	 * passes, so a chunk of weights is settled by the cheapest trial */
	for (unsigned w = 2; w <= 4; w += 2) {
		r = planes_trial(t, s, slen, w, level, &mask);
		if (r < 0)
			return (int)r;
		if (!trial_gives_up(r, slen))
			return 1;
	}
	r = zstd_frame(t, t->sample_dst, ZSTD_compressBound(SAMPLE_LEN), s, slen, 0, level, false);
	if (r <= 0)
		return -EIO;
	return !trial_gives_up(r, slen);
}

/*
 * Encode raw with codec into a new buffer of at most cap bytes (cap >= len for RAW); with tls,
 * into this thread's t->out instead (a RAW payload is then raw itself, not copied). For a PLANES
 * codec, mask says which planes to try compressing (invariant 5).
 * Returns 0 with *ret_buf (owned unless tls) and *ret_len set, 1 when the payload would exceed
 * cap, -EINVAL (unknown codec), -ENOMEM or -EIO.
 */
static int encode_with(uint8_t codec, const void *raw, size_t len, int level, size_t cap,
		       bool tls, unsigned mask, void **ret_buf, size_t *ret_len)
{
	struct codec_tls *t;
	const void *src = raw;
	unsigned w = codec_width(codec);
	uint8_t *out = NULL;
	ssize_t r;
	int err = 0;

	if (codec > STORE_CODEC_MAX)
		return -EINVAL;
	if (codec == STORE_CODEC_RAW && tls) {
		assert(cap >= len);
		*ret_buf = (void *)raw;
		*ret_len = len;
		return 0;
	}
	if (codec == STORE_CODEC_RAW) {
		assert(cap >= len);
		out = malloc(len ? len : 1);
		if (!out)
			return -ENOMEM;
		if (len)
			memcpy(out, raw, len);
		*ret_buf = out;
		*ret_len = len;
		return 0;
	}
	t = tls_get();
	if (!t)
		return -ENOMEM;
	if (w) {
		err = tls_scratch(t, len);
		if (err)
			return err;
		bg_split(raw, len, w, t->scratch);
		src = t->scratch;
	}
	if (tls) {
		if (t->out_cap < cap) {
			void *n; /* not realloc: the old payload is not needed */

			if (posix_memalign(&n, STORE_DIRECT_ALIGN, STORE_HDR_LEN + cap) != 0)
				return -ENOMEM;
			free(t->out);
			t->out = n;
			t->out_cap = cap;
		}
		out = t->out + STORE_HDR_LEN;
	} else if (!(out = malloc(cap ? cap : 1))) {
		return -ENOMEM;
	}
	if (codec_is_planes(codec))
		r = planes_payload(t, out, cap, src, len, w, level, mask);
	else
		r = zstd_frame(t, out, cap, src, len, w, level, false);
	if (r <= 0) {
		if (!tls)
			free(out);
		return r < 0 ? (int)r : 1;
	}
	*ret_buf = out;
	*ret_len = (size_t)r;
	return 0;
}

uint8_t *store_encode_tls_head(const void *payload)
{
	struct codec_tls *t;

	pthread_once(&tls_once, tls_key_init);
	if (tls_key_err || !(t = pthread_getspecific(tls_key)) || !t->out)
		return NULL;
	return payload == t->out + STORE_HDR_LEN ? t->out : NULL;
}

size_t store_payload_bound(size_t raw_len)
{
	/* The flushes of a byte-grouped frame add up to 4 block headers of 3 bytes (invariant 4);
	 * a PLANES payload is at most raw_len + PLANES_HDR(4) (invariant 5). */
	return ZSTD_compressBound(raw_len) + 64;
}

int store_encode_as(uint8_t codec, const void *raw, size_t len, int level, void **ret_buf,
		    size_t *ret_len)
{
	size_t cap = codec == STORE_CODEC_RAW ? len : store_payload_bound(len);

	if (level < 1)
		level = 1;
	/* cap is enough for anything: 1 cannot come back. Every plane is tried. */
	return encode_with(codec, raw, len, level, cap, false, 0xf, ret_buf, ret_len);
}

static int encode(const void *raw, size_t len, int level, bool tls, void **ret_buf,
		  size_t *ret_len, uint8_t *ret_codec)
{
	struct codec_tls *t;
	/* Largest payload that is at least 3% smaller than len (invariant 2). */
	size_t cap = len / 100 * 97 + len % 100 * 97 / 100;
	int codec = STORE_CODEC_RAW;
	unsigned mask = 0;
	int err;

	if (level < 1)
		level = 1;
	if (cap > 0) {
		t = tls_get();
		if (!t)
			return -ENOMEM;
		codec = choose_codec(t, raw, len, level, &mask);
		if (codec < 0)
			return codec;
	}
	if (codec != STORE_CODEC_RAW) {
		err = encode_with((uint8_t)codec, raw, len, level, cap, tls, mask, ret_buf,
				  ret_len);
		if (err <= 0) {
			if (!err)
				*ret_codec = (uint8_t)codec;
			return err;
		}
		codec = STORE_CODEC_RAW; /* did not shrink by 3% */
	}
	err = encode_with(STORE_CODEC_RAW, raw, len, level, len, tls, 0, ret_buf, ret_len);
	if (!err)
		*ret_codec = STORE_CODEC_RAW;
	return err;
}

int store_encode(const void *raw, size_t len, int level, void **ret_buf, size_t *ret_len,
		 uint8_t *ret_codec)
{
	return encode(raw, len, level, false, ret_buf, ret_len, ret_codec);
}

int store_encode_tls(const void *raw, size_t len, int level, const void **ret_buf,
		     size_t *ret_len, uint8_t *ret_codec)
{
	void *b = NULL;
	int err = encode(raw, len, level, true, &b, ret_len, ret_codec);

	if (!err)
		*ret_buf = b;
	return err;
}

/*
 * Decode one zstd frame filling payload_len into exactly raw_size bytes at dst (invariant 1);
 * check_sum: verify the frame's XXH64 content checksum (invariant 2).
 */
static int zstd_decode_exact(struct codec_tls *t, const void *payload, size_t payload_len,
			     void *dst, size_t raw_size, bool check_sum)
{
	unsigned long long fcs;
	size_t r;

	r = ZSTD_DCtx_setParameter(t->dctx, ZSTD_d_forceIgnoreChecksum,
				   check_sum ? ZSTD_d_validateChecksum : ZSTD_d_ignoreChecksum);
	if (ZSTD_isError(r))
		return -EIO;
	fcs = ZSTD_getFrameContentSize(payload, payload_len);
	if (fcs == ZSTD_CONTENTSIZE_ERROR || fcs == ZSTD_CONTENTSIZE_UNKNOWN || fcs != raw_size)
		return -EIO;
	r = ZSTD_findFrameCompressedSize(payload, payload_len);
	if (ZSTD_isError(r) || r != payload_len)
		return -EIO;
	r = ZSTD_decompressDCtx(t->dctx, dst, raw_size, payload, payload_len);
	if (ZSTD_isError(r) || r != raw_size)
		return -EIO;
	return 0;
}

/*
 * Decode a PLANES payload (invariant 5) of raw_size bytes in w planes: the compressed planes
 * into t->scratch (plane p at p * n), and pl[0..w) and *ret_tail set to where each plane and the
 * tail are, in t->scratch or in the payload itself, ready for bg_join. Returns 0, -EIO
 * (malformed) or -ENOMEM.
 */
static int planes_decode(struct codec_tls *t, const uint8_t *payload, size_t payload_len,
			 size_t raw_size, unsigned w, const uint8_t *pl[4], const uint8_t **ret_tail)
{
	size_t n = raw_size / w, tail = raw_size - w * n, pos = PLANES_HDR(w);
	size_t stored[4];
	int err;

	if (payload_len < pos)
		return -EIO;
	for (unsigned p = 0; p < w; p++) {
		stored[p] = store_get_le32(payload + 4 * p);
		if (stored[p] > n || stored[p] > payload_len - pos)
			return -EIO;
		pos += stored[p];
	}
	if (payload_len - pos != tail)
		return -EIO;
	err = tls_scratch(t, raw_size);
	if (err)
		return err;
	pos = PLANES_HDR(w);
	for (unsigned p = 0; p < w; p++) {
		uint8_t *dst = t->scratch + p * n;

		pl[p] = stored[p] == n ? payload + pos : dst;
		if (stored[p] < n &&
		    (err = zstd_decode_exact(t, payload + pos, stored[p], dst, n, false)))
			return err;
		pos += stored[p];
	}
	*ret_tail = payload + pos;
	return 0;
}

static int decode(uint8_t codec, const void *payload, size_t payload_len, void *out,
		  size_t raw_size, bool check_sum)
{
	struct codec_tls *t;
	unsigned w = codec_width(codec);
	const uint8_t *pl[4], *tail;
	int err;

	switch (codec) {
	case STORE_CODEC_RAW:
	case STORE_CODEC_DEFERRED:
		if (payload_len != raw_size)
			return -EIO;
		if (raw_size)
			memcpy(out, payload, raw_size);
		return 0;
	case STORE_CODEC_ZSTD:
	case STORE_CODEC_ZSTD_BG2:
	case STORE_CODEC_ZSTD_BG4:
	case STORE_CODEC_PLANES2:
	case STORE_CODEC_PLANES4:
		break;
	default:
		return -EINVAL;
	}
	t = tls_get();
	if (!t)
		return -ENOMEM;
	if (!w)
		return zstd_decode_exact(t, payload, payload_len, out, raw_size, check_sum);
	if (codec_is_planes(codec)) {
		err = planes_decode(t, payload, payload_len, raw_size, w, pl, &tail);
	} else {
		err = tls_scratch(t, raw_size);
		if (!err)
			err = zstd_decode_exact(t, payload, payload_len, t->scratch, raw_size,
						check_sum);
		for (unsigned p = 0; p < w && !err; p++)
			pl[p] = t->scratch + p * (raw_size / w);
		tail = err ? NULL : t->scratch + w * (raw_size / w);
	}
	if (err)
		return err;
	bg_join(pl, tail, raw_size, w, out);
	return 0;
}

int store_decode(uint8_t codec, const void *payload, size_t payload_len, void *out,
		 size_t raw_size)
{
	return decode(codec, payload, payload_len, out, raw_size, true);
}

int store_decode_digested(uint8_t codec, const void *payload, size_t payload_len, void *out,
			  size_t raw_size)
{
	return decode(codec, payload, payload_len, out, raw_size, false);
}

/* ---- a chunk as one self-contained object (store.h, store_object_*) ---- */

size_t store_object_max(void)
{
	return STORE_OBJECT_HEADER + store_payload_bound(STORE_CHUNK_MAX);
}

int store_object_encode(const void *raw, size_t len, int level, void **ret_obj, size_t *ret_len)
{
	uint8_t codec, *obj;
	void *payload;
	size_t plen;
	int rc;

	if (len > STORE_CHUNK_MAX)
		return -EINVAL;
	if ((rc = store_encode(raw, len, level, &payload, &plen, &codec)) < 0)
		return rc;
	if (!(obj = malloc(plen + STORE_OBJECT_HEADER))) {
		free(payload);
		return -ENOMEM;
	}
	obj[0] = codec;
	for (int i = 0; i < 4; i++)
		obj[1 + i] = (uint8_t)(len >> (8 * i));
	memcpy(obj + STORE_OBJECT_HEADER, payload, plen);
	free(payload);
	*ret_obj = obj;
	*ret_len = plen + STORE_OBJECT_HEADER;
	return 0;
}

int store_object_decode(const void *obj, size_t len, const struct store_hash *want,
			uint8_t **ret_raw, uint32_t *ret_len)
{
	const uint8_t *b = obj;
	struct store_hash got;
	uint32_t rawlen = 0;
	uint8_t *raw;
	int rc;

	if (len < STORE_OBJECT_HEADER)
		return -EIO;
	for (int i = 0; i < 4; i++)
		rawlen |= (uint32_t)b[1 + i] << (8 * i);
	if (rawlen > STORE_CHUNK_MAX)
		return -EIO;
	if (!(raw = malloc(rawlen ? rawlen : 1)))
		return -ENOMEM;
	rc = store_decode(b[0], b + STORE_OBJECT_HEADER, len - STORE_OBJECT_HEADER, raw, rawlen);
	if (rc == -EINVAL)
		rc = -EIO; /* an unknown codec: a malformed object */
	if (rc == 0) {
		store_hash_buf(raw, rawlen, &got);
		rc = memcmp(got.b, want->b, STORE_HASH_LEN) ? -EBADMSG : 0;
	}
	if (rc < 0) {
		free(raw);
		return rc;
	}
	*ret_raw = raw;
	*ret_len = rawlen;
	return 0;
}
