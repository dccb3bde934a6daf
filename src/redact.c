/*
 * redact.c - URLs with their credentials hidden, for printing (src/redact.h). A URL value
 * may carry a password (redis://:pw@host, http://key:secret@endpoint); whatever shows such
 * a value calls kvt__redact_url, so there is one rule and one place to get it right.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "redact.h"

const char *kvt__redact_url(const char *url, char *out, size_t len)
{
	if (!out || !len)
		return out;
	if (!url) {
		out[0] = 0;
		return out;
	}
	const char *scheme = strstr(url, "://");
	const char *auth = scheme ? scheme + 3 : url;
	const char *at = strrchr(auth, '@');
	if (!at) {
		/* No userinfo: what follows a ':' in the authority is a port, shown only if
		 * it is one ("redis://:pw" or "h:pw" is a password missing its '@'). */
		size_t alen = strcspn(auth, "/?#");
		const char *host_end = auth;
		if (*auth == '[') { /* an IPv6 literal's colons are not a port's */
			const char *rb = memchr(auth, ']', alen);
			host_end = rb ? rb + 1 : auth + alen;
		}
		const char *colon = memchr(host_end, ':', alen - (size_t)(host_end - auth));
		bool port = colon != NULL;
		for (const char *c = colon ? colon + 1 : NULL; c && c < auth + alen; c++)
			port = port && *c >= '0' && *c <= '9';
		if (!colon || port)
			snprintf(out, len, "%s", url);
		else
			snprintf(out, len, "%.*s***%s", (int)(colon + 1 - url), url, auth + alen);
		return out;
	}
	const char *colon = memchr(auth, ':', (size_t)(at - auth));
	/* keep scheme and user name (not secret: it names the account), drop the rest */
	size_t keep = (size_t)((colon ? colon + 1 : auth) - url);
	snprintf(out, len, "%.*s***%s", (int)keep, url, at);
	return out;
}
