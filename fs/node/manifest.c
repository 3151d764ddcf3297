/*
 * manifest.c — one node's part of one step as a JSON document (node_int.h; policy rule 5).
 *
 * Format "ckptfs-manifest/1":
 *   { "format": "ckptfs-manifest/1", "node": NAME, "nodes": N, "kind": K, "layout": "megatron",
 *     "step": S, "name": "iter_0000100", "sealed": true|false, "created_ns": T,
 *     "dirs":  [ "mp_rank_00", ... ],                    paths relative to the step directory
 *     "files": [ { "path": "mp_rank_00/model_optim_rng.pt", "size": BYTES, "mode": 420,
 *                  "mtime_ns": T, "flags": IDX_INODE_* bits, "xxh3_128": HEX or null,
 *                  "extents": [ [OFFSET, LENGTH, HEX], ... ] }, ... ] }
 * Every extent is one whole chunk (idx_extent): LENGTH is its raw size, HEX its XXH3-128.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/node/node_int.h"
#include "fs/policy/policy.h"

static json_t *file_json(struct idx *ix, const char *path, uint64_t ino)
{
	char hex[2 * STORE_HASH_LEN + 1];
	struct idx_extent *ext = NULL;
	struct store_hash h;
	struct idx_inode a;
	json_t *f, *xs;
	size_t n = 0;

	if (idx_inode_get(ix, ino, &a) < 0 || idx_file_extents(ix, ino, &ext, &n) < 0)
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

/* Add the tree under dir (its paths prefixed by pre) to dirs and files. */
static int walk(struct ckfs *fs, uint64_t dir, const char *pre, json_t *dirs, json_t *files,
		int depth)
{
	struct steps_entries e = { 0 };
	int rc = steps_dir_entries(fs, dir, depth, &e);

	for (size_t i = 0; rc >= 0 && i < e.n; i++) {
		char path[LAYOUT_PATH_MAX];

		if (snprintf(path, sizeof(path), "%s%s%s", pre, *pre ? "/" : "", e.names[i]) >=
		    (int)sizeof(path)) {
			rc = -ENAMETOOLONG;
			break;
		}
		if (S_ISDIR(e.modes[i])) {
			if (json_array_append_new(dirs, json_string(path)) < 0)
				rc = -ENOMEM;
			else
				rc = walk(fs, e.inos[i], path, dirs, files, depth + 1);
		} else if (S_ISREG(e.modes[i])) {
			json_t *f = file_json(fs->ix, path, e.inos[i]);

			if (!f || json_array_append_new(files, f) < 0)
				rc = -EIO;
		}
	}
	steps_dir_entries_free(&e);
	return rc < 0 ? rc : 0;
}

json_t *node_manifest_json(struct ckfs *fs, const struct idx_step *s, const char *node,
			   unsigned nodes, bool sealed)
{
	json_t *dirs = json_array(), *files = json_array(), *m;
	const char *layout = s->kind >= 0 && s->kind < LAYOUT_KIND_COUNT
				     ? layout_name((enum layout_kind)s->kind)
				     : "?";

	if (!dirs || !files || walk(fs, s->dir_ino, "", dirs, files, 0) < 0) {
		json_decref(dirs);
		json_decref(files);
		return NULL;
	}
	m = json_pack("{s:s, s:s, s:i, s:i, s:s, s:I, s:o, s:b, s:I, s:o, s:o}", "format",
		      NODE_MANIFEST_FORMAT, "node", node, "nodes", (int)nodes, "kind", s->kind,
		      "layout", layout, "step", (json_int_t)s->step, "name", policy_json_name(s->name),
		      "sealed", (int)sealed, "created_ns", (json_int_t)s->created_ns, "dirs", dirs,
		      "files", files);
	return m;
}

int node_manifest_parse(const void *buf, size_t len, struct node_part *ret, char *err,
			size_t errlen)
{
	json_error_t je;
	json_t *m = json_loadb(buf, len, 0, &je);
	const char *format = NULL, *node = NULL, *name = NULL;
	json_int_t kind = -1, step = -1;
	int sealed = 0;

	if (!m) {
		snprintf(err, errlen, "not JSON: %s (line %d)", je.text, je.line);
		return -EBADMSG;
	}
	if (json_unpack_ex(m, &je, 0, "{s:s, s:s, s:I, s:I, s:s, s:b}", "format", &format, "node",
			   &node, "kind", &kind, "step", &step, "name", &name, "sealed",
			   &sealed) < 0 ||
	    strcmp(format, NODE_MANIFEST_FORMAT) != 0 || kind < 0 || kind >= LAYOUT_KIND_COUNT ||
	    step < 0 || strlen(node) > NODE_NAME_MAX || strlen(name) > IDX_STEP_NAME_MAX) {
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
	json_decref(m);
	return 0;
}
