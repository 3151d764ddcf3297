/*
 * steps_retain.c — retention: which complete steps are kept, pruning, and the retained copies
 * (keep_copy, restore) that bring back a step a trainer deleted.
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
#include "fs/policy/policy.h"
#include "fs/steps/steps_int.h"
#include "fs/policy/validate.h"

/* ---- retention ---- */

struct ret_ctx {
	struct ckfs *fs;
	int kind;
	struct policy_lineage lin; /* the lineage of kind's steps (policy rule 6) */
	int64_t *ids;
	size_t n, cap;
};

/* Remove the whole tree under dir (entries only; dir's own dentry is the caller's). */
static int tree_remove(struct ckfs *fs, uint64_t dir, struct ino_freed *fr, int depth)
{
	struct steps_entries c = { 0 };
	int rc;

	rc = steps_dir_entries(fs, dir, depth, &c);
	for (size_t i = 0; rc >= 0 && i < c.n; i++) {
		if (S_ISDIR(c.modes[i]) && (rc = tree_remove(fs, c.inos[i], fr, depth + 1)) < 0)
			break;
		rc = idx_dentry_remove(fs->ix, dir, c.names[i]);
		if (rc == 0)
			rc = ino_drop_link(fs, c.inos[i], ckfs_now(fs), fr);
	}
	steps_dir_entries_free(&c);
	return rc < 0 ? rc : 0;
}

/* Remove step s's directory tree from wherever it is (the namespace, quarantine, retained);
 * its dir_ino becomes 0. Chunks no longer referenced are added to fr. In a transaction. */
int steps_drop_tree(struct ckfs *fs, struct idx_step *s, struct ino_freed *fr)
{
	uint64_t parent, cur;
	char name[300];
	int rc = 0;

	if (s->dir_ino && idx_dentry_parent(fs->ix, s->dir_ino, &parent, name, sizeof(name)) == 0 &&
	    idx_dentry_lookup(fs->ix, parent, name, &cur) == 0 && cur == s->dir_ino) {
		rc = tree_remove(fs, s->dir_ino, fr, 0);
		if (rc == 0)
			rc = idx_dentry_remove(fs->ix, parent, name);
		if (rc == 0)
			steps_inval_queue(fs, parent, name);
		if (rc == 0)
			rc = ino_drop_link(fs, s->dir_ino, ckfs_now(fs), fr);
		if (rc == 0)
			rc = steps_dir_links_add(fs, parent, -1, true);
	}
	if (rc == 0)
		rc = idx_step_set_dir(fs->ix, s->id, 0);
	if (rc == 0)
		s->dir_ino = 0;
	return rc;
}

/* Prune one step: its tree leaves the namespace wherever it is, its state becomes pruned. */
int steps_prune(struct ckfs *fs, struct idx_step *s, struct ino_freed *fr)
{
	int rc = steps_drop_tree(fs, s, fr);

	if (rc == 0 && layout_desc(s->kind)->per_rank)
		rc = steps_mf1_drop_files(fs, s, fr); /* its rank files, in the rank directories */
	if (rc == 0 && layout_desc(s->kind)->top_files)
		rc = steps_top_drop_file(fs, s, fr); /* its file, at the root */

	if (rc == 0)
		rc = steps_set_state(fs, s, IDX_STEP_PRUNED, "retention");
	return rc;
}

/* Is step s kept only in /.ckptfs/retained (the trainer deleted it)? */
bool steps_is_retained(struct ckfs *fs, const struct idx_step *s)
{
	uint64_t parent;

	return s->dir_ino && idx_dentry_parent(fs->ix, s->dir_ino, &parent, NULL, 0) == 0 &&
	       parent == fs->steps.retained_ino;
}

/* Sort MF1 step ids by (epoch, step), ascending (insertion sort: a few hundred at most). */
static void mf1_order(struct ckfs *fs, int64_t *ids, size_t n)
{
	int64_t (*key)[3] = calloc(n ? n : 1, sizeof(*key));
	struct idx_step s;

	if (!key)
		return;
	for (size_t i = 0; i < n; i++) {
		key[i][0] = key[i][1] = -1;
		key[i][2] = ids[i];
		if (idx_step_get(fs->ix, ids[i], &s) == 0)
			steps_mf1_key(&s, &key[i][0], &key[i][1]);
	}
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && (key[j - 1][0] > key[j][0] ||
					     (key[j - 1][0] == key[j][0] && key[j - 1][1] > key[j][1]));
		     j--) {
			int64_t t[3];

			memcpy(t, key[j], sizeof(t));
			memcpy(key[j], key[j - 1], sizeof(t));
			memcpy(key[j - 1], t, sizeof(t));
		}
	for (size_t i = 0; i < n; i++)
		ids[i] = key[i][2];
	free(key);
}

/*
 * Steps the trainer deleted are kept in /.ckptfs/retained only until a newer step of their
 * layout is complete: prune the complete ones of kind there that are not the newest. Costs what
 * /.ckptfs/retained holds (a step or two), not the number of steps in the store.
 */
static void prune_retained(struct ckfs *fs, int kind)
{
	struct steps_entries e = { 0 };
	struct ino_freed fr = { 0 };
	struct idx_step newest;
	bool ok = true, began = false;

	if (!fs->steps.retained_ino || steps_dir_entries(fs, fs->steps.retained_ino, 1, &e) < 0 ||
	    e.n == 0 || idx_step_newest(fs->ix, 1u << kind, IDX_STEP_COMPLETE, &newest) < 0)
		goto out;
	for (size_t i = 0; i < e.n && ok; i++) {
		struct idx_step s;

		if (!S_ISDIR(e.modes[i]) || idx_step_by_dir(fs->ix, e.inos[i], &s) < 0 ||
		    s.kind != kind || s.state != IDX_STEP_COMPLETE || s.pinned || steps_is_slot(&s) ||
		    s.id == newest.id || steps_version_shadowed(fs, &s))
			continue;
		if (!began && idx_begin(fs->ix) < 0)
			goto out;
		began = true;
		ok = steps_prune(fs, &s, &fr) == 0;
	}
	if (began) {
		ok = ok && idx_commit(fs->ix) == 0;
		if (!ok)
			idx_rollback(fs->ix);
		ino_release_finish(fs, &fr, ok);
	}
out:
	steps_dir_entries_free(&e);
}

/* idx_step_newest_each callback: collect the ids of complete steps of c->kind, slots aside */
static int collect_complete(const struct idx_step *s, void *arg)
{
	struct ret_ctx *c = arg;

	if (s->kind != c->kind || s->state != IDX_STEP_COMPLETE || steps_is_slot(s))
		return 0; /* a slot's old versions go when its new one completes: steps_versions_done */
	if (!policy_lineage_member(&c->lin, s))
		return 0; /* another lineage's step: neither counted nor pruned (policy rule 6) */
	if (steps_version_shadowed(c->fs, s))
		return 0; /* a kept version: its new version decides (steps_versions_done) */
	if (ckpt_grow(&c->ids, &c->cap, c->n, sizeof(*c->ids)) < 0)
		return -ENOMEM;
	c->ids[c->n++] = s->id;
	return 0;
}

/*
 * Cost: the retained steps, then (with keep_checkpoint_max) the complete steps of kind, which
 * retention itself keeps to keep_max plus the pinned and keep_every ones: a save does not slow
 * down as pruned steps accumulate, nor, with keep_checkpoint_max=0, as kept ones do.
 */
void steps_retention(struct ckfs *fs, int kind)
{
	struct ret_ctx c = { .fs = fs, .kind = kind };
	struct ino_freed fr = { 0 };
	unsigned kept = 0;
	bool ok = true;

	prune_retained(fs, kind);
	if (fs->steps.opt.keep_max == 0)
		goto out;
	if (policy_lineage(fs->ix, (enum layout_kind)kind,
			   fs->steps.opt.layout < 0 ? LAYOUT_NONE
						    : (enum layout_kind)fs->steps.opt.layout,
			   &c.lin) < 0)
		goto out; /* prune nothing rather than a step of the lineage */
	if (idx_step_newest_each(fs->ix, 1u << kind, IDX_STEP_COMPLETE, collect_complete, &c) < 0)
		goto out;
	for (size_t i = 0; i < c.n / 2; i++) { /* newest first -> ascending */
		int64_t t = c.ids[i];

		c.ids[i] = c.ids[c.n - 1 - i];
		c.ids[c.n - 1 - i] = t;
	}
	if (layout_desc(kind)->per_rank)
		mf1_order(fs, c.ids, c.n); /* its step number restarts every epoch */
	/* ids come ordered by step number ascending: keep from the newest end */
	if (idx_begin(fs->ix) < 0)
		goto out;
	for (size_t i = c.n; i-- > 0 && ok;) {
		struct idx_step s;

		if (idx_step_get(fs->ix, c.ids[i], &s) < 0)
			continue;
		if (s.pinned || (fs->steps.opt.keep_every && s.step >= 0 &&
				 s.step % fs->steps.opt.keep_every == 0))
			continue; /* kept, and not counted */
		if (kept < fs->steps.opt.keep_max) {
			/* keep_max >= 1, so the newest unpinned complete step is kept. With many
			 * nodes only globally complete steps count (policy rule 5): a newer step
			 * complete here, not yet on every node, is kept beside keep_max global ones */
			if (!fs->up.global_ok || fs->up.global_ok(fs, &s))
				kept++;
			continue;
		}
		ok = steps_prune(fs, &s, &fr) == 0;
		if (ok)
			ckpt_fault("retention-txn");
	}
	ok = ok && idx_commit(fs->ix) == 0;
	if (!ok)
		idx_rollback(fs->ix);
	if (ok && fr.n)
		ckpt_fault("retention-after");
	ino_release_finish(fs, &fr, ok);
out:
	free(c.ids);
}

/* ---- the quarantine's own limit ---- */

struct q_ent {
	int64_t id, state_ns;
};

static int q_ent_cmp(const void *a, const void *b)
{
	const struct q_ent *x = a, *y = b;

	return x->state_ns < y->state_ns ? -1 : x->state_ns > y->state_ns ? 1 :
	       x->id < y->id ? -1 : x->id > y->id;
}

/*
 * Keep at most fs->steps.opt.keep_quarantine steps in /.ckptfs/quarantine (0: all): the ones set
 * aside longest ago are pruned, each logged and recorded in its history. A set-aside step is a save
 * that cannot be resumed (torn, abandoned, corrupt): it is kept for a look, not for ever, or
 * every torn 100 GB save of a long job would stay on the disk. Costs what the quarantine holds.
 */
void steps_quarantine_limit(struct ckfs *fs)
{
	struct steps_entries e = { 0 };
	struct ino_freed fr = { 0 };
	struct q_ent *v = NULL;
	size_t n = 0;
	bool ok = true;

	if (!fs->steps.opt.keep_quarantine || !fs->steps.quarantine_ino ||
	    steps_dir_entries(fs, fs->steps.quarantine_ino, 1, &e) < 0 ||
	    e.n <= fs->steps.opt.keep_quarantine || !(v = calloc(e.n, sizeof(*v))))
		goto out;
	for (size_t i = 0; i < e.n; i++) {
		struct idx_step s;

		if (S_ISDIR(e.modes[i]) && idx_step_by_dir(fs->ix, e.inos[i], &s) == 0 &&
		    !s.pinned) {
			v[n].id = s.id;
			v[n++].state_ns = s.state_ns;
		}
	}
	if (n <= fs->steps.opt.keep_quarantine || idx_begin(fs->ix) < 0)
		goto out;
	qsort(v, n, sizeof(*v), q_ent_cmp);
	for (size_t i = 0; ok && i < n - fs->steps.opt.keep_quarantine; i++) {
		struct idx_step s;

		if (idx_step_get(fs->ix, v[i].id, &s) < 0)
			continue;
		ok = steps_drop_tree(fs, &s, &fr) == 0 &&
		     steps_set_state(fs, &s, IDX_STEP_PRUNED, "quarantine limit (keep_quarantine)") == 0;
	}
	ok = ok && idx_commit(fs->ix) == 0;
	if (!ok)
		idx_rollback(fs->ix);
	ino_release_finish(fs, &fr, ok);
out:
	free(v);
	steps_dir_entries_free(&e);
}

int steps_unrestore(struct ckfs *fs, const struct idx_step *s)
{
	char qname[300];
	const char *leaf;
	struct idx_step o;
	uint64_t home, cur;
	int rc;

	if ((rc = steps_step_home(fs, s->name, &home, &leaf)) < 0 ||
	    (rc = idx_dentry_lookup(fs->ix, home, leaf, &cur)) < 0)
		return rc;
	rc = idx_step_by_dir(fs->ix, cur, &o);
	if (rc == -ENOENT || (rc == 0 && (o.state != IDX_STEP_COMPLETE || o.kind != s->kind ||
					  o.id >= s->id || strcmp(o.name, s->name) != 0)))
		return -EEXIST;
	if (rc < 0 || !fs->steps.retained_ino)
		return rc < 0 ? rc : -ENOENT;
	steps_flat_name(o.name, o.id, qname, sizeof(qname));
	rc = idx_dentry_move(fs->ix, home, leaf, fs->steps.retained_ino, qname);
	if (rc == 0)
		rc = steps_dir_links_add(fs, home, -1, true);
	if (rc == 0)
		rc = steps_dir_links_add(fs, fs->steps.retained_ino, 1, false);
	return rc;
}

/* ---- the trainer deleting the newest complete step (MindFormers 2.0 with keep=1) ---- */

/* Copy the tree under src into the new directory dst: inodes are new, chunks are shared. */
static int tree_clone(struct ckfs *fs, uint64_t src, uint64_t dst, int depth)
{
	struct steps_entries c = { 0 };
	int rc;

	rc = steps_dir_entries(fs, src, depth, &c);
	for (size_t i = 0; rc >= 0 && i < c.n; i++) {
		struct idx_inode a;
		uint64_t ino;

		if ((rc = idx_inode_get(fs->ix, c.inos[i], &a)) < 0)
			break;
		a.nlink = S_ISDIR(a.mode) ? 2 : 1;
		if ((rc = idx_inode_create(fs->ix, &a, &ino)) < 0 ||
		    (rc = idx_dentry_add(fs->ix, dst, c.names[i], ino)) < 0)
			break;
		if (S_ISDIR(a.mode)) {
			if ((rc = steps_dir_links_add(fs, dst, 1, false)) < 0 ||
			    (rc = tree_clone(fs, c.inos[i], ino, depth + 1)) < 0)
				break;
		} else if (S_ISLNK(a.mode)) {
			char target[LAYOUT_PATH_MAX + 1];

			if ((rc = idx_symlink_get(fs->ix, c.inos[i], target, sizeof(target))) < 0 ||
			    (rc = idx_symlink_set(fs->ix, ino, target)) < 0)
				break;
		} else if (S_ISREG(a.mode)) {
			struct idx_extent *ext = NULL;
			size_t n = 0;

			if ((rc = idx_file_extents(fs->ix, c.inos[i], &ext, &n)) < 0)
				break;
			rc = idx_file_set_content(fs->ix, ino, ext, n, a.size,
						  a.has_hash ? a.hash : NULL, a.mtime_ns, NULL, NULL);
			free(ext);
			if (rc < 0)
				break;
			a.ino = ino;
			rc = idx_inode_update(fs->ix, &a); /* keep the flags and times */
			if (rc < 0)
				break;
		}
	}
	steps_dir_entries_free(&c);
	return rc < 0 ? rc : 0;
}

/*
 * Keep complete step s: a copy of its tree (new inodes, the same chunks) as
 * /.ckptfs/retained/NAME.ID, which becomes the step's directory; the tree at s->dir_ino (its
 * attributes in *dir_attr) is left to the trainer. qname receives NAME.ID. In a transaction.
 * Returns 0 or -errno.
 */
int steps_keep_copy(struct ckfs *fs, const struct idx_step *s, struct idx_inode *dir_attr,
		    char *qname, size_t cap)
{
	uint64_t clone;
	int rc;

	steps_flat_name(s->name, s->id, qname, cap);
	dir_attr->nlink = 2;
	rc = idx_inode_create(fs->ix, dir_attr, &clone);
	if (rc == 0)
		rc = idx_dentry_add(fs->ix, fs->steps.retained_ino, qname, clone);
	if (rc == 0)
		rc = steps_dir_links_add(fs, fs->steps.retained_ino, 1, false);
	if (rc == 0)
		rc = tree_clone(fs, s->dir_ino, clone, 0);
	if (rc == 0)
		rc = idx_step_set_dir(fs->ix, s->id, clone);
	return rc;
}

/*
 * Whether directory ino, at the step's name, is what the trainer left of the step when its
 * deletion was cut short (steps_before_remove moved the step to its clone): no step row owns
 * it, or only one that is over (incomplete, corrupt, pruned). A step being written or sealed
 * under that name (the trainer saving the same step again) is never taken away.
 */
static bool is_leftover(struct ckfs *fs, uint64_t ino)
{
	struct idx_step o;

	if (idx_step_by_dir(fs->ix, ino, &o) < 0)
		return true;
	return o.state != IDX_STEP_WRITING && o.state != IDX_STEP_SEALED &&
	       o.state != IDX_STEP_COMPLETE;
}

/*
 * Put a retained step back at its name, so a resuming trainer finds what its tracker names. A
 * deletion cut short (the trainer killed after removing some of the step's files) leaves part of
 * the step at the name: that part is set aside in /.ckptfs/quarantine as NAME.partial-ID (its
 * files are all in the retained copy), and the whole step takes its place.
 */
void steps_restore(struct ckfs *fs, struct idx_step *s)
{
	uint64_t parent, cur;
	char name[300], pname[320];
	bool partial;

	if (layout_desc(s->kind)->per_rank)
		return; /* per-rank files, no directory: steps_mf1_restore, from a meta.json read */
	const char *leaf;
	uint64_t home;

	if (!s->dir_ino || idx_dentry_parent(fs->ix, s->dir_ino, &parent, name, sizeof(name)) < 0 ||
	    parent != fs->steps.retained_ino || steps_step_home(fs, s->name, &home, &leaf) < 0)
		return;
	partial = idx_dentry_lookup(fs->ix, home, leaf, &cur) == 0;
	if (partial && !is_leftover(fs, cur))
		return;
	if (idx_begin(fs->ix) < 0)
		return;
	int rc = 0;

	if (partial) {
		/* the part leaves its home for quarantine; the step takes its place below */
		char flat[300];

		steps_flat_name(s->name, -1, flat, sizeof(flat));
		snprintf(pname, sizeof(pname), "%s.partial-%" PRId64, flat, s->id);
		rc = idx_dentry_move(fs->ix, home, leaf, fs->steps.quarantine_ino, pname);
		if (rc == 0)
			rc = steps_dir_links_add(fs, fs->steps.quarantine_ino, 1, true);
	}
	if (rc == 0)
		rc = idx_dentry_move(fs->ix, fs->steps.retained_ino, name, home, leaf);
	if (rc == 0)
		rc = steps_dir_links_add(fs, fs->steps.retained_ino, -1, false);
	if (rc == 0)
		rc = steps_dir_links_add(fs, home, partial ? 0 : 1, true);
	if (rc == 0 && idx_commit(fs->ix) == 0) {
		if (partial) {
			steps_inval_queue(fs, home, leaf); /* the kernel has the part cached */
			ckpt_log("restored '%s' (the newest complete step) for a resuming reader; "
				 "what the trainer had not yet deleted of it is in "
				 "'.ckptfs/quarantine/%s'", s->name, pname);
		} else {
			ckpt_log("restored '%s' (the newest complete step) for a resuming reader",
				 s->name);
		}
	} else if (rc < 0) {
		idx_rollback(fs->ix);
	}
}

int steps_clone_file(struct ckfs *fs, uint64_t src, uint64_t dir, const char *name)
{
	struct idx_extent *ext = NULL;
	struct idx_inode a;
	uint64_t ino;
	size_t n = 0;
	int rc;

	if ((rc = idx_inode_get(fs->ix, src, &a)) < 0)
		return rc;
	a.nlink = 1;
	a.mode |= S_IRUSR; /* MindSpore makes a .ckpt 0200 (S_IWRITE) before it removes it */
	if ((rc = idx_inode_create(fs->ix, &a, &ino)) < 0 ||
	    (rc = idx_dentry_add(fs->ix, dir, name, ino)) < 0 ||
	    (rc = idx_file_extents(fs->ix, src, &ext, &n)) < 0)
		return rc;
	rc = idx_file_set_content(fs->ix, ino, ext, n, a.size, a.has_hash ? a.hash : NULL,
				  a.mtime_ns, NULL, NULL);
	free(ext);
	if (rc < 0)
		return rc;
	a.ino = ino;
	return idx_inode_update(fs->ix, &a); /* keep the flags and times */
}
