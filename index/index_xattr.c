/*
 * index_xattr.c — extended attributes of inodes (schema v3, table xattrs; index.h has the
 * contract and the limits).
 *
 * Invariants:
 *   1. (ino, name) is unique; ino names an existing inode (foreign key, ON DELETE CASCADE).
 *   2. name is 1..IDX_XATTR_NAME_MAX bytes without NUL, value at most IDX_XATTR_VALUE_MAX bytes;
 *      both are checked here before any write, so a row never breaks them.
 */
#include <errno.h>
#include <string.h>

#include "index/index_int.h"

/* ix_xattr_name_ok - invariant 2 for name: 0, or -ERANGE as setxattr(2) answers. */
static int ix_xattr_name_ok(const char *name)
{
	size_t n = strlen(name);

	return n == 0 || n > IDX_XATTR_NAME_MAX ? -ERANGE : 0;
}

/* bind ino, name (and value when given) as ?1, ?2, ?3 of st */
static int ix_xattr_bind(struct idx *ix, sqlite3_stmt *st, uint64_t ino, const char *name,
			 const void *value, size_t len, bool with_value)
{
	int r;

	if ((r = ix_bind_i64(ix, st, 1, (int64_t)ino)) < 0 ||
	    (r = ix_bind_name(ix, st, 2, name)) < 0)
		return r;
	if (!with_value)
		return 0;
	/* a zero-length value is an empty blob, not NULL (NOT NULL column) */
	r = sqlite3_bind_blob(st, 3, len ? value : "", (int)len, SQLITE_STATIC);
	return r == SQLITE_OK ? 0 : ix_err(ix, r);
}

int idx_xattr_set(struct idx *ix, uint64_t ino, const char *name, const void *value, size_t len,
		  int flags)
{
	sqlite3_stmt *st;
	int r, changed;

	if (ix->rdonly)
		return -EROFS;
	if ((r = ix_xattr_name_ok(name)) < 0)
		return r;
	if (len > IDX_XATTR_VALUE_MAX)
		return -E2BIG;
	if ((flags & IDX_XATTR_CREATE) && (flags & IDX_XATTR_REPLACE))
		return -EINVAL;
	if ((r = ix_sp_begin(ix)) < 0)
		return r;
	/* REPLACE, or no flag: update in place (keeps the listing order) */
	changed = 0;
	if (!(flags & IDX_XATTR_CREATE)) {
		st = ix_stmt(ix, IX_XATTR_UPDATE);
		if ((r = ix_xattr_bind(ix, st, ino, name, value, len, true)) < 0) {
			ix_done(st);
			goto out;
		}
		if ((r = ix_run(ix, st)) < 0)
			goto out;
		changed = sqlite3_changes(ix->db);
	}
	if (changed == 0 && (flags & IDX_XATTR_REPLACE)) {
		r = -ENODATA;
		goto out;
	}
	if (changed == 0) {
		st = ix_stmt(ix, IX_XATTR_INSERT);
		if ((r = ix_xattr_bind(ix, st, ino, name, value, len, true)) < 0) {
			ix_done(st);
			goto out;
		}
		r = ix_run(ix, st);
		if (r == -EEXIST) /* the foreign key: no such inode (ix_err's table) */
			r = -ENOENT;
		if (r < 0)
			goto out;
		if (sqlite3_changes(ix->db) == 0)
			r = -EEXIST; /* CREATE and the name exists (INSERT OR IGNORE) */
	}
out:
	return ix_sp_end(ix, r);
}

int idx_xattr_get(struct idx *ix, uint64_t ino, const char *name, void *buf, size_t cap)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_XATTR_GET);
	int r, len;

	if ((r = ix_xattr_bind(ix, st, ino, name, NULL, 0, false)) < 0)
		goto out;
	if ((r = ix_step(ix, st)) <= 0) {
		r = r == 0 ? -ENODATA : r;
		goto out;
	}
	len = sqlite3_column_bytes(st, 0);
	if (cap > 0 && (size_t)len > cap) {
		r = -ERANGE;
		goto out;
	}
	if (cap > 0 && len > 0)
		memcpy(buf, sqlite3_column_blob(st, 0), (size_t)len);
	r = len;
out:
	ix_done(st);
	return r;
}

ssize_t idx_xattr_list(struct idx *ix, uint64_t ino, char *buf, size_t cap)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_XATTR_LIST);
	size_t need = 0;
	int r;

	if ((r = ix_bind_i64(ix, st, 1, (int64_t)ino)) < 0)
		goto out;
	while ((r = ix_step(ix, st)) > 0) {
		size_t n = (size_t)sqlite3_column_bytes(st, 0);

		if (cap > 0 && need + n + 1 <= cap) {
			memcpy(buf + need, sqlite3_column_blob(st, 0), n);
			buf[need + n] = '\0';
		}
		need += n + 1;
	}
	if (r == 0)
		r = cap > 0 && need > cap ? -ERANGE : 0;
out:
	ix_done(st);
	return r < 0 ? r : (ssize_t)need;
}

int idx_xattr_remove(struct idx *ix, uint64_t ino, const char *name)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_XATTR_DELETE);
	int r;

	if (ix->rdonly)
		return -EROFS;
	if ((r = ix_xattr_bind(ix, st, ino, name, NULL, 0, false)) < 0) {
		ix_done(st);
		return r;
	}
	if ((r = ix_run(ix, st)) < 0)
		return r;
	return sqlite3_changes(ix->db) ? 0 : -ENODATA;
}
