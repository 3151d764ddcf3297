/*
 * test_steps.c — unit tests of schema v2 of index/: inode flags, steps (lifecycle, events,
 * figures, pins, lookups), tracker claims, the v1 -> v2 migration and idx_check on steps.
 * Real SQLite databases in a fresh temporary directory per test; raw sqlite3 only to build a v1
 * database or damage one from outside.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "index/index.h"
#define CTEST_SQLITE
#include "tests/lib/ctest.h"
#include "tests/index/fixture.h"

/* ---- helpers ---- */

static void steps_hash(uint8_t h[IDX_HASH_LEN], uint32_t seed)
{
	for (int i = 0; i < IDX_HASH_LEN; i++)
		h[i] = (uint8_t)(seed * 13 + 7 * i + 1);
}

static uint64_t new_dir(const char *name)
{
	return new_inode(IDX_ROOT_INO, name, S_IFDIR | 0755);
}

static int64_t new_step(int kind, const char *name, int64_t step, uint64_t dir, int64_t now)
{
	int64_t id = 0;

	cr_assert_eq(idx_step_create(ix, kind, name, step, dir, now, &id), 0, "%s", name);
	cr_assert_gt(id, 0);
	return id;
}

static void check_ok(void)
{
	char msg[256];

	cr_assert_eq(idx_check(ix, msg, sizeof(msg)), 0, "%s", msg);
}

/* idx_check fails and its message contains want */
static void check_fails(const char *want)
{
	char msg[256];

	cr_assert_eq(idx_check(ix, msg, sizeof(msg)), -EUCLEAN, "%s", msg);
	cr_assert_not_null(strstr(msg, want), "'%s' lacks '%s'", msg, want);
}

/* ---- inode flags ---- */

Test(flags, create_get_update, .init = setup_open_txn, .fini = teardown)
{
	struct idx_inode a = { .mode = S_IFREG | 0644, .nlink = 1, .flags = IDX_INODE_TORN };
	struct idx_inode b;
	uint8_t h[IDX_HASH_LEN];
	uint64_t ino = 0, bad = 0;

	cr_assert_eq(idx_inode_create(ix, &a, &ino), 0);
	cr_assert_eq(idx_inode_get(ix, ino, &b), 0);
	cr_assert_eq(b.flags, IDX_INODE_TORN);
	b.flags = IDX_INODE_TORN | IDX_INODE_MALFORMED;
	cr_assert_eq(idx_inode_update(ix, &b), 0);
	cr_assert_eq(idx_inode_get(ix, ino, &b), 0);
	cr_assert_eq(b.flags, IDX_INODE_TORN | IDX_INODE_MALFORMED);

	/* set_content leaves the flags alone */
	steps_hash(h, 1);
	cr_assert_eq(idx_file_set_content(ix, ino, NULL, 0, 0, h, 9, NULL, NULL), 0);
	cr_assert_eq(idx_inode_get(ix, ino, &b), 0);
	cr_assert_eq(b.flags, IDX_INODE_TORN | IDX_INODE_MALFORMED);

	/* unknown bits, contradictory bits: refused, nothing changes */
	b.flags = IDX_INODE_FLAGS_ALL + 1;
	cr_assert_eq(idx_inode_update(ix, &b), -EINVAL);
	b.flags = IDX_INODE_MALFORMED | IDX_INODE_VALID;
	cr_assert_eq(idx_inode_update(ix, &b), -EINVAL);
	cr_assert_eq(idx_inode_create(ix, &b, &bad), -EINVAL);
	cr_assert_eq(bad, 0);
	cr_assert_eq(idx_inode_get(ix, ino, &b), 0);
	cr_assert_eq(b.flags, IDX_INODE_TORN | IDX_INODE_MALFORMED);
	b.flags = IDX_INODE_VALID;
	cr_assert_eq(idx_inode_update(ix, &b), 0);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(ct_raw_i64(dbpath, "SELECT flags FROM inodes WHERE ino = 2"), IDX_INODE_VALID);
	/* new inodes default to 0; the root too */
	cr_assert_eq(idx_inode_get(ix, IDX_ROOT_INO, &b), 0);
	cr_assert_eq(b.flags, 0);
}

/* ---- steps ---- */

Test(steps, create_get_by_dir_by_name, .init = setup_open_txn, .fini = teardown)
{
	uint64_t d1 = new_dir("iter_0000100"), d2 = new_dir("iter_0000200");
	uint64_t f = new_inode(IDX_ROOT_INO, "latest", S_IFREG | 0644);
	char longname[IDX_STEP_NAME_MAX + 2];
	struct idx_step s, t;
	int64_t a, b, c, id = -7;

	a = new_step(1, "iter_0000100", 100, d1, 1000);
	cr_assert_eq(idx_step_get(ix, a, &s), 0);
	cr_assert_eq(s.id, a);
	cr_assert_eq(s.kind, 1);
	cr_assert_str_eq(s.name, "iter_0000100");
	cr_assert_eq(s.step, 100);
	cr_assert_eq(s.state, IDX_STEP_WRITING);
	cr_assert_eq(s.dir_ino, d1);
	cr_assert_eq(s.created_ns, 1000);
	cr_assert_eq(s.state_ns, 1000);
	cr_assert_eq(s.sealed_ns, 0);
	cr_assert_eq(s.completed_ns, 0);
	cr_assert_eq(s.files + s.logical_bytes + s.stored_bytes, 0);
	cr_assert_not(s.has_digest);
	cr_assert_not(s.pinned);

	cr_assert_eq(idx_step_by_dir(ix, d1, &t), 0);
	cr_assert_eq(t.id, a);
	cr_assert_eq(idx_step_by_dir(ix, d2, &t), -ENOENT);
	cr_assert_eq(idx_step_by_dir(ix, 0, &t), -ENOENT);

	/* a step with no directory, then the same name re-created: by_name gives the newest */
	b = new_step(1, "iter_0000200", 200, 0, 2000);
	c = new_step(1, "iter_0000200", 200, d2, 3000);
	cr_assert_gt(c, b);
	cr_assert_eq(idx_step_by_name(ix, 1, "iter_0000200", &t), 0);
	cr_assert_eq(t.id, c);
	cr_assert_eq(idx_step_by_name(ix, 2, "iter_0000200", &t), -ENOENT, "kind matters");
	cr_assert_eq(idx_step_by_name(ix, 1, "iter_0000300", &t), -ENOENT);
	cr_assert_eq(idx_step_by_name(ix, 99, "iter_0000200", &t), -ENOENT);
	cr_assert_eq(idx_step_by_name(ix, 1, "", &t), -ENOENT);
	/* pruned rows are skipped */
	cr_assert_eq(idx_step_set_state(ix, c, IDX_STEP_PRUNED, 4000, "retention"), 0);
	cr_assert_eq(idx_step_by_name(ix, 1, "iter_0000200", &t), 0);
	cr_assert_eq(t.id, b);
	cr_assert_eq(idx_step_set_state(ix, b, IDX_STEP_PRUNED, 4000, NULL), 0);
	cr_assert_eq(idx_step_by_name(ix, 1, "iter_0000200", &t), -ENOENT);
	/* by_name_at: the row made last by then, unless it had left the name (pruned at 4000) */
	cr_assert_eq(idx_step_by_name_at(ix, 1, "iter_0000200", 1999, &t), -ENOENT);
	cr_assert_eq(idx_step_by_name_at(ix, 1, "iter_0000200", 2000, &t), 0);
	cr_assert_eq(t.id, b);
	cr_assert_eq(idx_step_by_name_at(ix, 1, "iter_0000200", 2999, &t), 0);
	cr_assert_eq(t.id, b);
	cr_assert_eq(idx_step_by_name_at(ix, 1, "iter_0000200", 3999, &t), 0);
	cr_assert_eq(t.id, c);
	cr_assert_eq(t.state, IDX_STEP_PRUNED, "its state now");
	cr_assert_eq(idx_step_by_name_at(ix, 1, "iter_0000200", 9999, &t), -ENOENT);
	cr_assert_eq(idx_step_by_name_at(ix, 2, "iter_0000200", 9999, &t), -ENOENT);
	cr_assert_eq(idx_step_by_name_at(ix, 1, "", 9999, &t), -ENOENT);
	/* pruned or not, by_dir still finds the row that has the directory */
	cr_assert_eq(idx_step_by_dir(ix, d2, &t), 0);
	cr_assert_eq(t.id, c);

	/* refusals leave *ret_id alone and add no row */
	cr_assert_eq(idx_step_create(ix, -1, "x", 1, 0, 1, &id), -EINVAL);
	cr_assert_eq(idx_step_create(ix, IDX_STEP_KIND_MAX, "x", 1, 0, 1, &id), -EINVAL);
	cr_assert_eq(idx_step_create(ix, 0, "x", -1, 0, 1, &id), -EINVAL);
	cr_assert_eq(idx_step_create(ix, 0, "", 1, 0, 1, &id), -EINVAL);
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	cr_assert_eq(idx_step_create(ix, 0, longname, 1, 0, 1, &id), -ENAMETOOLONG);
	cr_assert_eq(idx_step_create(ix, 0, "x", 1, 99999, 1, &id), -ENOENT);
	cr_assert_eq(idx_step_create(ix, 0, "x", 1, f, 1, &id), -ENOTDIR);
	cr_assert_eq(idx_step_create(ix, 0, "x", 1, d1, 1, &id), -EEXIST, "d1 is a's");
	cr_assert_eq(id, -7);
	/* the longest name fits, byte-exact */
	longname[IDX_STEP_NAME_MAX] = '\0';
	id = new_step(31, longname, 0, 0, 1);
	cr_assert_eq(idx_step_get(ix, id, &t), 0);
	cr_assert_str_eq(t.name, longname);
	cr_assert_eq(idx_step_by_name(ix, 31, longname, &t), 0);
	cr_assert_eq(t.id, id);
	cr_assert_eq(idx_step_get(ix, id + 1, &t), -ENOENT);

	/* set_dir: move away, move to another directory, refuse what create refuses */
	cr_assert_eq(idx_step_set_dir(ix, a, 0), 0);
	cr_assert_eq(idx_step_by_dir(ix, d1, &t), -ENOENT);
	cr_assert_eq(idx_step_set_dir(ix, a, d2), -EEXIST);
	cr_assert_eq(idx_step_set_dir(ix, a, f), -ENOTDIR);
	cr_assert_eq(idx_step_set_dir(ix, a, 99999), -ENOENT);
	cr_assert_eq(idx_step_set_dir(ix, 424242, d1), -ENOENT);
	cr_assert_eq(idx_step_set_dir(ix, a, d1), 0);
	cr_assert_eq(idx_step_set_dir(ix, a, d1), 0, "setting the same directory again");
	cr_assert_eq(idx_step_by_dir(ix, d1, &t), 0);
	cr_assert_eq(t.id, a);

	/* set_kind: an all-digit step found to be another layout's; kinds out of range refused */
	cr_assert_eq(idx_step_set_kind(ix, a, 8), 0);
	cr_assert_eq(idx_step_get(ix, a, &t), 0);
	cr_assert_eq(t.kind, 8);
	cr_assert_eq(idx_step_set_kind(ix, a, IDX_STEP_KIND_MAX), -EINVAL);
	cr_assert_eq(idx_step_set_kind(ix, a, -1), -EINVAL);
	cr_assert_eq(idx_step_set_kind(ix, 424242, 8), -ENOENT);
	cr_assert_eq(idx_commit(ix), 0);
	check_ok();
}

struct newest_case {
	int kind;
	int64_t step;
	int state;
};

Test(steps, newest_by_kind_mask_and_state, .init = setup_open_txn, .fini = teardown)
{
	static const struct newest_case cases[] = {
		{ 0, 100, IDX_STEP_COMPLETE }, { 0, 300, IDX_STEP_COMPLETE },
		{ 0, 400, IDX_STEP_INCOMPLETE }, { 0, 500, IDX_STEP_WRITING },
		{ 3, 250, IDX_STEP_COMPLETE }, { 3, 600, IDX_STEP_COMPLETE },
		{ 5, 700, IDX_STEP_CORRUPT }, { 5, 200, IDX_STEP_SEALED },
	};
	int64_t ids[8];
	struct idx_step s;
	int64_t tie;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char name[32];

		snprintf(name, sizeof(name), "k%d_%lld", cases[i].kind, (long long)cases[i].step);
		ids[i] = new_step(cases[i].kind, name, cases[i].step, 0, 10);
		if (cases[i].state != IDX_STEP_WRITING)
			cr_assert_eq(idx_step_set_state(ix, ids[i], cases[i].state, 20, NULL), 0);
	}
	cr_assert_eq(idx_step_newest(ix, 0, IDX_STEP_COMPLETE, &s), 0);
	cr_assert_eq(s.id, ids[5]);
	cr_assert_eq(idx_step_newest(ix, 1u << 0, IDX_STEP_COMPLETE, &s), 0);
	cr_assert_eq(s.id, ids[1]);
	cr_assert_eq(s.step, 300);
	cr_assert_eq(idx_step_newest(ix, 1u << 3, IDX_STEP_COMPLETE, &s), 0);
	cr_assert_eq(s.id, ids[5]);
	cr_assert_eq(idx_step_newest(ix, (1u << 0) | (1u << 5), IDX_STEP_COMPLETE, &s), 0);
	cr_assert_eq(s.id, ids[1]);
	cr_assert_eq(idx_step_newest(ix, 1u << 5, IDX_STEP_COMPLETE, &s), -ENOENT);
	cr_assert_eq(idx_step_newest(ix, 1u << 5, IDX_STEP_SEALED, &s), 0);
	cr_assert_eq(s.id, ids[7]);
	cr_assert_eq(idx_step_newest(ix, 1u << 31, IDX_STEP_SEALED, &s), -ENOENT);
	cr_assert_eq(idx_step_newest(ix, 0, IDX_STEP_WRITING, &s), 0);
	cr_assert_eq(s.id, ids[3]);
	cr_assert_eq(idx_step_newest(ix, 0, IDX_STEP_INCOMPLETE, &s), 0);
	cr_assert_eq(s.id, ids[2]);
	cr_assert_eq(idx_step_newest(ix, 0, IDX_STEP_PRUNED, &s), -ENOENT);
	cr_assert_eq(idx_step_newest(ix, 0, IDX_STEP_STATE_COUNT, &s), -EINVAL);
	cr_assert_eq(idx_step_newest(ix, 0, -1, &s), -EINVAL);

	/* same step number twice (a re-created directory): the higher id wins */
	tie = new_step(3, "k3_600_again", 600, 0, 30);
	cr_assert_eq(idx_step_set_state(ix, tie, IDX_STEP_COMPLETE, 40, NULL), 0);
	cr_assert_eq(idx_step_newest(ix, 1u << 3, IDX_STEP_COMPLETE, &s), 0);
	cr_assert_eq(s.id, tie);
	/* the newest leaves: the previous one is found */
	cr_assert_eq(idx_step_set_state(ix, tie, IDX_STEP_CORRUPT, 50, "checksum"), 0);
	cr_assert_eq(idx_step_set_state(ix, ids[5], IDX_STEP_PRUNED, 50, NULL), 0);
	cr_assert_eq(idx_step_newest(ix, 0, IDX_STEP_COMPLETE, &s), 0);
	cr_assert_eq(s.id, ids[1]);
	cr_assert_eq(idx_commit(ix), 0);
	check_ok();
}

/* idx_step_newest_each: collects the steps it is shown, stops after `stop` of them */
struct each_log {
	int64_t steps[256];
	size_t n, stop;
};

static int each_cb(const struct idx_step *s, void *arg)
{
	struct each_log *l = arg;

	cr_assert_lt(l->n, 256);
	l->steps[l->n++] = s->step;
	return l->n == l->stop ? 7 : 0;
}

Test(steps, newest_each_pages_in_order_and_stops, .init = setup_open_txn, .fini = teardown)
{
	struct each_log l = { .stop = 0 };
	int64_t id;

	/* 100 complete steps of kind 1 over several 32-row pages, a twin of step 50 (higher id
	 * first), every 10th of kind 2, and writing ones that must not be shown */
	for (int64_t i = 1; i <= 100; i++) {
		char name[32];

		snprintf(name, sizeof(name), "s%lld", (long long)i);
		id = new_step(i % 10 == 0 ? 2 : 1, name, i * 10, 0, 10);
		cr_assert_eq(idx_step_set_state(ix, id, IDX_STEP_COMPLETE, 20, NULL), 0);
		snprintf(name, sizeof(name), "w%lld", (long long)i);
		new_step(1, name, i * 10 + 5, 0, 10);
	}
	id = new_step(1, "s50_again", 500, 0, 30);
	cr_assert_eq(idx_step_set_state(ix, id, IDX_STEP_COMPLETE, 40, NULL), 0);

	cr_assert_eq(idx_step_newest_each(ix, 0, IDX_STEP_COMPLETE, each_cb, &l), 0);
	cr_assert_eq(l.n, 101);
	for (size_t i = 1; i < l.n; i++)
		cr_assert_geq(l.steps[i - 1], l.steps[i], "not newest first at %zu", i);
	cr_assert_eq(l.steps[0], 1000);
	cr_assert_eq(l.steps[100], 10);

	l = (struct each_log){ .stop = 3 };
	cr_assert_eq(idx_step_newest_each(ix, 1u << 1, IDX_STEP_COMPLETE, each_cb, &l), 7);
	cr_assert_eq(l.n, 3);
	cr_assert_eq(l.steps[0], 990);
	cr_assert_eq(l.steps[1], 980);
	cr_assert_eq(l.steps[2], 970);

	l = (struct each_log){ .stop = 0 };
	cr_assert_eq(idx_step_newest_each(ix, 1u << 2, IDX_STEP_COMPLETE, each_cb, &l), 0);
	cr_assert_eq(l.n, 10);
	/* kinds with no step at all (answered from steps_kind_name), alone and beside kind 2 */
	l = (struct each_log){ .stop = 0 };
	cr_assert_eq(idx_step_newest_each(ix, 1u << 3 | 1u << 5, IDX_STEP_COMPLETE, each_cb, &l),
		     0);
	cr_assert_eq(l.n, 0);
	cr_assert_eq(idx_step_newest_each(ix, 1u << 3 | 1u << 2, IDX_STEP_COMPLETE, each_cb, &l),
		     0);
	cr_assert_eq(l.n, 10);
	cr_assert_eq(l.steps[0], 1000);
	l = (struct each_log){ .stop = 0 };
	cr_assert_eq(idx_step_newest_each(ix, 0, IDX_STEP_PRUNED, each_cb, &l), 0);
	cr_assert_eq(l.n, 0);
	cr_assert_eq(idx_step_newest_each(ix, 0, IDX_STEP_STATE_COUNT, each_cb, &l), -EINVAL);
	cr_assert_eq(idx_commit(ix), 0);
}

struct ev {
	int64_t ts;
	int old_state, new_state;
	char note[IDX_STEP_NOTE_MAX + 8];
	bool has_note;
};

struct ev_log {
	int n, stop_at;
	struct ev e[16];
};

static int ev_cb(int64_t ts_ns, int old_state, int new_state, const char *note, void *arg)
{
	struct ev_log *l = arg;

	cr_assert_lt(l->n, 16);
	l->e[l->n].ts = ts_ns;
	l->e[l->n].old_state = old_state;
	l->e[l->n].new_state = new_state;
	l->e[l->n].has_note = note != NULL;
	snprintf(l->e[l->n].note, sizeof(l->e[0].note), "%s", note ? note : "");
	l->n++;
	return l->n == l->stop_at ? 42 : 0;
}

Test(steps, transitions_events_timestamps, .init = setup_open_txn, .fini = teardown)
{
	char longnote[IDX_STEP_NOTE_MAX + 100];
	struct ev_log log = { 0 };
	struct idx_step s;
	int64_t id = new_step(2, "global_step10", 10, 0, 100);

	cr_assert_eq(idx_step_set_state(ix, id, IDX_STEP_SEALED, 200, "marker 'latest'"), 0);
	cr_assert_eq(idx_step_get(ix, id, &s), 0);
	cr_assert_eq(s.state, IDX_STEP_SEALED);
	cr_assert_eq(s.sealed_ns, 200);
	cr_assert_eq(s.state_ns, 200);
	cr_assert_eq(s.completed_ns, 0);
	cr_assert_eq(s.created_ns, 100);

	cr_assert_eq(idx_step_set_state(ix, id, IDX_STEP_COMPLETE, 300, NULL), 0);
	/* the same state again: one more event, no time changes */
	cr_assert_eq(idx_step_set_state(ix, id, IDX_STEP_COMPLETE, 350, ""), 0);
	cr_assert_eq(idx_step_get(ix, id, &s), 0);
	cr_assert_eq(s.state, IDX_STEP_COMPLETE);
	cr_assert_eq(s.sealed_ns, 200);
	cr_assert_eq(s.completed_ns, 300);
	cr_assert_eq(s.state_ns, 300);

	memset(longnote, 'n', sizeof(longnote) - 1);
	longnote[sizeof(longnote) - 1] = '\0';
	cr_assert_eq(idx_step_set_state(ix, id, IDX_STEP_PRUNED, 400, longnote), 0);
	/* pruned is terminal; bad states and unknown ids: refused, no event */
	cr_assert_eq(idx_step_set_state(ix, id, IDX_STEP_COMPLETE, 500, "back?"), -EINVAL);
	cr_assert_eq(idx_step_set_state(ix, id, IDX_STEP_STATE_COUNT, 500, NULL), -EINVAL);
	cr_assert_eq(idx_step_set_state(ix, id, -1, 500, NULL), -EINVAL);
	cr_assert_eq(idx_step_set_state(ix, id + 1, IDX_STEP_SEALED, 500, NULL), -ENOENT);
	cr_assert_eq(idx_step_set_state(ix, id, IDX_STEP_PRUNED, 600, "again"), 0);
	cr_assert_eq(idx_step_get(ix, id, &s), 0);
	cr_assert_eq(s.state, IDX_STEP_PRUNED);
	cr_assert_eq(s.state_ns, 400);

	cr_assert_eq(idx_step_events(ix, id, ev_cb, &log), 0);
	cr_assert_eq(log.n, 5);
	cr_assert_eq(log.e[0].ts, 200);
	cr_assert_eq(log.e[0].old_state, IDX_STEP_WRITING);
	cr_assert_eq(log.e[0].new_state, IDX_STEP_SEALED);
	cr_assert_str_eq(log.e[0].note, "marker 'latest'");
	cr_assert_eq(log.e[1].ts, 300);
	cr_assert_eq(log.e[1].old_state, IDX_STEP_SEALED);
	cr_assert_eq(log.e[1].new_state, IDX_STEP_COMPLETE);
	cr_assert_not(log.e[1].has_note);
	cr_assert_eq(log.e[2].ts, 350);
	cr_assert_eq(log.e[2].old_state, IDX_STEP_COMPLETE);
	cr_assert_eq(log.e[2].new_state, IDX_STEP_COMPLETE);
	cr_assert(log.e[2].has_note, "an empty note is a note");
	cr_assert_str_eq(log.e[2].note, "");
	cr_assert_eq(log.e[3].new_state, IDX_STEP_PRUNED);
	cr_assert_eq(strlen(log.e[3].note), IDX_STEP_NOTE_MAX, "long notes are truncated");
	cr_assert_eq(log.e[4].ts, 600);
	cr_assert_str_eq(log.e[4].note, "again");

	/* stopping early returns fn's value; unknown ids have no events */
	memset(&log, 0, sizeof(log));
	log.stop_at = 2;
	cr_assert_eq(idx_step_events(ix, id, ev_cb, &log), 42);
	cr_assert_eq(log.n, 2);
	memset(&log, 0, sizeof(log));
	cr_assert_eq(idx_step_events(ix, id + 1, ev_cb, &log), 0);
	cr_assert_eq(log.n, 0);

	cr_assert_str_eq(idx_step_state_name(IDX_STEP_WRITING), "writing");
	cr_assert_str_eq(idx_step_state_name(IDX_STEP_SEALED), "sealed");
	cr_assert_str_eq(idx_step_state_name(IDX_STEP_COMPLETE), "complete");
	cr_assert_str_eq(idx_step_state_name(IDX_STEP_PRUNED), "pruned");
	cr_assert_str_eq(idx_step_state_name(IDX_STEP_INCOMPLETE), "incomplete");
	cr_assert_str_eq(idx_step_state_name(IDX_STEP_CORRUPT), "corrupt");
	cr_assert_str_eq(idx_step_state_name(IDX_STEP_COPIED), "copied");
	cr_assert_str_eq(idx_step_state_name(7), "unknown");
	cr_assert_str_eq(idx_step_state_name(-1), "unknown");
	cr_assert_eq(idx_commit(ix), 0);
	check_ok();
}

Test(steps, set_state_is_atomic, .init = setup_open_txn, .fini = teardown)
{
	struct ev_log log = { 0 };
	struct idx_step s;
	int64_t id = new_step(0, "iter_0000001", 1, 0, 100);

	cr_assert_eq(idx_commit(ix), 0);
	/* fault injection from outside: the event insert fails after the step row was updated */
	ct_raw_exec(dbpath, "CREATE TRIGGER no_events BEFORE INSERT ON step_events "
			 "BEGIN SELECT RAISE(ABORT, 'injected'); END");
	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_lt(idx_step_set_state(ix, id, IDX_STEP_SEALED, 200, "x"), 0);
	cr_assert_eq(idx_step_get(ix, id, &s), 0);
	cr_assert_eq(s.state, IDX_STEP_WRITING, "the step row was rolled back");
	cr_assert_eq(s.sealed_ns, 0);
	cr_assert_eq(s.state_ns, 100);
	/* the caller's transaction is still usable */
	cr_assert_eq(idx_step_set_pinned(ix, id, true), 0);
	cr_assert_eq(idx_commit(ix), 0);
	ct_raw_exec(dbpath, "DROP TRIGGER no_events");
	cr_assert_eq(idx_step_get(ix, id, &s), 0);
	cr_assert(s.pinned);
	cr_assert_eq(idx_step_events(ix, id, ev_cb, &log), 0);
	cr_assert_eq(log.n, 0);

	/* a rolled-back transaction takes the state change with it */
	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_step_set_state(ix, id, IDX_STEP_SEALED, 200, "x"), 0);
	idx_rollback(ix);
	cr_assert_eq(idx_step_get(ix, id, &s), 0);
	cr_assert_eq(s.state, IDX_STEP_WRITING);
	cr_assert_eq(idx_step_events(ix, id, ev_cb, &log), 0);
	cr_assert_eq(log.n, 0);
}

Test(steps, figures_and_pins, .init = setup_open_txn, .fini = teardown)
{
	uint8_t d[IDX_HASH_LEN];
	struct idx_step s;
	int64_t id = new_step(4, "checkpoint-500", 500, 0, 1);

	steps_hash(d, 77);
	cr_assert_eq(idx_step_set_figures(ix, id, 12, 1ull << 40, (1ull << 39) + 5, d), 0);
	cr_assert_eq(idx_step_get(ix, id, &s), 0);
	cr_assert_eq(s.files, 12);
	cr_assert_eq(s.logical_bytes, 1ull << 40);
	cr_assert_eq(s.stored_bytes, (1ull << 39) + 5);
	cr_assert(s.has_digest);
	cr_assert_arr_eq(s.digest, d, IDX_HASH_LEN);

	cr_assert_eq(idx_step_set_figures(ix, id, 13, 10, 9, NULL), 0);
	cr_assert_eq(idx_step_get(ix, id, &s), 0);
	cr_assert_eq(s.files, 13);
	cr_assert_not(s.has_digest);
	cr_assert_eq(idx_step_set_figures(ix, id, 1, (uint64_t)INT64_MAX + 1, 0, d), -EOVERFLOW);
	cr_assert_eq(idx_step_set_figures(ix, id + 1, 1, 1, 1, d), -ENOENT);
	cr_assert_eq(idx_step_get(ix, id, &s), 0);
	cr_assert_eq(s.files, 13);
	cr_assert_eq(s.logical_bytes, 10);

	cr_assert_eq(idx_step_set_pinned(ix, id, true), 0);
	cr_assert_eq(idx_step_get(ix, id, &s), 0);
	cr_assert(s.pinned);
	cr_assert_eq(idx_step_set_pinned(ix, id, false), 0);
	cr_assert_eq(idx_step_get(ix, id, &s), 0);
	cr_assert_not(s.pinned);
	cr_assert_eq(idx_step_set_pinned(ix, id + 1, true), -ENOENT);
	cr_assert_eq(idx_commit(ix), 0);
}

struct walk {
	int n, stop_at;
	int64_t steps[16], ids[16];
	bool prune; /* prune every step seen, and walk again from inside */
	int inner;
};

static int count_cb(const struct idx_step *s, void *arg)
{
	(void)s;
	(*(int *)arg)++;
	return 0;
}

static int walk_cb(const struct idx_step *s, void *arg)
{
	struct walk *w = arg;

	cr_assert_lt(w->n, 16);
	w->steps[w->n] = s->step;
	w->ids[w->n] = s->id;
	w->n++;
	if (w->prune) {
		int k = 0;

		cr_assert_eq(idx_step_set_state(ix, s->id, IDX_STEP_PRUNED, 9, "retention"), 0);
		cr_assert_eq(idx_step_foreach(ix, count_cb, &k), 0);
		w->inner += k;
	}
	return w->n == w->stop_at ? 5 : 0;
}

Test(steps, foreach_order_and_callbacks_that_write, .init = setup_open_txn, .fini = teardown)
{
	struct walk w = { 0 };
	struct idx_step s;
	int64_t a = new_step(0, "step-300", 300, 0, 1);
	int64_t b = new_step(0, "step-100", 100, 0, 1);
	int64_t c = new_step(1, "iter_0000100", 100, 0, 1);
	int64_t d = new_step(0, "step-200", 200, 0, 1);

	cr_assert_eq(idx_step_foreach(ix, walk_cb, &w), 0);
	cr_assert_eq(w.n, 4);
	cr_assert_eq(w.ids[0], b);
	cr_assert_eq(w.ids[1], c);
	cr_assert_eq(w.ids[2], d);
	cr_assert_eq(w.ids[3], a);
	cr_assert_eq(w.steps[0], 100);
	cr_assert_eq(w.steps[3], 300);

	memset(&w, 0, sizeof(w));
	w.stop_at = 2;
	cr_assert_eq(idx_step_foreach(ix, walk_cb, &w), 5);
	cr_assert_eq(w.n, 2);

	/* a callback that prunes and walks again: sees every step once, all end pruned */
	memset(&w, 0, sizeof(w));
	w.prune = true;
	cr_assert_eq(idx_step_foreach(ix, walk_cb, &w), 0);
	cr_assert_eq(w.n, 4);
	cr_assert_eq(w.inner, 16);
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(idx_step_get(ix, w.ids[i], &s), 0);
		cr_assert_eq(s.state, IDX_STEP_PRUNED);
	}
	cr_assert_eq(idx_commit(ix), 0);
	check_ok();
}

static bool keep_all(const uint8_t hash[IDX_HASH_LEN], void *arg)
{
	(void)hash;
	(void)arg;
	return true;
}

Test(steps, deleting_the_directory_clears_dir_ino, .init = setup_open_txn, .fini = teardown)
{
	uint64_t d1 = new_dir("global_step1"), d2 = new_dir("global_step2");
	struct idx_step s;
	int64_t a = new_step(2, "global_step1", 1, d1, 1);
	int64_t b = new_step(2, "global_step2", 2, d2, 1);

	cr_assert_eq(idx_dentry_remove(ix, IDX_ROOT_INO, "global_step1"), 0);
	cr_assert_eq(idx_inode_delete(ix, d1, keep_all, NULL), 0);
	cr_assert_eq(idx_step_get(ix, a, &s), 0);
	cr_assert_eq(s.dir_ino, 0);
	cr_assert_eq(idx_step_by_dir(ix, d1, &s), -ENOENT);
	check_ok();

	/* idx_recover deletes an nlink-0 directory left by a crash: same */
	{
		struct idx_inode di;

		cr_assert_eq(idx_dentry_remove(ix, IDX_ROOT_INO, "global_step2"), 0);
		cr_assert_eq(idx_inode_get(ix, d2, &di), 0);
		di.nlink = 0;
		cr_assert_eq(idx_inode_update(ix, &di), 0);
	}
	cr_assert_eq(idx_recover(ix, keep_all, NULL), 1);
	cr_assert_eq(idx_step_get(ix, b, &s), 0);
	cr_assert_eq(s.dir_ino, 0);
	cr_assert_eq(idx_commit(ix), 0);
	check_ok();
}

Test(steps, readonly_reads_refuses_writes, .init = setup_open_txn, .fini = teardown)
{
	struct idx *ro = NULL;
	struct idx_step s;
	uint8_t d[IDX_HASH_LEN] = { 0 };
	int64_t id = new_step(0, "step-1", 1, 0, 1), out = 0;
	int n = 0;

	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(idx_open(dbpath, IDX_RDONLY, 0, 0, 0, &ro), 0);
	cr_assert_eq(idx_step_get(ro, id, &s), 0);
	cr_assert_eq(idx_step_foreach(ro, count_cb, &n), 0);
	cr_assert_eq(n, 1);
	cr_assert_eq(idx_step_create(ro, 0, "step-2", 2, 0, 1, &out), -EROFS);
	cr_assert_eq(idx_step_set_state(ro, id, IDX_STEP_SEALED, 2, NULL), -EROFS);
	cr_assert_eq(idx_step_set_dir(ro, id, 0), -EROFS);
	cr_assert_eq(idx_step_set_figures(ro, id, 1, 1, 1, d), -EROFS);
	cr_assert_eq(idx_step_set_pinned(ro, id, true), -EROFS);
	cr_assert_eq(idx_claim_add(ro, "latest", "x", 1, -1, 1, &out), -EROFS);
	cr_assert_eq(out, 0);
	idx_close(ro);
}

/* ---- tracker claims ---- */

struct claim_log {
	int n;
	int64_t ids[8], steps[8], ts[8];
	char trackers[8][64];
	size_t lens[8];
	bool content_null[8];
	uint8_t first[8], last[8];
};

static int claim_cb(int64_t id, const char *tracker, const void *content, size_t len,
		    int64_t step, int64_t ts_ns, void *arg)
{
	struct claim_log *l = arg;
	const uint8_t *p = content;

	cr_assert_lt(l->n, 8);
	l->ids[l->n] = id;
	snprintf(l->trackers[l->n], sizeof(l->trackers[0]), "%s", tracker);
	l->lens[l->n] = len;
	l->content_null[l->n] = content == NULL;
	l->first[l->n] = len ? p[0] : 0;
	l->last[l->n] = len ? p[len - 1] : 0;
	l->steps[l->n] = step;
	l->ts[l->n] = ts_ns;
	l->n++;
	return 0;
}

static int claim_check_junk(int64_t id, const char *tracker, const void *content, size_t len,
			    int64_t step, int64_t ts_ns, void *arg)
{
	const uint8_t *junk = arg;

	(void)tracker;
	(void)step;
	(void)ts_ns;
	if (len == IDX_CLAIM_MAX)
		cr_assert_eq(memcmp(content, junk, IDX_CLAIM_MAX), 0, "claim %lld", (long long)id);
	return 0;
}

Test(claims, add_foreach_and_junk, .init = setup_open_txn, .fini = teardown)
{
	const size_t big = 10u << 20;
	struct claim_log log = { 0 };
	uint8_t *junk = malloc(big);
	char longtracker[IDX_CLAIM_TRACKER_MAX + 2];
	int64_t a, b, c, d, e, out = -3;
	uint64_t len = 0;

	cr_assert_not_null(junk);
	for (size_t i = 0; i < big; i++)
		junk[i] = (uint8_t)((i * 2654435761u) >> 13); /* NULs and newlines included */

	cr_assert_eq(idx_claim_add(ix, "latest_checkpointed_iteration.txt", "100", 3, 100, 10, &a),
		     0);
	cr_assert_eq(idx_claim_add(ix, "latest", "global_step7\n", 13, 7, 20, &b), 0);
	cr_assert_eq(idx_claim_add(ix, "latest", junk, big, -1, 30, &c), 0);
	cr_assert_eq(idx_claim_add(ix, "rank_0/meta.json", NULL, 0, -1, 40, &d), 0);
	cr_assert_eq(idx_claim_add(ix, "latest", junk, IDX_CLAIM_MAX, -1, 50, &e), 0);
	cr_assert(a < b && b < c && c < d && d < e);

	cr_assert_eq(idx_claim_foreach(ix, claim_cb, &log), 0);
	cr_assert_eq(log.n, 5);
	cr_assert_eq(log.ids[0], a);
	cr_assert_str_eq(log.trackers[0], "latest_checkpointed_iteration.txt");
	cr_assert_eq(log.lens[0], 3);
	cr_assert_eq(log.first[0], '1');
	cr_assert_eq(log.steps[0], 100);
	cr_assert_eq(log.ts[0], 10);
	cr_assert_eq(log.lens[1], 13);
	cr_assert_eq(log.last[1], '\n');
	cr_assert_eq(log.steps[1], 7);
	/* 10 MB of junk: the first IDX_CLAIM_MAX bytes kept, the length remembered */
	cr_assert_eq(log.ids[2], c);
	cr_assert_eq(log.lens[2], IDX_CLAIM_MAX);
	cr_assert_eq(log.first[2], junk[0]);
	cr_assert_eq(log.last[2], junk[IDX_CLAIM_MAX - 1]);
	cr_assert_eq(log.steps[2], -1);
	cr_assert_eq(idx_claim_length(ix, c, &len), 0);
	cr_assert_eq(len, big);
	cr_assert_eq(idx_claim_foreach(ix, claim_check_junk, junk), 0);
	/* empty content */
	cr_assert_str_eq(log.trackers[3], "rank_0/meta.json");
	cr_assert_eq(log.lens[3], 0);
	cr_assert(log.content_null[3]);
	cr_assert_eq(idx_claim_length(ix, d, &len), 0);
	cr_assert_eq(len, 0);
	/* exactly IDX_CLAIM_MAX: kept whole, not truncated */
	cr_assert_eq(idx_claim_length(ix, e, &len), 0);
	cr_assert_eq(len, IDX_CLAIM_MAX);
	cr_assert_eq(idx_claim_length(ix, e + 1, &len), -ENOENT);
	cr_assert_eq(len, IDX_CLAIM_MAX);

	/* refusals */
	cr_assert_eq(idx_claim_add(ix, "", "1", 1, 1, 1, &out), -EINVAL);
	cr_assert_eq(idx_claim_add(ix, "latest", "1", 1, -2, 1, &out), -EINVAL);
	cr_assert_eq(idx_claim_add(ix, "latest", NULL, 1, 1, 1, &out), -EINVAL);
	memset(longtracker, 't', sizeof(longtracker) - 1);
	longtracker[sizeof(longtracker) - 1] = '\0';
	cr_assert_eq(idx_claim_add(ix, longtracker, "1", 1, 1, 1, &out), -ENAMETOOLONG);
	cr_assert_eq(out, -3);
	cr_assert_eq(idx_commit(ix), 0);
	free(junk);
	cr_assert_lt(ct_raw_i64(dbpath, "SELECT max(length(content)) FROM claims"),
		     IDX_CLAIM_MAX + 1);
	check_ok();
}

/* ---- migration ---- */

/* v1_ddl - the frozen v1 fixture tests/index/v1_schema.sql (path from meson), read whole. */
static char *v1_ddl_read(void)
{
	FILE *f = fopen(IX_V1_SCHEMA, "r");
	char *sql = NULL;
	size_t cap = 0;
	ssize_t n;

	cr_assert_not_null(f, "cannot open %s", IX_V1_SCHEMA);
	n = getdelim(&sql, &cap, '\0', f);
	cr_assert_gt(n, 0, "cannot read %s", IX_V1_SCHEMA);
	fclose(f);
	return sql;
}

static void exec_v1_ddl(void)
{
	char *sql = v1_ddl_read();

	ct_raw_exec(dbpath, sql);
	free(sql);
}

Test(migrate, v1_to_v3_keeps_rows, .init = setup, .fini = teardown)
{
	struct idx_extent *e = NULL;
	struct idx_inode a;
	struct idx_step s;
	struct idx *ro = NULL;
	uint64_t ino = 0;
	size_t n = 0;
	char buf[16];
	int64_t id;

	exec_v1_ddl();
	cr_assert_eq(ct_raw_i64(dbpath, "PRAGMA user_version"), 1);
	/* a reader cannot migrate: refused, untouched */
	cr_assert_eq(idx_open(dbpath, IDX_RDONLY, 0, 0, 0, &ro), -EPROTO);
	cr_assert_eq(ct_raw_i64(dbpath, "PRAGMA user_version"), 1);

	cr_assert_eq(idx_open(dbpath, 0, 1, 2, 999, &ix), 0);
	cr_assert_eq(ct_raw_i64(dbpath, "PRAGMA user_version"), IDX_SCHEMA_VERSION);
	cr_assert_eq(IDX_SCHEMA_VERSION, 3);
	check_ok();
	cr_assert_eq(idx_inode_get(ix, IDX_ROOT_INO, &a), 0);
	cr_assert_eq(a.uid, 1000, "not recreated");
	cr_assert_eq(a.mtime_ns, 11);
	cr_assert_eq(a.nlink, 3);
	cr_assert_eq(a.flags, 0);
	cr_assert_eq(idx_dentry_lookup(ix, IDX_ROOT_INO, "iter_0000100", &ino), 0);
	cr_assert_eq(ino, 2);
	cr_assert_eq(idx_dentry_lookup(ix, 2, "model.pt", &ino), 0);
	cr_assert_eq(ino, 3);
	cr_assert_eq(idx_inode_get(ix, 3, &a), 0);
	cr_assert_eq(a.size, 5);
	cr_assert(a.has_hash);
	cr_assert_eq(a.hash[1], 0x11);
	cr_assert_eq(a.flags, 0);
	cr_assert_eq(idx_file_extents(ix, 3, &e, &n), 0);
	cr_assert_eq(n, 1);
	cr_assert_eq(e[0].stored_size, 4);
	free(e);
	cr_assert_eq(idx_symlink_get(ix, 4, buf, sizeof(buf)), 3);
	cr_assert_str_eq(buf, "abc");
	cr_assert_eq(ct_raw_i64(dbpath, "SELECT count(*) FROM inodes WHERE flags <> 0"), 0);

	/* the new tables work, and inode numbers continue after the v1 ones */
	cr_assert_eq(idx_begin(ix), 0);
	id = new_step(1, "iter_0000100", 100, 2, 1000);
	cr_assert_eq(idx_step_set_state(ix, id, IDX_STEP_SEALED, 1001, NULL), 0);
	ino = new_inode(2, "other.pt", S_IFREG | 0644);
	cr_assert_eq(ino, 5);
	cr_assert_eq(idx_xattr_set(ix, 3, "user.v3", "x", 1, 0), 0);
	cr_assert_eq(idx_commit(ix), 0);
	idx_close(ix);
	ix = NULL;

	/* reopening an up-to-date database migrates nothing */
	cr_assert_eq(idx_open(dbpath, 0, 0, 0, 0, &ix), 0);
	cr_assert_eq(idx_step_by_dir(ix, 2, &s), 0);
	cr_assert_eq(s.id, id);
	cr_assert_eq(s.state, IDX_STEP_SEALED);
	check_ok();
	cr_assert_eq(idx_open(dbpath, IDX_RDONLY, 0, 0, 0, &ro), 0);
	cr_assert_eq(idx_step_get(ro, id, &s), 0);
	idx_close(ro);
}

Test(migrate, failed_migration_changes_nothing, .init = setup, .fini = teardown)
{
	exec_v1_ddl();
	/* a v1 database that happens to hold a table the v2 migration wants to create */
	ct_raw_exec(dbpath, "CREATE TABLE claims(x)");
	cr_assert_lt(idx_open(dbpath, 0, 0, 0, 0, &ix), 0);
	cr_assert_null(ix);
	cr_assert_eq(ct_raw_i64(dbpath, "PRAGMA user_version"), 1);
	cr_assert_eq(ct_raw_i64(dbpath, "SELECT count(*) FROM pragma_table_info('inodes') "
				     "WHERE name = 'flags'"),
		     0, "the ALTER TABLE was rolled back");
	cr_assert_eq(ct_raw_i64(dbpath, "SELECT count(*) FROM sqlite_master WHERE name = 'steps'"),
		     0);
	/* once the obstacle is gone, the same database migrates */
	ct_raw_exec(dbpath, "DROP TABLE claims");
	cr_assert_eq(idx_open(dbpath, 0, 0, 0, 0, &ix), 0);
	cr_assert_eq(ct_raw_i64(dbpath, "PRAGMA user_version"), 3);
	check_ok();
}

Test(migrate, fresh_database_is_v3, .init = setup, .fini = teardown)
{
	cr_assert_eq(idx_open(dbpath, 0, 0, 0, 0, &ix), 0);
	cr_assert_eq(ct_raw_i64(dbpath, "PRAGMA user_version"), 3);
	cr_assert_eq(ct_raw_i64(dbpath, "SELECT count(*) FROM sqlite_master WHERE type = 'table' "
				     "AND name IN ('steps', 'step_events', 'claims', 'xattrs')"),
		     4);
	cr_assert_eq(ct_raw_i64(dbpath, "SELECT count(*) FROM pragma_table_info('inodes') "
				     "WHERE name = 'flags'"),
		     1);
}

Test(migrate, refuses_v4, .init = setup, .fini = teardown)
{
	cr_assert_eq(idx_open(dbpath, 0, 0, 0, 0, &ix), 0);
	idx_close(ix);
	ix = NULL;
	ct_raw_exec(dbpath, "PRAGMA user_version = 4");
	cr_assert_eq(idx_open(dbpath, 0, 0, 0, 0, &ix), -EPROTO);
	cr_assert_null(ix);
	cr_assert_eq(idx_open(dbpath, IDX_RDONLY, 0, 0, 0, &ix), -EPROTO);
	cr_assert_eq(ct_raw_i64(dbpath, "PRAGMA user_version"), 4, "left as found");
}

/* ---- extended attributes (schema v3) ---- */

Test(xattr, set_get_list_remove_and_go_with_the_inode, .init = setup_open_txn, .fini = teardown)
{
	char name[IDX_XATTR_NAME_MAX + 2], buf[64];
	static char big[IDX_XATTR_VALUE_MAX + 1];
	uint64_t f;

	f = new_inode(IDX_ROOT_INO, "f", S_IFREG | 0644); /* setup_open_txn began a transaction */
	cr_assert_eq(idx_xattr_set(ix, f, "user.a", "one", 3, 0), 0);
	cr_assert_eq(idx_xattr_set(ix, f, "trusted.b", "", 0, IDX_XATTR_CREATE), 0);
	cr_assert_eq(idx_xattr_set(ix, f, "user.a", "x", 1, IDX_XATTR_CREATE), -EEXIST);
	cr_assert_eq(idx_xattr_set(ix, f, "user.no", "x", 1, IDX_XATTR_REPLACE), -ENODATA);
	cr_assert_eq(idx_xattr_set(ix, f, "user.a", "x", 1,
				   IDX_XATTR_CREATE | IDX_XATTR_REPLACE), -EINVAL);
	cr_assert_eq(idx_xattr_set(ix, f, "", "x", 1, 0), -ERANGE);
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	cr_assert_eq(idx_xattr_set(ix, f, name, "x", 1, 0), -ERANGE);
	name[IDX_XATTR_NAME_MAX] = '\0';
	cr_assert_eq(idx_xattr_set(ix, f, name, "x", 1, 0), 0, "255 bytes is the limit");
	cr_assert_eq(idx_xattr_set(ix, f, "user.big", big, sizeof(big), 0), -E2BIG);
	cr_assert_eq(idx_xattr_set(ix, f, "user.big", big, IDX_XATTR_VALUE_MAX, 0), 0);
	cr_assert_eq(idx_xattr_set(ix, 9999, "user.a", "x", 1, 0), -ENOENT);
	/* get: length query, copy, short buffer */
	cr_assert_eq(idx_xattr_get(ix, f, "user.a", NULL, 0), 3);
	cr_assert_eq(idx_xattr_get(ix, f, "user.a", buf, sizeof(buf)), 3);
	cr_assert_eq(memcmp(buf, "one", 3), 0);
	cr_assert_eq(idx_xattr_get(ix, f, "user.a", buf, 2), -ERANGE);
	cr_assert_eq(idx_xattr_get(ix, f, "trusted.b", buf, sizeof(buf)), 0);
	cr_assert_eq(idx_xattr_get(ix, f, "user.none", buf, sizeof(buf)), -ENODATA);
	/* replace keeps the listing order */
	cr_assert_eq(idx_xattr_set(ix, f, "user.a", "two", 3, IDX_XATTR_REPLACE), 0);
	cr_assert_eq(idx_xattr_get(ix, f, "user.a", buf, sizeof(buf)), 3);
	cr_assert_eq(memcmp(buf, "two", 3), 0);
	cr_assert_eq(idx_xattr_remove(ix, f, name), 0);
	cr_assert_eq(idx_xattr_remove(ix, f, name), -ENODATA);
	/* list: "user.a\0trusted.b\0user.big\0" = 7 + 10 + 9 */
	cr_assert_eq(idx_xattr_list(ix, f, NULL, 0), 26);
	cr_assert_eq(idx_xattr_list(ix, f, buf, 25), -ERANGE);
	cr_assert_eq(idx_xattr_list(ix, f, buf, sizeof(buf)), 26);
	cr_assert_eq(memcmp(buf, "user.a\0trusted.b\0user.big\0", 26), 0);
	cr_assert_eq(idx_commit(ix), 0);
	check_ok();
	/* they go with the inode */
	cr_assert_eq(idx_begin(ix), 0);
	cr_assert_eq(idx_dentry_remove(ix, IDX_ROOT_INO, "f"), 0);
	cr_assert_eq(idx_inode_delete(ix, f, NULL, NULL), 0);
	cr_assert_eq(idx_commit(ix), 0);
	cr_assert_eq(ct_raw_i64(dbpath, "SELECT count(*) FROM xattrs"), 0);
}

/* ---- idx_check on steps ---- */

Test(check, step_dir_and_states, .init = setup_open_txn, .fini = teardown)
{
	uint64_t d = new_dir("step-1"), f = new_inode(IDX_ROOT_INO, "f", S_IFREG | 0644);
	uint8_t h[IDX_HASH_LEN];
	int64_t id = new_step(0, "step-1", 1, d, 1);

	steps_hash(h, 3);
	cr_assert_eq(idx_file_set_content(ix, f, NULL, 0, 0, h, 2, NULL, NULL), 0);
	cr_assert_eq(idx_step_set_state(ix, id, IDX_STEP_SEALED, 2, NULL), 0);
	cr_assert_eq(idx_commit(ix), 0);
	check_ok();

	/* dangling: the directory inode no longer exists */
	ct_raw_exec(dbpath, "UPDATE steps SET dir_ino = 9999");
	check_fails("invariant 6: step 1 has dir_ino 9999, no such inode");
	/* a regular file */
	ct_raw_exec(dbpath, "UPDATE steps SET dir_ino = 3");
	check_fails("not a directory");
	ct_raw_exec(dbpath, "UPDATE steps SET dir_ino = 2");
	check_ok();

	ct_raw_exec(dbpath, "UPDATE steps SET state = 7");
	check_fails("invariant 7: step 1 has state 7");
	ct_raw_exec(dbpath, "UPDATE steps SET state = -1");
	check_fails("invariant 7");
	ct_raw_exec(dbpath, "UPDATE steps SET state = 1, kind = 32");
	check_fails("kind 32");
	ct_raw_exec(dbpath, "UPDATE steps SET kind = 0");
	check_ok();

	ct_raw_exec(dbpath, "UPDATE step_events SET new_state = 9");
	check_fails("invariant 7: step 1 has an event from state 0 to 9");
	ct_raw_exec(dbpath, "UPDATE step_events SET old_state = 3, new_state = 1");
	check_fails("from state 3 to 1");
	ct_raw_exec(dbpath, "UPDATE step_events SET old_state = 0");
	check_ok();
}

/* ---- idx_chunk_is_bad (read by fs/ when judging a step) ---- */

Test(chunks, is_bad, .init = setup_open_txn, .fini = teardown)
{
	uint64_t f = new_inode(IDX_ROOT_INO, "f", S_IFREG | 0644);
	struct idx_extent e = { .offset = 0, .length = 8, .stored_size = 8, .codec = 0 };
	uint8_t h[IDX_HASH_LEN], other[IDX_HASH_LEN];

	steps_hash(e.hash, 5);
	steps_hash(h, 6);
	steps_hash(other, 7);
	cr_assert_eq(idx_file_set_content(ix, f, &e, 1, 8, h, 2, NULL, NULL), 0);
	cr_assert_eq(idx_chunk_is_bad(ix, e.hash), 0);
	cr_assert_eq(idx_chunk_mark_bad(ix, e.hash), 0);
	cr_assert_eq(idx_chunk_is_bad(ix, e.hash), 1);
	cr_assert_eq(idx_chunk_clear_bad(ix, e.hash), 0);
	cr_assert_eq(idx_chunk_is_bad(ix, e.hash), 0);
	cr_assert_eq(idx_chunk_is_bad(ix, other), -ENOENT);
	cr_assert_eq(idx_commit(ix), 0);
}
