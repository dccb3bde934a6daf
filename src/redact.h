/*
 * redact.h - the one place that knows where a credential hides in a URL. Every line that
 * shows a configured URL (logs, errors, `kvtier config`) goes through it, so a password in
 * redis.url or s3.endpoint is never printed.
 */
#ifndef KVT_REDACT_H
#define KVT_REDACT_H

#include <stddef.h>

/* Copy url into out (len bytes, always NUL-terminated, truncated if short) with the
 * userinfo's secret replaced by three asterisks: redis://:pw@h shows as redis://:(***)@h,
 * http://user:pw@h as http://user:(***)@h, http://token@h as http://(***)@h (without the
 * parentheses). The scheme is optional (redis accepts ":pw@host:port"); userinfo ends at
 * the last '@', as the tiers parse it. Without an '@', what follows a ':' in the
 * authority is shown only if it is a port (digits): redis://:pw shows as redis://:***.
 * The secret is never copied, so truncation cannot reveal part of it. Returns out. */
const char *kvt__redact_url(const char *url, char *out, size_t len);

#endif
