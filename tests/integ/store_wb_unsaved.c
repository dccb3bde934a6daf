/*
 * store_wb_unsaved.c - a chunk whose write-behind reached no deeper tier is not dropped
 * unnoticed. A put is acknowledged from DRAM (write-through and write-back alike); until
 * 2026-12-05 a write-behind that failed on every deeper tier marked the DRAM copy clean,
 * so it could be evicted with no copy anywhere, a flush after the failed job said 0 (the
 * job was outside its window) and a later get missed with no cause (a review's
 * reproducer). With DRAM and a fault-injecting tier around a real NVMe tier:
 *  1. The tier fails every call (its circuit open: open_circuit): a put succeeds (DRAM),
 *     its write-behind is skipped, and a flush fails -EIO naming the tier.
 *  2. The tier heals: a flush writes the still-unsaved chunk and returns 0; once DRAM has
 *     evicted it, a get reads the exact bytes from the deeper tier.
 *  3. The tier fails again, its circuit open: a put, then enough puts to evict it from
 *     DRAM (unsaved slots may go: a dead tier must not fill the pool with slots that never
 *     can); evicted_unsaved counts it, and after the tier heals the next flush fails -EIO
 *     naming the tier (the chunk is gone) and the one after returns 0; the get misses.
 *  4. Write-back: the same failure leaves the chunk unsaved, and its flush after the tier
 *     heals writes it (0), where it used to be left out.
 *  5. A write that misses its deadline and lands later: the chunk is no longer unsaved
 *     once it has landed, so its eviction is no loss and the flush says 0.
 *  6. A flush whose window holds a failed write (a put's write past its deadline) while
 *     a put after the flush fails first: -EIO naming the tier - until 2026-12-05 only the
 *     newest failure per tier was kept, and it hid the one inside the window (0).
 *  7. A tier with no durability call of its own (Redis, here one nobody listens for) and
 *     its circuit open: the flush's own write of the unsaved chunk is skipped at once, and
 *     the flush fails -EIO - it used to open its window after that write, and said 0.
 *  8. A put's write fails and its job completes while an older put's write is still out
 *     (slow, within its deadline); the tier heals and a flush writes the unsaved chunk
 *     again: 0, and the chunk reads back from the tier once evicted. Until 2026-12-06 the
 *     window counted every failure from the oldest job out, the completed one's too: -EIO
 *     over a chunk the flush itself had just written (with no job out, the same failure
 *     was not counted: 0).
 */
#include "engine.h"
#include "testlib.h"
#include "tier.h"
#include "tier_faulty.h"

static struct kvt_geometry G;
static size_t PAYLOAD;
static uint32_t next_tok = 1;

static struct kvt_store *open_store(const char *dir, const char *policy, bool short_deadline)
{
	struct kvt_config *c = test_config("dram,faulty", dir);
	test_set(c, "faulty.inner", "nvme");
	test_set(c, "store.write_policy", policy);
	if (short_deadline)
		test_set_deadline(c, "300", "300");
	struct kvt_store *s;
	CHECK_RC(kvt_store_open(c, &s), 0);
	kvt_config_destroy(c);
	G = *kvt_store_geometry(s);
	PAYLOAD = kvt_payload_bytes(&G, G.chunk_tokens);
	return s;
}

static void new_key(struct kvt_store *s, struct kvt_key *k)
{
	uint32_t tok = next_tok++;
	kvt_key_next(kvt_store_ns_id(s), NULL, &tok, 1, k);
}


/* The tier healed: flush until the circuit breaker lets calls through again (its
 * cool-down), at most 10 s; the first answer that is not the circuit's. */
static int flush_box(struct kvt_store *s, struct kvt_result *res)
{
	struct test_box fb = {0};
	test_flush_wait(s, &fb);
	*res = fb.res;
	return fb.res.status;
}

static int flush_healed(struct kvt_store *s, struct kvt_result *res)
{
	uint64_t t0 = test_now_ns();
	for (;;) {
		int rc = flush_box(s, res);
		if (rc == 0 || test_ms_since(t0) > 10000)
			return rc;
		usleep(100000);
	}
}

/* Put distinct chunks until key k has left DRAM (at most 4 × the pool). */
static void evict(struct kvt_store *s, const struct kvt_key *k)
{
	struct kvt_key sk; /* DRAM holds storage keys */
	kvt_storage_key(kvt_store_ns_id(s), k, &sk);
	for (int i = 0; i < 200; i++) {
		if (!kvt__dram_contains(kvt__store_dram(s), &sk, false))
			return;
		struct kvt_key o;
		new_key(s, &o);
		test_put_seed(s, &o, 1000 + (uint64_t)i);
	}
	CHECKM(0, "the chunk is still in DRAM after 200 puts");
}

/* The fault tier fails a call after its inner tier ran it (a write lands, then -EIO): a
 * chunk that must never reach the tier is put while its circuit is open - after 5 failed
 * writes in a row - and its write skipped (for 500 ms, ample for what follows). */
static void open_circuit(struct kvt_store *s, struct kvt_tier *t, bool write_back)
{
	kvt__faulty_set(t, 100, 0, 0);
	for (int i = 0; i < 5; i++) {
		struct kvt_key o;
		new_key(s, &o);
		test_put_seed(s, &o, 500 + (uint64_t)i);
		test_wb_settle(s);
		if (write_back) /* its writes start at a flush */
			CHECK_EQ(kvt_flush_sync(s), -EIO);
	}
}

/* The tier healed: wait until a get reaches it again (a miss the tier answered, not one
 * its open circuit skipped: cause 0, not -EAGAIN), at most 40 s (its cool-down doubles up
 * to 30 s), so that what a flush says next is not the circuit's. */
static void close_circuit(struct kvt_store *s)
{
	test_ms_until_tier_answers(s, PAYLOAD, new_key, 40000, 50);
}

static uint64_t evicted_unsaved(struct kvt_store *s)
{
	struct kvt_stats st;
	CHECK_RC(kvt_stats(s, &st), 0);
	return st.evicted_unsaved;
}

int main(void)
{
	char *dir = test_tmpdir("wb_unsaved");
	struct kvt_store *s = open_store(dir, "write-through", false);
	struct kvt_tier *t = kvt__store_tier(s, 1);
	void *buf = malloc(PAYLOAD);
	struct kvt_result res;

	/* 1. */
	open_circuit(s, t, false);
	struct kvt_key a;
	new_key(s, &a);
	test_put_seed(s, &a, 7);
	test_wb_settle(s);
	CHECK_EQ(kvt_flush_sync(s), -EIO);
	CHECK_EQ(flush_box(s, &res), -EIO);
	CHECK_EQ(res.tier, 1);

	/* 2. */
	kvt__faulty_set(t, 0, 0, 0);
	int rc = flush_healed(s, &res);
	printf("store_wb_unsaved: flush after the tier healed: %d\n", rc);
	CHECKM(rc == 0, "flush after the tier healed: %d (want 0: the unsaved chunk written)", rc);
	evict(s, &a);
	CHECK_EQ(evicted_unsaved(s), 0);
	CHECK_RC(kvt_get_sync(s, &a, 0, 0, buf, PAYLOAD, &res), 0);
	CHECK_EQ(res.tier, 1);
	CHECK(test_check(buf, PAYLOAD, 7));

	/* 3. */
	open_circuit(s, t, false);
	struct kvt_key b;
	new_key(s, &b);
	test_put_seed(s, &b, 8);
	test_wb_settle(s);
	evict(s, &b);
	uint64_t lost = evicted_unsaved(s);
	printf("store_wb_unsaved: evicted unsaved %llu\n", (unsigned long long)lost);
	CHECK(lost >= 1);
	kvt__faulty_set(t, 0, 0, 0);
	test_wb_settle(s);
	close_circuit(s);
	rc = flush_box(s, &res);
	printf("store_wb_unsaved: flush after a loss: %d, tier %d\n", rc, res.tier);
	CHECKM(rc == -EIO && res.tier == 1, "flush after an unsaved chunk was evicted: %d, tier %d",
	       rc, res.tier);
	rc = flush_healed(s, &res);
	CHECKM(rc == 0, "the next flush: %d (the loss was reported once)", rc);
	CHECK_EQ(kvt_get_sync(s, &b, 0, 0, buf, PAYLOAD, &res), -ENOENT);
	kvt_store_close(s);
	test_rmdir(dir);
	free(dir);

	/* 4. */
	dir = test_tmpdir("wb_unsaved_back");
	s = open_store(dir, "write-back", false);
	t = kvt__store_tier(s, 1);
	open_circuit(s, t, true);
	struct kvt_key c;
	new_key(s, &c);
	test_put_seed(s, &c, 9);
	CHECK_EQ(kvt_flush_sync(s), -EIO); /* writes it: skipped, the circuit is open */
	test_wb_settle(s);
	kvt__faulty_set(t, 0, 0, 0);
	rc = flush_healed(s, &res);
	CHECKM(rc == 0, "write-back flush after the tier healed: %d", rc);
	evict(s, &c);
	CHECK_RC(kvt_get_sync(s, &c, 0, 0, buf, PAYLOAD, &res), 0);
	CHECK_EQ(res.tier, 1);
	CHECK(test_check(buf, PAYLOAD, 9));
	CHECK_EQ(evicted_unsaved(s), 0);
	kvt_store_close(s);
	test_rmdir(dir);
	free(dir);

	/* 5. */
	dir = test_tmpdir("wb_unsaved_late");
	s = open_store(dir, "write-through", true);
	t = kvt__store_tier(s, 1);
	kvt__faulty_set(t, 0, 0, 1000); /* past the 300 ms deadline */
	struct kvt_key d;
	new_key(s, &d);
	test_put_seed(s, &d, 10);
	test_wb_settle(s);	/* the job over at its deadline: unsaved */
	usleep(1500 * 1000); /* the late write has landed */
	kvt__faulty_set(t, 0, 0, 0);
	evict(s, &d);
	uint64_t late = evicted_unsaved(s);
	printf("store_wb_unsaved: a late write landed: evicted unsaved %llu\n",
	       (unsigned long long)late);
	CHECKM(late == 0, "a chunk whose late write landed counted as lost: %llu",
	       (unsigned long long)late);
	CHECK_RC(kvt_get_sync(s, &d, 0, 0, buf, PAYLOAD, &res), 0);
	CHECK(test_check(buf, PAYLOAD, 10));
	CHECK_EQ(flush_box(s, &res), 0);

	/* 6. (the same store: 300 ms deadlines) */
	kvt__faulty_set_write_delay(t, 2000); /* e's write misses its deadline */
	struct kvt_key e, f;
	new_key(s, &e);
	test_put_seed(s, &e, 11);
	struct test_box fb = {0};
	CHECK_RC(kvt_flush(s, test_box_cb, &fb), 0); /* its window: e's job */
	kvt__faulty_set_write_delay(t, 0);
	kvt__faulty_set(t, 100, 0, 0);
	uint64_t inj = kvt__faulty_injected(t);
	new_key(s, &f);
	test_put_seed(s, &f, 12); /* after the flush: its write fails at once */
	while (kvt__faulty_injected(t) == inj)
		usleep(1000);
	kvt__faulty_set(t, 0, 0, 0); /* the flush's own durability call succeeds */
	uint64_t t0 = test_now_ns();
	while (!fb.done && test_ms_since(t0) < 10000)
		kvt_poll(s, 50);
	printf("store_wb_unsaved: flush over a write past its deadline, a later put failed "
	       "first: %d, tier %d\n",
	       fb.res.status, fb.res.tier);
	CHECKM(fb.done && fb.res.status == -EIO && fb.res.tier == 1, "flush: %d, tier %d",
	       fb.res.status, fb.res.tier);
	usleep(2000 * 1000); /* e's late write lands */
	kvt_store_close(s);
	test_rmdir(dir);
	free(dir);

	/* 7. */
	dir = test_tmpdir("wb_unsaved_noflush");
	struct kvt_config *cfg = test_config("dram,redis", dir);
	test_set(cfg, "redis.url", "redis://127.0.0.1:1"); /* refused at once */
	test_set(cfg, "redis.timeout_ms", "300");
	CHECK_RC(kvt_store_open(cfg, &s), 0);
	kvt_config_destroy(cfg);
	for (int i = 0; i < 6; i++) { /* failed writes in a row: the circuit opens */
		struct kvt_key o;
		new_key(s, &o);
		test_put_seed(s, &o, 600 + (uint64_t)i);
		test_wb_settle(s);
	}
	struct kvt_key g;
	new_key(s, &g);
	test_put_seed(s, &g, 13);
	test_wb_settle(s);
	rc = kvt_flush_sync(s);
	printf("store_wb_unsaved: flush, the Redis tier's circuit open: %d\n", rc);
	CHECKM(rc == -EIO, "flush over chunks no tier took: %d", rc);
	kvt_store_close(s);
	test_rmdir(dir);
	free(dir);

	/* 8. */
	dir = test_tmpdir("wb_unsaved_rewritten");
	struct kvt_config *c8 = test_config("dram,faulty", dir);
	test_set(c8, "faulty.inner", "nvme");
	test_set(c8, "store.write_policy", "write-through");
	test_set_deadline(c8, "10000", "5000"); /* the slow write stays within its deadline */
	CHECK_RC(kvt_store_open(c8, &s), 0);
	kvt_config_destroy(c8);
	t = kvt__store_tier(s, 1);
	kvt__faulty_set_write_delay(t, 1500);
	struct kvt_key h, k8;
	new_key(s, &h);
	test_put_seed(s, &h, 14); /* its job stays out 1.5 s */
	kvt__faulty_set_write_delay(t, 0);
	kvt__faulty_set(t, 100, 0, 0);
	uint64_t inj8 = kvt__faulty_injected(t);
	new_key(s, &k8);
	test_put_seed(s, &k8, 15); /* fails at once: unsaved */
	while (kvt__faulty_injected(t) == inj8)
		usleep(1000);
	kvt__faulty_set(t, 0, 0, 0);
	/* its job completes (h's is still out, until 1.5 s): polled, a fixed 200 ms was one
	 * slow scheduling away from a flush that saw k8's job still failing */
	for (uint64_t tw = test_now_ns();;) {
		struct kvt_stats sw;
		CHECK_RC(kvt_stats(s, &sw), 0);
		if (sw.write_behind_pending <= 1 || test_ms_since(tw) > 1000)
			break;
		usleep(5000);
	}
	rc = flush_box(s, &res);
	printf("store_wb_unsaved: flush rewriting a chunk whose write failed before it, an "
	       "older write still out: %d, tier %d\n",
	       rc, res.tier);
	CHECKM(rc == 0, "flush that wrote the unsaved chunk again: %d, tier %d (want 0)", rc,
	       res.tier);
	evict(s, &k8);
	CHECK_EQ(evicted_unsaved(s), 0);
	CHECK_RC(kvt_get_sync(s, &k8, 0, 0, buf, PAYLOAD, &res), 0);
	CHECK_EQ(res.tier, 1);
	CHECK(test_check(buf, PAYLOAD, 15));
	evict(s, &h);
	CHECK_RC(kvt_get_sync(s, &h, 0, 0, buf, PAYLOAD, &res), 0);
	CHECK(test_check(buf, PAYLOAD, 14));
	kvt_store_close(s);
	test_rmdir(dir);
	free(dir);
	free(buf);
	printf("store_wb_unsaved: ok\n");
	return 0;
}
