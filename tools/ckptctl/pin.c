/*
 * pin.c — ckptctl pin STEP, unpin STEP: protect a complete step from retention, or stop; on a
 * mounted store through its daemon (live.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

static int pin_run(const char *root, const char *arg, bool pin, bool json)
{
	const char *verb = pin ? "pin" : "unpin";
	struct ckpt_repo *r = NULL;
	struct step_match m;
	const struct idx_step *s;
	char err[1024] = "";
	bool changed;
	int rc, status = EXIT_ERROR;

	memset(&m, 0, sizeof(m));
	rc = ckpt_repo_open(root, REPO_EXCLUSIVE, NULL, err, sizeof(err), &r);
	if (rc == -EBUSY) {
		/* who holds it: a daemon (mounted: ask it), or another ckptctl reading it */
		if (ckpt_repo_open(root, REPO_RDONLY, NULL, err, sizeof(err), &r) == 0 &&
		    r->mounted) {
			ckpt_repo_close(r);
			return ctl_daemon_request(root, verb, arg, json);
		}
		ctl_err("store '%s' is in use by another process; retry when it is done", root);
		ckpt_repo_close(r);
		return EXIT_ERROR;
	}
	if (rc < 0) {
		ctl_err("%s", err[0] ? err : strerror(-rc));
		return EXIT_ERROR;
	}
	rc = ctl_find_steps(r->ix, arg, &m);
	if (rc < 0) {
		status = ctl_index_err(root, "list steps", rc);
		goto out;
	}
	s = ctl_pick_step(&m);
	if (!s) {
		status = ctl_no_step(root, arg);
		goto out;
	}
	if (pin && s->state != IDX_STEP_COMPLETE) {
		ctl_err("step %" PRId64 " ('%s', id %" PRId64 ") is %s; only complete steps can be "
			"pinned",
			s->step, s->name, s->id, idx_step_state_name(s->state));
		goto out;
	}
	changed = s->pinned != pin;
	if (changed) {
		rc = idx_begin(r->ix);
		if (rc == 0)
			rc = idx_step_set_pinned(r->ix, s->id, pin);
		if (rc == 0)
			rc = idx_commit(r->ix);
		else
			idx_rollback(r->ix);
		if (rc < 0) {
			status = ctl_index_err(root, pin ? "pin a step" : "unpin a step", rc);
			goto out;
		}
	}
	if (json) {
		json_t *o = json_object();

		json_object_set_new(o, "id", json_integer(s->id));
		json_object_set_new(o, "step", json_integer(s->step));
		json_object_set_new(o, "name", policy_json_name(s->name));
		json_object_set_new(o, "state", json_string(idx_step_state_name(s->state)));
		json_object_set_new(o, "pinned", json_boolean(pin));
		json_object_set_new(o, "changed", json_boolean(changed));
		if (ctl_print("ckptfs-pin/1", o) < 0)
			goto out;
	} else {
		char q[CTL_QUOTE_CAP(IDX_STEP_NAME_MAX)];

		printf("%s step %" PRId64 " ('%s', id %" PRId64 ")%s\n", pin ? "pinned" : "unpinned",
		       s->step, ctl_quote(s->name, q, sizeof(q)), s->id,
		       changed ? "" : pin ? " (it was already pinned)" : " (it was not pinned)");
	}
	status = EXIT_OK;
out:
	free(m.found.v);
	ckpt_repo_close(r);
	return status;
}

int cmd_pin(const struct ctl_opts *o)
{
	return pin_run(o->root, o->argv[0], o->cmd[0] == 'p', o->json);
}
