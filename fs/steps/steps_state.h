/*
 * steps_state.h — the step engine's part of the daemon's state (struct steps_state, the member
 * `steps` of struct ckfs, fs/daemon.h): its settings, its runtime facts, its threads, the
 * special inodes of /.ckptfs, the mount's report and the queue of names the kernel must forget.
 *
 * Owner: the step engine (the files of fs/steps/). Only its files read or write these fields;
 * another layer goes through the accessors of steps.h (steps_settings, steps_meta_ino,
 * steps_save_hist, steps_inval_pending) or fills the settings once through steps_configure,
 * before steps_init.
 * This header holds only definitions (no functions, no include of daemon.h) so that daemon.h
 * can embed the struct by value.
 *
 * Locks: ckfs.mu (CKPT_RANK_FS, fs/core/lockrank.h) guards every field below that changes
 * while the daemon serves, except where a field says otherwise: the settings are written once
 * before the session starts and read without a lock; report has its own leaf lock
 * (CKPT_RANK_REPORT); inval.queued is written under ckfs.mu and read without it; save_hist is
 * lock-free.
 */
#ifndef CKPTFS_FS_STEPS_STATE_H
#define CKPTFS_FS_STEPS_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fs/ckptfs.h"
#include "fs/core/workers.h"

struct step_rt;

/*
 * The step engine's settings, from the mount options (fs/fuse/daemon.c configure ->
 * steps_configure). Written once before the session starts; read without a lock afterwards,
 * by any layer, through steps_settings (steps.h).
 */
struct steps_opts {
	int layout;              /* -o layout=NAME; LAYOUT_NONE (0) automatic; -1 none at all */
	unsigned keep_max;       /* -o keep_checkpoint_max=N, 0 = keep all */
	int64_t keep_every;      /* -o keep_every=K, 0 = none */
	unsigned keep_quarantine; /* -o keep_quarantine=N: steps set aside kept, 0 = all */
	int ranks;               /* -o ranks=N: MindFormers 1.0 world size; 0 = count rank_N dirs */
};

/*
 * What this mount found and did before it served (fs/steps/steps_report.c): an unclean stop of
 * the previous daemon and what recovery did, the steps set aside while recovering or by the
 * check of the newest steps, and an index upgrade. Said in the log, by the `ckptfs` command on
 * its stderr, and kept in STORE/recovery.json for `ckptctl status`.
 */
#define MOUNT_REPORT_ASIDE 8 /* steps set aside named one by one; more are counted */
struct mount_aside {
	int kind;                /* enum layout_kind */
	int state;               /* IDX_STEP_INCOMPLETE or IDX_STEP_CORRUPT */
	char name[256];          /* the step's name ("iter_0000004") */
	char why[256];           /* the note of its state change */
	char resume[256];        /* the step a resume finds once the check is over; "" none */
};
struct mount_report {
	pthread_mutex_t mu;      /* guards every field below; a leaf (CKPT_RANK_REPORT), taken
				    under ckfs.mu */
	pthread_cond_t cv;       /* signalled when done becomes true or check_bytes is set */
	bool active;             /* between steps_report_begin and steps_report_finish */
	bool done;               /* steps_report_finish ran: the check of the newest steps ended */
	uint64_t check_bytes;    /* stored bytes of the steps the check reads first; 0 until
				    steps_report_checking says */
	bool unclean;            /* the previous daemon did not stop cleanly */
	pid_t prev_pid;          /* its pid, 0 if unknown */
	uint64_t files_removed, chunks_removed; /* the recovery sweep (ckpt_repo_sweep) */
	unsigned judged;         /* unfinished steps judged while recovering */
	unsigned completed;      /* of those, complete */
	unsigned malformed;      /* files found malformed while recovering */
	unsigned naside, more;   /* steps set aside: in aside[], and beyond it */
	struct mount_aside aside[MOUNT_REPORT_ASIDE];
	char upgrade[512];       /* the index upgrade said at mount, "" none */
};

/* One name to drop from the kernel's dentry cache: entry name of directory inode parent. */
struct inval {
	uint64_t parent;
	char name[256];
};

/*
 * The names the step engine moved or removed behind the kernel's back (pruned, quarantined,
 * retained, restored), queued by steps_inval_queue and handed over by steps_take_inval to the
 * FUSE layer, which sends them (fs_flush_inval). v, n, cap: guarded by ckfs.mu. queued: n > 0,
 * written under ckfs.mu and read without it (steps_inval_pending), so that a sender with
 * nothing to send takes no lock.
 */
struct inval_queue {
	struct inval *v;         /* owned (free(3)); NULL when empty */
	size_t n, cap;
	atomic_bool queued;
};

/* The step engine's state: one per mount, the member `steps` of struct ckfs. */
struct steps_state {
	struct steps_opts opt;   /* settings: written before the session, then read-only */
	struct {
		int64_t epoch, step, ts_ns;
	} *mf1_claim;            /* newest meta.json claim per rank (MindFormers 1.0): what it
				    names and when it was recorded (steps_mf1_note_claim); mu */
	int mf1_nranks;          /* entries of mf1_claim; mu */
	/* The /.ckptfs tree, made by steps_init before the session starts, then read-only. */
	uint64_t meta_ino;       /* /.ckptfs */
	uint64_t quarantine_ino; /* /.ckptfs/quarantine */
	uint64_t retained_ino;   /* /.ckptfs/retained */
	struct step_rt *rt;      /* per-step runtime facts (steps_int.h); owned; mu */
	struct {
		pid_t pid;               /* the process that removed a root link tracker whose
					    kept copy waits in /.ckptfs/retained (0: none) */
		unsigned long long start; /* its start time (ckpt_pid_stat) */
	} top_unlink;                    /* steps_top.c invariant 6; mu */
	struct ckpt_workers reaper; /* the step reaper (steps_start) */
	pthread_cond_t reaper_cv; /* wakes the reaper; waited on with mu */
	bool stopping;           /* the reaper is to stop; mu */
	pthread_t checker;       /* the newest steps' check after the mount (steps_init) */
	bool checker_started;    /* checker is to be joined (steps_checker_join; one thread) */
	bool crash_recovery;     /* judging what a daemon that died left (steps_init only); mu */
	int64_t made_id;         /* the step row steps_on_mkdir made in a mkdir's transaction,
				    judged by the steps_on_name that follows it; 0 none; mu */
	int64_t renamed_id;      /* the step steps_on_rename sealed in a rename's transaction,
				    judged by the steps_on_name that follows it; 0 none; mu */
	struct mount_report report; /* what the mount found and did (steps_report.c); report.mu */
	struct ckpt_hist save_hist; /* a step's creation to complete (steps_set_state); lock-free */
	struct inval_queue inval; /* names the kernel must forget (above) */
};

#endif /* CKPTFS_FS_STEPS_STATE_H */
