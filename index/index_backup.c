/* SPDX-License-Identifier: MIT */
/*
 * index_backup.c — a stand-alone copy of the index, so that a lost or emptied index.db costs the
 * changes since the copy, not the store (ckptfs makes one at every clean unmount; ckptctl fsck
 * --rebuild restores it).
 *
 * The copy is made with SQLite's online backup API (https://www.sqlite.org/backup.html), which
 * reads through the source connection and therefore includes what is committed in its WAL. It is
 * published the way the chunk store publishes a chunk: temporary file, fsync, rename, fsync of
 * the directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "index/index_int.h"

/* fsync the file or directory at path. Returns 0 or -errno. */
static int ix_fsync_path(const char *path, int flags)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | flags), rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

/* Remove path and the journal SQLite may leave beside it. */
static void ix_unlink_db(const char *path)
{
	char j[PATH_MAX + 16];

	unlink(path);
	snprintf(j, sizeof(j), "%s-journal", path);
	unlink(j);
}

int idx_backup(struct idx *ix, const char *dst_path)
{
	char tmp[PATH_MAX], dir[PATH_MAX];
	sqlite3 *dst = NULL;
	sqlite3_backup *b;
	int r, rc;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", dst_path) >= (int)sizeof(tmp) ||
	    snprintf(dir, sizeof(dir), "%s", dst_path) >= (int)sizeof(dir))
		return -ENAMETOOLONG;
	if ((rc = idx_flush(ix)) < 0) /* a backup copies what is committed */
		return rc;
	ix_unlink_db(tmp); /* left by a backup that was interrupted */
	r = sqlite3_open_v2(tmp, &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
	if (r != SQLITE_OK) {
		rc = dst ? ix_err(NULL, r) : -ENOMEM;
		goto out;
	}
	b = sqlite3_backup_init(dst, "main", ix->db, "main");
	if (!b) {
		rc = ix_err(NULL, sqlite3_errcode(dst));
		goto out;
	}
	r = sqlite3_backup_step(b, -1);
	sqlite3_backup_finish(b);
	if (r != SQLITE_DONE) {
		rc = ix_err(NULL, r);
		goto out;
	}
	/* the pages copied carry the source's WAL mode; a backup is one file with no -wal beside */
	r = sqlite3_exec(dst, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL);
	if (r != SQLITE_OK) {
		rc = ix_err(NULL, r);
		goto out;
	}
	r = sqlite3_close(dst);
	dst = NULL;
	if (r != SQLITE_OK) {
		rc = -EIO;
		goto out;
	}
	/* SQLite creates files 0644 (less the umask); the index's copies are as private as it */
	if (chmod(tmp, 0600) < 0) {
		rc = -errno;
		goto out;
	}
	if ((rc = ix_fsync_path(tmp, 0)) < 0)
		goto out;
	if (rename(tmp, dst_path) < 0) {
		rc = -errno;
		goto out;
	}
	rc = ix_fsync_path(dirname(dir), O_DIRECTORY);
out:
	if (dst)
		sqlite3_close(dst);
	if (rc < 0)
		ix_unlink_db(tmp);
	return rc;
}
