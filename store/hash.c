/*
 * hash.c — XXH3-128 digests (libxxhash), their hex form, and a streaming hasher.
 *
 * Invariants:
 *   1. A struct store_hash always holds the canonical (big-endian) form produced by
 *      XXH128_canonicalFromHash, so digests compare and print the same on every host.
 *   2. XXH3-128 is used with its default secret and seed 0: the digest is a pure function of the
 *      bytes (xxHash 0.8 guarantees XXH3 output stability across versions).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#ifdef CKPTFS_XXH_DISPATCH
/* XXH3_128bits and XXH3_128bits_update become libxxhash's runtime-dispatched versions (AVX2,
 * AVX-512 when the CPU has them): the same digests, sooner (meson.build sets it) */
#include <xxh_x86dispatch.h>
#endif
#include "store/store.h"

_Static_assert(sizeof(XXH128_canonical_t) == STORE_HASH_LEN, "XXH3-128 is 16 bytes");

struct store_hasher {
	XXH3_state_t *state; /* owned, XXH3_freeState */
};

/* Store the canonical form of v into *ret (invariant 1). */
static void hash_from_xxh(XXH128_hash_t v, struct store_hash *ret)
{
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, v);
	memcpy(ret->b, c.digest, STORE_HASH_LEN);
}

void store_hash_buf(const void *buf, size_t len, struct store_hash *ret)
{
	hash_from_xxh(XXH3_128bits(buf, len), ret);
}

char *store_hash_hex(const struct store_hash *h, char out[2 * STORE_HASH_LEN + 1])
{
	static const char digits[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < STORE_HASH_LEN; i++) {
		out[2 * i] = digits[h->b[i] >> 4];
		out[2 * i + 1] = digits[h->b[i] & 0xf];
	}
	out[2 * STORE_HASH_LEN] = '\0';
	return out;
}

/* Value of one hex digit, or -1. Locale-independent, unlike isxdigit(). */
static int hex_val(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int store_hash_parse(const char *s, struct store_hash *ret)
{
	struct store_hash h;
	size_t i;

	for (i = 0; i < STORE_HASH_LEN; i++) {
		int hi, lo;

		/* hi fails on a NUL before 32 digits, so s[2 * i + 1] is never past the end. */
		hi = hex_val(s[2 * i]);
		if (hi < 0)
			return -EINVAL;
		lo = hex_val(s[2 * i + 1]);
		if (lo < 0)
			return -EINVAL;
		h.b[i] = (uint8_t)(hi << 4 | lo);
	}
	if (s[2 * STORE_HASH_LEN] != '\0')
		return -EINVAL;
	*ret = h;
	return 0;
}

struct store_hasher *store_hasher_new(void)
{
	struct store_hasher *hs = malloc(sizeof(*hs));

	if (!hs)
		return NULL;
	hs->state = XXH3_createState();
	if (!hs->state) {
		free(hs);
		return NULL;
	}
	XXH3_128bits_reset(hs->state);
	return hs;
}

void store_hasher_update(struct store_hasher *hs, const void *buf, size_t len)
{
	/* Only fails on a NULL state or NULL input with len > 0: programmer errors. */
	(void)XXH3_128bits_update(hs->state, buf, len);
}

void store_hasher_hole(struct store_hasher *hs, uint64_t offset, uint64_t length)
{
	uint8_t rec[STORE_HOLE_RECORD] = { 'c', 'k', 'p', 't', 'H', 'O', 'L', 'E' };

	if (length == 0)
		return;
	for (int i = 0; i < 8; i++) {
		rec[8 + i] = (uint8_t)(offset >> (8 * i));
		rec[16 + i] = (uint8_t)(length >> (8 * i));
	}
	store_hasher_update(hs, rec, sizeof(rec));
}

void store_hasher_digest(const struct store_hasher *hs, struct store_hash *ret)
{
	hash_from_xxh(XXH3_128bits_digest(hs->state), ret);
}

void store_hasher_reset(struct store_hasher *hs)
{
	XXH3_128bits_reset(hs->state);
}

struct store_hasher *store_hasher_copy(const struct store_hasher *hs)
{
	struct store_hasher *cp = store_hasher_new();

	if (!cp)
		return NULL;
	XXH3_copyState(cp->state, hs->state);
	return cp;
}

void store_hasher_free(struct store_hasher *hs)
{
	if (!hs)
		return;
	XXH3_freeState(hs->state);
	free(hs);
}
