/*
 * index_data.c — file content (extents), the chunk table and its reference counts, whole-store
 * figures and crash recovery. Invariants 3, 4 and 8 of index.c are kept here:
 *
 *   refs of a chunk changes only in ix_drop_extents (minus the extents dropped, per chunk) and in
 *   idx_file_set_content (plus one per new extent), both in the same savepoint as the extents
 *   rows they account for; a chunk row is deleted only at refs 0 and only when release() agrees.
 *
 * idx_file_set_content order, for a file going from extents OLD to NEW:
 *   1. refs += 1 per NEW extent (insert unknown chunks with refs 1);
 *   2. refs -= count per chunk of OLD (one UPDATE), remember chunks now at 0 (they are not in NEW);
 *   3. delete OLD rows, insert NEW rows, set size/digest/times;
 *   4. release() the remembered chunks — last, so nothing after it can fail but its own DELETE.
 * Raising before lowering keeps a chunk shared by OLD and NEW above 0 throughout: release() is
 * called only for chunks that really leave.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "index/index_int.h"

/* ix_push_hash - append hash to the growable array *a (*n used, *cap allocated). */
static int ix_push_hash(uint8_t (**a)[IDX_HASH_LEN], size_t *n, size_t *cap,
			const uint8_t hash[IDX_HASH_LEN])
{
	if (*n == *cap) {
		size_t ncap = *cap ? 2 * *cap : 16;
		uint8_t(*p)[IDX_HASH_LEN] = realloc(*a, ncap * sizeof(**a));

		if (!p)
			return -ENOMEM;
		*a = p;
		*cap = ncap;
	}
	memcpy((*a)[(*n)++], hash, IDX_HASH_LEN);
	return 0;
}

int ix_drop_extents(struct idx *ix, uint64_t ino, uint8_t (**zeros)[IDX_HASH_LEN],
		    size_t *nzeros)
{
	sqlite3_stmt *st;
	size_t cap = *nzeros;
	int64_t one;
	int r;

	if ((r = ix_scalar(ix, IX_EXT_ANY, &one, "i", (int64_t)ino)) == -ENOENT)
		return 0; /* nothing to drop (a new file's first commit) */
	if (r < 0)
		return r;
	st = ix_stmt(ix, IX_EXT_DECREF);
	if ((r = ix_bind_i64(ix, st, 1, (int64_t)ino)) < 0) {
		ix_done(st);
		return r;
	}
	if ((r = ix_run(ix, st)) < 0)
		return r;

	st = ix_stmt(ix, IX_EXT_ZEROS);
	if ((r = ix_bind_i64(ix, st, 1, (int64_t)ino)) < 0)
		goto out;
	while ((r = ix_step(ix, st)) > 0) {
		uint8_t h[IDX_HASH_LEN];

		if ((r = ix_column_hash(st, 0, h)) < 0 ||
		    (r = ix_push_hash(zeros, nzeros, &cap, h)) < 0)
			goto out;
	}
	if (r < 0)
		goto out;
	ix_done(st);

	st = ix_stmt(ix, IX_EXT_DELETE);
	if ((r = ix_bind_i64(ix, st, 1, (int64_t)ino)) < 0)
		goto out;
	return ix_run(ix, st);
out:
	ix_done(st);
	return r;
}

int ix_release(struct idx *ix, uint8_t (*zeros)[IDX_HASH_LEN], size_t n, idx_release_fn release,
	       void *arg)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_CHUNK_DELETE_ZERO);
	int r;

	if (!release)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (!release(zeros[i], arg))
			continue;
		if ((r = ix_bind_hash(ix, st, 1, zeros[i])) < 0) {
			ix_done(st);
			return r;
		}
		if ((r = ix_run(ix, st)) < 0)
			return r;
	}
	return 0;
}

int idx_file_extents(struct idx *ix, uint64_t ino, struct idx_extent **ret, size_t *ret_n)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_EXT_LIST);
	struct idx_extent *a = NULL;
	size_t n = 0, cap = 0;
	int r;

	if ((r = ix_bind_i64(ix, st, 1, (int64_t)ino)) < 0)
		goto out;
	while ((r = ix_step(ix, st)) > 0) {
		struct idx_extent *e;

		if (n == cap) {
			size_t ncap = cap ? 2 * cap : 64;
			struct idx_extent *p = realloc(a, ncap * sizeof(*a));

			if (!p) {
				r = -ENOMEM;
				goto out;
			}
			a = p;
			cap = ncap;
		}
		e = &a[n];
		memset(e, 0, sizeof(*e));
		e->offset = (uint64_t)sqlite3_column_int64(st, 0);
		e->length = (uint32_t)sqlite3_column_int64(st, 1);
		if ((r = ix_column_hash(st, 2, e->hash)) < 0)
			goto out;
		e->stored_size = (uint32_t)sqlite3_column_int64(st, 3);
		e->codec = (uint8_t)sqlite3_column_int64(st, 4);
		n++;
	}
	if (r < 0)
		goto out;
	if (n == 0) {
		free(a);
		a = NULL;
	}
	*ret = a;
	*ret_n = n;
	a = NULL;
	r = 0;
out:
	ix_done(st);
	free(a);
	return r;
}

/*
 * ix_layout - check that ext[0..n) lie in [0, size) in order, without overlaps, every length
 * > 0, size storable (invariant 4). Returns 0 (they tile [0, size)), 1 (valid, with holes) or
 * -EINVAL.
 */
static int ix_layout(const struct idx_extent *ext, size_t n, uint64_t size)
{
	uint64_t end = 0;
	bool gaps = false;

	if (size > INT64_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (ext[i].offset < end || ext[i].length == 0 || ext[i].offset > size ||
		    ext[i].length > size - ext[i].offset)
			return -EINVAL;
		gaps |= ext[i].offset != end;
		end = ext[i].offset + ext[i].length;
	}
	return gaps || end != size ? 1 : 0;
}

/* ix_set_content - idx_file_set_content inside the caller's savepoint (see the top). */
static int ix_set_content(struct idx *ix, uint64_t ino, const struct idx_extent *ext, size_t n,
			  uint64_t size, const uint8_t hash[IDX_HASH_LEN], int64_t mtime_ns,
			  bool sparse, idx_release_fn release, void *arg)
{
	uint8_t(*zeros)[IDX_HASH_LEN] = NULL;
	size_t nzeros = 0;
	sqlite3_stmt *st;
	int64_t mode;
	int r;

	if ((r = ix_scalar(ix, IX_INODE_MODE, &mode, "i", (int64_t)ino)) < 0)
		return r;
	if (!S_ISREG((mode_t)mode))
		return -EINVAL;

	/* 1. one more reference per new extent */
	st = ix_stmt(ix, IX_CHUNK_UPSERT);
	for (size_t i = 0; i < n; i++) {
		if ((r = ix_bind_hash(ix, st, 1, ext[i].hash)) < 0 ||
		    (r = ix_bind_i64(ix, st, 2, ext[i].length)) < 0 ||
		    (r = ix_bind_i64(ix, st, 3, ext[i].stored_size)) < 0 ||
		    (r = ix_bind_i64(ix, st, 4, ext[i].codec)) < 0 ||
		    (r = ix_bind_i64(ix, st, 5, mtime_ns)) < 0)
			goto out_st;
		if ((r = ix_run(ix, st)) < 0)
			goto out;
		if (sqlite3_changes(ix->db) != 1) {
			/* a known chunk of another raw size: not the chunk the caller means */
			r = -EINVAL;
			goto out;
		}
	}

	/* 2. and 3a. old extents go, their chunks lose their references */
	if ((r = ix_drop_extents(ix, ino, &zeros, &nzeros)) < 0)
		goto out;

	/* 3b. new extents */
	st = ix_stmt(ix, IX_EXT_INSERT);
	for (size_t i = 0; i < n; i++) {
		if ((r = ix_bind_i64(ix, st, 1, (int64_t)ino)) < 0 ||
		    (r = ix_bind_i64(ix, st, 2, (int64_t)ext[i].offset)) < 0 ||
		    (r = ix_bind_i64(ix, st, 3, ext[i].length)) < 0 ||
		    (r = ix_bind_hash(ix, st, 4, ext[i].hash)) < 0)
			goto out_st;
		if ((r = ix_run(ix, st)) < 0)
			goto out;
	}

	/* 3c. attributes */
	st = ix_stmt(ix, IX_INODE_SET_CONTENT);
	if ((r = ix_bind_i64(ix, st, 1, (int64_t)ino)) < 0 ||
	    (r = ix_bind_i64(ix, st, 2, (int64_t)size)) < 0 ||
	    (hash && (r = ix_bind_hash(ix, st, 3, hash)) < 0) ||
	    (r = ix_bind_i64(ix, st, 4, mtime_ns)) < 0 ||
	    (r = ix_bind_i64(ix, st, 5, sparse ? IDX_INODE_SPARSE : 0)) < 0)
		goto out_st;
	if ((r = ix_run(ix, st)) < 0)
		goto out;

	/* 4. chunks nobody names any more */
	r = ix_release(ix, zeros, nzeros, release, arg);
	goto out;
out_st:
	ix_done(st);
out:
	free(zeros);
	return r;
}

int idx_file_set_content(struct idx *ix, uint64_t ino, const struct idx_extent *ext, size_t n,
			 uint64_t size, const uint8_t hash[IDX_HASH_LEN], int64_t mtime_ns,
			 idx_release_fn release, void *arg)
{
	int r, holes;

	if (ix->rdonly)
		return -EROFS;
	if ((holes = ix_layout(ext, n, size)) < 0)
		return holes;
	if ((r = ix_sp_begin(ix)) < 0)
		return r;
	r = ix_set_content(ix, ino, ext, n, size, hash, mtime_ns, holes > 0, release, arg);
	return ix_sp_end(ix, r);
}

int idx_file_stored_bytes(struct idx *ix, uint64_t ino, uint64_t *ret)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_STORED_BYTES);
	uint64_t whole = 0, up;
	long double frac = 0; /* sum of the remainders, each in [0, 1) */
	int r;

	if ((r = ix_bind_i64(ix, st, 1, (int64_t)ino)) < 0)
		goto out;
	/*
	 * One row per distinct chunk: k extents of a chunk stored in s bytes with refs r count
	 * k * s / r. The integer part is summed exactly, only remainders go through floating point,
	 * so 3 x (300 / 3) is 300, not 301.
	 */
	while ((r = ix_step(ix, st)) > 0) {
		uint64_t s = (uint64_t)sqlite3_column_int64(st, 0);
		int64_t refs = sqlite3_column_int64(st, 1);
		uint64_t k = (uint64_t)sqlite3_column_int64(st, 2);
		uint64_t num = k * s, den = refs > 0 ? (uint64_t)refs : 1;

		whole += num / den;
		frac += (long double)(num % den) / (long double)den;
	}
	if (r < 0)
		goto out;
	up = (uint64_t)frac;
	if ((long double)up < frac - 1e-9L)
		up++;
	*ret = whole + up;
	r = 0;
out:
	ix_done(st);
	return r;
}

int idx_chunk_exists(struct idx *ix, const uint8_t hash[IDX_HASH_LEN])
{
	sqlite3_stmt *st = ix_stmt(ix, IX_CHUNK_EXISTS);
	int r;

	if ((r = ix_bind_hash(ix, st, 1, hash)) < 0)
		goto out;
	r = ix_step(ix, st);
out:
	ix_done(st);
	return r;
}

static int ix_chunk_set_bad(struct idx *ix, const uint8_t hash[IDX_HASH_LEN], bool bad)
{
	return ix_update(ix, IX_CHUNK_SET_BAD, -ENOENT, "hi", hash, (int64_t)bad);
}

int idx_chunk_mark_bad(struct idx *ix, const uint8_t hash[IDX_HASH_LEN])
{
	return ix_chunk_set_bad(ix, hash, true);
}

int idx_chunk_is_bad(struct idx *ix, const uint8_t hash[IDX_HASH_LEN])
{
	int64_t bad;
	int r = ix_scalar(ix, IX_CHUNK_IS_BAD, &bad, "h", hash);

	return r < 0 ? r : bad != 0;
}

int idx_dir_has_bad_chunk(struct idx *ix, uint64_t dir)
{
	int64_t found;
	int r = ix_scalar(ix, IX_ANY_BAD_CHUNK, &found, "");

	if (r == 0 && found)
		r = ix_scalar(ix, IX_DIR_HAS_BAD_CHUNK, &found, "i", (int64_t)dir);
	return r < 0 ? r : found != 0;
}

int idx_chunk_clear_bad(struct idx *ix, const uint8_t hash[IDX_HASH_LEN])
{
	return ix_chunk_set_bad(ix, hash, false);
}

int idx_chunk_set_stored(struct idx *ix, const uint8_t hash[IDX_HASH_LEN], uint8_t codec,
			 uint32_t stored_size)
{
	return ix_update(ix, IX_CHUNK_SET_STORED, -ENOENT, "hii", hash, (int64_t)codec,
			 (int64_t)stored_size);
}

int idx_chunks_with_codec(struct idx *ix, uint8_t codec, uint8_t (*out)[IDX_HASH_LEN],
			  size_t max)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_CHUNK_WITH_CODEC);
	size_t n = 0;
	int r;

	if ((r = ix_bind_i64(ix, st, 1, codec)) < 0 ||
	    (r = ix_bind_i64(ix, st, 2, (int64_t)max)) < 0)
		goto out;
	while (n < max && (r = ix_step(ix, st)) > 0) {
		if ((r = ix_column_hash(st, 0, out[n])) < 0)
			break;
		n++;
	}
out:
	ix_done(st);
	return r < 0 ? r : (int)n;
}

int idx_chunk_foreach(struct idx *ix,
		      int (*fn)(const uint8_t hash[IDX_HASH_LEN], uint32_t raw_size,
				uint32_t stored_size, uint8_t codec, int64_t refs, bool bad,
				void *arg),
		      void *arg)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_CHUNK_FOREACH);
	int r;

	while ((r = ix_step(ix, st)) > 0) {
		uint8_t h[IDX_HASH_LEN];

		if ((r = ix_column_hash(st, 0, h)) < 0)
			break;
		r = fn(h, (uint32_t)sqlite3_column_int64(st, 1),
		       (uint32_t)sqlite3_column_int64(st, 2), (uint8_t)sqlite3_column_int64(st, 3),
		       sqlite3_column_int64(st, 4), sqlite3_column_int64(st, 5) != 0, arg);
		if (r != 0)
			break;
	}
	ix_done(st);
	return r;
}

int idx_chunk_users(struct idx *ix, const uint8_t hash[IDX_HASH_LEN],
		    int (*fn)(uint64_t ino, uint64_t offset, void *arg), void *arg)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_CHUNK_USERS);
	int r;

	if ((r = ix_bind_hash(ix, st, 1, hash)) < 0)
		goto out;
	while ((r = ix_step(ix, st)) > 0) {
		r = fn((uint64_t)sqlite3_column_int64(st, 0), (uint64_t)sqlite3_column_int64(st, 1),
		       arg);
		if (r != 0)
			break;
	}
out:
	ix_done(st);
	return r;
}

int idx_stats_get(struct idx *ix, struct idx_stats *ret)
{
	struct idx_stats s = { 0 };
	sqlite3_stmt *st;
	int r;

	/* aggregates always return one row: none is a broken statement (-EIO) */
	if ((r = ix_row(ix, IX_STATS_INODES, &st, "")) < 0)
		return r == -ENOENT ? -EIO : r;
	s.files = (uint64_t)sqlite3_column_int64(st, 0);
	s.dirs = (uint64_t)sqlite3_column_int64(st, 1);
	s.symlinks = (uint64_t)sqlite3_column_int64(st, 2);
	s.logical_bytes = (uint64_t)sqlite3_column_int64(st, 3);
	ix_done(st);

	if ((r = ix_row(ix, IX_STATS_CHUNKS, &st, "")) < 0)
		return r == -ENOENT ? -EIO : r;
	s.chunks = (uint64_t)sqlite3_column_int64(st, 0);
	s.chunk_raw_bytes = (uint64_t)sqlite3_column_int64(st, 1);
	s.stored_bytes = (uint64_t)sqlite3_column_int64(st, 2);
	s.bad_chunks = (uint64_t)sqlite3_column_int64(st, 3);
	for (int c = 0; c < IDX_STATS_CODECS; c++) {
		s.codec_chunks[c] = (uint64_t)sqlite3_column_int64(st, 4 + 2 * c);
		s.codec_stored_bytes[c] = (uint64_t)sqlite3_column_int64(st, 5 + 2 * c);
	}
	ix_done(st);
	*ret = s;
	return 0;
}

int idx_data_version(struct idx *ix, int64_t *ret)
{
	int r = ix_scalar(ix, IX_DATA_VERSION, ret, "");

	return r == -ENOENT ? -EIO : r; /* the pragma always returns one row */
}

/* ix_recover - idx_recover inside the caller's savepoint. */
static int ix_recover(struct idx *ix, idx_release_fn release, void *arg)
{
	uint8_t(*zeros)[IDX_HASH_LEN] = NULL;
	uint64_t *inos = NULL;
	size_t n = 0, cap = 0, nzeros = 0, zcap = 0;
	sqlite3_stmt *st;
	int r;

	/* files created but never committed were not durable: unname them, then delete them */
	ix_pcache_clear(ix);
	if ((r = ix_run(ix, ix_stmt(ix, IX_RECOVER_UNCOMMITTED_DENTRIES))) < 0 ||
	    (r = ix_run(ix, ix_stmt(ix, IX_RECOVER_UNCOMMITTED_INODES))) < 0)
		goto out;
	/* collect first: rows are not deleted under a running SELECT of the same table */
	st = ix_stmt(ix, IX_RECOVER_INODES);
	while ((r = ix_step(ix, st)) > 0) {
		if (n == cap) {
			size_t ncap = cap ? 2 * cap : 16;
			uint64_t *p = realloc(inos, ncap * sizeof(*p));

			if (!p) {
				r = -ENOMEM;
				break;
			}
			inos = p;
			cap = ncap;
		}
		inos[n++] = (uint64_t)sqlite3_column_int64(st, 0);
	}
	ix_done(st);
	if (r < 0)
		goto out;
	if (n > INT32_MAX) {
		r = -EOVERFLOW;
		goto out;
	}
	/* their chunks stay at refs 0 here and are released once, by the sweep below */
	for (size_t i = 0; i < n; i++)
		if ((r = ix_inode_delete(ix, inos[i], NULL, NULL)) < 0)
			goto out;

	st = ix_stmt(ix, IX_RECOVER_CHUNKS);
	while ((r = ix_step(ix, st)) > 0) {
		uint8_t h[IDX_HASH_LEN];

		if ((r = ix_column_hash(st, 0, h)) < 0 ||
		    (r = ix_push_hash(&zeros, &nzeros, &zcap, h)) < 0)
			break;
	}
	ix_done(st);
	if (r < 0)
		goto out;
	if ((r = ix_release(ix, zeros, nzeros, release, arg)) < 0)
		goto out;
	r = (int)n;
out:
	free(inos);
	free(zeros);
	return r;
}

int idx_recover(struct idx *ix, idx_release_fn release, void *arg)
{
	int r;

	if (ix->rdonly)
		return -EROFS;
	if ((r = ix_sp_begin(ix)) < 0)
		return r;
	return ix_sp_end(ix, ix_recover(ix, release, arg));
}
