/*
 * daemon_cut_held.c - a connection kvtierd cuts (a call past its deadline) keeps its pins
 * and tensor-parallel claims until its client has closed its end. Why: the client's other
 * threads (a device store's gathers and scatters) copy into and out of the daemon's pool
 * outside the call that was cut, and stop only once the client has read the cut answer and
 * swapped its pool mapping out. Released at the cut, as until 2026-12-05, a TP slot could
 * be given to another client's put while late bytes of the old gather still landed in it
 * (DRAM hits are not CRC-checked), and a pinned slot reused under a scatter still copying.
 *
 * With the real daemon binary over a tier whose every completion takes 3 s:
 *  1. a raw connection pins a chunk in DRAM (GET_PIN) and claims every head of a TP object;
 *  2. its GET of a key only the slow tier could hold is cut at 200 ms (-ETIME, marked);
 *  3. for a second after, while it has not closed its end, STATUS (on another connection)
 *     still shows the pin and the open object - before, both were gone at once;
 *  4. the pin goes at its lease (daemon.lease_ms = 3000) as any pin does - a stopped
 *     client must not hold the pool - while the TP slot stays held (the object cancelled
 *     at its lease, its slot quarantined);
 *  5. once it closes its end, the slot is released.
 */
#include "internal.h"
#include "lib/daemon_harness.h"

static void key_of(uint64_t i, struct kvt_key *k)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->bytes, &i, sizeof(i));
	k->bytes[31] = 0x5d;
}

int main(void)
{
	char *dir = test_tmpdir("daemon_cut_held");
	char sock[100];
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	const char *args[] = {"--set", "store.tiers=dram,faulty", "--set", "faulty.inner=nvme",
			      "--set", "faulty.delay_ms=3000", "--set", "dram.bytes=64MiB",
			      "--set", "dram.hugepages=false", "--set", "daemon.lease_ms=3000", NULL};
	kvtd_start_test(sock, dir, args);
	struct kvt_store *s = kvtd_client_store(dir);
	struct kvt_geometry g = *kvt_store_geometry(s);
	memcpy(kvtd_ns, kvt_store_ns_id(s), sizeof(kvtd_ns));
	size_t len = kvt_payload_bytes(&g, 16);
	uint8_t *buf = malloc(len);
	struct kvt_key pk, tk, xk;
	key_of(1, &pk);
	key_of(2, &tk);
	key_of(3, &xk);
	test_fill(buf, len, 1);
	CHECK_RC(kvt_put_sync(s, &pk, NULL, 16, buf, len), 0); /* in DRAM at once */

	/* 1. */
	struct raw r = raw_attach(), st_conn = raw_attach();
	struct kvtd_status st0 = raw_status(&st_conn);
	struct kvtd_req q = {.op = KVTD_GET_PIN, .key = pk};
	struct kvtd_rep rep;
	CHECK_RC(raw_call(r.sock, &q, -1, &rep), 0);
	CHECK_RC(rep.res.status, 0);
	q = (struct kvtd_req){.op = KVTD_TP_RESERVE, .key = tk, .n_tokens = 16,
			      .layer_end = g.kv_heads,
			      .len = sizeof(struct kvtd_tp_claim) + g.kv_heads};
	CHECK_RC(raw_call(r.sock, &q, -1, &rep), 0);
	CHECK_RC(rep.res.status, 0);
	struct kvtd_status st = raw_status(&st_conn);
	CHECK_EQ(st.pins, st0.pins + 1);
	CHECK_EQ(st.tp_partials, 1);

	/* 2. */
	q = (struct kvtd_req){.op = KVTD_GET, .key = xk, .len = len, .deadline_ns = 200000000u};
	uint64_t t0 = test_now_ns();
	CHECK_RC(raw_call(r.sock, &q, -1, &rep), 0);
	CHECK_RC(rep.res.status, -ETIME);
	CHECK_EQ(rep.slot, KVTD_SLOT_CUT);
	printf("daemon_cut_held: GET cut after %llu ms\n", (unsigned long long)test_ms_since(t0));

	/* 3. */
	for (int i = 0; i < 10; i++) {
		usleep(100000);
		st = raw_status(&st_conn);
		CHECKM(st.pins == st0.pins + 1 && st.tp_partials == 1,
		       "%d ms after the cut, its end still open: %llu pins (%llu before), %llu TP "
		       "objects open",
		       100 * (i + 1), (unsigned long long)st.pins, (unsigned long long)st0.pins,
		       (unsigned long long)st.tp_partials);
	}

	/* 4. */
	t0 = test_now_ns();
	do {
		usleep(50000);
		st = raw_status(&st_conn);
	} while (st.pins != st0.pins && test_ms_since(t0) < 15000);
	CHECKM(st.pins == st0.pins, "the pin outlived its lease: %llu pins (%llu before)",
	       (unsigned long long)st.pins, (unsigned long long)st0.pins);
	CHECKM(st.tp_partials + st.tp_quarantined == 1,
	       "the TP slot was let go before the client closed: %llu open, %llu quarantined",
	       (unsigned long long)st.tp_partials, (unsigned long long)st.tp_quarantined);

	/* 5. */
	close(r.sock);
	munmap(r.shm, r.len);
	t0 = test_now_ns();
	do {
		usleep(20000);
		st = raw_status(&st_conn);
	} while ((st.tp_partials || st.tp_quarantined) && test_ms_since(t0) < 10000);
	CHECKM(st.tp_partials == 0 && st.tp_quarantined == 0,
	       "after the close: %llu TP objects open, %llu quarantined",
	       (unsigned long long)st.tp_partials, (unsigned long long)st.tp_quarantined);
	printf("daemon_cut_held: the pin went at its lease, the TP slot was held until the "
	       "client closed and released %llu ms after\n",
	       (unsigned long long)test_ms_since(t0));

	raw_close(&st_conn);
	kvt_store_close(s);
	kvtd_stop();
	test_rmdir(dir);
	free(dir);
	free(buf);
	printf("daemon_cut_held: ok\n");
	return 0;
}
