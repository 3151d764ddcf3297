/*
 * ctl.h — what the commands of ckptctl share: the parsed options, the command signature, the
 * helpers of common.c (opening a store, error lines, formatting, reading a file's extents) and
 * the output module out.c (JSON through jansson, the progress line).
 *
 * Conventions of every command (main.c lists them in its command table):
 *   1. A command is int cmd_NAME(const struct ctl_opts *o) and returns the exit status
 *      (EXIT_OK, EXIT_DAMAGE, EXIT_ERROR), never -errno.
 *   2. Standard output carries the result only (aligned text, or one JSON document when
 *      o->json); progress and errors go to standard error, errors as one line
 *      "ckptctl: what happened; what to do" (ctl_err).
 *   3. A command checks its own operands (o->argc, o->argv) and reports a wrong count with
 *      ctl_usage.
 *
 * Thread-safety: everything here is for the main thread, except ctl_stream, which is
 * reentrant for distinct hs/buf.
 */
#ifndef CKPTCTL_CTL_H
#define CKPTCTL_CTL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <jansson.h>

#include "fs/ckptfs.h"
#include "fs/policy/policy.h"

#define EXIT_OK 0
#define EXIT_DAMAGE 1
#define EXIT_ERROR 2

/* Longest path ckptctl prints for an inode; longer ones are truncated by idx_path. */
#define PATH_CAP 4096

/* The command line, parsed once by main and read-only afterwards. */
struct ctl_opts {
	const char *root;  /* STORE: the store directory */
	const char *cmd;   /* COMMAND as typed ("pin" and "unpin" share one function) */
	int argc;          /* operands after COMMAND */
	char **argv;       /* argv[0..argc): borrowed from main's argv */
	bool json;         /* --json: one JSON document on stdout */
	bool force;        /* --force (export, remote gc) */
	const char *dest;  /* --dest PATH (import only), NULL when not given */
	bool rebuild;      /* --rebuild (fsck only): restore or start an absent index */
	bool repair;       /* --repair (remote verify only): replace bad remote chunks from here */
	bool dry_run;      /* --dry-run (gc, remote gc): say what would go, remove nothing */
	bool force_no_lease; /* --force-no-lease (remote gc only): no gc/lease, nodes stopped */
	const char **include; /* --include PATTERN (export only), in the order given: owned by
			       * main, the strings borrowed from argv; NULL when none */
	size_t ninclude;
};

/* ---- the command table (main.c) and the help made from it (help.c) ---- */

/*
 * One command. The table of main.c is the only list of commands: dispatch, the global --help,
 * each command's --help, the short usage of an error, the suggestion for a typo and the bash
 * completion (which reads --help) all come from it.
 */
struct ctl_cmd {
	const char *name;
	int (*fn)(const struct ctl_opts *o); /* NULL for help, which main runs itself */
	int min_args, max_args;              /* operands after the command */
	const char *args;                    /* the operand count in words, for the error */
	const char *operands;                /* as the usage shows them ("STEP DIR"), or NULL */
	const char *subs;                    /* subcommands, space-separated ("verify gc"), or NULL */
	const char *help;                    /* what it does: one paragraph, wrapped when printed */
	bool no_store;                       /* takes no STORE (help) */
};

/* One option a command takes besides --json, --help and --version. */
struct ctl_option {
	const char *name; /* long name without the dashes */
	int val;          /* getopt_long's value */
	const char *arg;  /* its operand as the usage shows it, NULL for a flag */
	bool repeat;      /* may be given more than once */
};

/*
 * What one option does for one command ("remote gc" for a subcommand): an option several
 * commands take has a row for each, since --force means something else to each. These rows are
 * the only record of which command takes which option: main refuses an option given to a
 * command without a row, and the usage lines and help texts list the rows.
 */
struct ctl_optdoc {
	int val;          /* the struct ctl_option's val */
	const char *cmd;  /* "export", "remote gc" */
	const char *help; /* one paragraph */
};

/* The tables of main.c, and their lengths; read-only, valid for the life of the process. */
extern const struct ctl_cmd ctl_commands[];
extern const size_t ctl_ncommands;
extern const struct ctl_option ctl_options[];
extern const size_t ctl_noptions;
extern const struct ctl_optdoc ctl_optdocs[];
extern const size_t ctl_noptdocs;

/*
 * ctl_command - the table's entry named name, or NULL when there is none. The returned pointer
 * is into the static table. Reentrant.
 */
const struct ctl_cmd *ctl_command(const char *name);

/*
 * ctl_help_global - the full help on f: usage, every command with what it does, every option
 * with what it does for each command that takes it, the exit status. Main thread only.
 */
void ctl_help_global(FILE *f);

/*
 * ctl_help_command - the help of command c on f: its usage lines (one per subcommand), what it
 * does, and its own options and the global ones. Main thread only.
 */
void ctl_help_command(FILE *f, const struct ctl_cmd *c);

/*
 * ctl_usage_command - remember the command being run (NULL: none), so that ctl_usage prints its
 * usage alone instead of every command's. c is borrowed from the table. Main thread only.
 */
void ctl_usage_command(const struct ctl_cmd *c);

/*
 * ctl_edit_distance - the optimal string alignment distance of a and b (Levenshtein's, plus the
 * transposition of two adjacent characters as one edit: "stauts" is 1 from "status"), in bytes.
 * Strings longer than 64 bytes are compared on their first 64 (commands and options are
 * shorter). Returns the distance, 0..64. Reentrant.
 */
int ctl_edit_distance(const char *a, const char *b);

/*
 * ctl_suggest - among the n strings cands[i*stride] (stride in bytes: the field of a table's
 * rows), the one closest to typed by ctl_edit_distance, when close enough to be the likely
 * intent: at most 1 edit for up to 4 bytes typed (more would match most short names), 2 for
 * longer, the earliest on a tie. Returns a pointer into cands' strings, or NULL. Reentrant.
 */
const char *ctl_suggest(const char *typed, const void *cands, size_t n, size_t stride);

/* ---- commands (one file each; main.c dispatches through its table) ---- */

/*
 * cmd_status, cmd_ls, ... - run one command on o->root with o's options and operands.
 * Returns the exit status: EXIT_OK, EXIT_DAMAGE (verify, fsck, export, import: see main.c's
 * usage text) or EXIT_ERROR (an error, reported on stderr, or bad usage).
 */
int cmd_status(const struct ctl_opts *o);
int cmd_ls(const struct ctl_opts *o);
int cmd_verify(const struct ctl_opts *o);
int cmd_gc(const struct ctl_opts *o);
int cmd_fsck(const struct ctl_opts *o);
int cmd_steps(const struct ctl_opts *o);
int cmd_show(const struct ctl_opts *o);
int cmd_pin(const struct ctl_opts *o);
int cmd_export(const struct ctl_opts *o);
int cmd_claims(const struct ctl_opts *o);
int cmd_import(const struct ctl_opts *o);
int cmd_remote(const struct ctl_opts *o);
int cmd_drop(const struct ctl_opts *o);
int cmd_rollback(const struct ctl_opts *o);
int cmd_diff(const struct ctl_opts *o);

/*
 * ctl_daemon_request - ask the daemon of mounted store root to run "verb arg" (pin, unpin, drop,
 * rollback; fs/fuse/control.c) and print its answer (one line, or a JSON object with request,
 * step and message when json). Returns EXIT_OK, or EXIT_ERROR (the daemon refused, or cannot be
 * reached: reported on stderr).
 */
int ctl_daemon_request(const char *root, const char *verb, const char *arg, bool json);

/*
 * ctl_usage - print "ckptctl: <message>", the short usage (of the command being run, once main
 * has named it with ctl_usage_command, else of every command) and a pointer to the help on
 * stderr. Defined in help.c. Main thread only.
 * Returns EXIT_ERROR, for "return ctl_usage(...)".
 */
int ctl_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * ctl_verify - verify's work without its operand check: re-read every chunk of the store at
 * root and re-hash every file, marking or clearing bad chunks when the store can be written.
 * @what: the command named on the progress line ("verify", "fsck"); borrowed for the call.
 * @json: print the report as one JSON document instead of text.
 * Returns EXIT_OK (no damage), EXIT_DAMAGE or EXIT_ERROR (reported on stderr).
 */
int ctl_verify(const char *root, const char *what, bool json);

/*
 * ctl_store_of_mount - when path is the mount point of a ckptfs mount (fstype fuse.ckptfs in
 * /proc/self/mountinfo), its store: the mount's source, which the daemon sets to the store's
 * absolute path. Writes it into buf (cap bytes). Returns 1 (found), 0 (not a ckptfs mount point,
 * or unreadable). Main thread only (getline buffer, strtok_r on a copy).
 */
int ctl_store_of_mount(const char *path, char *buf, size_t cap);

/* ---- common.c: messages ---- */

/*
 * ctl_err - print "ckptctl: <message>" and a newline on stderr, after erasing the progress line
 * if one is up (ctl_progress_hide).
 */
void ctl_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/*
 * ctl_rank_step_rows - give every step of a per-rank layout (MindFormers 1.0) whose files the
 * tree holds (policy_rank_steps) a step row if it has none, unsealed, with no directory, made
 * at created_ns (ns since the epoch): the daemon judges it at the next mount from its ranks'
 * files and their meta.json claims, which count for it only when made at or after created_ns.
 * In the open transaction of ix. Returns the number of rows made (>= 0), -ENOMEM, or -errno of
 * the index.
 */
int ctl_rank_step_rows(struct idx *ix, int64_t created_ns);

/*
 * ctl_top_step_rows - give every whole step file at the root of a layout with no step directory
 * (Lightning, policy_top_steps) that has no complete row of its name a complete row, named by
 * the file, dated created_ns, with its figures (1 file, its size and stored bytes), as the daemon
 * records it when the file is closed whole. In the caller's transaction. Returns the number of
 * rows made (>= 0) or the index's -errno.
 */
int ctl_top_step_rows(struct idx *ix, int64_t created_ns);

/* ctl_verr - ctl_err with its arguments as a va_list (ctl_usage's message). */
void ctl_verr(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/*
 * ctl_index_err - report a failure of the index of store root on stderr, with what to do next
 * (fsck for -EIO, which means a damaged index file; status otherwise).
 * @what: the action that failed, worded to follow "cannot" ("list the steps").
 * @rc: the -errno of the index.
 * Returns EXIT_ERROR.
 */
int ctl_index_err(const char *root, const char *what, int rc);

/* ---- common.c: memory ---- */

/* ---- common.c: formatting (each returns its buf, or a borrowed static string) ---- */


/* ctl_short_size - "1.2 GiB" or "512 B" into buf (cap bytes), for progress lines. Returns buf. */
char *ctl_short_size(uint64_t bytes, char *buf, size_t cap);

/* ctl_hex - the 32 lowercase hex digits of a 16-byte digest into out. Returns out. */
char *ctl_hex(const uint8_t h[IDX_HASH_LEN], char out[2 * STORE_HASH_LEN + 1]);

/* ctl_codec - printable name of an enum store_codec value; borrowed static string. */
const char *ctl_codec(uint8_t codec);

/* ctl_chunk_err - how a chunk failed verification, as printed; borrowed static string. */
const char *ctl_chunk_err(int err);

/* ctl_mode - "drwxr-xr-x"-style type and permission string (11 bytes with NUL). Returns buf. */
char *ctl_mode(uint32_t mode, char buf[11]);

/* ctl_type - JSON name of an inode's type ("file", "dir", ...); borrowed static string. */
const char *ctl_type(uint32_t mode);

/* CTL_QUOTE_CAP(n) - the bytes that hold the ctl_escape of any n bytes ("\xHH" each) and a NUL */
#define CTL_QUOTE_CAP(n) (4 * (size_t)(n) + 1)

/*
 * ctl_escape - len bytes of p as text output prints them, into buf (cap bytes, NUL-ended): the
 * one escaping of ckptctl for names (files, steps, symlink targets) and tracker contents. A
 * name may hold any byte but '/' and NUL; a newline or an escape sequence printed raw would fake
 * lines or drive the terminal. As GNU ls -b and git's quoted paths do: backslash as "\\";
 * \a \b \t \n \v \f \r by their letter; any other byte below 0x20, DEL, a byte that starts no
 * well-formed UTF-8 sequence (RFC 3629), and the UTF-8 of a C1 control (U+0080-U+009F, which
 * some terminals obey) as "\xHH" per byte; printable ASCII and other well-formed UTF-8 as they
 * are. JSON output escapes names with jansson, exactly, not with this.
 * Stops when the next piece would not fit in cap-1 bytes (an escape is never cut; cap of
 * CTL_QUOTE_CAP(len) always fits). cap > 0. Returns the number of input bytes consumed.
 * Reentrant.
 */
size_t ctl_escape(const uint8_t *p, size_t len, char *buf, size_t cap);

/* ctl_quote - ctl_escape of the NUL-terminated string s into buf (cap bytes). Returns buf. */
char *ctl_quote(const char *s, char *buf, size_t cap);

/* ctl_numw - the number of decimal digits of v, for column widths. */
int ctl_numw(uint64_t v);

/* ---- common.c: the store ---- */

/*
 * ctl_path - the path of ino from the root, or "<inode N, unlinked>" when no dentry chain
 * reaches the root, into buf (cap bytes). Returns 0 or the -errno of the index.
 */
int ctl_path(struct idx *ix, uint64_t ino, char *buf, size_t cap);

/*
 * ctl_open_read - open root for reading (never writes it; read-only while mounted or not).
 * @ret: the open store, owned by the caller (ckpt_repo_close); untouched on failure.
 * Prints the reason on stderr on failure. Returns 0 or the -errno of ckpt_repo_open.
 */
int ctl_open_read(const char *root, struct ckpt_repo **ret);

/*
 * ctl_open_write_flags - open root holding its lock exclusively when no daemon owns it, else
 * read-only (ret->mounted set). @sopts may be NULL. @flags: 0 or REPO_SALVAGE (exclusive open
 * only: an index that cannot be opened leaves ret->ix NULL and ret->index_err set).
 * @ret: the open store, owned by the caller (ckpt_repo_close).
 * @ret_writable: true when the store was opened exclusively and writable.
 * Prints the reason on stderr on failure. Returns 0 or the -errno of ckpt_repo_open.
 */
int ctl_open_write_flags(const char *root, const struct store_opts *sopts, int flags,
			 struct ckpt_repo **ret, bool *ret_writable);

/* ctl_open_write - ctl_open_write_flags with flags 0. */
int ctl_open_write(const char *root, const struct store_opts *sopts, struct ckpt_repo **ret,
		   bool *ret_writable);

/*
 * ctl_fsync_path - open path read-only (a file or a directory) and fsync it.
 * Returns 0 or -errno of open(2) or fsync(2).
 */
int ctl_fsync_path(const char *path);

/*
 * Takes each piece a ctl_stream() read (buf NULL: a hole of len bytes, index invariant 4):
 * returns 0, or -errno with reason (cap bytes) filled.
 */
typedef int (*ctl_sink)(const void *buf, size_t len, void *arg, char *reason, size_t cap);

/*
 * ctl_stream - read the extents ext[0..n) of a file of size bytes in order through the
 * store (every chunk re-hashed by store_chunk_pread), in pieces of at most STORE_CHUNK_MAX bytes
 * into buf, feeding each piece to sink and to hs (reset first); a sparse file's holes go to sink
 * as (NULL, length) and to hs as store_hasher_hole records (store.h: the digest of a sparse
 * file).
 * @what: appended to the reason of a chunk that cannot be read ("" or " while reading").
 * @reason: cap bytes, filled when 1 or a sink error is returned.
 * Returns 0 (all read; *ret_digest is the whole-file digest), 1 (damaged: extents that do not
 * tile [0, size) (a gap allowed only when sparse), or a chunk missing, short or failing its
 * checksum; reason says which), -ENOMEM, or the -errno of sink. Not thread-safe for one hs/buf.
 */
int ctl_stream(struct store *st, const struct idx_extent *ext, size_t n, uint64_t size,
	       bool sparse, uint8_t *buf, struct store_hasher *hs, ctl_sink sink, void *arg,
	       const char *what, char *reason, size_t cap, struct store_hash *ret_digest);

/* ---- out.c: JSON ---- */

/*
 * ctl_print - write a --json document to stdout: obj's members (indented) after a first member
 * "schema": schema, and a newline; then drop the reference to obj.
 *
 * @schema: the document's schema and version, "ckptfs-NAME/N" (docs/schemas/NAME.json
 *          describes it; N grows when a member changes meaning or goes away).
 * @obj:    a JSON object (new reference, taken; NULL stands for a failed constructor). A
 *          command whose answer is a list puts it under a member named for what it lists.
 * Returns 0, -ENOMEM when obj is NULL or not an object or out of memory, or -EIO when writing
 * failed. Not thread-safe (stdout).
 */
int ctl_print(const char *schema, json_t *obj);

/* ctl_u64 - a JSON integer of an unsigned count (counts never reach 2^63); new reference. */
json_t *ctl_u64(uint64_t v);

/*
 * ctl_store_json - a new JSON object with the fields every report about a store starts with:
 * "store" (root), "mounted" and "owner_pid" (null when not mounted), from r (borrowed). New
 * reference, or NULL when out of memory.
 */
json_t *ctl_store_json(const char *root, const struct ckpt_repo *r);


/* ---- out.c: the progress line ---- */

/*
 * One "\r"-updated status line on stderr, printed only when stderr is a terminal and at most
 * ten times a second. A command's long loops print the standard line with ctl_progress_work:
 *	ctl_progress_init(&p);                 (start of a phase: the clock of the rate)
 *	for (i = 0; i < n; i++) {
 *		ctl_progress_work(&p, i == 0, "verify", "files", i, n, bytes, total_bytes);
 *		...
 *	}
 *	ctl_progress_work(&p, true, "verify", "files", n, n, bytes, total_bytes);
 *	ctl_progress_clear(&p);               (before printing the result)
 * A work whose amounts cannot be known (a call into another module) may show a plain status
 * with ctl_progress_due and ctl_progress_line instead. ctl_err erases the line before it
 * prints; anything else written to stderr, or to stdout on the same terminal, needs
 * ctl_progress_clear first.
 */
struct ctl_progress {
	bool tty;              /* stderr is a terminal */
	struct timespec start; /* CLOCK_MONOTONIC time of the latest ctl_progress_init */
	struct timespec last;  /* CLOCK_MONOTONIC time of the last line printed */
};

/*
 * ctl_progress_init - set p up for the current stderr and start its clock; nothing printed.
 * Call it again at the start of each phase whose counts start again from zero: the rate and
 * the time left of ctl_progress_work are measured from the latest call. Main thread only.
 */
void ctl_progress_init(struct ctl_progress *p);

/*
 * ctl_progress_due - whether a line should be printed now: stderr is a terminal and either
 * @force or at least 100 ms passed since the last line. When true, records now as the time of
 * the last line. Main thread only.
 */
bool ctl_progress_due(struct ctl_progress *p, bool force);

/*
 * ctl_progress_line - print "\r", the formatted line and an erase-to-end-of-line on stderr,
 * when stderr is a terminal. Main thread only.
 */
void ctl_progress_line(const struct ctl_progress *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * ctl_progress_work - the standard progress line of a long loop, when ctl_progress_due(p,
 * force) says one is due:
 *	"verify: 12/40 files, 1.2 GiB/3.4 GiB, 250.3 MiB/s, 0:09 left"
 * @what: the command ("verify", "fsck"), printed first.
 * @noun: what @done and @total count, plural ("files", "chunks", "chunk files scanned").
 * @done, @total: items finished and to do in this phase.
 * @bytes_done, @bytes_total: bytes finished and to do in this phase.
 * A total below its done count (an estimate proved short) is shown as the done count. The rate
 * is bytes_done over the time since ctl_progress_init, in binary units per second; the time
 * left is the bytes still to do at that rate (the items, when bytes_total is 0), as M:SS, or
 * H:MM:SS from an hour on; both are "--" until something is done, the time left "0:00" once
 * everything is. @force: print even if the last line is less than 100 ms old (the first and
 * the last line of a phase, so that a terminal always sees one).
 * Prints nothing when stderr is not a terminal. No errors (a failed write to stderr is
 * ignored). what and noun are borrowed for the call. Main thread only.
 */
void ctl_progress_work(struct ctl_progress *p, bool force, const char *what, const char *noun,
		       uint64_t done, uint64_t total, uint64_t bytes_done, uint64_t bytes_total);

/*
 * ctl_progress_hide - erase the progress line if one is up (whichever struct ctl_progress
 * printed it); a no-op otherwise. ctl_err calls it before printing. Main thread only.
 */
void ctl_progress_hide(void);

/* ctl_progress_clear - erase p's progress line, if one is up. Main thread only. */
void ctl_progress_clear(const struct ctl_progress *p);

/* ---- gc.c, shared with fsck ---- */

/* Chunk files on disk: all of them, or (with ix set) those the index does not know. */
struct gc_count {
	struct idx *ix;        /* NULL: count every chunk file */
	const char *set_aside; /* a directory: move each chunk file counted there (fsck), or NULL */
	uint64_t files, bytes; /* chunk files counted and their stored bytes */
	uint64_t seen, seen_bytes; /* chunk files walked and their bytes, counted or not */
	uint64_t expect, expect_bytes; /* the index's chunk rows: the walk's estimated size */
	struct ctl_progress *prog;     /* the progress line of the walk */
	const char *what, *noun;       /* its command and noun (ctl_progress_work) */
	struct store *st;              /* set by ctl_gc_scan: the store walked */
};

/*
 * ctl_gc_scan - walk every chunk file of r's store once (store_chunk_foreach), counting into
 * g->files and g->bytes every one, or only those r->ix does not know when g->ix is set (each
 * moved into g->set_aside when set: store_chunk_set_aside), with
 * the standard progress line on prog: "WHAT: DONE/TOTAL NOUN, ...", TOTAL being the index's
 * chunk rows (files the index does not know come on top), and a last line with the true
 * totals. g's other fields are set here; g->ix is the caller's. prog is started again
 * (ctl_progress_init) and its line left up. what and noun are borrowed for the call.
 * Returns 0, or the -errno of store_chunk_foreach (a failed readdir) or of the index.
 */
int ctl_gc_scan(struct ckpt_repo *r, struct gc_count *g, struct ctl_progress *prog,
		const char *what, const char *noun);

/* ---- steps.c: finding steps, shared with show, pin and export ---- */

/* ctl_kind - layout name of a step's kind, "?" when out of range; borrowed static string. */
const char *ctl_kind(int kind);

/* Steps collected by idx_step_foreach, in its order (step number, then id). */
struct step_list {
	struct idx_step *v;
	size_t n, cap;
};

/* Steps that a STEP argument names. */
struct step_match {
	const char *arg;
	bool numeric;   /* arg is a step number */
	int64_t number; /* numeric: the number */
	char qname[IDX_STEP_NAME_MAX + 1]; /* "NAME.ID" form: NAME, else "" */
	int64_t qid;    /* "NAME.ID" form: ID, else 0 */
	struct step_list found;
};

/*
 * ctl_find_steps - the steps that arg names: a step number ("100"), a step directory name
 * ("iter_0000100"), or a quarantined directory's name ("iter_0000200.2", NAME.ID). Newest id
 * first, into m->found (owned by m; free m->found.v). Prints nothing.
 * Returns the number of steps found (>= 0), -ENOMEM, or -errno of the index.
 */
int ctl_find_steps(struct idx *ix, const char *arg, struct step_match *m);

/*
 * ctl_pick_step - among m->found (newest first), the step an action means: the newest complete
 * one, else the newest that is not pruned, else the newest. NULL when none was found.
 * Returns a pointer into m->found, borrowed while m is.
 */
const struct idx_step *ctl_pick_step(const struct step_match *m);

/* ctl_no_step - report an unknown STEP arg of store root on stderr; returns EXIT_ERROR. */
int ctl_no_step(const char *root, const char *arg);

/* One entry under a step directory. */
struct tree_ent {
	char *rel;      /* owned: path relative to the step directory, "mp_rank_00/model.pt" */
	uint64_t ino;
	uint32_t mode;  /* type bits from the dentry listing */
};

struct tree {
	struct tree_ent *v;
	size_t n, cap;
	const char *prefix; /* while listing one directory: its rel, "" for the step dir */
};

/* ctl_tree_free - free t's entries and array (not t itself); t may be empty. */
void ctl_tree_free(struct tree *t);

/*
 * ctl_tree_collect - every entry under directory dir into t (owned by the caller: ctl_tree_free),
 * breadth first (listings are never nested: a listing's statement is shared per handle), then
 * sorted by relative path, so a directory comes before what it holds. A directory removed
 * meanwhile (mounted) is skipped.
 * Returns 0, -ENOMEM, or -errno of the index (the tree is then freed).
 */
int ctl_tree_collect(struct idx *ix, uint64_t dir, struct tree *t);

/* ctl_flags - "torn,malformed", "valid" or "-" for IDX_INODE_* bits into buf. Returns buf. */
char *ctl_flags(uint32_t flags, char *buf, size_t cap);

#endif /* CKPTCTL_CTL_H */
