/*
 * inode.c — inode lifetime: the kernel's lookup counts (FUSE_LOOKUP/FORGET) and the deletion
 * of an inode with no name left once neither the kernel nor an open file (oinode.c) uses it.
 *
 * An inode whose nlink drops to 0 stays in the index until its last close (oi_put) and its
 * last forget (ino_forget_locked), as on any POSIX filesystem; an unmount or a crash in between
 * leaves it to idx_recover. The lookup counts run with fs->mu held.
 *
 * Also the daemon's clock (ckfs_now: inode times, lock-free) and the release of the chunks an
 * index transaction freed (ino_release_*: their files deleted once it committed).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/write/write.h"

/* ---- kernel lookup counts (fs->mu held) ---- */

static struct lookup_ent **lookup_slot(struct ckfs *fs, uint64_t ino)
{
	struct lookup_ent **pp = &fs->ltab[ino % LTAB_BUCKETS];

	while (*pp && (*pp)->ino != ino)
		pp = &(*pp)->next;
	return pp;
}

/* One more kernel reference to ino, taken by every successful entry reply. */
void ino_lookup_inc(struct ckfs *fs, uint64_t ino)
{
	struct lookup_ent **pp = lookup_slot(fs, ino);

	if (!*pp) {
		*pp = calloc(1, sizeof(**pp));
		if (!*pp)
			return; /* the inode then lives only until its last close or the unmount */
		(*pp)->ino = ino;
	}
	(*pp)->n++;
}

void ino_lookups_free(struct ckfs *fs)
{
	for (unsigned i = 0; i < LTAB_BUCKETS; i++) {
		while (fs->ltab[i]) {
			struct lookup_ent *n = fs->ltab[i]->next;

			free(fs->ltab[i]);
			fs->ltab[i] = n;
		}
	}
}

bool ino_referenced(struct ckfs *fs, uint64_t ino)
{
	return *lookup_slot(fs, ino) != NULL || oi_find(fs, ino) != NULL;
}

/* Is ino, whose lookup count just dropped to 0, to be deleted: no name left, no open file? */
static bool reapable(struct ckfs *fs, uint64_t ino)
{
	struct idx_inode a;

	return ino != IDX_ROOT_INO && !ino_referenced(fs, ino) &&
	       idx_inode_get(fs->ix, ino, &a) == 0 && a.nlink == 0;
}

void ino_reap_many(struct ckfs *fs, const uint64_t *inos, size_t n)
{
	struct ino_freed fr = { 0 };
	bool begun = false, ok = true;

	for (size_t i = 0; i < n && ok; i++) {
		if (!reapable(fs, inos[i]))
			continue;
		if (!begun)
			ok = begun = idx_begin(fs->ix) == 0;
		if (ok)
			ok = idx_inode_delete(fs->ix, inos[i], ino_release_collect, &fr) == 0;
	}
	if (!begun && ok)
		return; /* nothing to delete */
	ok = ok && idx_commit(fs->ix) == 0;
	if (!ok)
		idx_rollback(fs->ix); /* left for idx_recover at unmount or the next mount */
	ino_release_finish(fs, &fr, ok);
}

bool ino_forget_count(struct ckfs *fs, uint64_t ino, uint64_t n)
{
	struct lookup_ent **pp = lookup_slot(fs, ino), *e = *pp;

	if (!e)
		return false;
	e->n = e->n > n ? e->n - n : 0;
	if (e->n > 0)
		return false;
	*pp = e->next;
	free(e);
	return true;
}

void ino_forget_locked(struct ckfs *fs, uint64_t ino, uint64_t n)
{
	if (ino_forget_count(fs, ino, n))
		ino_reap_many(fs, &ino, 1);
}

/*
 * Drop one link to ino (whose dentry the caller already removed), in a transaction, fs->mu held.
 * An inode still open or known to the kernel stays in the index with nlink 0 until its last
 * close (oi_put) and forget (ino_forget_locked), as on any POSIX filesystem.
 */
int ino_drop_link(struct ckfs *fs, uint64_t ino, int64_t now, struct ino_freed *fr)
{
	struct idx_inode a;
	int rc = idx_inode_get(fs->ix, ino, &a);

	if (rc < 0)
		return rc;
	a.nlink = S_ISDIR(a.mode) ? 0 : a.nlink - 1;
	a.ctime_ns = now;
	if (a.nlink == 0 && !ino_referenced(fs, ino))
		return idx_inode_delete(fs->ix, ino, ino_release_collect, fr);
	return idx_inode_update(fs->ix, &a);
}

/* ---- the daemon clock, and chunks freed by index transactions ---- */

int64_t ckfs_now(struct ckfs *fs)
{
	int64_t now = ckpt_now_ns();
	int64_t last = atomic_load(&fs->wr.last_ns);

	for (;;) {
		int64_t t = now > last ? now : last + 1;

		if (atomic_compare_exchange_weak(&fs->wr.last_ns, &last, t))
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
