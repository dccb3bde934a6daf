/*
 * config.h - internal access to configuration values. One X-macro table
 * (src/config_keys.h) lists every key (name, type, default, bounds, help); the library, the
 * CLI and the daemon read the same keys, from a file, the environment or kvt_config_set().
 *
 * The library reads values with kvt__cfg_u64/double/bool/str(cfg, "section.name"). Each
 * call finds its row at compile time (the compilers fold __builtin_strcmp of two literals),
 * so a misspelt key, a key that is not a string literal, or an accessor that does not fit
 * the key's type (u64 of a string) is a compile error in every build type, and the read
 * costs an array index.
 */
#ifndef KVT_CONFIG_H
#define KVT_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "config_keys.h"
#include "internal.h"

enum kvt_cfg_type { KVT_CT_STR, KVT_CT_U64, KVT_CT_SIZE, KVT_CT_BOOL, KVT_CT_DOUBLE, KVT_CT_ENUM };
enum kvt_cfg_show { KVT_SHOW_PLAIN, KVT_SHOW_URL_SECRET };

/* Compile-time lookups over the table. KVT__CFG_INDEX(k) nests one conditional per row:
 * (row0 == k ? 0 : 1 + (row1 == k ? 0 : 1 + (... 0))), so it is the row's index, or
 * KVT__CFG_N when no row matches. */
#define KVT__CFG_EQ(a, b) (__builtin_strcmp((a), (b)) == 0)
#define KVT__CFG_ONE(k, ...) 1 +
#define KVT__CFG_OPEN_INDEX(k, name, ...) (KVT__CFG_EQ(k, name) ? 0 : 1 +
#define KVT__CFG_OPEN_TYPE(k, name, type, ...) (KVT__CFG_EQ(k, name) ? (int)KVT_CT_##type :
#define KVT__CFG_CLOSE(k, ...) )
#define KVT__CFG_N (KVT_CONFIG_KEYS(KVT__CFG_ONE, _) 0)
#define KVT__CFG_INDEX(k) (KVT_CONFIG_KEYS(KVT__CFG_OPEN_INDEX, k) 0 KVT_CONFIG_KEYS(KVT__CFG_CLOSE, k))
#define KVT__CFG_TYPE(k) (KVT_CONFIG_KEYS(KVT__CFG_OPEN_TYPE, k) - 1 KVT_CONFIG_KEYS(KVT__CFG_CLOSE, k))
#define KVT__CFG_TYPE_BIT(t) (1u << (int)KVT_CT_##t)
/* The row index of literal key k, whose type must be one of the bits in `types`. */
#define KVT__CFG_CHECKED(k, types)                                                                 \
	(__extension__({                                                                           \
		_Static_assert(KVT__CFG_INDEX(k) < KVT__CFG_N, "unknown configuration key " k);    \
		_Static_assert(KVT__CFG_TYPE(k) < 0 || ((1u << KVT__CFG_TYPE(k)) & (types)),       \
			       "configuration key " k " read with an accessor of another type");   \
		(unsigned)KVT__CFG_INDEX(k);                                                       \
	}))

/* Values by key name (a string literal, checked at compile time, see above). */
#define kvt__cfg_u64(cfg, k)                                                                       \
	kvt__cfg_u64_at((cfg), KVT__CFG_CHECKED(k, KVT__CFG_TYPE_BIT(U64) | KVT__CFG_TYPE_BIT(SIZE)))
#define kvt__cfg_double(cfg, k) kvt__cfg_double_at((cfg), KVT__CFG_CHECKED(k, KVT__CFG_TYPE_BIT(DOUBLE)))
#define kvt__cfg_bool(cfg, k) kvt__cfg_bool_at((cfg), KVT__CFG_CHECKED(k, KVT__CFG_TYPE_BIT(BOOL)))
/* never NULL; an ENUM key reads as its text */
#define kvt__cfg_str(cfg, k)                                                                       \
	kvt__cfg_str_at((cfg), KVT__CFG_CHECKED(k, KVT__CFG_TYPE_BIT(STR) | KVT__CFG_TYPE_BIT(ENUM)))
uint64_t kvt__cfg_u64_at(const struct kvt_config *cfg, unsigned i);
double kvt__cfg_double_at(const struct kvt_config *cfg, unsigned i);
bool kvt__cfg_bool_at(const struct kvt_config *cfg, unsigned i);
const char *kvt__cfg_str_at(const struct kvt_config *cfg, unsigned i);
const struct kvt_log *kvt__cfg_log(const struct kvt_config *cfg);
/* kvt_config_get for printing: a password inside a URL value (redis.url, s3.endpoint)
 * reads as "***" (src/redact.h). Everything that shows configuration uses this. */
int kvt__config_get_shown(const struct kvt_config *cfg, const char *key, char *buf, size_t len);
int kvt__config_copy(const struct kvt_config *src, struct kvt_config **out);

/* Largest configuration file accepted (far above any real one). */
#define KVT_CONFIG_MAX_FILE_BYTES (1u << 20)
/* Parse an INI file with libinih, bounded: only a regular file (not a directory, FIFO or
 * device such as /dev/zero) of at most max_bytes, with no NUL or 0x01 byte and no line of
 * 16 KiB or more; a "name = value" line longer than libinih's 200-byte line buffer (an STS
 * session token) reaches the handler whole (every value is handed to libinih by reference,
 * none passes through its stack buffer), a longer section line is refused; its syntax
 * is checked first (every line a comment, a [section] or name = value; no indented
 * continuation line, which libinih would pass as the same name again). -errno with
 * "path: reason" or "path:LINE: reason" in err when the file is refused; else 0 and
 * *line = ini_parse_string's result (0, or the line of the first error the handler
 * reported; the handler is not called after that one). The file's bytes are wiped from
 * memory before they are freed (credentials). */
int kvt__ini_load(const char *path, size_t max_bytes,
		  int (*handler)(void *, const char *, const char *, const char *), void *user,
		  char *err, size_t errlen, int *line);

/* Split a comma-separated list in place-safe fashion: calls fn for each trimmed, non-empty
 * item; stops and returns fn's value if non-zero. */
int kvt__split_list(const char *list, int (*fn)(void *arg, const char *item), void *arg);
/* Parse "123", "64K", "2MiB", "1G", "1.5GiB" (binary units). 0 or -EINVAL. */
int kvt__parse_size(const char *s, uint64_t *out);
/* Parse a decimal unsigned 64-bit integer: blanks, then digits only (no sign: strtoull
 * would negate "-1" to 2^64 - 1). 0, -EINVAL, or -ERANGE above 2^64 - 1. */
int kvt__parse_u64(const char *s, uint64_t *out);
/* Parse a decimal number: blanks, then digits with an optional point and exponent ("0.5",
 * "1e3"); no sign, hexadecimal, inf or nan, which strtod alone takes. 0 or -EINVAL. */
int kvt__parse_double(const char *s, double *out);
/* Bytes of the valid UTF-8 sequence at s (1 for ASCII, also for the NUL), 0 if invalid
 * (a stray continuation byte, an overlong form, a surrogate, above U+10FFFF, cut short). */
size_t kvt__utf8_len(const char *s);

#endif
