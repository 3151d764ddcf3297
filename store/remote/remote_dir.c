/*
 * remote_dir.c — the directory backend of remote.h: key "a/b/c" is the file ROOT/a/b/c.
 *
 * Invariants:
 *   1. A file under a key's name is complete: it is written as ROOT/a/b/.tmp-RANDOM (O_EXCL),
 *      fsynced, then link(2)ed (put_if_absent: EEXIST from link means another writer won) or
 *      rename(2)d (put) to its name, and the directory fsynced. The temporary file is unlinked
 *      on every path out. On a shared file system (CephFS, NFS) link and O_EXCL are atomic
 *      across clients, which is what makes put_if_absent a commit point between nodes.
 *   2. Names starting with ".tmp-" are never keys (remote.c refuses them), so remote_list skips
 *      them; a temporary file left by a crash stays until someone removes it.
 *   3. Directories are created on demand (mkdir -p) and never removed.
 *   4. A call's deadline (struct remote_lim) is not enforced here: a system call on a hung NFS
 *      or CephFS mount cannot be cut short from user space, and abandoning it to a thread would
 *      leave one blocked thread per call. Its max_len is: remote_get checks the file's size
 *      before allocating (objects are immutable, so the size read is the size to read).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/remote/remote_int.h"
#include "store/store.h"

struct remote_dir {
	struct remote base;
	char *root; /* absolute path, no trailing '/' */
};

static struct remote_dir *to_dir(struct remote *r)
{
	return (struct remote_dir *)r;
}

static int join(const struct remote_dir *d, const char *key, char *path, size_t cap)
{
	int n = snprintf(path, cap, "%s/%s", d->root, key);

	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

static int fsync_parent(const char *path);

/*
 * Create every directory above the file path under root (mkdir -p of its parent; rlen: bytes of
 * root in path), fsyncing the parent of each directory it creates so the new name is durable.
 */
static int mkparents(char *path, size_t rlen)
{
	struct stat st;
	char *s;
	int rc = 0;

	for (s = strchr(path + rlen + 1, '/'); s && rc == 0; s = strchr(s + 1, '/')) {
		*s = '\0';
		if (mkdir(path, 0755) == 0)
			rc = fsync_parent(path);
		else if (errno == ENOTDIR || (errno == EEXIST && stat(path, &st) == 0 &&
					      !S_ISDIR(st.st_mode)))
			rc = -EEXIST; /* an object's file is in the way */
		else if (errno != EEXIST)
			rc = -errno;
		*s = '/';
	}
	return rc;
}

static int fsync_parent(const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	int fd, rc = 0;

	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	fd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

/* Write buf into a new temporary file next to path; its name into tmp (PATH_MAX bytes). */
static int write_tmp(const char *path, const void *buf, size_t len, char *tmp)
{
	const char *slash = strrchr(path, '/');
	uint64_t rnd;
	int fd, rc, tries;

	for (tries = 0; tries < 16; tries++) {
		if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
			return -EIO;
		snprintf(tmp, PATH_MAX, "%.*s/" REMOTE_TMP_PREFIX "%016llx", (int)(slash - path),
			 path, (unsigned long long)rnd);
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd >= 0 || errno != EEXIST)
			break;
	}
	if (fd < 0)
		return -errno;
	rc = store_write_all(fd, buf, len);
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc < 0)
		unlink(tmp);
	return rc;
}

static int dir_put(struct remote *r, const char *key, const void *buf, size_t len, bool if_absent,
		   const struct remote_lim *lim)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	int rc = join(to_dir(r), key, path, sizeof(path));

	if (rc < 0)
		return rc;
	if (if_absent && access(path, F_OK) == 0)
		return -EEXIST; /* fast path only: link() below decides */
	rc = mkparents(path, strlen(to_dir(r)->root));
	if (rc < 0)
		return rc;
	rc = write_tmp(path, buf, len, tmp);
	if (rc < 0)
		return rc;
	if (if_absent) {
		if (link(tmp, path) < 0)
			rc = -errno;
		unlink(tmp);
	} else if (rename(tmp, path) < 0) {
		rc = -errno;
		unlink(tmp);
	}
	if (rc == 0)
		rc = fsync_parent(path);
	return rc;
}

static int read_fd(int fd, uint64_t off, void *buf, size_t len, size_t *ret_got)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	*ret_got = got;
	return 0;
}

/* A key found missing (rc -ENOENT): missing from a remote directory that is there, or the whole
 * directory gone (a shared file system unmounted, moved): -ENOTCONN then, never "no such key",
 * so that nobody takes an object for lost while the remote is away. */
static int missing(struct remote *r, int rc)
{
	struct stat st;

	if (rc == -ENOENT && to_dir(r)->root[0] && stat(to_dir(r)->root, &st) < 0)
		return -ENOTCONN;
	return rc;
}

static int open_key(struct remote *r, const char *key, struct stat *st)
{
	char path[PATH_MAX];
	int fd, rc = join(to_dir(r), key, path, sizeof(path));

	if (rc < 0)
		return rc;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return missing(r, errno == ENOTDIR ? -ENOENT : -errno);
	if (fstat(fd, st) < 0)
		rc = -errno;
	else if (!S_ISREG(st->st_mode))
		rc = S_ISDIR(st->st_mode) ? -ENOENT : -EIO;
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

/* Read the whole object at key into *io_buf: a buffer of the object's own size when alloc (the
 * caller frees *io_buf), else the caller's *io_buf of at least bound bytes. An object longer than
 * bound is -EFBIG before a byte is read. */
static int read_whole(struct remote *r, const char *key, size_t bound, const struct remote_lim *lim,
		      bool alloc, void **io_buf, size_t *ret_len)
{
	struct stat st;
	size_t got = 0;
	void *buf = *io_buf;
	int rc, fd = open_key(r, key, &st);

	if (fd < 0)
		return fd;
	if ((uint64_t)st.st_size > bound) {
		close(fd);
		return remote_errf(lim->err, lim->errlen, -EFBIG,
				   "the remote object '%s' is %lld bytes, more than the %zu this "
				   "read accepts", key, (long long)st.st_size, bound);
	}
	if (alloc && !(buf = malloc(st.st_size ? (size_t)st.st_size : 1))) {
		close(fd);
		return -ENOMEM;
	}
	rc = read_fd(fd, 0, buf, (size_t)st.st_size, &got);
	close(fd);
	if (rc == 0 && got != (size_t)st.st_size)
		rc = -EIO; /* objects are immutable: a short read means something else wrote */
	if (rc < 0) {
		if (alloc)
			free(buf);
		return rc;
	}
	*io_buf = buf;
	*ret_len = got;
	return 0;
}

static int dir_get(struct remote *r, const char *key, const struct remote_lim *lim,
		   void **ret_buf, size_t *ret_len)
{
	*ret_buf = NULL;
	return read_whole(r, key, lim->max_len, lim, true, ret_buf, ret_len);
}

static int dir_get_into(struct remote *r, const char *key, void *buf, size_t cap,
			const struct remote_lim *lim, size_t *ret_len)
{
	return read_whole(r, key, cap, lim, false, &buf, ret_len);
}

static int dir_get_range(struct remote *r, const char *key, uint64_t off, void *buf, size_t len,
			 const struct remote_lim *lim, size_t *ret_got)
{
	struct stat st;
	int rc, fd = open_key(r, key, &st);

	if (fd < 0)
		return fd;
	rc = read_fd(fd, off, buf, len, ret_got);
	close(fd);
	return rc;
}

static int dir_head(struct remote *r, const char *key, const struct remote_lim *lim,
		    uint64_t *ret_size)
{
	char path[PATH_MAX];
	struct stat st;
	int rc = join(to_dir(r), key, path, sizeof(path));

	if (rc < 0)
		return rc;
	if (stat(path, &st) < 0)
		return missing(r, errno == ENOTDIR ? -ENOENT : -errno);
	if (!S_ISREG(st.st_mode))
		return -ENOENT;
	if (ret_size)
		*ret_size = (uint64_t)st.st_size;
	return 0;
}

/* Whether the walk can find keys starting with prefix under directory key rel ("" or "a/b/"). */
static bool may_match(const char *rel, size_t rlen, const char *prefix)
{
	size_t plen = strlen(prefix);

	return strncmp(rel, prefix, rlen < plen ? rlen : plen) == 0;
}

/*
 * Whether the walk can find keys above after (byte order) under directory key rel (rlen bytes,
 * ending in '/'): every key below starts with rel, so when rel is below after and after does
 * not start with rel, they differ first at a byte where rel's is the smaller, and every key
 * below is too. Such a directory is not read: a listing after the last key seen costs the
 * directories of the newer keys, not the whole tree.
 */
static bool may_follow(const char *rel, size_t rlen, const char *after)
{
	return !after[0] || strncmp(rel, after, rlen) >= 0;
}

/* Walk the directory whose key prefix is rel (rlen bytes, "" or ending in '/'; PATH_MAX buffer),
 * calling fn for the keys starting with prefix and above after ("" for all). */
static int walk(struct remote_dir *d, char *rel, size_t rlen, const char *prefix,
		const char *after, remote_list_fn fn, void *arg)
{
	char path[PATH_MAX];
	struct dirent *de;
	DIR *dh;
	int rc = 0;

	snprintf(path, sizeof(path), "%s/%s", d->root, rel);
	dh = opendir(path);
	if (!dh)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
	while (rc == 0 && (errno = 0, de = readdir(dh))) {
		size_t nlen = strlen(de->d_name);
		struct stat st;

		if (de->d_name[0] == '.' &&
		    (nlen == 1 || (nlen == 2 && de->d_name[1] == '.') ||
		     strncmp(de->d_name, REMOTE_TMP_PREFIX, strlen(REMOTE_TMP_PREFIX)) == 0))
			continue;
		if (rlen + nlen + 2 > PATH_MAX || rlen + nlen > REMOTE_KEY_MAX)
			continue; /* not a key this interface can name */
		memcpy(rel + rlen, de->d_name, nlen + 1);
		if (fstatat(dirfd(dh), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = errno == ENOENT ? 0 : -errno;
		} else if (S_ISDIR(st.st_mode)) {
			rel[rlen + nlen] = '/';
			rel[rlen + nlen + 1] = '\0';
			if (may_match(rel, rlen + nlen + 1, prefix) &&
			    may_follow(rel, rlen + nlen + 1, after))
				rc = walk(d, rel, rlen + nlen + 1, prefix, after, fn, arg);
		} else if (S_ISREG(st.st_mode) && strncmp(rel, prefix, strlen(prefix)) == 0 &&
			   strcmp(rel, after) > 0) {
			rc = fn(rel, (uint64_t)st.st_size, arg);
		}
		rel[rlen] = '\0';
	}
	if (rc == 0 && errno != 0)
		rc = -errno;
	closedir(dh);
	return rc;
}

static int dir_list(struct remote *r, const char *prefix, const char *after, remote_list_fn fn,
		    void *arg, const struct remote_lim *lim)
{
	char rel[PATH_MAX] = "";
	struct stat st;

	/* a missing prefix lists nothing, a missing remote directory is an error: the listing of
	 * a shared file system that went away must not read as "no keys" */
	if (stat(to_dir(r)->root[0] ? to_dir(r)->root : "/", &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	return walk(to_dir(r), rel, 0, prefix, after, fn, arg);
}

static int dir_del(struct remote *r, const char *key, const struct remote_lim *lim)
{
	char path[PATH_MAX];
	int rc = join(to_dir(r), key, path, sizeof(path));

	if (rc < 0)
		return rc;
	if (unlink(path) < 0)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
	return fsync_parent(path);
}

static void dir_close(struct remote *r)
{
	free(to_dir(r)->root);
	free(r);
}

static const struct remote_ops dir_ops = {
	.close = dir_close,
	.put = dir_put,
	.get = dir_get,
	.get_range = dir_get_range,
	.get_into = dir_get_into,
	.head = dir_head,
	.list = dir_list,
	.del = dir_del,
};

/* Create and remove an empty temporary file in dir: what access(2) cannot tell (EROFS, a dead
 * network mount, root squash on NFS). */
static int probe(const char *dir)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	int rc;

	snprintf(path, sizeof(path), "%s/probe", dir);
	rc = write_tmp(path, "", 0, tmp);
	if (rc == 0 && unlink(tmp) < 0)
		rc = -errno;
	return rc;
}

int remote_dir_open(const char *dir, bool check, struct remote **ret_remote, char *err,
		    size_t errlen)
{
	struct remote_dir *d;
	struct stat st;
	size_t n = strlen(dir);
	int rc;

	while (n > 1 && dir[n - 1] == '/')
		n--;
	if (n + REMOTE_KEY_MAX + 32 > PATH_MAX)
		return remote_errf(err, errlen, -ENAMETOOLONG, "remote directory path '%s' is too long",
				   dir);
	if (!check)
		goto make;
	if (stat(dir, &st) < 0)
		return remote_errf(err, errlen, -errno,
				   "remote directory '%s': %s (create it, or mount the shared file "
				   "system there)", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return remote_errf(err, errlen, -ENOTDIR, "remote directory '%s' is not a directory",
				   dir);
	if (access(dir, W_OK | X_OK) < 0 && errno == EROFS)
		return remote_errf(err, errlen, -EROFS,
				   "remote directory '%s' is on a read-only file system (mount it "
				   "read-write)", dir);
	if (access(dir, W_OK | X_OK) < 0)
		return remote_errf(err, errlen, -EACCES,
				   "remote directory '%s' is not writable by this user: %s (fix its "
				   "owner or mode)", dir, strerror(errno));
	rc = probe(dir);
	if (rc < 0)
		return remote_errf(err, errlen, rc,
				   "cannot create a file in the remote directory '%s': %s (check the "
				   "mount: read-only, full, or its server gone?)", dir, strerror(-rc));
make:
	d = calloc(1, sizeof(*d));
	if (!d || !(d->root = strndup(dir, n == 1 ? 0 : n))) {
		free(d);
		return remote_errf(err, errlen, -ENOMEM, "out of memory");
	}
	d->base.ops = &dir_ops;
	*ret_remote = &d->base;
	return 0;
}
