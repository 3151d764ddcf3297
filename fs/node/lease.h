/*
 * lease.h — the leases of the gc protocol on the remote (node.h "Remote layout"): the gc's
 * gc/lease and the nodes' upload markers uploads/<node>/<kind>-<step>. One format and one
 * judgement, shared by the daemon (node_publish.c upload_begin) and the gc (rgc.c, run by ckptctl and
 * by the node thread), so that they never disagree on whether a lease holds.
 *
 * A lease is a small JSON object (format LEASE_FORMAT):
 *   {"format": "ckptfs-lease/1", "holder": "ckptctl remote gc", "host": "n1", "pid": 4242,
 *    "created_ns": ..., "renewed_ns": ..., "expiry_s": 900}
 * created_ns and renewed_ns are wall-clock (CLOCK_REALTIME) nanoseconds since the epoch: when the
 * holder first wrote it, and when it last wrote it (a gc rewrites its lease every
 * LEASE_GC_RENEW_S seconds). It is stale once the judging host's clock is past
 * renewed_ns + expiry_s seconds: its holder died, or stopped renewing. The expiry travels with
 * the lease, so the writer chooses it and every reader judges by the same figure.
 *
 * The clocks of the nodes and of the host running the gc must agree to well within the
 * margins below (NTP keeps them within milliseconds). A lease renewed "in the future" by a clock
 * ahead of the reader's is live: a wrong clock delays publishing or gc, it never lets the two run
 * at once.
 *
 * Links jansson and the remote (store/remote/remote.h); nothing of fs/'s layers, so that ckptctl
 * links it alone. Does not log.
 */
#ifndef CKPTFS_FS_NODE_LEASE_H
#define CKPTFS_FS_NODE_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/remote/remote.h"

#define LEASE_FORMAT "ckptfs-lease/1"

/* The gc's lease, and the prefix of the nodes' upload markers. */
#define LEASE_GC_KEY "gc/lease"
#define LEASE_UPLOADS_PREFIX "uploads/"

/*
 * The gc's lease: expiry, renewal interval, and how long after its last renewal a gc still
 * starts a delete.
 *
 * A gc stops deleting (and fails) once LEASE_GC_DEADLINE_S passed since the renewal it last
 * wrote, so a delete it starts lands before the lease lapses even when that one request stalls:
 * a remote request gives up after 5 tries of up to 60 s without progress plus their backoff
 * (remote.h remote_opts: max_tries, timeout_ms), about 6 minutes. Hence
 * LEASE_GC_EXPIRY_S = LEASE_GC_DEADLINE_S (300) + one stalled request (~360) + clock skew
 * allowed between hosts (240) = 900 s. Renewing every 60 s leaves the gc four renewals that may
 * fail or stall before it must stop.
 *
 * A gc pass is one listing and one read per manifest, one listing of chunks/ and one delete per
 * unreferenced chunk: seconds on a small remote, but 10^5 deletes at 10-50 ms each take 15 to 80
 * minutes, longer than the expiry, hence the renewal. A node's thread looks at the lease every
 * 200 ms tick (node.c NODE_TICK_MS) while it has a step to publish, so it notices a lease gone
 * or lapsed within a tick; the expiry bounds how long a gc that died holds back publishing:
 * 15 minutes, a fraction of the interval between two checkpoints of a long job.
 */
#define LEASE_GC_EXPIRY_S 900
#define LEASE_GC_RENEW_S 60
#define LEASE_GC_DEADLINE_S 300

/*
 * The expiry of an upload marker: one day. A node holds its marker while it sends one step's
 * chunks (node_publish.c publish_one): a node's part of the largest checkpoints (a 405B-parameter model
 * with Adam states is about 6.5 TB over 16 nodes, 400 GB each) at a congested 50 MB/s takes
 * about 2.2 hours, a tenth of a day. An upload still running after half this expiry starts over
 * under a fresh marker instead of writing its manifest (node_publish.c publish_one), so a gc that judged
 * its marker stale cannot have removed a chunk that manifest names. The cost of the long figure:
 * a node that died in an upload blocks gc for at most a day (gc frees space, no resume needs
 * it), or until `ckptctl STORE remote gc --force`.
 */
#define LEASE_UPLOAD_EXPIRY_S 86400

/* The longest lease object lease_format writes, bytes. */
#define LEASE_TEXT_MAX 512

/* One lease, as written or read. */
struct lease {
	char holder[96]; /* what holds it: "ckptctl remote gc", "ckptfs node 'a'" */
	char host[65];   /* its host's name (gethostname) */
	int64_t pid;     /* its process id on host */
	int64_t created_ns; /* wall-clock ns since the epoch when first written */
	int64_t renewed_ns; /* wall-clock ns since the epoch when last written (>= created_ns) */
	int64_t expiry_s;   /* seconds after renewed_ns at which it lapses, >= 1 */
};

/* What lease_read found (lease_judge returns the last two). */
enum lease_state {
	LEASE_ABSENT = 0, /* no object at the key */
	LEASE_LIVE = 1,   /* held: renewed no longer than expiry_s ago */
	LEASE_STALE = 2,  /* lapsed: renewed more than expiry_s ago; its holder died */
};

/* lease_now_ns - the wall clock (CLOCK_REALTIME) in ns since the epoch. Thread-safe. */
int64_t lease_now_ns(void);

/*
 * lease_init - a new lease of this process: holder (copied, truncated to fit), this host's name
 * and pid, created_ns = renewed_ns = now_ns (wall-clock ns, lease_now_ns), expiry_s seconds
 * (>= 1), into *ret. Thread-safe.
 */
void lease_init(struct lease *ret, const char *holder, int64_t expiry_s, int64_t now_ns);

/*
 * lease_format - the JSON text of l (LEASE_FORMAT, one line, no NUL) into buf (cap bytes,
 * LEASE_TEXT_MAX suffices). Returns its length in bytes (1..cap-1; buf is NUL-terminated too),
 * -ENOMEM, or -ENAMETOOLONG when cap is too small. Thread-safe.
 */
int lease_format(const struct lease *l, char *buf, size_t cap);

/*
 * lease_parse - the lease in len bytes at buf into *ret. Returns 0, or -EBADMSG when buf is not
 * a LEASE_FORMAT object with created_ns, expiry_s >= 1 and renewed_ns >= created_ns (or
 * absent: created_ns then); *ret untouched on failure. An empty object, as markers of ckptfs
 * before this format were, is -EBADMSG: its age is unknown. Pure, thread-safe.
 */
int lease_parse(const void *buf, size_t len, struct lease *ret);

/*
 * lease_judge - LEASE_LIVE when now_ns (the judging host's wall clock, ns) is at most
 * l->expiry_s seconds past l->renewed_ns (a renewal in the future is live), else LEASE_STALE.
 * Pure, thread-safe.
 */
int lease_judge(const struct lease *l, int64_t now_ns);

/*
 * lease_read - read the lease at key from r and judge it at now_ns (wall-clock ns).
 * Returns LEASE_ABSENT (no object; *ret untouched), LEASE_LIVE or LEASE_STALE (*ret filled), or
 *   -EBADMSG  an object that is no lease (an empty marker of an older ckptfs, a damaged one):
 *             its age is unknown, so callers treat it as live and say how to remove it;
 *   the errors of remote_get but -ENOENT (-EINVAL, -ENOMEM, network errors, -EIO).
 * One GET. Thread-safe (remote.h invariant 3).
 */
int lease_read(struct remote *r, const char *key, int64_t now_ns, struct lease *ret);

/*
 * lease_put - write l at key: put-if-absent when if_absent (taking a lease: exactly one of
 * racing writers gets 0, remote.h invariant 2), else replacing what is there (a renewal, a
 * takeover). Durable on return. Returns 0, -EEXIST (if_absent and an object is there), or the
 * errors of remote_put (-ENOSPC, -EDQUOT on a full remote, network errors, -EIO).
 * Thread-safe.
 */
int lease_put(struct remote *r, const char *key, const struct lease *l, bool if_absent);

/*
 * lease_same - whether a and b are the same holder's lease (holder, host, pid and created_ns
 * equal; renewals change only renewed_ns). A gc reads its lease back with it before renewing:
 * another holder's means another gc took it over. Pure, thread-safe.
 */
bool lease_same(const struct lease *a, const struct lease *b);

/*
 * lease_describe - "'HOLDER' pid PID on 'HOST' since YYYY-MM-DDTHH:MM:SSZ" (created_ns, UTC)
 * into buf (cap bytes, truncated to fit; 256 suffice), for messages. Text that does not change
 * when the lease is renewed, so a caller repeating it each tick logs it once. Returns buf.
 * Thread-safe.
 */
char *lease_describe(const struct lease *l, char *buf, size_t cap);

/*
 * lease_time - wall-clock ns t as "YYYY-MM-DDTHH:MM:SSZ" (UTC) into buf (cap bytes, 21
 * suffice). Returns buf. Thread-safe.
 */
char *lease_time(int64_t t, char *buf, size_t cap);

#endif /* CKPTFS_FS_NODE_LEASE_H */
