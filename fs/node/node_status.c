/*
 * node_status.c — what a node says of itself: the lines of `.ckptfs/status` (node_status) and
 * the `ckptfs_remote_*` metrics (node_metrics), read from the node's figures under its lock.
 *
 * Any thread; takes n->mu (node.c invariant 3), never fs->mu.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fs/core/lockrank.h"
#include "fs/node/node_int.h"
#include "fs/policy/policy.h"

/* Steps listed in .ckptfs/status, the newest. */
#define NODE_STATUS_STEPS 32

/* Append to buf (cap bytes, *used of them written), truncating at cap - 1. */
static void bput(char *buf, size_t cap, size_t *used, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void bput(char *buf, size_t cap, size_t *used, const char *fmt, ...)
{
	va_list ap;

	if (*used >= cap)
		return;
	va_start(ap, fmt);
	*used += (size_t)vsnprintf(buf + *used, cap - *used, fmt, ap);
	va_end(ap);
}

size_t node_status(struct ckfs *fs, char *buf, size_t cap)
{
	struct node *n = fs->node;
	size_t used = 0;

#define PUT(...) bput(buf, cap, &used, __VA_ARGS__)
	if (!n || cap == 0)
		return 0;
	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	PUT("remote:           %s\n", n->url);
	PUT("node:             %s (1 of %u)\n", n->name, n->nodes);
	PUT("published:        %" PRIu64 " steps, %" PRIu64 " chunks sent (%" PRIu64
	    " bytes), %" PRIu64 " already there, %" PRIu64 " sent ahead and not looked at "
	    "again\n",
	    n->published, n->chunks_sent, n->bytes_sent, n->chunks_there, n->chunks_trusted);
	PUT("ahead:            %" PRIu64 " passes over steps being saved described %" PRIu64
	    " files (%" PRIu64 " extents)\n", n->ahead_passes, n->ahead_files, n->ahead_extents);
	PUT("fetched:          %" PRIu64 " chunks (%" PRIu64 " bytes) of other nodes' files\n",
	    (uint64_t)n->chunks_fetched, (uint64_t)n->bytes_fetched);
	PUT("listing:          %" PRIu64 " manifests at the last; %" PRIu64 " listings after "
	    "the newest global step (%" PRIu64 " manifests), %" PRIu64 " whole (%" PRIu64
	    " manifests); the next after '%s'\n",
	    n->last_listed, n->lists[0], n->listed[0], n->lists[1], n->listed[1],
	    n->list_after);
	if (n->last_error[0])
		PUT("remote error:     %s\n", n->last_error);
	if (n->disagree[0])
		PUT("nodes disagree:   %s\n", n->disagree);
	if (n->taken[0])
		PUT("nodes disagree:   %s\n", n->taken);
	if (n->older[0])
		PUT("older node:       %s\n", n->older);
	if (n->gc_note[0])
		PUT("gc lease:         %s\n", n->gc_note);
	if (n->gc_off)
		PUT("remote gc:        off (-o remote_gc=off); 'ckptctl %s remote gc' collects by "
		    "hand\n", fs->repo->root);
	else if (steps_settings(fs)->keep_max == 0)
		PUT("remote gc:        none: keep_checkpoint_max=0 keeps every step ('ckptctl %s "
		    "remote gc' removes chunks no manifest names)\n", fs->repo->root);
	else
		PUT("remote gc:        %s\n", n->gc_last[0] ? n->gc_last
			: "no pass yet: one node at a time removes the steps past keep_checkpoint_max "
			  "once a step is globally complete (-o remote_gc=off: never)");
	/* the newest NODE_STATUS_STEPS steps (of the last layouts): parts are sorted by step */
	size_t from = n->nparts, shown = 0;

	while (from > 0 && shown < NODE_STATUS_STEPS) {
		size_t lo, hi;

		node_step_range(n, n->parts[from - 1].kind, n->parts[from - 1].step, &lo, &hi);
		from = lo;
		shown++;
	}
	if (from > 0)
		PUT("steps:            %zu parts of older steps not listed\n", from);
	for (size_t i = from; i < n->nparts;) {
		const struct node_part *a = &n->parts[i];
		size_t lo, hi;

		node_step_range(n, a->kind, a->step, &lo, &hi);
		PUT("step %s (%" PRId64 "): %s; published by", a->name,
		    policy_node_step_number(a->kind, a->step),
		    !node_key_in(n->global, n->nglobal, a->kind, a->step) ? "waiting for nodes"
		    : node_key_in(n->shown, n->nshown, a->kind, a->step)
			    ? "globally complete"
			    : "globally complete, the other nodes' files not shown here yet");
		for (size_t j = lo; j < hi; j++)
			PUT(" %s%s%s", n->parts[j].node, n->parts[j].sealed ? "*" : "",
			    n->parts[j].stale ? " (an earlier save)" : "");
		PUT("\n");
		i = hi;
	}
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
#undef PUT
	return used < cap ? used : cap - 1;
}

void node_metrics(struct ckfs *fs, struct ckpt_text *p)
{
	static const char *const err_kind[NODE_ERR_COUNT] = { "list", "publish", "fetch",
							      "damaged" };
	struct node *n = fs->node;
	int64_t last[LAYOUT_KIND_COUNT];
	size_t mine = 0;

	if (!n)
		return;
	for (int k = 0; k < LAYOUT_KIND_COUNT; k++)
		last[k] = -1;
	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	for (size_t i = 0; i < n->nparts; i++)
		mine += strcmp(n->parts[i].node, n->name) == 0;
	for (size_t i = 0; i < n->nglobal; i++)
		if (n->global[i].kind >= 0 && n->global[i].kind < LAYOUT_KIND_COUNT &&
		    n->global[i].step > last[n->global[i].kind])
			last[n->global[i].kind] = n->global[i].step;
	prom_family(p, "ckptfs_remote_bytes_total", "counter",
		    "Bytes of chunk objects sent to the remote (up) and fetched from it (down), as "
		    "stored there (compressed).");
	prom_u64(p, "ckptfs_remote_bytes_total", "direction", "up", n->bytes_sent);
	prom_u64(p, "ckptfs_remote_bytes_total", "direction", "down", n->bytes_fetched);
	prom_family(p, "ckptfs_remote_chunks_total", "counter",
		    "Chunks sent, found there already (another node sent them), relied on by a "
		    "publish without a HEAD (sent ahead, no gc since), and fetched.");
	prom_u64(p, "ckptfs_remote_chunks_total", "op", "sent", n->chunks_sent);
	prom_u64(p, "ckptfs_remote_chunks_total", "op", "there", n->chunks_there);
	prom_u64(p, "ckptfs_remote_chunks_total", "op", "relied", n->chunks_trusted);
	prom_u64(p, "ckptfs_remote_chunks_total", "op", "fetched", n->chunks_fetched);
	node_ahead_metrics(n, p);
	prom_family(p, "ckptfs_remote_steps", "gauge",
		    "Steps this node has published (complete here) and steps globally complete "
		    "(every node's part on the remote, one sealed).");
	prom_u64(p, "ckptfs_remote_steps", "state", "published", mine);
	prom_u64(p, "ckptfs_remote_steps", "state", "global", n->nglobal);
	prom_family(p, "ckptfs_remote_last_global_step", "gauge",
		    "Step number of the newest globally complete step, per layout.");
	for (int k = 0; k < LAYOUT_KIND_COUNT; k++)
		if (last[k] >= 0)
			prom_i64(p, "ckptfs_remote_last_global_step", "layout",
				 layout_name((enum layout_kind)k),
				 policy_node_step_number(k, last[k]));
	prom_family(p, "ckptfs_remote_upload_lag_seconds", "gauge",
		    "The last published step: complete here to its manifest on the remote.");
	prom_double(p, "ckptfs_remote_upload_lag_seconds", NULL, NULL,
		    (double)n->upload_lag_ns / 1e9);
	prom_family(p, "ckptfs_remote_errors_total", "counter",
		    "Failures talking to the remote, by kind.");
	for (int k = 0; k < NODE_ERR_COUNT; k++)
		prom_u64(p, "ckptfs_remote_errors_total", "kind", err_kind[k], n->errors[k]);
	prom_family(p, "ckptfs_remote_listings_total", "counter",
		    "Listings of the remote's manifests: whole, or after the newest global step.");
	prom_u64(p, "ckptfs_remote_listings_total", "listing", "after", n->lists[0]);
	prom_u64(p, "ckptfs_remote_listings_total", "listing", "whole", n->lists[1]);
	prom_family(p, "ckptfs_remote_listed_manifests_total", "counter",
		    "Manifest keys those listings returned.");
	prom_u64(p, "ckptfs_remote_listed_manifests_total", "listing", "after", n->listed[0]);
	prom_u64(p, "ckptfs_remote_listed_manifests_total", "listing", "whole", n->listed[1]);
	prom_family(p, "ckptfs_remote_nodes_disagree", "gauge",
		    "1 when the nodes disagree (node count, a name taken twice): no step becomes "
		    "global on this node.");
	prom_u64(p, "ckptfs_remote_nodes_disagree", NULL, NULL, node_blocked(n) ? 1 : 0);
	prom_family(p, "ckptfs_remote_older_node", "gauge",
		    "1 when another node runs an older ckptfs that cannot read this node's "
		    "manifests (unpadded manifest keys): its tracker stops.");
	prom_u64(p, "ckptfs_remote_older_node", NULL, NULL, n->older[0] ? 1 : 0);
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
}
