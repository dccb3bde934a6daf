/*
 * store_flush_repaired.c - a flush does not fail for a write-behind of its window whose
 * failure a newer job of the same slot has repaired: the tier holds the chunk (keys are
 * content-addressed, the newer job wrote the same bytes) before the flush answers. Until
 * 2026-12-06 (a review) every failure of a job out when the flush was called failed it:
 * -EIO, naming a tier that held everything the flush vouched for.
 *
 * With DRAM and a fault-injecting tier around a real NVMe tier, its gate (kvt__faulty_gate)
 * holding writes until the test lets them go, step by step:
 *  1. put K0 and K1; both writes held. Flush F is called: its window holds both jobs.
 *  2. K1's write is let go failed (-EIO): its job completes, K1's slot unsaved.
 *  3. flush G is called: it writes K1's slot again (a newer job of the same slot), which
 *     the tier takes; K1's slot is clean.
 *  4. K0's write is let go, written: F answers 0 (before: -EIO, tier 1), G 0; once K1 has
 *     left DRAM, a get reads its exact bytes from the tier, and no loss was counted.
 */
#include "engine.h"
#include "testlib.h"
#include "tier.h"
#include "tier_faulty.h"
#include "lib/faulty_gate.h"

static void wait_pending(struct kvt_store *s, uint64_t n)
{
	uint64_t t0 = test_now_ns();
	struct kvt_stats st;
	for (;;) {
		CHECK_RC(kvt_stats(s, &st), 0);
		if (st.write_behind_pending == n)
			return;
		CHECKM(test_ms_since(t0) < 10000, "%llu write-behinds out, want %llu",
		       (unsigned long long)st.write_behind_pending, (unsigned long long)n);
		usleep(1000);
	}
}

int main(void)
{
	char *dir = test_tmpdir("flush_repaired");
	struct kvt_store *s = gate_store_open(dir);
	struct kvt_tier *t = kvt__store_tier(s, 1);
	struct kvt_dram *d = kvt__store_dram(s);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t payload = kvt_payload_bytes(g, g->chunk_tokens);

	/* 1. */
	struct kvt_key k0, sk0, k1, sk1;
	gate_new_key(s, &k0, &sk0);
	gate_new_key(s, &k1, &sk1);
	kvt__faulty_gate(t, true);
	test_put_seed(s, &k0, 7);
	test_put_seed(s, &k1, 8);
	gate_wait_held(t, 2);
	struct test_box f = {0}, gb = {0};
	CHECK_RC(kvt_flush(s, test_box_cb, &f), 0);

	/* 2. */
	kvt__faulty_gate(t, false); /* K0's stays held */
	CHECK_RC(kvt__faulty_gate_release(t, &sk1, -EIO), 0);
	wait_pending(s, 1);
	struct kvt_slot_ref r;
	CHECKM(kvt__dram_get_dirty(d, &sk1, &r) == 0, "K1's slot is not dirty after its write failed");
	kvt__dram_unpin(d, r.id);

	/* 3. */
	CHECK_RC(kvt_flush(s, test_box_cb, &gb), 0);
	wait_pending(s, 1); /* G's rewrite of K1 complete, K0's still held */
	CHECKM(kvt__dram_get_dirty(d, &sk1, &r) == -ENOENT,
	       "K1's slot still dirty after G wrote it again");
	kvt_poll(s, 0);
	CHECKM(!f.done && !gb.done, "a flush answered with a write of its window held");

	/* 4. */
	CHECK_RC(kvt__faulty_gate_release(t, &sk0, 0), 0);
	gate_wait_flush(s, &f);
	gate_wait_flush(s, &gb);
	printf("store_flush_repaired: flush F %d (tier %d), flush G %d (tier %d)\n", f.res.status,
	       f.res.tier, gb.res.status, gb.res.tier);
	CHECKM(gb.res.status == 0, "flush G: %d, tier %d", gb.res.status, gb.res.tier);
	CHECKM(f.res.status == 0,
	       "flush F: %d, tier %d (want 0: K1's failed write was written again before it "
	       "answered)",
	       f.res.status, f.res.tier);
	for (int i = 0; i < 200 && kvt__dram_contains(d, &sk1, false); i++) {
		struct kvt_key o, so;
		gate_new_key(s, &o, &so);
		test_put_seed(s, &o, 1000 + (uint64_t)i);
	}
	test_wb_settle(s);
	CHECKM(!kvt__dram_contains(d, &sk1, false), "K1 still in DRAM after 200 puts");
	void *buf = malloc(payload);
	struct kvt_result res;
	CHECK_RC(kvt_get_sync(s, &k1, 0, 0, buf, payload, &res), 0);
	CHECK_EQ(res.tier, 1);
	CHECK(test_check(buf, payload, 8));
	struct kvt_stats st;
	CHECK_RC(kvt_stats(s, &st), 0);
	CHECK_EQ(st.evicted_unsaved, 0);
	free(buf);

	kvt_store_close(s);
	test_rmdir(dir);
	free(dir);
	printf("store_flush_repaired: ok\n");
	return 0;
}
