/*
 * redis_dns_stall.c - the redis tier when its server's name cannot be looked up in time: a
 * DNS server that takes every query and answers none (a black hole on a loopback address,
 * made this process's only name server by bind-mounting a resolv.conf in a private mount
 * namespace). getaddrinfo() then blocks for resolv.conf's timeout (2 s here); the tier used
 * to call it on its I/O thread through hiredis, so a put waited those 2 s whatever
 * redis.timeout_ms said, and so did close. Now the lookup runs under redis.timeout_ms:
 *   - a put (no DRAM) fails within redis.timeout_ms plus slack, the log saying "name lookup";
 *   - a second put waits for the same lookup, not a new one, and fails as fast;
 *   - kvt_store_close returns within the same bound;
 *   - kvtier ls's listing (the tier's scan) fails within it too;
 *   - and the premise: a plain getaddrinfo() of the name does take about 2 s here.
 * The engine's own deadlines are set far away so that only the tier's can end the calls.
 * Needs root (a mount namespace); exit 0 pass, 1 fail.
 */
#include <netdb.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "engine.h"
#include "testlib.h"
#include "tier.h"
#include "lib/dns_blackhole.h"

#define HOST "kvt-dns-stall.invalid"
#define NS_ADDR "127.0.0.77"
#define TIMEOUT_MS 300
#define SLACK_MS 700

static _Atomic int lookup_lines;

static void log_cb(void *arg, int level, const char *msg)
{
	(void)arg;
	if (strstr(msg, "name lookup"))
		lookup_lines++;
	if (getenv("KVT_TEST_VERBOSE") || level <= KVT_LOG_WARN)
		fprintf(stderr, "  [lib %d] %s\n", level, msg);
}

static int count_key(void *arg, const struct kvt_key *key, uint64_t bytes)
{
	(void)arg;
	(void)key;
	(void)bytes;
	return 0;
}

static struct kvt_config *config(const char *dir)
{
	struct kvt_config *c = test_config("redis", dir);
	kvt_config_set_log(c, log_cb, NULL, KVT_LOG_DEBUG);
	test_set(c, "redis.url", "redis://" HOST ":6379");
	test_set(c, "redis.timeout_ms", "300");
	test_set_deadline(c, "20000", "10000"); /* the engine leaves it to the tier */
	return c;
}

int main(void)
{
	char *dir = test_tmpdir("redis_dns_stall");
	private_resolver(dir, NS_ADDR);

	struct kvt_store *s = test_open(config(dir));
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t len = kvt_payload_bytes(g, g->chunk_tokens);
	void *buf = malloc(len);
	test_fill(buf, len, 1);
	struct kvt_key k[2];
	test_chain_keys(s, k, 2, 5);
	for (int i = 0; i < 2; i++) {
		uint64_t t0 = test_now_ns();
		int rc = kvt_put_sync(s, &k[i], NULL, g->chunk_tokens, buf, len);
		double ms = test_ms_since(t0);
		printf("  put %d with the name server silent: %s after %.0f ms\n", i + 1,
		       kvt_strerror(rc), ms);
		CHECK(rc < 0);
		CHECK(ms < TIMEOUT_MS + SLACK_MS);
	}
	CHECK(lookup_lines > 0);
	uint64_t t0 = test_now_ns();
	kvt_store_close(s);
	double close_ms = test_ms_since(t0);
	printf("  close: %.0f ms\n", close_ms);
	CHECK(close_ms < TIMEOUT_MS + SLACK_MS);

	/* the listing kvtier ls and verify use: its own connection, the same bound */
	struct kvt_config *c = config(dir);
	test_set(c, "store.read_only", "true");
	s = test_open(c);
	t0 = test_now_ns();
	struct kvt_tier *t = kvt__store_tier(s, 0);
	int rc = t->ops->scan(t, count_key, NULL);
	double scan_ms = test_ms_since(t0);
	printf("  listing: %s after %.0f ms\n", kvt_strerror(rc), scan_ms);
	CHECK(rc < 0);
	CHECK(scan_ms < TIMEOUT_MS + SLACK_MS);
	kvt_store_close(s);

	/* the premise: the name server really is silent for the resolv.conf timeout */
	struct addrinfo *ai = NULL, hints = {.ai_socktype = SOCK_STREAM};
	t0 = test_now_ns();
	int e = getaddrinfo(HOST, "6379", &hints, &ai);
	double gai_ms = test_ms_since(t0);
	printf("  getaddrinfo itself: %s after %.0f ms\n", e ? gai_strerror(e) : "an answer",
	       gai_ms);
	CHECK(e != 0);
	CHECK(gai_ms > 1500);

	free(buf);
	test_rmdir(dir);
	free(dir);
	printf("redis_dns_stall: ok\n");
	return 0;
}
