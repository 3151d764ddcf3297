/*
 * node.h — the node layer: this daemon's part of a job that spans several nodes
 * (-o remote=URL,node=NAME,nodes=N; DESIGN.md "Growing past one machine", policy rule 5).
 *
 * Owns: publishing every step complete on this node to the remote (its chunks first, keyed by
 * digest and written put-if-absent, so data-parallel replicas upload a chunk once; then one
 * manifest of the node's part, put-if-absent, written once); learning the other nodes'
 * manifests; which steps are globally complete (policy_global_complete); sealing this node's
 * part of a step from a seal another node published (the trainer claims a step after a
 * barrier that every rank passed, so the seal stands for this node's ranks too).
 *
 * Remote layout (under the remote's prefix):
 *   chunks/<32 hex digits>                 one chunk: 1 byte enum store_codec, 4 bytes raw size
 *                                          (little-endian), the payload (store_encode)
 *   manifests/<kind>/<step>/<node>.json    one node's part of one step (node_manifest_json)
 *
 * May call: the step engine (steps.h), the write path, the policy, core, index/, store/ and
 * store/remote/. Called by the FUSE layer (start, stop, status). One thread of its own; the
 * daemon's threads ask node_global_ok (through fs->global_ok) under fs->mu.
 */
#ifndef CKPTFS_FS_NODE_H
#define CKPTFS_FS_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/steps/steps.h"

/* -o remote=URL, node=NAME, nodes=N (node defaults to the hostname). */
struct node_cfg {
	const char *url;  /* s3://BUCKET/PREFIX or a shared directory (store/remote/remote.h) */
	const char *name; /* this node's name, unique in the job; NULL: the hostname */
	unsigned nodes;   /* nodes in the job, >= 1 */
};

/* The longest node name, bytes (a path component of the manifests' keys). */
#define NODE_NAME_MAX 63

/*
 * node_start - open the remote (checking it answers: a wrong endpoint, bucket or credentials
 * fail here, with err saying which and what to do), start the node thread, and wire
 * fs->global_ok so that trackers resolve to globally complete steps only.
 * err: errlen bytes, filled on failure. Returns 0, -EINVAL (a bad name or nodes), or the
 * remote's -errno. No lock held; call after steps_start.
 */
int node_start(struct ckfs *fs, const struct node_cfg *cfg, char *err, size_t errlen);

/* node_stop - stop the thread and close the remote (no-op without node_start). No lock held. */
void node_stop(struct ckfs *fs);

/*
 * node_status - the node layer's lines for .ckptfs/status into buf (cap bytes): the remote,
 * this node, the steps published, and per known step which nodes have published and whether it
 * is globally complete. Returns the length written (truncated at cap - 1), 0 without a remote.
 * Takes the node lock only.
 */
size_t node_status(struct ckfs *fs, char *buf, size_t cap);

#endif /* CKPTFS_FS_NODE_H */
