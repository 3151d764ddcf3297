/*
 * s3_conf.c — where the S3 backend's endpoint, region and credentials come from: the options,
 * else the environment, else the AWS shared files (the AWS CLI's documented order: "Configuration
 * and credential file settings", docs.aws.amazon.com/cli/latest/userguide/cli-configure-files.html).
 * ~/.aws/credentials has sections [NAME]; ~/.aws/config has [default] and [profile NAME].
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ini.h>

#include "store/remote/s3_conf.h"

/* What ini_get looks for in one file, and what it found. */
struct ini_want {
	const char *section, *key;
	char *out;
	size_t cap;
	bool found;
};

/* ini_parse's handler: the first value of key in section (AWS reads the first one too). */
static int ini_cb(void *user, const char *section, const char *name, const char *value)
{
	struct ini_want *w = user;

	if (!w->found && strcmp(section, w->section) == 0 && strcmp(name, w->key) == 0) {
		snprintf(w->out, w->cap, "%s", value);
		w->found = true;
	}
	return 1; /* go on: a later line's syntax error must not hide an earlier value */
}

/*
 * The value of key in [section] of the INI file path into out (cap bytes), parsed by libinih
 * (comments, whitespace, sections and continuation lines as the AWS CLI's files use them).
 * 0, or -ENOENT (no file, or no such key). A file with syntax errors still gives the values
 * of the lines it could read.
 */
static int ini_get(const char *path, const char *section, const char *key, char *out, size_t cap)
{
	struct ini_want w = { .section = section, .key = key, .out = out, .cap = cap };

	if (ini_parse(path, ini_cb, &w) == -1)
		return -ENOENT; /* not opened */
	return w.found ? 0 : -ENOENT;
}

static void file_path(const char *env, const char *name, char *out, size_t cap)
{
	const char *e = getenv(env), *home = getenv("HOME");

	if (e && e[0])
		snprintf(out, cap, "%s", e);
	else
		snprintf(out, cap, "%s/.aws/%s", home ? home : "/", name);
}

/* One setting: opt, else the first set environment variable, else the files. */
static void pick(char *out, size_t cap, const char *opt, const char *env1, const char *env2,
		 const char *cred_key, const char *conf_key, const char *profile)
{
	char path[1024], section[256];
	const char *e;

	out[0] = '\0';
	if (opt && opt[0]) {
		snprintf(out, cap, "%s", opt);
		return;
	}
	e = env1 ? getenv(env1) : NULL;
	if (!(e && e[0]) && env2)
		e = getenv(env2);
	if (e && e[0]) {
		snprintf(out, cap, "%s", e);
		return;
	}
	if (cred_key) {
		file_path("AWS_SHARED_CREDENTIALS_FILE", "credentials", path, sizeof(path));
		if (ini_get(path, profile, cred_key, out, cap) == 0)
			return;
	}
	if (conf_key) {
		file_path("AWS_CONFIG_FILE", "config", path, sizeof(path));
		if (strcmp(profile, "default") == 0)
			snprintf(section, sizeof(section), "default");
		else
			snprintf(section, sizeof(section), "profile %s", profile);
		ini_get(path, section, conf_key, out, cap);
	}
}

void s3_conf_resolve(const struct remote_opts *o, struct s3_conf *c)
{
	static const struct remote_opts none;
	const char *profile = getenv("AWS_PROFILE");

	if (!o)
		o = &none;
	if (!profile || !profile[0])
		profile = "default";
	snprintf(c->profile, sizeof(c->profile), "%s", profile);
	pick(c->region, sizeof(c->region), o->region, "AWS_REGION", "AWS_DEFAULT_REGION", NULL,
	     "region", profile);
	if (!c->region[0])
		snprintf(c->region, sizeof(c->region), "us-east-1");
	pick(c->endpoint, sizeof(c->endpoint), o->endpoint, "AWS_ENDPOINT_URL_S3",
	     "AWS_ENDPOINT_URL", NULL, "endpoint_url", profile);
	if (!c->endpoint[0])
		snprintf(c->endpoint, sizeof(c->endpoint), "https://s3.%s.amazonaws.com", c->region);
	pick(c->access_key, sizeof(c->access_key), o->access_key, "AWS_ACCESS_KEY_ID", NULL,
	     "aws_access_key_id", "aws_access_key_id", profile);
	pick(c->secret_key, sizeof(c->secret_key), o->secret_key, "AWS_SECRET_ACCESS_KEY", NULL,
	     "aws_secret_access_key", "aws_secret_access_key", profile);
	pick(c->session_token, sizeof(c->session_token), o->session_token, "AWS_SESSION_TOKEN",
	     NULL, "aws_session_token", "aws_session_token", profile);
}
