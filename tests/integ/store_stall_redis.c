/*
 * kvt-test-labels: server
 *
 * store_stall_redis.c - the engine's deadlines against a real redis-server that stops
 * answering (SIGSTOP: the connection stays open, nothing comes back - a hung server or a
 * partitioned network). The tier's own timeout (redis.timeout_ms) is set far away, so
 * only the engine's deadlines can end the calls:
 *   - put (no DRAM: it waits for its write), get, lookup, remove and flush each return
 *     within store.tier_timeout_ms plus slack, as an error or a miss;
 *   - with DRAM in front, puts return at once, write-behind misses its deadline, flush
 *     names the tier, and kvt_store_close returns in bounded time;
 *   - the miss is reported as a remote tier's, and after SIGCONT the store works again.
 * Exit 0 pass, 1 fail, 77 when redis-server is not installed (a failure under CI=true:
 * see CMakeLists.txt).
 */
#include <signal.h>
#include <unistd.h>

#include "engine.h"
#include "lib/redis_server.h"
#include "testlib.h"

#define CEIL_MS 400
#define SLACK_MS 600

static _Atomic int remote_lines;

static void log_cb(void *arg, int level, const char *msg)
{
	(void)arg;
	if (strstr(msg, "missed its deadline") && strstr(msg, "remote"))
		remote_lines++;
	if (getenv("KVT_TEST_VERBOSE") || level <= KVT_LOG_ERROR)
		fprintf(stderr, "  [lib %d] %s\n", level, msg);
}

static struct kvt_store *open_store(const char *dir, const char *tiers, const char *url)
{
	struct kvt_config *c = test_config(tiers, dir);
	kvt_config_set_log(c, log_cb, NULL, KVT_LOG_DEBUG);
	test_set(c, "redis.url", url);
	test_set(c, "redis.prefix", "kvt-stall:");
	test_set(c, "redis.timeout_ms", "60000");
	test_set_deadline(c, "400", "100");
	return test_open(c);
}

int main(void)
{
	struct rs r;
	int rc = rs_start(&r, NULL);
	if (rc == 77) {
		fprintf(stderr, "SKIP: redis-server is not installed\n");
		return 77;
	}
	CHECK_EQ(rc, 0);
	char url[128];
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", r.port);
	char *dir = test_tmpdir("stall-redis");
	enum { N = 8 };

	/* ---- no DRAM: every call is a Redis call ---- */
	struct kvt_store *s = open_store(dir, "redis", url);
	const struct kvt_geometry geo = *kvt_store_geometry(s), *g = &geo;
	size_t payload = kvt_payload_bytes(g, g->chunk_tokens);
	void *buf = malloc(payload);
	struct kvt_key k[N + 2];
	test_chain_keys(s, k, N + 2, 7);
	for (int i = 0; i < N; i++) {
		test_fill(buf, payload, (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &k[i], NULL, g->chunk_tokens, buf, payload), 0);
	}
	for (int i = 0; i < N; i++) {
		CHECK_RC(kvt_get_sync(s, &k[i], 0, 0, buf, payload, NULL), 0);
		CHECK(test_check(buf, payload, (uint64_t)i));
	}

	rs_signal(&r, SIGSTOP);
	usleep(20000);
	double ms;
	TEST_BOUNDED(ms, CEIL_MS + SLACK_MS, "put",
		     rc = kvt_put_sync(s, &k[N], NULL, g->chunk_tokens, buf, payload),
		     "  stopped server: put %.0f ms (%s)\n", ms, kvt_strerror(rc));
	CHECK_RC(rc, -ETIMEDOUT);

	TEST_BOUNDED(ms, CEIL_MS + SLACK_MS, "get",
		     rc = kvt_get_sync(s, &k[0], 0, 0, buf, payload, NULL),
		     "  stopped server: get %.0f ms (%s)\n", ms, kvt_strerror(rc));
	CHECK_RC(rc, -ENOENT);

	int8_t tiers[N];
	TEST_BOUNDED(ms, CEIL_MS + SLACK_MS, "lookup", rc = kvt_lookup_sync(s, k, N, tiers),
		     "  stopped server: lookup %.0f ms (%d found)\n", ms, rc);
	CHECK_RC(rc, 0);

	TEST_BOUNDED(ms, CEIL_MS + SLACK_MS, "remove", rc = kvt_remove_sync(s, &k[1]),
		     "  stopped server: remove %.0f ms (%d removed)\n", ms, rc);
	CHECK_RC(rc, 0);

	/* A burst of gets at once: each within its deadline, none waiting for the others. */
	struct test_box b[N];
	void *bufs = malloc(payload * N);
	TEST_BOUNDED(ms, CEIL_MS + SLACK_MS, "burst", test_get_burst(s, k, N, bufs, payload, b),
		     "  stopped server: %d concurrent gets done in %.0f ms\n", N, ms);
	for (int i = 0; i < N; i++)
		CHECK_RC(b[i].res.status, -ENOENT);
	free(bufs);

	TEST_BOUNDED(ms, 3000, "close", kvt_store_close(s), "  stopped server: close %.0f ms\n", ms);
	CHECKM(remote_lines > 0, "a remote tier's miss is reported as remote");

	/* ---- DRAM in front, write-through: puts at once, write-behind and flush bounded,
	 * close bounded ---- */
	rs_signal(&r, SIGCONT);
	s = open_store(dir, "dram,redis", url);
	test_put_chain(s, k, N, buf, payload, g->chunk_tokens, 100); /* warm: the tier answers */
	CHECK_RC(kvt_flush_sync(s), 0);
	rs_signal(&r, SIGSTOP);
	usleep(20000);
	struct kvt_key k2[N];
	test_chain_keys(s, k2, N, 8);
	TEST_BOUNDED(ms, 300, "puts", test_put_chain(s, k2, N, buf, payload, g->chunk_tokens, 200),
		     "  stopped server, DRAM in front: %d puts %.1f ms\n", N, ms);
	struct test_box fb = {0};
	TEST_BOUNDED(ms, 2 * CEIL_MS + SLACK_MS, "flush", test_flush_wait(s, &fb),
		     "  stopped server: flush %.0f ms, status %s, tier %d\n", ms,
		     kvt_strerror(fb.res.status), fb.res.tier);
	CHECK(fb.res.status < 0);
	CHECK_EQ(fb.res.tier, 1);
	struct kvt_stats st;
	kvt_stats(s, &st);
	CHECKM(st.tier[1].writes_skipped >= N, "write-behind misses counted (%llu)",
	       (unsigned long long)st.tier[1].writes_skipped);
	CHECKM(st.tier[1].deadline_misses >= N, "deadline misses in the public stats (%llu)",
	       (unsigned long long)st.tier[1].deadline_misses);
	CHECK_EQ(st.tier[0].deadline_misses, 0); /* DRAM never misses one */
	/* more puts queued behind the stall, then close at once */
	for (int i = 0; i < N; i++) {
		test_fill(buf, payload, 300 + (uint64_t)i);
		kvt_put_sync(s, &k[i], NULL, g->chunk_tokens, buf, payload);
	}
	TEST_BOUNDED(ms, 3000, "close", kvt_store_close(s),
		     "  stopped server: close with write-behind out %.0f ms\n", ms);

	/* ---- SIGCONT: works again ---- */
	rs_signal(&r, SIGCONT);
	s = open_store(dir, "redis", url);
	test_fill(buf, payload, 999);
	CHECK_RC(kvt_put_sync(s, &k[N + 1], NULL, g->chunk_tokens, buf, payload), 0);
	CHECK_RC(kvt_get_sync(s, &k[N + 1], 0, 0, buf, payload, NULL), 0);
	CHECK(test_check(buf, payload, 999));
	kvt_store_close(s);

	free(buf);
	rs_stop(&r);
	test_rmdir(dir);
	free(dir);
	fprintf(stderr, "store_stall_redis: ok\n");
	return 0;
}
