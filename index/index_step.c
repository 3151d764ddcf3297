/*
 * index_step.c — checkpoint steps, their state history and the trainers' tracker claims
 * (schema v2). Invariants 6 and 7 of index.c are kept here:
 *
 *   - a non-zero dir_ino is checked to be a directory before it is written (create, set_dir); the
 *     partial UNIQUE index steps_dir refuses a second step on the same directory (-EEXIST);
 *     ix_inode_delete (index_ns.c) zeroes it when the directory goes;
 *   - kind and state are range-checked in C before every write; leaving IDX_STEP_PRUNED is
 *     refused; the step row and its event change in one savepoint (invariant 8).
 *
 * What a transition means (writing -> sealed -> complete -> pruned, incomplete, corrupt) is fs/'s
 * business: the index records them, with their times, and keeps the history.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "index/index_int.h"

/* ix_bind_bytes - bind len bytes at p (NULL allowed when len is 0) as a BLOB, never NULL. */
static int ix_bind_bytes(struct idx *ix, sqlite3_stmt *st, int col, const void *p, size_t len)
{
	int rc;

	if (len > INT32_MAX)
		return -EOVERFLOW;
	/* a non-NULL pointer with length 0 binds x'', not NULL */
	rc = sqlite3_bind_blob(st, col, len ? p : "", (int)len, SQLITE_STATIC);
	return rc == SQLITE_OK ? 0 : ix_err(ix, rc);
}

static bool ix_state_ok(int state)
{
	return state >= 0 && state < IDX_STEP_STATE_COUNT;
}

static bool ix_kind_ok(int kind)
{
	return kind >= 0 && kind < IDX_STEP_KIND_MAX;
}

/* ix_step_name_len - length of a step name, or -EINVAL (empty) / -ENAMETOOLONG. */
static int ix_step_name_len(const char *name)
{
	size_t len = strnlen(name, IDX_STEP_NAME_MAX + 1);

	if (len == 0)
		return -EINVAL;
	if (len > IDX_STEP_NAME_MAX)
		return -ENAMETOOLONG;
	return (int)len;
}

/* ix_dir_ok - dir_ino is 0 or a directory inode. Returns 0, -ENOENT, -ENOTDIR or -errno. */
static int ix_dir_ok(struct idx *ix, uint64_t dir_ino)
{
	int64_t mode;
	int r;

	if (dir_ino == 0)
		return 0;
	if (dir_ino > INT64_MAX)
		return -ENOENT;
	if ((r = ix_scalar(ix, IX_INODE_MODE, &mode, "i", (int64_t)dir_ino)) < 0)
		return r;
	return S_ISDIR((mode_t)mode) ? 0 : -ENOTDIR;
}

/* ix_step_row - the current row of st (columns IX_STEP_COLS) into *ret. Returns 0 or -EIO. */
static int ix_step_row(sqlite3_stmt *st, struct idx_step *ret)
{
	struct idx_step s;
	int r;

	memset(&s, 0, sizeof(s));
	s.id = sqlite3_column_int64(st, 0);
	s.kind = (int)sqlite3_column_int64(st, 1);
	ix_copy_out(s.name, sizeof(s.name), sqlite3_column_blob(st, 2),
		    (size_t)sqlite3_column_bytes(st, 2));
	s.step = sqlite3_column_int64(st, 3);
	s.state = (int)sqlite3_column_int64(st, 4);
	s.dir_ino = (uint64_t)sqlite3_column_int64(st, 5);
	s.created_ns = sqlite3_column_int64(st, 6);
	s.sealed_ns = sqlite3_column_int64(st, 7);
	s.completed_ns = sqlite3_column_int64(st, 8);
	s.state_ns = sqlite3_column_int64(st, 9);
	s.files = (uint64_t)sqlite3_column_int64(st, 10);
	s.logical_bytes = (uint64_t)sqlite3_column_int64(st, 11);
	s.stored_bytes = (uint64_t)sqlite3_column_int64(st, 12);
	if (sqlite3_column_type(st, 13) != SQLITE_NULL) {
		if ((r = ix_column_hash(st, 13, s.digest)) < 0)
			return r;
		s.has_digest = true;
	}
	s.pinned = sqlite3_column_int64(st, 14) != 0;
	*ret = s;
	return 0;
}

/* ix_step_one - step the bound statement st once: its row into *ret, or -ENOENT. Hands st back. */
static int ix_step_one(struct idx *ix, sqlite3_stmt *st, struct idx_step *ret)
{
	int r = ix_step(ix, st);

	if (r == 0)
		r = -ENOENT;
	if (r > 0)
		r = ix_step_row(st, ret);
	ix_done(st);
	return r;
}

int idx_step_create(struct idx *ix, int kind, const char *name, int64_t step, uint64_t dir_ino,
		    int64_t now_ns, int64_t *ret_id)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_STEP_CREATE);
	int r, len;

	if (ix->rdonly)
		return -EROFS;
	if (!ix_kind_ok(kind) || step < 0)
		return -EINVAL;
	if ((len = ix_step_name_len(name)) < 0)
		return len;
	if ((r = ix_dir_ok(ix, dir_ino)) < 0)
		return r;
	if ((r = ix_bind_i64(ix, st, 1, kind)) < 0 ||
	    (r = ix_bind_bytes(ix, st, 2, name, (size_t)len)) < 0 ||
	    (r = ix_bind_i64(ix, st, 3, step)) < 0 ||
	    (r = ix_bind_i64(ix, st, 4, (int64_t)dir_ino)) < 0 ||
	    (r = ix_bind_i64(ix, st, 5, now_ns)) < 0) {
		ix_done(st);
		return r;
	}
	/* a second step on dir_ino fails the UNIQUE index steps_dir: -EEXIST */
	if ((r = ix_run(ix, st)) < 0)
		return r;
	*ret_id = sqlite3_last_insert_rowid(ix->db);
	return 0;
}

int idx_step_get(struct idx *ix, int64_t id, struct idx_step *ret)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_STEP_GET);
	int r;

	if ((r = ix_bind_i64(ix, st, 1, id)) < 0) {
		ix_done(st);
		return r;
	}
	return ix_step_one(ix, st, ret);
}

int idx_step_by_dir(struct idx *ix, uint64_t dir_ino, struct idx_step *ret)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_STEP_BY_DIR);
	int r;

	if (dir_ino == 0 || dir_ino > INT64_MAX)
		return -ENOENT;
	if ((r = ix_bind_i64(ix, st, 1, (int64_t)dir_ino)) < 0) {
		ix_done(st);
		return r;
	}
	return ix_step_one(ix, st, ret);
}

int idx_step_by_name(struct idx *ix, int kind, const char *name, struct idx_step *ret)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_STEP_BY_NAME);
	int r, len;

	if (!ix_kind_ok(kind) || (len = ix_step_name_len(name)) < 0)
		return -ENOENT; /* no step can have it */
	if ((r = ix_bind_i64(ix, st, 1, kind)) < 0 ||
	    (r = ix_bind_bytes(ix, st, 2, name, (size_t)len)) < 0) {
		ix_done(st);
		return r;
	}
	return ix_step_one(ix, st, ret);
}

int idx_step_by_name_at(struct idx *ix, int kind, const char *name, int64_t ts_ns,
			struct idx_step *ret)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_STEP_BY_NAME_AT);
	int r, len;

	if (!ix_kind_ok(kind) || (len = ix_step_name_len(name)) < 0)
		return -ENOENT; /* no step can have it */
	if ((r = ix_bind_i64(ix, st, 1, kind)) < 0 ||
	    (r = ix_bind_bytes(ix, st, 2, name, (size_t)len)) < 0 ||
	    (r = ix_bind_i64(ix, st, 3, ts_ns)) < 0) {
		ix_done(st);
		return r;
	}
	return ix_step_one(ix, st, ret);
}

/* ix_set_state - idx_step_set_state inside the caller's savepoint. */
static int ix_set_state(struct idx *ix, int64_t id, int state, int64_t now_ns, const char *note)
{
	sqlite3_stmt *st;
	int64_t old;
	int r;

	if ((r = ix_scalar(ix, IX_STEP_STATE_OF, &old, "i", id)) < 0)
		return r;
	if (old == IDX_STEP_PRUNED && state != IDX_STEP_PRUNED)
		return -EINVAL; /* invariant 7: pruned is terminal */

	st = ix_stmt(ix, IX_STEP_SET_STATE);
	if ((r = ix_bind_i64(ix, st, 1, id)) < 0 || (r = ix_bind_i64(ix, st, 2, state)) < 0 ||
	    (r = ix_bind_i64(ix, st, 3, now_ns)) < 0)
		goto out_st;
	if ((r = ix_run(ix, st)) < 0)
		return r;

	st = ix_stmt(ix, IX_STEP_EVENT_ADD);
	if ((r = ix_bind_i64(ix, st, 1, id)) < 0 || (r = ix_bind_i64(ix, st, 2, now_ns)) < 0 ||
	    (r = ix_bind_i64(ix, st, 3, old)) < 0 || (r = ix_bind_i64(ix, st, 4, state)) < 0)
		goto out_st;
	if (note && (r = ix_bind_bytes(ix, st, 5, note, strnlen(note, IDX_STEP_NOTE_MAX))) < 0)
		goto out_st; /* without a note: left unbound, NULL */
	return ix_run(ix, st);
out_st:
	ix_done(st);
	return r;
}

int idx_step_set_state(struct idx *ix, int64_t id, int state, int64_t now_ns, const char *note)
{
	int r;

	if (ix->rdonly)
		return -EROFS;
	if (!ix_state_ok(state))
		return -EINVAL;
	if ((r = ix_sp_begin(ix)) < 0)
		return r;
	return ix_sp_end(ix, ix_set_state(ix, id, state, now_ns, note));
}

int idx_step_set_dir(struct idx *ix, int64_t id, uint64_t dir_ino)
{
	int r;

	if (ix->rdonly)
		return -EROFS;
	if ((r = ix_dir_ok(ix, dir_ino)) < 0)
		return r;
	/* -EEXIST: another step has dir_ino */
	return ix_update(ix, IX_STEP_SET_DIR, -ENOENT, "ii", id, (int64_t)dir_ino);
}

int idx_step_set_number(struct idx *ix, int64_t id, int64_t step)
{
	return ix_update(ix, IX_STEP_SET_NUMBER, -ENOENT, "ii", id, step);
}

int idx_step_set_name(struct idx *ix, int64_t id, const char *name)
{
	size_t len = name ? strlen(name) : 0;

	if (ix->rdonly)
		return -EROFS;
	if (len == 0)
		return -EINVAL;
	if (len > IDX_STEP_NAME_MAX)
		return -ENAMETOOLONG;
	return ix_update(ix, IX_STEP_SET_NAME, -ENOENT, "in", id, name);
}

int idx_step_set_kind(struct idx *ix, int64_t id, int kind)
{
	if (ix->rdonly)
		return -EROFS;
	if (kind < 0 || kind >= IDX_STEP_KIND_MAX)
		return -EINVAL;
	return ix_update(ix, IX_STEP_SET_KIND, -ENOENT, "ii", id, (int64_t)kind);
}

int idx_step_set_figures(struct idx *ix, int64_t id, uint64_t files, uint64_t logical,
			 uint64_t stored, const uint8_t digest[IDX_HASH_LEN])
{
	if (ix->rdonly)
		return -EROFS;
	if (files > INT64_MAX || logical > INT64_MAX || stored > INT64_MAX)
		return -EOVERFLOW;
	return ix_update(ix, IX_STEP_SET_FIGURES, -ENOENT, "iiiih", id, (int64_t)files,
			 (int64_t)logical, (int64_t)stored, digest);
}

int idx_step_set_pinned(struct idx *ix, int64_t id, bool pinned)
{
	return ix_update(ix, IX_STEP_SET_PINNED, -ENOENT, "ii", id, (int64_t)pinned);
}

int idx_step_foreach(struct idx *ix, int (*fn)(const struct idx_step *s, void *arg), void *arg)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_STEP_ALL);
	struct idx_step *a = NULL;
	size_t n = 0, cap = 0;
	int r;

	/* read everything first: fn may then change steps (retention) or walk them again */
	while ((r = ix_step(ix, st)) > 0) {
		if (n == cap) {
			size_t ncap = cap ? 2 * cap : 32;
			struct idx_step *p = realloc(a, ncap * sizeof(*a));

			if (!p) {
				r = -ENOMEM;
				break;
			}
			a = p;
			cap = ncap;
		}
		if ((r = ix_step_row(st, &a[n])) < 0)
			break;
		n++;
	}
	ix_done(st);
	for (size_t i = 0; r == 0 && i < n; i++)
		r = fn(&a[i], arg);
	free(a);
	return r;
}

int idx_step_newest(struct idx *ix, uint32_t kind_mask, int state, struct idx_step *ret)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_STEP_NEWEST);
	int r;

	if (!ix_state_ok(state))
		return -EINVAL;
	if ((r = ix_bind_i64(ix, st, 1, state)) < 0 ||
	    (r = ix_bind_i64(ix, st, 2, (int64_t)kind_mask)) < 0) {
		ix_done(st);
		return r;
	}
	return ix_step_one(ix, st, ret);
}

int idx_step_newest_each(struct idx *ix, uint32_t kind_mask, int state,
			 int (*fn)(const struct idx_step *s, void *arg), void *arg)
{
	struct idx_step page[32];
	int64_t below_step = INT64_MAX, below_id = INT64_MAX;
	size_t want = 4; /* the first page small: most callers stop at its first row */
	int r;

	if (!ix_state_ok(state))
		return -EINVAL;
	if (kind_mask) {
		/* no step of these kinds: do not page through every step of the others (the
		 * trackers of the layouts a store does not use, at every listing of the root) */
		bool any = false;

		for (int k = 0; k < 32 && !any; k++) {
			int64_t one;

			if (!(kind_mask & (1u << k)))
				continue;
			r = ix_scalar(ix, IX_STEP_KIND_ANY, &one, "i", (int64_t)k);
			if (r < 0 && r != -ENOENT)
				return r;
			any = r == 0;
		}
		if (!any)
			return 0;
	}
	for (;;) {
		sqlite3_stmt *st = ix_stmt(ix, IX_STEP_NEWEST_PAGE);
		size_t n = 0;

		if ((r = ix_bind_i64(ix, st, 1, state)) < 0 ||
		    (r = ix_bind_i64(ix, st, 2, (int64_t)kind_mask)) < 0 ||
		    (r = ix_bind_i64(ix, st, 3, below_step)) < 0 ||
		    (r = ix_bind_i64(ix, st, 4, below_id)) < 0 ||
		    (r = ix_bind_i64(ix, st, 5, (int64_t)want)) < 0) {
			ix_done(st);
			return r;
		}
		/* a page is read whole before fn runs: fn may use the statement cache */
		while (n < want && (r = ix_step(ix, st)) > 0 && (r = ix_step_row(st, &page[n])) == 0)
			n++;
		ix_done(st);
		if (r < 0)
			return r;
		for (size_t i = 0; i < n; i++)
			if ((r = fn(&page[i], arg)) != 0)
				return r;
		if (n < want)
			return 0;
		below_step = page[n - 1].step;
		below_id = page[n - 1].id;
		want = 32;
	}
}

int idx_step_events(struct idx *ix, int64_t id,
		    int (*fn)(int64_t ts_ns, int old_state, int new_state, const char *note,
			      void *arg),
		    void *arg)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_STEP_EVENTS);
	char note[IDX_STEP_NOTE_MAX + 1];
	int r;

	if ((r = ix_bind_i64(ix, st, 1, id)) < 0)
		goto out;
	while ((r = ix_step(ix, st)) > 0) {
		const char *p = NULL;

		if (sqlite3_column_type(st, 3) != SQLITE_NULL) {
			ix_copy_out(note, sizeof(note), sqlite3_column_blob(st, 3),
				    (size_t)sqlite3_column_bytes(st, 3));
			p = note;
		}
		r = fn(sqlite3_column_int64(st, 0), (int)sqlite3_column_int64(st, 1),
		       (int)sqlite3_column_int64(st, 2), p, arg);
		if (r != 0)
			goto out;
	}
out:
	ix_done(st);
	return r;
}

const char *idx_step_state_name(int state)
{
	switch (state) {
	case IDX_STEP_WRITING:
		return "writing";
	case IDX_STEP_SEALED:
		return "sealed";
	case IDX_STEP_COMPLETE:
		return "complete";
	case IDX_STEP_PRUNED:
		return "pruned";
	case IDX_STEP_INCOMPLETE:
		return "incomplete";
	case IDX_STEP_CORRUPT:
		return "corrupt";
	case IDX_STEP_COPIED:
		return "copied";
	default:
		return "unknown";
	}
}

/* ---- tracker claims ---- */

int idx_claim_add(struct idx *ix, const char *tracker, const void *content, size_t len,
		  int64_t step, int64_t now_ns, int64_t *ret_id)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_CLAIM_ADD);
	size_t tlen, keep = len < IDX_CLAIM_MAX ? len : IDX_CLAIM_MAX;
	int r;

	if (ix->rdonly)
		return -EROFS;
	if (step < -1 || (!content && len > 0))
		return -EINVAL;
	tlen = strnlen(tracker, IDX_CLAIM_TRACKER_MAX + 1);
	if (tlen == 0)
		return -EINVAL;
	if (tlen > IDX_CLAIM_TRACKER_MAX)
		return -ENAMETOOLONG;
	if ((uint64_t)len > INT64_MAX)
		return -EOVERFLOW;
	if ((r = ix_bind_bytes(ix, st, 1, tracker, tlen)) < 0 ||
	    (r = ix_bind_bytes(ix, st, 2, content, keep)) < 0 ||
	    (r = ix_bind_i64(ix, st, 3, (int64_t)len)) < 0 ||
	    (r = ix_bind_i64(ix, st, 4, step)) < 0 || (r = ix_bind_i64(ix, st, 5, now_ns)) < 0) {
		ix_done(st);
		return r;
	}
	if ((r = ix_run(ix, st)) < 0)
		return r;
	*ret_id = sqlite3_last_insert_rowid(ix->db);
	return 0;
}

int idx_claim_foreach(struct idx *ix,
		      int (*fn)(int64_t id, const char *tracker, const void *content, size_t len,
				int64_t step, int64_t ts_ns, void *arg),
		      void *arg)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_CLAIM_ALL);
	char tracker[IDX_CLAIM_TRACKER_MAX + 1];
	int r;

	while ((r = ix_step(ix, st)) > 0) {
		const void *content;
		size_t len;

		ix_copy_out(tracker, sizeof(tracker), sqlite3_column_blob(st, 1),
			    (size_t)sqlite3_column_bytes(st, 1));
		content = sqlite3_column_blob(st, 2); /* blob first, then its size */
		len = (size_t)sqlite3_column_bytes(st, 2);
		r = fn(sqlite3_column_int64(st, 0), tracker, len ? content : NULL, len,
		       sqlite3_column_int64(st, 3), sqlite3_column_int64(st, 4), arg);
		if (r != 0)
			break;
	}
	ix_done(st);
	return r;
}

int idx_claim_newest_each(struct idx *ix,
			  int (*fn)(int64_t id, const char *tracker, int64_t step, int64_t ts_ns,
				    void *arg),
			  void *arg)
{
	sqlite3_stmt *st = ix_stmt(ix, IX_CLAIM_NEWEST);
	char tracker[IDX_CLAIM_TRACKER_MAX + 1];
	int r;

	while ((r = ix_step(ix, st)) > 0) {
		ix_copy_out(tracker, sizeof(tracker), sqlite3_column_blob(st, 1),
			    (size_t)sqlite3_column_bytes(st, 1));
		r = fn(sqlite3_column_int64(st, 0), tracker, sqlite3_column_int64(st, 2),
		       sqlite3_column_int64(st, 3), arg);
		if (r != 0)
			break;
	}
	ix_done(st);
	return r;
}

int idx_claim_length(struct idx *ix, int64_t id, uint64_t *ret_len)
{
	int64_t len;
	int r = ix_scalar(ix, IX_CLAIM_LENGTH, &len, "i", id);

	if (r == 0)
		*ret_len = (uint64_t)len;
	return r;
}
