/*
 * remote_gc.c — ckptctl STORE remote gc [--dry-run] [--force] [--force-no-lease]: remove from
 * the remote what no resume can need: the manifests of global steps older than the newest
 * keep_checkpoint_max (recorded at mount; 0 keeps every global step) and of steps never global
 * that are older than the newest global one (a node died in their save), their dirs/ objects,
 * then every chunk no remaining manifest names.
 *
 * The protocol with the nodes (fs/node/node.c upload_begin; the leases: fs/node/lease.h):
 *   1. The gc puts gc/lease put-if-absent (one gc at a time), then lists uploads/. A node puts
 *      its marker uploads/<node>/<kind>-<step>, then reads gc/lease. So either the gc sees the
 *      marker and removes nothing, or the node sees the lease and waits: no chunk an upload
 *      found on the remote (and so did not send) is removed under it.
 *   2. The gc renews its lease every LEASE_GC_RENEW_S seconds and starts no remote operation
 *      once LEASE_GC_DEADLINE_S passed since the renewal it last wrote (r_keep): a node judges
 *      the lease stale only LEASE_GC_EXPIRY_S after that renewal, by when the gc's last
 *      delete has landed.
 *   3. A stale lease (a gc that died) is taken over, and said so. A stale marker (a node that
 *      died in an upload: not renewed for LEASE_UPLOAD_EXPIRY_S) is reported, removed, and
 *      blocks nothing. A live marker, or one that is no lease (the empty markers of an older
 *      ckptfs: age unknown), blocks the gc. --force takes any lease and removes any marker:
 *      the user says their holders died.
 *   4. A full remote (the lease write fails with -ENOSPC or -EDQUOT before anything is
 *      removed): the gc removes, without a lease, only the manifests and dirs/ objects of the
 *      steps it dooms, then tries the lease again. They are garbage whatever runs meanwhile: a
 *      doomed step is one no resume loads (the rule above), and an upload relies on the chunks
 *      it found being there, never on another step's manifest; no chunk goes without the
 *      lease. A manifest takes more room than a lease (a file's block, or bytes against a
 *      quota), so one removed makes room. When there is none to remove, or the lease still
 *      does not fit, the gc says to stop ckptfs on every node and run again with
 *      --force-no-lease: no lease, and every marker is taken as left by a node that died.
 *   5. --dry-run takes no lease and removes nothing: it lists what a gc would remove now, and
 *      what would stop it (a live lease or marker).
 *
 * Output: the report on stdout (one line per lease or marker taken over, per object with
 * --dry-run, and a summary), errors on stderr. Main thread only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote_int.h"

#define NS_PER_S ((int64_t)1000000000)

/* What a pass removed, or with --dry-run would remove. */
struct gc_tally {
	bool dry;
	uint64_t manifests, dirs, markers, chunks, chunk_bytes, errors;
};

int r_keep(struct r_ctx *c)
{
	struct r_hold *h = &c->hold;
	char held[256];
	struct lease cur, next;
	int64_t since, t;
	int rc;

	if (!h->held)
		return 0;
	since = ckpt_mono_ns() - h->renewed_mono;
	if (since >= LEASE_GC_DEADLINE_S * NS_PER_S) {
		ctl_err("gc stopped: its lease '%s' was last renewed %" PRId64 " s ago, and a node "
			"may judge it stale %d s after that; what it removed is not needed by any "
			"kept step: run it again once the remote answers promptly",
			LEASE_GC_KEY, since / NS_PER_S, LEASE_GC_EXPIRY_S);
		return -ESTALE;
	}
	if (since < LEASE_GC_RENEW_S * NS_PER_S)
		return 0;
	/* still ours? another gc takes it over only once it looks stale (lease.c) */
	rc = lease_read(c->r, LEASE_GC_KEY, lease_now_ns(), &cur);
	if (rc == LEASE_ABSENT || rc == -EBADMSG ||
	    ((rc == LEASE_LIVE || rc == LEASE_STALE) && !lease_same(&cur, &h->mine))) {
		h->held = false;
		if (rc == LEASE_ABSENT)
			ctl_err("gc stopped: its lease '%s' was removed under it, so nodes may be "
				"uploading; run it again", LEASE_GC_KEY);
		else if (rc == -EBADMSG)
			ctl_err("gc stopped: its lease '%s' was replaced by an object that is no "
				"lease (an older ckptctl's?); run it again once no other gc runs",
				LEASE_GC_KEY);
		else
			ctl_err("gc stopped: its lease '%s' was taken over by %s; let that gc finish",
				LEASE_GC_KEY, lease_describe(&cur, held, sizeof(held)));
		return -ESTALE;
	}
	if (rc < 0)
		return 0; /* the remote erred: try again at the next operation, until the deadline */
	next = h->mine;
	t = ckpt_mono_ns();
	next.renewed_ns = lease_now_ns();
	if (lease_put(c->r, LEASE_GC_KEY, &next, false) == 0) {
		h->mine = next;
		h->renewed_mono = t;
	}
	return 0;
}

/* Remove key under the lease (r_keep first). Returns 0, -ESTALE, or the remote's -errno
 * (reported; g->errors counts it). */
static int gc_delete(struct r_ctx *c, struct gc_tally *g, const char *key)
{
	int rc = r_keep(c);

	if (rc == 0 && (rc = remote_delete(c->r, key)) < 0) {
		ctl_err("cannot remove '%s' from the remote: %s", key, strerror(-rc));
		g->errors++;
	}
	return rc;
}

/* Give gc/lease back: removed when it is still this gc's, else left to its new holder. */
static void release_lease(struct r_ctx *c)
{
	struct lease cur;
	int rc;

	if (!c->hold.held)
		return;
	c->hold.held = false;
	rc = lease_read(c->r, LEASE_GC_KEY, lease_now_ns(), &cur);
	if (rc == LEASE_ABSENT || ((rc == LEASE_LIVE || rc == LEASE_STALE) &&
				   !lease_same(&cur, &c->hold.mine)))
		return;
	if ((rc = remote_delete(c->r, LEASE_GC_KEY)) < 0)
		ctl_err("cannot remove the gc's lease '%s': %s; nodes wait until it lapses (%d s) "
			"or it is removed", LEASE_GC_KEY, strerror(-rc), LEASE_GC_EXPIRY_S);
}

/* Write a new lease of this gc at gc/lease, put-if-absent unless replace. Returns lease_put's. */
static int put_mine(struct r_ctx *c, bool replace)
{
	struct r_hold *h = &c->hold;

	h->renewed_mono = ckpt_mono_ns();
	lease_init(&h->mine, "ckptctl remote gc", LEASE_GC_EXPIRY_S, lease_now_ns());
	return lease_put(c->r, LEASE_GC_KEY, &h->mine, !replace);
}

/*
 * Take gc/lease (protocol 1 and 3): a stale one is taken over, any one with --force; either is
 * said on stdout. Returns 0 (c->hold.held), -ENOSPC or -EDQUOT (the remote is full: for the
 * caller, protocol 4), or -EAGAIN, -ESTALE or the remote's -errno (reported).
 */
static int take_lease(struct r_ctx *c, bool force)
{
	char held[256], when[32];
	struct lease cur, back;
	int rc = -EEXIST, st;

	/* a lease gone between the put and the read (its gc ended) is tried again */
	for (int tries = 0; tries < 3 && rc == -EEXIST; tries++) {
		if ((rc = put_mine(c, false)) != -EEXIST)
			break;
		st = lease_read(c->r, LEASE_GC_KEY, lease_now_ns(), &cur);
		if (st == LEASE_ABSENT)
			continue;
		if (st < 0 && st != -EBADMSG) {
			ctl_err("cannot read the remote's '%s': %s; check that the remote answers and "
				"try again", LEASE_GC_KEY, strerror(-st));
			return st;
		}
		if (st == LEASE_LIVE && !force) {
			ctl_err("another gc holds the remote's '%s': %s, last renewed %s; wait until it "
				"ends (it lapses %" PRId64 " s after its last renewal if that gc died), "
				"or run again with --force if you know it died", LEASE_GC_KEY,
				lease_describe(&cur, held, sizeof(held)),
				lease_time(cur.renewed_ns, when, sizeof(when)), cur.expiry_s);
			return -EAGAIN;
		}
		if (st == -EBADMSG && !force) {
			ctl_err("the remote's '%s' is no lease this ckptctl reads (an older ckptctl's, "
				"or damaged); if no gc runs, run again with --force", LEASE_GC_KEY);
			return -EAGAIN;
		}
		if ((rc = put_mine(c, true)) < 0)
			break;
		/* two gcs taking over the same stale lease at once: the later write wins, the
		 * other sees it here (or at its first renewal, r_keep) and stops */
		if (lease_read(c->r, LEASE_GC_KEY, lease_now_ns(), &back) != LEASE_LIVE ||
		    !lease_same(&back, &c->hold.mine)) {
			ctl_err("another gc took the remote's '%s' over at the same time; let it "
				"finish", LEASE_GC_KEY);
			return -EAGAIN;
		}
		if (st == -EBADMSG)
			printf("lease:     took over '%s', no lease this ckptctl reads (--force)\n",
			       LEASE_GC_KEY);
		else
			printf("lease:     took over %s '%s' held by %s, not renewed since %s (expiry "
			       "%" PRId64 " s)%s\n", st == LEASE_STALE ? "the stale" : "the live",
			       LEASE_GC_KEY, lease_describe(&cur, held, sizeof(held)),
			       lease_time(cur.renewed_ns, when, sizeof(when)), cur.expiry_s,
			       st == LEASE_STALE ? ": a gc that died" : " (--force)");
	}
	if (rc == -EEXIST) {
		ctl_err("the remote's '%s' keeps coming and going: other gcs run; try again later",
			LEASE_GC_KEY);
		return -EAGAIN;
	}
	if (rc < 0 && rc != -ENOSPC && rc != -EDQUOT)
		ctl_err("cannot take the remote's '%s': %s", LEASE_GC_KEY, strerror(-rc));
	if (rc == 0)
		c->hold.held = true;
	return rc;
}

/*
 * Look at every upload marker (protocol 1 and 3). A dead one (stale; any with all_dead) is said
 * on stdout and removed (with g->dry: said as "would remove"); a live one, or one that is no
 * lease, is said on stderr (stdout with g->dry) and blocks. Returns the number of blocking
 * markers (>= 0), or -ESTALE or the remote's -errno (reported).
 */
static int check_markers(struct r_ctx *c, struct gc_tally *g, bool all_dead)
{
	char held[256], when[32];
	int rc, blocking = 0;

	c->nkeys = 0;
	if ((rc = remote_list(c->r, LEASE_UPLOADS_PREFIX, r_key_cb, c)) < 0) {
		ctl_err("cannot list the remote's '%s': %s", LEASE_UPLOADS_PREFIX, strerror(-rc));
		return rc;
	}
	for (size_t i = 0; i < c->nkeys; i++) {
		const char *key = c->keys[i];
		struct lease l;
		int st = lease_read(c->r, key, lease_now_ns(), &l);

		if (st == LEASE_ABSENT)
			continue; /* the upload ended since the listing */
		if (st < 0 && st != -EBADMSG) {
			ctl_err("cannot read the remote's '%s': %s", key, strerror(-st));
			return st;
		}
		if (st == LEASE_STALE || all_dead) {
			if (st == -EBADMSG)
				printf("upload:    marker '%s', no lease (an older ckptfs's), taken as "
				       "left by a node that died (--force): %s\n",
				       key, g->dry ? "would remove" : "removed");
			else
				printf("upload:    marker '%s' of %s, not renewed since %s (expiry "
				       "%" PRId64 " s), taken as left by a node that died%s: %s\n", key,
				       lease_describe(&l, held, sizeof(held)),
				       lease_time(l.renewed_ns, when, sizeof(when)), l.expiry_s,
				       st == LEASE_STALE ? "" : " (--force)",
				       g->dry ? "would remove" : "removed");
			if (!g->dry && (rc = gc_delete(c, g, key)) < 0)
				return rc;
			g->markers++;
			continue;
		}
		blocking++;
		if (g->dry)
			printf("blocked:   a node is publishing ('%s'): a gc now would remove nothing\n",
			       key);
		else if (st == -EBADMSG)
			ctl_err("a node is publishing ('%s', a marker of an older ckptfs, with no "
				"time): nothing removed; run again once its upload ends, or with --force "
				"if that node died in it", key);
		else
			ctl_err("a node is publishing ('%s', %s): nothing removed; run again once its "
				"upload ends, or with --force if that node died in it (else its marker "
				"lapses %" PRId64 " s after %s)", key,
				lease_describe(&l, held, sizeof(held)), l.expiry_s,
				lease_time(l.renewed_ns, when, sizeof(when)));
	}
	c->nkeys = 0;
	return blocking;
}

/* The manifests and dirs/ objects of the doomed steps: removed under the lease (or, full,
 * without it: protocol 4), or with g->dry listed. Leaves c->keys holding the listing of
 * manifests/. Returns 0, -ESTALE, or the remote's -errno (reported). */
static int doomed_manifests(struct r_ctx *c, struct gc_tally *g)
{
	int rc;

	c->nkeys = 0;
	if ((rc = remote_list(c->r, "manifests/", r_key_cb, c)) < 0) {
		ctl_err("cannot list the remote's manifests: %s", strerror(-rc));
		return rc;
	}
	for (size_t i = 0; i < c->nkeys; i++) {
		int kind;
		int64_t step;

		if (!r_key_step(c->keys[i], &kind, &step) || !r_doomed(c, kind, step))
			continue;
		if (g->dry)
			printf("would remove: %s\n", c->keys[i]);
		else if ((rc = gc_delete(c, g, c->keys[i])) < 0)
			return rc;
		g->manifests++;
	}
	for (size_t i = 0; i < c->ndoomed; i++) {
		char key[REMOTE_KEY_MAX + 1];

		snprintf(key, sizeof(key), "dirs/%s", c->doomed[i].name);
		if ((rc = remote_head(c->r, key, NULL)) == -ENOENT)
			continue;
		if (rc < 0) {
			ctl_err("cannot read the remote's '%s': %s", key, strerror(-rc));
			return rc;
		}
		if (g->dry)
			printf("would remove: %s\n", key);
		else if ((rc = gc_delete(c, g, key)) < 0)
			return rc;
		g->dirs++;
	}
	return 0;
}

struct chunk_pass {
	struct r_ctx *c;
	struct gc_tally *g;
};

/* remote_list_fn over chunks/: each chunk no kept manifest names is removed (listed with
 * --dry-run). Returns 0, or -ESTALE (stops the listing). */
static int gc_chunk_cb(const char *key, uint64_t size, void *arg)
{
	struct chunk_pass *p = arg;
	int rc;

	/* a listing of 10^6 chunks takes minutes even when none goes: renew meanwhile */
	if ((rc = r_keep(p->c)) < 0)
		return rc;
	p->c->chunks++;
	p->c->chunk_bytes += size;
	if (r_named(p->c, key + strlen("chunks/")))
		return 0;
	if (p->g->dry) {
		printf("would remove: %s (%" PRIu64 " bytes)\n", key, size);
	} else if ((rc = gc_delete(p->c, p->g, key)) < 0) {
		return rc == -ESTALE ? rc : 0; /* one chunk that cannot go: the others still go */
	}
	p->g->chunks++;
	p->g->chunk_bytes += size;
	return 0;
}

/* The chunks no manifest of a kept step names (c->keys: the manifests' listing). */
static int unnamed_chunks(struct r_ctx *c, struct gc_tally *g)
{
	struct chunk_pass p = { c, g };
	int rc;

	c->nnamed = 0;
	c->chunks = c->chunk_bytes = 0;
	if ((rc = r_read_manifests(c)) == 0)
		rc = remote_list(c->r, "chunks/", gc_chunk_cb, &p);
	if (rc < 0 && rc != -ESTALE)
		ctl_err("cannot read the remote: %s", strerror(-rc));
	return rc;
}

/* Protocol 5: what a gc would do now. */
static int gc_dry_run(struct r_ctx *c, unsigned keep)
{
	struct gc_tally g = { .dry = true };
	char held[256], when[32], s1[48];
	struct lease l;
	int st = lease_read(c->r, LEASE_GC_KEY, lease_now_ns(), &l);

	if (st == LEASE_LIVE)
		printf("blocked:   another gc holds '%s' (%s, last renewed %s): a gc now would "
		       "wait for it\n", LEASE_GC_KEY, lease_describe(&l, held, sizeof(held)),
		       lease_time(l.renewed_ns, when, sizeof(when)));
	else if (st == LEASE_STALE)
		printf("lease:     a gc now would take over the stale '%s' held by %s, not renewed "
		       "since %s (expiry %" PRId64 " s)\n", LEASE_GC_KEY,
		       lease_describe(&l, held, sizeof(held)),
		       lease_time(l.renewed_ns, when, sizeof(when)), l.expiry_s);
	else if (st == -EBADMSG)
		printf("blocked:   '%s' is no lease this ckptctl reads: a gc now would need --force\n",
		       LEASE_GC_KEY);
	else if (st < 0)
		ctl_err("cannot read the remote's '%s': %s", LEASE_GC_KEY, strerror(-st));
	if (st < 0 && st != -EBADMSG)
		return EXIT_ERROR;
	if (check_markers(c, &g, false) < 0 || doomed_manifests(c, &g) < 0 ||
	    unnamed_chunks(c, &g) < 0)
		return EXIT_ERROR;
	printf("gc --dry-run: would remove %zu steps (%" PRIu64 " manifests, %" PRIu64
	       " step directories), %" PRIu64 " upload markers of dead nodes, %" PRIu64
	       " chunks of %s; keep_checkpoint_max %u; nothing removed, no lease taken\n",
	       c->ndoomed, g.manifests, g.dirs, g.markers, g.chunks,
	       policy_size_text(g.chunk_bytes, s1, sizeof(s1)), keep);
	return EXIT_OK;
}

/* Protocol 4: the lease does not fit; make room without it, then take it. Returns take_lease's
 * result, or -ESTALE or the remote's -errno (reported). */
static int take_lease_full(struct r_ctx *c, struct gc_tally *g, int why, const struct ctl_opts *o)
{
	int rc = doomed_manifests(c, g);

	if (rc < 0)
		return rc;
	if (g->manifests + g->dirs > 0) {
		printf("full:      the remote is full (%s): removed %" PRIu64 " manifests and %" PRIu64
		       " step directories of dropped steps without the lease, to make room for it\n",
		       strerror(-why), g->manifests, g->dirs);
		rc = take_lease(c, o->force);
		if (rc != -ENOSPC && rc != -EDQUOT)
			return rc;
		why = rc;
	}
	ctl_err("the remote is full (%s): cannot write the gc's lease '%s'%s; stop ckptfs on every "
		"node (so that none uploads), then run 'ckptctl %s remote gc --force-no-lease'",
		strerror(-why), LEASE_GC_KEY,
		g->manifests + g->dirs ? " even after removing the dropped steps' manifests"
				       : ", and no dropped step's manifest is there to remove first",
		o->root);
	return why;
}

int remote_gc(struct r_ctx *c, json_t *cfg, unsigned nodes, const struct ctl_opts *o)
{
	unsigned keep = (unsigned)json_integer_value(json_object_get(cfg, "keep_checkpoint_max"));
	struct gc_tally g = { 0 };
	char s1[48];
	int rc;

	if ((rc = r_choose_doomed(c, nodes, keep)) < 0) {
		ctl_err("cannot choose what to remove: %s", strerror(-rc));
		return EXIT_ERROR;
	}
	if (o->dry_run)
		return gc_dry_run(c, keep);
	if (o->force_no_lease) {
		printf("lease:     none taken (--force-no-lease): ckptfs must be stopped on every "
		       "node\n");
	} else {
		rc = take_lease(c, o->force);
		if (rc == -ENOSPC || rc == -EDQUOT)
			rc = take_lease_full(c, &g, rc, o);
		if (rc < 0)
			return EXIT_ERROR;
	}
	if ((rc = check_markers(c, &g, o->force || o->force_no_lease)) != 0) {
		release_lease(c);
		return EXIT_ERROR;
	}
	if ((rc = doomed_manifests(c, &g)) == 0)
		rc = unnamed_chunks(c, &g);
	release_lease(c);
	if (rc < 0) {
		if (rc != -ESTALE)
			ctl_err("gc stopped: %s; what it removed is not needed by any kept step, run "
				"it again", strerror(-rc));
		return EXIT_ERROR;
	}
	printf("gc:        removed %zu steps (%" PRIu64 " manifests, %" PRIu64
	       " step directories), %" PRIu64 " upload markers of dead nodes, %" PRIu64
	       " chunks of %s; keep_checkpoint_max %u\n",
	       c->ndoomed, g.manifests, g.dirs, g.markers, g.chunks,
	       policy_size_text(g.chunk_bytes, s1, sizeof(s1)), keep);
	return g.errors ? EXIT_ERROR : EXIT_OK;
}
