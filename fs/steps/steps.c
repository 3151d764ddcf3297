/*
 * steps.c — the step engine's entry points: the hooks the FUSE layer calls as files are named,
 * committed, removed (steps_on_name, steps_on_commit, steps_before_remove), the reaper that
 * judges quiet steps, recovery of what an earlier daemon left, and init/start/stop.
 *
 * The engine as a whole decides checkpoint semantics: which files form a step, when a step is
 * complete, what the trackers say, what `ls` shows, and retention. Its other files and what
 * each owns: fs/steps_int.h.
 *
 * States (index/index.h enum idx_step_state; DESIGN.md "Steps"):
 *
 *     mkdir STEPDIR          marker / tracker claim       every file whole and durable
 *   ──────────────► writing ───────────────────► sealed ─────────────────────────► complete
 *                     │                            │                                  │
 *                     │ no open file, no live      │ no open file, no live writer,     │ retention
 *                     │ writer, never sealed       │ a file torn or malformed          ▼
 *                     └──────────► incomplete ◄────┘                                pruned
 *                                  (moved to .ckptfs/quarantine; a later claim whose files
 *                                   are all sound brings it back, sealed)
 *
 * A copy (policy rule 3: never sealed, every file whole, written by one process that is gone,
 * of a layout found through its tracker; what `cp -r` of a saved step leaves) is not set aside:
 *
 *               its writer gone               a claim names it
 *     writing ──────────────────► copied ─────────────────────► sealed (judged as any save)
 *        ▲                          │  │     `ckptctl drop`
 *        └── written into again ────┘  └────────────────────► pruned
 *
 *   A copied step stays at its name and is named by no tracker.
 *
 * Invariants:
 *   1. Only complete steps are named by a tracker read or counted by retention.
 *   2. A step is complete only if it was sealed, every regular file under its directory has a
 *      committed digest (durable: oi_commit), none is open with uncommitted bytes, and none is
 *      flagged IDX_INODE_TORN or IDX_INODE_MALFORMED.
 *   3. Trackers (root latest_checkpointed_iteration.txt and latest, rank_N/meta.json) are
 *      virtual: what a trainer writes is recorded as a claim and never stored as a file; what a
 *      reader gets is the newest complete step of the tracker's layouts, in the trainer's format.
 *      No complete step: the tracker does not exist.
 *   4. Retention never prunes before a newer step is complete, never the newest complete step,
 *      never a pinned one, and never counts a step that is not complete.
 *
 * Locking: every function here runs with fs->mu held unless its comment says otherwise.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "fs/core/lockrank.h"
#include "fs/core/workers.h"
#include "fs/steps/steps.h"
#include "fs/policy/layout.h"
#include "fs/policy/policy.h"
#include "fs/steps/steps_int.h"
#include "fs/policy/validate.h"

/* How often the reaper looks at unfinished steps (ns, < 1 s). */
#define REAP_PERIOD_NS (250L * 1000 * 1000)

/* ---- per-step runtime facts ---- */

static struct step_rt *rt_get(struct ckfs *fs, int64_t id, bool create)
{
	struct step_rt *r;

	for (r = fs->steps.rt; r; r = r->next)
		if (r->id == id)
			return r;
	if (!create || !(r = calloc(1, sizeof(*r))))
		return NULL;
	r->id = id;
	r->next = fs->steps.rt;
	fs->steps.rt = r;
	return r;
}

void steps_rt_empty_grace(struct ckfs *fs, int64_t id, bool on)
{
	struct step_rt *r = rt_get(fs, id, false);

	if (r)
		r->empty_grace = on;
}


void steps_rt_drop(struct ckfs *fs, int64_t id)
{
	for (struct step_rt **pp = &fs->steps.rt; *pp; pp = &(*pp)->next) {
		if ((*pp)->id == id) {
			struct step_rt *d = *pp;

			*pp = d->next;
			free(d);
			return;
		}
	}
}

void steps_rt_note(struct ckfs *fs, int64_t id, pid_t pid)
{
	struct step_rt *r = rt_get(fs, id, true);

	if (!r)
		return;
	/* a writer's every create, write and close comes here: /proc is read only when the
	 * thread changes (one open and read of /proc/TID/status cost about 30 us a file) */
	if (pid <= 0 || pid != r->last_tid) {
		r->last_tid = pid;
		r->last_tgid = pid = ckpt_tgid_of(pid);
	} else {
		pid = r->last_tgid;
	}
	r->last_ns = ckpt_now_ns();
	r->empty_grace = false; /* written into again: judged as any step */
	for (unsigned i = 0; i < r->npids; i++)
		if (r->pids[i] == pid)
			return;
	char state;
	unsigned long long start;

	if (pid > 0 && r->npids < sizeof(r->pids) / sizeof(r->pids[0]) &&
	    ckpt_pid_stat(pid, &state, &start) == 0) {
		r->starts[r->npids] = start;
		r->pids[r->npids++] = pid;
	}
}

unsigned steps_rt_writers(struct ckfs *fs, int64_t id)
{
	struct step_rt *r = rt_get(fs, id, false);

	return r ? r->npids : 0;
}

void steps_note_writer(struct ckfs *fs, struct idx_step *s, pid_t pid)
{
	char note[64];

	if (s->state == IDX_STEP_COPIED && idx_begin(fs->ix) == 0) {
		snprintf(note, sizeof(note), "written into again (pid %d)", (int)ckpt_tgid_of(pid));
		steps_record(fs, steps_set_state(fs, s, IDX_STEP_WRITING, note),
			     "that step '%s' is written into again", s->name);
	}
	steps_rt_note(fs, s->id, pid);
}

/* ---- hooks ---- */

/* Is directory parent/name where step s lives (steps_step_home)? */
static bool at_its_name(struct ckfs *fs, const struct idx_step *s, uint64_t parent,
			const char *name)
{
	const char *leaf;
	uint64_t home;

	return steps_step_home(fs, s->name, &home, &leaf) == 0 && home == parent &&
	       strcmp(leaf, name) == 0;
}

/*
 * Step s's directory, renamed by hand from parent/name to newparent/newname (policy rule 6): a
 * complete version, or a copy no claim has completed yet (copied), renamed away from its name
 * leaves the lineage, and one that left comes back renamed to its name again. In the rename's
 * transaction.
 */
static int rename_in(struct ckfs *fs, uint64_t ino, uint64_t newparent, const char *newname);

/* Is path rel (from the root) below the directory of a step not pruned? Its row into *ret. */
static bool inside_step(struct ckfs *fs, const char *rel, struct idx_step *ret)
{
	const char *slash = strchr(rel, '/');
	char top[LAYOUT_NAME_MAX + 1];
	uint64_t ino;

	if (!slash || (size_t)(slash - rel) >= sizeof(top))
		return false;
	memcpy(top, rel, (size_t)(slash - rel));
	top[slash - rel] = 0;
	return idx_dentry_lookup(fs->ix, IDX_ROOT_INO, top, &ino) == 0 &&
	       idx_step_by_dir(fs->ix, ino, ret) == 0 && ret->state != IDX_STEP_PRUNED;
}

static int rename_by_hand(struct ckfs *fs, struct idx_step *s, uint64_t parent, const char *name,
			  uint64_t newparent, const char *newname)
{
	bool was = at_its_name(fs, s, parent, name), is = at_its_name(fs, s, newparent, newname);
	struct layout_match m;
	enum policy_entry pe;
	char where[LAYOUT_PATH_MAX], note[LAYOUT_PATH_MAX + IDX_STEP_NAME_MAX + 160];
	struct idx_step host;
	uint64_t dir = s->dir_ino;
	size_t len;
	int64_t id;
	int rc;

	if ((s->state == IDX_STEP_COMPLETE || s->state == IDX_STEP_COPIED) && was && !is) {
		/* pruned, its dir_ino kept: retention, the quarantine and the trackers no longer act
		 * on the directory, which stays the user's, and its rename back finds the version */
		if (newparent == IDX_ROOT_INO ||
		    steps_rel_path(fs, newparent, where, sizeof(where)) < 0 ||
		    (len = strlen(where)) + 1 + strlen(newname) >= sizeof(where))
			snprintf(where, sizeof(where), "%s", newname);
		else
			snprintf(where + len, sizeof(where) - len, "/%s", newname);
		/* into another step's directory (`mv iter_0000004 iter_0000006` when that exists,
		 * as mv nests it): its files are that step's tree now, removed with it when retention
		 * prunes it, as a trainer's own rotation (an rmtree of the step) would */
		if (inside_step(fs, where, &host))
			snprintf(note, sizeof(note), "its directory was renamed to '%s', inside step "
				 "'%s': it leaves the lineage, and its files go with that step when "
				 "retention removes it", where, host.name);
		else
			snprintf(note, sizeof(note), "its directory was renamed to '%s': it leaves the "
				 "lineage, its files stay there", where);
		if ((rc = steps_set_state(fs, s, IDX_STEP_PRUNED, note)) < 0)
			return rc;
	}
	if (s->state != IDX_STEP_PRUNED)
		return 0;
	if (is && s->completed_ns == 0) {
		/* a copy that left before any claim completed it comes back as what it was: a
		 * directory copied in under another name and renamed to its step's name, judged as
		 * one (rename_in: its own row, sealed by a whole marker inside, else copied) */
		if ((rc = idx_step_set_dir(fs->ix, s->id, 0)) < 0)
			return rc;
		return rename_in(fs, dir, newparent, newname);
	}
	if (is) {
		/* back at its name: a new version of the step, sealed by the rename as a tmp
		 * directory's commit is; steps_on_name then judges it complete as any sealed one */
		rc = idx_step_set_dir(fs->ix, s->id, 0);
		if (rc == 0)
			rc = idx_step_create(fs->ix, s->kind, s->name, s->step, dir, ckfs_now(fs),
					     &id);
		if (rc == 0)
			rc = idx_step_get(fs->ix, id, s);
		if (rc == 0)
			rc = steps_set_state(fs, s, IDX_STEP_SEALED, "its directory is back at its name");
		if (rc == 0)
			fs->steps.renamed_id = id;
		return rc;
	}
	/* at another step's name it is a new directory of that step (steps_on_name) */
	if (newparent != IDX_ROOT_INO)
		return 0;
	pe = policy_entry_of(newname, S_IFDIR, fs->steps.opt.layout, &m);
	return pe == POLICY_STEP_DIR || pe == POLICY_CANDIDATE ? idx_step_set_dir(fs->ix, s->id, 0)
							       : 0;
}

/* Does directory dir hold its layout d's in-step marker, whole (closed, not torn, not
 * malformed, as policy rule 2 asks of a marker that seals)? */
static bool whole_marker_inside(struct ckfs *fs, const struct layout_desc *d, uint64_t dir)
{
	struct idx_inode a;
	uint64_t marker;

	return d->marker && !d->marker_step &&
	       idx_dentry_lookup(fs->ix, dir, d->marker, &marker) == 0 &&
	       idx_inode_get(fs->ix, marker, &a) == 0 && S_ISREG(a.mode) &&
	       !(a.flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED));
}

/*
 * Directory ino, with no step row, renamed to newparent/newname: at a step directory's name (a
 * step copied in under a staging name, `mv staging checkpoint-20`) it gets its row in the
 * rename's transaction, as a mkdir does (steps_on_mkdir), and is sealed there when its layout's
 * marker is inside and whole: that marker's close, under the staging name, sealed nothing.
 */
static int rename_in(struct ckfs *fs, uint64_t ino, uint64_t newparent, const char *newname)
{
	char rel[LAYOUT_PATH_MAX];
	const struct layout_desc *d;
	struct layout_match mm;
	struct idx_step s;
	int rc = steps_on_mkdir(fs, newparent, newname, ino);

	if (rc < 0 || !fs->steps.made_id)
		return rc;
	if ((rc = idx_step_get(fs->ix, fs->steps.made_id, &s)) < 0)
		return rc;
	d = layout_desc(s.kind);
	if (!whole_marker_inside(fs, d, ino) ||
	    snprintf(rel, sizeof(rel), "%s/%s", newname, d->marker) >= (int)sizeof(rel) ||
	    layout_classify(rel, (enum layout_kind)s.kind, &mm) < 0 || !policy_marker_seals(&mm))
		return 0;
	if ((rc = steps_set_state(fs, &s, IDX_STEP_SEALED, "marker, renamed into place")) < 0)
		return rc;
	fs->steps.made_id = 0;
	fs->steps.renamed_id = s.id;
	return 0;
}

int steps_on_rename(struct ckfs *fs, uint64_t parent, const char *name, uint64_t ino,
		    uint64_t newparent, const char *newname)
{
	struct layout_match was, now;
	struct idx_step s;
	int rc;

	fs->steps.renamed_id = 0;
	fs->steps.made_id = 0;
	if (fs->steps.opt.layout < 0)
		return 0;
	if (idx_step_by_dir(fs->ix, ino, &s) < 0)
		return rename_in(fs, ino, newparent, newname);
	if (!steps_is_slot(&s) && !layout_desc(s.kind)->per_rank && !layout_desc(s.kind)->top_files &&
	    (s.state == IDX_STEP_COMPLETE || s.state == IDX_STEP_COPIED ||
	     s.state == IDX_STEP_PRUNED))
		return rename_by_hand(fs, &s, parent, name, newparent, newname);
	if (parent != IDX_ROOT_INO || newparent != IDX_ROOT_INO ||
	    layout_classify(s.name, fs->steps.opt.layout, &was) < 0 || !(was.flags & LAYOUT_F_TMP) ||
	    layout_classify(newname, (enum layout_kind)s.kind, &now) < 0 ||
	    (now.flags & LAYOUT_F_TMP) || now.role != ROLE_STEP_DIR || (int)now.kind != s.kind ||
	    now.step != s.step)
		return 0;
	if ((rc = idx_step_set_name(fs->ix, s.id, newname)) < 0)
		return rc;
	/* The rename is the commit of a step under its in-progress name: Orbax on a local
	 * filesystem, with no commit file (orbax atomicity.py AtomicRenameTemporaryPath.finalize;
	 * tests/traces/orbax.md); transformers 4.36's Trainer, whose marker is already inside
	 * (the marker of a tmp directory seals nothing: steps_on_commit) */
	const struct layout_desc *d = layout_desc(s.kind);

	if ((d->seal_by_rename || whole_marker_inside(fs, d, ino)) &&
	    (s.state == IDX_STEP_WRITING || s.state == IDX_STEP_COPIED)) {
		snprintf(s.name, sizeof(s.name), "%s", newname);
		if ((rc = steps_set_state(fs, &s, IDX_STEP_SEALED, "renamed from its tmp name")) < 0)
			return rc;
		fs->steps.renamed_id = s.id;
	}
	return 0;
}

int steps_on_mkdir(struct ckfs *fs, uint64_t parent, const char *name, uint64_t ino)
{
	struct layout_match m;
	int64_t id;
	int rc;

	fs->steps.made_id = 0;
	if (fs->steps.opt.layout < 0 || parent != IDX_ROOT_INO ||
	    policy_entry_of(name, S_IFDIR, fs->steps.opt.layout, &m) != POLICY_STEP_DIR ||
	    m.step_prefix_len == 0)
		return 0;
	/* as steps_step_of_path makes it: a slot's number is its newest sealed version's */
	rc = idx_step_create(fs->ix, m.kind, name, (m.flags & LAYOUT_F_SLOT) ? 0 : m.step, ino,
			     ckfs_now(fs), &id);
	if (rc == 0)
		fs->steps.made_id = id;
	return rc;
}

void steps_on_name(struct ckfs *fs, uint64_t parent, const char *name, uint64_t ino, pid_t pid,
		   bool renamed)
{
	char rel[LAYOUT_PATH_MAX];
	struct layout_match m;
	struct idx_step s;

	/* a row steps_on_mkdir made is this mkdir's; any other call finds none to judge */
	int64_t made = fs->steps.made_id, sealed = fs->steps.renamed_id;

	fs->steps.made_id = fs->steps.renamed_id = 0;
	if (fs->steps.opt.layout < 0)
		return;
	if (parent == IDX_ROOT_INO) {
		enum policy_entry pe = policy_entry_of(name, S_IFDIR, fs->steps.opt.layout, &m);

		steps_top_on_name(fs, ino, name, renamed);

		if (pe != POLICY_STEP_DIR && pe != POLICY_CANDIDATE)
			return;
		if (renamed && sealed && idx_step_by_dir(fs->ix, ino, &s) == 0 && s.id == sealed) {
			steps_rt_note(fs, s.id, pid);
			steps_seal(fs, &s, "renamed from its tmp name");
			return;
		}
		/* a candidate is looked up only: its marker makes it a step (policy rule 1) */
		if (steps_step_of_path(fs, name, &m, &s) == 0) {
			if (made == s.id)
				steps_judge_older_sealed(fs, &m);
			steps_note_writer(fs, &s, pid);
		}
		return;
	}
	if (steps_rel_path(fs, ino, rel, sizeof(rel)) < 0 ||
	    layout_classify(rel, fs->steps.opt.layout, &m) < 0)
		return;
	if ((m.flags & LAYOUT_F_SLOT) && m.role == ROLE_STEP_DIR) {
		if (steps_step_of_path(fs, rel, &m, &s) == 0)
			steps_rt_note(fs, s.id, pid);
		return;
	}
	if (layout_desc(m.kind)->per_rank && m.role == ROLE_STEP_FILE) {
		if (renamed && !(m.flags & LAYOUT_F_TMP))
			steps_mf1_on_file(fs, &m, pid);
		return;
	}
	if ((m.role != ROLE_STEP_FILE && m.role != ROLE_MARKER) || m.step_prefix_len == 0 ||
	    steps_step_of_path(fs, rel, &m, &s) < 0)
		return;
	steps_note_writer(fs, &s, pid);
	/* a marker renamed into place (DCP .metadata.tmp -> .metadata) seals its step; one in a
	 * directory under its in-progress name does not (steps_on_rename) */
	if (renamed && policy_marker_seals(&m))
		steps_seal(fs, &s, "marker");
}

struct vread {
	struct ckfs *fs;
	struct oinode *oi;
};

static ssize_t vread_fn(void *arg, void *buf, size_t len, uint64_t off)
{
	struct vread *v = arg;

	return oi_read(v->fs, v->oi, buf, len, off);
}

void steps_reopen_complete(struct ckfs *fs, uint64_t ino, pid_t pid)
{
	char rel[LAYOUT_PATH_MAX], dname[LAYOUT_PATH_MAX], note[160], qname[300];
	struct layout_match m;
	struct idx_step s;
	struct idx_inode a;
	uint64_t dir;
	int64_t id;

	if (fs->steps.opt.layout < 0 || steps_rel_path(fs, ino, rel, sizeof(rel)) < 0 ||
	    layout_classify(rel, fs->steps.opt.layout, &m) < 0 ||
	    (m.role != ROLE_STEP_FILE && m.role != ROLE_MARKER) || layout_desc(m.kind)->per_rank ||
	    (m.flags & LAYOUT_F_SLOT) || m.step_prefix_len == 0 || m.step_prefix_len >= sizeof(dname))
		return;
	memcpy(dname, rel, m.step_prefix_len);
	dname[m.step_prefix_len] = 0;
	if (steps_lookup_path(fs, dname, &dir) < 0 || idx_step_by_dir(fs->ix, dir, &s) < 0 ||
	    s.state != IDX_STEP_COMPLETE || steps_is_slot(&s) ||
	    idx_inode_get(fs->ix, dir, &a) < 0 || idx_begin(fs->ix) < 0)
		return;
	/* keep the complete version (same chunks); a new version owns the directory */
	int rc = steps_keep_copy(fs, &s, &a, qname, sizeof(qname));

	if (rc == 0)
		rc = idx_step_create(fs->ix, s.kind, s.name, s.step, dir, ckfs_now(fs), &id);
	if (rc == 0 && idx_commit(fs->ix) == 0) {
		ckpt_log("step '%s' is changed in place (pid %d): its complete version is kept as "
			 "'.ckptfs/%s/%s' and comes back if the new one is not completed", s.name,
			 (int)pid, RETAINED_NAME, qname);
		return;
	}
	idx_rollback(fs->ix);
	/* no copy: at least no tracker names the step while it changes */
	if (idx_step_by_dir(fs->ix, dir, &s) < 0 || s.state != IDX_STEP_COMPLETE ||
	    idx_begin(fs->ix) < 0)
		return;
	snprintf(note, sizeof(note), "a file rewritten in place (pid %d), its version not kept: "
		 "%s", (int)pid, strerror(-rc));
	if (steps_set_state(fs, &s, IDX_STEP_WRITING, note) < 0 || idx_commit(fs->ix) < 0)
		idx_rollback(fs->ix);
}

bool steps_commit_at_close(struct ckfs *fs, uint64_t ino)
{
	char rel[LAYOUT_PATH_MAX], dname[LAYOUT_PATH_MAX];
	struct layout_match m;
	struct idx_step s;
	uint64_t dir;
	bool r = false;

	if (fs->steps.opt.layout < 0)
		return false;
	fs_lock(fs);
	if (steps_rel_path(fs, ino, rel, sizeof(rel)) == 0 &&
	    layout_classify(rel, fs->steps.opt.layout, &m) == 0) {
		if (m.role == ROLE_MARKER || steps_top_file(fs, rel, &m)) {
			/* a root step file or copy tracker: judged at its close (steps_top.c) */
			r = true;
		} else if (m.role == ROLE_STEP_FILE && m.step_prefix_len > 0 &&
			   m.step_prefix_len < sizeof(dname)) {
			/* read only: no step row is created here (steps_step_of_path does that) */
			memcpy(dname, rel, m.step_prefix_len);
			dname[m.step_prefix_len] = 0;
			r = steps_lookup_path(fs, dname, &dir) == 0 &&
			    idx_step_by_dir(fs->ix, dir, &s) == 0 && s.state == IDX_STEP_SEALED;
		}
	}
	fs_unlock(fs);
	return r;
}

void steps_on_commit(struct ckfs *fs, struct oinode *oi, pid_t pid, bool torn)
{
	char rel[LAYOUT_PATH_MAX], why[256] = "";
	struct layout_match m;
	struct idx_step s;
	struct idx_inode a;
	uint32_t flags = 0;
	int rc;

	/* fs->mu NOT held on entry */
	if (fs->steps.opt.layout < 0)
		return;
	fs_lock(fs);
	rc = steps_rel_path(fs, oi->ino, rel, sizeof(rel));
	if (rc == 0)
		rc = layout_classify(rel, fs->steps.opt.layout, &m);
	bool mf1 = rc == 0 && layout_desc(m.kind)->per_rank && m.role == ROLE_STEP_FILE;
	bool top = rc == 0 && steps_top_file(fs, rel, &m);
	bool in_step = rc == 0 && (((m.role == ROLE_STEP_FILE || m.role == ROLE_MARKER) &&
				    (m.step_prefix_len > 0 || mf1)) || top);
	uint64_t size = 0;

	if (in_step && idx_inode_get(fs->ix, oi->ino, &a) == 0)
		size = a.size;
	else
		in_step = false;
	fs_unlock(fs);
	if (!in_step)
		return;

	/* structure check without fs->mu (it reads the file) */
	if (torn) {
		flags |= IDX_INODE_TORN;
	} else {
		struct vread v = { fs, oi };
		const char *base = strrchr(rel, '/');

		rc = validate_file(base ? base + 1 : rel, size, vread_fn, &v, NULL, why,
				   sizeof(why));
		if (rc == 1)
			flags |= IDX_INODE_VALID;
		else if (rc == -EBADMSG)
			flags |= IDX_INODE_MALFORMED;
	}

	/* one read transaction for the section's reads (fs_lock): the inode, the step's path and
	 * row, read for every file committed */
	fs_lock(fs);
	/* the flags are kept even in a directory not yet a step: its marker may come (rule 1) */
	if (idx_inode_get(fs->ix, oi->ino, &a) == 0 && a.flags != flags) {
		a.flags = flags;
		if (idx_begin(fs->ix) == 0)
			steps_record(fs, idx_inode_update(fs->ix, &a), "the check of '%s'", rel);
	}
	if (top) {
		steps_top_on_commit(fs, rel, &m, oi->ino, flags, pid);
		fs_unlock(fs);
		return;
	}
	bool stepped = !mf1 && steps_step_of_path(fs, rel, &m, &s) == 0;

	/* in a directory no marker made a step, a shell's close at exit is no news */
	if ((mf1 || stepped) && (flags & IDX_INODE_TORN))
		ckpt_log("'%s' was closed by a dying process (pid %d): torn", rel, (int)pid);
	else if ((mf1 || stepped) && (flags & IDX_INODE_MALFORMED))
		ckpt_log("'%s' is malformed: %s", rel, why);
	if (mf1 && !(m.flags & LAYOUT_F_TMP)) {
		steps_mf1_on_file(fs, &m, pid);
	} else if (stepped) {
		steps_note_writer(fs, &s, pid);
		/* a tmp directory's marker seals nothing: its rename does (steps_on_rename) */
		if (policy_marker_seals(&m) && !(flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED))) {
			if (m.flags & LAYOUT_F_SLOT)
				steps_slot_number(fs, &s, strrchr(rel, '/') + 1);
			steps_seal(fs, &s, "marker");
		}
		else if (s.state == IDX_STEP_SEALED &&
			 (policy_marker_after_all_ranks(s.kind) || policy_names_repeat(s.kind)))
			/* a file closed before the marker and committed after it (commit.c), or
			 * the last rank's file after DeepSpeed's `latest`: the step may be complete
			 * now, without waiting for the reaper */
			steps_evaluate(fs, s.id, false, false, false);
		struct step_rt *r;

		if ((flags & IDX_INODE_TORN) && (r = rt_get(fs, s.id, false))) {
			/* a killed job: judge the step as soon as its writers are gone, without the
			 * settle time, so that a resumer scanning for the newest directory (Hugging
			 * Face, torchtitan) restarted at once does not find it */
			r->torn = true;
			pthread_cond_signal(&fs->steps.reaper_cv);
		}
	}
	fs_unlock(fs);
}

void steps_before_remove(struct ckfs *fs, uint64_t parent, const char *name, pid_t pid)
{
	char rel[LAYOUT_PATH_MAX], top[LAYOUT_NAME_MAX + 1], qname[300];
	struct idx_step s, newest;
	struct idx_inode a;
	uint64_t dir;
	const char *slash;
	int rank;

	if (fs->steps.opt.layout < 0)
		return;
	if (parent != IDX_ROOT_INO && (rank = steps_rank_dir(fs, parent)) >= 0) {
		steps_mf1_before_remove(fs, rank, name);
		return;
	}
	if (parent == IDX_ROOT_INO)
		steps_top_before_remove(fs, name, pid);
	if (parent == IDX_ROOT_INO) {
		snprintf(top, sizeof(top), "%s", name);
	} else {
		if (steps_rel_path(fs, parent, rel, sizeof(rel)) < 0)
			return;
		slash = strchr(rel, '/');
		snprintf(top, sizeof(top), "%.*s", slash ? (int)(slash - rel) : (int)strlen(rel),
			 rel);
	}
	if (idx_dentry_lookup(fs->ix, IDX_ROOT_INO, top, &dir) < 0 ||
	    idx_step_by_dir(fs->ix, dir, &s) < 0 || s.state != IDX_STEP_COMPLETE ||
	    idx_step_newest(fs->ix, 1u << s.kind, IDX_STEP_COMPLETE, &newest) < 0 ||
	    newest.id != s.id || idx_inode_get(fs->ix, dir, &a) < 0)
		return;
	/* keep a copy (same chunks) until a newer step is complete */
	if (idx_begin(fs->ix) < 0)
		return;
	int rc = steps_keep_copy(fs, &s, &a, qname, sizeof(qname));

	if (rc == 0)
		rc = idx_commit(fs->ix);
	else
		idx_rollback(fs->ix);
	if (rc == 0)
		ckpt_log("the trainer deletes '%s', the newest complete step: kept as "
			 "'.ckptfs/%s/%s' until a newer step is complete", s.name, RETAINED_NAME, qname);
}

bool steps_commit_rename(const struct ckfs *fs, const char *name)
{
	struct layout_match m;

	return fs->steps.opt.layout >= 0 && layout_classify(name, fs->steps.opt.layout, &m) == 0 &&
	       layout_desc(m.kind)->seal_by_rename && m.role == ROLE_STEP_DIR &&
	       (m.flags & LAYOUT_F_TMP);
}

bool steps_dir_name(struct ckfs *fs, uint64_t parent, const char *name)
{
	enum layout_kind k;
	int64_t step;

	if (fs->steps.opt.layout < 0)
		return false;
	if (parent == IDX_ROOT_INO)
		return layout_parse_name(name, fs->steps.opt.layout, &k, &step) == 1 ||
		       (layout_slot_dir(fs->steps.opt.layout) &&
			strcmp(name, layout_slot_dir(fs->steps.opt.layout)) == 0);
	return steps_slot_home(fs, parent);
}

/* ---- reaper, recovery ---- */

struct open_step {
	int64_t step, id;
};

struct scan_ctx {
	struct open_step *v;
	size_t n, cap;
};

/* idx_step_newest_each callback: collect an unfinished step */
static int scan_open_steps(const struct idx_step *s, void *arg)
{
	struct scan_ctx *c = arg;

	if (ckpt_grow(&c->v, &c->cap, c->n, sizeof(*c->v)) < 0)
		return -ENOMEM;
	c->v[c->n].step = s->step;
	c->v[c->n++].id = s->id;
	return 0;
}

static int open_step_cmp(const void *a, const void *b)
{
	const struct open_step *x = a, *y = b;

	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/*
 * One pass: judge every unfinished step whose writers are gone, oldest first (a step is judged
 * against the complete one before it). recovering: all are gone. Reads only the writing and
 * sealed steps (the steps_state_step index): a pass costs the saves in flight, not the store.
 */
void steps_reap(struct ckfs *fs, bool recovering)
{
	struct scan_ctx c = { 0 };
	int64_t now = ckpt_now_ns();

	if (idx_step_newest_each(fs->ix, 0, IDX_STEP_WRITING, scan_open_steps, &c) < 0 ||
	    idx_step_newest_each(fs->ix, 0, IDX_STEP_SEALED, scan_open_steps, &c) < 0)
		goto out;
	if (c.n > 1)
		qsort(c.v, c.n, sizeof(*c.v), open_step_cmp);
	for (size_t i = 0; i < c.n; i++) {
		struct step_rt *r = rt_get(fs, c.v[i].id, false);
		bool settled = true;

		if (!recovering) {
			if (!r) {
				/* first seen by this daemon: start its settle time now */
				if ((r = rt_get(fs, c.v[i].id, true)))
					r->last_ns = now;
				continue;
			}
			if (now - r->last_ns < STEP_SETTLE_NS && !r->torn)
				continue;
			for (unsigned j = 0; j < r->npids; j++)
				if (ckpt_pid_alive(r->pids[j], r->starts[j]))
					settled = false;
		}
		steps_evaluate(fs, c.v[i].id, settled, recovering, true);
	}
out:
	free(c.v);
}

/* Unfinished steps whose recorded writers are all gone, into ids (at most cap). */
static size_t orphaned_steps(struct ckfs *fs, int64_t *ids, size_t cap)
{
	size_t n = 0;

	for (struct step_rt *r = fs->steps.rt; r && n < cap; r = r->next) {
		bool alive = false;

		for (unsigned j = 0; j < r->npids && !alive; j++)
			alive = ckpt_pid_alive(r->pids[j], r->starts[j]);
		if (r->npids > 0 && !alive && !r->empty_grace)
			ids[n++] = r->id;
	}
	return n;
}

bool steps_settle_due(struct ckfs *fs)
{
	int64_t id;

	return fs->steps.opt.layout >= 0 &&
	       ((fs->steps.rt && orphaned_steps(fs, &id, 1) > 0) || steps_top_link_due(fs));
}

void steps_settle_now(struct ckfs *fs)
{
	int64_t ids[64];
	size_t n;

	if (fs->steps.opt.layout < 0)
		return;
	steps_top_link_settle(fs);
	if (!fs->steps.rt)
		return;
	n = orphaned_steps(fs, ids, sizeof(ids) / sizeof(ids[0]));
	/* what leaves the namespace, the reaper tells the kernel (steps_inval_queue) */
	for (size_t i = 0; i < n; i++)
		steps_evaluate(fs, ids[i], true, false, true);
}

static void *reaper_main(void *arg)
{
	struct ckfs *fs = arg;

	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	while (!fs->steps.stopping) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += REAP_PERIOD_NS;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		ckpt_cond_wait(&fs->steps.reaper_cv, &fs->mu, CKPT_RANK_FS, &ts);
		if (fs->steps.stopping)
			break;
		steps_reap(fs, false);
		if (fs->steps.inval.n) {
			ckpt_unlock(&fs->mu, CKPT_RANK_FS);
			if (fs->up.flush_inval)
				fs->up.flush_inval(fs);
			ckpt_lock(&fs->mu, CKPT_RANK_FS);
		}
	}
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	return NULL;
}

static int ensure_dir(struct ckfs *fs, uint64_t parent, const char *name, uint32_t mode,
		      uint64_t *ret)
{
	struct idx_inode a = { 0 }, pa;
	uint64_t ino;
	int rc;

	if (idx_dentry_lookup(fs->ix, parent, name, ret) == 0)
		return 0;
	if ((rc = idx_inode_get(fs->ix, parent, &pa)) < 0)
		return rc;
	a.mode = S_IFDIR | mode;
	a.uid = pa.uid;
	a.gid = pa.gid;
	a.nlink = 2;
	a.atime_ns = a.mtime_ns = a.ctime_ns = ckfs_now(fs);
	if ((rc = idx_begin(fs->ix)) < 0)
		return rc;
	rc = idx_inode_create(fs->ix, &a, &ino);
	if (rc == 0)
		rc = idx_dentry_add(fs->ix, parent, name, ino);
	if (rc == 0) {
		pa.nlink++;
		rc = idx_inode_update(fs->ix, &pa);
	}
	if (rc == 0)
		rc = idx_commit(fs->ix);
	else
		idx_rollback(fs->ix);
	if (rc == 0)
		*ret = ino;
	return rc;
}

/* One chunk of a step's files and the first file found holding it (verify_tree). */
struct vchunk {
	struct store_hash h;
	uint64_t ino;
	size_t pos; /* its place in the files' order: collect_tree's */
};

struct vchunks {
	struct vchunk *v;
	size_t n, cap;
};

/* Append every chunk of this node's regular files under dir to c. Returns 0 or -errno. */
static int collect_tree(struct ckfs *fs, uint64_t dir, int depth, struct vchunks *c)
{
	struct steps_entries e = { 0 };
	int rc;

	rc = steps_dir_entries(fs, dir, depth, &e);
	for (size_t i = 0; rc >= 0 && i < e.n; i++) {
		if (S_ISDIR(e.modes[i])) {
			rc = collect_tree(fs, e.inos[i], depth + 1, c);
			continue;
		}
		struct idx_inode a;

		/* another node's file (fs/node) is checked when its chunks are fetched: the mount
		 * does not download the whole job, nor fail while the remote is away */
		if (!S_ISREG(e.modes[i]) || (idx_inode_get(fs->ix, e.inos[i], &a) == 0 &&
					     (a.flags & IDX_INODE_FOREIGN)))
			continue;
		struct idx_extent *ext = NULL;
		size_t n = 0;

		if ((rc = idx_file_extents(fs->ix, e.inos[i], &ext, &n)) < 0)
			break;
		for (size_t j = 0; j < n; j++) {
			if ((rc = ckpt_grow(&c->v, &c->cap, c->n, sizeof(*c->v))) < 0)
				break;
			memcpy(c->v[c->n].h.b, ext[j].hash, STORE_HASH_LEN);
			c->v[c->n].pos = c->n;
			c->v[c->n++].ino = e.inos[i];
		}
		free(ext);
	}
	steps_dir_entries_free(&e);
	return rc < 0 ? rc : 0;
}

/* By digest, then by place: the first of equal digests is the one met first in the files. */
static int vchunk_cmp(const void *a, const void *b)
{
	const struct vchunk *x = a, *y = b;
	int c = memcmp(x->h.b, y->h.b, STORE_HASH_LEN);

	return c ? c : x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int vchunk_pos_cmp(const void *a, const void *b)
{
	const struct vchunk *x = a, *y = b;

	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/*
 * What the mount's check leaves in the page cache for the trainer's read, bytes: a quarter of
 * the machine's memory. The check goes in the files' order, so once what it leaves exceeds what
 * the page cache keeps, the kernel drops the oldest, the chunks the reader needs first; past
 * this, the check reads with O_DIRECT and leaves the page cache to the trainer (its data set,
 * its libraries), the reader then loading those chunks from the disk again.
 */
static size_t check_page_bytes(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

	return pages > 0 && psz > 0 ? (size_t)pages / 4 * (size_t)psz : 0;
}

/*
 * Re-read and re-hash every chunk of the files under dir, each once, several at a time
 * (store_chunks_verify's default threads); mark the bad ones in the index. The chunks go in the
 * files' order and stay for the trainer's read that follows (store_chunks_verify's keep): in
 * half the chunk cache, the other half being the read-ahead's (fs/write/ra.c keeps what it
 * queues within half the cache), so that the read-ahead past the kept chunks does not evict
 * them before the reader gets there; past that, in the page cache (check_page_bytes). Returns
 * the number of bad chunks found (>= 0) or -errno.
 */
static int verify_tree(struct ckfs *fs, uint64_t dir)
{
	struct vchunks c = { 0 };
	struct store_hash *hs = NULL;
	int *res = NULL, rc, bad = 0;
	size_t n = 0;

	if ((rc = collect_tree(fs, dir, 0, &c)) < 0)
		goto out;
	qsort(c.v, c.n, sizeof(*c.v), vchunk_cmp);
	for (size_t i = 0; i < c.n; i++) /* each digest once, with the first inode holding it */
		if (n == 0 || memcmp(c.v[n - 1].h.b, c.v[i].h.b, STORE_HASH_LEN) != 0)
			c.v[n++] = c.v[i];
	qsort(c.v, n, sizeof(*c.v), vchunk_pos_cmp); /* back in the order a trainer reads */
	hs = malloc((n ? n : 1) * sizeof(*hs));
	res = malloc((n ? n : 1) * sizeof(*res));
	if (!hs || !res) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		hs[i] = c.v[i].h;
	struct store_keep keep = { .cache_bytes = store_cache_bytes(fs->st) / 2,
				   .page_bytes = check_page_bytes() };

	store_chunks_verify(fs->st, hs, n, 0, &keep, res);
	for (size_t i = 0; i < n; i++) {
		if (res[i] == 0 || res[i] == -EAGAIN) /* -EAGAIN: on a remote that did not answer */
			continue;
		bad++;
		if (idx_begin(fs->ix) == 0)
			steps_record(fs, idx_chunk_mark_bad(fs->ix, hs[i].b),
				     "a bad chunk of inode %" PRIu64, c.v[i].ino);
	}
out:
	free(c.v);
	free(hs);
	free(res);
	return rc < 0 ? rc : bad;
}

/*
 * At mount: the newest complete step of each layout is what a resume will read first, so
 * re-hash its chunks now; a damaged one becomes corrupt and leaves the namespace, and the next
 * newest is checked in turn. Costs one read of one step per layout in use, several chunks at a
 * time (verify_tree), with fs->mu held throughout: nothing reads the namespace until it ends
 * (start_checker). That read is also the trainer's: what it verified stays in the chunk cache
 * and the page cache for the resume's first read (verify_tree), which then does not go to the
 * disk again.
 */
static void verify_newest(struct ckfs *fs)
{
	for (int k = 1; k < LAYOUT_KIND_COUNT; k++) {
		struct idx_step s;

		for (int tries = 0; tries < 64; tries++) {
			if (idx_step_newest(fs->ix, 1u << k, IDX_STEP_COMPLETE, &s) < 0 ||
			    !s.dir_ino)
				break;
			/* a big step takes minutes: say why a reader of the mount waits */
			ckpt_log("checking step '%s' (%" PRIu64 " files, %.1f MiB stored), the newest "
				 "complete one; reads of the mount wait until the check ends",
				 s.name, s.files, (double)s.stored_bytes / (1 << 20));
			int64_t t0 = ckpt_mono_ns();
			int bad = verify_tree(fs, s.dir_ino);

			ckpt_log("checked step '%s' in %.2f s: %s%s", s.name,
				 (double)(ckpt_mono_ns() - t0) / 1e9,
				 bad == 0 ? "intact" : bad > 0 ? "damaged, quarantined" :
				 "not checked: ", bad < 0 ? strerror(-bad) : "");
			if (bad <= 0)
				break;
			char note[96];

			snprintf(note, sizeof(note), "%d chunks failed their checksum at mount", bad);
			if (idx_begin(fs->ix) < 0)
				break;
			if (steps_set_state(fs, &s, IDX_STEP_CORRUPT, note) < 0 ||
			    steps_move_to_quarantine(fs, &s) < 0 || idx_commit(fs->ix) < 0) {
				idx_rollback(fs->ix);
				break;
			}
		}
	}
}

/* idx_claim_foreach callback: per-rank trackers' claims (MF1 rank_N/meta.json) recorded by
 * earlier mounts. */
static int mf1_reload_claim(int64_t id, const char *tracker, const void *content, size_t len,
			    int64_t step, int64_t ts_ns, void *arg)
{
	struct ckfs *fs = arg;
	struct layout_tracker t;
	struct layout_match m;

	if (layout_classify(tracker, LAYOUT_NONE, &m) == 0 && m.role == ROLE_TRACKER &&
	    layout_desc(m.kind)->tracker == LAYOUT_TRACKER_PER_RANK && m.rank >= 0 && content &&
	    layout_tracker_parse(m.kind, NULL, content, len, &t) == 0)
		steps_mf1_note_claim(fs, m.rank, t.epoch, t.step, ts_ns);
	return 0;
}

/* Stored bytes of the newest complete step of each layout: what verify_newest reads first.
 * fs->mu held. */
static uint64_t newest_stored(struct ckfs *fs)
{
	uint64_t sum = 0;

	for (int k = 1; k < LAYOUT_KIND_COUNT; k++) {
		struct idx_step s;

		if (idx_step_newest(fs->ix, 1u << k, IDX_STEP_COMPLETE, &s) == 0 && s.dir_ino)
			sum += s.stored_bytes;
	}
	return sum;
}

struct checker_start {
	struct ckfs *fs;
	sem_t held; /* posted once the checker holds fs->mu */
};

static void *checker_main(void *arg)
{
	struct checker_start *cs = arg;
	struct ckfs *fs = cs->fs;

	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	/* ckptctl waits on it as the mount's readers wait on fs->mu */
	int lockfd = ckpt_repo_check_lock(fs->repo);

	if (lockfd < 0)
		ckpt_log("cannot lock '%s/check': %s; a ckptctl run during the check of the "
			 "newest step may show it as before the check", fs->repo->root,
			 strerror(-lockfd));
	sem_post(&cs->held); /* cs lives on the starter's stack: not touched after this */
	/* the `ckptfs` command waits for a short check only (daemon.c report_notes) */
	steps_report_checking(fs, newest_stored(fs));
	ckpt_fault("mount-check");
	verify_newest(fs);
	steps_report_finish(fs); /* before STORE/check is let go: ckptctl status reads it next */
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	ckpt_repo_check_unlock(lockfd);
	return NULL;
}

/*
 * Run verify_newest on a thread of its own that holds fs->mu from before this returns until
 * the check ends: the mount comes up at once, and every request that reads the namespace or the
 * index waits on fs->mu until the damaged steps have left it, as when the check ran before the
 * mount. A trainer's start (interpreter, imports, process group: seconds, minutes on a big job)
 * overlaps the check instead of following it. It also holds STORE/check (ckpt_repo_check_lock),
 * which ckptctl waits on. If no thread can be started, checks here.
 */
static void start_checker(struct ckfs *fs)
{
	struct checker_start cs = { .fs = fs };

	if (sem_init(&cs.held, 0, 0) == 0) {
		if (pthread_create(&fs->steps.checker, NULL, checker_main, &cs) == 0) {
			while (sem_wait(&cs.held) < 0 && errno == EINTR)
				;
			fs->steps.checker_started = true;
		}
		sem_destroy(&cs.held);
	}
	if (!fs->steps.checker_started) {
		ckpt_lock(&fs->mu, CKPT_RANK_FS);
		verify_newest(fs);
		steps_report_finish(fs);
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	}
}

int steps_init(struct ckfs *fs)
{
	bool check_later = false;
	int rc;

	pthread_cond_init(&fs->steps.reaper_cv, NULL);
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	rc = ensure_dir(fs, IDX_ROOT_INO, META_NAME, 0555, &fs->steps.meta_ino);
	if (rc == 0)
		rc = ensure_dir(fs, fs->steps.meta_ino, QUARANTINE_NAME, 0555,
				&fs->steps.quarantine_ino);
	if (rc == 0)
		rc = ensure_dir(fs, fs->steps.meta_ino, RETAINED_NAME, 0555,
				&fs->steps.retained_ino);
	if (rc == 0 && fs->steps.opt.layout >= 0) {
		idx_claim_foreach(fs->ix, mf1_reload_claim, fs);
		idx_step_foreach(fs->ix, steps_mf1_judge_cb, fs);
		fs->steps.crash_recovery = !fs->repo->was_clean;
		steps_reap(fs, true); /* what an earlier daemon left unfinished */
		steps_top_recover(fs); /* and root files it left half rewritten */
		fs->steps.crash_recovery = false;
		/* a daemon killed inside retention left more complete steps than it keeps */
		for (int k = 0; k < LAYOUT_KIND_COUNT; k++)
			steps_retention(fs, k);
		steps_report_recovered(fs);
		if (fs->node)
			verify_newest(fs); /* node_prime, next in the start, follows the check */
		else
			check_later = true;
	} else if (rc == 0) {
		steps_report_recovered(fs); /* the sweep alone: no steps without a layout */
	}
	if (!check_later)
		steps_report_finish(fs);
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	if (check_later)
		start_checker(fs);
	return rc;
}

void steps_checker_join(struct ckfs *fs)
{
	if (fs->steps.checker_started)
		pthread_join(fs->steps.checker, NULL);
	fs->steps.checker_started = false;
}

int steps_start(struct ckfs *fs)
{
	int rc = ckpt_workers_start(&fs->steps.reaper, 1, reaper_main, fs);

	return rc < 0 ? rc : 0;
}

void steps_stop(struct ckfs *fs)
{
	steps_checker_join(fs);
	if (fs->steps.reaper.n == 0)
		return;
	ckpt_workers_stop(&fs->steps.reaper, &fs->mu, &fs->steps.reaper_cv, &fs->steps.stopping);
	while (fs->steps.rt)
		steps_rt_drop(fs, fs->steps.rt->id);
	free(fs->steps.mf1_claim);
	fs->steps.mf1_claim = NULL;
	fs->steps.mf1_nranks = 0;
	free(fs->steps.inval.v);
	fs->steps.inval.v = NULL;
	fs->steps.inval.n = fs->steps.inval.cap = 0;
}
