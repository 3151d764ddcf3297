/*
 * main.c — ckptctl, the command-line tool of ckptfs: inspect and maintain a STORE directory,
 * mounted or not.
 *
 *   ckptctl [--json] [--help] [--version] STORE COMMAND [ARGS]
 *   ckptctl help [COMMAND]      ckptctl [STORE] COMMAND --help
 *
 * main parses the options into one struct ctl_opts and runs the command named in the table
 * below; each command lives in its own file (status.c, ls.c, ...) and checks its own operands.
 * The tables below are the only list of the commands and of which command takes which
 * option: help.c makes every help text and usage line from them, and main refuses an option
 * given to a command that has no row for it.
 *
 * Invariants:
 *   1. ckptctl never writes a store a daemon owns: without REPO_EXCLUSIVE, ckpt_repo_open opens
 *      the index and the chunk store read-only when a daemon holds the lock.
 *   2. ckptctl writes a store only while it holds the ownership lock exclusively
 *      (REPO_EXCLUSIVE): verify's bad-chunk marks, gc's sweep, fsck's repairs, pins, imports.
 *      Every index change is made inside one transaction. A mounted store changes only through
 *      its daemon: the control socket (pin, unpin, drop, rollback), or its mount point
 *      (import, which writes there as a trainer does).
 *   3. Standard output carries the result only (aligned text, or one JSON document with
 *      --json); progress and errors go to standard error, errors as one line
 *      "ckptctl: what happened; what to do".
 *   4. Exit status: 0 success (verify: no damage), 1 verify or fsck found damage, an exported
 *      file did not match its recorded digest, or a file to import could not be read, 2 error
 *      or bad usage.
 *
 * Thread-safety: single-threaded, except import (see import.c).
 */
#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs_config.h"

#include "ctl.h"

/*
 * The commands, in the order of the help. Adding a command: its file with cmd_NAME, its
 * declaration in ctl.h, its row here (and in tools/meson.build), and its options' rows in
 * ctl_optdocs; the help, the usage lines, the suggestions and the bash completion follow.
 */
const struct ctl_cmd ctl_commands[] = {
	{ "status", cmd_status, 0, 0, "no arguments", NULL, NULL,
	  "what the store holds, and whether a daemon owns it", false },
	{ "ls", cmd_ls, 0, 1, "at most one PATH", "[PATH]", NULL,
	  "list a directory, or show a file's digest and extents (PATH relative to the mount "
	  "root, default '/')", false },
	{ "verify", cmd_verify, 0, 0, "no arguments", NULL, NULL,
	  "re-read every chunk and re-hash every file; exit 1 on damage", false },
	{ "gc", cmd_gc, 0, 0, "no arguments", NULL, NULL,
	  "remove unlinked inodes and unreferenced chunks (not mounted; mounted, only counts "
	  "them)", false },
	{ "fsck", cmd_fsck, 0, 0, "no arguments", NULL, NULL,
	  "check and repair (not mounted): the index file (a damaged one is rebuilt from its "
	  "readable rows, the old kept aside), the index's consistency, orphans, then verify; "
	  "says what was lost; exit 1 if so; chunk files no index names are kept in "
	  "STORE/lost+found, never deleted", false },
	{ "steps", cmd_steps, 0, 0, "no arguments", NULL, NULL,
	  "the checkpoint steps: state, files, sizes, completion, pins", false },
	{ "show", cmd_show, 1, 1, "one STEP", "STEP", NULL,
	  "one step's fields, directory, files and state history (STEP: a step number, or a "
	  "step directory name such as iter_0000100)", false },
	{ "diff", cmd_diff, 2, 2, "two STEPs", "STEP STEP", NULL,
	  "what changed from the first step to the second: files added, removed and changed "
	  "(by their digest), and the bytes the two share (chunks in common)", false },
	{ "pin", cmd_pin, 1, 1, "one STEP", "STEP", NULL,
	  "protect a complete step from retention (mounted: through the daemon)", false },
	{ "unpin", cmd_pin, 1, 1, "one STEP", "STEP", NULL,
	  "let retention count a pinned step again (mounted: through the daemon)", false },
	{ "drop", cmd_drop, 1, 1, "one STEP", "STEP", NULL,
	  "remove a step now (mounted): a quarantined, retained or complete one, not pinned, "
	  "not the one a tracker names; its chunks are freed", false },
	{ "rollback", cmd_rollback, 1, 1, "one STEP", "STEP", NULL,
	  "make the tracker name complete step STEP (mounted), as if the trainer wrote it: "
	  "newer steps are kept as another lineage", false },
	{ "export", cmd_export, 2, 2, "a STEP and a DIR", "STEP DIR", NULL,
	  "copy a complete step to DIR/NAME as plain files, each verified against its "
	  "recorded digest, and write the framework's tracker in DIR", false },
	{ "claims", cmd_claims, 0, 0, "no arguments", NULL, NULL,
	  "what trainers wrote into their tracker files", false },
	{ "import", cmd_import, 1, 1, "one DIR", "DIR", NULL,
	  "copy a plain checkpoint directory into the store (created if absent): steps "
	  "recognised, sealed by their tracker or marker, complete when every file is whole; "
	  "trackers recorded as claims; refuses names that already exist. Mounted: copied "
	  "through the mount point, each step's files fsynced before the marker or tracker "
	  "that seals it", false },
	{ "remote", cmd_remote, 0, 1, "nothing, 'verify' or 'gc'", NULL, "verify gc",
	  "a many-node job's remote (recorded at mount by -o remote): per step which nodes "
	  "published and whether it is global, the chunk objects; verify also reads and checks "
	  "every chunk a manifest names; gc removes the steps retention dropped and the chunks "
	  "no kept step names", false },
	{ "help", NULL, 0, 1, "at most one COMMAND", "[COMMAND]", NULL,
	  "this help, or a command's own: its usage and options (also 'ckptctl COMMAND "
	  "--help')", true },
};

const size_t ctl_ncommands = sizeof(ctl_commands) / sizeof(ctl_commands[0]);

/* The options besides --json, --help and --version; which command takes each is in
 * ctl_optdocs. */
const struct ctl_option ctl_options[] = {
	{ "dry-run", 'n', NULL, false },
	{ "force", 'f', NULL, false },
	{ "force-no-lease", 'L', NULL, false },
	{ "include", 'i', "PATTERN", true },
	{ "dest", 'd', "PATH", false },
	{ "rebuild", 'r', NULL, false },
	{ "repair", 'R', NULL, false },
};

const size_t ctl_noptions = sizeof(ctl_options) / sizeof(ctl_options[0]);

const struct ctl_optdoc ctl_optdocs[] = {
	{ 'n', "gc",
	  "say what a sweep would remove (counts and bytes, the same JSON keys as a sweep's), "
	  "removing nothing" },
	{ 'r', "fsck",
	  "when index.db is missing or empty, restore index.db.bak (the copy made at the last "
	  "clean unmount), or start a new index if there is none; chunk files it does not name "
	  "go to STORE/lost+found" },
	{ 'f', "export",
	  "also a step that is not complete but still has its directory (quarantined, or being "
	  "written); no tracker is written for it" },
	{ 'i', "export",
	  "only the files whose path in the step matches the glob PATTERN (fnmatch(3), '*' "
	  "matching '/' too), or lies under a directory it matches; may be repeated; no "
	  "tracker is written" },
	{ 'd', "import",
	  "import into PATH (relative to the mount root, created if absent) instead of the "
	  "root; steps and trackers count only at the root" },
	{ 'R', "remote verify",
	  "put this store's sound copy over every chunk found missing or damaged on the "
	  "remote" },
	{ 'n', "remote gc",
	  "list what it would remove, and what would stop it; take no lease, remove nothing" },
	{ 'f', "remote gc",
	  "also take a live lease and remove live upload markers, when you know their gc or "
	  "node died (stale ones are taken over without it)" },
	{ 'L', "remote gc",
	  "on a full remote where even its lease does not fit: run without a lease, every "
	  "upload marker taken as a dead node's; only once ckptfs is stopped on every node" },
};

const size_t ctl_noptdocs = sizeof(ctl_optdocs) / sizeof(ctl_optdocs[0]);

/* getopt_long's values of the options every command takes (not in ctl_options). */
enum { OPT_JSON = 'j', OPT_HELP = 'h', OPT_VERSION = 'V' };

/*
 * option_taken - whether command cmd (with operands argv[0..argc)) takes the option of value
 * val: a row of ctl_optdocs for "cmd", or for "cmd SUB" when argv[0] is SUB.
 */
static bool option_taken(int val, const char *cmd, int argc, char **argv)
{
	size_t n = strlen(cmd);

	for (size_t i = 0; i < ctl_noptdocs; i++) {
		const char *c = ctl_optdocs[i].cmd;

		if (ctl_optdocs[i].val != val || strncmp(c, cmd, n))
			continue;
		if (!c[n] || (c[n] == ' ' && argc >= 1 && !strcmp(c + n + 1, argv[0])))
			return true;
	}
	return false;
}

/*
 * check_options - refuse an option given (given[i] for ctl_options[i]) to a command that does
 * not take it, naming those that do. Returns 0 or EXIT_ERROR (printed).
 */
static int check_options(const struct ctl_opts *o, const bool *given)
{
	for (size_t i = 0; i < ctl_noptions; i++) {
		const struct ctl_option *op = &ctl_options[i];
		char who[256] = "";
		size_t len = 0, k, count = 0, seen = 0;

		if (!given[i] || option_taken(op->val, o->cmd, o->argc, o->argv))
			continue;
		for (k = 0; k < ctl_noptdocs; k++)
			count += ctl_optdocs[k].val == op->val;
		for (k = 0; k < ctl_noptdocs && len < sizeof(who); k++) {
			if (ctl_optdocs[k].val != op->val)
				continue;
			seen++;
			len += (size_t)snprintf(who + len, sizeof(who) - len, "%s'%s'",
						seen == 1 ? "" : seen == count ? " and " : ", ",
						ctl_optdocs[k].cmd);
		}
		return ctl_usage("'--%s' is an option of %s only", op->name, who);
	}
	if (o->dry_run && o->force_no_lease)
		return ctl_usage("'--dry-run' takes no lease already: drop '--force-no-lease'");
	return 0;
}

/*
 * unknown_command - report a command not in the table, with the closest name when one is
 * close enough. Returns EXIT_ERROR.
 */
static int unknown_command(const char *name)
{
	const char *s = ctl_suggest(name, &ctl_commands[0].name, ctl_ncommands,
				    sizeof(ctl_commands[0]));

	if (s)
		return ctl_usage("unknown command '%s'; did you mean '%s'?", name, s);
	return ctl_usage("unknown command '%s'", name);
}

/*
 * unknown_option - report the option argv[optind - 1] getopt_long did not know (short option
 * optopt when set), with the closest long option when one is close enough. Returns EXIT_ERROR.
 */
static int unknown_option(const char *arg, int opt)
{
	static const char *const global[] = { "json", "help", "version" };
	const char *s = NULL;

	if (opt)
		return ctl_usage("unknown option '-%c'", opt);
	if (!strncmp(arg, "--", 2)) {
		char name[64];

		snprintf(name, sizeof(name), "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
		s = ctl_suggest(name, &ctl_options[0].name, ctl_noptions, sizeof(ctl_options[0]));
		if (!s)
			s = ctl_suggest(name, global, 3, sizeof(global[0]));
	}
	if (s)
		return ctl_usage("unknown option '%s'; did you mean '--%s'?", arg, s);
	return ctl_usage("unknown option '%s'", arg);
}

/*
 * help - print the help --help or the help command asks for: pos[0..npos) are the operands
 * (STORE, COMMAND, ARGS as typed, or "help" and a COMMAND). The command is the first of pos[0]
 * (help's operand, or "ckptctl status --help") and pos[1] ("ckptctl STORE status --help") that
 * names one; none: the global help. Returns EXIT_OK, or EXIT_ERROR for an unknown command
 * where one is asked for (printed, with a suggestion).
 */
static int help(char **pos, int npos)
{
	const struct ctl_cmd *c = NULL;

	if (npos >= 1 && !strcmp(pos[0], "help")) {
		if (npos > 2)
			return ctl_usage("'help' takes at most one COMMAND");
		if (npos == 2 && !(c = ctl_command(pos[1])))
			return unknown_command(pos[1]);
	} else if (npos >= 2 && !strcmp(pos[1], "help")) {
		/* "ckptctl STORE help [COMMAND]" */
		if (npos > 3)
			return ctl_usage("'help' takes at most one COMMAND");
		if (npos == 3 && !(c = ctl_command(pos[2])))
			return unknown_command(pos[2]);
	} else if (npos >= 1 && (c = ctl_command(pos[0]))) {
		/* "ckptctl status --help": no STORE */
	} else if (npos >= 2 && !(c = ctl_command(pos[1]))) {
		return unknown_command(pos[1]);
	}
	if (c)
		ctl_help_command(stdout, c);
	else
		ctl_help_global(stdout);
	return EXIT_OK;
}

/*
 * set_option - record option val (with optarg arg) in o and given[]. Returns 0, or -ENOMEM
 * (the array of --include).
 */
static int set_option(struct ctl_opts *o, bool *given, int val, char *arg, int argc)
{
	for (size_t i = 0; i < ctl_noptions; i++)
		if (ctl_options[i].val == val)
			given[i] = true;
	switch (val) {
	case 'f':
		o->force = true;
		break;
	case 'd':
		o->dest = arg;
		break;
	case 'r':
		o->rebuild = true;
		break;
	case 'R':
		o->repair = true;
		break;
	case 'n':
		o->dry_run = true;
		break;
	case 'L':
		o->force_no_lease = true;
		break;
	case 'i':
		/* at most one --include per argument: argc entries always suffice */
		if (!o->include && !(o->include = calloc((size_t)argc, sizeof(*o->include))))
			return -ENOMEM;
		o->include[o->ninclude++] = arg;
		break;
	default:
		assert(!"an option of ctl_options without a case");
	}
	return 0;
}

/* run - everything main does once the options are parsed into o; returns the exit status. */
static int run(struct ctl_opts *o, const bool *given, char **pos, int npos, bool want_help)
{
	/* the mount point names its store: 'ckptctl output/checkpoint status' works as well */
	static char store_of_mount[PATH_CAP];
	const struct ctl_cmd *cmd;
	int rc;

	if (want_help || (npos >= 1 && !strcmp(pos[0], "help")) ||
	    (npos >= 2 && !strcmp(pos[1], "help")))
		return help(pos, npos);
	if (npos < 1)
		return ctl_usage("missing STORE");
	if (npos < 2) {
		if (ctl_command(pos[0]))
			return ctl_usage("missing STORE before command '%s'", pos[0]);
		return ctl_usage("missing COMMAND");
	}
	o->root = pos[0];
	if (ctl_store_of_mount(o->root, store_of_mount, sizeof(store_of_mount)))
		o->root = store_of_mount;
	o->cmd = pos[1];
	o->argc = npos - 2;
	o->argv = pos + 2;
	if (!(cmd = ctl_command(o->cmd)) || !cmd->fn)
		return unknown_command(o->cmd);
	ctl_usage_command(cmd);
	if ((rc = check_options(o, given)) != 0)
		return rc;
	if (o->argc < cmd->min_args || o->argc > cmd->max_args)
		return ctl_usage("'%s' takes %s", cmd->name, cmd->args);
	return cmd->fn(o);
}

int main(int argc, char **argv)
{
	struct option longopts[sizeof(ctl_options) / sizeof(ctl_options[0]) + 4];
	bool given[sizeof(ctl_options) / sizeof(ctl_options[0])] = { false };
	struct ctl_opts o = { 0 };
	bool want_help = false;
	char ferr[512];
	int c, rc;

	if (ckpt_fault_init(ferr, sizeof(ferr)) < 0) {
		fprintf(stderr, "ckptctl: %s\n", ferr);
		return EXIT_ERROR;
	}
	for (size_t i = 0; i < ctl_noptions; i++)
		longopts[i] = (struct option){ ctl_options[i].name,
					       ctl_options[i].arg ? required_argument : no_argument,
					       NULL, ctl_options[i].val };
	longopts[ctl_noptions] = (struct option){ "json", no_argument, NULL, OPT_JSON };
	longopts[ctl_noptions + 1] = (struct option){ "help", no_argument, NULL, OPT_HELP };
	longopts[ctl_noptions + 2] = (struct option){ "version", no_argument, NULL, OPT_VERSION };
	longopts[ctl_noptions + 3] = (struct option){ NULL, 0, NULL, 0 };
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hV", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_JSON:
			o.json = true;
			break;
		case OPT_HELP:
			/* after the operands are known: 'ckptctl STORE status --help' is status's */
			want_help = true;
			break;
		case OPT_VERSION:
			printf("ckptctl %s\n", CKPTFS_VERSION);
			return EXIT_OK;
		case ':':
			for (size_t i = 0; i < ctl_noptions; i++)
				if (ctl_options[i].val == optopt)
					return ctl_usage("'--%s' needs a %s", ctl_options[i].name,
							 ctl_options[i].arg);
			return ctl_usage("'%s' needs an argument", argv[optind - 1]);
		case '?':
			return unknown_option(argv[optind - 1], optopt);
		default:
			if (set_option(&o, given, c, optarg, argc) < 0) {
				ctl_err("out of memory");
				return EXIT_ERROR;
			}
		}
	}
	rc = run(&o, given, argv + optind, argc - optind, want_help);
	free(o.include);
	return rc;
}
