/*
 * fuse_state.h — the FUSE layer's part of the daemon's state (struct fuse_state, the member
 * `fuse` of struct ckfs, fs/daemon.h): the session and the sending of kernel invalidations,
 * the kernel read-ahead tuning, and the cache of the whole-store figures for status and
 * metrics.
 *
 * Owner: the FUSE layer (the files of fs/fuse/). No other layer reads or writes these fields.
 * This header holds only definitions (no functions, no include of daemon.h or of libfuse) so
 * that daemon.h can embed the struct by value.
 *
 * Locks: each part says which guards it. inval_mu is outside the lock order (lockrank.h): it
 * is taken with a deadline, before ckfs.mu. stats.mu (CKPT_RANK_STATS) and stats.kept_mu
 * (CKPT_RANK_STATS_KEPT) are leaves never held with ckfs.mu.
 */
#ifndef CKPTFS_FS_FUSE_STATE_H
#define CKPTFS_FS_FUSE_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "fs/ckptfs.h"

struct fuse_session;

/*
 * /.ckptfs/status and the metrics' whole-store figures (meta.c fs_meta_stats), read on a
 * reader connection of their own so that a scan of the index does not hold ckfs.mu.
 */
struct fs_stats_cache {
	pthread_mutex_t mu;      /* held across a scan (CKPT_RANK_STATS); guards ix, failed and
				    version; never held with ckfs.mu */
	pthread_mutex_t kept_mu; /* guards valid and figures (CKPT_RANK_STATS_KEPT), written with
				    mu held too; held only to copy them: a lookup of
				    /.ckptfs/status waiting for a scan held every other lookup in
				    /.ckptfs (meta.c) */
	struct idx *ix;          /* owned, read-only; NULL until the first read or if it failed */
	bool failed;             /* ix could not be opened: figures read under ckfs.mu */
	bool valid;              /* figures holds the figures at data version `version` */
	int64_t version;
	struct idx_stats figures;
};

/*
 * The kernel's read-ahead for the mount (daemon.c fs_tune_read_ahead) and ckptfs's own
 * (-o readahead_mb, handed to ra_start). window and bdi are set before the session starts and
 * read-only after; tuned is an atomic, so any thread reads these with no lock.
 */
struct fs_ra_tune {
	uint64_t window;         /* -o readahead_mb, bytes */
	char bdi[64];            /* /sys/class/bdi/MAJ:MIN/read_ahead_kb of the mount, or "" */
	_Atomic bool tuned;      /* fs_tune_read_ahead has run */
};

/* The FUSE layer's state: one per mount, the member `fuse` of struct ckfs. */
struct fuse_state {
	struct fuse_session *se; /* set by mount_session before the session loop; NULL before,
				    and then no invalidation is sent (fs_flush_inval) */
	pthread_mutex_t inval_mu; /* fs_flush_inval: one sender at a time, from the take to the
				     last send; taken with a deadline, before ckfs.mu */
	struct fs_ra_tune ra;
	struct fs_stats_cache stats;
};

#endif /* CKPTFS_FS_FUSE_STATE_H */
