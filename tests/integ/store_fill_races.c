/*
 * store_fill_races.c - a get's promotion (fill) of a key from NVMe into DRAM, overtaken by
 * a remove of the key or by its own deadline. Real NVMe files in a temporary directory;
 * the test holds one chosen read, or its answer, back (a device stalled on that read: its
 * bytes land in the fill's slot late) while every other call goes through. Each
 * section failed on the engine before its fix (src/engine_read.c):
 *  1. remove while the fill reads: the remove skipped the still-filling slot and reported
 *     the key gone, then the fill published it - lookups and gets served the removed chunk
 *     from DRAM, and a get sent after the remove joined the fill and got it too. Now the
 *     fill answers the gets that came before the remove, and publishes nothing.
 *  2. the fill misses its deadline: its slot stayed in the DRAM index (filling) until the
 *     tier answered, and every put of the key was told to retry (-EAGAIN) with DRAM empty
 *     - for ever, on a hung tier. Now the slot leaves the index at the deadline, the put
 *     lands, and the late read's bytes still land in memory no other object uses (the
 *     key and other keys put meanwhile, then checked in DRAM).
 *  3. a get after kvt_remove returned, while the remove's NVMe call is still out (held, in
 *     time; held past its deadline; and without promotion, a bounce read): DRAM had let the key go, NVMe still held it, and
 *     the get promoted it back - served from NVMe, then from DRAM for good once the remove
 *     reported it gone ("remove: 1 tier(s); get sent after it: Success (tier 1); once the
 *     remove is done: get Success (tier 0)"). Now what a deeper tier holds of a key whose
 *     remove is still out there, and no put came since, is a miss; a put after the remove
 *     still wins.
 *  4. a prefetch's fill, joined by a get, overtaken by a remove: the get still gets the
 *     bytes, but the prefetch counted the chunk resident (status 1, nothing in DRAM) and
 *     the store's stats counted nothing ("prefetch sent before it: 1 resident ...
 *     promotions 0, discarded 0"). Now the prefetch says 0 and kvt_stats counts the fill
 *     in promotions_discarded.
 * Found by a review helper. Exit 0 pass, 1 fail.
 */
#include <inttypes.h>

#include "engine.h"
#include "testlib.h"
#include "tier.h"

#include "lib/held_tier.h"

/* ------------------------------------------------------------ holding one read back */

static _Atomic int hold_next_ms; /* the next read is held this long, then submitted */
static _Atomic int answer_next_ms; /* the next read goes through, its answer held this long */
static _Atomic int read_done;    /* the read whose answer is held has its bytes */
static _Atomic int hold_remove_ms; /* the next remove is held this long, then submitted */

struct held {
	struct held_answer a; /* first; a.ms: how long the call, or its answer, is held */
	struct kvt_tier *t;
	struct kvt_key key;
	struct kvt_seg seg;
};

static void *read_later(void *p)
{
	struct held *h = p;
	usleep((useconds_t)h->a.ms * 1000);
	int rc = inner_ops->read(h->t, &h->key, &h->seg, 1, h->a.cb, h->a.arg);
	if (rc < 0)
		h->a.cb(h->a.arg, rc);
	free(h);
	atomic_fetch_sub(&held_out, 1);
	return NULL;
}

static void read_answered(void *arg, int64_t rc)
{
	atomic_store(&read_done, 1);
	held_answered(arg, rc);
}

static int held_read(struct kvt_tier *t, const struct kvt_key *key, const struct kvt_seg *segs,
		     uint32_t nsegs, kvt_tier_cb cb, void *arg)
{
	int ms = atomic_exchange(&hold_next_ms, 0), ams = atomic_exchange(&answer_next_ms, 0);
	struct held *h = ms || ams ? calloc(1, sizeof(*h)) : NULL;
	if (!h || nsegs != 1) {
		free(h);
		return inner_ops->read(t, key, segs, nsegs, cb, arg);
	}
	*h = (struct held){.a = {.ms = ms ? ms : ams, .cb = cb, .arg = arg}, .t = t, .key = *key,
			   .seg = segs[0]};
	atomic_fetch_add(&held_out, 1);
	int rc = 0;
	if (ams) {
		rc = inner_ops->read(t, key, segs, nsegs, read_answered, h);
	} else if (!held_start(read_later, h)) {
		rc = -ENOMEM;
	}
	if (rc < 0) {
		atomic_fetch_sub(&held_out, 1);
		free(h);
	}
	return rc;
}

static void *remove_later(void *p)
{
	struct held *h = p;
	usleep((useconds_t)h->a.ms * 1000);
	int rc = inner_ops->remove(h->t, &h->key, h->a.cb, h->a.arg);
	if (rc < 0)
		h->a.cb(h->a.arg, rc);
	free(h);
	atomic_fetch_sub(&held_out, 1);
	return NULL;
}

static int held_remove(struct kvt_tier *t, const struct kvt_key *key, kvt_tier_cb cb, void *arg)
{
	int ms = atomic_exchange(&hold_remove_ms, 0);
	struct held *h = ms ? calloc(1, sizeof(*h)) : NULL;
	if (!h)
		return inner_ops->remove(t, key, cb, arg);
	*h = (struct held){.a = {.ms = ms, .cb = cb, .arg = arg}, .t = t, .key = *key};
	atomic_fetch_add(&held_out, 1);
	if (!held_start(remove_later, h)) {
		atomic_fetch_sub(&held_out, 1);
		free(h);
		return -ENOMEM;
	}
	return 0;
}

/* held_wrap's entries: reads and removes */
static void hold_reads(struct kvt_tier_ops *o)
{
	o->read = held_read;
	o->remove = held_remove;
}

static void wait_held(struct kvt_store *s)
{
	while (atomic_load(&held_out))
		kvt_poll(s, 20);
	uint64_t t0 = test_now_ns(); /* its answer comes on the tier's thread */
	while (test_ms_since(t0) < 300)
		kvt_poll(s, 50);
}

/* ------------------------------------------------------------ the sections */

/* dram,nvme; the key (bytes of seed) put and flushed, then the store reopened: the key is
 * on NVMe only, and NVMe's reads go through the holder. */
static void setup(struct fixture *f, const char *base, const char *name, const char *ceil_ms,
		  uint64_t seed)
{
	snprintf(f->dir, sizeof(f->dir), "%s/%s", base, name);
	f->c = test_config("dram,nvme", f->dir);
	test_set_deadline(f->c, ceil_ms, "50");
	CHECK_RC(kvt_store_open(f->c, &f->s), 0);
	const struct kvt_geometry *g = kvt_store_geometry(f->s);
	f->tokens = g->chunk_tokens;
	f->len = kvt_payload_bytes(g, g->chunk_tokens);
	f->buf = malloc(f->len);
	f->back = malloc(f->len);
	test_chain_keys(f->s, &f->k, 1, 4343);
	test_fill(f->buf, f->len, seed);
	CHECK_RC(kvt_put_sync(f->s, &f->k, NULL, f->tokens, f->buf, f->len), 0);
	CHECK_RC(kvt_flush_sync(f->s), 0);
	kvt_store_close(f->s);
	CHECK_RC(kvt_store_open(f->c, &f->s), 0);
	held_wrap(f->s, 1, hold_reads);
}

static void teardown(struct fixture *f)
{
	kvt_store_close(f->s);
	kvt_config_destroy(f->c);
	free(f->buf);
	free(f->back);
}

static void test_remove_during_fill(const char *base)
{
	printf("  1. remove while a get promotes the key\n");
	struct fixture f;
	setup(&f, base, "rm", "5000", 42); /* the held read is well within its deadline */
	atomic_store(&answer_next_ms, 800);
	struct test_box g1 = {0}, g2 = {0};
	CHECK_RC(kvt_get(f.s, &f.k, 0, 0, f.back, f.len, test_box_cb, &g1), 0); /* the fill */
	while (!atomic_load(&read_done)) /* the bytes are read; the answer is held */
		usleep(1000);
	int rm = kvt_remove_sync(f.s, &f.k);
	uint8_t *back2 = malloc(f.len);
	CHECK_RC(kvt_get(f.s, &f.k, 0, 0, back2, f.len, test_box_cb, &g2), 0); /* after it */
	while (!g1.done || !g2.done)
		kvt_poll(f.s, 50);
	bool g1_ok = g1.res.status == 0 && test_check(f.back, f.len, 42);
	wait_held(f.s);
	int found = kvt_lookup_sync(f.s, &f.k, 1, NULL);
	struct kvt_result res;
	int g3 = kvt_get_sync(f.s, &f.k, 0, 0, f.back, f.len, &res);
	int pf = kvt_prefetch_sync(f.s, &f.k, 1, 0);
	printf("    remove: %d tier(s); get sent before it: %s (tier %d)%s; get sent after it: "
	       "%s (tier %d)\n", rm, kvt_strerror(g1.res.status), g1.res.tier,
	       g1_ok ? ", its bytes" : "", kvt_strerror(g2.res.status), g2.res.tier);
	printf("    once the fill is done: lookup %d, get %s (tier %d), prefetch %d resident\n",
	       found, kvt_strerror(g3), g3 == 0 ? res.tier : -1, pf);
	CHECK(rm >= 1);
	CHECK(g1_ok);			  /* it came before the remove */
	CHECK_RC(g2.res.status, -ENOENT); /* it came after */
	CHECK_EQ(found, 0);
	CHECK_RC(g3, -ENOENT);
	CHECK_EQ(pf, 0);
	free(back2);
	teardown(&f);
}

static void test_fill_deadline_then_put(const char *base)
{
	printf("  2. a promotion misses its deadline, the key is put\n");
	struct fixture f;
	setup(&f, base, "late", "400", 5);
	enum { HOLD_MS = 2500, N = 16 };
	/* N other keys, the key and the late read's slot fit the pool: nothing is evicted. */
	CHECK(kvt__dram_slots(kvt__store_dram(f.s)) >= N + 2);
	atomic_store(&hold_next_ms, HOLD_MS);
	struct kvt_result res;
	uint64_t t0 = test_now_ns();
	int g = kvt_get_sync(f.s, &f.k, 0, 0, f.back, f.len, &res);
	printf("    get: %s (cause %s) after %.0f ms\n", kvt_strerror(g), kvt_strerror(res.cause),
	       test_ms_since(t0));
	CHECK_RC(g, -ENOENT);
	CHECK_RC(res.cause, -ETIMEDOUT);
	/* The key again, with other bytes than the tier's copy (so that the late read's
	 * landing in a slot of the key would show): DRAM is empty, so it lands at once. */
	test_fill(f.buf, f.len, 6);
	int tries = 0, rc;
	t0 = test_now_ns();
	while ((rc = kvt_put_sync(f.s, &f.k, NULL, f.tokens, f.buf, f.len)) == -EAGAIN &&
	       test_ms_since(t0) < HOLD_MS + 1000) {
		tries++;
		usleep(10000);
	}
	bool still_held = atomic_load(&held_out) == 1;
	printf("    put while the read is held: %s after %d retries, %.0f ms%s\n",
	       kvt_strerror(rc), tries, test_ms_since(t0),
	       still_held ? "" : " (the late read had landed)");
	CHECK_RC(rc, 0);
	CHECK_EQ(tries, 0);
	CHECK(still_held);
	/* More of the pool taken while the late read may still write into its old slot: had
	 * that slot been freed, an object here would be overwritten by the key's old one. */
	struct kvt_key ks[N];
	test_chain_keys(f.s, ks, N, 77);
	uint8_t *b = malloc(f.len);
	for (int i = 0; i < N; i++) {
		test_fill(b, f.len, 100 + i);
		t0 = test_now_ns();
		while ((rc = kvt_put_sync(f.s, &ks[i], NULL, f.tokens, b, f.len)) == -EAGAIN &&
		       test_ms_since(t0) < 5000)
			usleep(10000);
		CHECK_RC(rc, 0);
	}
	CHECK(atomic_load(&held_out) == 1);
	wait_held(f.s); /* the old bytes land in the old slot, the tier answers */
	int bad = 0;
	for (int i = 0; i < N; i++) {
		rc = kvt_get_sync(f.s, &ks[i], 0, 0, b, f.len, &res);
		if (rc != 0 || res.tier != 0 || !test_check(b, f.len, 100 + i)) {
			printf("    key %d: %s (tier %d)\n", i, kvt_strerror(rc), res.tier);
			bad++;
		}
	}
	rc = kvt_get_sync(f.s, &f.k, 0, 0, f.back, f.len, &res);
	bool k_ok = rc == 0 && res.tier == 0 && test_check(f.back, f.len, 6);
	printf("    after the late read: %d of %d other keys damaged; the key: %s (tier %d)%s\n",
	       bad, N, kvt_strerror(rc), res.tier, k_ok ? ", the put's bytes" : "");
	CHECK_EQ(bad, 0);
	CHECK(k_ok);
	free(b);
	teardown(&f);
}

/* Calls made after kvt_remove returned, while its NVMe call is held: none may see the key. */
static void check_gone(struct fixture *f, const char *when)
{
	struct kvt_result res;
	int found = kvt_lookup_sync(f->s, &f->k, 1, NULL);
	int g = kvt_get_sync(f->s, &f->k, 0, 0, f->back, f->len, &res);
	int tier = g == 0 ? res.tier : -1;
	int pf = kvt_prefetch_sync(f->s, &f->k, 1, 0);
	int g2 = kvt_get_sync(f->s, &f->k, 0, 0, f->back, f->len, &res);
	printf("    %s: lookup %d, get %s (tier %d), prefetch %d resident, get %s (tier %d)\n",
	       when, found, kvt_strerror(g), tier, pf, kvt_strerror(g2), g2 == 0 ? res.tier : -1);
	CHECK_RC(g, -ENOENT);
	CHECK_EQ(found, 0);
	CHECK_EQ(pf, 0);
	CHECK_RC(g2, -ENOENT);
}

static void test_get_during_remove(const char *base)
{
	printf("  3. gets after a remove whose NVMe call is still out\n");
	struct fixture f;
	setup(&f, base, "rmget", "2000", 42);
	/* a. held well within its deadline */
	atomic_store(&hold_remove_ms, 600);
	struct test_box r = {0};
	CHECK_RC(kvt_remove(f.s, &f.k, test_box_cb, &r), 0);
	check_gone(&f, "remove out");
	CHECK(!r.done && atomic_load(&held_out) == 1); /* all of it while the call was held */
	while (!r.done)
		kvt_poll(f.s, 20);
	printf("    remove: %d tier(s)\n", r.res.status);
	CHECK_EQ(r.res.status, 1);
	check_gone(&f, "remove done");
	/* A put after a remove wins over it, even while the remove is still out. */
	atomic_store(&hold_remove_ms, 600);
	memset(&r, 0, sizeof(r));
	CHECK_RC(kvt_remove(f.s, &f.k, test_box_cb, &r), 0);
	test_fill(f.buf, f.len, 7);
	CHECK_RC(kvt_put_sync(f.s, &f.k, NULL, f.tokens, f.buf, f.len), 0);
	struct kvt_result res;
	int g = kvt_get_sync(f.s, &f.k, 0, 0, f.back, f.len, &res);
	printf("    put after a remove still out: get %s (tier %d)\n", kvt_strerror(g),
	       g == 0 ? res.tier : -1);
	CHECK(g == 0 && test_check(f.back, f.len, 7));
	CHECK(!r.done);
	while (!r.done)
		kvt_poll(f.s, 20);
	wait_held(f.s);
	teardown(&f);

	/* b. held past its deadline: the remove completes without NVMe (0 tiers), and the key
	 * is still a miss until NVMe answers it. */
	setup(&f, base, "rmlate", "300", 42);
	atomic_store(&hold_remove_ms, 1500);
	memset(&r, 0, sizeof(r));
	CHECK_RC(kvt_remove(f.s, &f.k, test_box_cb, &r), 0);
	while (!r.done)
		kvt_poll(f.s, 20);
	printf("    remove past its deadline: %d tier(s)\n", r.res.status);
	CHECK_EQ(r.res.status, 0);
	CHECK(atomic_load(&held_out) == 1);
	check_gone(&f, "its NVMe call late");
	CHECK(atomic_load(&held_out) == 1);
	wait_held(f.s);
	check_gone(&f, "NVMe answered");
	teardown(&f);

	/* c. without promotion: a get reads the deeper tiers through a bounce buffer. */
	setup(&f, base, "rmbounce", "2000", 42);
	kvt_store_close(f.s);
	test_set(f.c, "store.promote", "false");
	CHECK_RC(kvt_store_open(f.c, &f.s), 0);
	held_wrap(f.s, 1, hold_reads);
	atomic_store(&hold_remove_ms, 600);
	memset(&r, 0, sizeof(r));
	CHECK_RC(kvt_remove(f.s, &f.k, test_box_cb, &r), 0);
	int g3 = kvt_get_sync(f.s, &f.k, 0, 0, f.back, f.len, &res);
	printf("    no promotion, remove out: get %s (tier %d)\n", kvt_strerror(g3),
	       g3 == 0 ? res.tier : -1);
	CHECK_RC(g3, -ENOENT);
	CHECK(!r.done);
	while (!r.done)
		kvt_poll(f.s, 20);
	CHECK_EQ(r.res.status, 1);
	wait_held(f.s);
	teardown(&f);
}

/* A prefetch starts the fill, a get joins it, and the key is removed while the fill reads:
 * the get (sent before the remove) still gets its bytes, but the chunk never becomes
 * resident, so the prefetch must not count it, and the store's stats say the promotion
 * was discarded, not made. */
static void test_prefetch_fill_removed(const char *base)
{
	printf("  4. remove while a prefetch promotes the key\n");
	struct fixture f;
	setup(&f, base, "rmpf", "5000", 42);
	struct kvt_stats st0, st1;
	CHECK_RC(kvt_stats(f.s, &st0), 0);
	atomic_store(&read_done, 0); /* section 1 left it set */
	atomic_store(&answer_next_ms, 800);
	struct test_box pf = {0}, g1 = {0};
	CHECK_RC(kvt_prefetch(f.s, &f.k, 1, 0, test_box_cb, &pf), 0); /* the fill */
	while (!atomic_load(&read_done)) /* the bytes are read; the answer is held */
		usleep(1000);
	CHECK_RC(kvt_get(f.s, &f.k, 0, 0, f.back, f.len, test_box_cb, &g1), 0); /* joins it */
	int rm = kvt_remove_sync(f.s, &f.k);
	CHECK(!pf.done && atomic_load(&held_out) == 1); /* the remove overtook the fill */
	while (!pf.done || !g1.done)
		kvt_poll(f.s, 50);
	bool g1_ok = g1.res.status == 0 && test_check(f.back, f.len, 42);
	wait_held(f.s);
	int found = kvt_lookup_sync(f.s, &f.k, 1, NULL);
	CHECK_RC(kvt_stats(f.s, &st1), 0);
	printf("    remove: %d tier(s); prefetch sent before it: %d resident; get joined before "
	       "it: %s%s; then lookup %d; promotions %" PRIu64 ", discarded %" PRIu64 "\n",
	       rm, pf.res.status, kvt_strerror(g1.res.status), g1_ok ? ", its bytes" : "", found,
	       st1.promotions - st0.promotions,
	       st1.promotions_discarded - st0.promotions_discarded);
	CHECK(rm >= 1);
	CHECK(g1_ok);
	CHECK_EQ(found, 0);
	CHECK_EQ(pf.res.status, 0); /* was 1: counted resident, never published */
	CHECK_EQ(st1.promotions - st0.promotions, 0);
	CHECK_EQ(st1.promotions_discarded - st0.promotions_discarded, 1); /* was not counted */
	/* A promotion that is not overtaken counts as one, and its prefetch as resident. */
	test_fill(f.buf, f.len, 43);
	CHECK_RC(kvt_put_sync(f.s, &f.k, NULL, f.tokens, f.buf, f.len), 0);
	CHECK_RC(kvt_flush_sync(f.s), 0);
	kvt_store_close(f.s);
	CHECK_RC(kvt_store_open(f.c, &f.s), 0);
	CHECK_RC(kvt_stats(f.s, &st0), 0);
	int n = kvt_prefetch_sync(f.s, &f.k, 1, 0);
	CHECK_RC(kvt_stats(f.s, &st1), 0);
	printf("    no remove: prefetch %d resident; promotions %" PRIu64 ", discarded %" PRIu64
	       "\n", n, st1.promotions - st0.promotions,
	       st1.promotions_discarded - st0.promotions_discarded);
	CHECK_EQ(n, 1);
	CHECK_EQ(st1.promotions - st0.promotions, 1);
	CHECK_EQ(st1.promotions_discarded - st0.promotions_discarded, 0);
	teardown(&f);
}

int main(int argc, char **argv)
{
	static void (*const sections[])(const char *) = {
		test_remove_during_fill, test_fill_deadline_then_put, test_get_during_remove,
		test_prefetch_fill_removed};
	int only = argc > 1 ? atoi(argv[1]) : 0; /* one section, 1-4; all by default */
	char *dir = test_tmpdir("store_fill_races");
	for (int i = 0; i < 4; i++)
		if (!only || only == i + 1)
			sections[i](dir);
	test_rmdir(dir);
	free(dir);
	printf("store_fill_races: ok\n");
	return 0;
}
