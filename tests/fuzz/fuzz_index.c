/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the index's row decoding (index/): the input is an index database
 * file (corpus/index/ holds real ones, written by the daemon), opened read-only the way ckptctl
 * opens a store's index; every row is then read back through the public API (idx_integrity,
 * idx_check, idx_stats_get, idx_step_foreach, idx_claim_foreach, a walk of the namespace from the
 * root with idx_dir_list, idx_inode_get, idx_file_extents and idx_symlink_get); then the file
 * goes through `ckptctl fsck`'s salvage: idx_salvage into a fresh index and idx_repair (every
 * chunk reported missing), after which idx_check must hold (idx_repair's promise).
 * Checks the documented return codes; out-of-bounds access and leaks are AddressSanitizer's.
 * Files live in $TMPDIR (scripts/fuzz.sh points it at /dev/shm: fsync is free there).
 * Fuzzed by scripts/fuzz.sh; corpus/index/ is replayed by meson's unit suite (replay.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "index/index.h"
#include "tests/fuzz/fuzz.h"

#define WALK_MAX 4096 /* entries visited per input: bounds the time a cyclic tree can take */

static char src[4096], dst[4096];

static void paths(void)
{
	if (src[0])
		return;
	const char *dir = fuzz_tmpdir("index");

	snprintf(src, sizeof(src), "%s/index.db", dir);
	snprintf(dst, sizeof(dst), "%s/salvaged.db", dir);
}

static void rm_db(const char *p)
{
	char x[4200];

	unlink(p);
	snprintf(x, sizeof(x), "%s-wal", p);
	unlink(x);
	snprintf(x, sizeof(x), "%s-shm", p);
	unlink(x);
	snprintf(x, sizeof(x), "%s-journal", p);
	unlink(x);
}

static bool errno_ok(int rc)
{
	return rc == 0 || rc == -ENOENT || rc == -EIO || rc == -ENOMEM || rc == -EBUSY ||
	       rc == -EUCLEAN || rc == -EPROTO || rc == -EINVAL || rc == -ENAMETOOLONG ||
	       rc == -ELOOP;
}

static int step_cb(const struct idx_step *s, void *arg)
{
	CHECK(memchr(s->name, '\0', sizeof(s->name)) != NULL);
	(*(unsigned *)arg)++;
	return 0;
}

static int claim_cb(int64_t id, const char *tracker, const void *content, size_t len,
		    int64_t step, int64_t ts_ns, void *arg)
{
	CHECK(len <= IDX_CLAIM_MAX && (len == 0 || content != NULL));
	/* touch every byte: AddressSanitizer checks the length is true */
	volatile uint8_t sum = 0;
	for (size_t i = 0; i < len; i++)
		sum += ((const uint8_t *)content)[i];
	(void)strlen(tracker);
	(*(unsigned *)arg)++;
	return 0;
}

struct walk {
	struct idx *ix;
	uint64_t queue[WALK_MAX];
	size_t n;
	unsigned visited;
};

static int dir_cb(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct walk *w = arg;

	(void)strlen(name);
	if (++w->visited > WALK_MAX)
		return 1;
	if (w->n < WALK_MAX)
		w->queue[w->n++] = ino;
	return 0;
}

static void walk(struct idx *ix)
{
	static struct walk w;

	w.ix = ix;
	w.n = 0;
	w.visited = 0;
	w.queue[w.n++] = IDX_ROOT_INO;
	for (size_t i = 0; i < w.n && w.visited <= WALK_MAX; i++) {
		struct idx_inode a;
		int rc = idx_inode_get(ix, w.queue[i], &a);

		CHECK(errno_ok(rc));
		if (rc < 0)
			continue;
		if (S_ISDIR(a.mode)) {
			rc = idx_dir_list(ix, w.queue[i], 0, dir_cb, &w);
			CHECK(rc >= 0 || errno_ok(rc));
		} else if (S_ISREG(a.mode)) {
			struct idx_extent *ext = NULL;
			size_t n = 0;

			rc = idx_file_extents(ix, w.queue[i], &ext, &n);
			CHECK(errno_ok(rc));
			CHECK(rc < 0 || n == 0 || ext != NULL);
			for (size_t j = 1; rc == 0 && j < n; j++)
				CHECK(ext[j - 1].offset <= ext[j].offset); /* "in offset order" */
			free(ext);
		} else if (S_ISLNK(a.mode)) {
			char target[4097];

			rc = idx_symlink_get(ix, w.queue[i], target, sizeof(target));
			CHECK(rc < 0 ? errno_ok(rc) : memchr(target, '\0', sizeof(target)) != NULL);
		}
	}
}

/* no chunk store here: every chunk is missing, so repair takes its "lost" path for each */
static int chunk_info(const uint8_t hash[IDX_HASH_LEN], uint32_t *raw_size,
		      uint32_t *stored_size, uint8_t *codec, void *arg)
{
	return 0;
}

static void lost(uint64_t ino, const char *line, void *arg)
{
	(void)strlen(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct idx *ix = NULL, *nix = NULL;
	char msg[512];
	int rc;

	paths();
	rm_db(src);
	int fd = open(src, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	CHECK(write(fd, data, size) == (ssize_t)size);
	CHECK(close(fd) == 0);

	rc = idx_open(src, IDX_RDONLY, 0, 0, 0, &ix);
	CHECK(errno_ok(rc) || rc == -EACCES);
	if (rc == 0) {
		unsigned steps = 0, claims = 0;
		struct idx_stats stats;

		rc = idx_integrity(ix, true, msg, sizeof(msg));
		CHECK(errno_ok(rc));
		if (rc == 0) { /* the daemon serves only a file that passes quick_check */
			CHECK(errno_ok(idx_check(ix, msg, sizeof(msg))));
			CHECK(errno_ok(idx_stats_get(ix, &stats)));
			rc = idx_step_foreach(ix, step_cb, &steps);
			CHECK(rc >= 0 || errno_ok(rc));
			rc = idx_claim_foreach(ix, claim_cb, &claims);
			CHECK(rc >= 0 || errno_ok(rc));
			walk(ix);
		}
		idx_close(ix);
	}

	/* ckptctl fsck: salvage what is readable into a fresh index, repair, then it is sound */
	rm_db(dst);
	CHECK(idx_open(dst, 0, 0, 0, 1, &nix) == 0);
	struct idx_salvage_report rep;
	rc = idx_salvage(nix, src, &rep);
	if (!errno_ok(rc))
		fprintf(stderr, "fuzz_index: idx_salvage: %d\n", rc);
	CHECK(errno_ok(rc));
	if (rc == 0) {
		struct idx_repair_ops ops = { chunk_info, lost, NULL };
		struct idx_repair_stats rs;

		rc = idx_repair(nix, &ops, &rs);
		CHECK(errno_ok(rc));
		if (rc == 0) {
			rc = idx_check(nix, msg, sizeof(msg));
			if (rc != 0)
				fprintf(stderr, "fuzz_index: idx_check after idx_repair: %s\n", msg);
			CHECK(rc == 0);
		}
	}
	idx_close(nix);
	return 0;
}
