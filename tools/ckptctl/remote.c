/*
 * remote.c — ckptctl STORE remote [verify]: the remote a node of a many-node job publishes to
 * (fs/node/node.h; recorded in STORE/remote.json when the daemon mounted with -o remote=URL).
 *
 *   remote         per step: which nodes published their part, whether one carries the seal,
 *                  whether it is globally complete (policy rule 5: all `nodes` parts, one
 *                  sealed); the chunk objects and bytes, those no manifest names, and the step
 *                  directories of saves in progress (dirs/)
 *   remote verify  also reads every chunk a manifest names, decodes it and checks it against
 *                  its digest (the name of the object); exit 1 when one is missing or damaged
 *   remote gc      removes what no resume can need (remote_gc.c says what, and how it keeps
 *                  out of the way of the nodes' uploads)
 *
 * status and verify never write the remote; none of the three writes the store. Chunk objects
 * are store_object_encode's (store.h); manifests are fs/node/manifest.c's ("ckptfs-manifest/1").
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "remote_int.h"
#include "fs/policy/policy.h"

/* zstd level of a chunk stored deferred put back by --repair from a store opened read-only
 * (store_chunk_object): the daemon's (fs/node/node.c NODE_ZSTD_LEVEL, zstd's default); any level
 * decodes the same. */
#define CTL_REMOTE_ZSTD_LEVEL 3

static int dir_cb(const char *key, uint64_t size, void *arg)
{
	(void)key;
	(void)size;
	((struct rgc *)arg)->dirs++;
	return 0;
}

static int chunk_cb(const char *key, uint64_t size, void *arg)
{
	struct rgc *c = arg;
	const char *hex = key + strlen("chunks/");

	c->chunks++;
	c->chunk_bytes += size;
	if (rgc_named(c, hex))
		return 0;
	c->unnamed++;
	c->unnamed_bytes += size;
	return 0;
}

/* Get chunk hex, decode it and check its digest. Returns 0, or a message in why (cap bytes). */
static int check_chunk(struct rgc *c, const char *hex, char *why, size_t cap)
{
	char key[80];
	struct store_hash want;
	uint8_t *raw = NULL;
	uint32_t rawlen;
	size_t len;
	void *buf;
	int rc;

	snprintf(key, sizeof(key), "chunks/%s", hex);
	if ((rc = remote_get(c->r, key, &buf, &len)) < 0) {
		snprintf(why, cap, "%s", rc == -ENOENT ? "missing" : strerror(-rc));
		return rc;
	}
	rc = store_hash_parse(hex, &want) < 0 ? -EIO
					     : store_object_decode(buf, len, &want, &raw, &rawlen);
	if (rc < 0)
		snprintf(why, cap, "%s", rc == -EBADMSG ? "digest mismatch" : "does not decode");
	free(raw);
	free(buf);
	return rc;
}

/*
 * Put store o->root's sound copy of chunk hex (found why on the remote) over the remote's, and
 * remove a node's request for it (repair/<hex>, fs/node/node.c). Returns 0 when replaced, or
 * -errno (-ENOENT: not held here; -EBADMSG: not sound here either) with a line printed.
 */
static int repair_chunk(struct rgc *c, const struct ctl_opts *o, const char *hex,
			const char *why)
{
	struct ckpt_repo *r = NULL;
	struct store_chunk_info info;
	struct store_hash h;
	char key[80];
	void *body = NULL;
	size_t blen;
	int rc;

	if (store_hash_parse(hex, &h) < 0)
		return -EINVAL;
	if (ctl_open_read(o->root, &r) < 0)
		return -EIO;
	rc = store_chunk_stat(r->st, &h, &info);
	if (rc == 0)
		rc = store_chunk_verify(r->st, &h);
	if (rc == 0)
		rc = store_chunk_object(r->st, &h, info.raw_size, CTL_REMOTE_ZSTD_LEVEL, &body,
					&blen);
	ckpt_repo_close(r);
	if (rc == 0) {
		snprintf(key, sizeof(key), "chunks/%s", hex);
		/* its readers check it against its digest (remote_call.self_checked) */
		rc = remote_put_with(c->r, key, body, blen,
				     &(struct remote_call){ .self_checked = true });
		free(body);
	}
	if (rc == 0) {
		snprintf(key, sizeof(key), "repair/%s", hex);
		remote_delete(c->r, key);
		if (!o->json)
			printf("repaired: chunk %s (%s) with this store's sound copy\n", hex, why);
	}
	return rc;
}

/* The remote recorded in o->root's STORE/remote.json, opened. Returns 0 or EXIT_ERROR. */
static int open_recorded(const struct ctl_opts *o, struct rgc *c, json_t **ret_cfg)
{
	char path[PATH_CAP], err[768];
	json_error_t je;
	json_t *cfg;
	const char *url;
	int rc;

	snprintf(path, sizeof(path), "%s/" REMOTE_STORE_RECORD, o->root);
	cfg = json_load_file(path, 0, &je);
	if (!cfg) {
		ctl_err("'%s': %s; mount the store once with -o remote=URL,node=NAME,nodes=N (the "
			"remote is recorded then)", path, je.text);
		return EXIT_ERROR;
	}
	url = json_string_value(json_object_get(cfg, "url"));
	if (!url || (rc = remote_open(url, NULL, &c->r, err, sizeof(err))) < 0) {
		ctl_err("remote '%s': %s", url ? url : "(none)", url ? err : "no url in the file");
		json_decref(cfg);
		return EXIT_ERROR;
	}
	*ret_cfg = cfg;
	return 0;
}

static void print_text(const struct rgc *c, json_t *cfg, unsigned nodes)
{
	char s1[32], s2[32];

	printf("remote:    %s (recorded by node %s, %u nodes)\n",
	       json_string_value(json_object_get(cfg, "url")),
	       json_string_value(json_object_get(cfg, "node")), nodes);
	printf("chunks:    %" PRIu64 " (%s), %" PRIu64 " (%s) named by no manifest\n", c->chunks,
	       policy_size_text(c->chunk_bytes, s1, sizeof(s1)), c->unnamed,
	       policy_size_text(c->unnamed_bytes, s2, sizeof(s2)));
	printf("saving:    %" PRIu64 " step directories of saves in progress (dirs/)\n", c->dirs);
	printf("%6s  %-20s  %-17s  %-16s  %6s  %10s\n", "STEP", "NAME", "STATE", "NODES", "FILES",
	       "LOGICAL");
	for (size_t i = 0; i < c->nsteps; i++) {
		const struct rgc_step *s = &c->steps[i];
		char q[CTL_QUOTE_CAP(IDX_STEP_NAME_MAX)];

		/* MindFormers 1.0's number across nodes holds its epoch (policy_node_step); its
		 * name "{epoch}_{step}" says both */
		printf("%6" PRId64 "  %-20s  %-17s  %-16s  %6" PRIu64 "  %10s\n",
		       policy_node_step_number(s->kind, s->step),
		       ctl_quote(s->name, q, sizeof(q)),
		       rgc_global(s, nodes) ? "global" : "waiting for nodes", s->nodes,
		       s->files, ctl_short_size(s->bytes, s1, sizeof(s1)));
	}
}

static int step_cmp(const void *a, const void *b)
{
	const struct rgc_step *x = a, *y = b;

	return x->kind != y->kind ? (x->kind > y->kind) - (x->kind < y->kind)
				  : (x->step > y->step) - (x->step < y->step);
}

int cmd_remote(const struct ctl_opts *o)
{
	struct rgc c = { 0 };
	struct rgc_opts ro;
	json_t *cfg = NULL;
	bool verify = o->argc == 1 && strcmp(o->argv[0], "verify") == 0;
	bool gc = o->argc == 1 && strcmp(o->argv[0], "gc") == 0;
	uint64_t bad = 0, repaired = 0;
	unsigned nodes;
	int rc, status = EXIT_ERROR;

	if (o->argc == 1 && !verify && !gc)
		return ctl_usage("'remote' takes nothing, 'verify' or 'gc', not '%s'", o->argv[0]);
	if (open_recorded(o, &c, &cfg) != 0)
		return EXIT_ERROR;
	nodes = (unsigned)json_integer_value(json_object_get(cfg, "nodes"));
	ro = (struct rgc_opts){ .nodes = nodes, .holder = "ckptctl remote gc", .root = o->root,
				.say = remote_say };
	c.o = &ro;
	if ((rc = rgc_read_manifests(&c)) < 0 ||
	    (rc = remote_list(c.r, "chunks/", chunk_cb, &c)) < 0 ||
	    (rc = remote_list(c.r, "dirs/", dir_cb, &c)) < 0) {
		ctl_err("cannot read the remote: %s; check that it answers and try again",
			strerror(-rc));
		goto out;
	}
	qsort(c.steps, c.nsteps, sizeof(*c.steps), step_cmp);
	if (gc) {
		status = remote_gc(&c, cfg, nodes, o);
		goto out;
	}
	for (size_t i = 0; verify && i < c.nnamed; i++) {
		char why[64];

		if (check_chunk(&c, c.named[i], why, sizeof(why)) == 0)
			continue;
		if (o->repair && repair_chunk(&c, o, c.named[i], why) == 0) {
			repaired++;
			continue;
		}
		bad++;
		if (!o->json)
			printf("damaged: chunk %s (%s)\n", c.named[i], why);
	}
	if (o->json) {
		json_t *a = json_array();

		for (size_t i = 0; a && i < c.nsteps; i++) {
			const struct rgc_step *s = &c.steps[i];

			json_array_append_new(a, json_pack("{s:I, s:s, s:s, s:s, s:b, s:I, s:I}",
							   "step",
							   (json_int_t)policy_node_step_number(s->kind,
											       s->step),
							   "name",
							   s->name, "nodes", s->nodes, "state",
							   rgc_global(s, nodes)
								   ? "global"
								   : "waiting_for_nodes",
							   "sealed", s->sealed, "files",
							   (json_int_t)s->files, "logical_bytes",
							   (json_int_t)s->bytes));
		}
		/* what ckptctl reads of remote.json, not the node's own record of the parts */
		json_t *rec = json_pack("{s:O?, s:O?, s:O?, s:O?}", "url",
					json_object_get(cfg, "url"), "node",
					json_object_get(cfg, "node"), "nodes",
					json_object_get(cfg, "nodes"), "keep_checkpoint_max",
					json_object_get(cfg, "keep_checkpoint_max"));
		json_t *r = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "remote", rec,
				      "steps", a, "chunks", ctl_u64(c.chunks), "chunk_bytes",
				      ctl_u64(c.chunk_bytes), "unnamed_chunks", ctl_u64(c.unnamed),
				      "saving_dirs", ctl_u64(c.dirs), "damaged_chunks",
				      verify ? ctl_u64(bad) : json_null(), "repaired_chunks",
				      o->repair ? ctl_u64(repaired) : json_null());
		if (ctl_print("ckptfs-remote/1", r) < 0)
			goto out;
	} else {
		print_text(&c, cfg, nodes);
		if (verify)
			printf("verify:    %zu chunks named by the manifests read and checked: %" PRIu64
			       " missing or damaged\n",
			       c.nnamed, bad);
		if (o->repair)
			printf("repaired:  %" PRIu64 " chunks replaced with this store's sound copy%s\n",
			       repaired, bad ? "; the others are not held sound here: run it on the "
					       "nodes that wrote them (the manifests naming them)" : "");
	}
	status = bad ? EXIT_DAMAGE : EXIT_OK;
out:
	remote_close(c.r);
	json_decref(cfg);
	rgc_release(&c);
	return status;
}
