/*
 * rgc.c — the remote's gc (rgc.h: the rule, the protocol with the nodes, what each side does).
 *
 * Invariants:
 *   1. No chunk is removed without the lease (or force_no_lease): protocol 1 and 4.
 *   2. Every remote operation of a gc holding the lease goes through rgc_keep first, so a gc
 *      that cannot renew stops before a node may judge its lease stale (protocol 2).
 *   3. What a pass removes is a doomed step's object or a chunk no kept manifest names, so a
 *      pass that stops half way leaves every kept step whole.
 *   4. No chunk is removed before this pass's gc epoch is on the remote (protocol 6).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <jansson.h>

#include "fs/ckptfs.h"
#include "fs/node/rgc.h"
#include "fs/policy/policy.h"

#define NS_PER_S ((int64_t)1000000000)

/* Say one line of kind k through c->o->say (printf-style; cut at 1 KiB). */
static void say(struct rgc *c, enum rgc_say k, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void say(struct rgc *c, enum rgc_say k, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	c->o->say(c->o->say_arg, k, line);
}

#define say_out(c, ...) say(c, RGC_REPORT, __VA_ARGS__)
#define say_err(c, ...) say(c, RGC_ERROR, __VA_ARGS__)

int rgc_key_cb(const char *key, uint64_t size, void *arg)
{
	struct rgc *c = arg;

	(void)size;
	if (strlen(key) > REMOTE_KEY_MAX)
		return 0;
	if (ckpt_grow(&c->keys, &c->capkeys, c->nkeys, sizeof(*c->keys)) < 0)
		return -ENOMEM;
	snprintf(c->keys[c->nkeys++], sizeof(*c->keys), "%s", key);
	return 0;
}

static int hexcmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

bool rgc_named(const struct rgc *c, const char *hex)
{
	return bsearch(hex, c->named, c->nnamed, sizeof(*c->named), hexcmp) != NULL;
}

/*
 * Whether step s is global: the daemon's rule (policy_global_complete: a part from every one of
 * nodes distinct nodes, one with the seal), on the parts its manifests name ("a* b": '*' on a
 * sealed one). Two versions of one node's part (a step saved again, the earlier not removed
 * yet) count once.
 */
bool rgc_global(const struct rgc_step *s, unsigned nodes)
{
	struct policy_part pp[64];
	char names[64][64], buf[sizeof(s->nodes)], *save = NULL, *t;
	size_t n = 0;

	snprintf(buf, sizeof(buf), "%s", s->nodes);
	for (t = strtok_r(buf, " ", &save); t && n < 64; t = strtok_r(NULL, " ", &save)) {
		size_t len = strlen(t);
		bool sealed = len && t[len - 1] == '*';

		snprintf(names[n], sizeof(names[n]), "%.*s", (int)(len - sealed), t);
		pp[n] = (struct policy_part){ names[n], sealed };
		n++;
	}
	return policy_global_complete(pp, n, nodes);
}

/* Add manifest m (parsed) to the steps and its chunks to c->named. */
static int add_manifest(struct rgc *c, json_t *m)
{
	const char *node = json_string_value(json_object_get(m, "node"));
	const char *name = json_string_value(json_object_get(m, "name"));
	int kind = (int)json_integer_value(json_object_get(m, "kind"));
	int64_t step = json_integer_value(json_object_get(m, "step"));
	bool sealed = json_is_true(json_object_get(m, "sealed"));
	struct rgc_step *s = NULL;
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
		*s = (struct rgc_step){ .kind = kind, .step = step };
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

static bool key_step(const char *key, int *kind, int64_t *step)
{
	return sscanf(key, "manifests/%d/%" SCNd64 "/", kind, step) == 2;
}

static struct rgc_step *doomed_at(const struct rgc *c, int kind, int64_t step)
{
	for (size_t i = 0; i < c->ndoomed; i++)
		if (c->doomed[i].kind == kind && c->doomed[i].step == step)
			return &c->doomed[i];
	return NULL;
}

static bool is_doomed(const struct rgc *c, int kind, int64_t step)
{
	return doomed_at(c, kind, step) != NULL;
}

int rgc_read_manifests(struct rgc *c)
{
	int rc = c->nkeys ? 0 : remote_list(c->r, "manifests/", rgc_key_cb, c);

	for (size_t i = 0; rc == 0 && i < c->nkeys; i++) {
		json_t *m;
		size_t len;
		void *buf;
		int kind;
		int64_t step;

		if (key_step(c->keys[i], &kind, &step) && is_doomed(c, kind, step))
			continue;
		if ((rc = rgc_keep(c)) < 0)
			break;

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
			say_err(c, "manifest '%s' on the remote does not parse; skipped", c->keys[i]);
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

bool rgc_rule_counts(int64_t number, int64_t keep_every)
{
	return !(keep_every > 0 && number >= 0 && number % keep_every == 0);
}

bool rgc_rule_dooms(bool global, int64_t number, size_t newer_global, unsigned keep,
		    int64_t keep_every)
{
	if (!global)
		return newer_global > 0;
	return keep && rgc_rule_counts(number, keep_every) && newer_global >= keep;
}

int rgc_choose_doomed(struct rgc *c)
{
	for (size_t i = 0; i < c->nsteps; i++) {
		const struct rgc_step *s = &c->steps[i];
		size_t newer_global = 0;

		for (size_t j = 0; j < c->nsteps; j++) {
			const struct rgc_step *t = &c->steps[j];

			if (t->kind == s->kind && t->step > s->step && rgc_global(t, c->o->nodes) &&
			    rgc_rule_counts(policy_node_step_number(t->kind, t->step),
					    c->o->keep_every))
				newer_global++;
		}
		if (!rgc_rule_dooms(rgc_global(s, c->o->nodes),
				    policy_node_step_number(s->kind, s->step), newer_global,
				    c->o->keep, c->o->keep_every))
			continue;
		if (ckpt_grow(&c->doomed, &c->capdoomed, c->ndoomed, sizeof(*c->doomed)) < 0)
			return -ENOMEM;
		c->doomed[c->ndoomed++] = *s;
	}
	return 0;
}

int rgc_keep(struct rgc *c)
{
	struct rgc_hold *h = &c->hold;
	char held[256];
	struct lease cur, next;
	int64_t since, t;
	int rc;

	if (c->o->stop && c->o->stop(c->o->stop_arg))
		return -ECANCELED;
	if (!h->held)
		return 0;
	since = ckpt_mono_ns() - h->renewed_mono;
	if (since >= LEASE_GC_DEADLINE_S * NS_PER_S) {
		say_err(c, "gc stopped: its lease '%s' was last renewed %" PRId64 " s ago, and a node "
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
			say_err(c, "gc stopped: its lease '%s' was removed under it, so nodes may be "
				"uploading; run it again", LEASE_GC_KEY);
		else if (rc == -EBADMSG)
			say_err(c, "gc stopped: its lease '%s' was replaced by an object that is no "
				"lease (an older ckptctl's?); run it again once no other gc runs",
				LEASE_GC_KEY);
		else
			say_err(c, "gc stopped: its lease '%s' was taken over by %s; let that gc finish",
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

/* Remove key under the lease (rgc_keep first). Returns 0, -ESTALE, -ECANCELED, or the
 * remote's -errno (said; g->errors counts it). */
static int gc_delete(struct rgc *c, struct rgc_tally *g, const char *key)
{
	int rc = rgc_keep(c);

	if (rc == 0 && (rc = remote_delete(c->r, key)) < 0) {
		say_err(c, "cannot remove '%s' from the remote: %s", key, strerror(-rc));
		g->errors++;
	}
	return rc;
}

/* Give gc/lease back: removed when it is still this gc's, else left to its new holder. */
/* Remove this gc's claim of the lease it took over, if any. Only once that lease is gone or
 * replaced by this gc's own: a gc reading it stale later then finds no claim, claims it, reads
 * gc/lease again (claim_takeover) and sees that it is no longer the one it claimed. */
static void drop_claim(struct rgc *c)
{
	if (c->hold.claim[0])
		(void)remote_delete(c->r, c->hold.claim);
	c->hold.claim[0] = '\0';
}

/* The key of a claim to take over lease l (RGC_CLAIM_PREFIX<host>-<pid>-<created_ns>) into buf
 * (cap bytes, REMOTE_KEY_MAX + 1 suffice). */
static void claim_key(const struct lease *l, char *buf, size_t cap)
{
	char host[sizeof(l->host)];

	/* the host as a key's bytes: a damaged lease must not make an invalid key */
	for (size_t i = 0; i < sizeof(host); i++) {
		char ch = l->host[i];

		host[i] = !ch || isalnum((unsigned char)ch) || ch == '-' || ch == '.' ? ch : '_';
		if (!ch)
			break;
	}
	snprintf(buf, cap, RGC_CLAIM_PREFIX "%s-%" PRId64 "-%" PRId64, host[0] ? host : "_", l->pid,
		 l->created_ns);
}

/*
 * Claim the takeover of lease cur (RGC_CLAIM_PREFIX, protocol 3), then check that gc/lease is
 * still cur: a claim is of one lease, and another gc may have taken it over and released it
 * since this gc read it. Returns 0 (claimed: c->hold.claim), -EAGAIN (another gc claimed it, or
 * gc/lease is another lease now: said, RGC_BLOCKED), -EEXIST (gc/lease is gone: take it
 * afresh), or the remote's -errno (said).
 */
static int claim_takeover(struct rgc *c, const struct lease *cur)
{
	struct lease now;
	int rc, st;

	claim_key(cur, c->hold.claim, sizeof(c->hold.claim));
	rc = lease_put(c->r, c->hold.claim, &c->hold.mine, true);
	if (rc == -EEXIST) {
		c->hold.claim[0] = '\0';
		say(c, RGC_BLOCKED, "another gc took the remote's '%s' over at the same time; let it "
			"finish", LEASE_GC_KEY);
		return -EAGAIN;
	}
	if (rc < 0) {
		c->hold.claim[0] = '\0';
		say_err(c, "cannot claim the remote's '%s': %s", LEASE_GC_KEY, strerror(-rc));
		return rc;
	}
	st = lease_read(c->r, LEASE_GC_KEY, lease_now_ns(), &now);
	if ((st == LEASE_LIVE || st == LEASE_STALE) && lease_same(&now, cur) &&
	    now.renewed_ns == cur->renewed_ns)
		return 0;
	drop_claim(c);
	if (st == LEASE_ABSENT)
		return -EEXIST;
	if (st < 0 && st != -EBADMSG) {
		say_err(c, "cannot read the remote's '%s': %s", LEASE_GC_KEY, strerror(-st));
		return st;
	}
	say(c, RGC_BLOCKED, "another gc took the remote's '%s' over at the same time; let it finish",
	    LEASE_GC_KEY);
	return -EAGAIN;
}

static void release_lease(struct rgc *c)
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
		say_err(c, "cannot remove the gc's lease '%s': %s; nodes wait until it lapses (%d s) "
			"or it is removed", LEASE_GC_KEY, strerror(-rc), LEASE_GC_EXPIRY_S);
	else
		drop_claim(c);
}

/* Write a new lease of this gc at gc/lease, put-if-absent unless replace. Returns lease_put's. */
static int put_mine(struct rgc *c, bool replace)
{
	struct rgc_hold *h = &c->hold;

	h->renewed_mono = ckpt_mono_ns();
	lease_init(&h->mine, c->o->holder, LEASE_GC_EXPIRY_S, lease_now_ns());
	return lease_put(c->r, LEASE_GC_KEY, &h->mine, !replace);
}

/*
 * Take gc/lease (protocol 1 and 3): a stale one is taken over, any one with force; either is
 * said (RGC_REPORT). Returns 0 (c->hold.held), -ENOSPC or -EDQUOT (the remote is full: for the
 * caller, protocol 4), -EAGAIN (another gc holds it: said, RGC_BLOCKED), or -ESTALE or the
 * remote's -errno (said).
 */
static int take_lease(struct rgc *c, bool force)
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
			say_err(c, "cannot read the remote's '%s': %s; check that the remote answers and "
				"try again", LEASE_GC_KEY, strerror(-st));
			return st;
		}
		if (st == LEASE_LIVE && !force) {
			say(c, RGC_BLOCKED, "another gc holds the remote's '%s': %s, last renewed %s; wait until it "
				"ends (it lapses %" PRId64 " s after its last renewal if that gc died), "
				"or run again with --force if you know it died", LEASE_GC_KEY,
				lease_describe(&cur, held, sizeof(held)),
				lease_time(cur.renewed_ns, when, sizeof(when)), cur.expiry_s);
			return -EAGAIN;
		}
		if (st == -EBADMSG && !force) {
			say(c, RGC_BLOCKED, "the remote's '%s' is no lease this ckptctl reads (an older ckptctl's, "
				"or damaged); if no gc runs, run again with --force", LEASE_GC_KEY);
			return -EAGAIN;
		}
		/* of the gcs taking over this lease at once, one claims it and goes on */
		if (st != -EBADMSG) {
			if ((rc = claim_takeover(c, &cur)) == -EEXIST)
				continue; /* gone since: take it afresh */
			if (rc < 0)
				return rc;
		}
		if ((rc = put_mine(c, true)) < 0) {
			drop_claim(c);
			break;
		}
		/* a forced takeover of what is no lease has no claim: of two at once, the later
		 * write wins, and the other sees it here (or at its first renewal, rgc_keep) */
		if (lease_read(c->r, LEASE_GC_KEY, lease_now_ns(), &back) != LEASE_LIVE ||
		    !lease_same(&back, &c->hold.mine)) {
			drop_claim(c);
			say(c, RGC_BLOCKED, "another gc took the remote's '%s' over at the same time; let it "
				"finish", LEASE_GC_KEY);
			return -EAGAIN;
		}
		if (st == -EBADMSG)
			say_out(c, "lease:     took over '%s', no lease this ckptctl reads (--force)",
			       LEASE_GC_KEY);
		else
			say_out(c, "lease:     took over %s '%s' held by %s, not renewed since %s (expiry "
			       "%" PRId64 " s)%s", st == LEASE_STALE ? "the stale" : "the live",
			       LEASE_GC_KEY, lease_describe(&cur, held, sizeof(held)),
			       lease_time(cur.renewed_ns, when, sizeof(when)), cur.expiry_s,
			       st == LEASE_STALE ? ": a gc that died" : " (--force)");
	}
	if (rc == -EEXIST) {
		say(c, RGC_BLOCKED, "the remote's '%s' keeps coming and going: other gcs run; try again later",
			LEASE_GC_KEY);
		return -EAGAIN;
	}
	if (rc < 0 && rc != -ENOSPC && rc != -EDQUOT)
		say_err(c, "cannot take the remote's '%s': %s", LEASE_GC_KEY, strerror(-rc));
	if (rc == 0)
		c->hold.held = true;
	return rc;
}

/*
 * Look at every upload marker (protocol 1 and 3). A dead one (stale; any with all_dead) is said
 * (RGC_REPORT) and removed (with dry_run: said as "would remove"); a live one, or one that is
 * no lease, is said (RGC_BLOCKED; RGC_REPORT with dry_run) and blocks. Returns the number of
 * blocking markers (>= 0), or -ESTALE, -ECANCELED or the remote's -errno (said).
 */
static int check_markers(struct rgc *c, struct rgc_tally *g, bool all_dead)
{
	char held[256], when[32];
	int rc, blocking = 0;

	c->nkeys = 0;
	if ((rc = remote_list(c->r, LEASE_UPLOADS_PREFIX, rgc_key_cb, c)) < 0) {
		say_err(c, "cannot list the remote's '%s': %s", LEASE_UPLOADS_PREFIX, strerror(-rc));
		return rc;
	}
	for (size_t i = 0; i < c->nkeys; i++) {
		const char *key = c->keys[i];
		struct lease l;
		int st = lease_read(c->r, key, lease_now_ns(), &l);

		if (st == LEASE_ABSENT)
			continue; /* the upload ended since the listing */
		if (st < 0 && st != -EBADMSG) {
			say_err(c, "cannot read the remote's '%s': %s", key, strerror(-st));
			return st;
		}
		if (st == LEASE_STALE || all_dead) {
			if (st == -EBADMSG)
				say_out(c, "upload:    marker '%s', no lease (an older ckptfs's), taken as "
				       "left by a node that died (--force): %s",
				       key, c->o->dry_run ? "would remove" : "removed");
			else
				say_out(c, "upload:    marker '%s' of %s, not renewed since %s (expiry "
				       "%" PRId64 " s), taken as left by a node that died%s: %s", key,
				       lease_describe(&l, held, sizeof(held)),
				       lease_time(l.renewed_ns, when, sizeof(when)), l.expiry_s,
				       st == LEASE_STALE ? "" : " (--force)",
				       c->o->dry_run ? "would remove" : "removed");
			if (!c->o->dry_run && (rc = gc_delete(c, g, key)) < 0)
				return rc;
			g->markers++;
			continue;
		}
		blocking++;
		if (c->o->dry_run)
			say_out(c, "blocked:   a node is publishing ('%s'): a gc now would remove nothing",
			       key);
		else if (st == -EBADMSG)
			say(c, RGC_BLOCKED, "a node is publishing ('%s', a marker of an older ckptfs, with no "
				"time): nothing removed; run again once its upload ends, or with --force "
				"if that node died in it", key);
		else
			say(c, RGC_BLOCKED, "a node is publishing ('%s', %s): nothing removed; run again once its "
				"upload ends, or with --force if that node died in it (else its marker "
				"lapses %" PRId64 " s after %s)", key,
				lease_describe(&l, held, sizeof(held)), l.expiry_s,
				lease_time(l.renewed_ns, when, sizeof(when)));
	}
	c->nkeys = 0;
	return blocking;
}

/* The manifests and dirs/ objects of the doomed steps: removed under the lease (or, full,
 * without it: protocol 4), or with c->o->dry_run listed. Leaves c->keys holding the listing of
 * manifests/. Returns 0, -ESTALE, or the remote's -errno (said). */
static int doomed_manifests(struct rgc *c, struct rgc_tally *g)
{
	int rc;

	c->nkeys = 0;
	if ((rc = remote_list(c->r, "manifests/", rgc_key_cb, c)) < 0) {
		say_err(c, "cannot list the remote's manifests: %s", strerror(-rc));
		return rc;
	}
	for (size_t i = 0; i < c->nkeys; i++) {
		struct rgc_step *d;
		int kind;
		int64_t step;

		if (!key_step(c->keys[i], &kind, &step) || !(d = doomed_at(c, kind, step)))
			continue;
		if (c->o->dry_run)
			say_out(c, "would remove: %s", c->keys[i]);
		else if ((rc = gc_delete(c, g, c->keys[i])) < 0)
			return rc;
		g->manifests++;
		d->hit = true;
	}
	for (size_t i = 0; i < c->ndoomed; i++) {
		char key[REMOTE_KEY_MAX + 1];

		snprintf(key, sizeof(key), "dirs/%s", c->doomed[i].name);
		if ((rc = remote_head(c->r, key, NULL)) == -ENOENT)
			continue;
		if (rc < 0) {
			say_err(c, "cannot read the remote's '%s': %s", key, strerror(-rc));
			return rc;
		}
		if (c->o->dry_run)
			say_out(c, "would remove: %s", key);
		else if ((rc = gc_delete(c, g, key)) < 0)
			return rc;
		g->dirs++;
		c->doomed[i].hit = true;
	}
	/* a step chosen from manifests another gc removed since is not this gc's to count */
	g->steps = 0;
	for (size_t i = 0; i < c->ndoomed; i++)
		g->steps += c->doomed[i].hit;
	return 0;
}

/*
 * Remove the takeover claims (RGC_CLAIM_PREFIX) that gcs which died after claiming left behind,
 * while this gc holds gc/lease (protocol 3). A claim holds the lease of the gc that wrote it,
 * as it was when written and never renewed; its key names the lease taken over, created before
 * that lapsed, so the key says nothing of the taker's age. A claim goes when its own lease was
 * written longer than LEASE_GC_EXPIRY_S ago (and its own expiry_s, if longer): a taker still
 * alive that long after claiming has either given gc/lease up or lost it, and gc/lease is this
 * gc's now, so a taker of the lease the claim names finds gc/lease changed when it reads it
 * back (claim_takeover) whether the claim is there or not. This gc's own claim, a claim of the
 * lease it holds, and a claim that is no lease (age unknown) stay. Each removal is said.
 * Returns 0 (a claim that cannot be listed or removed is said and counted in g->errors: the
 * pass goes on), or -ESTALE or -ECANCELED (rgc_keep).
 */
static int old_claims(struct rgc *c, struct rgc_tally *g)
{
	char mine[REMOTE_KEY_MAX + 1], held[256], when[32];
	int rc;

	if (!c->hold.held)
		return 0;
	claim_key(&c->hold.mine, mine, sizeof(mine));
	c->nkeys = 0;
	if ((rc = rgc_keep(c)) < 0)
		return rc;
	if ((rc = remote_list(c->r, RGC_CLAIM_PREFIX, rgc_key_cb, c)) < 0) {
		say_err(c, "cannot list the remote's '%s': %s", RGC_CLAIM_PREFIX, strerror(-rc));
		g->errors++;
		return 0;
	}
	for (size_t i = 0; i < c->nkeys; i++) {
		const char *key = c->keys[i];
		int64_t now = lease_now_ns(), expiry_s;
		struct lease l;
		int st;

		if (strcmp(key, c->hold.claim) == 0 || strcmp(key, mine) == 0)
			continue;
		if ((rc = rgc_keep(c)) < 0)
			return rc;
		st = lease_read(c->r, key, now, &l);
		if (st == LEASE_ABSENT || st == -EBADMSG || st == LEASE_LIVE)
			continue;
		if (st < 0) {
			say_err(c, "cannot read the remote's '%s': %s", key, strerror(-st));
			g->errors++;
			continue;
		}
		expiry_s = l.expiry_s > LEASE_GC_EXPIRY_S ? l.expiry_s : LEASE_GC_EXPIRY_S;
		if (now <= l.renewed_ns || (uint64_t)now - (uint64_t)l.renewed_ns <=
						   (uint64_t)expiry_s * NS_PER_S)
			continue;
		if ((rc = gc_delete(c, g, key)) == -ESTALE || rc == -ECANCELED)
			return rc;
		if (rc == 0) {
			say_out(c, "claim:     '%s' of %s, written %s (expiry %" PRId64 " s), "
			       "left by a gc that died: removed", key,
			       lease_describe(&l, held, sizeof(held)),
			       lease_time(l.renewed_ns, when, sizeof(when)), expiry_s);
			g->claims++;
		}
	}
	return 0;
}

struct chunk_pass {
	struct rgc *c;
	struct rgc_tally *g;
};

/* remote_list_fn over chunks/: each chunk no kept manifest names is removed (listed with
 * dry_run). Returns 0, or -ESTALE or -ECANCELED (stops the listing). */
static int gc_chunk_cb(const char *key, uint64_t size, void *arg)
{
	struct chunk_pass *p = arg;
	int rc;

	/* a listing of 10^6 chunks takes minutes even when none goes: renew meanwhile */
	if ((rc = rgc_keep(p->c)) < 0)
		return rc;
	p->c->chunks++;
	p->c->chunk_bytes += size;
	if (rgc_named(p->c, key + strlen("chunks/")))
		return 0;
	if (p->c->o->dry_run) {
		say_out(p->c, "would remove: %s (%" PRIu64 " bytes)", key, size);
	} else if ((rc = gc_delete(p->c, p->g, key)) < 0) {
		/* one chunk that cannot go: the others still go */
		return rc == -ESTALE || rc == -ECANCELED ? rc : 0;
	}
	p->g->chunks++;
	p->g->chunk_bytes += size;
	return 0;
}

/* Protocol 6: a new gc epoch, before any chunk goes. Returns 0, or -ESTALE, -ECANCELED or the
 * remote's -errno (said). */
static int put_epoch(struct rgc *c)
{
	char v[RGC_EPOCH_MAX + 1], holder[200];
	uint64_t r = 0;
	int rc;

	if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
		r = (uint64_t)getpid() << 32 ^ (uint64_t)lease_now_ns();
	/* one line: the holder's own spaces kept, no newline in it */
	snprintf(holder, sizeof(holder), "%s", c->o->holder ? c->o->holder : "gc");
	holder[strcspn(holder, "\n")] = '\0';
	snprintf(v, sizeof(v), "%s %" PRId64 " %016" PRIx64 "\n", holder, lease_now_ns(), r);
	if ((rc = rgc_keep(c)) < 0)
		return rc;
	rc = remote_put(c->r, RGC_EPOCH_KEY, v, strlen(v));
	if (rc < 0 && c->o->force_no_lease)
		return 0; /* every node is stopped: none relies on what it sent before */
	if (rc < 0)
		say_err(c, "cannot write '%s' on the remote: %s; no chunk removed (the nodes rely on "
			"it to know a gc ran), run the gc again", RGC_EPOCH_KEY, strerror(-rc));
	return rc;
}

/* The chunks no manifest of a kept step names (c->keys: the manifests' listing). */
static int unnamed_chunks(struct rgc *c, struct rgc_tally *g)
{
	struct chunk_pass p = { c, g };
	int rc;

	c->nnamed = 0;
	c->chunks = c->chunk_bytes = 0;
	if ((rc = rgc_read_manifests(c)) == 0 && !c->o->dry_run && (rc = put_epoch(c)) < 0)
		return rc;
	if (rc == 0)
		rc = remote_list(c->r, "chunks/", gc_chunk_cb, &p);
	if (rc < 0 && rc != -ESTALE && rc != -ECANCELED)
		say_err(c, "cannot read the remote: %s", strerror(-rc));
	return rc;
}

/* Protocol 5: what a gc would do now, into *g. Returns 0 or -errno (said). */
static int gc_dry_run(struct rgc *c, struct rgc_tally *g)
{
	char held[256], when[32];
	struct lease l;
	int rc, st = lease_read(c->r, LEASE_GC_KEY, lease_now_ns(), &l);

	if (st == LEASE_LIVE)
		say_out(c, "blocked:   another gc holds '%s' (%s, last renewed %s): a gc now would "
			"wait for it", LEASE_GC_KEY, lease_describe(&l, held, sizeof(held)),
			lease_time(l.renewed_ns, when, sizeof(when)));
	else if (st == LEASE_STALE)
		say_out(c, "lease:     a gc now would take over the stale '%s' held by %s, not "
			"renewed since %s (expiry %" PRId64 " s)", LEASE_GC_KEY,
			lease_describe(&l, held, sizeof(held)),
			lease_time(l.renewed_ns, when, sizeof(when)), l.expiry_s);
	else if (st == -EBADMSG)
		say_out(c, "blocked:   '%s' is no lease this ckptctl reads: a gc now would need "
			"--force", LEASE_GC_KEY);
	else if (st < 0)
		say_err(c, "cannot read the remote's '%s': %s", LEASE_GC_KEY, strerror(-st));
	if (st < 0 && st != -EBADMSG)
		return st;
	if ((rc = check_markers(c, g, false)) < 0 || (rc = doomed_manifests(c, g)) < 0 ||
	    (rc = unnamed_chunks(c, g)) < 0)
		return rc;
	return 0;
}

/* Protocol 4: the lease does not fit; make room without it, then take it. Returns take_lease's
 * result, or -ESTALE or the remote's -errno (said). */
static int take_lease_full(struct rgc *c, struct rgc_tally *g, int why)
{
	int rc = doomed_manifests(c, g);

	if (rc < 0)
		return rc;
	if (g->manifests + g->dirs > 0) {
		say_out(c, "full:      the remote is full (%s): removed %" PRIu64 " manifests and %" PRIu64
		       " step directories of dropped steps without the lease, to make room for it",
		       strerror(-why), g->manifests, g->dirs);
		rc = take_lease(c, c->o->force);
		if (rc != -ENOSPC && rc != -EDQUOT)
			return rc;
		why = rc;
	}
	say_err(c, "the remote is full (%s): cannot write the gc's lease '%s'%s; stop ckptfs on every "
		"node (so that none uploads), then run 'ckptctl %s remote gc --force-no-lease'",
		strerror(-why), LEASE_GC_KEY,
		g->manifests + g->dirs ? " even after removing the dropped steps' manifests"
				       : ", and no dropped step's manifest is there to remove first",
		c->o->root);
	return why;
}

int rgc_run(struct rgc *c, struct rgc_tally *ret_tally)
{
	const struct rgc_opts *o = c->o;
	struct rgc_tally *g = ret_tally;
	int rc;

	*g = (struct rgc_tally){ 0 };
	if (o->dry_run)
		return gc_dry_run(c, g);
	if (o->force_no_lease) {
		say_out(c, "lease:     none taken (--force-no-lease): ckptfs must be stopped on "
			"every node");
	} else {
		rc = take_lease(c, o->force);
		if (rc == -ENOSPC || rc == -EDQUOT)
			rc = take_lease_full(c, g, rc);
		if (rc < 0)
			return rc;
		say(c, RGC_HELD, "took the lease '%s'", LEASE_GC_KEY);
	}
	if ((rc = check_markers(c, g, o->force || o->force_no_lease)) != 0) {
		release_lease(c);
		return rc > 0 ? -EAGAIN : rc;
	}
	if ((rc = old_claims(c, g)) == 0 && (rc = doomed_manifests(c, g)) == 0)
		rc = unnamed_chunks(c, g);
	release_lease(c);
	if (rc < 0 && rc != -ESTALE && rc != -ECANCELED)
		say_err(c, "gc stopped: %s; what it removed is not needed by any kept step, run it "
			"again", strerror(-rc));
	return rc;
}

void rgc_release(struct rgc *c)
{
	if (!c)
		return;
	free(c->steps);
	free(c->keys);
	free(c->named);
	free(c->doomed);
	c->steps = NULL;
	c->keys = NULL;
	c->named = NULL;
	c->doomed = NULL;
	c->nsteps = c->nkeys = c->nnamed = c->ndoomed = 0;
	c->capsteps = c->capkeys = c->capnamed = c->capdoomed = 0;
}
