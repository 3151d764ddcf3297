/*
 * steps.c — ckptctl steps and show: the checkpoint steps the daemon recorded, and one step
 * in detail; also finding the steps a STEP argument names (pin and export use it).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/policy/layout.h"

#include "ctl.h"

const char *ctl_kind(int kind)
{
	const char *n = kind >= 0 && kind < LAYOUT_KIND_COUNT ? layout_name((enum layout_kind)kind)
							       : NULL;

	return n ? n : "?";
}

static int step_collect(const struct idx_step *s, void *arg)
{
	struct step_list *l = arg;

	if (ckpt_grow(&l->v, &l->cap, l->n, sizeof(*l->v)) < 0)
		return -ENOMEM;
	l->v[l->n++] = *s;
	return 0;
}

/*
 * steps_other_lineage - whether complete step s was left behind by a rollback or an earlier run
 * (policy rule 6): no tracker names it and retention leaves it alone. lin[] caches each kind's
 * lineage (known[k]). Without a readable lineage, false.
 */
static bool steps_other_lineage(struct idx *ix, const struct idx_step *s,
				struct policy_lineage lin[LAYOUT_KIND_COUNT], bool known[LAYOUT_KIND_COUNT])
{
	if (s->state != IDX_STEP_COMPLETE || s->kind <= 0 || s->kind >= LAYOUT_KIND_COUNT)
		return false;
	if (!known[s->kind]) {
		if (policy_lineage(ix, (enum layout_kind)s->kind, LAYOUT_NONE, &lin[s->kind]) < 0)
			return false;
		known[s->kind] = true;
	}
	return !policy_lineage_member(&lin[s->kind], s);
}

static int steps_run(const char *root, bool json)
{
	struct policy_lineage lin[LAYOUT_KIND_COUNT];
	bool known[LAYOUT_KIND_COUNT] = { false };
	struct ckpt_repo *r = NULL;
	struct step_list l = { 0 };
	char qn[CTL_QUOTE_CAP(IDX_STEP_NAME_MAX)];
	int wn = 4, wname = 4, wl = 6, ws = 5, wf = 5;
	int rc, status = EXIT_ERROR;
	size_t i;

	if (ctl_open_read(root, &r) < 0)
		return EXIT_ERROR;
	rc = idx_step_foreach(r->ix, step_collect, &l);
	if (rc < 0) {
		status = ctl_index_err(root, "list steps", rc);
		goto out;
	}
	if (json) {
		json_t *a = json_array();

		for (i = 0; i < l.n; i++) {
			json_t *o = policy_step_json(&l.v[i]);

			json_object_set_new(o, "other_lineage",
					    json_boolean(steps_other_lineage(r->ix, &l.v[i], lin,
									     known)));
			json_array_append_new(a, o);
		}
		status = ctl_print("ckptfs-steps/1", json_pack("{s:o}", "steps", a)) < 0
				 ? EXIT_ERROR
				 : EXIT_OK;
		goto out;
	}
	if (l.n == 0) {
		printf("no steps recorded in store '%s'\n", root);
		status = EXIT_OK;
		goto out;
	}
	for (i = 0; i < l.n; i++) {
		const struct idx_step *s = &l.v[i];
		int k;

		if ((k = ctl_numw((uint64_t)s->step)) > wn)
			wn = k;
		if ((k = (int)strlen(ctl_quote(s->name, qn, sizeof(qn)))) > wname)
			wname = k;
		if ((k = (int)strlen(ctl_kind(s->kind))) > wl)
			wl = k;
		if ((k = (int)strlen(idx_step_state_name(s->state))) > ws)
			ws = k;
		if ((k = ctl_numw(s->files)) > wf)
			wf = k;
	}
	printf("%*s  %-*s  %-*s  %-*s  %*s  %10s  %10s  %-20s  %-3s  %s\n", wn, "STEP", wname, "NAME",
	       wl, "LAYOUT", ws, "STATE", wf, "FILES", "LOGICAL", "STORED", "COMPLETED", "PIN",
	       "LINEAGE");
	for (i = 0; i < l.n; i++) {
		const struct idx_step *s = &l.v[i];
		char lb[32], sb[32], tb[40];

		printf("%*" PRId64 "  %-*s  %-*s  %-*s  %*" PRIu64 "  %10s  %10s  %-20s  %-3s  %s\n", wn,
		       s->step, wname, ctl_quote(s->name, qn, sizeof(qn)), wl, ctl_kind(s->kind), ws,
		       idx_step_state_name(s->state), wf, s->files,
		       ctl_short_size(s->logical_bytes, lb, sizeof(lb)),
		       ctl_short_size(s->stored_bytes, sb, sizeof(sb)),
		       s->completed_ns ? policy_time_iso(s->completed_ns, tb, sizeof(tb)) : "-",
		       s->pinned ? "*" : "",
		       steps_other_lineage(r->ix, s, lin, known) ? "other (no tracker names it)" : "");
	}
	status = EXIT_OK;
out:
	free(l.v);
	ckpt_repo_close(r);
	return status;
}

static int step_match_one(const struct idx_step *s, void *arg)
{
	struct step_match *m = arg;
	bool hit;

	if (m->numeric)
		hit = s->step == m->number;
	else
		hit = !strcmp(s->name, m->arg) || (m->qid && s->id == m->qid &&
						   !strcmp(s->name, m->qname));
	return hit ? step_collect(s, &m->found) : 0;
}

/* parse_i64 - a decimal number of 1..18 digits, no sign. Returns true and *ret on success. */
static bool parse_i64(const char *p, int64_t *ret)
{
	int64_t v = 0;
	size_t n = 0;

	for (; *p; p++, n++) {
		if (*p < '0' || *p > '9' || n >= 18)
			return false;
		v = 10 * v + (*p - '0');
	}
	if (n == 0)
		return false;
	*ret = v;
	return true;
}

static int step_id_desc(const void *a, const void *b)
{
	int64_t x = ((const struct idx_step *)a)->id, y = ((const struct idx_step *)b)->id;

	return x < y ? 1 : x > y ? -1 : 0;
}

int ctl_find_steps(struct idx *ix, const char *arg, struct step_match *m)
{
	const char *dot = strrchr(arg, '.');
	int rc;

	memset(m, 0, sizeof(*m));
	m->arg = arg;
	m->numeric = parse_i64(arg, &m->number);
	if (!m->numeric && dot && (size_t)(dot - arg) <= IDX_STEP_NAME_MAX &&
	    parse_i64(dot + 1, &m->qid) && m->qid > 0) {
		memcpy(m->qname, arg, (size_t)(dot - arg));
		m->qname[dot - arg] = '\0';
	} else {
		m->qid = 0;
	}
	rc = idx_step_foreach(ix, step_match_one, m);
	if (rc < 0)
		return rc;
	if (m->found.n > 1)
		qsort(m->found.v, m->found.n, sizeof(*m->found.v), step_id_desc);
	return (int)m->found.n;
}

const struct idx_step *ctl_pick_step(const struct step_match *m)
{
	size_t i;

	for (i = 0; i < m->found.n; i++)
		if (m->found.v[i].state == IDX_STEP_COMPLETE)
			return &m->found.v[i];
	for (i = 0; i < m->found.n; i++)
		if (m->found.v[i].state != IDX_STEP_PRUNED)
			return &m->found.v[i];
	return m->found.n ? &m->found.v[0] : NULL;
}

int ctl_no_step(const char *root, const char *arg)
{
	ctl_err("no step '%s' in store '%s'; run 'ckptctl %s steps' to list the steps", arg, root,
		root);
	return EXIT_ERROR;
}

/*
 * step_location - where step s's directory is now, into buf (cap bytes): its path from the
 * mount root ("/iter_0000100", "/.ckptfs/quarantine/iter_0000200.2"), "(pruned)", or
 * "(no directory)". Returns 0 or -errno of the index.
 */
static int step_location(struct idx *ix, const struct idx_step *s, char *buf, size_t cap)
{
	int rc;

	if (!s->dir_ino) {
		snprintf(buf, cap, "%s", s->state == IDX_STEP_PRUNED ? "(pruned)" : "(no directory)");
		return 0;
	}
	rc = idx_path(ix, s->dir_ino, buf, cap);
	if (rc == -ENOENT) {
		snprintf(buf, cap, "(directory inode %" PRIu64 " unlinked)", s->dir_ino);
		return 0;
	}
	return rc < 0 ? rc : 0;
}

void ctl_tree_free(struct tree *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->v[i].rel);
	free(t->v);
	memset(t, 0, sizeof(*t));
}

static int tree_add(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct tree *t = arg;
	struct tree_ent *e;
	size_t len;

	if (ckpt_grow(&t->v, &t->cap, t->n, sizeof(*t->v)) < 0)
		return -ENOMEM;
	e = &t->v[t->n];
	len = strlen(t->prefix) + 1 + strlen(name) + 1;
	e->rel = malloc(len);
	if (!e->rel)
		return -ENOMEM;
	if (t->prefix[0])
		snprintf(e->rel, len, "%s/%s", t->prefix, name);
	else
		snprintf(e->rel, len, "%s", name);
	e->ino = ino;
	e->mode = mode;
	t->n++;
	return 0;
}

static int tree_cmp(const void *a, const void *b)
{
	return strcmp(((const struct tree_ent *)a)->rel, ((const struct tree_ent *)b)->rel);
}

int ctl_tree_collect(struct idx *ix, uint64_t dir, struct tree *t)
{
	int rc;

	memset(t, 0, sizeof(*t));
	t->prefix = "";
	rc = idx_dir_list(ix, dir, 0, tree_add, t);
	for (size_t i = 0; rc >= 0 && i < t->n; i++) { /* t->v grows as we go */
		char *prefix;

		if (!S_ISDIR(t->v[i].mode))
			continue;
		prefix = strdup(t->v[i].rel); /* t->v may move while listing */
		if (!prefix) {
			rc = -ENOMEM;
			break;
		}
		t->prefix = prefix;
		rc = idx_dir_list(ix, t->v[i].ino, 0, tree_add, t);
		t->prefix = "";
		free(prefix);
		if (rc == -ENOENT)
			rc = 0;
	}
	if (rc < 0) {
		ctl_tree_free(t);
		return rc;
	}
	if (t->n)
		qsort(t->v, t->n, sizeof(*t->v), tree_cmp);
	return 0;
}

char *ctl_flags(uint32_t flags, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s%s%s%s", (flags & IDX_INODE_TORN) ? "torn," : "",
		 (flags & IDX_INODE_MALFORMED) ? "malformed," : "",
		 (flags & IDX_INODE_VALID) ? "valid," : "", flags ? "" : "-");
	if (flags && buf[0])
		buf[strlen(buf) - 1] = '\0'; /* the last comma */
	return buf;
}

static json_t *flags_json(uint32_t flags)
{
	json_t *a = json_array();

	if (flags & IDX_INODE_TORN)
		json_array_append_new(a, json_string("torn"));
	if (flags & IDX_INODE_MALFORMED)
		json_array_append_new(a, json_string("malformed"));
	if (flags & IDX_INODE_VALID)
		json_array_append_new(a, json_string("valid"));
	return a;
}

/* One state change of a step. */
struct step_event {
	int64_t ts_ns;
	int old_state, new_state;
	char *note; /* owned, NULL when none */
};

struct event_list {
	struct step_event *v;
	size_t n, cap;
};

static int event_collect(int64_t ts_ns, int old_state, int new_state, const char *note, void *arg)
{
	struct event_list *l = arg;
	struct step_event *e;

	if (ckpt_grow(&l->v, &l->cap, l->n, sizeof(*l->v)) < 0)
		return -ENOMEM;
	e = &l->v[l->n];
	e->ts_ns = ts_ns;
	e->old_state = old_state;
	e->new_state = new_state;
	e->note = note ? strdup(note) : NULL;
	if (note && !e->note)
		return -ENOMEM;
	l->n++;
	return 0;
}

static void event_list_free(struct event_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].note);
	free(l->v);
}

/* One file of a step, as shown. */
struct show_file {
	const char *rel; /* borrowed from the tree */
	struct idx_inode in;
	uint64_t stored;
};

/*
 * show_collect - the regular files under step s's directory (tree t, owned by the caller) into
 * files[0..*ret_n) (t.n entries allocated, owned by the caller: free(); rel borrowed from t).
 * Returns 0, -ENOMEM, or -errno of the index.
 */
static int show_collect(struct ckpt_repo *r, const struct idx_step *s, struct tree *t,
			struct show_file **ret_files, size_t *ret_n)
{
	struct show_file *files;
	size_t nfiles = 0;
	int rc = 0;

	if (s->dir_ino)
		rc = ctl_tree_collect(r->ix, s->dir_ino, t);
	if (rc == -ENOENT)
		rc = 0; /* the directory went away meanwhile (mounted): no files */
	if (rc < 0)
		return rc;
	files = calloc(t->n ? t->n : 1, sizeof(*files));
	if (!files)
		return -ENOMEM;
	*ret_files = files;
	for (size_t i = 0; i < t->n; i++) {
		struct show_file *f = &files[nfiles];

		if (!S_ISREG(t->v[i].mode))
			continue;
		f->rel = t->v[i].rel;
		rc = idx_inode_get(r->ix, t->v[i].ino, &f->in);
		if (rc == 0)
			rc = idx_file_stored_bytes(r->ix, t->v[i].ino, &f->stored);
		if (rc == -ENOENT && r->mounted)
			continue; /* removed by the daemon since the listing */
		if (rc < 0)
			return rc;
		nfiles++;
	}
	*ret_n = nfiles;
	return 0;
}

/* show_json - step s (directory where, its files and history) as one object appended to a. */
static void show_json(const struct idx_step *s, const char *where,
		      const struct show_file *files, size_t nfiles, const struct event_list *ev,
		      json_t *a)
{
	json_t *o = policy_step_json(s), *af = json_array(), *ah = json_array();
	char hex[2 * STORE_HASH_LEN + 1];
	size_t i;

	json_object_set_new(o, "path", policy_json_name(where));
	for (i = 0; i < nfiles; i++) {
		json_t *x = json_object();

		json_object_set_new(x, "path", policy_json_name(files[i].rel));
		json_object_set_new(x, "ino", ctl_u64(files[i].in.ino));
		json_object_set_new(x, "mode", json_integer(files[i].in.mode & 07777));
		json_object_set_new(x, "size", ctl_u64(files[i].in.size));
		json_object_set_new(x, "stored_bytes", ctl_u64(files[i].stored));
		json_object_set_new(x, "flags", flags_json(files[i].in.flags));
		json_object_set_new(x, "xxh3_128",
				    files[i].in.has_hash
					    ? json_string(ctl_hex(files[i].in.hash, hex))
					    : json_null());
		json_array_append_new(af, x);
	}
	for (i = 0; i < ev->n; i++) {
		json_t *x = json_object();

		json_object_set_new(x, "changed", policy_json_time(ev->v[i].ts_ns));
		json_object_set_new(x, "changed_ns", json_integer(ev->v[i].ts_ns));
		json_object_set_new(x, "from", json_string(idx_step_state_name(ev->v[i].old_state)));
		json_object_set_new(x, "to", json_string(idx_step_state_name(ev->v[i].new_state)));
		json_object_set_new(x, "note", ev->v[i].note ? json_string(ev->v[i].note)
							     : json_null());
		json_array_append_new(ah, x);
	}
	json_object_set_new(o, "files_list", af);
	json_object_set_new(o, "history", ah);
	json_array_append_new(a, o);
}

/* show_files_text - the files of a step as an aligned table, or "(no files)". */
static void show_files_text(const struct show_file *files, size_t nfiles)
{
	char hex[2 * STORE_HASH_LEN + 1], fb[64], q[CTL_QUOTE_CAP(PATH_CAP)];
	int wsz = 4, wst = 6, wfl = 5;
	size_t i;

	if (!nfiles) {
		printf("\n  (no files)\n");
		return;
	}
	for (i = 0; i < nfiles; i++) {
		int k;

		if ((k = ctl_numw(files[i].in.size)) > wsz)
			wsz = k;
		if ((k = ctl_numw(files[i].stored)) > wst)
			wst = k;
		if ((k = (int)strlen(ctl_flags(files[i].in.flags, fb, sizeof(fb)))) > wfl)
			wfl = k;
	}
	printf("\n  %*s %*s %-*s %-32s %s\n", wsz, "SIZE", wst, "STORED", wfl, "FLAGS",
	       "XXH3-128", "PATH");
	for (i = 0; i < nfiles; i++)
		printf("  %*" PRIu64 " %*" PRIu64 " %-*s %-32s %s\n", wsz, files[i].in.size, wst,
		       files[i].stored, wfl, ctl_flags(files[i].in.flags, fb, sizeof(fb)),
		       files[i].in.has_hash ? ctl_hex(files[i].in.hash, hex) : "(none)",
		       ctl_quote(files[i].rel, q, sizeof(q)));
}

/* show_text - step s (directory where, its files and history) as text; a blank line first
 * unless it is the first step shown. */
static void show_text(const struct idx_step *s, const char *where,
		      const struct show_file *files, size_t nfiles, const struct event_list *ev,
		      bool first)
{
	char hex[2 * STORE_HASH_LEN + 1], tb[40], fb[64], q[CTL_QUOTE_CAP(PATH_CAP)];

	if (!first)
		putchar('\n');
	printf("step:        %" PRId64 "\n", s->step);
	printf("name:        %s\n", ctl_quote(s->name, q, sizeof(q)));
	printf("id:          %" PRId64 "\n", s->id);
	printf("layout:      %s\n", ctl_kind(s->kind));
	printf("state:       %s%s\n", idx_step_state_name(s->state), s->pinned ? " (pinned)" : "");
	printf("directory:   %s\n", ctl_quote(where, q, sizeof(q)));
	printf("created:     %s\n", policy_time_iso(s->created_ns, tb, sizeof(tb)));
	printf("sealed:      %s\n", s->sealed_ns ? policy_time_iso(s->sealed_ns, tb, sizeof(tb)) : "-");
	printf("completed:   %s\n",
	       s->completed_ns ? policy_time_iso(s->completed_ns, tb, sizeof(tb)) : "-");
	printf("files:       %" PRIu64 "\n", s->files);
	printf("logical:     %s\n", policy_size_text(s->logical_bytes, fb, sizeof(fb)));
	printf("stored:      %s\n", policy_size_text(s->stored_bytes, fb, sizeof(fb)));
	printf("digest:      %s\n", s->has_digest ? ctl_hex(s->digest, hex) : "-");
	show_files_text(files, nfiles);
	printf("\nhistory:\n");
	if (!ev->n)
		printf("  (no state changes recorded)\n");
	for (size_t i = 0; i < ev->n; i++)
		printf("  %s  %s -> %s%s%s\n", policy_time_iso(ev->v[i].ts_ns, tb, sizeof(tb)),
		       idx_step_state_name(ev->v[i].old_state),
		       idx_step_state_name(ev->v[i].new_state), ev->v[i].note ? ": " : "",
		       ev->v[i].note ? ctl_quote(ev->v[i].note, q, sizeof(q)) : "");
}

/*
 * show_one - print (or append to the JSON array a) step s: its fields, location, files and
 * state history. Returns 0 or -errno of the index.
 */
static int show_one(struct ckpt_repo *r, const struct idx_step *s, json_t *a, bool first)
{
	struct tree t = { 0 };
	struct event_list ev = { 0 };
	struct show_file *files = NULL;
	size_t nfiles = 0;
	char where[PATH_CAP];
	int rc;

	rc = step_location(r->ix, s, where, sizeof(where));
	if (rc == 0)
		rc = show_collect(r, s, &t, &files, &nfiles);
	if (rc == 0)
		rc = idx_step_events(r->ix, s->id, event_collect, &ev);
	if (rc < 0)
		goto out;
	if (a)
		show_json(s, where, files, nfiles, &ev, a);
	else
		show_text(s, where, files, nfiles, &ev, first);
out:
	free(files);
	ctl_tree_free(&t);
	event_list_free(&ev);
	return rc;
}

static int show_run(const char *root, const char *arg, bool json)
{
	struct ckpt_repo *r = NULL;
	struct step_match m;
	json_t *a = NULL;
	int rc, status = EXIT_ERROR;

	memset(&m, 0, sizeof(m));
	if (ctl_open_read(root, &r) < 0)
		return EXIT_ERROR;
	rc = ctl_find_steps(r->ix, arg, &m);
	if (rc < 0) {
		status = ctl_index_err(root, "list steps", rc);
		goto out;
	}
	if (rc == 0) {
		status = ctl_no_step(root, arg);
		goto out;
	}
	if (json)
		a = json_array();
	for (size_t i = 0; i < m.found.n; i++) {
		rc = show_one(r, &m.found.v[i], a, i == 0);
		if (rc < 0) {
			json_decref(a);
			status = ctl_index_err(root, "read a step", rc);
			goto out;
		}
	}
	if (a && ctl_print("ckptfs-show/1", json_pack("{s:o}", "versions", a)) < 0)
		goto out;
	status = EXIT_OK;
out:
	free(m.found.v);
	ckpt_repo_close(r);
	return status;
}

int cmd_steps(const struct ctl_opts *o)
{
	return steps_run(o->root, o->json);
}

int cmd_show(const struct ctl_opts *o)
{
	return show_run(o->root, o->argv[0], o->json);
}
