/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of fs/policy/validate.c. Fixtures are real files made at test time by real tools:
 * torch.save from Debian's python3-torch (which always writes a zip64 end record), zips from
 * Python's zipfile with its zip64 threshold lowered to 1 (every entry and the end record go
 * zip64), JSON from Python's json.dump (NaN, Infinity, integers beyond 64 bits), safetensors
 * written byte by byte after the huggingface/safetensors README. Then: whole files pass; every
 * truncation, targeted corruption, trailing garbage and read error is caught; and a fixed-seed
 * loop of 50,000 mutated inputs must not crash (run it under -fsanitize=address,undefined).
 * A missing /usr/bin/python3 or torch fails the tests that need them, with the reason.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/policy/validate.h"

/* ---- helpers ----------------------------------------------------------------------------- */

struct mem {
	const unsigned char *p;
	size_t n;     /* bytes really there (may be < the size given to validate_file) */
	int fail;     /* if not 0, every read returns -fail */
	size_t chunk; /* if not 0, reads return at most this many bytes */
};

static ssize_t mem_rd(void *arg, void *buf, size_t len, uint64_t off)
{
	struct mem *m = arg;
	if (m->fail)
		return -m->fail;
	if (off >= m->n)
		return 0;
	size_t k = m->n - off < len ? m->n - off : len;
	if (m->chunk && k > m->chunk)
		k = m->chunk;
	memcpy(buf, m->p + off, k);
	return (ssize_t)k;
}

static char why[256];
static enum validate_format fmt;

static int vmem(const char *name, const void *p, size_t n)
{
	struct mem m = { .p = p, .n = n };
	memset(why, 'x', sizeof(why));
	fmt = (enum validate_format)99;
	int rc = validate_file(name, n, mem_rd, &m, &fmt, why, sizeof(why));
	cr_assert(memchr(why, '\0', sizeof(why)), "why is not NUL-terminated");
	if (rc == -EBADMSG)
		cr_assert(why[0] != '\0', "-EBADMSG without a reason");
	else if (rc >= 0)
		cr_assert(why[0] == '\0', "rc %d with reason '%s'", rc, why);
	return rc;
}

static char tmpdir[64];

static void mk_tmpdir(void)
{
	strcpy(tmpdir, "/tmp/ckptfs-validate-XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir), "mkdtemp: %s", strerror(errno));
}

static void rm_tmpdir(void)
{
	char cmd[128];
	if (!tmpdir[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove '%s'\n", tmpdir);
	tmpdir[0] = '\0';
}

/* Runs a Python script with the temporary directory as its working directory. */
static void python(const char *script)
{
	char path[128], cmd[512];
	snprintf(path, sizeof(path), "%s/gen.py", tmpdir);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(script, f);
	cr_assert_eq(fclose(f), 0);
	snprintf(cmd, sizeof(cmd), "cd '%s' && /usr/bin/python3 gen.py", tmpdir);
	int rc = system(cmd);
	cr_assert_eq(rc, 0,
		     "/usr/bin/python3 failed (status %d) making the fixtures; the tests need "
		     "Debian's python3 and python3-torch (apt-get install python3-torch)", rc);
}

static unsigned char *slurp(const char *name, size_t *ret_n)
{
	char path[160];
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "cannot open fixture '%s'", path);
	struct stat st;
	cr_assert_eq(fstat(fileno(f), &st), 0);
	unsigned char *p = malloc(st.st_size ? (size_t)st.st_size : 1);
	cr_assert_not_null(p);
	cr_assert_eq(fread(p, 1, (size_t)st.st_size, f), (size_t)st.st_size);
	fclose(f);
	*ret_n = (size_t)st.st_size;
	return p;
}

static uint32_t rd32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static size_t find_sig(const unsigned char *p, size_t n, uint32_t sig, bool last)
{
	size_t at = SIZE_MAX;
	for (size_t i = 0; i + 4 <= n; i++)
		if (rd32(p + i) == sig) {
			at = i;
			if (!last)
				break;
		}
	cr_assert_neq(at, SIZE_MAX, "signature %08x not found", sig);
	return at;
}

/* Every truncation: step 7 from 0, then the last 100 sizes one by one. */
static void all_truncations(const char *name, const unsigned char *p, size_t n, bool want_bad)
{
	for (size_t k = 0; k < n; k += (n - k <= 100 ? 1 : 7)) {
		int rc = vmem(name, p, k);
		cr_assert_neq(rc, 1, "'%s' truncated to %zu of %zu bytes passed", name, k, n);
		if (want_bad && (k >= 4 || strcmp(name, "plain.zip") != 0))
			cr_assert_eq(rc, -EBADMSG, "'%s' truncated to %zu of %zu: rc %d", name, k,
				     n, rc);
	}
}

static const char torch_py[] =
	"import torch, io\n"
	"torch.manual_seed(0)\n"
	"torch.save({'a': torch.arange(10), 'b': torch.zeros(3, 4)}, 'small.pt')\n"
	"m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))\n"
	"o = torch.optim.Adam(m.parameters())\n"
	"m(torch.randn(2, 16)).sum().backward(); o.step()\n"
	"torch.save({'model': m.state_dict(), 'optim': o.state_dict(), 'step': 7}, 'model.pt')\n"
	"torch.save({'a': torch.ones(5)}, 'legacy.pt', _use_new_zipfile_serialization=False)\n"
	"with open('two.distcp', 'wb') as f:\n"
	"    torch.save(torch.ones(4), f); torch.save(torch.zeros(8), f)\n";

/* ---- torch.save zip ---------------------------------------------------------------------- */

Test(torch, whole_files_pass, .init = mk_tmpdir, .fini = rm_tmpdir)
{
	python(torch_py);
	const char *files[] = { "small.pt", "model.pt" };
	for (size_t i = 0; i < 2; i++) {
		size_t n;
		unsigned char *p = slurp(files[i], &n);
		cr_expect_eq(vmem(files[i], p, n), 1, "'%s': %s", files[i], why);
		cr_expect_eq(fmt, VF_TORCH_ZIP);
		/* detected by content, whatever the name */
		cr_expect_eq(vmem("pytorch_model.bin", p, n), 1, "%s", why);
		cr_expect_eq(vmem("model_optim_rng", p, n), 1, "%s", why);
		cr_expect_eq(vmem("RNG_STATE.PTH", p, n), 1, "%s", why);
		/* InternEvo's topo_tp0_pp0.json is a torch.save (tests/traces/internevo.md) */
		cr_expect_eq(vmem("topo_tp0_pp0.json", p, n), 1, "%s", why);
		cr_expect_eq(fmt, VF_TORCH_ZIP);
		cr_expect_eq(vmem("topo_tp0_pp0.json", p, n - 1), -EBADMSG);
		/* reads in small pieces are reassembled */
		struct mem m = { .p = p, .n = n, .chunk = 5 };
		cr_expect_eq(validate_file("x.pt", n, mem_rd, &m, NULL, NULL, 0), 1);
		free(p);
	}
}

Test(torch, legacy_and_distcp_are_unknown, .init = mk_tmpdir, .fini = rm_tmpdir)
{
	python(torch_py);
	size_t n;
	unsigned char *p = slurp("legacy.pt", &n);
	cr_expect_eq(vmem("legacy.pt", p, n), 0, "%s", why);
	cr_expect_eq(fmt, VF_UNKNOWN);
	free(p);
	p = slurp("two.distcp", &n);
	cr_assert_eq(memcmp(p, "PK\3\4", 4), 0);
	cr_expect_eq(vmem("__0_0.distcp", p, n), 0, "%s", why);
	cr_expect_eq(fmt, VF_UNKNOWN);
	/* the same bytes under another name: a zip whose offsets do not add up */
	cr_expect_eq(vmem("two.pt", p, n), -EBADMSG);
	free(p);
}

Test(torch, every_truncation_fails, .init = mk_tmpdir, .fini = rm_tmpdir)
{
	python(torch_py);
	const char *files[] = { "small.pt", "model.pt" };
	for (size_t i = 0; i < 2; i++) {
		size_t n;
		unsigned char *p = slurp(files[i], &n);
		all_truncations(files[i], p, n, true);
		all_truncations("noext", p, n, false); /* < 4 bytes: unknown, never whole */
		free(p);
	}
	cr_expect_eq(vmem("empty.pt", "", 0), -EBADMSG);
	cr_expect_eq(vmem("empty.ckpt", "PK", 2), -EBADMSG);
	cr_expect_eq(vmem("empty", "", 0), 0);
	cr_expect_eq(vmem("short.pt", "ab", 2), 0);
}

/* Corrupts one field at off of a copy and expects -EBADMSG. */
static void corrupt(const unsigned char *p, size_t n, size_t off, size_t len, const char *what)
{
	unsigned char *q = malloc(n);
	cr_assert_not_null(q);
	memcpy(q, p, n);
	for (size_t i = 0; i < len; i++)
		q[off + i] ^= (unsigned char)(i == 0 ? 0x01 : 0x80);
	int rc = vmem("x.pt", q, n);
	cr_expect_eq(rc, -EBADMSG, "%s (byte %zu) flipped: rc %d", what, off, rc);
	free(q);
}

Test(torch, flipped_structure_fails, .init = mk_tmpdir, .fini = rm_tmpdir)
{
	python(torch_py);
	size_t n;
	unsigned char *p = slurp("model.pt", &n);
	size_t eocd = find_sig(p, n, 0x06054b50, true);
	size_t loc = find_sig(p, n, 0x07064b50, true);
	size_t z64 = find_sig(p, n, 0x06064b50, true);
	size_t cd = find_sig(p, n, 0x02014b50, false);
	size_t cd2 = find_sig(p + cd + 4, n - cd - 4, 0x02014b50, false) + cd + 4;
	cr_assert(cd < cd2 && cd2 < z64 && z64 < loc && loc < eocd);

	corrupt(p, n, eocd, 1, "eocd signature");
	corrupt(p, n, eocd + 10, 1, "eocd total entries");
	corrupt(p, n, eocd + 12, 1, "eocd cd size");
	corrupt(p, n, eocd + 16, 1, "eocd cd offset");
	corrupt(p, n, eocd + 20, 1, "eocd comment length");
	corrupt(p, n, loc, 1, "zip64 locator signature");
	corrupt(p, n, loc + 8, 1, "zip64 locator offset");
	corrupt(p, n, z64, 1, "zip64 eocd signature");
	corrupt(p, n, z64 + 4, 1, "zip64 eocd size");
	corrupt(p, n, z64 + 32, 1, "zip64 eocd entries");
	corrupt(p, n, z64 + 40, 1, "zip64 eocd cd size");
	corrupt(p, n, z64 + 48, 1, "zip64 eocd cd offset");
	for (size_t e = 0; e < 2; e++) {
		size_t h = e ? cd2 : cd;
		corrupt(p, n, h, 1, "cd signature");
		corrupt(p, n, h + 8, 1, "cd flags (bit 0)");
		corrupt(p, n, h + 10, 1, "cd method");
		corrupt(p, n, h + 16, 1, "cd crc-32");
		corrupt(p, n, h + 20, 1, "cd compressed size");
		corrupt(p, n, h + 24, 1, "cd uncompressed size");
		corrupt(p, n, h + 28, 1, "cd name length");
		corrupt(p, n, h + 30, 1, "cd extra length");
		corrupt(p, n, h + 42, 1, "cd local header offset");
		corrupt(p, n, h + 46, 1, "cd name");
	}
	/* (a flip at byte 0 makes the file unknown: the content no longer says zip) */
	corrupt(p, n, find_sig(p + 4, n - 4, 0x04034b50, false) + 4, 1,
		"second local header signature");
	/* data.pkl renamed in both headers: no longer a torch archive */
	{
		unsigned char *q = malloc(n);
		memcpy(q, p, n);
		for (size_t i = 0; i + 8 <= n; i++)
			if (memcmp(q + i, "data.pkl", 8) == 0)
				q[i] = 'D';
		cr_expect_eq(vmem("x.pt", q, n), -EBADMSG);
		cr_expect(strstr(why, "data.pkl"), "%s", why);
		free(q);
	}
	/* Every single-byte flip from the central directory on: whole or -EBADMSG, and most
	 * are caught (the rest are fields no reader needs: times, attributes, versions). */
	size_t caught = 0, total = 0;
	unsigned char *q = malloc(n);
	memcpy(q, p, n);
	for (size_t i = cd; i < n; i++, total++) {
		q[i] ^= 0x20;
		int rc = vmem("x.pt", q, n);
		cr_assert(rc == 1 || rc == -EBADMSG, "flip at %zu: rc %d", i, rc);
		caught += rc == -EBADMSG;
		q[i] ^= 0x20;
	}
	cr_expect(caught * 10 >= total * 6, "only %zu of %zu flips caught", caught, total);
	cr_log_info("central directory flips caught: %zu of %zu", caught, total);
	free(q);
	free(p);
}

static const char zip_py[] =
	"import zipfile\n"
	"zipfile.ZIP64_LIMIT = 1\n"
	"with zipfile.ZipFile('z64.pt', 'w') as z:\n"
	"    with z.open('arch/data.pkl', 'w', force_zip64=True) as f: f.write(b'\\x80' * 300)\n"
	"    z.writestr('arch/data/0', b'y' * 64)\n"
	"    z.writestr('arch/version', b'3\\n', compress_type=zipfile.ZIP_DEFLATED)\n"
	"zipfile.ZIP64_LIMIT = (1 << 31) - 1\n"
	"with zipfile.ZipFile('plain.zip', 'w') as z:\n"
	"    z.writestr('arrays/a.npy', b'z' * 100)\n"
	"    z.writestr('b.npy', b'w' * 10)\n"
	"class S:\n"
	"    def __init__(s): s.b = bytearray()\n"
	"    def write(s, d): s.b += d; return len(d)\n"
	"    def flush(s): pass\n"
	"s = S()\n"
	"with zipfile.ZipFile(s, 'w') as z:\n"
	"    z.writestr('archive/data.pkl', b'p' * 33)\n"
	"    with z.open('archive/data/0', 'w') as f: f.write(b'q' * 50)\n"
	"open('stream.pt', 'wb').write(bytes(s.b))\n";

Test(zip, zip64_and_python_zips, .init = mk_tmpdir, .fini = rm_tmpdir)
{
	python(zip_py);
	size_t n;
	unsigned char *p = slurp("z64.pt", &n);
	cr_expect_eq(vmem("z64.pt", p, n), 1, "%s", why);
	all_truncations("z64.pt", p, n, true);
	/* saturate the classic end record: the zip64 record alone must be used */
	{
		size_t eocd = find_sig(p, n, 0x06054b50, true);
		unsigned char *q = malloc(n);
		memcpy(q, p, n);
		q[eocd + 8] = q[eocd + 9] = q[eocd + 10] = q[eocd + 11] = 0xFF;
		wr32(q + eocd + 12, 0xFFFFFFFFu);
		wr32(q + eocd + 16, 0xFFFFFFFFu);
		cr_expect_eq(vmem("z64.pt", q, n), 1, "%s", why);
		wr32(q + eocd - 20, 0); /* no locator any more */
		cr_expect_eq(vmem("z64.pt", q, n), -EBADMSG);
		free(q);
	}
	free(p);

	p = slurp("plain.zip", &n);
	cr_expect_eq(vmem("plain.zip", p, n), 1, "%s", why);
	cr_expect_eq(vmem("weights.npz", p, n), 1, "%s", why);
	cr_expect_eq(vmem("plain.pt", p, n), -EBADMSG, "no data.pkl: not torch");
	all_truncations("plain.zip", p, n, true);
	free(p);

	/* written to a stream: flag bit 3, data descriptors with signature */
	p = slurp("stream.pt", &n);
	cr_assert(p[6] & 0x08, "expected a data descriptor");
	cr_expect_eq(vmem("stream.pt", p, n), 1, "%s", why);
	all_truncations("stream.pt", p, n, true);
	free(p);
}

/* ---- safetensors --------------------------------------------------------------------------- */

/* Builds header-length + header + nd data bytes into a static buffer. */
static unsigned char stbuf[4096];

static size_t st_make(const char *hdr, size_t nd)
{
	size_t h = strlen(hdr);
	cr_assert(8 + h + nd <= sizeof(stbuf));
	for (int i = 0; i < 8; i++)
		stbuf[i] = (unsigned char)((uint64_t)h >> (8 * i));
	memcpy(stbuf + 8, hdr, h);
	for (size_t i = 0; i < nd; i++)
		stbuf[8 + h + i] = (unsigned char)(i * 37);
	return 8 + h + nd;
}

#define ST2 "{\"__metadata__\":{\"format\":\"pt\"},"                                          \
	    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"               \
	    "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]}}"

Test(safetensors, whole_files_pass)
{
	size_t n = st_make(ST2, 32);
	cr_expect_eq(vmem("model.safetensors", stbuf, n), 1, "%s", why);
	cr_expect_eq(fmt, VF_SAFETENSORS);
	n = st_make("{}", 0);
	cr_expect_eq(vmem("e.safetensors", stbuf, n), 1, "%s", why);
	/* tensors listed out of order, a scalar (shape []), an empty tensor, header padding */
	n = st_make("{\"z\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[2,10]},"
		    "\"y\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]},"
		    "\"x\":{\"dtype\":\"F16\",\"shape\":[0,5],\"data_offsets\":[10,10]},"
		    "\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[3],\"data_offsets\":[10,13]}}     ",
		    13);
	cr_expect_eq(vmem("m-00001-of-00002.safetensors", stbuf, n), 1, "%s", why);
	/* a dtype newer than this module: offsets still checked, size check skipped */
	n = st_make("{\"q\":{\"dtype\":\"F2_NEW\",\"shape\":[7],\"data_offsets\":[0,3]}}", 3);
	cr_expect_eq(vmem("n.safetensors", stbuf, n), 1, "%s", why);
	n = st_make("{\"q\":{\"dtype\":\"F4\",\"shape\":[2,3],\"data_offsets\":[0,3]}}", 3);
	cr_expect_eq(vmem("f4.safetensors", stbuf, n), 1, "%s", why);
}

Test(safetensors, python_written, .init = mk_tmpdir, .fini = rm_tmpdir)
{
	/* the layout safetensors' own writer produces: compact JSON, padded to 8 bytes */
	python("import json, struct, numpy as np\n"
	       "ts = {'w': np.arange(12, dtype=np.float32).reshape(3, 4),\n"
	       "      'b': np.ones(5, dtype=np.float16), 'i': np.arange(3, dtype=np.int64)}\n"
	       "hdr, off, data = {'__metadata__': {'format': 'pt'}}, 0, b''\n"
	       "for k in sorted(ts):\n"
	       "    a = ts[k]; d = a.tobytes()\n"
	       "    hdr[k] = {'dtype': {'float32': 'F32', 'float16': 'F16', 'int64': 'I64'}"
	       "[str(a.dtype)], 'shape': list(a.shape), 'data_offsets': [off, off + len(d)]}\n"
	       "    off += len(d); data += d\n"
	       "h = json.dumps(hdr, separators=(',', ':')).encode()\n"
	       "h += b' ' * (-len(h) % 8)\n"
	       "open('model.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h + data)\n");
	size_t n;
	unsigned char *p = slurp("model.safetensors", &n);
	cr_expect_eq(vmem("model.safetensors", p, n), 1, "%s", why);
	all_truncations("model.safetensors", p, n, true);
	free(p);
}

Test(safetensors, malformed_fails)
{
	size_t n = st_make(ST2, 32);
	all_truncations("model.safetensors", stbuf, n, true);
	n = st_make(ST2, 33); /* one trailing byte */
	cr_expect_eq(vmem("t.safetensors", stbuf, n), -EBADMSG);
	n = st_make(ST2, 32);
	stbuf[0]++; /* header length one too long */
	cr_expect_eq(vmem("t.safetensors", stbuf, n), -EBADMSG);
	n = st_make(ST2, 32);
	stbuf[5] = 1; /* header length beyond the 100 MB limit */
	cr_expect_eq(vmem("t.safetensors", stbuf, n), -EBADMSG);

	/* header, data bytes (what the header would need, so only the flaw named fails) */
	static const struct {
		const char *hdr;
		size_t nd;
	} bad_hdrs[] = {
		{ "[1,2]", 0 },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}", 24 },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20 },
		{ "{\"a\":{\"dtype\":\"F64\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24 },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,-3],\"data_offsets\":[0,24]}}", 24 },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3.0],\"data_offsets\":[0,24]}}", 24 },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[24,0]}}", 24 },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0]}}", 24 },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3]}}", 24 },
		{ "{\"a\":{\"dtype\":7,\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24 },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":\"x\",\"data_offsets\":[0,24]}}", 24 },
		{ "{\"a\":[]}", 0 },
		{ "{\"__metadata__\":{\"k\":1}}", 0 },
		{ "{\"__metadata__\":[]}", 0 },
		/* a gap at the start, a gap between, an overlap */
		{ "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", 8 },
		{ "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		  "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}", 12 },
		{ "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
		  "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", 8 },
		/* a shape whose product overflows 64 bits; a sub-byte tensor of a bad length */
		{ "{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,2],"
		  "\"data_offsets\":[0,0]}}", 0 },
		{ "{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2 },
	};
	for (size_t i = 0; i < sizeof(bad_hdrs) / sizeof(bad_hdrs[0]); i++) {
		n = st_make(bad_hdrs[i].hdr, bad_hdrs[i].nd);
		cr_expect_eq(vmem("t.safetensors", stbuf, n), -EBADMSG, "header %zu passed", i);
	}
}

/* ---- JSON ---------------------------------------------------------------------------------- */

Test(json, python_written, .init = mk_tmpdir, .fini = rm_tmpdir)
{
	python("import json\n"
	       "st = {'global_step': 100, 'best_metric': None, 'seed': 2**70,\n"
	       "      'log_history': [{'loss': float('nan'), 'grad_norm': float('inf'),\n"
	       "                       'lr': -float('inf'), 'x': 1e-300, 'note': 'NaN \\\"q\\\"'}],\n"
	       "      'names': ['\\u00e9\\u4e2d', '\\x00']}\n"
	       "json.dump(st, open('trainer_state.json', 'w'), indent=2)\n"
	       "json.dump({'last_epoch': 1, 'last_step': 8, 'last_ckpt_file': 'a.ckpt'},\n"
	       "          open('meta.json', 'w'))\n");
	const char *files[] = { "trainer_state.json", "meta.json" };
	for (size_t i = 0; i < 2; i++) {
		size_t n;
		unsigned char *p = slurp(files[i], &n);
		cr_expect_eq(vmem(files[i], p, n), 1, "'%s': %s", files[i], why);
		cr_expect_eq(fmt, VF_JSON);
		all_truncations(files[i], p, n, true);
		free(p);
	}
}

Test(json, values)
{
	static const char *const good[] = {
		"3", "\"x\"", "null", " [1, -0.5e+3, 1E400, 123456789012345678901234567890]\n",
		"{\"a\":NaN,\"b\":[Infinity,-Infinity]}", "{\"k\":\"NaN\\\\\",\"l\":\"\\\"1.2.3\"}",
		"{\"a\":1,\"a\":2}",
	};
	static const char *const bad[] = {
		"", " ", "{", "[1,", "{\"a\":1}x", "nan", "[NaNa]", "[-NaN]", "[1.2.3]", "[01]",
		"[1.]", "[.5]", "[1e]", "[+1]", "[Infinityx]", "\"abc", "{\"a\" 1}", "[1 2]",
		"[\"\\x\"]",
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		cr_expect_eq(vmem("a.json", good[i], strlen(good[i])), 1, "'%s': %s", good[i], why);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(vmem("a.json", bad[i], strlen(bad[i])), -EBADMSG, "'%s' passed", bad[i]);
	/* names pick the format; other names are not checked */
	cr_expect_eq(vmem("CONFIG.JSON", "{", 1), -EBADMSG);
	cr_expect_eq(vmem("latest", "{", 1), 0);
	cr_expect_eq(vmem("meta.json.tmp", "{", 1), 0);
	/* too big to check: 0 without reading */
	struct mem m = { .fail = EIO };
	cr_expect_eq(validate_file("big.json", 64ull << 21, mem_rd, &m, NULL, NULL, 0), 0);
}

/* ---- unknown formats, read errors ----------------------------------------------------------- */

Test(misc, unknown_formats)
{
	unsigned char r[4096];
	srand(1);
	for (size_t i = 0; i < sizeof(r); i++)
		r[i] = (unsigned char)rand();
	r[0] = 'Q';
	cr_expect_eq(vmem("__0_0.distcp", r, sizeof(r)), 0);
	cr_expect_eq(fmt, VF_UNKNOWN);
	cr_expect_eq(vmem(".metadata", r, sizeof(r)), 0);
	cr_expect_eq(vmem("model.bin", r, sizeof(r)), 0);
	cr_expect_eq(vmem("latest_checkpointed_iteration.txt", "100", 3), 0);
}

Test(misc, read_errors)
{
	size_t n = st_make(ST2, 32);
	const char *names[] = { "a.safetensors", "a.json", "a.pt", "a" };
	for (size_t i = 0; i < 4; i++) {
		struct mem m = { .p = stbuf, .n = n, .fail = EIO };
		enum validate_format f;
		char w[64];
		cr_expect_eq(validate_file(names[i], n, mem_rd, &m, &f, w, sizeof(w)), -EIO, "%s",
			     names[i]);
		m.fail = 0;
		m.n = 3; /* the file shrank below the size given */
		cr_expect_eq(validate_file(names[i], n, mem_rd, &m, &f, w, sizeof(w)), -EIO, "%s",
			     names[i]);
	}
}

Test(torch, read_error_mid_zip, .init = mk_tmpdir, .fini = rm_tmpdir)
{
	python(torch_py);
	size_t n;
	unsigned char *p = slurp("small.pt", &n);
	struct mem m = { .p = p, .n = n, .fail = ENXIO };
	cr_expect_eq(validate_file("small.pt", n, mem_rd, &m, NULL, NULL, 0), -ENXIO);
	free(p);
}

/* ---- fuzz ------------------------------------------------------------------------------------ */

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

Test(fuzz, mutated_inputs_do_not_crash, .init = mk_tmpdir, .fini = rm_tmpdir, .timeout = 600)
{
	python(torch_py);
	python(zip_py);
	static const char *const files[] = { "small.pt", "z64.pt", "stream.pt" };
	struct {
		unsigned char *p;
		size_t n;
		const char *name;
	} seeds[6];
	size_t ns = 0;
	for (size_t i = 0; i < 3; i++) {
		seeds[ns].p = slurp(files[i], &seeds[ns].n);
		seeds[ns++].name = "x.pt";
	}
	size_t sn = st_make(ST2, 32);
	seeds[ns].p = malloc(sn);
	memcpy(seeds[ns].p, stbuf, sn);
	seeds[ns].n = sn;
	seeds[ns++].name = "x.safetensors";
	static const char js[] = "{\"a\":[1,2.5e3,NaN,\"s\\\"\\u00e9\"],\"b\":{\"c\":null}}";
	seeds[ns].p = malloc(sizeof(js));
	memcpy(seeds[ns].p, js, sizeof(js) - 1);
	seeds[ns].n = sizeof(js) - 1;
	seeds[ns++].name = "x.json";

	size_t cap = 8192;
	unsigned char *buf = malloc(cap);
	static const char *const names[] = { "x.pt", "x.safetensors", "x.json", "x.distcp", "x" };
	size_t counts[3] = { 0 };
	for (int it = 0; it < 50000; it++) {
		size_t s = next() % ns, n = seeds[s].n;
		if (n > cap)
			n = cap;
		memcpy(buf, seeds[s].p, n);
		unsigned kind = (unsigned)(next() % 4);
		if (kind == 0) { /* random bytes */
			n = next() % 512;
			for (size_t i = 0; i < n; i++)
				buf[i] = (unsigned char)next();
			if (n >= 4 && next() % 2)
				memcpy(buf, "PK\3\4", 4);
		} else {
			unsigned flips = 1 + (unsigned)(next() % 8);
			for (unsigned f = 0; f < flips && n; f++) {
				size_t at = next() % 3 ? n - 1 - next() % (n < 300 ? n : 300)
						       : next() % n;
				buf[at] = next() % 4 ? (unsigned char)next() : (unsigned char)(0xFF);
			}
			if (kind == 2)
				n = next() % (n + 1);
		}
		const char *name = next() % 4 ? seeds[s].name : names[next() % 5];
		struct mem m = { .p = buf, .n = n, .chunk = next() % 8 ? 0 : 1 + next() % 64 };
		char w[48];
		size_t wcap = next() % 5 ? sizeof(w) : next() % 2;
		int rc = validate_file(name, n, mem_rd, &m, NULL, wcap ? w : NULL, wcap);
		cr_assert(rc == 0 || rc == 1 || rc == -EBADMSG, "iteration %d: rc %d", it, rc);
		if (wcap)
			cr_assert(memchr(w, '\0', wcap));
		counts[rc == -EBADMSG ? 2 : rc]++;
	}
	cr_log_info("fuzz: %zu unknown, %zu whole, %zu malformed", counts[0], counts[1],
		    counts[2]);
	free(buf);
	for (size_t i = 0; i < ns; i++)
		free(seeds[i].p);
}
