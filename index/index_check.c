/*
 * index_check.c — idx_check: verify invariants 1-4, 6 and 7 of index.h (restated for the schema in
 * index.c) and describe the first violation found. Read-only; one statement per kind of
 * violation, each stopping at its first row (LIMIT 1).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>

#include "index/index_int.h"

__attribute__((format(printf, 3, 4))) static void ix_msg(char *msg, size_t cap, const char *fmt,
							  ...)
{
	va_list ap;

	if (!msg || cap == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, cap, fmt, ap);
	va_end(ap);
}

/* ix_hex8 - the first 8 bytes of a 16-byte blob column as hex, for messages ("?" if not one). */
static const char *ix_hex8(sqlite3_stmt *st, int col, char out[17])
{
	uint8_t h[IDX_HASH_LEN];

	if (ix_column_hash(st, col, h) < 0)
		return "?";
	for (int i = 0; i < 8; i++)
		snprintf(out + 2 * i, 3, "%02x", h[i]);
	return out;
}

/* ix_name - a dentry name column as printable text, truncated to fit out (64 bytes). */
static const char *ix_name(sqlite3_stmt *st, int col, char out[64])
{
	const unsigned char *p = sqlite3_column_blob(st, col);
	int len = sqlite3_column_bytes(st, col), j = 0;

	for (int i = 0; p && i < len && j < 60; i++)
		out[j++] = (p[i] >= 0x20 && p[i] < 0x7f) ? (char)p[i] : '?';
	out[j] = '\0';
	return out;
}

/*
 * ix_check_one - run check statement id; on a row, describe it into msg and return -EUCLEAN.
 * Returns 0 (no row), -EUCLEAN, or -errno.
 */
static int ix_check_one(struct idx *ix, enum ix_stmt id, char *msg, size_t cap)
{
	sqlite3_stmt *st = ix_stmt(ix, id);
	char hex[17], name[64];
	int r = ix_step(ix, st);

	if (r <= 0)
		goto out;
	r = -EUCLEAN;
#define I(c) ((long long)sqlite3_column_int64(st, (c)))
	switch (id) {
	case IX_CHECK_DENTRY_INO:
		ix_msg(msg, cap, "invariant 2: dentry %lld/'%s' names missing inode %lld", I(0),
		       ix_name(st, 1, name), I(2));
		break;
	case IX_CHECK_DENTRY_PARENT:
		ix_msg(msg, cap, "invariant 2: dentry %lld/'%s' is in a missing or non-directory "
				 "inode", I(0), ix_name(st, 1, name));
		break;
	case IX_CHECK_DIR_LINKS:
		ix_msg(msg, cap, "invariant 2: directory %lld has %lld dentries, expected %d", I(0),
		       I(1), I(0) == IDX_ROOT_INO ? 0 : 1);
		break;
	case IX_CHECK_REFS:
		ix_msg(msg, cap, "invariant 3: chunk %s... has refs %lld but %lld extents",
		       ix_hex8(st, 0, hex), I(1), I(2));
		break;
	case IX_CHECK_EXT_CHUNK:
		ix_msg(msg, cap, "invariant 3: extent %lld@%lld names a missing chunk", I(0), I(1));
		break;
	case IX_CHECK_EXT_OWNER:
		ix_msg(msg, cap, "invariant 4: inode %lld has extents but is not a regular file",
		       I(0));
		break;
	case IX_CHECK_EXT_LENGTH:
		ix_msg(msg, cap, "invariant 4: extent %lld@%lld has length %lld, its chunk %lld",
		       I(0), I(1), I(2), I(3));
		break;
	case IX_CHECK_TILE_GAP:
		ix_msg(msg, cap, "invariant 4: inode %lld has an extent at %lld, expected %lld "
				 "(sparse: not below)",
		       I(0), I(1), I(2));
		break;
	case IX_CHECK_TILE_SIZE:
		ix_msg(msg, cap, "invariant 4: inode %lld has size %lld but extents cover %lld "
				 "(sparse: end at)",
		       I(0), I(1), I(2));
		break;
	case IX_CHECK_STEP_DIR:
		ix_msg(msg, cap, "invariant 6: step %lld has dir_ino %lld, %s", I(0), I(1),
		       I(2) ? "no such inode" : "not a directory");
		break;
	case IX_CHECK_STEP_STATE:
		ix_msg(msg, cap, "invariant 7: step %lld has state %lld, kind %lld", I(0), I(1),
		       I(2));
		break;
	case IX_CHECK_EVENT_STATE:
		ix_msg(msg, cap, "invariant 7: step %lld has an event from state %lld to %lld",
		       I(0), I(1), I(2));
		break;
	default:
		ix_msg(msg, cap, "check %d failed", (int)id);
		break;
	}
#undef I
out:
	ix_done(st);
	return r;
}

int idx_check(struct idx *ix, char *msg, size_t cap)
{
	static const enum ix_stmt checks[] = {
		IX_CHECK_DENTRY_INO, IX_CHECK_DENTRY_PARENT, IX_CHECK_DIR_LINKS,
		IX_CHECK_REFS,	     IX_CHECK_EXT_CHUNK,     IX_CHECK_EXT_OWNER,
		IX_CHECK_EXT_LENGTH, IX_CHECK_TILE_GAP,	     IX_CHECK_TILE_SIZE,
		IX_CHECK_STEP_DIR,   IX_CHECK_STEP_STATE,    IX_CHECK_EVENT_STATE,
	};
	sqlite3_stmt *st = ix_stmt(ix, IX_CHECK_ROOT);
	int r;

	/* 1. the root */
	r = ix_step(ix, st);
	if (r == 0 || (r > 0 && !S_ISDIR((mode_t)sqlite3_column_int64(st, 0)))) {
		ix_msg(msg, cap, "invariant 1: %s", r == 0 ? "root inode 1 is missing"
							   : "root inode 1 is not a directory");
		r = -EUCLEAN;
	}
	ix_done(st);
	if (r < 0)
		return r;
	/* 2-4, 6, 7 */
	for (size_t i = 0; i < IX_ARRAY_SIZE(checks); i++)
		if ((r = ix_check_one(ix, checks[i], msg, cap)) < 0)
			return r;
	ix_msg(msg, cap, "ok");
	return 0;
}
