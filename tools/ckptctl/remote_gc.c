/*
 * remote_gc.c — ckptctl STORE remote gc [--dry-run] [--force] [--force-no-lease]: remove from
 * the remote what no resume can need, by the rule and the protocol with the nodes that the
 * mounted daemons follow too (fs/node/rgc.h), with the keep_checkpoint_max (0 keeps every
 * global step) and keep_every recorded at mount.
 *
 * Output: the report on stdout (one line per lease or marker taken over, per object with
 * --dry-run, and a summary), errors on stderr. Main thread only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "remote_int.h"

void remote_say(void *arg, enum rgc_say kind, const char *line)
{
	(void)arg;
	if (kind == RGC_REPORT)
		printf("%s\n", line);
	else if (kind != RGC_HELD)
		ctl_err("%s", line);
}

int remote_gc(struct rgc *c, json_t *cfg, unsigned nodes, const struct ctl_opts *o)
{
	const struct rgc_opts *base = c->o;
	struct rgc_opts ro = *base;
	struct rgc_tally g;
	char s1[48];
	int rc;

	ro.nodes = nodes;
	ro.keep = (unsigned)json_integer_value(json_object_get(cfg, "keep_checkpoint_max"));
	ro.keep_every = json_integer_value(json_object_get(cfg, "keep_every"));
	ro.dry_run = o->dry_run;
	ro.force = o->force;
	ro.force_no_lease = o->force_no_lease;
	c->o = &ro;
	if ((rc = rgc_choose_doomed(c)) < 0) {
		ctl_err("cannot choose what to remove: %s", strerror(-rc));
		c->o = base;
		return EXIT_ERROR;
	}
	rc = rgc_run(c, &g);
	c->o = base;
	if (rc < 0)
		return EXIT_ERROR;
	if (o->dry_run)
		printf("gc --dry-run: would remove %zu steps (%" PRIu64 " manifests, %" PRIu64
		       " step directories), %" PRIu64 " upload markers of dead nodes, %" PRIu64
		       " chunks of %s; keep_checkpoint_max %u; nothing removed, no lease taken\n",
		       g.steps, g.manifests, g.dirs, g.markers, g.chunks,
		       policy_size_text(g.chunk_bytes, s1, sizeof(s1)), ro.keep);
	else
		printf("gc:        removed %zu steps (%" PRIu64 " manifests, %" PRIu64
		       " step directories), %" PRIu64 " upload markers of dead nodes, %" PRIu64
		       " chunks of %s; keep_checkpoint_max %u\n",
		       g.steps, g.manifests, g.dirs, g.markers, g.chunks,
		       policy_size_text(g.chunk_bytes, s1, sizeof(s1)), ro.keep);
	return g.errors ? EXIT_ERROR : EXIT_OK;
}
