/*
 * node_int.h — the node layer's own parts (node.h says what the layer owns): the manifest
 * format (manifest.c), what the node thread knows of the other nodes (node.c), how it learns
 * it from the remote's listings (node_list.c), seals its part from another's seal
 * (node_seal.c), publishes its own part (node_publish.c) and shows the others' files
 * (node_show.c).
 */
#ifndef CKPTFS_FS_NODE_INT_H
#define CKPTFS_FS_NODE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include <jansson.h>

#include "fs/node/lease.h"
#include "fs/node/node.h"
#include "fs/node/rgc.h"
#include "fs/policy/layout.h"
#include "store/remote/remote.h"

#define NODE_MANIFEST_FORMAT "ckptfs-manifest/1"

/* A part's version: 32 hex digits (node_manifest_version), NUL-ended; "" for a manifest
 * published before versions (key manifests/<kind>/<step>/<node>.json). */
#define NODE_VERSION_LEN (2 * STORE_HASH_LEN)

/*
 * The digits of a step in a manifest's key, zero-padded: every step number (policy_node_step,
 * never negative, below 2^63) fits, and the keys of a layout sort by step in byte order, the
 * order a listing after a key follows (remote_list_after): a node lists only the manifests from
 * the newest global step up (node_list.c, node_learn). Manifests published before the padding
 * have the step unpadded ("manifests/1/100/a/V.json"); their keys still parse, and a key of a step
 * starting with 1-9 sorts above every padded one of its layout, so listings after a padded key
 * see them too until remote gc removes them.
 */
#define NODE_STEP_DIGITS 20

/* One published manifest, as the node thread keeps it. */
struct node_part {
	char node[NODE_NAME_MAX + 1];
	char name[IDX_STEP_NAME_MAX + 1]; /* the step directory's name */
	char version[NODE_VERSION_LEN + 1]; /* which save of the step this part is */
	int kind;                          /* enum layout_kind */
	int64_t step;                      /* policy_node_step: MF1's holds its epoch */
	int64_t created_ns;                /* when the node made this version (its own clock) */
	unsigned nodes;                    /* the job's node count as the node was told, 0: unsaid */
	bool sealed;                       /* it carries the seal (policy rule 5) */
	bool seen;                         /* learn: in this tick's listing */
	bool stale;                        /* of a save older than this node's save of the step */
	bool unpadded;                     /* its key has the step unpadded (NODE_STEP_DIGITS) */
	int64_t learnt_ns;                 /* when this node learnt it (ckfs_now) */
	int64_t row_id;                    /* this node's part: the step row it was made from, 0:
					      not matched yet (fetched back, or empty) */
};

/* Kinds of remote failures counted for the metrics (node_metrics). */
enum node_err {
	NODE_ERR_LIST,    /* the manifests could not be listed or read */
	NODE_ERR_PUBLISH, /* a chunk or a manifest could not be put */
	NODE_ERR_FETCH,   /* another node's chunk could not be fetched */
	NODE_ERR_DAMAGED, /* a chunk on the remote was damaged or missing */
	NODE_ERR_COUNT
};

/* Count one failure of kind k. Takes n->mu. */
void node_count_error(struct node *n, enum node_err k);

/* A step of one layout. */
struct node_key {
	int kind;
	int64_t step; /* its number across nodes (policy_node_step): MF1's holds its epoch */
};

/* Idle buffers a node keeps for the chunks it fetches (node.c fetch_buf_get): one per rank of
 * a 4-rank node reading at once (bench_multinode --parallel); a fetch beyond them allocates. */
#define NODE_FETCH_BUFS 4

/* The node layer's state (fs->node); the locking is node.c's invariant 3. */
struct node {
	struct ckfs *fs;
	struct remote *r;
	char name[NODE_NAME_MAX + 1];
	char url[512];
	unsigned nodes;
	struct ckpt_workers th; /* the node thread, once node_start started it */
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
	struct node_key *unlisted; /* global steps no tracker may name until their parts change:
				      MindFormers 2.0's whose metadata.json names a file no node
				      published (listed_everywhere), MindFormers 1.0's with a rank
				      whose file no node published (mf1_whole_everywhere) */
	size_t nunlisted, capunlisted;
	uint64_t published, chunks_sent, chunks_there, bytes_sent; /* mu */
	uint64_t chunks_trusted; /* publishes' chunks sent ahead, not looked at again; mu */
	/* the passes over a step being saved that sent its chunks ahead (node_ahead.c), and the
	 * files and extents they described under fs->mu; mu */
	uint64_t ahead_passes, ahead_files, ahead_extents;
	_Atomic uint64_t chunks_fetched, bytes_fetched;
	char last_error[512]; /* mu; room for the remote's explanation (remote_call.err) */
	uint64_t errors[NODE_ERR_COUNT]; /* failures by kind (node_metrics); mu */
	int64_t upload_lag_ns; /* the last publish: its step complete here to its manifest up; mu */
	char disagree[256];   /* why no step becomes global here (nodes differ), "" if none; mu */
	char taken[256];      /* why: this node's name is another store's (presence); mu */
	bool parts_changed;   /* parts changed since node_cache_save; mu */
	int64_t since_ns;     /* this store's first mount with the remote (remote.json) */
	char store_id[17];    /* this store's identity (remote.json), 16 hex digits */
	unsigned ticks;       /* node thread: ticks so far (presence every NODE_PRESENCE_TICKS) */
	char list_after[REMOTE_KEY_MAX + 1]; /* where learn's next partial listing starts, "":
						whole; mu (written), node thread (read) */
	bool list_full;       /* node thread: the next listing is whole (node_learn) */
	bool listed_whole;    /* node thread: a whole listing succeeded since mount (node_learn) */
	char older[320];      /* a node that runs an older ckptfs, which writes unpadded manifest
				 keys and cannot read padded ones: what to do; "" if none; mu */
	int64_t next_full_ns; /* node thread: the next listing is whole from then (ckpt_mono_ns) */
	uint64_t lists[2];    /* listings of the manifests, [0] partial, [1] whole; mu */
	uint64_t listed[2];   /* keys they gave; mu */
	uint64_t last_listed; /* keys the last listing gave; mu */
	bool busy;            /* node thread: a save here in progress or not global yet */
	bool waiting;         /* node thread: busy, the last publish did not fail and nothing went
				 ahead in the last pass: another node's part or seal may come
				 any moment (node_main polls) */
	bool kick;            /* a step became complete here: a pass now (step_complete); mu */
	int64_t next_tick_ns; /* node thread: the next whole tick (ckpt_mono_ns) */
	int64_t next_idle_ns; /* node thread: no idle listing before (ckpt_mono_ns) */
	int64_t next_record_ns; /* node thread: no write of remote.json before (ckpt_mono_ns) */
	struct store_hash *sent; /* node thread: chunks sent ahead (node_ahead.c) */
	bool *sent_used;
	size_t sent_n, sent_cap;
	/* node thread: every chunk in sent went up after the gc epoch sent_epoch was read and no
	 * live gc lease was seen (rgc.h protocol 6): a publish that reads the same epoch relies
	 * on them without a HEAD */
	bool sent_trusted;
	char sent_epoch[RGC_EPOCH_MAX + 1];
	int64_t ahead_row;    /* node thread: the step row ahead_done is of, 0: none */
	struct node_ahead_file *ahead_done; /* node thread: its files whose chunks all went ahead
					       and are in sent, by inode number (node_ahead.c) */
	size_t nahead_done;
	int64_t *quiet_rows;  /* complete rows with no file of this node and no part: not parts */
	size_t nquiet, capquiet;
	char gc_note[320];    /* the gc lease as upload_begin last saw it, for .ckptfs/status; "" none; mu */
	bool gc_off;          /* -o remote_gc=off: node_gc does nothing */
	bool gc_held;         /* node thread: the running gc pass took the lease */
	int64_t gc_newest[LAYOUT_KIND_COUNT]; /* node thread: each layout's newest global step at
						 node_gc's last look */
	int64_t gc_next_ns;   /* node thread: the next pass even with nothing doomed (ckpt_mono_ns) */
	int64_t gc_retry_ns;  /* node thread: a pass is due then (node_gc.c), 0: none */
	int64_t gc_wait_ns;   /* node thread: the wait before gc_retry_ns, doubled per failure */
	char gc_last[512];    /* what this node's gc did last, for .ckptfs/status; "" none; mu */
	pthread_mutex_t fetch_mu; /* guards fetch_bufs (CKPT_RANK_NODE_FETCH, a leaf) */
	void *fetch_bufs[NODE_FETCH_BUFS]; /* idle buffers of store_object_max() bytes */
	size_t nfetch_bufs;
	struct node_dir_pending {
		char name[IDX_STEP_NAME_MAX + 1];
		mode_t mode;
	} *dirs_pending; /* node_dir.c: step directories to publish again; mu */
	size_t ndirs, capdirs;
};

/* A step completed here this recently and not global yet keeps the node listing at every tick,
 * ns: the other nodes' parts of one save come within seconds of each other. */
#define NODE_BUSY_NS (120 * 1000000000LL)

/* A key of a listing, with the layout and step a manifest's key names. */
struct node_lkey {
	char *key; /* owned */
	int kind;
	int64_t step;
};

/* The keys one listing collected (node_learn, node.c node_repair). Zero it and set n; free the
 * keys with node_lkeys_free. */
struct node_learn_ctx {
	struct node *n;
	struct node_lkey *keys;
	size_t nkeys, cap;
	uint64_t listed; /* keys the listing gave */
};

/* node_lkey_add - append a copy of key (with its layout and step) to c->keys. Returns 0 or
 * -ENOMEM (c unchanged). Node thread. */
int node_lkey_add(struct node_learn_ctx *c, const char *key, int kind, int64_t step);

/* node_lkeys_free - free c's keys and their array. */
void node_lkeys_free(struct node_learn_ctx *c);

/*
 * node_learn - learn the remote's manifests (node_list.c): read the ones not known yet into the
 * parts, the newest first (all of the newest node_record_steps steps of each layout at mount,
 * prime; at most NODE_LEARN_MAX in the node thread), and after a whole listing forget the parts
 * whose manifest is gone. call: the deadline of each request (NULL: the remote's own). Counts
 * the listing (n->lists, n->listed, n->last_listed) and sets where the next one starts
 * (n->list_after). Returns 0, -ENOMEM, or the remote's -errno (network errors, -EIO); a
 * manifest that does not parse is logged and skipped. Node thread (node_prime before it
 * starts); takes n->mu, never fs->mu.
 */
int node_learn(struct node *n, const struct remote_call *call, bool prime);

/* node_record_steps - how many of the newest global steps a node keeps the keys of and records
 * in remote.json: NODE_RECORD_STEPS (node.c), or keep_checkpoint_max when that is larger. Any
 * thread, no lock. */
unsigned node_record_steps(const struct ckfs *fs);

/* node_key_lower - the first index of v (n keys sorted by (kind, step)) not below (kind,
 * step), 0..n. Pure. */
size_t node_key_lower(const struct node_key *v, size_t n, int kind, int64_t step);

/* node_key_del - remove (kind, step) from the sorted set v (*n keys), if there. */
void node_key_del(struct node_key *v, size_t *n, int kind, int64_t step);

/* node_find_part - the part node has of (kind, step): one per node, its newest version; NULL
 * if none. Borrowed: valid until the parts change. n->mu held. */
struct node_part *node_find_part(struct node *n, const char *node, int kind, int64_t step);

/*
 * node_add_parts - take the parts v[0, nv) learnt from one listing: a node's newer version of a
 * step replaces its older one, an older one than known is left out; O((P + nv) log P). Returns
 * 0 or -ENOMEM (the parts taken so far stay). Takes n->mu.
 */
int node_add_parts(struct node *n, const struct node_part *v, size_t nv);

/* node_recompute_global - every step's globality from the parts: O(parts). n->mu held. */
void node_recompute_global(struct node *n);

/* node_key_add - add (kind, step) to the sorted set *v (*n keys, *cap allocated). Returns 0 or
 * -ENOMEM (the set unchanged). */
int node_key_add(struct node_key **v, size_t *cap, size_t *n, int kind, int64_t step);

/* node_key_in - whether (kind, step) is in v (n keys sorted by (kind, step)). Pure. */
bool node_key_in(const struct node_key *v, size_t n, int kind, int64_t step);

/* node_step_range - the parts of (kind, step): n->parts[*lo, *hi). n->mu held. */
void node_step_range(const struct node *n, int kind, int64_t step, size_t *lo, size_t *hi);

/* node_recompute_step - whether (kind, step) is globally complete (rule 5) from its parts, the
 * stale ones left out, and the global set made to say so. n->mu held. */
void node_recompute_step(struct node *n, int kind, int64_t step);

/*
 * node_add_part - take part p into the parts known: a node's newer version of a step replaces
 * its older one, and the step is shown again; an older version than the one known is left out.
 * Returns 0 or -ENOMEM. Takes n->mu.
 */
int node_add_part(struct node *n, const struct node_part *p);

/* node_drop_part - forget part i (0..n->nparts-1): its manifest left the remote; the step is no
 * longer global until its parts are complete again. n->mu held. */
void node_drop_part(struct node *n, size_t i);

/* node_blocked - whether the nodes disagree (node count, a name taken twice): no step becomes
 * global here, nothing is published or sealed. n->mu held, or the node thread. */
bool node_blocked(const struct node *n);

/* node_gc_dooms - whether the remote's gc removes (kind, step) by what n knows (rgc_rule_dooms),
 * with keep_checkpoint_max set; false without. n->mu held. */
bool node_gc_dooms(const struct node *n, int kind, int64_t step);

/* node_chunk_call - the call of every chunk object's put: its readers check it against its
 * digest (remote_call.self_checked). Read-only. */
extern const struct remote_call node_chunk_call;

/*
 * node_encode_chunk - chunk h (raw length len, bytes) of the local store as a remote object
 * (store_chunk_object: the stored payload as it is) into *ret_body (owned: the caller frees
 * it) and *ret_len (bytes).
 * Returns 0, or the -errno of the read (-ENOENT, -EIO, -EBADMSG) or the encode of a chunk
 * stored deferred (-ENOMEM, -EIO);
 * the out-parameters untouched on failure. Any thread.
 */
int node_encode_chunk(struct node *n, const struct store_hash *h, size_t len, void **ret_body,
		      size_t *ret_len);

/* node_own_files - how many files of this node (not shown from another node's manifest,
 * IDX_INODE_FOREIGN) step directory dir (an inode number) of step name holds; 0 also when it
 * cannot be read (out of memory, an index error). fs->mu held. */
size_t node_own_files(struct ckfs *fs, uint64_t dir, const char *name);

/*
 * node_seal_from_remote - seal this node's part of each step another node published sealed
 * (node_seal.c); a directory here that no step row names is adopted as the step, and a step
 * none of this node's ranks wrote anything of gets an empty part published. Failures are logged and tried again at the next tick.
 * Node thread; takes n->mu and fs->mu, never fs->mu while holding n->mu.
 */
void node_seal_from_remote(struct node *n);

/*
 * node_show_global - show every global step not shown yet (node_show.c): the files of the other
 * nodes' parts in this node's namespace, then retention of its layout; a step retention has no
 * room for is marked shown without its files. Failures are logged, kept for .ckptfs/status and
 * tried again at the next tick. Node thread (node_prime before it starts); takes n->mu and
 * fs->mu, never fs->mu while holding n->mu.
 */
void node_show_global(struct node *n);

/*
 * node_publish - publish this node's steps complete here and not published yet (node_publish.c),
 * send ahead the chunks of the newest step being saved, withdraw this node's part of a step
 * saved again, and set n->busy. Failures are logged, kept for .ckptfs/status and tried again
 * at the next tick. Node thread; takes fs->mu, and n->mu also under it (node.c invariant 3).
 */
void node_publish(struct node *n);

/*
 * node_publish_part - publish manifest m (this node's part of step s; sealed: it carries the
 * seal), its chunks first, under the gc protocol's upload marker, then take it as this node's
 * part (its earlier version removed from the remote). m borrowed. Returns 0, -EAGAIN (a gc
 * holds the lease, or the upload took too long: the next tick), or the remote's -errno
 * (logged, in status). Node thread; takes n->mu, never fs->mu.
 */
int node_publish_part(struct node *n, const struct idx_step *s, json_t *m, bool sealed);

/* One chunk to send to the remote: its digest and its raw length, bytes. */
struct node_chunk {
	struct store_hash h;
	size_t len;
};

/*
 * node_send_chunks - send each chunk of v[0, count) (from the local store) that the remote does
 * not have: a HEAD, then a local read and check and a put-if-absent, on NODE_SENDERS threads,
 * counted in n->chunks_sent, n->chunks_there and n->bytes_sent. v borrowed. Returns 0, or the
 * first failure's -errno (the remote's; -ENOENT, -EIO, -EBADMSG: the local chunk; -ENOMEM);
 * the others may have gone meanwhile. Node thread; takes n->mu, never fs->mu.
 */
int node_send_chunks(struct node *n, const struct node_chunk *v, size_t count);

/*
 * node_send_ahead - send the chunks of the files of step s (being saved here) that are durable
 * already, before the step completes, and only of the files whose content changed since the
 * last call for s (node_ahead.c). Returns whether it found chunks to send. Failures are logged;
 * the publish of the step sends its every chunk anyway. Node thread; takes fs->mu, n->mu also
 * under it; holds neither while it waits on the remote.
 */
bool node_send_ahead(struct node *n, const struct idx_step *s);

/* node_sent_has - whether chunk h (STORE_HASH_LEN bytes of digest) is in the set of those sent
 * ahead (n->sent; node_ahead.c). Node thread. */
bool node_sent_has(const struct node *n, const uint8_t *h);

/*
 * node_sent_trust_end - after the upload marker is put (node_publish.c upload_begin): whether
 * the chunks sent ahead may be relied on without a HEAD, the gc epoch unchanged since they went
 * (rgc.h protocol 6). When it changed (a gc may have removed some) the set is dropped, with the
 * files remembered as sent, and every chunk is looked at again. Node thread; a GET of the
 * remote, no lock held.
 */
bool node_sent_trust_end(struct node *n);

/* node_ahead_forget - forget which files of the step being saved went ahead (no step is being
 * saved here now); n->sent stays. Node thread. */
void node_ahead_forget(struct node *n);

/* node_ahead_free - free what the sends ahead keep (node_free). Node thread, or after it. */
void node_ahead_free(struct node *n);

/* node_ahead_metrics - append the series of the sends ahead (ckptfs_remote_ahead_*) to p.
 * n->mu held. */
void node_ahead_metrics(const struct node *n, struct ckpt_text *p);

/* Log a failure of the remote and keep it for .ckptfs/status (printf-style). Takes n->mu. */
void node_set_error(struct node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* node_is_global - whether (kind, step) is globally complete by what n knows. n->mu held. */
bool node_is_global(const struct node *n, int kind, int64_t step);

/*
 * node_gc - the remote's gc run by this node (node_gc.c says when): with keep_checkpoint_max >= 1
 * and not -o remote_gc=off, a pass of rgc_run under the remote's gc lease, logged ("remote gc:
 * removed K manifests, C chunks ...") and kept for .ckptfs/status (gc_last). Failures are
 * logged and tried again later. Node thread only; takes n->mu, never fs->mu; waits on the
 * remote for as long as the pass takes (it renews the lease meanwhile) or until n->stop.
 */
void node_gc(struct node *n);

/* node_dirs_retry - publish the step directories whose publish failed (node_dir.c). Node
 * thread; takes n->mu, never fs->mu. */
void node_dirs_retry(struct node *n);

/*
 * node_manifest_key - the key of a node's part (kind, step, node, version) into key (cap bytes):
 * "manifests/<kind>/<step>/<node>/<version>.json", the step zero-padded to NODE_STEP_DIGITS
 * digits, or unpadded (a manifest published before the padding) when unpadded is true; version
 * "" (before versions): "manifests/<kind>/<step>/<node>.json". Returns key. Pure, thread-safe.
 */
char *node_manifest_key(char *key, size_t cap, int kind, int64_t step, const char *node,
			const char *version, bool unpadded);

/* What a walk of a part (node_part_walk) does with each regular file: path relative to the
 * part's root, ino its inode. Returns 1 when the file is this node's, 0 when it is another
 * node's (IDX_INODE_FOREIGN: not in this part), or a -errno that ends the walk. fs->mu held. */
typedef int (*node_file_fn)(struct ckfs *fs, const char *path, uint64_t ino, void *arg);

/*
 * node_part_walk - each regular file of this node's part of step s (manifest.c: its directory's
 * tree, or MindFormers 1.0's ranks' files of the step) through fn(fs, path, ino, arg), and, when
 * dirs is not NULL, the part's directories appended to dirs as JSON strings. Returns 0, fn's
 * -errno, -ENAMETOOLONG, -ELOOP (a tree deeper than STEPS_TREE_DEPTH_MAX), -EINVAL (a
 * MindFormers 1.0 row whose name is no step), -ENOMEM or the index's -errno. fs->mu held.
 */
int node_part_walk(struct ckfs *fs, const struct idx_step *s, json_t *dirs, node_file_fn fn,
		   void *arg);

/*
 * node_manifest_json - this node's manifest of step s (its directory's tree: dirs, files, their
 * extents; MindFormers 1.0, which has no directory: its ranks' files of the step under rank_N/),
 * format at the top of manifest.c. sealed: this node saw the step's claim itself.
 * empty: a part with no file (this node's ranks wrote nothing of the step; s only names it).
 * Files shown from other nodes' manifests (IDX_INODE_FOREIGN) are not this node's part and are
 * left out. ret_files: the files in the part. Returns a new reference, or NULL (out of memory,
 * an index error, a tree deeper than STEPS_TREE_DEPTH_MAX). fs->mu held (reads the index).
 */
json_t *node_manifest_json(struct ckfs *fs, const struct idx_step *s, const char *node,
			   unsigned nodes, bool sealed, bool empty, size_t *ret_files);

/*
 * node_manifest_parse - the fields rule 5 needs from a manifest's len bytes at buf into *ret.
 * Returns 0, or -EBADMSG with err (errlen bytes) saying what is wrong. Pure, thread-safe.
 */
int node_manifest_parse(const void *buf, size_t len, struct node_part *ret, char *err,
			size_t errlen);

#endif /* CKPTFS_FS_NODE_INT_H */
