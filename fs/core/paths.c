/*
 * paths.c — the checks on STORE and MOUNTPOINT made before anything is created or mounted, and
 * the address of a mounted store's control socket.
 *
 * Why each refusal: a store inside its own mount point (or equal to it) is written through the
 * mount by the daemon that serves it, which deadlocks or loses what is written; a mount point
 * inside the store hides the store's own files under the mount; a non-empty mount point hides
 * what it holds (a directory of checkpoints, which a trainer then no longer finds, so it starts
 * from step 0); and a non-empty directory that is not a store, given as STORE, is usually a
 * directory of checkpoints named in the wrong place (STORE and MOUNTPOINT swapped).
 */
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "fs/ckptfs.h"

/*
 * The absolute, symlink-free form of path into out (PATH_MAX bytes): realpath(3) of path when
 * it exists, else of its parent with the last component appended (a store is created one level
 * deep, as repo.c's mkdir does). Returns 0 or -errno of realpath.
 */
static int canon(const char *path, char out[PATH_MAX])
{
	char dir[PATH_MAX], base[PATH_MAX], parent[PATH_MAX];

	if (realpath(path, out))
		return 0;
	if (errno != ENOENT)
		return -errno;
	if (snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir) ||
	    snprintf(base, sizeof(base), "%s", path) >= (int)sizeof(base))
		return -ENAMETOOLONG;
	const char *b = basename(base);

	if (!strcmp(b, ".") || !strcmp(b, "..") || !strcmp(b, "/"))
		return -ENOENT;
	if (!realpath(dirname(dir), parent))
		return -errno;
	if (snprintf(out, PATH_MAX, "%s/%s", strcmp(parent, "/") ? parent : "", b) >= PATH_MAX)
		return -ENAMETOOLONG;
	return 0;
}

/* Whether directory a is b or holds b at any depth (both canonical). */
static bool contains(const char *a, const char *b)
{
	size_t n = strlen(a);

	if (!strcmp(a, "/"))
		return true;
	return !strncmp(a, b, n) && (b[n] == '\0' || b[n] == '/');
}

/*
 * The first entry of directory path other than "." and ".." and the names in skip
 * (NULL-terminated) into first (NAME_MAX + 1 bytes). Returns 1 (found), 0 (none, or path is
 * missing) or -errno of opendir/readdir.
 */
static int first_entry(const char *path, const char *const *skip, char *first)
{
	struct dirent *de;
	DIR *d = opendir(path);
	int rc = 0;

	if (!d)
		return errno == ENOENT ? 0 : -errno;
	for (;;) {
		errno = 0;
		if (!(de = readdir(d))) {
			rc = errno ? -errno : 0;
			break;
		}
		bool skipped = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");

		for (size_t i = 0; skip && skip[i] && !skipped; i++)
			skipped = !strcmp(de->d_name, skip[i]);
		if (!skipped) {
			snprintf(first, NAME_MAX + 1, "%s", de->d_name);
			rc = 1;
			break;
		}
	}
	closedir(d);
	return rc;
}

/* Whether directory path holds one of the files every ckptfs store has. */
static bool is_store(const char *path)
{
	static const char *const marks[] = { "index.db", "lock", "chunks", "index.db.bak" };
	char p[PATH_MAX];

	for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++)
		if (snprintf(p, sizeof(p), "%s/%s", path, marks[i]) < (int)sizeof(p) &&
		    access(p, F_OK) == 0)
			return true;
	return false;
}

int ckpt_paths_check(const char *store, const char *mnt, bool nonempty, char *err, size_t cap)
{
	/* what a fresh filesystem's root holds, if the store is one */
	static const char *const fs_root[] = { "lost+found", NULL };
	char s[PATH_MAX], m[PATH_MAX], first[NAME_MAX + 1];
	int rc;

	if ((rc = canon(store, s)) < 0) {
		ckpt_msg(err, cap, "store '%s': %s", store, strerror(-rc));
		return rc;
	}
	if ((rc = canon(mnt, m)) < 0) {
		ckpt_msg(err, cap, "mountpoint '%s': %s%s", mnt, strerror(-rc),
		     rc == -ENOENT ? " (create it with mkdir)" : "");
		return rc;
	}
	if (contains(m, s) || contains(s, m)) {
		ckpt_msg(err, cap, "store '%s' and mountpoint '%s' overlap (%s); give two separate "
		     "directories, e.g. 'ckptfs output/.ckptfs-store output/checkpoint'", store, mnt,
		     !strcmp(s, m) ? "the same directory: the daemon would write its store "
				     "through its own mount" :
		     contains(m, s) ? "the store is inside the mountpoint: the daemon would write "
				      "its store through its own mount" :
				      "the mountpoint is inside the store: the mount would hide "
				      "the store's own files");
		return -EINVAL;
	}
	rc = first_entry(m, NULL, first);
	if (rc < 0) {
		ckpt_msg(err, cap, "mountpoint '%s': %s", mnt, strerror(-rc));
		return rc;
	}
	if (rc > 0 && !nonempty) {
		ckpt_msg(err, cap, "mountpoint '%s' is not empty (it holds '%s'): the mount would hide "
		     "what it holds, and a trainer resuming there would not find its checkpoints; "
		     "bring them into the store first ('ckptctl %s import %s', then mount on an "
		     "empty directory), or give -o nonempty to mount over them anyway", mnt, first,
		     store, mnt);
		return -ENOTEMPTY;
	}
	rc = first_entry(s, fs_root, first);
	if (rc < 0) {
		ckpt_msg(err, cap, "store '%s': %s", store, strerror(-rc));
		return rc;
	}
	if (rc > 0 && !is_store(s)) {
		ckpt_msg(err, cap, "'%s' is not a ckptfs store: it holds '%s' and no index; were STORE "
		     "and MOUNTPOINT swapped? (usage: ckptfs STORE MOUNTPOINT; a new store must be "
		     "an empty or absent directory)", store, first);
		return -ENOTEMPTY;
	}
	return 0;
}

int ckpt_control_addr(const char *store, struct sockaddr_un *ret, socklen_t *ret_len)
{
	struct stat sb;
	int n;

	if (stat(store, &sb) < 0)
		return -errno;
	memset(ret, 0, sizeof(*ret));
	ret->sun_family = AF_UNIX;
	/* sun_path[0] = '\0': Linux's abstract namespace (unix(7)); no file, no path length limit */
	n = snprintf(ret->sun_path + 1, sizeof(ret->sun_path) - 1, "ckptfs-control/%llx:%llx",
		     (unsigned long long)sb.st_dev, (unsigned long long)sb.st_ino);
	*ret_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	return 0;
}
