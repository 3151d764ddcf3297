/*
 * daemon.h — the daemon's shared state (struct ckfs), one per mount, used by the layers of fs/
 * that run in the daemon: write/, steps/ and fuse/ (docs/architecture.md "Source layout"). Each
 * layer's own header declares its functions and includes the one below it: daemon.h <-
 * write/write.h <- steps/steps.h <- fuse/fuse_int.h.
 *
 * Lock order (never take a lock to the left while holding one to the right):
 *   oinode.lock  ->  ckfs.mu  ->  pins.mu
 *   oinode.lock  ->  ckfs.mu  ->  wb_pool.mu (a leaf: meta.c reads its figures under mu);
 *   oinode.lock -> oinode.fly_mu (a leaf: the pool's lock is taken after releasing it)
 *   oinode.lock -> ra_pool.mu (a leaf: ra_note_read queues chunks under the read lock)
 *   ckfs.mu -> commit_q.mu (a leaf: cq_busy under mu); cq_wait_idle is called with no lock
 *   held, since the commits it waits for take oinode.lock and ckfs.mu
 *   ckfs.mu -> mount_report.mu (a leaf: the step engine notes what the mount sets aside)
 * ckfs.mu guards the index connection and the open-inode table; oinode.lock guards one file's
 * content state; pins.mu guards the pin table and the unlink of chunk files; fly_mu guards what the
 * writer, the file's cutter, the workers and readers share (struct oinode, invariant 6).
 */
#ifndef CKPTFS_FS_DAEMON_H
#define CKPTFS_FS_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "fs/ckptfs.h"
#include "fs/core/lockrank.h"
#include "fs/core/workers.h"
#include "fs/fuse/fuse_state.h"
#include "fs/steps/steps_state.h"
#include "fs/write/write_state.h"

struct oinode;
#define OTAB_BUCKETS 1024
#define LTAB_BUCKETS 4096

/* How many lookups of an inode the kernel holds (FUSE lookup count, decremented by forget). */
struct lookup_ent {
	uint64_t ino;
	uint64_t n;
	struct lookup_ent *next;
};


/* Virtual tracker inodes: VINO_BASE + layout kind (index inodes never get this high). */
#define VINO_BASE (1ull << 56)
/* The tracker of rank R of the per-rank layout (layout_per_rank_kind: MindFormers 1.0's
 * rank_R/meta.json), R < VINO_RANK_MAX */
#define VINO_RANK_MAX (1u << 20)
#define VINO_RANK_META(rank) (VINO_BASE + 4096 + (uint64_t)(rank))

/* Daemon-wide state: one per mount. */
struct ckfs {
	struct ckpt_repo *repo;
	struct idx *ix;          /* borrowed from repo; guarded by mu */
	struct store *st;        /* borrowed from repo; thread-safe */
	pthread_mutex_t mu;      /* guards ix, otab; after oinode.lock, before pins.mu */
	struct oinode *otab[OTAB_BUCKETS];
	struct lookup_ent *ltab[LTAB_BUCKETS]; /* guarded by mu */
	struct write_state wr;   /* the write path's (fs/write/write_state.h): its pools, the
				    staging directory, the mtime clock and counters; no lock of
				    its own: set before the session, atomics, pools self-locked */
	struct steps_state steps; /* the step engine's (fs/steps/steps_state.h): its settings,
				      threads, /.ckptfs inodes, report, invalidation queue;
				      mostly guarded by mu, as said there */
	struct fuse_state fuse;  /* the FUSE layer's (fs/fuse/fuse_state.h): the session, the
				    invalidation sender's inval_mu, read-ahead tuning, the
				    whole-store figures' cache and its stats.mu */
	/* Upcalls from a lower layer to a higher one, set once before the session starts (the
	 * FUSE layer wires them; NULL: nothing to tell): the write path's committer tells the step
	 * engine of a committed file (steps_on_commit), the step engine asks the FUSE layer to send
	 * the queued invalidations (fs_flush_inval). Called with no lock held. */
	void (*on_commit)(struct ckfs *fs, struct oinode *oi, pid_t pid, bool torn);
	void (*flush_inval)(struct ckfs *fs);
	/* With -o remote (the node layer, fs/node/): is step row s globally complete (policy
	 * rule 5), with the other nodes' files of it in this namespace? NULL: one node, every
	 * complete step counts. Called with mu held. */
	bool (*global_ok)(struct ckfs *fs, const struct idx_step *s);
	struct node *node;       /* the node layer's state, or NULL (fs/node/node.c) */
};

/*
 * fs_lock, fs_unlock - take and release fs->mu for a critical section whose index reads share one
 * read transaction (idx_hold): a path resolved in a FUSE request reads tens of rows, and each
 * read in a transaction of its own costs SQLite's WAL lock and unlock. A section entered with
 * fs_lock leaves with fs_unlock (or fs_reply_entry); it may drop fs->mu in the middle with
 * the plain calls, as sections entered with pthread_mutex_lock do.
 */
static inline void fs_lock(struct ckfs *fs)
{
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	idx_hold(fs->ix);
}

static inline void fs_unlock(struct ckfs *fs)
{
	idx_unhold(fs->ix);
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
}

#endif /* CKPTFS_FS_DAEMON_H */
