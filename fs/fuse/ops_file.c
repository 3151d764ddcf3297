/*
 * ops_file.c — the FUSE file operations: open, create, read, write, flush, fsync, release,
 * fallocate, lseek. File content goes through oinode.c; a virtual tracker's handle keeps its
 * bytes in struct fh (ops_int.h).
 *
 * Handlers reply exactly once, a positive errno on error; helpers return -errno.
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

/* Longest claim kept from a tracker write; more is accepted and dropped (the claim is junk). */
#define CLAIM_MAX (1 << 20)
/* PF_EXITING in /proc/PID/stat flags (include/linux/sched.h): the task is exiting. */
#define PF_EXITING_FLAG 0x4UL

static void fh_free(struct fh *h)
{
	free(h->vbuf);
	free(h);
}

/* ---- files ---- */

/* Hand handle h of a regular file to the kernel in fi; privs: the file's mode has set-user-ID or
 * set-group-ID. */
static void handle_set(struct fuse_file_info *fi, struct fh *h, bool privs)
{
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->keep_cache = 0; /* close-to-open: drop pages cached from an earlier open */
	/* A write-only handle cannot be mapped, so nothing needs its pages: its writes go straight
	 * to the daemon (no page-cache copy: a faster transport, perf-anchors.md). Handles
	 * that can read keep the page cache, which MAP_SHARED mappings need (libfuse 3.14 cannot
	 * ask for FUSE_DIRECT_IO_ALLOW_MMAP), and so do files with set-user-ID or set-group-ID:
	 * the kernel clears those bits on a cached write only (we leave that to it, op_init). */
	if ((fi->flags & O_ACCMODE) == O_WRONLY && !privs)
		fi->direct_io = 1;
	fi->noflush = (fi->flags & O_ACCMODE) == O_RDONLY; /* fs_op_flush: nothing to do */
}

/* A handle of regular file ino opened with fi->flags. writer: the caller's thread id for an
 * open; 0 for a create, whose name already told the step engine (fs_make_node). */
static int open_handle(struct ckfs *fs, uint64_t ino, struct fuse_file_info *fi, pid_t writer)
{
	struct fh *h = calloc(1, sizeof(*h));
	int rc;

	if (!h)
		return -ENOMEM;
	fs_tune_read_ahead(fs);
	fs_lock(fs);
	struct idx_inode attr;
	bool privs = false;

	if ((fi->flags & O_ACCMODE) != O_RDONLY && fs_in_meta(fs, ino))
		rc = -EROFS;
	else
		rc = oi_get(fs, ino, &h->oi);
	if (rc == 0 && (fi->flags & O_ACCMODE) != O_RDONLY && writer)
		/* an InternEvo slot keeps its complete version; the step knows its writer */
		steps_before_write(fs, ino, writer);
	if (rc == 0 && idx_inode_get(fs->ix, ino, &attr) == 0)
		privs = (attr.mode & (S_ISUID | S_ISGID)) != 0;
	fs_unlock(fs);
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
	handle_set(fi, h, privs);
	return 0;
}

/*
 * Open virtual tracker vino (kind: its layout, name: the name it was created by, or NULL):
 * readers get a snapshot of what it says now, writers a buffer that becomes a claim at flush.
 * created: an open(O_CREAT) that created the name, during which the kernel holds the parent's
 * lock: the names a reader's snapshot moved are then left to the reaper to send.
 */
static int open_tracker(struct ckfs *fs, uint64_t vino, int kind, const char *name,
			bool created, struct fuse_file_info *fi)
{
	struct fh *h = calloc(1, sizeof(*h));
	int rc = 0;

	if (!h)
		return -ENOMEM;
	h->vkind = kind;
	if (name)
		snprintf(h->vname, sizeof(h->vname), "%s", name);
	else if (steps_vino_rank(vino) >= 0 &&
		 layout_tracker_path(kind, -1, steps_vino_rank(vino), h->vname, sizeof(h->vname)) < 0)
		h->vname[0] = '\0';
	if (!name && steps_vino_rank(vino) < 0) {
		fs_lock(fs);
		rc = steps_vname(fs, kind, h->vname, sizeof(h->vname));
		fs_unlock(fs);
	}
	if (rc >= 0 && (fi->flags & O_ACCMODE) == O_RDONLY) {
		cq_wait_idle(fs); /* the steps of files closed before this open (commit.c) */
		h->vcap = 4096;
		h->vbuf = malloc(h->vcap);
		if (!h->vbuf) {
			rc = -ENOMEM;
		} else {
			fs_lock(fs);
			rc = steps_vcontent(fs, vino, h->vbuf, h->vcap, NULL);
			fs_unlock(fs);
			/* a step restored for this reader replaced a name the kernel may have cached:
			 * drop it before the reader can look it up */
			ckpt_fault("tracker-flush");
			if (!created)
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
	fi->noflush = (fi->flags & O_ACCMODE) == O_RDONLY; /* a reader claims nothing */
	return 0;
}

/*
 * Open a file of /.ckptfs/snapshots (view.c) for reading: a handle on the index inode behind it,
 * as an open of the file at its name (its reads verified the same way; the open holds the inode
 * and its chunks until the release, whatever retention does meanwhile). Writers get -EROFS.
 */
static int open_view(struct ckfs *fs, uint64_t ino, struct fuse_file_info *fi)
{
	struct idx_inode a;
	uint64_t real;
	int rc;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))
		return -EROFS;
	fs_lock(fs);
	rc = fs_view_real(fs, ino, &real);
	if (rc == 0)
		rc = idx_inode_get(fs->ix, real, &a);
	if (rc == 0 && S_ISDIR(a.mode))
		rc = -EISDIR;
	fs_unlock(fs);
	if (rc < 0)
		return rc;
	return open_handle(fs, real, fi, 0);
}

/* Answer an open of a file handle made by open_handle or open_view (rc: theirs). */
static void reply_opened(fuse_req_t req, struct ckfs *fs, struct fuse_file_info *fi, int rc)
{
	if (rc < 0) {
		fuse_reply_err(req, -rc);
	} else if (fuse_reply_open(req, fi) == -ENOENT) {
		/* the open was interrupted: no release will come for this handle */
		struct fh *h = (struct fh *)(uintptr_t)fi->fh;

		oi_put(fs, h->oi);
		free(h);
	}
}

void fs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (fs_view_ino(ino)) {
		struct ckfs *fs = fs_req_fs(req);

		reply_opened(req, fs, fi, open_view(fs, ino, fi));
		return;
	}
	if (fs_meta_of(ino) >= 0) {
		struct ckfs *fs = fs_req_fs(req);
		struct idx_stats mst;
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
		bool have = fs_meta_stats(fs, fs_meta_of(ino), true, &mst) > 0;

		ckpt_lock(&fs->mu, CKPT_RANK_FS);
		rc = fs_meta_render(fs, fs_meta_of(ino), have ? &mst : NULL, &h->vbuf, &h->vlen);
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
		if (rc < 0) {
			fh_free(h);
			fuse_reply_err(req, -rc);
			return;
		}
		fi->fh = (uint64_t)(uintptr_t)h;
		fi->direct_io = 1;
		fi->noflush = 1; /* read-only: fs_op_flush would have nothing to do */
		fuse_reply_open(req, fi);
		return;
	}
	if (steps_is_vino(ino)) {
		int kind = steps_vino_kind(ino);
		int rc = open_tracker(fs_req_fs(req), ino, kind, NULL, false, fi);

		if (rc < 0)
			fuse_reply_err(req, -rc);
		else
			fuse_reply_open(req, fi);
		return;
	}
	struct ckfs *fs = fs_req_fs(req);

	reply_opened(req, fs, fi, open_handle(fs, ino, fi, fuse_req_ctx(req)->pid));
}

/*
 * open(O_CREAT) of a new name: a virtual tracker's handle, or a new regular file. The file's
 * creation, its attributes for the reply and its open-inode state are made in one fs->mu
 * section from the row just written, without reading it back.
 */
void fs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct ckfs *fs = fs_req_fs(req);
	struct fuse_entry_param e = { 0 };
	struct idx_inode a;
	struct fh *h;
	uint64_t ino;
	int rc;

	fs_lock(fs);
	int tk = steps_tracker_name(fs, parent, name);
	uint64_t vino = tk ? steps_tracker_vino(fs, parent, tk) : 0;

	if (tk && vino) {
		char cname[300];

		if (parent == IDX_ROOT_INO ||
		    steps_tracker_path(fs, parent, tk, cname, sizeof(cname)) < 0)
			snprintf(cname, sizeof(cname), "%s", name);
		fs_unlock(fs);
		rc = open_tracker(fs, vino, tk, cname, true, fi);
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
	h = calloc(1, sizeof(*h));
	rc = h ? fs_make_node(req, fs, parent, name, S_IFREG | (mode & 07777), 0, NULL, false,
			      &ino, &a) : -ENOMEM;
	if (rc == 0)
		rc = oi_get_created(fs, &a, &h->oi);
	if (rc == 0) {
		fs_stat_created(fs, &a, &e.attr);
		ino_lookup_inc(fs, ino);
	}
	fs_unlock(fs);
	if (rc < 0) {
		/* a name made without its open is removed by recovery, as any file never closed */
		free(h);
		fuse_reply_err(req, -rc);
		return;
	}
	fs_tune_read_ahead(fs);
	/* A created file becomes durable (even if empty) at its first close or fsync; until then a
	 * crash leaves no trace of it (idx_recover). Truncating the empty file sets its overlay. */
	h->wrote = true;
	rc = oi_truncate(fs, h->oi, 0);
	assert(rc == 0); /* to size 0: nothing to cut, no staging file */
	handle_set(fi, h, (a.mode & (S_ISUID | S_ISGID)) != 0);
	fi->noflush = 0; /* even read-only, the creating handle's close commits the file */
	e.ino = ino;
	e.attr_timeout = ATTR_TIMEOUT;
	e.entry_timeout = ATTR_TIMEOUT;
	fuse_reply_create(req, &e, fi);
}

void fs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
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
	 * from the iovec, and the daemon copies nothing. fuse_reply_iov writes the reply before
	 * it returns; the holds go after it.
	 */
	struct ckfs *fs = fs_req_fs(req); /* req is gone after the reply */
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

void fs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
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
	n = oi_write(fs_req_fs(req), oi, buf, size, (uint64_t)off);
	h->wrote = true;
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_write(req, (size_t)n);
}

/* Never called for a read-only open of an existing file: those say FOPEN_NOFLUSH (open_handle,
 * open_tracker), since a handle that wrote nothing has nothing to commit or claim here. */
void fs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckfs *fs = fs_req_fs(req);
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;
	pid_t pid = fuse_req_ctx(req)->pid;
	unsigned long pflags = 0;
	int rc = 0;

	if (h->vkind) {
		if (h->vdirty) {
			/* the files closed before the tracker are durable before its claim is
			 * judged: the step it names can complete at once */
			cq_wait_idle(fs);
			ckpt_lock(&fs->mu, CKPT_RANK_FS);
			steps_on_claim(fs, h->vkind, h->vname, h->vbuf ? h->vbuf : "", h->vlen, pid);
			ckpt_unlock(&fs->mu, CKPT_RANK_FS);
			h->vdirty = false;
		}
		fuse_reply_err(req, 0);
		return;
	}
	if (h->wrote) {
		/* DESIGN.md: a flush from an exiting process means the writer died with the file
		 * open (the kernel flushes from do_exit): the file is torn */
		bool torn = ckpt_pid_flags(pid, &pflags) == 0 && (pflags & PF_EXITING_FLAG);

		/* close() returns once the bytes are in memory: the committer makes them durable
		 * and tells the step engine (commit.c). An error already known is reported here.
		 * Committed here, before the close returns (steps_commit_at_close):
		 *  - a step's marker: the engine judges it at the path it has when committed, and
		 *    trainers rename the step directory right after (Orbax's tmp dir, HF's
		 *    tmp-checkpoint-N), where it would no longer be the marker of the step it
		 *    seals. Markers are small.
		 *  - a file of a sealed step: the tracker already names the step (DeepSpeed's
		 *    `latest`, written before the ranks' last shards close), so the save returns
		 *    once this close does, and a daemon killed then must keep the step. */
		rc = oi_error(h->oi);
		bool now = rc == 0 && steps_commit_at_close(fs, h->oi->ino);

		if (rc == 0 && !now) {
			oi_stream_shrink(fs, h->oi); /* it waits with its bytes, not 8 MiB */
			if (cq_submit(fs, h->oi, pid, torn) == 0) {
				fuse_reply_err(req, 0);
				return;
			}
		}
		if (now && !torn)
			cq_wait_idle(fs); /* the files closed before are durable first, so the
					     step can complete before this close returns */
		rc = oi_commit(fs, h->oi);
		if (rc == 0)
			steps_on_commit(fs, h->oi, pid, torn);
	}
	fuse_reply_err(req, -rc);
}

void fs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;
	int rc;

	if (h->vkind) {
		fuse_reply_err(req, 0);
		return;
	}
	rc = oi_commit(fs_req_fs(req), h->oi);
	if (rc == 0 && h->wrote)
		steps_on_commit(fs_req_fs(req), h->oi, fuse_req_ctx(req)->pid, false);
	fuse_reply_err(req, -rc);
}

void fs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckfs *fs = fs_req_fs(req);
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;

	if (h->vkind) {
		fh_free(h);
		fuse_reply_err(req, 0);
		return;
	}
	/* a committer job not yet started commits everything written before this release
	 * (commit.c invariant 5): committing here too would only take its sync away from the batch */
	if (h->wrote && !(cq_on(fs) && atomic_load(&h->oi->cq_waiting) > 0)) {
		int rc = oi_commit(fs, h->oi);

		if (rc < 0)
			ckpt_log("cannot make inode %llu durable at close: %s\n",
				(unsigned long long)ino, strerror(-rc));
	}
	oi_put(fs, h->oi);
	fh_free(h);
	fuse_reply_err(req, 0);
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
void fs_op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
			 struct fuse_file_info *fi)
{
	const int known = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;
	struct ckfs *fs = fs_req_fs(req);
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
 * data. ENXIO at or past the end and for a negative off, as ext4 (the kernel forwards off
 * unchecked: fs/fuse/file.c fuse_lseek).
 */
void fs_op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		     struct fuse_file_info *fi)
{
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;
	uint64_t r = 0;
	int rc;

	if (whence != SEEK_DATA && whence != SEEK_HOLE) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (off < 0) { /* ext4 (iomap_seek_data, iomap_seek_hole): no data nor hole before 0 */
		fuse_reply_err(req, ENXIO);
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