/* SPDX-License-Identifier: MIT */
/*
 * log.c — the daemon's one logging helper (STYLE.md: fs/ logs once, at the boundary), and
 * where its lines go.
 *
 * Sinks (struct log_state.sink), chosen once at startup by the daemon (fs/fuse/daemon.c):
 *     LOG_PLAIN    stderr, no timestamp: before any choice, the messages a command (ckptfs
 *                  before it daemonizes, ckptctl) prints to its user
 *     LOG_JOURNAL  stderr, no timestamp: systemd's journal stream (journald stamps lines)
 *     LOG_STAMPED  stderr, timestamped: a daemon in the foreground
 *     LOG_FILE     STORE/ckptfs.log, timestamped, rotated at the cap
 *
 * Invariants:
 *   1. One line is one write(2), made with lg.mu held: lines never interleave, and a rotation
 *      (which holds lg.mu) never splits one.
 *   2. LOG_FILE: lg.fd is STORE/ckptfs.log, opened through lg.dir_fd without following a link,
 *      and fd 2 is the same open file; lg.size is its size as this process wrote it.
 *   3. LOG_FILE: a line is written to a file of at most lg.cap bytes before it, unless the file
 *      was empty (a line longer than the cap is written whole, to a file of its own).
 */
#include "fs/ckptfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* a log line longer than this is cut (a path is at most PATH_MAX) */
#define CKPT_LOG_LINE 8192

void ckpt_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ckpt_logv(fmt, ap);
	va_end(ap);
}

void ckpt_logv_limited(struct ckpt_ratelimit *rl, const char *fmt, va_list ap)
{
	struct timespec ts;
	unsigned long held = 0;
	bool write = false;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;

	pthread_mutex_lock(&rl->mu);
	if (rl->start_ns == 0 || now - rl->start_ns >= rl->window_ns) {
		rl->start_ns = now;
		rl->n = 0;
	}
	if (rl->n < rl->burst) {
		rl->n++;
		write = true;
		held = rl->held;
		rl->held = 0;
	} else {
		rl->held++;
	}
	pthread_mutex_unlock(&rl->mu);
	if (!write)
		return;
	if (held)
		ckpt_log("(%lu lines like the next one held back)", held);
	ckpt_logv(fmt, ap);
}

enum log_sink { LOG_PLAIN, LOG_JOURNAL, LOG_STAMPED, LOG_FILE };

#define LOG_NAME "ckptfs.log"

static struct {
	pthread_mutex_t mu; /* guards every field below (a leaf: nothing is taken under it) */
	enum log_sink sink;
	int dir_fd;         /* LOG_FILE: owned descriptor of STORE */
	int fd;             /* LOG_FILE: owned descriptor of STORE/ckptfs.log */
	uint64_t size;      /* LOG_FILE: bytes in it (invariant 2) */
	uint64_t cap;       /* LOG_FILE: rotate before a line would take it past this */
} lg = { PTHREAD_MUTEX_INITIALIZER, LOG_PLAIN, -1, -1, 0, CKPT_LOG_MAX_BYTES };

bool ckpt_log_journal_stream(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) < 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void ckpt_log_to_journal(void)
{
	lg.sink = LOG_JOURNAL;
}

void ckpt_log_stamped(void)
{
	lg.sink = LOG_STAMPED;
}

/* Open STORE/ckptfs.log for appending (0600) and make it fd 2 too. Returns the fd or -errno. */
static int log_open(int dir_fd, uint64_t *ret_size)
{
	struct stat st;
	int fd = ckpt_openat_plain(dir_fd, LOG_NAME, O_WRONLY | O_CREAT | O_APPEND, 0600);

	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0 || dup2(fd, STDERR_FILENO) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	*ret_size = (uint64_t)st.st_size;
	return fd;
}

int ckpt_log_to_store(const struct ckpt_repo *r)
{
	const char *e = getenv("CKPTFS_LOG_MAX");
	uint64_t size = 0;
	int dfd, fd;

	if ((dfd = fcntl(r->dir_fd, F_DUPFD_CLOEXEC, 3)) < 0)
		return -errno;
	if ((fd = log_open(dfd, &size)) < 0) {
		close(dfd);
		return fd;
	}
	lg.dir_fd = dfd;
	lg.fd = fd;
	lg.size = size;
	if (e && *e) {
		char *end;
		unsigned long long v = strtoull(e, &end, 10);

		if (!*end && v >= 256)
			lg.cap = v;
	}
	lg.sink = LOG_FILE;
	return 0;
}

/*
 * Rotate (lg.mu held): ckptfs.log.N-1 -> .N, ..., ckptfs.log -> .1, a new ckptfs.log. Renames
 * through lg.dir_fd move a planted link itself, never its target. On any failure the log goes on
 * in the file it has (a full disk must not silence the daemon).
 */
static void log_rotate(void)
{
	char from[32], to[32];
	uint64_t size = 0;
	int fd;

	for (int i = CKPT_LOG_KEEP; i > 1; i--) {
		snprintf(from, sizeof(from), LOG_NAME ".%d", i - 1);
		snprintf(to, sizeof(to), LOG_NAME ".%d", i);
		if (renameat(lg.dir_fd, from, lg.dir_fd, to) < 0 && errno != ENOENT)
			return;
	}
	if (renameat(lg.dir_fd, LOG_NAME, lg.dir_fd, LOG_NAME ".1") < 0)
		return;
	if ((fd = log_open(lg.dir_fd, &size)) < 0)
		return; /* the renamed file, still open, takes the lines */
	close(lg.fd);
	lg.fd = fd;
	lg.size = size;
}

/* "2026-12-02T06:10:00.123Z " (UTC) into buf (cap >= 32 bytes). Returns its length. */
static int log_stamp(char *buf, size_t cap)
{
	struct timespec ts;
	struct tm tm;
	size_t n;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
	return (int)n + snprintf(buf + n, cap - n, ".%03ldZ ", ts.tv_nsec / 1000000);
}

void ckpt_logv(const char *fmt, va_list ap)
{
	char line[CKPT_LOG_LINE + 48];
	size_t n = 0, room;
	int len;

	pthread_mutex_lock(&lg.mu);
	if (lg.sink == LOG_STAMPED || lg.sink == LOG_FILE)
		n = (size_t)log_stamp(line, sizeof(line));
	n += (size_t)snprintf(line + n, sizeof(line) - n, "ckptfs: ");
	room = sizeof(line) - n - 1; /* the newline */
	len = vsnprintf(line + n, room, fmt, ap);
	if (len < 0) {
		pthread_mutex_unlock(&lg.mu);
		return;
	}
	n += (size_t)len < room ? (size_t)len : room - 1;
	if (line[n - 1] != '\n')
		line[n++] = '\n';
	if (lg.sink == LOG_FILE) {
		if (lg.size > 0 && lg.size + n > lg.cap)
			log_rotate();
		ssize_t w = write(lg.fd, line, n);

		if (w > 0)
			lg.size += (uint64_t)w;
	} else if (write(STDERR_FILENO, line, n) < 0) {
		/* nowhere left to say it */
	}
	pthread_mutex_unlock(&lg.mu);
}
