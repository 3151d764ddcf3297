/*
 * index_int.h — private to index/: the connection handle, the table of prepared statements and
 * the helpers every file of index/ uses to run them.
 *
 * Statement discipline: every statement in enum ix_stmt is prepared once in idx_open
 * (SQLITE_PREPARE_PERSISTENT) and finalized in idx_close. A function takes one with ix_stmt(),
 * binds, steps, and hands it back with ix_done() (reset + clear bindings) on every path, so a
 * statement is never left mid-iteration between two API calls. A callback invoked while a
 * statement is being walked (idx_dir_list, idx_chunk_foreach, idx_chunk_users) may call any other
 * idx_* function on the same handle except the one walking, and must not modify the rows walked.
 *
 * Errors: SQLite result codes never leave this module; ix_err() converts them to -errno.
 */
#ifndef CKPTFS_INDEX_INT_H
#define CKPTFS_INDEX_INT_H

#include <limits.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index/index.h"

#define IX_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* meta.format: what marks a database as a ckptfs index (invariant 9) */
#define IX_FORMAT "ckptfs-index"

/* S_IFMT and the type bits, as they appear as literals in the SQL of index.c (POSIX values). */
#define IX_S_IFMT 61440 /* 0170000 */
#define IX_S_IFREG 32768 /* 0100000 */
#define IX_S_IFDIR 16384 /* 0040000 */
#define IX_S_IFLNK 40960 /* 0120000 */

/* idx_path: deepest chain of dentries followed before assuming a cycle. */
#define IX_MAX_DEPTH 4096

enum ix_stmt {
	/* transactions */
	IX_BEGIN,
	IX_BEGIN_READ,
	IX_COMMIT,
	IX_ROLLBACK,
	IX_SP_BEGIN,
	IX_SP_ROLLBACK,
	IX_SP_RELEASE,
	IX_DEF_BEGIN,
	IX_DEF_ROLLBACK,
	IX_DEF_RELEASE,
	/* inodes */
	IX_INODE_GET,
	IX_INODE_CREATE,
	IX_INODE_UPDATE,
	IX_INODE_DELETE,
	IX_INODE_SET_CONTENT,
	IX_INODE_MODE,
	IX_SYMLINK_SET,
	IX_SYMLINK_GET,
	/* dentries */
	IX_DENTRY_LOOKUP,
	IX_DENTRY_ADD,
	IX_DENTRY_REMOVE,
	IX_DENTRY_MOVE,
	IX_DENTRY_PARENT,
	IX_DIR_EMPTY,
	IX_DIR_LIST,
	/* extents and chunks */
	IX_EXT_LIST,
	IX_EXT_DECREF,
	IX_EXT_ZEROS,
	IX_EXT_ANY,
	IX_EXT_DELETE,
	IX_EXT_INSERT,
	IX_CHUNK_UPSERT,
	IX_CHUNK_DELETE_ZERO,
	IX_CHUNK_EXISTS,
	IX_CHUNK_SET_BAD,
	IX_CHUNK_IS_BAD,
	IX_ANY_BAD_CHUNK,
	IX_DIR_HAS_BAD_CHUNK,
	IX_CHUNK_SET_STORED,
	IX_CHUNK_WITH_CODEC,
	IX_CHUNK_FOREACH,
	IX_CHUNK_USERS,
	IX_STORED_BYTES,
	IX_STATS_INODES,
	IX_STATS_CHUNKS,
	IX_DATA_VERSION,
	IX_RECOVER_UNCOMMITTED_DENTRIES,
	IX_RECOVER_UNCOMMITTED_INODES,
	IX_RECOVER_INODES,
	IX_RECOVER_CHUNKS,
	/* steps, events and claims (index_step.c) */
	IX_INODE_STEP_UNDIR,
	IX_STEP_CREATE,
	IX_STEP_GET,
	IX_STEP_BY_DIR,
	IX_STEP_BY_NAME,
	IX_STEP_BY_NAME_AT,
	IX_STEP_STATE_OF,
	IX_STEP_SET_STATE,
	IX_STEP_EVENT_ADD,
	IX_STEP_SET_DIR,
	IX_STEP_SET_NUMBER,
	IX_STEP_SET_NAME,
	IX_STEP_SET_KIND,
	IX_STEP_SET_FIGURES,
	IX_STEP_SET_PINNED,
	IX_STEP_ALL,
	IX_STEP_NEWEST,
	IX_STEP_NEWEST_PAGE,
	IX_STEP_KIND_ANY,
	IX_STEP_EVENTS,
	IX_CLAIM_ADD,
	IX_CLAIM_ALL,
	IX_CLAIM_LENGTH,
	IX_CLAIM_NEWEST,
	/* extended attributes (index_xattr.c) */
	IX_XATTR_GET,
	IX_XATTR_LIST,
	IX_XATTR_INSERT,
	IX_XATTR_UPDATE,
	IX_XATTR_DELETE,
	/* idx_check, one statement per kind of violation */
	IX_CHECK_ROOT,
	IX_CHECK_DENTRY_INO,
	IX_CHECK_DENTRY_PARENT,
	IX_CHECK_DIR_LINKS,
	IX_CHECK_REFS,
	IX_CHECK_EXT_CHUNK,
	IX_CHECK_EXT_OWNER,
	IX_CHECK_EXT_LENGTH,
	IX_CHECK_TILE_GAP,
	IX_CHECK_TILE_SIZE,
	IX_CHECK_STEP_DIR,
	IX_CHECK_STEP_STATE,
	IX_CHECK_EVENT_STATE,
	IX__COUNT
};

/*
 * The first dentry (parent, name) of recently asked inodes, for idx_dentry_parent and idx_path:
 * a small file's save asks for its path from the create, the flush and the commit, three
 * statements each (RESULTS.md, "Small files"). IX_PCACHE slots, by ino modulo IX_PCACHE; only
 * on a read-write handle, the database's one writer (the store's lock), so only its own changes
 * can make a slot stale: a dentry removed or moved (idx_dentry_remove, idx_dentry_move),
 * recovery (ix_recover), a repair (idx_repair) and a rollback empty the cache (ix_pcache_clear).
 * A dentry added changes no slot: cookies only grow, and a slot holds the first one.
 */
#define IX_PCACHE 64
struct ix_pent {
	uint64_t ino; /* 0: an empty slot */
	uint64_t parent;
	size_t len;
	char name[NAME_MAX];
};

struct idx {
	sqlite3 *db;
	bool rdonly;
	bool sync_normal; /* synchronous=NORMAL may be set: since the last lazy transaction
			   * (idx_begin_lazy); idx_begin sets FULL back (ix_sync_full) */
	int hold;         /* idx_hold depth: > 0 keeps one read transaction across read calls */
	bool in_read;     /* a deferred transaction opened by ix_step for a hold is open */
	/* idx_begin_deferred's transaction: NONE (none open), IN (inside a caller's change, its
	 * SAVEPOINT ix_defer open) or IDLE (open, holding committed-to-it changes, no caller in it;
	 * idx_flush commits it) */
	enum { IX_DEFER_NONE, IX_DEFER_IN, IX_DEFER_IDLE } defer;
	uint64_t defer_max_ino; /* the largest inode created in the deferred transaction */
	uint64_t ino_floor;     /* after a deferred transaction was lost: inode numbers up to this
				 * were handed out, and idx_inode_create never hands them out again */
	int wal_fd;       /* the WAL file, read-only, for idx_sync; -1 on a read-only handle */
	int64_t opened_version; /* PRAGMA user_version found by idx_open (idx_opened_version) */
	sqlite3_stmt *st[IX__COUNT]; /* all prepared in idx_open, all reset between calls */
	struct ix_pent pc[IX_PCACHE]; /* dentry parents, read-write handles only (above) */
	/* idx_checkpoint_apart: the checkpointer's own connection and what it needs, touched only
	 * by idx_checkpoint's one thread (ck_path set before, read-only after) but for wal_frames,
	 * which ix_wal_hook stores under the handle's lock */
	char *ck_path;            /* the database file's path; NULL: SQLite's own autocheckpoint */
	sqlite3 *ck_db;           /* opened by the first idx_checkpoint */
	int ck_frames;            /* the WAL's frames at the last checkpoint, 0 after a restart */
	bool ck_owed;             /* the last checkpoint copied all of the WAL but could not
				   * restart it: the next call tries again, due or not */
	_Atomic int wal_frames;   /* frames in the WAL at this handle's last commit */
};

/* ix_pcache_clear - empty ix's cache of dentry parents. */
void ix_pcache_clear(struct idx *ix);

/* ix_err - convert the SQLite result code rc (primary or extended, != OK/ROW/DONE) to -errno. */
int ix_err(struct idx *ix, int rc);

/* ix_stmt - the prepared statement id, ready to bind (borrowed; hand back with ix_done). */
static inline sqlite3_stmt *ix_stmt(struct idx *ix, enum ix_stmt id)
{
	return ix->st[id];
}

/* ix_done - reset st and clear its bindings; st may be mid-iteration. */
void ix_done(sqlite3_stmt *st);

/*
 * ix_run - step st, which must not return rows, to completion and ix_done it.
 * Returns 0 or -errno.
 */
int ix_run(struct idx *ix, sqlite3_stmt *st);

/*
 * ix_step - one step of st. Returns 1 (a row), 0 (done) or -errno. Does not reset st: the caller
 * calls ix_done on every path.
 */
int ix_step(struct idx *ix, sqlite3_stmt *st);

/* Binding helpers; bound pointers are SQLITE_STATIC: valid until ix_done. Return 0 or -errno. */
int ix_bind_i64(struct idx *ix, sqlite3_stmt *st, int col, int64_t v);
int ix_bind_hash(struct idx *ix, sqlite3_stmt *st, int col, const uint8_t hash[IDX_HASH_LEN]);
int ix_bind_name(struct idx *ix, sqlite3_stmt *st, int col, const char *name);

/*
 * ix_update - bind st's parameters from the arguments after fmt, run it (it must not return rows)
 * and say whether it changed a row: the one shape of every single-statement write.
 * fmt: one letter a parameter, numbered from 1 in order:
 *   'i' int64_t;
 *   'n' const char *, a NUL-terminated name, bound as a blob (ix_bind_name);
 *   'h' const uint8_t *, a 16-byte hash, or NULL to leave the parameter NULL.
 * absent: what to return when no row changed: -ENOENT, -ENODATA, or 0 when that is not an error.
 * Returns 0 when a row changed, absent when none did, -EROFS on an IDX_RDONLY handle, -EEXIST on
 * a constraint (ix_err), other -errno from SQLite. st is handed back (ix_done) on every path.
 */
int ix_update(struct idx *ix, enum ix_stmt id, int absent, const char *fmt, ...);

/*
 * ix_row - bind statement id's parameters as ix_update does (fmt) and step to its first row.
 * Returns 0 with *ret_st positioned on that row (borrowed; the caller reads its columns, then
 * hands it back with ix_done), -ENOENT when there is no row, or -errno from SQLite; on every
 * error the statement is already handed back and *ret_st untouched.
 */
int ix_row(struct idx *ix, enum ix_stmt id, sqlite3_stmt **ret_st, const char *fmt, ...);

/*
 * ix_scalar - ix_row, then column 0 of the row as an int64 into *ret (untouched on failure).
 * Returns 0, -ENOENT (no row) or -errno.
 */
int ix_scalar(struct idx *ix, enum ix_stmt id, int64_t *ret, const char *fmt, ...);

/* ix_column_hash - copy a 16-byte blob column into out. Returns 0 or -EIO (wrong size/NULL). */
int ix_column_hash(sqlite3_stmt *st, int col, uint8_t out[IDX_HASH_LEN]);

/*
 * ix_sp_begin / ix_sp_end - bracket a multi-statement operation in SAVEPOINT ix_op, so it is
 * atomic even inside the caller's larger transaction: ix_sp_end(ix, r) with r < 0 rolls the
 * operation back and returns r; with r >= 0 it releases the savepoint and returns r, or -errno
 * when the release fails (then it rolls back).
 */
int ix_sp_begin(struct idx *ix);
int ix_sp_end(struct idx *ix, int r);

/*
 * ix_drop_extents - remove every extent of ino: refs of their chunks are decremented by the
 * number of extents naming them; chunks reaching refs 0 are appended to *zeros (an owned array of
 * *nzeros hashes, realloc()ed; the caller frees it) and not yet released.
 * Returns 0 or -errno; on failure *zeros may have grown (still owned by the caller).
 */
int ix_drop_extents(struct idx *ix, uint64_t ino, uint8_t (**zeros)[IDX_HASH_LEN],
		    size_t *nzeros);

/*
 * ix_release - for each hash in zeros[0..n): ask release(hash, arg); when it returns true,
 * delete the chunk row (only if its refs is still 0). release NULL keeps every row.
 * Returns 0 or -errno.
 */
int ix_release(struct idx *ix, uint8_t (*zeros)[IDX_HASH_LEN], size_t n, idx_release_fn release,
	       void *arg);

/*
 * ix_copy_out - copy len bytes of src into buf (cap bytes): at most cap-1 plus a NUL. buf NULL or
 * cap 0: nothing.
 */
void ix_copy_out(char *buf, size_t cap, const void *src, size_t len);

/* ix_inode_delete - idx_inode_delete without the savepoint (callers provide one). */
int ix_inode_delete(struct idx *ix, uint64_t ino, idx_release_fn release, void *arg);

#endif /* CKPTFS_INDEX_INT_H */
