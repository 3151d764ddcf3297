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

/* ---- oinode.c ---- */

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
