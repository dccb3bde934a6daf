/*
 * daemon_prefetch_sync_deadline.c - kvt_prefetch_sync with a deadline on a client-mode store
 * returns by that deadline, as in process (include/kvtier.h: "With a deadline it returns
 * by then ... or -ETIME"): kvt__client_prefetch_sync passes the deadline to the daemon only,
 * not as the call's own bound (by_ns), so its waits - for io_lock behind another call, for
 * earlier removes, for a daemon that does not answer - end at store.daemon_timeout_ms.
 *  1. the daemon stopped (SIGSTOP): a prefetch_sync with a 100 ms deadline;
 *  2. (resumed) another thread's get held by a 1.5 s tier holds the connection: a
 *     prefetch_sync with a 100 ms deadline.
 * Each must return -ETIME within ~300 ms, as in process (until 2026-12-06: 0 after 2002 ms
 * and after 1400 ms - a review).
 */
#include <pthread.h>
#include <signal.h>

#include "internal.h"
#include "lib/daemon_harness.h"

static struct kvt_store *S;
static size_t PAYLOAD;

static void *slow_get(void *arg)
{
	struct kvt_key absent;
	memset(absent.bytes, 0x43, sizeof(absent.bytes));
	uint8_t *out = malloc(PAYLOAD);
	struct kvt_result res;
	(void)kvt_get_sync(S, &absent, 0, 0, out, PAYLOAD, &res); /* ~1.5 s: the faulty tier */
	free(out);
	(void)arg;
	return NULL;
}

int main(void)
{
	char *dir = test_tmpdir("daemon_pf_deadline"), sock_path[100];
	snprintf(sock_path, sizeof(sock_path), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	const char *extra[] = {"--set", "store.tiers=dram,faulty", "--set", "faulty.inner=nvme",
			       "--set", "faulty.delay_ms=1500", NULL};
	kvtd_start_test(sock_path, dir, extra);
	S = kvtd_client_store(dir); /* store.daemon_timeout_ms=2000 */
	PAYLOAD = kvt_payload_bytes(kvt_store_geometry(S), 16);
	memcpy(kvtd_ns, kvt_store_ns_id(S), sizeof(kvtd_ns)); /* for raw_attach's HELLO */
	struct kvt_key k;
	memset(k.bytes, 0x42, sizeof(k.bytes));
	uint8_t *buf = malloc(PAYLOAD);
	test_fill(buf, PAYLOAD, 3);
	CHECK_RC(kvt_put_sync(S, &k, NULL, 16, buf, PAYLOAD), 0);

	/* 1 */
	kvtd_pause();
	uint64_t t0 = test_now_ns();
	int rc = kvt_prefetch_sync(S, &k, 1, kvt__now_ns() + 100 * 1000000ull);
	double ms1 = test_ms_since(t0);
	int rc1 = rc;
	kill(kvtd_pid, SIGCONT);
	printf("1. stopped daemon: prefetch_sync(deadline 100 ms) = %d after %.0f ms\n", rc, ms1);
	usleep(2500 * 1000); /* past the backoff the timeout armed */
	int8_t tier;
	CHECK_RC(kvt_lookup_sync(S, &k, 1, &tier), 1); /* the probe: the daemon is up again */

	/* 2 */
	pthread_t t;
	CHECK(pthread_create(&t, NULL, slow_get, NULL) == 0);
	/* The get holds the connection: seen in progress at the daemon (polled from a
	 * connection of its own; a status call does not count itself). A fixed 100 ms was a
	 * guess: a prefetch sent first would find the chunk in DRAM and return 1. */
	struct raw r = raw_attach();
	struct kvtd_status st = raw_status(&r);
	for (int i = 0; i < 1000 && st.ops_in_progress < 1; i++) {
		usleep(5 * 1000);
		st = raw_status(&r);
	}
	raw_close(&r);
	CHECKM(st.ops_in_progress >= 1, "the slow get never reached the daemon");
	t0 = test_now_ns();
	rc = kvt_prefetch_sync(S, &k, 1, kvt__now_ns() + 100 * 1000000ull);
	double ms2 = test_ms_since(t0);
	pthread_join(t, NULL);
	printf("2. connection held by a slow get: prefetch_sync(deadline 100 ms) = %d after "
	       "%.0f ms\n", rc, ms2);
	CHECKM(rc1 == -ETIME && rc == -ETIME, "prefetch_sync past its deadline: %d, %d", rc1, rc);
	CHECKM(ms1 < 300, "a prefetch_sync with a 100 ms deadline took %.0f ms", ms1);
	CHECKM(ms2 < 300, "a prefetch_sync with a 100 ms deadline took %.0f ms", ms2);
	kvt_store_close(S);
	free(buf);
	kvtd_stop();
	test_rmdir(dir);
	free(dir);
	printf("daemon_prefetch_sync_deadline: ok\n");
	return 0;
}
