/*
 * test_hash.c — XXH3-128 digests, hex form and the streaming hasher.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "store/store.h"
#include "test_util.h"

Test(hash, known_vector_empty)
{
	struct store_hash h;
	char hex[2 * STORE_HASH_LEN + 1];

	/* XXH3-128 of "" is high64 0x99aa06d3014798d8, low64 0x6001c324468d497f (xxHash tests). */
	store_hash_buf("", 0, &h);
	cr_assert_str_eq(store_hash_hex(&h, hex), "99aa06d3014798d86001c324468d497f");
}

Test(hash, hex_round_trip_and_parse_errors)
{
	struct store_hash h, g, untouched;
	char hex[2 * STORE_HASH_LEN + 1];
	char upper[2 * STORE_HASH_LEN + 1];
	size_t i;

	store_hash_buf("ckptfs", 6, &h);
	store_hash_hex(&h, hex);
	cr_assert_eq(strlen(hex), 32);
	cr_assert_eq(store_hash_parse(hex, &g), 0);
	cr_assert_eq(memcmp(&h, &g, sizeof(h)), 0);
	for (i = 0; i <= 32; i++)
		upper[i] = (char)(hex[i] >= 'a' && hex[i] <= 'f' ? hex[i] - 32 : hex[i]);
	memset(&g, 0, sizeof(g));
	cr_assert_eq(store_hash_parse(upper, &g), 0);
	cr_assert_eq(memcmp(&h, &g, sizeof(h)), 0);

	memset(&untouched, 0xa5, sizeof(untouched));
	g = untouched;
	cr_assert_eq(store_hash_parse("", &g), -EINVAL);
	cr_assert_eq(store_hash_parse("0123456789abcdef0123456789abcde", &g), -EINVAL);
	cr_assert_eq(store_hash_parse("0123456789abcdef0123456789abcdef0", &g), -EINVAL);
	cr_assert_eq(store_hash_parse("0123456789abcdef0123456789abcdeg", &g), -EINVAL);
	cr_assert_eq(store_hash_parse(" 123456789abcdef0123456789abcdef", &g), -EINVAL);
	cr_assert_eq(memcmp(&g, &untouched, sizeof(g)), 0, "*ret written on failure");
}

Test(hash, streaming_matches_one_shot)
{
	size_t len = 3 * 1024 * 1024 + 17;
	uint8_t *buf = tu_malloc(len);
	struct store_hasher *hs, *cp;
	struct store_hash one, got, half;
	size_t off, step = 1;

	tu_fill_random(buf, len, 5);
	store_hash_buf(buf, len, &one);
	hs = store_hasher_new();
	cr_assert_not_null(hs);
	for (off = 0; off < len; off += step, step = step * 3 + 1) {
		if (step > len - off)
			step = len - off;
		store_hasher_update(hs, buf + off, step);
		if (off < len / 2 && off + step >= len / 2)
			store_hasher_digest(hs, &half); /* digest mid-way keeps the hasher usable */
	}
	store_hasher_digest(hs, &got);
	cr_assert_eq(memcmp(&one, &got, sizeof(got)), 0);
	(void)half;

	cp = store_hasher_copy(hs);
	cr_assert_not_null(cp);
	store_hasher_update(cp, "x", 1);
	store_hasher_digest(hs, &got);
	cr_assert_eq(memcmp(&one, &got, sizeof(got)), 0, "copy shares state with the original");

	store_hasher_reset(hs);
	store_hasher_digest(hs, &got);
	store_hash_buf("", 0, &one);
	cr_assert_eq(memcmp(&one, &got, sizeof(got)), 0);
	store_hasher_free(cp);
	store_hasher_free(hs);
	store_hasher_free(NULL);
	free(buf);
}
