/*
 * cmd_session.c - `kvtier session save|resume`: shows cross-node reuse and session
 * migration to a user. `save` stores the KV chunks of a conversation (its tokens from a
 * file, or a seeded synthetic one); `resume`, typically on another node or a fresh
 * instance pointed at the same shared tier, finds the longest stored prefix, loads every
 * chunk of it, checks the bytes, and reports which tier served each and how many tokens
 * would still need a prefill. There is no model here, so a chunk's KV bytes are derived
 * from its key: resume can prove it got exactly what save stored.
 *
 * `resume` is a client like an engine restoring a session, not an inspection: it opens the
 * store as an engine would (a fresh node's local tiers are created, a shared tier's hit is
 * promoted into them, a damaged object is dropped). It retries a read the store pushes
 * back (-EAGAIN) instead of counting it as a hole.
 *
 * `save` then asks every persistent tier (all but DRAM, which dies with the process) which
 * chunks it holds, and exits 4 if some chunk is in none of them (a full or read-only tier,
 * a spent write budget, a write error): a saved session that cannot be resumed must not
 * look saved.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "engine.h"
#include "internal.h"
#include "open_path.h"
#include "store_key.h"
#include "tier.h"

struct session_opts {
	const char *tokens_file;
	unsigned long synthetic;
	unsigned long seed;
};

static void fill_from_key(const struct kvt_key *k, void *buf, size_t len)
{
	uint64_t x;
	memcpy(&x, k->bytes, sizeof(x));
	x |= 1;
	uint64_t *p = buf;
	for (size_t i = 0; i < len / 8; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = x;
	}
}

/* The most tokens of a conversation, from a file or --synthetic. */
#define MAX_TOKENS (1ul << 26)

/* Tokens: whitespace-separated unsigned 32-bit integers, at most MAX_TOKENS of them. Each
 * word is checked, not fscanf'd: "%llu" takes a sign and negates, so "-4294967295" would
 * be token 1. 0, or -errno with "reason" in why (the caller names the file). */
static int read_tokens(const char *path, uint32_t **out, size_t *n, char *why, size_t whylen)
{
	/* a FIFO with no writer held fopen() for ever: refused by kind (src/open_path.h) */
	const char *what;
	int fd = kvt__open_path(path, O_RDONLY, 0, true, &what);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "r");
	if (!f) {
		int e = fd < 0 ? -fd : errno;
		if (fd >= 0)
			close(fd);
		if (what && e != EISDIR)
			snprintf(why, whylen, "%s, not a token file", what);
		else
			snprintf(why, whylen, "%s", strerror(e));
		return -e;
	}
	size_t cap = 4096, len = 0;
	uint32_t *t = malloc(cap * sizeof(*t));
	int rc = t ? 0 : -ENOMEM, c = 0;
	/* one lock for the whole read: getc() locks the stream per byte, which made a 128 MiB
	 * file take 21 s under TSan (3 s without) */
	flockfile(f);
	while (!rc) {
		char word[24];
		size_t w = 0;
		while ((c = getc_unlocked(f)) != EOF && isspace(c))
			;
		/* a word too long for any id is marked, and reported without reading on (it
		 * could be /dev/zero) */
		for (; c != EOF && !isspace(c) && w < sizeof(word); c = getc_unlocked(f), w++)
			word[w] = (char)(isprint(c) ? c : '?');
		if (!w)
			break; /* end of file (or a read error, below) */
		bool cut = w == sizeof(word);
		if (cut)
			snprintf(word + sizeof(word) - 4, 4, "...");
		else
			word[w] = 0;
		/* decimal digits only, by hand: strtoull per word was half the time of a 64M-token
		 * file (and takes a sign, which would negate) */
		uint64_t v = 0;
		bool digits = !cut;
		for (size_t i = 0; digits && i < w; i++) {
			digits = word[i] >= '0' && word[i] <= '9';
			v = v * 10 + (uint64_t)(word[i] - '0');
			digits = digits && v <= UINT32_MAX;
		}
		if (!digits) {
			snprintf(why, whylen, "token %zu: '%s' is not a token id (an integer "
					      "in [0, 4294967295])", len + 1, word);
			rc = -EINVAL;
		} else if (len == MAX_TOKENS) {
			snprintf(why, whylen, "more than %lu token ids", MAX_TOKENS);
			rc = -E2BIG;
		} else if (len == cap) {
			uint32_t *bigger = realloc(t, (cap *= 2) * sizeof(*t));
			if (bigger)
				t = bigger;
			rc = bigger ? 0 : -ENOMEM;
		}
		if (!rc)
			t[len++] = (uint32_t)v;
	}
	funlockfile(f);
	if (!rc && ferror(f)) { /* a directory, an I/O error */
		int e = errno;
		snprintf(why, whylen, "%s", strerror(e ? e : EIO));
		rc = e ? -e : -EIO;
	} else if (!rc && !len) {
		snprintf(why, whylen, "no token ids");
		rc = -EINVAL;
	} else if (rc == -ENOMEM) {
		snprintf(why, whylen, "out of memory");
	}
	fclose(f);
	if (rc) {
		free(t);
		return rc;
	}
	*out = t;
	*n = len;
	return 0;
}

static void synthetic(unsigned long n, unsigned long seed, uint32_t **out, size_t *len)
{
	uint32_t *t = malloc(n * sizeof(*t));
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	for (unsigned long i = 0; t && i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		t[i] = (uint32_t)(x % 128256); /* a Llama-3-sized vocabulary */
	}
	*out = t;
	*len = t ? n : 0;
}

#define WINDOW 8

struct exists_wait {
	pthread_mutex_t m;
	pthread_cond_t c;
	bool done;
	int rc;
};

static void exists_cb(void *arg, int64_t rc)
{
	struct exists_wait *w = arg;
	pthread_mutex_lock(&w->m);
	w->rc = rc;
	w->done = true;
	pthread_cond_signal(&w->c);
	pthread_mutex_unlock(&w->m);
}

/* How many of keys[0..n) no persistent tier holds (-1: there is no persistent tier);
 * *first gets the index of the first such chunk. Tiers are asked directly, so they are
 * asked for the storage keys (the names the store filed the chunks under). */
static long count_unstored(struct kvt_store *s, const struct kvt_key *api_keys, size_t n,
			   size_t *first)
{
	uint8_t *any = calloc(n ? n : 1, 1), *present = calloc(n ? n : 1, 1);
	int tiers = 0;
	long missing = -1;
	struct kvt_storage_keys sk = {0};
	if (!any || !present || kvt__storage_keys(&sk, kvt_store_ns_id(s), api_keys, n) < 0)
		goto out;
	const struct kvt_key *keys = sk.keys;
	for (int i = 0; i < kvt_store_tier_count(s); i++) {
		struct kvt_tier *t = kvt__store_tier(s, i);
		if (!t) /* DRAM */
			continue;
		for (size_t off = 0; off < n; off += 4096) {
			uint32_t m = (uint32_t)KVT_MIN(n - off, (size_t)4096);
			struct exists_wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
						false, 0};
			int rc = t->ops->exists(t, keys + off, m, present + off, exists_cb, &w);
			if (rc == 0) {
				pthread_mutex_lock(&w.m);
				while (!w.done)
					pthread_cond_wait(&w.c, &w.m);
				pthread_mutex_unlock(&w.m);
				rc = w.rc;
			}
			for (uint32_t j = 0; j < m && rc == 0; j++)
				any[off + j] |= present[off + j];
		}
		tiers++;
	}
	if (tiers) {
		missing = 0;
		for (size_t i = n; i-- > 0;)
			if (!any[i]) {
				missing++;
				*first = i;
			}
	}
out:
	kvt__storage_keys_free(&sk);
	free(any);
	free(present);
	return missing;
}

struct fetch {
	void *buf;
	int idx;
	bool busy, finished;
	bool pending; /* its get is not submitted yet (the store said -EAGAIN: retried) */
	struct kvt_result res;
};

static void fetch_done(void *arg, const struct kvt_result *res)
{
	struct fetch *f = arg;
	f->res = *res;
	f->finished = true;
}

enum { O_TOKENS = CLI_O_FIRST_FREE, O_SYNTHETIC, O_SEED };

static int session_opt(void *arg, int c, const char *v)
{
	struct session_opts *so = arg;
	if (c == 'h')
		return cli_fail("session", "--help comes right after 'session'"), -1;
	if (c == O_TOKENS) {
		so->tokens_file = v;
		return 0;
	}
	uint64_t x; /* digits only: strtoul alone reads " -1" as 2^64 - 1 */
	if (kvt__parse_u64(v, &x) < 0 || x > ULONG_MAX ||
	    (c == O_SYNTHETIC && (x == 0 || x > MAX_TOKENS)))
		return cli_fail("session", "--%s: '%s' is not %s",
				c == O_SEED ? "seed" : "synthetic", v,
				c == O_SEED ? "a non-negative integer" : "in [1, 67108864]"), -1;
	*(c == O_SEED ? &so->seed : &so->synthetic) = (unsigned long)x;
	return 0;
}

int kvt_cmd_session(int argc, char **argv)
{
	struct cli_store_opts o = {0};
	struct session_opts so = {0};
	const char *verb = argc > 1 ? argv[1] : "";
	if (!strcmp(verb, "--help") || !strcmp(verb, "-h") ||
	    (strcmp(verb, "save") && strcmp(verb, "resume"))) {
		printf("usage: kvtier session save|resume (--tokens FILE | --synthetic N [--seed S]) "
		       "[options]\n"
		       "save:   store the KV chunks of a conversation (bytes derived from each "
		       "chunk's key)\n"
		       "resume: look the conversation up, load every chunk of the stored prefix, "
		       "check its\n        bytes, report the tier of each and the tokens left to "
		       "prefill. Run it on\n        another instance pointed at the same shared "
		       "tier to see a session migrate.\n"
		       "  --tokens FILE    whitespace-separated token ids\n"
		       "  --synthetic N    N seeded pseudo-random tokens (--seed, default 1)\n"
		       "  --dir D, --config FILE, --tiers LIST, --set K=V, --json as everywhere\n"
		       "Exit status: 0 ok; 1 error; 2 usage; 3 resume got wrong bytes; 4 save could "
		       "not store\nevery chunk in a persistent tier (full, read-only, budget "
		       "spent), or some of resume's reads failed.\n");
		return strcmp(verb, "--help") && strcmp(verb, "-h") ? 2 : 0;
	}
	static const struct option extra[] = {
	    {"tokens", required_argument, NULL, O_TOKENS},
	    {"synthetic", required_argument, NULL, O_SYNTHETIC},
	    {"seed", required_argument, NULL, O_SEED},
	    {NULL, 0, NULL, 0}};
	/* argv[1] is the verb: options start after it */
	int opnd = cli_getopt("session", argc - 1, argv + 1, &o, extra, session_opt, &so);
	if (opnd == -2)
		return 0;
	if (opnd < 0)
		return 2;
	if (opnd < argc - 1)
		return cli_fail("session", "unexpected argument '%s' (see --help)",
				argv[1 + opnd]), 2;
	if (!so.tokens_file == !so.synthetic)
		return cli_fail("session", "give exactly one of --tokens FILE or --synthetic N"), 2;
	uint32_t *tok = NULL;
	size_t n_tok = 0;
	if (so.tokens_file) {
		char why[160];
		if (read_tokens(so.tokens_file, &tok, &n_tok, why, sizeof(why)) < 0)
			return cli_fail("session", "%s: %s", so.tokens_file, why), 1;
	} else {
		synthetic(so.synthetic, so.seed ? so.seed : 1, &tok, &n_tok);
	}
	struct kvt_store *s = cli_open_store(&o);
	if (!s) {
		free(tok);
		return 1;
	}
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t n_chunks = (n_tok + g->chunk_tokens - 1) / g->chunk_tokens;
	struct kvt_key *keys = calloc(n_chunks, sizeof(*keys));
	int8_t *tiers = calloc(n_chunks, 1);
	size_t full = kvt_payload_bytes(g, g->chunk_tokens);
	void *buf = malloc(full), *want = malloc(full);
	int rc = 0;
	if (!keys || !tiers || !buf || !want) {
		rc = cli_fail("session", "out of memory");
		goto out;
	}
	kvt_keys_from_tokens(kvt_store_ns_id(s), g->chunk_tokens, tok, n_tok, keys, n_chunks);
	uint64_t t0 = kvt__now_ns();
	if (!strcmp(verb, "save")) {
		for (size_t i = 0; i < n_chunks; i++) {
			uint32_t nt = (uint32_t)KVT_MIN((size_t)g->chunk_tokens, n_tok - i * g->chunk_tokens);
			size_t len = kvt_payload_bytes(g, nt);
			fill_from_key(&keys[i], buf, len);
			int r;
			while ((r = kvt_put_sync(s, &keys[i], i ? &keys[i - 1] : NULL, nt, buf, len)) ==
			       -EAGAIN)
				kvt_poll(s, 1);
			if (r < 0) {
				rc = cli_fail("session", "storing chunk %zu: %s", i, kvt_strerror(r));
				goto out;
			}
		}
		int frc = kvt_flush_sync(s);
		double ms = (double)(kvt__now_ns() - t0) / 1e6;
		size_t first = 0;
		long missing = count_unstored(s, keys, n_chunks, &first);
		size_t stored = missing < 0 ? n_chunks : n_chunks - (size_t)missing;
		if (o.json)
			printf("{\"tokens\":%zu,\"chunks\":%zu,\"stored_chunks\":%zu,\"ms\":%.1f}\n",
			       n_tok, n_chunks, stored, ms);
		else
			printf("saved %zu tokens as %zu chunks in %.1f ms\n", n_tok, n_chunks, ms);
		if (frc < 0)
			rc = cli_fail("session", "flush failed: %s", kvt_strerror(frc));
		if (missing > 0) {
			fprintf(stderr,
				"kvtier session: %ld of %zu chunks were not stored in any persistent "
				"tier (the first is chunk %zu: a resume gets at most %zu chunks)\n",
				missing, n_chunks, first, first);
			rc = 4;
		}
		goto out;
	}
	int prefix = kvt_lookup_sync(s, keys, n_chunks, tiers);
	if (prefix < 0) {
		rc = cli_fail("session", "lookup failed: %s", kvt_strerror(prefix));
		goto out;
	}
	uint64_t per_tier[KVT_MAX_TIERS] = {0}, bad = 0, hit_tokens = 0;
	/* All chunks of the prefix are fetched at once (WINDOW in flight), each from the
	 * fastest tier holding it, so one resume gathers from several tiers concurrently. */
	struct fetch f[WINDOW];
	int next = 0, done = 0;
	int8_t *got_tier = calloc((size_t)prefix + 1, 1);
	uint32_t *got_tokens = calloc((size_t)prefix + 1, sizeof(uint32_t));
	for (int w = 0; w < WINDOW; w++) {
		f[w].buf = malloc(full);
		f[w].busy = f[w].pending = false;
	}
	for (int w = 0; w < WINDOW; w++)
		if (!f[w].buf || !got_tier || !got_tokens) {
			rc = cli_fail("session", "out of memory");
			goto out_fetch;
		}
	uint64_t errors = 0;
	int first_err = 0;
	while (done < prefix) {
		for (int w = 0; w < WINDOW; w++) {
			if (!f[w].busy && next < prefix) {
				f[w].busy = f[w].pending = true;
				f[w].finished = false;
				f[w].idx = next++;
			}
			if (!f[w].pending)
				continue;
			int r = kvt_get(s, &keys[f[w].idx], 0, 0, f[w].buf, full, fetch_done, &f[w]);
			if (r == -EAGAIN) /* as many in flight as the store takes: after a poll */
				break;
			f[w].pending = false;
			if (r < 0) {
				f[w].finished = true;
				f[w].res.status = r;
			}
		}
		kvt_poll(s, 100);
		for (int w = 0; w < WINDOW; w++) {
			if (!f[w].busy || !f[w].finished)
				continue;
			struct kvt_result *res = &f[w].res;
			got_tier[f[w].idx] = KVT_TIER_NONE; /* gone since the lookup, or corrupt */
			if (res->status < 0 && res->status != -ENOENT && !errors++)
				first_err = res->status; /* a miss is a hole; a failure is said */
			if (res->status >= 0) {
				fill_from_key(&keys[f[w].idx], want, res->bytes);
				if (memcmp(f[w].buf, want, res->bytes))
					bad++;
				got_tier[f[w].idx] = (int8_t)res->tier;
				got_tokens[f[w].idx] = res->n_tokens;
			}
			f[w].busy = false;
			done++;
		}
	}
	/* Only the contiguous prefix that arrived counts; past a hole it is a prefill. */
	for (int i = 0; i < prefix; i++) {
		if (got_tier[i] == KVT_TIER_NONE) {
			prefix = i;
			break;
		}
		if (got_tier[i] >= 0 && got_tier[i] < KVT_MAX_TIERS)
			per_tier[(int)got_tier[i]]++;
		hit_tokens += got_tokens[i];
	}
	double ms = (double)(kvt__now_ns() - t0) / 1e6;
	if (o.json) {
		printf("{\"tokens\":%zu,\"chunks\":%zu,\"hit_chunks\":%d,\"hit_tokens\":%llu,"
		       "\"prefill_tokens\":%llu,\"bad\":%llu,\"ms\":%.1f,\"tiers\":{",
		       n_tok, n_chunks, prefix, (unsigned long long)hit_tokens,
		       (unsigned long long)(n_tok - hit_tokens), (unsigned long long)bad, ms);
		for (int t = 0; t < kvt_store_tier_count(s); t++)
			printf("%s\"%s\":%llu", t ? "," : "", kvt_store_tier_name(s, t),
			       (unsigned long long)per_tier[t]);
		printf("}}\n");
	} else {
		printf("resumed %llu of %zu tokens from stored KV (%d of %zu chunks) in %.1f ms; "
		       "%llu tokens left to prefill\n",
		       (unsigned long long)hit_tokens, n_tok, prefix, n_chunks, ms,
		       (unsigned long long)(n_tok - hit_tokens));
		for (int t = 0; t < kvt_store_tier_count(s); t++)
			printf("  %-6s %llu chunks\n", kvt_store_tier_name(s, t),
			       (unsigned long long)per_tier[t]);
		if (bad)
			printf("  %llu chunks had wrong bytes\n", (unsigned long long)bad);
	}
	rc = bad ? 3 : 0;
	if (errors) {
		fprintf(stderr, "kvtier session: %llu chunk reads failed (the first: %s); the "
				"resumed prefix ends at the first\n",
			(unsigned long long)errors, kvt_strerror(first_err));
		if (!rc)
			rc = 4;
	}
out_fetch:
	for (int w = 0; w < WINDOW; w++)
		free(f[w].buf);
	free(got_tier);
	free(got_tokens);
out:
	free(buf);
	free(want);
	free(keys);
	free(tiers);
	free(tok);
	kvt_store_close(s);
	return rc;
}
