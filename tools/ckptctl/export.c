/*
 * export.c — ckptctl export [--force] [--include PATTERN]... STEP DIR: copy a complete step out
 * as plain, verified files, with the framework's tracker beside it; or only the files the
 * patterns name, without the tracker.
 *
 * export never overwrites: it refuses an existing DIR/NAME, writes each file under a short
 * temporary name in its directory (EXPORT_TEMP) and renames it to its name only once its
 * whole-file XXH3-128 matches the index and it is fsynced; a file that does not verify is left
 * as NAME.partial, or under its temporary name when NAME.partial would exceed NAME_MAX.
 */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/policy/layout.h"

#include "ctl.h"

/* The name a file is written under until it verifies, in its own directory (mkstemp(3)): short,
 * so that a file whose name is NAME_MAX bytes exports too; a leading dot keeps it out of ls. */
#define EXPORT_TEMP ".ckptfs-export-XXXXXX"

/* Progress of an export, on stderr when it is a terminal. */
struct export_ctx {
	struct ckpt_repo *r;
	const char *root;
	uint64_t total, done;      /* bytes of the step's regular files, and copied so far */
	uint64_t files_total, files_done; /* its regular files, and copied (or failed) so far */
	struct ctl_progress prog;
	uint8_t *buf;              /* STORE_CHUNK_MAX bytes */
	struct store_hasher *hs;
};

/* export_progress - ctl_progress_work with the export's counts. */
static void export_progress(struct export_ctx *x, bool force)
{
	ctl_progress_work(&x->prog, force, "export", "files", x->files_done, x->files_total,
			  x->done, x->total);
}

/* Outcome of exporting one file. */
enum export_result {
	EX_OK,        /* written, verified, renamed into place */
	EX_DAMAGED,   /* left as NAME.partial or under its temporary name; reason filled */
};

struct export_sink_arg {
	struct export_ctx *x;
	int fd;
	const char *partial;
};

/* ctl_sink of export: write the piece to the temporary file, count it, show progress. */
static int export_sink(const void *buf, size_t len, void *arg, char *reason, size_t cap)
{
	struct export_sink_arg *a = arg;
	int rc = 0;

	if (!buf) { /* a hole stays one: skipped here, the size set by export_file */
		if (lseek(a->fd, (off_t)len, SEEK_CUR) < 0)
			rc = -errno;
	} else {
		rc = store_write_all(a->fd, buf, len);
	}

	if (rc < 0) {
		snprintf(reason, cap, "cannot write '%s': %s", a->partial, strerror(-rc));
		return rc;
	}
	a->x->done += (uint64_t)len;
	export_progress(a->x, false);
	return 0;
}

/*
 * keep_damaged - give the unverified bytes in temporary file tmp the name dst.partial, when that
 * name fits NAME_MAX and is free, else leave them under tmp; ret_left (cap bytes) gets the path
 * they are left at.
 */
static void keep_damaged(const char *tmp, const char *dst, char *ret_left, size_t cap)
{
	const char *base = strrchr(dst, '/');
	char partial[PATH_CAP + 16];

	base = base ? base + 1 : dst;
	if (strlen(base) + strlen(".partial") <= NAME_MAX &&
	    (size_t)snprintf(partial, sizeof(partial), "%s.partial", dst) < sizeof(partial) &&
	    renameat2(AT_FDCWD, tmp, AT_FDCWD, partial, RENAME_NOREPLACE) == 0)
		snprintf(ret_left, cap, "%s", partial);
	else
		snprintf(ret_left, cap, "%s", tmp);
}

/*
 * export_file - copy regular file ino to dst: written to a new temporary file EXPORT_TEMP in
 * dst's directory, every chunk read through store_chunk_pread (decoded and re-hashed), the
 * whole-file XXH3-128 compared with the recorded one, fsynced, given the recorded mode and
 * times, then renamed to dst. On a read error or a digest mismatch the bytes stay, renamed to
 * "dst.partial" when that name fits (keep_damaged); ret_left (leftcap bytes) gets where, and
 * reason (cap bytes) why.
 * Returns an enum export_result, -errno of the index (-ENOMEM), or -errno of the destination
 * (what failed is then in reason; the temporary file is removed).
 */
static int export_file(struct export_ctx *x, uint64_t ino, const char *dst, char *reason,
		       size_t cap, char *ret_left, size_t leftcap, struct idx_inode *ret_in)
{
	struct idx_extent *ext = NULL;
	struct store_hash got;
	char partial[PATH_CAP + sizeof(EXPORT_TEMP)], hex[2 * STORE_HASH_LEN + 1],
		hex2[2 * STORE_HASH_LEN + 1];
	const char *slash = strrchr(dst, '/');
	size_t n = 0, dirlen = slash ? (size_t)(slash - dst) : 0;
	bool created = false;
	int fd = -1, rc;

	reason[0] = ret_left[0] = '\0';
	rc = idx_inode_get(x->r->ix, ino, ret_in);
	if (rc == 0)
		rc = idx_file_extents(x->r->ix, ino, &ext, &n);
	if (rc < 0)
		return rc;
	if ((size_t)snprintf(partial, sizeof(partial), "%.*s%s" EXPORT_TEMP, (int)dirlen, dst,
			     slash ? "/" : "") >= sizeof(partial)) {
		snprintf(reason, cap, "cannot create a file beside '%s': %s", dst,
			 strerror(ENAMETOOLONG));
		rc = -ENAMETOOLONG;
		goto out;
	}
	fd = mkostemp(partial, O_CLOEXEC); /* mode 0600 until it verifies */
	if (fd < 0) {
		rc = -errno;
		snprintf(reason, cap, "cannot create '%s': %s", partial, strerror(-rc));
		goto out;
	}
	created = true;
	struct export_sink_arg sa = { .x = x, .fd = fd, .partial = partial };

	rc = ctl_stream(x->r->st, ext, n, ret_in->size, ret_in->flags & IDX_INODE_SPARSE,
			x->buf, x->hs, export_sink, &sa, "",
			reason, cap, &got);
	if (rc != 0) {
		rc = rc == 1 ? EX_DAMAGED : rc;
		goto out;
	}
	store_hasher_digest(x->hs, &got);
	if (!ret_in->has_hash) {
		snprintf(reason, cap, "no whole-file digest recorded (never closed), got %s",
			 ctl_hex(got.b, hex));
		rc = EX_DAMAGED;
		goto out;
	}
	if (memcmp(got.b, ret_in->hash, IDX_HASH_LEN)) {
		snprintf(reason, cap, "whole-file xxh3-128 mismatch: recorded %s, read %s",
			 ctl_hex(ret_in->hash, hex), ctl_hex(got.b, hex2));
		rc = EX_DAMAGED;
		goto out;
	}
	{
		struct timespec ts[2] = {
			{ .tv_sec = ret_in->atime_ns / 1000000000,
			  .tv_nsec = ret_in->atime_ns % 1000000000 },
			{ .tv_sec = ret_in->mtime_ns / 1000000000,
			  .tv_nsec = ret_in->mtime_ns % 1000000000 },
		};

		if (ftruncate(fd, (off_t)ret_in->size) < 0 || /* a trailing hole */
		    fchmod(fd, ret_in->mode & 07777) < 0 || fsync(fd) < 0 ||
		    futimens(fd, ts) < 0) {
			rc = -errno;
			snprintf(reason, cap, "cannot finish '%s': %s", partial, strerror(-rc));
			goto out;
		}
	}
	if (close(fd) < 0) {
		fd = -1;
		rc = -errno;
		snprintf(reason, cap, "cannot write '%s': %s", partial, strerror(-rc));
		goto out;
	}
	fd = -1;
	if (rename(partial, dst) < 0) {
		rc = -errno;
		snprintf(reason, cap, "cannot rename '%s' to '%s': %s", partial, dst,
			 strerror(-rc));
		goto out;
	}
	rc = EX_OK;
out:
	if (fd >= 0) {
		if (rc == EX_DAMAGED)
			(void)fsync(fd); /* keep what was read, for a person to look at */
		close(fd);
	}
	if (rc == EX_DAMAGED)
		keep_damaged(partial, dst, ret_left, leftcap);
	if (rc < 0 && created)
		(void)unlink(partial); /* a failure of ours, not of the data: nothing to keep */
	free(ext);
	return rc;
}

/* mkdir_p - create path and its missing parents (mode 0777 & ~umask). Returns 0 or -errno. */
static int mkdir_p(const char *path)
{
	char buf[PATH_CAP];
	size_t len = strlen(path);

	if (len >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0777) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0777) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/*
 * export_tracker - write the framework's tracker naming step s into dir (ckpt_publish_at:
 * atomic and durable), unless one there already names a newer step.
 * @ret_path, @ret_content: what was written (or found), each cap bytes; ret_path "" when the
 * layout has no tracker ckptctl can write. @ret_kept: true when a newer tracker was left as is.
 * Returns 0, or -errno (what failed is printed).
 */
static int export_tracker(const char *dir, const struct idx_step *s, char *ret_path,
			  char *ret_content, size_t cap, bool *ret_kept)
{
	struct layout_tracker t = { .step = s->step, .epoch = -1 };
	char rel[LAYOUT_PATH_MAX], old[LAYOUT_TRACKER_MAX];
	int len, fd, rc;
	ssize_t oldlen;

	*ret_kept = false;
	ret_path[0] = ret_content[0] = '\0';
	/* a per-rank tracker (MF1) names one rank's file, not the step; a layout without a
	 * tracker (HF, DCP, Orbax, InternEvo) has its marker inside the step directory */
	if (layout_desc(s->kind)->tracker != LAYOUT_TRACKER_ROOT ||
	    layout_tracker_path((enum layout_kind)s->kind, s->step, -1, rel, sizeof(rel)) < 0)
		return 0;
	len = layout_tracker_format((enum layout_kind)s->kind, &t, ret_content, cap);
	if (len < 0) {
		ret_content[0] = '\0';
		return 0;
	}
	if ((size_t)snprintf(ret_path, cap, "%s/%s", dir, rel) >= cap) {
		ctl_err("cannot write the tracker in '%s': %s", dir, strerror(ENAMETOOLONG));
		return -ENAMETOOLONG;
	}
	fd = open(ret_path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		struct layout_tracker ot;

		oldlen = read(fd, old, sizeof(old));
		close(fd);
		if (oldlen > 0 &&
		    layout_tracker_parse((enum layout_kind)s->kind, rel, old, (size_t)oldlen, &ot) ==
			    0 &&
		    ot.step > s->step) {
			*ret_kept = true;
			snprintf(ret_content, cap, "%.*s", (int)oldlen, old);
			return 0;
		}
	}
	/* the tracker is a plain name at the top of dir (MF1's per-rank ones are not written) */
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	rc = fd < 0 ? -errno : ckpt_publish_at(fd, rel, ret_content, (size_t)len, 0644);
	if (fd >= 0)
		close(fd);
	if (rc < 0) {
		ctl_err("cannot write '%s': %s", ret_path, strerror(-rc));
		return rc;
	}
	return 0;
}

/* A file that could not be exported faithfully. */
struct export_damage {
	char *path;   /* owned: where the unverified bytes are left (NAME.partial or temporary) */
	char *reason; /* owned */
};

/* One export: the step, what is under its directory, and what happened to each file. */
struct export_job {
	struct export_ctx x;
	const char *dest;          /* DIR */
	const struct idx_step *s;  /* borrowed from the step_match of export_run */
	struct tree t;
	struct export_damage *dmg;
	size_t ndmg, capdmg;
	char **flagged;            /* owned: "REL (torn)" for files the daemon flagged */
	size_t nflagged, capflagged;
	size_t nfiles;
	bool made_top;             /* top was created: an incomplete export is left there */
	bool kept;                 /* the tracker in DIR names a newer step and was kept */
	bool partial;              /* --include: only some files, so no tracker */
	char top[PATH_CAP];        /* DIR/NAME */
	char tpath[PATH_CAP];      /* the tracker written, "" when none */
	char tcontent[LAYOUT_TRACKER_MAX];
};

/*
 * include_match - whether path rel (in the step) is one --include names: a pattern matches rel,
 * or a directory rel lies under. fnmatch(3) without FNM_PATHNAME: '*' matches '/' too, as in
 * git's pathspecs, so "*.pt" names every .pt file of the step at any depth. @hits[k] counts
 * the entries pattern k matched.
 */
static bool include_match(const char *rel, const char *const *pats, size_t npats, size_t *hits)
{
	char buf[PATH_CAP];
	bool any = false;

	snprintf(buf, sizeof(buf), "%s", rel);
	for (size_t k = 0; k < npats; k++) {
		/* rel itself, then each directory it lies under, nearest first */
		for (size_t len = strlen(buf);;) {
			buf[len] = '\0';
			if (fnmatch(pats[k], buf, 0) == 0) {
				hits[k]++;
				any = true;
				break;
			}
			while (len > 0 && buf[len - 1] != '/')
				len--;
			if (len == 0)
				break;
			len--; /* the '/' */
		}
		snprintf(buf, sizeof(buf), "%s", rel);
	}
	return any;
}

/* tree_find - the index of the entry of t whose rel is rel (t sorted by rel), or t->n. */
static size_t tree_find(const struct tree *t, const char *rel)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(t->v[mid].rel, rel);

		if (c == 0)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return t->n;
}

/*
 * export_filter - keep in j->t only the entries the --include patterns pats[0..npats) name,
 * and the directories that hold them (made so that the files have a place; a matched
 * directory brings everything under it). A pattern that names nothing is refused, before
 * anything is made: a typo would otherwise export less than asked, silently.
 * Returns 0, or -1 (printed).
 */
static int export_filter(struct export_job *j, const char *const *pats, size_t npats)
{
	struct tree *t = &j->t;
	bool *keep = calloc(t->n ? t->n : 1, sizeof(*keep));
	size_t *hits = calloc(npats, sizeof(*hits)), n = 0;
	char q[CTL_QUOTE_CAP(PATH_CAP)];
	int rc = -1;

	if (!keep || !hits) {
		ctl_err("out of memory");
		goto out;
	}
	for (size_t i = 0; i < t->n; i++)
		keep[i] = include_match(t->v[i].rel, pats, npats, hits);
	for (size_t k = 0; k < npats; k++) {
		if (hits[k])
			continue;
		ctl_err("'%s' matches no file of step %" PRId64 " ('%s'); 'ckptctl %s show %s' "
			"lists them",
			ctl_quote(pats[k], q, sizeof(q)), j->s->step, j->s->name, j->x.root,
			j->s->name);
		goto out;
	}
	/* the directories above each entry kept: t is sorted, so each is found by bisection */
	for (size_t i = 0; i < t->n; i++) {
		char dir[PATH_CAP], *slash;

		if (!keep[i])
			continue;
		snprintf(dir, sizeof(dir), "%s", t->v[i].rel);
		while ((slash = strrchr(dir, '/'))) {
			size_t at;

			*slash = '\0';
			at = tree_find(t, dir);
			if (at == t->n || keep[at])
				break; /* kept already: so are the ones above it */
			keep[at] = true;
		}
	}
	for (size_t i = 0; i < t->n; i++) {
		if (keep[i])
			t->v[n++] = t->v[i];
		else
			free(t->v[i].rel);
	}
	t->n = n;
	rc = 0;
out:
	free(keep);
	free(hits);
	return rc;
}

/*
 * export_find - the step that arg names (m: owned by the caller, free m->found.v), refused
 * unless it still has a directory and is complete (or pinned and not pruned, or force); then
 * every entry under it into j->t (only those pats[0..npats) name, when npats > 0), and the
 * number and bytes of its regular files into j->x.files_total and j->x.total.
 * Returns 0, or -1 when the export cannot go on (printed).
 */
static int export_find(struct export_job *j, const char *arg, bool force, const char *const *pats,
		       size_t npats, struct step_match *m)
{
	const char *root = j->x.root;
	const struct idx_step *s;
	int rc;

	rc = ctl_find_steps(j->x.r->ix, arg, m);
	if (rc < 0)
		return ctl_index_err(root, "list steps", rc), -1;
	s = j->s = ctl_pick_step(m);
	if (!s)
		return ctl_no_step(root, arg), -1;
	/* first: without a directory --force has nothing to export, so it is not suggested */
	if (!s->dir_ino) {
		ctl_err("step %" PRId64 " ('%s', id %" PRId64 ") is %s and has no directory any "
			"more; nothing to export",
			s->step, s->name, s->id, idx_step_state_name(s->state));
		return -1;
	}
	if (s->state != IDX_STEP_COMPLETE && !(s->pinned && s->state != IDX_STEP_PRUNED) &&
	    !force) {
		ctl_err("step %" PRId64 " ('%s', id %" PRId64 ") is %s; only complete steps are "
			"exported: add --force to export it anyway",
			s->step, s->name, s->id, idx_step_state_name(s->state));
		return -1;
	}
	rc = ctl_tree_collect(j->x.r->ix, s->dir_ino, &j->t);
	if (rc < 0)
		return ctl_index_err(root, "list the step's files", rc), -1;
	if (npats && export_filter(j, pats, npats) < 0)
		return -1;
	for (size_t i = 0; i < j->t.n; i++) {
		struct idx_inode in;

		if (!S_ISREG(j->t.v[i].mode))
			continue;
		j->x.files_total++;
		if (idx_inode_get(j->x.r->ix, j->t.v[i].ino, &in) == 0)
			j->x.total += in.size;
	}
	return 0;
}

/* export_make_top - create DIR (with its parents) and DIR/NAME, which must not exist.
 * Returns 0, or -1 (printed). */
static int export_make_top(struct export_job *j)
{
	int rc;

	rc = mkdir_p(j->dest);
	if (rc < 0) {
		ctl_err("cannot create directory '%s': %s", j->dest, strerror(-rc));
		return -1;
	}
	if ((size_t)snprintf(j->top, sizeof(j->top), "%s/%s", j->dest, j->s->name) >=
	    sizeof(j->top)) {
		ctl_err("cannot export to '%s': %s", j->dest, strerror(ENAMETOOLONG));
		return -1;
	}
	if (mkdir(j->top, 0700) < 0) {
		rc = -errno;
		if (rc == -EEXIST)
			ctl_err("'%s' already exists; remove it or export to another directory",
				j->top);
		else
			ctl_err("cannot create directory '%s': %s", j->top, strerror(-rc));
		return -1;
	}
	j->made_top = true;
	return 0;
}

/* export_note - remember a file the daemon flagged (in.flags torn or malformed) and a file that
 * did not verify (rc EX_DAMAGED, its bytes left at path left, why in reason). Returns 0 or -1
 * (out of memory, printed). */
static int export_note(struct export_job *j, const char *rel, const char *left, int rc,
		       const struct idx_inode *in, const char *reason)
{
	if (in->flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED)) {
		char fl[64], *note;

		ctl_flags(in->flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED), fl, sizeof(fl));
		note = malloc(strlen(rel) + strlen(fl) + 4);
		if (!note || ckpt_grow(&j->flagged, &j->capflagged, j->nflagged, sizeof(*j->flagged)) < 0) {
			free(note);
			ctl_err("out of memory");
			return -1;
		}
		sprintf(note, "%s (%s)", rel, fl);
		j->flagged[j->nflagged++] = note;
	}
	if (rc == EX_DAMAGED) {
		struct export_damage *d;

		if (ckpt_grow(&j->dmg, &j->capdmg, j->ndmg, sizeof(*j->dmg)) < 0) {
			ctl_err("out of memory");
			return -1;
		}
		d = &j->dmg[j->ndmg];
		d->path = strdup(left);
		d->reason = strdup(reason);
		if (!d->path || !d->reason) {
			free(d->path);
			free(d->reason);
			ctl_err("out of memory");
			return -1;
		}
		j->ndmg++;
	}
	return 0;
}

/*
 * export_entry - make entry j->t.v[i] under DIR/NAME: a directory, a symlink, a special file,
 * or a regular file copied and verified (export_file).
 * Returns 0, -1 (the export stops, printed), or -2 (an index error, printed).
 */
static int export_entry(struct export_job *j, size_t i)
{
	const struct tree_ent *te = &j->t.v[i];
	char path[PATH_CAP], reason[2 * PATH_CAP + 256], left[PATH_CAP + sizeof(EXPORT_TEMP)];
	struct idx_inode in;
	int rc;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", j->top, te->rel) >= sizeof(path)) {
		ctl_err("cannot export '%s': %s", te->rel, strerror(ENAMETOOLONG));
		return -1;
	}
	if (S_ISDIR(te->mode)) {
		if (mkdir(path, 0700) < 0) {
			ctl_err("cannot create directory '%s': %s", path, strerror(errno));
			return -1;
		}
	} else if (S_ISLNK(te->mode)) {
		char target[PATH_CAP];

		rc = idx_symlink_get(j->x.r->ix, te->ino, target, sizeof(target));
		if (rc >= 0 && symlink(target, path) < 0) {
			ctl_err("cannot create symlink '%s': %s", path, strerror(errno));
			return -1;
		}
	} else if (!S_ISREG(te->mode)) {
		/* a FIFO, socket or device node: made again, with its device number */
		if (idx_inode_get(j->x.r->ix, te->ino, &in) == 0 &&
		    mknod(path, in.mode & (S_IFMT | 0777), (dev_t)in.rdev) < 0) {
			ctl_err("cannot create '%s': %s", path, strerror(errno));
			return -1;
		}
	} else {
		rc = export_file(&j->x, te->ino, path, reason, sizeof(reason), left, sizeof(left),
				 &in);
		j->x.files_done++;
		if (rc == -ENOENT && j->x.r->mounted)
			return 0; /* deleted by the daemon since the listing */
		if (rc == -ENOMEM || (rc < 0 && !reason[0])) {
			ctl_progress_clear(&j->x.prog);
			ctl_index_err(j->x.root, "read a file", rc);
			return -2;
		}
		if (rc < 0) {
			ctl_err("%s", reason);
			return -1;
		}
		j->nfiles++;
		return export_note(j, te->rel, left, rc, &in, reason);
	}
	return 0;
}

/* dir_set_attrs - give directory path the permission bits and times of in.
 * Returns 0 or -errno of chmod(2) or utimensat(2). */
static int dir_set_attrs(const char *path, const struct idx_inode *in)
{
	struct timespec ts[2] = {
		{ .tv_sec = in->atime_ns / 1000000000, .tv_nsec = in->atime_ns % 1000000000 },
		{ .tv_sec = in->mtime_ns / 1000000000, .tv_nsec = in->mtime_ns % 1000000000 },
	};

	if (chmod(path, in->mode & 07777) < 0 || utimensat(AT_FDCWD, path, ts, 0) < 0)
		return -errno;
	return 0;
}

/* export_finish_dirs - directories last, deepest first, then DIR/NAME itself: make each
 * durable, then give it its modes and times. Returns 0, or -1 (printed). */
static int export_finish_dirs(struct export_job *j)
{
	char path[PATH_CAP];
	struct idx_inode in;
	int rc;

	for (size_t i = j->t.n; i-- > 0;) {
		if (!S_ISDIR(j->t.v[i].mode) || idx_inode_get(j->x.r->ix, j->t.v[i].ino, &in) < 0 ||
		    (size_t)snprintf(path, sizeof(path), "%s/%s", j->top, j->t.v[i].rel) >=
			    sizeof(path))
			continue; /* too long: refused when it was created */
		rc = ctl_fsync_path(path);
		if (rc == 0)
			rc = dir_set_attrs(path, &in);
		if (rc < 0) {
			ctl_err("cannot finish directory '%s': %s", path, strerror(-rc));
			return -1;
		}
	}
	rc = ctl_fsync_path(j->top);
	if (rc == 0 && idx_inode_get(j->x.r->ix, j->s->dir_ino, &in) == 0)
		rc = dir_set_attrs(j->top, &in);
	if (rc < 0) {
		ctl_err("cannot finish directory '%s': %s", j->top, strerror(-rc));
		return -1;
	}
	return 0;
}

/* export_report_json - the result as one JSON document. Returns 0 or -EIO (output failed). */
static int export_report_json(const struct export_job *j)
{
	const struct idx_step *s = j->s;
	json_t *o = json_object(), *ad = json_array();
	size_t i;

	json_object_set_new(o, "id", json_integer(s->id));
	json_object_set_new(o, "step", json_integer(s->step));
	json_object_set_new(o, "name", policy_json_name(s->name));
	json_object_set_new(o, "layout", json_string(ctl_kind(s->kind)));
	json_object_set_new(o, "state", json_string(idx_step_state_name(s->state)));
	json_object_set_new(o, "destination", json_string(j->top));
	json_object_set_new(o, "files", ctl_u64(j->nfiles));
	json_object_set_new(o, "logical_bytes", ctl_u64(j->x.done));
	if (j->tpath[0]) {
		json_t *tr = json_object();

		json_object_set_new(tr, "path", json_string(j->tpath));
		json_object_set_new(tr, "content", json_string(j->tcontent));
		json_object_set_new(tr, "kept_newer", json_boolean(j->kept));
		json_object_set_new(o, "tracker", tr);
	} else {
		json_object_set_new(o, "tracker", json_null());
	}
	for (i = 0; i < j->ndmg; i++) {
		json_t *d = json_object();

		json_object_set_new(d, "path", policy_json_name(j->dmg[i].path));
		json_object_set_new(d, "reason", json_string(j->dmg[i].reason));
		json_array_append_new(ad, d);
	}
	json_object_set_new(o, "damaged", ad);
	ad = json_array();
	for (i = 0; i < j->nflagged; i++)
		json_array_append_new(ad, policy_json_name(j->flagged[i]));
	json_object_set_new(o, "flagged", ad);
	json_object_set_new(o, "partial", json_boolean(j->partial));
	json_object_set_new(o, "verified", json_boolean(j->ndmg == 0));
	return ctl_print("ckptfs-export/1", o);
}

/* export_report_text - the result as text on stdout. */
static void export_report_text(const struct export_job *j)
{
	const struct idx_step *s = j->s;
	char sb[64], q[CTL_QUOTE_CAP(PATH_CAP)], q2[CTL_QUOTE_CAP(PATH_CAP)];
	size_t i;

	printf("exported step %" PRId64 " ('%s', %s, %s) to %s: %zu files, %s, ", s->step,
	       ctl_quote(s->name, q, sizeof(q)), ctl_kind(s->kind), idx_step_state_name(s->state),
	       ctl_quote(j->top, q2, sizeof(q2)), j->nfiles,
	       policy_size_text(j->x.done, sb, sizeof(sb)));
	if (j->ndmg)
		printf("%zu did not verify\n", j->ndmg);
	else
		printf("every file verified\n");
	for (i = 0; i < j->ndmg; i++)
		printf("damaged: %s (%s); the bytes read are left in that file\n",
		       ctl_quote(j->dmg[i].path, q, sizeof(q)), j->dmg[i].reason);
	for (i = 0; i < j->nflagged; i++)
		printf("flagged: %s: the daemon judged it unsound; its bytes are what "
		       "was written\n",
		       ctl_quote(j->flagged[i], q, sizeof(q)));
	if (j->tpath[0] && j->kept)
		printf("tracker: %s left as is: it names a newer step (%s)\n",
		       ctl_quote(j->tpath, q, sizeof(q)), ctl_quote(j->tcontent, q2, sizeof(q2)));
	else if (j->tpath[0])
		printf("tracker: %s = %s\n", ctl_quote(j->tpath, q, sizeof(q)),
		       ctl_quote(j->tcontent, q2, sizeof(q2)));
	else if (j->ndmg)
		printf("tracker: not written (some files did not verify)\n");
	else if (j->partial)
		printf("tracker: not written (only the files --include names)\n");
	else if (s->state != IDX_STEP_COMPLETE)
		printf("tracker: not written (the step is not complete)\n");
}

/* export_job_free - what j owns (not j itself, nor its store). */
static void export_job_free(struct export_job *j)
{
	size_t i;

	for (i = 0; i < j->ndmg; i++) {
		free(j->dmg[i].path);
		free(j->dmg[i].reason);
	}
	free(j->dmg);
	for (i = 0; i < j->nflagged; i++)
		free(j->flagged[i]);
	free(j->flagged);
	ctl_tree_free(&j->t);
	free(j->x.buf);
	store_hasher_free(j->x.hs);
}

/*
 * export_copy - copy every entry of the step, finish its directories, write the tracker (only
 * for a sound export of a complete step: a framework resumes from it) and make DIR durable.
 * Returns 0, -1 (the export stops, printed), or -2 (an index error, printed).
 */
static int export_copy(struct export_job *j)
{
	int rc;

	/* t is sorted: a directory comes before what it holds */
	for (size_t i = 0; i < j->t.n; i++)
		if ((rc = export_entry(j, i)) < 0)
			return rc;
	if (export_finish_dirs(j) < 0)
		return -1;
	/* a tracker makes a framework resume from the step: only a whole, sound, complete one */
	if (!j->ndmg && !j->partial && j->s->state == IDX_STEP_COMPLETE &&
	    export_tracker(j->dest, j->s, j->tpath, j->tcontent, sizeof(j->tcontent), &j->kept) < 0)
		return -1;
	rc = ctl_fsync_path(j->dest);
	if (rc < 0) {
		ctl_err("cannot sync directory '%s': %s", j->dest, strerror(-rc));
		return -1;
	}
	return 0;
}

/*
 * export_run - export step arg of store root to dest (o's operands), with o's options.
 * Returns the exit status (EXIT_OK, EXIT_DAMAGE when a file did not verify, EXIT_ERROR).
 */
static int export_run(const char *root, const char *arg, const char *dest,
		      const struct ctl_opts *o)
{
	struct export_job j = { .x = { .root = root }, .dest = dest, .partial = o->ninclude > 0 };
	struct step_match m;
	int rc, status = EXIT_ERROR;

	memset(&m, 0, sizeof(m));
	if (ctl_open_read(root, &j.x.r) < 0)
		return EXIT_ERROR;
	if (export_find(&j, arg, o->force, o->include, o->ninclude, &m) < 0 ||
	    export_make_top(&j) < 0)
		goto out;
	ctl_progress_init(&j.x.prog);
	j.x.buf = malloc(STORE_CHUNK_MAX);
	j.x.hs = store_hasher_new();
	if (!j.x.buf || !j.x.hs) {
		ctl_err("out of memory");
		goto out;
	}
	export_progress(&j.x, true);
	rc = export_copy(&j);
	if (rc == -2)
		goto out;
	if (rc < 0)
		goto out_progress;
	export_progress(&j.x, true);
	ctl_progress_clear(&j.x.prog);

	if (o->json) {
		if (export_report_json(&j) < 0)
			goto out;
	} else {
		export_report_text(&j);
	}
	if (j.ndmg)
		ctl_err("%zu file(s) of step %" PRId64 " did not verify; they are left with a "
			".partial suffix (or as " EXPORT_TEMP " files, for the longest names) under "
			"'%s'",
			j.ndmg, j.s->step, j.top);
	status = j.ndmg ? EXIT_DAMAGE : EXIT_OK;
	goto out;

out_progress:
	ctl_progress_clear(&j.x.prog);
	if (j.made_top)
		ctl_err("the export in '%s' is incomplete; remove it before exporting again",
			j.top);
out:
	export_job_free(&j);
	free(m.found.v);
	ckpt_repo_close(j.x.r);
	return status;
}

int cmd_export(const struct ctl_opts *o)
{
	return export_run(o->root, o->argv[0], o->argv[1], o);
}
