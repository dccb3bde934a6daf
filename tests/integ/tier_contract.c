/*
 * kvt-test-labels: server
 *
 * tier_contract.c - one conformance suite of the tier contract (src/tier.h), run against
 * every backend this machine can host, each opened by name through kvt__tier_open as the
 * engine opens it: nvme, fs, faulty (around nvme, answers held back), and redis (a real
 * redis-server started here). The same checks for each:
 *   - every callback runs exactly once, never on the submitting thread;
 *   - a written object reads back whole (atomic publish: the self-checking object never
 *     reads torn), rewriting a key is harmless;
 *   - ranges: several segments in one read, a range past the end comes back short;
 *   - an absent key reads -ENOENT; exists answers a batch; remove makes a key absent and a
 *     second remove says -ENOENT; scan lists what is stored (where supported); flush
 *     answers (where supported);
 *   - 64 calls in flight at once each answer once;
 *   - close with calls in flight answers every one of them before it returns.
 * s3 and rados need the single-node Ceph: their harness (ceph_harness.h) runs the same
 * kinds of checks under the Ceph lock. Exit 0 pass, 1 fail, 77 when redis-server is not
 * installed (the other backends ran; a failure under CI=true).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "config.h"
#include "lib/redis_server.h"
#include "lib/tierh.h"
#include "testlib.h"

static const struct kvt_geometry GEO = {4, 2, 64, 16, KVT_DTYPE_BF16, KVT_KIND_KV};

/* Many calls in flight: every callback exactly once, none on the submitting thread. */
struct many {
	pthread_t submitter;
	_Atomic int calls, broken, ok;
	int want_rc; /* INT32_MIN: any >= 0 */
};

static void many_cb(void *arg, int64_t rc)
{
	struct many *m = arg;
	if (pthread_equal(pthread_self(), m->submitter))
		m->broken++;
	if (m->want_rc == INT32_MIN ? rc >= 0 : rc == m->want_rc)
		m->ok++;
	m->calls++;
}

static void many_wait(struct many *m, int n)
{
	uint64_t end = th_now_ms() + TH_TIMEOUT;
	while (m->calls < n && th_now_ms() < end)
		usleep(1000);
	CHECK_EQ(m->calls, n);
	CHECK_EQ(m->broken, 0);
}

struct scan_ctx {
	const struct kvt_key *want, *gone;
	int found_want, found_gone;
};

static int scan_fn(void *arg, const struct kvt_key *key, uint64_t bytes)
{
	struct scan_ctx *c = arg;
	if (kvt__key_eq(key, c->want))
		c->found_want++;
	if (kvt__key_eq(key, c->gone))
		c->found_gone++;
	(void)bytes;
	return 0;
}

static void contract(const char *label, const char *name, const char *const *kv)
{
	fprintf(stderr, "== %s\n", label);
	struct kvt_tier *t = th_open_by_name(name, kv, &GEO);
	const uint64_t LEN = 20 * 4096;
	uint8_t *obj = kvt__aligned_alloc(LEN), *back = kvt__aligned_alloc(LEN + 4096);
	CHECK(obj && back);
	uint64_t salt = (uint64_t)getpid() << 20;
	struct kvt_key a, b, absent;
	th_key(&a, 1, salt);
	th_key(&b, 2, salt);
	th_key(&absent, 3, salt);

	/* write, read back whole, rewrite */
	th_obj_fill(obj, LEN, 11);
	CHECK_EQ(th_write(t, &a, obj, LEN), 0);
	memset(back, 0, LEN);
	CHECK_EQ(th_read_all(t, &a, back, LEN), (int)LEN);
	uint64_t seed;
	CHECK_EQ(th_obj_check(back, LEN, &seed), 0);
	CHECK_EQ(seed, 11);
	CHECK_EQ(th_write(t, &a, obj, LEN), 0); /* a key that exists: harmless */
	CHECK_EQ(th_read_all(t, &a, back, LEN), (int)LEN);
	CHECK_EQ(th_obj_check(back, LEN, &seed), 0);

	/* ranges: two segments in one read, then one past the end (short) */
	struct kvt_seg segs[2] = {{4096, 8192, back}, {LEN - 4096, 4096, back + 8192}};
	memset(back, 0, LEN);
	CHECK_EQ(th_read(t, &a, segs, 2), 8192 + 4096);
	CHECK(!memcmp(back, obj + 4096, 8192));
	CHECK(!memcmp(back + 8192, obj + LEN - 4096, 4096));
	struct kvt_seg past = {LEN - 4096, 8192, back};
	CHECK_EQ(th_read(t, &a, &past, 1), 4096);
	CHECK(!memcmp(back, obj + LEN - 4096, 4096));

	/* absent, exists, remove */
	CHECK_EQ(th_read_all(t, &absent, back, LEN), -ENOENT);
	th_obj_fill(obj, LEN, 22);
	CHECK_EQ(th_write(t, &b, obj, LEN), 0);
	struct kvt_key batch[3] = {a, absent, b};
	uint8_t present[3] = {9, 9, 9};
	CHECK_EQ(th_exists(t, batch, 3, present), 0);
	CHECK(present[0] == 1 && present[1] == 0 && present[2] == 1);
	CHECK_EQ(th_remove(t, &a), 0);
	CHECK_EQ(th_read_all(t, &a, back, LEN), -ENOENT);
	CHECK_EQ(th_remove(t, &a), -ENOENT);
	CHECK_EQ(th_exists(t, batch, 3, present), 0);
	CHECK(present[0] == 0 && present[1] == 0 && present[2] == 1);

	/* listing, durability */
	if (t->ops->scan) {
		struct scan_ctx sc = {&b, &a, 0, 0};
		CHECK_EQ(t->ops->scan(t, scan_fn, &sc), 0);
		CHECK_EQ(sc.found_want, 1);
		CHECK_EQ(sc.found_gone, 0);
	}
	if (t->ops->flush) {
		struct th_wait w;
		th_wait_init(&w);
		CHECK_EQ(th_wait_done(&w, t->ops->flush(t, th_cb, &w), TH_TIMEOUT), 0);
		th_wait_fini(&w);
	}

	/* 64 in flight: writes, then reads */
	enum { M = 64 };
	struct kvt_key mk[M];
	struct many m = {.submitter = pthread_self(), .want_rc = 0};
	for (int i = 0; i < M; i++) {
		th_key(&mk[i], 100 + (uint64_t)i, salt);
		CHECK_EQ(t->ops->write(t, &mk[i], obj, LEN, many_cb, &m), 0);
	}
	many_wait(&m, M);
	CHECK_EQ(m.ok, M);
	uint8_t *bufs = kvt__aligned_alloc(M * LEN);
	CHECK(bufs);
	struct many r = {.submitter = pthread_self(), .want_rc = (int)LEN};
	for (int i = 0; i < M; i++) {
		struct kvt_seg s1 = {0, LEN, bufs + (size_t)i * LEN};
		CHECK_EQ(t->ops->read(t, &mk[i], &s1, 1, many_cb, &r), 0);
	}
	many_wait(&r, M);
	CHECK_EQ(r.ok, M);
	for (int i = 0; i < M; i++)
		CHECK_EQ(th_obj_check(bufs + (size_t)i * LEN, LEN, &seed), 0);

	/* close with calls in flight: each answered once before close returns */
	struct many c = {.submitter = pthread_self(), .want_rc = INT32_MIN};
	int sent = 0;
	for (int i = 0; i < M; i++) {
		struct kvt_seg s1 = {0, LEN, bufs + (size_t)i * LEN};
		if (t->ops->read(t, &mk[i], &s1, 1, many_cb, &c) == 0)
			sent++;
	}
	for (int i = 0; i < M; i++)
		if (t->ops->remove(t, &mk[i], many_cb, &c) == 0)
			sent++;
	kvt__tier_close(t);
	CHECK_EQ(c.calls, sent);
	CHECK_EQ(c.broken, 0);
	fprintf(stderr, "   ok: %d calls in flight at close, each answered once\n", sent);
	kvt__free_aligned(bufs, M * LEN);
	kvt__free_aligned(obj, LEN);
	kvt__free_aligned(back, LEN + 4096);
}

int main(void)
{
	char *d1 = test_tmpdir("contract-nvme"), *d2 = test_tmpdir("contract-fs"),
	     *d3 = test_tmpdir("contract-faulty");
	const char *nvme[] = {"nvme.dirs", d1, "nvme.fsync", "none", NULL};
	contract("nvme", "nvme", nvme);
	const char *fs[] = {"fs.dir", d2, "fs.fsync", "none", NULL};
	contract("fs", "fs", fs);
	const char *faulty[] = {"faulty.inner", "nvme", "faulty.delay_ms", "5", "nvme.dirs", d3,
				"nvme.fsync", "none", NULL};
	contract("faulty (nvme, answers held 5 ms)", "faulty", faulty);

	int rc = 0;
	struct rs r;
	int src = rs_start(&r, NULL);
	if (src == 77) {
		fprintf(stderr, "SKIP redis: redis-server is not installed\n");
		rc = 77;
	} else {
		CHECK_EQ(src, 0);
		char url[128];
		snprintf(url, sizeof(url), "redis://127.0.0.1:%d", r.port);
		const char *redis[] = {"redis.url", url, "redis.prefix", "kvt-contract:", NULL};
		contract("redis", "redis", redis);
		rs_stop(&r);
	}
	test_rmdir(d1);
	test_rmdir(d2);
	test_rmdir(d3);
	free(d1);
	free(d2);
	free(d3);
	if (!rc)
		fprintf(stderr, "tier_contract: ok\n");
	return rc;
}
