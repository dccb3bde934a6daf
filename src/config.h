/*
 * config.h - internal access to configuration values. One declarative table in config.c
 * lists every key (name, type, default, bounds, help); the library, the CLI and the
 * daemon read the same keys, from a file, the environment or kvt_config_set().
 * Adding a key is adding one row to that table.
 */
#ifndef KVT_CONFIG_H
#define KVT_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"

/* Values by key name. A name missing from the table is a programming error (asserted). */
uint64_t kvt__cfg_u64(const struct kvt_config *cfg, const char *key);
double kvt__cfg_double(const struct kvt_config *cfg, const char *key);
bool kvt__cfg_bool(const struct kvt_config *cfg, const char *key);
const char *kvt__cfg_str(const struct kvt_config *cfg, const char *key); /* never NULL */
const struct kvt_log *kvt__cfg_log(const struct kvt_config *cfg);
/* kvt_config_get for printing: a password inside a URL value (redis.url, s3.endpoint)
 * reads as "***" (src/redact.h). Everything that shows configuration uses this. */
int kvt__config_get_shown(const struct kvt_config *cfg, const char *key, char *buf, size_t len);
int kvt__config_copy(const struct kvt_config *src, struct kvt_config **out);

/* Split a comma-separated list in place-safe fashion: calls fn for each trimmed, non-empty
 * item; stops and returns fn's value if non-zero. */
int kvt__split_list(const char *list, int (*fn)(void *arg, const char *item), void *arg);
/* Parse "123", "64K", "2MiB", "1G", "1.5GiB" (binary units). 0 or -EINVAL. */
int kvt__parse_size(const char *s, uint64_t *out);

#endif
