/*
 * steps_judge.c — judging a step: the metadata and names it must hold, sealing, and evaluate
 * (complete, or set aside in quarantine).
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

#include "fs/fs_int.h"
#include "fs/layout.h"
#include "fs/steps_int.h"
#include "fs/validate.h"

/* Every "file_name" string anywhere in j names a regular file in directory dir? */
static bool names_exist(struct ckfs *fs, uint64_t dir, json_t *j, int depth, char *missing,
			size_t cap)
{
	const char *key;
	json_t *v;
	size_t i;

	if (depth > 32)
		return false;
	if (json_is_object(j)) {
		json_object_foreach(j, key, v) {
			if (strcmp(key, "file_name") == 0 && json_is_string(v)) {
				const char *n = json_string_value(v);
				struct idx_inode a;
				uint64_t ino;

				if (strchr(n, '/') || !strcmp(n, "..") ||
				    idx_dentry_lookup(fs->ix, dir, n, &ino) < 0 ||
				    idx_inode_get(fs->ix, ino, &a) < 0 || !S_ISREG(a.mode)) {
					snprintf(missing, cap, "%s", n);
					return false;
				}
			} else if (!names_exist(fs, dir, v, depth + 1, missing, cap)) {
				return false;
			}
		}
	} else if (json_is_array(j)) {
		json_array_foreach(j, i, v)
			if (!names_exist(fs, dir, v, depth + 1, missing, cap))
				return false;
	}
	return true;
}

/*
 * MindFormers 2.0's metadata.json lists the step's files (verify_ckpt_valid in mindformers
 * checkpoint.py checks that they exist): a step whose metadata.json names a file that is not
 * there is not complete. Returns true when there is nothing to check or every name exists.
 * DCP's .metadata is a pickle and is not read here.
 */
static bool step_metadata_ok(struct ckfs *fs, const struct idx_step *s, char *missing, size_t cap)
{
	struct ext_reader r = { .fs = fs };
	struct idx_inode a;
	json_t *j;
	uint64_t ino;
	char *buf;
	bool ok;

	if (s->kind != LAYOUT_MF2 || idx_dentry_lookup(fs->ix, s->dir_ino, "metadata.json", &ino) < 0 ||
	    idx_inode_get(fs->ix, ino, &a) < 0 || !S_ISREG(a.mode) || !a.has_hash ||
	    a.size > (64u << 20))
		return true;
	if (!(buf = malloc(a.size ? a.size : 1)))
		return true; /* cannot check now: the reaper tries again */
	if (idx_file_extents(fs->ix, ino, &r.ext, &r.n) < 0 ||
	    stp_ext_read(&r, buf, a.size, 0) != (ssize_t)a.size) {
		free(r.ext);
		free(buf);
		snprintf(missing, cap, "metadata.json (unreadable)");
		return false;
	}
	free(r.ext);
	j = json_loadb(buf, a.size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	free(buf);
	if (!j)
		return true; /* malformed JSON is flagged by the structure check */
	ok = names_exist(fs, s->dir_ino, j, 0, missing, cap);
	json_decref(j);
	return ok;
}

/*
 * Layouts whose step directories hold the same file names at every step and whose marker may
 * precede other ranks' files (framework-io.md: DeepSpeed writes `latest` before its barrier, HF
 * rank 0 writes trainer_state.json without waiting for the other ranks' rng_state_R.pth). A rank
 * that has not yet created its file leaves no trace; the previous complete step's names are the
 * only record of what the step should hold.
 */
bool stp_names_repeat(int kind)
{
	return kind == LAYOUT_DEEPSPEED || kind == LAYOUT_HF;
}

struct prev_ctx {
	const struct idx_step *s;
	struct idx_step best;
	bool found;
};

static int prev_cb(const struct idx_step *o, void *arg)
{
	struct prev_ctx *c = arg;

	if (o->kind == c->s->kind && o->id != c->s->id && o->state == IDX_STEP_COMPLETE &&
	    o->dir_ino && o->step < c->s->step && (!c->found || o->step > c->best.step)) {
		c->best = *o;
		c->found = true;
	}
	return 0;
}

/*
 * The name a file of step `from` has at step `to`: every run of digits whose value is from's
 * number becomes to's (zero-padded to the run's width when the run starts with 0), so HF's nested
 * checkpoint-N/global_stepN/ directory matches (names_cb also tries the name unchanged). Returns
 * 0, or -ENAMETOOLONG.
 */
static int renumber(const char *name, int64_t from, int64_t to, char *buf, size_t cap)
{
	size_t o = 0;

	for (const char *p = name; *p;) {
		size_t n = strspn(p, "0123456789");
		int w;

		if (n == 0) {
			if (o + 1 >= cap)
				return -ENAMETOOLONG;
			buf[o++] = *p++;
			continue;
		}
		char digits[20]; /* INT64_MAX has 19 digits */
		bool match = false;

		if (n < sizeof(digits)) {
			memcpy(digits, p, n);
			digits[n] = '\0';
			match = strtoll(digits, NULL, 10) == from;
		}
		if (match)
			w = snprintf(buf + o, cap - o, "%0*" PRId64, p[0] == '0' ? (int)n : 0, to);
		else
			w = snprintf(buf + o, cap - o, "%.*s", (int)n, p);
		if (w < 0 || (size_t)w >= cap - o)
			return -ENAMETOOLONG;
		o += (size_t)w;
		p += n;
	}
	buf[o] = '\0';
	return 0;
}

struct names_walk {
	struct ckfs *fs;
	int64_t from, to;  /* step numbers of the previous step and of the one judged */
	uint64_t (*pairs)[2]; /* [previous step's directory, same directory in this step] */
	size_t n, cap;
	uint64_t cur;      /* this step's directory matching the one being listed */
	char *missing;
	size_t mcap;
};

static int names_cb(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct names_walk *w = arg;
	char want[NAME_MAX + 1];
	struct idx_inode a;
	uint64_t mine;

	(void)cookie;
	if (!S_ISDIR(mode) && !S_ISREG(mode))
		return 0;
	if (renumber(name, w->from, w->to, want, sizeof(want)) < 0)
		return 0; /* no name it could have here */
	/* a digit run equal to the step by chance (DeepSpeed's "bf16_" at step 16) is not the
	 * step number: the name unchanged counts too */
	if (idx_dentry_lookup(w->fs->ix, w->cur, want, &mine) < 0 && strcmp(want, name) != 0 &&
	    idx_dentry_lookup(w->fs->ix, w->cur, name, &mine) == 0)
		snprintf(want, sizeof(want), "%s", name);
	if (idx_dentry_lookup(w->fs->ix, w->cur, want, &mine) < 0 ||
	    idx_inode_get(w->fs->ix, mine, &a) < 0 || (S_ISDIR(mode) != S_ISDIR(a.mode))) {
		snprintf(w->missing, w->mcap, "%s", want);
		return 1;
	}
	if (S_ISDIR(mode)) {
		if (stp_grow(&w->pairs, &w->cap, w->n, sizeof(*w->pairs)) < 0)
			return -ENOMEM;
		w->pairs[w->n][0] = ino;
		w->pairs[w->n][1] = mine;
		w->n++;
	}
	return 0;
}

/*
 * Does step s hold every file and directory name of the newest complete step of its layout
 * before it (names renumbered)? Only for stp_names_repeat layouts; a world size that shrank on
 * resume makes the check fail until a newer step starts (newer_step_started).
 * @missing: receives the first name not found, NUL-terminated, truncated to cap.
 * Returns 1 (all there), 2 (no previous complete step), 0 (one missing), or -ENOMEM / -EIO.
 */
static int has_previous_names(struct ckfs *fs, const struct idx_step *s, char *missing,
			      size_t cap)
{
	struct prev_ctx pc = { .s = s };
	struct names_walk w = { .fs = fs, .missing = missing, .mcap = cap };
	int rc;

	if ((rc = idx_step_foreach(fs->ix, prev_cb, &pc)) < 0)
		return rc;
	if (!pc.found)
		return 2;
	w.from = pc.best.step;
	w.to = s->step;
	w.cur = s->dir_ino;
	rc = idx_dir_list(fs->ix, pc.best.dir_ino, 0, names_cb, &w);
	for (size_t i = 0; rc == 0 && i < w.n; i++) { /* w.pairs grows as we go */
		w.cur = w.pairs[i][1];
		rc = idx_dir_list(fs->ix, w.pairs[i][0], 0, names_cb, &w);
	}
	free(w.pairs);
	if (rc == 1) {
		size_t l = strlen(missing);

		snprintf(missing + l, cap - l, " (in step %" PRId64 ")", pc.best.step);
		return 0;
	}
	return rc < 0 ? rc : 1;
}

struct newer_ctx {
	const struct idx_step *s;
	bool found;
};

static int newer_cb(const struct idx_step *o, void *arg)
{
	struct newer_ctx *c = arg;

	if (o->kind == c->s->kind && o->id != c->s->id && o->step > c->s->step &&
	    o->created_ns > c->s->sealed_ns)
		c->found = true;
	return 0;
}

/*
 * Did the trainer start a newer step of the same layout after s was sealed? DeepSpeed's barrier
 * follows `latest`, and every trainer finishes a save on all ranks before training on to the
 * next one, so a newer step started means every rank was done with s.
 */
static bool newer_step_started(struct ckfs *fs, const struct idx_step *s)
{
	struct newer_ctx c = { .s = s };

	return s->sealed_ns > 0 && idx_step_foreach(fs->ix, newer_cb, &c) == 0 && c.found;
}

/*
 * Judge step id. settled: its writers are gone; recovering: the daemon that saw it written is
 * gone; quiet: nothing was written into it for STEP_SETTLE_NS, or its writers are gone (the
 * reaper, steps_settle_now). A DeepSpeed or HF step (stp_names_repeat) with a previous complete
 * step completes as soon as it holds all that step's names, closed and durable; the first one
 * waits until it is quiet, since nothing says which files it should hold.
 */
void stp_evaluate(struct ckfs *fs, int64_t id, bool settled, bool recovering, bool quiet)
{
	struct idx_step s;
	struct walk w;
	struct store_hash dg;
	bool unprovable = false;
	int rc;

	if (idx_step_get(fs->ix, id, &s) < 0)
		return;
	if (s.state != IDX_STEP_WRITING && s.state != IDX_STEP_SEALED)
		return;
	if (!s.dir_ino)
		return;
	if (recovering)
		/* the daemon that saw this step being written is gone: trust no flag written
		 * after the content, re-check every file from the store */
		stp_revalidate_tree(fs, s.dir_ino);
	if (stp_walk_tree(fs, s.dir_ino, &w, false) < 0)
		return;
	store_hasher_digest(w.digest, &dg);
	store_hasher_free(w.digest);

	char absent[NAME_MAX + 64] = "";
	int have = 1; /* 1: every name of the previous complete step is here; 2: there is none */

	if (stp_names_repeat(s.kind) && s.state == IDX_STEP_SEALED && w.open == 0 &&
	    !newer_step_started(fs, &s) &&
	    (have = has_previous_names(fs, &s, absent, sizeof(absent))) < 0)
		return; /* cannot tell now: the reaper tries again */
	/* after a crash, a step whose marker may precede other ranks' files (DeepSpeed's `latest`,
	 * HF's trainer_state.json) has all its files only if it holds every name of the previous
	 * complete step, or a newer step was started */
	unprovable = recovering && fs->crash_recovery && !stp_marker_after_all_ranks(s.kind) &&
		     !newer_step_started(fs, &s) && have != 1;
	if (have == 2 && !quiet)
		have = 0; /* the first step of its layout: complete once quiet */
	if (idx_begin(fs->ix) < 0)
		return;
	rc = idx_step_set_figures(fs->ix, id, w.files, w.bytes, w.stored, dg.b);
	char missing[256] = "";
	bool listed_ok = true;

	if (s.state == IDX_STEP_SEALED && w.open == 0 && w.uncommitted == 0 && w.unsound == 0 &&
	    w.files > 0 && !unprovable && !step_metadata_ok(fs, &s, missing, sizeof(missing))) {
		listed_ok = false;
		w.unsound++; /* judged like a malformed file */
		if (settled)
			stp_logf("step '%s': metadata.json names '%s', which is not in the step",
				 s.name, missing);
	}
	if (rc == 0 && s.state == IDX_STEP_SEALED && w.open == 0 && w.uncommitted == 0 &&
	    w.unsound == 0 && w.files > 0 && !unprovable && listed_ok && have) {
		rc = stp_set_state(fs, &s, IDX_STEP_COMPLETE, NULL);
	} else if (rc == 0 && settled && w.open == 0) {
		char note[128];

		if (unprovable && absent[0])
			snprintf(note, sizeof(note), "the daemon stopped before every rank was known "
				 "to be done: '%.40s' is missing", absent);
		else if (unprovable)
			snprintf(note, sizeof(note), "the daemon stopped before every rank was known "
				 "to be done (%s)", have == 2 ? "no earlier complete step to compare with" :
				 "files still open");
		else if (!have && absent[0] && w.unsound == 0 && w.uncommitted == 0)
			snprintf(note, sizeof(note), "no writer left and '%.60s' never written: a "
				 "rank did not save", absent);
		else if (s.state == IDX_STEP_WRITING)
			snprintf(note, sizeof(note), "abandoned: never sealed, no writer left");
		else
			snprintf(note, sizeof(note), "%u torn or malformed, %u never closed of %" PRIu64
				 " files", w.unsound, w.uncommitted, w.files);
		if (w.files == 0 && s.state == IDX_STEP_WRITING && !unprovable)
			snprintf(note, sizeof(note), "abandoned empty");
		rc = stp_set_state(fs, &s, IDX_STEP_INCOMPLETE, note);
		if (rc == 0)
			rc = stp_move_to_quarantine(fs, &s);
	}
	if (rc < 0) {
		idx_rollback(fs->ix);
		return;
	}
	if (s.state == IDX_STEP_COMPLETE)
		ckpt_fault("step-complete-txn");
	if (idx_commit(fs->ix) < 0)
		return;
	if (s.state == IDX_STEP_COMPLETE) {
		stp_rt_drop(fs, id);
		if (stp_is_slot(&s))
			stp_slot_done(fs, &s);
		stp_retention(fs, s.kind);
	} else if (s.state == IDX_STEP_INCOMPLETE) {
		stp_rt_drop(fs, id);
		if (stp_is_slot(&s))
			stp_slot_done(fs, &s);
	}
}

/* ---- step rows from names ---- */

struct older_ctx {
	int kind;
	int64_t step;
	int64_t ids[16];
	size_t n;
};

static int older_sealed_cb(const struct idx_step *o, void *arg)
{
	struct older_ctx *c = arg;

	if (o->kind == c->kind && o->state == IDX_STEP_SEALED && o->step < c->step &&
	    c->n < sizeof(c->ids) / sizeof(c->ids[0]))
		c->ids[c->n++] = o->id;
	return 0;
}

/*
 * A DeepSpeed or HF step `step` was just started: every rank is done with the sealed steps
 * before it (newer_step_started), which may complete now rather than once quiet, so the new
 * step has a complete one to be compared with when its own marker comes.
 */
static void judge_older_sealed(struct ckfs *fs, int kind, int64_t step)
{
	struct older_ctx c = { .kind = kind, .step = step };

	if (idx_step_foreach(fs->ix, older_sealed_cb, &c) < 0)
		return;
	for (size_t i = 0; i < c.n; i++)
		stp_evaluate(fs, c.ids[i], false, false, false);
}

/* The step whose directory is rel[0, m->step_prefix_len) (creating its row if needed). */
int stp_step_of_path(struct ckfs *fs, const char *rel, const struct layout_match *m,
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
	if ((rc = stp_lookup_path(fs, dname, &dir)) < 0)
		return rc;
	if (idx_step_by_dir(fs->ix, dir, ret) == 0)
		return 0;
	if ((rc = idx_begin(fs->ix)) < 0)
		return rc;
	/* a slot's number is its newest sealed version's (stp_slot_number); 0 until sealed */
	rc = idx_step_create(fs->ix, m->kind, dname, (m->flags & LAYOUT_F_SLOT) ? 0 : m->step,
			     dir, ckfs_now(fs), &id);
	if (rc == 0)
		rc = idx_commit(fs->ix);
	else
		idx_rollback(fs->ix);
	if (rc < 0)
		return rc;
	if (stp_names_repeat(m->kind))
		judge_older_sealed(fs, m->kind, m->step);
	return idx_step_get(fs->ix, id, ret);
}

/*
 * Does the layout write its commit marker only after every rank finished its files? Then a
 * sealed step whose files are all closed and sound is complete at once. framework-io.md:
 * Megatron and MindFormers 2.0 write the tracker after a barrier; the DCP coordinator renames
 * .metadata after gathering all ranks; InternEvo's rank 0 writes N.step last; Orbax renames the
 * step directory after all writes. DeepSpeed writes `latest` before its barrier and HF rank 0
 * writes trainer_state.json without waiting for other ranks' files: those wait for the step to
 * be quiet (STEP_SETTLE_NS) in the reaper.
 */
bool stp_marker_after_all_ranks(int kind)
{
	switch (kind) {
	case LAYOUT_MEGATRON:
	case LAYOUT_MF2:
	case LAYOUT_DCP:
	case LAYOUT_INTERNEVO:
	case LAYOUT_ORBAX:
		return true;
	default:
		return false;
	}
}

void stp_seal(struct ckfs *fs, struct idx_step *s, const char *why)
{
	if (s->state == IDX_STEP_INCOMPLETE) {
		/* a marker for a step set aside: bring it back if its files are sound */
		struct walk w;

		if (stp_walk_tree(fs, s->dir_ino, &w, false) < 0)
			return;
		store_hasher_free(w.digest);
		if (w.unsound || w.uncommitted || w.files == 0)
			return;
		if (idx_begin(fs->ix) < 0)
			return;
		if (stp_move_back(fs, s) < 0 || stp_set_state(fs, s, IDX_STEP_SEALED, why) < 0 ||
		    idx_commit(fs->ix) < 0) {
			idx_rollback(fs->ix);
			return;
		}
	} else if (s->state == IDX_STEP_WRITING) {
		if (idx_begin(fs->ix) < 0)
			return;
		if (stp_set_state(fs, s, IDX_STEP_SEALED, why) < 0 || idx_commit(fs->ix) < 0) {
			idx_rollback(fs->ix);
			return;
		}
	}
	if (stp_marker_after_all_ranks(s->kind)) {
		/* every rank was done before the marker */
		stp_evaluate(fs, s->id, false, false, false);
	} else {
		stp_rt_note(fs, s->id, 0); /* else the reaper judges it once it is quiet */
		if (stp_names_repeat(s->kind))
			/* all the last step's names? */
			stp_evaluate(fs, s->id, false, false, false);
	}
}
