/*
 * ops.c — the FUSE low-level operation table and the operations that are neither namespace
 * changes (ops_dir.c) nor file content (ops_file.c): init and destroy, lookup, forget,
 * getattr, setattr, readlink, statfs and the extended attributes; plus the helpers the three
 * files share (ops_int.h).
 *
 * libfuse conventions (passthrough_hp.cc): handlers reply exactly once; errors are replied as a
 * positive errno; helpers here return -errno. Every namespace change is one index transaction
 * (durable when it returns: synchronous=FULL; a file created by open(O_CREAT) is durable at its
 * first close or fsync: ops_dir.c).
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

static void ts_of(int64_t ns, struct timespec *ts);

/* Which /.ckptfs file a virtual inode is, or -1. */
int fs_meta_of(uint64_t ino)
{
	return ino >= VINO_META(0) && ino < VINO_META(META_FILE_COUNT) ? (int)(ino - VINO_META(0))
								       : -1;
}

/* Attributes of /.ckptfs/<file which>: the size of a rendering with the figures stats
 * (fs_meta_stats' kept ones, or NULL). fs->mu held. */
static int meta_stat(struct ckfs *fs, int which, const struct idx_stats *stats, struct stat *st)
{
	struct idx_inode a;
	char *buf = NULL;
	size_t len = 0;
	int rc = fs_meta_render(fs, which, stats, &buf, &len);

	free(buf);
	if (rc < 0 || (rc = idx_inode_get(fs->ix, steps_meta_ino(fs), &a)) < 0)
		return rc;
	memset(st, 0, sizeof(*st));
	st->st_ino = VINO_META(which);
	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	st->st_uid = a.uid;
	st->st_gid = a.gid;
	st->st_size = (off_t)len;
	st->st_blksize = 4096;
	ts_of(ckpt_now_ns(), &st->st_mtim);
	st->st_atim = st->st_ctim = st->st_mtim;
	return 0;
}

/* Is regular file or directory ino inside /.ckptfs? fs->mu held. */
bool fs_in_meta(struct ckfs *fs, uint64_t ino)
{
	char p[64];
	int n;

	if (fs_view_ino(ino))
		return true;
	if (steps_in_meta(fs, ino))
		return true;
	n = idx_path(fs->ix, ino, p, sizeof(p));
	return n > 0 && strncmp(p, "/.ckptfs/", 9) == 0;
}

struct ckfs *fs_req_fs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct ckfs *fs = fs_req_fs(req);

	if (!fs_view_ino(ino)) { /* the view takes no reference (view.c, invariant 3) */
		ckpt_lock(&fs->mu, CKPT_RANK_FS);
		ino_forget_locked(fs, ino, nlookup);
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	}
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct ckfs *fs = fs_req_fs(req);

	/* the inodes left without a reference go in one transaction (ino_reap_many) */
	uint64_t *gone = malloc(count * sizeof(*gone));
	size_t k = 0;

	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	for (size_t i = 0; i < count; i++) {
		if (fs_view_ino(forgets[i].ino) ||
		    !ino_forget_count(fs, forgets[i].ino, forgets[i].nlookup))
			continue;
		if (gone)
			gone[k++] = forgets[i].ino;
		else /* no memory for the list: one at a time */
			ino_reap_many(fs, &forgets[i].ino, 1);
	}
	ino_reap_many(fs, gone, k);
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	free(gone);
	fuse_reply_none(req);
}

static void ts_of(int64_t ns, struct timespec *ts)
{
	ts->tv_sec = ns / 1000000000;
	ts->tv_nsec = ns % 1000000000;
}

/* The attributes of inode a->ino into st; st_blocks left to the caller. fs->mu held. */
static void stat_of_attr(struct ckfs *fs, const struct idx_inode *a, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = a->ino;
	st->st_mode = a->mode;
	st->st_nlink = a->nlink;
	if (a->ino == steps_meta_ino(fs))
		st->st_nlink++; /* its virtual subdirectory snapshots (view.c) */
	st->st_uid = a->uid;
	st->st_gid = a->gid;
	st->st_size = (off_t)a->size;
	st->st_rdev = a->rdev;
	st->st_blksize = 1 << 20;
	ts_of(a->atime_ns, &st->st_atim);
	ts_of(a->mtime_ns, &st->st_mtim);
	ts_of(a->ctime_ns, &st->st_ctim);
}

void fs_stat_created(struct ckfs *fs, const struct idx_inode *a, struct stat *st)
{
	assert(S_ISREG(a->mode) && a->size == 0);
	stat_of_attr(fs, a, st);
	st->st_blocks = 0;
}

/* Fill st from the index (+ the open-file overlay). Caller holds fs->mu. */
int fs_stat_locked(struct ckfs *fs, uint64_t ino, struct stat *st)
{
	struct idx_inode a;
	uint64_t stored = 0;
	int rc = idx_inode_get(fs->ix, ino, &a);

	if (rc < 0)
		return rc;
	stat_of_attr(fs, &a, st);
	if (S_ISREG(a.mode)) {
		struct oinode *oi = oi_find(fs, ino);

		if (idx_file_stored_bytes(fs->ix, ino, &stored) < 0)
			stored = 0;
		if (oi && atomic_load(&oi->ov_dirty)) {
			uint64_t sz = atomic_load(&oi->ov_size);
			uint64_t w = atomic_load(&oi->ov_written);
			int64_t mt = atomic_load(&oi->ov_mtime);

			st->st_size = (off_t)sz;
			ts_of(mt, &st->st_mtim);
			/* a write moves the ctime to its mtime; a setattr since (a chmod, a utimensat
			 * of the atime alone) stored a later ctime in the index, which stays shown,
			 * as idx_file_set_content keeps the later of the two at the commit */
			ts_of(a.ctime_ns > mt ? a.ctime_ns : mt, &st->st_ctim);
			if (w > sz)
				w = sz;
			if (stored < w)
				stored = w; /* not yet compressed: the bytes written, not the holes */
		}
		st->st_blocks = (blkcnt_t)((stored + 511) / 512);
	} else {
		st->st_blocks = (blkcnt_t)((a.size + 511) / 512);
	}
	return 0;
}

/* Reply an entry for ino, its name and attributes kept ATTR_TIMEOUT; leaves fs_lock's section. */
void fs_reply_entry(fuse_req_t req, struct ckfs *fs, uint64_t ino)
{
	struct fuse_entry_param e = { 0 };
	int rc = fs_stat_locked(fs, ino, &e.attr);

	if (rc < 0) {
		fs_unlock(fs);
		fuse_reply_err(req, -rc);
		return;
	}
	e.ino = ino;
	e.attr_timeout = ATTR_TIMEOUT;
	e.entry_timeout = ATTR_TIMEOUT;
	ino_lookup_inc(fs, ino);
	fs_unlock(fs);
	if (fuse_reply_entry(req, &e) == -ENOENT) {
		ckpt_lock(&fs->mu, CKPT_RANK_FS); /* interrupted: the kernel took no reference */
		ino_forget_locked(fs, ino, 1);
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	}
}

int fs_check_name(const char *name)
{
	size_t len = strlen(name);

	if (len == 0)
		return -ENOENT;
	if (len > NAME_MAX)
		return -ENAMETOOLONG;
	return 0;
}

void fs_touch_dir_attr(struct idx_inode *a, int64_t now, int nlink_delta)
{
	a->mtime_ns = a->ctime_ns = now;
	a->nlink = (uint32_t)((int64_t)a->nlink + nlink_delta);
}

/* Set mtime and ctime of directory dir to now. In a transaction, fs->mu held. */
int fs_touch_dir(struct ckfs *fs, uint64_t dir, int64_t now, int nlink_delta)
{
	struct idx_inode a;
	int rc = idx_inode_get(fs->ix, dir, &a);

	if (rc < 0)
		return rc;
	fs_touch_dir_attr(&a, now, nlink_delta);
	return idx_inode_update(fs->ix, &a);
}

int fs_commit_or_rollback(struct ckfs *fs, int rc)
{
	if (rc == 0)
		rc = idx_commit(fs->ix);
	if (rc < 0)
		idx_rollback(fs->ix);
	return rc;
}

/* ---- lifecycle ---- */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
	if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)
		conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
	if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
		conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
	/* READDIRPLUS on every READDIR of a handle, not only at offset 0 or after a LOOKUP advised
	 * it (the kernel's auto mode, fs/fuse/readdir.c fuse_use_readdirplus): a step directory
	 * listed by ls -l then needs no LOOKUP (ls of a root of 10^4 steps 2.3x faster than in
	 * auto mode: tests/bench/RESULTS.md "A listing per directory handle"). */
	conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
	/* Leave clearing set-user-ID and set-group-ID on write, truncate and chown by a caller
	 * without CAP_FSETID to the kernel (a setattr of the mode), whatever libfuse's default:
	 * we do not know the caller's capabilities. */
	conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
	/* POSIX ACLs: the kernel caches and enforces them, ckptfs stores them and keeps the mode
	 * and inheritance in step (xattr.c); the umask is then ours to apply (fs_make_node),
	 * since a default ACL replaces it */
	if ((conn->capable & FUSE_CAP_POSIX_ACL) && (conn->capable & FUSE_CAP_DONT_MASK))
		conn->want |= FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK;
	conn->max_readahead = 1 << 20;
}

static void op_destroy(void *userdata)
{
	struct ckfs *fs = userdata;

	cq_stop(fs); /* the commits of closed files first: they report to the step engine */
	steps_stop(fs);
	/* Make every dirty file durable (a lazy unmount may leave files open). */
	for (;;) {
		struct oinode *dirty;

		ckpt_lock(&fs->mu, CKPT_RANK_FS);
		dirty = oi_next_dirty(fs);
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
		if (!dirty)
			break;
		int rc = oi_commit(fs, dirty);

		if (rc < 0) {
			ckpt_log("cannot make inode %llu durable at unmount: %s\n",
				(unsigned long long)dirty->ino, strerror(-rc));
			dirty->err = rc; /* do not retry forever */
		}
		oi_put(fs, dirty);
	}
	/* The kernel holds no inode any more: delete what is unlinked or was never committed. */
	struct ino_freed fr = { 0 };
	bool ok;

	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	steps_reap(fs, true); /* nobody writes any more: judge every unfinished step */
	ok = idx_begin(fs->ix) == 0 && idx_recover(fs->ix, ino_release_collect, &fr) >= 0 &&
	     idx_commit(fs->ix) == 0;
	if (!ok)
		idx_rollback(fs->ix);
	ino_release_finish(fs, &fr, ok);
	ino_lookups_free(fs);
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
}

/* ---- attributes ---- */

/*
 * A step directory another node made during a save (node_dir.c): ask the remote, and make it
 * here as this request's process would have. fs->mu held, dropped while the remote answers.
 * Returns 0 and *ino, or -ENOENT (not published, or the remote did not answer).
 */
static int lookup_shared_dir(fuse_req_t req, struct ckfs *fs, const char *name, uint64_t *ino)
{
	mode_t mode = 0;
	int rc;

	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	rc = node_dir_lookup(fs, name, &mode);
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	if (rc <= 0)
		return -ENOENT;
	rc = fs_make_node(req, fs, IDX_ROOT_INO, name, S_IFDIR | mode, 0, NULL, false, ino, NULL);
	if (rc == -EEXIST) /* made meanwhile, by a rank here or another lookup */
		rc = idx_dentry_lookup(fs->ix, IDX_ROOT_INO, name, ino);
	return rc;
}

/*
 * A lookup or listing of the root (or of InternEvo's `snapshot/`): judge first every unfinished
 * step whose writers are all gone, once the files they closed are committed. fs->mu held; it is
 * released while waiting for the commit queue.
 */
void fs_settle_for_reader(struct ckfs *fs)
{
	if (!steps_settle_due(fs))
		return;
	if (cq_busy(fs)) {
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
		cq_wait_idle(fs);
		ckpt_lock(&fs->mu, CKPT_RANK_FS);
	}
	steps_settle_now(fs);
}

/*
 * A lookup in /.ckptfs/snapshots (view.c): no settling, no wait for the commit queue, no kernel
 * reference on the index inode; entry timeout 0, so every path walk asks which step a name is
 * now (a name moves to NAME@ID when a newer version completes, leaves with retention).
 */
static void view_lookup(fuse_req_t req, struct ckfs *fs, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e = { 0 };
	uint64_t ino;
	int rc;

	fs_lock(fs);
	rc = fs_view_lookup(fs, parent, name, &ino);
	if (rc == 0)
		rc = fs_view_stat(fs, ino, &e.attr);
	fs_unlock(fs);
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	e.ino = ino;
	e.attr_timeout = ATTR_TIMEOUT;
	e.entry_timeout = 0;
	fuse_reply_entry(req, &e);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ckfs *fs = fs_req_fs(req);
	struct idx_stats mst;
	bool mstats = false;
	uint64_t ino;
	int rc = fs_check_name(name);

	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	if (fs_view_ino(parent) ||
	    (parent == steps_meta_ino(fs) && strcmp(name, FS_VIEW_DIR) == 0)) {
		view_lookup(req, fs, parent, name);
		return;
	}
	if (parent == steps_meta_ino(fs)) /* the figures kept, for a size: never a scan (meta.c) */
		mstats = fs_meta_stats(fs, fs_meta_file_by_name(name), false, &mst) > 0;
	fs_lock(fs);
	bool step_dir = steps_dir_name(fs, parent, name);

	if (parent == IDX_ROOT_INO || step_dir)
		fs_settle_for_reader(fs);
	if (cq_busy(fs) && (parent == steps_meta_ino(fs) || steps_tracker_name(fs, parent, name))) {
		/* a tracker or status read waits for the commits of closed files (commit.c) */
		fs_unlock(fs);
		cq_wait_idle(fs);
		fs_lock(fs);
	}
	if (parent == steps_meta_ino(fs) && fs_meta_file_by_name(name) >= 0) {
		struct fuse_entry_param e = { .ino = VINO_META(fs_meta_file_by_name(name)) };

		rc = meta_stat(fs, fs_meta_file_by_name(name), mstats ? &mst : NULL, &e.attr);
		fs_unlock(fs);
		if (rc < 0)
			fuse_reply_err(req, -rc);
		else
			fuse_reply_entry(req, &e);
		return;
	}
	rc = steps_vlookup(fs, parent, name, &ino);
	if (rc != 0) {
		struct fuse_entry_param e = { .ino = ino };

		if (rc > 0)
			rc = steps_vstat(fs, ino, &e.attr);
		fs_unlock(fs);
		/* entry timeout 0: every path walk asks again, so what the name resolves to and
		 * the attributes stat(2) and open(2) see are those of now. The attributes are kept
		 * ATTR_TIMEOUT, as any file's, for the permission checks and fstat(2)s after the
		 * walk: a tracker read cost 4 getattrs of 10 requests. The content a reader gets
		 * is its open's (open_tracker; direct_io: the size kept does not bound a read). */
		e.attr_timeout = ATTR_TIMEOUT;
		if (rc < 0) /* a tracker with no complete step does not exist */
			fuse_reply_err(req, -rc);
		else
			fuse_reply_entry(req, &e);
		return;
	}
	rc = idx_dentry_lookup(fs->ix, parent, name, &ino);
	if (rc == -ENOENT && fs_shared_step_dir(fs, parent, name))
		rc = lookup_shared_dir(req, fs, name, &ino);
	if (rc < 0) {
		fs_unlock(fs);
		fuse_reply_err(req, -rc);
		return;
	}
	/* a step directory's name may move to quarantine, leave with retention or get a kept
	 * version back at any time (steps.c): the kernel keeps it ATTR_TIMEOUT as any name, and
	 * the step engine makes it forget such a name as soon as it moves (steps_inval_queue) */
	fs_reply_entry(req, fs, ino);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckfs *fs = fs_req_fs(req);
	struct idx_stats mst;
	bool mstats = false;
	struct stat st;
	int rc;

	if (fs_view_ino(ino)) {
		fs_lock(fs);
		rc = fs_view_stat(fs, ino, &st);
		fs_unlock(fs);
		if (rc < 0)
			fuse_reply_err(req, -rc);
		else
			fuse_reply_attr(req, &st, ATTR_TIMEOUT);
		return;
	}
	if (ino >= VINO_BASE)
		cq_wait_idle(fs); /* trackers and /.ckptfs files: see op_lookup */
	if (fs_meta_of(ino) >= 0)
		mstats = fs_meta_stats(fs, fs_meta_of(ino), false, &mst) > 0;
	fs_lock(fs);
	if (fs_meta_of(ino) >= 0)
		rc = meta_stat(fs, fs_meta_of(ino), mstats ? &mst : NULL, &st);
	else
		rc = steps_is_vino(ino) ? steps_vstat(fs, ino, &st) : fs_stat_locked(fs, ino, &st);
	fs_unlock(fs);
	if (rc < 0)
		fuse_reply_err(req, -rc);
	else
		/* a tracker's: see op_lookup; /.ckptfs files change at every read */
		fuse_reply_attr(req, &st, ino < VINO_BASE || steps_is_vino(ino) ? ATTR_TIMEOUT : 0);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct ckfs *fs = fs_req_fs(req);
	struct idx_inode a;
	struct stat st;
	int64_t now = ckfs_now(fs);
	int rc;

	if (fs_meta_of(ino) >= 0 || fs_view_ino(ino)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (steps_is_vino(ino)) {
		/* trackers are virtual: a truncate before a write, or a chmod, changes nothing */
		ckpt_lock(&fs->mu, CKPT_RANK_FS);
		rc = steps_vstat(fs, ino, &st);
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
		if (rc < 0)
			fuse_reply_err(req, -rc);
		else
			fuse_reply_attr(req, &st, 0);
		return;
	}
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	rc = fs_in_meta(fs, ino) ? -EROFS : 0;
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	if (rc < 0)
		goto fail;
	if (to_set & FUSE_SET_ATTR_SIZE) {
		struct oinode *oi;

		ckpt_lock(&fs->mu, CKPT_RANK_FS);
		/* an InternEvo slot keeps its complete version; the step knows its writer */
		steps_before_write(fs, ino, fuse_req_ctx(req)->pid);
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
		if (fi) {
			struct fh *h = (struct fh *)(uintptr_t)fi->fh;

			h->wrote = true;
			oi = h->oi;
			rc = oi_truncate(fs, oi, (uint64_t)attr->st_size);
		} else {
			ckpt_lock(&fs->mu, CKPT_RANK_FS);
			rc = oi_get(fs, ino, &oi);
			ckpt_unlock(&fs->mu, CKPT_RANK_FS);
			if (rc < 0)
				goto fail;
			rc = oi_truncate(fs, oi, (uint64_t)attr->st_size);
			if (rc == 0)
				rc = oi_commit(fs, oi); /* truncate(2) without an open file: durable now */
			oi_put(fs, oi);
		}
		if (rc < 0)
			goto fail;
	}
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	rc = idx_inode_get(fs->ix, ino, &a);
	if (rc < 0)
		goto fail_locked;
	/*
	 * A request with no attribute at all is the kernel's ATTR_CTIME alone (chown(f, -1, -1):
	 * FUSE carries FATTR_CTIME only with a write-back cache): the ctime moves, as on ext4.
	 */
	if (to_set == 0 || (to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID |
				      FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME |
				      FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW |
				      FUSE_SET_ATTR_CTIME))) {
		if (to_set & FUSE_SET_ATTR_MODE)
			a.mode = (a.mode & S_IFMT) | (attr->st_mode & 07777);
		if (to_set & FUSE_SET_ATTR_UID)
			a.uid = attr->st_uid;
		if (to_set & FUSE_SET_ATTR_GID)
			a.gid = attr->st_gid;
		if (to_set & FUSE_SET_ATTR_ATIME_NOW)
			a.atime_ns = now;
		else if (to_set & FUSE_SET_ATTR_ATIME)
			a.atime_ns = (int64_t)attr->st_atim.tv_sec * 1000000000 + attr->st_atim.tv_nsec;
		if (to_set & FUSE_SET_ATTR_MTIME_NOW)
			a.mtime_ns = now;
		else if (to_set & FUSE_SET_ATTR_MTIME)
			a.mtime_ns = (int64_t)attr->st_mtim.tv_sec * 1000000000 + attr->st_mtim.tv_nsec;
		a.ctime_ns = now;
		if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW)) {
			struct oinode *oi = oi_find(fs, ino);

			if (oi)
				atomic_store(&oi->ov_mtime, a.mtime_ns);
		}
		rc = idx_begin(fs->ix);
		if (rc == 0)
			rc = idx_inode_update(fs->ix, &a);
		if (rc == 0 && (to_set & FUSE_SET_ATTR_MODE))
			rc = fs_acl_chmod(fs, ino, a.mode); /* an access ACL follows the mode */
		if ((rc = fs_commit_or_rollback(fs, rc)) < 0)
			goto fail_locked;
	}
	rc = fs_stat_locked(fs, ino, &st);
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	if (rc < 0)
		goto fail;
	fuse_reply_attr(req, &st, ATTR_TIMEOUT);
	return;
fail_locked:
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
fail:
	fuse_reply_err(req, -rc);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct ckfs *fs = fs_req_fs(req);
	char buf[PATH_MAX + 1];
	uint64_t real = ino; /* left as ino when a view inode's step left the view */
	int rc;

	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	rc = fs_view_ino(ino) ? fs_view_real(fs, ino, &real) : 0;
	if (rc == 0)
		rc = idx_symlink_get(fs->ix, real, buf, sizeof(buf));
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	if (rc == -ENOENT && fs_view_ino(ino) && real == ino)
		fuse_reply_err(req, ENOENT); /* its step left the view */
	else if (rc < 0)
		fuse_reply_err(req, rc == -ENOENT ? EINVAL : -rc);
	else
		fuse_reply_readlink(req, buf);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct ckfs *fs = fs_req_fs(req);
	struct statvfs sv;

	if (statvfs(fs->repo->root, &sv) < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	sv.f_namemax = NAME_MAX;
	fuse_reply_statfs(req, &sv);
}

/* ---- extended attributes (xattr.c keeps them) ---- */

/*
 * The inode whose extended attributes a read of ino's gets: ino, or the index inode behind a
 * file of /.ckptfs/snapshots (its attributes and ACLs are the step's, read-only). fs->mu not
 * held. 0 and *ret, or -ENOENT (its step left the view).
 */
static int xa_source(struct ckfs *fs, fuse_ino_t ino, uint64_t *ret)
{
	int rc = 0;

	*ret = ino;
	if (fs_view_ino(ino) && ino != VINO_SNAPS) {
		ckpt_lock(&fs->mu, CKPT_RANK_FS);
		rc = fs_view_real(fs, ino, ret);
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	}
	return rc;
}

/* A virtual inode (trackers, /.ckptfs) has no attributes and takes none. fs->mu not held. */
static bool xa_virtual(struct ckfs *fs, fuse_ino_t ino)
{
	bool v;

	if (ino >= VINO_BASE)
		return true;
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	v = fs_in_meta(fs, ino);
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	return v;
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	struct ckfs *fs = fs_req_fs(req);
	int f = (flags & XATTR_CREATE ? IDX_XATTR_CREATE : 0) |
		(flags & XATTR_REPLACE ? IDX_XATTR_REPLACE : 0);
	int rc;

	if (flags & ~(XATTR_CREATE | XATTR_REPLACE))
		rc = -EINVAL;
	else if (xa_virtual(fs, ino))
		rc = ino >= VINO_BASE && !fs_view_ino(ino) ? -EPERM : -EROFS;
	else
		rc = fs_xattr_set(fs, ino, name, value, size, f);
	fuse_reply_err(req, -rc);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct ckfs *fs = fs_req_fs(req);
	char *buf = NULL;
	uint64_t src;
	int rc;

	if ((rc = xa_source(fs, ino, &src)) < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	if (src == ino && xa_virtual(fs, ino)) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	if (size && !(buf = malloc(size))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	rc = fs_xattr_get(fs, src, name, buf, size);
	if (rc < 0)
		fuse_reply_err(req, -rc);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)rc);
	else
		fuse_reply_buf(req, buf, (size_t)rc);
	free(buf);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct ckfs *fs = fs_req_fs(req);
	char *buf = NULL;
	uint64_t src;
	ssize_t rc;

	if ((rc = xa_source(fs, ino, &src)) < 0) {
		fuse_reply_err(req, (int)-rc);
		return;
	}
	if (src == ino && xa_virtual(fs, ino)) {
		if (size)
			fuse_reply_buf(req, NULL, 0);
		else
			fuse_reply_xattr(req, 0);
		return;
	}
	if (size && !(buf = malloc(size))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	rc = fs_xattr_list(fs, src, buf, size);
	if (rc < 0)
		fuse_reply_err(req, (int)-rc);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)rc);
	else
		fuse_reply_buf(req, buf, (size_t)rc);
	free(buf);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct ckfs *fs = fs_req_fs(req);
	int rc;

	if (xa_virtual(fs, ino))
		rc = ino >= VINO_BASE && !fs_view_ino(ino) ? -EPERM : -EROFS;
	else
		rc = fs_xattr_remove(fs, ino, name);
	fuse_reply_err(req, -rc);
}

const struct fuse_lowlevel_ops fs_ops = {
	.init = op_init,
	.destroy = op_destroy,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.readlink = op_readlink,
	.mknod = fs_op_mknod,
	.mkdir = fs_op_mkdir,
	.unlink = fs_op_unlink,
	.rmdir = fs_op_rmdir,
	.symlink = fs_op_symlink,
	.rename = fs_op_rename,
	.link = fs_op_link,
	.open = fs_op_open,
	.read = fs_op_read,
	.write = fs_op_write,
	.flush = fs_op_flush,
	.release = fs_op_release,
	.fsync = fs_op_fsync,
	.opendir = fs_op_opendir,
	.readdir = fs_op_readdir,
	.readdirplus = fs_op_readdirplus,
	.releasedir = fs_op_releasedir,
	.fsyncdir = fs_op_fsyncdir,
	.statfs = op_statfs,
	.create = fs_op_create,
	.fallocate = fs_op_fallocate,
	.lseek = fs_op_lseek,
	.setxattr = op_setxattr,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.removexattr = op_removexattr,
};
