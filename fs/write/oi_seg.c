/* SPDX-License-Identifier: MIT */
/*
 * oi_seg.c — the bytes a writer appended and the write-back has not stored yet: the segment
 * list of an open file's stream (struct seg) and the free-space reservation those bytes hold
 * (write.h invariants 6 and 7). The writer fills segments (oinode.c), the cutter reads them
 * (oi_cut.c), readers copy from them (oi_read.c).
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

/* Stream bytes of oi not yet cut that hold a reservation (invariant 7). fly_mu held, or oi
 * drained with the write lock held. */
uint64_t oi_uncut_held(const struct oinode *oi)
{
	uint64_t from = oi->cut_start > oi->space_mark ? oi->cut_start : oi->space_mark;

	return oi->data_end > from ? oi->data_end - from : 0;
}

void oi_space_settle(struct ckfs *fs, struct oinode *oi)
{
	uint64_t give = oi_uncut_held(oi);

	ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
	oi->space_mark = oi->data_end;
	ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
	space_release(fs, give);
}

/* ---- segments: the bytes appended and not yet stored (struct seg) ---- */

/*
 * Fault in len bytes of a segment buffer not touched yet (a fresh segment, or the new part of a
 * spanning chunk's copy) in one call (MADV_POPULATE_WRITE, Linux 5.14) rather
 * than one page fault per 4 KiB page as the writer copies into it: the kernel still zeroes
 * each page, but the FUSE thread takes no trap per page. Best effort: an older kernel refuses
 * it (EINVAL) and the pages fault as they are written. Not MADV_HUGEPAGE on 2 MiB-aligned
 * buffers: the kernel then zeroes whole huge pages (figures: tests/bench/RESULTS.md).
 */
void oi_seg_populate(uint8_t *buf, size_t len)
{
	long psz = sysconf(_SC_PAGESIZE);
	uintptr_t mask = psz > 0 ? (uintptr_t)psz - 1 : 4095;
	/* malloc's mmap'd chunk starts a page below buf (its header): rounding down stays in it */
	uintptr_t start = (uintptr_t)buf & ~mask;

	(void)madvise((void *)start, (uintptr_t)buf + len - start, MADV_POPULATE_WRITE);
}

/*
 * An empty segment at file offset off with room for cap (WB_SEG, STORE_CHUNK_MAX, or a
 * shrunk file's exact size: oi_stream_shrink) bytes, one reference: a buffer of that size the
 * pool kept (resident: what it has charged for it), else a fresh one (nothing charged or
 * populated yet: stream_append populates each range as it charges it, so a 1 KiB file faults in
 * one page, not the 8 MiB segment). NULL on ENOMEM.
 */
struct seg *oi_seg_new(struct ckfs *fs, uint64_t off, size_t cap)
{
	struct seg *sg = malloc(sizeof(*sg));

	if (!sg)
		return NULL;
	if (!(sg->buf = wb_seg_get(fs->wr.wb, cap, &sg->resident))) {
		sg->buf = malloc(cap);
		if (!sg->buf) {
			free(sg);
			return NULL;
		}
	}
	sg->next = NULL;
	sg->off = off;
	sg->len = 0;
	sg->cap = cap;
	atomic_init(&sg->refs, 1);
	return sg;
}

/* Drop a reference to sg (NULL is fine); the last one frees it (wb_seg_free). */
void oi_seg_put(struct ckfs *fs, struct seg *sg)
{
	if (!sg || atomic_fetch_sub(&sg->refs, 1) != 1)
		return;
	wb_seg_free(fs->wr.wb, sg->buf, sg->cap, sg->resident);
	free(sg);
}

/* seg_put every segment of a list linked by next. */
void oi_segs_put(struct ckfs *fs, struct seg *list)
{
	while (list) {
		struct seg *next = list->next;

		oi_seg_put(fs, list);
		list = next;
	}
}

/* The segment of oi's list holding byte pos (< data_end). fly_mu held. */
struct seg *oi_seg_at(const struct oinode *oi, uint64_t pos)
{
	struct seg *sg = oi->seg_head;

	while (sg->off + sg->len <= pos)
		sg = sg->next;
	return sg;
}

/* Copy bytes [pos, pos + n) (all below data_end, none below seg_head's) from the segments.
 * fly_mu held. */
void oi_segs_copy_locked(const struct oinode *oi, uint64_t pos, uint8_t *dst, size_t n)
{
	for (const struct seg *sg = n ? oi_seg_at(oi, pos) : NULL; n; sg = sg->next) {
		size_t in = (size_t)(pos - sg->off);
		size_t m = sg->len - in < n ? sg->len - in : n;

		memcpy(dst, sg->buf + in, m);
		dst += m;
		pos += m;
		n -= m;
	}
}

/* Unlink the segments wholly below cut_start, but never seg_tail (invariant 6), onto *dead.
 * fly_mu held; the caller oi_segs_put()s *dead after releasing it. */
void oi_segs_trim_locked(struct oinode *oi, struct seg **dead)
{
	while (oi->seg_head != oi->seg_tail &&
	       oi->seg_head->off + oi->seg_head->len <= oi->cut_start) {
		struct seg *sg = oi->seg_head;

		oi->seg_head = sg->next;
		sg->next = *dead;
		*dead = sg;
	}
}

/*
 * Drained stream (invariant 5): forget the bytes past end (the chunk being cut and any bytes
 * the cutter left after a failure) and start cutting at end, a chunk boundary.
 */
void oi_stream_cut_back(struct ckfs *fs, struct oinode *oi, uint64_t end)
{
	uint64_t give = oi_uncut_held(oi); /* drained: only this thread changes them */
	struct seg *dead;

	ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
	dead = oi->seg_head;
	oi->seg_head = oi->seg_tail = NULL;
	oi->cut_start = oi->data_end = oi->space_mark = end;
	oi->cut_err = 0;
	ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
	oi->cdc = (struct store_cdc){ 0 };
	oi_segs_put(fs, dead);
	space_release(fs, give);
}

/*
 * Most bytes a closed file's shrink copies out of its write segment: 64 KiB, below the malloc
 * mmap threshold (128 KiB, daemon.c), so the copy comes from the heap and costs no mapping. Small
 * files (trackers, metadata, a DCP save's small shards) are what it is for.
 */
#define SHRINK_MAX (64u * 1024u)

void oi_stream_shrink(struct ckfs *fs, struct oinode *oi)
{
	struct seg *small = NULL, *dead;
	size_t len;
	bool go;

	pthread_rwlock_wrlock(&oi->lock);
	/* write lock: data_end and the segment list are this thread's; the cutter, idle, cannot
	 * start (only a writer queues it), so cut_start stays too */
	ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
	len = (size_t)(oi->data_end - oi->cut_start);
	go = oi->stage_fd < 0 && oi->cut_state == CUT_IDLE && oi->seg_tail &&
	     oi->seg_tail->cap == WB_SEG && len <= SHRINK_MAX;
	ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
	if (go && len && !(small = oi_seg_new(fs, oi->cut_start, len)))
		go = false; /* the segment stays: only memory is at stake */
	if (go) {
		if (small) {
			wb_charge(fs->wr.wb, len);
			small->len = small->resident = len;
		}
		ckpt_lock(&oi->fly_mu, CKPT_RANK_FLY);
		if (small)
			oi_segs_copy_locked(oi, small->off, small->buf, len);
		/* the jobs pointing into the old segments hold references of their own */
		dead = oi->seg_head;
		oi->seg_head = oi->seg_tail = small;
		ckpt_unlock(&oi->fly_mu, CKPT_RANK_FLY);
		oi_segs_put(fs, dead);
	}
	pthread_rwlock_unlock(&oi->lock);
}
