/*
 * write_state.h — the write path's part of the daemon's state (struct write_state, the member
 * `wr` of struct ckfs, fs/daemon.h): its pools, the staging directory, the clock of mtimes and
 * the counters the status and metrics show.
 *
 * Owner: the write path (the files of fs/write/). Only its files read or write these fields;
 * another layer goes through write.h (write_configure, write_staging_open, write_close,
 * write_counts, write_durable_hist, cq_on, wb_figures, and the pools' start and stop). This
 * header holds only definitions (no functions, no include of daemon.h) so that daemon.h can
 * embed the struct by value.
 *
 * Locks: none of its own, none needed. The pool pointers and the staging fd are set before the
 * session starts and cleared after it ends (one thread); each pool guards itself with its own
 * lock (CKPT_RANK_COMMIT, _PINS, _WB, _RA, _SPACE, fs/core/lockrank.h). defer is written once
 * before the session. The clock and the counters are atomics, read and written by any thread
 * with no lock.
 */
#ifndef CKPTFS_FS_WRITE_STATE_H
#define CKPTFS_FS_WRITE_STATE_H

#include <stdatomic.h>
#include <stdint.h>

#include "fs/ckptfs.h"

struct pins;
struct wb_pool;
struct commit_q;
struct ra_pool;
struct space;

/* -o defer_compress: when a worker stores a chunk raw, to be compressed when idle (wb.c) */
enum { FS_DEFER_AUTO = 0, FS_DEFER_NEVER = 1, FS_DEFER_ALWAYS = 2 };

/* The write path's state: one per mount, the member `wr` of struct ckfs. */
struct write_state {
	int staging_dirfd;       /* STORE/staging, for O_TMPFILE staging files; -1 none */
	struct pins *pins;       /* the pin table (pins.c); owned */
	struct wb_pool *wb;      /* write-back workers (wb.c); NULL: chunks stored inline */
	struct commit_q *cq;     /* close-time committer (commit.c); NULL: flush commits itself */
	struct ra_pool *ra;      /* read-ahead threads (ra.c); NULL: none */
	struct space *space;     /* free space reserved for bytes not yet on disk (space.c); NULL:
				    writes are not held to it */
	int defer;               /* -o defer_compress: FS_DEFER_AUTO, _NEVER or _ALWAYS */
	_Atomic int64_t last_ns; /* last timestamp handed out (monotonic mtimes, ckfs_now) */
	_Atomic uint64_t n_staging; /* files switched to a staging copy (writes out of order) */
	_Atomic uint64_t n_deferred; /* chunks the workers stored raw for later (STORE_PUT_DEFER) */
	_Atomic uint64_t n_recoded;  /* deferred chunks compressed since the mount */
	struct ckpt_hist durable_hist; /* a file's close to its content durable (commit.c) */
};

/* The initial value of a struct write_state: no staging directory open (fd 0 is not ours). */
#define WRITE_STATE_INIT { .staging_dirfd = -1 }

#endif /* CKPTFS_FS_WRITE_STATE_H */
