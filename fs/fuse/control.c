/*
 * control.c — the daemon's control socket: `ckptctl STORE pin|unpin|drop|rollback STEP` on a
 * mounted store. The daemon alone writes a store it owns (fs/core/repo.c invariant 1), so
 * ckptctl asks it, over a Unix stream socket in the abstract namespace (ckpt_control_addr),
 * instead of writing the index itself.
 *
 * Protocol: one connection, one request, one answer, each one line:
 *   request  "VERB ARG\n"   VERB: pin, unpin, drop, rollback; ARG: a step (steps_ctl_*)
 *   answer   "ok MESSAGE\n" or "error MESSAGE\n"
 * Only the daemon's own user and root are answered (SO_PEERCRED): the abstract namespace has no
 * file permissions. A peer that sends nothing is dropped after CONTROL_TIMEOUT_S.
 *
 * One thread serves the requests one after another; each takes fs->mu through steps_ctl_*.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "fs/fuse/fuse_int.h"
#include "fs/steps/steps.h"

/* Seconds a peer may take to send its request line: a person's ckptctl sends it at once. */
#define CONTROL_TIMEOUT_S 5

/* Longest request line, bytes: a verb and a step directory name (NAME_MAX). */
#define CONTROL_LINE_MAX 512

struct fs_control {
	struct ckfs *fs;
	int fd;
	pthread_t th;
	_Atomic bool stop;
};

/* Read one line (without its '\n') into buf. Returns its length, or -1. */
static ssize_t read_line(int fd, char *buf, size_t cap)
{
	size_t n = 0;

	while (n + 1 < cap) {
		ssize_t r = read(fd, buf + n, cap - 1 - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		n += (size_t)r;
		char *nl = memchr(buf, '\n', n);

		if (nl) {
			*nl = '\0';
			return nl - buf;
		}
	}
	return -1;
}

static void serve_one(struct fs_control *c, int fd)
{
	char line[CONTROL_LINE_MAX], msg[1024], out[1100];
	struct timeval tv = { CONTROL_TIMEOUT_S, 0 };
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int rc = -1;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
	    (cred.uid != 0 && cred.uid != geteuid())) {
		snprintf(msg, sizeof(msg), "only the store's owner (uid %u) or root may manage its "
			 "steps", (unsigned)geteuid());
	} else if (read_line(fd, line, sizeof(line)) < 0) {
		snprintf(msg, sizeof(msg), "no request line within %d s", CONTROL_TIMEOUT_S);
	} else {
		char *arg = strchr(line, ' ');

		if (arg)
			*arg++ = '\0';
		if (!arg || !*arg)
			snprintf(msg, sizeof(msg), "a request is 'VERB STEP'");
		else if (!strcmp(line, "pin") || !strcmp(line, "unpin"))
			rc = steps_ctl_pin(c->fs, arg, !strcmp(line, "pin"), msg, sizeof(msg));
		else if (!strcmp(line, "drop"))
			rc = steps_ctl_drop(c->fs, arg, msg, sizeof(msg));
		else if (!strcmp(line, "rollback"))
			rc = steps_ctl_rollback(c->fs, arg, msg, sizeof(msg));
		else
			snprintf(msg, sizeof(msg), "unknown request '%s'", line);
		if (rc == 0)
			ckpt_log("control: %s %s: %s", line, arg, msg);
	}
	int n = snprintf(out, sizeof(out), "%s %s\n", rc == 0 ? "ok" : "error", msg);

	if (n > 0 && write(fd, out, (size_t)n < sizeof(out) ? (size_t)n : sizeof(out) - 1) < 0)
		ckpt_log("control: cannot answer a request: %s", strerror(errno));
}

static void *control_main(void *arg)
{
	struct fs_control *c = arg;

	for (;;) {
		int fd = accept4(c->fd, NULL, NULL, SOCK_CLOEXEC);

		if (atomic_load(&c->stop)) {
			if (fd >= 0)
				close(fd);
			break;
		}
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			ckpt_log("control: accept: %s; ckptctl can no longer manage steps while "
				 "mounted", strerror(errno));
			break;
		}
		serve_one(c, fd);
		close(fd);
	}
	return NULL;
}

struct fs_control *fs_control_start(struct ckfs *fs, const char *store, char *err, size_t cap)
{
	struct fs_control *c = calloc(1, sizeof(*c));
	struct sockaddr_un sa;
	socklen_t salen;
	int rc;

	if (!c) {
		snprintf(err, cap, "out of memory");
		return NULL;
	}
	c->fs = fs;
	if ((rc = ckpt_control_addr(store, &sa, &salen)) < 0) {
		snprintf(err, cap, "cannot stat '%s': %s", store, strerror(-rc));
		goto fail;
	}
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0 || bind(c->fd, (struct sockaddr *)&sa, salen) < 0 || listen(c->fd, 8) < 0) {
		snprintf(err, cap, "cannot listen on the control socket: %s", strerror(errno));
		goto fail;
	}
	if ((rc = pthread_create(&c->th, NULL, control_main, c)) != 0) {
		snprintf(err, cap, "cannot start the control thread: %s", strerror(rc));
		goto fail;
	}
	return c;
fail:
	if (c->fd >= 0)
		close(c->fd);
	free(c);
	return NULL;
}

void fs_control_stop(struct fs_control *c)
{
	if (!c)
		return;
	atomic_store(&c->stop, true);
	shutdown(c->fd, SHUT_RDWR); /* accept4 returns at once */
	pthread_join(c->th, NULL);
	close(c->fd);
	free(c);
}
