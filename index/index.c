/*
 * index.c — opening, schema and migrations, the prepared-statement table, SQLite error
 * conversion and transactions of the ckptfs index. The namespace lives in index_ns.c, file
 * content and chunks in index_data.c, steps and tracker claims in index_step.c, the invariant
 * checker in index_check.c.
 *
 * Invariants (those of index.h, restated in terms of the schema below):
 *   1. inodes has a row ino = 1 whose mode is a directory.
 *   2. Every dentries.ino and dentries.parent is an inodes row, every parent a directory; a
 *      directory with nlink > 0 is named by exactly one dentry, the root by none.
 *   3. chunks.refs = number of extents rows whose hash is that chunk's (the header's
 *      "file_chunks" are the extents rows here). A chunk at refs 0 is kept only while the
 *      release callback wants it; idx_recover removes the rest.
 *   4. The extents rows of a regular file, in offset order, lie in [0, inodes.size) without
 *      overlaps; without IDX_INODE_SPARSE (flags & 8) they tile it: the first at 0, each next
 *      one where the previous ends, the last ending at size. Every extent's length is its
 *      chunk's raw_size (> 0). Only regular files have extents.
 *   5. An inode with nlink = 0 exists only while fs/ holds it open; idx_recover deletes the rest.
 *   6. steps.dir_ino is 0 or an inodes row that is a directory; the partial UNIQUE index
 *      steps_dir keeps non-zero values distinct. No foreign key (0 means none, and fs/ may delete
 *      a step's directory): ix_inode_delete zeroes the dir_ino naming the inode it deletes.
 *   7. steps.state, step_events.old_state and new_state are in [0, IDX_STEP_STATE_COUNT);
 *      steps.kind is in [0, IDX_STEP_KIND_MAX); no event leaves IDX_STEP_PRUNED. Checked in C
 *      before every write, not by CHECK constraints, so that idx_check can still report rows
 *      damaged from outside. AUTOINCREMENT keeps step, event and claim ids unique forever.
 *   8. Every multi-statement mutation runs inside SAVEPOINT ix_op: it happens whole or not at all,
 *      also inside the caller's transaction, so a failed call leaves the database as it was.
 *   9. PRAGMA user_version is the schema version. A database at version v >= 1 has
 *      meta('format') = 'ckptfs-index'; at version 0 it is empty (no schema objects at all).
 *      migrations[v] takes version v to v + 1, in its own transaction, and sets user_version.
 *      Before the first of them, a database at v >= 1 is copied whole to PATH.vV.bak.
 *  10. The deferred transaction (idx_begin_deferred) is in one of three states, ix->defer:
 *
 *        NONE --idx_begin_deferred--> IN --idx_commit_deferred / idx_rollback_deferred--> IDLE
 *        IDLE --idx_begin_deferred--> IN;   IDLE --idx_flush (COMMIT, or lost)--> NONE
 *
 *      IN and IDLE hold a write transaction begun with synchronous=NORMAL, IN also SAVEPOINT
 *      ix_defer. Only deferred changes are ever in it: idx_begin, idx_begin_lazy, idx_backup,
 *      idx_close and a mutating statement in IDLE flush first; idx_commit in IDLE flushes and
 *      idx_rollback in IDLE leaves it (neither has a transaction of its caller's to end). An
 *      inode number it handed out is never handed out again once
 *      it is lost (ix->ino_floor).
 *
 * Schema v1:
 *   meta(key TEXT PRIMARY KEY, value)                       'format' -> 'ckptfs-index'
 *   inodes(ino INTEGER PRIMARY KEY AUTOINCREMENT, mode, uid, gid, nlink, size,
 *          atime_ns, mtime_ns, ctime_ns, rdev, hash BLOB NULL, symlink BLOB NULL)
 *   dentries(cookie INTEGER PRIMARY KEY AUTOINCREMENT, parent -> inodes, name BLOB,
 *            ino -> inodes, UNIQUE(parent, name)); indexes (ino), (parent, cookie)
 *   chunks(hash BLOB PRIMARY KEY, raw_size, stored_size, codec, refs, bad, created_ns)
 *          WITHOUT ROWID
 *   extents(ino -> inodes, offset, length, hash -> chunks, PRIMARY KEY(ino, offset))
 *          WITHOUT ROWID; index (hash)
 *
 * Schema v2 (migration v1 -> v2 adds, never rewrites):
 *   inodes + flags INTEGER NOT NULL DEFAULT 0                 IDX_INODE_* bits; v1 rows get 0
 *   steps(id INTEGER PRIMARY KEY AUTOINCREMENT, kind, name BLOB, step, state, dir_ino,
 *         created_ns, sealed_ns, completed_ns, state_ns, files, logical_bytes, stored_bytes,
 *         digest BLOB NULL, pinned); UNIQUE index (dir_ino) WHERE dir_ino <> 0,
 *         indexes (kind, name), (state, step)
 *   step_events(seq INTEGER PRIMARY KEY AUTOINCREMENT, step_id -> steps, ts_ns, old_state,
 *         new_state, note BLOB NULL); index (step_id, ts_ns)
 *   claims(id INTEGER PRIMARY KEY AUTOINCREMENT, tracker BLOB, content BLOB, length, step,
 *         ts_ns)       content holds the first IDX_CLAIM_MAX bytes; length > length(content)
 *                      is the "truncated" flag
 * Schema v3 (migration v2 -> v3 adds):
 *   xattrs(id INTEGER PRIMARY KEY, ino -> inodes ON DELETE CASCADE, name BLOB, value BLOB,
 *          UNIQUE(ino, name))        extended attributes; id keeps listxattr in creation order
 * Besides, every read-write open creates two indexes if they are missing (ix_optional_indexes):
 * the partial index chunks_bad ON chunks(hash) WHERE bad <> 0, the chunks marked bad found
 * without a scan of every chunk (idx_dir_has_bad_chunk); and steps_kind_name_created ON
 * steps(kind, name, created_ns), the version of a name at a time (IX_STEP_BY_NAME_AT, once per
 * claim at every tracker read) read in order from the index instead of sorted in a temporary
 * b-tree, which SQLite opens, allocates and frees at every run of the statement. They are no
 * schema change: every query works without them (a read-only handle on a store no read-write
 * open has touched scans or sorts instead), and SQLite keeps them up to date for an older
 * ckptfs too.
 * Names and symlink targets are BLOBs: byte-exact, compared with memcmp, never UTF-8 checked.
 * So are step names, tracker paths, claim contents and event notes.
 * AUTOINCREMENT makes inode numbers and readdir cookies never reused.
 *
 * Details index.h leaves open, decided here:
 *   - every mutating call on an IDX_RDONLY handle returns -EROFS (idx_begin included);
 *   - foreign keys are on: idx_inode_delete of an inode still named by a dentry, or holding
 *     entries, and idx_dentry_add naming a missing inode or parent, fail the constraint: -EEXIST
 *     per the conversion table; idx_inode_delete(IDX_ROOT_INO) is -EBUSY (invariant 1);
 *   - idx_file_set_content: hash NULL records no digest; a non-regular inode, or an extent whose
 *     chunk is known with another raw size, is -EINVAL; stored_size and codec of a known chunk
 *     stay as first recorded;
 *   - release NULL keeps every chunk row at refs 0 (idx_recover removes them later);
 *   - idx_recover releases each refs-0 chunk once, including those of the inodes it deletes, and
 *     skips an nlink-0 inode that is still named or still has entries (idx_check's business);
 *   - idx_path returns -ELOOP after IX_MAX_DEPTH dentries (a cycle), -ENOMEM;
 *   - callbacks (idx_dir_list, idx_chunk_foreach, idx_chunk_users, release) may call other idx_*
 *     functions on the handle, but not the walking function itself, and must not modify the
 *     rows being walked; idx_step_foreach reads all steps before its first callback, so its
 *     callback may do anything (retention prunes from inside it);
 *   - idx_inode_create/update refuse flags outside IDX_INODE_FLAGS_ALL, and MALFORMED with VALID;
 *   - step names and tracker paths are stored up to their first NUL, byte-exact; a step name is
 *     1..IDX_STEP_NAME_MAX bytes; idx_step_by_name of a name or kind no step can have is -ENOENT;
 *   - idx_step_set_state to the state the step already has appends the event, changes no time;
 *   - idx_step_create and idx_step_set_dir check that a non-zero dir_ino is a directory
 *     (-ENOENT, -ENOTDIR) and let the UNIQUE index refuse a second step on it (-EEXIST).
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "index/index_int.h"

#define IX_BUSY_TIMEOUT_MS 5000
/* WAL frames after which idx_checkpoint copies the WAL into the database: SQLite's own
 * autocheckpoint threshold (SQLITE_DEFAULT_WAL_AUTOCHECKPOINT, sqlite.org/wal.html#ckpt). */
#define IX_WAL_CHECKPOINT 1000
/* WAL frames after which a commit checkpoints inline anyway, when idx_checkpoint is not called
 * (a store changed by namespace operations alone): 64 MiB of 4 KiB pages. */
#define IX_WAL_BACKSTOP 16384
#define IX_CACHE_KIB "-65536" /* PRAGMA cache_size: negative = KiB, here 64 MiB */

/* literals in the steps SQL below: states 1 (sealed), 2 (complete), 3 (pruned), 4 (incomplete),
 * 5 (corrupt), 0..6, kinds 0..31 */
_Static_assert(IDX_STEP_WRITING == 0 && IDX_STEP_SEALED == 1 && IDX_STEP_COMPLETE == 2 &&
		       IDX_STEP_PRUNED == 3 && IDX_STEP_INCOMPLETE == 4 && IDX_STEP_CORRUPT == 5 &&
		       IDX_STEP_COPIED == 6 && IDX_STEP_STATE_COUNT == 7 &&
		       IDX_STEP_KIND_MAX == 32,
	       "step states or kinds differ from the literals used in the SQL");

/* the columns of a step row, in the order ix_step_row (index_step.c) reads them */
#define IX_STEP_COLS                                                                          \
	"id, kind, name, step, state, dir_ino, created_ns, sealed_ns, completed_ns, state_ns, " \
	"files, logical_bytes, stored_bytes, digest, pinned"

_Static_assert(S_IFMT == IX_S_IFMT && S_IFREG == IX_S_IFREG && S_IFDIR == IX_S_IFDIR &&
		       S_IFLNK == IX_S_IFLNK,
	       "file type bits differ from the literals used in the SQL");

/* Every statement of the module, prepared once per connection by idx_open. */
/* two more columns of IX_STATS_CHUNKS: chunks stored as codec c and their stored bytes; the
 * statement lists codecs 0..7 */
_Static_assert(IDX_STATS_CODECS == 8, "IX_STATS_CHUNKS has STATS_CODEC(0..7)");
#define STATS_CODEC(c)                                                                 \
	", coalesce(sum(codec = " #c "), 0), "                                             \
	"coalesce(sum(CASE WHEN codec = " #c " THEN stored_size ELSE 0 END), 0)"

static const char *const ix_sql[IX__COUNT] = {
	[IX_BEGIN] = "BEGIN IMMEDIATE",
	[IX_BEGIN_READ] = "BEGIN DEFERRED",
	[IX_COMMIT] = "COMMIT",
	[IX_ROLLBACK] = "ROLLBACK",
	[IX_SP_BEGIN] = "SAVEPOINT ix_op",
	[IX_SP_ROLLBACK] = "ROLLBACK TO ix_op",
	[IX_SP_RELEASE] = "RELEASE ix_op",
	[IX_DEF_BEGIN] = "SAVEPOINT ix_defer",
	[IX_DEF_ROLLBACK] = "ROLLBACK TO ix_defer",
	[IX_DEF_RELEASE] = "RELEASE ix_defer",

	[IX_INODE_GET] = "SELECT mode, uid, gid, nlink, size, atime_ns, mtime_ns, ctime_ns, rdev, "
			 "hash, flags FROM inodes WHERE ino = ?1",
	[IX_INODE_CREATE] = "INSERT INTO inodes(mode, uid, gid, nlink, size, atime_ns, mtime_ns, "
			    "ctime_ns, rdev, hash, flags) "
			    "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
	[IX_INODE_UPDATE] = "UPDATE inodes SET mode = ?2, uid = ?3, gid = ?4, nlink = ?5, "
			    "size = ?6, atime_ns = ?7, mtime_ns = ?8, ctime_ns = ?9, rdev = ?10, "
			    "hash = ?11, flags = (?12 & ~8) | (flags & 8) WHERE ino = ?1",
	[IX_INODE_DELETE] = "DELETE FROM inodes WHERE ino = ?1",
	[IX_INODE_SET_CONTENT] = "UPDATE inodes SET size = ?2, hash = ?3, mtime_ns = ?4, "
				 "ctime_ns = max(ctime_ns, ?4), flags = (flags & ~8) | ?5 WHERE ino = ?1",
	[IX_INODE_MODE] = "SELECT mode FROM inodes WHERE ino = ?1",
	[IX_SYMLINK_SET] = "UPDATE inodes SET symlink = ?2 WHERE ino = ?1",
	[IX_SYMLINK_GET] = "SELECT symlink FROM inodes WHERE ino = ?1 AND symlink IS NOT NULL",

	[IX_DENTRY_LOOKUP] = "SELECT ino FROM dentries WHERE parent = ?1 AND name = ?2",
	[IX_DENTRY_ADD] = "INSERT INTO dentries(parent, name, ino) VALUES(?1, ?2, ?3)",
	[IX_DENTRY_REMOVE] = "DELETE FROM dentries WHERE parent = ?1 AND name = ?2",
	[IX_DENTRY_MOVE] = "UPDATE dentries SET parent = ?3, name = ?4 "
			   "WHERE parent = ?1 AND name = ?2",
	[IX_DENTRY_PARENT] = "SELECT parent, name FROM dentries WHERE ino = ?1 "
			     "ORDER BY cookie LIMIT 1",
	[IX_DIR_EMPTY] = "SELECT 1 FROM dentries WHERE parent = ?1 LIMIT 1",
	[IX_DIR_LIST] = "SELECT d.name, d.ino, i.mode, d.cookie FROM dentries d "
			"CROSS JOIN inodes i ON i.ino = d.ino "
			"WHERE d.parent = ?1 AND d.cookie > ?2 ORDER BY d.cookie",

	[IX_EXT_LIST] = "SELECT e.offset, e.length, e.hash, c.stored_size, c.codec FROM extents e "
			"LEFT JOIN chunks c ON c.hash = e.hash WHERE e.ino = ?1 ORDER BY e.offset",
	/* one UPDATE for the whole file: a chunk named k times loses exactly k references */
	[IX_EXT_DECREF] = "UPDATE chunks SET refs = refs - (SELECT count(*) FROM extents e "
			  "WHERE e.hash = chunks.hash AND e.ino = ?1) "
			  "WHERE hash IN (SELECT hash FROM extents WHERE ino = ?1)",
	[IX_EXT_ZEROS] = "SELECT hash FROM chunks WHERE refs = 0 "
			 "AND hash IN (SELECT hash FROM extents WHERE ino = ?1)",
	/* before the three above, which SQLite 3.40 runs with a temporary table each: a file
	 * committed for the first time has no extents to drop */
	[IX_EXT_ANY] = "SELECT 1 FROM extents WHERE ino = ?1 LIMIT 1",
	[IX_EXT_DELETE] = "DELETE FROM extents WHERE ino = ?1",
	[IX_EXT_INSERT] = "INSERT INTO extents(ino, offset, length, hash) VALUES(?1, ?2, ?3, ?4)",
	/* no row changed (sqlite3_changes() = 0): a known chunk with another raw size */
	[IX_CHUNK_UPSERT] = "INSERT INTO chunks(hash, raw_size, stored_size, codec, refs, bad, "
			    "created_ns) VALUES(?1, ?2, ?3, ?4, 1, 0, ?5) "
			    "ON CONFLICT(hash) DO UPDATE SET refs = refs + 1 "
			    "WHERE raw_size = excluded.raw_size",
	[IX_CHUNK_DELETE_ZERO] = "DELETE FROM chunks WHERE hash = ?1 AND refs = 0",
	[IX_CHUNK_EXISTS] = "SELECT 1 FROM chunks WHERE hash = ?1",
	[IX_CHUNK_SET_BAD] = "UPDATE chunks SET bad = ?2 WHERE hash = ?1",
	[IX_CHUNK_IS_BAD] = "SELECT bad <> 0 FROM chunks WHERE hash = ?1",
	/* a probe of chunks_bad, a tenth of what IX_DIR_HAS_BAD_CHUNK's recursion costs when no
	 * chunk is marked bad (tests/bench/RESULTS.md, "A tracker read no longer walks") */
	[IX_ANY_BAD_CHUNK] = "SELECT EXISTS(SELECT 1 FROM chunks WHERE bad <> 0)",
	/* from the users of every chunk marked bad (chunks_bad, extents_hash) up through every
	 * dentry of each (dentries_ino) to the root; UNION ends even on a cycle */
	[IX_DIR_HAS_BAD_CHUNK] = "WITH RECURSIVE up(ino) AS ("
				 "SELECT e.ino FROM chunks c JOIN extents e ON e.hash = c.hash "
				 "WHERE c.bad <> 0 "
				 "UNION SELECT d.parent FROM dentries d JOIN up ON d.ino = up.ino) "
				 "SELECT EXISTS(SELECT 1 FROM up WHERE ino = ?1)",
	[IX_CHUNK_SET_STORED] = "UPDATE chunks SET codec = ?2, stored_size = ?3 WHERE hash = ?1",
	[IX_CHUNK_WITH_CODEC] = "SELECT hash FROM chunks WHERE codec = ?1 AND bad = 0 LIMIT ?2",
	[IX_CHUNK_FOREACH] = "SELECT hash, raw_size, stored_size, codec, refs, bad FROM chunks "
			     "ORDER BY hash",
	[IX_CHUNK_USERS] = "SELECT ino, offset FROM extents WHERE hash = ?1 ORDER BY ino, offset",
	[IX_STORED_BYTES] = "SELECT c.stored_size, c.refs, count(*) FROM extents e "
			    "CROSS JOIN chunks c ON c.hash = e.hash WHERE e.ino = ?1 "
			    "GROUP BY e.hash",
	[IX_STATS_INODES] = "SELECT coalesce(sum((mode & 61440) = 32768), 0), "
			    "coalesce(sum((mode & 61440) = 16384), 0), "
			    "coalesce(sum((mode & 61440) = 40960), 0), "
			    "coalesce(sum(CASE WHEN (mode & 61440) = 32768 THEN size ELSE 0 END), "
			    "0) "
			    "FROM inodes WHERE nlink > 0", /* unlinked-but-open files are not counted */
	/* one scan: totals, then chunks and stored bytes of codecs 0..IDX_STATS_CODECS-1 */
	[IX_STATS_CHUNKS] = "SELECT count(*), coalesce(sum(raw_size), 0), "
			    "coalesce(sum(stored_size), 0), coalesce(sum(bad <> 0), 0)"
			    STATS_CODEC(0) STATS_CODEC(1) STATS_CODEC(2) STATS_CODEC(3)
			    STATS_CODEC(4) STATS_CODEC(5) STATS_CODEC(6) STATS_CODEC(7)
			    " FROM chunks",
	/* changes committed by other connections (sqlite.org/pragma.html#pragma_data_version) */
	[IX_DATA_VERSION] = "PRAGMA data_version",
	/* an nlink-0 inode still named or still holding entries is left to idx_check */
	/* regular files whose content was never committed (no digest): not durable, so absent */
	[IX_RECOVER_UNCOMMITTED_DENTRIES] = "DELETE FROM dentries WHERE ino IN (SELECT ino FROM "
					    "inodes WHERE (mode & 61440) = 32768 AND hash IS NULL)",
	[IX_RECOVER_UNCOMMITTED_INODES] = "UPDATE inodes SET nlink = 0 "
					  "WHERE (mode & 61440) = 32768 AND hash IS NULL",
	[IX_RECOVER_INODES] = "SELECT ino FROM inodes i WHERE nlink = 0 AND ino <> 1 "
			      "AND NOT EXISTS (SELECT 1 FROM dentries d WHERE d.ino = i.ino) "
			      "AND NOT EXISTS (SELECT 1 FROM dentries d WHERE d.parent = i.ino) "
			      "ORDER BY ino",
	[IX_RECOVER_CHUNKS] = "SELECT hash FROM chunks WHERE refs = 0 ORDER BY hash",

	/* "AND dir_ino <> 0" lets SQLite use the partial index steps_dir */
	[IX_INODE_STEP_UNDIR] = "UPDATE steps SET dir_ino = 0 WHERE dir_ino = ?1 AND dir_ino <> 0",
	[IX_STEP_CREATE] = "INSERT INTO steps(kind, name, step, state, dir_ino, created_ns, "
			   "state_ns) VALUES(?1, ?2, ?3, 0, ?4, ?5, ?5)",
	[IX_STEP_GET] = "SELECT " IX_STEP_COLS " FROM steps WHERE id = ?1",
	[IX_STEP_BY_DIR] = "SELECT " IX_STEP_COLS " FROM steps WHERE dir_ino = ?1 AND dir_ino <> 0",
	[IX_STEP_BY_NAME] = "SELECT " IX_STEP_COLS " FROM steps WHERE kind = ?1 AND name = ?2 "
			    "AND state <> 3 ORDER BY id DESC LIMIT 1",
	/* steps_kind_name_created gives the rows of one name newest first: no sort. States 3, 4,
	 * 5: pruned, incomplete, corrupt (the rows that leave the name); BETWEEN, not IN (...),
	 * which SQLite 3.40 evaluates with a temporary table built at every run */
	[IX_STEP_BY_NAME_AT] = "SELECT " IX_STEP_COLS " FROM steps WHERE kind = ?1 AND name = ?2 "
			       "AND created_ns <= ?3 AND NOT (state BETWEEN 3 AND 5 AND "
			       "state_ns <= ?3) ORDER BY created_ns DESC, id DESC LIMIT 1",
	[IX_STEP_STATE_OF] = "SELECT state FROM steps WHERE id = ?1",
	/* the right-hand sides see the old row: "state <> ?2" means the state changes */
	[IX_STEP_SET_STATE] = "UPDATE steps SET state = ?2, "
			      "state_ns = CASE WHEN state <> ?2 THEN ?3 ELSE state_ns END, "
			      "sealed_ns = CASE WHEN state <> ?2 AND ?2 = 1 THEN ?3 "
			      "ELSE sealed_ns END, "
			      "completed_ns = CASE WHEN state <> ?2 AND ?2 = 2 THEN ?3 "
			      "ELSE completed_ns END WHERE id = ?1",
	[IX_STEP_EVENT_ADD] = "INSERT INTO step_events(step_id, ts_ns, old_state, new_state, note) "
			      "VALUES(?1, ?2, ?3, ?4, ?5)",
	[IX_STEP_SET_DIR] = "UPDATE steps SET dir_ino = ?2 WHERE id = ?1",
	[IX_STEP_SET_NUMBER] = "UPDATE steps SET step = ?2 WHERE id = ?1",
	[IX_STEP_SET_NAME] = "UPDATE steps SET name = ?2 WHERE id = ?1",
	[IX_STEP_SET_KIND] = "UPDATE steps SET kind = ?2 WHERE id = ?1",
	[IX_STEP_SET_FIGURES] = "UPDATE steps SET files = ?2, logical_bytes = ?3, "
				"stored_bytes = ?4, digest = ?5 WHERE id = ?1",
	[IX_STEP_SET_PINNED] = "UPDATE steps SET pinned = ?2 WHERE id = ?1",
	[IX_STEP_ALL] = "SELECT " IX_STEP_COLS " FROM steps ORDER BY step, id",
	/* ?2: kind mask, bit (1 << kind); 0 = any kind */
	[IX_STEP_NEWEST] = "SELECT " IX_STEP_COLS " FROM steps WHERE state = ?1 "
			   "AND (?2 = 0 OR ((?2 >> kind) & 1) <> 0) "
			   "ORDER BY step DESC, id DESC LIMIT 1",
	/* idx_step_newest_each: the next page below (?3 step, ?4 id), on steps_state_step */
	[IX_STEP_NEWEST_PAGE] = "SELECT " IX_STEP_COLS " FROM steps WHERE state = ?1 "
				"AND (?2 = 0 OR ((?2 >> kind) & 1) <> 0) "
				"AND (step < ?3 OR (step = ?3 AND id < ?4)) "
				"ORDER BY step DESC, id DESC LIMIT ?5",
	/* idx_step_newest_each: is there a step of kind ?1 at all (steps_kind_name) */
	[IX_STEP_KIND_ANY] = "SELECT 1 FROM steps WHERE kind = ?1 LIMIT 1",
	[IX_STEP_EVENTS] = "SELECT ts_ns, old_state, new_state, note FROM step_events "
			   "WHERE step_id = ?1 ORDER BY ts_ns, seq",
	[IX_CLAIM_ADD] = "INSERT INTO claims(tracker, content, length, step, ts_ns) "
			 "VALUES(?1, ?2, ?3, ?4, ?5)",
	[IX_CLAIM_ALL] = "SELECT id, tracker, content, step, ts_ns FROM claims ORDER BY id",
	[IX_CLAIM_LENGTH] = "SELECT length FROM claims WHERE id = ?1",
	[IX_CLAIM_NEWEST] = "SELECT id, tracker, step, ts_ns FROM claims ORDER BY id DESC",

	[IX_XATTR_GET] = "SELECT value FROM xattrs WHERE ino = ?1 AND name = ?2",
	[IX_XATTR_LIST] = "SELECT name FROM xattrs WHERE ino = ?1 ORDER BY id",
	[IX_XATTR_INSERT] = "INSERT OR IGNORE INTO xattrs(ino, name, value) VALUES(?1, ?2, ?3)",
	[IX_XATTR_UPDATE] = "UPDATE xattrs SET value = ?3 WHERE ino = ?1 AND name = ?2",
	[IX_XATTR_DELETE] = "DELETE FROM xattrs WHERE ino = ?1 AND name = ?2",

	[IX_CHECK_ROOT] = "SELECT mode FROM inodes WHERE ino = 1",
	[IX_CHECK_DENTRY_INO] = "SELECT d.parent, d.name, d.ino FROM dentries d WHERE NOT EXISTS "
				"(SELECT 1 FROM inodes i WHERE i.ino = d.ino) LIMIT 1",
	[IX_CHECK_DENTRY_PARENT] = "SELECT d.parent, d.name FROM dentries d "
				   "LEFT JOIN inodes i ON i.ino = d.parent "
				   "WHERE i.ino IS NULL OR (i.mode & 61440) <> 16384 LIMIT 1",
	[IX_CHECK_DIR_LINKS] = "SELECT i.ino, (SELECT count(*) FROM dentries d "
			       "WHERE d.ino = i.ino) AS n FROM inodes i "
			       "WHERE (i.mode & 61440) = 16384 AND (i.nlink > 0 OR i.ino = 1) "
			       "AND n <> (i.ino <> 1) LIMIT 1",
	[IX_CHECK_REFS] = "SELECT c.hash, c.refs, (SELECT count(*) FROM extents e "
			  "WHERE e.hash = c.hash) AS n FROM chunks c WHERE c.refs <> n LIMIT 1",
	[IX_CHECK_EXT_CHUNK] = "SELECT e.ino, e.offset FROM extents e WHERE NOT EXISTS "
			       "(SELECT 1 FROM chunks c WHERE c.hash = e.hash) LIMIT 1",
	[IX_CHECK_EXT_OWNER] = "SELECT e.ino FROM extents e LEFT JOIN inodes i ON i.ino = e.ino "
			       "WHERE i.ino IS NULL OR (i.mode & 61440) <> 32768 LIMIT 1",
	[IX_CHECK_EXT_LENGTH] = "SELECT e.ino, e.offset, e.length, c.raw_size FROM extents e "
				"CROSS JOIN chunks c ON c.hash = e.hash "
				"WHERE e.length <> c.raw_size OR e.length <= 0 LIMIT 1",
	[IX_CHECK_TILE_GAP] = "SELECT x.ino, x.offset, x.expect FROM (SELECT ino, offset, "
			      "lag(offset + length, 1, 0) OVER (PARTITION BY ino ORDER BY offset) "
			      "AS expect FROM extents) x JOIN inodes i ON i.ino = x.ino "
			      "WHERE CASE WHEN i.flags & 8 THEN x.offset < x.expect "
			      "ELSE x.offset <> x.expect END LIMIT 1",
	[IX_CHECK_TILE_SIZE] = "SELECT i.ino, i.size, CASE WHEN i.flags & 8 THEN "
			       "coalesce((SELECT max(e.offset + e.length) FROM extents e "
			       "WHERE e.ino = i.ino), 0) ELSE coalesce((SELECT sum(e.length) "
			       "FROM extents e WHERE e.ino = i.ino), 0) END AS total FROM inodes i "
			       "WHERE (i.mode & 61440) = 32768 AND CASE WHEN i.flags & 8 THEN "
			       "total > i.size ELSE total <> i.size END LIMIT 1",
	[IX_CHECK_STEP_DIR] = "SELECT s.id, s.dir_ino, i.ino IS NULL FROM steps s "
			      "LEFT JOIN inodes i ON i.ino = s.dir_ino WHERE s.dir_ino <> 0 "
			      "AND (i.ino IS NULL OR (i.mode & 61440) <> 16384) LIMIT 1",
	[IX_CHECK_STEP_STATE] = "SELECT id, state, kind FROM steps WHERE state NOT BETWEEN 0 AND 6 "
				"OR kind NOT BETWEEN 0 AND 31 LIMIT 1",
	[IX_CHECK_EVENT_STATE] = "SELECT step_id, old_state, new_state FROM step_events "
				 "WHERE old_state NOT BETWEEN 0 AND 6 OR new_state NOT BETWEEN 0 AND 6 "
				 "OR (old_state = 3 AND new_state <> 3) LIMIT 1",
};

/* ---- migrations ---- */

struct ix_create_args {
	uint32_t uid, gid;
	int64_t now_ns;
};

struct ix_migration {
	/* run with sqlite3_exec inside the migration's transaction; ends by setting user_version */
	const char *sql;
	/* optional, after sql, same transaction: values that need binding. Returns 0 or -errno. */
	int (*fixup)(struct idx *ix, const struct ix_create_args *a);
};

static int ix_create_root(struct idx *ix, const struct ix_create_args *a);

/* v0 -> v1: create the schema (see the top of this file) and the root directory. */
static const char ix_schema_v1[] =
	"CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
	"INSERT INTO meta(key, value) VALUES('format', '" IX_FORMAT "');"
	"CREATE TABLE inodes("
	" ino INTEGER PRIMARY KEY AUTOINCREMENT,"
	" mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL,"
	" nlink INTEGER NOT NULL, size INTEGER NOT NULL,"
	" atime_ns INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL,"
	" rdev INTEGER NOT NULL DEFAULT 0,"
	" hash BLOB, symlink BLOB);"
	"CREATE TABLE dentries("
	" cookie INTEGER PRIMARY KEY AUTOINCREMENT,"
	" parent INTEGER NOT NULL REFERENCES inodes(ino),"
	" name BLOB NOT NULL,"
	" ino INTEGER NOT NULL REFERENCES inodes(ino),"
	" UNIQUE(parent, name));"
	"CREATE INDEX dentries_ino ON dentries(ino);"
	"CREATE INDEX dentries_parent_cookie ON dentries(parent, cookie);"
	"CREATE TABLE chunks("
	" hash BLOB PRIMARY KEY,"
	" raw_size INTEGER NOT NULL, stored_size INTEGER NOT NULL, codec INTEGER NOT NULL,"
	" refs INTEGER NOT NULL, bad INTEGER NOT NULL DEFAULT 0, created_ns INTEGER NOT NULL"
	") WITHOUT ROWID;"
	"CREATE TABLE extents("
	" ino INTEGER NOT NULL REFERENCES inodes(ino),"
	" offset INTEGER NOT NULL, length INTEGER NOT NULL,"
	" hash BLOB NOT NULL REFERENCES chunks(hash),"
	" PRIMARY KEY(ino, offset)) WITHOUT ROWID;"
	"CREATE INDEX extents_hash ON extents(hash);"
	"PRAGMA user_version = 1;";

/*
 * v1 -> v2: inode flags; steps, their state history, tracker claims (see the top of this file).
 * Only adds: every v1 row stays as it was, inodes get flags 0.
 */
static const char ix_schema_v2[] =
	"ALTER TABLE inodes ADD COLUMN flags INTEGER NOT NULL DEFAULT 0;"
	"CREATE TABLE steps("
	" id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" kind INTEGER NOT NULL, name BLOB NOT NULL, step INTEGER NOT NULL,"
	" state INTEGER NOT NULL, dir_ino INTEGER NOT NULL DEFAULT 0,"
	" created_ns INTEGER NOT NULL, sealed_ns INTEGER NOT NULL DEFAULT 0,"
	" completed_ns INTEGER NOT NULL DEFAULT 0, state_ns INTEGER NOT NULL,"
	" files INTEGER NOT NULL DEFAULT 0, logical_bytes INTEGER NOT NULL DEFAULT 0,"
	" stored_bytes INTEGER NOT NULL DEFAULT 0,"
	" digest BLOB, pinned INTEGER NOT NULL DEFAULT 0);"
	"CREATE UNIQUE INDEX steps_dir ON steps(dir_ino) WHERE dir_ino <> 0;"
	"CREATE INDEX steps_kind_name ON steps(kind, name);"
	"CREATE INDEX steps_state_step ON steps(state, step);"
	"CREATE TABLE step_events("
	" seq INTEGER PRIMARY KEY AUTOINCREMENT,"
	" step_id INTEGER NOT NULL REFERENCES steps(id),"
	" ts_ns INTEGER NOT NULL, old_state INTEGER NOT NULL, new_state INTEGER NOT NULL,"
	" note BLOB);"
	"CREATE INDEX step_events_step ON step_events(step_id, ts_ns);"
	"CREATE TABLE claims("
	" id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" tracker BLOB NOT NULL, content BLOB NOT NULL, length INTEGER NOT NULL,"
	" step INTEGER NOT NULL, ts_ns INTEGER NOT NULL);"
	"PRAGMA user_version = 2;";

/*
 * v2 -> v3: extended attributes (see the top of this file). Only adds. Rows go with their inode
 * (ON DELETE CASCADE).
 */
static const char ix_schema_v3[] =
	"CREATE TABLE xattrs("
	" id INTEGER PRIMARY KEY,"
	" ino INTEGER NOT NULL REFERENCES inodes(ino) ON DELETE CASCADE,"
	" name BLOB NOT NULL, value BLOB NOT NULL,"
	" UNIQUE(ino, name));"
	"PRAGMA user_version = 3;";

/* Indexes that speed queries up and change no result, created at every read-write open (see
 * the schema above) */
static const char ix_optional_indexes[] =
	"CREATE INDEX IF NOT EXISTS chunks_bad ON chunks(hash) WHERE bad <> 0;"
	"CREATE INDEX IF NOT EXISTS steps_kind_name_created ON steps(kind, name, created_ns);";

/* migrations[v] upgrades a database at user_version v to v + 1 (invariant 9). */
static const struct ix_migration migrations[] = {
	{ ix_schema_v1, ix_create_root },
	{ ix_schema_v2, NULL },
	{ ix_schema_v3, NULL },
};

_Static_assert(IX_ARRAY_SIZE(migrations) == IDX_SCHEMA_VERSION,
	       "one migration per schema version");

/* ---- error conversion and statement helpers ---- */

int ix_err(struct idx *ix, int rc)
{
	int e;

	switch (rc & 0xff) {
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		return -EIO;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_READONLY:
		return -EROFS;
	case SQLITE_CANTOPEN:
		e = ix && ix->db ? sqlite3_system_errno(ix->db) : 0;
		return (e == EACCES || e == EPERM) ? -EACCES : -ENOENT;
	case SQLITE_CONSTRAINT:
		return -EEXIST;
	default:
		return -EIO;
	}
}

void ix_done(sqlite3_stmt *st)
{
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
}

/* st is one of the transaction statements, which must never open a held read transaction */
static bool ix_is_txn_stmt(const struct idx *ix, const sqlite3_stmt *st)
{
	return st == ix->st[IX_BEGIN] || st == ix->st[IX_BEGIN_READ] || st == ix->st[IX_COMMIT] ||
	       st == ix->st[IX_ROLLBACK] || st == ix->st[IX_SP_BEGIN] ||
	       st == ix->st[IX_SP_ROLLBACK] || st == ix->st[IX_SP_RELEASE] ||
	       st == ix->st[IX_DEF_BEGIN] || st == ix->st[IX_DEF_ROLLBACK] ||
	       st == ix->st[IX_DEF_RELEASE];
}

/*
 * Open the held read transaction (idx_hold) before a read statement that would otherwise run in
 * a transaction of its own. Failure is not an error: the statement then runs on its own.
 */
static void ix_read_open(struct idx *ix, sqlite3_stmt *st)
{
	sqlite3_stmt *b = ix->st[IX_BEGIN_READ];

	if (!ix->hold || ix->in_read || !sqlite3_get_autocommit(ix->db) ||
	    ix_is_txn_stmt(ix, st) || !sqlite3_stmt_readonly(st) || sqlite3_stmt_busy(st))
		return;
	ix->in_read = sqlite3_step(b) == SQLITE_DONE;
	sqlite3_reset(b);
}

/* End the held read transaction, if one is open. It read only: nothing to lose if COMMIT fails. */
static void ix_read_close(struct idx *ix)
{
	if (!ix->in_read)
		return;
	ix->in_read = false;
	if (sqlite3_get_autocommit(ix->db))
		return;
	if (ix_run(ix, ix_stmt(ix, IX_COMMIT)) < 0 && !sqlite3_get_autocommit(ix->db))
		ix_run(ix, ix_stmt(ix, IX_ROLLBACK));
}

int ix_step(struct idx *ix, sqlite3_stmt *st)
{
	int rc;

	/* a change outside any caller's transaction (index.h forbids it) must not join the
	 * deferred one: commit that first, so the change commits on its own as before */
	if (ix->defer == IX_DEFER_IDLE &&
	    (st == ix->st[IX_SP_BEGIN] || (!ix_is_txn_stmt(ix, st) && !sqlite3_stmt_readonly(st))) &&
	    (rc = idx_flush(ix)) < 0)
		return rc;
	if (ix->hold)
		ix_read_open(ix, st);
	rc = sqlite3_step(st);

	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE)
		return 0;
	return ix_err(ix, rc);
}

int ix_run(struct idx *ix, sqlite3_stmt *st)
{
	int r = ix_step(ix, st);

	ix_done(st);
	if (r > 0)
		return -EIO; /* a statement that should not return rows did */
	return r;
}

int ix_bind_i64(struct idx *ix, sqlite3_stmt *st, int col, int64_t v)
{
	int rc = sqlite3_bind_int64(st, col, v);

	return rc == SQLITE_OK ? 0 : ix_err(ix, rc);
}

int ix_bind_hash(struct idx *ix, sqlite3_stmt *st, int col, const uint8_t hash[IDX_HASH_LEN])
{
	int rc = sqlite3_bind_blob(st, col, hash, IDX_HASH_LEN, SQLITE_STATIC);

	return rc == SQLITE_OK ? 0 : ix_err(ix, rc);
}

int ix_bind_name(struct idx *ix, sqlite3_stmt *st, int col, const char *name)
{
	size_t len = strlen(name);
	int rc;

	if (len > INT32_MAX)
		return -ENAMETOOLONG;
	/* a zero-length blob bound with a non-NULL pointer is '' (x''), never NULL */
	rc = sqlite3_bind_blob(st, col, name, (int)len, SQLITE_STATIC);
	return rc == SQLITE_OK ? 0 : ix_err(ix, rc);
}

static int ix_bind_va(struct idx *ix, sqlite3_stmt *st, const char *fmt, va_list ap)
{
	const uint8_t *hash;
	int col, r = 0;

	for (col = 1; r == 0 && fmt[col - 1]; col++) {
		switch (fmt[col - 1]) {
		case 'i':
			r = ix_bind_i64(ix, st, col, va_arg(ap, int64_t));
			break;
		case 'n':
			r = ix_bind_name(ix, st, col, va_arg(ap, const char *));
			break;
		case 'h':
			hash = va_arg(ap, const uint8_t *);
			if (hash)
				r = ix_bind_hash(ix, st, col, hash);
			break;
		default:
			assert(!"ix_update: unknown parameter letter");
			r = -EINVAL;
		}
	}
	return r;
}

int ix_update(struct idx *ix, enum ix_stmt id, int absent, const char *fmt, ...)
{
	sqlite3_stmt *st = ix_stmt(ix, id);
	va_list ap;
	int r;

	if (ix->rdonly)
		return -EROFS;
	va_start(ap, fmt);
	r = ix_bind_va(ix, st, fmt, ap);
	va_end(ap);
	if (r < 0) {
		ix_done(st);
		return r;
	}
	if ((r = ix_run(ix, st)) < 0)
		return r;
	return sqlite3_changes(ix->db) ? 0 : absent;
}

static int ix_row_va(struct idx *ix, enum ix_stmt id, sqlite3_stmt **ret_st, const char *fmt,
		     va_list ap)
{
	sqlite3_stmt *st = ix_stmt(ix, id);
	int r = ix_bind_va(ix, st, fmt, ap);

	if (r == 0)
		r = ix_step(ix, st);
	if (r <= 0) {
		ix_done(st);
		return r == 0 ? -ENOENT : r;
	}
	*ret_st = st;
	return 0;
}

int ix_row(struct idx *ix, enum ix_stmt id, sqlite3_stmt **ret_st, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = ix_row_va(ix, id, ret_st, fmt, ap);
	va_end(ap);
	return r;
}

int ix_scalar(struct idx *ix, enum ix_stmt id, int64_t *ret, const char *fmt, ...)
{
	sqlite3_stmt *st;
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = ix_row_va(ix, id, &st, fmt, ap);
	va_end(ap);
	if (r < 0)
		return r;
	*ret = sqlite3_column_int64(st, 0);
	ix_done(st);
	return 0;
}

int ix_column_hash(sqlite3_stmt *st, int col, uint8_t out[IDX_HASH_LEN])
{
	const void *p = sqlite3_column_blob(st, col);

	if (!p || sqlite3_column_bytes(st, col) != IDX_HASH_LEN)
		return -EIO;
	memcpy(out, p, IDX_HASH_LEN);
	return 0;
}

int ix_sp_begin(struct idx *ix)
{
	return ix_run(ix, ix_stmt(ix, IX_SP_BEGIN));
}

int ix_sp_end(struct idx *ix, int r)
{
	if (r >= 0) {
		int rc = ix_run(ix, ix_stmt(ix, IX_SP_RELEASE));

		if (rc == 0)
			return r;
		r = rc;
	}
	ix_run(ix, ix_stmt(ix, IX_SP_ROLLBACK));
	ix_run(ix, ix_stmt(ix, IX_SP_RELEASE));
	return r;
}

/* ---- opening ---- */

/* ix_exec_const - run constant SQL text (no values) once. Returns 0 or -errno. */
static int ix_exec_const(struct idx *ix, const char *sql)
{
	int rc = sqlite3_exec(ix->db, sql, NULL, NULL, NULL);

	return rc == SQLITE_OK ? 0 : ix_err(ix, rc);
}

/*
 * ix_query_i64 - first column of the first row of constant SQL text; *ret untouched when there is
 * no row. Returns 1 (row), 0 (no row), -EPROTO (the SQL does not fit the schema), or -errno.
 */
static int ix_query_i64(struct idx *ix, const char *sql, int64_t *ret)
{
	sqlite3_stmt *st = NULL;
	int rc, r;

	rc = sqlite3_prepare_v2(ix->db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return (rc & 0xff) == SQLITE_ERROR ? -EPROTO : ix_err(ix, rc);
	r = ix_step(ix, st);
	if (r > 0)
		*ret = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return r;
}

/*
 * ix_damaged_or_foreign - the format row is missing or unreadable: a database SQLite finds
 * whole (idx_integrity, quick_check) is another program's (-EPROTO); one whose b-trees are not
 * whole is a damaged ckptfs index (-EIO), which fsck can salvage. A page of garbage in the meta
 * table can read back as rows without SQLite reporting SQLITE_CORRUPT, hence the check.
 */
static int ix_damaged_or_foreign(struct idx *ix)
{
	return idx_integrity(ix, true, NULL, 0) == 0 ? -EPROTO : -EIO;
}

/*
 * ix_probe - read the schema version and check the database is a ckptfs index (invariant 9).
 * Returns 0 and the version in *ret_version, -EPROTO (newer, or foreign), -EIO (a ckptfs index
 * whose format row is unreadable: damaged), or -errno.
 */
static int ix_probe(struct idx *ix, int64_t *ret_version)
{
	int64_t version = 0, n = 0;
	int r;

	r = ix_query_i64(ix, "PRAGMA user_version", &version);
	if (r < 0)
		return r;
	if (version < 0 || version > IDX_SCHEMA_VERSION)
		return -EPROTO;
	if (version == 0) {
		r = ix_query_i64(ix, "SELECT count(*) FROM sqlite_master", &n);
		if (r < 0)
			return r;
		if (n != 0)
			return -EPROTO;
	} else {
		r = ix_query_i64(ix,
				 "SELECT count(*) FROM meta "
				 "WHERE key = 'format' AND value = '" IX_FORMAT "'",
				 &n);
		if (r < 0 && r != -EPROTO)
			return r;
		if (r < 0 || n != 1)
			return ix_damaged_or_foreign(ix);
	}
	*ret_version = version;
	return 0;
}

static int ix_create_root(struct idx *ix, const struct ix_create_args *a)
{
	static const char sql[] = "INSERT INTO inodes(ino, mode, uid, gid, nlink, size, "
				  "atime_ns, mtime_ns, ctime_ns, rdev) "
				  "VALUES(?1, ?2, ?3, ?4, 2, 0, ?5, ?5, ?5, 0)";
	sqlite3_stmt *st = NULL;
	int rc, r;

	rc = sqlite3_prepare_v2(ix->db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return ix_err(ix, rc);
	if ((r = ix_bind_i64(ix, st, 1, IDX_ROOT_INO)) < 0 ||
	    (r = ix_bind_i64(ix, st, 2, S_IFDIR | 0755)) < 0 ||
	    (r = ix_bind_i64(ix, st, 3, a->uid)) < 0 || (r = ix_bind_i64(ix, st, 4, a->gid)) < 0 ||
	    (r = ix_bind_i64(ix, st, 5, a->now_ns)) < 0)
		goto out;
	r = ix_run(ix, st);
out:
	sqlite3_finalize(st);
	return r;
}

/*
 * ix_migrate - bring a read-write database from its version up to IDX_SCHEMA_VERSION, one
 * transaction per step. The version is read again inside each transaction: another process may
 * have migrated (or created) the database meanwhile.
 */
static int ix_migrate(struct idx *ix, const struct ix_create_args *a)
{
	int64_t version, after;
	int r;

	for (;;) {
		if ((r = ix_exec_const(ix, "BEGIN IMMEDIATE")) < 0)
			return r;
		if ((r = ix_probe(ix, &version)) < 0)
			goto fail;
		if (version == IDX_SCHEMA_VERSION)
			break;
		if ((r = ix_exec_const(ix, migrations[version].sql)) < 0)
			goto fail;
		if (migrations[version].fixup && (r = migrations[version].fixup(ix, a)) < 0)
			goto fail;
		after = -1;
		if ((r = ix_query_i64(ix, "PRAGMA user_version", &after)) < 0)
			goto fail;
		if (after != version + 1) {
			r = -EIO; /* a migration that does not set user_version */
			goto fail;
		}
		if ((r = ix_exec_const(ix, "COMMIT")) < 0)
			goto fail;
	}
	return ix_exec_const(ix, "COMMIT");
fail:
	sqlite3_exec(ix->db, "ROLLBACK", NULL, NULL, NULL);
	return r;
}

static int ix_prepare_all(struct idx *ix)
{
	for (size_t i = 0; i < IX__COUNT; i++) {
		const unsigned int pflags = SQLITE_PREPARE_PERSISTENT;
		int rc;

		assert(ix_sql[i]);
		rc = sqlite3_prepare_v3(ix->db, ix_sql[i], -1, pflags, &ix->st[i], NULL);
		/* SQLITE_ERROR here: the tables lack the columns this code expects */
		if (rc != SQLITE_OK)
			return (rc & 0xff) == SQLITE_ERROR ? -EPROTO : ix_err(ix, rc);
	}
	return 0;
}

/*
 * Open the WAL file for idx_sync, by the name SQLite itself gives it (sqlite3_filename_wal,
 * SQLite 3.31; sqlite.org/wal.html "the WAL file"). Every read in WAL mode opens it, creating
 * it if missing, and it stays until the last connection closes, so after idx_open's reads it
 * is there. Returns 0 or -errno.
 */
static int ix_open_wal(struct idx *ix)
{
	const char *wal = sqlite3_filename_wal(sqlite3_db_filename(ix->db, "main"));

	if (!wal || !*wal)
		return -ENOENT;
	ix->wal_fd = open(wal, O_RDONLY | O_CLOEXEC);
	return ix->wal_fd < 0 ? -errno : 0;
}

/*
 * Copy the index at path, at schema version, to "PATH.vVERSION.bak" (idx_backup: the online
 * backup API, temp file, fsync, rename, fsync of the directory) before it is migrated.
 * Returns 0, -ENAMETOOLONG, or idx_backup's -errno (-ENOSPC: the disk cannot hold the copy,
 * and the index is left as it was).
 */
static int ix_backup_before_upgrade(struct idx *ix, const char *path, int64_t version)
{
	char bak[PATH_MAX];

	if (snprintf(bak, sizeof(bak), "%s.v%" PRId64 ".bak", path, version) >= (int)sizeof(bak))
		return -ENAMETOOLONG;
	return idx_backup(ix, bak);
}

int idx_open(const char *path, int flags, uint32_t uid, uint32_t gid, int64_t now_ns,
	     struct idx **ret)
{
	struct ix_create_args a = { .uid = uid, .gid = gid, .now_ns = now_ns };
	struct idx *ix;
	int64_t version = 0, one = 0;
	int oflags, rc, r;

	ix = calloc(1, sizeof(*ix));
	if (!ix)
		return -ENOMEM;
	ix->wal_fd = -1;
	ix->rdonly = (flags & IDX_RDONLY) != 0;
	oflags = SQLITE_OPEN_NOMUTEX |
		 (ix->rdonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
	rc = sqlite3_open_v2(path, &ix->db, oflags, NULL);
	if (rc != SQLITE_OK) {
		r = ix->db ? ix_err(ix, rc) : -ENOMEM;
		goto fail;
	}
	sqlite3_extended_result_codes(ix->db, 1);
	if ((rc = sqlite3_busy_timeout(ix->db, IX_BUSY_TIMEOUT_MS)) != SQLITE_OK) {
		r = ix_err(ix, rc);
		goto fail;
	}
	if (!ix->rdonly) {
		sqlite3_stmt *st = NULL;
		const unsigned char *mode;

		rc = sqlite3_prepare_v2(ix->db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
		if (rc != SQLITE_OK) {
			r = ix_err(ix, rc);
			goto fail;
		}
		r = ix_step(ix, st);
		mode = r > 0 ? sqlite3_column_text(st, 0) : NULL;
		if (r >= 0 && (!mode || strcmp((const char *)mode, "wal") != 0))
			r = -EIO;
		sqlite3_finalize(st);
		if (r < 0)
			goto fail;
		if ((r = ix_exec_const(ix, "PRAGMA synchronous = FULL")) < 0)
			goto fail;
	}
	/*
	 * A whole checkpoint file is one transaction of up to ~10^5 rows in three B-trees keyed by
	 * random digests: a page cache that holds them keeps the transaction from spilling pages to
	 * the WAL before commit. An upper bound, allocated as used.
	 */
	if ((r = ix_exec_const(ix, "PRAGMA cache_size = " IX_CACHE_KIB)) < 0)
		goto fail;
	if ((r = ix_exec_const(ix, "PRAGMA foreign_keys = ON")) < 0)
		goto fail;
	if ((r = ix_query_i64(ix, "PRAGMA foreign_keys", &one)) < 0)
		goto fail;
	if (one != 1) {
		r = -EIO; /* built without foreign key support */
		goto fail;
	}
	if ((r = ix_probe(ix, &version)) < 0)
		goto fail;
	if (version < IDX_SCHEMA_VERSION) {
		if (ix->rdonly) {
			/* an empty file is no index yet; an old one cannot be migrated here */
			r = version == 0 ? -ENOENT : -EPROTO;
			goto fail;
		}
		/* an upgrade cannot be undone by an older ckptfs: keep the index as it was, whole,
		 * before the first change (a new, empty database has nothing to keep) */
		if (version >= 1 && (r = ix_backup_before_upgrade(ix, path, version)) < 0)
			goto fail;
		if ((r = ix_migrate(ix, &a)) < 0)
			goto fail;
	}
	ix->opened_version = version;
	if (!ix->rdonly && (r = ix_exec_const(ix, ix_optional_indexes)) < 0)
		goto fail;
	if ((r = ix_prepare_all(ix)) < 0)
		goto fail;
	if (!ix->rdonly && (r = ix_open_wal(ix)) < 0)
		goto fail;
	*ret = ix;
	return 0;
fail:
	idx_close(ix);
	return r;
}

int idx_opened_version(const struct idx *ix)
{
	return (int)ix->opened_version;
}

int idx_schema_version(struct idx *ix, int *ret)
{
	int64_t v = 0;
	int r = ix_query_i64(ix, "PRAGMA user_version", &v);

	if (r < 0)
		return r;
	*ret = (int)v;
	return 0;
}

void idx_close(struct idx *ix)
{
	if (!ix)
		return;
	/* a file created and never closed is removed by recovery whether this commits or not */
	(void)idx_flush(ix);
	/* first: the handle's own close, the last connection's, then checkpoints and removes the
	 * WAL, as without a checkpointer */
	sqlite3_close_v2(ix->ck_db);
	free(ix->ck_path);
	if (ix->wal_fd >= 0)
		close(ix->wal_fd);
	for (size_t i = 0; i < IX__COUNT; i++)
		sqlite3_finalize(ix->st[i]);
	sqlite3_close_v2(ix->db);
	free(ix);
}

/* ---- transactions ---- */

/*
 * Set synchronous back to FULL after lazy transactions, before a transaction that must be
 * durable at its commit. Outside any transaction (SQLite refuses to change it inside one). On
 * failure sync_normal stays set and the next idx_begin retries. NORMAL stays set from one lazy
 * transaction to the next: a small file's create and commit are two lazy transactions, and two
 * pragmas around each cost 2.5% of the daemon's CPU (RESULTS.md, "Small files"). The pragmas
 * are prepared afresh each time, not kept in ix->st: SQLite applies a PRAGMA synchronous while
 * preparing it, so a kept statement's first step would do nothing.
 */
static int ix_sync_full(struct idx *ix)
{
	int rc;

	if (!ix->sync_normal)
		return 0;
	if ((rc = ix_exec_const(ix, "PRAGMA synchronous = FULL")) == 0)
		ix->sync_normal = false;
	return rc;
}

/* BEGIN a write transaction with synchronous=NORMAL (idx_begin_lazy) */
static int ix_begin_normal(struct idx *ix)
{
	int rc;

	ix_read_close(ix);
	if (!ix->sync_normal) {
		ix->sync_normal = true; /* set before: a pragma that fails may have been applied */
		if ((rc = ix_exec_const(ix, "PRAGMA synchronous = NORMAL")) < 0)
			return rc;
	}
	return ix_run(ix, ix_stmt(ix, IX_BEGIN));
}

int idx_begin(struct idx *ix)
{
	int rc;

	if (ix->rdonly)
		return -EROFS;
	if ((rc = idx_flush(ix)) < 0)
		return rc;
	ix_read_close(ix);
	/* a lazy transaction before could not set FULL back: never let this one be lazy too */
	if ((rc = ix_sync_full(ix)) < 0)
		return rc;
	return ix_run(ix, ix_stmt(ix, IX_BEGIN));
}

int idx_begin_lazy(struct idx *ix)
{
	int rc;

	if (ix->rdonly)
		return -EROFS;
	if ((rc = idx_flush(ix)) < 0)
		return rc;
	return ix_begin_normal(ix);
}

/* The deferred transaction was rolled back: never hand out its inode numbers again (the kernel
 * may still hold them, idx_inode_create), and forget the parents it cached. */
static void ix_defer_lost(struct idx *ix)
{
	if (ix->defer_max_ino > ix->ino_floor)
		ix->ino_floor = ix->defer_max_ino;
	ix_pcache_clear(ix);
}

int idx_begin_deferred(struct idx *ix)
{
	int rc, opened = 0;

	if (ix->rdonly)
		return -EROFS;
	assert(ix->defer != IX_DEFER_IN);
	if (ix->defer == IX_DEFER_NONE) {
		if ((rc = ix_begin_normal(ix)) < 0)
			return rc;
		ix->defer = IX_DEFER_IDLE;
		ix->defer_max_ino = 0;
		opened = 1;
	}
	if ((rc = ix_run(ix, ix_stmt(ix, IX_DEF_BEGIN))) < 0) {
		if (opened) { /* nothing in it yet */
			ix->defer = IX_DEFER_NONE;
			ix_run(ix, ix_stmt(ix, IX_ROLLBACK));
		}
		return rc;
	}
	ix->defer = IX_DEFER_IN;
	return opened;
}

int idx_commit_deferred(struct idx *ix)
{
	int rc;

	assert(ix->defer == IX_DEFER_IN);
	if ((rc = ix_run(ix, ix_stmt(ix, IX_DEF_RELEASE))) < 0) {
		idx_rollback_deferred(ix);
		return rc;
	}
	ix->defer = IX_DEFER_IDLE;
	return 0;
}

void idx_rollback_deferred(struct idx *ix)
{
	assert(ix->defer == IX_DEFER_IN);
	ix_pcache_clear(ix); /* it may hold what the change made */
	ix_run(ix, ix_stmt(ix, IX_DEF_ROLLBACK));
	ix_run(ix, ix_stmt(ix, IX_DEF_RELEASE));
	ix->defer = IX_DEFER_IDLE;
	if (sqlite3_get_autocommit(ix->db)) { /* SQLite rolled all of it back (an I/O error) */
		ix->defer = IX_DEFER_NONE;
		ix_defer_lost(ix);
	}
}

int idx_flush(struct idx *ix)
{
	int rc;

	if (ix->defer != IX_DEFER_IDLE)
		return 0;
	assert(!ix->in_read);
	ix->defer = IX_DEFER_NONE;
	if ((rc = ix_run(ix, ix_stmt(ix, IX_COMMIT))) == 0)
		return 0;
	if (!sqlite3_get_autocommit(ix->db))
		ix_run(ix, ix_stmt(ix, IX_ROLLBACK));
	ix_defer_lost(ix);
	return rc;
}

int idx_sync(struct idx *ix)
{
	if (ix->wal_fd < 0)
		return -EROFS;
	return fdatasync(ix->wal_fd) < 0 ? -errno : 0;
}

/* sqlite3_wal_hook of a handle whose checkpoints are apart: note the WAL's length for
 * idx_checkpoint; checkpoint here only past the backstop. Runs in the committing thread, under
 * the handle's lock. */
static int ix_wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
	struct idx *ix = arg;

	atomic_store(&ix->wal_frames, frames);
	if (frames >= IX_WAL_BACKSTOP)
		sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
	return SQLITE_OK;
}

int idx_checkpoint_apart(struct idx *ix)
{
	const char *path;

	if (ix->rdonly)
		return -EROFS;
	if (ix->ck_path)
		return 0;
	path = sqlite3_db_filename(ix->db, "main");
	if (!path || !(ix->ck_path = strdup(path)))
		return -ENOMEM;
	sqlite3_wal_hook(ix->db, ix_wal_hook, ix); /* replaces SQLite's autocheckpoint hook */
	return 0;
}

int idx_checkpoint(struct idx *ix)
{
	int frames = atomic_load(&ix->wal_frames);
	int rc, log = -1, copied = -1;

	if (frames < ix->ck_frames)
		ix->ck_frames = 0; /* the WAL restarted from its beginning */
	if (!ix->ck_path || (frames - ix->ck_frames < IX_WAL_CHECKPOINT && !ix->ck_owed))
		return 0;
	if (!ix->ck_db) {
		rc = sqlite3_open_v2(ix->ck_path, &ix->ck_db,
				     SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
		if (rc == SQLITE_OK)
			rc = sqlite3_busy_timeout(ix->ck_db, IX_BUSY_TIMEOUT_MS);
		/* a connection opens its file at its first statement: before that, a checkpoint
		 * does not know the database is in WAL mode, and does nothing */
		if (rc == SQLITE_OK)
			rc = sqlite3_exec(ix->ck_db, "PRAGMA schema_version", NULL, NULL, NULL);
		/* then no busy handler: the RESTART below must not wait holding the writer's lock
		 * (a PASSIVE checkpoint never calls it) */
		if (rc == SQLITE_OK)
			rc = sqlite3_busy_timeout(ix->ck_db, 0);
		if (rc != SQLITE_OK) {
			sqlite3_close_v2(ix->ck_db);
			ix->ck_db = NULL;
			return ix_err(NULL, rc); /* NULL: ix->db is the handle's, not this thread's */
		}
	}
	rc = sqlite3_wal_checkpoint_v2(ix->ck_db, "main", SQLITE_CHECKPOINT_PASSIVE, &log, &copied);
	if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED)
		return 0; /* the backstop's checkpoint runs: it does the work */
	if (rc != SQLITE_OK)
		return ix_err(NULL, rc);
	if (log < 0)
		return -EIO; /* not in WAL mode: idx_open sets it, so something else changed it */
	ix->ck_frames = log;
	/*
	 * All of it copied: if no transaction is writing and no reader reads from the WAL at this
	 * moment, make the next write transaction restart it from its beginning (RESTART), at once
	 * or not at all (no busy handler: it would hold the writer's lock while it waited).
	 * Without this, a writer that begins a transaction during each checkpoint never finds the
	 * WAL fully copied at its begin, never restarts it, and the file grew to the backstop's
	 * 64 MiB (1 KiB files streamed by one writer: 67.5 MB). Not TRUNCATE: a WAL
	 * cut to 0 bytes grows again with every commit, and each fdatasync of a file that grew
	 * writes its size too (small files 2,553 -> 2,145 files/s, RESULTS.md).
	 * A restart that could not be made (a writer inside its transaction) is owed: the next
	 * call copies the frames written since and tries again, instead of waiting for 1,000 more
	 * while the WAL grows past its end.
	 */
	ix->ck_owed = false;
	if (copied == log && log > 0) {
		int seen = atomic_load(&ix->wal_frames);

		rc = sqlite3_wal_checkpoint_v2(ix->ck_db, "main", SQLITE_CHECKPOINT_RESTART, NULL,
					       NULL);
		if (rc != SQLITE_OK && rc != SQLITE_BUSY && rc != SQLITE_LOCKED)
			return ix_err(NULL, rc);
		ix->ck_owed = rc != SQLITE_OK;
		if (rc == SQLITE_OK) {
			/* count from the restart, unless a commit came since: its count is from
			 * the restarted WAL already */
			atomic_compare_exchange_strong(&ix->wal_frames, &seen, 0);
			ix->ck_frames = 0;
		}
	}
	return 1;
}

bool idx_checkpoint_owed(const struct idx *ix)
{
	return ix->ck_owed;
}

int idx_commit(struct idx *ix)
{
	assert(ix->defer != IX_DEFER_IN);
	if (ix->defer == IX_DEFER_IDLE) /* no transaction of the caller's: idx_begin flushes */
		return idx_flush(ix);
	return ix_run(ix, ix_stmt(ix, IX_COMMIT));
}

void idx_hold(struct idx *ix)
{
	ix->hold++;
}

void idx_unhold(struct idx *ix)
{
	assert(ix->hold > 0);
	if (--ix->hold == 0)
		ix_read_close(ix);
}

void idx_rollback(struct idx *ix)
{
	assert(ix->defer != IX_DEFER_IN);
	if (ix->defer == IX_DEFER_IDLE) /* no transaction of the caller's to abandon */
		return;
	ix->in_read = false; /* a held read transaction ends with the rollback too */
	ix_pcache_clear(ix); /* it may hold what the transaction changed */
	if (!sqlite3_get_autocommit(ix->db))
		ix_run(ix, ix_stmt(ix, IX_ROLLBACK));
}
