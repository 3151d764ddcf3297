/*
 * node.c — the node thread: learn the remote's manifests (node_list.c), seal this node's part of
 * a step another node sealed (node_seal.c), publish this node's complete steps (node_publish.c,
 * which keeps invariants 1 and 2), show the global steps in the namespace (node_show.c), say
 * what it knows (node_status.c); node.h says what the layer owns.
 *
 * Invariants:
 *   1. A manifest is written once (put-if-absent) and only after every chunk it names is on
 *      the remote, so a manifest on the remote always has all its chunks.
 *   2. This node publishes a step only once the step is complete here (state complete in the
 *      index, so its chunks are durable in the local store): rule 5's per-node part.
 *   3. node->mu guards parts, global and the figures; it is taken after fs->mu (global_ok is
 *      called under fs->mu) and the node thread never takes fs->mu while holding it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>

#include "fs/core/lockrank.h"
#include "fs/node/node_int.h"
#include "fs/node/rgc.h"
#include "fs/policy/policy.h"

/* How often the node thread looks at the remote and the index, milliseconds. */
#define NODE_TICK_MS 200

/* While the node may wait on another node (n->waiting: a save here whose chunks all went
 * ahead, its seal to come from another node, or a step complete here and not global yet), how
 * often it lists the remote and publishes, milliseconds: a quarter of a tick, so that one
 * node's upload is followed by the next wave within tens of ms rather than a tick (a save's two
 * waves in a row: the sealing node's part, then the others' sealed from it). At least
 * NODE_POLL_SPAN times the last listing, so that the polls keep the remote listing a quarter
 * of the time at most. */
#define NODE_POLL_MS 50
#define NODE_POLL_SPAN 3

/* zstd level of a chunk stored here deferred (never compressed) when it is sent to the remote
 * and the store cannot take a compressed copy (full): store_chunk_object compresses it for the
 * store and sends that, as it sends every other chunk as stored. 3 is zstd's default. */
#define NODE_ZSTD_LEVEL 3

/* The longest a call made before the mount answers (node_prime) or by the presence renewal
 * waits for the remote, ms, retries included: a remote that accepts and never answers must not
 * hold the mount, which starts from what remote.json knew; the node thread goes on after it. */
#define NODE_PRIME_DEADLINE_MS 5000

/* How often an idle node lists the remote's manifests, in ticks: every 5 s; a node that saves
 * lists at every tick (node_main). */
#define NODE_IDLE_LIST_TICKS 25

/* Global steps per layout whose parts STORE/remote.json keeps (write_remote_json), at least:
 * the trackers need the newest, retention keep_checkpoint_max of them. */
#define NODE_RECORD_STEPS 64

unsigned node_record_steps(const struct ckfs *fs)
{
	unsigned keep = steps_settings(fs)->keep_max;

	return keep > NODE_RECORD_STEPS ? keep : NODE_RECORD_STEPS;
}

/* Least time between two writes of STORE/remote.json by the node thread, ns. */
#define NODE_RECORD_EVERY_NS (2 * 1000000000LL)

/* How often a node renews nodes/<name>.json (presence), in ticks: every 5 s. */
#define NODE_PRESENCE_TICKS 25

/* A presence not renewed for this long is a stopped node's (its name is free again), ns: six
 * renewals missed, far above a tick's work, short enough that a store remounted under the
 * name of a lost one is refused for half a minute at most. Compared across nodes' wall clocks. */
#define NODE_PRESENCE_TTL_NS (30 * 1000000000LL)


/*
 * The sets below are sorted arrays searched by bisection: parts by (kind, step, node), the
 * step keys (global, shown, sealed_here) by (kind, step). A tick's work is then a listing and
 * O(log P) per key of it, a step's parts are one run of the array, and a job of many nodes and
 * steps costs no more per step than a small one (issue 41 item 8).
 */
static int kcmp(int kind, int64_t step, int kind2, int64_t step2)
{
	if (kind != kind2)
		return kind < kind2 ? -1 : 1;
	return step < step2 ? -1 : step > step2;
}

/* The first index of v (n sorted keys) not below (kind, step). */
size_t node_key_lower(const struct node_key *v, size_t n, int kind, int64_t step)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (kcmp(kind, step, v[mid].kind, v[mid].step) > 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

bool node_key_in(const struct node_key *v, size_t n, int kind, int64_t step)
{
	size_t i = node_key_lower(v, n, kind, step);

	return i < n && v[i].kind == kind && v[i].step == step;
}

/* Add (kind, step) to the sorted set *v (*n keys, *cap allocated). 0 or -ENOMEM. */
int node_key_add(struct node_key **v, size_t *cap, size_t *n, int kind, int64_t step)
{
	size_t i = node_key_lower(*v, *n, kind, step);

	if (i < *n && (*v)[i].kind == kind && (*v)[i].step == step)
		return 0;
	if (ckpt_grow(v, cap, *n, sizeof(**v)) < 0)
		return -ENOMEM;
	memmove(*v + i + 1, *v + i, (*n - i) * sizeof(**v));
	(*v)[i] = (struct node_key){ kind, step };
	(*n)++;
	return 0;
}

void node_key_del(struct node_key *v, size_t *n, int kind, int64_t step)
{
	size_t i = node_key_lower(v, *n, kind, step);

	if (i < *n && v[i].kind == kind && v[i].step == step) {
		memmove(v + i, v + i + 1, (*n - i - 1) * sizeof(*v));
		(*n)--;
	}
}

static int pcmp(int kind, int64_t step, const char *node, const struct node_part *p)
{
	int c = kcmp(kind, step, p->kind, p->step);

	return c ? c : strcmp(node, p->node);
}

static int part_sort_cmp(const void *a, const void *b)
{
	const struct node_part *x = a;

	return pcmp(x->kind, x->step, x->node, b);
}

/* The first index of n->parts[0, count) (sorted) not below (kind, step, node); node "" is
 * below every name. */
static size_t part_lower_in(const struct node *n, size_t count, int kind, int64_t step,
			    const char *node)
{
	size_t lo = 0, hi = count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (pcmp(kind, step, node, &n->parts[mid]) > 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* part_lower_in over every part. */
static size_t part_lower(const struct node *n, int kind, int64_t step, const char *node)
{
	return part_lower_in(n, n->nparts, kind, step, node);
}

/* The parts of (kind, step): n->parts[*lo, *hi). mu held. */
void node_step_range(const struct node *n, int kind, int64_t step, size_t *lo, size_t *hi)
{
	size_t i = part_lower(n, kind, step, "");

	*lo = i;
	while (i < n->nparts && n->parts[i].kind == kind && n->parts[i].step == step)
		i++;
	*hi = i;
}

/* The part node has of (kind, step): one per node, its newest version. Valid until the parts
 * change. mu held. */
struct node_part *node_find_part(struct node *n, const char *node, int kind, int64_t step)
{
	size_t i = part_lower(n, kind, step, node);

	return i < n->nparts && pcmp(kind, step, node, &n->parts[i]) == 0 ? &n->parts[i] : NULL;
}

/* No step becomes global here, nothing is published or sealed: the nodes disagree. mu or the
 * node thread. */
bool node_blocked(const struct node *n)
{
	return n->disagree[0] || n->taken[0];
}

/*
 * Whether the remote's gc removes step (of kind) by what this node knows (rgc_rule_dooms), with
 * keep_checkpoint_max set: retention prunes it here too, and its part, once a gc removed it, is
 * not published again (it would be garbage for the next gc, and back and forth). mu held.
 */
bool node_gc_dooms(const struct node *n, int kind, int64_t step)
{
	size_t i = node_key_lower(n->global, n->nglobal, kind, step);
	size_t end = node_key_lower(n->global, n->nglobal, kind + 1, INT64_MIN), newer = 0;
	bool global = i < n->nglobal && n->global[i].kind == kind && n->global[i].step == step;

	if (!steps_settings(n->fs)->keep_max)
		return false;
	for (size_t j = i + global; j < end; j++)
		newer += rgc_rule_counts(policy_node_step_number(kind, n->global[j].step),
					 steps_settings(n->fs)->keep_every);
	return rgc_rule_dooms(global, policy_node_step_number(kind, step), newer,
			      steps_settings(n->fs)->keep_max, steps_settings(n->fs)->keep_every);
}

bool node_is_global(const struct node *n, int kind, int64_t step)
{
	return node_key_in(n->global, n->nglobal, kind, step);
}

void node_count_error(struct node *n, enum node_err k)
{
	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	n->errors[k]++;
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
}

void node_set_error(struct node *n, const char *fmt, ...)
{
	char line[sizeof(n->last_error)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	memcpy(n->last_error, line, sizeof(line));
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	ckpt_log("%s", line);
}

/* Part a says another node count than this node's: no step becomes global here. mu held. */
static void check_nodes(struct node *n, const struct node_part *a)
{
	if (a->nodes && a->nodes != n->nodes && !n->disagree[0]) {
		snprintf(n->disagree, sizeof(n->disagree),
			 "node '%s' was mounted with nodes=%u, this one with nodes=%u: no step "
			 "becomes global here until every node is mounted with the same -o nodes=N",
			 a->node, a->nodes, n->nodes);
		ckpt_log("%s", n->disagree);
		n->nglobal = 0;
	}
}

/* Whether (kind, step) is globally complete (rule 5) from its parts, the stale ones left out,
 * and the global set made to say so. mu held. */
void node_recompute_step(struct node *n, int kind, int64_t step)
{
	struct policy_part pp[64], *v = pp;
	size_t lo, hi, k = 0;
	bool global;

	node_step_range(n, kind, step, &lo, &hi);
	if (hi - lo > 64 && !(v = calloc(hi - lo, sizeof(*v))))
		return;
	for (size_t i = lo; i < hi; i++)
		if (!n->parts[i].stale)
			v[k++] = (struct policy_part){ n->parts[i].node, n->parts[i].sealed };
	global = !node_blocked(n) && policy_global_complete(v, k, n->nodes);
	if (v != pp)
		free(v);
	if (global)
		node_key_add(&n->global, &n->capglobal, &n->nglobal, kind, step);
	else
		node_key_del(n->global, &n->nglobal, kind, step);
}

/* Recompute every step's globality from the parts (sorted): O(parts). mu held. */
void node_recompute_global(struct node *n)
{
	n->nglobal = 0;
	for (size_t i = 0; i < n->nparts; i++)
		check_nodes(n, &n->parts[i]);
	for (size_t i = 0; i < n->nparts && !node_blocked(n);) {
		size_t lo, hi;

		node_step_range(n, n->parts[i].kind, n->parts[i].step, &lo, &hi);
		node_recompute_step(n, n->parts[i].kind, n->parts[i].step);
		i = hi;
	}
}

/* Insert part p, known absent, at its place. 0 or -ENOMEM. mu held. */
static int part_insert(struct node *n, const struct node_part *p)
{
	size_t i = part_lower(n, p->kind, p->step, p->node);

	if (ckpt_grow(&n->parts, &n->capparts, n->nparts, sizeof(*n->parts)) < 0)
		return -ENOMEM;
	memmove(n->parts + i + 1, n->parts + i, (n->nparts - i) * sizeof(*n->parts));
	n->parts[i] = *p;
	n->nparts++;
	return 0;
}

/*
 * Take part p into the parts known: a node's newer version of a step replaces its older one (a
 * step saved again), and then the step is shown again (show_global replaces the files of the
 * older version). An older version than the one known is left out. Takes mu.
 */
int node_add_part(struct node *n, const struct node_part *p)
{
	struct node_part *q;
	int rc = 0;

	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	q = node_find_part(n, p->node, p->kind, p->step);
	if (q && strcmp(q->version, p->version) == 0) {
		q->seen = true;
		q->sealed = p->sealed;
	} else if (q && q->created_ns > p->created_ns) {
		/* an older version still on the remote: its node removes it */
	} else {
		if (q)
			*q = *p;
		else
			rc = part_insert(n, p);
		n->parts_changed = true;
		node_key_del(n->shown, &n->nshown, p->kind, p->step);
		node_key_del(n->unlisted, &n->nunlisted, p->kind, p->step);
		check_nodes(n, p);
		node_recompute_step(n, p->kind, p->step);
	}
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	return rc;
}

/*
 * Take the parts v[0, nv) learnt from one listing: as add_part for each, in one pass (new ones
 * appended, then one sort): O((P + nv) log P) rather than a move of the array per part. Takes mu.
 */
int node_add_parts(struct node *n, const struct node_part *v, size_t nv)
{
	size_t sorted, o = 0;
	int rc = 0;

	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	sorted = n->nparts;
	for (size_t i = 0; i < nv; i++) {
		size_t j = part_lower_in(n, sorted, v[i].kind, v[i].step, v[i].node);
		struct node_part *q = j < sorted && pcmp(v[i].kind, v[i].step, v[i].node,
							 &n->parts[j]) == 0 ? &n->parts[j] : NULL;

		if (q && strcmp(q->version, v[i].version) == 0) {
			q->seen = true;
			q->sealed = v[i].sealed;
			continue;
		}
		if (q && q->created_ns > v[i].created_ns)
			continue;
		if (q) {
			*q = v[i];
		} else if (ckpt_grow(&n->parts, &n->capparts, n->nparts, sizeof(*n->parts)) < 0) {
			rc = -ENOMEM;
			break;
		} else {
			n->parts[n->nparts++] = v[i];
		}
		node_key_del(n->shown, &n->nshown, v[i].kind, v[i].step);
		node_key_del(n->unlisted, &n->nunlisted, v[i].kind, v[i].step);
		n->parts_changed = true;
	}
	if (n->nparts > sorted) {
		qsort(n->parts, n->nparts, sizeof(*n->parts), part_sort_cmp);
		/* two versions of one node's part in one listing: the newest stays */
		for (size_t i = 0; i < n->nparts; i++) {
			if (o && pcmp(n->parts[i].kind, n->parts[i].step, n->parts[i].node,
				      &n->parts[o - 1]) == 0) {
				if (n->parts[i].created_ns > n->parts[o - 1].created_ns)
					n->parts[o - 1] = n->parts[i];
				continue;
			}
			n->parts[o++] = n->parts[i];
		}
		n->nparts = o;
	}
	if (nv)
		node_recompute_global(n);
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	return rc;
}

/* Forget part i: its manifest left the remote (withdrawn by a new save, or removed by gc). The
 * step is no longer global until its parts are complete again. mu held. */
void node_drop_part(struct node *n, size_t i)
{
	int kind = n->parts[i].kind;
	int64_t step = n->parts[i].step;

	node_key_del(n->shown, &n->nshown, kind, step);
	node_key_del(n->unlisted, &n->nunlisted, kind, step);
	memmove(n->parts + i, n->parts + i + 1, (n->nparts - i - 1) * sizeof(*n->parts));
	n->nparts--;
	n->parts_changed = true;
	node_recompute_step(n, kind, step);
}

/* remote_list callback of node_repair: collect the repair/<hex> keys. */
static int repair_cb(const char *key, uint64_t size, void *arg)
{
	struct node_learn_ctx *c = arg;

	(void)size;
	if (strlen(key) != strlen("repair/") + 2 * STORE_HASH_LEN)
		return 0;
	return node_lkey_add(c, key, 0, 0);
}

static int write_remote_json(struct ckfs *fs, struct node *n);

/* ---- the other nodes' files: in the namespace, fetched on first read ---- */

static int ask_repair(struct node *n, const char *hex, const char *why);

/* Chunk h (raw length len) of the local store as a remote object (store_chunk_object: its stored
 * payload) into *ret_body (malloc'd, the caller frees) and *ret_len. 0, or -errno of the read. */
const struct remote_call node_chunk_call = { .self_checked = true };

int node_encode_chunk(struct node *n, const struct store_hash *h, size_t len, void **ret_body,
		      size_t *ret_len)
{
	return store_chunk_object(n->fs->st, h, len, NODE_ZSTD_LEVEL, ret_body, ret_len);
}

/* A buffer of store_object_max() bytes for one fetched object: an idle one, else a new one.
 * Kept buffers keep their pages mapped; a body allocated afresh for every object (a mapping of
 * its own: the daemon's mmap threshold is 128 KiB, fs/fuse/daemon.c) had each page faulted in
 * and cleared (tests/bench/RESULTS.md, "A cold node's fetches"). NULL when out of memory. */
static void *fetch_buf_get(struct node *n)
{
	void *p = NULL;

	ckpt_lock(&n->fetch_mu, CKPT_RANK_NODE_FETCH);
	if (n->nfetch_bufs)
		p = n->fetch_bufs[--n->nfetch_bufs];
	ckpt_unlock(&n->fetch_mu, CKPT_RANK_NODE_FETCH);
	return p ? p : malloc(store_object_max());
}

/* Give back a buffer of fetch_buf_get: kept while fewer than NODE_FETCH_BUFS are idle. */
static void fetch_buf_put(struct node *n, void *p)
{
	ckpt_lock(&n->fetch_mu, CKPT_RANK_NODE_FETCH);
	if (n->nfetch_bufs < NODE_FETCH_BUFS) {
		n->fetch_bufs[n->nfetch_bufs++] = p;
		p = NULL;
	}
	ckpt_unlock(&n->fetch_mu, CKPT_RANK_NODE_FETCH);
	free(p);
}

/* store_fetch_fn: chunk h from the remote, checked against h, into the local store as it was
 * encoded by the node that sent it, and its bytes to the read that asked (store_chunk_put_object,
 * got). */
static int fetch_chunk(struct store *st, const struct store_hash *h, void *arg,
		       struct store_fetched *got)
{
	struct node *n = arg;
	char hex[2 * STORE_HASH_LEN + 1], key[80];
	struct store_chunk_info info;
	size_t len;
	void *buf;
	int rc;

	snprintf(key, sizeof(key), "chunks/%s", store_hash_hex(h, hex));
	if (!(buf = fetch_buf_get(n)))
		return -ENOMEM;
	rc = remote_get_into(n->r, key, buf, store_object_max(), &len);
	if (rc == -EFBIG) { /* longer than any chunk's object: not this chunk's */
		fetch_buf_put(n, buf);
		return ask_repair(n, hex, "is longer than any chunk's object");
	}
	if (rc < 0) {
		fetch_buf_put(n, buf);
		if (rc == -ENOENT) /* a manifest names it (invariant 1): lost on the remote */
			return ask_repair(n, hex, "missing");
		ckpt_log("cannot fetch chunk '%s' from the remote: %s", hex, strerror(-rc));
		node_count_error(n, NODE_ERR_FETCH);
		return -EAGAIN; /* says nothing of the chunk (store_fetch_fn) */
	}
	rc = store_chunk_put_object(st, buf, len, h, &info, got);
	fetch_buf_put(n, buf);
	if (rc == -EBADMSG) /* the remote's copy is damaged, not this step */
		return ask_repair(n, hex, "does not decode to its digest");
	if (rc == 0) {
		n->chunks_fetched++;
		n->bytes_fetched += len;
	} else {
		ckpt_log("chunk '%s' from the remote cannot be stored here: %s", hex,
			 strerror(-rc));
	}
	return rc < 0 ? rc : 0;
}

/*
 * Chunk hex on the remote is damaged or missing (why): ask the nodes for a good copy
 * (repair/<hex>, repaired by node_repair on a node that holds it, or by `ckptctl remote verify
 * --repair`). The read fails with -EAGAIN meanwhile: the step is not damaged here, so it is not
 * set aside on this node alone while the other nodes keep it (their trackers would disagree).
 */
static int ask_repair(struct node *n, const char *hex, const char *why)
{
	char key[80];
	int rc;

	node_count_error(n, NODE_ERR_DAMAGED);
	snprintf(key, sizeof(key), "repair/%s", hex);
	rc = remote_put(n->r, key, n->name, strlen(n->name));
	node_set_error(n, "chunk '%s' on the remote: %s; %s", hex, why,
		       rc == 0 ? "asked the nodes that hold it to replace it (repair/)"
			       : "cannot ask the other nodes to replace it; run 'ckptctl STORE remote "
				 "verify --repair' on the node that wrote it");
	return -EAGAIN;
}

/*
 * Replace every chunk the remote asks for (repair/<hex>) that this node holds sound: the
 * encoded copy is put over the damaged one and the request removed. A chunk not held here is
 * left for another node. One listing per call. Node thread.
 */
static void node_repair(struct node *n)
{
	struct node_learn_ctx c = { .n = n };

	if (remote_list(n->r, "repair/", repair_cb, &c) < 0)
		return;
	for (size_t i = 0; i < c.nkeys; i++) {
		const char *hex = c.keys[i].key + strlen("repair/");
		char key[80];
		struct store_hash h;
		void *body;
		size_t blen;
		struct store_chunk_info info;
		int rc;

		if (store_hash_parse(hex, &h) < 0 || store_chunk_stat(n->fs->st, &h, &info) < 0 ||
		    store_chunk_verify(n->fs->st, &h) < 0 ||
		    node_encode_chunk(n, &h, info.raw_size, &body, &blen) < 0)
			continue; /* not here, or not sound here either */
		snprintf(key, sizeof(key), "chunks/%s", hex);
		rc = remote_put_with(n->r, key, body, blen, &node_chunk_call);
		free(body);
		if (rc == 0)
			rc = remote_delete(n->r, c.keys[i].key);
		if (rc == 0)
			ckpt_log("replaced chunk '%s' on the remote, which was asked for as damaged or "
				 "missing, with this node's sound copy", hex);
		else
			node_set_error(n, "cannot replace chunk '%s' on the remote: %s", hex,
				       strerror(-rc));
	}
	node_lkeys_free(&c);
}

/*
 * nodes/<name>.json says which store runs under this node name (its store_id, host, pid,
 * renewed every NODE_PRESENCE_TICKS). Another store's presence renewed within
 * NODE_PRESENCE_TTL_NS means two nodes were given one name: this one publishes nothing and
 * counts no step global (their manifests would collide), and says so in status and the log.
 */
static void presence(struct node *n)
{
	const struct remote_call call = { .deadline_ms = NODE_PRIME_DEADLINE_MS };
	char key[REMOTE_KEY_MAX + 1], host[HOST_NAME_MAX + 1] = "?", *text;
	struct timespec now;
	size_t len;
	void *buf;
	json_t *o;
	int rc;

	snprintf(key, sizeof(key), "nodes/%s.json", n->name);
	clock_gettime(CLOCK_REALTIME, &now);
	int64_t now_ns = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;

	if ((rc = remote_get_with(n->r, key, &call, &buf, &len)) == 0) {
		o = json_loadb(buf, len, 0, NULL);
		free(buf);
		const char *id = json_string_value(json_object_get(o, "store_id"));
		int64_t beat = json_integer_value(json_object_get(o, "beat_ns"));

		if (id && strcmp(id, n->store_id) != 0 && now_ns - beat < NODE_PRESENCE_TTL_NS) {
			ckpt_lock(&n->mu, CKPT_RANK_NODE);
			if (!n->taken[0]) {
				snprintf(n->taken, sizeof(n->taken),
					 "node name '%s' is taken by another store (host %s, pid %d): "
					 "give each node its own -o node=NAME; nothing is published "
					 "from here meanwhile", n->name,
					 json_string_value(json_object_get(o, "host"))
						 ? json_string_value(json_object_get(o, "host"))
						 : "?",
					 (int)json_integer_value(json_object_get(o, "pid")));
				ckpt_log("%s", n->taken);
				node_recompute_global(n);
			}
			ckpt_unlock(&n->mu, CKPT_RANK_NODE);
			json_decref(o);
			return;
		}
		json_decref(o);
	} else if (rc != -ENOENT) {
		return; /* the remote is away: the next renewal */
	}
	gethostname(host, sizeof(host) - 1);
	o = json_pack("{s:s, s:s, s:i, s:I, s:i}", "store_id", n->store_id, "host", host, "pid",
		      (int)getpid(), "beat_ns", (json_int_t)now_ns, "nodes", (int)n->nodes);
	text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (text && remote_put_with(n->r, key, text, strlen(text), &call) == 0) {
		ckpt_lock(&n->mu, CKPT_RANK_NODE);
		if (n->taken[0]) {
			ckpt_log("node name '%s' is this store's again", n->name);
			n->taken[0] = '\0';
			node_recompute_global(n);
		}
		ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	}
	free(text);
}

/*
 * A clean stop: remove this store's presence, so that the name is free at once (a node whose
 * store was lost and is mounted again on an empty one, with a new store_id, is not taken for a
 * second node of that name). Another store's presence is left alone. Waits at most
 * NODE_PRIME_DEADLINE_MS per call.
 */
static void presence_leave(struct node *n)
{
	const struct remote_call call = { .deadline_ms = NODE_PRIME_DEADLINE_MS };
	char key[REMOTE_KEY_MAX + 1];
	size_t len;
	void *buf;
	json_t *o;

	snprintf(key, sizeof(key), "nodes/%s.json", n->name);
	if (n->taken[0] || remote_get_with(n->r, key, &call, &buf, &len) < 0)
		return;
	o = json_loadb(buf, len, 0, NULL);
	free(buf);
	if (o && json_string_value(json_object_get(o, "store_id")) &&
	    strcmp(json_string_value(json_object_get(o, "store_id")), n->store_id) == 0)
		remote_delete_with(n->r, key, &call);
	json_decref(o);
}

/*
 * The node thread. A whole tick every NODE_TICK_MS: the listing (every tick while busy, at an
 * idle node's pace else), presence, repairs, sealing, publishing, showing, gc, the record. In
 * between, while the node waits on another node (n->waiting), a poll every NODE_POLL_MS does
 * only the listing, sealing, publishing and showing; a step complete here (step_complete)
 * starts a pass at once.
 */
static void *node_main(void *arg)
{
	struct node *n = arg;
	int rc;

	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	while (!n->stop) {
		n->kick = false;
		ckpt_unlock(&n->mu, CKPT_RANK_NODE);
		/* a listing costs the remote's time for every manifest: every tick while this
		 * node saves or waits for a step to become global, else every
		 * NODE_IDLE_LIST_TICKS (another node's save this node writes nothing of, gc),
		 * and idle never more than a tenth of the time (a job of many steps and nodes) */
		int64_t t0 = ckpt_mono_ns(), listing = 0;
		bool whole = t0 >= n->next_tick_ns;

		if (n->busy ||
		    (whole && n->ticks % NODE_IDLE_LIST_TICKS == 0 && t0 >= n->next_idle_ns)) {
			if ((rc = node_learn(n, NULL, false)) < 0) {
				node_count_error(n, NODE_ERR_LIST);
				node_set_error(n, "cannot read the remote's manifests: %s; retrying",
					       strerror(-rc));
			}
			listing = ckpt_mono_ns() - t0;
			n->next_idle_ns = ckpt_mono_ns() + 9 * listing;
		}
		if (whole) {
			if (n->ticks++ % NODE_PRESENCE_TICKS == 0)
				presence(n);
			node_dirs_retry(n);
			if (n->busy || n->ticks % NODE_IDLE_LIST_TICKS == 1)
				node_repair(n);
		}
		node_seal_from_remote(n);
		node_publish(n);
		node_show_global(n);
		if (whole)
			node_gc(n);
		ckpt_lock(&n->mu, CKPT_RANK_NODE);
		bool save = whole && n->parts_changed && ckpt_mono_ns() >= n->next_record_ns;

		ckpt_unlock(&n->mu, CKPT_RANK_NODE);
		if (save)
			n->next_record_ns = ckpt_mono_ns() + NODE_RECORD_EVERY_NS;
		if (save && (rc = write_remote_json(n->fs, n)) < 0)
			node_set_error(n, "cannot record the remote's state in '" REMOTE_STORE_RECORD
				       "': %s; a mount while the remote is away knows less", strerror(-rc));
		int64_t poll = NODE_POLL_SPAN * listing, until;

		if (whole) /* a tick's wait after a whole pass, however long it took */
			n->next_tick_ns = ckpt_mono_ns() + NODE_TICK_MS * 1000000LL;
		until = n->next_tick_ns;
		if (poll < NODE_POLL_MS * 1000000LL)
			poll = NODE_POLL_MS * 1000000LL;
		if (n->waiting && ckpt_mono_ns() + poll < until)
			until = ckpt_mono_ns() + poll;
		ckpt_lock(&n->mu, CKPT_RANK_NODE);
		if (!n->stop && !n->kick && until > ckpt_mono_ns()) {
			struct timespec t = { .tv_sec = until / 1000000000LL,
					      .tv_nsec = until % 1000000000LL };

			ckpt_cond_wait(&n->cv, &n->mu, CKPT_RANK_NODE, &t);
		}
	}
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	return NULL;
}

/* fs->up.step_complete: a step became complete here, fs->mu held: wake the node thread, which
 * publishes it at once (node_publish) rather than at its next tick. */
static void step_complete(struct ckfs *fs)
{
	struct node *n = fs->node;

	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	n->kick = true;
	pthread_cond_signal(&n->cv);
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
}

/* fs->up.global_ok: step is globally complete and its other nodes' files are in this node's
 * namespace (show_global), so a resume that reads any rank's file through this mount finds it
 * once a tracker here names the step. */
static bool global_ok(struct ckfs *fs, const struct idx_step *s)
{
	struct node *n = fs->node;
	int64_t step = policy_node_step(s);
	bool ok;

	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	ok = node_key_in(n->global, n->nglobal, s->kind, step) &&
	     node_key_in(n->shown, n->nshown, s->kind, step);
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	return ok;
}

static void node_free(struct node *n)
{
	if (!n)
		return;
	remote_close(n->r);
	pthread_mutex_destroy(&n->mu);
	pthread_cond_destroy(&n->cv);
	pthread_mutex_destroy(&n->fetch_mu);
	while (n->nfetch_bufs)
		free(n->fetch_bufs[--n->nfetch_bufs]);
	free(n->parts);
	free(n->global);
	free(n->sealed_here);
	free(n->shown);
	free(n->unlisted);
	free(n->quiet_rows);
	node_ahead_free(n);
	free(n->dirs_pending);
	free(n);
}

static bool name_ok(const char *s)
{
	size_t len = strlen(s);

	if (len == 0 || len > NODE_NAME_MAX || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
		return false;
	return strchr(s, '/') == NULL;
}

/*
 * STORE/remote.json (REMOTE_STORE_RECORD): for ckptctl, url, node, nodes, keep_checkpoint_max,
 * keep_every;
 * for this node's next mount, what it knows of the remote: "store_id" (this store's identity,
 * telling two stores mounted under one node name apart), "since_ns" (its first mount with the
 * remote), "parts" (every manifest known, as struct node_part) and "shown" (the global steps whose
 * other nodes' files are in the index). A mount while the remote is away starts from them, so
 * the trackers name the last global step known. Replaced atomically and durably (temp file,
 * fdatasync, rename, fsync of STORE), the temp file removed on failure. Takes n->mu.
 */
static int write_remote_json(struct ckfs *fs, struct node *n)
{
	const struct steps_opts *so = steps_settings(fs);
	json_t *parts = json_array(), *shown = json_array(), *o;
	int rc;

	int64_t from[LAYOUT_KIND_COUNT];

	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	/* a restart needs the newest global steps (the trackers', retention's) and what is newer:
	 * the parts of older steps stay on the remote only, so that the record stays small */
	for (int k = 0; k < LAYOUT_KIND_COUNT; k++)
		from[k] = INT64_MIN;
	for (size_t i = n->nglobal, kind_n = 0; i-- > 0;) {
		const struct node_key *g = &n->global[i];

		if (i + 1 == n->nglobal || n->global[i + 1].kind != g->kind)
			kind_n = 0;
		kind_n++;
		if (g->kind >= 0 && g->kind < LAYOUT_KIND_COUNT &&
		    kind_n == node_record_steps(fs))
			from[g->kind] = g->step;
	}
	for (size_t i = 0; parts && i < n->nparts; i++) {
		const struct node_part *p = &n->parts[i];

		if (p->kind >= 0 && p->kind < LAYOUT_KIND_COUNT && p->step < from[p->kind])
			continue;

		json_array_append_new(parts, json_pack("{s:s, s:s, s:s, s:i, s:I, s:I, s:i, s:b, s:b}",
						       "node", p->node, "name", p->name, "version",
						       p->version, "kind", p->kind, "step",
						       (json_int_t)p->step, "created_ns",
						       (json_int_t)p->created_ns, "nodes",
						       (int)p->nodes, "sealed", (int)p->sealed,
						       "unpadded", (int)p->unpadded));
	}
	for (size_t i = 0; shown && i < n->nshown; i++)
		if (n->shown[i].kind < 0 || n->shown[i].kind >= LAYOUT_KIND_COUNT ||
		    n->shown[i].step >= from[n->shown[i].kind])
			json_array_append_new(shown, json_pack("[i, I]", n->shown[i].kind,
							       (json_int_t)n->shown[i].step));
	n->parts_changed = false;
	o = json_pack("{s:s, s:s, s:i, s:i, s:I, s:s, s:I, s:o?, s:o?}", "url", n->url, "node",
		      n->name, "nodes", (int)n->nodes, "keep_checkpoint_max", (int)so->keep_max,
		      "keep_every", (json_int_t)so->keep_every, "store_id",
		      n->store_id, "since_ns", (json_int_t)n->since_ns, "parts", parts, "shown", shown);
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	if (!o)
		return -ENOMEM;
	char *text = json_dumps(o, JSON_INDENT(1));

	/* atomically and durably, never through a link (ckptfs.h) */
	rc = text ? ckpt_repo_publish(fs->repo, REMOTE_STORE_RECORD, text, strlen(text)) : -ENOMEM;
	free(text);
	json_decref(o);
	if (rc < 0) {
		ckpt_lock(&n->mu, CKPT_RANK_NODE);
		n->parts_changed = true; /* the next tick tries again */
		ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	}
	return rc;
}

/*
 * What the last mount with this remote knew (write_remote_json), into n: the store's identity
 * and first mount, the parts and the shown steps. A file of another remote (a store moved to
 * another job) gives only the identity. Returns the parts loaded.
 */
static size_t read_remote_json(struct ckfs *fs, struct node *n)
{
	int fd = ckpt_repo_openat(fs->repo, REMOTE_STORE_RECORD, O_RDONLY, 0);
	json_t *o = fd >= 0 ? json_loadfd(fd, 0, NULL) : NULL, *x;
	const char *id, *url;
	size_t i, loaded = 0;

	if (fd >= 0)
		close(fd);
	if (!o)
		return 0;
	id = json_string_value(json_object_get(o, "store_id"));
	url = json_string_value(json_object_get(o, "url"));
	if (id && strlen(id) < sizeof(n->store_id))
		snprintf(n->store_id, sizeof(n->store_id), "%s", id);
	if (!url || strcmp(url, n->url) != 0 || !n->store_id[0]) {
		json_decref(o);
		return 0;
	}
	n->since_ns = json_integer_value(json_object_get(o, "since_ns"));
	json_array_foreach(json_object_get(o, "parts"), i, x)
	{
		struct node_part p = { .seen = true };
		const char *node = json_string_value(json_object_get(x, "node"));
		const char *name = json_string_value(json_object_get(x, "name"));
		const char *ver = json_string_value(json_object_get(x, "version"));

		if (!node || !name || !ver || strlen(node) > NODE_NAME_MAX ||
		    strlen(name) > IDX_STEP_NAME_MAX || strlen(ver) > NODE_VERSION_LEN ||
		    ckpt_grow(&n->parts, &n->capparts, n->nparts, sizeof(*n->parts)) < 0)
			continue;
		snprintf(p.node, sizeof(p.node), "%s", node);
		snprintf(p.name, sizeof(p.name), "%s", name);
		snprintf(p.version, sizeof(p.version), "%s", ver);
		p.kind = (int)json_integer_value(json_object_get(x, "kind"));
		p.step = json_integer_value(json_object_get(x, "step"));
		p.created_ns = json_integer_value(json_object_get(x, "created_ns"));
		p.nodes = (unsigned)json_integer_value(json_object_get(x, "nodes"));
		p.sealed = json_is_true(json_object_get(x, "sealed"));
		/* a record without the field is from before the padding: its parts' keys are */
		p.unpadded = !json_object_get(x, "unpadded") ||
			     json_is_true(json_object_get(x, "unpadded"));
		n->parts[n->nparts++] = p;
		loaded++;
	}
	json_array_foreach(json_object_get(o, "shown"), i, x)
		node_key_add(&n->shown, &n->capshown, &n->nshown,
			(int)json_integer_value(json_array_get(x, 0)),
			json_integer_value(json_array_get(x, 1)));
	json_decref(o);
	if (n->nparts)
		qsort(n->parts, n->nparts, sizeof(*n->parts), part_sort_cmp);
	node_recompute_global(n);
	return loaded;
}

int node_open(struct ckfs *fs, const struct node_cfg *cfg, char *err, size_t errlen)
{
	struct node *n = calloc(1, sizeof(*n));
	int rc;

	if (!n)
		return -ENOMEM;
	pthread_condattr_t ca;

	pthread_mutex_init(&n->mu, NULL);
	pthread_mutex_init(&n->fetch_mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the tick, not the wall clock */
	pthread_cond_init(&n->cv, &ca);
	pthread_condattr_destroy(&ca);
	n->fs = fs;
	n->nodes = cfg->nodes;
	n->gc_off = cfg->gc_off;
	if (cfg->name)
		snprintf(n->name, sizeof(n->name), "%s", cfg->name);
	else if (gethostname(n->name, sizeof(n->name)) < 0)
		n->name[0] = '\0';
	n->name[NODE_NAME_MAX] = '\0';
	snprintf(n->url, sizeof(n->url), "%s", cfg->url);
	if (!name_ok(n->name) || cfg->nodes == 0) {
		snprintf(err, errlen, "%s: give -o node=NAME (1 to %d bytes, no '/') and "
			 "-o nodes=N (N >= 1, the nodes in the job)",
			 cfg->nodes == 0 ? "-o nodes=N is missing or 0" : "bad node name",
			 NODE_NAME_MAX);
		node_free(n);
		return -EINVAL;
	}
	size_t known = read_remote_json(fs, n);

	if (!n->store_id[0]) {
		uint8_t rnd[16];
		struct store_hash h;
		char hex[2 * STORE_HASH_LEN + 1];

		if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
			clock_gettime(CLOCK_REALTIME, (struct timespec *)rnd);
		store_hash_buf(rnd, sizeof(rnd), &h);
		snprintf(n->store_id, sizeof(n->store_id), "%.16s", store_hash_hex(&h, hex));
	}
	if (!n->since_ns)
		n->since_ns = ckfs_now(fs);
	if ((rc = remote_open(cfg->url, NULL, &n->r, err, errlen)) < 0) {
		struct remote_opts lazy = { .unchecked = true };
		char why[512];

		/* this store has used the remote before: mount with what it knew, catch up later */
		snprintf(why, sizeof(why), "%s", err);
		if (!known || remote_open(cfg->url, &lazy, &n->r, err, errlen) < 0) {
			snprintf(err, errlen, "%s", why);
			node_free(n);
			return rc;
		}
		node_set_error(n, "the remote does not answer at mount (%s); the trackers name the "
			       "last global step known here until it does", why);
	}
	if (remote_endpoint_plaintext(remote_endpoint(n->r)))
		ckpt_log("warning: the remote's endpoint '%s' is plain HTTP to another host: every "
			 "chunk and manifest crosses the network unencrypted (SigV4 signs requests, "
			 "it does not hide them); use https:// unless the network is trusted\n",
			 remote_endpoint(n->r));
	if ((rc = write_remote_json(fs, n)) < 0)
		ckpt_log("cannot record the remote in '%s/" REMOTE_STORE_RECORD "': %s; 'ckptctl %s "
			 "remote' will not find it", fs->repo->root, strerror(-rc), fs->repo->root);
	fs->node = n;
	store_set_fetch(fs->st, fetch_chunk, n);
	/* from now on only global steps count, for the trackers and for the retention that
	 * steps_init runs: none until node_prime has learnt the remote's manifests */
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	fs->up.global_ok = global_ok;
	fs->up.step_complete = step_complete;
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	return 0;
}

void node_prime(struct ckfs *fs)
{
	struct node *n = fs->node;
	int rc;

	const struct remote_call call = { .deadline_ms = NODE_PRIME_DEADLINE_MS };

	presence(n);
	n->ticks = 1;
	if ((rc = node_learn(n, &call, true)) < 0) {
		node_set_error(n, "cannot read the remote's manifests: %s; the trackers name no "
			       "step newer than this node knows global until the remote answers",
			       strerror(-rc));
		return;
	}
	node_show_global(n);
}

int node_start(struct ckfs *fs, char *err, size_t errlen)
{
	struct node *n = fs->node;
	int rc;

	if ((rc = ckpt_workers_start(&n->th, 1, node_main, n)) < 0) {
		snprintf(err, errlen, "cannot start the node thread: %s", strerror(-rc));
		return rc;
	}
	return 0;
}

void node_stop(struct ckfs *fs)
{
	struct node *n = fs->node;

	if (!n)
		return;
	ckpt_workers_stop(&n->th, &n->mu, &n->cv, &n->stop);
	if (n->parts_changed && write_remote_json(fs, n) < 0)
		ckpt_log("cannot record the remote's state in '" REMOTE_STORE_RECORD "' at unmount");
	presence_leave(n);
	store_set_fetch(fs->st, NULL, NULL); /* a read after this finds the chunk missing */
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	fs->up.global_ok = NULL;
	fs->up.step_complete = NULL;
	fs->node = NULL;
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	node_free(n);
}
