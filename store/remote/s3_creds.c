/*
 * s3_creds.c — the S3 credentials in use, and reading them again when the endpoint rejects them
 * (remote.h invariant 4).
 *
 * Temporary credentials (an STS session: AWS_SESSION_TOKEN, or aws_session_token in
 * ~/.aws/credentials, renewed by whatever wrote them) expire while a daemon runs for days; the
 * endpoint then answers every request 400 ExpiredToken (AWS: "S3 error responses", Error codes,
 * docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html). Whoever renews them writes the
 * new set where remote_open found the first, so reading the same places again finds it.
 *
 * Invariants:
 *   1. A struct s3_creds is never changed after s3_creds_new: a call holds a reference to the
 *      set it signs with (s3_creds_get) for its whole run, so a refresh by another thread never
 *      changes the credentials under a request in flight.
 *   2. s->creds changes only under s->creds_mu, and only from generation gen to gen + 1 by the
 *      refresh that saw gen rejected: of several calls rejected at once, one reads the new set
 *      and puts it in use; the others find the generation moved and send again with it.
 *   3. Secrets are zeroed before their memory is freed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/remote/s3_conf.h"
#include "store/remote/s3_int.h"

/* Zero and free a string holding a secret; NULL is a no-op. */
static void free_secret(char *p)
{
	if (p) {
		explicit_bzero(p, strlen(p));
		free(p);
	}
}

void s3_creds_put(struct s3_creds *c)
{
	if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	free(c->access_key);
	free(c->profile);
	free_secret(c->userpwd);
	free_secret(c->token_hdr);
	free(c);
}

struct s3_creds *s3_creds_new(const char *access_key, const char *secret_key, const char *token,
			      const char *profile, unsigned gen)
{
	struct s3_creds *c = calloc(1, sizeof(*c));
	bool ok;

	if (!c)
		return NULL;
	atomic_init(&c->refs, 1);
	c->gen = gen;
	c->access_key = strdup(access_key);
	c->profile = strdup(profile);
	ok = c->access_key && c->profile &&
	     asprintf(&c->userpwd, "%s:%s", access_key, secret_key) >= 0;
	if (!ok)
		c->userpwd = NULL;
	if (ok && token[0] && asprintf(&c->token_hdr, "x-amz-security-token: %s", token) < 0) {
		c->token_hdr = NULL;
		ok = false;
	}
	if (!ok) {
		s3_creds_put(c);
		return NULL;
	}
	return c;
}

struct s3_creds *s3_creds_get(struct remote_s3 *s)
{
	struct s3_creds *c;

	pthread_mutex_lock(&s->creds_mu);
	c = s->creds;
	atomic_fetch_add(&c->refs, 1);
	pthread_mutex_unlock(&s->creds_mu);
	return c;
}

/* Whether set c holds exactly these credentials. */
static bool same_creds(const struct s3_creds *c, const struct s3_conf *f)
{
	char *userpwd = NULL;
	bool same;

	if (asprintf(&userpwd, "%s:%s", f->access_key, f->secret_key) < 0)
		return true; /* out of memory: nothing to try with */
	same = strcmp(c->userpwd, userpwd) == 0 &&
	       strcmp(c->token_hdr ? c->token_hdr + strlen("x-amz-security-token: ") : "",
		      f->session_token) == 0;
	free_secret(userpwd);
	return same;
}

int s3_creds_refresh(struct remote_s3 *s, unsigned gen)
{
	struct s3_creds *now, *fresh = NULL;
	struct s3_conf *f;
	int rc = 0;

	if (s->creds_fixed)
		return 0;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	s3_conf_resolve(NULL, f);
	pthread_mutex_lock(&s->creds_mu);
	now = s->creds;
	if (now->gen != gen)
		rc = 1; /* invariant 2: another call put a newer set in use */
	else if (f->access_key[0] && f->secret_key[0] && !same_creds(now, f))
		rc = 2;
	pthread_mutex_unlock(&s->creds_mu);
	if (rc == 2) {
		/* made outside the lock; a set that lost a race to another refresh is dropped */
		fresh = s3_creds_new(f->access_key, f->secret_key, f->session_token, f->profile,
				     gen + 1);
		rc = fresh ? 1 : -ENOMEM;
		pthread_mutex_lock(&s->creds_mu);
		now = s->creds;
		if (fresh && now->gen == gen) {
			s->creds = fresh;
			fresh = NULL;
		} else {
			now = NULL; /* still in use */
		}
		pthread_mutex_unlock(&s->creds_mu);
		s3_creds_put(now); /* the reference s->creds held */
		s3_creds_put(fresh);
	}
	explicit_bzero(f, sizeof(*f));
	free(f);
	return rc;
}
