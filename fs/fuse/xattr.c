/*
 * xattr.c — extended attributes and POSIX ACLs of inodes, kept in the index with the inode
 * (index.h, schema v3), as ext4 keeps them in the inode. No FUSE here: ops.c calls these.
 *
 * Namespaces: user.*, trusted.* and security.* are stored as given; system.posix_acl_access
 * and system.posix_acl_default are stored in the kernel's xattr form of an ACL
 * (include/uapi/linux/posix_acl_xattr.h: a le32 version 2 header, then le16 tag, le16 perm,
 * le32 id per entry) and checked when set. Any other name is EOPNOTSUPP, as ext4 answers for a
 * namespace it has no handler for.
 *
 * ACLs (the mount asks the kernel for FUSE_CAP_POSIX_ACL: the kernel caches and enforces them,
 * the filesystem keeps them, per libfuse's fuse_common.h): as in the kernel's fs/posix_acl.c,
 *   1. setting an access ACL sets the mode's permission bits from it (owner from ACL_USER_OBJ,
 *      group from ACL_MASK when there is one, else ACL_GROUP_OBJ, other from ACL_OTHER), and an
 *      access ACL the mode says all of (only those three entries) is not stored;
 *   2. chmod of an inode with an access ACL rewrites those three entries (fs_acl_chmod);
 *   3. a node created in a directory with a default ACL inherits it (fs_acl_inherit): its
 *      access ACL is the default masked by the requested mode (posix_acl_create), a directory
 *      also gets the default as its own, and the umask does not apply; without one, the umask
 *      does.
 * Thread-safety: every function here takes fs->mu itself unless it says the caller holds it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs/core/lockrank.h"
#include "fs/fuse/fuse_int.h"

/* include/uapi/linux/posix_acl_xattr.h and include/uapi/linux/posix_acl.h */
#define ACL_XATTR_VERSION 2
#define ACL_HDR 4
#define ACL_ENT 8
#define ACL_USER_OBJ 0x01
#define ACL_USER 0x02
#define ACL_GROUP_OBJ 0x04
#define ACL_GROUP 0x08
#define ACL_MASK 0x10
#define ACL_OTHER 0x20
#define ACL_MAX_ENTRIES ((IDX_XATTR_VALUE_MAX - ACL_HDR) / ACL_ENT)

static const char XA_ACCESS[] = "system.posix_acl_access";
static const char XA_DEFAULT[] = "system.posix_acl_default";

static uint16_t le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

/*
 * acl_valid - is v[0..len) a well-formed ACL in xattr form (posix_acl_valid's rules): version 2,
 * whole entries, perms within rwx, exactly one USER_OBJ, GROUP_OBJ and OTHER, at most one MASK,
 * and a MASK whenever there is a named USER or GROUP entry. An empty ACL (header only) is valid
 * only as a default ACL (it removes it).
 */
static bool acl_valid(const uint8_t *v, size_t len)
{
	unsigned n_uobj = 0, n_gobj = 0, n_other = 0, n_mask = 0, n_named = 0;

	if (len < ACL_HDR || (len - ACL_HDR) % ACL_ENT || le32(v) != ACL_XATTR_VERSION)
		return false;
	for (size_t off = ACL_HDR; off < len; off += ACL_ENT) {
		uint16_t tag = le16(v + off), perm = le16(v + off + 2);

		if (perm & ~7u)
			return false;
		switch (tag) {
		case ACL_USER_OBJ: n_uobj++; break;
		case ACL_GROUP_OBJ: n_gobj++; break;
		case ACL_OTHER: n_other++; break;
		case ACL_MASK: n_mask++; break;
		case ACL_USER:
		case ACL_GROUP: n_named++; break;
		default: return false;
		}
	}
	if (len == ACL_HDR)
		return true;
	return n_uobj == 1 && n_gobj == 1 && n_other == 1 && n_mask <= 1 && (!n_named || n_mask);
}

/* acl_entry - offset of the first entry with tag in v[0..len), or 0 when there is none. */
static size_t acl_entry(const uint8_t *v, size_t len, uint16_t tag)
{
	for (size_t off = ACL_HDR; off + ACL_ENT <= len; off += ACL_ENT)
		if (le16(v + off) == tag)
			return off;
	return 0;
}

/* acl_mode - the permission bits a valid, non-empty access ACL gives the mode (rule 1). */
static uint32_t acl_mode(const uint8_t *v, size_t len)
{
	size_t u = acl_entry(v, len, ACL_USER_OBJ), o = acl_entry(v, len, ACL_OTHER);
	size_t g = acl_entry(v, len, ACL_MASK);

	if (!g)
		g = acl_entry(v, len, ACL_GROUP_OBJ);
	return (uint32_t)le16(v + u + 2) << 6 | (uint32_t)le16(v + g + 2) << 3 | le16(v + o + 2);
}

/* acl_set_mode - write mode's bits into the USER_OBJ, MASK (else GROUP_OBJ) and OTHER entries
 * of v (rule 2); with and_mask, AND them into the entries instead (posix_acl_create). */
static void acl_set_mode(uint8_t *v, size_t len, uint32_t mode, bool and_mask)
{
	size_t u = acl_entry(v, len, ACL_USER_OBJ), o = acl_entry(v, len, ACL_OTHER);
	size_t g = acl_entry(v, len, ACL_MASK);
	const size_t at[3] = { u, g ? g : acl_entry(v, len, ACL_GROUP_OBJ), o };
	const uint32_t bits[3] = { (mode >> 6) & 7, (mode >> 3) & 7, mode & 7 };

	for (int i = 0; i < 3; i++) {
		uint16_t p = and_mask ? (uint16_t)(le16(v + at[i] + 2) & bits[i]) : (uint16_t)bits[i];

		put16(v + at[i] + 2, p);
	}
}

/* Which namespace name is in: 0 stored as is, 1 an ACL, -EOPNOTSUPP none we keep. */
static int xa_kind(const char *name)
{
	if (!strncmp(name, "user.", 5) || !strncmp(name, "trusted.", 8) ||
	    !strncmp(name, "security.", 9))
		return 0;
	if (!strcmp(name, XA_ACCESS) || !strcmp(name, XA_DEFAULT))
		return 1;
	return -EOPNOTSUPP;
}

/* the inode's ctime to now, and its mode to mode when mode_set; in the transaction, mu held */
static int xa_touch(struct ckfs *fs, uint64_t ino, bool mode_set, uint32_t mode)
{
	struct idx_inode a;
	int rc = idx_inode_get(fs->ix, ino, &a);

	if (rc < 0)
		return rc;
	a.ctime_ns = ckfs_now(fs);
	if (mode_set)
		a.mode = (a.mode & ~07777u) | (mode & 07777u);
	return idx_inode_update(fs->ix, &a);
}

int fs_xattr_set(struct ckfs *fs, uint64_t ino, const char *name, const void *value, size_t len,
		 int flags)
{
	int kind = xa_kind(name), rc;
	bool mode_set = false, drop = false;
	uint32_t mode = 0;
	struct idx_inode a;

	if (kind < 0)
		return kind;
	if (len > IDX_XATTR_VALUE_MAX)
		return -E2BIG;
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	if ((rc = idx_inode_get(fs->ix, ino, &a)) < 0)
		goto out;
	if (kind == 1) {
		bool access = !strcmp(name, XA_ACCESS);

		if (!acl_valid(value, len) || (access && len == ACL_HDR)) {
			rc = -EINVAL;
			goto out;
		}
		if (!access && !S_ISDIR(a.mode)) {
			rc = -EACCES; /* only directories have a default ACL (posix_acl_xattr_set) */
			goto out;
		}
		if (access) {
			mode_set = true;
			mode = (a.mode & 07000u) | acl_mode(value, len);
			drop = len == ACL_HDR + 3 * ACL_ENT; /* the mode says it all (rule 1) */
		}
		drop |= !access && len == ACL_HDR;
	}
	if ((rc = idx_begin(fs->ix)) < 0)
		goto out;
	if (drop) {
		rc = idx_xattr_remove(fs->ix, ino, name);
		if (rc == -ENODATA && !(flags & IDX_XATTR_REPLACE))
			rc = 0;
	} else {
		rc = idx_xattr_set(fs->ix, ino, name, value, len, flags);
	}
	if (rc == 0)
		rc = xa_touch(fs, ino, mode_set, mode);
	rc = fs_commit_or_rollback(fs, rc);
out:
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	return rc;
}

int fs_xattr_get(struct ckfs *fs, uint64_t ino, const char *name, void *buf, size_t cap)
{
	int rc;

	if (xa_kind(name) < 0)
		return -EOPNOTSUPP;
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	rc = idx_xattr_get(fs->ix, ino, name, buf, cap);
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	return rc;
}

ssize_t fs_xattr_list(struct ckfs *fs, uint64_t ino, char *buf, size_t cap)
{
	ssize_t rc;

	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	rc = idx_xattr_list(fs->ix, ino, buf, cap);
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	return rc;
}

int fs_xattr_remove(struct ckfs *fs, uint64_t ino, const char *name)
{
	int rc;

	if (xa_kind(name) < 0)
		return -EOPNOTSUPP;
	ckpt_lock(&fs->mu, CKPT_RANK_FS);
	if ((rc = idx_begin(fs->ix)) == 0) {
		rc = idx_xattr_remove(fs->ix, ino, name);
		if (rc == 0)
			rc = xa_touch(fs, ino, false, 0);
		rc = fs_commit_or_rollback(fs, rc);
	}
	ckpt_unlock(&fs->mu, CKPT_RANK_FS);
	return rc;
}

/*
 * acl_load - ino's ACL name into an owned buffer (*ret, free()) sized to it. Returns its length,
 * -ENODATA (none: nothing allocated, the common case, one indexed lookup), -ENOMEM or the
 * index's -errno. fs->mu held.
 */
static int acl_load(struct ckfs *fs, uint64_t ino, const char *name, uint8_t **ret)
{
	int n = idx_xattr_get(fs->ix, ino, name, NULL, 0);
	uint8_t *v;

	if (n <= 0)
		return n == 0 ? -ENODATA : n; /* an empty value is no ACL */
	if (!(v = malloc((size_t)n)))
		return -ENOMEM;
	if ((n = idx_xattr_get(fs->ix, ino, name, v, (size_t)n)) < 0) {
		free(v);
		return n;
	}
	*ret = v;
	return n;
}

int fs_acl_chmod(struct ckfs *fs, uint64_t ino, uint32_t mode)
{
	uint8_t *v = NULL;
	int n = acl_load(fs, ino, XA_ACCESS, &v), rc = 0;

	if (n == -ENODATA)
		return 0;
	if (n < 0)
		return n;
	if (acl_valid(v, (size_t)n) && n > ACL_HDR) {
		acl_set_mode(v, (size_t)n, mode, false);
		rc = idx_xattr_set(fs->ix, ino, XA_ACCESS, v, (size_t)n, IDX_XATTR_REPLACE);
	}
	free(v);
	return rc;
}

int fs_acl_inherit(struct ckfs *fs, uint64_t parent, uint64_t ino, uint32_t *mode,
		   uint32_t umask)
{
	uint8_t *v = NULL;
	int n = acl_load(fs, parent, XA_DEFAULT, &v), rc = 0;

	if (n < 0 && n != -ENODATA)
		return n;
	if (n == -ENODATA || !acl_valid(v, (size_t)n) || n == ACL_HDR) {
		/* no default ACL: the umask applies, as without ACLs */
		*mode &= ~(umask & 0777u);
		goto out;
	}
	if (S_ISDIR(*mode) && (rc = idx_xattr_set(fs->ix, ino, XA_DEFAULT, v, (size_t)n, 0)) < 0)
		goto out;
	acl_set_mode(v, (size_t)n, *mode, true);
	*mode = (*mode & ~0777u) | acl_mode(v, (size_t)n);
	if (n > ACL_HDR + 3 * ACL_ENT)
		rc = idx_xattr_set(fs->ix, ino, XA_ACCESS, v, (size_t)n, 0);
out:
	free(v);
	return rc;
}
