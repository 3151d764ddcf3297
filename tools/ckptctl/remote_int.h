/*
 * remote_int.h — what `ckptctl STORE remote` (remote.c: the report, verify) and `remote gc`
 * (remote_gc.c) share: the steps and chunks read from the remote's manifests, and the rule
 * choosing what gc removes.
 *
 * Main thread only, like the rest of ckptctl.
 */
#ifndef CKPTCTL_REMOTE_INT_H
#define CKPTCTL_REMOTE_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "ctl.h"
#include "fs/node/lease.h"
#include "store/remote/remote.h"

/* One step as the manifests describe it. */
struct r_step {
	int kind;
	int64_t step;
	char name[IDX_STEP_NAME_MAX + 1];
	char nodes[256]; /* "a* b": the nodes that published, '*' on the one(s) with the seal */
	unsigned parts;
	bool sealed;
	uint64_t files, bytes;
};

/* The gc's hold on gc/lease (remote_gc.c r_keep renews it). */
struct r_hold {
	bool held;            /* mine is on the remote: renew it, stop when that fails */
	struct lease mine;    /* as last written */
	int64_t renewed_mono; /* ckpt_mono_ns when mine.renewed_ns was taken */
};

struct r_ctx {
	struct remote *r;
	struct r_step *steps;
	size_t nsteps, capsteps;
	char (*keys)[REMOTE_KEY_MAX + 1]; /* manifests/... keys */
	size_t nkeys, capkeys;
	char (*named)[2 * STORE_HASH_LEN + 1]; /* chunks the manifests name (sorted, unique) */
	size_t nnamed, capnamed;
	uint64_t chunks, chunk_bytes, dirs, unnamed, unnamed_bytes;
	struct r_step *doomed; /* gc: the steps whose manifests go */
	size_t ndoomed, capdoomed;
	struct r_hold hold;    /* gc: its lease */
};

/* r_key_cb - remote_list_fn appending each key to c->keys (arg: the struct r_ctx). Returns 0 or
 * -ENOMEM. */
int r_key_cb(const char *key, uint64_t size, void *arg);

/*
 * r_read_manifests - read every manifest of a step not doomed (c->keys when non-empty, else a
 * listing of manifests/) into c->steps, and the chunks they name into c->named (sorted,
 * unique). A manifest removed since the listing is skipped, one that does not parse is
 * reported and skipped. Calls r_keep between reads. Returns 0, -ENOMEM, -ESTALE (r_keep), or
 * the remote's -errno.
 */
int r_read_manifests(struct r_ctx *c);

/* r_named - whether chunk hex (32 hex digits) is in c->named. */
bool r_named(const struct r_ctx *c, const char *hex);

/* r_key_step - the step of a manifest's key "manifests/<kind>/<step>/<node>.json"; false if
 * the key is not one. */
bool r_key_step(const char *key, int *kind, int64_t *step);

/* r_doomed - whether (kind, step) is among c->doomed. */
bool r_doomed(const struct r_ctx *c, int kind, int64_t step);

/*
 * r_choose_doomed - the steps gc removes, from c->steps into c->doomed: global steps older than
 * the newest keep global ones of their kind (keep 0: none), and steps never global older than
 * the newest global one (a node died in their save). nodes: the job's nodes (policy rule 5:
 * global = nodes parts, one sealed). Returns 0 or -ENOMEM.
 */
int r_choose_doomed(struct r_ctx *c, unsigned nodes, unsigned keep);

/*
 * r_keep - before each remote operation of a gc holding gc/lease (c->hold.held; a no-op
 * returning 0 otherwise): renew the lease every LEASE_GC_RENEW_S seconds (read back first: it
 * must still be this gc's), and refuse to go on once LEASE_GC_DEADLINE_S passed since the last
 * renewal written, when a node could soon judge it stale (lease.h). Returns 0 (go on), or
 * -ESTALE (stop: reported on stderr; c->hold.held cleared when the lease is no longer ours).
 */
int r_keep(struct r_ctx *c);

/*
 * remote_gc - `ckptctl STORE remote gc` on c (c->steps read and sorted), with the job's nodes
 * and the keep_checkpoint_max recorded in cfg, and o's --force, --dry-run, --force-no-lease.
 * Prints its report on stdout, errors on stderr. Returns EXIT_OK or EXIT_ERROR.
 */
int remote_gc(struct r_ctx *c, json_t *cfg, unsigned nodes, const struct ctl_opts *o);

#endif /* CKPTCTL_REMOTE_INT_H */
