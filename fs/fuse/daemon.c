/*
 * daemon.c — ckptfs startup and shutdown: options, the background process, the mount, the
 * session loop, and a clean stop that leaves everything durable.
 *
 * Startup when not in the foreground: the parent forks at once, before any thread, SQLite
 * connection or FUSE session exists, and waits on a pipe; the child opens the store, recovers,
 * mounts, and writes "ok" or one error line to the pipe. So `ckptfs STORE MNT` returns only once
 * the mount is ready, and any failure is printed by the command the user ran, with exit status 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fuse_lowlevel.h>

#include "ckptfs_config.h"
#include "fs/fuse/fuse_int.h"
#include "fs/fuse/ops_int.h"
#include "fs/policy/layout.h"

struct cfg {
	char *store;
	char *mnt;
	int zstd_level;
	unsigned cache_mb;
	int verify_dedup;
	int allow_foreign_store; /* -o allow_foreign_store: REPO_FOREIGN */
	unsigned keep_max;
	long long keep_every;
	unsigned keep_quarantine;
	char *layout;
	unsigned ranks;
	char *write_buffer;
	char *defer_compress;
	unsigned workers;
	unsigned readahead_mb; /* UINT_MAX: not given */
	char *remote;    /* -o remote=URL (the node layer) */
	char *node_name; /* -o node=NAME */
	unsigned nodes;  /* -o nodes=N */
	char *remote_gc; /* -o remote_gc=on|off */
	char *metrics;   /* -o metrics=ADDR:PORT (metrics_http.c) */
	int nonempty;    /* -o nonempty: mount over a directory that holds files */
};

#define CK_OPT(t, p) { t, offsetof(struct cfg, p), 1 }
/*
 * The numeric options, parsed strictly by num_opt (fuse_opt's "%u" takes "-1" as 4294967295
 * and "3abc" as 3): a whole decimal number in [min, max], nothing after it. type: sizeof the
 * field, int (signed) or unsigned, or long long.
 */
enum num_type { NUM_INT, NUM_UINT, NUM_LLONG };
static const struct num_opt {
	const char *name; /* with its '=' */
	size_t off;
	enum num_type type;
	long long min, max;
	const char *what; /* what the number is, for the error */
} num_opts[] = {
	{ "zstd_level=", offsetof(struct cfg, zstd_level), NUM_INT, 1, 19, "the zstd level" },
	{ "cache_mb=", offsetof(struct cfg, cache_mb), NUM_UINT, 1, 1 << 20,
	  "MiB of decompressed-chunk cache" },
	{ "keep_checkpoint_max=", offsetof(struct cfg, keep_max), NUM_UINT, 0, 1000000,
	  "complete steps kept, 0 for all" },
	{ "keep_every=", offsetof(struct cfg, keep_every), NUM_LLONG, 0, INT64_MAX / 2,
	  "a step interval, 0 for none" },
	{ "keep_quarantine=", offsetof(struct cfg, keep_quarantine), NUM_UINT, 0, 1000000,
	  "quarantined steps kept, 0 for all" },
	{ "ranks=", offsetof(struct cfg, ranks), NUM_UINT, 1, 1 << 20, "the world size" },
	{ "workers=", offsetof(struct cfg, workers), NUM_UINT, 0, WB_MAX_THREADS,
	  "write-back threads, 0 for the default" },
	{ "readahead_mb=", offsetof(struct cfg, readahead_mb), NUM_UINT, 0, RA_MAX_MB,
	  "MiB read ahead" },
	{ "nodes=", offsetof(struct cfg, nodes), NUM_UINT, 1, 1 << 16, "nodes in the job" },
};
#define NUM_OPTS (sizeof(num_opts) / sizeof(num_opts[0]))
/*
 * Steps set aside kept by default: enough to look at the last few torn or corrupt saves, not
 * so many that a long job's torn saves (each as large as a checkpoint) fill the disk.
 */
#define KEEP_QUARANTINE_DEFAULT 4
#define KEY_NUM 0x4e554d /* fuse_opt key of every num_opts entry: opt_proc parses it */

static const struct fuse_opt ck_opts[] = {
	FUSE_OPT_KEY("zstd_level=", KEY_NUM),
	FUSE_OPT_KEY("cache_mb=", KEY_NUM),
	CK_OPT("verify_dedup", verify_dedup),
	CK_OPT("allow_foreign_store", allow_foreign_store),
	FUSE_OPT_KEY("keep_checkpoint_max=", KEY_NUM),
	FUSE_OPT_KEY("keep_every=", KEY_NUM),
	FUSE_OPT_KEY("keep_quarantine=", KEY_NUM),
	{ "layout=%s", offsetof(struct cfg, layout), 0 },
	FUSE_OPT_KEY("ranks=", KEY_NUM),
	{ "write_buffer=%s", offsetof(struct cfg, write_buffer), 0 },
	{ "defer_compress=%s", offsetof(struct cfg, defer_compress), 0 },
	FUSE_OPT_KEY("workers=", KEY_NUM),
	FUSE_OPT_KEY("readahead_mb=", KEY_NUM),
	{ "remote=%s", offsetof(struct cfg, remote), 0 },
	{ "node=%s", offsetof(struct cfg, node_name), 0 },
	FUSE_OPT_KEY("nodes=", KEY_NUM),
	{ "remote_gc=%s", offsetof(struct cfg, remote_gc), 0 },
	{ "metrics=%s", offsetof(struct cfg, metrics), 0 },
	CK_OPT("nonempty", nonempty),
	FUSE_OPT_END
};

/*
 * num_opt - parse "NAME=VALUE" (arg) of a num_opts entry into its field of c. Returns 0, or -1
 * after saying which option is wrong and what it takes.
 */
static int num_opt(struct cfg *c, const char *arg)
{
	for (size_t i = 0; i < NUM_OPTS; i++) {
		const struct num_opt *o = &num_opts[i];
		size_t n = strlen(o->name);
		char *end;
		long long v;

		if (strncmp(arg, o->name, n))
			continue;
		errno = 0;
		v = strtoll(arg + n, &end, 10);
		if (!arg[n] || *end || errno || v < o->min || v > o->max ||
		    !(arg[n] >= '0' && arg[n] <= '9')) {
			ckpt_log("-o %s: must be a whole number from %lld to %lld (%s)\n", arg,
				 o->min, o->max, o->what);
			return -1;
		}
		void *f = (char *)c + o->off;

		if (o->type == NUM_INT)
			*(int *)f = (int)v;
		else if (o->type == NUM_UINT)
			*(unsigned *)f = (unsigned)v;
		else
			*(long long *)f = v;
		return 0;
	}
	return -1; /* not reached: every KEY_NUM template is in num_opts */
}

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct cfg *c = data;

	/* STORE and MOUNTPOINT are taken here, so libfuse never parses the mountpoint itself */
	if (key == FUSE_OPT_KEY_NONOPT && (!c->store || !c->mnt)) {
		char **slot = !c->store ? &c->store : &c->mnt;

		*slot = strdup(arg);
		return *slot ? 0 : -1;
	}
	if (key == KEY_NUM)
		return num_opt(c, arg) < 0 ? -1 : 0;
	if (key == FUSE_OPT_KEY_NONOPT) {
		ckpt_log("unexpected argument '%s' (usage: ckptfs [options] STORE "
			"MOUNTPOINT)\n", arg);
		return -1;
	}
	return 1;
}

/* What libfuse logged while check_fuse_options ran (its "unknown option(s)" line). */
static char opt_log[512];

static void opt_log_func(enum fuse_log_level level, const char *fmt, va_list ap)
{
	size_t len = strlen(opt_log);

	if (len < sizeof(opt_log) - 1)
		vsnprintf(opt_log + len, sizeof(opt_log) - len, fmt, ap);
}

/*
 * Reject, before forking, the -o options neither ckptfs (ck_opts, already consumed from args)
 * nor libfuse knows, with libfuse's own message naming them, so a typo in an fstab line or a
 * `mount -t fuse.ckptfs -o ...` fails at once and says which option. libfuse is the authority
 * on its options: a session is created from a copy of args (fuse_session_new consumes what it
 * parses) and destroyed unmounted. Returns 0, or -1 after printing the error.
 */
static int check_fuse_options(const struct fuse_args *args)
{
	struct fuse_args copy = FUSE_ARGS_INIT(0, NULL);
	struct fuse_session *se = NULL;
	int ret = -1;

	for (int i = 0; i < args->argc; i++)
		if (fuse_opt_add_arg(&copy, args->argv[i]) != 0)
			goto out;
	opt_log[0] = 0;
	fuse_set_log_func(opt_log_func);
	se = fuse_session_new(&copy, &fs_ops, sizeof(fs_ops), NULL);
	fuse_set_log_func(NULL);
	if (se) {
		fuse_session_destroy(se);
		ret = 0;
	} else {
		char *nl;

		while ((nl = strrchr(opt_log, '\n')) && nl[1] == 0)
			*nl = 0;
		ckpt_log("invalid mount options: %s (ckptfs's own options: ckptfs --help; "
			 "FUSE's: mount.fuse3(8))\n", opt_log[0] ? opt_log : "rejected by libfuse");
	}
out:
	fuse_opt_free_args(&copy);
	return ret;
}

static void usage(const char *prog)
{
	printf("usage: %s [options] STORE MOUNTPOINT\n\n"
	       "Mount the ckptfs store STORE (a directory, created on first use) at MOUNTPOINT.\n"
	       "Unmount with: fusermount3 -u MOUNTPOINT\n\n"
	       "ckptfs options:\n"
	       "    -o zstd_level=N        zstd level for new chunks (default 1)\n"
	       "    -o cache_mb=N          decompressed-chunk cache in MiB (default 64)\n"
	       "    -o verify_dedup        compare bytes when a chunk is already stored\n"
	       "    -o allow_foreign_store mount a STORE owned by another user (who is then\n"
	       "                           trusted: the store's files are theirs to swap)\n"
	       "    -o keep_checkpoint_max=N  keep the N newest complete steps (0: all, default)\n"
	       "    -o keep_every=K        also keep every step divisible by K\n"
	       "    -o keep_quarantine=N   keep the N steps quarantined last in\n"
	       "                           .ckptfs/quarantine (default 4; 0: all)\n"
	       "    -o ranks=N             MindFormers 1.0 world size (default: the number of\n"
	       "                           rank_N directories)\n"
	       "    -o layout=NAME         only this layout: mf2 megatron mf1 deepspeed hf dcp\n"
	       "                           internevo orbax lightning (default: detect each\n"
	       "                           path), or\n"
	       "                           none (no checkpoint semantics: a plain filesystem)\n"
	       "    -o write_buffer=SIZE   bytes of written data being chunked and compressed\n"
	       "                           in the background (K, M, G suffixes; default RAM/8\n"
	       "                           within 64M..16G); writers wait when it is full\n"
	       "    -o defer_compress=WHEN auto (default): while the workers fall behind a\n"
	       "                           writer and the disk is faster than compressing,\n"
	       "                           store chunks raw and compress them when idle;\n"
	       "                           never; always\n"
	       "    -o workers=N           write-back worker threads, 1..16 (default, or 0:\n"
	       "                           2 per CPU, at most 16)\n"
	       "    -o readahead_mb=N      load the chunks up to N MiB ahead of a sequential\n"
	       "                           reader into the cache (default 16; 0: none)\n"
	       "    -o remote=URL          one node of a job on many nodes: publish each\n"
	       "                           complete step to URL (s3://BUCKET/PREFIX, endpoint\n"
	       "                           and keys from AWS_* or ~/.aws; or a shared\n"
	       "                           directory such as CephFS) and resolve trackers to\n"
	       "                           steps complete on every node\n"
	       "    -o node=NAME           this node's name in the job (default: hostname)\n"
	       "    -o nodes=N             the number of nodes in the job (with remote)\n"
	       "    -o remote_gc=on|off    on (default): with keep_checkpoint_max, the nodes\n"
	       "                           remove the remote's pruned steps themselves, one\n"
	       "                           at a time under the remote's gc lease; off: only\n"
	       "                           'ckptctl STORE remote gc' does\n"
	       "    -o metrics=ADDR:PORT   serve .ckptfs/metrics (Prometheus text format) over\n"
	       "                           HTTP at http://ADDR:PORT/metrics\n"
	       "    -o nonempty            mount even where MOUNTPOINT holds files (they are\n"
	       "                           hidden while mounted)\n\n",
	       prog);
}

/*
 * The smallest -o write_buffer: below a MiB the number was almost surely meant with a suffix
 * ("10" for 10M is 10 bytes), and the buffer could not hold one whole chunk of STORE_CHUNK_MIN.
 */
#define WBUF_MIN ((size_t)1 << 20)

/*
 * parse_size - "N", "NK", "NM" or "NG" (powers of 1024) into bytes.
 * Returns 0, or -EINVAL (empty, not a number, unknown suffix, zero, overflow).
 */
static int parse_size(const char *s, size_t *ret)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (!s || !*s || *s == '-')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: return -EINVAL;
	}
	if (*end == 'i' || *end == 'I' || *end == 'b' || *end == 'B')
		end++; /* "MiB", "MB": the same powers of 1024 */
	if (*end == 'b' || *end == 'B')
		end++;
	if (*end || v == 0 || v > (SIZE_MAX >> shift))
		return -EINVAL;
	*ret = (size_t)v << shift;
	return 0;
}

/* The startup status pipe (-1 in the foreground). */
static int status_fd = -1;

static void startup_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void startup_fail(const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (status_fd >= 0) {
		dprintf(status_fd, "%s\n", line);
		close(status_fd);
		status_fd = -1;
	} else {
		ckpt_log("%s\n", line);
	}
}

/*
 * Parent side: read the child's status lines until it closes the pipe: "note TEXT" lines (what
 * the mount found: printed as they are), then "ok" (mounted) or one error line (printed).
 * Returns the exit status.
 */
static int wait_child(pid_t pid, int fd)
{
	char line[8192];
	size_t len = 0;
	ssize_t n;
	int status;
	bool ok = false;

	while (len < sizeof(line) - 1 && (n = read(fd, line + len, sizeof(line) - 1 - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		len += (size_t)n;
	}
	line[len] = 0;
	close(fd);
	for (char *p = line, *nl; *p; p = nl) {
		nl = p + strcspn(p, "\n");
		if (*nl)
			*nl++ = '\0';
		if (strcmp(p, "ok") == 0)
			ok = true;
		else if (strncmp(p, "note ", 5) == 0)
			ckpt_log("%s", p + 5);
		else if (*p)
			ckpt_log("%s", p);
	}
	if (ok)
		return 0;
	if (!len) {
		waitpid(pid, &status, 0);
		ckpt_log("the daemon exited during startup (%s %d)\n",
			WIFSIGNALED(status) ? "signal" : "status",
			WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
	}
	return 1;
}

/* Is path a mount point already (per /proc/self/mountinfo)? */
static bool is_mounted(const char *path)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;
	bool found = false;

	if (!f)
		return false;
	while (!found && getline(&line, &cap, f) > 0) {
		char mnt[PATH_MAX];

		if (sscanf(line, "%*s %*s %*s %*s %4095s", mnt) == 1 && strcmp(mnt, path) == 0)
			found = true;
	}
	free(line);
	fclose(f);
	return found;
}

/*
 * The mount at path, from its newest line in /proc/self/mountinfo (proc(5)): its device
 * (major:minor, field 3) into dev (devcap bytes) and "MAJ:MIN MOUNTPOINT" (fields 3 and 5) into
 * id (idcap bytes). Leaves both empty when there is none.
 */
static void find_mount(const char *path, char *dev, size_t devcap, char *id, size_t idcap)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t lcap = 0;

	dev[0] = id[0] = '\0';
	if (!f)
		return;
	while (getline(&line, &lcap, f) > 0) {
		char mnt[PATH_MAX], d[32];

		if (sscanf(line, "%*s %*s %31s %*s %4095s", d, mnt) == 2 && strcmp(mnt, path) == 0) {
			snprintf(dev, devcap, "%s", d);
			snprintf(id, idcap, "%s %s", d, mnt);
		}
	}
	free(line);
	fclose(f);
}

void fs_tune_read_ahead(struct ckfs *fs)
{
	char val[16];
	int fd, n, err = 0;

	if (atomic_exchange(&fs->fuse.ra.tuned, true) || !fs->fuse.ra.bdi[0])
		return;
	n = snprintf(val, sizeof(val), "%d\n", FS_READ_AHEAD_KB);
	errno = 0;
	fd = open(fs->fuse.ra.bdi, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, val, (size_t)n) != n)
		err = errno ? errno : EIO;
	if (fd >= 0)
		close(fd);
	if (err)
		ckpt_log("kernel read-ahead left at its default (cannot write %d to "
			 "'%s': %s); sequential reads are slower. As root: echo %d > %s\n",
			 FS_READ_AHEAD_KB, fs->fuse.ra.bdi, strerror(err), FS_READ_AHEAD_KB,
			 fs->fuse.ra.bdi);
}

void fs_flush_inval(struct ckfs *fs)
{
	struct timespec until;
	struct inval *v;
	size_t n;

	/* Held from the take to the last send: a caller returns only once every name queued
	 * before its call is sent, by itself or by the thread that took it first (the reaper).
	 * Waited for at most the entry timeout: a name the kernel cached before it was queued has
	 * expired by then whoever sends it, and a request thread never waits on a send that waits
	 * on a directory lock held by a request no free thread is left to answer. */
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += (time_t)ATTR_TIMEOUT;
	if (pthread_mutex_timedlock(&fs->fuse.inval_mu, &until) != 0)
		return;
	/* nothing queued and no send in flight (the lock is ours): every opendir asks */
	if (!steps_inval_pending(fs)) {
		pthread_mutex_unlock(&fs->fuse.inval_mu);
		return;
	}
	steps_take_inval(fs, &v, &n);
	if (n)
		ckpt_fault("inval-send");
	for (size_t i = 0; fs->fuse.se && i < n; i++)
		fuse_lowlevel_notify_inval_entry(fs->fuse.se, v[i].parent, v[i].name,
						 strlen(v[i].name)); /* -ENOENT: not cached */
	pthread_mutex_unlock(&fs->fuse.inval_mu);
	free(v);
}

static char *absolute(const char *p)
{
	char cwd[PATH_MAX], *r;

	if (p[0] == '/')
		return strdup(p);
	if (!getcwd(cwd, sizeof(cwd)))
		return NULL;
	if (asprintf(&r, "%s/%s", cwd, p) < 0)
		return NULL;
	return r;
}

/*
 * Chunk buffers (256 KiB..4 MiB, STORE_CHUNK_MIN..MAX) are allocated by FUSE threads and freed
 * by write-back workers. With glibc's default, the mmap threshold rises to the size of the
 * first large block freed, after which these buffers come from per-thread arenas that keep
 * freed memory: the daemon's peak RSS grows well past the write buffer. A fixed
 * threshold (mallopt(3); it also stops the dynamic adjustment) maps and unmaps each buffer.
 */
#define MMAP_THRESHOLD_BYTES (128 * 1024)

/*
 * Check the mount options that need more than fuse_opt_parse and copy them into fs: layout,
 * defer_compress, keep_every, workers (*ret_workers) and write_buffer (*ret_wbuf, bytes).
 * Returns 0, or -1 after reporting the problem (startup_fail).
 */
static int configure(const struct cfg *c, struct ckfs *fs, unsigned *ret_workers,
		     size_t *ret_wbuf)
{
	struct steps_opts so = { .keep_max = c->keep_max, .keep_every = c->keep_every,
				 .keep_quarantine = c->keep_quarantine, .ranks = (int)c->ranks };
	size_t wbuf = wb_default_budget();

	if (c->layout && strcmp(c->layout, "none") == 0) {
		so.layout = -1; /* a plain deduplicating filesystem: no steps, no trackers */
	} else if (c->layout) {
		enum layout_kind k;

		if (layout_from_name(c->layout, &k) < 0) {
			startup_fail("unknown layout '%s' (one of: mf2 megatron mf1 deepspeed hf dcp "
				     "internevo orbax lightning none)", c->layout);
			return -1;
		}
		so.layout = (int)k;
	}
	steps_configure(fs, &so);
	if (!c->defer_compress || strcmp(c->defer_compress, "auto") == 0) {
		write_configure(fs, FS_DEFER_AUTO);
	} else if (strcmp(c->defer_compress, "never") == 0) {
		write_configure(fs, FS_DEFER_NEVER);
	} else if (strcmp(c->defer_compress, "always") == 0) {
		write_configure(fs, FS_DEFER_ALWAYS);
	} else {
		startup_fail("defer_compress must be auto, never or always, not '%s'",
			     c->defer_compress);
		return -1;
	}
	if (c->write_buffer && (parse_size(c->write_buffer, &wbuf) < 0 || wbuf < WBUF_MIN)) {
		startup_fail("-o write_buffer=%s: not a size of at least 1M (a number with a K, M or "
			     "G suffix; a bare number is bytes)", c->write_buffer);
		return -1;
	}
	fs->fuse.ra.window =
	    (uint64_t)(c->readahead_mb == UINT_MAX ? RA_DEFAULT_MB : c->readahead_mb) << 20;
	*ret_workers = c->workers ? c->workers : wb_default_threads();
	*ret_wbuf = wbuf;
	return 0;
}

/* libfuse's log callback (fuse_set_log_func): its lines go where ours go. */
static void fuse_log_line(enum fuse_log_level level, const char *fmt, va_list ap)
{
	(void)level;
	ckpt_logv(fmt, ap);
}

/*
 * Open store c->store (created if new, locked for this daemon), recover it after an unclean
 * stop (*ret_inodes, *ret_chunks: what the sweep removed), open the remote (-o remote), prepare
 * pins, the step table, the reserve, the clean flag and the staging directory. The log goes
 * to the journal, the store's ckptfs.log or the terminal from here on (fs/core/log.c).
 * Returns 0, or -1 after reporting the problem; what was opened is left in fs for teardown.
 */
static int open_store(const struct cfg *c, struct ckfs *fs, uint64_t *ret_inodes,
		      uint64_t *ret_chunks)
{
	struct store_opts so = { .zstd_level = c->zstd_level,
				 .cache_bytes = (size_t)c->cache_mb << 20,
				 .verify_dedup_hits = c->verify_dedup != 0 };
	char err[1024], path[PATH_MAX];
	int rc;

	rc = ckpt_repo_open(c->store,
			    REPO_CREATE | REPO_EXCLUSIVE | REPO_CHECK |
				    (c->allow_foreign_store ? REPO_FOREIGN : 0),
			    &so, err, sizeof(err), &fs->repo);
	if (rc < 0) {
		startup_fail("%s", err);
		return -1;
	}
	fs->ix = fs->repo->ix;
	fs->st = fs->repo->st;
	/* where the log goes, before recovery logs anything: the journal when systemd runs us
	 * (whether or not in the foreground), else the store's log in the background, else the
	 * terminal of a daemon in the foreground; a startup failure still reaches the user through
	 * the status pipe */
	if (ckpt_log_journal_stream()) {
		ckpt_log_to_journal();
	} else if (status_fd >= 0) {
		rc = ckpt_log_to_store(fs->repo);
		if (rc == -ELOOP || rc == -EPERM) {
			/* anything else: the log stays where stderr was, as before a log existed */
			startup_fail("'%s/ckptfs.log' is %s; remove it", c->store,
				     rc == -ELOOP ? "a symbolic link, and ckptfs never follows a "
				     "link inside a store" : "not a plain file");
			return -1;
		}
	} else {
		ckpt_log_stamped();
	}
	fuse_set_log_func(fuse_log_line); /* libfuse's own lines, stamped as ours */
	char upgraded[1024];

	if (ckpt_repo_upgrade_msg(fs->repo, upgraded, sizeof(upgraded)) > 0) {
		ckpt_log("%s", upgraded);
		steps_report_upgrade(fs, upgraded); /* and the command says it too */
	}
	if (!fs->repo->was_clean) {
		rc = ckpt_repo_sweep(fs->repo, ret_inodes, ret_chunks);
		if (rc < 0) {
			startup_fail("cannot recover store '%s' after an unclean stop: %s; run "
				     "'ckptctl %s verify'", c->store, strerror(-rc), c->store);
			return -1;
		}
	}
	/* a new store has no clean marker yet, and nothing to recover */
	steps_report_begin(fs, !fs->repo->was_clean && !fs->repo->fresh, fs->repo->prev_pid,
			   *ret_inodes,
			   *ret_chunks);
	if (c->remote) {
		/* before steps_init: its check of the newest step reads other nodes' chunks */
		struct node_cfg nc = { c->remote, c->node_name, c->nodes, false };
		char rerr[768];

		if (c->remote_gc && strcmp(c->remote_gc, "on") != 0 &&
		    strcmp(c->remote_gc, "off") != 0) {
			startup_fail("-o remote_gc=%s: must be on or off", c->remote_gc);
			return -1;
		}
		nc.gc_off = c->remote_gc && strcmp(c->remote_gc, "off") == 0;
		if (node_open(fs, &nc, rerr, sizeof(rerr)) < 0) {
			startup_fail("remote '%s': %s", c->remote, rerr);
			return -1;
		}
	} else if (c->node_name || c->nodes || c->remote_gc) {
		startup_fail("-o node, -o nodes and -o remote_gc need -o remote=URL (the shared "
			     "store of the job)");
		return -1;
	}
	fs->up.on_commit = steps_on_commit;
	fs->up.flush_inval = fs_flush_inval;
	if ((rc = pins_start(fs)) < 0 || (rc = steps_init(fs)) < 0) {
		startup_fail("cannot prepare the step table of '%s': %s", c->store,
			     strerror(-rc));
		return -1;
	}
	if (fs->node)
		node_prime(fs); /* the first tracker read names the newest global step */
	if ((rc = ckpt_repo_reserve(fs->repo)) < 0)
		ckpt_log("cannot set aside the %llu MiB reserve in '%s': %s; on a "
			"full disk, removing files may fail until space is freed elsewhere\n",
			CKPT_RESERVE_BYTES >> 20, c->store, strerror(-rc));
	if ((rc = ckpt_repo_set_clean(fs->repo, false)) < 0) {
		startup_fail("cannot update '%s/clean': %s", c->store, strerror(-rc));
		return -1;
	}
	snprintf(path, sizeof(path), "%s/staging", c->store);
	if (mkdirat(fs->repo->dir_fd, "staging", 0700) < 0 && errno != EEXIST) {
		startup_fail("cannot create '%s': %s", path, strerror(errno));
		return -1;
	}
	if ((rc = write_staging_open(fs)) < 0) {
		int e = -rc;

		startup_fail("cannot open '%s': %s%s", path, strerror(e),
			     e == ELOOP || e == ENOTDIR ? " (it must be a directory, not a link: "
			     "ckptfs never follows a link inside a store; remove it)" : "");
		return -1;
	}
	return 0;
}

/*
 * Create the FUSE session (fs->fuse.se, also when a later step fails, for teardown), install the
 * signal handlers and mount at o->mountpoint; find the mount's read-ahead knob (fs->fuse.ra.bdi)
 * and name the mount in STORE/lock (ckpt_repo_set_mount), so that a mount of the store waits for
 * this daemon's last writes once this mount is gone instead of refusing.
 * Returns 0, or -1 after reporting the problem.
 */
static int mount_session(struct fuse_args *args, const struct fuse_cmdline_opts *o,
			 struct ckfs *fs)
{
	struct fuse_session *se = fuse_session_new(args, &fs_ops, sizeof(fs_ops), fs);

	fs->fuse.se = se;
	if (!se) {
		startup_fail("invalid mount options (see ckptfs --help)");
		return -1;
	}
	if (fuse_set_signal_handlers(se) != 0) {
		startup_fail("cannot install signal handlers");
		return -1;
	}
	if (fuse_session_mount(se, o->mountpoint) != 0) {
		startup_fail("cannot mount at '%s' (is /dev/fuse available and fusermount3 "
			     "installed?)", o->mountpoint);
		fuse_remove_signal_handlers(se);
		return -1;
	}
	char dev[32], id[sizeof(dev) + PATH_MAX];
	int rc;

	find_mount(o->mountpoint, dev, sizeof(dev), id, sizeof(id));
	if (dev[0])
		snprintf(fs->fuse.ra.bdi, sizeof(fs->fuse.ra.bdi),
			 "/sys/class/bdi/%s/read_ahead_kb", dev);
	if (id[0] && (rc = ckpt_repo_set_mount(fs->repo, id)) < 0)
		ckpt_log("cannot write '%s/lock': %s; a mount of the store right after this one "
			 "is unmounted may be refused until this daemon exits\n", fs->repo->root,
			 strerror(-rc));
	return 0;
}

/*
 * How long `ckptfs` waits, once the mount is up, for the check of the newest steps to end, so
 * that it can say on its user's terminal what the check set aside: at most REPORT_WAIT_NS, and
 * not at all when the check reads more than REPORT_WAIT_BYTES (stored). The check of a small
 * step ends within a few tens of milliseconds; a bigger one goes on after the command returns
 * (as the mount was designed to: a trainer's start overlaps it), and the command says so.
 * Without the byte bound a step checked within the second (a GiB or so) was checked wholly
 * before the trainer could start (tests/bench/RESULTS.md, "The whole restore").
 */
#define REPORT_WAIT_NS 1000000000LL
#define REPORT_WAIT_BYTES (16ull << 20)

/*
 * In the background: send the parent waiting on the status pipe what this mount found and did
 * (steps_report_notes), one "note TEXT" line each, which it prints on its stderr before it
 * returns. No-op in the foreground, whose log is the terminal already.
 */
static void report_notes(struct ckfs *fs)
{
	char buf[8192], *line, *save = NULL;

	if (status_fd < 0)
		return;
	steps_report_wait(fs, REPORT_WAIT_NS, REPORT_WAIT_BYTES);
	steps_report_notes(fs, buf, sizeof(buf));
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (dprintf(status_fd, "note %s\n", line) < 0)
			break; /* the parent is gone; the log has it all */
}

/* In the background: detach from the terminal and tell the parent waiting on the status pipe
 * that the mount is up. No-op in the foreground. */
static void report_ready(void)
{
	if (status_fd < 0)
		return;
	int devnull = open("/dev/null", O_RDWR);

	if (devnull >= 0) {
		dup2(devnull, 0);
		dup2(devnull, 1);
		close(devnull);
	}
	if (chdir("/") < 0) {
		/* not fatal: the store path is absolute */
	}
	if (write(status_fd, "ok\n", 3) != 3) {
		/* the parent is gone; keep serving */
	}
	close(status_fd);
	status_fd = -1;
}

/* Start the write-back workers, the committer and the step reaper; each failure is logged and
 * the daemon goes on without that thread (slower, still correct). */
static void start_threads(struct ckfs *fs, size_t wbuf, unsigned nworkers)
{
	int rc;

	if ((rc = space_start(fs)) < 0)
		ckpt_log("cannot reserve free space for writes: %s; a write the store cannot "
			"hold is accepted and fails later, at fsync\n", strerror(-rc));
	if ((rc = wb_start(fs, wbuf, nworkers)) < 0)
		ckpt_log("cannot start the write-back workers: %s; chunks are stored "
			"by the writing requests\n", strerror(-rc));
	/* a node fetches the chunks it lacks from the remote: a load then waits on a request, not
	 * on a CPU, and more of them in flight keep a cold reader fed */
	if ((rc = ra_start(fs, fs->fuse.ra.window, fs->node ? RA_THREADS_REMOTE : RA_THREADS)) < 0)
		ckpt_log("cannot start the read-ahead threads: %s; each reader loads its "
			"own chunks\n", strerror(-rc));
	if ((rc = cq_start(fs)) < 0)
		ckpt_log("cannot start the committer: %s; close() waits until the "
			"file is durable\n", strerror(-rc));
	if ((rc = steps_start(fs)) < 0)
		ckpt_log("cannot start the step reaper: %s; unfinished steps are "
			"judged at unmount\n", strerror(-rc));
}

/* Serve requests until unmounted or signalled, on one thread or libfuse's pool; then unmount.
 * Returns 0 on a clean exit (an unmount, SIGTERM, SIGINT, SIGHUP), 1 otherwise. */
static int session_loop(struct fuse_session *se, const struct fuse_cmdline_opts *o)
{
	struct fuse_loop_config *lc;
	int ret;

	if (o->singlethread) {
		ret = fuse_session_loop(se);
	} else {
		lc = fuse_loop_cfg_create();
		fuse_loop_cfg_set_clone_fd(lc, (unsigned)o->clone_fd);
		fuse_loop_cfg_set_max_threads(lc, o->max_threads ? o->max_threads : 8);
		if (o->max_idle_threads != UINT_MAX) /* UINT_MAX: libfuse's "not given" */
			fuse_loop_cfg_set_idle_threads(lc, o->max_idle_threads);
		ret = fuse_session_loop_mt(se, lc);
		fuse_loop_cfg_destroy(lc);
	}
	fuse_session_unmount(se);
	fuse_remove_signal_handlers(se);
	/* libfuse's handlers end the loop with the signal's number as its result: SIGTERM (how
	 * systemd and kill stop a daemon), SIGINT and SIGHUP are asked-for stops, as clean as an
	 * unmount (teardown makes every file durable either way) */
	if (ret == SIGTERM || ret == SIGINT || ret == SIGHUP)
		ret = 0;
	return ret != 0;
}

/* Release what serve set up, in order; after a clean exit (ret 0) mark the store clean. */
static void teardown(struct ckfs *fs, int ret)
{
	/* Nothing is mounted any more (session_loop unmounted, or the start failed before or
	 * after undoing its mount): a mount of the store from now on waits for the writes below. */
	if (fs->repo)
		ckpt_repo_set_mount(fs->repo, NULL); /* on failure, it is refused until we exit */
	steps_checker_join(fs); /* a mount that failed never reached op_destroy's steps_stop */
	node_stop(fs); /* before the steps' last judgments: it takes fs->mu */
	if (fs->fuse.se) /* calls op_destroy: dirty files become durable */
		fuse_session_destroy(fs->fuse.se);
	cq_stop(fs);
	wb_stop(fs);
	ra_stop(fs);
	space_stop(fs); /* after the last write, commit and job */
	if (fs->repo && ret == 0) {
		/* every commit is done: the copy 'ckptctl fsck --rebuild' restores if index.db is lost */
		int rc = ckpt_repo_backup_index(fs->repo);

		if (rc < 0)
			ckpt_log("cannot back up the index of '%s' to index.db.bak: %s; the previous "
				 "backup, if any, is kept\n", fs->repo->root, strerror(-rc));
		if (ckpt_repo_set_clean(fs->repo, true) == 0)
			ckpt_log("stopped cleanly\n");
	}
	fs_meta_stats_close(fs); /* before the index's own handle: its close removes the WAL */
	ckpt_repo_close(fs->repo);
	write_close(fs);
	steps_report_destroy(fs);
	pthread_mutex_destroy(&fs->fuse.inval_mu);
	pthread_mutex_destroy(&fs->fuse.stats.mu);
	pthread_mutex_destroy(&fs->fuse.stats.kept_mu);
	pthread_mutex_destroy(&fs->mu);
}

static int serve(struct cfg *c, struct fuse_args *args, struct fuse_cmdline_opts *o)
{
	struct ckfs fs = { .wr = WRITE_STATE_INIT };
	struct fs_metrics *metrics = NULL;
	struct fs_control *control = NULL;
	uint64_t inodes = 0, chunks = 0;
	unsigned nworkers = 0;
	size_t wbuf = 0;
	int ret = 1;

	mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES); /* fails only for an invalid value */

	pthread_mutex_init(&fs.mu, NULL);
	pthread_mutex_init(&fs.fuse.inval_mu, NULL);
	pthread_mutex_init(&fs.fuse.stats.mu, NULL);
	pthread_mutex_init(&fs.fuse.stats.kept_mu, NULL);
	steps_report_init(&fs);
	if (configure(c, &fs, &nworkers, &wbuf) < 0 || open_store(c, &fs, &inodes, &chunks) < 0)
		goto out;
	/* before the mount: a port in use fails the start with nothing mounted */
	if (c->metrics) {
		char err[512];

		if (!(metrics = fs_metrics_start(&fs, c->metrics, err, sizeof(err)))) {
			startup_fail("-o metrics=%s: %s", c->metrics, err);
			goto out;
		}
	}
	if (mount_session(args, o, &fs) < 0)
		goto out;
	if (fs.node) {
		char err[256];

		if (node_start(&fs, err, sizeof(err)) < 0) {
			startup_fail("remote '%s': %s", c->remote, err);
			fuse_session_unmount(fs.fuse.se); /* leave no dead mount behind */
			fuse_remove_signal_handlers(fs.fuse.se);
			goto out;
		}
	}
	/* after the mount: the steps a request names are the ones the mount serves */
	char cerr[512];

	if (!(control = fs_control_start(&fs, c->store, cerr, sizeof(cerr))))
		ckpt_log("%s; 'ckptctl %s pin|unpin|drop|rollback' will need the store "
			 "unmounted\n", cerr, c->store);
	report_notes(&fs);
	report_ready();
	ckpt_log("version %s serving '%s' at '%s'", CKPTFS_VERSION, c->store, o->mountpoint);
	start_threads(&fs, wbuf, nworkers);
	ret = session_loop(fs.fuse.se, o);
out:
	fs_control_stop(control); /* before teardown: a request takes fs->mu */
	fs_metrics_stop(metrics); /* before teardown: a scrape reads fs */
	teardown(&fs, ret);
	return ret;
}

/*
 * add_fsname - add "-ofsname=STORE" to args, with ',' and '\\' escaped by a backslash as
 * fuse_opt's split of an -o list requires (libfuse 3.14 lib/fuse_opt.c,
 * process_real_option_group). Returns 0 or -1 (no memory).
 */
static int add_fsname(struct fuse_args *args, const char *store)
{
	size_t n = strlen(store);
	char *o = malloc(sizeof("-ofsname=") + 2 * n), *p;
	int rc;

	if (!o)
		return -1;
	p = stpcpy(o, "-ofsname=");
	for (size_t i = 0; i < n; i++) {
		if (store[i] == ',' || store[i] == '\\')
			*p++ = '\\';
		*p++ = store[i];
	}
	*p = '\0';
	rc = fuse_opt_add_arg(args, o);
	free(o);
	return rc;
}

int fs_main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts o = { 0 };
	struct cfg c = { .zstd_level = 1, .readahead_mb = UINT_MAX,
			 .keep_quarantine = KEEP_QUARANTINE_DEFAULT };
	char *mnt = NULL;
	int ret = 1, pfd[2];

	if (fuse_opt_parse(&args, &c, ck_opts, opt_proc) != 0)
		goto out;
	if (fuse_parse_cmdline(&args, &o) != 0) {
		ckpt_log("invalid arguments; see 'ckptfs --help'\n");
		goto out;
	}
	if (o.show_help) {
		usage(argv[0]);
		fuse_cmdline_help();
		fuse_lowlevel_help();
		ret = 0;
		goto out;
	}
	if (o.show_version) {
		printf("ckptfs %s\n", CKPTFS_VERSION);
		fuse_lowlevel_version();
		ret = 0;
		goto out;
	}
	if (!c.store || !c.mnt) {
		ckpt_log("usage: ckptfs [options] STORE MOUNTPOINT (see --help)\n");
		goto out;
	}
	if (check_fuse_options(&args) < 0)
		goto out;
	char ferr[512];

	if (ckpt_fault_init(ferr, sizeof(ferr)) < 0) {
		ckpt_log("%s\n", ferr);
		goto out;
	}
	char *abs_store = absolute(c.store);

	mnt = realpath(c.mnt, NULL);
	if (!abs_store || !mnt) {
		ckpt_log("mountpoint '%s': %s%s\n", c.mnt, strerror(errno),
			errno == ENOENT ? " (create it with mkdir)" : "");
		free(abs_store);
		goto out;
	}
	free(c.store);
	c.store = abs_store;
	free(o.mountpoint);
	o.mountpoint = mnt;
	mnt = NULL;
	if (is_mounted(o.mountpoint)) {
		ckpt_log("'%s' is already a mount point; unmount it first "
			"(fusermount3 -u %s)\n", o.mountpoint, o.mountpoint);
		goto out;
	}
	char perr[1024];

	if (ckpt_paths_check(c.store, o.mountpoint, c.nonempty, perr, sizeof(perr)) < 0) {
		ckpt_log("%s\n", perr);
		goto out;
	}
	if (access("/dev/fuse", R_OK | W_OK) != 0) {
		ckpt_log("cannot use /dev/fuse: %s (load the fuse module, or run "
			"where FUSE is available)\n", strerror(errno));
		goto out;
	}
	/* the kernel checks permissions (chmod 0400 is enforced); the store path is the mount's
	 * source, as a block device is for a disk filesystem, so 'findmnt -S STORE' finds it */
	if (fuse_opt_add_arg(&args, "-odefault_permissions,subtype=ckptfs") != 0 ||
	    add_fsname(&args, c.store) < 0)
		goto out;

	if (!o.foreground) {
		if (pipe2(pfd, O_CLOEXEC) < 0) {
			perror("ckptfs: pipe");
			goto out;
		}
		pid_t pid = fork();

		if (pid < 0) {
			perror("ckptfs: fork");
			goto out;
		}
		if (pid > 0) {
			close(pfd[1]);
			ret = wait_child(pid, pfd[0]);
			goto out;
		}
		close(pfd[0]);
		status_fd = pfd[1];
		setsid();
	}
	ret = serve(&c, &args, &o);
	if (status_fd >= 0)
		startup_fail("startup failed");
out:
	free(c.store);
	free(c.mnt);
	free(c.layout);
	free(c.defer_compress);
	free(c.write_buffer);
	free(c.metrics);
	free(c.remote);
	free(c.node_name);
	free(c.remote_gc);
	free(o.mountpoint);
	fuse_opt_free_args(&args);
	return ret;
}
