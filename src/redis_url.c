/*
 * redis_url.c - parsing redis.url (see redis_url.h): one grammar for the tier and the
 * benchmark reference.
 */
#include <ctype.h>
#include <errno.h>
#include <string.h>

#include "redis_url.h"

/* The decimal digits at p (strtol would also take a sign or blanks) as a number in
 * [lo, hi]: the first character after them, or NULL. */
static const char *number(const char *p, long lo, long hi, long *out)
{
	long v = 0;
	const char *q = p;
	for (; isdigit((unsigned char)*q); q++) {
		v = v * 10 + (*q - '0');
		if (v > hi)
			return NULL;
	}
	if (q == p || v < lo)
		return NULL;
	*out = v;
	return q;
}

static int parse(const char *url, struct kvt_redis_url *u)
{
	const char *p = url;
	if (!p)
		return -EINVAL;
	if (!strncmp(p, "redis://", 8))
		p += 8;
	else if (strstr(p, "://"))
		return -EINVAL;
	const char *at = strrchr(p, '@');
	if (at) {
		const char *colon = memchr(p, ':', (size_t)(at - p));
		if (!colon)
			return -EINVAL;
		size_t ul = (size_t)(colon - p), pl = (size_t)(at - colon - 1);
		if (ul >= sizeof(u->user) || pl >= sizeof(u->pass))
			return -EINVAL;
		memcpy(u->user, p, ul);
		memcpy(u->pass, colon + 1, pl);
		p = at + 1;
	}
	const char *hend;
	if (*p == '[') { /* [v6 address] */
		hend = strchr(p, ']');
		if (!hend)
			return -EINVAL;
		p++;
	} else {
		hend = p + strcspn(p, ":/");
	}
	size_t hl = (size_t)(hend - p);
	if (!hl || hl >= sizeof(u->host))
		return -EINVAL;
	memcpy(u->host, p, hl);
	p = hend + (*hend == ']');
	u->port = 6379;
	long v;
	if (*p == ':') {
		if (!(p = number(p + 1, 1, 65535, &v)))
			return -EINVAL;
		u->port = (int)v;
	}
	if (*p == '/' && p[1]) {
		const char *end = number(p + 1, 0, 1000000, &v);
		if (!end || *end)
			return -EINVAL;
		u->db = (int)v;
	} else if (*p && strcmp(p, "/")) {
		return -EINVAL;
	}
	return 0;
}

int kvt__redis_url_parse(const char *url, struct kvt_redis_url *out)
{
	memset(out, 0, sizeof(*out));
	int rc = parse(url, out);
	if (rc < 0)
		memset(out, 0, sizeof(*out)); /* no half of a password left behind */
	return rc;
}
