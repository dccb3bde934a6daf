/*
 * daemon_device_backlog.c - the GPU save path through kvtierd obeys the write-behind bound:
 * a client process floods device saves (kvt_device_store on a store.daemon client, the
 * tensor-parallel reservation path of daemon/tp_commit.c) into a daemon whose deeper tier
 * writes 20 objects a second (the fault-injecting tier over a real NVMe directory,
 * faulty.write_bytes_per_s). The daemon must refuse new chunks (-EAGAIN, nothing copied)
 * rather than queue writes that can only miss their deadline: the flush then succeeds (it
 * fails on a missed write-behind), and after the daemon stops every chunk is on the NVMe
 * tier, intact. The in-process path has the same test (device_backlog.c).
 */
#include <sys/wait.h>

#include "../unit/device_common.h"
#include "testlib.h"
#include "lib/daemon_harness.h"

enum { WARM = 10, M = 30, BLOCK = 16, NTOK = 256 };

int main(void)
{
	char *dir = test_tmpdir("daemon_device_backlog");
	char sock[108], rate[64];
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	struct kvt_geometry g = {.layers = 4, .kv_heads = 2, .head_dim = 64, .chunk_tokens = NTOK,
				 .dtype = KVT_DTYPE_BF16, .kind = KVT_KIND_KV};
	uint64_t obj = kvt_object_bytes(&g, NTOK);
	snprintf(rate, sizeof(rate), "faulty.write_bytes_per_s=%llu", (unsigned long long)obj * 20);
	const char *extra[] = {"--set", "store.tiers=dram,faulty", "--set", "faulty.inner=nvme",
			       "--set", rate, "--set", "model.chunk_tokens=256", "--set",
			       "dram.bytes=48MiB", "--set", "store.tier_timeout_ms=300", "--set",
			       "store.deadline_floor_ms=50", NULL};
	kvtd_start_test(sock, dir, extra);

	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "model.chunk_tokens", "256");
	test_set(c, "store.daemon", sock);
	test_set(c, "store.daemon_timeout_ms", "5000");
	struct kvt_store *s = test_open(c);
	size_t payload = kvt_payload_bytes(&g, NTOK);
	uint8_t *logical = malloc(payload), *got = malloc(payload);
	struct kvt_key k[WARM + M];
	test_chain_keys(s, k, WARM + M, 13);

	/* warm-up through kvt_put, one at a time: the daemon's engine learns the tier's rate */
	for (int i = 0; i < WARM; i++) {
		test_fill(logical, payload, 500 + (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &k[i], NULL, NTOK, logical, payload), 0);
		CHECK_RC(kvt_flush_sync(s), 0);
	}

	/* the flood: one TP=1 rank in this process saves a new chunk as soon as its previous
	 * copy is done */
	struct tr_rank r;
	CHECK_RC(tr_rank_open(&r, NULL, &g, KVT_LAYOUT_FLASH_ATTN, BLOCK, NTOK / BLOCK, 0,
			      g.kv_heads, 0, NULL),
		 0);
	uint32_t ids[NTOK / BLOCK];
	for (uint32_t b = 0; b < NTOK / BLOCK; b++)
		ids[b] = NTOK / BLOCK - 1 - b;
	int eagain = 0;
	uint64_t t0 = test_now_ns();
	for (int i = WARM; i < WARM + M; i++) {
		test_fill(logical, payload, 500 + (uint64_t)i);
		tr_rank_load_logical(&r, logical, NTOK, ids);
		struct tr_done d = {0};
		int rc;
		while ((rc = kvt_device_store(r.dev, s, &k[i], NULL, NTOK, ids, NTOK / BLOCK, NULL,
					      tr_on_done, &d, NULL)) == -EAGAIN) {
			eagain++;
			kvt_poll(s, 5);
		}
		CHECK_RC(rc, 0);
		for (int w = 0; w < 2000 && !d.calls; w++)
			kvt_poll(s, 5);
		CHECKM(d.calls == 1, "save %d never completed", i);
		CHECK_RC(d.res.status, 0); /* published: no head missing */
	}
	/* a write the daemon had queued past its deadline fails the flush */
	CHECK_RC(kvt_flush_sync(s), 0);
	fprintf(stderr, "  %d device saves through kvtierd over a 20-objects/s tier: %.0f ms, %d "
			"told to retry\n",
		M, test_ms_since(t0), eagain);
	CHECKM(eagain > 0, "the daemon never held a device save back");
	tr_rank_close(&r);
	kvt_store_close(s);
	kvtd_stop();

	/* every chunk reached the NVMe tier, intact: the daemon's directory opened in-process */
	char data[300];
	snprintf(data, sizeof(data), "%s/data", dir);
	c = test_config("nvme", data);
	test_set(c, "model.chunk_tokens", "256");
	s = test_open(c);
	for (int i = 0; i < WARM + M; i++) {
		CHECK_RC(kvt_get_sync(s, &k[i], 0, 0, got, payload, NULL), 0);
		test_fill(logical, payload, 500 + (uint64_t)i);
		CHECKM(!memcmp(got, logical, payload), "chunk %d intact", i);
	}
	kvt_store_close(s);
	free(got);
	free(logical);
	test_rmdir(dir);
	free(dir);
	printf("daemon_device_backlog: ok\n");
	return 0;
}
