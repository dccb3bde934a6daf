/*
 * s3_credentials.c - the S3 tier's keys, from the environment or an AWS-style credentials
 * file (s3_credentials.h). The file goes through kvt__ini_load, the configuration files'
 * reader, so it is bounded and checked the same way and a session token of KiBs is read
 * whole; a key the profile sets twice is an error naming the line, as in a configuration
 * file, because last-wins would let a forgotten line override the one being edited. Its
 * owner and mode are checked first, as ssh checks a private key's: a file another user owns
 * or can write could hold that user's keys (our writes would land in their bucket), so it
 * is refused; one every user can read is used, with a warning.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "s3_credentials.h"

struct cred_ctx {
	const char *profile;
	char *key, *secret, *token;
	int rc;
	const char *twice; /* a key the profile sets twice (src/config.c's rule: an error) */
};

static int on_cred(void *u, const char *section, const char *name, const char *value)
{
	struct cred_ctx *c = u;
	if (strcmp(section, c->profile))
		return 1;
	char **dst = !strcmp(name, "aws_access_key_id")	      ? &c->key
		     : !strcmp(name, "aws_secret_access_key") ? &c->secret
		     : !strcmp(name, "aws_session_token")     ? &c->token
							      : NULL;
	if (!dst)
		return 1;
	if (*dst) { /* last-wins would let a forgotten line override the one being edited */
		c->twice = dst == &c->key      ? "aws_access_key_id"
			   : dst == &c->secret ? "aws_secret_access_key"
					       : "aws_session_token";
		c->rc = -EINVAL;
		return 0;
	}
	if (!(*dst = kvt__strdup(value)))
		c->rc = -ENOMEM;
	return 1;
}

/* A session token goes into a header line as it is: refused at open if too long or holding
 * a control character (a CR or LF would end the header early). */
static int check_token(const struct kvt_log *log, const char *where, const char *tok)
{
	size_t n = strlen(tok);
	if (n > KVT_S3_MAX_TOKEN) {
		KVT_ERR(log, "s3: %s: session token of %zu characters, longer than %d", where, n,
			KVT_S3_MAX_TOKEN);
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)tok[i] < 0x20 || tok[i] == 0x7f) {
			KVT_ERR(log, "s3: %s: control character in the session token", where);
			return -EINVAL;
		}
	return 0;
}

/* The credentials file's owner and mode (the rule above); 0 or -EACCES. Checked
 * by path before the read: a swap in between needs write access to the directory, which
 * the check does not cover either. */
static int file_check(const struct kvt_log *log, const char *file)
{
	struct stat st;
	if (stat(file, &st) < 0 || !S_ISREG(st.st_mode))
		return 0; /* the read reports it */
	uid_t me = geteuid();
	if (st.st_uid != me && st.st_uid != 0) {
		KVT_ERR(log, "s3: credentials file %s: owned by uid %u, not by this user (uid %u) "
			     "or root: refused (its owner could put their keys in it)",
			file, (unsigned)st.st_uid, (unsigned)me);
		return -EACCES;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		KVT_ERR(log, "s3: credentials file %s: writable by %s (mode %04o): refused "
			     "(chmod go-w)",
			file, st.st_mode & S_IWOTH ? "every user" : "its group",
			(unsigned)(st.st_mode & 07777));
		return -EACCES;
	}
	if (st.st_mode & S_IROTH)
		KVT_WARN(log, "s3: credentials file %s: readable by every user (mode %04o): "
			      "chmod 600",
			 file, (unsigned)(st.st_mode & 07777));
	return 0;
}

int kvt__s3_credentials_load(const struct kvt_log *log, const struct kvt_config *cfg,
			     struct kvt__s3_credentials *out)
{
	*out = (struct kvt__s3_credentials){0};
	const char *file = kvt__cfg_str(cfg, "s3.credentials_file");
	struct cred_ctx c = {kvt__cfg_str(cfg, "s3.profile"), NULL, NULL, NULL, 0, NULL};
	if (*file) {
		int prc = file_check(log, file);
		if (prc < 0)
			return prc;
		char why[320];
		int line, rc = kvt__ini_load(file, 65536, on_cred, &c, why, sizeof(why), &line);
		if (rc < 0) { /* bounded: a regular file of at most 64 KiB (not /dev/zero) */
			KVT_ERR(log, "s3: credentials file %s", why);
			return rc;
		}
		if (c.twice) {
			KVT_ERR(log, "s3: credentials file %s:%d: %s set twice in profile [%s]",
				file, line, c.twice, c.profile);
			goto fail;
		}
		if (c.rc < 0)
			goto fail;
		if (line != 0 || !c.key || !c.secret) {
			KVT_ERR(log,
				"s3: credentials file %s: no aws_access_key_id and "
				"aws_secret_access_key in profile [%s]%s",
				file, c.profile, line > 0 ? " (syntax error)" : "");
			c.rc = -EINVAL;
			goto fail;
		}
		if (!*c.key || !*c.secret) { /* as the environment's: refused here, not at S3 */
			KVT_ERR(log, "s3: credentials file %s: profile [%s] has an empty %s", file,
				c.profile, !*c.key ? "aws_access_key_id" : "aws_secret_access_key");
			c.rc = -EINVAL;
			goto fail;
		}
	} else {
		const char *k = getenv("AWS_ACCESS_KEY_ID"), *sec = getenv("AWS_SECRET_ACCESS_KEY");
		const char *tok = getenv("AWS_SESSION_TOKEN");
		if (!k || !*k || !sec || !*sec) {
			KVT_ERR(log, "s3: no credentials: set AWS_ACCESS_KEY_ID and "
				     "AWS_SECRET_ACCESS_KEY, or s3.credentials_file");
			return -EINVAL;
		}
		c.key = kvt__strdup(k);
		c.secret = kvt__strdup(sec);
		if (tok && *tok)
			c.token = kvt__strdup(tok);
		if (!c.key || !c.secret || (tok && *tok && !c.token)) {
			c.rc = -ENOMEM;
			goto fail;
		}
	}
	if (c.token && !*c.token) { /* "aws_session_token =": none, as an empty variable is */
		kvt__free(c.token);
		c.token = NULL;
	}
	if (c.token && (c.rc = check_token(log, *file ? file : "AWS_SESSION_TOKEN", c.token)) < 0)
		goto fail;
	*out = (struct kvt__s3_credentials){c.key, c.secret, c.token};
	return 0;
fail:
	out->access_key = c.key;
	out->secret_key = c.secret;
	out->session_token = c.token;
	kvt__s3_credentials_free(out);
	return c.rc;
}

static void wipe_free(char *p)
{
	if (p)
		explicit_bzero(p, strlen(p));
	kvt__free(p);
}

void kvt__s3_credentials_free(struct kvt__s3_credentials *c)
{
	wipe_free(c->access_key);
	wipe_free(c->secret_key);
	wipe_free(c->session_token);
	*c = (struct kvt__s3_credentials){0};
}
