/*
 * store_prefetch_chain.c - a chain a prefetch promotes from NVMe into DRAM is linked there as
 * a put's is (each chunk counted as its parent's child), so DRAM evicts it from its end, not
 * from its first chunk. Why it matters: a lookup stops at the first chunk missing, so a chain
 * whose first chunk went first leaves the rest of it in DRAM unusable until evicted in turn;
 * and the replay, whose figures the store should follow, links every block to its parent
 * (docs/COST_MODEL.md, "Where the simulated replay and the store differ", 3). Until
 * 2026-12-06 a promotion had no parent: with dram.policy=lru, the first chunk of a promoted
 * chain was the first of it evicted.
 *
 * DRAM of 7 slots, write-through to NVMe, LRU: chain A (3 chunks) put, then 7 others put to
 * push A out of DRAM (it stays on NVMe); a prefetch of A brings it back; 5 more puts evict 5
 * chunks: the 4 older others, then one of A's - its last, A[2], while A[0] and A[1] stay.
 * The same with A brought back by a rows load (kvt_rows_load, what the vLLM connector
 * restores with), whose gets name no parent to the public API but whose keys are a chain:
 * until 2026-12-06 its promotions had no parent and A[0] went first.
 */
#include "dram.h"
#include "engine.h"
#include "store_key.h"
#include "testlib.h"

static void put_all(struct kvt_store *s, const struct kvt_key *k, int n, const void *buf,
		    size_t len, uint32_t tokens)
{
	for (int i = 0; i < n; i++)
		CHECK_RC(kvt_put_sync(s, &k[i], i ? &k[i - 1] : NULL, tokens, buf, len), 0);
	test_wb_settle(s); /* written to NVMe: clean, evictable */
}

static bool resident(struct kvt_store *s, const struct kvt_key *k)
{
	struct kvt_key sk;
	return kvt__dram_contains(kvt__store_dram(s), kvt__storage_key(kvt_store_ns_id(s), k, &sk),
				  false);
}

/* A's 3 chunks brought back into DRAM by how: 0 a prefetch, 1 a rows load. */
static void run(int how)
{
	char *dir = test_tmpdir("store_prefetch_chain");
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "store.write_policy", "write-through");
	test_set(c, "dram.policy", "lru");
	test_set(c, "dram.bytes", "256KiB");
	struct kvt_store *s = test_open(c);
	CHECK_EQ(kvt__dram_slots(kvt__store_dram(s)), 7);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	uint32_t tokens = g->chunk_tokens;
	size_t len = kvt_payload_bytes(g, tokens);
	void *buf = malloc(len);
	CHECK(buf);
	test_fill(buf, len, 7);

	struct kvt_key a[3], b[7], d[5];
	test_chain_keys(s, a, 3, 0xa0);
	for (int i = 0; i < 7; i++)
		test_chain_keys(s, &b[i], 1, 0xb0 + (uint32_t)i); /* 7 chains of one */
	for (int i = 0; i < 5; i++)
		test_chain_keys(s, &d[i], 1, 0xd0 + (uint32_t)i);

	put_all(s, a, 3, buf, len, tokens);
	for (int i = 0; i < 7; i++)
		put_all(s, &b[i], 1, buf, len, tokens);
	for (int i = 0; i < 3; i++)
		CHECKM(!resident(s, &a[i]), "A[%d] pushed out of DRAM", i);
	int8_t tiers[3];
	CHECK_EQ(kvt_lookup_sync(s, a, 3, tiers), 3); /* on NVMe */

	if (how == 0) {
		CHECK_EQ(kvt_prefetch_sync(s, a, 3, 0), 3);
	} else {
		test_rows_load_exact(s, a, 3, 3, buf, len);
	}
	for (int i = 0; i < 3; i++)
		CHECKM(resident(s, &a[i]), "A[%d] promoted", i);

	for (int i = 0; i < 5; i++)
		put_all(s, &d[i], 1, buf, len, tokens);
	bool in[3] = {resident(s, &a[0]), resident(s, &a[1]), resident(s, &a[2])};
	int others = 0;
	for (int i = 0; i < 7; i++)
		others += resident(s, &b[i]);
	printf("  %s, then 5 puts into 7 slots: A[0] %s, A[1] %s, A[2] %s; %d of the 7 others\n",
	       how ? "rows load" : "prefetch", in[0] ? "resident" : "evicted", in[1] ? "resident" : "evicted",
	       in[2] ? "resident" : "evicted", others);
	CHECK_EQ(others, 0);
	CHECKM(in[0] && in[1] && !in[2], "the promoted chain is evicted from its end");
	/* and what stays is a usable prefix */
	CHECK_EQ(kvt_lookup_sync(s, a, 3, tiers), 3);
	CHECK_EQ(tiers[0], 0);
	CHECK_EQ(tiers[1], 0);

	kvt_store_close(s);
	free(buf);
	test_rmdir(dir);
	free(dir);
}

int main(void)
{
	run(0);
	run(1);
	printf("store_prefetch_chain: ok\n");
	return 0;
}
