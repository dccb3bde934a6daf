/*
 * sketch_test.c - the frequency sketch's error bounds (never under the true count before a
 * halving, over-estimates within the count-min bound), halving, the doorkeeper, and each
 * admission verdict.
 * kvt-test-labels: onethread (no second thread, so nothing for TSan to check: scripts/test.sh
 * leaves it out of the TSan pass)
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cost.h"
#include "sketch.h"

static uint64_t key(uint32_t i)
{
	return (uint64_t)i * 0x9e3779b97f4a7c15ull + 12345;
}

static void test_accuracy(void **state)
{
	(void)state;
	struct kvt_sketch *s;
	assert_int_equal(kvt__sketch_create(1024, 255, false, &s), 0);
	assert_int_equal(kvt__sketch_width(s), 1024);
	enum { KEYS = 3000, ADDS = 9000 };
	static uint32_t truth[KEYS];
	memset(truth, 0, sizeof(truth));
	uint64_t x = 7;
	for (int i = 0; i < ADDS; i++) {
		/* skewed: a few hot keys and a long tail */
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t k = (uint32_t)((x >> 33) % KEYS);
		if (k % 7 == 0)
			k = k % 10;
		truth[k]++;
		kvt__sketch_add(s, key(k));
	}
	assert_int_equal(kvt__sketch_halvings(s), 0); /* period is 10 x 1024 */
	uint32_t worst = 0;
	uint64_t excess = 0;
	for (uint32_t k = 0; k < KEYS; k++) {
		uint32_t e = kvt__sketch_estimate(s, key(k));
		uint32_t t = truth[k] > 255 ? 255 : truth[k];
		assert_true(e >= t); /* count-min never under-estimates */
		excess += e - t;
		if (e - t > worst)
			worst = e - t;
	}
	/* count-min bound: error <= e/width * N = 2.72/1024 * 9000 ~ 24 with probability
	 * 1 - e^-4 per key; conservative update does much better in practice */
	assert_true(worst <= 24);
	/* and the mean excess stays under one row's expected error, N / width */
	print_message("worst %u mean excess %.2f\n", worst, (double)excess / KEYS);
	assert_true((double)excess / KEYS <= (double)ADDS / 1024);
	kvt__sketch_destroy(s);
}

static void test_halving_and_cap(void **state)
{
	(void)state;
	struct kvt_sketch *s;
	assert_int_equal(kvt__sketch_create(64, 15, false, &s), 0);
	for (int i = 0; i < 20; i++)
		kvt__sketch_add(s, 42);
	assert_int_equal(kvt__sketch_estimate(s, 42), 15); /* saturates */
	kvt__sketch_halve(s);
	assert_int_equal(kvt__sketch_estimate(s, 42), 7);
	/* automatic halving after 10 x width additions */
	uint64_t h0 = kvt__sketch_halvings(s);
	for (int i = 0; i < 640; i++)
		kvt__sketch_add(s, 1000 + (uint64_t)i);
	assert_int_equal(kvt__sketch_halvings(s), h0 + 1);
	assert_true(kvt__sketch_estimate(s, 42) <= 3);
	kvt__sketch_destroy(s);
	assert_int_equal(kvt__sketch_create(64, 0, false, &s), -EINVAL);
	assert_int_equal(kvt__sketch_create(64, 256, false, &s), -EINVAL);
}

static void test_doorkeeper(void **state)
{
	(void)state;
	struct kvt_sketch *s;
	assert_int_equal(kvt__sketch_create(4096, 15, true, &s), 0);
	assert_int_equal(kvt__sketch_estimate(s, 9), 0);
	assert_int_equal(kvt__sketch_add(s, 9), 1); /* first sighting: doorkeeper only */
	assert_int_equal(kvt__sketch_add(s, 9), 2);
	assert_int_equal(kvt__sketch_add(s, 9), 3);
	/* one-off keys do not reach the counters: a key seen once stays at 1 */
	for (uint64_t k = 100; k < 1100; k++)
		kvt__sketch_add(s, k);
	uint32_t ones = 0;
	for (uint64_t k = 100; k < 1100; k++)
		ones += kvt__sketch_estimate(s, k) == 1;
	assert_true(ones > 950);
	kvt__sketch_destroy(s);
}

/* KV traffic is mostly first sightings: a whole period of distinct keys must not fill the
 * doorkeeper (the old 8-bit-per-counter filter ended a period ~92 % full and called most
 * new keys "seen"). Keys first seen late in a period are still told apart from new ones. */
static void test_doorkeeper_not_saturated(void **state)
{
	(void)state;
	struct kvt_sketch *s;
	assert_int_equal(kvt__sketch_create(1024, 15, true, &s), 0);
	uint64_t period = 10 * kvt__sketch_width(s);
	for (uint64_t k = 0; k < period - 1; k++) /* just short of the halving */
		kvt__sketch_record(s, 1000000 + k);
	assert_int_equal(kvt__sketch_halvings(s), 0);
	uint32_t fresh_seen = 0, old_seen = 0;
	for (uint64_t k = 0; k < 1000; k++) {
		fresh_seen += kvt__sketch_estimate(s, 5000000 + k) >= 1;
		old_seen += kvt__sketch_estimate(s, 1000000 + period - 1 - 1 - k) >= 1;
	}
	print_message("after a period of distinct keys: %u of 1000 new keys called seen, "
		      "%u of 1000 recent ones\n", fresh_seen, old_seen);
	assert_true(fresh_seen < 50);	/* ~3 %: two generations of 16 bits per key */
	assert_int_equal(old_seen, 1000); /* no false negatives */
	kvt__sketch_destroy(s);
}

/* predict=chain, chunk by chunk as the store calls it (record, then decide): a shared
 * prefix is written once seen twice; new chains under it are not, once their measured
 * reuse is low; a chain that extends a reused prompt's end is, with the rest of its new
 * chunks; a partial chunk seen once never is. */
static void test_predict_chain(void **state)
{
	(void)state;
	struct kvt_admit_cfg cfg = {.min_freq = 1, .sketch_width = 4096, .doorkeeper = true,
				    .predict = KVT_PREDICT_CHAIN, .chunk_tokens = 512};
	struct kvt_admit *a;
	assert_int_equal(kvt__admit_create(&cfg, &a), 0);
	/* put(h, parent, full?) -> verdict */
#define PUT(h, par, n) (kvt__admit_record(a, (h)), kvt__admit_decide(a, (h), (par), 0, (n), 1))
	int yes = 0;
	/* 40 one-turn conversations under one system prompt (chunk 1): prompt, 4 context
	 * chunks, a partial end */
	for (uint64_t c = 0; c < 40; c++) {
		int v = PUT(1, 0, 512);
		assert_int_equal(v, c ? KVT_ADMIT_YES : KVT_ADMIT_UNPREDICTED);
		uint64_t prev = 1;
		for (uint64_t i = 0; i < 4; i++) {
			uint64_t h = 1000 * (c + 1) + i;
			yes += PUT(h, prev, 512) == KVT_ADMIT_YES;
			prev = h;
		}
		assert_int_equal(PUT(1000 * (c + 1) + 99, prev, 100), KVT_ADMIT_UNPREDICTED);
	}
	print_message("new chains: %d of 160 chunks written\n", yes);
	assert_int_equal(yes, 0); /* new chains never came back: none written */
	/* conversation 7 comes back: its chunks are reused, the turn's new chunks continue it */
	assert_int_equal(PUT(1, 0, 512), KVT_ADMIT_YES);
	uint64_t prev = 1;
	for (uint64_t i = 0; i < 4; i++, prev = 7000 + i - 1)
		assert_int_equal(PUT(7000 + i, prev, 512), KVT_ADMIT_YES);
	prev = 7003;
	for (uint64_t i = 0; i < 3; i++, prev = 7100 + i - 1)
		assert_int_equal(PUT(7100 + i, prev, 512), KVT_ADMIT_YES);
	assert_int_equal(PUT(7199, 7102, 300), KVT_ADMIT_UNPREDICTED); /* its partial end */
	/* a new conversation under the shared prompt still is not written */
	assert_int_equal(PUT(99000, 1, 512), KVT_ADMIT_UNPREDICTED);
#undef PUT
	assert_string_equal(kvt__admit_verdict_name(KVT_ADMIT_UNPREDICTED), "unpredicted");
	assert_int_equal(kvt__admit_predict_parse("chain"), KVT_PREDICT_CHAIN);
	assert_int_equal(kvt__admit_predict_parse("off"), KVT_PREDICT_OFF);
	assert_int_equal(kvt__admit_predict_parse("always"), -EINVAL);
	kvt__admit_destroy(a);
	cfg.predict = 9;
	assert_int_equal(kvt__admit_create(&cfg, &a), -EINVAL);
}

/* n accesses at once count as n single ones (hd records a residency's hits at eviction) */
static void test_record_n(void **state)
{
	(void)state;
	struct kvt_sketch *a, *b;
	assert_int_equal(kvt__sketch_create(4096, 15, true, &a), 0);
	assert_int_equal(kvt__sketch_create(4096, 15, true, &b), 0);
	for (uint64_t k = 1; k <= 200; k++) {
		uint32_t n = (uint32_t)(k % 7);
		kvt__sketch_record_n(a, k, n);
		for (uint32_t i = 0; i < n; i++)
			kvt__sketch_record(b, k);
	}
	for (uint64_t k = 1; k <= 200; k++) {
		assert_int_equal(kvt__sketch_estimate(a, k), kvt__sketch_estimate(b, k));
		assert_true(kvt__sketch_estimate(a, k) >= k % 7);
	}
	kvt__sketch_record_n(a, 5000, 0); /* nothing */
	assert_int_equal(kvt__sketch_estimate(a, 5000), 0);
	kvt__sketch_record_n(a, 5000, 100); /* saturates */
	assert_int_equal(kvt__sketch_estimate(a, 5000), 15);
	kvt__sketch_destroy(a);
	kvt__sketch_destroy(b);
}

static uint64_t budget_left;
static bool budget(void *arg, uint64_t bytes)
{
	(void)arg;
	if (bytes > budget_left)
		return false;
	budget_left -= bytes;
	return true;
}

static void test_admission(void **state)
{
	(void)state;
	struct kvt_cost_params p;
	assert_int_equal(
	    kvt__cost_params_preset("llama3.1-8b", "h100-sxm", 0.5, 1, "dram,nvme,s3", &p), 0);
	struct kvt_cost *c;
	assert_int_equal(kvt__cost_create_params(&p, &c), 0);
	struct kvt_admit_cfg cfg = {
	    .min_freq = 2,
	    .min_prefix_tokens = 1024,
	    .sketch_width = 4096,
	    .doorkeeper = true,
	    .cost = c,
	    .cost_tier = 1,
	    .budget = budget,
	};
	struct kvt_admit *a;
	assert_int_equal(kvt__admit_create(&cfg, &a), 0);
	budget_left = 3u << 20;
	uint64_t bytes = 512 * kvt_cost_kv_bytes_per_token(c); /* 64 MiB */
	/* too short a prefix */
	kvt__admit_record(a, 1);
	kvt__admit_record(a, 1);
	assert_int_equal(kvt__admit_decide(a, 1, 0, 0, 512, bytes), KVT_ADMIT_SHORT);
	/* seen once: cold */
	kvt__admit_record(a, 2);
	assert_int_equal(kvt__admit_decide(a, 2, 0, 1024, 512, bytes), KVT_ADMIT_COLD);
	/* seen twice, restore from NVMe beats recompute, but the budget is 3 MiB */
	kvt__admit_record(a, 2);
	assert_int_equal(kvt__admit_decide(a, 2, 0, 1024, 512, bytes), KVT_ADMIT_BUDGET);
	assert_int_equal(budget_left, 3u << 20); /* refused writes are not charged */
	budget_left = bytes;
	assert_int_equal(kvt__admit_decide(a, 2, 0, 1024, 512, bytes), KVT_ADMIT_YES);
	assert_int_equal(budget_left, 0);
	kvt__admit_destroy(a);

	/* S3 (1 GB/s): a 512-token chunk of an 8B model restores slower than it recomputes
	 * early in the prompt, faster deep into a long one (the attention term) */
	cfg.cost_tier = 2;
	cfg.min_freq = 1;
	cfg.min_prefix_tokens = 0;
	cfg.budget = NULL;
	assert_int_equal(kvt__admit_create(&cfg, &a), 0);
	assert_int_equal(kvt__admit_decide(a, 3, 0, 0, 512, bytes), KVT_ADMIT_RECOMPUTE);
	assert_int_equal(kvt__admit_decide(a, 3, 0, 1u << 20, 512, bytes), KVT_ADMIT_YES);
	assert_string_equal(kvt__admit_verdict_name(KVT_ADMIT_RECOMPUTE), "recompute-cheaper");
	kvt__admit_destroy(a);
	cfg.cost_tier = 9;
	assert_int_equal(kvt__admit_create(&cfg, &a), -EINVAL);
	kvt_cost_destroy(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_accuracy),
	    cmocka_unit_test(test_halving_and_cap),
	    cmocka_unit_test(test_doorkeeper),
	    cmocka_unit_test(test_doorkeeper_not_saturated),
	    cmocka_unit_test(test_predict_chain),
	    cmocka_unit_test(test_record_n),
	    cmocka_unit_test(test_admission),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
