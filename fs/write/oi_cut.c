/* SPDX-License-Identifier: MIT */
/*
 * oi_cut.c — an open file's appended bytes cut into chunks and stored while the writer goes
 * on: the cutter (queued on the write-back pool, wb.c, or run inline), the chunks in flight,
 * their harvest into the file's extents in file order (write.h invariant 5), and the pins a
 * file takes on the chunks it stored until its commit.
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

/* ---- chunks in flight (write-back) ---- */

static int oi_note_pin(struct oinode *oi, const struct store_hash *h);

/*
 * Move finished in-flight chunks, in file order, into the extents (their pins into pins[]);
 * stop at the first one not finished. A failed one sets err and fly_lost; the pins of the
 * chunks stored after it are still collected (dropped at the next commit or the last put).
 * Caller holds the write lock.
 */
void oi_fly_harvest(struct ckfs *fs, struct oinode *oi)
{
	int cut_err;

	for (;;) {
		struct fly_job *j;

		ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
		j = oi->fly_head;
		if (j && !j->done)
			j = NULL;
		if (j) {
			oi->fly_head = j->next;
			if (!oi->fly_head)
				oi->fly_tail = NULL;
		}
		ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
		if (!j)
			break;
		int rc = j->err;

		if (rc == 0 && (rc = oi_note_pin(oi, &j->info.hash)) < 0)
			pins_chunk_unpin(fs, &j->info.hash);
		if (rc == 0 && !oi->fly_lost &&
		    (rc = oi_ext_reserve(&oi->ext, &oi->cap_ext, oi->n_ext + 1)) == 0) {
			struct idx_extent *e = &oi->ext[oi->n_ext++];

			e->offset = j->off;
			e->length = j->len;
			e->stored_size = j->info.stored_size;
			e->codec = j->info.codec;
			memcpy(e->hash, j->info.hash.b, STORE_HASH_LEN);
			oi->ext_end = j->off + j->len;
		}
		if (rc < 0 && !oi->fly_lost) {
			oi->fly_lost = true;
			if (!oi->err)
				oi->err = rc;
		}
		free(j);
	}
	ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
	cut_err = oi->cut_err;
	ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
	if (cut_err && !oi->err)
		oi->err = cut_err; /* the bytes stay readable; the file cannot be committed */
}

static void cut_loop(struct ckfs *fs, struct oinode *oi);

/*
 * Start oi's cutter if it is idle and at least min_bytes (>= 1) wait for it: queued in the
 * pool, or run on this thread when inline or there is no pool. Caller holds the write lock, not
 * fly_mu.
 */
void oi_cut_kick(struct ckfs *fs, struct oinode *oi, uint64_t min_bytes, bool inline_cut)
{
	bool go, queue = fs->wr.wb && !inline_cut;

	ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
	go = oi->cut_state == CUT_IDLE && !oi->cut_err &&
	     oi->data_end - oi->cut_start - oi->cdc.len >= min_bytes;
	if (go)
		oi->cut_state = queue ? CUT_QUEUED : CUT_RUNNING;
	ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
	if (go && queue)
		wb_cut_schedule(fs->wr.wb, oi);
	else if (go)
		cut_loop(fs, oi);
}

/*
 * Wait for oi's cutter, cut what it left here, wait until no chunk of oi is in flight, then
 * harvest them all (invariant 5). Caller holds the write lock.
 */
void oi_fly_drain(struct ckfs *fs, struct oinode *oi)
{
	ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
	while (oi->cut_state != CUT_IDLE)
		ckpt_cond_wait(&oi->fly_cv, &oi->fly_mu, CKPT_RANK_FLY, NULL);
	ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
	/* cut the rest here rather than hand it to the pool: this thread would only wait (only a
	 * writer, and this thread holds the write lock, can start the cutter meanwhile) */
	oi_cut_kick(fs, oi, 1, true);
	ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
	while (oi->fly_busy)
		ckpt_cond_wait(&oi->fly_cv, &oi->fly_mu, CKPT_RANK_FLY, NULL);
	ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
	oi_fly_harvest(fs, oi);
}

/* ---- helpers ---- */

static int oi_note_pin(struct oinode *oi, const struct store_hash *h)
{
	if (oi->n_pins == oi->cap_pins) {
		size_t ncap = oi->cap_pins ? oi->cap_pins * 2 : 16;
		struct store_hash *p = realloc(oi->pins, ncap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		oi->pins = p;
		oi->cap_pins = ncap;
	}
	oi->pins[oi->n_pins++] = *h;
	return 0;
}

int oi_ext_reserve(struct idx_extent **ext, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t ncap = *cap ? *cap * 2 : 64;

	while (ncap < need)
		ncap *= 2;
	struct idx_extent *p = realloc(*ext, ncap * sizeof(*p));

	if (!p)
		return -ENOMEM;
	*ext = p;
	*cap = ncap;
	return 0;
}

/* Put one chunk (pinned) and describe it as an extent at offset. */
int oi_put_extent(struct ckfs *fs, struct oinode *oi, const uint8_t *buf, size_t len,
		      uint64_t offset, struct idx_extent *ret)
{
	struct store_chunk_info info;
	int rc = pins_chunk_put(fs, buf, len, 0, &info);

	if (rc < 0)
		return rc;
	if ((rc = oi_note_pin(oi, &info.hash)) < 0) {
		pins_chunk_unpin(fs, &info.hash);
		return rc;
	}
	ret->offset = offset;
	ret->length = (uint32_t)len;
	ret->stored_size = info.stored_size;
	ret->codec = info.codec;
	memcpy(ret->hash, info.hash.b, STORE_HASH_LEN);
	return 0;
}

/* ---- the cutter ---- */

void oi_job_run(struct ckfs *fs, struct fly_job *j)
{
	struct store_chunk_info info;
	unsigned flags = wb_should_defer(fs->wr.wb) ? STORE_PUT_DEFER : 0;
	int rc = pins_chunk_put(fs, j->buf, j->len, flags, &info);
	struct oinode *oi = j->oi;
	uint32_t held = j->held;

	if (rc == -ENOSPC && flags) /* the raw copy did not fit: a compressed one may */
		rc = pins_chunk_put(fs, j->buf, j->len, 0, &info);

	if (rc == 0 && !info.existed && info.codec == STORE_CODEC_DEFERRED)
		atomic_fetch_add(&fs->wr.n_deferred, 1);
	struct seg *sg = j->seg;

	ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
	if (rc == 0)
		j->info = info;
	j->err = rc;
	j->done = true;
	j->buf = NULL;
	j->seg = NULL;
	oi->fly_busy--;
	pthread_cond_broadcast(&oi->fly_cv);
	ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY); /* j and oi are off limits now (struct fly_job) */
	oi_seg_put(fs, sg);
	/* on disk, or dropped with the file's bytes in flight (fly_lost): invariant 7 */
	space_release(fs, held);
}

/*
 * The cutter found the end of the chunk being cut: [cut_start, end), at most STORE_CHUNK_MAX
 * bytes, so in one segment or across two. Make it a job pointing into its segment, or into a
 * copy when it spans two; append it to the in-flight list, move cut_start to end, drop the
 * segments below it and submit the job (or store it here without a pool). Returns 0 or
 * -ENOMEM (nothing changed). Called by the running cutter only.
 */
static int cut_emit(struct ckfs *fs, struct oinode *oi, uint64_t end)
{
	uint64_t start = oi->cut_start; /* only the running cutter moves it */
	size_t len = (size_t)(end - start);
	struct fly_job *j = calloc(1, sizeof(*j));
	struct seg *sg, *dead = NULL;
	bool inside;

	if (!j)
		return -ENOMEM;
	ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
	sg = oi_seg_at(oi, start);
	inside = end <= sg->off + sg->len;
	if (inside)
		atomic_fetch_add(&sg->refs, 1);
	ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
	if (inside) {
		j->buf = sg->buf + (start - sg->off);
	} else {
		/* sg is full and not the tail, so sg->len and sg->next are fixed, and neither it
		 * nor the next one (which holds end) goes before cut_start passes them. The copy's
		 * buffer is a STORE_CHUNK_MAX one the pool can keep, charged as far as written. */
		struct seg *own = oi_seg_new(fs, start, STORE_CHUNK_MAX);
		size_t a = (size_t)(sg->off + sg->len - start);

		if (!own) {
			free(j);
			return -ENOMEM;
		}
		if (own->resident < len) {
			wb_charge(fs->wr.wb, len - own->resident);
			oi_seg_populate(own->buf + own->resident, len - own->resident);
			own->resident = len;
		}
		own->len = len;
		memcpy(own->buf, sg->buf + (start - sg->off), a);
		memcpy(own->buf + a, sg->next->buf, len - a);
		sg = own; /* the job takes its one reference */
		j->buf = own->buf;
	}
	j->seg = sg;
	j->oi = oi;
	j->off = start;
	j->len = (uint32_t)len;
	/* invariant 7: the part above space_mark (a commit stored the rest as its provisional
	 * last chunk) */
	j->held = end > oi->space_mark ? (uint32_t)(end - (start > oi->space_mark ? start :
							     oi->space_mark)) : 0;
	ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
	if (oi->fly_tail)
		oi->fly_tail->next = j;
	else
		oi->fly_head = j;
	oi->fly_tail = j;
	oi->fly_busy++;
	oi->cut_start = end;
	oi_segs_trim_locked(oi, &dead);
	ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
	oi_segs_put(fs, dead);
	if (fs->wr.wb)
		wb_submit(fs->wr.wb, j);
	else
		oi_job_run(fs, j);
	return 0;
}

/*
 * The cutter, cut_state CUT_RUNNING (set by the caller): feed the bytes [cut_start + cdc.len,
 * data_end) to the chunker and the hasher (invariant 4), emitting each chunk cut, until caught
 * up with data_end; then CUT_IDLE. Bytes below data_end never change (only the writer writes,
 * above it), so they are read without fly_mu. On a failure, cut_err is set and the cutter stops.
 */
static void cut_loop(struct ckfs *fs, struct oinode *oi)
{
	for (;;) {
		ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
		uint64_t pos = oi->cut_start + oi->cdc.len;

		if (oi->cut_err || pos >= oi->data_end) {
			oi->cut_state = CUT_IDLE;
			pthread_cond_broadcast(&oi->fly_cv);
			ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY); /* oi is off limits to a worker now */
			return;
		}
		struct seg *sg = oi_seg_at(oi, pos);
		size_t in = (size_t)(pos - sg->off), avail = sg->len - in;

		ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
		const uint8_t *p = sg->buf + in;
		size_t cut = store_cdc_feed(&oi->cdc, p, avail);
		size_t take = cut ? cut : avail;

		if (oi->hash_ok)
			store_hasher_update(oi->hasher, p, take);
		if (cut) {
			int rc = cut_emit(fs, oi, pos + take);

			if (rc < 0) {
				ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
				oi->cut_err = rc; /* cdc and hasher are past cut_start: see harvest */
				ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
			}
		}
	}
}

void oi_cut_run(struct ckfs *fs, struct oinode *oi)
{
	ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
	oi->cut_state = CUT_RUNNING;
	ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
	cut_loop(fs, oi);
}

