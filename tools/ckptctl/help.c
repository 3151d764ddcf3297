/*
 * help.c — ckptctl's help, made from the command and option tables of main.c: the global help,
 * each command's help, the short usage of a usage error, and the "did you mean" of a typo.
 *
 * Invariants:
 *   1. Nothing here names a command or an option: every name, operand and text comes from
 *      ctl_commands, ctl_options and ctl_optdocs, so a command added to the table is in every
 *      help, usage line and suggestion at once.
 *   2. Help goes to the FILE given (stdout for --help and help, exit 0); usage errors to stderr.
 *   3. Lines are at most WIDTH columns, but for a single word longer than a line.
 *
 * Thread-safety: main thread only (the command remembered by ctl_usage_command).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

#define WIDTH 80  /* columns of every line printed */
#define INDENT 14 /* where a command's or an option's text starts */

/* The command whose usage ctl_usage prints, NULL before main names one. */
static const struct ctl_cmd *usage_cmd;

/* The usage prefix of a command taking a STORE: --json goes with every one. */
static const char STORE_PREFIX[] = "ckptctl [--json] STORE ";

void ctl_usage_command(const struct ctl_cmd *c)
{
	usage_cmd = c;
}

const struct ctl_cmd *ctl_command(const char *name)
{
	for (size_t i = 0; i < ctl_ncommands; i++)
		if (!strcmp(ctl_commands[i].name, name))
			return &ctl_commands[i];
	return NULL;
}

/* find_option - the row of ctl_options with getopt value val; NULL when none. */
static const struct ctl_option *find_option(int val)
{
	for (size_t i = 0; i < ctl_noptions; i++)
		if (ctl_options[i].val == val)
			return &ctl_options[i];
	return NULL;
}

/*
 * wrap - print text as one paragraph on f, words separated by single spaces, each line at most
 * WIDTH columns: the first line continues at column col (the cursor's), the others start at
 * column indent. Ends with a newline.
 */
static void wrap(FILE *f, int col, int indent, const char *text)
{
	const char *p = text;
	bool first = true;

	while (*p) {
		size_t n = strcspn(p, " ");

		if (!first && col + 1 + (int)n > WIDTH) {
			fprintf(f, "\n%*s", indent, "");
			col = indent;
			first = true;
		}
		if (!first) {
			fputc(' ', f);
			col++;
		}
		fwrite(p, 1, n, f);
		col += (int)n;
		first = false;
		p += n;
		p += strspn(p, " ");
	}
	fputc('\n', f);
}

/*
 * entry - "  HEAD" and text from column INDENT, on the same line when HEAD leaves two spaces
 * before it, else on the next.
 */
static void entry(FILE *f, const char *head, const char *text)
{
	int col = fprintf(f, "  %s", head);

	if (col + 2 > INDENT)
		fprintf(f, "\n%*s", INDENT, "");
	else
		fprintf(f, "%*s", INDENT - col, "");
	wrap(f, INDENT, INDENT, text);
}

/* option_head - "--name ARG" into buf (cap bytes). Returns buf. */
static char *option_head(const struct ctl_option *op, char *buf, size_t cap)
{
	snprintf(buf, cap, "--%s%s%s", op->name, op->arg ? " " : "", op->arg ? op->arg : "");
	return buf;
}

/* append - printf at *o in buf (cap bytes), *o kept below cap: the text is cut, never overrun. */
static void append(char *buf, size_t cap, size_t *o, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void append(char *buf, size_t cap, size_t *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf + *o, cap - *o, fmt, ap);
	va_end(ap);
	if (n > 0)
		*o = *o + (size_t)n < cap ? *o + (size_t)n : cap - 1;
}

/*
 * form - the usage of one form of a command: "NAME [SUB] [--opt ARG]... OPERANDS" (sub NULL:
 * the command itself, with its operands unless it has subcommands) into buf (cap bytes),
 * without the "ckptctl ... STORE" prefix; cut short if it does not fit (cap > 0). Returns buf.
 */
static char *form(const struct ctl_cmd *c, const char *sub, size_t sublen, char *buf,
		  size_t cap)
{
	char key[64], head[64];
	size_t o = 0;

	buf[0] = '\0';
	append(buf, cap, &o, "%s", c->name);
	if (sub)
		append(buf, cap, &o, " %.*s", (int)sublen, sub);
	snprintf(key, sizeof(key), "%s", buf);
	for (size_t i = 0; i < ctl_noptdocs; i++) {
		const struct ctl_option *op = find_option(ctl_optdocs[i].val);

		if (strcmp(ctl_optdocs[i].cmd, key) || !op)
			continue;
		append(buf, cap, &o, " [%s]%s", option_head(op, head, sizeof(head)),
		       op->repeat ? "..." : "");
	}
	if (!sub && !c->subs && c->operands)
		append(buf, cap, &o, " %s", c->operands);
	return buf;
}

/* Calls fn(form, arg) for each form of c: the command itself, then each subcommand. */
static void foreach_form(const struct ctl_cmd *c, void (*fn)(const char *form, void *arg),
			 void *arg)
{
	char buf[256];
	const char *p = c->subs;

	fn(form(c, NULL, 0, buf, sizeof(buf)), arg);
	while (p && *p) {
		size_t n = strcspn(p, " ");

		fn(form(c, p, n, buf, sizeof(buf)), arg);
		p += n;
		p += strspn(p, " ");
	}
}

struct usage_line {
	FILE *f;
	const struct ctl_cmd *c;
	bool first;
};

/* usage_form - one "usage: ckptctl [--json] STORE FORM" line (foreach_form). */
static void usage_form(const char *f, void *arg)
{
	struct usage_line *u = arg;

	fprintf(u->f, "%s ckptctl %s%s\n", u->first ? "usage:" : "      ",
		u->c->no_store ? "" : STORE_PREFIX + strlen("ckptctl "), f);
	u->first = false;
}

/* Every form of every command, " | "-separated and wrapped, for the short usage. */
struct usage_all {
	FILE *f;
	int col;      /* the cursor's column */
	bool started; /* a form is printed on the line */
};

static void usage_all_form(const char *f, void *arg)
{
	struct usage_all *u = arg;
	int n = (int)strlen(f), indent = (int)strlen("usage: ckptctl ");

	if (u->started && u->col + 3 + n > WIDTH) {
		fprintf(u->f, " |\n%*s", indent, "");
		u->col = indent;
	} else if (u->started) {
		fputs(" | ", u->f);
		u->col += 3;
	}
	fputs(f, u->f);
	u->col += n;
	u->started = true;
}

/* short_usage - the usage lines of c, or of every command when c is NULL, on f. */
static void short_usage(FILE *f, const struct ctl_cmd *c)
{
	struct usage_line u = { .f = f, .c = c, .first = true };
	struct usage_all a = { .f = f };

	if (c) {
		foreach_form(c, usage_form, &u);
		return;
	}
	a.col = fprintf(f, "usage: %s", STORE_PREFIX);
	for (size_t i = 0; i < ctl_ncommands; i++)
		if (!ctl_commands[i].no_store)
			foreach_form(&ctl_commands[i], usage_all_form, &a);
	fputc('\n', f);
	for (size_t i = 0; i < ctl_ncommands; i++) {
		if (!ctl_commands[i].no_store)
			continue;
		u.c = &ctl_commands[i];
		u.first = false;
		foreach_form(u.c, usage_form, &u);
	}
}

/* global_options - the options every command takes, as the help lists them; help_text: what
 * -h does there. */
static void global_options(FILE *f, const char *help_text)
{
	entry(f, "--json", "print one JSON document instead of text");
	entry(f, "-h, --help", help_text);
}

void ctl_help_global(FILE *f)
{
	char head[128];

	fputs("usage: ckptctl [--json] [--help] [--version] STORE COMMAND [ARGS]\n"
	      "       ckptctl help [COMMAND]\n"
	      "\n",
	      f);
	wrap(f, 0, 0,
	     "Inspect and maintain a ckptfs STORE directory, mounted or not; the mount point of a "
	     "mounted store names it as well. Options may come anywhere on the command line.");
	fputs("\ncommands:\n", f);
	for (size_t i = 0; i < ctl_ncommands; i++) {
		const struct ctl_cmd *c = &ctl_commands[i];
		const char *ops = c->subs ? NULL : c->operands;
		char subs[64] = "";

		if (c->subs) {
			snprintf(subs, sizeof(subs), " [%s]", c->subs);
			for (char *p = subs; *p; p++)
				if (*p == ' ' && p != subs)
					*p = '|';
		}
		snprintf(head, sizeof(head), "%s%s%s%s", c->name, ops ? " " : "", ops ? ops : "",
			 subs);
		entry(f, head, c->help);
	}
	fputs("\noptions (for the commands named; 'ckptctl help COMMAND' shows a command's):\n", f);
	global_options(f, "show this help; with a COMMAND, or after one, the command's own");
	for (size_t i = 0; i < ctl_noptions; i++) {
		const struct ctl_option *op = &ctl_options[i];
		bool first = true;

		for (size_t k = 0; k < ctl_noptdocs; k++) {
			char text[1024];

			if (ctl_optdocs[k].val != op->val)
				continue;
			snprintf(text, sizeof(text), "%s: %s", ctl_optdocs[k].cmd,
				 ctl_optdocs[k].help);
			if (first) {
				entry(f, option_head(op, head, sizeof(head)), text);
			} else {
				fprintf(f, "%*s", INDENT, "");
				wrap(f, INDENT, INDENT, text);
			}
			first = false;
		}
	}
	fputs("  -V, --version  show the version\n"
	      "\n"
	      "exit status: 0 success, 1 verify, fsck, export or remote verify found damage, or\n"
	      "             import could not read some file, 2 error or bad usage\n",
	      f);
}

void ctl_help_command(FILE *f, const struct ctl_cmd *c)
{
	char head[128];

	short_usage(f, c);
	fputc('\n', f);
	wrap(f, 0, 0, c->help);
	fputs("\noptions:\n", f);
	for (size_t k = 0; k < ctl_noptdocs; k++) {
		const struct ctl_optdoc *d = &ctl_optdocs[k];
		const struct ctl_option *op = find_option(d->val);
		size_t n = strlen(c->name);
		char text[1024];

		/* the command's own rows, and its subcommands' ("remote gc") */
		if (!op || strncmp(d->cmd, c->name, n) || (d->cmd[n] && d->cmd[n] != ' '))
			continue;
		if (d->cmd[n])
			snprintf(text, sizeof(text), "%s: %s", d->cmd, d->help);
		else
			snprintf(text, sizeof(text), "%s", d->help);
		entry(f, option_head(op, head, sizeof(head)), text);
	}
	global_options(f, "show this help");
}

int ctl_usage(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ctl_verr(fmt, ap);
	va_end(ap);
	short_usage(stderr, usage_cmd);
	if (usage_cmd)
		fprintf(stderr, "run 'ckptctl help %s' for its options\n", usage_cmd->name);
	else
		fputs("run 'ckptctl help' for every command and option, 'ckptctl help COMMAND' for "
		      "one\n",
		      stderr);
	return EXIT_ERROR;
}

/* Columns of the distance matrix: the longest string compared, plus one. */
#define DIST_MAX 64

int ctl_edit_distance(const char *a, const char *b)
{
	/* three rows of the dynamic programme: two back for a transposition */
	int rows[3][DIST_MAX + 1];
	size_t n = strnlen(a, DIST_MAX), m = strnlen(b, DIST_MAX);

	for (size_t j = 0; j <= m; j++)
		rows[0][j] = (int)j;
	for (size_t i = 1; i <= n; i++) {
		int *cur = rows[i % 3], *prev = rows[(i - 1) % 3], *prev2 = rows[(i + 1) % 3];

		cur[0] = (int)i;
		for (size_t j = 1; j <= m; j++) {
			int cost = a[i - 1] != b[j - 1], v = prev[j - 1] + cost;

			if (prev[j] + 1 < v)
				v = prev[j] + 1;
			if (cur[j - 1] + 1 < v)
				v = cur[j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    prev2[j - 2] + 1 < v)
				v = prev2[j - 2] + 1;
			cur[j] = v;
		}
	}
	return rows[n % 3][m];
}

const char *ctl_suggest(const char *typed, const void *cands, size_t n, size_t stride)
{
	int best = -1, limit = strlen(typed) <= 4 ? 1 : 2;
	const char *pick = NULL;

	for (size_t i = 0; i < n; i++) {
		const char *c = *(const char *const *)((const char *)cands + i * stride);
		int d = ctl_edit_distance(typed, c);

		if (d <= limit && (best < 0 || d < best)) {
			best = d;
			pick = c;
		}
	}
	return pick;
}
