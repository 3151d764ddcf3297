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
 *   chunks/<32 hex digits>                 one chunk, as store_object_encode makes it (store.h:
 *                                          codec, raw size, store_encode's payload)
 *   manifests/<kind>/<step>/<node>/<version>.json
 *                                          one node's part of one step (node_manifest_json),
 *                                          the step zero-padded to 20 digits so that keys sort
 *                                          by step (node_int.h NODE_STEP_DIGITS)
 *   dirs/<name>                            a step directory made during a save (node_dir.c)
 *   uploads/<node>/<kind>-<step>           a publish in progress (a lease, lease.h;
 *                                          node_publish.c upload_begin)
 *   gc/lease                               a gc runs, a node's or `ckptctl STORE remote gc`
 *                                          (a lease, lease.h; rgc.h)
 *   gc/takeover/<host>-<pid>-<created_ns>  a gc takes over that stale gc/lease (rgc.h
 *                                          RGC_CLAIM_PREFIX), removed with its own lease,
 *                                          or when left, by a later gc once older than
 *                                          the lease expiry
 *
 * May call: the step engine (steps.h), the write path, the policy, core, index/, store/ and
 * store/remote/. Called by the FUSE layer (start, stop, status). One thread of its own; the
 * daemon's threads ask fs->up.global_ok (node.c global_ok) under fs->mu.
 */
#ifndef CKPTFS_FS_NODE_H
#define CKPTFS_FS_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fs/core/prom.h"
#include "fs/steps/steps.h"

/* -o remote=URL, node=NAME, nodes=N (node defaults to the hostname). */
struct node_cfg {
	const char *url;  /* s3://BUCKET/PREFIX or a shared directory (store/remote/remote.h) */
	const char *name; /* this node's name, unique in the job; NULL: the hostname */
	unsigned nodes;   /* nodes in the job, >= 1 */
	bool gc_off;      /* -o remote_gc=off: the node thread never runs the remote's gc */
};

/* The longest node name, bytes (a path component of the manifests' keys). */
#define NODE_NAME_MAX 63

/*
 * node_open - open the remote (checking it answers: a wrong endpoint, bucket or credentials
 * fail here, with err saying which and what to do), record it in STORE/REMOTE_STORE_RECORD
 * (remote.h; a failure is logged, not fatal), let the store fetch missing chunks from it, so
 * that the step engine's checks at mount (steps_init) find the other nodes' chunks, and wire
 * fs->up.global_ok, so that trackers and retention count globally complete steps only.
 * err: errlen bytes, filled on failure. Returns 0, -EINVAL (a bad name or nodes), or the
 * remote's -errno. No lock held; call once the store is open, before steps_init.
 */
int node_open(struct ckfs *fs, const struct node_cfg *cfg, char *err, size_t errlen);

/*
 * node_prime - before the mount: learn the remote's manifests and show the other nodes' files
 * of every global step (what the node thread does at each tick), so that the first tracker read
 * after a restart names the newest global step; a trainer finding no tracker starts from
 * scratch. node_open wired fs->up.global_ok: until this returns, no step counts as global.
 * Takes the remote's time: one list and one read per manifest not known yet, one more per
 * manifest of a step to show. A remote error is logged and shown in .ckptfs/status (the node
 * thread tries again); never fails. No lock held; call after steps_init, before node_start.
 */
void node_prime(struct ckfs *fs);

/*
 * node_start - start the node thread. Returns 0, or -errno with err filled (pthread_create).
 * No lock held; call after node_prime, before serving requests.
 */
int node_start(struct ckfs *fs, char *err, size_t errlen);

/* node_stop - stop the thread and close the remote (no-op without node_open). No lock held. */
void node_stop(struct ckfs *fs);

/*
 * Step directories shared while a save runs (node_dir.c says why and what it costs). Each is a
 * no-op returning 0 without a remote. None takes fs->mu; call them without it (they wait on
 * the network, each for at most NODE_DIR_DEADLINE_MS, 5 s, retries included: node_dir.c).
 *
 * node_dir_publish - step directory name (an entry of the root, 1..IDX_STEP_NAME_MAX bytes)
 * was made here with mode (permission bits): put dirs/<name> on the remote, so that the other
 * nodes' node_dir_lookup finds it. Returns 0 (also when another node published it first), or
 * the remote's -errno (-ETIMEDOUT when it did not answer in time, -EACCES when it rejected the
 * credentials, ...): then logged with the remote's explanation, shown in .ckptfs/status and
 * retried by the node thread; the caller's mkdir stands.
 *
 * node_dir_lookup - a lookup at the root missed name: did another node publish it?
 * Returns 1 and *ret_mode (permission bits), 0 (not published), or -ENAMETOOLONG or the
 * remote's -errno, -ETIMEDOUT included (logged with the remote's explanation; the caller
 * answers ENOENT, so a rank saves locally as when the remote is down: node_dir.c invariant 2).
 *
 * node_dir_unpublish - name was removed at the root (or its step is globally complete): delete
 * dirs/<name> and forget a publish still to retry. Errors are logged.
 */
int node_dir_publish(struct ckfs *fs, const char *name, mode_t mode);
int node_dir_lookup(struct ckfs *fs, const char *name, mode_t *ret_mode);
void node_dir_unpublish(struct ckfs *fs, const char *name);

/*
 * node_status - the node layer's lines for .ckptfs/status into buf (cap bytes): the remote,
 * this node, the steps published, the last remote error, the gc lease when the last upload
 * found one (a stale one ignored, or a live one waited for), and per known step which nodes
 * have published and whether it is globally complete. Returns the length written (truncated at cap - 1), 0 without a remote.
 * Takes the node lock only.
 */
size_t node_status(struct ckfs *fs, char *buf, size_t cap);

/*
 * node_metrics - append the node layer's series to p (fs/core/prom.h):
 * ckptfs_remote_bytes_total{direction="up"|"down"}, ckptfs_remote_chunks_total,
 * ckptfs_remote_steps{state="published"|"global"}, ckptfs_remote_last_global_step{layout},
 * ckptfs_remote_upload_lag_seconds, ckptfs_remote_errors_total{kind}, ckptfs_remote_nodes_disagree,
 * ckptfs_remote_older_node.
 * Nothing without a remote; an allocation failure is left in p->err. Takes the node lock only.
 */
void node_metrics(struct ckfs *fs, struct ckpt_text *p);

#endif /* CKPTFS_FS_NODE_H */
