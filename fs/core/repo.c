/*
 * repo.c — opening a STORE directory: ownership lock, index, chunk store, clean marker and
 * recovery sweep. Shared by the daemon and ckptctl.
 *
 * Invariants:
 *   1. At most one process holds STORE/lock exclusively (flock), and only that process writes
 *      the index or the chunk directory.
 *   2. STORE/clean exists only while no daemon runs and the previous one stopped cleanly.
 *   3. STORE/lock holds one line, "PID[ STATE]", written by the process holding the exclusive
 *      lock; its meaning lasts only as long as that lock. A daemon's line goes
 *         "PID" (opening, mounting)  ->  "PID mounted MAJ:MIN MOUNTPOINT" (serving that FUSE
 *         mount)  ->  "PID unmounted" (the mount is gone, it is finishing its writes),
 *      and only ckpt_repo_set_mount writes the last two. ckptctl's exclusive opens stay "PID".
 *   4. Every name in STORE is reached through r->dir_fd (openat, fstatat, renameat, unlinkat)
 *      and never through a symbolic link (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW): the owner of STORE
 *      may plant links, and a root daemon must not write through them (ckptfs.h). Only SQLite
 *      (index.db; repo_check_names runs before each idx_open) and store/ (chunks/, its
 *      invariant 12) open by path.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "fs/ckptfs.h"
#include "store/remote/remote.h"

int64_t ckpt_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t ckpt_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void ckpt_msg(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;

	if (!buf || !cap)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
}

/*
 * How long an exclusive open waits for a lock whose holder is gone or exiting, in seconds. A
 * killed daemon lets go 1-2 s after SIGKILL on the CI machine (see owner_exiting); 30 s leaves
 * room for one that was in the middle of O_DIRECT writes to a slow disk.
 */
#define LOCK_WAIT_S 30

/*
 * How long an exclusive open waits for a daemon that is unmounted and still finishing its
 * writes (invariant 3), in seconds. What is left for it is the data still in its write buffer
 * and commit queue when `fusermount3 -u` returned, plus one index commit: seconds for the
 * default buffer at disk speed. A daemon still at it after a minute is stuck (a disk that does
 * not answer), and the mount it holds back should fail and say so rather than hang.
 */
#define FINISH_WAIT_S 60

/* "PID mounted MAJ:MIN MOUNTPOINT\n" with room to spare */
#define LOCK_LINE_MAX (PATH_MAX + 64)

/*
 * Read the lock file's line (invariant 3): returns the pid, 0 when unreadable; state (cap
 * bytes) gets what follows the pid, "" when nothing does.
 */
static pid_t read_owner_state(int fd, char *state, size_t cap)
{
	char buf[LOCK_LINE_MAX] = { 0 };
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	char *end;
	pid_t pid;

	state[0] = '\0';
	if (n <= 0)
		return 0;
	pid = (pid_t)strtol(buf, &end, 10);
	while (*end == ' ')
		end++;
	end[strcspn(end, "\n")] = '\0';
	snprintf(state, cap, "%s", end);
	return pid;
}

/* Read the pid written into the lock file; 0 when unreadable. */
static pid_t read_owner(int fd)
{
	char state[LOCK_LINE_MAX];

	return read_owner_state(fd, state, sizeof(state));
}

/*
 * Whether the process whose pid is in the lock file is gone or exiting: /proc/PID is missing,
 * or its thread-group leader is a zombie (state Z or X). PID 0 (no pid written) counts as gone.
 *
 * A SIGKILLed daemon's leader thread is a zombie at once, but the lock is released only when
 * its last thread has torn down the address space and closed its files, which takes seconds
 * for a daemon that had just taken hundreds of MiB of writes.
 */
static bool owner_exiting(pid_t pid)
{
	char path[64], buf[512];
	ssize_t n;
	int fd;

	if (pid <= 0)
		return true;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ESRCH;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	/* "pid (comm) S ...": the state follows the last ')' (comm may hold any byte) */
	const char *rp = strrchr(buf, ')');

	return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/*
 * Whether /proc/PID/mountinfo, the mounts PID sees, has the mount id, "MAJ:MIN MOUNTPOINT"
 * (fields 3 and 5 of proc(5)'s format). Both, because the kernel gives a freed device number
 * to the next mount anywhere at once. An unreadable file counts as mounted: the caller then
 * refuses the store as it would a live owner.
 */
static bool owner_has_mount(pid_t pid, const char *id)
{
	char path[64], *line = NULL;
	size_t cap = 0;
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)pid);
	if (!(f = fopen(path, "re")))
		return true;
	while (!found && getline(&line, &cap, f) > 0) {
		char dev[32], mnt[PATH_MAX], this[sizeof(dev) + sizeof(mnt)];

		if (sscanf(line, "%*s %*s %31s %*s %4095s", dev, mnt) == 2) {
			snprintf(this, sizeof(this), "%s %s", dev, mnt);
			found = strcmp(this, id) == 0;
		}
	}
	free(line);
	fclose(f);
	return found;
}

/*
 * Whether the live owner pid of the lock (its line's state: invariant 3) is a daemon whose
 * mount is gone and which is only finishing its writes. "mounted ID" with no such mount
 * left is one too: `fusermount3 -u` returns before the daemon's session loop has ended and it
 * has written "unmounted".
 */
static bool owner_finishing(pid_t pid, const char *state)
{
	if (strcmp(state, "unmounted") == 0)
		return true;
	if (strncmp(state, "mounted ", 8) == 0)
		return !owner_has_mount(pid, state + 8);
	return false;
}

/*
 * Take the exclusive ownership lock on fd, waiting while its holder is gone or exiting (a daemon
 * just killed, or a ckptctl reading; up to LOCK_WAIT_S) or is a daemon unmounted and finishing
 * its writes (up to FINISH_WAIT_S, saying so once on stderr, naming root). Returns 0; -EBUSY
 * with *owner and *finishing set when a live process holds it or the wait ran out; other -errno
 * of flock.
 */
static int lock_exclusive(int fd, const char *root, pid_t *owner, bool *finishing)
{
	const int64_t start = ckpt_mono_ns();
	bool said = false;

	for (;;) {
		char state[LOCK_LINE_MAX];
		int64_t waited_s;

		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno != EWOULDBLOCK)
			return -errno;
		*owner = read_owner_state(fd, state, sizeof(state));
		*finishing = !owner_exiting(*owner) && owner_finishing(*owner, state);
		waited_s = (ckpt_mono_ns() - start) / 1000000000;
		if (*finishing ? waited_s >= FINISH_WAIT_S
			       : (!owner_exiting(*owner) || waited_s >= LOCK_WAIT_S))
			return -EBUSY;
		if (*finishing && !said) {
			fprintf(stderr, "waiting for ckptfs (pid %d) to finish writing store '%s' "
				"(up to %d s)\n", (int)*owner, root, FINISH_WAIT_S);
			said = true;
		}
		struct timespec ts = { 0, 20 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
}

#define REPO_INDEX_FILE "index.db"      /* the index database, in STORE */
#define REPO_BACKUP_FILE "index.db.bak" /* its copy at the last clean unmount (idx_backup) */

/* Every name ckptfs uses at the top of STORE, and whether it is a directory. */
static const struct {
	const char *name;
	bool dir;
} repo_names[] = {
	{ REPO_INDEX_FILE, false },
	{ REPO_INDEX_FILE "-wal", false },
	{ REPO_INDEX_FILE "-shm", false },
	{ REPO_INDEX_FILE "-journal", false },
	{ "lock", false },
	{ "clean", false },
	{ "check", false },
	{ "reserve", false },
	{ "reserve.tmp", false },
	{ "ckptfs.log", false },
	{ "ckptfs.log.1", false }, /* the rotated logs, CKPT_LOG_KEEP of them (log.c) */
	{ "ckptfs.log.2", false },
	{ "ckptfs.log.3", false },
	{ "recovery.json", false }, /* the last mount that recovered (fs/steps/steps_report.c) */
	{ "recovery.json.tmp", false },
	{ REMOTE_STORE_RECORD, false },
	{ REMOTE_STORE_RECORD ".tmp", false },
	{ REPO_BACKUP_FILE, false },
	{ REPO_BACKUP_FILE ".tmp", false },
	/* the copies idx_open keeps of an index before upgrading it, one per older version */
	{ REPO_INDEX_FILE ".v1.bak", false },
	{ REPO_INDEX_FILE ".v1.bak.tmp", false },
	{ REPO_INDEX_FILE ".v2.bak", false },
	{ REPO_INDEX_FILE ".v2.bak.tmp", false },
	{ "staging", true },
	{ "chunks", true },
	{ "lost+found", true },
};
#define REPO_INDEX_NAMES 4 /* the first entries of repo_names: what SQLite opens by path */
_Static_assert(IDX_SCHEMA_VERSION == 3, "a new schema version: add its index.db.vN.bak names, "
	       "N the version before it, to repo_names");

/*
 * Check the first n names of repo_names in dir_fd: absent, or of their kind (plain file or
 * directory) and not a symbolic link. Returns 0, -ELOOP (a link) or -EPERM (another kind), with
 * the offending name in *ret_name; other -errno of fstatat.
 */
static int repo_check_names(int dir_fd, size_t n, const char **ret_name)
{
	struct stat stt;

	for (size_t i = 0; i < n; i++) {
		*ret_name = repo_names[i].name;
		if (fstatat(dir_fd, repo_names[i].name, &stt, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;
			return -errno;
		}
		if (S_ISLNK(stt.st_mode))
			return -ELOOP;
		if (repo_names[i].dir ? !S_ISDIR(stt.st_mode) : !S_ISREG(stt.st_mode))
			return -EPERM;
	}
	return 0;
}

/* The message of a repo_check_names failure rc on name in root. Returns rc. */
static int repo_name_err(const char *root, const char *name, int rc, char *err, size_t errcap)
{
	if (rc == -ELOOP)
		ckpt_msg(err, errcap, "'%s/%s' is a symbolic link; ckptfs never follows a link inside "
		       "a store: remove it", root, name);
	else if (rc == -EPERM)
		ckpt_msg(err, errcap, "'%s/%s' is not a plain %s; remove it", root, name,
		       strcmp(name, "staging") && strcmp(name, "chunks") ? "file" : "directory");
	else
		ckpt_msg(err, errcap, "cannot check '%s/%s': %s", root, name, strerror(-rc));
	return rc;
}

int ckpt_repo_openat(const struct ckpt_repo *r, const char *name, int flags, mode_t mode)
{
	return ckpt_openat_plain(r->dir_fd, name, flags, mode);
}

int ckpt_openat_plain(int dir_fd, const char *name, int flags, mode_t mode)
{
	struct stat stt;
	int fd, rc;

	/* O_NONBLOCK: a FIFO planted under the name must not hang the open */
	fd = openat(dir_fd, name, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, mode);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &stt) < 0)
		rc = -errno;
	else if (!S_ISREG(stt.st_mode))
		rc = -EPERM;
	else if (!(flags & O_NONBLOCK) && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0)
		rc = -errno;
	else
		return fd;
	close(fd);
	return rc;
}

/*
 * Open (with REPO_CREATE, create mode 0700) the store root into r->dir_fd and check it: a
 * directory not writable by group or others, owned by the effective uid for an open that may
 * write (unless REPO_FOREIGN), holding no link or odd file under a name ckptfs uses. Returns 0
 * or -errno with a message in err.
 */
static int repo_open_root(struct ckpt_repo *r, const char *root, int flags, char *err,
			  size_t errcap)
{
	const bool may_write = (flags & REPO_EXCLUSIVE) || !(flags & REPO_RDONLY);
	const char *name = "";
	struct stat stt;
	int rc;

	r->dir_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r->dir_fd < 0 && errno == ENOENT && (flags & REPO_CREATE)) {
		if (mkdir(root, 0700) < 0 && errno != EEXIST) {
			rc = -errno;
			ckpt_msg(err, errcap, "cannot create store '%s': %s", root, strerror(-rc));
			return rc;
		}
		r->dir_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	if (r->dir_fd < 0 || fstat(r->dir_fd, &stt) < 0) {
		rc = -errno;
		if (rc == -ENOTDIR)
			ckpt_msg(err, errcap, "store '%s' is not a directory", root);
		else
			ckpt_msg(err, errcap, "cannot use store '%s': %s%s", root, strerror(-rc),
			       rc == -ENOENT ? " (mount it once with ckptfs to create it)" : "");
		return rc;
	}
	if (stt.st_mode & (S_IWGRP | S_IWOTH)) {
		ckpt_msg(err, errcap,
		       "store '%s' is writable by group or others (mode %04o); run 'chmod 0700 %s'",
		       root, (unsigned)(stt.st_mode & 07777), root);
		return -EPERM;
	}
	if (may_write && !(flags & REPO_FOREIGN) && stt.st_uid != geteuid()) {
		ckpt_msg(err, errcap,
		       "store '%s' is owned by uid %u, not by uid %u that opens it: its owner could "
		       "make ckptfs write through it to other files; run this as uid %u, or (ckptfs) "
		       "mount with -o allow_foreign_store if you trust that user",
		       root, (unsigned)stt.st_uid, (unsigned)geteuid(), (unsigned)stt.st_uid);
		return -EPERM;
	}
	rc = repo_check_names(r->dir_fd, sizeof(repo_names) / sizeof(repo_names[0]), &name);
	return rc < 0 ? repo_name_err(root, name, rc, err, errcap) : 0;
}

/* Write "root/name" into buf (cap bytes), for SQLite and for messages. Returns 0 or
 * -ENAMETOOLONG. */
static int path_join(char *buf, size_t cap, const char *root, const char *name)
{
	int n = snprintf(buf, cap, "%s/%s", root, name);

	return (n < 0 || (size_t)n >= cap) ? -ENAMETOOLONG : 0;
}

/* The message of a store path too long for PATH_MAX; returns -ENAMETOOLONG. */
static int repo_path_too_long(const char *root, char *err, size_t errcap)
{
	ckpt_msg(err, errcap, "store path '%s' is too long", root);
	return -ENAMETOOLONG;
}

/*
 * REPO_EXCLUSIVE: take the lock file lock_fd (at path) exclusively, write our pid into it and
 * note whether the last mount ended cleanly. Returns 0 or -errno (-EBUSY: held by another
 * process, whose pid goes to r->owner_pid) with a message in err.
 */
static int repo_lock_exclusive(struct ckpt_repo *r, const char *root, const char *path, char *err,
			       size_t errcap)
{
	bool finishing = false;
	pid_t owner = 0;
	int rc;

	if ((rc = lock_exclusive(r->lock_fd, root, &owner, &finishing)) == -EBUSY) {
		r->owner_pid = owner;
		if (finishing)
			ckpt_msg(err, errcap,
			       "store '%s' is still being written by its ckptfs (pid %d) %d s after "
			       "it was unmounted ('%s/ckptfs.log' says why); retry once 'ps -p %d' "
			       "shows nothing",
			       root, (int)owner, FINISH_WAIT_S, root, (int)owner);
		else if (!owner_exiting(owner))
			ckpt_msg(err, errcap,
			       "store '%s' is in use by another ckptfs (pid %d); unmount it "
			       "first (fusermount3 -u MOUNTPOINT)",
			       root, (int)owner);
		else if (owner > 0)
			ckpt_msg(err, errcap,
			       "store '%s' is still locked %d s after its ckptfs (pid %d) began "
			       "to exit; wait until 'ps -p %d' shows nothing, then retry",
			       root, LOCK_WAIT_S, (int)owner, (int)owner);
		else
			ckpt_msg(err, errcap,
			       "store '%s' is locked by another process (a ckptctl reading it?) "
			       "for more than %d s; find it with 'fuser -v %s/lock' and retry",
			       root, LOCK_WAIT_S, root);
		return rc;
	} else if (rc < 0) {
		ckpt_msg(err, errcap, "cannot lock '%s': %s", path, strerror(-rc));
		return rc;
	}
	char pidbuf[32];
	int n = snprintf(pidbuf, sizeof(pidbuf), "%d\n", (int)getpid());

	r->prev_pid = read_owner(r->lock_fd); /* the last owner's line, before ours replaces it */

	if (ftruncate(r->lock_fd, 0) < 0 || pwrite(r->lock_fd, pidbuf, n, 0) != n) {
		rc = -errno;
		ckpt_msg(err, errcap, "cannot write '%s': %s", path, strerror(-rc));
		return rc;
	}
	struct stat stt;

	r->was_clean = fstatat(r->dir_fd, "clean", &stt, AT_SYMLINK_NOFOLLOW) == 0 &&
		       S_ISREG(stt.st_mode);
	return 0;
}

/*
 * A mounted store: wait while its daemon checks the newest step (ckpt_repo_check_lock), so
 * that the index read next is the one the mount serves. No STORE/check (an older daemon), or
 * any failure: read at once.
 */
static void repo_wait_check(struct ckpt_repo *r, const char *root)
{
	int fd = ckpt_repo_openat(r, "check", O_RDONLY, 0);

	if (fd < 0)
		return;
	if (flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK) {
		fprintf(stderr, "waiting for ckptfs (pid %d) to finish checking the newest step "
			"of '%s' (%s/ckptfs.log says how far it is)\n", (int)r->owner_pid, root,
			root);
		while (flock(fd, LOCK_SH) < 0 && errno == EINTR)
			;
	}
	close(fd); /* unlocks */
}

int ckpt_repo_check_lock(struct ckpt_repo *r)
{
	int fd, rc;

	if ((fd = ckpt_repo_openat(r, "check", O_RDWR | O_CREAT, 0600)) < 0)
		return fd;
	if (flock(fd, LOCK_EX) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

int ckpt_repo_set_mount(struct ckpt_repo *r, const char *id)
{
	char line[LOCK_LINE_MAX];
	int n;

	n = id ? snprintf(line, sizeof(line), "%d mounted %s\n", (int)getpid(), id)
		: snprintf(line, sizeof(line), "%d unmounted\n", (int)getpid());
	if (n < 0 || (size_t)n >= sizeof(line))
		return -EINVAL;
	/* written over the old line, then the rest cut: a reader never sees an empty file (pid
	 * 0, an owner gone), and the old line's tail it may see before the cut follows the new
	 * line's newline, where read_owner_state stops */
	if (pwrite(r->lock_fd, line, (size_t)n, 0) != n)
		return errno ? -errno : -EIO;
	return ftruncate(r->lock_fd, n) < 0 ? -errno : 0;
}

void ckpt_repo_check_unlock(int fd)
{
	if (fd >= 0)
		close(fd);
}

/*
 * Open the lock file and lock it: exclusively with REPO_EXCLUSIVE, else shared; a store another
 * process holds exclusively (a mounted one) is then opened read-only (REPO_RDONLY added to
 * *flags, r->mounted set). Returns 0 or -errno with a message in err.
 */
static int repo_lock(struct ckpt_repo *r, const char *root, int *flags, char *err, size_t errcap)
{
	char path[PATH_MAX];
	int rc;

	if (path_join(path, sizeof(path), root, "lock") < 0)
		return repo_path_too_long(root, err, errcap);
	r->lock_fd = ckpt_repo_openat(r, "lock", O_RDWR | ((*flags & REPO_CREATE) ? O_CREAT : 0),
				      0600);
	if (r->lock_fd == -ENOENT && !(*flags & REPO_CREATE)) {
		/* A store never mounted for writing has no lock file: read it as is. */
		r->lock_fd = ckpt_repo_openat(r, "lock", O_RDONLY, 0);
	}
	if (r->lock_fd < 0) {
		rc = r->lock_fd;
		r->lock_fd = -1;
		if (rc == -ELOOP || rc == -EPERM)
			return repo_name_err(root, "lock", rc, err, errcap);
		ckpt_msg(err, errcap, "cannot open '%s': %s%s", path, strerror(-rc),
		       rc == -ENOENT ? " (is this a ckptfs store?)" : "");
		return rc;
	}
	if (*flags & REPO_EXCLUSIVE)
		return repo_lock_exclusive(r, root, path, err, errcap);
	if (flock(r->lock_fd, LOCK_SH | LOCK_NB) < 0) {
		if (errno != EWOULDBLOCK) {
			rc = -errno;
			ckpt_msg(err, errcap, "cannot lock '%s': %s", path, strerror(-rc));
			return rc;
		}
		r->mounted = true;
		r->owner_pid = read_owner(r->lock_fd);
		*flags |= REPO_RDONLY;
		repo_wait_check(r, root);
	}
	return 0;
}

/*
 * Whether root/index.db is absent: missing, or 0 bytes, which SQLite would take for a new, empty
 * database. Returns 1, 0, or the -errno of lstat.
 */
static int repo_index_absent(const char *root)
{
	char path[PATH_MAX];
	struct stat sb;

	if (path_join(path, sizeof(path), root, REPO_INDEX_FILE) < 0)
		return -ENAMETOOLONG;
	if (lstat(path, &sb) < 0)
		return errno == ENOENT ? 1 : -errno;
	return sb.st_size == 0;
}

static int repo_first_chunk(const struct store_hash *h, uint64_t stored_size, void *arg)
{
	(void)h;
	(void)stored_size;
	(void)arg;
	return 1; /* one is enough: stop the walk */
}

/* Whether root's chunk directory holds a chunk file. Returns 1, 0 or -errno. */
static int repo_has_chunks(const char *root)
{
	struct store_opts so = { .read_only = true, .cache_bytes = 1 };
	struct store *st;
	int rc = store_open(root, &so, &st);

	if (rc < 0)
		return rc == -ENOENT ? 0 : rc;
	rc = store_chunk_foreach(st, repo_first_chunk, NULL);
	store_close(st);
	return rc;
}

/*
 * Refuse a store whose index is absent while it holds chunk files or an index backup: SQLite
 * would make a new empty index, the mount would serve nothing and a sweep would take every chunk
 * for an orphan. Returns 0 (index present, or a new store), -EUCLEAN with a message in err, or
 * -errno.
 */
static int repo_check_index_present(const char *root, char *err, size_t errcap)
{
	char bak[PATH_MAX];
	int absent = repo_index_absent(root), chunks;
	bool has_bak;

	if (absent <= 0)
		return absent;
	if (path_join(bak, sizeof(bak), root, REPO_BACKUP_FILE) < 0)
		return repo_path_too_long(root, err, errcap);
	has_bak = access(bak, F_OK) == 0;
	if ((chunks = repo_has_chunks(root)) < 0) {
		ckpt_msg(err, errcap, "cannot list the chunk files of store '%s': %s", root,
		       strerror(-chunks));
		return chunks;
	}
	if (!chunks && !has_bak)
		return 0; /* a new store */
	ckpt_msg(err, errcap, "the index of store '%s' (%s/" REPO_INDEX_FILE ") is missing or empty, "
	       "but the store holds %s; nothing was changed. If the file was moved, put it back; "
	       "otherwise, with the store unmounted, run 'ckptctl %s fsck --rebuild' (%s, and keeps "
	       "every chunk file it cannot place in %s/lost+found)", root, root,
	       chunks ? "chunk files" : "an index backup", root,
	       has_bak ? "it restores " REPO_BACKUP_FILE ", the copy made at the last clean unmount"
		       : "there is no backup, so it starts a new index", root);
	return -EUCLEAN;
}

/* Rename root/NAME (when it exists) to root/NAME.lost-TIME: kept, out of SQLite's way. */
static int repo_set_aside(const char *root, const char *name, const char *stamp)
{
	char from[PATH_MAX], to[PATH_MAX + 64];

	if (path_join(from, sizeof(from), root, name) < 0)
		return -ENAMETOOLONG;
	snprintf(to, sizeof(to), "%s.lost-%s", from, stamp);
	if (rename(from, to) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

/*
 * REPO_REBUILD with the index absent: put a whole copy of root/index.db.bak in its place (the
 * empty index.db, and a -wal and -shm that belong to no readable index, are renamed to
 * *.lost-TIME first, never deleted), setting r->rebuilt. Without a backup, r->rebuilt says a new
 * index is started. Returns 0 or -errno with a message in err; on failure nothing was replaced.
 */
static int repo_restore_backup(struct ckpt_repo *r, const char *root, char *err, size_t errcap)
{
	char bak[PATH_MAX], db[PATH_MAX], stamp[32], msg[256] = "";
	struct idx *bix = NULL;
	struct stat sb;
	time_t now = time(NULL);
	int rc;

	if (path_join(bak, sizeof(bak), root, REPO_BACKUP_FILE) < 0 ||
	    path_join(db, sizeof(db), root, REPO_INDEX_FILE) < 0)
		return repo_path_too_long(root, err, errcap);
	if (lstat(bak, &sb) < 0) {
		if (errno != ENOENT) {
			rc = -errno;
			ckpt_msg(err, errcap, "cannot read '%s': %s", bak, strerror(-rc));
			return rc;
		}
		r->rebuilt = REPO_REBUILT_NEW;
		return 0;
	}
	rc = idx_open(bak, IDX_RDONLY, getuid(), getgid(), ckpt_now_ns(), &bix);
	if (rc == 0)
		rc = idx_integrity(bix, true, msg, sizeof(msg));
	if (rc < 0) {
		ckpt_msg(err, errcap, "the index backup '%s' is not usable (%s); nothing was changed: "
		       "move it aside to start a new index", bak, msg[0] ? msg : strerror(-rc));
		idx_close(bix);
		return rc;
	}
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%S", gmtime(&now));
	if ((rc = repo_set_aside(root, REPO_INDEX_FILE, stamp)) < 0 ||
	    (rc = repo_set_aside(root, REPO_INDEX_FILE "-wal", stamp)) < 0 ||
	    (rc = repo_set_aside(root, REPO_INDEX_FILE "-shm", stamp)) < 0 ||
	    (rc = idx_backup(bix, db)) < 0) {
		ckpt_msg(err, errcap, "cannot restore '%s' to '%s': %s", bak, db, strerror(-rc));
		idx_close(bix);
		return rc;
	}
	idx_close(bix);
	r->rebuilt = REPO_REBUILT_FROM_BACKUP;
	r->backup_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
	return 0;
}

int ckpt_repo_backup_index(struct ckpt_repo *r)
{
	char path[PATH_MAX];

	if (path_join(path, sizeof(path), r->root, REPO_BACKUP_FILE) < 0)
		return -ENAMETOOLONG;
	return idx_backup(r->ix, path);
}

int ckpt_repo_open_reader(const struct ckpt_repo *r, struct idx **ret)
{
	char path[PATH_MAX];
	const char *name;
	int rc;

	if (path_join(path, sizeof(path), r->root, REPO_INDEX_FILE) < 0)
		return -ENAMETOOLONG;
	if ((rc = repo_check_names(r->dir_fd, REPO_INDEX_NAMES, &name)) < 0)
		return rc;
	return idx_open(path, IDX_RDONLY, getuid(), getgid(), ckpt_now_ns(), ret);
}

/*
 * Open root/index.db into r->ix (with REPO_SALVAGE, a damaged index leaves r->ix NULL and
 * r->index_err -EIO) and, with REPO_CHECK, check its integrity. Returns 0 or -errno with a
 * message in err.
 */
static int repo_open_index(struct ckpt_repo *r, const char *root, int flags, char *err,
			   size_t errcap)
{
	char path[PATH_MAX];
	int rc;

	if (path_join(path, sizeof(path), root, REPO_INDEX_FILE) < 0)
		return repo_path_too_long(root, err, errcap);
	rc = idx_open(path, (flags & REPO_RDONLY) ? IDX_RDONLY : 0, getuid(), getgid(),
		      ckpt_now_ns(), &r->ix);
	if (rc == -EIO && (flags & REPO_SALVAGE)) {
		r->index_err = rc; /* fsck salvages what it can */
	} else if (rc < 0) {
		ckpt_msg(err, errcap, "cannot open index '%s': %s%s%s%s%s", path, strerror(-rc),
		       rc == -EPROTO ? " (written by a newer ckptfs, or not a ckptfs index)"
				     : rc == -ENOENT ? " (is this a ckptfs store?)" : "",
		       rc == -EIO ? "; the index file is damaged: with the store unmounted, run "
				    "'ckptctl " : "",
		       rc == -EIO ? root : "", rc == -EIO ? " fsck' to rebuild it" : "");
		return rc;
	}
	if (r->ix && !(flags & REPO_RDONLY)) {
		/* SQLite creates it 0644; only the owner reads the index */
		int fd = ckpt_repo_openat(r, REPO_INDEX_FILE, O_RDONLY, 0);

		if (fd >= 0) {
			fchmod(fd, 0600);
			close(fd);
		}
	}
	if (r->ix && (flags & REPO_CHECK)) {
		char msg[256] = "";

		rc = idx_integrity(r->ix, true, msg, sizeof(msg));
		if (rc < 0) {
			ckpt_msg(err, errcap, "index '%s' is damaged (%s); nothing was changed: with "
			       "the store unmounted, run 'ckptctl %s fsck' to rebuild it from what "
			       "is still readable", path, rc == -EUCLEAN ? msg : strerror(-rc),
			       root);
			return rc;
		}
	}
	return 0;
}

int ckpt_repo_open(const char *root, int flags, const struct store_opts *sopts, char *err,
		   size_t errcap, struct ckpt_repo **ret)
{
	struct ckpt_repo *r;
	struct store_opts so = { 0 };
	int rc;

	r = calloc(1, sizeof(*r));
	if (!r || !(r->root = strdup(root))) {
		free(r);
		ckpt_msg(err, errcap, "out of memory");
		return -ENOMEM;
	}
	r->lock_fd = -1;
	r->dir_fd = -1;
	if (sopts)
		so = *sopts;

	if ((rc = repo_open_root(r, root, flags, err, errcap)) < 0 ||
	    (rc = repo_lock(r, root, &flags, err, errcap)) < 0)
		goto fail;
	/* a new store has no index yet (an absent one beside chunks is refused next) */
	r->fresh = (flags & REPO_CREATE) && !(flags & REPO_REBUILD) && repo_index_absent(root) == 1;
	if (!(flags & REPO_REBUILD))
		rc = repo_check_index_present(root, err, errcap);
	else if ((rc = repo_index_absent(root)) > 0)
		rc = repo_restore_backup(r, root, err, errcap);
	if (rc < 0 || (rc = repo_open_index(r, root, flags, err, errcap)) < 0)
		goto fail;
	so.read_only = (flags & REPO_RDONLY) != 0;
	rc = store_open(root, &so, &r->st);
	if (rc < 0) {
		ckpt_msg(err, errcap, "cannot open chunk store in '%s': %s", root, strerror(-rc));
		goto fail;
	}
	*ret = r;
	return 0;

fail:
	ckpt_repo_close(r);
	return rc;
}

int ckpt_repo_reserve(struct ckpt_repo *r)
{
	struct stat stt;
	int fd, rc;

	if (fstatat(r->dir_fd, "reserve", &stt, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISREG(stt.st_mode) && (uint64_t)stt.st_size == CKPT_RESERVE_BYTES)
		return 0;
	/* a fresh file (O_EXCL): never one that something else is linked to */
	if (unlinkat(r->dir_fd, "reserve.tmp", 0) < 0 && errno != ENOENT)
		return -errno;
	fd = ckpt_repo_openat(r, "reserve.tmp", O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (fd < 0)
		return fd;
	rc = -posix_fallocate(fd, 0, CKPT_RESERVE_BYTES);
	if (rc == 0 && fdatasync(fd) < 0)
		rc = -errno;
	close(fd);
	if (rc == 0 && renameat(r->dir_fd, "reserve.tmp", r->dir_fd, "reserve") < 0)
		rc = -errno;
	if (rc < 0)
		unlinkat(r->dir_fd, "reserve.tmp", 0);
	return rc;
}

bool ckpt_repo_release_reserve(struct ckpt_repo *r)
{
	return unlinkat(r->dir_fd, "reserve", 0) == 0;
}

int ckpt_repo_set_clean(struct ckpt_repo *r, bool clean)
{
	int fd, rc;

	if (!clean)
		return (unlinkat(r->dir_fd, "clean", 0) < 0 && errno != ENOENT) ? -errno : 0;
	fd = ckpt_repo_openat(r, "clean", O_WRONLY | O_CREAT, 0600);
	if (fd < 0)
		return fd;
	rc = fsync(fd) < 0 ? -errno : 0;
	close(fd);
	/* make the new directory entry durable */
	if (rc == 0 && fsync(r->dir_fd) < 0)
		rc = -errno;
	return rc;
}

int ckpt_repo_publish(const struct ckpt_repo *r, const char *name, const void *buf, size_t len)
{
	return ckpt_publish_at(r->dir_fd, name, buf, len, 0600);
}

int ckpt_publish_at(int dfd, const char *name, const void *buf, size_t len, mode_t mode)
{
	char tmp[NAME_MAX + 1];
	int fd, rc;

	if (!name || strchr(name, '/'))
		return -EINVAL;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", name) >= sizeof(tmp))
		return -ENAMETOOLONG;
	/* a fresh file, never a link or a file linked from elsewhere (ckptfs.h) */
	if (unlinkat(dfd, tmp, 0) < 0 && errno != ENOENT)
		return -errno;
	if ((fd = ckpt_openat_plain(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL, mode)) < 0)
		return fd;
	rc = store_write_all(fd, buf, len);
	if (rc == 0 && fdatasync(fd) < 0) /* whole before its name is */
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && renameat(dfd, tmp, dfd, name) < 0)
		rc = -errno;
	if (rc == 0 && fsync(dfd) < 0) /* the new name durable */
		rc = -errno;
	if (rc < 0)
		unlinkat(dfd, tmp, 0);
	return rc;
}

int ckpt_repo_upgrade_msg(const struct ckpt_repo *r, char *buf, size_t cap)
{
	int from = r->ix ? idx_opened_version(r->ix) : 0, now = IDX_SCHEMA_VERSION;

	if (from < 1 || from >= IDX_SCHEMA_VERSION)
		return 0;
	if (idx_schema_version(r->ix, &now) < 0)
		now = IDX_SCHEMA_VERSION;
	ckpt_msg(buf, cap, "upgraded the index of '%s' from schema version %d to %d; the index as "
		 "it was is kept as '%s/" REPO_INDEX_FILE ".v%d.bak' (an older ckptfs reads that "
		 "one only)", r->root, from, now, r->root, from);
	return 1;
}

struct sweep_ctx {
	struct ckpt_repo *r;
	struct store_hash *freed;
	size_t n, cap;
	uint64_t orphans;
	int err;
};

static bool sweep_release(const uint8_t hash[IDX_HASH_LEN], void *arg)
{
	struct sweep_ctx *c = arg;

	if (c->n == c->cap) {
		size_t ncap = c->cap ? 2 * c->cap : 64;
		struct store_hash *p = realloc(c->freed, ncap * sizeof(*p));

		if (!p) {
			c->err = -ENOMEM;
			return true;
		}
		c->freed = p;
		c->cap = ncap;
	}
	memcpy(c->freed[c->n++].b, hash, IDX_HASH_LEN);
	return true;
}

static int sweep_file(const struct store_hash *h, uint64_t stored_size, void *arg)
{
	struct sweep_ctx *c = arg;
	int rc = idx_chunk_exists(c->r->ix, h->b);

	if (rc < 0)
		return rc;
	if (rc == 0) {
		if (c->orphans > c->n)
			ckpt_fault("sweep-orphan");
		rc = store_chunk_delete(c->r->st, h);
		if (rc < 0 && rc != -ENOENT)
			return rc;
		c->orphans++;
	}
	return 0;
}

int ckpt_repo_sweep(struct ckpt_repo *r, uint64_t *ret_inodes, uint64_t *ret_chunks)
{
	struct sweep_ctx c = { .r = r };
	int rc, inodes;

	if ((rc = idx_begin(r->ix)) < 0)
		return rc;
	inodes = idx_recover(r->ix, sweep_release, &c);
	if (inodes < 0 || c.err < 0) {
		idx_rollback(r->ix);
		rc = inodes < 0 ? inodes : c.err;
		goto out;
	}
	if ((rc = idx_commit(r->ix)) < 0)
		goto out;
	if (c.n)
		ckpt_fault("sweep-after-commit");
	for (size_t i = 0; i < c.n; i++) {
		rc = store_chunk_delete(r->st, &c.freed[i]);
		if (rc < 0 && rc != -ENOENT)
			goto out;
	}
	c.orphans = c.n;
	rc = store_chunk_foreach(r->st, sweep_file, &c);
	if (rc < 0)
		goto out;
	if (ret_inodes)
		*ret_inodes = (uint64_t)inodes;
	if (ret_chunks)
		*ret_chunks = c.orphans;
	rc = 0;
out:
	free(c.freed);
	return rc;
}

/* sweep_hash_cmp - qsort and bsearch of struct store_hash by their bytes. */
static int sweep_hash_cmp(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(struct store_hash));
}

/* What ckpt_repo_sweep_preview counts. */
struct preview_ctx {
	struct ckpt_repo *r;
	const struct store_hash *freed; /* the rows idx_recover would release, sorted */
	size_t nfreed;
	uint64_t orphans;      /* chunk files the index does not know */
	uint64_t files, bytes; /* chunk files the sweep would delete, and their stored bytes */
	uint64_t left_files, left_bytes; /* and those it would keep */
};

/*
 * preview_file - store_chunk_foreach callback of ckpt_repo_sweep_preview: the sweep deletes a
 * chunk file whose row idx_recover releases (ckpt_repo_sweep's first loop) or whose hash the
 * index does not know (its sweep_file). Returns 0 or the -errno of idx_chunk_exists.
 */
static int preview_file(const struct store_hash *h, uint64_t stored_size, void *arg)
{
	struct preview_ctx *c = arg;
	int rc = 0;

	if (!c->nfreed || !bsearch(h, c->freed, c->nfreed, sizeof(*h), sweep_hash_cmp)) {
		rc = idx_chunk_exists(c->r->ix, h->b);
		if (rc < 0)
			return rc;
		if (rc == 0)
			c->orphans++;
	}
	if (rc == 0) {
		c->files++;
		c->bytes += stored_size;
	} else {
		c->left_files++;
		c->left_bytes += stored_size;
	}
	return 0;
}

int ckpt_repo_sweep_preview(struct ckpt_repo *r, struct ckpt_sweep_preview *ret)
{
	struct sweep_ctx c = { .r = r };
	struct preview_ctx p = { .r = r };
	int rc, inodes;

	/* the sweep's own rule (idx_recover), run and rolled back: what it would delete is then
	 * exactly what a sweep deletes, with no second copy of which inodes and rows are garbage */
	if ((rc = idx_begin(r->ix)) < 0)
		return rc;
	inodes = idx_recover(r->ix, sweep_release, &c);
	idx_rollback(r->ix);
	if (inodes < 0 || c.err < 0) {
		rc = inodes < 0 ? inodes : c.err;
		goto out;
	}
	if (c.n)
		qsort(c.freed, c.n, sizeof(*c.freed), sweep_hash_cmp);
	p.freed = c.freed;
	p.nfreed = c.n;
	rc = store_chunk_foreach(r->st, preview_file, &p);
	if (rc < 0)
		goto out;
	ret->inodes = (uint64_t)inodes;
	ret->chunks = c.n + p.orphans; /* as ckpt_repo_sweep counts: rows released, then orphans */
	ret->files = p.files;
	ret->bytes = p.bytes;
	ret->left_files = p.left_files;
	ret->left_bytes = p.left_bytes;
	rc = 0;
out:
	free(c.freed);
	return rc;
}

int ckpt_repo_mount_point(const struct ckpt_repo *r, char *buf, size_t cap)
{
	char state[LOCK_LINE_MAX], *mnt;
	unsigned maj, min;
	struct stat st;
	int n = 0;

	if (!r->mounted || r->lock_fd < 0)
		return -ENOENT;
	read_owner_state(r->lock_fd, state, sizeof(state));
	/* "mounted MAJ:MIN MOUNTPOINT" (invariant 3); the mount point as mountinfo escapes it */
	if (sscanf(state, "mounted %u:%u %n", &maj, &min, &n) != 2 || !n || !state[n])
		return -ENOENT;
	mnt = state + n;
	ckpt_mountinfo_unescape(mnt);
	if (strlen(mnt) >= cap)
		return -ENAMETOOLONG;
	/* the line is the daemon's view: the path must be that very mount in this process's
	 * mount namespace too */
	if (stat(mnt, &st) < 0 || major(st.st_dev) != maj || minor(st.st_dev) != min)
		return -ESTALE;
	snprintf(buf, cap, "%s", mnt);
	return 0;
}

void ckpt_repo_close(struct ckpt_repo *r)
{
	if (!r)
		return;
	store_close(r->st);
	idx_close(r->ix);
	if (r->lock_fd >= 0)
		close(r->lock_fd);
	if (r->dir_fd >= 0)
		close(r->dir_fd);
	free(r->root);
	free(r);
}
