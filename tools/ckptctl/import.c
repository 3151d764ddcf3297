/*
 * import.c — ckptctl import [--dest PATH] DIR: ingest a plain checkpoint directory into a store
 * not mounted: files chunked into the store, steps recognised and judged, trackers recorded as
 * claims. A mounted store is imported into through its mount instead (import_mount.c); both
 * share the scan, the trackers' claims and the report here.
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"
#include "import_int.h"

int imp_fail_add(struct imp_ctx *c, int step, const char *rel, const char *fmt, ...)
{
	char reason[PATH_CAP + 256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	if (ckpt_grow(&c->fail, &c->capfail, c->nfail, sizeof(*c->fail)) < 0)
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

double imp_elapsed(const struct imp_ctx *c)
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

void import_progress(struct imp_ctx *c, bool force)
{
	ctl_progress_work(&c->prog, force, "import", "files", c->files_done, c->files_total,
			  c->done, c->total);
}

/* imp_name_cmp - qsort of char * by strcmp. */
static int imp_name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * imp_has_marker - does the candidate directory DIR/rel (policy rule 1: an all-digit name) hold
 * its layout's marker, a regular file directly inside it, the evidence that makes it a step? An
 * unreadable directory holds none: its files are then imported as ordinary ones.
 */
static bool imp_has_marker(const struct imp_ctx *c, const char *rel)
{
	char path[PATH_CAP], child[PATH_CAP];
	struct dirent *d;
	struct stat st;
	bool found = false;
	DIR *dir;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", c->src, rel) >= sizeof(path) ||
	    !(dir = opendir(path)))
		return false;
	while (!found && (d = readdir(dir))) {
		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, "..") ||
		    (size_t)snprintf(child, sizeof(child), "%s/%s", rel, d->d_name) >= sizeof(child) ||
		    fstatat(dirfd(dir), d->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		found = policy_entry_of(child, st.st_mode, LAYOUT_NONE, NULL) == POLICY_MARKER;
	}
	closedir(dir);
	return found;
}

/* imp_classify - at the mount root, what the new entry e is to the policy (scan time). */
static int imp_classify(struct imp_ctx *c, size_t i)
{
	struct imp_ent *e = &c->v[i];
	struct layout_match m;
	enum policy_entry pe;

	e->step = e->parent == SIZE_MAX ? -1 : c->v[e->parent].step;
	if (!c->at_root)
		return 0;
	pe = policy_entry_of(e->rel, e->st.st_mode, LAYOUT_NONE, &m);
	/* as the daemon: a digit directory is a step only with its marker in it (policy rule 1) */
	if (pe == POLICY_CANDIDATE && imp_has_marker(c, e->rel))
		pe = POLICY_STEP_DIR;
	if (pe == POLICY_TRACKER || pe == POLICY_RANK_TRACKER) {
		e->tracker = true; /* a claim, never a file (fs/steps/steps.c invariant 3) */
	} else if (pe == POLICY_RANK_FILE || pe == POLICY_TOP_FILE) {
		e->in_step = true; /* checked as the daemon checks it; its step: imp_finish */
	} else if (pe == POLICY_STEP_DIR) {
		struct imp_step *s;

		if (ckpt_grow(&c->steps, &c->capsteps, c->nsteps, sizeof(*c->steps)) < 0)
			return -ENOMEM;
		s = &c->steps[c->nsteps];
		memset(s, 0, sizeof(*s));
		s->ent = i;
		s->kind = m.kind;
		s->step = m.step;
		e->step = (int)c->nsteps++;
	} else if ((pe == POLICY_STEP_FILE || pe == POLICY_MARKER) &&
		   (e->step >= 0 || !policy_needs_evidence(&m))) {
		e->in_step = true;
		if (pe == POLICY_MARKER && e->step >= 0 && policy_marker_seals(&m)) {
			struct imp_step *s = &c->steps[e->step];

			e->marker = true;
			s->kind = policy_marker_kind(s->kind, c->v[s->ent].rel, &m, LAYOUT_NONE);
		}
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
		if (ckpt_grow(&names, &capnames, nnames, sizeof(*names)) < 0 ||
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
			if (ckpt_grow(&c->skipped, &c->capskipped, c->nskipped, sizeof(*c->skipped)) < 0 ||
			    !(c->skipped[c->nskipped] = strdup(names[i]))) {
				rc = -ENOMEM;
				break;
			}
			c->nskipped++;
			continue;
		}
		if (ckpt_grow(&c->v, &c->cap, c->n, sizeof(*c->v)) < 0) {
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
		if (S_ISREG(c->v[me].st.st_mode) && !c->v[me].tracker) {
			c->files_total++;
			c->total += (uint64_t)c->v[me].st.st_size;
		}
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

int imp_tracker_read(struct imp_ctx *c, size_t i, struct imp_claim *ret, char **ret_buf,
		     size_t *ret_len)
{
	struct imp_ent *e = &c->v[i];
	struct layout_tracker t;
	struct layout_match m;
	char path[PATH_CAP], *buf = NULL;
	size_t len = 0;
	int rc;

	snprintf(path, sizeof(path), "%s/%s", c->src, e->rel);
	rc = imp_read_small(path, &buf, &len);
	if (rc < 0)
		return imp_fail_add(c, -1, e->rel, "cannot read tracker: %s", strerror(-rc));
	if (layout_classify(e->rel, LAYOUT_NONE, &m) < 0) {
		free(buf);
		return -ENOMEM;
	}
	memset(ret, 0, sizeof(*ret));
	ret->ent = i;
	ret->kind = m.kind;
	ctl_escape((const uint8_t *)buf, len, ret->content, sizeof(ret->content));
	ret->step = layout_tracker_parse(m.kind, e->name, buf, len, &t) == 0 ? t.step : -1;
	*ret_buf = buf;
	*ret_len = len;
	return 1;
}

int imp_claim_keep(struct imp_ctx *c, const struct imp_claim *claim)
{
	const char *rel = c->v[claim->ent].rel;
	struct imp_claim *cl;

	if (ckpt_grow(&c->claims, &c->capclaims, c->nclaims, sizeof(*c->claims)) < 0)
		return -ENOMEM;
	cl = &c->claims[c->nclaims++];
	*cl = *claim;
	cl->sealed = 0;
	if (cl->step < 0)
		return 0;
	for (size_t j = 0; j < c->nsteps; j++) {
		struct imp_step *s = &c->steps[j];
		enum policy_seal how = policy_claim_seals(cl->kind, cl->step, s->kind, s->step,
							   false);

		if (how == POLICY_SEAL_NONE)
			continue;
		if (how == POLICY_SEAL_NAMED || !s->sealed_by[0])
			snprintf(s->sealed_by, sizeof(s->sealed_by),
				 how == POLICY_SEAL_NAMED ? "tracker '%s' names it"
							  : "tracker '%s' names a later step",
				 rel);
		cl->sealed++;
	}
	return 0;
}

/*
 * imp_claims - record every top-level tracker as a claim (open transaction) and mark the steps
 * it seals (policy rule 2 without history: a plain directory keeps only the last claim).
 * Returns 0 or -errno of the index (printed).
 */
static int imp_claims(struct imp_ctx *c)
{
	int rc;

	for (size_t i = 0; i < c->n; i++) {
		struct imp_claim cl;
		char *buf = NULL;
		size_t len = 0;
		int64_t id;

		if (!c->v[i].tracker)
			continue;
		rc = imp_tracker_read(c, i, &cl, &buf, &len);
		if (rc == 0)
			continue;
		if (rc < 0) {
			ctl_err("out of memory");
			return rc;
		}
		rc = imp_txn(c);
		if (rc == 0)
			rc = idx_claim_add(c->r->ix, c->v[i].rel, buf, len, cl.step, ckpt_now_ns(),
					   &id);
		free(buf);
		if (rc < 0) {
			ctl_err("cannot record the claim of tracker '%s' in store '%s': %s",
				c->v[i].rel, c->root, strerror(-rc));
			return rc;
		}
		if (imp_claim_keep(c, &cl) < 0) {
			ctl_err("out of memory");
			return -ENOMEM;
		}
	}
	return 0;
}

/* imp_step_order - qsort_r of indices into the steps array arg by (kind, step number). */
static int imp_step_order(const void *a, const void *b, void *arg)
{
	const struct imp_step *x = &((const struct imp_step *)arg)[*(const size_t *)a];
	const struct imp_step *y = &((const struct imp_step *)arg)[*(const size_t *)b];

	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	return x->step < y->step ? -1 : x->step > y->step;
}

/*
 * imp_judge_one - judge step s by the policy (rule 3) and record its figures and state in the
 * open transaction. A copy (every file whole, nothing sealed it, a layout found through its
 * tracker) is recorded copied; what else is not complete stays writing (unsealed) or sealed:
 * setting a step aside moves its directory, which is the daemon's, at the first mount.
 * Returns 0 or -errno.
 */
static int imp_judge_one(struct imp_ctx *c, struct imp_step *s, int64_t now)
{
	/* this import is the step's one writer, gone once it ends: a whole step nothing sealed
	 * is a copy (policy rule 3), as a `cp -r` through a mount makes it */
	struct policy_step_in in = { .sealed = s->sealed_by[0] != 0, .settled = true,
				     .quiet = true, .check_listed = true, .unsound = s->malformed,
				     .unreadable = s->failed, .writers = 1 };
	char absent[NAME_MAX + 64], unlisted[NAME_MAX + 64], note[PATH_CAP + 320];
	struct policy_figures fig;
	struct policy_facts f;
	struct idx_step row;
	int rc;

	if ((rc = imp_txn(c)) < 0 ||
	    (rc = policy_step_walk(c->r->ix, c->v[s->ent].ino, NULL, NULL, &fig)) < 0 ||
	    (rc = idx_step_set_figures(c->r->ix, s->id, fig.files, fig.bytes, fig.stored,
				       fig.digest.b)) < 0 ||
	    (rc = idx_step_get(c->r->ix, s->id, &row)) < 0)
		return rc;
	in.files = fig.files;
	if ((rc = policy_step_facts(c->r->ix, c->r->st, &row, &in, absent, unlisted,
				    sizeof(absent), &f)) < 0)
		return rc;
	enum policy_verdict v = policy_judge(&f, s->why, sizeof(s->why));

	if (v == POLICY_COMPLETE) {
		s->state = IDX_STEP_COMPLETE;
		snprintf(s->why, sizeof(s->why), "sealed by %s, every file whole", s->sealed_by);
	} else if (v == POLICY_COPIED) {
		s->state = IDX_STEP_COPIED; /* left at its name by the daemon, as a copy */
	} else {
		/* a step missing files it could not read is not recorded sealed: what was
		 * imported of it is not what the trainer sealed */
		s->state = f.sealed && !s->failed ? IDX_STEP_SEALED : IDX_STEP_WRITING;
		if (s->malformed && f.sealed && !s->failed) {
			size_t l = strlen(s->why);

			snprintf(s->why + l, sizeof(s->why) - l, "; %s", s->bad);
		}
	}
	if (s->state == IDX_STEP_SEALED || s->state == IDX_STEP_COMPLETE) {
		snprintf(note, sizeof(note), "imported from '%s': %s", c->src, s->sealed_by);
		if ((rc = idx_step_set_state(c->r->ix, s->id, IDX_STEP_SEALED, now, note)) < 0)
			return rc;
	}
	snprintf(note, sizeof(note), "imported from '%s': %s", c->src, s->why);
	return idx_step_set_state(c->r->ix, s->id, s->state, now, note);
}

/*
 * imp_judge - judge every step (imp_judge_one), older steps first within each layout, so that a
 * DeepSpeed or Hugging Face step is compared with the previous complete one as the daemon does.
 * Returns 0 or -errno of the index.
 */
static int imp_judge(struct imp_ctx *c)
{
	int64_t now = ckpt_now_ns();
	size_t *order = calloc(c->nsteps ? c->nsteps : 1, sizeof(*order));
	int rc = 0;

	if (!order)
		return -ENOMEM;
	for (size_t i = 0; i < c->nsteps; i++)
		order[i] = i;
	qsort_r(order, c->nsteps, sizeof(*order), imp_step_order, c->steps);
	for (size_t i = 0; rc == 0 && i < c->nsteps; i++)
		if (c->steps[order[i]].id)
			rc = imp_judge_one(c, &c->steps[order[i]], now);
	free(order);
	return rc;
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

/* What imp_open found. */
enum imp_opened {
	IMP_OPEN_FAILED = -1, /* printed */
	IMP_OPEN_OWNED,       /* held exclusively, writable (created if absent) */
	IMP_OPEN_MOUNTED,     /* mounted: opened read-only, c->mnt is its mount point */
};

/*
 * imp_open_mounted - c->r is a mounted store, open read-only: find its mount point
 * (ckpt_repo_mount_point) into c->mnt. Returns 0, or -1 (printed).
 */
static int imp_open_mounted(struct imp_ctx *c)
{
	int rc = ckpt_repo_mount_point(c->r, c->mnt, sizeof(c->mnt));

	if (rc == 0)
		return 0;
	if (rc == -ESTALE)
		ctl_err("store '%s' is mounted by pid %d at a mount this process does not see "
			"(another mount namespace?): run the import where the mount is, or unmount "
			"the store first",
			c->root, (int)c->r->owner_pid);
	else
		ctl_err("store '%s' is owned by pid %d, which serves no mount now (starting, or "
			"finishing its writes after an unmount): retry once it is mounted or gone",
			c->root, (int)c->r->owner_pid);
	return -1;
}

/*
 * imp_open - open (creating) root exclusively; a mounted store is opened read-only instead,
 * with its mount point into c->mnt, to import through the mount.
 */
static enum imp_opened imp_open(struct imp_ctx *c, bool *ret_created)
{
	char err[1024] = "";
	struct stat st;
	int rc;

	*ret_created = stat(c->root, &st) < 0 && errno == ENOENT;
	rc = ckpt_repo_open(c->root, REPO_CREATE | REPO_EXCLUSIVE, NULL, err, sizeof(err), &c->r);
	if (rc == -EBUSY) {
		if (ckpt_repo_open(c->root, REPO_RDONLY, NULL, err, sizeof(err), &c->r) == 0 &&
		    c->r->mounted) {
			if (imp_open_mounted(c) == 0)
				return IMP_OPEN_MOUNTED;
		} else {
			ctl_err("store '%s' is in use by another process; retry when it is done",
				c->root);
		}
		ckpt_repo_close(c->r);
		c->r = NULL;
		return IMP_OPEN_FAILED;
	}
	if (rc < 0) {
		ctl_err("%s", err[0] ? err : strerror(-rc));
		return IMP_OPEN_FAILED;
	}
	return IMP_OPEN_OWNED;
}

static const char *imp_state_name(const struct imp_step *s)
{
	return s->id ? idx_step_state_name(s->state) : "not recorded";
}

void imp_report(struct imp_ctx *c, const char *dest, double secs)
{
	char b1[64], b2[64], q[CTL_QUOTE_CAP(PATH_CAP)];
	size_t i;

	if (c->json) {
		bool m = c->mnt[0]; /* through a mount: the daemon stored the chunks, not we */
		json_t *a = json_array();
		json_t *o = json_pack(
			"{s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:f, s:f}",
			"store", c->root, "source", c->src, "destination", dest,
			"mount", m ? json_string(c->mnt) : json_null(),
			"files", ctl_u64(c->files), "dirs", ctl_u64(c->dirs),
			"symlinks", ctl_u64(c->symlinks), "logical_bytes", ctl_u64(c->logical),
			"stored_bytes_added", m ? json_null() : ctl_u64(c->stored_added),
			"chunks_written", m ? json_null() : ctl_u64(c->chunks_written),
			"dedup_hits", m ? json_null() : ctl_u64(c->dedup_hits),
			"elapsed_seconds", secs, "logical_bytes_per_second",
			secs > 0 ? (double)c->done / secs : 0.0);
		for (i = 0; i < c->nsteps; i++) {
			const struct imp_step *s = &c->steps[i];
			json_t *so = json_object();

			json_object_set_new(so, "id", s->id ? json_integer(s->id) : json_null());
			json_object_set_new(so, "name", policy_json_name(c->v[s->ent].name));
			json_object_set_new(so, "step", json_integer(s->step));
			json_object_set_new(so, "layout", json_string(ctl_kind(s->kind)));
			json_object_set_new(so, "files", ctl_u64(s->files));
			json_object_set_new(so, "logical_bytes", ctl_u64(s->bytes));
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

			json_object_set_new(co, "tracker", policy_json_name(c->v[c->claims[i].ent].rel));
			json_object_set_new(co, "content", json_string(c->claims[i].content));
			json_object_set_new(co, "step", c->claims[i].step >= 0
								? json_integer(c->claims[i].step)
								: json_null());
			json_object_set_new(co, "steps_sealed", json_integer(c->claims[i].sealed));
			json_object_set_new(co, "replayed", json_boolean(c->claims[i].replayed));
			json_array_append_new(a, co);
		}
		json_object_set_new(o, "claims", a);
		a = json_array();
		for (i = 0; i < c->nfail; i++) {
			json_t *fo = json_object();

			json_object_set_new(fo, "path", policy_json_name(c->fail[i].path));
			json_object_set_new(fo, "reason", json_string(c->fail[i].reason));
			json_array_append_new(a, fo);
		}
		json_object_set_new(o, "failed", a);
		a = json_array();
		for (i = 0; i < c->nskipped; i++)
			json_array_append_new(a, policy_json_name(c->skipped[i]));
		json_object_set_new(o, "skipped", a);
		ctl_print("ckptfs-import/1", o);
		return;
	}
	printf("imported '%s' into store '%s'%s%s%s at '%s': %" PRIu64 " files, %" PRIu64
	       " directories, %" PRIu64 " symlinks, %s\n",
	       c->src, c->root, c->mnt[0] ? " through its mount '" : "", c->mnt,
	       c->mnt[0] ? "'" : "", dest, c->files, c->dirs, c->symlinks,
	       policy_size_text(c->logical, b1, sizeof(b1)));
	if (c->nsteps) {
		int wname = 4, wl = 6, wf = 5;

		for (i = 0; i < c->nsteps; i++) {
			int k;

			if ((k = (int)strlen(ctl_quote(c->v[c->steps[i].ent].name, q,
							 sizeof(q)))) > wname)
				wname = k;
			if ((k = (int)strlen(ctl_kind(c->steps[i].kind))) > wl)
				wl = k;
			if ((k = ctl_numw(c->steps[i].files)) > wf)
				wf = k;
		}
		printf("%-*s  %-*s  %*s  %10s  %-10s  %s\n", wname, "STEP", wl, "LAYOUT", wf,
		       "FILES", "BYTES", "STATE", "WHY");
		for (i = 0; i < c->nsteps; i++) {
			const struct imp_step *s = &c->steps[i];

			printf("%-*s  %-*s  %*" PRIu64 "  %10s  %-10s  %s\n", wname,
			       ctl_quote(c->v[s->ent].name, q, sizeof(q)), wl, ctl_kind(s->kind), wf, s->files,
			       ctl_short_size(s->bytes, b1, sizeof(b1)), imp_state_name(s), s->why);
		}
	}
	for (i = 0; i < c->nclaims; i++)
		printf("tracker: %s = \"%s\" %s%s\n",
		       ctl_quote(c->v[c->claims[i].ent].rel, q, sizeof(q)), c->claims[i].content,
		       c->mnt[0] ? "written through the mount, after the files it seals"
				 : "recorded as a claim (trackers are virtual: a mount serves the "
				   "newest complete step)",
		       c->claims[i].replayed ? " (the trainer's earlier write, written again: "
					       "a plain directory keeps only the last)"
					     : "");
	for (i = 0; i < c->nskipped; i++)
		printf("skipped: %s (the name of the mount's own directory)\n",
		       ctl_quote(c->skipped[i], q, sizeof(q)));
	if (c->mnt[0])
		printf("copied: %.1f MB/s (%.2f s); the daemon chunked and stored the files\n",
		       imp_mbps(c, secs), secs);
	else
		printf("stored: %s added, %" PRIu64 " chunks written, %" PRIu64 " dedup hits; "
		       "%.1f MB/s (%.2f s)\n",
		       policy_size_text(c->stored_added, b2, sizeof(b2)), c->chunks_written,
		       c->dedup_hits, imp_mbps(c, secs), secs);
	for (i = 0; i < c->nfail; i++)
		printf("failed: %s: %s\n", ctl_quote(c->fail[i].path, q, sizeof(q)),
		       c->fail[i].reason);
}

/*
 * imp_prepare - step 1: check that src is a directory, note whether dest is the mount root,
 * scan src, and allocate the buffers for reading files.
 * Returns 0, or -1 when the import cannot begin (printed).
 */
static int imp_prepare(struct imp_ctx *c, const char *dest)
{
	const char *src = c->src;
	struct stat st;

	if (stat(src, &st) < 0) {
		ctl_err("cannot import '%s': %s", src, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		ctl_err("cannot import '%s': %s", src, strerror(ENOTDIR));
		return -1;
	}
	/* --dest: anything but the root turns steps and trackers into plain files */
	c->at_root = true;
	for (const char *p = dest; *p; p++)
		if (*p != '/' && !(*p == '.' && (p[1] == '/' || !p[1]) && (p == dest || p[-1] == '/')))
			c->at_root = false;
	/* scan DIR before touching the store */
	if (imp_scan(c, "", SIZE_MAX, 0) < 0) {
		ctl_err("out of memory");
		return -1;
	}
	if (!c->n && c->nfail) {
		ctl_err("cannot import '%s': %s", src, c->fail[0].reason);
		return -1;
	}
	c->buf = malloc(IMPORT_WINDOW);
	c->puts = calloc(IMPORT_WINDOW / STORE_CHUNK_MIN + 1, sizeof(*c->puts));
	c->hs = store_hasher_new();
	if (!c->buf || !c->puts || !c->hs) {
		ctl_err("out of memory");
		return -1;
	}
	return 0;
}

/*
 * imp_check_taken - step 2: refuse names already taken at the destination (trackers are
 * virtual: never). Returns 0, or -1 (printed).
 */
static int imp_check_taken(struct imp_ctx *c, const char *dest)
{
	const char **taken = NULL; /* borrowed from c->v */
	size_t ntaken = 0, captaken = 0;
	int rc = 0;

	for (size_t i = 0; i < c->n && rc == 0; i++) {
		uint64_t ino;

		if (c->v[i].parent != SIZE_MAX || c->v[i].tracker)
			continue;
		rc = idx_dentry_lookup(c->r->ix, c->dest_ino, c->v[i].name, &ino);
		if (rc == -ENOENT) {
			rc = 0;
			continue;
		}
		if (rc < 0) {
			ctl_index_err(c->root, "look up a name", rc);
		} else if (ckpt_grow(&taken, &captaken, ntaken, sizeof(*taken)) < 0) {
			ctl_err("out of memory");
			rc = -ENOMEM;
		} else {
			taken[ntaken++] = c->v[i].rel;
			rc = 0;
		}
	}
	if (rc == 0 && ntaken) {
		ctl_err("%zu name(s) of '%s' already exist at '%s' in store '%s' (%s%s); import "
			"never replaces anything: remove them through a mount, or import with "
			"--dest PATH",
			ntaken, c->src, dest, c->root, taken[0], ntaken > 1 ? ", ..." : "");
		rc = -EEXIST;
	}
	free(taken);
	return rc < 0 ? -1 : 0;
}

/* How imp_entry stops the import. */
enum imp_stop {
	IMP_GO,       /* go on */
	IMP_OOM,      /* out of memory: not printed yet */
	IMP_PROGRESS, /* printed, by imp_file */
	IMP_ROLLBACK, /* printed */
};

/* imp_special - create entry e (a directory, a symlink, a FIFO, socket or device node) in
 * directory parent. */
static enum imp_stop imp_special(struct imp_ctx *c, struct imp_ent *e, uint64_t parent)
{
	const char *what = "create a special file";
	struct idx_inode a;
	int rc;

	imp_attr(&e->st, &a);
	if (S_ISDIR(e->st.st_mode)) {
		what = "create a directory";
		rc = imp_inode(c, parent, e->name, &a, NULL, &e->ino);
		if (rc == 0 && e->parent == SIZE_MAX && e->step >= 0) {
			struct imp_step *s = &c->steps[e->step];

			rc = idx_step_create(c->r->ix, s->kind, e->name, s->step, e->ino,
					     ckpt_now_ns(), &s->id);
		}
		if (rc == 0)
			c->dirs++;
	} else if (S_ISLNK(e->st.st_mode)) {
		char path[PATH_CAP], target[PATH_CAP];
		ssize_t n;

		what = "create a symlink";
		snprintf(path, sizeof(path), "%s/%s", c->src, e->rel);
		n = readlink(path, target, sizeof(target) - 1);
		if (n < 0)
			return imp_fail_add(c, e->step, e->rel, "cannot read symlink: %s",
					    strerror(errno)) < 0 ? IMP_OOM : IMP_GO;
		target[n] = '\0';
		a.size = (uint64_t)n;
		rc = imp_inode(c, parent, e->name, &a, target, &e->ino);
		if (rc == 0)
			c->symlinks++;
	} else {
		/* a FIFO, socket or device node: its metadata, as the daemon keeps it (mknod) */
		if (S_ISCHR(e->st.st_mode) || S_ISBLK(e->st.st_mode))
			a.rdev = (uint64_t)e->st.st_rdev;
		rc = imp_inode(c, parent, e->name, &a, NULL, &e->ino);
	}
	if (rc < 0) {
		ctl_progress_clear(&c->prog);
		ctl_index_err(c->root, what, rc);
		return IMP_ROLLBACK;
	}
	return IMP_GO;
}

/* imp_entry - step 4 for entry c->v[i] (in pre-order, so its parent exists already). */
static enum imp_stop imp_entry(struct imp_ctx *c, size_t i)
{
	struct imp_ent *e = &c->v[i];
	uint64_t parent = e->parent == SIZE_MAX ? c->dest_ino : c->v[e->parent].ino;
	int rc;

	if (e->tracker)
		return IMP_GO;
	assert(parent); /* a directory that cannot be created stops the import */
	if (!S_ISREG(e->st.st_mode))
		return imp_special(c, e, parent);
	rc = imp_file(c, i, parent);
	c->files_done++;
	if (rc == -ENOMEM)
		return IMP_OOM;
	return rc < 0 ? IMP_PROGRESS : IMP_GO;
}

/* imp_finish - step 5: the steps' states and the destination's times, committed durably.
 * Returns 0, or the -errno of the store or the index (printed). */
static int imp_finish(struct imp_ctx *c)
{
	int rc = 0;

	/* a per-rank layout's steps have no directory: their rows come from the files, dated
	 * before the claims were recorded, so that the ranks' last claims stand for the earlier
	 * steps (policy rule 2 without history); the daemon judges them at the first mount */
	if (c->at_root && (rc = imp_txn(c)) == 0)
		rc = ctl_rank_step_rows(c->r->ix, c->begun_ns);
	/* a root step file (Lightning) is its step, complete when whole, as the daemon judges it */
	if (c->at_root && rc >= 0)
		rc = ctl_top_step_rows(c->r->ix, ckpt_now_ns());
	if (rc >= 0)
		rc = imp_judge(c);
	if (rc == 0 && (rc = imp_txn(c)) == 0) {
		struct idx_inode d;

		rc = idx_inode_get(c->r->ix, c->dest_ino, &d);
		if (rc == 0) {
			d.mtime_ns = d.ctime_ns = ckpt_now_ns();
			rc = idx_inode_update(c->r->ix, &d);
		}
	}
	if (rc == 0)
		rc = imp_commit(c);
	if (rc < 0) {
		ctl_progress_clear(&c->prog);
		ctl_index_err(c->root, "record the steps", rc);
	}
	return rc;
}

static int import_run(const char *root, const char *dest, const char *src, bool json)
{
	struct imp_ctx c = { .root = root, .src = src, .json = json };
	bool created = false, restore_clean = false;
	enum imp_stop stop = IMP_GO;
	int rc, status = EXIT_ERROR;

	clock_gettime(CLOCK_MONOTONIC, &c.start);
	if (imp_prepare(&c, dest) < 0)
		goto out;
	switch (imp_open(&c, &created)) {
	case IMP_OPEN_FAILED:
		goto out;
	case IMP_OPEN_MOUNTED:
		status = imp_mounted(&c, dest);
		goto out;
	case IMP_OPEN_OWNED:
		break;
	}
	restore_clean = created || c.r->was_clean;
	rc = imp_dest(&c, dest, &c.dest_ino);
	if (rc < 0) {
		if (rc == -ENOTDIR || rc == -EPERM)
			ctl_err("cannot import into '%s': %s", dest,
				rc == -EPERM ? "not a place in the namespace ('..' or /.ckptfs)"
					    : "not a directory in the store");
		else
			ctl_index_err(root, "create the destination", rc);
		goto out_rollback;
	}
	if (imp_check_taken(&c, dest) < 0)
		goto out_rollback;
	/* until the import is over, the next mount sweeps what an interrupted one left */
	rc = ckpt_repo_set_clean(c.r, false);
	if (rc < 0) {
		ctl_err("cannot update '%s/clean': %s", root, strerror(-rc));
		goto out_rollback;
	}
	/* 3. trackers: claims, and the steps they seal */
	c.begun_ns = ckpt_now_ns();
	if (imp_claims(&c) < 0)
		goto out_rollback;
	/* 4. the tree, in pre-order */
	ctl_progress_init(&c.prog);
	import_progress(&c, true);
	for (size_t i = 0; i < c.n && stop == IMP_GO; i++)
		stop = imp_entry(&c, i);
	if (stop == IMP_OOM)
		goto out_oom;
	if (stop == IMP_PROGRESS)
		goto out_progress;
	if (stop == IMP_ROLLBACK || imp_finish(&c) < 0)
		goto out_rollback;
	import_progress(&c, true);
	ctl_progress_clear(&c.prog);
	if (restore_clean && !c.nfail && (rc = ckpt_repo_set_clean(c.r, true)) < 0)
		ctl_err("cannot update '%s/clean': %s (the next mount checks the store)", root,
			strerror(-rc));
	imp_report(&c, dest, imp_elapsed(&c));
	if (c.nfail)
		ctl_err("%zu entr%s of '%s' could not be imported (listed above); the rest was",
			c.nfail, c.nfail == 1 ? "y" : "ies", src);
	status = c.nfail ? EXIT_DAMAGE : EXIT_OK;
	goto out;

out_oom:
	ctl_err("out of memory");
out_progress:
	ctl_progress_clear(&c.prog);
out_rollback:
	if (c.in_txn) {
		idx_rollback(c.r->ix);
		c.in_txn = false;
	}
	if (c.r && c.files)
		ctl_err("the import into store '%s' is incomplete: what was committed stays; its "
			"steps are quarantined at the next mount",
			root);
out:
	ckpt_repo_close(c.r);
	imp_free(&c);
	return status;
}

int cmd_import(const struct ctl_opts *o)
{
	return import_run(o->root, o->dest ? o->dest : "/", o->argv[0], o->json);
}
