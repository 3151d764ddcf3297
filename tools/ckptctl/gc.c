/*
 * gc.c — ckptctl gc: remove unlinked inodes and unreferenced chunks (only while not
 * mounted); while mounted, count what a sweep would remove.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

int ctl_gc_count(const struct store_hash *h, uint64_t stored_size, void *arg)
{
	struct gc_count *g = arg;

	if (g->ix) {
		int rc = idx_chunk_exists(g->ix, h->b);

		if (rc < 0)
			return rc;
		if (rc)
			return 0;
	}
	g->files++;
	g->bytes += stored_size;
	return 0;
}

/* gc_mounted - count what a sweep would remove, without removing anything. Exit status. */
static int gc_mounted(struct ckpt_repo *r, const char *root, bool json)
{
	struct gc_count g = { .ix = r->ix };
	char b[64];
	int rc;

	rc = store_chunk_foreach(r->st, ctl_gc_count, &g);
	if (rc < 0) {
		ctl_err("cannot list chunk files of store '%s': %s", root, strerror(-rc));
		return EXIT_ERROR;
	}
	if (json) {
		json_t *o = ctl_store_json(root, r);

		json_object_set_new(o, "swept", json_false());
		json_object_set_new(o, "unreferenced_chunk_files", ctl_u64(g.files));
		json_object_set_new(o, "unreferenced_bytes", ctl_u64(g.bytes));
		return ctl_print(o) < 0 ? EXIT_ERROR : EXIT_OK;
	}
	if (r->mounted)
		printf("gc: store is mounted by pid %d; the daemon frees a file's chunks when it is "
		       "deleted. %" PRIu64 " unreferenced chunk files (%s) remain from earlier "
		       "crashes; unmount and run 'ckptctl %s gc' to remove them.\n",
		       (int)r->owner_pid, g.files, ctl_size(g.bytes, b, sizeof(b)), root);
	else
		printf("gc: cannot lock store '%s' for writing; nothing removed. %" PRIu64
		       " unreferenced chunk files (%s) found.\n",
		       root, g.files, ctl_size(g.bytes, b, sizeof(b)));
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
	char b[64];
	int rc;

	rc = store_chunk_foreach(r->st, ctl_gc_count, &before);
	if (rc < 0)
		goto fail_list;
	rc = ckpt_repo_sweep(r, &inodes, &chunks);
	if (rc < 0) {
		ctl_err("cannot sweep store '%s': %s; nothing half-done is visible, run "
			"'ckptctl %s verify' to check it",
			root, strerror(-rc), root);
		return EXIT_ERROR;
	}
	rc = store_chunk_foreach(r->st, ctl_gc_count, &after);
	if (rc < 0)
		goto fail_list;
	freed = before.bytes > after.bytes ? before.bytes - after.bytes : 0;
	if (json) {
		json_t *o = ctl_store_json(root, r);

		json_object_set_new(o, "swept", json_true());
		json_object_set_new(o, "inodes_removed", ctl_u64(inodes));
		json_object_set_new(o, "chunks_removed", ctl_u64(chunks));
		json_object_set_new(o, "bytes_freed", ctl_u64(freed));
		json_object_set_new(o, "chunk_files", ctl_u64(after.files));
		json_object_set_new(o, "chunk_bytes", ctl_u64(after.bytes));
		return ctl_print(o) < 0 ? EXIT_ERROR : EXIT_OK;
	}
	printf("gc: removed %" PRIu64 " unlinked inodes and %" PRIu64 " chunks, freed %s\n",
	       inodes, chunks, ctl_size(freed, b, sizeof(b)));
	printf("gc: %" PRIu64 " chunk files remain (%s)\n", after.files,
	       ctl_size(after.bytes, b, sizeof(b)));
	return EXIT_OK;

fail_list:
	ctl_err("cannot list chunk files of store '%s': %s", root, strerror(-rc));
	return EXIT_ERROR;
}

static int gc_run(const char *root, bool json)
{
	struct ckpt_repo *r = NULL;
	bool writable = false;
	int status;

	if (ctl_open_write(root, NULL, &r, &writable) < 0)
		return EXIT_ERROR;
	status = writable ? gc_sweep(r, root, json) : gc_mounted(r, root, json);
	ckpt_repo_close(r);
	return status;
}

int cmd_gc(const struct ctl_opts *o)
{
	return gc_run(o->root, o->json);
}
