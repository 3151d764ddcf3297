/* SPDX-License-Identifier: MIT */
/*
 * text.h — a growing text buffer: what the daemon's generated files (.ckptfs/status, steps,
 * metrics) are written into before a read copies them out.
 *
 * A failed allocation is remembered (err) and every later call does nothing, so a writer appends
 * everything and checks once at the end. Not thread-safe: one struct ckpt_text per writer.
 */
#ifndef CKPTFS_TEXT_H
#define CKPTFS_TEXT_H

#include <stddef.h>

struct ckpt_text {
	char *buf;  /* the text so far, NUL-terminated when len > 0; owned, ckpt_text_free */
	size_t len; /* bytes of text, without the NUL */
	size_t cap; /* bytes allocated */
	int err;    /* 0; -ENOMEM once an allocation failed, -EIO once a format failed (the text
		       is then cut short) */
};

/*
 * ckpt_text_printf - append printf(fmt, ...) to t, growing the buffer (doubling, from 4 KiB).
 * Does nothing once t->err is set.
 */
void ckpt_text_printf(struct ckpt_text *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ckpt_text_free - release t's buffer and zero t (a zeroed struct ckpt_text is empty, valid). */
void ckpt_text_free(struct ckpt_text *t);

#endif /* CKPTFS_TEXT_H */
