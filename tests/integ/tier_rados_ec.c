/* kvt-test-labels: server
 *
 * tier_rados_ec.c - the "rados" tier on an erasure-coded pool: a 3-OSD cluster, a k=2, m=1
 * pool with the OSD as failure domain (and min_size = k, so it stays writable and readable
 * with one shard gone). Chunks written through the tier must all come back bit-exact, whole
 * and by range, after one OSD is killed with SIGKILL; new writes must work degraded too.
 * Ceph does the erasure coding; the tier only has to use calls an EC pool supports (also
 * drop_corrupt's version-asserted remove: it leaves a copy another instance rewrote, and
 * removes the copy read).
 */
#include "ceph_harness.h"

extern const struct kvt_tier_ops kvt__tier_rados_ops;

enum { N = 48 };

static size_t size_of(int i)
{
	return (size_t)(64 + (i * 37) % 512) * 4096; /* 256 KiB .. 2.3 MiB, not stripe-aligned */
}

/* Read every chunk whole and one layer-like range of it; 1 if all match, 0 if some call
 * failed (retry later). A successful call with wrong bytes fails the test at once. */
static int verify_all(struct kvt_tier *t, struct kvt_key *keys, uint8_t **objs, uint8_t *back)
{
	uint8_t present[N];
	int rc = t_exists(t, keys, N, present);
	if (rc < 0)
		return 0;
	for (int i = 0; i < N; i++)
		CHECK(present[i] == 1, "chunk %d reported absent", i);
	for (int i = 0; i < N; i++) {
		size_t n = size_of(i);
		struct kvt_seg whole = {0, n, back};
		rc = t_read(t, &keys[i], &whole, 1);
		if (rc < 0)
			return 0;
		CHECK(rc == (int)n, "chunk %d: %d bytes of %zu", i, rc, n);
		CHECK(!memcmp(back, objs[i], n), "chunk %d differs", i);
		struct kvt_seg mid = {n / 2 / 4096 * 4096, 3 * 4096, back};
		rc = t_read(t, &keys[i], &mid, 1);
		if (rc < 0)
			return 0;
		CHECK(rc == 3 * 4096 && !memcmp(back, objs[i] + mid.off, 3 * 4096),
		      "chunk %d: range differs", i);
	}
	return 1;
}

static struct kvt_tier *ec_open(void)
{
	struct kvt_config *cfg = cfg_new();
	cfg_set(cfg, "rados.pool", "kvt-ec");
	cfg_set(cfg, "rados.timeout_ms", "3000");
	struct kvt_tier *t;
	int rc = tier_open(&kvt__tier_rados_ops, cfg, &t);
	CHECK(rc == 0, "open: %s", strerror(-rc));
	kvt_config_destroy(cfg);
	return t;
}

/* t rewrites what a read, a drops what it read (closing a waits for the drop): the rewrite
 * stays; a second drop, of the copy read, removes it. */
static void drop_check(struct kvt_tier *t, uint8_t *c1, uint8_t *c2, size_t n, uint8_t *back)
{
	struct kvt_key k;
	key_of(&k, 13, 1);
	struct kvt_seg whole = {0, n, back};
	CHECK(t_write(t, &k, c1, n) == 0, "drop: put copy 1");
	struct kvt_tier *a = ec_open();
	CHECK(t_read(a, &k, &whole, 1) == (int)n, "drop: read copy 1");
	CHECK(t_write(t, &k, c2, n) == 0, "drop: put copy 2");
	a->ops->drop_corrupt(a, &k);
	tier_close(a);
	int rc = t_read(t, &k, &whole, 1);
	CHECK(rc == (int)n && !memcmp(back, c2, n), "drop removed a rewritten copy: %d", rc);
	a = ec_open();
	CHECK(t_read(a, &k, &whole, 1) == (int)n, "drop: read copy 2");
	a->ops->drop_corrupt(a, &k);
	tier_close(a);
	CHECK((rc = t_read(t, &k, &whole, 1)) == -ENOENT, "drop of the copy read: %d", rc);
}

int main(void)
{
	ceph_start(3, 0);
	CHECK(
	    shf("ceph osd erasure-code-profile set kvt-k2m1 k=2 m=1 crush-failure-domain=osd "
		">/dev/null 2>&1 && ceph osd pool create kvt-ec 16 16 erasure kvt-k2m1 >/dev/null "
		"2>&1 && ceph osd pool set kvt-ec min_size 2 >/dev/null 2>&1 && "
		"ceph osd pool application enable kvt-ec rados >/dev/null 2>&1") == 0,
	    "creating the erasure-coded pool");
	shf("ceph osd pool ls detail | grep kvt-ec >&2");

	struct kvt_tier *t = ec_open();
	int rc;

	struct kvt_key keys[N];
	uint8_t *objs[N], *back = aligned(size_of(0) + 600 * 4096);
	size_t total = 0;
	for (int i = 0; i < N; i++) {
		key_of(&keys[i], 11, (uint64_t)i);
		objs[i] = aligned(size_of(i));
		fill(objs[i], size_of(i), 11000 + (uint64_t)i);
		/* The PGs may still be peering right after creation: retry briefly. */
		uint64_t t0 = kvt__now_ns();
		while ((rc = t_write(t, &keys[i], objs[i], size_of(i))) < 0 &&
		       kvt__now_ns() - t0 < 30000000000ULL)
			usleep(200000);
		CHECK(rc == 0, "write %d: %s", i, strerror(-rc));
		total += size_of(i);
	}
	CHECK(verify_all(t, keys, objs, back), "reads failed with all OSDs up");
	fprintf(stderr, "stored %d chunks, %.1f MiB, on the k=2 m=1 pool; all verified\n", N,
		(double)total / 1048576);
	drop_check(t, objs[0], objs[1], size_of(0), back);
	fprintf(stderr, "drop_corrupt: a rewritten copy stays, the copy read goes\n");

	pid_t victim = ceph_pid("osd.1");
	CHECK(kill(victim, SIGKILL) == 0, "SIGKILL osd.1");
	uint64_t t0 = kvt__now_ns();
	int ok = 0, rounds = 0;
	while (!ok && kvt__now_ns() - t0 < 120000000000ULL) {
		rounds++;
		ok = verify_all(t, keys, objs, back);
		if (!ok)
			usleep(500000);
	}
	double secs = (double)(kvt__now_ns() - t0) / 1e9;
	CHECK(ok, "chunks not served within 120 s of losing osd.1");
	CHECK(shf("ceph osd dump | grep -q '^osd.1 down'") == 0, "osd.1 is not down?");
	shf("ceph pg stat >&2");
	fprintf(stderr, "osd.1 killed: every chunk served bit-exact after %.1f s (%d rounds)\n",
		secs, rounds);

	/* Again once the cluster has settled into the degraded state (PGs undersized, serving
	 * from the two remaining shards, decoding where a data shard is the missing one). */
	t0 = kvt__now_ns();
	while (shf("ceph pg stat | grep -q undersized") && kvt__now_ns() - t0 < 60000000000ULL)
		usleep(500000);
	shf("ceph pg stat >&2");
	t0 = kvt__now_ns();
	ok = 0;
	while (!ok && kvt__now_ns() - t0 < 60000000000ULL)
		if (!(ok = verify_all(t, keys, objs, back)))
			usleep(500000);
	CHECK(ok, "chunks not served by the settled degraded pool");
	fprintf(stderr, "degraded pool settled: every chunk served bit-exact again\n");

	/* Degraded but writable (min_size = k): a new chunk round-trips. */
	struct kvt_key fresh;
	key_of(&fresh, 12, 1);
	size_t fn = size_of(5);
	rc = t_write(t, &fresh, objs[5], fn);
	CHECK(rc == 0, "degraded write: %s", strerror(-rc));
	struct kvt_seg whole = {0, fn, back};
	CHECK(t_read(t, &fresh, &whole, 1) == (int)fn && !memcmp(back, objs[5], fn),
	      "degraded round trip");
	tier_close(t);
	for (int i = 0; i < N; i++)
		free(objs[i]);
	free(back);
	printf("PASS tier_rados_ec\n");
	return 0;
}
