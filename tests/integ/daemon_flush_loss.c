/* kvt-test-labels: server */
/*
 * daemon_flush_loss.c - every kvtierd client hears of a loss at its next flush. Chunks a
 * client put and DRAM evicted while no deeper tier could take them (evicted_unsaved) are
 * gone: a flush after that must not answer 0 - to any client that was attached when they
 * went. Until 2026-12-06 the store kept one count of the losses already reported, so of the
 * clients sharing one daemon only the first to flush heard of it; the others' flushes
 * answered 0 over the chunks gone (a review leftover).
 *
 * kvtierd with DRAM (1 MiB) over a Redis tier whose port nobody listens on yet: client A
 * puts 120 chunks (DRAM holds ~30: the rest are evicted unsaved), then a real redis-server
 * starts on that port. A flushes until it answers 0 (its first answers are the circuit's,
 * then the loss). B, attached before the puts, then flushes: -EIO naming the Redis tier,
 * and 0 the time after. C, attached after the loss, flushes 0 at once. D, attached before
 * the loss, reconnects after it (its connection dropped, as any cut or timeout does): its
 * flush still fails -EIO - until 2026-12-06 a connection's count started at the losses of
 * the moment it was made, and D's flush answered 0 (a review's reproducer); and B,
 * reconnected after it heard, flushes 0 (the count it was told of is carried over).
 * Exit 0 pass, 1 fail, 77 when redis-server is not installed (a failure under CI=true).
 */
#include <signal.h>

#include "daemon_client.h"
#include "internal.h"
#include "lib/daemon_harness.h"
#include "lib/redis_server.h"

/* Drop s's connection to the daemon and make a new one: an UNPIN of a pin it does not hold,
 * which the daemon answers by closing; the next call reconnects. */
static void reconnect(struct kvt_store *s)
{
	struct kvt_client_pin bogus = {.slot = 0, .lease = 99999, .gen = 1};
	(void)kvt__client_unpin(kvt__store_client(s), &bogus);
	struct kvt_stats st;
	CHECK_RC(kvt_stats(s, &st), 0);
}

static int flush_status(struct kvt_store *s, struct kvt_result *res)
{
	struct test_box fb = {0};
	test_flush_wait(s, &fb);
	*res = fb.res;
	return fb.res.status;
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	struct rs r;
	CHECK_EQ(rs_prepare(&r, NULL), 0);
	r.port = rs_free_port();
	char *dir = test_tmpdir("daemon_flush_loss");
	char sock[100], url[128], urlset[160];
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", r.port);
	snprintf(urlset, sizeof(urlset), "redis.url=%s", url);
	const char *extra[] = {"--set", "store.tiers=dram,redis", "--set", urlset,
			       "--set", "redis.timeout_ms=300", "--set", "dram.bytes=1MiB", NULL};
	kvtd_start_test(sock, dir, extra);
	struct kvt_store *a = kvtd_client_store(dir), *b = kvtd_client_store(dir);
	struct kvt_store *d = kvtd_client_store(dir);
	const struct kvt_geometry *g = kvt_store_geometry(a);
	size_t len = kvt_payload_bytes(g, g->chunk_tokens);
	uint8_t *buf = malloc(len);
	CHECK(buf);
	enum { N = 120 };
	for (int i = 0; i < N; i++) {
		struct kvt_key k = {{0}};
		k.bytes[0] = 0x5c;
		k.bytes[1] = (uint8_t)i;
		test_fill(buf, len, 700 + (uint64_t)i);
		CHECK_RC(kvt_put_sync(a, &k, NULL, g->chunk_tokens, buf, len), 0);
	}
	struct kvt_stats st;
	CHECK_RC(kvt_stats(a, &st), 0);
	printf("daemon_flush_loss: %d puts with the Redis tier down: %llu evicted unsaved\n", N,
	       (unsigned long long)st.evicted_unsaved);
	CHECK(st.evicted_unsaved > 0);
	struct kvt_store *c = kvtd_client_store(dir); /* attached after the loss */
	reconnect(d);

	int rc = rs_launch(&r);
	if (rc == 77) {
		fprintf(stderr, "SKIP: redis-server is not installed\n");
		return 77;
	}
	CHECK_EQ(rc, 0);
	struct kvt_result res;
	int eio = 0;
	uint64_t t0 = test_now_ns();
	while ((rc = flush_status(a, &res)) != 0) {
		CHECKM(rc == -EIO, "client A's flush: %s", kvt_strerror(rc));
		CHECKM(test_ms_since(t0) < 15000, "client A's flush still fails after 15 s");
		eio++;
		usleep(100000);
	}
	int rb = flush_status(b, &res);
	int tb = res.tier;
	int rb2 = flush_status(b, &res);
	int rcc = flush_status(c, &res);
	printf("daemon_flush_loss: after the tier is back: A's flush -EIO %d times then 0; B "
	       "(attached before the loss) %d (tier %d), then %d; C (attached after) %d\n",
	       eio, rb, tb, rb2, rcc);
	CHECKM(rb == -EIO && tb == 1, "client B's first flush after the loss: %d, tier %d", rb,
	       tb);
	CHECK_EQ(rb2, 0);
	CHECK_EQ(rcc, 0);
	int rd = flush_status(d, &res);
	int td = res.tier;
	reconnect(b);
	int rb3 = flush_status(b, &res);
	printf("daemon_flush_loss: D (attached before, reconnected after the loss) %d (tier %d); "
	       "B reconnected after it heard: %d\n",
	       rd, td, rb3);
	CHECKM(rd == -EIO && td == 1, "client D's flush after a reconnect: %d, tier %d", rd, td);
	CHECK_EQ(rb3, 0);
	kvt_store_close(d);
	kvt_store_close(a);
	kvt_store_close(b);
	kvt_store_close(c);
	kvtd_stop();
	rs_stop(&r);
	free(buf);
	test_rmdir(dir);
	free(dir);
	printf("daemon_flush_loss: ok\n");
	return 0;
}
