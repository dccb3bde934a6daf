/*
 * store_deadline.c - "no call waits past its deadline", through the engine, with a slow
 * and then a stalled NVMe directory (the fault-injecting tier holds every answer of a real
 * NVMe tier back on its own thread, like a device whose calls each take that long):
 *   - puts land in DRAM at once; the write-behind to the stalled tier misses its deadline,
 *     is counted, and lets go of the slot (a later put needs it);
 *   - kvt_flush returns within its deadlines and names the tier that could not;
 *   - get, lookup, remove and a put that waits for its write (no DRAM tier) each return
 *     within the ceiling, as a miss or an error, never hanging;
 *   - deadlines expire while the service thread is kept busy by a steady stream of work
 *     (before: only after 20 ms idle, so such a load held them off forever);
 *   - the missed deadline is reported as "slow" (a local tier), not as a remote one;
 *   - kvt_store_close returns in bounded time with answers still held by the tier;
 *   - a sound object larger than store.max_object_bytes is a miss and is never deleted;
 *   - a remove right after a put is not overtaken by the put's slow write-behind;
 *   - out of memory for a write-behind job, the slot stays dirty and flush writes it;
 *   - a flood of write-through puts over a tier that writes at a fixed rate is told to
 *     retry rather than queue writes past their deadline, and every object lands;
 *   - a put told to retry counts once for admission, however often it is retried;
 *   - a local device that slows down while it keeps answering: writes queued behind
 *     others outlast their first deadline and are given more time, not given up on;
 *   - the bench's replace loop (remove, then put) over a tier that stalls mid-run: every
 *     operation out completes within two deadline ceilings once the loop stops;
 *   - a remove answered while writes were queued ahead of it (no bytes of its own kind)
 *     does not teach the link a bandwidth of 0, whose NaN estimates never expired a call;
 *   - the deadline heap's growth failing for lack of memory leaves no call without its
 *     deadline.
 */
#include <pthread.h>
#include <sys/stat.h>

#include "engine.h"
#include "testlib.h"
#include "tier.h"
#include "tier_faulty.h"

#define CEIL_MS 300
#define STALL_MS 600000

static struct kvt_geometry G;
static size_t PAYLOAD;
static _Atomic int slow_lines, remote_lines;

static void log_cb(void *arg, int level, const char *msg)
{
	(void)arg;
	if (strstr(msg, "missed its deadline")) {
		if (strstr(msg, "(slow)"))
			slow_lines++;
		if (strstr(msg, "remote"))
			remote_lines++;
	}
	if (getenv("KVT_TEST_VERBOSE") || level <= KVT_LOG_ERROR)
		fprintf(stderr, "  [lib %d] %s\n", level, msg);
}

static struct kvt_store *open_store(const char *dir, const char *tiers, const char *max_obj)
{
	struct kvt_config *c = test_config(tiers, dir);
	kvt_config_set_log(c, log_cb, NULL, KVT_LOG_DEBUG);
	test_set(c, "faulty.inner", "nvme");
	test_set(c, "store.tier_timeout_ms", "300");
	test_set(c, "store.deadline_floor_ms", "50");
	if (max_obj)
		test_set(c, "store.max_object_bytes", max_obj);
	struct kvt_store *s;
	CHECK_RC(kvt_store_open(c, &s), 0);
	kvt_config_destroy(c);
	G = *kvt_store_geometry(s);
	PAYLOAD = kvt_payload_bytes(&G, G.chunk_tokens);
	return s;
}

/* A steady stream of service-thread work: DRAM-hit acquisitions, each deferred. */
struct hammer {
	struct kvt_store *s;
	struct kvt_key key;
	_Atomic int stop;
	_Atomic long n;
};

static void hammer_cb(void *arg, int rc, const struct kvt_slot_ref *ref, int tier)
{
	struct hammer *h = arg;
	if (rc == 0)
		kvt__store_release(h->s, ref);
	h->n++;
}

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	while (!h->stop) {
		for (int i = 0; i < 50; i++)
			if (kvt__store_acquire(h->s, &h->key, hammer_cb, h) < 0)
				break;
		usleep(500);
	}
	return NULL;
}

/* ---- 6. write-through puts land in DRAM at once, so nothing but the engine bounds the
 * writes queued behind them at a slow tier. Over a tier that writes one object after
 * another at a fixed rate (20 objects a second here), a flood of puts must be told to
 * retry (-EAGAIN) while the queue ahead would outlast the deadline, instead of queueing
 * writes that then miss it (before: every write past the first ~6 missed its 300 ms
 * deadline, and each such object was on no deeper tier). ---- */
static int flood_left;

static void flood_cb(void *arg, const struct kvt_result *r)
{
	(void)arg;
	CHECK_RC(r->status, 0);
	flood_left--;
}

/* DRAM over a one-lane tier that writes 20 objects of 512 KiB (256 tokens: bandwidth
 * samples, not latency) a second, room in DRAM for every object, the deadline floor at
 * 50 ms and the ceiling at ceiling_ms; keys k[0, w) written one at a time first (chunk i
 * is test_fill(seed0 + i)), so the engine has learned the tier's rate. */
static struct kvt_store *open_rate_store(const char *dir, const char *ceiling_ms,
					 struct kvt_key *k, int n_keys, int w, uint64_t seed0)
{
	struct kvt_config *c = test_config("dram,faulty", dir);
	kvt_config_set_log(c, log_cb, NULL, KVT_LOG_DEBUG);
	test_set(c, "faulty.inner", "nvme");
	test_set(c, "model.chunk_tokens", "256");
	test_set(c, "dram.bytes", "48MiB"); /* no pinned-pool EAGAIN */
	test_set(c, "store.tier_timeout_ms", ceiling_ms);
	test_set(c, "store.deadline_floor_ms", "50");
	struct kvt_store *s;
	CHECK_RC(kvt_store_open(c, &s), 0);
	kvt_config_destroy(c);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t payload = kvt_payload_bytes(g, g->chunk_tokens);
	kvt__faulty_set_write_rate(kvt__store_tier(s, 1), kvt_object_bytes(g, g->chunk_tokens) * 20);
	test_chain_keys(s, k, n_keys, (unsigned)seed0);
	void *buf = malloc(payload);
	for (int i = 0; i < w; i++) {
		test_fill(buf, payload, seed0 + (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &k[i], NULL, g->chunk_tokens, buf, payload), 0);
		CHECK_RC(kvt_flush_sync(s), 0);
	}
	free(buf);
	return s;
}

/* Keys k[from, to) of open_rate_store are on its NVMe directory, intact (opened alone). */
static void check_landed(const char *dir, const struct kvt_key *k, int from, int to,
			 uint64_t seed0)
{
	struct kvt_config *c = test_config("nvme", dir);
	test_set(c, "model.chunk_tokens", "256");
	struct kvt_store *s;
	CHECK_RC(kvt_store_open(c, &s), 0);
	kvt_config_destroy(c);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t payload = kvt_payload_bytes(g, g->chunk_tokens);
	void *back = malloc(payload);
	for (int i = from; i < to; i++) {
		CHECK_RC(kvt_get_sync(s, &k[i], 0, 0, back, payload, NULL), 0);
		CHECKM(test_check(back, payload, seed0 + (uint64_t)i), "object %d intact", i);
	}
	kvt_store_close(s);
	free(back);
}

static void flood_fixed_rate(const char *dir)
{
	enum { M = 40, W = 10 };
	struct kvt_key k[M];
	struct kvt_store *s = open_rate_store(dir, "300", k, M, W, 700);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t payload = kvt_payload_bytes(g, g->chunk_tokens);
	void *buf = malloc(payload);
	struct kvt_tier *t = kvt__store_tier(s, 1);
	struct kvt_stats st;
	kvt_stats(s, &st);
	uint64_t misses0 = st.tier[1].deadline_misses, skipped0 = st.tier[1].writes_skipped;
	/* the flood: every put as soon as the store takes it */
	void *bufs = malloc(payload * M);
	int eagain = 0;
	uint64_t t0 = kvt__now_ns();
	for (int i = W; i < M; i++) {
		void *b = (char *)bufs + (size_t)i * payload;
		test_fill(b, payload, 700 + (uint64_t)i);
		flood_left++;
		int rc;
		while ((rc = kvt_put(s, &k[i], NULL, g->chunk_tokens, b, payload, flood_cb,
				     NULL)) == -EAGAIN) {
			eagain++;
			kvt_poll(s, 5);
		}
		CHECK_RC(rc, 0);
	}
	while (flood_left)
		kvt_poll(s, 10);
	CHECK_RC(kvt_flush_sync(s), 0);
	double ms = test_ms_since(t0);
	kvt_stats(s, &st);
	fprintf(stderr, "  write-through flood over a 20-objects/s tier: %d objects in %.0f ms, "
			"%d puts told to retry, %llu deadline misses\n",
		M - W, ms, eagain, (unsigned long long)(st.tier[1].deadline_misses - misses0));
	CHECKM(eagain > 0, "the flood was never held back");
	CHECKM(st.tier[1].deadline_misses == misses0, "writes queued past their deadline: %llu",
	       (unsigned long long)(st.tier[1].deadline_misses - misses0));
	CHECK_EQ(st.tier[1].writes_skipped, skipped0);

	/* The same tier stalls: its live writes stop counting when they miss their deadline
	 * and the tier is skipped once its circuit opens, so puts are held back for at most
	 * about a deadline at a time, never for good. */
	kvt__faulty_set(t, 0, 0, STALL_MS);
	enum { Z = 12 };
	struct kvt_key kz[Z];
	test_chain_keys(s, kz, Z, 8);
	double longest = 0;
	t0 = kvt__now_ns();
	for (int i = 0; i < Z; i++) {
		void *b = (char *)bufs + (size_t)(i % M) * payload;
		flood_left++;
		uint64_t w0 = kvt__now_ns();
		int rc;
		while ((rc = kvt_put(s, &kz[i], NULL, g->chunk_tokens, b, payload, flood_cb,
				     NULL)) == -EAGAIN)
			kvt_poll(s, 5);
		CHECK_RC(rc, 0);
		double w = test_ms_since(w0);
		longest = w > longest ? w : longest;
	}
	while (flood_left)
		kvt_poll(s, 10);
	ms = test_ms_since(t0);
	fprintf(stderr, "  %d puts over the stalled tier: %.0f ms, longest held back %.0f ms\n", Z,
		ms, longest);
	CHECKM(longest < CEIL_MS + 400, "a put was held back %.0f ms", longest);
	CHECKM(ms < 6 * CEIL_MS + 2000, "the puts took %.0f ms", ms);
	kvt__faulty_set(t, 0, 0, 0);
	kvt_store_close(s);
	check_landed(dir, k, 0, M, 700); /* every object of the flood, intact */
	free(bufs);
	free(buf);
}

/* ---- 6b. a local device that slows down under load keeps answering: the writes queued
 * behind others outlast the deadline their submission estimated, yet the device is
 * working through them. Each overdue write is given more time while writes keep being
 * answered (deadline_extensions), up to the ceiling; none is given up on (before: the
 * later ones missed their deadline, were left out of the tier and failed the flush, as 3
 * of the MLPerf KV run's 64 MiB writes did when reads arriving after them shared the
 * disk). A stalled device still misses: sections 1 and 6. ---- */
static void slowdown_keeps_answering(const char *dir)
{
	enum { W = 10, Q = 12 };
	struct kvt_key k[W + Q];
	struct kvt_store *s = open_rate_store(dir, "6000", k, W + Q, W, 900);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t payload = kvt_payload_bytes(g, g->chunk_tokens);
	uint64_t obj = kvt_object_bytes(g, g->chunk_tokens);
	struct kvt_tier *t = kvt__store_tier(s, 1);
	void *bufs = malloc(payload * (W + Q));
	struct kvt_stats st;
	kvt_stats(s, &st);
	uint64_t misses0 = st.tier[1].deadline_misses, skipped0 = st.tier[1].writes_skipped;
	/* Now 4 a second: the q-th write waits (q+1)/4 s where its submission expected
	 * (q+1)/20, and 4 x that plus the floor is short of it from the third on. */
	kvt__faulty_set_write_rate(t, obj * 4);
	uint64_t t0 = kvt__now_ns();
	for (int i = W; i < W + Q; i++) {
		void *b = (char *)bufs + (size_t)i * payload;
		test_fill(b, payload, 900 + (uint64_t)i);
		flood_left++;
		int rc;
		while ((rc = kvt_put(s, &k[i], NULL, g->chunk_tokens, b, payload, flood_cb,
				     NULL)) == -EAGAIN)
			kvt_poll(s, 5);
		CHECK_RC(rc, 0);
	}
	while (flood_left)
		kvt_poll(s, 10);
	int frc = kvt_flush_sync(s);
	double ms = test_ms_since(t0);
	kvt_stats(s, &st);
	fprintf(stderr, "  %d writes over a device slowed from 20 to 4 objects/s: %.0f ms, %llu "
			"deadlines moved on, %llu missed, flush %s\n",
		Q, ms, (unsigned long long)st.tier[1].deadline_extensions,
		(unsigned long long)(st.tier[1].deadline_misses - misses0), kvt_strerror(frc));
	CHECK_RC(frc, 0);
	CHECKM(st.tier[1].deadline_misses == misses0, "writes given up on while the device "
	       "answered: %llu", (unsigned long long)(st.tier[1].deadline_misses - misses0));
	/* That the slowdown outlasted an estimate is what makes this section test something;
	 * under a sanitizer the puts themselves are slow enough that none may have (TSan,
	 * CI 2026-12-07: 12 writes in 3080 ms, 0 moved on, 0 missed): said, not failed -
	 * the release build checks it. */
	if (TEST_SANITIZED && !st.tier[1].deadline_extensions)
		fprintf(stderr, "  (sanitizer: no deadline was moved on, so this section only "
				"checked that none was missed)\n");
	else
		CHECKM(st.tier[1].deadline_extensions > 0, "no deadline was moved on: the slowdown "
		       "did not outlast an estimate, so this section tests nothing");
	CHECK_EQ(st.tier[1].writes_skipped, skipped0);
	kvt_store_close(s);
	check_landed(dir, k, W, W + Q, 900);
	free(bufs);
}

/* ---- 7. a put told to retry is one request for its chunk: with admission.min_freq = 2
 * a chunk is written deeper from its second sighting on, and a put that got -EAGAIN forty
 * times while write-behind held its share of the DRAM pool must still count once (before:
 * each retry was a sighting, so the chunk went to the deeper tier on its first put). ---- */
static void retried_put_is_one_sighting(const char *dir)
{
	enum { SLOTS = 6 };
	struct kvt_config *c = test_config("dram,faulty", dir);
	kvt_config_set_log(c, log_cb, NULL, KVT_LOG_DEBUG);
	test_set(c, "faulty.inner", "nvme");
	test_set(c, "admission.min_freq", "2");
	test_set(c, "store.tier_timeout_ms", "5000");
	struct kvt_store *s;
	char db[32];
	CHECK_RC(kvt_store_open(c, &s), 0); /* for the geometry: the pool is sized in objects */
	uint64_t obj = kvt_object_bytes(kvt_store_geometry(s), kvt_store_geometry(s)->chunk_tokens);
	kvt_store_close(s);
	snprintf(db, sizeof(db), "%llu", (unsigned long long)(obj * SLOTS));
	test_set(c, "dram.bytes", db);
	CHECK_RC(kvt_store_open(c, &s), 0);
	kvt_config_destroy(c);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t payload = kvt_payload_bytes(g, g->chunk_tokens);
	void *buf = malloc(payload);
	struct kvt_tier *t = kvt__store_tier(s, 1);
	struct kvt_key a[SLOTS], b;
	test_chain_keys(s, a, SLOTS, 9);
	uint32_t tok[1] = {9999};
	kvt_key_next(kvt_store_ns_id(s), NULL, tok, 1, &b);
	/* every slot pinned by a write-behind that lands 300 ms later: each a[i] seen twice */
	for (int i = 0; i < SLOTS; i++) {
		test_fill(buf, payload, 900 + (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &a[i], NULL, g->chunk_tokens, buf, payload), 0);
		CHECK(kvt_remove_sync(s, &a[i]) >= 1);
	}
	kvt__faulty_set_write_delay(t, 300);
	struct kvt_stats st;
	kvt_stats(s, &st);
	uint64_t writes0 = st.tier[1].writes;
	int eagain = 0, rc;
	/* write-behind holds at most half the pool (store->late_cap): the fourth put waits
	 * for the first writes */
	for (int i = 0; i < SLOTS; i++) {
		test_fill(buf, payload, 900 + (uint64_t)i);
		while ((rc = kvt_put_sync(s, &a[i], NULL, g->chunk_tokens, buf, payload)) == -EAGAIN)
			usleep(5000);
		CHECK_RC(rc, 0);
	}
	test_fill(buf, payload, 999);
	while ((rc = kvt_put_sync(s, &b, NULL, g->chunk_tokens, buf, payload)) == -EAGAIN) {
		eagain++;
		usleep(5000);
	}
	CHECK_RC(rc, 0);
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt__faulty_set_write_delay(t, 0);
	kvt_stats(s, &st);
	fprintf(stderr, "  a put retried %d times while write-behind held its share of the pool: the deeper tier "
			"took %llu writes (the %d chunks seen twice)\n",
		eagain, (unsigned long long)(st.tier[1].writes - writes0), SLOTS);
	CHECKM(eagain >= 5, "the put was never told to retry (%d)", eagain);
	CHECKM(st.tier[1].writes - writes0 == SLOTS, "writes %llu: the retried put was admitted",
	       (unsigned long long)(st.tier[1].writes - writes0));
	kvt_store_close(s);
	free(buf);
}

/* ---- 8. the replace loop of `kvtier bench` (remove a key, then put it; no DRAM tier) over
 * a tier that stalls mid-run, as bench_stall_fs does through FUSE: once the loop stops
 * starting operations, every one still out completes within two deadline ceilings (a
 * remove may wait for its key's write-behind, then make its own call). Some slots share a
 * key, so removes queue behind other slots' writes of it; a put told to retry polls from
 * inside a completion, as the bench does. Several stall points, each on a new store. ---- */
#define CHURN_SLOTS 8
#define CHURN_KEYS 14

struct churn;
struct churn_slot {
	struct churn *c;
	void *buf;
	int k;
};

struct churn {
	struct kvt_store *s;
	struct kvt_key keys[CHURN_KEYS];
	uint8_t busy[CHURN_KEYS];
	struct churn_slot slots[CHURN_SLOTS];
	int out;
	bool stop;
	uint64_t done, failed, rng;
};

static void churn_next(struct churn_slot *sl);

static void churn_put_done(void *arg, const struct kvt_result *r)
{
	struct churn_slot *sl = arg;
	struct churn *c = sl->c;
	c->out--;
	c->busy[sl->k] = 0;
	c->done++;
	if (r->status < 0)
		c->failed++;
	if (!c->stop)
		churn_next(sl);
}

static void churn_put(struct churn_slot *sl)
{
	struct churn *c = sl->c;
	int rc;
	while ((rc = kvt_put(c->s, &c->keys[sl->k], NULL, G.chunk_tokens, sl->buf, PAYLOAD,
			     churn_put_done, sl)) == -EAGAIN)
		kvt_poll(c->s, 1);
	if (rc < 0) {
		c->out--;
		c->busy[sl->k] = 0;
		c->failed++;
	}
}

static void churn_removed(void *arg, const struct kvt_result *r)
{
	(void)r;
	churn_put(arg);
}

static void churn_next(struct churn_slot *sl)
{
	struct churn *c = sl->c;
	do {
		c->rng = c->rng * 6364136223846793005ull + 1442695040888963407ull;
		sl->k = (int)((c->rng >> 33) % CHURN_KEYS);
	} while (c->busy[sl->k]);
	c->busy[sl->k] = 1;
	c->out++;
	if (kvt_remove(c->s, &c->keys[sl->k], churn_removed, sl) < 0)
		churn_put(sl);
}

static void churn_under_stall(const char *dir)
{
	const int stall_after_ms[] = {0, 40, 150, 290, 420};
	for (size_t round = 0; round < KVT_ARRAY_SIZE(stall_after_ms); round++) {
		struct kvt_store *s = open_store(dir, "faulty", NULL);
		struct kvt_tier *t = kvt__store_tier(s, 0);
		kvt__faulty_set(t, 0, 0, 2); /* a working device: 2 ms a call */
		static struct churn c;
		memset(&c, 0, sizeof(c));
		c.s = s;
		c.rng = round + 1;
		test_chain_keys(s, c.keys, CHURN_KEYS - 4, 80 + (uint32_t)round);
		for (int i = CHURN_KEYS - 4; i < CHURN_KEYS; i++) /* shared by two slots' picks */
			c.keys[i] = c.keys[i - (CHURN_KEYS - 4)];
		for (int i = 0; i < CHURN_SLOTS; i++) {
			c.slots[i].c = &c;
			c.slots[i].buf = malloc(PAYLOAD);
			test_fill(c.slots[i].buf, PAYLOAD, 800 + (uint64_t)i);
			churn_next(&c.slots[i]);
		}
		uint64_t t0 = kvt__now_ns();
		bool stalled = false;
		while (test_ms_since(t0) < 1500) {
			if (!stalled && test_ms_since(t0) >= stall_after_ms[round]) {
				kvt__faulty_set(t, 0, 0, STALL_MS);
				stalled = true;
			}
			kvt_poll(s, 5);
		}
		c.stop = true;
		uint64_t t1 = kvt__now_ns();
		while (c.out && test_ms_since(t1) < 2 * CEIL_MS + 1000)
			kvt_poll(s, 10);
		double tail_ms = test_ms_since(t1);
		struct kvt__store_waits w;
		kvt__store_waits(s, &w);
		fprintf(stderr,
			"  churn, stall after %d ms: %llu operations (%llu failed), the last out %.0f "
			"ms after the loop stopped\n",
			stall_after_ms[round], (unsigned long long)c.done,
			(unsigned long long)c.failed, tail_ms);
		CHECKM(c.out == 0,
		       "%d operations still out %.0f ms after the loop stopped (store: %llu admitted, "
		       "%llu tier calls under a deadline, %llu write-behind jobs, %llu removes waiting)",
		       c.out, tail_ms, (unsigned long long)w.ops, (unsigned long long)w.tier_calls,
		       (unsigned long long)w.wb_jobs, (unsigned long long)w.removes_waiting);
		CHECKM(c.failed > 0, "the stall failed no operation");
		kvt_store_close(s);
		for (int i = 0; i < CHURN_SLOTS; i++)
			free(c.slots[i].buf);
	}
}

/* A call that moves no bytes of its own kind (a remove answered while writes were queued
 * ahead of it) is no bandwidth sample. It was taken for one, of 0 B/s; every later
 * estimate on the link was then 0 bytes / 0 B/s, NaN, a deadline of ~2^63 ns: calls on the
 * tier once it stalled never expired (integ.bench_stall_fs: "3 operations still out 8.0 s
 * after the phase ended, past every deadline"). */
static void zero_byte_sample(const char *dir)
{
	char sub[300];
	snprintf(sub, sizeof(sub), "%s/zero-sample", dir);
	struct kvt_store *s = open_store(sub, "faulty", NULL);
	struct kvt_tier *t = kvt__store_tier(s, 0);
	void *buf = malloc(PAYLOAD), *back = malloc(PAYLOAD);
	CHECK(buf && back);
	/* enough writes queued that the remove's call is not a "small" one (256 KiB moved) */
	enum { NP = 12 };
	CHECK(NP * PAYLOAD > (256u << 10));
	struct kvt_key k[NP + 1];
	test_chain_keys(s, k, NP + 1, 77);
	test_fill(buf, PAYLOAD, 77);
	kvt__faulty_set_write_delay(t, 150); /* writes land late, removes answer at once */
	struct test_box put[NP];
	memset(put, 0, sizeof(put));
	for (int i = 0; i < NP; i++)
		CHECK_RC(kvt_put(s, &k[i], NULL, G.chunk_tokens, buf, PAYLOAD, test_box_cb, &put[i]),
			 0);
	/* the link's first answer: a remove of an absent key, the writes queued ahead of it */
	(void)kvt_remove_sync(s, &k[NP]);
	uint64_t t0 = kvt__now_ns();
	int done = 0;
	while (done < NP && test_ms_since(t0) < 5000) {
		kvt_poll(s, 20);
		done = 0;
		for (int i = 0; i < NP; i++)
			done += put[i].done;
	}
	CHECK(done == NP);
	kvt__faulty_set_write_delay(t, 0);
	for (int i = 0; i < 10; i++) /* past the warm-up: budgets come from the estimate */
		CHECK(kvt_lookup_sync(s, k, 1, NULL) >= 0);
	kvt__faulty_set(t, 0, 0, STALL_MS);
	t0 = kvt__now_ns();
	struct kvt_result r;
	int rc = kvt_get_sync(s, &k[0], 0, 0, back, PAYLOAD, &r);
	double ms = test_ms_since(t0);
	fprintf(stderr, "  a remove answered first while writes were queued, then a stall: get "
			"%s in %.0f ms\n", kvt_strerror(rc), ms);
	CHECK_RC(rc, -ENOENT); /* a miss: the tier missed its deadline */
	CHECKM(ms < CEIL_MS + 400, "get took %.0f ms (was: until the tier answered)", ms);
	kvt_store_close(s);
	free(buf);
	free(back);
}

/* The deadline heap grows past its first 256 places while a tier is stalled, and the one
 * allocation that grows it fails: that guard used to be armed with no place in the heap,
 * so its lookup waited for the tier's own answer (5 s) instead of its 300 ms deadline. Each
 * of the first allocations of a lookup made then fails in turn (kvt__alloc_fail_after):
 * every lookup out is answered within two deadlines. */
static void guard_heap_without_memory(const char *dir)
{
	struct kvt_store *s = open_store(dir, "faulty", NULL);
	kvt__faulty_set(kvt__store_tier(s, 0), 0, 0, 5000);
	enum { FILL = 256, EXTRA = 12 };
	static struct test_box box[FILL + EXTRA];
	static struct kvt_key keys[FILL + EXTRA];
	static int8_t tiers[FILL + EXTRA];
	memset(box, 0, sizeof(box));
	uint64_t t0 = test_now_ns();
	for (int i = 0; i < FILL + EXTRA; i++) {
		memset(&keys[i], 0, sizeof(keys[i]));
		memcpy(keys[i].bytes, &i, sizeof(i));
		keys[i].bytes[31] = 0x9e;
		if (i >= FILL)
			kvt__alloc_fail_after((uint64_t)(i - FILL + 1));
		int rc = kvt_lookup(s, &keys[i], 1, &tiers[i], test_box_cb, &box[i]);
		kvt__alloc_fail_after(0);
		if (rc < 0) { /* refused at once for lack of memory: answered */
			CHECKM(rc == -ENOMEM, "lookup %d: %d", i, rc);
			box[i].done = 1;
		}
	}
	int left = FILL + EXTRA;
	while (left && test_ms_since(t0) < 4000) {
		kvt_poll(s, 20);
		left = 0;
		for (int i = 0; i < FILL + EXTRA; i++)
			left += !box[i].done;
	}
	fprintf(stderr, "  deadline heap grown without memory: %d of %d lookups unanswered "
			"after %.0f ms\n", left, FILL + EXTRA, test_ms_since(t0));
	CHECKM(left == 0, "%d lookups waited past two deadlines (the tier answers after 5 s)",
	       left);
	kvt_store_close(s);
}

int main(void)
{
	char *dir = test_tmpdir("deadline");
	enum { N = 6 };
	struct kvt_key k[N], k2[N];
	void *buf = malloc(PAYLOAD ? PAYLOAD : (1 << 20));

	/* ---- 1. DRAM + a stalled NVMe directory under write-through ---- */
	struct kvt_store *s = open_store(dir, "dram,faulty", NULL);
	buf = realloc(buf, PAYLOAD);
	struct kvt_tier *t = kvt__store_tier(s, 1);
	test_chain_keys(s, k, N, 1);
	test_chain_keys(s, k2, N, 2);
	for (int i = 0; i < N; i++) {
		test_fill(buf, PAYLOAD, (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &k[i], i ? &k[i - 1] : NULL, G.chunk_tokens, buf, PAYLOAD),
			 0);
	}
	CHECK_RC(kvt_flush_sync(s), 0);

	kvt__faulty_set(t, 0, 0, STALL_MS);
	/* A miss in DRAM goes to the stalled tier: it returns within the deadline even while
	 * the service thread never idles. */
	struct hammer h = {.s = s, .key = k[N - 1]};
	pthread_t ht;
	pthread_create(&ht, NULL, hammer_main, &h);
	usleep(50000);
	struct kvt_key absent;
	uint32_t tok[1] = {999};
	kvt_key_next(kvt_store_ns_id(s), NULL, tok, 1, &absent);
	uint64_t t0 = kvt__now_ns();
	int rc = kvt_get_sync(s, &absent, 0, 0, buf, PAYLOAD, NULL);
	double get_ms = test_ms_since(t0);
	h.stop = 1;
	pthread_join(ht, NULL);
	fprintf(stderr, "  get on the stalled tier under a steady service load (%ld acquisitions): "
			"%.0f ms, %s\n",
		(long)h.n, get_ms, kvt_strerror(rc));
	CHECK_RC(rc, -ENOENT);
	CHECKM(get_ms < CEIL_MS + 400, "get took %.0f ms", get_ms);
	CHECKM(h.n > 100, "the service thread was kept busy (%ld)", (long)h.n);

	t0 = kvt__now_ns();
	for (int i = 0; i < N; i++) {
		test_fill(buf, PAYLOAD, 100 + (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &k2[i], i ? &k2[i - 1] : NULL, G.chunk_tokens, buf,
				      PAYLOAD),
			 0);
	}
	double put_ms = test_ms_since(t0);
	fprintf(stderr, "  %d puts with the NVMe tier stalled: %.1f ms\n", N, put_ms);
	CHECKM(put_ms < 200, "puts into DRAM must not wait for the stalled tier (%.0f ms)", put_ms);

	/* flush: writes expire (<= ceiling), then the tier's durability op expires too. */
	struct test_box fb = {0};
	t0 = kvt__now_ns();
	CHECK_RC(kvt_flush(s, test_box_cb, &fb), 0);
	while (!fb.done)
		kvt_poll(s, 50);
	double flush_ms = test_ms_since(t0);
	fprintf(stderr, "  flush with the NVMe tier stalled: %.0f ms, status %d (%s), tier %d\n",
		flush_ms, fb.res.status, kvt_strerror(fb.res.status), fb.res.tier);
	CHECKM(flush_ms < 3 * CEIL_MS + 400, "flush took %.0f ms", flush_ms);
	CHECKM(fb.res.status < 0, "flush must report the tier that missed");
	CHECK_EQ(fb.res.tier, 1);

	struct kvt_stats st;
	kvt_stats(s, &st);
	CHECKM(st.tier[1].writes_skipped >= N, "missed write-behind counted: %llu",
	      (unsigned long long)st.tier[1].writes_skipped);
	CHECKM(st.tier[1].errors >= 1, "misses counted as errors");
	/* every missed write and the missed flush, in kvt_stats (kvtierd's /metrics) */
	CHECKM(st.tier[1].deadline_misses >= N + 1, "deadline misses reported: %llu",
	       (unsigned long long)st.tier[1].deadline_misses);
	CHECK_EQ(st.tier[0].deadline_misses, 0);
	CHECK_EQ(st.write_behind_pending, 0);
	CHECKM(slow_lines > 0, "a local tier's miss is reported as slow");
	CHECK_EQ(remote_lines, 0);

	/* lookup past DRAM, remove: within the deadline (or at once once the circuit is
	 * open). */
	int8_t tiers[N + 1];
	struct kvt_key probe[2] = {k[0], absent};
	t0 = kvt__now_ns();
	rc = kvt_lookup_sync(s, probe, 2, tiers); /* circuit open by now: at once */
	double lk_ms = test_ms_since(t0);
	CHECK_RC(rc, 1);
	CHECKM(lk_ms < CEIL_MS + 400, "lookup took %.0f ms", lk_ms);
	t0 = kvt__now_ns();
	rc = kvt_remove_sync(s, &k[0]);
	double rm_ms = test_ms_since(t0);
	CHECKM(rc >= 1, "removed from DRAM at least (%d)", rc);
	CHECKM(rm_ms < CEIL_MS + 400, "remove took %.0f ms", rm_ms);
	fprintf(stderr, "  lookup %.0f ms, remove %.0f ms\n", lk_ms, rm_ms);

	/* close with answers still held by the stalled tier */
	t0 = kvt__now_ns();
	kvt_store_close(s);
	double close_ms = test_ms_since(t0);
	fprintf(stderr, "  close with the tier stalled: %.0f ms\n", close_ms);
	CHECKM(close_ms < 3000, "close took %.0f ms", close_ms);

	/* ---- 2. no DRAM: every call goes to the (slow, then stalled) tier ---- */
	s = open_store(dir, "faulty", NULL);
	t = kvt__store_tier(s, 0);
	kvt__faulty_set(t, 0, 0, 20); /* slow but in time: 20 ms per call */
	struct kvt_key k3[N];
	test_chain_keys(s, k3, N, 3);
	for (int i = 0; i < N; i++) {
		test_fill(buf, PAYLOAD, 300 + (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &k3[i], NULL, G.chunk_tokens, buf, PAYLOAD), 0);
	}
	for (int i = 0; i < N; i++) {
		struct kvt_result r;
		CHECK_RC(kvt_get_sync(s, &k3[i], 0, 0, buf, PAYLOAD, &r), 0);
		CHECKM(test_check(buf, PAYLOAD, 300 + (uint64_t)i), "slow but correct bytes");
	}
	kvt__faulty_set(t, 0, 0, STALL_MS);
	test_fill(buf, PAYLOAD, 7);
	struct kvt_key k4;
	tok[0] = 4444;
	kvt_key_next(kvt_store_ns_id(s), NULL, tok, 1, &k4);
	t0 = kvt__now_ns();
	rc = kvt_put_sync(s, &k4, NULL, G.chunk_tokens, buf, PAYLOAD);
	double p_ms = test_ms_since(t0);
	fprintf(stderr, "  put waiting for a stalled write: %.0f ms, %s\n", p_ms, kvt_strerror(rc));
	CHECK_RC(rc, -ETIMEDOUT);
	CHECKM(p_ms < CEIL_MS + 400, "put took %.0f ms", p_ms);
	/* lookup and remove on the stalled tier, before its circuit opens */
	t0 = kvt__now_ns();
	rc = kvt_lookup_sync(s, k3, N, tiers);
	lk_ms = test_ms_since(t0);
	CHECK_RC(rc, 0);
	CHECKM(lk_ms < CEIL_MS + 400, "lookup took %.0f ms", lk_ms);
	t0 = kvt__now_ns();
	rc = kvt_remove_sync(s, &k3[N - 1]);
	rm_ms = test_ms_since(t0);
	CHECK_RC(rc, 0);
	CHECKM(rm_ms < CEIL_MS + 400, "remove took %.0f ms", rm_ms);
	fprintf(stderr, "  stalled, no DRAM: lookup %.0f ms, remove %.0f ms\n", lk_ms, rm_ms);
	for (int i = 0; i < 3; i++) {
		t0 = kvt__now_ns();
		struct kvt_result res;
		rc = kvt_get_sync(s, &k3[i], 0, 0, buf, PAYLOAD, &res);
		double g_ms = test_ms_since(t0);
		CHECK_RC(rc, -ENOENT);
		/* a miss that says why: the tier was late, or skipped once its circuit opened */
		CHECKM(res.cause == -ETIMEDOUT || res.cause == -EAGAIN, "cause %d", res.cause);
		CHECKM(g_ms < CEIL_MS + 400, "get took %.0f ms", g_ms);
	}
	t0 = kvt__now_ns();
	kvt_store_close(s);
	close_ms = test_ms_since(t0);
	CHECKM(close_ms < 3000, "close took %.0f ms", close_ms);

	/* ---- 3. the stalled answers were cancelled, the objects written before are there:
	 * a store whose max_object_bytes is below them sees misses and deletes nothing ---- */
	s = open_store(dir, "nvme", "8KiB");
	for (int i = 0; i < N - 1; i++)
		CHECK_RC(kvt_get_sync(s, &k3[i], 0, 0, buf, PAYLOAD, NULL), -ENOENT);
	kvt_stats(s, &st);
	CHECK_EQ(st.tier[0].checksum_failures, 0);
	kvt_store_close(s);
	s = open_store(dir, "nvme", NULL);
	for (int i = 0; i < N - 1; i++) {
		CHECK_RC(kvt_get_sync(s, &k3[i], 0, 0, buf, PAYLOAD, NULL), 0);
		CHECKM(test_check(buf, PAYLOAD, 300 + (uint64_t)i), "object kept intact");
	}
	kvt_store_close(s);

	/* ---- 4. a remove is ordered after the write-behind of its key: with writes that
	 * land 150 ms after they are submitted (a slow device), a remove right after the put
	 * must not be overtaken by the write, or the key reappears in the deeper tier ---- */
	s = open_store(dir, "dram,faulty", NULL);
	t = kvt__store_tier(s, 1);
	kvt__faulty_set_write_delay(t, 150);
	struct kvt_key k5[3];
	test_chain_keys(s, k5, 3, 5);
	for (int i = 0; i < 3; i++) {
		test_fill(buf, PAYLOAD, 500 + (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &k5[i], NULL, G.chunk_tokens, buf, PAYLOAD), 0);
		CHECK(kvt_remove_sync(s, &k5[i]) >= 1);
	}
	CHECK_RC(kvt_flush_sync(s), 0);
	usleep(400000); /* a write that missed its deadline would land by now */
	kvt_store_close(s);
	s = open_store(dir, "nvme", NULL);
	for (int i = 0; i < 3; i++)
		CHECK_RC(kvt_get_sync(s, &k5[i], 0, 0, buf, PAYLOAD, NULL), -ENOENT);
	CHECK_RC(kvt_lookup_sync(s, k5, 3, tiers), 0);
	kvt_store_close(s);
	fprintf(stderr, "  removes after slow write-behind: the keys stay removed\n");

	/* ---- 5. no memory for a write-behind job: the slot stays dirty (never marked clean
	 * unwritten), and the next flush writes it ---- */
	s = open_store(dir, "dram,nvme", NULL);
	struct kvt_key k6[2];
	test_chain_keys(s, k6, 2, 6);
	test_fill(buf, PAYLOAD, 600);
	CHECK_RC(kvt_put_sync(s, &k6[0], NULL, G.chunk_tokens, buf, PAYLOAD), 0);
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_stats(s, &st);
	uint64_t writes0 = st.tier[1].writes;
	test_fill(buf, PAYLOAD, 601);
	kvt__alloc_fail_after(1); /* the put's first allocation: its write-behind job */
	rc = kvt_put_sync(s, &k6[1], &k6[0], G.chunk_tokens, buf, PAYLOAD);
	kvt__alloc_fail_after(0);
	CHECK_RC(rc, 0);
	usleep(100000);
	kvt_stats(s, &st);
	CHECKM(st.tier[1].writes == writes0, "no write-behind without memory (%llu -> %llu)",
	       (unsigned long long)writes0, (unsigned long long)st.tier[1].writes);
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_stats(s, &st);
	CHECKM(st.tier[1].writes == writes0 + 1, "flush wrote the dirty slot (%llu -> %llu)",
	       (unsigned long long)writes0, (unsigned long long)st.tier[1].writes);
	kvt_store_close(s);
	s = open_store(dir, "nvme", NULL);
	CHECK_RC(kvt_get_sync(s, &k6[1], 0, 0, buf, PAYLOAD, NULL), 0);
	CHECK(test_check(buf, PAYLOAD, 601));
	kvt_store_close(s);
	fprintf(stderr, "  write-behind without memory: kept dirty, written by flush\n");

	flood_fixed_rate(dir);
	slowdown_keeps_answering(dir);
	retried_put_is_one_sighting(dir);
	churn_under_stall(dir);
	zero_byte_sample(dir);
	guard_heap_without_memory(dir);

	free(buf);
	test_rmdir(dir);
	free(dir);
	fprintf(stderr, "store_deadline: ok\n");
	return 0;
}
