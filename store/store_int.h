/*
 * store_int.h — private declarations shared by the files of store/ and its unit tests.
 * Nothing outside store/ and tests/store/ includes this header.
 */
#ifndef CKPTFS_STORE_INT_H
#define CKPTFS_STORE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

/*
 * Little-endian 32-bit load and store: the byte order of the chunk file header (store.h) and of
 * a PLANES payload's stored lengths (codec.c invariant 5). p holds at least 4 bytes.
 */
static inline uint32_t store_get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void store_put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

/* Seed of the splitmix64 sequence that generated store_gear_table (ASCII "ckptfsv1"). */
#define STORE_GEAR_SEED 0x636b707466737631ull

/*
 * The 256 64-bit Gear values of the chunker: store_gear_table[i] is the (i + 1)-th output of
 * splitmix64 seeded with STORE_GEAR_SEED. Part of the chunk-boundary definition, hence of every
 * digest already stored: never change it. tests/store/test_chunker.c regenerates and compares it.
 */
extern const uint64_t store_gear_table[256];

/*
 * Fault injection for tests (SQLite's test_vfs style): when non-zero, the next write of a chunk
 * file fails as if write(2) had returned -1 with errno store_fault_write_errno, and the variable
 * is reset to 0. Never set outside tests.
 */
extern _Atomic int store_fault_write_errno;

/*
 * For tests and measurements: when non-zero, the chunker scans with its scalar loop only, not
 * with its AVX-512 filter (chunker.c). Never set outside tests.
 */
extern _Atomic int store_cdc_scalar_only;

/*
 * Fault injection for tests: while non-zero, each O_DIRECT read or write of a chunk file fails as
 * if the filesystem refused it (EINVAL), so the load or put falls back to the page cache, and the
 * variable is decremented. Never set outside tests.
 */
extern _Atomic int store_fault_direct_einval;

/*
 * store_encode_as - encode raw with the given codec, whatever the gain (store_encode's choice and
 * 3% rule are skipped). For tests and tools that need a specific codec. Same buffer ownership,
 * returns and thread-safety as store_encode, plus -EINVAL for an unknown codec.
 */
int store_encode_as(uint8_t codec, const void *raw, size_t len, int level, void **ret_buf,
		    size_t *ret_len);

/*
 * store_decode_digested - store_decode for a caller that checks the XXH3-128 of the decoded bytes
 * itself (chunkstore.c chunk_load, invariant 2): zstd's own XXH64 of the frame content is not
 * verified (every encode but a PLANES one, which has none, still writes it, and store_decode still
 * checks it). Decoding a
 * 1 MiB bf16 chunk went from 4.08 to 5.07 GB/s (64 MiB of bf16 randn*0.02, best of 7; the
 * /tmp/decb.c of the session notes). Same returns and thread-safety as store_decode; a damaged
 * payload may decode without an error, to bytes whose digest the caller then rejects.
 */
int store_decode_digested(uint8_t codec, const void *payload, size_t payload_len, void *out,
			  size_t raw_size);

/*
 * store_payload_bound - the largest payload any codec can produce for raw_len raw bytes
 * (store_encode itself never exceeds raw_len). Used to reject impossible chunk headers.
 */
size_t store_payload_bound(size_t raw_len);

/* Size of the on-disk chunk file header (see store.h). */
#define STORE_HDR_LEN 32u

#endif /* CKPTFS_STORE_INT_H */
