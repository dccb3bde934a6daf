/*
 * config.c - every configuration key in one declarative table (after Redis' config.c):
 * name, type, default, bounds and help, written once as the X-macro of src/config_keys.h. kvt_config_set() parses and validates against the
 * row; files (INI through libinih) and KVTIER_* environment variables go through the same
 * function, so there is one parser and one set of error messages. docs/CONFIG.md is the
 * same table in prose (`kvtier config --list` prints it from here).
 *
 * Adding a key: add a row to src/config_keys.h, read it with kvt__cfg_u64/str/bool/double.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "redact.h"

struct cfg_row {
	const char *name;
	enum kvt_cfg_type type;
	const char *def;
	double min, max; /* numeric bounds (U64, SIZE, DOUBLE) */
	const char *choices; /* ENUM: "a|b|c" */
	enum kvt_cfg_show show;
	const char *help;
};

#define U64MAX 1.8e19
#define CFG_ROW(k, name, type, def, min, max, choices, show, help)                              \
	{name, KVT_CT_##type, def, min, max, choices, KVT_SHOW_##show, help},

static const struct cfg_row rows[] = {KVT_CONFIG_KEYS(CFG_ROW, _)};
_Static_assert(KVT_ARRAY_SIZE(rows) == KVT__CFG_N, "config.h counts the rows of the table");

#define N_ROWS KVT_ARRAY_SIZE(rows)

union cfg_val {
	uint64_t u;
	double d;
	char *s;
};

struct kvt_config {
	union cfg_val v[N_ROWS];
	struct kvt_log log;
};

static int row_index(const char *name)
{
	for (size_t i = 0; i < N_ROWS; i++)
		if (!strcmp(rows[i].name, name))
			return (int)i;
	return -1;
}

int kvt__parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	if (!s)
		return -EINVAL;
	/* strtod skips blanks and takes a sign, hexadecimal, "inf": only digits may start */
	const char *d = s;
	while (isspace((unsigned char)*d))
		d++;
	if (!isdigit((unsigned char)(*d == '.' ? d[1] : *d)) || strpbrk(d, "xX"))
		return -EINVAL;
	double v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v < 0)
		return -EINVAL;
	while (*end == ' ')
		end++;
	double mult = 1;
	switch (toupper((unsigned char)*end)) {
	case 0:
		break;
	case 'B':
		end++;
		break;
	case 'K':
		mult = 1024.0;
		end++;
		break;
	case 'M':
		mult = 1024.0 * 1024;
		end++;
		break;
	case 'G':
		mult = 1024.0 * 1024 * 1024;
		end++;
		break;
	case 'T':
		mult = 1024.0 * 1024 * 1024 * 1024;
		end++;
		break;
	default:
		return -EINVAL;
	}
	if (mult > 1) {
		if (*end == 'i' || *end == 'I')
			end++;
		if (*end == 'B' || *end == 'b')
			end++;
	}
	if (*end)
		return -EINVAL;
	/* A fraction of a byte is refused, not cut: "0.5" (or "0.9") became 0, which is
	 * "unlimited" for nvme.write_budget and "off" for nvme.log_max. With a unit the bytes
	 * are rounded down ("1.3G"), but not to 0 from something. */
	if (mult == 1 && v != floor(v))
		return -EINVAL;
	v *= mult;
	if (v >= 1.8e19 || (v > 0 && v < 1))
		return -EINVAL;
	*out = (uint64_t)v;
	return 0;
}

int kvt__parse_u64(const char *s, uint64_t *out)
{
	/* strtoull skips blanks, then takes a sign and negates: " -1" would read as 2^64 - 1
	 * and " -18446744073709551615" as 1. So after the blanks a digit must come. */
	const char *d = s;
	while (d && isspace((unsigned char)*d))
		d++;
	if (!d || !isdigit((unsigned char)*d))
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(d, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

int kvt__parse_double(const char *s, double *out)
{
	/* strtod also takes a sign, hexadecimal ("0x1p3"), "inf" and "nan": a number here is
	 * blanks, then a digit (or a point and a digit), in decimal */
	const char *d = s;
	while (d && isspace((unsigned char)*d))
		d++;
	if (!d || !isdigit((unsigned char)(*d == '.' ? d[1] : *d)) || strpbrk(d, "xX"))
		return -EINVAL;
	char *end;
	errno = 0;
	double v = strtod(d, &end);
	if (errno || *end || !isfinite(v))
		return -EINVAL;
	*out = v;
	return 0;
}

size_t kvt__utf8_len(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	unsigned char c = p[0];
	if (c < 0x80)
		return 1;
	size_t n = c >= 0xc2 && c <= 0xdf   ? 2
		   : c >= 0xe0 && c <= 0xef ? 3
		   : c >= 0xf0 && c <= 0xf4 ? 4
					    : 0;
	if (!n)
		return 0; /* a continuation byte, an overlong lead (C0, C1) or above U+10FFFF */
	for (size_t i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0; /* also stops at the terminating NUL */
	/* the second byte's range rules out overlong forms, surrogates and > U+10FFFF */
	if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f) ||
	    (c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] > 0x8f))
		return 0;
	return n;
}

static bool utf8_valid(const char *s)
{
	for (size_t n; *s; s += n)
		if (!(n = kvt__utf8_len(s)))
			return false;
	return true;
}

static int parse_bool(const char *s, bool *out)
{
	static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
	for (size_t i = 0; i < 4; i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

static int enum_index(const char *choices, const char *s)
{
	size_t n = strlen(s);
	int i = 0;
	for (const char *p = choices; *p; i++) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);
		if (len == n && !strncmp(p, s, n))
			return i;
		if (!bar)
			break;
		p = bar + 1;
	}
	return -1;
}

static void seterr(char *err, size_t errlen, const char *fmt, const char *a, const char *b)
{
	if (err && errlen)
		snprintf(err, errlen, fmt, a, b);
}

static int config_set(struct kvt_config *cfg, const char *key, const char *value, char *err,
		      size_t errlen);

/* The public calls echo keys and values from files, --set and the environment in their
 * errors: scrubbed of control characters (until 2026-12-06 a value could carry terminal
 * escapes or a newline into the operator's terminal). */
int kvt_config_set(struct kvt_config *cfg, const char *key, const char *value, char *err,
		   size_t errlen)
{
	int rc = config_set(cfg, key, value, err, errlen);
	if (rc < 0 && err)
		kvt__scrub_controls(err, errlen);
	return rc;
}

static int config_set(struct kvt_config *cfg, const char *key, const char *value, char *err,
		      size_t errlen)
{
	if (!cfg || !key || !value)
		return -EINVAL;
	int i = row_index(key);
	if (i < 0) {
		seterr(err, errlen, "unknown configuration key '%s'%s", key, "");
		return -ENOENT;
	}
	const struct cfg_row *r = &rows[i];
	union cfg_val v = {0};
	char why[160];
	switch (r->type) {
	case KVT_CT_STR:
		if (strlen(value) > 4096) {
			seterr(err, errlen, "%s: value longer than 4096 bytes%s", key, "");
			return -EINVAL;
		}
		/* `kvtier config --json`, the daemon's and the bindings' text are UTF-8: a
		 * Latin-1 byte would make them invalid or be replaced there, not here */
		if (!utf8_valid(value)) {
			seterr(err, errlen, "%s: not valid UTF-8%s", key, "");
			return -EINVAL;
		}
		if (!(v.s = kvt__strdup(value)))
			return -ENOMEM;
		kvt__free(cfg->v[i].s);
		cfg->v[i] = v;
		return 0;
	case KVT_CT_U64:
	case KVT_CT_SIZE: {
		if (r->type == KVT_CT_SIZE) {
			if (kvt__parse_size(value, &v.u) < 0) {
				seterr(err, errlen, "%s: '%s' is not a size (e.g. 512MiB, 4G)", key,
				       value);
				return -EINVAL;
			}
		} else {
			int rc = kvt__parse_u64(value, &v.u);
			if (rc == -ERANGE) {
				snprintf(why, sizeof(why), "%s: %.60s is out of range [%.0f, %.0f]",
					 key, value, r->min, r->max);
				seterr(err, errlen, "%s%s", why, "");
				return -EINVAL;
			}
			if (rc < 0) {
				seterr(err, errlen, "%s: '%s' is not a non-negative integer", key,
				       value);
				return -EINVAL;
			}
		}
		if ((double)v.u < r->min || (double)v.u > r->max) {
			snprintf(why, sizeof(why), "%s: %s is out of range [%.0f, %.0f]", key, value,
				 r->min, r->max);
			seterr(err, errlen, "%s%s", why, "");
			return -EINVAL;
		}
		break;
	}
	case KVT_CT_DOUBLE: {
		if (kvt__parse_double(value, &v.d) < 0 || v.d < r->min || v.d > r->max) {
			snprintf(why, sizeof(why), "%s: '%.60s' is not a number in [%g, %g]", key,
				 value, r->min, r->max);
			seterr(err, errlen, "%s%s", why, "");
			return -EINVAL;
		}
		break;
	}
	case KVT_CT_BOOL: {
		bool b;
		if (parse_bool(value, &b) < 0) {
			seterr(err, errlen, "%s: '%s' is not a boolean (true/false)", key, value);
			return -EINVAL;
		}
		v.u = b;
		break;
	}
	case KVT_CT_ENUM: {
		int e = enum_index(r->choices, value);
		if (e < 0) {
			snprintf(why, sizeof(why), "%s: '%.60s' is not one of %s", key, value,
				 r->choices);
			seterr(err, errlen, "%s%s", why, "");
			return -EINVAL;
		}
		v.u = (uint64_t)e;
		break;
	}
	}
	cfg->v[i] = v;
	return 0;
}

int kvt_config_get(const struct kvt_config *cfg, const char *key, char *buf, size_t len)
{
	int i = row_index(key);
	if (i < 0)
		return -ENOENT;
	const struct cfg_row *r = &rows[i];
	int n = 0;
	switch (r->type) {
	case KVT_CT_STR:
		n = snprintf(buf, len, "%s", cfg->v[i].s ? cfg->v[i].s : "");
		break;
	case KVT_CT_U64:
	case KVT_CT_SIZE:
		n = snprintf(buf, len, "%llu", (unsigned long long)cfg->v[i].u);
		break;
	case KVT_CT_DOUBLE:
		n = snprintf(buf, len, "%g", cfg->v[i].d);
		break;
	case KVT_CT_BOOL:
		n = snprintf(buf, len, "%s", cfg->v[i].u ? "true" : "false");
		break;
	case KVT_CT_ENUM: {
		const char *p = r->choices;
		for (uint64_t k = 0; k < cfg->v[i].u; k++)
			p = strchr(p, '|') + 1;
		const char *bar = strchr(p, '|');
		int l = bar ? (int)(bar - p) : (int)strlen(p);
		n = snprintf(buf, len, "%.*s", l, p);
		break;
	}
	}
	return (n < 0 || (size_t)n >= len) ? -ENOSPC : n;
}

int kvt__config_get_shown(const struct kvt_config *cfg, const char *key, char *buf, size_t len)
{
	int i = row_index(key);
	if (i < 0 || rows[i].show != KVT_SHOW_URL_SECRET)
		return kvt_config_get(cfg, key, buf, len);
	char raw[4200];
	int n = kvt_config_get(cfg, key, raw, sizeof(raw));
	if (n < 0)
		return n;
	kvt__redact_url(raw, buf, len);
	explicit_bzero(raw, sizeof(raw));
	return (int)strlen(buf);
}

int kvt_config_create(struct kvt_config **out)
{
	struct kvt_config *cfg = kvt__calloc(1, sizeof(*cfg));
	if (!cfg)
		return -ENOMEM;
	cfg->log.level = KVT_LOG_WARN;
	for (size_t i = 0; i < N_ROWS; i++) {
		char err[200];
		int rc = kvt_config_set(cfg, rows[i].name, rows[i].def, err, sizeof(err));
		if (rc < 0) { /* a bad default is a bug in the table */
			kvt_config_destroy(cfg);
			return rc;
		}
	}
	*out = cfg;
	return 0;
}

void kvt_config_destroy(struct kvt_config *cfg)
{
	if (!cfg)
		return;
	for (size_t i = 0; i < N_ROWS; i++)
		if (rows[i].type == KVT_CT_STR)
			kvt__free(cfg->v[i].s);
	kvt__free(cfg);
}

int kvt__config_copy(const struct kvt_config *src, struct kvt_config **out)
{
	struct kvt_config *cfg = kvt__calloc(1, sizeof(*cfg));
	if (!cfg)
		return -ENOMEM;
	*cfg = *src;
	for (size_t i = 0; i < N_ROWS; i++) {
		if (rows[i].type != KVT_CT_STR)
			continue;
		cfg->v[i].s = kvt__strdup(src->v[i].s ? src->v[i].s : "");
		if (!cfg->v[i].s) {
			for (size_t j = 0; j < i; j++)
				if (rows[j].type == KVT_CT_STR)
					kvt__free(cfg->v[j].s);
			kvt__free(cfg);
			return -ENOMEM;
		}
	}
	*out = cfg;
	return 0;
}

void kvt_config_set_log(struct kvt_config *cfg, kvt_log_fn fn, void *arg, int level)
{
	cfg->log.fn = fn;
	cfg->log.arg = arg;
	cfg->log.level = level;
}

const struct kvt_log *kvt__cfg_log(const struct kvt_config *cfg)
{
	return &cfg->log;
}

const char *kvt_config_key_info(unsigned i, const char **default_value, const char **help)
{
	if (i >= N_ROWS)
		return NULL;
	if (default_value)
		*default_value = rows[i].def;
	if (help)
		*help = rows[i].help;
	return rows[i].name;
}

/* The accessors take an index that config.h computed and checked at compile time. */
uint64_t kvt__cfg_u64_at(const struct kvt_config *cfg, unsigned i)
{
	return cfg->v[i].u;
}

double kvt__cfg_double_at(const struct kvt_config *cfg, unsigned i)
{
	return cfg->v[i].d;
}

bool kvt__cfg_bool_at(const struct kvt_config *cfg, unsigned i)
{
	return cfg->v[i].u != 0;
}

const char *kvt__cfg_str_at(const struct kvt_config *cfg, unsigned i)
{
	if (rows[i].type == KVT_CT_ENUM) {
		/* Enum values read as their text: stable storage in a per-thread buffer. */
		static __thread char buf[64];
		kvt_config_get(cfg, rows[i].name, buf, sizeof(buf));
		return buf;
	}
	return cfg->v[i].s ? cfg->v[i].s : "";
}

struct ini_ctx {
	struct kvt_config *cfg;
	int rc;
	char why[256];
	bool seen[N_ROWS]; /* keys this file set */
};

/* libinih reports the line of the first handler failure as ini_parse_file's result
 * (kvt__ini_load calls no handler after it, so why is that line's reason). */
static int on_ini_pair(void *user, const char *section, const char *name, const char *value)
{
	struct ini_ctx *c = user;
	char key[160], why[200];
	if (!section || !*section) {
		seterr(c->why, sizeof(c->why), "'%s' outside a [section]%s", name, "");
		c->rc = -EINVAL;
		return 0;
	}
	snprintf(key, sizeof(key), "%s.%s", section, name);
	/* last-wins would let a forgotten line further down override the one being edited */
	int i = row_index(key);
	if (i >= 0 && c->seen[i]) {
		seterr(c->why, sizeof(c->why), "%s set twice%s", key, "");
		c->rc = -EINVAL;
		return 0;
	}
	int rc = kvt_config_set(c->cfg, key, value, why, sizeof(why));
	if (rc < 0) {
		snprintf(c->why, sizeof(c->why), "%s", why);
		c->rc = rc == -ENOENT ? -EINVAL : rc;
		return 0;
	}
	c->seen[i] = true;
	return 1;
}

/* Longest line taken from a file. Debian's libinih reads a line into a stack buffer of
 * INI_MAX_LINE (200) bytes and parses the rest of a longer one as a line of its own; but a
 * "name = value" line can be long for good reason (an STS session token in an AWS
 * credentials file runs to KiBs). So every such line reaches libinih as "name=<0x01>N"
 * and the handler gets value N, extracted here as libinih would (kvt__ini_load keeps it;
 * 0x01 is refused in a file): no value is cut, and no secret is left in libinih's stack
 * buffer, which nobody wipes. */
#define KVT_INI_MAX_LINE 16384
/* Longest name of a "name = value" line: its rewrite "name=<0x01>N" (N up to 20 digits)
 * must fit in a line libinih reads whole (INI_MAX_LINE - 2 bytes). */
#define KVT_INI_MAX_NAME (INI_MAX_LINE - 2 - 22)
/* libinih 55 hands the handler a section name cut to 49 bytes (its MAX_SECTION, 50, is not
 * in ini.h): two long sections alike in their first 49 bytes would be one, and an AWS
 * credentials profile would take another profile's keys. Longer ones reach libinih as an
 * index (ini_keep_section). */
#define KVT_INI_MAX_SECTION 50

/* The caller's handler until it fails once: libinih goes on after a failure and returns its
 * line, so a later failure's reason would be reported at that line. */
struct ini_first {
	int (*handler)(void *, const char *, const char *, const char *);
	void *user;
	bool failed;
	char **long_values; /* the values of name = value lines, by index */
	size_t n_long;
};

static int ini_until_failure(void *u, const char *section, const char *name, const char *value)
{
	struct ini_first *f = u;
	if (f->failed)
		return 1;
	if (value && value[0] == '\x01') { /* a name = value line's value (kvt__ini_load) */
		size_t i = strtoul(value + 1, NULL, 10);
		value = i < f->n_long ? f->long_values[i] : "";
	}
	if (section && section[0] == '\x01') { /* a long [section] name (ini_keep_section) */
		size_t i = strtoul(section + 1, NULL, 10);
		section = i < f->n_long ? f->long_values[i] : "";
	}
	f->failed = !f->handler(f->user, section, name, value);
	return !f->failed;
}

/* libinih's find_chars_or_comment: the first of chars, or a ';' after a blank (a comment). */
static const char *ini_find(const char *s, const char *chars)
{
	bool blank = false;
	while (*s && !strchr(chars, *s) && !(blank && *s == ';')) {
		blank = isspace((unsigned char)*s);
		s++;
	}
	return s;
}

enum ini_line { INI_BLANK, INI_SECTION, INI_PAIR };

/* One line as libinih reads it, checked first: libinih reports the first syntax error's line
 * but the reason of whichever handler failed (a later line), and it takes an indented line
 * after "name = value" as more of that value, calling the handler with the same name again
 * (multi-line entries, on in Debian's build): the value is silently replaced. Neither is
 * allowed here. section and name (INI_MAX_LINE bytes each) carry libinih's state from line
 * to line; buf holds len + 1 bytes, and on INI_PAIR *value points into it, past the '='
 * (or ':'). The line's kind, or -EINVAL with err set. */
static int ini_check_line(const char *path, int ln, const char *p, size_t len, char *buf,
			  char *section, char *name, const char **value, char *err,
			  size_t errlen)
{
	char *start = buf;
	memcpy(buf, p, len);
	buf[len] = 0;
	if (ln == 1 && !strncmp(buf, "\xEF\xBB\xBF", 3))
		start += 3; /* a UTF-8 byte order mark */
	while (len && isspace((unsigned char)buf[len - 1]))
		buf[--len] = 0;
	while (isspace((unsigned char)*start))
		start++;
	if (!*start || *start == ';' || *start == '#')
		return INI_BLANK; /* a blank line or a comment (name stays: libinih keeps it too) */
	if (*name && start > buf) {
		if (err && errlen)
			snprintf(err, errlen,
				 "%s:%d: %.60s%s%.60s: continuation lines are not supported (this "
				 "indented line would extend its value; write it on one line)",
				 path, ln, section, *section ? "." : "", name);
		return -EINVAL;
	}
	char *end = (char *)ini_find(start + (*start == '['), *start == '[' ? "]" : "=:");
	if (*start == '[') {
		if (*end != ']') {
			if (err && errlen)
				snprintf(err, errlen, "%s:%d: '[' without a closing ']'", path, ln);
			return -EINVAL;
		}
		/* libinih drops what follows the ']': "[nvme] bytes = 4G" set nothing and said
		 * nothing (until 2026-12-06). Only blanks or a comment may follow. */
		const char *after = end + 1;
		while (isspace((unsigned char)*after))
			after++;
		if (*after && *after != ';' && *after != '#') {
			/* quoted up to its '=' or ':' only: the rest may be a secret
			 * ("[redis] url = redis://:password@host"; until 2026-12-06 the first 40
			 * characters were quoted, the password with them - a review) */
			size_t shown = strcspn(after, "=:");
			while (shown && isspace((unsigned char)after[shown - 1]))
				shown--;
			if (err && errlen)
				snprintf(err, errlen,
					 "%s:%d: text after [%.*s]: '%.*s%s' (a section line holds "
					 "only its name; put name = value on a line of its own)",
					 path, ln, (int)KVT_MIN(end - start - 1, 60), start + 1,
					 (int)KVT_MIN(shown, 40), after,
					 after[shown] ? " ..." : "");
			return -EINVAL;
		}
		snprintf(section, INI_MAX_LINE, "%.*s", (int)(end - start - 1), start + 1);
		name[0] = 0;
		return INI_SECTION;
	}
	if (*end != '=' && *end != ':') {
		if (err && errlen)
			snprintf(err, errlen, "%s:%d: neither a [section] nor name = value", path,
				 ln);
		return -EINVAL;
	}
	*value = end + 1;
	while (end > start && isspace((unsigned char)end[-1]))
		end--;
	snprintf(name, INI_MAX_LINE, "%.*s", (int)(end - start), start);
	return INI_PAIR;
}

/* A "name = value" line's value, as libinih 55 takes it (an inline comment - a ';' after a
 * blank, the blank after the '=' included - cut first, then the blanks around it), kept in
 * f; the line libinih gets instead is appended at *o. 0, or -errno with err set. */
static int ini_keep_value(struct ini_first *f, const char *path, int ln, const char *name,
			 const char *value, char *out, size_t *o, char *err, size_t errlen)
{
	if (strlen(name) > KVT_INI_MAX_NAME) {
		if (err && errlen)
			snprintf(err, errlen, "%s:%d: a name longer than %d bytes", path, ln,
				 KVT_INI_MAX_NAME);
		return -EINVAL;
	}
	const char *end = ini_find(value, "");
	while (value < end && isspace((unsigned char)*value))
		value++;
	while (end > value && isspace((unsigned char)end[-1]))
		end--;
	char **grown = kvt__realloc(f->long_values, (f->n_long + 1) * sizeof(*grown));
	char *v = grown ? kvt__malloc((size_t)(end - value) + 1) : NULL;
	if (grown)
		f->long_values = grown;
	if (!v) {
		seterr(err, errlen, "%s: %s", path, strerror(ENOMEM));
		return -ENOMEM;
	}
	memcpy(v, value, (size_t)(end - value));
	v[end - value] = 0;
	f->long_values[f->n_long] = v;
	*o += (size_t)sprintf(out + *o, "%s=\x01%zu", name, f->n_long++);
	return 0;
}

/* A [section] line whose name libinih would cut (KVT_INI_MAX_SECTION): kept in f as a long
 * value is, and libinih gets "[<0x01>N]" instead, which the handler wrapper maps back. Two
 * long sections alike in their first 49 bytes stay two, and an AWS profile is found by its
 * whole name (refusing them instead broke a credentials file with one long SSO profile
 * name, even one kvtier does not use). 0, or -ENOMEM with err set. */
static int ini_keep_section(struct ini_first *f, const char *path, const char *section,
			    char *out, size_t *o, char *err, size_t errlen)
{
	char **grown = kvt__realloc(f->long_values, (f->n_long + 1) * sizeof(*grown));
	char *v = grown ? kvt__malloc(strlen(section) + 1) : NULL;
	if (grown)
		f->long_values = grown;
	if (!v) {
		seterr(err, errlen, "%s: %s", path, strerror(ENOMEM));
		return -ENOMEM;
	}
	strcpy(v, section);
	f->long_values[f->n_long] = v;
	*o += (size_t)sprintf(out + *o, "[\x01%zu]", f->n_long++);
	return 0;
}

/* The file's bytes, its rewrite for libinih and its long values may hold secrets (an S3
 * credentials file): wiped before they are freed. */
static void ini_free(struct ini_first *f, char *buf, char *out, char *scratch, size_t len,
		     size_t outcap)
{
	for (size_t i = 0; i < f->n_long; i++) {
		explicit_bzero(f->long_values[i], strlen(f->long_values[i]));
		kvt__free(f->long_values[i]);
	}
	kvt__free(f->long_values);
	if (buf)
		explicit_bzero(buf, len);
	if (out)
		explicit_bzero(out, outcap);
	if (scratch)
		explicit_bzero(scratch, KVT_INI_MAX_LINE);
	kvt__free(buf);
	kvt__free(out);
	kvt__free(scratch);
}

int kvt__ini_load(const char *path, size_t max_bytes, int (*handler)(void *, const char *,
		 const char *, const char *), void *user, char *err, size_t errlen, int *line)
{
	*line = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		int e = errno;
		seterr(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		seterr(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	if (!S_ISREG(st.st_mode)) { /* a directory, /dev/zero, a FIFO that never ends */
		close(fd);
		seterr(err, errlen, "%s: %s", path,
		       S_ISDIR(st.st_mode) ? "is a directory, not a file" : "not a regular file");
		return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	}
	struct ini_first first = {handler, user, false, NULL, 0};
	char *buf = kvt__malloc(max_bytes + 1);
	if (!buf) {
		close(fd);
		seterr(err, errlen, "%s: %s", path, strerror(ENOMEM));
		return -ENOMEM;
	}
	/* read at most one byte past the bound: a file that grows meanwhile is still bounded */
	size_t len = 0;
	while (len <= max_bytes) {
		ssize_t n = read(fd, buf + len, max_bytes + 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			close(fd);
			ini_free(&first, buf, NULL, NULL, len, 0);
			seterr(err, errlen, "%s: %s", path, strerror(e));
			return -e;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (len > max_bytes) {
		ini_free(&first, buf, NULL, NULL, max_bytes + 1, 0);
		char why[64];
		snprintf(why, sizeof(why), "larger than %zu bytes", max_bytes);
		seterr(err, errlen, "%s: %s", path, why);
		return -EFBIG;
	}
	buf[len] = 0;
	/* Before libinih sees it: a NUL would end a value silently, 0x01 marks a long value
	 * (ini_keep_value); a line longer than libinih's buffer is rewritten, or refused; and
	 * the syntax (ini_check_line). out is what libinih parses: a line of it is at most 22
	 * bytes longer than the file's ("name=<0x01>" and up to 20 digits for a value). */
	size_t lines = 1;
	for (const char *q = buf; (q = memchr(q, '\n', (size_t)(buf + len - q))); q++)
		lines++;
	size_t outcap = len + 1 + 22 * lines;
	char *out = kvt__malloc(outcap), *scratch = kvt__malloc(KVT_INI_MAX_LINE);
	if (!out || !scratch) {
		ini_free(&first, buf, out, scratch, len, outcap);
		seterr(err, errlen, "%s: %s", path, strerror(ENOMEM));
		return -ENOMEM;
	}
	const char *p = buf, *end = buf + len;
	char section[INI_MAX_LINE] = "", name[INI_MAX_LINE] = "";
	size_t o = 0;
	for (int ln = 1; p < end; ln++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *eol = nl ? nl : end, *value = NULL;
		size_t n = (size_t)(eol - p);
		int rc = -EINVAL;
		if (memchr(p, 0, n) || memchr(p, 1, n)) {
			if (err && errlen)
				snprintf(err, errlen, "%s:%d: %s byte in the line", path, ln,
					 memchr(p, 0, n) ? "NUL" : "control (0x01)");
		} else if (n >= KVT_INI_MAX_LINE) {
			if (err && errlen)
				snprintf(err, errlen, "%s:%d: line longer than %d bytes", path, ln,
					 KVT_INI_MAX_LINE - 1);
		} else {
			rc = ini_check_line(path, ln, p, n, scratch, section, name, &value, err,
					    errlen);
		}
		/* libinih reads at most INI_MAX_LINE - 2 bytes and the newline as one line */
		if (rc == INI_PAIR) {
			rc = ini_keep_value(&first, path, ln, name, value, out, &o, err, errlen);
		} else if (rc == INI_SECTION && n < INI_MAX_LINE - 1 &&
			   strlen(section) >= KVT_INI_MAX_SECTION) {
			rc = ini_keep_section(&first, path, section, out, &o, err, errlen);
		} else if (rc >= 0 && n < INI_MAX_LINE - 1) {
			memcpy(out + o, p, n);
			o += n;
		} else if (rc == INI_SECTION) {
			if (err && errlen)
				snprintf(err, errlen, "%s:%d: section line longer than %d bytes",
					 path, ln, INI_MAX_LINE - 2);
			rc = -EINVAL;
		} /* else INI_BLANK: a long comment or blank line, left out */
		if (rc < 0) {
			ini_free(&first, buf, out, scratch, len, outcap);
			*line = ln;
			return rc;
		}
		if (nl)
			out[o++] = '\n';
		p = nl ? nl + 1 : end;
	}
	out[o] = 0;
	*line = ini_parse_string(out, ini_until_failure, &first);
	ini_free(&first, buf, out, scratch, len, outcap);
	return 0;
}

int kvt_config_load_file(struct kvt_config *cfg, const char *path, char *err, size_t errlen)
{
	struct ini_ctx c = {.cfg = cfg};
	int line, rc = kvt__ini_load(path, KVT_CONFIG_MAX_FILE_BYTES, on_ini_pair, &c, err,
				     errlen, &line);
	if (rc < 0) {
		if (err)
			kvt__scrub_controls(err, errlen);
		return rc;
	}
	if (line == 0)
		return 0;
	if (err && errlen) {
		snprintf(err, errlen, "%s:%d: %s", path, line, c.rc < 0 ? c.why : "syntax error");
		kvt__scrub_controls(err, errlen);
	}
	return c.rc < 0 ? c.rc : -EINVAL;
}

int kvt_config_apply_env(struct kvt_config *cfg, char *err, size_t errlen)
{
	for (size_t i = 0; i < N_ROWS; i++) {
		char env[128] = "KVTIER_";
		size_t o = strlen(env);
		for (const char *p = rows[i].name; *p && o < sizeof(env) - 1; p++)
			env[o++] = *p == '.' ? '_' : (char)toupper((unsigned char)*p);
		env[o] = 0;
		const char *v = getenv(env);
		if (!v)
			continue;
		char why[256];
		int rc = kvt_config_set(cfg, rows[i].name, v, why, sizeof(why));
		if (rc < 0) {
			seterr(err, errlen, "%s: %s", env, why);
			return rc;
		}
	}
	return 0;
}

int kvt__split_list(const char *list, int (*fn)(void *arg, const char *item), void *arg)
{
	char item[4096];
	const char *p = list;
	while (p && *p) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		while (len && isspace((unsigned char)*p)) {
			p++;
			len--;
		}
		while (len && isspace((unsigned char)p[len - 1]))
			len--;
		if (len >= sizeof(item))
			return -EINVAL;
		if (len) {
			memcpy(item, p, len);
			item[len] = 0;
			int rc = fn(arg, item);
			if (rc)
				return rc;
		}
		p = comma ? comma + 1 : NULL;
	}
	return 0;
}
