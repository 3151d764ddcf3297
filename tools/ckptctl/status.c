/*
 * status.c — ckptctl status: what the store holds, and whether a daemon owns it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

/* store_is_clean - whether STORE/clean exists (the previous daemon stopped cleanly). */
static bool store_is_clean(const char *root)
{
	char path[PATH_CAP];

	if ((size_t)snprintf(path, sizeof(path), "%s/clean", root) >= sizeof(path))
		return false;
	return access(path, F_OK) == 0;
}

/*
 * The record of the last mount that recovered from an unclean stop or quarantined a step
 * (STORE/recovery.json, fs/steps/steps_report.c, docs/schemas/recovery.json). Returns it (owned,
 * json_decref) or NULL when there is none, it cannot be read, or it is not of schema
 * ckptfs-recovery/1 (a record of an older ckptfs, whose fields this one does not read).
 */
static json_t *last_recovery(const struct ckpt_repo *r)
{
	int fd = ckpt_repo_openat(r, CKPT_RECOVERY_FILE, O_RDONLY, 0);
	json_t *o;

	if (fd < 0)
		return NULL;
	o = json_loadfd(fd, 0, NULL);
	close(fd);
	const char *schema = json_string_value(json_object_get(o, "schema"));

	if (o && (!json_is_object(o) || !schema || strcmp(schema, "ckptfs-recovery/1") != 0)) {
		json_decref(o);
		o = NULL;
	}
	return o;
}

/* The record as text lines, each under the "last recovery:" heading. */
static void print_recovery(const json_t *o)
{
	const char *ind = "                  ";
	char when[64] = "?";
	json_int_t ns = json_integer_value(json_object_get(o, "mounted_ns"));
	time_t t = (time_t)(ns / 1000000000);
	struct tm tm;
	const json_t *a;
	size_t i;

	if (ns > 0 && gmtime_r(&t, &tm))
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	printf("last recovery:    at the mount of %s (daemon pid %d)\n", when,
	       (int)json_integer_value(json_object_get(o, "pid")));
	if (json_is_false(json_object_get(o, "previous_stopped_cleanly")))
		printf("%s%s\n", ind, json_string_value(json_object_get(o, "summary"))
			       ? json_string_value(json_object_get(o, "summary"))
			       : "the previous ckptfs did not stop cleanly");
	json_array_foreach(json_object_get(o, "quarantined"), i, a) {
		const char *res = json_string_value(json_object_get(a, "tracker_step"));

		printf("%sstep '%s' (%s) quarantined as %s: %s; %s%s%s\n", ind,
		       json_string_value(json_object_get(a, "name")),
		       json_string_value(json_object_get(a, "layout")),
		       json_string_value(json_object_get(a, "state")),
		       json_string_value(json_object_get(a, "why")),
		       res ? "a resume then found '" : "no complete step was left",
		       res ? res : "", res ? "'" : "");
	}
	if (json_integer_value(json_object_get(o, "quarantined_more")) > 0)
		printf("%sand %d more steps quarantined\n", ind,
		       (int)json_integer_value(json_object_get(o, "quarantined_more")));
}

static int status_run(const char *root, bool json)
{
	struct ckpt_repo *r = NULL;
	struct idx_stats s;
	char b1[64], b2[64], b3[64];
	bool clean = false;
	double ratio = 0.0;
	int rc, status = EXIT_ERROR, schema = 0;

	if (ctl_open_read(root, &r) < 0)
		return EXIT_ERROR;
	memset(&s, 0, sizeof(s));
	rc = idx_stats_get(r->ix, &s);
	if (rc < 0) {
		status = ctl_index_err(root, "read store figures", rc);
		goto out;
	}
	if (!r->mounted)
		clean = store_is_clean(root);
	if ((rc = idx_schema_version(r->ix, &schema)) < 0) {
		status = ctl_index_err(root, "read the index's schema version", rc);
		goto out;
	}
	if (s.logical_bytes)
		ratio = (double)s.stored_bytes / (double)s.logical_bytes;

	if (json) {
		json_t *o = ctl_store_json(root, r);

		json_object_set_new(o, "stopped_cleanly", r->mounted ? json_null() : json_boolean(clean));
		json_object_set_new(o, "files", ctl_u64(s.files));
		json_object_set_new(o, "dirs", ctl_u64(s.dirs));
		json_object_set_new(o, "symlinks", ctl_u64(s.symlinks));
		json_object_set_new(o, "logical_bytes", ctl_u64(s.logical_bytes));
		json_object_set_new(o, "chunks", ctl_u64(s.chunks));
		json_object_set_new(o, "chunk_raw_bytes", ctl_u64(s.chunk_raw_bytes));
		json_object_set_new(o, "stored_bytes", ctl_u64(s.stored_bytes));
		json_object_set_new(o, "stored_logical_ratio",
				    s.logical_bytes ? json_real(ratio) : json_null());
		json_object_set_new(o, "bad_chunks", ctl_u64(s.bad_chunks));
		json_object_set_new(o, "index_schema", json_integer(schema));
		json_t *rec = last_recovery(r);

		json_object_set_new(o, "last_recovery", rec ? rec : json_null());
		if (ctl_print("ckptfs-status/1", o) < 0)
			goto out;
		status = EXIT_OK;
		goto out;
	}

	printf("store:            %s\n", root);
	if (r->mounted)
		printf("state:            mounted (daemon pid %d)\n", (int)r->owner_pid);
	else if (clean)
		printf("state:            not mounted, clean\n");
	else
		printf("state:            not mounted, unclean (the last daemon did not stop cleanly;"
		       " the next mount recovers the store)\n");
	printf("index schema:     %d (this ckptctl's: %d)\n", schema, IDX_SCHEMA_VERSION);
	printf("files:            %" PRIu64 "\n", s.files);
	printf("directories:      %" PRIu64 "\n", s.dirs);
	printf("symlinks:         %" PRIu64 "\n", s.symlinks);
	printf("logical size:     %s\n", policy_size_text(s.logical_bytes, b1, sizeof(b1)));
	printf("distinct chunks:  %" PRIu64 "\n", s.chunks);
	printf("after dedup:      %s\n", policy_size_text(s.chunk_raw_bytes, b2, sizeof(b2)));
	printf("stored size:      %s\n", policy_size_text(s.stored_bytes, b3, sizeof(b3)));
	if (s.logical_bytes)
		printf("stored/logical:   %.3f (%.1f%%)\n", ratio, 100.0 * ratio);
	else
		printf("stored/logical:   - (no file data)\n");
	if (s.bad_chunks)
		printf("bad chunks:       %" PRIu64 " (run 'ckptctl %s verify' to list the files)\n",
		       s.bad_chunks, root);
	else
		printf("bad chunks:       0\n");
	json_t *rec = last_recovery(r);

	if (rec)
		print_recovery(rec);
	else
		printf("last recovery:    none (no mount found an unclean stop or quarantined a "
		       "step)\n");
	json_decref(rec);
	status = EXIT_OK;
out:
	ckpt_repo_close(r);
	return status;
}

int cmd_status(const struct ctl_opts *o)
{
	return status_run(o->root, o->json);
}
