/*
 * steps_top.c — layouts whose steps are files at the mount root (layout_desc(kind)->top_files:
 * PyTorch Lightning's `epoch=E-step=S.ckpt`), and their trackers that are checkpoints
 * (LAYOUT_TRACKER_COPY: `last.ckpt`, a full checkpoint rewritten in place at every save).
 *
 * Lightning's "atomic" save is a copy in place on a mount: fsspec's temp lies in $TMPDIR, the
 * rename into the mount fails with EXDEV, and shutil.move copies into the final name opened
 * O_TRUNC (tests/traces/lightning.md, "One save"). One process (rank 0) writes each file. So:
 *   1. A step is one root file. Its row is named by the file name (a step may have several
 *      files, `-vN`), has no directory (dir_ino 0) and is complete once its writer closed it
 *      whole: not torn (the writer alive at its close) and not malformed (validate_file: a torch
 *      zip whose end of central directory record ends the file, written last by torch.save, so
 *      a copy cut short lacks it). The close is committed before it returns
 *      (steps_commit_at_close), so the step is complete when the trainer's close returns, and a
 *      writer killed in its close is judged before its death is seen by a restarted trainer.
 *   2. A root file of such a layout that is whole (a step file or a copy tracker) and is opened
 *      for writing keeps its whole version (same chunks) as `.ckptfs/retained/NAME.kept`. When
 *      the new version is closed whole, the kept one is dropped; when it is closed torn (the
 *      trainer killed during its rewrite of `last.ckpt`: the kernel's close from do_exit), the
 *      kept one takes the name again and the torn version is dropped, so a resume
 *      (`ckpt_path="last"`, the newest mtime of `last*.ckpt`) loads the previous whole
 *      checkpoint instead of failing in torch.load.
 *      A daemon stopped (killed) during such a rewrite leaves the kept version and the name's
 *      new one: at the next mount (steps_top_recover) the kept one takes the name again unless
 *      the name holds a whole file.
 *   3. A file renamed onto a step name (a temp beside the target, or $TMPDIR inside the mount)
 *      is judged at the rename from the check made at its close under the temp name.
 *   4. The trainer's own removal of a step file (Lightning's top-k retention) ends its row
 *      (pruned, "removed by the trainer"); -o keep_checkpoint_max prunes the older complete
 *      steps' files (steps_retention), never a file a newer version of the name now holds.
 *   5. A copy tracker that is a symlink (save_last="link") naming a step file being removed (by
 *      the trainer or by retention) is pointed at the newest other complete step file first:
 *      Lightning removes the previous top-k file after writing the new one and before it links
 *      last.ckpt to it, and a link left dangling by a crash there makes its resume start from
 *      scratch.
 *   6. A copy tracker that is a symlink removed by the trainer (Lightning's _link_checkpoint:
 *      os.remove, then os.symlink) is kept as `.ckptfs/retained/NAME.kept` until a tracker of
 *      that name is made again (then it is dropped). If the remover is gone first (a crash
 *      between the two), the next lookup or listing of the root puts it back at its name
 *      (steps_top_link_settle), as the next mount does after the daemon itself stopped.
 * Not covered: readers that open the tracker while it is being rewritten see the new bytes as
 * they come (only after the writer is gone is the kept version what the name holds).
 *
 * Locking: every function here runs with fs->mu held.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/steps/steps.h"
#include "fs/policy/layout.h"
#include "fs/policy/policy.h"
#include "fs/steps/steps_int.h"

/* The suffix of a kept version's name in /.ckptfs/retained. */
#define KEPT_SUFFIX ".kept"

bool steps_top_file(const struct ckfs *fs, const char *rel, struct layout_match *ret)
{
	struct layout_match m;

	if (fs->steps.opt.layout < 0 || strchr(rel, '/') ||
	    layout_classify(rel, fs->steps.opt.layout, &m) < 0 ||
	    !layout_desc(m.kind)->top_files)
		return false;
	if (m.role == ROLE_STEP_FILE ||
	    (m.role == ROLE_TRACKER && layout_desc(m.kind)->tracker == LAYOUT_TRACKER_COPY) ||
	    (m.role == ROLE_PLAIN && (m.flags & LAYOUT_F_TMP))) {
		*ret = m;
		return true;
	}
	return false;
}

/* The name of name's kept version into buf; false when it does not fit a file name. */
static bool kept_name(const char *name, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "%s" KEPT_SUFFIX, name);

	return n > 0 && (size_t)n < cap && (size_t)n <= LAYOUT_NAME_MAX;
}

/* Is inode a a whole file: committed (a digest), neither torn nor malformed? The policy's rule,
 * which ckptctl import and fsck apply too. */
static bool sound(const struct idx_inode *a)
{
	return policy_top_whole(a);
}

/* Remove retained/kname, if there, in the caller's transaction. */
static int drop_kept(struct ckfs *fs, const char *kname, struct ino_freed *fr)
{
	uint64_t kino;
	int rc;

	if (!fs->steps.retained_ino || idx_dentry_lookup(fs->ix, fs->steps.retained_ino, kname, &kino) < 0)
		return 0;
	rc = idx_dentry_remove(fs->ix, fs->steps.retained_ino, kname);
	return rc == 0 ? ino_drop_link(fs, kino, ckfs_now(fs), fr) : rc;
}

/* Run drop_kept in a transaction of its own. */
static void drop_kept_now(struct ckfs *fs, const char *name)
{
	char kname[LAYOUT_NAME_MAX + 1];
	struct ino_freed fr = { 0 };
	uint64_t kino;
	int rc;

	if (!kept_name(name, kname, sizeof(kname)) || !fs->steps.retained_ino ||
	    idx_dentry_lookup(fs->ix, fs->steps.retained_ino, kname, &kino) < 0 || idx_begin(fs->ix) < 0)
		return;
	rc = drop_kept(fs, kname, &fr);
	if (rc == 0)
		rc = idx_commit(fs->ix);
	if (rc < 0)
		idx_rollback(fs->ix);
	ino_release_finish(fs, &fr, rc == 0);
}

void steps_top_before_write(struct ckfs *fs, uint64_t ino)
{
	char name[LAYOUT_NAME_MAX + 1], kname[LAYOUT_NAME_MAX + 1];
	struct layout_match m;
	struct idx_inode a;
	struct oinode *oi;
	uint64_t parent, kino;
	int rc;

	if (!fs->steps.retained_ino || idx_dentry_parent(fs->ix, ino, &parent, name, sizeof(name)) < 0 ||
	    parent != IDX_ROOT_INO || !steps_top_file(fs, name, &m) || (m.flags & LAYOUT_F_TMP) ||
	    !kept_name(name, kname, sizeof(kname)) || idx_inode_get(fs->ix, ino, &a) < 0 ||
	    !sound(&a) || ((oi = oi_find(fs, ino)) && atomic_load(&oi->ov_dirty)))
		return;
	/* a version already kept is the last whole one: the name now holds a rewrite not yet
	 * closed whole (a second writer, or a reopen during the rewrite) */
	if (idx_dentry_lookup(fs->ix, fs->steps.retained_ino, kname, &kino) == 0 || idx_begin(fs->ix) < 0)
		return;
	rc = steps_clone_file(fs, ino, fs->steps.retained_ino, kname);
	if (rc == 0)
		rc = idx_commit(fs->ix);
	if (rc < 0) {
		idx_rollback(fs->ix);
		ckpt_log("'%s' is rewritten in place: cannot keep its whole version: %s", name,
			 strerror(-rc));
	}
}

/* Step file name (inode ino) of kind, step number step, is whole: complete its row. */
static void complete(struct ckfs *fs, enum layout_kind kind, const char *name, int64_t step,
		     uint64_t ino, const char *why)
{
	struct idx_step s;
	struct idx_inode a;
	uint64_t stored = 0;
	int64_t id;
	int rc;

	if (idx_inode_get(fs->ix, ino, &a) < 0 || idx_begin(fs->ix) < 0)
		return;
	(void)idx_file_stored_bytes(fs->ix, ino, &stored);
	rc = idx_step_by_name(fs->ix, kind, name, &s);
	if (rc == 0 && s.state == IDX_STEP_COMPLETE && s.step == step) {
		rc = idx_step_set_figures(fs->ix, s.id, 1, a.size, stored, NULL);
	} else {
		rc = idx_step_create(fs->ix, kind, name, step, 0, ckfs_now(fs), &id);
		if (rc == 0)
			rc = idx_step_get(fs->ix, id, &s);
		if (rc == 0)
			rc = idx_step_set_figures(fs->ix, id, 1, a.size, stored, NULL);
		if (rc == 0)
			rc = steps_set_state(fs, &s, IDX_STEP_COMPLETE, why);
	}
	if (rc == 0)
		rc = idx_commit(fs->ix);
	if (rc < 0) {
		idx_rollback(fs->ix);
		ckpt_log("step file '%s': cannot record it complete: %s", name, strerror(-rc));
		return;
	}
	steps_retention(fs, kind);
}

/*
 * Root file name holds a version closed torn or malformed: when a whole version is kept, it
 * takes the name again and the torn one is dropped. Returns true when it did.
 */
static bool bring_back(struct ckfs *fs, const char *name, uint64_t ino)
{
	char kname[LAYOUT_NAME_MAX + 1];
	struct ino_freed fr = { 0 };
	uint64_t kino, cur;
	int rc;

	if (!kept_name(name, kname, sizeof(kname)) || !fs->steps.retained_ino ||
	    idx_dentry_lookup(fs->ix, fs->steps.retained_ino, kname, &kino) < 0 ||
	    idx_dentry_lookup(fs->ix, IDX_ROOT_INO, name, &cur) < 0 || cur != ino ||
	    idx_begin(fs->ix) < 0)
		return false;
	rc = idx_dentry_remove(fs->ix, IDX_ROOT_INO, name);
	if (rc == 0)
		rc = ino_drop_link(fs, ino, ckfs_now(fs), &fr);
	if (rc == 0)
		rc = idx_dentry_move(fs->ix, fs->steps.retained_ino, kname, IDX_ROOT_INO, name);
	if (rc == 0)
		rc = idx_commit(fs->ix);
	if (rc < 0)
		idx_rollback(fs->ix);
	ino_release_finish(fs, &fr, rc == 0);
	if (rc < 0)
		return false;
	steps_inval_queue(fs, IDX_ROOT_INO, name); /* the kernel has the torn inode cached */
	return true;
}

void steps_top_on_commit(struct ckfs *fs, const char *rel, const struct layout_match *m,
			 uint64_t ino, uint32_t flags, pid_t pid)
{
	if (m->flags & LAYOUT_F_TMP)
		return; /* judged when renamed to its name (steps_top_on_rename) */
	if (!(flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED))) {
		drop_kept_now(fs, rel);
		if (m->role == ROLE_STEP_FILE)
			complete(fs, m->kind, rel, m->step, ino, "closed whole by its writer");
		return;
	}
	/* only a writer that died (its close from do_exit: torn) is surely done with the file: a
	 * malformed commit may be an fsync in the middle of a copy, and the writer goes on */
	if ((flags & IDX_INODE_TORN) && bring_back(fs, rel, ino))
		ckpt_log("'%s' was left torn by pid %d during its rewrite: its last whole version "
			 "is back at its name", rel, (int)pid);
	else
		ckpt_log("'%s' was left %s by pid %d: not a whole file (a version kept of it comes "
			 "back at the next mount)", rel,
			 (flags & IDX_INODE_TORN) ? "torn" : "malformed", (int)pid);
}

static void on_rename(struct ckfs *fs, uint64_t ino, const char *name);

/* A kept link (invariant 6) takes its name again if the name is free, else it is dropped. */
static void link_back(struct ckfs *fs, const char *name, const char *kname)
{
	uint64_t cur;
	int rc;

	if (idx_dentry_lookup(fs->ix, IDX_ROOT_INO, name, &cur) == 0 || idx_begin(fs->ix) < 0) {
		drop_kept_now(fs, name);
		return;
	}
	rc = idx_dentry_move(fs->ix, fs->steps.retained_ino, kname, IDX_ROOT_INO, name);
	if (rc == 0)
		rc = idx_commit(fs->ix);
	if (rc < 0) {
		idx_rollback(fs->ix);
		return;
	}
	steps_inval_queue(fs, IDX_ROOT_INO, name); /* the kernel knows the name as free */
	ckpt_log("the link '%s' was removed by a process that is gone before it made it again: "
		 "it is back", name);
}

/* Every kept version in /.ckptfs/retained: links (invariant 6) take their name again if it is
 * free; with all, files too (invariant 2, at mount). */
static void settle_kept(struct ckfs *fs, bool files)
{
	struct steps_entries e = { 0 };
	size_t sl = strlen(KEPT_SUFFIX);

	if (fs->steps.opt.layout < 0 || !fs->steps.retained_ino ||
	    steps_dir_entries(fs, fs->steps.retained_ino, 1, &e) < 0)
		return;
	for (size_t i = 0; i < e.n; i++) {
		char name[LAYOUT_NAME_MAX + 1];
		struct layout_match m;
		struct idx_inode a;
		size_t n = strlen(e.names[i]);
		uint64_t cur;

		if ((!S_ISREG(e.modes[i]) && !S_ISLNK(e.modes[i])) || n <= sl ||
		    n - sl > LAYOUT_NAME_MAX || strcmp(e.names[i] + n - sl, KEPT_SUFFIX) != 0)
			continue;
		memcpy(name, e.names[i], n - sl);
		name[n - sl] = '\0';
		if (!steps_top_file(fs, name, &m))
			continue;
		if (S_ISLNK(e.modes[i])) {
			link_back(fs, name, e.names[i]);
			continue;
		}
		if (!files)
			continue;
		if (idx_dentry_lookup(fs->ix, IDX_ROOT_INO, name, &cur) == 0 &&
		    idx_inode_get(fs->ix, cur, &a) == 0 && !sound(&a) && bring_back(fs, name, cur)) {
			ckpt_log("'%s' was being rewritten when the daemon stopped: its last whole "
				 "version is back at its name", name);
			continue;
		}
		drop_kept_now(fs, name);
	}
	steps_dir_entries_free(&e);
}

void steps_top_recover(struct ckfs *fs)
{
	fs->steps.top_unlink.pid = 0;
	settle_kept(fs, true);
}

bool steps_top_link_due(struct ckfs *fs)
{
	return fs->steps.top_unlink.pid > 0 &&
	       !ckpt_pid_alive(fs->steps.top_unlink.pid, fs->steps.top_unlink.start);
}

void steps_top_link_settle(struct ckfs *fs)
{
	if (!steps_top_link_due(fs))
		return;
	fs->steps.top_unlink.pid = 0;
	settle_kept(fs, false);
}

/* Invariant 6: root link tracker name (inode ino) is removed by thread tid: keep it. */
static void keep_link(struct ckfs *fs, const char *name, uint64_t ino, pid_t tid)
{
	char kname[LAYOUT_NAME_MAX + 1], target[LAYOUT_PATH_MAX];
	struct ino_freed fr = { 0 };
	struct idx_inode a;
	unsigned long long start;
	uint64_t kino;
	pid_t pid = ckpt_tgid_of(tid);
	char state;
	int rc;

	if (pid <= 0 || ckpt_pid_stat(pid, &state, &start) < 0 ||
	    !kept_name(name, kname, sizeof(kname)) || idx_inode_get(fs->ix, ino, &a) < 0 ||
	    idx_symlink_get(fs->ix, ino, target, sizeof(target)) < 0 || idx_begin(fs->ix) < 0)
		return;
	rc = drop_kept(fs, kname, &fr);
	a.nlink = 1;
	if (rc == 0)
		rc = idx_inode_create(fs->ix, &a, &kino);
	if (rc == 0)
		rc = idx_dentry_add(fs->ix, fs->steps.retained_ino, kname, kino);
	if (rc == 0)
		rc = idx_symlink_set(fs->ix, kino, target);
	if (rc == 0)
		rc = idx_commit(fs->ix);
	if (rc < 0)
		idx_rollback(fs->ix);
	ino_release_finish(fs, &fr, rc == 0);
	if (rc == 0) {
		fs->steps.top_unlink.pid = pid;
		fs->steps.top_unlink.start = start;
	}
}

void steps_top_on_name(struct ckfs *fs, uint64_t ino, const char *name, bool renamed)
{
	struct layout_match m;

	if (renamed) {
		on_rename(fs, ino, name);
		return;
	}
	char kname[LAYOUT_NAME_MAX + 1];
	struct idx_inode a;
	uint64_t kino;

	/* a tracker made again at its name: the link kept of it is not needed (invariant 6). Not
	 * a kept file: this runs too when a file is opened for writing (steps_before_write) */
	if (steps_top_file(fs, name, &m) && m.role == ROLE_TRACKER &&
	    kept_name(name, kname, sizeof(kname)) && fs->steps.retained_ino &&
	    idx_dentry_lookup(fs->ix, fs->steps.retained_ino, kname, &kino) == 0 &&
	    idx_inode_get(fs->ix, kino, &a) == 0 && S_ISLNK(a.mode)) {
		drop_kept_now(fs, name);
		fs->steps.top_unlink.pid = 0;
	}
}

static void on_rename(struct ckfs *fs, uint64_t ino, const char *name)
{
	struct layout_match m;
	struct idx_inode a;

	if (!steps_top_file(fs, name, &m) || (m.flags & LAYOUT_F_TMP) ||
	    idx_inode_get(fs->ix, ino, &a) < 0)
		return;
	if (!sound(&a)) {
		if (S_ISREG(a.mode) && a.has_hash)
			ckpt_log("'%s' is renamed into place torn or malformed: not a step", name);
		return;
	}
	/* the whole file that took the name replaces any version kept of the name */
	drop_kept_now(fs, name);
	if (m.role == ROLE_STEP_FILE)
		complete(fs, m.kind, name, m.step, ino, "renamed into place whole");
}

struct newest_other {
	struct ckfs *fs;
	const char *not;                  /* the name being removed */
	char name[LAYOUT_NAME_MAX + 1];   /* the newest complete step file still at the root */
	bool found;
};

static int newest_other_cb(const struct idx_step *s, void *arg)
{
	struct newest_other *o = arg;
	uint64_t ino;

	if (strcmp(s->name, o->not) == 0 || strchr(s->name, '/') ||
	    idx_dentry_lookup(o->fs->ix, IDX_ROOT_INO, s->name, &ino) < 0)
		return 0;
	snprintf(o->name, sizeof(o->name), "%s", s->name);
	o->found = true;
	return 1;
}

/* Invariant 5: every root symlink tracker of kind naming name now names the newest other
 * complete step file, when there is one. own_txn: in a transaction of its own for each link;
 * else in the caller's, whose commit makes it so (the kernel is told of the new target either
 * way). Returns 0 or the index's -errno (own_txn: always 0, a failure is rolled back). */
static int relink(struct ckfs *fs, enum layout_kind kind, const char *name, bool own_txn)
{
	struct newest_other o = { .fs = fs, .not = name };
	struct steps_entries e = { 0 };
	char target[LAYOUT_NAME_MAX + 1];
	struct layout_match m;
	struct idx_inode a;
	int rc = 0;

	if (steps_dir_entries(fs, IDX_ROOT_INO, 0, &e) < 0)
		goto out;
	for (size_t i = 0; i < e.n && rc == 0; i++) {
		if (!S_ISLNK(e.modes[i]) || !steps_top_file(fs, e.names[i], &m) ||
		    m.kind != kind || m.role != ROLE_TRACKER ||
		    idx_symlink_get(fs->ix, e.inos[i], target, sizeof(target)) < 0 ||
		    strcmp(target, name) != 0)
			continue;
		if (!o.found && (idx_step_newest_each(fs->ix, 1u << kind, IDX_STEP_COMPLETE,
						      newest_other_cb, &o) < 0 || !o.found))
			goto out;
		if (idx_inode_get(fs->ix, e.inos[i], &a) < 0 || (own_txn && idx_begin(fs->ix) < 0))
			goto out;
		a.size = strlen(o.name);
		a.ctime_ns = ckfs_now(fs);
		rc = idx_symlink_set(fs->ix, e.inos[i], o.name);
		if (rc == 0)
			rc = idx_inode_update(fs->ix, &a);
		if (rc == 0 && own_txn)
			rc = idx_commit(fs->ix);
		if (rc < 0) {
			if (own_txn)
				idx_rollback(fs->ix);
			break;
		}
		steps_inval_queue(fs, IDX_ROOT_INO, e.names[i]);
		ckpt_log("'%s' is removed while the link '%s' names it: the link now names '%s', "
			 "the newest complete step", name, e.names[i], o.name);
	}
out:
	steps_dir_entries_free(&e);
	return own_txn ? 0 : rc;
}

void steps_top_before_remove(struct ckfs *fs, const char *name, pid_t pid)
{
	struct layout_match m;
	struct idx_inode a;
	struct idx_step s;
	uint64_t ino;

	if (!steps_top_file(fs, name, &m) || (m.flags & LAYOUT_F_TMP))
		return;
	if (m.role == ROLE_TRACKER && idx_dentry_lookup(fs->ix, IDX_ROOT_INO, name, &ino) == 0 &&
	    idx_inode_get(fs->ix, ino, &a) == 0 && S_ISLNK(a.mode)) {
		keep_link(fs, name, ino, pid);
		return;
	}
	drop_kept_now(fs, name);
	if (m.role == ROLE_STEP_FILE)
		relink(fs, m.kind, name, true);
	if (m.role != ROLE_STEP_FILE || idx_step_by_name(fs->ix, m.kind, name, &s) < 0 ||
	    s.state != IDX_STEP_COMPLETE || idx_begin(fs->ix) < 0)
		return;
	if (steps_set_state(fs, &s, IDX_STEP_PRUNED, "removed by the trainer") < 0 ||
	    idx_commit(fs->ix) < 0)
		idx_rollback(fs->ix);
}

int steps_top_drop_file(struct ckfs *fs, const struct idx_step *s, struct ino_freed *fr)
{
	char kname[LAYOUT_NAME_MAX + 1];
	struct layout_match m;
	struct idx_step cur;
	uint64_t ino;
	int rc;

	/* only the version s is: a newer row of the name owns what the name holds now */
	if (!steps_top_file(fs, s->name, &m) || m.role != ROLE_STEP_FILE ||
	    idx_step_by_name(fs->ix, s->kind, s->name, &cur) < 0 || cur.id != s->id)
		return 0;
	if (kept_name(s->name, kname, sizeof(kname)) && (rc = drop_kept(fs, kname, fr)) < 0)
		return rc;
	if (idx_dentry_lookup(fs->ix, IDX_ROOT_INO, s->name, &ino) < 0)
		return 0; /* removed already */
	/* a link last.ckpt naming it (save_last="link" with a monitor names an older step) */
	if ((rc = relink(fs, s->kind, s->name, false)) < 0)
		return rc;
	rc = idx_dentry_remove(fs->ix, IDX_ROOT_INO, s->name);
	if (rc == 0)
		rc = ino_drop_link(fs, ino, ckfs_now(fs), fr);
	if (rc == 0)
		steps_inval_queue(fs, IDX_ROOT_INO, s->name);
	return rc;
}
