/*
 * node_ahead.c — sending ahead the chunks of the step being saved here (node_int.h
 * node_send_ahead): at every publish pass (50-200 ms, node.c node_main) the chunks of its files
 * durable already go to the remote beside the save, so that once the step is complete its
 * publish puts only its manifest, relying on them without a HEAD unless a gc ran meanwhile
 * (node_publish.c; rgc.h protocol 6, the gc epoch).
 *
 * A pass costs what changed since the last one, not what the step holds: it reads the index
 * under fs->mu, which the trainer's FUSE requests wait for, and a node's part of a step is tens
 * of thousands of chunks. Every file whose chunks all went ahead is remembered with a marker of
 * its content (struct node_ahead_file); a pass walks the step's tree (an inode row per file,
 * node_part_walk) and reads the extents of the files whose marker changed only. No manifest is
 * built and no version hashed: that is the publish's (node_manifest_json).
 *
 * Invariants:
 *   1. Only durable chunks are sent: the extents of a file in the index name chunks made durable
 *      before the transaction that recorded them (oi_commit.c: store_sync, then the index).
 *   2. n->ahead_done holds files of step row n->ahead_row only, sorted by inode number, each with
 *      the marker it had when every chunk its extents then named was sent or found on the
 *      remote and added to n->sent; emptying n->sent (a gc epoch that changed, a trusted set
 *      started) forgets them too. Inode numbers are never reused (idx_inode_create), so an
 *      entry never stands for another file. The set may drop digests as it grows (sent_add):
 *      those chunks get a HEAD at the publish.
 *   3. A file's marker (size, mtime_ns, ctime_ns, whole-file digest) changes whenever its
 *      extents do: idx_file_set_content, their one writer while mounted, sets the digest of the
 *      new content and the mtime (the ctime no older). A marker that stays while the extents
 *      change (the same bytes cut otherwise, under a time set back by utimensat) costs a chunk
 *      sent with the publish rather than ahead, nothing else.
 *   4. fs->mu is never held across a request to the remote; n->mu is taken under it for the
 *      counters only (node.c invariant 3).
 *
 * Nothing here needs to be durable or complete: the publish of the step looks at every chunk not
 * in n->sent (a HEAD each), and at every one if the gc epoch changed, so a chunk missed ahead
 * only goes later. A torn save leaves chunks that no manifest names, which the remote's gc
 * removes. No upload marker: a gc may remove a chunk sent ahead meanwhile, which changes the
 * epoch, and the publish then sends it again.
 *
 * Node thread only (node_ahead_metrics: any thread, n->mu held).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/core/lockrank.h"
#include "fs/node/node_int.h"
#include "fs/node/rgc.h"

/* Most digests kept of the chunks sent ahead (sent_add): 16 MiB of them, far more than a step in
 * flight has; past it the set starts empty again (a HEAD more per chunk). */
#define NODE_SENT_MAX (1u << 20)

/* A file of the step being saved and the marker of its content when a pass found it
 * (invariant 3). */
struct node_ahead_file {
	uint64_t ino;
	uint64_t size; /* bytes */
	int64_t mtime_ns, ctime_ns;
	uint8_t hash[IDX_HASH_LEN]; /* XXH3-128 of the whole content; zeros without has_hash */
	bool has_hash;
};

/* One pass (node_send_ahead): what its walk found, fs->mu held. */
struct ahead_pass {
	const struct node_ahead_file *done; /* borrowed: n->ahead_done */
	size_t ndone;
	struct node_ahead_file *same; /* owned: files whose marker is the one in done */
	size_t nsame, capsame;
	struct node_ahead_file *changed; /* owned: the others, their extents read */
	size_t nchanged, capchanged;
	struct node_chunk *v; /* owned: the chunks the changed files' extents name */
	size_t nv, capv;
};

/* n->sent, the digests sent ahead: an open-addressing set, emptied when half full. */
bool node_sent_has(const struct node *n, const uint8_t *h)
{
	uint64_t k;

	if (!n->sent_cap)
		return false;
	memcpy(&k, h, sizeof(k));
	for (size_t i = k & (n->sent_cap - 1);; i = (i + 1) & (n->sent_cap - 1)) {
		if (!n->sent_used[i])
			return false;
		if (memcmp(n->sent[i].b, h, STORE_HASH_LEN) == 0)
			return true;
	}
}

static void sent_add(struct node *n, const uint8_t *h)
{
	uint64_t k;

	if (n->sent_n + 1 > n->sent_cap / 2) {
		size_t cap = n->sent_cap ? n->sent_cap : 1024;

		if (n->sent_cap && n->sent_cap < NODE_SENT_MAX)
			cap = n->sent_cap * 2;
		/* rehashing is not worth it: a set of what was sent ahead only saves HEADs */
		free(n->sent);
		free(n->sent_used);
		n->sent = calloc(cap, sizeof(*n->sent));
		n->sent_used = calloc(cap, sizeof(*n->sent_used));
		n->sent_n = 0;
		n->sent_cap = n->sent && n->sent_used ? cap : 0;
		if (!n->sent_cap)
			return;
	}
	memcpy(&k, h, sizeof(k));
	for (size_t i = k & (n->sent_cap - 1);; i = (i + 1) & (n->sent_cap - 1)) {
		if (n->sent_used[i] && memcmp(n->sent[i].b, h, STORE_HASH_LEN) == 0)
			return;
		if (!n->sent_used[i]) {
			memcpy(n->sent[i].b, h, STORE_HASH_LEN);
			n->sent_used[i] = true;
			n->sent_n++;
			return;
		}
	}
}

/* Empty n->sent, the digests sent ahead. */
static void sent_empty(struct node *n)
{
	if (n->sent_cap)
		memset(n->sent_used, 0, n->sent_cap * sizeof(*n->sent_used));
	n->sent_n = 0;
}

/* Forget every chunk sent ahead, and so the files remembered as sent (invariant 2). */
static void sent_clear(struct node *n)
{
	sent_empty(n);
	node_ahead_forget(n);
}

/* The gc epoch (rgc.h protocol 6) into buf (cap bytes, NUL-terminated): "" when no gc has
 * written one. Returns 0, or the remote's -errno (-EFBIG: not an epoch this ckptfs wrote). */
static int read_epoch(struct node *n, char *buf, size_t cap)
{
	struct remote_call call = { .max_len = cap - 1 };
	void *v = NULL;
	size_t len = 0;
	int rc = remote_get_with(n->r, RGC_EPOCH_KEY, &call, &v, &len);

	buf[0] = '\0';
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	memcpy(buf, v, len);
	buf[len] = '\0';
	free(v);
	return 0;
}

/*
 * Before chunks go ahead: unless the chunks sent are trusted already, read the gc epoch, then
 * the gc lease; with no live lease (absent, or stale: a dead gc's removals have landed,
 * protocol 2), start a trusted set (rgc.h protocol 6), empty. Two GETs per pass while a gc
 * holds the lease, none once trusted. Returns whether it emptied the set.
 */
static bool sent_trust_begin(struct node *n)
{
	char e[RGC_EPOCH_MAX + 1];
	struct lease gc;
	int st;

	if (n->sent_trusted || read_epoch(n, e, sizeof(e)) < 0)
		return false;
	st = lease_read(n->r, LEASE_GC_KEY, lease_now_ns(), &gc);
	if (st != LEASE_ABSENT && st != LEASE_STALE)
		return false;
	sent_empty(n);
	snprintf(n->sent_epoch, sizeof(n->sent_epoch), "%s", e);
	n->sent_trusted = true;
	return true;
}

bool node_sent_trust_end(struct node *n)
{
	char e[RGC_EPOCH_MAX + 1];

	if (!n->sent_trusted)
		return false;
	if (read_epoch(n, e, sizeof(e)) == 0 && strcmp(e, n->sent_epoch) == 0)
		return true;
	n->sent_trusted = false;
	sent_clear(n);
	return false;
}

static int file_cmp(const void *a, const void *b)
{
	const struct node_ahead_file *x = a, *y = b;

	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static bool same_marker(const struct node_ahead_file *x, const struct node_ahead_file *y)
{
	return x->size == y->size && x->mtime_ns == y->mtime_ns && x->ctime_ns == y->ctime_ns &&
	       x->has_hash == y->has_hash && memcmp(x->hash, y->hash, sizeof(x->hash)) == 0;
}

static int file_add(struct node_ahead_file **v, size_t *cap, size_t *n,
		    const struct node_ahead_file *f)
{
	if (ckpt_grow(v, cap, *n, sizeof(**v)) < 0)
		return -ENOMEM;
	(*v)[(*n)++] = *f;
	return 0;
}

/* node_file_fn of a pass: file ino into p->same when its marker is the one remembered, else
 * into p->changed with its extents' chunks into p->v (invariant 3). fs->mu held. */
static int ahead_file(struct ckfs *fs, const char *path, uint64_t ino, void *arg)
{
	struct ahead_pass *p = arg;
	struct node_ahead_file f = { .ino = ino };
	const struct node_ahead_file *d;
	struct idx_extent *ext = NULL;
	struct idx_inode a;
	size_t n = 0;
	int rc;

	(void)path;
	if ((rc = idx_inode_get(fs->ix, ino, &a)) < 0)
		return rc;
	if (a.flags & IDX_INODE_FOREIGN)
		return 0; /* shown from another node's manifest: its part, not ours */
	f.size = a.size;
	f.mtime_ns = a.mtime_ns;
	f.ctime_ns = a.ctime_ns;
	f.has_hash = a.has_hash;
	if (a.has_hash)
		memcpy(f.hash, a.hash, sizeof(f.hash));
	d = p->ndone ? bsearch(&f, p->done, p->ndone, sizeof(*p->done), file_cmp) : NULL;
	if (d && same_marker(d, &f))
		return file_add(&p->same, &p->capsame, &p->nsame, &f) < 0 ? -ENOMEM : 1;
	if ((rc = idx_file_extents(fs->ix, ino, &ext, &n)) < 0)
		return rc;
	for (size_t i = 0; i < n; i++) {
		if (ckpt_grow(&p->v, &p->capv, p->nv, sizeof(*p->v)) < 0) {
			free(ext);
			return -ENOMEM;
		}
		memcpy(p->v[p->nv].h.b, ext[i].hash, STORE_HASH_LEN);
		p->v[p->nv++].len = ext[i].length;
	}
	free(ext);
	return file_add(&p->changed, &p->capchanged, &p->nchanged, &f) < 0 ? -ENOMEM : 1;
}

void node_ahead_forget(struct node *n)
{
	free(n->ahead_done);
	n->ahead_done = NULL;
	n->nahead_done = 0;
	n->ahead_row = 0;
}

void node_ahead_free(struct node *n)
{
	node_ahead_forget(n);
	free(n->sent);
	free(n->sent_used);
	n->sent = NULL;
	n->sent_used = NULL;
	n->sent_n = n->sent_cap = 0;
}

/*
 * The files of pass p become n->ahead_done (invariant 2): those found the same unless the set
 * of chunks sent was emptied meanwhile (fresh: they are described again at the next pass),
 * and, when their chunks all went (sent), those that changed. p's arrays are taken or freed.
 */
static void ahead_remember(struct node *n, struct ahead_pass *p, bool fresh, bool sent)
{
	struct node_ahead_file *v = p->same;
	size_t nv = fresh ? 0 : p->nsame;

	if (sent && p->nchanged) {
		v = realloc(p->same, (nv + p->nchanged) * sizeof(*v));
		if (v) {
			memcpy(v + nv, p->changed, p->nchanged * sizeof(*v));
			nv += p->nchanged;
		} else {
			v = p->same; /* the changed files are described again at the next pass */
		}
	}
	if (nv)
		qsort(v, nv, sizeof(*v), file_cmp);
	free(n->ahead_done);
	n->ahead_done = v;
	n->nahead_done = nv;
	free(p->changed);
	free(p->v);
}

bool node_send_ahead(struct node *n, const struct idx_step *s)
{
	struct ahead_pass p = { 0 };
	size_t count = 0;
	bool fresh;
	int rc;

	if (s->id != n->ahead_row) {
		node_ahead_forget(n); /* another step is being saved: its files are others */
		n->ahead_row = s->id;
	}
	p.done = n->ahead_done;
	p.ndone = n->nahead_done;
	ckpt_lock(&n->fs->mu, CKPT_RANK_FS);
	idx_hold(n->fs->ix); /* one read transaction for the walk, not one per row */
	rc = node_part_walk(n->fs, s, NULL, ahead_file, &p);
	idx_unhold(n->fs->ix);
	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	n->ahead_passes++;
	n->ahead_files += p.nchanged;
	n->ahead_extents += p.nv;
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	ckpt_unlock(&n->fs->mu, CKPT_RANK_FS);
	if (rc < 0) {
		/* out of memory, an index error, a tree too deep: what was remembered stays and
		 * the next pass looks again; the publish sends what this one did not */
		free(p.same);
		free(p.changed);
		free(p.v);
		return false;
	}
	/* the gc epoch read before the first chunk goes (rgc.h protocol 6) */
	fresh = p.nv && sent_trust_begin(n);
	/* the chunks not sent ahead yet, in place: a file committed again, or a chunk two files
	 * share, is mostly sent already */
	for (size_t i = 0; i < p.nv; i++)
		if (!node_sent_has(n, p.v[i].h.b))
			p.v[count++] = p.v[i];
	if (count && (rc = node_send_chunks(n, p.v, count)) < 0)
		ckpt_log("cannot send the chunks of step '%s' ahead of its completion: %s; they go "
			 "with its publish", s->name, strerror(-rc));
	for (size_t i = 0; rc == 0 && i < count; i++)
		sent_add(n, p.v[i].h.b);
	ahead_remember(n, &p, fresh, rc == 0);
	return count > 0;
}

void node_ahead_metrics(const struct node *n, struct ckpt_text *p)
{
	prom_family(p, "ckptfs_remote_ahead_passes_total", "counter",
		    "Publish passes that sent ahead the chunks of a step being saved here.");
	prom_u64(p, "ckptfs_remote_ahead_passes_total", NULL, NULL, n->ahead_passes);
	prom_family(p, "ckptfs_remote_ahead_described_total", "counter",
		    "Files and extents those passes described under the daemon's lock, which the "
		    "trainer's requests wait for: the files whose content changed since the pass "
		    "before.");
	prom_u64(p, "ckptfs_remote_ahead_described_total", "what", "files", n->ahead_files);
	prom_u64(p, "ckptfs_remote_ahead_described_total", "what", "extents", n->ahead_extents);
}
