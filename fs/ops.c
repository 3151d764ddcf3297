/*
 * ops.c — the FUSE low-level operations: namespace (lookup, mkdir, rename, ...) in the index,
 * file content through oinode.c.
 *
 * libfuse conventions (passthrough_hp.cc): handlers reply exactly once; errors are replied as a
 * positive errno; helpers here return -errno. Every namespace change is one index transaction
 * (durable when it returns: synchronous=FULL).
 */
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

#include "fs/fs_int.h"
#include "fs/layout.h"

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

/* Longest claim kept from a tracker write; more is accepted and dropped (the claim is junk). */
#define CLAIM_MAX (1 << 20)
/* PF_EXITING in /proc/PID/stat flags (include/linux/sched.h): the task is exiting. */
#define PF_EXITING_FLAG 0x4UL

static void fh_free(struct fh *h)
{
	free(h->vbuf);
	free(h);
}

static void ts_of(int64_t ns, struct timespec *ts);

/* Which /.ckptfs file a virtual inode is, or -1. */
static int meta_of(uint64_t ino)
{
	return ino >= VINO_META(0) && ino < VINO_META(META_FILE_COUNT) ? (int)(ino - VINO_META(0))
								       : -1;
}

/* Attributes of /.ckptfs/<file which>: size of its current rendering. fs->mu held. */
static int meta_stat(struct ckfs *fs, int which, struct stat *st)
{
	struct idx_inode a;
	char *buf = NULL;
	size_t len = 0;
	int rc = meta_render(fs, which, &buf, &len);

	free(buf);
	if (rc < 0 || (rc = idx_inode_get(fs->ix, fs->meta_ino, &a)) < 0)
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
static bool in_meta(struct ckfs *fs, uint64_t ino)
{
	char p[64];
	int n;

	if (steps_in_meta(fs, ino))
		return true;
	n = idx_path(fs->ix, ino, p, sizeof(p));
	return n > 0 && strncmp(p, "/.ckptfs/", 9) == 0;
}

static struct ckfs *req_fs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* ---- kernel lookup counts (fs->mu held) ---- */

static struct lookup_ent **lookup_slot(struct ckfs *fs, uint64_t ino)
{
	struct lookup_ent **pp = &fs->ltab[ino % LTAB_BUCKETS];

	while (*pp && (*pp)->ino != ino)
		pp = &(*pp)->next;
	return pp;
}

/* One more kernel reference to ino, taken by every successful entry reply. */
static void lookup_inc(struct ckfs *fs, uint64_t ino)
{
	struct lookup_ent **pp = lookup_slot(fs, ino);

	if (!*pp) {
		*pp = calloc(1, sizeof(**pp));
		if (!*pp)
			return; /* the inode then lives only until its last close or the unmount */
		(*pp)->ino = ino;
	}
	(*pp)->n++;
}

bool fs_inode_referenced(struct ckfs *fs, uint64_t ino)
{
	return *lookup_slot(fs, ino) != NULL || oi_find(fs, ino) != NULL;
}

/* Delete ino from the index if it has no name left and nothing references it. */
static void reap_locked(struct ckfs *fs, uint64_t ino)
{
	struct idx_inode a;
	struct fs_freed fr = { 0 };
	bool ok;

	if (ino == IDX_ROOT_INO || fs_inode_referenced(fs, ino) ||
	    idx_inode_get(fs->ix, ino, &a) < 0 || a.nlink != 0)
		return;
	ok = idx_begin(fs->ix) == 0 && idx_inode_delete(fs->ix, ino, fs_release_collect, &fr) == 0 &&
	     idx_commit(fs->ix) == 0;
	if (!ok)
		idx_rollback(fs->ix); /* left for idx_recover at unmount or the next mount */
	fs_release_finish(fs, &fr, ok);
}

static void forget_locked(struct ckfs *fs, uint64_t ino, uint64_t n)
{
	struct lookup_ent **pp = lookup_slot(fs, ino), *e = *pp;

	if (!e)
		return;
	e->n = e->n > n ? e->n - n : 0;
	if (e->n == 0) {
		*pp = e->next;
		free(e);
		reap_locked(fs, ino);
	}
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct ckfs *fs = req_fs(req);

	pthread_mutex_lock(&fs->mu);
	forget_locked(fs, ino, nlookup);
	pthread_mutex_unlock(&fs->mu);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct ckfs *fs = req_fs(req);

	pthread_mutex_lock(&fs->mu);
	for (size_t i = 0; i < count; i++)
		forget_locked(fs, forgets[i].ino, forgets[i].nlookup);
	pthread_mutex_unlock(&fs->mu);
	fuse_reply_none(req);
}

static void ts_of(int64_t ns, struct timespec *ts)
{
	ts->tv_sec = ns / 1000000000;
	ts->tv_nsec = ns % 1000000000;
}

/* Fill st from the index (+ the open-file overlay). Caller holds fs->mu. */
static int stat_locked(struct ckfs *fs, uint64_t ino, struct stat *st)
{
	struct idx_inode a;
	uint64_t stored = 0;
	int rc = idx_inode_get(fs->ix, ino, &a);

	if (rc < 0)
		return rc;
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = a.mode;
	st->st_nlink = a.nlink;
	st->st_uid = a.uid;
	st->st_gid = a.gid;
	st->st_size = (off_t)a.size;
	st->st_rdev = a.rdev;
	st->st_blksize = 1 << 20;
	ts_of(a.atime_ns, &st->st_atim);
	ts_of(a.mtime_ns, &st->st_mtim);
	ts_of(a.ctime_ns, &st->st_ctim);
	if (S_ISREG(a.mode)) {
		struct oinode *oi = oi_find(fs, ino);

		if (idx_file_stored_bytes(fs->ix, ino, &stored) < 0)
			stored = 0;
		if (oi && atomic_load(&oi->ov_dirty)) {
			uint64_t sz = atomic_load(&oi->ov_size);

			st->st_size = (off_t)sz;
			ts_of(atomic_load(&oi->ov_mtime), &st->st_mtim);
			st->st_ctim = st->st_mtim;
			if (stored < sz)
				stored = sz; /* not yet compressed: count it as written */
		}
		st->st_blocks = (blkcnt_t)((stored + 511) / 512);
	} else {
		st->st_blocks = (blkcnt_t)((a.size + 511) / 512);
	}
	return 0;
}

/* Reply an entry for ino, cached by the kernel for tmo seconds; unlocks fs->mu. */
static void reply_entry_tmo(fuse_req_t req, struct ckfs *fs, uint64_t ino, double tmo)
{
	struct fuse_entry_param e = { 0 };
	int rc = stat_locked(fs, ino, &e.attr);

	if (rc < 0) {
		pthread_mutex_unlock(&fs->mu);
		fuse_reply_err(req, -rc);
		return;
	}
	e.ino = ino;
	e.attr_timeout = tmo;
	e.entry_timeout = tmo;
	lookup_inc(fs, ino);
	pthread_mutex_unlock(&fs->mu);
	if (fuse_reply_entry(req, &e) == -ENOENT) {
		pthread_mutex_lock(&fs->mu); /* interrupted: the kernel took no reference */
		forget_locked(fs, ino, 1);
		pthread_mutex_unlock(&fs->mu);
	}
}

static void reply_entry_locked(fuse_req_t req, struct ckfs *fs, uint64_t ino)
{
	reply_entry_tmo(req, fs, ino, ATTR_TIMEOUT);
}

static int check_name(const char *name)
{
	size_t len = strlen(name);

	if (len == 0)
		return -ENOENT;
	if (len > NAME_MAX)
		return -ENAMETOOLONG;
	return 0;
}

/* Set mtime and ctime of directory dir to now. In a transaction, fs->mu held. */
static int touch_dir(struct ckfs *fs, uint64_t dir, int64_t now, int nlink_delta)
{
	struct idx_inode a;
	int rc = idx_inode_get(fs->ix, dir, &a);

	if (rc < 0)
		return rc;
	a.mtime_ns = a.ctime_ns = now;
	a.nlink = (uint32_t)((int64_t)a.nlink + nlink_delta);
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
	/* Leave clearing set-user-ID and set-group-ID on write, truncate and chown by a caller
	 * without CAP_FSETID to the kernel (a setattr of the mode), whatever libfuse's default:
	 * we do not know the caller's capabilities. */
	conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
	/* POSIX ACLs: the kernel caches and enforces them, ckptfs stores them and keeps the mode
	 * and inheritance in step (xattr.c); the umask is then ours to apply (make_node), since a
	 * default ACL replaces it */
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
		struct oinode *dirty = NULL;

		pthread_mutex_lock(&fs->mu);
		for (unsigned i = 0; i < OTAB_BUCKETS && !dirty; i++)
			for (struct oinode *oi = fs->otab[i]; oi && !dirty; oi = oi->next)
				if (atomic_load(&oi->ov_dirty) && !oi->err) {
					dirty = oi;
					dirty->refs++;
				}
		pthread_mutex_unlock(&fs->mu);
		if (!dirty)
			break;
		int rc = oi_commit(fs, dirty);

		if (rc < 0) {
			fprintf(stderr, "ckptfs: cannot make inode %llu durable at unmount: %s\n",
				(unsigned long long)dirty->ino, strerror(-rc));
			dirty->err = rc; /* do not retry forever */
		}
		oi_put(fs, dirty);
	}
	/* The kernel holds no inode any more: delete what is unlinked or was never committed. */
	struct fs_freed fr = { 0 };
	bool ok;

	pthread_mutex_lock(&fs->mu);
	steps_reap(fs, true); /* nobody writes any more: judge every unfinished step */
	ok = idx_begin(fs->ix) == 0 && idx_recover(fs->ix, fs_release_collect, &fr) >= 0 &&
	     idx_commit(fs->ix) == 0;
	if (!ok)
		idx_rollback(fs->ix);
	fs_release_finish(fs, &fr, ok);
	for (unsigned i = 0; i < LTAB_BUCKETS; i++) {
		while (fs->ltab[i]) {
			struct lookup_ent *n = fs->ltab[i]->next;

			free(fs->ltab[i]);
			fs->ltab[i] = n;
		}
	}
	pthread_mutex_unlock(&fs->mu);
}

/* ---- attributes ---- */

/*
 * A lookup or listing of the root (or of InternEvo's `snapshot/`): judge first every unfinished
 * step whose writers are all gone, once the files they closed are committed. fs->mu held; it is
 * released while waiting for the commit queue.
 */
static void settle_for_reader(struct ckfs *fs)
{
	if (!steps_settle_due(fs))
		return;
	if (cq_busy(fs)) {
		pthread_mutex_unlock(&fs->mu);
		cq_wait_idle(fs);
		pthread_mutex_lock(&fs->mu);
	}
	steps_settle_now(fs);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ckfs *fs = req_fs(req);
	uint64_t ino;
	int rc = check_name(name);

	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	pthread_mutex_lock(&fs->mu);
	bool step_dir = steps_dir_name(fs, parent, name);

	if (parent == IDX_ROOT_INO || step_dir)
		settle_for_reader(fs);
	if (cq_busy(fs) && (parent == fs->meta_ino || steps_tracker_name(fs, parent, name))) {
		/* a tracker or status read waits for the commits of closed files (commit.c) */
		pthread_mutex_unlock(&fs->mu);
		cq_wait_idle(fs);
		pthread_mutex_lock(&fs->mu);
	}
	if (parent == fs->meta_ino && meta_file_by_name(name) >= 0) {
		struct fuse_entry_param e = { .ino = VINO_META(meta_file_by_name(name)) };

		rc = meta_stat(fs, meta_file_by_name(name), &e.attr);
		pthread_mutex_unlock(&fs->mu);
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
		pthread_mutex_unlock(&fs->mu);
		if (rc < 0) /* a tracker with no complete step does not exist */
			fuse_reply_err(req, -rc);
		else
			fuse_reply_entry(req, &e); /* timeouts 0: it changes as steps complete */
		return;
	}
	rc = idx_dentry_lookup(fs->ix, parent, name, &ino);
	if (rc < 0) {
		pthread_mutex_unlock(&fs->mu);
		fuse_reply_err(req, -rc);
		return;
	}
	/* a step directory's name may move to quarantine or get a kept version back at any time
	 * (steps.c): the kernel asks again at every path walk rather than keep a stale dentry */
	reply_entry_tmo(req, fs, ino, step_dir ? 0.0 : ATTR_TIMEOUT);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckfs *fs = req_fs(req);
	struct stat st;
	int rc;

	if (ino >= VINO_BASE)
		cq_wait_idle(fs); /* trackers and /.ckptfs files: see op_lookup */
	pthread_mutex_lock(&fs->mu);
	if (meta_of(ino) >= 0)
		rc = meta_stat(fs, meta_of(ino), &st);
	else
		rc = steps_is_vino(ino) ? steps_vstat(fs, ino, &st) : stat_locked(fs, ino, &st);
	pthread_mutex_unlock(&fs->mu);
	if (rc < 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_attr(req, &st, ino >= VINO_BASE ? 0 : ATTR_TIMEOUT);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct ckfs *fs = req_fs(req);
	struct idx_inode a;
	struct stat st;
	int64_t now = ckfs_now(fs);
	int rc;

	if (meta_of(ino) >= 0) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (steps_is_vino(ino)) {
		/* trackers are virtual: a truncate before a write, or a chmod, changes nothing */
		pthread_mutex_lock(&fs->mu);
		rc = steps_vstat(fs, ino, &st);
		pthread_mutex_unlock(&fs->mu);
		if (rc < 0)
			fuse_reply_err(req, -rc);
		else
			fuse_reply_attr(req, &st, 0);
		return;
	}
	pthread_mutex_lock(&fs->mu);
	rc = in_meta(fs, ino) ? -EROFS : 0;
	pthread_mutex_unlock(&fs->mu);
	if (rc < 0)
		goto fail;
	if (to_set & FUSE_SET_ATTR_SIZE) {
		struct oinode *oi;

		pthread_mutex_lock(&fs->mu);
		steps_before_write(fs, ino); /* an InternEvo slot keeps its complete version */
		pthread_mutex_unlock(&fs->mu);
		if (fi) {
			struct fh *h = (struct fh *)(uintptr_t)fi->fh;

			h->wrote = true;
			oi = h->oi;
			rc = oi_truncate(fs, oi, (uint64_t)attr->st_size);
		} else {
			pthread_mutex_lock(&fs->mu);
			rc = oi_get(fs, ino, &oi);
			pthread_mutex_unlock(&fs->mu);
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
	pthread_mutex_lock(&fs->mu);
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
	rc = stat_locked(fs, ino, &st);
	pthread_mutex_unlock(&fs->mu);
	if (rc < 0)
		goto fail;
	fuse_reply_attr(req, &st, ATTR_TIMEOUT);
	return;
fail_locked:
	pthread_mutex_unlock(&fs->mu);
fail:
	fuse_reply_err(req, -rc);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct ckfs *fs = req_fs(req);
	char buf[PATH_MAX + 1];
	int rc;

	pthread_mutex_lock(&fs->mu);
	rc = idx_symlink_get(fs->ix, ino, buf, sizeof(buf));
	pthread_mutex_unlock(&fs->mu);
	if (rc < 0)
		fuse_reply_err(req, rc == -ENOENT ? EINVAL : -rc);
	else
		fuse_reply_readlink(req, buf);
}

/* ---- namespace ---- */

/*
 * Create an inode of the given mode under parent/name. fs->mu held; replies nothing.
 * committed_empty: a regular file created without an open (mknod) is durable and empty at once.
 */
static int make_node(fuse_req_t req, struct ckfs *fs, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev, const char *link_target, bool committed_empty,
		     uint64_t *ret_ino)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct idx_inode a = { 0 }, pa;
	uint64_t ino;
	int64_t now = ckfs_now(fs);
	int rc = check_name(name);

	if (rc < 0)
		return rc;
	if ((rc = idx_inode_get(fs->ix, parent, &pa)) < 0)
		return rc;
	if (!S_ISDIR(pa.mode))
		return -ENOTDIR;
	if (pa.nlink == 0)
		return -ENOENT;
	if (in_meta(fs, parent))
		return -EROFS;
	if (idx_dentry_lookup(fs->ix, parent, name, &ino) == 0)
		return -EEXIST;
	if (steps_tracker_name(fs, parent, name))
		return -EEXIST; /* a tracker name is taken by the virtual tracker */
	steps_before_change(fs, parent); /* an InternEvo slot keeps its complete version */
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
	if ((rc = idx_begin(fs->ix)) < 0)
		return rc;
	rc = idx_inode_create(fs->ix, &a, &ino);
	if (rc == 0 && !link_target) {
		/* a default ACL of the parent, else the umask (FUSE_CAP_DONT_MASK: ours) */
		uint32_t mode0 = a.mode;

		rc = fs_acl_inherit(fs, parent, ino, &a.mode, ctx->umask);
		if (rc == 0 && a.mode != mode0) {
			a.ino = ino;
			rc = idx_inode_update(fs->ix, &a);
		}
	}
	if (rc == 0 && link_target)
		rc = idx_symlink_set(fs->ix, ino, link_target);
	if (rc == 0)
		rc = idx_dentry_add(fs->ix, parent, name, ino);
	if (rc == 0)
		rc = touch_dir(fs, parent, now, S_ISDIR(mode) ? 1 : 0);
	if ((rc = fs_commit_or_rollback(fs, rc)) < 0)
		return rc;
	steps_on_name(fs, parent, name, ino, fuse_req_ctx(req)->pid, false);
	*ret_ino = ino;
	return 0;
}

static void node_reply(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		       dev_t rdev, const char *target)
{
	struct ckfs *fs = req_fs(req);
	uint64_t ino;
	int rc;

	pthread_mutex_lock(&fs->mu);
	rc = make_node(req, fs, parent, name, mode, rdev, target, S_ISREG(mode), &ino);
	if (rc < 0) {
		pthread_mutex_unlock(&fs->mu);
		fuse_reply_err(req, -rc);
		return;
	}
	/* a step directory's entry is not cached by the kernel (op_lookup) */
	reply_entry_tmo(req, fs, ino, steps_dir_name(fs, parent, name) ? 0.0 : ATTR_TIMEOUT);
}

/*
 * mknod(2): a regular file (durable and empty at once), or a FIFO, socket, character or block
 * device node: metadata only (mode, owner, times, rdev for devices) in the index, no content.
 * The kernel opens such nodes itself (a FIFO's buffer, the device's driver) as on ext4; whether
 * devices may be opened is the mount's `nodev`. Checkpoint semantics ignore them.
 */
static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	if (!S_ISREG(mode) && !S_ISFIFO(mode) && !S_ISSOCK(mode) && !S_ISCHR(mode) &&
	    !S_ISBLK(mode)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	node_reply(req, parent, name, mode, rdev, NULL);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	node_reply(req, parent, name, S_IFDIR | (mode & 07777), 0, NULL);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	if (strlen(link) > PATH_MAX) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	node_reply(req, parent, name, S_IFLNK | 0777, 0, link);
}

/*
 * Drop one link to ino (whose dentry the caller already removed), in a transaction, fs->mu held.
 * An inode still open or known to the kernel stays in the index with nlink 0 until its last
 * close (oi_put) and forget (forget_locked), as on any POSIX filesystem.
 */
int fs_drop_link(struct ckfs *fs, uint64_t ino, int64_t now, struct fs_freed *fr)
{
	struct idx_inode a;
	int rc = idx_inode_get(fs->ix, ino, &a);

	if (rc < 0)
		return rc;
	a.nlink = S_ISDIR(a.mode) ? 0 : a.nlink - 1;
	a.ctime_ns = now;
	if (a.nlink == 0 && !fs_inode_referenced(fs, ino))
		return idx_inode_delete(fs->ix, ino, fs_release_collect, fr);
	return idx_inode_update(fs->ix, &a);
}

/* The removal's one transaction; fs->mu held. Returns 0 or -errno (nothing changed). */
static int remove_txn(struct ckfs *fs, fuse_ino_t parent, const char *name, uint64_t ino,
		      int64_t now, bool dir)
{
	struct fs_freed fr = { 0 };
	int rc = idx_begin(fs->ix);

	if (rc < 0)
		return rc;
	rc = idx_dentry_remove(fs->ix, parent, name);
	if (rc == 0)
		rc = fs_drop_link(fs, ino, now, &fr);
	if (rc == 0)
		rc = touch_dir(fs, parent, now, dir ? -1 : 0);
	rc = fs_commit_or_rollback(fs, rc);
	fs_release_finish(fs, &fr, rc == 0);
	return rc;
}

static void remove_entry(fuse_req_t req, fuse_ino_t parent, const char *name, bool dir)
{
	struct ckfs *fs = req_fs(req);
	struct idx_inode a;
	uint64_t ino;
	int64_t now = ckfs_now(fs);
	int rc;

	pthread_mutex_lock(&fs->mu);
	if (steps_tracker_name(fs, parent, name)) {
		pthread_mutex_unlock(&fs->mu);
		fprintf(stderr, "ckptfs: refused to unlink tracker '%s': trackers are virtual and "
			"always name the newest complete step\n", name);
		fuse_reply_err(req, EPERM);
		return;
	}
	rc = in_meta(fs, parent) ? -EROFS : 0;
	if (rc == 0)
		steps_before_remove(fs, parent, name);
	if (rc == 0)
		rc = idx_dentry_lookup(fs->ix, parent, name, &ino);
	if (rc == 0)
		steps_before_change(fs, parent);
	if (rc == 0 && ino == fs->meta_ino)
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
			fprintf(stderr, "ckptfs: store full: released the %llu MiB reserve to "
				"remove '%s'; it comes back once space is free\n",
				CKPT_RESERVE_BYTES >> 20, name);
			rc = remove_txn(fs, parent, name, ino, now, dir);
		}
	}
	if (rc == 0 && !dir)
		ckpt_repo_reserve(fs->repo); /* back as soon as there is room; no-op when held */
	pthread_mutex_unlock(&fs->mu);
	fuse_reply_err(req, -rc);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_entry(req, parent, name, false);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
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
		     const char *newname, unsigned int flags, struct fs_freed *fr)
{
	struct idx_inode sa, da, npa;
	uint64_t src, dst;
	bool have_dst;
	int64_t now = ckfs_now(fs);
	int rc;

	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	if ((rc = check_name(newname)) < 0)
		return rc;
	if (in_meta(fs, parent) || in_meta(fs, newparent))
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
	if (src == fs->meta_ino || (have_dst && dst == fs->meta_ino))
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

			rc = touch_dir(fs, parent, now, -d);
			if (rc == 0)
				rc = touch_dir(fs, newparent, now, d);
		} else if (rc == 0) {
			rc = touch_dir(fs, parent, now, 0);
		}
	} else {
		if (have_dst) {
			rc = idx_dentry_remove(fs->ix, newparent, newname);
			if (rc == 0)
				rc = fs_drop_link(fs, dst, now, fr);
			if (rc == 0 && S_ISDIR(da.mode))
				rc = touch_dir(fs, newparent, now, -1);
		}
		if (rc == 0)
			rc = idx_dentry_move(fs->ix, parent, name, newparent, newname);
		if (rc == 0 && parent != newparent) {
			int d = S_ISDIR(sa.mode) ? 1 : 0;

			rc = touch_dir(fs, parent, now, -d);
			if (rc == 0)
				rc = touch_dir(fs, newparent, now, d);
		} else if (rc == 0) {
			rc = touch_dir(fs, parent, now, 0);
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
	struct fs_freed fr = { 0 };
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
	pthread_mutex_unlock(&fs->mu); /* oi_read may take fs->mu (bad chunk) */
	n = oi_read(fs, oi, buf, sizeof(buf), 0);
	oi_put(fs, oi);
	pthread_mutex_lock(&fs->mu);
	if (n < 0)
		return (int)n;
	snprintf(cname, sizeof(cname), "rank_%d/meta.json", steps_rank_dir(fs, newparent));
	steps_on_claim(fs, kind, cname, buf, (size_t)n, fuse_req_ctx(req)->pid);
	if ((rc = idx_begin(fs->ix)) < 0)
		return rc;
	rc = idx_dentry_remove(fs->ix, parent, name);
	if (rc == 0)
		rc = fs_drop_link(fs, ino, ckfs_now(fs), &fr);
	if (rc == 0)
		rc = touch_dir(fs, parent, ckfs_now(fs), 0);
	rc = fs_commit_or_rollback(fs, rc);
	fs_release_finish(fs, &fr, rc == 0);
	return rc;
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	struct ckfs *fs = req_fs(req);
	struct fs_freed fr = { 0 };
	int rc;

	if (parent == IDX_ROOT_INO && newparent == IDX_ROOT_INO && steps_commit_rename(fs, name))
		cq_wait_idle(fs); /* the files closed before Orbax's commit rename are durable first,
				     so its step completes before the rename returns */
	pthread_mutex_lock(&fs->mu);
	if (flags == 0 && steps_tracker_name(fs, newparent, newname) == LAYOUT_MF1 &&
	    !steps_tracker_name(fs, parent, name)) {
		rc = rename_into_tracker(req, fs, parent, name, newparent, LAYOUT_MF1);
		pthread_mutex_unlock(&fs->mu);
		fuse_reply_err(req, -rc);
		/* the kernel now has newname pointing at the renamed (dropped) inode: forget it,
		 * so the next lookup finds the virtual meta.json. After the reply, so the rename
		 * has the directory lock it needs to finish; this call waits for it. */
		if (rc == 0 && fs->se)
			fuse_lowlevel_notify_inval_entry(fs->se, newparent, newname, strlen(newname));
		return;
	}
	rc = do_rename(fs, parent, name, newparent, newname, flags, &fr);
	fs_release_finish(fs, &fr, rc == 0);
	if (rc == 0) {
		uint64_t ino;

		if (idx_dentry_lookup(fs->ix, newparent, newname, &ino) == 0)
			steps_on_name(fs, newparent, newname, ino, fuse_req_ctx(req)->pid, true);
	}
	pthread_mutex_unlock(&fs->mu);
	fuse_reply_err(req, -rc);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct ckfs *fs = req_fs(req);
	struct idx_inode a;
	uint64_t other;
	int64_t now = ckfs_now(fs);
	int rc = check_name(newname);

	pthread_mutex_lock(&fs->mu);
	if (rc == 0)
		rc = idx_inode_get(fs->ix, ino, &a);
	if (rc == 0 && S_ISDIR(a.mode))
		rc = -EPERM;
	if (rc == 0 && (in_meta(fs, newparent) || steps_tracker_name(fs, newparent, newname)))
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
			rc = touch_dir(fs, newparent, now, 0);
		rc = fs_commit_or_rollback(fs, rc);
	}
	if (rc < 0) {
		pthread_mutex_unlock(&fs->mu);
		fuse_reply_err(req, -rc);
		return;
	}
	reply_entry_locked(req, fs, ino);
}

/* ---- files ---- */

static int open_handle(struct ckfs *fs, uint64_t ino, struct fuse_file_info *fi)
{
	struct fh *h = calloc(1, sizeof(*h));
	int rc;

	if (!h)
		return -ENOMEM;
	fs_tune_read_ahead(fs);
	pthread_mutex_lock(&fs->mu);
	struct idx_inode attr;
	bool privs = false;

	if ((fi->flags & O_ACCMODE) != O_RDONLY && in_meta(fs, ino))
		rc = -EROFS;
	else
		rc = oi_get(fs, ino, &h->oi);
	if (rc == 0 && (fi->flags & O_ACCMODE) != O_RDONLY)
		steps_before_write(fs, ino); /* an InternEvo slot keeps its complete version */
	if (rc == 0 && idx_inode_get(fs->ix, ino, &attr) == 0)
		privs = (attr.mode & (S_ISUID | S_ISGID)) != 0;
	pthread_mutex_unlock(&fs->mu);
	if (rc < 0) {
		free(h);
		return rc;
	}
	if ((fi->flags & O_TRUNC) && (fi->flags & O_ACCMODE) != O_RDONLY) {
		rc = oi_truncate(fs, h->oi, 0);
		if (rc < 0) {
			oi_put(fs, h->oi);
			free(h);
			return rc;
		}
		h->wrote = true;
	}
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->keep_cache = 0; /* close-to-open: drop pages cached from an earlier open */
	/* A write-only handle cannot be mapped, so nothing needs its pages: its writes go straight
	 * to the daemon (no page-cache copy, 4-5x the transport rate, perf-anchors.md). Handles
	 * that can read keep the page cache, which MAP_SHARED mappings need (libfuse 3.14 cannot
	 * ask for FUSE_DIRECT_IO_ALLOW_MMAP), and so do files with set-user-ID or set-group-ID:
	 * the kernel clears those bits on a cached write only (we leave that to it, op_init). */
	if ((fi->flags & O_ACCMODE) == O_WRONLY && !privs)
		fi->direct_io = 1;
	return 0;
}

/*
 * Open virtual tracker vino (kind: its layout, name: the name it was created by, or NULL):
 * readers get a snapshot of what it says now, writers a buffer that becomes a claim at flush.
 */
static int open_tracker(struct ckfs *fs, uint64_t vino, int kind, const char *name,
			struct fuse_file_info *fi)
{
	struct fh *h = calloc(1, sizeof(*h));
	int rc = 0;

	if (!h)
		return -ENOMEM;
	h->vkind = kind;
	if (name)
		snprintf(h->vname, sizeof(h->vname), "%s", name);
	else if (kind == LAYOUT_MF1)
		snprintf(h->vname, sizeof(h->vname), "rank_%d/meta.json",
			 (int)(vino - VINO_MF1_META(0)));
	if (!name && kind != LAYOUT_MF1) {
		pthread_mutex_lock(&fs->mu);
		rc = steps_vname(fs, kind, h->vname, sizeof(h->vname));
		pthread_mutex_unlock(&fs->mu);
	}
	if (rc >= 0 && (fi->flags & O_ACCMODE) == O_RDONLY) {
		cq_wait_idle(fs); /* the steps of files closed before this open (commit.c) */
		h->vcap = 4096;
		h->vbuf = malloc(h->vcap);
		if (!h->vbuf) {
			rc = -ENOMEM;
		} else {
			pthread_mutex_lock(&fs->mu);
			rc = steps_vcontent(fs, vino, h->vbuf, h->vcap, NULL);
			pthread_mutex_unlock(&fs->mu);
			/* a step restored for this reader replaced a name the kernel may have cached:
			 * drop it before the reader can look it up */
			fs_flush_inval(fs);
			if (rc >= 0)
				h->vlen = (size_t)rc;
		}
	}
	if (rc < 0) {
		fh_free(h);
		return rc;
	}
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->direct_io = 1; /* content changes as steps complete: never cache it */
	return 0;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (meta_of(ino) >= 0) {
		struct ckfs *fs = req_fs(req);
		struct fh *h;
		int rc;

		if ((fi->flags & O_ACCMODE) != O_RDONLY) {
			fuse_reply_err(req, EROFS);
			return;
		}
		if (!(h = calloc(1, sizeof(*h)))) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		h->vkind = -1; /* a snapshot to read, nothing to claim */
		cq_wait_idle(fs);
		pthread_mutex_lock(&fs->mu);
		rc = meta_render(fs, meta_of(ino), &h->vbuf, &h->vlen);
		pthread_mutex_unlock(&fs->mu);
		if (rc < 0) {
			fh_free(h);
			fuse_reply_err(req, -rc);
			return;
		}
		fi->fh = (uint64_t)(uintptr_t)h;
		fi->direct_io = 1;
		fuse_reply_open(req, fi);
		return;
	}
	if (steps_is_vino(ino)) {
		int kind = ino >= VINO_MF1_META(0) ? LAYOUT_MF1 : (int)(ino - VINO_BASE);
		int rc = open_tracker(req_fs(req), ino, kind, NULL, fi);

		if (rc < 0)
			fuse_reply_err(req, -rc);
		else
			fuse_reply_open(req, fi);
		return;
	}
	{
	struct ckfs *fs = req_fs(req);
	int rc = open_handle(fs, ino, fi);

	if (rc < 0) {
		fuse_reply_err(req, -rc);
	} else if (fuse_reply_open(req, fi) == -ENOENT) {
		/* the open was interrupted: no release will come for this handle */
		struct fh *h = (struct fh *)(uintptr_t)fi->fh;

		oi_put(fs, h->oi);
		free(h);
	}
	}
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct ckfs *fs = req_fs(req);
	struct fuse_entry_param e = { 0 };
	uint64_t ino;
	int rc;

	pthread_mutex_lock(&fs->mu);
	int tk = steps_tracker_name(fs, parent, name);
	uint64_t vino = tk ? steps_tracker_vino(fs, parent, tk) : 0;
	char cname[300];

	if (tk == LAYOUT_MF1) {
		int r = steps_rank_dir(fs, parent);

		snprintf(cname, sizeof(cname), "rank_%d/%s", r, name);
	} else {
		snprintf(cname, sizeof(cname), "%s", name);
	}
	pthread_mutex_unlock(&fs->mu);
	if (tk && vino) {
		rc = open_tracker(fs, vino, tk, cname, fi);
		if (rc < 0) {
			fuse_reply_err(req, -rc);
			return;
		}
		e.ino = vino;
		e.attr.st_ino = e.ino;
		e.attr.st_mode = S_IFREG | 0644;
		e.attr.st_nlink = 1;
		fuse_reply_create(req, &e, fi); /* timeouts 0 */
		return;
	}
	pthread_mutex_lock(&fs->mu);
	rc = make_node(req, fs, parent, name, S_IFREG | (mode & 07777), 0, NULL, false, &ino);
	if (rc == 0)
		rc = stat_locked(fs, ino, &e.attr);
	if (rc == 0)
		lookup_inc(fs, ino);
	pthread_mutex_unlock(&fs->mu);
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	/* A created file becomes durable (even if empty) at its first close or fsync; until then a
	 * crash leaves no trace of it (idx_recover). */
	rc = open_handle(fs, ino, fi);
	if (rc == 0) {
		struct fh *h = (struct fh *)(uintptr_t)fi->fh;

		h->wrote = true;
		rc = oi_truncate(fs, h->oi, 0);
	}
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	e.ino = ino;
	e.attr_timeout = ATTR_TIMEOUT;
	e.entry_timeout = ATTR_TIMEOUT;
	fuse_reply_create(req, &e, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;
	char *buf;
	ssize_t n;

	if (h->vkind) {
		size_t o = (size_t)off < h->vlen ? (size_t)off : h->vlen;
		size_t n2 = h->vlen - o < size ? h->vlen - o : size;

		/* Reply from a copy: the reader may close the file as soon as the kernel has the
		 * reply, and the release, on another thread, frees h->vbuf while this writev
		 * returns (ASan checks the iovec after the call: tests/torture/test_concurrency) */
		buf = malloc(n2 ? n2 : 1);
		if (!buf) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		if (n2)
			memcpy(buf, h->vbuf + o, n2);
		fuse_reply_buf(req, buf, n2);
		free(buf);
		return;
	}
	/* this thread's: a fresh 1 MiB malloc per request page-faults (store_thread_buf) */
	buf = store_thread_buf(STORE_TBUF_READ, size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/*
	 * The reply's bytes stay where the chunk cache has them: the kernel copies them once,
	 * from the iovec. Copying them into buf first was 7.6% of the daemon's CPU in a cold
	 * torch.load. fuse_reply_iov writes the reply before it returns; the holds go after it.
	 */
	struct ckfs *fs = req_fs(req); /* req is gone after the reply */
	struct oi_readv rv;

	n = oi_read_iov(fs, h->oi, (uint8_t *)buf, size, (uint64_t)off, &rv);
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else if (rv.n == 0)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_iov(req, rv.iov, rv.n);
	oi_readv_release(fs, &rv);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;
	struct oinode *oi = h->oi;
	ssize_t n;

	if (h->vkind) {
		/* a claim: keep up to CLAIM_MAX bytes at their offsets, accept the rest */
		uint64_t end = (uint64_t)off + size;

		if ((uint64_t)off < CLAIM_MAX) {
			size_t keep = end > CLAIM_MAX ? CLAIM_MAX - (size_t)off : size;

			if ((size_t)off + keep > h->vcap) {
				size_t nc = (size_t)off + keep;
				char *p = realloc(h->vbuf, nc);

				if (!p) {
					fuse_reply_err(req, ENOMEM);
					return;
				}
				h->vbuf = p;
				h->vcap = nc;
			}
			if ((size_t)off > h->vlen)
				memset(h->vbuf + h->vlen, 0, (size_t)off - h->vlen);
			memcpy(h->vbuf + off, buf, keep);
			if ((size_t)off + keep > h->vlen)
				h->vlen = (size_t)off + keep;
		}
		h->vdirty = true;
		fuse_reply_write(req, size);
		return;
	}
	if (fi->flags & O_APPEND) {
		/* the kernel passes the offset it knows; the file's end is authoritative */
		pthread_rwlock_rdlock(&oi->lock);
		off = (off_t)oi->size;
		pthread_rwlock_unlock(&oi->lock);
	}
	n = oi_write(req_fs(req), oi, buf, size, (uint64_t)off);
	h->wrote = true;
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_write(req, (size_t)n);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckfs *fs = req_fs(req);
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;
	pid_t pid = fuse_req_ctx(req)->pid;
	unsigned long pflags = 0;
	int rc = 0;

	if (h->vkind) {
		if (h->vdirty) {
			/* the files closed before the tracker are durable before its claim is
			 * judged: the step it names can complete at once */
			cq_wait_idle(fs);
			pthread_mutex_lock(&fs->mu);
			steps_on_claim(fs, h->vkind, h->vname, h->vbuf ? h->vbuf : "", h->vlen, pid);
			pthread_mutex_unlock(&fs->mu);
			h->vdirty = false;
		}
		fuse_reply_err(req, 0);
		return;
	}
	if (h->wrote) {
		/* DESIGN.md: a flush from an exiting process means the writer died with the file
		 * open (the kernel flushes from do_exit): the file is torn */
		bool torn = fs_pid_flags(pid, &pflags) == 0 && (pflags & PF_EXITING_FLAG);

		/* close() returns once the bytes are in memory: the committer makes them durable
		 * and tells the step engine (commit.c). An error already known is reported here.
		 * A step's marker is committed here, before the close returns: the engine judges it
		 * at the path it has when committed, and trainers rename the step directory right
		 * after (Orbax's tmp dir, HF's tmp-checkpoint-N), where it would no longer be the
		 * marker of the step it seals. Markers are small. */
		rc = oi_error(h->oi);
		bool marker = rc == 0 && steps_is_marker(fs, h->oi->ino);

		if (rc == 0 && !marker && cq_submit(fs, h->oi, pid, torn) == 0) {
			fuse_reply_err(req, 0);
			return;
		}
		if (marker && !torn)
			cq_wait_idle(fs); /* the files closed before the marker are durable first,
					     so the step it seals can complete before close returns */
		rc = oi_commit(fs, h->oi);
		if (rc == 0)
			steps_on_commit(fs, h->oi, pid, torn);
	}
	fuse_reply_err(req, -rc);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;
	int rc;

	if (h->vkind) {
		fuse_reply_err(req, 0);
		return;
	}
	rc = oi_commit(req_fs(req), h->oi);
	if (rc == 0 && h->wrote)
		steps_on_commit(req_fs(req), h->oi, fuse_req_ctx(req)->pid, false);
	fuse_reply_err(req, -rc);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckfs *fs = req_fs(req);
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;

	if (h->vkind) {
		fh_free(h);
		fuse_reply_err(req, 0);
		return;
	}
	if (h->wrote) {
		int rc = oi_commit(fs, h->oi);

		if (rc < 0)
			fprintf(stderr, "ckptfs: cannot make inode %llu durable at close: %s\n",
				(unsigned long long)ino, strerror(-rc));
	}
	oi_put(fs, h->oi);
	fh_free(h);
	fuse_reply_err(req, 0);
}

/* ---- directories ---- */

struct dirbuf {
	fuse_req_t req;
	char *buf;
	size_t size, len;
	uint64_t hide;
};

/* readdir offsets of the virtual trackers listed after the root's entries */
#define VOFF_BASE ((off_t)1 << 62)

static int dir_add(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct dirbuf *d = arg;

	if (ino == d->hide)
		return 0; /* /.ckptfs: reachable by name, not listed (like ZFS's .zfs) */
	struct stat st = { .st_ino = ino, .st_mode = mode & S_IFMT };
	size_t n = fuse_add_direntry(d->req, d->buf + d->len, d->size - d->len, name, &st,
				     (off_t)cookie + 2);

	if (n > d->size - d->len)
		return 1; /* full */
	d->len += n;
	return 0;
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckfs *fs = req_fs(req);
	struct idx_inode a;
	int rc;

	pthread_mutex_lock(&fs->mu);
	rc = steps_is_vino(ino) ? -ENOTDIR : idx_inode_get(fs->ix, ino, &a);
	pthread_mutex_unlock(&fs->mu);
	if (rc == 0 && !S_ISDIR(a.mode))
		rc = -ENOTDIR;
	if (rc < 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_open(req, fi);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct ckfs *fs = req_fs(req);
	struct dirbuf d = { .req = req, .size = size };
	int rc = 0;

	d.hide = ino == IDX_ROOT_INO ? fs->meta_ino : 0;

	d.buf = malloc(size ? size : 1);
	if (!d.buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_lock(&fs->mu);
	if (off == 0)
		settle_for_reader(fs);
	/* offsets: 0 start, 1 after ".", 2 after "..", cookie + 2 after an entry */
	if (off < 1) {
		struct stat st = { .st_ino = ino, .st_mode = S_IFDIR };
		size_t n = fuse_add_direntry(req, d.buf, size, ".", &st, 1);

		if (n <= size)
			d.len += n;
		else
			goto done;
		off = 1;
	}
	if (off < 2) {
		uint64_t up = IDX_ROOT_INO;
		struct stat st = { .st_mode = S_IFDIR };

		if (ino != IDX_ROOT_INO)
			idx_dentry_parent(fs->ix, ino, &up, NULL, 0);
		st.st_ino = up;
		size_t n = fuse_add_direntry(req, d.buf + d.len, size - d.len, "..", &st, 2);

		if (n <= size - d.len)
			d.len += n;
		else
			goto done;
		off = 2;
	}
	if (off < VOFF_BASE) {
		rc = idx_dir_list(fs->ix, ino, off - 2, dir_add, &d);
		if (rc > 0) { /* buffer full */
			rc = 0;
			goto done;
		}
		if (rc < 0)
			goto done;
		off = VOFF_BASE;
	}
	for (int k = (int)(off - VOFF_BASE) - 100 + 1; ino == fs->meta_ino && k < META_FILE_COUNT;
	     k++) {
		struct stat st = { .st_ino = VINO_META(k), .st_mode = S_IFREG };
		size_t n;

		if (k < 0)
			k = 0;
		n = fuse_add_direntry(req, d.buf + d.len, size - d.len, meta_file_name(k), &st,
				      VOFF_BASE + 100 + k);
		if (n > size - d.len)
			break;
		d.len += n;
	}
	if (off < VOFF_BASE + 1 && steps_rank_dir(fs, ino) >= 0) {
		char tmp[LAYOUT_TRACKER_MAX];
		uint64_t v = steps_tracker_vino(fs, ino, LAYOUT_MF1);
		struct stat st = { .st_ino = v, .st_mode = S_IFREG };

		if (v && steps_vcontent(fs, v, tmp, sizeof(tmp), NULL) >= 0) {
			size_t n = fuse_add_direntry(req, d.buf + d.len, size - d.len, "meta.json",
						     &st, VOFF_BASE + 1);

			if (n <= size - d.len)
				d.len += n;
		}
	}
	for (int k = (int)(off - VOFF_BASE) + 1; ino == IDX_ROOT_INO && k < 64; k++) {
		char name[256], other[256];
		struct stat st = { .st_ino = VINO_BASE + (uint64_t)k, .st_mode = S_IFREG };
		bool dup = false;

		if (steps_vname(fs, k, name, sizeof(name)) < 0)
			continue;
		/* layouts sharing a tracker (Megatron, MindFormers 2.0) list it once */
		for (int j = 1; j < k && !dup; j++)
			dup = steps_vname(fs, j, other, sizeof(other)) >= 0 && !strcmp(name, other);
		if (dup)
			continue;
		size_t n = fuse_add_direntry(req, d.buf + d.len, size - d.len, name, &st,
					     VOFF_BASE + k);

		if (n > size - d.len)
			break;
		d.len += n;
	}
done:
	pthread_mutex_unlock(&fs->mu);
	if (rc < 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_buf(req, d.buf, d.len);
	free(d.buf);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0); /* every namespace change is durable when it returns */
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct ckfs *fs = req_fs(req);
	struct statvfs sv;

	if (statvfs(fs->repo->root, &sv) < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	sv.f_namemax = NAME_MAX;
	fuse_reply_statfs(req, &sv);
}

/*
 * fallocate(2) as ext4 takes it, on a file whose bytes are content-addressed: no space is
 * reserved (a later write can still find the disk full: README "Limits"). Mode 0 grows the
 * size, FALLOC_FL_KEEP_SIZE alone changes nothing, PUNCH_HOLE (with KEEP_SIZE, as the kernel
 * requires) and ZERO_RANGE make the range a hole (zeros, no chunk), ZERO_RANGE growing the
 * size unless KEEP_SIZE. Other modes (COLLAPSE_RANGE, INSERT_RANGE, UNSHARE_RANGE) are
 * EOPNOTSUPP. An end past CKPTFS_MAX_FILE_SIZE is EFBIG. Each costs O(1) in the range's
 * length; a hole punched into stored data costs a copy of the file's data once (oi_punch).
 */
static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
			 struct fuse_file_info *fi)
{
	const int known = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;
	struct ckfs *fs = req_fs(req);
	uint64_t end = (uint64_t)offset + (uint64_t)length;
	int rc = 0;

	if ((mode & ~known) || h->vkind || !h->oi ||
	    ((mode & FALLOC_FL_PUNCH_HOLE) && (mode & FALLOC_FL_ZERO_RANGE))) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if (offset < 0 || length <= 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (end < (uint64_t)offset || end > CKPTFS_MAX_FILE_SIZE) {
		fuse_reply_err(req, EFBIG);
		return;
	}
	if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
		rc = oi_punch(fs, h->oi, (uint64_t)offset, (uint64_t)length);
		h->wrote = true;
	}
	if (rc == 0 && !(mode & FALLOC_FL_KEEP_SIZE)) {
		pthread_rwlock_rdlock(&h->oi->lock);
		uint64_t size = h->oi->size;

		pthread_rwlock_unlock(&h->oi->lock);
		if (end > size) {
			rc = oi_truncate(fs, h->oi, end);
			h->wrote = true;
		}
	}
	fuse_reply_err(req, -rc);
}

/*
 * lseek(2)'s SEEK_DATA and SEEK_HOLE (the kernel answers SEEK_SET, SEEK_CUR and SEEK_END itself):
 * a regular file's holes are the ranges no chunk backs (oi_seek_data); a virtual file is all
 * data. ENXIO at or past the end, as ext4.
 */
static void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		     struct fuse_file_info *fi)
{
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;
	uint64_t r = 0;
	int rc;

	if ((whence != SEEK_DATA && whence != SEEK_HOLE) || off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (h->vkind || !h->oi) {
		if ((uint64_t)off >= h->vlen)
			rc = -ENXIO;
		else
			rc = 0, r = whence == SEEK_DATA ? (uint64_t)off : h->vlen;
	} else {
		rc = oi_seek_data(h->oi, (uint64_t)off, whence == SEEK_DATA, &r);
	}
	if (rc < 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_lseek(req, (off_t)r);
}

/* ---- extended attributes (xattr.c keeps them) ---- */

/* A virtual inode (trackers, /.ckptfs) has no attributes and takes none. fs->mu not held. */
static bool xa_virtual(struct ckfs *fs, fuse_ino_t ino)
{
	bool v;

	if (ino >= VINO_BASE)
		return true;
	pthread_mutex_lock(&fs->mu);
	v = in_meta(fs, ino);
	pthread_mutex_unlock(&fs->mu);
	return v;
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	struct ckfs *fs = req_fs(req);
	int f = (flags & XATTR_CREATE ? IDX_XATTR_CREATE : 0) |
		(flags & XATTR_REPLACE ? IDX_XATTR_REPLACE : 0);
	int rc;

	if (flags & ~(XATTR_CREATE | XATTR_REPLACE))
		rc = -EINVAL;
	else if (xa_virtual(fs, ino))
		rc = ino >= VINO_BASE ? -EPERM : -EROFS;
	else
		rc = fs_xattr_set(fs, ino, name, value, size, f);
	fuse_reply_err(req, -rc);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct ckfs *fs = req_fs(req);
	char *buf = NULL;
	int rc;

	if (xa_virtual(fs, ino)) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	if (size && !(buf = malloc(size))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	rc = fs_xattr_get(fs, ino, name, buf, size);
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
	struct ckfs *fs = req_fs(req);
	char *buf = NULL;
	ssize_t rc;

	if (xa_virtual(fs, ino)) {
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
	rc = fs_xattr_list(fs, ino, buf, size);
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
	struct ckfs *fs = req_fs(req);
	int rc;

	if (xa_virtual(fs, ino))
		rc = ino >= VINO_BASE ? -EPERM : -EROFS;
	else
		rc = fs_xattr_remove(fs, ino, name);
	fuse_reply_err(req, -rc);
}

const struct fuse_lowlevel_ops ckfs_ops = {
	.init = op_init,
	.destroy = op_destroy,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.readlink = op_readlink,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.open = op_open,
	.read = op_read,
	.write = op_write,
	.flush = op_flush,
	.release = op_release,
	.fsync = op_fsync,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.fsyncdir = op_fsyncdir,
	.statfs = op_statfs,
	.create = op_create,
	.fallocate = op_fallocate,
	.lseek = op_lseek,
	.setxattr = op_setxattr,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.removexattr = op_removexattr,
};
