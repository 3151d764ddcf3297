/*
 * node_int.h — the node layer's own parts (node.h says what the layer owns): the manifest
 * format (manifest.c) and what the node thread knows of the other nodes (node.c).
 */
#ifndef CKPTFS_FS_NODE_INT_H
#define CKPTFS_FS_NODE_INT_H

#include <jansson.h>

#include "fs/node/node.h"
#include "store/remote/remote.h"

#define NODE_MANIFEST_FORMAT "ckptfs-manifest/1"

/* One published manifest, as the node thread keeps it. */
struct node_part {
	char node[NODE_NAME_MAX + 1];
	char name[IDX_STEP_NAME_MAX + 1]; /* the step directory's name */
	int kind;                          /* enum layout_kind */
	int64_t step;
	bool sealed;                       /* it carries the seal (policy rule 5) */
};

/*
 * node_manifest_json - this node's manifest of step s (its directory's tree: dirs, files, their
 * extents), format at the top of manifest.c. sealed: this node saw the step's claim itself.
 * Returns a new reference, or NULL (out of memory, an index error, a tree deeper than
 * STEPS_TREE_DEPTH_MAX). fs->mu held (reads the index).
 */
json_t *node_manifest_json(struct ckfs *fs, const struct idx_step *s, const char *node,
			   unsigned nodes, bool sealed);

/*
 * node_manifest_parse - the fields rule 5 needs from a manifest's len bytes at buf into *ret.
 * Returns 0, or -EBADMSG with err (errlen bytes) saying what is wrong. Pure, thread-safe.
 */
int node_manifest_parse(const void *buf, size_t len, struct node_part *ret, char *err,
			size_t errlen);

#endif /* CKPTFS_FS_NODE_INT_H */
