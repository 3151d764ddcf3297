/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of fs/policy/layout.c: path classification for every layout row and the path edge
 * cases, tracker parse/format (byte-exact, round trips, garbage), and a fixed-seed fuzz loop.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/policy/layout.h"
#include "tests/lib/ctest.h"

#define R_ LAYOUT_STEP_RELEASE
#define NS LAYOUT_STEP_NONE
#define TMP LAYOUT_F_TMP
#define AMB LAYOUT_F_AMBIGUOUS
#define SLOT LAYOUT_F_SLOT

/* ---- classify: table ------------------------------------------------------------------- */

struct pcase {
	const char *path;
	enum layout_kind forced;
	int rc;
	enum layout_kind kind;
	enum layout_role role;
	int64_t step;
	int rank;
	unsigned flags;
	size_t plen;
	int64_t epoch;
};

/* path, forced, kind, role, step, rank, flags, step_prefix_len (epoch -1) */
#define P(p, f, k, r, s, rk, fl, pl)                                                            \
	{ .path = p, .forced = f, .rc = 0, .kind = k, .role = r, .step = s, .rank = rk,          \
	  .flags = fl, .plen = pl, .epoch = -1 }
/* MF1 step file: path, step, epoch, rank, flags */
#define M1(p, s, e, rk, fl)                                                                     \
	{ .path = p, .forced = LAYOUT_NONE, .rc = 0, .kind = LAYOUT_MF1, .role = ROLE_STEP_FILE, \
	  .step = s, .rank = rk, .flags = fl, .plen = 0, .epoch = e }
#define PLAIN(p, f) P(p, f, LAYOUT_NONE, ROLE_PLAIN, NS, -1, 0, 0)
#define ERR(p, e) { .path = p, .forced = LAYOUT_NONE, .rc = e }

#define A LAYOUT_NONE
#define MEG LAYOUT_MEGATRON
#define MF2 LAYOUT_MF2
#define MF1 LAYOUT_MF1
#define DS LAYOUT_DEEPSPEED
#define HF LAYOUT_HF
#define DCP LAYOUT_DCP
#define IE LAYOUT_INTERNEVO
#define ORB LAYOUT_ORBAX
#define PL LAYOUT_LIGHTNING

static const struct pcase path_cases[] = {
	/* Megatron-LM */
	P("iter_0000100", A, MEG, ROLE_STEP_DIR, 100, -1, 0, 12),
	P("iter_0000100/", A, MEG, ROLE_STEP_DIR, 100, -1, 0, 12),
	P("iter_0000100/mp_rank_00/model_optim_rng.pt", A, MEG, ROLE_STEP_FILE, 100, -1, 0, 12),
	P("iter_0000100/mp_rank_00_001/model_optim_rng.pt", A, MEG, ROLE_STEP_FILE, 100, -1, 0, 12),
	P("iter_0000100/mp_rank_01_002/distrib_optim.pt", A, MEG, ROLE_STEP_FILE, 100, -1, 0, 12),
	P("iter_0000100/__3_0.distcp", A, MEG, ROLE_STEP_FILE, 100, 3, 0, 12),
	P("iter_0000100/.metadata", A, MEG, ROLE_STEP_FILE, 100, -1, 0, 12),
	P("iter_0000100/.metadata.tmp", A, MEG, ROLE_STEP_FILE, 100, -1, TMP, 12),
	P("iter_0000100/metadata.json", A, MEG, ROLE_STEP_FILE, 100, -1, 0, 12),
	P("iter_0000100/common.pt", A, MEG, ROLE_STEP_FILE, 100, -1, 0, 12),
	P("latest_checkpointed_iteration.txt", A, MEG, ROLE_TRACKER, NS, -1, 0, 0),
	P("iter_12345678", A, MEG, ROLE_STEP_DIR, 12345678, -1, 0, 13),
	P("iter_0000000", A, MEG, ROLE_STEP_DIR, 0, -1, 0, 12),
	PLAIN("iter_000010", A),
	PLAIN("iter_", A),
	PLAIN("iter_-000100", A),
	PLAIN("iter_0000100abc", A),
	PLAIN("iter_0000100 ", A),
	PLAIN("release/mp_rank_00/model_optim_rng.pt", A),
	P("release", MEG, MEG, ROLE_STEP_DIR, R_, -1, 0, 7),
	P("release/mp_rank_00/model_optim_rng.pt", MEG, MEG, ROLE_STEP_FILE, R_, -1, 0, 7),
	P("./iter_0000100//mp_rank_00/./model_optim_rng.pt", A, MEG, ROLE_STEP_FILE, 100, -1, 0, 14),
	P("/iter_0000100/x", A, MEG, ROLE_STEP_FILE, 100, -1, 0, 13),
	/* MindFormers 2.0 */
	P("iteration_00000100", A, MF2, ROLE_STEP_DIR, 100, -1, 0, 18),
	P("iteration_0000100", A, MF2, ROLE_STEP_DIR, 100, -1, 0, 17),
	P("iteration_123456789", A, MF2, ROLE_STEP_DIR, 123456789, -1, 0, 19),
	PLAIN("iteration_123", A),
	PLAIN("iteration_", A),
	P("iteration_00000100/model-0000003-0000008.safetensors", A, MF2, ROLE_STEP_FILE, 100, 3, 0,
	  18),
	P("iteration_00000100/llama-opt-0000005-0000008.safetensors", A, MF2, ROLE_STEP_FILE, 100, 5,
	  0, 18),
	P("iteration_00000100/xmodel-0000005-0000008.safetensors", A, MF2, ROLE_STEP_FILE, 100, -1,
	  0, 18),
	P("iteration_00000100/model-0000003-0000008.safetensors.tmp", A, MF2, ROLE_STEP_FILE, 100,
	  -1, TMP, 18),
	P("iteration_00000100/common.json", A, MF2, ROLE_STEP_FILE, 100, -1, 0, 18),
	P("iteration_00000100/metadata.json", A, MF2, ROLE_STEP_FILE, 100, -1, 0, 18),
	P("latest_checkpointed_iteration.txt", MF2, MF2, ROLE_TRACKER, NS, -1, 0, 0),
	/* MindFormers 1.0 */
	P("rank_0", A, MF1, ROLE_PLAIN, NS, 0, 0, 0),
	P("rank_0/meta.json", A, MF1, ROLE_TRACKER, NS, 0, 0, 0),
	P("rank_12/meta.json", MF1, MF1, ROLE_TRACKER, NS, 12, 0, 0),
	M1("rank_0/llama_rank_0-3_100.ckpt", 100, 3, 0, 0),
	M1("rank_7/llama_rank_7-1_200.safetensors", 200, 1, 7, 0),
	M1("rank_0/llama_rank_0-3_100.ckpt.tmp", 100, 3, 0, TMP),
	M1("rank_0/CKP-1_5.ckpt", 5, 1, 0, 0),
	M1("rank_0/mindformers-network-2_50.ckpt", 50, 2, 0, 0),
	M1("rank_0/x_1-0003_00100.ckpt", 100, 3, 0, 0),
	M1("rank_0/-1_1.ckpt", 1, 1, 0, 0),
	P("rank_0/llama_rank_0-3_.ckpt", A, MF1, ROLE_PLAIN, NS, 0, 0, 0),
	P("rank_0/llama_rank_0_100.ckpt", A, MF1, ROLE_PLAIN, NS, 0, 0, 0),
	P("rank_0/llama_rank_0-3_100.bin", A, MF1, ROLE_PLAIN, NS, 0, 0, 0),
	P("rank_0/llama_rank_0-3_100.ckpt.tmp.tmp", A, MF1, ROLE_PLAIN, NS, 0, 0, 0),
	P("rank_0/tmpab12cd", A, MF1, ROLE_PLAIN, NS, 0, 0, 0),
	P("rank_0/sub/llama-1_1.ckpt", A, MF1, ROLE_PLAIN, NS, 0, 0, 0),
	P("rank_0/llama-1_99999999999999999999.ckpt", A, MF1, ROLE_PLAIN, NS, 0, 0, 0),
	PLAIN("rank_x/meta.json", A),
	PLAIN("rank_/meta.json", A),
	PLAIN("rank_99999999999/meta.json", A),
	PLAIN("meta.json", A),
	PLAIN("rank_0/meta.json", HF),
	/* DeepSpeed */
	P("global_step100", A, DS, ROLE_STEP_DIR, 100, -1, 0, 14),
	P("global_step100/mp_rank_00_model_states.pt", A, DS, ROLE_STEP_FILE, 100, -1, 0, 14),
	P("global_step100/bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt", A, DS, ROLE_STEP_FILE, 100,
	  -1, 0, 14),
	P("global_step100/latest", A, DS, ROLE_STEP_FILE, 100, -1, 0, 14),
	P("latest", A, DS, ROLE_TRACKER, NS, -1, 0, 0),
	PLAIN("zero_to_fp32.py", A),
	PLAIN("global_step", A),
	PLAIN("latest/x", A),
	PLAIN("Latest", A),
	/* Hugging Face Trainer */
	P("checkpoint-500", A, HF, ROLE_STEP_DIR, 500, -1, 0, 14),
	P("checkpoint-500/trainer_state.json", A, HF, ROLE_MARKER, 500, -1, 0, 14),
	P("checkpoint-500/model.safetensors", A, HF, ROLE_STEP_FILE, 500, -1, 0, 14),
	P("checkpoint-500/rng_state_3.pth", A, HF, ROLE_STEP_FILE, 500, 3, 0, 14),
	P("checkpoint-500/rng_state.pth", A, HF, ROLE_STEP_FILE, 500, -1, 0, 14),
	P("checkpoint-500/global_step500/mp_rank_00_model_states.pt", A, HF, ROLE_STEP_FILE, 500, -1,
	  0, 14),
	P("checkpoint-500/sub/trainer_state.json", A, HF, ROLE_STEP_FILE, 500, -1, 0, 14),
	P("tmp-checkpoint-500/trainer_state.json", A, HF, ROLE_MARKER, 500, -1, TMP, 18),
	P("checkpoint-007", A, HF, ROLE_STEP_DIR, 7, -1, 0, 14),
	PLAIN("checkpoint-", A),
	PLAIN("checkpoint-12abc", A),
	PLAIN("checkpoint-12abc/trainer_state.json", A),
	PLAIN("Checkpoint-5", A),
	PLAIN("trainer_state.json", A),
	/* PyTorch DCP / torchtitan */
	P("step-10", A, DCP, ROLE_STEP_DIR, 10, -1, 0, 7),
	P("step-10/.metadata", A, DCP, ROLE_MARKER, 10, -1, 0, 7),
	P("step-10/.metadata.tmp", A, DCP, ROLE_STEP_FILE, 10, -1, TMP, 7),
	P("step-10/__0_0.distcp", A, DCP, ROLE_STEP_FILE, 10, 0, 0, 7),
	P("step-10/__12_3.distcp", A, DCP, ROLE_STEP_FILE, 10, 12, 0, 7),
	P("step-10/__12_.distcp", A, DCP, ROLE_STEP_FILE, 10, -1, 0, 7),
	P("step-10/__99999999999_0.distcp", A, DCP, ROLE_STEP_FILE, 10, -1, 0, 7),
	PLAIN("step-", A),
	PLAIN("step-1e3", A),
	/* InternEvo / Orbax all-digit names */
	P("100", A, IE, ROLE_STEP_DIR, 100, -1, AMB, 3),
	P("100/model_tp0_pp0.pt", A, IE, ROLE_STEP_FILE, 100, -1, AMB, 3),
	P("100/commit_success.txt", A, ORB, ROLE_MARKER, 100, -1, AMB, 3),
	/* InternEvo seals N/ with N/N.step, written inside the folder by the log rank
	 * (InternLM/InternEvo 05bbd8f checkpoint_manager.py save_checkpoint; see
	 * tests/traces/internevo.md); no root tracker */
	P("100/100.step", A, IE, ROLE_MARKER, 100, -1, AMB, 3),
	P("100/99.step", A, IE, ROLE_STEP_FILE, 100, -1, AMB, 3),
	P("100/0100.step", A, IE, ROLE_MARKER, 100, -1, AMB, 3),
	P("100/100.step", IE, IE, ROLE_MARKER, 100, -1, 0, 3),
	P("100/100.step", ORB, ORB, ROLE_STEP_FILE, 100, -1, 0, 3),
	PLAIN("100.step", A),
	/* snapshot slots: snapshot/K/ is a step directory at depth 2 */
	P("snapshot", A, IE, ROLE_PLAIN, NS, -1, 0, 0),
	P("snapshot/0", A, IE, ROLE_STEP_DIR, 0, -1, SLOT, 10),
	P("snapshot/1/model_tp0_pp0.pt", A, IE, ROLE_STEP_FILE, 1, -1, SLOT, 10),
	P("snapshot/1/12.step", A, IE, ROLE_MARKER, 1, -1, SLOT, 10),
	P("snapshot/1/x.pt.tmp", A, IE, ROLE_STEP_FILE, 1, -1, SLOT | TMP, 10),
	P("snapshot/1/sub/12.step", A, IE, ROLE_STEP_FILE, 1, -1, SLOT, 10),
	P("snapshot/1", IE, IE, ROLE_STEP_DIR, 1, -1, SLOT, 10),
	PLAIN("snapshot/1", MEG),
	PLAIN("snapshot/x", A),
	PLAIN("snapshot/1x/a", A),
	P("100", IE, IE, ROLE_STEP_DIR, 100, -1, 0, 3),
	P("100/commit_success.txt", IE, IE, ROLE_STEP_FILE, 100, -1, 0, 3),
	P("100", ORB, ORB, ROLE_STEP_DIR, 100, -1, 0, 3),
	P("100/commit_success.txt", ORB, ORB, ROLE_MARKER, 100, -1, 0, 3),
	PLAIN("100.step", ORB),
	PLAIN(".step", A),
	PLAIN("99999999999999999999.step", A),
	PLAIN("-5", A),
	/* Orbax in progress */
	P("100.orbax-checkpoint-tmp-1700000000", A, ORB, ROLE_STEP_DIR, 100, -1, TMP, 35),
	P("100.orbax-checkpoint-tmp-1700000000/commit_success.txt", A, ORB, ROLE_MARKER, 100, -1, TMP,
	  35),
	P("100.orbax-checkpoint-tmp-1/default/_METADATA", A, ORB, ROLE_STEP_FILE, 100, -1, TMP, 26),
	P("100.orbax-checkpoint-tmp", A, ORB, ROLE_STEP_DIR, 100, -1, TMP, 24),
	PLAIN(".orbax-checkpoint-tmp-5", A),
	PLAIN("100.orbax-checkpoint-tmp-1", IE),
	/* Lightning (tests/traces/lightning.md): root step files keyed by the `step=` token */
	P("epoch=0-step=100.ckpt", A, PL, ROLE_STEP_FILE, 100, -1, 0, 0),
	P("epoch=3-step=100-v1.ckpt", A, PL, ROLE_STEP_FILE, 100, -1, 0, 0),
	P("step=7.ckpt", A, PL, ROLE_STEP_FILE, 7, -1, 0, 0),
	P("epoch=1-step=0012-val_loss=-0.12.ckpt", PL, PL, ROLE_STEP_FILE, 12, -1, 0, 0),
	P("val_loss=-0.12-step=5.ckpt", A, PL, ROLE_STEP_FILE, 5, -1, 0, 0),
	P("epoch=0-step=100.ckpt.ab_9xyz0.tmp", A, PL, ROLE_STEP_FILE, 100, -1, TMP, 0),
	P("last.ckpt", A, PL, ROLE_TRACKER, NS, -1, 0, 0),
	P("last-v1.ckpt", A, PL, ROLE_TRACKER, NS, -1, 0, 0),
	P("lastfoo.ckpt", PL, PL, ROLE_TRACKER, NS, -1, 0, 0),
	P("last-step=5.ckpt", A, PL, ROLE_TRACKER, NS, -1, 0, 0),
	P("tmpab_9xyz0", PL, PL, ROLE_PLAIN, NS, -1, TMP, 0),
	PLAIN("tmpab_9xyz0", A),
	PLAIN("tmpAB_9xyz0", PL),
	PLAIN("tmpab_9xyz", PL),
	PLAIN("last.ckpt.ab_9xyz0.tmp", PL),
	PLAIN("epoch=0-step=100.ckpt.ab_9xyz.tmp", A),
	PLAIN("epoch=0-step=100.pt", A),
	PLAIN("epoch=0-xstep=100.ckpt", A),
	PLAIN("epoch=0-step=.ckpt", A),
	PLAIN("epoch=0-step=1x.ckpt", A),
	PLAIN("epoch=0-step=99999999999999999999.ckpt", A),
	PLAIN(".ckpt", A),
	PLAIN("last", A),
	PLAIN("dir/epoch=0-step=100.ckpt", A),
	PLAIN("dir/last.ckpt", A),
	PLAIN("epoch=0-step=100.ckpt", MF1),
	PLAIN("last.ckpt", MEG),
	P("epoch=0-step=100.ckpt", PL, PL, ROLE_STEP_FILE, 100, -1, 0, 0),
	PLAIN("iter_0000100", PL),
	/* Edge cases */
	PLAIN("", A),
	PLAIN(".", A),
	PLAIN("/", A),
	PLAIN("./", A),
	PLAIN("//./", A),
	ERR("..", -EINVAL),
	ERR("iter_0000100/../etc/passwd", -EINVAL),
	ERR("../iter_0000100", -EINVAL),
	P("iter_0000100/..a", A, MEG, ROLE_STEP_FILE, 100, -1, 0, 12),
	P("checkpoint-9223372036854775807", A, HF, ROLE_STEP_DIR, INT64_MAX, -1, 0, 30),
	PLAIN("checkpoint-9223372036854775808", A),
	PLAIN("checkpoint-99999999999999999999999", A),
	P("checkpoint-9007199254740993", A, HF, ROLE_STEP_DIR, 9007199254740993LL, -1, 0, 27),
	P("000000000000000000000000000042", A, IE, ROLE_STEP_DIR, 42, -1, AMB, 30),
	PLAIN("step-\xff\xfe/__1_0.distcp", A),
	P("checkpoint-5/\xff\xfe.bin", A, HF, ROLE_STEP_FILE, 5, -1, 0, 12),
	PLAIN("\xc3\xa9t\xc3\xa9/file", A),
	PLAIN("iter_0000100/x", HF),
	PLAIN("latest_checkpointed_iteration.txt", DS),
	PLAIN("checkpoint-5", MF1),
	PLAIN(".ckptfs/status", A),
	PLAIN("a/iter_0000100/x", A),
	PLAIN("output/checkpoint-5", A),
};

#define N_PATH_CASES (sizeof(path_cases) / sizeof(path_cases[0]))

CT_INDEX_PARAMETERS(layout, classify, N_PATH_CASES)

/* Invariant 3 of layout.c: the step prefix names the step directory itself. */
static void check_prefix(const char *path, enum layout_kind forced, const struct layout_match *m)
{
	if (m->step_prefix_len == 0)
		return;
	char pre[LAYOUT_PATH_MAX];
	cr_assert_lt(m->step_prefix_len, sizeof(pre));
	cr_assert_leq(m->step_prefix_len, strlen(path));
	memcpy(pre, path, m->step_prefix_len);
	pre[m->step_prefix_len] = '\0';
	struct layout_match d;
	cr_assert_eq(layout_classify(pre, forced, &d), 0);
	cr_assert_eq(d.role, ROLE_STEP_DIR, "prefix '%s' of '%s'", pre, path);
	cr_assert_eq(d.step, m->step);
	cr_assert(d.kind == m->kind || (m->flags & LAYOUT_F_AMBIGUOUS));
}

ParameterizedTest(size_t *ci, layout, classify)
{
	const struct pcase *c = &path_cases[*ci];
	struct layout_match m;

	memset(&m, 0x5a, sizeof(m));
	int rc = layout_classify(c->path, c->forced, &m);
	cr_assert_eq(rc, c->rc, "'%s': rc %d, want %d", c->path, rc, c->rc);
	if (rc < 0) {
		unsigned char canary[sizeof(m)];
		memset(canary, 0x5a, sizeof(canary));
		cr_assert(memcmp(&m, canary, sizeof(m)) == 0, "ret touched on failure");
		return;
	}
	cr_expect_eq(m.kind, c->kind, "'%s': kind %s, want %s", c->path, layout_name(m.kind),
		     layout_name(c->kind));
	cr_expect_eq(m.role, c->role, "'%s': role %d, want %d", c->path, m.role, c->role);
	cr_expect_eq(m.step, c->step, "'%s': step %" PRId64 ", want %" PRId64, c->path, m.step,
		     c->step);
	cr_expect_eq(m.epoch, c->epoch, "'%s': epoch %" PRId64, c->path, m.epoch);
	cr_expect_eq(m.rank, c->rank, "'%s': rank %d, want %d", c->path, m.rank, c->rank);
	cr_expect_eq(m.flags, c->flags, "'%s': flags %#x, want %#x", c->path, m.flags, c->flags);
	cr_expect_eq(m.step_prefix_len, c->plen, "'%s': prefix %zu, want %zu", c->path,
		     m.step_prefix_len, c->plen);
	check_prefix(c->path, c->forced, &m);
}

/* ---- classify: arguments and long paths ------------------------------------------------ */

Test(layout, classify_bad_args)
{
	struct layout_match m;

	cr_assert_eq(layout_classify(NULL, LAYOUT_NONE, &m), -EINVAL);
	cr_assert_eq(layout_classify("x", LAYOUT_NONE, NULL), -EINVAL);
	cr_assert_eq(layout_classify("x", (enum layout_kind)99, &m), -EINVAL);
	cr_assert_eq(layout_classify("x", (enum layout_kind)-1, &m), -EINVAL);
	cr_assert_eq(layout_classify("x", LAYOUT_KIND_COUNT, &m), -EINVAL);
}

Test(layout, classify_long_paths)
{
	static char p[LAYOUT_PATH_MAX + 16];
	struct layout_match m;

	/* 4095 bytes: accepted; the step is found at the front. */
	strcpy(p, "checkpoint-5/");
	size_t n = strlen(p);
	for (; n < LAYOUT_PATH_MAX - 1; n++)
		p[n] = (n % 100 == 0) ? '/' : 'a';
	p[n] = '\0';
	cr_assert_eq(strlen(p), LAYOUT_PATH_MAX - 1);
	cr_assert_eq(layout_classify(p, LAYOUT_NONE, &m), 0);
	cr_assert_eq(m.kind, LAYOUT_HF);
	cr_assert_eq(m.role, ROLE_STEP_FILE);
	cr_assert_eq(m.step, 5);

	/* 4096 bytes: too long. */
	p[n++] = 'b';
	p[n] = '\0';
	cr_assert_eq(layout_classify(p, LAYOUT_NONE, &m), -ENAMETOOLONG);

	/* 2047 components "a/a/…". */
	for (n = 0; n + 2 < LAYOUT_PATH_MAX; n += 2) {
		p[n] = 'a';
		p[n + 1] = '/';
	}
	p[n] = '\0';
	cr_assert_eq(layout_classify(p, LAYOUT_NONE, &m), 0);
	cr_assert_eq(m.role, ROLE_PLAIN);

	/* A 4000-digit step name: leading zeros then 7. */
	memset(p, '0', 4000);
	strcpy(p + 4000, "7/x");
	cr_assert_eq(layout_classify(p, LAYOUT_NONE, &m), 0);
	cr_assert_eq(m.kind, LAYOUT_INTERNEVO);
	cr_assert_eq(m.step, 7);
	cr_assert_eq(m.step_prefix_len, 4001);

	/* 4000 slashes. */
	memset(p, '/', 4000);
	p[4000] = '\0';
	cr_assert_eq(layout_classify(p, LAYOUT_NONE, &m), 0);
	cr_assert_eq(m.role, ROLE_PLAIN);
}

Test(layout, parse_name)
{
	enum layout_kind k = LAYOUT_NONE;
	int64_t s = 0;

	cr_assert_eq(layout_parse_name("iter_0000100", LAYOUT_NONE, &k, &s), 1);
	cr_assert_eq(k, LAYOUT_MEGATRON);
	cr_assert_eq(s, 100);
	cr_assert_eq(layout_parse_name("global_step7", LAYOUT_NONE, &k, &s), 1);
	cr_assert_eq(k, LAYOUT_DEEPSPEED);
	cr_assert_eq(s, 7);
	cr_assert_eq(layout_parse_name("42", LAYOUT_NONE, &k, &s), 1);
	cr_assert_eq(k, LAYOUT_INTERNEVO);
	cr_assert_eq(layout_parse_name("42", LAYOUT_ORBAX, &k, &s), 1);
	cr_assert_eq(k, LAYOUT_ORBAX);
	cr_assert_eq(layout_parse_name("release", LAYOUT_MEGATRON, &k, &s), 1);
	cr_assert_eq(s, LAYOUT_STEP_RELEASE);

	k = LAYOUT_HF;
	s = 99;
	cr_assert_eq(layout_parse_name("release", LAYOUT_NONE, &k, &s), 0);
	cr_assert_eq(layout_parse_name("checkpoint-", LAYOUT_NONE, &k, &s), 0);
	cr_assert_eq(layout_parse_name("..", LAYOUT_NONE, &k, &s), 0);
	cr_assert_eq(layout_parse_name("", LAYOUT_NONE, &k, &s), 0);
	cr_assert_eq(layout_parse_name("latest", LAYOUT_NONE, &k, &s), 0);
	cr_assert_eq(layout_parse_name("rank_0", LAYOUT_NONE, &k, &s), 0);
	cr_assert_eq(k, LAYOUT_HF, "untouched when not a step");
	cr_assert_eq(s, 99);
	cr_assert_eq(layout_parse_name("a/b", LAYOUT_NONE, &k, &s), -EINVAL);
	cr_assert_eq(layout_parse_name(NULL, LAYOUT_NONE, &k, &s), -EINVAL);
	cr_assert_eq(layout_parse_name("1", LAYOUT_NONE, NULL, &s), -EINVAL);
	cr_assert_eq(layout_parse_name("1", LAYOUT_NONE, &k, NULL), -EINVAL);
	cr_assert_eq(layout_parse_name("1", (enum layout_kind)77, &k, &s), -EINVAL);
}

/* ---- step directory names --------------------------------------------------------------- */

struct dcase {
	enum layout_kind kind;
	int64_t step;
	int rc;
	const char *want;
};

static const struct dcase dir_cases[] = {
	{ LAYOUT_MEGATRON, 100, 12, "iter_0000100" },
	{ LAYOUT_MEGATRON, 12345678, 13, "iter_12345678" },
	{ LAYOUT_MEGATRON, LAYOUT_STEP_RELEASE, 7, "release" },
	{ LAYOUT_MF2, 100, 18, "iteration_00000100" },
	{ LAYOUT_DEEPSPEED, 100, 14, "global_step100" },
	{ LAYOUT_HF, 500, 14, "checkpoint-500" },
	{ LAYOUT_DCP, 10, 7, "step-10" },
	{ LAYOUT_INTERNEVO, 100, 3, "100" },
	{ LAYOUT_ORBAX, 100, 3, "100" },
	{ LAYOUT_HF, INT64_MAX, 30, "checkpoint-9223372036854775807" },
	{ LAYOUT_DCP, 0, 6, "step-0" },
	{ LAYOUT_MF1, 100, -EOPNOTSUPP, NULL },
	{ LAYOUT_LIGHTNING, 100, -EOPNOTSUPP, NULL },
	{ LAYOUT_HF, -1, -EINVAL, NULL },
	{ LAYOUT_HF, LAYOUT_STEP_RELEASE, -EINVAL, NULL },
	{ LAYOUT_MF2, LAYOUT_STEP_RELEASE, -EINVAL, NULL },
	{ LAYOUT_NONE, 1, -EINVAL, NULL },
	{ (enum layout_kind)50, 1, -EINVAL, NULL },
};

Test(layout, step_dir_name)
{
	for (size_t i = 0; i < sizeof(dir_cases) / sizeof(dir_cases[0]); i++) {
		const struct dcase *c = &dir_cases[i];
		char buf[64];
		int rc = layout_step_dir_name(c->kind, c->step, buf, sizeof(buf));
		cr_assert_eq(rc, c->rc, "case %zu: rc %d want %d", i, rc, c->rc);
		if (rc < 0)
			continue;
		cr_assert_str_eq(buf, c->want);
		/* Round trip through classify, with the layout forced and auto-detected. */
		struct layout_match m;
		cr_assert_eq(layout_classify(buf, c->kind, &m), 0);
		cr_assert_eq(m.role, ROLE_STEP_DIR, "'%s'", buf);
		cr_assert_eq(m.kind, c->kind);
		cr_assert_eq(m.step, c->step);
		if (c->step != LAYOUT_STEP_RELEASE) {
			cr_assert_eq(layout_classify(buf, LAYOUT_NONE, &m), 0);
			cr_assert_eq(m.step, c->step);
			cr_assert(m.kind == c->kind || (m.flags & LAYOUT_F_AMBIGUOUS));
		}
		/* Exactly enough room, and one byte short. */
		cr_assert_eq(layout_step_dir_name(c->kind, c->step, buf, (size_t)rc + 1), rc);
		cr_assert_eq(layout_step_dir_name(c->kind, c->step, buf, (size_t)rc), -ENOSPC);
		cr_assert_eq(layout_step_dir_name(c->kind, c->step, NULL, 0), -ENOSPC);
	}
	cr_assert_eq(layout_step_dir_name(LAYOUT_HF, 1, NULL, 5), -EINVAL);
}

/* ---- tracker parse ---------------------------------------------------------------------- */

struct tcase {
	enum layout_kind kind;
	const char *name;
	const char *buf;
	size_t len; /* 0 = strlen(buf) unless buf is "" */
	int rc;
	int64_t step;
	int64_t epoch;
	const char *file;
};

#define T_OK(k, b, s) { k, NULL, b, 0, 0, s, -1, "" }
#define T_BAD(k, b) { k, NULL, b, 0, -EINVAL, 0, 0, NULL }
#define MF1J(b, s, e, f) { LAYOUT_MF1, "meta.json", b, 0, 0, s, e, f }
#define MF1BAD(b) { LAYOUT_MF1, "meta.json", b, 0, -EINVAL, 0, 0, NULL }

static const struct tcase tracker_cases[] = {
	/* Megatron: "123" or "release", stripped */
	T_OK(MEG, "100", 100),
	T_OK(MEG, "100\n", 100),
	T_OK(MEG, "  100 \t\r\n", 100),
	T_OK(MEG, "0000100", 100),
	T_OK(MEG, "0", 0),
	T_OK(MEG, "release", LAYOUT_STEP_RELEASE),
	T_OK(MEG, "release\n", LAYOUT_STEP_RELEASE),
	T_OK(MEG, "9223372036854775807", INT64_MAX),
	T_OK(MEG, "9007199254740993", 9007199254740993LL),
	T_BAD(MEG, ""),
	T_BAD(MEG, "   \n"),
	T_BAD(MEG, "abc"),
	T_BAD(MEG, "-5"),
	T_BAD(MEG, "+5"),
	T_BAD(MEG, "1_000"),
	T_BAD(MEG, "10 0"),
	T_BAD(MEG, "100abc"),
	T_BAD(MEG, "0x10"),
	T_BAD(MEG, "1e3"),
	T_BAD(MEG, "9223372036854775808"),
	T_BAD(MEG, "99999999999999999999999999"),
	T_BAD(MEG, "../../etc/passwd"),
	T_BAD(MEG, "iter_0000100"),
	T_BAD(MEG, "Release"),
	T_BAD(MEG, "releases"),
	{ MEG, NULL, "1\0" "00", 4, -EINVAL, 0, 0, NULL },
	{ MEG, NULL, "100\0", 4, -EINVAL, 0, 0, NULL },
	{ MEG, NULL, "100", 2, 0, 10, -1, "" }, /* len bounds the read */
	/* MindFormers 2.0: str(step) only */
	T_OK(MF2, "100", 100),
	T_OK(MF2, "100\n", 100),
	T_BAD(MF2, "release"),
	T_BAD(MF2, "-1"),
	/* DeepSpeed: the tag */
	T_OK(DS, "global_step100", 100),
	T_OK(DS, "global_step100\n", 100),
	T_OK(DS, " global_step0 ", 0),
	T_BAD(DS, "global_step"),
	T_BAD(DS, "100"),
	T_BAD(DS, "global_step-1"),
	T_BAD(DS, "my_tag"),
	T_BAD(DS, "global_step100/../../x"),
	T_BAD(DS, "global_step 100"),
	T_BAD(DS, "global_step18446744073709551616"),
	T_BAD(DS, "../../etc/passwd"),
	/* InternEvo: no tracker (its marker is inside the step) */
	{ IE, "100.step", "\x80\x02}q\0junk", 9, -EOPNOTSUPP, 0, 0, NULL },
	/* MindFormers 1.0 meta.json */
	MF1J("{\"last_epoch\": 3, \"last_step\": 100, \"last_ckpt_file\": \"llama_rank_0-3_100.ckpt\"}",
	     100, 3, "llama_rank_0-3_100.ckpt"),
	MF1J("{\"last_epoch\":3,\"last_step\":100,\"last_ckpt_file\":\"a.ckpt\"}\n", 100, 3,
	     "a.ckpt"),
	MF1J(" {\n \"last_ckpt_file\" : \"a.ckpt\" ,\"last_step\":7, \"last_epoch\":0 } ", 7, 0,
	     "a.ckpt"),
	MF1J("{\"x\": [1, {\"y\": null}, true, -2.5e3, \"s\"], \"last_epoch\": 1, \"last_step\": 2, "
	     "\"last_ckpt_file\": \"f\", \"z\": NaN}",
	     2, 1, "f"),
	MF1J("{\"last_epoch\": 1, \"last_step\": 2, \"last_step\": 5, \"last_ckpt_file\": \"f\"}", 5,
	     1, "f"),
	MF1J("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"\\u00e9t\\u00e9.ckpt\"}", 2,
	     1, "\xc3\xa9t\xc3\xa9.ckpt"),
	MF1J("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"x\\ud83d\\ude00\"}", 2, 1,
	     "x\xf0\x9f\x98\x80"),
	MF1J("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"\xc3\xa9\"}", 2, 1,
	     "\xc3\xa9"),
	MF1J("{\"last_epoch\": 1, \"last_step\": 9223372036854775807, \"last_ckpt_file\": \"f\"}",
	     INT64_MAX, 1, "f"),
	MF1BAD(""),
	MF1BAD("{}"),
	MF1BAD("[]"),
	MF1BAD("null"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2}"),
	MF1BAD("{\"last_step\": 2, \"last_ckpt_file\": \"f\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": -1, \"last_ckpt_file\": \"f\"}"),
	MF1BAD("{\"last_epoch\": -1, \"last_step\": 1, \"last_ckpt_file\": \"f\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 1.5, \"last_ckpt_file\": \"f\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 1e2, \"last_ckpt_file\": \"f\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 0100, \"last_ckpt_file\": \"f\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": \"100\", \"last_ckpt_file\": \"f\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": true, \"last_ckpt_file\": \"f\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 99999999999999999999, \"last_ckpt_file\": \"f\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"../../etc/passwd\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"a/b.ckpt\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"..\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \".\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"a\\u0000b\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"a\\u002fb\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"\\ud800\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"\\udc00x\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"\\q\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"\xff\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"a\nb\"}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": 5}"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"f\"} x"),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"f\""),
	MF1BAD("{\"last_epoch\": 1, \"last_step\": 2, \"last_ckpt_file\": \"f\",}"),
	MF1BAD("{\"last_epoch\": 1 \"last_step\": 2, \"last_ckpt_file\": \"f\"}"),
	MF1BAD("{'last_epoch': 1, 'last_step': 2, 'last_ckpt_file': 'f'}"),
	MF1BAD("{\"a\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"),
	MF1BAD("100"),
	/* layouts without a tracker, and bad kinds */
	{ HF, NULL, "100", 0, -EOPNOTSUPP, 0, 0, NULL },
	{ DCP, NULL, "100", 0, -EOPNOTSUPP, 0, 0, NULL },
	{ ORB, NULL, "100", 0, -EOPNOTSUPP, 0, 0, NULL },
	{ LAYOUT_NONE, NULL, "100", 0, -EINVAL, 0, 0, NULL },
	{ (enum layout_kind)40, NULL, "100", 0, -EINVAL, 0, 0, NULL },
};

#define N_TRACKER_CASES (sizeof(tracker_cases) / sizeof(tracker_cases[0]))

CT_INDEX_PARAMETERS(layout, tracker_parse, N_TRACKER_CASES)

ParameterizedTest(size_t *ci, layout, tracker_parse)
{
	const struct tcase *c = &tracker_cases[*ci];
	size_t len = c->len ? c->len : strlen(c->buf);
	/* Copy to an exact-size heap buffer so ASan catches any read past len. */
	char *b = malloc(len ? len : 1);
	cr_assert_not_null(b);
	memcpy(b, c->buf, len);
	struct layout_tracker t;
	memset(&t, 0x77, sizeof(t));
	int rc = layout_tracker_parse(c->kind, c->name, b, len, &t);
	cr_assert_eq(rc, c->rc, "'%.*s' as %s: rc %d want %d", (int)len, c->buf,
		     layout_name(c->kind), rc, c->rc);
	if (rc == 0) {
		cr_expect_eq(t.step, c->step, "step %" PRId64 " want %" PRId64, t.step, c->step);
		cr_expect_eq(t.epoch, c->epoch);
		cr_expect_str_eq(t.ckpt_file, c->file);
	} else {
		struct layout_tracker canary;
		memset(&canary, 0x77, sizeof(canary));
		cr_assert(memcmp(&t, &canary, sizeof(t)) == 0, "ret touched on failure");
	}
	free(b);
}

Test(layout, tracker_parse_bad_args)
{
	struct layout_tracker t;

	cr_assert_eq(layout_tracker_parse(LAYOUT_MEGATRON, NULL, "1", 1, NULL), -EINVAL);
	cr_assert_eq(layout_tracker_parse(LAYOUT_MEGATRON, NULL, NULL, 1, &t), -EINVAL);
	cr_assert_eq(layout_tracker_parse(LAYOUT_MEGATRON, NULL, NULL, 0, &t), -EINVAL);
	cr_assert_eq(layout_tracker_parse(LAYOUT_INTERNEVO, "5.step", NULL, 0, &t), -EOPNOTSUPP);
}

/* 10 MB of junk of several kinds, to every kind's parser. */
Test(layout, tracker_parse_10mb_junk)
{
	const size_t n = 10u << 20;
	char *b = malloc(n);
	cr_assert_not_null(b);
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (int variant = 0; variant < 4; variant++) {
		for (size_t i = 0; i < n; i++) {
			switch (variant) {
			case 0: x ^= x << 13, x ^= x >> 7, x ^= x << 17, b[i] = (char)x; break;
			case 1: b[i] = '1'; break;
			case 2: b[i] = (i == n - 3) ? '1' : (i > n - 3 ? '0' : ' '); break;
			default: b[i] = (i < n / 2) ? '{' : '}'; break;
			}
		}
		for (int k = 1; k < LAYOUT_KIND_COUNT; k++) {
			struct layout_tracker t;
			int rc = layout_tracker_parse((enum layout_kind)k, "junk", b, n, &t);
			if (layout_desc(k)->tracker == LAYOUT_TRACKER_NONE ||
			    layout_desc(k)->tracker == LAYOUT_TRACKER_COPY)
				cr_assert_eq(rc, -EOPNOTSUPP);
			else
				cr_assert_eq(rc, -EINVAL, "variant %d kind %s: %d", variant,
					     layout_name((enum layout_kind)k), rc);
		}
	}
	/* Right at the cap: 4096 bytes of whitespace around a number is accepted, 4097 is not. */
	memset(b, ' ', LAYOUT_TRACKER_MAX + 1);
	memcpy(b, "100", 3);
	struct layout_tracker t;
	cr_assert_eq(layout_tracker_parse(LAYOUT_MEGATRON, NULL, b, LAYOUT_TRACKER_MAX, &t), 0);
	cr_assert_eq(t.step, 100);
	cr_assert_eq(layout_tracker_parse(LAYOUT_MEGATRON, NULL, b, LAYOUT_TRACKER_MAX + 1, &t),
		     -EINVAL);
	free(b);
}

/* ---- tracker format: byte-exact -------------------------------------------------------- */

struct fcase {
	enum layout_kind kind;
	int64_t step;
	int64_t epoch;
	const char *file;
	int rc; /* error; success is checked against strlen(want) */
	const char *want;
};

static const struct fcase format_cases[] = {
	{ MEG, 100, -1, "", 3, "100" },
	{ MEG, 0, -1, "", 1, "0" },
	{ MEG, INT64_MAX, -1, "", 19, "9223372036854775807" },
	{ MEG, LAYOUT_STEP_RELEASE, -1, "", 7, "release" },
	{ MF2, 100, -1, "", 3, "100" },
	{ MF2, LAYOUT_STEP_RELEASE, -1, "", -EINVAL, NULL },
	{ DS, 100, -1, "", 14, "global_step100" },
	{ DS, LAYOUT_STEP_RELEASE, -1, "", -EINVAL, NULL },
	{ MEG, -1, -1, "", -EINVAL, NULL },
	{ MEG, -3, -1, "", -EINVAL, NULL },
	/* MF1: python3 -c 'import json; print(json.dumps({...}))' */
	{ MF1, 100, 3, "llama_rank_0-3_100.ckpt", 82,
	  "{\"last_epoch\": 3, \"last_step\": 100, \"last_ckpt_file\": \"llama_rank_0-3_100.ckpt\"}" },
	{ MF1, 100, 3, "\xc3\xa9t\xc3\xa9-1_2.ckpt", 83,
	  "{\"last_epoch\": 3, \"last_step\": 100, \"last_ckpt_file\": \"\\u00e9t\\u00e9-1_2.ckpt\"}" },
	{ MF1, 100, 3, "x\xf0\x9f\x98\x80.ckpt", 78,
	  "{\"last_epoch\": 3, \"last_step\": 100, \"last_ckpt_file\": \"x\\ud83d\\ude00.ckpt\"}" },
	{ MF1, 100, 3, "a\"b\\c\nd\x7f\x01.ckpt", 86,
	  "{\"last_epoch\": 3, \"last_step\": 100, \"last_ckpt_file\": "
	  "\"a\\\"b\\\\c\\nd\\u007f\\u0001.ckpt\"}" },
	{ MF1, 0, 0, "f", 56, "{\"last_epoch\": 0, \"last_step\": 0, \"last_ckpt_file\": \"f\"}" },
	{ MF1, 100, -1, "f", -EINVAL, NULL },
	{ MF1, -1, 1, "f", -EINVAL, NULL },
	{ MF1, 1, 1, "", -EINVAL, NULL },
	{ MF1, 1, 1, "../../etc/passwd", -EINVAL, NULL },
	{ MF1, 1, 1, "..", -EINVAL, NULL },
	{ MF1, 1, 1, "\xff\xfe", -EINVAL, NULL },
	{ MF1, 1, 1, "\xed\xa0\x80", -EINVAL, NULL }, /* UTF-8-encoded surrogate */
	{ MF1, 1, 1, "\xc0\xaf", -EINVAL, NULL },     /* overlong '/' */
	{ HF, 1, -1, "", -EOPNOTSUPP, NULL },
	{ DCP, 1, -1, "", -EOPNOTSUPP, NULL },
	{ ORB, 1, -1, "", -EOPNOTSUPP, NULL },
	{ IE, 1, -1, "", -EOPNOTSUPP, NULL },
	{ LAYOUT_NONE, 1, -1, "", -EINVAL, NULL },
};

Test(layout, tracker_format_exact)
{
	for (size_t i = 0; i < sizeof(format_cases) / sizeof(format_cases[0]); i++) {
		const struct fcase *c = &format_cases[i];
		struct layout_tracker t = { .step = c->step, .epoch = c->epoch };
		snprintf(t.ckpt_file, sizeof(t.ckpt_file), "%s", c->file);
		char buf[512];
		int rc = layout_tracker_format(c->kind, &t, buf, sizeof(buf));
		int want_rc = c->want ? (int)strlen(c->want) : c->rc;
		cr_assert_eq(rc, want_rc, "case %zu: rc %d want %d", i, rc, want_rc);
		if (rc < 0)
			continue;
		cr_assert_eq((size_t)rc, strlen(c->want), "case %zu", i);
		cr_assert_str_eq(buf, c->want, "case %zu", i);
		/* Exactly enough room (content + NUL) works, one byte less does not. */
		char *exact = malloc((size_t)rc + 1);
		cr_assert_eq(layout_tracker_format(c->kind, &t, exact, (size_t)rc + 1), rc);
		cr_assert_str_eq(exact, c->want);
		cr_assert_eq(layout_tracker_format(c->kind, &t, exact, (size_t)rc), -ENOSPC);
		free(exact);
		cr_assert_eq(layout_tracker_format(c->kind, &t, NULL, 0), -ENOSPC);
		/* And it reads back. */
		struct layout_tracker back;
		cr_assert_eq(layout_tracker_parse(c->kind, NULL, buf, (size_t)rc, &back), 0,
			     "case %zu: '%s' does not parse back", i, buf);
		cr_assert_eq(back.step, c->step);
		if (c->kind == LAYOUT_MF1) {
			cr_assert_eq(back.epoch, c->epoch);
			cr_assert_str_eq(back.ckpt_file, c->file);
		}
	}
	struct layout_tracker t = { .step = 1 };
	cr_assert_eq(layout_tracker_format(LAYOUT_MEGATRON, NULL, (char[8]){ 0 }, 8), -EINVAL);
	cr_assert_eq(layout_tracker_format(LAYOUT_MEGATRON, &t, NULL, 8), -EINVAL);
	/* An unterminated ckpt_file is refused, not overrun. */
	struct layout_tracker u = { .step = 1, .epoch = 1 };
	memset(u.ckpt_file, 'a', sizeof(u.ckpt_file));
	char buf[2048];
	cr_assert_eq(layout_tracker_format(LAYOUT_MF1, &u, buf, sizeof(buf)), -EINVAL);
	/* The longest name, all escaped, fits and reads back. */
	memset(u.ckpt_file, 0, sizeof(u.ckpt_file));
	memset(u.ckpt_file, '\x01', LAYOUT_NAME_MAX);
	int rc = layout_tracker_format(LAYOUT_MF1, &u, buf, sizeof(buf));
	cr_assert_gt(rc, 6 * LAYOUT_NAME_MAX);
	struct layout_tracker back;
	cr_assert_eq(layout_tracker_parse(LAYOUT_MF1, NULL, buf, (size_t)rc, &back), 0);
	cr_assert_str_eq(back.ckpt_file, u.ckpt_file);
}

/* Round trips for every kind that has a tracker, over interesting steps. */
Test(layout, tracker_round_trips)
{
	static const int64_t steps[] = { 0, 1, 7, 100, 999999, 10000000, 9007199254740992LL,
					 9007199254740993LL, INT64_MAX - 1, INT64_MAX };
	for (int k = 1; k < LAYOUT_KIND_COUNT; k++) {
		enum layout_kind kind = (enum layout_kind)k;
		for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
			struct layout_tracker t = { .step = steps[i], .epoch = (int64_t)i };
			snprintf(t.ckpt_file, sizeof(t.ckpt_file), "p_rank_0-%zu_%" PRId64 ".ckpt", i,
				 steps[i]);
			char buf[512], path[64];
			int rc = layout_tracker_format(kind, &t, buf, sizeof(buf));
			int prc = layout_tracker_path(kind, steps[i], 3, path, sizeof(path));
			if (layout_desc(kind)->tracker == LAYOUT_TRACKER_NONE) {
				cr_assert_eq(rc, -EOPNOTSUPP);
				cr_assert_eq(prc, -EOPNOTSUPP);
				continue;
			}
			if (layout_desc(kind)->tracker == LAYOUT_TRACKER_COPY) {
				cr_assert_eq(rc, -EOPNOTSUPP); /* a checkpoint, not a text */
				cr_assert_gt(prc, 0);
				continue;
			}
			cr_assert_gt(prc, 0);
			/* The tracker's path classifies as that kind's tracker. */
			struct layout_match m;
			cr_assert_eq(layout_classify(path, kind, &m), 0);
			cr_assert_eq(m.role, ROLE_TRACKER, "'%s'", path);
			cr_assert_eq(m.kind, kind);
			struct layout_tracker back;
			cr_assert_gt(rc, 0);
			cr_assert_eq(layout_tracker_parse(kind, path, buf, (size_t)rc, &back), 0,
				     "%s '%s'", layout_name(kind), buf);
			cr_assert_eq(back.step, steps[i]);
			if (kind == LAYOUT_MF1) {
				cr_assert_eq(back.epoch, (int64_t)i);
				cr_assert_str_eq(back.ckpt_file, t.ckpt_file);
				/* The step file it names classifies as that step. */
				char f[512];
				snprintf(f, sizeof(f), "rank_3/%s", back.ckpt_file);
				cr_assert_eq(layout_classify(f, LAYOUT_NONE, &m), 0);
				cr_assert_eq(m.role, ROLE_STEP_FILE);
				cr_assert_eq(m.step, steps[i]);
				cr_assert_eq(m.epoch, (int64_t)i);
				cr_assert_eq(m.rank, 3);
			}
			/* The trainer's own reader tolerates a trailing newline; so do we. */
			if (kind != LAYOUT_MF1) {
				buf[rc] = '\n';
				cr_assert_eq(layout_tracker_parse(kind, NULL, buf, (size_t)rc + 1,
								  &back), 0);
				cr_assert_eq(back.step, steps[i]);
			}
		}
	}
}

Test(layout, tracker_paths)
{
	char b[64];

	cr_assert_eq(layout_tracker_path(LAYOUT_MEGATRON, -1, -1, b, sizeof(b)), 33);
	cr_assert_str_eq(b, "latest_checkpointed_iteration.txt");
	cr_assert_eq(layout_tracker_path(LAYOUT_MF2, -1, -1, b, sizeof(b)), 33);
	cr_assert_str_eq(b, "latest_checkpointed_iteration.txt");
	cr_assert_eq(layout_tracker_path(LAYOUT_DEEPSPEED, -1, -1, b, sizeof(b)), 6);
	cr_assert_str_eq(b, "latest");
	cr_assert_eq(layout_tracker_path(LAYOUT_MF1, -1, 3, b, sizeof(b)), 16);
	cr_assert_str_eq(b, "rank_3/meta.json");
	cr_assert_eq(layout_tracker_path(LAYOUT_LIGHTNING, -1, -1, b, sizeof(b)), 9);
	cr_assert_str_eq(b, "last.ckpt");
	cr_assert_eq(layout_tracker_path(LAYOUT_INTERNEVO, 100, -1, b, sizeof(b)), -EOPNOTSUPP);
	cr_assert_eq(layout_tracker_path(LAYOUT_MF1, -1, -1, b, sizeof(b)), -EINVAL);
	cr_assert_eq(layout_tracker_path(LAYOUT_HF, 1, 1, b, sizeof(b)), -EOPNOTSUPP);
	cr_assert_eq(layout_tracker_path(LAYOUT_NONE, 1, 1, b, sizeof(b)), -EINVAL);
	cr_assert_eq(layout_tracker_path(LAYOUT_DEEPSPEED, 1, 1, b, 6), -ENOSPC);
	cr_assert_eq(layout_tracker_path(LAYOUT_DEEPSPEED, 1, 1, b, 7), 6);
}

Test(layout, tracker_shared)
{
	cr_assert(layout_tracker_shared(LAYOUT_MEGATRON, LAYOUT_MF2));
	cr_assert(layout_tracker_shared(LAYOUT_MF2, LAYOUT_MEGATRON));
	cr_assert(layout_tracker_shared(LAYOUT_MEGATRON, LAYOUT_MEGATRON));
	cr_assert(layout_tracker_shared(LAYOUT_DEEPSPEED, LAYOUT_DEEPSPEED));
	cr_assert(!layout_tracker_shared(LAYOUT_MEGATRON, LAYOUT_DEEPSPEED));
	cr_assert(!layout_tracker_shared(LAYOUT_MF1, LAYOUT_MEGATRON));
	cr_assert(!layout_tracker_shared(LAYOUT_INTERNEVO, LAYOUT_ORBAX));
	cr_assert(!layout_tracker_shared(LAYOUT_HF, LAYOUT_HF));
	cr_assert(!layout_tracker_shared(LAYOUT_LIGHTNING, LAYOUT_LIGHTNING));
	cr_assert(!layout_tracker_shared(LAYOUT_LIGHTNING, LAYOUT_MEGATRON));
	cr_assert(!layout_tracker_shared(LAYOUT_MEGATRON, LAYOUT_LIGHTNING));
	cr_assert(!layout_tracker_shared(LAYOUT_NONE, LAYOUT_NONE));
	cr_assert(!layout_tracker_shared((enum layout_kind)30, LAYOUT_MF2));
}

/* Each description agrees with its kind's name rules, and the table's shape holds. */
Test(layout, descriptions)
{
	int per_rank = 0;

	for (int k = 0; k < LAYOUT_KIND_COUNT; k++) {
		const struct layout_desc *d = layout_desc(k);
		char path[LAYOUT_PATH_MAX], dir[64], mk[128];
		struct layout_match m;
		int rc;

		cr_assert_eq(d->kind, k);
		cr_assert_str_eq(d->name, layout_name((enum layout_kind)k));
		per_rank += d->per_rank;
		/* a tracker exactly when layout_tracker_path names one, at that name */
		rc = layout_tracker_path((enum layout_kind)k, 5, 3, path, sizeof(path));
		cr_assert_eq(rc > 0, k != LAYOUT_NONE && d->tracker != LAYOUT_TRACKER_NONE, "%s",
			     d->name);
		if (rc > 0) {
			const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;

			cr_assert_str_eq(base, d->tracker_name, "%s", d->name);
			cr_assert_eq(strchr(path, '/') != NULL,
				     d->tracker == LAYOUT_TRACKER_PER_RANK, "%s", d->name);
		}
		cr_assert_eq(layout_tracker_shared((enum layout_kind)k, (enum layout_kind)k),
			     d->tracker == LAYOUT_TRACKER_ROOT || d->tracker == LAYOUT_TRACKER_PER_RANK,
			     "%s", d->name);
		/* per-rank steps exactly when there is no step directory name */
		rc = layout_step_dir_name((enum layout_kind)k, 5, dir, sizeof(dir));
		if (k != LAYOUT_NONE)
			cr_assert_eq(rc == -EOPNOTSUPP, d->per_rank || d->top_files, "%s", d->name);
		cr_assert(!(d->per_rank && d->top_files), "%s", d->name);
		/* a tracker that is a checkpoint is named by the kind's rules, and has no text */
		if (d->tracker == LAYOUT_TRACKER_COPY) {
			struct layout_tracker t = { .step = 5, .epoch = -1 };

			cr_assert_eq(layout_classify(d->tracker_name, (enum layout_kind)k, &m), 0);
			cr_assert_eq(m.role, ROLE_TRACKER, "%s", d->name);
			cr_assert_eq(layout_tracker_parse((enum layout_kind)k, NULL, "5", 1, &t),
				     -EOPNOTSUPP);
			cr_assert_eq(layout_tracker_format((enum layout_kind)k, &t, mk, sizeof(mk)),
				     -EOPNOTSUPP);
		}
		/* the marker classifies as the marker of the kind's step directory */
		if (d->marker && rc > 0) {
			snprintf(mk, sizeof(mk), "%s/%s%s", dir, d->marker_step ? "5" : "", d->marker);
			cr_assert_eq(layout_classify(mk, (enum layout_kind)k, &m), 0);
			cr_assert_eq(m.role, ROLE_MARKER, "%s: %s", d->name, mk);
			cr_assert_eq(m.kind, k, "%s", d->name);
		}
		cr_assert_eq(layout_slot_dir(k) != NULL, k == LAYOUT_NONE || d->slot_dir != NULL);
		cr_assert_eq(layout_per_rank_under(k), k == LAYOUT_NONE || d->per_rank);
	}
	cr_assert_leq(per_rank, 1, "the per-rank machinery and inode range serve one layout");
	cr_assert_eq(layout_desc(-1)->kind, LAYOUT_NONE);
	cr_assert_eq(layout_desc(LAYOUT_KIND_COUNT)->kind, LAYOUT_NONE);
	cr_assert_eq(layout_per_rank_kind(), LAYOUT_MF1);
	cr_assert_null(layout_slot_dir(LAYOUT_KIND_COUNT));

	char buf[16];

	cr_assert_eq(layout_rank_dir_name(LAYOUT_MF1, 12, buf, sizeof(buf)), 7);
	cr_assert_str_eq(buf, "rank_12");
	cr_assert_eq(layout_rank_dir_name(LAYOUT_MF1, 12, buf, 7), -ENOSPC);
	cr_assert_eq(layout_rank_dir_name(LAYOUT_MF1, -1, buf, sizeof(buf)), -EINVAL);
	cr_assert_eq(layout_rank_dir_name(LAYOUT_HF, 0, buf, sizeof(buf)), -EINVAL);
}

Test(layout, names)
{
	static const char *const want[] = { "none", "mf2", "megatron", "mf1", "deepspeed",
					    "hf", "dcp", "internevo", "orbax", "lightning" };
	cr_assert_eq(sizeof(want) / sizeof(want[0]), LAYOUT_KIND_COUNT);
	for (int k = 0; k < LAYOUT_KIND_COUNT; k++) {
		cr_assert_str_eq(layout_name((enum layout_kind)k), want[k]);
		enum layout_kind back = (enum layout_kind)99;
		cr_assert_eq(layout_from_name(want[k], &back), 0);
		cr_assert_eq(back, (enum layout_kind)k);
	}
	enum layout_kind k = LAYOUT_HF;
	cr_assert_eq(layout_from_name("auto", &k), 0);
	cr_assert_eq(k, LAYOUT_NONE);
	k = LAYOUT_HF;
	cr_assert_eq(layout_from_name("Megatron", &k), -EINVAL);
	cr_assert_eq(layout_from_name("", &k), -EINVAL);
	cr_assert_eq(layout_from_name("megatron ", &k), -EINVAL);
	cr_assert_eq(k, LAYOUT_HF);
	cr_assert_eq(layout_from_name(NULL, &k), -EINVAL);
	cr_assert_eq(layout_from_name("hf", NULL), -EINVAL);
	cr_assert_null(layout_name(LAYOUT_KIND_COUNT));
	cr_assert_null(layout_name((enum layout_kind)-1));
}

/* ---- fuzz-ish: 100k random inputs, fixed seed ------------------------------------------- */

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint64_t rnd(void)
{
	/* xorshift64* */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

static const char *const seeds[] = {
	"iter_0000100/mp_rank_00/model_optim_rng.pt",
	"iteration_00000100/model-0000003-0000008.safetensors",
	"rank_0/llama_rank_0-3_100.ckpt.tmp",
	"rank_1/meta.json",
	"global_step100/mp_rank_00_model_states.pt",
	"checkpoint-500/trainer_state.json",
	"step-10/.metadata",
	"100/commit_success.txt",
	"100.orbax-checkpoint-tmp-17/default",
	"100.step",
	"latest_checkpointed_iteration.txt",
	"latest",
	"{\"last_epoch\": 3, \"last_step\": 100, \"last_ckpt_file\": \"a-3_100.ckpt\"}",
	"global_step9223372036854775807",
	"release",
	"epoch=3-step=100-v1.ckpt",
	"last-v2.ckpt",
	"epoch=0-step=5.ckpt.ab_9xyz0.tmp",
	"tmpab_9xyz0",
};

static size_t gen(char *out, size_t cap)
{
	static const char alpha[] = "0123456789/._-_iterationckpt_rankglobalstepmetajson{}\":, \n";
	size_t n;
	uint64_t mode = rnd() % 3;

	if (mode == 0) { /* random bytes, any value */
		n = rnd() % 300;
		for (size_t i = 0; i < n; i++)
			out[i] = (char)rnd();
	} else if (mode == 1) { /* the layouts' own alphabet */
		n = rnd() % 120;
		for (size_t i = 0; i < n; i++)
			out[i] = alpha[rnd() % (sizeof(alpha) - 1)];
	} else { /* a mutated real name */
		const char *s = seeds[rnd() % (sizeof(seeds) / sizeof(seeds[0]))];
		n = strlen(s);
		memcpy(out, s, n);
		for (int m = (int)(rnd() % 4); m >= 0; m--) {
			size_t at = n ? rnd() % n : 0;
			switch (rnd() % 4) {
			case 0: if (n) out[at] = (char)rnd(); break;
			case 1: if (n) out[at] = (char)('0' + rnd() % 10); break;
			case 2: if (n + 1 < cap) { memmove(out + at + 1, out + at, n - at); out[at] = alpha[rnd() % (sizeof(alpha) - 1)]; n++; } break;
			default: if (n) { memmove(out + at, out + at + 1, n - at - 1); n--; } break;
			}
		}
	}
	assert(n < cap);
	return n;
}

Test(layout, fuzz_100k, .timeout = 120)
{
	char buf[512];
	int hits[5] = { 0 };

	for (int iter = 0; iter < 100000; iter++) {
		size_t n = gen(buf, sizeof(buf));
		/* The exact-size copy lets ASan see any read past n. */
		char *b = malloc(n + 1);
		memcpy(b, buf, n);
		b[n] = '\0';
		enum layout_kind forced = (enum layout_kind)(rnd() % LAYOUT_KIND_COUNT);

		struct layout_match m1, m2;
		int rc = layout_classify(b, forced, &m1);
		cr_assert(rc == 0 || rc == -EINVAL, "rc %d", rc);
		cr_assert_eq(layout_classify(b, forced, &m2), rc);
		if (rc == 0) {
			cr_assert(memcmp(&m1, &m2, sizeof(m1)) == 0, "not deterministic");
			cr_assert(m1.role <= ROLE_TRACKER);
			cr_assert(forced == LAYOUT_NONE || m1.kind == LAYOUT_NONE ||
				  m1.kind == forced);
			if (m1.role == ROLE_PLAIN)
				cr_assert(m1.step == LAYOUT_STEP_NONE && m1.step_prefix_len == 0);
			if (m1.role == ROLE_STEP_DIR || m1.role == ROLE_STEP_FILE ||
			    m1.role == ROLE_MARKER)
				cr_assert(m1.step >= 0 || m1.step == LAYOUT_STEP_RELEASE);
			check_prefix(b, forced, &m1);
			hits[m1.role]++;
		}

		for (int k = 1; k < LAYOUT_KIND_COUNT; k++) {
			struct layout_tracker t1, t2;
			int r1 = layout_tracker_parse((enum layout_kind)k, b, b, n, &t1);
			int r2 = layout_tracker_parse((enum layout_kind)k, b, b, n, &t2);
			cr_assert_eq(r1, r2);
			cr_assert(r1 == 0 || r1 == -EINVAL || r1 == -EOPNOTSUPP);
			if (r1 != 0)
				continue;
			cr_assert(memcmp(&t1, &t2, sizeof(t1)) == 0);
			cr_assert(t1.step >= 0 || t1.step == LAYOUT_STEP_RELEASE);
			char out[2048];
			int f = layout_tracker_format((enum layout_kind)k, &t1, out, sizeof(out));
			if (k == LAYOUT_INTERNEVO) {
				cr_assert_eq(f, -EOPNOTSUPP);
				continue;
			}
			cr_assert_gt(f, 0, "%s: parsed but cannot format (%d)",
				     layout_name((enum layout_kind)k), f);
			struct layout_tracker t3;
			cr_assert_eq(layout_tracker_parse((enum layout_kind)k, NULL, out, (size_t)f,
							  &t3), 0);
			cr_assert_eq(t3.step, t1.step);
			cr_assert_eq(t3.epoch, t1.epoch);
			cr_assert_str_eq(t3.ckpt_file, t1.ckpt_file);
		}
		free(b);
	}
	/* The generator reaches every role. */
	for (int r = 0; r <= ROLE_TRACKER; r++)
		cr_expect_gt(hits[r], 0, "role %d never produced", r);
}
