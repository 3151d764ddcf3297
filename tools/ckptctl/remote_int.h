/*
 * remote_int.h — what `ckptctl STORE remote` (remote.c: the report, verify) and `remote gc`
 * (remote_gc.c) share. The steps and chunks read from the remote's manifests and the rule
 * choosing what gc removes are the daemon's too: fs/node/rgc.h.
 *
 * Main thread only, like the rest of ckptctl.
 */
#ifndef CKPTCTL_REMOTE_INT_H
#define CKPTCTL_REMOTE_INT_H

#include <jansson.h>

#include "ctl.h"
#include "fs/node/rgc.h"

/* remote_say - rgc_say_fn of ckptctl: reports on stdout, errors and what blocks a gc on stderr
 * (ctl_err), the lease taken not said. arg unused. */
void remote_say(void *arg, enum rgc_say kind, const char *line);

/*
 * remote_gc - `ckptctl STORE remote gc` on c (c->r open, c->o the command's options with
 * remote_say, c->steps read by rgc_read_manifests),
 * with the job's nodes and the keep_checkpoint_max recorded in cfg, and o's --force, --dry-run,
 * --force-no-lease. Prints its report on stdout, errors on stderr. Returns EXIT_OK or
 * EXIT_ERROR.
 */
int remote_gc(struct rgc *c, json_t *cfg, unsigned nodes, const struct ctl_opts *o);

#endif /* CKPTCTL_REMOTE_INT_H */
