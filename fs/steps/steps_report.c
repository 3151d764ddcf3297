/* SPDX-License-Identifier: MIT */
/*
 * steps_report.c — what a mount found and did before it served, told three ways: in the log,
 * by the `ckptfs` command on its user's terminal (fs/fuse/daemon.c asks steps_report_notes
 * before it daemonizes), and in STORE/recovery.json for `ckptctl status` afterwards.
 *
 * A mount recovers (after an unclean stop: the sweep, then the judgment of every step the dead
 * daemon left unfinished) and checks the newest complete step of each layout; either can set a
 * step aside, and the step a resume finds then moves back, or goes away with the tracker. A user
 * who only sees the tracker change, or vanish, is left to guess why.
 *
 * States of struct mount_report (daemon.h):
 *     idle --steps_report_begin--> active --steps_report_finish--> done
 * Invariants:
 *   1. Steps set aside are noted only while active (from before steps_init to the end of the
 *      check), so a step the reaper sets aside later is not said to be the mount's.
 *   2. Every field is read and written with report.mu held; report.mu is a leaf, taken under
 *      fs->mu by the step engine's hooks.
 *   3. STORE/recovery.json is replaced only by a mount that recovered from an unclean stop or set
 *      a step aside: it says the last time one did, however many clean mounts followed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "fs/core/lockrank.h"
#include "fs/steps/steps.h"
#include "fs/policy/layout.h"
#include "fs/steps/steps_int.h"

void steps_report_init(struct ckfs *fs)
{
	pthread_mutex_init(&fs->steps.report.mu, NULL);
	pthread_cond_init(&fs->steps.report.cv, NULL);
}

void steps_report_destroy(struct ckfs *fs)
{
	pthread_cond_destroy(&fs->steps.report.cv);
	pthread_mutex_destroy(&fs->steps.report.mu);
}

void steps_report_begin(struct ckfs *fs, bool unclean, pid_t prev_pid, uint64_t files,
			uint64_t chunks)
{
	struct mount_report *r = &fs->steps.report;

	ckpt_lock(&r->mu, CKPT_RANK_REPORT);
	r->active = true;
	r->unclean = unclean;
	r->prev_pid = unclean ? prev_pid : 0;
	r->files_removed = files;
	r->chunks_removed = chunks;
	ckpt_unlock(&r->mu, CKPT_RANK_REPORT);
}

void steps_report_state(struct ckfs *fs, const struct idx_step *s, int state, const char *note)
{
	struct mount_report *r = &fs->steps.report;

	ckpt_lock(&r->mu, CKPT_RANK_REPORT);
	if (!r->active)
		goto out;
	if (fs->steps.crash_recovery &&
	    (s->state == IDX_STEP_WRITING || s->state == IDX_STEP_SEALED)) {
		r->judged++;
		r->completed += state == IDX_STEP_COMPLETE;
	}
	if (state != IDX_STEP_INCOMPLETE && state != IDX_STEP_CORRUPT)
		goto out;
	if (r->naside == MOUNT_REPORT_ASIDE) {
		r->more++;
		goto out;
	}
	struct mount_aside *a = &r->aside[r->naside++];

	a->kind = s->kind;
	a->state = state;
	snprintf(a->name, sizeof(a->name), "%s", s->name);
	snprintf(a->why, sizeof(a->why), "%s", note ? note : "no reason recorded");
	a->resume[0] = '\0';
out:
	ckpt_unlock(&r->mu, CKPT_RANK_REPORT);
}

void steps_report_malformed(struct ckfs *fs)
{
	ckpt_lock(&fs->steps.report.mu, CKPT_RANK_REPORT);
	if (fs->steps.report.active)
		fs->steps.report.malformed++;
	ckpt_unlock(&fs->steps.report.mu, CKPT_RANK_REPORT);
}

void steps_report_upgrade(struct ckfs *fs, const char *msg)
{
	ckpt_lock(&fs->steps.report.mu, CKPT_RANK_REPORT);
	snprintf(fs->steps.report.upgrade, sizeof(fs->steps.report.upgrade), "%s", msg);
	ckpt_unlock(&fs->steps.report.mu, CKPT_RANK_REPORT);
}

/* The unclean stop and what recovery did, one line without a newline, into buf. report.mu held. */
static void summary(const struct mount_report *r, char *buf, size_t cap)
{
	char pid[32] = "";

	if (r->prev_pid > 0)
		snprintf(pid, sizeof(pid), " (pid %d)", (int)r->prev_pid);
	snprintf(buf, cap,
		 "the previous ckptfs%s did not stop cleanly; recovery removed %llu unlinked files "
		 "and %llu unreferenced chunks, judged %u unfinished steps: %u complete, %u steps "
		 "quarantined, %u files found malformed",
		 pid, (unsigned long long)r->files_removed, (unsigned long long)r->chunks_removed,
		 r->judged, r->completed, r->judged - r->completed, r->malformed);
}

void steps_report_recovered(struct ckfs *fs)
{
	char line[512];

	ckpt_lock(&fs->steps.report.mu, CKPT_RANK_REPORT);
	if (fs->steps.report.unclean)
		summary(&fs->steps.report, line, sizeof(line));
	ckpt_unlock(&fs->steps.report.mu, CKPT_RANK_REPORT);
	if (fs->steps.report.unclean) /* written only before any other thread runs */
		ckpt_log("%s", line);
}

/*
 * The step a resume of kind finds now into buf ("" none): what its tracker names, or, for a
 * layout whose trainer scans instead (no tracker), its newest complete step. fs->mu held.
 */
static void resume_of(struct ckfs *fs, int kind, char *buf, size_t cap)
{
	char name[LAYOUT_NAME_MAX + 1], content[LAYOUT_TRACKER_MAX];
	struct idx_step s;

	buf[0] = '\0';
	if (steps_vname(fs, kind, name, sizeof(name)) >= 0) {
		if (steps_tracker_content(fs, kind, content, sizeof(content), &s) >= 0)
			snprintf(buf, cap, "%s", s.name);
	} else if (idx_step_newest(fs->ix, 1u << kind, IDX_STEP_COMPLETE, &s) == 0 && s.dir_ino) {
		snprintf(buf, cap, "%s", s.name);
	}
}

/*
 * One step set aside, as said in the log and by the command, into buf (no newline); with_resume:
 * and where a resume lands now (known once the check is over).
 */
static void aside_line(const struct mount_aside *a, bool with_resume, char *buf, size_t cap)
{
	char where[320];

	if (!with_resume)
		where[0] = '\0';
	else if (a->resume[0])
		snprintf(where, sizeof(where), "a resume now finds '%s'", a->resume);
	else
		snprintf(where, sizeof(where), "no complete step is left, so a resume starts from "
			 "scratch (no tracker)");
	snprintf(buf, cap, "step '%s' (%s) quarantined at mount as %s: %s%s%s", a->name,
		 layout_name((enum layout_kind)a->kind), idx_step_state_name(a->state), a->why,
		 where[0] ? "; " : "", where);
}

/* The report as STORE/recovery.json's object (report.mu held). NULL: no memory. */
static json_t *report_json(const struct mount_report *r)
{
	json_t *aside = json_array(), *o;
	char sum[512] = "";

	for (unsigned i = 0; aside && i < r->naside; i++) {
		const struct mount_aside *a = &r->aside[i];

		json_array_append_new(aside, json_pack("{s:s, s:s, s:s, s:s, s:s?}", "name",
						       a->name, "layout",
						       layout_name((enum layout_kind)a->kind),
						       "state", idx_step_state_name(a->state), "why",
						       a->why, "tracker_step",
						       a->resume[0] ? a->resume : NULL));
	}
	if (r->unclean)
		summary(r, sum, sizeof(sum));
	int64_t now = ckpt_now_ns();

	/* docs/schemas/recovery.json; ckptctl status --json shows it as last_recovery */
	o = json_pack("{s:s, s:I, s:o, s:i, s:b, s:o, s:s?, s:I, s:I, s:i, s:i, s:i, s:o, s:i}",
		      "schema", "ckptfs-recovery/1", "mounted_ns", (json_int_t)now, "mounted",
		      policy_json_time(now), "pid", (int)getpid(), "previous_stopped_cleanly",
		      (int)!r->unclean,
		      "previous_pid", r->unclean && r->prev_pid > 0 ? json_integer(r->prev_pid)
								  : json_null(),
		      "summary", r->unclean ? sum : NULL, "files_removed",
		      (json_int_t)r->files_removed, "chunks_removed", (json_int_t)r->chunks_removed,
		      "steps_judged", (int)r->judged, "steps_completed", (int)r->completed,
		      "files_malformed", (int)r->malformed, "quarantined",
		      aside ? aside : json_array(), "quarantined_more", (int)r->more);
	return o;
}

/* Replace STORE/recovery.json with o, durably (ckpt_repo_publish). Returns 0 or -errno. */
static int report_publish(struct ckfs *fs, json_t *o)
{
	char *text = json_dumps(o, JSON_INDENT(1));
	int rc;

	if (!text)
		return -ENOMEM;
	rc = ckpt_repo_publish(fs->repo, CKPT_RECOVERY_FILE, text, strlen(text));
	free(text);
	return rc;
}

void steps_report_finish(struct ckfs *fs)
{
	struct mount_report *r = &fs->steps.report;
	struct mount_aside aside[MOUNT_REPORT_ASIDE];
	json_t *o = NULL;
	unsigned n;

	ckpt_lock(&r->mu, CKPT_RANK_REPORT);
	r->active = false;
	n = r->naside;
	memcpy(aside, r->aside, sizeof(aside));
	ckpt_unlock(&r->mu, CKPT_RANK_REPORT);
	/* outside report.mu: a tracker read may judge a step, whose hook takes report.mu */
	for (unsigned i = 0; i < n; i++) {
		char line[1200];

		resume_of(fs, aside[i].kind, aside[i].resume, sizeof(aside[i].resume));
		aside_line(&aside[i], true, line, sizeof(line));
		ckpt_log("%s", line);
	}
	ckpt_lock(&r->mu, CKPT_RANK_REPORT);
	memcpy(r->aside, aside, sizeof(aside));
	if (r->unclean || r->naside)
		o = report_json(r);
	ckpt_unlock(&r->mu, CKPT_RANK_REPORT);
	if (o) {
		int rc = report_publish(fs, o);

		if (rc < 0)
			ckpt_log("cannot record this mount's recovery in '%s/" CKPT_RECOVERY_FILE "': %s; "
				 "'ckptctl status' shows the one before", fs->repo->root, strerror(-rc));
		json_decref(o);
	}
	ckpt_lock(&r->mu, CKPT_RANK_REPORT);
	r->done = true;
	pthread_cond_broadcast(&r->cv);
	ckpt_unlock(&r->mu, CKPT_RANK_REPORT);
}

void steps_report_checking(struct ckfs *fs, uint64_t bytes)
{
	struct mount_report *r = &fs->steps.report;

	ckpt_lock(&r->mu, CKPT_RANK_REPORT);
	r->check_bytes = bytes;
	pthread_cond_broadcast(&r->cv);
	ckpt_unlock(&r->mu, CKPT_RANK_REPORT);
}

bool steps_report_wait(struct ckfs *fs, int64_t timeout_ns, uint64_t max_bytes)
{
	struct mount_report *r = &fs->steps.report;
	struct timespec until;
	bool done;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += (time_t)(timeout_ns / 1000000000);
	until.tv_nsec += (long)(timeout_ns % 1000000000);
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	ckpt_lock(&r->mu, CKPT_RANK_REPORT);
	while (!r->done && r->check_bytes <= max_bytes &&
	       ckpt_cond_wait(&r->cv, &r->mu, CKPT_RANK_REPORT, &until) == 0)
		;
	done = r->done;
	ckpt_unlock(&r->mu, CKPT_RANK_REPORT);
	return done;
}

/* Append line and a newline to buf at *len if the whole line fits. */
static void add_line(char *buf, size_t cap, size_t *len, const char *line)
{
	size_t n = strlen(line);

	if (*len + n + 2 > cap)
		return;
	memcpy(buf + *len, line, n);
	*len += n;
	buf[(*len)++] = '\n';
	buf[*len] = '\0';
}

size_t steps_report_notes(struct ckfs *fs, char *buf, size_t cap)
{
	struct mount_report *r = &fs->steps.report;
	char line[1200];
	size_t len = 0;

	if (!cap)
		return 0;
	buf[0] = '\0';
	ckpt_lock(&r->mu, CKPT_RANK_REPORT);
	if (r->upgrade[0])
		add_line(buf, cap, &len, r->upgrade);
	if (r->unclean) {
		summary(r, line, sizeof(line));
		add_line(buf, cap, &len, line);
	}
	/* before the check ends only the recovery's judgments are known, and final */
	for (unsigned i = 0; i < r->naside; i++) {
		aside_line(&r->aside[i], r->done, line, sizeof(line));
		add_line(buf, cap, &len, line);
	}
	if (r->more) {
		snprintf(line, sizeof(line), "and %u more steps quarantined (ckptfs.log names them)",
			 r->more);
		add_line(buf, cap, &len, line);
	}
	if (!r->done)
		add_line(buf, cap, &len,
			 "the check of the newest complete steps goes on after this command returns "
			 "(reads of the mount wait for it); a step it sets aside is in the log and in "
			 "'ckptctl STORE status'");
	ckpt_unlock(&r->mu, CKPT_RANK_REPORT);
	return len;
}
