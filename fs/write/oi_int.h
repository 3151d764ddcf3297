/*
 * oi_int.h — private to the open-file content layer (oinode.c, oi_read.c, oi_commit.c,
 * oi_overwrite.c): the helpers these files share. struct oinode, its modes and numbered
 * invariants are in write.h; "the lock" below is oi->lock, "fly_mu" oi->fly_mu (lock order:
 * fs/daemon.h).
 */
#ifndef CKPTFS_FS_OI_INT_H
#define CKPTFS_FS_OI_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fs/write/write.h"

/* ---- oi_seg.c: the stream's segments and the reservation they hold ---- */

/*
 * oi_uncut_held - the stream bytes of oi not yet cut that hold a free-space reservation
 * (write.h invariant 7). fly_mu held, or oi drained with the write lock held. Pure.
 */
uint64_t oi_uncut_held(const struct oinode *oi);

/*
 * oi_seg_new - an empty segment at file offset off with room for cap bytes (WB_SEG,
 * STORE_CHUNK_MAX, or a shrunk file's exact size), one reference: a buffer the write-back pool
 * kept (resident: what it has charged for it), else a fresh one (nothing charged or populated).
 * Returns it, or NULL on ENOMEM. Thread-safe (the pool's lock).
 */
struct seg *oi_seg_new(struct ckfs *fs, uint64_t off, size_t cap);

/* oi_seg_put - drop a reference to sg (NULL is fine); the last one frees it (wb_seg_free).
 * oi_segs_put - oi_seg_put every segment of a list linked by next. Thread-safe. */
void oi_seg_put(struct ckfs *fs, struct seg *sg);
void oi_segs_put(struct ckfs *fs, struct seg *list);

/*
 * oi_seg_populate - fault in len bytes of a segment buffer not touched yet in one call
 * (MADV_POPULATE_WRITE, Linux 5.14), best effort: an older kernel refuses it and the pages fault
 * as they are written. Thread-safe.
 */
void oi_seg_populate(uint8_t *buf, size_t len);

/* oi_seg_at - the segment of oi's list holding byte pos (< data_end). fly_mu held. Pure. */
struct seg *oi_seg_at(const struct oinode *oi, uint64_t pos);

/* oi_segs_trim_locked - unlink the segments wholly below cut_start, never seg_tail (write.h
 * invariant 6), onto *dead; fly_mu held; the caller oi_segs_put()s *dead after releasing it. */
void oi_segs_trim_locked(struct oinode *oi, struct seg **dead);

/*
 * oi_segs_copy_locked - copy bytes [pos, pos + n) of oi's stream into dst (n bytes); all of
 * them below data_end and none below the first segment's start. fly_mu held. Cannot fail.
 */
void oi_segs_copy_locked(const struct oinode *oi, uint64_t pos, uint8_t *dst, size_t n);

/*
 * oi_stream_cut_back - drained stream (invariant 5): forget the bytes past end (the chunk being
 * cut and any bytes the cutter left after a failure) and start cutting at end, a chunk
 * boundary. Write lock held. Cannot fail.
 */
void oi_stream_cut_back(struct ckfs *fs, struct oinode *oi, uint64_t end);

/*
 * oi_space_settle - a commit stored the stream's bytes not yet cut (its provisional last chunk):
 * give back their reservation and move space_mark to data_end (write.h invariant 7). Drained
 * (invariant 5), write lock held. Cannot fail.
 */
void oi_space_settle(struct ckfs *fs, struct oinode *oi);

/* ---- oi_cut.c: the cutter, chunks in flight, pins ---- */

/*
 * Bytes of the stream the writer has appended and the cutter has not fed, at least this many,
 * before the writer queues the cutter: 1 MiB, the average chunk (STORE_CHUNK_AVG), so a run of
 * small writes costs one hand-over per chunk rather than one per write.
 */
#define CUT_KICK STORE_CHUNK_AVG

/*
 * oi_cut_kick - start oi's cutter if it is idle and at least min_bytes (>= 1) wait for it:
 * queued in the write-back pool, or run on this thread when inline_cut or there is no pool.
 * Write lock held, not fly_mu.
 */
void oi_cut_kick(struct ckfs *fs, struct oinode *oi, uint64_t min_bytes, bool inline_cut);

/*
 * oi_fly_harvest - move finished in-flight chunks, in file order, into the extents (their pins
 * into pins[]); stop at the first one not finished. A failed one sets err and fly_lost. Write
 * lock held.
 */
void oi_fly_harvest(struct ckfs *fs, struct oinode *oi);




/*
 * oi_fly_drain - wait for oi's cutter, cut what it left, wait until no chunk of oi is in
 * flight, then harvest them all (invariant 5); a failure is left in oi->err. Write lock held;
 * may wait for the write-back workers.
 */
void oi_fly_drain(struct ckfs *fs, struct oinode *oi);

/* oi_drop_pins - drop every chunk pin oi took since its last commit, deleting chunk files
 * nothing references any more (pins_chunk_unpin). Write lock held. */
void oi_drop_pins(struct ckfs *fs, struct oinode *oi);

/*
 * oi_ext_reserve - grow the extent array *ext (capacity *cap, in extents) to hold at least need
 * extents, doubling from 64. Returns 0, or -ENOMEM with *ext and *cap unchanged (still owned by
 * the caller, freed with free()).
 */
int oi_ext_reserve(struct idx_extent **ext, size_t *cap, size_t need);

/*
 * oi_put_extent - store buf (len bytes, at most STORE_CHUNK_MAX) as one chunk, pinned until
 * oi's next commit, and describe it in *ret as the extent at file offset offset. Returns 0, or
 * -ENOMEM or pins_chunk_put's -errno (*ret untouched). Write lock held; takes fs->mu briefly.
 */
int oi_put_extent(struct ckfs *fs, struct oinode *oi, const uint8_t *buf, size_t len,
		  uint64_t offset, struct idx_extent *ret);

/* ---- oi_read.c ---- */

/*
 * oi_read_locked - read up to len bytes at offset off of oi into buf (len bytes of scratch),
 * stopping at the file's size. With rv, the reply's segments are noted there, in place in the
 * chunk cache where possible (held until oi_readv_release); without, everything is copied to
 * buf. Returns the bytes read (0 at or past the end), or -EIO (a chunk missing or damaged:
 * marked bad; or in-flight bytes lost, oi->err), -ENOMEM, or pread's -errno (staging mode).
 * The lock held (read or write); takes fly_mu, and fs->mu to mark a chunk bad.
 */
ssize_t oi_read_locked(struct ckfs *fs, struct oinode *oi, uint8_t *buf, size_t len,
		       uint64_t off, struct oi_readv *rv);

/*
 * oi_stream_next - stream mode, pos < size: the first offset >= pos in data (data true) or in a
 * hole (false), or size when there is none (invariant 1). The lock held. Pure otherwise.
 */
uint64_t oi_stream_next(const struct oinode *oi, uint64_t pos, bool data);

/* ---- oi_overwrite.c ---- */

/*
 * oi_overwrite_fits - whether a write of len bytes at off is to be made in place by
 * oi_overwrite: oi is in stream mode, drained (write.h invariant 5) and not fly_lost, len > 0,
 * the write ends at or below ext_end, and the bytes it cuts again keep oi->patched within its
 * budget (oi_overwrite.c invariant 2). O(n_ext). The lock held. Pure.
 */
bool oi_overwrite_fits(const struct oinode *oi, size_t len, uint64_t off);

/*
 * oi_overwrite - write buf (len bytes) at off into oi's stored extents in place: the extents
 * the write overlaps are read, patched and cut into new chunks (pinned until the next commit),
 * which replace them; hash_ok is cleared. Only when oi_overwrite_fits said so. Returns 0, or
 * -ENOMEM, -EIO (an extent's chunk missing or damaged) or pins_chunk_put's -errno, with the
 * content unchanged. Write lock held; takes fs->mu briefly per chunk put.
 */
int oi_overwrite(struct ckfs *fs, struct oinode *oi, const uint8_t *buf, size_t len, uint64_t off);

#endif /* CKPTFS_FS_OI_INT_H */
