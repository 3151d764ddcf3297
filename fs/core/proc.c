/*
 * proc.c — process facts from /proc (proc(5)): thread group, state, start time, flags.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

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

/*
 * State and start time (clock ticks since boot) of process pid, from /proc/PID/stat (proc(5):
 * field 3 state, field 22 starttime). Returns 0 or -errno.
 */
int ckpt_pid_stat(pid_t pid, char *ret_state, unsigned long long *ret_start)
{
	char path[64], buf[1024];
	unsigned long long start;
	char state;
	size_t n;
	FILE *f;
	char *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "re")))
		return -errno;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	if (!(p = strrchr(buf, ')')) ||
	    sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
			  "%*d %*d %llu", &state, &start) != 2)
		return -EIO;
	*ret_state = state;
	*ret_start = start;
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

int ckpt_pid_flags(pid_t pid, unsigned long *ret)
{
	char path[64], buf[1024];
	FILE *f;
	size_t n;
	char *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* fields after "(comm)": state ppid pgrp session tty_nr tpgid flags (proc(5)) */
	p = strrchr(buf, ')');
	if (!p)
		return -EIO;
	unsigned long flags;
	if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) != 1)
		return -EIO;
	*ret = flags;
	return 0;
}
