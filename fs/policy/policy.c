/* SPDX-License-Identifier: MIT */
/*
 * policy.c — the checkpoint policy (rules in policy.h): entries, sealing, completeness,
 * figures and digest, the step report.
 */
#include "fs/policy/policy.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fs/ckptfs.h"

/* the largest metadata.json policy_listed_names reads, bytes */
#define POLICY_METADATA_MAX (64u << 20)
/* how deep policy_listed_names looks into metadata.json for "file_name" keys */
#define POLICY_JSON_DEPTH 32

/* ---- 1. entries ---- */

enum policy_entry policy_entry_of(const char *rel, mode_t mode, enum layout_kind forced,
				  struct layout_match *ret_match)
{
	struct layout_match m;
	bool top = !strchr(rel, '/');

	if (layout_classify(rel, forced, &m) < 0)
		return POLICY_OTHER;
	if (ret_match)
		*ret_match = m;
	if (top && S_ISREG(mode) && m.role == ROLE_TRACKER &&
	    layout_desc(m.kind)->tracker == LAYOUT_TRACKER_ROOT)
		return POLICY_TRACKER;
	if (top && S_ISDIR(mode) && m.role == ROLE_STEP_DIR && m.step >= 0)
		return policy_needs_evidence(&m) ? POLICY_CANDIDATE : POLICY_STEP_DIR;
	if (S_ISREG(mode) && m.step_prefix_len > 0 && m.role == ROLE_MARKER)
		return POLICY_MARKER;
	if (S_ISREG(mode) && m.step_prefix_len > 0 && m.role == ROLE_STEP_FILE)
		return POLICY_STEP_FILE;
	if (S_ISREG(mode) && m.role == ROLE_TRACKER &&
	    layout_desc(m.kind)->tracker == LAYOUT_TRACKER_PER_RANK && m.rank >= 0)
		return POLICY_RANK_TRACKER;
	if (S_ISREG(mode) && m.step_prefix_len == 0 && m.role == ROLE_STEP_FILE &&
	    layout_desc(m.kind)->per_rank)
		return POLICY_RANK_FILE;
	if (top && S_ISREG(mode) && m.role == ROLE_STEP_FILE && layout_desc(m.kind)->top_files)
		return POLICY_TOP_FILE;
	return POLICY_OTHER;
}

bool policy_needs_evidence(const struct layout_match *m)
{
	/* set only by auto-detection, on the all-digit names InternEvo and Orbax share (layout.h) */
	return (m->flags & LAYOUT_F_AMBIGUOUS) != 0;
}

bool policy_marker_seals(const struct layout_match *m)
{
	return m->role == ROLE_MARKER && !(m->flags & LAYOUT_F_TMP);
}

enum layout_kind policy_marker_kind(enum layout_kind kind, const char *dir,
				    const struct layout_match *m, enum layout_kind forced)
{
	enum layout_kind by_name;
	int64_t step;

	if (m->role != ROLE_MARKER || !(m->flags & LAYOUT_F_AMBIGUOUS) ||
	    layout_parse_name(dir, forced, &by_name, &step) != 1 || m->kind == by_name)
		return kind;
	return m->kind;
}

/* ---- 2. sealing ---- */

enum policy_seal policy_claim_seals(enum layout_kind tracker, int64_t claim_step,
				    enum layout_kind kind, int64_t step, bool history)
{
	if (claim_step < 0 || step < 0 || !layout_tracker_shared(tracker, kind))
		return POLICY_SEAL_NONE;
	if (step == claim_step)
		return POLICY_SEAL_NAMED;
	if (step < claim_step && !history)
		return POLICY_SEAL_LATER;
	return POLICY_SEAL_NONE;
}

enum layout_kind policy_claim_kind(const char *rel, enum layout_kind forced)
{
	struct layout_match m;

	if (policy_entry_of(rel, S_IFREG, forced, &m) != POLICY_TRACKER)
		return LAYOUT_NONE;
	return m.kind;
}

bool policy_marker_after_all_ranks(enum layout_kind kind)
{
	return layout_desc(kind)->marker_after_all_ranks;
}

bool policy_names_repeat(enum layout_kind kind)
{
	return layout_desc(kind)->names_repeat;
}

/* ---- 3. completeness ---- */

/* why a step that is not complete cannot become complete (f->settled) */
static void incomplete_why(const struct policy_facts *f, char *why, size_t cap)
{
	if (f->unprovable && f->absent[0])
		snprintf(why, cap, "the daemon stopped before every rank was known to be done: "
			 "'%.40s' is missing", f->absent);
	else if (f->unprovable)
		snprintf(why, cap, "the daemon stopped before every rank was known to be done (%s)",
			 f->previous == POLICY_PREV_NONE ? "no earlier complete step to compare with"
							 : "files still open");
	else if (!f->sealed)
		snprintf(why, cap, f->files ? "never sealed, no writer left"
					    : "never sealed, empty");
	else if (f->files == 0)
		snprintf(why, cap, "sealed, but holds no file");
	else if (f->unreadable)
		snprintf(why, cap, "%u of %" PRIu64 " files could not be read", f->unreadable,
			 f->files);
	else if (f->unsound || f->uncommitted)
		snprintf(why, cap, "%u torn or malformed, %u never closed of %" PRIu64 " files",
			 f->unsound, f->uncommitted, f->files);
	else if (f->unlisted[0])
		snprintf(why, cap, "metadata.json names '%.60s', which is not in the step",
			 f->unlisted);
	else if (f->previous == POLICY_PREV_MISSING && f->absent[0])
		snprintf(why, cap, "no writer left and '%.60s' never written: a rank did not save",
			 f->absent);
	else
		snprintf(why, cap, "not every rank is known to be done");
}

enum policy_verdict policy_judge(const struct policy_facts *f, char *why, size_t cap)
{
	bool prev_ok = f->previous == POLICY_PREV_ALL || (f->previous == POLICY_PREV_NONE && f->quiet);
	bool whole = f->files > 0 && f->open == 0 && f->uncommitted == 0 && f->unsound == 0 &&
		     f->unreadable == 0;

	if (f->sealed && whole && !f->unlisted[0] && !f->unprovable && prev_ok) {
		snprintf(why, cap, "every file whole");
		return POLICY_COMPLETE;
	}
	if (!f->settled || f->open) {
		snprintf(why, cap, "waiting for its writers");
		return POLICY_WAIT;
	}
	/* rule 3's copy: one writer, gone, every file whole, never sealed */
	if (!f->sealed && whole && f->by_tracker && !f->recovering && !f->rewrite &&
	    f->writers == 1) {
		snprintf(why, cap, "every file whole, written by one process that is gone, no "
			 "tracker claim: a copy, named by no tracker until one claims it");
		return POLICY_COPIED;
	}
	incomplete_why(f, why, cap);
	return POLICY_INCOMPLETE;
}

bool policy_found_by_tracker(enum layout_kind kind)
{
	return layout_desc(kind)->found_by_tracker;
}

struct prev_ctx {
	const struct idx_step *s;
	struct idx_step best;
	bool found;
};

/* idx_step_newest_each callback (complete steps of s's kind, newest first): the newest one below
 * s with a directory, the lowest id among steps of that number (the first one made) */
static int prev_cb(const struct idx_step *o, void *arg)
{
	struct prev_ctx *c = arg;

	if (c->found && o->step < c->best.step)
		return 1; /* past the newest one below s */
	if (o->id != c->s->id && o->dir_ino && o->step < c->s->step) {
		c->best = *o;
		c->found = true;
	}
	return 0;
}

/*
 * The name a file of step `from` has at step `to`: every run of digits whose value is from's
 * number becomes to's (zero-padded to the run's width when the run starts with 0), so HF's nested
 * checkpoint-N/global_stepN/ directory matches. Returns 0, or -ENAMETOOLONG.
 */
static int renumber(const char *name, int64_t from, int64_t to, char *buf, size_t cap)
{
	size_t o = 0;

	for (const char *p = name; *p;) {
		size_t n = strspn(p, "0123456789");
		char digits[20]; /* INT64_MAX has 19 digits */
		bool match = false;
		int w;

		if (n == 0) {
			if (o + 1 >= cap)
				return -ENAMETOOLONG;
			buf[o++] = *p++;
			continue;
		}
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
	struct idx *ix;
	int64_t from, to;      /* step numbers of the previous step and of the one judged */
	uint64_t (*pairs)[2];  /* [previous step's directory, same directory in this step] */
	size_t n, cap;
	uint64_t cur;          /* this step's directory matching the one being listed */
	int64_t since_ns;      /* > 0: a file of this step counts only if written since then */
	char *missing;
	size_t mcap;
};

static int names_cb(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct names_walk *w = arg;
	char want[NAME_MAX + 1];
	struct idx_step other;
	struct idx_inode a;
	uint64_t mine;

	(void)cookie;
	if (!S_ISDIR(mode) && !S_ISREG(mode))
		return 0;
	if (S_ISREG(mode) && idx_inode_get(w->ix, ino, &a) == 0 && (a.flags & IDX_INODE_FOREIGN))
		return 0; /* another node's file (rule 5): this node's ranks never write it */
	if (S_ISDIR(mode) && idx_step_by_dir(w->ix, ino, &other) == 0)
		return 0; /* another step's directory moved inside by hand (`mv checkpoint-10
			   * checkpoint-20`, rule 6): never a file a save of this step writes */
	if (renumber(name, w->from, w->to, want, sizeof(want)) < 0)
		return 0; /* no name it could have here */
	/* a digit run equal to the step by chance (DeepSpeed's "bf16_" at step 16) is not the
	 * step number: the name unchanged counts too */
	if (idx_dentry_lookup(w->ix, w->cur, want, &mine) < 0 && strcmp(want, name) != 0 &&
	    idx_dentry_lookup(w->ix, w->cur, name, &mine) == 0)
		snprintf(want, sizeof(want), "%s", name);
	if (idx_dentry_lookup(w->ix, w->cur, want, &mine) < 0 ||
	    idx_inode_get(w->ix, mine, &a) < 0 || (S_ISDIR(mode) != S_ISDIR(a.mode))) {
		snprintf(w->missing, w->mcap, "%s", want);
		return 1;
	}
	if (w->since_ns > 0 && S_ISREG(mode) && a.mtime_ns < w->since_ns) {
		snprintf(w->missing, w->mcap, "%s, not written again", want);
		return 1;
	}
	if (S_ISDIR(mode)) {
		if (ckpt_grow(&w->pairs, &w->cap, w->n, sizeof(*w->pairs)) < 0)
			return -ENOMEM;
		w->pairs[w->n][0] = ino;
		w->pairs[w->n][1] = mine;
		w->n++;
	}
	return 0;
}

/* Walk the tree at dir (a step's earlier version) against w->cur's tree, directory by
 * directory (names_cb pairs them as it goes). Returns 0 (every name there), 1 (w->missing
 * filled), or names_cb's / the index's -errno. Frees w->pairs. */
static int names_walk_tree(struct names_walk *w, uint64_t dir)
{
	int rc = idx_dir_list(w->ix, dir, 0, names_cb, w);

	for (size_t i = 0; rc == 0 && i < w->n; i++) { /* w->pairs grows as we go */
		w->cur = w->pairs[i][1];
		rc = idx_dir_list(w->ix, w->pairs[i][0], 0, names_cb, w);
	}
	free(w->pairs);
	w->pairs = NULL;
	return rc;
}

int policy_previous_names(struct idx *ix, const struct idx_step *s, char *missing, size_t cap)
{
	struct prev_ctx pc = { .s = s };
	struct names_walk w = { .ix = ix, .missing = missing, .mcap = cap };
	int rc;

	if ((rc = idx_step_newest_each(ix, 1u << s->kind, IDX_STEP_COMPLETE, prev_cb, &pc)) < 0)
		return rc;
	if (!pc.found)
		return POLICY_PREV_NONE;
	w.from = pc.best.step;
	w.to = s->step;
	w.cur = s->dir_ino;
	rc = names_walk_tree(&w, pc.best.dir_ino);
	if (rc == 1) {
		size_t l = strlen(missing);

		snprintf(missing + l, cap - l, " (in step %" PRId64 ")", pc.best.step);
		return POLICY_PREV_MISSING;
	}
	return rc < 0 ? rc : POLICY_PREV_ALL;
}

int policy_rewritten_names(struct idx *ix, const struct idx_step *s, uint64_t kept_dir,
			   char *missing, size_t cap)
{
	struct names_walk w = { .ix = ix, .from = s->step, .to = s->step, .cur = s->dir_ino,
				.since_ns = s->created_ns > 0 ? s->created_ns : 1,
				.missing = missing, .mcap = cap };
	int rc = names_walk_tree(&w, kept_dir);

	if (rc == 1) {
		size_t l = strlen(missing);

		snprintf(missing + l, cap - l, " (in its complete version)");
		return POLICY_PREV_MISSING;
	}
	return rc < 0 ? rc : POLICY_PREV_ALL;
}

/* Every "file_name" string anywhere in j names a regular file in directory dir? */
static bool names_exist(struct idx *ix, uint64_t dir, json_t *j, int depth, char *missing,
			size_t cap)
{
	const char *key;
	json_t *v;
	size_t i;

	if (depth > POLICY_JSON_DEPTH)
		return false;
	if (json_is_object(j)) {
		json_object_foreach(j, key, v) {
			if (strcmp(key, "file_name") == 0 && json_is_string(v)) {
				const char *n = json_string_value(v);
				struct idx_inode a;
				uint64_t ino;

				if (strchr(n, '/') || !strcmp(n, "..") ||
				    idx_dentry_lookup(ix, dir, n, &ino) < 0 ||
				    idx_inode_get(ix, ino, &a) < 0 || !S_ISREG(a.mode)) {
					snprintf(missing, cap, "%s", n);
					return false;
				}
			} else if (!names_exist(ix, dir, v, depth + 1, missing, cap)) {
				return false;
			}
		}
	} else if (json_is_array(j)) {
		json_array_foreach(j, i, v)
			if (!names_exist(ix, dir, v, depth + 1, missing, cap))
				return false;
	}
	return true;
}

int policy_listed_names(struct idx *ix, struct store *st, const struct idx_step *s, char *missing,
			size_t cap)
{
	struct idx_extent *ext = NULL;
	struct idx_inode a;
	size_t n = 0;
	uint64_t ino;
	json_t *j;
	const char *list = layout_desc(s->kind)->names_list;
	char *buf;
	bool ok;

	if (!list || idx_dentry_lookup(ix, s->dir_ino, list, &ino) < 0 ||
	    idx_inode_get(ix, ino, &a) < 0 || !S_ISREG(a.mode) || !a.has_hash ||
	    a.size > POLICY_METADATA_MAX)
		return 1;
	if (!(buf = malloc(a.size ? a.size : 1)))
		return -ENOMEM;
	if (idx_file_extents(ix, ino, &ext, &n) < 0 ||
	    ckpt_extents_pread(st, ext, n, buf, a.size, 0) != (ssize_t)a.size) {
		free(ext);
		free(buf);
		snprintf(missing, cap, "metadata.json (unreadable)");
		return 0;
	}
	free(ext);
	j = json_loadb(buf, a.size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	free(buf);
	if (!j)
		return 1;
	ok = names_exist(ix, s->dir_ino, j, 0, missing, cap);
	json_decref(j);
	return ok ? 1 : 0;
}

/* ---- 4. figures and digest ---- */

struct walk {
	struct idx *ix;
	policy_file_fn fn;
	void *arg;
	uint64_t *dirs;
	size_t ndirs, capdirs;
	struct policy_figures fig;
	struct store_hasher *digest;
};

static int walk_entry(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct walk *w = arg;
	struct idx_inode a;
	uint64_t stored = 0;
	int rc;

	(void)cookie;
	if (S_ISDIR(mode)) {
		if (ckpt_grow(&w->dirs, &w->capdirs, w->ndirs, sizeof(*w->dirs)) < 0)
			return -ENOMEM;
		w->dirs[w->ndirs++] = ino;
		return 0;
	}
	if (!S_ISREG(mode))
		return 0;
	if ((rc = idx_inode_get(w->ix, ino, &a)) < 0)
		return rc;
	if (w->fn && (rc = w->fn(name, ino, &a, w->arg)) != 0)
		return rc;
	w->fig.files++;
	w->fig.bytes += a.size;
	if (idx_file_stored_bytes(w->ix, ino, &stored) == 0)
		w->fig.stored += stored;
	store_hasher_update(w->digest, name, strlen(name) + 1);
	store_hasher_update(w->digest, a.hash, IDX_HASH_LEN);
	return 0;
}

int policy_step_walk(struct idx *ix, uint64_t dir, policy_file_fn fn, void *arg,
		     struct policy_figures *ret)
{
	struct walk w = { .ix = ix, .fn = fn, .arg = arg };
	int rc;

	if (!(w.digest = store_hasher_new()))
		return -ENOMEM;
	/* directories one after another, never nested: a listing's statement is one per handle */
	rc = idx_dir_list(ix, dir, 0, walk_entry, &w);
	for (size_t i = 0; rc == 0 && i < w.ndirs; i++) /* w.dirs grows as we go */
		rc = idx_dir_list(ix, w.dirs[i], 0, walk_entry, &w);
	if (rc == 0) {
		store_hasher_digest(w.digest, &w.fig.digest);
		*ret = w.fig;
	}
	free(w.dirs);
	store_hasher_free(w.digest);
	return rc;
}

/* ---- 5. reporting ---- */

char *policy_time_iso(int64_t ns, char *buf, size_t cap)
{
	/* floor division: a time before the epoch belongs to the second that starts before it */
	int64_t sec = ns >= 0 ? ns / 1000000000 : -((-(ns + 1)) / 1000000000) - 1;
	time_t t = (time_t)sec;
	struct tm tm;

	if (cap < 21 || !gmtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(buf, cap, "?");
	return buf;
}

size_t policy_utf8_seq(const uint8_t *p, size_t n)
{
	/* the second byte's range excludes overlong forms (e0, f0), surrogates (ed) and code
	 * points above U+10FFFF (f4) */
	uint8_t lo = p[0] == 0xe0 ? 0xa0 : p[0] == 0xf0 ? 0x90 : 0x80;
	uint8_t hi = p[0] == 0xed ? 0x9f : p[0] == 0xf4 ? 0x8f : 0xbf;
	size_t len;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++)
		if (p[i] < (i == 1 ? lo : 0x80) || p[i] > (i == 1 ? hi : 0xbf))
			return 0;
	return len;
}

json_t *policy_json_name(const char *name)
{
	const uint8_t *p = (const uint8_t *)name;
	size_t n = strlen(name), o = 0;
	json_t *j = json_string(name);
	char *buf;

	if (j)
		return j;
	if (!(buf = malloc(3 * n + 1)))
		return NULL;
	for (size_t i = 0; i < n;) {
		size_t k = policy_utf8_seq(p + i, n - i);

		if (k) {
			memcpy(buf + o, p + i, k);
			o += k;
			i += k;
		} else {
			memcpy(buf + o, "\xef\xbf\xbd", 3); /* U+FFFD */
			o += 3;
			i++;
		}
	}
	buf[o] = '\0';
	j = json_string(buf);
	free(buf);
	return j;
}

char *policy_size_text(uint64_t bytes, char *buf, size_t cap)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)bytes;
	int u = -1;

	if (bytes < 1024) {
		snprintf(buf, cap, "%" PRIu64 " bytes", bytes);
		return buf;
	}
	while (v >= 1024.0 && u < 5) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, cap, "%.2f %s (%" PRIu64 " bytes)", v, units[u], bytes);
	return buf;
}

json_t *policy_json_time(int64_t ns)
{
	char t[40];

	return ns ? json_string(policy_time_iso(ns, t, sizeof(t))) : json_null();
}

json_t *policy_step_json(const struct idx_step *s)
{
	char hex[2 * STORE_HASH_LEN + 1];
	struct store_hash dg;
	const char *layout = s->kind >= 0 && s->kind < LAYOUT_KIND_COUNT
				     ? layout_name((enum layout_kind)s->kind) : NULL;

	memcpy(dg.b, s->digest, STORE_HASH_LEN);
	store_hash_hex(&dg, hex);
	/* json_pack: "o" takes the reference of a json_t *, "s?" packs NULL as null */
	return json_pack("{s:I, s:I, s:o, s:s, s:s, s:I, s:I, s:o, s:I, s:o, s:I, s:o,"
			 " s:I, s:o, s:I, s:I, s:I, s:s?, s:b}",
			 "id", (json_int_t)s->id, "step", (json_int_t)s->step,
			 "name", policy_json_name(s->name),
			 "layout", layout ? layout : "?", "state", idx_step_state_name(s->state),
			 "dir_ino", (json_int_t)s->dir_ino,
			 "created_ns", (json_int_t)s->created_ns,
			 "created", policy_json_time(s->created_ns),
			 "sealed_ns", (json_int_t)s->sealed_ns,
			 "sealed", policy_json_time(s->sealed_ns),
			 "completed_ns", (json_int_t)s->completed_ns,
			 "completed", policy_json_time(s->completed_ns),
			 "state_changed_ns", (json_int_t)s->state_ns,
			 "state_changed", policy_json_time(s->state_ns),
			 "files", (json_int_t)s->files, "logical_bytes", (json_int_t)s->logical_bytes,
			 "stored_bytes", (json_int_t)s->stored_bytes,
			 "xxh3_128", s->has_digest ? hex : NULL, "pinned", (int)s->pinned);
}

bool policy_global_complete(const struct policy_part *parts, size_t n, unsigned nodes)
{
	size_t distinct = 0;
	bool sealed = false;

	for (size_t i = 0; i < n; i++) {
		bool seen = false;

		for (size_t j = 0; j < i && !seen; j++)
			seen = strcmp(parts[j].node, parts[i].node) == 0;
		if (!seen)
			distinct++;
		sealed |= parts[i].sealed;
	}
	return nodes > 0 && distinct == nodes && sealed;
}

/* ---- lineage (rule 6) ---- */

struct lineage_walk {
	struct idx *ix;
	enum layout_kind kind, forced;
	struct policy_lineage *l;
	unsigned seen;
	int err;
};

/*
 * The version of kind's step named name that a claim made at ts_ns names: the one that held the
 * name then (idx_step_by_name_at). A rewrite in place makes a new version and keeps the complete
 * one; whichever of them is set aside, the claim names the one at the name when it was made: a
 * new version the trainer claimed and then left torn is not stood for by the older version that
 * comes back at the name, and a version claimed stays claimed after a later rewrite of it is set
 * aside. A claim older than every row of the name (rows remade by fsck or import after the
 * claims were recorded) names the newest row that is not pruned. Returns 0, -ENOENT or the
 * index's -errno.
 */
static int claimed_row(struct idx *ix, enum layout_kind kind, const char *name, int64_t ts_ns,
		       struct idx_step *ret)
{
	int rc = idx_step_by_name_at(ix, kind, name, ts_ns, ret);

	return rc == -ENOENT ? idx_step_by_name(ix, kind, name, ret) : rc;
}

bool policy_mf1_key(const struct idx_step *s, int64_t *ret_epoch, int64_t *ret_step)
{
	long long e, st;
	int end = 0;

	if (!layout_desc(s->kind)->per_rank || sscanf(s->name, "%lld_%lld%n", &e, &st, &end) != 2 ||
	    s->name[end] != '\0')
		return false;
	*ret_epoch = e;
	*ret_step = st;
	return true;
}

/* The rank directories at the root, then each one's steps (policy_rank_steps). */
struct rank_walk {
	uint64_t *dirs;
	char (*names)[LAYOUT_NAME_MAX + 1];
	size_t ndirs, capdirs, capnames;
	const char *dir; /* the rank directory listed now */
	struct rank_step {
		enum layout_kind kind;
		int64_t epoch, step;
	} *v;
	size_t n, cap;
	int err;
};

/* idx_dir_list callback over the root: the rank_N directories */
static int rank_dir_cb(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct rank_walk *w = arg;
	struct layout_match m;

	(void)cookie;
	if (!S_ISDIR(mode) || strlen(name) > LAYOUT_NAME_MAX ||
	    layout_classify(name, LAYOUT_NONE, &m) < 0 || !layout_desc(m.kind)->per_rank ||
	    m.role != ROLE_PLAIN || m.rank < 0)
		return 0;
	if (ckpt_grow(&w->dirs, &w->capdirs, w->ndirs, sizeof(*w->dirs)) < 0 ||
	    ckpt_grow(&w->names, &w->capnames, w->ndirs, sizeof(*w->names)) < 0) {
		w->err = -ENOMEM;
		return 1;
	}
	w->dirs[w->ndirs] = ino;
	snprintf(w->names[w->ndirs++], sizeof(*w->names), "%s", name);
	return 0;
}

/* idx_dir_list callback over one rank directory: its steps, each once */
static int rank_file_cb(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct rank_walk *w = arg;
	char rel[2 * LAYOUT_NAME_MAX + 2];
	struct layout_match m;

	(void)ino;
	(void)cookie;
	if ((size_t)snprintf(rel, sizeof(rel), "%s/%s", w->dir, name) >= sizeof(rel) ||
	    policy_entry_of(rel, mode, LAYOUT_NONE, &m) != POLICY_RANK_FILE ||
	    (m.flags & LAYOUT_F_TMP))
		return 0;
	for (size_t i = 0; i < w->n; i++)
		if (w->v[i].kind == m.kind && w->v[i].epoch == m.epoch && w->v[i].step == m.step)
			return 0;
	if (ckpt_grow(&w->v, &w->cap, w->n, sizeof(*w->v)) < 0) {
		w->err = -ENOMEM;
		return 1;
	}
	w->v[w->n++] = (struct rank_step){ .kind = m.kind, .epoch = m.epoch, .step = m.step };
	return 0;
}

int policy_rank_steps(struct idx *ix, policy_rank_step_fn fn, void *arg)
{
	struct rank_walk w = { 0 };
	char name[64];
	int rc;

	/* one listing at a time (a listing is not nested in another), fn after the last */
	rc = idx_dir_list(ix, IDX_ROOT_INO, 0, rank_dir_cb, &w);
	for (size_t i = 0; rc >= 0 && w.err == 0 && i < w.ndirs; i++) {
		w.dir = w.names[i];
		rc = idx_dir_list(ix, w.dirs[i], 0, rank_file_cb, &w);
	}
	if (rc >= 0 && w.err < 0)
		rc = w.err;
	/* the row's name, as the daemon's steps_mf1_on_file makes it */
	for (size_t i = 0; rc == 0 && i < w.n; i++) {
		snprintf(name, sizeof(name), "%" PRId64 "_%" PRId64, w.v[i].epoch, w.v[i].step);
		rc = fn(w.v[i].kind, name, w.v[i].epoch, w.v[i].step, arg);
	}
	free(w.dirs);
	free(w.names);
	free(w.v);
	return rc;
}

bool policy_top_whole(const struct idx_inode *a)
{
	return S_ISREG(a->mode) && a->has_hash &&
	       !(a->flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED));
}

/* The whole step files at the root (policy_top_steps). */
struct top_walk {
	struct idx *ix;
	struct top_step {
		enum layout_kind kind;
		int64_t step;
		uint64_t ino;
		char name[LAYOUT_NAME_MAX + 1];
	} *v;
	size_t n, cap;
	int err;
};

/* idx_dir_list callback over the root: its whole top-level step files */
static int top_file_cb(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct top_walk *w = arg;
	struct layout_match m;

	(void)cookie;
	if (strlen(name) > LAYOUT_NAME_MAX ||
	    policy_entry_of(name, mode, LAYOUT_NONE, &m) != POLICY_TOP_FILE ||
	    (m.flags & LAYOUT_F_TMP))
		return 0;
	if (ckpt_grow(&w->v, &w->cap, w->n, sizeof(*w->v)) < 0) {
		w->err = -ENOMEM;
		return 1;
	}
	w->v[w->n] = (struct top_step){ .kind = m.kind, .step = m.step, .ino = ino };
	snprintf(w->v[w->n++].name, sizeof(w->v->name), "%s", name);
	return 0;
}

int policy_top_steps(struct idx *ix, policy_top_step_fn fn, void *arg)
{
	struct top_walk w = { .ix = ix };
	struct idx_inode a;
	int rc;

	rc = idx_dir_list(ix, IDX_ROOT_INO, 0, top_file_cb, &w);
	if (rc >= 0 && w.err < 0)
		rc = w.err;
	if (rc > 0)
		rc = 0;
	/* fn after the listing: it may write ix */
	for (size_t i = 0; rc == 0 && i < w.n; i++)
		if (idx_inode_get(ix, w.v[i].ino, &a) == 0 && policy_top_whole(&a))
			rc = fn(w.v[i].kind, w.v[i].name, w.v[i].step, w.v[i].ino, arg);
	free(w.v);
	return rc;
}

int64_t policy_node_step(const struct idx_step *s)
{
	int64_t e, st;

	if (!layout_desc(s->kind)->per_rank)
		return s->step;
	if (!policy_mf1_key(s, &e, &st) || e < 0 || e >= INT32_MAX || st < 0 ||
	    st >= POLICY_MF1_EPOCH_SPAN)
		return -1;
	return e * POLICY_MF1_EPOCH_SPAN + st;
}

int64_t policy_node_step_number(int kind, int64_t key)
{
	return layout_desc(kind)->per_rank && key >= 0 ? key % POLICY_MF1_EPOCH_SPAN : key;
}

/* What mf1_claimed_cb looks for: the MF1 row of step number step made last before ts_ns, and,
 * for a claim older than every row of that number, the newest such row not pruned. */
struct mf1_claim {
	int64_t step, ts_ns;
	struct idx_step best, newest;
	bool found, found_newest;
};

static int mf1_claimed_cb(const struct idx_step *s, void *arg)
{
	struct mf1_claim *c = arg;

	if (!layout_desc(s->kind)->per_rank || s->step != c->step)
		return 0;
	if (s->state != IDX_STEP_PRUNED &&
	    (!c->found_newest || s->created_ns >= c->newest.created_ns)) {
		c->newest = *s;
		c->found_newest = true;
	}
	if (s->created_ns > c->ts_ns || (c->found && s->created_ns < c->best.created_ns))
		return 0;
	c->best = *s;
	c->found = true;
	return 0;
}

/*
 * The MF1 step a claim of step number step made at ts_ns names. MindSpore's meta.json names
 * (last_epoch, last_step), and the claim keeps the step only, which restarts every epoch
 * (_checkpoint.py: "{prefix}-{epoch}_{step_in_epoch}.ckpt"): the claim is written right after
 * its step's files, so the row of that number made last before the claim is the one it names.
 * A claim older than every row of its number names the newest of them not pruned, as
 * claimed_row does: the rank's rename of its file and its meta.json write race the daemon's
 * recording of the row (a fresh run's claim of step 4, recorded first, named no row, so the
 * earlier run's claim of 10 stayed the head: test_lineage test_new_run_mf1, one run in six).
 * Costs one walk of the step rows. Returns 0, -ENOENT, or the index's -errno.
 */
static int mf1_claimed_row(struct idx *ix, int64_t step, int64_t ts_ns, struct idx_step *ret)
{
	struct mf1_claim c = { .step = step, .ts_ns = ts_ns };
	int rc = idx_step_foreach(ix, mf1_claimed_cb, &c);

	if (rc < 0)
		return rc;
	if (!c.found && !c.found_newest)
		return -ENOENT;
	*ret = c.found ? c.best : c.newest;
	return 0;
}

static int lineage_claim_cb(int64_t id, const char *tracker, int64_t step, int64_t ts_ns,
			    void *arg)
{
	struct lineage_walk *w = arg;
	enum layout_kind tk = policy_claim_kind(tracker, w->forced);
	char name[LAYOUT_NAME_MAX + 1];
	struct idx_step s;
	int rc;

	struct layout_match m;

	(void)id;
	if (++w->seen > POLICY_LINEAGE_CLAIMS)
		return 1;
	/* policy_claim_kind leaves out MF1's meta.json, a tracker of one rank (rank_N/) */
	if (tk == LAYOUT_NONE && layout_desc(w->kind)->per_rank &&
	    layout_classify(tracker, w->forced, &m) == 0 && m.role == ROLE_TRACKER &&
	    m.kind == w->kind)
		tk = w->kind;
	if (tk == LAYOUT_NONE || step < 0 || !layout_tracker_shared(tk, w->kind))
		return 0;
	if (layout_desc(w->kind)->per_rank)
		rc = tk == w->kind ? mf1_claimed_row(w->ix, step, ts_ns, &s) : -ENOENT;
	else if (layout_desc(tk)->per_rank || layout_step_dir_name(w->kind, step, name, sizeof(name)) < 0)
		return 0;
	else
		rc = claimed_row(w->ix, w->kind, name, ts_ns, &s);

	if (rc == -ENOENT || (rc == 0 && s.state != IDX_STEP_COMPLETE))
		return 0; /* a save that did not finish, or a step no longer kept: older claims */
	if (rc < 0) {
		w->err = rc;
		return 1;
	}
	w->l->claimed = true;
	w->l->head_step = step;
	w->l->head_ns = ts_ns;
	if (!policy_mf1_key(&s, &w->l->head_epoch, &w->l->head_step))
		w->l->head_epoch = 0;
	return 1;
}

/* What scan_lineage_cb has seen of a kind's complete steps, highest numbers first. */
struct scan_walk {
	int64_t num;       /* the step number being passed over */
	int64_t num_max;   /* the latest completion among the steps of that number */
	int64_t above_max; /* the latest completion among the steps numbered above it */
	int64_t last_ns;   /* the latest completion found: the head */
	int64_t since_ns;  /* above_max when the head was found */
	bool any;
};

/* idx_step_newest_each callback (complete steps of one kind, highest number first) */
static int scan_lineage_cb(const struct idx_step *s, void *arg)
{
	struct scan_walk *w = arg;

	if (policy_is_slot(s))
		return 0;
	if (!w->any || s->step != w->num) {
		if (w->any && w->num_max > w->above_max)
			w->above_max = w->num_max;
		w->num = s->step;
		w->num_max = 0;
	}
	w->any = true;
	if (s->completed_ns > w->last_ns) {
		w->last_ns = s->completed_ns;
		w->since_ns = w->above_max; /* the last completion of a step numbered above it */
	}
	if (s->completed_ns > w->num_max)
		w->num_max = s->completed_ns;
	return 0;
}

int policy_lineage(struct idx *ix, enum layout_kind kind, enum layout_kind forced,
		   struct policy_lineage *ret)
{
	struct policy_lineage l = { 0 };
	struct lineage_walk w = { ix, kind, forced, &l, 0, 0 };
	int rc;

	if (layout_tracker_shared(kind, kind)) {
		rc = idx_claim_newest_each(ix, lineage_claim_cb, &w);
		if (rc < 0)
			return rc;
		if (w.err < 0)
			return w.err;
	} else if (kind > LAYOUT_NONE && kind < LAYOUT_KIND_COUNT && !layout_desc(kind)->per_rank) {
		/* no tracker: the step completed last heads the lineage (rule 6) */
		struct scan_walk sw = { 0 };

		rc = idx_step_newest_each(ix, 1u << kind, IDX_STEP_COMPLETE, scan_lineage_cb, &sw);
		if (rc < 0)
			return rc;
		l.since_ns = sw.since_ns;
	}
	*ret = l;
	return 0;
}

bool policy_lineage_member(const struct policy_lineage *l, const struct idx_step *s)
{
	if (l->since_ns > 0 && s->completed_ns <= l->since_ns && !policy_is_slot(s))
		return false; /* saved before an earlier run's last step: that run's */
	int64_t e, st;

	if (l->claimed && policy_mf1_key(s, &e, &st)) /* MF1 steps are ordered by (epoch, step) */
		return e < l->head_epoch || (e == l->head_epoch && st <= l->head_step) ||
		       s->completed_ns > l->head_ns;
	return !l->claimed || s->step <= l->head_step || s->completed_ns > l->head_ns;
}

bool policy_is_slot(const struct idx_step *s)
{
	/* layout.h: a slot is "snapshot/K", the only step row whose name holds a '/' */
	return layout_desc(s->kind)->slot_dir != NULL && strchr(s->name, '/') != NULL;
}
