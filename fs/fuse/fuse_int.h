/*
 * fuse_int.h — the FUSE layer (fs/fuse/): the low-level operations (ops*.c, private parts in
 * ops_int.h), extended attributes and ACLs (xattr.c), the files of /.ckptfs (meta.c) and the
 * daemon's option parsing, mount and session loop (daemon.c). The only layer that includes
 * libfuse; it wires the upcalls of the layers below (fs->up.on_commit, fs->up.flush_inval).
 *
 * May call: every layer below (steps.h and what it includes), index/ and store/.
 */
#ifndef CKPTFS_FS_FUSE_INT_H
#define CKPTFS_FS_FUSE_INT_H

#include "fs/node/node.h"
#include "fs/steps/steps.h"

/*
 * fs_commit_or_rollback - end the transaction the caller began: commit when rc == 0, else (or
 * when the commit fails) roll back. Returns rc, or the commit's -errno. fs->mu held.
 */
int fs_commit_or_rollback(struct ckfs *fs, int rc);

/* ---- xattr.c: extended attributes and POSIX ACLs (the index keeps them with the inode) ---- */

/*
 * fs_xattr_set / get / list / remove - setxattr(2) and friends on inode ino (not virtual),
 * taking fs->mu. Names: user.*, trusted.*, security.*, system.posix_acl_access and
 * system.posix_acl_default (others -EOPNOTSUPP); limits of idx_xattr_* (name 255 bytes, value
 * 64 KiB). set: flags IDX_XATTR_CREATE / IDX_XATTR_REPLACE; an access ACL also sets the mode's
 * permission bits, and one the mode says all of is not stored; -EINVAL (a malformed ACL),
 * -EACCES (a default ACL on a non-directory), -EEXIST, -ENODATA, -E2BIG, -ERANGE. get: the
 * value's length, copied when cap > 0; -ENODATA, -ERANGE. list: the NUL-separated names' length;
 * -ERANGE. remove: 0 or -ENODATA. set and remove update the ctime; each is one transaction.
 */
int fs_xattr_set(struct ckfs *fs, uint64_t ino, const char *name, const void *value, size_t len,
		 int flags);
int fs_xattr_get(struct ckfs *fs, uint64_t ino, const char *name, void *buf, size_t cap);
ssize_t fs_xattr_list(struct ckfs *fs, uint64_t ino, char *buf, size_t cap);
int fs_xattr_remove(struct ckfs *fs, uint64_t ino, const char *name);

/*
 * fs_acl_chmod - after a chmod to mode, rewrite ino's access ACL, if any, to match (its
 * USER_OBJ, MASK or GROUP_OBJ, OTHER entries). Caller holds fs->mu, in a transaction.
 * Returns 0 or -errno of the index (-ENOMEM).
 */
int fs_acl_chmod(struct ckfs *fs, uint64_t ino, uint32_t mode);

/*
 * fs_acl_inherit - node ino, just created in directory parent with *mode (type and the mode
 * the caller asked for): with a default ACL on parent, give ino its access ACL (and a directory
 * the default ACL too) and mask *mode by it (posix_acl_create in the kernel's fs/posix_acl.c);
 * without one, clear umask's bits from *mode. Caller holds fs->mu, in a transaction, and
 * writes *mode back. Returns 0 or -errno of the index (-ENOMEM).
 */
int fs_acl_inherit(struct ckfs *fs, uint64_t parent, uint64_t ino, uint32_t *mode,
		   uint32_t umask);

/* ---- daemon.c ---- */

/*
 * Kernel read-ahead for the mount, KiB: 4 MiB, one STORE_CHUNK_MAX, so a sequential reader keeps
 * several 1 MiB requests in flight and the FUSE threads decode chunks side by side. The kernel's
 * default is 128 KiB (VM_READAHEAD_PAGES) and it lowers the bdi's value to the INIT reply's
 * max_readahead at mount, so it is raised afterwards. 4 MiB reads a cold torch.load fastest of
 * the sizes tried, no slower than 8 MiB (figures: tests/bench/RESULTS.md).
 */
#define FS_READ_AHEAD_KB 4096

/*
 * fs_tune_read_ahead - the first time it is called, write FS_READ_AHEAD_KB to fs->fuse.ra.bdi (the
 * kernel has processed INIT once a file is opened). A failure (not root, no sysfs) is reported
 * once on stderr and otherwise ignored: reads work, only slower. Thread-safe.
 */
void fs_tune_read_ahead(struct ckfs *fs);

/* ---- meta.c: the files of /.ckptfs (fs->mu held) ---- */
enum { META_STATUS, META_STEPS, META_STEPS_JSON, META_METRICS, META_FILE_COUNT };
/* Virtual inode of /.ckptfs/<file which>. */
#define VINO_META(which) (VINO_BASE + 100 + (uint64_t)(which))
/* fs_meta_file_by_name - index of a /.ckptfs file name, or -1. fs_meta_file_name - the reverse. */
int fs_meta_file_by_name(const char *name);
const char *fs_meta_file_name(int which);
/*
 * fs_meta_stats - the whole-store figures (idx_stats_get) /.ckptfs/<file which> shows, read
 * before fs->mu is taken, on a read-only index handle of fs's own (opened at the first fresh
 * call; fs->fuse.stats.mu, .kept_mu). Status and metrics show them; the step lists show none.
 * @fresh: true: the figures of now (an open, a scrape): kept ones are used only while SQLite's
 *         data version says no commit happened since they were read, else a scan (5-11 ms at
 *         10^4 files), one scan at a time. false: the kept ones, zeros if none (a lookup or
 *         getattr: for st_size only, never a scan nor a wait for one).
 * Returns 1 with *ret filled, or 0: the file shows none, or they could not be read here
 * (logged once if the handle cannot be opened), and fs_meta_render reads them under fs->mu.
 * Thread-safety: any thread, fs->mu not held.
 * fs_meta_stats_close - close that handle; after the last reader (teardown).
 */
int fs_meta_stats(struct ckfs *fs, int which, bool fresh, struct idx_stats *ret);
void fs_meta_stats_close(struct ckfs *fs);
/*
 * fs_meta_render - the current content of /.ckptfs/<file which>.
 * @stats: fs_meta_stats' figures, or NULL to read them here (with fs->mu held, a scan of the
 *         inode and chunk tables).
 * @ret_buf: owned (free()); @ret_len: bytes. Returns 0, -ENOENT (no such file), -ENOMEM, or an
 * index error. fs->mu held.
 */
int fs_meta_render(struct ckfs *fs, int which, const struct idx_stats *stats, char **ret_buf,
		   size_t *ret_len);

/* ---- view.c: /.ckptfs/snapshots, every kept step read-only (its invariants at its top) ---- */

/* The name of the view's directory in /.ckptfs. */
#define FS_VIEW_DIR "snapshots"
/* Virtual inode of /.ckptfs/snapshots. */
#define VINO_SNAPS (VINO_BASE + 200)
/* Set on an index inode's number to make the inode of the same file in the view: above every
 * index inode and every other virtual inode (VINO_BASE is bit 56). */
#define VINO_VIEW (1ull << 57)

/* fs_view_ino - is ino /.ckptfs/snapshots or inside it? Pure. */
static inline bool fs_view_ino(uint64_t ino)
{
	return ino == VINO_SNAPS || (ino & VINO_VIEW) != 0;
}

/*
 * fs_view_lookup - the view inode of parent/name: "snapshots" in /.ckptfs (parent meta_ino),
 * a listed step's name in VINO_SNAPS (NAME, or NAME@ID for an older version of NAME), or an
 * entry of a view directory. Takes no kernel reference (the caller replies with entry timeout
 * 0 and calls no ino_lookup_inc). Returns 0 and *ret_ino, -ENOENT (no such name, or parent's
 * step left the view), or the index's -errno. Costs a scan of the step table in VINO_SNAPS.
 * fs->mu held; reads only.
 */
int fs_view_lookup(struct ckfs *fs, uint64_t parent, const char *name, uint64_t *ret_ino);

/*
 * fs_view_stat - the attributes of view inode ino (fs_view_ino): those of its index inode with
 * st_ino = ino, or a read-only directory for VINO_SNAPS. Returns 0, -ENOENT (its step left the
 * view, and it is not a file still open), or the index's -errno. fs->mu held; reads only.
 */
int fs_view_stat(struct ckfs *fs, uint64_t ino, struct stat *st);

/*
 * fs_view_real - the index inode behind view inode ino, when ino lies in a step the view lists
 * now. Returns 0 and *ret_real, or -ENOENT (VINO_SNAPS, or its step left the view). fs->mu held;
 * reads only.
 */
int fs_view_real(struct ckfs *fs, uint64_t ino, uint64_t *ret_real);

/* A listing's sink: name (borrowed for the call), inode, S_IFMT bits; 0 or -errno to stop. */
typedef int (*fs_view_add_fn)(void *arg, const char *name, uint64_t ino, uint32_t mode);

/*
 * fs_view_list - the entries of view directory ino, "." and ".." first, each passed to add:
 * VINO_SNAPS lists the steps (invariant 2 of view.c), a step's directory its index entries as
 * view inodes. Returns 0, add's non-zero value, -ENOENT (the step left the view), or the
 * index's -errno. fs->mu held; reads only.
 */
int fs_view_list(struct ckfs *fs, uint64_t ino, fs_view_add_fn add, void *arg);

/* ---- metrics_http.c: -o metrics=ADDR:PORT ---- */
struct fs_metrics;
/*
 * fs_metrics_start - serve fs_meta_render(META_METRICS) at http://SPEC/metrics (SPEC
 * "ADDR:PORT", "[IPv6]:PORT" or "HOST:PORT"; port 1..65535) on libmicrohttpd's own thread, at
 * most 16 connections, 10 s idle timeout; other paths answer 404, other methods 405. A scrape
 * takes fs->mu, so call with it not held. Returns the server (owned: fs_metrics_stop), or NULL
 * with a one-line reason in err (cap bytes): a malformed SPEC, an unresolvable ADDR, or a
 * socket that cannot be bound (port in use, address not local).
 * fs_metrics_stop - stop serving and free m; waits for a scrape in progress; NULL is a no-op.
 * Call before fs is torn down.
 */
struct fs_metrics *fs_metrics_start(struct ckfs *fs, const char *spec, char *err, size_t cap);
void fs_metrics_stop(struct fs_metrics *m);

/* ---- control.c: ckptctl's requests on a mounted store ---- */
struct fs_control;
/*
 * fs_control_start - listen on the control socket of store (ckpt_control_addr) and serve
 * `ckptctl pin|unpin|drop|rollback STEP` on one thread (steps_ctl_*, which take fs->mu), for
 * the daemon's own user and root only. Returns the server (owned: fs_control_stop), or NULL
 * with a one-line reason in err (cap bytes): the address is taken (another daemon of the same
 * store directory) or no socket could be made.
 * fs_control_stop - stop serving (a request in progress finishes first) and free c; NULL is a
 * no-op. Call before fs is torn down.
 */
struct fs_control *fs_control_start(struct ckfs *fs, const char *store, char *err, size_t cap);
void fs_control_stop(struct fs_control *c);

/* ---- ops.c (ops_dir.c, ops_file.c: ops_int.h) ---- */
extern const struct fuse_lowlevel_ops fs_ops;

#endif /* CKPTFS_FS_FUSE_INT_H */
