/*
 * store_int.h — private declarations shared by the files of store/ and its unit tests.
 * Nothing outside store/ and tests/store/ includes this header.
 */
#ifndef CKPTFS_STORE_INT_H
#define CKPTFS_STORE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

/*
 * Little-endian 32-bit load and store: the byte order of the chunk file header (store.h) and of
 * a PLANES payload's stored lengths (codec.c invariant 5). p holds at least 4 bytes.
 */
static inline uint32_t store_get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void store_put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

/* Seed of the splitmix64 sequence that generated store_gear_table (ASCII "ckptfsv1"). */
#define STORE_GEAR_SEED 0x636b707466737631ull

/*
 * The 256 64-bit Gear values of the chunker: store_gear_table[i] is the (i + 1)-th output of
 * splitmix64 seeded with STORE_GEAR_SEED. Part of the chunk-boundary definition, hence of every
 * digest already stored: never change it. tests/store/test_chunker.c regenerates and compares it.
 */
extern const uint64_t store_gear_table[256];

/*
 * Fault injection for tests (SQLite's test_vfs style): when non-zero, the next write of a chunk
 * file fails as if write(2) had returned -1 with errno store_fault_write_errno, and the variable
 * is reset to 0. Never set outside tests.
 */
extern _Atomic int store_fault_write_errno;

/*
 * For tests and measurements: when non-zero, the chunker scans with its scalar loop only, not
 * with its AVX-512 filter (chunker.c). Never set outside tests.
 */
extern _Atomic int store_cdc_scalar_only;

/*
 * Fault injection for tests: while non-zero, each O_DIRECT read or write of a chunk file fails as
 * if the filesystem refused it (EINVAL), so the load or put falls back to the page cache, and the
 * variable is decremented. Never set outside tests.
 */
extern _Atomic int store_fault_direct_einval;

/*
 * store_encode_as - encode raw with the given codec, whatever the gain (store_encode's choice and
 * 3% rule are skipped). For tests and tools that need a specific codec. Same buffer ownership,
 * returns and thread-safety as store_encode, plus -EINVAL for an unknown codec.
 */
int store_encode_as(uint8_t codec, const void *raw, size_t len, int level, void **ret_buf,
		    size_t *ret_len);

/*
 * store_decode_digested - store_decode for a caller that checks the XXH3-128 of the decoded bytes
 * itself (chunkcache.c store_chunk_load, chunkstore.c invariant 2): zstd's own XXH64 of the
 * frame content is not verified (every encode but a PLANES one, which has none, writes it, and
 * store_decode checks it), which saves a second hash of every decoded byte. Same returns and
 * thread-safety as store_decode; a damaged
 * payload may decode without an error, to bytes whose digest the caller then rejects.
 */
int store_decode_digested(uint8_t codec, const void *payload, size_t payload_len, void *out,
			  size_t raw_size);

/*
 * store_sample_compresses - whether store_encode would try to compress raw (len bytes, level
 * as store_encode's) rather than store it RAW from its sample alone: 1 when a trial of the
 * sample store_encode takes (codec.c, choose_codec) shrinks it by 1/64 or more, 0 when none
 * does, whichever codec store_encode would then pick. The byte-plane trials come first and
 * the first that passes answers, so float data costs one or two trials on 16 KiB. A 1 can
 * still end RAW in store_encode (its 3% rule on the whole payload); a 0 never compresses.
 * Returns 1, 0, -ENOMEM or -EIO (zstd). Thread-safe (this thread's codec state).
 */
int store_sample_compresses(const void *raw, size_t len, int level);

/*
 * store_payload_bound - the largest payload any codec can produce for raw_len raw bytes
 * (store_encode itself never exceeds raw_len). Used to reject impossible chunk headers.
 */
size_t store_payload_bound(size_t raw_len);

/* Size of the on-disk chunk file header (see store.h). */
#define STORE_HDR_LEN 32u

/* O_DIRECT offset/length/buffer alignment, bytes: a page covers every logical block size Linux
 * block devices use (512..4096). */
#define STORE_DIRECT_ALIGN 4096u

/*
 * store_encode_tls_head - where a chunk file's header goes in front of payload, when payload is
 * this thread's latest non-RAW store_encode_tls payload: the encoder writes it STORE_HDR_LEN
 * bytes into a STORE_DIRECT_ALIGN-aligned buffer of its own, so that header and payload can go
 * to disk with O_DIRECT from there without a copy (store_chunk_write_file). Returns that
 * aligned address (payload - STORE_HDR_LEN; its STORE_HDR_LEN bytes are the caller's to write
 * until this thread's next store_encode_tls), or NULL for any other buffer (a RAW payload, the
 * caller's bytes). Thread-safe: it looks at this thread's buffer only.
 */
uint8_t *store_encode_tls_head(const void *payload);


/* ---- shared by chunkstore.c, chunkfile.c and chunkcache.c ---- */

/*
 * The numbered invariants these declarations refer to are listed at the top of chunkstore.c.
 * Nothing here is thread-safe unless its doc block says so; lock order is written on the mutex.
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#define STORE_NSHARDS 256 /* chunks/00 .. chunks/ff: one per value of a digest's first byte */
#define STORE_POOL_BUFS 8 /* invariant 9: 8 x STORE_CHUNK_MAX = 32 MiB at most */
#define STORE_FREE_MAX 1024 /* invariant 10: empty files kept for reuse, about one step's chunks */

struct cache_ent {
	struct store_hash hash;
	uint8_t *data; /* size raw bytes, verified (invariant 2), in a buffer of cap bytes */
	uint32_t size;
	uint32_t cap;
	unsigned refs;             /* guarded by cache_lock (invariant 3) */
	bool linked;               /* in the table and the LRU list */
	struct cache_ent *hnext;   /* bucket chain */
	struct cache_ent *lru_prev; /* towards most recently used */
	struct cache_ent *lru_next; /* towards least recently used */
};

/* A chunk being read from disk by some thread (invariant 3); lives on that thread's stack. */
struct loading {
	struct store_hash hash;
	struct loading *next;
};

struct store {
	char *root;   /* owned */
	char *chunks; /* owned: root + "/chunks" */
	int zstd_level;
	bool verify_dedup_hits;
	bool read_only;

	pthread_mutex_t dirty_lock; /* leaf lock: guards dirty */
	bool dirty[STORE_NSHARDS];

	int root_fd;                /* the root directory, for syncfs(2); -1 when read_only */
	pthread_mutex_t sync_lock;  /* serializes store_sync; guards synced_gen (invariant 8) */
	_Atomic uint64_t put_gen;   /* publications so far */
	/* invariant 11: moving averages of the puts' wall time, picoseconds per byte */
	_Atomic uint64_t enc_ps;    /* encoding, per raw byte */
	_Atomic uint64_t wr_ps;     /* writing the file, per stored byte */
	_Atomic uint64_t ratio_ppm; /* stored / raw bytes of the encoded puts, parts per million */
	uint64_t synced_gen;        /* publications known durable */

	store_fetch_fn fetch;       /* store_set_fetch; NULL: none. Set before sharing */
	void *fetch_arg;

	pthread_mutex_t cache_lock; /* leaf lock: guards every field below and cache_ent refs */
	struct cache_ent **buckets;
	size_t nbuckets; /* power of two */
	struct cache_ent *lru_head; /* most recently used */
	struct cache_ent *lru_tail; /* least recently used */
	size_t cache_used;
	size_t cache_cap;
	struct loading *loading;    /* chunks being loaded (invariant 3) */
	pthread_cond_t load_cv;     /* a load ended; with cache_lock */
	uint64_t hits, loads;       /* store_cache_figures */
	uint64_t warmed;            /* loads by store_chunk_warm (read-ahead) */
	uint64_t checked, kept;     /* store_check_figures: loads by the mount's check, kept */

	pthread_mutex_t primed_lock; /* leaf lock: guards the fields below (invariant 13) */
	struct store_hash *primed;  /* checked chunks left in the page cache, sorted once ready */
	size_t nprimed, primed_cap;
	bool primed_ready;          /* sorted: lookups may bsearch it */
	uint64_t primed_added;      /* chunks ever listed */
	uint64_t primed_bytes;      /* their raw bytes */
	uint64_t primed_hits;       /* loads served from the page cache the check left */

	pthread_mutex_t pool_lock;  /* leaf lock: guards the pool (invariant 9) */
	struct {
		uint8_t *p;
		uint32_t cap;
	} pool[STORE_POOL_BUFS];
	unsigned npool;
	uint64_t recycled;          /* loads that decoded into a pooled buffer */

	pthread_mutex_t free_lock;  /* leaf lock: guards free_v, free_n, free_next (invariant 10) */
	struct {
		uint32_t id;        /* the file is chunks/<shard>/.free-<id> */
		uint8_t shard;
	} free_v[STORE_FREE_MAX];
	unsigned free_n;
	uint32_t free_next;         /* the id of the next file freed */
};

/* The fields of a chunk file header (store.h), decoded. */
struct chunk_hdr {
	uint8_t codec;
	uint32_t raw_size;
	uint32_t payload_size;
	struct store_hash hash;
};

/* Shard index of a digest: its first byte (0 .. STORE_NSHARDS - 1). */
static inline unsigned store_shard_of(const struct store_hash *h)
{
	return h->b[0];
}

/* ---- chunkfile.c: one chunk file on disk ---- */

/*
 * store_hdr_encode - serialize h into the 32-byte chunk file header described in store.h (magic
 * "CKC1", little-endian sizes, digest). Cannot fail; thread-safe.
 */
void store_hdr_encode(const struct chunk_hdr *h, uint8_t out[STORE_HDR_LEN]);

/*
 * store_chunk_open - open chunk h's file read-only and read and validate its header: well formed,
 * its digest is h, the file exactly header + payload long. On success *ret_fd is an owned
 * descriptor (the caller closes it) and *ret_hdr the decoded header; both untouched on failure.
 * Returns 0, -ENOENT (no such chunk), -ENOMEM, or -EIO (any other failure: invariant 7).
 * Thread-safe; takes no store lock.
 */
int store_chunk_open(const struct store *st, const struct store_hash *h, int *ret_fd,
		     struct chunk_hdr *ret_hdr);

/* How store_chunk_read_whole reads a chunk file. */
enum {
	STORE_RD_DIRECT,     /* O_DIRECT where the filesystem allows it; a chunk the mount's check
			      * left in the page cache (invariant 13) is taken from there first */
	STORE_RD_KEEP_PAGES, /* through the page cache, and its pages left there for the reader
			      * that follows the mount's check (invariant 13) */
};

/*
 * store_chunk_read_whole - read all of chunk h's file (header and payload) into this thread's
 * STORE_TBUF_PAYLOAD buffer, as how (enum above) says, and validate its header
 * as store_chunk_open does. The digest of the payload is not checked here.
 * On success *ret_file points at the file's bytes (borrowed: valid until this thread's next
 * store_thread_buf(STORE_TBUF_PAYLOAD)) and *ret_hdr holds the header.
 * Returns 0, -ENOENT, -ENOMEM or -EIO. Thread-safe; takes no store lock.
 */
int store_chunk_read_whole(struct store *st, const struct store_hash *h, unsigned how,
			   struct chunk_hdr *ret_hdr, uint8_t **ret_file);

/*
 * store_chunk_write_file - write a new chunk file's bytes, the STORE_HDR_LEN-byte header hdr then
 * payload_len bytes of payload, to fd (an empty file open for writing, at offset 0). Whole
 * 4096-byte blocks go with O_DIRECT where possible, the rest through the page cache; with
 * keep_pages all of it goes through the page cache and stays there (chunkstore.c invariant 13).
 * Not durable: store_sync's syncfs (or the caller's fdatasync) makes it so.
 * Returns 0 or -errno (-ENOSPC, -EIO, ...); honours store_fault_write_errno and
 * store_fault_direct_einval. Thread-safe; uses this thread's STORE_TBUF_WRITE buffer.
 */
int store_chunk_write_file(int fd, const uint8_t *hdr, const void *payload, size_t payload_len,
			   bool keep_pages);

/* ---- chunkcache.c: the read cache and its buffer pool ---- */

/*
 * store_cache_init - size and allocate the cache's hash table for st->cache_cap bytes (set by the
 * caller). Returns 0 or -ENOMEM. Called once, by store_open, before st is shared.
 */
int store_cache_init(struct store *st);

/*
 * store_cache_free - free every cache entry, the pooled buffers and the table; NULL-safe on the
 * table. No reader may hold a reference (asserted). Called once, by store_close.
 */
void store_cache_free(struct store *st);

/*
 * store_recode_loaded - store_chunk_recode for a caller that has read chunk h's file whole
 * (store_chunk_read_whole: its header *hdr, codec STORE_CODEC_DEFERRED, and file) and checked
 * its bytes against h: encodes them at the store's level, swaps the new file in (as
 * store_chunk_recode does) and updates *hdr to it. *ret_payload: the stored payload,
 * hdr->payload_size bytes, in this thread's encoder buffer or in file itself (RAW), valid until
 * this thread's next encode or read into that slot. Returns 0, -EROFS, or the errors of
 * store_chunk_recode's write; on failure the old file is left as it was. Thread-safe.
 */
int store_recode_loaded(struct store *st, const struct store_hash *h, struct chunk_hdr *hdr,
			const uint8_t *file, const void **ret_payload);

/*
 * store_chunk_load - load chunk h from disk (read as how says: store_chunk_read_whole), decode
 * it and check its XXH3-128 against h (invariants 2 and 7), bypassing the cache. A chunk file missing here is fetched through
 * store_set_fetch's function when fetch is true and one is set. On success *ret_data is a pooled
 * buffer (owned: give it back with store_buf_put(st, data, *ret_cap)) holding *ret_size raw bytes.
 * Returns 0, -ENOENT, -EIO (unreadable or malformed file), -EBADMSG (payload does not decode or
 * its digest differs), -ENOMEM, or the fetch function's -EAGAIN. Thread-safe (takes pool_lock
 * briefly).
 */
int store_chunk_load(struct store *st, const struct store_hash *h, bool fetch, unsigned how,
		     uint8_t **ret_data, uint32_t *ret_size, uint32_t *ret_cap);

/*
 * store_primed_has - whether chunk h is one the mount's check left in the page cache
 * (invariant 13). Thread-safe (primed_lock).
 */
bool store_primed_has(struct store *st, const struct store_hash *h);

/* store_primed_hit - count a load served from the page cache the check left. Thread-safe. */
void store_primed_hit(struct store *st);

/*
 * store_buf_get - a buffer of at least len (1..STORE_CHUNK_MAX) bytes for a chunk's raw bytes,
 * from the pool (invariant 9): the smallest pooled one of len..2*len bytes (so a cache entry
 * never holds more than twice its size); else, when every pooled one is smaller than len, the
 * largest grown to len (realloc keeps its mapped pages, which a fresh malloc of a chunk's size
 * would fault in again); else a new malloc. *ret_cap gets its size. Returns the buffer, owned
 * by the caller until store_buf_put, or NULL when out of memory. Thread-safe (pool_lock).
 */
uint8_t *store_buf_get(struct store *st, uint32_t len, uint32_t *ret_cap);

/*
 * store_buf_put - give back a buffer of cap bytes obtained from store_buf_get (or
 * store_chunk_load, store_chunk_put_object's got), to the pool
 * (invariant 9) or to free(3). Takes ownership of p. Thread-safe (pool_lock).
 */
void store_buf_put(struct store *st, uint8_t *p, uint32_t cap);

/*
 * store_cache_drop - remove chunk h from the cache if it is there; readers holding it keep their
 * reference (invariant 3). Cannot fail. Thread-safe (cache_lock).
 */
void store_cache_drop(struct store *st, const struct store_hash *h);

#endif /* CKPTFS_STORE_INT_H */
