/*
 * view.c — MOUNTPOINT/.ckptfs/snapshots/: every kept step, browsable read-only, served from the
 * index (what `.zfs/snapshot` gives ZFS users; issue 44).
 *
 * Invariants:
 *   1. The view lists the steps that hold data a resume or a user may want: every step in
 *      state complete with a directory, wherever that directory is (at its name, in
 *      /.ckptfs/retained as a kept version or after the trainer deleted it; pinned steps and
 *      steps of another lineage are complete too). Steps being written, set aside or pruned
 *      are not listed; MindFormers 1.0 steps, which have no directory, neither.
 *   2. Names: of the listed steps sharing a name, the newest (highest step id) is listed under
 *      the name, each older one as NAME@ID (ID: the step's id, as in quarantine's NAME.ID and
 *      `ckptctl steps --json`). A name is only a name: it may move to NAME@ID when a newer
 *      version completes. Every name is looked up again at each path walk (entry timeout 0).
 *   3. An inode of the view is an index inode with VINO_VIEW set (fuse_int.h): the kernel sees
 *      other inode numbers than the same files at their names, so a directory never has two
 *      parents in its cache, and the view takes no kernel lookup reference on the index inode
 *      (ino_lookup_inc): retention frees a step someone browses as if nobody did.
 *   4. Every request on a view inode checks again that the inode lies in a listed step
 *      (view_resolve: its ancestors up to a step directory, that step complete), so a step
 *      pruned, set aside or reopened for a rewrite leaves the view at once, whatever the kernel
 *      cached: ENOENT. The one exception is the attributes of a regular file someone still has
 *      open: an open file holds its index inode (oinode.c, ino_referenced) as any open file
 *      does, so its reads go on with the bytes it had, checked against their digests, and its
 *      attributes stay readable until the last close.
 *   5. Nothing here writes: not the index, not a step's state, not the kernel's caches. Every
 *      change asked through the view is EROFS (ops*.c test fs_view_ino first).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/fuse/ops_int.h"

/* One listed step: its id, name and directory (the rest of struct idx_step is not needed). */
struct view_step {
	int64_t id;
	uint64_t dir_ino;
	char name[IDX_STEP_NAME_MAX + 1];
};

struct view_list {
	struct view_step *v;
	size_t n, cap;
};

static int view_collect_cb(const struct idx_step *s, void *arg)
{
	struct view_list *l = arg;
	int rc;

	if (s->state != IDX_STEP_COMPLETE || !s->dir_ino)
		return 0;
	if ((rc = ckpt_grow(&l->v, &l->cap, l->n, sizeof(*l->v))) < 0)
		return rc;
	l->v[l->n].id = s->id;
	l->v[l->n].dir_ino = s->dir_ino;
	memcpy(l->v[l->n].name, s->name, sizeof(l->v[l->n].name));
	l->n++;
	return 0;
}

/* By name, then by id: the newest of a name is the last of its run (invariant 2). */
static int view_cmp(const void *a, const void *b)
{
	const struct view_step *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c)
		return c;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* The listed steps, sorted by view_cmp, into *l (zeroed by the caller, l->v freed by it on
 * every path). Reads only the complete steps (the state index): a lookup or stat in the view
 * costs what retention keeps, not the pruned rows a long job leaves in the table. fs->mu held.
 * 0, -ENOMEM or the index's -errno. */
static int view_steps(struct ckfs *fs, struct view_list *l)
{
	int rc = idx_step_newest_each(fs->ix, 0, IDX_STEP_COMPLETE, view_collect_cb, l);

	if (rc == 0 && l->n > 1)
		qsort(l->v, l->n, sizeof(*l->v), view_cmp);
	return rc;
}

/* The view name of l->v[i] into buf (NAME_MAX + 1 bytes): -ENAMETOOLONG when NAME@ID does not
 * fit a name, -EINVAL for an InternEvo slot, whose name ("snapshot/0") holds a '/' no directory
 * entry may (the kernel fails a whole READDIR that returns one with EIO): the step is then left
 * out of the view. */
static int view_name(const struct view_list *l, size_t i, char *buf)
{
	if (strchr(l->v[i].name, '/'))
		return -EINVAL;
	bool newest = i + 1 == l->n || strcmp(l->v[i + 1].name, l->v[i].name) != 0;
	int n = newest ? snprintf(buf, NAME_MAX + 1, "%s", l->v[i].name)
		       : snprintf(buf, NAME_MAX + 1, "%s@%lld", l->v[i].name,
				  (long long)l->v[i].id);

	return n < 0 || n > NAME_MAX ? -ENAMETOOLONG : 0;
}

/*
 * The index inode behind view inode ino (invariant 4), in a listed step: 0 and *ret_real, or
 * -ENOENT. fs->mu held.
 */
static int view_resolve(struct ckfs *fs, uint64_t ino, uint64_t *ret_real)
{
	uint64_t real = ino & ~VINO_VIEW, cur = real;

	if (!(ino & VINO_VIEW))
		return -ENOENT;
	for (int depth = 0; depth < STEPS_TREE_DEPTH_MAX; depth++) {
		struct idx_step s;
		uint64_t up;

		if (cur == IDX_ROOT_INO || cur == steps_meta_ino(fs))
			return -ENOENT;
		if (idx_step_by_dir(fs->ix, cur, &s) == 0) {
			if (s.state != IDX_STEP_COMPLETE)
				return -ENOENT;
			*ret_real = real;
			return 0;
		}
		if (idx_dentry_parent(fs->ix, cur, &up, NULL, 0) < 0)
			return -ENOENT;
		cur = up;
	}
	return -ENOENT;
}

int fs_view_real(struct ckfs *fs, uint64_t ino, uint64_t *ret_real)
{
	return view_resolve(fs, ino, ret_real);
}

int fs_view_lookup(struct ckfs *fs, uint64_t parent, const char *name, uint64_t *ret_ino)
{
	struct view_list l = { 0 };
	uint64_t real, child;
	int rc;

	if (parent == steps_meta_ino(fs)) {
		if (strcmp(name, FS_VIEW_DIR) != 0)
			return -ENOENT;
		*ret_ino = VINO_SNAPS;
		return 0;
	}
	if (parent != VINO_SNAPS) {
		if ((rc = view_resolve(fs, parent, &real)) < 0)
			return rc;
		if ((rc = idx_dentry_lookup(fs->ix, real, name, &child)) < 0)
			return rc;
		*ret_ino = child | VINO_VIEW;
		return 0;
	}
	rc = view_steps(fs, &l);
	for (size_t i = 0; rc == 0 && i < l.n; i++) {
		char vn[NAME_MAX + 1];

		if (view_name(&l, i, vn) == 0 && strcmp(vn, name) == 0) {
			*ret_ino = l.v[i].dir_ino | VINO_VIEW;
			free(l.v);
			return 0;
		}
	}
	free(l.v);
	return rc < 0 ? rc : -ENOENT;
}

int fs_view_stat(struct ckfs *fs, uint64_t ino, struct stat *st)
{
	struct idx_inode a;
	uint64_t real;
	int rc;

	if (ino == VINO_SNAPS) {
		struct view_list l = { 0 };
		nlink_t subdirs = 0;
		char vn[NAME_MAX + 1];

		if ((rc = idx_inode_get(fs->ix, steps_meta_ino(fs), &a)) < 0)
			return rc;
		/* POSIX: '.', the entry in /.ckptfs, and each listed step's '..' */
		if ((rc = view_steps(fs, &l)) < 0) {
			free(l.v);
			return rc;
		}
		for (size_t i = 0; i < l.n; i++)
			subdirs += view_name(&l, i, vn) == 0;
		free(l.v);
		memset(st, 0, sizeof(*st));
		st->st_ino = VINO_SNAPS;
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2 + subdirs;
		st->st_uid = a.uid;
		st->st_gid = a.gid;
		st->st_blksize = 4096;
		st->st_mtim.tv_sec = a.mtime_ns / 1000000000;
		st->st_mtim.tv_nsec = a.mtime_ns % 1000000000;
		st->st_atim = st->st_ctim = st->st_mtim;
		return 0;
	}
	rc = view_resolve(fs, ino, &real);
	if (rc < 0) {
		/* an open file keeps its inode, and its attributes, until its last close
		 * (invariant 4) */
		real = ino & ~VINO_VIEW;
		if (!(ino & VINO_VIEW) || !oi_find(fs, real))
			return rc;
	}
	if ((rc = fs_stat_locked(fs, real, st)) < 0)
		return rc;
	st->st_ino = ino;
	return 0;
}

struct view_dir_ctx {
	fs_view_add_fn add;
	void *arg;
};

/* An entry of a directory of a listed step, under its view inode. */
static int view_dir_cb(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct view_dir_ctx *c = arg;

	(void)cookie;
	return c->add(c->arg, name, ino | VINO_VIEW, mode);
}

int fs_view_list(struct ckfs *fs, uint64_t ino, fs_view_add_fn add, void *arg)
{
	struct view_list l = { 0 };
	struct idx_step s;
	uint64_t real, up;
	int rc;

	if (ino == VINO_SNAPS) {
		if ((rc = add(arg, ".", VINO_SNAPS, S_IFDIR)) < 0 ||
		    (rc = add(arg, "..", steps_meta_ino(fs), S_IFDIR)) < 0)
			return rc;
		rc = view_steps(fs, &l);
		for (size_t i = 0; rc == 0 && i < l.n; i++) {
			char vn[NAME_MAX + 1];

			if (view_name(&l, i, vn) == 0)
				rc = add(arg, vn, l.v[i].dir_ino | VINO_VIEW, S_IFDIR);
		}
		free(l.v);
		return rc;
	}
	if ((rc = view_resolve(fs, ino, &real)) < 0)
		return rc;
	if ((rc = idx_dentry_parent(fs->ix, real, &up, NULL, 0)) < 0)
		return rc;
	/* a step's directory sits in the root or in /.ckptfs/retained: its parent here is the
	 * view's own directory */
	if (idx_step_by_dir(fs->ix, real, &s) == 0)
		up = VINO_SNAPS;
	else
		up |= VINO_VIEW;
	if ((rc = add(arg, ".", ino, S_IFDIR)) < 0 || (rc = add(arg, "..", up, S_IFDIR)) < 0)
		return rc;
	struct view_dir_ctx c = { .add = add, .arg = arg };

	return idx_dir_list(fs->ix, real, 0, view_dir_cb, &c);
}
