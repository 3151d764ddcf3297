/*
 * export.c — ckptctl export [--force] STEP DIR: copy a complete step out as plain, verified
 * files, with the framework's tracker beside it.
 *
 * export never overwrites: it refuses an existing DIR/NAME, writes each file as NAME.partial
 * and renames it only once its whole-file XXH3-128 matches the index and it is fsynced.
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

/* ---- export ---- */

/* Progress of an export, on stderr when it is a terminal. */
struct export_ctx {
	struct ckpt_repo *r;
	const char *root;
	uint64_t total, done;
	struct ctl_progress prog;
	uint8_t *buf;              /* STORE_CHUNK_MAX bytes */
	struct store_hasher *hs;
};

/* export_progress - "export: DONE/TOTAL, PERCENT" on the progress line. */
static void export_progress(struct export_ctx *x, bool force)
{
	char sdone[32], stotal[32];

	if (!ctl_progress_due(&x->prog, force))
		return;
	ctl_progress_line(&x->prog, "export: %s/%s, %.0f%%",
			  fmt_short_size(x->done, sdone, sizeof(sdone)),
			  fmt_short_size(x->total, stotal, sizeof(stotal)),
			  x->total ? 100.0 * (double)x->done / (double)x->total : 100.0);
}

/* write_all - write len bytes of buf to fd. Returns 0 or -errno. */
static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Outcome of exporting one file. */
enum export_result {
	EX_OK,        /* written, verified, renamed into place */
	EX_DAMAGED,   /* left as .partial; reason filled */
};

struct export_sink_arg {
	struct export_ctx *x;
	int fd;
	const char *partial;
};

/* stream_sink of export: write the piece to the .partial file, count it, show progress. */
static int export_sink(const void *buf, size_t len, void *arg, char *reason, size_t cap)
{
	struct export_sink_arg *a = arg;
	int rc = 0;

	if (!buf) { /* a hole stays one: skipped here, the size set by export_file */
		if (lseek(a->fd, (off_t)len, SEEK_CUR) < 0)
			rc = -errno;
	} else {
		rc = write_all(a->fd, buf, len);
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
 * export_file - copy regular file ino to dst: written to "dst.partial", every chunk read through
 * store_chunk_pread (decoded and re-hashed), the whole-file XXH3-128 compared with the recorded
 * one, fsynced, given the recorded mode and times, then renamed to dst. On a read error or a
 * digest mismatch the bytes stay in "dst.partial" and reason says why (cap bytes).
 * Returns an enum export_result, -errno of the index (-ENOMEM), or -errno of the destination
 * (what failed is then in reason).
 */
static int export_file(struct export_ctx *x, uint64_t ino, const char *dst, char *reason,
		       size_t cap, struct idx_inode *ret_in)
{
	struct idx_extent *ext = NULL;
	struct store_hash got;
	char partial[PATH_CAP + 16], hex[2 * STORE_HASH_LEN + 1], hex2[2 * STORE_HASH_LEN + 1];
	size_t n = 0;
	bool created = false;
	int fd = -1, rc;

	reason[0] = '\0';
	rc = idx_inode_get(x->r->ix, ino, ret_in);
	if (rc == 0)
		rc = idx_file_extents(x->r->ix, ino, &ext, &n);
	if (rc < 0)
		return rc;
	if ((size_t)snprintf(partial, sizeof(partial), "%s.partial", dst) >= sizeof(partial)) {
		snprintf(reason, cap, "cannot create '%s.partial': %s", dst, strerror(ENAMETOOLONG));
		rc = -ENAMETOOLONG;
		goto out;
	}
	fd = open(partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		snprintf(reason, cap, "cannot create '%s': %s", partial, strerror(-rc));
		goto out;
	}
	created = true;
	struct export_sink_arg sa = { .x = x, .fd = fd, .partial = partial };

	rc = stream_extents(x->r->st, ext, n, ret_in->size, ret_in->flags & IDX_INODE_SPARSE,
			    x->buf, x->hs, export_sink, &sa, "",
			    reason, cap, &got);
	if (rc != 0) {
		rc = rc == 1 ? EX_DAMAGED : rc;
		goto out;
	}
	store_hasher_digest(x->hs, &got);
	if (!ret_in->has_hash) {
		snprintf(reason, cap, "no whole-file digest recorded (never closed), got %s",
			 hex16(got.b, hex));
		rc = EX_DAMAGED;
		goto out;
	}
	if (memcmp(got.b, ret_in->hash, IDX_HASH_LEN)) {
		snprintf(reason, cap, "whole-file xxh3-128 mismatch: recorded %s, read %s",
			 hex16(ret_in->hash, hex), hex16(got.b, hex2));
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
 * export_tracker - write the framework's tracker naming step s into dir (temp file, fsync,
 * rename), unless one there already names a newer step.
 * @ret_path, @ret_content: what was written (or found), each cap bytes; ret_path "" when the
 * layout has no tracker ckptctl can write. @ret_kept: true when a newer tracker was left as is.
 * Returns 0, or -errno (what failed is printed).
 */
static int export_tracker(const char *dir, const struct idx_step *s, char *ret_path,
			  char *ret_content, size_t cap, bool *ret_kept)
{
	struct layout_tracker t = { .step = s->step, .epoch = -1 };
	char rel[LAYOUT_PATH_MAX], tmp[PATH_CAP + 16], old[LAYOUT_TRACKER_MAX];
	int len, fd, rc;
	ssize_t oldlen;

	*ret_kept = false;
	ret_path[0] = ret_content[0] = '\0';
	if (s->kind == LAYOUT_INTERNEVO || s->kind == LAYOUT_MF1)
		return 0; /* InternEvo's tracker is the trainer's pickle; MF1's is per rank */
	if (layout_tracker_path((enum layout_kind)s->kind, s->step, -1, rel, sizeof(rel)) < 0)
		return 0; /* HF, DCP, Orbax: the marker is inside the step directory */
	len = layout_tracker_format((enum layout_kind)s->kind, &t, ret_content, cap);
	if (len < 0) {
		ret_content[0] = '\0';
		return 0;
	}
	if ((size_t)snprintf(ret_path, cap, "%s/%s", dir, rel) >= cap ||
	    (size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", ret_path) >= sizeof(tmp)) {
		errmsg("cannot write the tracker in '%s': %s", dir, strerror(ENAMETOOLONG));
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
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		errmsg("cannot create '%s': %s", tmp, strerror(-rc));
		return rc;
	}
	rc = write_all(fd, ret_content, (size_t)len);
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, ret_path) < 0)
		rc = -errno;
	if (rc < 0) {
		errmsg("cannot write '%s': %s", ret_path, strerror(-rc));
		(void)unlink(tmp);
		return rc;
	}
	return 0;
}

/* A file that could not be exported faithfully. */
struct export_damage {
	char *path;   /* owned: the .partial file left behind */
	char *reason; /* owned */
};

static int export_run(const char *root, const char *arg, const char *dest, bool force,
		      bool json)
{
	struct export_ctx x = { .root = root };
	struct step_match m;
	const struct idx_step *s;
	struct tree t = { 0 };
	struct export_damage *dmg = NULL;
	char **flagged = NULL; /* owned: "REL (torn)" for files the daemon flagged */
	size_t ndmg = 0, capdmg = 0, nflagged = 0, capflagged = 0, nfiles = 0, i;
	char top[PATH_CAP], path[PATH_CAP], tpath[PATH_CAP], tcontent[LAYOUT_TRACKER_MAX];
	char reason[2 * PATH_CAP + 256], sb[64];
	bool kept = false, made_top = false;
	int rc, status = EXIT_ERROR;

	memset(&m, 0, sizeof(m));
	tpath[0] = tcontent[0] = '\0';
	if (repo_open_read(root, &x.r) < 0)
		return EXIT_ERROR;
	rc = find_steps(x.r->ix, arg, &m);
	if (rc < 0) {
		status = index_error(root, "list steps", rc);
		goto out;
	}
	s = pick_step(&m);
	if (!s) {
		status = no_such_step(root, arg);
		goto out;
	}
	if (s->state != IDX_STEP_COMPLETE && !(s->pinned && s->state != IDX_STEP_PRUNED) &&
	    !force) {
		errmsg("step %" PRId64 " ('%s', id %" PRId64 ") is %s; only complete steps are "
		       "exported: add --force to export it anyway",
		       s->step, s->name, s->id, idx_step_state_name(s->state));
		goto out;
	}
	if (!s->dir_ino) {
		errmsg("step %" PRId64 " ('%s', id %" PRId64 ") is %s and has no directory any "
		       "more; nothing to export",
		       s->step, s->name, s->id, idx_step_state_name(s->state));
		goto out;
	}
	rc = tree_collect(x.r->ix, s->dir_ino, &t);
	if (rc < 0) {
		status = index_error(root, "list the step's files", rc);
		goto out;
	}
	for (i = 0; i < t.n; i++) {
		struct idx_inode in;

		if (!S_ISREG(t.v[i].mode))
			continue;
		if (idx_inode_get(x.r->ix, t.v[i].ino, &in) == 0)
			x.total += in.size;
	}
	rc = mkdir_p(dest);
	if (rc < 0) {
		errmsg("cannot create directory '%s': %s", dest, strerror(-rc));
		goto out;
	}
	if ((size_t)snprintf(top, sizeof(top), "%s/%s", dest, s->name) >= sizeof(top)) {
		errmsg("cannot export to '%s': %s", dest, strerror(ENAMETOOLONG));
		goto out;
	}
	if (mkdir(top, 0700) < 0) {
		rc = -errno;
		if (rc == -EEXIST)
			errmsg("'%s' already exists; remove it or export to another directory", top);
		else
			errmsg("cannot create directory '%s': %s", top, strerror(-rc));
		goto out;
	}
	made_top = true;
	ctl_progress_init(&x.prog);
	x.buf = malloc(STORE_CHUNK_MAX);
	x.hs = store_hasher_new();
	if (!x.buf || !x.hs) {
		errmsg("out of memory");
		goto out;
	}
	export_progress(&x, true);
	/* t is sorted: a directory comes before what it holds */
	for (i = 0; i < t.n; i++) {
		struct idx_inode in;

		if ((size_t)snprintf(path, sizeof(path), "%s/%s", top, t.v[i].rel) >= sizeof(path)) {
			errmsg("cannot export '%s': %s", t.v[i].rel, strerror(ENAMETOOLONG));
			goto out_progress;
		}
		if (S_ISDIR(t.v[i].mode)) {
			if (mkdir(path, 0700) < 0) {
				errmsg("cannot create directory '%s': %s", path, strerror(errno));
				goto out_progress;
			}
		} else if (S_ISLNK(t.v[i].mode)) {
			char target[PATH_CAP];

			rc = idx_symlink_get(x.r->ix, t.v[i].ino, target, sizeof(target));
			if (rc >= 0 && symlink(target, path) < 0) {
				errmsg("cannot create symlink '%s': %s", path, strerror(errno));
				goto out_progress;
			}
		} else if (!S_ISREG(t.v[i].mode)) {
			/* a FIFO, socket or device node: made again, with its device number */
			if (idx_inode_get(x.r->ix, t.v[i].ino, &in) == 0 &&
			    mknod(path, in.mode & (S_IFMT | 0777), (dev_t)in.rdev) < 0) {
				errmsg("cannot create '%s': %s", path, strerror(errno));
				goto out_progress;
			}
		} else {
			rc = export_file(&x, t.v[i].ino, path, reason, sizeof(reason), &in);
			if (rc == -ENOENT && x.r->mounted)
				continue; /* deleted by the daemon since the listing */
			if (rc == -ENOMEM || (rc < 0 && !reason[0])) {
				ctl_progress_clear(&x.prog);
				status = index_error(root, "read a file", rc);
				goto out;
			}
			if (rc < 0) {
				errmsg("%s", reason);
				goto out_progress;
			}
			nfiles++;
			if (in.flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED)) {
				char fl[64], *note;

				flags_string(in.flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED), fl,
					     sizeof(fl));
				note = malloc(strlen(t.v[i].rel) + strlen(fl) + 4);
				if (!note ||
				    grow(&flagged, &capflagged, nflagged, sizeof(*flagged)) < 0) {
					free(note);
					errmsg("out of memory");
					goto out_progress;
				}
				sprintf(note, "%s (%s)", t.v[i].rel, fl);
				flagged[nflagged++] = note;
			}
			if (rc == EX_DAMAGED) {
				if (grow(&dmg, &capdmg, ndmg, sizeof(*dmg)) < 0) {
					errmsg("out of memory");
					goto out_progress;
				}
				dmg[ndmg].path = malloc(strlen(path) + 9);
				dmg[ndmg].reason = strdup(reason);
				if (!dmg[ndmg].path || !dmg[ndmg].reason) {
					free(dmg[ndmg].path);
					free(dmg[ndmg].reason);
					errmsg("out of memory");
					goto out_progress;
				}
				sprintf(dmg[ndmg].path, "%s.partial", path);
				ndmg++;
			}
		}
	}
	/* directories last, deepest first: their modes and times, then make them durable */
	for (i = t.n; i-- > 0;) {
		struct idx_inode in;

		if (!S_ISDIR(t.v[i].mode) || idx_inode_get(x.r->ix, t.v[i].ino, &in) < 0 ||
		    (size_t)snprintf(path, sizeof(path), "%s/%s", top, t.v[i].rel) >= sizeof(path))
			continue; /* too long: refused when it was created */
		rc = fsync_path(path);
		if (rc == 0) {
			struct timespec ts[2] = {
				{ .tv_sec = in.atime_ns / 1000000000,
				  .tv_nsec = in.atime_ns % 1000000000 },
				{ .tv_sec = in.mtime_ns / 1000000000,
				  .tv_nsec = in.mtime_ns % 1000000000 },
			};

			if (chmod(path, in.mode & 07777) < 0 || utimensat(AT_FDCWD, path, ts, 0) < 0)
				rc = -errno;
		}
		if (rc < 0) {
			errmsg("cannot finish directory '%s': %s", path, strerror(-rc));
			goto out_progress;
		}
	}
	{
		struct idx_inode in;

		rc = fsync_path(top);
		if (rc == 0 && idx_inode_get(x.r->ix, s->dir_ino, &in) == 0) {
			struct timespec ts[2] = {
				{ .tv_sec = in.atime_ns / 1000000000,
				  .tv_nsec = in.atime_ns % 1000000000 },
				{ .tv_sec = in.mtime_ns / 1000000000,
				  .tv_nsec = in.mtime_ns % 1000000000 },
			};

			if (chmod(top, in.mode & 07777) < 0 || utimensat(AT_FDCWD, top, ts, 0) < 0)
				rc = -errno;
		}
		if (rc < 0) {
			errmsg("cannot finish directory '%s': %s", top, strerror(-rc));
			goto out_progress;
		}
	}
	/* the tracker only for a sound export of a complete step: a framework resumes from it */
	if (!ndmg && s->state == IDX_STEP_COMPLETE &&
	    export_tracker(dest, s, tpath, tcontent, sizeof(tcontent), &kept) < 0)
		goto out_progress;
	rc = fsync_path(dest);
	if (rc < 0) {
		errmsg("cannot sync directory '%s': %s", dest, strerror(-rc));
		goto out_progress;
	}
	export_progress(&x, true);
	ctl_progress_clear(&x.prog);

	if (json) {
		json_t *o = json_object(), *ad = json_array();

		json_object_set_new(o, "id", json_integer(s->id));
		json_object_set_new(o, "step", json_integer(s->step));
		json_object_set_new(o, "name", json_name(s->name));
		json_object_set_new(o, "layout", json_string(kind_name(s->kind)));
		json_object_set_new(o, "state", json_string(idx_step_state_name(s->state)));
		json_object_set_new(o, "destination", json_string(top));
		json_object_set_new(o, "files", json_u64(nfiles));
		json_object_set_new(o, "bytes", json_u64(x.done));
		if (tpath[0]) {
			json_t *tr = json_object();

			json_object_set_new(tr, "path", json_string(tpath));
			json_object_set_new(tr, "content", json_string(tcontent));
			json_object_set_new(tr, "kept_newer", json_boolean(kept));
			json_object_set_new(o, "tracker", tr);
		} else {
			json_object_set_new(o, "tracker", json_null());
		}
		for (i = 0; i < ndmg; i++) {
			json_t *d = json_object();

			json_object_set_new(d, "partial", json_name(dmg[i].path));
			json_object_set_new(d, "reason", json_string(dmg[i].reason));
			json_array_append_new(ad, d);
		}
		json_object_set_new(o, "damaged", ad);
		ad = json_array();
		for (i = 0; i < nflagged; i++)
			json_array_append_new(ad, json_name(flagged[i]));
		json_object_set_new(o, "flagged", ad);
		json_object_set_new(o, "verified", json_boolean(ndmg == 0));
		if (json_print(o) < 0)
			goto out;
	} else {
		printf("exported step %" PRId64 " ('%s', %s, %s) to %s: %zu files, %s, ", s->step,
		       s->name, kind_name(s->kind), idx_step_state_name(s->state), top, nfiles,
		       fmt_size(x.done, sb, sizeof(sb)));
		if (ndmg)
			printf("%zu did not verify\n", ndmg);
		else
			printf("every file verified\n");
		for (i = 0; i < ndmg; i++)
			printf("damaged: %s (%s); the bytes read are left in that file\n",
			       dmg[i].path, dmg[i].reason);
		for (i = 0; i < nflagged; i++)
			printf("flagged: %s: the daemon judged it unsound; its bytes are what "
			       "was written\n",
			       flagged[i]);
		if (tpath[0] && kept)
			printf("tracker: %s left as is: it names a newer step (%s)\n", tpath,
			       tcontent);
		else if (tpath[0])
			printf("tracker: %s = %s\n", tpath, tcontent);
		else if (ndmg)
			printf("tracker: not written (some files did not verify)\n");
		else if (s->state != IDX_STEP_COMPLETE)
			printf("tracker: not written (the step is not complete)\n");
	}
	if (ndmg)
		errmsg("%zu file(s) of step %" PRId64 " did not verify; they are left with a "
		       ".partial suffix under '%s'",
		       ndmg, s->step, top);
	status = ndmg ? EXIT_DAMAGE : EXIT_OK;
	goto out;

out_progress:
	ctl_progress_clear(&x.prog);
	if (made_top)
		errmsg("the export in '%s' is incomplete; remove it before exporting again", top);
out:
	for (i = 0; i < ndmg; i++) {
		free(dmg[i].path);
		free(dmg[i].reason);
	}
	free(dmg);
	for (i = 0; i < nflagged; i++)
		free(flagged[i]);
	free(flagged);
	tree_free(&t);
	free(m.found.v);
	free(x.buf);
	store_hasher_free(x.hs);
	ckpt_repo_close(x.r);
	return status;
}


int cmd_export(const struct ctl_opts *o)
{
	if (o->argc != 2)
		return usage_error("'export' takes a STEP and a DIR");
	return export_run(o->root, o->argv[0], o->argv[1], o->force, o->json);
}
