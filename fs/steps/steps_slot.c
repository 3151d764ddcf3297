/*
 * steps_slot.c — InternEvo snapshot slots (snapshot/K): steps rewritten in place, numbered by
 * their marker, with the last complete version kept while a slot is rewritten.
 *
 * Locking: every function here runs with fs->mu held unless its comment says otherwise.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "fs/steps/steps.h"
#include "fs/policy/layout.h"
#include "fs/steps/steps_int.h"
#include "fs/policy/validate.h"

/* ---- InternEvo snapshot slots: a step directory rewritten in place ---- */

/*
 * InternEvo's snapshot saves rewrite `snapshot/K/` in place and then add `M.step` beside the
 * markers of the steps the slot held before (tests/traces/internevo.md). Its resume loads the
 * folder holding the highest `.step` as it is, so a save cut short in a slot whose old marker
 * is the newest would be loaded torn. A slot is therefore versioned:
 *   1. Each version is a step row named "snapshot/K"; its number is the marker that sealed it
 *      (0 until sealed).
 *   2. The first change under a slot whose version is complete (steps_before_change) keeps that
 *      version: its tree is cloned (same chunks) into /.ckptfs/retained and its row moves
 *      there; a new row, writing, owns the directory the trainer rewrites.
 *   3. The new version completes like any step (its marker, every file whole and durable):
 *      then the kept versions of the slot are pruned (steps_versions_done).
 *   4. The new version set aside (its writers gone unsealed, or a file torn): it goes to
 *      quarantine and the newest kept version is put back at the slot's name (steps_restore()), so
 *      a resume sees the slot's last complete version, files and markers together.
 * Slots are not counted by retention and never pruned by it. Any other complete step changed in
 * place gets the same treatment, 2 to 4 (steps_reopen_complete, in steps.c), except that its new
 * version keeps the step's number.
 */

/* Set slot s's number from the name of the marker sealing it ("<digits>.step"). */
void steps_slot_number(struct ckfs *fs, struct idx_step *s, const char *marker)
{
	long long v;
	char tail;

	if (sscanf(marker, "%lld.ste%c", &v, &tail) != 2 || tail != 'p' || v < 0 || v == s->step)
		return;
	if (idx_begin(fs->ix) < 0)
		return;
	if (steps_record(fs, idx_step_set_number(fs->ix, s->id, v), "step %lld of slot '%s'", v,
			 s->name) < 0)
		return;
	s->step = v;
}

struct slot_ctx {
	const struct idx_step *s;
	int64_t *ids;
	size_t n, cap;
};

/*
 * The kept versions of step s: complete steps of its kind and name in /.ckptfs/retained, other
 * than s, into c (ids). Costs what /.ckptfs/retained holds (a few steps), not the step table.
 * Returns 0 or -errno.
 */
static int kept_versions(struct ckfs *fs, struct slot_ctx *c)
{
	struct steps_entries e = { 0 };
	int rc = 0;

	if (!fs->steps.retained_ino ||
	    (rc = steps_dir_entries(fs, fs->steps.retained_ino, 1, &e)) < 0)
		goto out;
	for (size_t i = 0; i < e.n; i++) {
		struct idx_step o;

		if (!S_ISDIR(e.modes[i]) || idx_step_by_dir(fs->ix, e.inos[i], &o) < 0 ||
		    o.id == c->s->id || o.kind != c->s->kind || strcmp(o.name, c->s->name) != 0 ||
		    o.state != IDX_STEP_COMPLETE)
			continue;
		if ((rc = ckpt_grow(&c->ids, &c->cap, c->n, sizeof(*c->ids))) < 0)
			break;
		c->ids[c->n++] = o.id;
	}
out:
	steps_dir_entries_free(&e);
	return rc;
}

bool steps_kept_version_dir(struct ckfs *fs, const struct idx_step *s, uint64_t *ret_dir)
{
	struct slot_ctx c = { .s = s };
	struct idx_step o, best = { .id = 0 };

	if (kept_versions(fs, &c) == 0)
		for (size_t i = 0; i < c.n; i++)
			if (idx_step_get(fs->ix, c.ids[i], &o) == 0 && o.dir_ino && o.id > best.id)
				best = o;
	free(c.ids);
	if (!best.id)
		return false;
	*ret_dir = best.dir_ino;
	return true;
}

/*
 * Step s (a slot's new version, or a step rewritten in place: steps_reopen_complete) was
 * judged: complete, its kept versions are pruned (invariant 3); set aside, the newest kept
 * version takes its place again (invariant 4).
 */
void steps_versions_done(struct ckfs *fs, const struct idx_step *s)
{
	struct slot_ctx c = { .s = s };
	struct ino_freed fr = { 0 };
	struct idx_step o, best = { .id = 0 };
	bool ok = true;

	if (kept_versions(fs, &c) < 0 || c.n == 0)
		goto out;
	if (s->state == IDX_STEP_INCOMPLETE) {
		for (size_t i = 0; i < c.n; i++)
			if (idx_step_get(fs->ix, c.ids[i], &o) == 0 && steps_is_retained(fs, &o) &&
			    (!best.id || o.step > best.step || (o.step == best.step && o.id > best.id)))
				best = o;
		if (best.id)
			steps_restore(fs, &best);
		goto out;
	}
	if (idx_begin(fs->ix) < 0)
		goto out;
	for (size_t i = 0; i < c.n && ok; i++)
		if (idx_step_get(fs->ix, c.ids[i], &o) == 0 && !o.pinned &&
		    steps_is_retained(fs, &o))
			ok = steps_prune(fs, &o, &fr) == 0;
	ok = ok && idx_commit(fs->ix) == 0;
	if (!ok)
		idx_rollback(fs->ix);
	ino_release_finish(fs, &fr, ok);
out:
	free(c.ids);
}

/*
 * The slot holding directory dir (dir itself or its parent), if dir is in a slot: its directory
 * inode, or 0. Cheap when there are no slots: one lookup of `snapshot` in the root.
 */
static uint64_t slot_of_dir(struct ckfs *fs, uint64_t dir)
{
	const char *sd = fs->steps.opt.layout < 0 ? NULL : layout_slot_dir(fs->steps.opt.layout);
	uint64_t snap, up, upup;

	if (!sd || dir == IDX_ROOT_INO || idx_dentry_lookup(fs->ix, IDX_ROOT_INO, sd, &snap) < 0 ||
	    idx_dentry_parent(fs->ix, dir, &up, NULL, 0) < 0)
		return 0;
	if (up == snap)
		return dir;
	if (up != IDX_ROOT_INO && idx_dentry_parent(fs->ix, up, &upup, NULL, 0) == 0 && upup == snap)
		return up;
	return 0;
}

bool steps_slot_home(struct ckfs *fs, uint64_t dir)
{
	const char *sd = fs->steps.opt.layout < 0 ? NULL : layout_slot_dir(fs->steps.opt.layout);
	uint64_t snap;

	return sd && dir != IDX_ROOT_INO && idx_dentry_lookup(fs->ix, IDX_ROOT_INO, sd, &snap) == 0 &&
	       snap == dir;
}

bool steps_before_change(struct ckfs *fs, uint64_t dir)
{
	char qname[300];
	struct idx_step s;
	struct idx_inode a;
	uint64_t slot = slot_of_dir(fs, dir);
	int64_t id;
	int rc;

	if (!slot || idx_step_by_dir(fs->ix, slot, &s) < 0 || s.state != IDX_STEP_COMPLETE ||
	    !steps_is_slot(&s) || idx_inode_get(fs->ix, slot, &a) < 0)
		return false;
	if (idx_begin(fs->ix) < 0)
		return false;
	rc = steps_keep_copy(fs, &s, &a, qname, sizeof(qname));
	if (rc == 0)
		rc = idx_step_create(fs->ix, s.kind, s.name, 0, slot, ckfs_now(fs), &id);
	if (rc == 0)
		rc = idx_commit(fs->ix);
	else
		idx_rollback(fs->ix);
	if (rc == 0)
		ckpt_log("slot '%s' is being rewritten: its last complete version (step %" PRId64
			 ") is kept as '.ckptfs/%s/%s' and comes back if the new one is not "
			 "completed", s.name, s.step, RETAINED_NAME, qname);
	else
		ckpt_log("slot '%s': cannot keep its last complete version before it is "
			 "rewritten: %s", s.name, strerror(-rc));
	return true;
}

void steps_before_write(struct ckfs *fs, uint64_t ino, pid_t pid)
{
	char name[NAME_MAX + 1];
	uint64_t parent;

	if (fs->steps.opt.layout < 0 ||
	    idx_dentry_parent(fs->ix, ino, &parent, name, sizeof(name)) < 0)
		return;
	steps_before_change(fs, parent);
	steps_reopen_complete(fs, ino, pid);
	steps_top_before_write(fs, ino);
	/* The step knows its writer now, as at a create (steps_on_name), not only once the
	 * committer reports the writer's close: a reader that comes after the writer died and
	 * before its closes are committed finds the step due for judging, so it waits for those
	 * commits and judges it first (fs_settle_for_reader). A slot rewritten in place is
	 * written through opens of existing names only (tests/mount/test_slots.py test_1b). */
	steps_on_name(fs, parent, name, ino, pid, false);
}

bool steps_version_shadowed(struct ckfs *fs, const struct idx_step *s)
{
	const char *leaf;
	uint64_t home, cur;
	struct idx_step o;

	return s->state == IDX_STEP_COMPLETE && steps_is_retained(fs, s) &&
	       steps_step_home(fs, s->name, &home, &leaf) == 0 &&
	       idx_dentry_lookup(fs->ix, home, leaf, &cur) == 0 &&
	       idx_step_by_dir(fs->ix, cur, &o) == 0 && o.id != s->id && o.kind == s->kind &&
	       (o.state == IDX_STEP_WRITING || o.state == IDX_STEP_SEALED ||
		o.state == IDX_STEP_COMPLETE);
}

bool steps_version_superseded(struct ckfs *fs, const struct idx_step *s)
{
	struct idx_step o;

	return s->state == IDX_STEP_COMPLETE &&
	       idx_step_by_name(fs->ix, s->kind, s->name, &o) == 0 && o.id > s->id &&
	       (o.state == IDX_STEP_WRITING || o.state == IDX_STEP_SEALED ||
		o.state == IDX_STEP_COPIED || o.state == IDX_STEP_INCOMPLETE);
}
