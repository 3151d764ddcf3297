/*
 * commit.c — the close-time committer: one thread that makes files closed by their writers
 * durable (oi_commit: in-flight chunks stored, chunk files synced, extents in the index) and
 * then tells the step engine (fs->up.on_commit: steps_on_commit), so that close() returns once
 * the bytes are in ckptfs's memory instead of once they are on disk.
 *
 * What still waits for durability (DESIGN.md "Steps", issue 5):
 *   - fsync and fdatasync (fs_op_fsync commits itself), and unmount (cq_stop before op_destroy's
 *     own commits);
 *   - a step: its files count as open until committed (steps_tree.c walk_entry: ov_dirty), so it
 *     is not complete before every file is durable, and a tracker never names it before;
 *   - a reader of a tracker or of /.ckptfs: ops.c and ops_file.c first wait for the commits of
 *     the files closed before (cq_wait_idle), so a tracker read after the trainer's close()
 *     and tracker write sees the step it wrote as soon as that step is durable, never an older
 *     answer (close-to-open).
 * Readers of the files themselves need nothing: the open inode holds the bytes not yet durable.
 *
 * A commit that fails (store full, I/O error) is logged with the file's inode; its error stays
 * on the inode (oinode.err), so an fsync of another handle reports it, and the step holding
 * the file never completes. close() itself cannot report it: as on a local filesystem with a
 * page cache, write-back errors reach fsync, not close.
 *
 * Group commit: the thread takes the oldest jobs waiting, up to CQ_BATCH, and commits them
 * together (oi_commit_many): one store_sync and one index transaction for all, the commit order
 * of DESIGN.md "Durability" kept for each. A writer of many small files closes them faster than
 * a sync each would allow; their syncs are shared instead.
 *
 * Invariants:
 *   1. queued - done == jobs waiting + the jobs of the batch running; cv_idle is broadcast after
 *      every batch.
 *   2. Each job holds one reference on its oinode (taken by cq_submit, dropped after the
 *      commit), so the inode's state outlives the last handle.
 *   3. cq_stop runs every queued job before the thread exits.
 *   4. Jobs finish in submission order (a batch is a prefix of the queue, and the jobs of it
 *      oi_commit_many leaves go back to the front), so when done >= n the first n jobs ever
 *      queued have finished: cq_wait_idle waits for the closes before it, not for a trainer
 *      that goes on closing files while it waits.
 *   5. oinode.cq_waiting counts the jobs of that inode queued and not taken into a batch, so
 *      a release that sees it positive can leave the commit to the job (fs_op_release).
 *   6. Linger: with fewer than CQ_BATCH jobs queued, the thread waits up to CQ_LINGER_NS after
 *      the first before taking them, so that the closes of a writer of many small files share
 *      one commit (one syncfs, one index transaction, one WAL fdatasync) instead of paying one
 *      each: without it, batches were of 1-2 files (a probe on oi_commit_many, 3,000 files of 1
 *      KiB). cq_submit wakes the thread only for the first job or a full batch, so a lingering
 *      thread is not woken per close. Someone waiting (cq_wait_idle: a tracker read, a step's
 *      last close, a status read) or stopping ends the linger at once: no reader waits for it.
 *   7. The index's WAL is checkpointed by this thread, after a batch, with no lock held
 *      (idx_checkpoint_apart at cq_start, idx_checkpoint), never inside a commit made under
 *      fs->mu: SQLite's own autocheckpoint runs in whichever commit passes 1,000 WAL frames, a
 *      small file's create as often as not, and would hold fs->mu through the copy and its
 *      syncs while every request waits. One exception: when that checkpoint copied the whole
 *      WAL but could not restart it because the deferred transaction (8) held the writer's
 *      lock, the thread takes fs->mu, flushes it and checkpoints again at once, a copy of the
 *      frames written since only; else the WAL only grows while small files stream in.
 *
 *   8. A create's index rows wait in the index's deferred transaction (fs_make_node,
 *      idx_begin_deferred) until some commit flushes it: this thread's next batch (its
 *      idx_begin_lazy), any other transaction, or, when nothing else comes, this thread
 *      CQ_LINGER_NS after cq_flush_soon, so that the database's write lock is never held
 *      longer than that by changes nobody commits. A flush that fails is logged here.
 *
 * Lock order: cq.mu is a leaf (taken under fs->mu by cq_busy); the thread holds no lock while
 * it commits.
 */
#include <errno.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs/core/lockrank.h"
#include "fs/core/workers.h"
#include "fs/write/write.h"

/* Jobs committed together at most: one store_sync and one index transaction for them all. */
#define CQ_BATCH 64
/* How long the thread lets more closes join a batch before committing it (invariant 6). */
#define CQ_LINGER_NS 1000000

struct cjob {
	struct cjob *next;
	struct oinode *oi;
	pid_t pid;  /* the closing process, for the step engine */
	bool torn;  /* closed by a dying process */
	int64_t t0; /* CLOCK_MONOTONIC ns at cq_submit, for fs->wr.durable_hist */
};

struct commit_q {
	struct ckfs *fs;
	pthread_mutex_t mu;      /* guards everything below */
	pthread_cond_t cv_work;  /* a job was queued, or stopping */
	pthread_cond_t cv_idle;  /* a job finished (cq_wait_idle) */
	struct cjob *head, *tail;
	size_t len;              /* jobs in head..tail */
	unsigned waiters;        /* threads in cq_wait_idle (invariant 6) */
	bool flush_due;          /* cq_flush_soon was called since the last flush (invariant 8) */
	uint64_t queued, done;   /* jobs ever queued / ever finished (FIFO: done counts a prefix) */
	bool stopping;
	struct ckpt_workers w;   /* the one committer thread (commits are made in order) */
};

/* Finish job j, whose commit returned rc: the step engine, or the log; frees j. */
static void cq_finish(struct ckfs *fs, struct cjob *j, int rc)
{
	if (rc == 0)
		ckpt_hist_observe(&fs->wr.durable_hist, ckpt_mono_ns() - j->t0);
	if (rc == 0 && fs->up.on_commit)
		fs->up.on_commit(fs, j->oi, j->pid, j->torn);
	else if (rc < 0)
		ckpt_log("cannot make inode %llu durable after its close: %s; "
			"the step holding it will not complete (fsync reports the error)\n",
			(unsigned long long)j->oi->ino, strerror(-rc));
	oi_put(fs, j->oi);
	free(j);
}

/* idx_flush, fs->mu held; a failure logged. Returns idx_flush's answer. */
static int cq_flush_locked(struct ckfs *fs)
{
	int rc = idx_flush(fs->ix);

	if (rc < 0)
		ckpt_log("cannot commit the index rows of the files created in the last "
			 "milliseconds: %s; those files are gone (their writers' closes fail and "
			 "are logged); free space or repair the index's disk, then save again",
			 strerror(-rc));
	return rc;
}

/*
 * Checkpoint the index's WAL if due, no lock held (invariant 7). *err: the last attempt's error,
 * so that a failure that persists is logged once, not after every batch.
 */
static void cq_checkpoint(struct ckfs *fs, int *err)
{
	int rc = idx_checkpoint(fs->ix);

	/* The WAL's restart is made only when no transaction is writing, and while small files
	 * stream in the deferred create transaction (invariant 8) is open most of the time: the
	 * restart was owed at nearly every checkpoint, and the WAL grew to 14-24 MB over 3,000
	 * files against 4.6 MB before (test_writeback.py
	 * test_a_stream_of_small_files_keeps_the_index_wal_small). Then commit it and try once
	 * more with fs->mu held, so that no create opens another meanwhile; that call copies only
	 * the frames written since the one above. */
	if (rc >= 0 && idx_checkpoint_owed(fs->ix)) {
		ckpt_lock(&fs->mu, CKPT_RANK_FS);
		if (cq_flush_locked(fs) == 0) /* a failed flush is logged there, not as ours */
			rc = idx_checkpoint(fs->ix);
		ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	}

	if (rc < 0 && rc != *err)
		ckpt_log("cannot checkpoint the index's write-ahead log: %s; it is kept and grows "
			 "until a checkpoint succeeds", strerror(-rc));
	*err = rc < 0 ? rc : 0;
}

void cq_flush_now(struct ckfs *fs)
{
	if (!fs->ix)
		return;
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	cq_flush_locked(fs);
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
}

static void *cq_main(void *arg)
{
	struct commit_q *q = arg;
	struct ckfs *fs = q->fs;
	struct cjob *batch[CQ_BATCH];
	struct oinode *ois[CQ_BATCH];
	int rcs[CQ_BATCH];
	int ck_err = 0;

	for (;;) {
		size_t n = 0, m;

		ckpt_lock(&q->mu, CKPT_RANK_COMMIT);
		while (!q->head && !q->stopping && !q->flush_due)
			ckpt_cond_wait(&q->cv_work, &q->mu, CKPT_RANK_COMMIT, NULL);
		if (!q->stopping && !q->waiters && q->len < CQ_BATCH) { /* invariants 6 and 8 */
			struct timespec until;
			int64_t t = ckpt_mono_ns() + CQ_LINGER_NS;

			until.tv_sec = (time_t)(t / 1000000000);
			until.tv_nsec = (long)(t % 1000000000);
			while (!q->stopping && !q->waiters && q->len < CQ_BATCH &&
			       ckpt_cond_wait(&q->cv_work, &q->mu, CKPT_RANK_COMMIT, &until) == 0)
				;
		}
		if (q->flush_due) { /* invariant 8: a batch's own transaction flushes too; cheap */
			q->flush_due = false;
			ckpt_unlock(&q->mu, CKPT_RANK_COMMIT);
			cq_flush_now(fs);
			ckpt_lock(&q->mu, CKPT_RANK_COMMIT);
		}
		if (!q->head && !q->stopping) {
			ckpt_unlock(&q->mu, CKPT_RANK_COMMIT);
			continue;
		}
		if (!q->head) { /* stopping and nothing left (invariant 3) */
			ckpt_unlock(&q->mu, CKPT_RANK_COMMIT);
			return NULL;
		}
		while (q->head && n < CQ_BATCH) { /* the oldest jobs, in order (invariant 4) */
			batch[n] = q->head;
			ois[n] = batch[n]->oi;
			atomic_fetch_sub(&ois[n]->cq_waiting, 1);
			q->head = q->head->next;
			n++;
		}
		q->len -= n;
		if (!q->head)
			q->tail = NULL;
		ckpt_unlock(&q->mu, CKPT_RANK_COMMIT);

		m = oi_commit_many(fs, ois, n, rcs);
		for (size_t i = 0; i < m; i++)
			cq_finish(fs, batch[i], rcs[i]);

		ckpt_lock(&q->mu, CKPT_RANK_COMMIT);
		if (m < n) { /* the jobs oi_commit_many left go back to the front, in order */
			for (size_t i = m; i < n; i++)
				atomic_fetch_add(&ois[i]->cq_waiting, 1);
			batch[n - 1]->next = q->head;
			if (!q->head)
				q->tail = batch[n - 1];
			q->head = batch[m];
			q->len += n - m;
		}
		q->done += m;
		pthread_cond_broadcast(&q->cv_idle);
		ckpt_unlock(&q->mu, CKPT_RANK_COMMIT);
		cq_checkpoint(fs, &ck_err); /* invariant 7 */
	}
}

int cq_start(struct ckfs *fs)
{
	struct commit_q *q = calloc(1, sizeof(*q));
	pthread_condattr_t ca;
	int rc;

	if (!q)
		return -ENOMEM;
	q->fs = fs;
	pthread_mutex_init(&q->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the linger's deadline: ckpt_mono_ns */
	pthread_cond_init(&q->cv_work, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&q->cv_idle, NULL);
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	rc = idx_checkpoint_apart(fs->ix); /* invariant 7 */
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	if (rc == -EROFS)
		rc = 0; /* a read-only index has no WAL of its own to checkpoint */
	if (rc < 0 || (rc = ckpt_workers_start(&q->w, 1, cq_main, q)) < 0) {
		pthread_cond_destroy(&q->cv_idle);
		pthread_cond_destroy(&q->cv_work);
		pthread_mutex_destroy(&q->mu);
		free(q);
		return rc;
	}
	fs->wr.cq = q;
	return 0;
}

void cq_stop(struct ckfs *fs)
{
	struct commit_q *q = fs->wr.cq;

	if (!q)
		return;
	ckpt_workers_stop(&q->w, &q->mu, &q->cv_work, &q->stopping);
	fs->wr.cq = NULL;
	pthread_cond_destroy(&q->cv_idle);
	pthread_cond_destroy(&q->cv_work);
	pthread_mutex_destroy(&q->mu);
	free(q);
}

int cq_submit(struct ckfs *fs, struct oinode *oi, pid_t pid, bool torn)
{
	struct commit_q *q = fs->wr.cq;
	struct cjob *j;

	if (!q)
		return -ENOSYS;
	if (!(j = calloc(1, sizeof(*j))))
		return -ENOMEM;
	j->oi = oi;
	j->pid = pid;
	j->torn = torn;
	j->t0 = ckpt_mono_ns();
	atomic_fetch_add(&oi->cq_waiting, 1);
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	oi->refs++; /* invariant 2 */
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	ckpt_lock(&q->mu, CKPT_RANK_COMMIT);
	if (q->stopping) { /* no request arrives after op_destroy; kept for safety */
		ckpt_unlock(&q->mu, CKPT_RANK_COMMIT);
		atomic_fetch_sub(&oi->cq_waiting, 1);
		oi_put(fs, oi);
		free(j);
		return -ESHUTDOWN;
	}
	if (q->tail)
		q->tail->next = j;
	else
		q->head = j;
	q->tail = j;
	q->queued++;
	if (++q->len == 1 || q->len == CQ_BATCH) /* invariant 6 */
		pthread_cond_signal(&q->cv_work);
	ckpt_unlock(&q->mu, CKPT_RANK_COMMIT);
	return 0;
}

void cq_flush_soon(struct ckfs *fs)
{
	struct commit_q *q = fs->wr.cq;

	if (!q)
		return;
	ckpt_lock(&q->mu, CKPT_RANK_COMMIT);
	if (!q->flush_due) {
		q->flush_due = true;
		pthread_cond_signal(&q->cv_work);
	}
	ckpt_unlock(&q->mu, CKPT_RANK_COMMIT);
}

bool cq_busy(struct ckfs *fs)
{
	struct commit_q *q = fs->wr.cq;
	bool busy;

	if (!q)
		return false;
	ckpt_lock(&q->mu, CKPT_RANK_COMMIT);
	busy = q->queued != q->done;
	ckpt_unlock(&q->mu, CKPT_RANK_COMMIT);
	return busy;
}

void cq_wait_idle(struct ckfs *fs)
{
	struct commit_q *q = fs->wr.cq;

	if (!q)
		return;
	ckpt_lock(&q->mu, CKPT_RANK_COMMIT);
	uint64_t upto = q->queued; /* not the closes that come while waiting (invariant 4) */

	if (q->done < upto) {
		q->waiters++;
		pthread_cond_signal(&q->cv_work); /* end a linger (invariant 6) */
		while (q->done < upto)
			ckpt_cond_wait(&q->cv_idle, &q->mu, CKPT_RANK_COMMIT, NULL);
		q->waiters--;
	}
	ckpt_unlock(&q->mu, CKPT_RANK_COMMIT);
}
