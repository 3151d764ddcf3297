/*
 * steps_mf1.c — the per-rank layout (layout_desc(kind)->per_rank, layout_per_rank_kind():
 * MindFormers 1.0): one file per rank per step under rank_N/, judged across ranks, with
 * per-rank meta.json trackers. The rest of fs/ calls it only through that trait.
 *
 * Locking: every function here runs with fs->mu held unless its comment says otherwise.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "fs/steps/steps.h"
#include "fs/policy/layout.h"
#include "fs/steps/steps_int.h"
#include "fs/policy/validate.h"

/* ---- MindFormers 1.0: per-rank files, no step directory ---- */

/*
 * A MindFormers 1.0 step is (epoch, step): one file rank_R/{prefix}-{epoch}_{step}.ckpt per rank,
 * written as name.tmp and renamed (framework-io.md, MindSpore _exec_save). The step row is named
 * "{epoch}_{step}" and has no directory. It is complete when every rank of the world (-o ranks=N,
 * else the number of rank_N directories) has its file under the final name, committed, closed
 * and sound. rank_R/meta.json is virtual: it names the newest step complete on all ranks.
 *
 * Across nodes (-o remote, fs->up.global_ok set) each node judges its own ranks only (mf1_ranks):
 * MindFormers 1.0 has no barrier between the ranks' saves (callback.py CheckpointMonitor.
 * _save_ckpt: each rank saves and writes its own meta.json), so nothing on one node speaks for
 * another node's ranks. The node layer publishes each node's files of the step (manifest.c),
 * shows the other nodes' files under their rank_N/ once the step is global, and then asks
 * steps_mf1_whole whether every rank of the world has its file; meta.json names only such steps.
 */

/* The per-rank layout whose steps this file runs. */
static enum layout_kind mf1_kind(void)
{
	return layout_per_rank_kind();
}

/* Rank rank's directory name (MF1 "rank_N") into buf of cap bytes; "" when it does not fit. */
static void rank_dir(int rank, char *buf, size_t cap)
{
	if (layout_rank_dir_name(mf1_kind(), rank, buf, cap) < 0 && cap)
		buf[0] = '\0';
}

/* The rank of directory dir if it is a top-level rank_N directory, else -1. */
int steps_rank_dir(struct ckfs *fs, uint64_t dir)
{
	char name[LAYOUT_NAME_MAX + 1];
	struct layout_match m;
	uint64_t parent;

	if (fs->steps.opt.layout < 0 || !layout_per_rank_under(fs->steps.opt.layout) ||
	    idx_dentry_parent(fs->ix, dir, &parent, name, sizeof(name)) < 0 ||
	    parent != IDX_ROOT_INO || layout_classify(name, LAYOUT_NONE, &m) < 0 ||
	    !layout_desc(m.kind)->per_rank || m.role != ROLE_PLAIN || m.rank < 0)
		return -1;
	return m.rank;
}

static int count_rank_dir(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct layout_match m;

	if (S_ISDIR(mode) && layout_classify(name, LAYOUT_NONE, &m) == 0 &&
	    layout_desc(m.kind)->per_rank && m.role == ROLE_PLAIN && m.rank >= 0)
		(*(int *)arg)++;
	return 0;
}

static int mf1_world(struct ckfs *fs)
{
	int n = 0;

	if (fs->steps.opt.ranks > 0)
		return fs->steps.opt.ranks;
	if (idx_dir_list(fs->ix, IDX_ROOT_INO, 0, count_rank_dir, &n) < 0)
		return 0;
	return n;
}

struct mf1_find {
	int rank;
	int64_t epoch, step;
	char name[LAYOUT_NAME_MAX + 1];
	uint64_t ino;
	bool found;
};

static int mf1_find_cb(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct mf1_find *f = arg;
	char rel[LAYOUT_NAME_MAX + 32];
	struct layout_match m;

	if (!S_ISREG(mode))
		return 0;
	rank_dir(f->rank, rel, sizeof(rel));
	snprintf(rel + strlen(rel), sizeof(rel) - strlen(rel), "/%s", name);
	if (layout_classify(rel, mf1_kind(), &m) < 0 || m.role != ROLE_STEP_FILE ||
	    (m.flags & LAYOUT_F_TMP) || m.epoch != f->epoch || m.step != f->step)
		return 0;
	snprintf(f->name, sizeof(f->name), "%s", name);
	f->ino = ino;
	f->found = true;
	return 1;
}

/* rank R's file of (epoch, step), if present. */
static bool mf1_file(struct ckfs *fs, int rank, int64_t epoch, int64_t step, struct mf1_find *f)
{
	char dname[32];
	uint64_t dir;

	memset(f, 0, sizeof(*f));
	f->rank = rank;
	f->epoch = epoch;
	f->step = step;
	rank_dir(rank, dname, sizeof(dname));
	if (idx_dentry_lookup(fs->ix, IDX_ROOT_INO, dname, &dir) < 0)
		return false;
	idx_dir_list(fs->ix, dir, 0, mf1_find_cb, f);
	return f->found;
}

/* Is rank's file of (epoch, step) present, committed, closed and sound? Adds its size and
 * stored bytes to *bytes and *stored. */
static bool mf1_rank_sound(struct ckfs *fs, int rank, int64_t epoch, int64_t step,
			   uint64_t *bytes, uint64_t *stored)
{
	struct mf1_find f;
	struct idx_inode a;
	struct oinode *oi;
	uint64_t st = 0;

	if (!mf1_file(fs, rank, epoch, step, &f) || idx_inode_get(fs->ix, f.ino, &a) < 0 ||
	    !a.has_hash || (a.flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED)))
		return false;
	if ((oi = oi_find(fs, f.ino)) && atomic_load(&oi->ov_dirty))
		return false;
	*bytes += a.size;
	if (idx_file_stored_bytes(fs->ix, f.ino, &st) == 0)
		*stored += st;
	return true;
}

/*
 * Are the files of (epoch, step) of the n ranks ranks[0, n) (ranks NULL: ranks 0 .. n-1)
 * present, committed, closed and sound? *ret_missing (may be NULL): the first rank that is not,
 * set on false.
 */
static bool mf1_sound_over(struct ckfs *fs, int64_t epoch, int64_t step, const int *ranks,
			   int n, uint64_t *ret_bytes, uint64_t *ret_stored, int *ret_missing)
{
	uint64_t bytes = 0, stored = 0;

	if (n <= 0) {
		if (ret_missing)
			*ret_missing = -1;
		return false;
	}
	for (int i = 0; i < n; i++) {
		int r = ranks ? ranks[i] : i;

		if (!mf1_rank_sound(fs, r, epoch, step, &bytes, &stored)) {
			if (ret_missing)
				*ret_missing = r;
			return false;
		}
	}
	if (ret_bytes)
		*ret_bytes = bytes;
	if (ret_stored)
		*ret_stored = stored;
	return true;
}

/* Are all ranks' files of (epoch, step) present, committed, closed and sound? */
static bool mf1_sound(struct ckfs *fs, int64_t epoch, int64_t step)
{
	return mf1_sound_over(fs, epoch, step, NULL, mf1_world(fs), NULL, NULL, NULL);
}

/*
 * Has the meta.json of each of the n ranks ranks[0, n) (NULL: 0 .. n-1) claimed (epoch, step),
 * the row made at created_ns? (The MF1 commit marker.) A rank's newest claim counts when it names
 * that step, or a later one and was made after the row: a rank that saved again before its claim
 * of this step was seen has moved on. A claim of a later step made before the row existed is an
 * earlier run's (a new run in the same directory saves 2 while every meta.json still names 10)
 * and says nothing of this step: counting it completed the new run's step before its own claim,
 * and retention, still seeing 10 as the lineage's head, pruned it (test_lineage
 * test_new_run_mf1, one run in eight).
 */
static bool mf1_claimed(struct ckfs *fs, int64_t epoch, int64_t step, int64_t created_ns,
			const int *ranks, int n)
{
	if (n <= 0)
		return false;
	for (int i = 0; i < n; i++) {
		int r = ranks ? ranks[i] : i;

		if (r < 0 || r >= fs->steps.mf1_nranks)
			return false;
		int64_t e = fs->steps.mf1_claim[r].epoch, st = fs->steps.mf1_claim[r].step;
		bool same = e == epoch && st == step;
		bool later = e > epoch || (e == epoch && st > step);

		if (!same && !(later && fs->steps.mf1_claim[r].ts_ns >= created_ns))
			return false;
	}
	return true;
}

/* idx_dir_list callback: stop at the first regular file written on this node. */
static int own_file_cb(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct ckfs *fs = *(struct ckfs **)arg;
	struct idx_inode a;

	(void)name;
	(void)cookie;
	if (!S_ISREG(mode) || idx_inode_get(fs->ix, ino, &a) < 0 || (a.flags & IDX_INODE_FOREIGN))
		return 0;
	*(struct ckfs **)arg = NULL; /* found */
	return 1;
}

struct rank_set {
	int *v;
	uint64_t *dirs; /* the rank_N directory of each */
	size_t n, cap, capdirs;
	int err;
};

/* idx_dir_list callback over the root: the rank_N directories. */
static int rank_dir_cb(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct rank_set *rs = arg;
	struct layout_match m;

	(void)cookie;
	if (!S_ISDIR(mode) || layout_classify(name, LAYOUT_NONE, &m) < 0 ||
	    !layout_desc(m.kind)->per_rank || m.role != ROLE_PLAIN || m.rank < 0)
		return 0;
	if (ckpt_grow(&rs->v, &rs->cap, rs->n, sizeof(*rs->v)) < 0 ||
	    ckpt_grow(&rs->dirs, &rs->capdirs, rs->n, sizeof(*rs->dirs)) < 0) {
		rs->err = -ENOMEM;
		return 1;
	}
	rs->v[rs->n] = m.rank;
	rs->dirs[rs->n++] = ino;
	return 0;
}

/*
 * The ranks this node judges its steps over, into *ret (malloc'd, the caller frees; NULL for
 * ranks 0 .. count-1). One node: the world (mf1_world), NULL. Across nodes (fs->up.global_ok):
 * the ranks whose meta.json was claimed here or whose rank_N directory holds a file written here
 * (not one shown from another node, IDX_INODE_FOREIGN). A rank of this node that has written
 * nothing yet at all (its first save) is not counted: as on one node without -o ranks, where it
 * has no rank_N directory yet; its file, once there, goes into this node's part (node.c
 * publishes again), and steps_mf1_whole judges the world. Returns the count (>= 0) or -ENOMEM.
 */
static int mf1_ranks(struct ckfs *fs, int **ret)
{
	struct rank_set rs = { 0 };
	size_t o = 0;

	*ret = NULL;
	if (!fs->up.global_ok)
		return mf1_world(fs);
	/* the rank directories first: a listing is not nested in another (one statement each) */
	if (idx_dir_list(fs->ix, IDX_ROOT_INO, 0, rank_dir_cb, &rs) < 0 || rs.err < 0) {
		free(rs.v);
		free(rs.dirs);
		return rs.err < 0 ? rs.err : 0;
	}
	for (size_t i = 0; i < rs.n; i++) {
		int r = rs.v[i];
		struct ckfs *probe = fs; /* own_file_cb clears it when it finds one */

		if ((r < fs->steps.mf1_nranks && fs->steps.mf1_claim[r].epoch >= 0) ||
		    (idx_dir_list(fs->ix, rs.dirs[i], 0, own_file_cb, &probe) == 0 && !probe))
			rs.v[o++] = r;
	}
	free(rs.dirs);
	*ret = rs.v;
	return (int)o;
}

/* Remember rank's newest meta.json claim, made at ts_ns (claims come in the order they were
 * made: as written, or from the index at mount). Returns 0 or -ENOMEM. */
int steps_mf1_note_claim(struct ckfs *fs, int rank, int64_t epoch, int64_t step, int64_t ts_ns)
{
	if (rank < 0 || rank >= (int)VINO_RANK_MAX)
		return 0;
	if (rank >= fs->steps.mf1_nranks) {
		int n = rank + 1;
		void *p = realloc(fs->steps.mf1_claim, (size_t)n * sizeof(*fs->steps.mf1_claim));

		if (!p)
			return -ENOMEM;
		fs->steps.mf1_claim = p;
		for (int i = fs->steps.mf1_nranks; i < n; i++)
			fs->steps.mf1_claim[i].epoch = fs->steps.mf1_claim[i].step =
			    fs->steps.mf1_claim[i].ts_ns = -1;
		fs->steps.mf1_nranks = n;
	}
	fs->steps.mf1_claim[rank].epoch = epoch;
	fs->steps.mf1_claim[rank].step = step;
	fs->steps.mf1_claim[rank].ts_ns = ts_ns;
	return 0;
}

/* (epoch, step) of MF1 step s from its name "EPOCH_STEP"; false when s is not one. */
bool steps_mf1_key(const struct idx_step *s, int64_t *epoch, int64_t *step)
{
	return policy_mf1_key(s, epoch, step);
}

/* Complete MF1 step s if every rank's file is whole and every rank's meta.json claimed it. */
static void mf1_judge(struct ckfs *fs, struct idx_step *sp)
{
	struct idx_step s = *sp;
	uint64_t files, bytes, stored;
	int64_t e, st;
	int *ranks = NULL, n;
	bool ok;

	if (s.state != IDX_STEP_WRITING && s.state != IDX_STEP_SEALED)
		return;
	if (!steps_mf1_key(&s, &e, &st) || (n = mf1_ranks(fs, &ranks)) <= 0)
		return;
	ok = mf1_claimed(fs, e, st, s.created_ns, ranks, n) &&
	     mf1_sound_over(fs, e, st, ranks, n, &bytes, &stored, NULL);
	free(ranks);
	if (!ok || idx_begin(fs->ix) < 0)
		return;
	char note[80];

	files = (uint64_t)n;
	snprintf(note, sizeof(note), "all %" PRIu64 " ranks%s written and claimed", files,
		 fs->up.global_ok ? " of this node" : "");
	if (idx_step_set_figures(fs->ix, s.id, files, bytes, stored, NULL) < 0 ||
	    steps_set_state(fs, &s, IDX_STEP_COMPLETE, note) < 0 || idx_commit(fs->ix) < 0) {
		idx_rollback(fs->ix);
		return;
	}
	steps_rt_drop(fs, s.id);
	/* -o keep_checkpoint_max: now that a newer step is complete */
	steps_retention(fs, mf1_kind());
}

int steps_mf1_judge_cb(const struct idx_step *s, void *arg)
{
	struct idx_step copy = *s;

	if (layout_desc(s->kind)->per_rank)
		mf1_judge(arg, &copy);
	return 0;
}

void steps_mf1_on_file(struct ckfs *fs, const struct layout_match *m, pid_t pid)
{
	char name[64];
	struct idx_step s;
	int64_t id;

	snprintf(name, sizeof(name), "%" PRId64 "_%" PRId64, m->epoch, m->step);
	if (idx_step_by_name(fs->ix, mf1_kind(), name, &s) < 0) {
		if (idx_begin(fs->ix) < 0)
			return;
		if (idx_step_create(fs->ix, mf1_kind(), name, m->step, 0, ckfs_now(fs), &id) < 0 ||
		    idx_commit(fs->ix) < 0) {
			idx_rollback(fs->ix);
			return;
		}
		if (idx_step_get(fs->ix, id, &s) < 0)
			return;
	}
	steps_rt_note(fs, s.id, pid);
	mf1_judge(fs, &s);
}

/*
 * Remove MF1 step s's file from every rank directory (retention): each rank's
 * {prefix}-{epoch}_{step}.ckpt|.safetensors under its final name, including a relaunch's
 * {prefix}_N-... of the same step (MindSpore ModelCheckpoint adds _N to a prefix already used,
 * tests/traces/mf1.md). In the caller's transaction; freed chunks go to fr.
 */
int steps_mf1_drop_files(struct ckfs *fs, const struct idx_step *s, struct ino_freed *fr)
{
	int64_t e, st;
	int world = mf1_world(fs), rc = 0;

	if (!steps_mf1_key(s, &e, &st))
		return 0;
	for (int r = 0; rc == 0 && r < world; r++) {
		char dname[32];
		struct mf1_find f;
		uint64_t rdir;

		rank_dir(r, dname, sizeof(dname));
		if (idx_dentry_lookup(fs->ix, IDX_ROOT_INO, dname, &rdir) < 0)
			continue;
		for (int k = 0; rc == 0 && k < 16 && mf1_file(fs, r, e, st, &f); k++) {
			rc = idx_dentry_remove(fs->ix, rdir, f.name);
			if (rc == 0)
				rc = ino_drop_link(fs, f.ino, ckfs_now(fs), fr);
			if (rc == 0)
				rc = steps_dir_links_add(fs, rdir, 0, true);
			if (rc == 0)
				steps_inval_queue(fs, rdir, f.name);
		}
	}
	return rc;
}

struct mf1_best {
	struct ckfs *fs;
	struct policy_lineage lin; /* the current lineage (policy rule 6): the steps meta.json
				    * may name */
	int64_t epoch, step;
	struct idx_step s;
	bool found;
};

static int mf1_best_cb(const struct idx_step *s, void *arg)
{
	struct mf1_best *b = arg;
	int64_t e, st;

	if (s->state != IDX_STEP_COMPLETE || !steps_mf1_key(s, &e, &st) ||
	    !policy_lineage_member(&b->lin, s))
		return 0;
	if (b->found && (e < b->epoch || (e == b->epoch && st <= b->step)))
		return 0;
	/* across nodes: every node's part in and every rank's file here (node.c show_step) */
	if (b->fs->up.global_ok && !b->fs->up.global_ok(b->fs, s))
		return 0;
	/* the trainer may have deleted it since (keep_checkpoint_max): still all there, or kept
	 * in /.ckptfs/retained because it was the newest (steps_mf1_before_remove)? */
	if (!steps_is_retained(b->fs, s) && !mf1_sound(b->fs, e, st))
		return 0;
	b->epoch = e;
	b->step = st;
	b->s = *s;
	b->found = true;
	return 0;
}

/* Make dir `name` under parent with the attributes of template tmpl. In a transaction. */
static int clone_dir(struct ckfs *fs, uint64_t parent, const char *name, uint64_t tmpl,
		     uint64_t *ret)
{
	struct idx_inode a, pa;
	int rc;

	if ((rc = idx_inode_get(fs->ix, tmpl, &a)) < 0 ||
	    (rc = idx_inode_get(fs->ix, parent, &pa)) < 0)
		return rc;
	a.nlink = 2;
	if ((rc = idx_inode_create(fs->ix, &a, ret)) < 0 ||
	    (rc = idx_dentry_add(fs->ix, parent, name, *ret)) < 0)
		return rc;
	pa.nlink++;
	return idx_inode_update(fs->ix, &pa);
}

/*
 * The trainer unlinks rank_R/name. MindSpore's keep_checkpoint_max deletes the oldest .ckpt of
 * each rank BEFORE it saves (framework-io.md), so after a crash in the save that follows, the
 * newest complete step can be gone from some ranks and no step is complete on all of them. When
 * name is a file of the newest complete MF1 step, keep every rank's file of that step (same
 * chunks) as /.ckptfs/retained/{epoch}_{step}.{id}/rank_R/name, the step's directory, until a
 * newer step is complete (retention prunes it) or a meta.json read brings the files back
 * (steps_mf1_restore). Best effort: on an index error the unlink goes on and nothing is kept.
 */
void steps_mf1_before_remove(struct ckfs *fs, int rank, const char *name)
{
	char rel[LAYOUT_NAME_MAX + 32], qname[300];
	struct mf1_best b = { .fs = fs };
	struct layout_match m;
	uint64_t top;
	int world = mf1_world(fs), rc;

	rank_dir(rank, rel, sizeof(rel));
	snprintf(rel + strlen(rel), sizeof(rel) - strlen(rel), "/%s", name);
	if (layout_classify(rel, mf1_kind(), &m) < 0 || m.role != ROLE_STEP_FILE ||
	    (m.flags & LAYOUT_F_TMP) || world <= 0)
		return;
	if (idx_step_foreach(fs->ix, mf1_best_cb, &b) < 0 || !b.found || b.epoch != m.epoch ||
	    b.step != m.step || steps_is_retained(fs, &b.s) || b.s.dir_ino)
		return;
	snprintf(qname, sizeof(qname), "%s.%" PRId64, b.s.name, b.s.id);
	if (idx_begin(fs->ix) < 0)
		return;
	rc = clone_dir(fs, fs->steps.retained_ino, qname, IDX_ROOT_INO, &top);
	for (int r = 0; rc == 0 && r < world; r++) {
		char dname[32];
		struct mf1_find f;
		uint64_t rdir, cdir;

		rank_dir(r, dname, sizeof(dname));
		if (!mf1_file(fs, r, m.epoch, m.step, &f) ||
		    idx_dentry_lookup(fs->ix, IDX_ROOT_INO, dname, &rdir) < 0) {
			rc = -ENOENT;
			break;
		}
		rc = clone_dir(fs, top, dname, rdir, &cdir);
		if (rc == 0)
			rc = steps_clone_file(fs, f.ino, cdir, f.name);
	}
	if (rc == 0)
		rc = idx_step_set_dir(fs->ix, b.s.id, top);
	if (rc == 0)
		rc = idx_commit(fs->ix);
	else
		idx_rollback(fs->ix);
	if (rc == 0)
		ckpt_log("the trainer deletes '%s' of step '%s', the newest complete step: "
			 "all ranks' files kept in '.ckptfs/%s/%s' until a newer step is complete",
			 rel, b.s.name, RETAINED_NAME, qname);
}

struct one_file {
	char name[LAYOUT_NAME_MAX + 1];
	uint64_t ino;
	bool found;
};

static int one_file_cb(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct one_file *o = arg;

	if (!S_ISREG(mode))
		return 0;
	snprintf(o->name, sizeof(o->name), "%s", name);
	o->ino = ino;
	o->found = true;
	return 1;
}

/*
 * Put the retained files of MF1 step s back into the rank directories that lack them, so the
 * trainer's resume (it lists rank_R/ for the step meta.json names) finds them; then drop the
 * retained copy. A name taken meanwhile keeps its file (the retained one is dropped with the
 * rest). Best effort, like steps_restore().
 */
void steps_mf1_restore(struct ckfs *fs, struct idx_step *s)
{
	struct ino_freed fr = { 0 };
	int64_t e, st;
	int world = mf1_world(fs), rc = 0, back = 0;

	if (!steps_is_retained(fs, s) || !steps_mf1_key(s, &e, &st) || world <= 0 ||
	    idx_begin(fs->ix) < 0)
		return;
	for (int r = 0; rc == 0 && r < world; r++) {
		char dname[32];
		struct one_file o = { 0 };
		struct mf1_find f;
		struct idx_inode d;
		uint64_t rdir, cdir, cur;

		rank_dir(r, dname, sizeof(dname));
		if (mf1_file(fs, r, e, st, &f) ||
		    idx_dentry_lookup(fs->ix, IDX_ROOT_INO, dname, &rdir) < 0 ||
		    idx_dentry_lookup(fs->ix, s->dir_ino, dname, &cdir) < 0 ||
		    idx_dir_list(fs->ix, cdir, 0, one_file_cb, &o) < 0 || !o.found ||
		    idx_dentry_lookup(fs->ix, rdir, o.name, &cur) == 0)
			continue;
		rc = idx_dentry_move(fs->ix, cdir, o.name, rdir, o.name);
		if (rc == 0 && (rc = idx_inode_get(fs->ix, rdir, &d)) == 0) {
			d.mtime_ns = d.ctime_ns = ckfs_now(fs);
			rc = idx_inode_update(fs->ix, &d);
		}
		if (rc == 0) {
			steps_inval_queue(fs, rdir, o.name);
			back++;
		}
	}
	if (rc == 0)
		rc = steps_drop_tree(fs, s, &fr);
	rc = rc == 0 ? idx_commit(fs->ix) : rc;
	if (rc < 0)
		idx_rollback(fs->ix);
	ino_release_finish(fs, &fr, rc == 0);
	if (rc == 0)
		ckpt_log("restored step '%s' (the newest complete step): %d rank file(s) put back "
			 "for a resuming reader", s->name, back);
}

/* rank_R/meta.json as MindSpore writes it, naming the newest step complete on all ranks. */
int steps_mf1_meta(struct ckfs *fs, int rank, char *buf, size_t cap)
{
	struct mf1_best b = { .fs = fs };
	struct layout_tracker t = { 0 };
	struct mf1_find f;

	if (policy_lineage(fs->ix, mf1_kind(),
			   fs->steps.opt.layout < 0 ? LAYOUT_NONE
						    : (enum layout_kind)fs->steps.opt.layout,
			   &b.lin) < 0 ||
	    idx_step_foreach(fs->ix, mf1_best_cb, &b) < 0 || !b.found)
		return -ENOENT;
	steps_mf1_restore(fs, &b.s);
	if (!mf1_file(fs, rank, b.epoch, b.step, &f))
		return -ENOENT;
	t.step = b.step;
	t.epoch = b.epoch;
	snprintf(t.ckpt_file, sizeof(t.ckpt_file), "%s", f.name);
	return layout_tracker_format(mf1_kind(), &t, buf, cap);
}

int steps_mf1_whole(struct ckfs *fs, const struct idx_step *s, int *ret_rank)
{
	int64_t e, st;
	int missing = -1;

	if (!steps_mf1_key(s, &e, &st))
		return -EINVAL;
	if (mf1_sound_over(fs, e, st, NULL, mf1_world(fs), NULL, NULL, &missing))
		return 1;
	*ret_rank = missing;
	return 0;
}
