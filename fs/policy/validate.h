/* SPDX-License-Identifier: MIT */
/*
 * validate.h — is a checkpoint file of a known format structurally whole?
 *
 * Evidence 3 of "When is a file, and a step, really complete?" (../shared/DESIGN.md): FUSE sees
 * the same close() whether torch.save finished or was killed half-way, so the file's own
 * structure is checked where the format is known. Three formats:
 *
 *   - torch.save zip (torch >= 1.6, caffe2/serialize/inline_container.cc PyTorchFileWriter, built
 *     on miniz; it always writes a zip64 end of central directory): PKWARE APPNOTE.TXT 6.3.x,
 *     sections 4.3.6 (overall layout), 4.3.7 (local file header), 4.3.9 (data descriptor),
 *     4.3.12 (central directory header), 4.3.14 (zip64 end of central directory record),
 *     4.3.15 (zip64 end of central directory locator), 4.3.16 (end of central directory record),
 *     4.5.3 (zip64 extended information extra field 0x0001).
 *   - safetensors: the format of huggingface/safetensors README.md ("Format") and its reference
 *     loader safetensors/src/tensor.rs (Metadata::validate: tensors sorted by offsets must tile
 *     the data area from 0 with no gap or overlap, and 8 + N + the last end == the file size).
 *   - JSON: RFC 8259, parsed by jansson; Python's json extensions NaN, Infinity, -Infinity and
 *     numbers beyond a double (which Python's json.dump writes by default and json.load reads) are
 *     accepted.
 *
 * A pure module: no global state, no logging; I/O only through the caller's read function.
 */
#ifndef CKPTFS_VALIDATE_H
#define CKPTFS_VALIDATE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * validate_read_fn - read len bytes at byte offset off of the file being validated into buf.
 * @arg: the caller's context, passed through unchanged.
 * Returns the number of bytes read, 0..len (short only at end of file), or -errno.
 * It is called only from the thread that called validate_file(), never after it returns.
 */
typedef ssize_t (*validate_read_fn)(void *arg, void *buf, size_t len, uint64_t off);

/* The format validate_file() recognised. */
enum validate_format {
	VF_UNKNOWN = 0,	   /* not a format this module knows */
	VF_TORCH_ZIP,	   /* a zip archive: torch.save / torch.jit.save (also .zip, .npz) */
	VF_SAFETENSORS,	   /* *.safetensors */
	VF_JSON,	   /* *.json */
};

/* Limits, in bytes. */
#define VALIDATE_JSON_MAX (64u << 20)		/* bigger JSON files are not checked */
#define VALIDATE_ZIP_CD_MAX (16u << 20)		/* bigger central directories: bounds only */
#define VALIDATE_ST_HEADER_MAX 100000000u	/* safetensors MAX_HEADER_SIZE (tensor.rs) */

/*
 * validate_file - check that a file of a known checkpoint format is structurally whole.
 * @name: the file's base name, NUL-terminated; it picks the format, case-insensitively:
 *	"*.safetensors" → safetensors, "*.json" → JSON unless its content starts with "PK\x03\x04"
 *	(InternEvo torch.saves topo_tp{tp}_pp{pp}.json: then a zip, as below), "*.distcp" → not
 *	checked (a PyTorch DCP
 *	data file is a run of torch.save items whose zip offsets are relative to each item; the
 *	step's ".metadata" says what it must hold). Any other name whose content starts with the
 *	local file header signature "PK\x03\x04" is a zip, checked as torch.save wrote it
 *	(.pt, .pth, .bin, .ckpt, or no extension); "*.zip" and "*.npz" are zips that need no
 *	"data.pkl" entry. A "*.pt", "*.pth", "*.bin" or "*.ckpt" file shorter than 4 bytes whose
 *	bytes are a prefix of "PK\x03\x04" (an empty file included) is a torn torch.save.
 * @size: the file's size in bytes, as the caller knows it.
 * @rd: reads the file (see validate_read_fn); @arg is passed to it.
 * @ret_format: if not NULL, receives the format detected (also on -EBADMSG and read errors).
 * @why: if @whycap > 0, receives one NUL-terminated lowercase line, no final period, saying why
 *	the file is malformed, e.g. "torch.save zip has no end of central directory (truncated?)";
 *	the empty string when the result is 0 or 1. May be NULL when @whycap is 0.
 * @whycap: size of @why in bytes (the line is cut to fit).
 *
 * Checks, by format:
 *  zip  1. the end of central directory record (EOCD, 0x06054b50, APPNOTE 4.3.16) ends exactly
 *	    at @size (its comment included) and lies within the last 22 + 65535 bytes;
 *	 2. a zip64 EOCD locator (0x07064b50, 4.3.15) just before it, required when an EOCD field is
 *	    0xFFFF/0xFFFFFFFF, points at a zip64 EOCD (0x06064b50, 4.3.14) that ends where the
 *	    locator begins; saturated EOCD fields must agree with the zip64 ones;
 *	 3. the central directory lies in the file, ends where the (zip64) EOCD begins and starts at
 *	    or after byte 0 with no prepended data;
 *	 4. if it is at most 16 MiB, each entry has signature 0x02014b50 (4.3.12), the entries tile
 *	    it exactly, their number is the EOCD's count; each local header offset (the zip64 extra
 *	    field 0x0001 of 4.5.3 when 0xFFFFFFFF) points before the central directory at a local
 *	    header (0x04034b50, 4.3.7) with the same name, method and flag bits 0 and 3, whose data
 *	    (and data descriptor, 4.3.9, whose CRC-32 and sizes must match) ends before the central
 *	    directory; with flag bit 3 clear, the local CRC-32 and sizes must match the central ones;
 *	 5. an entry is named "data.pkl" or ends in "/data.pkl" (torch writes "<archive>/data.pkl").
 *  safetensors: 8-byte little-endian header length N <= 100,000,000 with 8 + N <= @size; the N
 *	 bytes are a JSON object; every member but "__metadata__" (an object of strings) is an
 *	 object with "dtype" (a string), "shape" (non-negative integers) and "data_offsets" [begin,
 *	 end] (0 <= begin <= end); sorted by begin, the tensors tile [0, last end) with no gap or
 *	 overlap; 8 + N + last end == @size; for a known dtype (BOOL U8 I8 F8_E4M3 F8_E5M2 F8_E8M0 1
 *	 byte, F16 BF16 I16 U16 2, F32 I32 U32 4, F64 I64 U64 C64 8, F4 1/2, F6_E2M3 F6_E3M2 3/4)
 *	 the product of the shape times the element size is end - begin (an unknown dtype, from a
 *	 newer writer, skips only this check).
 *  JSON: @size > 0 and the whole file parses as one JSON value of any type (jansson json_loadb,
 *	 JSON_DECODE_ANY | JSON_ALLOW_NUL, duplicate keys allowed); files above 64 MiB return 0.
 *
 * Reads: zip, the last <= 64 KiB + 20 bytes, the zip64 EOCD, the central directory (<= 16 MiB)
 * and each entry's local header and data descriptor (~100 bytes each); safetensors, the header
 * (<= 100 MB); JSON, the whole file (<= 64 MiB). Memory is bounded alike and freed on return.
 *
 * Returns 1 (whole), 0 (not a format this module knows, or a JSON file too big: nothing
 * checked), or:
 *	-EBADMSG  malformed or truncated (@why says how);
 *	-EIO      @rd returned more than asked, or fewer bytes than @size promised (file shrank);
 *	-ENOMEM   out of memory;
 *	-errno    any error @rd returned, unchanged.
 * Thread-safety: reentrant; calls may run concurrently if their @rd may. jansson keeps no
 * mutable global state besides its hash seed, which it sets up thread-safely on first use.
 */
int validate_file(const char *name, uint64_t size, validate_read_fn rd, void *arg,
		  enum validate_format *ret_format, char *why, size_t whycap);

#endif /* CKPTFS_VALIDATE_H */
