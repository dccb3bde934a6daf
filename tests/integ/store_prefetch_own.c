/*
 * store_prefetch_own.c - a prefetch's status is the number of the prefix's chunks resident in
 * DRAM when it answers, and its own fills do not evict the chunks of the prefix it found
 * there. Until 2026-12-06 it counted the chunks found resident without holding them, and the
 * fills of the chain's tail evicted them (a review's reproducer): a pool of 7 slots holding
 * the first 5 of a 12-chunk chain, a prefetch of the chain answered 12, and DRAM then held
 * its last 7 - the head, which a restore reads first, gone to NVMe.
 *
 * DRAM of 7 slots, write-through to NVMe: a 12-chunk chain put and flushed, the store
 * reopened (DRAM empty), gets of its first 5 (promoted), then a prefetch of all 12:
 *  - its status equals the chunks of the chain resident afterwards, and at most the slots;
 *  - the first 5 are still resident (what a restore reads first stays);
 *  - a lookup then finds the whole chain, its head from DRAM.
 * The same after a prefetch into an empty pool: the head of the chain is what is staged.
 */
#include "dram.h"
#include "engine.h"
#include "store_key.h"
#include "testlib.h"

enum { N = 12 };

static bool resident(struct kvt_store *s, const struct kvt_key *k)
{
	struct kvt_key sk;
	return kvt__dram_contains(kvt__store_dram(s), kvt__storage_key(kvt_store_ns_id(s), k, &sk),
				  false);
}

static int count_resident(struct kvt_store *s, const struct kvt_key *a, char *map)
{
	int n = 0;
	for (int i = 0; i < N; i++) {
		bool r = resident(s, &a[i]);
		map[i] = r ? 'D' : '.';
		n += r;
	}
	map[N] = 0;
	return n;
}

int main(void)
{
	char *dir = test_tmpdir("prefetch_own");
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "store.write_policy", "write-through");
	test_set(c, "dram.bytes", "256KiB");
	struct kvt_store *s;
	CHECK_RC(kvt_store_open(c, &s), 0);
	int slots = (int)kvt__dram_slots(kvt__store_dram(s));
	CHECKM(slots >= 6 && slots < N, "the pool holds part of the chain: %d slots", slots);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	uint32_t tokens = g->chunk_tokens;
	size_t len = kvt_payload_bytes(g, tokens);
	void *buf = malloc(len);
	test_fill(buf, len, 7);
	struct kvt_key a[N];
	test_chain_keys(s, a, N, 0xa0);
	for (int i = 0; i < N; i++) {
		int rc;
		while ((rc = kvt_put_sync(s, &a[i], i ? &a[i - 1] : NULL, tokens, buf, len)) ==
		       -EAGAIN)
			usleep(5000);
		CHECK_RC(rc, 0);
		test_wb_settle(s);
	}
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_store_close(s);

	/* 1. the head resident, then a prefetch of the whole chain */
	CHECK_RC(kvt_store_open(c, &s), 0);
	struct kvt_result r;
	for (int i = 0; i < 5; i++)
		CHECK_RC(kvt_get_sync(s, &a[i], 0, 0, buf, len, &r), 0);
	test_wb_settle(s);
	char map[N + 1];
	CHECK_EQ(count_resident(s, a, map), 5);
	int pf = kvt_prefetch_sync(s, a, N, 0);
	int now = count_resident(s, a, map);
	printf("store_prefetch_own: %d slots, the head resident: prefetch %d, resident %d (%s)\n",
	       slots, pf, now, map);
	CHECKM(pf == now && pf <= slots, "prefetch said %d, %d resident of %d slots", pf, now,
	       slots);
	for (int i = 0; i < 5; i++)
		CHECKM(map[i] == 'D', "chunk %d, resident before the prefetch, was evicted by it (%s)",
		       i, map);
	int8_t tiers[N];
	CHECK_EQ(kvt_lookup_sync(s, a, N, tiers), N);
	CHECK_EQ(tiers[0], 0);
	kvt_store_close(s);

	/* 2. an empty pool: the head is staged */
	CHECK_RC(kvt_store_open(c, &s), 0);
	pf = kvt_prefetch_sync(s, a, N, 0);
	now = count_resident(s, a, map);
	printf("store_prefetch_own: an empty pool: prefetch %d, resident %d (%s)\n", pf, now, map);
	CHECKM(pf == now && pf <= slots && pf > 0, "prefetch said %d, %d resident", pf, now);
	CHECKM(map[0] == 'D', "the chain's first chunk is not staged (%s)", map);
	kvt_store_close(s);

	kvt_config_destroy(c);
	free(buf);
	test_rmdir(dir);
	free(dir);
	printf("store_prefetch_own: ok\n");
	return 0;
}
