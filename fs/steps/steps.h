/*
 * steps.h — the step engine's interface to the FUSE layer (fs/steps/; its private parts are in
 * steps_int.h, which says what it owns). Hooks called as names are created, files committed,
 * removed; the virtual trackers and rank meta.json files; the reaper and recovery.
 *
 * May call: the write path (write.h), the policy (fs/policy/), core, index/ and store/. Never
 * FUSE: names the kernel must forget are sent through fs->up.flush_inval (daemon.h).
 */
#ifndef CKPTFS_FS_STEPS_H
#define CKPTFS_FS_STEPS_H

#include "fs/write/write.h"

/* ---- the step engine's state read by other layers (struct steps_state, steps_state.h) ---- */

/*
 * steps_configure - set the step engine's settings from the mount options (*opt copied). Once,
 * before steps_init and before any other thread runs; no lock.
 */
static inline void steps_configure(struct ckfs *fs, const struct steps_opts *opt)
{
	fs->steps.opt = *opt;
}

/*
 * steps_settings - the step engine's settings (layout, retention, ranks). Borrowed for the
 * mount's life; read-only after steps_configure, so any thread reads it with no lock.
 */
static inline const struct steps_opts *steps_settings(const struct ckfs *fs)
{
	return &fs->steps.opt;
}

/* steps_meta_ino - the inode of /.ckptfs (0 before steps_init). Any thread, no lock: set once
 * by steps_init before the session starts. */
static inline uint64_t steps_meta_ino(const struct ckfs *fs)
{
	return fs->steps.meta_ino;
}

/* steps_save_hist - the histogram of a step's creation to complete (seconds), for the metrics.
 * Borrowed for the mount's life; lock-free (struct ckpt_hist). */
static inline struct ckpt_hist *steps_save_hist(struct ckfs *fs)
{
	return &fs->steps.save_hist;
}

/* steps_inval_pending - are names queued for the kernel to forget (steps_take_inval would hand
 * over some)? Any thread, no lock: a hint read atomically, which a sender uses to skip taking
 * fs->mu when there is nothing to send. */
static inline bool steps_inval_pending(struct ckfs *fs)
{
	return atomic_load(&fs->steps.inval.queued);
}

/* ---- the step engine: steps*.c (fs->mu held unless said) ---- */

/* Entries of one directory collected by steps_dir_entries; freed by steps_dir_entries_free. */
struct steps_entries {
	char **names;
	uint64_t *inos;
	uint32_t *modes;
	size_t n, cap;
};

/* How deep the step engine walks a step's tree before it calls the tree a loop (-ELOOP). */
#define STEPS_TREE_DEPTH_MAX 256

/*
 * steps_dir_entries - the entries of directory dir (name copied, ino, mode) into *c, which must be
 * zeroed; depth is dir's depth below the walk's start. Returns 0, -ELOOP when depth exceeds
 * STEPS_TREE_DEPTH_MAX, -ENOMEM, or the index's -errno. *c is the caller's to release with
 * steps_dir_entries_free on every path. fs->mu held.
 */
int steps_dir_entries(struct ckfs *fs, uint64_t dir, int depth, struct steps_entries *c);

/* steps_dir_entries_free - free what steps_dir_entries collected in *c (not c itself). */
void steps_dir_entries_free(struct steps_entries *c);

/*
 * steps_init - create /.ckptfs, judge what an earlier daemon left unfinished, and check the
 * newest complete step of each layout (re-hash its chunks; a damaged one leaves the namespace).
 * Takes mu. With -o remote the check runs here, before the mount; otherwise on a thread of its
 * own (fs->steps.checker) that holds mu from before this returns until the check ends, so the mount
 * comes up at once and every request waits on mu until the damaged steps are gone. Returns 0 or
 * the index's -errno.
 */
int steps_init(struct ckfs *fs);
/* ---- what the mount found and did: steps_report.c (struct mount_report, daemon.h) ---- */

/*
 * steps_report_init / steps_report_destroy - the report's lock and condition (startup and
 * teardown, one thread).
 */
void steps_report_init(struct ckfs *fs);
void steps_report_destroy(struct ckfs *fs);

/*
 * steps_report_begin - start the mount's report, before steps_init: whether the previous daemon
 * stopped cleanly (unclean; prev_pid, its pid or 0), and what the recovery sweep removed (files,
 * chunks). From here until steps_report_finish, steps_report_state notes steps set aside. Any
 * thread, no lock held.
 */
void steps_report_begin(struct ckfs *fs, bool unclean, pid_t prev_pid, uint64_t files,
			uint64_t chunks);

/*
 * steps_report_state - note a state change of step s to state (with its note, may be NULL)
 * while the report is active: a step set aside (incomplete, corrupt), or completed while
 * recovering (fs->steps.crash_recovery). Called by steps_set_state, fs->mu held.
 */
void steps_report_state(struct ckfs *fs, const struct idx_step *s, int state, const char *note);

/* steps_report_malformed - note a file found malformed while recovering. fs->mu held. */
void steps_report_malformed(struct ckfs *fs);

/*
 * steps_report_recovered - after an unclean stop, log one line: the previous daemon's pid and
 * what recovery did (the sweep, the unfinished steps judged, completed and set aside, the files
 * found malformed). Nothing after a clean stop. fs->mu held, after the recovery's judgments.
 */
void steps_report_recovered(struct ckfs *fs);

/*
 * steps_report_upgrade - note the index upgrade said at mount (msg, one line, copied) for the
 * `ckptfs` command to repeat. Any thread, no lock held.
 */
void steps_report_upgrade(struct ckfs *fs, const char *msg);

/*
 * steps_report_finish - the check of the newest steps is over: find the step a resume now lands
 * on for each step set aside, log each in one line, and when the mount recovered or set a step
 * aside, record it all in STORE/recovery.json (temp file, fdatasync, rename, fsync of STORE;
 * on failure logged, the previous record kept). Wakes steps_report_wait. fs->mu held.
 */
void steps_report_finish(struct ckfs *fs);

/*
 * steps_report_checking - the check of the newest steps is about to read bytes (stored bytes
 * of the newest complete step of each layout in use; a damaged one makes it read the next
 * newest as well, not counted). Wakes steps_report_wait. Any thread; takes report.mu (a leaf).
 */
void steps_report_checking(struct ckfs *fs, uint64_t bytes);

/*
 * steps_report_wait - wait until steps_report_finish ran, timeout_ns (nanoseconds) passed, or
 * steps_report_checking said the check reads more than max_bytes (stored bytes): a check
 * that long would hold up what the mount's user starts next, which it is meant to overlap.
 * Returns true when steps_report_finish ran. No lock held (the check holds fs->mu until it
 * ends).
 */
bool steps_report_wait(struct ckfs *fs, int64_t timeout_ns, uint64_t max_bytes);

/*
 * steps_report_notes - what the `ckptfs` command tells its user about this mount, one line each
 * ('\n'-terminated) into buf (cap bytes, cut at a line's end when full): the unclean stop and
 * its recovery, each step set aside and where a resume lands now, the index upgrade, and, when
 * the check is still running (done false), that it goes on after the command returns. Returns
 * the bytes written. No lock held.
 */
size_t steps_report_notes(struct ckfs *fs, char *buf, size_t cap);

/* steps_checker_join - wait for the check steps_init started, if any (no lock held). */
void steps_checker_join(struct ckfs *fs);
/* steps_start / steps_stop - the reaper thread (no lock held); steps_stop joins the check too. */
int steps_start(struct ckfs *fs);
void steps_stop(struct ckfs *fs);
/* steps_reap - judge quiet unfinished steps; recovering: every writer is gone. */
void steps_reap(struct ckfs *fs, bool recovering);
/*
 * steps_settle_due - is there an unfinished step whose recorded writers are all gone?
 * steps_settle_now - judge those steps at once (DESIGN.md "Abandoned steps": a listing or lookup
 * by a reader settles abandonment, so a trainer restarted at once never sees an abandoned step;
 * the reaper's timer is only the background sweep). The caller waits for the commit queue
 * between the two (cq_wait_idle, fs->mu released), so a file closed by a writer that exited is
 * committed before its step is judged. Both with fs->mu held.
 */
bool steps_settle_due(struct ckfs *fs);
void steps_settle_now(struct ckfs *fs);
/*
 * steps_retention - apply fs's retention policy (keep_max, keep_every, pins; invariant 4 in
 * steps.c) to the complete steps of layout kind: steps kept only in retained go once a newer
 * step is complete, then all but the newest keep_max unpinned steps are pruned and their
 * chunks released. With fs->up.global_ok (many nodes) only globally complete steps count toward
 * keep_max: a newer step complete here but not yet everywhere is kept beside them, and every
 * step older than the keep_max-th global one goes. Best effort: on an error the transaction is
 * rolled back and nothing is pruned. fs->mu held; runs its own transactions.
 */
void steps_retention(struct ckfs *fs, int kind);
/*
 * steps_seal_remote - another node published the seal of step (kind, step) (policy rule 5):
 * seal this node's part of it and judge it, as a local claim would. A part of an Orbax step
 * still under its tmp name first takes the step's name: the primary host's commit rename, which
 * renamed only its own node's part. An InternEvo slot (name "snapshot/K": its versions share the
 * name, and this node never sees the marker that numbers them) is found by name and takes the
 * number step, unless a file of it is newer than marker_ns (the sealing node's newest file, ns
 * since the epoch) by more than a clock skew: then this node's ranks are writing the next
 * snapshot into it. why: for the log. Returns 0 (also when the Orbax name is taken here:
 * logged, the part left unsealed), -ESTALE (a slot written since: logged, left unsealed),
 * -ENOENT when this node has no unfinished part of that step (none yet, or already complete;
 * a copy, policy rule 3, counts as unfinished: the seal is the claim it waits for).
 * Takes fs->mu.
 */
int steps_seal_remote(struct ckfs *fs, int kind, int64_t step, const char *name,
		      int64_t marker_ns, const char *why);
/*
 * steps_on_mkdir - directory parent/name (inode ino) is being made by mkdir, inside the caller's
 * open index transaction: if it is a top-level step directory (policy_entry_of says
 * POLICY_STEP_DIR), its step row is made in that transaction, so that the directory and its row
 * are committed together. A directory committed without its row is a step the index does not
 * know: recovery never judges it, and a resume that picks the newest step directory by name
 * (transformers' get_last_checkpoint) lands on it (tests/mount/test_crash.py StepDirMadeTest).
 * The caller then calls steps_on_name once committed, which notes the writer and judges older
 * sealed steps as for a row it made itself. An all-digit directory that is a step only on its
 * marker's evidence (POLICY_CANDIDATE) gets no row here.
 * Returns 0 (also when the directory is no step directory, or no layout is used) or the index's
 * -errno (the caller rolls its transaction back). fs->mu held.
 */
int steps_on_mkdir(struct ckfs *fs, uint64_t parent, const char *name, uint64_t ino);
/*
 * steps_on_rename - directory ino is being renamed from parent to newparent/newname, inside the
 * caller's open index transaction (the dentry moved in it or about to be). A top-level step
 * directory under its in-progress name (LAYOUT_F_TMP: HF's tmp-checkpoint-N, Orbax's
 * N.orbax-checkpoint-tmp...) renamed to its step's final name takes that name in its row in the
 * same transaction, and is sealed in it: that rename is the step's commit (policy rule 1), for
 * Orbax (desc->seal_by_rename) always, for a layout with an in-step marker (HF) when the marker is
 * inside, the marker of a tmp directory sealing nothing by itself. Done after the commit instead,
 * a daemon killed in between left a row under the tmp name (restored there, named so by `ckptctl
 * steps`) and an Orbax step never sealed, set aside at the restart (tests/mount/test_crash.py
 * StepDirMadeTest). The caller then calls steps_on_name once committed, which judges a step sealed
 * here.
 * A directory renamed by hand (policy rule 6), other than a slot's or a layout's whose step is a
 * file: a complete or copied step's renamed away from its name leaves the lineage, pruned with its
 * directory left in place and its dir_ino kept; renamed back to its name, a complete one comes
 * back as a new version of the step, sealed here and judged by steps_on_name, and a copied one
 * (never completed) as a directory with no row (below); renamed to another step's name,
 * it is a new directory there. A directory with no step row renamed to a step directory's name
 * (a copy staged under another name) gets its row here, as steps_on_mkdir makes it, and is
 * sealed here when its layout's marker is inside and whole (policy rule 2).
 * parent/name: where the directory was, name borrowed for the call.
 * Returns 0 (also for any other rename) or the index's -errno (the caller rolls back). fs->mu
 * held.
 */
int steps_on_rename(struct ckfs *fs, uint64_t parent, const char *name, uint64_t ino,
		    uint64_t newparent, const char *newname);
/* steps_on_name - parent/name (inode ino) was created or renamed into place by pid. */
void steps_on_name(struct ckfs *fs, uint64_t parent, const char *name, uint64_t ino, pid_t pid,
		   bool renamed);
/*
 * steps_commit_at_close - must the close of ino commit it before returning? True when ino is
 * a step's commit marker where it is now (Orbax commit_success.txt, HF trainer_state.json, ...:
 * the engine judges a marker at the path it has when committed, and trainers rename the step
 * right after), or a file of a step already sealed (DeepSpeed's rank 0 writes `latest` before
 * the barrier that ends the save, deepspeedai/DeepSpeed 007cca6 engine.py save_checkpoint: a
 * shard closed after it is the last thing the save waits for). False otherwise, without
 * checkpoint semantics, or on an index error (the close then queues its commit as any other).
 * Takes fs->mu; reads only.
 */
bool steps_commit_at_close(struct ckfs *fs, uint64_t ino);
/* steps_on_commit - oi's content was committed by pid (torn: closed by a dying process).
 * fs->mu NOT held; oi referenced by the caller. */
void steps_on_commit(struct ckfs *fs, struct oinode *oi, pid_t pid, bool torn);
/* steps_before_remove - the trainer (thread pid) is about to remove parent/name: if that is (in)
 * the newest complete step of its layout, keep a copy in /.ckptfs/retained until a newer step
 * completes, and bring it back when a tracker read resolves to it. */
void steps_before_remove(struct ckfs *fs, uint64_t parent, const char *name, pid_t pid);
/*
 * steps_before_change - something under directory dir is about to change (an entry created,
 * removed or renamed): if dir is in an InternEvo snapshot slot whose version is complete, keep
 * that version (a clone sharing its chunks, in /.ckptfs/retained) until the slot's new version
 * completes, and start the new version (steps_slot.c). Best effort: on an index error it logs
 * and the change goes on unprotected. fs->mu held. Returns true when it wrote to the index (a
 * version kept, or tried to), after which rows the caller read before may be stale; false when
 * it changed nothing.
 */
bool steps_before_change(struct ckfs *fs, uint64_t dir);
/* steps_before_write - file ino is about to be written or truncated by pid (a thread id, as
 * FUSE gives it): steps_before_change of its directory, and pid recorded as a writer of the
 * file's step, if the file is in one (steps_on_name). fs->mu held. */
void steps_before_write(struct ckfs *fs, uint64_t ino, pid_t pid);
/* steps_slot_home - is dir InternEvo's `snapshot/`, the directory of the slots? fs->mu held. */
bool steps_slot_home(struct ckfs *fs, uint64_t dir);
/* steps_dir_name - is parent/name a step directory's name (a top-level step name, `snapshot`, or
 * a slot in it), whose entry may change under the kernel's cache? fs->mu held. */
bool steps_dir_name(struct ckfs *fs, uint64_t parent, const char *name);
/* steps_commit_rename - is renaming root/name a layout's commit (Orbax's
 * `N.orbax-checkpoint-tmp`)? Pure: reads only fs->steps.opt.layout; no lock needed. */
bool steps_commit_rename(const struct ckfs *fs, const char *name);
/* steps_take_inval - take the queue of names the engine moved or removed behind the kernel's
 * back (pruned, quarantined, retained, restored): *ret_v (owned by the caller, free(3); NULL
 * when empty) and its length *ret_n. Takes fs->mu: call without it. */
void steps_take_inval(struct ckfs *fs, struct inval **ret_v, size_t *ret_n);
/* fs_flush_inval - tell the kernel to forget the names steps_take_inval hands over, so their
 * inodes are released and their space reclaimed (daemon.c: the only FUSE call it needs).
 * Returns once every name queued before the call is sent, by this caller or by one that took
 * it first (fs->fuse.inval_mu). fs->mu NOT held, nor by a request the kernel holds a lock of the
 * names' parent for (a lookup, a create): the kernel's invalidation waits for that lock. */
void fs_flush_inval(struct ckfs *fs);
/* steps_in_meta - is ino inside /.ckptfs (read-only)? */
bool steps_in_meta(struct ckfs *fs, uint64_t ino);
/* Virtual trackers. steps_is_vino: is ino one. steps_tracker_name: the layout kind of the
 * tracker parent/name, or 0. steps_vlookup: 1 and *ret_vino when parent/name is a tracker that
 * resolves, -ENOENT when it is a tracker that does not (no complete step), 0 when not a tracker.
 * steps_vstat: attributes of a vino (empty while no step is complete). steps_tracker_content:
 * the bytes a reader of kind's tracker gets (returns their length), -ENOENT without a complete
 * step. steps_vname: the current name of kind's tracker. steps_on_claim: a trainer wrote
 * buf[0..len) into tracker name. */
bool steps_is_vino(uint64_t ino);
/* steps_vino_kind - the layout kind of the tracker behind vino (steps_is_vino(vino) true): the
 * kind of a root tracker, layout_per_rank_kind() for a rank's. steps_vino_rank - the rank whose
 * tracker vino is, or -1 for a root tracker. Pure arithmetic on vino: no lock needed. */
int steps_vino_kind(uint64_t vino);
int steps_vino_rank(uint64_t vino);
/* steps_tracker_path - the path, relative to the root, of kind's tracker in directory parent
 * (the root, or a rank directory for a per-rank tracker), into buf of cap bytes (256 suffice).
 * Returns its length, -ENOENT when parent holds no tracker of kind, -ENOSPC when cap is too
 * small (layout_tracker_path). fs->mu held. */
int steps_tracker_path(struct ckfs *fs, uint64_t parent, int kind, char *buf, size_t cap);
int steps_tracker_name(struct ckfs *fs, uint64_t parent, const char *name);
int steps_vlookup(struct ckfs *fs, uint64_t parent, const char *name, uint64_t *ret_vino);
int steps_vstat(struct ckfs *fs, uint64_t vino, struct stat *st);
int steps_tracker_content(struct ckfs *fs, int kind, char *buf, size_t cap,
			  struct idx_step *ret_step);
int steps_vname(struct ckfs *fs, int kind, char *buf, size_t cap);
/* steps_vcontent - the bytes a reader of virtual tracker vino gets (length), or -ENOENT.
 * steps_tracker_vino - the vino of kind's tracker in directory parent (0: none).
 * steps_rank_dir - the rank of a top-level rank_N directory, or -1.
 * steps_mf1_meta - rank's virtual meta.json (length), naming the newest step of the current
 * lineage (policy rule 6) complete on all ranks; -ENOENT without one. */
int steps_vcontent(struct ckfs *fs, uint64_t vino, char *buf, size_t cap, struct idx_step *ret);
uint64_t steps_tracker_vino(struct ckfs *fs, uint64_t parent, int kind);
int steps_rank_dir(struct ckfs *fs, uint64_t dir);
int steps_mf1_meta(struct ckfs *fs, int rank, char *buf, size_t cap);
/*
 * steps_mf1_whole - whether every rank of the world (-o ranks=N, else the rank_N directories at
 * the root) has its file of MindFormers 1.0 step s here, written here or shown from another
 * node's part, under its final name, committed and sound: the check one node makes of its own
 * step (steps_mf1.c), made by the node layer over every node's part once the step is global
 * and its other nodes' files are shown (node.c show_step). Returns 1; 0 with *ret_rank the first
 * rank without such a file (-1: no rank_N directory at all); -EINVAL when s is no MF1 step.
 * fs->mu held.
 */
int steps_mf1_whole(struct ckfs *fs, const struct idx_step *s, int *ret_rank);
void steps_on_claim(struct ckfs *fs, int kind, const char *name, const char *buf, size_t len,
		    pid_t pid);


/* ---- steps_control.c: steps managed while mounted (ckptctl through the control socket) ---- */

/*
 * steps_ctl_pin, steps_ctl_drop, steps_ctl_rollback - the commands of `ckptctl pin|unpin|drop|
 * rollback STEP` on a mounted store. arg names one step as ckptctl's STEP does (a step number
 * or a step directory name; pruned steps left out; of several versions of one step, the one at
 * its name, else the newest). msg (cap bytes) gets one line for the user:
 * what was done, or why not and what to do.
 * pin: a complete step; unpin runs retention for its layout at once.
 * drop: any step that is not being written (writing, sealed), not pinned, and not the one a
 *       tracker names (a copied step, policy rule 3, included): its tree leaves the namespace
 *       (or the quarantine, or retained), its chunks no other step uses are freed, its state
 *       becomes pruned ("dropped").
 * rollback: a complete step of a layout with a tracker: a claim of it is recorded as if the
 *       trainer wrote its tracker, so the tracker names it (policy rule 6, lineage) and the
 *       newer steps are kept as another lineage.
 * Returns 0 done, -1 refused or failed (msg says which). Take fs->mu themselves.
 */
int steps_ctl_pin(struct ckfs *fs, const char *arg, bool pin, char *msg, size_t cap);
int steps_ctl_drop(struct ckfs *fs, const char *arg, char *msg, size_t cap);
int steps_ctl_rollback(struct ckfs *fs, const char *arg, char *msg, size_t cap);

/*
 * steps_version_shadowed - whether complete step s is a kept version: it lies in
 * /.ckptfs/retained while a newer version of it (writing, sealed or complete) holds its name.
 * Such a step is named by no tracker and neither counted nor pruned by retention until its new
 * version is judged (steps_versions_done); the node layer does not publish it. fs->mu held;
 * reads the index only.
 */
bool steps_version_shadowed(struct ckfs *fs, const struct idx_step *s);

/*
 * steps_version_superseded - whether complete step s has a newer version that is not over: the
 * newest row of its kind and name is another one, never completed and not pruned (being written,
 * sealed, a copy waiting for a claim, or set aside unsealed). A save of the step began after s;
 * on many nodes another node's seal of that save may still arrive (steps_seal_remote), so s is
 * not this node's part of the step any more, even once put back at its name (steps_restore):
 * published again, other nodes would pair it with their parts of the newer save. fs->mu held;
 * reads the index only.
 */
bool steps_version_superseded(struct ckfs *fs, const struct idx_step *s);

#endif /* CKPTFS_FS_STEPS_H */
