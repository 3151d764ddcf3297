/* SPDX-License-Identifier: MIT */
/*
 * layout.h — which checkpoint step a path belongs to, and the trainers' tracker formats.
 *
 * A pure module: no I/O, no allocation, no global state, libc only. Every function is
 * thread-safe and reentrant (it reads only its arguments and constant tables).
 *
 * A layout is described in two tables of layout.c, and nothing outside fs/policy/ chooses
 * behaviour by which framework it is:
 *   - `layout_rules[]`: how its names look (step directories, markers, trackers), one row per
 *     way it names a step (Megatron has `iter_N` and `release`), read by layout_classify();
 *   - `layout_descs[]`: one row per kind, struct layout_desc, every trait the daemon and ckptctl
 *     act on (where steps live, commit marker, seal-by-rename, tracker, slots, per-rank steps,
 *     what resume finds), read through layout_desc().
 * Adding a framework is a value in enum layout_kind, its name rows, and its description row;
 * its traits must be among those struct layout_desc already has. One limit: a per-rank layout
 * (per_rank) has its own machinery in fs/steps/steps_mf1.c and its virtual trackers a fixed
 * inode range (fs/daemon.h VINO_RANK_META), so the table holds at most one (layout_per_rank_kind).
 * Sources of every name and format: ../shared/research/framework-io.md, which read
 *   - Megatron-LM      NVIDIA/Megatron-LM megatron/training/checkpointing.py
 *                      (`iter_{:07d}`, `release`, `mp_rank_XX[_YYY]/model_optim_rng.pt`,
 *                      torch_dist `__R_K.distcp` + `.metadata` + `metadata.json`,
 *                      tracker `latest_checkpointed_iteration.txt` = "123" or "release", no newline)
 *   - MindFormers 2.0  mindspore-lab/mindformers mindformers/checkpoint/checkpoint.py
 *                      (`iteration_{:08d}`, 7 digits in the docs; `[prefix-]model-{rank:07d}-{world:07d}
 *                      .safetensors`; tracker `latest_checkpointed_iteration.txt` = str(step_num))
 *   - MindFormers 1.0  mindspore-lab/mindformers mindformers/core/callback/callback.py
 *                      CheckpointMonitor (`rank_{r}/{prefix}-{epoch}_{step_in_epoch}.ckpt|.safetensors`,
 *                      MindSpore writes `<name>.tmp` then renames; `rank_{r}/meta.json` =
 *                      json.dump({"last_epoch", "last_step", "last_ckpt_file"}))
 *   - DeepSpeed        deepspeedai/DeepSpeed deepspeed/runtime/engine.py (`global_step{N}/`,
 *                      root `latest` = the tag, `zero_to_fp32.py` copied to the root)
 *   - Hugging Face     huggingface/transformers src/transformers/trainer.py (`checkpoint-{N}/`,
 *                      `trainer_state.json` written last, `rng_state_{process_index}.pth`;
 *                      `tmp-checkpoint-{N}` in the releases that renamed, #27820)
 *   - PyTorch DCP      pytorch/torchtitan v0.2.0 (`step-{N}/`, resume = highest step-N holding
 *                      `.metadata`); pytorch torch/distributed/checkpoint/filesystem.py
 *                      FileSystemWriter (`__R_K.distcp`, `.metadata.tmp` → rename → `.metadata`)
 *   - InternEvo        InternLM/InternEvo 05bbd8f internlm/checkpoint/checkpoint_manager.py
 *                      CheckpointManager.save_checkpoint (`<save>/<step>/`, sealed by
 *                      `<step>/<step>.step` which the log rank torch.saves INSIDE the folder after
 *                      a barrier; snapshot slots `<save>/snapshot/{0,1}/` rewritten in place,
 *                      each save adding its `M.step` beside the old ones; resume,
 *                      query_latest_snapshot_step_local: os.walk, the folder holding the highest
 *                      `N.step` wins). No root tracker.
 *   - Orbax            google/orbax 3ff7b24 (`<step>.orbax-checkpoint-tmp…/` renamed to `<step>/`,
 *                      commit = `commit_success.txt` + rename)
 *   - Lightning        Lightning-AI/pytorch-lightning src/lightning/pytorch/callbacks/
 *                      model_checkpoint.py 03763c9 (ModelCheckpoint: `epoch=E-step=S[-vN].ckpt` at
 *                      dirpath, tokens joined by "-", `last[-vN].ckpt` a full copy or a relative
 *                      symlink; resume takes the newest mtime among `last*.ckpt`), fabric
 *                      cloud_io.py 014994a `_atomic_save` (temp from tempfile.mkstemp() in
 *                      $TMPDIR, `tmp` + 8 of [a-z0-9_], moved by shutil.move: across devices an
 *                      O_TRUNC copy in place) and an unpinned variant (`<final>.XXXXXXXX.tmp` beside
 *                      the target, os.replace). Trace: tests/traces/lightning.md
 *
 * Paths are relative to the mount root, which is the trainer's save directory (Megatron
 * `--save`, DeepSpeed `save_dir`, HF `output_dir`, MindFormers 1.0 `output/checkpoint`, …):
 * step directories, root trackers and `rank_N/` directories are recognised only at the top level.
 */
#ifndef CKPTFS_LAYOUT_H
#define CKPTFS_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One per framework. Values are stable (the index may store them); LAYOUT_NONE is 0. */
enum layout_kind {
	LAYOUT_NONE = 0,
	LAYOUT_MF2,       /* MindFormers 2.0 */
	LAYOUT_MEGATRON,  /* Megatron-LM */
	LAYOUT_MF1,       /* MindFormers 1.0 (per-rank files, no step directory) */
	LAYOUT_DEEPSPEED, /* DeepSpeed */
	LAYOUT_HF,        /* Hugging Face Trainer */
	LAYOUT_DCP,       /* PyTorch DCP / torchtitan */
	LAYOUT_INTERNEVO, /* InternEvo */
	LAYOUT_ORBAX,     /* Orbax */
	LAYOUT_LIGHTNING, /* PyTorch Lightning ModelCheckpoint (step files at the root) */
	LAYOUT_KIND_COUNT
};

/* What a path is to its layout. */
enum layout_role {
	ROLE_PLAIN,     /* belongs to no step */
	ROLE_STEP_DIR,  /* the step directory itself, e.g. "iter_0000100" */
	ROLE_STEP_FILE, /* a file (or subdirectory) inside a step, an MF1 per-rank step file, or
			   a Lightning step file at the root */
	ROLE_MARKER,    /* the in-step commit marker (HF trainer_state.json, DCP .metadata,
			   Orbax commit_success.txt) */
	ROLE_TRACKER    /* a tracker naming the newest step (latest_checkpointed_iteration.txt,
			   latest, rank_N/meta.json, Lightning last*.ckpt) */
};

/* Step value of a path with no step (plain files, most trackers). */
#define LAYOUT_STEP_NONE ((int64_t)-1)
/* Step value of Megatron's `release/` directory and of a tracker that reads "release". */
#define LAYOUT_STEP_RELEASE ((int64_t)-2)

/* layout_match.flags */
#define LAYOUT_F_TMP 0x1u       /* an in-progress name that a rename will replace: Orbax
				   `N.orbax-checkpoint-tmp-*`, HF `tmp-checkpoint-N`, a file
				   ending in `.tmp` inside a step or an MF1 `name.ckpt.tmp`,
				   Lightning `<name>.ckpt.XXXXXXXX.tmp` and (under
				   -o layout=lightning only, ROLE_PLAIN) a root `tmpXXXXXXXX` */
#define LAYOUT_F_SLOT 0x4u      /* InternEvo snapshot slot `snapshot/K/` (K all digits, the
				   match's step): a step directory rewritten in place, whose
				   markers "<digits>.step" inside it name the steps it held */
#define LAYOUT_F_AMBIGUOUS 0x2u /* auto-detected all-digit step `N/`: InternEvo, Orbax, or no
				   checkpoint at all (a user's `2024/`); kind says INTERNEVO
				   until `N/commit_success.txt` says ORBAX. A step only on its
				   layout's evidence: policy.h rule 1 */

/* InternEvo's directory of snapshot slots, at the mount root. */
#define LAYOUT_SLOT_DIR "snapshot"

/* Longest path accepted, in bytes, including the terminating NUL (PATH_MAX on Linux). */
#define LAYOUT_PATH_MAX 4096
/* Longest tracker content accepted by layout_tracker_parse(), in bytes. Real trackers are
 * under 300 bytes; anything longer is refused without being scanned. */
#define LAYOUT_TRACKER_MAX 4096
/* Longest file name, in bytes, without the NUL (NAME_MAX on Linux). */
#define LAYOUT_NAME_MAX 255

struct layout_match {
	enum layout_kind kind;  /* LAYOUT_NONE when no rule recognised the path */
	enum layout_role role;
	int64_t step;           /* >= 0, LAYOUT_STEP_RELEASE, or LAYOUT_STEP_NONE (-1) */
	int64_t epoch;          /* MF1 only: the {epoch} of the file name; -1 otherwise */
	int rank;               /* the writer's rank when the name states it, -1 otherwise */
	unsigned flags;         /* LAYOUT_F_* */
	size_t step_prefix_len; /* bytes of path up to and including the step directory's
				   name, so path[0, step_prefix_len) names the step directory;
				   0 when there is none (plain, trackers, MF1, Lightning) */
};

/*
 * layout_classify - say which layout, role, step and rank a path has, by its name alone.
 *
 * @path:   NUL-terminated path relative to the mount root, bytes not necessarily UTF-8, e.g.
 *          "iter_0000100/mp_rank_00/model_optim_rng.pt". Leading, trailing and repeated '/'
 *          and "." components are ignored; "" and "." are the root (ROLE_PLAIN).
 * @forced: LAYOUT_NONE to auto-detect among all rules (layouts may coexist under one mount);
 *          otherwise only that layout's rules apply and every other path is ROLE_PLAIN
 *          (-o layout=NAME).
 * @ret:    filled on success; untouched on failure.
 *
 * Rules, in table order (first match wins; see layout_rules[] in layout.c):
 *   - a top-level name matching a step-directory pattern is ROLE_STEP_DIR; everything under it
 *     is ROLE_STEP_FILE, except the layout's marker directly inside it (ROLE_MARKER). This holds
 *     whether the name is a directory or a regular file: the caller, which knows the type,
 *     treats a regular file with a step-directory name as plain.
 *   - root trackers are ROLE_TRACKER. `latest_checkpointed_iteration.txt` is shared by Megatron
 *     and MindFormers 2.0 (same format); auto-detection reports it as LAYOUT_MEGATRON, and
 *     layout_tracker_shared() says which kinds of step it names.
 *   - InternEvo: `N/N.step` (the digits equal N) is ROLE_MARKER of step N. `snapshot/K/` (K all
 *     digits) is a slot: ROLE_STEP_DIR with step K and LAYOUT_F_SLOT, step_prefix_len covering
 *     "snapshot/K"; `snapshot/K/<digits>.step` is its ROLE_MARKER, anything else under it
 *     ROLE_STEP_FILE; `snapshot` itself is ROLE_PLAIN with kind LAYOUT_INTERNEVO.
 *   - MF1: `rank_N/` is ROLE_PLAIN with kind MF1 and rank N; `rank_N/meta.json` is ROLE_TRACKER;
 *     `rank_N/{prefix}-{epoch}_{step}.ckpt|.safetensors[.tmp]` is ROLE_STEP_FILE with that step
 *     (the digits after the last '_'), epoch and rank N, and step_prefix_len 0. MF1's step
 *     restarts every epoch: key its steps by (epoch, step).
 *   - Lightning: a top-level `<stem>.ckpt` whose stem, split on '-', holds a token
 *     `step=<digits>` is ROLE_STEP_FILE with that step (the global step), step_prefix_len 0 and
 *     rank -1 (rank 0 alone writes); a trailing `-v<digits>` token is a second file of the same
 *     step. `<name>.ckpt.XXXXXXXX.tmp` (8 of [a-z0-9_]) is the same step with LAYOUT_F_TMP. A
 *     top-level `.ckpt` whose stem begins with "last" is its ROLE_TRACKER (Lightning
 *     _find_last_checkpoints: re.match(r"^last(-(\d+))?", stem), so `lastfoo.ckpt` too), tested
 *     before the step token. `tmp` + 8 of [a-z0-9_] at the root (tempfile.mkstemp() when $TMPDIR
 *     is inside the mount) is ROLE_PLAIN with kind LIGHTNING and LAYOUT_F_TMP, only when forced
 *     is LAYOUT_LIGHTNING: the name is too common to claim by auto-detection. A stem with no
 *     `step=` token (a user template without {step}) is ROLE_PLAIN.
 *   - an all-digit top-level name is auto-detected as LAYOUT_INTERNEVO with LAYOUT_F_AMBIGUOUS,
 *     except `N/commit_success.txt`, which is LAYOUT_ORBAX ROLE_MARKER (also flagged): the caller
 *     refines the step's kind when it sees that marker or when `N/` came from renaming an Orbax
 *     `N.orbax-checkpoint-tmp-*` directory. The name only says what `N/` would be: whether it is
 *     a step at all is the policy's to say, from what the directory holds (policy.h rule 1).
 *   - `release/` is a Megatron step (LAYOUT_STEP_RELEASE) only when forced is LAYOUT_MEGATRON:
 *     auto-detection would otherwise hide any unrelated directory of that name.
 *   - digit runs may carry leading zeros; their value must fit int64_t (more than INT64_MAX is
 *     not a step: ROLE_PLAIN). Zero-padded widths are minimums, as in Python's "{:07d}":
 *     `iter_` takes 7 or more digits, `iteration_` 7 or more. Two spellings of one number
 *     (`iter_0000100`, `iter_00000100`) give the same step: key a step directory by its name.
 *
 * Returns 0 on success (including ROLE_PLAIN);
 *   -EINVAL       path or ret is NULL, forced is out of range, or a component is "..";
 *   -ENAMETOOLONG path is LAYOUT_PATH_MAX bytes or longer.
 * Thread-safe; no allocation.
 */
int layout_classify(const char *path, enum layout_kind forced, struct layout_match *ret);

/*
 * layout_parse_name - say whether a top-level directory name is a step directory.
 *
 * @name:     NUL-terminated single component (no '/'), e.g. "global_step100".
 * @forced:   as in layout_classify().
 * @ret_kind: the layout (auto-detected all-digit names give LAYOUT_INTERNEVO); set on 1 only.
 * @ret_step: the step, >= 0 or LAYOUT_STEP_RELEASE; set on 1 only.
 *
 * Returns 1 if @name is a step directory, 0 if not (outputs untouched);
 *   -EINVAL name, ret_kind or ret_step NULL, name contains '/', or forced out of range.
 * Thread-safe.
 */
int layout_parse_name(const char *name, enum layout_kind forced, enum layout_kind *ret_kind,
		      int64_t *ret_step);

/*
 * layout_step_dir_name - the directory name a trainer gives to a step.
 *
 * @kind: the layout; @step: >= 0 (LAYOUT_STEP_RELEASE for Megatron gives "release").
 * @buf, @cap: output buffer of cap bytes; NUL-terminated on success.
 *
 * Megatron "iter_%07lld", MindFormers 2.0 "iteration_%08lld" (the code's width), DeepSpeed
 * "global_step%lld", HF "checkpoint-%lld", DCP "step-%lld", InternEvo and Orbax "%lld".
 * Returns the length written, without the NUL (> 0);
 *   -EINVAL     kind out of range or LAYOUT_NONE, step negative (other than release for Megatron),
 *               buf NULL with cap > 0;
 *   -EOPNOTSUPP MF1 and Lightning, which have no step directory;
 *   -ENOSPC     cap too small (buf contents then unspecified).
 */
int layout_step_dir_name(enum layout_kind kind, int64_t step, char *buf, size_t cap);

/* What a tracker says. */
struct layout_tracker {
	int64_t step;  /* >= 0, or LAYOUT_STEP_RELEASE (Megatron "release") */
	int64_t epoch; /* MF1 last_epoch (>= 0); -1 for other kinds */
	char ckpt_file[LAYOUT_NAME_MAX + 1]; /* MF1 last_ckpt_file, a bare file name, UTF-8,
						NUL-terminated; "" for other kinds */
};

/*
 * layout_tracker_parse - read the step a trainer's tracker names.
 *
 * @kind: the tracker's layout (from layout_classify()).
 * @name: the tracker's file name; unused (may be NULL), kept for callers' symmetry.
 * @buf, @len: the tracker's content, len bytes, not NUL-terminated, may contain NULs;
 *        buf may be NULL when len is 0.
 * @ret:  filled on success; untouched on failure.
 *
 * Formats (framework-io.md; sources in the header comment):
 *   Megatron   ASCII digits, or "release" (→ LAYOUT_STEP_RELEASE); leading/trailing ASCII
 *              whitespace tolerated (Megatron strips), no newline required.
 *   MF2        ASCII digits, whitespace tolerated; "release" is -EINVAL (MindFormers writes
 *              str(step_num) only).
 *   DeepSpeed  "global_stepN", whitespace tolerated. Other tags (save_checkpoint(tag=…)) are
 *              not steps: -EINVAL.
 *   MF1        a JSON object with integer "last_epoch" >= 0, integer "last_step" >= 0 and string
 *              "last_ckpt_file" (a bare file name: no '/', not "." or "..", no NUL, at most
 *              LAYOUT_NAME_MAX bytes once unescaped); other keys are skipped, a repeated key
 *              takes its last value (as Python's json does).
 * Digits may have leading zeros; the value must fit int64_t.
 *
 * Returns 0 on success;
 *   -EINVAL     garbage: not the format above, a negative or overflowing number, a sign,
 *               an embedded NUL, a path, len > LAYOUT_TRACKER_MAX, NULL ret, NULL buf with
 *               len > 0, kind out of range or LAYOUT_NONE;
 *   -EOPNOTSUPP the layout has no tracker (HF, DCP, Orbax, InternEvo: their marker is inside
 *               the step), or its tracker is a checkpoint, not a text (Lightning
 *               LAYOUT_TRACKER_COPY).
 * Never reads past buf[len - 1]. Thread-safe.
 */
int layout_tracker_parse(enum layout_kind kind, const char *name, const char *buf, size_t len,
			 struct layout_tracker *ret);

/*
 * layout_tracker_format - write a tracker's content, byte for byte as the trainer writes it.
 *
 * @kind: the layout. @t: what to say; for MF1 t->epoch and t->ckpt_file are used too.
 * @buf, @cap: output buffer of cap bytes; NUL-terminated on success (the NUL is not content).
 *
 *   Megatron, MF2  "%lld" with no newline (f.write(str(iteration))); Megatron also "release".
 *   DeepSpeed      "global_step%lld", no newline (fd.write(tag)).
 *   MF1            Python json.dump() with default settings of a dict in insertion order:
 *                  {"last_epoch": E, "last_step": S, "last_ckpt_file": "F"} — separators ", "
 *                  and ": ", no newline, ensure_ascii (non-ASCII as \uXXXX, lowercase hex,
 *                  surrogate pairs above U+FFFF; '"' '\' and control characters escaped as
 *                  Python does, DEL as \u007f).
 *
 * Returns the content length in bytes (> 0);
 *   -EINVAL     t NULL, buf NULL with cap > 0, step negative (other than release for Megatron),
 *               MF1 epoch negative or ckpt_file empty, not valid UTF-8, or not a bare file name;
 *               kind out of range or LAYOUT_NONE;
 *   -EOPNOTSUPP HF, DCP, Orbax, InternEvo (no tracker), Lightning (the tracker is a checkpoint);
 *   -ENOSPC     cap too small for content and NUL (buf contents then unspecified).
 */
int layout_tracker_format(enum layout_kind kind, const struct layout_tracker *t, char *buf,
			  size_t cap);

/*
 * layout_tracker_path - the path, relative to the mount root, of a layout's tracker.
 *
 * @step: unused. @rank: MF1 only (>= 0): "rank_N/meta.json".
 * Megatron and MF2 "latest_checkpointed_iteration.txt"; DeepSpeed "latest"; Lightning
 * "last.ckpt" (the name a first launch writes; `last-vN.ckpt` and any `last*.ckpt` also count).
 * Returns the length written without the NUL; -EINVAL (kind out of range or NONE, negative
 * rank where used, buf NULL with cap > 0), -EOPNOTSUPP (HF, DCP, Orbax, InternEvo), -ENOSPC (cap
 * too small; buf contents then unspecified). Thread-safe.
 */
int layout_tracker_path(enum layout_kind kind, int64_t step, int rank, char *buf, size_t cap);

/*
 * layout_tracker_shared - whether a tracker of kind @tracker names steps of kind @step_kind.
 *
 * True when both layouts' rules name the same tracker file (Megatron and MindFormers 2.0 share
 * `latest_checkpointed_iteration.txt`), and for a kind and itself when it has a tracker whose
 * content names a step (not LAYOUT_TRACKER_COPY: a checkpoint makes no claim, so such a
 * layout's lineage is the one of layouts without a tracker, policy rule 6).
 * Thread-safe.
 */
bool layout_tracker_shared(enum layout_kind tracker, enum layout_kind step_kind);

/* Where a layout's tracker lives (struct layout_desc.tracker). */
enum layout_tracker_where {
	LAYOUT_TRACKER_NONE,     /* no tracker: resume scans for the highest complete step */
	LAYOUT_TRACKER_ROOT,     /* one file at the mount root, naming a step of the whole job */
	LAYOUT_TRACKER_PER_RANK, /* one file per rank directory, each naming that rank's step */
	LAYOUT_TRACKER_COPY,     /* real files at the root the trainer writes and resume loads:
				    a full checkpoint rewritten in place at each save, or a symlink
				    to a step file (Lightning `last*.ckpt`); never virtual, and its
				    step is not in its bytes (layout_tracker_parse: -EOPNOTSUPP) */
};

/*
 * Everything a layout is besides how its names look: one constant row per kind (layout.c
 * `layout_descs[]`). The daemon (fs/steps, fs/node, fs/fuse) and ckptctl read these fields
 * instead of testing which kind a step is. Sources of each value: the header comment above.
 */
struct layout_desc {
	enum layout_kind kind;
	const char *name;            /* layout_name(kind) */

	/* Where steps live. */
	bool per_rank;               /* no step directory: a step is one file per rank under the
					rank directories, keyed by (epoch, step), sealed once every
					rank's tracker names it; fs/steps/steps_mf1.c runs it (MF1) */
	bool top_files;              /* no step directory and no rank directory: a step is one or
					more regular files at the mount root, keyed by the step in
					their name and written by one process (Lightning
					`epoch=E-step=S.ckpt`) */
	const char *slot_dir;        /* top-level directory of in-place slots `<slot_dir>/K/`, each
					a step directory rewritten at every save and sealed by a
					"<digits>.step" marker (InternEvo "snapshot"); NULL when
					none. Equals LAYOUT_SLOT_DIR when set */

	/* How a step is committed. */
	const char *marker;          /* the in-step commit marker's name (for marker_step its
					suffix); NULL when only a tracker or a rename says it */
	bool marker_step;            /* the marker is "<step><marker>" (InternEvo `N/N.step`) */
	bool seal_by_rename;         /* renaming the in-progress step directory (LAYOUT_F_TMP) to
					its final name commits the step, with no marker file needed
					(Orbax AtomicRenameTemporaryPath.finalize) */
	bool marker_after_all_ranks; /* policy_marker_after_all_ranks() */
	bool names_repeat;           /* policy_names_repeat() */
	const char *names_list;      /* the file, directly in the step directory, that lists every
					file of the step (MF2 "metadata.json"; policy_listed_names()
					checks them all), or NULL */

	/* What resume reads. */
	enum layout_tracker_where tracker;
	const char *tracker_name;    /* the tracker's file name (in the root, or in each rank
					directory); NULL for LAYOUT_TRACKER_NONE */
	bool found_by_tracker;       /* policy_found_by_tracker() */
};

/*
 * layout_desc - the description of a layout.
 *
 * @kind: any value; out of range (including a negative int stored in an index row) is treated
 *        as LAYOUT_NONE.
 * Returns a pointer into a constant table (static storage, never freed, never NULL). The
 * LAYOUT_NONE row has every trait false or NULL and tracker LAYOUT_TRACKER_NONE.
 * Thread-safe; no allocation.
 */
const struct layout_desc *layout_desc(int kind);

/*
 * layout_per_rank_kind - the layout whose steps are per-rank files (desc->per_rank: MF1).
 * Returns that kind, or LAYOUT_NONE if no row has per_rank (the table holds at most one:
 * test_layout checks it). Thread-safe.
 */
enum layout_kind layout_per_rank_kind(void);

/*
 * layout_rank_dir_name - the name of rank @rank's directory in a per-rank layout (MF1
 * "rank_%d"), at the mount root.
 * @kind: a layout with desc->per_rank; @rank: >= 0; @buf, @cap: output, NUL-terminated.
 * Returns the length written without the NUL (> 0); -EINVAL (kind not per-rank, rank
 * negative, buf NULL with cap > 0), -ENOSPC (cap too small; buf contents then unspecified).
 * Thread-safe.
 */
int layout_rank_dir_name(enum layout_kind kind, int rank, char *buf, size_t cap);

/*
 * layout_slot_dir - the directory of in-place slots recognised under -o layout=@forced.
 * @forced: LAYOUT_NONE (auto-detect) or a kind.
 * Returns LAYOUT_SLOT_DIR when @forced is LAYOUT_NONE or has slots, NULL otherwise (also for
 * @forced out of range). The string is static. Thread-safe.
 */
const char *layout_slot_dir(int forced);

/*
 * layout_per_rank_under - whether per-rank directories (`rank_N/`) are recognised under
 * -o layout=@forced: true when @forced is LAYOUT_NONE or a per_rank layout. Thread-safe.
 */
bool layout_per_rank_under(int forced);

/*
 * layout_name - the name of a layout for -o layout=NAME and for logs: "none", "mf2",
 * "megatron", "mf1", "deepspeed", "hf", "dcp", "internevo", "orbax", "lightning".
 * Returns a static string (never freed), or NULL if kind is out of range. Thread-safe.
 */
const char *layout_name(enum layout_kind kind);

/*
 * layout_from_name - parse a layout name as layout_name() writes it (exact, case-sensitive;
 * "none" and "auto" both give LAYOUT_NONE).
 * Returns 0 and sets *ret; -EINVAL if name or ret is NULL or the name is unknown (*ret untouched).
 */
int layout_from_name(const char *name, enum layout_kind *ret);

#endif /* CKPTFS_LAYOUT_H */
