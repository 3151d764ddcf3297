/*
 * chunkstore.c — the content-addressed directory of chunk files: opening a store, publishing,
 * recoding, syncing, deleting and listing chunks. The invariants below cover the whole store;
 * chunkfile.c (one chunk file on disk) and chunkcache.c (the read cache and buffer pool) keep
 * the ones they name.
 *
 * Layout and chunk file format: see store.h. Publication follows git's object-file.c: write a
 * temporary file in the destination directory and rename it to its final name; the data is made
 * durable in batches by store_sync (one syncfs(2) of the store's filesystem for every chunk put
 * since the last one) rather than one fdatasync per chunk, which would cost a disk flush per MiB.
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
 *   9. An entry's buffer, when the entry is freed, goes to a pool of at most STORE_POOL_BUFS
 *      buffers (each <= STORE_CHUNK_MAX bytes, so at most 32 MiB besides the cache) that the next
 *      loads decode into. A fresh 1-4 MiB malloc is a fresh mapping in the daemon (mmap
 *      threshold 128 KiB, fs/fuse/daemon.c) that page-faults page by page as it is filled and is
 *      unmapped at eviction.
 *      pool_lock is a leaf lock, taken with no other store lock held.
 *   5. dirty[] marks shard directories whose entries changed (rename, unlink) since the last
 *      successful store_sync; a shard is unmarked only by a store_sync whose syncfs has
 *      already succeeded, and is re-marked when that syncfs fails.
 *   8. put_gen counts completed publications; synced_gen <= put_gen, and every put whose
 *      publication was counted at or below synced_gen is durable (data and name). synced_gen only
 *      grows, only under sync_lock, and only after a syncfs that began after those publications.
 *   6. A read_only store never creates, writes, renames or unlinks anything.
 *  10. A deleted chunk file is, while fewer than STORE_FREE_MAX are, renamed to ".free-N" in its
 *      shard directory and truncated to 0 bytes instead of unlinked, and the next put writes
 *      into it and renames it to its own final name, instead of creating a file. free_v[0..free_n)
 *      lists them (free_lock, a leaf). They hold no data, are never read, and are swept by
 *      store_open like temporary files. Why: on ext4 without a journal (this project's CI
 *      machine), creating a file scans past every inode freed in the last minute or more
 *      (fs/ext4/ialloc.c, recently_deleted()), reading each from the inode table, and the chunks
 *      of the previous step are deleted just before those of the next are written.
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
 *  12. chunks/ and its shard directories are real directories, not symbolic links (checked by
 *      store_open), and no chunk, temporary or free file is opened through a link (O_NOFOLLOW):
 *      the owner of the store may plant links, and the daemon may run as root.
 *  13. The mount's check (store_chunks_verify with keep) reads each chunk once for itself and
 *      for the reader that follows it. While the chunks it left in the page cache (primed_bytes,
 *      raw) are fewer than keep->page_bytes, it reads through the page cache, leaves the pages
 *      there and lists the digest in primed; past that, it reads with O_DIRECT. A chunk it
 *      verified is linked into the cache when cache_used stays within keep->cache_bytes, and
 *      nothing is evicted for it (the first chunks in the order given stay for the reader, who
 *      reads in that order). A load of a listed chunk (STORE_RD_DIRECT: its reader's, when it
 *      is not in the cache) takes the file from the page cache if all of it is still there
 *      (mincore, then RWF_NOWAIT; chunkfile.c all_cached), else reads the disk once, with
 *      O_DIRECT; the bytes are re-hashed before use either way
 *      (invariant 2): the page cache holds what the check read from the disk, and a copy that
 *      differs fails the digest as the disk's would. store_chunk_recode of a listed chunk
 *      writes its new copy through the page cache too, so that the reader finds that one
 *      there. The page cache is the kernel's to reclaim; the daemon's own memory stays
 *      cache_cap, plus 16 bytes per listed chunk (one step's chunks per layout and mount).
 *      primed is sorted (and primed_ready set) when the check ends; until then nothing is
 *      looked up in it. It is freed when the store closes.
 *
 * Lock order: sync_lock -> dirty_lock; dirty_lock and cache_lock are leaves; no path holds
 * cache_lock with either of the others. primed_lock is a leaf.
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

#define DEFAULT_CACHE_BYTES (64u * 1024u * 1024u)
#define TMP_PREFIX ".tmp-"
#define FREE_PREFIX ".free-"

/* Write "chunks/XX" of shard s into buf (cap bytes). Returns 0 or -ENAMETOOLONG. */
static int shard_path(const struct store *st, unsigned s, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "%s/%02x", st->chunks, s);

	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	return 0;
}

/* ---- directories ---- */

/*
 * mkdir mode 0700, an existing directory is fine, a symbolic link is not (invariant 12). Sets
 * *created when it made one. Returns 0, -ELOOP (a link), -ENOTDIR or the -errno of mkdir.
 */
static int mkdir_0700(const char *path, bool *created)
{
	struct stat sb;

	if (mkdir(path, 0700) == 0) {
		*created = true;
		return 0;
	}
	if (errno != EEXIST)
		return -errno;
	if (lstat(path, &sb) < 0)
		return -errno;
	if (S_ISLNK(sb.st_mode))
		return -ELOOP;
	return S_ISDIR(sb.st_mode) ? 0 : -ENOTDIR;
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
	bool made_chunks = false, made_shard = false;
	unsigned s;
	int err;

	/* the root itself is the caller's path: a link there is the caller's choice */
	if (mkdir(st->root, 0700) < 0 && errno != EEXIST)
		return -errno;
	err = mkdir_0700(st->chunks, &made_chunks);
	if (err)
		return err;
	for (s = 0; s < STORE_NSHARDS; s++) {
		DIR *d;
		struct dirent *de;

		err = shard_path(st, s, path, sizeof(path));
		if (err)
			return err;
		err = mkdir_0700(path, &made_shard);
		if (err)
			return err;
		int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

		if (fd < 0)
			return -errno;
		d = fdopendir(fd);
		if (!d) {
			err = -errno;
			close(fd);
			return err;
		}
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
	pthread_mutex_init(&st->primed_lock, NULL);
	pthread_cond_init(&st->load_cv, NULL);
	pthread_mutex_init(&st->sync_lock, NULL);
	st->root_fd = -1;
	st->zstd_level = opts->zstd_level > 0 ? opts->zstd_level : 1;
	st->verify_dedup_hits = opts->verify_dedup_hits;
	st->read_only = opts->read_only;
	st->cache_cap = opts->cache_bytes ? opts->cache_bytes : DEFAULT_CACHE_BYTES;
	st->root = strdup(root);
	if (store_cache_init(st) < 0 || !st->root ||
	    asprintf(&st->chunks, "%s/chunks", root) < 0) {
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

		if (lstat(st->chunks, &sb) < 0) {
			err = -errno;
			goto fail;
		}
		if (!S_ISDIR(sb.st_mode)) {
			err = S_ISLNK(sb.st_mode) ? -ELOOP : -ENOTDIR;
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
	if (!st)
		return;
	store_cache_free(st);
	free(st->chunks);
	free(st->root);
	if (st->root_fd >= 0)
		close(st->root_fd);
	pthread_mutex_destroy(&st->sync_lock);
	pthread_mutex_destroy(&st->dirty_lock);
	pthread_mutex_destroy(&st->cache_lock);
	pthread_mutex_destroy(&st->pool_lock);
	pthread_mutex_destroy(&st->free_lock);
	pthread_mutex_destroy(&st->primed_lock);
	free(st->primed);
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

	err = store_chunk_open(st, h, &fd, &hdr);
	if (err)
		return err == -ENOMEM ? err : 0;
	close(fd);
	if (st->verify_dedup_hits) {
		err = store_chunk_load(st, h, true, STORE_RD_DIRECT, &data, &size, &cap);
		if (err == -ENOMEM)
			return err;
		if (err)
			return 0; /* damaged copy: rewrite it */
		err = size == len && !memcmp(data, buf, len) ? 1 : -EBADMSG;
		store_buf_put(st, data, cap);
		if (err < 0)
			return err;
	}
	*ret_hdr = hdr;
	return 1;
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
		fd = open(tmp, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
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

/* Chunk files at least this long (bytes) start their writeback as soon as they are written. */
#define EARLY_WRITEBACK_MIN (64u << 10)

/*
 * Write header + payload to a free file (invariant 10) or else a new temporary file in shard s
 * (store_chunk_write_file), start the writeback of what went through the page cache, and rename
 * it to path (durable at the next store_sync, invariant 8). With swap (store_chunk_recode), the
 * file is fdatasync'd instead and exchanged with the copy at path (-ENOENT, nothing changed, when there
 * is none), and the old copy unlinked. keep_pages: written through the page cache alone, its
 * pages left there (store_chunk_write_file). On failure the file written is gone.
 * Returns 0 or -errno (-ENOSPC, -EIO, ...).
 */
static int publish(struct store *st, unsigned s, const char *path, const uint8_t *hdr,
		   const void *payload, size_t payload_len, bool swap, bool keep_pages)
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
	err = store_chunk_write_file(fd, hdr, payload, payload_len, keep_pages);
	/* start writeback now so the disk works while the writer goes on; store_sync waits for it.
	 * A small file is left to store_sync, which writes many of them in one plugged batch: one
	 * disk request each here is a measurable part of a small file's save (RESULTS.md, "Small
	 * files"). A swap replaces a durable copy: the new one must be durable before its
	 * name is. */
	if (!err && swap && fdatasync(fd) < 0)
		err = -errno;
	else if (!err && STORE_HDR_LEN + payload_len >= EARLY_WRITEBACK_MIN)
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
		/* a chunk whose sample does not compress is stored RAW for good: the recode would
		 * only write the same bytes again */
		int pays = store_sample_compresses(buf, len, st->zstd_level);

		if (pays < 0)
			return pays;
		payload = buf;
		payload_len = len;
		codec = pays ? STORE_CODEC_DEFERRED : STORE_CODEC_RAW;
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
	store_hdr_encode(&hdr, raw_hdr);
	err = publish(st, store_shard_of(&hdr.hash), path, raw_hdr, payload, payload_len, false,
		      false);
	if (err)
		return err;
	ewma(&st->wr_ps, (now_ns() - t0) * 1000 / (payload_len + STORE_HDR_LEN));
	info_from_hdr(&hdr, false, ret);
	return 0;
}

/*
 * The object's payload is stored as it came: it was encoded by the node that sent it, and
 * encoding the decoded bytes again here would spend a cold reader's CPU on what it already has.
 * Decoded once into a pooled buffer (the caller's thread buffers may hold its reply) to check
 * the digest (invariant 2 holds on every later read anyway); that buffer is then the reader's
 * (got), or goes back to the pool.
 */
int store_chunk_put_object(struct store *st, const void *obj, size_t len,
			   const struct store_hash *h, struct store_chunk_info *ret,
			   struct store_fetched *got)
{
	const uint8_t *b = obj, *payload = b + STORE_OBJECT_HEADER;
	size_t plen = len - STORE_OBJECT_HEADER;
	uint8_t raw_hdr[STORE_HDR_LEN], *data;
	char path[PATH_MAX];
	struct chunk_hdr hdr;
	struct store_hash got_h;
	uint32_t rawlen, cap;
	int err;

	if (got)
		got->data = NULL;
	if (st->read_only)
		return -EROFS;
	if (len < STORE_OBJECT_HEADER)
		return -EBADMSG;
	rawlen = store_get_le32(b + 1);
	if (b[0] > STORE_CODEC_MAX || rawlen == 0 || rawlen > STORE_CHUNK_MAX ||
	    (store_codec_is_raw(b[0]) ? plen != rawlen : plen > store_payload_bound(rawlen)))
		return -EBADMSG;
	if (!(data = store_buf_get(st, rawlen, &cap)))
		return -ENOMEM;
	err = store_decode_digested(b[0], payload, plen, data, rawlen);
	if (err == 0) {
		store_hash_buf(data, rawlen, &got_h);
		err = memcmp(got_h.b, h->b, STORE_HASH_LEN) ? -EBADMSG : 0;
	} else if (err != -ENOMEM) {
		err = -EBADMSG;
	}
	hdr.hash = *h;
	if (err == 0)
		err = store_chunk_path(st, &hdr.hash, path, sizeof(path));
	if (err == 0)
		err = put_existing(st, &hdr.hash, data, rawlen, &hdr);
	if (err == 0) {
		hdr.codec = b[0];
		hdr.raw_size = rawlen;
		hdr.payload_size = (uint32_t)plen;
		store_hdr_encode(&hdr, raw_hdr);
		err = publish(st, store_shard_of(&hdr.hash), path, raw_hdr, payload, plen, false,
			      false);
	}
	if (err < 0) {
		store_buf_put(st, data, cap);
		return err;
	}
	info_from_hdr(&hdr, err == 1, ret);
	if (got) {
		got->data = data;
		got->size = rawlen;
		got->cap = cap;
	} else {
		store_buf_put(st, data, cap);
	}
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

int store_recode_loaded(struct store *st, const struct store_hash *h, struct chunk_hdr *hdr,
			const uint8_t *file, const void **ret_payload)
{
	char path[PATH_MAX];
	uint8_t raw_hdr[STORE_HDR_LEN];
	const void *payload;
	size_t payload_len;
	uint8_t codec;
	int err;

	if (st->read_only)
		return -EROFS;
	/* file stays in the caller's buffer: the encoder and the write below use buffers of
	 * their own (codec.c's, STORE_TBUF_WRITE) */
	err = store_encode_tls(file + STORE_HDR_LEN, hdr->raw_size, st->zstd_level, &payload,
			       &payload_len, &codec);
	if (!err)
		err = store_chunk_path(st, h, path, sizeof(path));
	if (err)
		return err;
	hdr->codec = codec;
	hdr->payload_size = (uint32_t)payload_len;
	store_hdr_encode(hdr, raw_hdr);
	/* a chunk the mount's check left in the page cache for its reader (invariant 13): its new
	 * copy goes there too, or the reader would find it only on the disk */
	err = publish(st, store_shard_of(h), path, raw_hdr, payload, payload_len, true,
		      store_primed_has(st, h));
	if (err)
		return err;
	*ret_payload = payload;
	return 0;
}

int store_chunk_recode(struct store *st, const struct store_hash *h,
		       struct store_chunk_info *ret)
{
	struct chunk_hdr hdr;
	struct store_hash got;
	const void *payload;
	uint8_t *file;
	int err;

	if (st->read_only)
		return -EROFS;
	err = store_chunk_read_whole(st, h, STORE_RD_DIRECT, &hdr, &file);
	if (err)
		return err;
	if (hdr.codec != STORE_CODEC_DEFERRED) {
		info_from_hdr(&hdr, true, ret);
		return 0;
	}
	store_hash_buf(file + STORE_HDR_LEN, hdr.raw_size, &got);
	if (memcmp(got.b, h->b, STORE_HASH_LEN))
		return -EBADMSG;
	if ((err = store_recode_loaded(st, h, &hdr, file, &payload)) != 0)
		return err;
	info_from_hdr(&hdr, true, ret);
	return 0;
}

int store_sync(struct store *st)
{
	bool todo[STORE_NSHARDS];
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
	for (unsigned s = 0; s < STORE_NSHARDS && !any; s++)
		any = todo[s];
	if (st->synced_gen >= want && !any)
		goto out; /* a concurrent store_sync already covered every put the caller made */
	/* one flush of the whole filesystem: every chunk's data, its rename, the shard directories
	 * (Linux >= 5.8 reports writeback errors from syncfs) */
	if (syncfs(st->root_fd) < 0) {
		err = -EIO;
		pthread_mutex_lock(&st->dirty_lock);
		for (unsigned s = 0; s < STORE_NSHARDS; s++)
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

	err = store_chunk_open(st, h, &fd, &hdr);
	if (err)
		return err == -ENOENT ? err : -EIO;
	close(fd);
	info_from_hdr(&hdr, true, ret);
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
	if (st->free_n >= STORE_FREE_MAX) {
		pthread_mutex_unlock(&st->free_lock);
		return -1;
	}
	id = st->free_next++;
	pthread_mutex_unlock(&st->free_lock);
	if (free_path(st, s, id, fpath, sizeof(fpath)) < 0 || rename(path, fpath) < 0)
		return -1;
	mark_dirty(st, s);
	/* the blocks go back now, as an unlink would give them */
	int fd = open(fpath, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0) {
		unlink(fpath);
		return 0;
	}
	close(fd);
	bool listed = false;

	pthread_mutex_lock(&st->free_lock);
	if (st->free_n < STORE_FREE_MAX) {
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
	store_cache_drop(st, h);
	if (free_give(st, store_shard_of(h), path) == 0)
		return 0;
	if (unlink(path) < 0)
		return -errno;
	mark_dirty(st, store_shard_of(h));
	return 0;
}

int store_chunk_set_aside(struct store *st, const struct store_hash *h, const char *dir)
{
	char path[PATH_MAX], to[PATH_MAX], hex[2 * STORE_HASH_LEN + 1];
	int err, n;

	if (st->read_only)
		return -EROFS;
	err = store_chunk_path(st, h, path, sizeof(path));
	if (err)
		return err;
	n = snprintf(to, sizeof(to), "%s/%s", dir, store_hash_hex(h, hex));
	if (n < 0 || (size_t)n >= sizeof(to))
		return -ENAMETOOLONG;
	store_cache_drop(st, h);
	if (rename(path, to) < 0)
		return -errno;
	mark_dirty(st, store_shard_of(h));
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

	for (s = 0; s < STORE_NSHARDS; s++) {
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
