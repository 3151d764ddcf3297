/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of fs/core/proc.c on real processes: /proc/PID/stat read with open(2) and read(2)
 * and split by hand (ckpt_pid_flags runs at every flush of a written file, through a descriptor
 * each thread keeps open: read again, and failing once the process is reaped). The expected values
 * come from the same file parsed independently here with sscanf, as proc.c did before, and from
 * what the kernel must say of a process the test itself made a zombie.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "fs/ckptfs.h"

/* state, flags and starttime of pid by proc(5)'s scanf format: the reference. */
static void ref_stat(pid_t pid, char *state, unsigned long *flags, unsigned long long *start)
{
	char path[64], buf[1024];
	size_t n;
	FILE *f;
	char *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	cr_assert_not_null(p);
	cr_assert_eq(sscanf(p + 1, " %c %*d %*d %*d %*d %*d %lu %*u %*u %*u %*u %*u %*u %*d %*d %*d "
				   "%*d %*d %*d %llu", state, flags, start), 3, "%s", buf);
}

Test(proc, own_process)
{
	char st, ref_st;
	unsigned long flags, ref_flags;
	unsigned long long start, ref_start;

	cr_assert_eq(ckpt_pid_stat(getpid(), &st, &start), 0);
	cr_assert_eq(ckpt_pid_flags(getpid(), &flags), 0);
	ref_stat(getpid(), &ref_st, &ref_flags, &ref_start);
	cr_assert_eq(st, 'R');
	cr_assert_eq(start, ref_start);
	cr_assert_eq(flags, ref_flags);
	cr_assert_eq(flags & 0x4UL, 0, "PF_EXITING set on a running process");
	cr_assert(ckpt_pid_alive(getpid(), start));
	cr_assert_not(ckpt_pid_alive(getpid(), start + 1), "another start time: another process");
}

/* A comm with spaces and parentheses: the fields start after the last ")". A zombie is not
 * alive; a reaped pid is -ENOENT. */
Test(proc, comm_with_parens_zombie_and_reaped)
{
	int go[2], ready[2];
	char st, c = 0;
	unsigned long flags, ref_flags;
	unsigned long long start, ref_start;
	char ref_st;
	pid_t pid;

	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(ready), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(go[1]); /* a failed test's exit closes the last write end: no orphan */
		close(ready[0]);
		prctl(PR_SET_NAME, "a) b (c) 7 8", 0, 0, 0);
		(void)!write(ready[1], "r", 1);
		(void)!read(go[0], &c, 1);
		_exit(0);
	}
	close(go[0]);
	close(ready[1]);
	cr_assert_eq(read(ready[0], &c, 1), 1);
	cr_assert_eq(ckpt_pid_stat(pid, &st, &start), 0);
	cr_assert_eq(ckpt_pid_flags(pid, &flags), 0);
	ref_stat(pid, &ref_st, &ref_flags, &ref_start);
	cr_assert_eq(start, ref_start);
	cr_assert_eq(flags, ref_flags);
	cr_assert_eq(st, ref_st);
	cr_assert(ckpt_pid_alive(pid, start));
	cr_assert_eq(write(go[1], "g", 1), 1);
	/* the child exits; unreaped, it stays a zombie */
	for (int i = 0; i < 500 && !(ckpt_pid_stat(pid, &st, &start) == 0 && st == 'Z'); i++)
		usleep(10000);
	cr_assert_eq(st, 'Z');
	cr_assert_not(ckpt_pid_alive(pid, start));
	/* read again through the descriptor this thread kept from the read above: the kernel
	 * renders the file anew, the zombie's PF_EXITING in it */
	cr_assert_eq(ckpt_pid_flags(pid, &flags), 0);
	cr_assert_neq(flags & 0x4UL, 0, "PF_EXITING not set on a zombie: a stale rendering");
	cr_assert_eq(waitpid(pid, NULL, 0), pid);
	cr_assert_eq(ckpt_pid_stat(pid, &st, &start), -ENOENT);
	cr_assert_eq(ckpt_pid_flags(pid, &flags), -ENOENT);
	cr_assert_not(ckpt_pid_alive(pid, start));
}
