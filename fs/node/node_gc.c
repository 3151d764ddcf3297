/*
 * node_gc.c — the remote's gc run by the node thread itself (node_int.h node_gc): with a
 * retention (keep_checkpoint_max >= 1) and without -o remote_gc=off, the pruned steps'
 * manifests and chunks leave the remote without anyone running `ckptctl STORE remote gc`.
 *
 * Every node runs it, by the rule and protocol of fs/node/rgc.h, which ckptctl runs too: gc/lease
 * is taken put-if-absent, so at most one gc (a node's or ckptctl's) removes at a time, and the
 * nodes that find it held skip their pass. The lease lapses LEASE_GC_EXPIRY_S (900 s) after its
 * last renewal (lease.h says why that figure): a node that died in a gc holds the others' gc
 * and publishing back that long at most.
 *
 * When:
 *   1. NODE_GC_GRACE_NS after a layout's newest global step changed, when by what this node
 *      knows of the remote (its parts) the rule dooms a step: more than keep global steps of a
 *      layout, or a part of a step never global older than the newest global one. The pass
 *      itself decides on the remote's manifests, read afresh.
 *   2. Every NODE_GC_EVERY_NS whatever this node knows: chunks of uploads that died before
 *      their manifest, steps older than this node learnt, stale markers of dead nodes.
 *   3. A pass that was blocked (another gc holds the lease, a node uploads) or failed is tried
 *      again NODE_GC_RETRY_NS later, twice as long after each failure in a row up to
 *      NODE_GC_EVERY_NS (a full remote, a remote away: a log line per try).
 *
 * It runs in the node thread, between publishing and learning: a pass of many deletes holds
 * this node's publishing back, as the lease holds every node's. An unmount stops it at the next
 * remote operation (rgc_opts.stop). Lines are logged "remote gc: ..."; what the last pass did is
 * in .ckptfs/status (node_status).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "fs/core/lockrank.h"
#include "fs/node/node_int.h"
#include "fs/node/rgc.h"
#include "fs/policy/policy.h"

/* How often a node runs a gc pass with nothing doomed by what it knows, ns: each pass reads
 * every manifest on the remote, an hour makes that a small share of the remote's requests. */
#define NODE_GC_EVERY_NS (3600 * 1000000000LL)

/* How long after a new global step the pass waits, ns: every node learns a step global within
 * an idle listing (node.c NODE_IDLE_LIST_TICKS, 5 s) of the others; until then its trackers may
 * still name the step before, which with keep_checkpoint_max=1 the pass removes. Two listings'
 * time lets a resume at that moment still find it whole. */
#define NODE_GC_GRACE_NS (10 * 1000000000LL)

/* How long after a blocked or failed pass the node tries again, ns: an upload of one step
 * (whose marker blocks the gc) takes seconds to minutes; the other nodes' passes meanwhile
 * find the lease held and skip. */
#define NODE_GC_RETRY_NS (10 * 1000000000LL)

/* rgc_opts.stop: the mount ends. */
static bool gc_stopping(void *arg)
{
	struct node *n = arg;
	bool stop;

	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	stop = n->stop;
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	return stop;
}

/* Keep line as what the gc did last, for .ckptfs/status. Takes n->mu. */
static void gc_last(struct node *n, const char *line)
{
	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	snprintf(n->gc_last, sizeof(n->gc_last), "%s", line);
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
}

/* rgc_say_fn of the daemon: the lease taken and reports are logged, errors logged and kept as
 * the last remote error, what blocks the pass only kept for the status (the other nodes' passes
 * find the lease held at every new global step: not worth a log line). */
static void gc_say(void *arg, enum rgc_say kind, const char *line)
{
	struct node *n = arg;
	char buf[sizeof(n->gc_last)];

	switch (kind) {
	case RGC_HELD:
		n->gc_held = true;
		ckpt_log("remote gc: started, holding %s", line + strlen("took "));
		break;
	case RGC_REPORT:
		ckpt_log("remote gc: %s", line);
		break;
	case RGC_ERROR:
		node_set_error(n, "remote gc: %s", line);
		break;
	case RGC_BLOCKED:
		snprintf(buf, sizeof(buf), "skipped: %s", line);
		gc_last(n, buf);
		break;
	}
}

/* When 1 at the top: whether a layout's newest global step changed since the last look (kept
 * in n->gc_newest), and the rule dooms a step of n's parts. n->mu held. */
static bool gc_due(struct node *n, unsigned keep)
{
	int64_t newest[LAYOUT_KIND_COUNT];
	bool changed = false, doomed = false;
	size_t per_kind = 0;

	for (int k = 0; k < LAYOUT_KIND_COUNT; k++)
		newest[k] = INT64_MIN;
	/* n->global is sorted by (kind, step): a layout's run ends at its newest */
	for (size_t i = 0; i < n->nglobal; i++) {
		const struct node_key *g = &n->global[i];
		bool counts = rgc_rule_counts(policy_node_step_number(g->kind, g->step),
					      steps_settings(n->fs)->keep_every);

		per_kind = (i > 0 && n->global[i - 1].kind == g->kind ? per_kind : 0) + counts;
		doomed |= per_kind > keep;
		if (g->kind >= 0 && g->kind < LAYOUT_KIND_COUNT)
			newest[g->kind] = g->step;
	}
	for (size_t i = 0; i < n->nparts && !doomed; i++) {
		const struct node_part *p = &n->parts[i];

		doomed = p->kind >= 0 && p->kind < LAYOUT_KIND_COUNT && p->step < newest[p->kind] &&
			 !node_is_global(n, p->kind, p->step);
	}
	for (int k = 0; k < LAYOUT_KIND_COUNT; k++) {
		changed |= newest[k] != n->gc_newest[k];
		n->gc_newest[k] = newest[k];
	}
	return doomed && changed;
}

/* One pass (rgc_run) on the remote's manifests read afresh. full: run even when the rule dooms
 * nothing (the hourly pass: chunks named by no manifest). Returns 0 (done, or nothing to do),
 * or -errno (blocked or failed: try again later). */
static int gc_pass(struct node *n, bool full)
{
	char who[NODE_NAME_MAX + 32], s1[48], line[sizeof(n->gc_last) - 64], when[32];
	struct rgc_opts o = {
		.nodes = n->nodes,
		.keep = steps_settings(n->fs)->keep_max,
		.keep_every = steps_settings(n->fs)->keep_every,
		.holder = who,
		.root = n->fs->repo->root,
		.say = gc_say,
		.say_arg = n,
		.stop = gc_stopping,
		.stop_arg = n,
	};
	struct rgc c = { .r = n->r, .o = &o };
	struct rgc_tally g = { 0 };
	int rc;

	snprintf(who, sizeof(who), "ckptfs node '%s'", n->name);
	n->gc_held = false;
	if ((rc = rgc_read_manifests(&c)) < 0 || (rc = rgc_choose_doomed(&c)) < 0) {
		if (rc != -ECANCELED)
			node_set_error(n, "remote gc: cannot read the remote's manifests: %s; "
				       "retrying", strerror(-rc));
		rgc_release(&c);
		return rc;
	}
	if (!full && c.ndoomed == 0) {
		rgc_release(&c); /* another node's pass removed them since this node learnt */
		return 0;
	}
	rc = rgc_run(&c, &g);
	rgc_release(&c);
	if (g.manifests)
		n->list_full = true; /* a partial listing would not see them gone (node_learn) */
	if (!n->gc_held)
		return rc;
	lease_time(lease_now_ns(), when, sizeof(when));
	if (rc == 0) {
		snprintf(line, sizeof(line), "removed %" PRIu64 " manifests, %" PRIu64 " chunks (%s) "
			 "of %zu steps, %" PRIu64 " step directories, %" PRIu64 " upload markers of "
			 "dead nodes; keep_checkpoint_max %u", g.manifests, g.chunks,
			 policy_size_text(g.chunk_bytes, s1, sizeof(s1)), g.steps, g.dirs,
			 g.markers, o.keep);
		ckpt_log("remote gc: %s", line);
	} else {
		snprintf(line, sizeof(line), "stopped (%s) after removing %" PRIu64 " manifests, "
			 "%" PRIu64 " chunks; what it removed is needed by no kept step",
			 rc == -ECANCELED ? "the mount ends" : strerror(-rc), g.manifests, g.chunks);
		ckpt_log("remote gc: %s", line);
	}
	char last[sizeof(n->gc_last)];

	/* line leaves room for " at " and the time */
	snprintf(last, sizeof(last), "%s at %s", line, when);
	gc_last(n, last);
	return rc == 0 && g.errors ? -EIO : rc;
}

void node_gc(struct node *n)
{
	int64_t now = ckpt_mono_ns();
	bool due, full;

	if (n->gc_off || steps_settings(n->fs)->keep_max == 0)
		return;
	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	/* nodes that disagree on the job count steps global by another rule: remove nothing */
	if (n->disagree[0] || n->taken[0]) {
		ckpt_unlock(&n->mu, CKPT_RANK_NODE);
		return;
	}
	due = gc_due(n, steps_settings(n->fs)->keep_max);
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	if (n->gc_next_ns == 0)
		n->gc_next_ns = now + NODE_GC_EVERY_NS;
	if (due && !n->gc_retry_ns)
		n->gc_retry_ns = now + NODE_GC_GRACE_NS; /* when 1 */
	full = now >= n->gc_next_ns;
	due = n->gc_retry_ns && now >= n->gc_retry_ns;
	if (!due && !full)
		return;
	n->gc_retry_ns = 0;
	if (full)
		n->gc_next_ns = now + NODE_GC_EVERY_NS;
	if (gc_pass(n, full) == 0) {
		n->gc_wait_ns = 0;
		return;
	}
	n->gc_wait_ns = n->gc_wait_ns ? 2 * n->gc_wait_ns : NODE_GC_RETRY_NS;
	if (n->gc_wait_ns > NODE_GC_EVERY_NS)
		n->gc_wait_ns = NODE_GC_EVERY_NS;
	n->gc_retry_ns = ckpt_mono_ns() + n->gc_wait_ns;
}
