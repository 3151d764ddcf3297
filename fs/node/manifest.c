/*
 * manifest.c — one node's part of one step as a JSON document (node_int.h; policy rule 5).
 *
 * Format "ckptfs-manifest/1":
 *   { "format": "ckptfs-manifest/1", "node": NAME, "nodes": N, "kind": K, "layout": "megatron",
 *     "step": S, "name": "iter_0000100", "sealed": true|false, "created_ns": T,
 *     "version": HEX,                                     which save of the step (below)
 *     "dirs":  [ "mp_rank_00", ... ],                    paths relative to the step directory
 *     "files": [ { "path": "mp_rank_00/model_optim_rng.pt", "size": BYTES, "mode": 420,
 *                  "mtime_ns": T, "flags": IDX_INODE_* bits, "xxh3_128": HEX or null,
 *                  "extents": [ [OFFSET, LENGTH, HEX], ... ] }, ... ] }
 * Every extent is one whole chunk (idx_extent): LENGTH is its raw size, HEX its XXH3-128.
 * "step" is the step's number across nodes (policy_node_step): for MindFormers 1.0, whose step
 * restarts every epoch, epoch * 2^32 + step, the name saying "{epoch}_{step}". MindFormers 1.0
 * has no step directory: its paths are relative to the mount root, each rank's file of the step
 * under its final name, "rank_3/llama_rank_3-1_400.ckpt", and "dirs" the rank_N holding them.
 * "version" is the XXH3-128 of the compact, key-sorted JSON text of "files": the same files with
 * the same bytes and times give the same version, so a part fetched back from the remote (a
 * node whose store was lost) is recognised as the one published, and a step saved again is a
 * new version. Manifests without it (published before versions) read as version "".
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/node/node_int.h"
#include "fs/policy/policy.h"

/* The manifest entry of file ino at path; NULL with *foreign set when another node's. */
static json_t *file_json(struct idx *ix, const char *path, uint64_t ino, bool *foreign)
{
	char hex[2 * STORE_HASH_LEN + 1];
	struct idx_extent *ext = NULL;
	struct store_hash h;
	struct idx_inode a;
	json_t *f, *xs;
	size_t n = 0;

	*foreign = false;
	if (idx_inode_get(ix, ino, &a) < 0)
		return NULL;
	if (a.flags & IDX_INODE_FOREIGN) {
		*foreign = true; /* shown from another node's manifest: its part, not ours */
		return NULL;
	}
	if (idx_file_extents(ix, ino, &ext, &n) < 0)
		return NULL;
	xs = json_array();
	for (size_t i = 0; xs && i < n; i++) {
		memcpy(h.b, ext[i].hash, STORE_HASH_LEN);
		if (json_array_append_new(xs, json_pack("[I, I, s]", (json_int_t)ext[i].offset,
							(json_int_t)ext[i].length,
							store_hash_hex(&h, hex))) < 0) {
			json_decref(xs);
			xs = NULL;
		}
	}
	free(ext);
	if (!xs)
		return NULL;
	memcpy(h.b, a.hash, STORE_HASH_LEN);
	f = json_pack("{s:s, s:I, s:i, s:I, s:i, s:s?, s:o}", "path", path, "size",
		      (json_int_t)a.size, "mode", (int)(a.mode & 07777), "mtime_ns",
		      (json_int_t)a.mtime_ns, "flags", (int)a.flags, "xxh3_128",
		      a.has_hash ? store_hash_hex(&h, hex) : NULL, "extents", xs);
	return f;
}

/* node_file_fn of the manifest: file path (inode ino) appended to files (arg) unless another
 * node wrote it (IDX_INODE_FOREIGN: its own manifest names it). */
static int manifest_file(struct ckfs *fs, const char *path, uint64_t ino, void *arg)
{
	bool foreign;
	json_t *f = file_json(fs->ix, path, ino, &foreign);

	if (foreign)
		return 0;
	return f && json_array_append_new(arg, f) == 0 ? 1 : -EIO;
}

/* One walk of a part (node_part_walk). */
struct part_walk {
	struct ckfs *fs;
	json_t *dirs; /* NULL: not collected */
	node_file_fn fn;
	void *arg;
};

/* Add the tree under dir (its paths prefixed by pre) to w: each regular file through w->fn,
 * and with w->dirs its directories; *own counts the entries that are this node's (a directory
 * holding only other nodes' files is not). */
static int walk(struct part_walk *w, uint64_t dir, const char *pre, int depth, size_t *own)
{
	struct steps_entries e = { 0 };
	int rc = steps_dir_entries(w->fs, dir, depth, &e);

	for (size_t i = 0; rc >= 0 && i < e.n; i++) {
		char path[LAYOUT_PATH_MAX];

		if (snprintf(path, sizeof(path), "%s%s%s", pre, *pre ? "/" : "", e.names[i]) >=
		    (int)sizeof(path)) {
			rc = -ENAMETOOLONG;
			break;
		}
		if (S_ISDIR(e.modes[i])) {
			size_t below = 0, at = w->dirs ? json_array_size(w->dirs) : 0;

			rc = walk(w, e.inos[i], path, depth + 1, &below);
			/* the directory before what is below it; an empty one is this node's */
			if (rc >= 0 && w->dirs &&
			    (below || idx_dir_is_empty(w->fs->ix, e.inos[i]) == 1)) {
				if (json_array_insert_new(w->dirs, at, json_string(path)) < 0)
					rc = -ENOMEM;
				(*own)++;
			}
		} else if (S_ISREG(e.modes[i])) {
			if ((rc = w->fn(w->fs, path, e.inos[i], w->arg)) > 0)
				(*own)++;
		}
	}
	steps_dir_entries_free(&e);
	return rc < 0 ? rc : 0;
}

/*
 * MindFormers 1.0's part (no step directory, steps_mf1.c): this node's files of step s, each
 * rank_N/{prefix}-{epoch}_{step}.ckpt|.safetensors at the root under its final name (a .tmp is a
 * save in progress, MindSpore _exec_save renames it), through w->fn, and the rank_N holding one
 * into w->dirs.
 */
static int walk_mf1(struct part_walk *w, const struct idx_step *s)
{
	struct steps_entries top = { 0 };
	int64_t epoch, step;
	int rc;

	if (!policy_mf1_key(s, &epoch, &step))
		return -EINVAL;
	rc = steps_dir_entries(w->fs, IDX_ROOT_INO, 0, &top);
	for (size_t i = 0; rc >= 0 && i < top.n; i++) {
		struct steps_entries e = { 0 };
		struct layout_match m;
		size_t mine = 0;

		if (!S_ISDIR(top.modes[i]) ||
		    layout_classify(top.names[i], layout_per_rank_kind(), &m) < 0 ||
		    !layout_desc(m.kind)->per_rank || m.role != ROLE_PLAIN || m.rank < 0)
			continue;
		rc = steps_dir_entries(w->fs, top.inos[i], 1, &e);
		for (size_t j = 0; rc >= 0 && j < e.n; j++) {
			char path[LAYOUT_PATH_MAX];

			snprintf(path, sizeof(path), "%s/%s", top.names[i], e.names[j]);
			if (!S_ISREG(e.modes[j]) ||
			    layout_classify(path, layout_per_rank_kind(), &m) < 0 ||
			    m.role != ROLE_STEP_FILE || (m.flags & LAYOUT_F_TMP) ||
			    m.epoch != epoch || m.step != step)
				continue;
			if ((rc = w->fn(w->fs, path, e.inos[j], w->arg)) > 0)
				mine++;
		}
		steps_dir_entries_free(&e);
		if (rc >= 0 && mine && w->dirs &&
		    json_array_append_new(w->dirs, json_string(top.names[i])) < 0)
			rc = -ENOMEM;
	}
	steps_dir_entries_free(&top);
	return rc < 0 ? rc : 0;
}

int node_part_walk(struct ckfs *fs, const struct idx_step *s, json_t *dirs, node_file_fn fn,
		   void *arg)
{
	struct part_walk w = { .fs = fs, .dirs = dirs, .fn = fn, .arg = arg };
	size_t own = 0;

	/* a per-rank (MF1) row has no directory, unless retention kept its files
	 * (steps_mf1_before_remove) */
	if (layout_desc(s->kind)->per_rank && s->dir_ino == 0)
		return walk_mf1(&w, s);
	return walk(&w, s->dir_ino, "", 0, &own);
}

char *node_manifest_key(char *key, size_t cap, int kind, int64_t step, const char *node,
			const char *version, bool unpadded)
{
	int w = unpadded ? 0 : NODE_STEP_DIGITS;

	if (version[0])
		snprintf(key, cap, "manifests/%d/%0*" PRId64 "/%s/%s.json", kind, w, step, node,
			 version);
	else
		snprintf(key, cap, "manifests/%d/%0*" PRId64 "/%s.json", kind, w, step, node);
	return key;
}

/* The version of a part: XXH3-128 of its "files" as compact, key-sorted JSON (top of file). */
static int part_version(json_t *files, char out[NODE_VERSION_LEN + 1])
{
	char *text = json_dumps(files, JSON_COMPACT | JSON_SORT_KEYS);
	struct store_hash h;

	if (!text)
		return -ENOMEM;
	store_hash_buf(text, strlen(text), &h);
	free(text);
	store_hash_hex(&h, out);
	return 0;
}

json_t *node_manifest_json(struct ckfs *fs, const struct idx_step *s, const char *node,
			   unsigned nodes, bool sealed, bool empty, size_t *ret_files)
{
	json_t *dirs = json_array(), *files = json_array(), *m;
	const char *layout = s->kind >= 0 && s->kind < LAYOUT_KIND_COUNT
				     ? layout_name((enum layout_kind)s->kind)
				     : "?";
	char version[NODE_VERSION_LEN + 1];
	int64_t step = policy_node_step(s);

	if (!dirs || !files || step < 0 ||
	    (!empty && node_part_walk(fs, s, dirs, manifest_file, files) < 0) ||
	    part_version(files, version) < 0) {
		json_decref(dirs);
		json_decref(files);
		return NULL;
	}
	*ret_files = json_array_size(files);
	m = json_pack("{s:s, s:s, s:i, s:i, s:s, s:I, s:o, s:b, s:I, s:s, s:o, s:o}", "format",
		      NODE_MANIFEST_FORMAT, "node", node, "nodes", (int)nodes, "kind", s->kind,
		      "layout", layout, "step", (json_int_t)step, "name", policy_json_name(s->name),
		      "sealed", (int)sealed, "created_ns", (json_int_t)s->created_ns, "version",
		      version, "dirs", dirs, "files", files);
	return m;
}

int node_manifest_parse(const void *buf, size_t len, struct node_part *ret, char *err,
			size_t errlen)
{
	json_error_t je;
	json_t *m = json_loadb(buf, len, 0, &je);
	const char *format = NULL, *node = NULL, *name = NULL, *version = "";
	json_int_t kind = -1, step = -1, created = 0, nodes = 0;
	int sealed = 0;

	if (!m) {
		snprintf(err, errlen, "not JSON: %s (line %d)", je.text, je.line);
		return -EBADMSG;
	}
	if (json_unpack_ex(m, &je, 0, "{s:s, s:s, s:I, s:I, s:s, s:b, s?:I, s?:I, s?:s}", "format",
			   &format, "node", &node, "kind", &kind, "step", &step, "name", &name,
			   "sealed", &sealed, "created_ns", &created, "nodes", &nodes, "version",
			   &version) < 0 ||
	    strcmp(format, NODE_MANIFEST_FORMAT) != 0 || kind < 0 || kind >= LAYOUT_KIND_COUNT ||
	    step < 0 || strlen(node) > NODE_NAME_MAX || strlen(name) > IDX_STEP_NAME_MAX ||
	    nodes < 0 || nodes > UINT_MAX ||
	    (version[0] && (strlen(version) != NODE_VERSION_LEN ||
			    strspn(version, "0123456789abcdef") != NODE_VERSION_LEN))) {
		snprintf(err, errlen, "not a %s manifest: %s", NODE_MANIFEST_FORMAT,
			 format && strcmp(format, NODE_MANIFEST_FORMAT) ? "unknown format"
									 : je.text);
		json_decref(m);
		return -EBADMSG;
	}
	memset(ret, 0, sizeof(*ret));
	snprintf(ret->node, sizeof(ret->node), "%s", node);
	snprintf(ret->name, sizeof(ret->name), "%s", name);
	ret->kind = (int)kind;
	ret->step = step;
	ret->sealed = sealed != 0;
	ret->created_ns = created;
	ret->nodes = (unsigned)nodes;
	memcpy(ret->version, version, strlen(version) + 1);
	json_decref(m);
	return 0;
}
