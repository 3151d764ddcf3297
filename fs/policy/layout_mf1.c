/* SPDX-License-Identifier: MIT */
/*
 * layout_mf1.c — MindFormers 1.0's tracker, meta.json, read and written as its writer does
 * (mindformers CheckpointMonitor.record_last_ckpt_to_json, Python's json module): the JSON and
 * UTF-8 details kept out of layout.c's table of rules.
 */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "fs/policy/layout.h"
#include "fs/policy/layout_int.h"

/* Decode one UTF-8 sequence at s[0, n): code point in *cp, length returned; 0 if invalid. */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
	uint32_t c = s[0];
	size_t len;
	uint32_t min;

	if (c < 0x80) {
		*cp = c;
		return 1;
	} else if (c >= 0xc2 && c <= 0xdf) {
		len = 2, c &= 0x1f, min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3, c &= 0x0f, min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4, c &= 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return len;
}

static bool utf8_valid(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t l = utf8_decode((const unsigned char *)s + i, n - i, &cp);
		if (l == 0)
			return false;
		i += l;
	}
	return true;
}

/* Deepest value of a meta.json accepted: its keys' values are at depth 1. */
#define LAYOUT_JSON_DEPTH_MAX 32

/*
 * A JSON number token (RFC 8259 section 6) of n bytes at s: true when it is well formed; *ret_plain
 * is set when it is also an integer >= 0 without sign, fraction or exponent that fits int64_t.
 */
static bool json_number_token(const char *s, size_t n, bool *ret_plain)
{
	size_t i = 0, d;
	int64_t v;

	if (i < n && s[i] == '-')
		i++;
	for (d = i; i < n && is_digit(s[i]); i++)
		;
	if (i == d || (i - d > 1 && s[d] == '0'))
		return false;
	*ret_plain = d == 0 && i == n && parse_digits(s, n, &v);
	if (i < n && s[i] == '.') {
		for (d = ++i; i < n && is_digit(s[i]); i++)
			;
		if (i == d)
			return false;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		for (d = i; i < n && is_digit(s[i]); i++)
			;
		if (i == d)
			return false;
	}
	return i == n;
}

/*
 * Copy the len bytes of buf to out (len bytes), each value token outside a string that no key of
 * ours accepts but that Python's json writes or reads replaced by a blank string of the same
 * length ("" for 2 bytes, "   " for 5, ...): NaN, Infinity and -Infinity (written for non-finite
 * floats, Lib/json/encoder.py allow_nan=True), and any well-formed number other than an integer
 * >= 0 that fits int64_t (jansson rejects integers beyond its range and reals that overflow a
 * double; RFC 8259 section 9 lets a parser limit them). A number is then a step or epoch only
 * when it could be one, and a malformed token is copied as it is, for jansson to reject.
 */
static void json_python_values(const char *buf, size_t len, char *out)
{
	bool in_str = false;

	memcpy(out, buf, len);
	for (size_t i = 0; i < len; i++) {
		char c = buf[i];

		if (in_str) {
			if (c == '\\')
				i++; /* the escaped byte cannot end the string */
			else if (c == '"')
				in_str = false;
			continue;
		}
		if (c == '"') {
			in_str = true;
			continue;
		}
		if (c != '-' && c != 'N' && c != 'I' && !is_digit(c))
			continue;
		size_t n = 1;
		while (i + n < len && buf[i + n] != '\0' &&
		       strchr("0123456789+-.eEaNInfity", buf[i + n]))
			n++;
		bool plain = false;
		bool blank = eq(buf + i, n, "NaN") || eq(buf + i, n, "Infinity") ||
			     eq(buf + i, n, "-Infinity") ||
			     (json_number_token(buf + i, n, &plain) && !plain);
		if (blank) {
			assert(n >= 2); /* a one-byte number is a digit: plain */
			out[i] = '"';
			memset(out + i + 1, ' ', n - 2);
			out[i + n - 1] = '"';
		}
		i += n - 1;
	}
}

/* True when v and every value inside it lie at most LAYOUT_JSON_DEPTH_MAX deep (v at depth). */
static bool json_depth_ok(json_t *v, int depth)
{
	const char *k;
	json_t *m;
	size_t i;

	if (depth > LAYOUT_JSON_DEPTH_MAX)
		return false;
	if (json_is_object(v)) {
		json_object_foreach(v, k, m) {
			if (!json_depth_ok(m, depth + 1))
				return false;
		}
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, m) {
			if (!json_depth_ok(m, depth + 1))
				return false;
		}
	}
	return true;
}

/* A JSON integer >= 0 written without sign, fraction or exponent, as int64_t. */
static bool json_step(const json_t *v, int64_t *ret)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return false;
	*ret = (int64_t)json_integer_value(v);
	return true;
}

/*
 * meta.json of MindFormers 1.0 (CheckpointMonitor.record_last_ckpt_to_json): a JSON object
 * (RFC 8259, parsed by jansson, plus Python's NaN/Infinity and numbers of any range in values
 * we skip: json_python_values) holding
 * "last_step" and "last_epoch" (integers >= 0) and "last_ckpt_file" (a bare file name). Other
 * keys are skipped; for a repeated key the last one counts. Returns 0 or -EINVAL (-ENOMEM when
 * jansson runs out of memory is reported as -EINVAL too: the tracker is then unreadable).
 */
int layout_mf1_json_parse(const char *buf, size_t len, struct layout_tracker *ret)
{
	struct layout_tracker t = { .step = -1, .epoch = -1, .ckpt_file = "" };
	char text[LAYOUT_TRACKER_MAX];
	json_error_t jerr;
	json_t *root, *step, *epoch, *file, *v;
	const char *key;
	size_t flen;
	int rc = -EINVAL;

	json_python_values(buf, len, text);
	/* JSON_ALLOW_NUL: a "\u0000" in a value we skip is fine; in the file name, bare_name
	 * rejects it. Without JSON_DECODE_ANY only an object or array is accepted at the top. */
	root = json_loadb(text, len, JSON_ALLOW_NUL, &jerr);
	if (!json_is_object(root))
		goto out;
	json_object_foreach(root, key, v) {
		if (!json_depth_ok(v, 1))
			goto out;
	}
	step = json_object_get(root, "last_step");
	epoch = json_object_get(root, "last_epoch");
	file = json_object_get(root, "last_ckpt_file");
	if (!json_step(step, &t.step) || !json_step(epoch, &t.epoch) || !json_is_string(file))
		goto out;
	flen = json_string_length(file);
	if (flen + 1 > sizeof(t.ckpt_file))
		goto out;
	memcpy(t.ckpt_file, json_string_value(file), flen);
	t.ckpt_file[flen] = '\0';
	if (!bare_name(t.ckpt_file, flen))
		goto out;
	*ret = t;
	rc = 0;
out:
	json_decref(root);
	return rc;
}

/* Python json's ensure_ascii string encoding (Lib/json/encoder.py py_encode_basestring_ascii). */
static int out_json_string(struct out *o, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";

	out_bytes(o, "\"", 1);
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t l = utf8_decode((const unsigned char *)s + i, n - i, &cp);
		if (l == 0)
			return -EINVAL;
		i += l;
		char esc[13];
		switch (cp) {
		case '"': out_str(o, "\\\""); continue;
		case '\\': out_str(o, "\\\\"); continue;
		case '\b': out_str(o, "\\b"); continue;
		case '\f': out_str(o, "\\f"); continue;
		case '\n': out_str(o, "\\n"); continue;
		case '\r': out_str(o, "\\r"); continue;
		case '\t': out_str(o, "\\t"); continue;
		default: break;
		}
		if (cp >= 0x20 && cp <= 0x7e) {
			char ch = (char)cp;
			out_bytes(o, &ch, 1);
			continue;
		}
		uint32_t u[2] = { cp, 0 };
		int nu = 1;
		if (cp >= 0x10000) {
			u[0] = 0xd800 + ((cp - 0x10000) >> 10);
			u[1] = 0xdc00 + ((cp - 0x10000) & 0x3ff);
			nu = 2;
		}
		for (int k = 0; k < nu; k++) {
			esc[0] = '\\';
			esc[1] = 'u';
			for (int h = 0; h < 4; h++)
				esc[2 + h] = hex[(u[k] >> (12 - 4 * h)) & 0xf];
			out_bytes(o, esc, 6);
		}
	}
	out_bytes(o, "\"", 1);
	return 0;
}

int layout_mf1_json_format(const struct layout_tracker *t, struct out *o)
{
	size_t fl = strnlen(t->ckpt_file, sizeof(t->ckpt_file));
	if (t->epoch < 0 || fl == sizeof(t->ckpt_file) || !bare_name(t->ckpt_file, fl) ||
	    !utf8_valid(t->ckpt_file, fl))
		return -EINVAL;
	/* json.dump({"last_epoch": e, "last_step": s, "last_ckpt_file": f}, fp) */
	out_str(o, "{\"last_epoch\": ");
	out_i64(o, t->epoch, 0);
	out_str(o, ", \"last_step\": ");
	out_i64(o, t->step, 0);
	out_str(o, ", \"last_ckpt_file\": ");
	if (out_json_string(o, t->ckpt_file, fl) < 0)
		return -EINVAL;
	out_str(o, "}");
	return 0;
}
