/*
 * meta.c — the read-only files of MOUNTPOINT/.ckptfs/: status, steps, steps.json, metrics.
 * Each is rendered from the index when opened (a reader gets one consistent snapshot; direct_io,
 * so a read is not bounded by the size stat(2) gave) and when stat'ed (for its size).
 * The whole-store figures of status and metrics are a scan of the inode and chunk tables (5-7 ms
 * at 10^4 files: tests/bench/bench_meta.py). An open or a scrape reads them on a read-only index
 * handle of their own, before the daemon's lock is taken, and keeps them while the index does not
 * change (fs_meta_stats): a scrape or a `cat` does not stall the mount's other requests. A
 * stat(2) renders with the figures kept (zeros before the first open), without a scan and
 * without waiting for one (stats.kept_mu, not the scan's stats.mu): a lookup
 * of /.ckptfs/status holding a scan held every other new lookup in /.ckptfs on this kernel (6.18,
 * FUSE_CAP_PARALLEL_DIROPS on; test_prometheus.py FiguresOutsideTheLockTest).
 * The directory itself is a real directory of the index that readdir of the root does not list
 * (like ZFS's .zfs); quarantined steps live beside these files.
 *
 * metrics is in the Prometheus text exposition format 0.0.4
 * (https://prometheus.io/docs/instrumenting/exposition_formats/).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "fs/core/lockrank.h"
#include "ckptfs_config.h"
#include "fs/core/prom.h"
#include "fs/fuse/fuse_int.h"
#include "fs/policy/layout.h"
#include "fs/policy/policy.h"

_Static_assert(STORE_CODEC_MAX < IDX_STATS_CODECS, "struct idx_stats breaks out every codec");

static const char *const meta_names[META_FILE_COUNT] = { "status", "steps", "steps.json",
							  "metrics" };

int fs_meta_file_by_name(const char *name)
{
	for (int i = 0; i < META_FILE_COUNT; i++)
		if (strcmp(name, meta_names[i]) == 0)
			return i;
	return -1;
}

const char *fs_meta_file_name(int which)
{
	return which >= 0 && which < META_FILE_COUNT ? meta_names[which] : NULL;
}

/* The generated files' text (fs/core/text.h). */
#define put ckpt_text_printf

/* a step time for people: ISO-8601, or "-" for 0 (never) */
static void iso8601(int64_t ns, char *buf, size_t cap)
{
	if (ns == 0)
		snprintf(buf, cap, "-");
	else
		policy_time_iso(ns, buf, cap);
}

struct collect {
	struct idx_step *v;
	size_t n, cap;
};

static int collect_cb(const struct idx_step *s, void *arg)
{
	struct collect *c = arg;

	if (c->n == c->cap) {
		size_t nc = c->cap ? 2 * c->cap : 32;
		struct idx_step *p = realloc(c->v, nc * sizeof(*p));

		if (!p)
			return -ENOMEM;
		c->v = p;
		c->cap = nc;
	}
	c->v[c->n++] = *s;
	return 0;
}

static void render_steps(struct ckpt_text *o, const struct collect *c)
{
	put(o, "%12s  %-24s %-10s %-10s %6s %14s %14s  %-20s %s\n", "STEP", "NAME", "LAYOUT",
	    "STATE", "FILES", "LOGICAL", "STORED", "COMPLETED", "PIN");
	for (size_t i = 0; i < c->n; i++) {
		const struct idx_step *s = &c->v[i];
		char t[32];

		iso8601(s->completed_ns, t, sizeof(t));
		put(o, "%12" PRId64 "  %-24s %-10s %-10s %6" PRIu64 " %14" PRIu64 " %14" PRIu64
		       "  %-20s %s\n",
		    s->step, s->name, layout_name((enum layout_kind)s->kind),
		    idx_step_state_name(s->state), s->files, s->logical_bytes, s->stored_bytes, t,
		    s->pinned ? "pinned" : "");
	}
}

static int render_steps_json(struct ckpt_text *o, const struct collect *c)
{
	json_t *a = json_array();
	char *txt;

	if (!a)
		return -ENOMEM;
	for (size_t i = 0; i < c->n; i++) {
		json_t *j = policy_step_json(&c->v[i]);

		if (!j || json_array_append_new(a, j) < 0) {
			json_decref(a);
			return -ENOMEM;
		}
	}
	/* the document ckptctl --json steps prints, schema docs/schemas/steps.json */
	json_t *doc = json_pack("{s:s, s:o}", "schema", "ckptfs-steps/1", "steps", a);

	txt = doc ? json_dumps(doc, JSON_INDENT(2)) : NULL;
	json_decref(doc);
	if (!txt)
		return -ENOMEM;
	put(o, "%s\n", txt);
	free(txt);
	return 0;
}

struct claim_scan {
	const struct collect *steps;
	uint64_t total, junk, unfulfilled;
	char last[3][160]; /* the newest unfulfilled claims, for a person to read */
};

/* Did any step with this number ever complete (complete, or pruned after completing)? */
static bool step_completed(const struct collect *c, int64_t step)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->v[i].step == step &&
		    (c->v[i].state == IDX_STEP_COMPLETE ||
		     (c->v[i].state == IDX_STEP_PRUNED && c->v[i].completed_ns > 0)))
			return true;
	return false;
}

static int claim_cb(int64_t id, const char *tracker, const void *content, size_t len, int64_t step,
		    int64_t ts_ns, void *arg)
{
	struct claim_scan *cs = arg;
	char t[32];

	cs->total++;
	if (step < 0) {
		cs->junk++;
		return 0;
	}
	if (step_completed(cs->steps, step))
		return 0;
	cs->unfulfilled++;
	iso8601(ts_ns, t, sizeof(t));
	memmove(cs->last[0], cs->last[1], sizeof(cs->last[0]) * 2);
	snprintf(cs->last[2], sizeof(cs->last[2]), "%s '%s' claimed step %" PRId64, t, tracker,
		 step);
	return 0;
}

static void render_status(struct ckfs *fs, struct ckpt_text *o, const struct collect *c,
			  const struct idx_stats *st)
{
	const struct steps_opts *so = steps_settings(fs);
	struct claim_scan cs = { .steps = c };
	struct write_counts wc;
	unsigned by_state[IDX_STEP_STATE_COUNT] = { 0 };

	for (size_t i = 0; i < c->n; i++)
		if (c->v[i].state >= 0 && c->v[i].state < IDX_STEP_STATE_COUNT)
			by_state[c->v[i].state]++;
	write_counts(fs, &wc);
	put(o, "ckptfs %s\n", CKPTFS_VERSION);
	put(o, "store:              %s\n", fs->repo->root);
	put(o, "layout:             %s\n",
	    so->layout < 0 ? "none (plain filesystem)"
			   : so->layout ? layout_name((enum layout_kind)so->layout) : "automatic");
	put(o, "keep_checkpoint_max: %u%s\n", so->keep_max, so->keep_max ? "" : " (keep all)");
	if (so->keep_every)
		put(o, "keep_every:         %" PRId64 "\n", so->keep_every);
	int schema;

	if (idx_schema_version(fs->ix, &schema) == 0)
		put(o, "index schema:       %d\n", schema);
	put(o, "files:              %" PRIu64 "\n", st->files);
	char sz[64];
	double ratio = st->logical_bytes ? (double)st->stored_bytes / (double)st->logical_bytes : 0;

	/* the labels, forms and ratio of `ckptctl status` (docs/glossary.md) */
	put(o, "logical size:       %s\n", policy_size_text(st->logical_bytes, sz, sizeof(sz)));
	put(o, "after dedup:        %s\n", policy_size_text(st->chunk_raw_bytes, sz, sizeof(sz)));
	put(o, "stored size:        %s\n", policy_size_text(st->stored_bytes, sz, sizeof(sz)));
	if (st->logical_bytes)
		put(o, "stored/logical:     %.3f (%.1f%%)\n", ratio, 100.0 * ratio);
	else
		put(o, "stored/logical:     - (no file data)\n");
	put(o, "bad chunks:         %" PRIu64 "%s\n", st->bad_chunks,
	    st->bad_chunks ? " (run 'ckptctl STORE verify')" : "");
	size_t wb_budget, wb_used, wb_kept, wb_peak;
	unsigned wb_threads;

	wb_figures(fs, &wb_budget, &wb_used, &wb_kept, &wb_peak, &wb_threads);
	if (wb_threads)
		put(o,
		    "write buffer:       %zu MiB, %u workers, %zu MiB in flight now, %zu MiB kept "
		    "for reuse, peak %zu MiB\n",
		    wb_budget >> 20, wb_threads, wb_used >> 20, wb_kept >> 20, wb_peak >> 20);
	else
		put(o, "write buffer:       none (chunks stored by the writing requests)\n");
	put(o, "staging copies:     %" PRIu64 " (files written out of order, cut at close)\n",
	    wc.staging);
	uint64_t c_hits, c_loads, c_warmed, c_rec;

	store_cache_figures(fs->st, &c_hits, &c_loads, &c_warmed, &c_rec);
	put(o, "chunk reads:        %" PRIu64 " from the cache, %" PRIu64 " loaded by the "
	       "reader, %" PRIu64 " loaded ahead (readahead_mb=%" PRIu64 ")\n", c_hits, c_loads,
	    c_warmed, wc.readahead ? fs->fuse.ra.window >> 20 : 0);
	uint64_t k_checked, k_kept, k_primed, k_primed_hits;

	/* the check's reads serve the trainer's first read of the step (store_chunks_verify) */
	store_check_figures(fs->st, &k_checked, &k_kept, &k_primed, &k_primed_hits);
	put(o, "mount check reads:  %" PRIu64 " chunks, %" PRIu64 " kept in the cache, %" PRIu64
	       " left in the page cache (%" PRIu64 " read back from there)\n", k_checked, k_kept,
	    k_primed, k_primed_hits);
	put(o, "deferred chunks:    %" PRIu64 " (%" PRIu64 " MiB stored raw, to compress when "
	       "the workers are idle); since mount %" PRIu64 " deferred, %" PRIu64
	       " compressed; defer_compress=%s\n", st->codec_chunks[STORE_CODEC_DEFERRED],
	    st->codec_stored_bytes[STORE_CODEC_DEFERRED] >> 20, wc.deferred, wc.recoded,
	    wc.defer == FS_DEFER_NEVER ? "never"
	    : wc.defer == FS_DEFER_ALWAYS ? "always" : "auto");
	if (fs->node) {
		char nb[4096];

		if (node_status(fs, nb, sizeof(nb)) > 0)
			put(o, "%s", nb);
	}
	put(o, "steps:             ");
	for (int s = 0; s < IDX_STEP_STATE_COUNT; s++)
		put(o, " %s %u", idx_step_state_name(s), by_state[s]);
	put(o, "\n");
	/* what du of the mount does not see (the root's listing leaves .ckptfs out): said here */
	uint64_t q_n = 0, q_bytes = 0;

	for (size_t i = 0; i < c->n; i++)
		if ((c->v[i].state == IDX_STEP_INCOMPLETE || c->v[i].state == IDX_STEP_CORRUPT) &&
		    c->v[i].dir_ino) {
			q_n++;
			q_bytes += c->v[i].stored_bytes;
		}
	put(o, "quarantined:        %" PRIu64 " steps, %" PRIu64 " bytes stored, in "
	       ".ckptfs/quarantine (keep_quarantine=%u%s; not counted by du of the mount)\n",
	    q_n, q_bytes, so->keep_quarantine, so->keep_quarantine ? "" : ": all");
	if (idx_claim_foreach(fs->ix, claim_cb, &cs) == 0) {
		put(o, "tracker claims:     %" PRIu64 " recorded, %" PRIu64 " not a step, %" PRIu64
		       " naming a step that never completed\n", cs.total, cs.junk, cs.unfulfilled);
		for (int i = 0; i < 3; i++)
			if (cs.last[i][0])
				put(o, "  %s\n", cs.last[i]);
	}
	/* tracker names relative to the root: a file name, under a rank directory for MF1 */
	char shown[LAYOUT_KIND_COUNT][LAYOUT_NAME_MAX + 1];
	int nshown = 0;

	for (int k = 1; k < LAYOUT_KIND_COUNT; k++) {
		char name[LAYOUT_NAME_MAX + 1], content[LAYOUT_TRACKER_MAX];
		struct idx_step s;
		bool dup = false;

		if (steps_vname(fs, k, name, sizeof(name)) < 0)
			continue;
		for (int j = 0; j < nshown && !dup; j++)
			dup = strcmp(shown[j], name) == 0;
		if (dup)
			continue; /* a tracker shared by layouts (Megatron, MindFormers 2.0): once */
		snprintf(shown[nshown++], sizeof(shown[0]), "%s", name);
		if (
		    steps_tracker_content(fs, k, content, sizeof(content), &s) < 0 ||
		    layout_step_dir_name((enum layout_kind)k, s.step, content, sizeof(content)) < 0)
			continue;
		if (!layout_tracker_shared((enum layout_kind)k, (enum layout_kind)s.kind))
			continue;
		put(o, "resume:             %s -> step %" PRId64 " ('%s', %s)\n", name, s.step,
		    s.name, layout_name((enum layout_kind)s.kind));
	}
}

/* One histogram in the exposition format: _bucket{le=...} cumulative, +Inf, _sum, _count. */
static void render_metrics(struct ckfs *fs, struct ckpt_text *o, const struct collect *c,
			   const struct idx_stats *st)
{
	unsigned by_state[IDX_STEP_STATE_COUNT] = { 0 };
	const struct idx_step *last = NULL;
	struct write_counts wc;

	for (size_t i = 0; i < c->n; i++) {
		if (c->v[i].state >= 0 && c->v[i].state < IDX_STEP_STATE_COUNT)
			by_state[c->v[i].state]++;
		if (c->v[i].state == IDX_STEP_COMPLETE &&
		    (!last || c->v[i].completed_ns > last->completed_ns))
			last = &c->v[i];
	}
	prom_family(o, "ckptfs_steps", "gauge", "Checkpoint steps by lifecycle state.");
	for (int s = 0; s < IDX_STEP_STATE_COUNT; s++)
		prom_u64(o, "ckptfs_steps", "state", idx_step_state_name(s), by_state[s]);
	prom_family(o, "ckptfs_logical_bytes", "gauge", "Bytes of all regular files as written.");
	prom_u64(o, "ckptfs_logical_bytes", NULL, NULL, st->logical_bytes);
	prom_family(o, "ckptfs_stored_bytes", "gauge",
		    "Bytes of chunk data on disk after dedup and compression.");
	prom_u64(o, "ckptfs_stored_bytes", NULL, NULL, st->stored_bytes);
	prom_family(o, "ckptfs_chunks", "gauge", "Distinct chunks stored.");
	prom_u64(o, "ckptfs_chunks", NULL, NULL, st->chunks);
	prom_family(o, "ckptfs_checksum_failures", "gauge",
		    "Chunks found not to match their XXH3-128.");
	prom_u64(o, "ckptfs_checksum_failures", NULL, NULL, st->bad_chunks);

	size_t wb_budget, wb_used, wb_kept, wb_peak;
	unsigned wb_threads;

	wb_figures(fs, &wb_budget, &wb_used, &wb_kept, &wb_peak, &wb_threads);
	prom_family(o, "ckptfs_write_buffer_bytes", "gauge",
		    "Written bytes being chunked and compressed in the background, buffers kept for "
		    "the next writes (now), peak of both, budget.");
	prom_u64(o, "ckptfs_write_buffer_bytes", "kind", "in_flight", wb_used);
	prom_u64(o, "ckptfs_write_buffer_bytes", "kind", "kept", wb_kept);
	prom_u64(o, "ckptfs_write_buffer_bytes", "kind", "peak", wb_peak);
	prom_u64(o, "ckptfs_write_buffer_bytes", "kind", "budget", wb_budget);

	uint64_t hits, loads, warmed, recycled;

	store_cache_figures(fs->st, &hits, &loads, &warmed, &recycled);
	prom_family(o, "ckptfs_chunk_reads_total", "counter",
		    "Chunk lookups by readers: served from the decompressed-chunk cache, or read "
		    "from disk, decoded and re-hashed.");
	prom_u64(o, "ckptfs_chunk_reads_total", "from", "cache", hits);
	prom_u64(o, "ckptfs_chunk_reads_total", "from", "disk", loads);
	prom_family(o, "ckptfs_chunk_readahead_total", "counter",
		    "Chunks read from disk, decoded and re-hashed ahead of a sequential reader "
		    "(-o readahead).");
	prom_u64(o, "ckptfs_chunk_readahead_total", NULL, NULL, warmed);
	prom_family(o, "ckptfs_chunk_buffers_recycled_total", "counter",
		    "Chunk loads that decoded into the buffer of an evicted cache entry instead of "
		    "a new allocation.");
	prom_u64(o, "ckptfs_chunk_buffers_recycled_total", NULL, NULL, recycled);
	prom_family(o, "ckptfs_staging_copies_total", "counter",
		    "Files switched to a staging copy because a write was not in order (they are "
		    "cut into chunks at close, on the closing request).");
	write_counts(fs, &wc);
	prom_u64(o, "ckptfs_staging_copies_total", NULL, NULL, wc.staging);
	if (st->logical_bytes) {
		prom_family(o, "ckptfs_stored_logical_ratio", "gauge",
			    "Stored bytes over logical bytes, the ratio ckptctl status shows: what "
			    "deduplication and compression leave (0.5 = half the disk).");
		prom_double(o, "ckptfs_stored_logical_ratio", NULL, NULL,
			    (double)st->stored_bytes / (double)st->logical_bytes);
	}
	prom_hist(o, "ckptfs_save_seconds",
		  "A step directory's creation to the step judged complete (every file durable, "
		  "the claim seen), per step saved since the mount.", steps_save_hist(fs));
	prom_hist(o, "ckptfs_durable_seconds",
		  "A written file's close to its content durable (chunks stored and synced, "
		  "extents in the index), per file since the mount.", write_durable_hist(fs));
	if (last) {
		prom_family(o, "ckptfs_last_save_seconds", "gauge",
			    "Step directory created to step complete, for the newest complete step.");
		prom_double(o, "ckptfs_last_save_seconds", NULL, NULL,
			    (double)(last->completed_ns - last->created_ns) / 1e9);
		prom_family(o, "ckptfs_last_complete_step", "gauge",
			    "Step number of the newest complete step.");
		prom_i64(o, "ckptfs_last_complete_step", NULL, NULL, last->step);
	}
	if (fs->node)
		node_metrics(fs, o);
}

/* Does /.ckptfs/<file which> show whole-store figures (idx_stats)? */
static bool meta_has_stats(int which)
{
	return which == META_STATUS || which == META_METRICS;
}

/* The figures kept (zeros before the first scan); any thread. Takes only stats.kept_mu, never
 * held across a scan: a lookup of /.ckptfs/status waiting for a scrape's scan held every other
 * lookup in /.ckptfs with it (test_prometheus.py FiguresOutsideTheLockTest). */
static void stats_kept(struct ckfs *fs, struct idx_stats *ret)
{
	ckpt_lock(&fs->fuse.stats.kept_mu, CKPT_RANK_STATS_KEPT);
	if (fs->fuse.stats.valid)
		*ret = fs->fuse.stats.figures;
	else
		memset(ret, 0, sizeof(*ret));
	ckpt_unlock(&fs->fuse.stats.kept_mu, CKPT_RANK_STATS_KEPT);
}

/* The figures from fs->fuse.stats.ix at its current data version, scanned if it changed since
 * the kept ones; fs->fuse.stats.mu held (one scan at a time). 0 or an index error. */
static int stats_read(struct ckfs *fs, struct idx_stats *ret)
{
	struct idx_stats got;
	int64_t v;
	int rc;

	if (!fs->fuse.stats.ix && !fs->fuse.stats.failed &&
	    (rc = ckpt_repo_open_reader(fs->repo, &fs->fuse.stats.ix)) < 0) {
		fs->fuse.stats.failed = true;
		ckpt_log("status: cannot open a second handle on the index (%s): its figures are "
			 "read with the daemon's lock held\n", strerror(-rc));
	}
	if (!fs->fuse.stats.ix)
		return -ENOTCONN;
	if ((rc = idx_data_version(fs->fuse.stats.ix, &v)) < 0)
		return rc;
	if (fs->fuse.stats.valid && v == fs->fuse.stats.version) {
		*ret = fs->fuse.stats.figures; /* written only with stats.mu held, as now */
		return 0;
	}
	idx_hold(fs->fuse.stats.ix); /* both scans in one snapshot */
	ckpt_fault("stats-scan");
	rc = idx_stats_get(fs->fuse.stats.ix, &got);
	idx_unhold(fs->fuse.stats.ix);
	ckpt_lock(&fs->fuse.stats.kept_mu, CKPT_RANK_STATS_KEPT);
	fs->fuse.stats.valid = rc == 0;
	if (rc == 0)
		fs->fuse.stats.figures = got;
	ckpt_unlock(&fs->fuse.stats.kept_mu, CKPT_RANK_STATS_KEPT);
	fs->fuse.stats.version = v;
	if (rc < 0)
		return rc;
	*ret = got;
	return 0;
}

int fs_meta_stats(struct ckfs *fs, int which, bool fresh, struct idx_stats *ret)
{
	int rc;

	if (!meta_has_stats(which))
		return 0;
	if (!fresh) { /* for a size only: never a scan, never a wait for one */
		stats_kept(fs, ret);
		return 1;
	}
	cq_flush_now(fs); /* the files created before this read count: their rows may wait */
	ckpt_lock(&fs->fuse.stats.mu, CKPT_RANK_STATS);
	rc = stats_read(fs, ret);
	ckpt_unlock(&fs->fuse.stats.mu, CKPT_RANK_STATS);
	return rc == 0 ? 1 : 0; /* failed: fs_meta_render reads them under fs->mu */
}

void fs_meta_stats_close(struct ckfs *fs)
{
	idx_close(fs->fuse.stats.ix);
	fs->fuse.stats.ix = NULL;
	fs->fuse.stats.valid = false;
}

int fs_meta_render(struct ckfs *fs, int which, const struct idx_stats *stats, char **ret_buf,
		   size_t *ret_len)
{
	struct collect c = { 0 };
	struct idx_stats st = { 0 };
	struct ckpt_text o = { 0 };
	int rc = 0;

	if (which < 0 || which >= META_FILE_COUNT)
		return -ENOENT;
	if (stats) {
		st = *stats;
	} else if (meta_has_stats(which)) {
		ckpt_fault("stats-scan");
		if ((rc = idx_stats_get(fs->ix, &st)) < 0)
			goto out;
	}
	if ((rc = idx_step_foreach(fs->ix, collect_cb, &c)) < 0)
		goto out;
	switch (which) {
	case META_STATUS:
		render_status(fs, &o, &c, &st);
		break;
	case META_STEPS:
		render_steps(&o, &c);
		break;
	case META_STEPS_JSON:
		rc = render_steps_json(&o, &c);
		break;
	case META_METRICS:
		render_metrics(fs, &o, &c, &st);
		break;
	}
	if (rc == 0)
		rc = o.err;
	if (rc == 0 && !o.buf)
		put(&o, "%s", "");
	if (rc == 0 && !(rc = o.err)) {
		*ret_buf = o.buf;
		*ret_len = o.len;
		o.buf = NULL;
	}
out:
	ckpt_text_free(&o);
	free(c.v);
	return rc;
}
