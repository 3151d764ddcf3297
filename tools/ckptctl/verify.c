/*
 * verify.c — ckptctl verify: re-read every chunk and re-hash every file; bad chunks are
 * marked (and cleared once sound) when the store can be written.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctl.h"

/* One chunk row of the index, and what verification found. */
struct v_chunk {
	uint8_t hash[IDX_HASH_LEN];
	uint32_t raw_size, stored_size;
	int64_t refs;
	bool marked;     /* marked bad in the index before this run */
	bool gone;       /* mounted: the row disappeared during the run (not damage) */
	bool unused;     /* failed, but no file uses it (a note, not damage) */
	bool remote;     /* missing, and used by other nodes' files only (IDX_INODE_FOREIGN): on
			    the remote, fetched at the first read through the mount (a note) */
	int err;         /* 0 sound, else the -errno of store_chunk_verify */
};

/* One damaged file, or one damaged chunk nobody uses. */
struct v_damage {
	uint64_t ino;        /* 0: a chunk no file uses */
	char *path;          /* owned; filled before printing */
	size_t chunk;        /* index in v_ctx.chunks, or SIZE_MAX for a whole-file failure */
	char reason[128];    /* printed in parentheses */
};

struct v_ctx {
	struct ckpt_repo *r;
	const char *root;
	const char *what; /* the command on the progress line: "verify", or "fsck" running it */
	bool json; /* --json */
	bool writable;
	struct v_chunk *chunks;
	size_t nchunks, capchunks;
	uint64_t total_bytes;         /* sum of stored sizes: what is read from disk */
	struct v_damage *dmg;
	size_t ndmg, capdmg;
	struct v_damage *notes;       /* files using chunks marked bad that verify clean now, and
				       * failed chunks no file uses */
	size_t nnotes, capnotes;
	uint64_t *files;              /* inodes of regular files reachable from the root */
	size_t nfiles, capfiles;
	uint64_t files_hashed, files_unhashed;
	uint64_t marked_now, cleared_now;
	struct ctl_progress prog;
	uint64_t files_done;       /* the files pass: files finished, */
	uint64_t file_bytes;       /* their bytes (holes included) and the current file's so far, */
	uint64_t file_bytes_total; /* and the bytes of all files (the index's logical bytes) */
};

static int v_chunk_row(const uint8_t hash[IDX_HASH_LEN], uint32_t raw_size, uint32_t stored_size,
		       uint8_t codec, int64_t refs, bool bad, void *arg)
{
	struct v_ctx *c = arg;
	struct v_chunk *k;

	if (ckpt_grow(&c->chunks, &c->capchunks, c->nchunks, sizeof(*c->chunks)) < 0)
		return -ENOMEM;
	k = &c->chunks[c->nchunks++];
	memset(k, 0, sizeof(*k));
	memcpy(k->hash, hash, IDX_HASH_LEN);
	k->raw_size = raw_size;
	k->stored_size = stored_size;
	k->refs = refs;
	k->marked = bad;
	c->total_bytes += stored_size;
	return 0;
}

static int v_chunk_cmp(const void *a, const void *b)
{
	return memcmp(a, b, IDX_HASH_LEN); /* hash is the first member */
}

/* v_chunk_find - the chunk row with hash, or NULL. */
static struct v_chunk *v_chunk_find(struct v_ctx *c, const uint8_t hash[IDX_HASH_LEN])
{
	return bsearch(hash, c->chunks, c->nchunks, sizeof(*c->chunks), v_chunk_cmp);
}

/* Add a damage (or note) record; reason is printf-formatted. Returns 0 or -ENOMEM. */
static int v_add(struct v_damage **v, size_t *n, size_t *cap, uint64_t ino, size_t chunk,
		 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int v_add(struct v_damage **v, size_t *n, size_t *cap, uint64_t ino, size_t chunk,
		 const char *fmt, ...)
{
	struct v_damage *d;
	va_list ap;

	if (ckpt_grow(v, cap, *n, sizeof(**v)) < 0)
		return -ENOMEM;
	d = &(*v)[(*n)++];
	memset(d, 0, sizeof(*d));
	d->ino = ino;
	d->chunk = chunk;
	va_start(ap, fmt);
	vsnprintf(d->reason, sizeof(d->reason), fmt, ap);
	va_end(ap);
	return 0;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* u64_unique - sort v[0..n) and drop duplicates; returns the new count. */
static size_t u64_unique(uint64_t *v, size_t n)
{
	size_t i, k;

	if (n)
		qsort(v, n, sizeof(*v), u64_cmp);
	for (i = 0, k = 0; i < n; i++)
		if (k == 0 || v[k - 1] != v[i])
			v[k++] = v[i];
	return k;
}

/* Users of one chunk, collected by idx_chunk_users. */
struct v_users {
	uint64_t *ino;
	size_t n, cap;
};

static int v_user(uint64_t ino, uint64_t offset, void *arg)
{
	struct v_users *u = arg;

	if (ckpt_grow(&u->ino, &u->cap, u->n, sizeof(*u->ino)) < 0)
		return -ENOMEM;
	u->ino[u->n++] = ino;
	return 0;
}

/* Chunks v_chunks hands store_chunks_verify at a time (its default threads: a chunk's O_DIRECT
 * read waits on the disk while others decode); the progress line moves once per batch. */
#define V_BATCH 64

/*
 * v_chunks - verify every chunk row against its file on disk (store_chunks_verify, several at
 * once). Returns 0 or -errno of the index (-ENOMEM).
 */
static int v_chunks(struct v_ctx *c)
{
	struct store_hash hs[V_BATCH];
	int res[V_BATCH];
	uint64_t done_bytes = 0;
	size_t i;
	int rc;

	ctl_progress_init(&c->prog);
	for (i = 0; i < c->nchunks; i++) {
		struct v_chunk *k = &c->chunks[i];

		if (i % V_BATCH == 0) {
			size_t nb = c->nchunks - i < V_BATCH ? c->nchunks - i : V_BATCH;

			for (size_t j = 0; j < nb; j++)
				memcpy(hs[j].b, c->chunks[i + j].hash, STORE_HASH_LEN);
			store_chunks_verify(c->r->st, hs, nb, 0, NULL, res);
		}
		ctl_progress_work(&c->prog, i == 0, c->what, "chunks", i, c->nchunks, done_bytes,
				  c->total_bytes);
		k->err = res[i % V_BATCH];
		if (k->err == -ENOMEM)
			return -ENOMEM;
		if (k->err < 0 && !c->writable) {
			/* The daemon may have released the chunk since we read the rows. */
			rc = idx_chunk_exists(c->r->ix, k->hash);
			if (rc < 0)
				return rc;
			if (rc == 0) {
				k->gone = true;
				k->err = 0;
			}
		}
		done_bytes += k->stored_size;
	}
	ctl_progress_work(&c->prog, true, c->what, "chunks", c->nchunks, c->nchunks, done_bytes,
			  c->total_bytes);
	return 0;
}

/* v_all_foreign - 1 if every file in u is another node's (IDX_INODE_FOREIGN), 0 if not, or
 * -errno of the index. */
static int v_all_foreign(struct v_ctx *c, const struct v_users *u)
{
	for (size_t j = 0; j < u->n; j++) {
		struct idx_inode a;
		int rc = idx_inode_get(c->r->ix, u->ino[j], &a);

		if (rc == -ENOENT)
			continue;
		if (rc < 0)
			return rc;
		if (!(a.flags & IDX_INODE_FOREIGN))
			return 0;
	}
	return 1;
}

/*
 * v_chunk_users - record a damage line for every file using each failed chunk, and a note for
 * every file using a chunk marked bad that verifies clean now. Returns 0 or -errno.
 */
static int v_chunk_users(struct v_ctx *c)
{
	struct v_users u = { 0 };
	char hex[2 * STORE_HASH_LEN + 1];
	int rc = 0;

	for (size_t i = 0; i < c->nchunks; i++) {
		struct v_chunk *k = &c->chunks[i];

		if (k->gone || (!k->err && !k->marked))
			continue;
		u.n = 0;
		rc = idx_chunk_users(c->r->ix, k->hash, v_user, &u);
		if (rc < 0)
			goto out;
		u.n = u64_unique(u.ino, u.n); /* a file may use the chunk at several offsets */
		ctl_hex(k->hash, hex);
		if (k->err == -ENOENT && u.n > 0 && (rc = v_all_foreign(c, &u)) != 0) {
			if (rc < 0)
				goto out;
			k->unused = k->remote = true;
			rc = v_add(&c->notes, &c->nnotes, &c->capnotes, u.ino[0], i,
				   "chunk %s: another node's, on the remote, not fetched here yet; a "
				   "read through the mount fetches and verifies it", hex);
		} else if (k->err) {
			if (u.n == 0) {
				k->unused = true;
				rc = v_add(&c->notes, &c->nnotes, &c->capnotes, 0, i,
					   "%s; no file uses it, 'ckptctl %s gc' removes it",
					   ctl_chunk_err(k->err), c->root);
			}
			for (size_t j = 0; j < u.n && rc == 0; j++)
				rc = v_add(&c->dmg, &c->ndmg, &c->capdmg, u.ino[j], i,
					   "chunk %s: %s", hex, ctl_chunk_err(k->err));
		} else {
			for (size_t j = 0; j < u.n && rc == 0; j++)
				rc = v_add(&c->notes, &c->nnotes, &c->capnotes, u.ino[j], i,
					   "chunk %s: marked bad in the index, verifies clean now%s",
					   hex, c->writable ? "; mark cleared" : "");
		}
		if (rc < 0)
			goto out;
	}
out:
	free(u.ino);
	return rc;
}

/*
 * v_marks - writable only: record failed chunks as bad and clear the marks of chunks that
 * verify clean, in one transaction. Returns 0 or -errno of the index.
 */
static int v_marks(struct v_ctx *c)
{
	uint64_t marked = 0, cleared = 0;
	size_t i;
	int rc;

	for (i = 0; i < c->nchunks; i++)
		if (!c->chunks[i].err != !c->chunks[i].marked && !c->chunks[i].remote)
			break;
	if (i == c->nchunks)
		return 0; /* nothing to change */
	rc = idx_begin(c->r->ix);
	if (rc < 0)
		return rc;
	for (i = 0; i < c->nchunks; i++) {
		struct v_chunk *k = &c->chunks[i];

		if (k->err && !k->marked && !k->remote) {
			rc = idx_chunk_mark_bad(c->r->ix, k->hash);
			marked++;
		} else if (!k->err && k->marked) {
			rc = idx_chunk_clear_bad(c->r->ix, k->hash);
			cleared++;
		}
		if (rc < 0) {
			idx_rollback(c->r->ix);
			return rc;
		}
	}
	rc = idx_commit(c->r->ix);
	if (rc < 0)
		return rc;
	c->marked_now = marked;
	c->cleared_now = cleared;
	return 0;
}

/* Directory walk: inodes of directories still to list. */
struct v_walk {
	struct v_ctx *c;
	uint64_t *dirs;
	size_t ndirs, capdirs;
};

static int v_walk_ent(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct v_walk *w = arg;
	struct v_ctx *c = w->c;

	if (S_ISDIR(mode)) {
		if (ckpt_grow(&w->dirs, &w->capdirs, w->ndirs, sizeof(*w->dirs)) < 0)
			return -ENOMEM;
		w->dirs[w->ndirs++] = ino;
	} else if (S_ISREG(mode)) {
		if (ckpt_grow(&c->files, &c->capfiles, c->nfiles, sizeof(*c->files)) < 0)
			return -ENOMEM;
		c->files[c->nfiles++] = ino;
	}
	return 0;
}

/*
 * v_collect_files - the inodes of every regular file reachable from the root, each once (hard
 * links share an inode), into c->files. Returns 0 or -errno.
 */
static int v_collect_files(struct v_ctx *c)
{
	struct v_walk w = { .c = c };
	int rc = 0;

	if (ckpt_grow(&w.dirs, &w.capdirs, 0, sizeof(*w.dirs)) < 0)
		return -ENOMEM;
	w.dirs[w.ndirs++] = IDX_ROOT_INO;
	while (w.ndirs) {
		uint64_t dir = w.dirs[--w.ndirs];

		rc = idx_dir_list(c->r->ix, dir, 0, v_walk_ent, &w);
		if (rc == -ENOENT && !c->writable)
			rc = 0; /* removed by the daemon meanwhile */
		if (rc < 0)
			goto out;
	}
	c->nfiles = u64_unique(c->files, c->nfiles);
out:
	free(w.dirs);
	return rc;
}

/* Outcome of hashing one file. */
enum v_file_result {
	VF_SOUND,     /* hash matches, or none recorded */
	VF_SKIPPED,   /* uses a damaged chunk: already reported */
	VF_GONE,      /* removed meanwhile (mounted) */
	VF_DAMAGED,   /* reason filled */
};
/* ctl_progress_work of the files pass, with its counts. */
static void v_files_progress(struct v_ctx *c, bool force)
{
	ctl_progress_work(&c->prog, force, c->what, "files", c->files_done, c->nfiles,
			  c->file_bytes, c->file_bytes_total);
}

/* ctl_sink of verify: count the bytes read, holes too (arg: the struct v_ctx). */
static int count_sink(const void *buf, size_t len, void *arg, char *reason, size_t cap)
{
	struct v_ctx *c = arg;

	(void)buf;
	(void)reason;
	(void)cap;
	c->file_bytes += len;
	v_files_progress(c, false);
	return 0;
}

/*
 * v_hash_file - stream file ino's extents through a hasher and compare with the recorded
 * whole-file digest; the bytes streamed are added to c->file_bytes.
 * @buf: scratch buffer of STORE_CHUNK_MAX bytes. @ret_in: the attributes the check used.
 * @reason: filled for VF_DAMAGED (cap bytes).
 * Returns an enum v_file_result, or -errno of the index (-ENOMEM).
 */
static int v_hash_file(struct v_ctx *c, uint64_t ino, struct store_hasher *hs, uint8_t *buf,
		       struct idx_inode *ret_in, char *reason, size_t cap)
{
	struct idx_extent *ext = NULL;
	struct store_hash got, want;
	char hex[2 * STORE_HASH_LEN + 1];
	size_t n = 0, i;
	int rc;

	rc = idx_inode_get(c->r->ix, ino, ret_in);
	if (rc == -ENOENT)
		return VF_GONE;
	if (rc < 0)
		return rc;
	if (!ret_in->has_hash)
		return VF_SOUND;
	rc = idx_file_extents(c->r->ix, ino, &ext, &n);
	if (rc < 0)
		return rc;
	for (i = 0; i < n; i++) {
		struct v_chunk *k = v_chunk_find(c, ext[i].hash);

		if (k && k->err) {
			rc = VF_SKIPPED;
			goto out;
		}
	}
	rc = ctl_stream(c->r->st, ext, n, ret_in->size, ret_in->flags & IDX_INODE_SPARSE, buf,
			hs, count_sink, c,
			" while reading", reason, cap, &got);
	if (rc != 0) {
		rc = rc == 1 ? VF_DAMAGED : rc;
		goto out;
	}
	store_hasher_digest(hs, &got);
	memcpy(want.b, ret_in->hash, STORE_HASH_LEN);
	if (memcmp(got.b, want.b, STORE_HASH_LEN)) {
		snprintf(reason, cap, "whole-file hash mismatch: recorded %s",
			 ctl_hex(want.b, hex));
		rc = VF_DAMAGED;
		goto out;
	}
	rc = VF_SOUND;
out:
	free(ext);
	return rc;
}

/* same_version - whether two reads of an inode describe the same content. */
static bool same_version(const struct idx_inode *a, const struct idx_inode *b)
{
	return a->size == b->size && a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns &&
	       a->has_hash == b->has_hash && !memcmp(a->hash, b->hash, IDX_HASH_LEN);
}

/*
 * v_files - recompute the whole-file digest of every regular file whose chunks are all sound.
 * Returns 0 or -errno.
 */
static int v_files(struct v_ctx *c)
{
	struct store_hasher *hs = store_hasher_new();
	uint8_t *buf = malloc(STORE_CHUNK_MAX);
	struct idx_stats st;
	int rc = 0;

	if (!hs || !buf) {
		rc = -ENOMEM;
		goto out;
	}
	/* the bytes to go by: every linked regular file's size, as the walk finds the files */
	rc = idx_stats_get(c->r->ix, &st);
	if (rc < 0)
		goto out;
	c->file_bytes_total = st.logical_bytes;
	c->files_done = c->file_bytes = 0;
	ctl_progress_init(&c->prog);
	for (size_t i = 0; i < c->nfiles; i++) {
		struct idx_inode in1, in2;
		char reason[128];
		uint64_t base = c->file_bytes;
		int res, tries = 0;

		v_files_progress(c, i == 0);
		for (;;) {
			c->file_bytes = base;
			res = v_hash_file(c, c->files[i], hs, buf, &in1, reason, sizeof(reason));
			if (res != VF_DAMAGED || c->writable || ++tries > 3)
				break;
			/* Mounted: the daemon may have rewritten the file while we read it. */
			rc = idx_inode_get(c->r->ix, c->files[i], &in2);
			if (rc == -ENOENT) {
				res = VF_GONE;
				break;
			}
			if (rc < 0)
				goto out;
			if (same_version(&in1, &in2))
				break;
		}
		if (res < 0) {
			rc = res;
			goto out;
		}
		/* a file not read (no digest, a damaged chunk) or read only in part counts whole */
		c->file_bytes = base + (res == VF_GONE ? 0 : in1.size);
		c->files_done++;
		if (res == VF_DAMAGED) {
			rc = v_add(&c->dmg, &c->ndmg, &c->capdmg, c->files[i], SIZE_MAX, "%s",
				   reason);
			if (rc < 0)
				goto out;
		}
		if (res == VF_SOUND && in1.has_hash)
			c->files_hashed++;
		else if (res == VF_SOUND)
			c->files_unhashed++;
	}
	v_files_progress(c, true);
	rc = 0;
out:
	store_hasher_free(hs);
	free(buf);
	return rc;
}

static int v_damage_cmp(const void *a, const void *b)
{
	const struct v_damage *x = a, *y = b;
	int d = strcmp(x->path ? x->path : "", y->path ? y->path : "");

	if (d)
		return d;
	return strcmp(x->reason, y->reason);
}

/* v_paths - fill and sort the paths of damage records. Returns 0 or -errno. */
static int v_paths(struct v_ctx *c, struct v_damage *v, size_t n)
{
	char path[PATH_CAP], hex[2 * STORE_HASH_LEN + 1];
	int rc;

	for (size_t i = 0; i < n; i++) {
		if (v[i].ino) {
			rc = ctl_path(c->r->ix, v[i].ino, path, sizeof(path));
			if (rc < 0)
				return rc;
		} else {
			snprintf(path, sizeof(path), "chunk %s",
				 ctl_hex(c->chunks[v[i].chunk].hash, hex));
		}
		v[i].path = strdup(path);
		if (!v[i].path)
			return -ENOMEM;
	}
	if (n > 1)
		qsort(v, n, sizeof(*v), v_damage_cmp);
	return 0;
}

/*
 * v_count_files - distinct files (inodes) among damage records sorted by v_paths: one inode has
 * one path and no two inodes share one, so the records of a file are adjacent.
 */
static uint64_t v_count_files(const struct v_damage *v, size_t n)
{
	uint64_t count = 0;

	for (size_t i = 0; i < n; i++)
		if (v[i].ino && (i == 0 || v[i - 1].ino != v[i].ino))
			count++;
	return count;
}

static void v_free(struct v_ctx *c)
{
	for (size_t i = 0; i < c->ndmg; i++)
		free(c->dmg[i].path);
	for (size_t i = 0; i < c->nnotes; i++)
		free(c->notes[i].path);
	free(c->dmg);
	free(c->notes);
	free(c->chunks);
	free(c->files);
}

/* v_report - print the result, text or JSON. Returns 0 or -EIO (JSON output failed). */
static int v_report(struct v_ctx *c, uint64_t bad_chunks, uint64_t bad_files)
{
	char hex[2 * STORE_HASH_LEN + 1], q[CTL_QUOTE_CAP(PATH_CAP)];
	size_t i;

	if (c->json) {
		json_t *o, *ac = json_array(), *af = json_array(), *an = json_array();

		for (i = 0; i < c->nchunks; i++) {
			const struct v_chunk *k = &c->chunks[i];
			json_t *x, *users;

			if (!k->err || k->unused)
				continue;
			x = json_object();
			users = json_array();
			json_object_set_new(x, "chunk", json_string(ctl_hex(k->hash, hex)));
			json_object_set_new(x, "error", json_string(ctl_chunk_err(k->err)));
			json_object_set_new(x, "refs", json_integer(k->refs));
			json_object_set_new(x, "marked_bad",
					    json_boolean(k->marked || c->writable));
			for (size_t j = 0; j < c->ndmg; j++)
				if (c->dmg[j].chunk == i && c->dmg[j].ino)
					json_array_append_new(users, policy_json_name(c->dmg[j].path));
			json_object_set_new(x, "files", users);
			json_array_append_new(ac, x);
		}
		for (i = 0; i < c->ndmg; i++) {
			json_t *x;

			if (!c->dmg[i].ino)
				continue;
			x = json_object();
			json_object_set_new(x, "path", policy_json_name(c->dmg[i].path));
			json_object_set_new(x, "ino", ctl_u64(c->dmg[i].ino));
			json_object_set_new(x, "reason", json_string(c->dmg[i].reason));
			json_array_append_new(af, x);
		}
		for (i = 0; i < c->nnotes; i++) {
			json_t *x = json_object();

			json_object_set_new(x, "path", policy_json_name(c->notes[i].path));
			json_object_set_new(x, "ino", c->notes[i].ino ? ctl_u64(c->notes[i].ino)
								      : json_null());
			json_object_set_new(x, "reason", json_string(c->notes[i].reason));
			json_array_append_new(an, x);
		}
		o = json_pack("{s:s, s:b, s:o, s:b, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o,"
			      " s:o, s:o, s:o, s:b}",
			      "store", c->root, "mounted", (int)c->r->mounted,
			      "owner_pid", c->r->mounted ? json_integer(c->r->owner_pid) : json_null(),
			      "marks_recorded", (int)c->writable, "chunks", ctl_u64(c->nchunks),
			      "chunk_bytes", ctl_u64(c->total_bytes),
			      "files_checked", ctl_u64(c->nfiles),
			      "files_hashed", ctl_u64(c->files_hashed),
			      "damaged_chunk_count", ctl_u64(bad_chunks),
			      "damaged_file_count", ctl_u64(bad_files),
			      "marked_bad", ctl_u64(c->marked_now),
			      "marks_cleared", ctl_u64(c->cleared_now), "damaged_chunks", ac,
			      "damaged_files", af, "notes", an, "intact", (int)(c->ndmg == 0));
		return ctl_print("ckptfs-verify/1", o);
	}

	if (c->r->mounted)
		printf("verify: store is mounted by pid %d; opened read-only, bad chunks are not "
		       "recorded in the index\n",
		       (int)c->r->owner_pid);
	else if (!c->writable)
		printf("verify: cannot lock store '%s' for writing; opened read-only, bad chunks "
		       "are not recorded in the index\n",
		       c->root);
	printf("verify: %zu chunks, %zu files checked: %" PRIu64 " damaged chunks, %" PRIu64
	       " damaged files\n",
	       c->nchunks, c->nfiles, bad_chunks, bad_files);
	for (i = 0; i < c->ndmg; i++)
		printf("damaged: %s (%s)\n", ctl_quote(c->dmg[i].path, q, sizeof(q)),
		       c->dmg[i].reason);
	for (i = 0; i < c->nnotes; i++)
		printf("note: %s (%s)\n", ctl_quote(c->notes[i].path, q, sizeof(q)),
		       c->notes[i].reason);
	if (c->marked_now || c->cleared_now)
		printf("verify: marked %" PRIu64 " chunks bad in the index, cleared %" PRIu64
		       " marks\n",
		       c->marked_now, c->cleared_now);
	return 0;
}

int ctl_verify(const char *root, const char *what, bool json)
{
	struct v_ctx c = { .root = root, .what = what, .json = json };
	struct store_opts so = { 0 };
	uint64_t bad_chunks = 0, bad_files;
	int rc, status = EXIT_ERROR;

	/* verify reads every chunk once: a small cache is enough for the whole-file pass */
	so.cache_bytes = 2 * (size_t)STORE_CHUNK_MAX;
	if (ctl_open_write_flags(root, &so, REPO_SALVAGE, &c.r, &c.writable) < 0)
		return EXIT_ERROR;
	ctl_progress_init(&c.prog);
	{
		char msg[512];

		if (c.r->index_err < 0) {
			/* damage that keeps SQLite from opening the file at all (its header pages) */
			snprintf(msg, sizeof(msg), "cannot be opened: %s", strerror(-c.r->index_err));
			rc = -EUCLEAN;
		} else {
			rc = idx_integrity(c.r->ix, false, msg, sizeof(msg));
		}
		if (rc == -EUCLEAN) {
			if (json) {
				json_t *o = json_object();

				json_object_set_new(o, "store", json_string(root));
				json_object_set_new(o, "index_damaged", json_true());
				json_object_set_new(o, "index_message", json_string(msg));
				json_object_set_new(o, "intact", json_false());
				ctl_print("ckptfs-verify/1", o);
			} else {
				printf("damaged: index file '%s/index.db' (%s)\n", root, msg);
			}
			ctl_err("the index of store '%s' is damaged; with the store unmounted, run "
				"'ckptctl %s fsck' to rebuild it from what is still readable", root,
				root);
			status = EXIT_DAMAGE;
			goto out;
		}
		if (rc < 0) {
			status = ctl_index_err(root, "check the database file", rc);
			goto out;
		}
	}

	/* The chunks and the files from one snapshot of the index: on a mounted store the daemon
	 * may add files meanwhile, another node's (fs/node/node.c show_step) with chunks not
	 * fetched here, which would look missing if their rows were not listed. */
	idx_hold(c.r->ix);
	rc = idx_chunk_foreach(c.r->ix, v_chunk_row, &c);
	ckpt_fault("verify-listed");
	if (rc == 0)
		rc = v_collect_files(&c);
	idx_unhold(c.r->ix);
	if (rc < 0) {
		ctl_progress_clear(&c.prog);
		status = ctl_index_err(root, "list chunks and files", rc);
		goto out;
	}
	if (c.nchunks)
		qsort(c.chunks, c.nchunks, sizeof(*c.chunks), v_chunk_cmp);
	rc = v_chunks(&c);
	if (rc == 0)
		rc = v_chunk_users(&c);
	if (rc == 0)
		rc = v_files(&c);
	ctl_progress_clear(&c.prog);
	if (rc < 0) {
		status = ctl_index_err(root, "read files and chunks", rc);
		goto out;
	}
	if (c.writable) {
		rc = v_marks(&c);
		if (rc < 0) {
			ctl_err("cannot record bad chunks in the index of store '%s': %s", root,
				strerror(-rc));
			goto out;
		}
	}
	rc = v_paths(&c, c.dmg, c.ndmg);
	if (rc == 0)
		rc = v_paths(&c, c.notes, c.nnotes);
	if (rc < 0) {
		status = ctl_index_err(root, "find paths", rc);
		goto out;
	}
	for (size_t i = 0; i < c.nchunks; i++)
		if (c.chunks[i].err && !c.chunks[i].unused)
			bad_chunks++;
	bad_files = v_count_files(c.dmg, c.ndmg);
	if (v_report(&c, bad_chunks, bad_files) < 0) {
		ctl_err("cannot write the report: %s", strerror(EIO));
		goto out;
	}
	status = c.ndmg ? EXIT_DAMAGE : EXIT_OK;
out:
	v_free(&c);
	ckpt_repo_close(c.r);
	return status;
}

int cmd_verify(const struct ctl_opts *o)
{
	return ctl_verify(o->root, "verify", o->json);
}
