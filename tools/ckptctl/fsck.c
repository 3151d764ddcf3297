/*
 * fsck.c — ckptctl fsck: check and repair a store that is not mounted: salvage a damaged
 * index file, check the index's consistency and orphans, then verify.
 */
#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/policy/layout.h"

#include "ctl.h"

struct fsck_ctx {
	struct ckpt_repo *r;
	bool json; /* --json */
	struct ctl_progress prog;
	char **lost; /* owned lines */
	size_t nlost, caplost;
};

static int fsck_chunk_info(const uint8_t hash[IDX_HASH_LEN], uint32_t *raw_size,
			   uint32_t *stored_size, uint8_t *codec, void *arg)
{
	struct fsck_ctx *c = arg;
	struct store_chunk_info ci;
	struct store_hash h;
	int rc;

	memcpy(h.b, hash, IDX_HASH_LEN);
	rc = store_chunk_stat(c->r->st, &h, &ci);
	if (rc == -ENOENT || rc == -EBADMSG || rc == -EIO)
		return 0; /* missing or unreadable header: marked bad, verify names the files */
	if (rc < 0)
		return rc;
	*raw_size = ci.raw_size;
	*stored_size = ci.stored_size;
	*codec = ci.codec;
	return 1;
}

static void fsck_lost(uint64_t ino, const char *line, void *arg)
{
	struct fsck_ctx *c = arg;
	char path[1024] = "", *dup;

	if (ino && c->r->ix && idx_path(c->r->ix, ino, path, sizeof(path)) > 0) {
		size_t n = strlen(line) + strlen(path) + 8;

		dup = malloc(n);
		if (dup)
			snprintf(dup, n, "%s: %s", path, line);
	} else {
		dup = strdup(line);
	}
	if (!dup || ckpt_grow(&c->lost, &c->caplost, c->nlost, sizeof(*c->lost)) < 0) {
		free(dup);
		return;
	}
	c->lost[c->nlost++] = dup;
}

/*
 * fsck_salvage - the index file is damaged: copy what is readable into STORE/index.db.salvage,
 * repair it, then swap it in; the damaged file is kept as index.db.damaged-TIME (with its -wal).
 * The exclusive lock is held throughout, so no daemon sees a half-made index.
 */
static int fsck_salvage(struct fsck_ctx *c, const char *root, char *kept, size_t keptcap)
{
	char db[4096], tmp[4200], aside[4200], from[4300], to[4400], t[32];
	struct idx_salvage_report rep;
	struct idx_repair_stats rs;
	struct idx *nix = NULL;
	time_t now = time(NULL);
	int rc;

	snprintf(db, sizeof(db), "%s/index.db", root);
	snprintf(tmp, sizeof(tmp), "%s.salvage", db);
	strftime(t, sizeof(t), "%Y%m%dT%H%M%S", gmtime(&now));
	snprintf(aside, sizeof(aside), "%s.damaged-%s", db, t);
	for (const char *sfx = ""; sfx; sfx = !*sfx ? "-wal" : !strcmp(sfx, "-wal") ? "-shm" : NULL) {
		snprintf(from, sizeof(from), "%s%s", tmp, sfx);
		unlink(from); /* an earlier fsck that was interrupted */
	}
	rc = idx_open(tmp, 0, getuid(), getgid(), ckpt_now_ns(), &nix);
	if (rc < 0) {
		ctl_err("cannot create '%s': %s; nothing was changed", tmp, strerror(-rc));
		return rc;
	}
	rc = idx_salvage(nix, db, &rep);
	if (rc < 0) {
		ctl_err("cannot salvage the damaged index '%s' into '%s': %s; nothing was changed",
			db, tmp, strerror(-rc));
		goto fail;
	}
	for (int i = 0; i < IDX_SALVAGE_TABLES; i++) {
		const struct idx_salvage_table *x = &rep.table[i];

		if (!c->json)
			printf("fsck: table %-11s %8" PRIu64 " rows copied%s%s%s\n",
			       idx_salvage_table_name(i), x->copied,
			       x->unreadable ? ", unreadable: every row lost" : "",
			       x->damaged_ranges ? ", rows on damaged pages lost" : "",
			       x->rejected ? ", malformed rows lost" : "");
		if (x->unreadable || x->damaged_ranges) {
			char line[160];

			snprintf(line, sizeof(line), "index table '%s': %s",
				 idx_salvage_table_name(i),
				 x->unreadable ? "unreadable, every row lost"
					       : "rows on damaged pages lost");
			fsck_lost(0, line, c);
		}
		if (x->rejected) {
			char line[160];

			snprintf(line, sizeof(line), "index table '%s': %" PRIu64 " malformed rows "
				 "(a missing value or a duplicate key) lost",
				 idx_salvage_table_name(i), x->rejected);
			fsck_lost(0, line, c);
		}
	}
	if (!c->json && rep.extents_from_index)
		printf("fsck: %" PRIu64 " extents recovered from the table's extents_hash index\n",
		       rep.extents_from_index);
	struct ckpt_repo tmp_repo = *c->r;

	tmp_repo.ix = nix; /* fsck_lost resolves paths in the new index */
	struct fsck_ctx nc = *c;

	nc.r = &tmp_repo;
	struct idx_repair_ops ops = { fsck_chunk_info, fsck_lost, &nc };

	rc = idx_repair(nix, &ops, &rs);
	c->lost = nc.lost;
	c->nlost = nc.nlost;
	c->caplost = nc.caplost;
	if (rc < 0) {
		ctl_err("cannot repair the salvaged index '%s': %s; nothing was changed", tmp,
			strerror(-rc));
		goto fail;
	}
	idx_close(nix);
	nix = NULL;
	/* swap: the damaged file (and its WAL, which belongs to it by name) aside, the new in */
	idx_close(c->r->ix);
	c->r->ix = NULL;
	for (const char *sfx = ""; sfx; sfx = !*sfx ? "-wal" : !strcmp(sfx, "-wal") ? "-shm" : NULL) {
		snprintf(from, sizeof(from), "%s%s", db, sfx);
		snprintf(to, sizeof(to), "%s%s", aside, sfx);
		if (rename(from, to) < 0 && errno != ENOENT) {
			rc = -errno;
			ctl_err("cannot move '%s' aside: %s; the salvaged index is '%s'", from,
				strerror(-rc), tmp);
			return rc;
		}
	}
	if (rename(tmp, db) < 0) {
		rc = -errno;
		ctl_err("cannot move '%s' to '%s': %s; the damaged index is kept as '%s': rename "
			"'%s' to '%s' by hand", tmp, db, strerror(-rc), aside, tmp, db);
		return rc;
	}
	ctl_fsync_path(root);
	snprintf(kept, keptcap, "%s", aside);
	rc = idx_open(db, 0, getuid(), getgid(), ckpt_now_ns(), &c->r->ix);
	if (rc < 0)
		ctl_err("cannot open the rebuilt index '%s': %s", db, strerror(-rc));
	return rc;
fail:
	idx_close(nix);
	for (const char *sfx = ""; sfx; sfx = !*sfx ? "-wal" : !strcmp(sfx, "-wal") ? "-shm" : NULL) {
		snprintf(from, sizeof(from), "%s%s", tmp, sfx);
		unlink(from);
	}
	return rc;
}

/* Root entries collected by fsck_steps. */
struct fsck_root_ent {
	char name[NAME_MAX + 1];
	uint64_t ino;
	uint32_t mode;
};

struct fsck_roots {
	struct fsck_root_ent *v;
	size_t n, cap;
};

static int fsck_root_collect(const char *name, uint64_t ino, uint32_t mode, int64_t cookie,
			     void *arg)
{
	struct fsck_roots *l = arg;

	if (!S_ISDIR(mode) || strlen(name) >= sizeof(l->v[0].name))
		return 0;
	if (ckpt_grow(&l->v, &l->cap, l->n, sizeof(*l->v)) < 0)
		return -ENOMEM;
	snprintf(l->v[l->n].name, sizeof(l->v[0].name), "%s", name);
	l->v[l->n].ino = ino;
	l->v[l->n].mode = mode;
	l->n++;
	return 0;
}

/* The recorded claims that are steps, for fsck_steps. */
struct fsck_claims {
	struct {
		enum layout_kind kind;
		int64_t step;
	} *v;
	size_t n, cap;
};

static int fsck_claim_collect(int64_t id, const char *tracker, const void *content, size_t len,
			      int64_t step, int64_t ts_ns, void *arg)
{
	struct fsck_claims *l = arg;
	enum layout_kind kind = policy_claim_kind(tracker, LAYOUT_NONE);

	(void)id;
	(void)content;
	(void)len;
	(void)ts_ns;
	if (kind == LAYOUT_NONE || step < 0)
		return 0;
	if (ckpt_grow(&l->v, &l->cap, l->n, sizeof(*l->v)) < 0)
		return -ENOMEM;
	l->v[l->n].kind = kind;
	l->v[l->n].step = step;
	l->n++;
	return 0;
}

/* What fsck_marker_cb looks for: the whole commit marker of the step directory dir, and the
 * layout its markers say it is. */
struct fsck_marker {
	struct idx *ix;
	const char *dir;
	char found[NAME_MAX + 1]; /* the first whole marker's name, "" when none */
	enum layout_kind kind;    /* the step's layout: its name's, then policy_marker_kind's for
				   each marker in it (Orbax's settles an all-digit name) */
};

static int fsck_marker_cb(const char *name, uint64_t ino, uint32_t mode, int64_t cookie,
			  void *arg)
{
	struct fsck_marker *k = arg;
	char rel[PATH_CAP];
	struct layout_match m;
	struct idx_inode a;

	(void)cookie;
	if (!S_ISREG(mode))
		return 0;
	snprintf(rel, sizeof(rel), "%s/%s", k->dir, name);
	if (policy_entry_of(rel, mode, LAYOUT_NONE, &m) != POLICY_MARKER || !policy_marker_seals(&m))
		return 0;
	/* every marker, whole or not, says whose the step is, as it does to the daemon, which
	 * takes the kind when the marker is named */
	k->kind = policy_marker_kind(k->kind, k->dir, &m, LAYOUT_NONE);
	if (k->found[0] || idx_inode_get(k->ix, ino, &a) < 0 || !a.has_hash ||
	    (a.flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED)))
		return 0;
	snprintf(k->found, sizeof(k->found), "%s", name);
	return 0;
}

/*
 * fsck_seal_why - why root step directory e (layout *kind, number step) is sealed, by policy
 * rule 2: its whole marker, or a recorded claim naming it or a later step of a layout sharing
 * its tracker (the claims recorded may be only the last ones of a plain directory imported, so
 * fsck, like import, takes a later claim for the earlier steps). *kind becomes the layout its
 * markers say (policy_marker_kind). Returns 1 sealed (why in buf), 0 not, or -errno.
 */
static int fsck_seal_why(struct fsck_ctx *c, const struct fsck_root_ent *e, const
			 struct fsck_claims *cl, enum layout_kind *kind, int64_t step, char *buf,
			 size_t cap)
{
	struct fsck_marker k = { .ix = c->r->ix, .dir = e->name, .kind = *kind };
	int rc = idx_dir_list(c->r->ix, e->ino, 0, fsck_marker_cb, &k);

	if (rc < 0)
		return rc;
	*kind = k.kind;
	if (k.found[0]) {
		snprintf(buf, cap, "its marker '%s'", k.found);
		return 1;
	}
	for (size_t i = 0; i < cl->n; i++) {
		enum policy_seal how = policy_claim_seals(cl->v[i].kind, cl->v[i].step, *kind,
							  step, false);

		if (how != POLICY_SEAL_NONE) {
			snprintf(buf, cap, "a tracker claim of step %lld", (long long)cl->v[i].step);
			return 1;
		}
	}
	return 0;
}

/*
 * fsck_steps - every step directory at the root without a row (a salvage lost it, or the row
 * was deleted) gets one again, sealed when the policy's evidence survives (fsck_seal_why), so
 * the daemon judges it at the next mount (complete if every file is whole); without that
 * evidence it stays unsealed, and the daemon sets it aside as abandoned. An all-digit directory
 * is a step only with its marker (policy rule 1): without one it gets no row. A per-rank
 * layout's step without a row gets one from its ranks' files (ctl_rank_step_rows).
 * Returns the number of rows made, or -errno.
 */
static int fsck_steps(struct fsck_ctx *c)
{
	struct fsck_roots l = { 0 };
	struct fsck_claims cl = { 0 };
	int64_t now = ckpt_now_ns();
	int rc, made = 0;

	rc = idx_dir_list(c->r->ix, IDX_ROOT_INO, 0, fsck_root_collect, &l);
	if (rc >= 0)
		rc = idx_claim_foreach(c->r->ix, fsck_claim_collect, &cl);
	if (rc >= 0)
		rc = idx_begin(c->r->ix);
	for (size_t i = 0; rc >= 0 && i < l.n; i++) {
		struct layout_match m;
		enum layout_kind kind;
		struct idx_step st;
		char line[NAME_MAX + 640], why[NAME_MAX + 64];
		enum policy_entry pe;
		int64_t id;

		pe = policy_entry_of(l.v[i].name, S_IFDIR, LAYOUT_NONE, &m);
		if ((pe != POLICY_STEP_DIR && pe != POLICY_CANDIDATE) ||
		    idx_step_by_dir(c->r->ix, l.v[i].ino, &st) == 0)
			continue;
		kind = m.kind;
		if ((rc = fsck_seal_why(c, &l.v[i], &cl, &kind, m.step, why, sizeof(why))) < 0)
			break;
		bool sealed = rc == 1;

		if (pe == POLICY_CANDIDATE && !sealed) {
			rc = 0;
			continue; /* a digit directory without its marker is no step (rule 1) */
		}
		rc = idx_step_create(c->r->ix, kind, l.v[i].name, m.step, l.v[i].ino, now, &id);
		if (rc < 0)
			break;
		made++;
		if (sealed) {
			snprintf(line, sizeof(line), "fsck: record lost; sealed again by %s", why);
			rc = idx_step_set_state(c->r->ix, id, IDX_STEP_SEALED, now, line);
			snprintf(line, sizeof(line), "step '%s': its record was lost; sealed again by "
				 "%s, judged at the next mount", l.v[i].name, why);
		} else {
			snprintf(line, sizeof(line), "step '%s': its record was lost and nothing "
				 "shows it was finished; the next mount sets it aside "
				 "(/.ckptfs/quarantine, files kept)", l.v[i].name);
		}
		fsck_lost(0, line, c);
	}
	/* a per-rank layout's steps (no directory) from their ranks' files, dated 0: when they
	 * were made is lost, and the claims recorded may be the last ones of a plain directory
	 * imported, each standing for the earlier steps (as the claims above, rule 2 without
	 * history); the daemon judges them at the next mount from the files and those claims */
	if (rc >= 0 && (rc = ctl_rank_step_rows(c->r->ix, 0)) > 0) {
		char line[160];

		snprintf(line, sizeof(line), "%d step%s of per-rank files: their records were lost; "
			 "made again, judged at the next mount", rc, rc == 1 ? "" : "s");
		fsck_lost(0, line, c);
		made += rc;
	}
	/* a root step file (Lightning) is its step, complete when whole: its record is made
	 * again from the file and the check recorded at its close */
	if (rc >= 0 && (rc = ctl_top_step_rows(c->r->ix, ckpt_now_ns())) > 0) {
		char line[160];

		snprintf(line, sizeof(line), "%d step%s of whole root step files: their records "
			 "were lost; made again, complete", rc, rc == 1 ? "" : "s");
		fsck_lost(0, line, c);
		made += rc;
	}
	if (rc >= 0)
		rc = idx_commit(c->r->ix);
	if (rc < 0)
		idx_rollback(c->r->ix);
	free(l.v);
	free(cl.v);
	return rc < 0 ? rc : made;
}

/*
 * fsck_index - steps 1 and 2: SQLite's integrity check of the index file, salvaged when it
 * fails (*ret_damaged set, why in msg, msgcap bytes; the damaged file's new name in kept,
 * keptcap bytes), else idx_check and idx_repair of the index's own invariants; then the index
 * must pass idx_check; then the step directories without a row get one (fsck_steps).
 * Returns 0, or -1 (printed).
 */
static int fsck_index(struct fsck_ctx *c, const char *root, bool *ret_damaged, char *msg,
		      size_t msgcap, char *kept, size_t keptcap)
{
	struct idx_repair_stats rs = { 0 };
	bool damaged_index = false;
	char why[512];
	int rc;

	if (c->r->index_err < 0) {
		damaged_index = true;
		snprintf(msg, msgcap, "cannot be opened: %s", strerror(-c->r->index_err));
	} else {
		rc = idx_integrity(c->r->ix, false, msg, msgcap);
		if (rc == -EUCLEAN)
			damaged_index = true;
		else if (rc < 0) {
			ctl_err("cannot check the index of store '%s': %s", root, strerror(-rc));
			return -1;
		}
	}
	*ret_damaged = damaged_index;
	if (!c->json)
		printf("fsck: index: %s%s\n", damaged_index ? "damaged: " : "whole",
		       damaged_index ? msg : "");
	if (damaged_index) {
		char line[640];

		snprintf(line, sizeof(line), "index file damaged (%s)", msg);
		fsck_lost(0, line, c);
		if (fsck_salvage(c, root, kept, keptcap) < 0)
			return -1;
		if (!c->json)
			printf("fsck: index rebuilt from what was readable; the damaged file is kept "
			       "as '%s'\n", kept);
	} else if (idx_check(c->r->ix, why, sizeof(why)) == -EUCLEAN) {
		/* 2. a whole file can still break the index's own invariants */
		struct idx_repair_ops ops = { fsck_chunk_info, fsck_lost, c };

		if (!c->json)
			printf("fsck: index inconsistent: %s\n", why);
		rc = idx_repair(c->r->ix, &ops, &rs);
		if (rc < 0) {
			ctl_err("cannot repair the index of store '%s': %s; nothing was "
				"changed", root, strerror(-rc));
			return -1;
		}
	}
	if (idx_check(c->r->ix, why, sizeof(why)) == -EUCLEAN) {
		ctl_err("the index of store '%s' is still inconsistent after repair: %s", root,
			why);
		return -1;
	}
	/* 2b. step directories without a row get one again */
	if ((rc = fsck_steps(c)) < 0) {
		ctl_err("cannot record the steps of store '%s' again: %s", root, strerror(-rc));
		return -1;
	}
	return 0;
}

/*
 * fsck_set_aside - move every chunk file the index does not name into STORE/lost+found (made
 * 0700 if absent), out of reach of any later sweep, and say so: they are all that is left of
 * what an index lost. Returns 0, or -1 (printed).
 */
static int fsck_set_aside(struct fsck_ctx *c, const char *root, uint64_t *ret_files)
{
	struct gc_count g = { .ix = c->r->ix };
	char dir[PATH_MAX], b[64];
	int rc;

	if (snprintf(dir, sizeof(dir), "%s/lost+found", root) >= (int)sizeof(dir)) {
		ctl_err("store path '%s' is too long", root);
		return -1;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		ctl_err("cannot create '%s': %s; nothing was moved", dir, strerror(errno));
		return -1;
	}
	g.set_aside = dir;
	rc = ctl_gc_scan(c->r, &g, &c->prog, "fsck", "chunk files scanned");
	if (rc == 0)
		rc = store_sync(c->r->st);
	if (rc == 0)
		rc = ctl_fsync_path(dir);
	ctl_progress_clear(&c->prog);
	if (rc < 0) {
		ctl_err("cannot move the chunk files no index names into '%s': %s; the ones not "
			"moved are still in the store", dir, strerror(-rc));
		return -1;
	}
	*ret_files = g.files;
	if (!c->json && g.files)
		printf("fsck: kept %" PRIu64 " chunk files (%s) that no file of the index names in "
		       "'%s': their file names are lost; delete them once nothing there is wanted\n",
		       g.files, policy_size_text(g.bytes, b, sizeof(b)), dir);
	return 0;
}

/*
 * fsck_sweep - step 3: unlinked inodes, chunk rows and files nothing uses (counts into
 * *inodes, *chunks). After a salvage or a rebuild (keep) the index is not the one that wrote
 * the chunks, so a chunk file it does not name is not proven garbage: it is kept in
 * STORE/lost+found (fsck_set_aside, count into *kept) and nothing is deleted.
 * Returns 0, or -1 (printed).
 */
static int fsck_sweep(struct fsck_ctx *c, const char *root, bool keep, uint64_t *inodes,
		      uint64_t *chunks, uint64_t *kept)
{
	int rc;

	if (keep) {
		if (fsck_set_aside(c, root, kept) < 0)
			return -1;
	} else {
		/* one call into fs/: a status, no amounts */
		ctl_progress_init(&c->prog);
		if (ctl_progress_due(&c->prog, true))
			ctl_progress_line(&c->prog, "fsck: removing unlinked inodes and "
					  "unreferenced chunks");
		rc = ckpt_repo_sweep(c->r, inodes, chunks);
		if (rc < 0) {
			ctl_err("cannot sweep store '%s': %s", root, strerror(-rc));
			return -1;
		}
		ctl_progress_clear(&c->prog);
	}
	if (!c->json) {
		if (!keep)
			printf("fsck: removed %" PRIu64 " unlinked inodes and %" PRIu64
			       " unreferenced chunks\n", *inodes, *chunks);
		for (size_t i = 0; i < c->nlost; i++)
			printf("lost: %s\n", c->lost[i]);
	}
	return 0;
}

/*
 * fsck_rebuilt - say what REPO_REBUILD did to an absent index (nothing when it was there), and
 * record it as a loss: the steps saved after the backup are not in it.
 */
static void fsck_rebuilt(struct fsck_ctx *c, const char *root)
{
	char line[PATH_MAX + 256], when[64];
	time_t t = (time_t)(c->r->backup_ns / 1000000000);

	if (c->r->rebuilt == REPO_REBUILT_NONE)
		return;
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", gmtime(&t));
	if (c->r->rebuilt == REPO_REBUILT_FROM_BACKUP)
		snprintf(line, sizeof(line), "index file missing or empty: restored '%s/index.db.bak' "
			 "(made at the clean unmount of %s); what was written after it is not in it",
			 root, when);
	else
		snprintf(line, sizeof(line), "index file missing or empty and no backup: started a "
			 "new index; every file name is lost");
	if (!c->json)
		printf("fsck: %s\n", line);
	fsck_lost(0, line, c);
}

/* fsck_report_json - the result as one JSON document. Returns 0 or -EIO (output failed). */
static int fsck_report_json(const struct fsck_ctx *c, const char *root, bool damaged_index,
			    enum repo_rebuilt rebuilt_how, const char *msg, const char *kept,
			    uint64_t inodes, uint64_t chunks, uint64_t aside)
{
	static const char *const rebuilt[] = { "no", "from_backup", "new" };

	json_t *o = json_object(), *a = json_array();

	for (size_t i = 0; i < c->nlost; i++)
		json_array_append_new(a, policy_json_name(c->lost[i]));
	json_object_set_new(o, "store", json_string(root));
	json_object_set_new(o, "index_damaged", json_boolean(damaged_index));
	json_object_set_new(o, "index_message", damaged_index ? json_string(msg) : json_null());
	json_object_set_new(o, "damaged_index_kept_as", kept[0] ? json_string(kept) : json_null());
	json_object_set_new(o, "inodes_removed", ctl_u64(inodes));
	json_object_set_new(o, "chunks_removed", ctl_u64(chunks));
	json_object_set_new(o, "index_rebuilt", json_string(rebuilt[rebuilt_how]));
	json_object_set_new(o, "chunks_kept_in_lost_found", ctl_u64(aside));
	json_object_set_new(o, "lost", a);
	return ctl_print("ckptfs-fsck/1", o);
}

static int fsck_run(const char *root, bool json, bool rebuild)
{
	struct fsck_ctx c = { .json = json };
	char err[1024] = "", msg[512] = "", kept[4400] = "";
	uint64_t inodes = 0, chunks = 0, aside = 0;
	bool damaged_index = false;
	int rc, status = EXIT_ERROR, vstatus;

	rc = ckpt_repo_open(root, REPO_EXCLUSIVE | REPO_SALVAGE | (rebuild ? REPO_REBUILD : 0),
			    NULL, err, sizeof(err), &c.r);
	if (rc < 0) {
		ctl_err("%s%s", err[0] ? err : strerror(-rc),
			rc == -EBUSY ? "; fsck needs the store unmounted" : "");
		return EXIT_ERROR;
	}
	fsck_rebuilt(&c, root);
	/* 1. and 2.: the index file, then the index's invariants */
	if (fsck_index(&c, root, &damaged_index, msg, sizeof(msg), kept, sizeof(kept)) < 0)
		goto out;
	/* 3. what nothing uses */
	if (fsck_sweep(&c, root, damaged_index || c.r->rebuilt != REPO_REBUILT_NONE, &inodes,
		       &chunks, &aside) < 0)
		goto out;
	enum repo_rebuilt rebuilt = c.r->rebuilt;

	ckpt_repo_close(c.r);
	c.r = NULL;
	/* 4. every chunk and file re-read: bad chunks are recorded, damaged files named */
	if (!json)
		printf("fsck: verifying every chunk and file\n");
	vstatus = json ? EXIT_OK : ctl_verify(root, "fsck", false);
	if (json && fsck_report_json(&c, root, damaged_index, rebuilt, msg, kept, inodes, chunks,
				     aside) < 0)
		goto out;
	if (vstatus == EXIT_ERROR)
		goto out;
	status = (c.nlost || damaged_index || vstatus == EXIT_DAMAGE) ? EXIT_DAMAGE : EXIT_OK;
	if (!json)
		printf("fsck: %s\n", status == EXIT_OK ? "clean" :
		       vstatus == EXIT_OK ? "damage found and repaired: every file left verifies "
		       "whole; the lines 'lost:' above say what could not be kept" :
		       "damage found: the lines 'lost:' and 'damaged:' above say what; steps with "
		       "damaged files are no longer resolved by trackers");
out:
	for (size_t i = 0; i < c.nlost; i++)
		free(c.lost[i]);
	free(c.lost);
	ckpt_repo_close(c.r);
	return status;
}

int cmd_fsck(const struct ctl_opts *o)
{
	return fsck_run(o->root, o->json, o->rebuild);
}
