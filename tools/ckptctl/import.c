/*
 * import.c — ckptctl import [--dest PATH] DIR: ingest a plain checkpoint directory (only
 * while not mounted): files chunked into the store, steps recognised and judged, trackers
 * recorded as claims.
 *
 * Every index change is made inside one transaction; import batches several files per
 * transaction, each committed after store_sync.
 *
 * Thread-safety: import's worker threads only call store_chunk_put (thread-safe) on disjoint
 * chunks of one window.
 */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/layout.h"
#include "fs/validate.h"

#include "ctl.h"

/* ---- import ---- */

/*
 * import copies a plain checkpoint directory into the store as the daemon would have recorded
 * it had the trainer written through a mount:
 *   1. DIR is scanned first (lstat, never following a symlink; a symlink is copied as one), so
 *      nothing is written when DIR is unusable or a top-level name is already taken.
 *   2. Each regular file is read IMPORT_WINDOW bytes at a time and cut with store_cdc_cut over
 *      at most 2 * STORE_CHUNK_MAX bytes per cut (the daemon's boundaries); the window's chunks
 *      are put with store_chunk_put by IMPORT_THREADS threads, the whole-file XXH3-128 taken
 *      in order; its inode, dentry and extents go into the index with
 *      idx_file_set_content, several files per transaction, each transaction committed only
 *      after store_sync made its chunks' renames durable.
 *   3. Only at the mount root (no --dest, or --dest /): top-level trackers become claims (never
 *      files: steps.c invariant 3); each top-level step directory gets a step row when it is
 *      created; files under a step directory get IDX_INODE_VALID / IDX_INODE_MALFORMED from
 *      validate_file, as steps_on_commit gives them.
 *   4. A step is sealed by a tracker naming it or a later step of a layout sharing that tracker
 *      (a trainer saves in step order, and a plain directory keeps only the last tracker), or by
 *      its sound in-step marker. Sealed, with every file read and whole: complete. Sealed with a
 *      malformed file: sealed (the daemon's recovery sets it aside with its reason). Otherwise,
 *      or when a file could not be read: writing, which recovery sets aside as incomplete.
 *   5. STORE/clean is removed first; it is put back at the end only when it was there (or the
 *      store is new) and every file was read, so an interrupted or partial import leaves chunks
 *      for the next mount's sweep.
 */

/* Bytes read from a file at a time: its chunks are put in parallel (>= 2 * STORE_CHUNK_MAX). */
#define IMPORT_WINDOW (32u << 20)
/* Most threads putting chunks (one per online CPU up to this). */
#define IMPORT_THREADS 8
/* Files committed per index transaction, and bytes. */
#define IMPORT_TXN_FILES 256
#define IMPORT_TXN_BYTES (256ull << 20)
/* Deepest directory nesting imported. */
#define IMPORT_DEPTH_MAX 256
/* Largest tracker file read whole (InternEvo's N.step is a small pickle). */
#define IMPORT_TRACKER_MAX (16u << 20)

/* One entry of DIR, in pre-order: a directory comes before what it holds. */
struct imp_ent {
	char *rel;      /* owned: path relative to DIR */
	const char *name; /* borrowed from rel: the last component */
	struct stat st; /* lstat at scan time */
	size_t parent;  /* index of the parent entry, SIZE_MAX at DIR's top level */
	int step;       /* index in imp_ctx.steps of the step it belongs to (or is), -1 none */
	bool tracker;   /* a top-level tracker: recorded as a claim, not stored */
	bool in_step;   /* validated as steps_on_commit validates (a step file or marker) */
	bool marker;    /* the layout's in-step commit marker */
	uint64_t ino;   /* created inode, 0 until then (or when it failed) */
};

/* One step directory at DIR's top level. */
struct imp_step {
	size_t ent;              /* its entry */
	enum layout_kind kind;
	int64_t step;
	int64_t id;              /* step row, 0 until created */
	char sealed_by[128];     /* why it is sealed, "" when not */
	uint64_t files, bytes;   /* files imported into it, their bytes */
	unsigned malformed, failed; /* files that failed the structure check / could not be read */
	int state;               /* enum idx_step_state it was left in */
	char bad[256];           /* the first malformed file and why, "" when none */
	char why[512];           /* note recorded with that state */
};

/* A top-level tracker. */
struct imp_claim {
	size_t ent;
	enum layout_kind kind;
	char content[64]; /* printable preview */
	int64_t step;     /* parsed, -1 when not a step */
	unsigned sealed;  /* steps it sealed */
};

/* A file or directory that could not be imported. */
struct imp_fail {
	char *path;   /* owned: relative to DIR */
	char *reason; /* owned */
};

struct imp_ctx {
	const char *root, *src;
	bool json; /* --json */
	struct ckpt_repo *r;
	bool at_root; /* the destination is the mount root: steps and trackers apply */
	uint64_t dest_ino;
	struct imp_ent *v;
	size_t n, cap;
	struct imp_step *steps;
	size_t nsteps, capsteps;
	struct imp_claim *claims;
	size_t nclaims, capclaims;
	struct imp_fail *fail;
	size_t nfail, capfail;
	char **skipped; /* owned: top-level names not imported (".ckptfs") */
	size_t nskipped, capskipped;
	/* the file being read */
	uint8_t *buf; /* IMPORT_WINDOW bytes */
	struct imp_put *puts; /* IMPORT_WINDOW / STORE_CHUNK_MIN + 1 of them */
	size_t nputs;
	struct store_hasher *hs;
	struct idx_extent *ext;
	size_t next, capext;
	/* the open transaction */
	bool in_txn;
	unsigned txn_files;
	uint64_t txn_bytes;
	/* figures */
	uint64_t files, dirs, symlinks, logical, stored_added, chunks_written, dedup_hits;
	uint64_t total, done; /* bytes of regular files to read, and read */
	struct ctl_progress prog;
	struct timespec start;
};

/*
 * imp_fail_add - record that rel could not be imported, and why (printf-style); step is the
 * index of the step it belongs to (which then cannot complete), -1 for none.
 * Returns 0 or -ENOMEM.
 */
static int imp_fail_add(struct imp_ctx *c, int step, const char *rel, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int imp_fail_add(struct imp_ctx *c, int step, const char *rel, const char *fmt, ...)
{
	char reason[PATH_CAP + 256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	if (grow(&c->fail, &c->capfail, c->nfail, sizeof(*c->fail)) < 0)
		return -ENOMEM;
	c->fail[c->nfail].path = strdup(rel[0] ? rel : ".");
	c->fail[c->nfail].reason = strdup(reason);
	if (!c->fail[c->nfail].path || !c->fail[c->nfail].reason) {
		free(c->fail[c->nfail].path);
		free(c->fail[c->nfail].reason);
		return -ENOMEM;
	}
	c->nfail++;
	if (step >= 0)
		c->steps[step].failed++;
	return 0;
}

static void imp_free(struct imp_ctx *c)
{
	size_t i;

	for (i = 0; i < c->n; i++)
		free(c->v[i].rel);
	free(c->v);
	for (i = 0; i < c->nfail; i++) {
		free(c->fail[i].path);
		free(c->fail[i].reason);
	}
	free(c->fail);
	for (i = 0; i < c->nskipped; i++)
		free(c->skipped[i]);
	free(c->skipped);
	free(c->steps);
	free(c->claims);
	free(c->buf);
	free(c->puts);
	free(c->ext);
	store_hasher_free(c->hs);
}

/* imp_elapsed - seconds since the import began. */
static double imp_elapsed(const struct imp_ctx *c)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - c->start.tv_sec) +
	       (double)(now.tv_nsec - c->start.tv_nsec) / 1e9;
}

/* imp_mbps - logical megabytes (10^6 bytes) per second so far. */
static double imp_mbps(const struct imp_ctx *c, double secs)
{
	return secs > 0 ? (double)c->done / 1e6 / secs : 0.0;
}

/* import_progress - "import: DONE/TOTAL, PERCENT, RATE MB/s" on the progress line. */
static void import_progress(struct imp_ctx *c, bool force)
{
	char sdone[32], stotal[32];

	if (!ctl_progress_due(&c->prog, force))
		return;
	ctl_progress_line(&c->prog, "import: %s/%s, %.0f%%, %.1f MB/s",
			  fmt_short_size(c->done, sdone, sizeof(sdone)),
			  fmt_short_size(c->total, stotal, sizeof(stotal)),
			  c->total ? 100.0 * (double)c->done / (double)c->total : 100.0,
			  imp_mbps(c, imp_elapsed(c)));
}

/* imp_name_cmp - qsort of char * by strcmp. */
static int imp_name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* imp_classify - at the mount root, what the new entry e is to its layout (scan time). */
static int imp_classify(struct imp_ctx *c, size_t i)
{
	struct imp_ent *e = &c->v[i];
	struct layout_match m;

	e->step = e->parent == SIZE_MAX ? -1 : c->v[e->parent].step;
	if (!c->at_root || layout_classify(e->rel, LAYOUT_NONE, &m) < 0)
		return 0;
	if (e->parent == SIZE_MAX) {
		if (S_ISREG(e->st.st_mode) && m.role == ROLE_TRACKER && m.kind != LAYOUT_MF1)
			e->tracker = true;
		if (S_ISDIR(e->st.st_mode) && m.role == ROLE_STEP_DIR && !(m.flags & LAYOUT_F_TMP) &&
		    m.step >= 0) {
			struct imp_step *s;

			if (grow(&c->steps, &c->capsteps, c->nsteps, sizeof(*c->steps)) < 0)
				return -ENOMEM;
			s = &c->steps[c->nsteps];
			memset(s, 0, sizeof(*s));
			s->ent = i;
			s->kind = m.kind;
			s->step = m.step;
			e->step = (int)c->nsteps++;
		}
		return 0;
	}
	if (!S_ISREG(e->st.st_mode) || m.step_prefix_len == 0 ||
	    (m.role != ROLE_STEP_FILE && m.role != ROLE_MARKER))
		return 0;
	e->in_step = true;
	if (m.role == ROLE_MARKER && e->step >= 0) {
		e->marker = true;
		/* `N/commit_success.txt` says an all-digit step is Orbax's, not InternEvo's */
		if (m.kind == LAYOUT_ORBAX)
			c->steps[e->step].kind = LAYOUT_ORBAX;
	}
	return 0;
}

/*
 * imp_scan - append the entries of DIR/rel (rel "" for DIR itself) to c->v, sorted by name,
 * each directory followed by what it holds. An unreadable directory is recorded as a failure
 * (its entry stays: it is created, empty). Returns 0 or -ENOMEM.
 */
static int imp_scan(struct imp_ctx *c, const char *rel, size_t parent, int depth)
{
	char path[PATH_CAP];
	char **names = NULL;
	size_t nnames = 0, capnames = 0, i;
	struct dirent *d;
	int step = parent == SIZE_MAX ? -1 : c->v[parent].step;
	DIR *dir;
	int rc = 0;

	if ((size_t)snprintf(path, sizeof(path), "%s%s%s", c->src, rel[0] ? "/" : "", rel) >=
	    sizeof(path))
		return imp_fail_add(c, step, rel, "path too long");
	if (depth > IMPORT_DEPTH_MAX)
		return imp_fail_add(c, step, rel, "nested deeper than %d directories: not imported",
				    IMPORT_DEPTH_MAX);
	dir = opendir(path);
	if (!dir)
		return imp_fail_add(c, step, rel, "cannot read directory: %s", strerror(errno));
	errno = 0;
	while ((d = readdir(dir))) {
		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		if (grow(&names, &capnames, nnames, sizeof(*names)) < 0 ||
		    !(names[nnames] = strdup(d->d_name))) {
			rc = -ENOMEM;
			goto out;
		}
		nnames++;
	}
	if (errno) {
		rc = imp_fail_add(c, step, rel, "cannot read directory: %s", strerror(errno));
		goto out;
	}
	if (nnames)
		qsort(names, nnames, sizeof(*names), imp_name_cmp);
	for (i = 0; i < nnames && rc == 0; i++) {
		struct imp_ent *e;
		size_t len = strlen(rel) + 1 + strlen(names[i]) + 1, me;

		if (!rel[0] && c->at_root && !strcmp(names[i], ".ckptfs")) {
			/* the daemon's own directory: never imported over */
			if (grow(&c->skipped, &c->capskipped, c->nskipped, sizeof(*c->skipped)) < 0 ||
			    !(c->skipped[c->nskipped] = strdup(names[i]))) {
				rc = -ENOMEM;
				break;
			}
			c->nskipped++;
			continue;
		}
		if (grow(&c->v, &c->cap, c->n, sizeof(*c->v)) < 0) {
			rc = -ENOMEM;
			break;
		}
		me = c->n;
		e = &c->v[me];
		memset(e, 0, sizeof(*e));
		e->parent = parent;
		e->step = -1;
		if (!(e->rel = malloc(len))) {
			rc = -ENOMEM;
			break;
		}
		snprintf(e->rel, len, "%s%s%s", rel, rel[0] ? "/" : "", names[i]);
		e->name = e->rel + (rel[0] ? strlen(rel) + 1 : 0);
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", c->src, e->rel) >= sizeof(path)) {
			char *r = e->rel;

			rc = imp_fail_add(c, step, r, "path too long");
			free(r);
			continue;
		}
		if (lstat(path, &e->st) < 0) {
			int err = errno;
			char *r = e->rel;

			rc = imp_fail_add(c, step, r, "cannot stat: %s", strerror(err));
			free(r);
			continue;
		}
		c->n++;
		if ((rc = imp_classify(c, me)) < 0)
			break;
		if (S_ISREG(c->v[me].st.st_mode) && !c->v[me].tracker)
			c->total += (uint64_t)c->v[me].st.st_size;
		if (S_ISDIR(c->v[me].st.st_mode)) {
			char *sub = strdup(c->v[me].rel); /* c->v moves as it grows */

			if (!sub) {
				rc = -ENOMEM;
				break;
			}
			rc = imp_scan(c, sub, me, depth + 1);
			free(sub);
		}
	}
out:
	for (i = 0; i < nnames; i++)
		free(names[i]);
	free(names);
	closedir(dir);
	return rc;
}

/* imp_release - idx_file_set_content's release callback: new files release nothing. */
static bool imp_release(const uint8_t hash[IDX_HASH_LEN], void *arg)
{
	(void)hash;
	(void)arg;
	return false;
}

/* imp_txn - make sure a transaction is open. Returns 0 or -errno of the index. */
static int imp_txn(struct imp_ctx *c)
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

/*
 * imp_commit - make the chunks put so far durable (store_sync), then commit the open
 * transaction, if any. Returns 0, -EIO (store_sync), or -errno of the index (rolled back).
 */
static int imp_commit(struct imp_ctx *c)
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

/* imp_inode - create inode *a named name in directory parent (open transaction); a directory
 * adds a link to its parent. Returns 0 or -errno of the index. */
static int imp_inode(struct imp_ctx *c, uint64_t parent, const char *name, struct idx_inode *a,
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

/* imp_attr - the attributes of source st for a new inode. */
static void imp_attr(const struct stat *st, struct idx_inode *a)
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

/* One chunk to put. */
struct imp_put {
	const uint8_t *p; /* borrowed: bytes in imp_ctx.buf */
	size_t len;
	struct store_chunk_info info;
	int rc; /* store_chunk_put's */
};

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
	pthread_t t[IMPORT_THREADS];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t nt = cpus < 1 ? 1 : cpus > IMPORT_THREADS ? IMPORT_THREADS : (size_t)cpus;
	size_t started = 0;

	if (nt > pool->n)
		nt = pool->n;
	atomic_store(&pool->next, 0);
	for (size_t i = 1; i < nt; i++) {
		if (pthread_create(&t[started], NULL, imp_worker, pool) != 0)
			break;
		started++;
	}
	imp_worker(pool); /* the calling thread works too */
	for (size_t i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	return 0;
}

/*
 * imp_file - import regular file c->v[i]: chunks into the store, then its inode, dentry and
 * extents into the open transaction. A file that cannot be read (or changes while read) is
 * recorded as a failure and left out.
 * Returns 0 (imported or recorded as failed), -ENOMEM, or -errno of the store or the index
 * (fatal; what failed is printed).
 */
static int imp_file(struct imp_ctx *c, size_t i, uint64_t parent)
{
	struct imp_ent *e = &c->v[i];
	char path[PATH_CAP], why[256] = "";
	struct store_hash whole;
	struct idx_inode a;
	struct stat st;
	uint64_t pos = 0;
	size_t have = 0;
	bool eof = false;
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/%s", c->src, e->rel); /* length checked by imp_scan */
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return imp_fail_add(c, e->step, e->rel, "cannot open: %s", strerror(errno));
	if (fstat(fd, &st) < 0) {
		rc = imp_fail_add(c, e->step, e->rel, "cannot stat: %s", strerror(errno));
		close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return imp_fail_add(c, e->step, e->rel, "no longer a regular file");
	}
	store_hasher_reset(c->hs);
	c->next = 0;
	/* each run of data (store_data_run: holes of a sparse file stay holes, as the daemon keeps
	 * them), cut like the daemon cuts a file: the chunker restarts at each run */
	for (uint64_t end = 0, hole_at = 0;; hole_at = end) {
		uint64_t start = 0;
		int more = store_data_run(fd, hole_at, (uint64_t)st.st_size, &start, &end);

		if (more < 0) {
			rc = imp_fail_add(c, e->step, e->rel, "cannot find its data: %s",
					  strerror(-more));
			close(fd);
			return rc;
		}
		if (!more) {
			store_hasher_hole(c->hs, hole_at, (uint64_t)st.st_size - hole_at);
			break;
		}
		store_hasher_hole(c->hs, hole_at, start - hole_at);
		pos = start;
		eof = false;
		have = 0;
		while (!eof || have) {
			struct imp_pool pool = { .st = c->r->st };
			size_t off = 0, k;

			while (!eof && have < IMPORT_WINDOW) {
				uint64_t at = pos + have;
				size_t want = IMPORT_WINDOW - have;
				ssize_t n;

				if (want > end - at)
					want = (size_t)(end - at);
				n = want ? pread(fd, c->buf + have, want, (off_t)at) : 0;
				if (n < 0 && errno == EINTR)
					continue;
				if (n < 0) {
					rc = imp_fail_add(c, e->step, e->rel, "cannot read at offset %"
							  PRIu64 ": %s", at, strerror(errno));
					close(fd);
					return rc;
				}
				if (n == 0 && want) {
					rc = imp_fail_add(c, e->step, e->rel, "changed while being read "
							  "(%" PRIu64 " bytes at open, ended at %" PRIu64 ")",
							  (uint64_t)st.st_size, at);
					close(fd);
					return rc;
				}
				if (at + (uint64_t)n >= end)
					eof = true;
				have += (size_t)n;
			}
			/* cut the window, each cut over at most 2 * STORE_CHUNK_MAX bytes (a chunk's
			 * boundary depends only on its own bytes: the same cuts as the daemon's) */
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
			pool.v = c->puts;
			pool.n = c->nputs;
			rc = imp_pool_run(&pool);
			if (rc < 0) {
				errmsg("cannot start threads: %s", strerror(-rc));
				close(fd);
				return rc;
			}
			for (k = 0; k < c->nputs; k++) {
				const struct imp_put *u = &c->puts[k];

				if (u->rc < 0) {
					errmsg("cannot store a chunk of '%s' in store '%s': %s", e->rel,
					       c->root, strerror(-u->rc));
					c->nputs = 0;
					close(fd);
					return u->rc;
				}
				if (grow(&c->ext, &c->capext, c->next, sizeof(*c->ext)) < 0) {
					c->nputs = 0;
					close(fd);
					return -ENOMEM;
				}
				c->ext[c->next].offset = pos;
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
				pos += u->len;
				c->done += u->len;
			}
			c->nputs = 0;
			import_progress(c, false);
			memmove(c->buf, c->buf + off, have - off);
			have -= off;
		}
	}
	{
		struct stat now;

		if (fstat(fd, &now) < 0 || now.st_size != st.st_size) {
			rc = imp_fail_add(c, e->step, e->rel, "changed while being read (%" PRIu64
					  " bytes at open, %" PRIu64 " now)", (uint64_t)st.st_size,
					  (uint64_t)now.st_size);
			close(fd);
			return rc;
		}
	}
	pos = (uint64_t)st.st_size;
	store_hasher_digest(c->hs, &whole);
	imp_attr(&st, &a);
	if (e->in_step) {
		rc = validate_file(e->name, pos, imp_pread, &fd, NULL, why, sizeof(why));
		if (rc == 1) {
			a.flags = IDX_INODE_VALID;
		} else if (rc == -EBADMSG) {
			a.flags = IDX_INODE_MALFORMED;
		} else if (rc < 0) {
			rc = imp_fail_add(c, e->step, e->rel, "cannot read for its structure check: %s",
					  strerror(-rc));
			close(fd);
			return rc;
		}
	}
	close(fd);
	rc = imp_inode(c, parent, e->name, &a, NULL, &e->ino);
	if (rc == 0)
		rc = idx_file_set_content(c->r->ix, e->ino, c->ext, c->next, pos, whole.b,
					  a.mtime_ns, imp_release, NULL);
	if (rc < 0) {
		e->ino = 0;
		errmsg("cannot record '%s' in the index of store '%s': %s", e->rel, c->root,
		       strerror(-rc));
		return rc;
	}
	c->files++;
	c->logical += pos;
	c->txn_files++;
	c->txn_bytes += pos;
	if (e->step >= 0) {
		struct imp_step *s = &c->steps[e->step];

		s->files++;
		s->bytes += pos;
		if (a.flags & IDX_INODE_MALFORMED) {
			s->malformed++;
			if (!s->bad[0])
				snprintf(s->bad, sizeof(s->bad), "'%s' is malformed: %s", e->name,
					 why);
		}
		if (e->marker && !(a.flags & IDX_INODE_MALFORMED) && !s->sealed_by[0])
			snprintf(s->sealed_by, sizeof(s->sealed_by), "marker '%s'", e->name);
	}
	if (c->txn_files >= IMPORT_TXN_FILES || c->txn_bytes >= IMPORT_TXN_BYTES) {
		rc = imp_commit(c);
		if (rc < 0) {
			errmsg("cannot commit to store '%s': %s", c->root, strerror(-rc));
			return rc;
		}
	}
	return 0;
}

/* imp_read_small - read regular file path whole (at most IMPORT_TRACKER_MAX bytes).
 * @ret: owned buffer (free()), NULL when the file is empty. Returns 0 or -errno. */
static int imp_read_small(const char *path, char **ret, size_t *ret_len)
{
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK), rc = 0;

	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t n;

		if (len == cap) {
			char *nb;

			if (cap >= IMPORT_TRACKER_MAX) {
				rc = -EFBIG;
				break;
			}
			cap = cap ? 2 * cap : 4096;
			if (!(nb = realloc(buf, cap))) {
				rc = -ENOMEM;
				break;
			}
			buf = nb;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			break;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	*ret = len ? buf : NULL;
	if (!len)
		free(buf);
	*ret_len = len;
	return 0;
}

/*
 * imp_claims - record every top-level tracker as a claim (open transaction) and mark the steps
 * it seals: of each layout sharing the tracker, the step it names and every older one.
 * Returns 0 or -errno of the index (printed).
 */
static int imp_claims(struct imp_ctx *c)
{
	int rc;

	for (size_t i = 0; i < c->n; i++) {
		struct imp_ent *e = &c->v[i];
		struct layout_tracker t;
		struct layout_match m;
		struct imp_claim *cl;
		char path[PATH_CAP], *buf = NULL;
		size_t len = 0;
		int64_t id;

		if (!e->tracker)
			continue;
		snprintf(path, sizeof(path), "%s/%s", c->src, e->rel);
		rc = imp_read_small(path, &buf, &len);
		if (rc < 0) {
			if ((rc = imp_fail_add(c, -1, e->rel, "cannot read tracker: %s",
					       strerror(-rc))) < 0)
				return rc;
			continue;
		}
		if (layout_classify(e->rel, LAYOUT_NONE, &m) < 0 ||
		    grow(&c->claims, &c->capclaims, c->nclaims, sizeof(*c->claims)) < 0) {
			free(buf);
			errmsg("out of memory");
			return -ENOMEM;
		}
		cl = &c->claims[c->nclaims++];
		memset(cl, 0, sizeof(*cl));
		cl->ent = i;
		cl->kind = m.kind;
		escape_bytes((const uint8_t *)buf, len, cl->content, sizeof(cl->content));
		cl->step = layout_tracker_parse(m.kind, e->name, buf, len, &t) == 0 ? t.step : -1;
		rc = imp_txn(c);
		if (rc == 0)
			rc = idx_claim_add(c->r->ix, e->rel, buf, len, cl->step, ckpt_now_ns(), &id);
		free(buf);
		if (rc < 0) {
			errmsg("cannot record the claim of tracker '%s' in store '%s': %s", e->rel,
			       c->root, strerror(-rc));
			return rc;
		}
		if (cl->step < 0)
			continue;
		for (size_t j = 0; j < c->nsteps; j++) {
			struct imp_step *s = &c->steps[j];

			if (s->step > cl->step || !layout_tracker_shared(m.kind, s->kind))
				continue;
			if (s->step == cl->step || !s->sealed_by[0])
				snprintf(s->sealed_by, sizeof(s->sealed_by),
					 s->step == cl->step ? "tracker '%s' names it"
							     : "tracker '%s' names a later step",
					 e->rel);
			cl->sealed++;
		}
	}
	return 0;
}

/* imp_walk_ctx: the figures of a step as steps.c's walk_tree computes them. */
struct imp_walk {
	struct idx *ix;
	uint64_t *dirs;
	size_t ndirs, capdirs;
	uint64_t files, bytes, stored;
	struct store_hasher *digest;
};

static int imp_walk_ent(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct imp_walk *w = arg;
	struct idx_inode a;
	uint64_t st = 0;
	int rc;

	(void)cookie;
	if (S_ISDIR(mode)) {
		if (grow(&w->dirs, &w->capdirs, w->ndirs, sizeof(*w->dirs)) < 0)
			return -ENOMEM;
		w->dirs[w->ndirs++] = ino;
		return 0;
	}
	if (!S_ISREG(mode))
		return 0;
	if ((rc = idx_inode_get(w->ix, ino, &a)) < 0)
		return rc;
	w->files++;
	w->bytes += a.size;
	if (idx_file_stored_bytes(w->ix, ino, &st) == 0)
		w->stored += st;
	store_hasher_update(w->digest, name, strlen(name) + 1);
	store_hasher_update(w->digest, a.hash, IDX_HASH_LEN);
	return 0;
}

/*
 * imp_figures - record step s's figures and digest exactly as fs/steps.c walk_tree() computes
 * them (files in listing order, directories one after another). Returns 0 or -errno.
 */
static int imp_figures(struct imp_ctx *c, const struct imp_step *s)
{
	struct imp_walk w = { .ix = c->r->ix };
	struct store_hash dg;
	int rc;

	if (!(w.digest = store_hasher_new()))
		return -ENOMEM;
	rc = idx_dir_list(c->r->ix, c->v[s->ent].ino, 0, imp_walk_ent, &w);
	for (size_t i = 0; rc >= 0 && i < w.ndirs; i++)
		rc = idx_dir_list(c->r->ix, w.dirs[i], 0, imp_walk_ent, &w);
	if (rc >= 0) {
		store_hasher_digest(w.digest, &dg);
		rc = idx_step_set_figures(c->r->ix, s->id, w.files, w.bytes, w.stored, dg.b);
	}
	free(w.dirs);
	store_hasher_free(w.digest);
	return rc < 0 ? rc : 0;
}

/*
 * imp_judge - decide and record the state of every step (invariant 4 above), in the open
 * transaction. Returns 0 or -errno of the index.
 */
static int imp_judge(struct imp_ctx *c)
{
	int64_t now = ckpt_now_ns();
	int rc;

	for (size_t i = 0; i < c->nsteps; i++) {
		struct imp_step *s = &c->steps[i];
		char note[PATH_CAP + 320];

		if (!s->id)
			continue;
		if ((rc = imp_txn(c)) < 0 || (rc = imp_figures(c, s)) < 0)
			return rc;
		if (s->failed) {
			s->state = IDX_STEP_WRITING;
			snprintf(s->why, sizeof(s->why), "%u file(s) could not be read", s->failed);
		} else if (!s->sealed_by[0]) {
			s->state = IDX_STEP_WRITING;
			snprintf(s->why, sizeof(s->why), "not sealed: %s",
				 layout_tracker_path(s->kind, s->step, -1, note, sizeof(note)) > 0
					 ? "no tracker names it or a later step"
					 : "no commit marker in it");
		} else if (s->files == 0) {
			s->state = IDX_STEP_SEALED;
			snprintf(s->why, sizeof(s->why), "sealed by %s, but holds no file",
				 s->sealed_by);
		} else if (s->malformed) {
			s->state = IDX_STEP_SEALED;
			snprintf(s->why, sizeof(s->why), "%u malformed of %" PRIu64 " files; %s",
				 s->malformed, s->files, s->bad);
		} else {
			s->state = IDX_STEP_COMPLETE;
			snprintf(s->why, sizeof(s->why), "sealed by %s, every file whole",
				 s->sealed_by);
		}
		if (s->sealed_by[0] && s->state != IDX_STEP_WRITING) {
			snprintf(note, sizeof(note), "imported from '%s': %s", c->src, s->sealed_by);
			if ((rc = idx_step_set_state(c->r->ix, s->id, IDX_STEP_SEALED, now, note)) <
			    0)
				return rc;
		}
		snprintf(note, sizeof(note), "imported from '%s': %s", c->src, s->why);
		if ((rc = idx_step_set_state(c->r->ix, s->id, s->state, now, note)) < 0)
			return rc;
	}
	return 0;
}

/*
 * imp_dest - the directory to import into: --dest PATH (relative to the mount root), created
 * with its missing parents (mode 0755, owned by the caller) in the open transaction.
 * Returns 0, -ENOTDIR (a component is not a directory), -EPERM (under /.ckptfs), -ENOMEM, or
 * -errno of the index.
 */
static int imp_dest(struct imp_ctx *c, const char *dest, uint64_t *ret_ino)
{
	uint64_t ino = IDX_ROOT_INO;
	char *copy = strdup(dest), *save = NULL, *tok;
	bool first = true;
	int rc = 0;

	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		struct idx_inode in;
		uint64_t next;

		if (!strcmp(tok, "."))
			continue;
		if (!strcmp(tok, "..") || (first && !strcmp(tok, ".ckptfs"))) {
			rc = -EPERM;
			break;
		}
		first = false;
		rc = idx_dentry_lookup(c->r->ix, ino, tok, &next);
		if (rc == -ENOENT) {
			struct stat st = { 0 };

			st.st_mode = S_IFDIR | 0755;
			st.st_uid = getuid();
			st.st_gid = getgid();
			clock_gettime(CLOCK_REALTIME, &st.st_mtim);
			st.st_atim = st.st_mtim;
			imp_attr(&st, &in);
			rc = imp_inode(c, ino, tok, &in, NULL, &next);
			if (rc == 0)
				c->dirs++;
		}
		if (rc < 0)
			break;
		if ((rc = idx_inode_get(c->r->ix, next, &in)) < 0)
			break;
		if (!S_ISDIR(in.mode)) {
			rc = -ENOTDIR;
			break;
		}
		ino = next;
	}
	free(copy);
	if (rc == 0)
		*ret_ino = ino;
	return rc;
}

/* imp_open - open (creating) root exclusively; refuses a mounted store. Returns EXIT_OK or
 * EXIT_ERROR (printed). */
static int imp_open(struct imp_ctx *c, bool *ret_created)
{
	char err[1024] = "";
	struct stat st;
	int rc;

	*ret_created = stat(c->root, &st) < 0 && errno == ENOENT;
	rc = ckpt_repo_open(c->root, REPO_CREATE | REPO_EXCLUSIVE, NULL, err, sizeof(err), &c->r);
	if (rc == -EBUSY) {
		if (ckpt_repo_open(c->root, REPO_RDONLY, NULL, err, sizeof(err), &c->r) == 0 &&
		    c->r->mounted)
			errmsg("store '%s' is mounted by pid %d; importing needs the store "
			       "unmounted: unmount it first (fusermount3 -u MOUNTPOINT), then run "
			       "'ckptctl %s import %s' again",
			       c->root, (int)c->r->owner_pid, c->root, c->src);
		else
			errmsg("store '%s' is in use by another process; retry when it is done",
			       c->root);
		ckpt_repo_close(c->r);
		c->r = NULL;
		return EXIT_ERROR;
	}
	if (rc < 0) {
		errmsg("%s", err[0] ? err : strerror(-rc));
		return EXIT_ERROR;
	}
	return EXIT_OK;
}

static const char *imp_state_name(const struct imp_step *s)
{
	return s->id ? idx_step_state_name(s->state) : "not recorded";
}

/* imp_report - the result on stdout: text, or one JSON object with --json. */
static void imp_report(struct imp_ctx *c, const char *dest, double secs)
{
	char b1[64], b2[64];
	size_t i;

	if (c->json) {
		json_t *o = json_object(), *a = json_array();

		json_object_set_new(o, "store", json_string(c->root));
		json_object_set_new(o, "source", json_string(c->src));
		json_object_set_new(o, "destination", json_string(dest));
		json_object_set_new(o, "files", json_u64(c->files));
		json_object_set_new(o, "dirs", json_u64(c->dirs));
		json_object_set_new(o, "symlinks", json_u64(c->symlinks));
		json_object_set_new(o, "logical_bytes", json_u64(c->logical));
		json_object_set_new(o, "stored_bytes_added", json_u64(c->stored_added));
		json_object_set_new(o, "chunks_written", json_u64(c->chunks_written));
		json_object_set_new(o, "dedup_hits", json_u64(c->dedup_hits));
		json_object_set_new(o, "seconds", json_real(secs));
		json_object_set_new(o, "mb_per_s", json_real(imp_mbps(c, secs)));
		for (i = 0; i < c->nsteps; i++) {
			const struct imp_step *s = &c->steps[i];
			json_t *so = json_object();

			json_object_set_new(so, "id", s->id ? json_integer(s->id) : json_null());
			json_object_set_new(so, "name", json_name(c->v[s->ent].name));
			json_object_set_new(so, "step", json_integer(s->step));
			json_object_set_new(so, "layout", json_string(kind_name(s->kind)));
			json_object_set_new(so, "files", json_u64(s->files));
			json_object_set_new(so, "bytes", json_u64(s->bytes));
			json_object_set_new(so, "state", json_string(imp_state_name(s)));
			json_object_set_new(so, "sealed_by", s->sealed_by[0]
								  ? json_string(s->sealed_by)
								  : json_null());
			json_object_set_new(so, "note", json_string(s->why));
			json_array_append_new(a, so);
		}
		json_object_set_new(o, "steps", a);
		a = json_array();
		for (i = 0; i < c->nclaims; i++) {
			json_t *co = json_object();

			json_object_set_new(co, "tracker", json_name(c->v[c->claims[i].ent].rel));
			json_object_set_new(co, "content", json_string(c->claims[i].content));
			json_object_set_new(co, "step", c->claims[i].step >= 0
								? json_integer(c->claims[i].step)
								: json_null());
			json_object_set_new(co, "steps_sealed", json_integer(c->claims[i].sealed));
			json_array_append_new(a, co);
		}
		json_object_set_new(o, "claims", a);
		a = json_array();
		for (i = 0; i < c->nfail; i++) {
			json_t *fo = json_object();

			json_object_set_new(fo, "path", json_name(c->fail[i].path));
			json_object_set_new(fo, "reason", json_string(c->fail[i].reason));
			json_array_append_new(a, fo);
		}
		json_object_set_new(o, "failed", a);
		a = json_array();
		for (i = 0; i < c->nskipped; i++)
			json_array_append_new(a, json_name(c->skipped[i]));
		json_object_set_new(o, "skipped", a);
		json_print(o);
		return;
	}
	printf("imported '%s' into store '%s' at '%s': %" PRIu64 " files, %" PRIu64
	       " directories, %" PRIu64 " symlinks, %s\n",
	       c->src, c->root, dest, c->files, c->dirs, c->symlinks,
	       fmt_size(c->logical, b1, sizeof(b1)));
	if (c->nsteps) {
		int wname = 4, wl = 6, wf = 5;

		for (i = 0; i < c->nsteps; i++) {
			int k;

			if ((k = (int)strlen(c->v[c->steps[i].ent].name)) > wname)
				wname = k;
			if ((k = (int)strlen(kind_name(c->steps[i].kind))) > wl)
				wl = k;
			if ((k = numw(c->steps[i].files)) > wf)
				wf = k;
		}
		printf("%-*s  %-*s  %*s  %10s  %-10s  %s\n", wname, "STEP", wl, "LAYOUT", wf,
		       "FILES", "BYTES", "STATE", "WHY");
		for (i = 0; i < c->nsteps; i++) {
			const struct imp_step *s = &c->steps[i];

			printf("%-*s  %-*s  %*" PRIu64 "  %10s  %-10s  %s\n", wname,
			       c->v[s->ent].name, wl, kind_name(s->kind), wf, s->files,
			       fmt_short_size(s->bytes, b1, sizeof(b1)), imp_state_name(s), s->why);
		}
	}
	for (i = 0; i < c->nclaims; i++)
		printf("tracker: %s = \"%s\" recorded as a claim (trackers are virtual: a mount "
		       "serves the newest complete step)\n",
		       c->v[c->claims[i].ent].rel, c->claims[i].content);
	for (i = 0; i < c->nskipped; i++)
		printf("skipped: %s (the name of the mount's own directory)\n", c->skipped[i]);
	printf("stored: %s added, %" PRIu64 " chunks written, %" PRIu64 " dedup hits; %.1f MB/s "
	       "(%.2f s)\n",
	       fmt_size(c->stored_added, b2, sizeof(b2)), c->chunks_written, c->dedup_hits,
	       imp_mbps(c, secs), secs);
	for (i = 0; i < c->nfail; i++)
		printf("failed: %s: %s\n", c->fail[i].path, c->fail[i].reason);
}

static int import_run(const char *root, const char *dest, const char *src, bool json)
{
	struct imp_ctx c = { .root = root, .src = src, .json = json };
	char **taken = NULL;
	size_t ntaken = 0, captaken = 0, i;
	bool created = false, restore_clean = false;
	struct stat st;
	int rc, status = EXIT_ERROR;

	clock_gettime(CLOCK_MONOTONIC, &c.start);
	if (stat(src, &st) < 0) {
		errmsg("cannot import '%s': %s", src, strerror(errno));
		return EXIT_ERROR;
	}
	if (!S_ISDIR(st.st_mode)) {
		errmsg("cannot import '%s': %s", src, strerror(ENOTDIR));
		return EXIT_ERROR;
	}
	/* --dest: anything but the root turns steps and trackers into plain files */
	c.at_root = true;
	for (const char *p = dest; *p; p++)
		if (*p != '/' && !(*p == '.' && (p[1] == '/' || !p[1]) && (p == dest || p[-1] == '/')))
			c.at_root = false;
	/* 1. scan DIR before touching the store */
	rc = imp_scan(&c, "", SIZE_MAX, 0);
	if (rc < 0) {
		errmsg("out of memory");
		goto out;
	}
	if (!c.n && c.nfail) {
		errmsg("cannot import '%s': %s", src, c.fail[0].reason);
		goto out;
	}
	ctl_progress_init(&c.prog);
	c.buf = malloc(IMPORT_WINDOW);
	c.puts = calloc(IMPORT_WINDOW / STORE_CHUNK_MIN + 1, sizeof(*c.puts));
	c.hs = store_hasher_new();
	if (!c.buf || !c.puts || !c.hs) {
		errmsg("out of memory");
		goto out;
	}
	if (imp_open(&c, &created) != EXIT_OK)
		goto out;
	restore_clean = created || c.r->was_clean;
	rc = imp_dest(&c, dest, &c.dest_ino);
	if (rc < 0) {
		if (rc == -ENOTDIR || rc == -EPERM)
			errmsg("cannot import into '%s': %s", dest,
			       rc == -EPERM ? "not a place in the namespace ('..' or /.ckptfs)"
					    : "not a directory in the store");
		else
			index_error(root, "create the destination", rc);
		goto out_rollback;
	}
	/* 2. refuse names already taken at the destination (trackers are virtual: never) */
	for (i = 0; i < c.n; i++) {
		uint64_t ino;

		if (c.v[i].parent != SIZE_MAX || c.v[i].tracker)
			continue;
		rc = idx_dentry_lookup(c.r->ix, c.dest_ino, c.v[i].name, &ino);
		if (rc == -ENOENT)
			continue;
		if (rc < 0) {
			index_error(root, "look up a name", rc);
			goto out_rollback;
		}
		if (grow(&taken, &captaken, ntaken, sizeof(*taken)) < 0) {
			errmsg("out of memory");
			goto out_rollback;
		}
		taken[ntaken++] = c.v[i].rel;
	}
	if (ntaken) {
		errmsg("%zu name(s) of '%s' already exist at '%s' in store '%s' (%s%s); import "
		       "never replaces anything: remove them through a mount, or import with "
		       "--dest PATH",
		       ntaken, src, dest, root, taken[0], ntaken > 1 ? ", ..." : "");
		goto out_rollback;
	}
	/* until the import is over, the next mount sweeps what an interrupted one left */
	rc = ckpt_repo_set_clean(c.r, false);
	if (rc < 0) {
		errmsg("cannot update '%s/clean': %s", root, strerror(-rc));
		goto out_rollback;
	}
	/* 3. trackers: claims, and the steps they seal */
	if (imp_claims(&c) < 0)
		goto out_rollback;
	/* 4. the tree, in pre-order */
	import_progress(&c, true);
	for (i = 0; i < c.n; i++) {
		struct imp_ent *e = &c.v[i];
		uint64_t parent = e->parent == SIZE_MAX ? c.dest_ino : c.v[e->parent].ino;
		struct idx_inode a;

		if (e->tracker)
			continue;
		assert(parent); /* a directory that cannot be created stops the import */
		if (S_ISREG(e->st.st_mode)) {
			rc = imp_file(&c, i, parent);
			if (rc == -ENOMEM)
				goto out_oom;
			if (rc < 0)
				goto out_progress;
			continue;
		}
		if (S_ISDIR(e->st.st_mode)) {
			imp_attr(&e->st, &a);
			rc = imp_inode(&c, parent, e->name, &a, NULL, &e->ino);
			if (rc == 0 && e->parent == SIZE_MAX && e->step >= 0) {
				struct imp_step *s = &c.steps[e->step];

				rc = idx_step_create(c.r->ix, s->kind, e->name, s->step, e->ino,
						     ckpt_now_ns(), &s->id);
			}
			if (rc < 0) {
				ctl_progress_clear(&c.prog);
				index_error(root, "create a directory", rc);
				goto out_rollback;
			}
			c.dirs++;
			continue;
		}
		if (S_ISLNK(e->st.st_mode)) {
			char path[PATH_CAP], target[PATH_CAP];
			ssize_t n;

			snprintf(path, sizeof(path), "%s/%s", src, e->rel);
			n = readlink(path, target, sizeof(target) - 1);
			if (n < 0) {
				if (imp_fail_add(&c, e->step, e->rel, "cannot read symlink: %s",
						 strerror(errno)) < 0)
					goto out_oom;
				continue;
			}
			target[n] = '\0';
			imp_attr(&e->st, &a);
			a.size = (uint64_t)n;
			rc = imp_inode(&c, parent, e->name, &a, target, &e->ino);
			if (rc < 0) {
				ctl_progress_clear(&c.prog);
				index_error(root, "create a symlink", rc);
				goto out_rollback;
			}
			c.symlinks++;
			continue;
		}
		/* a FIFO, socket or device node: its metadata, as the daemon keeps it (mknod) */
		imp_attr(&e->st, &a);
		if (S_ISCHR(e->st.st_mode) || S_ISBLK(e->st.st_mode))
			a.rdev = (uint64_t)e->st.st_rdev;
		rc = imp_inode(&c, parent, e->name, &a, NULL, &e->ino);
		if (rc < 0) {
			ctl_progress_clear(&c.prog);
			index_error(root, "create a special file", rc);
			goto out_rollback;
		}
	}
	/* 5. the steps' states, the destination's times, durable */
	rc = imp_judge(&c);
	if (rc == 0 && (rc = imp_txn(&c)) == 0) {
		struct idx_inode d;

		rc = idx_inode_get(c.r->ix, c.dest_ino, &d);
		if (rc == 0) {
			d.mtime_ns = d.ctime_ns = ckpt_now_ns();
			rc = idx_inode_update(c.r->ix, &d);
		}
	}
	if (rc == 0)
		rc = imp_commit(&c);
	if (rc < 0) {
		ctl_progress_clear(&c.prog);
		index_error(root, "record the steps", rc);
		goto out_rollback;
	}
	import_progress(&c, true);
	ctl_progress_clear(&c.prog);
	if (restore_clean && !c.nfail && (rc = ckpt_repo_set_clean(c.r, true)) < 0)
		errmsg("cannot update '%s/clean': %s (the next mount checks the store)", root,
		       strerror(-rc));
	imp_report(&c, dest, imp_elapsed(&c));
	if (c.nfail)
		errmsg("%zu entr%s of '%s' could not be imported (listed above); the rest was",
		       c.nfail, c.nfail == 1 ? "y" : "ies", src);
	status = c.nfail ? EXIT_DAMAGE : EXIT_OK;
	goto out;

out_oom:
	errmsg("out of memory");
out_progress:
	ctl_progress_clear(&c.prog);
out_rollback:
	if (c.in_txn) {
		idx_rollback(c.r->ix);
		c.in_txn = false;
	}
	if (c.r && c.files)
		errmsg("the import into store '%s' is incomplete: what was committed stays; its "
		       "steps are set aside at the next mount",
		       root);
out:
	free(taken);
	ckpt_repo_close(c.r);
	imp_free(&c);
	return status;
}

int cmd_import(const struct ctl_opts *o)
{
	if (o->argc != 1)
		return usage_error("'import' takes one DIR");
	if (o->force)
		return usage_error("'import' never replaces anything: it has no '--force'");
	return import_run(o->root, o->dest ? o->dest : "/", o->argv[0], o->json);
}
