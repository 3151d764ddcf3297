/* SPDX-License-Identifier: MIT */
/*
 * validate.c — structure checks of torch.save zips, safetensors and JSON files (validate.h).
 *
 * Invariants:
 *  1. Every byte that comes from the file is input, never trusted: all offsets and lengths are
 *     checked against the file size and the buffer they index before use, in 64-bit arithmetic
 *     that cannot wrap (a + b <= c is written a <= c && b <= c - a).
 *  2. Allocation is bounded by the limits in validate.h, whatever the file claims.
 *  3. One exit per checker; every buffer and jansson value is freed on every path.
 *  4. -EBADMSG always comes with a reason in why; 0 and 1 leave why empty.
 */
#include "fs/policy/validate.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

struct vctx {
	uint64_t size;
	validate_read_fn rd;
	void *arg;
	char *why;
	size_t whycap;
};

__attribute__((format(printf, 2, 3))) static int bad(struct vctx *c, const char *fmt, ...)
{
	if (c->whycap > 0) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(c->why, c->whycap, fmt, ap);
		va_end(ap);
	}
	return -EBADMSG;
}

/* Reads exactly len bytes at off, which the caller checked lie within c->size. */
static int rd_full(struct vctx *c, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;
	while (got < len) {
		ssize_t n = c->rd(c->arg, (char *)buf + got, len - got, off + got);
		if (n < 0) {
			if (c->whycap > 0)
				snprintf(c->why, c->whycap, "cannot read at %llu: %s",
					 (unsigned long long)(off + got), strerror((int)-n));
			return (int)n;
		}
		if ((size_t)n > len - got) {
			if (c->whycap > 0)
				snprintf(c->why, c->whycap, "read function returned too much");
			return -EIO;
		}
		if (n == 0) {
			if (c->whycap > 0)
				snprintf(c->why, c->whycap,
					 "short read at %llu: file shorter than its size %llu",
					 (unsigned long long)(off + got), (unsigned long long)c->size);
			return -EIO;
		}
		got += (size_t)n;
	}
	return 0;
}

static uint16_t le16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const unsigned char *p)
{
	return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

/* ---- zip (PKWARE APPNOTE.TXT 6.3.x) ------------------------------------------------------ */

#define ZIP_LFH_SIG 0x04034b50u	  /* 4.3.7 local file header */
#define ZIP_DD_SIG 0x08074b50u	  /* 4.3.9 data descriptor (optional signature) */
#define ZIP_CDH_SIG 0x02014b50u	  /* 4.3.12 central directory file header */
#define ZIP64_EOCD_SIG 0x06064b50u /* 4.3.14 */
#define ZIP64_LOC_SIG 0x07064b50u  /* 4.3.15 */
#define ZIP_EOCD_SIG 0x06054b50u	  /* 4.3.16 */
#define ZIP_LFH_LEN 30
#define ZIP_CDH_LEN 46
#define ZIP_EOCD_LEN 22
#define ZIP64_LOC_LEN 20
#define ZIP64_EOCD_LEN 56
#define ZIP_COMMENT_MAX 65535
#define ZIP_SCRATCH (ZIP_LFH_LEN + 65535)

/* Sizes and offset of one entry, zip64 extra field (4.5.3) applied. */
struct zent {
	uint64_t usize, csize, lh_off;
};

/*
 * Applies the zip64 extended information extra field (header 0x0001, APPNOTE 4.5.3) of the
 * extra block ex[0..exlen) to the fields that are saturated (0xFFFFFFFF); its values appear in
 * the fixed order original size, compressed size, local header offset, disk number, each
 * present only when the matching field is saturated. Returns 0 or -1 (missing or short).
 */
static int zip64_extra(const unsigned char *ex, size_t exlen, bool need_u, bool need_c,
		       bool need_off, struct zent *e)
{
	if (!need_u && !need_c && !need_off)
		return 0;
	size_t i = 0;
	while (exlen - i >= 4) {
		uint16_t id = le16(ex + i), len = le16(ex + i + 2);
		if (len > exlen - i - 4)
			return -1;
		if (id == 0x0001) {
			const unsigned char *p = ex + i + 4;
			size_t need = 8u * ((size_t)need_u + need_c + need_off);
			if (len < need)
				return -1;
			if (need_u) {
				e->usize = le64(p);
				p += 8;
			}
			if (need_c) {
				e->csize = le64(p);
				p += 8;
			}
			if (need_off)
				e->lh_off = le64(p);
			return 0;
		}
		i += 4u + len;
	}
	return -1;
}

/*
 * Checks the local header (and data descriptor) of one central directory entry cd[0..46+...):
 * check 4 of validate.h's zip list. cd_off bounds the local data; lh is scratch space of
 * ZIP_SCRATCH bytes.
 */
static int zip_check_local(struct vctx *c, const unsigned char *cdh, const struct zent *e,
			   uint64_t cd_off, size_t idx, unsigned char *lh)
{
	uint16_t nlen = le16(cdh + 28);
	uint16_t flags = le16(cdh + 8), method = le16(cdh + 10);
	uint32_t crc = le32(cdh + 16);

	if (e->lh_off > cd_off || cd_off - e->lh_off < (uint64_t)ZIP_LFH_LEN + nlen)
		return bad(c, "zip entry %zu: local header offset %llu is not before the central "
			      "directory at %llu", idx, (unsigned long long)e->lh_off,
			   (unsigned long long)cd_off);
	int rc = rd_full(c, lh, ZIP_LFH_LEN + (size_t)nlen, e->lh_off);
	if (rc < 0)
		return rc;
	if (le32(lh) != ZIP_LFH_SIG)
		return bad(c, "zip entry %zu: no local file header at offset %llu", idx,
			   (unsigned long long)e->lh_off);
	uint16_t lflags = le16(lh + 6), lmethod = le16(lh + 8);
	uint16_t lnlen = le16(lh + 26), lelen = le16(lh + 28);
	if (lnlen != nlen || memcmp(lh + ZIP_LFH_LEN, cdh + ZIP_CDH_LEN, nlen) != 0)
		return bad(c, "zip entry %zu: local header name differs from the central directory",
			   idx);
	if (lmethod != method || (lflags & 0x9) != (flags & 0x9))
		return bad(c, "zip entry %zu: local header method or flags differ from the central "
			      "directory", idx);

	/* The data: after the local header, name and extra field; it must end before the CD. */
	uint64_t data = e->lh_off + ZIP_LFH_LEN + lnlen;
	if (lelen > cd_off - data)
		return bad(c, "zip entry %zu: local extra field runs into the central directory",
			   idx);
	data += lelen;
	if (e->csize > cd_off - data)
		return bad(c, "zip entry %zu: data (%llu bytes at %llu) runs into the central "
			      "directory at %llu", idx, (unsigned long long)e->csize,
			   (unsigned long long)data, (unsigned long long)cd_off);
	uint64_t end = data + e->csize;

	if (!(flags & 0x8)) {
		/* Local CRC-32 and sizes are meaningful (4.4.4, 4.4.8, 4.4.9). */
		struct zent le = { .usize = le32(lh + 22), .csize = le32(lh + 18) };
		uint32_t lcrc = le32(lh + 14);
		if (le.usize == 0xFFFFFFFFu || le.csize == 0xFFFFFFFFu) {
			rc = rd_full(c, lh, lelen, e->lh_off + ZIP_LFH_LEN + lnlen);
			if (rc < 0)
				return rc;
			if (zip64_extra(lh, lelen, le.usize == 0xFFFFFFFFu,
					le.csize == 0xFFFFFFFFu, false, &le) < 0)
				return bad(c, "zip entry %zu: bad zip64 extra field in its local "
					      "header", idx);
		}
		if (lcrc != crc || le.usize != e->usize || le.csize != e->csize)
			return bad(c, "zip entry %zu: local crc-32 or sizes differ from the central "
				      "directory", idx);
		return 0;
	}

	/* Data descriptor (4.3.9): [signature] crc-32, then 4- or 8-byte (zip64) sizes. */
	unsigned char dd[24];
	size_t avail = cd_off - end < sizeof(dd) ? (size_t)(cd_off - end) : sizeof(dd);
	if (avail < 12)
		return bad(c, "zip entry %zu: no room for its data descriptor", idx);
	rc = rd_full(c, dd, avail, end);
	if (rc < 0)
		return rc;
	/* Either layout, with or without the signature, may be the one written. */
	for (size_t p = 0; p <= 4; p += 4) {
		if ((p == 4 && le32(dd) != ZIP_DD_SIG) || le32(dd + p) != crc)
			continue;
		size_t q = p + 4;
		if (avail - q >= 8 && le32(dd + q) == e->csize && le32(dd + q + 4) == e->usize)
			return 0;
		if (avail - q >= 16 && le64(dd + q) == e->csize && le64(dd + q + 8) == e->usize)
			return 0;
	}
	return bad(c, "zip entry %zu: data descriptor differs from the central directory", idx);
}

/* Where the central directory of a zip lies, from its (zip64) end of central directory. */
struct zip_dir {
	uint64_t n;      /* entries */
	uint64_t cd_size; /* bytes */
	uint64_t cd_off;
	uint64_t cd_end; /* where the central directory must end: the (zip64) EOCD */
};

/*
 * Step 1 of check_zip: read the file's last bytes into *ret_tail (owned by the caller, freed
 * even on failure) and find the EOCD within the last 22 + 65535 bytes, ending exactly at the end
 * of the file. Sets *ret_tlen, *ret_toff (the tail's offset in the file) and *ret_e (the EOCD's
 * offset in the tail). Returns 0, -EBADMSG, -ENOMEM or a read error.
 */
static int zip_find_eocd(struct vctx *c, unsigned char **ret_tail, size_t *ret_tlen,
			 uint64_t *ret_toff, size_t *ret_e)
{
	unsigned char *tail;
	int rc;

	uint64_t tlen64 = ZIP_EOCD_LEN + ZIP_COMMENT_MAX + ZIP64_LOC_LEN;
	size_t tlen = (size_t)(c->size < tlen64 ? c->size : tlen64);
	uint64_t toff = c->size - tlen;
	tail = *ret_tail = malloc(tlen);
	if (!tail)
		return -ENOMEM;
	rc = rd_full(c, tail, tlen, toff);
	if (rc < 0)
		return rc;
	size_t e = SIZE_MAX;
	for (size_t i = tlen - ZIP_EOCD_LEN + 1; i-- > 0;) {
		if (le32(tail + i) == ZIP_EOCD_SIG && i + ZIP_EOCD_LEN + le16(tail + i + 20) == tlen) {
			e = i;
			break;
		}
		if (tlen - i >= (size_t)ZIP_EOCD_LEN + ZIP_COMMENT_MAX)
			break;
	}
	if (e == SIZE_MAX)
		return bad(c, "torch.save zip has no end of central directory (truncated?)");
	*ret_tlen = tlen;
	*ret_toff = toff;
	*ret_e = e;
	return 0;
}

/*
 * Step 2 of check_zip: read the zip64 EOCD record that the locator lo (at loc_off) points to and
 * merge it into *d, whose fields hold the EOCD's values (n_disk: entries on this disk). Returns
 * 0, -EBADMSG or a read error.
 */
static int zip64_merge(struct vctx *c, const unsigned char *lo, uint64_t loc_off,
		       struct zip_dir *d, uint64_t *n_disk)
{
	uint64_t z_off = le64(lo + 8);
	int rc;

	if (le32(lo + 4) != 0 || le32(lo + 16) > 1)
		return bad(c, "zip64 locator names another disk (split archive)");
	if (z_off > loc_off || loc_off - z_off < ZIP64_EOCD_LEN)
		return bad(c, "zip64 end of central directory at %llu is not before its locator",
			   (unsigned long long)z_off);
	unsigned char z[ZIP64_EOCD_LEN];
	rc = rd_full(c, z, sizeof(z), z_off);
	if (rc < 0)
		return rc;
	if (le32(z) != ZIP64_EOCD_SIG)
		return bad(c, "no zip64 end of central directory where its locator points");
	uint64_t rsize = le64(z + 4);
	if (rsize < ZIP64_EOCD_LEN - 12 || rsize != loc_off - z_off - 12)
		return bad(c, "zip64 end of central directory does not end at its locator");
	uint64_t z_ndisk = le64(z + 24), z_n = le64(z + 32);
	uint64_t z_cdsize = le64(z + 40), z_cdoff = le64(z + 48);
	if (le32(z + 16) != 0 || le32(z + 20) != 0 || z_ndisk != z_n)
		return bad(c, "zip64 end of central directory names another disk");
	if ((d->n != 0xFFFF && d->n != z_n) || (*n_disk != 0xFFFF && *n_disk != z_ndisk) ||
	    (d->cd_size != 0xFFFFFFFFu && d->cd_size != z_cdsize) ||
	    (d->cd_off != 0xFFFFFFFFu && d->cd_off != z_cdoff))
		return bad(c, "zip end of central directory disagrees with its zip64 record");
	d->n = z_n;
	*n_disk = z_ndisk;
	d->cd_size = z_cdsize;
	d->cd_off = z_cdoff;
	d->cd_end = z_off;
	return 0;
}

/*
 * Steps 2 and 3 of check_zip: decode the EOCD at tail + e (file offset toff + e) and its zip64
 * record if any into *ret, and check that the central directory ends where the (zip64) EOCD
 * begins, with no prepended data. Returns 0, -EBADMSG or a read error.
 */
static int zip_read_end(struct vctx *c, const unsigned char *tail, uint64_t toff, size_t e,
			struct zip_dir *ret)
{
	const unsigned char *eo = tail + e;
	uint64_t eocd_off = toff + e;
	uint16_t disk = le16(eo + 4), cd_disk = le16(eo + 6);
	uint64_t n_disk = le16(eo + 8);
	struct zip_dir d = { .n = le16(eo + 10), .cd_size = le32(eo + 12),
			     .cd_off = le32(eo + 16), .cd_end = eocd_off };
	bool sat = disk == 0xFFFF || cd_disk == 0xFFFF || n_disk == 0xFFFF || d.n == 0xFFFF ||
		   d.cd_size == 0xFFFFFFFFu || d.cd_off == 0xFFFFFFFFu;
	bool loc = e >= ZIP64_LOC_LEN && le32(eo - ZIP64_LOC_LEN) == ZIP64_LOC_SIG;
	int rc;

	if (sat && !loc)
		return bad(c, "zip end of central directory needs zip64 but has no zip64 locator");
	if (loc) {
		rc = zip64_merge(c, eo - ZIP64_LOC_LEN, eocd_off - ZIP64_LOC_LEN, &d, &n_disk);
		if (rc < 0)
			return rc;
	} else if (disk != 0 || cd_disk != 0 || n_disk != d.n) {
		return bad(c, "zip end of central directory names another disk (split archive)");
	}

	if (d.cd_off > d.cd_end || d.cd_size != d.cd_end - d.cd_off)
		return bad(c, "zip central directory (%llu bytes at %llu) does not end at the end "
			      "of central directory at %llu", (unsigned long long)d.cd_size,
			   (unsigned long long)d.cd_off, (unsigned long long)d.cd_end);
	if (d.n > d.cd_size / ZIP_CDH_LEN)
		return bad(c, "zip central directory of %llu bytes cannot hold %llu entries",
			   (unsigned long long)d.cd_size, (unsigned long long)d.n);
	*ret = d;
	return 0;
}

/*
 * Step 4 of check_zip: walk the d->cd_size bytes of central directory in cd, checking every
 * entry and its local header (zip_check_local, with scratch of ZIP_SCRATCH bytes). Sets *ret_pkl
 * when an entry is named "data.pkl" or ends in "/data.pkl". Returns 0, -EBADMSG or a read error.
 */
static int zip_check_entries(struct vctx *c, const unsigned char *cd, const struct zip_dir *d,
			     unsigned char *scratch, bool *ret_pkl)
{
	size_t pos = 0, idx = 0;
	bool pkl = false;
	int rc;

	while (pos < d->cd_size) {
		const unsigned char *h = cd + pos;
		if (d->cd_size - pos < ZIP_CDH_LEN || le32(h) != ZIP_CDH_SIG)
			return bad(c, "zip central directory entry %zu has a bad signature", idx);
		size_t nlen = le16(h + 28), elen = le16(h + 30), clen = le16(h + 32);
		size_t hl = ZIP_CDH_LEN + nlen + elen + clen;
		if (hl > d->cd_size - pos)
			return bad(c, "zip central directory entry %zu overruns the directory", idx);
		if (idx >= d->n)
			return bad(c, "zip central directory holds more entries than its count %llu",
				   (unsigned long long)d->n);
		struct zent ze = { .csize = le32(h + 20), .usize = le32(h + 24),
				   .lh_off = le32(h + 42) };
		if (zip64_extra(h + ZIP_CDH_LEN + nlen, elen, ze.usize == 0xFFFFFFFFu,
				ze.csize == 0xFFFFFFFFu, ze.lh_off == 0xFFFFFFFFu, &ze) < 0)
			return bad(c, "zip entry %zu: bad zip64 extra field", idx);
		rc = zip_check_local(c, h, &ze, d->cd_off, idx, scratch);
		if (rc < 0)
			return rc;
		const char *nm = (const char *)h + ZIP_CDH_LEN;
		if ((nlen == 8 && memcmp(nm, "data.pkl", 8) == 0) ||
		    (nlen > 8 && memcmp(nm + nlen - 9, "/data.pkl", 9) == 0))
			pkl = true;
		pos += hl;
		idx++;
	}
	if (idx != d->n)
		return bad(c, "zip central directory holds %zu entries, its end record says %llu",
			   idx, (unsigned long long)d->n);
	*ret_pkl = pkl;
	return 0;
}

static int check_zip(struct vctx *c, bool need_pkl)
{
	unsigned char *tail = NULL, *cd = NULL, *scratch = NULL;
	struct zip_dir d = { 0 };
	size_t tlen = 0, e = 0;
	uint64_t toff = 0;
	bool pkl = false;
	int rc;

	if (c->size < ZIP_EOCD_LEN) {
		rc = bad(c, "torch.save zip has no end of central directory (truncated?)");
		goto out;
	}
	/* 1. EOCD; 2. zip64 EOCD locator and record; 3. directory bounds. */
	rc = zip_find_eocd(c, &tail, &tlen, &toff, &e);
	if (rc < 0)
		goto out;
	rc = zip_read_end(c, tail, toff, e, &d);
	if (rc < 0)
		goto out;
	if (d.cd_size > VALIDATE_ZIP_CD_MAX) {
		rc = 1; /* bounds only */
		goto out;
	}

	/* 4. The entries. */
	cd = malloc(d.cd_size ? (size_t)d.cd_size : 1);
	scratch = malloc(ZIP_SCRATCH);
	if (!cd || !scratch) {
		rc = -ENOMEM;
		goto out;
	}
	rc = rd_full(c, cd, (size_t)d.cd_size, d.cd_off);
	if (rc < 0)
		goto out;
	rc = zip_check_entries(c, cd, &d, scratch, &pkl);
	if (rc < 0)
		goto out;
	/* 5. torch.save archives hold "<archive>/data.pkl". */
	if (need_pkl && !pkl) {
		rc = bad(c, "zip has no data.pkl entry: not a whole torch.save archive");
		goto out;
	}
	rc = 1;
out:
	free(scratch);
	free(cd);
	free(tail);
	return rc;
}

/* ---- safetensors (huggingface/safetensors README "Format", safetensors/src/tensor.rs) ---- */

struct st_tensor {
	uint64_t begin, end;
};

static int st_cmp(const void *a, const void *b)
{
	const struct st_tensor *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* Element size in bits of a safetensors dtype (tensor.rs Dtype::bitsize), 0 if unknown. */
static unsigned st_bits(const char *dt)
{
	static const struct {
		const char *name;
		unsigned bits;
	} tab[] = {
		{ "BOOL", 8 },	  { "U8", 8 },	    { "I8", 8 },       { "F8_E4M3", 8 },
		{ "F8_E5M2", 8 }, { "F8_E8M0", 8 }, { "F4", 4 },       { "F6_E2M3", 6 },
		{ "F6_E3M2", 6 }, { "F16", 16 },    { "BF16", 16 },    { "I16", 16 },
		{ "U16", 16 },	  { "F32", 32 },    { "I32", 32 },     { "U32", 32 },
		{ "F64", 64 },	  { "I64", 64 },    { "U64", 64 },     { "C64", 64 },
	};
	for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
		if (strcmp(dt, tab[i].name) == 0)
			return tab[i].bits;
	return 0;
}

/* A JSON integer >= 0, as uint64_t; false if it is not one. */
static bool json_u64(const json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return false;
	*out = (uint64_t)json_integer_value(v);
	return true;
}

/* The __metadata__ entry v of a safetensors header: an object of strings. 0 or -EBADMSG. */
static int st_check_metadata(struct vctx *c, const json_t *v)
{
	const char *mk;
	json_t *mv;

	if (!json_is_object(v))
		return bad(c, "safetensors __metadata__ is not an object");
	json_object_foreach((json_t *)v, mk, mv) {
		if (!json_is_string(mv))
			return bad(c, "safetensors __metadata__ value '%.64s' is not a string", mk);
	}
	return 0;
}

/*
 * The entry key = v of a tensor in a safetensors header: dtype, shape and data_offsets, whose
 * length matches shape x dtype size when the dtype is known. Its byte range in the data area
 * goes to *ret. Returns 0 or -EBADMSG.
 */
static int st_check_tensor(struct vctx *c, const char *key, json_t *v, struct st_tensor *ret)
{
	json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
	json_t *offs = json_object_get(v, "data_offsets");
	uint64_t b, en;

	if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(shape) ||
	    !json_is_array(offs) || json_array_size(offs) != 2 ||
	    !json_u64(json_array_get(offs, 0), &b) || !json_u64(json_array_get(offs, 1), &en) ||
	    en < b)
		return bad(c, "safetensors tensor '%.64s' lacks a dtype, shape or valid "
			      "data_offsets", key);
	/* Elements times bits per element, in bits; overflow means "too big". */
	unsigned bits = st_bits(json_string_value(dt));
	uint64_t count = 1;
	bool big = false, zero = false;
	size_t i;
	json_t *d;
	json_array_foreach(shape, i, d) {
		uint64_t dim;
		if (!json_u64(d, &dim))
			return bad(c, "safetensors tensor '%.64s' has a bad shape", key);
		if (dim == 0)
			zero = true;
		else if (__builtin_mul_overflow(count, dim, &count))
			big = true;
	}
	uint64_t nbits = 0;
	if (!zero && !big && __builtin_mul_overflow(count, (uint64_t)bits, &nbits))
		big = true;
	if (zero)
		big = false, nbits = 0;
	if (bits && (big || nbits % 8 != 0 || nbits / 8 != en - b))
		return bad(c, "safetensors tensor '%.64s': dtype %.16s and shape do not make "
			      "%llu bytes", key, json_string_value(dt), (unsigned long long)(en - b));
	ret->begin = b;
	ret->end = en;
	return 0;
}

/*
 * The nt tensor ranges in ts (sorted here) must tile the data area of data bytes exactly: no
 * gap, no overlap, nothing past its end. Returns 0 or -EBADMSG.
 */
static int st_check_tiling(struct vctx *c, struct st_tensor *ts, size_t nt, uint64_t data)
{
	uint64_t at = 0;

	if (nt)
		qsort(ts, nt, sizeof(*ts), st_cmp);
	for (size_t i = 0; i < nt; i++) {
		if (ts[i].begin != at)
			return bad(c, "safetensors tensor data %s at byte %llu of the data area",
				   ts[i].begin > at ? "has a gap" : "overlaps",
				   (unsigned long long)at);
		at = ts[i].end;
	}
	if (at != data)
		return bad(c, "safetensors tensors end at %llu but the file holds %llu data bytes%s",
			   (unsigned long long)at, (unsigned long long)data,
			   at > data ? " (truncated?)" : "");
	return 0;
}

static int check_safetensors(struct vctx *c)
{
	unsigned char *hdr = NULL;
	json_t *root = NULL;
	struct st_tensor *ts = NULL;
	int rc;

	if (c->size < 8) {
		rc = bad(c, "safetensors file of %llu bytes has no header length (truncated?)",
			 (unsigned long long)c->size);
		goto out;
	}
	unsigned char lb[8];
	rc = rd_full(c, lb, 8, 0);
	if (rc < 0)
		goto out;
	uint64_t n = le64(lb);
	if (n > VALIDATE_ST_HEADER_MAX) {
		rc = bad(c, "safetensors header length %llu exceeds 100000000",
			 (unsigned long long)n);
		goto out;
	}
	if (n > c->size - 8) {
		rc = bad(c, "safetensors header of %llu bytes runs past the end of the file "
			    "(truncated?)", (unsigned long long)n);
		goto out;
	}
	hdr = malloc(n ? (size_t)n : 1);
	if (!hdr) {
		rc = -ENOMEM;
		goto out;
	}
	rc = rd_full(c, hdr, (size_t)n, 8);
	if (rc < 0)
		goto out;
	json_error_t jerr;
	root = json_loadb((const char *)hdr, (size_t)n, JSON_ALLOW_NUL, &jerr);
	if (!root) {
		rc = bad(c, "safetensors header is not json: %s at byte %d", jerr.text,
			 jerr.position);
		goto out;
	}
	if (!json_is_object(root)) {
		rc = bad(c, "safetensors header is not a json object");
		goto out;
	}
	size_t cap = json_object_size(root), nt = 0;
	ts = malloc((cap ? cap : 1) * sizeof(*ts));
	if (!ts) {
		rc = -ENOMEM;
		goto out;
	}
	const char *key;
	json_t *v;
	json_object_foreach(root, key, v) {
		if (strcmp(key, "__metadata__") == 0)
			rc = st_check_metadata(c, v);
		else
			rc = st_check_tensor(c, key, v, &ts[nt++]);
		if (rc < 0)
			goto out;
	}
	rc = st_check_tiling(c, ts, nt, c->size - 8 - n);
	if (rc < 0)
		goto out;
	rc = 1;
out:
	free(ts);
	json_decref(root);
	free(hdr);
	return rc;
}

/* ---- JSON (RFC 8259, jansson) ------------------------------------------------------------ */

static bool ident_char(unsigned char ch)
{
	return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       ch == '_' || ch == '.' || ch == '+' || ch == '-';
}

/* Length of an RFC 8259 number at s[0..n) (section 6), or 0 if there is none. */
static size_t json_number_len(const unsigned char *s, size_t n)
{
	size_t i = 0;
	if (i < n && s[i] == '-')
		i++;
	if (i < n && s[i] == '0') {
		i++;
	} else if (i < n && s[i] >= '1' && s[i] <= '9') {
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
	} else {
		return 0;
	}
	if (i < n && s[i] == '.') {
		size_t j = ++i;
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
		if (i == j)
			return 0;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		size_t j = i;
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
		if (i == j)
			return 0;
	}
	return i;
}

/*
 * Outside strings, replaces each well-formed number and each of Python's NaN, Infinity and
 * -Infinity tokens by "0" and spaces of the same length: jansson then checks the structure
 * without refusing integers beyond 64 bits, reals beyond a double (RFC 8259 section 6 leaves
 * range to implementations), or the non-finite values Python's json module writes by default.
 * Malformed numbers are left for jansson to refuse.
 */
static void json_neutralise_numbers(unsigned char *s, size_t n)
{
	bool in_str = false;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = s[i];
		if (in_str) {
			if (ch == '\\')
				i++;
			else if (ch == '"')
				in_str = false;
			continue;
		}
		if (ch == '"') {
			in_str = true;
			continue;
		}
		if (i > 0 && ident_char(s[i - 1]))
			continue;
		size_t len = 0;
		static const char *const words[] = { "NaN", "Infinity", "-Infinity" };
		for (size_t w = 0; w < 3 && !len; w++) {
			size_t wl = strlen(words[w]);
			if (n - i >= wl && memcmp(s + i, words[w], wl) == 0)
				len = wl;
		}
		if (!len && (ch == '-' || (ch >= '0' && ch <= '9')))
			len = json_number_len(s + i, n - i);
		if (!len || (i + len < n && ident_char(s[i + len])))
			continue;
		s[i] = '0';
		memset(s + i + 1, ' ', len - 1);
		i += len - 1;
	}
}

static int check_json(struct vctx *c)
{
	unsigned char *buf = NULL;
	json_t *root = NULL;
	int rc;

	if (c->size == 0) {
		rc = bad(c, "json file is empty");
		goto out;
	}
	if (c->size > VALIDATE_JSON_MAX) {
		rc = 0;
		goto out;
	}
	buf = malloc((size_t)c->size);
	if (!buf) {
		rc = -ENOMEM;
		goto out;
	}
	rc = rd_full(c, buf, (size_t)c->size, 0);
	if (rc < 0)
		goto out;
	json_neutralise_numbers(buf, (size_t)c->size);
	json_error_t jerr;
	root = json_loadb((const char *)buf, (size_t)c->size, JSON_DECODE_ANY | JSON_ALLOW_NUL,
			  &jerr);
	if (!root) {
		rc = bad(c, "json does not parse: %s at byte %d (truncated?)", jerr.text,
			 jerr.position);
		goto out;
	}
	rc = 1;
out:
	json_decref(root);
	free(buf);
	return rc;
}

/* ---- entry point ------------------------------------------------------------------------- */

int validate_file(const char *name, uint64_t size, validate_read_fn rd, void *arg,
		  enum validate_format *ret_format, char *why, size_t whycap)
{
	struct vctx c = { .size = size, .rd = rd, .arg = arg, .why = why, .whycap = whycap };
	enum validate_format f = VF_UNKNOWN;
	int rc = 0;

	if (whycap > 0)
		why[0] = '\0';
	static const unsigned char sig[4] = { 'P', 'K', 3, 4 };
	unsigned char head[4];
	size_t hl = size < 4 ? (size_t)size : 4;

	if (ends_with(name, ".safetensors")) {
		f = VF_SAFETENSORS;
		rc = check_safetensors(&c);
	} else if (ends_with(name, ".json") &&
		   (hl < 4 || size > VALIDATE_JSON_MAX || (rc = rd_full(&c, head, hl, 0)) < 0 ||
		    memcmp(head, sig, 4) != 0)) {
		f = VF_JSON; /* (a read error above is reported as it is) */
		rc = rc < 0 ? rc : check_json(&c);
	} else if (!ends_with(name, ".distcp")) {
		/* InternEvo torch.saves topo_tp{tp}_pp{pp}.json (components.py
		 * save_model_checkpoint, tests/traces/internevo.md): a ".json" holding a zip is
		 * checked as one */
		rc = hl ? rd_full(&c, head, hl, 0) : 0;
		if (rc == 0 && memcmp(head, sig, hl) == 0) {
			if (hl == 4) {
				f = VF_TORCH_ZIP;
				rc = check_zip(&c, !ends_with(name, ".zip") &&
							   !ends_with(name, ".npz"));
			} else if (ends_with(name, ".pt") || ends_with(name, ".pth") ||
				   ends_with(name, ".bin") || ends_with(name, ".ckpt")) {
				f = VF_TORCH_ZIP;
				rc = bad(&c, "torch.save file of %zu bytes (truncated?)", hl);
			}
		}
	}
	if (rc >= 0 && whycap > 0)
		why[0] = '\0';
	if (ret_format)
		*ret_format = f;
	return rc;
}
