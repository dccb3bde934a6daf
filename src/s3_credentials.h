/*
 * s3_credentials.h - where the S3 tier's keys come from: AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, or a profile of an AWS-style credentials
 * file (s3.credentials_file, s3.profile). Apart from the tier's requests so that the rules
 * a credential must pass (no key set twice, a session token whole and fit for a header
 * line) are read in one place, and every copy of a secret is wiped when it goes.
 */
#ifndef KVT_S3_CREDENTIALS_H
#define KVT_S3_CREDENTIALS_H

#include "config.h"
#include "internal.h"

struct kvt__s3_credentials {
	char *access_key, *secret_key;
	char *session_token; /* NULL: none (an empty one is none) */
};

/* Longest session token taken: STS tokens run to a few KiB; one longer is refused at open
 * rather than sent cut (every request would then fail with a confusing server error). */
#define KVT_S3_MAX_TOKEN 8192

/* Fill *out from the file named by s3.credentials_file (profile s3.profile), or else from
 * the environment. 0, or -errno with one line on log that names the file and line where
 * there is one, and never a secret; *out is then empty. */
int kvt__s3_credentials_load(const struct kvt_log *log, const struct kvt_config *cfg,
			     struct kvt__s3_credentials *out);
/* Wipe and free. */
void kvt__s3_credentials_free(struct kvt__s3_credentials *c);

#endif
