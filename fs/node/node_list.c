/*
 * node_list.c — learning the remote's manifests (node_int.h node_learn): list manifests/, whole
 * or from the newest global step up, read the manifests not known yet (the newest first, at most
 * NODE_LEARN_MAX per tick), forget the parts whose manifest is gone, and count the listings for
 * .ckptfs/status and the metrics (n->lists, n->listed, n->last_listed).
 *
 * Invariants:
 *   1. A part is forgotten only after a whole listing that succeeded and named at least one
 *      known part: a listing that failed half way, started after a key, or lists a remote that
 *      is not the one the parts came from forgets nothing.
 *   2. n->list_after is written under n->mu (list_position) and read by the node thread only.
 *
 * Node thread, and node_prime before the node thread starts; takes n->mu (node.c invariant 3),
 * never fs->mu.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/core/lockrank.h"
#include "fs/node/node_int.h"

/* Longest time between two whole listings of the remote's manifests, ns: the listings between
 * list only the keys above the newest global step's (node_learn), and a whole one learns what
 * those cannot see: manifests another node's gc removed (of steps older than every kept one,
 * which retention here drops too), a part put late for a step older than the newest global one.
 * A node that saves lists at every tick: one whole listing in 300; an idle one, in 12. */
#define NODE_FULL_LIST_NS (60 * 1000000000LL)

/* Most manifests one learn reads in the node thread, the newest first (select_keys). */
#define NODE_LEARN_MAX 4096

int node_lkey_add(struct node_learn_ctx *c, const char *key, int kind, int64_t step)
{
	char *k;

	if (ckpt_grow(&c->keys, &c->cap, c->nkeys, sizeof(*c->keys)) < 0 || !(k = strdup(key)))
		return -ENOMEM;
	c->keys[c->nkeys++] = (struct node_lkey){ k, kind, step };
	return 0;
}

void node_lkeys_free(struct node_learn_ctx *c)
{
	for (size_t i = 0; i < c->nkeys; i++)
		free(c->keys[i].key);
	free(c->keys);
}

/* The node, kind, step and version of a manifest's key "manifests/<kind>/<step>/<node>/
 * <version>.json" (or "manifests/<kind>/<step>/<node>.json", version "", from before versions),
 * and whether its step is unpadded (NODE_STEP_DIGITS). */
static bool parse_key(const char *key, struct node_part *p)
{
	int kind, off = 0, at = 0;
	long long step;
	const char *node, *slash;
	size_t len;

	if (sscanf(key, "manifests/%d/%n%lld/%n", &kind, &at, &step, &off) != 2 || off == 0)
		return false;
	node = key + off;
	len = strlen(node);
	if (len <= 5 || strcmp(node + len - 5, ".json") != 0)
		return false;
	memset(p, 0, sizeof(*p));
	slash = strchr(node, '/');
	if (slash) {
		const char *ver = slash + 1;

		if ((size_t)(slash - node) > NODE_NAME_MAX || slash == node ||
		    strlen(ver) != NODE_VERSION_LEN + 5 || strchr(ver, '/'))
			return false;
		memcpy(p->node, node, (size_t)(slash - node));
		memcpy(p->version, ver, NODE_VERSION_LEN);
	} else {
		if (len - 5 > NODE_NAME_MAX)
			return false;
		memcpy(p->node, node, len - 5);
	}
	p->kind = kind;
	p->step = step;
	p->unpadded = off - at - 1 != NODE_STEP_DIGITS;
	return true;
}

/* Newest step first (then by layout): a learn that reads only some manifests reads those. */
static int lkey_newest_first(const void *a, const void *b)
{
	const struct node_lkey *x = a, *y = b;

	if (x->step != y->step)
		return x->step > y->step ? -1 : 1;
	return (x->kind > y->kind) - (x->kind < y->kind);
}

/*
 * Keep the keys learn reads now: at mount (prime), those of the newest NODE_RECORD_STEPS (or
 * keep_checkpoint_max) steps of each layout, so that the mount costs what the kept steps have
 * published, not the whole job; in the node thread, the newest NODE_LEARN_MAX, so that a tick
 * stays short and the older ones come at the next ticks. Returns whether keys were left out.
 */
static bool select_keys(struct node_learn_ctx *c, bool prime, unsigned keep)
{
	int64_t last[LAYOUT_KIND_COUNT];
	unsigned steps[LAYOUT_KIND_COUNT] = { 0 };
	size_t o = 0;

	if (c->nkeys)
		qsort(c->keys, c->nkeys, sizeof(*c->keys), lkey_newest_first);
	for (int k = 0; k < LAYOUT_KIND_COUNT; k++)
		last[k] = -1;
	for (size_t i = 0; i < c->nkeys; i++) {
		const struct node_lkey *x = &c->keys[i];
		bool keep_it = o < NODE_LEARN_MAX;

		if (prime && x->kind >= 0 && x->kind < LAYOUT_KIND_COUNT) {
			if (x->step != last[x->kind]) {
				last[x->kind] = x->step;
				steps[x->kind]++;
			}
			keep_it = steps[x->kind] <= keep;
		}
		if (keep_it)
			c->keys[o++] = *x;
		else
			free(x->key);
	}
	bool left = o != c->nkeys;

	c->nkeys = o;
	return left;
}

static int learn_cb(const char *key, uint64_t size, void *arg)
{
	struct node_learn_ctx *c = arg;
	struct node_part p, *q;
	bool known;

	(void)size;
	c->listed++;
	if (!parse_key(key, &p))
		return 0;
	ckpt_lock(&c->n->mu, CKPT_RANK_NODE);
	q = node_find_part(c->n, p.node, p.kind, p.step);
	known = q && strcmp(q->version, p.version) == 0;
	if (known) {
		q->seen = true;
		q->unpadded = p.unpadded; /* a part from remote.json: its key as it is */
	}
	ckpt_unlock(&c->n->mu, CKPT_RANK_NODE);
	if (known || strlen(key) > REMOTE_KEY_MAX)
		return 0;
	return node_lkey_add(c, key, p.kind, p.step);
}

/*
 * A manifest with an unpadded step (key, of node) appeared on the remote after this node's first
 * whole listing: that node's daemon, running now, is older than the padded keys (NODE_STEP_DIGITS)
 * and builds every manifest key it reads unpadded, so it cannot show the steps this node
 * publishes (its GETs find nothing) and its tracker stops while this one's goes on. Nothing here
 * can fix that; say it, once, in status, the log and the metrics. Node thread.
 */
static void older_node(struct node *n, const char *key, const char *node)
{
	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	if (n->older[0]) {
		ckpt_unlock(&n->mu, CKPT_RANK_NODE);
		return;
	}
	snprintf(n->older, sizeof(n->older),
		 "node '%s' runs an older ckptfs (it wrote '%.80s' with an unpadded step): it "
		 "cannot read the manifests this node writes, so its tracker stops; run one ckptfs "
		 "version on every node", node, key);
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	ckpt_log("%s", n->older);
}

/*
 * Where the next partial listing starts (n->list_after): below every key of each layout's newest
 * global step (its oldest step known when none is global), or of an older step this node
 * published within NODE_BUSY_NS and not global yet (a save after a resume from an older step:
 * the other nodes' parts of it come now); the lowest of these over the layouts known; "" (a
 * whole listing) when no part is known. What comes after that key is the step's new versions,
 * the parts of the steps after it, and the manifests with unpadded steps (NODE_STEP_DIGITS),
 * all above it in byte order. n->mu held.
 */
static void list_position(struct node *n)
{
	char best[REMOTE_KEY_MAX + 1] = "";
	int64_t now = ckfs_now(n->fs);

	for (size_t i = 0; i < n->nparts;) {
		int kind = n->parts[i].kind;
		int64_t low = n->parts[i].step; /* parts sort by (kind, step, node) */
		size_t g = node_key_lower(n->global, n->nglobal, kind + 1, INT64_MIN);
		char k[REMOTE_KEY_MAX + 1];

		if (g > 0 && n->global[g - 1].kind == kind)
			low = n->global[g - 1].step;
		for (; i < n->nparts && n->parts[i].kind == kind; i++) {
			const struct node_part *p = &n->parts[i];

			if (p->step < low && strcmp(p->node, n->name) == 0 &&
			    now - p->learnt_ns < NODE_BUSY_NS && !node_is_global(n, kind, p->step))
				low = p->step;
		}
		snprintf(k, sizeof(k), "manifests/%d/%0*" PRId64, kind, NODE_STEP_DIGITS, low);
		if (!best[0] || strcmp(k, best) < 0)
			memcpy(best, k, sizeof(best));
	}
	memcpy(n->list_after, best, sizeof(best));
}

/*
 * Read the manifests not known yet, and forget the parts whose manifest is gone (only after a
 * whole listing: a part is never dropped because a listing failed half-way or did not look).
 * The listing is whole at mount (prime), after a failure or a listing that left keys unread,
 * after this node's gc removed manifests (n->list_full), and NODE_FULL_LIST_NS after the last
 * whole one; else it starts at n->list_after (list_position), so that a tick lists the parts of
 * the steps in flight, not every manifest of the job. Returns 0 or the remote's -errno.
 */
int node_learn(struct node *n, const struct remote_call *call, bool prime)
{
	struct node_learn_ctx c = { .n = n };
	bool whole = prime || n->list_full || !n->list_after[0] ||
		     ckpt_mono_ns() >= n->next_full_ns;
	bool left = false;
	int rc;

	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	for (size_t i = 0; whole && i < n->nparts; i++)
		n->parts[i].seen = false;
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	rc = remote_list_after_with(n->r, "manifests/", whole ? "" : n->list_after, learn_cb, &c,
				    call);
	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	n->lists[whole]++;
	n->listed[whole] += c.listed;
	n->last_listed = c.listed;
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	if (rc == 0)
		left = select_keys(&c, prime, node_record_steps(n->fs));
	struct node_part *got = NULL;
	size_t ngot = 0, capgot = 0;

	for (size_t i = 0; rc == 0 && i < c.nkeys; i++) {
		struct node_part p, k;
		char err[256] = "";
		size_t len;
		void *buf;

		if ((rc = remote_get_with(n->r, c.keys[i].key, call, &buf, &len)) == -ENOENT) {
			rc = 0; /* removed since the listing (a new version, gc) */
			continue;
		}
		if (rc < 0)
			break;
		if (node_manifest_parse(buf, len, &p, err, sizeof(err)) < 0 ||
		    !parse_key(c.keys[i].key, &k) ||
		    strcmp(k.node, p.node) || k.kind != p.kind || k.step != p.step ||
		    strcmp(k.version, p.version)) {
			if (!err[0])
				snprintf(err, sizeof(err), "its key does not match its content");
			ckpt_log("remote manifest '%s' ignored: %s", c.keys[i].key, err);
		} else if (ckpt_grow(&got, &capgot, ngot, sizeof(*got)) < 0) {
			rc = -ENOMEM;
		} else {
			p.seen = true;
			p.unpadded = k.unpadded;
			if (k.unpadded && n->listed_whole && strcmp(p.node, n->name) != 0)
				older_node(n, c.keys[i].key, p.node);
			p.learnt_ns = ckfs_now(n->fs);
			got[ngot++] = p;
		}
		free(buf);
	}
	node_lkeys_free(&c);
	if (ngot) {
		int arc = node_add_parts(n, got, ngot);

		rc = rc ? rc : arc;
	}
	free(got);
	if (rc == 0 && whole) {
		size_t seen = 0, o = 0;

		ckpt_lock(&n->mu, CKPT_RANK_NODE);
		for (size_t i = 0; i < n->nparts; i++)
			seen += n->parts[i].seen;
		/* a listing with none of the parts known is a remote that is not what it was (a
		 * shared file system not mounted at its path): keep them rather than lose every
		 * global step; a gc never removes the newest steps' manifests */
		for (size_t i = 0; seen && i < n->nparts; i++) {
			if (!n->parts[i].seen) {
				node_key_del(n->shown, &n->nshown, n->parts[i].kind, n->parts[i].step);
				node_key_del(n->unlisted, &n->nunlisted, n->parts[i].kind, n->parts[i].step);
				continue;
			}
			n->parts[o++] = n->parts[i];
		}
		if (seen && o != n->nparts) {
			n->nparts = o;
			n->parts_changed = true;
			node_recompute_global(n);
		}
		ckpt_unlock(&n->mu, CKPT_RANK_NODE);
		if (!seen && n->nparts)
			node_set_error(n, "the remote lists none of the %zu manifests known here; "
				       "is it the right remote?", n->nparts);
	}
	n->list_full = rc != 0 || left;
	if (rc == 0 && whole) {
		n->next_full_ns = ckpt_mono_ns() + NODE_FULL_LIST_NS;
		n->listed_whole = true;
	}
	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	list_position(n);
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	return rc;
}

