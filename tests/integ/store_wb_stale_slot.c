/*
 * store_wb_stale_slot.c - a flush's rewrite of a key's old slot, registered after the job of
 * a newer put of the key, leaves the new slot's own marks to its own job: the new slot is
 * clean once nvme holds it. Until 2026-12-06 (found by review) the old slot's job took the
 * key's last_put, wb_complete then ignored the new slot's job (`newer`), and the new slot
 * stayed dirty - unevictable under write-through until some later flush - although nvme
 * held the chunk.
 *
 * The interleaving, forced step by step (as store_put_remove_race's replay does):
 *   flush: kvt__dram_dirty_victims pins old slot X (dirty, unsaved after a failed write),
 *          then stops before registering its job;
 *   app:   kvt_remove(K) (X unlinked, still pinned), kvt_put(K): new slot Y, its job J2
 *          out on a slow nvme write;
 *   flush: registers X's job (K is in DRAM: Y);
 *   J2 completes: Y must be clean.
 */
#include "dram.h"
#include "engine.h"
#include "engine_internal.h"
#include "testlib.h"
#include "tier.h"
#include "tier_faulty.h"

int main(void)
{
	char *dir = test_tmpdir("store_wb_stale_slot");
	struct kvt_config *c = test_config("dram,faulty", dir);
	test_set(c, "faulty.inner", "nvme");
	test_set(c, "store.write_policy", "write-through");
	struct kvt_store *s = test_open(c);
	struct kvt_tier *t = kvt__store_tier(s, 1);
	struct kvt_dram *d = kvt__store_dram(s);
	uint32_t tok = 4242;
	struct kvt_key k, sk;
	kvt_key_next(kvt_store_ns_id(s), NULL, &tok, 1, &k);
	kvt_storage_key(kvt_store_ns_id(s), &k, &sk);

	/* 1. put K whose write fails: old slot X dirty (unsaved) */
	kvt__faulty_set(t, 100, 0, 0);
	test_put_seed(s, &k, 7);
	test_wb_settle(s);
	kvt__faulty_set(t, 0, 0, 0);
	struct kvt_slot_ref r;
	CHECK_RC(kvt__dram_get_dirty(d, &sk, &r), 0);
	kvt__dram_unpin(d, r.id);
	int32_t old_id = r.id;

	/* 2. the flush's first half: X picked and pinned */
	uint32_t pass = kvt__dram_flush_pass(d);
	struct kvt_slot_ref refs[16];
	uint32_t n = kvt__dram_dirty_victims(d, refs, 16, pass);
	CHECK_EQ(n, 1);
	CHECK_EQ(refs[0].id, old_id);

	/* 3. remove K, put K again with a slow (in-time) nvme write */
	CHECK_RC(kvt_remove_sync(s, &k) >= 0, 1);
	kvt__faulty_set_write_delay(t, 300);
	test_put_seed(s, &k, 7);
	CHECK_RC(kvt__dram_get_dirty(d, &sk, &r), 0);
	kvt__dram_unpin(d, r.id);
	int32_t new_id = r.id;
	fprintf(stderr, "old slot %d, new slot %d\n", old_id, new_id);

	/* 4. the flush's second half: X's job registered (K is in DRAM: Y) */
	struct kvt_key key;
	kvt__dram_key(d, refs[0].id, &key);
	kvt__e_wb_submit(s, &key, &refs[0], s->n_links, NULL, NULL, false);
	test_wb_settle(s);
	kvt__faulty_set_write_delay(t, 0);
	usleep(200000);

	int8_t tiers[1];
	/* 5. is the new slot clean now? */
	int dirty = kvt__dram_get_dirty(d, &sk, &r) == 0;
	if (dirty)
		kvt__dram_unpin(d, r.id);
	fprintf(stderr, "after both jobs completed: new slot %s\n", dirty ? "DIRTY" : "clean");
	/* it is not evicted by a stream of other puts */
	for (int i = 0; i < 200; i++) {
		uint32_t o = 10000 + (uint32_t)i;
		struct kvt_key ok;
		kvt_key_next(kvt_store_ns_id(s), NULL, &o, 1, &ok);
		test_put_seed(s, &ok, 1000 + (uint64_t)i);
	}
	test_wb_settle(s);
	bool still = kvt__dram_contains(d, &sk, false);
	int still_dirty = kvt__dram_get_dirty(d, &sk, &r) == 0;
	if (still_dirty)
		kvt__dram_unpin(d, r.id);
	struct kvt_stats st;
	kvt_stats(s, &st);
	fprintf(stderr, "after 200 other puts (DRAM evictions %llu): K in DRAM %d, dirty %d\n",
		(unsigned long long)st.tier[0].evictions, still, still_dirty);
	CHECK_RC(kvt_lookup_sync(s, &k, 1, tiers), 1);
	fprintf(stderr, "lookup: K in chain position %d\n", tiers[0]);
	int rf = kvt_flush_sync(s);
	int after_flush = kvt__dram_get_dirty(d, &sk, &r) == 0;
	if (after_flush)
		kvt__dram_unpin(d, r.id);
	fprintf(stderr, "kvt_flush: %d; new slot afterwards %s\n", rf, after_flush ? "DIRTY" : "clean");
	kvt_store_close(s);
	test_rmdir(dir);
	free(dir);
	CHECKM(!dirty, "the new slot stayed dirty although its own job wrote nvme");
	printf("store_wb_stale_slot: ok\n");
	return 0;
}
