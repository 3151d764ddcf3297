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

#include "store/remote/s3_conf.h"

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

/* The value of key in [section] of the INI file path into out (cap bytes). 0, or -ENOENT. */
static int ini_get(const char *path, const char *section, const char *key, char *out, size_t cap)
{
	char line[1024];
	bool in = false;
	int rc = -ENOENT;
	FILE *f = fopen(path, "re");

	if (!f)
		return -ENOENT;
	while (rc < 0 && fgets(line, sizeof(line), f)) {
		char *l = trim(line), *eq;

		if (l[0] == '#' || l[0] == ';' || !l[0])
			continue;
		if (l[0] == '[') {
			char *end = strchr(l, ']');

			if (end) {
				*end = '\0';
				in = strcmp(trim(l + 1), section) == 0;
			}
			continue;
		}
		eq = strchr(l, '=');
		if (!in || !eq)
			continue;
		*eq = '\0';
		if (strcmp(trim(l), key) == 0) {
			snprintf(out, cap, "%s", trim(eq + 1));
			rc = 0;
		}
	}
	fclose(f);
	return rc;
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
