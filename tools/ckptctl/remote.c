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
 *
 * Read-only: never writes the remote or the store. The manifest format is fs/node/manifest.c's
 * ("ckptfs-manifest/1"); the chunk object format is node.h's ([codec][raw size LE32][payload]).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
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

struct r_ctx {
	struct remote *r;
	struct r_step *steps;
	size_t nsteps, capsteps;
	char (*keys)[REMOTE_KEY_MAX + 1]; /* manifests/... keys */
	size_t nkeys, capkeys;
	char (*named)[2 * STORE_HASH_LEN + 1]; /* chunks the manifests name (sorted, unique) */
	size_t nnamed, capnamed;
	uint64_t chunks, chunk_bytes, dirs, unnamed, unnamed_bytes;
};

static int key_cb(const char *key, uint64_t size, void *arg)
{
	struct r_ctx *c = arg;

	(void)size;
	if (strlen(key) > REMOTE_KEY_MAX)
		return 0;
	if (ckpt_grow(&c->keys, &c->capkeys, c->nkeys, sizeof(*c->keys)) < 0)
		return -ENOMEM;
	snprintf(c->keys[c->nkeys++], sizeof(*c->keys), "%s", key);
	return 0;
}

static int dir_cb(const char *key, uint64_t size, void *arg)
{
	(void)key;
	(void)size;
	((struct r_ctx *)arg)->dirs++;
	return 0;
}

static int hexcmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

static bool named(const struct r_ctx *c, const char *hex)
{
	return bsearch(hex, c->named, c->nnamed, sizeof(*c->named), hexcmp) != NULL;
}

static int chunk_cb(const char *key, uint64_t size, void *arg)
{
	struct r_ctx *c = arg;
	const char *hex = key + strlen("chunks/");

	c->chunks++;
	c->chunk_bytes += size;
	if (!named(c, hex)) {
		c->unnamed++;
		c->unnamed_bytes += size;
	}
	return 0;
}

/* Add manifest m (parsed) to the steps and its chunks to c->named. */
static int add_manifest(struct r_ctx *c, json_t *m)
{
	const char *node = json_string_value(json_object_get(m, "node"));
	const char *name = json_string_value(json_object_get(m, "name"));
	int kind = (int)json_integer_value(json_object_get(m, "kind"));
	int64_t step = json_integer_value(json_object_get(m, "step"));
	bool sealed = json_is_true(json_object_get(m, "sealed"));
	struct r_step *s = NULL;
	json_t *f, *x;
	size_t i, j;

	if (!node || !name)
		return -EBADMSG;
	for (i = 0; i < c->nsteps && !s; i++)
		if (c->steps[i].kind == kind && c->steps[i].step == step)
			s = &c->steps[i];
	if (!s) {
		if (ckpt_grow(&c->steps, &c->capsteps, c->nsteps, sizeof(*c->steps)) < 0)
			return -ENOMEM;
		s = &c->steps[c->nsteps++];
		*s = (struct r_step){ .kind = kind, .step = step };
		snprintf(s->name, sizeof(s->name), "%s", name);
	}
	s->parts++;
	s->sealed |= sealed;
	snprintf(s->nodes + strlen(s->nodes), sizeof(s->nodes) - strlen(s->nodes), "%s%s%s",
		 s->nodes[0] ? " " : "", node, sealed ? "*" : "");
	json_array_foreach(json_object_get(m, "files"), i, f)
	{
		s->files++;
		s->bytes += (uint64_t)json_integer_value(json_object_get(f, "size"));
		json_array_foreach(json_object_get(f, "extents"), j, x)
		{
			const char *hex = json_string_value(json_array_get(x, 2));

			if (!hex || strlen(hex) != 2 * STORE_HASH_LEN)
				return -EBADMSG;
			if (ckpt_grow(&c->named, &c->capnamed, c->nnamed, sizeof(*c->named)) < 0)
				return -ENOMEM;
			memcpy(c->named[c->nnamed++], hex, sizeof(*c->named));
		}
	}
	return 0;
}

/* Read every manifest; sort and dedupe c->named. Returns 0 or -errno (said on stderr). */
static int read_manifests(struct r_ctx *c)
{
	int rc = remote_list(c->r, "manifests/", key_cb, c);

	for (size_t i = 0; rc == 0 && i < c->nkeys; i++) {
		json_t *m;
		size_t len;
		void *buf;

		if ((rc = remote_get(c->r, c->keys[i], &buf, &len)) == -ENOENT) {
			rc = 0; /* removed since the listing */
			continue;
		}
		if (rc < 0)
			break;
		m = json_loadb(buf, len, 0, NULL);
		free(buf);
		rc = m ? add_manifest(c, m) : -EBADMSG;
		json_decref(m);
		if (rc == -EBADMSG) {
			ctl_err("manifest '%s' on the remote does not parse; skipped", c->keys[i]);
			rc = 0;
		}
	}
	if (rc < 0)
		return rc;
	qsort(c->named, c->nnamed, sizeof(*c->named), hexcmp);
	size_t o = 0;

	for (size_t i = 0; i < c->nnamed; i++)
		if (o == 0 || strcmp(c->named[o - 1], c->named[i]))
			memmove(c->named[o++], c->named[i], sizeof(*c->named));
	c->nnamed = o;
	return 0;
}

/* Get chunk hex, decode it and check its digest. Returns 0, or a message in why (cap bytes). */
static int check_chunk(struct r_ctx *c, const char *hex, char *why, size_t cap)
{
	char key[80];
	struct store_hash want, got;
	uint8_t *b, *raw = NULL;
	uint32_t rawlen = 0;
	size_t len;
	void *buf;
	int rc;

	snprintf(key, sizeof(key), "chunks/%s", hex);
	if ((rc = remote_get(c->r, key, &buf, &len)) < 0) {
		snprintf(why, cap, "%s", rc == -ENOENT ? "missing" : strerror(-rc));
		return rc;
	}
	b = buf;
	for (int i = 0; len >= 5 && i < 4; i++)
		rawlen |= (uint32_t)b[1 + i] << (8 * i);
	rc = len < 5 || rawlen > STORE_CHUNK_MAX ? -EIO : 0;
	if (rc == 0 && !(raw = malloc(rawlen ? rawlen : 1)))
		rc = -ENOMEM;
	if (rc == 0)
		rc = store_decode(b[0], b + 5, len - 5, raw, rawlen);
	if (rc == 0 && store_hash_parse(hex, &want) == 0) {
		store_hash_buf(raw, rawlen, &got);
		rc = memcmp(got.b, want.b, STORE_HASH_LEN) ? -EBADMSG : 0;
	}
	if (rc < 0)
		snprintf(why, cap, "%s", rc == -EBADMSG ? "digest mismatch" : "does not decode");
	free(raw);
	free(buf);
	return rc;
}

/* The remote recorded in o->root's STORE/remote.json, opened. Returns 0 or EXIT_ERROR. */
static int open_recorded(const struct ctl_opts *o, struct r_ctx *c, json_t **ret_cfg)
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

static void print_text(const struct r_ctx *c, json_t *cfg, unsigned nodes)
{
	char s1[32], s2[32];

	printf("remote:    %s (recorded by node %s, %u nodes)\n",
	       json_string_value(json_object_get(cfg, "url")),
	       json_string_value(json_object_get(cfg, "node")), nodes);
	printf("chunks:    %" PRIu64 " (%s), %" PRIu64 " (%s) named by no manifest\n", c->chunks,
	       ctl_size(c->chunk_bytes, s1, sizeof(s1)), c->unnamed,
	       ctl_size(c->unnamed_bytes, s2, sizeof(s2)));
	printf("saving:    %" PRIu64 " step directories of saves in progress (dirs/)\n", c->dirs);
	printf("%6s  %-20s  %-17s  %-16s  %6s  %10s\n", "STEP", "NAME", "STATE", "NODES", "FILES",
	       "LOGICAL");
	for (size_t i = 0; i < c->nsteps; i++) {
		const struct r_step *s = &c->steps[i];

		printf("%6" PRId64 "  %-20s  %-17s  %-16s  %6" PRIu64 "  %10s\n", s->step, s->name,
		       s->parts >= nodes && s->sealed ? "global" : "waiting for nodes", s->nodes,
		       s->files, ctl_short_size(s->bytes, s1, sizeof(s1)));
	}
}

static int step_cmp(const void *a, const void *b)
{
	const struct r_step *x = a, *y = b;

	return x->kind != y->kind ? (x->kind > y->kind) - (x->kind < y->kind)
				  : (x->step > y->step) - (x->step < y->step);
}

int cmd_remote(const struct ctl_opts *o)
{
	struct r_ctx c = { 0 };
	json_t *cfg = NULL;
	bool verify = o->argc == 1;
	uint64_t bad = 0;
	unsigned nodes;
	int rc, status = EXIT_ERROR;

	if (verify && strcmp(o->argv[0], "verify"))
		return ctl_usage("'remote' takes nothing or 'verify', not '%s'", o->argv[0]);
	if (open_recorded(o, &c, &cfg) != 0)
		return EXIT_ERROR;
	nodes = (unsigned)json_integer_value(json_object_get(cfg, "nodes"));
	if ((rc = read_manifests(&c)) < 0 ||
	    (rc = remote_list(c.r, "chunks/", chunk_cb, &c)) < 0 ||
	    (rc = remote_list(c.r, "dirs/", dir_cb, &c)) < 0) {
		ctl_err("cannot read the remote: %s; check that it answers and try again",
			strerror(-rc));
		goto out;
	}
	qsort(c.steps, c.nsteps, sizeof(*c.steps), step_cmp);
	for (size_t i = 0; verify && i < c.nnamed; i++) {
		char why[64];

		if (check_chunk(&c, c.named[i], why, sizeof(why)) == 0)
			continue;
		bad++;
		if (!o->json)
			printf("damaged: chunk %s (%s)\n", c.named[i], why);
	}
	if (o->json) {
		json_t *a = json_array();

		for (size_t i = 0; a && i < c.nsteps; i++) {
			const struct r_step *s = &c.steps[i];

			json_array_append_new(a, json_pack("{s:I, s:s, s:s, s:s, s:b, s:I, s:I}",
							   "step", (json_int_t)s->step, "name",
							   s->name, "nodes", s->nodes, "state",
							   s->parts >= nodes && s->sealed
								   ? "global"
								   : "waiting for nodes",
							   "sealed", s->sealed, "files",
							   (json_int_t)s->files, "logical_bytes",
							   (json_int_t)s->bytes));
		}
		json_t *r = json_pack("{s:O, s:o, s:o, s:o, s:o, s:o, s:o}", "remote", cfg, "steps",
				      a, "chunks", ctl_u64(c.chunks), "chunk_bytes",
				      ctl_u64(c.chunk_bytes), "unnamed_chunks", ctl_u64(c.unnamed),
				      "saving_dirs", ctl_u64(c.dirs), "damaged_chunks",
				      verify ? ctl_u64(bad) : json_null());
		if (ctl_print(r) < 0)
			goto out;
	} else {
		print_text(&c, cfg, nodes);
		if (verify)
			printf("verify:    %zu chunks named by the manifests read and checked: %" PRIu64
			       " missing or damaged\n",
			       c.nnamed, bad);
	}
	status = bad ? EXIT_DAMAGE : EXIT_OK;
out:
	remote_close(c.r);
	json_decref(cfg);
	free(c.steps);
	free(c.keys);
	free(c.named);
	return status;
}
