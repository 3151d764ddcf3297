/*
 * oi_commit.c — the commit that makes an open file's content durable and records it in the
 * index (struct oinode, write.h).
 *
 * Commit order (DESIGN.md, "Durability"): every chunk put -> store_sync (one syncfs: chunk data
 * and names durable) -> one index transaction replacing the file's extents -> pins dropped ->
 * chunk files no longer referenced are deleted. A group commit (oi_commit_many, for the
 * committer) keeps that order for every file of the group: all their chunks put, one store_sync,
 * one transaction replacing the extents of them all, then each file's pins and freed chunks.
 * Each half runs with the file's write lock held (oi_commit_begin, oi_commit_end).
 */
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


/*
 * Stream mode: whole-file digest of [0, size) by reading its data back and recording each hole
 * (store_hasher_hole), the runs as oi_stream_next finds them, so that the digest is the one verify
 * computes from the committed extents.
 */
static int hash_content(struct ckfs *fs, struct oinode *oi, struct store_hash *ret)
{
	struct store_hasher *hs = store_hasher_new();
	size_t bufsz = STORE_CHUNK_MAX;
	uint8_t *buf = malloc(bufsz);
	int rc = 0;

	if (!hs || !buf) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint64_t pos = 0; pos < oi->size;) {
		uint64_t d = oi_stream_next(oi, pos, true), h;

		store_hasher_hole(hs, pos, d - pos);
		if (d >= oi->size)
			break;
		h = oi_stream_next(oi, d, false);
		for (pos = d; pos < h;) {
			size_t want = h - pos < bufsz ? (size_t)(h - pos) : bufsz;
			ssize_t n = oi_read_locked(fs, oi, buf, want, pos, NULL);

			if (n <= 0) {
				rc = n < 0 ? (int)n : -EIO;
				goto out;
			}
			store_hasher_update(hs, buf, (size_t)n);
			pos += (uint64_t)n;
		}
	}
	store_hasher_digest(hs, ret);
out:
	free(buf);
	store_hasher_free(hs);
	return rc;
}

/*
 * stage_cut - cut the staging file's bytes [start, end) into chunks (the chunker restarted at
 * start, the last chunk ending at end), appending them to *ext (n used, cap allocated) and their
 * bytes to hs. buf: 2 * STORE_CHUNK_MAX bytes of scratch. Returns 0 or -errno.
 */
static int stage_cut(struct ckfs *fs, struct oinode *oi, uint64_t start, uint64_t end,
		     uint8_t *buf, struct idx_extent **ext, size_t *n, size_t *cap,
		     struct store_hasher *hs)
{
	size_t bufcap = 2 * STORE_CHUNK_MAX, have = 0;
	uint64_t pos = start, base = start;
	int rc;

	while (base < end) {
		/* fill the window */
		while (have < bufcap && pos < end) {
			size_t want = bufcap - have;

			if (want > end - pos)
				want = (size_t)(end - pos);
			ssize_t r = pread(oi->stage_fd, buf + have, want, (off_t)pos);

			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				return -errno;
			if (r == 0) { /* past the staging file's end: zeros */
				memset(buf + have, 0, want);
				r = (ssize_t)want;
			}
			have += (size_t)r;
			pos += (uint64_t)r;
		}
		size_t cut = store_cdc_cut(buf, have, pos >= end);

		if (cut == 0)
			return -EIO;
		if ((rc = oi_ext_reserve(ext, cap, *n + 1)) < 0)
			return rc;
		if ((rc = oi_put_extent(fs, oi, buf, cut, base, &(*ext)[*n])) < 0)
			return rc;
		store_hasher_update(hs, buf, cut);
		(*n)++;
		base += cut;
		memmove(buf, buf + cut, have - cut);
		have -= cut;
	}
	return 0;
}

/*
 * Staging mode: cut the staging file's data into chunks, its holes (SEEK_DATA / SEEK_HOLE, those
 * of STORE_HOLE_MIN and more) left as gaps between the extents: O(data), not O(size). On success
 * *ret_hash is the whole-file digest, *ret_end the end of the last extent (0: none), and
 * oi->hasher covers [0, *ret_end) (interior holes recorded), ready for the stream to go on there.
 */
static int commit_staging(struct ckfs *fs, struct oinode *oi, struct idx_extent **ret_ext,
			  size_t *ret_n, struct store_hash *ret_hash, uint64_t *ret_end)
{
	uint8_t *buf = malloc(2 * STORE_CHUNK_MAX);
	struct idx_extent *ext = NULL;
	struct store_hasher *hs = store_hasher_new(), *whole = NULL;
	uint64_t pos = 0;
	size_t n = 0, ecap = 0;
	int rc = 0;

	if (!buf || !hs) {
		rc = -ENOMEM;
		goto fail;
	}
	while (pos < oi->size) {
		uint64_t start = 0, end = 0;

		if ((rc = store_data_run(oi->stage_fd, pos, oi->size, &start, &end)) < 0)
			goto fail;
		if (rc == 0)
			break;
		store_hasher_hole(hs, pos, start - pos);
		if ((rc = stage_cut(fs, oi, start, end, buf, &ext, &n, &ecap, hs)) < 0)
			goto fail;
		pos = end;
	}
	rc = 0;
	if (!(whole = store_hasher_copy(hs))) {
		rc = -ENOMEM;
		goto fail;
	}
	store_hasher_hole(whole, pos, oi->size - pos);
	store_hasher_digest(whole, ret_hash);
	store_hasher_free(whole);
	free(buf);
	store_hasher_free(oi->hasher);
	oi->hasher = hs;
	*ret_ext = ext;
	*ret_n = n;
	*ret_end = pos;
	return 0;
fail:
	free(buf);
	free(ext);
	store_hasher_free(hs);
	return rc;
}

/*
 * Stream mode, drained: the extents to commit (owned, free()) and the whole-file digest. The
 * extents end at cut_start, and the chunk being cut, [cut_start, data_end), is stored as the
 * last one, as if the file ended here. It stays in the segments so later appends are cut as one
 * stream, and this provisional last extent is replaced at the next commit. The hasher has
 * consumed [0, data_end). Returns 0, -EIO or oi->err (in-flight bytes lost), -ENOMEM, or the
 * -errno of a chunk put or of hash_content; the out-parameters are untouched on failure.
 * Write lock held.
 */
static int commit_stream(struct ckfs *fs, struct oinode *oi, struct idx_extent **ret_all,
			 size_t *ret_n, struct store_hash *ret_digest)
{
	struct idx_extent *all;
	size_t n_all = oi->n_ext, pend = (size_t)(oi->data_end - oi->cut_start);
	int rc = 0;

	if (oi->fly_lost)
		return oi->err ? oi->err : -EIO;
	all = malloc((n_all + 1) * sizeof(*all));
	if (!all)
		return -ENOMEM;
	if (n_all)
		memcpy(all, oi->ext, n_all * sizeof(*all));
	if (pend) {
		uint8_t *last = malloc(pend);

		if (!last) {
			rc = -ENOMEM;
			goto fail;
		}
		ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
		oi_segs_copy_locked(oi, oi->cut_start, last, pend);
		ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
		rc = oi_put_extent(fs, oi, last, pend, oi->cut_start, &all[n_all]);
		free(last);
		if (rc < 0)
			goto fail;
		n_all++;
	}
	if (oi->hash_ok) {
		/* [data_end, size) is a hole (invariant 1), recorded in a copy: the stream goes
		 * on at data_end */
		struct store_hasher *whole = store_hasher_copy(oi->hasher);

		if (!whole) {
			rc = -ENOMEM;
			goto fail;
		}
		store_hasher_hole(whole, oi->data_end, oi->size - oi->data_end);
		store_hasher_digest(whole, ret_digest);
		store_hasher_free(whole);
	} else if ((rc = hash_content(fs, oi, ret_digest)) < 0) {
		goto fail;
	}
	*ret_all = all;
	*ret_n = n_all;
	return 0;
fail:
	free(all);
	return rc;
}

int oi_error(struct oinode *oi)
{
	int err;

	pthread_rwlock_rdlock(&oi->lock);
	err = oi->err;
	pthread_rwlock_unlock(&oi->lock);
	return err;
}

/* One inode's commit between oi_commit_begin and oi_commit_end. */
struct oi_cctx {
	struct idx_extent *all, *staged;
	size_t n_all, n_staged;
	uint64_t staged_end;
	bool from_staging;
	struct store_hash digest;
};

/*
 * First half of a commit, write lock held (taken by the caller): drain the in-flight chunks and
 * store the rest. Returns 1 (chunks stored, ready for store_sync and the index), 0 (clean:
 * nothing to do) or -errno (nothing recorded). On 1, *c owns the extents until oi_commit_end.
 */
static int oi_commit_begin(struct ckfs *fs, struct oinode *oi, struct oi_cctx *c)
{
	int rc;

	memset(c, 0, sizeof(*c));
	oi_fly_drain(fs, oi);
	if (!oi->dirty)
		return 0;
	if (oi->err)
		return oi->err;
	if (oi->stage_fd >= 0) {
		c->from_staging = true;
		rc = commit_staging(fs, oi, &c->staged, &c->n_staged, &c->digest, &c->staged_end);
		if (rc < 0)
			return rc;
		c->all = c->staged;
		c->n_all = c->n_staged;
	} else if ((rc = commit_stream(fs, oi, &c->all, &c->n_all, &c->digest)) < 0) {
		return rc;
	}
	return 1;
}

/*
 * Second half, after the index transaction recorded *c (rc 0) or failed (rc < 0): the inode is
 * clean on success; the extents are freed either way. Write lock still held.
 */
static void oi_commit_end(struct ckfs *fs, struct oinode *oi, struct oi_cctx *c, int rc)
{
	if (rc == 0) {
		for (size_t i = 0; i < c->n_all; i++) {
			if (c->all[i].codec == STORE_CODEC_DEFERRED) {
				/* now in the index, where the recoder looks */
				wb_note_deferred(fs->wr.wb);
				break;
			}
		}
		oi_drop_pins(fs, oi);
		if (c->from_staging) {
			close(oi->stage_fd);
			oi->stage_fd = -1;
			space_release(fs, oi->stage_held); /* in chunks now (invariant 7) */
			oi->stage_held = 0;
			free(oi->ext);
			oi->ext = c->staged;
			oi->cap_ext = oi->n_ext = c->n_staged;
			oi->ext_end = c->staged_end;
			oi_stream_cut_back(fs, oi, c->staged_end); /* the trailing hole */
			oi->hash_ok = true;
			c->staged = c->all = NULL;
		} else {
			oi_space_settle(fs, oi); /* the provisional last chunk is stored */
		}
		oi->dirty = false;
		oi->patched = 0;
		atomic_store(&oi->ov_dirty, false);
		atomic_store(&oi->ov_written, 0);
	}
	if (c->all != c->staged)
		free(c->all);
	free(c->staged);
	c->all = c->staged = NULL;
}

/*
 * The commit's one index transaction, for the entries of ois[0, n) with ready[i]: each one's
 * extents become cs[i].all[0, n_all), its size ois[i]->size and its digest cs[i].digest; the
 * chunks they no longer reference are released once it is durable. The transaction commits
 * lazily under fs->mu and is made durable after fs->mu is let go (idx_sync: the WAL's
 * fdatasync, 0.3 ms median here, which every lookup and create used to wait behind): other
 * requests may see the new content before it is durable, but the caller tells no one (fsync's
 * return, the step engine) before this returns. Returns 0, the index's -errno (rolled back,
 * nothing changed), or idx_sync's -errno (committed, maybe not durable: the freed chunks are
 * kept, for recovery to sweep).
 */
static int commit_index_many(struct ckfs *fs, struct oinode *const *ois,
			     const struct oi_cctx *cs, const bool *ready, size_t n)
{
	struct ino_freed fr = { 0 };
	int rc;

	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	rc = idx_begin_lazy(fs->ix);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (!ready[i])
			continue;
		/* read under fs->mu: op_setattr stores a utimensat's mtime and writes the index
		 * row under it, so a commit racing a utimensat cannot write back the older time */
		int64_t mtime = atomic_load(&ois[i]->ov_mtime);

		rc = idx_file_set_content(fs->ix, ois[i]->ino, cs[i].all, cs[i].n_all,
					  ois[i]->size, cs[i].digest.b,
					  mtime ? mtime : ckfs_now(fs), ino_release_collect, &fr);
	}
	if (rc == 0)
		ckpt_fault("commit-mid-txn");
	if (rc == 0)
		rc = idx_commit(fs->ix);
	if (rc < 0) {
		idx_rollback(fs->ix);
		ino_release_finish(fs, &fr, false);
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
		return rc;
	}
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	rc = idx_sync(fs->ix);
	if (rc < 0)
		ckpt_log("cannot make the index durable (fdatasync of its WAL): %s; the files "
			 "closed now may not survive a power loss", strerror(-rc));
	ckpt_fault("commit-durable");
	if (fr.n) { /* nothing freed, nothing allocated: fr.h is NULL */
		ckpt_lock(&fs->mu, CKPT_RANK_FS);
		ino_release_requeried(fs, &fr);
		ino_release_finish(fs, &fr, rc == 0);
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	}
	return rc;
}

/* commit_index_many of one inode */
static int commit_index(struct ckfs *fs, struct oinode *oi, const struct oi_cctx *c)
{
	const bool ready = true;

	return commit_index_many(fs, &oi, c, &ready, 1);
}

int oi_commit(struct ckfs *fs, struct oinode *oi)
{
	struct oi_cctx c;
	int rc;

	pthread_rwlock_wrlock(&oi->lock);
	rc = oi_commit_begin(fs, oi, &c);
	if (rc > 0) {
		rc = store_sync(fs->st);
		if (rc == 0)
			ckpt_fault("commit-before-index");
		if (rc == 0)
			rc = commit_index(fs, oi, &c);
		oi_commit_end(fs, oi, &c, rc);
	}
	pthread_rwlock_unlock(&oi->lock);
	return rc;
}

size_t oi_commit_many(struct ckfs *fs, struct oinode *const *ois, size_t n, int *rcs)
{
	struct oi_cctx *cs = calloc(n, sizeof(*cs));
	bool *ready = calloc(n, sizeof(*ready));
	size_t m = 0, nready = 0;
	int rc = 0;

	if (!cs || !ready || n == 1) {
		free(cs);
		free(ready);
		rcs[0] = oi_commit(fs, ois[0]);
		return 1;
	}
	pthread_rwlock_wrlock(&ois[0]->lock);
	for (m = 0; m < n; m++) {
		if (m > 0 && pthread_rwlock_trywrlock(&ois[m]->lock) != 0)
			break; /* busy, or ois[m] repeats an inode locked above */
		int r = oi_commit_begin(fs, ois[m], &cs[m]);

		rcs[m] = r < 0 ? r : 0;
		ready[m] = r > 0;
		nready += r > 0;
	}
	if (nready) {
		int synced = store_sync(fs->st);

		if (synced == 0) {
			ckpt_fault("commit-before-index");
			rc = commit_index_many(fs, ois, cs, ready, m);
		}
		for (size_t i = 0; i < m; i++) {
			if (!ready[i])
				continue;
			int r = synced < 0 ? synced : rc;

			if (synced == 0 && rc < 0) /* one inode's failure is not the others' */
				r = commit_index(fs, ois[i], &cs[i]);
			oi_commit_end(fs, ois[i], &cs[i], r);
			rcs[i] = r;
		}
	}
	for (size_t i = m; i-- > 0;)
		pthread_rwlock_unlock(&ois[i]->lock);
	free(cs);
	free(ready);
	return m;
}

