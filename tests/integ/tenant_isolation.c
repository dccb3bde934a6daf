/* kvt-test-labels: server
 *
 * tenant_isolation.c - two tenants (different model.tenant salts) share one fs directory,
 * one redis-server (started here) and one nvme directory, and both hand the store the SAME
 * opaque 32-byte keys, as an engine passing its own block hashes does. Tenant B stores
 * first; then tenant A must see no hit on B's chunk (no probing), A's put of the key must
 * be stored (not skipped as "exists": no blocking), a fresh instance of A must read back
 * A's bytes and one of B B's. Content-derived keys round-trip as before. A missing
 * redis-server fails the test.
 */
#include <stdbool.h>

#include "testlib.h"

#include "lib/redis_server.h"

static struct kvt_store *open_tenant(const char *tiers, const char *dir, const char *tenant,
				     const char *redis_url)
{
	struct kvt_config *c = test_config(tiers, dir);
	test_set(c, "model.tenant", tenant);
	test_set(c, "fs.dir", dir);
	test_set(c, "fs.fsync", "none");
	test_set(c, "redis.url", redis_url);
	struct kvt_store *s;
	CHECK_RC(kvt_store_open(c, &s), 0);
	kvt_config_destroy(c);
	return s;
}

static size_t payload(struct kvt_store *s)
{
	return kvt_payload_bytes(kvt_store_geometry(s), kvt_store_geometry(s)->chunk_tokens);
}

static void put(struct kvt_store *s, const struct kvt_key *k, uint64_t seed)
{
	size_t len = payload(s);
	void *buf = malloc(len);
	test_fill(buf, len, seed);
	CHECK_RC(kvt_put_sync(s, k, NULL, kvt_store_geometry(s)->chunk_tokens, buf, len), 0);
	CHECK_RC(kvt_flush_sync(s), 0);
	free(buf);
}

/* 0 and the bytes of seed, or the miss */
static int get(struct kvt_store *s, const struct kvt_key *k, uint64_t seed)
{
	size_t len = payload(s);
	void *buf = malloc(len);
	struct kvt_result res;
	int rc = kvt_get_sync(s, k, 0, 0, buf, len, &res);
	if (rc == 0)
		CHECK(test_check(buf, len, seed));
	free(buf);
	return rc;
}

static void one_chain(const char *tiers, const char *dir, const char *url)
{
	fprintf(stderr, "tiers %s\n", tiers);
	struct kvt_key opaque[3];
	for (int i = 0; i < 3; i++)
		memset(opaque[i].bytes, 0x40 + i, sizeof(opaque[i].bytes));
	int8_t where[3];

	/* B stores all three opaque keys */
	struct kvt_store *b = open_tenant(tiers, dir, "tenant-b", url);
	for (int i = 0; i < 3; i++)
		put(b, &opaque[i], 100 + (uint64_t)i);
	kvt_store_close(b);

	/* A: B's chunks are invisible, and A can store its own under the same keys */
	struct kvt_store *a = open_tenant(tiers, dir, "tenant-a", url);
	CHECK_RC(kvt_lookup_sync(a, opaque, 3, where), 0);
	CHECK_RC(get(a, &opaque[0], 100), -ENOENT);
	put(a, &opaque[0], 200);
	put(a, &opaque[1], 201);
	struct kvt_stats st;
	CHECK_RC(kvt_stats(a, &st), 0);
	CHECK(st.tier[st.n_tiers - 1].writes >= 2); /* written, not skipped as already there */
	/* content-derived keys still work */
	uint32_t tokens[32];
	for (int i = 0; i < 32; i++)
		tokens[i] = (uint32_t)i * 31u;
	struct kvt_key ck[2];
	CHECK(kvt_keys_from_tokens(kvt_store_ns_id(a), 16, tokens, 32, ck, 2) == 2);
	put(a, &ck[0], 300);
	put(a, &ck[1], 301);
	kvt_store_close(a);

	/* fresh instances (empty DRAM) read from the shared tier */
	a = open_tenant(tiers, dir, "tenant-a", url);
	CHECK_RC(kvt_lookup_sync(a, opaque, 3, where), 2);
	CHECK(where[0] != KVT_TIER_NONE && where[1] != KVT_TIER_NONE && where[2] == KVT_TIER_NONE);
	CHECK_RC(get(a, &opaque[0], 200), 0);
	CHECK_RC(get(a, &opaque[1], 201), 0);
	CHECK_RC(get(a, &opaque[2], 102), -ENOENT);
	CHECK_RC(kvt_lookup_sync(a, ck, 2, NULL), 2);
	CHECK_RC(get(a, &ck[0], 300), 0);
	CHECK_RC(get(a, &ck[1], 301), 0);
	kvt_store_close(a);

	b = open_tenant(tiers, dir, "tenant-b", url);
	CHECK_RC(kvt_lookup_sync(b, opaque, 3, NULL), 3);
	for (int i = 0; i < 3; i++)
		CHECK_RC(get(b, &opaque[i], 100 + (uint64_t)i), 0);
	CHECK_RC(kvt_lookup_sync(b, ck, 2, NULL), 0); /* and A's content keys are A's */
	/* B removing its key leaves A's */
	CHECK(kvt_remove_sync(b, &opaque[0]) >= 1);
	kvt_store_close(b);
	a = open_tenant(tiers, dir, "tenant-a", url);
	CHECK_RC(get(a, &opaque[0], 200), 0);
	kvt_store_close(a);
}

int main(void)
{
	struct rs r;
	int rc = rs_start(&r, NULL);
	if (rc != 0) {
		fprintf(stderr, "FAIL: cannot start redis-server (%s)\n",
			rc == 77 ? "not installed: scripts/deps.sh installs it" : "start failed");
		return 1;
	}
	char url[64];
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", r.port);
	const char *chains[] = {"dram,fs", "dram,redis", "dram,nvme", "fs"};
	for (size_t i = 0; i < sizeof(chains) / sizeof(chains[0]); i++) {
		char *dir = test_tmpdir("tenant");
		one_chain(chains[i], dir, url);
		test_rmdir(dir);
		free(dir);
	}
	rs_stop(&r);
	fprintf(stderr, "tenant_isolation: ok\n");
	return 0;
}
