/*
 * index.h — ckptfs index: the SQLite database that holds the namespace (inodes, directory
 * entries), each regular file's chunk list, and the chunk table with reference counts.
 *
 * The only module that contains SQL. Links only sqlite3; never includes store/ or fs/; never logs.
 *
 * Database: STORE/index.db, WAL journal, synchronous=FULL (a commit returns only when durable),
 * foreign keys on, every statement prepared once per connection. Schema version in
 * PRAGMA user_version; idx_open migrates older versions forward in one transaction each.
 *
 * Invariants (checked by idx_check):
 *   1. Inode 1 is the root directory and always exists.
 *   2. Every dentry names an existing inode; a directory has exactly one dentry (except the root,
 *      which has none).
 *   3. chunks.refs equals the number of extents rows naming that chunk.
 *   4. A regular file's extents tile [0, size) in order without gaps or overlaps.
 *   5. An inode with nlink = 0 exists only while a caller holds it open (fs/ deletes it on last
 *      close; idx_recover deletes those left by a crash).
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

#define IDX_ROOT_INO 1
#define IDX_HASH_LEN 16
/* Current schema version (PRAGMA user_version). */
#define IDX_SCHEMA_VERSION 1

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
};

/* One extent of a regular file: bytes [offset, offset+length) are the raw bytes of a chunk. */
struct idx_extent {
	uint64_t offset;  /* bytes from the start of the file */
	uint32_t length;  /* bytes; equals the chunk's raw size */
	uint32_t stored_size; /* bytes the chunk occupies in the store (recorded on first insert) */
	uint8_t codec;    /* codec of the stored chunk (store/'s enum; opaque here) */
	uint8_t hash[IDX_HASH_LEN]; /* XXH3-128 of the chunk's raw bytes */
};

/* Whole-store figures. Bytes unless said otherwise. */
struct idx_stats {
	uint64_t files, dirs, symlinks;
	uint64_t logical_bytes;  /* sum of regular file sizes */
	uint64_t chunks;         /* distinct chunks */
	uint64_t chunk_raw_bytes; /* sum of distinct chunks' raw sizes */
	uint64_t stored_bytes;   /* sum of distinct chunks' stored sizes */
	uint64_t bad_chunks;     /* chunks marked bad by idx_chunk_mark_bad */
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
 * IDX_SCHEMA_VERSION, or not a ckptfs index), -EIO, -EBUSY, -ENOMEM, -EACCES.
 */
int idx_open(const char *path, int flags, uint32_t uid, uint32_t gid, int64_t now_ns,
	     struct idx **ret);

/* idx_close - finalize statements and close; NULL accepted. */
void idx_close(struct idx *ix);

/*
 * Transactions. idx_begin starts an IMMEDIATE transaction; idx_commit commits it (durable on
 * return: synchronous=FULL); idx_rollback abandons it (returns void, never fails visibly).
 * Every mutating call below must run inside one. Read calls may run inside or outside one.
 * Return 0 or a negative errno per the table above.
 */
int idx_begin(struct idx *ix);
int idx_commit(struct idx *ix);
void idx_rollback(struct idx *ix);

/* idx_inode_get - attributes of ino. Returns 0 or -ENOENT. */
int idx_inode_get(struct idx *ix, uint64_t ino, struct idx_inode *ret);

/*
 * idx_inode_create - insert a new inode with attributes from *attr (attr->ino ignored).
 * Inode numbers are never reused (AUTOINCREMENT). Returns 0 and the new number in *ret_ino.
 */
int idx_inode_create(struct idx *ix, const struct idx_inode *attr, uint64_t *ret_ino);

/*
 * idx_inode_update - overwrite mode, uid, gid, nlink, size, times, rdev and hash of attr->ino.
 * Does not touch extents. Returns 0 or -ENOENT.
 */
int idx_inode_update(struct idx *ix, const struct idx_inode *attr);

/*
 * idx_inode_delete - delete ino, its symlink target and its extents, releasing their chunks
 * through release(hash, arg) as they reach refs 0. Returns 0 or -ENOENT.
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
 * ext[0..n) (which must tile [0, size)), its size and whole-file digest are set, its mtime and
 * ctime set to mtime_ns. New chunks are inserted with refs 1, known ones get refs + 1; the old
 * extents' chunks get refs - 1 and are released through release() at 0.
 * Returns 0, -ENOENT (no such inode), -EINVAL (extents do not tile [0, size)).
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

/* idx_stats_get - whole-store figures into *ret. Returns 0. */
int idx_stats_get(struct idx *ix, struct idx_stats *ret);

/*
 * idx_recover - after an unclean stop: delete regular files whose content was never committed
 * (no whole-file digest: created but never closed or fsynced, so never durable) together with
 * their dentries, inodes with nlink = 0 (open-unlinked files of the crashed daemon), and chunk
 * rows with refs = 0, releasing each through release(). Must run in a transaction, before the
 * filesystem is served; also run at a clean unmount, when the kernel holds no inode any more.
 * Returns the number of inodes deleted (>= 0).
 */
int idx_recover(struct idx *ix, idx_release_fn release, void *arg);

/*
 * idx_check - verify invariants 1-4 above. Returns 0 when they hold, -EUCLEAN when one does not,
 * with a one-line description copied into msg (cap bytes).
 */
int idx_check(struct idx *ix, char *msg, size_t cap);

#endif /* CKPTFS_INDEX_H */
