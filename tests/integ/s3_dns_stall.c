/*
 * s3_dns_stall.c - the s3 tier when its endpoint's name cannot be looked up in time (a name
 * server that answers nothing, lib/dns_blackhole.h: getaddrinfo blocks 2 s) answers every
 * call by s3.timeout_ms (300 ms here), and closes at once with a call in its lookup. Why:
 * libcurl looks names up on a thread of its own and, when a transfer times out during the
 * lookup, waited for that thread before returning - inside the tier's one I/O thread, so
 * every S3 call waited the 2 s (10 s and more with a default resolv.conf), and so did
 * close (until 2026-12-06: CURLOPT_QUICK_EXIT; found by review). The redis tier's own case
 * is redis_dns_stall. Needs root (a mount namespace); exit 0 pass, 1 fail.
 */
#include <netdb.h>

#include "lib/tierh.h"
#include "testlib.h"
#include "lib/dns_blackhole.h"

extern const struct kvt_tier_ops kvt__tier_s3_ops;

#define HOST "kvt-s3-dns-stall.invalid"
#define NS_ADDR "127.0.0.78"
#define TIMEOUT_MS 300
#define SLACK_MS 500

int main(void)
{
	char *dir = test_tmpdir("s3_dns_stall");
	private_resolver(dir, NS_ADDR);
	setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "secret", 1);
	const char *kv[] = {"s3.endpoint", "http://" HOST ":9000", "s3.bucket", "bkt",
			    "s3.timeout_ms", "300", "s3.create_bucket", "false", NULL};
	struct kvt_config *c = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_s3_ops, c, &t), 0);
	kvt_config_destroy(c);
	static uint8_t buf[8192];
	struct kvt_key k;
	for (int i = 0; i < 3; i++) {
		th_key(&k, 0x5500 + (uint64_t)i, 1);
		uint64_t t0 = test_now_ns();
		int rc = th_write(t, &k, buf, sizeof(buf));
		double ms = test_ms_since(t0);
		printf("write %d: %s after %.0f ms\n", i, strerror(-rc), ms);
		CHECK(rc < 0);
		CHECKM(ms < TIMEOUT_MS + SLACK_MS, "write %d answered after %.0f ms", i, ms);
	}
	/* a write, then an exists 150 ms later: the second does not wait behind the first */
	struct th_wait w1, w2;
	th_key(&k, 0x5600, 1);
	th_wait_init(&w1);
	uint64_t t1 = test_now_ns();
	CHECK_EQ(t->ops->write(t, &k, buf, sizeof(buf), th_cb, &w1), 0);
	usleep(150 * 1000);
	uint8_t present = 0;
	th_wait_init(&w2);
	uint64_t t2 = test_now_ns();
	int rc = th_wait_done(&w2, t->ops->exists(t, &k, 1, &present, th_cb, &w2), TH_TIMEOUT);
	double ms2 = test_ms_since(t2);
	th_wait_done(&w1, 0, TH_TIMEOUT);
	double ms1 = test_ms_since(t1);
	th_wait_fini(&w1);
	th_wait_fini(&w2);
	printf("write then exists 150 ms later: exists %s after %.0f ms (write %.0f ms)\n",
	       strerror(-rc), ms2, ms1);
	CHECKM(ms2 < TIMEOUT_MS + SLACK_MS, "exists answered after %.0f ms", ms2);
	/* close with a write in its lookup */
	th_key(&k, 0x5700, 1);
	th_wait_init(&w1);
	CHECK_EQ(t->ops->write(t, &k, buf, sizeof(buf), th_cb, &w1), 0);
	usleep(50 * 1000);
	uint64_t t3 = test_now_ns();
	th_close(t);
	double ms3 = test_ms_since(t3);
	th_wait_fini(&w1);
	printf("close with a write in its lookup: %.0f ms\n", ms3);
	CHECKM(ms3 < TIMEOUT_MS + SLACK_MS, "close took %.0f ms", ms3);
	/* the premise: a lookup of the name does stall here */
	struct addrinfo *ai = NULL, hints = {.ai_socktype = SOCK_STREAM};
	uint64_t t4 = test_now_ns();
	int e = getaddrinfo(HOST, "9000", &hints, &ai);
	double ms4 = test_ms_since(t4);
	printf("premise: getaddrinfo %s after %.0f ms\n", e ? gai_strerror(e) : "ok", ms4);
	CHECKM(e && ms4 > 1500, "the name server should stall the lookup");
	test_rmdir(dir);
	free(dir);
	printf("s3_dns_stall: ok\n");
	return 0;
}
