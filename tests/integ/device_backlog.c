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
#include "lib/device_flood.h"

enum { WARM = 10, M = 40, SEED = 900 };

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
	uint64_t obj = kvt_object_bytes(g, g->chunk_tokens);
	kvt__faulty_set_write_rate(kvt__store_tier(s, 1), obj * 20);
	struct kvt_key k[WARM + M];
	test_chain_keys(s, k, WARM + M, 11);
	dfl_warm(s, k, WARM, g->chunk_tokens, SEED);
	struct kvt_stats st;
	kvt_stats(s, &st);
	uint64_t misses0 = st.tier[1].deadline_misses;

	uint64_t t0 = kvt__now_ns();
	int eagain = dfl_flood(s, g, k, WARM, WARM + M, SEED);
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
	kvt_store_close(s);

	dfl_check_landed(dir, k, WARM + M, "256", SEED); /* every chunk saved, intact */
	test_rmdir(dir);
	free(dir);
	printf("device_backlog: ok\n");
	return 0;
}
