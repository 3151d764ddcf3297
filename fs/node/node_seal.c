/*
 * node_seal.c — sealing this node's part of a step from another node's seal (node_int.h
 * node_seal_from_remote): a part published sealed means the step's claim was seen on that node,
 * so this node's part of it is sealed too (steps_seal_remote); a directory here of that name
 * that no step row names is adopted as the step (adopt_step), and a step none of this node's
 * ranks wrote anything of gets an empty part published.
 *
 * Node thread only; takes n->mu and fs->mu, never fs->mu while holding n->mu (node.c
 * invariant 3).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/core/lockrank.h"
#include "fs/node/node_int.h"
#include "fs/policy/policy.h"

static bool has_part(struct node *n, const char *node, int kind, int64_t step)
{
	return node_find_part(n, node, kind, step) != NULL;
}

/* Has this node any row of the step named name (kind)? fs->mu taken. */
static bool step_known_here(struct ckfs *fs, int kind, const char *name)
{
	struct idx_step s;
	int rc;

	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	rc = idx_step_by_name(fs->ix, kind, name, &s);
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	return rc != -ENOENT;
}

size_t node_own_files(struct ckfs *fs, uint64_t dir, const char *name)
{
	struct idx_step t = { .dir_ino = dir };
	size_t files = 0;
	json_t *m;

	snprintf(t.name, sizeof(t.name), "%s", name);
	m = node_manifest_json(fs, &t, "", 0, false, false, &files);
	json_decref(m);
	return m ? files : 0;
}

/* Does the root hold a directory name with files of this node? fs->mu taken. */
static bool dir_has_own_files(struct ckfs *fs, const char *name)
{
	struct idx_inode a;
	uint64_t dir;
	bool r = false;

	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	if (idx_dentry_lookup(fs->ix, IDX_ROOT_INO, name, &dir) == 0 &&
	    idx_inode_get(fs->ix, dir, &a) == 0 && S_ISDIR(a.mode))
		r = node_own_files(fs, dir, name) > 0;
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	return r;
}

/*
 * Another node sealed step p, and this node has a directory of that name holding files of its
 * ranks but no step row for it: a layout whose step directories are known by a file another
 * node's rank wrote (InternEvo's digits-only names need its marker, which rank 0 writes) did not
 * take it for a step here. The other node's part is that evidence: the directory becomes the
 * step, being written, for the seal to apply to and the policy to judge. Returns true if made.
 */
static bool adopt_step(struct node *n, const struct node_part *p)
{
	struct ckfs *fs = n->fs;
	struct idx_step s;
	struct idx_inode a;
	uint64_t dir;
	int64_t id;
	bool made = false;

	if (strchr(p->name, '/'))
		return false;
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	if (idx_step_by_name(fs->ix, p->kind, p->name, &s) == -ENOENT &&
	    idx_dentry_lookup(fs->ix, IDX_ROOT_INO, p->name, &dir) == 0 &&
	    idx_inode_get(fs->ix, dir, &a) == 0 && S_ISDIR(a.mode) &&
	    node_own_files(fs, dir, p->name) && idx_begin(fs->ix) == 0) {
		made = idx_step_create(fs->ix, p->kind, p->name, p->step, dir, ckfs_now(fs), &id) == 0 &&
		       idx_commit(fs->ix) == 0;
		if (!made)
			idx_rollback(fs->ix);
	}
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	if (made)
		ckpt_log("step '%s': its directory here is a step of node '%s' (%s): taken as this "
			 "node's part", p->name, p->node,
			 p->kind >= 0 && p->kind < LAYOUT_KIND_COUNT
				 ? layout_name((enum layout_kind)p->kind) : "?");
	return made;
}

/*
 * The newest mtime (ns since the epoch, the sealing node's clock) of the files of part p, read
 * from its manifest: the time its node sealed it (the marker is a save's last file). 0 when the
 * manifest cannot be read or has no file (the seal is then not applied to a slot: never guess).
 */
static int64_t part_newest_mtime(struct node *n, const struct node_part *p)
{
	char key[REMOTE_KEY_MAX + 1];
	int64_t newest = 0;
	json_t *m, *f;
	size_t len, i;
	void *buf;

	node_manifest_key(key, sizeof(key), p->kind, p->step, p->node, p->version,
			  p->unpadded);
	if (remote_get(n->r, key, &buf, &len) < 0)
		return 0;
	m = json_loadb(buf, len, 0, NULL);
	free(buf);
	json_array_foreach(json_object_get(m, "files"), i, f)
	{
		json_int_t t = json_integer_value(json_object_get(f, "mtime_ns"));

		if (t > newest)
			newest = t;
	}
	json_decref(m);
	return newest;
}

/*
 * Seal this node's part of every step another node sealed (the claim came after a barrier every
 * rank passed, so this node's ranks are done too). A node with no row of the step at all wrote
 * nothing of it (Megatron's legacy format writes on data-parallel rank 0 only): it publishes an
 * empty part, so that the step can become global (rule 5 counts parts, not files). Not for a
 * step sealed before this store first mounted with the remote (n->since_ns; the sealer's clock
 * against this node's, so a skew shorter than the time between a store's loss and its remount):
 * a node whose store was lost must not publish an empty part of a step its ranks wrote.
 */
void node_seal_from_remote(struct node *n)
{
	struct node_part *v = NULL;
	size_t nv = 0, capv = 0;

	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	for (size_t i = 0; i < n->nparts && !node_blocked(n); i++) {
		const struct node_part *p = &n->parts[i];

		/* MindFormers 1.0 has no barrier before its claims (each rank's meta.json claims
		 * its own file, callback.py CheckpointMonitor._save_ckpt): another node's seal
		 * says nothing of this node's ranks, whose own claims seal this node's part */
		if (!p->sealed || p->stale || layout_desc(p->kind)->per_rank ||
		    strcmp(p->node, n->name) == 0 || has_part(n, n->name, p->kind, p->step) ||
		    node_key_in(n->sealed_here, n->nsealed, p->kind, p->step))
			continue;
		if (ckpt_grow(&v, &capv, nv, sizeof(*v)) < 0)
			break;
		v[nv++] = *p;
	}
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	for (size_t i = 0; i < nv; i++) {
		char why[NODE_NAME_MAX + 32];
		int64_t marker_ns = strchr(v[i].name, '/') ? part_newest_mtime(n, &v[i]) : 0;
		int rc;

		snprintf(why, sizeof(why), "sealed by node '%s'", v[i].node);
		rc = steps_seal_remote(n->fs, v[i].kind, v[i].step, v[i].name, marker_ns, why);
		if (rc == -ESTALE) { /* a slot rewritten since: this version is not here any more */
			node_key_add(&n->sealed_here, &n->capsealed, &n->nsealed, v[i].kind, v[i].step);
			continue;
		}
		if (rc < 0 && (!adopt_step(n, &v[i]) ||
			       steps_seal_remote(n->fs, v[i].kind, v[i].step, v[i].name, marker_ns,
						 why) < 0)) {
			/* no unfinished part here: nothing at all, or a part not finished yet */
			if (v[i].created_ns < n->since_ns || strchr(v[i].name, '/') ||
			    step_known_here(n->fs, v[i].kind, v[i].name) ||
			    dir_has_own_files(n->fs, v[i].name))
				continue;
			struct idx_step e = { .kind = v[i].kind, .step = v[i].step,
					      .created_ns = ckfs_now(n->fs) };
			size_t files;
			json_t *m;

			snprintf(e.name, sizeof(e.name), "%s", v[i].name);
			m = node_manifest_json(n->fs, &e, n->name, n->nodes, false, true, &files);
			if (!m || node_publish_part(n, &e, m, false) == 0)
				ckpt_log("step '%s': no file of it was written here; published an "
					 "empty part as node '%s'", e.name, n->name);
			json_decref(m);
			continue;
		}
		node_key_add(&n->sealed_here, &n->capsealed, &n->nsealed, v[i].kind, v[i].step);
	}
	free(v);
}
