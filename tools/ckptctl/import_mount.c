/*
 * import_mount.c — ckptctl import into a mounted store: DIR, scanned as for any import, is
 * copied into the mount point, so that the daemon chunks, judges and seals it as it does a
 * trainer's writes (import_int.h invariant 6). ckptctl writes nothing of the store itself.
 *
 * Order, each phase only once the one before it succeeded:
 *   1. The destination is looked up without creating anything, and every top-level name of DIR
 *      (trackers aside: they are virtual) that already exists there refuses the import.
 *   2. The destination's missing directories are created, then what belongs to no step, in
 *      pre-order (a directory before what it holds), MindFormers 1.0's per-rank meta.json
 *      files (trackers inside rank_N/, judged per rank) after everything else.
 *   3. The steps, as the trainer saved them: oldest first, each step's directory and files in
 *      pre-order, then what seals it: its in-step marker, then the top-level tracker naming it.
 *      A plain directory keeps only the last tracker; for each older step it stands for
 *      (policy rule 2 without history), the tracker the trainer wrote after saving that step
 *      is written again (layout_tracker_format), because the daemon, which sees every claim,
 *      seals a step only by a claim naming it, and judges a DeepSpeed or Hugging Face step
 *      against the previous complete one, and one whose newer step started as finished.
 *      Nothing that seals a step is written for a step that was not copied whole: the daemon
 *      never sees a claim or marker of a step missing a file (the marker, or the tracker naming
 *      it, is recorded as failed instead).
 *   4. The directories whose mode denies their owner writing get that mode, then the trackers
 *      whose claim names no step of DIR are written.
 * Each regular file is written (holes kept as holes), given DIR's mode, owner (as root) and
 * times, fsynced and closed before the next entry: what follows it, a marker or a tracker
 * above all, finds it durable. A file DIR cannot give whole is recorded as failed and its
 * partial copy removed. A write the mount refuses stops the import where it is: nothing that
 * seals is written after it, so a crash or a failure mid-import leaves no tracker naming a
 * half-copied step.
 *
 * Every name is created relative to the destination directory's descriptor, O_EXCL or
 * O_NOFOLLOW where the call has one, so that nothing written follows a symlink out of the mount.
 *
 * Thread-safety: main thread only.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/policy/layout.h"
#include "fs/policy/policy.h"

#include "import_int.h"

/* imp_mnt_err - report that the mount refused to `what` (worded to follow "cannot") entry rel
 * with -errno rc. Returns -1, the "stop, printed" result of this file's functions. */
static int imp_mnt_err(struct imp_ctx *c, const char *what, const char *rel, int rc)
{
	ctl_progress_clear(&c->prog);
	ctl_err("cannot %s '%s' in the mount '%s' of store '%s': %s", what, rel, c->mnt, c->root,
		strerror(-rc));
	return -1;
}

/* imp_mnt_oom - report that memory ran out. Returns -1 (stop, printed). */
static int imp_mnt_oom(struct imp_ctx *c)
{
	ctl_progress_clear(&c->prog);
	ctl_err("out of memory");
	return -1;
}

/*
 * imp_mnt_dest - open the destination dest (relative to the mount root) as a directory into
 * *ret_fd (owned: close(2)), component by component without following a symlink; with create,
 * missing components are made (mode 0755, counted in c->dirs), else a missing one gives
 * *ret_fd = -1 (nothing there yet). Returns 0, -EPERM ('..', or /.ckptfs, the daemon's own
 * directory), -ENOTDIR (a component is not a directory), or another -errno of the mount.
 */
static int imp_mnt_dest(struct imp_ctx *c, const char *dest, bool create, int *ret_fd)
{
	char *copy = strdup(dest), *save = NULL, *tok;
	bool first = true;
	int fd, rc = 0;

	if (!copy)
		return -ENOMEM;
	fd = open(c->mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		rc = -errno;
	for (tok = strtok_r(copy, "/", &save); rc == 0 && tok; tok = strtok_r(NULL, "/", &save)) {
		int next;

		if (!strcmp(tok, "."))
			continue;
		if (!strcmp(tok, "..") || (first && !strcmp(tok, ".ckptfs"))) {
			rc = -EPERM;
			break;
		}
		first = false;
		if (create && mkdirat(fd, tok, 0755) == 0)
			c->dirs++;
		else if (create && errno != EEXIST)
			rc = -errno;
		if (rc < 0)
			break;
		next = openat(fd, tok, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0) {
			/* O_NOFOLLOW on a symlink gives ELOOP: not a directory of the store */
			rc = errno == ELOOP ? -ENOTDIR : -errno;
			if (rc == -ENOENT && !create) {
				close(fd);
				fd = -1;
				rc = 0;
				break;
			}
			break;
		}
		close(fd);
		fd = next;
	}
	free(copy);
	if (rc < 0) {
		if (fd >= 0)
			close(fd);
		return rc;
	}
	*ret_fd = fd;
	return 0;
}

/*
 * imp_mnt_taken - phase 1: refuse DIR's top-level names that already exist at the destination
 * destfd (-1: it does not exist yet, so nothing is taken). A tracker is taken only when the
 * index holds a file of its name at the root: one the mount serves as a plain file (its
 * -o layout does not know it), which writing the tracker would replace; a virtual tracker has
 * no dentry (fs/steps/steps.c invariant 3). Returns 0, or -1 (printed: names taken, or the
 * mount or the index failed a lookup).
 */
static int imp_mnt_taken(struct imp_ctx *c, int destfd, const char *dest)
{
	char names[3 * (NAME_MAX + 2)] = ""; /* the first few, for the message */
	size_t ntaken = 0, used = 0;
	struct stat st;

	for (size_t i = 0; destfd >= 0 && i < c->n; i++) {
		uint64_t ino;
		int rc;

		if (c->v[i].parent != SIZE_MAX)
			continue;
		if (c->v[i].tracker) {
			rc = idx_dentry_lookup(c->r->ix, IDX_ROOT_INO, c->v[i].name, &ino);
			if (rc == -ENOENT)
				continue;
			if (rc < 0) {
				ctl_progress_clear(&c->prog);
				ctl_index_err(c->root, "look up a name", rc);
				return -1;
			}
		} else if (fstatat(destfd, c->v[i].name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;
			return imp_mnt_err(c, "look up", c->v[i].rel, -errno);
		}
		if (ntaken++ < 3)
			used += (size_t)snprintf(names + used, sizeof(names) - used, "%s'%s'",
						 used ? ", " : "", c->v[i].name);
	}
	if (!ntaken)
		return 0;
	ctl_err("%zu name(s) of '%s' already exist at '%s' in the mount '%s' of store '%s' "
		"(%s%s); import never replaces anything: remove them ('ckptctl %s drop STEP' for "
		"a step), or import with --dest PATH",
		ntaken, c->src, dest, c->mnt, c->root, names, ntaken > 3 ? ", ..." : "", c->root);
	return -1;
}

/* imp_mnt_failed - record entry e as failed (printf-style reason). Returns 1 (recorded), or -1
 * (out of memory, printed). */
static int imp_mnt_failed(struct imp_ctx *c, const struct imp_ent *e, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int imp_mnt_failed(struct imp_ctx *c, const struct imp_ent *e, const char *fmt, ...)
{
	char reason[PATH_CAP + 256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	return imp_fail_add(c, e->step, e->rel, "%s", reason) < 0 ? imp_mnt_oom(c) : 1;
}

/*
 * imp_mnt_data - copy the data of sfd (st at open) into dfd run by run (store_data_run: a hole
 * of DIR's file stays a hole), IMPORT_WINDOW bytes at a time through c->buf, then give dfd the
 * size of a trailing hole. Returns 0, 1 (recorded as failed: DIR's file could not be read, or
 * shrank), or -1 (the mount failed a write: printed).
 */
static int imp_mnt_data(struct imp_ctx *c, const struct imp_ent *e, int sfd, int dfd,
			const struct stat *st)
{
	uint64_t size = (uint64_t)st->st_size, end = 0, written = 0;
	int rc;

	for (uint64_t hole_at = 0;; hole_at = end) {
		uint64_t start = 0, at;
		int more = store_data_run(sfd, hole_at, size, &start, &end);

		if (more < 0)
			return imp_mnt_failed(c, e, "cannot find its data: %s", strerror(-more));
		if (!more)
			break;
		if (lseek(dfd, (off_t)start, SEEK_SET) < 0)
			return imp_mnt_err(c, "seek in", e->rel, -errno);
		for (at = start; at < end;) {
			size_t want = end - at < IMPORT_WINDOW ? (size_t)(end - at) : IMPORT_WINDOW;
			ssize_t n = pread(sfd, c->buf, want, (off_t)at);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return imp_mnt_failed(c, e, "cannot read at offset %" PRIu64 ": %s",
						      at, strerror(errno));
			if (n == 0)
				return imp_mnt_failed(c, e, "changed while being read (%" PRIu64
						      " bytes at open, ended at %" PRIu64 ")",
						      size, at);
			if ((rc = store_write_all(dfd, c->buf, (size_t)n)) < 0)
				return imp_mnt_err(c, "write", e->rel, rc);
			at += (uint64_t)n;
			c->done += (uint64_t)n;
			import_progress(c, false);
		}
		written = end;
	}
	if (written < size && ftruncate(dfd, (off_t)size) < 0)
		return imp_mnt_err(c, "set the size of", e->rel, -errno);
	return 0;
}

/*
 * imp_mnt_attrs - give dfd the owner (when running as root, who may), mode and times of DIR's
 * file (st), then fsync it: the file is durable in the store when this returns (the daemon's
 * fsync commits it). Returns 0, or -1 (the mount refused: printed).
 */
static int imp_mnt_attrs(struct imp_ctx *c, const struct imp_ent *e, int dfd,
			 const struct stat *st)
{
	const struct timespec ts[2] = { st->st_atim, st->st_mtim };

	/* the owner first: chown clears the set-user-ID and set-group-ID bits */
	if (geteuid() == 0 && fchown(dfd, st->st_uid, st->st_gid) < 0)
		return imp_mnt_err(c, "set the owner of", e->rel, -errno);
	if (fchmod(dfd, st->st_mode & 07777) < 0)
		return imp_mnt_err(c, "set the mode of", e->rel, -errno);
	if (futimens(dfd, ts) < 0)
		return imp_mnt_err(c, "set the times of", e->rel, -errno);
	if (fsync(dfd) < 0)
		return imp_mnt_err(c, "fsync", e->rel, -errno);
	return 0;
}

/*
 * imp_mnt_file - copy regular file c->v[i] to the same relative path under destfd, written,
 * fsynced and closed (phase 2). A file DIR cannot give whole is recorded as failed and its copy
 * removed. Returns 0 (copied, or recorded as failed), or -1 (stop: printed).
 */
static int imp_mnt_file(struct imp_ctx *c, size_t i, int destfd)
{
	struct imp_ent *e = &c->v[i];
	char path[PATH_CAP];
	struct stat st, now = { 0 };
	int sfd, dfd, rc;

	snprintf(path, sizeof(path), "%s/%s", c->src, e->rel); /* length checked by imp_scan */
	rc = imp_file_open(c, e, path, &sfd, &st);
	if (rc)
		return rc < 0 ? imp_mnt_oom(c) : 0;
	dfd = openat(destfd, e->rel, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (dfd < 0) {
		rc = imp_mnt_err(c, "create", e->rel, -errno);
		close(sfd);
		return rc;
	}
	rc = imp_mnt_data(c, e, sfd, dfd, &st);
	if (rc == 0 && (fstat(sfd, &now) < 0 || now.st_size != st.st_size))
		rc = imp_mnt_failed(c, e, "changed while being read (%" PRIu64 " bytes at open, %"
				    PRIu64 " now)", (uint64_t)st.st_size, (uint64_t)now.st_size);
	if (rc == 0)
		rc = imp_mnt_attrs(c, e, dfd, &st);
	close(sfd);
	if (close(dfd) < 0 && rc == 0)
		rc = imp_mnt_err(c, "close", e->rel, -errno);
	c->files_done++;
	if (rc == 1) {
		/* what DIR could not give whole is not left behind half-copied */
		if (unlinkat(destfd, e->rel, 0) < 0)
			return imp_mnt_err(c, "remove the partial copy of", e->rel, -errno);
		return 0;
	}
	if (rc < 0)
		return rc;
	c->files++;
	c->logical += (uint64_t)st.st_size;
	if (e->step >= 0) {
		c->steps[e->step].files++;
		c->steps[e->step].bytes += (uint64_t)st.st_size;
	}
	return 0;
}

/*
 * imp_mnt_other - create entry c->v[i], not a regular file, under destfd (phase 2): a
 * directory (writable by its owner until imp_mnt_modes), a symlink, or a FIFO, socket or
 * device node (mknod; one the mount does not let this user make is recorded as failed).
 * Returns 0, or -1 (stop: printed).
 */
static int imp_mnt_other(struct imp_ctx *c, size_t i, int destfd)
{
	struct imp_ent *e = &c->v[i];
	mode_t mode = e->st.st_mode & 07777;

	if (S_ISDIR(e->st.st_mode)) {
		if (mkdirat(destfd, e->rel, mode | S_IRWXU) < 0)
			return imp_mnt_err(c, "create the directory", e->rel, -errno);
		c->dirs++;
	} else if (S_ISLNK(e->st.st_mode)) {
		char path[PATH_CAP], target[PATH_CAP];
		ssize_t n;

		snprintf(path, sizeof(path), "%s/%s", c->src, e->rel);
		n = readlink(path, target, sizeof(target) - 1);
		if (n < 0)
			return imp_mnt_failed(c, e, "cannot read symlink: %s", strerror(errno)) < 0
				       ? -1 : 0;
		target[n] = '\0';
		if (symlinkat(target, destfd, e->rel) < 0)
			return imp_mnt_err(c, "create the symlink", e->rel, -errno);
		c->symlinks++;
	} else if (mknodat(destfd, e->rel, (e->st.st_mode & S_IFMT) | mode, e->st.st_rdev) < 0) {
		int err = errno;

		/* a device node needs CAP_MKNOD, whatever the filesystem */
		if (err != EPERM && err != EACCES && err != EOPNOTSUPP)
			return imp_mnt_err(c, "create the special file", e->rel, -err);
		return imp_mnt_failed(c, e, "cannot create through the mount: %s",
				      strerror(err)) < 0 ? -1 : 0;
	}
	return 0;
}

/*
 * imp_mnt_modes - give the directories created under destfd whose mode denies their owner
 * something of rwx that mode, deepest first, now that what they hold is in place. Returns 0, or
 * -1 (printed).
 */
static int imp_mnt_modes(struct imp_ctx *c, int destfd)
{
	for (size_t i = c->n; i-- > 0;) {
		const struct imp_ent *e = &c->v[i];

		if (!S_ISDIR(e->st.st_mode) || (e->st.st_mode & S_IRWXU) == S_IRWXU)
			continue;
		if (fchmodat(destfd, e->rel, e->st.st_mode & 07777, 0) < 0)
			return imp_mnt_err(c, "set the mode of", e->rel, -errno);
	}
	return 0;
}

/*
 * imp_mnt_late - is entry c->v[i] a file that seals what was written before it: a step's
 * in-step marker, or MindFormers 1.0's per-rank meta.json (a tracker inside rank_N/)?
 */
static bool imp_mnt_late(const struct imp_ctx *c, size_t i)
{
	const struct imp_ent *e = &c->v[i];
	struct layout_match m;

	if (!c->at_root || e->tracker || !S_ISREG(e->st.st_mode))
		return false;
	if (e->marker)
		return true;
	return layout_classify(e->rel, LAYOUT_NONE, &m) == 0 && m.role == ROLE_TRACKER &&
	       layout_desc(m.kind)->tracker == LAYOUT_TRACKER_PER_RANK;
}

/*
 * imp_mnt_torn - the step or directory whose files late entry c->v[i] seals, when one of them
 * could not be copied (recorded as failed); NULL when they are whole. Borrowed from c.
 */
static const char *imp_mnt_torn(const struct imp_ctx *c, size_t i)
{
	const struct imp_ent *e = &c->v[i];
	const char *dir;
	size_t len;

	if (e->step >= 0)
		return c->steps[e->step].failed ? c->v[c->steps[e->step].ent].rel : NULL;
	if (e->parent == SIZE_MAX)
		return NULL;
	dir = c->v[e->parent].rel;
	len = strlen(dir);
	for (size_t k = 0; k < c->nfail; k++)
		if (!strncmp(c->fail[k].path, dir, len) && c->fail[k].path[len] == '/')
			return dir;
	return NULL;
}

/*
 * imp_mnt_entries - copy the entries of step (an index into c->steps; -1: those of no step) in
 * pre-order, then its late files (is_late[i], from imp_mnt_late) when what they seal is whole;
 * one that is not is recorded as failed, not written. Returns 0, or -1 (stop: printed).
 */
static int imp_mnt_entries(struct imp_ctx *c, int destfd, int step, const bool *is_late)
{
	for (int late = 0; late < 2; late++) {
		for (size_t i = 0; i < c->n; i++) {
			const char *torn;

			if (c->v[i].step != step || c->v[i].tracker || is_late[i] != late)
				continue;
			if (late && (torn = imp_mnt_torn(c, i))) {
				if (imp_fail_add(c, -1, c->v[i].rel, "not written: '%s', which it "
						 "seals, was not copied whole", torn) < 0)
					return imp_mnt_oom(c);
				c->files_done++;
				continue;
			}
			if ((S_ISREG(c->v[i].st.st_mode) ? imp_mnt_file(c, i, destfd)
							  : imp_mnt_other(c, i, destfd)) < 0)
				return -1;
		}
	}
	return 0;
}

/* A top-level tracker of DIR, read before the steps are copied. */
struct imp_mnt_tracker {
	struct imp_claim cl; /* its claim, as DIR's copy says */
	char *buf;           /* owned: its bytes, NULL when empty */
	size_t len;
	bool done;           /* written, or recorded as failed */
};

/*
 * imp_mnt_write_tracker - write the len bytes buf into tracker c->v[i] as a trainer does
 * (created or truncated, written, fsynced, closed): the daemon records it as a claim, kept for
 * the report as *cl with its content. Returns 0, or -1 (printed).
 */
static int imp_mnt_write_tracker(struct imp_ctx *c, int destfd, const struct imp_claim *cl,
				 const char *buf, size_t len)
{
	const char *rel = c->v[cl->ent].rel;
	int fd, rc = 0;

	fd = openat(destfd, rel, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return imp_mnt_err(c, "write the tracker", rel, -errno);
	if (len && (rc = store_write_all(fd, buf, len)) < 0)
		rc = imp_mnt_err(c, "write the tracker", rel, rc);
	else if (fsync(fd) < 0)
		rc = imp_mnt_err(c, "fsync the tracker", rel, -errno);
	if (close(fd) < 0 && rc == 0)
		rc = imp_mnt_err(c, "close the tracker", rel, -errno);
	if (rc == 0 && imp_claim_keep(c, cl) < 0)
		rc = imp_mnt_oom(c);
	return rc;
}

/*
 * imp_mnt_claim - after step s (copied as far as it could be), the claim each tracker t[0..n)
 * makes of it: the tracker's own content when its claim names s; for an older step it stands
 * for, the content the trainer wrote after saving s, when this very file is s's layout's
 * tracker. Nothing for a step not copied whole (the tracker naming it is recorded as failed).
 * Returns 0, or -1 (printed).
 */
static int imp_mnt_claim(struct imp_ctx *c, int destfd, const struct imp_step *s,
			 struct imp_mnt_tracker *t, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		const char *rel = c->v[t[k].cl.ent].rel;
		struct layout_tracker lt = { .step = s->step, .epoch = -1 };
		char buf[LAYOUT_TRACKER_MAX + 1], path[LAYOUT_PATH_MAX];
		struct imp_claim was = t[k].cl;
		int len, rc = 0;

		if (t[k].done)
			continue;
		if (policy_claim_seals(t[k].cl.kind, t[k].cl.step, s->kind, s->step, true) !=
		    POLICY_SEAL_NONE) {
			t[k].done = true;
			if (!s->failed)
				rc = imp_mnt_write_tracker(c, destfd, &t[k].cl, t[k].buf,
							   t[k].len);
			else if (imp_fail_add(c, -1, rel, "not written: step '%s', which it names, "
					      "was not copied whole", c->v[s->ent].name) < 0)
				rc = imp_mnt_oom(c);
			if (rc < 0)
				return -1;
			continue;
		}
		if (s->failed ||
		    policy_claim_seals(t[k].cl.kind, t[k].cl.step, s->kind, s->step, false) ==
			    POLICY_SEAL_NONE ||
		    layout_tracker_path(s->kind, s->step, -1, path, sizeof(path)) < 0 ||
		    strcmp(path, rel) ||
		    (len = layout_tracker_format(s->kind, &lt, buf, sizeof(buf))) <= 0)
			continue;
		was.step = s->step;
		was.replayed = true;
		ctl_escape((const uint8_t *)buf, (size_t)len, was.content, sizeof(was.content));
		if (imp_mnt_write_tracker(c, destfd, &was, buf, (size_t)len) < 0)
			return -1;
	}
	return 0;
}

/* imp_mnt_step_order - qsort_r of indices into the steps array arg by step number, then by
 * their order in DIR. */
static int imp_mnt_step_order(const void *a, const void *b, void *arg)
{
	const struct imp_step *x = &((const struct imp_step *)arg)[*(const size_t *)a];
	const struct imp_step *y = &((const struct imp_step *)arg)[*(const size_t *)b];

	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	return x->ent < y->ent ? -1 : x->ent > y->ent;
}

/*
 * imp_mnt_copy - phases 2 to 4 into destfd. The trackers are read first, so that one DIR
 * cannot give is known before any step is copied. Returns 0, or -1 (stop: printed).
 */
static int imp_mnt_copy(struct imp_ctx *c, int destfd)
{
	struct imp_mnt_tracker *t = calloc(c->n ? c->n : 1, sizeof(*t));
	size_t *order = calloc(c->nsteps ? c->nsteps : 1, sizeof(*order)), n = 0;
	bool *late = calloc(c->n ? c->n : 1, sizeof(*late));
	int rc = 0;

	if (!t || !order || !late)
		rc = imp_mnt_oom(c);
	for (size_t i = 0; rc == 0 && i < c->n; i++) {
		late[i] = imp_mnt_late(c, i);
		if (!c->v[i].tracker)
			continue;
		rc = imp_tracker_read(c, i, &t[n].cl, &t[n].buf, &t[n].len);
		if (rc < 0)
			rc = imp_mnt_oom(c);
		else if (rc == 1)
			n++; /* else DIR could not give it: recorded as failed */
		if (rc > 0)
			rc = 0;
	}
	if (rc == 0)
		rc = imp_mnt_entries(c, destfd, -1, late);
	for (size_t j = 0; rc == 0 && j < c->nsteps; j++)
		order[j] = j;
	if (rc == 0)
		qsort_r(order, c->nsteps, sizeof(*order), imp_mnt_step_order, c->steps);
	for (size_t k = 0; rc == 0 && k < c->nsteps; k++) {
		rc = imp_mnt_entries(c, destfd, (int)order[k], late);
		if (rc == 0)
			rc = imp_mnt_claim(c, destfd, &c->steps[order[k]], t, n);
	}
	if (rc == 0)
		rc = imp_mnt_modes(c, destfd);
	for (size_t k = 0; rc == 0 && k < n; k++)
		if (!t[k].done)
			rc = imp_mnt_write_tracker(c, destfd, &t[k].cl, t[k].buf, t[k].len);
	for (size_t k = 0; t && k < n; k++)
		free(t[k].buf);
	free(t);
	free(order);
	free(late);
	return rc;
}

/* What a step's history says, for the report. */
struct imp_mnt_history {
	char sealed[256]; /* the note of its last sealing (cut: it goes into a why) */
	char last[256];   /* the note of its last change */
};

/* idx_step_events callback: keep the notes of the last change and last sealing in arg. */
static int imp_mnt_event(int64_t ts_ns, int old_state, int new_state, const char *note,
			 void *arg)
{
	struct imp_mnt_history *h = arg;

	(void)ts_ns;
	(void)old_state;
	snprintf(h->last, sizeof(h->last), "%s", note ? note : "");
	if (new_state == IDX_STEP_SEALED)
		snprintf(h->sealed, sizeof(h->sealed), "%s", h->last);
	return 0;
}

/*
 * imp_mnt_why - what the report says of step s, in state s->state as the import ends (h: its
 * history). The import is the step's writer: until it exits, the daemon judges the step no
 * further than sealed (fs/steps/steps.c, states), unless its layout completes at its claim.
 */
static void imp_mnt_why(struct imp_step *s, const struct imp_mnt_history *h)
{
	switch (s->state) {
	case IDX_STEP_COMPLETE:
		snprintf(s->why, sizeof(s->why), "%s%s%severy file whole",
			 h->sealed[0] ? "sealed: " : "", h->sealed, h->sealed[0] ? "; " : "");
		break;
	case IDX_STEP_SEALED:
		snprintf(s->why, sizeof(s->why), "%s%sthe daemon judges it once this import has "
			 "exited", h->sealed, h->sealed[0] ? "; " : "");
		break;
	case IDX_STEP_WRITING:
		snprintf(s->why, sizeof(s->why), "nothing sealed it: after this import has exited "
			 "the daemon keeps it as copied, named by no tracker until a claim (every "
			 "file whole, a layout with a tracker), or sets it aside as incomplete");
		break;
	default:
		snprintf(s->why, sizeof(s->why), "%s", h->last);
		break;
	}
}

/*
 * imp_mnt_states - each step's row as the daemon left it in the index when the import ends
 * (the newest step of its name), into its id, state and why; a step the daemon did not record
 * (the mount forces another layout) keeps id 0. Returns 0 or the -errno of the index.
 */
static int imp_mnt_states(struct imp_ctx *c)
{
	for (size_t i = 0; i < c->nsteps; i++) {
		struct imp_step *s = &c->steps[i];
		struct imp_mnt_history h = { "", "" };
		struct step_match m;
		int rc = ctl_find_steps(c->r->ix, c->v[s->ent].name, &m);

		if (rc > 0) {
			s->id = m.found.v[0].id; /* newest first: the one just made */
			s->state = m.found.v[0].state;
			rc = idx_step_events(c->r->ix, s->id, imp_mnt_event, &h);
		}
		free(m.found.v);
		if (rc < 0)
			return rc;
		if (s->id)
			imp_mnt_why(s, &h);
		else
			snprintf(s->why, sizeof(s->why), "the mount did not take it for a step "
				 "(its -o layout?)");
	}
	return 0;
}

int imp_mounted(struct imp_ctx *c, const char *dest)
{
	int destfd = -1, rc;

	/* a rank's meta.json (a tracker inside rank_N/) is written through the mount as that
	 * rank's last file (imp_mnt_late), and the daemon records its claim: a file to copy here */
	for (size_t i = 0; i < c->n; i++) {
		if (c->v[i].tracker && c->v[i].parent != SIZE_MAX) {
			c->v[i].tracker = false;
			c->files_total++;
			c->total += (uint64_t)c->v[i].st.st_size;
		}
	}
	rc = imp_mnt_dest(c, dest, false, &destfd);
	if (rc == 0)
		rc = imp_mnt_taken(c, destfd, dest) < 0 ? -1 : 0;
	else if (rc == -ENOTDIR || rc == -EPERM)
		ctl_err("cannot import into '%s': %s", dest,
			rc == -EPERM ? "not a place in the namespace ('..' or /.ckptfs)"
				     : "not a directory in the store");
	else
		imp_mnt_err(c, "open the destination", dest, rc);
	if (destfd >= 0)
		close(destfd);
	destfd = -1;
	if (rc < 0)
		return EXIT_ERROR;
	/* nothing was written up to here */
	rc = imp_mnt_dest(c, dest, true, &destfd);
	if (rc < 0) {
		imp_mnt_err(c, "create the destination", dest, rc);
		return EXIT_ERROR;
	}
	ctl_progress_init(&c->prog);
	import_progress(c, true);
	rc = imp_mnt_copy(c, destfd);
	close(destfd);
	if (rc < 0) {
		ctl_err("the import through the mount of store '%s' stopped there: what was "
			"copied stays, and nothing that seals a step was written after it; once "
			"this process has exited the daemon lists each step left unsealed as copied "
			"(named by no tracker) or sets it aside ('ckptctl %s steps' lists them, "
			"'ckptctl %s drop STEP' removes one)",
			c->root, c->root, c->root);
		return EXIT_ERROR;
	}
	import_progress(c, true);
	ctl_progress_clear(&c->prog);
	if ((rc = imp_mnt_states(c)) < 0)
		ctl_index_err(c->root, "read the steps", rc); /* the import itself is done */
	imp_report(c, dest, imp_elapsed(c));
	if (c->nfail)
		ctl_err("%zu entr%s of '%s' could not be imported (listed above); the rest was",
			c->nfail, c->nfail == 1 ? "y" : "ies", c->src);
	return c->nfail ? EXIT_DAMAGE : EXIT_OK;
}
