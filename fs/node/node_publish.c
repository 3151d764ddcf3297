/*
 * node_publish.c — publishing this node's complete steps (node_int.h node_publish): each step
 * complete here and not published yet is sent, its chunks first and then its manifest, under
 * the gc protocol's upload marker (rgc.h); the chunks of a step being saved are sent ahead
 * (node_ahead.c); a step saved again here withdraws this node's earlier part.
 *
 * Keeps node.c's invariants 1 (a manifest only after its chunks) and 2 (only a step complete
 * here).
 *
 * Node thread only; takes n->mu, also under fs->mu (node.c invariant 3), and holds neither
 * while it waits on the remote.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/core/lockrank.h"
#include "fs/node/node_int.h"
#include "fs/node/rgc.h"
#include "fs/policy/policy.h"

/* Threads sending chunks at once (node_send_chunks). */
#define NODE_SENDERS 4

/* Send chunk c (from the local store) unless the remote has it. */
static int send_chunk(struct node *n, const struct node_chunk *c)
{
	char key[80], hex[2 * STORE_HASH_LEN + 1];
	void *body;
	size_t blen;
	int rc;

	snprintf(key, sizeof(key), "chunks/%s", store_hash_hex(&c->h, hex));
	if ((rc = remote_head(n->r, key, NULL)) == 0) {
		ckpt_lock(&n->mu, CKPT_RANK_NODE);
		n->chunks_there++;
		ckpt_unlock(&n->mu, CKPT_RANK_NODE);
		return 0;
	}
	if (rc != -ENOENT)
		return rc;
	if ((rc = node_encode_chunk(n, &c->h, c->len, &body, &blen)) < 0)
		return rc;
	rc = remote_put_if_absent_with(n->r, key, body, blen, &node_chunk_call);
	free(body);
	if (rc == -EEXIST)
		rc = 0; /* a replica on another node sent the same bytes first */
	if (rc == 0) {
		ckpt_lock(&n->mu, CKPT_RANK_NODE);
		n->chunks_sent++;
		n->bytes_sent += blen;
		ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	}
	return rc;
}

/* The chunks of one send (node_send_chunks), sent by NODE_SENDERS threads (send_main). */
struct send_job {
	struct node *n;
	const struct node_chunk *v; /* borrowed */
	size_t next, count;  /* next: the next chunk to send; mu */
	int rc;              /* the first failure; mu */
	pthread_mutex_t mu;
};

static void *send_main(void *arg)
{
	struct send_job *j = arg;

	for (;;) {
		const struct node_chunk *c;
		int rc;

		ckpt_lock(&j->mu, CKPT_RANK_NODE_JOB);
		if (j->rc < 0 || j->next == j->count) {
			ckpt_unlock(&j->mu, CKPT_RANK_NODE_JOB);
			return NULL;
		}
		c = &j->v[j->next++];
		ckpt_unlock(&j->mu, CKPT_RANK_NODE_JOB);
		rc = send_chunk(j->n, c);
		if (rc < 0) {
			ckpt_lock(&j->mu, CKPT_RANK_NODE_JOB);
			if (j->rc == 0)
				j->rc = rc;
			ckpt_unlock(&j->mu, CKPT_RANK_NODE_JOB);
		}
	}
}

/*
 * The manifest at key already exists: published by this node before a restart (the same
 * version of the same files) or by someone else. It counts as published only when it says what
 * this node would write (text); anything else is replaced. Returns 0 or the remote's -errno.
 */
static int manifest_there(struct node *n, const char *key, const char *text)
{
	struct node_part mine, theirs;
	char err[256];
	size_t len;
	void *buf;
	int rc = remote_get(n->r, key, &buf, &len);

	if (rc == -ENOENT)
		return remote_put_if_absent(n->r, key, text, strlen(text));
	if (rc < 0)
		return rc;
	rc = node_manifest_parse(text, strlen(text), &mine, err, sizeof(err));
	if (rc == 0 && node_manifest_parse(buf, len, &theirs, err, sizeof(err)) == 0 &&
	    strcmp(mine.node, theirs.node) == 0 && strcmp(mine.version, theirs.version) == 0 &&
	    mine.sealed == theirs.sealed && mine.nodes == theirs.nodes && mine.step == theirs.step &&
	    mine.kind == theirs.kind && strcmp(mine.name, theirs.name) == 0) {
		free(buf);
		return 0;
	}
	free(buf);
	ckpt_log("remote manifest '%s' holds something else than this node's part; replaced",
		 key);
	return remote_put(n->r, key, text, strlen(text));
}

int node_send_chunks(struct node *n, const struct node_chunk *v, size_t count)
{
	struct send_job job = { .n = n, .v = v, .count = count };

	pthread_mutex_init(&job.mu, NULL);
	/* the node thread sends too: NODE_SENDERS requests in flight in all */
	store_parallel(count < NODE_SENDERS ? (unsigned)count : NODE_SENDERS, send_main, &job);
	pthread_mutex_destroy(&job.mu);
	return job.rc;
}

/* Every chunk manifest m names, sent (node_send_chunks); trusted (node_sent_trust_end): not
 * those sent ahead, counted in chunks_trusted (rgc.h protocol 6). Returns 0, -EBADMSG (an
 * extent that is no [offset, length, digest]), -ENOMEM, or the first failure's -errno. */
static int send_manifest_chunks(struct node *n, json_t *m, bool trusted)
{
	struct node_chunk *v = NULL;
	size_t i, j, count = 0, cap = 0, relied = 0;
	json_t *f, *x;
	int rc = 0;

	json_array_foreach(json_object_get(m, "files"), i, f)
	{
		json_array_foreach(json_object_get(f, "extents"), j, x)
		{
			const char *hex = json_string_value(json_array_get(x, 2));

			if (ckpt_grow(&v, &cap, count, sizeof(*v)) < 0) {
				rc = -ENOMEM;
				goto out;
			}
			if (!hex || store_hash_parse(hex, &v[count].h) < 0) {
				rc = -EBADMSG;
				goto out;
			}
			if (trusted && node_sent_has(n, v[count].h.b)) {
				relied++;
				continue;
			}
			v[count++].len = (size_t)json_integer_value(json_array_get(x, 1));
		}
	}
	if (relied) {
		ckpt_lock(&n->mu, CKPT_RANK_NODE);
		n->chunks_trusted += relied;
		ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	}
	rc = node_send_chunks(n, v, count);
out:
	free(v);
	return rc;
}

/* Every chunk of manifest m (every one looked at again, since a gc may have removed one sent
 * ahead, before this upload's marker; unless trusted: rgc.h protocol 6), then m itself
 * (invariant 1). began: when upload_begin put this upload's marker (ckpt_mono_ns).
 * Returns 0 (published), 1 (the chunks took longer than half the marker's expiry: m not
 * written, start over), or the remote's -errno. */
static int publish_one(struct node *n, const struct idx_step *s, json_t *m, int64_t began,
		       bool trusted)
{
	char key[REMOTE_KEY_MAX + 1], *text;
	int rc = send_manifest_chunks(n, m, trusted);

	if (rc < 0)
		return rc;
	/* a gc judges the marker stale LEASE_UPLOAD_EXPIRY_S after it was put and may then have
	 * removed a chunk that a HEAD above found: past half of that, start over under a fresh
	 * marker (every chunk looked at again) rather than write a manifest naming a lost chunk */
	if (ckpt_mono_ns() - began > LEASE_UPLOAD_EXPIRY_S / 2 * 1000000000LL)
		return 1;
	if (!(text = json_dumps(m, JSON_COMPACT)))
		return -ENOMEM;
	node_manifest_key(key, sizeof(key), s->kind, policy_node_step(s), n->name,
			  json_string_value(json_object_get(m, "version")), false);
	rc = remote_put_if_absent(n->r, key, text, strlen(text));
	if (rc == -EEXIST)
		rc = manifest_there(n, key, text);
	free(text);
	return rc;
}

/*
 * Keep note, what upload_begin last saw of the gc lease, for .ckptfs/status ("" when there is
 * none). upload_begin runs at every tick while a step waits, so a note is logged and made the
 * last error (node_set_error) only when it changed; a publish then clears the last error, the
 * note stays until the lease is gone.
 */
static void gc_note(struct node *n, const char *note)
{
	bool changed, was;

	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	changed = strcmp(n->gc_note, note) != 0;
	was = n->gc_note[0] != '\0';
	snprintf(n->gc_note, sizeof(n->gc_note), "%s", note);
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	if (changed && note[0])
		node_set_error(n, "%s", note);
	else if (changed && was)
		ckpt_log("the remote's gc lease is gone: publishing");
}

/*
 * The upload side of the gc protocol (rgc.h; a node's gc or `ckptctl STORE remote gc`):
 * put the marker uploads/<node>/<kind>-<step> (key into mark, cap bytes; a lease of this node,
 * lease.h, expiring after LEASE_UPLOAD_EXPIRY_S), then read the gc's lease gc/lease. A gc puts
 * its lease first and then lists uploads/: either it sees this marker and deletes nothing, or
 * this node sees its lease and uploads nothing (S3 and a shared directory are read-after-write
 * consistent, listings included).
 * A stale lease (not renewed within its expiry: a gc that died) is ignored, so a dead gc cannot
 * stop publishing; a live one, or one that does not parse (an older ckptctl's: its age is
 * unknown), makes this node wait. Either is said in .ckptfs/status (gc_note).
 * Returns 0 (upload, then delete the marker), -EAGAIN (a gc runs: the marker is gone, try at
 * the next tick), or the remote's -errno (the marker is gone).
 */
static int upload_begin(struct node *n, const struct idx_step *s, char *mark, size_t cap)
{
	char who[NODE_NAME_MAX + 32], held[256], when[32], note[sizeof(n->gc_note)];
	const char *root = n->fs->repo->root;
	struct lease mine, gc;
	int rc;

	snprintf(mark, cap, "uploads/%s/%d-%" PRId64, n->name, s->kind, policy_node_step(s));
	snprintf(who, sizeof(who), "ckptfs node '%s'", n->name);
	lease_init(&mine, who, LEASE_UPLOAD_EXPIRY_S, lease_now_ns());
	if ((rc = lease_put(n->r, mark, &mine, false)) < 0)
		return rc;
	rc = lease_read(n->r, LEASE_GC_KEY, lease_now_ns(), &gc);
	switch (rc) {
	case LEASE_ABSENT:
		gc_note(n, "");
		return 0;
	case LEASE_STALE:
		snprintf(note, sizeof(note), "stale gc lease '%s' ignored: held by %s, not renewed "
			 "since %s (expiry %" PRId64 " s), a gc that died; the next gc (a node's, "
			 "or 'ckptctl %s remote gc') takes it over", LEASE_GC_KEY,
			 lease_describe(&gc, held, sizeof(held)),
			 lease_time(gc.renewed_ns, when, sizeof(when)), gc.expiry_s, root);
		gc_note(n, note);
		return 0;
	case LEASE_LIVE:
		snprintf(note, sizeof(note), "waiting for gc lease held by %s: publishing resumes "
			 "when that gc ends, or %" PRId64 " s after its last renewal if it dies",
			 lease_describe(&gc, held, sizeof(held)), gc.expiry_s);
		gc_note(n, note);
		rc = -EAGAIN;
		break;
	case -EBADMSG:
		snprintf(note, sizeof(note), "waiting: '%s' on the remote is no lease this ckptfs "
			 "reads (an older ckptctl's, or damaged); if no gc runs, remove it with "
			 "'ckptctl %s remote gc --force'", LEASE_GC_KEY, root);
		gc_note(n, note);
		rc = -EAGAIN;
		break;
	}
	remote_delete(n->r, mark);
	return rc;
}

struct pending {
	struct node *n;
	bool busy;                /* a save in progress, or a step just complete and not global */
	struct idx_step *v;       /* complete steps to publish (or to match to a part) */
	size_t nv, cap;
	struct node_key *w;       /* steps saved again here: withdraw this node's part */
	size_t nw, capw;
	struct idx_step ahead;    /* the newest step being saved here (node_send_ahead); id 0:
				     none */
};

static bool quiet_row(const struct node *n, int64_t id)
{
	for (size_t i = 0; i < n->nquiet; i++)
		if (n->quiet_rows[i] == id)
			return true;
	return false;
}

/* idx_step_foreach callback, fs->mu held: which steps have something to publish. */
static int pending_cb(const struct idx_step *s, void *arg)
{
	struct pending *p = arg;
	struct node *n = p->n;
	struct node_part *q;
	bool want = false, withdraw = false;
	/* MindFormers 1.0's rows have no directory: its part is its ranks' files (manifest.c) */
	bool mf1 = layout_desc(s->kind)->per_rank;
	int64_t step = policy_node_step(s);

	/* a part set aside here lately (its writers gone, never sealed: a job's last save, whose
	 * ranks exit before the claim's node publishes its seal): another node's seal brings it
	 * back (steps_seal_remote), so listen for it every tick, not at an idle node's pace */
	if (s->state == IDX_STEP_INCOMPLETE && step >= 0 &&
	    ckfs_now(n->fs) - s->state_ns < NODE_BUSY_NS) {
		ckpt_lock(&n->mu, CKPT_RANK_NODE);
		p->busy |= !node_key_in(n->global, n->nglobal, s->kind, step);
		ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	}
	if ((s->dir_ino == 0 && !mf1) || step < 0 ||
	    (s->state != IDX_STEP_COMPLETE && s->state != IDX_STEP_WRITING &&
	     s->state != IDX_STEP_SEALED))
		return 0;
	if (s->state != IDX_STEP_COMPLETE) {
		p->busy = true; /* a save in progress here */
	} else if (ckfs_now(n->fs) - s->completed_ns < NODE_BUSY_NS) {
		ckpt_lock(&n->mu, CKPT_RANK_NODE); /* just complete here: busy until it is global */
		p->busy |= !node_key_in(n->global, n->nglobal, s->kind, step);
		ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	}
	if (s->state == IDX_STEP_COMPLETE && (quiet_row(n, s->id) ||
					      steps_version_shadowed(n->fs, s) ||
					      steps_version_superseded(n->fs, s)))
		return 0;
	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	q = node_find_part(n, n->name, s->kind, step);
	if (s->state != IDX_STEP_COMPLETE && s->id > p->ahead.id)
		p->ahead = *s;
	if (s->state != IDX_STEP_COMPLETE) {
		/* a save of the step in progress here: the other nodes' parts known now are of an
		 * earlier save (theirs of this one are published after its claim, which comes after
		 * this node's files, so after this row); this node's part of an earlier save goes.
		 * Not for MindFormers 1.0, which has no barrier: another node's ranks may have
		 * saved and claimed the step before this node's ranks began it */
		size_t lo, hi;

		node_step_range(n, s->kind, step, &lo, &hi);
		for (size_t i = lo; i < hi && !mf1; i++)
			if (n->parts[i].learnt_ns < s->created_ns && !n->parts[i].stale &&
			    strcmp(n->parts[i].node, n->name) != 0) {
				n->parts[i].stale = true;
				node_recompute_step(n, s->kind, step);
				node_key_del(n->shown, &n->nshown, s->kind, step);
				node_key_del(n->unlisted, &n->nunlisted, s->kind, step);
			}
		withdraw = q && q->row_id != s->id;
		/* a step being written (not sealed) that this node sealed from another node's
		 * seal: that seal was of an earlier save (a row set aside since); this save takes
		 * the seal of its own claim */
		if (s->state == IDX_STEP_WRITING)
			node_key_del(n->sealed_here, &n->nsealed, s->kind, step);
	} else {
		want = (!q || q->row_id != s->id) && !node_gc_dooms(n, s->kind, step);
		/* MindFormers 1.0: a rank of this node that had written nothing yet when the step
		 * completed here (steps_mf1.c mf1_ranks) lands its file after it: looked at again
		 * (publish compares the versions) until the step is global and shown, for as long
		 * as a save's ranks take */
		if (mf1 && !want && ckfs_now(n->fs) - s->completed_ns < NODE_BUSY_NS &&
		    !(node_key_in(n->global, n->nglobal, s->kind, step) &&
		      node_key_in(n->shown, n->nshown, s->kind, step)))
			want = true;
	}
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	if (withdraw && ckpt_grow(&p->w, &p->capw, p->nw, sizeof(*p->w)) == 0)
		p->w[p->nw++] = (struct node_key){ s->kind, step };
	if (want) {
		if (ckpt_grow(&p->v, &p->cap, p->nv, sizeof(*p->v)) < 0)
			return -ENOMEM;
		p->v[p->nv++] = *s;
	}
	return 0;
}

/* This node saves step k again: its published part (an earlier save) leaves the remote, so
 * that no node pairs it with the other nodes' parts of the new save. */
static void withdraw(struct node *n, const struct node_key *k)
{
	char key[REMOTE_KEY_MAX + 1] = "";
	struct node_part *q;
	int rc;

	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	if ((q = node_find_part(n, n->name, k->kind, k->step))) {
		node_manifest_key(key, sizeof(key), q->kind, q->step, q->node, q->version,
				  q->unpadded);
		node_drop_part(n, (size_t)(q - n->parts));
	}
	node_key_del(n->sealed_here, &n->nsealed, k->kind, k->step);
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	if (!key[0])
		return;
	rc = remote_delete(n->r, key);
	if (rc < 0 && rc != -ENOENT)
		node_set_error(n, "cannot withdraw '%s' (step %" PRId64 " is saved again here): %s",
			       key, k->step, strerror(-rc));
	else
		ckpt_log("step %" PRId64 " is saved again here: its earlier part '%s' withdrawn",
			 k->step, key);
}

/*
 * Publish manifest m (this node's part of step s, its chunks first; invariant 1), under the gc
 * protocol's marker, then take it as this node's part (its earlier version removed from the
 * remote). Returns 0, -EAGAIN (a gc runs), or the remote's -errno (logged, in status).
 */
int node_publish_part(struct node *n, const struct idx_step *s, json_t *m, bool sealed)
{
	struct node_part me = { .kind = s->kind, .step = policy_node_step(s), .sealed = sealed,
				.created_ns = s->created_ns, .nodes = n->nodes, .seen = true,
				.row_id = s->id, .learnt_ns = ckfs_now(n->fs) };
	char mark[REMOTE_KEY_MAX + 1], old[REMOTE_KEY_MAX + 1] = "";
	int64_t began = ckpt_mono_ns();
	struct node_part *q;
	int rc = upload_begin(n, s, mark, sizeof(mark));

	if (rc == -EAGAIN)
		return rc; /* a gc holds the lease: the next tick */
	if (rc == 0) {
		rc = publish_one(n, s, m, began, node_sent_trust_end(n));
		int drc = remote_delete(n->r, mark);

		if (rc == 0 && drc < 0)
			node_set_error(n, "cannot remove upload marker '%s': %s; a "
				       "'ckptctl remote gc' waits for it until it expires "
				       "(%d s)", mark, strerror(-drc), LEASE_UPLOAD_EXPIRY_S);
	}
	if (rc == 1) {
		node_set_error(n, "the upload of step '%s' took longer than %d s, half its "
			       "marker's expiry: starting over under a fresh marker, so that "
			       "no chunk a gc removed meanwhile goes missing", s->name,
			       LEASE_UPLOAD_EXPIRY_S / 2);
		return -EAGAIN;
	}
	if (rc < 0) {
		node_count_error(n, NODE_ERR_PUBLISH);
		node_set_error(n, "cannot publish step '%s' to the remote: %s; retrying", s->name,
			       strerror(-rc));
		return rc;
	}
	snprintf(me.node, sizeof(me.node), "%s", n->name);
	snprintf(me.name, sizeof(me.name), "%s", s->name);
	snprintf(me.version, sizeof(me.version), "%s",
		 json_string_value(json_object_get(m, "version")));
	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	q = node_find_part(n, n->name, s->kind, me.step);
	if (q && strcmp(q->version, me.version) != 0)
		node_manifest_key(old, sizeof(old), q->kind, q->step, q->node, q->version,
				  q->unpadded);
	if (q)
		q->created_ns = me.created_ns - 1; /* the new version replaces it (add_part) */
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	node_add_part(n, &me);
	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	n->published++;
	n->last_error[0] = '\0';
	if (s->completed_ns)
		n->upload_lag_ns = ckfs_now(n->fs) - s->completed_ns;
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	if (old[0] && (rc = remote_delete(n->r, old)) < 0 && rc != -ENOENT)
		ckpt_log("cannot remove the earlier part '%s': %s", old, strerror(-rc));
	ckpt_log("published step '%s' to the remote as node '%s'", s->name, n->name);
	return 0;
}

void node_publish(struct node *n)
{
	struct ckfs *fs = n->fs;
	struct pending p = { .n = n };

	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	idx_step_foreach(fs->ix, pending_cb, &p);
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	bool failed = false, sending = false;

	n->busy = p.busy;
	for (size_t i = 0; i < p.nw; i++)
		withdraw(n, &p.w[i]);
	if (!p.ahead.id)
		node_ahead_forget(n); /* no save here: what went ahead of the last one is done */
	else if (!node_blocked(n))
		sending = node_send_ahead(n, &p.ahead);
	for (size_t i = 0; i < p.nv && !node_blocked(n); i++) {
		const struct idx_step *s = &p.v[i];
		int64_t step = policy_node_step(s);
		bool sealed = !node_key_in(n->sealed_here, n->nsealed, s->kind, step);
		struct node_part *q;
		size_t files = 0;
		bool same;
		json_t *m;

		ckpt_lock(&fs->mu, CKPT_RANK_FS);
		m = node_manifest_json(fs, s, n->name, n->nodes, sealed, false, &files);
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
		if (!m) {
			node_set_error(n, "cannot describe step '%s' for the remote: %s", s->name,
				  strerror(EIO));
			continue;
		}
		ckpt_lock(&n->mu, CKPT_RANK_NODE);
		q = node_find_part(n, n->name, s->kind, step);
		/* the part published (before a restart), or fetched back from the remote (no file
		 * here is this node's own then: the store was lost, or the part is empty) */
		same = q && (files == 0 || strcmp(q->version,
						  json_string_value(json_object_get(m, "version"))) == 0);
		if (same)
			q->row_id = s->id;
		else if (!q && files == 0 &&
			 ckpt_grow(&n->quiet_rows, &n->capquiet, n->nquiet, sizeof(*n->quiet_rows)) == 0)
			n->quiet_rows[n->nquiet++] = s->id; /* nothing of it is this node's */
		ckpt_unlock(&n->mu, CKPT_RANK_NODE);
		if (same || files == 0) {
			json_decref(m);
			continue;
		}
		int rc = node_publish_part(n, s, m, sealed);

		json_decref(m);
		if (rc < 0) {
			failed = true;
			break; /* a gc, or the remote is down: the next tick tries again */
		}
	}
	/* busy, and this node's parts up: what comes next may be another node's, its part or
	 * the seal of a step saved here. Not while chunks still go ahead: a save is writing, and
	 * a pass every poll would walk its tree under fs->mu as often, in the writers' way */
	n->waiting = p.busy && !failed && !sending && !node_blocked(n);
	free(p.v);
	free(p.w);
}
