/*
 * steps_judge.c — sealing and judging a step: the facts the daemon knows of it (open files,
 * writers, a crash), judged by the checkpoint policy (fs/policy/policy.h); a complete step
 * runs retention, an incomplete one is set aside in quarantine.
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

#include "fs/core/lockrank.h"
#include "fs/steps/steps.h"
#include "fs/policy/layout.h"
#include "fs/policy/policy.h"
#include "fs/steps/steps_int.h"
#include "fs/policy/validate.h"

/* policy_step_in.kept_dir: steps_kept_version_dir (arg is the daemon) */
static bool kept_dir_cb(void *arg, const struct idx_step *s, uint64_t *ret_dir)
{
	return steps_kept_version_dir(arg, s, ret_dir);
}

/* The facts policy_judge needs about step s, scanned in sc (fs->mu held): what the daemon knows
 * of its writers and files, the rest read by the policy (policy_step_facts). Returns 0, or
 * -errno when they cannot be known now (the reaper tries again). absent, unlisted:
 * NAME_MAX + 64 bytes. */
static int step_facts(struct ckfs *fs, const struct idx_step *s, const struct step_scan *sc,
		      bool settled, bool recovering, bool quiet, struct policy_facts *f,
		      char *absent, char *unlisted)
{
	struct policy_step_in in = {
		.settled = settled, .quiet = quiet, .recovering = recovering,
		.crashed = fs->steps.crash_recovery,
		/* with many nodes (fs->node) MindFormers 2.0's metadata.json lists every node's
		 * files and this node holds its own ranks' only: not this node's part to check */
		.check_listed = !fs->node, .files = sc->fig.files, .open = sc->open,
		.uncommitted = sc->uncommitted, .unsound = sc->unsound,
		.writers = steps_rt_writers(fs, s->id), .kept_dir = kept_dir_cb, .arg = fs,
	};

	return policy_step_facts(fs->ix, fs->st, s, &in, absent, unlisted, NAME_MAX + 64, f);
}

/*
 * Judge step id by the policy (policy_judge). settled: its writers are gone; recovering: the
 * daemon that saw it written is gone; quiet: nothing was written into it for STEP_SETTLE_NS, or
 * its writers are gone (the reaper, steps_settle_now). Complete: the step's state changes and
 * retention runs; incomplete: it is set aside in quarantine; otherwise only its figures change.
 */
void steps_evaluate(struct ckfs *fs, int64_t id, bool settled, bool recovering, bool quiet)
{
	char absent[NAME_MAX + 64], unlisted[NAME_MAX + 64], why[256];
	struct policy_facts f;
	struct step_scan sc;
	struct idx_step s;
	enum policy_verdict v;
	int rc;

	if (idx_step_get(fs->ix, id, &s) < 0)
		return;
	if ((s.state != IDX_STEP_WRITING && s.state != IDX_STEP_SEALED) || !s.dir_ino)
		return;
	if (recovering)
		/* the daemon that saw this step being written is gone: trust no flag written
		 * after the content, re-check every file from the store */
		steps_revalidate_tree(fs, s.dir_ino);
	if (steps_scan_tree(fs, s.dir_ino, false, &sc) < 0 ||
	    step_facts(fs, &s, &sc, settled, recovering, quiet, &f, absent, unlisted) < 0)
		return;
	v = policy_judge(&f, why, sizeof(why));
	if (v == POLICY_INCOMPLETE && !recovering && sc.fig.files == 0 &&
	    s.state == IDX_STEP_WRITING && f.by_tracker &&
	    ckfs_now(fs) - s.created_ns < STEP_EMPTY_GRACE_NS) {
		steps_rt_empty_grace(fs, id, true); /* made ahead of the job that fills it */
		return;
	}
	if (unlisted[0] && settled)
		ckpt_log("step '%s': metadata.json names '%s', which is not in the step", s.name,
			 unlisted);
	if (idx_begin(fs->ix) < 0)
		return;
	rc = idx_step_set_figures(fs->ix, id, sc.fig.files, sc.fig.bytes, sc.fig.stored,
				  sc.fig.digest.b);
	if (rc == 0 && v == POLICY_COMPLETE) {
		rc = steps_set_state(fs, &s, IDX_STEP_COMPLETE, NULL);
	} else if (rc == 0 && v == POLICY_INCOMPLETE) {
		rc = steps_set_state(fs, &s, IDX_STEP_INCOMPLETE, why);
		if (rc == 0)
			rc = steps_move_to_quarantine(fs, &s);
	} else if (rc == 0 && v == POLICY_COPIED) {
		rc = steps_set_state(fs, &s, IDX_STEP_COPIED, why); /* stays at its name */
	}
	if (rc < 0) {
		idx_rollback(fs->ix);
		return;
	}
	if (s.state == IDX_STEP_COMPLETE)
		ckpt_fault("step-complete-txn");
	if (idx_commit(fs->ix) < 0)
		return;
	if (s.state == IDX_STEP_COPIED)
		steps_rt_drop(fs, id); /* judged again only once written into (steps_note_writer) */
	if (s.state == IDX_STEP_COMPLETE || s.state == IDX_STEP_INCOMPLETE) {
		steps_rt_drop(fs, id);
		steps_versions_done(fs, &s);
	}
	if (s.state == IDX_STEP_COMPLETE)
		steps_retention(fs, s.kind);
	else if (s.state == IDX_STEP_INCOMPLETE)
		steps_quarantine_limit(fs);
}

/* ---- step rows from names ---- */

struct older_ctx {
	int64_t step;
	int64_t ids[16];
	size_t n;
};

/* idx_step_newest_each callback (sealed steps of c->kind, newest first) */
static int older_sealed_cb(const struct idx_step *o, void *arg)
{
	struct older_ctx *c = arg;

	if (o->step < c->step && c->n < sizeof(c->ids) / sizeof(c->ids[0]))
		c->ids[c->n++] = o->id;
	return 0;
}

/* Every rank is done with the sealed steps before a new one (newer_step_started): they may
 * complete now rather than once quiet, so the new step has a complete one to be compared with
 * when its own marker comes. */
void steps_judge_older_sealed(struct ckfs *fs, const struct layout_match *m)
{
	struct older_ctx c = { .step = m->step };

	if (!policy_names_repeat(m->kind))
		return;
	if (idx_step_newest_each(fs->ix, 1u << m->kind, IDX_STEP_SEALED, older_sealed_cb, &c) < 0)
		return;
	for (size_t i = 0; i < c.n; i++)
		steps_evaluate(fs, c.ids[i], false, false, false);
}

/*
 * A marker m of step s is named: the marker may say the step is another layout's than its row
 * (policy_marker_kind: `N/commit_success.txt` makes an all-digit step Orbax's, whichever marker
 * of N/ came first). Returns 0 (s->kind is the step's layout), or the index's -errno (s is
 * left as it was).
 */
static int step_kind_of_marker(struct ckfs *fs, struct idx_step *s, const struct layout_match *m)
{
	enum layout_kind k =
	    policy_marker_kind((enum layout_kind)s->kind, s->name, m, fs->steps.opt.layout);
	int rc;

	if ((int)k == s->kind)
		return 0;
	if ((rc = idx_begin(fs->ix)) < 0)
		return rc;
	if ((rc = steps_record(fs, idx_step_set_kind(fs->ix, s->id, k), "the layout of step '%s'",
			       s->name)) < 0)
		return rc;
	ckpt_log("step '%s' holds a marker of %s: a %s step, not %s", s->name, layout_name(k),
		 layout_name(k), layout_name((enum layout_kind)s->kind));
	s->kind = k;
	return 0;
}

/* The step whose directory is rel[0, m->step_prefix_len) (creating its row if needed). */
int steps_step_of_path(struct ckfs *fs, const char *rel, const struct layout_match *m,
		       struct idx_step *ret)
{
	char dname[LAYOUT_PATH_MAX];
	uint64_t dir;
	int64_t id;
	int rc;

	if (m->step_prefix_len == 0 || m->step_prefix_len >= sizeof(dname))
		return -ENOENT;
	memcpy(dname, rel, m->step_prefix_len);
	dname[m->step_prefix_len] = 0;
	if ((rc = steps_lookup_path(fs, dname, &dir)) < 0)
		return rc;
	if (idx_step_by_dir(fs->ix, dir, ret) == 0)
		return step_kind_of_marker(fs, ret, m);
	/* a digit directory is not a checkpoint until its marker says so (policy rule 1) */
	if (policy_needs_evidence(m) && m->role != ROLE_MARKER)
		return -ENOENT;
	if ((rc = idx_begin(fs->ix)) < 0)
		return rc;
	/* a slot's number is its newest sealed version's (steps_slot_number); 0 until sealed */
	rc = idx_step_create(fs->ix, m->kind, dname, (m->flags & LAYOUT_F_SLOT) ? 0 : m->step,
			     dir, ckfs_now(fs), &id);
	if (rc == 0)
		rc = idx_commit(fs->ix);
	else
		idx_rollback(fs->ix);
	if (rc < 0)
		return rc;
	steps_judge_older_sealed(fs, m);
	return idx_step_get(fs->ix, id, ret);
}

/*
 * Is step s a new version of a complete step (a rewrite in place)? Its complete version is the
 * one put back at s's name when s was set aside (steps_restore: same kind and name, older), or
 * one still kept in /.ckptfs/retained (steps_kept_version_dir); its directory into *ret_dir.
 */
static bool rewrite_of(struct ckfs *fs, const struct idx_step *s, uint64_t *ret_dir)
{
	const char *leaf;
	struct idx_step o;
	uint64_t home, cur;

	if (steps_step_home(fs, s->name, &home, &leaf) == 0 &&
	    idx_dentry_lookup(fs->ix, home, leaf, &cur) == 0 && cur != s->dir_ino &&
	    idx_step_by_dir(fs->ix, cur, &o) == 0 && o.state == IDX_STEP_COMPLETE &&
	    o.kind == s->kind && o.id < s->id && strcmp(o.name, s->name) == 0) {
		*ret_dir = cur;
		return true;
	}
	return steps_kept_version_dir(fs, s, ret_dir);
}

/*
 * A seal (a marker, or another node's) for step s, set aside in quarantine: bring it back to its
 * name if its files are sound. Its name may hold the version put back when s was set aside (a
 * slot, a step rewritten in place: steps_restore); s is newer and sealed, so that one goes back
 * to /.ckptfs/retained (steps_unrestore), unless s is a rewrite cut short (rewrite_of). Returns
 * true when s is back and sealed; false when it stays set aside (logged when its files are
 * sound). fs->mu held; runs its own transaction.
 */
static bool seal_set_aside(struct ckfs *fs, struct idx_step *s, const char *why)
{
	char missing[LAYOUT_PATH_MAX];
	struct step_scan sc;
	const char *leaf;
	uint64_t home, kept;
	int rc;

	if (steps_scan_tree(fs, s->dir_ino, false, &sc) < 0 || sc.unsound || sc.uncommitted ||
	    sc.fig.files == 0)
		return false;
	/* A rewrite in place starts with every file of its complete version (steps_reopen_complete):
	 * a save cut short leaves some of them as they were, each whole, and the step a mix of two
	 * saves. Its writers are gone, so the seal may not be theirs (`ckptctl rollback`, a user's
	 * `echo N >` tracker): it brings the rewrite back only if every name was written again. */
	if (rewrite_of(fs, s, &kept) &&
	    (rc = policy_rewritten_names(fs->ix, s, kept, missing, sizeof(missing))) !=
		    POLICY_PREV_ALL) {
		ckpt_log("step '%s': %s, but it stays set aside in .ckptfs/quarantine: %s%s%s, so "
			 "the complete version keeps its name", s->name, why,
			 rc < 0 ? "its files could not be compared with the complete version's: " :
				  "a rewrite cut short (",
			 rc < 0 ? strerror(-rc) : missing, rc < 0 ? "" : ")");
		return false;
	}
	if (idx_begin(fs->ix) < 0)
		return false;
	rc = steps_move_back(fs, s);
	if (rc == -EEXIST && (rc = steps_unrestore(fs, s)) == 0)
		rc = steps_move_back(fs, s);
	if (rc == 0)
		rc = steps_set_state(fs, s, IDX_STEP_SEALED, why);
	if (rc == 0)
		rc = idx_commit(fs->ix);
	if (rc < 0) {
		idx_rollback(fs->ix);
		ckpt_log("step '%s': %s, but it stays set aside in .ckptfs/quarantine: %s", s->name,
			 why, rc == -EEXIST ? "its name is taken by another directory"
					    : strerror(-rc));
		return false;
	}
	if (steps_step_home(fs, s->name, &home, &leaf) == 0)
		steps_inval_queue(fs, home, leaf); /* the kernel may hold the older version */
	return true;
}

void steps_seal(struct ckfs *fs, struct idx_step *s, const char *why)
{
	if (s->state == IDX_STEP_INCOMPLETE) {
		if (!seal_set_aside(fs, s, why))
			return;
	} else if (s->state == IDX_STEP_WRITING || s->state == IDX_STEP_COPIED) {
		/* a copy's claim: the user or the trainer names it (policy rule 3) */
		if (idx_begin(fs->ix) < 0)
			return;
		if (steps_record(fs, steps_set_state(fs, s, IDX_STEP_SEALED, why),
				 "the seal of step '%s'", s->name) < 0)
			return;
	}
	if (policy_marker_after_all_ranks(s->kind)) {
		/* every rank was done before the marker */
		steps_evaluate(fs, s->id, false, false, false);
	} else {
		steps_rt_note(fs, s->id, 0); /* else the reaper judges it once it is quiet */
		if (policy_names_repeat(s->kind))
			/* all the last step's names? */
			steps_evaluate(fs, s->id, false, false, false);
	}
}

struct find_part {
	int kind;
	int64_t step;
	const char *slot; /* a slot's name ("snapshot/0"): its rows match by name, else NULL */
	struct idx_step s;
	bool found;
};

static int find_part_cb(const struct idx_step *s, void *arg)
{
	struct find_part *f = arg;

	/* a copy too (policy rule 3): a job's last save whose ranks here exited before another
	 * node's seal arrived looks like one, and that seal is the claim a copy waits for */
	if (s->kind != f->kind || s->dir_ino == 0 ||
	    (f->slot ? strcmp(s->name, f->slot) != 0 : s->step != f->step) ||
	    (s->state != IDX_STEP_WRITING && s->state != IDX_STEP_INCOMPLETE &&
	     s->state != IDX_STEP_COPIED))
		return 0;
	/* the newest row: a save of the step after an earlier one was set aside is the one the
	 * seal is for */
	if (!f->found || s->id > f->s.id)
		f->s = *s;
	f->found = true;
	return 0;
}

/*
 * A layout with desc->seal_by_rename commits a step by renaming its tmp directory (Orbax's
 * primary host renames `<step>.orbax-checkpoint-tmp` to `<step>`, orbax atomicity.py
 * AtomicRenameTemporaryPath.finalize; tests/traces/orbax.md). On one shared filesystem that one
 * rename moves every host's shards; here it happened in the primary's node only, and the other
 * nodes' shards are still under the tmp name in theirs. Another node's seal of step s is that
 * rename: s, still under its tmp name here, takes the final name, as steps_on_rename (steps.c)
 * does for a local rename; set aside already (its ranks here exited before the seal arrived), it
 * takes it in quarantine, for steps_seal to bring it back under it. Returns 0 (renamed, or
 * nothing to rename), -EEXIST when the final name is taken here (then s is not sealed: two
 * directories would hold the step), or the index's -errno. fs->mu held; runs its own
 * transaction.
 */
static int remote_commit_rename(struct ckfs *fs, struct idx_step *s)
{
	struct layout_match m;
	char final[IDX_STEP_NAME_MAX + 1], from[300], to[300];
	uint64_t cur, dir = IDX_ROOT_INO;
	int rc;

	if (!layout_desc(s->kind)->seal_by_rename ||
	    layout_classify(s->name, fs->steps.opt.layout, &m) < 0 || !(m.flags & LAYOUT_F_TMP) ||
	    strchr(s->name, '/'))
		return 0;
	if (layout_step_dir_name((enum layout_kind)s->kind, s->step, final, sizeof(final)) < 0)
		return -ENAMETOOLONG;
	/* set aside (its ranks here exited before the seal arrived): renamed in quarantine, so
	 * that the seal brings it back under its final name (steps_seal, steps_move_back) */
	if (s->state == IDX_STEP_INCOMPLETE) {
		steps_flat_name(s->name, s->id, from, sizeof(from));
		steps_flat_name(final, s->id, to, sizeof(to));
		dir = fs->steps.quarantine_ino;
	} else {
		snprintf(from, sizeof(from), "%s", s->name);
		snprintf(to, sizeof(to), "%s", final);
	}
	if (idx_dentry_lookup(fs->ix, dir, from, &cur) < 0 || cur != s->dir_ino)
		return 0; /* not at its tmp name (moved): nothing to rename */
	if (idx_dentry_lookup(fs->ix, IDX_ROOT_INO, final, &cur) == 0) {
		ckpt_log("step '%s': sealed by another node, but '%s' is taken here: not renamed "
			 "and not sealed, so the step cannot become global", s->name, final);
		return -EEXIST;
	}
	if ((rc = idx_begin(fs->ix)) < 0)
		return rc;
	rc = idx_dentry_move(fs->ix, dir, from, dir, to);
	if (rc == 0)
		rc = idx_step_set_name(fs->ix, s->id, final);
	if (rc == 0)
		rc = idx_commit(fs->ix);
	if (rc < 0) {
		idx_rollback(fs->ix);
		ckpt_log("step '%s': cannot take its final name '%s': %s", s->name, final,
			 strerror(-rc));
		return rc;
	}
	if (dir == IDX_ROOT_INO)
		steps_inval_queue(fs, IDX_ROOT_INO, s->name);
	ckpt_log("step '%s': renamed to '%s', as its primary host's rename did on its node",
		 s->name, final);
	snprintf(s->name, sizeof(s->name), "%s", final);
	return 0;
}

/* policy_step_walk callback: the newest mtime of the files of a step (ns since the epoch). */
static int newest_mtime_cb(const char *name, uint64_t ino, const struct idx_inode *a, void *arg)
{
	int64_t *newest = arg;

	(void)name;
	(void)ino;
	if (a->mtime_ns > *newest)
		*newest = a->mtime_ns;
	return 0;
}

/*
 * A slot (InternEvo's snapshot/K) is rewritten in place at every snapshot, and another node's
 * seal of one of its versions may reach this node after its ranks began the next one in the
 * same directory: their part then holds files of two saves. Such a part is not this version's:
 * it is sealed only if none of its files was written after the sealing node's last file
 * (marker_ns) and the nodes' clock skew (STEPS_SLOT_SKEW_NS). fs->mu held. Returns 0 (the part
 * is that version), -ESTALE (written since: logged), or the index's -errno.
 */
/* 1 s: well above the skew of clocks kept by NTP or PTP across a cluster's nodes, well below the
 * time between two snapshots (at least one training step, and a save). This node's clock ahead
 * by more keeps versions from becoming global here (no resume from them); behind by d, it lets a
 * rewrite started within 1 s + d of the marker pass for the sealed save. */
#define STEPS_SLOT_SKEW_NS (1000 * 1000 * 1000LL)
static int slot_part_of(struct ckfs *fs, const struct idx_step *s, int64_t step,
			int64_t marker_ns)
{
	struct policy_figures fig;
	int64_t newest = 0;
	int rc;

	if (marker_ns <= 0)
		return -ESTALE; /* no time to compare with: never guess */
	if ((rc = policy_step_walk(fs->ix, s->dir_ino, newest_mtime_cb, &newest, &fig)) < 0)
		return rc;
	if (newest > marker_ns + STEPS_SLOT_SKEW_NS) {
		ckpt_log("slot '%s': another node sealed its step %" PRId64 ", but this node's "
			 "ranks wrote into it %.1f s after that: a later snapshot; not sealed as %"
			 PRId64, s->name, step, (double)(newest - marker_ns) / 1e9, step);
		return -ESTALE;
	}
	return 0;
}

int steps_seal_remote(struct ckfs *fs, int kind, int64_t step, const char *name,
		      int64_t marker_ns, const char *why)
{
	struct find_part f = { .kind = kind, .step = step };
	int rc = 0;

	if (layout_desc(kind)->slot_dir && name && strchr(name, '/'))
		f.slot = name;
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	if (idx_step_foreach(fs->ix, find_part_cb, &f) >= 0 && f.found) {
		if (f.slot && (rc = slot_part_of(fs, &f.s, step, marker_ns)) == 0 &&
		    f.s.step != step) {
			if ((rc = idx_begin(fs->ix)) == 0)
				rc = steps_record(fs, idx_step_set_number(fs->ix, f.s.id, step),
						  "step %" PRId64 " of slot '%s'", step, f.s.name);
			if (rc == 0)
				f.s.step = step;
		}
		if (rc == 0 && remote_commit_rename(fs, &f.s) == 0)
			steps_seal(fs, &f.s, why);
	}
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	return !f.found ? -ENOENT : rc == -ESTALE ? -ESTALE : 0;
}
