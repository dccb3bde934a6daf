/* kvt-test-labels: server */
/*
 * daemon_admission.c - deeper-tier admission behind kvtierd, with the real daemon binary
 * and admission.min_freq = 2. Why: a client's get is served from the shared pool through
 * GET_PIN (kvt__store_acquire), not through kvt_get, and until 2026-12-05 that path did not
 * count a sighting for admission nor offer a declined chunk again - so behind the daemon a
 * chunk put once and then read from DRAM any number of times was never written to NVMe.
 *  1. 8 chunks put once: declined (cold), none on NVMe.
 *  2. each read once through the pool: its second sighting; a flush later all 8 are on
 *     NVMe, and the gets were pinned gets (the path under test).
 *  3. read again: nothing written twice.
 *  4. 8 more put twice: the second put, of a chunk in the pool (PUT_RESERVE: "stored"), is
 *     a sighting and a put too - all 8 written.
 */
#include <signal.h>

#include "internal.h"
#include "lib/daemon_harness.h"

static void nvme_counts(struct kvt_store *s, uint64_t *objects, uint64_t *skipped)
{
	struct kvt_stats st;
	CHECK_RC(kvt_stats(s, &st), 0);
	CHECK(st.n_tiers == 2);
	*objects = st.tier[1].objects;
	*skipped = st.tier[1].writes_skipped;
}

int main(void)
{
	char *dir = test_tmpdir("daemon_admission");
	char sock[100];
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	const char *extra[] = {"--set", "dram.bytes=16MiB", "--set", "admission.min_freq=2", NULL};
	kvtd_start_test(sock, dir, extra);
	struct kvt_store *s = kvtd_client_store(dir);
	memcpy(kvtd_ns, kvt_store_ns_id(s), sizeof(kvtd_ns)); /* for raw_attach's HELLO */
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t len = kvt_payload_bytes(g, g->chunk_tokens);
	uint8_t *buf = malloc(len), *back = malloc(len);
	CHECK(buf && back);
	struct kvt_key k[8];
	for (int i = 0; i < 8; i++) {
		memset(&k[i], 0, sizeof(k[i]));
		k[i].bytes[0] = 0x2d;
		k[i].bytes[1] = (uint8_t)i;
		test_fill(buf, len, 300 + (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &k[i], i ? &k[i - 1] : NULL, g->chunk_tokens, buf, len), 0);
	}
	CHECK_RC(kvt_flush_sync(s), 0);
	uint64_t objects, skipped;
	nvme_counts(s, &objects, &skipped);
	CHECKM(objects == 0 && skipped == 8, "1: put once: NVMe objects %llu, skipped %llu",
	       (unsigned long long)objects, (unsigned long long)skipped);

	struct raw r = raw_attach();
	uint64_t pinned0 = raw_status(&r).pinned_gets;
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 8; i++) {
			struct kvt_result res;
			CHECK_RC(kvt_get_sync(s, &k[i], 0, 0, back, len, &res), 0);
			CHECK(res.tier == 0 && test_check(back, len, 300 + (uint64_t)i));
		}
		CHECK_RC(kvt_flush_sync(s), 0);
		nvme_counts(s, &objects, &skipped);
		CHECKM(objects == 8 && skipped == 8,
		       "%d: read from the pool: NVMe objects %llu, skipped %llu (a second sighting "
		       "writes each once)",
		       round + 2, (unsigned long long)objects, (unsigned long long)skipped);
	}
	CHECKM(raw_status(&r).pinned_gets >= pinned0 + 16, "the gets went through GET_PIN");

	/* 4. 8 more chunks, each put twice: the second put finds it in the pool (PUT_RESERVE
	 * answers "stored"), a sighting as an in-process kvt_put of a resident chunk is: all 8
	 * written, and counted as puts (until 2026-12-05 neither) */
	uint64_t puts0 = 0;
	{
		struct kvt_stats st;
		CHECK_RC(kvt_stats(s, &st), 0);
		puts0 = st.puts;
	}
	for (int twice = 0; twice < 2; twice++)
		for (int i = 0; i < 8; i++) {
			k[i].bytes[0] = 0x2e;
			test_fill(buf, len, 400 + (uint64_t)i);
			CHECK_RC(kvt_put_sync(s, &k[i], i ? &k[i - 1] : NULL, g->chunk_tokens, buf,
					      len),
				 0);
		}
	CHECK_RC(kvt_flush_sync(s), 0);
	nvme_counts(s, &objects, &skipped);
	CHECKM(objects == 16, "4: put twice: NVMe objects %llu (8 from before)",
	       (unsigned long long)objects);
	{
		struct kvt_stats st;
		CHECK_RC(kvt_stats(s, &st), 0);
		CHECKM(st.puts == puts0 + 16, "4: %llu puts counted of 16",
		       (unsigned long long)(st.puts - puts0));
	}
	raw_close(&r);
	kvt_store_close(s);
	free(buf);
	free(back);
	kvtd_stop();
	test_rmdir(dir);
	free(dir);
	printf("daemon_admission: all passed\n");
	return 0;
}
