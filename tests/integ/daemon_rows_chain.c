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
 * then finds A[0] and A[1] in DRAM and A[2] on NVMe. The same with A brought back by
 * kvt_get_linked (each get names its parent, which GET_PIN carries to the daemon), and - the
 * contrast that shows the parent is what decides - by kvt_get, whose promotions name none:
 * A[0] goes first. All of it twice: with the daemon's DRAM pool mapped by the client (GET_PIN)
 * and with a daemon that shares none (an encrypting store), where gets are plain GETs.
 */
#include "lib/daemon_harness.h" /* includes testlib.h */

static const char *how_name[] = {"rows load", "kvt_get_linked", "kvt_get"};

/* Chain A (3 chunks) put, 7 others push it out of DRAM, A brought back by how (0 a rows
 * load, 1 gets naming their parents, 2 gets naming none), 5 more puts: a lookup of A. */
static void pass(struct kvt_store *s, int how, uint32_t seed, uint8_t *buf, size_t len,
		 uint32_t tokens)
{
	struct kvt_key a[3], o[12];
	test_chain_keys(s, a, 3, seed);
	for (int i = 0; i < 12; i++)
		test_chain_keys(s, &o[i], 1, seed + 0x10 + (uint32_t)i); /* chains of one */
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

	if (how == 0)
		test_rows_load_exact(s, a, 3, 2, buf, len);
	else /* through GET_PIN, which carries the parent */
		test_get_chain(s, a, 3, buf, len, how == 1, 11);

	for (int i = 7; i < 12; i++) {
		CHECK_RC(kvt_put_sync(s, &o[i], NULL, tokens, buf, len), 0);
		CHECK_RC(kvt_flush_sync(s), 0);
	}
	CHECK_EQ(kvt_lookup_sync(s, a, 3, tiers), 3);
	printf("  %s through the daemon, then 5 puts into 7 slots: A in tiers %d %d %d "
	       "(0 DRAM, 1 NVMe)\n", how_name[how], tiers[0], tiers[1], tiers[2]);
	if (how == 2) /* the contrast: no parent, LRU's order, the oldest promotion first */
		CHECKM(tiers[0] == 1 && tiers[1] == 0 && tiers[2] == 0,
		       "kvt_get's promotions were linked after all");
	else
		CHECKM(tiers[0] == 0 && tiers[1] == 0 && tiers[2] == 1,
		       "the restored chain is evicted from its end");
}

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

	for (int how = 0; how < 3; how++)
		pass(s, how, 0xa0 + 0x20 * (uint32_t)how, buf, len, tokens);
	memcpy(kvtd_ns, kvt_store_ns_id(s), sizeof(kvtd_ns)); /* for raw_attach's HELLO */
	struct raw r = raw_attach();
	struct kvtd_status st = raw_status(&r);
	raw_close(&r);
	CHECKM(st.pinned_gets > 0, "no get went through the shared pool (GET_PIN)");
	kvt_store_close(s);
	kvtd_stop();

	/* Again with a daemon that shares no DRAM pool (a store that encrypts at rest keeps
	 * its pool to itself): the client's gets fall back to plain GETs, copied through its
	 * region, which carry the parent too. */
	char key_file[4200];
	snprintf(key_file, sizeof(key_file), "%s/enc.key", dir);
	int kfd = open(key_file, O_WRONLY | O_CREAT | O_EXCL, 0600);
	CHECK(kfd >= 0);
	const char hex[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
	CHECK(write(kfd, hex, 64) == 64);
	close(kfd);
	char key_set[4300];
	snprintf(key_set, sizeof(key_set), "security.encryption_key_file=%s", key_file);
	const char *enc_args[] = {"--set", "dram.bytes=256KiB", "--set", "dram.policy=lru",
				  "--set", "store.write_policy=write-through", "--set", key_set,
				  NULL};
	kvtd_start_test(sock, dir, enc_args);
	s = kvtd_client_store(dir);
	for (int how = 0; how < 3; how++) {
		printf("  (no shared pool: plain GETs)\n");
		pass(s, how, 0x10 + 0x20 * (uint32_t)how, buf, len, tokens);
	}
	r = raw_attach();
	st = raw_status(&r);
	raw_close(&r);
	CHECKM(st.pinned_gets == 0, "%llu gets went through a pool the daemon should not share",
	       (unsigned long long)st.pinned_gets);
	kvt_store_close(s);
	kvtd_stop();
	free(buf);
	test_rmdir(dir);
	free(dir);
	printf("daemon_rows_chain: ok\n");
	return 0;
}
