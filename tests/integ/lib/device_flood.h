/*
 * device_flood.h - the steps the device-save backlog tests share (device_backlog.c in
 * process, daemon_device_backlog.c and daemon_tp_backlog.c through kvtierd): warm a store's
 * deeper tier up with plain puts, flood it with device saves from one rank, and check that
 * every chunk is on the NVMe tier, intact. Chunk i's payload is test_fill(seed0 + i).
 * Include after testlib.h and ../unit/device_common.h.
 */
#ifndef KVT_TEST_DEVICE_FLOOD_H
#define KVT_TEST_DEVICE_FLOOD_H

#define DFL_BLOCK 16 /* tokens per engine block */

/* Put chunks [0, n) one at a time, each flushed: the engine learns the tier's rate. */
static inline void dfl_warm(struct kvt_store *s, const struct kvt_key *k, int n, uint32_t ntok,
			    uint64_t seed0)
{
	size_t payload = kvt_payload_bytes(kvt_store_geometry(s), ntok);
	uint8_t *buf = malloc(payload);
	for (int i = 0; i < n; i++) {
		test_fill(buf, payload, seed0 + (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &k[i], NULL, ntok, buf, payload), 0);
		CHECK_RC(kvt_flush_sync(s), 0);
	}
	free(buf);
}

/* Save chunks [from, to) through kvt_device_store from a rank of geometry g that holds
 * KV heads [h0, h1) (all of them: TP=1), each as soon as the previous copy is done,
 * retrying on -EAGAIN; returns the retries. */
static inline int dfl_flood_heads(struct kvt_store *s, const struct kvt_geometry *g,
				  const struct kvt_key *k, int from, int to, uint64_t seed0,
				  uint32_t h0, uint32_t h1)
{
	const uint32_t n = g->chunk_tokens, nblk = n / DFL_BLOCK;
	size_t payload = kvt_payload_bytes(g, n);
	uint8_t *logical = malloc(payload);
	uint32_t *ids = malloc(nblk * sizeof(*ids));
	struct tr_rank r;
	CHECK_RC(tr_rank_open(&r, NULL, g, KVT_LAYOUT_FLASH_ATTN, DFL_BLOCK, nblk, h0, h1, 0, NULL),
		 0);
	for (uint32_t b = 0; b < nblk; b++)
		ids[b] = nblk - 1 - b; /* not in order */
	int eagain = 0;
	for (int i = from; i < to; i++) {
		test_fill(logical, payload, seed0 + (uint64_t)i);
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
		/* heads still missing: none for TP=1 (published), at most the other ranks' */
		CHECKM(d.res.status >= 0 && d.res.status <= (int)(g->kv_heads - (h1 - h0)),
		       "save %d: status %d", i, d.res.status);
	}
	tr_rank_close(&r);
	free(ids);
	free(logical);
	return eagain;
}

static inline int dfl_flood(struct kvt_store *s, const struct kvt_geometry *g,
			    const struct kvt_key *k, int from, int to, uint64_t seed0)
{
	return dfl_flood_heads(s, g, k, from, to, seed0, 0, g->kv_heads);
}

/* Chunks [0, n) are on the NVMe tier under dir, intact: opened without DRAM. */
static inline void dfl_check_landed(const char *dir, const struct kvt_key *k, int n,
				    const char *chunk_tokens, uint64_t seed0)
{
	struct kvt_config *c = test_config("nvme", dir);
	test_set(c, "model.chunk_tokens", chunk_tokens);
	struct kvt_store *s = test_open(c);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t payload = kvt_payload_bytes(g, g->chunk_tokens);
	uint8_t *got = malloc(payload), *want = malloc(payload);
	for (int i = 0; i < n; i++) {
		CHECK_RC(kvt_get_sync(s, &k[i], 0, 0, got, payload, NULL), 0);
		test_fill(want, payload, seed0 + (uint64_t)i);
		CHECKM(!memcmp(got, want, payload), "chunk %d intact", i);
	}
	kvt_store_close(s);
	free(got);
	free(want);
}

#ifdef KVT_DAEMON_HARNESS_H
/* The tests' geometry at 256-token chunks (512 KiB objects). */
static const struct kvt_geometry DFL_GEO = {.layers = 4, .kv_heads = 2, .head_dim = 64,
					    .chunk_tokens = 256, .dtype = KVT_DTYPE_BF16,
					    .kind = KVT_KIND_KV};

/* kvtierd on sock (under dir) over a tier that writes 20 DFL_GEO objects a second (the
 * fault-injecting tier over a real NVMe directory, faulty.write_bytes_per_s), deadlines
 * between 50 and 300 ms. */
static inline void dfl_daemon_start(const char *sock, const char *dir)
{
	static char rate[64];
	snprintf(rate, sizeof(rate), "faulty.write_bytes_per_s=%llu",
		 (unsigned long long)kvt_object_bytes(&DFL_GEO, DFL_GEO.chunk_tokens) * 20);
	const char *extra[] = {"--set", "store.tiers=dram,faulty", "--set", "faulty.inner=nvme",
			       "--set", rate, "--set", "model.chunk_tokens=256", "--set",
			       "dram.bytes=48MiB", "--set", "store.tier_timeout_ms=300", "--set",
			       "store.deadline_floor_ms=50", NULL};
	kvtd_start_test(sock, dir, extra);
}

/* A client store of that daemon, at its chunk size. */
static inline struct kvt_store *dfl_client(const char *dir, const char *sock)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "model.chunk_tokens", "256");
	test_set(c, "store.daemon", sock);
	test_set(c, "store.daemon_timeout_ms", "5000");
	return test_open(c);
}
#endif

#endif
