/*
 * daemon_rows_chain.c - a rows load through kvtierd (client mode: one GET or GET_PIN per
 * chunk) names each chunk's parent, so the daemon links the chain it promotes from NVMe
 * into its DRAM as a put's is, and evicts it from its end. Why: the vLLM connector restores
 * with kvt_rows_load, and with a node daemon its loads are client mode; a restored chain
 * whose first chunk went first is useless to the next lookup. Until 2026-12-06 those GETs
 * carried no parent (in-process loads: integ.store_prefetch_chain).
 *
 * The daemon: DRAM of 7 slots, LRU, write-through to NVMe. Chain A (3 chunks) put, 7 others
 * push it out of DRAM, a rows load of A brings it back (exact), 5 more puts: a lookup of A
 * then finds A[0] and A[1] in DRAM and A[2] on NVMe.
 */
#include "lib/daemon_harness.h" /* includes testlib.h */

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	char *dir = test_tmpdir("daemon_rows_chain");
	char sock[100];
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	const char *args[] = {"--set", "dram.bytes=256KiB", "--set", "dram.policy=lru",
			      "--set", "store.write_policy=write-through", NULL};
	kvtd_start_test(sock, dir, args);
	struct kvt_store *s = kvtd_client_store(dir);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	uint32_t tokens = g->chunk_tokens;
	size_t len = kvt_payload_bytes(g, tokens);
	uint8_t *buf = malloc(len);
	CHECK(buf);
	test_fill(buf, len, 11);

	struct kvt_key a[3], o[12];
	test_chain_keys(s, a, 3, 0xa0);
	for (int i = 0; i < 12; i++)
		test_chain_keys(s, &o[i], 1, 0xb0 + (uint32_t)i); /* chains of one */
	/* each put flushed: written to NVMe, so clean and evictable before the next (a dirty
	 * slot is passed over, and the LRU order would depend on the write's timing) */
	for (int i = 0; i < 3; i++) {
		CHECK_RC(kvt_put_sync(s, &a[i], i ? &a[i - 1] : NULL, tokens, buf, len), 0);
		CHECK_RC(kvt_flush_sync(s), 0);
	}
	for (int i = 0; i < 7; i++) {
		CHECK_RC(kvt_put_sync(s, &o[i], NULL, tokens, buf, len), 0);
		CHECK_RC(kvt_flush_sync(s), 0);
	}
	int8_t tiers[3];
	CHECK_EQ(kvt_lookup_sync(s, a, 3, tiers), 3);
	for (int i = 0; i < 3; i++)
		CHECKM(tiers[i] == 1, "A[%d] pushed out to NVMe (tier %d)", i, tiers[i]);

	test_rows_load_exact(s, a, 3, 2, buf, len);

	for (int i = 7; i < 12; i++) {
		CHECK_RC(kvt_put_sync(s, &o[i], NULL, tokens, buf, len), 0);
		CHECK_RC(kvt_flush_sync(s), 0);
	}
	CHECK_EQ(kvt_lookup_sync(s, a, 3, tiers), 3);
	printf("  rows load through the daemon, then 5 puts into 7 slots: A in tiers %d %d %d "
	       "(0 DRAM, 1 NVMe)\n", tiers[0], tiers[1], tiers[2]);
	CHECKM(tiers[0] == 0 && tiers[1] == 0 && tiers[2] == 1,
	       "the restored chain is evicted from its end");

	kvt_store_close(s);
	kvtd_stop();
	free(buf);
	test_rmdir(dir);
	free(dir);
	printf("daemon_rows_chain: ok\n");
	return 0;
}
