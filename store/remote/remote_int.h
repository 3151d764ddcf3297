/*
 * remote_int.h — private to store/remote/: the backend table behind struct remote, and the
 * helpers the backends share. remote.c validates keys and arguments before calling a backend.
 */
#ifndef CKPTFS_REMOTE_INT_H
#define CKPTFS_REMOTE_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "store/remote/remote.h"

/* One call's limits as the backends see them: remote_lim_init makes it from a remote_call. */
struct remote_lim {
	uint64_t deadline_ns; /* CLOCK_MONOTONIC (remote_now_ns), absolute; 0: none */
	long deadline_ms;     /* as the caller gave it, for messages; 0: none */
	size_t max_len;       /* bytes, >= 1 */
	char *err;            /* errlen bytes for the failure's message, or NULL (errlen 0) */
	size_t errlen;
	bool self_checked;    /* remote_call.self_checked */
};

/* One backend's operations; arguments already validated by remote.c. */
struct remote_ops {
	void (*close)(struct remote *r);
	int (*put)(struct remote *r, const char *key, const void *buf, size_t len, bool if_absent,
		   const struct remote_lim *lim);
	int (*get)(struct remote *r, const char *key, const struct remote_lim *lim, void **ret_buf,
		   size_t *ret_len);
	int (*get_range)(struct remote *r, const char *key, uint64_t off, void *buf, size_t len,
			 const struct remote_lim *lim, size_t *ret_got);
	/* remote_get_into; NULL (a test's wrapper): remote_get_into is -EOPNOTSUPP */
	int (*get_into)(struct remote *r, const char *key, void *buf, size_t cap,
			const struct remote_lim *lim, size_t *ret_len);
	int (*head)(struct remote *r, const char *key, const struct remote_lim *lim,
		    uint64_t *ret_size);
	/* after: "" for every key, else only keys above it in byte order (remote_list_after) */
	int (*list)(struct remote *r, const char *prefix, const char *after, remote_list_fn fn,
		    void *arg, const struct remote_lim *lim);
	int (*del)(struct remote *r, const char *key, const struct remote_lim *lim);
	/* the URL requests go to ("http://host:port"), or NULL when none is sent over a network
	 * (the directory backend: NULL op) */
	const char *(*endpoint)(const struct remote *r);
};

/* Every backend's struct starts with this. */
struct remote {
	const struct remote_ops *ops;
};

/* The name prefix of the directory backend's temporary files; keys may not use it. */
#define REMOTE_TMP_PREFIX ".tmp-"

/*
 * remote_dir_open - open the directory backend at the absolute path dir (remote_dir.c); check:
 * the checks remote_open lists (false: remote_opts.unchecked).
 * Returns 0 and *ret_remote, or -ENOENT, -ENOTDIR, -EACCES, -ENOMEM with a message in err.
 */
int remote_dir_open(const char *dir, bool check, struct remote **ret_remote, char *err,
		    size_t errlen);

/*
 * remote_s3_open - open the S3 backend for bucket and prefix ("" or "p/q", no trailing '/')
 * (remote_s3.c). Returns 0 and *ret_remote, or the errors of remote_open with a message in err.
 */
int remote_s3_open(const char *bucket, const char *prefix, const struct remote_opts *opts,
		   struct remote **ret_remote, char *err, size_t errlen);

/* remote_now_ns - CLOCK_MONOTONIC in nanoseconds: the clock of every deadline and backoff. */
uint64_t remote_now_ns(void);

/*
 * remote_lim_init - lim from call (may be NULL: no deadline, REMOTE_GET_MAX, no message); the
 * deadline starts now. Empties call->err. Returns 0, or -EINVAL (a negative deadline_ms).
 */
int remote_lim_init(struct remote_lim *lim, const struct remote_call *call);

/* remote_lim_left_ms - milliseconds left before lim's deadline, >= 1; LONG_MAX without one; 0
 * once it has passed. */
long remote_lim_left_ms(const struct remote_lim *lim);

/* remote_lim_quiet - lim without its message buffer: for a request inside a call whose failure
 * is not the call's (a read-back, an abort). */
struct remote_lim remote_lim_quiet(const struct remote_lim *lim);

/* remote_errf - printf into err (errlen bytes; nothing when errlen is 0) and return rc. */
__attribute__((format(printf, 4, 5))) int remote_errf(char *err, size_t errlen, int rc,
						      const char *fmt, ...);

#endif /* CKPTFS_REMOTE_INT_H */
