/*
 * proc.c — process facts from /proc (proc(5)): thread group, state, start time, flags, and the
 * escapes of mountinfo fields.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/ckptfs.h"

/*
 * The process (thread group) of a thread: FUSE requests carry the calling thread's id, and a
 * trainer's helper thread may exit while its process goes on writing. 0 when unknown.
 */
pid_t ckpt_tgid_of(pid_t tid)
{
	char path[64], line[128];
	pid_t tgid = 0;
	FILE *f;

	if (tid <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	if (!(f = fopen(path, "re")))
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Tgid: %d", &tgid) == 1)
			break;
	fclose(f);
	return tgid;
}

/* The n bytes read into buf ended; *ret_rest past the ")" ending comm. 0 or -EIO. */
static int stat_rest(char *buf, ssize_t n, const char **ret_rest)
{
	const char *p;

	buf[n] = 0;
	if (!(p = strrchr(buf, ')')))
		return -EIO;
	*ret_rest = p + 1;
	return 0;
}

/*
 * /proc/PID/stat into buf (cap bytes, NUL-terminated); *ret_rest points just past the ")" that
 * ends its comm field, which may itself hold spaces and parentheses (proc(5)). open(2) and
 * read(2), not stdio: ckpt_pid_flags runs at every flush of a written file, where fopen, fread,
 * fclose and sscanf were 3.7% of the daemon's samples in a run of small files (RESULTS.md "The
 * committer lingers 1 ms; a flush reads /proc without stdio"). Returns 0 or -errno (-EIO: not
 * the format of proc(5)).
 */
static int read_stat(pid_t pid, char *buf, size_t cap, const char **ret_rest)
{
	char path[32];
	ssize_t n;
	int fd, e;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -errno;
	n = read(fd, buf, cap - 1); /* the kernel renders the whole file at the first read */
	e = errno;
	close(fd);
	if (n < 0)
		return -e;
	return stat_rest(buf, n, ret_rest);
}

/*
 * The start of field k of /proc/PID/stat counted after comm (1: state, 7: flags, 20: starttime;
 * proc(5) numbers them 3, 9 and 22), or NULL if the line is shorter.
 */
static const char *stat_field(const char *rest, int k)
{
	const char *p = rest;

	for (int i = 1;; i++) {
		while (*p == ' ')
			p++;
		if (!*p || *p == '\n')
			return NULL;
		if (i == k)
			return p;
		while (*p && *p != ' ')
			p++;
	}
}

/* Field k (as stat_field) as an unsigned number into *ret. 0 or -EIO. */
static int stat_ull(const char *rest, int k, unsigned long long *ret)
{
	const char *p = stat_field(rest, k);
	char *end;

	if (!p || *p < '0' || *p > '9')
		return -EIO;
	errno = 0;
	*ret = strtoull(p, &end, 10);
	return errno || (*end != ' ' && *end != '\n' && *end) ? -EIO : 0;
}

/*
 * State and start time (clock ticks since boot) of process pid, from /proc/PID/stat (proc(5):
 * field 3 state, field 22 starttime). Returns 0 or -errno.
 */
int ckpt_pid_stat(pid_t pid, char *ret_state, unsigned long long *ret_start)
{
	char buf[1024];
	const char *rest, *st;
	int rc;

	if ((rc = read_stat(pid, buf, sizeof(buf), &rest)) < 0)
		return rc;
	if (!(st = stat_field(rest, 1)) || (rc = stat_ull(rest, 20, ret_start)) < 0)
		return -EIO;
	*ret_state = *st;
	return 0;
}

/* Is the process that had this pid and start time still running (not a zombie)? */
bool ckpt_pid_alive(pid_t pid, unsigned long long start)
{
	unsigned long long now_start;
	char state;

	if (ckpt_pid_stat(pid, &state, &now_start) < 0)
		return false;
	return now_start == start && state != 'Z' && state != 'X';
}

/*
 * The /proc/PID/stat a thread read last, kept open: ckpt_pid_flags runs at every flush of a
 * written file, nearly always for the pid of the flush before, and its open(2) and close(2) were
 * two thirds of its 16 us a flush (RESULTS.md "Five runs of one build"). A descriptor of
 * /proc/PID/stat stays bound to the process it was opened for: once that process is reaped its
 * read fails with ESRCH (fs/proc/base.c proc_single_show), never rendering a new process that
 * reuses the number, and the file is then opened again by number. One per thread (a pthread
 * key; closed when the thread exits), so no lock.
 */
struct stat_fd {
	pid_t pid;
	int fd;
};

static pthread_key_t stat_fd_key;
static pthread_once_t stat_fd_once = PTHREAD_ONCE_INIT;
static bool stat_fd_ok;

static void stat_fd_free(void *p)
{
	struct stat_fd *c = p;

	close(c->fd);
	free(c);
}

static void stat_fd_init(void)
{
	stat_fd_ok = pthread_key_create(&stat_fd_key, stat_fd_free) == 0;
}

/* read_stat through this thread's kept descriptor; the same returns. */
static int read_stat_kept(pid_t pid, char *buf, size_t cap, const char **ret_rest)
{
	struct stat_fd *c;
	char path[32];
	ssize_t n = -1;

	pthread_once(&stat_fd_once, stat_fd_init);
	if (!stat_fd_ok)
		return read_stat(pid, buf, cap, ret_rest);
	c = pthread_getspecific(stat_fd_key);
	if (c && c->pid == pid)
		n = pread(c->fd, buf, cap - 1, 0);
	if (n < 0) {
		int fd;

		if (c) { /* another pid, or the process read last is gone */
			pthread_setspecific(stat_fd_key, NULL);
			stat_fd_free(c);
			c = NULL;
		}
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			return -errno;
		if ((n = pread(fd, buf, cap - 1, 0)) < 0) {
			int e = errno;

			close(fd);
			return -e;
		}
		if ((c = malloc(sizeof(*c))) && pthread_setspecific(stat_fd_key, c) == 0) {
			c->pid = pid;
			c->fd = fd;
		} else {
			free(c);
			close(fd);
		}
	}
	return stat_rest(buf, n, ret_rest);
}

int ckpt_pid_flags(pid_t pid, unsigned long *ret)
{
	unsigned long long flags;
	const char *rest;
	char buf[1024];
	int rc;

	/* fields after "(comm)": state ppid pgrp session tty_nr tpgid flags (proc(5)) */
	if ((rc = read_stat_kept(pid, buf, sizeof(buf), &rest)) < 0 ||
	    (rc = stat_ull(rest, 7, &flags)) < 0)
		return rc;
	*ret = (unsigned long)flags;
	return 0;
}

void ckpt_mountinfo_unescape(char *s)
{
	char *w = s;

	for (const char *r = s; *r; r++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
}
