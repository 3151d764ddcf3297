/*
 * diff.c — ckptctl diff STEP STEP: what changed from one step to another, read from the index
 * alone (no chunk is read): the regular files added, removed and changed, and the bytes the
 * two steps share, that is the chunks both name.
 *
 * Invariants:
 *   1. Files are matched by their path inside the step directory; a file is changed when its
 *      size or whole-file XXH3-128 differs, or, for a file with no digest recorded (never
 *      closed), when its size or its list of chunks differs.
 *   2. A chunk is named by the XXH3-128 of its raw bytes and its length is its raw size (index
 *      invariant: an extent's length equals its chunk's raw size), so two steps share a chunk
 *      exactly when both name its digest, and "bytes shared" counts each shared chunk once, at
 *      its raw size: what the second step costs nothing to store beside the first.
 *   3. Directories, symbolic links and special files are not compared.
 *
 * Works on a mounted store (read-only, as every reader: main.c invariant 1); a file removed by
 * the daemon between the listing and its reading is left out.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctl.h"

/* One extent's chunk: its digest and raw length (bytes). */
struct dchunk {
	uint8_t hash[IDX_HASH_LEN];
	uint32_t len;
};

/* One regular file of a step. */
struct dfile {
	const char *rel;        /* borrowed from the step's tree */
	uint64_t size;          /* bytes */
	bool has_hash;
	uint8_t hash[IDX_HASH_LEN];
	size_t first, n;        /* its chunks: chunks[first .. first + n) of its step, in order */
};

/* One side of the diff. */
struct dstep {
	const struct idx_step *s; /* borrowed from m */
	struct step_match m;
	struct tree t;
	struct dfile *files;      /* sorted by rel, as t is */
	size_t nfiles;
	struct dchunk *chunks;    /* every file's chunks, file after file */
	size_t nchunks, capchunks;
	struct dchunk *uniq;      /* the step's distinct chunks, sorted by digest */
	size_t nuniq;
	uint64_t logical;         /* bytes of its regular files */
	uint64_t uniq_bytes;      /* raw bytes of its distinct chunks */
};

/* One file changed, with the bytes of its new version found in its old one. */
struct dchange {
	const struct dfile *a, *b;
	uint64_t shared;
};

/* The result. */
struct diff {
	const struct dfile **added, **removed; /* files of b only, of a only */
	size_t nadded, nremoved;
	struct dchange *changed;
	size_t nchanged;
	uint64_t unchanged;
	uint64_t shared_chunks, shared_bytes;
};

static int dchunk_cmp(const void *x, const void *y)
{
	return memcmp(((const struct dchunk *)x)->hash, ((const struct dchunk *)y)->hash,
		      IDX_HASH_LEN);
}

/*
 * sorted_uniq - a new array (free()) of the distinct chunks of v[0..n), sorted by digest, into
 * *ret (NULL when n is 0) and *ret_n; the sum of their lengths into *ret_bytes.
 * Returns 0 or -ENOMEM.
 */
static int sorted_uniq(const struct dchunk *v, size_t n, struct dchunk **ret, size_t *ret_n,
		       uint64_t *ret_bytes)
{
	struct dchunk *u = NULL;
	size_t k = 0;
	uint64_t bytes = 0;

	if (n) {
		if (!(u = malloc(n * sizeof(*u))))
			return -ENOMEM;
		memcpy(u, v, n * sizeof(*u));
		qsort(u, n, sizeof(*u), dchunk_cmp);
		for (size_t i = 0; i < n; i++) {
			if (k && !dchunk_cmp(&u[k - 1], &u[i]))
				continue;
			u[k++] = u[i];
			bytes += u[i].len;
		}
	}
	*ret = u;
	*ret_n = k;
	*ret_bytes = bytes;
	return 0;
}

/* common - the number and raw bytes of the chunks in both sorted, distinct a and b. */
static void common(const struct dchunk *a, size_t na, const struct dchunk *b, size_t nb,
		   uint64_t *ret_n, uint64_t *ret_bytes)
{
	size_t i = 0, j = 0;

	*ret_n = *ret_bytes = 0;
	while (i < na && j < nb) {
		int c = dchunk_cmp(&a[i], &b[j]);

		if (c == 0) {
			(*ret_n)++;
			*ret_bytes += b[j].len;
		}
		i += c <= 0;
		j += c >= 0;
	}
}

/*
 * dstep_file - add regular file ino (path rel) to d: its inode and its chunks. A file gone
 * meanwhile (-ENOENT: the daemon removed it) is skipped. Returns 0, -ENOMEM, or -errno of the
 * index.
 */
static int dstep_file(struct idx *ix, struct dstep *d, const char *rel, uint64_t ino)
{
	struct idx_extent *ext = NULL;
	struct idx_inode in;
	struct dfile *f;
	size_t n = 0;
	int rc;

	rc = idx_inode_get(ix, ino, &in);
	if (rc == 0)
		rc = idx_file_extents(ix, ino, &ext, &n);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	f = &d->files[d->nfiles];
	*f = (struct dfile){ .rel = rel, .size = in.size, .has_hash = in.has_hash,
			     .first = d->nchunks, .n = n };
	memcpy(f->hash, in.hash, IDX_HASH_LEN);
	for (size_t i = 0; i < n; i++) {
		if (ckpt_grow(&d->chunks, &d->capchunks, d->nchunks, sizeof(*d->chunks)) < 0) {
			free(ext);
			return -ENOMEM;
		}
		memcpy(d->chunks[d->nchunks].hash, ext[i].hash, IDX_HASH_LEN);
		d->chunks[d->nchunks++].len = ext[i].length;
	}
	free(ext);
	d->logical += in.size;
	d->nfiles++;
	return 0;
}

/*
 * dstep_load - find the step arg names in store root, then its regular files and their chunks,
 * into d (zeroed by the caller; dstep_free frees it whatever this returns).
 * Returns 0, or EXIT_ERROR (printed: no such step, no directory, an index error, memory).
 */
static int dstep_load(struct ckpt_repo *r, const char *root, const char *arg, struct dstep *d)
{
	int rc;

	rc = ctl_find_steps(r->ix, arg, &d->m);
	if (rc < 0)
		return ctl_index_err(root, "list steps", rc);
	if (!(d->s = ctl_pick_step(&d->m)))
		return ctl_no_step(root, arg);
	if (!d->s->dir_ino) {
		ctl_err("step %" PRId64 " ('%s', id %" PRId64 ") is %s and has no directory any "
			"more; nothing to compare",
			d->s->step, d->s->name, d->s->id, idx_step_state_name(d->s->state));
		return EXIT_ERROR;
	}
	rc = ctl_tree_collect(r->ix, d->s->dir_ino, &d->t);
	if (rc == -ENOENT)
		rc = 0; /* the directory went away meanwhile (mounted): no files */
	if (rc < 0)
		return ctl_index_err(root, "list the step's files", rc);
	if (!(d->files = calloc(d->t.n ? d->t.n : 1, sizeof(*d->files)))) {
		ctl_err("out of memory");
		return EXIT_ERROR;
	}
	for (size_t i = 0; i < d->t.n; i++) {
		if (!S_ISREG(d->t.v[i].mode))
			continue;
		rc = dstep_file(r->ix, d, d->t.v[i].rel, d->t.v[i].ino);
		if (rc == -ENOMEM) {
			ctl_err("out of memory");
			return EXIT_ERROR;
		}
		if (rc < 0)
			return ctl_index_err(root, "read the step's files", rc);
	}
	if (sorted_uniq(d->chunks, d->nchunks, &d->uniq, &d->nuniq, &d->uniq_bytes) < 0) {
		ctl_err("out of memory");
		return EXIT_ERROR;
	}
	return 0;
}

/* dstep_free - what d owns (not d itself). */
static void dstep_free(struct dstep *d)
{
	free(d->m.found.v);
	ctl_tree_free(&d->t);
	free(d->files);
	free(d->chunks);
	free(d->uniq);
}

/* file_changed - whether a and b (the same path) differ (invariant 1). */
static bool file_changed(const struct dstep *da, const struct dfile *a, const struct dstep *db,
			 const struct dfile *b)
{
	if (a->size != b->size || a->has_hash != b->has_hash)
		return true;
	if (a->has_hash)
		return memcmp(a->hash, b->hash, IDX_HASH_LEN) != 0;
	if (a->n != b->n)
		return true;
	for (size_t i = 0; i < a->n; i++)
		if (da->chunks[a->first + i].len != db->chunks[b->first + i].len ||
		    dchunk_cmp(&da->chunks[a->first + i], &db->chunks[b->first + i]))
			return true;
	return false;
}

/*
 * change_shared - the raw bytes of b's distinct chunks that a names too.
 * Returns 0 or -ENOMEM.
 */
static int change_shared(const struct dstep *da, const struct dfile *a, const struct dstep *db,
			 const struct dfile *b, uint64_t *ret)
{
	struct dchunk *ua = NULL, *ub = NULL;
	size_t na, nb;
	uint64_t n, bytes;
	int rc;

	rc = sorted_uniq(da->chunks + a->first, a->n, &ua, &na, &bytes);
	if (rc == 0)
		rc = sorted_uniq(db->chunks + b->first, b->n, &ub, &nb, &bytes);
	if (rc == 0) {
		common(ua, na, ub, nb, &n, &bytes);
		*ret = bytes;
	}
	free(ua);
	free(ub);
	return rc;
}

/*
 * diff_compute - the diff of a to b into x (zeroed by the caller; diff_free frees it): both
 * file lists are sorted by path, so one merge walks them.
 * Returns 0 or -ENOMEM.
 */
static int diff_compute(const struct dstep *a, const struct dstep *b, struct diff *x)
{
	size_t i = 0, j = 0, capa = 0, capr = 0, capc = 0;

	while (i < a->nfiles || j < b->nfiles) {
		int c = i == a->nfiles ? 1 : j == b->nfiles ? -1
							    : strcmp(a->files[i].rel, b->files[j].rel);

		if (c < 0) {
			if (ckpt_grow(&x->removed, &capr, x->nremoved, sizeof(*x->removed)) < 0)
				return -ENOMEM;
			x->removed[x->nremoved++] = &a->files[i++];
		} else if (c > 0) {
			if (ckpt_grow(&x->added, &capa, x->nadded, sizeof(*x->added)) < 0)
				return -ENOMEM;
			x->added[x->nadded++] = &b->files[j++];
		} else if (file_changed(a, &a->files[i], b, &b->files[j])) {
			struct dchange *ch;

			if (ckpt_grow(&x->changed, &capc, x->nchanged, sizeof(*x->changed)) < 0)
				return -ENOMEM;
			ch = &x->changed[x->nchanged++];
			ch->a = &a->files[i++];
			ch->b = &b->files[j++];
			if (change_shared(a, ch->a, b, ch->b, &ch->shared) < 0)
				return -ENOMEM;
		} else {
			x->unchanged++;
			i++;
			j++;
		}
	}
	common(a->uniq, a->nuniq, b->uniq, b->nuniq, &x->shared_chunks, &x->shared_bytes);
	return 0;
}

static void diff_free(struct diff *x)
{
	free(x->added);
	free(x->removed);
	free(x->changed);
}

/* side_json - one step's fields in the diff's JSON; a new reference, NULL when out of memory. */
static json_t *side_json(const struct dstep *d)
{
	return json_pack("{s:I, s:I, s:o, s:s, s:s, s:I, s:I, s:I, s:I}", "id", (json_int_t)d->s->id,
			 "step", (json_int_t)d->s->step, "name", policy_json_name(d->s->name),
			 "layout", ctl_kind(d->s->kind), "state", idx_step_state_name(d->s->state),
			 "files", (json_int_t)d->nfiles, "logical_bytes", (json_int_t)d->logical,
			 "chunks", (json_int_t)d->nuniq, "chunk_bytes", (json_int_t)d->uniq_bytes);
}

/* files_json - an array of {path, size} of files v[0..n); a new reference or NULL. */
static json_t *files_json(const struct dfile *const *v, size_t n)
{
	json_t *arr = json_array();

	for (size_t i = 0; arr && i < n; i++)
		if (json_array_append_new(arr, json_pack("{s:o, s:I}", "path",
							 policy_json_name(v[i]->rel), "size",
							 (json_int_t)v[i]->size)) < 0) {
			json_decref(arr);
			return NULL;
		}
	return arr;
}

/* diff_json - the result as one JSON document on stdout. Returns 0, -ENOMEM or -EIO. */
static int diff_json(const struct dstep *a, const struct dstep *b, const struct diff *x)
{
	json_t *ch = json_array();

	for (size_t i = 0; ch && i < x->nchanged; i++) {
		const struct dchange *c = &x->changed[i];

		if (json_array_append_new(ch, json_pack("{s:o, s:I, s:I, s:I}", "path",
							policy_json_name(c->b->rel), "old_bytes",
							(json_int_t)c->a->size, "new_bytes",
							(json_int_t)c->b->size, "shared_bytes",
							(json_int_t)c->shared)) < 0) {
			json_decref(ch);
			ch = NULL;
		}
	}
	/* json_pack's "o" takes the references, and frees them too when it fails */
	return ctl_print("ckptfs-diff/1",
			 json_pack("{s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:I}", "from", side_json(a),
				   "to", side_json(b), "added", files_json(x->added, x->nadded),
				   "removed", files_json(x->removed, x->nremoved), "changed", ch,
				   "unchanged", (json_int_t)x->unchanged, "shared_chunks",
				   (json_int_t)x->shared_chunks, "shared_bytes",
				   (json_int_t)x->shared_bytes));
}

/* side_text - "100 'iter_0000100' (megatron, complete): 4 files, 9.6 MiB" for one step. */
static void side_text(const char *label, const struct dstep *d)
{
	char q[CTL_QUOTE_CAP(IDX_STEP_NAME_MAX)], sb[32];

	printf("%-11s%" PRId64 " '%s' (%s, %s, id %" PRId64 "): %zu file%s, %s\n", label,
	       d->s->step, ctl_quote(d->s->name, q, sizeof(q)), ctl_kind(d->s->kind),
	       idx_step_state_name(d->s->state), d->s->id, d->nfiles, d->nfiles == 1 ? "" : "s",
	       ctl_short_size(d->logical, sb, sizeof(sb)));
}

/* diff_text - the result as text on stdout, each list sorted by path. */
static void diff_text(const struct dstep *a, const struct dstep *b, const struct diff *x)
{
	char q[CTL_QUOTE_CAP(PATH_CAP)], s1[32], s2[32], s3[32], big[64];
	size_t i;

	side_text("from:", a);
	side_text("to:", b);
	for (i = 0; i < x->nadded; i++)
		printf("added:     %s (%s)\n", ctl_quote(x->added[i]->rel, q, sizeof(q)),
		       ctl_short_size(x->added[i]->size, s1, sizeof(s1)));
	for (i = 0; i < x->nremoved; i++)
		printf("removed:   %s (%s)\n", ctl_quote(x->removed[i]->rel, q, sizeof(q)),
		       ctl_short_size(x->removed[i]->size, s1, sizeof(s1)));
	for (i = 0; i < x->nchanged; i++) {
		const struct dchange *c = &x->changed[i];

		printf("changed:   %s (%s -> %s, %s shared)\n", ctl_quote(c->b->rel, q, sizeof(q)),
		       ctl_short_size(c->a->size, s1, sizeof(s1)),
		       ctl_short_size(c->b->size, s2, sizeof(s2)),
		       ctl_short_size(c->shared, s3, sizeof(s3)));
	}
	printf("unchanged: %" PRIu64 " file%s\n", x->unchanged, x->unchanged == 1 ? "" : "s");
	printf("shared:    %s in %" PRIu64 " chunks", policy_size_text(x->shared_bytes, big, sizeof(big)),
	       x->shared_chunks);
	if (b->uniq_bytes)
		printf(", %.1f%% of the second step's chunk bytes", 100.0 * (double)x->shared_bytes /
							 (double)b->uniq_bytes);
	putchar('\n');
}

int cmd_diff(const struct ctl_opts *o)
{
	struct dstep a = { 0 }, b = { 0 };
	struct diff x = { 0 };
	struct ckpt_repo *r = NULL;
	int status = EXIT_ERROR, rc;

	if (ctl_open_read(o->root, &r) < 0)
		return EXIT_ERROR;
	if (dstep_load(r, o->root, o->argv[0], &a) != 0 ||
	    dstep_load(r, o->root, o->argv[1], &b) != 0)
		goto out;
	if (diff_compute(&a, &b, &x) < 0) {
		ctl_err("out of memory");
		goto out;
	}
	if (o->json) {
		rc = diff_json(&a, &b, &x);
		if (rc < 0) {
			ctl_err("cannot print the diff: %s", strerror(-rc));
			goto out;
		}
	} else {
		diff_text(&a, &b, &x);
	}
	status = EXIT_OK;
out:
	diff_free(&x);
	dstep_free(&a);
	dstep_free(&b);
	ckpt_repo_close(r);
	return status;
}
