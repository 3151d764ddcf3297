/*
 * steps.c — checkpoint semantics: which files form a step, when a step is complete, what the
 * trackers say, what `ls` shows, and retention.
 *
 * States (index/index.h enum idx_step_state; DESIGN.md "Steps"):
 *
 *     mkdir STEPDIR          marker / tracker claim       every file whole and durable
 *   ──────────────► writing ───────────────────► sealed ─────────────────────────► complete
 *                     │                            │                                  │
 *                     │ no open file, no live      │ no open file, no live writer,     │ retention
 *                     │ writer, never sealed       │ a file torn or malformed          ▼
 *                     └──────────► incomplete ◄────┘                                pruned
 *                                  (moved to .ckptfs/quarantine; a later claim whose files
 *                                   are all sound brings it back, sealed)
 *
 * Invariants:
 *   1. Only complete steps are named by a tracker read or counted by retention.
 *   2. A step is complete only if it was sealed, every regular file under its directory has a
 *      committed digest (durable: oi_commit), none is open with uncommitted bytes, and none is
 *      flagged IDX_INODE_TORN or IDX_INODE_MALFORMED.
 *   3. Trackers (root latest_checkpointed_iteration.txt and latest, rank_N/meta.json) are
 *      virtual: what a trainer writes is recorded as a claim and never stored as a file; what a
 *      reader gets is the newest complete step of the tracker's layouts, in the trainer's format.
 *      No complete step: the tracker does not exist.
 *   4. Retention never prunes before a newer step is complete, never the newest complete step,
 *      never a pinned one, and never counts a step that is not complete.
 *
 * Locking: every function here runs with fs->mu held unless its comment says otherwise.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <fuse_lowlevel.h>
#include <jansson.h>

#include "fs/fs_int.h"
#include "fs/layout.h"
#include "fs/validate.h"

#define META_NAME ".ckptfs"
#define QUARANTINE_NAME "quarantine"
#define RETAINED_NAME "retained"
/* A step with no open file whose writers are all gone is judged after this long (ns). */
#define STEP_SETTLE_NS (1500LL * 1000 * 1000)
/* How often the reaper looks at unfinished steps (ns, < 1 s). */
#define REAP_PERIOD_NS (250L * 1000 * 1000)

/* Per-step facts that live only while the daemon runs. */
struct step_rt {
	int64_t id;
	pid_t pids[16]; /* processes that wrote into the step (first 16) */
	unsigned long long starts[16]; /* their start times (proc(5) field 22): pids are reused */
	unsigned npids;
	int64_t last_ns; /* last write/commit seen */
	bool torn;       /* a file of the step was closed by a dying writer: it cannot complete */
	struct step_rt *next;
};

/* ---- small helpers ---- */

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("ckptfs: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static struct step_rt *rt_get(struct ckfs *fs, int64_t id, bool create)
{
	struct step_rt *r;

	for (r = fs->steps_rt; r; r = r->next)
		if (r->id == id)
			return r;
	if (!create || !(r = calloc(1, sizeof(*r))))
		return NULL;
	r->id = id;
	r->next = fs->steps_rt;
	fs->steps_rt = r;
	return r;
}

static void rt_drop(struct ckfs *fs, int64_t id)
{
	for (struct step_rt **pp = &fs->steps_rt; *pp; pp = &(*pp)->next) {
		if ((*pp)->id == id) {
			struct step_rt *d = *pp;

			*pp = d->next;
			free(d);
			return;
		}
	}
}

/*
 * The process (thread group) of a thread: FUSE requests carry the calling thread's id, and a
 * trainer's helper thread may exit while its process goes on writing. 0 when unknown.
 */
static pid_t tgid_of(pid_t tid)
{
	char path[64], line[128];
	pid_t tgid = 0;
	FILE *f;

	if (tid <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	if (!(f = fopen(path, "re")))
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Tgid: %d", &tgid) == 1)
			break;
	fclose(f);
	return tgid;
}

static int pid_stat(pid_t pid, char *ret_state, unsigned long long *ret_start);

static void rt_note(struct ckfs *fs, int64_t id, pid_t pid)
{
	struct step_rt *r = rt_get(fs, id, true);

	if (!r)
		return;
	pid = tgid_of(pid);
	r->last_ns = ckpt_now_ns();
	for (unsigned i = 0; i < r->npids; i++)
		if (r->pids[i] == pid)
			return;
	char state;
	unsigned long long start;

	if (pid > 0 && r->npids < sizeof(r->pids) / sizeof(r->pids[0]) &&
	    pid_stat(pid, &state, &start) == 0) {
		r->starts[r->npids] = start;
		r->pids[r->npids++] = pid;
	}
}

/*
 * State and start time (clock ticks since boot) of process pid, from /proc/PID/stat (proc(5):
 * field 3 state, field 22 starttime). Returns 0 or -errno.
 */
static int pid_stat(pid_t pid, char *ret_state, unsigned long long *ret_start)
{
	char path[64], buf[1024];
	unsigned long long start;
	char state;
	size_t n;
	FILE *f;
	char *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "re")))
		return -errno;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	if (!(p = strrchr(buf, ')')) ||
	    sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
			  "%*d %*d %llu", &state, &start) != 2)
		return -EIO;
	*ret_state = state;
	*ret_start = start;
	return 0;
}

/* Is the process that had this pid and start time still running (not a zombie)? */
static bool pid_alive(pid_t pid, unsigned long long start)
{
	unsigned long long now_start;
	char state;

	if (pid_stat(pid, &state, &now_start) < 0)
		return false;
	return now_start == start && state != 'Z' && state != 'X';
}

int fs_pid_flags(pid_t pid, unsigned long *ret)
{
	char path[64], buf[1024];
	FILE *f;
	size_t n;
	char *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* fields after "(comm)": state ppid pgrp session tty_nr tpgid flags (proc(5)) */
	p = strrchr(buf, ')');
	if (!p)
		return -EIO;
	unsigned long flags;
	if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) != 1)
		return -EIO;
	*ret = flags;
	return 0;
}

/* Is ino inside /.ckptfs? */
bool steps_in_meta(struct ckfs *fs, uint64_t ino)
{
	for (int depth = 0; depth < 256 && ino != IDX_ROOT_INO; depth++) {
		uint64_t up;

		if (ino == fs->meta_ino)
			return true;
		if (idx_dentry_parent(fs->ix, ino, &up, NULL, 0) < 0)
			return false;
		ino = up;
	}
	return false;
}

/* Path of ino relative to the root without the leading '/', into buf. */
static int rel_path(struct ckfs *fs, uint64_t ino, char *buf, size_t cap)
{
	char tmp[LAYOUT_PATH_MAX + 1];
	int n = idx_path(fs->ix, ino, tmp, sizeof(tmp));

	if (n < 0)
		return n;
	const char *p = tmp[0] == '/' ? tmp + 1 : tmp;
	size_t len = strlen(p);

	if ((size_t)n >= sizeof(tmp) || len >= cap)
		return -ENAMETOOLONG;
	memcpy(buf, p, len + 1);
	return 0;
}

/*
 * Make room for one more element in the array *vp of *cap elements of elem bytes, n in use.
 * Returns 0 or -ENOMEM (the array is unchanged).
 */
static int grow(void *vp, size_t *cap, size_t n, size_t elem)
{
	void **v = vp;

	if (n < *cap)
		return 0;
	size_t nc = *cap ? 2 * *cap : 16;
	void *p = realloc(*v, nc * elem);

	if (!p)
		return -ENOMEM;
	*v = p;
	*cap = nc;
	return 0;
}

/* Queue parent/name for steps_flush_inval. fs->mu held. Dropped silently on ENOMEM (the kernel
 * then forgets it by itself later, under memory pressure or at unmount). */
static void inval_queue(struct ckfs *fs, uint64_t parent, const char *name)
{
	if (grow(&fs->inval, &fs->capinval, fs->ninval, sizeof(*fs->inval)) < 0)
		return;
	fs->inval[fs->ninval].parent = parent;
	snprintf(fs->inval[fs->ninval].name, sizeof(fs->inval[0].name), "%s", name);
	fs->ninval++;
}

void steps_flush_inval(struct ckfs *fs)
{
	struct inval *v;
	size_t n;

	pthread_mutex_lock(&fs->mu);
	v = fs->inval;
	n = fs->ninval;
	fs->inval = NULL;
	fs->ninval = fs->capinval = 0;
	pthread_mutex_unlock(&fs->mu);
	for (size_t i = 0; fs->se && i < n; i++)
		fuse_lowlevel_notify_inval_entry(fs->se, v[i].parent, v[i].name,
						 strlen(v[i].name)); /* -ENOENT: not cached */
	free(v);
}

/* ---- the tree of a step ---- */

struct walk {
	struct ckfs *fs;
	uint64_t *dirs;
	size_t ndirs, capdirs;
	/* results */
	uint64_t files, bytes, stored;
	unsigned open, unsound, uncommitted, bad;
	bool check_bad;
	struct store_hasher *digest;
};

static int bad_extent_check(struct ckfs *fs, uint64_t ino);

static int walk_entry(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct walk *w = arg;
	struct idx_inode a;
	int rc;

	if (S_ISDIR(mode)) {
		if (grow(&w->dirs, &w->capdirs, w->ndirs, sizeof(*w->dirs)) < 0)
			return -ENOMEM;
		w->dirs[w->ndirs++] = ino;
		return 0;
	}
	if (!S_ISREG(mode))
		return 0;
	if ((rc = idx_inode_get(w->fs->ix, ino, &a)) < 0)
		return rc;
	struct oinode *oi = oi_find(w->fs, ino);

	if (oi && atomic_load(&oi->ov_dirty))
		w->open++;
	if (!a.has_hash)
		w->uncommitted++;
	if (a.flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED))
		w->unsound++;
	if (w->check_bad && bad_extent_check(w->fs, ino))
		w->bad++;
	w->files++;
	w->bytes += a.size;
	uint64_t st = 0;

	if (idx_file_stored_bytes(w->fs->ix, ino, &st) == 0)
		w->stored += st;
	if (w->digest) {
		store_hasher_update(w->digest, name, strlen(name) + 1);
		store_hasher_update(w->digest, a.hash, IDX_HASH_LEN);
	}
	return 0;
}

/*
 * Walk every file under dir; fills w (w->digest owned by the caller after success). Directories
 * are listed one after another, never nested: a listing's statement is shared per handle.
 */
static int walk_tree(struct ckfs *fs, uint64_t dir, struct walk *w, bool check_bad)
{
	int rc;

	memset(w, 0, sizeof(*w));
	w->check_bad = check_bad;
	w->fs = fs;
	w->digest = store_hasher_new();
	if (!w->digest)
		return -ENOMEM;
	rc = idx_dir_list(fs->ix, dir, 0, walk_entry, w);
	for (size_t i = 0; rc >= 0 && i < w->ndirs; i++) /* w->dirs grows as we go */
		rc = idx_dir_list(fs->ix, w->dirs[i], 0, walk_entry, w);
	free(w->dirs);
	w->dirs = NULL;
	if (rc < 0) {
		store_hasher_free(w->digest);
		w->digest = NULL;
	}
	return rc < 0 ? rc : 0;
}

/* Has some chunk of a file under dir been found bad? 1 yes, 0 no. */
static int tree_has_bad_chunk(struct ckfs *fs, uint64_t dir)
{
	struct walk w;

	if (walk_tree(fs, dir, &w, true) < 0)
		return 0;
	store_hasher_free(w.digest);
	return w.bad > 0;
}

/* Read a committed file straight from its extents (recovery: no oinode exists). */
struct ext_reader {
	struct ckfs *fs;
	struct idx_extent *ext;
	size_t n;
};

static ssize_t ext_read(void *arg, void *buf, size_t len, uint64_t off)
{
	struct ext_reader *r = arg;
	size_t done = 0;

	for (size_t i = 0; i < r->n && done < len; i++) {
		const struct idx_extent *e = &r->ext[i];
		struct store_hash h;
		uint64_t pos = off + done;

		if (pos >= e->offset + e->length)
			continue;
		if (pos < e->offset) { /* a hole (index invariant 4): zeros */
			size_t z = e->offset - pos < len - done ? (size_t)(e->offset - pos) : len - done;

			memset((uint8_t *)buf + done, 0, z);
			done += z;
			if (done == len)
				break;
			pos += z;
		}
		memcpy(h.b, e->hash, STORE_HASH_LEN);
		size_t want = len - done;

		if (want > e->offset + e->length - pos)
			want = (size_t)(e->offset + e->length - pos);
		ssize_t got = store_chunk_pread(r->fs->st, &h, (uint8_t *)buf + done, want,
						pos - e->offset);

		if (got != (ssize_t)want)
			return got < 0 ? got : -EIO;
		done += want;
	}
	/* the callers ask within the file's size: what no extent covers is its trailing hole */
	memset((uint8_t *)buf + done, 0, len - done);
	return (ssize_t)len;
}

/* Re-check the structure of every file under dir from the store; flag the malformed. */
static int revalidate_entry(const char *name, uint64_t ino, uint32_t mode, int64_t cookie,
			    void *arg)
{
	struct walk *w = arg;
	struct ext_reader r = { .fs = w->fs };
	struct idx_inode a;
	char why[128];

	if (S_ISDIR(mode)) {
		if (grow(&w->dirs, &w->capdirs, w->ndirs, sizeof(*w->dirs)) < 0)
			return -ENOMEM;
		w->dirs[w->ndirs++] = ino;
		return 0;
	}
	if (!S_ISREG(mode) || idx_inode_get(w->fs->ix, ino, &a) < 0 || !a.has_hash ||
	    (a.flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED)))
		return 0;
	if (idx_file_extents(w->fs->ix, ino, &r.ext, &r.n) < 0)
		return 0;
	int rc = validate_file(name, a.size, ext_read, &r, NULL, why, sizeof(why));

	free(r.ext);
	if (rc == -EBADMSG || rc == -EIO) {
		a.flags = (a.flags & ~(uint32_t)IDX_INODE_VALID) | IDX_INODE_MALFORMED;
		if (idx_begin(w->fs->ix) == 0 &&
		    (idx_inode_update(w->fs->ix, &a) < 0 || idx_commit(w->fs->ix) < 0))
			idx_rollback(w->fs->ix);
		w->unsound++;
		logf_("recovery: '%s' (inode %" PRIu64 ") is malformed: %s", name, ino, why);
	}
	return 0;
}

static void revalidate_tree(struct ckfs *fs, uint64_t dir)
{
	struct walk w = { .fs = fs };
	int rc = idx_dir_list(fs->ix, dir, 0, revalidate_entry, &w);

	for (size_t i = 0; rc >= 0 && i < w.ndirs; i++)
		rc = idx_dir_list(fs->ix, w.dirs[i], 0, revalidate_entry, &w);
	free(w.dirs);
}

/* ---- moving steps out of and back into the namespace ---- */

/* Add delta to directory dir's link count (subdirectories moved in or out); touch: also set
 * its mtime and ctime to now (its entries changed). In a transaction, fs->mu held. */
static int dir_links_add(struct ckfs *fs, uint64_t dir, int delta, bool touch)
{
	struct idx_inode d;
	int rc = idx_inode_get(fs->ix, dir, &d);

	if (rc < 0)
		return rc;
	d.nlink = (uint32_t)((int64_t)d.nlink + delta);
	if (touch)
		d.mtime_ns = d.ctime_ns = ckfs_now(fs);
	return idx_inode_update(fs->ix, &d);
}

/* Is s an InternEvo snapshot slot ("snapshot/K"), a step rewritten in place? */
static bool is_slot(const struct idx_step *s)
{
	return s->kind == LAYOUT_INTERNEVO && strchr(s->name, '/') != NULL;
}

/* The directory at path rel (relative to the root, '/'-separated), into *ret. -errno. */
static int lookup_path(struct ckfs *fs, const char *rel, uint64_t *ret)
{
	char comp[LAYOUT_NAME_MAX + 1];
	uint64_t cur = IDX_ROOT_INO;
	int rc;

	for (const char *p = rel; *p;) {
		size_t n = strcspn(p, "/");

		if (n > LAYOUT_NAME_MAX)
			return -ENAMETOOLONG;
		if (n > 0) {
			memcpy(comp, p, n);
			comp[n] = '\0';
			if ((rc = idx_dentry_lookup(fs->ix, cur, comp, &cur)) < 0)
				return rc;
		}
		p += n + (p[n] == '/');
	}
	*ret = cur;
	return 0;
}

/*
 * Where a step named `name` lives in the namespace: its parent directory and its entry name
 * there (borrowed from name). Top-level steps live in the root; a slot "snapshot/K" lives in
 * `snapshot/` as "K". Returns 0, or -errno when the parent is gone.
 */
static int step_home(struct ckfs *fs, const char *name, uint64_t *ret_parent,
		     const char **ret_leaf)
{
	const char *slash = strrchr(name, '/');
	char up[LAYOUT_PATH_MAX];
	int rc;

	if (!slash) {
		*ret_parent = IDX_ROOT_INO;
		*ret_leaf = name;
		return 0;
	}
	if ((size_t)(slash - name) >= sizeof(up))
		return -ENAMETOOLONG;
	memcpy(up, name, (size_t)(slash - name));
	up[slash - name] = '\0';
	if ((rc = lookup_path(fs, up, ret_parent)) == 0)
		*ret_leaf = slash + 1;
	return rc;
}

/* "NAME.ID" (id >= 0) or "NAME" for /.ckptfs/quarantine and /.ckptfs/retained, every '/' of
 * NAME as '-'. */
static void flat_name(const char *name, int64_t id, char *buf, size_t cap)
{
	if (id >= 0)
		snprintf(buf, cap, "%s.%" PRId64, name, id);
	else
		snprintf(buf, cap, "%s", name);
	for (char *p = buf; *p; p++)
		if (*p == '/')
			*p = '-';
}

static int move_to_quarantine(struct ckfs *fs, const struct idx_step *s)
{
	char qname[300];
	const char *leaf;
	uint64_t cur, home;
	int rc;

	if (!s->dir_ino || step_home(fs, s->name, &home, &leaf) < 0 ||
	    idx_dentry_lookup(fs->ix, home, leaf, &cur) < 0 || cur != s->dir_ino)
		return 0; /* not at its place in the namespace (already moved, or renamed) */
	flat_name(s->name, s->id, qname, sizeof(qname));
	rc = idx_dentry_move(fs->ix, home, leaf, fs->quarantine_ino, qname);
	if (rc == 0)
		rc = dir_links_add(fs, home, -1, true);
	if (rc == 0)
		rc = dir_links_add(fs, fs->quarantine_ino, 1, true);
	if (rc == 0)
		inval_queue(fs, home, leaf);
	return rc;
}

static int move_back(struct ckfs *fs, const struct idx_step *s)
{
	char qname[300];
	const char *leaf;
	uint64_t cur, home;
	int rc;

	if ((rc = step_home(fs, s->name, &home, &leaf)) < 0)
		return rc;
	if (idx_dentry_lookup(fs->ix, home, leaf, &cur) == 0)
		return -EEXIST; /* the trainer re-created the name: leave the old one set aside */
	flat_name(s->name, s->id, qname, sizeof(qname));
	rc = idx_dentry_move(fs->ix, fs->quarantine_ino, qname, home, leaf);
	if (rc == 0)
		rc = dir_links_add(fs, fs->quarantine_ino, -1, true);
	if (rc == 0)
		rc = dir_links_add(fs, home, 1, true);
	return rc;
}

/* ---- transitions ---- */

static int set_state(struct ckfs *fs, struct idx_step *s, int state, const char *note)
{
	int rc = idx_step_set_state(fs->ix, s->id, state, ckfs_now(fs), note);

	if (rc == 0) {
		logf_("step '%s' (%s): %s -> %s%s%s", s->name, layout_name(s->kind),
		      idx_step_state_name(s->state), idx_step_state_name(state), note ? ": " : "",
		      note ? note : "");
		s->state = state;
	}
	return rc;
}

static void retention(struct ckfs *fs, int kind);
static void mf1_on_file(struct ckfs *fs, const struct layout_match *m, pid_t pid);
static void slot_done(struct ckfs *fs, const struct idx_step *s);
static void slot_number(struct ckfs *fs, struct idx_step *s, const char *marker);

/*
 * Judge a quiet step (no write into it for STEP_SETTLE_NS): complete it when sealed, sound and
 * with no file open for writing; set it aside when its writers are gone (settled) and it cannot
 * complete. Runs its own transaction. Called by the reaper only, so a tracker written before
 * the other ranks finish (DeepSpeed) cannot complete a step whose last files are still coming.
 */
static bool marker_after_all_ranks(int kind);

/* Every "file_name" string anywhere in j names a regular file in directory dir? */
static bool names_exist(struct ckfs *fs, uint64_t dir, json_t *j, int depth, char *missing,
			size_t cap)
{
	const char *key;
	json_t *v;
	size_t i;

	if (depth > 32)
		return false;
	if (json_is_object(j)) {
		json_object_foreach(j, key, v) {
			if (strcmp(key, "file_name") == 0 && json_is_string(v)) {
				const char *n = json_string_value(v);
				struct idx_inode a;
				uint64_t ino;

				if (strchr(n, '/') || !strcmp(n, "..") ||
				    idx_dentry_lookup(fs->ix, dir, n, &ino) < 0 ||
				    idx_inode_get(fs->ix, ino, &a) < 0 || !S_ISREG(a.mode)) {
					snprintf(missing, cap, "%s", n);
					return false;
				}
			} else if (!names_exist(fs, dir, v, depth + 1, missing, cap)) {
				return false;
			}
		}
	} else if (json_is_array(j)) {
		json_array_foreach(j, i, v)
			if (!names_exist(fs, dir, v, depth + 1, missing, cap))
				return false;
	}
	return true;
}

/*
 * MindFormers 2.0's metadata.json lists the step's files (verify_ckpt_valid in mindformers
 * checkpoint.py checks that they exist): a step whose metadata.json names a file that is not
 * there is not complete. Returns true when there is nothing to check or every name exists.
 * DCP's .metadata is a pickle and is not read here.
 */
static bool step_metadata_ok(struct ckfs *fs, const struct idx_step *s, char *missing, size_t cap)
{
	struct ext_reader r = { .fs = fs };
	struct idx_inode a;
	json_t *j;
	uint64_t ino;
	char *buf;
	bool ok;

	if (s->kind != LAYOUT_MF2 || idx_dentry_lookup(fs->ix, s->dir_ino, "metadata.json", &ino) < 0 ||
	    idx_inode_get(fs->ix, ino, &a) < 0 || !S_ISREG(a.mode) || !a.has_hash ||
	    a.size > (64u << 20))
		return true;
	if (!(buf = malloc(a.size ? a.size : 1)))
		return true; /* cannot check now: the reaper tries again */
	if (idx_file_extents(fs->ix, ino, &r.ext, &r.n) < 0 ||
	    ext_read(&r, buf, a.size, 0) != (ssize_t)a.size) {
		free(r.ext);
		free(buf);
		snprintf(missing, cap, "metadata.json (unreadable)");
		return false;
	}
	free(r.ext);
	j = json_loadb(buf, a.size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	free(buf);
	if (!j)
		return true; /* malformed JSON is flagged by the structure check */
	ok = names_exist(fs, s->dir_ino, j, 0, missing, cap);
	json_decref(j);
	return ok;
}

/*
 * Layouts whose step directories hold the same file names at every step and whose marker may
 * precede other ranks' files (framework-io.md: DeepSpeed writes `latest` before its barrier, HF
 * rank 0 writes trainer_state.json without waiting for the other ranks' rng_state_R.pth). A rank
 * that has not yet created its file leaves no trace; the previous complete step's names are the
 * only record of what the step should hold.
 */
static bool names_repeat(int kind)
{
	return kind == LAYOUT_DEEPSPEED || kind == LAYOUT_HF;
}

struct prev_ctx {
	const struct idx_step *s;
	struct idx_step best;
	bool found;
};

static int prev_cb(const struct idx_step *o, void *arg)
{
	struct prev_ctx *c = arg;

	if (o->kind == c->s->kind && o->id != c->s->id && o->state == IDX_STEP_COMPLETE &&
	    o->dir_ino && o->step < c->s->step && (!c->found || o->step > c->best.step)) {
		c->best = *o;
		c->found = true;
	}
	return 0;
}

/*
 * The name a file of step `from` has at step `to`: every run of digits whose value is from's
 * number becomes to's (zero-padded to the run's width when the run starts with 0), so HF's nested
 * checkpoint-N/global_stepN/ directory matches (names_cb also tries the name unchanged). Returns
 * 0, or -ENAMETOOLONG.
 */
static int renumber(const char *name, int64_t from, int64_t to, char *buf, size_t cap)
{
	size_t o = 0;

	for (const char *p = name; *p;) {
		size_t n = strspn(p, "0123456789");
		int w;

		if (n == 0) {
			if (o + 1 >= cap)
				return -ENAMETOOLONG;
			buf[o++] = *p++;
			continue;
		}
		char digits[20]; /* INT64_MAX has 19 digits */
		bool match = false;

		if (n < sizeof(digits)) {
			memcpy(digits, p, n);
			digits[n] = '\0';
			match = strtoll(digits, NULL, 10) == from;
		}
		if (match)
			w = snprintf(buf + o, cap - o, "%0*" PRId64, p[0] == '0' ? (int)n : 0, to);
		else
			w = snprintf(buf + o, cap - o, "%.*s", (int)n, p);
		if (w < 0 || (size_t)w >= cap - o)
			return -ENAMETOOLONG;
		o += (size_t)w;
		p += n;
	}
	buf[o] = '\0';
	return 0;
}

struct names_walk {
	struct ckfs *fs;
	int64_t from, to;  /* step numbers of the previous step and of the one judged */
	uint64_t (*pairs)[2]; /* [previous step's directory, same directory in this step] */
	size_t n, cap;
	uint64_t cur;      /* this step's directory matching the one being listed */
	char *missing;
	size_t mcap;
};

static int names_cb(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct names_walk *w = arg;
	char want[NAME_MAX + 1];
	struct idx_inode a;
	uint64_t mine;

	(void)cookie;
	if (!S_ISDIR(mode) && !S_ISREG(mode))
		return 0;
	if (renumber(name, w->from, w->to, want, sizeof(want)) < 0)
		return 0; /* no name it could have here */
	/* a digit run equal to the step by chance (DeepSpeed's "bf16_" at step 16) is not the
	 * step number: the name unchanged counts too */
	if (idx_dentry_lookup(w->fs->ix, w->cur, want, &mine) < 0 && strcmp(want, name) != 0 &&
	    idx_dentry_lookup(w->fs->ix, w->cur, name, &mine) == 0)
		snprintf(want, sizeof(want), "%s", name);
	if (idx_dentry_lookup(w->fs->ix, w->cur, want, &mine) < 0 ||
	    idx_inode_get(w->fs->ix, mine, &a) < 0 || (S_ISDIR(mode) != S_ISDIR(a.mode))) {
		snprintf(w->missing, w->mcap, "%s", want);
		return 1;
	}
	if (S_ISDIR(mode)) {
		if (grow(&w->pairs, &w->cap, w->n, sizeof(*w->pairs)) < 0)
			return -ENOMEM;
		w->pairs[w->n][0] = ino;
		w->pairs[w->n][1] = mine;
		w->n++;
	}
	return 0;
}

/*
 * Does step s hold every file and directory name of the newest complete step of its layout
 * before it (names renumbered)? Only for names_repeat layouts; a world size that shrank on
 * resume makes the check fail until a newer step starts (newer_step_started).
 * @missing: receives the first name not found, NUL-terminated, truncated to cap.
 * Returns 1 (all there), 2 (no previous complete step), 0 (one missing), or -ENOMEM / -EIO.
 */
static int has_previous_names(struct ckfs *fs, const struct idx_step *s, char *missing,
			      size_t cap)
{
	struct prev_ctx pc = { .s = s };
	struct names_walk w = { .fs = fs, .missing = missing, .mcap = cap };
	int rc;

	if ((rc = idx_step_foreach(fs->ix, prev_cb, &pc)) < 0)
		return rc;
	if (!pc.found)
		return 2;
	w.from = pc.best.step;
	w.to = s->step;
	w.cur = s->dir_ino;
	rc = idx_dir_list(fs->ix, pc.best.dir_ino, 0, names_cb, &w);
	for (size_t i = 0; rc == 0 && i < w.n; i++) { /* w.pairs grows as we go */
		w.cur = w.pairs[i][1];
		rc = idx_dir_list(fs->ix, w.pairs[i][0], 0, names_cb, &w);
	}
	free(w.pairs);
	if (rc == 1) {
		size_t l = strlen(missing);

		snprintf(missing + l, cap - l, " (in step %" PRId64 ")", pc.best.step);
		return 0;
	}
	return rc < 0 ? rc : 1;
}

struct newer_ctx {
	const struct idx_step *s;
	bool found;
};

static int newer_cb(const struct idx_step *o, void *arg)
{
	struct newer_ctx *c = arg;

	if (o->kind == c->s->kind && o->id != c->s->id && o->step > c->s->step &&
	    o->created_ns > c->s->sealed_ns)
		c->found = true;
	return 0;
}

/*
 * Did the trainer start a newer step of the same layout after s was sealed? DeepSpeed's barrier
 * follows `latest`, and every trainer finishes a save on all ranks before training on to the
 * next one, so a newer step started means every rank was done with s.
 */
static bool newer_step_started(struct ckfs *fs, const struct idx_step *s)
{
	struct newer_ctx c = { .s = s };

	return s->sealed_ns > 0 && idx_step_foreach(fs->ix, newer_cb, &c) == 0 && c.found;
}

/*
 * Judge step id. settled: its writers are gone; recovering: the daemon that saw it written is
 * gone; quiet: nothing was written into it for STEP_SETTLE_NS, or its writers are gone (the
 * reaper, steps_settle_now). A DeepSpeed or HF step (names_repeat) with a previous complete step
 * completes as soon as it holds all that step's names, closed and durable; the first one waits
 * until it is quiet, since nothing says which files it should hold.
 */
static void evaluate(struct ckfs *fs, int64_t id, bool settled, bool recovering, bool quiet)
{
	struct idx_step s;
	struct walk w;
	struct store_hash dg;
	bool unprovable = false;
	int rc;

	if (idx_step_get(fs->ix, id, &s) < 0)
		return;
	if (s.state != IDX_STEP_WRITING && s.state != IDX_STEP_SEALED)
		return;
	if (!s.dir_ino)
		return;
	if (recovering)
		/* the daemon that saw this step being written is gone: trust no flag written
		 * after the content, re-check every file from the store */
		revalidate_tree(fs, s.dir_ino);
	if (walk_tree(fs, s.dir_ino, &w, false) < 0)
		return;
	store_hasher_digest(w.digest, &dg);
	store_hasher_free(w.digest);

	char absent[NAME_MAX + 64] = "";
	int have = 1; /* 1: every name of the previous complete step is here; 2: there is none */

	if (names_repeat(s.kind) && s.state == IDX_STEP_SEALED && w.open == 0 &&
	    !newer_step_started(fs, &s) &&
	    (have = has_previous_names(fs, &s, absent, sizeof(absent))) < 0)
		return; /* cannot tell now: the reaper tries again */
	/* after a crash, a step whose marker may precede other ranks' files (DeepSpeed's `latest`,
	 * HF's trainer_state.json) has all its files only if it holds every name of the previous
	 * complete step, or a newer step was started */
	unprovable = recovering && fs->crash_recovery && !marker_after_all_ranks(s.kind) &&
		     !newer_step_started(fs, &s) && have != 1;
	if (have == 2 && !quiet)
		have = 0; /* the first step of its layout: complete once quiet */
	if (idx_begin(fs->ix) < 0)
		return;
	rc = idx_step_set_figures(fs->ix, id, w.files, w.bytes, w.stored, dg.b);
	char missing[256] = "";
	bool listed_ok = true;

	if (s.state == IDX_STEP_SEALED && w.open == 0 && w.uncommitted == 0 && w.unsound == 0 &&
	    w.files > 0 && !unprovable && !step_metadata_ok(fs, &s, missing, sizeof(missing))) {
		listed_ok = false;
		w.unsound++; /* judged like a malformed file */
		if (settled)
			logf_("step '%s': metadata.json names '%s', which is not in the step",
			      s.name, missing);
	}
	if (rc == 0 && s.state == IDX_STEP_SEALED && w.open == 0 && w.uncommitted == 0 &&
	    w.unsound == 0 && w.files > 0 && !unprovable && listed_ok && have) {
		rc = set_state(fs, &s, IDX_STEP_COMPLETE, NULL);
	} else if (rc == 0 && settled && w.open == 0) {
		char note[128];

		if (unprovable && absent[0])
			snprintf(note, sizeof(note), "the daemon stopped before every rank was known "
				 "to be done: '%.40s' is missing", absent);
		else if (unprovable)
			snprintf(note, sizeof(note), "the daemon stopped before every rank was known "
				 "to be done (%s)", have == 2 ? "no earlier complete step to compare with" :
				 "files still open");
		else if (!have && absent[0] && w.unsound == 0 && w.uncommitted == 0)
			snprintf(note, sizeof(note), "no writer left and '%.60s' never written: a "
				 "rank did not save", absent);
		else if (s.state == IDX_STEP_WRITING)
			snprintf(note, sizeof(note), "abandoned: never sealed, no writer left");
		else
			snprintf(note, sizeof(note), "%u torn or malformed, %u never closed of %" PRIu64
				 " files", w.unsound, w.uncommitted, w.files);
		if (w.files == 0 && s.state == IDX_STEP_WRITING && !unprovable)
			snprintf(note, sizeof(note), "abandoned empty");
		rc = set_state(fs, &s, IDX_STEP_INCOMPLETE, note);
		if (rc == 0)
			rc = move_to_quarantine(fs, &s);
	}
	if (rc < 0) {
		idx_rollback(fs->ix);
		return;
	}
	if (s.state == IDX_STEP_COMPLETE)
		ckpt_fault("step-complete-txn");
	if (idx_commit(fs->ix) < 0)
		return;
	if (s.state == IDX_STEP_COMPLETE) {
		rt_drop(fs, id);
		if (is_slot(&s))
			slot_done(fs, &s);
		retention(fs, s.kind);
	} else if (s.state == IDX_STEP_INCOMPLETE) {
		rt_drop(fs, id);
		if (is_slot(&s))
			slot_done(fs, &s);
	}
}

/* ---- retention ---- */

struct ret_ctx {
	struct ckfs *fs;
	int kind;
	int64_t *ids;
	size_t n, cap;
};

static int collect_complete(const struct idx_step *s, void *arg)
{
	struct ret_ctx *c = arg;

	if (s->kind != c->kind || s->state != IDX_STEP_COMPLETE || is_slot(s))
		return 0; /* a slot's old versions go when its new one completes (slot_done) */
	if (grow(&c->ids, &c->cap, c->n, sizeof(*c->ids)) < 0)
		return -ENOMEM;
	c->ids[c->n++] = s->id;
	return 0;
}

/* Remove the whole tree under dir (entries only; dir's own dentry is the caller's). */
static int tree_remove(struct ckfs *fs, uint64_t dir, struct fs_freed *fr, int depth);

struct rm_ctx {
	char **names;
	uint64_t *inos;
	uint32_t *modes;
	size_t n, cap;
};

static int rm_collect(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct rm_ctx *c = arg;

	if (c->n == c->cap) {
		size_t nc = c->cap ? 2 * c->cap : 16;
		char **a = realloc(c->names, nc * sizeof(*a));

		if (!a)
			return -ENOMEM;
		c->names = a;
		uint64_t *b = realloc(c->inos, nc * sizeof(*b));

		if (!b)
			return -ENOMEM;
		c->inos = b;
		uint32_t *m = realloc(c->modes, nc * sizeof(*m));

		if (!m)
			return -ENOMEM;
		c->modes = m;
		c->cap = nc;
	}
	if (!(c->names[c->n] = strdup(name)))
		return -ENOMEM;
	c->inos[c->n] = ino;
	c->modes[c->n] = mode;
	c->n++;
	return 0;
}

static int tree_remove(struct ckfs *fs, uint64_t dir, struct fs_freed *fr, int depth)
{
	struct rm_ctx c = { 0 };
	int rc;

	if (depth > 256)
		return -ELOOP;
	rc = idx_dir_list(fs->ix, dir, 0, rm_collect, &c);
	for (size_t i = 0; rc >= 0 && i < c.n; i++) {
		if (S_ISDIR(c.modes[i]) && (rc = tree_remove(fs, c.inos[i], fr, depth + 1)) < 0)
			break;
		rc = idx_dentry_remove(fs->ix, dir, c.names[i]);
		if (rc == 0)
			rc = fs_drop_link(fs, c.inos[i], ckfs_now(fs), fr);
	}
	for (size_t i = 0; i < c.n; i++)
		free(c.names[i]);
	free(c.names);
	free(c.inos);
	free(c.modes);
	return rc < 0 ? rc : 0;
}

/* Remove step s's directory tree from wherever it is (the namespace, quarantine, retained);
 * its dir_ino becomes 0. Chunks no longer referenced are added to fr. In a transaction. */
static int drop_tree(struct ckfs *fs, struct idx_step *s, struct fs_freed *fr)
{
	uint64_t parent, cur;
	char name[300];
	int rc = 0;

	if (s->dir_ino && idx_dentry_parent(fs->ix, s->dir_ino, &parent, name, sizeof(name)) == 0 &&
	    idx_dentry_lookup(fs->ix, parent, name, &cur) == 0 && cur == s->dir_ino) {
		rc = tree_remove(fs, s->dir_ino, fr, 0);
		if (rc == 0)
			rc = idx_dentry_remove(fs->ix, parent, name);
		if (rc == 0)
			inval_queue(fs, parent, name);
		if (rc == 0)
			rc = fs_drop_link(fs, s->dir_ino, ckfs_now(fs), fr);
		if (rc == 0)
			rc = dir_links_add(fs, parent, -1, true);
	}
	if (rc == 0)
		rc = idx_step_set_dir(fs->ix, s->id, 0);
	if (rc == 0)
		s->dir_ino = 0;
	return rc;
}

static int mf1_drop_files(struct ckfs *fs, const struct idx_step *s, struct fs_freed *fr);

/* Prune one step: its tree leaves the namespace wherever it is, its state becomes pruned. */
static int prune(struct ckfs *fs, struct idx_step *s, struct fs_freed *fr)
{
	int rc = drop_tree(fs, s, fr);

	if (rc == 0 && s->kind == LAYOUT_MF1)
		rc = mf1_drop_files(fs, s, fr); /* its rank files, from the rank directories */

	if (rc == 0)
		rc = set_state(fs, s, IDX_STEP_PRUNED, "retention");
	return rc;
}

/* Is step s kept only in /.ckptfs/retained (the trainer deleted it)? */
static bool is_retained(struct ckfs *fs, const struct idx_step *s)
{
	uint64_t parent;

	return s->dir_ino && idx_dentry_parent(fs->ix, s->dir_ino, &parent, NULL, 0) == 0 &&
	       parent == fs->retained_ino;
}

static bool mf1_key(const struct idx_step *s, int64_t *epoch, int64_t *step);

/* Sort MF1 step ids by (epoch, step), ascending (insertion sort: a few hundred at most). */
static void mf1_order(struct ckfs *fs, int64_t *ids, size_t n)
{
	int64_t (*key)[3] = calloc(n ? n : 1, sizeof(*key));
	struct idx_step s;

	if (!key)
		return;
	for (size_t i = 0; i < n; i++) {
		key[i][0] = key[i][1] = -1;
		key[i][2] = ids[i];
		if (idx_step_get(fs->ix, ids[i], &s) == 0)
			mf1_key(&s, &key[i][0], &key[i][1]);
	}
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && (key[j - 1][0] > key[j][0] ||
					     (key[j - 1][0] == key[j][0] && key[j - 1][1] > key[j][1]));
		     j--) {
			int64_t t[3];

			memcpy(t, key[j], sizeof(t));
			memcpy(key[j], key[j - 1], sizeof(t));
			memcpy(key[j - 1], t, sizeof(t));
		}
	for (size_t i = 0; i < n; i++)
		ids[i] = key[i][2];
	free(key);
}

static void retention(struct ckfs *fs, int kind)
{
	struct ret_ctx c = { .fs = fs, .kind = kind };
	struct fs_freed fr = { 0 };
	unsigned kept = 0;
	bool ok = true;

	if (idx_step_foreach(fs->ix, collect_complete, &c) < 0)
		goto out;
	/* steps the trainer deleted were kept only until a newer step is complete: now */
	if (c.n > 1 && idx_begin(fs->ix) == 0) {
		for (size_t i = 0; i + 1 < c.n && ok; i++) {
			struct idx_step s;

			if (idx_step_get(fs->ix, c.ids[i], &s) == 0 && !s.pinned && is_retained(fs, &s))
				ok = prune(fs, &s, &fr) == 0;
		}
		ok = ok && idx_commit(fs->ix) == 0;
		if (!ok)
			idx_rollback(fs->ix);
		fs_release_finish(fs, &fr, ok);
		free(c.ids);
		c.ids = NULL;
		c.n = c.cap = 0;
		if (!ok || idx_step_foreach(fs->ix, collect_complete, &c) < 0)
			goto out;
	}
	if (fs->keep_max == 0)
		goto out;
	if (kind == LAYOUT_MF1)
		mf1_order(fs, c.ids, c.n); /* its step number restarts every epoch */
	/* ids come ordered by step number ascending: keep from the newest end */
	if (idx_begin(fs->ix) < 0)
		goto out;
	for (size_t i = c.n; i-- > 0 && ok;) {
		struct idx_step s;

		if (idx_step_get(fs->ix, c.ids[i], &s) < 0)
			continue;
		if (s.pinned || (fs->keep_every && s.step >= 0 && s.step % fs->keep_every == 0))
			continue; /* kept, and not counted */
		if (kept < fs->keep_max) {
			kept++; /* keep_max >= 1, so the newest unpinned complete step is kept */
			continue;
		}
		ok = prune(fs, &s, &fr) == 0;
		if (ok)
			ckpt_fault("retention-txn");
	}
	ok = ok && idx_commit(fs->ix) == 0;
	if (!ok)
		idx_rollback(fs->ix);
	if (ok && fr.n)
		ckpt_fault("retention-after");
	fs_release_finish(fs, &fr, ok);
out:
	free(c.ids);
}

/* ---- step rows from names ---- */

struct older_ctx {
	int kind;
	int64_t step;
	int64_t ids[16];
	size_t n;
};

static int older_sealed_cb(const struct idx_step *o, void *arg)
{
	struct older_ctx *c = arg;

	if (o->kind == c->kind && o->state == IDX_STEP_SEALED && o->step < c->step &&
	    c->n < sizeof(c->ids) / sizeof(c->ids[0]))
		c->ids[c->n++] = o->id;
	return 0;
}

/*
 * A DeepSpeed or HF step `step` was just started: every rank is done with the sealed steps
 * before it (newer_step_started), which may complete now rather than once quiet, so the new
 * step has a complete one to be compared with when its own marker comes.
 */
static void judge_older_sealed(struct ckfs *fs, int kind, int64_t step)
{
	struct older_ctx c = { .kind = kind, .step = step };

	if (idx_step_foreach(fs->ix, older_sealed_cb, &c) < 0)
		return;
	for (size_t i = 0; i < c.n; i++)
		evaluate(fs, c.ids[i], false, false, false);
}

/* The step whose directory is rel[0, m->step_prefix_len) (creating its row if needed). */
static int step_of_path(struct ckfs *fs, const char *rel, const struct layout_match *m,
			struct idx_step *ret)
{
	char dname[LAYOUT_PATH_MAX];
	uint64_t dir;
	int64_t id;
	int rc;

	if (m->step_prefix_len == 0 || m->step_prefix_len >= sizeof(dname))
		return -ENOENT;
	memcpy(dname, rel, m->step_prefix_len);
	dname[m->step_prefix_len] = 0;
	if ((rc = lookup_path(fs, dname, &dir)) < 0)
		return rc;
	if (idx_step_by_dir(fs->ix, dir, ret) == 0)
		return 0;
	if ((rc = idx_begin(fs->ix)) < 0)
		return rc;
	/* a slot's number is its newest sealed version's (slot_number); 0 until sealed */
	rc = idx_step_create(fs->ix, m->kind, dname, (m->flags & LAYOUT_F_SLOT) ? 0 : m->step,
			     dir, ckfs_now(fs), &id);
	if (rc == 0)
		rc = idx_commit(fs->ix);
	else
		idx_rollback(fs->ix);
	if (rc < 0)
		return rc;
	if (names_repeat(m->kind))
		judge_older_sealed(fs, m->kind, m->step);
	return idx_step_get(fs->ix, id, ret);
}

/*
 * Does the layout write its commit marker only after every rank finished its files? Then a
 * sealed step whose files are all closed and sound is complete at once. framework-io.md:
 * Megatron and MindFormers 2.0 write the tracker after a barrier; the DCP coordinator renames
 * .metadata after gathering all ranks; InternEvo's rank 0 writes N.step last; Orbax renames the
 * step directory after all writes. DeepSpeed writes `latest` before its barrier and HF rank 0
 * writes trainer_state.json without waiting for other ranks' files: those wait for the step to
 * be quiet (STEP_SETTLE_NS) in the reaper.
 */
static bool marker_after_all_ranks(int kind)
{
	switch (kind) {
	case LAYOUT_MEGATRON:
	case LAYOUT_MF2:
	case LAYOUT_DCP:
	case LAYOUT_INTERNEVO:
	case LAYOUT_ORBAX:
		return true;
	default:
		return false;
	}
}

static void seal(struct ckfs *fs, struct idx_step *s, const char *why)
{
	if (s->state == IDX_STEP_INCOMPLETE) {
		/* a marker for a step set aside: bring it back if its files are sound */
		struct walk w;

		if (walk_tree(fs, s->dir_ino, &w, false) < 0)
			return;
		store_hasher_free(w.digest);
		if (w.unsound || w.uncommitted || w.files == 0)
			return;
		if (idx_begin(fs->ix) < 0)
			return;
		if (move_back(fs, s) < 0 || set_state(fs, s, IDX_STEP_SEALED, why) < 0 ||
		    idx_commit(fs->ix) < 0) {
			idx_rollback(fs->ix);
			return;
		}
	} else if (s->state == IDX_STEP_WRITING) {
		if (idx_begin(fs->ix) < 0)
			return;
		if (set_state(fs, s, IDX_STEP_SEALED, why) < 0 || idx_commit(fs->ix) < 0) {
			idx_rollback(fs->ix);
			return;
		}
	}
	if (marker_after_all_ranks(s->kind)) {
		evaluate(fs, s->id, false, false, false); /* every rank was done before the marker */
	} else {
		rt_note(fs, s->id, 0); /* else the reaper judges it once it is quiet */
		if (names_repeat(s->kind))
			evaluate(fs, s->id, false, false, false); /* all the last step's names? */
	}
}

/* ---- hooks ---- */

/*
 * Orbax on a local filesystem commits a step by renaming `<step>.orbax-checkpoint-tmp` to
 * `<step>`, with no commit file (orbax atomicity.py AtomicRenameTemporaryPath.finalize;
 * tests/traces/orbax.md). Directory ino was just renamed to root/name: if it is an Orbax step
 * still under its tmp name, the step takes the final name and is sealed. Returns whether it was.
 */
static bool orbax_renamed(struct ckfs *fs, uint64_t ino, const char *name, pid_t pid)
{
	struct layout_match was;
	struct idx_step s;

	if (idx_step_by_dir(fs->ix, ino, &s) < 0 || s.kind != LAYOUT_ORBAX ||
	    layout_classify(s.name, fs->layout, &was) < 0 || !(was.flags & LAYOUT_F_TMP))
		return false;
	if (idx_begin(fs->ix) < 0)
		return false;
	if (idx_step_set_name(fs->ix, s.id, name) < 0 || idx_commit(fs->ix) < 0) {
		idx_rollback(fs->ix);
		return false;
	}
	snprintf(s.name, sizeof(s.name), "%s", name);
	rt_note(fs, s.id, pid);
	seal(fs, &s, "renamed from its tmp name");
	return true;
}

void steps_on_name(struct ckfs *fs, uint64_t parent, const char *name, uint64_t ino, pid_t pid,
		   bool renamed)
{
	char rel[LAYOUT_PATH_MAX];
	struct layout_match m;
	struct idx_step s;

	if (fs->layout < 0)
		return;
	if (parent == IDX_ROOT_INO) {
		if (layout_classify(name, fs->layout, &m) < 0 || m.role != ROLE_STEP_DIR ||
		    (m.flags & LAYOUT_F_TMP) || m.step < 0)
			return;
		if (renamed && orbax_renamed(fs, ino, name, pid))
			return;
		if (step_of_path(fs, name, &m, &s) == 0)
			rt_note(fs, s.id, pid);
		return;
	}
	if (rel_path(fs, ino, rel, sizeof(rel)) < 0 || layout_classify(rel, fs->layout, &m) < 0)
		return;
	if ((m.flags & LAYOUT_F_SLOT) && m.role == ROLE_STEP_DIR) {
		if (step_of_path(fs, rel, &m, &s) == 0)
			rt_note(fs, s.id, pid);
		return;
	}
	if (m.kind == LAYOUT_MF1 && m.role == ROLE_STEP_FILE) {
		if (renamed && !(m.flags & LAYOUT_F_TMP))
			mf1_on_file(fs, &m, pid);
		return;
	}
	if ((m.role != ROLE_STEP_FILE && m.role != ROLE_MARKER) || m.step_prefix_len == 0 ||
	    step_of_path(fs, rel, &m, &s) < 0)
		return;
	rt_note(fs, s.id, pid);
	/* a marker renamed into place (DCP .metadata.tmp -> .metadata) seals its step */
	if (renamed && m.role == ROLE_MARKER)
		seal(fs, &s, "marker");
}

struct vread {
	struct ckfs *fs;
	struct oinode *oi;
};

static ssize_t vread_fn(void *arg, void *buf, size_t len, uint64_t off)
{
	struct vread *v = arg;

	return oi_read(v->fs, v->oi, buf, len, off);
}

bool steps_is_marker(struct ckfs *fs, uint64_t ino)
{
	char rel[LAYOUT_PATH_MAX];
	struct layout_match m;
	bool r;

	if (fs->layout < 0)
		return false;
	pthread_mutex_lock(&fs->mu);
	r = rel_path(fs, ino, rel, sizeof(rel)) == 0 &&
	    layout_classify(rel, fs->layout, &m) == 0 && m.role == ROLE_MARKER;
	pthread_mutex_unlock(&fs->mu);
	return r;
}

void steps_on_commit(struct ckfs *fs, struct oinode *oi, pid_t pid, bool torn)
{
	char rel[LAYOUT_PATH_MAX], why[256] = "";
	struct layout_match m;
	struct idx_step s;
	struct idx_inode a;
	uint32_t flags = 0;
	int rc;

	/* fs->mu NOT held on entry */
	if (fs->layout < 0)
		return;
	pthread_mutex_lock(&fs->mu);
	rc = rel_path(fs, oi->ino, rel, sizeof(rel));
	if (rc == 0)
		rc = layout_classify(rel, fs->layout, &m);
	bool mf1 = rc == 0 && m.kind == LAYOUT_MF1 && m.role == ROLE_STEP_FILE;
	bool in_step = rc == 0 && (m.role == ROLE_STEP_FILE || m.role == ROLE_MARKER) &&
		       (m.step_prefix_len > 0 || mf1);
	uint64_t size = 0;

	if (in_step && idx_inode_get(fs->ix, oi->ino, &a) == 0)
		size = a.size;
	else
		in_step = false;
	pthread_mutex_unlock(&fs->mu);
	if (!in_step)
		return;

	/* structure check without fs->mu (it reads the file) */
	if (torn) {
		flags |= IDX_INODE_TORN;
	} else {
		struct vread v = { fs, oi };
		const char *base = strrchr(rel, '/');

		rc = validate_file(base ? base + 1 : rel, size, vread_fn, &v, NULL, why,
				   sizeof(why));
		if (rc == 1)
			flags |= IDX_INODE_VALID;
		else if (rc == -EBADMSG)
			flags |= IDX_INODE_MALFORMED;
	}

	pthread_mutex_lock(&fs->mu);
	if (idx_inode_get(fs->ix, oi->ino, &a) == 0 && a.flags != flags) {
		a.flags = flags;
		if (idx_begin(fs->ix) == 0 &&
		    (idx_inode_update(fs->ix, &a) < 0 || idx_commit(fs->ix) < 0))
			idx_rollback(fs->ix);
	}
	if (flags & IDX_INODE_TORN)
		logf_("'%s' was closed by a dying process (pid %d): torn", rel, (int)pid);
	else if (flags & IDX_INODE_MALFORMED)
		logf_("'%s' is malformed: %s", rel, why);
	if (mf1 && !(m.flags & LAYOUT_F_TMP)) {
		mf1_on_file(fs, &m, pid);
	} else if (!mf1 && step_of_path(fs, rel, &m, &s) == 0) {
		rt_note(fs, s.id, pid);
		if (m.role == ROLE_MARKER && !(flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED))) {
			if (m.flags & LAYOUT_F_SLOT)
				slot_number(fs, &s, strrchr(rel, '/') + 1);
			seal(fs, &s, "marker");
		}
		else if (s.state == IDX_STEP_SEALED &&
			 (marker_after_all_ranks(s.kind) || names_repeat(s.kind)))
			/* a file closed before the marker and committed after it (commit.c), or
			 * the last rank's file after DeepSpeed's `latest`: the step may be complete
			 * now, without waiting for the reaper */
			evaluate(fs, s.id, false, false, false);
		struct step_rt *r;

		if ((flags & IDX_INODE_TORN) && (r = rt_get(fs, s.id, false))) {
			/* a killed job: judge the step as soon as its writers are gone, without the
			 * settle time, so that a resumer scanning for the newest directory (Hugging
			 * Face, torchtitan) restarted at once does not find it */
			r->torn = true;
			pthread_cond_signal(&fs->reaper_cv);
		}
	}
	pthread_mutex_unlock(&fs->mu);
}

/* ---- the trainer deleting the newest complete step (MindFormers 2.0 with keep=1) ---- */

/* Copy the tree under src into the new directory dst: inodes are new, chunks are shared. */
static int tree_clone(struct ckfs *fs, uint64_t src, uint64_t dst, int depth)
{
	struct rm_ctx c = { 0 };
	int rc;

	if (depth > 256)
		return -ELOOP;
	rc = idx_dir_list(fs->ix, src, 0, rm_collect, &c);
	for (size_t i = 0; rc >= 0 && i < c.n; i++) {
		struct idx_inode a;
		uint64_t ino;

		if ((rc = idx_inode_get(fs->ix, c.inos[i], &a)) < 0)
			break;
		a.nlink = S_ISDIR(a.mode) ? 2 : 1;
		if ((rc = idx_inode_create(fs->ix, &a, &ino)) < 0 ||
		    (rc = idx_dentry_add(fs->ix, dst, c.names[i], ino)) < 0)
			break;
		if (S_ISDIR(a.mode)) {
			if ((rc = dir_links_add(fs, dst, 1, false)) < 0 ||
			    (rc = tree_clone(fs, c.inos[i], ino, depth + 1)) < 0)
				break;
		} else if (S_ISLNK(a.mode)) {
			char target[LAYOUT_PATH_MAX + 1];

			if ((rc = idx_symlink_get(fs->ix, c.inos[i], target, sizeof(target))) < 0 ||
			    (rc = idx_symlink_set(fs->ix, ino, target)) < 0)
				break;
		} else if (S_ISREG(a.mode)) {
			struct idx_extent *ext = NULL;
			size_t n = 0;

			if ((rc = idx_file_extents(fs->ix, c.inos[i], &ext, &n)) < 0)
				break;
			rc = idx_file_set_content(fs->ix, ino, ext, n, a.size,
						  a.has_hash ? a.hash : NULL, a.mtime_ns, NULL, NULL);
			free(ext);
			if (rc < 0)
				break;
			a.ino = ino;
			rc = idx_inode_update(fs->ix, &a); /* keep the flags and times */
			if (rc < 0)
				break;
		}
	}
	for (size_t i = 0; i < c.n; i++)
		free(c.names[i]);
	free(c.names);
	free(c.inos);
	free(c.modes);
	return rc < 0 ? rc : 0;
}

/*
 * Keep complete step s: a copy of its tree (new inodes, the same chunks) as
 * /.ckptfs/retained/NAME.ID, which becomes the step's directory; the tree at s->dir_ino (its
 * attributes in *dir_attr) is left to the trainer. qname receives NAME.ID. In a transaction.
 * Returns 0 or -errno.
 */
static int keep_copy(struct ckfs *fs, const struct idx_step *s, struct idx_inode *dir_attr,
		     char *qname, size_t cap)
{
	uint64_t clone;
	int rc;

	flat_name(s->name, s->id, qname, cap);
	dir_attr->nlink = 2;
	rc = idx_inode_create(fs->ix, dir_attr, &clone);
	if (rc == 0)
		rc = idx_dentry_add(fs->ix, fs->retained_ino, qname, clone);
	if (rc == 0)
		rc = dir_links_add(fs, fs->retained_ino, 1, false);
	if (rc == 0)
		rc = tree_clone(fs, s->dir_ino, clone, 0);
	if (rc == 0)
		rc = idx_step_set_dir(fs->ix, s->id, clone);
	return rc;
}

static void mf1_before_remove(struct ckfs *fs, int rank, const char *name);

void steps_before_remove(struct ckfs *fs, uint64_t parent, const char *name)
{
	char rel[LAYOUT_PATH_MAX], top[LAYOUT_NAME_MAX + 1], qname[300];
	struct idx_step s, newest;
	struct idx_inode a;
	uint64_t dir;
	const char *slash;
	int rank;

	if (fs->layout < 0)
		return;
	if (parent != IDX_ROOT_INO && (rank = steps_rank_dir(fs, parent)) >= 0) {
		mf1_before_remove(fs, rank, name);
		return;
	}
	if (parent == IDX_ROOT_INO) {
		snprintf(top, sizeof(top), "%s", name);
	} else {
		if (rel_path(fs, parent, rel, sizeof(rel)) < 0)
			return;
		slash = strchr(rel, '/');
		snprintf(top, sizeof(top), "%.*s", slash ? (int)(slash - rel) : (int)strlen(rel),
			 rel);
	}
	if (idx_dentry_lookup(fs->ix, IDX_ROOT_INO, top, &dir) < 0 ||
	    idx_step_by_dir(fs->ix, dir, &s) < 0 || s.state != IDX_STEP_COMPLETE ||
	    idx_step_newest(fs->ix, 1u << s.kind, IDX_STEP_COMPLETE, &newest) < 0 ||
	    newest.id != s.id || idx_inode_get(fs->ix, dir, &a) < 0)
		return;
	/* keep a copy (same chunks) until a newer step is complete */
	if (idx_begin(fs->ix) < 0)
		return;
	int rc = keep_copy(fs, &s, &a, qname, sizeof(qname));

	if (rc == 0)
		rc = idx_commit(fs->ix);
	else
		idx_rollback(fs->ix);
	if (rc == 0)
		logf_("the trainer deletes '%s', the newest complete step: kept as "
		      "'.ckptfs/%s/%s' until a newer step is complete", s.name, RETAINED_NAME, qname);
}

/*
 * Whether directory ino, at the step's name, is what the trainer left of the step when its
 * deletion was cut short (steps_before_remove moved the step to its clone): no step row owns
 * it, or only one that is over (incomplete, corrupt, pruned). A step being written or sealed
 * under that name (the trainer saving the same step again) is never taken away.
 */
static bool is_leftover(struct ckfs *fs, uint64_t ino)
{
	struct idx_step o;

	if (idx_step_by_dir(fs->ix, ino, &o) < 0)
		return true;
	return o.state != IDX_STEP_WRITING && o.state != IDX_STEP_SEALED &&
	       o.state != IDX_STEP_COMPLETE;
}

/*
 * Put a retained step back at its name, so a resuming trainer finds what its tracker names. A
 * deletion cut short (the trainer killed after removing some of the step's files) leaves part of
 * the step at the name: that part is set aside in /.ckptfs/quarantine as NAME.partial-ID (its
 * files are all in the retained copy), and the whole step takes its place.
 */
static void restore(struct ckfs *fs, struct idx_step *s)
{
	uint64_t parent, cur;
	char name[300], pname[320];
	bool partial;

	if (s->kind == LAYOUT_MF1)
		return; /* per-rank files, no directory: mf1_restore, from a meta.json read */
	const char *leaf;
	uint64_t home;

	if (!s->dir_ino || idx_dentry_parent(fs->ix, s->dir_ino, &parent, name, sizeof(name)) < 0 ||
	    parent != fs->retained_ino || step_home(fs, s->name, &home, &leaf) < 0)
		return;
	partial = idx_dentry_lookup(fs->ix, home, leaf, &cur) == 0;
	if (partial && !is_leftover(fs, cur))
		return;
	if (idx_begin(fs->ix) < 0)
		return;
	int rc = 0;

	if (partial) {
		/* the part leaves its home for quarantine; the step takes its place below */
		char flat[300];

		flat_name(s->name, -1, flat, sizeof(flat));
		snprintf(pname, sizeof(pname), "%s.partial-%" PRId64, flat, s->id);
		rc = idx_dentry_move(fs->ix, home, leaf, fs->quarantine_ino, pname);
		if (rc == 0)
			rc = dir_links_add(fs, fs->quarantine_ino, 1, true);
	}
	if (rc == 0)
		rc = idx_dentry_move(fs->ix, fs->retained_ino, name, home, leaf);
	if (rc == 0)
		rc = dir_links_add(fs, fs->retained_ino, -1, false);
	if (rc == 0)
		rc = dir_links_add(fs, home, partial ? 0 : 1, true);
	if (rc == 0 && idx_commit(fs->ix) == 0) {
		if (partial) {
			inval_queue(fs, home, leaf); /* the kernel has the part cached */
			logf_("restored '%s' (the newest complete step) for a resuming reader; what "
			      "the trainer had not yet deleted of it is in '.ckptfs/quarantine/%s'",
			      s->name, pname);
		} else {
			logf_("restored '%s' (the newest complete step) for a resuming reader",
			      s->name);
		}
	} else if (rc < 0) {
		idx_rollback(fs->ix);
	}
}

/* ---- InternEvo snapshot slots: a step directory rewritten in place ---- */

/*
 * InternEvo's snapshot saves rewrite `snapshot/K/` in place and then add `M.step` beside the
 * markers of the steps the slot held before (tests/traces/internevo.md). Its resume loads the
 * folder holding the highest `.step` as it is, so a save cut short in a slot whose old marker
 * is the newest would be loaded torn. A slot is therefore versioned:
 *   1. Each version is a step row named "snapshot/K"; its number is the marker that sealed it
 *      (0 until sealed).
 *   2. The first change under a slot whose version is complete (steps_before_change) keeps that
 *      version: its tree is cloned (same chunks) into /.ckptfs/retained and its row moves
 *      there; a new row, writing, owns the directory the trainer rewrites.
 *   3. The new version completes like any step (its marker, every file whole and durable):
 *      then the kept versions of the slot are pruned (slot_done).
 *   4. The new version set aside (its writers gone unsealed, or a file torn): it goes to
 *      quarantine and the newest kept version is put back at the slot's name (restore()), so
 *      a resume sees the slot's last complete version, files and markers together.
 * Slots are not counted by retention and never pruned by it.
 */

/* Set slot s's number from the name of the marker sealing it ("<digits>.step"). */
static void slot_number(struct ckfs *fs, struct idx_step *s, const char *marker)
{
	long long v;
	char tail;

	if (sscanf(marker, "%lld.ste%c", &v, &tail) != 2 || tail != 'p' || v < 0 || v == s->step)
		return;
	if (idx_begin(fs->ix) < 0)
		return;
	if (idx_step_set_number(fs->ix, s->id, v) < 0 || idx_commit(fs->ix) < 0) {
		idx_rollback(fs->ix);
		return;
	}
	s->step = v;
}

struct slot_ctx {
	const struct idx_step *s;
	int64_t *ids;
	size_t n, cap;
};

static int slot_kept_cb(const struct idx_step *o, void *arg)
{
	struct slot_ctx *c = arg;

	if (o->id == c->s->id || o->kind != c->s->kind || strcmp(o->name, c->s->name) != 0 ||
	    o->state != IDX_STEP_COMPLETE)
		return 0;
	if (grow(&c->ids, &c->cap, c->n, sizeof(*c->ids)) < 0)
		return -ENOMEM;
	c->ids[c->n++] = o->id;
	return 0;
}

/*
 * Slot s was judged: complete, its kept versions are pruned (invariant 3); set aside, the
 * newest kept version takes its place again (invariant 4).
 */
static void slot_done(struct ckfs *fs, const struct idx_step *s)
{
	struct slot_ctx c = { .s = s };
	struct fs_freed fr = { 0 };
	struct idx_step o, best = { .id = 0 };
	bool ok = true;

	if (idx_step_foreach(fs->ix, slot_kept_cb, &c) < 0 || c.n == 0)
		goto out;
	if (s->state == IDX_STEP_INCOMPLETE) {
		for (size_t i = 0; i < c.n; i++)
			if (idx_step_get(fs->ix, c.ids[i], &o) == 0 && is_retained(fs, &o) &&
			    (!best.id || o.step > best.step || (o.step == best.step && o.id > best.id)))
				best = o;
		if (best.id)
			restore(fs, &best);
		goto out;
	}
	if (idx_begin(fs->ix) < 0)
		goto out;
	for (size_t i = 0; i < c.n && ok; i++)
		if (idx_step_get(fs->ix, c.ids[i], &o) == 0 && !o.pinned && is_retained(fs, &o))
			ok = prune(fs, &o, &fr) == 0;
	ok = ok && idx_commit(fs->ix) == 0;
	if (!ok)
		idx_rollback(fs->ix);
	fs_release_finish(fs, &fr, ok);
out:
	free(c.ids);
}

/*
 * The slot holding directory dir (dir itself or its parent), if dir is in a slot: its directory
 * inode, or 0. Cheap when there are no slots: one lookup of `snapshot` in the root.
 */
static uint64_t slot_of_dir(struct ckfs *fs, uint64_t dir)
{
	uint64_t snap, up, upup;

	if (fs->layout < 0 || (fs->layout && fs->layout != LAYOUT_INTERNEVO) ||
	    dir == IDX_ROOT_INO || idx_dentry_lookup(fs->ix, IDX_ROOT_INO, LAYOUT_SLOT_DIR, &snap) < 0 ||
	    idx_dentry_parent(fs->ix, dir, &up, NULL, 0) < 0)
		return 0;
	if (up == snap)
		return dir;
	if (up != IDX_ROOT_INO && idx_dentry_parent(fs->ix, up, &upup, NULL, 0) == 0 && upup == snap)
		return up;
	return 0;
}

bool steps_commit_rename(const struct ckfs *fs, const char *name)
{
	struct layout_match m;

	return fs->layout >= 0 && layout_classify(name, fs->layout, &m) == 0 &&
	       m.kind == LAYOUT_ORBAX && m.role == ROLE_STEP_DIR && (m.flags & LAYOUT_F_TMP);
}

bool steps_dir_name(struct ckfs *fs, uint64_t parent, const char *name)
{
	enum layout_kind k;
	int64_t step;

	if (fs->layout < 0)
		return false;
	if (parent == IDX_ROOT_INO)
		return layout_parse_name(name, fs->layout, &k, &step) == 1 ||
		       strcmp(name, LAYOUT_SLOT_DIR) == 0;
	return steps_slot_home(fs, parent);
}

bool steps_slot_home(struct ckfs *fs, uint64_t dir)
{
	uint64_t snap;

	return fs->layout >= 0 && (!fs->layout || fs->layout == LAYOUT_INTERNEVO) &&
	       dir != IDX_ROOT_INO &&
	       idx_dentry_lookup(fs->ix, IDX_ROOT_INO, LAYOUT_SLOT_DIR, &snap) == 0 && snap == dir;
}

void steps_before_change(struct ckfs *fs, uint64_t dir)
{
	char qname[300];
	struct idx_step s;
	struct idx_inode a;
	uint64_t slot = slot_of_dir(fs, dir);
	int64_t id;
	int rc;

	if (!slot || idx_step_by_dir(fs->ix, slot, &s) < 0 || s.state != IDX_STEP_COMPLETE ||
	    !is_slot(&s) || idx_inode_get(fs->ix, slot, &a) < 0)
		return;
	if (idx_begin(fs->ix) < 0)
		return;
	rc = keep_copy(fs, &s, &a, qname, sizeof(qname));
	if (rc == 0)
		rc = idx_step_create(fs->ix, LAYOUT_INTERNEVO, s.name, 0, slot, ckfs_now(fs), &id);
	if (rc == 0)
		rc = idx_commit(fs->ix);
	else
		idx_rollback(fs->ix);
	if (rc == 0)
		logf_("slot '%s' is being rewritten: its last complete version (step %" PRId64 ") is "
		      "kept as '.ckptfs/%s/%s' and comes back if the new one is not completed",
		      s.name, s.step, RETAINED_NAME, qname);
	else
		logf_("slot '%s': cannot keep its last complete version before it is rewritten: %s",
		      s.name, strerror(-rc));
}

void steps_before_write(struct ckfs *fs, uint64_t ino)
{
	uint64_t parent;

	if (fs->layout >= 0 && idx_dentry_parent(fs->ix, ino, &parent, NULL, 0) == 0)
		steps_before_change(fs, parent);
}

/* ---- MindFormers 1.0: per-rank files, no step directory ---- */

/*
 * A MindFormers 1.0 step is (epoch, step): one file rank_R/{prefix}-{epoch}_{step}.ckpt per rank,
 * written as name.tmp and renamed (framework-io.md, MindSpore _exec_save). The step row is named
 * "{epoch}_{step}" and has no directory. It is complete when every rank of the world (-o ranks=N,
 * else the number of rank_N directories) has its file under the final name, committed, closed
 * and sound. rank_R/meta.json is virtual: it names the newest step complete on all ranks.
 */

/* The rank of directory dir if it is a top-level rank_N directory, else -1. */
int steps_rank_dir(struct ckfs *fs, uint64_t dir)
{
	char name[LAYOUT_NAME_MAX + 1];
	struct layout_match m;
	uint64_t parent;

	if (fs->layout < 0 || (fs->layout && fs->layout != LAYOUT_MF1) ||
	    idx_dentry_parent(fs->ix, dir, &parent, name, sizeof(name)) < 0 ||
	    parent != IDX_ROOT_INO || layout_classify(name, LAYOUT_NONE, &m) < 0 ||
	    m.kind != LAYOUT_MF1 || m.role != ROLE_PLAIN || m.rank < 0)
		return -1;
	return m.rank;
}

static int count_rank_dir(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct layout_match m;

	if (S_ISDIR(mode) && layout_classify(name, LAYOUT_NONE, &m) == 0 &&
	    m.kind == LAYOUT_MF1 && m.role == ROLE_PLAIN && m.rank >= 0)
		(*(int *)arg)++;
	return 0;
}

static int mf1_world(struct ckfs *fs)
{
	int n = 0;

	if (fs->ranks > 0)
		return fs->ranks;
	if (idx_dir_list(fs->ix, IDX_ROOT_INO, 0, count_rank_dir, &n) < 0)
		return 0;
	return n;
}

struct mf1_find {
	int rank;
	int64_t epoch, step;
	char name[LAYOUT_NAME_MAX + 1];
	uint64_t ino;
	bool found;
};

static int mf1_find_cb(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct mf1_find *f = arg;
	char rel[LAYOUT_NAME_MAX + 32];
	struct layout_match m;

	if (!S_ISREG(mode))
		return 0;
	snprintf(rel, sizeof(rel), "rank_%d/%s", f->rank, name);
	if (layout_classify(rel, LAYOUT_MF1, &m) < 0 || m.role != ROLE_STEP_FILE ||
	    (m.flags & LAYOUT_F_TMP) || m.epoch != f->epoch || m.step != f->step)
		return 0;
	snprintf(f->name, sizeof(f->name), "%s", name);
	f->ino = ino;
	f->found = true;
	return 1;
}

/* rank R's file of (epoch, step), if present. */
static bool mf1_file(struct ckfs *fs, int rank, int64_t epoch, int64_t step, struct mf1_find *f)
{
	char dname[32];
	uint64_t dir;

	memset(f, 0, sizeof(*f));
	f->rank = rank;
	f->epoch = epoch;
	f->step = step;
	snprintf(dname, sizeof(dname), "rank_%d", rank);
	if (idx_dentry_lookup(fs->ix, IDX_ROOT_INO, dname, &dir) < 0)
		return false;
	idx_dir_list(fs->ix, dir, 0, mf1_find_cb, f);
	return f->found;
}

/* Are all ranks' files of (epoch, step) present, committed, closed and sound? */
static bool mf1_sound(struct ckfs *fs, int64_t epoch, int64_t step, uint64_t *ret_files,
		      uint64_t *ret_bytes, uint64_t *ret_stored)
{
	int world = mf1_world(fs);
	uint64_t bytes = 0, stored = 0;

	if (world <= 0)
		return false;
	for (int r = 0; r < world; r++) {
		struct mf1_find f;
		struct idx_inode a;
		struct oinode *oi;

		if (!mf1_file(fs, r, epoch, step, &f) || idx_inode_get(fs->ix, f.ino, &a) < 0 ||
		    !a.has_hash || (a.flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED)))
			return false;
		if ((oi = oi_find(fs, f.ino)) && atomic_load(&oi->ov_dirty))
			return false;
		bytes += a.size;
		uint64_t st = 0;

		if (idx_file_stored_bytes(fs->ix, f.ino, &st) == 0)
			stored += st;
	}
	if (ret_files)
		*ret_files = (uint64_t)world;
	if (ret_bytes)
		*ret_bytes = bytes;
	if (ret_stored)
		*ret_stored = stored;
	return true;
}

/* Has every rank's meta.json claimed (epoch, step) or a later step? (The MF1 commit marker.) */
static bool mf1_claimed(struct ckfs *fs, int64_t epoch, int64_t step)
{
	int world = mf1_world(fs);

	if (world <= 0 || world > fs->mf1_nranks)
		return false;
	for (int r = 0; r < world; r++) {
		int64_t e = fs->mf1_claim[r].epoch, st = fs->mf1_claim[r].step;

		if (e < epoch || (e == epoch && st < step))
			return false;
	}
	return true;
}

/* Remember rank's newest meta.json claim. Returns 0 or -ENOMEM. */
static int mf1_note_claim(struct ckfs *fs, int rank, int64_t epoch, int64_t step)
{
	if (rank < 0 || rank >= (int)VINO_MF1_RANKS)
		return 0;
	if (rank >= fs->mf1_nranks) {
		int n = rank + 1;
		void *p = realloc(fs->mf1_claim, (size_t)n * sizeof(*fs->mf1_claim));

		if (!p)
			return -ENOMEM;
		fs->mf1_claim = p;
		for (int i = fs->mf1_nranks; i < n; i++)
			fs->mf1_claim[i].epoch = fs->mf1_claim[i].step = -1;
		fs->mf1_nranks = n;
	}
	if (epoch > fs->mf1_claim[rank].epoch ||
	    (epoch == fs->mf1_claim[rank].epoch && step > fs->mf1_claim[rank].step)) {
		fs->mf1_claim[rank].epoch = epoch;
		fs->mf1_claim[rank].step = step;
	}
	return 0;
}

static bool mf1_key(const struct idx_step *s, int64_t *epoch, int64_t *step)
{
	long long e, st;

	if (s->kind != LAYOUT_MF1 || sscanf(s->name, "%lld_%lld", &e, &st) != 2)
		return false;
	*epoch = e;
	*step = st;
	return true;
}

static void mf1_judge(struct ckfs *fs, struct idx_step *sp);

static int mf1_judge_cb(const struct idx_step *s, void *arg)
{
	struct idx_step copy = *s;

	if (s->kind == LAYOUT_MF1)
		mf1_judge(arg, &copy);
	return 0;
}

static void mf1_on_file(struct ckfs *fs, const struct layout_match *m, pid_t pid)
{
	char name[64];
	struct idx_step s;
	int64_t id;

	snprintf(name, sizeof(name), "%" PRId64 "_%" PRId64, m->epoch, m->step);
	if (idx_step_by_name(fs->ix, LAYOUT_MF1, name, &s) < 0) {
		if (idx_begin(fs->ix) < 0)
			return;
		if (idx_step_create(fs->ix, LAYOUT_MF1, name, m->step, 0, ckfs_now(fs), &id) < 0 ||
		    idx_commit(fs->ix) < 0) {
			idx_rollback(fs->ix);
			return;
		}
		if (idx_step_get(fs->ix, id, &s) < 0)
			return;
	}
	rt_note(fs, s.id, pid);
	mf1_judge(fs, &s);
}

/* Complete MF1 step s if every rank's file is whole and every rank's meta.json claimed it. */
static void mf1_judge(struct ckfs *fs, struct idx_step *sp)
{
	struct idx_step s = *sp;
	uint64_t files, bytes, stored;
	int64_t e, st;

	if (s.state != IDX_STEP_WRITING && s.state != IDX_STEP_SEALED)
		return;
	if (!mf1_key(&s, &e, &st) || !mf1_claimed(fs, e, st) ||
	    !mf1_sound(fs, e, st, &files, &bytes, &stored))
		return;
	if (idx_begin(fs->ix) < 0)
		return;
	char note[64];

	snprintf(note, sizeof(note), "all %" PRIu64 " ranks written and claimed", files);
	if (idx_step_set_figures(fs->ix, s.id, files, bytes, stored, NULL) < 0 ||
	    set_state(fs, &s, IDX_STEP_COMPLETE, note) < 0 || idx_commit(fs->ix) < 0) {
		idx_rollback(fs->ix);
		return;
	}
	rt_drop(fs, s.id);
	retention(fs, LAYOUT_MF1); /* -o keep_checkpoint_max: now that a newer step is complete */
}

/*
 * Remove MF1 step s's file from every rank directory (retention): each rank's
 * {prefix}-{epoch}_{step}.ckpt|.safetensors under its final name, including a relaunch's
 * {prefix}_N-... of the same step (MindSpore ModelCheckpoint adds _N to a prefix already used,
 * tests/traces/mf1.md). In the caller's transaction; freed chunks go to fr.
 */
static int mf1_drop_files(struct ckfs *fs, const struct idx_step *s, struct fs_freed *fr)
{
	int64_t e, st;
	int world = mf1_world(fs), rc = 0;

	if (!mf1_key(s, &e, &st))
		return 0;
	for (int r = 0; rc == 0 && r < world; r++) {
		char dname[32];
		struct mf1_find f;
		uint64_t rdir;

		snprintf(dname, sizeof(dname), "rank_%d", r);
		if (idx_dentry_lookup(fs->ix, IDX_ROOT_INO, dname, &rdir) < 0)
			continue;
		for (int k = 0; rc == 0 && k < 16 && mf1_file(fs, r, e, st, &f); k++) {
			rc = idx_dentry_remove(fs->ix, rdir, f.name);
			if (rc == 0)
				rc = fs_drop_link(fs, f.ino, ckfs_now(fs), fr);
			if (rc == 0)
				rc = dir_links_add(fs, rdir, 0, true);
			if (rc == 0)
				inval_queue(fs, rdir, f.name);
		}
	}
	return rc;
}

struct mf1_best {
	struct ckfs *fs;
	int64_t epoch, step;
	struct idx_step s;
	bool found;
};

static int mf1_best_cb(const struct idx_step *s, void *arg)
{
	struct mf1_best *b = arg;
	int64_t e, st;

	if (s->state != IDX_STEP_COMPLETE || !mf1_key(s, &e, &st))
		return 0;
	if (b->found && (e < b->epoch || (e == b->epoch && st <= b->step)))
		return 0;
	/* the trainer may have deleted it since (keep_checkpoint_max): still all there, or kept
	 * in /.ckptfs/retained because it was the newest (mf1_before_remove)? */
	if (!is_retained(b->fs, s) && !mf1_sound(b->fs, e, st, NULL, NULL, NULL))
		return 0;
	b->epoch = e;
	b->step = st;
	b->s = *s;
	b->found = true;
	return 0;
}

/* Make dir `name` under parent with the attributes of template tmpl. In a transaction. */
static int clone_dir(struct ckfs *fs, uint64_t parent, const char *name, uint64_t tmpl,
		     uint64_t *ret)
{
	struct idx_inode a, pa;
	int rc;

	if ((rc = idx_inode_get(fs->ix, tmpl, &a)) < 0 ||
	    (rc = idx_inode_get(fs->ix, parent, &pa)) < 0)
		return rc;
	a.nlink = 2;
	if ((rc = idx_inode_create(fs->ix, &a, ret)) < 0 ||
	    (rc = idx_dentry_add(fs->ix, parent, name, *ret)) < 0)
		return rc;
	pa.nlink++;
	return idx_inode_update(fs->ix, &pa);
}

/* A second inode with the same content (extents, chunks), attributes and flags as file src,
 * readable by its owner, named dir/name. In a transaction. */
static int clone_file(struct ckfs *fs, uint64_t src, uint64_t dir, const char *name)
{
	struct idx_extent *ext = NULL;
	struct idx_inode a;
	uint64_t ino;
	size_t n = 0;
	int rc;

	if ((rc = idx_inode_get(fs->ix, src, &a)) < 0)
		return rc;
	a.nlink = 1;
	a.mode |= S_IRUSR; /* MindSpore makes a .ckpt 0200 (S_IWRITE) before it removes it */
	if ((rc = idx_inode_create(fs->ix, &a, &ino)) < 0 ||
	    (rc = idx_dentry_add(fs->ix, dir, name, ino)) < 0 ||
	    (rc = idx_file_extents(fs->ix, src, &ext, &n)) < 0)
		return rc;
	rc = idx_file_set_content(fs->ix, ino, ext, n, a.size, a.has_hash ? a.hash : NULL,
				  a.mtime_ns, NULL, NULL);
	free(ext);
	if (rc < 0)
		return rc;
	a.ino = ino;
	return idx_inode_update(fs->ix, &a); /* keep the flags and times */
}

/*
 * The trainer unlinks rank_R/name. MindSpore's keep_checkpoint_max deletes the oldest .ckpt of
 * each rank BEFORE it saves (framework-io.md), so after a crash in the save that follows, the
 * newest complete step can be gone from some ranks and no step is complete on all of them. When
 * name is a file of the newest complete MF1 step, keep every rank's file of that step (same
 * chunks) as /.ckptfs/retained/{epoch}_{step}.{id}/rank_R/name, the step's directory, until a
 * newer step is complete (retention prunes it) or a meta.json read brings the files back
 * (mf1_restore). Best effort: on an index error the unlink goes on and nothing is kept.
 */
static void mf1_before_remove(struct ckfs *fs, int rank, const char *name)
{
	char rel[LAYOUT_NAME_MAX + 32], qname[300];
	struct mf1_best b = { .fs = fs };
	struct layout_match m;
	uint64_t top;
	int world = mf1_world(fs), rc;

	snprintf(rel, sizeof(rel), "rank_%d/%s", rank, name);
	if (layout_classify(rel, LAYOUT_MF1, &m) < 0 || m.role != ROLE_STEP_FILE ||
	    (m.flags & LAYOUT_F_TMP) || world <= 0)
		return;
	if (idx_step_foreach(fs->ix, mf1_best_cb, &b) < 0 || !b.found || b.epoch != m.epoch ||
	    b.step != m.step || is_retained(fs, &b.s) || b.s.dir_ino)
		return;
	snprintf(qname, sizeof(qname), "%s.%" PRId64, b.s.name, b.s.id);
	if (idx_begin(fs->ix) < 0)
		return;
	rc = clone_dir(fs, fs->retained_ino, qname, IDX_ROOT_INO, &top);
	for (int r = 0; rc == 0 && r < world; r++) {
		char dname[32];
		struct mf1_find f;
		uint64_t rdir, cdir;

		snprintf(dname, sizeof(dname), "rank_%d", r);
		if (!mf1_file(fs, r, m.epoch, m.step, &f) ||
		    idx_dentry_lookup(fs->ix, IDX_ROOT_INO, dname, &rdir) < 0) {
			rc = -ENOENT;
			break;
		}
		rc = clone_dir(fs, top, dname, rdir, &cdir);
		if (rc == 0)
			rc = clone_file(fs, f.ino, cdir, f.name);
	}
	if (rc == 0)
		rc = idx_step_set_dir(fs->ix, b.s.id, top);
	if (rc == 0)
		rc = idx_commit(fs->ix);
	else
		idx_rollback(fs->ix);
	if (rc == 0)
		logf_("the trainer deletes '%s' of step '%s', the newest complete step: all ranks' "
		      "files kept in '.ckptfs/%s/%s' until a newer step is complete", rel,
		      b.s.name, RETAINED_NAME, qname);
}

struct one_file {
	char name[LAYOUT_NAME_MAX + 1];
	uint64_t ino;
	bool found;
};

static int one_file_cb(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct one_file *o = arg;

	if (!S_ISREG(mode))
		return 0;
	snprintf(o->name, sizeof(o->name), "%s", name);
	o->ino = ino;
	o->found = true;
	return 1;
}

/*
 * Put the retained files of MF1 step s back into the rank directories that lack them, so the
 * trainer's resume (it lists rank_R/ for the step meta.json names) finds them; then drop the
 * retained copy. A name taken meanwhile keeps its file (the retained one is dropped with the
 * rest). Best effort, like restore().
 */
static void mf1_restore(struct ckfs *fs, struct idx_step *s)
{
	struct fs_freed fr = { 0 };
	int64_t e, st;
	int world = mf1_world(fs), rc = 0, back = 0;

	if (!is_retained(fs, s) || !mf1_key(s, &e, &st) || world <= 0 || idx_begin(fs->ix) < 0)
		return;
	for (int r = 0; rc == 0 && r < world; r++) {
		char dname[32];
		struct one_file o = { 0 };
		struct mf1_find f;
		struct idx_inode d;
		uint64_t rdir, cdir, cur;

		snprintf(dname, sizeof(dname), "rank_%d", r);
		if (mf1_file(fs, r, e, st, &f) ||
		    idx_dentry_lookup(fs->ix, IDX_ROOT_INO, dname, &rdir) < 0 ||
		    idx_dentry_lookup(fs->ix, s->dir_ino, dname, &cdir) < 0 ||
		    idx_dir_list(fs->ix, cdir, 0, one_file_cb, &o) < 0 || !o.found ||
		    idx_dentry_lookup(fs->ix, rdir, o.name, &cur) == 0)
			continue;
		rc = idx_dentry_move(fs->ix, cdir, o.name, rdir, o.name);
		if (rc == 0 && (rc = idx_inode_get(fs->ix, rdir, &d)) == 0) {
			d.mtime_ns = d.ctime_ns = ckfs_now(fs);
			rc = idx_inode_update(fs->ix, &d);
		}
		if (rc == 0) {
			inval_queue(fs, rdir, o.name);
			back++;
		}
	}
	if (rc == 0)
		rc = drop_tree(fs, s, &fr);
	rc = rc == 0 ? idx_commit(fs->ix) : rc;
	if (rc < 0)
		idx_rollback(fs->ix);
	fs_release_finish(fs, &fr, rc == 0);
	if (rc == 0)
		logf_("restored step '%s' (the newest complete step): %d rank file(s) put back for a "
		      "resuming reader", s->name, back);
}

/* rank_R/meta.json as MindSpore writes it, naming the newest step complete on all ranks. */
int steps_mf1_meta(struct ckfs *fs, int rank, char *buf, size_t cap)
{
	struct mf1_best b = { .fs = fs };
	struct layout_tracker t = { 0 };
	struct mf1_find f;

	if (idx_step_foreach(fs->ix, mf1_best_cb, &b) < 0 || !b.found)
		return -ENOENT;
	mf1_restore(fs, &b.s);
	if (!mf1_file(fs, rank, b.epoch, b.step, &f))
		return -ENOENT;
	t.step = b.step;
	t.epoch = b.epoch;
	snprintf(t.ckpt_file, sizeof(t.ckpt_file), "%s", f.name);
	return layout_tracker_format(LAYOUT_MF1, &t, buf, cap);
}

/* ---- virtual trackers ---- */

bool steps_is_vino(uint64_t ino)
{
	return (ino >= VINO_BASE && ino < VINO_BASE + LAYOUT_KIND_COUNT) ||
	       (ino >= VINO_MF1_META(0) && ino < VINO_MF1_META(VINO_MF1_RANKS));
}

int steps_vcontent(struct ckfs *fs, uint64_t vino, char *buf, size_t cap, struct idx_step *ret)
{
	if (vino >= VINO_MF1_META(0)) {
		int n = steps_mf1_meta(fs, (int)(vino - VINO_MF1_META(0)), buf, cap);

		if (n >= 0 && ret) {
			memset(ret, 0, sizeof(*ret));
			ret->completed_ns = ckpt_now_ns();
		}
		return n;
	}
	return steps_tracker_content(fs, (int)(vino - VINO_BASE), buf, cap, ret);
}

/* Is name (at the root) a tracker? Returns its kind, or LAYOUT_NONE. */
static enum layout_kind tracker_kind(struct ckfs *fs, const char *name)
{
	struct layout_match m;

	if (fs->layout < 0 || layout_classify(name, fs->layout, &m) < 0 || m.role != ROLE_TRACKER ||
	    m.kind == LAYOUT_MF1 || strchr(name, '/'))
		return LAYOUT_NONE;
	return m.kind;
}

struct newest_ctx {
	struct ckfs *fs;
	enum layout_kind tracker;
	struct idx_step best;
	bool found;
};

static int newest_cb(const struct idx_step *s, void *arg)
{
	struct newest_ctx *c = arg;

	if (s->state != IDX_STEP_COMPLETE || s->step < 0 ||
	    !layout_tracker_shared(c->tracker, (enum layout_kind)s->kind))
		return 0;
	if (c->found && s->step < c->best.step)
		return 0;
	c->best = *s;
	c->found = true;
	return 0;
}

/* The newest complete step a tracker of this kind resolves to, skipping corrupt ones. */
static int resolve(struct ckfs *fs, enum layout_kind tracker, struct idx_step *ret)
{
	for (int tries = 0; tries < 64; tries++) {
		struct newest_ctx c = { .fs = fs, .tracker = tracker };

		if (idx_step_foreach(fs->ix, newest_cb, &c) < 0 || !c.found)
			return -ENOENT;
		if (c.best.dir_ino && tree_has_bad_chunk(fs, c.best.dir_ino) > 0) {
			struct idx_step s = c.best;

			if (idx_begin(fs->ix) == 0) {
				if (set_state(fs, &s, IDX_STEP_CORRUPT, "a chunk failed its checksum") <
					    0 ||
				    move_to_quarantine(fs, &s) < 0 || idx_commit(fs->ix) < 0)
					idx_rollback(fs->ix);
			}
			if (s.state != IDX_STEP_CORRUPT)
				return -EIO;
			continue;
		}
		*ret = c.best;
		return 0;
	}
	return -ENOENT;
}

int steps_tracker_content(struct ckfs *fs, int kind, char *buf, size_t cap,
			  struct idx_step *ret_step)
{
	struct layout_tracker t = { .epoch = -1 };
	struct idx_step s;
	int rc = resolve(fs, (enum layout_kind)kind, &s);

	if (rc < 0)
		return rc;
	restore(fs, &s);
	t.step = s.step;
	rc = layout_tracker_format((enum layout_kind)kind, &t, buf, cap);
	if (rc >= 0 && ret_step)
		*ret_step = s;
	return rc;
}

int steps_vlookup(struct ckfs *fs, uint64_t parent, const char *name, uint64_t *ret_vino)
{
	enum layout_kind k;

	if (parent != IDX_ROOT_INO) {
		char mbuf[LAYOUT_TRACKER_MAX];
		uint64_t v;

		if (steps_tracker_name(fs, parent, name) != LAYOUT_MF1)
			return 0;
		v = steps_tracker_vino(fs, parent, LAYOUT_MF1);
		if (!v || steps_vcontent(fs, v, mbuf, sizeof(mbuf), NULL) < 0)
			return -ENOENT;
		*ret_vino = v;
		return 1;
	}
	if ((k = tracker_kind(fs, name)) == LAYOUT_NONE)
		return 0;
	char buf[LAYOUT_TRACKER_MAX];
	struct idx_step s;

	if (steps_tracker_content(fs, k, buf, sizeof(buf), &s) < 0)
		return -ENOENT;
	*ret_vino = VINO_BASE + k;
	return 1;
}

int steps_vstat(struct ckfs *fs, uint64_t vino, struct stat *st)
{
	char buf[LAYOUT_TRACKER_MAX];
	struct idx_inode root;
	struct idx_step s;
	int n = steps_vcontent(fs, vino, buf, sizeof(buf), &s);

	if (n < 0) {
		/* no complete step: the name does not resolve (steps_vlookup), but an inode the
		 * kernel already holds (a trainer writing the tracker) stats as empty */
		n = 0;
		memset(&s, 0, sizeof(s));
		s.completed_ns = ckpt_now_ns();
	}
	if (idx_inode_get(fs->ix, IDX_ROOT_INO, &root) < 0)
		return -EIO;
	memset(st, 0, sizeof(*st));
	st->st_ino = vino;
	st->st_mode = S_IFREG | 0644;
	st->st_nlink = 1;
	st->st_uid = root.uid;
	st->st_gid = root.gid;
	st->st_size = n;
	st->st_blocks = (n + 511) / 512;
	st->st_blksize = 4096;
	st->st_mtim.tv_sec = s.completed_ns / 1000000000;
	st->st_mtim.tv_nsec = s.completed_ns % 1000000000;
	st->st_ctim = st->st_atim = st->st_mtim;
	return 0;
}

int steps_vname(struct ckfs *fs, int kind, char *buf, size_t cap)
{
	char content[LAYOUT_TRACKER_MAX];
	struct idx_step s;

	if (steps_tracker_content(fs, kind, content, sizeof(content), &s) < 0)
		return -ENOENT;
	return layout_tracker_path((enum layout_kind)kind, s.step, -1, buf, cap);
}

int steps_tracker_name(struct ckfs *fs, uint64_t parent, const char *name)
{
	if (parent == IDX_ROOT_INO)
		return tracker_kind(fs, name);
	if (strcmp(name, "meta.json") == 0 && steps_rank_dir(fs, parent) >= 0)
		return LAYOUT_MF1;
	return LAYOUT_NONE;
}

uint64_t steps_tracker_vino(struct ckfs *fs, uint64_t parent, int kind)
{
	if (kind == LAYOUT_MF1) {
		int r = steps_rank_dir(fs, parent);

		return r >= 0 && (unsigned)r < VINO_MF1_RANKS ? VINO_MF1_META(r) : 0;
	}
	return VINO_BASE + (uint64_t)kind;
}

void steps_on_claim(struct ckfs *fs, int kind, const char *name, const char *buf, size_t len,
		    pid_t pid)
{
	struct layout_tracker t;
	int64_t id;
	int rc = layout_tracker_parse((enum layout_kind)kind, name, buf, len, &t);
	int64_t step = rc == 0 ? t.step : -1;

	if (idx_begin(fs->ix) == 0) {
		if (idx_claim_add(fs->ix, name, buf, len, step, ckfs_now(fs), &id) < 0 ||
		    idx_commit(fs->ix) < 0)
			idx_rollback(fs->ix);
	}
	if (rc < 0) {
		logf_("tracker '%s': ignored a claim that is not a step (%zu bytes)", name, len);
		return;
	}
	if (kind == LAYOUT_MF1) {
		int rank = -1;

		/* the marker of MF1: every rank's meta.json; a step completes once all claimed it */
		if (sscanf(name, "rank_%d/", &rank) == 1 && mf1_note_claim(fs, rank, t.epoch, t.step) == 0)
			idx_step_foreach(fs->ix, mf1_judge_cb, fs);
		return;
	}
	/* seal the named step of every layout sharing this tracker */
	for (int k = 1; k < LAYOUT_KIND_COUNT; k++) {
		char dname[LAYOUT_NAME_MAX + 1];
		struct idx_step s;
		uint64_t dir;

		if (!layout_tracker_shared((enum layout_kind)kind, (enum layout_kind)k) ||
		    layout_step_dir_name((enum layout_kind)k, step, dname, sizeof(dname)) < 0)
			continue;
		if (idx_step_by_name(fs->ix, k, dname, &s) == 0) {
			rt_note(fs, s.id, pid);
			seal(fs, &s, "tracker claim");
			return;
		}
		if (idx_dentry_lookup(fs->ix, IDX_ROOT_INO, dname, &dir) == 0) {
			struct layout_match m;

			if (layout_classify(dname, fs->layout, &m) == 0 &&
			    step_of_path(fs, dname, &m, &s) == 0) {
				seal(fs, &s, "tracker claim");
				return;
			}
		}
	}
	logf_("tracker '%s' claims step %" PRId64 ", which does not exist: claim recorded, "
	      "trackers keep naming the newest complete step", name, step);
}

/* ---- reaper, recovery ---- */

struct scan_ctx {
	int64_t *ids;
	size_t n, cap;
};

static int scan_open_steps(const struct idx_step *s, void *arg)
{
	struct scan_ctx *c = arg;

	if (s->state != IDX_STEP_WRITING && s->state != IDX_STEP_SEALED)
		return 0;
	if (grow(&c->ids, &c->cap, c->n, sizeof(*c->ids)) < 0)
		return -ENOMEM;
	c->ids[c->n++] = s->id;
	return 0;
}

/* One pass: judge every unfinished step whose writers are gone. recovering: all are gone. */
void steps_reap(struct ckfs *fs, bool recovering)
{
	struct scan_ctx c = { 0 };
	int64_t now = ckpt_now_ns();

	if (idx_step_foreach(fs->ix, scan_open_steps, &c) < 0)
		goto out;
	for (size_t i = 0; i < c.n; i++) {
		struct step_rt *r = rt_get(fs, c.ids[i], false);
		bool settled = true;

		if (!recovering) {
			if (!r) {
				/* first seen by this daemon: start its settle time now */
				if ((r = rt_get(fs, c.ids[i], true)))
					r->last_ns = now;
				continue;
			}
			if (now - r->last_ns < STEP_SETTLE_NS && !r->torn)
				continue;
			for (unsigned j = 0; j < r->npids; j++)
				if (pid_alive(r->pids[j], r->starts[j]))
					settled = false;
		}
		evaluate(fs, c.ids[i], settled, recovering, true);
	}
out:
	free(c.ids);
}

/* Unfinished steps whose recorded writers are all gone, into ids (at most cap). */
static size_t orphaned_steps(struct ckfs *fs, int64_t *ids, size_t cap)
{
	size_t n = 0;

	for (struct step_rt *r = fs->steps_rt; r && n < cap; r = r->next) {
		bool alive = false;

		for (unsigned j = 0; j < r->npids && !alive; j++)
			alive = pid_alive(r->pids[j], r->starts[j]);
		if (r->npids > 0 && !alive)
			ids[n++] = r->id;
	}
	return n;
}

bool steps_settle_due(struct ckfs *fs)
{
	int64_t id;

	return fs->layout >= 0 && fs->steps_rt && orphaned_steps(fs, &id, 1) > 0;
}

void steps_settle_now(struct ckfs *fs)
{
	int64_t ids[64];
	size_t n;

	if (fs->layout < 0 || !fs->steps_rt)
		return;
	n = orphaned_steps(fs, ids, sizeof(ids) / sizeof(ids[0]));
	for (size_t i = 0; i < n; i++)
		evaluate(fs, ids[i], true, false, true);
	if (n && fs->ninval)
		pthread_cond_signal(&fs->reaper_cv); /* it tells the kernel what left the namespace */
}

static void *reaper_main(void *arg)
{
	struct ckfs *fs = arg;

	pthread_mutex_lock(&fs->mu);
	while (!fs->stopping) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += REAP_PERIOD_NS;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&fs->reaper_cv, &fs->mu, &ts);
		if (fs->stopping)
			break;
		steps_reap(fs, false);
		if (fs->ninval) {
			pthread_mutex_unlock(&fs->mu);
			steps_flush_inval(fs);
			pthread_mutex_lock(&fs->mu);
		}
	}
	pthread_mutex_unlock(&fs->mu);
	return NULL;
}

static int ensure_dir(struct ckfs *fs, uint64_t parent, const char *name, uint32_t mode,
		      uint64_t *ret)
{
	struct idx_inode a = { 0 }, pa;
	uint64_t ino;
	int rc;

	if (idx_dentry_lookup(fs->ix, parent, name, ret) == 0)
		return 0;
	if ((rc = idx_inode_get(fs->ix, parent, &pa)) < 0)
		return rc;
	a.mode = S_IFDIR | mode;
	a.uid = pa.uid;
	a.gid = pa.gid;
	a.nlink = 2;
	a.atime_ns = a.mtime_ns = a.ctime_ns = ckfs_now(fs);
	if ((rc = idx_begin(fs->ix)) < 0)
		return rc;
	rc = idx_inode_create(fs->ix, &a, &ino);
	if (rc == 0)
		rc = idx_dentry_add(fs->ix, parent, name, ino);
	if (rc == 0) {
		pa.nlink++;
		rc = idx_inode_update(fs->ix, &pa);
	}
	if (rc == 0)
		rc = idx_commit(fs->ix);
	else
		idx_rollback(fs->ix);
	if (rc == 0)
		*ret = ino;
	return rc;
}

/*
 * Re-read and re-hash every chunk of the files under dir; mark the bad ones in the index.
 * Returns the number of bad chunks found (>= 0) or -errno.
 */
static int verify_tree(struct ckfs *fs, uint64_t dir, int depth)
{
	struct rm_ctx c = { 0 };
	int rc, bad = 0;

	if (depth > 256)
		return -ELOOP;
	rc = idx_dir_list(fs->ix, dir, 0, rm_collect, &c);
	for (size_t i = 0; rc >= 0 && i < c.n; i++) {
		if (S_ISDIR(c.modes[i])) {
			rc = verify_tree(fs, c.inos[i], depth + 1);
			if (rc > 0)
				bad += rc;
			continue;
		}
		if (!S_ISREG(c.modes[i]))
			continue;
		struct idx_extent *ext = NULL;
		size_t n = 0;

		if ((rc = idx_file_extents(fs->ix, c.inos[i], &ext, &n)) < 0)
			break;
		for (size_t j = 0; j < n; j++) {
			struct store_hash h;

			memcpy(h.b, ext[j].hash, STORE_HASH_LEN);
			if (store_chunk_verify(fs->st, &h) == 0)
				continue;
			bad++;
			if (idx_begin(fs->ix) == 0 &&
			    (idx_chunk_mark_bad(fs->ix, h.b) < 0 || idx_commit(fs->ix) < 0))
				idx_rollback(fs->ix);
		}
		free(ext);
	}
	for (size_t i = 0; i < c.n; i++)
		free(c.names[i]);
	free(c.names);
	free(c.inos);
	free(c.modes);
	return rc < 0 ? rc : bad;
}

/*
 * At mount: the newest complete step of each layout is what a resume will read first, so
 * re-hash its chunks now; a damaged one becomes corrupt and leaves the namespace, and the next
 * newest is checked in turn. Costs one read of one step per layout in use.
 */
static void verify_newest(struct ckfs *fs)
{
	for (int k = 1; k < LAYOUT_KIND_COUNT; k++) {
		struct idx_step s;

		for (int tries = 0; tries < 64; tries++) {
			if (idx_step_newest(fs->ix, 1u << k, IDX_STEP_COMPLETE, &s) < 0 ||
			    !s.dir_ino)
				break;
			int bad = verify_tree(fs, s.dir_ino, 0);

			if (bad <= 0)
				break;
			char note[96];

			snprintf(note, sizeof(note), "%d chunks failed their checksum at mount", bad);
			if (idx_begin(fs->ix) < 0)
				break;
			if (set_state(fs, &s, IDX_STEP_CORRUPT, note) < 0 ||
			    move_to_quarantine(fs, &s) < 0 || idx_commit(fs->ix) < 0) {
				idx_rollback(fs->ix);
				break;
			}
		}
	}
}

/* idx_claim_foreach callback: MF1 meta.json claims recorded by earlier mounts. */
static int mf1_reload_claim(int64_t id, const char *tracker, const void *content, size_t len,
			    int64_t step, int64_t ts_ns, void *arg)
{
	struct ckfs *fs = arg;
	struct layout_tracker t;
	int rank;

	if (sscanf(tracker, "rank_%d/meta.json", &rank) == 1 && content &&
	    layout_tracker_parse(LAYOUT_MF1, "meta.json", content, len, &t) == 0)
		mf1_note_claim(fs, rank, t.epoch, t.step);
	return 0;
}

int steps_init(struct ckfs *fs)
{
	int rc;

	pthread_cond_init(&fs->reaper_cv, NULL);
	pthread_mutex_lock(&fs->mu);
	rc = ensure_dir(fs, IDX_ROOT_INO, META_NAME, 0555, &fs->meta_ino);
	if (rc == 0)
		rc = ensure_dir(fs, fs->meta_ino, QUARANTINE_NAME, 0555, &fs->quarantine_ino);
	if (rc == 0)
		rc = ensure_dir(fs, fs->meta_ino, RETAINED_NAME, 0555, &fs->retained_ino);
	if (rc == 0 && fs->layout >= 0) {
		idx_claim_foreach(fs->ix, mf1_reload_claim, fs);
		idx_step_foreach(fs->ix, mf1_judge_cb, fs);
		fs->crash_recovery = !fs->repo->was_clean;
		steps_reap(fs, true); /* what an earlier daemon left unfinished */
		fs->crash_recovery = false;
		/* a daemon killed inside retention left more complete steps than it keeps */
		for (int k = 0; k < LAYOUT_KIND_COUNT; k++)
			retention(fs, k);
		verify_newest(fs);
	}
	pthread_mutex_unlock(&fs->mu);
	return rc;
}

int steps_start(struct ckfs *fs)
{
	int rc = pthread_create(&fs->reaper, NULL, reaper_main, fs);

	if (rc == 0)
		fs->reaper_started = true;
	return -rc;
}

void steps_stop(struct ckfs *fs)
{
	if (!fs->reaper_started)
		return;
	pthread_mutex_lock(&fs->mu);
	fs->stopping = true;
	pthread_cond_signal(&fs->reaper_cv);
	pthread_mutex_unlock(&fs->mu);
	pthread_join(fs->reaper, NULL);
	fs->reaper_started = false;
	while (fs->steps_rt)
		rt_drop(fs, fs->steps_rt->id);
	free(fs->mf1_claim);
	fs->mf1_claim = NULL;
	fs->mf1_nranks = 0;
	free(fs->inval);
	fs->inval = NULL;
	fs->ninval = fs->capinval = 0;
}

/* ---- bad chunks ---- */

static int bad_extent_check(struct ckfs *fs, uint64_t ino)
{
	struct idx_extent *ext = NULL;
	size_t n = 0;
	int bad = 0;

	if (idx_file_extents(fs->ix, ino, &ext, &n) < 0)
		return 0;
	for (size_t i = 0; i < n && !bad; i++)
		bad = idx_chunk_is_bad(fs->ix, ext[i].hash) > 0;
	free(ext);
	return bad;
}
