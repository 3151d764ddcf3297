/*
 * test_policy.c — unit tests of the checkpoint policy (fs/policy/policy.c): entries, which
 * steps a claim seals, the completeness verdict, the previous step's names, step figures and
 * digest, the step report. Real SQLite indexes in a fresh temporary directory per test.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/policy/policy.h"
#include "tests/lib/ctest.h"

static char tdir[64];
static struct idx *ix;

static void setup(void)
{
	char db[128];

	ct_tmpdir(tdir, sizeof(tdir), "ckpolicy");
	snprintf(db, sizeof(db), "%s/index.db", tdir);
	cr_assert_eq(idx_open(db, 0, 0, 0, 1, &ix), 0);
}

static void teardown(void)
{
	idx_close(ix);
	ct_rmtree(tdir);
}

/* a directory or a committed regular file (one extent with a digest from its name) */
static uint64_t mk(uint64_t parent, const char *name, bool dir, uint32_t flags)
{
	struct idx_inode a = { .mode = (dir ? S_IFDIR | 0755 : S_IFREG | 0644), .nlink = 1,
			       .flags = flags };
	uint64_t ino;

	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_inode_create(ix, &a, &ino), 0);
	cr_assert_eq(idx_dentry_add(ix, parent, name, ino), 0);
	if (!dir) {
		struct idx_extent e = { .offset = 0, .length = 100, .stored_size = 40 };
		uint8_t h[IDX_HASH_LEN] = { 0 };

		snprintf((char *)e.hash, sizeof(e.hash), "%s", name);
		snprintf((char *)h, sizeof(h), "f:%s", name);
		cr_assert_eq(idx_file_set_content(ix, ino, &e, 1, 100, h, 1, NULL, NULL), 0);
	}
	cr_assert_eq(idx_commit(ix), 0);
	return ino;
}

static int64_t mkstep(int kind, const char *name, int64_t step, uint64_t dir, int state)
{
	int64_t id;

	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_step_create(ix, kind, name, step, dir, 1, &id), 0);
	if (state != IDX_STEP_WRITING)
		cr_assert_eq(idx_step_set_state(ix, id, state, 2, "test"), 0);
	cr_assert_eq(idx_commit(ix), 0);
	return id;
}

/* ---- 1. entries ---- */

Test(policy, entries)
{
	struct layout_match m;

	cr_assert_eq(policy_entry_of("iter_0000010", S_IFDIR, LAYOUT_NONE, &m), POLICY_STEP_DIR);
	cr_assert_eq(m.kind, LAYOUT_MEGATRON);
	cr_assert_eq(policy_entry_of("iter_0000010", S_IFREG, LAYOUT_NONE, NULL), POLICY_OTHER);
	cr_assert_eq(policy_entry_of("iter_0000010/mp_rank_00/model_optim_rng.pt", S_IFREG,
				     LAYOUT_NONE, NULL), POLICY_STEP_FILE);
	cr_assert_eq(policy_entry_of("latest_checkpointed_iteration.txt", S_IFREG, LAYOUT_NONE,
				     NULL), POLICY_TRACKER);
	cr_assert_eq(policy_entry_of("latest", S_IFREG, LAYOUT_NONE, NULL), POLICY_TRACKER);
	cr_assert_eq(policy_entry_of("latest", S_IFDIR, LAYOUT_NONE, NULL), POLICY_OTHER);
	cr_assert_eq(policy_entry_of("step-20/.metadata", S_IFREG, LAYOUT_NONE, NULL),
		     POLICY_MARKER);
	cr_assert_eq(policy_entry_of("checkpoint-30/trainer_state.json", S_IFREG, LAYOUT_NONE,
				     NULL), POLICY_MARKER);
	cr_assert_eq(policy_entry_of("40/40.step", S_IFREG, LAYOUT_NONE, NULL), POLICY_MARKER);
	/* an in-progress name is a step directory, as the daemon sees its files (sealed only by
	 * its rename); MF1's per-rank meta.json and files are per-rank entries */
	cr_assert_eq(policy_entry_of("tmp-checkpoint-30", S_IFDIR, LAYOUT_NONE, NULL),
		     POLICY_STEP_DIR);
	cr_assert_eq(policy_entry_of("30.orbax-checkpoint-tmp", S_IFDIR, LAYOUT_NONE, &m),
		     POLICY_STEP_DIR);
	cr_assert_eq(m.kind, LAYOUT_ORBAX);
	cr_assert_eq(policy_entry_of("rank_0/meta.json", S_IFREG, LAYOUT_NONE, NULL),
		     POLICY_RANK_TRACKER);
	cr_assert_eq(policy_entry_of("rank_0/llama_rank_0-1_10.ckpt", S_IFREG, LAYOUT_NONE, NULL),
		     POLICY_RANK_FILE);
	cr_assert_eq(policy_entry_of("rank_0/llama_rank_0-1_10.ckpt.tmp", S_IFREG, LAYOUT_NONE,
				     &m), POLICY_RANK_FILE);
	cr_assert(m.flags & LAYOUT_F_TMP);
	cr_assert_eq(policy_claim_kind("rank_0/meta.json", LAYOUT_NONE), LAYOUT_NONE);
	/* a forced layout recognises only its own names */
	cr_assert_eq(policy_entry_of("iter_0000010", S_IFDIR, LAYOUT_HF, NULL), POLICY_OTHER);
	cr_assert_eq(policy_claim_kind("latest", LAYOUT_NONE), LAYOUT_DEEPSPEED);
	cr_assert_eq(policy_claim_kind("iter_0000010/x", LAYOUT_NONE), LAYOUT_NONE);
	/* Lightning: a root step file is its own step; last.ckpt is a checkpoint, not a claim */
	cr_assert_eq(policy_entry_of("epoch=0-step=10.ckpt", S_IFREG, LAYOUT_NONE, &m),
		     POLICY_TOP_FILE);
	cr_assert_eq(m.kind, LAYOUT_LIGHTNING);
	cr_assert_eq(m.step, 10);
	cr_assert_eq(policy_entry_of("epoch=0-step=10.ckpt", S_IFDIR, LAYOUT_NONE, NULL),
		     POLICY_OTHER);
	cr_assert_eq(policy_entry_of("x/epoch=0-step=10.ckpt", S_IFREG, LAYOUT_NONE, NULL),
		     POLICY_OTHER);
	cr_assert_eq(policy_entry_of("last.ckpt", S_IFREG, LAYOUT_NONE, NULL), POLICY_OTHER);
	cr_assert_eq(policy_claim_kind("last.ckpt", LAYOUT_NONE), LAYOUT_NONE);
}

struct top_seen {
	char names[8][64];
	int64_t steps[8];
	int n;
};

static int top_seen_cb(enum layout_kind kind, const char *name, int64_t step, uint64_t ino,
		       void *arg)
{
	struct top_seen *t = arg;

	(void)ino;
	cr_assert_eq(kind, LAYOUT_LIGHTNING);
	cr_assert_lt(t->n, 8);
	snprintf(t->names[t->n], sizeof(t->names[0]), "%s", name);
	t->steps[t->n++] = step;
	return 0;
}

/* Whole root step files are steps; torn, malformed, temp, nested or tracker files are not. */
Test(policy, top_steps, .init = setup, .fini = teardown)
{
	uint64_t sub = mk(IDX_ROOT_INO, "sub", true, 0);
	struct top_seen seen = { 0 };
	struct idx_inode a = { .mode = S_IFREG | 0644, .has_hash = true };

	mk(IDX_ROOT_INO, "epoch=0-step=10.ckpt", false, IDX_INODE_VALID);
	mk(IDX_ROOT_INO, "epoch=0-step=20.ckpt", false, IDX_INODE_MALFORMED);
	mk(IDX_ROOT_INO, "epoch=0-step=30.ckpt", false, IDX_INODE_TORN);
	mk(IDX_ROOT_INO, "epoch=0-step=40-v1.ckpt", false, 0);
	mk(IDX_ROOT_INO, "epoch=0-step=50.ckpt.ab_9xyz0.tmp", false, 0);
	mk(IDX_ROOT_INO, "last.ckpt", false, IDX_INODE_VALID);
	mk(sub, "epoch=0-step=60.ckpt", false, 0);
	cr_assert_eq(policy_top_steps(ix, top_seen_cb, &seen), 0);
	cr_assert_eq(seen.n, 2);
	cr_assert_str_eq(seen.names[0], "epoch=0-step=10.ckpt");
	cr_assert_eq(seen.steps[0], 10);
	cr_assert_str_eq(seen.names[1], "epoch=0-step=40-v1.ckpt");
	cr_assert_eq(seen.steps[1], 40);
	cr_assert(policy_top_whole(&a));
	a.has_hash = false; /* never committed: not closed */
	cr_assert(!policy_top_whole(&a));
}

/*
 * Rule 1: an all-digit directory is InternEvo's (or Orbax's) only on that layout's evidence.
 * xfstests names its work directories `$$` and `$seq`, a user keeps `2024/` of logs: under
 * auto-detection they are not steps, while the marker `N/N.step` InternEvo writes last
 * (tests/traces/internevo.md) is, and -o layout= still pins the name alone.
 */
Test(policy, digits_need_evidence)
{
	struct layout_match m;

	cr_assert_neq(policy_entry_of("2024", S_IFDIR, LAYOUT_NONE, &m), POLICY_STEP_DIR);
	cr_assert_eq(policy_entry_of("2024", S_IFDIR, LAYOUT_NONE, &m), POLICY_CANDIDATE);
	cr_assert(policy_needs_evidence(&m));
	cr_assert_neq(policy_entry_of("12345", S_IFDIR, LAYOUT_NONE, NULL), POLICY_STEP_DIR);
	cr_assert_eq(policy_entry_of("2024/sub/log", S_IFREG, LAYOUT_NONE, &m), POLICY_STEP_FILE);
	cr_assert(policy_needs_evidence(&m));
	cr_assert_eq(policy_entry_of("iter_0000010/x", S_IFREG, LAYOUT_NONE, &m), POLICY_STEP_FILE);
	cr_assert(!policy_needs_evidence(&m));
	cr_assert_eq(policy_entry_of("2024/2024.step", S_IFREG, LAYOUT_NONE, NULL), POLICY_MARKER);
	cr_assert_eq(policy_entry_of("2024/commit_success.txt", S_IFREG, LAYOUT_NONE, NULL),
		     POLICY_MARKER);
	cr_assert_eq(policy_entry_of("2024", S_IFDIR, LAYOUT_INTERNEVO, &m), POLICY_STEP_DIR);
	cr_assert(!policy_needs_evidence(&m));
	cr_assert_eq(policy_entry_of("2024", S_IFDIR, LAYOUT_ORBAX, NULL), POLICY_STEP_DIR);
}

/* Rule 1: an all-digit step is Orbax's once Orbax's marker is in it, whichever marker came
 * first (InternEvo's N.step beside Orbax's commit_success.txt). */
Test(policy, marker_kind)
{
	struct layout_match step, orbax, dcp;

	cr_assert_eq(policy_entry_of("40/40.step", S_IFREG, LAYOUT_NONE, &step), POLICY_MARKER);
	cr_assert_eq(policy_entry_of("40/commit_success.txt", S_IFREG, LAYOUT_NONE, &orbax),
		     POLICY_MARKER);
	cr_assert_eq(policy_marker_kind(step.kind, "40", &step, LAYOUT_NONE), LAYOUT_INTERNEVO);
	cr_assert_eq(policy_marker_kind(LAYOUT_INTERNEVO, "40", &orbax, LAYOUT_NONE),
		     LAYOUT_ORBAX);
	cr_assert_eq(policy_marker_kind(LAYOUT_ORBAX, "40", &step, LAYOUT_NONE), LAYOUT_ORBAX);
	/* a name that says its layout: its marker changes nothing */
	cr_assert_eq(policy_entry_of("step-20/.metadata", S_IFREG, LAYOUT_NONE, &dcp),
		     POLICY_MARKER);
	cr_assert_eq(policy_marker_kind(LAYOUT_DCP, "step-20", &dcp, LAYOUT_NONE), LAYOUT_DCP);
}

struct rank_seen {
	char names[8][32];
	int n;
};

static int rank_seen_cb(enum layout_kind kind, const char *name, int64_t epoch, int64_t step,
			void *arg)
{
	struct rank_seen *r = arg;

	cr_assert_eq(kind, LAYOUT_MF1);
	cr_assert_eq(epoch, 1);
	cr_assert(step == 10 || step == 20);
	cr_assert_lt(r->n, 8);
	snprintf(r->names[r->n++], sizeof(r->names[0]), "%s", name);
	return 0;
}

/* Rule 1: a per-rank layout's steps are the (epoch, step) its ranks' files are named for, each
 * once; a file under its .tmp name, meta.json and a directory not a rank's name none. */
Test(policy, rank_steps, .init = setup, .fini = teardown)
{
	uint64_t r0 = mk(IDX_ROOT_INO, "rank_0", true, 0), r1 = mk(IDX_ROOT_INO, "rank_1", true, 0);
	uint64_t other = mk(IDX_ROOT_INO, "logs", true, 0);
	struct rank_seen seen = { 0 };

	mk(r0, "llama_rank_0-1_10.ckpt", false, 0);
	mk(r0, "llama_rank_0-1_20.ckpt", false, 0);
	mk(r0, "meta.json", false, 0);
	mk(r1, "llama_rank_1-1_10.ckpt", false, 0);
	mk(r1, "llama_rank_1-1_30.ckpt.tmp", false, 0);
	mk(other, "llama_rank_0-1_40.ckpt", false, 0);
	cr_assert_eq(policy_rank_steps(ix, rank_seen_cb, &seen), 0);
	cr_assert_eq(seen.n, 2);
	cr_assert_str_eq(seen.names[0], "1_10");
	cr_assert_str_eq(seen.names[1], "1_20");
}

/* ---- 2. sealing ---- */

Test(policy, claim_seals)
{
	/* with history a claim seals exactly the step it names */
	cr_assert_eq(policy_claim_seals(LAYOUT_MEGATRON, 20, LAYOUT_MEGATRON, 20, true),
		     POLICY_SEAL_NAMED);
	cr_assert_eq(policy_claim_seals(LAYOUT_MEGATRON, 20, LAYOUT_MEGATRON, 10, true),
		     POLICY_SEAL_NONE);
	/* without it, the last claim stands for the earlier steps, never the later ones */
	cr_assert_eq(policy_claim_seals(LAYOUT_MEGATRON, 20, LAYOUT_MEGATRON, 10, false),
		     POLICY_SEAL_LATER);
	cr_assert_eq(policy_claim_seals(LAYOUT_MEGATRON, 20, LAYOUT_MEGATRON, 30, false),
		     POLICY_SEAL_NONE);
	/* the tracker file Megatron and MindFormers 2.0 share seals both; DeepSpeed's does not */
	cr_assert_eq(policy_claim_seals(LAYOUT_MEGATRON, 20, LAYOUT_MF2, 20, true),
		     POLICY_SEAL_NAMED);
	cr_assert_eq(policy_claim_seals(LAYOUT_DEEPSPEED, 20, LAYOUT_MEGATRON, 20, true),
		     POLICY_SEAL_NONE);
	cr_assert_eq(policy_claim_seals(LAYOUT_DEEPSPEED, 20, LAYOUT_MEGATRON, 10, false),
		     POLICY_SEAL_NONE);
	/* a claim that is not a step seals nothing */
	cr_assert_eq(policy_claim_seals(LAYOUT_MEGATRON, -1, LAYOUT_MEGATRON, 10, false),
		     POLICY_SEAL_NONE);
}

/* ---- 3. completeness ---- */

static struct policy_facts whole(void)
{
	return (struct policy_facts){ .sealed = true, .settled = true, .quiet = true, .files = 3,
				      .previous = POLICY_PREV_ALL, .absent = "", .unlisted = "" };
}

Test(policy, judge)
{
	struct policy_facts f = whole();
	char why[256];

	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_COMPLETE);
	f.sealed = false;
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_INCOMPLETE);
	cr_assert(strstr(why, "never sealed"), "%s", why);
	f.files = 0;
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_INCOMPLETE);
	cr_assert_str_eq(why, "never sealed, empty");
	f = whole();
	f.files = 0;
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_INCOMPLETE);
	cr_assert(strstr(why, "holds no file"), "%s", why);
	f = whole();
	f.unsound = 1;
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_INCOMPLETE);
	cr_assert(strstr(why, "1 torn or malformed"), "%s", why);
	f.settled = false; /* a writer may still replace it */
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_WAIT);
	f = whole();
	f.unreadable = 2;
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_INCOMPLETE);
	cr_assert(strstr(why, "2 of 3 files could not be read"), "%s", why);
	f = whole();
	f.open = 1; /* never set aside while a file is held open, even settled */
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_WAIT);
	f = whole();
	f.unlisted = "model-0000001-0000002.safetensors";
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_INCOMPLETE);
	cr_assert(strstr(why, "metadata.json names"), "%s", why);
	/* repeating layouts: a missing name of the previous step; no previous step needs quiet */
	f = whole();
	f.previous = POLICY_PREV_MISSING;
	f.absent = "mp_rank_01_model_states.pt (in step 10)";
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_INCOMPLETE);
	cr_assert(strstr(why, "a rank did not save"), "%s", why);
	f = whole();
	f.previous = POLICY_PREV_NONE;
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_COMPLETE);
	f.quiet = f.settled = false;
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_WAIT);
	f = whole();
	f.unprovable = true;
	f.previous = POLICY_PREV_NONE;
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_INCOMPLETE);
	cr_assert(strstr(why, "no earlier complete step"), "%s", why);
}

/* rule 3's copy: what `cp -r` of a saved step leaves, and the crashed saves it is told from */
static struct policy_facts copy(void)
{
	struct policy_facts f = whole();

	f.sealed = false;
	f.by_tracker = true;
	f.writers = 1;
	return f;
}

Test(policy, judge_copy)
{
	struct policy_facts f = copy();
	char why[256];

	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_COPIED);
	cr_assert(strstr(why, "a copy"), "%s", why);
	f.settled = false; /* its writer is still copying */
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_WAIT);
	f = copy();
	f.sealed = true; /* a claim named it: judged as any sealed step */
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_COMPLETE);
	/* crashed saves: a file torn or never closed, several ranks, writers unknown */
	f = copy();
	f.unsound = 1;
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_INCOMPLETE);
	f = copy();
	f.uncommitted = 1;
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_INCOMPLETE);
	f = copy();
	f.writers = 2;
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_INCOMPLETE);
	f.writers = 0;
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_INCOMPLETE);
	f = copy();
	f.recovering = true;
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_INCOMPLETE);
	/* a rewrite of a complete step left unsealed: its kept version comes back */
	f = copy();
	f.rewrite = true;
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_INCOMPLETE);
	/* a layout resolved by scanning would load it: never a copy */
	f = copy();
	f.by_tracker = false;
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_INCOMPLETE);
	f = copy();
	f.files = 0;
	cr_assert_eq(policy_judge(&f, why, sizeof(why)), POLICY_INCOMPLETE);

	cr_assert(policy_found_by_tracker(LAYOUT_MEGATRON));
	cr_assert(policy_found_by_tracker(LAYOUT_MF2));
	cr_assert(policy_found_by_tracker(LAYOUT_DEEPSPEED));
	cr_assert_not(policy_found_by_tracker(LAYOUT_MF1));
	cr_assert_not(policy_found_by_tracker(LAYOUT_HF));
	cr_assert_not(policy_found_by_tracker(LAYOUT_DCP));
	cr_assert_not(policy_found_by_tracker(LAYOUT_ORBAX));
	cr_assert_not(policy_found_by_tracker(LAYOUT_INTERNEVO));
}

/* ---- previous names, figures, digest (on a real index) ---- */

Test(policy, previous_names, .init = setup, .fini = teardown)
{
	uint64_t d10 = mk(IDX_ROOT_INO, "global_step10", true, 0);
	uint64_t d20 = mk(IDX_ROOT_INO, "global_step20", true, 0);
	struct idx_step s20;
	char missing[256] = "";
	int64_t id20;

	mk(d10, "mp_rank_00_model_states.pt", false, 0);
	mk(d10, "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt", false, 0);
	mk(d10, "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt", false, 0);
	id20 = mkstep(LAYOUT_DEEPSPEED, "global_step20", 20, d20, IDX_STEP_SEALED);
	cr_assert_eq(idx_step_get(ix, id20, &s20), 0);
	/* no complete step before it yet */
	cr_assert_eq(policy_previous_names(ix, &s20, missing, sizeof(missing)), POLICY_PREV_NONE);
	mkstep(LAYOUT_DEEPSPEED, "global_step10", 10, d10, IDX_STEP_COMPLETE);
	mk(d20, "mp_rank_00_model_states.pt", false, 0);
	mk(d20, "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt", false, 0);
	cr_assert_eq(policy_previous_names(ix, &s20, missing, sizeof(missing)),
		     POLICY_PREV_MISSING);
	cr_assert_str_eq(missing, "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt (in step 10)");
	mk(d20, "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt", false, 0);
	cr_assert_eq(policy_previous_names(ix, &s20, missing, sizeof(missing)), POLICY_PREV_ALL);
}

Test(policy, previous_names_renumbered, .init = setup, .fini = teardown)
{
	uint64_t d10 = mk(IDX_ROOT_INO, "checkpoint-10", true, 0);
	uint64_t d20 = mk(IDX_ROOT_INO, "checkpoint-20", true, 0);
	struct idx_step s20;
	char missing[256] = "";
	int64_t id20;

	mk(mk(d10, "global_step10", true, 0), "mp_rank_00_model_states.pt", false, 0);
	mkstep(LAYOUT_HF, "checkpoint-10", 10, d10, IDX_STEP_COMPLETE);
	id20 = mkstep(LAYOUT_HF, "checkpoint-20", 20, d20, IDX_STEP_SEALED);
	cr_assert_eq(idx_step_get(ix, id20, &s20), 0);
	mk(mk(d20, "global_step20", true, 0), "mp_rank_00_model_states.pt", false, 0);
	cr_assert_eq(policy_previous_names(ix, &s20, missing, sizeof(missing)), POLICY_PREV_ALL,
		     "%s", missing);
}

static int count_torn(const char *name, uint64_t ino, const struct idx_inode *a, void *arg)
{
	(void)name;
	(void)ino;
	if (a->flags & IDX_INODE_TORN)
		(*(unsigned *)arg)++;
	return 0;
}

Test(policy, figures_and_digest, .init = setup, .fini = teardown)
{
	uint64_t a = mk(IDX_ROOT_INO, "iter_0000010", true, 0);
	uint64_t b = mk(IDX_ROOT_INO, "iter_0000020", true, 0);
	struct policy_figures fa, fb;
	unsigned torn = 0;

	mk(mk(a, "mp_rank_00", true, 0), "model_optim_rng.pt", false, 0);
	mk(a, "extra.bin", false, IDX_INODE_TORN);
	cr_assert_eq(policy_step_walk(ix, a, count_torn, &torn, &fa), 0);
	cr_assert_eq(fa.files, 2);
	cr_assert_eq(fa.bytes, 200);
	cr_assert_eq(fa.stored, 80);
	cr_assert_eq(torn, 1);
	/* the same names and contents elsewhere give the same digest; another name does not */
	mk(mk(b, "mp_rank_00", true, 0), "model_optim_rng.pt", false, 0);
	mk(b, "extra.bin", false, 0);
	cr_assert_eq(policy_step_walk(ix, b, NULL, NULL, &fb), 0);
	cr_assert_eq(memcmp(fa.digest.b, fb.digest.b, STORE_HASH_LEN), 0);
	mk(b, "more.bin", false, 0);
	cr_assert_eq(policy_step_walk(ix, b, NULL, NULL, &fb), 0);
	cr_assert_eq(fb.files, 3);
	cr_assert_neq(memcmp(fa.digest.b, fb.digest.b, STORE_HASH_LEN), 0);
}

/* ---- 5. reporting ---- */

static void set_mtime(uint64_t ino, int64_t t)
{
	struct idx_inode a;

	cr_assert_eq(idx_inode_get(ix, ino, &a), 0);
	a.mtime_ns = t;
	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_inode_update(ix, &a), 0);
	cr_assert_eq(idx_commit(ix), 0);
}

/* a new version of a complete step starts with the old version's files in its directory */
Test(policy, rewritten_names, .init = setup, .fini = teardown)
{
	char miss[128];
	uint64_t kept = mk(IDX_ROOT_INO, "kept", true, 0);
	uint64_t ksub = mk(kept, "sub", true, 0);

	mk(kept, "mp_rank_00_model_states.pt", false, 0);
	mk(ksub, "zero_pp_rank_1_mp_rank_00_optim_states.pt", false, 0);
	uint64_t d = mk(IDX_ROOT_INO, "global_step4", true, 0);
	uint64_t dsub = mk(d, "sub", true, 0);
	uint64_t f0 = mk(d, "mp_rank_00_model_states.pt", false, 0);
	uint64_t f1 = mk(dsub, "zero_pp_rank_1_mp_rank_00_optim_states.pt", false, 0);
	struct idx_step s = { .kind = LAYOUT_DEEPSPEED, .step = 4, .dir_ino = d,
			      .created_ns = 50 };

	set_mtime(f0, 60); /* rank 0 wrote its file again; rank 1 not yet */
	set_mtime(f1, 10);
	cr_assert_eq(policy_rewritten_names(ix, &s, kept, miss, sizeof(miss)), POLICY_PREV_MISSING);
	cr_assert(strstr(miss, "zero_pp_rank_1_mp_rank_00_optim_states.pt, not written again"),
		  "%s", miss);
	set_mtime(f1, 70);
	cr_assert_eq(policy_rewritten_names(ix, &s, kept, miss, sizeof(miss)), POLICY_PREV_ALL);
	/* a name of the complete version that the new one lacks */
	mk(kept, "zero_to_fp32.py", false, 0);
	cr_assert_eq(policy_rewritten_names(ix, &s, kept, miss, sizeof(miss)), POLICY_PREV_MISSING);
	cr_assert(strstr(miss, "zero_to_fp32.py"), "%s", miss);
}

/* ---- lineage (rule 6) ---- */

/* a complete step of kind, completed at t ns */
static struct idx_step done(int kind, const char *name, int64_t step, int64_t t)
{
	struct idx_step s;
	int64_t id = mkstep(kind, name, step, 0, IDX_STEP_WRITING);

	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_step_set_state(ix, id, IDX_STEP_COMPLETE, t, "test"), 0);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_step_get(ix, id, &s), 0);
	return s;
}

Test(policy, lineage_scanned, .init = setup, .fini = teardown)
{
	struct policy_lineage l;

	/* an earlier run saved 5 and 10; a new run in the same directory saves 2, 4, 6 */
	struct idx_step o5 = done(LAYOUT_HF, "checkpoint-5", 5, 10);
	struct idx_step o10 = done(LAYOUT_HF, "checkpoint-10", 10, 20);
	struct idx_step n2 = done(LAYOUT_HF, "checkpoint-2", 2, 30);

	cr_assert_eq(policy_lineage(ix, LAYOUT_HF, LAYOUT_NONE, &l), 0);
	cr_assert_not(l.claimed);
	cr_assert_eq(l.since_ns, 20);
	cr_assert(policy_lineage_member(&l, &n2));
	cr_assert_not(policy_lineage_member(&l, &o5));
	cr_assert_not(policy_lineage_member(&l, &o10));
	struct idx_step n4 = done(LAYOUT_HF, "checkpoint-4", 4, 40);
	struct idx_step n6 = done(LAYOUT_HF, "checkpoint-6", 6, 50);

	cr_assert_eq(policy_lineage(ix, LAYOUT_HF, LAYOUT_NONE, &l), 0);
	cr_assert_eq(l.since_ns, 20, "5 is below 6, but the earlier run's");
	cr_assert(policy_lineage_member(&l, &n4) && policy_lineage_member(&l, &n6));
	cr_assert_not(policy_lineage_member(&l, &o5));
	/* the known limit: past the earlier run's highest step, every step is a member again */
	struct idx_step n12 = done(LAYOUT_HF, "checkpoint-12", 12, 60);

	cr_assert_eq(policy_lineage(ix, LAYOUT_HF, LAYOUT_NONE, &l), 0);
	cr_assert_eq(l.since_ns, 0);
	cr_assert(policy_lineage_member(&l, &n12) && policy_lineage_member(&l, &o10));

	/* one run only: every step is a member */
	done(LAYOUT_DCP, "step-1", 1, 10);
	done(LAYOUT_DCP, "step-2", 2, 20);
	cr_assert_eq(policy_lineage(ix, LAYOUT_DCP, LAYOUT_NONE, &l), 0);
	cr_assert_eq(l.since_ns, 0);

	/* InternEvo: a slot's versions, rewritten in place, are no run */
	struct idx_step i100 = done(LAYOUT_INTERNEVO, "100", 100, 10);
	struct idx_step i50 = done(LAYOUT_INTERNEVO, "50", 50, 30);
	struct idx_step slot = done(LAYOUT_INTERNEVO, "snapshot/0", 200, 100);

	cr_assert(policy_is_slot(&slot) && !policy_is_slot(&i50));
	cr_assert_eq(policy_lineage(ix, LAYOUT_INTERNEVO, LAYOUT_NONE, &l), 0);
	cr_assert_eq(l.since_ns, 10);
	cr_assert(policy_lineage_member(&l, &i50) && policy_lineage_member(&l, &slot));
	cr_assert_not(policy_lineage_member(&l, &i100));

	/* a layout with a tracker and no claim recorded: every step */
	done(LAYOUT_MEGATRON, "iter_0000010", 10, 10);
	done(LAYOUT_MEGATRON, "iter_0000002", 2, 20);
	cr_assert_eq(policy_lineage(ix, LAYOUT_MEGATRON, LAYOUT_NONE, &l), 0);
	cr_assert(!l.claimed && l.since_ns == 0);
}

static void claim(const char *content, int64_t step, int64_t t)
{
	int64_t id;

	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_claim_add(ix, "latest_checkpointed_iteration.txt", content,
				   strlen(content), step, t, &id), 0);
	cr_assert_eq(idx_commit(ix), 0);
}

/* a version of step name made at t0, in state at t1 */
static struct idx_step version(const char *name, int64_t step, int64_t t0, int state, int64_t t1)
{
	struct idx_step s;
	int64_t id;

	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_step_create(ix, LAYOUT_MEGATRON, name, step, 0, t0, &id), 0);
	cr_assert_eq(idx_step_set_state(ix, id, state, t1, "test"), 0);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_step_get(ix, id, &s), 0);
	return s;
}

/* a claim names the version of the step that held its name when it was made */
Test(policy, lineage_claim_names_a_version, .init = setup, .fini = teardown)
{
	struct policy_lineage l;

	version("iter_0000002", 2, 1, IDX_STEP_COMPLETE, 4);
	claim("2", 2, 5);
	struct idx_step v4 = version("iter_0000004", 4, 6, IDX_STEP_COMPLETE, 20);

	claim("4", 4, 20);
	/* a rewrite of 4 by hand, made after the claim and set aside: 4 stays claimed */
	version("iter_0000004", 4, 30, IDX_STEP_INCOMPLETE, 35);
	cr_assert_eq(policy_lineage(ix, LAYOUT_MEGATRON, LAYOUT_NONE, &l), 0);
	cr_assert(l.claimed && l.head_step == 4 && l.head_ns == 20);
	cr_assert(policy_lineage_member(&l, &v4));

	/* 6 was complete in an earlier lineage; after a rollback to 4 the trainer saves 6 again,
	 * claims the new version (DeepSpeed's `latest` comes before every rank is done) and is
	 * killed: the new version is set aside and the old one is back at the name, but the claim
	 * named the new one */
	struct idx_step o6 = version("iter_0000006", 6, 7, IDX_STEP_COMPLETE, 8);

	claim("4", 4, 40);
	version("iter_0000006", 6, 45, IDX_STEP_INCOMPLETE, 60);
	claim("6", 6, 50);
	cr_assert_eq(policy_lineage(ix, LAYOUT_MEGATRON, LAYOUT_NONE, &l), 0);
	cr_assert(l.claimed && l.head_step == 4 && l.head_ns == 40, "head %ld", (long)l.head_step);
	cr_assert_not(policy_lineage_member(&l, &o6));

	/* rows remade after the claims (fsck, import): the claim names the row of the name */
	version("iter_0000008", 8, 100, IDX_STEP_COMPLETE, 101);
	claim("8", 8, 90);
	cr_assert_eq(policy_lineage(ix, LAYOUT_MEGATRON, LAYOUT_NONE, &l), 0);
	cr_assert(l.claimed && l.head_step == 8 && l.head_ns == 90);
}

Test(policy, time_iso)
{
	char b[40];

	cr_assert_str_eq(policy_time_iso(0, b, sizeof(b)), "1970-01-01T00:00:00Z");
	cr_assert_str_eq(policy_time_iso(-1, b, sizeof(b)), "1969-12-31T23:59:59Z");
	cr_assert_str_eq(policy_time_iso(-1000000000, b, sizeof(b)), "1969-12-31T23:59:59Z");
	cr_assert_str_eq(policy_time_iso(1714564800999999999, b, sizeof(b)),
			 "2024-05-01T12:00:00Z");
	cr_assert_str_eq(policy_time_iso(0, b, 10), "?");
}

Test(policy, step_json)
{
	struct idx_step s = { .id = 7, .kind = LAYOUT_MEGATRON, .step = 10,
			      .state = IDX_STEP_COMPLETE, .created_ns = 1714564800000000000,
			      .files = 2, .has_digest = true };
	json_t *j, *n;

	snprintf(s.name, sizeof(s.name), "iter_\xff" "0000010");
	j = policy_step_json(&s);
	cr_assert_not_null(j);
	cr_assert_str_eq(json_string_value(json_object_get(j, "name")),
			 "iter_\xef\xbf\xbd" "0000010");
	cr_assert_str_eq(json_string_value(json_object_get(j, "layout")), "megatron");
	cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "complete");
	cr_assert_str_eq(json_string_value(json_object_get(j, "created")), "2024-05-01T12:00:00Z");
	cr_assert(json_is_null(json_object_get(j, "sealed")));
	cr_assert_str_eq(json_string_value(json_object_get(j, "xxh3_128")),
			 "00000000000000000000000000000000");
	cr_assert_eq(json_integer_value(json_object_get(j, "files")), 2);
	json_decref(j);
	n = policy_json_name("ok");
	cr_assert_str_eq(json_string_value(n), "ok");
	json_decref(n);
}

/* rule 5: every node's manifest, and the seal from any one of them */
Test(policy, global_complete)
{
	const struct policy_part a = { "node-a", true }, b = { "node-b", false },
				 b2 = { "node-b", true }, c = { "node-c", false };
	const struct policy_part both[] = { a, b }, only_b[] = { b }, unsealed[] = { b, c },
				 twice[] = { b, b2 }, three[] = { a, b, c };

	cr_assert(policy_global_complete(both, 2, 2));
	cr_assert_not(policy_global_complete(only_b, 1, 2), "node-a has not published");
	cr_assert_not(policy_global_complete(unsealed, 2, 2), "nobody saw the claim");
	cr_assert_not(policy_global_complete(twice, 2, 2), "one node published twice: one part");
	cr_assert(policy_global_complete(twice, 2, 1));
	cr_assert_not(policy_global_complete(three, 3, 2), "more nodes than the job has");
	cr_assert(policy_global_complete(three, 3, 3));
	cr_assert_not(policy_global_complete(both, 2, 0));
	cr_assert_not(policy_global_complete(NULL, 0, 1));
}

/* a step's number across nodes: MindFormers 1.0's step restarts every epoch, so its number holds
 * the epoch, and the numbers order as (epoch, step) */
Test(policy, node_step)
{
	struct idx_step mf1a = { .kind = LAYOUT_MF1, .step = 2, .name = "1_2" };
	struct idx_step mf1b = { .kind = LAYOUT_MF1, .step = 2, .name = "2_2" };
	struct idx_step mf1c = { .kind = LAYOUT_MF1, .step = 4000, .name = "1_4000" };
	struct idx_step big = { .kind = LAYOUT_MF1, .step = 1, .name = "4294967296_1" };
	struct idx_step bad = { .kind = LAYOUT_MF1, .step = 1, .name = "x" };
	struct idx_step meg = { .kind = LAYOUT_MEGATRON, .step = 100, .name = "iter_0000100" };

	cr_assert_eq(policy_node_step(&meg), 100);
	cr_assert_neq(policy_node_step(&mf1a), policy_node_step(&mf1b), "two epochs' step 2");
	cr_assert_lt(policy_node_step(&mf1a), policy_node_step(&mf1c));
	cr_assert_lt(policy_node_step(&mf1c), policy_node_step(&mf1b), "(1, 4000) < (2, 2)");
	cr_assert_eq(policy_node_step_number(LAYOUT_MF1, policy_node_step(&mf1b)), 2);
	cr_assert_eq(policy_node_step_number(LAYOUT_MEGATRON, 100), 100);
	cr_assert_eq(policy_node_step(&big), -1, "an epoch that does not fit");
	cr_assert_eq(policy_node_step(&bad), -1);
}
