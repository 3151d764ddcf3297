/*
 * common.c — helpers every ckptctl command uses: error lines, growing arrays, formatting
 * sizes, times, modes and digests, opening a store, and reading a file's extents through the
 * store (verify and export).
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"

void ctl_verr(const char *fmt, va_list ap)
{
	ctl_progress_hide();
	fputs("ckptctl: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void ctl_err(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ctl_verr(fmt, ap);
	va_end(ap);
}

char *ctl_short_size(uint64_t bytes, char *buf, size_t cap)
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

char *ctl_hex(const uint8_t h[IDX_HASH_LEN], char out[2 * STORE_HASH_LEN + 1])
{
	struct store_hash sh;

	memcpy(sh.b, h, STORE_HASH_LEN);
	return store_hash_hex(&sh, out);
}

const char *ctl_codec(uint8_t codec)
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

const char *ctl_chunk_err(int err)
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

char *ctl_mode(uint32_t mode, char buf[11])
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

const char *ctl_type(uint32_t mode)
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

int ctl_path(struct idx *ix, uint64_t ino, char *buf, size_t cap)
{
	int rc = idx_path(ix, ino, buf, cap);

	if (rc == -ENOENT) {
		snprintf(buf, cap, "<inode %" PRIu64 ", unlinked>", ino);
		return 0;
	}
	return rc < 0 ? rc : 0;
}

int ctl_open_read(const char *root, struct ckpt_repo **ret)
{
	char err[1024] = "";
	int rc;

	rc = ckpt_repo_open(root, REPO_RDONLY, NULL, err, sizeof(err), ret);
	if (rc < 0)
		ctl_err("%s", err[0] ? err : strerror(-rc));
	return rc;
}

int ctl_open_write_flags(const char *root, const struct store_opts *sopts, int flags,
			 struct ckpt_repo **ret, bool *ret_writable)
{
	char err[1024] = "";
	int rc;

	rc = ckpt_repo_open(root, REPO_EXCLUSIVE | flags, sopts, err, sizeof(err), ret);
	if (rc == 0) {
		if (ckpt_repo_upgrade_msg(*ret, err, sizeof(err)) > 0)
			fprintf(stderr, "ckptctl: %s\n", err);
		*ret_writable = true;
		return 0;
	}
	if (rc != -EBUSY && rc != -EACCES && rc != -EROFS) {
		ctl_err("%s", err[0] ? err : strerror(-rc));
		return rc;
	}
	/* A daemon owns it (or we may not write it): fall back to reading. */
	err[0] = '\0';
	rc = ckpt_repo_open(root, REPO_RDONLY, sopts, err, sizeof(err), ret);
	if (rc < 0) {
		ctl_err("%s", err[0] ? err : strerror(-rc));
		return rc;
	}
	*ret_writable = false;
	return 0;
}

int ctl_open_write(const char *root, const struct store_opts *sopts, struct ckpt_repo **ret,
		   bool *ret_writable)
{
	return ctl_open_write_flags(root, sopts, 0, ret, ret_writable);
}

struct rank_rows {
	struct idx *ix;
	int64_t created_ns;
	int made;
};

/* policy_rank_steps callback: the row of one per-rank step, made when missing */
static int rank_row_cb(enum layout_kind kind, const char *name, int64_t epoch, int64_t step,
		       void *arg)
{
	struct rank_rows *r = arg;
	struct idx_step s;
	int64_t id;
	int rc;

	(void)epoch;
	if ((rc = idx_step_by_name(r->ix, kind, name, &s)) == 0)
		return 0;
	if (rc != -ENOENT)
		return rc;
	if ((rc = idx_step_create(r->ix, kind, name, step, 0, r->created_ns, &id)) < 0)
		return rc;
	r->made++;
	return 0;
}

int ctl_rank_step_rows(struct idx *ix, int64_t created_ns)
{
	struct rank_rows r = { .ix = ix, .created_ns = created_ns };
	int rc = policy_rank_steps(ix, rank_row_cb, &r);

	return rc < 0 ? rc : r.made;
}

/* policy_top_steps callback: the complete row of one whole step file, made when missing */
static int top_row_cb(enum layout_kind kind, const char *name, int64_t step, uint64_t ino,
		      void *arg)
{
	struct rank_rows *r = arg;
	struct idx_inode a;
	struct idx_step s;
	uint64_t stored = 0;
	int64_t id;
	int rc;

	if ((rc = idx_step_by_name(r->ix, kind, name, &s)) == 0 && s.state == IDX_STEP_COMPLETE)
		return 0;
	if (rc < 0 && rc != -ENOENT)
		return rc;
	if ((rc = idx_inode_get(r->ix, ino, &a)) < 0 ||
	    (rc = idx_step_create(r->ix, kind, name, step, 0, r->created_ns, &id)) < 0)
		return rc;
	(void)idx_file_stored_bytes(r->ix, ino, &stored);
	if ((rc = idx_step_set_figures(r->ix, id, 1, a.size, stored, NULL)) < 0 ||
	    (rc = idx_step_set_state(r->ix, id, IDX_STEP_COMPLETE, r->created_ns,
				     "closed whole by its writer")) < 0)
		return rc;
	r->made++;
	return 0;
}

int ctl_top_step_rows(struct idx *ix, int64_t created_ns)
{
	struct rank_rows r = { .ix = ix, .created_ns = created_ns };
	int rc = policy_top_steps(ix, top_row_cb, &r);

	return rc < 0 ? rc : r.made;
}

int ctl_index_err(const char *root, const char *what, int rc)
{
	if (rc == -EIO)
		ctl_err("cannot %s in the index of store '%s': %s; the index file is damaged: "
			"with the store unmounted, run 'ckptctl %s fsck' to rebuild it from what "
			"is still readable", what, root, strerror(-rc), root);
	else
		ctl_err("cannot %s in the index of store '%s': %s; run 'ckptctl %s status' to "
			"check the store", what, root, strerror(-rc), root);
	return EXIT_ERROR;
}

/* esc_letter - the letter of c's backslash escape ('n' for a newline), or 0 when it has none */
static char esc_letter(unsigned char c)
{
	switch (c) {
	case '\a': return 'a';
	case '\b': return 'b';
	case '\t': return 't';
	case '\n': return 'n';
	case '\v': return 'v';
	case '\f': return 'f';
	case '\r': return 'r';
	case '\\': return '\\';
	default: return 0;
	}
}

size_t ctl_escape(const uint8_t *p, size_t len, char *buf, size_t cap)
{
	size_t o = 0, i = 0;

	assert(cap > 0);
	while (i < len) {
		size_t k = policy_utf8_seq(p + i, len - i), used = k;
		const uint8_t *out = p + i;
		char esc[8];

		if (esc_letter(p[i])) {
			k = (size_t)snprintf(esc, sizeof(esc), "\\%c", esc_letter(p[i]));
			out = (const uint8_t *)esc;
			used = 1;
		} else if (k == 0 || p[i] < 0x20 || p[i] == 0x7f ||
			   (k == 2 && p[i] == 0xc2 && p[i + 1] <= 0x9f)) {
			k = (size_t)snprintf(esc, sizeof(esc), "\\x%02x", p[i]);
			out = (const uint8_t *)esc;
			used = 1;
		}
		if (o + k >= cap)
			break;
		memcpy(buf + o, out, k);
		o += k;
		i += used;
	}
	buf[o] = '\0';
	return i;
}

char *ctl_quote(const char *s, char *buf, size_t cap)
{
	ctl_escape((const uint8_t *)s, strlen(s), buf, cap);
	return buf;
}

int ctl_numw(uint64_t v)
{
	char b[24];

	return snprintf(b, sizeof(b), "%" PRIu64, v);
}

/* Takes each piece a ctl_stream() read (buf NULL: a hole of len bytes, index invariant 4):
 * returns 0, or -errno with reason filled. */
typedef int (*ctl_sink)(const void *buf, size_t len, void *arg, char *reason, size_t cap);

int ctl_stream(struct store *st, const struct idx_extent *ext, size_t n, uint64_t size,
	       bool sparse, uint8_t *buf, struct store_hasher *hs, ctl_sink sink,
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
				snprintf(reason, cap, "chunk %s: %s%s", ctl_hex(h.b, hex),
					 got == 0 ? "shorter than its extent"
						  : ctl_chunk_err((int)got),
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

int ctl_fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

int ctl_store_of_mount(const char *path, char *buf, size_t cap)
{
	char real[PATH_MAX], *line = NULL;
	size_t lcap = 0;
	FILE *f;
	int found = 0;

	if (!realpath(path, real))
		return 0;
	if (!(f = fopen("/proc/self/mountinfo", "re")))
		return 0;
	while (getline(&line, &lcap, f) > 0) {
		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER */
		char *save = NULL, *mnt = NULL, *fstype = NULL, *src = NULL;
		int i = 0;
		bool dash = false;

		for (char *t = strtok_r(line, " \n", &save); t; t = strtok_r(NULL, " \n", &save), i++) {
			if (i == 4)
				mnt = t;
			else if (dash && !fstype)
				fstype = t;
			else if (dash && !src)
				src = t;
			else if (i > 5 && !strcmp(t, "-"))
				dash = true;
		}
		if (!mnt || !fstype || !src || strcmp(fstype, "fuse.ckptfs"))
			continue;
		ckpt_mountinfo_unescape(mnt);
		if (strcmp(mnt, real))
			continue;
		ckpt_mountinfo_unescape(src);
		if (src[0] == '/' && strlen(src) < cap) {
			snprintf(buf, cap, "%s", src); /* the newest mount there wins */
			found = 1;
		}
	}
	free(line);
	fclose(f);
	return found;
}
