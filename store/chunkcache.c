/*
 * chunkcache.c — the read cache of verified chunk bytes and the buffer pool behind it: loading a
 * chunk (read, decode, digest check), sharing one load among concurrent readers, LRU eviction,
 * and the read side of store.h (store_chunk_pread, _hold, _release, _verify).
 *
 * Invariant numbers refer to the list at the top of chunkstore.c: 2, 3, 4, 7 and 9 are the ones
 * kept here. cache_lock and pool_lock are leaves; no function here takes any other store lock.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store.h"
#include "store/store_int.h"

/* ---- buffer pool (invariant 9) ---- */

/* The pool's choice of buffer: store_int.h's store_buf_get. */
uint8_t *store_buf_get(struct store *st, uint32_t len, uint32_t *ret_cap)
{
	unsigned i, best = STORE_POOL_BUFS, big = STORE_POOL_BUFS;
	uint8_t *p = NULL;
	uint32_t cap = 0;

	pthread_mutex_lock(&st->pool_lock);
	for (i = 0; i < st->npool; i++) {
		uint32_t c = st->pool[i].cap;

		if (c >= len && c / 2 <= len &&
		    (best == STORE_POOL_BUFS || c < st->pool[best].cap))
			best = i;
		if (big == STORE_POOL_BUFS || c > st->pool[big].cap)
			big = i;
	}
	if (best == STORE_POOL_BUFS && big != STORE_POOL_BUFS && st->pool[big].cap < len)
		best = big;
	if (best != STORE_POOL_BUFS) {
		p = st->pool[best].p;
		cap = st->pool[best].cap;
		st->pool[best] = st->pool[--st->npool];
		st->recycled++;
	}
	pthread_mutex_unlock(&st->pool_lock);
	if (p && cap >= len) {
		*ret_cap = cap;
		return p;
	}
	uint8_t *n = realloc(p, len); /* realloc(NULL, len) is malloc */

	if (!n) {
		free(p);
		return NULL;
	}
	*ret_cap = len;
	return n;
}

/* Give back a buffer of store_buf_get: to the pool, in place of a smaller one when it is full. */
void store_buf_put(struct store *st, uint8_t *p, uint32_t cap)
{
	unsigned i, small = 0;

	pthread_mutex_lock(&st->pool_lock);
	if (st->npool < STORE_POOL_BUFS) {
		st->pool[st->npool].p = p;
		st->pool[st->npool++].cap = cap;
		p = NULL;
	} else {
		for (i = 1; i < STORE_POOL_BUFS; i++)
			if (st->pool[i].cap < st->pool[small].cap)
				small = i;
		if (st->pool[small].cap < cap) {
			uint8_t *out = st->pool[small].p;

			st->pool[small].p = p;
			st->pool[small].cap = cap;
			p = out;
		}
	}
	pthread_mutex_unlock(&st->pool_lock);
	free(p);
}

/*
 * Load chunk h from disk as how says (store_chunk_read_whole; fetched first when missing, fetch
 * true and a fetch function set),
 * decode it and check its digest (invariants 2 and 7). On success *ret_data is a buffer of
 * store_buf_get (give it back with store_buf_put(st, data, *ret_cap)) holding *ret_size bytes.
 * Returns 0, -ENOENT, -EIO, -EBADMSG, -ENOMEM, or the fetch function's -EAGAIN.
 */
int store_chunk_load(struct store *st, const struct store_hash *h, bool fetch, unsigned how,
		     uint8_t **ret_data, uint32_t *ret_size, uint32_t *ret_cap)
{
	struct chunk_hdr hdr;
	struct store_hash got;
	uint8_t *file; /* this thread's (store_thread_buf), not freed here */
	uint8_t *data;
	uint32_t cap = 0;
	int err;

	err = store_chunk_read_whole(st, h, how, &hdr, &file);
	if (err == -ENOENT && fetch && st->fetch) {
		struct store_fetched f = { 0 };

		if ((err = st->fetch(st, h, st->fetch_arg, &f)) == 0 && f.data) {
			*ret_data = f.data; /* checked against h by store_chunk_put_object */
			*ret_size = f.size;
			*ret_cap = f.cap;
			return 0;
		}
		if (f.data) /* a fetch function that stored the chunk, then failed */
			store_buf_put(st, f.data, f.cap);
		if (err == 0)
			err = store_chunk_read_whole(st, h, how, &hdr, &file);
	}
	if (err)
		return err;
	data = store_buf_get(st, hdr.raw_size ? hdr.raw_size : 1, &cap);
	if (!data)
		return -ENOMEM;
	if (store_codec_is_raw(hdr.codec)) {
		memcpy(data, file + STORE_HDR_LEN, hdr.raw_size);
	} else {
		/* the XXH3-128 below is the check (invariant 2): zstd's own is skipped */
		err = store_decode_digested(hdr.codec, file + STORE_HDR_LEN, hdr.payload_size,
					    data, hdr.raw_size);
		if (err) {
			err = err == -ENOMEM ? -ENOMEM : -EBADMSG;
			goto fail;
		}
	}
	store_hash_buf(data, hdr.raw_size, &got);
	if (memcmp(got.b, h->b, STORE_HASH_LEN)) {
		err = -EBADMSG;
		goto fail;
	}
	*ret_data = data;
	*ret_size = hdr.raw_size;
	*ret_cap = cap;
	return 0;
fail:
	store_buf_put(st, data, cap);
	return err;
}

/* ---- cache (invariants 3 and 4) ---- */

/* Bucket of a digest in the cache table. */
static size_t cache_bucket(const struct store *st, const struct store_hash *h)
{
	uint64_t k;

	memcpy(&k, h->b + 8, sizeof(k)); /* digest bytes are uniform: any 8 of them will do */
	return (size_t)k & (st->nbuckets - 1);
}

/* Find a linked entry. Caller holds cache_lock. */
static struct cache_ent *cache_find(struct store *st, const struct store_hash *h)
{
	struct cache_ent *e;

	for (e = st->buckets[cache_bucket(st, h)]; e; e = e->hnext)
		if (!memcmp(e->hash.b, h->b, STORE_HASH_LEN))
			return e;
	return NULL;
}

/* Unlink e from the LRU list. Caller holds cache_lock. */
static void lru_remove(struct store *st, struct cache_ent *e)
{
	if (e->lru_prev)
		e->lru_prev->lru_next = e->lru_next;
	else
		st->lru_head = e->lru_next;
	if (e->lru_next)
		e->lru_next->lru_prev = e->lru_prev;
	else
		st->lru_tail = e->lru_prev;
	e->lru_prev = e->lru_next = NULL;
}

/* Make e the most recently used entry. Caller holds cache_lock. */
static void lru_push_head(struct store *st, struct cache_ent *e)
{
	e->lru_prev = NULL;
	e->lru_next = st->lru_head;
	if (st->lru_head)
		st->lru_head->lru_prev = e;
	else
		st->lru_tail = e;
	st->lru_head = e;
}

/* Free an entry whose last reference is gone; its buffer goes to the pool (invariant 9). */
static void ent_free(struct store *st, struct cache_ent *e)
{
	store_buf_put(st, e->data, e->cap);
	free(e);
}

/* Drop one reference; returns true when the caller must free e (outside the lock). */
static bool ent_unref_locked(struct cache_ent *e)
{
	assert(e->refs > 0);
	return --e->refs == 0;
}

/* Unlink e from table and LRU and drop the table's reference. Caller holds cache_lock. */
static bool cache_unlink_locked(struct store *st, struct cache_ent *e)
{
	struct cache_ent **pp = &st->buckets[cache_bucket(st, &e->hash)];

	assert(e->linked);
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	e->hnext = NULL;
	lru_remove(st, e);
	e->linked = false;
	st->cache_used -= e->cap;
	return ent_unref_locked(e);
}

/* Release a reference from chunk_get or cache_insert. */
static void cache_put(struct store *st, struct cache_ent *e)
{
	bool last;

	pthread_mutex_lock(&st->cache_lock);
	last = ent_unref_locked(e);
	pthread_mutex_unlock(&st->cache_lock);
	if (last)
		ent_free(st, e);
}

/*
 * Insert e (refs == 1, owned by the caller) unless an entry for its digest is already linked.
 * Returns the entry the caller now holds a reference to: e itself (now also referenced by the
 * table), or the existing one, in which case e has been freed. Evicts least recently used
 * entries until cache_used <= cache_cap. keep > 0 (the mount's check, invariant 13): e is
 * linked only when cache_used stays within keep, nothing is evicted, and e is returned unlinked
 * otherwise.
 */
static struct cache_ent *cache_insert(struct store *st, struct cache_ent *e, size_t keep)
{
	struct cache_ent *old, *victims = NULL, *v;

	pthread_mutex_lock(&st->cache_lock);
	old = cache_find(st, &e->hash);
	if (old) {
		old->refs++;
		pthread_mutex_unlock(&st->cache_lock);
		ent_free(st, e);
		return old;
	}
	if (keep && st->cache_used + e->cap > keep) {
		pthread_mutex_unlock(&st->cache_lock);
		return e;
	}
	if (keep)
		st->kept++;
	e->refs++; /* the table's */
	e->linked = true;
	e->hnext = st->buckets[cache_bucket(st, &e->hash)];
	st->buckets[cache_bucket(st, &e->hash)] = e;
	lru_push_head(st, e);
	st->cache_used += e->cap;
	while (st->cache_used > st->cache_cap) {
		v = st->lru_tail;
		assert(v && v != e); /* e alone fits: chunk_get does not insert larger ones */
		if (cache_unlink_locked(st, v)) {
			v->hnext = victims;
			victims = v;
		}
	}
	pthread_mutex_unlock(&st->cache_lock);
	while (victims) {
		v = victims;
		victims = v->hnext;
		ent_free(st, v);
	}
	return e;
}

/* Drop h from the cache, if present. */
void store_cache_drop(struct store *st, const struct store_hash *h)
{
	struct cache_ent *e;
	bool last = false;

	pthread_mutex_lock(&st->cache_lock);
	e = cache_find(st, h);
	if (e)
		last = cache_unlink_locked(st, e);
	pthread_mutex_unlock(&st->cache_lock);
	if (last)
		ent_free(st, e);
}

/*
 * Get chunk h's verified bytes, through the cache. On success *ret is an entry referenced for the
 * caller (release with cache_put); it may be unlinked (too large to cache). warm (a read-ahead,
 * store_chunk_warm): a chunk in the cache or being loaded returns -EALREADY at once, without
 * counting a hit or waiting. fetch: a chunk file missing here is fetched (store_chunk_load).
 * Returns 0, -EALREADY (warm only) or the errors of store_chunk_load.
 */
static int chunk_get(struct store *st, const struct store_hash *h, struct cache_ent **ret,
		     bool warm, bool fetch)
{
	struct cache_ent *e;
	uint8_t *data;
	uint32_t size, cap;
	int err;

	struct loading me, **pp;

	pthread_mutex_lock(&st->cache_lock);
	for (;;) {
		struct loading *l;

		e = cache_find(st, h);
		if (e && warm) {
			pthread_mutex_unlock(&st->cache_lock);
			return -EALREADY;
		}
		if (e) {
			st->hits++;
			e->refs++;
			lru_remove(st, e);
			lru_push_head(st, e);
			pthread_mutex_unlock(&st->cache_lock);
			*ret = e;
			return 0;
		}
		for (l = st->loading; l && memcmp(l->hash.b, h->b, STORE_HASH_LEN); l = l->next)
			;
		if (!l)
			break;
		if (warm) {
			pthread_mutex_unlock(&st->cache_lock);
			return -EALREADY;
		}
		pthread_cond_wait(&st->load_cv, &st->cache_lock);
	}
	me.hash = *h;
	me.next = st->loading;
	st->loading = &me;
	if (warm)
		st->warmed++;
	else
		st->loads++;
	pthread_mutex_unlock(&st->cache_lock);

	err = store_chunk_load(st, h, fetch, STORE_RD_DIRECT, &data, &size, &cap);
	e = NULL;
	if (!err && !(e = calloc(1, sizeof(*e)))) {
		store_buf_put(st, data, cap);
		err = -ENOMEM;
	}
	if (!err) {
		e->hash = *h;
		e->data = data;
		e->size = size;
		e->cap = cap;
		e->refs = 1;
		if (cap <= st->cache_cap)
			e = cache_insert(st, e, 0);
	}
	pthread_mutex_lock(&st->cache_lock);
	for (pp = &st->loading; *pp != &me; pp = &(*pp)->next)
		;
	*pp = me.next;
	pthread_cond_broadcast(&st->load_cv);
	pthread_mutex_unlock(&st->cache_lock);
	if (err)
		return err;
	*ret = e;
	return 0;
}

ssize_t store_chunk_pread(struct store *st, const struct store_hash *h, void *buf, size_t len,
			  uint64_t off)
{
	struct cache_ent *e;
	size_t n;
	int err;

	err = chunk_get(st, h, &e, false, true);
	if (err)
		return err;
	n = 0;
	if (off < e->size) {
		n = e->size - (size_t)off;
		if (n > len)
			n = len;
		memcpy(buf, e->data + off, n);
	}
	cache_put(st, e);
	return (ssize_t)n;
}

int store_chunk_hold(struct store *st, const struct store_hash *h, const uint8_t **ret_data,
		     size_t *ret_size, struct store_hold **ret_hold)
{
	struct cache_ent *e;
	int err = chunk_get(st, h, &e, false, true);

	if (err)
		return err;
	*ret_data = e->data; /* immutable while referenced (invariant 3) */
	*ret_size = e->size;
	*ret_hold = (struct store_hold *)e;
	return 0;
}

size_t store_cache_bytes(const struct store *st)
{
	return st->cache_cap; /* fixed at store_open */
}

int store_chunk_warm(struct store *st, const struct store_hash *h, bool fetch)
{
	struct cache_ent *e;
	int err = chunk_get(st, h, &e, true, fetch);

	if (err == -EALREADY)
		return 0;
	if (err)
		return err;
	cache_put(st, e);
	return 0;
}

void store_chunk_release(struct store *st, struct store_hold *hold)
{
	if (hold)
		cache_put(st, (struct cache_ent *)hold);
}

void store_cache_figures(struct store *st, uint64_t *ret_hits, uint64_t *ret_loads,
			 uint64_t *ret_warmed, uint64_t *ret_recycled)
{
	pthread_mutex_lock(&st->cache_lock);
	*ret_hits = st->hits;
	*ret_loads = st->loads;
	*ret_warmed = st->warmed;
	pthread_mutex_unlock(&st->cache_lock);
	pthread_mutex_lock(&st->pool_lock);
	*ret_recycled = st->recycled;
	pthread_mutex_unlock(&st->pool_lock);
}

int store_chunk_verify(struct store *st, const struct store_hash *h)
{
	uint8_t *data;
	uint32_t size, cap;
	int err;

	err = store_chunk_load(st, h, true, STORE_RD_DIRECT, &data, &size, &cap);
	if (err)
		return err;
	store_buf_put(st, data, cap);
	return 0;
}

/* ---- the mount's check (invariant 13) ---- */

/* List h (size raw bytes) as left in the page cache by the check; a list that cannot grow just
 * misses it. */
static void primed_add(struct store *st, const struct store_hash *h, uint32_t size)
{
	pthread_mutex_lock(&st->primed_lock);
	if (st->nprimed == st->primed_cap) {
		size_t cap = st->primed_cap ? 2 * st->primed_cap : 256;
		struct store_hash *p = realloc(st->primed, cap * sizeof(*p));

		if (p) {
			st->primed = p;
			st->primed_cap = cap;
		}
	}
	if (st->nprimed < st->primed_cap) {
		st->primed[st->nprimed++] = *h;
		st->primed_added++;
		st->primed_bytes += size;
	}
	pthread_mutex_unlock(&st->primed_lock);
}

static int primed_cmp(const void *a, const void *b)
{
	return memcmp(((const struct store_hash *)a)->b, ((const struct store_hash *)b)->b,
		      STORE_HASH_LEN);
}

/* The check has ended: sort the list so that loads can look chunks up in it. */
static void primed_publish(struct store *st)
{
	pthread_mutex_lock(&st->primed_lock);
	if (st->nprimed > 1) /* qsort's base must not be NULL, even for 0 elements */
		qsort(st->primed, st->nprimed, sizeof(*st->primed), primed_cmp);
	st->primed_ready = true;
	pthread_mutex_unlock(&st->primed_lock);
}

bool store_primed_has(struct store *st, const struct store_hash *h)
{
	bool has = false;

	pthread_mutex_lock(&st->primed_lock);
	if (st->primed_ready && st->nprimed)
		has = bsearch(h, st->primed, st->nprimed, sizeof(*st->primed), primed_cmp) != NULL;
	pthread_mutex_unlock(&st->primed_lock);
	return has;
}

void store_primed_hit(struct store *st)
{
	pthread_mutex_lock(&st->primed_lock);
	st->primed_hits++;
	pthread_mutex_unlock(&st->primed_lock);
}

/*
 * The mount's check of chunk h: 0 at once when the cache holds it (read from disk and verified
 * since store_open, invariant 2); else read it, decode it and re-hash it, and keep it for the
 * reader that follows (invariant 13): linked into the cache while keep->cache_bytes has room,
 * and read through the page cache while the check has left less than keep->page_bytes there,
 * its pages left there and its digest listed. A load of h by another thread meanwhile is waited
 * for, as chunk_get does. Returns 0 or store_chunk_load's -errno.
 */
static int chunk_check(struct store *st, const struct store_hash *h,
		       const struct store_keep *keep)
{
	struct cache_ent *e = NULL;
	struct loading me, **pp;
	uint8_t *data;
	uint32_t size, cap;
	bool paged;
	int err;

	pthread_mutex_lock(&st->cache_lock);
	for (;;) {
		struct loading *l;

		if (cache_find(st, h)) {
			pthread_mutex_unlock(&st->cache_lock);
			return 0;
		}
		for (l = st->loading; l && memcmp(l->hash.b, h->b, STORE_HASH_LEN); l = l->next)
			;
		if (!l)
			break;
		pthread_cond_wait(&st->load_cv, &st->cache_lock);
	}
	me.hash = *h;
	me.next = st->loading;
	st->loading = &me;
	st->checked++;
	pthread_mutex_unlock(&st->cache_lock);
	pthread_mutex_lock(&st->primed_lock);
	paged = st->primed_bytes < keep->page_bytes;
	pthread_mutex_unlock(&st->primed_lock);

	err = store_chunk_load(st, h, true, paged ? STORE_RD_KEEP_PAGES : STORE_RD_DIRECT, &data,
			       &size, &cap);
	if (!err && keep->cache_bytes && (e = calloc(1, sizeof(*e)))) {
		e->hash = *h;
		e->data = data;
		e->size = size;
		e->cap = cap;
		e->refs = 1;
		cache_put(st, cache_insert(st, e, keep->cache_bytes)); /* unlinked: freed here */
	} else if (!err) {
		store_buf_put(st, data, cap);
	}
	/* linked or not: a linked chunk evicted before its reader gets there (read-ahead, other
	 * files) is then loaded from the page cache, not the disk */
	if (!err && paged)
		primed_add(st, h, size);
	pthread_mutex_lock(&st->cache_lock);
	for (pp = &st->loading; *pp != &me; pp = &(*pp)->next)
		;
	*pp = me.next;
	pthread_cond_broadcast(&st->load_cv);
	pthread_mutex_unlock(&st->cache_lock);
	return err;
}

void store_check_figures(struct store *st, uint64_t *ret_checked, uint64_t *ret_kept,
			 uint64_t *ret_primed, uint64_t *ret_primed_hits)
{
	pthread_mutex_lock(&st->cache_lock);
	*ret_checked = st->checked;
	*ret_kept = st->kept;
	pthread_mutex_unlock(&st->cache_lock);
	pthread_mutex_lock(&st->primed_lock);
	*ret_primed = st->primed_added;
	*ret_primed_hits = st->primed_hits;
	pthread_mutex_unlock(&st->primed_lock);
}

struct verify_job {
	struct store *st;
	const struct store_hash *hs;
	size_t n;
	const struct store_keep *keep; /* NULL: store_chunk_verify; else chunk_check's */
	int *results;
	_Atomic size_t next; /* the next entry to take */
};

static void *verify_main(void *arg)
{
	struct verify_job *j = arg;
	size_t i;

	while ((i = atomic_fetch_add(&j->next, 1)) < j->n)
		j->results[i] = j->keep ? chunk_check(j->st, &j->hs[i], j->keep)
					: store_chunk_verify(j->st, &j->hs[i]);
	return NULL;
}

void store_chunks_verify(struct store *st, const struct store_hash *hs, size_t n,
			 unsigned nthreads, const struct store_keep *keep, int *results)
{
	struct verify_job j = { .st = st, .hs = hs, .n = n, .keep = keep, .results = results };

	if (nthreads == 0) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);

		nthreads = (unsigned)(cpus > 0 && cpus < 64 ? cpus : 1) *
			   STORE_VERIFY_THREADS_PER_CPU;
	}
	if (nthreads > STORE_VERIFY_MAX_THREADS)
		nthreads = STORE_VERIFY_MAX_THREADS;
	if (nthreads > n)
		nthreads = (unsigned)n;
	atomic_init(&j.next, 0);
	if (keep) { /* the list grows unsorted until primed_publish */
		pthread_mutex_lock(&st->primed_lock);
		st->primed_ready = false;
		pthread_mutex_unlock(&st->primed_lock);
	}
	store_parallel(nthreads, verify_main, &j);
	if (keep)
		primed_publish(st);
}

int store_cache_init(struct store *st)
{
	size_t want;

	/* About two buckets per minimum-size chunk the cache can hold; chains absorb the rest. */
	want = st->cache_cap / (STORE_CHUNK_MIN / 2);
	st->nbuckets = 64;
	while (st->nbuckets < want && st->nbuckets < ((size_t)1 << 20))
		st->nbuckets <<= 1;
	st->buckets = calloc(st->nbuckets, sizeof(*st->buckets));
	return st->buckets ? 0 : -ENOMEM;
}

void store_cache_free(struct store *st)
{
	struct cache_ent *e, *next;

	for (e = st->lru_head; e; e = next) {
		next = e->lru_next;
		/* No reader may hold a reference once the handle is being closed. */
		assert(e->refs == 1);
		ent_free(st, e);
	}
	st->lru_head = st->lru_tail = NULL;
	for (unsigned i = 0; i < st->npool; i++)
		free(st->pool[i].p);
	st->npool = 0;
	free(st->buckets);
	st->buckets = NULL;
}

void store_set_fetch(struct store *st, store_fetch_fn fn, void *arg)
{
	st->fetch = fn;
	st->fetch_arg = arg;
}

/*
 * The stored copy is sent as it is: its payload was encoded when the chunk was put, and a node
 * that encoded it again at every upload spent most of its CPU there, beside the trainer and the
 * remote's own server. Only a deferred copy (never tried for compression) is encoded here, and
 * never goes out as STORE_CODEC_DEFERRED, which the daemons before it do not decode. The payload
 * is checked against h before any byte of it goes (invariant 2): decoded into a pool buffer and
 * hashed, as store_chunk_load does.
 */
int store_chunk_object(struct store *st, const struct store_hash *h, size_t len, int level,
		       void **ret_obj, size_t *ret_len)
{
	struct chunk_hdr hdr;
	struct store_hash got;
	uint8_t *file; /* this thread's (store_thread_buf), not freed here */
	uint8_t *data = NULL, *obj;
	const void *payload;
	uint32_t cap = 0;
	int err;

	err = store_chunk_read_whole(st, h, STORE_RD_DIRECT, &hdr, &file);
	if (err)
		return err;
	if (hdr.raw_size != len)
		return -EIO;
	if (store_codec_is_raw(hdr.codec)) {
		store_hash_buf(file + STORE_HDR_LEN, len, &got);
	} else {
		if (!(data = store_buf_get(st, hdr.raw_size ? hdr.raw_size : 1, &cap)))
			return -ENOMEM;
		err = store_decode_digested(hdr.codec, file + STORE_HDR_LEN, hdr.payload_size,
					    data, hdr.raw_size);
		if (err == 0)
			store_hash_buf(data, hdr.raw_size, &got);
		store_buf_put(st, data, cap);
		if (err)
			return err == -ENOMEM ? -ENOMEM : -EBADMSG;
	}
	if (memcmp(got.b, h->b, STORE_HASH_LEN))
		return -EBADMSG;
	payload = file + STORE_HDR_LEN;
	/* a copy stored deferred is compressed once, for this store and the remote alike: sent
	 * encoded on its own, the idle recode would encode it a second time. A store that cannot
	 * take the new copy (read-only, full) still sends one, encoded at level. */
	if (hdr.codec == STORE_CODEC_DEFERRED &&
	    (err = store_recode_loaded(st, h, &hdr, file, &payload)) != 0)
		return err == -ENOMEM ? err :
		       store_object_encode(file + STORE_HDR_LEN, len, level, ret_obj, ret_len);
	if (!(obj = malloc(STORE_OBJECT_HEADER + (size_t)hdr.payload_size)))
		return -ENOMEM;
	obj[0] = hdr.codec;
	store_put_le32(obj + 1, hdr.raw_size);
	memcpy(obj + STORE_OBJECT_HEADER, payload, hdr.payload_size);
	*ret_obj = obj;
	*ret_len = STORE_OBJECT_HEADER + (size_t)hdr.payload_size;
	return 0;
}
