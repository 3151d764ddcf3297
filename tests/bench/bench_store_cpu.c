/*
 * bench_store_cpu.c — benchmark, not a test (issue 45): the CPU the chunk store spends per GiB of
 * a checkpoint, stage by stage, without FUSE or the daemon's threads around it.
 *
 * Usage: build-dev/tests/bench/bench_store_cpu DIR [MIB [KIND [SEED]]]
 *   DIR   a directory for a fresh store (created; its chunks are left there: remove it after)
 *   MIB   bytes of state, MiB (default 256)
 *   KIND  bf16 (default: randn * 0.02 rounded to bf16, like trained weights), fp32 (the same
 *         values as fp32, like Adam moments) or random (incompressible)
 *   SEED  of the state (default 1)
 *
 * Prints, in CPU seconds per GiB of state: with this thread's CPU clock, cutting
 * (store_cdc_cut), hashing (store_hash_buf), encoding (store_encode_tls) and the sample verdict
 * of a deferred put (store_sample_compresses); with the process's user + system time
 * (getrusage: the kernel's work for the files included), deferred puts (STORE_PUT_DEFER), the
 * recode of every chunk (store_chunk_recode) and inline puts of other bytes; then the stored /
 * logical ratio. Figures and the runs that produced them: tests/bench/RESULTS.md, "Daemon CPU
 * per GB saved (issue 45)".
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "store/store.h"
#include "store/store_int.h"

enum kind { KIND_BF16, KIND_FP32, KIND_RANDOM };

/* CPU seconds of this thread. */
static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* User + system CPU seconds of the process. */
static double process_cpu_s(void)
{
	struct rusage r;

	getrusage(RUSAGE_SELF, &r);
	return (double)r.ru_utime.tv_sec + (double)r.ru_utime.tv_usec * 1e-6 +
	       (double)r.ru_stime.tv_sec + (double)r.ru_stime.tv_usec * 1e-6;
}

/* xorshift64 (G. Marsaglia, "Xorshift RNGs", JSS 2003), in (0, 1). */
static double uniform(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return ((double)(*s >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* fp32 to bf16, round to nearest even (as torch's .to(torch.bfloat16)). */
static uint16_t to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, 4);
	return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/* n bytes (a multiple of 4) of state of the given kind; normal values by Box-Muller. */
static void fill(uint8_t *b, size_t n, enum kind kind, uint64_t seed)
{
	uint64_t s = 0x9e3779b97f4a7c15ull ^ (seed * 0xbf58476d1ce4e5b9ull);

	for (size_t i = 0; i + 4 <= n; i += 4) {
		double r = sqrt(-2 * log(uniform(&s))), t = 2 * M_PI * uniform(&s);
		float a = (float)(r * cos(t) * 0.02), c = (float)(r * sin(t) * 0.02);
		uint16_t x = to_bf16(a), y = to_bf16(c);

		if (kind == KIND_BF16) {
			memcpy(b + i, &x, 2);
			memcpy(b + i + 2, &y, 2);
		} else if (kind == KIND_FP32) {
			memcpy(b + i, &a, 4);
		} else {
			uint64_t v = s * 0x94d049bb133111ebull;

			memcpy(b + i, &v, 4);
		}
	}
}

int main(int argc, char **argv)
{
	size_t mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 256, n = mib << 20, nc = 0, off;
	const char *kname = argc > 3 ? argv[3] : "bf16";
	uint64_t seed = argc > 4 ? strtoull(argv[4], NULL, 10) : 1;
	enum kind kind = !strcmp(kname, "fp32")	    ? KIND_FP32
			 : !strcmp(kname, "random") ? KIND_RANDOM
						    : KIND_BF16;
	size_t maxc = n / STORE_CHUNK_MIN + 2, stored = 0;
	struct store_chunk_info info;
	struct store *st = NULL;
	struct store_hash *hs;
	uint8_t *b;
	size_t *cut;
	double t[9], gib = (double)n / (1u << 30);
	int err;

	if (argc < 2 || mib == 0) {
		fprintf(stderr, "usage: %s DIR [MIB [bf16|fp32|random [SEED]]]\n", argv[0]);
		return 2;
	}
	b = malloc(n);
	cut = calloc(maxc, sizeof(*cut));
	hs = calloc(maxc, sizeof(*hs));
	if (!b || !cut || !hs) {
		fprintf(stderr, "bench_store_cpu: out of memory\n");
		return 1;
	}
	fill(b, n, kind, seed);
	if ((err = store_open(argv[1], NULL, &st)) < 0) {
		fprintf(stderr, "bench_store_cpu: cannot open store '%s': %s\n", argv[1],
			strerror(-err));
		return 1;
	}
	t[0] = thread_cpu_s();
	for (off = 0; off < n; off += cut[nc++])
		cut[nc] = store_cdc_cut(b + off, n - off, true);
	t[1] = thread_cpu_s();
	for (size_t i = 0, o = 0; i < nc; o += cut[i++])
		store_hash_buf(b + o, cut[i], &hs[i]);
	t[2] = thread_cpu_s();
	for (size_t i = 0, o = 0; i < nc && !err; o += cut[i++]) {
		const void *p;
		size_t plen;
		uint8_t codec;

		err = store_encode_tls(b + o, cut[i], 1, &p, &plen, &codec);
		stored += plen;
	}
	t[3] = thread_cpu_s();
	for (size_t i = 0, o = 0; i < nc && !err; o += cut[i++]) {
		int r = store_sample_compresses(b + o, cut[i], 1);

		err = r < 0 ? r : 0;
	}
	t[4] = process_cpu_s();
	for (size_t i = 0, o = 0; i < nc && !err; o += cut[i++])
		err = store_chunk_put_hashed(st, b + o, cut[i], &hs[i], STORE_PUT_DEFER, &info);
	t[5] = process_cpu_s();
	for (size_t i = 0; i < nc && !err; i++)
		err = store_chunk_recode(st, &hs[i], &info);
	t[6] = process_cpu_s();
	for (size_t i = 0; i < n; i += 2)
		b[i] ^= 1; /* other bytes, other digests: every put below writes */
	for (size_t i = 0, o = 0; i < nc; o += cut[i++])
		store_hash_buf(b + o, cut[i], &hs[i]);
	t[7] = process_cpu_s();
	for (size_t i = 0, o = 0; i < nc && !err; o += cut[i++])
		err = store_chunk_put_hashed(st, b + o, cut[i], &hs[i], 0, &info);
	if (!err)
		err = store_sync(st);
	t[8] = process_cpu_s();

	store_close(st);
	if (err) {
		fprintf(stderr, "bench_store_cpu: a store call failed: %s\n", strerror(-err));
		return 1;
	}
	printf("%s %zu MiB, %zu chunks, stored/logical %.4f; CPU s/GiB: cut %.3f hash %.3f "
	       "encode %.3f sample verdict %.3f | deferred put %.3f recode %.3f inline put %.3f\n",
	       kname, mib, nc, (double)stored / (double)n, (t[1] - t[0]) / gib, (t[2] - t[1]) / gib,
	       (t[3] - t[2]) / gib, (t[4] - t[3]) / gib, (t[5] - t[4]) / gib, (t[6] - t[5]) / gib,
	       (t[8] - t[7]) / gib);
	free(hs);
	free(cut);
	free(b);
	return 0;
}
