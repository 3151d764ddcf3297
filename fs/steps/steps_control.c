/*
 * steps_control.c — steps managed while training runs: pin, unpin, drop and rollback, asked for
 * by `ckptctl` through the daemon's control socket (fs/fuse/control.c), so they need no unmount.
 *
 * Each command names a step as ckptctl's STEP does (a step number, or a step directory name),
 * runs under fs->mu in one index transaction, and answers one line for the person who asked.
 *
 * Locking: every function here takes fs->mu itself (the control thread holds nothing).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/steps/steps.h"
#include "fs/policy/layout.h"
#include "fs/policy/policy.h"
#include "fs/steps/steps_int.h"

struct ctl_find {
	struct ckfs *fs;
	const char *arg;
	int64_t number; /* arg as a step number, or -1 */
	struct idx_step best;
	bool best_home; /* best is the version at the step's name */
	unsigned n;     /* steps matched, pruned ones left out */
	struct idx_step left; /* the newest pruned version matched whose directory is kept: one
			       * renamed away by hand (policy rule 6); id 0 when none */
};

/* Is version s of a step the one at the step's name (not kept in retained, not set aside)? */
static bool at_home(struct ckfs *fs, const struct idx_step *s)
{
	const char *leaf;
	uint64_t home, cur;

	return s->dir_ino && steps_step_home(fs, s->name, &home, &leaf) == 0 &&
	       idx_dentry_lookup(fs->ix, home, leaf, &cur) == 0 && cur == s->dir_ino;
}

static int find_cb(const struct idx_step *s, void *arg)
{
	struct ctl_find *f = arg;
	bool home;

	if (strcmp(s->name, f->arg) != 0 && (f->number < 0 || s->step != f->number))
		return 0;
	if (s->state == IDX_STEP_PRUNED) {
		if (s->dir_ino && s->id > f->left.id)
			f->left = *s;
		return 0;
	}
	home = at_home(f->fs, s);
	/* one step saved more than once (a kept version and its new one, a rewrite set aside):
	 * the version at its name answers, what a resume reads; else the newest row */
	if (f->n == 0 || strcmp(f->best.name, s->name) != 0 || f->best.kind != s->kind) {
		f->n++;
	} else if (f->best_home && !home) {
		return 0;
	} else if (home == f->best_home && s->id < f->best.id) {
		return 0;
	}
	f->best = *s;
	f->best_home = home;
	return 0;
}

/* The one step arg names (not pruned) into *ret. Returns 0, or -1 with the answer in msg. */
static int find_step(struct ckfs *fs, const char *arg, struct idx_step *ret, char *msg, size_t cap)
{
	struct ctl_find f = { .fs = fs, .arg = arg, .number = -1 };
	char *end;
	long long v = strtoll(arg, &end, 10);

	if (*arg && !*end && v >= 0)
		f.number = v;
	if (idx_step_foreach(fs->ix, find_cb, &f) < 0) {
		ckpt_msg(msg, cap, "cannot read the step table");
		return -1;
	}
	char where[LAYOUT_PATH_MAX];

	if (f.n == 0 && f.left.id && steps_rel_path(fs, f.left.dir_ino, where, sizeof(where)) == 0) {
		/* what a user who renamed the step away needs: where it is, and how it comes back */
		ckpt_msg(msg, cap, "step '%s' left the lineage: its directory was renamed to '%s'; "
		       "rename it back to '%s' to make it a step again", f.left.name, where,
		       f.left.name);
		return -1;
	}
	if (f.n == 0) {
		ckpt_msg(msg, cap, "no step '%s' (a step number or a step directory name; see "
		       "'ckptctl STORE steps')", arg);
		return -1;
	}
	if (f.n > 1) {
		ckpt_msg(msg, cap, "'%s' names %u steps; give the step directory name", arg, f.n);
		return -1;
	}
	*ret = f.best;
	return 0;
}

int steps_ctl_pin(struct ckfs *fs, const char *arg, bool pin, char *msg, size_t cap)
{
	struct idx_step s;
	int rc = -1;

	fs_lock(fs);
	if (find_step(fs, arg, &s, msg, cap) < 0)
		goto out;
	if (pin && s.state != IDX_STEP_COMPLETE) {
		ckpt_msg(msg, cap, "step '%s' is %s; only complete steps can be pinned", s.name,
		       idx_step_state_name(s.state));
		goto out;
	}
	if (s.pinned != pin && (idx_begin(fs->ix) < 0 || idx_step_set_pinned(fs->ix, s.id, pin) < 0 ||
				idx_commit(fs->ix) < 0)) {
		idx_rollback(fs->ix);
		ckpt_msg(msg, cap, "cannot record the pin of step '%s' in the index", s.name);
		goto out;
	}
	ckpt_msg(msg, cap, "step '%s' %s", s.name, pin ? "pinned: retention keeps it" :
		       "unpinned: retention counts it again");
	if (!pin && s.pinned)
		steps_retention(fs, s.kind); /* it may be beyond keep_checkpoint_max now */
	rc = 0;
out:
	fs_unlock(fs);
	return rc;
}

/* Whether step s is what a tracker of a layout sharing its kind names now. */
static bool named_by_tracker(struct ckfs *fs, const struct idx_step *s)
{
	for (int k = 1; k < LAYOUT_KIND_COUNT; k++) {
		char buf[LAYOUT_TRACKER_MAX];
		struct idx_step t;

		if (layout_tracker_shared((enum layout_kind)k, (enum layout_kind)s->kind) &&
		    steps_tracker_content(fs, k, buf, sizeof(buf), &t) >= 0 && t.id == s->id)
			return true;
	}
	return false;
}

int steps_ctl_drop(struct ckfs *fs, const char *arg, char *msg, size_t cap)
{
	struct ino_freed fr = { 0 };
	struct idx_step s;
	int rc = -1;
	bool ok;

	fs_lock(fs);
	if (find_step(fs, arg, &s, msg, cap) < 0)
		goto out;
	if (s.state == IDX_STEP_WRITING || s.state == IDX_STEP_SEALED) {
		ckpt_msg(msg, cap, "step '%s' is being written (%s); drop it once it is judged",
		       s.name, idx_step_state_name(s.state));
		goto out;
	}
	if (s.pinned) {
		ckpt_msg(msg, cap, "step '%s' is pinned; unpin it first", s.name);
		goto out;
	}
	if (s.state == IDX_STEP_COMPLETE && named_by_tracker(fs, &s)) {
		ckpt_msg(msg, cap, "step '%s' is what the tracker names, the step a resume loads; "
		       "roll back to another step first ('ckptctl STORE rollback STEP')", s.name);
		goto out;
	}
	if (idx_begin(fs->ix) < 0) {
		ckpt_msg(msg, cap, "cannot write the index");
		goto out;
	}
	ok = steps_drop_tree(fs, &s, &fr) == 0 &&
	     (!layout_desc(s.kind)->per_rank || steps_mf1_drop_files(fs, &s, &fr) == 0) &&
	     steps_set_state(fs, &s, IDX_STEP_PRUNED, "dropped (ckptctl drop)") == 0;
	ok = ok && idx_commit(fs->ix) == 0;
	if (!ok)
		idx_rollback(fs->ix);
	ino_release_finish(fs, &fr, ok);
	if (!ok) {
		ckpt_msg(msg, cap, "cannot drop step '%s': the index refused the change", s.name);
		goto out;
	}
	ckpt_msg(msg, cap, "step '%s' dropped; its chunks no other step uses are freed", s.name);
	rc = 0;
out:
	fs_unlock(fs);
	return rc;
}

int steps_ctl_rollback(struct ckfs *fs, const char *arg, char *msg, size_t cap)
{
	char tracker[LAYOUT_PATH_MAX], content[LAYOUT_TRACKER_MAX];
	struct layout_tracker t = { .epoch = -1 };
	struct idx_step s;
	int n, rc = -1;

	fs_lock(fs);
	if (find_step(fs, arg, &s, msg, cap) < 0)
		goto out;
	if (s.state != IDX_STEP_COMPLETE) {
		ckpt_msg(msg, cap, "step '%s' is %s; only a complete step can be rolled back to",
		       s.name, idx_step_state_name(s.state));
		goto out;
	}
	t.step = s.step;
	if (layout_desc(s.kind)->tracker != LAYOUT_TRACKER_ROOT ||
	    layout_tracker_path((enum layout_kind)s.kind, s.step, -1, tracker, sizeof(tracker)) < 0 ||
	    (n = layout_tracker_format((enum layout_kind)s.kind, &t, content, sizeof(content))) < 0) {
		ckpt_msg(msg, cap, "step '%s' is of a layout whose trainer resumes from the highest "
		       "step it finds (%s), not from a tracker: drop the newer steps instead "
		       "('ckptctl STORE drop STEP')", s.name, layout_name(s.kind));
		goto out;
	}
	/* as if the trainer wrote its tracker: a claim, the head of a new lineage (rule 6). Of
	 * version s, the complete one at the step's name (find_step): a claim by name would seal
	 * the newest version of that name, which may be a rewrite set aside (steps_seal). */
	steps_claim_record(fs, s.kind, tracker, content, (size_t)n, &t);
	steps_inval_queue(fs, IDX_ROOT_INO, tracker);
	ckpt_msg(msg, cap, "'%s' now names step %" PRId64 " ('%s'); the newer steps are kept as "
	       "another lineage", tracker, s.step, s.name);
	rc = 0;
out:
	fs_unlock(fs);
	return rc;
}
