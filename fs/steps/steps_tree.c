/*
 * steps_tree.c — the tree of a step: walking it (soundness, bad chunks, revalidation), path
 * helpers, the queue of names the kernel must forget, quarantine moves and state changes.
 *
 * Locking: every function here runs with fs->mu held unless its comment says otherwise.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "fs/core/lockrank.h"
#include "fs/steps/steps.h"
#include "fs/policy/layout.h"
#include "fs/policy/policy.h"
#include "fs/steps/steps_int.h"
#include "fs/policy/validate.h"

/* Is ino inside /.ckptfs? */
bool steps_in_meta(struct ckfs *fs, uint64_t ino)
{
	for (int depth = 0; depth < 256 && ino != IDX_ROOT_INO; depth++) {
		uint64_t up;

		if (ino == fs->steps.meta_ino)
			return true;
		if (idx_dentry_parent(fs->ix, ino, &up, NULL, 0) < 0)
			return false;
		ino = up;
	}
	return false;
}

/* Path of ino relative to the root without the leading '/', into buf. */
int steps_rel_path(struct ckfs *fs, uint64_t ino, char *buf, size_t cap)
{
	char tmp[LAYOUT_PATH_MAX + 1];
	int n = idx_path(fs->ix, ino, tmp, sizeof(tmp));

	if (n < 0)
		return n;
	const char *p = tmp[0] == '/' ? tmp + 1 : tmp;
	size_t len = strlen(p);

	if ((size_t)n >= sizeof(tmp) || len >= cap)
		return -ENAMETOOLONG;
	memcpy(buf, p, len + 1);
	return 0;
}

/* Queue parent/name for fs_flush_inval and wake the reaper, which sends it once fs->mu is let go
 * (a request's own thread cannot: the kernel may hold parent's lock for that very request).
 * fs->mu held. Dropped silently on ENOMEM (the kernel then forgets it by itself, within its
 * ATTR_TIMEOUT entry timeout). */
void steps_inval_queue(struct ckfs *fs, uint64_t parent, const char *name)
{
	if (ckpt_grow(&fs->steps.inval.v, &fs->steps.inval.cap, fs->steps.inval.n,
		      sizeof(*fs->steps.inval.v)) < 0)
		return;
	fs->steps.inval.v[fs->steps.inval.n].parent = parent;
	snprintf(fs->steps.inval.v[fs->steps.inval.n].name, sizeof(fs->steps.inval.v[0].name), "%s",
		 name);
	fs->steps.inval.n++;
	atomic_store(&fs->steps.inval.queued, true);
	pthread_cond_signal(&fs->steps.reaper_cv);
}

void steps_take_inval(struct ckfs *fs, struct inval **ret_v, size_t *ret_n)
{
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	*ret_v = fs->steps.inval.v;
	*ret_n = fs->steps.inval.n;
	fs->steps.inval.v = NULL;
	fs->steps.inval.n = fs->steps.inval.cap = 0;
	atomic_store(&fs->steps.inval.queued, false);
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
}

/* ---- bad chunks ---- */

static int bad_extent_check(struct ckfs *fs, uint64_t ino)
{
	struct idx_extent *ext = NULL;
	size_t n = 0;
	int bad = 0;

	if (idx_file_extents(fs->ix, ino, &ext, &n) < 0)
		return 0;
	for (size_t i = 0; i < n && !bad; i++)
		bad = idx_chunk_is_bad(fs->ix, ext[i].hash) > 0;
	free(ext);
	return bad;
}

/* ---- the tree of a step ---- */

static int scan_file(const char *name, uint64_t ino, const struct idx_inode *a, void *arg)
{
	struct step_scan *sc = arg;
	struct oinode *oi = oi_find(sc->fs, ino);

	(void)name;
	if (oi && atomic_load(&oi->ov_dirty))
		sc->open++;
	if (!a->has_hash)
		sc->uncommitted++;
	if (a->flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED))
		sc->unsound++;
	if (sc->check_bad && bad_extent_check(sc->fs, ino))
		sc->bad++;
	return 0;
}

int steps_scan_tree(struct ckfs *fs, uint64_t dir, bool check_bad, struct step_scan *ret)
{
	struct step_scan sc = { .fs = fs, .check_bad = check_bad };
	int rc = policy_step_walk(fs->ix, dir, scan_file, &sc, &sc.fig);

	if (rc == 0)
		*ret = sc;
	return rc;
}

/*
 * Has some chunk of a file under dir been found bad? 1 yes, 0 no. The walk reads every file's
 * extents with fs->mu held (linear in the step's files), and every tracker read resolves
 * the newest step: the index first says whether any file under dir uses a chunk marked bad,
 * climbing from the few chunks marked bad (idx_dir_has_bad_chunk), and only then does the walk
 * say whether one of the step's own files does, as the policy counts them (tests/bench/
 * RESULTS.md, "A tracker read no longer walks the newest step").
 */
int steps_tree_has_bad_chunk(struct ckfs *fs, uint64_t dir)
{
	struct step_scan sc;

	if (idx_dir_has_bad_chunk(fs->ix, dir) == 0)
		return 0;
	return steps_scan_tree(fs, dir, true, &sc) == 0 && sc.bad > 0;
}

ssize_t steps_ext_read(void *arg, void *buf, size_t len, uint64_t off)
{
	struct ext_reader *r = arg;

	return ckpt_extents_pread(r->fs->st, r->ext, r->n, buf, len, off);
}

/* Re-check the structure of a committed, sound file from the store; flag it when malformed. */
static int revalidate_file(const char *name, uint64_t ino, const struct idx_inode *attr,
			   void *arg)
{
	struct ckfs *fs = arg;
	struct ext_reader r = { .fs = fs };
	struct idx_inode a = *attr;
	char why[128];
	int rc;

	if (!a.has_hash || (a.flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED)) ||
	    idx_file_extents(fs->ix, ino, &r.ext, &r.n) < 0)
		return 0;
	rc = validate_file(name, a.size, steps_ext_read, &r, NULL, why, sizeof(why));
	free(r.ext);
	if (rc == -EBADMSG || rc == -EIO) {
		a.flags = (a.flags & ~(uint32_t)IDX_INODE_VALID) | IDX_INODE_MALFORMED;
		ckpt_log("recovery: '%s' (inode %" PRIu64 ") is malformed: %s", name, ino, why);
		steps_report_malformed(fs);
		if (idx_begin(fs->ix) == 0)
			steps_record(fs, idx_inode_update(fs->ix, &a), "that '%s' is malformed", name);
	}
	return 0;
}

void steps_revalidate_tree(struct ckfs *fs, uint64_t dir)
{
	struct policy_figures fig;

	(void)policy_step_walk(fs->ix, dir, revalidate_file, fs, &fig);
}

/* ---- moving steps out of and back into the namespace ---- */

/* Add delta to directory dir's link count (subdirectories moved in or out); touch: also set
 * its mtime and ctime to now (its entries changed). In a transaction, fs->mu held. */
int steps_dir_links_add(struct ckfs *fs, uint64_t dir, int delta, bool touch)
{
	struct idx_inode d;
	int rc = idx_inode_get(fs->ix, dir, &d);

	if (rc < 0)
		return rc;
	d.nlink = (uint32_t)((int64_t)d.nlink + delta);
	if (touch)
		d.mtime_ns = d.ctime_ns = ckfs_now(fs);
	return idx_inode_update(fs->ix, &d);
}

/* Is s an InternEvo snapshot slot ("snapshot/K"), a step rewritten in place? The policy's
 * rule: policy_is_slot. */
bool steps_is_slot(const struct idx_step *s)
{
	return policy_is_slot(s);
}

/* The directory at path rel (relative to the root, '/'-separated), into *ret. -errno. */
int steps_lookup_path(struct ckfs *fs, const char *rel, uint64_t *ret)
{
	char comp[LAYOUT_NAME_MAX + 1];
	uint64_t cur = IDX_ROOT_INO;
	int rc;

	for (const char *p = rel; *p;) {
		size_t n = strcspn(p, "/");

		if (n > LAYOUT_NAME_MAX)
			return -ENAMETOOLONG;
		if (n > 0) {
			memcpy(comp, p, n);
			comp[n] = '\0';
			if ((rc = idx_dentry_lookup(fs->ix, cur, comp, &cur)) < 0)
				return rc;
		}
		p += n + (p[n] == '/');
	}
	*ret = cur;
	return 0;
}

/*
 * Where a step named `name` lives in the namespace: its parent directory and its entry name
 * there (borrowed from name). Top-level steps live in the root; a slot "snapshot/K" lives in
 * `snapshot/` as "K". Returns 0, or -errno when the parent is gone.
 */
int steps_step_home(struct ckfs *fs, const char *name, uint64_t *ret_parent,
		    const char **ret_leaf)
{
	const char *slash = strrchr(name, '/');
	char up[LAYOUT_PATH_MAX];
	int rc;

	if (!slash) {
		*ret_parent = IDX_ROOT_INO;
		*ret_leaf = name;
		return 0;
	}
	if ((size_t)(slash - name) >= sizeof(up))
		return -ENAMETOOLONG;
	memcpy(up, name, (size_t)(slash - name));
	up[slash - name] = '\0';
	if ((rc = steps_lookup_path(fs, up, ret_parent)) == 0)
		*ret_leaf = slash + 1;
	return rc;
}

/* "NAME.ID" (id >= 0) or "NAME" for /.ckptfs/quarantine and /.ckptfs/retained, every '/' of
 * NAME as '-'. */
void steps_flat_name(const char *name, int64_t id, char *buf, size_t cap)
{
	if (id >= 0)
		snprintf(buf, cap, "%s.%" PRId64, name, id);
	else
		snprintf(buf, cap, "%s", name);
	for (char *p = buf; *p; p++)
		if (*p == '/')
			*p = '-';
}

int steps_move_to_quarantine(struct ckfs *fs, const struct idx_step *s)
{
	char qname[300];
	const char *leaf;
	uint64_t cur, home;
	int rc;

	if (!s->dir_ino || steps_step_home(fs, s->name, &home, &leaf) < 0 ||
	    idx_dentry_lookup(fs->ix, home, leaf, &cur) < 0 || cur != s->dir_ino)
		return 0; /* not at its place in the namespace (already moved, or renamed) */
	steps_flat_name(s->name, s->id, qname, sizeof(qname));
	rc = idx_dentry_move(fs->ix, home, leaf, fs->steps.quarantine_ino, qname);
	if (rc == 0)
		rc = steps_dir_links_add(fs, home, -1, true);
	if (rc == 0)
		rc = steps_dir_links_add(fs, fs->steps.quarantine_ino, 1, true);
	if (rc == 0)
		steps_inval_queue(fs, home, leaf);
	return rc;
}

int steps_move_back(struct ckfs *fs, const struct idx_step *s)
{
	char qname[300];
	const char *leaf;
	uint64_t cur, home;
	int rc;

	if ((rc = steps_step_home(fs, s->name, &home, &leaf)) < 0)
		return rc;
	if (idx_dentry_lookup(fs->ix, home, leaf, &cur) == 0)
		return -EEXIST; /* the trainer re-created the name: leave the old one set aside */
	steps_flat_name(s->name, s->id, qname, sizeof(qname));
	rc = idx_dentry_move(fs->ix, fs->steps.quarantine_ino, qname, home, leaf);
	if (rc == 0)
		rc = steps_dir_links_add(fs, fs->steps.quarantine_ino, -1, true);
	if (rc == 0)
		rc = steps_dir_links_add(fs, home, 1, true);
	return rc;
}

/* ---- transitions ---- */

int steps_record(struct ckfs *fs, int rc, const char *fmt, ...)
{
	char what[LAYOUT_PATH_MAX + 64];
	va_list ap;

	if (rc >= 0 && (rc = idx_commit(fs->ix)) >= 0)
		return rc;
	idx_rollback(fs->ix);
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	ckpt_log("cannot record %s in the index: %s; the step is judged again at the next mount",
		 what, strerror(-rc));
	return rc;
}

int steps_set_state(struct ckfs *fs, struct idx_step *s, int state, const char *note)
{
	int64_t now = ckfs_now(fs);
	int rc = idx_step_set_state(fs->ix, s->id, state, now, note);

	/* a save's duration; not a step a dead daemon left, judged now, nor one learned from
	 * another node (its creation here is not when its save began) */
	if (rc == 0 && state == IDX_STEP_COMPLETE && s->state != IDX_STEP_COMPLETE &&
	    !fs->steps.crash_recovery && s->created_ns > 0)
		ckpt_hist_observe(&fs->steps.save_hist, now - s->created_ns);
	if (rc == 0 && state == IDX_STEP_COMPLETE && s->state != IDX_STEP_COMPLETE &&
	    fs->up.step_complete)
		fs->up.step_complete(fs);
	if (rc == 0) {
		steps_report_state(fs, s, state, note);
		ckpt_log("step '%s' (%s): %s -> %s%s%s", s->name, layout_name(s->kind),
			 idx_step_state_name(s->state), idx_step_state_name(state),
			 note ? ": " : "", note ? note : "");
		s->state = state;
	}
	return rc;
}

/* ---- listing a directory ---- */

/* idx_dir_list callback: collect name, ino and mode of each entry into the struct
 * steps_entries at arg. */
static int rm_collect(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct steps_entries *c = arg;

	if (c->n == c->cap) {
		size_t nc = c->cap ? 2 * c->cap : 16;
		char **a = realloc(c->names, nc * sizeof(*a));

		if (!a)
			return -ENOMEM;
		c->names = a;
		uint64_t *b = realloc(c->inos, nc * sizeof(*b));

		if (!b)
			return -ENOMEM;
		c->inos = b;
		uint32_t *m = realloc(c->modes, nc * sizeof(*m));

		if (!m)
			return -ENOMEM;
		c->modes = m;
		c->cap = nc;
	}
	if (!(c->names[c->n] = strdup(name)))
		return -ENOMEM;
	c->inos[c->n] = ino;
	c->modes[c->n] = mode;
	c->n++;
	return 0;
}

int steps_dir_entries(struct ckfs *fs, uint64_t dir, int depth, struct steps_entries *c)
{
	if (depth > STEPS_TREE_DEPTH_MAX)
		return -ELOOP;
	return idx_dir_list(fs->ix, dir, 0, rm_collect, c);
}

void steps_dir_entries_free(struct steps_entries *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->names[i]);
	free(c->names);
	free(c->inos);
	free(c->modes);
}
