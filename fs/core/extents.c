/* SPDX-License-Identifier: MIT */
/*
 * extents.c — reading a committed file straight from its extents and the store, for code that
 * has no open-file state (the step engine's recovery checks, the policy's metadata check).
 */
#include "fs/ckptfs.h"

#include <errno.h>
#include <string.h>

ssize_t ckpt_extents_pread(struct store *st, const struct idx_extent *ext, size_t n, void *buf,
			   size_t len, uint64_t off)
{
	size_t done = 0;

	for (size_t i = 0; i < n && done < len; i++) {
		const struct idx_extent *e = &ext[i];
		struct store_hash h;
		uint64_t pos = off + done;

		if (pos >= e->offset + e->length)
			continue;
		if (pos < e->offset) { /* a hole (index invariant 4): zeros */
			size_t z = e->offset - pos < len - done ? (size_t)(e->offset - pos) : len - done;

			memset((uint8_t *)buf + done, 0, z);
			done += z;
			if (done == len)
				break;
			pos += z;
		}
		memcpy(h.b, e->hash, STORE_HASH_LEN);
		size_t want = len - done;

		if (want > e->offset + e->length - pos)
			want = (size_t)(e->offset + e->length - pos);
		ssize_t got = store_chunk_pread(st, &h, (uint8_t *)buf + done, want, pos - e->offset);

		if (got != (ssize_t)want)
			return got < 0 ? got : -EIO;
		done += want;
	}
	/* what no extent covers is the file's trailing hole */
	memset((uint8_t *)buf + done, 0, len - done);
	return (ssize_t)len;
}
