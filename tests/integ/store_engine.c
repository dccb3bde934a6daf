/*
 * store_engine.c - the engine across real tiers (DRAM + NVMe on real files): round trips,
 * layer ranges, partial chunks, write-through / write-back / selective, promotion, lookup
 * prefixes with the tier of each chunk, prefetch, remove, restart keeps the cache,
 * corrupted and truncated files are detected, dropped and never served (also inside a
 * log segment), the async
 * contract (no callback inside the call), asynchronous puts without DRAM (encoded on the
 * verify pool) ordered before the removes and flushes that follow them, and several
 * threads at once.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "testlib.h"
#include "engine_internal.h" /* the admission sketch: sightings counted */
#include "store_key.h"
#include "tier_faulty.h"

static struct kvt_geometry G;
static size_t PAYLOAD;

static void make_keys(struct kvt_store *s, struct kvt_key *keys, size_t n, uint32_t salt)
{
	uint32_t *tok = malloc(n * G.chunk_tokens * 4);
	for (size_t i = 0; i < n * G.chunk_tokens; i++)
		tok[i] = (uint32_t)(i * 7 + salt);
	CHECK(kvt_keys_from_tokens(kvt_store_ns_id(s), G.chunk_tokens, tok, n * G.chunk_tokens,
				   keys, n) == (long)n);
	free(tok);
}

static void put_n(struct kvt_store *s, struct kvt_key *keys, size_t n, uint64_t seed)
{
	void *buf = malloc(PAYLOAD);
	for (size_t i = 0; i < n; i++) {
		test_fill(buf, PAYLOAD, seed + i);
		int rc;
		while ((rc = kvt_put_sync(s, &keys[i], i ? &keys[i - 1] : NULL, G.chunk_tokens, buf,
					  PAYLOAD)) == -EAGAIN)
			usleep(1000); /* every slot is waiting for its write-behind */
		CHECK_RC(rc, 0);
	}
	free(buf);
}

static int get_check(struct kvt_store *s, const struct kvt_key *key, uint64_t seed, int *tier)
{
	void *buf = malloc(PAYLOAD);
	struct kvt_result res;
	int rc = kvt_get_sync(s, key, 0, 0, buf, PAYLOAD, &res);
	if (rc == 0) {
		CHECK(res.bytes == PAYLOAD);
		CHECK(res.n_tokens == G.chunk_tokens);
		CHECK(test_check(buf, PAYLOAD, seed));
		if (tier)
			*tier = res.tier;
	}
	free(buf);
	return rc;
}

static struct kvt_store *open_store(struct kvt_config *c)
{
	struct kvt_store *s;
	CHECK_RC(kvt_store_open(c, &s), 0);
	G = *kvt_store_geometry(s);
	PAYLOAD = kvt_payload_bytes(&G, G.chunk_tokens);
	return s;
}

/* ---- async contract ---- */
static _Atomic int in_call, calls;
static void contract_cb(void *arg, const struct kvt_result *res)
{
	CHECK(!atomic_load(&in_call));
	atomic_fetch_add(&calls, 1);
	(void)arg;
	(void)res;
}

static void test_basic(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	struct kvt_store *s = open_store(c);
	struct kvt_key keys[8];
	make_keys(s, keys, 8, 1);
	put_n(s, keys, 8, 100);
	int tier = -5;
	for (int i = 0; i < 8; i++) {
		CHECK_RC(get_check(s, &keys[i], 100 + i, &tier), 0);
		CHECK(tier == 0); /* DRAM */
	}
	/* Layer range: layers [1,3) equal the matching slice of the dense payload. */
	uint8_t *full = malloc(PAYLOAD), *part = malloc(PAYLOAD);
	test_fill(full, PAYLOAD, 103);
	struct kvt_result res;
	CHECK_RC(kvt_get_sync(s, &keys[3], 1, 3, part, PAYLOAD, &res), 0);
	uint64_t lb = kvt_layer_bytes(&G, G.chunk_tokens);
	CHECK(res.bytes == 2 * lb);
	CHECK(!memcmp(part, full + lb, 2 * lb));
	/* Bad ranges and lengths are rejected up front. */
	CHECK_RC(kvt_get_sync(s, &keys[3], 3, 2, part, PAYLOAD, NULL), -EINVAL);
	CHECK_RC(kvt_get_sync(s, &keys[3], 0, G.layers + 1, part, PAYLOAD, NULL), -EINVAL);
	CHECK_RC(kvt_get_sync(s, &keys[3], 0, 0, part, PAYLOAD - 1, NULL), -EINVAL);
	CHECK_RC(kvt_get_sync(s, &keys[3], 0, 0, part, 1, NULL), -EINVAL);
	CHECK_RC(kvt_put_sync(s, &keys[3], NULL, G.chunk_tokens, full, PAYLOAD - 1), -EINVAL);
	CHECK_RC(kvt_put_sync(s, &keys[3], NULL, 0, full, 0), -EINVAL);
	CHECK_RC(kvt_put_sync(s, &keys[3], NULL, G.chunk_tokens + 1, full, PAYLOAD), -EINVAL);

	/* Partial last chunk. */
	struct kvt_key pk;
	uint32_t toks[5] = {9, 8, 7, 6, 5};
	kvt_key_next(kvt_store_ns_id(s), &keys[7], toks, 5, &pk);
	size_t plen = kvt_payload_bytes(&G, 5);
	test_fill(full, plen, 555);
	CHECK_RC(kvt_put_sync(s, &pk, &keys[7], 5, full, plen), 0);
	memset(part, 0, PAYLOAD);
	CHECK_RC(kvt_get_sync(s, &pk, 0, 0, part, PAYLOAD, &res), 0);
	CHECK(res.n_tokens == 5 && res.bytes == plen);
	CHECK(!memcmp(part, full, plen));

	/* Lookup: longest contiguous prefix, tier of each. */
	int8_t tiers[8];
	CHECK_RC(kvt_lookup_sync(s, keys, 8, tiers), 8);
	for (int i = 0; i < 8; i++)
		CHECK(tiers[i] == 0);
	CHECK_RC(kvt_flush_sync(s), 0);
	CHECK_RC(kvt_remove_sync(s, &keys[2]), 2); /* DRAM and NVMe */
	CHECK_RC(kvt_lookup_sync(s, keys, 8, tiers), 2);
	CHECK(tiers[2] == KVT_TIER_NONE && tiers[5] == KVT_TIER_NONE);
	CHECK_RC(get_check(s, &keys[2], 102, NULL), -ENOENT);
	CHECK_RC(kvt_remove_sync(s, &keys[2]), 0);
	CHECK_RC(kvt_lookup_sync(s, keys, 0, NULL), 0);

	/* Async contract: callbacks run only from kvt_poll, never inside the call. */
	atomic_store(&calls, 0);
	atomic_store(&in_call, 1);
	CHECK_RC(kvt_get(s, &keys[0], 0, 0, part, PAYLOAD, contract_cb, NULL), 0);
	CHECK_RC(kvt_lookup(s, keys, 8, NULL, contract_cb, NULL), 0);
	CHECK_RC(kvt_put(s, &keys[0], NULL, G.chunk_tokens, full, PAYLOAD, contract_cb, NULL), 0);
	CHECK_RC(kvt_remove(s, &keys[6], contract_cb, NULL), 0);
	CHECK_RC(kvt_flush(s, contract_cb, NULL), 0);
	CHECK(kvt_get(s, &keys[0], 5, 1, part, PAYLOAD, contract_cb, NULL) == -EINVAL);
	atomic_store(&in_call, 0);
	CHECK(atomic_load(&calls) == 0);
	for (int i = 0; i < 200 && atomic_load(&calls) < 5; i++)
		kvt_poll(s, 10);
	CHECK(atomic_load(&calls) == 5);
	CHECK(kvt_poll(s, 0) == 0);

	struct kvt_stats st;
	CHECK_RC(kvt_stats(s, &st), 0);
	CHECK(st.n_tiers == 2 && !strcmp(st.tier[0].name, "dram") && !strcmp(st.tier[1].name, "nvme"));
	CHECK(st.tier[1].writes >= 8);
	kvt_store_close(s);
	kvt_config_destroy(c);
	free(full);
	free(part);
}

/* Restart keeps the cache: a fresh store on the same directory finds every chunk on NVMe,
 * promotes it into DRAM on the first get; prefetch stages chunks ahead of gets. */
static void test_restart_promote_prefetch(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	struct kvt_store *s = open_store(c);
	struct kvt_key keys[12];
	make_keys(s, keys, 12, 2);
	put_n(s, keys, 12, 200);
	kvt_store_close(s); /* close finishes write-behind */

	s = open_store(c);
	int8_t tiers[12];
	CHECK_RC(kvt_lookup_sync(s, keys, 12, tiers), 12);
	for (int i = 0; i < 12; i++)
		CHECK(tiers[i] == 1);
	int tier;
	CHECK_RC(get_check(s, &keys[0], 200, &tier), 0);
	CHECK(tier == 1);
	CHECK_RC(get_check(s, &keys[0], 200, &tier), 0);
	CHECK(tier == 0); /* promoted */
	CHECK_RC(kvt_prefetch_sync(s, keys, 6, 0), 6);
	for (int i = 0; i < 6; i++) {
		CHECK_RC(get_check(s, &keys[i], 200 + i, &tier), 0);
		CHECK(tier == 0);
	}
	CHECK_RC(get_check(s, &keys[9], 209, &tier), 0);
	CHECK(tier == 1 || tier == 0);
	/* An already-passed deadline stages nothing new, and the call returns at once: -ETIME
	 * (its lookup not over), or 0 resident if it was. */
	int prc = kvt_prefetch_sync(s, keys + 10, 2, 1);
	CHECK(prc == -ETIME || prc == 0);
	usleep(200000); /* the lookup it started is over; it starts no read */
	int8_t lt[2];
	CHECK(kvt_lookup_sync(s, keys + 10, 2, lt) == 2 && lt[0] == 1 && lt[1] == 1);
	struct kvt_stats st;
	kvt_stats(s, &st);
	CHECK(st.promotions >= 7);
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* DRAM much smaller than the data: everything stays readable through NVMe, under each
 * write policy. */
static void test_policies(const char *dir, const char *policy)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "dram.bytes", "256KiB"); /* 7 slots of 36 KiB */
	test_set(c, "store.write_policy", policy);
	test_set(c, "store.selective_hits", "1");
	struct kvt_store *s = open_store(c);
	enum { N = 40 };
	struct kvt_key keys[N];
	make_keys(s, keys, N, 3 + (uint32_t)strlen(policy));
	void *buf = malloc(PAYLOAD);
	for (int i = 0; i < N; i++) {
		test_fill(buf, PAYLOAD, 300 + i);
		int rc;
		while ((rc = kvt_put_sync(s, &keys[i], i ? &keys[i - 1] : NULL, G.chunk_tokens, buf,
					  PAYLOAD)) == -EAGAIN)
			usleep(1000);
		CHECK_RC(rc, 0);
		if (!strcmp(policy, "selective")) /* one hit makes it worth writing */
			CHECK_RC(get_check(s, &keys[i], 300 + i, NULL), 0);
	}
	free(buf);
	CHECK_RC(kvt_flush_sync(s), 0);
	struct kvt_stats st;
	kvt_stats(s, &st);
	CHECK(st.tier[0].evictions > 0);
	int found = 0;
	for (int i = 0; i < N; i++)
		found += get_check(s, &keys[i], 300 + i, NULL) == 0;
	CHECK(found == N); /* evicted ones from NVMe; under write-back, dirty ones from DRAM */
	kvt_store_close(s);
	/* After close (which writes dirty chunks back), a fresh store finds all on NVMe. */
	s = open_store(c);
	int deep = 0, tier = -1;
	for (int i = 0; i < N; i++) {
		deep += get_check(s, &keys[N - 1 - i], 300 + N - 1 - i, &tier) == 0;
		CHECK(tier == 1);
	}
	CHECK(deep == N);
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* Selective, 2 hits: a chunk written deeper after its second hit, removed, put again and
 * hit twice is written deeper again. Until 2026-12-06 the count lived in a table of
 * saturating counters by key hash, never reset: its bucket had fired once and the new copy
 * was never written (nor any other key of that bucket, ever). */
static void test_selective_again(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "store.write_policy", "selective");
	test_set(c, "store.selective_hits", "2");
	struct kvt_store *s = open_store(c);
	struct kvt_key k[1];
	make_keys(s, k, 1, 99);
	struct kvt_stats st;
	for (int round = 0; round < 3; round++) {
		put_n(s, k, 1, 990 + round);
		CHECK_RC(get_check(s, &k[0], 990 + round, NULL), 0);
		CHECK_RC(kvt_flush_sync(s), 0);
		kvt_stats(s, &st);
		CHECKM(st.tier[1].objects == 0, "round %d: written after one hit", round);
		CHECK_RC(get_check(s, &k[0], 990 + round, NULL), 0);
		CHECK_RC(kvt_flush_sync(s), 0);
		kvt_stats(s, &st);
		CHECKM(st.tier[1].objects == 1, "round %d: not written deeper after two hits",
		       round);
		CHECK(kvt_remove_sync(s, &k[0]) >= 1); /* the tiers that held it */
	}
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* Selective, 300 hits (above 250): written deeper at the 300th hit, not before. Until
 * 2026-12-06 the setting was capped at 250 without a word (a review). */
static void test_selective_many(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "store.write_policy", "selective");
	test_set(c, "store.selective_hits", "300");
	struct kvt_store *s = open_store(c);
	struct kvt_key k[1];
	make_keys(s, k, 1, 97);
	put_n(s, k, 1, 970);
	for (int i = 0; i < 299; i++)
		CHECK_RC(get_check(s, &k[0], 970, NULL), 0);
	CHECK_RC(kvt_flush_sync(s), 0);
	struct kvt_stats st;
	kvt_stats(s, &st);
	CHECKM(st.tier[1].objects == 0, "written deeper after 299 of 300 hits");
	CHECK_RC(get_check(s, &k[0], 970, NULL), 0);
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_stats(s, &st);
	CHECKM(st.tier[1].objects == 1, "not written deeper after 300 hits");
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* A prefetch takes one in-flight place: with store.max_inflight=1 a prefetch of a stored
 * chunk (not in DRAM after a reopen, so that it is read from NVMe) answers 1. Until 2026-12-06 its
 * lookup took a second place and every prefetch at this bound was -EAGAIN. */
static void test_prefetch_one_place(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "store.max_inflight", "1");
	struct kvt_store *s = open_store(c);
	struct kvt_key k[1];
	make_keys(s, k, 1, 98);
	put_n(s, k, 1, 980);
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_store_close(s);
	s = open_store(c); /* DRAM empty: the chunk is on NVMe only */
	int rc = kvt_prefetch_sync(s, k, 1, 0);
	CHECKM(rc == 1, "a prefetch at store.max_inflight=1: %d", rc);
	int tier = -1;
	CHECK_RC(get_check(s, &k[0], 980, &tier), 0);
	CHECK_EQ(tier, 0); /* prefetched into DRAM */
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* Corrupt and truncated files on NVMe are detected, dropped and never served. */
static int n_files;
static char files[64][4096];
static int collect(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)ftw;
	/* log/head (the log's 8 KiB metadata) and segments laid out ahead (log/<n>.laid,
	 * nvme.log_layout) hold no object */
	size_t n = strlen(p);
	if (flag == FTW_F && sb->st_size >= 4096 && n_files < 64 &&
	    !(n >= 9 && !strcmp(p + n - 9, "/log/head")) &&
	    !(n >= 5 && !strcmp(p + n - 5, ".laid")))
		snprintf(files[n_files++], 4096, "%s", p);
	return 0;
}

static void test_corruption(const char *dir)
{
	struct kvt_config *c = test_config("nvme", dir);
	struct kvt_store *s = open_store(c);
	struct kvt_key keys[4];
	make_keys(s, keys, 4, 4);
	put_n(s, keys, 4, 400);
	kvt_store_close(s);
	n_files = 0;
	nftw(dir, collect, 16, FTW_PHYS);
	CHECK(n_files == 4);
	/* Flip one byte in the body of every object: no get may return those bytes. */
	for (int i = 0; i < n_files; i++) {
		int fd = open(files[i], O_RDWR);
		CHECK(fd >= 0);
		uint8_t b;
		CHECK(pread(fd, &b, 1, 4096 + 100 * i) == 1);
		b ^= 0x40;
		CHECK(pwrite(fd, &b, 1, 4096 + 100 * i) == 1);
		close(fd);
	}
	s = open_store(c);
	for (int i = 0; i < 4; i++)
		CHECK_RC(get_check(s, &keys[i], 400 + i, NULL), -ENOENT);
	struct kvt_stats st;
	kvt_stats(s, &st);
	CHECK(st.tier[0].checksum_failures == 4);
	int8_t tiers[4];
	CHECK_RC(kvt_lookup_sync(s, keys, 4, tiers), 0); /* dropped */
	/* Store again, then truncate the files: a short object is never served either. */
	put_n(s, keys, 4, 410);
	kvt_store_close(s);
	n_files = 0;
	nftw(dir, collect, 16, FTW_PHYS);
	CHECK(n_files == 4);
	for (int i = 0; i < n_files; i++)
		CHECK(truncate(files[i], 8192) == 0);
	s = open_store(c);
	for (int i = 0; i < 4; i++)
		CHECK(get_check(s, &keys[i], 410 + i, NULL) == -ENOENT);
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* The same with NVMe's small-object log (nvme.log_max): objects live inside a segment file;
 * a flipped byte in each is detected by the engine's check on read, the object is dropped
 * (and stays dropped after a restart: the drop is recorded), never served. */
static void test_corruption_log(const char *dir)
{
	struct kvt_config *c = test_config("nvme", dir);
	test_set(c, "nvme.log_max", "1MiB");
	test_set(c, "nvme.segment_bytes", "16MiB");
	struct kvt_store *s = open_store(c);
	struct kvt_key keys[4], more[6];
	make_keys(s, keys, 4, 5);
	make_keys(s, more, 6, 6);
	put_n(s, keys, 4, 420);
	CHECK_RC(kvt_flush_sync(s), 0);
	/* Later batches, so that the four are not among the newest, which the open-time scan
	 * checks itself: here the engine's check on read must catch them. */
	for (int i = 0; i < 6; i++) {
		put_n(s, &more[i], 1, 430 + (uint64_t)i);
		CHECK_RC(kvt_flush_sync(s), 0);
	}
	kvt_store_close(s);
	n_files = 0;
	nftw(dir, collect, 16, FTW_PHYS);
	CHECK(n_files == 1); /* one segment, no object files */
	int fd = open(files[0], O_RDWR);
	CHECK(fd >= 0);
	int flipped = 0;
	for (off_t off = 0; off < (off_t)(16u << 20) && flipped < 4; off += 4096) {
		char magic[8]; /* the four come first in the segment */
		if (pread(fd, magic, 8, off) != 8 || memcmp(magic, "KVTCHNK1", 8))
			continue;
		uint8_t b;
		CHECK(pread(fd, &b, 1, off + 4096 + 100 * flipped) == 1);
		b ^= 0x40;
		CHECK(pwrite(fd, &b, 1, off + 4096 + 100 * flipped) == 1);
		flipped++;
	}
	close(fd);
	CHECK(flipped == 4);
	s = open_store(c);
	for (int i = 0; i < 4; i++)
		CHECK_RC(get_check(s, &keys[i], 420 + i, NULL), -ENOENT);
	struct kvt_stats st;
	kvt_stats(s, &st);
	CHECK(st.tier[0].checksum_failures == 4);
	kvt_store_close(s);
	s = open_store(c);
	int8_t tiers[4];
	CHECK_RC(kvt_lookup_sync(s, keys, 4, tiers), 0); /* still dropped */
	for (int i = 0; i < 4; i++)
		CHECK_RC(get_check(s, &keys[i], 420 + i, NULL), -ENOENT);
	kvt_stats(s, &st);
	CHECK(st.tier[0].checksum_failures == 0);
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* Several threads at once on one store, with sync calls; contents never mixed up. */
struct thr {
	struct kvt_store *s;
	struct kvt_key *keys;
	int id;
	int errors;
};

static void *worker(void *arg)
{
	struct thr *t = arg;
	void *buf = malloc(PAYLOAD);
	for (int round = 0; round < 30; round++) {
		for (int i = 0; i < 16; i++) {
			int k = (i * 5 + round + t->id) % 16;
			if ((round + i) % 3 == 0) {
				test_fill(buf, PAYLOAD, 900 + k); /* same content per key */
				int rc = kvt_put_sync(t->s, &t->keys[k], NULL, G.chunk_tokens, buf,
						      PAYLOAD);
				if (rc < 0 && rc != -EAGAIN && rc != -ENOSPC)
					t->errors++;
			} else {
				struct kvt_result res;
				int rc = kvt_get_sync(t->s, &t->keys[k], 0, 0, buf, PAYLOAD, &res);
				if (rc == 0 && !test_check(buf, PAYLOAD, 900 + k))
					t->errors++;
				else if (rc < 0 && rc != -ENOENT)
					t->errors++;
			}
		}
	}
	free(buf);
	return NULL;
}

static void test_threads(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "dram.bytes", "300KiB");
	/* admission state is updated by every put and write-behind (under TSan: its lock) */
	test_set(c, "admission.predict", "chain");
	struct kvt_store *s = open_store(c);
	struct kvt_key keys[16];
	make_keys(s, keys, 16, 5);
	pthread_t th[4];
	struct thr t[4];
	for (int i = 0; i < 4; i++) {
		t[i] = (struct thr){s, keys, i, 0};
		pthread_create(&th[i], NULL, worker, &t[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK(t[i].errors == 0);
	}
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* Admission: with admission.min_freq = 2 a chunk reaches NVMe only once it has been seen
 * twice; the first puts are refused by the sketch and counted as skipped writes. */
static void test_admission(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "admission.min_freq", "2");
	test_set(c, "admission.doorkeeper", "false");
	test_set(c, "dram.bytes", "256KiB");
	struct kvt_store *s = open_store(c);
	struct kvt_key a[10], b[10];
	make_keys(s, a, 10, 61);
	make_keys(s, b, 10, 62);
	put_n(s, a, 10, 600);
	CHECK_RC(kvt_flush_sync(s), 0);
	struct kvt_stats st;
	kvt_stats(s, &st);
	CHECK(st.tier[1].objects == 0 && st.tier[1].writes_skipped == 10);
	put_n(s, b, 10, 700); /* pushes a out of DRAM; also seen once: not written */
	put_n(s, a, 10, 600); /* a again: now frequent enough */
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_stats(s, &st);
	CHECK(st.tier[1].objects == 10);
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* A chunk admission declined at its put is offered again when it is hit in DRAM (its
 * second sighting), or put again while resident: written then, once. One declined for its position
 * (admission.min_prefix_tokens) is not: hits do not change that verdict. */
static void test_admission_reoffer(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "admission.min_freq", "2");
	test_set(c, "dram.bytes", "2MiB"); /* holds all 10 */
	struct kvt_store *s = open_store(c);
	struct kvt_key a[10];
	make_keys(s, a, 10, 71);
	put_n(s, a, 10, 500);
	CHECK_RC(kvt_flush_sync(s), 0);
	struct kvt_stats st;
	kvt_stats(s, &st);
	CHECKM(st.tier[1].objects == 0 && st.tier[1].writes_skipped == 10,
	       "first sighting: objects %llu, skipped %llu", (unsigned long long)st.tier[1].objects,
	       (unsigned long long)st.tier[1].writes_skipped);
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 10; i++) {
			int tier = -1;
			CHECK_RC(get_check(s, &a[i], 500 + (uint64_t)i, &tier), 0);
			CHECK(tier == 0); /* DRAM */
		}
		CHECK_RC(kvt_flush_sync(s), 0);
		kvt_stats(s, &st);
		CHECKM(st.tier[1].objects == 10 && st.tier[1].writes_skipped == 10,
		       "hit round %d: objects %llu, skipped %llu (the hit offers it again, once)",
		       round, (unsigned long long)st.tier[1].objects,
		       (unsigned long long)st.tier[1].writes_skipped);
	}
	kvt_store_close(s);

	/* A put of a resident chunk is a sighting too (the replay offers on it): the
	 * declined chunks are written, once. */
	char sub[4400];
	snprintf(sub, sizeof(sub), "%s/put", dir);
	mkdir(sub, 0755);
	kvt_config_destroy(c);
	c = test_config("dram,nvme", sub);
	test_set(c, "admission.min_freq", "2");
	test_set(c, "dram.bytes", "2MiB");
	s = open_store(c);
	put_n(s, a, 10, 500);
	put_n(s, a, 10, 500);
	put_n(s, a, 10, 500);
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_stats(s, &st);
	CHECKM(st.tier[1].objects == 10 && st.tier[1].writes_skipped == 10,
	       "put again: objects %llu, skipped %llu", (unsigned long long)st.tier[1].objects,
	       (unsigned long long)st.tier[1].writes_skipped);
	kvt_store_close(s);
	kvt_config_destroy(c);

	snprintf(sub, sizeof(sub), "%s/short", dir);
	mkdir(sub, 0755);
	c = test_config("dram,nvme", sub);
	test_set(c, "admission.min_prefix_tokens", "1000000");
	test_set(c, "dram.bytes", "2MiB"); /* holds all 10 */
	s = open_store(c);
	put_n(s, a, 10, 500);
	for (int i = 0; i < 10; i++)
		CHECK_RC(get_check(s, &a[i], 500 + (uint64_t)i, NULL), 0);
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_stats(s, &st);
	CHECKM(st.tier[1].objects == 0 && st.tier[1].writes_skipped == 10,
	       "too short: objects %llu, skipped %llu (offered once)",
	       (unsigned long long)st.tier[1].objects, (unsigned long long)st.tier[1].writes_skipped);
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* A second offer out on a slow tier does not widen a flush's window: a put's write that
 * failed before the flush, and whose chunk the flush then writes again, fails nothing.
 * Until 2026-12-05 the window opened at the oldest job out, the re-offer included, so the
 * earlier failure was the flush's: -EIO over a store that held everything. */
static void test_reoffer_flush(const char *dir)
{
	struct kvt_config *c = test_config("dram,faulty", dir);
	test_set(c, "faulty.inner", "nvme");
	test_set(c, "admission.min_freq", "2");
	struct kvt_store *s = open_store(c);
	kvt_store_close(s); /* (G, PAYLOAD) */
	char dram[32];
	snprintf(dram, sizeof(dram), "%zu", 3 * (PAYLOAD + 65536));
	test_set(c, "dram.bytes", dram); /* three chunks */
	s = open_store(c);
	struct kvt_tier *t = kvt__store_tier(s, 1);
	struct kvt_key k[14];
	make_keys(s, k, 14, 91);
	put_n(s, k, 1, 700); /* A: declined, its first sighting */
	kvt__faulty_set_write_delay(t, 2000);
	CHECK_RC(get_check(s, &k[0], 700, NULL), 0); /* a hit: A offered again, held 2 s */
	kvt__faulty_set_write_delay(t, 0);
	put_n(s, k + 1, 1, 701); /* B: declined */
	put_n(s, k + 2, 12, 702); /* B evicted */
	kvt__faulty_set(t, 100, 0, 0);
	put_n(s, k + 1, 1, 701); /* B's second sighting: written, and the write fails */
	struct kvt_stats st;
	uint64_t t0 = test_now_ns();
	do { /* (the failure is decided when the inner write completes) */
		usleep(10000);
		kvt_stats(s, &st);
	} while (st.tier[1].errors < 1 && test_ms_since(t0) < 10000);
	kvt__faulty_set(t, 0, 0, 0);
	CHECKM(st.tier[1].errors >= 1, "B's write did not fail (%llu errors)",
	       (unsigned long long)st.tier[1].errors);
	CHECK_RC(kvt_flush_sync(s), 0); /* writes B again; A's second offer lands */
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* A chunk the NVMe write budget refused is offered again at its next hit (the budget is a
 * rolling day: a later offer can pass). Until 2026-12-05 it was never offered again while
 * it stayed in DRAM. */
static void test_budget_reoffer(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	struct kvt_store *s = open_store(c);
	kvt_store_close(s); /* (G, PAYLOAD) */
	char budget[32];
	snprintf(budget, sizeof(budget), "%zu", PAYLOAD + PAYLOAD / 2); /* one object */
	test_set(c, "nvme.write_budget", budget);
	test_set(c, "dram.bytes", "4MiB");
	s = open_store(c);
	struct kvt_key k[2];
	make_keys(s, k, 2, 93);
	put_n(s, k, 2, 800); /* A written, B refused by the budget */
	CHECK_RC(kvt_flush_sync(s), 0);
	struct kvt_stats st;
	kvt_stats(s, &st);
	CHECK_EQ(st.tier[1].objects, 1);
	uint64_t skipped = st.tier[1].writes_skipped;
	CHECK(skipped >= 1);
	for (int i = 0; i < 2; i++) {
		CHECK_RC(get_check(s, &k[1], 801, NULL), 0); /* a hit: offered again */
		CHECK_RC(kvt_flush_sync(s), 0);
		kvt_stats(s, &st);
		CHECKM(st.tier[1].writes_skipped == skipped + 1 + (uint64_t)i,
		       "hit %d: %llu skipped (%llu before): the refused chunk was not offered again",
		       i, (unsigned long long)st.tier[1].writes_skipped,
		       (unsigned long long)skipped);
	}
	kvt_store_close(s);

	/* A budget smaller than one object: no day will take it, so a hit offers it no more
	 * (each would start a write-behind job for nothing). */
	char sub[4400];
	snprintf(sub, sizeof(sub), "%s/small", dir);
	mkdir(sub, 0755);
	kvt_config_destroy(c);
	c = test_config("dram,nvme", sub);
	snprintf(budget, sizeof(budget), "%zu", PAYLOAD / 2);
	test_set(c, "nvme.write_budget", budget);
	test_set(c, "dram.bytes", "4MiB");
	s = open_store(c);
	put_n(s, k, 1, 800);
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_stats(s, &st);
	skipped = st.tier[1].writes_skipped;
	CHECK(skipped >= 1);
	CHECK_RC(get_check(s, &k[0], 800, NULL), 0);
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_stats(s, &st);
	CHECKM(st.tier[1].writes_skipped == skipped,
	       "a chunk over a whole day's budget was offered again (%llu skipped, %llu before)",
	       (unsigned long long)st.tier[1].writes_skipped, (unsigned long long)skipped);
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* A flush does not leave a dirty slot to a hit's second offer out on a slow tier: the offer
 * owes the flush nothing and decides no mark, so the flush writes the slot itself. Here a
 * selective write makes the slot dirty while the offer is out but has no memory to write it
 * (the slot stays dirty, for flush), and the offer then misses its deadline. Until
 * 2026-12-05 the flush passed over the slot for the offer's job, waited for it, and said 0
 * with the chunk on no deeper tier. */
static void test_reoffer_dirty_flush(const char *dir)
{
	struct kvt_config *c = test_config("dram,faulty", dir);
	test_set(c, "faulty.inner", "nvme");
	test_set(c, "store.write_policy", "selective");
	test_set(c, "store.selective_hits", "1");
	test_set(c, "admission.min_freq", "3");
	test_set(c, "admission.doorkeeper", "false");
	test_set(c, "store.deadline_floor_ms", "300");
	test_set(c, "store.tier_timeout_ms", "400");
	test_set(c, "dram.bytes", "2MiB");
	struct kvt_store *s = open_store(c);
	struct kvt_tier *t = kvt__store_tier(s, 1);
	struct kvt_key k[1], sk;
	make_keys(s, k, 1, 95);
	struct kvt_dram *dram = kvt__store_dram(s);
	kvt__storage_key(kvt_store_ns_id(s), &k[0], &sk);
	put_n(s, k, 1, 900); /* sighting 1, clean (selective) */
	CHECK_RC(get_check(s, &k[0], 900, NULL), 0); /* 2: the selective write, declined */
	CHECK_RC(kvt_flush_sync(s), 0);
	struct kvt_stats st;
	kvt_stats(s, &st);
	CHECKM(st.tier[1].objects == 0 && st.tier[1].writes_skipped == 1,
	       "declined: objects %llu, skipped %llu", (unsigned long long)st.tier[1].objects,
	       (unsigned long long)st.tier[1].writes_skipped);
	kvt__faulty_set_write_delay(t, 2000); /* past the offer's deadline */
	CHECK_RC(get_check(s, &k[0], 900, NULL), 0); /* 3: offered again, held */
	kvt__faulty_set_write_delay(t, 0);
	/* 4: the next hit writes the chunk again (selective), without memory for its job (the
	 * first allocation that leaves the selective write's counter moved) */
	void *buf = malloc(PAYLOAD);
	uint32_t hits = 0;
	for (uint64_t n = 1; n <= 16; n++) {
		kvt__dram_test_hits(dram, &sk, 0);
		kvt__alloc_fail_after(n);
		int rc = kvt_get_sync(s, &k[0], 0, 0, buf, PAYLOAD, NULL);
		kvt__alloc_fail_after(0);
		if ((hits = kvt__dram_test_hits(dram, &sk, -1)) != 0)
			break;
		CHECK_RC(rc, -ENOMEM); /* the get's own allocation: no hit */
	}
	free(buf);
	CHECK(hits != 0);
	usleep(20000);
	kvt_stats(s, &st);
	CHECKM(st.tier[1].objects == 0, "the selective write reached the tier (%llu objects)",
	       (unsigned long long)st.tier[1].objects);
	int rc = kvt_flush_sync(s); /* the second offer is still out, and misses its deadline */
	kvt_stats(s, &st);
	CHECKM(rc != 0 || st.tier[1].objects == 1,
	       "flush said %d with the chunk on no deeper tier (%llu objects)", rc,
	       (unsigned long long)st.tier[1].objects);
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* A flush that could not write a dirty chunk for lack of memory does not say 0: with each
 * allocation of the flush failing in turn, it either wrote the chunk or failed. Until
 * 2026-12-05 a write-behind leg (or job) the flush could not allocate left the slot dirty
 * and the flush said 0 over it. */
static void test_flush_nomem(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "dram.bytes", "4MiB");
	test_set(c, "store.write_policy", "write-back");
	struct kvt_store *s = open_store(c);
	enum { N = 24 };
	struct kvt_key k[N];
	make_keys(s, k, N, 97);
	void *buf = malloc(PAYLOAD);
	struct kvt_stats st;
	int failed = 0;
	for (uint64_t n = 1; n < N; n++) {
		test_fill(buf, PAYLOAD, 1000 + n);
		int rc = kvt_put_sync(s, &k[n], &k[n - 1], G.chunk_tokens, buf, PAYLOAD);
		CHECK_RC(rc, 0); /* in DRAM, dirty (write-back), for the flush */
		kvt_stats(s, &st);
		uint64_t writes0 = st.tier[1].writes;
		kvt__alloc_fail_after(n);
		rc = kvt_flush_sync(s);
		kvt__alloc_fail_after(0);
		kvt_stats(s, &st);
		CHECKM(rc != 0 || st.tier[1].writes > writes0,
		       "allocation %llu failing: flush said 0, the dirty chunk unwritten",
		       (unsigned long long)n);
		failed += rc != 0;
		CHECK_RC(kvt_flush_sync(s), 0); /* writes what is left */
	}
	CHECK(failed > 0);
	free(buf);
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* A hit's second offer that had no memory keeps the chunk's mark: the next hit offers it
 * again (until 2026-12-05 a job or leg it could not allocate lost the mark, and the chunk
 * was never written while it stayed in DRAM). A second offer that missed its deadline and
 * then landed leaves no mark: the next hit does not offer it there again. */
static void test_reoffer_marks(const char *dir)
{
	struct kvt_config *c = test_config("dram,faulty", dir);
	test_set(c, "faulty.inner", "nvme");
	test_set(c, "admission.min_freq", "2");
	test_set(c, "admission.doorkeeper", "false");
	test_set(c, "store.deadline_floor_ms", "200");
	test_set(c, "store.tier_timeout_ms", "300");
	test_set(c, "dram.bytes", "4MiB");
	struct kvt_store *s = open_store(c);
	struct kvt_tier *t = kvt__store_tier(s, 1);
	enum { N = 16 };
	struct kvt_key k[N];
	make_keys(s, k, N, 99);
	void *buf = malloc(PAYLOAD);
	struct kvt_stats st;
	for (uint64_t n = 1; n < N - 1; n++) {
		put_n(s, k + n, 1, 1100 + n); /* declined: marked */
		kvt__alloc_fail_after(n);
		int rc = kvt_get_sync(s, &k[n], 0, 0, buf, PAYLOAD, NULL); /* offered, no memory */
		kvt__alloc_fail_after(0);
		CHECK(rc == 0 || rc == -ENOMEM);
		CHECK_RC(get_check(s, &k[n], 1100 + n, NULL), 0); /* offered (again) */
		CHECK_RC(kvt_flush_sync(s), 0);
		kvt_stats(s, &st);
		CHECKM(st.tier[1].objects == n,
		       "allocation %llu failing: %llu objects, the re-offer mark was lost",
		       (unsigned long long)n, (unsigned long long)st.tier[1].objects);
	}
	put_n(s, k + N - 1, 1, 1200); /* declined: marked */
	kvt__faulty_set_write_delay(t, 800);
	CHECK_RC(get_check(s, &k[N - 1], 1200, NULL), 0); /* offered; lands after its deadline */
	kvt__faulty_set_write_delay(t, 0);
	uint64_t t0 = test_now_ns();
	do {
		usleep(20000);
		kvt_stats(s, &st);
	} while (st.tier[1].objects < N - 1 && test_ms_since(t0) < 5000);
	CHECK_EQ(st.tier[1].objects, N - 1);
	/* the late answer reaches the engine (polled: a fixed 100 ms was one slow scheduling
	 * away from failing under a sanitizer) */
	struct kvt_key sk;
	struct kvt_slot_ref ref;
	int rc;
	for (uint64_t t1 = test_now_ns();; usleep(20000)) {
		rc = kvt__dram_pin_reoffer(s->dram,
					   kvt__storage_key(kvt_store_ns_id(s), &k[N - 1], &sk), &ref);
		if (rc == 0)
			kvt__dram_unpin(s->dram, ref.id);
		if (rc == -ENOENT || test_ms_since(t1) > 5000)
			break;
	}
	CHECKM(rc == -ENOENT, "a chunk whose late write landed is still marked to be offered again");
	free(buf);
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* Admission's count of a chunk's sightings (its sketch estimate at the NVMe link). */
static uint32_t sightings(struct kvt_store *s, const struct kvt_key *k)
{
	struct kvt_key sk;
	const struct kvt_key *key = kvt__storage_key(kvt_store_ns_id(s), k, &sk);
	CHECK(s->links[1].admit);
	return kvt__sketch_estimate(kvt__admit_sketch(s->links[1].admit), kvt__key_hash(key));
}

/* One read is one sighting, whichever path serves it: a prefetch's staging is none (the get
 * that reads the staged chunk is one; until 2026-12-05 both counted), and a get read
 * through a bounce buffer (store.promote = false) is one (it was none). */
static void test_admission_sightings(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	struct kvt_store *s = open_store(c);
	struct kvt_key a[2];
	make_keys(s, a, 2, 81);
	put_n(s, a, 2, 800); /* both on NVMe: no admission rule yet */
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_store_close(s);
	test_set(c, "admission.min_freq", "2");
	test_set(c, "admission.doorkeeper", "false");
	s = open_store(c); /* DRAM empty, both on NVMe, nothing seen */
	CHECK_EQ(sightings(s, &a[0]), 0);
	CHECK_RC(kvt_prefetch_sync(s, &a[0], 1, 0), 1); /* 1 chunk resident */
	CHECKM(sightings(s, &a[0]) == 0, "a prefetch counted %u sightings", sightings(s, &a[0]));
	int tier = -1;
	CHECK_RC(get_check(s, &a[0], 800, &tier), 0);
	CHECK(tier == 0);
	CHECKM(sightings(s, &a[0]) == 1, "prefetch + get: %u sightings", sightings(s, &a[0]));
	CHECK_RC(get_check(s, &a[1], 801, &tier), 0); /* promoted: one */
	CHECK(tier == 1);
	CHECKM(sightings(s, &a[1]) == 1, "promotion: %u sightings", sightings(s, &a[1]));
	kvt_store_close(s);
	test_set(c, "store.promote", "false");
	s = open_store(c);
	CHECK_RC(get_check(s, &a[1], 801, &tier), 0); /* through a bounce buffer */
	CHECK(tier == 1);
	CHECKM(sightings(s, &a[1]) == 1, "bounce get: %u sightings", sightings(s, &a[1]));
	kvt_store_close(s);
	kvt_config_destroy(c);
}

static _Atomic int acquired;
static struct kvt_slot_ref acquired_ref;
static void acquired_cb(void *arg, int rc, const struct kvt_slot_ref *ref, int tier)
{
	(void)arg;
	(void)tier;
	if (rc == 0)
		acquired_ref = *ref;
	atomic_store(&acquired, rc == 0 ? 1 : -1);
}

/* An acquire's DRAM hit is one sighting if it is answered, none if it fails (with each
 * allocation failing in turn): the caller asks again (kvtierd's GET_PIN falls back to a
 * GET), and that counts. Until 2026-12-05 a hit whose answer could not be queued was
 * counted as well: two sightings. */
static void test_acquire_sighting(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "admission.min_freq", "2");
	test_set(c, "admission.doorkeeper", "false");
	struct kvt_store *s = open_store(c);
	struct kvt_key k[1], sk;
	make_keys(s, k, 1, 101);
	put_n(s, k, 1, 1300);
	put_n(s, k, 1, 1300); /* offered again and written: no mark left to offer on a hit */
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_storage_key(kvt_store_ns_id(s), &k[0], &sk);
	int failures = 0;
	for (uint64_t n = 1; n <= 6; n++) {
		uint32_t before = sightings(s, &k[0]);
		atomic_store(&acquired, 0);
		kvt__alloc_fail_after(n);
		int rc = kvt__store_acquire(s, &sk, acquired_cb, NULL);
		kvt__alloc_fail_after(0);
		if (rc == 0) {
			while (!atomic_load(&acquired))
				usleep(1000);
			CHECK_EQ(atomic_load(&acquired), 1);
			kvt__store_release(s, &acquired_ref);
		}
		failures += rc != 0;
		CHECKM(sightings(s, &k[0]) == before + (rc == 0),
		       "allocation %llu failing: acquire %d, %u sightings (%u before)",
		       (unsigned long long)n, rc, sightings(s, &k[0]), before);
	}
	CHECK(failures > 0);
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* admission.predict=chain, the replay's --admit-predict in the store: a new chain is not
 * written (no new chain has been seen again yet), a chain seen again is, and so is a chain
 * that extends a reused one (a conversation's next turn) on its first sighting. */
static void test_admission_predict(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "admission.predict", "chain");
	test_set(c, "dram.bytes", "256KiB");
	struct kvt_store *s = open_store(c);
	struct kvt_key a[15], b[10];
	make_keys(s, a, 15, 61); /* a[0..9] is the first turn, a[10..14] its continuation */
	make_keys(s, b, 10, 62);
	put_n(s, a, 10, 600);
	CHECK_RC(kvt_flush_sync(s), 0);
	struct kvt_stats st;
	kvt_stats(s, &st);
	CHECKM(st.tier[1].objects <= 1 && st.tier[1].writes_skipped >= 9,
	       "new chain: objects %llu, writes_skipped %llu",
	       (unsigned long long)st.tier[1].objects, (unsigned long long)st.tier[1].writes_skipped);
	put_n(s, b, 10, 700); /* pushes a out of DRAM; a new chain too */
	put_n(s, a, 10, 600); /* a again: reused, written */
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_stats(s, &st);
	uint64_t before = st.tier[1].objects;
	CHECKM(before >= 10 && before <= 12, "reused chain: objects %llu",
	       (unsigned long long)before);
	put_n(s, a, 15, 600); /* the next turn: its 5 new chunks continue a reused chain */
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_stats(s, &st);
	CHECKM(st.tier[1].objects == before + 5, "continuation: objects %llu, before %llu",
	       (unsigned long long)st.tier[1].objects, (unsigned long long)before);
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* NVMe with room for 4 of a 10-chunk chain: the 6 refused writes are counted once each,
 * though both the tier and the engine see the refusal. */
static void test_skips_counted_once(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "store.write_policy", "write-through");
	struct kvt_store *s = open_store(c);
	char cap[32];
	snprintf(cap, sizeof(cap), "%llu",
		 (unsigned long long)(4 * kvt_object_bytes(&G, G.chunk_tokens)));
	kvt_store_close(s);
	test_set(c, "nvme.bytes", cap);
	s = open_store(c);
	struct kvt_key k[10];
	make_keys(s, k, 10, 91);
	put_n(s, k, 10, 900);
	kvt_flush_sync(s);
	struct kvt_stats st;
	kvt_stats(s, &st);
	CHECKM(st.tier[1].objects == 4 && st.tier[1].writes_skipped == 6,
	       "objects %llu, writes_skipped %llu", (unsigned long long)st.tier[1].objects,
	       (unsigned long long)st.tier[1].writes_skipped);
	kvt_store_close(s);
	kvt_config_destroy(c);
}

/* Opaque keys (an engine's own block hashes) do not encode the geometry: a store of another
 * geometry that meets the same key on a shared directory sees a miss, and the object stays
 * intact for its owner - never dropped as "corrupt". */
static void test_foreign_object(const char *dir)
{
	struct kvt_config *ca = test_config("nvme", dir), *cb = test_config("nvme", dir);
	test_set(cb, "model.layers", "2");
	struct kvt_store *a = open_store(ca);
	struct kvt_key k;
	memset(&k, 0x5c, sizeof(k)); /* an opaque, caller-chosen key */
	put_n(a, &k, 1, 800);
	CHECK_RC(kvt_flush_sync(a), 0);
	kvt_store_close(a);
	struct kvt_store *b = open_store(cb);
	void *buf = malloc(PAYLOAD);
	CHECK_RC(kvt_get_sync(b, &k, 0, 0, buf, PAYLOAD, NULL), -ENOENT);
	struct kvt_stats st;
	kvt_stats(b, &st);
	CHECK(st.tier[0].checksum_failures == 0);
	kvt_store_close(b);
	free(buf);
	a = open_store(ca);
	CHECK_RC(get_check(a, &k, 800, NULL), 0);
	kvt_store_close(a);
	kvt_config_destroy(ca);
	kvt_config_destroy(cb);
}

/* ---- asynchronous puts without DRAM: encoded on the verify pool after kvt_put returns ---- */
static _Atomic int async_done, async_ok, async_removed;
/* arg: 'p' put, 'r' remove, 'f' flush */
static void async_cb(void *arg, const struct kvt_result *res)
{
	CHECK(!atomic_load(&in_call));
	atomic_fetch_add(&async_done, 1);
	char kind = *(const char *)arg;
	if (kind == 'r' && res->status >= 0)
		atomic_fetch_add(&async_removed, res->status);
	if (kind == 'r' ? res->status >= 0 : res->status == 0)
		atomic_fetch_add(&async_ok, 1);
	else
		fprintf(stderr, "store_engine: async %c failed: %s\n", kind, kvt_strerror(res->status));
}

/* Many puts in flight, each buffer kept until its callback (the API's contract); removes of
 * half the keys and a flush issued before any put completed. The removes must come after
 * the writes they follow (nothing removed comes back), the kept objects must read back
 * exact, and the flush must wait for every put submitted before it. */
static void test_async_put_nodram(const char *dir)
{
	struct kvt_config *c = test_config("nvme", dir);
	struct kvt_store *s = open_store(c);
	enum { N = 24 };
	struct kvt_key keys[N];
	make_keys(s, keys, N, 77);
	void *bufs[N];
	atomic_store(&async_done, 0);
	atomic_store(&async_ok, 0);
	atomic_store(&async_removed, 0);
	for (int i = 0; i < N; i++) {
		bufs[i] = malloc(PAYLOAD);
		test_fill(bufs[i], PAYLOAD, 9000 + (uint64_t)i);
		int rc;
		atomic_store(&in_call, 1);
		while ((rc = kvt_put(s, &keys[i], i ? &keys[i - 1] : NULL, G.chunk_tokens, bufs[i],
				     PAYLOAD, async_cb, "p")) == -EAGAIN) {
			atomic_store(&in_call, 0);
			kvt_poll(s, 1);
			atomic_store(&in_call, 1);
		}
		atomic_store(&in_call, 0);
		CHECK_RC(rc, 0);
	}
	/* children first: a chunk is never removed before its suffix is */
	for (int i = N - 1; i >= 0; i -= 2) {
		atomic_store(&in_call, 1);
		CHECK_RC(kvt_remove(s, &keys[i], async_cb, "r"), 0);
		atomic_store(&in_call, 0);
	}
	atomic_store(&in_call, 1);
	CHECK_RC(kvt_flush(s, async_cb, "f"), 0);
	atomic_store(&in_call, 0);
	int want = N + N / 2 + 1;
	for (int waited = 0; atomic_load(&async_done) < want && waited < 300; waited++)
		kvt_poll(s, 100); /* 30 s at most */
	CHECK(atomic_load(&async_done) == want);
	CHECK(atomic_load(&async_ok) == want);
	/* each remove found its object: it ran after the write it followed, not before */
	CHECK(atomic_load(&async_removed) == N / 2);
	for (int i = 0; i < N; i++) {
		free(bufs[i]); /* every callback has run: the store let go of them */
		int rc = get_check(s, &keys[i], 9000 + (uint64_t)i, NULL);
		CHECK_RC(rc, i % 2 ? -ENOENT : 0);
	}
	struct kvt_stats st;
	CHECK_RC(kvt_stats(s, &st), 0);
	CHECK(st.write_behind_pending == 0);
	kvt_store_close(s);
	kvt_config_destroy(c);
}

static void test_config_errors(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	char err[256];
	CHECK_RC(kvt_config_set(c, "nvme.queue_depth", "0", err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "nvme.queue_depth"));
	CHECK_RC(kvt_config_set(c, "dram.bytes", "12XB", err, sizeof(err)), -EINVAL);
	CHECK_RC(kvt_config_set(c, "no.such", "1", err, sizeof(err)), -ENOENT);
	CHECK_RC(kvt_config_set(c, "store.write_policy", "sometimes", err, sizeof(err)), -EINVAL);
	struct kvt_store *s;
	test_set(c, "store.tiers", "dram,bogus");
	CHECK(kvt_store_open(c, &s) == -EINVAL);
	test_set(c, "store.tiers", "nvme,dram");
	CHECK(kvt_store_open(c, &s) == -EINVAL);
	test_set(c, "store.tiers", "dram,dram");
	CHECK(kvt_store_open(c, &s) == -EINVAL);
	test_set(c, "store.tiers", "dram");
	test_set(c, "model.kind", "mla"); /* MLA needs kv_heads == 1 */
	CHECK(kvt_store_open(c, &s) == -EINVAL);
	kvt_config_destroy(c);
}

int main(void)
{
	char *dir = test_tmpdir("engine");
	const char *steps[] = {"basic", "restart", "write-through", "write-back", "selective",
			       "corruption", "threads", "admission", "foreign", "config", "skips",
			       "corruption-log", "admission-predict", "async-put-nodram",
			       "admission-reoffer", "admission-sightings", "reoffer-flush",
			       "budget-reoffer", "reoffer-dirty-flush", "flush-nomem", "reoffer-marks", "acquire-sighting",
			       "selective-again", "prefetch-one-place", "selective-many"};
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		char sub[4200];
		snprintf(sub, sizeof(sub), "%s/%s", dir, steps[i]);
		mkdir(sub, 0755);
		fprintf(stderr, "store_engine: %s\n", steps[i]);
		switch (i) {
		case 0: test_basic(sub); break;
		case 1: test_restart_promote_prefetch(sub); break;
		case 2: case 3: case 4: test_policies(sub, steps[i]); break;
		case 5: test_corruption(sub); break;
		case 6: test_threads(sub); break;
		case 7: test_admission(sub); break;
		case 8: test_foreign_object(sub); break;
		case 9: test_config_errors(sub); break;
		case 10: test_skips_counted_once(sub); break;
		case 11: test_corruption_log(sub); break;
		case 12: test_admission_predict(sub); break;
		case 13: test_async_put_nodram(sub); break;
		case 14: test_admission_reoffer(sub); break;
		case 15: test_admission_sightings(sub); break;
		case 16: test_reoffer_flush(sub); break;
		case 17: test_budget_reoffer(sub); break;
		case 18: test_reoffer_dirty_flush(sub); break;
		case 19: test_flush_nomem(sub); break;
		case 20: test_reoffer_marks(sub); break;
		case 21: test_acquire_sighting(sub); break;
		case 22: test_selective_again(sub); break;
		case 23: test_prefetch_one_place(sub); break;
		case 24: test_selective_many(sub); break;
		}
	}
	test_rmdir(dir);
	free(dir);
	printf("store_engine: all passed\n");
	return 0;
}
