/*
 * space.c — free space on the store's disk reserved for the bytes written and not yet on it.
 * close() returns before a file's chunks are stored (commit.c), so a save that the disk cannot
 * hold would be accepted and then lost when its chunks fail to store. Instead oi_write reserves
 * the raw size of each write here, and a write that does not fit fails with ENOSPC at write(),
 * as ext4 answers with delayed allocation (it reserves blocks at write time:
 * ext4_da_reserve_space in the kernel's fs/ext4/inode.c).
 *
 * Invariants:
 *   1. held == the raw bytes that oi_write accepted and that are neither on the store's disk
 *      nor dropped (write.h, struct oinode invariant 7): a file's stream bytes not yet cut
 *      above its space_mark, its staging bytes not yet committed (stage_held), and each chunk
 *      in flight's fly_job.held until a worker has stored it or failed to. Raw size: a chunk
 *      compressed takes less, which the next sample shows as free space; compression only
 *      gives back.
 *   2. released counts every byte ever given back (never decreases). A sample is taken under
 *      mu: released is read into rel_at before fstatvfs, then avail is the free space seen,
 *      less CKPT_RESERVE_BYTES when STORE/reserve is not held (the daemon takes it back as
 *      soon as there is room: ops_dir.c), so a byte released while sampling is counted twice
 *      rather than missed.
 *   3. A reservation fits when held + (released - rel_at) + SPACE_MARGIN <= avail: the bytes
 *      released since the sample went to disk after it, or around it (counted twice, which
 *      only errs towards ENOSPC), and avail did not see them go.
 *   4. A writer trusts the last sample while it is younger than SPACE_SAMPLE_NS and its
 *      reservation keeps at least half of the room the sample left (avail - SPACE_MARGIN), or
 *      SPACE_FAR bytes of it, unused; otherwise it takes a new one. A write is refused only
 *      on a sample taken after it arrived (never a stale one), so space freed meanwhile (a
 *      step deleted, a chunk compressed) is seen. When the free space cannot be read
 *      (fstatvfs fails), the write is let through: no sample, no limit.
 *   5. seq is even while avail, rel_at and at_ns are consistent; a sampler makes it odd while
 *      it writes them (a seqlock), so writers read them without taking mu.
 *
 * Thread-safety: space_reserve and space_release take no lock but mu (a leaf, for sampling);
 * any lock may be held around them.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "fs/core/lockrank.h"
#include "fs/write/write.h"

/*
 * How long a sample of the store's free space is trusted, ns: 50 ms. A write request carries up
 * to 1 MiB, so sampling at most this often keeps fstatvfs off nearly every write, while another
 * process filling the same disk is seen within a fraction of a second (only the margin covers
 * it meanwhile).
 */
#define SPACE_SAMPLE_NS (50LL * 1000 * 1000)

/*
 * Space left free beyond the reserved bytes, bytes: 1 MiB. Storing a file costs a little more
 * than its raw bytes: each chunk file's 32-byte header and its last partial block (at most
 * 4 KiB per chunk of 1 MiB on average), and the commit's index rows (WAL frames of 4 KiB,
 * sqlite.org/wal.html). The index's larger needs, deleting steps on a full disk, are what
 * STORE/reserve (CKPT_RESERVE_BYTES) is for.
 */
#define SPACE_MARGIN (1ULL << 20)

/*
 * Room left unused, bytes, beyond which a sample younger than SPACE_SAMPLE_NS is trusted even
 * with more than half the room reserved: 256 MiB, about what another writer of the same disk
 * could take within SPACE_SAMPLE_NS at 5 GB/s (an NVMe drive's sequential write). Without it, a
 * save reserving most of a large disk's free space would sample on every write.
 */
#define SPACE_FAR (256ULL << 20)

struct space {
	_Atomic uint64_t held;     /* bytes (invariant 1) */
	_Atomic uint64_t released; /* bytes (invariant 2) */
	pthread_mutex_t mu;        /* a leaf: one sampler at a time */
	_Atomic uint64_t seq;      /* invariant 5 */
	_Atomic uint64_t avail;    /* bytes free at the last sample, less a missing reserve */
	_Atomic uint64_t rel_at;   /* released when it was taken */
	_Atomic int64_t at_ns;     /* CLOCK_MONOTONIC ns when it was taken; 0: none yet */
	int dir_fd;                /* STORE, borrowed from the repo */
};

int space_start(struct ckfs *fs)
{
	struct space *sp = calloc(1, sizeof(*sp));

	if (!sp)
		return -ENOMEM;
	pthread_mutex_init(&sp->mu, NULL);
	sp->dir_fd = fs->repo->dir_fd;
	fs->wr.space = sp;
	return 0;
}

void space_stop(struct ckfs *fs)
{
	struct space *sp = fs->wr.space;

	if (!sp)
		return;
	fs->wr.space = NULL;
	pthread_mutex_destroy(&sp->mu);
	free(sp);
}

/* Take a sample (invariant 2) unless one was taken at or after since_ns. Returns false when
 * the free space cannot be read; the old sample, if any, stays. */
static bool space_sample(struct space *sp, int64_t since_ns)
{
	struct statvfs sv;
	struct stat st;
	uint64_t rel, avail, frsize;
	bool ok = true;

	ckpt_lock(&sp->mu, CKPT_RANK_SPACE);
	if (atomic_load(&sp->at_ns) >= since_ns && atomic_load(&sp->at_ns) != 0)
		goto out; /* another writer sampled while this one waited for mu */
	rel = atomic_load(&sp->released);
	if (fstatvfs(sp->dir_fd, &sv) < 0) {
		ok = false;
		goto out;
	}
	frsize = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
	avail = (uint64_t)sv.f_bavail * frsize;
	if (fstatat(sp->dir_fd, "reserve", &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != CKPT_RESERVE_BYTES)
		avail = avail > CKPT_RESERVE_BYTES ? avail - CKPT_RESERVE_BYTES : 0;
	atomic_fetch_add(&sp->seq, 1);
	atomic_store(&sp->avail, avail);
	atomic_store(&sp->rel_at, rel);
	atomic_store(&sp->at_ns, ckpt_mono_ns());
	atomic_fetch_add(&sp->seq, 1);
out:
	ckpt_unlock(&sp->mu, CKPT_RANK_SPACE);
	return ok;
}

/* Read the last sample consistently (invariant 5); false when there is none yet. */
static bool space_read(struct space *sp, uint64_t *ret_avail, uint64_t *ret_rel_at,
		       int64_t *ret_at_ns)
{
	for (;;) {
		uint64_t s = atomic_load(&sp->seq);

		if (s & 1) { /* a sample is being written: wait for it on mu */
			ckpt_lock(&sp->mu, CKPT_RANK_SPACE);
			ckpt_unlock(&sp->mu, CKPT_RANK_SPACE);
			continue;
		}
		*ret_avail = atomic_load(&sp->avail);
		*ret_rel_at = atomic_load(&sp->rel_at);
		*ret_at_ns = atomic_load(&sp->at_ns);
		if (atomic_load(&sp->seq) == s)
			return *ret_at_ns != 0;
	}
}

/*
 * Whether held bytes reserved fit in the last sample (invariant 3). *ret_at_ns: when it was
 * taken (0: none yet, and nothing fits); *ret_roomy: they leave at least half the room unused
 * (invariant 4).
 */
static bool space_fits(struct space *sp, uint64_t held, int64_t *ret_at_ns, bool *ret_roomy)
{
	uint64_t avail, rel_at, room, need;

	*ret_roomy = false;
	if (!space_read(sp, &avail, &rel_at, ret_at_ns))
		return false;
	room = avail > SPACE_MARGIN ? avail - SPACE_MARGIN : 0;
	need = held + (atomic_load(&sp->released) - rel_at);
	*ret_roomy = need <= room / 2 || (need <= room && room - need >= SPACE_FAR);
	return need <= room;
}

int space_reserve(struct ckfs *fs, uint64_t n)
{
	struct space *sp = fs->wr.space;
	int64_t now, at_ns;
	bool roomy;

	if (!sp || n == 0)
		return 0;
	now = ckpt_mono_ns();
	if (space_fits(sp, atomic_fetch_add(&sp->held, n) + n, &at_ns, &roomy) && roomy &&
	    now - at_ns < SPACE_SAMPLE_NS)
		return 0;
	/* a free space that cannot be read holds nothing back: the reservation stands */
	if (!space_sample(sp, now) ||
	    space_fits(sp, atomic_load(&sp->held), &at_ns, &roomy))
		return 0;
	atomic_fetch_sub(&sp->held, n);
	return -ENOSPC;
}

void space_release(struct ckfs *fs, uint64_t n)
{
	struct space *sp = fs->wr.space;

	if (!sp || n == 0)
		return;
	/* released first: a writer between the two sees the bytes twice, never not at all */
	atomic_fetch_add(&sp->released, n);
	uint64_t was = atomic_fetch_sub(&sp->held, n);

	assert(was >= n); /* invariant 1: a release matches a reservation */
	(void)was;
}
