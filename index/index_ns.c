/*
 * index_ns.c — the namespace half of the index: inodes, symlink targets, directory entries,
 * directory listing and path reconstruction. Invariants: see index.c (2 and 5 concern this file:
 * it stores what fs/ asks and leaves nlink accounting to fs/).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "index/index_int.h"

void ix_copy_out(char *buf, size_t cap, const void *src, size_t len)
{
	size_t n;

	if (!buf || cap == 0)
		return;
	n = len < cap - 1 ? len : cap - 1;
	if (n)
		memcpy(buf, src, n);
	buf[n] = '\0';
}

int idx_inode_get(struct idx *ix, uint64_t ino, struct idx_inode *ret)
{
	struct idx_inode a = { .ino = ino };
	sqlite3_stmt *st;
	int r;

	if ((r = ix_row(ix, IX_INODE_GET, &st, "i", (int64_t)ino)) < 0)
		return r;
	a.mode = (uint32_t)sqlite3_column_int64(st, 0);
	a.uid = (uint32_t)sqlite3_column_int64(st, 1);
	a.gid = (uint32_t)sqlite3_column_int64(st, 2);
	a.nlink = (uint32_t)sqlite3_column_int64(st, 3);
	a.size = (uint64_t)sqlite3_column_int64(st, 4);
	a.atime_ns = sqlite3_column_int64(st, 5);
	a.mtime_ns = sqlite3_column_int64(st, 6);
	a.ctime_ns = sqlite3_column_int64(st, 7);
	a.rdev = (uint64_t)sqlite3_column_int64(st, 8);
	if (sqlite3_column_type(st, 9) != SQLITE_NULL) {
		if ((r = ix_column_hash(st, 9, a.hash)) < 0)
			goto out;
		a.has_hash = true;
	}
	a.flags = (uint32_t)sqlite3_column_int64(st, 10);
	*ret = a;
	r = 0;
out:
	ix_done(st);
	return r;
}

/* ix_flags_ok - attr flags are known bits, and not both MALFORMED and VALID. */
static bool ix_flags_ok(uint32_t flags)
{
	const uint32_t both = IDX_INODE_MALFORMED | IDX_INODE_VALID;

	return (flags & ~(uint32_t)IDX_INODE_FLAGS_ALL) == 0 && (flags & both) != both;
}

/* ix_bind_attr - bind mode..hash, flags of attr to columns first..first+10 of st. */
static int ix_bind_attr(struct idx *ix, sqlite3_stmt *st, int first, const struct idx_inode *attr)
{
	const int64_t v[] = {
		attr->mode,	    attr->uid,	    attr->gid,	    attr->nlink,
		(int64_t)attr->size, attr->atime_ns, attr->mtime_ns, attr->ctime_ns,
		(int64_t)attr->rdev,
	};
	int r;

	if (attr->size > INT64_MAX)
		return -EFBIG;
	if (!ix_flags_ok(attr->flags))
		return -EINVAL;
	for (size_t i = 0; i < IX_ARRAY_SIZE(v); i++)
		if ((r = ix_bind_i64(ix, st, first + (int)i, v[i])) < 0)
			return r;
	if (attr->has_hash &&
	    (r = ix_bind_hash(ix, st, first + (int)IX_ARRAY_SIZE(v), attr->hash)) < 0)
		return r; /* without a hash: left unbound, NULL */
	/* IDX_INODE_SPARSE is idx_file_set_content's: a new inode has no extents, an update
	 * keeps the stored bit (IX_INODE_UPDATE) */
	return ix_bind_i64(ix, st, first + (int)IX_ARRAY_SIZE(v) + 1,
			   attr->flags & ~(uint32_t)IDX_INODE_SPARSE);
}

/*
 * Raise the inodes' AUTOINCREMENT counter to ix->ino_floor: a deferred transaction that could not
 * be committed (idx_flush) took its counter back with it, and the kernel may still hold the
 * inode numbers it handed out. Runs inside the caller's transaction; rare, so prepared here.
 */
static int ix_ino_floor(struct idx *ix)
{
	sqlite3_stmt *st = NULL;
	int r = sqlite3_prepare_v2(ix->db, "UPDATE sqlite_sequence SET seq = ?1 "
				   "WHERE name = 'inodes' AND seq < ?1", -1, &st, NULL);

	if (r != SQLITE_OK)
		return ix_err(ix, r);
	r = ix_bind_i64(ix, st, 1, (int64_t)ix->ino_floor);
	if (r == 0)
		r = ix_step(ix, st);
	sqlite3_finalize(st);
	return r < 0 ? r : 0;
}

int idx_inode_create(struct idx *ix, const struct idx_inode *attr, uint64_t *ret_ino)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_INODE_CREATE);
	int r;

	if (ix->rdonly)
		return -EROFS;
	if (ix->ino_floor && (r = ix_ino_floor(ix)) < 0)
		return r;
	if ((r = ix_bind_attr(ix, st, 1, attr)) < 0) {
		ix_done(st);
		return r;
	}
	if ((r = ix_run(ix, st)) < 0)
		return r;
	*ret_ino = (uint64_t)sqlite3_last_insert_rowid(ix->db);
	if (ix->defer == IX_DEFER_IN && *ret_ino > ix->defer_max_ino)
		ix->defer_max_ino = *ret_ino;
	return 0;
}

int idx_inode_update(struct idx *ix, const struct idx_inode *attr)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_INODE_UPDATE);
	int r;

	if (ix->rdonly)
		return -EROFS;
	if ((r = ix_bind_i64(ix, st, 1, (int64_t)attr->ino)) < 0 ||
	    (r = ix_bind_attr(ix, st, 2, attr)) < 0) {
		ix_done(st);
		return r;
	}
	if ((r = ix_run(ix, st)) < 0)
		return r;
	return sqlite3_changes(ix->db) ? 0 : -ENOENT;
}

int ix_inode_delete(struct idx *ix, uint64_t ino, idx_release_fn release, void *arg)
{
	uint8_t(*zeros)[IDX_HASH_LEN] = NULL;
	size_t nzeros = 0;
	sqlite3_stmt *st;
	int r;

	if (ino == IDX_ROOT_INO)
		return -EBUSY; /* invariant 1 */
	if ((r = ix_drop_extents(ix, ino, &zeros, &nzeros)) < 0)
		goto out;
	st = ix_stmt(ix, IX_INODE_DELETE);
	if ((r = ix_bind_i64(ix, st, 1, (int64_t)ino)) < 0) {
		ix_done(st);
		goto out;
	}
	if ((r = ix_run(ix, st)) < 0)
		goto out;
	if (sqlite3_changes(ix->db) == 0) {
		r = -ENOENT;
		goto out;
	}
	/* invariant 6: the step that had this directory has none now */
	st = ix_stmt(ix, IX_INODE_STEP_UNDIR);
	if ((r = ix_bind_i64(ix, st, 1, (int64_t)ino)) < 0) {
		ix_done(st);
		goto out;
	}
	if ((r = ix_run(ix, st)) < 0)
		goto out;
	r = ix_release(ix, zeros, nzeros, release, arg);
out:
	free(zeros);
	return r;
}

int idx_inode_delete(struct idx *ix, uint64_t ino, idx_release_fn release, void *arg)
{
	int r;

	if (ix->rdonly)
		return -EROFS;
	if ((r = ix_sp_begin(ix)) < 0)
		return r;
	return ix_sp_end(ix, ix_inode_delete(ix, ino, release, arg));
}

int idx_symlink_set(struct idx *ix, uint64_t ino, const char *target)
{
	return ix_update(ix, IX_SYMLINK_SET, -ENOENT, "in", (int64_t)ino, target);
}

int idx_symlink_get(struct idx *ix, uint64_t ino, char *buf, size_t cap)
{
	sqlite3_stmt *st;
	int r, len;

	if ((r = ix_row(ix, IX_SYMLINK_GET, &st, "i", (int64_t)ino)) < 0)
		return r;
	len = sqlite3_column_bytes(st, 0);
	ix_copy_out(buf, cap, sqlite3_column_blob(st, 0), (size_t)len);
	ix_done(st);
	return len;
}

int idx_dentry_lookup(struct idx *ix, uint64_t parent, const char *name, uint64_t *ret_ino)
{
	int64_t ino;
	int r = ix_scalar(ix, IX_DENTRY_LOOKUP, &ino, "in", (int64_t)parent, name);

	if (r == 0)
		*ret_ino = (uint64_t)ino;
	return r;
}

int idx_dentry_add(struct idx *ix, uint64_t parent, const char *name, uint64_t ino)
{
	return ix_update(ix, IX_DENTRY_ADD, 0, "ini", (int64_t)parent, name, (int64_t)ino);
}

/* ---- the cache of dentry parents (struct ix_pent, index_int.h) ---- */

void ix_pcache_clear(struct idx *ix)
{
	for (size_t i = 0; i < IX_PCACHE; i++)
		ix->pc[i].ino = 0;
}

/* ino's slot when it holds ino, else NULL. */
static const struct ix_pent *pc_get(const struct idx *ix, uint64_t ino)
{
	const struct ix_pent *e = &ix->pc[ino % IX_PCACHE];

	return ino && e->ino == ino ? e : NULL; /* 0 marks an empty slot, never a match */
}

/* Keep ino's first dentry in its slot (nothing on a read-only handle or for a long name). */
static void pc_put(struct idx *ix, uint64_t ino, uint64_t parent, const void *name, size_t len)
{
	struct ix_pent *e = &ix->pc[ino % IX_PCACHE];

	if (ix->rdonly || ino == 0 || len > sizeof(e->name))
		return;
	e->ino = ino;
	e->parent = parent;
	e->len = len;
	if (len)
		memcpy(e->name, name, len);
}

int idx_dentry_remove(struct idx *ix, uint64_t parent, const char *name)
{
	ix_pcache_clear(ix);
	return ix_update(ix, IX_DENTRY_REMOVE, -ENOENT, "in", (int64_t)parent, name);
}

int idx_dentry_move(struct idx *ix, uint64_t oldparent, const char *oldname, uint64_t newparent,
		    const char *newname)
{
	ix_pcache_clear(ix);
	/* an existing target fails UNIQUE(parent, name): -EEXIST */
	return ix_update(ix, IX_DENTRY_MOVE, -ENOENT, "inin", (int64_t)oldparent, oldname,
			 (int64_t)newparent, newname);
}

int idx_dentry_parent(struct idx *ix, uint64_t ino, uint64_t *ret_parent, char *name_buf,
		      size_t cap)
{
	const struct ix_pent *e;
	sqlite3_stmt *st;
	int r;

	if (ino == IDX_ROOT_INO) {
		ix_copy_out(name_buf, cap, "", 0);
		*ret_parent = IDX_ROOT_INO;
		return 0;
	}
	if ((e = pc_get(ix, ino))) {
		ix_copy_out(name_buf, cap, e->name, e->len);
		*ret_parent = e->parent;
		return 0;
	}
	if ((r = ix_row(ix, IX_DENTRY_PARENT, &st, "i", (int64_t)ino)) < 0)
		return r;
	ix_copy_out(name_buf, cap, sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1));
	*ret_parent = (uint64_t)sqlite3_column_int64(st, 0);
	pc_put(ix, ino, *ret_parent, sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1));
	ix_done(st);
	return 0;
}

int idx_dir_is_empty(struct idx *ix, uint64_t ino)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_DIR_EMPTY);
	int r;

	if ((r = ix_bind_i64(ix, st, 1, (int64_t)ino)) < 0)
		goto out;
	r = ix_step(ix, st);
	if (r >= 0)
		r = !r;
out:
	ix_done(st);
	return r;
}

int idx_dir_list(struct idx *ix, uint64_t dir, int64_t after,
		 int (*fn)(const char *name, uint64_t ino, uint32_t mode, int64_t cookie,
			   void *arg),
		 void *arg)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_DIR_LIST);
	char *name = NULL;
	size_t name_cap = 0;
	int r;

	if ((r = ix_bind_i64(ix, st, 1, (int64_t)dir)) < 0 ||
	    (r = ix_bind_i64(ix, st, 2, after)) < 0)
		goto out;
	while ((r = ix_step(ix, st)) > 0) {
		const void *p = sqlite3_column_blob(st, 0);
		size_t len = (size_t)sqlite3_column_bytes(st, 0);

		/* names are blobs, not NUL-terminated: hand fn a terminated copy */
		if (len + 1 > name_cap) {
			char *n = realloc(name, len + 1);

			if (!n) {
				r = -ENOMEM;
				goto out;
			}
			name = n;
			name_cap = len + 1;
		}
		if (len)
			memcpy(name, p, len);
		name[len] = '\0';
		r = fn(name, (uint64_t)sqlite3_column_int64(st, 1),
		       (uint32_t)sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3), arg);
		if (r != 0)
			goto out;
	}
out:
	ix_done(st);
	free(name);
	return r;
}

/*
 * ix_prepend - put "/" name (len bytes) in front of the path held in *buf (*used bytes, at the
 * end of a *cap-byte allocation). Returns 0 or -ENOMEM.
 */
static int ix_prepend(char **buf, size_t *cap, size_t *used, const void *name, size_t len)
{
	size_t need = *used + len + 1;

	if (need + 1 > *cap) {
		size_t ncap = *cap ? *cap : 256;
		char *n;

		while (ncap < need + 1)
			ncap *= 2;
		n = malloc(ncap);
		if (!n)
			return -ENOMEM;
		if (*used)
			memcpy(n + ncap - *used, *buf + *cap - *used, *used);
		free(*buf);
		*buf = n;
		*cap = ncap;
	}
	if (len)
		memcpy(*buf + *cap - *used - len, name, len);
	(*buf)[*cap - *used - len - 1] = '/';
	*used = need;
	return 0;
}

int idx_path(struct idx *ix, uint64_t ino, char *buf, size_t cap)
{
	sqlite3_stmt *st;
	char *path = NULL;
	size_t pcap = 0, used = 0;
	uint64_t cur = ino;
	int depth = 0, r = 0;

	while (cur != IDX_ROOT_INO) {
		if (++depth > IX_MAX_DEPTH) {
			r = -ELOOP;
			goto out;
		}
		const struct ix_pent *e = pc_get(ix, cur);

		if (e) {
			r = ix_prepend(&path, &pcap, &used, e->name, e->len);
			cur = e->parent;
		} else {
			const void *name;
			size_t len;
			uint64_t up;

			if ((r = ix_row(ix, IX_DENTRY_PARENT, &st, "i", (int64_t)cur)) < 0)
				goto out;
			name = sqlite3_column_blob(st, 1);
			len = (size_t)sqlite3_column_bytes(st, 1);
			up = (uint64_t)sqlite3_column_int64(st, 0);
			r = ix_prepend(&path, &pcap, &used, name, len);
			pc_put(ix, cur, up, name, len);
			cur = up;
			ix_done(st);
		}
		if (r < 0)
			goto out;
	}
	if (used == 0) {
		ix_copy_out(buf, cap, "/", 1);
		r = 1;
	} else if (used > INT32_MAX) {
		r = -ENAMETOOLONG;
	} else {
		ix_copy_out(buf, cap, path + pcap - used, used);
		r = (int)used;
	}
out:
	free(path);
	return r;
}
