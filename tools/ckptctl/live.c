/*
 * live.c — requests to the daemon of a mounted store (its control socket, fs/fuse/control.c):
 * ckptctl pin and unpin while mounted, drop STEP and rollback STEP.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl.h"

int ctl_daemon_request(const char *root, const char *verb, const char *arg, bool json)
{
	char req[1024], ans[1200];
	struct sockaddr_un sa;
	socklen_t salen;
	size_t n = 0;
	int fd, rc, len;

	if (strchr(arg, '\n')) {
		ctl_err("a step name has no newline");
		return EXIT_ERROR;
	}
	if ((rc = ckpt_control_addr(root, &sa, &salen)) < 0) {
		ctl_err("cannot use store '%s': %s", root, strerror(-rc));
		return EXIT_ERROR;
	}
	len = snprintf(req, sizeof(req), "%s %s\n", verb, arg);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, salen) < 0) {
		ctl_err("cannot reach the daemon of store '%s' (%s): is it mounted by a ckptfs that "
			"has a control socket? '%s/ckptfs.log' says", root, strerror(errno), root);
		if (fd >= 0)
			close(fd);
		return EXIT_ERROR;
	}
	if (len < 0 || (size_t)len >= sizeof(req) || write(fd, req, (size_t)len) != len) {
		ctl_err("cannot send the request to the daemon of store '%s'", root);
		close(fd);
		return EXIT_ERROR;
	}
	for (;;) {
		ssize_t r = read(fd, ans + n, sizeof(ans) - 1 - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
		if (n == sizeof(ans) - 1)
			break;
	}
	close(fd);
	ans[n] = '\0';
	if (n && ans[n - 1] == '\n')
		ans[n - 1] = '\0';
	bool ok = strncmp(ans, "ok ", 3) == 0;
	const char *msg = ok ? ans + 3 : strncmp(ans, "error ", 6) == 0 ? ans + 6 : ans;

	if (!ok) {
		ctl_err("%s", msg[0] ? msg : "the daemon gave no answer");
		return EXIT_ERROR;
	}
	if (json) {
		json_t *o = json_object();

		json_object_set_new(o, "request", json_string(verb));
		json_object_set_new(o, "step", policy_json_name(arg));
		json_object_set_new(o, "message", json_string(msg));
		return ctl_print("ckptfs-request/1", o) < 0 ? EXIT_ERROR : EXIT_OK;
	}
	printf("%s\n", msg);
	return EXIT_OK;
}

/* drop and rollback go through the daemon: the store must be mounted. */
static int live_only(const struct ctl_opts *o)
{
	struct ckpt_repo *r = NULL;
	bool mounted;

	if (ctl_open_read(o->root, &r) < 0)
		return EXIT_ERROR;
	mounted = r->mounted;
	ckpt_repo_close(r);
	if (!mounted) {
		ctl_err("'%s' works through the daemon of a mounted store, and store '%s' is not "
			"mounted: mount it, then run it again", o->cmd, o->root);
		return EXIT_ERROR;
	}
	return ctl_daemon_request(o->root, o->cmd, o->argv[0], o->json);
}

int cmd_drop(const struct ctl_opts *o)
{
	return live_only(o);
}

int cmd_rollback(const struct ctl_opts *o)
{
	return live_only(o);
}
