/*
 * ckptfs.h — the ckptfs daemon's public interface: opening a STORE directory (ownership lock,
 * index, chunk store) for the daemon and for ckptctl, and the daemon's entry point.
 *
 * A STORE directory holds:
 *   STORE/lock      the ownership lock: the daemon holds flock(LOCK_EX) for its lifetime and
 *                   writes its pid (decimal, newline) into it; ckptctl takes LOCK_SH to read
 *                   while unmounted, or only probes it while mounted
 *   STORE/index.db  the SQLite index (index/)
 *   STORE/chunks/   chunk files (store/)
 *   STORE/clean     present only between a clean unmount and the next mount; its absence at
 *                   mount means the previous daemon died, and recovery sweeps orphans
 *   STORE/ckptfs.log  the daemon's log when it runs in the background (not under systemd),
 *                   rotated to ckptfs.log.1 .. ckptfs.log.3 (fs/core/log.c)
 *   STORE/recovery.json  the last mount that recovered from an unclean stop or set a step
 *                   aside (fs/steps/steps_report.c), for ckptctl status
 *   STORE/check, STORE/reserve, STORE/staging/, STORE/remote.json  see their functions
 *
 * Every name in STORE is opened relative to the directory fd ckpt_repo_open took (dir_fd),
 * without following a symbolic link (O_NOFOLLOW), and a file ckptfs opens there must be a plain
 * file: the owner of STORE can plant anything in it, and a root daemon that followed
 * STORE/lock -> /etc/passwd would write its pid there. (A hard link to another user's file is
 * kept out by the kernel's fs.protected_hardlinks, on by default; a store backed up with cp -al
 * has every file linked twice, so the link count is not checked.) SQLite opens index.db by path;
 * ckpt_repo_open checks that neither it nor its -wal, -shm and -journal files is a link. That
 * check and the open are two steps, so a store owned by another user is refused (REPO_FOREIGN
 * lifts this: its owner is then trusted not to race the daemon).
 *
 * Thread-safety: a struct ckpt_repo is used by one thread at a time, except ->st (store/ is
 * thread-safe); the daemon serialises index access itself.
 */
#ifndef CKPTFS_CKPTFS_H
#define CKPTFS_CKPTFS_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "index/index.h"
#include "store/store.h"

/* STORE/recovery.json: the last mount that recovered from an unclean stop or set a step aside
 * (written by fs/steps/steps_report.c, read by ckptctl status) */
#define CKPT_RECOVERY_FILE "recovery.json"

/* ckpt_repo_open flags */
#define REPO_CREATE 0x1    /* create STORE (mode 0700) and the index if absent */
#define REPO_EXCLUSIVE 0x2 /* take the ownership lock exclusively (the daemon, ckptctl gc) */
#define REPO_RDONLY 0x4    /* open index and store read-only */
#define REPO_CHECK 0x8     /* refuse a damaged index file (PRAGMA quick_check): -EUCLEAN */
#define REPO_SALVAGE 0x10  /* REPO_EXCLUSIVE, for fsck: an index that cannot be opened (-EIO)
			    * leaves ix NULL and index_err set instead of failing */
#define REPO_REBUILD 0x20  /* REPO_EXCLUSIVE, for fsck --rebuild: an absent index (missing or
			    * 0 bytes) is restored from STORE/index.db.bak, or started anew when
			    * there is none (r->rebuilt says which) instead of being refused */

/* What REPO_REBUILD did (struct ckpt_repo.rebuilt). */
enum repo_rebuilt {
	REPO_REBUILT_NONE,        /* the index was there */
	REPO_REBUILT_FROM_BACKUP, /* restored from index.db.bak (its mtime in backup_ns) */
	REPO_REBUILT_NEW,         /* no backup: a new, empty index */
};
#define REPO_FOREIGN 0x40  /* accept a STORE owned by another user for a writing open */

struct ckpt_repo {
	char *root;          /* owned: STORE path as given */
	int dir_fd;          /* STORE itself, O_DIRECTORY: every name in it is opened from here */
	int lock_fd;         /* STORE/lock, holding the lock taken */
	bool mounted;        /* another process (pid owner_pid) holds the exclusive lock */
	pid_t owner_pid;     /* daemon pid when mounted, else 0 */
	bool was_clean;      /* REPO_EXCLUSIVE: STORE/clean existed (previous stop was clean) */
	bool fresh;          /* REPO_CREATE: the store had no index before this open (new) */
	pid_t prev_pid;      /* REPO_EXCLUSIVE: the pid STORE/lock named before this open (the
			      * previous owner: a daemon, or a ckptctl gc or fsck), 0 if none */
	struct idx *ix;      /* owned; NULL only with REPO_SALVAGE when index_err < 0 */
	int index_err;       /* REPO_SALVAGE: idx_open's error, else 0 */
	enum repo_rebuilt rebuilt; /* REPO_REBUILD: what was done to an absent index */
	int64_t backup_ns;   /* REPO_REBUILT_FROM_BACKUP: the backup's mtime, ns since the epoch */
	struct store *st;    /* owned */
};

/*
 * ckpt_repo_open - open the STORE directory root.
 * @flags: REPO_* bits. Without REPO_EXCLUSIVE the open succeeds while a daemon owns the store
 *         (ret->mounted is then true and the handles are read-only whatever REPO_RDONLY says).
 * @sopts: store options (may be NULL).
 * @err, @errcap: on failure, one lowercase line saying what happened and what to do.
 * @ret: owned handle, released with ckpt_repo_close.
 * Refuses a STORE that group or others can write (-EPERM); for an open that may write
 * (REPO_EXCLUSIVE, or no REPO_RDONLY), a STORE whose owner is not the effective uid, unless
 * REPO_FOREIGN (-EPERM); a STORE in which a name ckptfs uses (lock, index.db, chunks, ...) is a
 * symbolic link (-ELOOP) or a file ckptfs writes has more than one link or is not a plain file
 * (-EPERM); and a STORE that does not exist without REPO_CREATE (-ENOENT).
 * With REPO_EXCLUSIVE, a lock whose holder is gone or exiting (a daemon just SIGKILLed, whose
 * last thread still holds it for 1-2 s; a ckptctl reading) is waited for, up to 30 s, polling
 * every 20 ms; so is a daemon whose mount is gone and which is finishing its writes (it has
 * called ckpt_repo_set_mount(r, NULL), or the mount it named there is gone from its
 * /proc/PID/mountinfo, as between `fusermount3 -u` returning and its session loop ending), up
 * to 60 s, saying so in one line on stderr. Any other live owner (a daemon still mounted, one
 * starting, a ckptctl gc) is refused at once. Without it, on a mounted store, waits as long as
 * the daemon's check of the newest step runs (ckpt_repo_check_lock), saying so on stderr.
 * An absent index (STORE/index.db missing or 0 bytes) in a store that holds chunk files or an
 * index backup is refused (-EUCLEAN, the message naming 'ckptctl STORE fsck --rebuild'), in
 * every mode but REPO_REBUILD: opening it would create an empty index that names none of them.
 * Returns 0; -ENOENT; -ENOTDIR; -EPERM; -ELOOP (a name in STORE is a symbolic link); -EBUSY
 * (REPO_EXCLUSIVE and a live process owns it, or
 * a wait ran out);
 * -EUCLEAN (REPO_CHECK and the index file is damaged; or the index is absent, as above);
 * -EPROTO (index from a newer ckptfs or not a ckptfs index); -EIO; -ENOMEM; other -errno of
 * mkdir/open.
 */
int ckpt_repo_open(const char *root, int flags, const struct store_opts *sopts, char *err,
		   size_t errcap, struct ckpt_repo **ret);

/*
 * ckpt_repo_check_lock - the daemon (REPO_EXCLUSIVE): lock STORE/check exclusively (flock(2);
 * created 0600 if absent) for as long as the mount's check of the newest step runs after the
 * mount is up (fs/steps/steps.c start_checker). ckpt_repo_open of a mounted store waits until
 * it is unlocked, so what ckptctl reads is what the mount serves. Returns the lock's fd (>= 0),
 * to give to ckpt_repo_check_unlock, or -errno: the check then runs with nothing waiting for it.
 * Thread-safe: touches nothing in r but r->dir_fd.
 */
int ckpt_repo_check_lock(struct ckpt_repo *r);
/* ckpt_repo_check_unlock - release (close) the lock fd ckpt_repo_check_lock returned; < 0: no-op. */
void ckpt_repo_check_unlock(int fd);

/*
 * ckpt_msg - format a one-line message for the user into buf (cap bytes, truncated to fit,
 * always NUL-terminated when cap > 0); buf NULL or cap 0: nothing. The err/msg out-parameters
 * of this module and of the layers above are filled with it. Thread-safe.
 */
void ckpt_msg(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * ckpt_paths_check - refuse STORE and MOUNTPOINT paths that would lose or hide data, before
 * anything is created or mounted: equal or nested in either direction (after realpath(3); a
 * store that does not exist yet is resolved through its parent), a mountpoint that is not empty
 * unless nonempty, and a non-empty STORE directory that holds none of a store's files (an empty
 * filesystem's lost+found aside). Reads only.
 * @err, @cap: on refusal, one lowercase line saying what is wrong and what to do.
 * Returns 0; -EINVAL (overlap); -ENOTEMPTY (the mountpoint, or a non-store STORE, is not
 * empty); -ENOENT (the mountpoint, or the store's parent, does not exist); other -errno of
 * realpath, opendir or readdir. Thread-safe.
 */
int ckpt_paths_check(const char *store, const char *mnt, bool nonempty, char *err, size_t cap);

/*
 * ckpt_control_addr - the address of the control socket of the daemon that mounts store (a
 * socket in Linux's abstract namespace, unix(7), named after the store directory's device and
 * inode, so a store path of any length has one and no file is left behind): the daemon listens
 * there (fs/fuse/control.c), ckptctl connects there to manage steps while mounted.
 * Returns 0 (*ret and *ret_len, the length to give bind/connect), or the -errno of stat(store).
 * Thread-safe.
 */
struct sockaddr_un;
int ckpt_control_addr(const char *store, struct sockaddr_un *ret, socklen_t *ret_len);

/*
 * ckpt_repo_backup_index - REPO_EXCLUSIVE, with nothing left to commit (the daemon at a clean
 * unmount): copy the index to STORE/index.db.bak (idx_backup: temp file, fsync, rename), which
 * 'ckptctl fsck --rebuild' restores when index.db is lost. Returns 0 or the -errno of idx_backup;
 * the previous backup is kept on failure. Not thread-safe against other users of r->ix.
 */
int ckpt_repo_backup_index(struct ckpt_repo *r);

/*
 * ckpt_repo_set_mount - the daemon (REPO_EXCLUSIVE): record in STORE/lock, next to its pid,
 * whether it serves a mount, so that ckpt_repo_open(REPO_EXCLUSIVE) of the same store can tell
 * a daemon still mounted (refused) from one only finishing its writes (waited for).
 * @id: the mount, once it is mounted: "MAJ:MIN MOUNTPOINT", fields 3 and 5 of its line in
 *      /proc/self/mountinfo (proc(5)) as they are there (escapes included); NULL once the mount
 *      is gone (after the session loop, or a failed start).
 * Returns 0; -EINVAL (id too long for the line, PATH_MAX + 64 bytes in all); -errno of
 * pwrite/ftruncate (nothing else breaks: an opener then refuses the store, or waits for the
 * lock as for a process exiting).
 * Not durable (no fsync): the line means something only while the lock is held.
 * Not thread-safe against another call on r; callers make it from the main thread.
 */
int ckpt_repo_set_mount(struct ckpt_repo *r, const char *id);

/*
 * ckpt_repo_set_clean - REPO_EXCLUSIVE only: mark (clean = true, durable) or unmark the store as
 * cleanly stopped. Returns 0 or -errno.
 */
int ckpt_repo_set_clean(struct ckpt_repo *r, bool clean);

/*
 * ckpt_repo_sweep - recovery after an unclean stop (REPO_EXCLUSIVE, writable): delete inodes left
 * unlinked-but-open, chunk rows no file uses, and chunk files the index does not know.
 * @ret_inodes, @ret_chunks: counts removed (may be NULL).
 * Returns 0 or -errno (index or store failure; nothing half-done is visible: rows are removed in
 * one transaction, files only after it commits).
 */
int ckpt_repo_sweep(struct ckpt_repo *r, uint64_t *ret_inodes, uint64_t *ret_chunks);

/* What ckpt_repo_sweep would remove, and what it would leave. */
struct ckpt_sweep_preview {
	uint64_t inodes;     /* inodes it would delete (its *ret_inodes) */
	uint64_t chunks;     /* chunks it would remove (its *ret_chunks): chunk rows released,
				whether their file is there or not, and chunk files no row names */
	uint64_t files;      /* chunk files on disk it would delete */
	uint64_t bytes;      /* their stored bytes (file sizes, headers included) */
	uint64_t left_files; /* chunk files on disk it would keep */
	uint64_t left_bytes; /* their stored bytes */
};

/*
 * ckpt_repo_sweep_preview - what ckpt_repo_sweep would remove from r now, removing nothing:
 * idx_recover runs inside a transaction that is rolled back, then every chunk file is walked
 * once (store_chunk_foreach). REPO_EXCLUSIVE and writable, as ckpt_repo_sweep: the rolled-back
 * transaction changes no row, and with the lock held nothing else changes the store between the
 * preview and a sweep that follows it.
 * @ret: filled on success, untouched on failure.
 * Returns 0, -EROFS (r is read-only), -ENOMEM, or the -errno of the index or of a failed
 * readdir of the chunk directory. Not thread-safe against other users of r->ix.
 */
int ckpt_repo_sweep_preview(struct ckpt_repo *r, struct ckpt_sweep_preview *ret);

/*
 * ckpt_repo_mount_point - where the daemon that owns r serves its mount: the MOUNTPOINT of the
 * "PID mounted MAJ:MIN MOUNTPOINT" line it keeps in STORE/lock (core/repo.c invariant 3), its
 * mountinfo escapes undone (ckpt_mountinfo_unescape), checked to be that mount in this
 * process's mount namespace as well (stat(2) of it gives device MAJ:MIN).
 * @buf: receives the path as the daemon's mountinfo shows it (absolute), NUL-terminated; cap
 *       bytes. Untouched on failure.
 * Returns 0; -ENOENT (r->mounted is false, or its daemon serves no mount at this moment:
 * starting, or finishing its writes after an unmount); -ESTALE (no such mount at that path in
 * this process's view: another mount namespace, or it is gone); -ENAMETOOLONG (cap too small).
 * Reads only (pread of r->lock_fd). Thread-safe.
 */
int ckpt_repo_mount_point(const struct ckpt_repo *r, char *buf, size_t cap);

/*
 * CKPT_RESERVE_BYTES - size of STORE/reserve, space held back so that a full disk can still be
 * emptied: deleting files writes the index (SQLite WAL pages), and on a disk with no free byte
 * that fails with ENOSPC, leaving the user unable to free anything. 8 MiB covers the WAL of
 * removing thousands of files (a WAL frame is one 4 KiB page plus 24 bytes; sqlite.org/wal.html).
 */
/*
 * The largest file size ckptfs takes: 16 TiB - 4 KiB, ext4's limit with 4 KiB blocks
 * (ext4_max_size in the kernel's fs/ext4/super.c; measured: ftruncate to 2^44 - 4096 succeeds
 * and 2^44 - 4095 is EFBIG on this machine's ext4), because the staging file of an
 * out-of-order writer lives on the store's filesystem. A larger size, by truncate, fallocate or
 * a write, is EFBIG at once.
 */
#define CKPTFS_MAX_FILE_SIZE ((1ULL << 44) - 4096)

#define CKPT_RESERVE_BYTES (8ULL << 20)

/*
 * ckpt_repo_reserve - make STORE/reserve hold CKPT_RESERVE_BYTES allocated bytes (posix_fallocate
 * on a temporary file, fdatasync, rename); a no-op when it already does.
 * Returns 0; -ENOSPC (not enough free space: no reserve is left behind); other -errno.
 * Not thread-safe against itself: the daemon calls it under fs->mu.
 */
int ckpt_repo_reserve(struct ckpt_repo *r);

/*
 * ckpt_repo_release_reserve - delete STORE/reserve, giving its space back to the disk so that a
 * removal which failed with ENOSPC can be retried. Returns true if a reserve was released.
 */
bool ckpt_repo_release_reserve(struct ckpt_repo *r);

/*
 * ckpt_repo_open_reader - a second, read-only handle on r's index (STORE/index.db) for a thread
 * that reads without the lock that guards r->ix (the daemon's /.ckptfs/status figures). SQLite's
 * WAL lets it read while r->ix writes; it sees what r->ix has committed.
 * @ret: owned, released with idx_close (before ckpt_repo_close, so that r->ix's close is the
 * last one and removes the WAL).
 * Returns 0, -ENAMETOOLONG, -ELOOP (index.db or one of its -wal, -shm, -journal files is now a
 * symbolic link), -EPERM (one is not a plain file), or idx_open's errors (-ENOENT, -EPROTO,
 * -EIO, -EBUSY, -ENOMEM, -EACCES). Thread-safety: touches no state of r but root and dir_fd.
 */
int ckpt_repo_open_reader(const struct ckpt_repo *r, struct idx **ret);

/*
 * ckpt_repo_openat - open the file name at the top of STORE (a plain name such as "ckptfs.log")
 * without following a link: openat(r->dir_fd, name, flags | O_NOFOLLOW | O_CLOEXEC, mode), then
 * refuse what is not a plain file (a FIFO or a device; the open does not block on a FIFO).
 * @flags: open(2) flags; O_CREAT with @mode (permission bits) creates the file.
 * Returns an owned fd (close(2) it); -ELOOP (name is a symbolic link); -EPERM (not a plain
 * file); other -errno of openat, fstat or fcntl. Thread-safe.
 */
int ckpt_repo_openat(const struct ckpt_repo *r, const char *name, int flags, mode_t mode);

/*
 * ckpt_openat_plain - ckpt_repo_openat on a directory descriptor (dir_fd, borrowed) instead of a
 * struct ckpt_repo, for a module that keeps its own descriptor of STORE (the log). Same flags,
 * returns and errors. Thread-safe.
 */
int ckpt_openat_plain(int dir_fd, const char *name, int flags, mode_t mode);

/*
 * ckpt_repo_publish - replace the file name at the top of STORE (a plain name) with buf[0, len)
 * atomically and durably: ckpt_publish_at(STORE, name, buf, len, 0600).
 */
int ckpt_repo_publish(const struct ckpt_repo *r, const char *name, const void *buf, size_t len);

/*
 * ckpt_publish_at - the one durable publish: replace the file @name (a plain name, no '/') in the
 * directory @dfd with buf[0, len) atomically and durably. A fresh NAME.tmp (@mode, O_EXCL, never
 * through a link, any stale one removed first) is written, fdatasync'd, renamed over name, and
 * the directory fsync'd; on failure the temp file is removed and the old file kept.
 * Returns 0, -EINVAL (a '/' in name), -ENAMETOOLONG, or -errno of unlinkat, openat (-ELOOP,
 * -EPERM as ckpt_openat_plain), write, fdatasync, close, renameat or fsync.
 * Thread-safe for distinct names in one directory.
 */
int ckpt_publish_at(int dfd, const char *name, const void *buf, size_t len, mode_t mode);

/*
 * ckpt_repo_upgrade_msg - when ckpt_repo_open upgraded the index (idx_opened_version below
 * IDX_SCHEMA_VERSION; the old index copied to STORE/index.db.vN.bak first), the one line that
 * says so, with both versions and the copy's path, into buf (cap bytes). Returns 1 (upgraded,
 * buf set) or 0 (buf untouched). Thread-safety: as r->ix (one thread at a time).
 */
int ckpt_repo_upgrade_msg(const struct ckpt_repo *r, char *buf, size_t cap);

/* ckpt_repo_close - close index and store, release the lock, free; NULL accepted. */
void ckpt_repo_close(struct ckpt_repo *r);

/* ckpt_now_ns - CLOCK_REALTIME in nanoseconds since the epoch. */
int64_t ckpt_now_ns(void);
/* ckpt_mono_ns - CLOCK_MONOTONIC in nanoseconds, for durations. Any thread. */
int64_t ckpt_mono_ns(void);

/*
 * fs_main - the daemon: parse argv, open STORE, mount, serve until unmounted.
 * Returns the process exit status (0 success, 1 failure).
 */
int fs_main(int argc, char **argv);

/*
 * ckpt_fault_init - arm the crash points named by the environment variable CKPTFS_FAULT
 * ("point[:n]" items, comma-separated: SIGKILL this process the n-th time, default 1, a point is
 * reached; "point[:n]@ms": sleep ms milliseconds, 1..1000000, the n-th time it is reached, or
 * every time without :n; the points are listed in fs/core/fault.c). Call once, before any
 * thread starts.
 * @err, @errcap: on -EINVAL, one line naming the bad item and listing the valid points.
 * Returns 0 (also when CKPTFS_FAULT is unset or empty) or -EINVAL.
 */
int ckpt_fault_init(char *err, size_t errcap);

/*
 * ckpt_fault - crash point @point (a name listed in fs/core/fault.c): if a delay is armed for it,
 * log one line and sleep the calling thread; then, if armed for this hit, write one line to
 * stderr and SIGKILL the process; otherwise return at once. Thread-safe.
 */
void ckpt_fault(const char *point);

/*
 * ckpt_extents_pread - read len bytes at offset off of a committed file from its extents ext[n]
 * (idx_file_extents order: ascending, non-overlapping; gaps are holes and read as zeros), each
 * chunk verified by store_chunk_pread. The caller asks within the file's size: bytes past the
 * last extent are its trailing hole (zeros). buf, ext borrowed for the call. Thread-safe as the
 * store is.
 * Returns len, or -EIO (a chunk shorter than its extent), or store_chunk_pread's -errno
 * (-EBADMSG a chunk failed its checksum, -ENOENT a chunk file is missing, -ENOMEM).
 */
ssize_t ckpt_extents_pread(struct store *st, const struct idx_extent *ext, size_t n, void *buf,
			   size_t len, uint64_t off);

/*
 * ckpt_log - write one line "ckptfs: MESSAGE" (printf format; the newline is added when fmt does
 * not end with one; lines over 8 KiB are cut) where ckpt_log_to_store, ckpt_log_to_journal or
 * ckpt_log_stamped sent the log: to stderr as it is until one of them is called (the messages
 * a command prints to its user), else preceded by an ISO 8601 UTC timestamp with milliseconds
 * ("2026-12-02T06:10:00.123Z ckptfs: ...") except on the journal. The daemon's only logging
 * helper: lowercase, no final period, names in quotes (STYLE.md). Thread-safe: one write(2) per
 * line under the log's lock, so lines of several threads never interleave or cross a rotation.
 */
void ckpt_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ckpt_logv - ckpt_log of (fmt, ap), for a foreign log callback (libfuse's). Thread-safe. */
void ckpt_logv(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/*
 * The store log's cap (bytes) and how many rotated files are kept beside it: a line that would
 * take STORE/ckptfs.log past the cap first renames ckptfs.log.N-1 to .N, ..., ckptfs.log to
 * ckptfs.log.1 (the oldest dropped) and starts a new ckptfs.log. At most (1 + KEEP) x MAX bytes
 * of log in a store of checkpoints many times that: a year of a job's step lines, not a disk.
 * CKPTFS_LOG_MAX=BYTES in the environment sets another cap, for the tests (not documented for
 * users).
 */
#define CKPT_LOG_MAX_BYTES ((uint64_t)16 << 20)
#define CKPT_LOG_KEEP 3

/*
 * ckpt_log_journal_stream - whether stderr is the stream systemd gave this process: the
 * environment's JOURNAL_STREAM ("DEV:INODE", systemd.exec(5)) names fd 2's device and inode.
 * Checking the inode (not only the variable) keeps a daemon started from a shell inside a
 * systemd session, whose stderr is redirected, off the journal. Thread-safe.
 */
bool ckpt_log_journal_stream(void);

/*
 * ckpt_log_to_journal - from now on, lines go to stderr without a timestamp of their own: journald
 * stamps each line as it receives it (journalctl -o short-iso-precise shows it to the
 * microsecond), and a second stamp in the message would only differ from it. Call before any
 * thread logs. Thread-safety: none (startup).
 */
void ckpt_log_to_journal(void);

/*
 * ckpt_log_stamped - from now on, lines go to stderr with their timestamp (a daemon in the
 * foreground: stderr is its log). Call before any thread logs. Thread-safety: none (startup).
 */
void ckpt_log_stamped(void);

/*
 * ckpt_log_to_store - from now on, lines go to STORE/ckptfs.log, opened (created 0600, appended
 * to) relative to r->dir_fd without following a link (ckpt_openat_plain), with their timestamp,
 * and rotated at the cap (CKPT_LOG_MAX_BYTES, CKPT_LOG_KEEP); the file is also made the process's
 * stderr (dup2 onto fd 2, again after each rotation), so what libraries or a sanitizer write
 * there lands in the same log. The log keeps a descriptor of its own of STORE (dup of
 * r->dir_fd): r may be closed before the last line. Call before any thread logs.
 * Returns 0; -ELOOP (ckptfs.log is a symbolic link); -EPERM (not a plain file); other -errno of
 * openat, fstat, fcntl or dup. On failure nothing changes: lines still go to stderr.
 * Thread-safety: none (startup); the rotation it arms is thread-safe.
 */
int ckpt_log_to_store(const struct ckpt_repo *r);

/*
 * A limit on the log lines of one cause (a peer that aborts connections by the thousand must
 * not fill the disk with the log): at most burst lines per window_ns; the lines held back are
 * counted and said in one line when the next window opens. Initialise with
 * CKPT_RATELIMIT_INIT(window seconds, burst) in static storage, one per cause.
 */
struct ckpt_ratelimit {
	pthread_mutex_t mu;
	int64_t window_ns;
	unsigned burst;
	int64_t start_ns;    /* CLOCK_MONOTONIC start of the current window */
	unsigned n;          /* lines written in it */
	unsigned long held;  /* lines held back since the last one written */
};
#define CKPT_RATELIMIT_INIT(window_s, lines)                                                    \
	{ PTHREAD_MUTEX_INITIALIZER, (int64_t)(window_s) * 1000000000, (lines), 0, 0, 0 }

/*
 * ckpt_logv_limited - ckpt_log of (fmt, ap) unless rl's window already holds its burst (then
 * only counted); the first line of a new window is preceded by "(N lines like the next one held
 * back)" when some were. Thread-safe.
 */
void ckpt_logv_limited(struct ckpt_ratelimit *rl, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

/*
 * Process facts from /proc (core/proc.c). Any thread, no lock.
 * ckpt_pid_flags - the flags field of /proc/PID/stat (PF_* bits) into *ret. Returns 0, -EIO when
 * the file cannot be parsed, or open(2)'s or pread(2)'s -errno (-ENOENT: no such process). Keeps
 * the file of the last pid it read open in the calling thread (one descriptor a thread, closed
 * when the thread exits; dropped when the process is reaped), read again at each call.
 * ckpt_tgid_of - the process (thread group) of thread tid: FUSE requests carry the calling
 * thread's id, and a trainer's helper thread may exit while its process goes on writing.
 * Returns the tgid, or 0 when unknown (tid <= 0, gone, unreadable).
 * ckpt_pid_stat - state (proc(5) field 3) and start time (field 22, clock ticks since boot) of
 * process pid into *ret_state, *ret_start. Returns 0, -EIO (unparsable), or fopen's -errno.
 * ckpt_pid_alive - is the process that had this pid and start time still running (not a zombie)?
 */
int ckpt_pid_flags(pid_t pid, unsigned long *ret);
pid_t ckpt_tgid_of(pid_t tid);
int ckpt_pid_stat(pid_t pid, char *ret_state, unsigned long long *ret_start);
bool ckpt_pid_alive(pid_t pid, unsigned long long start);

/*
 * ckpt_mountinfo_unescape - undo, in place, the octal escapes of a field of
 * /proc/PID/mountinfo (proc(5): space, tab, newline and backslash are written as \ooo, three
 * octal digits); s is NUL-terminated and only shrinks. No errors. Reentrant.
 */
void ckpt_mountinfo_unescape(char *s);

/*
 * ckpt_grow - make room for one more element in the array *vp (*cap elements of elem bytes, n in
 * use, n <= *cap), doubling it (16 at first). Returns 0, or -ENOMEM with the array unchanged.
 * *vp is owned by the caller (free()). Thread-safe (touches only its arguments).
 */
int ckpt_grow(void *vp, size_t *cap, size_t n, size_t elem);

/*
 * A latency histogram (core/hist.c) in Prometheus's shape: CKPT_HIST_BUCKETS upper bounds in
 * seconds, from 5 ms to 30 min (ckpt_hist_bound(i), i < CKPT_HIST_BUCKETS; the bounds are
 * Prometheus's default buckets extended for minute-long saves), plus +Inf. Zero-initialised
 * is empty. Lock-free: any thread may observe while another reads.
 * ckpt_hist_observe - count one duration of ns nanoseconds (negative counts as 0).
 * ckpt_hist_read - cumulative counts (cumulative[i]: observations <= bound i;
 * cumulative[CKPT_HIST_BUCKETS]: all, the +Inf bucket and _count) and the sum in seconds. A
 * read racing an observe may see the count without the sum or the reverse (one observation).
 */
#define CKPT_HIST_BUCKETS 15
struct ckpt_hist {
	_Atomic uint64_t bucket[CKPT_HIST_BUCKETS + 1]; /* not cumulative; last: above all bounds */
	_Atomic uint64_t sum_ns;
};
double ckpt_hist_bound(size_t i);
void ckpt_hist_observe(struct ckpt_hist *h, int64_t ns);
void ckpt_hist_read(struct ckpt_hist *h, uint64_t cumulative[CKPT_HIST_BUCKETS + 1],
		    double *ret_sum_s);

#endif /* CKPTFS_CKPTFS_H */
