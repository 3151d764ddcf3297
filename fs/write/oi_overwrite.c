/*
 * oi_overwrite.c — a write inside a stream-mode file's stored extents, made in place: the
 * extents it overlaps are read, patched with the new bytes and cut into chunks again, and the
 * new chunks replace them (struct oinode, write.h).
 *
 * Why: the other way to take a write that is not an append, the staging file (oinode.c), costs
 * a copy of the whole file into it and, at the commit, a cut of the whole file into chunks. A
 * writer that reopens a large file to change a little of it each time (xfstests generic/247:
 * mmap writes of 1 MiB into a 500 MiB file, one close each) paid the file's size per close. In
 * place, a write costs its own bytes and at most the two chunks at its ends.
 *
 * Invariants (beyond write.h's):
 *   1. Only a drained stream (write.h invariant 5) is patched, and only below ext_end: the chunk
 *      being cut, [cut_start, data_end), and the zeros past data_end are never touched, so the
 *      cutter's state stays valid and appends go on at data_end. The hasher no longer matches
 *      the content: hash_ok is cleared, and the commit hashes the content (hash_content).
 *   2. oi->patched counts the bytes cut again since the last commit. A write whose re-cut would
 *      take it past the bytes the file has in chunks goes to the staging file instead: many
 *      small writes between two closes (fsx), each cutting again the chunks at its ends, cost
 *      at most half again what the staging copy and its cut (twice those bytes) would have.
 *   3. On failure nothing changes: the old extents stay, and the chunks put are only pinned
 *      (dropped at the next commit, write.h invariant 2).
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs/write/oi_int.h"

/* Read the whole of extent e into dst (e->length bytes). Returns 0, -ENOMEM or -EIO. */
static int extent_read(struct ckfs *fs, const struct idx_extent *e, uint8_t *dst)
{
	struct store_hash h;
	ssize_t n;

	memcpy(h.b, e->hash, STORE_HASH_LEN);
	n = store_chunk_pread(fs->st, &h, dst, e->length, 0);
	if (n == (ssize_t)e->length)
		return 0;
	return n == -ENOMEM ? -ENOMEM : -EIO; /* missing, damaged or short: never wrong bytes */
}

bool oi_overwrite_fits(const struct oinode *oi, size_t len, uint64_t off)
{
	uint64_t data = 0, a = off, b = off + len;

	if (oi->stage_fd >= 0 || oi->fly_lost || len == 0 || off + len > oi->ext_end)
		return false;
	for (size_t i = 0; i < oi->n_ext; i++) {
		const struct idx_extent *e = &oi->ext[i];

		data += e->length;
		if (e->offset < off + len && e->offset + e->length > off) { /* overlaps */
			if (e->offset < a)
				a = e->offset;
			if (e->offset + e->length > b)
				b = e->offset + e->length;
		}
	}
	return oi->patched + (b - a) <= data; /* invariant 2 */
}

int oi_overwrite(struct ckfs *fs, struct oinode *oi, const uint8_t *buf, size_t len, uint64_t off)
{
	struct idx_extent *fresh = NULL;
	size_t i = 0, j, n = 0, cap = 0;
	uint64_t a = off, b = off + len;
	uint8_t *region = NULL;
	int rc = 0;

	assert(oi->stage_fd < 0 && !oi->fly_lost && len > 0 && off + len <= oi->ext_end);
	/* extents [i, j) overlap [off, off + len): the region to cut again is their span and the
	 * write's (a write into a hole between them cuts only its own bytes) */
	while (i < oi->n_ext && oi->ext[i].offset + oi->ext[i].length <= off)
		i++;
	for (j = i; j < oi->n_ext && oi->ext[j].offset < off + len; j++)
		;
	if (j > i) {
		if (oi->ext[i].offset < a)
			a = oi->ext[i].offset;
		if (oi->ext[j - 1].offset + oi->ext[j - 1].length > b)
			b = oi->ext[j - 1].offset + oi->ext[j - 1].length;
	}
	region = malloc((size_t)(b - a));
	if (!region)
		return -ENOMEM;
	/* the first and the last extent may be partly kept; those between are all overwritten */
	if (j > i && oi->ext[i].offset < off)
		rc = extent_read(fs, &oi->ext[i], region + (oi->ext[i].offset - a));
	if (rc == 0 && j > i && oi->ext[j - 1].offset + oi->ext[j - 1].length > off + len &&
	    (j - 1 > i || oi->ext[i].offset >= off))
		rc = extent_read(fs, &oi->ext[j - 1], region + (oi->ext[j - 1].offset - a));
	if (rc < 0)
		goto out;
	memcpy(region + (off - a), buf, len);
	for (uint64_t pos = a; pos < b;) {
		size_t cut = store_cdc_cut(region + (pos - a), (size_t)(b - pos), true);

		if (cut == 0) {
			rc = -EIO;
			goto out;
		}
		if ((rc = oi_ext_reserve(&fresh, &cap, n + 1)) < 0)
			goto out;
		if ((rc = oi_put_extent(fs, oi, region + (pos - a), cut, pos, &fresh[n])) < 0)
			goto out;
		n++;
		pos += cut;
	}
	/* ext[i, j) becomes fresh[0, n); the span and ext_end are unchanged */
	size_t total = oi->n_ext - (j - i) + n;

	if ((rc = oi_ext_reserve(&oi->ext, &oi->cap_ext, total)) < 0)
		goto out;
	memmove(&oi->ext[i + n], &oi->ext[j], (oi->n_ext - j) * sizeof(*oi->ext));
	memcpy(&oi->ext[i], fresh, n * sizeof(*fresh));
	oi->n_ext = total;
	oi->patched += b - a;
	oi->hash_ok = false; /* invariant 1 */
out:
	free(fresh);
	free(region);
	return rc;
}
