/*
 * ops_int.h — private to the FUSE operation layer (ops.c, ops_dir.c, ops_file.c, and view.c,
 * which serves /.ckptfs/snapshots to them): the open file handle and the helpers they share.
 *
 * Conventions (libfuse's passthrough_hp.cc): an fs_op_* handler replies exactly once, a positive
 * errno on error; the helpers return 0 or -errno and reply nothing unless said.
 */
#ifndef CKPTFS_FS_OPS_INT_H
#define CKPTFS_FS_OPS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <fuse_lowlevel.h>

#include "fs/fuse/fuse_int.h"

/* Attribute and entry cache lifetime given to the kernel, in seconds. All changes go through
 * this daemon, which the kernel knows about, so a short timeout only bounds staleness of
 * st_blocks after a commit. */
#define ATTR_TIMEOUT 1.0

/* One open file description: a regular file (oi), or a virtual tracker (vkind != 0). */
struct fh {
	struct oinode *oi;
	bool wrote;
	int vkind;        /* layout kind of a virtual tracker handle, 0 otherwise */
	char *vbuf;       /* tracker bytes: a snapshot for readers, the claim for writers */
	size_t vlen, vcap;
	bool vdirty;      /* a writer wrote since the last flush */
	char vname[256];  /* tracker name */
};

/* ---- ops.c ---- */

/* fs_req_fs - the mount a request belongs to (fuse_req_userdata). Borrowed for the mount's
 * lifetime. Thread-safe. */
struct ckfs *fs_req_fs(fuse_req_t req);

/* fs_meta_of - which /.ckptfs file (META_STATUS ... META_FILE_COUNT - 1) virtual inode ino is,
 * or -1 when it is none of them. Pure. */
int fs_meta_of(uint64_t ino);

/* fs_in_meta - is regular file or directory ino inside /.ckptfs (read-only to users)? fs->mu
 * held. */
bool fs_in_meta(struct ckfs *fs, uint64_t ino);

/*
 * fs_stat_locked - fill *st for ino from the index, overlaid by an open file's size and mtime
 * while it is dirty (st_blocks counts the bytes written since the last commit, capped at the size,
 * when they exceed the stored ones: holes cost nothing, as on ext4). fs->mu held. Returns 0 or the
 * -errno of idx_inode_get (-ENOENT: no such inode).
 */
int fs_stat_locked(struct ckfs *fs, uint64_t ino, struct stat *st);

/*
 * fs_stat_created - fill *st for a regular file created in the caller's fs->mu section from the
 * attributes fs_make_node returned (*a: size 0, nothing stored or written yet, so st_blocks 0),
 * without reading the index. fs->mu held. Never fails.
 */
void fs_stat_created(struct ckfs *fs, const struct idx_inode *a, struct stat *st);

/*
 * fs_reply_entry - reply an entry for ino: the kernel keeps the name and the attributes for
 * ATTR_TIMEOUT seconds (a name the daemon moves behind the kernel's back, a step directory's,
 * is forgotten sooner: steps_inval_queue). Takes one
 * kernel lookup reference (ino_lookup_inc; given back if the reply finds the request
 * interrupted). Called inside an fs_lock section; returns with it left (fs_unlock). On a stat
 * failure replies its errno instead.
 */
void fs_reply_entry(fuse_req_t req, struct ckfs *fs, uint64_t ino);

/* fs_check_name - a name a dentry may have: 0, -ENOENT (empty) or -ENAMETOOLONG (over
 * NAME_MAX bytes). Pure. */
int fs_check_name(const char *name);

/*
 * fs_touch_dir - set directory dir's mtime and ctime to now (nanoseconds since the epoch) and
 * add nlink_delta to its link count. In the caller's transaction, fs->mu held. Returns 0 or the
 * index's -errno.
 */
int fs_touch_dir(struct ckfs *fs, uint64_t dir, int64_t now, int nlink_delta);

/*
 * fs_touch_dir_attr - fs_touch_dir on attributes *a already read in the caller's transaction:
 * sets its mtime and ctime to now and adds nlink_delta to its link count, in memory only (the
 * caller writes *a with idx_inode_update). Pure.
 */
void fs_touch_dir_attr(struct idx_inode *a, int64_t now, int nlink_delta);

/*
 * fs_settle_for_reader - before a lookup or listing of the root (or of InternEvo's
 * `snapshot/`): judge every unfinished step whose writers are all gone, once the files they
 * closed are committed. fs->mu held; released while waiting for the commit queue.
 */
void fs_settle_for_reader(struct ckfs *fs);

/* ---- ops_dir.c ---- */

/*
 * fs_shared_step_dir - is parent/name a step directory at the root of a mount with a remote, so
 * that its mkdir, lookup miss and rmdir go to the other nodes too (fs/node/node_dir.c)?
 * fs->mu held (reads nothing of the index at the root).
 */
static inline bool fs_shared_step_dir(struct ckfs *fs, fuse_ino_t parent, const char *name)
{
	return fs->node && parent == IDX_ROOT_INO && steps_dir_name(fs, parent, name);
}

/*
 * fs_make_node - create an inode of mode under parent/name in one transaction, with the parent's
 * default ACL or the caller's umask, rdev for a device node, link_target (NUL-terminated) for a
 * symlink. committed_empty: a regular file created without an open (mknod) is durable and empty
 * at once. fs->mu held; replies nothing. Returns 0 and *ret_ino, and, when ret_attr is not
 * NULL, the new inode's attributes as committed in *ret_attr (ino included); or -ENOENT,
 * -ENAMETOOLONG, -ENOTDIR, -EROFS (in /.ckptfs), -EEXIST (also a tracker's name), or the
 * index's -errno.
 */
int fs_make_node(fuse_req_t req, struct ckfs *fs, fuse_ino_t parent, const char *name,
		 mode_t mode, dev_t rdev, const char *link_target, bool committed_empty,
		 uint64_t *ret_ino, struct idx_inode *ret_attr);

/*
 * Namespace and directory handlers (struct fuse_lowlevel_ops, libfuse's fuse_lowlevel.h for
 * each one's arguments): each replies once; thread-safe, taking fs->mu.
 */
void fs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		 dev_t rdev);
void fs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void fs_op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name);
void fs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void fs_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void fs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		  const char *newname, unsigned int flags);
void fs_op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname);
void fs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		   struct fuse_file_info *fi);
void fs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi);
void fs_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
		    struct fuse_file_info *fi);

/* ---- ops_file.c ---- */

/*
 * File handlers (struct fuse_lowlevel_ops): each replies once. fi->fh is a struct fh, owned by
 * the handle from open or create until release. Thread-safe; content goes through oinode.c.
 */
void fs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		  struct fuse_file_info *fi);
void fs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		struct fuse_file_info *fi);
void fs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		 struct fuse_file_info *fi);
void fs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void fs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
		     struct fuse_file_info *fi);
void fs_op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		 struct fuse_file_info *fi);

#endif /* CKPTFS_FS_OPS_INT_H */
