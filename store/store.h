/*
 * store.h — ckptfs chunk store: content-defined chunking, XXH3-128 digests, zstd codecs and a
 * content-addressed directory of chunk files.
 *
 * The only module that knows the on-disk chunk format. Links only libxxhash and libzstd; never
 * includes index/ or fs/, and never logs: every failure is a negative errno returned to the caller.
 *
 * On-disk layout under the store root ROOT (a directory owned by ckptfs):
 *   ROOT/chunks/XX/<32 hex digits>   one file per distinct chunk, XX = first digest byte in hex
 *   ROOT/chunks/XX/.tmp-*            temporary files of puts in progress (removed on failure,
 *                                    swept by store_open)
 *   ROOT/chunks/XX/.free-*           empty files of deleted chunks, for the next puts to write
 *                                    into (chunkstore.c invariant 10; swept by store_open)
 * Chunk file = 32-byte header + payload:
 *   0  4  magic "CKC1"
 *   4  1  codec (enum store_codec)
 *   5  3  reserved, zero
 *   8  4  raw size in bytes, little-endian
 *   12 4  payload size in bytes, little-endian
 *   16 16 XXH3-128 digest of the raw bytes (canonical big-endian form)
 *
 * Invariants:
 *   1. A chunk file exists under its final name only with its complete content: it is written to
 *      a temporary name, then renamed (git's object-file.c publishes the same way). It is durable
 *      once a store_sync that started after its put returned; until then a crash of the machine
 *      (not of the process) may leave it short or zeroed under its final name. Callers must
 *      therefore reference a chunk durably (fs/: an index row) only after such a store_sync,
 *      and remove unreferenced chunk files after an unclean stop (fs/core/repo.c does, at mount).
 *   2. Bytes are never returned to a caller unless their XXH3-128 equals the digest asked for.
 *   3. The digest identifies raw bytes only; the codec is a property of the stored copy, which
 *      store_chunk_recode may replace (a STORE_CODEC_DEFERRED copy by a compressed one).
 */
#ifndef CKPTFS_STORE_H
#define CKPTFS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* XXH3-128 digest length in bytes. */
#define STORE_HASH_LEN 16

/*
 * Chunker bounds in bytes. Gear rolling hash with FastCDC's normalized chunking (Xia et al.,
 * "FastCDC", USENIX ATC 2016): no cut before MIN, a strict mask up to AVG, a loose mask after,
 * a forced cut at MAX.
 */
#define STORE_CHUNK_MIN (256u * 1024u)
#define STORE_CHUNK_AVG (1024u * 1024u)
#define STORE_CHUNK_MAX (4u * 1024u * 1024u)

/* A 16-byte XXH3-128 digest in canonical (big-endian) byte order. */
struct store_hash {
	uint8_t b[STORE_HASH_LEN];
};

/* How a chunk's payload is encoded. Values are stored on disk and in the index: never renumber. */
enum store_codec {
	STORE_CODEC_RAW = 0,      /* payload is the raw bytes */
	STORE_CODEC_ZSTD = 1,     /* zstd frame of the raw bytes */
	STORE_CODEC_ZSTD_BG2 = 2, /* zstd frame of the raw bytes split into 2 byte planes */
	STORE_CODEC_ZSTD_BG4 = 3, /* zstd frame of the raw bytes split into 4 byte planes */
	STORE_CODEC_PLANES2 = 4,  /* 2 byte planes, each raw or its own zstd frame (codec.c) */
	STORE_CODEC_PLANES4 = 5,  /* 4 byte planes, each raw or its own zstd frame (codec.c) */
	STORE_CODEC_DEFERRED = 6, /* payload is the raw bytes, not yet tried for compression: put
				   * with STORE_PUT_DEFER, encoded later by store_chunk_recode */
};

/* The highest enum store_codec value; a chunk header naming a higher one is malformed. */
#define STORE_CODEC_MAX STORE_CODEC_DEFERRED

/* Whether a payload of this codec is the raw bytes themselves. */
static inline int store_codec_is_raw(unsigned codec)
{
	return codec == STORE_CODEC_RAW || codec == STORE_CODEC_DEFERRED;
}

struct store;

/* Options of store_open. Zero-initialise, then set what you need. */
struct store_opts {
	int zstd_level;         /* zstd level for new chunks; 0 means 1 */
	size_t cache_bytes;     /* decompressed-chunk cache size in bytes; 0 means 64 MiB */
	bool verify_dedup_hits; /* on a put whose digest already exists, compare the bytes */
	bool read_only;         /* never create, write or delete anything */
};

/* What a put stored, or found already stored. */
struct store_chunk_info {
	struct store_hash hash;
	uint32_t raw_size;    /* bytes of raw content */
	uint32_t stored_size; /* bytes the chunk file occupies (header + payload) */
	uint8_t codec;        /* enum store_codec */
	bool existed;         /* put only: the chunk was already stored; nothing was written */
};

/*
 * store_cdc_cut - length of the first content-defined chunk of buf.
 * @buf: bytes starting at a chunk boundary.
 * @len: bytes available in buf.
 * @at_eof: true when no more bytes follow buf (the rest is the last chunk).
 * Returns the chunk length in [1, min(len, STORE_CHUNK_MAX)] when a cut point lies within buf
 * (or at_eof and len > 0), 0 when more bytes are needed (len < STORE_CHUNK_MAX and no cut found,
 * and !at_eof) or when len == 0. Depends only on the bytes of the chunk itself, so boundaries are
 * stable under insertions before them. Pure function: thread-safe.
 */
size_t store_cdc_cut(const uint8_t *buf, size_t len, bool at_eof);

/*
 * A hole of a sparse file shorter than this is chunked as zeros inside the data around it rather
 * than kept as a hole, so that scattered small writes do not cut a file into many small chunks.
 * 64 KiB: well under the chunker's average chunk.
 */
#define STORE_HOLE_MIN (64u << 10)

/*
 * store_data_run - the next run of data of the open file fd at or after pos, by lseek(2)
 * SEEK_DATA / SEEK_HOLE, holes shorter than STORE_HOLE_MIN included in the run: [*ret_start,
 * *ret_end), both <= size (the file's size as the caller knows it). What to chunk of a sparse
 * file, and what is a hole (store_hasher_hole); a filesystem without SEEK_DATA reports all of
 * the file as data. Returns 1 (a run), 0 (no data at or after pos) or -errno of lseek.
 * Moves fd's file offset (lseek): callers read with pread.
 */
int store_data_run(int fd, uint64_t pos, uint64_t size, uint64_t *ret_start, uint64_t *ret_end);

/*
 * The chunker's state within one chunk, for a writer that feeds bytes as they arrive. Zero it
 * ({0}) at a chunk boundary; store_cdc_feed keeps it.
 */
struct store_cdc {
	size_t len;  /* bytes of the current chunk fed so far, 0..STORE_CHUNK_MAX - 1 */
	uint64_t fp; /* Gear hash of the chunk's bytes [STORE_CHUNK_MIN, len) */
};

/*
 * store_cdc_feed - feed the next bytes of the current chunk; find its end if it lies in them.
 * @st: state after the chunk's first st->len bytes (zeroed at a chunk boundary).
 * @buf, @len: the bytes that follow them (len may be 0).
 * Returns 0 when the chunk does not end within buf (all len bytes belong to it; st now counts
 * them), or k in [1, len]: buf[0, k) ends the chunk, buf[k] starts the next one, and st is
 * zeroed for it. Cuts are exactly store_cdc_cut's: feeding a stream in pieces of any size gives
 * the same chunks as store_cdc_cut on the whole, and each byte is hashed at most once, so a
 * writer need not buffer bytes past a cut. Touches only *st: thread-safe for distinct st.
 */
size_t store_cdc_feed(struct store_cdc *st, const uint8_t *buf, size_t len);

/*
 * store_hash_buf - XXH3-128 of len bytes at buf into *ret. Thread-safe.
 */
void store_hash_buf(const void *buf, size_t len, struct store_hash *ret);

/*
 * store_hash_hex - write the 32 lowercase hex digits of h and a NUL into out (33 bytes).
 * Returns out. Thread-safe.
 */
char *store_hash_hex(const struct store_hash *h, char out[2 * STORE_HASH_LEN + 1]);

/*
 * store_hash_parse - parse 32 hex digits (either case, nothing after) into *ret.
 * Returns 0, or -EINVAL when s is not exactly 32 hex digits (*ret untouched).
 */
int store_hash_parse(const char *s, struct store_hash *ret);

/*
 * Streaming XXH3-128 over a byte sequence, for whole-file digests.
 * store_hasher_new: returns an owned hasher (free with store_hasher_free), or NULL on ENOMEM.
 * store_hasher_update: appends len bytes. store_hasher_digest: digest of all bytes appended so far;
 * the hasher stays usable. store_hasher_reset: back to the empty sequence. store_hasher_copy:
 * an owned copy or NULL. store_hasher_free accepts NULL. One hasher is not thread-safe.
 */
struct store_hasher;
struct store_hasher *store_hasher_new(void);
void store_hasher_update(struct store_hasher *hs, const void *buf, size_t len);
void store_hasher_digest(const struct store_hasher *hs, struct store_hash *ret);
void store_hasher_reset(struct store_hasher *hs);
struct store_hasher *store_hasher_copy(const struct store_hasher *hs);
void store_hasher_free(struct store_hasher *hs);

/*
 * The whole-file digest of a sparse file. A file's digest is XXH3-128 over its bytes in order,
 * except that each hole (a maximal range [offset, offset + length) that no chunk backs, length
 * > 0) contributes, instead of its zeros, the STORE_HOLE_RECORD-byte record
 * "ckptHOLE" | le64 offset | le64 length. A file without holes keeps the plain XXH3-128 of its
 * bytes; a hole of any length costs O(1) to digest (ckptfs allows files of 16 TiB). The same
 * bytes stored with and without a hole have different digests: the digest vouches for the
 * stored representation, which is what verify re-reads.
 * store_hasher_hole appends the record of one hole (length 0: nothing). Not thread-safe.
 */
#define STORE_HOLE_RECORD 24
void store_hasher_hole(struct store_hasher *hs, uint64_t offset, uint64_t length);

/*
 * store_encode - encode raw bytes for storage, choosing the codec from a sample.
 * @raw, @len: raw bytes, len <= STORE_CHUNK_MAX.
 * @level: zstd level (>= 1); at 1, byte-grouped payloads are entropy-coded only (codec.c,
 *         BG_ENTROPY_LEVEL), plain zstd payloads use level 1.
 * @ret_buf: on success, an owned buffer (free()) with the payload.
 * @ret_len: payload bytes. @ret_codec: enum store_codec chosen.
 * Tries zstd and 2-/4-byte byte planes (STORE_CODEC_PLANES2/4: each plane compressed only when
 * its sample shrinks) on a sample and keeps the best; falls back to RAW when the payload would
 * not be at least 3% smaller than the raw bytes.
 * Returns 0, -ENOMEM, or -EIO (zstd failure). Thread-safe.
 */
int store_encode(const void *raw, size_t len, int level, void **ret_buf, size_t *ret_len,
		 uint8_t *ret_codec);

/*
 * store_encode_tls - store_encode into a buffer owned by the calling thread (no allocation per
 * call, no page faults on a fresh mapping): *ret_buf stays valid until the thread's next
 * store_encode_tls or its exit; for a RAW payload it is raw itself. Same choice, returns and
 * errors as store_encode. Thread-safe (each thread has its own buffer).
 */
int store_encode_tls(const void *raw, size_t len, int level, const void **ret_buf,
		     size_t *ret_len, uint8_t *ret_codec);

/*
 * store_decode - decode a payload into exactly raw_size bytes at out.
 * Returns 0; -EINVAL for an unknown codec; -EIO when the payload is malformed or does not decode
 * to exactly raw_size bytes (or a zstd frame's own checksum fails; PLANES payloads have none).
 * Does not check digests. Thread-safe.
 */
int store_decode(uint8_t codec, const void *payload, size_t payload_len, void *out,
		 size_t raw_size);

/*
 * A chunk as one self-contained object, the form it takes on a remote (fs/node): 1 byte enum
 * store_codec, the raw size in bytes (4 bytes, little-endian), then store_encode's payload.
 *
 * store_object_encode - the object of len raw bytes (len <= STORE_CHUNK_MAX), zstd level as
 * store_encode. *ret_obj: malloc'd, owned by the caller (free(3)), *ret_len bytes. Returns 0,
 * -EINVAL (len too large), -ENOMEM, -EIO (zstd). Thread-safe.
 *
 * store_object_decode - the raw bytes of the object at obj (len bytes), checked against digest
 * want. *ret_raw: malloc'd, owned by the caller, *ret_len bytes. Returns 0, -EIO (malformed:
 * short, an unknown codec, a payload that does not decode to the size it says), -EBADMSG (the
 * bytes do not match want), -ENOMEM. Thread-safe.
 */
#define STORE_OBJECT_HEADER 5

/*
 * store_object_max - the largest object any chunk has, in bytes: the header and the largest
 * payload a codec may make of STORE_CHUNK_MAX raw bytes (store_object_decode refuses a longer
 * one; 4,210,757 bytes with zstd 1.5.4, whose ZSTD_compressBound sets it). For a reader that
 * receives objects into one buffer (remote_get_into). Thread-safe.
 */
size_t store_object_max(void);
int store_object_encode(const void *raw, size_t len, int level, void **ret_obj, size_t *ret_len);
int store_object_decode(const void *obj, size_t len, const struct store_hash *want,
			uint8_t **ret_raw, uint32_t *ret_len);

/*
 * store_open - open (creating when absent and !read_only) the chunk store under root.
 * @root: the ckptfs STORE directory; chunks live in root/chunks (created mode 0700).
 * @opts: may be NULL for defaults.
 * @ret: on success an owned handle, released with store_close.
 * Removes leftover temporary files (not when read_only).
 * Returns 0, -ENOENT (read_only and no chunk directory), -ELOOP (root/chunks or a shard
 * directory is a symbolic link: never followed, see chunkstore.c invariant 12), -ENOTDIR (one
 * is not a directory), -ENOMEM, or the -errno of a failed mkdir/open.
 */
int store_open(const char *root, const struct store_opts *opts, struct store **ret);

/* store_close - release a handle; NULL is accepted. Does not sync anything. */
void store_close(struct store *st);

/*
 * store_chunk_put - store len raw bytes as one chunk, unless the same digest is already stored.
 * @buf, @len: 1..STORE_CHUNK_MAX raw bytes.
 * @ret: filled on success (ret->existed tells whether anything was written).
 * Durability: none by itself; the chunk (data and name) is durable after the next store_sync.
 * Its writeback starts at once (sync_file_range), so that store_sync has little left to wait for.
 * Returns 0, -EINVAL (len out of range), -ENOSPC, -EIO, -ENOMEM, -EROFS (read_only), or the
 * -errno of a failed write; on failure nothing is left behind. -EBADMSG when verify_dedup_hits is
 * set and the stored chunk with that digest holds other bytes.
 * Thread-safe: puts of the same digest from several threads are fine.
 */
int store_chunk_put(struct store *st, const void *buf, size_t len, struct store_chunk_info *ret);

/*
 * struct store_fetched - the raw bytes of a chunk a fetch function has just stored, checked
 * against its digest, which the read that asked for the chunk serves at once instead of reading
 * the chunk's file back, decoding and hashing it a second time. Filled only by
 * store_chunk_put_object; a fetch function passes it on and touches nothing in it. data NULL:
 * nothing kept, the read reads the stored file. The buffer is the store's (its pool).
 */
struct store_fetched {
	uint8_t *data;
	uint32_t size; /* bytes of the chunk at data */
	uint32_t cap;  /* the buffer's capacity, bytes */
};

/*
 * store_fetch_fn - asked for chunk h when its file is missing from the store: fetch the chunk's
 * raw bytes from elsewhere (a remote copy) and store them with store_chunk_put_hashed, or its
 * object with store_chunk_put_object(..., got), which hands the checked bytes to the read. Returns
 * 0 when it did, -ENOENT when it has no copy either, -EAGAIN when the copy could not be reached
 * (the remote did not answer: the chunk is not known to be bad, a later read may succeed), or
 * another -errno (the copy is bad: -EBADMSG, -EIO); got is ignored unless it returns 0. Called
 * from any thread that reads a chunk, with no store lock held; it must not read chunk h itself.
 */
typedef int (*store_fetch_fn)(struct store *st, const struct store_hash *h, void *arg,
			      struct store_fetched *got);

/*
 * store_set_fetch - from now on, a read of a chunk whose file is missing (-ENOENT) first asks
 * fn(st, h, arg) for it and, when fn returns 0, reads it again (else the read fails with fn's
 * error, -EAGAIN included): chunks of files another node
 * wrote are fetched on first read and cached here. Every byte is still checked against its
 * digest (invariant 2). fn NULL: no fetching (the default). Call before the store is shared
 * between threads; arg borrowed for the store's lifetime.
 */
void store_set_fetch(struct store *st, store_fetch_fn fn, void *arg);

/* store_chunk_put_hashed flags */
#define STORE_PUT_DEFER 0x1 /* store a new chunk raw, as STORE_CODEC_DEFERRED, without
			     * compressing it: store_chunk_recode does that later. A chunk whose
			     * sample does not compress (store_encode would store it RAW) is stored
			     * as STORE_CODEC_RAW instead, for good: nothing to recode */

/*
 * store_chunk_put_hashed - store_chunk_put for a caller that has already computed h, the
 * XXH3-128 of the len bytes at buf (store_hash_buf), saving a second pass over them. h is
 * trusted: a wrong digest stores the bytes under a name that is not theirs, which every later
 * read reports as -EBADMSG. @flags: 0 or STORE_PUT_DEFER (a chunk already stored is left as it
 * is either way). Same returns and thread-safety as store_chunk_put.
 */
int store_chunk_put_hashed(struct store *st, const void *buf, size_t len,
			   const struct store_hash *h, unsigned flags,
			   struct store_chunk_info *ret);

/*
 * store_chunk_put_object - store chunk h from its remote object (store_object_encode's form,
 * len bytes at obj, as a node sent it), its payload as it is, in its codec, without encoding it
 * again; a sound copy already stored is left as it is. The object is decoded and its bytes
 * checked against h first, so nothing else is ever stored under h. Not durable until the next
 * store_sync, like a put. got NULL, or a fetch function's (store_fetch_fn): on success the
 * decoded bytes go there for the read that fetched the chunk (struct store_fetched), so a cold
 * read decodes and hashes each fetched chunk once. Returns 0 (*ret filled), -EBADMSG (the
 * object is malformed, does not decode, or its bytes are not h's: nothing stored), -EROFS,
 * -ENOMEM, or the -errno of the write (-ENOSPC, -EIO, ...); on failure got->data is NULL.
 * Thread-safe; uses this thread's STORE_TBUF_WRITE buffer.
 */
int store_chunk_put_object(struct store *st, const void *obj, size_t len,
			   const struct store_hash *h, struct store_chunk_info *ret,
			   struct store_fetched *got);

/*
 * store_defer_pays - whether a worker that must keep up with a writer gets a chunk stored
 * sooner by putting it raw (STORE_PUT_DEFER) than by compressing it first: from moving
 * averages of the recent puts' wall time (weight 1/8 per put), true when the time to encode a
 * byte exceeds the time to write the bytes compression would have saved (write time per
 * stored byte x (1 - stored/raw)). Wall time includes waiting for the CPU, so a worker
 * starved by the trainer counts as slow, and a disk slower than the compressor says no.
 * False until an encoded put has been measured. Thread-safe, lock-free.
 */
bool store_defer_pays(struct store *st);

/*
 * store_chunk_recode - compress a chunk stored as STORE_CODEC_DEFERRED: read and check it
 * (XXH3-128), encode it as store_chunk_put would (RAW when that does not pay), write the new
 * file, fdatasync it, and swap it in for the old one atomically (renameat2 RENAME_EXCHANGE), so
 * a reader sees one or the other and a crash at any point leaves a complete copy under the
 * name. A chunk deleted meanwhile stays deleted: the swap needs the old name to exist.
 * @ret: the chunk as stored on return (ret->codec is never STORE_CODEC_DEFERRED on success).
 * Returns 0 (also when the chunk was not deferred: nothing is written, ret describes it),
 * -ENOENT (no such chunk, or deleted meanwhile), -EBADMSG (its bytes do not match its digest:
 * left as it is), -EIO, -ENOSPC, -ENOMEM, -EROFS, or another -errno of the write; on failure
 * the old file is left as it was. The new copy's name is durable after the next store_sync.
 * Thread-safe, also against puts, reads and deletes of the same chunk.
 */
int store_chunk_recode(struct store *st, const struct store_hash *h,
		       struct store_chunk_info *ret);

/*
 * store_sync - make every chunk put (data and name) and every delete that returned before this
 * call durable: one syncfs(2) of the filesystem holding the store, skipped when a concurrent
 * store_sync already covered them. Flushes other dirty data of that filesystem too (the cost of
 * batching; one flush per commit instead of one fdatasync per chunk). No-op on a read_only store.
 * Returns 0 or -EIO (the writeback of some data failed; the same puts are synced again by the next
 * call). Thread-safe; concurrent calls are serialized.
 */
int store_sync(struct store *st);

/*
 * store_chunk_stat - read the header of a stored chunk into *ret (existed = true).
 * Returns 0, -ENOENT (not stored), -EIO (header unreadable or malformed, or its digest is not h).
 * Thread-safe.
 */
int store_chunk_stat(struct store *st, const struct store_hash *h, struct store_chunk_info *ret);

/*
 * Slots of store_thread_buf: the chunk loads' compressed payloads, a caller's read replies, and
 * the chunk files a put writes with O_DIRECT.
 */
enum { STORE_TBUF_PAYLOAD, STORE_TBUF_READ, STORE_TBUF_WRITE, STORE_TBUF_SLOTS };

/*
 * store_thread_buf - a buffer of at least len bytes owned by the calling thread, one per slot
 * (enum above), reused from call to call (its bytes are not kept when it has to grow) and freed
 * when the thread exits; page-aligned (chunk files are read into it and written from it with
 * O_DIRECT). Returns NULL for a bad slot or when out of memory. Thread-safe: each thread has its
 * own; a buffer must not be used by another thread or after the next call with the same slot.
 */
void *store_thread_buf(unsigned slot, size_t len);

/*
 * store_chunk_pread - copy len bytes at offset off of the raw content of chunk h into buf.
 * Reads through the decompressed-chunk cache; a chunk read from disk is decoded and re-hashed
 * before any byte of it is used.
 * Returns the number of bytes copied (less than len only at the chunk's end, 0 at or past it),
 * -ENOENT (chunk file missing), -EBADMSG (bytes on disk do not match h), -EIO (unreadable or
 * malformed), -ENOMEM. Thread-safe.
 */
ssize_t store_chunk_pread(struct store *st, const struct store_hash *h, void *buf, size_t len,
			  uint64_t off);

/*
 * store_chunk_object - chunk h of this store (len raw bytes, its size) as a remote object
 * (store_object_encode's form): what a node sends and what a repair puts back. The stored
 * payload goes as it is, in its codec, without encoding it again; a copy stored deferred
 * (STORE_CODEC_DEFERRED) is compressed first, as store_chunk_recode does, and goes as then
 * stored (one encode for the store and the remote), or, when the store cannot take the new copy
 * (read-only, full, ...), is encoded at zstd level (1..19): no object is ever DEFERRED. The
 * chunk file is read (never fetched: a chunk missing here is -ENOENT) and its bytes checked
 * against h first, so a damaged copy is never sent. *ret_obj: malloc'd, owned by the caller
 * (free(3)), *ret_len bytes. Returns 0, -ENOENT (not stored here), -EIO (unreadable, malformed,
 * or its raw size is not len), -EBADMSG (its bytes do not match h), -ENOMEM, or the -errno of
 * store_object_encode. Thread-safe; uses this thread's STORE_TBUF_PAYLOAD buffer.
 */
int store_chunk_object(struct store *st, const struct store_hash *h, size_t len, int level,
		       void **ret_obj, size_t *ret_len);

/* A reference to one chunk's decoded bytes in the read cache (store_chunk_hold). */
struct store_hold;

/*
 * store_chunk_hold - the raw content of chunk h, in place in the decompressed-chunk cache, for a
 * reader that hands the bytes on without copying them (fs/fuse/ops.c replies to a FUSE read with an
 * iovec into the cache). Loads, decodes and re-hashes the chunk like store_chunk_pread.
 * On success *ret_data points to *ret_size (1..STORE_CHUNK_MAX) verified bytes that stay valid
 * and unchanged until store_chunk_release(st, *ret_hold), even if the entry is evicted or the
 * chunk deleted meanwhile; the caller owns the hold and must release it exactly once. Holds
 * count against nothing: keep them for one request. Returns 0, -ENOENT, -EBADMSG, -EIO,
 * -ENOMEM as store_chunk_pread. Thread-safe.
 */
int store_chunk_hold(struct store *st, const struct store_hash *h, const uint8_t **ret_data,
		     size_t *ret_size, struct store_hold **ret_hold);

/* store_chunk_release - drop a hold from store_chunk_hold (NULL is a no-op). Thread-safe. */
void store_chunk_release(struct store *st, struct store_hold *hold);

/* store_cache_bytes - the decompressed-chunk cache's size, bytes (store_opts.cache_bytes, or
 * its 64 MiB default). Thread-safe. */
size_t store_cache_bytes(const struct store *st);

/*
 * store_chunk_warm - read-ahead: load, decode and re-hash chunk h into the cache, as
 * store_chunk_hold does, unless it is there already or another thread is loading it (then return
 * at once). Holds nothing afterwards; the entry may be evicted before anyone reads it. A chunk
 * larger than the cache is loaded and dropped. A chunk file missing here is fetched
 * (store_set_fetch) only when fetch is true: by the time a read-ahead runs, its file may have
 * dropped the chunk, and the fetch then leaves a chunk file nothing references (kept until a
 * sweep); a caller passes true for files no writer here changes (another node's files, whose
 * every read would fetch the same chunks one at a time).
 * Returns 0 (in the cache, being loaded, or loaded now), -ENOENT, -EBADMSG, -EIO or -ENOMEM as
 * store_chunk_pread, or the fetch function's error: the caller may ignore them, the reader that
 * needs the chunk meets the same error and reports it. Thread-safe; blocks for the chunk file's
 * read and decode, and the fetch.
 */
int store_chunk_warm(struct store *st, const struct store_hash *h, bool fetch);

/*
 * store_cache_figures - what the read cache has done since store_open: *ret_hits reads of a
 * chunk served from the cache (a read that waited for another thread's load of the same chunk
 * counts as a hit), *ret_loads chunks read from disk, decoded and re-hashed for it (failed loads
 * included), *ret_warmed chunks loaded by store_chunk_warm (read-ahead) likewise,
 * *ret_recycled loads (and verifications) that decoded into the buffer of an evicted
 * entry instead of a new allocation (at most 8 such buffers are kept, 32 MiB at most). Counts of
 * chunk lookups, not bytes. Thread-safe.
 */
void store_cache_figures(struct store *st, uint64_t *ret_hits, uint64_t *ret_loads,
			 uint64_t *ret_warmed, uint64_t *ret_recycled);

/*
 * store_chunk_verify - read chunk h from disk (bypassing the cache), decode and re-hash it.
 * Returns 0 when sound, -ENOENT, -EBADMSG (digest mismatch), -EIO (malformed/unreadable), -ENOMEM.
 * Thread-safe.
 */
int store_chunk_verify(struct store *st, const struct store_hash *h);

/* Most threads store_chunks_verify runs, and how many per online CPU when the caller passes 0:
 * a chunk's O_DIRECT read waits on the disk while others decode; on 2 CPUs 2, 4 and 8 threads
 * verified a 2 GiB step in 1.63, 1.27-1.40 and 1.21 s (tests/bench/RESULTS.md "Mount"). */
#define STORE_VERIFY_MAX_THREADS 16
#define STORE_VERIFY_THREADS_PER_CPU 4

/*
 * What the check that precedes a reader keeps for it (store_chunks_verify), bytes: raw bytes of
 * verified chunks linked into the cache (at most the cache's size; the first chunks in the
 * order given), then raw bytes of chunks left in the page cache.
 */
struct store_keep {
	size_t cache_bytes;
	size_t page_bytes;
};

/*
 * store_chunks_verify - store_chunk_verify of each of the n chunks hs[0, n), on nthreads threads
 * at once (1..STORE_VERIFY_MAX_THREADS, capped; 0: STORE_VERIFY_THREADS_PER_CPU per online CPU;
 * the caller's own thread is one of them), so that one chunk's disk read overlaps another's
 * decode and re-hash; results[i] (n entries, the
 * caller's) gets hs[i]'s result: 0 or store_chunk_verify's -errno (or a fetch function's -EAGAIN,
 * store_set_fetch). A thread that cannot be started leaves its share to the others; never fails.
 * Each chunk is read once per entry: pass each digest once. Chunks are taken in the order given.
 * @keep: NULL, every chunk is read from the disk and dropped. Else the check precedes a reader
 * of these chunks in this order (a mount's check of the newest step) and its reads are to serve
 * that reader's (chunkstore.c invariant 13): a chunk the cache holds counts as verified (it was,
 * when it was loaded); the chunks verified are linked into the cache while it holds at most
 * keep->cache_bytes, never evicting anything; and they are left in the page cache while the
 * check has left there less than keep->page_bytes (raw bytes, so an upper bound for compressed
 * chunks; the threads in flight may pass it by a chunk each), so that the reader's first load
 * of one not in the cache takes it from memory (and re-hashes it) instead of the disk; the rest
 * are read with O_DIRECT, as without keep. The daemon's own memory stays within the
 * cache's size; what is left in the page cache is the kernel's to reclaim.
 * Thread-safe; returns when all n are done.
 */
void store_chunks_verify(struct store *st, const struct store_hash *hs, size_t n,
			 unsigned nthreads, const struct store_keep *keep, int *results);

/*
 * store_check_figures - what store_chunks_verify with keep > 0 did since store_open:
 * *ret_checked chunks it read from disk, *ret_kept of them it linked into the cache,
 * *ret_primed of them it left in the page cache for the reader (linked ones too), *ret_primed_hits loads served from that page-cache copy.
 * Counts of chunks. Thread-safe.
 */
void store_check_figures(struct store *st, uint64_t *ret_checked, uint64_t *ret_kept,
			 uint64_t *ret_primed, uint64_t *ret_primed_hits);

/*
 * store_chunk_delete - remove chunk h's file (and drop it from the cache).
 * Returns 0, -ENOENT (not stored), -EROFS, or the -errno of unlink. Thread-safe.
 */
int store_chunk_delete(struct store *st, const struct store_hash *h);

/*
 * store_chunk_set_aside - move chunk h's file out of the store into the existing directory dir,
 * under its 32-hex-digit name, by rename(2) (same filesystem); the file is not read, changed or
 * deleted, and the store no longer serves it. For repairs that must keep chunk files no readable
 * index names (ckptctl fsck). Returns 0, -ENOENT (not stored), -EROFS (read-only handle),
 * -ENAMETOOLONG, or the -errno of rename (-EXDEV: dir is on another filesystem). Not
 * durable until the caller fsyncs both directories; thread-safe.
 */
int store_chunk_set_aside(struct store *st, const struct store_hash *h, const char *dir);

/*
 * store_chunk_foreach - call fn(hash, stored_size, arg) for every chunk file on disk, in no
 * particular order. Files whose names are not 32 hex digits are skipped. fn returning non-zero
 * stops the walk and that value is returned. Returns 0 after a full walk or the -errno of a
 * failed readdir. Not safe against concurrent deletes of the same shard (results may omit them).
 */
int store_chunk_foreach(struct store *st,
			int (*fn)(const struct store_hash *h, uint64_t stored_size, void *arg),
			void *arg);

/* Most threads store_parallel starts for one call. */
#define STORE_PARALLEL_MAX 64

/*
 * store_parallel - run fn(arg) on @nthreads threads at once, the calling thread being one of
 * them, and return once every run has returned. fn shares the work out itself (an atomic
 * counter in arg, say) and must not count on a number of threads: when a thread cannot be
 * started, fewer run, at least the caller. nthreads 0 counts as 1, more than STORE_PARALLEL_MAX
 * as that. Returns how many ran (1..STORE_PARALLEL_MAX). Thread-safe; fn's return value is
 * ignored.
 */
unsigned store_parallel(unsigned nthreads, void *(*fn)(void *), void *arg);

/*
 * store_write_all - write exactly len bytes of buf to fd at its file offset, retrying short
 * writes and EINTR. Returns 0, -EIO (write(2) made no progress), or the -errno of write(2). Not
 * durable by itself (no fsync). Thread-safe for distinct fds.
 */
int store_write_all(int fd, const void *buf, size_t len);

/*
 * store_chunk_path - write the path of chunk h's file into buf (cap bytes).
 * Returns 0 or -ENAMETOOLONG. For tests and forensics; callers must not write there.
 */
int store_chunk_path(const struct store *st, const struct store_hash *h, char *buf, size_t cap);

#endif /* CKPTFS_STORE_H */
