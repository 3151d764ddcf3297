/*
 * import_file.c — ckptctl import: one regular file into the store, and the index rows import
 * creates (inodes, dentries, transactions). Chunks of one window are put by worker threads.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fs/policy/validate.h"

#include "import_int.h"

/* imp_release - idx_file_set_content's release callback: new files release nothing. */
static bool imp_release(const uint8_t hash[IDX_HASH_LEN], void *arg)
{
	(void)hash;
	(void)arg;
	return false;
}

int imp_txn(struct imp_ctx *c)
{
	int rc;

	if (c->in_txn)
		return 0;
	if ((rc = idx_begin(c->r->ix)) < 0)
		return rc;
	c->in_txn = true;
	c->txn_files = 0;
	c->txn_bytes = 0;
	return 0;
}

int imp_commit(struct imp_ctx *c)
{
	int rc;

	if (!c->in_txn)
		return 0;
	c->in_txn = false;
	rc = store_sync(c->r->st);
	if (rc == 0)
		rc = idx_commit(c->r->ix);
	if (rc < 0)
		idx_rollback(c->r->ix);
	return rc;
}

int imp_inode(struct imp_ctx *c, uint64_t parent, const char *name, struct idx_inode *a,
	      const char *target, uint64_t *ret_ino)
{
	uint64_t ino;
	int rc;

	if ((rc = imp_txn(c)) < 0)
		return rc;
	rc = idx_inode_create(c->r->ix, a, &ino);
	if (rc == 0 && target)
		rc = idx_symlink_set(c->r->ix, ino, target);
	if (rc == 0)
		rc = idx_dentry_add(c->r->ix, parent, name, ino);
	if (rc == 0 && S_ISDIR(a->mode)) {
		struct idx_inode pa;

		rc = idx_inode_get(c->r->ix, parent, &pa);
		if (rc == 0) {
			pa.nlink++;
			rc = idx_inode_update(c->r->ix, &pa);
		}
	}
	if (rc == 0)
		*ret_ino = ino;
	return rc;
}

void imp_attr(const struct stat *st, struct idx_inode *a)
{
	memset(a, 0, sizeof(*a));
	a->mode = (uint32_t)st->st_mode;
	a->uid = (uint32_t)st->st_uid;
	a->gid = (uint32_t)st->st_gid;
	a->nlink = S_ISDIR(st->st_mode) ? 2 : 1;
	a->atime_ns = (int64_t)st->st_atim.tv_sec * 1000000000 + st->st_atim.tv_nsec;
	a->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
	a->ctime_ns = a->mtime_ns;
}

/* imp_pread - validate_read_fn over a source file descriptor. */
static ssize_t imp_pread(void *arg, void *buf, size_t len, uint64_t off)
{
	int fd = *(int *)arg;
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* Puts shared by the workers of one window. */
struct imp_pool {
	struct store *st;
	struct imp_put *v;
	size_t n;
	atomic_size_t next; /* the next put to take */
};

static void *imp_worker(void *arg)
{
	struct imp_pool *pool = arg;
	size_t i;

	while ((i = atomic_fetch_add(&pool->next, 1)) < pool->n)
		pool->v[i].rc = store_chunk_put(pool->st, pool->v[i].p, pool->v[i].len,
						 &pool->v[i].info);
	return NULL;
}

/*
 * imp_pool_run - put pool->v[0..n) with one thread per online CPU, at most IMPORT_THREADS
 * (store_chunk_put is thread-safe; each compresses and fdatasyncs its chunk, and those overlap).
 * Each put's result is in its rc. Returns 0 (when a thread cannot start, the calling thread
 * does the remaining puts itself).
 */
static int imp_pool_run(struct imp_pool *pool)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t nt = cpus < 1 ? 1 : cpus > IMPORT_THREADS ? IMPORT_THREADS : (size_t)cpus;

	if (nt > pool->n)
		nt = pool->n;
	atomic_store(&pool->next, 0);
	store_parallel((unsigned)nt, imp_worker, pool);
	return 0;
}

/* imp_failed - the result of a helper of imp_file that recorded its file as failed: 1, or the
 * -ENOMEM of imp_fail_add. */
static int imp_failed(int rc)
{
	return rc < 0 ? rc : 1;
}

int imp_file_open(struct imp_ctx *c, const struct imp_ent *e, const char *path,
			 int *ret_fd, struct stat *ret_st)
{
	int fd, rc;

	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return imp_failed(imp_fail_add(c, e->step, e->rel, "cannot open: %s",
					       strerror(errno)));
	if (fstat(fd, ret_st) < 0) {
		rc = imp_fail_add(c, e->step, e->rel, "cannot stat: %s", strerror(errno));
		close(fd);
		return imp_failed(rc);
	}
	if (!S_ISREG(ret_st->st_mode)) {
		close(fd);
		return imp_failed(imp_fail_add(c, e->step, e->rel, "no longer a regular file"));
	}
	*ret_fd = fd;
	return 0;
}

/*
 * imp_fill_window - read the data run ending at byte end of fd (size bytes at open) into
 * c->buf after the *have bytes already there, starting at file offset pos + *have, until the
 * window is full or the run ends (*eof set). Returns 0, 1 (recorded as failed: a read error, or
 * the file shrank), or -ENOMEM.
 */
static int imp_fill_window(struct imp_ctx *c, const struct imp_ent *e, int fd, uint64_t size,
			   uint64_t end, uint64_t pos, size_t *have, bool *eof)
{
	while (!*eof && *have < IMPORT_WINDOW) {
		uint64_t at = pos + *have;
		size_t want = IMPORT_WINDOW - *have;
		ssize_t n;

		if (want > end - at)
			want = (size_t)(end - at);
		n = want ? pread(fd, c->buf + *have, want, (off_t)at) : 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return imp_failed(imp_fail_add(c, e->step, e->rel, "cannot read at offset %"
						       PRIu64 ": %s", at, strerror(errno)));
		if (n == 0 && want)
			return imp_failed(imp_fail_add(c, e->step, e->rel, "changed while being read "
						       "(%" PRIu64 " bytes at open, ended at %" PRIu64
						       ")", size, at));
		if (at + (uint64_t)n >= end)
			*eof = true;
		*have += (size_t)n;
	}
	return 0;
}

/*
 * imp_cut_window - cut the have bytes of c->buf into c->puts, each cut over at most
 * 2 * STORE_CHUNK_MAX bytes (a chunk's boundary depends only on its own bytes: the same cuts as
 * the daemon's); the tail after the last cut stays unless eof. Returns the bytes cut.
 */
static size_t imp_cut_window(struct imp_ctx *c, size_t have, bool eof)
{
	size_t off = 0;

	for (;;) {
		size_t avail = have - off, win = 2 * (size_t)STORE_CHUNK_MAX, cut;
		bool last = eof && avail <= win;

		cut = store_cdc_cut(c->buf + off, avail < win ? avail : win, last);
		if (cut == 0)
			break;
		assert(c->nputs < IMPORT_WINDOW / STORE_CHUNK_MIN + 1);
		c->puts[c->nputs].p = c->buf + off;
		c->puts[c->nputs].len = cut;
		c->puts[c->nputs].rc = 0;
		c->nputs++;
		off += cut;
	}
	return off;
}

/*
 * imp_put_window - put c->puts[0..nputs) in parallel, then append their extents (from file
 * offset *pos, advanced) to c->ext, hash their bytes into c->hs and count them. c->nputs is 0
 * afterwards. Returns 0, -ENOMEM, or the -errno of store_chunk_put (printed).
 */
static int imp_put_window(struct imp_ctx *c, const struct imp_ent *e, uint64_t *pos)
{
	struct imp_pool pool = { .st = c->r->st, .v = c->puts, .n = c->nputs };
	int rc;

	rc = imp_pool_run(&pool);
	if (rc < 0) {
		ctl_err("cannot start threads: %s", strerror(-rc));
		return rc;
	}
	for (size_t k = 0; k < c->nputs; k++) {
		const struct imp_put *u = &c->puts[k];

		if (u->rc < 0) {
			ctl_err("cannot store a chunk of '%s' in store '%s': %s", e->rel, c->root,
				strerror(-u->rc));
			c->nputs = 0;
			return u->rc;
		}
		if (ckpt_grow(&c->ext, &c->capext, c->next, sizeof(*c->ext)) < 0) {
			c->nputs = 0;
			return -ENOMEM;
		}
		c->ext[c->next].offset = *pos;
		c->ext[c->next].length = (uint32_t)u->len;
		c->ext[c->next].stored_size = u->info.stored_size;
		c->ext[c->next].codec = u->info.codec;
		memcpy(c->ext[c->next].hash, u->info.hash.b, IDX_HASH_LEN);
		c->next++;
		if (u->info.existed) {
			c->dedup_hits++;
		} else {
			c->chunks_written++;
			c->stored_added += u->info.stored_size;
		}
		store_hasher_update(c->hs, u->p, u->len);
		*pos += u->len;
		c->done += u->len;
	}
	c->nputs = 0;
	return 0;
}

/*
 * imp_file_chunks - read fd (st at open) run of data by run (store_data_run: holes of a sparse
 * file stay holes, as the daemon keeps them) and put its chunks, cut like the daemon cuts a
 * file: the chunker restarts at each run. Fills c->ext[0..next) and c->hs.
 * Returns 0, 1 (recorded as failed), -ENOMEM, or the -errno of the store (printed).
 */
static int imp_file_chunks(struct imp_ctx *c, const struct imp_ent *e, int fd,
			   const struct stat *st)
{
	uint64_t size = (uint64_t)st->st_size;
	int rc;

	store_hasher_reset(c->hs);
	c->next = 0;
	for (uint64_t end = 0, hole_at = 0;; hole_at = end) {
		uint64_t start = 0, pos;
		int more = store_data_run(fd, hole_at, size, &start, &end);
		size_t have = 0;
		bool eof = false;

		if (more < 0)
			return imp_failed(imp_fail_add(c, e->step, e->rel, "cannot find its data: %s",
						       strerror(-more)));
		if (!more) {
			store_hasher_hole(c->hs, hole_at, size - hole_at);
			return 0;
		}
		store_hasher_hole(c->hs, hole_at, start - hole_at);
		pos = start;
		while (!eof || have) {
			size_t off;

			rc = imp_fill_window(c, e, fd, size, end, pos, &have, &eof);
			if (rc)
				return rc;
			off = imp_cut_window(c, have, eof);
			rc = imp_put_window(c, e, &pos);
			if (rc < 0)
				return rc;
			import_progress(c, false);
			memmove(c->buf, c->buf + off, have - off);
			have -= off;
		}
	}
}

/*
 * imp_file_check - after reading fd (st at open): the size must not have changed; a file in a
 * step gets IDX_INODE_VALID or IDX_INODE_MALFORMED in a->flags from validate_file (why: the
 * reason of a malformed one, cap bytes). Returns 0, 1 (recorded as failed), or -ENOMEM.
 */
static int imp_file_check(struct imp_ctx *c, const struct imp_ent *e, int fd,
			  const struct stat *st, struct idx_inode *a, char *why, size_t cap)
{
	struct stat now;
	int rc;

	if (fstat(fd, &now) < 0 || now.st_size != st->st_size)
		return imp_failed(imp_fail_add(c, e->step, e->rel, "changed while being read (%"
					       PRIu64 " bytes at open, %" PRIu64 " now)",
					       (uint64_t)st->st_size, (uint64_t)now.st_size));
	imp_attr(st, a);
	if (!e->in_step)
		return 0;
	rc = validate_file(e->name, (uint64_t)st->st_size, imp_pread, &fd, NULL, why, cap);
	if (rc == 1)
		a->flags = IDX_INODE_VALID;
	else if (rc == -EBADMSG)
		a->flags = IDX_INODE_MALFORMED;
	else if (rc < 0)
		return imp_failed(imp_fail_add(c, e->step, e->rel,
					       "cannot read for its structure check: %s",
					       strerror(-rc)));
	return 0;
}

/*
 * imp_file_record - record entry e (size bytes, attributes a, whole-file digest whole) in
 * directory parent: its inode, dentry and c->ext as its extents, in the open transaction
 * (committed once it holds enough); count it, and into its step. why: validate_file's reason
 * when malformed. Returns 0 or the -errno of the store or the index (printed).
 */
static int imp_file_record(struct imp_ctx *c, struct imp_ent *e, uint64_t parent,
			   struct idx_inode *a, uint64_t size, const struct store_hash *whole,
			   const char *why)
{
	int rc;

	rc = imp_inode(c, parent, e->name, a, NULL, &e->ino);
	if (rc == 0)
		rc = idx_file_set_content(c->r->ix, e->ino, c->ext, c->next, size, whole->b,
					  a->mtime_ns, imp_release, NULL);
	if (rc < 0) {
		e->ino = 0;
		ctl_err("cannot record '%s' in the index of store '%s': %s", e->rel, c->root,
			strerror(-rc));
		return rc;
	}
	c->files++;
	c->logical += size;
	c->txn_files++;
	c->txn_bytes += size;
	if (e->step >= 0) {
		struct imp_step *s = &c->steps[e->step];

		s->files++;
		s->bytes += size;
		if (a->flags & IDX_INODE_MALFORMED) {
			s->malformed++;
			if (!s->bad[0])
				snprintf(s->bad, sizeof(s->bad), "'%s' is malformed: %s", e->name,
					 why);
		}
		if (e->marker && !(a->flags & IDX_INODE_MALFORMED) && !s->sealed_by[0])
			snprintf(s->sealed_by, sizeof(s->sealed_by), "marker '%s'", e->name);
	}
	if (c->txn_files >= IMPORT_TXN_FILES || c->txn_bytes >= IMPORT_TXN_BYTES) {
		rc = imp_commit(c);
		if (rc < 0) {
			ctl_err("cannot commit to store '%s': %s", c->root, strerror(-rc));
			return rc;
		}
	}
	return 0;
}

int imp_file(struct imp_ctx *c, size_t i, uint64_t parent)
{
	struct imp_ent *e = &c->v[i];
	char path[PATH_CAP], why[256] = "";
	struct store_hash whole;
	struct idx_inode a;
	struct stat st;
	int fd, rc;

	snprintf(path, sizeof(path), "%s/%s", c->src, e->rel); /* length checked by imp_scan */
	rc = imp_file_open(c, e, path, &fd, &st);
	if (rc)
		return rc < 0 ? rc : 0;
	rc = imp_file_chunks(c, e, fd, &st);
	if (rc == 0)
		rc = imp_file_check(c, e, fd, &st, &a, why, sizeof(why));
	close(fd);
	if (rc)
		return rc < 0 ? rc : 0;
	store_hasher_digest(c->hs, &whole);
	return imp_file_record(c, e, parent, &a, (uint64_t)st.st_size, &whole, why);
}
