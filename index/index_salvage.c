/* SPDX-License-Identifier: MIT */
/*
 * index_salvage.c — when the index file itself is damaged (a torn or overwritten page of
 * index.db): idx_integrity asks SQLite whether the b-trees are whole, idx_salvage copies every row
 * still readable into a fresh index, and idx_repair makes an index consistent again, reporting
 * each loss (ckptctl fsck drives the three).
 *
 * Salvage, table by table, in key order: a scan that hits a damaged page (SQLITE_CORRUPT) resumes
 * past it. The next readable key is found by doubling the jump from the last key read until a
 * seek succeeds, then bisecting back between the failed and the readable bound, so the rows lost
 * are about those on the damaged pages. The chunks table is not copied: idx_repair rebuilds its
 * rows from the extents and the chunk store (the chunk files are the truth for size and codec),
 * and `ckptctl verify` re-marks bad chunks.
 *
 * Invariants after idx_repair (index.h's 1-4, 6 and 7, which idx_check verifies):
 *   0. Inode 1 is a directory (the root).
 *   1. Every dentry names an existing inode, under an existing directory.
 *   2. Every extent belongs to a regular file and names a chunk row; chunk refs = extents naming
 *      it; chunk rows no extent names are deleted (their files are then orphans for the sweep).
 *   3. Every regular file's extents tile [0, size): a range whose extents were lost is covered by
 *      extents naming "lost" chunks — rows with bad = 1 and a digest no content can have in
 *      practice (IX_LOST_MAGIC), no chunk file — so reading it fails with EIO, never returns
 *      zeros, and verify reports the file damaged.
 *   4. An inode with links but no dentry (its dentry was lost) is linked again under
 *      /lost+found as "#<ino>"; nlink is recounted from the dentries.
 *   5. A step whose directory inode is gone has dir_ino 0; if it was writing, sealed or complete
 *      it becomes incomplete ("index repair: directory lost").
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "index/index_int.h"

/*
 * Most lost bytes of one file patched with placeholder extents (4 MiB each, so at most 65536
 * rows): 256 GiB, above any single checkpoint shard we know of. A file whose holes add up to more
 * (in practice a damaged size) is emptied instead, as a file with more than 64 holes is.
 */
#define IX_HOLES_MAX ((uint64_t)65536 * IX_LOST_PIECE)

/* Bytes of one placeholder extent: raw sizes fit a uint32 like real chunks'. */
#define IX_LOST_PIECE (4u << 20)

/* Most holes of one file patched range by range; a file with more is emptied. */
#define IX_GAPS_MAX 64

/* Most steps each query of ix_fix_steps marks incomplete in one repair; others stay as they are. */
#define IX_STEPS_RESET_MAX 256

/* First 4 bytes of a "lost" chunk's digest; the other 12 are the inode and the offset / 4 KiB. */
static const uint8_t IX_LOST_MAGIC[4] = { 0xff, 0x10, 0x57, 0x00 };

static int ix_prep(struct idx *ix, const char *sql, sqlite3_stmt **ret)
{
	int rc = sqlite3_prepare_v2(ix->db, sql, -1, ret, NULL);

	return rc == SQLITE_OK ? 0 : ix_err(ix, rc);
}

static int ix_exec(struct idx *ix, const char *sql)
{
	int rc = sqlite3_exec(ix->db, sql, NULL, NULL, NULL);

	return rc == SQLITE_OK ? 0 : ix_err(ix, rc);
}

/* ---- integrity ---- */

int idx_integrity(struct idx *ix, bool quick, char *msg, size_t cap)
{
	sqlite3_stmt *st = NULL;
	int r, rc = ix_prep(ix, quick ? "PRAGMA quick_check(1)" : "PRAGMA integrity_check(1)", &st);

	if (rc < 0) {
		if (msg && cap)
			snprintf(msg, cap, "%s", sqlite3_errmsg(ix->db));
		return rc == -EIO ? -EUCLEAN : rc;
	}
	r = sqlite3_step(st);
	if (r == SQLITE_ROW) {
		const char *t = (const char *)sqlite3_column_text(st, 0);

		rc = t && strcmp(t, "ok") == 0 ? 0 : -EUCLEAN;
		if (rc < 0 && msg && cap) {
			/* "*** in database main ***\nOn tree page 11 cell 25: ..." on one line */
			if (t && strncmp(t, "*** in database main ***\n", 25) == 0)
				t += 25;
			snprintf(msg, cap, "%s", t ? t : "(no message)");
			for (char *p = msg; *p; p++)
				if (*p == '\n')
					*p = ' ';
		}
	} else {
		rc = ix_err(ix, r);
		if (msg && cap)
			snprintf(msg, cap, "%s", sqlite3_errmsg(ix->db));
		if (rc == -EIO)
			rc = -EUCLEAN;
	}
	sqlite3_finalize(st);
	return rc;
}

/* ---- salvage ---- */

struct ix_table {
	const char *name;
	const char *k1, *k2; /* integer key columns; k2 NULL for a one-column key */
	const char *cols;
};

static const struct ix_table ix_tables[IDX_SALVAGE_TABLES] = {
	{ "meta", "rowid", NULL, "key, value" },
	{ "inodes", "ino", NULL,
	  "ino, mode, uid, gid, nlink, size, atime_ns, mtime_ns, ctime_ns, rdev, hash, symlink, "
	  "flags" },
	{ "dentries", "cookie", NULL, "cookie, parent, name, ino" },
	{ "extents", "ino", "offset", "ino, offset, length, hash" },
	{ "steps", "id", NULL,
	  "id, kind, name, step, state, dir_ino, created_ns, sealed_ns, completed_ns, state_ns, "
	  "files, logical_bytes, stored_bytes, digest, pinned" },
	{ "step_events", "seq", NULL, "seq, step_id, ts_ns, old_state, new_state, note" },
	{ "claims", "id", NULL, "id, tracker, content, length, step, ts_ns" },
	{ "xattrs", "id", NULL, "id, ino, name, value" },
};

const char *idx_salvage_table_name(int i)
{
	return i >= 0 && i < IDX_SALVAGE_TABLES ? ix_tables[i].name : "?";
}

/*
 * The damaged file is read through a connection of its own, opened read-only. After SQLite
 * reports a damaged page, that connection is closed and a new one opened before the next read:
 * a connection that has met corruption may keep failing on pages that are whole.
 */
struct ix_old {
	const char *path;
	char sql[1024];
	sqlite3 *db;
	sqlite3_stmt *row; /* SELECT k1, k2, cols... WHERE key > (?1, ?2) ORDER BY key LIMIT 1 */
};

static void ix_old_close(struct ix_old *o)
{
	sqlite3_finalize(o->row);
	sqlite3_close_v2(o->db);
	o->row = NULL;
	o->db = NULL;
}

/* Returns 0, -EIO (the table cannot be opened: its schema or root page is damaged), -ENOMEM. */
static int ix_old_open(struct ix_old *o)
{
	int rc = sqlite3_open_v2(o->path, &o->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);

	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(o->db, o->sql, -1, &o->row, NULL);
	if (rc != SQLITE_OK) {
		rc = rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
		ix_old_close(o);
		return rc;
	}
	return 0;
}

/*
 * ix_old_next - the first row with key > (a, b) (b ignored for one-column keys), one seek of its own so
 * every call makes progress or reports damage. Returns 1 (a row: its key in *na, *nb, its columns
 * readable in o->row until the next call), 0 (no row), -EIO (damage on the way; the connection
 * is renewed), -ENOMEM.
 */
static int ix_old_next(struct ix_old *o, int64_t a, int64_t b, int64_t *na, int64_t *nb)
{
	int r;

	if (!o->db && (r = ix_old_open(o)) < 0)
		return r;
	sqlite3_reset(o->row);
	sqlite3_bind_int64(o->row, 1, a);
	sqlite3_bind_int64(o->row, 2, b);
	r = sqlite3_step(o->row);
	if (r == SQLITE_ROW) {
		*na = sqlite3_column_int64(o->row, 0);
		*nb = sqlite3_column_int64(o->row, 1);
		return 1;
	}
	if (r == SQLITE_DONE)
		return 0;
	ix_old_close(o);
	return (r & 0xff) == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

static int ix_copy_table(struct idx *ix, const char *src, const struct ix_table *t,
			 struct idx_salvage_table *ret)
{
	struct ix_old o = { .path = src };
	char sql[1024], keys[64], ph[128] = "";
	sqlite3_stmt *ins = NULL;
	int64_t a = INT64_MIN, b = INT64_MIN, na, nb;
	bool in_damage = false;
	int ncols = 1, r;

	for (const char *p = t->cols; *p; p++)
		ncols += *p == ',';
	for (int i = 0; i < ncols; i++)
		strcat(ph, i ? ", ?" : "?");
	if (t->k2)
		snprintf(keys, sizeof(keys), "(%s, %s) > (?1, ?2)", t->k1, t->k2);
	else
		snprintf(keys, sizeof(keys), "%s > ?1", t->k1);
	snprintf(o.sql, sizeof(o.sql),
		 "SELECT %s, %s, %s FROM %s WHERE %s ORDER BY %s%s%s LIMIT 1", t->k1,
		 t->k2 ? t->k2 : "0", t->cols, t->name, keys, t->k1, t->k2 ? ", " : "",
		 t->k2 ? t->k2 : "");
	snprintf(sql, sizeof(sql), "INSERT OR REPLACE INTO %s(%s) VALUES(%s)", t->name, t->cols,
		 ph);
	if ((r = ix_prep(ix, sql, &ins)) < 0)
		goto out;
	if ((r = ix_old_open(&o)) < 0)
		goto out; /* -EIO: the whole table is unreadable */

	for (;;) {
		r = ix_old_next(&o, a, b, &na, &nb);
		if (r == 0)
			break;
		if (r == 1) {
			sqlite3_reset(ins);
			for (int i = 0; i < ncols; i++)
				sqlite3_bind_value(ins, i + 1, sqlite3_column_value(o.row, i + 2));
			r = sqlite3_step(ins);
			if ((r & 0xff) == SQLITE_CONSTRAINT) {
				ret->rejected++; /* e.g. NULL where the schema says NOT NULL */
			} else if (r != SQLITE_DONE) {
				r = ix_err(ix, r);
				goto out;
			} else {
				ret->copied++;
			}
			if (na < a || (na == a && nb <= b))
				break; /* a damaged page returned keys out of order: stop here */
			a = na;
			b = nb;
			in_damage = false;
			continue;
		}
		if (r != -EIO)
			goto out;
		/* a damaged page: double the jump until a seek succeeds, then bisect back to the
		 * lowest bound that reads (lo always fails, hi always reads) */
		if (!in_damage)
			ret->damaged_ranges++;
		in_damage = true;
		int64_t lo = a, hi = a, jump = 1;
		int s = -EIO;

		while (s == -EIO && hi < INT64_MAX) {
			lo = hi;
			hi = lo > INT64_MAX - jump ? INT64_MAX : lo + jump;
			s = ix_old_next(&o, hi, INT64_MIN, &na, &nb);
			jump = jump > INT64_MAX / 2 ? INT64_MAX : jump * 2;
		}
		if (s < 0 && s != -EIO) {
			r = s;
			goto out;
		}
		if (s <= 0)
			break; /* nothing readable past the damage */
		while (hi - lo > 1) {
			int64_t mid = lo + (hi - lo) / 2;
			int m = ix_old_next(&o, mid, INT64_MIN, &na, &nb);

			if (m == -EIO) {
				lo = mid;
			} else if (m < 0) {
				r = m;
				goto out;
			} else {
				hi = mid;
			}
		}
		a = hi;
		b = INT64_MIN;
	}
	r = 0;
out:
	ix_old_close(&o);
	sqlite3_finalize(ins);
	return r;
}

/*
 * The extents table's secondary index extents_hash holds (hash, ino, offset) of every extent: a
 * b-tree of its own, often whole when the table's pages are not. Its rows the table copy missed
 * are added with length 0, which idx_repair sets from the chunk's raw size. A damaged page of the
 * index ends this pass (it is only a second chance).
 */
static int ix_extents_from_index(struct idx *ix, const char *src, uint64_t *ret_added)
{
	struct ix_old o = { .path = src };
	sqlite3_stmt *ins = NULL;
	int r;

	snprintf(o.sql, sizeof(o.sql),
		 "SELECT ino, offset, hash FROM extents INDEXED BY extents_hash");
	if ((r = ix_prep(ix, "INSERT OR IGNORE INTO extents(ino, offset, length, hash) "
			     "VALUES(?1, ?2, 0, ?3)", &ins)) < 0)
		return r;
	if (ix_old_open(&o) < 0) {
		sqlite3_finalize(ins);
		return 0;
	}
	while ((r = sqlite3_step(o.row)) == SQLITE_ROW) {
		sqlite3_reset(ins);
		for (int i = 0; i < 3; i++)
			sqlite3_bind_value(ins, i + 1, sqlite3_column_value(o.row, i));
		if ((r = sqlite3_step(ins)) != SQLITE_DONE && (r & 0xff) != SQLITE_CONSTRAINT)
			break;
		if (r == SQLITE_DONE)
			*ret_added += (uint64_t)sqlite3_changes(ix->db);
	}
	r = (r == SQLITE_ROW || r == SQLITE_DONE || (r & 0xff) == SQLITE_CORRUPT) ? 0
										: ix_err(ix, r);
	ix_old_close(&o);
	sqlite3_finalize(ins);
	return r;
}

int idx_salvage(struct idx *dst, const char *src_path, struct idx_salvage_report *ret)
{
	struct idx_salvage_report rep = { 0 };
	int r;

	if (dst->rdonly)
		return -EROFS;
	if ((r = ix_exec(dst, "PRAGMA foreign_keys = OFF")) < 0)
		return r;
	if ((r = ix_exec(dst, "BEGIN IMMEDIATE")) < 0)
		goto out;
	/* the fresh index's own root and meta rows are replaced by the old ones where readable */
	for (int i = 0; i < IDX_SALVAGE_TABLES && r == 0; i++) {
		r = ix_copy_table(dst, src_path, &ix_tables[i], &rep.table[i]);
		if (r == -EIO && rep.table[i].copied == 0) {
			/* the table cannot even be opened (its root page or the schema): lost */
			rep.table[i].unreadable = true;
			r = 0;
		}
	}
	if (r == 0)
		r = ix_extents_from_index(dst, src_path, &rep.extents_from_index);
	if (r == 0)
		r = ix_exec(dst, "COMMIT");
	if (r < 0)
		sqlite3_exec(dst->db, "ROLLBACK", NULL, NULL, NULL);
out:
	sqlite3_exec(dst->db, "PRAGMA foreign_keys = ON", NULL, NULL, NULL);
	if (r == 0 && ret)
		*ret = rep;
	return r;
}

/* ---- repair ---- */

static void ix_lost(const struct idx_repair_ops *ops, uint64_t ino, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void ix_lost(const struct idx_repair_ops *ops, uint64_t ino, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (!ops || !ops->lost)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	ops->lost(ino, line, ops->arg);
}

/* Run sql (no rows) and add the number of rows it changed to *count. */
static int ix_exec_count(struct idx *ix, const char *sql, uint64_t *count)
{
	int r = ix_exec(ix, sql);

	if (r == 0 && count)
		*count += (uint64_t)sqlite3_changes(ix->db);
	return r;
}

static int64_t ix_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/*
 * 1. the root: inode 1 is a directory. A salvage keeps the old root row where it was readable, so
 * a damaged mode arrives here as a root that is not a directory (found by the index fuzzer,
 * tests/fuzz/corpus/index/crash-6dc7de606a4fe756). The root can only ever be a directory, so its
 * type is set back, not the row dropped: every entry under it stays where it was. A root row that
 * is missing altogether is made again as the fresh index makes it (0755, owned by root).
 */
static int ix_fix_root(struct idx *ix, const struct idx_repair_ops *ops,
		       struct idx_repair_stats *s)
{
	sqlite3_stmt *st = NULL;
	int64_t mode = -1;
	int r = ix_prep(ix, "SELECT mode FROM inodes WHERE ino = 1", &st);

	if (r < 0)
		return r;
	r = sqlite3_step(st);
	if (r == SQLITE_ROW)
		mode = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	if (r != SQLITE_ROW && r != SQLITE_DONE)
		return ix_err(ix, r);
	if (mode >= 0 && S_ISDIR((mode_t)mode))
		return 0;
	if (mode < 0) {
		ix_lost(ops, IDX_ROOT_INO, "the root directory's inode was lost: made again");
		r = ix_exec(ix, "INSERT INTO inodes(ino, mode, uid, gid, nlink, size, atime_ns, "
				"mtime_ns, ctime_ns, rdev) VALUES(1, 16877, 0, 0, 2, 0, 0, 0, 0, 0)");
	} else {
		ix_lost(ops, IDX_ROOT_INO, "the root directory's inode had type %llo: set back to a "
			"directory", (unsigned long long)(mode & S_IFMT));
		r = ix_exec(ix, "UPDATE inodes SET mode = 16384 | (mode & 4095), size = 0 "
				"WHERE ino = 1");
	}
	if (r == 0)
		s->root_fixed = 1;
	return r;
}

/* 1. dentries naming a missing inode, or under something that is not a directory */
static int ix_fix_dentries(struct idx *ix, const struct idx_repair_ops *ops,
			   struct idx_repair_stats *s)
{
	sqlite3_stmt *st = NULL;
	int r = ix_prep(ix, "SELECT parent, name, ino FROM dentries WHERE ino NOT IN "
			    "(SELECT ino FROM inodes) OR parent NOT IN (SELECT ino FROM inodes WHERE "
			    "(mode & 61440) = 16384)", &st);

	if (r < 0)
		return r;
	while ((r = sqlite3_step(st)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 1);

		ix_lost(ops, (uint64_t)sqlite3_column_int64(st, 2),
			"entry '%s' in directory inode %lld: its inode or its directory was lost",
			name ? name : "?", (long long)sqlite3_column_int64(st, 0));
	}
	sqlite3_finalize(st);
	if (r != SQLITE_DONE)
		return ix_err(ix, r);
	return ix_exec_count(ix, "DELETE FROM dentries WHERE ino NOT IN (SELECT ino FROM inodes) "
			     "OR parent NOT IN (SELECT ino FROM inodes WHERE "
			     "(mode & 61440) = 16384)", &s->dentries_dropped);
}

/* 3. a chunk row for every digest the extents name: from the store, or marked bad */
static int ix_fix_chunks(struct idx *ix, const struct idx_repair_ops *ops,
			 struct idx_repair_stats *s)
{
	sqlite3_stmt *st = NULL, *ins = NULL;
	int r = ix_prep(ix, "SELECT hash, max(length) FROM extents WHERE hash NOT IN "
			    "(SELECT hash FROM chunks) GROUP BY hash", &st);

	if (r == 0)
		r = ix_prep(ix, "INSERT INTO chunks(hash, raw_size, stored_size, codec, refs, bad, "
				"created_ns) VALUES(?1, ?2, ?3, ?4, 0, ?5, ?6)", &ins);
	while (r == 0 && (r = sqlite3_step(st)) == SQLITE_ROW) {
		uint8_t h[IDX_HASH_LEN];
		uint32_t raw = (uint32_t)sqlite3_column_int64(st, 1), stored = 0;
		uint8_t codec = 0;
		int have = 0;

		if ((r = ix_column_hash(st, 0, h)) < 0)
			break;
		if (ops && ops->chunk_info)
			have = ops->chunk_info(h, &raw, &stored, &codec, ops->arg);
		if (have < 0) {
			r = have;
			break;
		}
		sqlite3_reset(ins);
		sqlite3_bind_blob(ins, 1, h, IDX_HASH_LEN, SQLITE_TRANSIENT);
		sqlite3_bind_int64(ins, 2, raw);
		sqlite3_bind_int64(ins, 3, stored);
		sqlite3_bind_int64(ins, 4, codec);
		sqlite3_bind_int64(ins, 5, have ? 0 : 1);
		sqlite3_bind_int64(ins, 6, ix_now());
		if ((r = sqlite3_step(ins)) != SQLITE_DONE) {
			r = ix_err(ix, r);
			break;
		}
		r = 0;
		if (have)
			s->chunks_added++;
		else
			s->chunks_missing++;
	}
	if (r == SQLITE_DONE)
		r = 0;
	else if (r > 0)
		r = ix_err(ix, r);
	sqlite3_finalize(st);
	sqlite3_finalize(ins);
	return r;
}

/* The ranges of one regular file that no extent covers (ix_fix_holes). */
struct ix_gaps {
	struct {
		uint64_t off, len;
	} v[IX_GAPS_MAX];
	size_t n;
	bool more; /* more than IX_GAPS_MAX ranges, or more than IX_HOLES_MAX bytes */
};

/* Add the range [off, off + len) to g. */
static void gaps_add(struct ix_gaps *g, uint64_t off, uint64_t len)
{
	if (g->n < IX_GAPS_MAX) {
		g->v[g->n].off = off;
		g->v[g->n].len = len;
		g->n++;
	} else {
		g->more = true;
	}
}

/*
 * Walk the extents of file ino (size bytes) with ext (bound here), collecting the ranges before,
 * between and after them that none covers into *g (none for a sparse file: those are holes), and
 * drop the extents past size, running past it or overlapping an earlier one with del. Counts the
 * dropped rows in s. Returns 0 or -errno.
 */
static int gaps_scan(struct idx *ix, sqlite3_stmt *ext, sqlite3_stmt *del, uint64_t ino,
		     uint64_t size, bool sparse, struct ix_gaps *g, struct idx_repair_stats *s)
{
	uint64_t at = 0;
	int r;

	sqlite3_reset(ext);
	sqlite3_bind_int64(ext, 1, (int64_t)ino);
	while ((r = sqlite3_step(ext)) == SQLITE_ROW) {
		uint64_t off = (uint64_t)sqlite3_column_int64(ext, 0);
		uint64_t len = (uint64_t)sqlite3_column_int64(ext, 1);

		/* past the end, overlapping, or running past size (a chunk is read whole, so its
		 * extent cannot be cut to size, and a size no extent ends at is invariant 3's
		 * breach): dropped below, and its range is lost */
		if (off >= size || off < at || len > size - off)
			break;
		if (off > at && !sparse)
			gaps_add(g, at, off - at);
		at = off + len;
	}
	sqlite3_reset(ext);
	if (r != SQLITE_ROW && r != SQLITE_DONE)
		return ix_err(ix, r);
	sqlite3_reset(del);
	sqlite3_bind_int64(del, 1, (int64_t)ino);
	sqlite3_bind_int64(del, 2, (int64_t)at);
	if (sqlite3_step(del) != SQLITE_DONE)
		return -EIO;
	s->extents_dropped += (uint64_t)sqlite3_changes(ix->db);
	if (!sparse && at < size)
		gaps_add(g, at, size - at);
	uint64_t gap_total = 0;

	for (size_t i = 0; i < g->n; i++)
		gap_total += g->v[i].len;
	if (gap_total > IX_HOLES_MAX) {
		/* a size no extent backs (a damaged row): too much to patch piece by piece */
		g->more = true;
		g->n = 0;
	}
	return 0;
}

/*
 * Cover every range of g in file ino with "lost" chunks (invariant 3), one per IX_LOST_PIECE
 * bytes, through ch (the chunk row) and ins (the extent row). Adds the bytes covered to
 * *ret_lost. Returns 0 or -EIO.
 */
static int gaps_patch(sqlite3_stmt *ch, sqlite3_stmt *ins, uint64_t ino, const struct ix_gaps *g,
		      uint64_t *ret_lost)
{
	int r = 0;

	for (size_t i = 0; i < g->n && r == 0; i++) {
		uint64_t end = g->v[i].off + g->v[i].len;

		for (uint64_t o = g->v[i].off; o < end && r == 0;) {
			uint64_t n = end - o;
			uint8_t h[IDX_HASH_LEN];

			if (n > IX_LOST_PIECE)
				n = IX_LOST_PIECE;
			memcpy(h, IX_LOST_MAGIC, 4);
			for (int k = 0; k < 8; k++)
				h[4 + k] = (uint8_t)(ino >> (8 * k));
			for (int k = 0; k < 4; k++)
				h[12 + k] = (uint8_t)((o >> 12) >> (8 * k));
			sqlite3_reset(ch);
			sqlite3_bind_blob(ch, 1, h, IDX_HASH_LEN, SQLITE_TRANSIENT);
			sqlite3_bind_int64(ch, 2, (int64_t)n);
			sqlite3_bind_int64(ch, 3, ix_now());
			sqlite3_reset(ins);
			sqlite3_bind_int64(ins, 1, (int64_t)ino);
			sqlite3_bind_int64(ins, 2, (int64_t)o);
			sqlite3_bind_int64(ins, 3, (int64_t)n);
			sqlite3_bind_blob(ins, 4, h, IDX_HASH_LEN, SQLITE_TRANSIENT);
			if (sqlite3_step(ch) != SQLITE_DONE || sqlite3_step(ins) != SQLITE_DONE)
				r = -EIO;
			o += n;
			*ret_lost += n;
		}
	}
	return r;
}

/* Empty file ino: drop all its extents and set its size to 0. Returns 0 or -errno. */
static int ix_empty_file(struct idx *ix, uint64_t ino)
{
	sqlite3_stmt *e = NULL;
	int r = ix_prep(ix, "DELETE FROM extents WHERE ino = ?1; ", &e);

	if (r == 0) {
		sqlite3_bind_int64(e, 1, (int64_t)ino);
		r = sqlite3_step(e) == SQLITE_DONE ? 0 : -EIO;
		sqlite3_finalize(e);
		e = NULL;
	}
	if (r == 0)
		r = ix_prep(ix, "UPDATE inodes SET size = 0 WHERE ino = ?1", &e);
	if (r == 0) {
		sqlite3_bind_int64(e, 1, (int64_t)ino);
		r = sqlite3_step(e) == SQLITE_DONE ? 0 : -EIO;
		sqlite3_finalize(e);
	}
	return r;
}

/* 3. ranges of regular files no extent covers get "lost" chunks (invariant 3); in a sparse file
 * (IDX_INODE_SPARSE) they are holes and stay, and its whole-file digest, which records each
 * hole, tells verify if an extent was lost */
static int ix_fix_holes(struct idx *ix, const struct idx_repair_ops *ops,
			struct idx_repair_stats *s)
{
	sqlite3_stmt *files = NULL, *ext = NULL, *ch = NULL, *ins = NULL, *del = NULL;
	int r = ix_prep(ix, "SELECT ino, size, flags FROM inodes WHERE (mode & 61440) = 32768 "
			    "AND hash IS NOT NULL", &files);

	if (r == 0)
		r = ix_prep(ix, "SELECT offset, length FROM extents WHERE ino = ?1 ORDER BY offset",
			    &ext);
	if (r == 0)
		r = ix_prep(ix, "INSERT OR IGNORE INTO chunks(hash, raw_size, stored_size, codec, "
				"refs, bad, created_ns) VALUES(?1, ?2, 0, 0, 0, 1, ?3)", &ch);
	if (r == 0)
		r = ix_prep(ix, "INSERT INTO extents(ino, offset, length, hash) "
				"VALUES(?1, ?2, ?3, ?4)", &ins);
	if (r == 0)
		r = ix_prep(ix, "DELETE FROM extents WHERE ino = ?1 AND offset >= ?2", &del);
	while (r == 0 && (r = sqlite3_step(files)) == SQLITE_ROW) {
		uint64_t ino = (uint64_t)sqlite3_column_int64(files, 0);
		uint64_t size = (uint64_t)sqlite3_column_int64(files, 1), lost = 0;
		bool sparse = (sqlite3_column_int64(files, 2) & IDX_INODE_SPARSE) != 0;
		struct ix_gaps g = { .n = 0, .more = false };

		r = gaps_scan(ix, ext, del, ino, size, sparse, &g, s);
		if (r < 0)
			break;
		r = gaps_patch(ch, ins, ino, &g, &lost);
		if (g.more && r == 0) {
			/* too fragmented to patch range by range: the whole file is lost */
			ix_lost(ops, ino, "file inode %llu: more than 64 ranges or 256 GiB lost; "
				"the file is emptied", (unsigned long long)ino);
			r = ix_empty_file(ix, ino);
			s->files_damaged++;
			continue;
		}
		if (lost) {
			s->files_damaged++;
			s->bytes_lost += lost;
			ix_lost(ops, ino, "file inode %llu: %llu of %llu bytes lost (reads of them "
				"fail with EIO)", (unsigned long long)ino,
				(unsigned long long)lost, (unsigned long long)size);
		}
	}
	if (r == SQLITE_DONE)
		r = 0;
	else if (r > 0)
		r = ix_err(ix, r);
	sqlite3_finalize(files);
	sqlite3_finalize(ext);
	sqlite3_finalize(ch);
	sqlite3_finalize(ins);
	sqlite3_finalize(del);
	return r;
}

/* 4. inodes with links but no dentry go under /lost+found, and so do directories without a
 * dentry whatever their link count: a directory's is recomputed from its subdirectories below,
 * which would leave one with none unnamed (invariant 2; fuzz corpus index/crash-43423528) */
static int ix_fix_orphans(struct idx *ix, const struct idx_repair_ops *ops,
			  struct idx_repair_stats *s)
{
	sqlite3_stmt *st = NULL, *add = NULL;
	uint64_t lf = 0;
	int r = ix_prep(ix, "SELECT ino FROM inodes WHERE ino <> 1 AND (nlink > 0 OR "
			    "(mode & 61440) = 16384) AND ino NOT IN (SELECT ino FROM dentries)", &st);

	while (r == 0 && (r = sqlite3_step(st)) == SQLITE_ROW) {
		uint64_t ino = (uint64_t)sqlite3_column_int64(st, 0);
		char name[32];

		if (!lf) {
			struct idx_inode a = { 0 };
			int64_t now = ix_now();

			if (idx_dentry_lookup(ix, IDX_ROOT_INO, "lost+found", &lf) < 0) {
				a.mode = S_IFDIR | 0700;
				a.nlink = 2;
				a.atime_ns = a.mtime_ns = a.ctime_ns = now;
				if ((r = idx_inode_create(ix, &a, &lf)) < 0 ||
				    (r = idx_dentry_add(ix, IDX_ROOT_INO, "lost+found", lf)) < 0)
					break;
			}
			if (!add && (r = ix_prep(ix, "INSERT INTO dentries(parent, name, ino) "
						     "VALUES(?1, ?2, ?3)", &add)) < 0)
				break;
		}
		r = 0;
		if (ino == lf)
			continue;
		/* a step's directory goes back where its step row says, under its own name */
		struct idx_step stp;
		uint64_t other;
		uint64_t parent = lf;

		snprintf(name, sizeof(name), "#%llu", (unsigned long long)ino);
		if (idx_step_by_dir(ix, ino, &stp) == 0 && stp.name[0] &&
		    strlen(stp.name) < sizeof(name) &&
		    idx_dentry_lookup(ix, IDX_ROOT_INO, stp.name, &other) == -ENOENT) {
			parent = IDX_ROOT_INO;
			snprintf(name, sizeof(name), "%s", stp.name);
		}
		sqlite3_reset(add);
		sqlite3_bind_int64(add, 1, (int64_t)parent);
		sqlite3_bind_blob(add, 2, name, (int)strlen(name), SQLITE_TRANSIENT);
		sqlite3_bind_int64(add, 3, (int64_t)ino);
		if (sqlite3_step(add) != SQLITE_DONE) {
			r = -EIO;
			break;
		}
		s->relinked++;
		ix_lost(ops, ino, "inode %llu had lost its name: now %s%s", (unsigned long long)ino,
			parent == lf ? "/lost+found/" : "/", name);
		r = 0;
	}
	if (r == SQLITE_DONE)
		r = 0;
	else if (r > 0)
		r = ix_err(ix, r);
	sqlite3_finalize(st);
	sqlite3_finalize(add);
	return r;
}

/* 5. steps whose directory is gone */
static int ix_fix_steps(struct idx *ix, const struct idx_repair_ops *ops,
			struct idx_repair_stats *s)
{
	sqlite3_stmt *st = NULL;
	int64_t ids[IX_STEPS_RESET_MAX];
	size_t n = 0;
	int r = ix_prep(ix, "SELECT id, name, state FROM steps WHERE dir_ino <> 0 AND dir_ino NOT IN "
			    "(SELECT ino FROM inodes)", &st);

	while (r == 0 && (r = sqlite3_step(st)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 1);
		int state = sqlite3_column_int(st, 2);

		ix_lost(ops, 0, "step '%s': its directory was lost%s", name ? name : "?",
			state == IDX_STEP_COMPLETE ? "; no longer complete" : "");
		if (n < IX_STEPS_RESET_MAX && (state == IDX_STEP_WRITING || state == IDX_STEP_SEALED ||
				state == IDX_STEP_COMPLETE || state == IDX_STEP_COPIED))
			ids[n++] = sqlite3_column_int64(st, 0);
		s->steps_reset++;
		r = 0;
	}
	sqlite3_finalize(st);
	if (r != SQLITE_DONE && r != 0)
		return ix_err(ix, r);
	for (size_t i = 0; i < n; i++)
		if ((r = idx_step_set_state(ix, ids[i], IDX_STEP_INCOMPLETE, ix_now(),
					    "index repair: directory lost")) < 0)
			return r;
	/* a complete step whose tree no longer holds the files and bytes it was completed with
	 * lost some of them (names, or whole inodes) */
	n = 0;
	r = ix_prep(ix, "WITH RECURSIVE t(ino) AS (SELECT s.dir_ino UNION ALL SELECT d.ino FROM "
			"dentries d JOIN t ON d.parent = t.ino) SELECT s.id, s.name FROM steps s "
			"WHERE s.state = 2 AND s.dir_ino <> 0 AND (SELECT count(*) || '/' || "
			"coalesce(sum(i.size), 0) FROM t JOIN inodes i ON i.ino = t.ino WHERE "
			"(i.mode & 61440) = 32768) <> s.files || '/' || s.logical_bytes", &st);
	if (r < 0) {
		/* older SQLite without correlated CTEs: skip this check */
		r = 0;
		goto done;
	}
	while ((r = sqlite3_step(st)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 1);

		ix_lost(ops, 0, "step '%s': files of it were lost; no longer complete",
			name ? name : "?");
		if (n < IX_STEPS_RESET_MAX)
			ids[n++] = sqlite3_column_int64(st, 0);
		s->steps_reset++;
	}
	sqlite3_finalize(st);
	if (r != SQLITE_DONE)
		return ix_err(ix, r);
	for (size_t i = 0; i < n; i++)
		if ((r = idx_step_set_state(ix, ids[i], IDX_STEP_INCOMPLETE, ix_now(),
					    "index repair: files lost")) < 0)
			return r;
done:
	return ix_exec(ix, "UPDATE steps SET dir_ino = 0 WHERE dir_ino <> 0 AND dir_ino NOT IN "
			   "(SELECT ino FROM inodes);"
			   "DELETE FROM step_events WHERE step_id NOT IN (SELECT id FROM steps);");
}

int idx_repair(struct idx *ix, const struct idx_repair_ops *ops, struct idx_repair_stats *ret)
{
	struct idx_repair_stats s = { 0 };
	int r;

	if (ix->rdonly)
		return -EROFS;
	ix_pcache_clear(ix); /* the repair renames and drops dentries with SQL of its own; again
			      * at its end */
	if (ix->sync_normal) { /* after lazy transactions: the repair's commit is durable on return */
		if ((r = ix_exec(ix, "PRAGMA synchronous = FULL")) < 0)
			return r;
		ix->sync_normal = false;
	}
	if ((r = ix_exec(ix, "PRAGMA foreign_keys = OFF")) < 0)
		return r;
	if ((r = ix_exec(ix, "BEGIN IMMEDIATE")) < 0)
		goto out;
	r = ix_exec_count(ix, "INSERT OR IGNORE INTO meta(key, value) VALUES('format', '"
			  IX_FORMAT "')", NULL);
	if (r == 0)
		r = ix_fix_root(ix, ops, &s);
	if (r == 0)
		r = ix_fix_dentries(ix, ops, &s);
	/* 2. extents of inodes that are gone or not regular files */
	if (r == 0)
		r = ix_exec_count(ix, "DELETE FROM extents WHERE ino NOT IN (SELECT ino FROM inodes "
				  "WHERE (mode & 61440) = 32768)", &s.extents_dropped);
	if (r == 0)
		r = ix_fix_chunks(ix, ops, &s);
	/* extents salvaged from the extents_hash index carry length 0: the chunk's raw size */
	if (r == 0)
		r = ix_exec(ix, "UPDATE extents SET length = (SELECT raw_size FROM chunks c WHERE "
			    "c.hash = extents.hash) WHERE length = 0");
	/* a chunk is read whole: an extent whose length is not its chunk's raw size (two extents
	 * naming one digest with different lengths, a damaged length) cannot be read; its range
	 * becomes a hole that ix_fix_holes reports lost */
	if (r == 0)
		r = ix_exec_count(ix, "DELETE FROM extents WHERE length <= 0 OR length <> (SELECT "
				  "raw_size FROM chunks c WHERE c.hash = extents.hash)",
				  &s.extents_dropped);
	if (r == 0)
		r = ix_fix_holes(ix, ops, &s);
	if (r == 0)
		r = ix_exec(ix, "UPDATE chunks SET refs = (SELECT count(*) FROM extents e WHERE "
			    "e.hash = chunks.hash)");
	if (r == 0)
		r = ix_exec_count(ix, "DELETE FROM chunks WHERE refs = 0", &s.chunks_dropped);
	if (r == 0)
		r = ix_fix_orphans(ix, ops, &s);
	/* 4. link counts from the dentries */
	if (r == 0)
		r = ix_exec_count(ix, "UPDATE inodes SET nlink = (SELECT count(*) FROM dentries d "
				  "WHERE d.ino = inodes.ino) WHERE (mode & 61440) <> 16384 AND "
				  "nlink <> (SELECT count(*) FROM dentries d WHERE d.ino = inodes.ino)",
				  &s.nlink_fixed);
	if (r == 0)
		r = ix_exec_count(ix, "UPDATE inodes SET nlink = 2 + (SELECT count(*) FROM dentries "
				  "d JOIN inodes c ON c.ino = d.ino WHERE d.parent = inodes.ino AND "
				  "(c.mode & 61440) = 16384) WHERE (mode & 61440) = 16384 AND nlink <> "
				  "2 + (SELECT count(*) FROM dentries d JOIN inodes c ON c.ino = d.ino "
				  "WHERE d.parent = inodes.ino AND (c.mode & 61440) = 16384)",
				  &s.nlink_fixed);
	if (r == 0)
		r = ix_fix_steps(ix, ops, &s);
	if (r == 0)
		r = ix_exec(ix, "COMMIT");
	if (r < 0)
		sqlite3_exec(ix->db, "ROLLBACK", NULL, NULL, NULL);
out:
	ix_pcache_clear(ix);
	sqlite3_exec(ix->db, "PRAGMA foreign_keys = ON", NULL, NULL, NULL);
	if (r == 0 && ret)
		*ret = s;
	return r;
}
