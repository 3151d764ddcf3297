/*
 * node_show.c — the other nodes' files in this node's namespace (node_int.h node_show_global):
 * a step global by the parts known gets the files of every other node's part, read from their
 * manifests, as foreign inodes whose chunks are fetched from the remote on first read
 * (node.c fetch_chunk); a tracker may name the step only once it is shown (node.c global_ok).
 *
 * Node thread only; takes n->mu, and fs->mu never while holding it (node.c invariant 3).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/core/lockrank.h"
#include "fs/node/node_int.h"
#include "fs/policy/policy.h"

/* The directory at path (relative to dir; "a/b"), made as needed. In a transaction, fs->mu. */
static int mkdirs(struct ckfs *fs, uint64_t dir, const char *path, int64_t now,
		  uint64_t *ret_ino)
{
	char part[LAYOUT_PATH_MAX];
	const char *p = path;

	while (*p) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		uint64_t ino;
		int rc;

		if (len == 0 || len >= sizeof(part))
			return -EINVAL;
		memcpy(part, p, len);
		part[len] = '\0';
		rc = idx_dentry_lookup(fs->ix, dir, part, &ino);
		if (rc == -ENOENT) {
			struct idx_inode a = { .mode = S_IFDIR | 0755, .nlink = 2, .atime_ns = now,
					       .mtime_ns = now, .ctime_ns = now };

			if ((rc = idx_inode_create(fs->ix, &a, &ino)) < 0 ||
			    (rc = idx_dentry_add(fs->ix, dir, part, ino)) < 0)
				return rc;
		} else if (rc < 0) {
			return rc;
		}
		dir = ino;
		p += len;
		if (*p == '/')
			p++;
	}
	*ret_ino = dir;
	return 0;
}

/* One file of another node's manifest into the namespace (absent here). fs->mu, transaction. */
static int show_file(struct ckfs *fs, uint64_t stepdir, json_t *f, int64_t now)
{
	const char *path = json_string_value(json_object_get(f, "path"));
	const char *hex = json_string_value(json_object_get(f, "xxh3_128"));
	json_t *xs = json_object_get(f, "extents"), *x;
	struct idx_extent *ext = NULL;
	struct store_hash h;
	const char *base;
	uint64_t dir = stepdir, ino;
	size_t i, n = json_array_size(xs);
	int rc;

	if (!path || !*path || path[0] == '/' || strstr(path, ".."))
		return -EINVAL;
	base = strrchr(path, '/');
	if (base) {
		char sub[LAYOUT_PATH_MAX];

		if ((size_t)(base - path) >= sizeof(sub))
			return -ENAMETOOLONG;
		memcpy(sub, path, (size_t)(base - path));
		sub[base - path] = '\0';
		if ((rc = mkdirs(fs, stepdir, sub, now, &dir)) < 0)
			return rc;
		base++;
	} else {
		base = path;
	}
	bool replace = false;

	if (idx_dentry_lookup(fs->ix, dir, base, &ino) == 0) {
		struct idx_inode o;

		/* this node's own file of that name (a file every node writes) stays; another
		 * node's file of an earlier save of the step is replaced by this save's */
		if (idx_inode_get(fs->ix, ino, &o) < 0 || !(o.flags & IDX_INODE_FOREIGN) ||
		    !S_ISREG(o.mode))
			return 0;
		if (hex && store_hash_parse(hex, &h) == 0 && o.has_hash &&
		    memcmp(o.hash, h.b, STORE_HASH_LEN) == 0 &&
		    o.size == (uint64_t)json_integer_value(json_object_get(f, "size")))
			return 0;
		replace = true;
	}
	if (n && !(ext = calloc(n, sizeof(*ext))))
		return -ENOMEM;
	json_array_foreach(xs, i, x)
	{
		ext[i].offset = (uint64_t)json_integer_value(json_array_get(x, 0));
		ext[i].length = (uint32_t)json_integer_value(json_array_get(x, 1));
		if (store_hash_parse(json_string_value(json_array_get(x, 2)), &h) < 0) {
			free(ext);
			return -EINVAL;
		}
		memcpy(ext[i].hash, h.b, STORE_HASH_LEN);
	}
	struct idx_inode a = {
		.mode = S_IFREG | ((uint32_t)json_integer_value(json_object_get(f, "mode")) & 07777),
		.nlink = 1, .atime_ns = now, .ctime_ns = now,
		.mtime_ns = json_integer_value(json_object_get(f, "mtime_ns")),
		.flags = ((uint32_t)json_integer_value(json_object_get(f, "flags")) &
			  (IDX_INODE_TORN | IDX_INODE_MALFORMED | IDX_INODE_VALID)) |
			 IDX_INODE_FOREIGN,
	};
	if (hex && store_hash_parse(hex, &h) < 0)
		hex = NULL;
	rc = replace ? 0 : idx_inode_create(fs->ix, &a, &ino);
	if (rc == 0 && !replace)
		rc = idx_dentry_add(fs->ix, dir, base, ino);
	if (rc == 0)
		rc = idx_file_set_content(fs->ix, ino, ext, n,
					  (uint64_t)json_integer_value(json_object_get(f, "size")),
					  hex ? h.b : NULL, a.mtime_ns, NULL, NULL);
	if (rc == 0) {
		/* set_content keeps the flags; restore the writer's verdict (valid, malformed) */
		struct idx_inode b;

		if ((rc = idx_inode_get(fs->ix, ino, &b)) == 0) {
			b.flags = a.flags;
			rc = idx_inode_update(fs->ix, &b);
		}
	}
	free(ext);
	return rc;
}

/*
 * The step of part p, as this node has it complete; created complete when this node has no
 * part of it (a node that starts with an empty store: its own part is on the remote only).
 * *ret_dir: the directory its manifests' paths are relative to (MindFormers 1.0, which has no
 * step directory: the root). An InternEvo slot ("snapshot/K", layout.h) is made as its
 * directory only where none is: a slot directory this node has is the step engine's to judge.
 * Its row here holding none of this node's files (a slot this node shows only) takes the number
 * of the version shown, as the sealing node's marker numbered it (steps_slot.c invariant 1).
 * fs->mu held, in a transaction.
 */
static int local_step(struct ckfs *fs, const struct node_part *p, int64_t now,
		      struct idx_step *ret, uint64_t *ret_dir)
{
	const struct layout_desc *d = layout_desc(p->kind);
	bool mf1 = d->per_rank, slot = d->slot_dir && strchr(p->name, '/');
	uint64_t dir = IDX_ROOT_INO;
	int64_t id;
	int rc = idx_step_by_name(fs->ix, p->kind, p->name, ret);

	if (rc == 0) {
		*ret_dir = mf1 ? IDX_ROOT_INO : ret->dir_ino;
		if (ret->state != IDX_STEP_COMPLETE || !(mf1 || ret->dir_ino))
			return -EBUSY;
		if (slot && ret->step != p->step) {
			if (node_own_files(fs, ret->dir_ino, ret->name))
				return -EBUSY; /* this node's ranks wrote another version */
			if ((rc = idx_step_set_number(fs->ix, ret->id, p->step)) < 0)
				return rc;
			ret->step = p->step;
		}
		return 0;
	}
	if (rc != -ENOENT)
		return rc;
	if (strchr(p->name, '/')) {
		uint64_t top, cur;

		if (!slot)
			return -EINVAL;
		if (idx_dentry_lookup(fs->ix, IDX_ROOT_INO, d->slot_dir, &top) == 0 &&
		    idx_dentry_lookup(fs->ix, top, strchr(p->name, '/') + 1, &cur) == 0)
			return -EBUSY;
	}
	struct idx_step probe = { .kind = p->kind, .step = p->step };

	snprintf(probe.name, sizeof(probe.name), "%s", p->name);
	if (mf1 && policy_node_step(&probe) != p->step)
		return -EINVAL; /* its name and its number disagree: not a step of the layout */
	if ((!mf1 && (rc = mkdirs(fs, IDX_ROOT_INO, p->name, now, &dir)) < 0) ||
	    (rc = idx_step_create(fs->ix, p->kind, p->name,
				  policy_node_step_number(p->kind, p->step), mf1 ? 0 : dir, now,
				  &id)) < 0 ||
	    (rc = idx_step_set_state(fs->ix, id, IDX_STEP_SEALED, now, "sealed on another node")) <
		    0 ||
	    (rc = idx_step_set_state(fs->ix, id, IDX_STEP_COMPLETE, now,
				     "complete on every node (from the remote)")) < 0)
		return rc;
	*ret_dir = dir;
	return idx_step_get(fs->ix, id, ret);
}

/*
 * May file f of part p go into the namespace? A MindFormers 1.0 part's paths are at the root
 * (manifest.c): only a rank's file of p's step, rank_N/{prefix}-{epoch}_{step}.ckpt under its
 * final name, so that a manifest never names another file of the root. Other layouts' paths are
 * inside the step's directory (show_file checks them).
 */
static bool file_fits(const struct node_part *p, json_t *f)
{
	const char *path = json_string_value(json_object_get(f, "path"));
	struct layout_match m;
	struct idx_step probe = { .kind = p->kind };

	if (!layout_desc(p->kind)->per_rank)
		return true;
	snprintf(probe.name, sizeof(probe.name), "%s", p->name);
	return path && layout_classify(path, p->kind, &m) == 0 && (int)m.kind == p->kind &&
	       m.role == ROLE_STEP_FILE && !(m.flags & LAYOUT_F_TMP) && m.rank >= 0 &&
	       strchr(path, '/') == strrchr(path, '/') && policy_node_step(&probe) == p->step &&
	       m.epoch >= 0 && m.epoch < INT32_MAX && m.step >= 0 &&
	       m.step < POLICY_MF1_EPOCH_SPAN && m.epoch * POLICY_MF1_EPOCH_SPAN + m.step == p->step;
}

/* Keep global step k unnamed by every tracker (n->unlisted) until a part of it changes: a check
 * over every node's files found one missing. Takes the node lock. */
static void keep_unnamed(struct node *n, const struct node_key *k)
{
	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	node_key_add(&n->unlisted, &n->capunlisted, &n->nunlisted, k->kind, k->step);
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
}

/*
 * MindFormers 1.0's resume reads every rank's file of the step meta.json names (mindformers
 * utils/resume_ckpt_utils.py get_resume_ckpt_list: the steps whose files exist for all ranks):
 * once every node's files of global step k are shown, check that every rank of the world has its
 * file (steps_mf1_whole), the check one node makes of its own steps. A rank with none (it wrote
 * nothing of the step, or its node published before the file landed and has not published
 * again yet) keeps the step unnamed (n->unlisted) until a part of it changes. Returns 0,
 * -ENODATA (logged), or an -errno.
 */
static int mf1_whole_everywhere(struct node *n, const struct node_key *k)
{
	struct ckfs *fs = n->fs;
	char name[IDX_STEP_NAME_MAX + 1] = "";
	struct idx_step s;
	size_t lo, hi;
	int rc, rank = -1;

	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	node_step_range(n, k->kind, k->step, &lo, &hi);
	if (lo < hi)
		memcpy(name, n->parts[lo].name, sizeof(name));
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	rc = idx_step_by_name(fs->ix, k->kind, name, &s);
	if (rc == 0)
		rc = steps_mf1_whole(fs, &s, &rank);
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	if (rc < 0)
		return rc;
	if (rc == 0) {
		keep_unnamed(n, k);
		node_set_error(n, "step '%s': rank %d has no file of it on any node; no meta.json "
			       "names the step", name, rank);
		return -ENODATA;
	}
	return 0;
}

/*
 * MindFormers 2.0's metadata.json lists every rank's files, of every node (verify_ckpt_valid in
 * mindformers checkpoint/checkpoint.py @ 8d9e5d7): once every node's files of step k are shown,
 * check the list against all of them (each node checks only what it holds before that,
 * steps_judge.c step_facts). metadata.json's chunks are fetched first, without fs->mu. Returns
 * 0, or -ENODATA (a name no node published: the step is not shown, so no tracker names it;
 * logged) or an -errno.
 */
static int listed_everywhere(struct node *n, const struct node_key *k)
{
	struct ckfs *fs = n->fs;
	char missing[NAME_MAX + 64] = "", name[IDX_STEP_NAME_MAX + 1] = "";
	struct idx_extent *ext = NULL;
	struct idx_step s;
	struct store_hash h;
	size_t next = 0, lo, hi;
	uint64_t ino;
	uint8_t one;
	int rc;

	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	node_step_range(n, k->kind, k->step, &lo, &hi);
	if (lo < hi)
		memcpy(name, n->parts[lo].name, sizeof(name));
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	rc = idx_step_by_name(fs->ix, k->kind, name, &s);
	if (rc == 0 && layout_desc(k->kind)->names_list &&
	    idx_dentry_lookup(fs->ix, s.dir_ino, layout_desc(k->kind)->names_list, &ino) == 0)
		idx_file_extents(fs->ix, ino, &ext, &next);
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < next; i++) { /* a read fetches a chunk another node wrote */
		memcpy(h.b, ext[i].hash, STORE_HASH_LEN);
		store_chunk_pread(fs->st, &h, &one, 1, 0);
	}
	free(ext);
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	rc = policy_listed_names(fs->ix, fs->st, &s, missing, sizeof(missing));
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	if (rc < 0)
		return rc;
	if (rc == 0) {
		keep_unnamed(n, k);
		node_set_error(n, "step '%s': metadata.json names '%s', which no node published; "
			       "no tracker names the step", name, missing);
		return -ENODATA;
	}
	return 0;
}

/* Put the files of every node's manifest of global step k that this node's namespace lacks
 * into it (show_file skips the names it has). */
static int show_step(struct node *n, const struct node_key *k)
{
	struct ckfs *fs = n->fs;
	struct node_part *v = NULL;
	size_t nv = 0, capv = 0;
	int rc = 0;

	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	for (size_t i = 0; i < n->nparts; i++)
		if (n->parts[i].kind == k->kind && n->parts[i].step == k->step &&
		    !n->parts[i].stale && ckpt_grow(&v, &capv, nv, sizeof(*v)) == 0)
			v[nv++] = n->parts[i];
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	for (size_t i = 0; rc == 0 && i < nv; i++) {
		char key[REMOTE_KEY_MAX + 1];
		struct idx_step s;
		uint64_t dir = 0;
		json_t *m, *f;
		size_t len, j;
		void *buf;

		/* this node's own manifest too: after its store was lost, its part is there only */
		node_manifest_key(key, sizeof(key), v[i].kind, v[i].step, v[i].node,
				  v[i].version, v[i].unpadded);
		if ((rc = remote_get(n->r, key, &buf, &len)) < 0)
			break;
		m = json_loadb(buf, len, 0, NULL);
		free(buf);
		if (!m) {
			rc = -EBADMSG;
			break;
		}
		int64_t now = ckfs_now(fs);

		ckpt_lock(&fs->mu, CKPT_RANK_FS);
		if ((rc = idx_begin(fs->ix)) == 0) {
			rc = local_step(fs, &v[i], now, &s, &dir);
			json_array_foreach(json_object_get(m, "files"), j, f)
			{
				if (rc < 0)
					break;
				rc = file_fits(&v[i], f) ? show_file(fs, dir, f, now) : -EBADMSG;
			}
			if (rc >= 0)
				rc = idx_commit(fs->ix);
			if (rc < 0)
				idx_rollback(fs->ix);
		}
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
		json_decref(m);
	}
	free(v);
	if (rc == 0 && layout_desc(k->kind)->names_list)
		rc = listed_everywhere(n, k);
	if (rc == 0 && layout_desc(k->kind)->per_rank)
		rc = mf1_whole_everywhere(n, k);
	return rc;
}

/* Show every global step not shown yet (its other nodes' files). */
void node_show_global(struct node *n)
{
	struct node_key *todo = NULL;
	size_t nt = 0, capt = 0;

	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	size_t kind_end = n->nglobal;

	/* backwards: global is sorted by (kind, step), so the steps newer than global[i] of its
	 * kind are global[i + 1, kind_end) */
	for (size_t i = n->nglobal; i-- > 0;) {
		const struct node_key g = n->global[i];
		size_t newer;

		if (i + 1 < n->nglobal && n->global[i + 1].kind != g.kind)
			kind_end = i + 1;
		newer = kind_end - i - 1;
		if (node_key_in(n->shown, n->nshown, g.kind, g.step) ||
		    node_key_in(n->unlisted, n->nunlisted, g.kind, g.step))
			continue;
		if (steps_settings(n->fs)->keep_max && newer >= steps_settings(n->fs)->keep_max) {
			/* retention has no room for it: never shown again (after a restart, a step
			 * pruned here long ago stays pruned) */
			node_key_add(&n->shown, &n->capshown, &n->nshown, g.kind, g.step);
			continue;
		}
		if (ckpt_grow(&todo, &capt, nt, sizeof(*todo)) == 0)
			todo[nt++] = g;
	}
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	for (size_t i = 0; i < nt; i++) {
		ckpt_fault("node-show");
		int rc = show_step(n, &todo[i]);

		if (rc == -EBUSY || rc == -ENODATA)
			continue; /* this node's part is not complete here yet; said already */
		if (rc < 0) {
			node_set_error(n, "cannot show step %" PRId64 " of the other nodes: %s",
				  todo[i].step, strerror(-rc));
			continue;
		}
		char name[IDX_STEP_NAME_MAX + 1] = "";

		size_t lo, hi;

		ckpt_lock(&n->mu, CKPT_RANK_NODE);
		node_key_add(&n->shown, &n->capshown, &n->nshown, todo[i].kind, todo[i].step);
		n->parts_changed = true;
		node_step_range(n, todo[i].kind, todo[i].step, &lo, &hi);
		if (lo < hi)
			memcpy(name, n->parts[lo].name, sizeof(name));
		ckpt_unlock(&n->mu, CKPT_RANK_NODE);
		/* every node shows it now: its directory object has done its work (node_dir.c);
		 * MindFormers 1.0 has none */
		if (name[0] && !layout_desc(todo[i].kind)->per_rank)
			node_dir_unpublish(n->fs, name);
		/* a new global step may free a place in retention (rule 5 counts global steps) */
		ckpt_lock(&n->fs->mu, CKPT_RANK_FS);
		steps_retention(n->fs, todo[i].kind);
		ckpt_unlock(&n->fs->mu, CKPT_RANK_FS);
	}
	free(todo);
}
