/*
 * redact.c - URLs with their credentials hidden, for printing (src/redact.h). A URL value
 * may carry a password (redis://:pw@host, http://key:secret@endpoint); whatever shows such
 * a value calls kvt__redact_url, so there is one rule and one place to get it right.
 */
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
		snprintf(out, len, "%s", url);
		return out;
	}
	const char *colon = memchr(auth, ':', (size_t)(at - auth));
	/* keep scheme and user name (not secret: it names the account), drop the rest */
	size_t keep = (size_t)((colon ? colon + 1 : auth) - url);
	snprintf(out, len, "%.*s***%s", (int)keep, url, at);
	return out;
}
