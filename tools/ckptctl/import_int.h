/*
 * import_int.h — what import.c (scanning, steps, claims, the command, the report),
 * import_file.c (reading one regular file into the store) and import_mount.c (importing through
 * the mount of a mounted store) share.
 *
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
 *      files: fs/steps/steps.c invariant 3); each top-level step directory gets a step row when it is
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
 *   6. A mounted store is never written by ckptctl (main.c invariant 1): its import copies DIR
 *      into the mount point, and the daemon chunks, judges and seals what it receives as it does
 *      a trainer's writes. Step 1 is the same; names taken in the mount refuse the import before
 *      anything is written; each file is written, then fsynced (durable in the index when that
 *      returns); top-level trackers are written last, only after every file of the steps they
 *      seal, and not when one of those could not be copied, so a crash mid-import leaves no
 *      tracker naming a half-copied step. The figures of step 2 (chunks, dedup) are the
 *      daemon's and are not reported; a step's state is the index's when the import ends.
 */
#ifndef CKPTCTL_IMPORT_INT_H
#define CKPTCTL_IMPORT_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "fs/policy/layout.h"

#include "ctl.h"

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
	bool replayed;    /* through a mount: the trainer's earlier write of this tracker, for an
			     older step, written again (DIR keeps only the last) */
};

/* A file or directory that could not be imported. */
struct imp_fail {
	char *path;   /* owned: relative to DIR */
	char *reason; /* owned */
};

struct imp_ctx {
	const char *root, *src;
	bool json; /* --json */
	char mnt[PATH_CAP]; /* importing through a mount (invariant 6): its mount point; else "" */
	struct ckpt_repo *r;
	bool at_root; /* the destination is the mount root: steps and trackers apply */
	int64_t begun_ns; /* when the import began recording (ns since the epoch): the time of
			     the rows of per-rank steps, made before any claim */
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
	uint64_t files_total, files_done; /* regular files to read, and read (or failed) */
	struct ctl_progress prog;
	struct timespec start;
};

/* One chunk to put. */
struct imp_put {
	const uint8_t *p; /* borrowed: bytes in imp_ctx.buf */
	size_t len;
	struct store_chunk_info info;
	int rc; /* store_chunk_put's */
};

/* imp_txn - make sure a transaction is open. Returns 0 or -errno of the index. */
int imp_txn(struct imp_ctx *c);

/*
 * imp_commit - make the chunks put so far durable (store_sync), then commit the open
 * transaction, if any. Returns 0, -EIO (store_sync), or -errno of the index (rolled back).
 */
int imp_commit(struct imp_ctx *c);

/*
 * imp_inode - create inode *a named name in directory parent (open transaction); a directory
 * adds a link to its parent. @target: a symlink's target, NULL for anything else.
 * @ret_ino: the new inode number, untouched on failure.
 * Returns 0 or -errno of the index.
 */
int imp_inode(struct imp_ctx *c, uint64_t parent, const char *name, struct idx_inode *a,
	      const char *target, uint64_t *ret_ino);

/* imp_attr - the attributes of source st for a new inode, into *a (cleared first). */
void imp_attr(const struct stat *st, struct idx_inode *a);

/*
 * imp_fail_add - record that rel could not be imported, and why (printf-style); step is the
 * index of the step it belongs to (which then cannot complete), -1 for none.
 * Returns 0 or -ENOMEM.
 */
int imp_fail_add(struct imp_ctx *c, int step, const char *rel, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* import_progress - ctl_progress_work with the import's counts (files and bytes read). */
void import_progress(struct imp_ctx *c, bool force);

/* imp_elapsed - seconds since the import began (c->start, CLOCK_MONOTONIC). */
double imp_elapsed(const struct imp_ctx *c);

/*
 * imp_report - the result on stdout: text, or one JSON object with --json (fields in
 * ckptctl(8)); through a mount (c->mnt set), the daemon's figures (stored bytes, chunks, dedup)
 * are not known and shown as null, and "mount" names the mount point. dest: as given.
 */
void imp_report(struct imp_ctx *c, const char *dest, double secs);

/*
 * imp_tracker_read - read top-level tracker c->v[i] whole from DIR (at most IMPORT_TRACKER_MAX
 * bytes) and parse it into *ret: its kind, a printable preview, the step it names (-1: none).
 * @ret_buf: its bytes, owned by the caller (free()); NULL when empty. @ret_len: their count.
 * Returns 1 (read), 0 (could not be read: recorded as a failure; outputs untouched), or -ENOMEM.
 */
int imp_tracker_read(struct imp_ctx *c, size_t i, struct imp_claim *ret, char **ret_buf,
		     size_t *ret_len);

/*
 * imp_claim_keep - append *claim to c->claims, for the report, and mark the steps of c->steps
 * it seals (policy rule 2 without history: a plain directory keeps only the last claim), in
 * their sealed_by and its sealed count. Returns 0 or -ENOMEM.
 */
int imp_claim_keep(struct imp_ctx *c, const struct imp_claim *claim);

/*
 * imp_mounted - import the scanned DIR through the mount c->mnt of store c->root (c->r open
 * read-only) into dest (relative to the mount root, created if absent): invariant 6. Prints
 * the report, or why it stopped. Returns the exit status: EXIT_OK, EXIT_DAMAGE (some entry of
 * DIR could not be read or created: listed; the rest was imported), or EXIT_ERROR (nothing
 * written, a name being taken; or the mount failed a write, the import stopping there).
 */
int imp_mounted(struct imp_ctx *c, const char *dest);

/*
 * imp_file_open - open regular file path of entry e for reading into *ret_fd (owned: close(2)),
 * its attributes into *ret_st. Returns 0, 1 (recorded as failed: it cannot be opened or is no
 * longer a regular file), or -ENOMEM.
 */
int imp_file_open(struct imp_ctx *c, const struct imp_ent *e, const char *path, int *ret_fd,
		  struct stat *ret_st);

/*
 * imp_file - import regular file c->v[i] into directory parent (an inode number): chunks into
 * the store, then its inode, dentry and extents into the open transaction. A file that cannot
 * be read (or changes while read) is recorded as a failure (imp_fail_add) and left out.
 * Returns 0 (imported or recorded as failed), -ENOMEM, or -errno of the store or the index
 * (fatal; what failed is printed).
 */
int imp_file(struct imp_ctx *c, size_t i, uint64_t parent);

#endif /* CKPTCTL_IMPORT_INT_H */
