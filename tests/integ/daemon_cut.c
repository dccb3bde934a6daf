/*
 * daemon_cut.c - kvtierd stops waiting for a request at its client's deadline
 * (kvtd_req.deadline_ns), with the real daemon binary over a tier whose every completion
 * takes 3 s (faulty.delay_ms), behind a DRAM pool of one slot. Why: a client gives up on a call at its deadline and drops
 * the connection; before, the daemon's thread still waited for the tier (up to the tier's
 * own deadline) and held the connection, its region and a daemon.max_clients place, so a
 * stalled tier under a client's retries filled the daemon with abandoned requests.
 *  1. A GET through the region with 200 ms left: answered -ETIME at ~200 ms and the
 *     connection closed; STATUS then shows the cut (cut 1, 1 running), no request in
 *     progress, the connection gone but its region still mapped (the read still writes
 *     into it); once the read ends (~3 s), nothing is left (0 running, 1 region: the
 *     STATUS connection's).
 *  2. A GET_PIN with 200 ms left: the same; the pin its promotion took is given back when
 *     it ends - else the pool's one slot stays pinned and step 4 fails.
 *  3. Without a deadline a GET waits for the tier and returns the exact bytes.
 *  4. A GET_PIN of another key without a deadline: promoted into the one slot, exact.
 *  5. A client-mode kvt_get_sync, which has no deadline of its own (only
 *     store.daemon_timeout_ms, 2 s): the daemon is given a little less (1.75 s), answers
 *     -ETIME before the client's socket times out, and the call misses with that cause at
 *     ~1.75 s; the daemon, which answered, is not marked down: the next call is served.
 *     (Before, the daemon held the read for the tier's 3 s, the client's socket timed out
 *     at 2 s, the daemon was marked down and the next call failed at once.)
 *  6. The same through the region, with no DRAM pool to pin into (store.tiers=faulty):
 *     a client's kvt_get_sync misses with cause -ETIME and a kvt_put_sync fails -ETIME,
 *     each at ~1.75 s (the daemon's cut answer, mapped in run_op_locked), and a call after
 *     each is served. Then the put's write, which the cut did not stop, lands: once it
 *     has, a get with time enough returns its bytes.
 *  7. A flush that waits for the slow tier's write-through, then a lookup of a key only
 *     the slow tier could answer for: each ends at ~1.75 s (-ETIME; the lookup finds
 *     nothing, cause -ETIME), and a DRAM hit right after each is served. Before, these
 *     had no budget: the client's socket timed out at 2 s, the daemon was marked down,
 *     and the hit failed at once.
 *  8. At the cap (daemon.max_clients = 2): two GETs with 200 ms left are cut and leave
 *     their connections; a third is answered -ETIME at its 200 ms too (marked, closed),
 *     while its call stays with its connection - the daemon.max_clients place held until
 *     the read ends (STATUS: 3 running, 2 connections), then nothing is left. Before,
 *     the third waited for the tier (3 s): a call answered past its deadline.
 */
#include <poll.h>

#include "internal.h"
#include "lib/daemon_harness.h"

static char *dir, sock_path[100];
static int32_t last_slot; /* the last answer's kvtd_rep.slot (KVTD_SLOT_CUT: a cut) */
static size_t PAYLOAD;
static struct kvt_geometry GEO;

static void key_of(uint64_t i, struct kvt_key *k)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->bytes, &i, sizeof(i));
	k->bytes[31] = 0x3c;
}

static void start(const char *dram_bytes)
{
	char dram[64];
	snprintf(dram, sizeof(dram), "dram.bytes=%s", dram_bytes);
	const char *args[] = {"--set", "store.tiers=dram,faulty", "--set", "faulty.inner=nvme",
			      "--set", "faulty.delay_ms=3000", "--set", dram, NULL};
	kvtd_start_test(sock_path, dir, args);
}

/* Wait (up to 10 s) until STATUS satisfies cond. */
#define WAIT_STATUS(r, st, cond)                                                                   \
	do {                                                                                       \
		uint64_t _t0 = test_now_ns();                                                      \
		for (;;) {                                                                         \
			(st) = raw_status(r);                                                      \
			if (cond)                                                                  \
				break;                                                             \
			CHECKM(test_ms_since(_t0) < 10000, "timed out waiting for " #cond);        \
			usleep(20000);                                                             \
		}                                                                                  \
	} while (0)

/* One request with ms left (0: no deadline) on its own connection; its answer's status
 * and how long it took. The daemon closes a cut connection after its answer. */
static int timed(uint32_t op, uint64_t i, uint64_t ms, uint64_t *took_ms, bool *closed)
{
	struct raw r = raw_attach();
	struct kvtd_req q = {.op = op, .len = op == KVTD_GET ? PAYLOAD : 0,
			     .deadline_ns = ms * 1000000u};
	key_of(i, &q.key);
	struct kvtd_rep rep;
	uint64_t t0 = test_now_ns();
	CHECK_RC(raw_call(r.sock, &q, -1, &rep), 0);
	*took_ms = test_ms_since(t0);
	last_slot = rep.slot;
	char b;
	struct pollfd pf = {.fd = r.sock, .events = POLLIN};
	*closed = poll(&pf, 1, 1000) == 1 && recv(r.sock, &b, 1, MSG_DONTWAIT) == 0;
	if (op == KVTD_GET && rep.res.status >= 0) {
		uint8_t *want = malloc(PAYLOAD);
		test_fill(want, PAYLOAD, i);
		CHECKM(memcmp(r.shm, want, PAYLOAD) == 0, "the bytes of key %llu",
		       (unsigned long long)i);
		free(want);
	}
	raw_close(&r);
	return rep.res.status;
}

/* op of key i with 200 ms left: -ETIME at its deadline (not the tier's 3 s), then the
 * connection closed. */
static void cut_at_deadline(uint32_t op, uint64_t i, const char *name)
{
	uint64_t took;
	bool closed;
	CHECK_RC(timed(op, i, 200, &took, &closed), -ETIME);
	printf("daemon_cut: %s with 200 ms left answered in %llu ms, closed %d\n", name,
	       (unsigned long long)took, closed);
	CHECKM(took >= 190 && took < 1000, "%s answered at %llu ms, not at its deadline", name,
	       (unsigned long long)took);
	CHECK(closed);
	CHECK_EQ(last_slot, KVTD_SLOT_CUT); /* marked: the client drops its end at once */
}

int main(void)
{
	dir = test_tmpdir("daemon_cut");
	snprintf(sock_path, sizeof(sock_path), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	start("64MiB");
	struct kvt_store *s = kvtd_client_store(dir);
	GEO = *kvt_store_geometry(s);
	PAYLOAD = kvt_payload_bytes(&GEO, 16);
	memcpy(kvtd_ns, kvt_store_ns_id(s), sizeof(kvtd_ns));
	uint8_t *buf = malloc(PAYLOAD);
	for (uint64_t i = 0; i < 3; i++) {
		struct kvt_key k;
		key_of(i, &k);
		test_fill(buf, PAYLOAD, i);
		CHECK_RC(kvt_put_sync(s, &k, NULL, 16, buf, PAYLOAD), 0);
	}
	kvt_store_close(s);
	free(buf);
	/* SIGTERM flushes (the writes to the slow tier); a restart empties DRAM: every get
	 * below reads the slow tier */
	kvtd_stop();
	start("40KiB"); /* one slot of a 36 KiB object */

	/* 1. through the region */
	cut_at_deadline(KVTD_GET, 0, "GET");
	struct raw r = raw_attach();
	struct kvtd_status st;
	WAIT_STATUS(&r, st, st.connections == 1);
	CHECK_EQ(st.cut, 1);
	CHECK_EQ(st.cut_running, 1); /* the read still runs, into the cut region */
	CHECK_EQ(st.ops_in_progress, 0);
	CHECK_EQ(st.regions_mapped, 2);
	WAIT_STATUS(&r, st, st.cut_running == 0);
	CHECK_EQ(st.regions_mapped, 1);

	/* 2. a pin */
	cut_at_deadline(KVTD_GET_PIN, 1, "GET_PIN");
	WAIT_STATUS(&r, st, st.cut == 2 && st.connections == 1);
	CHECK_EQ(st.cut_running, 1);
	WAIT_STATUS(&r, st, st.cut_running == 0);
	CHECK_EQ(st.pins, 0);

	/* 3. no deadline: waits for the tier, exact bytes */
	uint64_t took;
	bool closed;
	CHECK_RC(timed(KVTD_GET, 2, 0, &took, &closed), 0);
	printf("daemon_cut: GET without a deadline answered in %llu ms\n",
	       (unsigned long long)took);
	CHECK(took >= 2900 && !closed);
	CHECK(last_slot != KVTD_SLOT_CUT);

	/* 4. a pin of another key needs the one slot: the cut pin of step 2 was given back */
	struct kvtd_req q = {.op = KVTD_GET_PIN};
	key_of(0, &q.key);
	struct kvtd_rep rep;
	CHECK_RC(raw_call(r.sock, &q, -1, &rep), 0);
	CHECKM(rep.res.status == 0, "GET_PIN of key 0 into the pool's one slot: %d",
	       rep.res.status);
	struct kvtd_req u = {.op = KVTD_UNPIN, .n = (uint64_t)(uint32_t)rep.slot,
			     .lease = rep.lease};
	CHECK_RC(raw_call(r.sock, &u, -1, &rep), 0);
	CHECK_RC(rep.res.status, 0);
	st = raw_status(&r);
	CHECK_EQ(st.cut, 2);

	/* 5. a client's call without a deadline of its own (key 1: not in the one slot) */
	struct kvt_store *cs = kvtd_client_store(dir);
	uint8_t *got = malloc(PAYLOAD);
	struct kvt_key k1;
	key_of(1, &k1);
	struct kvt_result res;
	uint64_t t0 = test_now_ns();
	int grc = kvt_get_sync(cs, &k1, 0, 0, got, PAYLOAD, &res);
	took = test_ms_since(t0);
	printf("daemon_cut: client get_sync (2 s timeout) ended in %llu ms: %d, cause %d\n",
	       (unsigned long long)took, grc, res.cause);
	CHECKM(grc == -ENOENT && res.cause == -ETIME,
	       "get_sync through a daemon whose tier is slower than the client's timeout: %d, "
	       "cause %d (want -ENOENT, cause -ETIME: the daemon's answer at its budget)",
	       grc, res.cause);
	CHECKM(took >= 1600 && took < 2000, "answered at %llu ms, not at 1.75 s",
	       (unsigned long long)took);
	struct kvt_stats cst;
	CHECK_RC(kvt_stats(cs, &cst), 0); /* not marked down: served */
	WAIT_STATUS(&r, st, st.cut == 3);
	kvt_store_close(cs);
	raw_close(&r);
	kvtd_stop();

	/* 6. no DRAM pool: gets and puts go through the region */
	const char *args6[] = {"--set", "store.tiers=faulty", "--set", "faulty.inner=nvme",
			       "--set", "faulty.delay_ms=3000", NULL};
	kvtd_start_test(sock_path, dir, args6);
	cs = kvtd_client_store(dir);
	t0 = test_now_ns();
	grc = kvt_get_sync(cs, &k1, 0, 0, got, PAYLOAD, &res);
	took = test_ms_since(t0);
	printf("daemon_cut: region get_sync ended in %llu ms: %d, cause %d\n",
	       (unsigned long long)took, grc, res.cause);
	CHECKM(grc == -ENOENT && res.cause == -ETIME,
	       "region get through a slow tier: %d, cause %d (want -ENOENT, cause -ETIME)", grc,
	       res.cause);
	CHECKM(took >= 1600 && took < 2000, "region get answered at %llu ms, not at 1.75 s",
	       (unsigned long long)took);
	CHECK_RC(kvt_stats(cs, &cst), 0);
	struct kvt_key k7;
	key_of(7, &k7);
	test_fill(got, PAYLOAD, 7);
	t0 = test_now_ns();
	int prc = kvt_put_sync(cs, &k7, NULL, 16, got, PAYLOAD);
	took = test_ms_since(t0);
	printf("daemon_cut: region put_sync ended in %llu ms: %d\n", (unsigned long long)took,
	       prc);
	CHECKM(prc == -ETIME, "region put through a slow tier: %d (want -ETIME)", prc);
	CHECKM(took >= 1600 && took < 2000, "region put answered at %llu ms, not at 1.75 s",
	       (unsigned long long)took);
	CHECK_RC(kvt_stats(cs, &cst), 0);
	kvt_store_close(cs);
	/* the cut put's write still lands: a raw GET without a deadline reads it */
	r = raw_attach();
	WAIT_STATUS(&r, st, st.cut_running == 0);
	raw_close(&r);
	CHECK_RC(timed(KVTD_GET, 7, 0, &took, &closed), 0); /* compares the bytes */
	kvtd_stop();

	/* 7. a flush and a lookup behind the slow tier */
	start("64MiB");
	cs = kvtd_client_store(dir);
	struct kvt_key k8, k9;
	key_of(8, &k8);
	key_of(9, &k9);
	test_fill(got, PAYLOAD, 8);
	CHECK_RC(kvt_put_sync(cs, &k8, NULL, 16, got, PAYLOAD), 0); /* in DRAM; written behind */
	t0 = test_now_ns();
	int frc = kvt_flush_sync(cs);
	took = test_ms_since(t0);
	printf("daemon_cut: flush behind a slow write-through ended in %llu ms: %d\n",
	       (unsigned long long)took, frc);
	CHECKM(frc == -ETIME && took >= 1600 && took < 2000, "flush: %d after %llu ms", frc,
	       (unsigned long long)took);
	t0 = test_now_ns();
	CHECK_RC(kvt_get_sync(cs, &k8, 0, 0, got, PAYLOAD, &res), 0); /* served: not down */
	CHECK(test_ms_since(t0) < 1000);
	int8_t tier = 0;
	t0 = test_now_ns();
	int lrc = kvt_lookup_sync(cs, &k9, 1, &tier);
	took = test_ms_since(t0);
	printf("daemon_cut: lookup behind the slow tier ended in %llu ms: %d found\n",
	       (unsigned long long)took, lrc);
	CHECKM(lrc == 0 && took >= 1600 && took < 2000, "lookup: %d after %llu ms", lrc,
	       (unsigned long long)took);
	t0 = test_now_ns();
	CHECK_RC(kvt_get_sync(cs, &k8, 0, 0, got, PAYLOAD, &res), 0);
	CHECK(test_ms_since(t0) < 1000);
	CHECK(test_check(got, PAYLOAD, 8));
	kvt_store_close(cs);
	free(got);
	kvtd_stop();

	/* 8. past the cap of cut calls that leave their connection */
	/* the first read must still run after the third call is cut (each may take up to 1 s
	 * under a sanitizer: 6 s there) */
	const char *args8[] = {"--set", "store.tiers=dram,faulty", "--set", "faulty.inner=nvme",
			       "--set", TEST_SANITIZED ? "faulty.delay_ms=6000" : "faulty.delay_ms=3000",
			       "--set", "dram.bytes=64MiB",
			       "--set", "daemon.max_clients=2", NULL};
	kvtd_start_test(sock_path, dir, args8);
	cut_at_deadline(KVTD_GET, 10, "GET 1 of the cap");
	cut_at_deadline(KVTD_GET, 11, "GET 2 of the cap");
	cut_at_deadline(KVTD_GET, 12, "GET past the cap"); /* before: answered at ~3 s */
	r = raw_attach();
	st = raw_status(&r);
	printf("daemon_cut: at the cap: cut %llu, running %llu, connections %llu\n",
	       (unsigned long long)st.cut, (unsigned long long)st.cut_running,
	       (unsigned long long)st.connections);
	CHECK_EQ(st.cut, 3);
	CHECK_EQ(st.cut_running, 3);
	CHECK_EQ(st.connections, 2); /* the third's place is held until its read ends */
	CHECK_EQ(st.regions_mapped, 4); /* each read's region (still written into) and ours */
	WAIT_STATUS(&r, st, st.cut_running == 0 && st.connections == 1);
	CHECK_EQ(st.regions_mapped, 1);
	raw_close(&r);
	kvtd_stop();
	test_rmdir(dir);
	printf("daemon_cut: ok\n");
	return 0;
}
