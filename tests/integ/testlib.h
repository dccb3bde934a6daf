/*
 * testlib.h - tiny helpers for integration programs (liburing style: exit 0 pass, 1 fail,
 * 77 skip): checks that print where they failed, temporary directories on the real disk,
 * deterministic chunk payloads that carry their own identity so any mix-up is detected.
 */
#ifndef KVT_TESTLIB_H
#define KVT_TESTLIB_H

#include "lib/check.h"
#include "lib/sanitized.h"
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvtier.h"
#include "kvtier_layout.h"


#define CHECK_RC(expr, want)                                                                  \
	do {                                                                                  \
		long _rc = (long)(expr);                                                      \
		if (_rc != (long)(want)) {                                                    \
			fprintf(stderr, "%s:%d: %s returned %ld (%s), wanted %ld\n", __FILE__,      \
				__LINE__, #expr, _rc, kvt_strerror((int)_rc), (long)(want));        \
			exit(1);                                                              \
		}                                                                             \
	} while (0)

static inline void test_log(void *arg, int level, const char *msg)
{
	(void)arg;
	if (getenv("KVT_TEST_VERBOSE") || level <= KVT_LOG_WARN)
		fprintf(stderr, "  [lib %d] %s\n", level, msg);
}

/* A fresh directory under $KVT_TEST_DIR or /var/tmp (a real disk, not tmpfs). */
static inline char *test_tmpdir(const char *name)
{
	const char *base = getenv("KVT_TEST_DIR") ? getenv("KVT_TEST_DIR") : "/var/tmp";
	char *p = malloc(4096);
	snprintf(p, 4096, "%s/kvt-%s-XXXXXX", base, name);
	if (!mkdtemp(p)) {
		perror("mkdtemp");
		exit(1);
	}
	return p;
}

#include "lib/rm_rf.h"

static inline void test_rmdir(const char *dir)
{
	rm_rf(dir);
}

/* Payload bytes that depend on (seed, position) only. */
static inline void test_fill(void *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	uint8_t *p = buf;
	for (size_t i = 0; i < len; i++) {
		if ((i & 7) == 0) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
		}
		p[i] = (uint8_t)(x >> ((i & 7) * 8));
	}
}

static inline int test_check(const void *buf, size_t len, uint64_t seed)
{
	uint8_t *want = malloc(len);
	test_fill(want, len, seed);
	int ok = !memcmp(buf, want, len);
	free(want);
	return ok;
}

/* A store configuration for tests: small geometry, given tiers and directory. */
static inline struct kvt_config *test_config(const char *tiers, const char *dir)
{
	struct kvt_config *c;
	char err[256];
	if (kvt_config_create(&c) < 0)
		exit(1);
	kvt_config_set_log(c, test_log, NULL, KVT_LOG_DEBUG);
	const char *kv[][2] = {{"store.tiers", tiers},     {"nvme.dirs", dir},
			       {"model.layers", "4"},      {"model.kv_heads", "2"},
			       {"model.head_dim", "64"},   {"model.chunk_tokens", "16"},
			       {"model.name", "test-model"}, {"dram.bytes", "1MiB"},
			       {"nvme.fsync", "none"},
			       /* tests of other things than deadlines must not see a miss when
				* a shared CI disk stalls a read: the deadline tests set their own */
			       {"store.deadline_floor_ms", "2000"}};
	for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
		if (kvt_config_set(c, kv[i][0], kv[i][1], err, sizeof(err)) < 0) {
			fprintf(stderr, "config: %s\n", err);
			exit(1);
		}
	return c;
}

static inline void test_set(struct kvt_config *c, const char *k, const char *v)
{
	char err[256];
	if (kvt_config_set(c, k, v, err, sizeof(err)) < 0) {
		fprintf(stderr, "config: %s\n", err);
		exit(1);
	}
}

/* Open a store from c (it must open), then destroy c. */
static inline struct kvt_store *test_open(struct kvt_config *c)
{
	struct kvt_store *s;
	CHECK_RC(kvt_store_open(c, &s), 0);
	kvt_config_destroy(c);
	return s;
}

/* A model of 8 layers x 8 KV heads x head dim 128, chunks of chunk_tokens tokens: 512 KiB
 * per layer at 128 tokens, so a chunk's payload is 4 MiB (a zero-copy put's size). */
static inline void test_set_big_model(struct kvt_config *c, const char *chunk_tokens)
{
	test_set(c, "model.layers", "8");
	test_set(c, "model.kv_heads", "8");
	test_set(c, "model.head_dim", "128");
	test_set(c, "model.chunk_tokens", chunk_tokens);
}

/* The engine's deadline for a tier call (store.tier_timeout_ms) and its floor. */
static inline void test_set_deadline(struct kvt_config *c, const char *tier_ms, const char *floor_ms)
{
	test_set(c, "store.tier_timeout_ms", tier_ms);
	test_set(c, "store.deadline_floor_ms", floor_ms);
}

/* Milliseconds since t0 (CLOCK_MONOTONIC ns, as from kvt__now_ns). */
static inline double test_ms_since(uint64_t t0)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec - t0) / 1e6;
}

/* Now, in CLOCK_MONOTONIC ns (the clock test_ms_since reads). */
static inline uint64_t test_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * A call timed against a bound (the stall tests: every call under a stalled tier must end
 * within its deadline): runs stmt, stores its duration in ms (a double), prints the
 * printf-style rest (which may use ms and what stmt set), then fails unless ms < bound_ms.
 * A macro so a failure names the caller's line.
 */
#define TEST_BOUNDED(ms, bound_ms, what, stmt, ...)                                           \
	do {                                                                                  \
		uint64_t bt0_ = test_now_ns();                                                \
		stmt;                                                                         \
		(ms) = test_ms_since(bt0_);                                                   \
		fprintf(stderr, __VA_ARGS__);                                                 \
		CHECKM((ms) < (bound_ms), "%s took %.0f ms", what, (ms));                   \
	} while (0)

/* The result of one asynchronous call, filled by test_box_cb (poll until done). */
struct test_box {
	int done;
	struct kvt_result res;
};

static inline void test_box_cb(void *arg, const struct kvt_result *res)
{
	struct test_box *b = arg;
	b->res = *res;
	b->done = 1;
}

/* Starts n gets at once into bufs (n payloads) and polls until every one completed into
 * b[] (fails after 10 s: the calls must end even when their tier does not answer). */
static inline void test_get_burst(struct kvt_store *s, const struct kvt_key *k, int n, void *bufs,
				  size_t payload, struct test_box *b)
{
	uint64_t t0 = test_now_ns();
	memset(b, 0, sizeof(*b) * (size_t)n);
	for (int i = 0; i < n; i++)
		CHECK_RC(kvt_get(s, &k[i], 0, 0, (char *)bufs + (size_t)i * payload, payload,
				 test_box_cb, &b[i]),
			 0);
	for (int done = 0; done < n;) {
		kvt_poll(s, 50);
		done = 0;
		for (int i = 0; i < n; i++)
			done += b[i].done;
		CHECKM(test_ms_since(t0) < 10000, "burst of gets never finished");
	}
}

/* Gets k[0..n) one at a time into buf, each naming k[i - 1] as its parent when linked
 * (kvt_get_linked; without, as kvt_get, none), polling for each (10 s at most); each must
 * be served test_fill(seed)'s bytes. Returns the tier that served the last. */
static inline int test_get_chain(struct kvt_store *s, const struct kvt_key *k, int n, void *buf,
				 size_t payload, bool linked, uint64_t seed)
{
	int tier = -1;
	for (int i = 0; i < n; i++) {
		struct test_box b = {0};
		CHECK_RC(kvt_get_linked(s, &k[i], linked && i ? &k[i - 1] : NULL, 0, 0, buf,
					payload, test_box_cb, &b),
			 0);
		for (uint64_t t0 = test_now_ns(); !b.done;) {
			kvt_poll(s, 50);
			CHECKM(test_ms_since(t0) < 10000, "the get of chunk %d never completed", i);
		}
		CHECK_RC(b.res.status, 0);
		CHECK(test_check(buf, payload, seed));
		tier = b.res.tier;
	}
	return tier;
}

/* Puts n chunks along the chain k[] (each the parent of the next), chunk i filled with
 * seed0 + i; each put must succeed. */
static inline void test_put_chain(struct kvt_store *s, const struct kvt_key *k, int n, void *buf,
				  size_t payload, uint32_t tokens, uint64_t seed0)
{
	for (int i = 0; i < n; i++) {
		test_fill(buf, payload, seed0 + (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &k[i], i ? &k[i - 1] : NULL, tokens, buf, payload), 0);
	}
}

/* After a deeper tier healed: ms until a get of a new absent key (new_key makes one) is
 * answered by the tier - a miss with cause 0, not its open circuit's -EAGAIN - trying every
 * nap_ms; fails past limit_ms. */
static inline double test_ms_until_tier_answers(struct kvt_store *s, size_t payload,
						void (*new_key)(struct kvt_store *, struct kvt_key *),
						double limit_ms, unsigned nap_ms)
{
	uint64_t t0 = test_now_ns();
	void *buf = malloc(payload);
	for (;;) {
		struct kvt_key k;
		struct kvt_result res;
		new_key(s, &k);
		CHECK_EQ(kvt_get_sync(s, &k, 0, 0, buf, payload, &res), -ENOENT);
		if (res.cause == 0)
			break;
		CHECKM(test_ms_since(t0) < limit_ms, "the tier still skipped after %.0f ms",
		       limit_ms);
		usleep(nap_ms * 1000);
	}
	free(buf);
	return test_ms_since(t0);
}

/* Starts a flush into *fb and polls until it completed (its status is the caller's). */
/* A put of a whole chunk of seed's bytes (no parent), retried while the store pushes back
 * (-EAGAIN: write-behind at its bound); must succeed. */
static inline void test_put_seed(struct kvt_store *s, const struct kvt_key *k, uint64_t seed)
{
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t len = kvt_payload_bytes(g, g->chunk_tokens);
	void *buf = malloc(len);
	test_fill(buf, len, seed);
	int rc;
	while ((rc = kvt_put_sync(s, k, NULL, g->chunk_tokens, buf, len)) == -EAGAIN)
		usleep(1000);
	CHECK_RC(rc, 0);
	free(buf);
}

/* Every write-behind has completed (at most 10 s). */
static inline void test_wb_settle(struct kvt_store *s)
{
	uint64_t t0 = test_now_ns();
	struct kvt_stats st;
	for (;;) {
		CHECK_RC(kvt_stats(s, &st), 0);
		if (!st.write_behind_pending)
			return;
		CHECKM(test_ms_since(t0) < 10000, "write-behind still pending after 10 s");
		usleep(5000);
	}
}

static inline void test_flush_wait(struct kvt_store *s, struct test_box *fb)
{
	CHECK_RC(kvt_flush(s, test_box_cb, fb), 0);
	while (!fb->done)
		kvt_poll(s, 50);
}

/* n chained keys of the store's namespace, each chunk two tokens {salt, i}. */
static inline void test_chain_keys(struct kvt_store *s, struct kvt_key *k, int n, uint32_t salt)
{
	for (int i = 0; i < n; i++) {
		uint32_t t[2] = {salt, (uint32_t)i};
		kvt_key_next(kvt_store_ns_id(s), i ? &k[i - 1] : NULL, t, 2, &k[i]);
	}
}

/* One chunk per row, laid out as the canonical payload: [layer][K|V][token][head][dim]. */
static inline struct kvt_row_layout test_dense_layout(const struct kvt_geometry *g)
{
	const int64_t T = g->chunk_tokens, H = g->kv_heads, D = g->head_dim;
	uint32_t eb = kvt_dtype_bytes(g->dtype);
	struct kvt_row_layout lay = {.elem_bytes = eb, .layers = g->layers, .kv_heads = g->kv_heads,
				     .head_dim = g->head_dim, .block_tokens = g->chunk_tokens,
				     .blocks_per_chunk = 1, .heads_per_rank = g->kv_heads,
				     .row_bytes = (uint64_t)(2 * g->layers * T * H * D) * eb};
	struct kvt_row_strides k = {.layer = 2 * T * H * D, .token = H * D, .head = D, .dim = 1};
	lay.k = lay.v = k;
	lay.v.offset = T * H * D;
	return lay;
}

/* Load the n chunks of keys with a rows handle of the dense layout (test_dense_layout, staging
 * buffers) and check that each row holds payload (len bytes: every chunk was put with it). */
static inline void test_rows_load_exact(struct kvt_store *s, const struct kvt_key *keys,
					uint32_t n, uint32_t staging, const void *payload,
					size_t len)
{
	struct kvt_row_layout lay = test_dense_layout(kvt_store_geometry(s));
	CHECK_EQ(kvt_row_layout_chunk_bytes(&lay), len);
	uint8_t *rows = calloc(n, lay.row_bytes);
	uint64_t *ids = calloc(n, sizeof(*ids));
	CHECK(rows && ids);
	for (uint32_t i = 0; i < n; i++)
		ids[i] = i;
	struct kvt_rows *r;
	CHECK_RC(kvt_rows_open(s, &lay, rows, n, staging, &r), 0);
	struct kvt_rows_result res;
	CHECK_EQ(kvt_rows_load(r, keys, ids, n, 0, &res), (int)n);
	for (uint32_t i = 0; i < n; i++)
		CHECKM(!memcmp(rows + (size_t)i * lay.row_bytes, payload, len), "row %u exact", i);
	kvt_rows_close(r);
	free(rows);
	free(ids);
}

#endif
