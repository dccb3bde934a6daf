/*
 * daemon_async_keys.c - kvt_lookup / kvt_prefetch on a client-mode store must not read the
 * caller's keys array after the call returns: in process both copy the keys before they
 * return (kvt__e_skeys), and include/kvtier.h asks nothing more of the caller, so a caller
 * may reuse or free the array at once. The client queues the pointer for its worker.
 *  1. the worker kept busy by an async get of an absent key (a 500 ms faulty tier);
 *  2. kvt_lookup of a chunk in DRAM from a heap array, overwritten and freed right after
 *     the call: the answer must be 1 (the chunk is there) - a miss (or an ASan
 *     heap-use-after-free) means the worker read the array after the caller let it go;
 *  3. the same for kvt_prefetch.
 */
#include <signal.h>

#include "internal.h"
#include "lib/daemon_harness.h"

int main(void)
{
	char *dir = test_tmpdir("daemon_async_keys"), sock_path[100];
	snprintf(sock_path, sizeof(sock_path), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	const char *extra[] = {"--set", "store.tiers=dram,faulty", "--set", "faulty.inner=nvme",
			       "--set", "faulty.delay_ms=500", NULL};
	kvtd_start_test(sock_path, dir, extra);
	struct kvt_store *s = kvtd_client_store(dir);
	size_t payload = kvt_payload_bytes(kvt_store_geometry(s), 16);
	uint8_t *buf = malloc(payload), *out = malloc(payload);
	test_fill(buf, payload, 7);
	struct kvt_key k, absent;
	memset(k.bytes, 0x42, sizeof(k.bytes));
	memset(absent.bytes, 0x43, sizeof(absent.bytes));
	CHECK_RC(kvt_put_sync(s, &k, NULL, 16, buf, payload), 0);
	int8_t one = KVT_TIER_NONE;
	CHECK_RC(kvt_lookup_sync(s, &k, 1, &one), 1); /* in DRAM */

	int got[2] = {-1, -1};
	for (int op = 0; op < 2; op++) {
		struct test_box busy = {0}, box = {0};
		/* the worker is busy for ~500 ms with this one */
		CHECK_RC(kvt_get(s, &absent, 0, 0, out, payload, test_box_cb, &busy), 0);
		struct kvt_key *keys = malloc(sizeof(*keys));
		*keys = k;
		int8_t tiers[1];
		if (op == 0)
			CHECK_RC(kvt_lookup(s, keys, 1, tiers, test_box_cb, &box), 0);
		else
			CHECK_RC(kvt_prefetch(s, keys, 1, 0, test_box_cb, &box), 0);
		memset(keys, 0xee, sizeof(*keys)); /* the caller reuses its array... */
		free(keys);                        /* ...or frees it: allowed in process */
		uint64_t t0 = test_now_ns();
		while (!box.done || !busy.done) {
			CHECK(test_ms_since(t0) < 10000);
			kvt_poll(s, 50);
		}
		printf("%s after the caller reused its keys: status %d\n",
		       op ? "kvt_prefetch" : "kvt_lookup", box.res.status);
		got[op] = box.res.status;
	}
	CHECKM(got[0] == 1, "kvt_lookup read the caller's keys after it returned");
	CHECKM(got[1] == 1, "kvt_prefetch read the caller's keys after it returned");
	kvt_store_close(s);
	free(buf);
	free(out);
	kvtd_stop();
	test_rmdir(dir);
	free(dir);
	printf("daemon_async_keys: ok\n");
	return 0;
}
