/*
 * ckptctl.c — the command-line tool of ckptfs: inspect and maintain a STORE directory, mounted
 * or not.
 *
 *   ckptctl [--json] [--help] [--version] STORE COMMAND [ARGS]
 *     status        what the store holds, and whether a daemon owns it
 *     ls [PATH]     a directory's entries, or a file's extents, from the index
 *     verify        re-read every chunk and re-hash every file
 *     gc            remove what no file uses (only while not mounted)
 *     steps         the checkpoint steps the daemon recorded, one line each
 *     show STEP     one step: fields, where its directory is, files, state history
 *     pin STEP, unpin STEP   protect a complete step from retention (only while not mounted)
 *     export [--force] STEP DIR   copy a complete step out as plain, verified files, with the
 *                   framework's tracker beside it
 *     claims        what trainers wrote into their tracker files
 *     import [--dest PATH] DIR   ingest a plain checkpoint directory (only while not mounted):
 *                   files chunked into the store, steps recognised and judged, trackers
 *                   recorded as claims
 *
 * Invariants:
 *   1. ckptctl never writes a store a daemon owns: without REPO_EXCLUSIVE, ckpt_repo_open opens
 *      the index and the chunk store read-only when a daemon holds the lock.
 *   2. ckptctl writes a store only while it holds the ownership lock exclusively
 *      (REPO_EXCLUSIVE): verify's bad-chunk marks, gc's sweep, pins, imports. Every index change
 *      is made inside one transaction (import batches several files per transaction, each
 *      committed after store_sync).
 *   3. Standard output carries the result only (aligned text, or one JSON document with
 *      --json); progress and errors go to standard error, errors as one line
 *      "ckptctl: what happened; what to do".
 *   4. Exit status: 0 success (verify: no damage), 1 verify found damage, an exported file
 *      did not match its recorded digest, or a file to import could not be read, 2 error or
 *      bad usage.
 *   5. export never overwrites: it refuses an existing DIR/NAME, writes each file as NAME.partial
 *      and renames it only once its whole-file XXH3-128 matches the index and it is fsynced.
 *
 * Thread-safety: single-threaded, except import, whose worker threads only call store_chunk_put
 * (thread-safe) on disjoint chunks of one window.
 */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ckptfs_config.h"
#include "fs/ckptfs.h"
#include "fs/layout.h"
#include "fs/validate.h"

#define EXIT_OK 0
#define EXIT_DAMAGE 1
#define EXIT_ERROR 2

/* Longest path ckptctl prints for an inode; longer ones are truncated by idx_path. */
#define PATH_CAP 4096

static bool opt_json;
static bool opt_force;
static const char *opt_dest; /* import --dest PATH, NULL when not given */

/* ---------------------------------------------------------------------------------------- */
/* Small helpers                                                                             */
/* ---------------------------------------------------------------------------------------- */

static void errmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* errmsg - print "ckptctl: <message>" and a newline on stderr. */
static void errmsg(const char *fmt, ...)
{
	va_list ap;

	fputs("ckptctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/*
 * grow - make room for one more element in a realloc'ed array.
 * @p: address of the array pointer; @cap: address of its capacity in elements;
 * @n: elements in use; @size: bytes per element.
 * Returns 0 or -ENOMEM (the array is left as it was).
 */
static int grow(void *p, size_t *cap, size_t n, size_t size)
{
	void **pp = p;
	size_t ncap;
	void *np;

	if (n < *cap)
		return 0;
	ncap = *cap ? 2 * *cap : 64;
	np = realloc(*pp, ncap * size);
	if (!np)
		return -ENOMEM;
	*pp = np;
	*cap = ncap;
	return 0;
}

/*
 * fmt_size - "1.23 GiB (1320702443 bytes)", or "512 bytes" below 1 KiB, into buf (cap bytes).
 * Returns buf.
 */
static char *fmt_size(uint64_t bytes, char *buf, size_t cap)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)bytes;
	int u = -1;

	if (bytes < 1024) {
		snprintf(buf, cap, "%" PRIu64 " bytes", bytes);
		return buf;
	}
	while (v >= 1024.0 && u < 5) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, cap, "%.2f %s (%" PRIu64 " bytes)", v, units[u], bytes);
	return buf;
}

/* fmt_short_size - "1.2 GiB" or "512 B" into buf (cap bytes), for progress lines. Returns buf. */
static char *fmt_short_size(uint64_t bytes, char *buf, size_t cap)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)bytes;
	int u = 0;

	while (v >= 1024.0 && u < 6) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, cap, "%" PRIu64 " B", bytes);
	else
		snprintf(buf, cap, "%.1f %s", v, units[u]);
	return buf;
}

/* hex16 - the 32 lowercase hex digits of a 16-byte digest into out. Returns out. */
static char *hex16(const uint8_t h[IDX_HASH_LEN], char out[2 * STORE_HASH_LEN + 1])
{
	struct store_hash sh;

	memcpy(sh.b, h, STORE_HASH_LEN);
	return store_hash_hex(&sh, out);
}

/* codec_name - printable name of an enum store_codec value; borrowed static string. */
static const char *codec_name(uint8_t codec)
{
	switch (codec) {
	case STORE_CODEC_RAW:
		return "raw";
	case STORE_CODEC_DEFERRED:
		return "deferred";
	case STORE_CODEC_ZSTD:
		return "zstd";
	case STORE_CODEC_ZSTD_BG2:
		return "zstd+bg2";
	case STORE_CODEC_ZSTD_BG4:
		return "zstd+bg4";
	case STORE_CODEC_PLANES2:
		return "planes2";
	case STORE_CODEC_PLANES4:
		return "planes4";
	default:
		return "unknown";
	}
}

/* chunk_error_name - how a chunk failed verification, as printed; borrowed static string. */
static const char *chunk_error_name(int err)
{
	switch (err) {
	case -ENOENT:
		return "missing";
	case -EBADMSG:
		return "checksum mismatch";
	case -EIO:
		return "unreadable";
	default:
		return strerror(-err);
	}
}

/* fmt_time - nanoseconds since the epoch as ISO-8601 UTC "2024-05-01T12:00:00Z". Returns buf. */
static char *fmt_time(int64_t ns, char *buf, size_t cap)
{
	time_t t = (time_t)(ns >= 0 ? ns / 1000000000 : -((-ns + 999999999) / 1000000000));
	struct tm tm;

	if (!gmtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(buf, cap, "?");
	return buf;
}

/* fmt_mode - "drwxr-xr-x"-style type and permission string (11 bytes with NUL). Returns buf. */
static char *fmt_mode(uint32_t mode, char buf[11])
{
	static const char rwx[] = "rwxrwxrwx";
	char t;
	int i;

	switch (mode & S_IFMT) {
	case S_IFREG:
		t = '-';
		break;
	case S_IFDIR:
		t = 'd';
		break;
	case S_IFLNK:
		t = 'l';
		break;
	case S_IFCHR:
		t = 'c';
		break;
	case S_IFBLK:
		t = 'b';
		break;
	case S_IFIFO:
		t = 'p';
		break;
	case S_IFSOCK:
		t = 's';
		break;
	default:
		t = '?';
		break;
	}
	buf[0] = t;
	for (i = 0; i < 9; i++)
		buf[1 + i] = (mode & (0400u >> i)) ? rwx[i] : '-';
	if (mode & S_ISUID)
		buf[3] = (mode & S_IXUSR) ? 's' : 'S';
	if (mode & S_ISGID)
		buf[6] = (mode & S_IXGRP) ? 's' : 'S';
	if (mode & S_ISVTX)
		buf[9] = (mode & S_IXOTH) ? 't' : 'T';
	buf[10] = '\0';
	return buf;
}

/* type_name - JSON name of an inode's type; borrowed static string. */
static const char *type_name(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return "file";
	case S_IFDIR:
		return "dir";
	case S_IFLNK:
		return "symlink";
	default:
		return "other";
	}
}

/*
 * inode_path - the path of ino from the root, or "<inode N, unlinked>" when no dentry chain
 * reaches the root, into buf (cap bytes). Returns 0 or the -errno of the index.
 */
static int inode_path(struct idx *ix, uint64_t ino, char *buf, size_t cap)
{
	int rc = idx_path(ix, ino, buf, cap);

	if (rc == -ENOENT) {
		snprintf(buf, cap, "<inode %" PRIu64 ", unlinked>", ino);
		return 0;
	}
	return rc < 0 ? rc : 0;
}

/* json_print - write obj and a newline to stdout, then drop the reference. Returns 0 or -EIO. */
static int json_print(json_t *obj)
{
	int rc;

	if (!obj)
		return -ENOMEM;
	rc = json_dumpf(obj, stdout, JSON_INDENT(2)) < 0 ? -EIO : 0;
	fputc('\n', stdout);
	json_decref(obj);
	return rc;
}

/* json_u64 - a JSON integer of an unsigned count (counts never reach 2^63). */
static json_t *json_u64(uint64_t v)
{
	return json_integer((json_int_t)v);
}

/* utf8_seq - length of the valid UTF-8 sequence (RFC 3629: no overlong form, no surrogate)
 * at p (n bytes left, n > 0), or 0 when p[0] does not start one. */
static size_t utf8_seq(const uint8_t *p, size_t n)
{
	/* the second byte's range excludes overlong forms (e0, f0), surrogates (ed) and code
	 * points above U+10FFFF (f4) */
	uint8_t lo = p[0] == 0xe0 ? 0xa0 : p[0] == 0xf0 ? 0x90 : 0x80;
	uint8_t hi = p[0] == 0xed ? 0x9f : p[0] == 0xf4 ? 0x8f : 0xbf;
	size_t len;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++)
		if (p[i] < (i == 1 ? lo : 0x80) || p[i] > (i == 1 ? hi : 0xbf))
			return 0;
	return len;
}

/*
 * json_name - a JSON string of a file name or path (new reference). Names are bytes and JSON
 * strings UTF-8 (json_string returns NULL on anything else, which would drop the key), so each
 * byte that is not part of valid UTF-8 becomes U+FFFD. NULL only on ENOMEM.
 */
static json_t *json_name(const char *name)
{
	const uint8_t *p = (const uint8_t *)name;
	size_t n = strlen(name), o = 0;
	json_t *j = json_string(name);
	char *buf;

	if (j)
		return j;
	buf = malloc(3 * n + 1);
	if (!buf)
		return NULL;
	for (size_t i = 0; i < n;) {
		size_t k = utf8_seq(p + i, n - i);

		if (k) {
			memcpy(buf + o, p + i, k);
			o += k;
			i += k;
		} else {
			memcpy(buf + o, "\xef\xbf\xbd", 3); /* U+FFFD */
			o += 3;
			i++;
		}
	}
	buf[o] = '\0';
	j = json_string(buf);
	free(buf);
	return j;
}

/* ---------------------------------------------------------------------------------------- */
/* Opening the store                                                                         */
/* ---------------------------------------------------------------------------------------- */

/*
 * repo_open_read - open root for reading (never writes it; read-only while mounted or not).
 * Prints the reason on stderr on failure. Returns 0 or -errno.
 */
static int repo_open_read(const char *root, struct ckpt_repo **ret)
{
	char err[1024] = "";
	int rc;

	rc = ckpt_repo_open(root, REPO_RDONLY, NULL, err, sizeof(err), ret);
	if (rc < 0)
		errmsg("%s", err[0] ? err : strerror(-rc));
	return rc;
}

/*
 * repo_open_write_flags - open root holding its lock exclusively when no daemon owns it, else
 * read-only (ret->mounted set). @sopts may be NULL. @flags: 0 or REPO_SALVAGE (exclusive open
 * only: an index that cannot be opened leaves ret->ix NULL and ret->index_err set).
 * repo_open_write is repo_open_write_flags with flags 0.
 * @ret_writable: true when the store was opened exclusively and writable.
 * Prints the reason on stderr on failure. Returns 0 or -errno.
 */
static int repo_open_write_flags(const char *root, const struct store_opts *sopts, int flags,
				 struct ckpt_repo **ret, bool *ret_writable)
{
	char err[1024] = "";
	int rc;

	rc = ckpt_repo_open(root, REPO_EXCLUSIVE | flags, sopts, err, sizeof(err), ret);
	if (rc == 0) {
		*ret_writable = true;
		return 0;
	}
	if (rc != -EBUSY && rc != -EACCES && rc != -EROFS) {
		errmsg("%s", err[0] ? err : strerror(-rc));
		return rc;
	}
	/* A daemon owns it (or we may not write it): fall back to reading. */
	err[0] = '\0';
	rc = ckpt_repo_open(root, REPO_RDONLY, sopts, err, sizeof(err), ret);
	if (rc < 0) {
		errmsg("%s", err[0] ? err : strerror(-rc));
		return rc;
	}
	*ret_writable = false;
	return 0;
}

static int repo_open_write(const char *root, const struct store_opts *sopts, struct ckpt_repo **ret,
			   bool *ret_writable)
{
	return repo_open_write_flags(root, sopts, 0, ret, ret_writable);
}

/* index_error - report an index failure on stderr; returns EXIT_ERROR. */
static int index_error(const char *root, const char *what, int rc)
{
	if (rc == -EIO)
		errmsg("cannot %s in the index of store '%s': %s; the index file is damaged: "
		       "with the store unmounted, run 'ckptctl %s fsck' to rebuild it from what is "
		       "still readable", what, root, strerror(-rc), root);
	else
		errmsg("cannot %s in the index of store '%s': %s; run 'ckptctl %s status' to "
		       "check the store", what, root, strerror(-rc), root);
	return EXIT_ERROR;
}

/* ---------------------------------------------------------------------------------------- */
/* status                                                                                    */
/* ---------------------------------------------------------------------------------------- */

/* store_is_clean - whether STORE/clean exists (the previous daemon stopped cleanly). */
static bool store_is_clean(const char *root)
{
	char path[PATH_CAP];

	if ((size_t)snprintf(path, sizeof(path), "%s/clean", root) >= sizeof(path))
		return false;
	return access(path, F_OK) == 0;
}

static int cmd_status(const char *root)
{
	struct ckpt_repo *r = NULL;
	struct idx_stats s;
	char b1[64], b2[64], b3[64];
	bool clean = false;
	double ratio = 0.0;
	int rc, status = EXIT_ERROR;

	if (repo_open_read(root, &r) < 0)
		return EXIT_ERROR;
	memset(&s, 0, sizeof(s));
	rc = idx_stats_get(r->ix, &s);
	if (rc < 0) {
		status = index_error(root, "read store figures", rc);
		goto out;
	}
	if (!r->mounted)
		clean = store_is_clean(root);
	if (s.logical_bytes)
		ratio = (double)s.stored_bytes / (double)s.logical_bytes;

	if (opt_json) {
		json_t *o = json_object();

		json_object_set_new(o, "store", json_string(root));
		json_object_set_new(o, "mounted", json_boolean(r->mounted));
		json_object_set_new(o, "owner_pid",
				    r->mounted ? json_integer(r->owner_pid) : json_null());
		json_object_set_new(o, "clean", r->mounted ? json_null() : json_boolean(clean));
		json_object_set_new(o, "files", json_u64(s.files));
		json_object_set_new(o, "dirs", json_u64(s.dirs));
		json_object_set_new(o, "symlinks", json_u64(s.symlinks));
		json_object_set_new(o, "logical_bytes", json_u64(s.logical_bytes));
		json_object_set_new(o, "chunks", json_u64(s.chunks));
		json_object_set_new(o, "chunk_raw_bytes", json_u64(s.chunk_raw_bytes));
		json_object_set_new(o, "stored_bytes", json_u64(s.stored_bytes));
		json_object_set_new(o, "stored_logical_ratio",
				    s.logical_bytes ? json_real(ratio) : json_null());
		json_object_set_new(o, "bad_chunks", json_u64(s.bad_chunks));
		if (json_print(o) < 0)
			goto out;
		status = EXIT_OK;
		goto out;
	}

	printf("store:            %s\n", root);
	if (r->mounted)
		printf("state:            mounted (daemon pid %d)\n", (int)r->owner_pid);
	else if (clean)
		printf("state:            not mounted, clean\n");
	else
		printf("state:            not mounted, unclean (the last daemon did not stop cleanly;"
		       " the next mount recovers the store)\n");
	printf("files:            %" PRIu64 "\n", s.files);
	printf("directories:      %" PRIu64 "\n", s.dirs);
	printf("symlinks:         %" PRIu64 "\n", s.symlinks);
	printf("logical size:     %s\n", fmt_size(s.logical_bytes, b1, sizeof(b1)));
	printf("distinct chunks:  %" PRIu64 "\n", s.chunks);
	printf("deduplicated:     %s\n", fmt_size(s.chunk_raw_bytes, b2, sizeof(b2)));
	printf("stored size:      %s\n", fmt_size(s.stored_bytes, b3, sizeof(b3)));
	if (s.logical_bytes)
		printf("stored/logical:   %.3f (%.1f%%)\n", ratio, 100.0 * ratio);
	else
		printf("stored/logical:   - (no file data)\n");
	if (s.bad_chunks)
		printf("bad chunks:       %" PRIu64 " (run 'ckptctl %s verify' to list the files)\n",
		       s.bad_chunks, root);
	else
		printf("bad chunks:       0\n");
	status = EXIT_OK;
out:
	ckpt_repo_close(r);
	return status;
}

/* ---------------------------------------------------------------------------------------- */
/* ls                                                                                        */
/* ---------------------------------------------------------------------------------------- */

/*
 * resolve_path - the inode at path (relative to the mount root; leading '/' optional, "." and
 * ".." understood, symlinks not followed).
 * Returns 0, -ENOENT (a component does not exist), -ENOTDIR (a non-final component is not a
 * directory), -ENOMEM, or another -errno of the index.
 */
static int resolve_path(struct idx *ix, const char *path, uint64_t *ret_ino)
{
	struct idx_inode in;
	uint64_t ino = IDX_ROOT_INO;
	char *copy, *save = NULL, *tok;
	int rc = 0;

	copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		if (!strcmp(tok, "."))
			continue;
		rc = idx_inode_get(ix, ino, &in);
		if (rc < 0)
			goto out;
		if (!S_ISDIR(in.mode)) {
			rc = -ENOTDIR;
			goto out;
		}
		if (!strcmp(tok, ".."))
			rc = idx_dentry_parent(ix, ino, &ino, NULL, 0);
		else
			rc = idx_dentry_lookup(ix, ino, tok, &ino);
		if (rc < 0)
			goto out;
	}
	*ret_ino = ino;
out:
	free(copy);
	return rc;
}

/* One listed inode. */
struct ls_ent {
	char *name;        /* owned */
	char *target;      /* owned; symlinks only */
	struct idx_inode in;
	uint64_t stored;   /* regular files: idx_file_stored_bytes */
};

struct ls_list {
	struct ls_ent *v;
	size_t n, cap;
	uint64_t dir; /* the directory listed */
};

static void ls_list_free(struct ls_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].name);
		free(l->v[i].target);
	}
	free(l->v);
}

/* idx_dir_list callback: remember name and inode; attributes are read after the walk. */
static int ls_collect(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct ls_list *l = arg;

	if (l->dir == IDX_ROOT_INO && strcmp(name, ".ckptfs") == 0)
		return 0; /* hidden, as in the mount: `ckptctl STORE ls .ckptfs` shows it */
	if (grow(&l->v, &l->cap, l->n, sizeof(*l->v)) < 0)
		return -ENOMEM;
	memset(&l->v[l->n], 0, sizeof(l->v[l->n]));
	l->v[l->n].name = strdup(name);
	if (!l->v[l->n].name)
		return -ENOMEM;
	l->v[l->n].in.ino = ino;
	l->v[l->n].in.mode = mode;
	l->n++;
	return 0;
}

static int ls_cmp(const void *a, const void *b)
{
	return strcmp(((const struct ls_ent *)a)->name, ((const struct ls_ent *)b)->name);
}

/*
 * ls_fill - read e->in.ino's attributes, stored bytes and symlink target into *e.
 * Returns 0, -ENOENT (removed meanwhile), -ENOMEM or another -errno of the index.
 */
static int ls_fill(struct idx *ix, struct ls_ent *e)
{
	int rc = idx_inode_get(ix, e->in.ino, &e->in);

	if (rc < 0)
		return rc;
	if (S_ISREG(e->in.mode)) {
		rc = idx_file_stored_bytes(ix, e->in.ino, &e->stored);
		if (rc < 0)
			return rc;
	} else if (S_ISLNK(e->in.mode)) {
		char small[1];
		int len = idx_symlink_get(ix, e->in.ino, small, sizeof(small));

		if (len < 0)
			return len == -ENOENT ? 0 : len;
		e->target = malloc((size_t)len + 1);
		if (!e->target)
			return -ENOMEM;
		rc = idx_symlink_get(ix, e->in.ino, e->target, (size_t)len + 1);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* ls_json_ent - the JSON object of one entry (new reference), NULL on ENOMEM. */
static json_t *ls_json_ent(const struct ls_ent *e)
{
	char mode[11], tbuf[40];
	json_t *o = json_object();

	if (!o)
		return NULL;
	json_object_set_new(o, "name", json_name(e->name));
	json_object_set_new(o, "ino", json_u64(e->in.ino));
	json_object_set_new(o, "type", json_string(type_name(e->in.mode)));
	json_object_set_new(o, "mode", json_integer(e->in.mode & 07777));
	json_object_set_new(o, "mode_string", json_string(fmt_mode(e->in.mode, mode)));
	json_object_set_new(o, "nlink", json_integer(e->in.nlink));
	json_object_set_new(o, "uid", json_integer(e->in.uid));
	json_object_set_new(o, "gid", json_integer(e->in.gid));
	json_object_set_new(o, "size", json_u64(e->in.size));
	if (S_ISREG(e->in.mode))
		json_object_set_new(o, "stored_bytes", json_u64(e->stored));
	json_object_set_new(o, "mtime", json_string(fmt_time(e->in.mtime_ns, tbuf, sizeof(tbuf))));
	json_object_set_new(o, "mtime_ns", json_integer(e->in.mtime_ns));
	if (S_ISLNK(e->in.mode))
		json_object_set_new(o, "target", e->target ? json_name(e->target) : json_null());
	return o;
}

/* Column widths of a listing. */
struct ls_widths {
	int nlink, uid, gid, size, stored;
};

static int numw(uint64_t v)
{
	char b[24];

	return snprintf(b, sizeof(b), "%" PRIu64, v);
}

static void ls_widths_add(struct ls_widths *w, const struct ls_ent *e)
{
	int n;

	if ((n = numw(e->in.nlink)) > w->nlink)
		w->nlink = n;
	if ((n = numw(e->in.uid)) > w->uid)
		w->uid = n;
	if ((n = numw(e->in.gid)) > w->gid)
		w->gid = n;
	if ((n = numw(e->in.size)) > w->size)
		w->size = n;
	if (S_ISREG(e->in.mode) && (n = numw(e->stored)) > w->stored)
		w->stored = n;
}

static void ls_print_line(const struct ls_ent *e, const struct ls_widths *w)
{
	char mode[11], tbuf[40], stored[24];

	if (S_ISREG(e->in.mode))
		snprintf(stored, sizeof(stored), "%" PRIu64, e->stored);
	else
		snprintf(stored, sizeof(stored), "-");
	printf("%s %*" PRIu32 " %*" PRIu32 " %*" PRIu32 " %*" PRIu64 " %*s %s %s",
	       fmt_mode(e->in.mode, mode), w->nlink, e->in.nlink, w->uid, e->in.uid, w->gid,
	       e->in.gid, w->size, e->in.size, w->stored, stored,
	       fmt_time(e->in.mtime_ns, tbuf, sizeof(tbuf)), e->name);
	if (S_ISLNK(e->in.mode))
		printf(" -> %s", e->target ? e->target : "?");
	putchar('\n');
}

static void ls_print_header(struct ls_widths *w)
{
	/* The header's words are at least as wide as their columns. */
	if (w->nlink < 5)
		w->nlink = 5;
	if (w->uid < 3)
		w->uid = 3;
	if (w->gid < 3)
		w->gid = 3;
	if (w->size < 4)
		w->size = 4;
	if (w->stored < 6)
		w->stored = 6;
	printf("%-10s %*s %*s %*s %*s %*s %-20s %s\n", "MODE", w->nlink, "NLINK", w->uid, "UID",
	       w->gid, "GID", w->size, "SIZE", w->stored, "STORED", "MTIME", "NAME");
}

/* ls_dir - list directory ino. Returns an exit status. */
static int ls_dir(struct ckpt_repo *r, const char *root, uint64_t ino)
{
	struct ls_list l = { .dir = ino };
	struct ls_widths w = { 0 };
	size_t i, kept = 0;
	int rc, status = EXIT_ERROR;

	rc = idx_dir_list(r->ix, ino, 0, ls_collect, &l);
	if (rc < 0) {
		status = index_error(root, "list a directory", rc);
		goto out;
	}
	for (i = 0; i < l.n; i++) {
		rc = ls_fill(r->ix, &l.v[i]);
		if (rc == -ENOENT && r->mounted) {
			/* removed by the daemon since the listing: drop it */
			free(l.v[i].name);
			free(l.v[i].target);
			continue;
		}
		if (rc < 0) {
			l.n = i + 1;
			status = index_error(root, "read an inode", rc);
			goto out;
		}
		l.v[kept++] = l.v[i];
	}
	l.n = kept;
	if (l.n)
		qsort(l.v, l.n, sizeof(*l.v), ls_cmp);

	if (opt_json) {
		json_t *a = json_array();

		for (i = 0; i < l.n; i++)
			json_array_append_new(a, ls_json_ent(&l.v[i]));
		if (json_print(a) < 0)
			goto out;
		status = EXIT_OK;
		goto out;
	}
	for (i = 0; i < l.n; i++)
		ls_widths_add(&w, &l.v[i]);
	ls_print_header(&w);
	for (i = 0; i < l.n; i++)
		ls_print_line(&l.v[i], &w);
	status = EXIT_OK;
out:
	ls_list_free(&l);
	return status;
}

/* ls_other - show a file's line, digest and extents (or a symlink's line). Exit status. */
static int ls_other(struct ckpt_repo *r, const char *root, uint64_t ino)
{
	struct ls_ent e = { 0 };
	struct ls_widths w = { 0 };
	struct idx_extent *ext = NULL;
	size_t n = 0, i;
	char path[PATH_CAP], hex[2 * STORE_HASH_LEN + 1];
	int rc, status = EXIT_ERROR;

	e.in.ino = ino;
	rc = inode_path(r->ix, ino, path, sizeof(path));
	if (rc < 0) {
		status = index_error(root, "find a path", rc);
		goto out;
	}
	e.name = strdup(path);
	if (!e.name) {
		errmsg("out of memory");
		goto out;
	}
	rc = ls_fill(r->ix, &e);
	if (rc == 0 && S_ISREG(e.in.mode))
		rc = idx_file_extents(r->ix, ino, &ext, &n);
	if (rc < 0) {
		status = index_error(root, "read an inode", rc);
		goto out;
	}

	if (opt_json) {
		json_t *o = ls_json_ent(&e);

		const char *slash = strrchr(path, '/');

		/* the entry's own name, as in a directory listing; the full path beside it */
		json_object_set_new(o, "name", json_name(slash && slash[1] ? slash + 1 : path));
		json_object_set_new(o, "path", json_name(path));
		if (S_ISREG(e.in.mode)) {
			json_t *a = json_array();

			json_object_set_new(o, "xxh3_128",
					    e.in.has_hash ? json_string(hex16(e.in.hash, hex))
							  : json_null());
			for (i = 0; i < n; i++) {
				json_t *x = json_object();

				json_object_set_new(x, "offset", json_u64(ext[i].offset));
				json_object_set_new(x, "length", json_integer(ext[i].length));
				json_object_set_new(x, "stored_size",
						    json_integer(ext[i].stored_size));
				json_object_set_new(x, "codec",
						    json_string(codec_name(ext[i].codec)));
				json_object_set_new(x, "chunk",
						    json_string(hex16(ext[i].hash, hex)));
				json_array_append_new(a, x);
			}
			json_object_set_new(o, "extents", a);
		}
		if (json_print(o) < 0)
			goto out;
		status = EXIT_OK;
		goto out;
	}

	ls_widths_add(&w, &e);
	ls_print_header(&w);
	ls_print_line(&e, &w);
	if (S_ISREG(e.in.mode)) {
		int wo = 6, wl = 6, ws = 6;

		printf("\nxxh3-128: %s\n", e.in.has_hash ? hex16(e.in.hash, hex)
							 : "(not recorded yet)");
		printf("extents:  %zu\n", n);
		for (i = 0; i < n; i++) {
			int k;

			if ((k = numw(ext[i].offset)) > wo)
				wo = k;
			if ((k = numw(ext[i].length)) > wl)
				wl = k;
			if ((k = numw(ext[i].stored_size)) > ws)
				ws = k;
		}
		if (n)
			printf("  %*s %*s %*s %-8s %s\n", wo, "OFFSET", wl, "LENGTH", ws, "STORED",
			       "CODEC", "CHUNK");
		for (i = 0; i < n; i++)
			printf("  %*" PRIu64 " %*" PRIu32 " %*" PRIu32 " %-8s %s\n", wo,
			       ext[i].offset, wl, ext[i].length, ws, ext[i].stored_size,
			       codec_name(ext[i].codec), hex16(ext[i].hash, hex));
	}
	status = EXIT_OK;
out:
	free(ext);
	free(e.name);
	free(e.target);
	return status;
}

static int cmd_ls(const char *root, const char *path)
{
	struct ckpt_repo *r = NULL;
	struct idx_inode in;
	uint64_t ino;
	int rc, status = EXIT_ERROR;

	if (repo_open_read(root, &r) < 0)
		return EXIT_ERROR;
	rc = resolve_path(r->ix, path, &ino);
	if (rc == -ENOENT || rc == -ENOTDIR) {
		errmsg("'%s' does not exist in store '%s'%s", path, root,
		       rc == -ENOTDIR ? " (a component of it is not a directory)" : "");
		goto out;
	}
	if (rc < 0) {
		status = index_error(root, "look up a path", rc);
		goto out;
	}
	rc = idx_inode_get(r->ix, ino, &in);
	if (rc < 0) {
		if (rc == -ENOENT)
			errmsg("'%s' does not exist in store '%s'", path, root);
		else
			status = index_error(root, "read an inode", rc);
		goto out;
	}
	if (S_ISDIR(in.mode))
		status = ls_dir(r, root, ino);
	else
		status = ls_other(r, root, ino);
out:
	ckpt_repo_close(r);
	return status;
}

/* ---------------------------------------------------------------------------------------- */
/* verify                                                                                    */
/* ---------------------------------------------------------------------------------------- */

/* One chunk row of the index, and what verification found. */
struct v_chunk {
	uint8_t hash[IDX_HASH_LEN];
	uint32_t raw_size, stored_size;
	int64_t refs;
	bool marked;     /* marked bad in the index before this run */
	bool gone;       /* mounted: the row disappeared during the run (not damage) */
	bool unused;     /* failed, but no file uses it (a note, not damage) */
	int err;         /* 0 sound, else the -errno of store_chunk_verify */
};

/* One damaged file, or one damaged chunk nobody uses. */
struct v_damage {
	uint64_t ino;        /* 0: a chunk no file uses */
	char *path;          /* owned; filled before printing */
	size_t chunk;        /* index in v_ctx.chunks, or SIZE_MAX for a whole-file failure */
	char reason[128];    /* printed in parentheses */
};

struct v_ctx {
	struct ckpt_repo *r;
	const char *root;
	bool writable;
	struct v_chunk *chunks;
	size_t nchunks, capchunks;
	uint64_t total_bytes;         /* sum of stored sizes: what is read from disk */
	struct v_damage *dmg;
	size_t ndmg, capdmg;
	struct v_damage *notes;       /* files using chunks marked bad that verify clean now, and
				       * failed chunks no file uses */
	size_t nnotes, capnotes;
	uint64_t *files;              /* inodes of regular files reachable from the root */
	size_t nfiles, capfiles;
	uint64_t files_hashed, files_unhashed;
	uint64_t marked_now, cleared_now;
	/* progress */
	bool tty;
	struct timespec last;
};

/* progress - one "\r"-updated status line on stderr, at most ten times a second. */
static void progress(struct v_ctx *c, bool force, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void progress(struct v_ctx *c, bool force, const char *fmt, ...)
{
	struct timespec now;
	va_list ap;

	if (!c->tty)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (!force && (now.tv_sec - c->last.tv_sec) * 1000000000L + (now.tv_nsec - c->last.tv_nsec) <
			      100000000L)
		return;
	c->last = now;
	fputs("\r", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\033[K", stderr);
	fflush(stderr);
}

static void progress_end(struct v_ctx *c)
{
	if (c->tty) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
}

static int v_chunk_row(const uint8_t hash[IDX_HASH_LEN], uint32_t raw_size, uint32_t stored_size,
		       uint8_t codec, int64_t refs, bool bad, void *arg)
{
	struct v_ctx *c = arg;
	struct v_chunk *k;

	if (grow(&c->chunks, &c->capchunks, c->nchunks, sizeof(*c->chunks)) < 0)
		return -ENOMEM;
	k = &c->chunks[c->nchunks++];
	memset(k, 0, sizeof(*k));
	memcpy(k->hash, hash, IDX_HASH_LEN);
	k->raw_size = raw_size;
	k->stored_size = stored_size;
	k->refs = refs;
	k->marked = bad;
	c->total_bytes += stored_size;
	return 0;
}

static int v_chunk_cmp(const void *a, const void *b)
{
	return memcmp(a, b, IDX_HASH_LEN); /* hash is the first member */
}

/* v_chunk_find - the chunk row with hash, or NULL. */
static struct v_chunk *v_chunk_find(struct v_ctx *c, const uint8_t hash[IDX_HASH_LEN])
{
	return bsearch(hash, c->chunks, c->nchunks, sizeof(*c->chunks), v_chunk_cmp);
}

/* Add a damage (or note) record; reason is printf-formatted. Returns 0 or -ENOMEM. */
static int v_add(struct v_damage **v, size_t *n, size_t *cap, uint64_t ino, size_t chunk,
		 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int v_add(struct v_damage **v, size_t *n, size_t *cap, uint64_t ino, size_t chunk,
		 const char *fmt, ...)
{
	struct v_damage *d;
	va_list ap;

	if (grow(v, cap, *n, sizeof(**v)) < 0)
		return -ENOMEM;
	d = &(*v)[(*n)++];
	memset(d, 0, sizeof(*d));
	d->ino = ino;
	d->chunk = chunk;
	va_start(ap, fmt);
	vsnprintf(d->reason, sizeof(d->reason), fmt, ap);
	va_end(ap);
	return 0;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* u64_unique - sort v[0..n) and drop duplicates; returns the new count. */
static size_t u64_unique(uint64_t *v, size_t n)
{
	size_t i, k;

	if (n)
		qsort(v, n, sizeof(*v), u64_cmp);
	for (i = 0, k = 0; i < n; i++)
		if (k == 0 || v[k - 1] != v[i])
			v[k++] = v[i];
	return k;
}

/* Users of one chunk, collected by idx_chunk_users. */
struct v_users {
	uint64_t *ino;
	size_t n, cap;
};

static int v_user(uint64_t ino, uint64_t offset, void *arg)
{
	struct v_users *u = arg;

	if (grow(&u->ino, &u->cap, u->n, sizeof(*u->ino)) < 0)
		return -ENOMEM;
	u->ino[u->n++] = ino;
	return 0;
}

/*
 * v_chunks - verify every chunk row against its file on disk (store_chunk_verify).
 * Returns 0 or -errno of the index (-ENOMEM).
 */
static int v_chunks(struct v_ctx *c)
{
	char sdone[32], stotal[32];
	uint64_t done_bytes = 0;
	size_t i;
	int rc;

	for (i = 0; i < c->nchunks; i++) {
		struct v_chunk *k = &c->chunks[i];
		struct store_hash h;

		progress(c, i == 0, "verify: chunks %zu/%zu, %s/%s, %.0f%%", i, c->nchunks,
			 fmt_short_size(done_bytes, sdone, sizeof(sdone)),
			 fmt_short_size(c->total_bytes, stotal, sizeof(stotal)),
			 c->total_bytes ? 100.0 * (double)done_bytes / (double)c->total_bytes : 0.0);
		memcpy(h.b, k->hash, STORE_HASH_LEN);
		k->err = store_chunk_verify(c->r->st, &h);
		if (k->err == -ENOMEM)
			return -ENOMEM;
		if (k->err < 0 && !c->writable) {
			/* The daemon may have released the chunk since we read the rows. */
			rc = idx_chunk_exists(c->r->ix, k->hash);
			if (rc < 0)
				return rc;
			if (rc == 0) {
				k->gone = true;
				k->err = 0;
			}
		}
		done_bytes += k->stored_size;
	}
	progress(c, true, "verify: chunks %zu/%zu, %s, 100%%", c->nchunks, c->nchunks,
		 fmt_short_size(c->total_bytes, stotal, sizeof(stotal)));
	return 0;
}

/*
 * v_chunk_users - record a damage line for every file using each failed chunk, and a note for
 * every file using a chunk marked bad that verifies clean now. Returns 0 or -errno.
 */
static int v_chunk_users(struct v_ctx *c)
{
	struct v_users u = { 0 };
	char hex[2 * STORE_HASH_LEN + 1];
	int rc = 0;

	for (size_t i = 0; i < c->nchunks; i++) {
		struct v_chunk *k = &c->chunks[i];

		if (k->gone || (!k->err && !k->marked))
			continue;
		u.n = 0;
		rc = idx_chunk_users(c->r->ix, k->hash, v_user, &u);
		if (rc < 0)
			goto out;
		u.n = u64_unique(u.ino, u.n); /* a file may use the chunk at several offsets */
		hex16(k->hash, hex);
		if (k->err) {
			if (u.n == 0) {
				k->unused = true;
				rc = v_add(&c->notes, &c->nnotes, &c->capnotes, 0, i,
					   "%s; no file uses it, 'ckptctl %s gc' removes it",
					   chunk_error_name(k->err), c->root);
			}
			for (size_t j = 0; j < u.n && rc == 0; j++)
				rc = v_add(&c->dmg, &c->ndmg, &c->capdmg, u.ino[j], i,
					   "chunk %s: %s", hex, chunk_error_name(k->err));
		} else {
			for (size_t j = 0; j < u.n && rc == 0; j++)
				rc = v_add(&c->notes, &c->nnotes, &c->capnotes, u.ino[j], i,
					   "chunk %s: marked bad in the index, verifies clean now%s",
					   hex, c->writable ? "; mark cleared" : "");
		}
		if (rc < 0)
			goto out;
	}
out:
	free(u.ino);
	return rc;
}

/*
 * v_marks - writable only: record failed chunks as bad and clear the marks of chunks that
 * verify clean, in one transaction. Returns 0 or -errno of the index.
 */
static int v_marks(struct v_ctx *c)
{
	uint64_t marked = 0, cleared = 0;
	size_t i;
	int rc;

	for (i = 0; i < c->nchunks; i++)
		if (!c->chunks[i].err != !c->chunks[i].marked)
			break;
	if (i == c->nchunks)
		return 0; /* nothing to change */
	rc = idx_begin(c->r->ix);
	if (rc < 0)
		return rc;
	for (i = 0; i < c->nchunks; i++) {
		struct v_chunk *k = &c->chunks[i];

		if (k->err && !k->marked) {
			rc = idx_chunk_mark_bad(c->r->ix, k->hash);
			marked++;
		} else if (!k->err && k->marked) {
			rc = idx_chunk_clear_bad(c->r->ix, k->hash);
			cleared++;
		}
		if (rc < 0) {
			idx_rollback(c->r->ix);
			return rc;
		}
	}
	rc = idx_commit(c->r->ix);
	if (rc < 0)
		return rc;
	c->marked_now = marked;
	c->cleared_now = cleared;
	return 0;
}

/* Directory walk: inodes of directories still to list. */
struct v_walk {
	struct v_ctx *c;
	uint64_t *dirs;
	size_t ndirs, capdirs;
};

static int v_walk_ent(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct v_walk *w = arg;
	struct v_ctx *c = w->c;

	if (S_ISDIR(mode)) {
		if (grow(&w->dirs, &w->capdirs, w->ndirs, sizeof(*w->dirs)) < 0)
			return -ENOMEM;
		w->dirs[w->ndirs++] = ino;
	} else if (S_ISREG(mode)) {
		if (grow(&c->files, &c->capfiles, c->nfiles, sizeof(*c->files)) < 0)
			return -ENOMEM;
		c->files[c->nfiles++] = ino;
	}
	return 0;
}

/*
 * v_collect_files - the inodes of every regular file reachable from the root, each once (hard
 * links share an inode), into c->files. Returns 0 or -errno.
 */
static int v_collect_files(struct v_ctx *c)
{
	struct v_walk w = { .c = c };
	int rc = 0;

	if (grow(&w.dirs, &w.capdirs, 0, sizeof(*w.dirs)) < 0)
		return -ENOMEM;
	w.dirs[w.ndirs++] = IDX_ROOT_INO;
	while (w.ndirs) {
		uint64_t dir = w.dirs[--w.ndirs];

		rc = idx_dir_list(c->r->ix, dir, 0, v_walk_ent, &w);
		if (rc == -ENOENT && !c->writable)
			rc = 0; /* removed by the daemon meanwhile */
		if (rc < 0)
			goto out;
	}
	c->nfiles = u64_unique(c->files, c->nfiles);
out:
	free(w.dirs);
	return rc;
}

/* Outcome of hashing one file. */
enum v_file_result {
	VF_SOUND,     /* hash matches, or none recorded */
	VF_SKIPPED,   /* uses a damaged chunk: already reported */
	VF_GONE,      /* removed meanwhile (mounted) */
	VF_DAMAGED,   /* reason filled */
};

/* Takes each piece a stream_extents() read (buf NULL: a hole of len bytes, index invariant 4):
 * returns 0, or -errno with reason filled. */
typedef int (*stream_sink)(const void *buf, size_t len, void *arg, char *reason, size_t cap);

/*
 * stream_extents - read the extents ext[0..n) of a file of size bytes in order through the
 * store (every chunk re-hashed by store_chunk_pread), in pieces of at most STORE_CHUNK_MAX bytes
 * into buf, feeding each piece to sink and to hs (reset first); a sparse file's holes go to sink
 * as (NULL, length) and to hs as store_hasher_hole records (store.h: the digest of a sparse
 * file).
 * @what: appended to the reason of a chunk that cannot be read ("" or " while reading").
 * Returns 0 (all read; *ret_digest is the whole-file digest), 1 (damaged: extents that do not
 * tile [0, size) (a gap allowed only when sparse), or a chunk missing, short or failing its
 * checksum; reason says which), -ENOMEM, or the -errno of sink. Not thread-safe for one hs/buf.
 */
static int stream_extents(struct store *st, const struct idx_extent *ext, size_t n, uint64_t size,
			  bool sparse, uint8_t *buf, struct store_hasher *hs, stream_sink sink,
			  void *arg, const char *what, char *reason, size_t cap,
			  struct store_hash *ret_digest)
{
	char hex[2 * STORE_HASH_LEN + 1];
	uint64_t pos = 0;
	int rc;

	store_hasher_reset(hs);
	for (size_t i = 0; i <= n; i++) {
		struct store_hash h;
		uint64_t off = 0, at = i < n ? ext[i].offset : size;

		if (at < pos || (at > pos && !sparse)) {
			snprintf(reason, cap,
				 "extents do not tile the file: gap or overlap at offset %" PRIu64, pos);
			return 1;
		}
		if (at > pos) {
			if ((rc = sink(NULL, at - pos, arg, reason, cap)) < 0)
				return rc;
			store_hasher_hole(hs, pos, at - pos);
			pos = at;
		}
		if (i == n)
			break;
		memcpy(h.b, ext[i].hash, STORE_HASH_LEN);
		while (off < ext[i].length) {
			size_t want = ext[i].length - off;
			ssize_t got;

			if (want > STORE_CHUNK_MAX)
				want = STORE_CHUNK_MAX;
			got = store_chunk_pread(st, &h, buf, want, off);
			if (got == -ENOMEM)
				return -ENOMEM;
			if (got <= 0) {
				snprintf(reason, cap, "chunk %s: %s%s", hex16(h.b, hex),
					 got == 0 ? "shorter than its extent"
						  : chunk_error_name((int)got),
					 what);
				return 1;
			}
			if ((rc = sink(buf, (size_t)got, arg, reason, cap)) < 0)
				return rc;
			store_hasher_update(hs, buf, (size_t)got);
			off += (uint64_t)got;
		}
		pos += ext[i].length;
	}
	if (pos != size) {
		snprintf(reason, cap, "extents cover %" PRIu64 " of %" PRIu64 " bytes", pos, size);
		return 1;
	}
	store_hasher_digest(hs, ret_digest);
	return 0;
}

/* stream_sink of verify: count the bytes read (arg: uint64_t). */
static int count_sink(const void *buf, size_t len, void *arg, char *reason, size_t cap)
{
	if (buf)
		*(uint64_t *)arg += len;
	return 0;
}

/*
 * v_hash_file - stream file ino's extents through a hasher and compare with the recorded
 * whole-file digest.
 * @buf: scratch buffer of STORE_CHUNK_MAX bytes. @ret_in: the attributes the check used.
 * @reason: filled for VF_DAMAGED (cap bytes).
 * Returns an enum v_file_result, or -errno of the index (-ENOMEM).
 */
static int v_hash_file(struct v_ctx *c, uint64_t ino, struct store_hasher *hs, uint8_t *buf,
		       struct idx_inode *ret_in, char *reason, size_t cap, uint64_t *ret_bytes)
{
	struct idx_extent *ext = NULL;
	struct store_hash got, want;
	char hex[2 * STORE_HASH_LEN + 1];
	size_t n = 0, i;
	int rc;

	*ret_bytes = 0;
	rc = idx_inode_get(c->r->ix, ino, ret_in);
	if (rc == -ENOENT)
		return VF_GONE;
	if (rc < 0)
		return rc;
	if (!ret_in->has_hash)
		return VF_SOUND;
	rc = idx_file_extents(c->r->ix, ino, &ext, &n);
	if (rc < 0)
		return rc;
	for (i = 0; i < n; i++) {
		struct v_chunk *k = v_chunk_find(c, ext[i].hash);

		if (k && k->err) {
			rc = VF_SKIPPED;
			goto out;
		}
	}
	rc = stream_extents(c->r->st, ext, n, ret_in->size, ret_in->flags & IDX_INODE_SPARSE, buf,
			    hs, count_sink, ret_bytes,
			    " while reading", reason, cap, &got);
	if (rc != 0) {
		rc = rc == 1 ? VF_DAMAGED : rc;
		goto out;
	}
	store_hasher_digest(hs, &got);
	memcpy(want.b, ret_in->hash, STORE_HASH_LEN);
	if (memcmp(got.b, want.b, STORE_HASH_LEN)) {
		snprintf(reason, cap, "whole-file hash mismatch: recorded %s", hex16(want.b, hex));
		rc = VF_DAMAGED;
		goto out;
	}
	rc = VF_SOUND;
out:
	free(ext);
	return rc;
}

/* same_version - whether two reads of an inode describe the same content. */
static bool same_version(const struct idx_inode *a, const struct idx_inode *b)
{
	return a->size == b->size && a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns &&
	       a->has_hash == b->has_hash && !memcmp(a->hash, b->hash, IDX_HASH_LEN);
}

/*
 * v_files - recompute the whole-file digest of every regular file whose chunks are all sound.
 * Returns 0 or -errno.
 */
static int v_files(struct v_ctx *c)
{
	struct store_hasher *hs = store_hasher_new();
	uint8_t *buf = malloc(STORE_CHUNK_MAX);
	char sdone[32];
	uint64_t bytes = 0;
	int rc = 0;

	if (!hs || !buf) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < c->nfiles; i++) {
		struct idx_inode in1, in2;
		char reason[128];
		uint64_t fb;
		int res, tries = 0;

		progress(c, i == 0, "verify: files %zu/%zu, %s hashed, %.0f%%", i, c->nfiles,
			 fmt_short_size(bytes, sdone, sizeof(sdone)),
			 100.0 * (double)i / (double)c->nfiles);
		for (;;) {
			res = v_hash_file(c, c->files[i], hs, buf, &in1, reason, sizeof(reason),
					  &fb);
			bytes += fb;
			if (res != VF_DAMAGED || c->writable || ++tries > 3)
				break;
			/* Mounted: the daemon may have rewritten the file while we read it. */
			rc = idx_inode_get(c->r->ix, c->files[i], &in2);
			if (rc == -ENOENT) {
				res = VF_GONE;
				break;
			}
			if (rc < 0)
				goto out;
			if (same_version(&in1, &in2))
				break;
		}
		if (res < 0) {
			rc = res;
			goto out;
		}
		if (res == VF_DAMAGED) {
			rc = v_add(&c->dmg, &c->ndmg, &c->capdmg, c->files[i], SIZE_MAX, "%s",
				   reason);
			if (rc < 0)
				goto out;
		}
		if (res == VF_SOUND && in1.has_hash)
			c->files_hashed++;
		else if (res == VF_SOUND)
			c->files_unhashed++;
	}
	rc = 0;
out:
	store_hasher_free(hs);
	free(buf);
	return rc;
}

static int v_damage_cmp(const void *a, const void *b)
{
	const struct v_damage *x = a, *y = b;
	int d = strcmp(x->path ? x->path : "", y->path ? y->path : "");

	if (d)
		return d;
	return strcmp(x->reason, y->reason);
}

/* v_paths - fill and sort the paths of damage records. Returns 0 or -errno. */
static int v_paths(struct v_ctx *c, struct v_damage *v, size_t n)
{
	char path[PATH_CAP], hex[2 * STORE_HASH_LEN + 1];
	int rc;

	for (size_t i = 0; i < n; i++) {
		if (v[i].ino) {
			rc = inode_path(c->r->ix, v[i].ino, path, sizeof(path));
			if (rc < 0)
				return rc;
		} else {
			snprintf(path, sizeof(path), "chunk %s",
				 hex16(c->chunks[v[i].chunk].hash, hex));
		}
		v[i].path = strdup(path);
		if (!v[i].path)
			return -ENOMEM;
	}
	if (n > 1)
		qsort(v, n, sizeof(*v), v_damage_cmp);
	return 0;
}

/*
 * v_count_files - distinct files (inodes) among damage records sorted by v_paths: one inode has
 * one path and no two inodes share one, so the records of a file are adjacent.
 */
static uint64_t v_count_files(const struct v_damage *v, size_t n)
{
	uint64_t count = 0;

	for (size_t i = 0; i < n; i++)
		if (v[i].ino && (i == 0 || v[i - 1].ino != v[i].ino))
			count++;
	return count;
}

static void v_free(struct v_ctx *c)
{
	for (size_t i = 0; i < c->ndmg; i++)
		free(c->dmg[i].path);
	for (size_t i = 0; i < c->nnotes; i++)
		free(c->notes[i].path);
	free(c->dmg);
	free(c->notes);
	free(c->chunks);
	free(c->files);
}

/* v_report - print the result, text or JSON. Returns 0 or -EIO (JSON output failed). */
static int v_report(struct v_ctx *c, uint64_t bad_chunks, uint64_t bad_files)
{
	char hex[2 * STORE_HASH_LEN + 1];
	size_t i;

	if (opt_json) {
		json_t *o = json_object(), *ac = json_array(), *af = json_array(),
		       *an = json_array();

		for (i = 0; i < c->nchunks; i++) {
			const struct v_chunk *k = &c->chunks[i];
			json_t *x, *users;

			if (!k->err || k->unused)
				continue;
			x = json_object();
			users = json_array();
			json_object_set_new(x, "chunk", json_string(hex16(k->hash, hex)));
			json_object_set_new(x, "error", json_string(chunk_error_name(k->err)));
			json_object_set_new(x, "refs", json_integer(k->refs));
			json_object_set_new(x, "marked_bad",
					    json_boolean(k->marked || c->writable));
			for (size_t j = 0; j < c->ndmg; j++)
				if (c->dmg[j].chunk == i && c->dmg[j].ino)
					json_array_append_new(users, json_name(c->dmg[j].path));
			json_object_set_new(x, "files", users);
			json_array_append_new(ac, x);
		}
		for (i = 0; i < c->ndmg; i++) {
			json_t *x;

			if (!c->dmg[i].ino)
				continue;
			x = json_object();
			json_object_set_new(x, "path", json_name(c->dmg[i].path));
			json_object_set_new(x, "ino", json_u64(c->dmg[i].ino));
			json_object_set_new(x, "reason", json_string(c->dmg[i].reason));
			json_array_append_new(af, x);
		}
		for (i = 0; i < c->nnotes; i++) {
			json_t *x = json_object();

			json_object_set_new(x, "path", json_name(c->notes[i].path));
			json_object_set_new(x, "ino", c->notes[i].ino ? json_u64(c->notes[i].ino)
								      : json_null());
			json_object_set_new(x, "reason", json_string(c->notes[i].reason));
			json_array_append_new(an, x);
		}
		json_object_set_new(o, "store", json_string(c->root));
		json_object_set_new(o, "mounted", json_boolean(c->r->mounted));
		json_object_set_new(o, "owner_pid",
				    c->r->mounted ? json_integer(c->r->owner_pid) : json_null());
		json_object_set_new(o, "marks_recorded", json_boolean(c->writable));
		json_object_set_new(o, "chunks", json_u64(c->nchunks));
		json_object_set_new(o, "chunk_bytes", json_u64(c->total_bytes));
		json_object_set_new(o, "files_checked", json_u64(c->nfiles));
		json_object_set_new(o, "files_hashed", json_u64(c->files_hashed));
		json_object_set_new(o, "damaged_chunk_count", json_u64(bad_chunks));
		json_object_set_new(o, "damaged_file_count", json_u64(bad_files));
		json_object_set_new(o, "marked_bad", json_u64(c->marked_now));
		json_object_set_new(o, "marks_cleared", json_u64(c->cleared_now));
		json_object_set_new(o, "damaged_chunks", ac);
		json_object_set_new(o, "damaged_files", af);
		json_object_set_new(o, "notes", an);
		json_object_set_new(o, "clean", json_boolean(c->ndmg == 0));
		return json_print(o);
	}

	if (c->r->mounted)
		printf("verify: store is mounted by pid %d; opened read-only, bad chunks are not "
		       "recorded in the index\n",
		       (int)c->r->owner_pid);
	else if (!c->writable)
		printf("verify: cannot lock store '%s' for writing; opened read-only, bad chunks "
		       "are not recorded in the index\n",
		       c->root);
	printf("verify: %zu chunks, %zu files checked: %" PRIu64 " damaged chunks, %" PRIu64
	       " damaged files\n",
	       c->nchunks, c->nfiles, bad_chunks, bad_files);
	for (i = 0; i < c->ndmg; i++)
		printf("damaged: %s (%s)\n", c->dmg[i].path, c->dmg[i].reason);
	for (i = 0; i < c->nnotes; i++)
		printf("note: %s (%s)\n", c->notes[i].path, c->notes[i].reason);
	if (c->marked_now || c->cleared_now)
		printf("verify: marked %" PRIu64 " chunks bad in the index, cleared %" PRIu64
		       " marks\n",
		       c->marked_now, c->cleared_now);
	return 0;
}

static int cmd_verify(const char *root)
{
	struct v_ctx c = { .root = root };
	struct store_opts so = { 0 };
	uint64_t bad_chunks = 0, bad_files;
	int rc, status = EXIT_ERROR;

	/* verify reads every chunk once: a small cache is enough for the whole-file pass */
	so.cache_bytes = 2 * (size_t)STORE_CHUNK_MAX;
	if (repo_open_write_flags(root, &so, REPO_SALVAGE, &c.r, &c.writable) < 0)
		return EXIT_ERROR;
	c.tty = isatty(STDERR_FILENO);
	{
		char msg[512];

		if (c.r->index_err < 0) {
			/* damage that keeps SQLite from opening the file at all (its header pages) */
			snprintf(msg, sizeof(msg), "cannot be opened: %s", strerror(-c.r->index_err));
			rc = -EUCLEAN;
		} else {
			rc = idx_integrity(c.r->ix, false, msg, sizeof(msg));
		}
		if (rc == -EUCLEAN) {
			if (opt_json) {
				json_t *o = json_object();

				json_object_set_new(o, "store", json_string(root));
				json_object_set_new(o, "index_damaged", json_string(msg));
				json_object_set_new(o, "clean", json_false());
				json_print(o);
			} else {
				printf("damaged: index file '%s/index.db' (%s)\n", root, msg);
			}
			errmsg("the index of store '%s' is damaged; with the store unmounted, run "
			       "'ckptctl %s fsck' to rebuild it from what is still readable", root,
			       root);
			status = EXIT_DAMAGE;
			goto out;
		}
		if (rc < 0) {
			status = index_error(root, "check the database file", rc);
			goto out;
		}
	}

	rc = idx_chunk_foreach(c.r->ix, v_chunk_row, &c);
	if (rc < 0) {
		progress_end(&c);
		status = index_error(root, "list chunks", rc);
		goto out;
	}
	if (c.nchunks)
		qsort(c.chunks, c.nchunks, sizeof(*c.chunks), v_chunk_cmp);
	rc = v_chunks(&c);
	if (rc == 0)
		rc = v_chunk_users(&c);
	if (rc == 0)
		rc = v_collect_files(&c);
	if (rc == 0)
		rc = v_files(&c);
	progress_end(&c);
	if (rc < 0) {
		status = index_error(root, "read files and chunks", rc);
		goto out;
	}
	if (c.writable) {
		rc = v_marks(&c);
		if (rc < 0) {
			errmsg("cannot record bad chunks in the index of store '%s': %s", root,
			       strerror(-rc));
			goto out;
		}
	}
	rc = v_paths(&c, c.dmg, c.ndmg);
	if (rc == 0)
		rc = v_paths(&c, c.notes, c.nnotes);
	if (rc < 0) {
		status = index_error(root, "find paths", rc);
		goto out;
	}
	for (size_t i = 0; i < c.nchunks; i++)
		if (c.chunks[i].err && !c.chunks[i].unused)
			bad_chunks++;
	bad_files = v_count_files(c.dmg, c.ndmg);
	if (v_report(&c, bad_chunks, bad_files) < 0) {
		errmsg("cannot write the report: %s", strerror(EIO));
		goto out;
	}
	status = c.ndmg ? EXIT_DAMAGE : EXIT_OK;
out:
	v_free(&c);
	ckpt_repo_close(c.r);
	return status;
}

/* ---------------------------------------------------------------------------------------- */
/* gc                                                                                        */
/* ---------------------------------------------------------------------------------------- */

/* Chunk files on disk: all of them, or (with ix set) those the index does not know. */
struct gc_count {
	struct idx *ix; /* NULL: count every chunk file */
	uint64_t files, bytes;
};

static int gc_count_file(const struct store_hash *h, uint64_t stored_size, void *arg)
{
	struct gc_count *g = arg;

	if (g->ix) {
		int rc = idx_chunk_exists(g->ix, h->b);

		if (rc < 0)
			return rc;
		if (rc)
			return 0;
	}
	g->files++;
	g->bytes += stored_size;
	return 0;
}

/* gc_mounted - count what a sweep would remove, without removing anything. Exit status. */
static int gc_mounted(struct ckpt_repo *r, const char *root)
{
	struct gc_count g = { .ix = r->ix };
	char b[64];
	int rc;

	rc = store_chunk_foreach(r->st, gc_count_file, &g);
	if (rc < 0) {
		errmsg("cannot list chunk files of store '%s': %s", root, strerror(-rc));
		return EXIT_ERROR;
	}
	if (opt_json) {
		json_t *o = json_object();

		json_object_set_new(o, "store", json_string(root));
		json_object_set_new(o, "mounted", json_boolean(r->mounted));
		json_object_set_new(o, "owner_pid",
				    r->mounted ? json_integer(r->owner_pid) : json_null());
		json_object_set_new(o, "swept", json_false());
		json_object_set_new(o, "unreferenced_chunk_files", json_u64(g.files));
		json_object_set_new(o, "unreferenced_bytes", json_u64(g.bytes));
		return json_print(o) < 0 ? EXIT_ERROR : EXIT_OK;
	}
	if (r->mounted)
		printf("gc: store is mounted by pid %d; the daemon frees a file's chunks when it is "
		       "deleted. %" PRIu64 " unreferenced chunk files (%s) remain from earlier "
		       "crashes; unmount and run 'ckptctl %s gc' to remove them.\n",
		       (int)r->owner_pid, g.files, fmt_size(g.bytes, b, sizeof(b)), root);
	else
		printf("gc: cannot lock store '%s' for writing; nothing removed. %" PRIu64
		       " unreferenced chunk files (%s) found.\n",
		       root, g.files, fmt_size(g.bytes, b, sizeof(b)));
	return EXIT_OK;
}

/*
 * gc_sweep - ckpt_repo_sweep on an exclusively held store. Bytes freed are measured as the
 * stored size of every chunk file on disk (store_chunk_foreach) before the sweep minus after
 * it, so they include chunks released with the unlinked inodes and refs-0 rows. Exit status.
 */
static int gc_sweep(struct ckpt_repo *r, const char *root)
{
	struct gc_count before = { 0 }, after = { 0 };
	uint64_t inodes = 0, chunks = 0, freed;
	char b[64];
	int rc;

	rc = store_chunk_foreach(r->st, gc_count_file, &before);
	if (rc < 0)
		goto fail_list;
	rc = ckpt_repo_sweep(r, &inodes, &chunks);
	if (rc < 0) {
		errmsg("cannot sweep store '%s': %s; nothing half-done is visible, run "
		       "'ckptctl %s verify' to check it",
		       root, strerror(-rc), root);
		return EXIT_ERROR;
	}
	rc = store_chunk_foreach(r->st, gc_count_file, &after);
	if (rc < 0)
		goto fail_list;
	freed = before.bytes > after.bytes ? before.bytes - after.bytes : 0;
	if (opt_json) {
		json_t *o = json_object();

		json_object_set_new(o, "store", json_string(root));
		json_object_set_new(o, "mounted", json_false());
		json_object_set_new(o, "owner_pid", json_null());
		json_object_set_new(o, "swept", json_true());
		json_object_set_new(o, "inodes_removed", json_u64(inodes));
		json_object_set_new(o, "chunks_removed", json_u64(chunks));
		json_object_set_new(o, "bytes_freed", json_u64(freed));
		json_object_set_new(o, "chunk_files", json_u64(after.files));
		json_object_set_new(o, "chunk_bytes", json_u64(after.bytes));
		return json_print(o) < 0 ? EXIT_ERROR : EXIT_OK;
	}
	printf("gc: removed %" PRIu64 " unlinked inodes and %" PRIu64 " chunks, freed %s\n",
	       inodes, chunks, fmt_size(freed, b, sizeof(b)));
	printf("gc: %" PRIu64 " chunk files remain (%s)\n", after.files,
	       fmt_size(after.bytes, b, sizeof(b)));
	return EXIT_OK;

fail_list:
	errmsg("cannot list chunk files of store '%s': %s", root, strerror(-rc));
	return EXIT_ERROR;
}

static int cmd_gc(const char *root)
{
	struct ckpt_repo *r = NULL;
	bool writable = false;
	int status;

	if (repo_open_write(root, NULL, &r, &writable) < 0)
		return EXIT_ERROR;
	status = writable ? gc_sweep(r, root) : gc_mounted(r, root);
	ckpt_repo_close(r);
	return status;
}

/* ---------------------------------------------------------------------------------------- */
/* fsck                                                                                      */
/* ---------------------------------------------------------------------------------------- */

struct fsck_ctx {
	struct ckpt_repo *r;
	char **lost; /* owned lines */
	size_t nlost, caplost;
};

static int fsck_chunk_info(const uint8_t hash[IDX_HASH_LEN], uint32_t *raw_size,
			   uint32_t *stored_size, uint8_t *codec, void *arg)
{
	struct fsck_ctx *c = arg;
	struct store_chunk_info ci;
	struct store_hash h;
	int rc;

	memcpy(h.b, hash, IDX_HASH_LEN);
	rc = store_chunk_stat(c->r->st, &h, &ci);
	if (rc == -ENOENT || rc == -EBADMSG || rc == -EIO)
		return 0; /* missing or unreadable header: marked bad, verify names the files */
	if (rc < 0)
		return rc;
	*raw_size = ci.raw_size;
	*stored_size = ci.stored_size;
	*codec = ci.codec;
	return 1;
}

static void fsck_lost(uint64_t ino, const char *line, void *arg)
{
	struct fsck_ctx *c = arg;
	char path[1024] = "", *dup;

	if (ino && c->r->ix && idx_path(c->r->ix, ino, path, sizeof(path)) > 0) {
		size_t n = strlen(line) + strlen(path) + 8;

		dup = malloc(n);
		if (dup)
			snprintf(dup, n, "%s: %s", path, line);
	} else {
		dup = strdup(line);
	}
	if (!dup || grow(&c->lost, &c->caplost, c->nlost, sizeof(*c->lost)) < 0) {
		free(dup);
		return;
	}
	c->lost[c->nlost++] = dup;
}

/* fsck_sync_dir - fsync directory path (the renames of the index files). */
static int fsck_sync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

/*
 * fsck_salvage - the index file is damaged: copy what is readable into STORE/index.db.salvage,
 * repair it, then swap it in; the damaged file is kept as index.db.damaged-TIME (with its -wal).
 * The exclusive lock is held throughout, so no daemon sees a half-made index.
 */
static int fsck_salvage(struct fsck_ctx *c, const char *root, char *kept, size_t keptcap)
{
	char db[4096], tmp[4200], aside[4200], from[4300], to[4400], t[32];
	struct idx_salvage_report rep;
	struct idx_repair_stats rs;
	struct idx *nix = NULL;
	time_t now = time(NULL);
	int rc;

	snprintf(db, sizeof(db), "%s/index.db", root);
	snprintf(tmp, sizeof(tmp), "%s.salvage", db);
	strftime(t, sizeof(t), "%Y%m%dT%H%M%S", gmtime(&now));
	snprintf(aside, sizeof(aside), "%s.damaged-%s", db, t);
	for (const char *sfx = ""; sfx; sfx = !*sfx ? "-wal" : !strcmp(sfx, "-wal") ? "-shm" : NULL) {
		snprintf(from, sizeof(from), "%s%s", tmp, sfx);
		unlink(from); /* an earlier fsck that was interrupted */
	}
	rc = idx_open(tmp, 0, getuid(), getgid(), ckpt_now_ns(), &nix);
	if (rc < 0) {
		errmsg("cannot create '%s': %s; nothing was changed", tmp, strerror(-rc));
		return rc;
	}
	rc = idx_salvage(nix, db, &rep);
	if (rc < 0) {
		errmsg("cannot salvage the damaged index '%s' into '%s': %s; nothing was changed",
		       db, tmp, strerror(-rc));
		goto fail;
	}
	for (int i = 0; i < IDX_SALVAGE_TABLES; i++) {
		const struct idx_salvage_table *x = &rep.table[i];

		if (!opt_json)
			printf("fsck: table %-11s %8" PRIu64 " rows copied%s%s%s\n",
			       idx_salvage_table_name(i), x->copied,
			       x->unreadable ? ", unreadable: every row lost" : "",
			       x->damaged_ranges ? ", rows on damaged pages lost" : "",
			       x->rejected ? ", malformed rows lost" : "");
		if (x->unreadable || x->damaged_ranges) {
			char line[160];

			snprintf(line, sizeof(line), "index table '%s': %s",
				 idx_salvage_table_name(i),
				 x->unreadable ? "unreadable, every row lost"
					       : "rows on damaged pages lost");
			fsck_lost(0, line, c);
		}
		if (x->rejected) {
			char line[160];

			snprintf(line, sizeof(line), "index table '%s': %" PRIu64 " malformed rows "
				 "(a missing value or a duplicate key) lost",
				 idx_salvage_table_name(i), x->rejected);
			fsck_lost(0, line, c);
		}
	}
	if (!opt_json && rep.extents_from_index)
		printf("fsck: %" PRIu64 " extents recovered from the table's extents_hash index\n",
		       rep.extents_from_index);
	struct ckpt_repo tmp_repo = *c->r;

	tmp_repo.ix = nix; /* fsck_lost resolves paths in the new index */
	struct fsck_ctx nc = *c;

	nc.r = &tmp_repo;
	struct idx_repair_ops ops = { fsck_chunk_info, fsck_lost, &nc };

	rc = idx_repair(nix, &ops, &rs);
	c->lost = nc.lost;
	c->nlost = nc.nlost;
	c->caplost = nc.caplost;
	if (rc < 0) {
		errmsg("cannot repair the salvaged index '%s': %s; nothing was changed", tmp,
		       strerror(-rc));
		goto fail;
	}
	idx_close(nix);
	nix = NULL;
	/* swap: the damaged file (and its WAL, which belongs to it by name) aside, the new in */
	idx_close(c->r->ix);
	c->r->ix = NULL;
	for (const char *sfx = ""; sfx; sfx = !*sfx ? "-wal" : !strcmp(sfx, "-wal") ? "-shm" : NULL) {
		snprintf(from, sizeof(from), "%s%s", db, sfx);
		snprintf(to, sizeof(to), "%s%s", aside, sfx);
		if (rename(from, to) < 0 && errno != ENOENT) {
			rc = -errno;
			errmsg("cannot move '%s' aside: %s; the salvaged index is '%s'", from,
			       strerror(-rc), tmp);
			return rc;
		}
	}
	if (rename(tmp, db) < 0) {
		rc = -errno;
		errmsg("cannot move '%s' to '%s': %s; the damaged index is kept as '%s': rename "
		       "'%s' to '%s' by hand", tmp, db, strerror(-rc), aside, tmp, db);
		return rc;
	}
	fsck_sync_dir(root);
	snprintf(kept, keptcap, "%s", aside);
	rc = idx_open(db, 0, getuid(), getgid(), ckpt_now_ns(), &c->r->ix);
	if (rc < 0)
		errmsg("cannot open the rebuilt index '%s': %s", db, strerror(-rc));
	return rc;
fail:
	idx_close(nix);
	for (const char *sfx = ""; sfx; sfx = !*sfx ? "-wal" : !strcmp(sfx, "-wal") ? "-shm" : NULL) {
		snprintf(from, sizeof(from), "%s%s", tmp, sfx);
		unlink(from);
	}
	return rc;
}

/* Root entries collected by fsck_steps. */
struct fsck_root_ent {
	char name[256];
	uint64_t ino;
	uint32_t mode;
};

struct fsck_roots {
	struct fsck_root_ent *v;
	size_t n, cap;
};

static int fsck_root_collect(const char *name, uint64_t ino, uint32_t mode, int64_t cookie,
			     void *arg)
{
	struct fsck_roots *l = arg;

	if (!S_ISDIR(mode) || strlen(name) >= sizeof(l->v[0].name))
		return 0;
	if (grow(&l->v, &l->cap, l->n, sizeof(*l->v)) < 0)
		return -ENOMEM;
	snprintf(l->v[l->n].name, sizeof(l->v[0].name), "%s", name);
	l->v[l->n].ino = ino;
	l->v[l->n].mode = mode;
	l->n++;
	return 0;
}

static int fsck_claim_max(int64_t id, const char *tracker, const void *content, size_t len,
			  int64_t step, int64_t ts_ns, void *arg)
{
	int64_t *max = arg;

	if (step > *max)
		*max = step;
	return 0;
}

/*
 * fsck_steps - after a salvage that lost step rows: every step directory at the root without a
 * row gets one again. It is sealed when a recorded tracker claim names it or a later step (the
 * claims survived), so the daemon judges it at the next mount (complete if every file is whole);
 * without that evidence it stays unsealed, and the daemon quarantines it as abandoned.
 * Returns the number of rows made, or -errno.
 */
static int fsck_steps(struct fsck_ctx *c)
{
	struct fsck_roots l = { 0 };
	int64_t claimed = -1, now = ckpt_now_ns();
	int rc, made = 0;

	rc = idx_dir_list(c->r->ix, IDX_ROOT_INO, 0, fsck_root_collect, &l);
	if (rc >= 0)
		rc = idx_claim_foreach(c->r->ix, fsck_claim_max, &claimed);
	if (rc >= 0)
		rc = idx_begin(c->r->ix);
	for (size_t i = 0; rc >= 0 && i < l.n; i++) {
		enum layout_kind kind;
		struct idx_step st;
		int64_t step, id;
		char line[512];

		if (layout_parse_name(l.v[i].name, LAYOUT_NONE, &kind, &step) != 1)
			continue;
		if (idx_step_by_dir(c->r->ix, l.v[i].ino, &st) == 0)
			continue;
		rc = idx_step_create(c->r->ix, kind, l.v[i].name, step, l.v[i].ino, now, &id);
		if (rc < 0)
			break;
		made++;
		if (step >= 0 && claimed >= step) {
			rc = idx_step_set_state(c->r->ix, id, IDX_STEP_SEALED, now,
						"fsck: record lost with the index; sealed again by "
						"a recorded tracker claim");
			snprintf(line, sizeof(line), "step '%s': its record was lost with the index; "
				 "sealed again by a tracker claim (step %lld), judged at the next "
				 "mount", l.v[i].name, (long long)claimed);
		} else {
			snprintf(line, sizeof(line), "step '%s': its record was lost with the index "
				 "and nothing shows it was finished; the next mount quarantines it "
				 "(/.ckptfs/quarantine, files kept)", l.v[i].name);
		}
		fsck_lost(0, line, c);
	}
	if (rc >= 0)
		rc = idx_commit(c->r->ix);
	if (rc < 0)
		idx_rollback(c->r->ix);
	free(l.v);
	return rc < 0 ? rc : made;
}

static int cmd_fsck(const char *root)
{
	struct fsck_ctx c = { 0 };
	struct idx_repair_stats rs = { 0 };
	char err[1024] = "", msg[512] = "", kept[4400] = "";
	uint64_t inodes = 0, chunks = 0;
	bool damaged_index = false;
	int rc, status = EXIT_ERROR, vstatus;

	rc = ckpt_repo_open(root, REPO_EXCLUSIVE | REPO_SALVAGE, NULL, err, sizeof(err), &c.r);
	if (rc < 0) {
		errmsg("%s%s", err[0] ? err : strerror(-rc),
		       rc == -EBUSY ? "; fsck needs the store unmounted" : "");
		return EXIT_ERROR;
	}
	/* 1. the index file: SQLite's integrity check, salvage when it fails */
	if (c.r->index_err < 0) {
		damaged_index = true;
		snprintf(msg, sizeof(msg), "cannot be opened: %s", strerror(-c.r->index_err));
	} else {
		rc = idx_integrity(c.r->ix, false, msg, sizeof(msg));
		if (rc == -EUCLEAN)
			damaged_index = true;
		else if (rc < 0) {
			errmsg("cannot check the index of store '%s': %s", root, strerror(-rc));
			goto out;
		}
	}
	if (!opt_json)
		printf("fsck: index: %s%s\n", damaged_index ? "damaged: " : "whole",
		       damaged_index ? msg : "");
	if (damaged_index) {
		char line[640];

		snprintf(line, sizeof(line), "index file damaged (%s)", msg);
		fsck_lost(0, line, &c);
		if (fsck_salvage(&c, root, kept, sizeof(kept)) < 0)
			goto out;
		if (!opt_json)
			printf("fsck: index rebuilt from what was readable; the damaged file is kept "
			       "as '%s'\n", kept);
		rc = fsck_steps(&c);
		if (rc < 0) {
			errmsg("cannot record the steps of store '%s' again: %s", root,
			       strerror(-rc));
			goto out;
		}
	} else {
		/* 2. a whole file can still break the index's own invariants */
		char why[512];

		if (idx_check(c.r->ix, why, sizeof(why)) == -EUCLEAN) {
			struct idx_repair_ops ops = { fsck_chunk_info, fsck_lost, &c };

			if (!opt_json)
				printf("fsck: index inconsistent: %s\n", why);
			rc = idx_repair(c.r->ix, &ops, &rs);
			if (rc < 0) {
				errmsg("cannot repair the index of store '%s': %s; nothing was "
				       "changed", root, strerror(-rc));
				goto out;
			}
		}
	}
	{
		char why[512];

		if (idx_check(c.r->ix, why, sizeof(why)) == -EUCLEAN) {
			errmsg("the index of store '%s' is still inconsistent after repair: %s", root,
			       why);
			goto out;
		}
	}
	/* 3. unlinked inodes, chunk rows and files nothing uses; after a salvage the chunk files
	 * the new index does not name are kept: with the damaged file, they are all that is left
	 * of what it lost */
	if (damaged_index) {
		struct gc_count g = { .ix = c.r->ix };
		char b[64];

		rc = store_chunk_foreach(c.r->st, gc_count_file, &g);
		if (rc < 0) {
			errmsg("cannot list chunk files of store '%s': %s", root, strerror(-rc));
			goto out;
		}
		if (!opt_json && g.files)
			printf("fsck: kept %" PRIu64 " chunk files (%s) no file names any more, for "
			       "whoever examines the damaged index; 'ckptctl %s gc' deletes them\n",
			       g.files, fmt_size(g.bytes, b, sizeof(b)), root);
	} else {
		rc = ckpt_repo_sweep(c.r, &inodes, &chunks);
		if (rc < 0) {
			errmsg("cannot sweep store '%s': %s", root, strerror(-rc));
			goto out;
		}
	}
	if (!opt_json) {
		if (!damaged_index)
			printf("fsck: removed %" PRIu64 " unlinked inodes and %" PRIu64
			       " unreferenced chunks\n", inodes, chunks);
		for (size_t i = 0; i < c.nlost; i++)
			printf("lost: %s\n", c.lost[i]);
	}
	ckpt_repo_close(c.r);
	c.r = NULL;
	/* 4. every chunk and file re-read: bad chunks are recorded, damaged files named */
	if (!opt_json)
		printf("fsck: verifying every chunk and file\n");
	vstatus = opt_json ? EXIT_OK : cmd_verify(root);
	if (opt_json) {
		json_t *o = json_object(), *a = json_array();

		for (size_t i = 0; i < c.nlost; i++)
			json_array_append_new(a, json_name(c.lost[i]));
		json_object_set_new(o, "store", json_string(root));
		json_object_set_new(o, "index_damaged", json_boolean(damaged_index));
		json_object_set_new(o, "index_message", damaged_index ? json_string(msg)
								      : json_null());
		json_object_set_new(o, "damaged_index_kept_as", kept[0] ? json_string(kept)
									 : json_null());
		json_object_set_new(o, "inodes_removed", json_u64(inodes));
		json_object_set_new(o, "chunks_removed", json_u64(chunks));
		json_object_set_new(o, "lost", a);
		if (json_print(o) < 0)
			goto out;
	}
	if (vstatus == EXIT_ERROR)
		goto out;
	status = (c.nlost || damaged_index || vstatus == EXIT_DAMAGE) ? EXIT_DAMAGE : EXIT_OK;
	if (!opt_json)
		printf("fsck: %s\n", status == EXIT_OK ? "clean" :
		       vstatus == EXIT_OK ? "damage found and repaired: every file left verifies "
		       "whole; the lines 'lost:' above say what could not be kept" :
		       "damage found: the lines 'lost:' and 'damaged:' above say what; steps with "
		       "damaged files are no longer resolved by trackers");
out:
	for (size_t i = 0; i < c.nlost; i++)
		free(c.lost[i]);
	free(c.lost);
	ckpt_repo_close(c.r);
	return status;
}

/* ---------------------------------------------------------------------------------------- */
/* steps: the step table, one step's detail, pins, export, tracker claims                    */
/* ---------------------------------------------------------------------------------------- */

/* kind_name - layout name of a step's kind, "?" when out of range; borrowed static string. */
static const char *kind_name(int kind)
{
	const char *n = kind >= 0 && kind < LAYOUT_KIND_COUNT ? layout_name((enum layout_kind)kind)
							       : NULL;

	return n ? n : "?";
}

/* Steps collected by idx_step_foreach, in its order (step number, then id). */
struct step_list {
	struct idx_step *v;
	size_t n, cap;
};

static int step_collect(const struct idx_step *s, void *arg)
{
	struct step_list *l = arg;

	if (grow(&l->v, &l->cap, l->n, sizeof(*l->v)) < 0)
		return -ENOMEM;
	l->v[l->n++] = *s;
	return 0;
}

/* json_time - ISO-8601 UTC string of ns, or null for 0 (never). */
static json_t *json_time(int64_t ns)
{
	char t[40];

	return ns ? json_string(fmt_time(ns, t, sizeof(t))) : json_null();
}

/* step_json - every field of s as a JSON object (new reference). */
static json_t *step_json(const struct idx_step *s)
{
	char hex[2 * STORE_HASH_LEN + 1];
	json_t *o = json_object();

	json_object_set_new(o, "id", json_integer(s->id));
	json_object_set_new(o, "step", json_integer(s->step));
	json_object_set_new(o, "name", json_name(s->name));
	json_object_set_new(o, "kind", json_integer(s->kind));
	json_object_set_new(o, "layout", json_string(kind_name(s->kind)));
	json_object_set_new(o, "state", json_string(idx_step_state_name(s->state)));
	json_object_set_new(o, "dir_ino", json_u64(s->dir_ino));
	json_object_set_new(o, "created_ns", json_integer(s->created_ns));
	json_object_set_new(o, "created", json_time(s->created_ns));
	json_object_set_new(o, "sealed_ns", json_integer(s->sealed_ns));
	json_object_set_new(o, "sealed", json_time(s->sealed_ns));
	json_object_set_new(o, "completed_ns", json_integer(s->completed_ns));
	json_object_set_new(o, "completed", json_time(s->completed_ns));
	json_object_set_new(o, "state_ns", json_integer(s->state_ns));
	json_object_set_new(o, "state_changed", json_time(s->state_ns));
	json_object_set_new(o, "files", json_u64(s->files));
	json_object_set_new(o, "logical_bytes", json_u64(s->logical_bytes));
	json_object_set_new(o, "stored_bytes", json_u64(s->stored_bytes));
	json_object_set_new(o, "digest", s->has_digest ? json_string(hex16(s->digest, hex))
						       : json_null());
	json_object_set_new(o, "pinned", json_boolean(s->pinned));
	return o;
}

static int cmd_steps(const char *root)
{
	struct ckpt_repo *r = NULL;
	struct step_list l = { 0 };
	int wn = 4, wname = 4, wl = 6, ws = 5, wf = 5;
	int rc, status = EXIT_ERROR;
	size_t i;

	if (repo_open_read(root, &r) < 0)
		return EXIT_ERROR;
	rc = idx_step_foreach(r->ix, step_collect, &l);
	if (rc < 0) {
		status = index_error(root, "list steps", rc);
		goto out;
	}
	if (opt_json) {
		json_t *a = json_array();

		for (i = 0; i < l.n; i++)
			json_array_append_new(a, step_json(&l.v[i]));
		status = json_print(a) < 0 ? EXIT_ERROR : EXIT_OK;
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

		if ((k = numw((uint64_t)s->step)) > wn)
			wn = k;
		if ((k = (int)strlen(s->name)) > wname)
			wname = k;
		if ((k = (int)strlen(kind_name(s->kind))) > wl)
			wl = k;
		if ((k = (int)strlen(idx_step_state_name(s->state))) > ws)
			ws = k;
		if ((k = numw(s->files)) > wf)
			wf = k;
	}
	printf("%*s  %-*s  %-*s  %-*s  %*s  %10s  %10s  %-20s  %s\n", wn, "STEP", wname, "NAME", wl,
	       "LAYOUT", ws, "STATE", wf, "FILES", "LOGICAL", "STORED", "COMPLETED", "PIN");
	for (i = 0; i < l.n; i++) {
		const struct idx_step *s = &l.v[i];
		char lb[32], sb[32], tb[40];

		printf("%*" PRId64 "  %-*s  %-*s  %-*s  %*" PRIu64 "  %10s  %10s  %-20s  %s\n", wn,
		       s->step, wname, s->name, wl, kind_name(s->kind), ws,
		       idx_step_state_name(s->state), wf, s->files,
		       fmt_short_size(s->logical_bytes, lb, sizeof(lb)),
		       fmt_short_size(s->stored_bytes, sb, sizeof(sb)),
		       s->completed_ns ? fmt_time(s->completed_ns, tb, sizeof(tb)) : "-",
		       s->pinned ? "*" : "");
	}
	status = EXIT_OK;
out:
	free(l.v);
	ckpt_repo_close(r);
	return status;
}

/* Steps that a STEP argument names. */
struct step_match {
	const char *arg;
	bool numeric;   /* arg is a step number */
	int64_t number; /* numeric: the number */
	char qname[IDX_STEP_NAME_MAX + 1]; /* "NAME.ID" form: NAME, else "" */
	int64_t qid;    /* "NAME.ID" form: ID, else 0 */
	struct step_list found;
};

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

/*
 * find_steps - the steps that arg names: a step number ("100"), a step directory name
 * ("iter_0000100"), or a quarantined directory's name ("iter_0000200.2", NAME.ID). Newest id
 * first, into m->found (owned by m; free m->found.v). Prints nothing.
 * Returns the number of steps found (>= 0) or -errno of the index.
 */
static int find_steps(struct idx *ix, const char *arg, struct step_match *m)
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

/*
 * pick_step - among m->found (newest first), the step an action means: the newest complete
 * one, else the newest that is not pruned, else the newest. NULL when none was found.
 */
static const struct idx_step *pick_step(const struct step_match *m)
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

/* no_such_step - report an unknown STEP; returns EXIT_ERROR. */
static int no_such_step(const char *root, const char *arg)
{
	errmsg("no step '%s' in store '%s'; run 'ckptctl %s steps' to list the steps", arg, root,
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

static void tree_free(struct tree *t)
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

	if (grow(&t->v, &t->cap, t->n, sizeof(*t->v)) < 0)
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

/*
 * tree_collect - every entry under directory dir, breadth first (listings are never nested: a
 * listing's statement is shared per handle), then sorted by relative path, so a directory comes
 * before what it holds. A directory removed meanwhile (mounted) is skipped.
 * Returns 0 or -errno of the index (the tree is then freed).
 */
static int tree_collect(struct idx *ix, uint64_t dir, struct tree *t)
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
		tree_free(t);
		return rc;
	}
	if (t->n)
		qsort(t->v, t->n, sizeof(*t->v), tree_cmp);
	return 0;
}

/* flags_string - "torn,malformed", "valid" or "-" for IDX_INODE_* bits into buf. Returns buf. */
static char *flags_string(uint32_t flags, char *buf, size_t cap)
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

	if (grow(&l->v, &l->cap, l->n, sizeof(*l->v)) < 0)
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
 * show_one - print (or append to the JSON array a) step s: its fields, location, files and
 * state history. Returns 0 or -errno of the index.
 */
static int show_one(struct ckpt_repo *r, const struct idx_step *s, json_t *a, bool first)
{
	struct tree t = { 0 };
	struct event_list ev = { 0 };
	struct show_file *files = NULL;
	size_t nfiles = 0, i;
	char where[PATH_CAP], hex[2 * STORE_HASH_LEN + 1], tb[40], fb[64];
	int rc;

	rc = step_location(r->ix, s, where, sizeof(where));
	if (rc == 0 && s->dir_ino)
		rc = tree_collect(r->ix, s->dir_ino, &t);
	if (rc == -ENOENT)
		rc = 0; /* the directory went away meanwhile (mounted): no files */
	if (rc < 0)
		goto out;
	files = calloc(t.n ? t.n : 1, sizeof(*files));
	if (!files) {
		rc = -ENOMEM;
		goto out;
	}
	for (i = 0; i < t.n; i++) {
		struct show_file *f = &files[nfiles];

		if (!S_ISREG(t.v[i].mode))
			continue;
		f->rel = t.v[i].rel;
		rc = idx_inode_get(r->ix, t.v[i].ino, &f->in);
		if (rc == 0)
			rc = idx_file_stored_bytes(r->ix, t.v[i].ino, &f->stored);
		if (rc == -ENOENT && r->mounted)
			continue; /* removed by the daemon since the listing */
		if (rc < 0)
			goto out;
		nfiles++;
	}
	rc = idx_step_events(r->ix, s->id, event_collect, &ev);
	if (rc < 0)
		goto out;

	if (a) {
		json_t *o = step_json(s), *af = json_array(), *ah = json_array();

		json_object_set_new(o, "path", json_name(where));
		for (i = 0; i < nfiles; i++) {
			json_t *x = json_object();

			json_object_set_new(x, "path", json_name(files[i].rel));
			json_object_set_new(x, "ino", json_u64(files[i].in.ino));
			json_object_set_new(x, "mode", json_integer(files[i].in.mode & 07777));
			json_object_set_new(x, "size", json_u64(files[i].in.size));
			json_object_set_new(x, "stored_bytes", json_u64(files[i].stored));
			json_object_set_new(x, "flags", flags_json(files[i].in.flags));
			json_object_set_new(x, "xxh3_128",
					    files[i].in.has_hash
						    ? json_string(hex16(files[i].in.hash, hex))
						    : json_null());
			json_array_append_new(af, x);
		}
		for (i = 0; i < ev.n; i++) {
			json_t *x = json_object();

			json_object_set_new(x, "time", json_time(ev.v[i].ts_ns));
			json_object_set_new(x, "ts_ns", json_integer(ev.v[i].ts_ns));
			json_object_set_new(x, "from",
					    json_string(idx_step_state_name(ev.v[i].old_state)));
			json_object_set_new(x, "to",
					    json_string(idx_step_state_name(ev.v[i].new_state)));
			json_object_set_new(x, "note", ev.v[i].note ? json_string(ev.v[i].note)
								    : json_null());
			json_array_append_new(ah, x);
		}
		json_object_set_new(o, "files_list", af);
		json_object_set_new(o, "history", ah);
		json_array_append_new(a, o);
		rc = 0;
		goto out;
	}

	if (!first)
		putchar('\n');
	printf("step:        %" PRId64 "\n", s->step);
	printf("name:        %s\n", s->name);
	printf("id:          %" PRId64 "\n", s->id);
	printf("layout:      %s\n", kind_name(s->kind));
	printf("state:       %s%s\n", idx_step_state_name(s->state), s->pinned ? " (pinned)" : "");
	printf("directory:   %s\n", where);
	printf("created:     %s\n", fmt_time(s->created_ns, tb, sizeof(tb)));
	printf("sealed:      %s\n", s->sealed_ns ? fmt_time(s->sealed_ns, tb, sizeof(tb)) : "-");
	printf("completed:   %s\n",
	       s->completed_ns ? fmt_time(s->completed_ns, tb, sizeof(tb)) : "-");
	printf("files:       %" PRIu64 "\n", s->files);
	printf("logical:     %s\n", fmt_size(s->logical_bytes, fb, sizeof(fb)));
	printf("stored:      %s\n", fmt_size(s->stored_bytes, fb, sizeof(fb)));
	printf("digest:      %s\n", s->has_digest ? hex16(s->digest, hex) : "-");
	if (nfiles) {
		int wsz = 4, wst = 6, wfl = 5;

		for (i = 0; i < nfiles; i++) {
			int k;

			if ((k = numw(files[i].in.size)) > wsz)
				wsz = k;
			if ((k = numw(files[i].stored)) > wst)
				wst = k;
			if ((k = (int)strlen(flags_string(files[i].in.flags, fb, sizeof(fb)))) > wfl)
				wfl = k;
		}
		printf("\n  %*s %*s %-*s %-32s %s\n", wsz, "SIZE", wst, "STORED", wfl, "FLAGS",
		       "XXH3-128", "PATH");
		for (i = 0; i < nfiles; i++)
			printf("  %*" PRIu64 " %*" PRIu64 " %-*s %-32s %s\n", wsz, files[i].in.size,
			       wst, files[i].stored, wfl,
			       flags_string(files[i].in.flags, fb, sizeof(fb)),
			       files[i].in.has_hash ? hex16(files[i].in.hash, hex) : "(none)",
			       files[i].rel);
	} else {
		printf("\n  (no files)\n");
	}
	printf("\nhistory:\n");
	if (!ev.n)
		printf("  (no state changes recorded)\n");
	for (i = 0; i < ev.n; i++)
		printf("  %s  %s -> %s%s%s\n", fmt_time(ev.v[i].ts_ns, tb, sizeof(tb)),
		       idx_step_state_name(ev.v[i].old_state),
		       idx_step_state_name(ev.v[i].new_state), ev.v[i].note ? ": " : "",
		       ev.v[i].note ? ev.v[i].note : "");
	rc = 0;
out:
	free(files);
	tree_free(&t);
	event_list_free(&ev);
	return rc;
}

static int cmd_show(const char *root, const char *arg)
{
	struct ckpt_repo *r = NULL;
	struct step_match m;
	json_t *a = NULL;
	int rc, status = EXIT_ERROR;

	memset(&m, 0, sizeof(m));
	if (repo_open_read(root, &r) < 0)
		return EXIT_ERROR;
	rc = find_steps(r->ix, arg, &m);
	if (rc < 0) {
		status = index_error(root, "list steps", rc);
		goto out;
	}
	if (rc == 0) {
		status = no_such_step(root, arg);
		goto out;
	}
	if (opt_json)
		a = json_array();
	for (size_t i = 0; i < m.found.n; i++) {
		rc = show_one(r, &m.found.v[i], a, i == 0);
		if (rc < 0) {
			json_decref(a);
			status = index_error(root, "read a step", rc);
			goto out;
		}
	}
	if (a && json_print(a) < 0)
		goto out;
	status = EXIT_OK;
out:
	free(m.found.v);
	ckpt_repo_close(r);
	return status;
}

/* ---- pin / unpin ---- */

static int cmd_pin(const char *root, const char *arg, bool pin)
{
	const char *verb = pin ? "pin" : "unpin";
	struct ckpt_repo *r = NULL;
	struct step_match m;
	const struct idx_step *s;
	char err[1024] = "";
	bool changed;
	int rc, status = EXIT_ERROR;

	memset(&m, 0, sizeof(m));
	rc = ckpt_repo_open(root, REPO_EXCLUSIVE, NULL, err, sizeof(err), &r);
	if (rc == -EBUSY) {
		/* who holds it: a daemon (mounted), or another ckptctl reading it */
		if (ckpt_repo_open(root, REPO_RDONLY, NULL, err, sizeof(err), &r) == 0 &&
		    r->mounted)
			errmsg("store '%s' is mounted by pid %d; %sning a step needs the store "
			       "unmounted: unmount it first (fusermount3 -u MOUNTPOINT), then run "
			       "'ckptctl %s %s %s' again",
			       root, (int)r->owner_pid, verb, root, verb, arg);
		else
			errmsg("store '%s' is in use by another process; retry when it is done",
			       root);
		ckpt_repo_close(r);
		return EXIT_ERROR;
	}
	if (rc < 0) {
		errmsg("%s", err[0] ? err : strerror(-rc));
		return EXIT_ERROR;
	}
	rc = find_steps(r->ix, arg, &m);
	if (rc < 0) {
		status = index_error(root, "list steps", rc);
		goto out;
	}
	s = pick_step(&m);
	if (!s) {
		status = no_such_step(root, arg);
		goto out;
	}
	if (pin && s->state != IDX_STEP_COMPLETE) {
		errmsg("step %" PRId64 " ('%s', id %" PRId64 ") is %s; only complete steps can be "
		       "pinned",
		       s->step, s->name, s->id, idx_step_state_name(s->state));
		goto out;
	}
	changed = s->pinned != pin;
	if (changed) {
		rc = idx_begin(r->ix);
		if (rc == 0)
			rc = idx_step_set_pinned(r->ix, s->id, pin);
		if (rc == 0)
			rc = idx_commit(r->ix);
		else
			idx_rollback(r->ix);
		if (rc < 0) {
			status = index_error(root, pin ? "pin a step" : "unpin a step", rc);
			goto out;
		}
	}
	if (opt_json) {
		json_t *o = json_object();

		json_object_set_new(o, "id", json_integer(s->id));
		json_object_set_new(o, "step", json_integer(s->step));
		json_object_set_new(o, "name", json_name(s->name));
		json_object_set_new(o, "state", json_string(idx_step_state_name(s->state)));
		json_object_set_new(o, "pinned", json_boolean(pin));
		json_object_set_new(o, "changed", json_boolean(changed));
		if (json_print(o) < 0)
			goto out;
	} else {
		printf("%s step %" PRId64 " ('%s', id %" PRId64 ")%s\n", pin ? "pinned" : "unpinned",
		       s->step, s->name, s->id,
		       changed ? "" : pin ? " (it was already pinned)" : " (it was not pinned)");
	}
	status = EXIT_OK;
out:
	free(m.found.v);
	ckpt_repo_close(r);
	return status;
}

/* ---- export ---- */

/* Progress of an export, on stderr when it is a terminal. */
struct export_ctx {
	struct ckpt_repo *r;
	const char *root;
	uint64_t total, done;
	bool tty;
	struct timespec last;
	uint8_t *buf;              /* STORE_CHUNK_MAX bytes */
	struct store_hasher *hs;
};

static void export_progress(struct export_ctx *x, bool force)
{
	char sdone[32], stotal[32];
	struct timespec now;

	if (!x->tty)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (!force && (now.tv_sec - x->last.tv_sec) * 1000000000L + (now.tv_nsec - x->last.tv_nsec) <
			      100000000L)
		return;
	x->last = now;
	fprintf(stderr, "\rexport: %s/%s, %.0f%%\033[K",
		fmt_short_size(x->done, sdone, sizeof(sdone)),
		fmt_short_size(x->total, stotal, sizeof(stotal)),
		x->total ? 100.0 * (double)x->done / (double)x->total : 100.0);
	fflush(stderr);
}

/* progress_clear - erase the progress line when stderr is a terminal. */
static void progress_clear(bool tty)
{
	if (tty) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
}

/* write_all - write len bytes of buf to fd. Returns 0 or -errno. */
static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* fsync_path - open path read-only (a directory too) and fsync it. Returns 0 or -errno. */
static int fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

/* Outcome of exporting one file. */
enum export_result {
	EX_OK,        /* written, verified, renamed into place */
	EX_DAMAGED,   /* left as .partial; reason filled */
};

struct export_sink_arg {
	struct export_ctx *x;
	int fd;
	const char *partial;
};

/* stream_sink of export: write the piece to the .partial file, count it, show progress. */
static int export_sink(const void *buf, size_t len, void *arg, char *reason, size_t cap)
{
	struct export_sink_arg *a = arg;
	int rc = 0;

	if (!buf) { /* a hole stays one: skipped here, the size set by export_file */
		if (lseek(a->fd, (off_t)len, SEEK_CUR) < 0)
			rc = -errno;
	} else {
		rc = write_all(a->fd, buf, len);
	}

	if (rc < 0) {
		snprintf(reason, cap, "cannot write '%s': %s", a->partial, strerror(-rc));
		return rc;
	}
	a->x->done += (uint64_t)len;
	export_progress(a->x, false);
	return 0;
}

/*
 * export_file - copy regular file ino to dst: written to "dst.partial", every chunk read through
 * store_chunk_pread (decoded and re-hashed), the whole-file XXH3-128 compared with the recorded
 * one, fsynced, given the recorded mode and times, then renamed to dst. On a read error or a
 * digest mismatch the bytes stay in "dst.partial" and reason says why (cap bytes).
 * Returns an enum export_result, -errno of the index (-ENOMEM), or -errno of the destination
 * (what failed is then in reason).
 */
static int export_file(struct export_ctx *x, uint64_t ino, const char *dst, char *reason,
		       size_t cap, struct idx_inode *ret_in)
{
	struct idx_extent *ext = NULL;
	struct store_hash got;
	char partial[PATH_CAP + 16], hex[2 * STORE_HASH_LEN + 1], hex2[2 * STORE_HASH_LEN + 1];
	size_t n = 0;
	bool created = false;
	int fd = -1, rc;

	reason[0] = '\0';
	rc = idx_inode_get(x->r->ix, ino, ret_in);
	if (rc == 0)
		rc = idx_file_extents(x->r->ix, ino, &ext, &n);
	if (rc < 0)
		return rc;
	if ((size_t)snprintf(partial, sizeof(partial), "%s.partial", dst) >= sizeof(partial)) {
		snprintf(reason, cap, "cannot create '%s.partial': %s", dst, strerror(ENAMETOOLONG));
		rc = -ENAMETOOLONG;
		goto out;
	}
	fd = open(partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		snprintf(reason, cap, "cannot create '%s': %s", partial, strerror(-rc));
		goto out;
	}
	created = true;
	struct export_sink_arg sa = { .x = x, .fd = fd, .partial = partial };

	rc = stream_extents(x->r->st, ext, n, ret_in->size, ret_in->flags & IDX_INODE_SPARSE,
			    x->buf, x->hs, export_sink, &sa, "",
			    reason, cap, &got);
	if (rc != 0) {
		rc = rc == 1 ? EX_DAMAGED : rc;
		goto out;
	}
	store_hasher_digest(x->hs, &got);
	if (!ret_in->has_hash) {
		snprintf(reason, cap, "no whole-file digest recorded (never closed), got %s",
			 hex16(got.b, hex));
		rc = EX_DAMAGED;
		goto out;
	}
	if (memcmp(got.b, ret_in->hash, IDX_HASH_LEN)) {
		snprintf(reason, cap, "whole-file xxh3-128 mismatch: recorded %s, read %s",
			 hex16(ret_in->hash, hex), hex16(got.b, hex2));
		rc = EX_DAMAGED;
		goto out;
	}
	{
		struct timespec ts[2] = {
			{ .tv_sec = ret_in->atime_ns / 1000000000,
			  .tv_nsec = ret_in->atime_ns % 1000000000 },
			{ .tv_sec = ret_in->mtime_ns / 1000000000,
			  .tv_nsec = ret_in->mtime_ns % 1000000000 },
		};

		if (ftruncate(fd, (off_t)ret_in->size) < 0 || /* a trailing hole */
		    fchmod(fd, ret_in->mode & 07777) < 0 || fsync(fd) < 0 ||
		    futimens(fd, ts) < 0) {
			rc = -errno;
			snprintf(reason, cap, "cannot finish '%s': %s", partial, strerror(-rc));
			goto out;
		}
	}
	if (close(fd) < 0) {
		fd = -1;
		rc = -errno;
		snprintf(reason, cap, "cannot write '%s': %s", partial, strerror(-rc));
		goto out;
	}
	fd = -1;
	if (rename(partial, dst) < 0) {
		rc = -errno;
		snprintf(reason, cap, "cannot rename '%s' to '%s': %s", partial, dst,
			 strerror(-rc));
		goto out;
	}
	rc = EX_OK;
out:
	if (fd >= 0) {
		if (rc == EX_DAMAGED)
			(void)fsync(fd); /* keep what was read, for a person to look at */
		close(fd);
	}
	if (rc < 0 && created)
		(void)unlink(partial); /* a failure of ours, not of the data: nothing to keep */
	free(ext);
	return rc;
}

/* mkdir_p - create path and its missing parents (mode 0777 & ~umask). Returns 0 or -errno. */
static int mkdir_p(const char *path)
{
	char buf[PATH_CAP];
	size_t len = strlen(path);

	if (len >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0777) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0777) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/*
 * export_tracker - write the framework's tracker naming step s into dir (temp file, fsync,
 * rename), unless one there already names a newer step.
 * @ret_path, @ret_content: what was written (or found), each cap bytes; ret_path "" when the
 * layout has no tracker ckptctl can write. @ret_kept: true when a newer tracker was left as is.
 * Returns 0, or -errno (what failed is printed).
 */
static int export_tracker(const char *dir, const struct idx_step *s, char *ret_path,
			  char *ret_content, size_t cap, bool *ret_kept)
{
	struct layout_tracker t = { .step = s->step, .epoch = -1 };
	char rel[LAYOUT_PATH_MAX], tmp[PATH_CAP + 16], old[LAYOUT_TRACKER_MAX];
	int len, fd, rc;
	ssize_t oldlen;

	*ret_kept = false;
	ret_path[0] = ret_content[0] = '\0';
	if (s->kind == LAYOUT_INTERNEVO || s->kind == LAYOUT_MF1)
		return 0; /* InternEvo's tracker is the trainer's pickle; MF1's is per rank */
	if (layout_tracker_path((enum layout_kind)s->kind, s->step, -1, rel, sizeof(rel)) < 0)
		return 0; /* HF, DCP, Orbax: the marker is inside the step directory */
	len = layout_tracker_format((enum layout_kind)s->kind, &t, ret_content, cap);
	if (len < 0) {
		ret_content[0] = '\0';
		return 0;
	}
	if ((size_t)snprintf(ret_path, cap, "%s/%s", dir, rel) >= cap ||
	    (size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", ret_path) >= sizeof(tmp)) {
		errmsg("cannot write the tracker in '%s': %s", dir, strerror(ENAMETOOLONG));
		return -ENAMETOOLONG;
	}
	fd = open(ret_path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		struct layout_tracker ot;

		oldlen = read(fd, old, sizeof(old));
		close(fd);
		if (oldlen > 0 &&
		    layout_tracker_parse((enum layout_kind)s->kind, rel, old, (size_t)oldlen, &ot) ==
			    0 &&
		    ot.step > s->step) {
			*ret_kept = true;
			snprintf(ret_content, cap, "%.*s", (int)oldlen, old);
			return 0;
		}
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		errmsg("cannot create '%s': %s", tmp, strerror(-rc));
		return rc;
	}
	rc = write_all(fd, ret_content, (size_t)len);
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, ret_path) < 0)
		rc = -errno;
	if (rc < 0) {
		errmsg("cannot write '%s': %s", ret_path, strerror(-rc));
		(void)unlink(tmp);
		return rc;
	}
	return 0;
}

/* A file that could not be exported faithfully. */
struct export_damage {
	char *path;   /* owned: the .partial file left behind */
	char *reason; /* owned */
};

static int cmd_export(const char *root, const char *arg, const char *dest, bool force)
{
	struct export_ctx x = { .root = root };
	struct step_match m;
	const struct idx_step *s;
	struct tree t = { 0 };
	struct export_damage *dmg = NULL;
	char **flagged = NULL; /* owned: "REL (torn)" for files the daemon flagged */
	size_t ndmg = 0, capdmg = 0, nflagged = 0, capflagged = 0, nfiles = 0, i;
	char top[PATH_CAP], path[PATH_CAP], tpath[PATH_CAP], tcontent[LAYOUT_TRACKER_MAX];
	char reason[2 * PATH_CAP + 256], sb[64];
	bool kept = false, made_top = false;
	int rc, status = EXIT_ERROR;

	memset(&m, 0, sizeof(m));
	tpath[0] = tcontent[0] = '\0';
	if (repo_open_read(root, &x.r) < 0)
		return EXIT_ERROR;
	rc = find_steps(x.r->ix, arg, &m);
	if (rc < 0) {
		status = index_error(root, "list steps", rc);
		goto out;
	}
	s = pick_step(&m);
	if (!s) {
		status = no_such_step(root, arg);
		goto out;
	}
	if (s->state != IDX_STEP_COMPLETE && !(s->pinned && s->state != IDX_STEP_PRUNED) &&
	    !force) {
		errmsg("step %" PRId64 " ('%s', id %" PRId64 ") is %s; only complete steps are "
		       "exported: add --force to export it anyway",
		       s->step, s->name, s->id, idx_step_state_name(s->state));
		goto out;
	}
	if (!s->dir_ino) {
		errmsg("step %" PRId64 " ('%s', id %" PRId64 ") is %s and has no directory any "
		       "more; nothing to export",
		       s->step, s->name, s->id, idx_step_state_name(s->state));
		goto out;
	}
	rc = tree_collect(x.r->ix, s->dir_ino, &t);
	if (rc < 0) {
		status = index_error(root, "list the step's files", rc);
		goto out;
	}
	for (i = 0; i < t.n; i++) {
		struct idx_inode in;

		if (!S_ISREG(t.v[i].mode))
			continue;
		if (idx_inode_get(x.r->ix, t.v[i].ino, &in) == 0)
			x.total += in.size;
	}
	rc = mkdir_p(dest);
	if (rc < 0) {
		errmsg("cannot create directory '%s': %s", dest, strerror(-rc));
		goto out;
	}
	if ((size_t)snprintf(top, sizeof(top), "%s/%s", dest, s->name) >= sizeof(top)) {
		errmsg("cannot export to '%s': %s", dest, strerror(ENAMETOOLONG));
		goto out;
	}
	if (mkdir(top, 0700) < 0) {
		rc = -errno;
		if (rc == -EEXIST)
			errmsg("'%s' already exists; remove it or export to another directory", top);
		else
			errmsg("cannot create directory '%s': %s", top, strerror(-rc));
		goto out;
	}
	made_top = true;
	x.tty = isatty(STDERR_FILENO);
	x.buf = malloc(STORE_CHUNK_MAX);
	x.hs = store_hasher_new();
	if (!x.buf || !x.hs) {
		errmsg("out of memory");
		goto out;
	}
	export_progress(&x, true);
	/* t is sorted: a directory comes before what it holds */
	for (i = 0; i < t.n; i++) {
		struct idx_inode in;

		if ((size_t)snprintf(path, sizeof(path), "%s/%s", top, t.v[i].rel) >= sizeof(path)) {
			errmsg("cannot export '%s': %s", t.v[i].rel, strerror(ENAMETOOLONG));
			goto out_progress;
		}
		if (S_ISDIR(t.v[i].mode)) {
			if (mkdir(path, 0700) < 0) {
				errmsg("cannot create directory '%s': %s", path, strerror(errno));
				goto out_progress;
			}
		} else if (S_ISLNK(t.v[i].mode)) {
			char target[PATH_CAP];

			rc = idx_symlink_get(x.r->ix, t.v[i].ino, target, sizeof(target));
			if (rc >= 0 && symlink(target, path) < 0) {
				errmsg("cannot create symlink '%s': %s", path, strerror(errno));
				goto out_progress;
			}
		} else if (!S_ISREG(t.v[i].mode)) {
			/* a FIFO, socket or device node: made again, with its device number */
			if (idx_inode_get(x.r->ix, t.v[i].ino, &in) == 0 &&
			    mknod(path, in.mode & (S_IFMT | 0777), (dev_t)in.rdev) < 0) {
				errmsg("cannot create '%s': %s", path, strerror(errno));
				goto out_progress;
			}
		} else {
			rc = export_file(&x, t.v[i].ino, path, reason, sizeof(reason), &in);
			if (rc == -ENOENT && x.r->mounted)
				continue; /* deleted by the daemon since the listing */
			if (rc == -ENOMEM || (rc < 0 && !reason[0])) {
				progress_clear(x.tty);
				status = index_error(root, "read a file", rc);
				goto out;
			}
			if (rc < 0) {
				errmsg("%s", reason);
				goto out_progress;
			}
			nfiles++;
			if (in.flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED)) {
				char fl[64], *note;

				flags_string(in.flags & (IDX_INODE_TORN | IDX_INODE_MALFORMED), fl,
					     sizeof(fl));
				note = malloc(strlen(t.v[i].rel) + strlen(fl) + 4);
				if (!note ||
				    grow(&flagged, &capflagged, nflagged, sizeof(*flagged)) < 0) {
					free(note);
					errmsg("out of memory");
					goto out_progress;
				}
				sprintf(note, "%s (%s)", t.v[i].rel, fl);
				flagged[nflagged++] = note;
			}
			if (rc == EX_DAMAGED) {
				if (grow(&dmg, &capdmg, ndmg, sizeof(*dmg)) < 0) {
					errmsg("out of memory");
					goto out_progress;
				}
				dmg[ndmg].path = malloc(strlen(path) + 9);
				dmg[ndmg].reason = strdup(reason);
				if (!dmg[ndmg].path || !dmg[ndmg].reason) {
					free(dmg[ndmg].path);
					free(dmg[ndmg].reason);
					errmsg("out of memory");
					goto out_progress;
				}
				sprintf(dmg[ndmg].path, "%s.partial", path);
				ndmg++;
			}
		}
	}
	/* directories last, deepest first: their modes and times, then make them durable */
	for (i = t.n; i-- > 0;) {
		struct idx_inode in;

		if (!S_ISDIR(t.v[i].mode) || idx_inode_get(x.r->ix, t.v[i].ino, &in) < 0 ||
		    (size_t)snprintf(path, sizeof(path), "%s/%s", top, t.v[i].rel) >= sizeof(path))
			continue; /* too long: refused when it was created */
		rc = fsync_path(path);
		if (rc == 0) {
			struct timespec ts[2] = {
				{ .tv_sec = in.atime_ns / 1000000000,
				  .tv_nsec = in.atime_ns % 1000000000 },
				{ .tv_sec = in.mtime_ns / 1000000000,
				  .tv_nsec = in.mtime_ns % 1000000000 },
			};

			if (chmod(path, in.mode & 07777) < 0 || utimensat(AT_FDCWD, path, ts, 0) < 0)
				rc = -errno;
		}
		if (rc < 0) {
			errmsg("cannot finish directory '%s': %s", path, strerror(-rc));
			goto out_progress;
		}
	}
	{
		struct idx_inode in;

		rc = fsync_path(top);
		if (rc == 0 && idx_inode_get(x.r->ix, s->dir_ino, &in) == 0) {
			struct timespec ts[2] = {
				{ .tv_sec = in.atime_ns / 1000000000,
				  .tv_nsec = in.atime_ns % 1000000000 },
				{ .tv_sec = in.mtime_ns / 1000000000,
				  .tv_nsec = in.mtime_ns % 1000000000 },
			};

			if (chmod(top, in.mode & 07777) < 0 || utimensat(AT_FDCWD, top, ts, 0) < 0)
				rc = -errno;
		}
		if (rc < 0) {
			errmsg("cannot finish directory '%s': %s", top, strerror(-rc));
			goto out_progress;
		}
	}
	/* the tracker only for a sound export of a complete step: a framework resumes from it */
	if (!ndmg && s->state == IDX_STEP_COMPLETE &&
	    export_tracker(dest, s, tpath, tcontent, sizeof(tcontent), &kept) < 0)
		goto out_progress;
	rc = fsync_path(dest);
	if (rc < 0) {
		errmsg("cannot sync directory '%s': %s", dest, strerror(-rc));
		goto out_progress;
	}
	export_progress(&x, true);
	progress_clear(x.tty);

	if (opt_json) {
		json_t *o = json_object(), *ad = json_array();

		json_object_set_new(o, "id", json_integer(s->id));
		json_object_set_new(o, "step", json_integer(s->step));
		json_object_set_new(o, "name", json_name(s->name));
		json_object_set_new(o, "layout", json_string(kind_name(s->kind)));
		json_object_set_new(o, "state", json_string(idx_step_state_name(s->state)));
		json_object_set_new(o, "destination", json_string(top));
		json_object_set_new(o, "files", json_u64(nfiles));
		json_object_set_new(o, "bytes", json_u64(x.done));
		if (tpath[0]) {
			json_t *tr = json_object();

			json_object_set_new(tr, "path", json_string(tpath));
			json_object_set_new(tr, "content", json_string(tcontent));
			json_object_set_new(tr, "kept_newer", json_boolean(kept));
			json_object_set_new(o, "tracker", tr);
		} else {
			json_object_set_new(o, "tracker", json_null());
		}
		for (i = 0; i < ndmg; i++) {
			json_t *d = json_object();

			json_object_set_new(d, "partial", json_name(dmg[i].path));
			json_object_set_new(d, "reason", json_string(dmg[i].reason));
			json_array_append_new(ad, d);
		}
		json_object_set_new(o, "damaged", ad);
		ad = json_array();
		for (i = 0; i < nflagged; i++)
			json_array_append_new(ad, json_name(flagged[i]));
		json_object_set_new(o, "flagged", ad);
		json_object_set_new(o, "verified", json_boolean(ndmg == 0));
		if (json_print(o) < 0)
			goto out;
	} else {
		printf("exported step %" PRId64 " ('%s', %s, %s) to %s: %zu files, %s, ", s->step,
		       s->name, kind_name(s->kind), idx_step_state_name(s->state), top, nfiles,
		       fmt_size(x.done, sb, sizeof(sb)));
		if (ndmg)
			printf("%zu did not verify\n", ndmg);
		else
			printf("every file verified\n");
		for (i = 0; i < ndmg; i++)
			printf("damaged: %s (%s); the bytes read are left in that file\n",
			       dmg[i].path, dmg[i].reason);
		for (i = 0; i < nflagged; i++)
			printf("flagged: %s: the daemon judged it unsound; its bytes are what "
			       "was written\n",
			       flagged[i]);
		if (tpath[0] && kept)
			printf("tracker: %s left as is: it names a newer step (%s)\n", tpath,
			       tcontent);
		else if (tpath[0])
			printf("tracker: %s = %s\n", tpath, tcontent);
		else if (ndmg)
			printf("tracker: not written (some files did not verify)\n");
		else if (s->state != IDX_STEP_COMPLETE)
			printf("tracker: not written (the step is not complete)\n");
	}
	if (ndmg)
		errmsg("%zu file(s) of step %" PRId64 " did not verify; they are left with a "
		       ".partial suffix under '%s'",
		       ndmg, s->step, top);
	status = ndmg ? EXIT_DAMAGE : EXIT_OK;
	goto out;

out_progress:
	progress_clear(x.tty);
	if (made_top)
		errmsg("the export in '%s' is incomplete; remove it before exporting again", top);
out:
	for (i = 0; i < ndmg; i++) {
		free(dmg[i].path);
		free(dmg[i].reason);
	}
	free(dmg);
	for (i = 0; i < nflagged; i++)
		free(flagged[i]);
	free(flagged);
	tree_free(&t);
	free(m.found.v);
	free(x.buf);
	store_hasher_free(x.hs);
	ckpt_repo_close(x.r);
	return status;
}

/* ---- tracker claims ---- */

/*
 * escape_bytes - printable form of len bytes: ASCII printable as is, backslash as "\\", newline,
 * tab and CR as \n \t \r, anything else as \xNN. Stops before cap-1 bytes of output (an
 * escape is never cut). Returns the number of input bytes consumed.
 */
static size_t escape_bytes(const uint8_t *p, size_t len, char *buf, size_t cap)
{
	size_t i, o = 0;

	for (i = 0; i < len; i++) {
		char e[5];
		size_t el;

		if (p[i] == '\\')
			el = (size_t)snprintf(e, sizeof(e), "\\\\");
		else if (p[i] == '\n')
			el = (size_t)snprintf(e, sizeof(e), "\\n");
		else if (p[i] == '\t')
			el = (size_t)snprintf(e, sizeof(e), "\\t");
		else if (p[i] == '\r')
			el = (size_t)snprintf(e, sizeof(e), "\\r");
		else if (p[i] >= 0x20 && p[i] < 0x7f)
			el = (size_t)snprintf(e, sizeof(e), "%c", p[i]);
		else
			el = (size_t)snprintf(e, sizeof(e), "\\x%02x", p[i]);
		if (o + el >= cap)
			break;
		memcpy(buf + o, e, el);
		o += el;
	}
	buf[o] = '\0';
	return i;
}

/* Longest claim content shown, in bytes. */
#define CLAIM_PREVIEW 60

struct claim_ctx {
	struct idx *ix;
	json_t *a; /* --json: the array */
	size_t n;
	int wtracker;
};

static int claim_row(int64_t id, const char *tracker, const void *content, size_t len,
		     int64_t step, int64_t ts_ns, void *arg)
{
	struct claim_ctx *c = arg;
	char tb[40], sbuf[24], prev[4 * CLAIM_PREVIEW + 8];
	size_t shown = len < CLAIM_PREVIEW ? len : CLAIM_PREVIEW;
	uint64_t written = len;
	int rc;

	rc = idx_claim_length(c->ix, id, &written);
	if (rc < 0 && rc != -ENOENT)
		return rc;
	escape_bytes(content, shown, prev, sizeof(prev));
	if (c->a) {
		json_t *o = json_object();
		char *full = malloc(4 * len + 1);

		if (!full)
			return -ENOMEM;
		escape_bytes(content, len, full, 4 * len + 1);
		json_object_set_new(o, "id", json_integer(id));
		json_object_set_new(o, "time", json_time(ts_ns));
		json_object_set_new(o, "ts_ns", json_integer(ts_ns));
		json_object_set_new(o, "tracker", json_string(tracker));
		json_object_set_new(o, "step", step >= 0 ? json_integer(step) : json_null());
		json_object_set_new(o, "length", json_u64(written));
		json_object_set_new(o, "truncated", json_boolean(written > len));
		json_object_set_new(o, "content", json_string(full));
		free(full);
		json_array_append_new(c->a, o);
		c->n++;
		return 0;
	}
	if (step >= 0)
		snprintf(sbuf, sizeof(sbuf), "%" PRId64, step);
	else
		snprintf(sbuf, sizeof(sbuf), "unparseable");
	if (c->n == 0)
		printf("%-20s  %-*s  %-11s  %s\n", "TIME", c->wtracker, "TRACKER", "STEP",
		       "CONTENT");
	printf("%-20s  %-*s  %-11s  \"%s\"%s\n", fmt_time(ts_ns, tb, sizeof(tb)), c->wtracker,
	       tracker, sbuf, prev,
	       written > shown ? "..." : "");
	c->n++;
	return 0;
}

static int claim_width(int64_t id, const char *tracker, const void *content, size_t len,
		       int64_t step, int64_t ts_ns, void *arg)
{
	struct claim_ctx *c = arg;
	int w = (int)strlen(tracker);

	if (w > c->wtracker)
		c->wtracker = w;
	return 0;
}

static int cmd_claims(const char *root)
{
	struct ckpt_repo *r = NULL;
	struct claim_ctx c = { 0 };
	int rc, status = EXIT_ERROR;

	if (repo_open_read(root, &r) < 0)
		return EXIT_ERROR;
	c.ix = r->ix;
	c.wtracker = 7;
	if (opt_json)
		c.a = json_array();
	rc = c.a ? 0 : idx_claim_foreach(r->ix, claim_width, &c);
	if (rc == 0)
		rc = idx_claim_foreach(r->ix, claim_row, &c);
	if (rc < 0) {
		json_decref(c.a);
		status = index_error(root, "list tracker claims", rc);
		goto out;
	}
	if (c.a) {
		if (json_print(c.a) < 0)
			goto out;
	} else if (c.n == 0) {
		printf("no tracker claims recorded in store '%s'\n", root);
	}
	status = EXIT_OK;
out:
	ckpt_repo_close(r);
	return status;
}

/* ---- import ---- */

/*
 * import copies a plain checkpoint directory into the store as the daemon would have recorded
 * it had the trainer written through a mount:
 *   1. DIR is scanned first (lstat, never following a symlink; a symlink is copied as one), so
 *      nothing is written when DIR is unusable or a top-level name is already taken.
 *   2. Each regular file is read IMPORT_WINDOW bytes at a time and cut with store_cdc_cut over
 *      at most 2 * STORE_CHUNK_MAX bytes per cut (the daemon's boundaries); the window's chunks
 *      are put with store_chunk_put by IMPORT_THREADS threads, the whole-file XXH3-128 taken
 *      in order; its inode, dentry and extents go into the index with
 *      idx_file_set_content, several files per transaction, each transaction committed only
 *      after store_sync made its chunks' renames durable.
 *   3. Only at the mount root (no --dest, or --dest /): top-level trackers become claims (never
 *      files: steps.c invariant 3); each top-level step directory gets a step row when it is
 *      created; files under a step directory get IDX_INODE_VALID / IDX_INODE_MALFORMED from
 *      validate_file, as steps_on_commit gives them.
 *   4. A step is sealed by a tracker naming it or a later step of a layout sharing that tracker
 *      (a trainer saves in step order, and a plain directory keeps only the last tracker), or by
 *      its sound in-step marker. Sealed, with every file read and whole: complete. Sealed with a
 *      malformed file: sealed (the daemon's recovery sets it aside with its reason). Otherwise,
 *      or when a file could not be read: writing, which recovery sets aside as incomplete.
 *   5. STORE/clean is removed first; it is put back at the end only when it was there (or the
 *      store is new) and every file was read, so an interrupted or partial import leaves chunks
 *      for the next mount's sweep.
 */

/* Bytes read from a file at a time: its chunks are put in parallel (>= 2 * STORE_CHUNK_MAX). */
#define IMPORT_WINDOW (32u << 20)
/* Most threads putting chunks (one per online CPU up to this). */
#define IMPORT_THREADS 8
/* Files committed per index transaction, and bytes. */
#define IMPORT_TXN_FILES 256
#define IMPORT_TXN_BYTES (256ull << 20)
/* Deepest directory nesting imported. */
#define IMPORT_DEPTH_MAX 256
/* Largest tracker file read whole (InternEvo's N.step is a small pickle). */
#define IMPORT_TRACKER_MAX (16u << 20)

/* One entry of DIR, in pre-order: a directory comes before what it holds. */
struct imp_ent {
	char *rel;      /* owned: path relative to DIR */
	const char *name; /* borrowed from rel: the last component */
	struct stat st; /* lstat at scan time */
	size_t parent;  /* index of the parent entry, SIZE_MAX at DIR's top level */
	int step;       /* index in imp_ctx.steps of the step it belongs to (or is), -1 none */
	bool tracker;   /* a top-level tracker: recorded as a claim, not stored */
	bool in_step;   /* validated as steps_on_commit validates (a step file or marker) */
	bool marker;    /* the layout's in-step commit marker */
	uint64_t ino;   /* created inode, 0 until then (or when it failed) */
};

/* One step directory at DIR's top level. */
struct imp_step {
	size_t ent;              /* its entry */
	enum layout_kind kind;
	int64_t step;
	int64_t id;              /* step row, 0 until created */
	char sealed_by[128];     /* why it is sealed, "" when not */
	uint64_t files, bytes;   /* files imported into it, their bytes */
	unsigned malformed, failed; /* files that failed the structure check / could not be read */
	int state;               /* enum idx_step_state it was left in */
	char bad[256];           /* the first malformed file and why, "" when none */
	char why[512];           /* note recorded with that state */
};

/* A top-level tracker. */
struct imp_claim {
	size_t ent;
	enum layout_kind kind;
	char content[64]; /* printable preview */
	int64_t step;     /* parsed, -1 when not a step */
	unsigned sealed;  /* steps it sealed */
};

/* A file or directory that could not be imported. */
struct imp_fail {
	char *path;   /* owned: relative to DIR */
	char *reason; /* owned */
};

struct imp_ctx {
	const char *root, *src;
	struct ckpt_repo *r;
	bool at_root; /* the destination is the mount root: steps and trackers apply */
	uint64_t dest_ino;
	struct imp_ent *v;
	size_t n, cap;
	struct imp_step *steps;
	size_t nsteps, capsteps;
	struct imp_claim *claims;
	size_t nclaims, capclaims;
	struct imp_fail *fail;
	size_t nfail, capfail;
	char **skipped; /* owned: top-level names not imported (".ckptfs") */
	size_t nskipped, capskipped;
	/* the file being read */
	uint8_t *buf; /* IMPORT_WINDOW bytes */
	struct imp_put *puts; /* IMPORT_WINDOW / STORE_CHUNK_MIN + 1 of them */
	size_t nputs;
	struct store_hasher *hs;
	struct idx_extent *ext;
	size_t next, capext;
	/* the open transaction */
	bool in_txn;
	unsigned txn_files;
	uint64_t txn_bytes;
	/* figures */
	uint64_t files, dirs, symlinks, logical, stored_added, chunks_written, dedup_hits;
	uint64_t total, done; /* bytes of regular files to read, and read */
	bool tty;
	struct timespec start, last;
};

/*
 * imp_fail_add - record that rel could not be imported, and why (printf-style); step is the
 * index of the step it belongs to (which then cannot complete), -1 for none.
 * Returns 0 or -ENOMEM.
 */
static int imp_fail_add(struct imp_ctx *c, int step, const char *rel, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int imp_fail_add(struct imp_ctx *c, int step, const char *rel, const char *fmt, ...)
{
	char reason[PATH_CAP + 256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	if (grow(&c->fail, &c->capfail, c->nfail, sizeof(*c->fail)) < 0)
		return -ENOMEM;
	c->fail[c->nfail].path = strdup(rel[0] ? rel : ".");
	c->fail[c->nfail].reason = strdup(reason);
	if (!c->fail[c->nfail].path || !c->fail[c->nfail].reason) {
		free(c->fail[c->nfail].path);
		free(c->fail[c->nfail].reason);
		return -ENOMEM;
	}
	c->nfail++;
	if (step >= 0)
		c->steps[step].failed++;
	return 0;
}

static void imp_free(struct imp_ctx *c)
{
	size_t i;

	for (i = 0; i < c->n; i++)
		free(c->v[i].rel);
	free(c->v);
	for (i = 0; i < c->nfail; i++) {
		free(c->fail[i].path);
		free(c->fail[i].reason);
	}
	free(c->fail);
	for (i = 0; i < c->nskipped; i++)
		free(c->skipped[i]);
	free(c->skipped);
	free(c->steps);
	free(c->claims);
	free(c->buf);
	free(c->puts);
	free(c->ext);
	store_hasher_free(c->hs);
}

/* imp_elapsed - seconds since the import began. */
static double imp_elapsed(const struct imp_ctx *c)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - c->start.tv_sec) +
	       (double)(now.tv_nsec - c->start.tv_nsec) / 1e9;
}

/* imp_mbps - logical megabytes (10^6 bytes) per second so far. */
static double imp_mbps(const struct imp_ctx *c, double secs)
{
	return secs > 0 ? (double)c->done / 1e6 / secs : 0.0;
}

static void import_progress(struct imp_ctx *c, bool force)
{
	char sdone[32], stotal[32];
	struct timespec now;

	if (!c->tty)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (!force && (now.tv_sec - c->last.tv_sec) * 1000000000L + (now.tv_nsec - c->last.tv_nsec) <
			      100000000L)
		return;
	c->last = now;
	fprintf(stderr, "\rimport: %s/%s, %.0f%%, %.1f MB/s\033[K",
		fmt_short_size(c->done, sdone, sizeof(sdone)),
		fmt_short_size(c->total, stotal, sizeof(stotal)),
		c->total ? 100.0 * (double)c->done / (double)c->total : 100.0,
		imp_mbps(c, imp_elapsed(c)));
	fflush(stderr);
}

/* imp_name_cmp - qsort of char * by strcmp. */
static int imp_name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* imp_classify - at the mount root, what the new entry e is to its layout (scan time). */
static int imp_classify(struct imp_ctx *c, size_t i)
{
	struct imp_ent *e = &c->v[i];
	struct layout_match m;

	e->step = e->parent == SIZE_MAX ? -1 : c->v[e->parent].step;
	if (!c->at_root || layout_classify(e->rel, LAYOUT_NONE, &m) < 0)
		return 0;
	if (e->parent == SIZE_MAX) {
		if (S_ISREG(e->st.st_mode) && m.role == ROLE_TRACKER && m.kind != LAYOUT_MF1)
			e->tracker = true;
		if (S_ISDIR(e->st.st_mode) && m.role == ROLE_STEP_DIR && !(m.flags & LAYOUT_F_TMP) &&
		    m.step >= 0) {
			struct imp_step *s;

			if (grow(&c->steps, &c->capsteps, c->nsteps, sizeof(*c->steps)) < 0)
				return -ENOMEM;
			s = &c->steps[c->nsteps];
			memset(s, 0, sizeof(*s));
			s->ent = i;
			s->kind = m.kind;
			s->step = m.step;
			e->step = (int)c->nsteps++;
		}
		return 0;
	}
	if (!S_ISREG(e->st.st_mode) || m.step_prefix_len == 0 ||
	    (m.role != ROLE_STEP_FILE && m.role != ROLE_MARKER))
		return 0;
	e->in_step = true;
	if (m.role == ROLE_MARKER && e->step >= 0) {
		e->marker = true;
		/* `N/commit_success.txt` says an all-digit step is Orbax's, not InternEvo's */
		if (m.kind == LAYOUT_ORBAX)
			c->steps[e->step].kind = LAYOUT_ORBAX;
	}
	return 0;
}

/*
 * imp_scan - append the entries of DIR/rel (rel "" for DIR itself) to c->v, sorted by name,
 * each directory followed by what it holds. An unreadable directory is recorded as a failure
 * (its entry stays: it is created, empty). Returns 0 or -ENOMEM.
 */
static int imp_scan(struct imp_ctx *c, const char *rel, size_t parent, int depth)
{
	char path[PATH_CAP];
	char **names = NULL;
	size_t nnames = 0, capnames = 0, i;
	struct dirent *d;
	int step = parent == SIZE_MAX ? -1 : c->v[parent].step;
	DIR *dir;
	int rc = 0;

	if ((size_t)snprintf(path, sizeof(path), "%s%s%s", c->src, rel[0] ? "/" : "", rel) >=
	    sizeof(path))
		return imp_fail_add(c, step, rel, "path too long");
	if (depth > IMPORT_DEPTH_MAX)
		return imp_fail_add(c, step, rel, "nested deeper than %d directories: not imported",
				    IMPORT_DEPTH_MAX);
	dir = opendir(path);
	if (!dir)
		return imp_fail_add(c, step, rel, "cannot read directory: %s", strerror(errno));
	errno = 0;
	while ((d = readdir(dir))) {
		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		if (grow(&names, &capnames, nnames, sizeof(*names)) < 0 ||
		    !(names[nnames] = strdup(d->d_name))) {
			rc = -ENOMEM;
			goto out;
		}
		nnames++;
	}
	if (errno) {
		rc = imp_fail_add(c, step, rel, "cannot read directory: %s", strerror(errno));
		goto out;
	}
	if (nnames)
		qsort(names, nnames, sizeof(*names), imp_name_cmp);
	for (i = 0; i < nnames && rc == 0; i++) {
		struct imp_ent *e;
		size_t len = strlen(rel) + 1 + strlen(names[i]) + 1, me;

		if (!rel[0] && c->at_root && !strcmp(names[i], ".ckptfs")) {
			/* the daemon's own directory: never imported over */
			if (grow(&c->skipped, &c->capskipped, c->nskipped, sizeof(*c->skipped)) < 0 ||
			    !(c->skipped[c->nskipped] = strdup(names[i]))) {
				rc = -ENOMEM;
				break;
			}
			c->nskipped++;
			continue;
		}
		if (grow(&c->v, &c->cap, c->n, sizeof(*c->v)) < 0) {
			rc = -ENOMEM;
			break;
		}
		me = c->n;
		e = &c->v[me];
		memset(e, 0, sizeof(*e));
		e->parent = parent;
		e->step = -1;
		if (!(e->rel = malloc(len))) {
			rc = -ENOMEM;
			break;
		}
		snprintf(e->rel, len, "%s%s%s", rel, rel[0] ? "/" : "", names[i]);
		e->name = e->rel + (rel[0] ? strlen(rel) + 1 : 0);
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", c->src, e->rel) >= sizeof(path)) {
			char *r = e->rel;

			rc = imp_fail_add(c, step, r, "path too long");
			free(r);
			continue;
		}
		if (lstat(path, &e->st) < 0) {
			int err = errno;
			char *r = e->rel;

			rc = imp_fail_add(c, step, r, "cannot stat: %s", strerror(err));
			free(r);
			continue;
		}
		c->n++;
		if ((rc = imp_classify(c, me)) < 0)
			break;
		if (S_ISREG(c->v[me].st.st_mode) && !c->v[me].tracker)
			c->total += (uint64_t)c->v[me].st.st_size;
		if (S_ISDIR(c->v[me].st.st_mode)) {
			char *sub = strdup(c->v[me].rel); /* c->v moves as it grows */

			if (!sub) {
				rc = -ENOMEM;
				break;
			}
			rc = imp_scan(c, sub, me, depth + 1);
			free(sub);
		}
	}
out:
	for (i = 0; i < nnames; i++)
		free(names[i]);
	free(names);
	closedir(dir);
	return rc;
}

/* imp_release - idx_file_set_content's release callback: new files release nothing. */
static bool imp_release(const uint8_t hash[IDX_HASH_LEN], void *arg)
{
	(void)hash;
	(void)arg;
	return false;
}

/* imp_txn - make sure a transaction is open. Returns 0 or -errno of the index. */
static int imp_txn(struct imp_ctx *c)
{
	int rc;

	if (c->in_txn)
		return 0;
	if ((rc = idx_begin(c->r->ix)) < 0)
		return rc;
	c->in_txn = true;
	c->txn_files = 0;
	c->txn_bytes = 0;
	return 0;
}

/*
 * imp_commit - make the chunks put so far durable (store_sync), then commit the open
 * transaction, if any. Returns 0, -EIO (store_sync), or -errno of the index (rolled back).
 */
static int imp_commit(struct imp_ctx *c)
{
	int rc;

	if (!c->in_txn)
		return 0;
	c->in_txn = false;
	rc = store_sync(c->r->st);
	if (rc == 0)
		rc = idx_commit(c->r->ix);
	if (rc < 0)
		idx_rollback(c->r->ix);
	return rc;
}

/* imp_inode - create inode *a named name in directory parent (open transaction); a directory
 * adds a link to its parent. Returns 0 or -errno of the index. */
static int imp_inode(struct imp_ctx *c, uint64_t parent, const char *name, struct idx_inode *a,
		     const char *target, uint64_t *ret_ino)
{
	uint64_t ino;
	int rc;

	if ((rc = imp_txn(c)) < 0)
		return rc;
	rc = idx_inode_create(c->r->ix, a, &ino);
	if (rc == 0 && target)
		rc = idx_symlink_set(c->r->ix, ino, target);
	if (rc == 0)
		rc = idx_dentry_add(c->r->ix, parent, name, ino);
	if (rc == 0 && S_ISDIR(a->mode)) {
		struct idx_inode pa;

		rc = idx_inode_get(c->r->ix, parent, &pa);
		if (rc == 0) {
			pa.nlink++;
			rc = idx_inode_update(c->r->ix, &pa);
		}
	}
	if (rc == 0)
		*ret_ino = ino;
	return rc;
}

/* imp_attr - the attributes of source st for a new inode. */
static void imp_attr(const struct stat *st, struct idx_inode *a)
{
	memset(a, 0, sizeof(*a));
	a->mode = (uint32_t)st->st_mode;
	a->uid = (uint32_t)st->st_uid;
	a->gid = (uint32_t)st->st_gid;
	a->nlink = S_ISDIR(st->st_mode) ? 2 : 1;
	a->atime_ns = (int64_t)st->st_atim.tv_sec * 1000000000 + st->st_atim.tv_nsec;
	a->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
	a->ctime_ns = a->mtime_ns;
}

/* imp_pread - validate_read_fn over a source file descriptor. */
static ssize_t imp_pread(void *arg, void *buf, size_t len, uint64_t off)
{
	int fd = *(int *)arg;
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* One chunk to put. */
struct imp_put {
	const uint8_t *p; /* borrowed: bytes in imp_ctx.buf */
	size_t len;
	struct store_chunk_info info;
	int rc; /* store_chunk_put's */
};

/* Puts shared by the workers of one window. */
struct imp_pool {
	struct store *st;
	struct imp_put *v;
	size_t n;
	atomic_size_t next; /* the next put to take */
};

static void *imp_worker(void *arg)
{
	struct imp_pool *pool = arg;
	size_t i;

	while ((i = atomic_fetch_add(&pool->next, 1)) < pool->n)
		pool->v[i].rc = store_chunk_put(pool->st, pool->v[i].p, pool->v[i].len,
						 &pool->v[i].info);
	return NULL;
}

/*
 * imp_pool_run - put pool->v[0..n) with one thread per online CPU, at most IMPORT_THREADS
 * (store_chunk_put is thread-safe; each compresses and fdatasyncs its chunk, and those overlap).
 * Each put's result is in its rc. Returns 0 (when a thread cannot start, the calling thread
 * does the remaining puts itself).
 */
static int imp_pool_run(struct imp_pool *pool)
{
	pthread_t t[IMPORT_THREADS];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t nt = cpus < 1 ? 1 : cpus > IMPORT_THREADS ? IMPORT_THREADS : (size_t)cpus;
	size_t started = 0;

	if (nt > pool->n)
		nt = pool->n;
	atomic_store(&pool->next, 0);
	for (size_t i = 1; i < nt; i++) {
		if (pthread_create(&t[started], NULL, imp_worker, pool) != 0)
			break;
		started++;
	}
	imp_worker(pool); /* the calling thread works too */
	for (size_t i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	return 0;
}

/*
 * imp_file - import regular file c->v[i]: chunks into the store, then its inode, dentry and
 * extents into the open transaction. A file that cannot be read (or changes while read) is
 * recorded as a failure and left out.
 * Returns 0 (imported or recorded as failed), -ENOMEM, or -errno of the store or the index
 * (fatal; what failed is printed).
 */
static int imp_file(struct imp_ctx *c, size_t i, uint64_t parent)
{
	struct imp_ent *e = &c->v[i];
	char path[PATH_CAP], why[256] = "";
	struct store_hash whole;
	struct idx_inode a;
	struct stat st;
	uint64_t pos = 0;
	size_t have = 0;
	bool eof = false;
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/%s", c->src, e->rel); /* length checked by imp_scan */
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return imp_fail_add(c, e->step, e->rel, "cannot open: %s", strerror(errno));
	if (fstat(fd, &st) < 0) {
		rc = imp_fail_add(c, e->step, e->rel, "cannot stat: %s", strerror(errno));
		close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return imp_fail_add(c, e->step, e->rel, "no longer a regular file");
	}
	store_hasher_reset(c->hs);
	c->next = 0;
	/* each run of data (store_data_run: holes of a sparse file stay holes, as the daemon keeps
	 * them), cut like the daemon cuts a file: the chunker restarts at each run */
	for (uint64_t end = 0, hole_at = 0;; hole_at = end) {
		uint64_t start = 0;
		int more = store_data_run(fd, hole_at, (uint64_t)st.st_size, &start, &end);

		if (more < 0) {
			rc = imp_fail_add(c, e->step, e->rel, "cannot find its data: %s",
					  strerror(-more));
			close(fd);
			return rc;
		}
		if (!more) {
			store_hasher_hole(c->hs, hole_at, (uint64_t)st.st_size - hole_at);
			break;
		}
		store_hasher_hole(c->hs, hole_at, start - hole_at);
		pos = start;
		eof = false;
		have = 0;
		while (!eof || have) {
			struct imp_pool pool = { .st = c->r->st };
			size_t off = 0, k;

			while (!eof && have < IMPORT_WINDOW) {
				uint64_t at = pos + have;
				size_t want = IMPORT_WINDOW - have;
				ssize_t n;

				if (want > end - at)
					want = (size_t)(end - at);
				n = want ? pread(fd, c->buf + have, want, (off_t)at) : 0;
				if (n < 0 && errno == EINTR)
					continue;
				if (n < 0) {
					rc = imp_fail_add(c, e->step, e->rel, "cannot read at offset %"
							  PRIu64 ": %s", at, strerror(errno));
					close(fd);
					return rc;
				}
				if (n == 0 && want) {
					rc = imp_fail_add(c, e->step, e->rel, "changed while being read "
							  "(%" PRIu64 " bytes at open, ended at %" PRIu64 ")",
							  (uint64_t)st.st_size, at);
					close(fd);
					return rc;
				}
				if (at + (uint64_t)n >= end)
					eof = true;
				have += (size_t)n;
			}
			/* cut the window, each cut over at most 2 * STORE_CHUNK_MAX bytes (a chunk's
			 * boundary depends only on its own bytes: the same cuts as the daemon's) */
			for (;;) {
				size_t avail = have - off, win = 2 * (size_t)STORE_CHUNK_MAX, cut;
				bool last = eof && avail <= win;

				cut = store_cdc_cut(c->buf + off, avail < win ? avail : win, last);
				if (cut == 0)
					break;
				assert(c->nputs < IMPORT_WINDOW / STORE_CHUNK_MIN + 1);
				c->puts[c->nputs].p = c->buf + off;
				c->puts[c->nputs].len = cut;
				c->puts[c->nputs].rc = 0;
				c->nputs++;
				off += cut;
			}
			pool.v = c->puts;
			pool.n = c->nputs;
			rc = imp_pool_run(&pool);
			if (rc < 0) {
				errmsg("cannot start threads: %s", strerror(-rc));
				close(fd);
				return rc;
			}
			for (k = 0; k < c->nputs; k++) {
				const struct imp_put *u = &c->puts[k];

				if (u->rc < 0) {
					errmsg("cannot store a chunk of '%s' in store '%s': %s", e->rel,
					       c->root, strerror(-u->rc));
					c->nputs = 0;
					close(fd);
					return u->rc;
				}
				if (grow(&c->ext, &c->capext, c->next, sizeof(*c->ext)) < 0) {
					c->nputs = 0;
					close(fd);
					return -ENOMEM;
				}
				c->ext[c->next].offset = pos;
				c->ext[c->next].length = (uint32_t)u->len;
				c->ext[c->next].stored_size = u->info.stored_size;
				c->ext[c->next].codec = u->info.codec;
				memcpy(c->ext[c->next].hash, u->info.hash.b, IDX_HASH_LEN);
				c->next++;
				if (u->info.existed) {
					c->dedup_hits++;
				} else {
					c->chunks_written++;
					c->stored_added += u->info.stored_size;
				}
				store_hasher_update(c->hs, u->p, u->len);
				pos += u->len;
				c->done += u->len;
			}
			c->nputs = 0;
			import_progress(c, false);
			memmove(c->buf, c->buf + off, have - off);
			have -= off;
		}
	}
	{
		struct stat now;

		if (fstat(fd, &now) < 0 || now.st_size != st.st_size) {
			rc = imp_fail_add(c, e->step, e->rel, "changed while being read (%" PRIu64
					  " bytes at open, %" PRIu64 " now)", (uint64_t)st.st_size,
					  (uint64_t)now.st_size);
			close(fd);
			return rc;
		}
	}
	pos = (uint64_t)st.st_size;
	store_hasher_digest(c->hs, &whole);
	imp_attr(&st, &a);
	if (e->in_step) {
		rc = validate_file(e->name, pos, imp_pread, &fd, NULL, why, sizeof(why));
		if (rc == 1) {
			a.flags = IDX_INODE_VALID;
		} else if (rc == -EBADMSG) {
			a.flags = IDX_INODE_MALFORMED;
		} else if (rc < 0) {
			rc = imp_fail_add(c, e->step, e->rel, "cannot read for its structure check: %s",
					  strerror(-rc));
			close(fd);
			return rc;
		}
	}
	close(fd);
	rc = imp_inode(c, parent, e->name, &a, NULL, &e->ino);
	if (rc == 0)
		rc = idx_file_set_content(c->r->ix, e->ino, c->ext, c->next, pos, whole.b,
					  a.mtime_ns, imp_release, NULL);
	if (rc < 0) {
		e->ino = 0;
		errmsg("cannot record '%s' in the index of store '%s': %s", e->rel, c->root,
		       strerror(-rc));
		return rc;
	}
	c->files++;
	c->logical += pos;
	c->txn_files++;
	c->txn_bytes += pos;
	if (e->step >= 0) {
		struct imp_step *s = &c->steps[e->step];

		s->files++;
		s->bytes += pos;
		if (a.flags & IDX_INODE_MALFORMED) {
			s->malformed++;
			if (!s->bad[0])
				snprintf(s->bad, sizeof(s->bad), "'%s' is malformed: %s", e->name,
					 why);
		}
		if (e->marker && !(a.flags & IDX_INODE_MALFORMED) && !s->sealed_by[0])
			snprintf(s->sealed_by, sizeof(s->sealed_by), "marker '%s'", e->name);
	}
	if (c->txn_files >= IMPORT_TXN_FILES || c->txn_bytes >= IMPORT_TXN_BYTES) {
		rc = imp_commit(c);
		if (rc < 0) {
			errmsg("cannot commit to store '%s': %s", c->root, strerror(-rc));
			return rc;
		}
	}
	return 0;
}

/* imp_read_small - read regular file path whole (at most IMPORT_TRACKER_MAX bytes).
 * @ret: owned buffer (free()), NULL when the file is empty. Returns 0 or -errno. */
static int imp_read_small(const char *path, char **ret, size_t *ret_len)
{
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK), rc = 0;

	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t n;

		if (len == cap) {
			char *nb;

			if (cap >= IMPORT_TRACKER_MAX) {
				rc = -EFBIG;
				break;
			}
			cap = cap ? 2 * cap : 4096;
			if (!(nb = realloc(buf, cap))) {
				rc = -ENOMEM;
				break;
			}
			buf = nb;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			break;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	*ret = len ? buf : NULL;
	if (!len)
		free(buf);
	*ret_len = len;
	return 0;
}

/*
 * imp_claims - record every top-level tracker as a claim (open transaction) and mark the steps
 * it seals: of each layout sharing the tracker, the step it names and every older one.
 * Returns 0 or -errno of the index (printed).
 */
static int imp_claims(struct imp_ctx *c)
{
	int rc;

	for (size_t i = 0; i < c->n; i++) {
		struct imp_ent *e = &c->v[i];
		struct layout_tracker t;
		struct layout_match m;
		struct imp_claim *cl;
		char path[PATH_CAP], *buf = NULL;
		size_t len = 0;
		int64_t id;

		if (!e->tracker)
			continue;
		snprintf(path, sizeof(path), "%s/%s", c->src, e->rel);
		rc = imp_read_small(path, &buf, &len);
		if (rc < 0) {
			if ((rc = imp_fail_add(c, -1, e->rel, "cannot read tracker: %s",
					       strerror(-rc))) < 0)
				return rc;
			continue;
		}
		if (layout_classify(e->rel, LAYOUT_NONE, &m) < 0 ||
		    grow(&c->claims, &c->capclaims, c->nclaims, sizeof(*c->claims)) < 0) {
			free(buf);
			errmsg("out of memory");
			return -ENOMEM;
		}
		cl = &c->claims[c->nclaims++];
		memset(cl, 0, sizeof(*cl));
		cl->ent = i;
		cl->kind = m.kind;
		escape_bytes((const uint8_t *)buf, len, cl->content, sizeof(cl->content));
		cl->step = layout_tracker_parse(m.kind, e->name, buf, len, &t) == 0 ? t.step : -1;
		rc = imp_txn(c);
		if (rc == 0)
			rc = idx_claim_add(c->r->ix, e->rel, buf, len, cl->step, ckpt_now_ns(), &id);
		free(buf);
		if (rc < 0) {
			errmsg("cannot record the claim of tracker '%s' in store '%s': %s", e->rel,
			       c->root, strerror(-rc));
			return rc;
		}
		if (cl->step < 0)
			continue;
		for (size_t j = 0; j < c->nsteps; j++) {
			struct imp_step *s = &c->steps[j];

			if (s->step > cl->step || !layout_tracker_shared(m.kind, s->kind))
				continue;
			if (s->step == cl->step || !s->sealed_by[0])
				snprintf(s->sealed_by, sizeof(s->sealed_by),
					 s->step == cl->step ? "tracker '%s' names it"
							     : "tracker '%s' names a later step",
					 e->rel);
			cl->sealed++;
		}
	}
	return 0;
}

/* imp_walk_ctx: the figures of a step as steps.c's walk_tree computes them. */
struct imp_walk {
	struct idx *ix;
	uint64_t *dirs;
	size_t ndirs, capdirs;
	uint64_t files, bytes, stored;
	struct store_hasher *digest;
};

static int imp_walk_ent(const char *name, uint64_t ino, uint32_t mode, int64_t cookie, void *arg)
{
	struct imp_walk *w = arg;
	struct idx_inode a;
	uint64_t st = 0;
	int rc;

	(void)cookie;
	if (S_ISDIR(mode)) {
		if (grow(&w->dirs, &w->capdirs, w->ndirs, sizeof(*w->dirs)) < 0)
			return -ENOMEM;
		w->dirs[w->ndirs++] = ino;
		return 0;
	}
	if (!S_ISREG(mode))
		return 0;
	if ((rc = idx_inode_get(w->ix, ino, &a)) < 0)
		return rc;
	w->files++;
	w->bytes += a.size;
	if (idx_file_stored_bytes(w->ix, ino, &st) == 0)
		w->stored += st;
	store_hasher_update(w->digest, name, strlen(name) + 1);
	store_hasher_update(w->digest, a.hash, IDX_HASH_LEN);
	return 0;
}

/*
 * imp_figures - record step s's figures and digest exactly as fs/steps.c walk_tree() computes
 * them (files in listing order, directories one after another). Returns 0 or -errno.
 */
static int imp_figures(struct imp_ctx *c, const struct imp_step *s)
{
	struct imp_walk w = { .ix = c->r->ix };
	struct store_hash dg;
	int rc;

	if (!(w.digest = store_hasher_new()))
		return -ENOMEM;
	rc = idx_dir_list(c->r->ix, c->v[s->ent].ino, 0, imp_walk_ent, &w);
	for (size_t i = 0; rc >= 0 && i < w.ndirs; i++)
		rc = idx_dir_list(c->r->ix, w.dirs[i], 0, imp_walk_ent, &w);
	if (rc >= 0) {
		store_hasher_digest(w.digest, &dg);
		rc = idx_step_set_figures(c->r->ix, s->id, w.files, w.bytes, w.stored, dg.b);
	}
	free(w.dirs);
	store_hasher_free(w.digest);
	return rc < 0 ? rc : 0;
}

/*
 * imp_judge - decide and record the state of every step (invariant 4 above), in the open
 * transaction. Returns 0 or -errno of the index.
 */
static int imp_judge(struct imp_ctx *c)
{
	int64_t now = ckpt_now_ns();
	int rc;

	for (size_t i = 0; i < c->nsteps; i++) {
		struct imp_step *s = &c->steps[i];
		char note[PATH_CAP + 320];

		if (!s->id)
			continue;
		if ((rc = imp_txn(c)) < 0 || (rc = imp_figures(c, s)) < 0)
			return rc;
		if (s->failed) {
			s->state = IDX_STEP_WRITING;
			snprintf(s->why, sizeof(s->why), "%u file(s) could not be read", s->failed);
		} else if (!s->sealed_by[0]) {
			s->state = IDX_STEP_WRITING;
			snprintf(s->why, sizeof(s->why), "not sealed: %s",
				 layout_tracker_path(s->kind, s->step, -1, note, sizeof(note)) > 0
					 ? "no tracker names it or a later step"
					 : "no commit marker in it");
		} else if (s->files == 0) {
			s->state = IDX_STEP_SEALED;
			snprintf(s->why, sizeof(s->why), "sealed by %s, but holds no file",
				 s->sealed_by);
		} else if (s->malformed) {
			s->state = IDX_STEP_SEALED;
			snprintf(s->why, sizeof(s->why), "%u malformed of %" PRIu64 " files; %s",
				 s->malformed, s->files, s->bad);
		} else {
			s->state = IDX_STEP_COMPLETE;
			snprintf(s->why, sizeof(s->why), "sealed by %s, every file whole",
				 s->sealed_by);
		}
		if (s->sealed_by[0] && s->state != IDX_STEP_WRITING) {
			snprintf(note, sizeof(note), "imported from '%s': %s", c->src, s->sealed_by);
			if ((rc = idx_step_set_state(c->r->ix, s->id, IDX_STEP_SEALED, now, note)) <
			    0)
				return rc;
		}
		snprintf(note, sizeof(note), "imported from '%s': %s", c->src, s->why);
		if ((rc = idx_step_set_state(c->r->ix, s->id, s->state, now, note)) < 0)
			return rc;
	}
	return 0;
}

/*
 * imp_dest - the directory to import into: --dest PATH (relative to the mount root), created
 * with its missing parents (mode 0755, owned by the caller) in the open transaction.
 * Returns 0, -ENOTDIR (a component is not a directory), -EPERM (under /.ckptfs), -ENOMEM, or
 * -errno of the index.
 */
static int imp_dest(struct imp_ctx *c, const char *dest, uint64_t *ret_ino)
{
	uint64_t ino = IDX_ROOT_INO;
	char *copy = strdup(dest), *save = NULL, *tok;
	bool first = true;
	int rc = 0;

	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		struct idx_inode in;
		uint64_t next;

		if (!strcmp(tok, "."))
			continue;
		if (!strcmp(tok, "..") || (first && !strcmp(tok, ".ckptfs"))) {
			rc = -EPERM;
			break;
		}
		first = false;
		rc = idx_dentry_lookup(c->r->ix, ino, tok, &next);
		if (rc == -ENOENT) {
			struct stat st = { 0 };

			st.st_mode = S_IFDIR | 0755;
			st.st_uid = getuid();
			st.st_gid = getgid();
			clock_gettime(CLOCK_REALTIME, &st.st_mtim);
			st.st_atim = st.st_mtim;
			imp_attr(&st, &in);
			rc = imp_inode(c, ino, tok, &in, NULL, &next);
			if (rc == 0)
				c->dirs++;
		}
		if (rc < 0)
			break;
		if ((rc = idx_inode_get(c->r->ix, next, &in)) < 0)
			break;
		if (!S_ISDIR(in.mode)) {
			rc = -ENOTDIR;
			break;
		}
		ino = next;
	}
	free(copy);
	if (rc == 0)
		*ret_ino = ino;
	return rc;
}

/* imp_open - open (creating) root exclusively; refuses a mounted store. Returns EXIT_OK or
 * EXIT_ERROR (printed). */
static int imp_open(struct imp_ctx *c, bool *ret_created)
{
	char err[1024] = "";
	struct stat st;
	int rc;

	*ret_created = stat(c->root, &st) < 0 && errno == ENOENT;
	rc = ckpt_repo_open(c->root, REPO_CREATE | REPO_EXCLUSIVE, NULL, err, sizeof(err), &c->r);
	if (rc == -EBUSY) {
		if (ckpt_repo_open(c->root, REPO_RDONLY, NULL, err, sizeof(err), &c->r) == 0 &&
		    c->r->mounted)
			errmsg("store '%s' is mounted by pid %d; importing needs the store "
			       "unmounted: unmount it first (fusermount3 -u MOUNTPOINT), then run "
			       "'ckptctl %s import %s' again",
			       c->root, (int)c->r->owner_pid, c->root, c->src);
		else
			errmsg("store '%s' is in use by another process; retry when it is done",
			       c->root);
		ckpt_repo_close(c->r);
		c->r = NULL;
		return EXIT_ERROR;
	}
	if (rc < 0) {
		errmsg("%s", err[0] ? err : strerror(-rc));
		return EXIT_ERROR;
	}
	return EXIT_OK;
}

static const char *imp_state_name(const struct imp_step *s)
{
	return s->id ? idx_step_state_name(s->state) : "not recorded";
}

/* imp_report - the result on stdout: text, or one JSON object with --json. */
static void imp_report(struct imp_ctx *c, const char *dest, double secs)
{
	char b1[64], b2[64];
	size_t i;

	if (opt_json) {
		json_t *o = json_object(), *a = json_array();

		json_object_set_new(o, "store", json_string(c->root));
		json_object_set_new(o, "source", json_string(c->src));
		json_object_set_new(o, "destination", json_string(dest));
		json_object_set_new(o, "files", json_u64(c->files));
		json_object_set_new(o, "dirs", json_u64(c->dirs));
		json_object_set_new(o, "symlinks", json_u64(c->symlinks));
		json_object_set_new(o, "logical_bytes", json_u64(c->logical));
		json_object_set_new(o, "stored_bytes_added", json_u64(c->stored_added));
		json_object_set_new(o, "chunks_written", json_u64(c->chunks_written));
		json_object_set_new(o, "dedup_hits", json_u64(c->dedup_hits));
		json_object_set_new(o, "seconds", json_real(secs));
		json_object_set_new(o, "mb_per_s", json_real(imp_mbps(c, secs)));
		for (i = 0; i < c->nsteps; i++) {
			const struct imp_step *s = &c->steps[i];
			json_t *so = json_object();

			json_object_set_new(so, "id", s->id ? json_integer(s->id) : json_null());
			json_object_set_new(so, "name", json_name(c->v[s->ent].name));
			json_object_set_new(so, "step", json_integer(s->step));
			json_object_set_new(so, "layout", json_string(kind_name(s->kind)));
			json_object_set_new(so, "files", json_u64(s->files));
			json_object_set_new(so, "bytes", json_u64(s->bytes));
			json_object_set_new(so, "state", json_string(imp_state_name(s)));
			json_object_set_new(so, "sealed_by", s->sealed_by[0]
								  ? json_string(s->sealed_by)
								  : json_null());
			json_object_set_new(so, "note", json_string(s->why));
			json_array_append_new(a, so);
		}
		json_object_set_new(o, "steps", a);
		a = json_array();
		for (i = 0; i < c->nclaims; i++) {
			json_t *co = json_object();

			json_object_set_new(co, "tracker", json_name(c->v[c->claims[i].ent].rel));
			json_object_set_new(co, "content", json_string(c->claims[i].content));
			json_object_set_new(co, "step", c->claims[i].step >= 0
								? json_integer(c->claims[i].step)
								: json_null());
			json_object_set_new(co, "steps_sealed", json_integer(c->claims[i].sealed));
			json_array_append_new(a, co);
		}
		json_object_set_new(o, "claims", a);
		a = json_array();
		for (i = 0; i < c->nfail; i++) {
			json_t *fo = json_object();

			json_object_set_new(fo, "path", json_name(c->fail[i].path));
			json_object_set_new(fo, "reason", json_string(c->fail[i].reason));
			json_array_append_new(a, fo);
		}
		json_object_set_new(o, "failed", a);
		a = json_array();
		for (i = 0; i < c->nskipped; i++)
			json_array_append_new(a, json_name(c->skipped[i]));
		json_object_set_new(o, "skipped", a);
		json_print(o);
		return;
	}
	printf("imported '%s' into store '%s' at '%s': %" PRIu64 " files, %" PRIu64
	       " directories, %" PRIu64 " symlinks, %s\n",
	       c->src, c->root, dest, c->files, c->dirs, c->symlinks,
	       fmt_size(c->logical, b1, sizeof(b1)));
	if (c->nsteps) {
		int wname = 4, wl = 6, wf = 5;

		for (i = 0; i < c->nsteps; i++) {
			int k;

			if ((k = (int)strlen(c->v[c->steps[i].ent].name)) > wname)
				wname = k;
			if ((k = (int)strlen(kind_name(c->steps[i].kind))) > wl)
				wl = k;
			if ((k = numw(c->steps[i].files)) > wf)
				wf = k;
		}
		printf("%-*s  %-*s  %*s  %10s  %-10s  %s\n", wname, "STEP", wl, "LAYOUT", wf,
		       "FILES", "BYTES", "STATE", "WHY");
		for (i = 0; i < c->nsteps; i++) {
			const struct imp_step *s = &c->steps[i];

			printf("%-*s  %-*s  %*" PRIu64 "  %10s  %-10s  %s\n", wname,
			       c->v[s->ent].name, wl, kind_name(s->kind), wf, s->files,
			       fmt_short_size(s->bytes, b1, sizeof(b1)), imp_state_name(s), s->why);
		}
	}
	for (i = 0; i < c->nclaims; i++)
		printf("tracker: %s = \"%s\" recorded as a claim (trackers are virtual: a mount "
		       "serves the newest complete step)\n",
		       c->v[c->claims[i].ent].rel, c->claims[i].content);
	for (i = 0; i < c->nskipped; i++)
		printf("skipped: %s (the name of the mount's own directory)\n", c->skipped[i]);
	printf("stored: %s added, %" PRIu64 " chunks written, %" PRIu64 " dedup hits; %.1f MB/s "
	       "(%.2f s)\n",
	       fmt_size(c->stored_added, b2, sizeof(b2)), c->chunks_written, c->dedup_hits,
	       imp_mbps(c, secs), secs);
	for (i = 0; i < c->nfail; i++)
		printf("failed: %s: %s\n", c->fail[i].path, c->fail[i].reason);
}

static int cmd_import(const char *root, const char *dest, const char *src)
{
	struct imp_ctx c = { .root = root, .src = src };
	char **taken = NULL;
	size_t ntaken = 0, captaken = 0, i;
	bool created = false, restore_clean = false;
	struct stat st;
	int rc, status = EXIT_ERROR;

	clock_gettime(CLOCK_MONOTONIC, &c.start);
	if (stat(src, &st) < 0) {
		errmsg("cannot import '%s': %s", src, strerror(errno));
		return EXIT_ERROR;
	}
	if (!S_ISDIR(st.st_mode)) {
		errmsg("cannot import '%s': %s", src, strerror(ENOTDIR));
		return EXIT_ERROR;
	}
	/* --dest: anything but the root turns steps and trackers into plain files */
	c.at_root = true;
	for (const char *p = dest; *p; p++)
		if (*p != '/' && !(*p == '.' && (p[1] == '/' || !p[1]) && (p == dest || p[-1] == '/')))
			c.at_root = false;
	/* 1. scan DIR before touching the store */
	rc = imp_scan(&c, "", SIZE_MAX, 0);
	if (rc < 0) {
		errmsg("out of memory");
		goto out;
	}
	if (!c.n && c.nfail) {
		errmsg("cannot import '%s': %s", src, c.fail[0].reason);
		goto out;
	}
	c.tty = isatty(STDERR_FILENO);
	c.buf = malloc(IMPORT_WINDOW);
	c.puts = calloc(IMPORT_WINDOW / STORE_CHUNK_MIN + 1, sizeof(*c.puts));
	c.hs = store_hasher_new();
	if (!c.buf || !c.puts || !c.hs) {
		errmsg("out of memory");
		goto out;
	}
	if (imp_open(&c, &created) != EXIT_OK)
		goto out;
	restore_clean = created || c.r->was_clean;
	rc = imp_dest(&c, dest, &c.dest_ino);
	if (rc < 0) {
		if (rc == -ENOTDIR || rc == -EPERM)
			errmsg("cannot import into '%s': %s", dest,
			       rc == -EPERM ? "not a place in the namespace ('..' or /.ckptfs)"
					    : "not a directory in the store");
		else
			index_error(root, "create the destination", rc);
		goto out_rollback;
	}
	/* 2. refuse names already taken at the destination (trackers are virtual: never) */
	for (i = 0; i < c.n; i++) {
		uint64_t ino;

		if (c.v[i].parent != SIZE_MAX || c.v[i].tracker)
			continue;
		rc = idx_dentry_lookup(c.r->ix, c.dest_ino, c.v[i].name, &ino);
		if (rc == -ENOENT)
			continue;
		if (rc < 0) {
			index_error(root, "look up a name", rc);
			goto out_rollback;
		}
		if (grow(&taken, &captaken, ntaken, sizeof(*taken)) < 0) {
			errmsg("out of memory");
			goto out_rollback;
		}
		taken[ntaken++] = c.v[i].rel;
	}
	if (ntaken) {
		errmsg("%zu name(s) of '%s' already exist at '%s' in store '%s' (%s%s); import "
		       "never replaces anything: remove them through a mount, or import with "
		       "--dest PATH",
		       ntaken, src, dest, root, taken[0], ntaken > 1 ? ", ..." : "");
		goto out_rollback;
	}
	/* until the import is over, the next mount sweeps what an interrupted one left */
	rc = ckpt_repo_set_clean(c.r, false);
	if (rc < 0) {
		errmsg("cannot update '%s/clean': %s", root, strerror(-rc));
		goto out_rollback;
	}
	/* 3. trackers: claims, and the steps they seal */
	if (imp_claims(&c) < 0)
		goto out_rollback;
	/* 4. the tree, in pre-order */
	import_progress(&c, true);
	for (i = 0; i < c.n; i++) {
		struct imp_ent *e = &c.v[i];
		uint64_t parent = e->parent == SIZE_MAX ? c.dest_ino : c.v[e->parent].ino;
		struct idx_inode a;

		if (e->tracker)
			continue;
		assert(parent); /* a directory that cannot be created stops the import */
		if (S_ISREG(e->st.st_mode)) {
			rc = imp_file(&c, i, parent);
			if (rc == -ENOMEM)
				goto out_oom;
			if (rc < 0)
				goto out_progress;
			continue;
		}
		if (S_ISDIR(e->st.st_mode)) {
			imp_attr(&e->st, &a);
			rc = imp_inode(&c, parent, e->name, &a, NULL, &e->ino);
			if (rc == 0 && e->parent == SIZE_MAX && e->step >= 0) {
				struct imp_step *s = &c.steps[e->step];

				rc = idx_step_create(c.r->ix, s->kind, e->name, s->step, e->ino,
						     ckpt_now_ns(), &s->id);
			}
			if (rc < 0) {
				progress_clear(c.tty);
				index_error(root, "create a directory", rc);
				goto out_rollback;
			}
			c.dirs++;
			continue;
		}
		if (S_ISLNK(e->st.st_mode)) {
			char path[PATH_CAP], target[PATH_CAP];
			ssize_t n;

			snprintf(path, sizeof(path), "%s/%s", src, e->rel);
			n = readlink(path, target, sizeof(target) - 1);
			if (n < 0) {
				if (imp_fail_add(&c, e->step, e->rel, "cannot read symlink: %s",
						 strerror(errno)) < 0)
					goto out_oom;
				continue;
			}
			target[n] = '\0';
			imp_attr(&e->st, &a);
			a.size = (uint64_t)n;
			rc = imp_inode(&c, parent, e->name, &a, target, &e->ino);
			if (rc < 0) {
				progress_clear(c.tty);
				index_error(root, "create a symlink", rc);
				goto out_rollback;
			}
			c.symlinks++;
			continue;
		}
		/* a FIFO, socket or device node: its metadata, as the daemon keeps it (mknod) */
		imp_attr(&e->st, &a);
		if (S_ISCHR(e->st.st_mode) || S_ISBLK(e->st.st_mode))
			a.rdev = (uint64_t)e->st.st_rdev;
		rc = imp_inode(&c, parent, e->name, &a, NULL, &e->ino);
		if (rc < 0) {
			progress_clear(c.tty);
			index_error(root, "create a special file", rc);
			goto out_rollback;
		}
	}
	/* 5. the steps' states, the destination's times, durable */
	rc = imp_judge(&c);
	if (rc == 0 && (rc = imp_txn(&c)) == 0) {
		struct idx_inode d;

		rc = idx_inode_get(c.r->ix, c.dest_ino, &d);
		if (rc == 0) {
			d.mtime_ns = d.ctime_ns = ckpt_now_ns();
			rc = idx_inode_update(c.r->ix, &d);
		}
	}
	if (rc == 0)
		rc = imp_commit(&c);
	if (rc < 0) {
		progress_clear(c.tty);
		index_error(root, "record the steps", rc);
		goto out_rollback;
	}
	import_progress(&c, true);
	progress_clear(c.tty);
	if (restore_clean && !c.nfail && (rc = ckpt_repo_set_clean(c.r, true)) < 0)
		errmsg("cannot update '%s/clean': %s (the next mount checks the store)", root,
		       strerror(-rc));
	imp_report(&c, dest, imp_elapsed(&c));
	if (c.nfail)
		errmsg("%zu entr%s of '%s' could not be imported (listed above); the rest was",
		       c.nfail, c.nfail == 1 ? "y" : "ies", src);
	status = c.nfail ? EXIT_DAMAGE : EXIT_OK;
	goto out;

out_oom:
	errmsg("out of memory");
out_progress:
	progress_clear(c.tty);
out_rollback:
	if (c.in_txn) {
		idx_rollback(c.r->ix);
		c.in_txn = false;
	}
	if (c.r && c.files)
		errmsg("the import into store '%s' is incomplete: what was committed stays; its "
		       "steps are set aside at the next mount",
		       root);
out:
	free(taken);
	ckpt_repo_close(c.r);
	imp_free(&c);
	return status;
}

/* ---------------------------------------------------------------------------------------- */
/* main                                                                                      */
/* ---------------------------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ckptctl [--json] [--help] [--version] STORE COMMAND [ARGS]\n"
		"\n"
		"Inspect and maintain a ckptfs STORE directory, mounted or not.\n"
		"\n"
		"commands:\n"
		"  status      what the store holds, and whether a daemon owns it\n"
		"  ls [PATH]   list a directory, or show a file's digest and extents\n"
		"              (PATH relative to the mount root, default '/')\n"
		"  verify      re-read every chunk and re-hash every file; exit 1 on damage\n"
		"  gc          remove unlinked inodes and unreferenced chunks (not mounted)\n"
		"  fsck        check and repair (not mounted): the index file (a damaged one is\n"
		"              rebuilt from its readable rows, the old kept aside), the index's\n"
		"              consistency, orphans, then verify; says what was lost; exit 1 if so\n"
		"  steps       the checkpoint steps: state, files, sizes, completion, pins\n"
		"  show STEP   one step's fields, directory, files and state history\n"
		"              (STEP: a step number, or a step directory name such as iter_0000100)\n"
		"  pin STEP, unpin STEP\n"
		"              protect a complete step from retention, or stop (not mounted)\n"
		"  export STEP DIR\n"
		"              copy a complete step to DIR/NAME as plain files, each verified against\n"
		"              its recorded digest, and write the framework's tracker in DIR\n"
		"  claims      what trainers wrote into their tracker files\n"
		"  import DIR  copy a plain checkpoint directory into the store (not mounted; the\n"
		"              store is created if absent): steps recognised, sealed by their\n"
		"              tracker or marker, complete when every file is whole; trackers\n"
		"              recorded as claims; refuses names that already exist\n"
		"\n"
		"options:\n"
		"  --json      print one JSON document instead of text\n"
		"  --force     export: also a step that is not complete\n"
		"  --dest PATH import: into PATH (relative to the mount root, created if absent)\n"
		"              instead of the root; steps and trackers count only at the root\n"
		"  -h, --help  show this help\n"
		"  -V, --version  show the version\n"
		"\n"
		"exit status: 0 success, 1 verify, fsck or export found damage, or import could not read\n"
		"             some file, 2 error\n");
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("ckptctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nusage: ckptctl [--json] STORE status | ls [PATH] | verify | gc | steps | show STEP |\n"
	      "               pin STEP | unpin STEP | export [--force] STEP DIR | claims |\n"
	      "               import [--dest PATH] DIR\n"
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
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *root, *cmd;
	int c, nargs;

	char ferr[512];

	if (ckpt_fault_init(ferr, sizeof(ferr)) < 0) {
		fprintf(stderr, "ckptctl: %s\n", ferr);
		return EXIT_ERROR;
	}
	opterr = 0;
	while ((c = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			opt_json = true;
			break;
		case 'f':
			opt_force = true;
			break;
		case 'd':
			opt_dest = optarg;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		case 'V':
			printf("ckptctl %s\n", CKPTFS_VERSION);
			return EXIT_OK;
		default:
			if (optopt == 'd')
				return usage_error("'--dest' needs a PATH");
			if (optopt)
				return usage_error("unknown option '-%c'", optopt);
			return usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	nargs = argc - optind;
	if (nargs < 1)
		return usage_error("missing STORE");
	if (nargs < 2)
		return usage_error("missing COMMAND");
	root = argv[optind];
	cmd = argv[optind + 1];
	nargs -= 2;

	if (opt_dest && strcmp(cmd, "import"))
		return usage_error("'--dest' is an option of 'import' only");
	if (!strcmp(cmd, "import")) {
		if (nargs != 1)
			return usage_error("'import' takes one DIR");
		if (opt_force)
			return usage_error("'import' never replaces anything: it has no '--force'");
		return cmd_import(root, opt_dest ? opt_dest : "/", argv[optind + 2]);
	}
	if (!strcmp(cmd, "status")) {
		if (nargs)
			return usage_error("'status' takes no arguments");
		return cmd_status(root);
	}
	if (!strcmp(cmd, "ls")) {
		if (nargs > 1)
			return usage_error("'ls' takes at most one PATH");
		return cmd_ls(root, nargs ? argv[optind + 2] : "/");
	}
	if (!strcmp(cmd, "verify")) {
		if (nargs)
			return usage_error("'verify' takes no arguments");
		return cmd_verify(root);
	}
	if (!strcmp(cmd, "gc")) {
		if (nargs)
			return usage_error("'gc' takes no arguments");
		return cmd_gc(root);
	}
	if (!strcmp(cmd, "fsck")) {
		if (nargs)
			return usage_error("'fsck' takes no arguments");
		return cmd_fsck(root);
	}
	if (!strcmp(cmd, "steps")) {
		if (nargs)
			return usage_error("'steps' takes no arguments");
		return cmd_steps(root);
	}
	if (!strcmp(cmd, "show")) {
		if (nargs != 1)
			return usage_error("'show' takes one STEP");
		return cmd_show(root, argv[optind + 2]);
	}
	if (!strcmp(cmd, "pin") || !strcmp(cmd, "unpin")) {
		if (nargs != 1)
			return usage_error("'%s' takes one STEP", cmd);
		return cmd_pin(root, argv[optind + 2], cmd[0] == 'p');
	}
	if (!strcmp(cmd, "export")) {
		if (nargs != 2)
			return usage_error("'export' takes a STEP and a DIR");
		return cmd_export(root, argv[optind + 2], argv[optind + 3], opt_force);
	}
	if (!strcmp(cmd, "claims")) {
		if (nargs)
			return usage_error("'claims' takes no arguments");
		return cmd_claims(root);
	}
	return usage_error("unknown command '%s'", cmd);
}
