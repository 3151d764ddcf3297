/*
 * daemon.h — the daemon's state (struct ckfs), one per mount, used by the layers of fs/ that run
 * in the daemon: write/, steps/, node/ and fuse/ (docs/architecture.md "Source layout"). Each
 * layer's own header declares its functions and includes the one below it: daemon.h <-
 * write/write.h <- steps/steps.h <- fuse/fuse_int.h.
 *
 * State by owner. struct ckfs holds what the layers share (the store, the index and the tables
 * ckfs.mu guards, below) and one member per layer, each a struct defined in that layer's
 * *_state.h, which says which lock guards each field: wr (write/write_state.h), steps
 * (steps/steps_state.h), fuse (fuse/fuse_state.h); the node layer's state is its own, behind
 * the pointer node (node/node_int.h). A layer touches only its own member; another layer goes
 * through the owner's accessors (steps_settings, cq_on, write_counts, ...). The *_state.h
 * headers hold only definitions, so that this one can embed them by value without their
 * functions: calls still run one way (the `layers` test checks the libraries' symbols).
 *
 * Lock order: every mutex of fs/ has a rank in fs/core/lockrank.h, written once there and
 * checked in debug builds (ckpt_lock aborts on an out-of-order take). In short: a directory
 * snapshot and an open file's oinode.lock (a rwlock, not ranked) come before ckfs.mu; after it
 * come the node's locks, the commit queue's, the pins', an open file's fly_mu, the pools', the
 * space reserve's, the mount report's and the stats cache's, in that order. fuse.inval_mu is
 * outside the order: taken with a deadline, before ckfs.mu. cq_wait_idle is called with no lock
 * held, since the commits it waits for take oinode.lock and ckfs.mu.
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

/*
 * The three calls that run from a lower layer up to a higher one. Each stays a callback because
 * neither a return value nor a queue can replace it without a change of behaviour, of lock
 * order, or a new thread:
 *
 * on_commit (write -> steps; steps_on_commit, wired by the FUSE layer before the session, read
 *   without a lock): the committer thread (write/commit.c) is the write path's own thread, so
 *   no caller above it could take a return value. A queue drained by the step engine would
 *   need a drainer: the reaper runs every REAP_PERIOD_NS, and cq_wait_idle promises that once
 *   it returns the steps of the files closed before are judged (a tracker read after a close
 *   sees the step, commit.c "What still waits"); draining there would move the step engine's
 *   work, and fs->mu, onto every reader of a tracker. Called with no lock held.
 * flush_inval (steps -> FUSE; fs_flush_inval, wired like on_commit): the reaper is the step
 *   engine's own thread and the only sender when no request comes; the names it queues
 *   (steps_inval_queue) are otherwise sent only by a later opendir or release. A return value
 *   has nobody to go to. Called with no lock held (the send may wait on a directory lock the
 *   kernel holds for a request that waits on fs->mu).
 * global_ok (steps -> node; node.c global_ok): a question the step engine asks in the middle
 *   of a judgement, retention or a tracker answer, with fs->mu held, about the node layer's
 *   sets (under node->mu, CKPT_RANK_NODE, after fs->mu). A queue cannot answer a question; a
 *   copy of the sets kept in the step engine would have the node thread take fs->mu to update
 *   it. Written under fs->mu (node_open, node_stop), called with fs->mu held; NULL: one node,
 *   every complete step counts.
 * step_complete (steps -> node; node.c step_complete): a step became complete here
 *   (steps_set_state), so the node thread publishes it now rather than at its next tick.
 *   Wired and called as global_ok (under fs->mu); takes only node->mu, to wake the thread.
 */
struct ckfs;
struct ckfs_upcalls {
	void (*on_commit)(struct ckfs *fs, struct oinode *oi, pid_t pid, bool torn);
	void (*flush_inval)(struct ckfs *fs);
	bool (*global_ok)(struct ckfs *fs, const struct idx_step *s);
	void (*step_complete)(struct ckfs *fs);
};

/*
 * Daemon-wide state: one per mount, made by the FUSE layer (fuse/daemon.c serve), which
 * starts and stops each layer in order; lives until the daemon exits.
 *
 * mu (CKPT_RANK_FS) is one lock, by design for now, over the index connection ix, the
 * open-inode table otab (write/oinode.c), the lookup table ltab (write/inode.c) and the step
 * engine's state (steps, as steps_state.h says): a step's judgement reads index rows and open
 * files' state and writes rows in one critical section, and the FUSE requests that resolve
 * paths read the same rows. Splitting it needs an order between the index and the tables that
 * every one of those sections keeps; lockrank.h is where such a split would be written.
 */
struct ckfs {
	struct ckpt_repo *repo;  /* owned; set before the session, then read-only */
	struct idx *ix;          /* borrowed from repo; guarded by mu */
	struct store *st;        /* borrowed from repo; thread-safe */
	pthread_mutex_t mu;      /* guards ix, otab, ltab and most of steps; after oinode.lock */
	struct oinode *otab[OTAB_BUCKETS]; /* open inodes (write/oinode.c); guarded by mu */
	struct lookup_ent *ltab[LTAB_BUCKETS]; /* lookup counts (write/inode.c); guarded by mu */
	struct write_state wr;   /* the write path's (fs/write/write_state.h): its pools, the
				    staging directory, the mtime clock and counters; no lock of
				    its own: set before the session, atomics, pools self-locked */
	struct steps_state steps; /* the step engine's (fs/steps/steps_state.h): its settings,
				      threads, /.ckptfs inodes, report, invalidation queue;
				      mostly guarded by mu, as said there */
	struct fuse_state fuse;  /* the FUSE layer's (fs/fuse/fuse_state.h): the session, the
				    invalidation sender's inval_mu, read-ahead tuning, the
				    whole-store figures' cache and its stats.mu */
	struct ckfs_upcalls up;  /* calls from a lower layer up to a higher one (above) */
	struct node *node;       /* the node layer's state (fs/node/node_int.h), or NULL: set by
				    node_open before the session, cleared under mu by node_stop */
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
