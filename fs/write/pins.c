/*
 * pins.c — chunk pins: a counted set of digests that writes in progress have put into the store
 * but not yet committed to the index. A chunk whose index row is dropped (its last file went away)
 * keeps its file while pinned, so a concurrent writer that found the chunk already stored (and so
 * skipped writing it) never loses it.
 *
 * Invariant: the decision "unpinned, so delete the file" and the pin taken before a put's
 * existence check are serialised by pins.mu, so a put either sees the file deleted (and writes it
 * again) or its pin prevents the delete.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/core/lockrank.h"
#include "fs/write/write.h"

#define PIN_BUCKETS 4096

struct pin {
	struct store_hash h;
	unsigned count;
	struct pin *next;
};

struct pins {
	pthread_mutex_t mu; /* last in the lock order */
	struct pin *b[PIN_BUCKETS];
};

static unsigned bucket(const struct store_hash *h)
{
	return ((unsigned)h->b[14] << 8 | h->b[15]) % PIN_BUCKETS;
}

struct pins *pins_new(void)
{
	struct pins *p = calloc(1, sizeof(*p));

	if (p)
		pthread_mutex_init(&p->mu, NULL);
	return p;
}

int pins_start(struct ckfs *fs)
{
	fs->wr.pins = pins_new();
	return fs->wr.pins ? 0 : -ENOMEM;
}

void pins_free(struct pins *p)
{
	if (!p)
		return;
	for (unsigned i = 0; i < PIN_BUCKETS; i++) {
		while (p->b[i]) {
			struct pin *n = p->b[i]->next;

			free(p->b[i]);
			p->b[i] = n;
		}
	}
	pthread_mutex_destroy(&p->mu);
	free(p);
}

static struct pin **pin_slot(struct pins *p, const struct store_hash *h)
{
	struct pin **pp = &p->b[bucket(h)];

	while (*pp && memcmp((*pp)->h.b, h->b, STORE_HASH_LEN) != 0)
		pp = &(*pp)->next;
	return pp;
}

void pins_chunk_unpin(struct ckfs *fs, const struct store_hash *h)
{
	struct pins *p = fs->wr.pins;
	struct pin **pp, *dead;

	ckpt_lock(&p->mu, CKPT_RANK_PINS);
	pp = pin_slot(p, h);
	if (*pp && --(*pp)->count == 0) {
		dead = *pp;
		*pp = dead->next;
		free(dead);
	}
	ckpt_unlock(&p->mu, CKPT_RANK_PINS);
}

int pins_chunk_put(struct ckfs *fs, const void *buf, size_t len, unsigned flags,
		   struct store_chunk_info *ret)
{
	struct pins *p = fs->wr.pins;
	struct store_hash h;
	struct pin **pp;
	int rc;

	store_hash_buf(buf, len, &h);
	ckpt_lock(&p->mu, CKPT_RANK_PINS);
	pp = pin_slot(p, &h);
	if (*pp) {
		(*pp)->count++;
	} else {
		struct pin *n = calloc(1, sizeof(*n));

		if (!n) {
			ckpt_unlock(&p->mu, CKPT_RANK_PINS);
			return -ENOMEM;
		}
		n->h = h;
		n->count = 1;
		*pp = n;
	}
	ckpt_unlock(&p->mu, CKPT_RANK_PINS);

	/* never deduplicate onto a copy known to be damaged: write the chunk again, which repairs
	 * every file that shares it */
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	bool bad = idx_chunk_is_bad(fs->ix, h.b) > 0;

	if (bad)
		store_chunk_delete(fs->st, &h);
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	rc = store_chunk_put_hashed(fs->st, buf, len, &h, flags, ret);
	if (rc < 0) {
		pins_chunk_unpin(fs, &h);
		return rc;
	}
	if (bad) {
		ckpt_lock(&fs->mu, CKPT_RANK_FS);
		if (idx_begin(fs->ix) == 0 &&
		    (idx_chunk_clear_bad(fs->ix, h.b) < 0 || idx_commit(fs->ix) < 0))
			idx_rollback(fs->ix);
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
		char hex[2 * STORE_HASH_LEN + 1];

		ckpt_log("chunk '%s' was damaged on disk; written again from new "
			"data\n", store_hash_hex(&h, hex));
	}
	return rc;
}

int pins_chunk_free(struct ckfs *fs, const struct store_hash *h)
{
	struct pins *p = fs->wr.pins;
	int rc = 0;

	ckpt_lock(&p->mu, CKPT_RANK_PINS);
	if (!*pin_slot(p, h)) {
		rc = store_chunk_delete(fs->st, h);
		if (rc == -ENOENT)
			rc = 0;
	}
	ckpt_unlock(&p->mu, CKPT_RANK_PINS);
	return rc;
}

/* Digests pins_recode_idle takes from the index at a time (one query, one transaction). */
#define RECODE_BATCH 32

bool pins_recode_idle(struct ckfs *fs)
{
	uint8_t hs[RECODE_BATCH][IDX_HASH_LEN]; /* 512 bytes: the stack holds it */
	struct {
		bool ok;       /* compressed: record codec and stored below */
		uint8_t codec;
		uint32_t stored;
	} got[RECODE_BATCH];
	bool more = false;
	char hex[2 * STORE_HASH_LEN + 1];

	for (;;) {
		unsigned done = 0;
		int n, rc = 0;

		memset(got, 0, sizeof(got));
		ckpt_lock(&fs->mu, CKPT_RANK_FS);
		n = idx_chunks_with_codec(fs->ix, STORE_CODEC_DEFERRED, hs, RECODE_BATCH);
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
		if (n <= 0) {
			if (n < 0)
				ckpt_log("cannot list deferred chunks: %s; they stay "
					"uncompressed until the next mount\n", strerror(-n));
			break;
		}
		for (int i = 0; i < n; i++) {
			struct store_hash h;
			struct store_chunk_info info;

			if (wb_busy(fs->wr.wb)) {
				more = true;
				break;
			}
			memcpy(h.b, hs[i], STORE_HASH_LEN);
			rc = store_chunk_recode(fs->st, &h, &info);
			if (rc == 0) {
				got[i].ok = true;
				got[i].codec = info.codec;
				got[i].stored = (uint32_t)info.stored_size;
				done++;
			} else if (rc == -ENOENT) {
				/* freed meanwhile; a missing file of a live chunk is verify's */
			} else if (rc == -EBADMSG) {
				ckpt_lock(&fs->mu, CKPT_RANK_FS);
				if (idx_begin(fs->ix) == 0 &&
				    (idx_chunk_mark_bad(fs->ix, hs[i]) < 0 || idx_commit(fs->ix) < 0))
					idx_rollback(fs->ix);
				ckpt_unlock(&fs->mu, CKPT_RANK_FS);
				ckpt_log("chunk '%s' is damaged on disk (its bytes do not "
					"match its digest); marked bad, not compressed: run 'ckptctl "
					"STORE verify' to see which files it holds\n",
					store_hash_hex(&h, hex));
				done++; /* marked bad: no longer listed */
			} else {
				ckpt_log("cannot compress deferred chunk '%s': %s; "
					"deferred chunks stay uncompressed (readable) until the next "
					"idle period\n", store_hash_hex(&h, hex), strerror(-rc));
				break;
			}
		}
		ckpt_lock(&fs->mu, CKPT_RANK_FS);
		if (idx_begin(fs->ix) == 0) {
			int r = 0;

			for (int i = 0; i < n && r == 0; i++)
				if (got[i].ok && (r = idx_chunk_set_stored(fs->ix, hs[i], got[i].codec,
									   got[i].stored)) == -ENOENT)
					r = 0; /* freed since: nothing to record */
			if (r < 0 || idx_commit(fs->ix) < 0)
				idx_rollback(fs->ix);
		}
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
		atomic_fetch_add(&fs->wr.n_recoded, done);
		/* stop on a failure, a yield, or a batch that changed nothing (a row whose file is
		 * missing stays listed: verify reports it) */
		if (more || (rc < 0 && rc != -ENOENT && rc != -EBADMSG) || done == 0)
			break;
	}
	return more;
}
