/*
 * chunkfile.c — one chunk file on disk: its header, its path, reading it whole and writing it,
 * with O_DIRECT where the filesystem allows it and the page cache otherwise.
 *
 * Invariant numbers refer to the list at the top of chunkstore.c. These functions hold no store
 * lock; the only shared state is the per-thread buffers of store_thread_buf and the test hooks.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "store/store.h"
#include "store/store_int.h"

#define DIRECT_ALIGN STORE_DIRECT_ALIGN /* store_int.h */

_Atomic int store_fault_write_errno;
_Atomic int store_fault_direct_einval;

/* Serialize the 32-byte chunk file header described in store.h. */
void store_hdr_encode(const struct chunk_hdr *h, uint8_t out[STORE_HDR_LEN])
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

int store_chunk_path(const struct store *st, const struct store_hash *h, char *buf, size_t cap)
{
	char hex[2 * STORE_HASH_LEN + 1];
	int n;

	n = snprintf(buf, cap, "%s/%02x/%s", st->chunks, store_shard_of(h),
		     store_hash_hex(h, hex));
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

int store_write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

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

/* store_write_all with the test's write fault (store_fault_write_errno) injected first. */
static int write_all(int fd, const void *buf, size_t len)
{
	int fault = write_fault_by_test();

	return fault ? -fault : store_write_all(fd, buf, len);
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
int store_chunk_open(const struct store *st, const struct store_hash *h, int *ret_fd,
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
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
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
 * is a fresh mapping in the daemon (mmap threshold 128 KiB, fs/fuse/daemon.c) that page-faults while
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

		/* page-aligned: store_chunk_read_whole reads chunk files into it with O_DIRECT */
		if (posix_memalign(&n, DIRECT_ALIGN, len) != 0)
			return NULL;
		free(t->slot[slot].p);
		t->slot[slot].p = n;
		t->slot[slot].cap = len;
	}
	return t->slot[slot].p;
}

/*
 * Is all of the file fd (size bytes) in the page cache, up to date? Asked with mincore(2) of a
 * mapping, which reads nothing: preadv2 with RWF_NOWAIT, which fails on a page it does not
 * find, first starts the read-ahead of it (Linux mm/filemap.c filemap_get_pages: only the
 * kernel's own IOCB_NOIO skips it), so a file the kernel had reclaimed would be read from the
 * disk twice, by that read-ahead and by the O_DIRECT read that follows the failed try.
 */
static bool all_cached(int fd, size_t size)
{
	unsigned char vec[2048];
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), np = (size + pg - 1) / pg;
	void *map;
	bool all;

	if (size == 0 || np > sizeof(vec))
		return false;
	map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return false;
	all = mincore(map, size, vec) == 0;
	for (size_t i = 0; all && i < np; i++)
		all = vec[i] & 1;
	munmap(map, size);
	return all;
}

/*
 * Read chunk h's file of size bytes from the page cache into buf, if all of it is there: the
 * mount's check left it there (invariant 13). fd is open with O_DIRECT; it is taken off for the
 * try (RWF_NOWAIT: a page reclaimed between all_cached and the read fails it instead of waiting
 * for the disk) and put back after it. The pages stay: a chunk evicted from the chunk cache
 * before its reader is done with it (read-ahead, other files) is loaded from them again.
 * Returns true when buf holds the file.
 */
static bool read_primed(int fd, uint8_t *buf, size_t size)
{
	int fl = fcntl(fd, F_GETFL);
	struct iovec iov = { .iov_base = buf, .iov_len = size };
	ssize_t r = -1;

	if (!all_cached(fd, size))
		return false;
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) < 0)
		return false;
	do
		r = preadv2(fd, &iov, 1, 0, RWF_NOWAIT);
	while (r < 0 && errno == EINTR);
	(void)fcntl(fd, F_SETFL, fl); /* failing, the read goes on through the page cache */
	return r == (ssize_t)size;
}

/*
 * Read all of chunk h's file (header and payload) into this thread's STORE_TBUF_PAYLOAD buffer
 * and validate its header (hdr_check). STORE_RD_DIRECT: the file is read with O_DIRECT, in one
 * request rounded up
 * to DIRECT_ALIGN: the bytes land in a buffer the daemon already has mapped instead of in fresh
 * page-cache pages copied from there; it also checks what is on the disk, not a cached copy (the
 * kernel writes back dirty pages of the range first, so a just-written chunk reads correctly).
 * The exception is a chunk the mount's check read into the page cache for its reader
 * (STORE_RD_KEEP_PAGES, invariant 13): that copy was read from the disk moments ago, and the
 * caller re-hashes it as it would the disk's. Whatever
 * O_DIRECT cannot do (EINVAL at open, or at a read: a filesystem without it, an offset left
 * unaligned by a short read) goes on through the page cache.
 * On success *ret_file points at the file's bytes (not owned; valid until this thread's next
 * store_thread_buf(STORE_TBUF_PAYLOAD)). Returns 0, -ENOENT, -ENOMEM or -EIO.
 */
int store_chunk_read_whole(struct store *st, const struct store_hash *h, unsigned how,
			   struct chunk_hdr *ret_hdr, uint8_t **ret_file)
{
	char path[PATH_MAX];
	struct stat sb;
	uint8_t *buf;
	size_t size, want, got;
	bool direct = how == STORE_RD_DIRECT;
	int fd, fl, err;

	err = store_chunk_path(st, h, path, sizeof(path));
	if (err)
		return err;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (direct ? O_DIRECT : 0));
	if (fd < 0 && errno == EINVAL && direct) {
		direct = false;
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
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
	got = 0;
	if (direct && store_primed_has(st, h) && read_primed(fd, buf, size)) {
		store_primed_hit(st);
		got = size;
	}
	while (got < size) {
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
 * payload copied into it) or, for a payload of this thread's store_encode_tls, from the
 * encoder's own buffer (only the header copied, into the room before the payload); the last
 * partial block goes through the page cache. Written through the
 * page cache alone, the kernel copies the bytes into freshly allocated page-cache pages
 * (copy_folio_from_iter_atomic, clear_page) that are then written back anyway; O_DIRECT moves
 * them from a buffer the worker has mapped already. Whatever O_DIRECT cannot
 * do (a filesystem without it, tmpfs before Linux 6.6 for one), or a thread that cannot get its
 * buffer (ENOMEM), goes through the page cache; so does all of it with keep_pages, whose pages
 * are to stay there for a reader (chunkstore.c invariant 13).
 * Durability is store_sync's either way: O_DIRECT does not flush the disk's cache or commit the
 * file's size. Returns 0 or -errno (-ENOSPC, -EIO, ...).
 */
int store_chunk_write_file(int fd, const uint8_t *hdr, const void *payload, size_t payload_len,
			   bool keep_pages)
{
	size_t size = STORE_HDR_LEN + payload_len;
	size_t whole = keep_pages ? 0 : size / DIRECT_ALIGN * DIRECT_ALIGN, done = 0;
	uint8_t *head = whole ? store_encode_tls_head(payload) : NULL;
	uint8_t *b = head ? head : whole ? store_thread_buf(STORE_TBUF_WRITE, whole) : NULL;
	int fl = b ? fcntl(fd, F_GETFL) : -1;
	int err = 0;

	if (fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0) {
		memcpy(b, hdr, STORE_HDR_LEN);
		if (!head) /* the encoder's payload already sits in place after the header */
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
