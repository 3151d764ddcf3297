/*
 * oi_read.c — reads of an open regular file's content (struct oinode, write.h): from the
 * staging file in staging mode; in stream mode from the stored extents, the chunks in flight
 * and the segments not yet cut, zeros for holes (invariant 1). Also SEEK_DATA / SEEK_HOLE.
 *
 * A chunk that cannot be read back whole is marked bad in the index and the read fails with
 * -EIO: wrong bytes are never returned.
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

/* ---- read, write, truncate ---- */

/*
 * Note buf[0, len) as the next segment of rv (rv may be NULL: plain copy). Bytes in the caller's
 * scratch buffer, laid out like the reply, extend the previous segment when they follow it.
 */
static void rv_add(struct oi_readv *rv, const uint8_t *p, size_t len)
{
	if (!rv || len == 0)
		return;
	struct iovec *last = rv->n ? &rv->iov[rv->n - 1] : NULL;

	if (last && (const uint8_t *)last->iov_base + last->iov_len == p) {
		last->iov_len += len;
		return;
	}
	rv->iov[rv->n].iov_base = (void *)p;
	rv->iov[rv->n].iov_len = len;
	rv->n++;
}

/*
 * want bytes at offset in of chunk h: in place (held) when rv has room for that segment and one
 * more (the copies after it then merge into one), else copied to dst. Returns the bytes there
 * (short only at the chunk's end) or store_chunk_pread's errors.
 */
static ssize_t chunk_bytes(struct ckfs *fs, const struct store_hash *h, uint8_t *dst, size_t want,
			   uint64_t in, struct oi_readv *rv)
{
	const uint8_t *data;
	size_t size;
	struct store_hold *hold;
	ssize_t n;
	int err;

	if (!rv || rv->n >= OI_READV_MAX - 2) {
		n = store_chunk_pread(fs->st, h, dst, want, in);
		if (n > 0)
			rv_add(rv, dst, (size_t)n);
		return n;
	}
	if ((err = store_chunk_hold(fs->st, h, &data, &size, &hold)) < 0)
		return err;
	rv->hold[rv->n_hold++] = hold;
	n = in < size ? (ssize_t)(size - in < want ? size - in : want) : 0;
	rv_add(rv, data + in, (size_t)n);
	return n;
}

/*
 * ext_find - index of the last extent with offset <= pos, 0 when there is none (then
 * ext[0].offset > pos, or n_ext == 0): O(log n_ext). Caller holds the lock.
 */
static size_t ext_find(const struct oinode *oi, uint64_t pos)
{
	size_t lo = 0, hi = oi->n_ext;

	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;

		if (oi->ext[mid].offset <= pos)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/*
 * Staging mode: len bytes at off (len within the file's size) from the staging file; a sparse
 * tail beyond the staging file's end reads as zeros. Returns len or pread's -errno.
 */
static ssize_t read_staged(struct oinode *oi, uint8_t *buf, size_t len, uint64_t off,
			   struct oi_readv *rv)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(oi->stage_fd, buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0) { /* sparse tail beyond the staging file's end reads as zeros */
			memset(buf + done, 0, len - done);
			done = len;
			break;
		}
		done += (size_t)n;
	}
	rv_add(rv, buf, done);
	return (ssize_t)done;
}

/*
 * Chunk h of oi could not be read whole (n: chunk_bytes' result, an -errno or a short count):
 * mark it bad in the index (best effort, takes fs->mu; not for -EAGAIN, a remote that did not
 * answer) and log it once. Returns -EIO.
 */
static int chunk_bad(struct ckfs *fs, const struct oinode *oi, const struct store_hash *h,
		     ssize_t n)
{
	char hex[2 * STORE_HASH_LEN + 1];

	if (n == -EAGAIN) { /* another node's chunk, no sound copy from the remote: not bad here */
		ckpt_log("cannot read chunk '%s' of inode %llu: the remote gave no sound copy (it "
			 "did not answer, or its copy is being replaced: .ckptfs/status says which); "
			 "try again\n", store_hash_hex(h, hex), (unsigned long long)oi->ino);
		return -EIO;
	}
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	if (idx_begin(fs->ix) == 0 &&
	    (idx_chunk_mark_bad(fs->ix, h->b) < 0 || idx_commit(fs->ix) < 0))
		idx_rollback(fs->ix);
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	ckpt_log("cannot read chunk '%s' of inode %llu: %s\n",
		store_hash_hex(h, hex), (unsigned long long)oi->ino,
		n < 0 ? strerror((int)-n) : "short chunk");
	return -EIO;
}

ssize_t oi_read_locked(struct ckfs *fs, struct oinode *oi, uint8_t *buf, size_t len,
			   uint64_t off, struct oi_readv *rv)
{
	size_t done = 0;

	if (off >= oi->size)
		return 0;
	if (len > oi->size - off)
		len = oi->size - off;
	if (oi->stage_fd >= 0)
		return read_staged(oi, buf, len, off, rv);
	while (done < len) {
		uint64_t pos = off + done;

		if (pos >= oi->ext_end && oi->fly_lost)
			return oi->err; /* invariant 1's exception: these bytes are gone */
		if (pos >= oi->data_end) {
			/* the zeros of a file grown past its data (invariant 1) */
			memset(buf + done, 0, len - done);
			rv_add(rv, buf + done, len - done);
			done = len;
			break;
		}
		struct store_hash h;
		size_t want = len - done;
		uint64_t in;
		ssize_t n;

		if (pos >= oi->ext_end) {
			/* data_end and ext_end are fixed under the read lock; the cutter moves
			 * cut_start and the workers finish jobs meanwhile, under fly_mu */
			ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
			if (pos >= oi->cut_start) { /* not cut yet: in the segments */
				if (want > oi->data_end - pos)
					want = (size_t)(oi->data_end - pos);
				oi_segs_copy_locked(oi, pos, buf + done, want);
				ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
				rv_add(rv, buf + done, want);
				done += want;
				continue;
			}
			/* in flight: the raw bytes while the pool works on them, else the stored chunk */
			struct fly_job *j = oi->fly_head;

			while (j && j->off + j->len <= pos)
				j = j->next;
			if (!j) {
				ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
				return -EIO; /* invariant 1 says this cannot be */
			}
			in = pos - j->off;
			if (want > j->len - in)
				want = j->len - in;
			if (!j->done) {
				memcpy(buf + done, j->buf + in, want);
				ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
				rv_add(rv, buf + done, want);
				done += want;
				continue;
			}
			int err = j->err;

			h = j->info.hash;
			ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
			if (err)
				return err == -ENOMEM ? -ENOMEM : -EIO;
		} else {
			size_t lo = ext_find(oi, pos);
			const struct idx_extent *e = lo < oi->n_ext ? &oi->ext[lo] : NULL;

			if (!e || pos < e->offset || pos >= e->offset + e->length) {
				/* a hole (invariant 1): zeros up to the next extent, or ext_end */
				uint64_t end = oi->ext_end;

				if (e && pos >= e->offset)
					e = lo + 1 < oi->n_ext ? &oi->ext[lo + 1] : NULL;
				if (e)
					end = e->offset;
				if (want > end - pos)
					want = (size_t)(end - pos);
				memset(buf + done, 0, want);
				rv_add(rv, buf + done, want);
				done += want;
				continue;
			}
			in = pos - e->offset;
			if (want > e->length - in)
				want = e->length - in;
			memcpy(h.b, e->hash, STORE_HASH_LEN);
		}
		n = chunk_bytes(fs, &h, buf + done, want, in, rv);
		if (n != (ssize_t)want) {
			if (n == -ENOMEM)
				return -ENOMEM;
			/* missing, damaged or short chunk: never return wrong bytes */
			return chunk_bad(fs, oi, &h, n);
		}
		done += want;
	}
	return (ssize_t)done;
}

ssize_t oi_read(struct ckfs *fs, struct oinode *oi, void *buf, size_t len, uint64_t off)
{
	ssize_t rc;

	pthread_rwlock_rdlock(&oi->lock);
	rc = oi_read_locked(fs, oi, buf, len, off, NULL);
	pthread_rwlock_unlock(&oi->lock);
	return rc;
}

ssize_t oi_read_iov(struct ckfs *fs, struct oinode *oi, uint8_t *scratch, size_t len,
		    uint64_t off, struct oi_readv *rv)
{
	ssize_t rc;

	rv->n = rv->n_hold = 0;
	pthread_rwlock_rdlock(&oi->lock);
	rc = oi_read_locked(fs, oi, scratch, len, off, rv);
	if (rc > 0)
		ra_note_read(fs, oi, off, (size_t)rc);
	pthread_rwlock_unlock(&oi->lock);
	if (rc <= 0)
		rv->n = 0; /* the holds stay until oi_readv_release */
	return rc;
}

void oi_readv_release(struct ckfs *fs, struct oi_readv *rv)
{
	while (rv->n_hold > 0)
		store_chunk_release(fs->st, rv->hold[--rv->n_hold]);
	rv->n = 0;
}

/*
 * oi_stream_next - stream mode, pos < size: the first offset >= pos in data (data true) or in a
 * hole (false), or size when there is none. Data: the extents, and the bytes [ext_end, data_end) not
 * yet stored; holes: the gaps between extents, up to ext_end, and [data_end, size) (invariant
 * 1). Adjacent extents are one run of data. Caller holds the lock; drained or not, the ranges
 * are the same (in-flight chunks tile [ext_end, cut_start)).
 */
uint64_t oi_stream_next(const struct oinode *oi, uint64_t pos, bool data)
{
	if (pos >= oi->data_end)
		return data ? oi->size : pos;
	if (pos >= oi->ext_end)
		return data ? pos : oi->data_end;
	size_t i = ext_find(oi, pos);
	const struct idx_extent *e = oi->n_ext ? &oi->ext[i] : NULL;
	bool in = e && pos >= e->offset && pos < e->offset + e->length;

	if (data) {
		size_t j = e && pos >= e->offset ? i + 1 : i;

		if (in)
			return pos;
		if (j < oi->n_ext)
			return oi->ext[j].offset;
		return oi->data_end > oi->ext_end ? oi->ext_end : oi->size;
	}
	if (!in)
		return pos;
	uint64_t end = e->offset + e->length;
	size_t j = i + 1;

	while (j < oi->n_ext && oi->ext[j].offset == end)
		end += oi->ext[j++].length;
	if (j == oi->n_ext && end == oi->ext_end)
		end = oi->data_end; /* the bytes not yet stored follow */
	return end;
}

int oi_seek_data(struct oinode *oi, uint64_t off, bool data, uint64_t *ret_off)
{
	int rc = 0;

	pthread_rwlock_rdlock(&oi->lock);
	if (off >= oi->size) {
		rc = -ENXIO;
	} else if (oi->stage_fd >= 0) {
		off_t r = lseek(oi->stage_fd, (off_t)off, data ? SEEK_DATA : SEEK_HOLE);

		if (r < 0)
			rc = -errno;
		else
			*ret_off = (uint64_t)r < oi->size ? (uint64_t)r : oi->size;
	} else {
		uint64_t r = oi_stream_next(oi, off, data);

		if (data && r >= oi->size)
			rc = -ENXIO;
		else
			*ret_off = r;
	}
	pthread_rwlock_unlock(&oi->lock);
	return rc;
}
