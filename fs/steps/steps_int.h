/*
 * steps_int.h — private interface between the files of the step engine (fs/steps*.c).
 *
 * The step engine owns checkpoint semantics: which files form a step, when a step is complete,
 * what the virtual trackers say, what `ls` shows, quarantine and retention (states and
 * invariants: steps.c; DESIGN.md "Steps"). It owns the step rows of the index and its part of
 * the daemon's state, fs->steps (struct steps_state, steps_state.h): the per-step runtime facts,
 * the /.ckptfs tree (meta_ino, quarantine, retained) and the queue of names the kernel must
 * forget (inval). It may call the index (index/index.h),
 * the store's hashers, layout.h (classification, tracker formats), validate.h (file structure),
 * oinode reads and process facts (fs/ckptfs.h). It never calls FUSE: the names it queues are sent
 * to the kernel by fs_flush_inval (daemon.c).
 *
 * Files: steps.c (hooks, reaper, recovery, init), steps_tree.c (a step's tree, paths, moves,
 * state changes), steps_judge.c (sealing and judging), steps_retain.c (retention, retained
 * copies), steps_slot.c (InternEvo slots), steps_mf1.c (MindFormers 1.0), steps_tracker.c
 * (virtual trackers).
 *
 * Locking: unless a comment says otherwise, every function here requires fs->mu held, and
 * functions described as "in a transaction" run inside the caller's idx_begin/idx_commit.
 */
#ifndef CKFS_STEPS_INT_H
#define CKFS_STEPS_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "fs/steps/steps.h"
#include "fs/policy/layout.h"
#include "fs/policy/policy.h"

#define META_NAME ".ckptfs"
#define QUARANTINE_NAME "quarantine"
#define RETAINED_NAME "retained"
/* A step with no open file whose writers are all gone is judged after this long (ns). */
#define STEP_SETTLE_NS (1500LL * 1000 * 1000)

/*
 * How long a step directory of a layout with a tracker that holds no file yet is left in place
 * after its creator exited, ns: 10 minutes. A launcher or a shell may make the directories of a
 * save (`mkdir -p iter_0000100/mp_rank_00`) before the job that writes them has started, and a
 * large job's start (process launch, NCCL initialisation on thousands of GPUs) takes minutes.
 * This cannot make a crashed save look complete: a step with no file is never complete (policy
 * rule 3), and a tracker names only complete steps; it only delays setting the empty directory
 * aside. Layouts resolved by scanning (HF, DCP, Orbax, InternEvo) get no grace: their trainers
 * would take the empty directory for the newest checkpoint.
 */
#define STEP_EMPTY_GRACE_NS (600LL * 1000 * 1000 * 1000)

/* Per-step facts that live only while the daemon runs. */
struct step_rt {
	int64_t id;
	pid_t pids[16]; /* processes that wrote into the step (first 16) */
	unsigned long long starts[16]; /* their start times (proc(5) field 22): pids are reused */
	unsigned npids;
	pid_t last_tid, last_tgid; /* the thread noted last and its process: /proc read once */
	int64_t last_ns; /* last write/commit seen */
	bool torn;       /* a file of the step was closed by a dying writer: it cannot complete */
	bool empty_grace; /* empty, its makers gone, left in place (STEP_EMPTY_GRACE_NS): judged
			   * by the reaper's passes, not at every reader's lookup of the root */
	struct step_rt *next;
};

/* Read a committed file straight from its extents (recovery: no oinode exists). */
struct ext_reader {
	struct ckfs *fs;
	struct idx_extent *ext;
	size_t n;
};

/* What steps_scan_tree found under a step's directory. */
struct step_scan {
	struct ckfs *fs;
	bool check_bad;
	unsigned open;        /* files a writer holds with unflushed data */
	unsigned unsound;     /* torn or malformed files */
	unsigned uncommitted; /* files never closed: no whole-file digest */
	unsigned bad;         /* files with a chunk found bad (check_bad only) */
	struct policy_figures fig; /* policy rule 4 */
};

/* ---- steps.c: per-step runtime facts ---- */

/*
 * steps_rt_note - record that pid (a thread id; its thread group is recorded, with its start time)
 * wrote into step id now. Silently skipped on ENOMEM or past 16 writers. fs->mu held.
 */
void steps_rt_note(struct ckfs *fs, int64_t id, pid_t pid);

/* steps_rt_writers - how many distinct processes step id's runtime facts record as its
 * writers (at most 16); 0 without runtime facts. fs->mu held. */
unsigned steps_rt_writers(struct ckfs *fs, int64_t id);

/*
 * steps_note_writer - pid (a thread id) writes into step *s: steps_rt_note, and a copied step
 * (policy rule 3) goes back to writing, to be judged anew once its writers are gone: what is
 * written into it now is no longer what was copied. On an index error it stays copied (a claim
 * still judges every file). fs->mu held; runs its own transaction for the change of state.
 */
void steps_note_writer(struct ckfs *fs, struct idx_step *s, pid_t pid);

/*
 * steps_rt_empty_grace - mark (on) or unmark step id's runtime facts as an empty step left in
 * place for STEP_EMPTY_GRACE_NS: a marked step is left to the reaper's passes, not judged at
 * every lookup of the root (steps_settle_due). A new writer (steps_rt_note) unmarks it. No-op
 * without runtime facts. fs->mu held.
 */
void steps_rt_empty_grace(struct ckfs *fs, int64_t id, bool on);

/*
 * steps_reopen_complete - a file of a complete step (not MindFormers 1.0's, not an InternEvo
 * slot's, which keep their complete version: steps_before_change) is opened for writing or
 * truncated by pid: the complete version is kept (its tree cloned into /.ckptfs/retained,
 * sharing every chunk, and its row moved there) and a new version, writing, owns the directory
 * being changed. No tracker names the step while it changes; the new version completes like any
 * save (sealed by its claim or marker, every file whole), and the kept one is then pruned; set
 * aside (its writers leave it unsealed), the kept version comes back (steps_versions_done). If
 * the copy cannot be made, the step only goes back to writing. In its own transaction; fs->mu
 * held.
 */
void steps_reopen_complete(struct ckfs *fs, uint64_t ino, pid_t pid);

/* steps_rt_drop - forget the runtime facts of step id (no-op when none). fs->mu held. */
void steps_rt_drop(struct ckfs *fs, int64_t id);

/* ---- steps_tree.c: paths, the tree of a step, moves, state ---- */

/*
 * steps_rel_path - path of ino relative to the root, without the leading '/', into buf (cap
 * bytes, NUL-terminated). Returns 0, -ENAMETOOLONG, or the index's -errno (-ENOENT: unlinked).
 * fs->mu held.
 */
int steps_rel_path(struct ckfs *fs, uint64_t ino, char *buf, size_t cap);

/*
 * steps_inval_queue - queue parent/name for the kernel to forget (fs_flush_inval) and wake the
 * reaper, which sends it as soon as fs->mu is free. Dropped silently on ENOMEM (the kernel
 * forgets it by itself within its entry timeout, ATTR_TIMEOUT). fs->mu held.
 */
void steps_inval_queue(struct ckfs *fs, uint64_t parent, const char *name);

/*
 * steps_scan_tree - the figures and digest of the tree under dir (policy_step_walk) and what the
 * daemon knows of its files (open, torn or malformed, never closed, and with check_bad, bad
 * chunks) into *ret. Returns 0 or -errno (-ENOMEM, index errors; *ret untouched). fs->mu held.
 */
int steps_scan_tree(struct ckfs *fs, uint64_t dir, bool check_bad, struct step_scan *ret);

/* steps_tree_has_bad_chunk - has a chunk of a file under dir been found bad? 1 yes, 0 no or on
 * error. fs->mu held. */
int steps_tree_has_bad_chunk(struct ckfs *fs, uint64_t dir);

/*
 * steps_ext_read - read callback (validate.h) over a committed file's extents: arg is a struct
 * ext_reader whose ext/n the caller loaded (and frees). Reads len bytes at byte offset off into
 * buf (holes and what no extent covers read as zeros); the caller asks within the file's size.
 * Returns len, or -errno from the store (-EIO on a short chunk read). fs->mu held.
 */
ssize_t steps_ext_read(void *arg, void *buf, size_t len, uint64_t off);

/* steps_revalidate_tree - re-check the structure of every file under dir from the store and flag
 * the malformed (IDX_INODE_MALFORMED). Best effort: errors stop the walk silently. fs->mu held. */
void steps_revalidate_tree(struct ckfs *fs, uint64_t dir);

/*
 * steps_dir_links_add - add delta to directory dir's link count (subdirectories moved in or out);
 * touch: also set its mtime and ctime to now. Returns 0 or the index's -errno. In a
 * transaction, fs->mu held.
 */
int steps_dir_links_add(struct ckfs *fs, uint64_t dir, int delta, bool touch);

/* steps_is_slot - is s an InternEvo snapshot slot ("snapshot/K"), a step rewritten in place?
 * Pure. */
bool steps_is_slot(const struct idx_step *s);

/* steps_lookup_path - the directory at path rel (relative to the root, '/'-separated) into *ret.
 * Returns 0, -ENAMETOOLONG (a component over LAYOUT_NAME_MAX), or the index's -errno
 * (-ENOENT: a component is missing). fs->mu held. */
int steps_lookup_path(struct ckfs *fs, const char *rel, uint64_t *ret);

/*
 * steps_step_home - where a step named name lives: its parent directory (*ret_parent) and its
 * entry name there (*ret_leaf, borrowed from name). Top-level steps live in the root; a slot
 * "snapshot/K" lives in `snapshot/` as "K". Returns 0, or -errno when the parent is gone.
 * fs->mu held.
 */
int steps_step_home(struct ckfs *fs, const char *name, uint64_t *ret_parent,
		    const char **ret_leaf);

/* steps_flat_name - "NAME.ID" (id >= 0) or "NAME" into buf (cap bytes, truncated), every '/' of
 * NAME as '-': the entry name in /.ckptfs/quarantine and /.ckptfs/retained. Pure. */
void steps_flat_name(const char *name, int64_t id, char *buf, size_t cap);

/*
 * steps_move_to_quarantine - move step s's directory from its place in the namespace to
 * /.ckptfs/quarantine/NAME.ID and queue its name for the kernel. Returns 0 (also when it is not
 * at its place) or the index's -errno. In a transaction, fs->mu held.
 */
int steps_move_to_quarantine(struct ckfs *fs, const struct idx_step *s);

/*
 * steps_move_back - move step s's directory from quarantine back to its name. Returns 0,
 * -EEXIST when the trainer re-created the name, or -errno. In a transaction, fs->mu held.
 */
int steps_move_back(struct ckfs *fs, const struct idx_step *s);

/*
 * steps_record - end the index transaction an event hook began: commit when rc >= 0, else (or
 * when the commit fails) roll back and log "cannot record <what> in the index: <error>", what
 * given printf-style. Hooks return nothing to the trainer, so this is where their index errors
 * go: the record is missing, and the step it concerns is judged again at the next mount
 * (recovery). Returns rc, or the commit's -errno. In a transaction, fs->mu held.
 */
int steps_record(struct ckfs *fs, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * steps_quarantine_limit - prune the steps set aside longest ago beyond -o keep_quarantine (pinned
 * ones are kept and not counted). Its own transaction; fs->mu held.
 */
void steps_quarantine_limit(struct ckfs *fs);

/* steps_set_state - set step s's state (idx_step_state) with an optional note, log it, and update
 * s->state. Returns 0 or the index's -errno (s unchanged). In a transaction, fs->mu held. */
int steps_set_state(struct ckfs *fs, struct idx_step *s, int state, const char *note);

/* ---- steps_judge.c: sealing and judging ---- */

/*
 * steps_evaluate - judge step id: complete it, or set it aside in quarantine when it cannot
 * complete. settled: its writers are gone; recovering: the daemon that saw it written is gone;
 * quiet: nothing was written into it for STEP_SETTLE_NS (the reaper, steps_settle_now). State
 * changes are logged; on an index error the step stays as it is and is judged again later.
 * fs->mu held; runs its own transaction.
 */
void steps_evaluate(struct ckfs *fs, int64_t id, bool settled, bool recovering, bool quiet);

/*
 * steps_judge_older_sealed - the row of step m->step of layout m->kind (a layout_classify match)
 * was just made: if that layout's step directories hold the same names at every step
 * (policy_names_repeat: DeepSpeed, HF), judge its sealed steps older than m->step now (at most
 * 16, newest first). fs->mu held; each judgement runs its own transaction; index errors leave
 * those steps to be judged later.
 */
void steps_judge_older_sealed(struct ckfs *fs, const struct layout_match *m);

/*
 * steps_step_of_path - the step whose directory is rel[0, m->step_prefix_len), into *ret,
 * creating its row if needed (then older sealed steps of a policy_names_repeat layout are judged).
 * A directory that is a step only on evidence (policy_needs_evidence) gets its row from its
 * marker alone: for any other path in it the row is looked up, never created.
 * Returns 0 or -errno (-ENOENT: m has no step prefix, no such directory, or a directory with no
 * row that m is no evidence for; index errors).
 * fs->mu held; runs its own transaction when it creates the row.
 */
int steps_step_of_path(struct ckfs *fs, const char *rel, const struct layout_match *m,
		       struct idx_step *ret);

/*
 * steps_claim_record - record the claim buf[0, len) (bytes, not NUL-terminated) written into the
 * tracker at path name (relative to the mount root) of layout kind, parsed into *t; what it
 * seals is the caller's (steps_on_claim; a rollback seals nothing: it names a complete version).
 * Returns layout_tracker_parse's answer: 0, or -errno (recorded all the same, as a claim of no
 * step). An index error is logged and the claim is not recorded. fs->mu held; runs its own
 * transaction.
 */
int steps_claim_record(struct ckfs *fs, int kind, const char *name, const char *buf, size_t len,
		       struct layout_tracker *t);

/*
 * steps_seal - a marker or a tracker claim says step s was saved (why: for the log): seal it and
 * judge it (a step set aside comes back if its files are sound). On an index error the step
 * stays as it is. fs->mu held; runs its own transactions.
 */
void steps_seal(struct ckfs *fs, struct idx_step *s, const char *why);

/* ---- steps_retain.c: retention and retained copies ---- */

/*
 * steps_drop_tree - remove step s's directory tree from wherever it is (the namespace,
 * quarantine, retained); s->dir_ino becomes 0. Chunks no longer referenced are added to fr.
 * Returns 0 or -errno. In a transaction, fs->mu held.
 */
int steps_drop_tree(struct ckfs *fs, struct idx_step *s, struct ino_freed *fr);

/* steps_prune - prune step s: its tree leaves the namespace, its state becomes pruned; freed
 * chunks go to fr. Returns 0 or -errno. In a transaction, fs->mu held. */
int steps_prune(struct ckfs *fs, struct idx_step *s, struct ino_freed *fr);

/* steps_is_retained - is step s kept only in /.ckptfs/retained (the trainer deleted it)? fs->mu
 * held. */
bool steps_is_retained(struct ckfs *fs, const struct idx_step *s);

/*
 * steps_keep_copy - keep complete step s: a copy of its tree (new inodes, the same chunks) as
 * /.ckptfs/retained/NAME.ID, which becomes the step's directory; the tree at s->dir_ino (its
 * attributes in *dir_attr) is left to the trainer. qname (cap bytes) receives NAME.ID. Returns
 * 0 or -errno. In a transaction, fs->mu held.
 */
int steps_keep_copy(struct ckfs *fs, const struct idx_step *s, struct idx_inode *dir_attr,
		    char *qname, size_t cap);

/*
 * steps_restore - put retained step s back at its name, so a resuming trainer finds what its
 * tracker names; a part the trainer left at the name is set aside in quarantine as
 * NAME.partial-ID. No-op for MF1 steps (steps_mf1_restore) and steps not in retained. Best
 * effort: on an error nothing moves. fs->mu held; runs its own transaction.
 */
void steps_restore(struct ckfs *fs, struct idx_step *s);

/*
 * steps_unrestore - undo steps_restore for step s, set aside and now sealed after all (another
 * node's seal arrived after s's ranks here exited): the older complete version of s that was
 * put back at s's name (same kind and name, a smaller id) goes back to /.ckptfs/retained as
 * NAME.ID, where the completion of s prunes it (steps_versions_done). Returns 0 (moved), -EEXIST
 * when the name is held by anything else (a directory the trainer made, a step being written):
 * never moved, or the index's -errno. In a transaction, fs->mu held.
 */
int steps_unrestore(struct ckfs *fs, const struct idx_step *s);

/*
 * steps_clone_file - a second inode with the same content (extents, chunks: nothing is copied),
 * attributes, times and flags as regular file src, readable by its owner, named dir/name.
 * In the caller's transaction. Returns 0, -ENOENT (src gone), -EEXIST (the name is taken) or the
 * index's -errno.
 */
int steps_clone_file(struct ckfs *fs, uint64_t src, uint64_t dir, const char *name);

/*
 * Steps that are files at the mount root (layout_desc()->top_files: Lightning), steps_top.c.
 * Each runs with fs->mu held.
 *   steps_top_before_write - ino is opened for writing: keep its sound content (see the file).
 *   steps_top_on_commit    - root file rel (match m) was committed with inode flags (IDX_INODE_*):
 *                            judge its step, drop or bring back the kept version.
 *   steps_top_on_name      - ino was created at, or renamed to (renamed), root name: a sound file
 *                            renamed becomes its step; a new tracker drops the kept link.
 *   steps_top_before_remove- the trainer (thread pid) removes root name.
 *   steps_top_link_due     - a kept link waits for a remover that is gone (invariant 6).
 *   steps_top_link_settle  - then it takes its name again if the name is still free.
 *   steps_top_drop_file    - retention removes step s's file; in the caller's transaction.
 *   steps_top_file         - is rel a root file these rules cover (a step file, its temp, a
 *                            copy tracker)? Fills *ret with its classification when so.
 */
void steps_top_before_write(struct ckfs *fs, uint64_t ino);
void steps_top_on_commit(struct ckfs *fs, const char *rel, const struct layout_match *m,
			 uint64_t ino, uint32_t flags, pid_t pid);
void steps_top_on_name(struct ckfs *fs, uint64_t ino, const char *name, bool renamed);
void steps_top_before_remove(struct ckfs *fs, const char *name, pid_t pid);
bool steps_top_link_due(struct ckfs *fs);
void steps_top_link_settle(struct ckfs *fs);
int steps_top_drop_file(struct ckfs *fs, const struct idx_step *s, struct ino_freed *fr);
bool steps_top_file(const struct ckfs *fs, const char *rel, struct layout_match *ret);
/* steps_top_recover - at mount: each kept version whose name does not hold a whole file takes
 * the name again; the others are dropped (steps_top.c invariant 2). */
void steps_top_recover(struct ckfs *fs);


/* ---- steps_slot.c: InternEvo snapshot slots ---- */

/* steps_slot_number - set slot s's number (and s->step) from the name of the marker sealing it
 * ("<digits>.step"); other names and index errors leave it unchanged. fs->mu held; runs its own
 * transaction. */
void steps_slot_number(struct ckfs *fs, struct idx_step *s, const char *marker);

/*
 * steps_versions_done - step s (an InternEvo slot's new version, or a step rewritten in place)
 * was judged: complete, its kept versions in /.ckptfs/retained are pruned; set aside, the newest
 * kept version takes its place again (steps_restore). No kept version: nothing. Best effort: on
 * an error nothing is pruned. fs->mu held; runs its own transaction.
 */
void steps_versions_done(struct ckfs *fs, const struct idx_step *s);

/* steps_kept_version_dir - if step s is a new version of a complete step, whose kept version
 * waits in /.ckptfs/retained (steps_reopen_complete, a slot's rewrite), the directory of the
 * newest kept version into *ret_dir and true; false otherwise or on an index error (*ret_dir
 * untouched). Costs what /.ckptfs/retained holds. fs->mu held. */
bool steps_kept_version_dir(struct ckfs *fs, const struct idx_step *s, uint64_t *ret_dir);


/* ---- steps_mf1.c: MindFormers 1.0 ---- */

/* steps_mf1_note_claim - remember rank's newest meta.json claim (epoch, step), recorded at ts_ns
 * (ns since the epoch, the claim row's time); claims are passed in the order they were made.
 * Returns 0 or -ENOMEM. fs->mu held. */
int steps_mf1_note_claim(struct ckfs *fs, int rank, int64_t epoch, int64_t step, int64_t ts_ns);

/* steps_mf1_key - the (epoch, step) of MF1 step s from its name "EPOCH_STEP" into *epoch, *step;
 * false (outputs untouched) when s is not an MF1 step. Pure. */
bool steps_mf1_key(const struct idx_step *s, int64_t *epoch, int64_t *step);

/* steps_mf1_judge_cb - idx_step_foreach callback (arg: the struct ckfs): judge each MF1 step
 * across ranks. Returns 0. fs->mu held. */
int steps_mf1_judge_cb(const struct idx_step *s, void *arg);

/* steps_mf1_on_file - a rank's MF1 checkpoint file m was named by pid: find or create its step
 * row, note the writer and judge the step across ranks. Index errors end it quietly. fs->mu
 * held; runs its own transactions. */
void steps_mf1_on_file(struct ckfs *fs, const struct layout_match *m, pid_t pid);

/*
 * steps_mf1_drop_files - remove MF1 step s's file from every rank directory (retention),
 * including a relaunch's {prefix}_N-... of the same step. Returns 0 or -errno. In the caller's
 * transaction, fs->mu held; freed chunks go to fr.
 */
int steps_mf1_drop_files(struct ckfs *fs, const struct idx_step *s, struct ino_freed *fr);

/*
 * steps_mf1_before_remove - the trainer unlinks rank_R/name: if it is a file of the newest
 * complete MF1 step, keep every rank's file of that step in /.ckptfs/retained first. Best
 * effort: on an index error the unlink goes on and nothing is kept. fs->mu held.
 */
void steps_mf1_before_remove(struct ckfs *fs, int rank, const char *name);

/*
 * steps_mf1_restore - put the retained files of MF1 step s back into the rank directories that
 * lack them, then drop the retained copy. Best effort: on an error the transaction is rolled
 * back. fs->mu held; runs its own transaction.
 */
void steps_mf1_restore(struct ckfs *fs, struct idx_step *s);

#endif
