/*
 * store_blocked_pool.c - a hung deeper tier does not leave DRAM full of slots it can never
 * evict. kvt_remove of keys whose tier then hangs leaves each remove call out past its
 * deadline, and a put of the same key again skips that tier (an older call of the key is
 * still out there: "blocked"). Until 2026-12-06 such a slot stayed plainly dirty, which the
 * pool never evicts; on a hung tier that is for ever, so a small DRAM filled with them and
 * every fresh put was refused -ENOSPC while the tier hung (a review's reproducer: four
 * slots, 9.5 s of retries). Now the slot is marked as after a failed write: unsaved
 * (evictable, its eviction counted in evicted_unsaved). The control: the same hung tier,
 * fresh keys only - 8 of 8 puts succeed (those slots were always unsaved).
 * DRAM of 4 slots over a fault-injecting tier around a real NVMe tier, 300 ms deadlines,
 * every tier answer held 60 s.
 */
#include <sys/stat.h>

#include "engine.h"
#include "testlib.h"
#include "tier.h"
#include "tier_faulty.h"

static size_t PAYLOAD;
static struct kvt_geometry G;
static uint8_t *BUF;

static struct kvt_store *open_store(const char *dir)
{
	struct kvt_config *c = test_config("dram,faulty", dir);
	test_set(c, "faulty.inner", "nvme");
	test_set(c, "dram.bytes", "147456"); /* 4 slots of 36864 */
	test_set(c, "dram.policy", "lru");
	test_set_deadline(c, "300", "100");
	struct kvt_store *s = test_open(c);
	G = *kvt_store_geometry(s);
	PAYLOAD = kvt_payload_bytes(&G, G.chunk_tokens);
	return s;
}

static void keys(struct kvt_store *s, struct kvt_key *k, int n, uint32_t salt)
{
	uint32_t *tok = malloc((size_t)n * G.chunk_tokens * 4);
	for (size_t i = 0; i < (size_t)n * G.chunk_tokens; i++)
		tok[i] = (uint32_t)(i * 13 + salt);
	CHECK(kvt_keys_from_tokens(kvt_store_ns_id(s), G.chunk_tokens, tok,
				   (size_t)n * G.chunk_tokens, k, (size_t)n) == n);
	free(tok);
}

static int put_retry(struct kvt_store *s, const struct kvt_key *k, double ms)
{
	uint64_t t0 = test_now_ns();
	int rc;
	do {
		rc = kvt_put_sync(s, k, NULL, G.chunk_tokens, BUF, PAYLOAD);
		if (rc != -EAGAIN && rc != -ENOSPC)
			return rc;
		usleep(20000);
	} while (test_ms_since(t0) < ms);
	return rc;
}

int main(void)
{
	char *dir = test_tmpdir("store_blocked_pool");
	struct kvt_store *s = open_store(dir);
	BUF = malloc(PAYLOAD);
	test_fill(BUF, PAYLOAD, 1);
	uint32_t slots = kvt__dram_slots(kvt__store_dram(s));
	printf("dram slots: %u\n", slots);
	struct kvt_key k[8], fresh[8];
	keys(s, k, 4, 100);
	keys(s, fresh, 8, 900);
	for (int i = 0; i < 4; i++)
		CHECK_RC(put_retry(s, &k[i], 5000), 0);
	CHECK_RC(kvt_flush_sync(s), 0);

	/* the tier hangs: every answer held 60 s */
	kvt__faulty_set(kvt__store_tier(s, 1), 0, 0, 60000);
	struct test_box rm[4];
	memset(rm, 0, sizeof(rm));
	for (int i = 0; i < 4; i++)
		CHECK_RC(kvt_remove(s, &k[i], test_box_cb, &rm[i]), 0);
	for (int i = 0; i < 4; i++)
		while (!rm[i].done)
			kvt_poll(s, 20);
	printf("removes done (their nvme calls missed the deadline)\n");
	for (int i = 0; i < 4; i++) {
		int rc = put_retry(s, &k[i], 3000);
		printf("re-put %d: %s\n", i, kvt_strerror(rc));
	}
	usleep(1500 * 1000); /* many deadlines */
	int rc = put_retry(s, &fresh[0], 8000);
	struct kvt_stats st;
	kvt_stats(s, &st);
	printf("fresh put while the tier hangs (after re-puts): %s; dram objects %llu, evicted "
	       "unsaved %llu\n",
	       kvt_strerror(rc), (unsigned long long)st.tier[0].objects,
	       (unsigned long long)st.evicted_unsaved);
	CHECKM(rc == 0, "a fresh put with DRAM full of re-put slots of a hung tier: %s",
	       kvt_strerror(rc));
	CHECKM(st.evicted_unsaved >= 1, "evicted_unsaved %llu: the re-put slot's loss uncounted",
	       (unsigned long long)st.evicted_unsaved);
	kvt_store_close(s);
	test_rmdir(dir);
	free(dir);

	/* control: same hung tier, no remove / re-put */
	dir = test_tmpdir("store_blocked_pool_ctl");
	s = open_store(dir);
	kvt__faulty_set(kvt__store_tier(s, 1), 0, 0, 60000);
	int ok = 0;
	for (int i = 0; i < 8; i++)
		ok += put_retry(s, &fresh[i], 3000) == 0;
	printf("control: %d of 8 fresh puts succeed on the same hung tier\n", ok);
	CHECK_EQ(ok, 8);
	kvt_store_close(s);
	test_rmdir(dir);
	free(dir);
	free(BUF);
	printf("store_blocked_pool: ok\n");
	return 0;
}
