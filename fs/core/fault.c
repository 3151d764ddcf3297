/* SPDX-License-Identifier: MIT */
/*
 * fault.c — crash-point injection for the torture suite (tests/torture/test_faults.py), after
 * SQLite's crash tests: CKPTFS_FAULT=point[:n][,point[:n]...] makes the process SIGKILL itself
 * the n-th time (default 1) it reaches a named point, so recovery can be tested at exactly the
 * moments a power cut or an OOM kill could hit. An item point[:n]@MS instead sleeps MS
 * milliseconds the n-th time the point is reached (every time without :n), to hold open a
 * window between two threads' steps that is otherwise too short to hit
 * (tests/mount/test_nodes.py, test_writeback.py CommitOutsideTheLockTest).
 *
 * Invariants:
 *   1. Without CKPTFS_FAULT, ckpt_fault() costs one relaxed atomic load and does nothing.
 *   2. Every point name passed to ckpt_fault() is in points[] (assert), and ckpt_fault_init()
 *      refuses a CKPTFS_FAULT naming anything else, so a typo never silently tests nothing.
 *   3. The kill is SIGKILL to the whole process: no atexit, no destructors, no flush of anything
 *      but the one log line written before it (stderr is unbuffered).
 *   4. A delay blocks only the thread that reached the point, holding whatever locks it holds.
 */
#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fs/ckptfs.h"

/* The named points; where each sits is said next to its call. */
static const char *const points[] = {
	"commit-before-index", /* oi_commit.c: chunks durable, the index does not name them yet */
	"commit-mid-txn",      /* oi_commit.c: file's new extents written, COMMIT not yet run */
	"commit-after-index",  /* oinode.c: committed, chunks the old content freed not deleted */
	"commit-durable",      /* oi_commit.c: committed and synced, fs->mu let go, freed chunks
				* not deleted yet */
	"chunk-free",          /* oinode.c: between deleting two freed chunk files */
	"step-complete-txn",   /* steps_judge.c: step set complete, COMMIT not yet run */
	"retention-txn",       /* steps_retain.c: a step pruned by retention, COMMIT not yet run */
	"retention-after",     /* steps_retain.c: retention committed, its chunks not deleted yet */
	"sweep-after-commit",  /* repo.c: recovery/gc committed, freed chunks not deleted */
	"sweep-orphan",        /* repo.c: recovery/gc between deleting two orphan chunk files */
	"node-show",           /* node.c: a step learnt global, the other nodes' files not shown */
	"verify-listed",       /* ckptctl verify.c: chunks listed, files not yet (one snapshot) */
	"ls-resolved",         /* ckptctl ls.c: a path looked up, its inode not read yet */
	"mount-check",         /* steps.c: the newest step's check holds fs->mu, not begun; the
				* mount comes up meanwhile */
	"inval-send",          /* daemon.c: names the kernel must forget taken, not yet sent */
	"tracker-flush",       /* ops_file.c: a tracker's content read for a reader, the names
				* it moved not yet sent */
	"stats-scan",          /* meta.c: a status or metrics read about to scan the store for
				* its figures (with fs->mu held only if its own handle failed) */
	"top-dir-made",        /* ops_dir.c: a top-level directory's mkdir committed, its writer
				* not yet noted by the step engine */
	"top-renamed",         /* ops_dir.c: a rename into the root committed, the step engine
				* not yet told (a tmp step directory's commit rename) */
};
#define NPOINTS (sizeof(points) / sizeof(points[0]))

static atomic_bool armed;
static unsigned want[NPOINTS];       /* 0: not armed; else the hit that kills */
static unsigned delay_ms[NPOINTS];   /* 0: no delay; else milliseconds to sleep */
static unsigned delay_hit[NPOINTS];  /* the hit that sleeps; 0: every hit */
static atomic_uint hits[NPOINTS];

static int point_id(const char *name, size_t len)
{
	for (size_t i = 0; i < NPOINTS; i++)
		if (strlen(points[i]) == len && memcmp(points[i], name, len) == 0)
			return (int)i;
	return -1;
}

/* A number in 1..1000000 spanning exactly p[0, len), or 0. */
static unsigned parse_count(const char *p, size_t len)
{
	char *end;
	unsigned long n;

	if (len == 0 || *p < '0' || *p > '9')
		return 0;
	errno = 0;
	n = strtoul(p, &end, 10);
	return errno || end != p + len || n > 1000000 ? 0 : (unsigned)n;
}

/* Arm one item "point[:n][@ms]" of len bytes at p. Returns 0 or -EINVAL. */
static int arm(const char *p, size_t len)
{
	size_t nlen = strcspn(p, ",:@"), at = nlen;
	int id = point_id(p, nlen);
	unsigned n = 0, ms = 0;

	if (id < 0)
		return -EINVAL;
	if (at < len && p[at] == ':') {
		size_t clen = strcspn(p + at + 1, ",@");

		if (!(n = parse_count(p + at + 1, clen)))
			return -EINVAL;
		at += 1 + clen;
	}
	if (at < len && p[at] == '@') {
		if (!(ms = parse_count(p + at + 1, len - at - 1)))
			return -EINVAL;
		at = len;
	}
	if (at != len)
		return -EINVAL;
	if (ms) {
		delay_ms[id] = ms;
		delay_hit[id] = n;
	} else {
		want[id] = n ? n : 1;
	}
	return 0;
}

int ckpt_fault_init(char *err, size_t errcap)
{
	const char *v = getenv("CKPTFS_FAULT");

	if (!v || !*v)
		return 0;
	for (const char *p = v; *p;) {
		size_t len = strcspn(p, ",");

		if (arm(p, len) < 0) {
			size_t off = 0;

			off += (size_t)snprintf(err, errcap, "CKPTFS_FAULT: '%.*s' is not "
						"point[:n>0] or point[:n>0]@ms>0; points:",
						(int)len, p);
			for (size_t i = 0; i < NPOINTS && off < errcap; i++)
				off += (size_t)snprintf(err + off, errcap - off, " %s", points[i]);
			return -EINVAL;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	atomic_store(&armed, true);
	return 0;
}

void ckpt_fault(const char *point)
{
	if (!atomic_load_explicit(&armed, memory_order_relaxed))
		return;
	int id = point_id(point, strlen(point));

	assert(id >= 0);
	if (id < 0 || (!want[id] && !delay_ms[id]))
		return;
	unsigned h = atomic_fetch_add(&hits[id], 1) + 1;

	if (delay_ms[id] && (!delay_hit[id] || h == delay_hit[id])) {
		struct timespec t = { delay_ms[id] / 1000, (long)(delay_ms[id] % 1000) * 1000000L };

		ckpt_log("fault injection: pid %d sleeps %u ms at '%s' (hit %u)", (int)getpid(),
			 delay_ms[id], point, h);
		while (nanosleep(&t, &t) < 0 && errno == EINTR)
			;
	}
	if (h != want[id])
		return;
	ckpt_log("fault injection: killing pid %d at '%s' (hit %u)\n",
		(int)getpid(), point, h);
	kill(getpid(), SIGKILL);
	pause();
}
