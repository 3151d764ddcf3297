/* SPDX-License-Identifier: MIT */
/*
 * prom.h — the one writer of the Prometheus text exposition format (version 0.0.4,
 * https://prometheus.io/docs/instrumenting/exposition_formats/), used by MOUNTPOINT/.ckptfs/metrics
 * and the -o metrics=ADDR:PORT endpoint alike (fs/fuse/meta.c, fs/node/node.c). Debian 12 has no
 * C Prometheus client library, so this small one keeps the format's rules in one place: a family
 * is its HELP and TYPE lines then its samples; HELP text escapes '\' and newline, label values
 * '\', '"' and newline; floating values print as Go's strconv does (NaN, +Inf, -Inf).
 *
 * Every function appends to a struct ckpt_text (fs/core/text.h): a failed allocation is left in
 * its err, so a caller writes every series and checks once at the end. Not thread-safe: one
 * buffer per writer.
 */
#ifndef CKPTFS_PROM_H
#define CKPTFS_PROM_H

#include <stddef.h>
#include <stdint.h>

#include "fs/ckptfs.h"
#include "fs/core/text.h"

/*
 * prom_family - start the series family @name: its "# HELP" and "# TYPE" lines.
 * @name: a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*; not checked, callers pass literals).
 * @type: "counter", "gauge" or "histogram". @help: one line of text (escaped here).
 */
void prom_family(struct ckpt_text *p, const char *name, const char *type, const char *help);

/*
 * prom_u64, prom_i64, prom_double - one sample of @name: `name value` or, with @label non-NULL,
 * `name{label="lvalue"} value` (@lvalue escaped here; one label at most: what ckptfs needs).
 * Integers print exactly; prom_double prints 9 significant digits ("%.9g"), and NaN, +Inf and
 * -Inf by name.
 */
void prom_u64(struct ckpt_text *p, const char *name, const char *label, const char *lvalue,
	      uint64_t value);
void prom_i64(struct ckpt_text *p, const char *name, const char *label, const char *lvalue,
	      int64_t value);
void prom_double(struct ckpt_text *p, const char *name, const char *label, const char *lvalue,
		 double value);

/*
 * prom_hist - a whole histogram family: HELP, TYPE, `name_bucket{le="B"}` for each of h's bounds
 * and +Inf (cumulative counts), `name_sum` (seconds) and `name_count`, read from @h (see
 * ckpt_hist_read: lock-free, may race one observation).
 */
void prom_hist(struct ckpt_text *p, const char *name, const char *help, struct ckpt_hist *h);

#endif /* CKPTFS_PROM_H */
