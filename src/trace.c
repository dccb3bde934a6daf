/*
 * trace.c - reading and generating request traces (src/trace.h).
 *
 * The parser is hand-written for exactly the Mooncake schema rather than a general JSON
 * library: a trace is untrusted input that can be gigabytes long, and a schema-bound
 * parser can check every bound before it allocates (a hash_ids array is counted against
 * KVT_TRACE_MAX_BLOCKS and against what input_length allows while it is being read), can
 * name the line and the field that is wrong, and needs no DOM. It accepts standard JSON
 * for the object on each line: unknown fields of any JSON type are skipped (nesting
 * bounded), duplicate known fields are an error, numbers where integers belong must be
 * plain non-negative integers.
 *
 * The generator builds prompts from segments (a system prompt, a document, a user turn, a
 * tool result), each with a unique id, and hashes each block_tokens window of the prompt,
 * chained with the previous block's id: exactly the prefix-chained ids a real tokenizer +
 * block hasher produce, including a partial last block whose id changes when the prompt
 * grows. Randomness is one xoshiro256** stream from the seed, so a seed is a trace.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "internal.h"
#include "open_path.h"
#include "trace.h"

int kvt__trace_create(uint32_t block_tokens, struct kvt_trace **out)
{
	if (!out || !block_tokens || block_tokens > 65536)
		return -EINVAL;
	struct kvt_trace *t = kvt__calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->block_tokens = block_tokens;
	*out = t;
	return 0;
}

void kvt__trace_destroy(struct kvt_trace *t)
{
	if (!t)
		return;
	kvt__free(t->req);
	kvt__free(t->ids);
	kvt__free(t);
}

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 256;
	while (c < need)
		c *= 2;
	void *q = kvt__realloc(*p, c * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

static uint64_t max_blocks(const struct kvt_trace *t, uint32_t input_len)
{
	return ((uint64_t)input_len + t->block_tokens - 1) / t->block_tokens;
}

int kvt__trace_add(struct kvt_trace *t, double ts_ms, uint32_t input_len, uint32_t output_len,
		   const uint64_t *ids, uint32_t n_blocks)
{
	if (!(ts_ms >= 0 && ts_ms <= KVT_TRACE_MAX_TS_MS) || !input_len ||
	    input_len > KVT_TRACE_MAX_INPUT || output_len > KVT_TRACE_MAX_OUTPUT ||
	    n_blocks > KVT_TRACE_MAX_BLOCKS || n_blocks > max_blocks(t, input_len))
		return -EINVAL;
	if (t->n >= KVT_TRACE_MAX_REQUESTS)
		return -E2BIG;
	if (t->n_ids + n_blocks > KVT_TRACE_MAX_IDS)
		return -EFBIG;
	if (grow((void **)&t->req, &t->cap, t->n + 1, sizeof(*t->req)) ||
	    grow((void **)&t->ids, &t->ids_cap, t->n_ids + n_blocks, sizeof(*t->ids)))
		return -ENOMEM;
	for (uint32_t i = 0; i < n_blocks; i++)
		if (ids[i] > KVT_TRACE_MAX_ID)
			return -EINVAL;
	if (n_blocks) /* t->ids is still NULL before the first block: memcpy(NULL, .., 0) is UB */
		memcpy(t->ids + t->n_ids, ids, (size_t)n_blocks * sizeof(*ids));
	t->req[t->n] = (struct kvt_trace_req){.ts_ms = ts_ms,
					      .input_len = input_len,
					      .output_len = output_len,
					      .n_blocks = n_blocks,
					      .line = (uint32_t)t->n + 1,
					      .first = t->n_ids};
	t->n++;
	t->n_ids += n_blocks;
	return 0;
}

/* ------------------------------------------------------------------ parser */

struct lex {
	const char *p, *end;
	char *err;
	size_t errlen;
	size_t line;
	int rc;
};

__attribute__((format(printf, 2, 3))) static int fail(struct lex *l, const char *fmt, ...)
{
	if (l->rc)
		return l->rc;
	char why[200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	kvt__scrub_controls(why, sizeof(why)); /* a field name or escape from the trace */
	if (l->err && l->errlen)
		snprintf(l->err, l->errlen, "line %zu: %s", l->line, why);
	l->rc = -EINVAL;
	return l->rc;
}

static void ws(struct lex *l)
{
	while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\r' || *l->p == '\n'))
		l->p++;
}

static bool eat(struct lex *l, char c)
{
	ws(l);
	if (l->p < l->end && *l->p == c) {
		l->p++;
		return true;
	}
	return false;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* A JSON string; its ASCII-decoded form (escapes resolved, non-ASCII kept as bytes) goes
 * to out when it fits, else out is "" (only field names are ever compared). */
static int string(struct lex *l, char *out, size_t outlen)
{
	size_t o = 0;
	bool fits = true;
	if (!eat(l, '"'))
		return fail(l, "expected a string");
	while (l->p < l->end && *l->p != '"') {
		unsigned char c = (unsigned char)*l->p++;
		if (c < 0x20)
			return fail(l, "control character in a string");
		if (c == '\\') {
			if (l->p >= l->end)
				break;
			char e = *l->p++;
			switch (e) {
			case '"':
			case '\\':
			case '/':
				c = (unsigned char)e;
				break;
			case 'b':
				c = '\b';
				break;
			case 'f':
				c = '\f';
				break;
			case 'n':
				c = '\n';
				break;
			case 'r':
				c = '\r';
				break;
			case 't':
				c = '\t';
				break;
			case 'u': {
				unsigned v = 0;
				for (int i = 0; i < 4; i++) {
					int h = l->p < l->end ? hexval(*l->p) : -1;
					if (h < 0)
						return fail(l, "bad \\u escape in a string");
					v = v * 16 + (unsigned)h;
					l->p++;
				}
				/* a field name is compared as a C string: "timestamp\u0000x"
				 * would read as "timestamp" */
				if (!v && outlen)
					return fail(l, "\\u0000 in a field name");
				c = v < 0x80 ? (unsigned char)v : '?';
				break;
			}
			default:
				return fail(l, "bad escape '\\%c' in a string", e);
			}
		}
		if (o + 1 < outlen)
			out[o++] = (char)c;
		else
			fits = false;
	}
	if (l->p >= l->end)
		return fail(l, "unterminated string");
	l->p++;
	if (outlen)
		out[fits ? o : 0] = 0;
	return 0;
}

/* A plain non-negative integer (no sign, fraction or exponent) <= max. A fraction is
 * allowed (and truncated) when *frac is non-NULL. */
static int integer(struct lex *l, const char *field, uint64_t max, double *frac, uint64_t *out)
{
	ws(l);
	if (l->p < l->end && *l->p == '-')
		return fail(l, "%s must not be negative", field);
	if (l->p >= l->end || *l->p < '0' || *l->p > '9')
		return fail(l, "%s must be a non-negative integer", field);
	if (*l->p == '0' && l->p + 1 < l->end && l->p[1] >= '0' && l->p[1] <= '9')
		return fail(l, "%s: leading zero in a number", field);
	uint64_t v = 0;
	while (l->p < l->end && *l->p >= '0' && *l->p <= '9') {
		unsigned d = (unsigned)(*l->p++ - '0');
		if (v > (max - d) / 10)
			return fail(l, "%s is too large (at most %llu)", field,
				    (unsigned long long)max);
		v = v * 10 + d;
	}
	double f = 0;
	if (l->p < l->end && *l->p == '.') {
		if (!frac)
			return fail(l, "%s must be an integer", field);
		l->p++;
		double scale = 0.1;
		if (l->p >= l->end || *l->p < '0' || *l->p > '9')
			return fail(l, "%s: bad number", field);
		while (l->p < l->end && *l->p >= '0' && *l->p <= '9') {
			f += (*l->p++ - '0') * scale;
			scale /= 10;
		}
	}
	if (l->p < l->end && (*l->p == 'e' || *l->p == 'E'))
		return fail(l, "%s: exponents are not accepted", field);
	if (frac)
		*frac = f;
	*out = v;
	return 0;
}

/* Skip any JSON value (an unknown field's), nesting bounded. */
static int skip_value(struct lex *l, int depth)
{
	if (depth > 32)
		return fail(l, "values nested too deeply");
	ws(l);
	if (l->p >= l->end)
		return fail(l, "truncated value");
	char c = *l->p;
	if (c == '"') {
		char dummy[1];
		return string(l, dummy, 0);
	}
	if (c == '{' || c == '[') {
		char close = c == '{' ? '}' : ']';
		l->p++;
		if (eat(l, close))
			return 0;
		do {
			if (c == '{') {
				char dummy[1];
				if (string(l, dummy, 0) || !eat(l, ':'))
					return fail(l, "expected \"name\": in an object");
			}
			if (skip_value(l, depth + 1))
				return l->rc;
		} while (eat(l, ','));
		if (!eat(l, close))
			return fail(l, "expected ',' or '%c'", close);
		return 0;
	}
	static const char *lits[] = {"true", "false", "null"};
	for (int i = 0; i < 3; i++) {
		size_t n = strlen(lits[i]);
		if ((size_t)(l->end - l->p) >= n && !memcmp(l->p, lits[i], n)) {
			l->p += n;
			return 0;
		}
	}
	if (c == '-' || (c >= '0' && c <= '9')) {
		const char *s = l->p;
		if (*l->p == '-')
			l->p++;
		size_t digits = 0;
		while (l->p < l->end &&
		       ((*l->p >= '0' && *l->p <= '9') || *l->p == '.' || *l->p == 'e' ||
			*l->p == 'E' || *l->p == '+' || *l->p == '-')) {
			l->p++;
			digits++;
		}
		char num[64];
		size_t n = (size_t)(l->p - s);
		if (!digits || n >= sizeof(num))
			return fail(l, "bad number");
		memcpy(num, s, n);
		num[n] = 0;
		char *e;
		strtod(num, &e);
		if (*e)
			return fail(l, "bad number");
		return 0;
	}
	return fail(l, "unexpected character '%c'", c >= 0x20 && c < 0x7f ? c : '?');
}

enum { F_TS = 1, F_IN = 2, F_OUT = 4, F_IDS = 8 };

/* One line holding one object. ids is scratch of KVT_TRACE_MAX_BLOCKS entries. */
static int parse_object(struct lex *l, struct kvt_trace *t, uint64_t *ids, double last_ts)
{
	unsigned seen = 0;
	double ts = 0;
	uint64_t in = 0, out = 0, n_ids = 0;
	if (!eat(l, '{'))
		return fail(l, "expected '{' (one JSON object per line)");
	if (!eat(l, '}')) {
		do {
			char key[32];
			unsigned bit = 0;
			if (string(l, key, sizeof(key)))
				return l->rc;
			if (!eat(l, ':'))
				return fail(l, "expected ':' after \"%s\"", key);
			if (!strcmp(key, "timestamp"))
				bit = F_TS;
			else if (!strcmp(key, "input_length"))
				bit = F_IN;
			else if (!strcmp(key, "output_length"))
				bit = F_OUT;
			else if (!strcmp(key, "hash_ids"))
				bit = F_IDS;
			if (bit & seen)
				return fail(l, "duplicate field \"%s\"", key);
			seen |= bit;
			uint64_t v;
			double frac;
			switch (bit) {
			case F_TS:
				if (integer(l, "timestamp", (uint64_t)KVT_TRACE_MAX_TS_MS, &frac,
					    &v))
					return l->rc;
				ts = (double)v + frac;
				if (ts > (double)KVT_TRACE_MAX_TS_MS) /* the fraction carried it over */
					return fail(l, "timestamp is over %llu ms",
						    (unsigned long long)KVT_TRACE_MAX_TS_MS);
				break;
			case F_IN:
				if (integer(l, "input_length", KVT_TRACE_MAX_INPUT, NULL, &in))
					return l->rc;
				break;
			case F_OUT:
				if (integer(l, "output_length", KVT_TRACE_MAX_OUTPUT, NULL, &out))
					return l->rc;
				break;
			case F_IDS:
				if (!eat(l, '['))
					return fail(l, "hash_ids must be an array of integers");
				if (eat(l, ']'))
					break;
				do {
					if (n_ids >= KVT_TRACE_MAX_BLOCKS)
						return fail(l, "hash_ids has more than %u entries",
							    KVT_TRACE_MAX_BLOCKS);
					if (integer(l, "hash_ids entry", KVT_TRACE_MAX_ID, NULL,
						    &ids[n_ids]))
						return l->rc;
					n_ids++;
				} while (eat(l, ','));
				if (!eat(l, ']'))
					return fail(l, "expected ',' or ']' in hash_ids");
				break;
			default:
				if (skip_value(l, 0))
					return l->rc;
			}
		} while (eat(l, ','));
		if (!eat(l, '}'))
			return fail(l, "expected ',' or '}'");
	}
	ws(l);
	if (l->p != l->end)
		return fail(l, "text after the object");
	static const char *names[] = {"timestamp", "input_length", "output_length", "hash_ids"};
	for (int i = 0; i < 4; i++)
		if (!(seen & (1u << i)))
			return fail(l, "missing field \"%s\"", names[i]);
	if (!in)
		return fail(l, "input_length must be at least 1");
	if (ts < last_ts)
		return fail(l, "timestamp %.3f is before the previous line's %.3f", ts, last_ts);
	if (n_ids > max_blocks(t, (uint32_t)in))
		return fail(l, "hash_ids has %llu blocks but input_length %llu fills at most %llu",
			    (unsigned long long)n_ids, (unsigned long long)in,
			    (unsigned long long)max_blocks(t, (uint32_t)in));
	int rc = kvt__trace_add(t, ts, (uint32_t)in, (uint32_t)out, ids, (uint32_t)n_ids);
	if (!rc) /* blank lines are skipped: the request's number may not be its line's */
		t->req[t->n - 1].line = (uint32_t)KVT_MIN(l->line, (size_t)UINT32_MAX);
	if (rc == -E2BIG) {
		fail(l, "more than %u requests", KVT_TRACE_MAX_REQUESTS);
		return l->rc = -E2BIG;
	}
	if (rc == -EFBIG) {
		fail(l, "more than %llu hash ids in the trace", (unsigned long long)KVT_TRACE_MAX_IDS);
		return l->rc = -EFBIG;
	}
	if (rc < 0) {
		fail(l, "%s", kvt_strerror(rc));
		return l->rc = rc;
	}
	return 0;
}

/* The parser's state across lines, so a file can be parsed as it is read. */
struct parser {
	struct kvt_trace *t;
	uint64_t *ids; /* one request's hash_ids */
	struct lex l;
	double last_ts;
};

static int parser_init(struct parser *ps, struct kvt_trace *t, char *err, size_t errlen)
{
	*ps = (struct parser){.t = t, .l = {.err = err, .errlen = errlen}};
	ps->ids = kvt__malloc(KVT_TRACE_MAX_BLOCKS * sizeof(*ps->ids));
	if (!ps->ids)
		return -ENOMEM;
	ps->last_ts = t->n ? t->req[t->n - 1].ts_ms : 0;
	return 0;
}

/* One line, without its '\n'. */
static int parse_line(struct parser *ps, const char *p, size_t n)
{
	struct lex *l = &ps->l;
	l->line++;
	l->p = p;
	l->end = p + n;
	l->rc = 0;
	if (n > KVT_TRACE_MAX_LINE) {
		fail(l, "line longer than %u bytes", KVT_TRACE_MAX_LINE);
		return l->rc = -E2BIG;
	}
	if (memchr(p, 0, n))
		return fail(l, "NUL byte in the line");
	ws(l);
	if (l->p == l->end)
		return 0;
	int rc = parse_object(l, ps->t, ps->ids, ps->last_ts);
	if (!rc)
		ps->last_ts = ps->t->req[ps->t->n - 1].ts_ms;
	return rc;
}

int kvt__trace_parse(struct kvt_trace *t, const char *buf, size_t len, char *err, size_t errlen)
{
	if (!t || (!buf && len))
		return -EINVAL;
	struct parser ps;
	int rc = parser_init(&ps, t, err, errlen);
	const char *p = buf, *end = buf + len;
	while (!rc && p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *eol = nl ? nl : end;
		rc = parse_line(&ps, p, (size_t)(eol - p));
		p = nl ? nl + 1 : end;
	}
	kvt__free(ps.ids);
	return rc;
}

/* Read and parse line by line: memory is one line (bounded by KVT_TRACE_MAX_LINE) plus
 * what the trace holds, and the file is bounded by KVT_TRACE_MAX_BYTES, so /dev/zero, a
 * file without newlines or an endless pipe ends with an error instead of eating memory. */
int kvt__trace_load(struct kvt_trace *t, const char *path, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = 0;
	/* by name: a regular file or a character device (/dev/null); a FIFO would hold open()
	 * until a writer came, so it is refused, and a pipe is read as "-" */
	FILE *f = stdin;
	if (strcmp(path, "-")) {
		const char *what;
		int fd = kvt__open_path(path, O_RDONLY, 0, true, &what);
		if (fd < 0) {
			if (err && errlen && what)
				snprintf(err, errlen, "%s, not a trace file%s",
					 fd == -EISDIR ? "is a directory" : what,
					 strcmp(what, "a FIFO") ? ""
								: " (give '-' to read a pipe from stdin)");
			else if (err && errlen) /* the caller names the file */
				snprintf(err, errlen, "%s", strerror(-fd));
			return fd;
		}
		if (!(f = fdopen(fd, "rb"))) {
			int e = errno;
			close(fd);
			if (err && errlen)
				snprintf(err, errlen, "%s", strerror(e));
			return -e;
		}
	} else {
		struct stat st; /* stdin: a directory reads as an error, say what it is */
		if (!fstat(fileno(f), &st) && S_ISDIR(st.st_mode)) {
			if (err && errlen)
				snprintf(err, errlen, "is a directory, not a trace file");
			return -EISDIR;
		}
	}
	const size_t cap = (size_t)KVT_TRACE_MAX_LINE + 1; /* a longest line and its '\n' */
	char *buf = kvt__malloc(cap);
	struct parser ps = {.ids = NULL};
	int rc = buf ? parser_init(&ps, t, err, errlen) : -ENOMEM;
	size_t len = 0;
	uint64_t total = 0;
	while (!rc) {
		size_t n = fread(buf + len, 1, cap - len, f);
		len += n;
		total += n;
		if (total > KVT_TRACE_MAX_BYTES) {
			rc = fail(&ps.l, "the trace is longer than %llu bytes",
				  (unsigned long long)KVT_TRACE_MAX_BYTES);
			rc = ps.l.rc = -EFBIG;
			break;
		}
		char *p = buf, *end = buf + len, *nl;
		while (!rc && (nl = memchr(p, '\n', (size_t)(end - p)))) {
			rc = parse_line(&ps, p, (size_t)(nl - p));
			p = nl + 1;
		}
		if (rc)
			break;
		len = (size_t)(end - p);
		memmove(buf, p, len);
		if (n == 0) { /* end of file or a read error */
			if (ferror(f)) {
				rc = -EIO;
				if (err && errlen)
					snprintf(err, errlen, "line %zu: read error", ps.l.line + 1);
			} else if (len) {
				rc = parse_line(&ps, buf, len);
			}
			break;
		}
		if (len == cap) /* a line without its end: longer than KVT_TRACE_MAX_LINE */
			rc = parse_line(&ps, buf, len);
	}
	if (rc == -ENOMEM && err && errlen && !err[0])
		snprintf(err, errlen, "line %zu: out of memory", ps.l.line);
	kvt__free(ps.ids);
	kvt__free(buf);
	if (f != stdin)
		fclose(f);
	return rc;
}

int kvt__trace_write(const struct kvt_trace *t, FILE *f)
{
	for (size_t i = 0; i < t->n; i++) {
		const struct kvt_trace_req *r = &t->req[i];
		const uint64_t *ids = kvt__trace_blocks(t, r);
		if (r->ts_ms == floor(r->ts_ms))
			fprintf(f, "{\"timestamp\": %.0f", r->ts_ms);
		else
			fprintf(f, "{\"timestamp\": %.3f", r->ts_ms);
		fprintf(f, ", \"input_length\": %u, \"output_length\": %u, \"hash_ids\": [",
			r->input_len, r->output_len);
		for (uint32_t b = 0; b < r->n_blocks; b++)
			fprintf(f, "%s%llu", b ? ", " : "", (unsigned long long)ids[b]);
		fputs("]}\n", f);
	}
	return ferror(f) ? -EIO : 0;
}

/* ------------------------------------------------------------------ generator */

struct rng {
	uint64_t s[4];
};

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t rnext(struct rng *r)
{
	uint64_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return res;
}

static double runif(struct rng *r) /* [0, 1) */
{
	return (double)(rnext(r) >> 11) * (1.0 / 9007199254740992.0);
}

static uint32_t rrange(struct rng *r, uint32_t lo, uint32_t hi) /* [lo, hi] */
{
	if (hi <= lo)
		return lo;
	/* the width in double: hi - lo + 1 is 0 in uint32_t for [0, UINT32_MAX] */
	return lo + (uint32_t)(runif(r) * ((double)(hi - lo) + 1.0));
}

static double rexp(struct rng *r, double mean)
{
	return -mean * log(1.0 - runif(r));
}

/* Zipf over n items by inverse CDF on a precomputed table. */
struct zipf {
	double *cdf;
	uint32_t n;
};

static int zipf_init(struct zipf *z, uint32_t n, double s)
{
	z->n = n;
	z->cdf = kvt__malloc((size_t)n * sizeof(double));
	if (!z->cdf)
		return -ENOMEM;
	double sum = 0;
	for (uint32_t i = 0; i < n; i++)
		z->cdf[i] = sum += 1.0 / pow((double)(i + 1), s);
	for (uint32_t i = 0; i < n; i++)
		z->cdf[i] /= sum;
	return 0;
}

static uint32_t zipf_draw(const struct zipf *z, struct rng *r)
{
	double u = runif(r);
	uint32_t lo = 0, hi = z->n - 1;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (z->cdf[mid] < u)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* A prompt under construction: segments of distinct content. */
struct seg {
	uint64_t id;
	uint32_t len;
};

struct prompt {
	struct seg *seg;
	size_t n, cap;
	uint64_t tokens;
};

static int prompt_add(struct prompt *p, uint64_t id, uint32_t len)
{
	if (!len)
		return 0;
	if (grow((void **)&p->seg, &p->cap, p->n + 1, sizeof(*p->seg)))
		return -ENOMEM;
	p->seg[p->n++] = (struct seg){id, len};
	p->tokens += len;
	return 0;
}

/* Chain hash: for a given v, one-to-one in h (a XOR, then splitmix's bijection), so two
 * different parents never give a block one id. The hash_combine form it replaced,
 * h ^ (v + K + (h << 6) + (h >> 2)), is not: rag with docs_per_req=4e9 produced an id
 * that followed two different ids, which the replay's prefix-hash check refused. */
static uint64_t hmix(uint64_t h, uint64_t v)
{
	uint64_t sv = v;
	uint64_t x = h ^ splitmix(&sv);
	return splitmix(&x);
}

/* A pending request of one session, before sorting by time. */
struct gen_req {
	double ts;
	uint32_t in, out, n_blocks;
	uint64_t first;
};

struct gen {
	const struct kvt_gen_opts *o;
	struct rng r;
	struct gen_req *req;
	size_t n, cap;
	uint64_t *ids;
	size_t n_ids, ids_cap;
	uint64_t next_seg;
	/* requests to generate (o->requests and a margin): a session stops there too, so
	 * knobs that never end one (end_prob=1e-300, steps=4e9) cannot run without bound */
	uint32_t target;
};

/* Record a request whose prompt is p (truncated to KVT_TRACE_MAX_INPUT tokens). */
static int emit(struct gen *g, double ts, const struct prompt *p, uint32_t out)
{
	uint32_t bt = g->o->block_tokens;
	uint64_t tokens = KVT_MIN(p->tokens, (uint64_t)KVT_TRACE_MAX_INPUT);
	uint64_t nb = (tokens + bt - 1) / bt;
	nb = KVT_MIN(nb, (uint64_t)KVT_TRACE_MAX_BLOCKS);
	if (!tokens)
		return 0;
	if (g->n_ids + nb > KVT_TRACE_MAX_IDS) /* before the memory: cmd_replay names the bound */
		return -EFBIG;
	if (grow((void **)&g->req, &g->cap, g->n + 1, sizeof(*g->req)) ||
	    grow((void **)&g->ids, &g->ids_cap, g->n_ids + nb, sizeof(*g->ids)))
		return -ENOMEM;
	uint64_t prev = 0x6b767469657221ull, pos = 0, h = prev; /* arbitrary chain start */
	size_t si = 0;
	uint32_t off = 0; /* offset inside seg[si] */
	for (uint64_t b = 0; b < nb; b++) {
		uint64_t end = KVT_MIN((b + 1) * bt, tokens);
		h = prev;
		while (pos < end) {
			uint32_t take =
			    (uint32_t)KVT_MIN((uint64_t)(p->seg[si].len - off), end - pos);
			h = hmix(hmix(h, p->seg[si].id), ((uint64_t)off << 32) | take);
			pos += take;
			off += take;
			if (off == p->seg[si].len) {
				si++;
				off = 0;
			}
		}
		prev = h & KVT_TRACE_MAX_ID;
		g->ids[g->n_ids + b] = prev;
	}
	g->req[g->n++] = (struct gen_req){ts, (uint32_t)tokens, out, (uint32_t)nb, g->n_ids};
	g->n_ids += nb;
	return 0;
}

static uint64_t new_seg(struct gen *g)
{
	return hmix(g->o->seed, ++g->next_seg);
}

static int gen_chat(struct gen *g, double start, uint32_t *count)
{
	const struct kvt_gen_opts *o = g->o;
	struct prompt p = {0};
	int rc =
	    prompt_add(&p, hmix(0x5359535f, rrange(&g->r, 0, o->sys_prompts - 1)), o->sys_tokens);
	double ts = start;
	uint64_t before;
	uint32_t turn = 0;
	do {
		before = p.tokens;
		if (!rc)
			rc = prompt_add(&p, new_seg(g), rrange(&g->r, o->user_min, o->user_max));
		uint32_t out = rrange(&g->r, o->out_min, o->out_max);
		if (!rc)
			rc = emit(g, ts, &p, out);
		(*count)++;
		if (!rc) /* the answer becomes part of the next turn's prompt */
			rc = prompt_add(&p, new_seg(g), out);
		ts += rexp(&g->r, o->think_s) * 1000.0;
		/* ends by end_prob, at the longest prompt, at the request target, after a turn
		 * that added nothing (user and answer of 0 tokens: the same prompt again), or
		 * at KVT_GEN_MAX_TURNS (checked last: the draws stay those of an uncapped run) */
	} while (!rc && runif(&g->r) >= o->end_prob && p.tokens < KVT_TRACE_MAX_INPUT &&
		 p.tokens > before && *count < g->target && ++turn < KVT_GEN_MAX_TURNS);
	kvt__free(p.seg);
	return rc;
}

static int gen_rag(struct gen *g, const struct zipf *z, const uint32_t *doc_len, double start,
		   uint32_t *count)
{
	const struct kvt_gen_opts *o = g->o;
	struct prompt p = {0};
	int rc = prompt_add(&p, hmix(0x5241475f, 0), o->sys_tokens);
	/* at most as many documents as a request has blocks: 1-token documents up to the
	 * longest prompt were 2^24 segments, 0.4 s and 280 MB per request */
	uint32_t k = KVT_MIN(rrange(&g->r, 1, o->docs_per_req), KVT_TRACE_MAX_BLOCKS);
	/* the prompt stops growing at the longest a request may be (emit truncates there):
	 * docs_per_req is a knob, and 4e9 documents were a prompt without bound */
	for (uint32_t i = 0; i < k && !rc && p.tokens < KVT_TRACE_MAX_INPUT; i++) {
		uint32_t d = zipf_draw(z, &g->r);
		rc = prompt_add(&p, hmix(0x444f435f, d), doc_len[d]);
	}
	if (!rc)
		rc = prompt_add(&p, new_seg(g), rrange(&g->r, o->q_min, o->q_max));
	if (!rc)
		rc = emit(g, start, &p, rrange(&g->r, o->out_min, o->out_max));
	(*count)++;
	kvt__free(p.seg);
	return rc;
}

static int gen_agent(struct gen *g, const struct zipf *z, const uint32_t *repo_len, double start,
		     uint32_t *count)
{
	const struct kvt_gen_opts *o = g->o;
	struct prompt p = {0};
	uint32_t repo = zipf_draw(z, &g->r);
	int rc = prompt_add(&p, hmix(0x5245504f, repo), repo_len[repo]);
	if (!rc) /* the task statement */
		rc = prompt_add(&p, new_seg(g), rrange(&g->r, o->q_min, o->q_max));
	double ts = start, end_p = 1.0 / (o->steps ? o->steps : 1);
	uint64_t before;
	uint32_t step = 0;
	do {
		before = p.tokens;
		uint32_t out = rrange(&g->r, o->out_min, o->out_max);
		if (!rc)
			rc = emit(g, ts, &p, out);
		(*count)++;
		if (!rc)
			rc = prompt_add(&p, new_seg(g), out);
		if (!rc) /* the tool's result */
			rc = prompt_add(&p, new_seg(g), rrange(&g->r, o->tool_min, o->tool_max));
		ts += rexp(&g->r, o->step_s) * 1000.0;
		/* as in gen_chat: a step that added nothing, the request target, or
		 * KVT_GEN_MAX_TURNS steps end it */
	} while (!rc && runif(&g->r) >= end_p && p.tokens < KVT_TRACE_MAX_INPUT &&
		 p.tokens > before && *count < g->target && ++step < KVT_GEN_MAX_TURNS);
	kvt__free(p.seg);
	return rc;
}

/* Log-normal with the given mean and shape (Box-Muller for the normal draw). */
static double rlognormal(struct rng *r, double mean, double sigma)
{
	double u1 = 1.0 - runif(r), u2 = runif(r);
	double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
	return exp(log(mean) - sigma * sigma / 2 + sigma * z);
}

/* A conversation of the Mooncake kind: a popular system prompt (Zipf over sys_prompts of
 * sys_len[] tokens), a long first-turn context unique to the conversation, then turns that
 * append the answer and a short user message, apart by an exponential pause. */
static int gen_conv(struct gen *g, const struct zipf *z, const uint32_t *sys_len, double start,
		    uint32_t *count)
{
	const struct kvt_gen_opts *o = g->o;
	struct prompt p = {0};
	uint32_t s = zipf_draw(z, &g->r);
	int rc = prompt_add(&p, hmix(0x434f4e56, s), sys_len[s]);
	double first = rlognormal(&g->r, o->first_mean ? o->first_mean : 1, o->first_sigma);
	first = KVT_MIN(first, (double)KVT_TRACE_MAX_INPUT / 2);
	if (!rc)
		rc = prompt_add(&p, new_seg(g), KVT_MAX(1u, (uint32_t)first));
	bool engaged = runif(&g->r) < o->long_frac;
	double end_p = engaged ? o->long_end_prob : o->end_prob;
	double think = engaged && o->long_think_s > 0 ? o->long_think_s : o->think_s;
	if (o->pace_sigma > 0)
		think = rlognormal(&g->r, think, o->pace_sigma);
	double ts = start;
	/* power-law turns: P(T >= t) = t^-alpha by inversion, T = floor(u^(-1/alpha)) */
	double turns = o->turn_alpha > 0 ? floor(pow(1.0 - runif(&g->r), -1.0 / o->turn_alpha))
					  : 0;
	turns = KVT_MIN(turns, (double)KVT_GEN_MAX_TURNS);
	uint32_t turn = 0;
	uint64_t before;
	do {
		before = p.tokens;
		uint32_t out = rrange(&g->r, o->out_min, o->out_max);
		if (!rc)
			rc = emit(g, ts, &p, out);
		(*count)++;
		if (!rc)
			rc = prompt_add(&p, new_seg(g), out);
		if (!rc)
			rc = prompt_add(&p, new_seg(g), rrange(&g->r, o->user_min, o->user_max));
		double scale = turn ? o->think_later : o->think_first;
		ts += (scale > 0 ? scale : 1.0) *
		      (o->think_sigma > 0 ? rlognormal(&g->r, think, o->think_sigma)
					  : rexp(&g->r, think)) *
		      1000.0;
		turn++;
		/* as in gen_chat: a turn that added nothing, the request target, or
		 * KVT_GEN_MAX_TURNS turns end it */
	} while (!rc && (turns > 0 ? turn < turns : runif(&g->r) >= end_p) &&
		 p.tokens < KVT_TRACE_MAX_INPUT && p.tokens > before && *count < g->target &&
		 turn < KVT_GEN_MAX_TURNS);
	kvt__free(p.seg);
	return rc;
}

static int cmp_req(const void *a, const void *b)
{
	const struct gen_req *x = a, *y = b;
	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->first < y->first ? -1 : x->first > y->first; /* stable: generation order */
}

static double mean_requests(const struct kvt_gen_opts *o)
{
	if (o->workload == KVT_GEN_CONV && o->turn_alpha > 1) { /* zeta(alpha), summed */
		double z = 0;
		for (int k = 1; k <= 100000; k++)
			z += pow(k, -o->turn_alpha);
		return z;
	}
	if (o->workload == KVT_GEN_CONV && o->long_end_prob > 0)
		return (1 - o->long_frac) / o->end_prob + o->long_frac / o->long_end_prob;
	if (o->workload == KVT_GEN_CHAT || o->workload == KVT_GEN_CONV)
		return 1.0 / (o->end_prob > 0 ? o->end_prob : 1.0);
	if (o->workload == KVT_GEN_AGENT)
		return o->steps ? o->steps : 1;
	return 1;
}

int kvt__gen_run(const struct kvt_gen_opts *o, struct kvt_trace *t)
{
	if (!o || !t || o->block_tokens != t->block_tokens || !o->requests ||
	    o->requests > KVT_TRACE_MAX_REQUESTS || !(o->rate > 0) || o->workload < 0 ||
	    o->workload >= KVT_GEN_N || o->user_min > o->user_max || o->out_min > o->out_max ||
	    o->doc_min > o->doc_max || o->q_min > o->q_max || o->repo_min > o->repo_max ||
	    o->tool_min > o->tool_max || !o->sys_prompts || !o->docs || !o->repos ||
	    o->sys_prompts > KVT_GEN_MAX_ITEMS || o->docs > KVT_GEN_MAX_ITEMS ||
	    o->repos > KVT_GEN_MAX_ITEMS ||
	    !o->docs_per_req || !(o->end_prob > 0 && o->end_prob <= 1) || o->zipf < 0 ||
	    /* documents of 0 tokens never grow the prompt, so docs_per_req (up to 4e9) draws
	     * of them ran for hours per request (doc_min = 0 draws some too: refused since
	     * 2026-12-05) */
	    (o->workload == KVT_GEN_RAG && !o->doc_min) ||
	    (o->workload == KVT_GEN_CONV &&
	     (!o->first_mean || !(o->first_sigma < 8) || !(o->long_frac <= 1) ||
	      (o->long_frac > 0 && !(o->long_end_prob > 0 && o->long_end_prob <= 1)) ||
	      (o->turn_alpha > 0 && !(o->turn_alpha > 1)) || !(o->think_sigma < 8) ||
	      !(o->pace_sigma < 8))))
		return -EINVAL;
	struct gen g = {.o = o};
	rng_seed(&g.r, o->seed);
	struct zipf z = {0};
	uint32_t *len = NULL;
	uint32_t items = o->workload == KVT_GEN_RAG ? o->docs : o->repos;
	uint32_t lo = o->workload == KVT_GEN_RAG ? o->doc_min : o->repo_min;
	uint32_t hi = o->workload == KVT_GEN_RAG ? o->doc_max : o->repo_max;
	if (o->workload == KVT_GEN_CONV) { /* system prompts of 1/2 .. 3/2 sys_tokens */
		items = o->sys_prompts;
		lo = o->sys_tokens / 2;
		/* in 64 bits: 1.5 x 4e9 wraps in 32 (a prompt is cut at 2^24 tokens anyway) */
		hi = (uint32_t)KVT_MIN((uint64_t)o->sys_tokens + o->sys_tokens / 2,
				       (uint64_t)UINT32_MAX);
	}
	int rc = zipf_init(&z, items, o->zipf);
	if (rc)
		return rc;
	len = kvt__malloc((size_t)items * sizeof(*len));
	if (!len) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < items; i++)
		len[i] = rrange(&g.r, lo, hi);

	/* Sessions start as a Poisson process whose rate gives o->rate requests per second
	 * overall; generate until the sessions started so far cover the requested count
	 * even after the late turns that fall beyond the cut are dropped. */
	uint32_t count = 0;
	g.target = o->requests + o->requests / 4 + 64;
	/* a session has at most target and KVT_GEN_MAX_TURNS requests (end_prob=1e-300 would
	 * space them 1e300 apart) */
	double most = (double)KVT_MIN(g.target, KVT_GEN_MAX_TURNS);
	double session_rate = o->rate / KVT_MIN(mean_requests(o), most), now = 0;
	while (!rc && count < g.target) {
		now += rexp(&g.r, 1000.0 / session_rate);
		if (o->workload == KVT_GEN_CHAT)
			rc = gen_chat(&g, now, &count);
		else if (o->workload == KVT_GEN_RAG)
			rc = gen_rag(&g, &z, len, now, &count);
		else if (o->workload == KVT_GEN_CONV)
			rc = gen_conv(&g, &z, len, now, &count);
		else
			rc = gen_agent(&g, &z, len, now, &count);
	}
	if (rc)
		goto out;
	if (g.n) /* none when every prompt was empty; qsort(NULL, 0) is undefined */
		qsort(g.req, g.n, sizeof(*g.req), cmp_req);
	size_t keep = KVT_MIN(g.n, (size_t)o->requests);
	double t0 = keep ? g.req[0].ts : 0;
	if (keep && g.req[keep - 1].ts - t0 > KVT_TRACE_MAX_TS_MS)
		rc = -ERANGE; /* a rate of 1e-9 per second */
	for (size_t i = 0; i < keep && !rc; i++) {
		const struct gen_req *q = &g.req[i];
		/* whole milliseconds, like the Mooncake trace */
		rc = kvt__trace_add(t, floor(q->ts - t0), q->in, q->out, g.ids + q->first,
				    q->n_blocks);
	}
	/* a prompt of 0 tokens is no request (emit skips it): knobs that leave most of them
	 * empty (sys_tokens=0 and user and answer lengths 0) fall short of the count */
	if (!rc && keep < o->requests)
		rc = -ENODATA;
out:
	kvt__free(z.cdf);
	kvt__free(len);
	kvt__free(g.req);
	kvt__free(g.ids);
	return rc;
}

/* ------------------------------------------------------------------ knobs */

void kvt__gen_defaults(int workload, struct kvt_gen_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->workload = workload;
	o->seed = 42;
	o->requests = 12000;
	o->block_tokens = 512;
	o->sys_prompts = 4;
	o->end_prob = 0.2;
	o->user_min = 50, o->user_max = 800;
	o->out_min = 50, o->out_max = 600;
	o->think_s = 60;
	o->docs = 2000;
	o->doc_min = 1024, o->doc_max = 8192;
	o->zipf = 1.0;
	o->docs_per_req = 3;
	o->q_min = 20, o->q_max = 300;
	o->repos = 16;
	o->repo_min = 8192, o->repo_max = 32768;
	o->steps = 12;
	o->tool_min = 200, o->tool_max = 4000;
	o->step_s = 5;
	switch (workload) {
	case KVT_GEN_RAG:
		o->rate = 4;
		o->sys_tokens = 400;
		break;
	case KVT_GEN_CONV:
		/* docs/COST_MODEL.md, "The conversation workload", gives the source of each */
		o->requests = 12031;
		o->rate = 3.34;
		o->sys_prompts = 2000, o->sys_tokens = 1536, o->zipf = 0.6;
		o->first_mean = 10000, o->first_sigma = 1.0;
		o->end_prob = 0.65; /* used with turn_alpha = 0 (the geometric shape) */
		o->turn_alpha = 1.9;
		o->user_min = 20, o->user_max = 600;
		o->out_min = 50, o->out_max = 636;
		o->think_s = 500, o->pace_sigma = 1.0;
		o->think_first = 1, o->think_later = 1; /* 0 means 1 too */
		o->long_frac = 0, o->long_end_prob = 0.12, o->long_think_s = 70;
		break;
	case KVT_GEN_AGENT:
		o->rate = 2;
		o->sys_tokens = 0;
		o->out_min = 30, o->out_max = 400;
		o->zipf = 0.8;
		break;
	default:
		o->rate = 4;
		o->sys_tokens = 1200;
	}
}

static const char *workloads[] = {"chat", "rag", "agent", "conversation"};

int kvt__gen_workload(const char *name)
{
	for (int i = 0; i < KVT_GEN_N; i++)
		if (!strcmp(name, workloads[i]))
			return i;
	return -EINVAL;
}

const char *kvt__gen_workload_name(int w)
{
	return w >= 0 && w < KVT_GEN_N ? workloads[w] : "?";
}

#define KNOB_U32(name)                                                                             \
	{                                                                                          \
#name, offsetof(struct kvt_gen_opts, name), 0                                      \
	}
#define KNOB_DBL(name)                                                                             \
	{                                                                                          \
#name, offsetof(struct kvt_gen_opts, name), 1                                      \
	}

static const struct {
	const char *name;
	size_t off;
	int type; /* 0 u32, 1 double, 2 u64 */
} knobs[] = {
    {"seed", offsetof(struct kvt_gen_opts, seed), 2},
    KNOB_U32(requests),
    KNOB_DBL(rate),
    KNOB_U32(block_tokens),
    KNOB_U32(sys_prompts),
    KNOB_U32(sys_tokens),
    KNOB_DBL(end_prob),
    KNOB_U32(user_min),
    KNOB_U32(user_max),
    KNOB_U32(out_min),
    KNOB_U32(out_max),
    KNOB_DBL(think_s),
    KNOB_U32(docs),
    KNOB_U32(doc_min),
    KNOB_U32(doc_max),
    KNOB_DBL(zipf),
    KNOB_U32(docs_per_req),
    KNOB_U32(q_min),
    KNOB_U32(q_max),
    KNOB_U32(repos),
    KNOB_U32(repo_min),
    KNOB_U32(repo_max),
    KNOB_U32(steps),
    KNOB_U32(tool_min),
    KNOB_U32(tool_max),
    KNOB_DBL(step_s),
    KNOB_U32(first_mean),
    KNOB_DBL(first_sigma),
    KNOB_DBL(long_frac),
    KNOB_DBL(long_end_prob),
    KNOB_DBL(long_think_s),
    KNOB_DBL(turn_alpha),
    KNOB_DBL(think_sigma),
    KNOB_DBL(pace_sigma),
    KNOB_DBL(think_first),
    KNOB_DBL(think_later),
};

int kvt__gen_set(struct kvt_gen_opts *o, const char *key, const char *value)
{
	for (size_t i = 0; i < KVT_ARRAY_SIZE(knobs); i++) {
		if (strcmp(key, knobs[i].name))
			continue;
		void *dst = (char *)o + knobs[i].off;
		if (knobs[i].type == 1) {
			/* decimal only, as every other number (strtod alone took "0x1p3", " +4") */
			double d;
			if (kvt__parse_double(value, &d) < 0 || d > 1e9)
				return -EINVAL;
			*(double *)dst = d;
			return 0;
		}
		uint64_t v; /* digits only: strtoull alone reads " -1" as 2^64 - 1 */
		if (kvt__parse_u64(value, &v) < 0 || (knobs[i].type == 0 && v > UINT32_MAX))
			return -EINVAL;
		if (knobs[i].off == offsetof(struct kvt_gen_opts, requests) &&
		    (!v || v > KVT_TRACE_MAX_REQUESTS))
			return -ERANGE;
		if (knobs[i].type == 0)
			*(uint32_t *)dst = (uint32_t)v;
		else
			*(uint64_t *)dst = v;
		return 0;
	}
	return -ENOENT;
}
