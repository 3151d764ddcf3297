/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for fs/policy/validate.c (the structure checks of torch.save zips, safetensors and
 * JSON that decide whether a closed checkpoint file is whole): validate_file() on arbitrary
 * bytes under each of the names that select a format. Checks the documented contract: the
 * result is 1, 0 or -EBADMSG (the read function never fails here), a -EBADMSG comes with a
 * reason, 1 and 0 with none, and the same input gives the same answer twice.
 * The first input byte picks the name; the rest is the file's content.
 * Fuzzed by scripts/fuzz.sh; corpus/validate/ is replayed by meson's unit suite (replay.c).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fs/policy/validate.h"
#include "tests/fuzz/fuzz.h"

struct buf {
	const uint8_t *p;
	size_t n;
};

static ssize_t rd(void *arg, void *out, size_t len, uint64_t off)
{
	const struct buf *b = arg;

	if (off >= b->n)
		return 0;
	if (len > b->n - off)
		len = b->n - off;
	memcpy(out, b->p + off, len);
	return (ssize_t)len;
}

static const char *const names[] = {
	"model_optim_rng.pt", "mp_rank_00_model_states.pt", "llama_rank_0-1_2.ckpt",
	"model.safetensors", "trainer_state.json", "meta.json", "__0_0.distcp", "README",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	const char *name = names[data[0] % (sizeof(names) / sizeof(names[0]))];
	/* an exact-size copy, so AddressSanitizer sees any read past the end */
	uint8_t *copy = malloc(size - 1 ? size - 1 : 1);
	if (copy == NULL)
		return 0;
	memcpy(copy, data + 1, size - 1);
	struct buf b = { copy, size - 1 };
	enum validate_format f1, f2;
	char why1[256], why2[256];

	int r1 = validate_file(name, b.n, rd, &b, &f1, why1, sizeof(why1));
	int r2 = validate_file(name, b.n, rd, &b, &f2, why2, sizeof(why2));
	CHECK(r1 == 1 || r1 == 0 || r1 == -EBADMSG || r1 == -ENOMEM);
	CHECK(r1 == r2 && f1 == f2 && strcmp(why1, why2) == 0);
	CHECK(r1 == -EBADMSG ? why1[0] != '\0' : why1[0] == '\0');
	CHECK(strlen(why1) < sizeof(why1));
	free(copy);
	return 0;
}
