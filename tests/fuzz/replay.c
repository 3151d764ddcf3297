/* SPDX-License-Identifier: MIT */
/*
 * Replays inputs through a libFuzzer target without libFuzzer: meson builds each fuzz_*.c with
 * this main() (gcc, no clang needed) and runs it over the committed corpus/<target>/ - the seed
 * inputs and every crasher found so far (scripts/fuzz.sh adds crashers there as crash-*), so a
 * fixed bug stays fixed. A target reports a violated check by abort() and a memory error through
 * the sanitizer build (scripts/test.sh's ASan pass); either fails the test.
 * Usage: replay FILE|DIR...   (a directory: every regular file in it, in name order)
 * Exit status: 0 when every input ran; 1 when a file could not be read or none was given.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t n = 0, cap = 0;

	if (!f) {
		fprintf(stderr, "replay: cannot open '%s': %s\n", path, strerror(errno));
		return -1;
	}
	for (;;) {
		if (n == cap) {
			cap = cap ? 2 * cap : 65536;
			uint8_t *p = realloc(buf, cap);
			if (!p) {
				fprintf(stderr, "replay: out of memory reading '%s'\n", path);
				free(buf);
				fclose(f);
				return -1;
			}
			buf = p;
		}
		size_t r = fread(buf + n, 1, cap - n, f);
		n += r;
		if (r == 0)
			break;
	}
	if (ferror(f)) {
		fprintf(stderr, "replay: cannot read '%s'\n", path);
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	/* an exact-size copy, so a sanitizer sees any read past the end of the input */
	uint8_t *in = malloc(n ? n : 1);
	if (!in) {
		free(buf);
		return -1;
	}
	memcpy(in, buf, n);
	free(buf);
	LLVMFuzzerTestOneInput(in, n);
	free(in);
	return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
	unsigned ran = 0;
	int rc = 0;

	for (int i = 1; i < argc; i++) {
		struct stat st;

		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "replay: '%s': %s\n", argv[i], strerror(errno));
			rc = 1;
			continue;
		}
		if (!S_ISDIR(st.st_mode)) {
			rc |= run_file(argv[i]) < 0;
			ran++;
			continue;
		}
		struct dirent **ents;
		int n = scandir(argv[i], &ents, NULL, by_name);

		if (n < 0) {
			fprintf(stderr, "replay: cannot list '%s': %s\n", argv[i], strerror(errno));
			rc = 1;
			continue;
		}
		for (int j = 0; j < n; j++) {
			char path[4096];

			snprintf(path, sizeof(path), "%s/%s", argv[i], ents[j]->d_name);
			if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
				rc |= run_file(path) < 0;
				ran++;
			}
			free(ents[j]);
		}
		free(ents);
	}
	printf("replay: %u inputs\n", ran);
	if (ran == 0) {
		fprintf(stderr, "replay: no input given\n");
		rc = 1;
	}
	return rc;
}
