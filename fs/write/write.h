/*
 * write.h — the write path (fs/write/): the content of open regular files (struct oinode: the
 * bytes written, cut into chunks by the write-back workers and made durable by a commit), the
 * close-time committer, chunk pins in the store, and inode lifetime (the kernel's lookup
 * counts). It owns struct oinode and the open-inode table, the write-back pool and the pins,
 * and its part of the daemon's state, fs->wr (struct write_state, write_state.h).
 *
 * May call: core (fs/ckptfs.h), the policy (it does not need to), index/ and store/. It knows
 * nothing of steps or FUSE: the committer tells the layer above of a committed file through
 * fs->up.on_commit (daemon.h).
 */
#ifndef CKPTFS_FS_WRITE_H
#define CKPTFS_FS_WRITE_H

#include "fs/daemon.h"

/* ---- the write path's state (struct write_state, write_state.h) for the layers above ---- */

/* write_configure - set -o defer_compress (FS_DEFER_*). Once, before the session starts. */
static inline void write_configure(struct ckfs *fs, int defer)
{
	fs->wr.defer = defer;
}

/*
 * pins_start - make the pin table (fs->wr.pins), before steps_init (the step engine's recovery
 * pins and releases chunks). Returns 0 or -ENOMEM. One thread, before the session.
 */
int pins_start(struct ckfs *fs);

/*
 * write_staging_open - open STORE/staging (which must exist: the caller makes it) as the
 * directory of the staging copies of files written out of order (fs->wr.staging_dirfd),
 * without following a link. Returns 0 or the -errno of openat(2) (-ELOOP, -ENOTDIR: a link or
 * not a directory). One thread, before the session.
 */
int write_staging_open(struct ckfs *fs);

/* write_close - free the pin table and close the staging directory, after every pool has
 * stopped (teardown, one thread). Safe on a write path never started (WRITE_STATE_INIT). */
void write_close(struct ckfs *fs);

/* What the write path counted since the mount, for status and metrics (write_counts). */
struct write_counts {
	uint64_t staging;        /* files switched to a staging copy (writes out of order) */
	uint64_t deferred;       /* chunks the workers stored raw for later */
	uint64_t recoded;        /* deferred chunks compressed since */
	int defer;               /* -o defer_compress: FS_DEFER_AUTO, _NEVER or _ALWAYS */
	bool readahead;          /* the read-ahead threads run (ra_start) */
};

/* write_counts - the write path's counters into *ret. Any thread, no lock (atomics). */
static inline void write_counts(struct ckfs *fs, struct write_counts *ret)
{
	ret->staging = atomic_load(&fs->wr.n_staging);
	ret->deferred = atomic_load(&fs->wr.n_deferred);
	ret->recoded = atomic_load(&fs->wr.n_recoded);
	ret->defer = fs->wr.defer;
	ret->readahead = fs->wr.ra != NULL;
}

/* write_durable_hist - the histogram of a file's close to its content durable (seconds), for
 * the metrics. Borrowed for the mount's life; lock-free (struct ckpt_hist). */
static inline struct ckpt_hist *write_durable_hist(struct ckfs *fs)
{
	return &fs->wr.durable_hist;
}

/*
 * A buffer of bytes appended to a file (oinode.c stream_append), in file order: WB_SEG bytes of
 * capacity, or exactly one chunk's bytes when a chunk that spans two segments is copied out of
 * them (oinode.c cut_emit). Shared by the file's segment list and the jobs pointing into it;
 * freed, and its bytes given back to the pool's budget (wb_release), with the last reference.
 */
struct seg {
	struct seg *next;       /* the file's segment list (oinode.fly_mu) */
	uint64_t off;           /* file offset of buf[0] */
	size_t len;             /* bytes written, charged to the budget; only the writer (holding
				   oinode.lock for writing) grows it, under fly_mu */
	size_t cap;             /* bytes */
	size_t resident;        /* bytes of buf charged to the budget: len for a fresh segment
				   buffer, cap for one reused from the pool (wb_seg_get); for a
				   spanning chunk's copy, the most it held */
	_Atomic unsigned refs;  /* the list's + one per job whose buf points into buf */
	uint8_t *buf;
};

/*
 * Segment capacity, bytes: STORE_CHUNK_MAX, so that a chunk (at most that long) spans at most
 * two segments. A chunk that does (about one in four at the 1 MiB average chunk) is copied out
 * of them by the cutter, on a worker; the others are stored from the segment in place.
 */
#define WB_SEG (2 * STORE_CHUNK_MAX)

/*
 * One chunk cut from a file being written, on its way to the store through the write-back pool
 * (wb.c). off/len/oi/seg are set by the cutter and then fixed; buf, seg, done, err and info
 * change under oi->fly_mu, and the worker that sets done never touches the job or its oinode
 * after releasing fly_mu (the file may be freed as soon as fly_busy reaches 0). Owned by the
 * oinode's in-flight list; freed at harvest.
 */
struct fly_job {
	struct fly_job *next;   /* the file's in-flight list, in file order (oinode.fly_mu) */
	struct fly_job *qnext;  /* the pool's queue (wb_pool.mu) */
	struct oinode *oi;
	uint64_t off;           /* file offset, bytes */
	uint32_t len;           /* bytes, 1..STORE_CHUNK_MAX */
	uint8_t *buf;           /* the raw bytes, inside seg, until done */
	struct seg *seg;        /* holds a reference until done (then NULL) */
	uint32_t held;          /* bytes of it reserved in fs->wr.space (struct oinode invariant 7),
				   given back by the worker once it is stored or failed */
	bool done;
	int err;                /* when done: 0 or the -errno of pins_chunk_put */
	struct store_chunk_info info; /* when done and err == 0: the stored chunk, pinned */
};

/* Cutter states (oinode.cut_state). */
enum { CUT_IDLE, CUT_QUEUED, CUT_RUNNING };

/*
 * Content state of one regular file that is open (or being truncated). Two modes:
 *  stream:  extents ext[0..n_ext) cover [0, ext_end); the in-flight chunks fly_head.. (stored
 *           by the write-back pool, not yet harvested into ext) cover [ext_end, cut_start);
 *           bytes [cut_start, data_end) are in the segments seg_head.. (which may also hold
 *           bytes before cut_start that in-flight chunks point into); bytes [data_end, size) are
 *           zeros not yet cut (a file grown by truncate or fallocate, as fio and preallocating
 *           writers do before writing it in order). A write at data_end is an append: the
 *           writer copies its bytes into the segments and nothing else; the file's cutter (on a
 *           worker, or inline) feeds them to the chunker and the hasher, and each chunk it cuts
 *           goes to the pool as a job.
 *  staging: stage_fd (an unlinked O_TMPFILE in STORE/staging) holds all bytes [0, size), a
 *           sparse file whose holes are the file's (SEEK_DATA/SEEK_HOLE find them at commit);
 *           entered on the first write that is not at data_end and not made in place in
 *           the stored extents (oi_overwrite.c), a truncate below data_end that is not to 0,
 *           or a hole punched (fallocate).
 * Invariants:
 *   1. stream: data_end <= size, the extents lie in [0, ext_end) in order (a gap between them,
 *      or after the last one up to ext_end, is a hole: zeros) and the in-flight chunks tile
 *      [ext_end, cut_start) — unless fly_lost (a chunk in flight failed: err is set, bytes past
 *      ext_end are gone and reads of them fail until a truncate to 0). Commit records the
 *      zeros [data_end, size) as a hole (no chunk, O(1) in its length).
 *   2. Every chunk put since the last successful commit is listed in pins[] and pinned.
 *   3. dirty == false means the index holds exactly this content.
 *   4. The chunker's state cdc covers [cut_start, cut_start + cdc.len) (cdc.len <
 *      STORE_CHUNK_MAX), and hasher, when hash_ok, has consumed exactly [0, cut_start +
 *      cdc.len). Both belong to the cutter while cut_state != CUT_IDLE.
 *   5. Commit, staging, truncate and the last oi_put first drain (oi_fly_drain: wait for the
 *      cutter, cut the rest inline, wait for fly_busy == 0, harvest), so cdc then covers
 *      exactly [cut_start, data_end), nothing is in flight, and the mode can change.
 *   6. Only the writer (holding lock for writing) appends to the segment list, grows data_end
 *      and schedules the cutter; the cutter (holding no oinode lock: writers wait for budget
 *      with it held) advances cut_start, appends jobs and drops segments below cut_start but
 *      never seg_tail. Both do so under fly_mu, where readers see them.
 *   7. Free space (space.c): the bytes this file holds reserved in fs->wr.space are its stream
 *      bytes [max(cut_start, space_mark), data_end) (not yet cut; space_mark <= data_end)
 *      plus stage_held, plus the held bytes of its jobs in flight. A write reserves its raw
 *      bytes before taking them (-ENOSPC when they do not fit); a job gives its bytes back
 *      once stored (or failed); a commit gives back what it stored (the stream's provisional
 *      last chunk: space_mark moves to data_end; a staging file: stage_held); bytes dropped
 *      unstored (oi_stream_cut_back, the last oi_put) are given back with them. Staging
 *      bytes count once per write (a rewrite counts twice) until the commit: the staging
 *      file is on the disk already, and its chunks will be too, before it is deleted.
 */
struct oinode {
	uint64_t ino;
	struct oinode *next;    /* otab chain; guarded by ckfs.mu */
	unsigned refs;          /* open handles + transient users; guarded by ckfs.mu */
	pthread_rwlock_t lock;  /* guards everything below but the fly_mu part */

	struct idx_extent *ext;
	size_t n_ext, cap_ext;
	uint64_t ext_end;
	int stage_fd;
	uint64_t size;
	struct store_hasher *hasher; /* invariant 4 */
	bool hash_ok;
	struct store_hash *pins;
	size_t n_pins, cap_pins;
	bool dirty;
	int err; /* sticky error of a failed chunk put or cut, reported by write/flush/fsync */
	bool fly_lost;          /* invariant 1's exception */
	struct store_cdc cdc;   /* invariant 4 */
	uint64_t stage_held;    /* invariant 7: bytes, staging mode */
	uint64_t patched;       /* bytes cut again in place since the last commit (oi_overwrite.c) */

	pthread_mutex_t fly_mu; /* a leaf: guards the fields below */
	pthread_cond_t fly_cv;  /* a job of this file finished, or its cutter went idle */
	struct fly_job *fly_head, *fly_tail; /* in-flight chunks, file order */
	unsigned fly_busy;      /* jobs submitted and not finished */
	struct seg *seg_head, *seg_tail; /* invariant 6 */
	uint64_t cut_start;     /* start of the chunk being cut: end of the in-flight range */
	uint64_t data_end;      /* end of the bytes written; zeros follow up to size */
	uint64_t space_mark;    /* invariant 7: stream bytes below it hold no reservation; moved
				   only when drained (invariant 5), so the cutter reads it freely */
	int cut_state;          /* CUT_IDLE, CUT_QUEUED (in the pool's queue), CUT_RUNNING */
	int cut_err;            /* the cutter stopped: -ENOMEM (moved to err by the harvest) */
	struct oinode *cut_qnext; /* the pool's cutter queue (wb_pool.mu) */

	/* Attribute overlay for getattr while dirty; readable without lock. */
	_Atomic uint64_t ov_size;
	_Atomic int64_t ov_mtime;
	_Atomic bool ov_dirty;
	/* bytes taken by write() since the last commit (a rewrite counts twice): what st_blocks
	 * shows before the commit, capped at ov_size, as ext4's delayed allocation reserves the
	 * blocks written and not a hole */
	_Atomic uint64_t ov_written;
	/* committer jobs queued for this inode and not yet started (commit.c): a release may leave
	 * the commit to them */
	_Atomic int cq_waiting;
	/* read-ahead (ra.c): where the last read ended, and up to where chunks are queued */
	_Atomic uint64_t ra_last, ra_to;
};

/* ---- pins.c: chunks in the store (pins, put, free, deferred compression) ---- */

/* pins_new - an empty pin table, or NULL (ENOMEM). pins_free accepts NULL. */
struct pins *pins_new(void);
void pins_free(struct pins *p);

/*
 * pins_chunk_put - pin the digest of buf, then store it (store_chunk_put_hashed with flags: 0 or
 * STORE_PUT_DEFER). A stored copy the index marks bad is deleted and written again (never a
 * dedup target), and the mark cleared. On failure the pin is dropped. Returns 0 or the -errno
 * of store_chunk_put. Thread-safe; takes fs->mu, so the caller must not hold it.
 */
int pins_chunk_put(struct ckfs *fs, const void *buf, size_t len, unsigned flags,
		   struct store_chunk_info *ret);

/* pins_chunk_unpin - drop one pin of h. Thread-safe. */
void pins_chunk_unpin(struct ckfs *fs, const struct store_hash *h);

/*
 * pins_chunk_free - delete chunk h's file unless it is pinned (a write in progress uses it).
 * Call after the index transaction that dropped its row committed. Errors other than ENOENT are
 * returned (the file is then an orphan, swept by recovery or ckptctl gc). Thread-safe.
 */
int pins_chunk_free(struct ckfs *fs, const struct store_hash *h);

/*
 * pins_recode_idle - compress chunks stored deferred (store_chunk_recode), a batch at a time,
 * recording each one's new codec and stored size in the index, until none is left or the pool
 * has work again (wb_busy). A chunk whose bytes no longer match its digest is marked bad.
 * Returns true when deferred chunks may remain (it yielded to work), false when none is left
 * or a failure (logged) makes trying again now pointless. Runs on a worker; takes fs->mu per
 * batch, never for a chunk's I/O. Chunk-level work like the rest of pins.c (store and
 * index); the pool (wb.c) only decides when it runs.
 */
bool pins_recode_idle(struct ckfs *fs);


/* ---- wb.c: the write-back pool ---- */

/* Most workers a pool runs (wb_start caps nthreads; -o workers refuses more). */
#define WB_MAX_THREADS 16

/*
 * wb_start - start nthreads (1..WB_MAX_THREADS, capped) workers cutting and storing chunks with a budget of
 * `budget` bytes of written data in memory (wb.c invariant 1); sets fs->wr.wb. Returns 0, -EINVAL
 * (0 budget or threads), -ENOMEM, or the -errno of pthread_create when not even one worker could
 * start. Call before serving requests.
 */
int wb_start(struct ckfs *fs, size_t budget, unsigned nthreads);
/* wb_stop - run every queued cutter and job, join the workers, free the pool (NULL fs->wr.wb is
 * fine). Call after the last request (op_destroy's commits). */
void wb_stop(struct ckfs *fs);
/* wb_submit - queue job j (its oinode's fly_busy already counts it) and return; never waits,
 * never fails. Any lock but pool.mu may be held. */
void wb_submit(struct wb_pool *p, struct fly_job *j);
/* wb_cut_schedule - queue a run of oi's cutter (oi_cut_run), which the caller has just moved
 * from CUT_IDLE to CUT_QUEUED under oi->fly_mu; returns at once. Caller holds oi's write lock
 * and not fly_mu. */
void wb_cut_schedule(struct wb_pool *p, struct oinode *oi);
/*
 * wb_reserve - charge n bytes about to be written into a segment to the budget; waits while
 * used + n > budget and the pool has work that will free some (backpressure: writers wait, never
 * fail). wb_charge - the same without waiting (the cutter's copy of a chunk spanning two
 * segments: it cannot wait for the writers it serves). wb_release - give n bytes back (a segment
 * freed). NULL p: no-ops. Thread-safe; take the pool's lock (a leaf).
 */
void wb_reserve(struct wb_pool *p, size_t n);
void wb_charge(struct wb_pool *p, size_t n);
void wb_release(struct wb_pool *p, size_t n);
/*
 * wb_seg_get - a buffer of size bytes (WB_SEG, or STORE_CHUNK_MAX for the copy of a chunk
 * spanning two segments) kept from a freed segment, with *ret_charged bytes of it already
 * counted in the budget (they cover every page of it touched: the segment's resident), or NULL
 * and 0 (none kept, another size, or NULL p: malloc a fresh one). The caller owns it until
 * wb_seg_free.
 * wb_seg_free - free a segment's buffer of cap bytes of which resident are charged (and no page
 * beyond them touched, except in a fresh WB_SEG buffer, populated whole): kept for reuse when of
 * a kept size (a WB_SEG one only when all of it is charged), else freed and resident bytes
 * given back. NULL p: free(3). Thread-safe; take the pool's lock (a leaf).
 */
uint8_t *wb_seg_get(struct wb_pool *p, size_t size, size_t *ret_charged);
void wb_seg_free(struct wb_pool *p, uint8_t *buf, size_t cap, size_t resident);
/*
 * wb_should_defer - whether the job a worker is about to store should go to disk raw
 * (STORE_PUT_DEFER), to be compressed when the pool is idle: -o defer_compress=always; or
 * auto and the workers are behind (at least WB_DEFER_QUEUE jobs wait) and store_defer_pays.
 * NULL p: false. Thread-safe; takes the pool's lock (a leaf).
 * wb_note_deferred - a worker stored a chunk deferred: the pool will look for deferred chunks
 * to compress once idle (pins_recode_idle). Thread-safe.
 */
bool wb_should_defer(struct wb_pool *p);
void wb_note_deferred(struct wb_pool *p);
/* wb_busy - whether the pool has a cutter or job queued or running, or is stopping: an idle
 * task (pins_recode_idle) should yield. NULL p: false. Thread-safe. */
bool wb_busy(struct wb_pool *p);
/*
 * wb_figures - budget, bytes in flight now, bytes of buffers kept for reuse now (wb.c invariant
 * 5), peak of the two together, workers of fs's write-back pool; all bytes, all 0 without a
 * pool. Takes the pool's lock (CKPT_RANK_WB). Thread-safe.
 */
void wb_figures(struct ckfs *fs, size_t *ret_budget, size_t *ret_used, size_t *ret_kept,
		size_t *ret_peak, unsigned *ret_threads);
/*
 * wb_default_budget - the default -o write_buffer: RAM/8 clamped to [64 MiB, 16 GiB], bytes.
 * RAM/8 is about the kernel's own allowance for dirty page cache before background write-back
 * starts (vm.dirty_background_ratio, 10% of available memory, Documentation/admin-guide/sysctl/
 * vm.rst): a save as large as what the page cache would absorb returns at memory speed.
 */
size_t wb_default_budget(void);
/*
 * wb_default_threads - the default -o workers: WB_WORKERS_PER_CPU (2) per online CPU, at most
 * WB_MAX_THREADS. Two per CPU because a worker waits for each chunk's disk write (wb.c).
 */
unsigned wb_default_threads(void);

/* ---- space.c: free space reserved for bytes written and not yet on the store's disk ---- */

/*
 * space_start - start reserving the store's free space for written bytes (space.c); sets
 * fs->wr.space (fs->repo open). Returns 0 or -ENOMEM. Without it (NULL fs->wr.space) every
 * call below is a no-op that succeeds: writes are not held to the free space.
 * space_stop - free it (NULL fs->wr.space is fine). Call after the last write and wb_stop.
 */
int space_start(struct ckfs *fs);
void space_stop(struct ckfs *fs);
/*
 * space_reserve - reserve n bytes (raw, as written) of the store's free space for bytes about to
 * be accepted and not yet on disk. Returns 0 (reserved: give them back with space_release once
 * stored or dropped) or -ENOSPC (nothing reserved: the reserved bytes, n and a margin do not fit
 * in the free space, less STORE/reserve's 8 MiB when it is not held, seen by an fstatvfs taken
 * after the call began). Usually an atomic add and a check of a sample at most 50 ms old;
 * near the limit, or with a stale sample, one fstatvfs and fstatat. Thread-safe; any lock may
 * be held (space.c's own lock is a leaf).
 * space_release - give back n bytes reserved (stored on the disk, or dropped). Thread-safe,
 * lock-free.
 */
int space_reserve(struct ckfs *fs, uint64_t n);
void space_release(struct ckfs *fs, uint64_t n);

/* ---- ra.c: read-ahead of stored chunks for sequential readers ---- */

/* -o readahead_mb: the default (four STORE_CHUNK_MAX chunks past the kernel's own 4 MiB window:
 * tests/bench/RESULTS.md "Read-ahead"), the most accepted, and the threads (one per CPU of the
 * machine this was measured on: a load is a disk read then a decode) */
#define RA_DEFAULT_MB 16
#define RA_MAX_MB 1024
#define RA_THREADS 2
/* the threads on a node of a job (-o remote), whose loads fetch from the remote: ra_start's cap */
#define RA_THREADS_REMOTE 4

/*
 * ra_start - start nthreads (1..4, capped) threads loading the chunks ahead of sequential readers
 * into the chunk cache, at most window bytes ahead of each (-o readahead_mb); sets fs->wr.ra.
 * window 0 or nthreads 0: no read-ahead, fs->wr.ra stays NULL, returns 0. Returns 0, -ENOMEM,
 * or the -errno of pthread_create when not even one thread could start. Call before serving
 * requests.
 * ra_stop - drop what is queued, join the threads, free the pool (NULL fs->wr.ra is fine). Call
 * after the last request.
 */
int ra_start(struct ckfs *fs, uint64_t window, unsigned nthreads);
void ra_stop(struct ckfs *fs);
/*
 * ra_note_read - a read of [off, off + len) of oi (stream mode; staging mode is ignored) was
 * served: when it continues a sequential run, queue the stored chunks up to the window past its
 * end (ra.c). Never waits for a load, never fails. Caller holds oi->lock (read or write); takes
 * the pool's lock (a leaf). NULL fs->wr.ra: no-op.
 */
void ra_note_read(struct ckfs *fs, struct oinode *oi, uint64_t off, size_t len);

/* ---- commit.c: the close-time committer ---- */

/*
 * cq_start - start the committer thread, which also checkpoints the index's WAL from then on
 * (commit.c invariant 7); sets fs->wr.cq. Returns 0, -ENOMEM, or the -errno of pthread_create.
 * Call before serving requests. Without it, flush commits on its own thread and commits
 * checkpoint as SQLite does by default.
 */
int cq_start(struct ckfs *fs);
/* cq_stop - run every queued commit, join the thread, free the queue (NULL fs->wr.cq is fine).
 * Call after the last request, before op_destroy's own commits and steps_stop. No lock held. */
void cq_stop(struct ckfs *fs);
/*
 * cq_submit - queue a commit of oi (then steps_on_commit(oi, pid, torn)) and return at once;
 * takes its own reference on oi. Returns 0, -ENOSYS (no committer), -ENOMEM or -ESHUTDOWN;
 * on error nothing is queued and the caller commits itself. Caller holds no lock.
 */
int cq_submit(struct ckfs *fs, struct oinode *oi, pid_t pid, bool torn);
/* cq_on - does fs have a committer (cq_start ran, cq_stop not yet)? Any thread, no lock: the
 * queue is made before the session and freed after it. */
static inline bool cq_on(const struct ckfs *fs)
{
	return fs->wr.cq != NULL;
}
/* cq_flush_soon - have the committer commit the index's deferred transaction (idx_flush) within
 * about CQ_LINGER_NS, unless another commit does first (commit.c invariant 8). Any lock may be
 * held (cq's lock is a leaf); no-op without a committer. */
void cq_flush_soon(struct ckfs *fs);
/* cq_flush_now - commit the index's deferred transaction now (idx_flush under fs->mu), for a
 * reader on another index handle that must see every file created before it; logs what a
 * failure lost. Caller holds no lock. */
void cq_flush_now(struct ckfs *fs);
/* cq_busy - is a commit queued or running? Any lock may be held (cq's lock is a leaf). */
bool cq_busy(struct ckfs *fs);
/* cq_wait_idle - wait until every commit queued before the call has finished (returns at once
 * without a committer). Caller holds no lock: the commits take oinode locks and fs->mu. */
void cq_wait_idle(struct ckfs *fs);

/* ---- oinode.c (table, writes), oi_cut.c (cutter), oi_read.c (reads, seek), oi_commit.c ---- */

/*
 * oi_cut_run - a worker runs oi's queued cutter (wb.c): feeds the bytes written since its last
 * run to the chunker and the hasher, and submits each chunk cut as a job, until it has caught
 * up with data_end; then sets cut_state back to CUT_IDLE, after which the caller must not touch
 * oi (it may be freed). A failure to allocate stops it with cut_err set. No lock held.
 */
void oi_cut_run(struct ckfs *fs, struct oinode *oi);
/*
 * oi_job_run - store job j (pins_chunk_put), publish the result on it under its file's fly_mu
 * and drop its segment reference; the caller must not touch j or its file afterwards. No lock
 * held.
 */
void oi_job_run(struct ckfs *fs, struct fly_job *j);

/*
 * oi_get - the open-inode state of regular file ino, creating and loading it from the index
 * (extents, size) when absent; takes a reference. Caller holds fs->mu.
 * Returns 0, -ENOENT, -ENOMEM, or an index error.
 */
int oi_get(struct ckfs *fs, uint64_t ino, struct oinode **ret);

/*
 * oi_get_created - the open-inode state of regular file attr->ino, created (size 0, no extents:
 * idx_inode_create) in the caller's fs->mu section and not yet in the table: made from *attr
 * without reading the index; takes the first reference. Caller holds fs->mu.
 * Returns 0 or -ENOMEM.
 */
int oi_get_created(struct ckfs *fs, const struct idx_inode *attr, struct oinode **ret);

/* oi_find - the state of ino if it exists (no reference taken), else NULL. Caller holds fs->mu. */
struct oinode *oi_find(struct ckfs *fs, uint64_t ino);

/*
 * oi_next_dirty - an open inode whose content is not durable (ov_dirty) and has not failed
 * (no err), with a reference taken for the caller (oi_put), or NULL when none is left: the
 * unmount's last commits (op_destroy). Caller holds fs->mu.
 */
struct oinode *oi_next_dirty(struct ckfs *fs);

/*
 * oi_put - drop a reference (fs->mu NOT held; takes it). On the last one: discards uncommitted
 * chunks, frees the state, and deletes the inode from the index when its nlink is 0.
 */
void oi_put(struct ckfs *fs, struct oinode *oi);

/*
 * oi_read - copy up to len bytes at off into buf (read lock taken inside).
 * Returns bytes copied (0 at or past the end), -EIO (a chunk is missing or fails its checksum;
 * the chunk is marked bad in the index), -ENOMEM.
 */
ssize_t oi_read(struct ckfs *fs, struct oinode *oi, void *buf, size_t len, uint64_t off);

/* A read's bytes as segments, most of them in place in the chunk cache (oi_read_iov). */
#define OI_READV_MAX 16
struct oi_readv {
	struct iovec iov[OI_READV_MAX]; /* iov[0..n): the bytes read, in order */
	int n;
	struct store_hold *hold[OI_READV_MAX]; /* hold[0..n_hold): what keeps them valid */
	int n_hold;
};

/*
 * oi_read_iov - oi_read without copying what the chunk cache holds: read up to len bytes at off
 * as segments rv->iov[0..rv->n) (at most OI_READV_MAX), each either in place in a cached chunk
 * (held: store_chunk_hold) or in scratch (len bytes, caller's), where the bytes that are not in
 * a stored chunk (bytes not yet cut, in-flight chunks, zeros, a staging file) and any past the segment
 * limit are copied, at their offset from off. Returns what oi_read returns; rv is then valid
 * (rv->n == 0 for 0 bytes or an error) and the caller must call oi_readv_release after it has
 * used the segments, on success or not. The segments stay valid after the read lock is gone.
 */
ssize_t oi_read_iov(struct ckfs *fs, struct oinode *oi, uint8_t *scratch, size_t len,
		    uint64_t off, struct oi_readv *rv);

/* oi_readv_release - drop the holds of an oi_read_iov and empty rv. */
void oi_readv_release(struct ckfs *fs, struct oi_readv *rv);

/*
 * oi_write - write len bytes at off (write lock taken inside). Returns len or -errno
 * (-ENOSPC, -EIO, -EFBIG...). Bytes are readable at once; durable after oi_commit.
 */
ssize_t oi_write(struct ckfs *fs, struct oinode *oi, const void *buf, size_t len, uint64_t off);

/*
 * oi_truncate - set the size (write lock taken inside). Growing adds a hole: O(1) in its length.
 * Returns 0, -EFBIG (size above CKPTFS_MAX_FILE_SIZE), or -errno of the staging file.
 */
int oi_truncate(struct ckfs *fs, struct oinode *oi, uint64_t size);

/*
 * oi_punch - make [off, off + len) a hole (zeros, no chunk), within the current size; the size
 * is unchanged (fallocate PUNCH_HOLE|KEEP_SIZE, and ZERO_RANGE). Enters staging: costs the
 * file's data once, never the hole's length. Returns 0, -EFBIG (off + len overflows), or
 * -errno of the staging file (-ENOSPC...).
 */
int oi_punch(struct ckfs *fs, struct oinode *oi, uint64_t off, uint64_t len);

/*
 * oi_seek_data - lseek(2)'s SEEK_DATA (data true) or SEEK_HOLE (false) from off: the first
 * offset >= off in data, or in a hole (the end of the file counts as a hole), read lock taken
 * inside. Holes are the ranges no chunk backs (and the staging file's holes); O(log extents)
 * to find off, plus the contiguous extents after it for SEEK_HOLE.
 * Returns 0 with *ret_off set, -ENXIO (off at or past the size, or no data after off), or the
 * -errno of lseek on the staging file.
 */
int oi_seek_data(struct oinode *oi, uint64_t off, bool data, uint64_t *ret_off);

/*
 * oi_commit - make the content durable and record it in the index: chunks fdatasync'ed, shard
 * directories fsync'ed, then one index transaction (synchronous=FULL). No-op when clean.
 * Returns 0 or -errno (the in-memory content stays, still dirty, on failure).
 */
int oi_commit(struct ckfs *fs, struct oinode *oi);

/*
 * oi_commit_many - oi_commit of n inodes with one store_sync and one index transaction, for the
 * committer's group commit. Each ois[i] whose write lock oi_commit_many can take without
 * waiting (the first one: waiting) is committed; it stops at the first it cannot lock (another
 * thread works on it, or it repeats an earlier entry). rcs[i]: 0 or -errno, as oi_commit's, for
 * the entries committed. Returns the number of leading entries it handled, in [1, n] (n >= 1).
 * If the shared transaction fails, each inode is committed in a transaction of its own.
 * Takes the locks oi_commit takes; the caller holds none.
 */
size_t oi_commit_many(struct ckfs *fs, struct oinode *const *ois, size_t n, int *rcs);

/*
 * oi_stream_shrink - after a close: when the bytes of oi not yet cut into chunks are at most
 * 64 KiB (SHRINK_MAX) and sit in a write segment (WB_SEG, 8 MiB), move them to a buffer of their
 * own size and give the segment back to the write-back pool for the next file. A closed small
 * file then waits for the committer holding its bytes, not 8 MiB: files closed faster than the
 * committer commits would otherwise each take a fresh segment (a fresh mapping, and its munmap
 * later). Does nothing when the cutter is busy, oi is staging, or memory is short (nothing is
 * lost either way). Takes oi's write lock and the pool's lock; the caller holds neither.
 */
void oi_stream_shrink(struct ckfs *fs, struct oinode *oi);

/* oi_error - the sticky error of oi (0 or -errno; read lock taken inside). */
int oi_error(struct oinode *oi);

/* ---- inode.c: inode lifetime (fs->mu held), the clock, chunks freed by a transaction ---- */

/* ckfs_now - a CLOCK_REALTIME timestamp in ns, strictly greater than any earlier one. */
int64_t ckfs_now(struct ckfs *fs);

/* ino_release_collect / ino_release_finish - the idx_release_fn used by every transaction that can
 * free chunks: collect digests in the transaction, free their files after it commits. */
struct ino_freed {
	struct store_hash *h;
	size_t n, cap;
	int err;
};
bool ino_release_collect(const uint8_t hash[IDX_HASH_LEN], void *arg);
void ino_release_finish(struct ckfs *fs, struct ino_freed *fr, bool committed);
/*
 * ino_release_requeried - for a release that fs->mu was let go before (commit_index_many):
 * keep in *fr only the digests the index still has no chunk row for. A commit in between may
 * have used the chunk again (a writer found its file and skipped the put, committed, and
 * dropped its pin). An index error keeps the digest out: the file stays, which is safe.
 * fs->mu held.
 */
void ino_release_requeried(struct ckfs *fs, struct ino_freed *fr);


/*
 * ino_lookup_inc - one more kernel reference to ino, taken by every successful entry reply.
 * Without memory the count is not kept: the inode then lives only until its last close or the
 * unmount.
 */
void ino_lookup_inc(struct ckfs *fs, uint64_t ino);
/*
 * ino_forget_locked - the kernel dropped n references to ino (FUSE_FORGET); at 0 an inode with
 * no name left and no open file is deleted from the index (a failure leaves it to idx_recover).
 */
void ino_forget_locked(struct ckfs *fs, uint64_t ino, uint64_t n);
/* ino_lookups_free - forget every lookup count (fs->ltab): the kernel holds no inode any more
 * (op_destroy, after the last request). fs->mu held. */
void ino_lookups_free(struct ckfs *fs);
/*
 * ino_forget_count - the kernel dropped n references to ino; true when none is left, and the
 * inode is then to be passed to ino_reap_many. fs->mu held.
 */
bool ino_forget_count(struct ckfs *fs, uint64_t ino, uint64_t n);
/*
 * ino_reap_many - delete from the index, in one transaction, those of inos[0..n) that have no
 * kernel reference, no name and no open file, and free their chunks once that is durable: one
 * WAL fdatasync for all of them. For a FUSE_BATCH_FORGET: when a step of many files is deleted
 * (retention), the kernel forgets their inodes in batches of up to thousands, and a transaction
 * each competes with the next step's writes for the daemon's CPU (tests/bench/RESULTS.md,
 * "Forgotten inodes deleted in one transaction"). A failure rolls back the whole batch, left to
 * idx_recover at unmount or the next mount. fs->mu held; never fails.
 */
void ino_reap_many(struct ckfs *fs, const uint64_t *inos, size_t n);
/*
 * ino_referenced - does the kernel (lookup count) or an open file still use ino? An inode
 * with nlink 0 is deleted from the index only when it is not referenced.
 */
bool ino_referenced(struct ckfs *fs, uint64_t ino);
/*
 * ino_drop_link - drop one link of ino after its dentry was removed, in the caller's
 * transaction: at nlink 0 an unreferenced inode is deleted, its chunks collected in *fr (for
 * ino_release_finish after the commit). Returns 0 or the index's -errno.
 */
int ino_drop_link(struct ckfs *fs, uint64_t ino, int64_t now, struct ino_freed *fr);

#endif /* CKPTFS_FS_WRITE_H */
