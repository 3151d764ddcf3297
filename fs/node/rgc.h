/*
 * rgc.h — the remote's gc: remove from the remote what no resume can need, under the lease
 * gc/lease (lease.h). One rule and one protocol, run by `ckptctl STORE remote gc`
 * (tools/ckptctl/remote_gc.c) and by the mounted daemons themselves (node_gc.c), so that
 * the two never disagree on what goes.
 *
 * What goes: the manifests of global steps older than the newest keep of their layout (keep 0:
 * none), and of steps never global that are older than the newest global one (a node died in
 * their save), their dirs/ objects, then every chunk no remaining manifest names. What stays:
 * the newest keep global steps, global steps whose number is a multiple of keep_every (kept and
 * not counted, as retention does: steps_retain.c), every step newer than the newest global one
 * (a save still arriving), every chunk a remaining manifest names.
 *
 * The protocol with the nodes (node_publish.c upload_begin):
 *   1. The gc puts gc/lease put-if-absent (one gc at a time), then lists uploads/. A node puts
 *      its marker uploads/<node>/<kind>-<step>, then reads gc/lease. So either the gc sees the
 *      marker and removes nothing, or the node sees the lease and waits: no chunk an upload
 *      found on the remote (and so did not send) is removed under it.
 *   2. The gc renews its lease every LEASE_GC_RENEW_S seconds and starts no remote operation
 *      once LEASE_GC_DEADLINE_S passed since the renewal it last wrote (rgc_keep): a node
 *      judges the lease stale only LEASE_GC_EXPIRY_S after that renewal, by when the gc's last
 *      delete has landed.
 *   3. A stale lease (a gc that died) is taken over, and said so: claimed first
 *      (RGC_CLAIM_PREFIX), then replaced; a gc whose claim another made is turned away. A claim
 *      goes with the lease of the gc that made it, or, left by a gc that died, once written
 *      longer than LEASE_GC_EXPIRY_S ago, removed (and said) by a later gc holding the lease.
 *      A stale marker (a node that
 *      died in an upload: not renewed for LEASE_UPLOAD_EXPIRY_S) is reported, removed, and
 *      blocks nothing. A live marker, or one that is no lease (the empty markers of an older
 *      ckptfs: age unknown), blocks the gc. force takes any lease and removes any marker: the
 *      user says their holders died.
 *   4. A full remote (the lease write fails with -ENOSPC or -EDQUOT before anything is
 *      removed): the gc removes, without a lease, only the manifests and dirs/ objects of the
 *      steps it dooms, then tries the lease again. They are garbage whatever runs meanwhile: a
 *      doomed step is one no resume loads (the rule above), and an upload relies on the chunks
 *      it found being there, never on another step's manifest; no chunk goes without the
 *      lease. A manifest takes more room than a lease (a file's block, or bytes against a
 *      quota), so one removed makes room. When there is none to remove, or the lease still
 *      does not fit, the gc says to stop ckptfs on every node and run `ckptctl STORE remote gc
 *      --force-no-lease`: no lease, and every marker is taken as left by a node that died.
 *   5. dry_run takes no lease and removes nothing: it says what a gc would remove now, and
 *      what would stop it (a live lease or marker).
 *   6. Before it lists chunks to remove, a gc puts RGC_EPOCH_KEY, a value no other pass
 *      writes. A node that read one value before it sent chunks ahead of their step's
 *      completion (and then found no live lease) and reads the same value after putting its
 *      upload marker knows no gc removed a chunk in between, and publishes without a HEAD of
 *      each chunk it sent (node_publish.c). A gc that took the lease before that first read
 *      held it at the node's lease read, and one that took it after wrote a new value. A gc
 *      that cannot write it removes no chunk, except with force_no_lease (every node is
 *      stopped, and nodes keep what they sent only in memory). ckptctl and ckptfs of one
 *      version on every node (an older gc writes no epoch).
 *
 * Links the remote, the lease, the policy (rule 5) and jansson; nothing of fs/'s daemon
 * layers, so that ckptctl links it. Does not log: it says each line through the caller's
 * rgc_say_fn. One struct rgc per gc, used by one thread.
 */
#ifndef CKPTFS_FS_NODE_RGC_H
#define CKPTFS_FS_NODE_RGC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/node/lease.h"
#include "index/index.h"
#include "store/remote/remote.h"
#include "store/store.h"

/*
 * Where a gc taking over a lease (protocol 3) claims it first: RGC_CLAIM_PREFIX<host>-<pid>-
 * <created_ns> of the lease taken over, put-if-absent, so that of the gcs taking over one stale
 * lease at once exactly one writes its own over it (remote.h invariant 2); a replacing write
 * alone lets two gcs that both read it stale each write, read their own back, and both run.
 */
#define RGC_CLAIM_PREFIX "gc/takeover/"

/* Protocol 6: the gc epoch, "HOLDER NS RANDOM\n" (a gc pass's holder, its wall clock in ns, 64
 * random bits in hex), at most RGC_EPOCH_MAX bytes. */
#define RGC_EPOCH_KEY "gc/epoch"
#define RGC_EPOCH_MAX 320

/* One step as the manifests describe it. */
struct rgc_step {
	int kind;
	int64_t step;
	char name[IDX_STEP_NAME_MAX + 1];
	char nodes[256]; /* "a* b": the nodes that published, '*' on the one(s) with the seal */
	unsigned parts;
	bool sealed;
	uint64_t files, bytes;
	bool hit; /* doomed: this gc removed (or, dry, would remove) a manifest or dirs/ of it */
};

/* What a line said through rgc_say_fn is. */
enum rgc_say {
	RGC_REPORT,  /* what the gc did or would do (ckptctl: stdout) */
	RGC_ERROR,   /* a failure, with what to do (ckptctl: stderr) */
	RGC_BLOCKED, /* another gc holds the lease, or a node uploads: nothing removed, try later */
	RGC_HELD,    /* the lease is taken: the gc starts removing (ckptctl says nothing) */
};

/* Say one line (no newline; borrowed for the call). */
typedef void rgc_say_fn(void *arg, enum rgc_say kind, const char *line);

struct rgc_opts {
	unsigned nodes;      /* the job's nodes (policy rule 5), >= 1 */
	unsigned keep;       /* global steps kept per layout (keep_checkpoint_max), 0: all */
	int64_t keep_every;  /* global steps numbered a multiple of it also kept (-o keep_every), 0:
				none */
	bool dry_run;        /* protocol 5 */
	bool force;          /* take any lease, remove any marker (protocol 3) */
	bool force_no_lease; /* no lease at all: the nodes are stopped (protocol 4) */
	const char *holder;  /* the lease's holder: "ckptctl remote gc", "ckptfs node 'a'" */
	const char *root;    /* the store's path, for the advice in messages */
	rgc_say_fn *say;     /* every line said; never NULL */
	void *say_arg;
	bool (*stop)(void *arg); /* NULL, or true when the gc must stop (an unmount) */
	void *stop_arg;
};

/* The gc's hold on gc/lease (rgc_keep renews it). */
struct rgc_hold {
	bool held;            /* mine is on the remote: renew it, stop when that fails */
	char claim[REMOTE_KEY_MAX + 1]; /* the claim of the lease this gc took over
					   (RGC_CLAIM_PREFIX), removed with the lease; "" none */
	struct lease mine;    /* as last written */
	int64_t renewed_mono; /* ckpt_mono_ns when mine.renewed_ns was taken */
};

/* One gc's state: what the manifests say. Zero it, set r and o, then call rgc_read_manifests;
 * rgc_release frees the arrays (not r). */
struct rgc {
	struct remote *r;          /* borrowed */
	const struct rgc_opts *o;  /* borrowed */
	struct rgc_step *steps;
	size_t nsteps, capsteps;
	char (*keys)[REMOTE_KEY_MAX + 1]; /* manifests/... keys */
	size_t nkeys, capkeys;
	char (*named)[2 * STORE_HASH_LEN + 1]; /* chunks the manifests name (sorted, unique) */
	size_t nnamed, capnamed;
	uint64_t chunks, chunk_bytes, dirs, unnamed, unnamed_bytes;
	struct rgc_step *doomed; /* the steps whose manifests go */
	size_t ndoomed, capdoomed;
	struct rgc_hold hold;    /* the lease */
};

/* What a pass removed, or with dry_run would remove. */
struct rgc_tally {
	size_t steps; /* doomed steps of which a manifest or dirs/ object went (would go) */
	uint64_t manifests, dirs, markers, chunks, chunk_bytes, errors;
	uint64_t claims; /* takeover claims of gcs that died (RGC_CLAIM_PREFIX) */
};

/* rgc_key_cb - remote_list_fn appending each key to c->keys (arg: the struct rgc). Returns 0 or
 * -ENOMEM. */
int rgc_key_cb(const char *key, uint64_t size, void *arg);

/*
 * rgc_read_manifests - read every manifest of a step not doomed (c->keys when non-empty, else a
 * listing of manifests/) into c->steps, and the chunks they name into c->named (sorted,
 * unique). A manifest removed since the listing is skipped, one that does not parse is said
 * (RGC_ERROR) and skipped. Calls rgc_keep between reads. Returns 0, -ENOMEM, -ESTALE or
 * -ECANCELED (rgc_keep), or the remote's -errno.
 */
int rgc_read_manifests(struct rgc *c);

/* rgc_named - whether chunk hex (32 hex digits) is in c->named. Pure. */
bool rgc_named(const struct rgc *c, const char *hex);

/* rgc_global - whether s is global among nodes (policy rule 5, on the parts of s->nodes; two
 * versions of one node's part count once). Pure. */
bool rgc_global(const struct rgc_step *s, unsigned nodes);

/*
 * rgc_rule_dooms - the rule at the top for one step: whether gc removes a step that is global
 * (or not), numbered number (policy_node_step_number), with newer_global counted global steps of
 * its layout newer than it (rgc_rule_counts), keeping keep (0: every global step) and the
 * multiples of keep_every (0: none). The daemon asks it too of its own steps (node.c: a part
 * the gc removed is not published again). Pure, thread-safe.
 */
bool rgc_rule_dooms(bool global, int64_t number, size_t newer_global, unsigned keep,
		    int64_t keep_every);

/* rgc_rule_counts - whether a global step numbered number counts toward keep (a multiple of
 * keep_every does not: kept besides). Pure, thread-safe. */
bool rgc_rule_counts(int64_t number, int64_t keep_every);

/*
 * rgc_choose_doomed - the steps gc removes (the rule at the top), from c->steps into
 * c->doomed, with c->o's nodes and keep. Returns 0 or -ENOMEM.
 */
int rgc_choose_doomed(struct rgc *c);

/*
 * rgc_keep - before each remote operation of a gc holding gc/lease (a no-op returning 0
 * otherwise): renew the lease every LEASE_GC_RENEW_S seconds (read back first: it must still be
 * this gc's), and refuse to go on once LEASE_GC_DEADLINE_S passed since the last renewal
 * written (protocol 2). Returns 0 (go on), -ESTALE (stop: said; c->hold.held cleared when the
 * lease is no longer ours), or -ECANCELED (c->o->stop said stop).
 */
int rgc_keep(struct rgc *c);

/*
 * rgc_run - one gc on c (rgc_read_manifests and rgc_choose_doomed done), under the protocol at
 * the top; says each lease or marker taken over, each takeover claim of a gc that died it
 * removes (protocol 3), each object with dry_run, and every error.
 * *ret_tally: what it removed (or would), also filled when it stopped half way.
 * Returns 0 (done; ret_tally->errors counts objects that could not be removed), -EAGAIN
 * (another gc holds the lease, or a node uploads: nothing removed, said as RGC_BLOCKED),
 * -ENOSPC or -EDQUOT (the remote is full and the lease does not fit: said), -ESTALE (the lease
 * was lost half way: said), -ECANCELED (c->o->stop), or the remote's -errno (said). What a
 * failed pass removed is never needed by a kept step. The lease is given back on return.
 */
int rgc_run(struct rgc *c, struct rgc_tally *ret_tally);

/* rgc_release - free c's arrays (not c->r). Accepts a zeroed c. */
void rgc_release(struct rgc *c);

#endif /* CKPTFS_FS_NODE_RGC_H */
