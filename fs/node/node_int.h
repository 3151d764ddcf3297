/*
 * node_int.h — the node layer's own parts (node.h says what the layer owns): the manifest
 * format (manifest.c) and what the node thread knows of the other nodes (node.c).
 */
#ifndef CKPTFS_FS_NODE_INT_H
#define CKPTFS_FS_NODE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

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

/* A step of one layout. */
struct node_key {
	int kind;
	int64_t step;
};

/* The node layer's state (fs->node); the locking is node.c's invariant 3. */
struct node {
	struct ckfs *fs;
	struct remote *r;
	char name[NODE_NAME_MAX + 1];
	char url[512];
	unsigned nodes;
	pthread_t th;
	bool started; /* th runs (node_start) */
	pthread_mutex_t mu; /* invariant 3 */
	pthread_cond_t cv;
	bool stop;
	struct node_part *parts; /* every manifest known, this node's included; mu */
	size_t nparts, capparts;
	struct node_key *global; /* steps globally complete; mu */
	size_t nglobal, capglobal;
	struct node_key *sealed_here; /* steps this node sealed from another node's seal */
	size_t nsealed, capsealed;
	struct node_key *shown; /* global steps whose other nodes' files are in the namespace */
	size_t nshown, capshown;
	uint64_t published, chunks_sent, chunks_there, bytes_sent; /* mu */
	_Atomic uint64_t chunks_fetched, bytes_fetched;
	char last_error[256]; /* mu */
	struct node_dir_pending {
		char name[IDX_STEP_NAME_MAX + 1];
		mode_t mode;
	} *dirs_pending; /* node_dir.c: step directories to publish again; mu */
	size_t ndirs, capdirs;
};

/* Log a failure of the remote and keep it for .ckptfs/status (printf-style). Takes n->mu. */
void node_set_error(struct node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* node_dirs_retry - publish the step directories whose publish failed (node_dir.c). Node
 * thread; takes n->mu, never fs->mu. */
void node_dirs_retry(struct node *n);

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
