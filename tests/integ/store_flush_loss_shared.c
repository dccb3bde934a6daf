/*
 * store_flush_loss_shared.c - two flushes at once on one in-process store each report a
 * chunk lost before they were called. The store keeps one count of the unsaved evictions
 * flushes have reported; until 2026-12-06 (a review) the first flush to read it took the
 * loss at once, so a second flush called before the first had answered said 0 over the
 * chunk gone (and could answer first). Now a loss counts as reported when a flush that
 * reports it answers.
 *
 * With DRAM and a fault-injecting tier around a real NVMe tier, its gate (kvt__faulty_gate)
 * holding writes until the test lets them go, step by step:
 *  1. put L; its write is let go failed (-EIO): L is unsaved, then evicted - lost.
 *  2. put K; its write is held: flushes A and B, called one after the other, both wait
 *     for it (neither can answer while it is held).
 *  3. K's write is let go, written: A and B both fail -EIO naming the tier (before: A -EIO,
 *     B 0).
 *  4. a flush called after both answered: 0 (the loss was reported).
 */
#include "engine.h"
#include "testlib.h"
#include "tier.h"
#include "tier_faulty.h"
#include "lib/faulty_gate.h"

int main(void)
{
	char *dir = test_tmpdir("flush_loss_shared");
	struct kvt_store *s = gate_store_open(dir);
	struct kvt_tier *t = kvt__store_tier(s, 1);
	struct kvt_dram *d = kvt__store_dram(s);

	/* 1. */
	struct kvt_key l, sl;
	gate_new_key(s, &l, &sl);
	kvt__faulty_gate(t, true);
	test_put_seed(s, &l, 7);
	gate_wait_held(t, 1);
	kvt__faulty_gate(t, false);
	CHECK_RC(kvt__faulty_gate_release(t, &sl, -EIO), 0);
	test_wb_settle(s);
	for (int i = 0; i < 200 && kvt__dram_contains(d, &sl, false); i++) {
		struct kvt_key o, so;
		gate_new_key(s, &o, &so);
		test_put_seed(s, &o, 1000 + (uint64_t)i);
	}
	test_wb_settle(s);
	CHECKM(!kvt__dram_contains(d, &sl, false), "L still in DRAM after 200 puts");
	struct kvt_stats st;
	CHECK_RC(kvt_stats(s, &st), 0);
	printf("store_flush_loss_shared: evicted unsaved %llu\n",
	       (unsigned long long)st.evicted_unsaved);
	CHECK_EQ(st.evicted_unsaved, 1);

	/* 2. */
	struct kvt_key k, sk;
	gate_new_key(s, &k, &sk);
	kvt__faulty_gate(t, true);
	test_put_seed(s, &k, 8);
	gate_wait_held(t, 1);
	struct test_box a = {0}, b = {0};
	CHECK_RC(kvt_flush(s, test_box_cb, &a), 0);
	CHECK_RC(kvt_flush(s, test_box_cb, &b), 0);
	kvt_poll(s, 0);
	CHECKM(!a.done && !b.done, "a flush answered with a write of its window held");

	/* 3. */
	kvt__faulty_gate(t, false);
	CHECK_RC(kvt__faulty_gate_release(t, &sk, 0), 0);
	gate_wait_flush(s, &a);
	gate_wait_flush(s, &b);
	printf("store_flush_loss_shared: flush A %d (tier %d), flush B %d (tier %d)\n",
	       a.res.status, a.res.tier, b.res.status, b.res.tier);
	CHECKM(a.res.status == -EIO && a.res.tier == 1, "flush A: %d, tier %d (want -EIO, 1)",
	       a.res.status, a.res.tier);
	CHECKM(b.res.status == -EIO && b.res.tier == 1,
	       "flush B, called before A answered: %d, tier %d (want -EIO, 1: L is lost)",
	       b.res.status, b.res.tier);

	/* 4. */
	int rc = kvt_flush_sync(s);
	printf("store_flush_loss_shared: a flush after both answered: %d\n", rc);
	CHECKM(rc == 0, "a flush after the loss was reported: %d (want 0)", rc);

	kvt_store_close(s);
	test_rmdir(dir);
	free(dir);
	printf("store_flush_loss_shared: ok\n");
	return 0;
}
