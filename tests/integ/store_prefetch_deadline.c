/*
 * store_prefetch_deadline.c - kvt_prefetch_sync returns by its deadline. With DRAM and a
 * fault-injecting tier around a real NVMe tier whose every completion takes 2 s: chunks
 * stored and flushed, the store reopened (DRAM empty), a prefetch of them with 200 ms left
 * returns -ETIME at ~200 ms (until 2026-12-05 the deadline only kept fills from starting,
 * and the call waited ~2 s for the tier's lookup); the lookup goes on, and as it ends past
 * the deadline no read starts. A prefetch without a deadline waits and returns the count;
 * one whose chunks are resident already returns it at once, deadline or not.
 */
#include "engine.h"
#include "testlib.h"
#include "tier.h"
#include "tier_faulty.h"

enum { N = 4 };

static struct kvt_store *open_store(const char *dir)
{
	struct kvt_config *c = test_config("dram,faulty", dir);
	test_set(c, "faulty.inner", "nvme");
	test_set(c, "store.deadline_floor_ms", "10000"); /* the 2 s tier is slow, not dead */
	struct kvt_store *s;
	CHECK_RC(kvt_store_open(c, &s), 0);
	kvt_config_destroy(c);
	return s;
}

int main(void)
{
	char *dir = test_tmpdir("prefetch_deadline");
	struct kvt_store *s = open_store(dir);
	struct kvt_geometry G = *kvt_store_geometry(s);
	size_t payload = kvt_payload_bytes(&G, G.chunk_tokens);
	void *buf = malloc(payload);
	struct kvt_key k[N];
	test_chain_keys(s, k, N, 77);
	test_put_chain(s, k, N, buf, payload, G.chunk_tokens, 100);
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_store_close(s);

	s = open_store(dir);
	kvt__faulty_set(kvt__store_tier(s, 1), 0, 0, 2000);
	uint64_t t0 = test_now_ns();
	int rc = kvt_prefetch_sync(s, k, N, t0 + 200000000ull);
	double ms = test_ms_since(t0);
	printf("store_prefetch_deadline: prefetch with 200 ms left: %d in %.0f ms\n", rc, ms);
	CHECKM(rc == -ETIME, "prefetch past its deadline: %d (want -ETIME)", rc);
	CHECKM(ms >= 190 && ms < 1000, "prefetch with 200 ms left returned at %.0f ms", ms);

	/* the lookup it started ends at ~2 s, past the deadline: no read is started then (the
	 * part not started by the deadline is dropped), so nothing becomes resident */
	usleep(3000 * 1000);
	for (int i = 0; i < N; i++) {
		struct kvt_key sk;
		kvt_storage_key(kvt_store_ns_id(s), &k[i], &sk);
		CHECK(!kvt__dram_contains(kvt__store_dram(s), &sk, false));
	}

	/* without a deadline: waits for the tier, returns the count */
	kvt_store_close(s);
	s = open_store(dir);
	kvt__faulty_set(kvt__store_tier(s, 1), 0, 0, 300);
	t0 = test_now_ns();
	rc = kvt_prefetch_sync(s, k, N, 0);
	printf("store_prefetch_deadline: prefetch without a deadline: %d in %.0f ms\n", rc,
	       test_ms_since(t0));
	CHECK_EQ(rc, N);
	/* all resident: a deadline is met at once */
	t0 = test_now_ns();
	CHECK_EQ(kvt_prefetch_sync(s, k, N, t0 + 200000000ull), N);
	CHECK(test_ms_since(t0) < 150);
	struct kvt_result res;
	CHECK_RC(kvt_get_sync(s, &k[N - 1], 0, 0, buf, payload, &res), 0);
	CHECK_EQ(res.tier, 0);
	CHECK(test_check(buf, payload, 100 + N - 1));
	kvt_store_close(s);
	free(buf);
	test_rmdir(dir);
	free(dir);
	printf("store_prefetch_deadline: ok\n");
	return 0;
}
