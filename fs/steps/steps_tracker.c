/*
 * steps_tracker.c — virtual trackers: their inodes, names, attributes and content (the newest
 * complete step), and what a trainer's write to one claims.
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
#include "fs/policy/policy.h"
#include "fs/steps/steps_int.h"
#include "fs/policy/validate.h"

/* ---- virtual trackers ---- */

bool steps_is_vino(uint64_t ino)
{
	return (ino >= VINO_BASE && ino < VINO_BASE + LAYOUT_KIND_COUNT) ||
	       (ino >= VINO_RANK_META(0) && ino < VINO_RANK_META(VINO_RANK_MAX));
}

int steps_vino_rank(uint64_t vino)
{
	return vino >= VINO_RANK_META(0) && vino < VINO_RANK_META(VINO_RANK_MAX)
		       ? (int)(vino - VINO_RANK_META(0)) : -1;
}

int steps_vino_kind(uint64_t vino)
{
	return steps_vino_rank(vino) >= 0 ? (int)layout_per_rank_kind() : (int)(vino - VINO_BASE);
}

int steps_tracker_path(struct ckfs *fs, uint64_t parent, int kind, char *buf, size_t cap)
{
	const struct layout_desc *d = layout_desc(kind);
	int rank = -1;

	if (d->tracker == LAYOUT_TRACKER_NONE ||
	    (d->tracker == LAYOUT_TRACKER_PER_RANK) != (parent != IDX_ROOT_INO) ||
	    (parent != IDX_ROOT_INO && (rank = steps_rank_dir(fs, parent)) < 0))
		return -ENOENT;
	return layout_tracker_path(d->kind, -1, rank, buf, cap);
}

int steps_vcontent(struct ckfs *fs, uint64_t vino, char *buf, size_t cap, struct idx_step *ret)
{
	if (vino >= VINO_RANK_META(0)) {
		int n = steps_mf1_meta(fs, steps_vino_rank(vino), buf, cap);

		if (n >= 0 && ret) {
			memset(ret, 0, sizeof(*ret));
			ret->completed_ns = ckpt_now_ns();
		}
		return n;
	}
	return steps_tracker_content(fs, (int)(vino - VINO_BASE), buf, cap, ret);
}

/* Is name (at the root) a tracker? Returns its kind, or LAYOUT_NONE. */
static enum layout_kind tracker_kind(struct ckfs *fs, const char *name)
{
	return fs->steps.opt.layout < 0 ? LAYOUT_NONE
					: policy_claim_kind(name, fs->steps.opt.layout);
}

struct newest_ctx {
	struct ckfs *fs;
	struct policy_lineage lin[LAYOUT_KIND_COUNT]; /* per step kind, found when first needed */
	uint32_t lin_known;                           /* bit k: lin[k] is found */
	struct idx_step best;
	bool found;
	int err;
};

static int newest_cb(const struct idx_step *s, void *arg)
{
	struct newest_ctx *c = arg;

	if (s->step < 0)
		return 1; /* newest first: no numbered step below */
	if (s->kind <= 0 || s->kind >= LAYOUT_KIND_COUNT)
		return 0;
	if (!(c->lin_known & (1u << s->kind))) {
		int rc = policy_lineage(c->fs->ix, (enum layout_kind)s->kind,
					c->fs->steps.opt.layout < 0
					    ? LAYOUT_NONE
					    : (enum layout_kind)c->fs->steps.opt.layout,
					&c->lin[s->kind]);

		if (rc < 0) {
			c->err = rc;
			return 1;
		}
		c->lin_known |= 1u << s->kind;
	}
	if (!policy_lineage_member(&c->lin[s->kind], s))
		return 0; /* left behind by a rollback or an earlier run (policy rule 6) */
	if (steps_version_shadowed(c->fs, s))
		return 0; /* its name holds a new version being written: not what a reader finds */
	if (c->fs->up.global_ok && !c->fs->up.global_ok(c->fs, s))
		return 0; /* complete here, not yet on every node */
	c->best = *s;
	c->found = true;
	return 1;
}

/* The newest complete step a tracker of this kind resolves to, skipping corrupt ones. */
static int resolve(struct ckfs *fs, enum layout_kind tracker, struct idx_step *ret)
{
	uint32_t kinds = 0; /* the kinds whose steps this tracker names */

	for (int k = 1; k < LAYOUT_KIND_COUNT; k++)
		if (layout_tracker_shared(tracker, (enum layout_kind)k))
			kinds |= 1u << k;
	if (!kinds)
		return -ENOENT; /* not a tracker's kind */
	for (int tries = 0; tries < 64; tries++) {
		struct newest_ctx c = { .fs = fs };

		/* newest first, stopping at the first match: O(log n) in the steps kept */
		if (idx_step_newest_each(fs->ix, kinds, IDX_STEP_COMPLETE, newest_cb, &c) < 0 ||
		    c.err < 0 || !c.found)
			return -ENOENT;
		if (c.best.dir_ino && steps_tree_has_bad_chunk(fs, c.best.dir_ino) > 0) {
			struct idx_step s = c.best;

			if (idx_begin(fs->ix) == 0) {
				if (steps_set_state(fs, &s, IDX_STEP_CORRUPT,
						    "a chunk failed its checksum") < 0 ||
				    steps_move_to_quarantine(fs, &s) < 0 || idx_commit(fs->ix) < 0)
					idx_rollback(fs->ix);
			}
			if (s.state != IDX_STEP_CORRUPT)
				return -EIO;
			continue;
		}
		*ret = c.best;
		return 0;
	}
	return -ENOENT;
}

int steps_tracker_content(struct ckfs *fs, int kind, char *buf, size_t cap,
			  struct idx_step *ret_step)
{
	struct layout_tracker t = { .epoch = -1 };
	struct idx_step s;
	int rc = resolve(fs, (enum layout_kind)kind, &s);

	if (rc < 0)
		return rc;
	steps_restore(fs, &s);
	t.step = s.step;
	rc = layout_tracker_format((enum layout_kind)kind, &t, buf, cap);
	if (rc >= 0 && ret_step)
		*ret_step = s;
	return rc;
}

int steps_vlookup(struct ckfs *fs, uint64_t parent, const char *name, uint64_t *ret_vino)
{
	enum layout_kind k;

	if (parent != IDX_ROOT_INO) {
		char mbuf[LAYOUT_TRACKER_MAX];
		int tk = steps_tracker_name(fs, parent, name);
		uint64_t v;

		if (layout_desc(tk)->tracker != LAYOUT_TRACKER_PER_RANK)
			return 0;
		v = steps_tracker_vino(fs, parent, tk);
		if (!v || steps_vcontent(fs, v, mbuf, sizeof(mbuf), NULL) < 0)
			return -ENOENT;
		*ret_vino = v;
		return 1;
	}
	if ((k = tracker_kind(fs, name)) == LAYOUT_NONE)
		return 0;
	char buf[LAYOUT_TRACKER_MAX];
	struct idx_step s;

	if (steps_tracker_content(fs, k, buf, sizeof(buf), &s) < 0)
		return -ENOENT;
	*ret_vino = VINO_BASE + k;
	return 1;
}

int steps_vstat(struct ckfs *fs, uint64_t vino, struct stat *st)
{
	char buf[LAYOUT_TRACKER_MAX];
	struct idx_inode root;
	struct idx_step s;
	int n = steps_vcontent(fs, vino, buf, sizeof(buf), &s);

	if (n < 0) {
		/* no complete step: the name does not resolve (steps_vlookup), but an inode the
		 * kernel already holds (a trainer writing the tracker) stats as empty */
		n = 0;
		memset(&s, 0, sizeof(s));
		s.completed_ns = ckpt_now_ns();
	}
	if (idx_inode_get(fs->ix, IDX_ROOT_INO, &root) < 0)
		return -EIO;
	memset(st, 0, sizeof(*st));
	st->st_ino = vino;
	st->st_mode = S_IFREG | 0644;
	st->st_nlink = 1;
	st->st_uid = root.uid;
	st->st_gid = root.gid;
	st->st_size = n;
	st->st_blocks = (n + 511) / 512;
	st->st_blksize = 4096;
	st->st_mtim.tv_sec = s.completed_ns / 1000000000;
	st->st_mtim.tv_nsec = s.completed_ns % 1000000000;
	st->st_ctim = st->st_atim = st->st_mtim;
	return 0;
}

int steps_vname(struct ckfs *fs, int kind, char *buf, size_t cap)
{
	char content[LAYOUT_TRACKER_MAX];
	struct idx_step s;

	if (steps_tracker_content(fs, kind, content, sizeof(content), &s) < 0)
		return -ENOENT;
	return layout_tracker_path((enum layout_kind)kind, s.step, -1, buf, cap);
}

int steps_tracker_name(struct ckfs *fs, uint64_t parent, const char *name)
{
	if (parent == IDX_ROOT_INO)
		return tracker_kind(fs, name);
	enum layout_kind rk = layout_per_rank_kind();

	if (rk != LAYOUT_NONE && strcmp(name, layout_desc(rk)->tracker_name) == 0 &&
	    steps_rank_dir(fs, parent) >= 0)
		return rk;
	return LAYOUT_NONE;
}

uint64_t steps_tracker_vino(struct ckfs *fs, uint64_t parent, int kind)
{
	if (layout_desc(kind)->tracker == LAYOUT_TRACKER_PER_RANK) {
		int r = steps_rank_dir(fs, parent);

		return r >= 0 && (unsigned)r < VINO_RANK_MAX ? VINO_RANK_META(r) : 0;
	}
	return VINO_BASE + (uint64_t)kind;
}

int steps_claim_record(struct ckfs *fs, int kind, const char *name, const char *buf, size_t len,
		       struct layout_tracker *t)
{
	int64_t id;
	int rc = layout_tracker_parse((enum layout_kind)kind, name, buf, len, t);

	if (idx_begin(fs->ix) == 0)
		steps_record(fs, idx_claim_add(fs->ix, name, buf, len, rc == 0 ? t->step : -1,
					       ckfs_now(fs), &id),
			     "the claim of tracker '%s'", name);
	return rc;
}

void steps_on_claim(struct ckfs *fs, int kind, const char *name, const char *buf, size_t len,
		    pid_t pid)
{
	struct layout_tracker t;
	int rc = steps_claim_record(fs, kind, name, buf, len, &t);
	int64_t step = rc == 0 ? t.step : -1, now = ckfs_now(fs);

	if (rc < 0) {
		ckpt_log("tracker '%s': ignored a claim that is not a step (%zu bytes)", name, len);
		return;
	}
	if (layout_desc(kind)->tracker == LAYOUT_TRACKER_PER_RANK) {
		struct layout_match m;

		/* the marker of a per-rank layout: every rank's tracker (MF1 rank_N/meta.json); a
		 * step completes once all claimed it */
		if (layout_classify(name, (enum layout_kind)kind, &m) == 0 && m.rank >= 0 &&
		    steps_mf1_note_claim(fs, m.rank, t.epoch, t.step, now) == 0)
			idx_step_foreach(fs->ix, steps_mf1_judge_cb, fs);
		return;
	}
	/* the daemon sees every claim as it is written: a claim seals the step it names, of every
	 * layout sharing the tracker (policy rule 2, with history) */
	for (int k = 1; k < LAYOUT_KIND_COUNT; k++) {
		char dname[LAYOUT_NAME_MAX + 1];
		struct idx_step s;
		uint64_t dir;

		if (policy_claim_seals((enum layout_kind)kind, step, (enum layout_kind)k, step,
				       true) != POLICY_SEAL_NAMED ||
		    layout_step_dir_name((enum layout_kind)k, step, dname, sizeof(dname)) < 0)
			continue;
		if (idx_step_by_name(fs->ix, k, dname, &s) == 0) {
			steps_rt_note(fs, s.id, pid);
			steps_seal(fs, &s, "tracker claim");
			return;
		}
		if (idx_dentry_lookup(fs->ix, IDX_ROOT_INO, dname, &dir) == 0) {
			struct layout_match m;

			if (layout_classify(dname, fs->steps.opt.layout, &m) == 0 &&
			    steps_step_of_path(fs, dname, &m, &s) == 0) {
				steps_seal(fs, &s, "tracker claim");
				return;
			}
		}
	}
	ckpt_log("tracker '%s' claims step %" PRId64 ", which does not exist: claim recorded, "
		 "trackers keep naming the newest complete step", name, step);
}
