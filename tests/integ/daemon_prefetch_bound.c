/*
 * daemon_prefetch_bound.c - a PREFETCH to a daemon whose store is at its in-flight bound
 * (store.max_inflight) is answered by its deadline, with the real daemon binary. Why: the
 * daemon retries a call its store refuses with -EAGAIN, and until 2026-12-06 a PREFETCH's
 * retries ignored the request's deadline - about a second of them - while the client stops
 * waiting at its deadline and takes a late answer for a dead daemon (every call, DRAM hits
 * included, then fails for the backoff: a busy daemon taken for a dead one).
 *  1. the one in-flight place held by a GET from another connection, stalled on a tier that
 *     answers after 3 s;
 *  2. a PREFETCH with a 300 ms deadline: answered within 700 ms (before: after ~1 s), and
 *     seen to meet the bound (STATUS busy_waits), or it tested nothing.
 *  3. PREFETCHes answered at their deadline run on, and at most daemon.max_clients of
 *     them: one connection sends 200 with a deadline 1 ms away, each of a key only the
 *     stalled tier could hold; another client's lookup of a chunk it put is then answered
 *     at once. Until 2026-12-06 every one ran on uncounted, the store's in-flight bound
 *     (64 here) filled, and the lookup failed -EAGAIN.
 */
#include <pthread.h>
#include <signal.h>

#include "internal.h"
#include "lib/daemon_harness.h"

static char *dir, sock_path[100];
/* the stalled GET's answer and how long it took */
static int get_status;
static uint64_t get_ms;

static void *stalled_get(void *arg)
{
	(void)arg;
	struct raw r = raw_attach();
	struct kvtd_req q = {.op = KVTD_GET, .off = 0, .len = 4096};
	memset(q.key.bytes, 0x5a, sizeof(q.key.bytes));
	struct kvtd_rep rep;
	uint64_t t0 = kvt__now_ns();
	get_status = raw_call(r.sock, &q, -1, &rep) < 0 ? -EPIPE : rep.res.status;
	get_ms = (kvt__now_ns() - t0) / 1000000; /* a miss, after the tier's 3 s */
	raw_close(&r);
	return NULL;
}

int main(void)
{
	dir = test_tmpdir("daemon_prefetch_bound");
	snprintf(sock_path, sizeof(sock_path), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	const char *extra[] = {"--set", "store.tiers=dram,faulty", "--set", "faulty.inner=nvme",
			       "--set", "faulty.delay_ms=3000", "--set", "store.max_inflight=1",
			       "--set", "store.tier_timeout_ms=10000", "--set",
			       "store.deadline_floor_ms=10000", NULL};
	kvtd_start_test(sock_path, dir, extra);
	struct kvt_store *s = kvtd_client_store(dir);
	memcpy(kvtd_ns, kvt_store_ns_id(s), sizeof(kvtd_ns));
	kvt_store_close(s);

	pthread_t t;
	CHECK(pthread_create(&t, NULL, stalled_get, NULL) == 0);
	/* The GET holds the store's one place: seen in progress at the daemon (a status call
	 * does not count itself), polled - a fixed 300 ms was a guess a slow attach could
	 * miss, and a PREFETCH run with the place free tests nothing - then given 100 ms to
	 * reach the store. */
	struct raw r = raw_attach();
	struct kvtd_status st = raw_status(&r);
	for (int i = 0; i < 1000 && st.ops_in_progress < 1; i++) {
		usleep(10 * 1000);
		st = raw_status(&r);
	}
	CHECKM(st.ops_in_progress >= 1, "the stalled GET never reached the daemon");
	usleep(100 * 1000);
	uint64_t busy_before = raw_status(&r).busy_waits;
	struct kvt_key k;
	memset(k.bytes, 0x6b, sizeof(k.bytes));
	memcpy(r.shm + 64, &k, sizeof(k));
	uint64_t t0 = kvt__now_ns();
	struct kvtd_req q = {.op = KVTD_PREFETCH, .off = 64, .len = sizeof(k) + 1, .n = 1,
			     .deadline_ns = t0 + 300 * 1000000ull};
	struct kvtd_rep rep;
	CHECK_RC(raw_call(r.sock, &q, -1, &rep), 0);
	uint64_t took_ms = (kvt__now_ns() - t0) / 1000000;
	printf("prefetch at the in-flight bound: status %d after %llu ms\n", rep.res.status,
	       (unsigned long long)took_ms);
	CHECKM(took_ms < 700, "a PREFETCH with a 300 ms deadline answered after %llu ms",
	       (unsigned long long)took_ms);
	CHECKM(rep.res.status == -ETIME || rep.res.status == -EAGAIN,
	       "a PREFETCH that could not start: status %d", rep.res.status);
	/* and it met the bound: the store refused a call while it ran (a PREFETCH that found
	 * the place free would pass the checks above and test nothing), and that call was the
	 * PREFETCH: the GET held the place from before and ran its 3 s (a GET the PREFETCH
	 * had beaten to the place would have been the one refused, and answered -EAGAIN) */
	st = raw_status(&r);
	raw_close(&r);
	pthread_join(t, NULL);
	printf("the stalled GET: status %d after %llu ms; busy waits %llu -> %llu\n", get_status,
	       (unsigned long long)get_ms, (unsigned long long)busy_before,
	       (unsigned long long)st.busy_waits);
	CHECKM(get_status != -EAGAIN && get_status != -EPIPE && get_ms >= 2500,
	       "the GET did not hold the store's place: status %d after %llu ms", get_status,
	       (unsigned long long)get_ms);
	CHECKM(st.busy_waits > busy_before, "the PREFETCH never met the store's in-flight bound");
	kvtd_stop();

	const char *extra3[] = {"--set", "store.tiers=dram,faulty", "--set", "faulty.inner=nvme",
				"--set", "faulty.delay_ms=3000", "--set", "store.max_inflight=64",
				"--set", "daemon.max_clients=8", "--set", "store.tier_timeout_ms=10000",
				"--set", "store.deadline_floor_ms=10000", NULL};
	kvtd_start_test(sock_path, dir, extra3);
	s = kvtd_client_store(dir);
	size_t payload = kvt_payload_bytes(kvt_store_geometry(s), 16);
	uint8_t *buf = calloc(1, payload);
	struct kvt_key put_key;
	memset(put_key.bytes, 0x71, sizeof(put_key.bytes));
	CHECK_RC(kvt_put_sync(s, &put_key, NULL, 16, buf, payload), 0);
	r = raw_attach();
	int busy = 0, late = 0;
	for (int i = 0; i < 200; i++) {
		memset(k.bytes, 0, sizeof(k.bytes));
		memcpy(k.bytes, &i, sizeof(i));
		k.bytes[31] = 0x3c;
		memcpy(r.shm + 64, &k, sizeof(k));
		q = (struct kvtd_req){.op = KVTD_PREFETCH, .off = 64, .len = sizeof(k) + 1, .n = 1,
				      .deadline_ns = kvt__now_ns() + 1000000ull};
		CHECK_RC(raw_call(r.sock, &q, -1, &rep), 0);
		busy += rep.res.status == -EBUSY;
		late += rep.res.status == -ETIME;
	}
	int8_t tier = KVT_TIER_NONE;
	t0 = kvt__now_ns();
	int hits = kvt_lookup_sync(s, &put_key, 1, &tier);
	took_ms = (kvt__now_ns() - t0) / 1000000;
	printf("200 prefetches past their deadline: %d answered -ETIME, %d refused -EBUSY; "
	       "another client's lookup: %d after %llu ms\n",
	       late, busy, hits, (unsigned long long)took_ms);
	CHECKM(hits == 1 && tier == 0, "a lookup of a chunk in DRAM behind abandoned prefetches: "
					"%d (tier %d)", hits, tier);
	CHECK(took_ms < 500);
	CHECK(late <= 8 && busy >= 150);
	/* a client's prefetch refused so is a hint not taken: what it had (0), not an error */
	int pf = kvt_prefetch_sync(s, &k, 1, kvt__now_ns() + 200 * 1000000ull);
	printf("a client's prefetch while the daemon refuses them: %d\n", pf);
	CHECK_EQ(pf, 0);
	raw_close(&r);
	kvt_store_close(s);
	free(buf);
	kvtd_stop();
	test_rmdir(dir);
	printf("daemon_prefetch_bound: ok\n");
	return 0;
}
