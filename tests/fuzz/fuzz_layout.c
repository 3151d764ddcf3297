/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for fs/policy/layout.c (the layout/path classifier and the tracker parsers):
 * layout_classify() and layout_tracker_parse() on arbitrary bytes, checking the module's
 * invariants and the tracker parse -> format -> parse round trip.
 * The first input byte picks the forced layout; the rest is the path / tracker content.
 * Fuzzed by scripts/fuzz.sh (clang -fsanitize=fuzzer); its seed corpus, corpus/layout/, is
 * replayed by meson's unit suite (replay.c).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fs/policy/layout.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	enum layout_kind forced = (enum layout_kind)(data[0] % LAYOUT_KIND_COUNT);
	data++;
	size--;

	/* Exact-size copies, so ASan sees any read past the end. */
	char *path = malloc(size + 1);
	char *buf = malloc(size ? size : 1);
	if (path == NULL || buf == NULL) {
		free(path);
		free(buf);
		return 0;
	}
	memcpy(path, data, size);
	path[size] = '\0';
	memcpy(buf, data, size);

	struct layout_match m, m2;
	int rc = layout_classify(path, forced, &m);
	CHECK(rc == 0 || rc == -EINVAL || rc == -ENAMETOOLONG);
	CHECK(layout_classify(path, forced, &m2) == rc);
	if (rc == 0) {
		CHECK(memcmp(&m, &m2, sizeof(m)) == 0);
		CHECK(forced == LAYOUT_NONE || m.kind == LAYOUT_NONE || m.kind == forced);
		CHECK(m.step_prefix_len <= strlen(path));
		if (m.role == ROLE_PLAIN)
			CHECK(m.step == LAYOUT_STEP_NONE && m.step_prefix_len == 0);
		if (m.step_prefix_len > 0) {
			char *pre = strndup(path, m.step_prefix_len);
			struct layout_match d;
			CHECK(pre != NULL);
			CHECK(layout_classify(pre, forced, &d) == 0);
			CHECK(d.role == ROLE_STEP_DIR && d.step == m.step);
			CHECK(d.kind == m.kind || (m.flags & LAYOUT_F_AMBIGUOUS));
			free(pre);
		}
	}

	for (int k = 1; k < LAYOUT_KIND_COUNT; k++) {
		struct layout_tracker t, t2;
		int r = layout_tracker_parse((enum layout_kind)k, path, buf, size, &t);
		if (r != 0)
			continue;
		CHECK(t.step >= 0 || t.step == LAYOUT_STEP_RELEASE);
		char out[2048];
		int f = layout_tracker_format((enum layout_kind)k, &t, out, sizeof(out));
		if (k == LAYOUT_INTERNEVO)
			continue;
		CHECK(f > 0);
		CHECK(layout_tracker_parse((enum layout_kind)k, NULL, out, (size_t)f, &t2) == 0);
		CHECK(t2.step == t.step && t2.epoch == t.epoch);
		CHECK(strcmp(t2.ckpt_file, t.ckpt_file) == 0);
	}
	free(path);
	free(buf);
	return 0;
}
