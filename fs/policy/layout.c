/* SPDX-License-Identifier: MIT */
/*
 * layout.c — checkpoint layouts: one table of rules, and the functions that read it.
 *
 * Invariants of every successful layout_classify() (asserted at its end):
 *   1. role == ROLE_PLAIN  ⇒ step == LAYOUT_STEP_NONE, epoch == -1, step_prefix_len == 0.
 *      kind may still be set when the path is a layout's container (MF1 `rank_N/`).
 *   2. role ∈ {STEP_DIR, STEP_FILE, MARKER} ⇒ kind != LAYOUT_NONE and
 *      (step >= 0 or step == LAYOUT_STEP_RELEASE).
 *   3. role ∈ {STEP_DIR, MARKER} or a STEP_FILE of a step-directory layout ⇒ step_prefix_len > 0
 *      and path[0, step_prefix_len) classifies as ROLE_STEP_DIR with the same step, and the
 *      same kind unless LAYOUT_F_AMBIGUOUS (`N/commit_success.txt` is Orbax, `N/` InternEvo).
 *      InternEvo slots (LAYOUT_F_SLOT) are step directories at depth 2, `snapshot/K`.
 *      MF1 and Lightning step files (no step directory) have step_prefix_len == 0.
 *   4. role == ROLE_TRACKER ⇒ kind has a tracker; step == LAYOUT_STEP_NONE;
 *      step_prefix_len == 0.
 *   5. forced != LAYOUT_NONE ⇒ kind ∈ {LAYOUT_NONE, forced}.
 *   6. The result depends on (path, forced) only: no state, no allocation, no I/O.
 *
 * Parsing never reads past the bytes it was given; every digit run is checked for int64_t
 * overflow before it is accumulated.
 */
#include "fs/policy/layout.h"
#include "fs/policy/layout_int.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* How a rule recognises its steps. */
enum rule_shape {
	SHAPE_DIGITS_DIR, /* top-level <prefix><digits><suffix>: a step directory */
	SHAPE_NAMED_DIR,  /* top-level <prefix> exactly: a step directory of fixed step */
	SHAPE_RANK_DIR,   /* top-level <prefix><rank>/ holding per-rank step files (MF1) */
	SHAPE_KV_FILE,    /* top-level step file: a token <prefix><digits> among the stem's
			     sep-separated tokens, one of exts (Lightning) */
};

/* How a rule's tracker is named and written. */
enum tracker_fmt {
	TRK_NONE,
	TRK_DECIMAL,         /* "123", root file `tracker` (MindFormers 2.0) */
	TRK_DECIMAL_RELEASE, /* "123" or "release", root file `tracker` (Megatron) */
	TRK_TAG,             /* "<tag_prefix>123", root file `tracker` (DeepSpeed) */
	TRK_MF1_JSON,        /* `<rank dir>/<tracker>`, json.dump of three keys (MF1) */
	TRK_COPY,            /* root `<tracker><anything><exts[0]>`: a full checkpoint or a symlink
				to a step file, not a text (Lightning last*.ckpt) */
};

typedef int (*rank_fn)(const char *name, size_t len);

static int rank_distcp(const char *name, size_t len);
static int rank_mf2(const char *name, size_t len);
static int rank_hf_rng(const char *name, size_t len);

/*
 * One row per way a framework names a step. Rows are tried in order; the first match wins.
 * A kind may have several rows (Megatron: iter_ and release; HF: checkpoint- and its tmp-
 * variant; Orbax: the tmp directory and the final one). The first row of a kind that has a
 * tracker gives the kind's tracker.
 */
struct layout_rule {
	enum layout_kind kind;
	enum rule_shape shape;
	const char *prefix;        /* text before the digits (SHAPE_NAMED_DIR: the whole name) */
	unsigned min_digits;       /* fewest digits: a zero-padded width is a minimum */
	unsigned fmt_width;        /* zero-padded width the trainer writes (0 = none) */
	const char *suffix;        /* text after the digits, or NULL */
	bool suffix_open;          /* anything may follow suffix */
	bool forced_only;          /* only under -o layout=<kind> */
	int64_t fixed_step;        /* SHAPE_NAMED_DIR: the step */
	unsigned flags;            /* LAYOUT_F_* of every path under the row */
	const char *marker;        /* in-step commit marker, directly in the step dir, or NULL;
				      with marker_step, the suffix after the step's digits */
	bool marker_step;          /* the marker is "<step><marker>" (InternEvo `N/N.step`) */
	const char *tracker;       /* see enum tracker_fmt */
	enum tracker_fmt fmt;
	const char *tag_prefix;    /* TRK_TAG: text before the step in the tracker */
	const char *const *exts;   /* SHAPE_RANK_DIR, SHAPE_KV_FILE: step-file extensions */
	char sep;                  /* SHAPE_KV_FILE: the separator of the stem's tokens */
	const char *tmp_prefix;    /* SHAPE_KV_FILE: a root temp `<tmp_prefix>` + TMP_RAND_LEN
				      of [a-z0-9_], recognised under forced only, or NULL */
	rank_fn file_rank;         /* a step file's rank from its last component, or NULL */
};

#define LATEST_ITER "latest_checkpointed_iteration.txt"

static const char *const mf1_exts[] = { ".ckpt", ".safetensors", NULL };
static const char *const lightning_exts[] = { ".ckpt", NULL };

/* Random characters of a Python tempfile name (tempfile._RandomNameSequence: 8 of
 * "abcdefghijklmnopqrstuvwxyz0123456789_"). */
#define TMP_RAND_LEN 8

/* The layout rules (DESIGN.md "Steps"; formats and sources in layout.h). */
static const struct layout_rule layout_rules[] = {
	/* Megatron-LM: iter_{:07d}/ ; legacy mp_rank_XX[_YYY]/model_optim_rng.pt, torch_dist
	 * __R_K.distcp + .metadata + metadata.json + common.pt; root tracker, no in-step marker. */
	{ .kind = LAYOUT_MEGATRON, .shape = SHAPE_DIGITS_DIR, .prefix = "iter_", .min_digits = 7,
	  .fmt_width = 7, .tracker = LATEST_ITER, .fmt = TRK_DECIMAL_RELEASE,
	  .file_rank = rank_distcp },
	{ .kind = LAYOUT_MEGATRON, .shape = SHAPE_NAMED_DIR, .prefix = "release",
	  .forced_only = true, .fixed_step = LAYOUT_STEP_RELEASE, .file_rank = rank_distcp },
	/* MindFormers 2.0: iteration_{:08d}/ (7 digits in its docs), same root tracker. */
	{ .kind = LAYOUT_MF2, .shape = SHAPE_DIGITS_DIR, .prefix = "iteration_", .min_digits = 7,
	  .fmt_width = 8, .tracker = LATEST_ITER, .fmt = TRK_DECIMAL, .file_rank = rank_mf2 },
	/* DeepSpeed: global_step{N}/, root `latest` holds the tag. */
	{ .kind = LAYOUT_DEEPSPEED, .shape = SHAPE_DIGITS_DIR, .prefix = "global_step",
	  .min_digits = 1, .tracker = "latest", .fmt = TRK_TAG, .tag_prefix = "global_step" },
	/* Hugging Face Trainer: checkpoint-{N}/, trainer_state.json written last. */
	{ .kind = LAYOUT_HF, .shape = SHAPE_DIGITS_DIR, .prefix = "checkpoint-", .min_digits = 1,
	  .marker = "trainer_state.json", .file_rank = rank_hf_rng },
	{ .kind = LAYOUT_HF, .shape = SHAPE_DIGITS_DIR, .prefix = "tmp-checkpoint-",
	  .min_digits = 1, .flags = LAYOUT_F_TMP, .marker = "trainer_state.json",
	  .file_rank = rank_hf_rng },
	/* PyTorch DCP / torchtitan: step-{N}/, .metadata renamed from .metadata.tmp, last. */
	{ .kind = LAYOUT_DCP, .shape = SHAPE_DIGITS_DIR, .prefix = "step-", .min_digits = 1,
	  .marker = ".metadata", .file_rank = rank_distcp },
	/* Orbax, in progress: {N}.orbax-checkpoint-tmp<anything>/, renamed to {N}/. */
	{ .kind = LAYOUT_ORBAX, .shape = SHAPE_DIGITS_DIR, .prefix = "", .min_digits = 1,
	  .suffix = ".orbax-checkpoint-tmp", .suffix_open = true, .flags = LAYOUT_F_TMP,
	  .marker = "commit_success.txt" },
	/* InternEvo: {N}/ sealed by {N}/{N}.step, written last by the log rank (before Orbax: it
	 * claims all-digit names); snapshot slots `snapshot/K/` are handled in layout_classify. */
	{ .kind = LAYOUT_INTERNEVO, .shape = SHAPE_DIGITS_DIR, .prefix = "", .min_digits = 1,
	  .marker = ".step", .marker_step = true },
	/* Orbax, committed: {N}/ with commit_success.txt. */
	{ .kind = LAYOUT_ORBAX, .shape = SHAPE_DIGITS_DIR, .prefix = "", .min_digits = 1,
	  .marker = "commit_success.txt" },
	/* MindFormers 1.0: rank_{r}/{prefix}-{epoch}_{step}.ckpt|.safetensors, rank_{r}/meta.json. */
	{ .kind = LAYOUT_MF1, .shape = SHAPE_RANK_DIR, .prefix = "rank_", .min_digits = 1,
	  .tracker = "meta.json", .fmt = TRK_MF1_JSON, .exts = mf1_exts },
	/* Lightning ModelCheckpoint: `epoch=E-step=S[-vN].ckpt` at the root, `last*.ckpt`. */
	{ .kind = LAYOUT_LIGHTNING, .shape = SHAPE_KV_FILE, .prefix = "step=", .min_digits = 1,
	  .tracker = "last", .fmt = TRK_COPY, .exts = lightning_exts, .sep = '-',
	  .tmp_prefix = "tmp" },
};

#define N_RULES (sizeof(layout_rules) / sizeof(layout_rules[0]))

/*
 * One row per kind: what the layout is besides its names (struct layout_desc in layout.h).
 * marker and tracker_name repeat what the kind's rules above say (test_layout checks that they
 * agree); the other traits are read from the trainers' code cited in layout.h and policy.h.
 */
static const struct layout_desc layout_descs[LAYOUT_KIND_COUNT] = {
	[LAYOUT_NONE] = { .kind = LAYOUT_NONE, .name = "none" },
	/* root tracker written after every rank's files; metadata.json lists them */
	[LAYOUT_MF2] = { .kind = LAYOUT_MF2, .name = "mf2", .marker_after_all_ranks = true,
			 .names_list = "metadata.json", .tracker = LAYOUT_TRACKER_ROOT,
			 .tracker_name = LATEST_ITER, .found_by_tracker = true },
	[LAYOUT_MEGATRON] = { .kind = LAYOUT_MEGATRON, .name = "megatron",
			      .marker_after_all_ranks = true, .tracker = LAYOUT_TRACKER_ROOT,
			      .tracker_name = LATEST_ITER, .found_by_tracker = true },
	/* per-rank files under rank_N/, each rank's meta.json names its newest */
	[LAYOUT_MF1] = { .kind = LAYOUT_MF1, .name = "mf1", .per_rank = true,
			 .tracker = LAYOUT_TRACKER_PER_RANK, .tracker_name = "meta.json" },
	/* `latest` is written by rank 0 without a barrier: other ranks' files may follow it */
	[LAYOUT_DEEPSPEED] = { .kind = LAYOUT_DEEPSPEED, .name = "deepspeed", .names_repeat = true,
			       .tracker = LAYOUT_TRACKER_ROOT, .tracker_name = "latest",
			       .found_by_tracker = true },
	/* trainer_state.json is written by the main process, not after a barrier on every rank */
	[LAYOUT_HF] = { .kind = LAYOUT_HF, .name = "hf", .marker = "trainer_state.json",
			.names_repeat = true },
	[LAYOUT_DCP] = { .kind = LAYOUT_DCP, .name = "dcp", .marker = ".metadata",
			 .marker_after_all_ranks = true },
	[LAYOUT_INTERNEVO] = { .kind = LAYOUT_INTERNEVO, .name = "internevo",
			       .slot_dir = LAYOUT_SLOT_DIR, .marker = ".step", .marker_step = true,
			       .marker_after_all_ranks = true },
	[LAYOUT_ORBAX] = { .kind = LAYOUT_ORBAX, .name = "orbax", .seal_by_rename = true,
			   .marker = "commit_success.txt", .marker_after_all_ranks = true },
	/* rank 0 alone writes each step file and last*.ckpt; resume loads the newest last*.ckpt
	 * (none: a fresh start). last.ckpt is a checkpoint, not a claim naming a step, so no claim
	 * ever seals a step (not found_by_tracker): a step file is judged at its close */
	[LAYOUT_LIGHTNING] = { .kind = LAYOUT_LIGHTNING, .name = "lightning", .top_files = true,
			       .tracker = LAYOUT_TRACKER_COPY, .tracker_name = "last.ckpt" },
};

/* ---- small helpers ------------------------------------------------------------------- */

static bool kind_valid(enum layout_kind k)
{
	return (unsigned)k < LAYOUT_KIND_COUNT;
}

static bool is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Like parse_digits() for an int rank: -1 when not digits or above INT_MAX. */
static int parse_rank(const char *s, size_t n)
{
	int64_t v;

	if (!parse_digits(s, n, &v) || v > INT32_MAX)
		return -1;
	return (int)v;
}

static bool has_prefix(const char *s, size_t n, const char *p)
{
	size_t pl = strlen(p);

	return n >= pl && memcmp(s, p, pl) == 0;
}

static bool has_suffix(const char *s, size_t n, const char *x)
{
	size_t xl = strlen(x);

	return n >= xl && memcmp(s + n - xl, x, xl) == 0;
}

static size_t span_digits(const char *s, size_t n)
{
	size_t i = 0;

	while (i < n && is_digit(s[i]))
		i++;
	return i;
}

static bool rule_applies(const struct layout_rule *r, enum layout_kind forced)
{
	if (forced == LAYOUT_NONE)
		return !r->forced_only;
	return r->kind == forced;
}

/* ---- rank of a step file, from its last component -------------------------------------- */

/* `__{rank}_{k}.distcp` (torch DCP FileSystemWriter; Megatron torch_dist). */
static int rank_distcp(const char *s, size_t n)
{
	if (n < 9 || !has_prefix(s, n, "__") || !has_suffix(s, n, ".distcp"))
		return -1;
	s += 2;
	n -= 2 + strlen(".distcp");
	size_t d = span_digits(s, n);
	if (d == 0 || d + 1 >= n || s[d] != '_' || span_digits(s + d + 1, n - d - 1) != n - d - 1)
		return -1;
	return parse_rank(s, d);
}

/* `[prefix-]{model|opt}-{rank:07d}-{world:07d}.safetensors` (MindFormers 2.0). */
static int rank_mf2(const char *s, size_t n)
{
	if (!has_suffix(s, n, ".safetensors"))
		return -1;
	n -= strlen(".safetensors");
	size_t w = 0;
	while (w < n && is_digit(s[n - 1 - w]))
		w++;
	if (w == 0 || w == n || s[n - 1 - w] != '-')
		return -1;
	n -= w + 1;
	size_t r = 0;
	while (r < n && is_digit(s[n - 1 - r]))
		r++;
	if (r == 0 || r == n || s[n - 1 - r] != '-')
		return -1;
	const char *rank = s + n - r;
	n -= r + 1;
	if (!has_suffix(s, n, "model") && !has_suffix(s, n, "opt"))
		return -1;
	size_t tl = has_suffix(s, n, "model") ? 5 : 3;
	if (n > tl && s[n - tl - 1] != '-')
		return -1;
	return parse_rank(rank, r);
}

/* `rng_state_{process_index}.pth` (transformers Trainer._save_rng_state). */
static int rank_hf_rng(const char *s, size_t n)
{
	if (n < 14 || !has_prefix(s, n, "rng_state_") || !has_suffix(s, n, ".pth"))
		return -1;
	return parse_rank(s + 10, n - 10 - 4);
}

/* ---- step-directory names -------------------------------------------------------------- */

/* Does top-level name s[0, n) match a step-directory rule? Store its step. */
static bool rule_match_dir(const struct layout_rule *r, const char *s, size_t n, int64_t *step)
{
	if (r->shape == SHAPE_NAMED_DIR) {
		if (!eq(s, n, r->prefix))
			return false;
		*step = r->fixed_step;
		return true;
	}
	if (r->shape != SHAPE_DIGITS_DIR || !has_prefix(s, n, r->prefix))
		return false;
	size_t pl = strlen(r->prefix);
	size_t d = span_digits(s + pl, n - pl);
	if (d < r->min_digits)
		return false;
	const char *rest = s + pl + d;
	size_t rl = n - pl - d;
	if (r->suffix == NULL) {
		if (rl != 0)
			return false;
	} else if (r->suffix_open ? !has_prefix(rest, rl, r->suffix) : !eq(rest, rl, r->suffix)) {
		return false;
	}
	return parse_digits(s + pl, d, step);
}

/* First step-directory rule matching s[0, n), or NULL. */
static const struct layout_rule *match_step_dir(const char *s, size_t n, enum layout_kind forced,
						int64_t *step)
{
	for (size_t i = 0; i < N_RULES; i++) {
		const struct layout_rule *r = &layout_rules[i];
		if (rule_applies(r, forced) && rule_match_dir(r, s, n, step))
			return r;
	}
	return NULL;
}

/* ---- MF1 per-rank step files --------------------------------------------------------------- */

/*
 * `{prefix}-{epoch}_{step}{ext}[.tmp]` (MindSpore ModelCheckpoint / MindFormers 1.0
 * CheckpointMonitor: f"{prefix}-{epoch}_{step_in_epoch}.{format}"; prefix may hold '-', '_').
 */
static bool mf1_file(const struct layout_rule *r, const char *s, size_t n, int64_t *epoch,
		     int64_t *step, unsigned *flags)
{
	unsigned f = 0;
	size_t el = 0;

	if (has_suffix(s, n, ".tmp")) {
		n -= 4;
		f |= LAYOUT_F_TMP;
	}
	for (const char *const *e = r->exts; *e; e++) {
		if (has_suffix(s, n, *e)) {
			el = strlen(*e);
			break;
		}
	}
	if (el == 0)
		return false;
	n -= el;
	size_t sd = 0;
	while (sd < n && is_digit(s[n - 1 - sd]))
		sd++;
	if (sd == 0 || sd == n || s[n - 1 - sd] != '_')
		return false;
	size_t ed = 0;
	size_t m = n - sd - 1;
	while (ed < m && is_digit(s[m - 1 - ed]))
		ed++;
	if (ed == 0 || ed == m || s[m - 1 - ed] != '-')
		return false;
	int64_t e, st;
	if (!parse_digits(s + m - ed, ed, &e) || !parse_digits(s + n - sd, sd, &st))
		return false;
	*epoch = e;
	*step = st;
	*flags = f;
	return true;
}

/* ---- Lightning step files at the root -------------------------------------------------- */

/* s[0, n) is n == TMP_RAND_LEN characters of a Python tempfile name. */
static bool tmp_rand(const char *s, size_t n)
{
	if (n != TMP_RAND_LEN)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || is_digit(s[i]) || s[i] == '_'))
			return false;
	return true;
}

/* The extension of r that s[0, n) ends with, as its length; 0 when none. */
static size_t ext_len(const struct layout_rule *r, const char *s, size_t n)
{
	for (const char *const *e = r->exts; *e; e++)
		if (has_suffix(s, n, *e) && n > strlen(*e))
			return strlen(*e);
	return 0;
}

/*
 * A top-level name of a SHAPE_KV_FILE rule (Lightning, layout.h): fills m with ROLE_TRACKER for
 * `<tracker>*<ext>`, ROLE_STEP_FILE for a stem holding the token `<prefix><digits>` (the first
 * such token; tokens split on r->sep), flagged LAYOUT_F_TMP for `<name><ext>.XXXXXXXX.tmp`
 * (lightning.md, cloud_io variant S); a root temp `<tmp_prefix>XXXXXXXX` only when forced.
 * Returns false, m untouched, when the name is none of these.
 */
static bool kv_file(const struct layout_rule *r, enum layout_kind forced, const char *s, size_t n,
		    struct layout_match *m)
{
	unsigned f = 0;
	size_t pl = strlen(r->prefix);

	if (forced == r->kind && r->tmp_prefix && has_prefix(s, n, r->tmp_prefix) &&
	    tmp_rand(s + strlen(r->tmp_prefix), n - strlen(r->tmp_prefix))) {
		m->kind = r->kind;
		m->flags = LAYOUT_F_TMP;
		return true;
	}
	if (has_suffix(s, n, ".tmp") && n > 4 + 1 + TMP_RAND_LEN &&
	    s[n - 4 - TMP_RAND_LEN - 1] == '.' && tmp_rand(s + n - 4 - TMP_RAND_LEN, TMP_RAND_LEN)) {
		n -= 4 + TMP_RAND_LEN + 1;
		f = LAYOUT_F_TMP;
	}
	size_t el = ext_len(r, s, n);
	if (el == 0)
		return false;
	n -= el;
	if (f == 0 && has_prefix(s, n, r->tracker)) {
		m->kind = r->kind;
		m->role = ROLE_TRACKER;
		return true;
	}
	for (size_t i = 0; i < n;) {
		size_t e = i;
		while (e < n && s[e] != r->sep)
			e++;
		int64_t v;
		if (e - i > pl && has_prefix(s + i, e - i, r->prefix) && e - i - pl >= r->min_digits &&
		    parse_digits(s + i + pl, e - i - pl, &v)) {
			m->kind = r->kind;
			m->role = ROLE_STEP_FILE;
			m->step = v;
			m->flags = f;
			return true;
		}
		i = e + 1;
	}
	return false;
}

/* One path component: s[0, n), not NUL-terminated. */
struct comp {
	const char *s;
	size_t n;
};

/* Is s[0, n) the in-step marker of rule r for step `step`? */
static bool marker_match(const struct layout_rule *r, int64_t step, const char *s, size_t n)
{
	int64_t v;
	size_t d;

	if (!r->marker_step)
		return eq(s, n, r->marker);
	d = span_digits(s, n);
	return d > 0 && eq(s + d, n - d, r->marker) && parse_digits(s, d, &v) && v == step;
}

/*
 * InternEvo's snapshot slots (checkpoint_manager.py, CheckpointManager.try_save_checkpoint:
 * `os.path.join(self.save_ckpt_folder, "snapshot", str(self.snapshot_counter))`): path
 * components c0 == "snapshot" and c1 all digits make c1 a slot, a step directory at depth 2;
 * any "<digits>.step" directly inside it is a marker (a slot keeps the markers of the steps it
 * held before). Returns true and fills m when the path is in a slot or is `snapshot/` itself.
 */
static bool slot_classify(const char *path, struct comp c0, struct comp c1, struct comp last,
			  size_t ncomp, struct layout_match *m)
{
	int64_t k, v;
	size_t d;

	if (!eq(c0.s, c0.n, LAYOUT_SLOT_DIR))
		return false;
	if (ncomp == 1) {
		m->kind = LAYOUT_INTERNEVO; /* the slots' container: plain */
		return true;
	}
	if (!parse_digits(c1.s, c1.n, &k) || span_digits(c1.s, c1.n) != c1.n)
		return false;
	m->kind = LAYOUT_INTERNEVO;
	m->step = k;
	m->flags = LAYOUT_F_SLOT;
	m->step_prefix_len = (size_t)(c1.s + c1.n - path);
	if (ncomp == 2) {
		m->role = ROLE_STEP_DIR;
		return true;
	}
	m->role = ROLE_STEP_FILE;
	if (has_suffix(last.s, last.n, ".tmp"))
		m->flags |= LAYOUT_F_TMP;
	d = span_digits(last.s, last.n);
	if (ncomp == 3 && d > 0 && eq(last.s + d, last.n - d, ".step") &&
	    parse_digits(last.s, d, &v))
		m->role = ROLE_MARKER;
	return true;
}

/* ---- classify -------------------------------------------------------------------------- */

/*
 * Split path into its components, skipping empty ones and ".": the first two into *c0 and *c1,
 * the last into *last, their number into *ret_n. Returns 0, or -EINVAL for a ".." component.
 */
static int split_components(const char *path, struct comp *c0, struct comp *c1, struct comp *last,
			    size_t *ret_n)
{
	size_t ncomp = 0;

	for (const char *p = path; *p;) {
		while (*p == '/')
			p++;
		if (*p == '\0')
			break;
		const char *e = p;
		while (*e && *e != '/')
			e++;
		size_t n = (size_t)(e - p);
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return -EINVAL;
		if (!(n == 1 && p[0] == '.')) {
			struct comp c = { p, n };
			if (ncomp == 0)
				*c0 = c;
			else if (ncomp == 1)
				*c1 = c;
			*last = c;
			ncomp++;
		}
		p = e;
	}
	*ret_n = ncomp;
	return 0;
}

/*
 * Rule 1 of layout_classify: c0 is step directory of rule r (step number step); fill m for the
 * directory itself or for what lies inside it (c1 .. last, ncomp components in all).
 */
static void classify_in_step_dir(const char *path, const struct layout_rule *r, int64_t step,
				 enum layout_kind forced, struct comp c0, struct comp c1,
				 struct comp last, size_t ncomp, struct layout_match *m)
{
	m->kind = r->kind;
	m->step = step;
	m->flags = r->flags;
	m->step_prefix_len = (size_t)(c0.s + c0.n - path);
	/* Another kind claims the same name (all-digit: InternEvo / Orbax). */
	const struct layout_rule *other = NULL;
	for (const struct layout_rule *o = r + 1; o < layout_rules + N_RULES; o++) {
		int64_t s2;
		if (o->kind != r->kind && rule_applies(o, forced) &&
		    rule_match_dir(o, c0.s, c0.n, &s2)) {
			m->flags |= LAYOUT_F_AMBIGUOUS;
			other = o;
			break;
		}
	}
	if (ncomp == 1) {
		m->role = ROLE_STEP_DIR;
		return;
	}
	m->role = ROLE_STEP_FILE;
	if (has_suffix(last.s, last.n, ".tmp"))
		m->flags |= LAYOUT_F_TMP;
	if (ncomp == 2 && r->marker && marker_match(r, step, c1.s, c1.n)) {
		m->role = ROLE_MARKER;
	} else if (ncomp == 2 && other && other->marker &&
		   marker_match(other, step, c1.s, c1.n)) {
		m->role = ROLE_MARKER;
		m->kind = other->kind;
	}
	if (r->file_rank)
		m->rank = r->file_rank(last.s, last.n);
}

/*
 * Rules 2 and 3 of layout_classify, for a path outside any step directory: a root tracker file,
 * or a per-rank directory (MF1) and the tracker or step files in it. m is left as it is when no
 * rule matches.
 */
static void classify_outside_step(enum layout_kind forced, struct comp c0, struct comp c1,
				  size_t ncomp, struct layout_match *m)
{
	for (size_t i = 0; i < N_RULES; i++) {
		const struct layout_rule *r = &layout_rules[i];
		if (!rule_applies(r, forced))
			continue;

		/* 2a. Step files and trackers at the root (Lightning). */
		if (r->shape == SHAPE_KV_FILE) {
			if (ncomp == 1 && kv_file(r, forced, c0.s, c0.n, m))
				return;
			continue;
		}

		/* 2. Root trackers. */
		if (ncomp == 1 && r->shape != SHAPE_RANK_DIR && r->fmt != TRK_NONE) {
			if (eq(c0.s, c0.n, r->tracker)) {
				m->kind = r->kind;
				m->role = ROLE_TRACKER;
				return;
			}
		}

		/* 3. Per-rank directories (MF1). */
		if (r->shape == SHAPE_RANK_DIR && has_prefix(c0.s, c0.n, r->prefix)) {
			size_t pl = strlen(r->prefix);
			int rank = parse_rank(c0.s + pl, c0.n - pl);
			if (rank < 0 || c0.n - pl < r->min_digits)
				continue;
			m->kind = r->kind;
			m->rank = rank;
			if (ncomp != 2)
				return;
			if (eq(c1.s, c1.n, r->tracker)) {
				m->role = ROLE_TRACKER;
				return;
			}
			int64_t epoch, step;
			unsigned flags;
			if (mf1_file(r, c1.s, c1.n, &epoch, &step, &flags)) {
				m->role = ROLE_STEP_FILE;
				m->step = step;
				m->epoch = epoch;
				m->flags = flags;
			}
			return;
		}
	}
}

int layout_classify(const char *path, enum layout_kind forced, struct layout_match *ret)
{
	struct comp c0 = { NULL, 0 }, c1 = { NULL, 0 }, last = { NULL, 0 };
	size_t ncomp = 0;
	int err;

	if (path == NULL || ret == NULL || !kind_valid(forced))
		return -EINVAL;
	if (strnlen(path, LAYOUT_PATH_MAX) >= LAYOUT_PATH_MAX)
		return -ENAMETOOLONG;
	err = split_components(path, &c0, &c1, &last, &ncomp);
	if (err)
		return err;

	struct layout_match m = { .kind = LAYOUT_NONE, .role = ROLE_PLAIN, .step = LAYOUT_STEP_NONE,
				  .epoch = -1, .rank = -1, .flags = 0, .step_prefix_len = 0 };
	if (ncomp == 0)
		goto out;

	/* 0. InternEvo's snapshot slots (a directory of step directories). */
	if (layout_slot_dir(forced) && slot_classify(path, c0, c1, last, ncomp, &m))
		goto out;

	/* 1. A step directory, and what lies inside it. */
	int64_t step;
	const struct layout_rule *r = match_step_dir(c0.s, c0.n, forced, &step);
	if (r)
		classify_in_step_dir(path, r, step, forced, c0, c1, last, ncomp, &m);
	else
		classify_outside_step(forced, c0, c1, ncomp, &m);

out:
	/* Invariants 1, 2, 4, 5 (top of file). */
	assert(m.role != ROLE_PLAIN ||
	       (m.step == LAYOUT_STEP_NONE && m.epoch == -1 && m.step_prefix_len == 0));
	assert(m.role == ROLE_PLAIN || m.role == ROLE_TRACKER ||
	       (m.kind != LAYOUT_NONE && (m.step >= 0 || m.step == LAYOUT_STEP_RELEASE)));
	assert(m.role != ROLE_TRACKER || m.step_prefix_len == 0);
	assert(forced == LAYOUT_NONE || m.kind == LAYOUT_NONE || m.kind == forced);
	*ret = m;
	return 0;
}

int layout_parse_name(const char *name, enum layout_kind forced, enum layout_kind *ret_kind,
		      int64_t *ret_step)
{
	if (name == NULL || ret_kind == NULL || ret_step == NULL || !kind_valid(forced) ||
	    strchr(name, '/'))
		return -EINVAL;
	int64_t step;
	const struct layout_rule *r = match_step_dir(name, strlen(name), forced, &step);
	if (r == NULL)
		return 0;
	*ret_kind = r->kind;
	*ret_step = step;
	return 1;
}

/* ---- names written ---------------------------------------------------------------------- */

static const struct layout_rule *tracker_rule(enum layout_kind kind)
{
	for (size_t i = 0; i < N_RULES; i++)
		if (layout_rules[i].kind == kind && layout_rules[i].fmt != TRK_NONE)
			return &layout_rules[i];
	return NULL;
}

int layout_step_dir_name(enum layout_kind kind, int64_t step, char *buf, size_t cap)
{
	struct out o;

	if (!kind_valid(kind) || kind == LAYOUT_NONE || out_init(&o, buf, cap) < 0)
		return -EINVAL;
	if (layout_descs[kind].per_rank || layout_descs[kind].top_files)
		return -EOPNOTSUPP;
	for (size_t i = 0; i < N_RULES; i++) {
		const struct layout_rule *r = &layout_rules[i];
		if (r->kind != kind || (r->flags & LAYOUT_F_TMP))
			continue;
		if (r->shape == SHAPE_NAMED_DIR && step == r->fixed_step) {
			out_str(&o, r->prefix);
			return out_done(&o);
		}
		if (r->shape == SHAPE_DIGITS_DIR && step >= 0) {
			out_str(&o, r->prefix);
			out_i64(&o, step, r->fmt_width);
			if (r->suffix)
				out_str(&o, r->suffix);
			return out_done(&o);
		}
	}
	return -EINVAL;
}

/* ---- trackers ---------------------------------------------------------------------------- */

int layout_tracker_parse(enum layout_kind kind, const char *name, const char *buf, size_t len,
			 struct layout_tracker *ret)
{
	struct layout_tracker t = { .step = -1, .epoch = -1, .ckpt_file = "" };

	if (ret == NULL || !kind_valid(kind) || kind == LAYOUT_NONE || (buf == NULL && len > 0))
		return -EINVAL;
	const struct layout_rule *r = tracker_rule(kind);
	if (r == NULL || r->fmt == TRK_COPY)
		return -EOPNOTSUPP;

	if (len > LAYOUT_TRACKER_MAX)
		return -EINVAL;
	if (r->fmt == TRK_MF1_JSON) {
		int rc = layout_mf1_json_parse(buf, len, &t);
		if (rc < 0)
			return rc;
		*ret = t;
		return 0;
	}

	/* Megatron, MF2, DeepSpeed: one token, surrounding whitespace stripped. */
	size_t b = 0, e = len;
	while (b < e && is_ws(buf[b]))
		b++;
	while (e > b && is_ws(buf[e - 1]))
		e--;
	const char *s = buf + b;
	size_t n = e - b;
	if (r->fmt == TRK_DECIMAL_RELEASE && eq(s, n, "release")) {
		t.step = LAYOUT_STEP_RELEASE;
	} else if (r->fmt == TRK_TAG) {
		size_t pl = strlen(r->tag_prefix);
		if (!has_prefix(s, n, r->tag_prefix) || !parse_digits(s + pl, n - pl, &t.step))
			return -EINVAL;
	} else if (!parse_digits(s, n, &t.step)) {
		return -EINVAL;
	}
	*ret = t;
	return 0;
}

int layout_tracker_format(enum layout_kind kind, const struct layout_tracker *t, char *buf,
			  size_t cap)
{
	struct out o;

	if (t == NULL || !kind_valid(kind) || kind == LAYOUT_NONE || out_init(&o, buf, cap) < 0)
		return -EINVAL;
	const struct layout_rule *r = tracker_rule(kind);
	if (r == NULL || r->fmt == TRK_COPY)
		return -EOPNOTSUPP;
	if (t->step == LAYOUT_STEP_RELEASE && r->fmt == TRK_DECIMAL_RELEASE) {
		out_str(&o, "release");
		return out_done(&o);
	}
	if (t->step < 0)
		return -EINVAL;
	switch (r->fmt) {
	case TRK_DECIMAL:
	case TRK_DECIMAL_RELEASE:
		out_i64(&o, t->step, 0);
		break;
	case TRK_TAG:
		out_str(&o, r->tag_prefix);
		out_i64(&o, t->step, 0);
		break;
	case TRK_MF1_JSON:
		if (layout_mf1_json_format(t, &o) < 0)
			return -EINVAL;
		break;
	default:
		return -EOPNOTSUPP;
	}
	return out_done(&o);
}

int layout_rank_dir_name(enum layout_kind kind, int rank, char *buf, size_t cap)
{
	struct out o;

	if (!kind_valid(kind) || !layout_descs[kind].per_rank || rank < 0 ||
	    out_init(&o, buf, cap) < 0)
		return -EINVAL;
	for (size_t i = 0; i < N_RULES; i++) {
		if (layout_rules[i].kind == kind && layout_rules[i].shape == SHAPE_RANK_DIR) {
			out_str(&o, layout_rules[i].prefix);
			out_i64(&o, rank, 0);
			return out_done(&o);
		}
	}
	return -EINVAL;
}

int layout_tracker_path(enum layout_kind kind, int64_t step, int rank, char *buf, size_t cap)
{
	struct out o;

	if (!kind_valid(kind) || kind == LAYOUT_NONE || out_init(&o, buf, cap) < 0)
		return -EINVAL;
	const struct layout_rule *r = tracker_rule(kind);
	if (r == NULL)
		return -EOPNOTSUPP;
	(void)step;
	if (r->fmt == TRK_MF1_JSON) {
		if (rank < 0)
			return -EINVAL;
		out_str(&o, r->prefix);
		out_i64(&o, rank, 0);
		out_str(&o, "/");
	}
	out_str(&o, r->tracker);
	if (r->fmt == TRK_COPY)
		out_str(&o, r->exts[0]);
	return out_done(&o);
}

bool layout_tracker_shared(enum layout_kind tracker, enum layout_kind step_kind)
{
	if (!kind_valid(tracker) || !kind_valid(step_kind))
		return false;
	const struct layout_rule *a = tracker_rule(tracker);
	const struct layout_rule *b = tracker_rule(step_kind);
	/* a tracker that is a checkpoint makes no claim (LAYOUT_TRACKER_COPY) */
	if (a == NULL || b == NULL || a->fmt == TRK_COPY || b->fmt == TRK_COPY)
		return false;
	return a == b || (a->fmt != TRK_MF1_JSON && a->fmt != TRK_COPY && b->fmt != TRK_MF1_JSON &&
			  b->fmt != TRK_COPY && strcmp(a->tracker, b->tracker) == 0);
}

const char *layout_name(enum layout_kind kind)
{
	return kind_valid(kind) ? layout_descs[kind].name : NULL;
}

const struct layout_desc *layout_desc(int kind)
{
	return &layout_descs[kind >= 0 && kind < LAYOUT_KIND_COUNT ? kind : LAYOUT_NONE];
}

enum layout_kind layout_per_rank_kind(void)
{
	for (int k = 1; k < LAYOUT_KIND_COUNT; k++)
		if (layout_descs[k].per_rank)
			return (enum layout_kind)k;
	return LAYOUT_NONE;
}

const char *layout_slot_dir(int forced)
{
	/* auto-detection recognises every layout's slots; they share one directory name */
	return forced == LAYOUT_NONE ? LAYOUT_SLOT_DIR : layout_desc(forced)->slot_dir;
}

bool layout_per_rank_under(int forced)
{
	return forced == LAYOUT_NONE || layout_desc(forced)->per_rank;
}

int layout_from_name(const char *name, enum layout_kind *ret)
{
	if (name == NULL || ret == NULL)
		return -EINVAL;
	if (strcmp(name, "auto") == 0) {
		*ret = LAYOUT_NONE;
		return 0;
	}
	for (int k = 0; k < LAYOUT_KIND_COUNT; k++) {
		if (strcmp(name, layout_descs[k].name) == 0) {
			*ret = (enum layout_kind)k;
			return 0;
		}
	}
	return -EINVAL;
}
