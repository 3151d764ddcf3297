/*
 * ops_dir.c — the FUSE namespace operations: mknod, mkdir, symlink, unlink, rmdir, rename,
 * link, and directory listing (opendir, readdir, fsyncdir).
 *
 * Every namespace change is one index transaction (durable when it returns:
 * synchronous=FULL), except a file's creation by open(O_CREAT), which becomes durable with the
 * file's first close or fsync (fs_make_node, idx_begin_lazy). Handlers reply exactly once;
 * helpers return -errno (ops_int.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <fuse_lowlevel.h>

#include "fs/core/lockrank.h"
#include "fs/fuse/ops_int.h"
#include "fs/policy/layout.h"

/* ---- namespace ---- */

/*
 * Create an inode of the given mode under parent/name. fs->mu held; replies nothing.
 * committed_empty: a regular file created without an open (mknod) is durable and empty at once.
 */
int fs_make_node(fuse_req_t req, struct ckfs *fs, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev, const char *link_target, bool committed_empty,
		     uint64_t *ret_ino, struct idx_inode *ret_attr)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct idx_inode a = { 0 }, pa;
	uint64_t ino;
	int64_t now = ckfs_now(fs);
	int rc = fs_check_name(name);

	if (rc < 0)
		return rc;
	if (fs_view_ino(parent))
		return -EROFS; /* /.ckptfs/snapshots (view.c) */
	if ((rc = idx_inode_get(fs->ix, parent, &pa)) < 0)
		return rc;
	if (!S_ISDIR(pa.mode))
		return -ENOTDIR;
	if (pa.nlink == 0)
		return -ENOENT;
	if (fs_in_meta(fs, parent))
		return -EROFS;
	if (idx_dentry_lookup(fs->ix, parent, name, &ino) == 0)
		return -EEXIST;
	if (steps_tracker_name(fs, parent, name))
		return -EEXIST; /* a tracker name is taken by the virtual tracker */
	/* an InternEvo slot keeps its complete version; pa is read again if that wrote rows */
	if (steps_before_change(fs, parent) && (rc = idx_inode_get(fs->ix, parent, &pa)) < 0)
		return rc;
	a.mode = mode;
	a.uid = ctx->uid;
	a.gid = (pa.mode & S_ISGID) ? pa.gid : ctx->gid;
	if (S_ISDIR(mode) && (pa.mode & S_ISGID))
		a.mode |= S_ISGID;
	a.nlink = S_ISDIR(mode) ? 2 : 1;
	a.size = link_target ? strlen(link_target) : 0;
	a.rdev = S_ISCHR(mode) || S_ISBLK(mode) ? (uint64_t)rdev : 0;
	a.atime_ns = a.mtime_ns = a.ctime_ns = now;
	if (S_ISREG(mode) && committed_empty) {
		struct store_hash empty;

		store_hash_buf("", 0, &empty);
		a.has_hash = true;
		memcpy(a.hash, empty.b, IDX_HASH_LEN);
	}
	/* A file created by open(O_CREAT) is durable at its first close or fsync, whose commit
	 * syncs this one's WAL frames too; until then recovery removes it (idx_recover). So its
	 * creation does not wait for the disk with fs->mu held, nor commit on its own: its rows
	 * wait in the index's deferred transaction, which the committer flushes with the next
	 * batch or within a millisecond (commit.c invariant 8): one COMMIT for many creates. */
	bool lazy = S_ISREG(mode) && !committed_empty && !link_target;
	bool deferred = lazy && cq_on(fs);

	if (deferred)
		rc = idx_begin_deferred(fs->ix);
	else if (lazy)
		rc = idx_begin_lazy(fs->ix);
	else
		rc = idx_begin(fs->ix);
	if (rc < 0)
		return rc;
	if (rc == 1)
		cq_flush_soon(fs);
	rc = idx_inode_create(fs->ix, &a, &ino);
	if (rc == 0)
		a.ino = ino;
	if (rc == 0 && !link_target) {
		/* a default ACL of the parent, else the umask (FUSE_CAP_DONT_MASK: ours) */
		uint32_t mode0 = a.mode;

		rc = fs_acl_inherit(fs, parent, ino, &a.mode, ctx->umask);
		if (rc == 0 && a.mode != mode0)
			rc = idx_inode_update(fs->ix, &a);
	}
	if (rc == 0 && link_target)
		rc = idx_symlink_set(fs->ix, ino, link_target);
	if (rc == 0)
		rc = idx_dentry_add(fs->ix, parent, name, ino);
	if (rc == 0 && S_ISDIR(mode))
		rc = steps_on_mkdir(fs, parent, name, ino);
	if (rc == 0) {
		/* pa is the parent's row of this section: nothing above changed it */
		fs_touch_dir_attr(&pa, now, S_ISDIR(mode) ? 1 : 0);
		rc = idx_inode_update(fs->ix, &pa);
	}
	if (deferred) {
		if (rc == 0)
			rc = idx_commit_deferred(fs->ix);
		else
			idx_rollback_deferred(fs->ix);
		if (rc < 0)
			return rc;
	} else if ((rc = fs_commit_or_rollback(fs, rc)) < 0) {
		return rc;
	}
	if (parent == IDX_ROOT_INO && S_ISDIR(mode))
		ckpt_fault("top-dir-made");
	steps_on_name(fs, parent, name, ino, fuse_req_ctx(req)->pid, false);
	*ret_ino = ino;
	if (ret_attr)
		*ret_attr = a;
	return 0;
}

static void node_reply(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		       dev_t rdev, const char *target)
{
	struct ckfs *fs = fs_req_fs(req);
	uint64_t ino;
	int rc;

	fs_lock(fs);
	rc = fs_make_node(req, fs, parent, name, mode, rdev, target, S_ISREG(mode), &ino, NULL);
	if (rc < 0) {
		fs_unlock(fs);
		fuse_reply_err(req, -rc);
		return;
	}
	if (S_ISDIR(mode) && fs_shared_step_dir(fs, parent, name)) {
		/* the other nodes' ranks may look it up as soon as this returns (node_dir.c) */
		fs_unlock(fs);
		node_dir_publish(fs, name, mode & 07777);
		fs_lock(fs);
	}
	fs_reply_entry(req, fs, ino);
}

/*
 * mknod(2): a regular file (durable and empty at once), or a FIFO, socket, character or block
 * device node: metadata only (mode, owner, times, rdev for devices) in the index, no content.
 * The kernel opens such nodes itself (a FIFO's buffer, the device's driver) as on ext4; whether
 * devices may be opened is the mount's `nodev`. Checkpoint semantics ignore them.
 */
void fs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	if (!S_ISREG(mode) && !S_ISFIFO(mode) && !S_ISSOCK(mode) && !S_ISCHR(mode) &&
	    !S_ISBLK(mode)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	node_reply(req, parent, name, mode, rdev, NULL);
}

void fs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	node_reply(req, parent, name, S_IFDIR | (mode & 07777), 0, NULL);
}

void fs_op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	if (strlen(link) > PATH_MAX) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	node_reply(req, parent, name, S_IFLNK | 0777, 0, link);
}

/* The removal's one transaction; fs->mu held. Returns 0 or -errno (nothing changed). */
static int remove_txn(struct ckfs *fs, fuse_ino_t parent, const char *name, uint64_t ino,
		      int64_t now, bool dir)
{
	struct ino_freed fr = { 0 };
	int rc = idx_begin(fs->ix);

	if (rc < 0)
		return rc;
	rc = idx_dentry_remove(fs->ix, parent, name);
	if (rc == 0)
		rc = ino_drop_link(fs, ino, now, &fr);
	if (rc == 0)
		rc = fs_touch_dir(fs, parent, now, dir ? -1 : 0);
	rc = fs_commit_or_rollback(fs, rc);
	ino_release_finish(fs, &fr, rc == 0);
	return rc;
}

static void remove_entry(fuse_req_t req, fuse_ino_t parent, const char *name, bool dir)
{
	struct ckfs *fs = fs_req_fs(req);
	struct idx_inode a;
	uint64_t ino;
	int64_t now = ckfs_now(fs);
	int rc;

	if (fs_view_ino(parent)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	if (steps_tracker_name(fs, parent, name)) {
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
		ckpt_log("refused to unlink tracker '%s': trackers are virtual and "
			"always name the newest complete step\n", name);
		fuse_reply_err(req, EPERM);
		return;
	}
	rc = fs_in_meta(fs, parent) ? -EROFS : 0;
	if (rc == 0)
		steps_before_remove(fs, parent, name, fuse_req_ctx(req)->pid);
	if (rc == 0)
		rc = idx_dentry_lookup(fs->ix, parent, name, &ino);
	if (rc == 0)
		steps_before_change(fs, parent);
	if (rc == 0 && ino == steps_meta_ino(fs))
		rc = -EROFS;
	if (rc == 0)
		rc = idx_inode_get(fs->ix, ino, &a);
	if (rc == 0 && dir && !S_ISDIR(a.mode))
		rc = -ENOTDIR;
	if (rc == 0 && !dir && S_ISDIR(a.mode))
		rc = -EISDIR;
	if (rc == 0 && dir) {
		rc = idx_dir_is_empty(fs->ix, ino);
		rc = rc == 1 ? 0 : rc == 0 ? -ENOTEMPTY : rc;
	}
	if (rc == 0) {
		rc = remove_txn(fs, parent, name, ino, now, dir);
		/* a full disk: the index cannot grow its WAL to record the removal; give back
		 * the reserve (STORE/reserve) and try once more, so space can always be freed */
		if (rc == -ENOSPC && ckpt_repo_release_reserve(fs->repo)) {
			ckpt_log("store full: released the %llu MiB reserve to "
				"remove '%s'; it comes back once space is free\n",
				CKPT_RESERVE_BYTES >> 20, name);
			rc = remove_txn(fs, parent, name, ino, now, dir);
		}
	}
	if (rc == 0 && !dir)
		ckpt_repo_reserve(fs->repo); /* back as soon as there is room; no-op when held */
	bool shared = rc == 0 && dir && fs_shared_step_dir(fs, parent, name);

	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	if (shared) /* the other nodes' lookups no longer make it (node_dir.c) */
		node_dir_unpublish(fs, name);
	fuse_reply_err(req, -rc);
}

void fs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_entry(req, parent, name, false);
}

void fs_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_entry(req, parent, name, true);
}

/* Is dir (or one of its ancestors) equal to anc? fs->mu held. */
static int is_ancestor(struct ckfs *fs, uint64_t anc, uint64_t dir)
{
	for (int depth = 0; depth < 4096; depth++) {
		uint64_t up;
		int rc;

		if (dir == anc)
			return 1;
		if (dir == IDX_ROOT_INO)
			return 0;
		if ((rc = idx_dentry_parent(fs->ix, dir, &up, NULL, 0)) < 0)
			return rc;
		dir = up;
	}
	return -ELOOP;
}

static int do_rename(struct ckfs *fs, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		     const char *newname, unsigned int flags, struct ino_freed *fr)
{
	struct idx_inode sa, da, npa;
	uint64_t src, dst;
	bool have_dst;
	int64_t now = ckfs_now(fs);
	int rc;

	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	if ((rc = fs_check_name(newname)) < 0)
		return rc;
	if (fs_in_meta(fs, parent) || fs_in_meta(fs, newparent))
		return -EROFS;
	if (steps_tracker_name(fs, newparent, newname) || steps_tracker_name(fs, parent, name))
		return -EPERM; /* trackers are virtual: write them, do not rename them */
	if ((rc = idx_dentry_lookup(fs->ix, parent, name, &src)) < 0)
		return rc;
	if ((rc = idx_inode_get(fs->ix, src, &sa)) < 0)
		return rc;
	if ((rc = idx_inode_get(fs->ix, newparent, &npa)) < 0)
		return rc;
	if (!S_ISDIR(npa.mode))
		return -ENOTDIR;
	rc = idx_dentry_lookup(fs->ix, newparent, newname, &dst);
	if (rc < 0 && rc != -ENOENT)
		return rc;
	have_dst = rc == 0;
	if (src == steps_meta_ino(fs) || (have_dst && dst == steps_meta_ino(fs)))
		return -EROFS; /* /.ckptfs stays where it is: moved, it would be an ordinary dir */
	if (have_dst && dst == src)
		return 0; /* POSIX: same file, nothing to do */
	steps_before_change(fs, parent);
	if (newparent != parent)
		steps_before_change(fs, newparent);
	if (flags & RENAME_EXCHANGE) {
		if (!have_dst)
			return -ENOENT;
	} else if (have_dst && (flags & RENAME_NOREPLACE)) {
		return -EEXIST;
	}
	if (have_dst && (rc = idx_inode_get(fs->ix, dst, &da)) < 0)
		return rc;
	if (S_ISDIR(sa.mode) && parent != newparent) {
		rc = is_ancestor(fs, src, newparent);
		if (rc != 0)
			return rc < 0 ? rc : -EINVAL;
	}
	if (flags & RENAME_EXCHANGE) {
		if (S_ISDIR(da.mode) && parent != newparent) {
			rc = is_ancestor(fs, dst, parent);
			if (rc != 0)
				return rc < 0 ? rc : -EINVAL;
		}
	} else if (have_dst) {
		if (S_ISDIR(sa.mode) && !S_ISDIR(da.mode))
			return -ENOTDIR;
		if (!S_ISDIR(sa.mode) && S_ISDIR(da.mode))
			return -EISDIR;
		if (S_ISDIR(da.mode)) {
			rc = idx_dir_is_empty(fs->ix, dst);
			if (rc != 1)
				return rc == 0 ? -ENOTEMPTY : rc;
		}
	}

	if ((rc = idx_begin(fs->ix)) < 0)
		return rc;
	if (flags & RENAME_EXCHANGE) {
		rc = idx_dentry_remove(fs->ix, parent, name);
		if (rc == 0)
			rc = idx_dentry_remove(fs->ix, newparent, newname);
		if (rc == 0)
			rc = idx_dentry_add(fs->ix, parent, name, dst);
		if (rc == 0)
			rc = idx_dentry_add(fs->ix, newparent, newname, src);
		if (rc == 0 && parent != newparent) {
			int d = (S_ISDIR(sa.mode) ? 1 : 0) - (S_ISDIR(da.mode) ? 1 : 0);

			rc = fs_touch_dir(fs, parent, now, -d);
			if (rc == 0)
				rc = fs_touch_dir(fs, newparent, now, d);
		} else if (rc == 0) {
			rc = fs_touch_dir(fs, parent, now, 0);
		}
	} else {
		if (have_dst) {
			rc = idx_dentry_remove(fs->ix, newparent, newname);
			if (rc == 0)
				rc = ino_drop_link(fs, dst, now, fr);
			if (rc == 0 && S_ISDIR(da.mode))
				rc = fs_touch_dir(fs, newparent, now, -1);
		}
		if (rc == 0)
			rc = idx_dentry_move(fs->ix, parent, name, newparent, newname);
		if (rc == 0 && S_ISDIR(sa.mode))
			rc = steps_on_rename(fs, parent, name, src, newparent, newname);
		if (rc == 0 && parent != newparent) {
			int d = S_ISDIR(sa.mode) ? 1 : 0;

			rc = fs_touch_dir(fs, parent, now, -d);
			if (rc == 0)
				rc = fs_touch_dir(fs, newparent, now, d);
		} else if (rc == 0) {
			rc = fs_touch_dir(fs, parent, now, 0);
		}
	}
	if (rc == 0 && (rc = idx_inode_get(fs->ix, src, &sa)) == 0) {
		sa.ctime_ns = now;
		rc = idx_inode_update(fs->ix, &sa);
	}
	return fs_commit_or_rollback(fs, rc);
}

/*
 * MindSpore publishes rank_R/meta.json with NamedTemporaryFile + os.replace: the replacing file's
 * bytes become a claim on the (virtual) tracker and the temporary file goes away, as if renamed.
 * fs->mu held. Returns 0 or -errno.
 */
static int rename_into_tracker(fuse_req_t req, struct ckfs *fs, fuse_ino_t parent,
			       const char *name, fuse_ino_t newparent, int kind)
{
	struct ino_freed fr = { 0 };
	struct idx_inode a;
	struct oinode *oi;
	char buf[64 * 1024], cname[300];
	uint64_t ino;
	ssize_t n;
	int rc;

	if ((rc = idx_dentry_lookup(fs->ix, parent, name, &ino)) < 0 ||
	    (rc = idx_inode_get(fs->ix, ino, &a)) < 0)
		return rc;
	if (!S_ISREG(a.mode))
		return -EISDIR;
	if ((rc = oi_get(fs, ino, &oi)) < 0)
		return rc;
	ckpt_unlock(&fs->mu, CKPT_RANK_FS); /* oi_read may take fs->mu (bad chunk) */
	n = oi_read(fs, oi, buf, sizeof(buf), 0);
	oi_put(fs, oi);
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	if (n < 0)
		return (int)n;
	if ((rc = steps_tracker_path(fs, newparent, kind, cname, sizeof(cname))) < 0)
		return rc;
	steps_on_claim(fs, kind, cname, buf, (size_t)n, fuse_req_ctx(req)->pid);
	if ((rc = idx_begin(fs->ix)) < 0)
		return rc;
	rc = idx_dentry_remove(fs->ix, parent, name);
	if (rc == 0)
		rc = ino_drop_link(fs, ino, ckfs_now(fs), &fr);
	if (rc == 0)
		rc = fs_touch_dir(fs, parent, ckfs_now(fs), 0);
	rc = fs_commit_or_rollback(fs, rc);
	ino_release_finish(fs, &fr, rc == 0);
	return rc;
}

void fs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	struct ckfs *fs = fs_req_fs(req);
	struct ino_freed fr = { 0 };
	int rc;

	if (fs_view_ino(parent) || fs_view_ino(newparent)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (parent == IDX_ROOT_INO && newparent == IDX_ROOT_INO && steps_commit_rename(fs, name))
		cq_wait_idle(fs); /* the files closed before Orbax's commit rename are durable first,
				     so its step completes before the rename returns */
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	int ntk = flags == 0 ? steps_tracker_name(fs, newparent, newname) : 0;

	/* a per-rank tracker is written to a temporary name and renamed into place (MindSpore
	 * CheckpointMonitor): the rename is its claim */
	if (layout_desc(ntk)->tracker == LAYOUT_TRACKER_PER_RANK &&
	    !steps_tracker_name(fs, parent, name)) {
		rc = rename_into_tracker(req, fs, parent, name, newparent, ntk);
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
		fuse_reply_err(req, -rc);
		/* the kernel now has newname pointing at the renamed (dropped) inode: forget it,
		 * so the next lookup finds the virtual meta.json. After the reply, so the rename
		 * has the directory lock it needs to finish; this call waits for it. */
		if (rc == 0 && fs->fuse.se)
			fuse_lowlevel_notify_inval_entry(fs->fuse.se, newparent, newname,
							 strlen(newname));
		return;
	}
	rc = do_rename(fs, parent, name, newparent, newname, flags, &fr);
	ino_release_finish(fs, &fr, rc == 0);
	if (rc == 0) {
		uint64_t ino;

		if (newparent == IDX_ROOT_INO)
			ckpt_fault("top-renamed");
		if (idx_dentry_lookup(fs->ix, newparent, newname, &ino) == 0)
			steps_on_name(fs, newparent, newname, ino, fuse_req_ctx(req)->pid, true);
	}
	/* the old name is gone here: the other nodes' lookups no longer make it (node_dir.c).
	 * The new name is not published: a step renamed into place (Orbax's commit) reaches the
	 * other nodes as its seal, which renames their part (steps_seal_remote) */
	bool shared = rc == 0 && !(flags & RENAME_EXCHANGE) && fs_shared_step_dir(fs, parent, name);

	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	if (shared)
		node_dir_unpublish(fs, name);
	fuse_reply_err(req, -rc);
}

void fs_op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct ckfs *fs = fs_req_fs(req);
	struct idx_inode a;
	uint64_t other;
	int64_t now = ckfs_now(fs);
	int rc = fs_check_name(newname);

	if (rc == 0 && (fs_view_ino(ino) || fs_view_ino(newparent))) {
		fuse_reply_err(req, EROFS);
		return;
	}
	fs_lock(fs);
	if (rc == 0)
		rc = idx_inode_get(fs->ix, ino, &a);
	if (rc == 0 && S_ISDIR(a.mode))
		rc = -EPERM;
	if (rc == 0 && (fs_in_meta(fs, newparent) || steps_tracker_name(fs, newparent, newname)))
		rc = -EROFS;
	if (rc == 0 && a.nlink == 0)
		rc = -ENOENT;
	if (rc == 0 && idx_dentry_lookup(fs->ix, newparent, newname, &other) == 0)
		rc = -EEXIST;
	if (rc == 0)
		steps_before_change(fs, newparent);
	if (rc == 0 && (rc = idx_begin(fs->ix)) == 0) {
		a.nlink++;
		a.ctime_ns = now;
		rc = idx_inode_update(fs->ix, &a);
		if (rc == 0)
			rc = idx_dentry_add(fs->ix, newparent, newname, ino);
		if (rc == 0)
			rc = fs_touch_dir(fs, newparent, now, 0);
		rc = fs_commit_or_rollback(fs, rc);
	}
	if (rc < 0) {
		fs_unlock(fs);
		fuse_reply_err(req, -rc);
		return;
	}
	fs_reply_entry(req, fs, ino);
}

/* ---- directories ---- */

/*
 * The listing of one directory handle (fi->fh), taken when a READDIR asks for offset 0 (the
 * first after opendir, or after a rewinddir) and served from until the next: a name moved
 * meanwhile, by a user or by ckptfs itself (a slot's kept version restored under the slot's
 * name, a step set aside), is listed as the directory was, never twice and never skipped.
 * The kept version's dentry is newer than the torn one it replaces, so a listing read from the
 * index at each READDIR, after the last cookie returned, showed the slot twice
 * (tests/mount/test_slots.py test_3b). POSIX leaves names added or removed after opendir or
 * rewinddir unspecified; tmpfs and ext4 show each name at most once.
 *
 * Entry i's offset (the d_off a READDIR continues from) is i + 1, so a READDIR at offset off
 * starts at entry off with no search. mu serialises the READDIRs of one handle (the kernel
 * does too: struct fuse_file's readdir.lock) and is held across the reply.
 */
struct snap_ent {
	uint64_t ino;
	uint32_t mode; /* S_IFMT bits */
	uint32_t name; /* offset in names of the NUL-terminated name */
};

struct dirsnap {
	pthread_mutex_t mu;
	bool taken;
	struct snap_ent *ents;
	size_t n, ecap;
	char *names;
	size_t nlen, ncap;
	uint64_t hide;
};

/* Append one entry; -ENOMEM. */
static int snap_add(struct dirsnap *d, const char *name, uint64_t ino, uint32_t mode)
{
	size_t len = strlen(name) + 1;

	if (ckpt_grow(&d->ents, &d->ecap, d->n, sizeof(*d->ents)) < 0 || d->nlen > UINT32_MAX)
		return -ENOMEM;
	while (d->ncap - d->nlen < len) {
		size_t nc = d->ncap ? 2 * d->ncap : 4096;
		char *b = realloc(d->names, nc);

		if (!b)
			return -ENOMEM;
		d->names = b;
		d->ncap = nc;
	}
	memcpy(d->names + d->nlen, name, len);
	d->ents[d->n++] = (struct snap_ent){ .ino = ino, .mode = mode & S_IFMT,
					     .name = (uint32_t)d->nlen };
	d->nlen += len;
	return 0;
}

static int snap_add_index(const char *name, uint64_t ino, uint32_t mode, int64_t cookie,
			  void *arg)
{
	struct dirsnap *d = arg;

	(void)cookie;
	if (ino == d->hide)
		return 0; /* /.ckptfs: reachable by name, not listed (like ZFS's .zfs) */
	return snap_add(d, name, ino, mode);
}

/* fs_view_list's sink: one entry of a view directory. */
static int snap_add_view(void *arg, const char *name, uint64_t ino, uint32_t mode)
{
	return snap_add(arg, name, ino, mode);
}

/* Take directory ino's listing into d: ".", "..", the index's entries, then the virtual files
 * of /.ckptfs, a MindFormers 1.0 rank directory's meta.json and the root's trackers. fs->mu
 * held. 0, or -ENOMEM or the index's -errno (d then holds nothing). */
static int snap_take(struct ckfs *fs, struct dirsnap *d, fuse_ino_t ino)
{
	uint64_t up = IDX_ROOT_INO;
	int rc;

	d->nlen = d->n = 0;
	d->taken = false;
	if (fs_view_ino(ino)) {
		if ((rc = fs_view_list(fs, ino, snap_add_view, d)) < 0) {
			d->nlen = d->n = 0;
			return rc;
		}
		d->taken = true;
		return 0;
	}
	d->hide = ino == IDX_ROOT_INO ? steps_meta_ino(fs) : 0;
	if (ino != IDX_ROOT_INO)
		idx_dentry_parent(fs->ix, ino, &up, NULL, 0);
	if ((rc = snap_add(d, ".", ino, S_IFDIR)) < 0 || (rc = snap_add(d, "..", up, S_IFDIR)) < 0)
		return rc;
	rc = idx_dir_list(fs->ix, ino, 0, snap_add_index, d);
	for (int k = 0; rc == 0 && ino == steps_meta_ino(fs) && k < META_FILE_COUNT; k++)
		rc = snap_add(d, fs_meta_file_name(k), VINO_META(k), S_IFREG);
	if (rc == 0 && ino == steps_meta_ino(fs))
		rc = snap_add(d, FS_VIEW_DIR, VINO_SNAPS, S_IFDIR);
	if (rc == 0 && steps_rank_dir(fs, ino) >= 0) {
		char tmp[LAYOUT_TRACKER_MAX];
		int rk = (int)layout_per_rank_kind();
		uint64_t v = steps_tracker_vino(fs, ino, rk);

		if (v && steps_vcontent(fs, v, tmp, sizeof(tmp), NULL) >= 0)
			rc = snap_add(d, layout_desc(rk)->tracker_name, v, S_IFREG);
	}
	for (int k = 1; rc == 0 && ino == IDX_ROOT_INO && k < LAYOUT_KIND_COUNT; k++) {
		char name[256], other[256];
		bool dup = false;

		if (steps_vname(fs, k, name, sizeof(name)) < 0)
			continue;
		/* layouts sharing a tracker (Megatron, MindFormers 2.0) list it once */
		for (int j = 1; j < k && !dup; j++)
			dup = steps_vname(fs, j, other, sizeof(other)) >= 0 && !strcmp(name, other);
		if (!dup)
			rc = snap_add(d, name, VINO_BASE + (uint64_t)k, S_IFREG);
	}
	if (rc < 0) {
		d->nlen = d->n = 0;
		return rc;
	}
	d->taken = true;
	return 0;
}

/*
 * Entry i of directory dir as READDIRPLUS gives it: with its attributes and a kernel reference
 * (e->ino set, the lookup count incremented) when it is a directory of the index still at that
 * name, so the kernel keeps name and attributes ATTR_TIMEOUT as after a LOOKUP, and an `ls -l`
 * or `du` of the root sends no LOOKUP per step; else with none (e->ino 0: the kernel lists the
 * name and caches nothing):
 *   - ".", "..";
 *   - a virtual file (a LOOKUP gives its own timeouts, op_lookup);
 *   - a name gone since the listing was taken: given, the kernel would reach the step moved
 *     to quarantine through it (tests/mount/test_slots.py test_3);
 *   - a regular file or symlink: its attributes cost a query of its chunks (st_blocks,
 *     fs_stat_locked), which made a listing of 10^3 files five times slower
 *     (tests/bench/RESULTS.md "A listing per directory handle"), and a file being written
 *     changes them at every write anyway.
 * fs->mu held.
 */
static void snap_entry_plus(struct ckfs *fs, fuse_ino_t dir, const struct dirsnap *d, size_t i,
			    struct fuse_entry_param *e)
{
	const struct snap_ent *s = &d->ents[i];
	uint64_t now;

	memset(e, 0, sizeof(*e));
	e->attr.st_ino = s->ino;
	e->attr.st_mode = s->mode;
	if (i < 2 || s->ino >= VINO_BASE || !S_ISDIR(s->mode) ||
	    idx_dentry_lookup(fs->ix, dir, d->names + s->name, &now) < 0 || now != s->ino ||
	    fs_stat_locked(fs, s->ino, &e->attr) < 0)
		return;
	e->ino = s->ino;
	e->attr_timeout = ATTR_TIMEOUT;
	e->entry_timeout = ATTR_TIMEOUT;
}

/* READDIR and READDIRPLUS of handle fi at offset off: whole entries up to size bytes. */
static void dir_serve(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		      struct fuse_file_info *fi, bool plus)
{
	struct ckfs *fs = fs_req_fs(req);
	struct dirsnap *d = (struct dirsnap *)(uintptr_t)fi->fh;
	char *buf = malloc(size ? size : 1);
	/* the inodes given a kernel reference, to give back if the reply is not delivered: a
	 * READDIRPLUS entry is at least a struct fuse_entry_out (128 bytes) and a name */
	uint64_t *held = plus ? malloc((size / 128 + 1) * sizeof(*held)) : NULL;
	size_t len = 0, i, first, refs = 0;
	int rc = buf && (held || !plus) ? 0 : -ENOMEM;

	ckpt_lock(&d->mu, CKPT_RANK_DIRSNAP);
	if (rc == 0 && (off == 0 || !d->taken)) { /* the first, a rewinddir, or a seek before */
		fs_lock(fs);
		if (!fs_view_ino(ino)) /* browsing the view judges no step (view.c) */
			fs_settle_for_reader(fs);
		rc = snap_take(fs, d, ino);
		fs_unlock(fs);
	}
	if (rc < 0) {
		ckpt_unlock(&d->mu, CKPT_RANK_DIRSNAP);
		free(buf);
		free(held);
		fuse_reply_err(req, -rc);
		return;
	}
	first = off < 0 || (uint64_t)off > d->n ? d->n : (size_t)off;
	if (plus)
		fs_lock(fs);
	for (i = first; i < d->n; i++) {
		const char *name = d->names + d->ents[i].name;
		size_t n;

		if (plus) {
			struct fuse_entry_param e;

			snap_entry_plus(fs, ino, d, i, &e);
			n = fuse_add_direntry_plus(req, buf + len, size - len, name, &e,
						   (off_t)i + 1);
			if (n <= size - len && e.ino) {
				ino_lookup_inc(fs, e.ino);
				held[refs++] = e.ino;
			}
		} else {
			struct stat st = { .st_ino = d->ents[i].ino, .st_mode = d->ents[i].mode };

			n = fuse_add_direntry(req, buf + len, size - len, name, &st, (off_t)i + 1);
		}
		if (n > size - len)
			break;
		len += n;
	}
	if (plus)
		fs_unlock(fs);
	if (fuse_reply_buf(req, buf, len) != 0 && refs) {
		/* not delivered (interrupted): the kernel took none of the references */
		ckpt_lock(&fs->mu, CKPT_RANK_FS);
		for (size_t j = 0; j < refs; j++)
			ino_forget_locked(fs, held[j], 1);
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	}
	ckpt_unlock(&d->mu, CKPT_RANK_DIRSNAP);
	free(buf);
	free(held);
}

void fs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckfs *fs = fs_req_fs(req);
	struct dirsnap *d = NULL;
	struct idx_inode a;
	int rc;

	fs_lock(fs);
	if (fs_view_ino(ino)) { /* no settling, nothing to forget: the view changes nothing */
		struct stat st;

		rc = fs_view_stat(fs, ino, &st);
		if (rc == 0 && !S_ISDIR(st.st_mode))
			rc = -ENOTDIR;
		fs_unlock(fs);
		goto opened;
	}
	rc = steps_is_vino(ino) ? -ENOTDIR : idx_inode_get(fs->ix, ino, &a);
	if (rc == 0 && !S_ISDIR(a.mode))
		rc = -ENOTDIR;
	if (rc == 0)
		fs_settle_for_reader(fs);
	fs_unlock(fs);
	/* The names the settle moved are forgotten by the kernel before the listing starts, so
	 * that a name the listing leaves out is not reached through the kernel's cache either
	 * (tests/mount/test_slots.py test_3). Here, not in readdir: the kernel holds no lock of
	 * the directory during an open, and holds it during a readdir. */
	if (rc == 0)
		fs_flush_inval(fs);
opened:
	if (rc == 0 && !(d = calloc(1, sizeof(*d))))
		rc = -ENOMEM;
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	pthread_mutex_init(&d->mu, NULL);
	fi->fh = (uintptr_t)d;
	if (fuse_reply_open(req, fi) != 0) { /* not delivered (interrupted): no RELEASEDIR */
		pthread_mutex_destroy(&d->mu);
		free(d);
	}
}

void fs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	dir_serve(req, ino, size, off, fi, false);
}

void fs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	dir_serve(req, ino, size, off, fi, true);
}

void fs_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct dirsnap *d = (struct dirsnap *)(uintptr_t)fi->fh;

	(void)ino;
	/* the last READDIR's thread may still hold mu after its reply let the close through: wait
	 * for it, as libfuse's high-level API does (lib/fuse.c, fuse_lib_releasedir) */
	ckpt_lock(&d->mu, CKPT_RANK_DIRSNAP);
	ckpt_unlock(&d->mu, CKPT_RANK_DIRSNAP);
	pthread_mutex_destroy(&d->mu);
	free(d->ents);
	free(d->names);
	free(d);
	fuse_reply_err(req, 0);
}

void fs_op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0); /* every namespace change is durable when it returns */
}