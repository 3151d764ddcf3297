/*
 * ls.c — ckptctl ls [PATH]: a directory's entries, or a file's digest and extents, from the
 * index.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctl.h"

/*
 * resolve_path - the inode at path (relative to the mount root; leading '/' optional, "." and
 * ".." understood, symlinks not followed).
 * Returns 0, -ENOENT (a component does not exist), -ENOTDIR (a non-final component is not a
 * directory), -ENOMEM, or another -errno of the index.
 */
static int resolve_path(struct idx *ix, const char *path, uint64_t *ret_ino)
{
	struct idx_inode in;
	uint64_t ino = IDX_ROOT_INO;
	char *copy, *save = NULL, *tok;
	int rc = 0;

	copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		if (!strcmp(tok, "."))
			continue;
		rc = idx_inode_get(ix, ino, &in);
		if (rc < 0)
			goto out;
		if (!S_ISDIR(in.mode)) {
			rc = -ENOTDIR;
			goto out;
		}
		if (!strcmp(tok, ".."))
			rc = idx_dentry_parent(ix, ino, &ino, NULL, 0);
		else
			rc = idx_dentry_lookup(ix, ino, tok, &ino);
		if (rc < 0)
			goto out;
	}
	*ret_ino = ino;
out:
	free(copy);
	return rc;
}

/* One listed inode. */
struct ls_ent {
	char *name;        /* owned */
	char *target;      /* owned; symlinks only */
	struct idx_inode in;
	uint64_t stored;   /* regular files: idx_file_stored_bytes */
};

struct ls_list {
	struct ls_ent *v;
	size_t n, cap;
	uint64_t dir; /* the directory listed */
};

static void ls_list_free(struct ls_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].name);
		free(l->v[i].target);
	}
	free(l->v);
}

/* idx_dir_list callback: remember name and inode; attributes are read after the walk. */
static int ls_collect(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct ls_list *l = arg;

	if (l->dir == IDX_ROOT_INO && strcmp(name, ".ckptfs") == 0)
		return 0; /* hidden, as in the mount: `ckptctl STORE ls .ckptfs` shows it */
	if (ckpt_grow(&l->v, &l->cap, l->n, sizeof(*l->v)) < 0)
		return -ENOMEM;
	memset(&l->v[l->n], 0, sizeof(l->v[l->n]));
	l->v[l->n].name = strdup(name);
	if (!l->v[l->n].name)
		return -ENOMEM;
	l->v[l->n].in.ino = ino;
	l->v[l->n].in.mode = mode;
	l->n++;
	return 0;
}

static int ls_cmp(const void *a, const void *b)
{
	return strcmp(((const struct ls_ent *)a)->name, ((const struct ls_ent *)b)->name);
}

/*
 * ls_fill - read e->in.ino's attributes, stored bytes and symlink target into *e.
 * Returns 0, -ENOENT (removed meanwhile), -ENOMEM or another -errno of the index.
 */
static int ls_fill(struct idx *ix, struct ls_ent *e)
{
	int rc = idx_inode_get(ix, e->in.ino, &e->in);

	if (rc < 0)
		return rc;
	if (S_ISREG(e->in.mode)) {
		rc = idx_file_stored_bytes(ix, e->in.ino, &e->stored);
		if (rc < 0)
			return rc;
	} else if (S_ISLNK(e->in.mode)) {
		char small[1];
		int len = idx_symlink_get(ix, e->in.ino, small, sizeof(small));

		if (len < 0)
			return len == -ENOENT ? 0 : len;
		e->target = malloc((size_t)len + 1);
		if (!e->target)
			return -ENOMEM;
		rc = idx_symlink_get(ix, e->in.ino, e->target, (size_t)len + 1);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* ls_json_ent - the JSON object of one entry (new reference), NULL on ENOMEM. */
static json_t *ls_json_ent(const struct ls_ent *e)
{
	char mode[11], tbuf[40];
	json_t *o = json_object();

	if (!o)
		return NULL;
	json_object_set_new(o, "name", policy_json_name(e->name));
	json_object_set_new(o, "ino", ctl_u64(e->in.ino));
	json_object_set_new(o, "type", json_string(ctl_type(e->in.mode)));
	json_object_set_new(o, "mode", json_integer(e->in.mode & 07777));
	json_object_set_new(o, "mode_string", json_string(ctl_mode(e->in.mode, mode)));
	json_object_set_new(o, "nlink", json_integer(e->in.nlink));
	json_object_set_new(o, "uid", json_integer(e->in.uid));
	json_object_set_new(o, "gid", json_integer(e->in.gid));
	json_object_set_new(o, "size", ctl_u64(e->in.size));
	if (S_ISREG(e->in.mode))
		json_object_set_new(o, "stored_bytes", ctl_u64(e->stored));
	json_object_set_new(o, "mtime", json_string(policy_time_iso(e->in.mtime_ns, tbuf, sizeof(tbuf))));
	json_object_set_new(o, "mtime_ns", json_integer(e->in.mtime_ns));
	if (S_ISLNK(e->in.mode))
		json_object_set_new(o, "target", e->target ? policy_json_name(e->target) : json_null());
	return o;
}

/* Column widths of a listing. */
struct ls_widths {
	int nlink, uid, gid, size, stored;
};

static void ls_widths_add(struct ls_widths *w, const struct ls_ent *e)
{
	int n;

	if ((n = ctl_numw(e->in.nlink)) > w->nlink)
		w->nlink = n;
	if ((n = ctl_numw(e->in.uid)) > w->uid)
		w->uid = n;
	if ((n = ctl_numw(e->in.gid)) > w->gid)
		w->gid = n;
	if ((n = ctl_numw(e->in.size)) > w->size)
		w->size = n;
	if (S_ISREG(e->in.mode) && (n = ctl_numw(e->stored)) > w->stored)
		w->stored = n;
}

static void ls_print_line(const struct ls_ent *e, const struct ls_widths *w)
{
	char mode[11], tbuf[40], stored[24], q[CTL_QUOTE_CAP(PATH_CAP)];

	if (S_ISREG(e->in.mode))
		snprintf(stored, sizeof(stored), "%" PRIu64, e->stored);
	else
		snprintf(stored, sizeof(stored), "-");
	printf("%s %*" PRIu32 " %*" PRIu32 " %*" PRIu32 " %*" PRIu64 " %*s %s %s",
	       ctl_mode(e->in.mode, mode), w->nlink, e->in.nlink, w->uid, e->in.uid, w->gid,
	       e->in.gid, w->size, e->in.size, w->stored, stored,
	       policy_time_iso(e->in.mtime_ns, tbuf, sizeof(tbuf)), ctl_quote(e->name, q, sizeof(q)));
	if (S_ISLNK(e->in.mode))
		printf(" -> %s", e->target ? ctl_quote(e->target, q, sizeof(q)) : "?");
	putchar('\n');
}

static void ls_print_header(struct ls_widths *w)
{
	/* The header's words are at least as wide as their columns. */
	if (w->nlink < 5)
		w->nlink = 5;
	if (w->uid < 3)
		w->uid = 3;
	if (w->gid < 3)
		w->gid = 3;
	if (w->size < 4)
		w->size = 4;
	if (w->stored < 6)
		w->stored = 6;
	printf("%-10s %*s %*s %*s %*s %*s %-20s %s\n", "MODE", w->nlink, "NLINK", w->uid, "UID",
	       w->gid, "GID", w->size, "SIZE", w->stored, "STORED", "MTIME", "NAME");
}

/* ls_dir - list directory ino. Returns an exit status. */
static int ls_dir(struct ckpt_repo *r, const char *root, uint64_t ino, bool json)
{
	struct ls_list l = { .dir = ino };
	struct ls_widths w = { 0 };
	size_t i;
	int rc, status = EXIT_ERROR;

	rc = idx_dir_list(r->ix, ino, 0, ls_collect, &l);
	if (rc < 0) {
		status = ctl_index_err(root, "list a directory", rc);
		goto out;
	}
	for (i = 0; i < l.n; i++) {
		rc = ls_fill(r->ix, &l.v[i]);
		if (rc < 0) {
			l.n = i + 1;
			status = ctl_index_err(root, "read an inode", rc);
			goto out;
		}
	}
	if (l.n)
		qsort(l.v, l.n, sizeof(*l.v), ls_cmp);

	if (json) {
		json_t *a = json_array();

		for (i = 0; i < l.n; i++)
			json_array_append_new(a, ls_json_ent(&l.v[i]));
		if (ctl_print("ckptfs-ls/1", json_pack("{s:o}", "entries", a)) < 0)
			goto out;
		status = EXIT_OK;
		goto out;
	}
	for (i = 0; i < l.n; i++)
		ls_widths_add(&w, &l.v[i]);
	ls_print_header(&w);
	for (i = 0; i < l.n; i++)
		ls_print_line(&l.v[i], &w);
	status = EXIT_OK;
out:
	ls_list_free(&l);
	return status;
}

/* ls_other - show a file's line, digest and extents (or a symlink's line). Exit status. */
static int ls_other(struct ckpt_repo *r, const char *root, uint64_t ino, bool json)
{
	struct ls_ent e = { 0 };
	struct ls_widths w = { 0 };
	struct idx_extent *ext = NULL;
	size_t n = 0, i;
	char path[PATH_CAP], hex[2 * STORE_HASH_LEN + 1];
	int rc, status = EXIT_ERROR;

	e.in.ino = ino;
	rc = ctl_path(r->ix, ino, path, sizeof(path));
	if (rc < 0) {
		status = ctl_index_err(root, "find a path", rc);
		goto out;
	}
	e.name = strdup(path);
	if (!e.name) {
		ctl_err("out of memory");
		goto out;
	}
	rc = ls_fill(r->ix, &e);
	if (rc == 0 && S_ISREG(e.in.mode))
		rc = idx_file_extents(r->ix, ino, &ext, &n);
	if (rc < 0) {
		status = ctl_index_err(root, "read an inode", rc);
		goto out;
	}

	if (json) {
		json_t *o = ls_json_ent(&e);

		const char *slash = strrchr(path, '/');

		/* the entry's own name, as in a directory listing; the full path beside it */
		json_object_set_new(o, "name", policy_json_name(slash && slash[1] ? slash + 1 : path));
		json_object_set_new(o, "path", policy_json_name(path));
		if (S_ISREG(e.in.mode)) {
			json_t *a = json_array();

			json_object_set_new(o, "xxh3_128",
					    e.in.has_hash ? json_string(ctl_hex(e.in.hash, hex))
							  : json_null());
			for (i = 0; i < n; i++) {
				json_t *x = json_object();

				json_object_set_new(x, "offset", ctl_u64(ext[i].offset));
				json_object_set_new(x, "logical_bytes", json_integer(ext[i].length));
				json_object_set_new(x, "stored_bytes",
						    json_integer(ext[i].stored_size));
				json_object_set_new(x, "codec",
						    json_string(ctl_codec(ext[i].codec)));
				json_object_set_new(x, "chunk",
						    json_string(ctl_hex(ext[i].hash, hex)));
				json_array_append_new(a, x);
			}
			json_object_set_new(o, "extents", a);
		}
		if (ctl_print("ckptfs-file/1", o) < 0)
			goto out;
		status = EXIT_OK;
		goto out;
	}

	ls_widths_add(&w, &e);
	ls_print_header(&w);
	ls_print_line(&e, &w);
	if (S_ISREG(e.in.mode)) {
		int wo = 6, wl = 6, ws = 6;

		printf("\nxxh3-128: %s\n", e.in.has_hash ? ctl_hex(e.in.hash, hex)
							 : "(not recorded yet)");
		printf("extents:  %zu\n", n);
		for (i = 0; i < n; i++) {
			int k;

			if ((k = ctl_numw(ext[i].offset)) > wo)
				wo = k;
			if ((k = ctl_numw(ext[i].length)) > wl)
				wl = k;
			if ((k = ctl_numw(ext[i].stored_size)) > ws)
				ws = k;
		}
		if (n)
			printf("  %*s %*s %*s %-8s %s\n", wo, "OFFSET", wl, "LENGTH", ws, "STORED",
			       "CODEC", "CHUNK");
		for (i = 0; i < n; i++)
			printf("  %*" PRIu64 " %*" PRIu32 " %*" PRIu32 " %-8s %s\n", wo,
			       ext[i].offset, wl, ext[i].length, ws, ext[i].stored_size,
			       ctl_codec(ext[i].codec), ctl_hex(ext[i].hash, hex));
	}
	status = EXIT_OK;
out:
	free(ext);
	free(e.name);
	free(e.target);
	return status;
}

static int ls_run(const char *root, const char *path, bool json)
{
	struct ckpt_repo *r = NULL;
	struct idx_inode in;
	uint64_t ino;
	int rc, status = EXIT_ERROR;

	if (ctl_open_read(root, &r) < 0)
		return EXIT_ERROR;
	/* One snapshot from the lookup to the last line: on a mounted store the daemon may unlink
	 * the path, or a file of the directory, between two reads (CI of stop 54). */
	idx_hold(r->ix);
	rc = resolve_path(r->ix, path, &ino);
	ckpt_fault("ls-resolved");
	if (rc == -ENOENT || rc == -ENOTDIR) {
		ctl_err("'%s' does not exist in store '%s'%s", path, root,
			rc == -ENOTDIR ? " (a component of it is not a directory)" : "");
		goto out;
	}
	if (rc < 0) {
		status = ctl_index_err(root, "look up a path", rc);
		goto out;
	}
	rc = idx_inode_get(r->ix, ino, &in);
	if (rc < 0) {
		if (rc == -ENOENT)
			ctl_err("'%s' does not exist in store '%s'", path, root);
		else
			status = ctl_index_err(root, "read an inode", rc);
		goto out;
	}
	if (S_ISDIR(in.mode))
		status = ls_dir(r, root, ino, json);
	else
		status = ls_other(r, root, ino, json);
out:
	idx_unhold(r->ix);
	ckpt_repo_close(r);
	return status;
}

int cmd_ls(const struct ctl_opts *o)
{
	return ls_run(o->root, o->argc ? o->argv[0] : "/", o->json);
}
