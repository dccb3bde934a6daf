/*
 * daemon_hung.c - a client-mode store against a daemon that stops answering (SIGSTOP:
 * alive, its socket still accepting, nothing coming back), with the real daemon binary.
 * Why a test of its own: the client runs its calls one at a time over one connection, and
 * before the backoff (src/daemon_client.c, DOWN_BACKOFF_MAX_MS) every queued call waited
 * out its own store.daemon_timeout_ms - 10 calls, 10 timeouts; inside an inference server
 * a hang is an outage. With a 1 s timeout (T):
 *  1. 10 calls queued on the stopped daemon (6 lookups, 4 gets) all complete within about
 *     one T, not ten: the first times out and marks the daemon down, the rest miss at once
 *     (the lookups answer 0, the gets -ENOENT with the timeout as their cause); *_sync
 *     calls during the backoff (lookup, get, put) return at once too;
 *  2. after the backoff one call at a time tries the daemon (the probe): a get_sync on
 *     another thread waits its T, while a lookup_sync and 5 queued gets meanwhile return
 *     at once;
 *  3. SIGCONT: calls fail fast until the backoff (doubled by the failed probe: 2 T) ends,
 *     then succeed again, the bytes put before the stop included;
 *  4. that success reset the backoff: a new stop costs one T of backoff again.
 */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include "internal.h"
#include "lib/daemon_harness.h"

/* the daemon timeout every check is measured in; 2 s under a sanitizer, where a reconnect
 * and attach alone can take a good part of 1 s (lib/daemon_harness.h) */
#define T_MS (TEST_SANITIZED ? 2000 : 1000)
#define T_NS ((uint64_t)T_MS * 1000000u)

static char *dir, sock_path[100];
static size_t PAYLOAD;

static void key_of(uint64_t i, struct kvt_key *k)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->bytes, &i, sizeof(i));
	k->bytes[31] = 0x6b;
}

static double in_t(uint64_t ns) /* a duration in timeouts */
{
	return (double)ns / (double)T_NS;
}

/* one asynchronous call: when it completed and how */
struct done {
	uint64_t at;
	struct kvt_result res;
};

static void on_done(void *arg, const struct kvt_result *res)
{
	struct done *d = arg;
	d->at = kvt__now_ns();
	d->res = *res;
}

/* Poll until every one of d[0..n) completed, or give up after 20 T; the latest completion
 * time. */
static uint64_t wait_all(struct kvt_store *s, struct done *d, int n)
{
	uint64_t t0 = kvt__now_ns(), last = 0;
	for (;;) {
		int left = 0;
		for (int i = 0; i < n; i++)
			left += d[i].at == 0;
		if (!left)
			break;
		CHECKM(kvt__now_ns() - t0 < 20 * T_NS, "%d of %d calls still not complete after 20 "
						       "timeouts", left, n);
		struct pollfd p = {.fd = kvt_store_fd(s), .events = POLLIN};
		poll(&p, 1, 10);
		kvt_poll(s, 0);
	}
	for (int i = 0; i < n; i++)
		last = KVT_MAX(last, d[i].at);
	return last;
}

struct prober {
	struct kvt_store *s;
	struct kvt_key k;
	void *buf;
	int rc;
	uint64_t took;
};

static void *probe_main(void *arg)
{
	struct prober *p = arg;
	uint64_t t = kvt__now_ns();
	p->rc = kvt_get_sync(p->s, &p->k, 0, 0, p->buf, PAYLOAD, NULL);
	p->took = kvt__now_ns() - t;
	return NULL;
}

/* Calls until a get_sync hits (each miss before must be at once); when it did. */
static uint64_t until_hit(struct kvt_store *s, const struct kvt_key *k, uint8_t *buf,
			  uint64_t seed)
{
	uint64_t t0 = kvt__now_ns();
	for (;;) {
		memset(buf, 0, PAYLOAD);
		uint64_t t = kvt__now_ns();
		int rc = kvt_get_sync(s, k, 0, 0, buf, PAYLOAD, NULL);
		uint64_t now = kvt__now_ns();
		if (rc == 0) {
			CHECK(test_check(buf, PAYLOAD, seed));
			return now;
		}
		CHECK_RC(rc, -ENOENT);
		CHECKM(now - t < T_NS / 2, "a get in the backoff took %.2f T", in_t(now - t));
		CHECKM(now - t0 < 6 * T_NS, "no hit within 6 T of the daemon running again");
		usleep(20000);
	}
}

int main(void)
{
	dir = test_tmpdir("daemon_hung");
	snprintf(sock_path, sizeof(sock_path), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	const char *extra[] = {"--set", "dram.bytes=16MiB", NULL};
	kvtd_start_test(sock_path, dir, extra);
	struct kvt_config *cfg = test_config("dram,nvme", dir);
	test_set(cfg, "store.daemon", kvtd_sock);
	char t_ms[16];
	snprintf(t_ms, sizeof(t_ms), "%d", T_MS);
	test_set(cfg, "store.daemon_timeout_ms", t_ms);
	struct kvt_store *s = test_open(cfg);
	PAYLOAD = kvt_payload_bytes(kvt_store_geometry(s), 16);
	uint8_t *buf = malloc(PAYLOAD), *outs = malloc(PAYLOAD * 5);
	struct kvt_key k, k2;
	key_of(1, &k);
	key_of(2, &k2);
	test_fill(buf, PAYLOAD, 1);
	CHECK_RC(kvt_put_sync(s, &k, NULL, 16, buf, PAYLOAD), 0);

	/* 1. ten queued calls on a stopped daemon */
	kill(kvtd_pid, SIGSTOP);
	waitpid(kvtd_pid, NULL, WUNTRACED); /* returns once it is stopped */
	struct done d[10] = {0};
	int8_t tiers[6];
	uint64_t t0 = kvt__now_ns();
	for (int i = 0; i < 6; i++)
		CHECK_RC(kvt_lookup(s, &k, 1, &tiers[i], on_done, &d[i]), 0);
	for (int i = 6; i < 10; i++)
		CHECK_RC(kvt_get(s, &k, 0, 0, outs + (size_t)(i - 6) * PAYLOAD, PAYLOAD, on_done,
				 &d[i]),
			 0);
	uint64_t last = wait_all(s, d, 10);
	printf("10 calls queued on a stopped daemon: the last completed after %.2f T\n",
	       in_t(last - t0));
	for (int i = 0; i < 10; i++)
		printf("  call %d (%s): %.2f T, status %d cause %d\n", i, i < 6 ? "lookup" : "get",
		       in_t(d[i].at - t0), d[i].res.status, d[i].res.cause);
	CHECKM(last - t0 < T_NS * 16 / 10, "10 queued calls took %.2f timeouts, not about one",
	       in_t(last - t0));
	for (int i = 0; i < 6; i++)
		CHECK(d[i].res.status == 0 && tiers[i] == KVT_TIER_NONE);
	for (int i = 6; i < 10; i++)
		CHECK(d[i].res.status == -ENOENT && d[i].res.cause == -ETIMEDOUT);
	/* the *_sync calls, on this thread, during the backoff (it ends 2 T after t0 at the
	 * earliest: the first call timed out at T or later) */
	uint64_t t1 = kvt__now_ns();
	int8_t tier = 5;
	CHECK_RC(kvt_lookup_sync(s, &k, 1, &tier), 0);
	CHECK(tier == KVT_TIER_NONE);
	CHECK_RC(kvt_get_sync(s, &k, 0, 0, outs, PAYLOAD, NULL), -ENOENT);
	CHECK_RC(kvt_put_sync(s, &k2, NULL, 16, buf, PAYLOAD), -ETIMEDOUT);
	uint64_t t2 = kvt__now_ns();
	printf("lookup_sync, get_sync, put_sync in the backoff: %.3f T\n", in_t(t2 - t1));
	CHECKM(t2 - t1 < T_NS / 2, "sync calls in the backoff took %.2f T", in_t(t2 - t1));

	/* 2. the backoff over (it began when the first call completed at the latest): one
	 * probe, on another thread; everything else meanwhile returns at once */
	uint64_t first = d[0].at;
	for (int i = 1; i < 10; i++)
		first = KVT_MIN(first, d[i].at);
	uint64_t end = first + T_NS + T_NS / 10, now = kvt__now_ns();
	if (now < end)
		usleep((useconds_t)((end - now) / 1000));
	struct prober pr = {.s = s, .k = k, .buf = outs + 4 * PAYLOAD};
	pthread_t th;
	uint64_t t3 = kvt__now_ns();
	CHECK(pthread_create(&th, NULL, probe_main, &pr) == 0);
	usleep(T_MS * 300); /* 0.3 T: the probe is waiting on the daemon */
	struct done d2[5] = {0};
	for (int i = 0; i < 4; i++)
		CHECK_RC(kvt_get(s, &k, 0, 0, outs + (size_t)i * PAYLOAD, PAYLOAD, on_done, &d2[i]),
			 0);
	CHECK_RC(kvt_lookup(s, &k, 1, &tiers[0], on_done, &d2[4]), 0);
	uint64_t t4 = kvt__now_ns();
	CHECK_RC(kvt_lookup_sync(s, &k, 1, &tier), 0);
	uint64_t lookup_took = kvt__now_ns() - t4;
	last = wait_all(s, d2, 5);
	pthread_join(th, NULL);
	printf("after the backoff: the probe (get_sync) %.2f T, rc %d; a lookup_sync meanwhile "
	       "%.3f T; 5 queued calls done %.2f T after they were queued\n",
	       in_t(pr.took), pr.rc, in_t(lookup_took), in_t(last - t4));
	CHECK_RC(pr.rc, -ENOENT);
	CHECKM(pr.took >= T_NS * 8 / 10 && pr.took < T_NS * 16 / 10,
	       "the probe took %.2f T, not one", in_t(pr.took));
	CHECKM(lookup_took < T_NS / 2, "a lookup_sync behind the probe took %.2f T",
	       in_t(lookup_took));
	CHECKM(last - t4 < T_NS / 2, "calls queued behind the probe took %.2f T",
	       in_t(last - t4));
	for (int i = 0; i < 4; i++)
		CHECK(d2[i].res.status == -ENOENT && d2[i].res.cause == -ETIMEDOUT);
	CHECK(d2[4].res.status == 0);

	/* 3. the daemon runs again: the failed probe doubled the backoff to 2 T (it ends
	 * about 2 T after the probe gave up) */
	uint64_t probe_end = t3 + pr.took;
	kill(kvtd_pid, SIGCONT);
	uint64_t hit = until_hit(s, &k, buf, 1);
	printf("SIGCONT: the first hit %.2f T after the probe gave up\n", in_t(hit - probe_end));
	CHECKM(hit - probe_end >= T_NS * 15 / 10 && hit - probe_end < T_NS * 3,
	       "the first hit came %.2f T after the failed probe, not after a 2 T backoff",
	       in_t(hit - probe_end));
	struct done d3[2] = {0};
	CHECK_RC(kvt_lookup(s, &k, 1, &tiers[0], on_done, &d3[0]), 0);
	CHECK_RC(kvt_get(s, &k, 0, 0, outs, PAYLOAD, on_done, &d3[1]), 0);
	wait_all(s, d3, 2);
	CHECK(d3[0].res.status == 1 && tiers[0] == 0);
	CHECK_RC(d3[1].res.status, 0);
	CHECK(test_check(outs, PAYLOAD, 1));
	CHECK_RC(kvt_put_sync(s, &k2, NULL, 16, buf, PAYLOAD), 0);

	/* 4. reset by the success: the next stop costs one T of backoff, not 4 */
	kill(kvtd_pid, SIGSTOP);
	waitpid(kvtd_pid, NULL, WUNTRACED);
	uint64_t t5 = kvt__now_ns();
	CHECK_RC(kvt_get_sync(s, &k, 0, 0, buf, PAYLOAD, NULL), -ENOENT);
	uint64_t t6 = kvt__now_ns();
	CHECKM(t6 - t5 >= T_NS * 8 / 10, "a get on the stopped daemon missed after %.2f T",
	       in_t(t6 - t5));
	kill(kvtd_pid, SIGCONT);
	hit = until_hit(s, &k, buf, 1);
	printf("stopped again: the first hit %.2f T after the timeout\n", in_t(hit - t6));
	CHECKM(hit - t6 < T_NS * 16 / 10, "the first hit came %.2f T after the timeout: the "
					  "backoff was not reset", in_t(hit - t6));

	free(buf);
	free(outs);
	kvt_store_close(s);
	kvtd_stop();
	test_rmdir(dir);
	printf("daemon_hung: ok\n");
	return 0;
}
