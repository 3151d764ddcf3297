/*
 * chunkstore.c — the content-addressed directory of chunk files, and its read cache.
 *
 * Layout and chunk file format: see store.h. Publication follows git's object-file.c: write a
 * temporary file in the destination directory and rename it to its final name; the data is made
 * durable in batches by store_sync (one syncfs(2) of the store's filesystem for every chunk put
 * since the last one) instead of one fdatasync per chunk, which cost a disk flush per MiB.
 *
 * Invariants:
 *   1. A file under a final name was written completely before its rename (store.h invariant 1);
 *      one that replaces an existing copy (store_chunk_recode) was also fdatasync'd, and takes
 *      its place by renameat2(RENAME_EXCHANGE), which fails when the old name is gone (a delete
 *      won the race), so a recode never brings a deleted chunk back;
 *      it is durable once a store_sync that started after the put returned. Temporary files are
 *      named ".tmp-XXXXXX", live in the shard directory of their final name, are unlinked by the
 *      put that created them on any failure, and are swept by store_open (a crash leaves them).
 *   2. The cache holds only bytes whose XXH3-128 was checked against their digest after they were
 *      read from disk (store.h invariant 2); a put never inserts into it.
 *   3. Cache entries are reference counted. The table owns one reference while an entry is
 *      linked; each reader owns one while it copies out. The entry is freed when the count drops
 *      to zero, so eviction or delete never frees bytes a reader is copying. cache_lock guards
 *      only the table, the LRU list, the counts and cache_used: never disk I/O, decoding or
 *      hashing. A thread that misses a chunk another thread is loading (listed in loading)
 *      waits on load_cv for that load to end, then looks again: concurrent requests for one
 *      chunk (kernel read-ahead keeps several in flight) decode it once. A loader always
 *      unlists itself and broadcasts, on failure too; the waiter then loads it itself.
 *   4. cache_used = sum of the buffer capacities of linked entries <= cache_cap after every
 *      insert. A chunk whose buffer is larger than cache_cap is served without being cached.
 *   9. An entry's buffer, when the entry is freed, goes to a pool of at most POOL_BUFS buffers
 *      (each <= STORE_CHUNK_MAX bytes, so at most 32 MiB besides the cache) that the next loads
 *      decode into. A fresh 1-4 MiB malloc is a fresh mapping in the daemon (mmap threshold
 *      128 KiB, fs/daemon.c) that page-faults page by page as it is filled and is unmapped at
 *      eviction: 28% of the daemon's CPU in a cold 1 GiB torch.load (perf, before the pool).
 *      pool_lock is a leaf lock, taken with no other store lock held.
 *   5. dirty[] marks shard directories whose entries changed (rename, unlink) since the last
 *      successful store_sync; a shard is unmarked only by a store_sync whose syncfs has
 *      already succeeded, and is re-marked when that syncfs fails.
 *   8. put_gen counts completed publications; synced_gen <= put_gen, and every put whose
 *      publication was counted at or below synced_gen is durable (data and name). synced_gen only
 *      grows, only under sync_lock, and only after a syncfs that began after those publications.
 *   6. A read_only store never creates, writes, renames or unlinks anything.
 *  10. A deleted chunk file is, while fewer than FREE_MAX are, renamed to ".free-N" in its shard
 *      directory and truncated to 0 bytes instead of unlinked, and the next put writes into it
 *      and renames it to its own final name, instead of creating a file. free_v[0..free_n)
 *      lists them (free_lock, a leaf). They hold no data, are never read, and are swept by
 *      store_open like temporary files. Why: on ext4 without a journal (this project's CI
 *      machine), creating a file scans past every inode freed in the last minute or more
 *      (fs/ext4/ialloc.c, recently_deleted()), reading each from the inode table: with the
 *      chunks of the previous step just deleted, ext4_create was 5% of the daemon's samples in
 *      a 1 GiB torch.save.
 *   7. Error mapping when reading a chunk: missing file -ENOENT; open/read failures, a short file
 *      and a malformed header -EIO; a header that is well formed but whose payload does not
 *      decode, or decodes to bytes whose digest differs, -EBADMSG: the stored content does not
 *      match its name, which fs/ treats as a corrupt step.
 *
 *  11. enc_ps, wr_ps and ratio_ppm are exponential moving averages (weight 1/8 per put, 0 until
 *      the first sample) of what puts took: the wall time of store_encode_tls per raw byte,
 *      of writing and publishing the file per stored byte, and the stored/raw ratio of the
 *      encoded puts. Updates race (load, mix, store, relaxed): a lost sample is harmless to a
 *      heuristic (store_defer_pays).
 *
 * Lock order: sync_lock -> dirty_lock; dirty_lock and cache_lock are leaves; no path holds
 * cache_lock with either of the others.
 */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"
#include "store/store_int.h"

#define NSHARDS 256
#define DEFAULT_CACHE_BYTES (64u * 1024u * 1024u)
#define POOL_BUFS 8 /* invariant 9: 8 x STORE_CHUNK_MAX = 32 MiB at most */
#define DIRECT_ALIGN 4096u /* O_DIRECT offset/length/buffer alignment: a page covers every
			    * logical block size Linux block devices use (512..4096) */
#define TMP_PREFIX ".tmp-"
#define FREE_PREFIX ".free-"
#define FREE_MAX 1024 /* invariant 10: empty files kept for reuse, about one step's chunks */

_Atomic int store_fault_write_errno;
_Atomic int store_fault_direct_einval;

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
	bool dirty[NSHARDS];

	int root_fd;                /* the root directory, for syncfs(2); -1 when read_only */
	pthread_mutex_t sync_lock;  /* serializes store_sync; guards synced_gen (invariant 8) */
	_Atomic uint64_t put_gen;   /* publications so far */
	/* invariant 11: moving averages of the puts' wall time, picoseconds per byte */
	_Atomic uint64_t enc_ps;    /* encoding, per raw byte */
	_Atomic uint64_t wr_ps;     /* writing the file, per stored byte */
	_Atomic uint64_t ratio_ppm; /* stored / raw bytes of the encoded puts, parts per million */
	uint64_t synced_gen;        /* publications known durable */

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

	pthread_mutex_t pool_lock;  /* leaf lock: guards the pool (invariant 9) */
	struct {
		uint8_t *p;
		uint32_t cap;
	} pool[POOL_BUFS];
	unsigned npool;
	uint64_t recycled;          /* loads that decoded into a pooled buffer */

	pthread_mutex_t free_lock;  /* leaf lock: guards free_v, free_n, free_next (invariant 10) */
	struct {
		uint32_t id;        /* the file is chunks/<shard>/.free-<id> */
		uint8_t shard;
	} free_v[FREE_MAX];
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

/* Serialize the 32-byte chunk file header described in store.h. */
static void hdr_encode(const struct chunk_hdr *h, uint8_t out[STORE_HDR_LEN])
{
	memset(out, 0, STORE_HDR_LEN);
	memcpy(out, "CKC1", 4);
	out[4] = h->codec;
	store_put_le32(out + 8, h->raw_size);
	store_put_le32(out + 12, h->payload_size);
	memcpy(out + 16, h->hash.b, STORE_HASH_LEN);
}

/*
 * Parse and validate a header read from disk: magic, known codec, zero reserved bytes, raw size
 * within the chunker bounds, a payload size a put could have written. Returns 0 or -EIO.
 */
static int hdr_decode(const uint8_t in[STORE_HDR_LEN], struct chunk_hdr *ret)
{
	struct chunk_hdr h;

	if (memcmp(in, "CKC1", 4) || in[5] || in[6] || in[7])
		return -EIO;
	h.codec = in[4];
	h.raw_size = store_get_le32(in + 8);
	h.payload_size = store_get_le32(in + 12);
	memcpy(h.hash.b, in + 16, STORE_HASH_LEN);
	if (h.codec > STORE_CODEC_MAX || h.raw_size > STORE_CHUNK_MAX)
		return -EIO;
	if (store_codec_is_raw(h.codec) ? h.payload_size != h.raw_size
				       : h.payload_size > store_payload_bound(h.raw_size))
		return -EIO;
	*ret = h;
	return 0;
}

/* Shard index of a digest: its first byte. */
static unsigned shard_of(const struct store_hash *h)
{
	return h->b[0];
}

/* Write "chunks/XX" of shard s into buf (cap bytes). Returns 0 or -ENAMETOOLONG. */
static int shard_path(const struct store *st, unsigned s, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "%s/%02x", st->chunks, s);

	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	return 0;
}

int store_chunk_path(const struct store *st, const struct store_hash *h, char *buf, size_t cap)
{
	char hex[2 * STORE_HASH_LEN + 1];
	int n;

	n = snprintf(buf, cap, "%s/%02x/%s", st->chunks, shard_of(h), store_hash_hex(h, hex));
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	return 0;
}

/* Read exactly len bytes at off, retrying short reads and EINTR. -EIO on a short file. */
static int pread_all(int fd, void *buf, size_t len, off_t off)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t r = pread(fd, p, len, off);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EIO;
		p += r;
		len -= (size_t)r;
		off += r;
	}
	return 0;
}

/* The test hook store_fault_write_errno: the errno this chunk file write is to fail with (0:
 * none), taken once. */
static int write_fault_by_test(void)
{
	return atomic_exchange(&store_fault_write_errno, 0);
}

/* Write exactly len bytes, retrying short writes and EINTR. Returns 0 or -errno. */
static int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	int fault = write_fault_by_test();

	if (fault)
		return -fault;
	while (len) {
		ssize_t r = write(fd, p, len);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EIO; /* write(2) making no progress: do not spin */
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

/*
 * The test hook store_fault_direct_einval: true, and one fewer left, when this O_DIRECT read or
 * write is to fail as if the filesystem refused it (EINVAL).
 */
static bool direct_refused_by_test(void)
{
	if (atomic_load(&store_fault_direct_einval) <= 0)
		return false;
	atomic_fetch_sub(&store_fault_direct_einval, 1);
	return true;
}

/* Errors of reading a chunk file as documented in store.h (invariant 7). */
static int read_errno(int err)
{
	if (err == -ENOENT || err == -ENOMEM)
		return err;
	return -EIO;
}

/*
 * Validate the header raw of chunk h's file, file_size bytes long: well formed (hdr_decode), its
 * digest is h, and the file is exactly header + payload long. Returns 0 or -EIO.
 */
static int hdr_check(const uint8_t raw[STORE_HDR_LEN], const struct store_hash *h,
		     off_t file_size, struct chunk_hdr *ret)
{
	struct chunk_hdr hdr;

	if (hdr_decode(raw, &hdr) < 0 || memcmp(hdr.hash.b, h->b, STORE_HASH_LEN) ||
	    file_size != (off_t)STORE_HDR_LEN + hdr.payload_size)
		return -EIO;
	*ret = hdr;
	return 0;
}

/*
 * Open chunk h's file and read and validate its header (hdr_check). On success *ret_fd is an
 * owned descriptor.
 * Returns 0, -ENOENT, -ENOMEM or -EIO (paths fit: store_open checked their length).
 */
static int chunk_open(const struct store *st, const struct store_hash *h, int *ret_fd,
		      struct chunk_hdr *ret_hdr)
{
	char path[PATH_MAX];
	uint8_t raw[STORE_HDR_LEN];
	struct chunk_hdr hdr;
	struct stat sb;
	int fd = -1;
	int err;

	err = store_chunk_path(st, h, path, sizeof(path));
	if (err)
		return err;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return read_errno(-errno);
	err = pread_all(fd, raw, sizeof(raw), 0);
	if (err)
		goto fail;
	if (fstat(fd, &sb) < 0) {
		err = -EIO;
		goto fail;
	}
	err = hdr_check(raw, h, sb.st_size, &hdr);
	if (err)
		goto fail;
	*ret_fd = fd;
	*ret_hdr = hdr;
	return 0;
fail:
	close(fd);
	return read_errno(err);
}

/*
 * Per-thread buffers (store_thread_buf): a fresh malloc of 1-4 MiB per chunk load or read reply
 * is a fresh mapping in the daemon (mmap threshold 128 KiB, fs/daemon.c) that page-faults while
 * it is filled; these stay mapped. Freed by the key's destructor at thread exit.
 */
struct thread_bufs {
	struct {
		size_t cap;
		void *p;
	} slot[STORE_TBUF_SLOTS];
};

static pthread_key_t tbuf_key;
static pthread_once_t tbuf_once = PTHREAD_ONCE_INIT;
static bool tbuf_key_ok;

static void tbuf_free(void *arg)
{
	struct thread_bufs *t = arg;

	for (unsigned i = 0; i < STORE_TBUF_SLOTS; i++)
		free(t->slot[i].p);
	free(t);
}

static void tbuf_key_init(void)
{
	tbuf_key_ok = pthread_key_create(&tbuf_key, tbuf_free) == 0;
}

void *store_thread_buf(unsigned slot, size_t len)
{
	struct thread_bufs *t;

	if (slot >= STORE_TBUF_SLOTS)
		return NULL;
	pthread_once(&tbuf_once, tbuf_key_init);
	if (!tbuf_key_ok)
		return NULL;
	t = pthread_getspecific(tbuf_key);
	if (!t) {
		if (!(t = calloc(1, sizeof(*t))))
			return NULL;
		if (pthread_setspecific(tbuf_key, t) != 0) {
			free(t);
			return NULL;
		}
	}
	if (!len)
		len = 1;
	if (t->slot[slot].cap < len) {
		void *n; /* not realloc: the old bytes are not needed */

		/* page-aligned: chunk files are read into it with O_DIRECT (chunk_read_whole) */
		if (posix_memalign(&n, DIRECT_ALIGN, len) != 0)
			return NULL;
		free(t->slot[slot].p);
		t->slot[slot].p = n;
		t->slot[slot].cap = len;
	}
	return t->slot[slot].p;
}

/* ---- buffer pool (invariant 9) ---- */

/*
 * A buffer of at least len (1..STORE_CHUNK_MAX) bytes for a chunk's raw bytes: the smallest
 * pooled one of len..2*len bytes (so an entry never holds more than twice its size); else, when
 * every pooled one is smaller than len, the largest grown to len (realloc keeps its mapped
 * pages); else a new malloc. *ret_cap gets its size. Returns NULL when out of memory.
 */
static uint8_t *buf_get(struct store *st, uint32_t len, uint32_t *ret_cap)
{
	unsigned i, best = POOL_BUFS, big = POOL_BUFS;
	uint8_t *p = NULL;
	uint32_t cap = 0;

	pthread_mutex_lock(&st->pool_lock);
	for (i = 0; i < st->npool; i++) {
		uint32_t c = st->pool[i].cap;

		if (c >= len && c / 2 <= len && (best == POOL_BUFS || c < st->pool[best].cap))
			best = i;
		if (big == POOL_BUFS || c > st->pool[big].cap)
			big = i;
	}
	if (best == POOL_BUFS && big != POOL_BUFS && st->pool[big].cap < len)
		best = big;
	if (best != POOL_BUFS) {
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

/* Give back a buffer of buf_get: to the pool, in place of a smaller one when it is full. */
static void buf_put(struct store *st, uint8_t *p, uint32_t cap)
{
	unsigned i, small = 0;

	pthread_mutex_lock(&st->pool_lock);
	if (st->npool < POOL_BUFS) {
		st->pool[st->npool].p = p;
		st->pool[st->npool++].cap = cap;
		p = NULL;
	} else {
		for (i = 1; i < POOL_BUFS; i++)
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
 * Read all of chunk h's file (header and payload) into this thread's STORE_TBUF_PAYLOAD buffer
 * and validate its header (hdr_check). The file is read with O_DIRECT, in one request rounded up
 * to DIRECT_ALIGN: the bytes land in a buffer the daemon already has mapped instead of in fresh
 * page-cache pages copied from there, which cost 27% of the daemon's CPU in a cold 1 GiB
 * torch.load (perf); it also checks what is on the disk, not a cached copy (the kernel writes
 * back dirty pages of the range first, so a just-written chunk reads correctly). Whatever
 * O_DIRECT cannot do (EINVAL at open, or at a read: a filesystem without it, an offset left
 * unaligned by a short read) goes on through the page cache.
 * On success *ret_file points at the file's bytes (not owned; valid until this thread's next
 * store_thread_buf(STORE_TBUF_PAYLOAD)). Returns 0, -ENOENT, -ENOMEM or -EIO.
 */
static int chunk_read_whole(const struct store *st, const struct store_hash *h,
			    struct chunk_hdr *ret_hdr, uint8_t **ret_file)
{
	char path[PATH_MAX];
	struct stat sb;
	uint8_t *buf;
	size_t size, want, got;
	bool direct = true;
	int fd, fl, err;

	err = store_chunk_path(st, h, path, sizeof(path));
	if (err)
		return err;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
	if (fd < 0 && errno == EINVAL) {
		direct = false;
		fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (fd < 0)
		return read_errno(-errno);
	if (fstat(fd, &sb) < 0 || sb.st_size < (off_t)STORE_HDR_LEN ||
	    sb.st_size > (off_t)(STORE_HDR_LEN + store_payload_bound(STORE_CHUNK_MAX))) {
		err = -EIO;
		goto out;
	}
	size = (size_t)sb.st_size;
	want = (size + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN; /* past EOF: a short read */
	buf = store_thread_buf(STORE_TBUF_PAYLOAD, want);
	if (!buf) {
		err = -ENOMEM;
		goto out;
	}
	for (got = 0; got < size;) {
		ssize_t r;

		if (direct && direct_refused_by_test()) {
			r = -1;
			errno = EINVAL;
		} else {
			r = pread(fd, buf + got, want - got, (off_t)got);
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EINVAL && direct) {
			fl = fcntl(fd, F_GETFL);
			if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) < 0) {
				err = -EIO;
				goto out;
			}
			direct = false;
			continue;
		}
		if (r < 0) {
			err = read_errno(-errno);
			goto out;
		}
		if (r == 0) {
			err = -EIO; /* the file shrank under us */
			goto out;
		}
		got += (size_t)r;
	}
	err = hdr_check(buf, h, (off_t)size, ret_hdr);
	if (!err)
		*ret_file = buf;
out:
	close(fd);
	return err;
}

/*
 * Load chunk h from disk, decode it and check its digest (invariants 2 and 7).
 * On success *ret_data is a buffer of buf_get (give it back with buf_put(st, data, *ret_cap))
 * holding *ret_size bytes. Returns 0, -ENOENT, -EIO, -EBADMSG or -ENOMEM.
 */
static int chunk_load(struct store *st, const struct store_hash *h, uint8_t **ret_data,
		      uint32_t *ret_size, uint32_t *ret_cap)
{
	struct chunk_hdr hdr;
	struct store_hash got;
	uint8_t *file; /* this thread's (store_thread_buf), not freed here */
	uint8_t *data;
	uint32_t cap = 0;
	int err;

	err = chunk_read_whole(st, h, &hdr, &file);
	if (err)
		return err;
	data = buf_get(st, hdr.raw_size ? hdr.raw_size : 1, &cap);
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
	buf_put(st, data, cap);
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
	buf_put(st, e->data, e->cap);
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
 * entries until cache_used <= cache_cap.
 */
static struct cache_ent *cache_insert(struct store *st, struct cache_ent *e)
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
static void cache_drop(struct store *st, const struct store_hash *h)
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
 * caller (release with cache_put); it may be unlinked (too large to cache). Returns 0 or the
 * errors of chunk_load.
 */
static int chunk_get(struct store *st, const struct store_hash *h, struct cache_ent **ret)
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
		pthread_cond_wait(&st->load_cv, &st->cache_lock);
	}
	me.hash = *h;
	me.next = st->loading;
	st->loading = &me;
	st->loads++;
	pthread_mutex_unlock(&st->cache_lock);

	err = chunk_load(st, h, &data, &size, &cap);
	e = NULL;
	if (!err && !(e = calloc(1, sizeof(*e)))) {
		buf_put(st, data, cap);
		err = -ENOMEM;
	}
	if (!err) {
		e->hash = *h;
		e->data = data;
		e->size = size;
		e->cap = cap;
		e->refs = 1;
		if (cap <= st->cache_cap)
			e = cache_insert(st, e);
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

/* ---- directories ---- */

/* mkdir mode 0700, an existing directory is fine. Sets *created when it made one. */
static int mkdir_0700(const char *path, bool *created)
{
	if (mkdir(path, 0700) == 0) {
		*created = true;
		return 0;
	}
	if (errno == EEXIST)
		return 0;
	return -errno;
}

/* fsync a directory. Returns 0 or -EIO (or the -errno of open). */
static int fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int err = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		err = -EIO;
	close(fd);
	return err;
}

/* True when name is exactly 32 hex digits; parses it into *ret. */
static bool name_is_hash(const char *name, struct store_hash *ret)
{
	return strlen(name) == 2 * STORE_HASH_LEN && store_hash_parse(name, ret) == 0;
}

/*
 * Create root, root/chunks and the 256 shard directories (mode 0700) and remove temporary files
 * left by puts that never finished (invariant 1). When something was created, fsync its parent
 * so the layout survives a crash. Returns 0 or -errno.
 */
static int store_prepare(struct store *st)
{
	char path[PATH_MAX];
	bool made_root = false, made_chunks = false, made_shard = false;
	unsigned s;
	int err;

	err = mkdir_0700(st->root, &made_root);
	if (err)
		return err;
	err = mkdir_0700(st->chunks, &made_chunks);
	if (err)
		return err;
	for (s = 0; s < NSHARDS; s++) {
		DIR *d;
		struct dirent *de;

		err = shard_path(st, s, path, sizeof(path));
		if (err)
			return err;
		err = mkdir_0700(path, &made_shard);
		if (err)
			return err;
		d = opendir(path);
		if (!d)
			return -errno;
		while ((de = readdir(d))) {
			if (strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) &&
			    strncmp(de->d_name, FREE_PREFIX, strlen(FREE_PREFIX)))
				continue;
			/* A concurrent sweeper may have won: ENOENT is fine. */
			if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT) {
				err = -errno;
				closedir(d);
				return err;
			}
		}
		closedir(d);
	}
	if (made_shard) {
		err = fsync_dir(st->chunks);
		if (err)
			return err;
	}
	if (made_chunks) {
		err = fsync_dir(st->root);
		if (err)
			return err;
	}
	return 0;
}

int store_open(const char *root, const struct store_opts *opts, struct store **ret)
{
	static const struct store_opts defaults;
	struct store *st;
	size_t want;
	int err;

	if (!opts)
		opts = &defaults;
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	pthread_mutex_init(&st->dirty_lock, NULL);
	pthread_mutex_init(&st->cache_lock, NULL);
	pthread_mutex_init(&st->pool_lock, NULL);
	pthread_mutex_init(&st->free_lock, NULL);
	pthread_cond_init(&st->load_cv, NULL);
	pthread_mutex_init(&st->sync_lock, NULL);
	st->root_fd = -1;
	st->zstd_level = opts->zstd_level > 0 ? opts->zstd_level : 1;
	st->verify_dedup_hits = opts->verify_dedup_hits;
	st->read_only = opts->read_only;
	st->cache_cap = opts->cache_bytes ? opts->cache_bytes : DEFAULT_CACHE_BYTES;
	/* About two buckets per minimum-size chunk the cache can hold; chains absorb the rest. */
	want = st->cache_cap / (STORE_CHUNK_MIN / 2);
	st->nbuckets = 64;
	while (st->nbuckets < want && st->nbuckets < ((size_t)1 << 20))
		st->nbuckets <<= 1;
	st->buckets = calloc(st->nbuckets, sizeof(*st->buckets));
	st->root = strdup(root);
	if (!st->buckets || !st->root || asprintf(&st->chunks, "%s/chunks", root) < 0) {
		st->chunks = NULL;
		err = -ENOMEM;
		goto fail;
	}
	/* Longest path built later: chunks + "/XX/" + 32 hex digits (invariant of the helpers). */
	if (strlen(st->chunks) + 4 + 2 * STORE_HASH_LEN >= PATH_MAX) {
		err = -ENAMETOOLONG;
		goto fail;
	}
	if (st->read_only) {
		struct stat sb;

		if (stat(st->chunks, &sb) < 0) {
			err = -errno;
			goto fail;
		}
		if (!S_ISDIR(sb.st_mode)) {
			err = -ENOTDIR;
			goto fail;
		}
	} else {
		err = store_prepare(st);
		if (err)
			goto fail;
		st->root_fd = open(st->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (st->root_fd < 0) {
			err = -errno;
			goto fail;
		}
	}
	*ret = st;
	return 0;
fail:
	store_close(st);
	return err;
}

void store_close(struct store *st)
{
	struct cache_ent *e, *next;

	if (!st)
		return;
	for (e = st->lru_head; e; e = next) {
		next = e->lru_next;
		/* No reader may hold a reference once the handle is being closed. */
		assert(e->refs == 1);
		ent_free(st, e);
	}
	for (unsigned i = 0; i < st->npool; i++)
		free(st->pool[i].p);
	free(st->buckets);
	free(st->chunks);
	free(st->root);
	if (st->root_fd >= 0)
		close(st->root_fd);
	pthread_mutex_destroy(&st->sync_lock);
	pthread_mutex_destroy(&st->dirty_lock);
	pthread_mutex_destroy(&st->cache_lock);
	pthread_mutex_destroy(&st->pool_lock);
	pthread_mutex_destroy(&st->free_lock);
	pthread_cond_destroy(&st->load_cv);
	free(st);
}

/* Record shard s as needing an fsync at the next store_sync (invariant 5). */
static void mark_dirty(struct store *st, unsigned s)
{
	pthread_mutex_lock(&st->dirty_lock);
	st->dirty[s] = true;
	pthread_mutex_unlock(&st->dirty_lock);
}

/* Fill a chunk info from a header. */
static void info_from_hdr(const struct chunk_hdr *h, bool existed, struct store_chunk_info *ret)
{
	memset(ret, 0, sizeof(*ret));
	ret->hash = h->hash;
	ret->raw_size = h->raw_size;
	ret->stored_size = STORE_HDR_LEN + h->payload_size;
	ret->codec = h->codec;
	ret->existed = existed;
}

/*
 * The dedup check of a put. Returns 1 when a sound copy of h is stored (fills *ret_hdr), 0 when
 * it must be written (absent, or a damaged copy that the put will replace), -EBADMSG when
 * verify_dedup_hits finds a sound chunk with digest h holding other bytes (an XXH3-128
 * collision), or -ENOMEM.
 */
static int put_existing(struct store *st, const struct store_hash *h, const void *buf, size_t len,
			struct chunk_hdr *ret_hdr)
{
	struct chunk_hdr hdr;
	uint8_t *data;
	uint32_t size, cap;
	int fd;
	int err;

	err = chunk_open(st, h, &fd, &hdr);
	if (err)
		return err == -ENOMEM ? err : 0;
	close(fd);
	if (st->verify_dedup_hits) {
		err = chunk_load(st, h, &data, &size, &cap);
		if (err == -ENOMEM)
			return err;
		if (err)
			return 0; /* damaged copy: rewrite it */
		err = size == len && !memcmp(data, buf, len) ? 1 : -EBADMSG;
		buf_put(st, data, cap);
		if (err < 0)
			return err;
	}
	*ret_hdr = hdr;
	return 1;
}

/*
 * One O_DIRECT write of buf's len bytes (a multiple of DIRECT_ALIGN) at offset 0 of fd, retrying
 * short writes and EINTR. Returns the bytes written: len, or fewer when the filesystem refused
 * O_DIRECT (EINVAL: no O_DIRECT support, or a short write left the offset unaligned), after which
 * the caller writes the rest through the page cache. *ret_err gets 0 or the -errno of any other
 * failure.
 */
static size_t pwrite_direct(int fd, const uint8_t *buf, size_t len, int *ret_err)
{
	size_t done = 0;
	int fault = write_fault_by_test();

	*ret_err = -fault;
	while (!fault && done < len) {
		ssize_t r;

		if (direct_refused_by_test()) {
			r = -1;
			errno = EINVAL;
		} else {
			r = pwrite(fd, buf + done, len - done, (off_t)done);
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EINVAL)
			break;
		if (r < 0) {
			*ret_err = -errno;
			break;
		}
		if (r == 0) {
			*ret_err = -EIO; /* no progress: do not spin */
			break;
		}
		done += (size_t)r;
	}
	return done;
}

/*
 * Write a new chunk file's bytes, header then payload, to fd (empty, offset 0). Its whole
 * DIRECT_ALIGN blocks go with O_DIRECT from this thread's STORE_TBUF_WRITE buffer (header and
 * payload copied into it), the last partial block through the page cache. Written through the
 * page cache alone, the kernel's copy into freshly allocated page-cache pages
 * (copy_folio_from_iter_atomic, clear_page) took 32% of the daemon's CPU in a 1 GiB torch.save
 * (perf, 2-core VM), and the pages are then written back anyway; O_DIRECT moves the bytes from a
 * buffer the worker has mapped already. On this VM's disk, fio 1 MiB sequential writes of 1 GiB:
 * 1521 MB/s at 10% system CPU with O_DIRECT, 945 MB/s at 58% buffered. Whatever O_DIRECT cannot
 * do (a filesystem without it, tmpfs before Linux 6.6 for one), or a thread that cannot get its
 * buffer (ENOMEM), goes through the page cache.
 * Durability is store_sync's either way: O_DIRECT does not flush the disk's cache or commit the
 * file's size. Returns 0 or -errno (-ENOSPC, -EIO, ...).
 */
static int write_chunk_file(int fd, const uint8_t *hdr, const void *payload, size_t payload_len)
{
	size_t size = STORE_HDR_LEN + payload_len;
	size_t whole = size / DIRECT_ALIGN * DIRECT_ALIGN, done = 0;
	uint8_t *b = whole ? store_thread_buf(STORE_TBUF_WRITE, whole) : NULL;
	int fl = b ? fcntl(fd, F_GETFL) : -1;
	int err = 0;

	if (fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0) {
		memcpy(b, hdr, STORE_HDR_LEN);
		memcpy(b + STORE_HDR_LEN, payload, whole - STORE_HDR_LEN);
		done = pwrite_direct(fd, b, whole, &err);
		if (fcntl(fd, F_SETFL, fl) < 0 && !err)
			err = -errno;
		if (err)
			return err;
		if (lseek(fd, (off_t)done, SEEK_SET) < 0)
			return -errno;
	}
	if (done < STORE_HDR_LEN) {
		if ((err = write_all(fd, hdr + done, STORE_HDR_LEN - done)) < 0)
			return err;
		done = STORE_HDR_LEN;
	}
	return write_all(fd, (const uint8_t *)payload + (done - STORE_HDR_LEN), size - done);
}

/* The path of free file id in shard s (invariant 10) into buf; 0 or -ENAMETOOLONG. */
static int free_path(const struct store *st, unsigned s, uint32_t id, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "%s/%02x/" FREE_PREFIX "%" PRIu32, st->chunks, s, id);

	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/*
 * Open a free file for writing (invariant 10), its path into tmp and its shard into *ret_s:
 * the fd, or -1 when there is none (or it cannot be opened: then it is dropped).
 */
static int free_take(struct store *st, char *tmp, size_t cap, unsigned *ret_s)
{
	for (;;) {
		uint32_t id;
		unsigned s;
		int fd;

		pthread_mutex_lock(&st->free_lock);
		if (st->free_n == 0) {
			pthread_mutex_unlock(&st->free_lock);
			return -1;
		}
		st->free_n--;
		id = st->free_v[st->free_n].id;
		s = st->free_v[st->free_n].shard;
		pthread_mutex_unlock(&st->free_lock);
		if (free_path(st, s, id, tmp, cap) < 0)
			return -1;
		fd = open(tmp, O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			*ret_s = s;
			return fd;
		}
		unlink(tmp); /* best effort; store_open sweeps what is left */
	}
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Mix sample v into the moving average *avg (invariant 11). */
static void ewma(_Atomic uint64_t *avg, uint64_t v)
{
	uint64_t a = atomic_load_explicit(avg, memory_order_relaxed);

	atomic_store_explicit(avg, a ? a - a / 8 + v / 8 : v, memory_order_relaxed);
}

/*
 * Write header + payload to a free file (invariant 10) or else a new temporary file in shard s
 * (write_chunk_file), start the writeback of what went through the page cache, and rename it to
 * path (durable at the next store_sync, invariant 8). With swap (store_chunk_recode), the file is
 * fdatasync'd instead and exchanged with the copy at path (-ENOENT, nothing changed, when there
 * is none), and the old copy unlinked. On failure the file written is gone.
 * Returns 0 or -errno (-ENOSPC, -EIO, ...).
 */
static int publish(struct store *st, unsigned s, const char *path, const uint8_t *hdr,
		   const void *payload, size_t payload_len, bool swap)
{
	char tmp[PATH_MAX];
	unsigned from = s;
	int fd = -1;
	int err;
	int n;

	fd = free_take(st, tmp, sizeof(tmp), &from);
	if (fd < 0) {
		n = snprintf(tmp, sizeof(tmp), "%s/%02x/" TMP_PREFIX "XXXXXX", st->chunks, s);
		if (n < 0 || (size_t)n >= sizeof(tmp))
			return -ENAMETOOLONG;
		fd = mkostemp(tmp, O_CLOEXEC); /* O_CREAT | O_EXCL, mode 0600 */
		if (fd < 0)
			return -errno;
	}
	err = write_chunk_file(fd, hdr, payload, payload_len);
	/* start writeback now so the disk works while the writer goes on; store_sync waits for it.
	 * A swap replaces a durable copy: the new one must be durable before its name is. */
	if (!err && swap && fdatasync(fd) < 0)
		err = -errno;
	else if (!err)
		(void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
	if (close(fd) < 0 && !err)
		err = errno == EINTR ? -EIO : -errno;
	if (!err && swap) {
		/* the old copy goes to tmp's name; without an old copy (deleted) nothing moves */
		if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_EXCHANGE) < 0)
			err = errno == ENOENT ? -ENOENT : -errno;
	} else if (!err && rename(tmp, path) < 0) {
		err = -errno;
	}
	if (err || swap)
		unlink(tmp);
	if (err)
		return err;
	mark_dirty(st, s);
	if (from != s)
		mark_dirty(st, from);
	atomic_fetch_add(&st->put_gen, 1);
	return 0;
}

int store_chunk_put(struct store *st, const void *buf, size_t len, struct store_chunk_info *ret)
{
	struct store_hash h;

	if (len == 0 || len > STORE_CHUNK_MAX)
		return -EINVAL;
	store_hash_buf(buf, len, &h);
	return store_chunk_put_hashed(st, buf, len, &h, 0, ret);
}

int store_chunk_put_hashed(struct store *st, const void *buf, size_t len,
			   const struct store_hash *h, unsigned flags,
			   struct store_chunk_info *ret)
{
	char path[PATH_MAX];
	uint8_t raw_hdr[STORE_HDR_LEN];
	struct chunk_hdr hdr;
	const void *payload = NULL; /* this thread's (store_encode_tls) or buf itself */
	size_t payload_len;
	uint8_t codec;
	int err;

	if (len == 0 || len > STORE_CHUNK_MAX)
		return -EINVAL;
	if (st->read_only)
		return -EROFS;
	hdr.hash = *h;
	err = store_chunk_path(st, &hdr.hash, path, sizeof(path));
	if (err)
		return err;
	err = put_existing(st, &hdr.hash, buf, len, &hdr);
	if (err < 0)
		return err;
	if (err == 1) {
		info_from_hdr(&hdr, true, ret);
		return 0;
	}
	uint64_t t0 = now_ns(), t1;

	if (flags & STORE_PUT_DEFER) {
		payload = buf;
		payload_len = len;
		codec = STORE_CODEC_DEFERRED;
	} else {
		err = store_encode_tls(buf, len, st->zstd_level, &payload, &payload_len, &codec);
		if (err)
			return err;
		t1 = now_ns();
		ewma(&st->enc_ps, (t1 - t0) * 1000 / len);
		ewma(&st->ratio_ppm, (uint64_t)payload_len * 1000000 / len);
		t0 = t1;
	}
	hdr.codec = codec;
	hdr.raw_size = (uint32_t)len;
	hdr.payload_size = (uint32_t)payload_len;
	hdr_encode(&hdr, raw_hdr);
	err = publish(st, shard_of(&hdr.hash), path, raw_hdr, payload, payload_len, false);
	if (err)
		return err;
	ewma(&st->wr_ps, (now_ns() - t0) * 1000 / (payload_len + STORE_HDR_LEN));
	info_from_hdr(&hdr, false, ret);
	return 0;
}

bool store_defer_pays(struct store *st)
{
	uint64_t enc = atomic_load_explicit(&st->enc_ps, memory_order_relaxed);
	uint64_t wr = atomic_load_explicit(&st->wr_ps, memory_order_relaxed);
	uint64_t ratio = atomic_load_explicit(&st->ratio_ppm, memory_order_relaxed);

	if (!enc || !wr || !ratio)
		return false;
	/* raw costs wr per byte; encoded, enc + wr * ratio */
	return wr * (1000000 - (ratio < 1000000 ? ratio : 1000000)) / 1000000 < enc;
}

int store_chunk_recode(struct store *st, const struct store_hash *h,
		       struct store_chunk_info *ret)
{
	char path[PATH_MAX];
	uint8_t raw_hdr[STORE_HDR_LEN];
	struct chunk_hdr hdr;
	struct store_hash got;
	const void *payload;
	size_t payload_len;
	uint8_t codec, *file;
	int err;

	if (st->read_only)
		return -EROFS;
	err = chunk_read_whole(st, h, &hdr, &file);
	if (err)
		return err;
	if (hdr.codec != STORE_CODEC_DEFERRED) {
		info_from_hdr(&hdr, true, ret);
		return 0;
	}
	store_hash_buf(file + STORE_HDR_LEN, hdr.raw_size, &got);
	if (memcmp(got.b, h->b, STORE_HASH_LEN))
		return -EBADMSG;
	/* file stays in this thread's STORE_TBUF_PAYLOAD slot: the encoder and the write below
	 * use buffers of their own (codec.c's, STORE_TBUF_WRITE) */
	err = store_encode_tls(file + STORE_HDR_LEN, hdr.raw_size, st->zstd_level, &payload,
			       &payload_len, &codec);
	if (!err)
		err = store_chunk_path(st, h, path, sizeof(path));
	if (!err) {
		hdr.codec = codec;
		hdr.payload_size = (uint32_t)payload_len;
		hdr_encode(&hdr, raw_hdr);
		err = publish(st, shard_of(h), path, raw_hdr, payload, payload_len, true);
	}
	if (err)
		return err;
	info_from_hdr(&hdr, true, ret);
	return 0;
}

int store_sync(struct store *st)
{
	bool todo[NSHARDS];
	bool any = false;
	uint64_t want = atomic_load(&st->put_gen), gen;
	int err = 0;

	if (st->read_only)
		return 0;
	pthread_mutex_lock(&st->sync_lock);
	/* publications counted from here on may or may not be covered: only those before it are */
	gen = atomic_load(&st->put_gen);
	pthread_mutex_lock(&st->dirty_lock);
	memcpy(todo, st->dirty, sizeof(todo));
	memset(st->dirty, 0, sizeof(st->dirty));
	pthread_mutex_unlock(&st->dirty_lock);
	for (unsigned s = 0; s < NSHARDS && !any; s++)
		any = todo[s];
	if (st->synced_gen >= want && !any)
		goto out; /* a concurrent store_sync already covered every put the caller made */
	/* one flush of the whole filesystem: every chunk's data, its rename, the shard directories
	 * (Linux >= 5.8 reports writeback errors from syncfs) */
	if (syncfs(st->root_fd) < 0) {
		err = -EIO;
		pthread_mutex_lock(&st->dirty_lock);
		for (unsigned s = 0; s < NSHARDS; s++)
			st->dirty[s] = st->dirty[s] || todo[s]; /* invariant 5: retry next time */
		pthread_mutex_unlock(&st->dirty_lock);
		goto out;
	}
	if (gen > st->synced_gen)
		st->synced_gen = gen;
out:
	pthread_mutex_unlock(&st->sync_lock);
	return err;
}

int store_chunk_stat(struct store *st, const struct store_hash *h, struct store_chunk_info *ret)
{
	struct chunk_hdr hdr;
	int fd;
	int err;

	err = chunk_open(st, h, &fd, &hdr);
	if (err)
		return err == -ENOENT ? err : -EIO;
	close(fd);
	info_from_hdr(&hdr, true, ret);
	return 0;
}

ssize_t store_chunk_pread(struct store *st, const struct store_hash *h, void *buf, size_t len,
			  uint64_t off)
{
	struct cache_ent *e;
	size_t n;
	int err;

	err = chunk_get(st, h, &e);
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
	int err = chunk_get(st, h, &e);

	if (err)
		return err;
	*ret_data = e->data; /* immutable while referenced (invariant 3) */
	*ret_size = e->size;
	*ret_hold = (struct store_hold *)e;
	return 0;
}

void store_chunk_release(struct store *st, struct store_hold *hold)
{
	if (hold)
		cache_put(st, (struct cache_ent *)hold);
}

void store_cache_figures(struct store *st, uint64_t *ret_hits, uint64_t *ret_loads,
			 uint64_t *ret_recycled)
{
	pthread_mutex_lock(&st->cache_lock);
	*ret_hits = st->hits;
	*ret_loads = st->loads;
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

	err = chunk_load(st, h, &data, &size, &cap);
	if (err)
		return err;
	buf_put(st, data, cap);
	return 0;
}

/*
 * Delete the chunk file at path, in shard s, by making it a free file (invariant 10). Returns 0,
 * or -1 when the caller must unlink it instead (the list is full, or the rename failed: the
 * file is then where it was; if only the truncation failed, it is gone).
 */
static int free_give(struct store *st, unsigned s, const char *path)
{
	char fpath[PATH_MAX];
	uint32_t id;

	pthread_mutex_lock(&st->free_lock);
	if (st->free_n >= FREE_MAX) {
		pthread_mutex_unlock(&st->free_lock);
		return -1;
	}
	id = st->free_next++;
	pthread_mutex_unlock(&st->free_lock);
	if (free_path(st, s, id, fpath, sizeof(fpath)) < 0 || rename(path, fpath) < 0)
		return -1;
	mark_dirty(st, s);
	if (truncate(fpath, 0) < 0) { /* the blocks go back now, as an unlink would give them */
		unlink(fpath);
		return 0;
	}
	bool listed = false;

	pthread_mutex_lock(&st->free_lock);
	if (st->free_n < FREE_MAX) {
		st->free_v[st->free_n].id = id;
		st->free_v[st->free_n++].shard = (uint8_t)s;
		listed = true;
	}
	pthread_mutex_unlock(&st->free_lock);
	if (!listed) /* others filled the list meanwhile */
		unlink(fpath);
	return 0;
}

int store_chunk_delete(struct store *st, const struct store_hash *h)
{
	char path[PATH_MAX];
	int err;

	if (st->read_only)
		return -EROFS;
	err = store_chunk_path(st, h, path, sizeof(path));
	if (err)
		return err;
	cache_drop(st, h);
	if (free_give(st, shard_of(h), path) == 0)
		return 0;
	if (unlink(path) < 0)
		return -errno;
	mark_dirty(st, shard_of(h));
	return 0;
}

int store_chunk_foreach(struct store *st,
			int (*fn)(const struct store_hash *h, uint64_t stored_size, void *arg),
			void *arg)
{
	char path[PATH_MAX];
	struct store_hash h;
	struct dirent *de;
	struct stat sb;
	unsigned s;
	DIR *d;
	int err;

	for (s = 0; s < NSHARDS; s++) {
		err = shard_path(st, s, path, sizeof(path));
		if (err)
			return err;
		d = opendir(path);
		if (!d) {
			if (errno == ENOENT)
				continue; /* never created (read_only handle on a partial store) */
			return -errno;
		}
		for (;;) {
			errno = 0;
			de = readdir(d);
			if (!de) {
				err = -errno;
				break;
			}
			if (!name_is_hash(de->d_name, &h))
				continue;
			if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 ||
			    !S_ISREG(sb.st_mode))
				continue; /* deleted meanwhile, or not a chunk file */
			err = fn(&h, (uint64_t)sb.st_size, arg);
			if (err)
				break;
		}
		closedir(d);
		if (err)
			return err;
	}
	return 0;
}
