/*
 * s3_conf.h — private to the S3 backend: the resolved endpoint, region and credentials.
 */
#ifndef CKPTFS_S3_CONF_H
#define CKPTFS_S3_CONF_H

#include "store/remote/remote.h"

/* Resolved settings; empty strings when nothing provided them. */
struct s3_conf {
	char profile[128];
	char endpoint[512];
	char region[64];
	char access_key[256];
	char secret_key[256];
	char session_token[2048];
};

/*
 * s3_conf_resolve - fill c from opts (may be NULL), else AWS_* environment variables, else the
 * AWS shared credentials and config files (profile AWS_PROFILE or "default"). region defaults to
 * "us-east-1", endpoint to https://s3.REGION.amazonaws.com. Reads the environment: call it
 * while no thread changes it.
 */
void s3_conf_resolve(const struct remote_opts *opts, struct s3_conf *c);

#endif /* CKPTFS_S3_CONF_H */
