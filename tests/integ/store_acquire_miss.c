/*
 * store_acquire_miss.c - a DRAM miss answered through kvt__store_acquire (a device restore,
 * kvtierd's GET_PIN) counts in DRAM's misses, as its hits count and as kvt_get counts
 * both. Until 2026-12-06 it did not: DRAM's hit ratio on those paths read 100 % (a
 * review). A chunk flushed to NVMe, the store reopened with DRAM empty, one acquire: DRAM
 * 0 hits 1 miss, NVMe 1 hit; a second acquire: a DRAM hit.
 */
#include <stdatomic.h>

#include "engine.h"
#include "testlib.h"
#include "tier.h"

static _Atomic int got = 0;
static struct kvt_slot_ref got_ref;
static void acq_cb(void *arg, int rc, const struct kvt_slot_ref *ref, int tier)
{
	(void)arg;
	(void)tier;
	if (rc == 0)
		got_ref = *ref;
	atomic_store(&got, rc == 0 ? 1 : 2);
}

int main(void)
{
	char *dir = test_tmpdir("store_acquire_miss");
	struct kvt_config *c = test_config("dram,nvme", dir);
	struct kvt_store *s = test_open(c);
	struct kvt_geometry G = *kvt_store_geometry(s);
	size_t len = kvt_payload_bytes(&G, G.chunk_tokens);
	uint8_t *buf = malloc(len);
	test_fill(buf, len, 4);
	struct kvt_key k;
	uint32_t tok[16];
	for (int i = 0; i < 16; i++)
		tok[i] = (uint32_t)(i + 99);
	CHECK(kvt_keys_from_tokens(kvt_store_ns_id(s), G.chunk_tokens, tok, 16, &k, 1) == 1);
	CHECK_RC(kvt_put_sync(s, &k, NULL, G.chunk_tokens, buf, len), 0);
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_store_close(s);
	c = test_config("dram,nvme", dir);
	s = test_open(c); /* DRAM empty */
	struct kvt_key sk;
	kvt_storage_key(kvt_store_ns_id(s), &k, &sk);
	CHECK_RC(kvt__store_acquire(s, &sk, acq_cb, NULL), 0);
	while (!atomic_load(&got))
		usleep(1000);
	CHECK_EQ(atomic_load(&got), 1);
	kvt__store_release(s, &got_ref);
	struct kvt_stats st;
	kvt_stats(s, &st);
	printf("acquire of a chunk only NVMe held: dram hits %llu misses %llu; nvme hits %llu\n",
	       (unsigned long long)st.tier[0].hits, (unsigned long long)st.tier[0].misses,
	       (unsigned long long)st.tier[1].hits);
	CHECKM(st.tier[0].misses == 1 && st.tier[0].hits == 0 && st.tier[1].hits == 1,
	       "dram hits %llu misses %llu, nvme hits %llu", (unsigned long long)st.tier[0].hits,
	       (unsigned long long)st.tier[0].misses, (unsigned long long)st.tier[1].hits);
	atomic_store(&got, 0);
	CHECK_RC(kvt__store_acquire(s, &sk, acq_cb, NULL), 0);
	while (!atomic_load(&got))
		usleep(1000);
	CHECK_EQ(atomic_load(&got), 1);
	kvt__store_release(s, &got_ref);
	kvt_stats(s, &st);
	CHECK(st.tier[0].hits == 1 && st.tier[0].misses == 1);
	kvt_store_close(s);
	test_rmdir(dir);
	free(dir);
	free(buf);
	printf("store_acquire_miss: ok\n");
	return 0;
}
