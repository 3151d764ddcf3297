/*
 * gc.c — ckptctl gc [--dry-run]: remove unlinked inodes and unreferenced chunks (only while
 * not mounted), or with --dry-run say exactly what that would remove; while mounted, count the
 * chunk files no index row names (the daemon's own garbage it frees itself).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

/* store_chunk_foreach callback: count one chunk file into arg (a struct gc_count), skipping
 * chunks the index knows when arg->ix is set, and show the walk's progress. Returns 0 or the
 * -errno of idx_chunk_exists. */
static int gc_count_file(const struct store_hash *h, uint64_t stored_size, void *arg)
{
	struct gc_count *g = arg;

	g->seen++;
	g->seen_bytes += stored_size;
	ctl_progress_work(g->prog, false, g->what, g->noun, g->seen, g->expect, g->seen_bytes,
			  g->expect_bytes);
	if (g->ix) {
		int rc = idx_chunk_exists(g->ix, h->b);

		if (rc < 0)
			return rc;
		if (rc)
			return 0;
	}
	if (g->set_aside) {
		int rc = store_chunk_set_aside(g->st, h, g->set_aside);

		if (rc < 0)
			return rc;
	}
	g->files++;
	g->bytes += stored_size;
	return 0;
}

/* idx_chunk_foreach callback: count one chunk row and its stored bytes into arg (gc_count). */
static int gc_expect_row(const uint8_t hash[IDX_HASH_LEN], uint32_t raw_size,
			 uint32_t stored_size, uint8_t codec, int64_t refs, bool bad, void *arg)
{
	struct gc_count *g = arg;

	(void)hash;
	(void)raw_size;
	(void)codec;
	(void)refs;
	(void)bad;
	g->expect++;
	g->expect_bytes += stored_size;
	return 0;
}

int ctl_gc_scan(struct ckpt_repo *r, struct gc_count *g, struct ctl_progress *prog,
		const char *what, const char *noun)
{
	int rc;

	g->files = g->bytes = g->seen = g->seen_bytes = g->expect = g->expect_bytes = 0;
	g->prog = prog;
	g->st = r->st;
	g->what = what;
	g->noun = noun;
	ctl_progress_init(prog);
	if (r->ix && (rc = idx_chunk_foreach(r->ix, gc_expect_row, g)) < 0)
		return rc;
	ctl_progress_work(prog, true, what, noun, 0, g->expect, 0, g->expect_bytes);
	rc = store_chunk_foreach(r->st, gc_count_file, g);
	if (rc < 0)
		return rc;
	ctl_progress_work(prog, true, what, noun, g->seen, g->seen, g->seen_bytes, g->seen_bytes);
	return 0;
}

/* gc_mounted - count what a sweep would remove, without removing anything. Exit status. */
static int gc_mounted(struct ckpt_repo *r, const char *root, bool json)
{
	struct gc_count g = { .ix = r->ix };
	struct ctl_progress prog;
	char b[64];
	int rc;

	rc = ctl_gc_scan(r, &g, &prog, "gc", "chunk files scanned");
	if (rc < 0) {
		ctl_err("cannot list chunk files of store '%s': %s", root, strerror(-rc));
		return EXIT_ERROR;
	}
	ctl_progress_clear(&prog);
	if (json) {
		json_t *o = ctl_store_json(root, r);

		json_object_set_new(o, "swept", json_false());
		json_object_set_new(o, "unreferenced_chunk_files", ctl_u64(g.files));
		json_object_set_new(o, "unreferenced_bytes", ctl_u64(g.bytes));
		return ctl_print("ckptfs-gc/1", o) < 0 ? EXIT_ERROR : EXIT_OK;
	}
	if (r->mounted)
		printf("gc: store is mounted by pid %d; the daemon frees a file's chunks when it is "
		       "deleted. %" PRIu64 " unreferenced chunk files (%s) remain from earlier "
		       "crashes; unmount and run 'ckptctl %s gc' to remove them.\n",
		       (int)r->owner_pid, g.files, policy_size_text(g.bytes, b, sizeof(b)), root);
	else
		printf("gc: cannot lock store '%s' for writing; nothing removed. %" PRIu64
		       " unreferenced chunk files (%s) found.\n",
		       root, g.files, policy_size_text(g.bytes, b, sizeof(b)));
	return EXIT_OK;
}

/*
 * gc_sweep - ckpt_repo_sweep on an exclusively held store. Bytes freed are measured as the
 * stored size of every chunk file on disk (store_chunk_foreach) before the sweep minus after
 * it, so they include chunks released with the unlinked inodes and refs-0 rows. Exit status.
 */
static int gc_sweep(struct ckpt_repo *r, const char *root, bool json)
{
	struct gc_count before = { 0 }, after = { 0 };
	uint64_t inodes = 0, chunks = 0, freed;
	struct ctl_progress prog;
	char b[64];
	int rc;

	rc = ctl_gc_scan(r, &before, &prog, "gc", "chunk files scanned");
	if (rc < 0)
		goto fail_list;
	/* the sweep is one call into fs/: a status, no amounts */
	if (ctl_progress_due(&prog, true))
		ctl_progress_line(&prog, "gc: removing unlinked inodes and unreferenced chunks");
	rc = ckpt_repo_sweep(r, &inodes, &chunks);
	if (rc < 0) {
		ctl_err("cannot sweep store '%s': %s; nothing half-done is visible, run "
			"'ckptctl %s verify' to check it",
			root, strerror(-rc), root);
		return EXIT_ERROR;
	}
	rc = ctl_gc_scan(r, &after, &prog, "gc", "chunk files recounted");
	if (rc < 0)
		goto fail_list;
	ctl_progress_clear(&prog);
	freed = before.bytes > after.bytes ? before.bytes - after.bytes : 0;
	if (json) {
		json_t *o = ctl_store_json(root, r);

		json_object_set_new(o, "swept", json_true());
		json_object_set_new(o, "inodes_removed", ctl_u64(inodes));
		json_object_set_new(o, "chunks_removed", ctl_u64(chunks));
		json_object_set_new(o, "freed_bytes", ctl_u64(freed));
		json_object_set_new(o, "chunk_files", ctl_u64(after.files));
		json_object_set_new(o, "chunk_bytes", ctl_u64(after.bytes));
		return ctl_print("ckptfs-gc/1", o) < 0 ? EXIT_ERROR : EXIT_OK;
	}
	printf("gc: removed %" PRIu64 " unlinked inodes and %" PRIu64 " chunks, freed %s\n",
	       inodes, chunks, policy_size_text(freed, b, sizeof(b)));
	printf("gc: %" PRIu64 " chunk files remain (%s)\n", after.files,
	       policy_size_text(after.bytes, b, sizeof(b)));
	return EXIT_OK;

fail_list:
	ctl_err("cannot list chunk files of store '%s': %s", root, strerror(-rc));
	return EXIT_ERROR;
}

/*
 * gc_preview - --dry-run on an exclusively held store: what gc_sweep would remove and report,
 * in its words and under its JSON keys ("swept" false), from ckpt_repo_sweep_preview. Nothing
 * is removed. Exit status.
 */
static int gc_preview(struct ckpt_repo *r, const char *root, bool json)
{
	struct ckpt_sweep_preview p;
	struct ctl_progress prog;
	char b[64];
	int rc;

	ctl_progress_init(&prog);
	/* one call into fs/, as the sweep: a status, no amounts */
	if (ctl_progress_due(&prog, true))
		ctl_progress_line(&prog, "gc: finding what a sweep would remove");
	rc = ckpt_repo_sweep_preview(r, &p);
	ctl_progress_clear(&prog);
	if (rc < 0) {
		ctl_err("cannot find what a sweep of store '%s' would remove: %s; nothing was "
			"removed, run 'ckptctl %s status' to check the store",
			root, strerror(-rc), root);
		return EXIT_ERROR;
	}
	if (json) {
		json_t *o = ctl_store_json(root, r);

		json_object_set_new(o, "swept", json_false());
		json_object_set_new(o, "inodes_removed", ctl_u64(p.inodes));
		json_object_set_new(o, "chunks_removed", ctl_u64(p.chunks));
		json_object_set_new(o, "freed_bytes", ctl_u64(p.bytes));
		json_object_set_new(o, "chunk_files", ctl_u64(p.left_files));
		json_object_set_new(o, "chunk_bytes", ctl_u64(p.left_bytes));
		return ctl_print("ckptfs-gc/1", o) < 0 ? EXIT_ERROR : EXIT_OK;
	}
	printf("gc: would remove %" PRIu64 " unlinked inodes and %" PRIu64 " chunks, freeing %s\n",
	       p.inodes, p.chunks, policy_size_text(p.bytes, b, sizeof(b)));
	printf("gc: %" PRIu64 " chunk files would remain (%s)\n", p.left_files,
	       policy_size_text(p.left_bytes, b, sizeof(b)));
	printf("gc: dry run, nothing removed; run 'ckptctl %s gc' to remove them\n", root);
	return EXIT_OK;
}

static int gc_run(const char *root, bool json, bool dry_run)
{
	struct ckpt_repo *r = NULL;
	bool writable = false;
	int status;

	/* --dry-run too takes the lock exclusively: the preview runs the sweep's own rule in a
	 * transaction it rolls back, and nothing may change the store between it and a sweep */
	if (ctl_open_write(root, NULL, &r, &writable) < 0)
		return EXIT_ERROR;
	if (!writable)
		status = gc_mounted(r, root, json);
	else
		status = dry_run ? gc_preview(r, root, json) : gc_sweep(r, root, json);
	ckpt_repo_close(r);
	return status;
}

int cmd_gc(const struct ctl_opts *o)
{
	return gc_run(o->root, o->json, o->dry_run);
}
