/*
 * oinode.c — the content of open regular files: the table of open inodes, their lifetime
 * (oi_get, oi_put) and locking, writes (appends to the stream, a staging file for writes at
 * other offsets), truncate and hole punching. The appended bytes' segments are in oi_seg.c,
 * their cutting into chunks in oi_cut.c, reads in oi_read.c, the commit that makes a file's
 * content durable and records it in the index in oi_commit.c, writes made in place inside the
 * stored chunks in oi_overwrite.c; the helpers they share are declared in oi_int.h.
 *
 * The modes and invariants are described on struct oinode (write.h). Appended bytes are cut
 * and their chunks stored by the write-back pool (wb.c) while the writer goes on; commit drains
 * them first.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/core/lockrank.h"
#include "fs/write/oi_int.h"

/* ---- table ---- */

struct oinode *oi_find(struct ckfs *fs, uint64_t ino)
{
	struct oinode *oi = fs->otab[ino % OTAB_BUCKETS];

	while (oi && oi->ino != ino)
		oi = oi->next;
	return oi;
}

struct oinode *oi_next_dirty(struct ckfs *fs)
{
	for (unsigned i = 0; i < OTAB_BUCKETS; i++)
		for (struct oinode *oi = fs->otab[i]; oi; oi = oi->next)
			if (atomic_load(&oi->ov_dirty) && !oi->err) {
				oi->refs++;
				return oi;
			}
	return NULL;
}

static void oi_free(struct ckfs *fs, struct oinode *oi)
{
	/* drained by the caller (invariant 5): no job left, the cutter idle; what was not stored
	 * is dropped with it (invariant 7) */
	space_release(fs, oi_uncut_held(oi) + oi->stage_held);
	oi_segs_put(fs, oi->seg_head);
	pthread_mutex_destroy(&oi->fly_mu);
	pthread_cond_destroy(&oi->fly_cv);
	if (oi->stage_fd >= 0)
		close(oi->stage_fd);
	store_hasher_free(oi->hasher);
	free(oi->ext);
	free(oi->pins);
	pthread_rwlock_destroy(&oi->lock);
	free(oi);
}


/*
 * A file whose zeros were stored as chunks (written as zeros, or grown by a store that predates
 * holes) ends in chunks of zeros. Leave them out of the stream: bytes [data_end, size) read as
 * zeros (invariant 1), so writing the file in order from the end of its data is an append and
 * stays on the write-back stream, and commit records what is left of them as a hole. A
 * chunk is taken for zeros only when it is stored at least 64 times smaller than its length (a
 * cheap test no float tensor passes; a short last chunk, stored raw, is always looked at) and its
 * digest is that of zeros of its length.
 */
#define ZERO_TEST_FREE (64u * 1024u) /* bytes: hashing this many zeros costs microseconds */
static void trim_zero_tail(struct oinode *oi, uint64_t floor)
{
	uint8_t *zeros = NULL;
	size_t n_before = oi->n_ext;

	while (oi->n_ext && oi->ext[oi->n_ext - 1].offset >= floor) {
		const struct idx_extent *e = &oi->ext[oi->n_ext - 1];
		struct store_hash h;

		if (e->length > STORE_CHUNK_MAX ||
		    (e->length > ZERO_TEST_FREE && e->stored_size > e->length / 64))
			break;
		if (!zeros && !(zeros = calloc(1, STORE_CHUNK_MAX)))
			break; /* keep them: the stream is only slower */
		store_hash_buf(zeros, e->length, &h);
		if (memcmp(h.b, e->hash, STORE_HASH_LEN) != 0)
			break;
		oi->ext_end = e->offset;
		oi->n_ext--;
	}
	free(zeros);
	if (oi->n_ext == 0) { /* the stream starts at 0: its digest can be kept as it is written */
		store_hasher_reset(oi->hasher);
		oi->hash_ok = true; /* invariant 4: nothing consumed, fly_end 0 */
	} else if (oi->n_ext != n_before) {
		oi->hash_ok = false; /* the hasher has consumed the zeros dropped */
	}
}


/*
 * Stream mode, a write at off below data_end: when every byte from off to data_end is a zero
 * kept in trailing zero chunks and the chunk being cut, drop them, so that the write is an
 * append. This is trim_zero_tail's case for a file whose state stayed in memory between its
 * layout and its writes (the committer still held it when fio reopened it). Content is unchanged: bytes past
 * data_end read as zeros (invariant 1). Caller holds the write lock.
 */
static void trim_zeros_from(struct ckfs *fs, struct oinode *oi, uint64_t off)
{
	size_t n_ext = oi->n_ext;
	uint64_t ext_end = oi->ext_end;
	bool hash_ok = oi->hash_ok;

	oi_fly_drain(fs, oi);
	if (oi->fly_lost || oi->err || oi->ext_end < off)
		return;
	/* drained: the bytes past ext_end are the chunk being cut, in the segments */
	for (uint64_t pos = oi->ext_end; pos < oi->data_end;) {
		uint8_t buf[4096];
		size_t n = oi->data_end - pos < sizeof(buf) ? (size_t)(oi->data_end - pos) : sizeof(buf);

		ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
		oi_segs_copy_locked(oi, pos, buf, n);
		ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
		for (size_t i = 0; i < n; i++)
			if (buf[i])
				return;
		pos += n;
	}
	trim_zero_tail(oi, off);
	if (oi->ext_end != off) { /* not all zeros, or no chunk boundary at off: as it was */
		oi->n_ext = n_ext;
		oi->ext_end = ext_end;
		oi->hash_ok = hash_ok; /* n_ext > 0 here: the hasher was not reset */
		return;
	}
	oi_stream_cut_back(fs, oi, oi->ext_end);
}

/*
 * Make the state of regular file attr->ino, absent from the table, from its attributes and
 * extents (ext: owned by the new state on success, freed here on failure), with one reference.
 * fs->mu held.
 */
static int oi_make(struct ckfs *fs, const struct idx_inode *attr, struct idx_extent *ext,
		   size_t n_ext, struct oinode **ret)
{
	struct oinode *oi = calloc(1, sizeof(*oi));

	if (!oi) {
		free(ext);
		return -ENOMEM;
	}
	oi->ino = attr->ino;
	oi->stage_fd = -1;
	pthread_rwlock_init(&oi->lock, NULL);
	pthread_mutex_init(&oi->fly_mu, NULL);
	pthread_cond_init(&oi->fly_cv, NULL);
	oi->ext = ext;
	oi->n_ext = oi->cap_ext = n_ext;
	oi->hasher = store_hasher_new();
	if (!oi->hasher) {
		oi_free(fs, oi);
		return -ENOMEM;
	}
	oi->size = attr->size;
	oi->ext_end = oi->n_ext ? oi->ext[oi->n_ext - 1].offset + oi->ext[oi->n_ext - 1].length : 0;
	if (oi->ext_end > oi->size ||
	    (oi->ext_end != oi->size && !(attr->flags & IDX_INODE_SPARSE))) {
		/* index invariant 4 broken: refuse rather than serve wrong bytes */
		oi_free(fs, oi);
		return -EIO;
	}
	/* a sparse file's trailing hole [ext_end, size) is the zeros after data_end (invariant 1) */
	oi->hash_ok = oi->size == 0;
	trim_zero_tail(oi, 0);
	/* no lock: nobody else sees oi yet */
	oi->cut_start = oi->data_end = oi->space_mark = oi->ext_end;
	oi->refs = 1;
	oi->next = fs->otab[attr->ino % OTAB_BUCKETS];
	fs->otab[attr->ino % OTAB_BUCKETS] = oi;
	*ret = oi;
	return 0;
}

int oi_get(struct ckfs *fs, uint64_t ino, struct oinode **ret)
{
	struct idx_inode attr;
	struct idx_extent *ext = NULL;
	size_t n_ext = 0;
	struct oinode *oi = oi_find(fs, ino);
	int rc;

	if (oi) {
		oi->refs++;
		*ret = oi;
		return 0;
	}
	if ((rc = idx_inode_get(fs->ix, ino, &attr)) < 0)
		return rc;
	if (!S_ISREG(attr.mode))
		return -EISDIR;
	if ((rc = idx_file_extents(fs->ix, ino, &ext, &n_ext)) < 0)
		return rc;
	return oi_make(fs, &attr, ext, n_ext, ret);
}

int oi_get_created(struct ckfs *fs, const struct idx_inode *attr, struct oinode **ret)
{
	assert(S_ISREG(attr->mode) && attr->size == 0 && !oi_find(fs, attr->ino));
	return oi_make(fs, attr, NULL, 0, ret);
}

/* Drop every pin taken since the last commit; delete chunk files that nothing references. */
void oi_drop_pins(struct ckfs *fs, struct oinode *oi)
{
	for (size_t i = 0; i < oi->n_pins; i++)
		pins_chunk_unpin(fs, &oi->pins[i]);
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	for (size_t i = 0; i < oi->n_pins; i++) {
		if (idx_chunk_exists(fs->ix, oi->pins[i].b) == 0)
			pins_chunk_free(fs, &oi->pins[i]);
	}
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	oi->n_pins = 0;
}

void oi_put(struct ckfs *fs, struct oinode *oi)
{
	struct oinode **pp;
	struct idx_inode attr;
	struct ino_freed fr = { 0 };
	bool last;

	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	last = --oi->refs == 0;
	if (last) {
		pp = &fs->otab[oi->ino % OTAB_BUCKETS];
		while (*pp != oi)
			pp = &(*pp)->next;
		*pp = oi->next;
		if (idx_inode_get(fs->ix, oi->ino, &attr) == 0 && attr.nlink == 0 &&
		    !ino_referenced(fs, oi->ino)) {
			bool ok;

			ok = idx_begin(fs->ix) == 0 &&
			     idx_inode_delete(fs->ix, oi->ino, ino_release_collect, &fr) == 0 &&
			     idx_commit(fs->ix) == 0;

			if (!ok)
				idx_rollback(fs->ix); /* recovery deletes it at the next mount */
			ino_release_finish(fs, &fr, ok);
		}
	}
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	if (last) {
		pthread_rwlock_wrlock(&oi->lock);
		oi_fly_drain(fs, oi);
		pthread_rwlock_unlock(&oi->lock);
		oi_drop_pins(fs, oi);
		oi_free(fs, oi);
	}
}

/* The attribute overlay after a change of oi; written: the bytes the change wrote. oi->lock held
 * for writing. */
static void set_overlay(struct ckfs *fs, struct oinode *oi, uint64_t written)
{
	atomic_fetch_add(&oi->ov_written, written);
	atomic_store(&oi->ov_size, oi->size);
	atomic_store(&oi->ov_mtime, ckfs_now(fs));
	atomic_store(&oi->ov_dirty, true);
	oi->dirty = true;
}

/*
 * Stream mode: append len bytes (zeros when buf is NULL) at data_end. The writer copies them
 * into the segments (a new one whenever seg_tail is full), each piece charged to the pool's
 * budget first (wb_reserve: may wait), publishes them under fly_mu and queues the cutter once
 * CUT_KICK bytes wait for it. Chunking, hashing and storing happen on the workers. Returns 0 or
 * -ENOMEM (a segment could not be allocated: the bytes before it are in the stream). Caller
 * holds the write lock.
 */
static int stream_append(struct ckfs *fs, struct oinode *oi, const uint8_t *buf, size_t len)
{
	while (len) {
		struct seg *sg = oi->seg_tail, *dead = NULL; /* only this writer changes seg_tail */
		bool fresh = !sg || sg->len == sg->cap;

		if (fresh && !(sg = oi_seg_new(fs, oi->data_end, WB_SEG)))
			return -ENOMEM;
		size_t n = sg->cap - sg->len < len ? sg->cap - sg->len : len;

		if (sg->len + n > sg->resident) {
			wb_reserve(fs->wr.wb, sg->len + n - sg->resident);
			/* pages never touched: one call faults them in (the writer's copy takes no
			 * trap per page); a kept buffer (resident == cap) never gets here */
			oi_seg_populate(sg->buf + sg->resident, sg->len + n - sg->resident);
			sg->resident = sg->len + n;
		}
		if (buf)
			memcpy(sg->buf + sg->len, buf, n);
		else
			memset(sg->buf + sg->len, 0, n);
		ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
		if (fresh) {
			if (oi->seg_tail)
				oi->seg_tail->next = sg;
			else
				oi->seg_head = sg;
			oi->seg_tail = sg;
			oi_segs_trim_locked(oi, &dead); /* the old tail, if the cutter is past it */
		}
		sg->len += n;
		oi->data_end += n;
		ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
		oi_segs_put(fs, dead);
		len -= n;
		if (buf)
			buf += n;
		oi_cut_kick(fs, oi, fs->wr.wb ? CUT_KICK : 1, false);
	}
	return 0;
}

/* Copy [0, size) of the current stream content into a new staging file and switch to it. */
static int enter_staging(struct ckfs *fs, struct oinode *oi)
{
	size_t bufsz = STORE_CHUNK_MAX;
	uint8_t *buf;
	int fd, rc = 0;

	oi_fly_drain(fs, oi);
	if (oi->fly_lost)
		return oi->err; /* the bytes past ext_end are gone */
	fd = openat(fs->wr.staging_dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	buf = malloc(bufsz);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	for (size_t i = 0; i < oi->n_ext && rc == 0; i++) {
		const struct idx_extent *e = &oi->ext[i];
		struct store_hash h;
		ssize_t n;

		memcpy(h.b, e->hash, STORE_HASH_LEN);
		n = store_chunk_pread(fs->st, &h, buf, e->length, 0);
		if (n != (ssize_t)e->length)
			rc = n < 0 ? (n == -ENOMEM ? -ENOMEM : -EIO) : -EIO;
		else if (pwrite(fd, buf, e->length, (off_t)e->offset) != (ssize_t)e->length)
			rc = errno ? -errno : -EIO;
	}
	/* drained: the bytes past ext_end are in the segments (the chunk being cut, or more when
	 * the cutter stopped on a failure) */
	for (uint64_t pos = oi->ext_end; rc == 0 && pos < oi->data_end;) {
		size_t n = oi->data_end - pos < bufsz ? (size_t)(oi->data_end - pos) : bufsz;

		ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
		oi_segs_copy_locked(oi, pos, buf, n);
		ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
		if (pwrite(fd, buf, n, (off_t)pos) != (ssize_t)n)
			rc = errno ? -errno : -EIO;
		pos += n;
	}
	if (rc == 0 && ftruncate(fd, (off_t)oi->size) < 0)
		rc = -errno;
	free(buf);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	oi->stage_fd = fd;
	atomic_fetch_add(&fs->wr.n_staging, 1);
	/* the bytes not yet stored are now in the staging file, not yet in chunks: still held
	 * (invariant 7) */
	oi->stage_held += oi_uncut_held(oi);
	oi->space_mark = oi->data_end; /* drained: the cutter is idle */
	oi->n_ext = 0;
	oi->ext_end = 0;
	oi_stream_cut_back(fs, oi, 0);
	oi->hash_ok = false;
	return 0;
}

/* Back to an empty stream. Pins of dropped chunks stay until the next commit. */
static void reset_empty(struct ckfs *fs, struct oinode *oi)
{
	oi_fly_drain(fs, oi);
	oi->fly_lost = false;
	if (oi->stage_fd >= 0) {
		close(oi->stage_fd);
		oi->stage_fd = -1;
	}
	space_release(fs, oi->stage_held);
	oi->stage_held = 0;
	oi->n_ext = 0;
	oi->ext_end = 0;
	oi_stream_cut_back(fs, oi, 0);
	oi->size = 0;
	oi->err = 0;
	store_hasher_reset(oi->hasher);
	oi->hash_ok = true;
}


/* Take oi's write lock (held on return, also on failure) and harvest the finished chunks.
 * Returns 0, or the file's sticky error. */
static int wrlock_harvest(struct ckfs *fs, struct oinode *oi)
{
	pthread_rwlock_wrlock(&oi->lock);
	oi_fly_harvest(fs, oi);
	return oi->err;
}

ssize_t oi_write(struct ckfs *fs, struct oinode *oi, const void *buf, size_t len, uint64_t off)
{
	ssize_t rc = (ssize_t)len;
	bool inplace = false;

	if (off + len < off || off + len > CKPTFS_MAX_FILE_SIZE)
		return -EFBIG;
	if (wrlock_harvest(fs, oi) < 0) {
		rc = oi->err;
		goto out;
	}
	if (oi->stage_fd < 0 && off < oi->data_end)
		trim_zeros_from(fs, oi, off);
	if (oi->stage_fd < 0 && off != oi->data_end) {
		int r = 0;

		/* inside the stored chunks: in place, at the cost of this write (oi_overwrite.c);
		 * elsewhere, or past its budget, a staging copy of the file */
		oi_fly_drain(fs, oi);
		inplace = oi_overwrite_fits(oi, len, off);
		if (!inplace)
			r = enter_staging(fs, oi);
		if (r < 0) {
			rc = r;
			goto out;
		}
	}
	if (space_reserve(fs, len) < 0) { /* as ext4 does at write(): invariant 7 */
		rc = -ENOSPC;
		goto out;
	}
	if (inplace) {
		int r = oi_overwrite(fs, oi, buf, len, off);

		space_release(fs, len); /* stored, or not taken: invariant 7 */
		if (r < 0) {
			rc = r;
			goto out;
		}
	} else if (oi->stage_fd >= 0) {
		size_t done = 0;

		while (done < len) {
			ssize_t n = pwrite(oi->stage_fd, (const uint8_t *)buf + done, len - done,
					   (off_t)(off + done));

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				rc = done ? (ssize_t)done : -errno;
				break;
			}
			done += (size_t)n;
		}
		if (done && off + done > oi->size)
			oi->size = off + done;
		oi->stage_held += done;
		space_release(fs, len - done);
	} else {
		uint64_t end0 = oi->data_end;
		int r = stream_append(fs, oi, buf, len);

		space_release(fs, len - (oi->data_end - end0)); /* the bytes not taken */
		if (oi->data_end > oi->size)
			oi->size = oi->data_end;
		if (r < 0) {
			/* the bytes not taken are lost: the file cannot be committed until rewritten */
			oi->err = r;
			rc = r;
		}
	}
	set_overlay(fs, oi, rc > 0 ? (uint64_t)rc : 0);
out:
	pthread_rwlock_unlock(&oi->lock);
	return rc;
}

int oi_truncate(struct ckfs *fs, struct oinode *oi, uint64_t size)
{
	int rc = 0;

	if (size > CKPTFS_MAX_FILE_SIZE)
		return -EFBIG;
	pthread_rwlock_wrlock(&oi->lock);
	if (size == oi->size)
		goto out_touch;
	if (size == 0) {
		reset_empty(fs, oi);
		goto out_touch;
	}
	if (oi->stage_fd < 0 && size >= oi->data_end) {
		/* grow, or shrink within the zeros: nothing written is cut (invariant 1) */
		oi->size = size;
		goto out_touch;
	}
	if (oi->stage_fd < 0 && (rc = enter_staging(fs, oi)) < 0)
		goto out;
	if (ftruncate(oi->stage_fd, (off_t)size) < 0) {
		rc = -errno;
		goto out;
	}
	oi->size = size;
out_touch:
	set_overlay(fs, oi, 0);
out:
	pthread_rwlock_unlock(&oi->lock);
	return rc;
}

int oi_punch(struct ckfs *fs, struct oinode *oi, uint64_t off, uint64_t len)
{
	int rc = 0;

	if (off + len < off)
		return -EFBIG;
	if ((rc = wrlock_harvest(fs, oi)) < 0)
		goto out;
	uint64_t end = off + len < oi->size ? off + len : oi->size;

	if (off >= end || (oi->stage_fd < 0 && off >= oi->data_end))
		goto out; /* nothing there, or zeros already (invariant 1) */
	if (oi->stage_fd < 0 && (rc = enter_staging(fs, oi)) < 0)
		goto out;
	if (fallocate(oi->stage_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
		      (off_t)(end - off)) < 0) {
		rc = -errno;
		goto out;
	}
	set_overlay(fs, oi, 0);
out:
	pthread_rwlock_unlock(&oi->lock);
	return rc;
}

int write_staging_open(struct ckfs *fs)
{
	fs->wr.staging_dirfd = openat(fs->repo->dir_fd, "staging",
				      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fs->wr.staging_dirfd < 0 ? -errno : 0;
}

void write_close(struct ckfs *fs)
{
	pins_free(fs->wr.pins);
	fs->wr.pins = NULL;
	if (fs->wr.staging_dirfd >= 0)
		close(fs->wr.staging_dirfd);
	fs->wr.staging_dirfd = -1;
}
