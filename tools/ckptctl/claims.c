/*
 * claims.c — ckptctl claims: what trainers wrote into their tracker files.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

/* Longest claim content shown, in bytes. */
#define CLAIM_PREVIEW 60

struct claim_ctx {
	struct idx *ix;
	json_t *a; /* --json: the array */
	size_t n;
	int wtracker;
};

static int claim_row(int64_t id, const char *tracker, const void *content, size_t len,
		     int64_t step, int64_t ts_ns, void *arg)
{
	struct claim_ctx *c = arg;
	char tb[40], sbuf[24], prev[4 * CLAIM_PREVIEW + 8], qt[CTL_QUOTE_CAP(PATH_CAP)];
	size_t shown = len < CLAIM_PREVIEW ? len : CLAIM_PREVIEW;
	uint64_t written = len;
	int rc;

	rc = idx_claim_length(c->ix, id, &written);
	if (rc < 0 && rc != -ENOENT)
		return rc;
	ctl_escape(content, shown, prev, sizeof(prev));
	if (c->a) {
		json_t *o = json_object();
		char *full = malloc(4 * len + 1);

		if (!full)
			return -ENOMEM;
		ctl_escape(content, len, full, 4 * len + 1);
		json_object_set_new(o, "id", json_integer(id));
		json_object_set_new(o, "claimed", policy_json_time(ts_ns));
		json_object_set_new(o, "claimed_ns", json_integer(ts_ns));
		json_object_set_new(o, "tracker", json_string(tracker));
		json_object_set_new(o, "step", step >= 0 ? json_integer(step) : json_null());
		json_object_set_new(o, "content_bytes", ctl_u64(written));
		json_object_set_new(o, "truncated", json_boolean(written > len));
		json_object_set_new(o, "content", json_string(full));
		free(full);
		json_array_append_new(c->a, o);
		c->n++;
		return 0;
	}
	if (step >= 0)
		snprintf(sbuf, sizeof(sbuf), "%" PRId64, step);
	else
		snprintf(sbuf, sizeof(sbuf), "unparseable");
	if (c->n == 0)
		printf("%-20s  %-*s  %-11s  %s\n", "TIME", c->wtracker, "TRACKER", "STEP",
		       "CONTENT");
	printf("%-20s  %-*s  %-11s  \"%s\"%s\n", policy_time_iso(ts_ns, tb, sizeof(tb)), c->wtracker,
	       ctl_quote(tracker, qt, sizeof(qt)), sbuf, prev,
	       written > shown ? "..." : "");
	c->n++;
	return 0;
}

static int claim_width(int64_t id, const char *tracker, const void *content, size_t len,
		       int64_t step, int64_t ts_ns, void *arg)
{
	struct claim_ctx *c = arg;
	char qt[CTL_QUOTE_CAP(PATH_CAP)];
	int w = (int)strlen(ctl_quote(tracker, qt, sizeof(qt)));

	if (w > c->wtracker)
		c->wtracker = w;
	return 0;
}

static int claims_run(const char *root, bool json)
{
	struct ckpt_repo *r = NULL;
	struct claim_ctx c = { 0 };
	int rc, status = EXIT_ERROR;

	if (ctl_open_read(root, &r) < 0)
		return EXIT_ERROR;
	c.ix = r->ix;
	c.wtracker = 7;
	if (json)
		c.a = json_array();
	rc = c.a ? 0 : idx_claim_foreach(r->ix, claim_width, &c);
	if (rc == 0)
		rc = idx_claim_foreach(r->ix, claim_row, &c);
	if (rc < 0) {
		json_decref(c.a);
		status = ctl_index_err(root, "list tracker claims", rc);
		goto out;
	}
	if (c.a) {
		if (ctl_print("ckptfs-claims/1", json_pack("{s:o}", "claims", c.a)) < 0)
			goto out;
	} else if (c.n == 0) {
		printf("no tracker claims recorded in store '%s'\n", root);
	}
	status = EXIT_OK;
out:
	ckpt_repo_close(r);
	return status;
}

int cmd_claims(const struct ctl_opts *o)
{
	return claims_run(o->root, o->json);
}
