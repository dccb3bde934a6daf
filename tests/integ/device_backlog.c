/*
 * device_backlog.c - the GPU save path (kvt_device_store) obeys the same write-behind bound
 * as kvt_put: over a deeper tier that writes at a fixed rate (the fault-injecting tier over
 * a real NVMe directory, 20 objects a second), a flood of device saves is told to retry
 * (-EAGAIN, nothing copied) instead of queueing writes that can only miss their deadline.
 * Before: every save was taken, the write-behind queue grew without bound, writes missed
 * their deadline and those objects reached no deeper tier. Every object saved lands on the
 * NVMe tier intact (checked after a reopen without DRAM).
 */
#include "testlib.h"

#include "../unit/device_common.h"
#include "engine.h"
#include "tier.h"
#include "tier_faulty.h"

enum { WARM = 10, M = 40, BLOCK = 16 };

static struct kvt_store *open_store(const char *dir)
{
	struct kvt_config *c = test_config("dram,faulty", dir);
	test_set(c, "faulty.inner", "nvme");
	test_set(c, "model.chunk_tokens", "256"); /* 512 KiB: a bandwidth sample, not latency */
	test_set(c, "dram.bytes", "48MiB");	  /* room for every object */
	test_set(c, "store.tier_timeout_ms", "300");
	test_set(c, "store.deadline_floor_ms", "50");
	struct kvt_store *s;
	CHECK_RC(kvt_store_open(c, &s), 0);
	kvt_config_destroy(c);
	return s;
}

int main(void)
{
	char *dir = test_tmpdir("device_backlog");
	struct kvt_store *s = open_store(dir);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	const uint32_t n = g->chunk_tokens, nblk = n / BLOCK;
	size_t payload = kvt_payload_bytes(g, n);
	uint64_t obj = kvt_object_bytes(g, n);
	uint8_t *logical = malloc(payload);
	struct kvt_tier *t = kvt__store_tier(s, 1);
	kvt__faulty_set_write_rate(t, obj * 20);
	struct kvt_key k[WARM + M];
	test_chain_keys(s, k, WARM + M, 11);

	/* warm-up through kvt_put, one at a time: the engine learns the tier's rate */
	for (int i = 0; i < WARM; i++) {
		test_fill(logical, payload, 900 + (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &k[i], NULL, n, logical, payload), 0);
		CHECK_RC(kvt_flush_sync(s), 0);
	}
	struct kvt_stats st;
	kvt_stats(s, &st);
	uint64_t misses0 = st.tier[1].deadline_misses;

	/* the flood: one TP=1 rank saves a new chunk as soon as its previous copy is done */
	struct tr_rank r;
	CHECK_RC(tr_rank_open(&r, NULL, g, KVT_LAYOUT_FLASH_ATTN, BLOCK, nblk, 0, g->kv_heads, 0,
			      NULL),
		 0);
	uint32_t ids[64];
	CHECKM(nblk <= 64, "%u blocks", nblk);
	for (uint32_t b = 0; b < nblk; b++)
		ids[b] = nblk - 1 - b; /* not in order */
	int eagain = 0;
	uint64_t t0 = kvt__now_ns();
	for (int i = WARM; i < WARM + M; i++) {
		test_fill(logical, payload, 900 + (uint64_t)i);
		tr_rank_load_logical(&r, logical, n, ids);
		struct tr_done d = {0};
		int rc;
		while ((rc = kvt_device_store(r.dev, s, &k[i], NULL, n, ids, nblk, NULL, tr_on_done,
					      &d, NULL)) == -EAGAIN) {
			eagain++;
			kvt_poll(s, 5);
		}
		CHECK_RC(rc, 0);
		for (int w = 0; w < 2000 && !d.calls; w++)
			kvt_poll(s, 5);
		CHECKM(d.calls == 1, "save %d never completed", i);
		CHECK_RC(d.res.status, 0); /* published: no head missing */
	}
	CHECK_RC(kvt_flush_sync(s), 0);
	double ms = test_ms_since(t0);
	kvt_stats(s, &st);
	fprintf(stderr,
		"  %d device saves over a 20-objects/s tier: %.0f ms, %d told to retry, %llu "
		"deadline misses\n",
		M, ms, eagain, (unsigned long long)(st.tier[1].deadline_misses - misses0));
	CHECKM(eagain > 0, "the device saves were never held back");
	CHECKM(st.tier[1].deadline_misses == misses0, "writes queued past their deadline: %llu",
	       (unsigned long long)(st.tier[1].deadline_misses - misses0));
	tr_rank_close(&r);
	kvt_store_close(s);

	/* every chunk saved reached the NVMe tier, intact */
	struct kvt_config *c = test_config("nvme", dir);
	test_set(c, "model.chunk_tokens", "256");
	CHECK_RC(kvt_store_open(c, &s), 0);
	kvt_config_destroy(c);
	uint8_t *got = malloc(payload);
	for (int i = 0; i < WARM + M; i++) {
		CHECK_RC(kvt_get_sync(s, &k[i], 0, 0, got, payload, NULL), 0);
		test_fill(logical, payload, 900 + (uint64_t)i);
		CHECKM(!memcmp(got, logical, payload), "chunk %d intact", i);
	}
	kvt_store_close(s);
	free(got);
	free(logical);
	test_rmdir(dir);
	free(dir);
	printf("device_backlog: ok\n");
	return 0;
}
