/*
 * store_fill_race_stress.c - the read side (gets and prefetches that promote a key from a
 * real nvme tier into DRAM) racing puts, removes and evictions of the same keys, with
 * write-through and a DRAM pool of a few slots (every fill evicts). Checked:
 *  1. a get issued after a remove of its key completed, with no put of the key started
 *     before the get returned, misses;
 *  2. every get that returns bytes returns the key's own bytes (seeded by key);
 *  3. once every call has returned and write-behind settled, a key DRAM holds is also on
 *     nvme (write-through: DRAM is never the only copy, clean);
 *  4. once every key is removed, every DRAM slot is free (nothing pinned for good).
 * Default chain dram,nvme,fs (dram,nvme under TSan: DEFAULT_TIERS) with an nvme tier
 * smaller than the key set (it evicts, so some fills come from fs and write nvme again:
 * store.promote_local), plus a forced-order replay of that promotion's nvme write
 * registered after a remove ran whole. Found nothing on the
 * engine of 2026-12-06 (a review helper's probe of the read side after the put/remove fix).
 * Environment: KVT_RACE_MS (default 6000), KVT_RACE_TIERS (dram,nvme,fs | dram,nvme),
 * KVT_RACE_POLICY (write-through), KVT_RACE_NVME (600KiB). Exit 0 pass, 1 fail.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "dram.h"
#include "engine.h"
#include "engine_internal.h"
#include "lib/tierh.h"
#include "store_key.h"
#include "testlib.h"
#include "tier.h"

enum { NKEYS = 24, WRITERS = 2, READERS = 3 };

static struct kvt_store *S;
static size_t LEN;
static uint32_t TOKENS;
static struct kvt_key keys[NKEYS];
/* per key: the count of transitions, and its state: 0 removed (a remove completed, no put
 * since), 1 put under way or done, 2 remove under way */
static _Atomic uint64_t ev[NKEYS];
static _Atomic int st[NKEYS];
static _Atomic int stop;
static _Atomic long bad_gone, bad_bytes, gets_ok, gets_gone_checked, prefetches;

static uint64_t xs(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void *writer(void *a)
{
	uint64_t rng = (uint64_t)(uintptr_t)a * 7919 + 17;
	int w = (int)(uintptr_t)a;
	void *buf = malloc(LEN);
	CHECK(buf);
	while (!atomic_load(&stop)) {
		int k = (int)(xs(&rng) % (NKEYS / WRITERS)) * WRITERS + w; /* keys of its own */
		if (atomic_load(&st[k]) == 0) {
			atomic_fetch_add(&ev[k], 1); /* before the state: see reader */
			atomic_store(&st[k], 1);
			test_fill(buf, LEN, 1000 + (uint64_t)k);
			int rc;
			while ((rc = kvt_put_sync(S, &keys[k], NULL, TOKENS, buf, LEN)) ==
				   -EAGAIN ||
			       rc == -ENOSPC) /* write-back: the cleaner was started */
				usleep(50);
			CHECK_RC(rc, 0);
		} else {
			atomic_fetch_add(&ev[k], 1);
			atomic_store(&st[k], 2);
			CHECK(kvt_remove_sync(S, &keys[k]) >= 0);
			atomic_store(&st[k], 0);
			atomic_fetch_add(&ev[k], 1);
		}
		uint32_t spin = (uint32_t)(xs(&rng) % 20000);
		for (volatile uint32_t i = 0; i < spin; i++)
			;
	}
	free(buf);
	return NULL;
}

static void *reader(void *a)
{
	uint64_t rng = (uint64_t)(uintptr_t)a * 104729 + 3;
	void *buf = malloc(LEN);
	CHECK(buf);
	while (!atomic_load(&stop)) {
		int k = (int)(xs(&rng) % NKEYS);
		if (xs(&rng) % 4 == 0) {
			int n = 1 + (int)(xs(&rng) % 3);
			struct kvt_key ks[3];
			for (int i = 0; i < n; i++)
				ks[i] = keys[(k + i) % NKEYS];
			kvt_prefetch_sync(S, ks, (size_t)n, 0);
			atomic_fetch_add(&prefetches, 1);
			continue;
		}
		uint64_t e0 = atomic_load(&ev[k]); /* then the state: removed at e0 or later */
		int s0 = atomic_load(&st[k]);
		struct kvt_result res;
		int rc = kvt_get_sync(S, &keys[k], 0, 0, buf, LEN, &res);
		uint64_t e1 = atomic_load(&ev[k]);
		if (rc == 0) {
			atomic_fetch_add(&gets_ok, 1);
			if (!test_check(buf, LEN, 1000 + (uint64_t)k)) {
				atomic_fetch_add(&bad_bytes, 1);
				printf("  key %d: a get returned wrong bytes (tier %d)\n", k,
				       res.tier);
			}
			if (s0 == 0 && e1 == e0) {
				if (atomic_fetch_add(&bad_gone, 1) < 5)
					printf("  key %d: removed before the get, no put since, "
					       "and the get found it (tier %d)\n",
					       k, res.tier);
			}
		} else if (s0 == 0 && e1 == e0) {
			atomic_fetch_add(&gets_gone_checked, 1);
		}
	}
	free(buf);
	return NULL;
}

/* Forced order, dram,nvme,fs: a promotion from fs publishes its slot, a remove of the key
 * runs whole (DRAM lets it go under wb_lock, nvme and fs cleared), and only then does the
 * promotion register its write into nvme (fill_read_done's promote_local job). The job must
 * not bring the key back (wb_register finds the key gone from DRAM). */
static bool replay_local(struct kvt_store *s)
{
	struct kvt_key k, sk;
	test_chain_keys(s, &k, 1, 0x7f000001u);
	kvt__storage_key(s->ns_id, &k, &sk);
	void *buf = malloc(LEN);
	CHECK(buf);
	test_fill(buf, LEN, 4242);
	uint64_t obj_bytes = kvt_object_bytes(&s->geo, TOKENS);
	struct kvt_slot_ref ref;
	CHECK_RC(kvt__dram_alloc(s->dram, &sk, NULL, &ref), 0); /* fill_start */
	CHECK_RC(kvt__object_encode(ref.buf, obj_bytes, &s->geo, s->ns_id, &sk, TOKENS, buf, LEN),
		 0);
	ref.object_bytes = obj_bytes;
	ref.n_tokens = TOKENS;
	CHECK(kvt__dram_publish(s->dram, ref.id, obj_bytes, TOKENS, true)); /* fill_read_done */
	CHECK(kvt_remove_sync(s, &k) >= 0);
	kvt__dram_pin(s->dram, ref.id);
	kvt__e_wb_submit(s, &sk, &ref, 2, NULL, NULL, false); /* the promote_local job */
	kvt__dram_unpin(s->dram, ref.id);		      /* the first waiter's */
	test_wb_settle(s);
	uint8_t present = 0;
	CHECK_EQ(th_exists(kvt__store_tier(s, 1), &sk, 1, &present), 0);
	bool in_dram = kvt__dram_contains(s->dram, &sk, false);
	printf("  replay (promotion's nvme job after a remove): DRAM %s, nvme %s\n",
	       in_dram ? "holds it" : "lacks it", present ? "holds it" : "lacks it");
	free(buf);
	return !in_dram && !present;
}

/* Under ThreadSanitizer, dram,nvme: the nvme tier opens and closes its files through
 * io_uring, which TSan does not see, so a descriptor number the fs tier's own open reuses
 * after one of them reads to it as a race on the descriptor (a false report, seen in CI on
 * 2026-12-06: fs's close against nvme's earlier fstat of the same number). */
#if defined(__SANITIZE_THREAD__)
#define DEFAULT_TIERS "dram,nvme"
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DEFAULT_TIERS "dram,nvme"
#endif
#endif
#ifndef DEFAULT_TIERS
#define DEFAULT_TIERS "dram,nvme,fs"
#endif

int main(void)
{
	char *dir = test_tmpdir("store_fill_race_stress");
	const char *tiers = getenv("KVT_RACE_TIERS") ? getenv("KVT_RACE_TIERS") : DEFAULT_TIERS;
	struct kvt_config *c = test_config(tiers, dir);
	test_set(c, "store.write_policy",
		 getenv("KVT_RACE_POLICY") ? getenv("KVT_RACE_POLICY") : "write-through");
	test_set(c, "dram.bytes", "256KiB");
	test_set(c, "nvme.bytes", getenv("KVT_RACE_NVME") ? getenv("KVT_RACE_NVME") : "600KiB");
	char fsdir[512];
	snprintf(fsdir, sizeof(fsdir), "%s/fs", dir);
	if (strstr(tiers, "fs")) {
		CHECK(mkdir(fsdir, 0700) == 0);
		test_set(c, "fs.dir", fsdir);
	}
	int n_deep = !strcmp(tiers, "dram,nvme,fs") ? 2 : 1;
	kvt_config_set_log(c, test_log, NULL, KVT_LOG_WARN);
	S = test_open(c);
	const struct kvt_geometry *g = kvt_store_geometry(S);
	TOKENS = g->chunk_tokens;
	LEN = kvt_payload_bytes(g, TOKENS);
	struct kvt_dram *d = kvt__store_dram(S);
	struct kvt_tier *nv = kvt__store_tier(S, 1);
	CHECK(d && nv);
	printf("  %u DRAM slots, %d keys\n", kvt__dram_slots(d), NKEYS);
	if (n_deep > 1)
		CHECKM(replay_local(S), "a promotion's write brought a removed key back");
	test_chain_keys(S, keys, NKEYS, 0x5eed0001u);
	const char *env = getenv("KVT_RACE_MS");
	double run_ms = env ? atof(env) : 6000;
	long dram_only = 0, rounds = 0;
	uint64_t t0 = test_now_ns();
	do {
		atomic_store(&stop, 0);
		pthread_t w[WRITERS], r[READERS];
		for (uintptr_t i = 0; i < WRITERS; i++)
			CHECK(pthread_create(&w[i], NULL, writer, (void *)i) == 0);
		for (uintptr_t i = 0; i < READERS; i++)
			CHECK(pthread_create(&r[i], NULL, reader, (void *)i) == 0);
		usleep(500 * 1000);
		atomic_store(&stop, 1);
		for (int i = 0; i < WRITERS; i++)
			pthread_join(w[i], NULL);
		for (int i = 0; i < READERS; i++)
			pthread_join(r[i], NULL);
		test_wb_settle(S);
		CHECK_RC(kvt_flush_sync(S), 0);
		test_wb_settle(S);
		struct kvt_key sk[NKEYS];
		uint8_t present[NKEYS];
		for (int k = 0; k < NKEYS; k++)
			kvt__storage_key(kvt__store_ns_id(S), &keys[k], &sk[k]);
		CHECK_EQ(th_exists(nv, sk, NKEYS, present), 0);
		if (n_deep > 1) {
			uint8_t p2[NKEYS];
			CHECK_EQ(th_exists(kvt__store_tier(S, 2), sk, NKEYS, p2), 0);
			for (int k = 0; k < NKEYS; k++)
				present[k] |= p2[k];
		}
		for (int k = 0; k < NKEYS; k++) {
			bool in_dram = kvt__dram_contains(d, &sk[k], false);
			if (in_dram && !present[k]) {
				if (dram_only++ < 5)
					printf(
					    "  round %ld key %d (state %d): in DRAM, not on nvme\n",
					    rounds, k, atomic_load(&st[k]));
			}
			if (atomic_load(&st[k]) == 0 && (in_dram || present[k])) {
				if (atomic_fetch_add(&bad_gone, 1) < 5)
					printf("  round %ld key %d: removed, yet %s holds it\n",
					       rounds, k, in_dram ? "DRAM" : "nvme");
			}
		}
		rounds++;
	} while (test_ms_since(t0) < run_ms);
	for (int k = 0; k < NKEYS; k++)
		CHECK(kvt_remove_sync(S, &keys[k]) >= 0);
	test_wb_settle(S);
	uint32_t head = kvt__dram_headroom(d);
	printf("  %ld rounds: %ld gets with bytes, %ld gets after a remove checked, %ld "
	       "prefetches; removed found %ld, wrong bytes %ld, DRAM only %ld; headroom %u of %u\n",
	       rounds, atomic_load(&gets_ok), atomic_load(&gets_gone_checked),
	       atomic_load(&prefetches), atomic_load(&bad_gone), atomic_load(&bad_bytes), dram_only,
	       head, kvt__dram_slots(d));
	CHECK_EQ(atomic_load(&bad_bytes), 0);
	CHECK_EQ(atomic_load(&bad_gone), 0);
	CHECK_EQ(dram_only, 0);
	CHECK_EQ(head, kvt__dram_slots(d));
	kvt_store_close(S);
	test_rmdir(dir);
	free(dir);
	printf("store_fill_race_stress: ok\n");
	return 0;
}
