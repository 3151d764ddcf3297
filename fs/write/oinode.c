/*
 * oinode.c — the content of open regular files: the table of open inodes, their lifetime
 * (oi_get, oi_put) and locking, appends cut into chunks as they arrive, a staging file for
 * writes at other offsets, truncate and hole punching. Reads are in oi_read.c, the commit that
 * makes a file's content durable and records it in the index in oi_commit.c, writes made in
 * place inside the stored chunks in oi_overwrite.c; the helpers they share are declared in
 * oi_int.h.
 *
 * The modes and invariants are described on struct oinode (write.h). Appended bytes are cut
 * and their chunks stored by the write-back pool (wb.c) while the writer goes on; commit drains
 * them first.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/write/oi_int.h"

int64_t ckfs_now(struct ckfs *fs)
{
	int64_t now = ckpt_now_ns();
	int64_t last = atomic_load(&fs->last_ns);

	for (;;) {
		int64_t t = now > last ? now : last + 1;

		if (atomic_compare_exchange_weak(&fs->last_ns, &last, t))
			return t;
	}
}

/* ---- release of chunks freed by index transactions ---- */

bool ino_release_collect(const uint8_t hash[IDX_HASH_LEN], void *arg)
{
	struct ino_freed *fr = arg;

	if (fr->n == fr->cap) {
		size_t ncap = fr->cap ? fr->cap * 2 : 32;
		struct store_hash *p = realloc(fr->h, ncap * sizeof(*p));

		if (!p) {
			/* keep the row: the chunk stays stored, which is safe */
			fr->err = -ENOMEM;
			return false;
		}
		fr->h = p;
		fr->cap = ncap;
	}
	memcpy(fr->h[fr->n++].b, hash, IDX_HASH_LEN);
	return true;
}

void ino_release_requeried(struct ckfs *fs, struct ino_freed *fr)
{
	size_t k = 0;

	for (size_t i = 0; i < fr->n; i++)
		if (idx_chunk_exists(fs->ix, fr->h[i].b) == 0)
			fr->h[k++] = fr->h[i];
	fr->n = k;
}

void ino_release_finish(struct ckfs *fs, struct ino_freed *fr, bool committed)
{
	if (committed) {
		if (fr->n)
			ckpt_fault("commit-after-index");
		for (size_t i = 0; i < fr->n; i++) {
			if (i)
				ckpt_fault("chunk-free");
			pins_chunk_free(fs, &fr->h[i]); /* failures leave an orphan for recovery */
		}
	}
	free(fr->h);
	fr->h = NULL;
	fr->n = fr->cap = 0;
}

/* ---- table ---- */

struct oinode *oi_find(struct ckfs *fs, uint64_t ino)
{
	struct oinode *oi = fs->otab[ino % OTAB_BUCKETS];

	while (oi && oi->ino != ino)
		oi = oi->next;
	return oi;
}

static void segs_put(struct ckfs *fs, struct seg *list);

/* Stream bytes of oi not yet cut that hold a reservation (invariant 7). fly_mu held, or oi
 * drained with the write lock held. */
static uint64_t uncut_held(const struct oinode *oi)
{
	uint64_t from = oi->cut_start > oi->space_mark ? oi->cut_start : oi->space_mark;

	return oi->data_end > from ? oi->data_end - from : 0;
}

void oi_space_settle(struct ckfs *fs, struct oinode *oi)
{
	uint64_t give = uncut_held(oi);

	pthread_mutex_lock(&oi->fly_mu);
	oi->space_mark = oi->data_end;
	pthread_mutex_unlock(&oi->fly_mu);
	space_release(fs, give);
}

static void oi_free(struct ckfs *fs, struct oinode *oi)
{
	/* drained by the caller (invariant 5): no job left, the cutter idle; what was not stored
	 * is dropped with it (invariant 7) */
	space_release(fs, uncut_held(oi) + oi->stage_held);
	segs_put(fs, oi->seg_head);
	pthread_mutex_destroy(&oi->fly_mu);
	pthread_cond_destroy(&oi->fly_cv);
	if (oi->stage_fd >= 0)
		close(oi->stage_fd);
	store_hasher_free(oi->hasher);
	free(oi->ext);
	free(oi->pins);
	pthread_rwlock_destroy(&oi->lock);
	free(oi);
}

/* ---- segments: the bytes appended and not yet stored (struct seg) ---- */

/*
 * Fault in len bytes of a segment buffer not touched yet (a fresh segment, or the new part of a
 * spanning chunk's copy) in one call (MADV_POPULATE_WRITE, Linux 5.14) rather
 * than one page fault per 4 KiB page as the writer copies into it: the kernel still zeroes
 * each page, but the FUSE thread takes no trap per page. Best effort: an older kernel refuses
 * it (EINVAL) and the pages fault as they are written. Not MADV_HUGEPAGE on 2 MiB-aligned
 * buffers: the kernel then zeroes whole huge pages (figures: tests/bench/RESULTS.md).
 */
static void seg_populate(uint8_t *buf, size_t len)
{
	long psz = sysconf(_SC_PAGESIZE);
	uintptr_t mask = psz > 0 ? (uintptr_t)psz - 1 : 4095;
	/* malloc's mmap'd chunk starts a page below buf (its header): rounding down stays in it */
	uintptr_t start = (uintptr_t)buf & ~mask;

	(void)madvise((void *)start, (uintptr_t)buf + len - start, MADV_POPULATE_WRITE);
}

/*
 * An empty segment at file offset off with room for cap (WB_SEG, STORE_CHUNK_MAX, or a
 * shrunk file's exact size: oi_stream_shrink) bytes, one reference: a buffer of that size the
 * pool kept (resident: what it has charged for it), else a fresh one (nothing charged or
 * populated yet: stream_append populates each range as it charges it, so a 1 KiB file faults in
 * one page, not the 8 MiB segment). NULL on ENOMEM.
 */
static struct seg *seg_new(struct ckfs *fs, uint64_t off, size_t cap)
{
	struct seg *sg = malloc(sizeof(*sg));

	if (!sg)
		return NULL;
	if (!(sg->buf = wb_seg_get(fs->wb, cap, &sg->resident))) {
		sg->buf = malloc(cap);
		if (!sg->buf) {
			free(sg);
			return NULL;
		}
	}
	sg->next = NULL;
	sg->off = off;
	sg->len = 0;
	sg->cap = cap;
	atomic_init(&sg->refs, 1);
	return sg;
}

/* Drop a reference to sg (NULL is fine); the last one frees it (wb_seg_free). */
static void seg_put(struct ckfs *fs, struct seg *sg)
{
	if (!sg || atomic_fetch_sub(&sg->refs, 1) != 1)
		return;
	wb_seg_free(fs->wb, sg->buf, sg->cap, sg->resident);
	free(sg);
}

/* seg_put every segment of a list linked by next. */
static void segs_put(struct ckfs *fs, struct seg *list)
{
	while (list) {
		struct seg *next = list->next;

		seg_put(fs, list);
		list = next;
	}
}

/* The segment of oi's list holding byte pos (< data_end). fly_mu held. */
static struct seg *seg_at(const struct oinode *oi, uint64_t pos)
{
	struct seg *sg = oi->seg_head;

	while (sg->off + sg->len <= pos)
		sg = sg->next;
	return sg;
}

/* Copy bytes [pos, pos + n) (all below data_end, none below seg_head's) from the segments.
 * fly_mu held. */
void oi_segs_copy_locked(const struct oinode *oi, uint64_t pos, uint8_t *dst, size_t n)
{
	for (const struct seg *sg = n ? seg_at(oi, pos) : NULL; n; sg = sg->next) {
		size_t in = (size_t)(pos - sg->off);
		size_t m = sg->len - in < n ? sg->len - in : n;

		memcpy(dst, sg->buf + in, m);
		dst += m;
		pos += m;
		n -= m;
	}
}

/* Unlink the segments wholly below cut_start, but never seg_tail (invariant 6), onto *dead.
 * fly_mu held; the caller segs_put()s *dead after releasing it. */
static void segs_trim_locked(struct oinode *oi, struct seg **dead)
{
	while (oi->seg_head != oi->seg_tail &&
	       oi->seg_head->off + oi->seg_head->len <= oi->cut_start) {
		struct seg *sg = oi->seg_head;

		oi->seg_head = sg->next;
		sg->next = *dead;
		*dead = sg;
	}
}

/*
 * Drained stream (invariant 5): forget the bytes past end (the chunk being cut and any bytes
 * the cutter left after a failure) and start cutting at end, a chunk boundary.
 */
void oi_stream_cut_back(struct ckfs *fs, struct oinode *oi, uint64_t end)
{
	uint64_t give = uncut_held(oi); /* drained: only this thread changes them */
	struct seg *dead;

	pthread_mutex_lock(&oi->fly_mu);
	dead = oi->seg_head;
	oi->seg_head = oi->seg_tail = NULL;
	oi->cut_start = oi->data_end = oi->space_mark = end;
	oi->cut_err = 0;
	pthread_mutex_unlock(&oi->fly_mu);
	oi->cdc = (struct store_cdc){ 0 };
	segs_put(fs, dead);
	space_release(fs, give);
}

/*
 * Most bytes a closed file's shrink copies out of its write segment: 64 KiB, below the malloc
 * mmap threshold (128 KiB, daemon.c), so the copy comes from the heap and costs no mapping. Small
 * files (trackers, metadata, a DCP save's small shards) are what it is for.
 */
#define SHRINK_MAX (64u * 1024u)

void oi_stream_shrink(struct ckfs *fs, struct oinode *oi)
{
	struct seg *small = NULL, *dead;
	size_t len;
	bool go;

	pthread_rwlock_wrlock(&oi->lock);
	/* write lock: data_end and the segment list are this thread's; the cutter, idle, cannot
	 * start (only a writer queues it), so cut_start stays too */
	pthread_mutex_lock(&oi->fly_mu);
	len = (size_t)(oi->data_end - oi->cut_start);
	go = oi->stage_fd < 0 && oi->cut_state == CUT_IDLE && oi->seg_tail &&
	     oi->seg_tail->cap == WB_SEG && len <= SHRINK_MAX;
	pthread_mutex_unlock(&oi->fly_mu);
	if (go && len && !(small = seg_new(fs, oi->cut_start, len)))
		go = false; /* the segment stays: only memory is at stake */
	if (go) {
		if (small) {
			wb_charge(fs->wb, len);
			small->len = small->resident = len;
		}
		pthread_mutex_lock(&oi->fly_mu);
		if (small)
			oi_segs_copy_locked(oi, small->off, small->buf, len);
		/* the jobs pointing into the old segments hold references of their own */
		dead = oi->seg_head;
		oi->seg_head = oi->seg_tail = small;
		pthread_mutex_unlock(&oi->fly_mu);
		segs_put(fs, dead);
	}
	pthread_rwlock_unlock(&oi->lock);
}

/*
 * A file whose zeros were stored as chunks (written as zeros, or grown by a store that predates
 * holes) ends in chunks of zeros. Leave them out of the stream: bytes [data_end, size) read as
 * zeros (invariant 1), so writing the file in order from the end of its data is an append and
 * stays on the write-back stream, and commit records what is left of them as a hole. A
 * chunk is taken for zeros only when it is stored at least 64 times smaller than its length (a
 * cheap test no float tensor passes; a short last chunk, stored raw, is always looked at) and its
 * digest is that of zeros of its length.
 */
#define ZERO_TEST_FREE (64u * 1024u) /* bytes: hashing this many zeros costs microseconds */
static void trim_zero_tail(struct oinode *oi, uint64_t floor)
{
	uint8_t *zeros = NULL;
	size_t n_before = oi->n_ext;

	while (oi->n_ext && oi->ext[oi->n_ext - 1].offset >= floor) {
		const struct idx_extent *e = &oi->ext[oi->n_ext - 1];
		struct store_hash h;

		if (e->length > STORE_CHUNK_MAX ||
		    (e->length > ZERO_TEST_FREE && e->stored_size > e->length / 64))
			break;
		if (!zeros && !(zeros = calloc(1, STORE_CHUNK_MAX)))
			break; /* keep them: the stream is only slower */
		store_hash_buf(zeros, e->length, &h);
		if (memcmp(h.b, e->hash, STORE_HASH_LEN) != 0)
			break;
		oi->ext_end = e->offset;
		oi->n_ext--;
	}
	free(zeros);
	if (oi->n_ext == 0) { /* the stream starts at 0: its digest can be kept as it is written */
		store_hasher_reset(oi->hasher);
		oi->hash_ok = true; /* invariant 4: nothing consumed, fly_end 0 */
	} else if (oi->n_ext != n_before) {
		oi->hash_ok = false; /* the hasher has consumed the zeros dropped */
	}
}


/*
 * Stream mode, a write at off below data_end: when every byte from off to data_end is a zero
 * kept in trailing zero chunks and the chunk being cut, drop them, so that the write is an append. This is
 * trim_zero_tail's case for a file whose state stayed in memory between its layout and its
 * writes (the committer still held it when fio reopened it). Content is unchanged: bytes past
 * data_end read as zeros (invariant 1). Caller holds the write lock.
 */
static void trim_zeros_from(struct ckfs *fs, struct oinode *oi, uint64_t off)
{
	size_t n_ext = oi->n_ext;
	uint64_t ext_end = oi->ext_end;
	bool hash_ok = oi->hash_ok;

	oi_fly_drain(fs, oi);
	if (oi->fly_lost || oi->err || oi->ext_end < off)
		return;
	/* drained: the bytes past ext_end are the chunk being cut, in the segments */
	for (uint64_t pos = oi->ext_end; pos < oi->data_end;) {
		uint8_t buf[4096];
		size_t n = oi->data_end - pos < sizeof(buf) ? (size_t)(oi->data_end - pos) : sizeof(buf);

		pthread_mutex_lock(&oi->fly_mu);
		oi_segs_copy_locked(oi, pos, buf, n);
		pthread_mutex_unlock(&oi->fly_mu);
		for (size_t i = 0; i < n; i++)
			if (buf[i])
				return;
		pos += n;
	}
	trim_zero_tail(oi, off);
	if (oi->ext_end != off) { /* not all zeros, or no chunk boundary at off: as it was */
		oi->n_ext = n_ext;
		oi->ext_end = ext_end;
		oi->hash_ok = hash_ok; /* n_ext > 0 here: the hasher was not reset */
		return;
	}
	oi_stream_cut_back(fs, oi, oi->ext_end);
}

int oi_get(struct ckfs *fs, uint64_t ino, struct oinode **ret)
{
	struct idx_inode attr;
	struct oinode *oi = oi_find(fs, ino);
	int rc;

	if (oi) {
		oi->refs++;
		*ret = oi;
		return 0;
	}
	if ((rc = idx_inode_get(fs->ix, ino, &attr)) < 0)
		return rc;
	if (!S_ISREG(attr.mode))
		return -EISDIR;
	oi = calloc(1, sizeof(*oi));
	if (!oi)
		return -ENOMEM;
	oi->ino = ino;
	oi->stage_fd = -1;
	pthread_rwlock_init(&oi->lock, NULL);
	pthread_mutex_init(&oi->fly_mu, NULL);
	pthread_cond_init(&oi->fly_cv, NULL);
	oi->hasher = store_hasher_new();
	if (!oi->hasher) {
		oi_free(fs, oi);
		return -ENOMEM;
	}
	rc = idx_file_extents(fs->ix, ino, &oi->ext, &oi->n_ext);
	if (rc < 0) {
		oi_free(fs, oi);
		return rc;
	}
	oi->cap_ext = oi->n_ext;
	oi->size = attr.size;
	oi->ext_end = oi->n_ext ? oi->ext[oi->n_ext - 1].offset + oi->ext[oi->n_ext - 1].length : 0;
	if (oi->ext_end > oi->size ||
	    (oi->ext_end != oi->size && !(attr.flags & IDX_INODE_SPARSE))) {
		/* index invariant 4 broken: refuse rather than serve wrong bytes */
		oi_free(fs, oi);
		return -EIO;
	}
	/* a sparse file's trailing hole [ext_end, size) is the zeros after data_end (invariant 1) */
	oi->hash_ok = oi->size == 0;
	trim_zero_tail(oi, 0);
	/* no lock: nobody else sees oi yet */
	oi->cut_start = oi->data_end = oi->space_mark = oi->ext_end;
	oi->refs = 1;
	oi->next = fs->otab[ino % OTAB_BUCKETS];
	fs->otab[ino % OTAB_BUCKETS] = oi;
	*ret = oi;
	return 0;
}

/* Drop every pin taken since the last commit; delete chunk files that nothing references. */
void oi_drop_pins(struct ckfs *fs, struct oinode *oi)
{
	for (size_t i = 0; i < oi->n_pins; i++)
		pins_chunk_unpin(fs, &oi->pins[i]);
	pthread_mutex_lock(&fs->mu);
	for (size_t i = 0; i < oi->n_pins; i++) {
		if (idx_chunk_exists(fs->ix, oi->pins[i].b) == 0)
			pins_chunk_free(fs, &oi->pins[i]);
	}
	pthread_mutex_unlock(&fs->mu);
	oi->n_pins = 0;
}

/* ---- chunks in flight (write-back) ---- */

static int oi_note_pin(struct oinode *oi, const struct store_hash *h);

/*
 * Move finished in-flight chunks, in file order, into the extents (their pins into pins[]);
 * stop at the first one not finished. A failed one sets err and fly_lost; the pins of the
 * chunks stored after it are still collected (dropped at the next commit or the last put).
 * Caller holds the write lock.
 */
static void fly_harvest(struct ckfs *fs, struct oinode *oi)
{
	int cut_err;

	for (;;) {
		struct fly_job *j;

		pthread_mutex_lock(&oi->fly_mu);
		j = oi->fly_head;
		if (j && !j->done)
			j = NULL;
		if (j) {
			oi->fly_head = j->next;
			if (!oi->fly_head)
				oi->fly_tail = NULL;
		}
		pthread_mutex_unlock(&oi->fly_mu);
		if (!j)
			break;
		int rc = j->err;

		if (rc == 0 && (rc = oi_note_pin(oi, &j->info.hash)) < 0)
			pins_chunk_unpin(fs, &j->info.hash);
		if (rc == 0 && !oi->fly_lost &&
		    (rc = oi_ext_reserve(&oi->ext, &oi->cap_ext, oi->n_ext + 1)) == 0) {
			struct idx_extent *e = &oi->ext[oi->n_ext++];

			e->offset = j->off;
			e->length = j->len;
			e->stored_size = j->info.stored_size;
			e->codec = j->info.codec;
			memcpy(e->hash, j->info.hash.b, STORE_HASH_LEN);
			oi->ext_end = j->off + j->len;
		}
		if (rc < 0 && !oi->fly_lost) {
			oi->fly_lost = true;
			if (!oi->err)
				oi->err = rc;
		}
		free(j);
	}
	pthread_mutex_lock(&oi->fly_mu);
	cut_err = oi->cut_err;
	pthread_mutex_unlock(&oi->fly_mu);
	if (cut_err && !oi->err)
		oi->err = cut_err; /* the bytes stay readable; the file cannot be committed */
}

/*
 * Bytes of the stream the writer has appended and the cutter has not fed, at least this many,
 * before the writer queues the cutter: 1 MiB, the average chunk (STORE_CHUNK_AVG), so a run of
 * small writes costs one hand-over per chunk rather than one per write.
 */
#define CUT_KICK STORE_CHUNK_AVG

static void cut_loop(struct ckfs *fs, struct oinode *oi);

/*
 * Start oi's cutter if it is idle and at least min_bytes (>= 1) wait for it: queued in the
 * pool, or run on this thread when inline or there is no pool. Caller holds the write lock, not
 * fly_mu.
 */
static void cut_kick(struct ckfs *fs, struct oinode *oi, uint64_t min_bytes, bool inline_cut)
{
	bool go, queue = fs->wb && !inline_cut;

	pthread_mutex_lock(&oi->fly_mu);
	go = oi->cut_state == CUT_IDLE && !oi->cut_err &&
	     oi->data_end - oi->cut_start - oi->cdc.len >= min_bytes;
	if (go)
		oi->cut_state = queue ? CUT_QUEUED : CUT_RUNNING;
	pthread_mutex_unlock(&oi->fly_mu);
	if (go && queue)
		wb_cut_schedule(fs->wb, oi);
	else if (go)
		cut_loop(fs, oi);
}

/*
 * Wait for oi's cutter, cut what it left here, wait until no chunk of oi is in flight, then
 * harvest them all (invariant 5). Caller holds the write lock.
 */
void oi_fly_drain(struct ckfs *fs, struct oinode *oi)
{
	pthread_mutex_lock(&oi->fly_mu);
	while (oi->cut_state != CUT_IDLE)
		pthread_cond_wait(&oi->fly_cv, &oi->fly_mu);
	pthread_mutex_unlock(&oi->fly_mu);
	/* cut the rest here rather than hand it to the pool: this thread would only wait (only a
	 * writer, and this thread holds the write lock, can start the cutter meanwhile) */
	cut_kick(fs, oi, 1, true);
	pthread_mutex_lock(&oi->fly_mu);
	while (oi->fly_busy)
		pthread_cond_wait(&oi->fly_cv, &oi->fly_mu);
	pthread_mutex_unlock(&oi->fly_mu);
	fly_harvest(fs, oi);
}

void oi_put(struct ckfs *fs, struct oinode *oi)
{
	struct oinode **pp;
	struct idx_inode attr;
	struct ino_freed fr = { 0 };
	bool last;

	pthread_mutex_lock(&fs->mu);
	last = --oi->refs == 0;
	if (last) {
		pp = &fs->otab[oi->ino % OTAB_BUCKETS];
		while (*pp != oi)
			pp = &(*pp)->next;
		*pp = oi->next;
		if (idx_inode_get(fs->ix, oi->ino, &attr) == 0 && attr.nlink == 0 &&
		    !ino_referenced(fs, oi->ino)) {
			bool ok;

			ok = idx_begin(fs->ix) == 0 &&
			     idx_inode_delete(fs->ix, oi->ino, ino_release_collect, &fr) == 0 &&
			     idx_commit(fs->ix) == 0;

			if (!ok)
				idx_rollback(fs->ix); /* recovery deletes it at the next mount */
			ino_release_finish(fs, &fr, ok);
		}
	}
	pthread_mutex_unlock(&fs->mu);
	if (last) {
		pthread_rwlock_wrlock(&oi->lock);
		oi_fly_drain(fs, oi);
		pthread_rwlock_unlock(&oi->lock);
		oi_drop_pins(fs, oi);
		oi_free(fs, oi);
	}
}

/* ---- helpers ---- */

static int oi_note_pin(struct oinode *oi, const struct store_hash *h)
{
	if (oi->n_pins == oi->cap_pins) {
		size_t ncap = oi->cap_pins ? oi->cap_pins * 2 : 16;
		struct store_hash *p = realloc(oi->pins, ncap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		oi->pins = p;
		oi->cap_pins = ncap;
	}
	oi->pins[oi->n_pins++] = *h;
	return 0;
}

int oi_ext_reserve(struct idx_extent **ext, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t ncap = *cap ? *cap * 2 : 64;

	while (ncap < need)
		ncap *= 2;
	struct idx_extent *p = realloc(*ext, ncap * sizeof(*p));

	if (!p)
		return -ENOMEM;
	*ext = p;
	*cap = ncap;
	return 0;
}

/* Put one chunk (pinned) and describe it as an extent at offset. */
int oi_put_extent(struct ckfs *fs, struct oinode *oi, const uint8_t *buf, size_t len,
		      uint64_t offset, struct idx_extent *ret)
{
	struct store_chunk_info info;
	int rc = pins_chunk_put(fs, buf, len, 0, &info);

	if (rc < 0)
		return rc;
	if ((rc = oi_note_pin(oi, &info.hash)) < 0) {
		pins_chunk_unpin(fs, &info.hash);
		return rc;
	}
	ret->offset = offset;
	ret->length = (uint32_t)len;
	ret->stored_size = info.stored_size;
	ret->codec = info.codec;
	memcpy(ret->hash, info.hash.b, STORE_HASH_LEN);
	return 0;
}

/* The attribute overlay after a change of oi; written: the bytes the change wrote. oi->lock held
 * for writing. */
static void set_overlay(struct ckfs *fs, struct oinode *oi, uint64_t written)
{
	atomic_fetch_add(&oi->ov_written, written);
	atomic_store(&oi->ov_size, oi->size);
	atomic_store(&oi->ov_mtime, ckfs_now(fs));
	atomic_store(&oi->ov_dirty, true);
	oi->dirty = true;
}

/* ---- the cutter ---- */

void oi_job_run(struct ckfs *fs, struct fly_job *j)
{
	struct store_chunk_info info;
	unsigned flags = wb_should_defer(fs->wb) ? STORE_PUT_DEFER : 0;
	int rc = pins_chunk_put(fs, j->buf, j->len, flags, &info);
	struct oinode *oi = j->oi;
	uint32_t held = j->held;

	if (rc == -ENOSPC && flags) /* the raw copy did not fit: a compressed one may */
		rc = pins_chunk_put(fs, j->buf, j->len, 0, &info);

	if (rc == 0 && !info.existed && info.codec == STORE_CODEC_DEFERRED)
		atomic_fetch_add(&fs->n_deferred, 1);
	struct seg *sg = j->seg;

	pthread_mutex_lock(&oi->fly_mu);
	if (rc == 0)
		j->info = info;
	j->err = rc;
	j->done = true;
	j->buf = NULL;
	j->seg = NULL;
	oi->fly_busy--;
	pthread_cond_broadcast(&oi->fly_cv);
	pthread_mutex_unlock(&oi->fly_mu); /* j and oi are off limits now (struct fly_job) */
	seg_put(fs, sg);
	/* on disk, or dropped with the file's bytes in flight (fly_lost): invariant 7 */
	space_release(fs, held);
}

/*
 * The cutter found the end of the chunk being cut: [cut_start, end), at most STORE_CHUNK_MAX
 * bytes, so in one segment or across two. Make it a job pointing into its segment, or into a
 * copy when it spans two; append it to the in-flight list, move cut_start to end, drop the
 * segments below it and submit the job (or store it here without a pool). Returns 0 or
 * -ENOMEM (nothing changed). Called by the running cutter only.
 */
static int cut_emit(struct ckfs *fs, struct oinode *oi, uint64_t end)
{
	uint64_t start = oi->cut_start; /* only the running cutter moves it */
	size_t len = (size_t)(end - start);
	struct fly_job *j = calloc(1, sizeof(*j));
	struct seg *sg, *dead = NULL;
	bool inside;

	if (!j)
		return -ENOMEM;
	pthread_mutex_lock(&oi->fly_mu);
	sg = seg_at(oi, start);
	inside = end <= sg->off + sg->len;
	if (inside)
		atomic_fetch_add(&sg->refs, 1);
	pthread_mutex_unlock(&oi->fly_mu);
	if (inside) {
		j->buf = sg->buf + (start - sg->off);
	} else {
		/* sg is full and not the tail, so sg->len and sg->next are fixed, and neither it
		 * nor the next one (which holds end) goes before cut_start passes them. The copy's
		 * buffer is a STORE_CHUNK_MAX one the pool can keep, charged as far as written. */
		struct seg *own = seg_new(fs, start, STORE_CHUNK_MAX);
		size_t a = (size_t)(sg->off + sg->len - start);

		if (!own) {
			free(j);
			return -ENOMEM;
		}
		if (own->resident < len) {
			wb_charge(fs->wb, len - own->resident);
			seg_populate(own->buf + own->resident, len - own->resident);
			own->resident = len;
		}
		own->len = len;
		memcpy(own->buf, sg->buf + (start - sg->off), a);
		memcpy(own->buf + a, sg->next->buf, len - a);
		sg = own; /* the job takes its one reference */
		j->buf = own->buf;
	}
	j->seg = sg;
	j->oi = oi;
	j->off = start;
	j->len = (uint32_t)len;
	/* invariant 7: the part above space_mark (a commit stored the rest as its provisional
	 * last chunk) */
	j->held = end > oi->space_mark ? (uint32_t)(end - (start > oi->space_mark ? start :
							     oi->space_mark)) : 0;
	pthread_mutex_lock(&oi->fly_mu);
	if (oi->fly_tail)
		oi->fly_tail->next = j;
	else
		oi->fly_head = j;
	oi->fly_tail = j;
	oi->fly_busy++;
	oi->cut_start = end;
	segs_trim_locked(oi, &dead);
	pthread_mutex_unlock(&oi->fly_mu);
	segs_put(fs, dead);
	if (fs->wb)
		wb_submit(fs->wb, j);
	else
		oi_job_run(fs, j);
	return 0;
}

/*
 * The cutter, cut_state CUT_RUNNING (set by the caller): feed the bytes [cut_start + cdc.len,
 * data_end) to the chunker and the hasher (invariant 4), emitting each chunk cut, until caught
 * up with data_end; then CUT_IDLE. Bytes below data_end never change (only the writer writes,
 * above it), so they are read without fly_mu. On a failure, cut_err is set and the cutter stops.
 */
static void cut_loop(struct ckfs *fs, struct oinode *oi)
{
	for (;;) {
		pthread_mutex_lock(&oi->fly_mu);
		uint64_t pos = oi->cut_start + oi->cdc.len;

		if (oi->cut_err || pos >= oi->data_end) {
			oi->cut_state = CUT_IDLE;
			pthread_cond_broadcast(&oi->fly_cv);
			pthread_mutex_unlock(&oi->fly_mu); /* oi is off limits to a worker now */
			return;
		}
		struct seg *sg = seg_at(oi, pos);
		size_t in = (size_t)(pos - sg->off), avail = sg->len - in;

		pthread_mutex_unlock(&oi->fly_mu);
		const uint8_t *p = sg->buf + in;
		size_t cut = store_cdc_feed(&oi->cdc, p, avail);
		size_t take = cut ? cut : avail;

		if (oi->hash_ok)
			store_hasher_update(oi->hasher, p, take);
		if (cut) {
			int rc = cut_emit(fs, oi, pos + take);

			if (rc < 0) {
				pthread_mutex_lock(&oi->fly_mu);
				oi->cut_err = rc; /* cdc and hasher are past cut_start: see harvest */
				pthread_mutex_unlock(&oi->fly_mu);
			}
		}
	}
}

void oi_cut_run(struct ckfs *fs, struct oinode *oi)
{
	pthread_mutex_lock(&oi->fly_mu);
	oi->cut_state = CUT_RUNNING;
	pthread_mutex_unlock(&oi->fly_mu);
	cut_loop(fs, oi);
}

/*
 * Stream mode: append len bytes (zeros when buf is NULL) at data_end. The writer copies them
 * into the segments (a new one whenever seg_tail is full), each piece charged to the pool's
 * budget first (wb_reserve: may wait), publishes them under fly_mu and queues the cutter once
 * CUT_KICK bytes wait for it. Chunking, hashing and storing happen on the workers. Returns 0 or
 * -ENOMEM (a segment could not be allocated: the bytes before it are in the stream). Caller
 * holds the write lock.
 */
static int stream_append(struct ckfs *fs, struct oinode *oi, const uint8_t *buf, size_t len)
{
	while (len) {
		struct seg *sg = oi->seg_tail, *dead = NULL; /* only this writer changes seg_tail */
		bool fresh = !sg || sg->len == sg->cap;

		if (fresh && !(sg = seg_new(fs, oi->data_end, WB_SEG)))
			return -ENOMEM;
		size_t n = sg->cap - sg->len < len ? sg->cap - sg->len : len;

		if (sg->len + n > sg->resident) {
			wb_reserve(fs->wb, sg->len + n - sg->resident);
			/* pages never touched: one call faults them in (the writer's copy takes no
			 * trap per page); a kept buffer (resident == cap) never gets here */
			seg_populate(sg->buf + sg->resident, sg->len + n - sg->resident);
			sg->resident = sg->len + n;
		}
		if (buf)
			memcpy(sg->buf + sg->len, buf, n);
		else
			memset(sg->buf + sg->len, 0, n);
		pthread_mutex_lock(&oi->fly_mu);
		if (fresh) {
			if (oi->seg_tail)
				oi->seg_tail->next = sg;
			else
				oi->seg_head = sg;
			oi->seg_tail = sg;
			segs_trim_locked(oi, &dead); /* the old tail, if the cutter is past it */
		}
		sg->len += n;
		oi->data_end += n;
		pthread_mutex_unlock(&oi->fly_mu);
		segs_put(fs, dead);
		len -= n;
		if (buf)
			buf += n;
		cut_kick(fs, oi, fs->wb ? CUT_KICK : 1, false);
	}
	return 0;
}

/* Copy [0, size) of the current stream content into a new staging file and switch to it. */
static int enter_staging(struct ckfs *fs, struct oinode *oi)
{
	size_t bufsz = STORE_CHUNK_MAX;
	uint8_t *buf;
	int fd, rc = 0;

	oi_fly_drain(fs, oi);
	if (oi->fly_lost)
		return oi->err; /* the bytes past ext_end are gone */
	fd = openat(fs->staging_dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	buf = malloc(bufsz);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	for (size_t i = 0; i < oi->n_ext && rc == 0; i++) {
		const struct idx_extent *e = &oi->ext[i];
		struct store_hash h;
		ssize_t n;

		memcpy(h.b, e->hash, STORE_HASH_LEN);
		n = store_chunk_pread(fs->st, &h, buf, e->length, 0);
		if (n != (ssize_t)e->length)
			rc = n < 0 ? (n == -ENOMEM ? -ENOMEM : -EIO) : -EIO;
		else if (pwrite(fd, buf, e->length, (off_t)e->offset) != (ssize_t)e->length)
			rc = errno ? -errno : -EIO;
	}
	/* drained: the bytes past ext_end are in the segments (the chunk being cut, or more when
	 * the cutter stopped on a failure) */
	for (uint64_t pos = oi->ext_end; rc == 0 && pos < oi->data_end;) {
		size_t n = oi->data_end - pos < bufsz ? (size_t)(oi->data_end - pos) : bufsz;

		pthread_mutex_lock(&oi->fly_mu);
		oi_segs_copy_locked(oi, pos, buf, n);
		pthread_mutex_unlock(&oi->fly_mu);
		if (pwrite(fd, buf, n, (off_t)pos) != (ssize_t)n)
			rc = errno ? -errno : -EIO;
		pos += n;
	}
	if (rc == 0 && ftruncate(fd, (off_t)oi->size) < 0)
		rc = -errno;
	free(buf);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	oi->stage_fd = fd;
	atomic_fetch_add(&fs->n_staging, 1);
	/* the bytes not yet stored are now in the staging file, not yet in chunks: still held
	 * (invariant 7) */
	oi->stage_held += uncut_held(oi);
	oi->space_mark = oi->data_end; /* drained: the cutter is idle */
	oi->n_ext = 0;
	oi->ext_end = 0;
	oi_stream_cut_back(fs, oi, 0);
	oi->hash_ok = false;
	return 0;
}

/* Back to an empty stream. Pins of dropped chunks stay until the next commit. */
static void reset_empty(struct ckfs *fs, struct oinode *oi)
{
	oi_fly_drain(fs, oi);
	oi->fly_lost = false;
	if (oi->stage_fd >= 0) {
		close(oi->stage_fd);
		oi->stage_fd = -1;
	}
	space_release(fs, oi->stage_held);
	oi->stage_held = 0;
	oi->n_ext = 0;
	oi->ext_end = 0;
	oi_stream_cut_back(fs, oi, 0);
	oi->size = 0;
	oi->err = 0;
	store_hasher_reset(oi->hasher);
	oi->hash_ok = true;
}


/* Take oi's write lock (held on return, also on failure) and harvest the finished chunks.
 * Returns 0, or the file's sticky error. */
static int wrlock_harvest(struct ckfs *fs, struct oinode *oi)
{
	pthread_rwlock_wrlock(&oi->lock);
	fly_harvest(fs, oi);
	return oi->err;
}

ssize_t oi_write(struct ckfs *fs, struct oinode *oi, const void *buf, size_t len, uint64_t off)
{
	ssize_t rc = (ssize_t)len;
	bool inplace = false;

	if (off + len < off || off + len > CKPTFS_MAX_FILE_SIZE)
		return -EFBIG;
	if (wrlock_harvest(fs, oi) < 0) {
		rc = oi->err;
		goto out;
	}
	if (oi->stage_fd < 0 && off < oi->data_end)
		trim_zeros_from(fs, oi, off);
	if (oi->stage_fd < 0 && off != oi->data_end) {
		int r = 0;

		/* inside the stored chunks: in place, at the cost of this write (oi_overwrite.c);
		 * elsewhere, or past its budget, a staging copy of the file */
		oi_fly_drain(fs, oi);
		inplace = oi_overwrite_fits(oi, len, off);
		if (!inplace)
			r = enter_staging(fs, oi);
		if (r < 0) {
			rc = r;
			goto out;
		}
	}
	if (space_reserve(fs, len) < 0) { /* as ext4 does at write(): invariant 7 */
		rc = -ENOSPC;
		goto out;
	}
	if (inplace) {
		int r = oi_overwrite(fs, oi, buf, len, off);

		space_release(fs, len); /* stored, or not taken: invariant 7 */
		if (r < 0) {
			rc = r;
			goto out;
		}
	} else if (oi->stage_fd >= 0) {
		size_t done = 0;

		while (done < len) {
			ssize_t n = pwrite(oi->stage_fd, (const uint8_t *)buf + done, len - done,
					   (off_t)(off + done));

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				rc = done ? (ssize_t)done : -errno;
				break;
			}
			done += (size_t)n;
		}
		if (done && off + done > oi->size)
			oi->size = off + done;
		oi->stage_held += done;
		space_release(fs, len - done);
	} else {
		uint64_t end0 = oi->data_end;
		int r = stream_append(fs, oi, buf, len);

		space_release(fs, len - (oi->data_end - end0)); /* the bytes not taken */
		if (oi->data_end > oi->size)
			oi->size = oi->data_end;
		if (r < 0) {
			/* the bytes not taken are lost: the file cannot be committed until rewritten */
			oi->err = r;
			rc = r;
		}
	}
	set_overlay(fs, oi, rc > 0 ? (uint64_t)rc : 0);
out:
	pthread_rwlock_unlock(&oi->lock);
	return rc;
}

int oi_truncate(struct ckfs *fs, struct oinode *oi, uint64_t size)
{
	int rc = 0;

	if (size > CKPTFS_MAX_FILE_SIZE)
		return -EFBIG;
	pthread_rwlock_wrlock(&oi->lock);
	if (size == oi->size)
		goto out_touch;
	if (size == 0) {
		reset_empty(fs, oi);
		goto out_touch;
	}
	if (oi->stage_fd < 0 && size >= oi->data_end) {
		/* grow, or shrink within the zeros: nothing written is cut (invariant 1) */
		oi->size = size;
		goto out_touch;
	}
	if (oi->stage_fd < 0 && (rc = enter_staging(fs, oi)) < 0)
		goto out;
	if (ftruncate(oi->stage_fd, (off_t)size) < 0) {
		rc = -errno;
		goto out;
	}
	oi->size = size;
out_touch:
	set_overlay(fs, oi, 0);
out:
	pthread_rwlock_unlock(&oi->lock);
	return rc;
}

int oi_punch(struct ckfs *fs, struct oinode *oi, uint64_t off, uint64_t len)
{
	int rc = 0;

	if (off + len < off)
		return -EFBIG;
	if ((rc = wrlock_harvest(fs, oi)) < 0)
		goto out;
	uint64_t end = off + len < oi->size ? off + len : oi->size;

	if (off >= end || (oi->stage_fd < 0 && off >= oi->data_end))
		goto out; /* nothing there, or zeros already (invariant 1) */
	if (oi->stage_fd < 0 && (rc = enter_staging(fs, oi)) < 0)
		goto out;
	if (fallocate(oi->stage_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
		      (off_t)(end - off)) < 0) {
		rc = -errno;
		goto out;
	}
	set_overlay(fs, oi, 0);
out:
	pthread_rwlock_unlock(&oi->lock);
	return rc;
}
