/* SPDX-License-Identifier: MIT */
/*
 * facts.c — policy_step_facts: the one place the facts rule 3 judges (struct policy_facts) are
 * gathered from the index, for the daemon (fs/steps/steps_judge.c), `ckptctl import`
 * (tools/ckptctl/import.c) and whoever else judges a step. What differs between those callers
 * is what they know of a step's writers and files, and it comes in as struct policy_step_in;
 * what the index says (the previous complete step's names, a newer step started, the names
 * metadata.json lists) is read here, under the same conditions for every caller.
 */
#include "fs/policy/policy.h"

#include <assert.h>
#include <errno.h>
#include <string.h>

struct newer_ctx {
	const struct idx_step *s;
	bool found;
};

/* idx_step_newest_each callback (steps of s's kind in one state, newest first) */
static int newer_cb(const struct idx_step *o, void *arg)
{
	struct newer_ctx *c = arg;

	if (o->step <= c->s->step)
		return 1; /* newest first: none newer below */
	if (o->id != c->s->id && o->created_ns > c->s->sealed_ns) {
		c->found = true;
		return 1;
	}
	return 0;
}

/*
 * Did the trainer start a newer step of the same layout after s was sealed? DeepSpeed's barrier
 * follows `latest`, and every trainer finishes a save on all ranks before training on to the
 * next one, so a newer step started means every rank was done with s. A step not sealed yet
 * (sealed_ns 0: import judges before it records the seal) has no such evidence, nor has a row
 * fsck made again (sealed when the newer one was made): a tree shows no order (rule 3). An
 * index error answers false: the evidence is then only not seen.
 */
static bool newer_step_started(struct idx *ix, const struct idx_step *s)
{
	struct newer_ctx c = { .s = s };

	if (s->sealed_ns <= 0)
		return false;
	/* per state, newest first down to s: the steps above s, not the whole store */
	for (int st = 0; st < IDX_STEP_STATE_COUNT && !c.found; st++)
		if (idx_step_newest_each(ix, 1u << s->kind, st, newer_cb, &c) < 0)
			return false;
	return c.found;
}

/* newer_step_started, read from the index once per judgement (*memo: -1 not yet, else 0/1). */
static bool newer_once(struct idx *ix, const struct idx_step *s, int *memo)
{
	if (*memo < 0)
		*memo = newer_step_started(ix, s);
	return *memo;
}

int policy_step_facts(struct idx *ix, struct store *st, const struct idx_step *s,
		      const struct policy_step_in *in, char *absent, char *unlisted, size_t cap,
		      struct policy_facts *ret)
{
	struct policy_facts f = {
		.sealed = s->state == IDX_STEP_SEALED || in->sealed, .settled = in->settled,
		.quiet = in->quiet, .files = in->files, .open = in->open,
		.uncommitted = in->uncommitted, .unsound = in->unsound,
		.unreadable = in->unreadable, .previous = POLICY_PREV_ALL, .absent = absent,
		.unlisted = unlisted,
		.by_tracker = policy_found_by_tracker((enum layout_kind)s->kind),
		.recovering = in->recovering,
	};
	uint64_t kept;
	int newer = -1, rc;

	assert(cap > 0);
	absent[0] = unlisted[0] = '\0';
	/* a marker that may precede other ranks' files: the previous complete step's names are the
	 * record of what the step holds, unless a newer step started (every rank was done) */
	if (policy_names_repeat(s->kind) && f.sealed && f.open == 0 &&
	    !newer_once(ix, s, &newer)) {
		if ((rc = policy_previous_names(ix, s, absent, cap)) < 0)
			return rc;
		f.previous = rc;
		/* a rewrite in place: the files of its complete version are in its directory from
		 * the start; each must be written again (DeepSpeed's `latest` seals it while
		 * another rank is still to rewrite its own) */
		if (f.previous != POLICY_PREV_MISSING && in->kept_dir &&
		    in->kept_dir(in->arg, s, &kept)) {
			if ((rc = policy_rewritten_names(ix, s, kept, absent, cap)) < 0)
				return rc;
			f.previous = rc;
		}
	}
	/* after a crash, a step whose marker may precede other ranks' files (DeepSpeed's `latest`,
	 * HF's trainer_state.json) has all its files only if it holds every name of the previous
	 * complete step, or a newer step was started */
	f.unprovable = in->recovering && in->crashed &&
		       !policy_marker_after_all_ranks(s->kind) && f.previous != POLICY_PREV_ALL &&
		       !newer_once(ix, s, &newer);
	/* a copy (rule 3): what a `cp -r` leaves, told from a crashed save by its one writer,
	 * gone, and every file whole; the steps of a daemon that is gone have no known writers */
	if (f.by_tracker && !f.sealed && f.settled && !f.recovering) {
		f.writers = in->writers;
		f.rewrite = in->kept_dir && in->kept_dir(in->arg, s, &kept);
	}
	if (in->check_listed && f.sealed && f.open == 0 && f.uncommitted == 0 && f.unsound == 0 &&
	    f.unreadable == 0 && f.files > 0 && !f.unprovable &&
	    (rc = policy_listed_names(ix, st, s, unlisted, cap)) < 0)
		return rc;
	*ret = f;
	return 0;
}
