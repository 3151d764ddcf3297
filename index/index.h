/*
 * index.h — ckptfs index: the SQLite database that holds the namespace (inodes, directory
 * entries), each regular file's chunk list, and the chunk table with reference counts.
 *
 * Since schema v2 it also holds the checkpoint steps (lifecycle, figures, state history) and the
 * claims trainers wrote into their tracker files (see DESIGN.md, "Steps").
 *
 * The only module that contains SQL. Links only sqlite3; never includes store/ or fs/; never logs.
 *
 * Database: STORE/index.db, WAL journal, synchronous=FULL (a commit returns only when durable;
 * NORMAL only for a transaction begun by idx_begin_lazy), foreign keys on, every statement
 * prepared once per connection. Schema version in PRAGMA user_version; idx_open migrates older
 * versions forward in one transaction each.
 *
 * Invariants (checked by idx_check):
 *   1. Inode 1 is the root directory and always exists.
 *   2. Every dentry names an existing inode; a directory has exactly one dentry (except the root,
 *      which has none).
 *   3. chunks.refs equals the number of extents rows naming that chunk.
 *   4. A regular file's extents lie in [0, size) in offset order without overlaps. Without
 *      IDX_INODE_SPARSE they tile [0, size) (no gaps); with it, every gap is a hole, read as
 *      zeros (DESIGN.md "Files and chunks": holes are metadata).
 *   5. An inode with nlink = 0 exists only while a caller holds it open (fs/ deletes it on last
 *      close; idx_recover deletes those left by a crash).
 *   6. A step's dir_ino is 0 or names an existing directory inode, and no two steps name the same
 *      directory. Deleting a directory inode (idx_inode_delete, idx_recover) sets the dir_ino of
 *      its step to 0 in the same transaction.
 *   7. A step's state, and both states of each of its events, are values of enum idx_step_state,
 *      its kind is in [0, IDX_STEP_KIND_MAX); a pruned step never leaves IDX_STEP_PRUNED.
 *      Step ids and claim ids are never reused.
 *
 * Step lifecycle (DESIGN.md, "Steps"). The index records the transitions; which to make, and
 * when, is fs/'s policy. Main line and the usual side exits:
 *
 *        writing ──> sealed ──> complete ──> pruned
 *           │          │           │           ^
 *           └──────────┴─────┬─────┘           │
 *                            v                 │
 *                   incomplete | corrupt ──────┘
 *
 * Any state other than pruned may move to any other (an abandoned, incomplete step that a later
 * marker seals comes back as sealed); pruned is terminal (invariant 7).
 *
 * Thread-safety: a struct idx is a single SQLite connection and is NOT thread-safe; callers
 * serialise all calls on one handle. Several processes may open the same database: one writer
 * (the daemon) and any number of IDX_RDONLY readers (ckptctl).
 *
 * Errors: SQLite codes are converted once, here: BUSY/LOCKED -> -EBUSY, FULL -> -ENOSPC,
 * CORRUPT/NOTADB -> -EIO, NOMEM -> -ENOMEM, READONLY -> -EROFS, CANTOPEN -> -ENOENT or -EACCES,
 * CONSTRAINT -> -EEXIST, anything else -> -EIO.
 */
#ifndef CKPTFS_INDEX_H
#define CKPTFS_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define IDX_ROOT_INO 1
#define IDX_HASH_LEN 16
/* Current schema version (PRAGMA user_version). */
#define IDX_SCHEMA_VERSION 3

struct idx;

/* Open flags. */
#define IDX_RDONLY 0x1 /* open read-only; never create or migrate */

/* One inode's attributes. Times are nanoseconds since the Unix epoch (CLOCK_REALTIME). */
struct idx_inode {
	uint64_t ino;
	uint32_t mode; /* S_IFMT type bits | permission bits */
	uint32_t uid, gid;
	uint32_t nlink;
	uint64_t size; /* bytes: logical size of a regular file, target length of a symlink */
	int64_t atime_ns, mtime_ns, ctime_ns;
	uint64_t rdev;
	bool has_hash;                 /* regular files: whole-file digest recorded */
	uint8_t hash[IDX_HASH_LEN];    /* XXH3-128 of the whole content, canonical bytes */
	uint32_t flags;                /* IDX_INODE_* bits (schema v2; 0 for older rows) */
};

/* struct idx_inode.flags: what fs/ learned about a regular file's content. */
#define IDX_INODE_TORN 0x1      /* the writer died with the file open (PF_EXITING at flush) */
#define IDX_INODE_MALFORMED 0x2 /* the structure check of its known format failed */
#define IDX_INODE_VALID 0x4     /* the structure check of its known format passed */
/* the file has holes: ranges of [0, size) no extent covers, which read as zeros (invariant 4).
 * Set and cleared by idx_file_set_content alone; idx_inode_create and idx_inode_update ignore
 * this bit in what they are given and keep the stored one. */
#define IDX_INODE_SPARSE 0x8
/* another node wrote it: shown from that node's manifest (fs/node), its chunks fetched from the
 * remote on first read */
#define IDX_INODE_FOREIGN 0x10
#define IDX_INODE_FLAGS_ALL 0x1f /* every defined bit; others are refused (-EINVAL) */

/* One extent of a regular file: bytes [offset, offset+length) are the raw bytes of a chunk. */
struct idx_extent {
	uint64_t offset;  /* bytes from the start of the file */
	uint32_t length;  /* bytes; equals the chunk's raw size */
	uint32_t stored_size; /* bytes the chunk occupies in the store (recorded on first insert) */
	uint8_t codec;    /* codec of the stored chunk (store/'s enum; opaque here) */
	uint8_t hash[IDX_HASH_LEN]; /* XXH3-128 of the chunk's raw bytes */
};

/* Whole-store figures. Bytes unless said otherwise. Inode figures count linked inodes only. */
#define IDX_STATS_CODECS 8 /* codecs broken out in struct idx_stats (index.c STATS_CODEC) */

struct idx_stats {
	uint64_t files, dirs, symlinks;
	uint64_t logical_bytes;  /* sum of regular file sizes */
	uint64_t chunks;         /* distinct chunks */
	uint64_t chunk_raw_bytes; /* sum of distinct chunks' raw sizes */
	uint64_t stored_bytes;   /* sum of distinct chunks' stored sizes */
	uint64_t bad_chunks;     /* chunks marked bad by idx_chunk_mark_bad */
	/* chunks stored as codec c (store/'s enum, opaque here) and the sum of their stored sizes,
	 * for c < IDX_STATS_CODECS; a larger codec is counted in the totals above only */
	uint64_t codec_chunks[IDX_STATS_CODECS];
	uint64_t codec_stored_bytes[IDX_STATS_CODECS];
};

/*
 * Called when a chunk's reference count drops to 0 inside a transaction. Return true to delete
 * the chunk's row (the caller must then delete the chunk's data once the transaction commits),
 * false to keep the row with refs = 0 (the chunk is still wanted, e.g. by a write in progress).
 */
typedef bool (*idx_release_fn)(const uint8_t hash[IDX_HASH_LEN], void *arg);

/*
 * idx_open - open or create the index database at path.
 * @flags: 0 or IDX_RDONLY.
 * @uid, @gid, @now_ns: owner and times of the root directory if the database is created.
 * @ret: on success an owned handle; release with idx_close.
 * Creates the schema (root directory mode 0755) or migrates an older one. Refuses a database
 * newer than this code.
 * Returns 0, -ENOENT (RDONLY and no database), -EPROTO (schema version newer than
 * IDX_SCHEMA_VERSION, or not a ckptfs index), -EIO (the file is damaged, including a
 * format row that cannot be read back: run fsck), -EBUSY, -ENOMEM, -EACCES.
 */
int idx_open(const char *path, int flags, uint32_t uid, uint32_t gid, int64_t now_ns,
	     struct idx **ret);

/*
 * idx_open also upgrades: a read-write open of a database at an older schema version v (>= 1)
 * first copies it whole to "PATH.vV.bak" (idx_backup), then migrates it; a failed copy fails the
 * open with idx_backup's -errno and leaves the database unchanged.
 *
 * idx_opened_version - the schema version (PRAGMA user_version) the database had when idx_open
 * opened it: 0 when idx_open created it, below IDX_SCHEMA_VERSION when it upgraded it (the copy
 * is then at PATH.vN.bak), IDX_SCHEMA_VERSION otherwise. Any thread (set at open, read-only).
 */
int idx_opened_version(const struct idx *ix);

/*
 * idx_schema_version - the database's schema version now (PRAGMA user_version) into *ret.
 * Returns 0 or -errno (-EIO, -EBUSY, -ENOMEM). As every call on ix: one thread at a time.
 */
int idx_schema_version(struct idx *ix, int *ret);

/* idx_close - finalize statements and close; NULL accepted. */
void idx_close(struct idx *ix);

/*
 * Transactions. idx_begin starts an IMMEDIATE transaction; idx_commit commits it (durable on
 * return: synchronous=FULL, and with it every lazy commit before: idx_begin_lazy);
 * idx_rollback abandons it (returns void, never fails visibly).
 * Every mutating call below must run inside one. Read calls may run inside or outside one.
 * Return 0 or a negative errno per the table above.
 */
int idx_begin(struct idx *ix);
int idx_commit(struct idx *ix);
void idx_rollback(struct idx *ix);

/*
 * idx_begin_lazy - idx_begin for a transaction whose commit does not wait for the disk
 * (synchronous=NORMAL for it: its WAL frames are written, not synced; NORMAL stays set for the lazy
 * transactions that follow, and the next idx_begin sets FULL back). After a process crash it is
 * there as any commit is (the frames are in the page cache); after a power loss or a kernel crash
 * it may be gone, with every lazy commit after it, and the database is consistent either way
 * (sqlite.org/pragma.html#pragma_synchronous, WAL mode). It becomes durable with the next
 * idx_commit of an idx_begin transaction (one WAL sync covers every frame before it). For changes
 * whose loss recovery already handles, such as a created file not yet closed (idx_recover). Same
 * returns and thread-safety as idx_begin. If FULL cannot be set back, idx_begin fails rather than
 * begin a transaction that would not be durable.
 */
int idx_begin_lazy(struct idx *ix);

/*
 * Deferred changes: a change that may wait uncommitted, for a few milliseconds, inside one open
 * write transaction that the changes after it join, so that many share one COMMIT (one write of
 * each page they touch into the WAL) instead of paying one each. For a change whose loss at a
 * crash recovery already handles (a created file not yet closed: idx_recover) and that other
 * connections need not see at once (they see it at the flush). A create that committed alone
 * was most of the gap between ckptfs and the FUSE floor on small files (tests/bench/RESULTS.md,
 * "Creates share one commit").
 *
 * idx_begin_deferred - begin a change: opens the deferred transaction (BEGIN IMMEDIATE,
 *   synchronous=NORMAL as idx_begin_lazy) unless open, then SAVEPOINT ix_defer around this
 *   change. Returns 1 if it opened the transaction (the caller must arrange an idx_flush soon:
 *   the transaction holds the database's write lock), 0 if it joined it, -EROFS, or SQLite's
 *   errors as idx_begin's. Mutating calls may run until idx_commit_deferred or
 *   idx_rollback_deferred; nothing else may begin in between.
 * idx_commit_deferred - end the change, kept (RELEASE): it commits with the transaction.
 *   Returns 0, or an error after which the change was undone as by idx_rollback_deferred.
 * idx_rollback_deferred - undo this change only (ROLLBACK TO), not the earlier ones.
 * idx_flush - COMMIT the deferred transaction if one is open; 0 otherwise. Returns 0 or -errno:
 *   then every change in it is lost (rolled back), its inode numbers are never handed out again
 *   (the kernel may still know them), and the caller should log what was lost.
 * idx_begin, idx_begin_lazy, idx_backup and idx_close flush first (their error, if any, is
 * idx_flush's), as does a mutating statement that runs outside any transaction: a transaction
 * of the caller's never holds deferred changes of others, and its rollback cannot undo them.
 * Reads on this handle see deferred changes; other connections see them after the flush.
 * Thread-safety: as every call on the handle (the caller's lock, fs->mu in the daemon).
 */
int idx_begin_deferred(struct idx *ix);
int idx_commit_deferred(struct idx *ix);
void idx_rollback_deferred(struct idx *ix);
int idx_flush(struct idx *ix);

/*
 * idx_sync - make every transaction this handle committed so far durable, lazy ones included:
 * fdatasync(2) of the WAL file, which holds them until a checkpoint, and a checkpoint syncs
 * the WAL before copying it and the database after (sqlite.org/pragma.html#pragma_synchronous,
 * WAL mode). For a caller that commits lazily under its lock and waits for the disk after
 * letting the lock go. Touches no SQLite state: may run on any thread, without the lock that
 * guards the handle, while another thread uses it. Returns 0, -EROFS (a read-only handle), or
 * fdatasync's -errno (-EIO: the disk failed; what was committed may not survive a power loss).
 */
int idx_sync(struct idx *ix);

/*
 * idx_checkpoint_apart - from now on, checkpoint the WAL (copy its pages into the database) only
 * in idx_checkpoint, on a connection of its own, instead of in the commit that makes the WAL pass
 * SQLite's 1,000 frames: that commit is made by a caller holding the lock that guards the handle,
 * and a checkpoint copies up to megabytes and syncs the WAL and the database (RESULTS.md "Small
 * files"). A commit still checkpoints inline past 16,384 frames, in case
 * idx_checkpoint is not called. Durability is unchanged: what a checkpoint copies is already
 * durable in the WAL, and a crash in either checkpoint leaves the WAL to be copied again at the
 * next open. Call once, before idx_checkpoint, under the handle's lock. Returns 0, -EROFS (a
 * read-only handle), -ENOMEM.
 */
int idx_checkpoint_apart(struct idx *ix);

/*
 * idx_checkpoint - when the handle's commits added 1,000 WAL frames or more since the last
 * checkpoint (or the WAL's restart), copy what no open read transaction still needs into the
 * database, on the checkpointer's connection (opened at the first call), without blocking the
 * handle's readers or writer (SQLite's PASSIVE checkpoint:
 * sqlite.org/c3ref/wal_checkpoint_v2.html). When all of it was copied and no transaction is
 * writing and no reader reads from it at that moment, the next write transaction restarts the
 * WAL from its beginning (RESTART, without waiting for either): a writer that began a
 * transaction during every checkpoint never restarted it itself, and the file grew to the
 * backstop's 64 MiB. A restart that could not be made is tried again at the next call, due
 * or not (it copies what was written since first). The file keeps its largest size (not cut:
 * a WAL that grows again costs every fdatasync its size). Syncs the WAL before copying and the
 * database after.
 * Thread-safety: does not need the handle's lock and may run while another thread uses the
 * handle, but from one thread at a time, and not after idx_close begins. Returns 1 (a
 * checkpoint ran), 0 (nothing due, idx_checkpoint_apart not called, or another checkpoint
 * running), -ENOMEM, -ENOSPC, -ENOENT (the database file cannot be opened), -EIO (it could not
 * be read or synced): on an error the WAL is kept, and the next call tries again.
 */
int idx_checkpoint(struct idx *ix);

/*
 * idx_checkpoint_owed - did the last idx_checkpoint copy the whole WAL but fail to make the
 * restart (a transaction was writing, or a reader reading from the WAL, at that moment)? Then
 * the next call tries it again. Same thread rules as idx_checkpoint.
 */
bool idx_checkpoint_owed(const struct idx *ix);

/*
 * idx_hold, idx_unhold - run the read calls between them in one read transaction instead of one
 * each. Outside a hold every read call is a transaction of its own, and each costs SQLite's WAL
 * read lock and unlock (two fcntl(2) calls on STORE/index.db-shm); a FUSE request that resolves a
 * path makes tens of them. The transaction opens at the first read call and ends at idx_unhold,
 * or at idx_begin, idx_begin_lazy or idx_rollback (a read after their transaction opens a new
 * one), so a hold never delays a write, and reads inside it see every commit of this handle
 * before them. Another process's commit (ckptctl on a mounted store) is seen from the next hold.
 * Holds nest; keep one to a short critical section (a checkpoint cannot move the WAL past an
 * open read). Never fail. Thread-safety: as every call on the handle (the caller's lock).
 */
void idx_hold(struct idx *ix);
void idx_unhold(struct idx *ix);

/* idx_inode_get - attributes of ino, flags included. Returns 0 or -ENOENT. */
int idx_inode_get(struct idx *ix, uint64_t ino, struct idx_inode *ret);

/*
 * idx_inode_create - insert a new inode with attributes from *attr (attr->ino ignored).
 * Inode numbers are never reused (AUTOINCREMENT). Returns 0 and the new number in *ret_ino,
 * -EINVAL (attr->flags has a bit outside IDX_INODE_FLAGS_ALL, or both MALFORMED and VALID).
 */
int idx_inode_create(struct idx *ix, const struct idx_inode *attr, uint64_t *ret_ino);

/*
 * idx_inode_update - overwrite mode, uid, gid, nlink, size, times, rdev, hash and flags of
 * attr->ino (read-modify-write with idx_inode_get keeps the fields a caller does not mean to
 * change). Does not touch extents. Returns 0, -ENOENT, -EINVAL (flags as for idx_inode_create).
 */
int idx_inode_update(struct idx *ix, const struct idx_inode *attr);

/*
 * idx_inode_delete - delete ino, its symlink target and its extents, releasing their chunks
 * through release(hash, arg) as they reach refs 0; a step whose dir_ino is ino gets dir_ino 0
 * (invariant 6). Returns 0 or -ENOENT.
 */
int idx_inode_delete(struct idx *ix, uint64_t ino, idx_release_fn release, void *arg);

/*
 * idx_symlink_set / idx_symlink_get - a symlink's target. get copies at most cap-1 bytes plus a
 * NUL into buf and returns the target's full length (>= 0), -ENOENT if ino has no target.
 */
int idx_symlink_set(struct idx *ix, uint64_t ino, const char *target);
int idx_symlink_get(struct idx *ix, uint64_t ino, char *buf, size_t cap);

/* idx_dentry_lookup - inode named name in directory parent. Returns 0 or -ENOENT. */
int idx_dentry_lookup(struct idx *ix, uint64_t parent, const char *name, uint64_t *ret_ino);

/* idx_dentry_add - add parent/name -> ino. Returns 0 or -EEXIST. */
int idx_dentry_add(struct idx *ix, uint64_t parent, const char *name, uint64_t ino);

/* idx_dentry_remove - remove parent/name. Returns 0 or -ENOENT. Does not change nlink. */
int idx_dentry_remove(struct idx *ix, uint64_t parent, const char *name);

/*
 * idx_dentry_move - rename the entry oldparent/oldname to newparent/newname, which must not
 * exist (the caller removes a replaced target first). Keeps the entry's readdir cookie.
 * Returns 0, -ENOENT (no such entry), -EEXIST (target exists).
 */
int idx_dentry_move(struct idx *ix, uint64_t oldparent, const char *oldname, uint64_t newparent,
		    const char *newname);

/*
 * idx_dentry_parent - the directory holding the (single) dentry of directory ino, and optionally
 * its name (copied into name_buf, cap bytes, NUL-terminated, may be NULL). For the root returns
 * IDX_ROOT_INO. Returns 0 or -ENOENT.
 */
int idx_dentry_parent(struct idx *ix, uint64_t ino, uint64_t *ret_parent, char *name_buf,
		      size_t cap);

/* idx_dir_is_empty - 1 if directory ino has no entries, 0 if it has some. */
int idx_dir_is_empty(struct idx *ix, uint64_t ino);

/*
 * idx_dir_list - call fn(name, ino, mode, cookie, arg) for the entries of directory dir whose
 * cookie is greater than after, in cookie order. Cookies are positive, stable for an entry's
 * lifetime (also across rename within the index), and never reused. name is borrowed for the
 * call. fn returning non-zero stops the walk; that value is returned. Returns 0 after a full walk.
 */
int idx_dir_list(struct idx *ix, uint64_t dir, int64_t after,
		 int (*fn)(const char *name, uint64_t ino, uint32_t mode, int64_t cookie,
			   void *arg),
		 void *arg);

/*
 * idx_file_extents - the extents of regular file ino, in offset order.
 * @ret: an owned array (free()) of *ret_n extents; NULL when there are none.
 * Returns 0, -ENOMEM.
 */
int idx_file_extents(struct idx *ix, uint64_t ino, struct idx_extent **ret, size_t *ret_n);

/*
 * idx_file_set_content - replace the content of regular file ino in one step: its extents become
 * ext[0..n) (in offset order, each length > 0, no overlap, all inside [0, size)), its size and
 * whole-file digest are set, its mtime set to mtime_ns and its ctime to the later of its ctime and
 * mtime_ns (a chown or chmod after the last write, committed later, keeps its ctime). Gaps
 * between the extents (and before the first, after the last) are holes: the inode gets IDX_INODE_SPARSE when there is
 * one and loses it when there is none. New chunks are inserted with refs 1, known ones get
 * refs + 1; the old extents' chunks get refs - 1 and are released through release() at 0.
 * Cost: O(n), whatever the holes' lengths.
 * Returns 0, -ENOENT (no such inode), -EINVAL (extents out of order, overlapping, empty or past
 * size; size above INT64_MAX).
 */
int idx_file_set_content(struct idx *ix, uint64_t ino, const struct idx_extent *ext, size_t n,
			 uint64_t size, const uint8_t hash[IDX_HASH_LEN], int64_t mtime_ns,
			 idx_release_fn release, void *arg);

/*
 * idx_file_stored_bytes - bytes of store space attributable to file ino: the sum over its extents
 * of stored_size / refs (a chunk shared by k references counts 1/k to each), rounded up.
 * Returns 0 (0 bytes for a file without extents).
 */
int idx_file_stored_bytes(struct idx *ix, uint64_t ino, uint64_t *ret);

/* idx_chunk_exists - 1 if the chunk table has hash, 0 if not. */
int idx_chunk_exists(struct idx *ix, const uint8_t hash[IDX_HASH_LEN]);

/* idx_chunk_mark_bad - record that chunk hash failed verification. Returns 0 or -ENOENT. */
int idx_chunk_mark_bad(struct idx *ix, const uint8_t hash[IDX_HASH_LEN]);

/* idx_chunk_clear_bad - clear the bad mark of hash (after a repair). Returns 0 or -ENOENT. */
int idx_chunk_clear_bad(struct idx *ix, const uint8_t hash[IDX_HASH_LEN]);

/*
 * idx_chunk_set_stored - record that chunk hash is now stored as codec (enum store_codec) in
 * stored_size bytes (its file was rewritten: store_chunk_recode). Returns 0, -ENOENT (no such
 * chunk: it was freed meanwhile), -EROFS, -EIO.
 */
int idx_chunk_set_stored(struct idx *ix, const uint8_t hash[IDX_HASH_LEN], uint8_t codec,
			 uint32_t stored_size);

/*
 * idx_chunks_with_codec - up to max digests of chunks stored as codec and not marked bad, in
 * no particular order, into out[0..n). A full scan of the chunk table (no index on codec): about
 * a millisecond per 10k chunks. Returns n (0..max) or -EIO. Read-only.
 */
int idx_chunks_with_codec(struct idx *ix, uint8_t codec, uint8_t (*out)[IDX_HASH_LEN],
			  size_t max);

/*
 * idx_chunk_is_bad - whether chunk hash (16-byte XXH3-128 of its raw bytes) is marked bad.
 * Returns 1 (bad), 0 (not bad), -ENOENT (no such chunk). Read-only.
 */
int idx_chunk_is_bad(struct idx *ix, const uint8_t hash[IDX_HASH_LEN]);

/*
 * idx_dir_has_bad_chunk - whether some file under directory dir, at any depth and through any
 * of its dentries, has an extent naming a chunk marked bad. It climbs from the users of the
 * chunks marked bad instead of walking dir: O(b * u * d) row lookups for b chunks marked bad in
 * the whole index, u extents naming each and d directories above each file; with none marked
 * bad, one probe of the partial index chunks_bad (index.c, schema). Returns 1, 0 (also for a
 * dir that does not exist), or the index's -errno. Read-only; thread-safety: as every call on
 * the handle.
 */
int idx_dir_has_bad_chunk(struct idx *ix, uint64_t dir);

/*
 * idx_chunk_foreach - call fn(hash, raw_size, stored_size, codec, refs, bad, arg) for every chunk
 * row in hash order. fn returning non-zero stops and that value is returned.
 */
int idx_chunk_foreach(struct idx *ix,
		      int (*fn)(const uint8_t hash[IDX_HASH_LEN], uint32_t raw_size,
				uint32_t stored_size, uint8_t codec, int64_t refs, bool bad,
				void *arg),
		      void *arg);

/*
 * idx_chunk_users - call fn(ino, offset, arg) for every extent that names chunk hash.
 * fn returning non-zero stops and that value is returned.
 */
int idx_chunk_users(struct idx *ix, const uint8_t hash[IDX_HASH_LEN],
		    int (*fn)(uint64_t ino, uint64_t offset, void *arg), void *arg);

/*
 * idx_path - the path of inode ino from the root ("/" for the root, "/a/b" otherwise), built
 * from dentries (one of them for a file with several links). Copies at most cap-1 bytes plus
 * a NUL. Returns the full length, -ENOENT (no dentry chain reaches the root, e.g. unlinked).
 */
int idx_path(struct idx *ix, uint64_t ino, char *buf, size_t cap);

/*
 * idx_stats_get - whole-store figures into *ret: one scan of the inode table and one of the
 * chunk table. Returns 0 or a negative errno of ix_err (-EIO, -EBUSY, -ENOMEM). Read-only.
 */
int idx_stats_get(struct idx *ix, struct idx_stats *ret);

/*
 * idx_data_version - SQLite's PRAGMA data_version of this handle into *ret: a value that
 * differs between two calls on the same handle if and only if another connection (the daemon,
 * for a read-only handle beside it) committed a change in between
 * (sqlite.org/pragma.html#pragma_data_version). The handle's own commits do not change it.
 * Call it outside idx_hold: inside one it gives the held snapshot's value.
 * Returns 0 or a negative errno of ix_err (-EIO, -EBUSY, -ENOMEM). Read-only.
 */
int idx_data_version(struct idx *ix, int64_t *ret);

/*
 * idx_recover - after an unclean stop: delete regular files whose content was never committed
 * (no whole-file digest: created but never closed or fsynced, so never durable) together with
 * their dentries, inodes with nlink = 0 (open-unlinked files of the crashed daemon), and chunk
 * rows with refs = 0, releasing each through release(); a step whose directory it deletes gets
 * dir_ino 0 (invariant 6). Must run in a transaction, before the
 * filesystem is served; also run at a clean unmount, when the kernel holds no inode any more.
 * Returns the number of inodes deleted (>= 0).
 */
int idx_recover(struct idx *ix, idx_release_fn release, void *arg);

/*
 * idx_check - verify invariants 1-4, 6 and 7 above. Returns 0 when they hold, -EUCLEAN when one
 * does not, with a one-line description copied into msg (cap bytes).
 */
int idx_check(struct idx *ix, char *msg, size_t cap);

/* ---- extended attributes (schema v3, index_xattr.c) ----
 * An inode's attributes are (name, value) pairs: name a NUL-terminated string of 1 to
 * IDX_XATTR_NAME_MAX bytes (namespace prefix included), value 0 to IDX_XATTR_VALUE_MAX bytes of
 * any content, both stored byte-exact. Limits are ext4's and the VFS's (XATTR_NAME_MAX 255,
 * XATTR_SIZE_MAX 65536 in <linux/limits.h>). Which namespaces exist is fs/'s business. Deleting
 * the inode deletes them. Not thread-safe (the handle's rule).
 */
#define IDX_XATTR_NAME_MAX 255
#define IDX_XATTR_VALUE_MAX 65536
#define IDX_XATTR_CREATE 0x1  /* XATTR_CREATE: fail with -EEXIST if name exists */
#define IDX_XATTR_REPLACE 0x2 /* XATTR_REPLACE: fail with -ENODATA if it does not */

/*
 * idx_xattr_set - set attribute name of ino to value[0..len), per flags (0, IDX_XATTR_CREATE or
 * IDX_XATTR_REPLACE). Returns 0, -EEXIST, -ENODATA (flags), -ERANGE (name empty or too long),
 * -E2BIG (len > IDX_XATTR_VALUE_MAX), -EINVAL (both flags), -ENOENT (no such inode), -EROFS.
 */
int idx_xattr_set(struct idx *ix, uint64_t ino, const char *name, const void *value, size_t len,
		  int flags);

/*
 * idx_xattr_get - copy attribute name's value into buf (cap bytes). cap 0: only its length.
 * Returns the value's length (>= 0), -ENODATA (no such attribute), -ERANGE (cap > 0 and too
 * small; buf untouched).
 */
int idx_xattr_get(struct idx *ix, uint64_t ino, const char *name, void *buf, size_t cap);

/*
 * idx_xattr_list - the names of ino's attributes, each NUL-terminated, concatenated into buf
 * (cap bytes), in creation order (listxattr(2)'s format). cap 0: only the length needed.
 * Returns the bytes of the list (>= 0), -ERANGE (cap > 0 and too small), -ENOMEM.
 */
ssize_t idx_xattr_list(struct idx *ix, uint64_t ino, char *buf, size_t cap);

/* idx_xattr_remove - remove attribute name. Returns 0, -ENODATA, -EROFS. */
int idx_xattr_remove(struct idx *ix, uint64_t ino, const char *name);

/* ---- damage to the index file itself (index_salvage.c) ---- */

/*
 * idx_integrity - SQLite's check of the database file: PRAGMA quick_check (quick: b-tree
 * structure and page links, O(pages)) or PRAGMA integrity_check (also every index against its
 * table). Read-only.
 * @msg, @cap: on -EUCLEAN, SQLite's first finding (or its error message).
 * Returns 0 (whole), -EUCLEAN (damaged), -ENOMEM, -EBUSY.
 */
int idx_integrity(struct idx *ix, bool quick, char *msg, size_t cap);

#define IDX_SALVAGE_TABLES 8 /* meta inodes dentries extents steps step_events claims xattrs */

/* What idx_salvage read from one table of the damaged index. */
struct idx_salvage_table {
	uint64_t copied;         /* rows copied */
	uint64_t damaged_ranges; /* runs of damaged pages skipped (their rows are lost) */
	uint64_t rejected;       /* rows read but refused by the fresh index's constraints (a
				  * NULL in a NOT NULL column, a duplicate key): lost */
	bool unreadable;         /* the table could not be read at all */
};

struct idx_salvage_report {
	struct idx_salvage_table table[IDX_SALVAGE_TABLES];
	uint64_t extents_from_index; /* extents the table had lost, found in its extents_hash index */
};

/*
 * idx_backup - copy the whole index, as this handle sees it (committed WAL content included),
 * into a stand-alone database file at dst_path (rollback-journal mode, one file): written to
 * dst_path.tmp with SQLite's online backup API, fsync'd, renamed over dst_path, and the
 * directory fsync'd, so dst_path is always either the previous backup or this one, whole. The
 * source is only read. On failure dst_path is unchanged and the temporary file removed.
 * Returns 0, -ENAMETOOLONG, -ENOSPC, -ENOMEM, -EBUSY (a writer holds the source), -EIO, or the
 * -errno of open/fsync/rename. Not thread-safe against other users of ix.
 */
int idx_backup(struct idx *ix, const char *dst_path);

/* idx_salvage_table_name - name of table i of struct idx_salvage_report; borrowed, static. */
const char *idx_salvage_table_name(int i);

/*
 * idx_salvage - copy every row still readable from the damaged index file src_path (opened
 * read-only, never written) into dst, a fresh index just made by idx_open. Rows on damaged pages
 * are skipped and counted; the chunks table is not copied (idx_repair rebuilds it). dst must then
 * go through idx_repair before it is used. One transaction on dst.
 * Returns 0 (*ret filled), -EROFS (dst read-only), -ENOMEM, -ENOSPC, -EIO (dst failed).
 */
int idx_salvage(struct idx *dst, const char *src_path, struct idx_salvage_report *ret);

/* Callbacks of idx_repair; arg is passed back. */
struct idx_repair_ops {
	/*
	 * chunk_info - is the chunk with this digest in the chunk store? 1: yes, *raw_size (bytes),
	 * *stored_size (bytes) and *codec filled; 0: no; < 0: -errno, stops the repair.
	 */
	int (*chunk_info)(const uint8_t hash[IDX_HASH_LEN], uint32_t *raw_size,
			  uint32_t *stored_size, uint8_t *codec, void *arg);
	/* lost - one loss, described in a line (borrowed for the call); ino 0 if none */
	void (*lost)(uint64_t ino, const char *line, void *arg);
	void *arg;
};

struct idx_repair_stats {
	uint64_t dentries_dropped; /* names whose inode or directory was gone */
	uint64_t extents_dropped;  /* extents of gone inodes, or past a file's size */
	uint64_t chunks_added;     /* chunk rows rebuilt from the chunk store */
	uint64_t chunks_missing;   /* digests named by extents with no chunk file (marked bad) */
	uint64_t chunks_dropped;   /* chunk rows no extent names */
	uint64_t files_damaged;    /* regular files with ranges lost (reads there fail: EIO) */
	uint64_t bytes_lost;       /* bytes in those ranges */
	uint64_t relinked;         /* inodes linked again under /lost+found */
	uint64_t nlink_fixed;      /* inodes whose link count was recounted */
	uint64_t steps_reset;      /* steps whose directory was gone */
	uint64_t root_fixed;       /* 1 when the root inode was missing or not a directory */
};

/*
 * idx_repair - make the index consistent (the invariants at the top of index_salvage.c, which
 * idx_check then verifies), reporting every loss through ops->lost. Idempotent: on a consistent
 * index it changes nothing and reports nothing. One transaction.
 * Returns 0 (*ret filled), -EROFS, -ENOMEM, -ENOSPC, -EIO, or ops->chunk_info's error.
 */
int idx_repair(struct idx *ix, const struct idx_repair_ops *ops, struct idx_repair_stats *ret);

/* ---- steps (schema v2) ----
 *
 * A step is one checkpoint save as the trainer laid it out: a directory such as "iter_0000100"
 * for a layout kind (fs/layout.h's enum, opaque here: an int in [0, IDX_STEP_KIND_MAX)). Rows
 * are never deleted: a step that leaves, leaves as IDX_STEP_PRUNED, so the history stays.
 *
 * Common to every function of this section:
 *   - ix is borrowed for the call; same thread-safety as every idx_* call (one caller at a time
 *     per handle);
 *   - mutating calls return -EROFS on an IDX_RDONLY handle, must run inside idx_begin/idx_commit
 *     and become durable at idx_commit; a failed call changes nothing (SAVEPOINT where it writes
 *     more than one row);
 *   - any call may also return -EBUSY, -ENOSPC, -EIO, -ENOMEM per the conversion table above;
 *   - a struct idx_step filled by a call is the caller's (plain data, no pointers);
 *   - out-parameters are untouched on failure.
 */

enum idx_step_state {
	IDX_STEP_WRITING = 0,    /* files being written, no commit marker yet */
	IDX_STEP_SEALED = 1,     /* the trainer's commit marker was seen */
	IDX_STEP_COMPLETE = 2,   /* every file closed normally, whole, durable and checksummed */
	IDX_STEP_PRUNED = 3,     /* removed by retention or by the trainer, or its directory
				    renamed away by the user (dir_ino kept); terminal */
	IDX_STEP_INCOMPLETE = 4, /* found unfinished (abandoned, crash, remount) */
	IDX_STEP_CORRUPT = 5,    /* a checksum or structure check failed */
	IDX_STEP_COPIED = 6,     /* never sealed, every file whole, its one writer gone: copied in,
				  * waiting for a claim or a drop (fs/policy/policy.h rule 3) */
};
#define IDX_STEP_STATE_COUNT 7
/* kinds are bit positions of idx_step_newest's kind_mask */
#define IDX_STEP_KIND_MAX 32
/* longest step directory name, bytes, without the NUL */
#define IDX_STEP_NAME_MAX 255
/* longest state-change note kept, bytes; longer notes are truncated */
#define IDX_STEP_NOTE_MAX 1024

/* One step. Times are nanoseconds since the Unix epoch (CLOCK_REALTIME), 0 = never. */
struct idx_step {
	int64_t id;            /* row id, > 0, never reused */
	int kind;              /* layout kind (fs/layout.h enum; opaque here), [0, IDX_STEP_KIND_MAX) */
	char name[IDX_STEP_NAME_MAX + 1]; /* step directory name as the trainer wrote it, NUL-ended */
	int64_t step;          /* step number, >= 0 */
	int state;             /* enum idx_step_state */
	uint64_t dir_ino;      /* inode of the step directory (0 when none / removed) */
	int64_t created_ns;    /* idx_step_create */
	int64_t sealed_ns;     /* last entry into IDX_STEP_SEALED, 0 if never */
	int64_t completed_ns;  /* last entry into IDX_STEP_COMPLETE, 0 if never */
	int64_t state_ns;      /* last change of state (created_ns until the first) */
	uint64_t files;        /* regular files of the step */
	uint64_t logical_bytes; /* sum of their sizes, bytes */
	uint64_t stored_bytes; /* store space attributable to them, bytes */
	bool has_digest;       /* digest recorded by idx_step_set_figures */
	uint8_t digest[IDX_HASH_LEN]; /* step digest (fs/ defines over what), 16 bytes */
	bool pinned;           /* protected from retention */
};

/*
 * idx_step_create - record a new step in state IDX_STEP_WRITING, created_ns = state_ns = now_ns,
 * figures 0, no digest, not pinned.
 * @kind: layout kind, [0, IDX_STEP_KIND_MAX).
 * @name: step directory name, NUL-terminated, 1..IDX_STEP_NAME_MAX bytes, stored byte-exact;
 *        borrowed for the call. Several steps may share a kind+name (a re-created directory).
 * @step: step number, >= 0.
 * @dir_ino: the step directory's inode, or 0 for none.
 * @now_ns: nanoseconds since the epoch.
 * @ret_id: the new step's id (> 0).
 * Returns 0, -EINVAL (kind, step or empty name out of range), -ENAMETOOLONG (name), -ENOENT
 * (dir_ino names no inode), -ENOTDIR (dir_ino is not a directory), -EEXIST (another step already
 * has dir_ino), -EROFS.
 */
int idx_step_create(struct idx *ix, int kind, const char *name, int64_t step, uint64_t dir_ino,
		    int64_t now_ns, int64_t *ret_id);

/* idx_step_get - the step with this id into *ret. Returns 0 or -ENOENT. */
int idx_step_get(struct idx *ix, int64_t id, struct idx_step *ret);

/*
 * idx_step_by_dir - the step whose dir_ino is dir_ino (at most one: invariant 6) into *ret.
 * Returns 0 or -ENOENT (none, or dir_ino 0).
 */
int idx_step_by_dir(struct idx *ix, uint64_t dir_ino, struct idx_step *ret);

/*
 * idx_step_by_name - the newest (highest id) step of this kind and name that is not
 * IDX_STEP_PRUNED into *ret. name: NUL-terminated, borrowed for the call, compared byte-exact.
 * Returns 0 or -ENOENT (none; also for a kind or name no step can have).
 */
int idx_step_by_name(struct idx *ix, int kind, const char *name, struct idx_step *ret);

/*
 * idx_step_by_name_at - of the versions of one step (the rows of this kind and name), the one
 * that held the name at ts_ns, into *ret: made at or before ts_ns (created_ns), not pruned,
 * incomplete or corrupt by then (a row in one of those states whose state_ns <= ts_ns had left
 * the name), the one made last (then the highest id). Its state is the one it has now, any.
 * name as for idx_step_by_name. Returns 0 or -ENOENT (none; also for a kind or name no step
 * can have).
 */
int idx_step_by_name_at(struct idx *ix, int kind, const char *name, int64_t ts_ns,
			struct idx_step *ret);

/*
 * idx_step_set_state - move step id to state, at now_ns (nanoseconds since the epoch), and append
 * an event (id, now_ns, old state, state, note) to its history. When the state changes, state_ns
 * becomes now_ns, and so does sealed_ns when entering IDX_STEP_SEALED, completed_ns when entering
 * IDX_STEP_COMPLETE; setting the state a step already has only appends the event.
 * @note: free text for people (why), NUL-terminated, may be NULL; borrowed for the call; kept up
 *        to IDX_STEP_NOTE_MAX bytes.
 * Returns 0, -ENOENT (no step id), -EINVAL (state not an enum idx_step_state value, or the step
 * is IDX_STEP_PRUNED and state is another one), -EROFS. Step row and event change together or
 * not at all.
 */
int idx_step_set_state(struct idx *ix, int64_t id, int state, int64_t now_ns, const char *note);

/*
 * idx_step_set_dir - set the step directory inode of step id (0: none, e.g. moved away).
 * Returns 0, -ENOENT (no step id, or dir_ino names no inode), -ENOTDIR (dir_ino is not a
 * directory), -EEXIST (another step has dir_ino), -EROFS.
 */
int idx_step_set_dir(struct idx *ix, int64_t id, uint64_t dir_ino);

/*
 * idx_step_set_number - set the step number of step id (a versioned step, e.g. an InternEvo
 * snapshot slot, takes the number of the marker that sealed its newest version).
 * @step: >= 0, LAYOUT_STEP_RELEASE (-2) or -1 (none yet); not checked.
 * Returns 0, -ENOENT (no step id), -EROFS, -EIO. Not thread-safe (the index's own rule).
 */
int idx_step_set_number(struct idx *ix, int64_t id, int64_t step);

/*
 * idx_step_set_name - rename step id (its directory was renamed: Orbax commits a step by
 * renaming `N.orbax-checkpoint-tmp` to `N`).
 * @name: NUL-terminated, 1..IDX_STEP_NAME_MAX bytes, stored byte-exact; borrowed for the call.
 * Returns 0, -EINVAL (empty or NULL name), -ENAMETOOLONG, -ENOENT (no step id), -EROFS, -EIO.
 */
int idx_step_set_name(struct idx *ix, int64_t id, const char *name);

/*
 * idx_step_set_kind - set the layout of step id (an all-digit step directory is InternEvo's by
 * its name until Orbax's marker in it says it is Orbax's: fs/policy/policy.h rule 1).
 * @kind: 0..IDX_STEP_KIND_MAX-1.
 * Returns 0, -EINVAL (kind out of range), -ENOENT (no step id), -EROFS, -EIO. Not thread-safe
 * (the index's own rule).
 */
int idx_step_set_kind(struct idx *ix, int64_t id, int kind);

/*
 * idx_step_set_figures - record the figures of step id: files (count), logical and stored bytes,
 * and its 16-byte digest (NULL: none recorded, has_digest becomes false).
 * Returns 0, -ENOENT (no step id), -EOVERFLOW (a figure above INT64_MAX), -EROFS.
 */
int idx_step_set_figures(struct idx *ix, int64_t id, uint64_t files, uint64_t logical,
			 uint64_t stored, const uint8_t digest[IDX_HASH_LEN]);

/* idx_step_set_pinned - pin or unpin step id. Returns 0, -ENOENT (no step id), -EROFS. */
int idx_step_set_pinned(struct idx *ix, int64_t id, bool pinned);

/*
 * idx_step_foreach - call fn(s, arg) for every step, pruned ones included, ordered by step number,
 * then id. The rows are read first, then fn is called on a private copy (s borrowed for the
 * call): fn may call any idx_* function on ix, idx_step_set_* and idx_step_foreach included, and
 * sees the steps as they were when the walk began. fn returning non-zero stops the walk and that
 * value is returned. Returns 0 after a full walk, -ENOMEM, or fn's value.
 */
int idx_step_foreach(struct idx *ix, int (*fn)(const struct idx_step *s, void *arg), void *arg);

/*
 * idx_step_newest - the step in state with the highest step number (ties: highest id) into *ret.
 * @kind_mask: bit (1u << kind) set for each kind to consider; 0 = any kind.
 * @state: an enum idx_step_state value.
 * Returns 0, -ENOENT (no such step), -EINVAL (state out of range).
 */
int idx_step_newest(struct idx *ix, uint32_t kind_mask, int state, struct idx_step *ret);

/*
 * idx_step_newest_each - call fn(s, arg) for the steps in state whose kind is in kind_mask (0:
 * any), newest first (step number descending, then id descending), until fn returns non-zero.
 * Cost: O(log n) to the first step plus the steps fn passes over (the steps_state_step index,
 * read 4 rows, then 32 at a time), so finding the newest step that meets a condition does not slow
 * down as the store accumulates steps; O(log n) per kind when kind_mask names no kind with any
 * step (the steps_kind_name index). The kinds' steps in other states, and the steps of other
 * kinds, are passed over inside SQLite. s is a private copy, borrowed for the call; fn may call
 * any idx_* function on ix (rows changed meanwhile may be seen or not, never twice).
 * Returns 0 when every step was passed over, fn's non-zero value, -EINVAL (state out of
 * range), -ENOMEM, or the index's -errno.
 */
int idx_step_newest_each(struct idx *ix, uint32_t kind_mask, int state,
			 int (*fn)(const struct idx_step *s, void *arg), void *arg);

/*
 * idx_step_events - call fn(ts_ns, old_state, new_state, note, arg) for each state change of step
 * id, in time order (ties: the order they were recorded). note is NULL when none was given,
 * else NUL-terminated and borrowed for the call. fn may call any idx_* function except
 * idx_step_events and idx_step_set_state for this step. fn returning non-zero stops the walk and
 * that value is returned. Returns 0 after a full walk (also when step id has no events or does
 * not exist), -ENOMEM, or fn's value.
 */
int idx_step_events(struct idx *ix, int64_t id,
		    int (*fn)(int64_t ts_ns, int old_state, int new_state, const char *note,
			      void *arg),
		    void *arg);

/*
 * idx_step_state_name - "writing", "sealed", "complete", "pruned", "incomplete", "corrupt",
 * "copied", or "unknown" for any other value. A static string (never freed). Thread-safe.
 */
const char *idx_step_state_name(int state);

/* ---- tracker claims (schema v2) ----
 *
 * What a trainer wrote into a tracker file ("latest_checkpointed_iteration.txt", "latest",
 * "rank_0/meta.json"), kept as evidence whatever it is: never trusted, never interpreted here.
 * Same conventions as the steps section.
 */

/* bytes of a claim's content kept; the rest is dropped and the claim flagged truncated */
#define IDX_CLAIM_MAX 4096
/* longest tracker path, bytes, without the NUL */
#define IDX_CLAIM_TRACKER_MAX 4095

/*
 * idx_claim_add - record that tracker was written with content.
 * @tracker: the tracker's path relative to the mount root, NUL-terminated,
 *           1..IDX_CLAIM_TRACKER_MAX bytes; borrowed for the call.
 * @content, @len: the bytes written (any bytes, NULs included; content may be NULL when len is
 *           0); borrowed for the call. The first min(len, IDX_CLAIM_MAX) bytes are stored, the
 *           length written is kept (idx_claim_length).
 * @step: the step number the caller parsed from content, -1 if unparseable (< -1 is -EINVAL).
 * @now_ns: nanoseconds since the epoch.
 * @ret_id: the new claim's id (> 0, never reused).
 * Returns 0, -EINVAL (empty tracker, step < -1, content NULL with len > 0), -ENAMETOOLONG
 * (tracker), -EROFS.
 */
int idx_claim_add(struct idx *ix, const char *tracker, const void *content, size_t len,
		  int64_t step, int64_t now_ns, int64_t *ret_id);

/*
 * idx_claim_foreach - call fn(id, tracker, content, len, step, ts_ns, arg) for every claim in id
 * order. tracker (NUL-terminated) and content (len bytes, at most IDX_CLAIM_MAX; not
 * NUL-terminated; NULL when len is 0) are borrowed for the call. fn may call any idx_* function
 * except idx_claim_foreach and idx_claim_add. fn returning non-zero stops the walk and that value
 * is returned. Returns 0 after a full walk, -ENOMEM, or fn's value.
 */
int idx_claim_foreach(struct idx *ix,
		      int (*fn)(int64_t id, const char *tracker, const void *content, size_t len,
				int64_t step, int64_t ts_ns, void *arg),
		      void *arg);

/*
 * idx_claim_newest_each - call fn(id, tracker, step, ts_ns, arg) for every claim, newest (highest
 * id) first, without reading its content; the walk by the primary key stops as soon as fn
 * returns non-zero, so finding the last claims costs what is read, not the table. tracker is
 * borrowed for the call. fn may call any idx_* function except the idx_claim_* walks and
 * idx_claim_add. Returns 0 after a full walk, -ENOMEM, or fn's value.
 */
int idx_claim_newest_each(struct idx *ix,
			  int (*fn)(int64_t id, const char *tracker, int64_t step, int64_t ts_ns,
				    void *arg),
			  void *arg);

/*
 * idx_claim_length - the number of bytes the trainer wrote in claim id (its content was
 * truncated when this is above IDX_CLAIM_MAX). Returns 0 and the length in *ret_len, or -ENOENT.
 */
int idx_claim_length(struct idx *ix, int64_t id, uint64_t *ret_len);

#endif /* CKPTFS_INDEX_H */
