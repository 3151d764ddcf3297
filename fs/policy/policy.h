/* SPDX-License-Identifier: MIT */
/*
 * policy.h — the checkpoint policy: what an entry is to its step, which steps a tracker claim
 * seals, when a step is complete, a step's figures and digest, and how a step is reported.
 *
 * The daemon (fs/steps), `ckptctl import` and `ckptctl fsck` all judge steps through this
 * module and nothing else, so a store is judged the same way whichever of them looks at it.
 *
 * Pure: no FUSE, no daemon state, no logging. Functions read the index (and, for the names a
 * step's metadata lists, the store) through the handles they are given; they never write.
 * Thread-safety is the handles' (an idx handle is used by one thread at a time).
 *
 * The rules (DESIGN.md, "Steps"; sources in layout.h and tests/traces/):
 *
 *  1. Entries. A step directory is a top-level directory whose name is a layout's step pattern
 *     (a non-negative step). An in-progress name (LAYOUT_F_TMP: Orbax's N.orbax-checkpoint-tmp,
 *     HF's tmp-checkpoint-N) is one too, sealed only by its rename (below): left at that name,
 *     it is a save that did not finish. A file under it is a step file; the layout's commit
 *     marker directly inside it (DCP .metadata, HF trainer_state.json, InternEvo N/N.step,
 *     Orbax commit_success.txt) is its marker. A top-level regular file that is a layout's
 *     tracker is a tracker, and what a trainer writes into it is a claim.
 *     A name alone does not make an all-digit directory a step when the layout is detected
 *     (layout_classify's LAYOUT_F_AMBIGUOUS): digits are InternEvo's and Orbax's step names, but
 *     also xfstests' work directories (`$$`, `$seq`), a user's `2024/` of logs or a dataset's
 *     shards. Such a directory is a candidate, and a step only on its layout's own evidence: a
 *     marker directly inside it (InternEvo N/N.step, Orbax commit_success.txt), or an Orbax tmp
 *     directory renamed to it. Until then it is an ordinary directory: nothing in it is judged,
 *     sealed or set aside. Under -o layout=internevo or orbax the name alone is a step.
 *     An all-digit directory is InternEvo's by its name, and Orbax's once Orbax's marker is in
 *     it, whichever marker came first (policy_marker_kind): N/N.step beside
 *     N/commit_success.txt makes an Orbax step, to the daemon, import and fsck alike.
 *     Only the daemon sees a rename: a plain directory (`ckptctl import`, and an import through
 *     a mount, which copies it by name) or a record rebuilt from the tree (`ckptctl fsck`)
 *     shows an Orbax step committed by a local rename, with no commit_success.txt, as `N/` and
 *     its files, exactly what a user's `2024/` shows; so there it is no step (its files are
 *     kept, as ordinary files). Taking every all-digit directory for an Orbax step would make
 *     every such directory of a user's a step, judged and set aside.
 *
 *  2. Sealing. A step is sealed by its whole marker (closed, not torn, not malformed), or by a
 *     claim that names it, of a tracker its layout shares (layout_tracker_shared). A marker
 *     closed under another name seals at the rename that brings its directory to a step's
 *     name (a copy staged, then `mv staging checkpoint-20`), as a plain directory's marker does
 *     to import and fsck, which see only the tree (steps_on_rename). Trainers
 *     write one claim per save, and the index keeps every claim it saw; so where the claims are
 *     known (the daemon, and fsck, which reads the recorded claims) a claim seals exactly the
 *     step it names: an earlier step nobody claimed is a save that did not finish. A plain
 *     directory (import) keeps only the last write of each tracker, so there the one claim left
 *     stands for every earlier step of the layouts sharing it: the trainer claimed each of them
 *     in turn before overwriting the tracker.
 *
 *  3. Completeness. A sealed step is complete when it holds at least one file, every file is
 *     closed, committed and sound (not torn, not malformed, readable), every name its own
 *     metadata lists is there (MindFormers 2.0 metadata.json), and, for layouts whose marker
 *     may precede other ranks' files (DeepSpeed, Hugging Face), it holds every name of the
 *     previous complete step of its layout, or, when there is none, nothing was written into it
 *     for a while (the caller's `quiet`); a new version of a complete step of those layouts (a
 *     rewrite in place) holds every name of its kept version, each written again since it
 *     began (policy_rewritten_names); of any layout, a rewrite set aside is brought back by a
 *     later claim or seal only under that condition (a save cut short is a mix of two saves,
 *     each file whole; fs/steps/steps_judge.c seal_set_aside). Those names are not asked for
 *     once a newer step of its layout was started after its seal: a trainer trains on only
 *     after every rank finished a save. Only a daemon that saw the steps written knows that
 *     order; `ckptctl import` of a plain directory and `ckptctl fsck`, which see a tree (where
 *     a later step may be an earlier run's), judge by the names alone, so a sealed step
 *     missing a name of the previous one is complete to the first and incomplete to the
 *     others. A step that cannot be complete once its writers are gone is incomplete; the
 *     daemon sets it aside, import leaves that to the daemon's first mount (which owns the
 *     namespace).
 *     A copy is the exception: a step never sealed, of a layout whose trainer finds its steps
 *     only through a tracker (policy_found_by_tracker: Megatron, MindFormers 2.0, DeepSpeed),
 *     whose files are all whole (closed by a live writer, committed, sound) and were all written
 *     by one process that is gone, seen by this daemon, and that is not a new version of a
 *     complete step, is copied: `cp -r` of a saved step makes exactly that. A copy stays at its
 *     name, named by no tracker, until a claim seals it (then it is judged as any sealed step)
 *     or `ckptctl drop` removes it. A crashed save is told from a copy by what a copy never
 *     shows: a file torn or left open (a writer killed in a write), several writing processes
 *     (a job's ranks each write their own files), or a daemon that did not see it written
 *     (its writers unknown). What remains alike, a one-process save killed after its last
 *     file and before its claim, has every file whole, and is listed as copied. Neither can
 *     look complete to a resume: a tracker read resolves to a complete step only, a copy
 *     becomes complete only through a claim (the trainer's, the user's who copied it, or on many
 *     nodes another node's seal, rule 5: a job's last save looks like a copy on a node whose
 *     ranks exited before that seal arrived), and a claim seals it, then every file is judged
 *     again as for any save. Layouts a trainer resolves by scanning get no copies: their
 *     trainer would load the newest directory it finds, so what is not complete there leaves
 *     the namespace.
 *
 *  4. Figures and digest. A step's figures are the count, logical bytes and stored bytes of its
 *     regular files; its digest is XXH3-128 over, for each regular file in listing order
 *     (directories one after another, breadth first), its name with the NUL and its 16-byte
 *     whole-file digest.
 *
 *  5. Many nodes (-o remote, DESIGN.md "Growing past one machine"). Each node judges its own
 *     part of a step by rules 1-3 and publishes one manifest for it, once. A step is globally
 *     complete when the manifests of all `nodes` distinct nodes are published and at least one
 *     of them carries the seal (the node that saw the tracker or marker claim): the rule of
 *     NVIDIA nvidia-resiliency-ext's node-local checkpoints (checkpointing/local/ckpt_managers/
 *     base_manager.py: the latest checkpoint is the highest iteration whose rank set is all
 *     ranks). A node whose part has no claim of its own publishes once another node's manifest
 *     carries the seal: the trainer claims a step only after every rank finished writing it
 *     (a barrier), so the seal also stands for the other nodes' ranks.
 *
 *  6. Lineage. Trackers follow the trainer's claims in the order they were made. The head of the
 *     lineage of steps of kind K is the step named by the newest claim, of a tracker K shares,
 *     that names a complete step of kind K; T is that claim's time. A complete step of kind K is
 *     in the lineage when its number is at most the head's, or it completed after T (the next
 *     saves: a Megatron step completes at its claim, a DeepSpeed step after its `latest`). A
 *     complete step numbered above the head and complete before T was left behind by a
 *     rollback (a claim of an older complete step: `echo 40 > latest_checkpointed_iteration.txt`)
 *     or by an earlier run in the same directory (a new run's first claim of its own step): a
 *     tracker does not name it, and retention neither counts nor prunes it; it stays until
 *     removed by hand. Without such a claim (a store whose claims were never seen) every
 *     complete step is in the lineage. MindFormers 1.0's claims are its ranks' meta.json
 *     files, naming (epoch, step): its steps are numbered by (epoch, step) in that order (the
 *     step restarts every epoch), and a claim names the row of its step number made last
 *     before it (policy_mf1_key).
 *     Layouts without a tracker (HF, DCP, Orbax, InternEvo: the trainer resumes from the
 *     highest step it finds by scanning, and that choice stands) have no claims; there the
 *     step completed last stands for the newest claim. A complete step numbered above it was
 *     saved before it, by an earlier run in the same directory (a save lower than one already
 *     complete is how a new run starts there), and so was every step completed before the last
 *     of those: the lineage is the steps completed after that one. So retention counts a new
 *     run's own steps and keeps an earlier run's, as with a tracker. InternEvo's slots
 *     (policy_is_slot), rewritten in place at every snapshot, take no part.
 *     A complete or copied step whose directory the user renames away from its name (in the top
 *     directory or into a directory of it) leaves the lineage: pruned, the directory left where
 *     the user put it, so no tracker, retention or quarantine acts on it again; renamed back to
 *     its name a complete one is a new version of the step, sealed by that rename, and a copied
 *     one a copy again (steps_on_rename).
 *     Known limits: a claim of a newer step of an abandoned lineage (a roll forward), or a
 *     scanned layout's new run saving past the earlier run's highest step, makes every step at
 *     most its number a member again, the other run's included.
 */
#ifndef CKPTFS_POLICY_H
#define CKPTFS_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "fs/policy/layout.h"
#include "index/index.h"
#include "store/store.h"

/* ---- 1. entries ---- */

enum policy_entry {
	POLICY_OTHER = 0, /* part of no step (or of an MF1 step, judged per rank by the daemon) */
	POLICY_TRACKER,   /* a top-level tracker file: its content is a claim */
	POLICY_STEP_DIR,  /* a step's directory */
	POLICY_STEP_FILE, /* a file of a step */
	POLICY_MARKER,    /* a step's commit marker: a file of the step that seals it once whole */
	POLICY_CANDIDATE, /* an auto-detected all-digit directory: a step only once its layout's
			     evidence is seen (policy_needs_evidence) */
	POLICY_RANK_TRACKER, /* a per-rank tracker (MF1 rank_N/meta.json): its content is a claim
				of that rank, never a stored file */
	POLICY_RANK_FILE, /* a per-rank step file (MF1 rank_N/{prefix}-{epoch}_{step}.ckpt, or
			     its .tmp): checked as a step file; a step of a per-rank layout is the
			     files of one (epoch, step) across ranks (policy_rank_steps) */
	POLICY_TOP_FILE,  /* a step file at the root of a layout with no step directory
			     (layout_desc()->top_files: Lightning `epoch=E-step=S.ckpt`, or its
			     temp): checked as a step file; the file alone is its step, complete
			     once whole (policy_top_whole, policy_top_steps) */
};

/*
 * policy_entry_of - what the entry at rel (relative to the mount root, as layout_classify takes
 * it) of type mode (S_IFMT bits) is to the policy, rule 1.
 * @forced: the layout forced by -o layout, or LAYOUT_NONE to recognise any.
 * @ret_match: when not NULL, receives layout_classify's match (untouched when it fails).
 * Returns a policy_entry; POLICY_OTHER for a path layout_classify rejects. Thread-safe.
 */
enum policy_entry policy_entry_of(const char *rel, mode_t mode, enum layout_kind forced,
				  struct layout_match *ret_match);

/*
 * policy_needs_evidence - is the path whose layout_classify match is m in (or itself) a directory
 * that is a step only on its layout's evidence (rule 1: an all-digit name under auto-detection)?
 * Then a file in it is a step file only once the directory is a step, and only its marker
 * (m->role ROLE_MARKER) makes it one. m must not be NULL. Thread-safe.
 */
bool policy_needs_evidence(const struct layout_match *m);

/*
 * policy_marker_seals - does the marker m (layout_classify's match, m not NULL) seal its step
 * once whole? Not one inside a directory under its in-progress name (LAYOUT_F_TMP: HF's
 * tmp-checkpoint-N, Orbax's N.orbax-checkpoint-tmp): that directory is sealed by its rename
 * only (rule 1), so left at that name its marker is a file of a save that did not finish.
 * False for anything that is not a marker. Thread-safe.
 */
bool policy_marker_seals(const struct layout_match *m);

/*
 * policy_marker_kind - the layout of the step directory named dir (a top-level name) once its
 * marker m (layout_classify's match, m->role ROLE_MARKER) is seen, given the layout kind it has
 * now (rule 1): an all-digit name is InternEvo's by default (LAYOUT_F_AMBIGUOUS), and a marker
 * of another layout in it says whose it is (`N/commit_success.txt`: Orbax's). A directory
 * holding both markers is therefore that other layout's, whichever marker came first: the
 * daemon, import and fsck see the same files in different orders. Any other marker leaves kind
 * as it is. @forced as for policy_entry_of. Thread-safe.
 */
enum layout_kind policy_marker_kind(enum layout_kind kind, const char *dir,
				    const struct layout_match *m, enum layout_kind forced);

/* ---- 2. sealing ---- */

enum policy_seal {
	POLICY_SEAL_NONE = 0,  /* the claim says nothing of this step */
	POLICY_SEAL_NAMED = 1, /* the claim names this step */
	POLICY_SEAL_LATER = 2, /* the claim names a later step and stands for this one (no history) */
};

/*
 * policy_claim_seals - does a claim of step claim_step, written into a tracker of layout
 * tracker, seal step `step` of layout kind (rule 2)?
 * @history: true when every claim the trainer wrote is known (the daemon, fsck), false when
 *           only the last one is (import of a plain directory).
 * Returns a policy_seal; POLICY_SEAL_NONE for a claim that is not a step (claim_step < 0) or a
 * step without a number (step < 0). Thread-safe.
 */
enum policy_seal policy_claim_seals(enum layout_kind tracker, int64_t claim_step,
				    enum layout_kind kind, int64_t step, bool history);

/*
 * policy_claim_kind - the layout of the tracker at path rel (relative to the mount root), as
 * claims record it; LAYOUT_NONE when rel is not a top-level tracker or is MF1's per-rank
 * meta.json (MF1 steps are sealed per rank by the daemon, not by this rule). Thread-safe.
 */
enum layout_kind policy_claim_kind(const char *rel, enum layout_kind forced);

/*
 * policy_marker_after_all_ranks - does layout kind write its commit marker only after every rank
 * finished its files (framework-io.md: Megatron and MindFormers 2.0 write the tracker after a
 * barrier; the DCP coordinator renames .metadata after gathering all ranks; InternEvo's log rank
 * writes N/N.step after a barrier; Orbax renames the step directory after all writes)? Then a
 * sealed step whose files are all closed and sound is complete at once. DeepSpeed writes
 * `latest` before its barrier and HF rank 0 writes trainer_state.json without waiting for the
 * other ranks' files. Reads layout_desc(kind)->marker_after_all_ranks. Thread-safe.
 */
bool policy_marker_after_all_ranks(enum layout_kind kind);

/*
 * policy_names_repeat - do layout kind's step directories hold the same names at every step,
 * with a marker that may precede other ranks' files (DeepSpeed, Hugging Face)? The previous
 * complete step's names are then the only record of what a step should hold. Reads
 * layout_desc(kind)->names_repeat. Thread-safe.
 */
bool policy_names_repeat(enum layout_kind kind);

/* ---- 3. completeness ---- */

/* What a caller knows of a sealed or unsealed step; see policy_judge. */
struct policy_facts {
	bool sealed;            /* rule 2 */
	bool settled;           /* no writer of the step is left (import: always) */
	bool quiet;             /* nothing written into it for a while, or settled */
	bool unprovable;        /* after a daemon crash: every rank cannot be shown to be done */
	uint64_t files;         /* regular files under its directory */
	unsigned open;          /* files a writer still holds with unflushed data */
	unsigned uncommitted;   /* files never closed: no whole-file digest yet */
	unsigned unsound;       /* torn or malformed files */
	unsigned unreadable;    /* files whose bytes could not be read (import) */
	int previous;           /* policy_previous_names's answer; POLICY_PREV_ALL for layouts
				 * whose names need not repeat */
	const char *absent;     /* with POLICY_PREV_MISSING: the first name absent, else "" */
	const char *unlisted;   /* a name the step's metadata lists that it lacks, or "" */
	/* for copies (rule 3); all 0 where copies are not told apart (import, fsck) */
	bool by_tracker;        /* policy_found_by_tracker(the step's layout) */
	bool recovering;        /* the daemon that saw it written is gone: its writers unknown */
	bool rewrite;           /* a new version of a complete step, whose kept version comes back
				 * if this one is not completed */
	unsigned writers;       /* distinct processes known to have written into it (0: unknown) */
};

/* What a caller knows of a step beyond the index, for policy_step_facts. */
struct policy_step_in {
	bool sealed;          /* sealed by evidence the row does not record yet (import judges
			       * before it records the seal); a row in IDX_STEP_SEALED is sealed */
	bool settled;         /* no writer of the step is left (import: always) */
	bool quiet;           /* nothing written into it for a while (import: always) */
	bool recovering;      /* the daemon that saw it written is gone: its writers unknown */
	bool crashed;         /* with recovering: that daemon crashed (a clean stop proves every
			       * rank was done with what it sealed) */
	bool check_listed;    /* check the names its metadata lists (policy_listed_names); false
			       * where the step holds part of them (one node of many, rule 5) */
	uint64_t files;       /* regular files under its directory */
	unsigned open;        /* files a writer still holds with unflushed data */
	unsigned uncommitted; /* files never closed: no whole-file digest yet */
	unsigned unsound;     /* torn or malformed files */
	unsigned unreadable;  /* files whose bytes could not be read (import) */
	unsigned writers;     /* distinct processes known to have written into it (0: unknown) */
	/* a rewrite in place: when s is a new version of a complete step whose tree is kept, its
	 * directory into *ret_dir and true; NULL when no version is ever kept (import). Called
	 * only when the answer matters (it may cost a walk of the kept versions). */
	bool (*kept_dir)(void *arg, const struct idx_step *s, uint64_t *ret_dir);
	void *arg;            /* kept_dir's */
};

/*
 * policy_step_facts - the facts rule 3 judges of step row s, the one way every caller gathers
 * them: in (what only the caller knows: writers, open files, a crash) and the index (the
 * previous complete step's names, unless a newer step of its layout started after its seal; the
 * names of its kept version for a rewrite in place; the names its metadata lists, only for a
 * sealed step whose files are all whole). in->writers and in->kept_dir count only for a copy
 * (an unsealed, settled step of a layout found by tracker, while not recovering).
 * @absent, @unlisted: buffers of cap bytes (cap >= 1), receiving the first name missing (or "");
 *                     ret->absent and ret->unlisted point into them.
 * @ret: filled on success, untouched on failure.
 * Returns 0, -ENOMEM, or -errno of the index. Reads ix (and st for metadata.json) only; the
 * handles' thread-safety.
 */
int policy_step_facts(struct idx *ix, struct store *st, const struct idx_step *s,
		      const struct policy_step_in *in, char *absent, char *unlisted, size_t cap,
		      struct policy_facts *ret);

enum policy_prev {
	POLICY_PREV_MISSING = 0, /* a name of the previous complete step is absent */
	POLICY_PREV_ALL = 1,     /* every name is there (or the layout's names need not repeat) */
	POLICY_PREV_NONE = 2,    /* no earlier complete step of the layout to compare with */
};

enum policy_verdict {
	POLICY_WAIT = 0,       /* not complete yet; it may become complete */
	POLICY_COMPLETE = 1,
	POLICY_INCOMPLETE = 2, /* it cannot become complete: set it aside */
	POLICY_COPIED = 3,     /* a copy (rule 3): left at its name until a claim or a drop */
};

/*
 * policy_judge - rule 3 on the facts f.
 * @why: receives why, NUL-terminated, truncated to cap: for POLICY_COMPLETE a short account,
 *       otherwise what is missing or wrong (the text a step's event log keeps). cap >= 1.
 * Returns a policy_verdict: POLICY_INCOMPLETE and POLICY_COPIED only when f->settled,
 * POLICY_COPIED only when f->by_tracker. Thread-safe.
 */
enum policy_verdict policy_judge(const struct policy_facts *f, char *why, size_t cap);

/*
 * policy_found_by_tracker - does layout kind's trainer find the step to resume only through a
 * tracker it writes after every save (Megatron and MindFormers 2.0's
 * latest_checkpointed_iteration.txt, DeepSpeed's `latest`), never by scanning the directory?
 * Then a step that is not complete may stay at its name (a copy, rule 3; an empty step made
 * ahead of its job): no resume reads it. MindFormers 1.0 (files, not directories, judged per
 * rank) and the layouts resolved by scanning (HF, DCP, Orbax, InternEvo) answer false.
 * Reads layout_desc(kind)->found_by_tracker. Thread-safe.
 */
bool policy_found_by_tracker(enum layout_kind kind);

/*
 * policy_previous_names - does the step with row s (its kind, id, step and dir_ino) hold every
 * file and directory name of the newest complete step of its layout before it? A name of the
 * previous step is matched with every run of digits equal to that step's number renumbered to
 * s's (zero-padded to the run's width when it starts with 0), or unchanged. Files another node
 * wrote (IDX_INODE_FOREIGN, shown from its manifest) are not asked for: this node's ranks never
 * write them (rule 5); nor is a directory that is another step's (one moved inside by hand, rule
 * 6), nor anything under it.
 * @missing: receives the first name not found (with " (in step N)"), NUL-terminated, truncated.
 * Returns POLICY_PREV_ALL, POLICY_PREV_NONE, POLICY_PREV_MISSING, or -ENOMEM / -errno of the index.
 */
int policy_previous_names(struct idx *ix, const struct idx_step *s, char *missing, size_t cap);

/*
 * policy_rewritten_names - step s is a new version of a complete step whose tree is kept at
 * kept_dir (a rewrite in place): has it written every file and directory name of that version
 * again, each regular file since s began (its mtime at or after s->created_ns)? A new version
 * starts in the directory of the old one, with every file of it: for a layout whose marker may
 * precede other ranks' files (policy_names_repeat), those files would pass for the new save's
 * (policy_previous_names finds every name) while a rank is still to write them, and a step
 * judged complete then would hold two saves. The kept version is the record of what the step
 * holds (rule 3).
 * @missing: receives the first name not written again, NUL-terminated, truncated to cap.
 * Returns POLICY_PREV_ALL, POLICY_PREV_MISSING, or -ENOMEM / -errno of the index.
 */
int policy_rewritten_names(struct idx *ix, const struct idx_step *s, uint64_t kept_dir,
			   char *missing, size_t cap);

/*
 * policy_listed_names - does step s hold every file its own metadata lists? MindFormers 2.0's
 * metadata.json lists the step's files ("file_name" anywhere in it; verify_ckpt_valid in
 * mindformers checkpoint/checkpoint.py @ 8d9e5d7 checks that they exist). Other layouts, a step
 * without a committed metadata.json, or one over 64 MiB have nothing to check. Malformed JSON is
 * the structure check's to flag, not this one's.
 * @missing: receives the first listed name not there, NUL-terminated, truncated to cap.
 * Returns 1 (nothing missing), 0 (a name is missing, or metadata.json cannot be read), or
 * -ENOMEM (nothing could be checked now).
 */
int policy_listed_names(struct idx *ix, struct store *st, const struct idx_step *s, char *missing,
			size_t cap);

/* ---- 4. figures and digest ---- */

struct policy_figures {
	uint64_t files;           /* regular files */
	uint64_t bytes;           /* their logical sizes, bytes */
	uint64_t stored;          /* their stored bytes (idx_file_stored_bytes) */
	struct store_hash digest; /* rule 4 */
};

/*
 * policy_file_fn - called by policy_step_walk for every regular file, with its name and row a
 * (both borrowed for the call); the caller counts what it needs (open, torn, bad chunks). It may
 * call idx_* functions other than idx_dir_list (a listing is open). Non-zero stops the walk and
 * is returned.
 */
typedef int (*policy_file_fn)(const char *name, uint64_t ino, const struct idx_inode *a,
			      void *arg);

/*
 * policy_step_walk - the figures and digest of the tree under directory dir (rule 4), calling
 * fn (may be NULL) for every regular file.
 * Returns 0 and *ret, -ENOMEM, -errno of the index, or fn's non-zero value (*ret untouched).
 */
int policy_step_walk(struct idx *ix, uint64_t dir, policy_file_fn fn, void *arg,
		     struct policy_figures *ret);

/* ---- lineage (rule 6) ---- */

/* The head of a lineage, as policy_lineage finds it. */
struct policy_lineage {
	bool claimed;      /* a claim names a complete step: head_step and head_ns hold; else
			    * every complete step completed after since_ns is a member */
	int64_t head_step; /* the step that claim names */
	int64_t head_epoch; /* MindFormers 1.0: that step's epoch (its steps restart every epoch);
			     * 0 for the other layouts */
	int64_t head_ns;   /* the claim's time, ns since the epoch */
	int64_t since_ns;  /* a layout without a tracker: when the last step of an earlier run
			    * completed (ns since the epoch; 0: no earlier run) */
};

/*
 * policy_lineage - the head of the lineage of complete steps of kind (rule 6), from the recorded
 * claims, newest first, looking at most at POLICY_LINEAGE_CLAIMS of them (a tracker rewritten
 * more often than that without naming a complete step means no head: every step is a member).
 * A kind without a tracker has no claims: its lineage starts after the earlier run's steps
 * (since_ns), found from every complete step of kind (what retention keeps of them: the cost
 * of one retention pass).
 * @forced: the mount's -o layout (LAYOUT_NONE: detect), as for policy_claim_kind.
 * Returns 0 (*ret filled; ret->claimed false when there is no head), -ENOMEM, -EIO.
 * Reads ix only.
 */
#define POLICY_LINEAGE_CLAIMS 256
int policy_lineage(struct idx *ix, enum layout_kind kind, enum layout_kind forced,
		   struct policy_lineage *ret);

/* policy_lineage_member - whether complete step s belongs to lineage l (rule 6). Pure. */
bool policy_lineage_member(const struct policy_lineage *l, const struct idx_step *s);

/* policy_mf1_key - the (epoch, step) of MindFormers 1.0 step row s, named "{epoch}_{step}"
 * (steps_mf1.c), into *ret_epoch and *ret_step: true; false for any other row. Pure. */
bool policy_mf1_key(const struct idx_step *s, int64_t *ret_epoch, int64_t *ret_step);

/*
 * policy_rank_step_fn - called by policy_rank_steps once for each (epoch, step) of a per-rank
 * layout kind that some rank's file is named for, with the name its step row has
 * ("{epoch}_{step}", borrowed for the call). Non-zero stops the walk and is returned.
 */
typedef int (*policy_rank_step_fn)(enum layout_kind kind, const char *name, int64_t epoch,
				   int64_t step, void *arg);

/*
 * policy_rank_steps - the steps of a per-rank layout (MindFormers 1.0) whose files the tree of
 * ix holds: for each top-level rank directory (rank_N/), the (epoch, step) of every regular
 * file in it under its final name (POLICY_RANK_FILE without LAYOUT_F_TMP). Such a step has no
 * directory: its row is what `ckptctl import` and `ckptctl fsck` make from the tree, as the
 * daemon makes it when the first file is named. fn runs after the listings end, so it may
 * write ix. Returns 0, -ENOMEM, -errno of the index, or fn's non-zero value.
 */
int policy_rank_steps(struct idx *ix, policy_rank_step_fn fn, void *arg);

/*
 * policy_top_whole - is the file whose index row is a a whole step file of a top_files layout
 * (Lightning): committed (a whole-file digest), not closed by a dying writer (IDX_INODE_TORN),
 * and not failing the check of its format (IDX_INODE_MALFORMED: validate_file, for torch.save's
 * zip the end of central directory record that torch.save writes last). One writer writes it
 * (rank 0), so nothing else is waited for. Pure; thread-safe.
 */
bool policy_top_whole(const struct idx_inode *a);

/*
 * policy_top_step_fn - called by policy_top_steps for each whole step file at the root: its
 * layout, file name (the row's name; borrowed for the call), step number and inode. Non-zero
 * stops the walk and is returned.
 */
typedef int (*policy_top_step_fn)(enum layout_kind kind, const char *name, int64_t step,
				  uint64_t ino, void *arg);

/*
 * policy_top_steps - the steps of the top_files layouts (Lightning) whose files the root of ix
 * holds: every regular file at the root that is POLICY_TOP_FILE without LAYOUT_F_TMP and
 * policy_top_whole. Such a step has no directory: its row, named by the file, is what `ckptctl
 * import` and `ckptctl fsck` make from the tree, as the daemon makes it when the file is closed
 * (fs/steps/steps_top.c). fn runs after the listing ends, so it may write ix. Returns 0,
 * -ENOMEM, -errno of the index, or fn's non-zero value.
 */
int policy_top_steps(struct idx *ix, policy_top_step_fn fn, void *arg);

/* policy_is_slot - is step row s an in-place slot (a layout with desc->slot_dir: InternEvo's
 * "snapshot/K", layout.h), a step directory rewritten in place, each of its versions a row of
 * that name? Pure. */
bool policy_is_slot(const struct idx_step *s);

/* ---- many nodes (rule 5) ---- */

/*
 * policy_node_step - the number step row s is known by across nodes (the node layer's parts and
 * keys, the remote's manifests, `ckptctl remote`): its step number, except for MindFormers 1.0,
 * whose step restarts every epoch (MindSpore ModelCheckpoint names "{prefix}-{epoch}_
 * {step_in_epoch}.ckpt", train/callback/_checkpoint.py): epoch * POLICY_MF1_EPOCH_SPAN + step,
 * so that two epochs' steps of one number stay apart and the numbers order as (epoch, step) do.
 * Returns >= 0, or -1 for an MF1 row whose epoch or step does not fit (epoch >= 2^31, step >=
 * 2^32: never published). Pure.
 */
#define POLICY_MF1_EPOCH_SPAN ((int64_t)1 << 32)
int64_t policy_node_step(const struct idx_step *s);

/* policy_node_step_number - the step number of a step of kind known across nodes as key
 * (policy_node_step): MF1's step within its epoch, key itself for any other kind. Pure. */
int64_t policy_node_step_number(int kind, int64_t key);

/* One node's published manifest of a step, as far as rule 5 needs it. */
struct policy_part {
	const char *node; /* the node's name (borrowed) */
	bool sealed;      /* its manifest carries the seal */
};

/*
 * policy_global_complete - rule 5: whether the parts[0..n) published for one step make it
 * globally complete in a job of `nodes` nodes: exactly `nodes` distinct node names (a name
 * published twice counts once; more names than nodes is not complete: a misconfigured job), and
 * at least one part sealed. nodes 0 is never complete. Pure, thread-safe.
 */
bool policy_global_complete(const struct policy_part *parts, size_t n, unsigned nodes);

/* ---- 5. reporting ---- */

/*
 * policy_time_iso - nanoseconds since the epoch as ISO-8601 UTC "2024-05-01T12:00:00Z", whole
 * seconds rounded toward the past (so -1 ns is 1969-12-31T23:59:59Z, and 0 is the epoch: a file
 * time). A step time of 0 means never: callers print "-" (text) or null (JSON) for it, as
 * policy_step_json does. Returns buf; "?" when cap < 21 or the year does not fit. cap >= 2.
 * Thread-safe.
 */
char *policy_time_iso(int64_t ns, char *buf, size_t cap);

/*
 * policy_size_text - a byte count as people read it: "1.23 GiB (1320702443 bytes)", or
 * "512 bytes" below 1 KiB (binary units, 2 decimals), into buf (cap bytes, truncated to fit and
 * NUL-terminated when cap > 0). The one form `ckptctl status` and MOUNT/.ckptfs/status print.
 * Returns buf. Thread-safe.
 */
char *policy_size_text(uint64_t bytes, char *buf, size_t cap);

/*
 * policy_json_time - a step or event time (nanoseconds since the epoch) as JSON: an ISO-8601
 * string (policy_time_iso), or null for 0 (never). Returns a new reference, or NULL on
 * allocation failure.
 */
json_t *policy_json_time(int64_t ns);

/*
 * policy_utf8_seq - the length in bytes (1-4) of the well-formed UTF-8 sequence at p, of which n
 * bytes (n > 0) may be read, or 0 when p[0] starts none: a stray continuation byte, an overlong
 * form, a surrogate, a code point above U+10FFFF, or a sequence cut short (RFC 3629 section 4).
 * Thread-safe; reads at most min(n, 4) bytes.
 */
size_t policy_utf8_seq(const uint8_t *p, size_t n);

/*
 * policy_json_name - a file or step name as a JSON string: the name itself when it is UTF-8,
 * otherwise with each byte outside a valid UTF-8 sequence (RFC 3629) replaced by U+FFFD, since
 * json_string refuses anything but UTF-8 and the key would be lost.
 * Returns a new reference, or NULL on allocation failure.
 */
json_t *policy_json_name(const char *name);

/*
 * policy_step_json - every field of step row s as a JSON object, one element of the "steps"
 * list that `ckptctl --json steps` and MOUNT/.ckptfs/steps.json print (docs/schemas/steps.json):
 * id, step, name, layout (by name), state, dir_ino, created_ns/created, sealed_ns/sealed,
 * completed_ns/completed, state_changed_ns/state_changed (each instant twice: nanoseconds since
 * the epoch, 0 for never, and ISO 8601 UTC or null), files, logical_bytes, stored_bytes,
 * xxh3_128 (the step's digest, 32 hex digits, or null), pinned. Returns a new reference, or
 * NULL on allocation failure.
 */
json_t *policy_step_json(const struct idx_step *s);

#endif /* CKPTFS_POLICY_H */
