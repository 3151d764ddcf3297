/*
 * bench_remote_get.c — benchmark, not a test (issue 41 item 11): how long one GET of an object
 * takes through the remote library, by object size, one after another on one connection: the
 * remote's cost per request, which a node's fetches pay once per chunk and its ticks once per
 * manifest.
 *
 * Usage: build-dev/tests/bench/bench_remote_get URL [N]
 *   URL  a remote (remote_open: "s3://BUCKET/PREFIX" with the AWS_* variables, or a directory);
 *        objects "lat-SIZE" are put under it and deleted after
 *   N    GETs per size (default 40)
 *
 * Prints, per size (1 B, 1 KiB, 900 KB: a chunk's average, 4 MB: a chunk's largest), the PUTs'
 * and the GETs' min, median, mean and max in ms, then the mean of N HEADs. Figures and the runs
 * that produced them: tests/bench/RESULTS.md, "Nagle and the delayed ACK".
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/remote/remote.h"

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void report(const char *what, size_t size, double *t, int n, double sum)
{
	qsort(t, (size_t)n, sizeof(*t), cmp);
	printf("%s %8zu bytes: ms min %.2f median %.2f mean %.2f max %.2f (%d on one connection)\n",
	       what, size, t[0], t[n / 2], sum / n, t[n - 1], n);
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = { 1, 1024, 900000, 4000000 };
	int n = argc > 2 ? atoi(argv[2]) : 40;
	struct remote *r;
	char err[512];

	if (argc < 2 || n < 1) {
		fprintf(stderr, "usage: %s URL [N]\n", argv[0]);
		return 2;
	}
	if (remote_open(argv[1], NULL, &r, err, sizeof(err)) < 0) {
		fprintf(stderr, "bench_remote_get: %s\n", err);
		return 1;
	}
	double *t = calloc((size_t)n, sizeof(*t));
	char *buf = malloc(sizes[3]);

	if (!t || !buf)
		return 1;
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		char key[64];
		double sum = 0;
		size_t len = 0;

		memset(buf, 'a' + (int)k, sizes[k]);
		snprintf(key, sizeof(key), "lat-%zu", sizes[k]);
		for (int i = 0; i < n; i++) {
			double a = now_ms();

			if (remote_put(r, key, buf, sizes[k]) < 0) {
				fprintf(stderr, "bench_remote_get: cannot put %s\n", key);
				return 1;
			}
			t[i] = now_ms() - a;
			sum += t[i];
		}
		report("PUT", sizes[k], t, n, sum);
		sum = 0;
		for (int i = 0; i < n; i++) {
			double a = now_ms();

			if (remote_get_into(r, key, buf, sizes[3], &len) < 0 || len != sizes[k]) {
				fprintf(stderr, "bench_remote_get: cannot get %s\n", key);
				return 1;
			}
			t[i] = now_ms() - a;
			sum += t[i];
		}
		report("GET", sizes[k], t, n, sum);
	}
	double a = now_ms();

	for (int i = 0; i < n; i++) {
		uint64_t size;

		if (remote_head(r, "lat-1024", &size) < 0)
			return 1;
	}
	printf("HEAD: ms mean %.2f (%d)\n", (now_ms() - a) / n, n);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		char key[64];

		snprintf(key, sizeof(key), "lat-%zu", sizes[k]);
		(void)remote_delete(r, key);
	}
	free(buf);
	free(t);
	remote_close(r);
	return 0;
}
