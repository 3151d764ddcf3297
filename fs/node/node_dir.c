/* SPDX-License-Identifier: MIT */
/*
 * node_dir.c — step directories shared while a save runs (node.h, node_dir_*).
 *
 * MindFormers 2.0, DeepSpeed and Hugging Face have rank 0 create the step directory, then a
 * barrier, then every rank writes into it. On a single shared filesystem that works because the
 * directory is there for everyone once mkdir returns; here each node has its own namespace. So:
 *   - a step directory made at the root of this node is published before its mkdir returns:
 *     the object dirs/<name> (put-if-absent; the body is the mode in octal and a newline);
 *   - a lookup at the root of a step-directory name this node lacks asks the remote for
 *     dirs/<name> and, when another node published it, makes the directory here and answers
 *     with it, as if this node's rank had made it.
 * The choice of "look a missing name up" over "push every namespace change to every node":
 * only the root's step directories are shared (the files inside are each rank's own until the
 * step is globally complete and node.c shows them everywhere), and the costs fall where they
 * are paid once per step: one PUT per step directory on the node that makes it, one GET per
 * lookup of a step-directory name that does not exist locally (a rank's first path walk into
 * the new directory, or a trainer's exists() test). A lookup's answer is never cached negative
 * by the kernel (fs/fuse/ops.c replies ENOENT), so the first walk after the barrier asks again.
 *
 * Invariants:
 *   1. An object dirs/<name> names a step directory some node made and nobody removed since:
 *      rmdir at the root deletes it, and so does the node thread once the step is globally
 *      complete (every node then shows the step's files from the manifests; a later lookup
 *      after retention removed the directory must not bring an empty one back).
 *   2. A publish that fails (the remote down) does not fail the mkdir: this node's ranks save
 *      locally as before; the name is kept in n->dirs_pending and published by the node thread
 *      until the remote takes it. Until then the other nodes' lookups fail with ENOENT, so
 *      their ranks' writes into the directory fail: the save is lost there, never torn.
 *   3. No function here takes fs->mu; they take n->mu only (node.c invariant 3).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/core/lockrank.h"
#include "fs/node/node_int.h"

/* The key of a step directory's object: "dirs/" then the name (layout names are short). */
#define DIR_KEY_PREFIX "dirs/"

/*
 * How long each call here waits for the remote, retries included, in milliseconds
 * (struct remote_call). mkdir of a step directory, a lookup at the root that misses and rmdir
 * at the root wait for it inside a rank's system call, and a FUSE request has no time limit of
 * its own: without one, an endpoint that accepts and never answers holds the rank for
 * max_tries (5) attempts of up to timeout_ms (60 s) each. The objects are a few bytes, so a
 * working endpoint answers in milliseconds; 5 s still holds a slow connection (TCP, TLS) and the
 * four retries remote.h makes after a 5xx or 429 (backoff waits of at most 100, 200, 400 and
 * 800 ms). Giving up early costs little: a publish is kept and retried by the node thread
 * (invariant 2) and a lookup answers ENOENT, so the ranks save locally; waiting longer would
 * hold every path walk into a missing step directory for as long.
 */
#define NODE_DIR_DEADLINE_MS 5000

/* A dirs/<name> object's body: "%04o\n"; a larger object is read up to this many bytes. */
#define DIR_BODY_MAX 4096

static int dir_key(const char *name, char *key, size_t cap)
{
	int len = snprintf(key, cap, DIR_KEY_PREFIX "%s", name);

	return len < 0 || (size_t)len >= cap ? -ENAMETOOLONG : 0;
}

/* Drop name from n->dirs_pending if it is there. n->mu held. */
static void drop_pending(struct node *n, const char *name)
{
	for (size_t i = 0; i < n->ndirs; i++)
		if (strcmp(n->dirs_pending[i].name, name) == 0) {
			memmove(&n->dirs_pending[i], &n->dirs_pending[i + 1],
				(n->ndirs - i - 1) * sizeof(*n->dirs_pending));
			n->ndirs--;
			return;
		}
}

/* Keep name and mode for node_dirs_retry (once). n->mu not held. */
static void keep_pending(struct node *n, const char *name, mode_t mode)
{
	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	drop_pending(n, name);
	if (ckpt_grow(&n->dirs_pending, &n->capdirs, n->ndirs, sizeof(*n->dirs_pending)) == 0) {
		snprintf(n->dirs_pending[n->ndirs].name, sizeof(n->dirs_pending->name), "%s", name);
		n->dirs_pending[n->ndirs++].mode = mode;
	}
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
}

/*
 * Put dirs/<name> with mode within NODE_DIR_DEADLINE_MS; 0 when it is there (ours or another
 * node's), else -errno and why in err (errlen bytes).
 */
static int put_dir(struct node *n, const char *name, mode_t mode, char *err, size_t errlen)
{
	struct remote_call call = { .deadline_ms = NODE_DIR_DEADLINE_MS, .err = err,
				    .errlen = errlen };
	char key[REMOTE_KEY_MAX + 1], body[16];
	int len = snprintf(body, sizeof(body), "%04o\n", (unsigned)(mode & 07777));
	int rc = dir_key(name, key, sizeof(key));

	if (rc < 0) {
		snprintf(err, errlen, "%s", strerror(-rc));
		return rc;
	}
	rc = remote_put_if_absent_with(n->r, key, body, (size_t)len, &call);
	return rc == -EEXIST ? 0 : rc;
}

int node_dir_publish(struct ckfs *fs, const char *name, mode_t mode)
{
	struct node *n = fs->node;
	char err[512];
	int rc;

	if (!n)
		return 0;
	if ((rc = put_dir(n, name, mode, err, sizeof(err))) < 0) {
		node_set_error(n, "cannot publish step directory '%s' to the remote: %s; the other "
			       "nodes cannot see it until the remote takes it (retrying)", name,
			       err);
		keep_pending(n, name, mode);
	}
	return rc;
}

int node_dir_lookup(struct ckfs *fs, const char *name, mode_t *ret_mode)
{
	struct node *n = fs->node;
	char key[REMOTE_KEY_MAX + 1], text[16], err[512];
	struct remote_call call = { .deadline_ms = NODE_DIR_DEADLINE_MS, .max_len = DIR_BODY_MAX,
				    .err = err, .errlen = sizeof(err) };
	unsigned mode = 0;
	size_t len;
	void *buf;
	int rc;

	if (!n)
		return 0;
	if ((rc = dir_key(name, key, sizeof(key))) < 0)
		return rc;
	rc = remote_get_with(n->r, key, &call, &buf, &len);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0) {
		node_set_error(n, "cannot ask the remote whether another node made '%s' (answering "
			       "that it does not exist): %s", name, err);
		return rc;
	}
	memcpy(text, buf, len < sizeof(text) - 1 ? len : sizeof(text) - 1);
	text[len < sizeof(text) - 1 ? len : sizeof(text) - 1] = '\0';
	free(buf);
	if (sscanf(text, "%o", &mode) != 1 || mode > 07777)
		mode = 0755; /* not ours to judge: the directory still exists */
	*ret_mode = (mode_t)mode;
	return 1;
}

void node_dir_unpublish(struct ckfs *fs, const char *name)
{
	struct node *n = fs->node;
	char key[REMOTE_KEY_MAX + 1], err[512];
	struct remote_call call = { .deadline_ms = NODE_DIR_DEADLINE_MS, .err = err,
				    .errlen = sizeof(err) };

	if (!n || dir_key(name, key, sizeof(key)) < 0)
		return;
	ckpt_lock(&n->mu, CKPT_RANK_NODE);
	drop_pending(n, name);
	ckpt_unlock(&n->mu, CKPT_RANK_NODE);
	if (remote_delete_with(n->r, key, &call) < 0)
		node_set_error(n, "cannot remove step directory '%s' from the remote: %s", name,
			       err);
}

void node_dirs_retry(struct node *n)
{
	for (;;) {
		struct node_dir_pending d;

		ckpt_lock(&n->mu, CKPT_RANK_NODE);
		if (n->ndirs == 0) {
			ckpt_unlock(&n->mu, CKPT_RANK_NODE);
			return;
		}
		d = n->dirs_pending[n->ndirs - 1];
		ckpt_unlock(&n->mu, CKPT_RANK_NODE);
		char err[512];

		if (put_dir(n, d.name, d.mode, err, sizeof(err)) < 0)
			return; /* still down: the next tick */
		ckpt_lock(&n->mu, CKPT_RANK_NODE);
		drop_pending(n, d.name);
		ckpt_unlock(&n->mu, CKPT_RANK_NODE);
		ckpt_log("published step directory '%s' to the remote", d.name);
	}
}
