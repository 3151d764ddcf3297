/*
 * main.c — ckptctl, the command-line tool of ckptfs: inspect and maintain a STORE directory,
 * mounted or not.
 *
 *   ckptctl [--json] [--help] [--version] STORE COMMAND [ARGS]
 *
 * main parses the options into one struct ctl_opts and runs the command named in the table
 * below; each command lives in its own file (status.c, ls.c, ...) and checks its own operands.
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
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ckptfs_config.h"

#include "ctl.h"

/* One command: its name, its function, how many arguments it takes (min..max, and in words for
 * the error), and its part of the --help text (NULL: shares the entry before it). The order is
 * the order of --help. */
struct ctl_cmd {
	const char *name;
	int (*fn)(const struct ctl_opts *o);
	int min_args, max_args;
	const char *args;
	const char *help;
};

static const struct ctl_cmd commands[] = {
	{ "status", cmd_status, 0, 0, "no arguments",
	  "  status      what the store holds, and whether a daemon owns it\n" },
	{ "ls", cmd_ls, 0, 1, "at most one PATH",
	  "  ls [PATH]   list a directory, or show a file's digest and extents\n"
	  "              (PATH relative to the mount root, default '/')\n" },
	{ "verify", cmd_verify, 0, 0, "no arguments",
	  "  verify      re-read every chunk and re-hash every file; exit 1 on damage\n" },
	{ "gc", cmd_gc, 0, 0, "no arguments",
	  "  gc          remove unlinked inodes and unreferenced chunks (not mounted; mounted,\n"
	  "              only counts them); --dry-run says what it would remove, removing nothing\n" },
	{ "fsck", cmd_fsck, 0, 0, "no arguments",
	  "  fsck        check and repair (not mounted): the index file (a damaged one is\n"
	  "              rebuilt from its readable rows, the old kept aside), the index's\n"
	  "              consistency, orphans, then verify; says what was lost; exit 1 if so;\n"
	  "              chunk files no index names are kept in STORE/lost+found, never deleted\n" },
	{ "steps", cmd_steps, 0, 0, "no arguments",
	  "  steps       the checkpoint steps: state, files, sizes, completion, pins\n" },
	{ "show", cmd_show, 1, 1, "one STEP",
	  "  show STEP   one step's fields, directory, files and state history\n"
	  "              (STEP: a step number, or a step directory name such as iter_0000100)\n" },
	{ "pin", cmd_pin, 1, 1, "one STEP",
	  "  pin STEP, unpin STEP\n"
	  "              protect a complete step from retention, or stop (mounted: through\n"
	  "              the daemon)\n" },
	{ "unpin", cmd_pin, 1, 1, "one STEP", NULL },
	{ "drop", cmd_drop, 1, 1, "one STEP",
	  "  drop STEP   remove a step now (mounted): a quarantined, retained or complete one,\n"
	  "              not pinned, not the one a tracker names; its chunks are freed\n" },
	{ "rollback", cmd_rollback, 1, 1, "one STEP",
	  "  rollback STEP\n"
	  "              make the tracker name complete step STEP (mounted), as if the trainer\n"
	  "              wrote it: newer steps are kept as another lineage\n" },
	{ "export", cmd_export, 2, 2, "a STEP and a DIR",
	  "  export STEP DIR\n"
	  "              copy a complete step to DIR/NAME as plain files, each verified against\n"
	  "              its recorded digest, and write the framework's tracker in DIR\n" },
	{ "claims", cmd_claims, 0, 0, "no arguments",
	  "  claims      what trainers wrote into their tracker files\n" },
	{ "import", cmd_import, 1, 1, "one DIR",
	  "  import DIR  copy a plain checkpoint directory into the store (created if absent):\n"
	  "              steps recognised, sealed by their tracker or marker, complete when\n"
	  "              every file is whole; trackers recorded as claims; refuses names that\n"
	  "              already exist. Mounted: copied through the mount point, each step's\n"
	  "              files fsynced before the marker or tracker that seals it\n" },
	{ "remote", cmd_remote, 0, 1, "nothing, 'verify' or 'gc'",
	  "  remote [verify|gc]\n"
	  "              a many-node job's remote (recorded at mount by -o remote): per step\n"
	  "              which nodes published and whether it is global, the chunk objects;\n"
	  "              verify also reads and checks every chunk a manifest names; gc removes\n"
	  "              the steps retention dropped and the chunks no kept step names\n" },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

/* usage - the --help text on f. */
static void usage(FILE *f)
{
	fputs("usage: ckptctl [--json] [--help] [--version] STORE COMMAND [ARGS]\n"
	      "\n"
	      "Inspect and maintain a ckptfs STORE directory, mounted or not; the mount point of a\n"
	      "mounted store names it as well.\n"
	      "\n"
	      "commands:\n",
	      f);
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (commands[i].help)
			fputs(commands[i].help, f);
	fputs("\n"
	      "options:\n"
	      "  --json      print one JSON document instead of text\n"
	      "  --force     export: also a step that is not complete; remote gc: also take a\n"
	      "              live lease and remove live upload markers, when you know their gc\n"
	      "              or node died (stale ones are taken over without it)\n"
	      "  --dry-run   gc: say what a sweep would remove (counts and bytes, the same JSON\n"
	      "              keys as a sweep's); remote gc: list what it would remove, and what\n"
	      "              would stop it, take no lease; either removes nothing\n"
	      "  --force-no-lease\n"
	      "              remote gc on a full remote where even its lease does not fit:\n"
	      "              run without a lease, every upload marker taken as a dead node's;\n"
	      "              only once ckptfs is stopped on every node\n"
	      "  --dest PATH import: into PATH (relative to the mount root, created if absent)\n"
	      "              instead of the root; steps and trackers count only at the root\n"
	      "  --repair    remote verify: put this store's sound copy over every chunk found\n"
	      "              missing or damaged on the remote\n"
	      "  --rebuild   fsck: when index.db is missing or empty, restore index.db.bak (the\n"
	      "              copy made at the last clean unmount), or start a new index if there\n"
	      "              is none; chunk files it does not name go to STORE/lost+found\n"
	      "  -h, --help  show this help\n"
	      "  -V, --version  show the version\n"
	      "\n"
	      "exit status: 0 success, 1 verify, fsck, export or remote verify found damage, or import\n"
	      "             could not read some file, 2 error\n",
	      f);
}

int ctl_usage(const char *fmt, ...)
{
	va_list ap;

	fputs("ckptctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nusage: ckptctl [--json] STORE status | ls [PATH] | verify | gc [--dry-run] | steps |\n"
	      "               show STEP | pin STEP | unpin STEP | drop STEP | rollback STEP |\n"
	      "               export [--force] STEP DIR | claims |\n"
	      "               import [--dest PATH] DIR | fsck [--rebuild] | remote [verify] |\n"
	      "               remote gc [--dry-run|--force|--force-no-lease]\n"
	      "run 'ckptctl --help' for details\n",
	      stderr);
	return EXIT_ERROR;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "force", no_argument, NULL, 'f' },
		{ "dest", required_argument, NULL, 'd' },
		{ "rebuild", no_argument, NULL, 'r' },
		{ "repair", no_argument, NULL, 'R' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "force-no-lease", no_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct ctl_opts o = { 0 };
	char ferr[512];
	int c, nargs;

	if (ckpt_fault_init(ferr, sizeof(ferr)) < 0) {
		fprintf(stderr, "ckptctl: %s\n", ferr);
		return EXIT_ERROR;
	}
	opterr = 0;
	while ((c = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			o.json = true;
			break;
		case 'f':
			o.force = true;
			break;
		case 'd':
			o.dest = optarg;
			break;
		case 'r':
			o.rebuild = true;
			break;
		case 'R':
			o.repair = true;
			break;
		case 'n':
			o.dry_run = true;
			break;
		case 'L':
			o.force_no_lease = true;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		case 'V':
			printf("ckptctl %s\n", CKPTFS_VERSION);
			return EXIT_OK;
		default:
			if (optopt == 'd')
				return ctl_usage("'--dest' needs a PATH");
			if (optopt)
				return ctl_usage("unknown option '-%c'", optopt);
			return ctl_usage("unknown option '%s'", argv[optind - 1]);
		}
	}
	nargs = argc - optind;
	if (nargs < 1)
		return ctl_usage("missing STORE");
	if (nargs < 2)
		return ctl_usage("missing COMMAND");
	o.root = argv[optind];
	/* the mount point names its store: 'ckptctl output/checkpoint status' works as well */
	static char store_of_mount[PATH_CAP];

	if (ctl_store_of_mount(o.root, store_of_mount, sizeof(store_of_mount)))
		o.root = store_of_mount;
	o.cmd = argv[optind + 1];
	o.argc = nargs - 2;
	o.argv = argv + optind + 2;

	if (o.dest && strcmp(o.cmd, "import"))
		return ctl_usage("'--dest' is an option of 'import' only");
	if (o.rebuild && strcmp(o.cmd, "fsck"))
		return ctl_usage("'--rebuild' is an option of 'fsck' only");
	if (o.repair && (strcmp(o.cmd, "remote") || o.argc != 1 || strcmp(o.argv[0], "verify")))
		return ctl_usage("'--repair' is an option of 'remote verify' only");
	if (o.dry_run && strcmp(o.cmd, "gc") &&
	    (strcmp(o.cmd, "remote") || o.argc != 1 || strcmp(o.argv[0], "gc")))
		return ctl_usage("'--dry-run' is an option of 'gc' and 'remote gc' only");
	if (o.force_no_lease && (strcmp(o.cmd, "remote") || o.argc != 1 || strcmp(o.argv[0], "gc")))
		return ctl_usage("'--force-no-lease' is an option of 'remote gc' only");
	if (o.dry_run && o.force_no_lease)
		return ctl_usage("'--dry-run' takes no lease already: drop '--force-no-lease'");
	for (size_t i = 0; i < NCOMMANDS; i++) {
		const struct ctl_cmd *cmd = &commands[i];

		if (strcmp(o.cmd, cmd->name))
			continue;
		if (o.argc < cmd->min_args || o.argc > cmd->max_args)
			return ctl_usage("'%s' takes %s", cmd->name, cmd->args);
		return cmd->fn(&o);
	}
	return ctl_usage("unknown command '%s'", o.cmd);
}
