/*
 * dram_test.c - the DRAM slot pool: the life of a slot (alloc, publish, get, unpin), the
 * rules of src/dram.h (pinned and dirty slots stay, suffixes go before prefixes, a removed
 * pinned slot lives until its last unpin), error returns, write-back victims, stats, that
 * an evicting put in a pool full of long chains costs what it costs in any other pool, and
 * a multi-threaded stress run that checks slot contents never get mixed up.
 * KVT_DRAM_STRESS_MS overrides the stress run's length (default 2000 ms).
 */
#include <sys/mman.h>
#include <unistd.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dram.h"
#include "../integ/lib/sanitized.h"
#include "internal.h"

static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static struct kvt_key key_n(uint64_t i)
{
	struct kvt_key k;
	for (int w = 0; w < 4; w++) {
		uint64_t v = mix(i * 4 + (uint64_t)w);
		memcpy(k.bytes + 8 * w, &v, 8);
	}
	return k;
}

static struct kvt_dram *mk(const char *policy, uint32_t slots, uint64_t slot_bytes)
{
	struct kvt_dram_options o = {
	    .bytes = (uint64_t)slots * slot_bytes,
	    .slot_bytes = slot_bytes,
	    .policy = policy,
	    .hugepages = false,
	};
	struct kvt_dram *d = NULL;
	assert_int_equal(kvt__dram_create(&o, &d), 0);
	assert_int_equal(kvt__dram_slots(d), slots);
	return d;
}

/* alloc + write the key at both ends + publish; returns the slot id, left unpinned. */
static int32_t put(struct kvt_dram *d, uint64_t i, const struct kvt_key *parent, bool dirty)
{
	struct kvt_key k = key_n(i);
	struct kvt_slot_ref r;
	assert_int_equal(kvt__dram_alloc(d, &k, parent, &r), 0);
	uint64_t sb = kvt__dram_slot_bytes(d);
	memcpy(r.buf, &k, sizeof(k));
	memcpy((uint8_t *)r.buf + sb - sizeof(k), &k, sizeof(k));
	kvt__dram_publish(d, r.id, sb, (uint32_t)i, dirty);
	kvt__dram_unpin(d, r.id);
	return r.id;
}

static bool has(struct kvt_dram *d, uint64_t i)
{
	struct kvt_key k = key_n(i);
	return kvt__dram_contains(d, &k, false);
}

struct logbuf {
	char text[2048];
	int warnings;
};

static void log_to_buf(void *arg, int level, const char *msg)
{
	struct logbuf *b = arg;
	size_t n = strlen(b->text);
	snprintf(b->text + n, sizeof(b->text) - n, "%s\n", msg);
	if (level == KVT_LOG_WARN)
		b->warnings++;
}

static void test_create(void **unused)
{
	struct kvt_dram *d = NULL;
	struct kvt_dram_options o = {.bytes = 1 << 20, .slot_bytes = 0, .policy = "lru"};
	assert_int_equal(kvt__dram_create(&o, &d), -EINVAL);
	o.slot_bytes = 4096;
	o.policy = "nope";
	assert_int_equal(kvt__dram_create(&o, &d), -EINVAL);
	assert_null(d);

	/* slot size rounds up to KVT_ALIGN; a pool smaller than one slot still has one */
	o.policy = "arc";
	o.slot_bytes = 5000;
	o.bytes = 100;
	o.hugepages = true; /* falls back to THP advice when no hugetlbfs pages are reserved */
	o.mlock = true;	    /* may fail under RLIMIT_MEMLOCK: a warning, not an error */
	struct logbuf lb = {.text = "", .warnings = 0};
	struct kvt_log log = {.fn = log_to_buf, .arg = &lb, .level = KVT_LOG_INFO};
	o.log = &log;
	assert_int_equal(kvt__dram_create(&o, &d), 0);
	o.log = NULL;
	/* the log says which backing the pool got, and mlock failing is only a warning */
	print_message("%s", lb.text);
	assert_non_null(strstr(lb.text, "huge"));
	assert_non_null(strstr(lb.text, "1 slots of 8192 bytes, policy arc"));
	assert_true(lb.warnings == 0 || strstr(lb.text, "mlock") != NULL);
	assert_int_equal(kvt__dram_slot_bytes(d), 8192);
	assert_int_equal(kvt__dram_slots(d), 1);
	struct kvt_slot_ref r;
	struct kvt_key k = key_n(1);
	assert_int_equal(kvt__dram_alloc(d, &k, NULL, &r), 0);
	assert_int_equal((uintptr_t)r.buf % KVT_ALIGN, 0);
	memset(r.buf, 0xab, 8192);
	kvt__dram_publish(d, r.id, 8192, 3, false);
	kvt__dram_unpin(d, r.id);
	kvt__dram_destroy(d);

	/* allocation failure at every step of create leaks nothing */
	uint64_t base = kvt__alloc_bytes();
	int okay_at = 0;
	o.policy = "lru";
	o.bytes = 64 * 4096;
	o.slot_bytes = 4096;
	for (int i = 1; i < 40 && !okay_at; i++) {
		d = NULL;
		kvt__alloc_fail_after((uint64_t)i);
		int rc = kvt__dram_create(&o, &d);
		kvt__alloc_fail_after(0);
		if (rc == 0) {
			okay_at = i;
			kvt__dram_destroy(d);
		} else {
			assert_int_equal(rc, -ENOMEM);
		}
		assert_int_equal(kvt__alloc_bytes(), base);
	}
	assert_true(okay_at > 2);
}

static void test_alloc_publish_get(void **unused)
{
	struct kvt_dram *d = mk("lru", 4, 8192);
	struct kvt_key k = key_n(7);
	struct kvt_slot_ref r, g;
	assert_int_equal(kvt__dram_get(d, &k, &g), -ENOENT);
	assert_int_equal(kvt__dram_alloc(d, &k, NULL, &r), 0);
	assert_int_equal(r.object_bytes, 0);
	assert_false(r.dirty);
	assert_int_equal((uintptr_t)r.buf % KVT_ALIGN, 0);
	/* filling: invisible, but taken */
	assert_false(kvt__dram_contains(d, &k, false));
	assert_int_equal(kvt__dram_get(d, &k, &g), -ENOENT);
	assert_int_equal(kvt__dram_remove(d, &k), -ENOENT);
	assert_int_equal(kvt__dram_alloc(d, &k, NULL, &g), -EBUSY); /* being filled: not stored yet */
	memset(r.buf, 0x5a, 5000);
	kvt__dram_publish(d, r.id, 5000, 16, false);
	assert_true(kvt__dram_contains(d, &k, true));
	assert_int_equal(kvt__dram_alloc(d, &k, NULL, &g), -EEXIST);
	assert_int_equal(kvt__dram_get(d, &k, &g), 0);
	assert_int_equal(g.id, r.id);
	assert_ptr_equal(g.buf, r.buf);
	assert_int_equal(g.object_bytes, 5000);
	assert_int_equal(g.n_tokens, 16);
	assert_false(g.dirty);
	for (int i = 0; i < 5000; i++)
		assert_int_equal(((uint8_t *)g.buf)[i], 0x5a);
	struct kvt_key back;
	kvt__dram_key(d, g.id, &back);
	assert_memory_equal(&back, &k, sizeof(k));
	/* pinned twice (alloc + get): not evictable until both are dropped */
	assert_int_equal(kvt__dram_headroom(d), 3);
	kvt__dram_unpin(d, g.id);
	assert_int_equal(kvt__dram_headroom(d), 3);
	kvt__dram_unpin(d, r.id);
	assert_int_equal(kvt__dram_headroom(d), 4);

	struct kvt_tier_stats st;
	kvt__dram_stats(d, &st);
	assert_string_equal(st.name, "dram");
	assert_int_equal(st.objects, 1);
	assert_int_equal(st.bytes, 5000);
	assert_int_equal(st.capacity_bytes, 4 * 8192);
	assert_int_equal(st.hits, 1);
	assert_int_equal(st.misses, 2);
	assert_int_equal(st.evictions, 0);
	kvt__dram_destroy(d);
}

static void test_pinned_never_evicted(void **unused)
{
	const char *pol[] = {"lru", "arc", "pslru", "hd", "hda", "lru2"};
	for (size_t p = 0; p < sizeof(pol) / sizeof(pol[0]); p++) {
		struct kvt_dram *d = mk(pol[p], 4, 4096);
		int32_t id0 = put(d, 0, NULL, false);
		for (uint64_t i = 1; i < 4; i++)
			put(d, i, NULL, false);
		kvt__dram_pin(d, id0); /* the coldest entry, pinned without a touch */
		for (uint64_t i = 4; i < 100; i++) {
			int32_t id = put(d, i, NULL, false);
			assert_int_not_equal(id, id0);
			assert_true(has(d, 0));
		}
		kvt__dram_unpin(d, id0);
		/* under LRU it is now the coldest: the next alloc takes it */
		put(d, 100, NULL, false);
		if (p == 0)
			assert_false(has(d, 0));
		struct kvt_tier_stats st;
		kvt__dram_stats(d, &st);
		assert_int_equal(st.evictions, 97);
		assert_int_equal(st.objects, 4);
		kvt__dram_destroy(d);
	}
}

/* dram.partial_first: a chunk of fewer tokens than a full one (16 here) goes first until
 * it is hit; pinned, it waits and goes once unpinned; off, the policy alone decides. */
static int32_t put_tokens(struct kvt_dram *d, uint64_t i, uint32_t n_tokens)
{
	struct kvt_key k = key_n(i);
	struct kvt_slot_ref r;
	assert_int_equal(kvt__dram_alloc(d, &k, NULL, &r), 0);
	kvt__dram_publish_put(d, r.id, kvt__dram_slot_bytes(d), n_tokens, false);
	kvt__dram_unpin(d, r.id);
	return r.id;
}

static void test_partial_first(void **unused)
{
	const char *pol[] = {"lru", "arc", "pslru", "hd", "hda", "lru2"};
	for (size_t p = 0; p < sizeof(pol) / sizeof(pol[0]); p++) {
		struct kvt_dram_options o = {.bytes = 4 * 4096, .slot_bytes = 4096,
					     .policy = pol[p], .partial_below = 16};
		struct kvt_dram *d = NULL;
		assert_int_equal(kvt__dram_create(&o, &d), 0);
		for (uint64_t i = 0; i < 3; i++)
			put_tokens(d, i, 16);
		put_tokens(d, 3, 8); /* a prompt's end */
		put_tokens(d, 4, 16);
		assert_false(has(d, 3)); /* the partial one went, not the oldest */
		for (uint64_t i = 0; i < 3; i++)
			assert_true(has(d, i));
		/* hit, it is an ordinary chunk: under LRU the most recent, kept */
		put_tokens(d, 5, 8);
		struct kvt_key k5 = key_n(5);
		struct kvt_slot_ref r;
		assert_int_equal(kvt__dram_get(d, &k5, &r), 0);
		kvt__dram_unpin(d, r.id);
		put_tokens(d, 6, 16);
		if (!strcmp(pol[p], "lru"))
			assert_true(has(d, 5));
		/* pinned, it waits; unpinned, it goes at the next allocation */
		int32_t id7 = put_tokens(d, 7, 8);
		kvt__dram_pin(d, id7);
		put_tokens(d, 8, 16);
		assert_true(has(d, 7));
		kvt__dram_unpin(d, id7);
		put_tokens(d, 9, 16);
		assert_false(has(d, 7));
		assert_true(has(d, 8) && has(d, 9));
		kvt__dram_destroy(d);
	}
	struct kvt_dram_options o = {.bytes = 4 * 4096, .slot_bytes = 4096, .policy = "lru",
				     .partial_below = 16};
	struct kvt_dram *d = NULL;
	/* a fill from a deeper tier (kvt__dram_publish) was just asked for: never cold */
	assert_int_equal(kvt__dram_create(&o, &d), 0);
	put_tokens(d, 0, 16);
	struct kvt_key k1 = key_n(1);
	struct kvt_slot_ref r;
	assert_int_equal(kvt__dram_alloc(d, &k1, NULL, &r), 0);
	kvt__dram_publish(d, r.id, 4096, 8, false);
	kvt__dram_unpin(d, r.id);
	put_tokens(d, 2, 16);
	put_tokens(d, 3, 16);
	put_tokens(d, 4, 16);
	assert_false(has(d, 0)); /* LRU's oldest, not the filled partial chunk */
	assert_true(has(d, 1));
	kvt__dram_destroy(d);
	/* an entry left by a removed chunk does not follow its slot to the next occupant */
	assert_int_equal(kvt__dram_create(&o, &d), 0);
	put_tokens(d, 10, 8);
	struct kvt_key k10 = key_n(10);
	assert_int_equal(kvt__dram_remove(d, &k10), 0);
	put_tokens(d, 11, 16); /* (likely the freed slot) */
	for (uint64_t i = 12; i < 15; i++)
		put_tokens(d, i, 16);
	struct kvt_key k11 = key_n(11);
	assert_true(kvt__dram_contains(d, &k11, true)); /* 11 the most recent */
	put_tokens(d, 15, 16);
	assert_true(has(d, 11));
	assert_false(has(d, 12));
	kvt__dram_destroy(d);
	/* ... nor to a partial chunk put there since: the older partial chunk goes first */
	assert_int_equal(kvt__dram_create(&o, &d), 0);
	put_tokens(d, 30, 8);
	put_tokens(d, 31, 8);
	struct kvt_key k30 = key_n(30);
	assert_int_equal(kvt__dram_remove(d, &k30), 0);
	put_tokens(d, 32, 8); /* into 30's slot, its FIFO entry stale */
	put_tokens(d, 33, 16);
	put_tokens(d, 34, 16); /* full now */
	put_tokens(d, 35, 16);
	assert_false(has(d, 31));
	assert_true(has(d, 32));
	kvt__dram_destroy(d);
	/* the FIFO filled by stale entries (partial chunks hit, with free slots, so no
	 * eviction drains it) is compacted, and its live entry still goes first */
	o.bytes = 8 * 4096;
	assert_int_equal(kvt__dram_create(&o, &d), 0);
	put_tokens(d, 18, 16); /* LRU's victim, were 19 forgotten */
	put_tokens(d, 19, 8);  /* live: the oldest entry when the FIFO fills */
	for (uint64_t i = 20; i < 40; i++) {
		put_tokens(d, i, 8);
		struct kvt_key k = key_n(i);
		assert_int_equal(kvt__dram_get(d, &k, &r), 0);
		kvt__dram_unpin(d, r.id);
		assert_int_equal(kvt__dram_remove(d, &k), 0);
	}
	for (uint64_t i = 40; i < 46; i++)
		put_tokens(d, i, 16);
	put_tokens(d, 48, 16);
	assert_false(has(d, 19));
	assert_true(has(d, 18));
	for (uint64_t i = 40; i < 46; i++)
		assert_true(has(d, i));
	kvt__dram_destroy(d);
	/* off: the policy alone (LRU takes the oldest) */
	d = mk("lru", 4, 4096);
	for (uint64_t i = 0; i < 3; i++)
		put_tokens(d, i, 16);
	put_tokens(d, 3, 8);
	put_tokens(d, 4, 16);
	assert_true(has(d, 3));
	assert_false(has(d, 0));
	kvt__dram_destroy(d);
}

static void test_dirty_never_evicted(void **unused)
{
	struct kvt_dram *d = mk("lru", 4, 4096);
	int32_t id0 = put(d, 0, NULL, true);
	int32_t id1 = put(d, 1, NULL, false);
	put(d, 2, NULL, false);
	put(d, 3, NULL, false);
	kvt__dram_set_dirty(d, id1, true);
	assert_int_equal(kvt__dram_headroom(d), 2);
	for (uint64_t i = 4; i < 50; i++) {
		put(d, i, NULL, false);
		assert_true(has(d, 0));
		assert_true(has(d, 1));
	}
	kvt__dram_set_dirty(d, id0, false);
	put(d, 50, NULL, false);
	assert_false(has(d, 0)); /* clean again, and the coldest */
	assert_true(has(d, 1));
	/* every slot dirty or pinned: -ENOSPC, nothing changes */
	struct kvt_slot_ref r;
	uint32_t n = kvt__dram_dirty_victims(d, &r, 1, 0); /* pins id1 */
	assert_int_equal(n, 1);
	assert_int_equal(r.id, id1);
	assert_true(r.dirty);
	struct kvt_key k = key_n(49), k50 = key_n(50), knew = key_n(1000);
	struct kvt_slot_ref a, b;
	assert_int_equal(kvt__dram_get(d, &k, &a), 0);
	assert_int_equal(kvt__dram_get(d, &k50, &b), 0);
	int32_t other = put(d, 1001, NULL, true);
	(void)other;
	assert_int_equal(kvt__dram_headroom(d), 0);
	assert_int_equal(kvt__dram_alloc(d, &knew, NULL, &r), -ENOSPC);
	kvt__dram_set_dirty(d, id1, false); /* write-back done */
	kvt__dram_unpin(d, id1);
	assert_int_equal(kvt__dram_headroom(d), 1);
	assert_int_equal(kvt__dram_alloc(d, &knew, NULL, &r), 0);
	assert_int_equal(r.id, id1);
	kvt__dram_abort(d, r.id);
	kvt__dram_unpin(d, a.id);
	kvt__dram_unpin(d, b.id);
	kvt__dram_destroy(d);
}

static void test_suffix_before_prefix(void **unused)
{
	const char *pol[] = {"lru", "arc", "pslru", "hd", "hda", "lru2"};
	for (size_t p = 0; p < sizeof(pol) / sizeof(pol[0]); p++) {
		struct kvt_dram *d = mk(pol[p], 4, 4096);
		struct kvt_key c[4];
		for (uint64_t i = 0; i < 4; i++) {
			c[i] = key_n(i);
			put(d, i, i ? &c[i - 1] : NULL, false);
		}
		/* make the prefix the most used: order must still come from the chain */
		struct kvt_slot_ref r;
		for (int t = 0; t < 3; t++) {
			assert_int_equal(kvt__dram_get(d, &c[0], &r), 0);
			kvt__dram_unpin(d, r.id);
		}
		assert_int_equal(kvt__dram_headroom(d), 1); /* only the tail may go */
		put(d, 100, NULL, false);
		assert_false(has(d, 3));
		assert_true(has(d, 0) && has(d, 1) && has(d, 2));
		put(d, 101, NULL, false);
		assert_false(has(d, 2));
		assert_true(has(d, 0) && has(d, 1));
		put(d, 102, NULL, false);
		assert_false(has(d, 1));
		assert_true(has(d, 0));
		/* Now c0 is childless: LRU takes it (the coldest); ARC keeps it, as it is the
		 * only entry used more than once (in T2), and takes the oldest of T1. */
		put(d, 103, NULL, false);
		if (p == 0) {
			assert_false(has(d, 0));
			assert_true(has(d, 100));
		} else {
			assert_true(has(d, 0));
			assert_false(has(d, 100));
		}
		assert_true(has(d, 101) && has(d, 102) && has(d, 103));
		kvt__dram_destroy(d);
	}

	/* An alloc never evicts its own parent; when only prefixes are left it takes the
	 * policy's choice among them: a <- b fills the pool, c (child of b) evicts a. */
	struct kvt_dram *d = mk("lru", 2, 4096);
	struct kvt_key a = key_n(1), b = key_n(2), c = key_n(3), x = key_n(4);
	struct kvt_slot_ref r;
	put(d, 1, NULL, false);
	put(d, 2, &a, false);
	assert_int_equal(kvt__dram_alloc(d, &c, &b, &r), 0);
	assert_false(kvt__dram_contains(d, &a, false));
	assert_true(kvt__dram_contains(d, &b, false));
	/* an aborted child gives its parent back: b is a leaf again, one slot free */
	kvt__dram_abort(d, r.id);
	assert_int_equal(kvt__dram_headroom(d), 2);
	assert_int_equal(kvt__dram_alloc(d, &x, NULL, &r), 0);
	kvt__dram_abort(d, r.id);
	/* with the parent pinned and nothing else, the alloc fails instead */
	struct kvt_slot_ref pb;
	assert_int_equal(kvt__dram_get(d, &b, &pb), 0);
	assert_int_equal(kvt__dram_alloc(d, &x, NULL, &r), 0); /* the free slot */
	assert_int_equal(kvt__dram_alloc(d, &c, &b, &r), -ENOSPC);
	kvt__dram_unpin(d, pb.id);
	kvt__dram_destroy(d);

	/* A child outliving its removed parent does not disturb the slot's next owner. */
	d = mk("lru", 3, 4096);
	struct kvt_key k5 = key_n(5);
	int32_t ida = put(d, 1, NULL, false);
	put(d, 3, &a, false);
	assert_int_equal(kvt__dram_remove(d, &a), 0);
	assert_int_equal(put(d, 5, NULL, false), ida); /* reuses a's slot */
	put(d, 6, &k5, false);
	assert_int_equal(kvt__dram_headroom(d), 2); /* c and 6; 5 has a child */
	assert_int_equal(kvt__dram_remove(d, &c), 0);
	assert_int_equal(kvt__dram_headroom(d), 2); /* a free slot and 6; 5 still held */
	put(d, 7, NULL, false);
	put(d, 8, NULL, false); /* evicts 6 (5 is older but a prefix), then 5 is a leaf */
	assert_true(kvt__dram_contains(d, &k5, false));
	assert_false(has(d, 6));
	kvt__dram_destroy(d);
}

static void test_remove_while_pinned(void **unused)
{
	struct kvt_dram *d = mk("arc", 3, 4096);
	struct kvt_key k = key_n(9);
	struct kvt_slot_ref r, again;
	int32_t id = put(d, 9, NULL, false);
	assert_int_equal(kvt__dram_get(d, &k, &r), 0);
	assert_int_equal(r.id, id);
	assert_int_equal(kvt__dram_remove(d, &k), -EBUSY);
	assert_false(kvt__dram_contains(d, &k, false));
	assert_int_equal(kvt__dram_get(d, &k, &again), -ENOENT);
	assert_int_equal(kvt__dram_remove(d, &k), -ENOENT);
	assert_int_equal(kvt__dram_headroom(d), 2);
	/* the key can be stored again at once, in another slot */
	assert_int_equal(kvt__dram_alloc(d, &k, NULL, &again), 0);
	assert_int_not_equal(again.id, id);
	memset(again.buf, 0, 4096);
	kvt__dram_publish(d, again.id, 4096, 1, false);
	kvt__dram_unpin(d, again.id);
	/* the reader's bytes are still the old ones */
	assert_memory_equal(r.buf, &k, sizeof(k));
	/* fill the pool: the removed slot is not reused while pinned */
	put(d, 10, NULL, false);
	for (uint64_t i = 11; i < 30; i++)
		assert_int_not_equal(put(d, i, NULL, false), id);
	assert_memory_equal(r.buf, &k, sizeof(k));
	struct kvt_tier_stats st;
	kvt__dram_stats(d, &st);
	assert_int_equal(st.objects, 2);
	assert_int_equal(st.removes, 1);
	kvt__dram_unpin(d, r.id); /* freed now */
	assert_int_equal(kvt__dram_headroom(d), 3);
	struct kvt_slot_ref n;
	struct kvt_key kn = key_n(500);
	assert_int_equal(kvt__dram_alloc(d, &kn, NULL, &n), 0);
	assert_int_equal(n.id, id); /* a free slot is taken before any eviction */
	kvt__dram_abort(d, n.id);
	/* remove of an unpinned object frees at once */
	struct kvt_key k29 = key_n(29);
	assert_int_equal(kvt__dram_remove(d, &k29), 0);
	assert_int_equal(kvt__dram_headroom(d), 3);
	kvt__dram_destroy(d);
}

static void test_enospc_all_pinned(void **unused)
{
	struct kvt_dram *d = mk("lru", 3, 4096);
	struct kvt_slot_ref r[3], x;
	struct kvt_key k;
	for (int i = 0; i < 3; i++) {
		k = key_n((uint64_t)i);
		assert_int_equal(kvt__dram_alloc(d, &k, NULL, &r[i]), 0);
	}
	k = key_n(99);
	assert_int_equal(kvt__dram_alloc(d, &k, NULL, &x), -ENOSPC); /* all filling */
	kvt__dram_publish(d, r[0].id, 10, 1, false);
	kvt__dram_publish(d, r[1].id, 10, 1, false);
	kvt__dram_publish(d, r[2].id, 10, 1, false);
	assert_int_equal(kvt__dram_headroom(d), 0);
	assert_int_equal(kvt__dram_alloc(d, &k, NULL, &x), -ENOSPC); /* all pinned */
	struct kvt_tier_stats st;
	kvt__dram_stats(d, &st);
	assert_int_equal(st.evictions, 0);
	assert_int_equal(st.objects, 3);
	kvt__dram_unpin(d, r[1].id);
	assert_int_equal(kvt__dram_alloc(d, &k, NULL, &x), 0);
	assert_int_equal(x.id, r[1].id);
	kvt__dram_abort(d, x.id);
	kvt__dram_unpin(d, r[0].id);
	kvt__dram_unpin(d, r[2].id);
	kvt__dram_destroy(d);
}

static void test_abort(void **unused)
{
	struct kvt_dram *d = mk("lru", 2, 4096);
	struct kvt_key k = key_n(1);
	struct kvt_slot_ref r;
	assert_int_equal(kvt__dram_alloc(d, &k, NULL, &r), 0);
	assert_int_equal(kvt__dram_headroom(d), 1);
	kvt__dram_abort(d, r.id);
	assert_int_equal(kvt__dram_headroom(d), 2);
	assert_false(kvt__dram_contains(d, &k, false));
	assert_int_equal(kvt__dram_alloc(d, &k, NULL, &r), 0);
	kvt__dram_publish(d, r.id, 100, 1, false);
	kvt__dram_abort(d, r.id); /* published: not an abort any more, ignored */
	kvt__dram_unpin(d, r.id);
	assert_true(kvt__dram_contains(d, &k, false));
	struct kvt_tier_stats st;
	kvt__dram_stats(d, &st);
	assert_int_equal(st.objects, 1);
	assert_int_equal(st.bytes, 100);
	kvt__dram_destroy(d);
}

/* A flush pass over a pool of dirty slots walks it once: 16 at a time (as the engine
 * asks), 65,536 dirty slots take well under a second. Until 2026-12-05 each call widened
 * its look from the cold end past every slot the pass had taken, ~N^2/8 steps (5e8 here,
 * seconds to minutes under the pool's mutex). */
static void test_flush_pass_linear(void **unused)
{
	(void)unused;
	enum { SLOTS = 65536 };
	struct kvt_dram *d = mk("lru", SLOTS, 4096);
	for (uint64_t i = 0; i < SLOTS; i++)
		put(d, i, NULL, true);
	uint32_t pass = kvt__dram_flush_pass(d), n, total = 0;
	struct kvt_slot_ref r[16];
	uint64_t t0 = kvt__now_ns();
	while ((n = kvt__dram_dirty_victims(d, r, 16, pass)) > 0)
		for (uint32_t i = 0; i < n; i++, total++)
			kvt__dram_unpin(d, r[i].id);
	uint64_t ms = (kvt__now_ns() - t0) / 1000000;
	print_message("flush pass over %d dirty slots, 16 at a time: %llu ms\n", SLOTS,
		      (unsigned long long)ms);
	assert_int_equal(total, SLOTS);
	assert_true(ms < 1000 * TEST_SLOW_X); /* a quadratic pass takes minutes */
	kvt__dram_destroy(d);
}

/* Two flush passes at once (two clients of a daemon flushing), their calls alternating:
 * each takes every dirty slot once. With one cursor for all passes each call sent the other
 * back to slot 0, and they took the same first slots over and over without end. */
static void test_flush_passes_concurrent(void **unused)
{
	(void)unused;
	enum { SLOTS = 4096 };
	struct kvt_dram *d = mk("lru", SLOTS, 4096);
	for (uint64_t i = 0; i < SLOTS; i++)
		put(d, i, NULL, true);
	uint32_t a = kvt__dram_flush_pass(d), b = kvt__dram_flush_pass(d);
	uint32_t got_a = 0, got_b = 0, n, calls = 0;
	struct kvt_slot_ref r[16];
	bool more_a = true, more_b = true;
	while ((more_a || more_b) && calls < 4 * SLOTS) {
		if (more_a) {
			n = kvt__dram_dirty_victims(d, r, 16, a);
			for (uint32_t i = 0; i < n; i++)
				kvt__dram_unpin(d, r[i].id);
			got_a += n;
			more_a = n > 0;
		}
		if (more_b) {
			n = kvt__dram_dirty_victims(d, r, 16, b);
			for (uint32_t i = 0; i < n; i++)
				kvt__dram_unpin(d, r[i].id);
			got_b += n;
			more_b = n > 0;
		}
		calls++;
	}
	print_message("two concurrent flush passes: %u and %u slots in %u rounds\n", got_a, got_b,
		      calls);
	assert_int_equal(got_a, SLOTS);
	assert_int_equal(got_b, SLOTS);
	kvt__dram_destroy(d);
}

static void test_dirty_victims_order(void **unused)
{
	struct kvt_dram *d = mk("lru", 16, 4096);
	int32_t id[16];
	for (uint64_t i = 0; i < 8; i++)
		id[i] = put(d, i, NULL, i % 2 == 1); /* 1 3 5 7 dirty */
	struct kvt_slot_ref r[8];
	struct kvt_key k1 = key_n(1);
	assert_int_equal(kvt__dram_get(d, &k1, &r[0]), 0); /* 1 becomes the hottest */
	kvt__dram_unpin(d, r[0].id);
	kvt__dram_pin(d, id[5]); /* pinned: not offered to write-back */
	/* a flush pass takes every dirty slot, the pinned one too (a reader's pin makes
	 * nothing durable), each once per pass; a new pass takes those still dirty again */
	struct kvt_slot_ref fl[8];
	uint32_t pass = kvt__dram_flush_pass(d);
	assert_int_equal(kvt__dram_dirty_victims(d, fl, 8, pass), 4);
	uint32_t took = 0; /* in slot order: which ones, not their order */
	for (int i = 0; i < 4; i++)
		for (int j = 1; j < 8; j += 2)
			took |= fl[i].id == id[j] ? 1u << j : 0;
	assert_int_equal(took, 0xaa);
	assert_int_equal(kvt__dram_dirty_victims(d, r, 8, pass), 0);
	for (int i = 0; i < 4; i++)
		kvt__dram_unpin(d, fl[i].id);
	assert_int_equal(kvt__dram_dirty_victims(d, fl, 8, kvt__dram_flush_pass(d)), 4);
	for (int i = 0; i < 4; i++)
		kvt__dram_unpin(d, fl[i].id);
	assert_int_equal(kvt__dram_dirty_victims(d, r, 2, 0), 2);
	assert_int_equal(r[0].id, id[3]);
	assert_int_equal(r[1].id, id[7]);
	assert_true(r[0].dirty && r[1].dirty);
	/* they are pinned for the caller now, so the next call goes on with the rest */
	struct kvt_slot_ref more[8];
	assert_int_equal(kvt__dram_dirty_victims(d, more, 8, 0), 1);
	assert_int_equal(more[0].id, id[1]);
	kvt__dram_unpin(d, id[5]);
	assert_int_equal(kvt__dram_dirty_victims(d, more + 1, 8, 0), 1);
	assert_int_equal(more[1].id, id[5]);
	/* write-back cleans and unpins */
	for (int i = 0; i < 2; i++) {
		kvt__dram_set_dirty(d, r[i].id, false);
		kvt__dram_unpin(d, r[i].id);
		kvt__dram_set_dirty(d, more[i].id, false);
		kvt__dram_unpin(d, more[i].id);
	}
	assert_int_equal(kvt__dram_dirty_victims(d, more, 8, kvt__dram_flush_pass(d)), 0);
	assert_int_equal(kvt__dram_headroom(d), 16);
	/* a big pool: the widening look finds a dirty slot far from the cold end */
	kvt__dram_destroy(d);
	d = mk("arc", 256, 4096);
	for (uint64_t i = 0; i < 256; i++)
		put(d, i, NULL, i == 250);
	assert_int_equal(kvt__dram_dirty_victims(d, r, 1, 0), 1);
	struct kvt_key kk;
	kvt__dram_key(d, r[0].id, &kk);
	struct kvt_key k250 = key_n(250);
	assert_memory_equal(&kk, &k250, sizeof(kk));
	kvt__dram_unpin(d, r[0].id);
	kvt__dram_destroy(d);
}

static int scan_count(void *arg, const struct kvt_key *key, uint64_t bytes)
{
	uint64_t *acc = arg;
	acc[0]++;
	acc[1] += bytes;
	return 0;
}

static int scan_stop(void *arg, const struct kvt_key *key, uint64_t bytes)
{
	(*(int *)arg)++;
	return 7;
}

static void test_stats_and_scan(void **unused)
{
	struct kvt_dram *d = mk("arc", 4, 4096);
	struct kvt_slot_ref r;
	for (uint64_t i = 0; i < 6; i++) {
		struct kvt_key k = key_n(i);
		assert_int_equal(kvt__dram_alloc(d, &k, NULL, &r), 0);
		kvt__dram_publish(d, r.id, 1000 + i, 1, false);
		kvt__dram_unpin(d, r.id);
	}
	struct kvt_key k = key_n(5), miss = key_n(77);
	assert_int_equal(kvt__dram_get(d, &k, &r), 0);
	kvt__dram_unpin(d, r.id);
	assert_int_equal(kvt__dram_get(d, &miss, &r), -ENOENT);
	assert_int_equal(kvt__dram_remove(d, &k), 0);
	struct kvt_key filling = key_n(55);
	assert_int_equal(kvt__dram_alloc(d, &filling, NULL, &r), 0); /* not counted */
	struct kvt_tier_stats st;
	kvt__dram_stats(d, &st);
	assert_int_equal(st.evictions, 2);
	assert_int_equal(st.objects, 3);
	assert_int_equal(st.hits, 1);
	assert_int_equal(st.misses, 1);
	assert_int_equal(st.removes, 1);
	assert_int_equal(st.capacity_bytes, 4 * 4096);
	uint64_t acc[2] = {0, 0};
	assert_int_equal(kvt__dram_scan(d, scan_count, acc), 0);
	assert_int_equal(acc[0], st.objects);
	assert_int_equal(acc[1], st.bytes);
	assert_int_equal(st.bytes, 1002 + 1003 + 1004); /* 0 and 1 were evicted, 5 removed */
	int calls = 0;
	assert_int_equal(kvt__dram_scan(d, scan_stop, &calls), 7);
	assert_int_equal(calls, 1);
	kvt__dram_abort(d, r.id);
	kvt__dram_destroy(d);
}

static void test_no_heap_after_create(void **unused)
{
	/* Every operation after create works with the allocator failing: none allocates. */
	const char *pol[] = {"lru", "arc", "pslru", "hd", "hda", "lru2"};
	for (size_t p = 0; p < sizeof(pol) / sizeof(pol[0]); p++) {
		struct kvt_dram *d = mk(pol[p], 32, 4096);
		uint64_t base = kvt__alloc_bytes();
		kvt__alloc_fail_after(1);
		uint64_t x = 5, stored = 0;
		struct kvt_slot_ref r, v[4];
		for (int op = 0; op < 20000; op++) {
			x = mix(x);
			uint64_t i = (x >> 8) % 100;
			struct kvt_key k = key_n(i), pk = key_n(i - 1);
			switch (x % 5) {
			case 0:
			case 1:
				if (kvt__dram_alloc(d, &k, i % 3 ? &pk : NULL, &r) == 0) {
					kvt__dram_publish(d, r.id, 4096, 1, x % 7 == 0);
					kvt__dram_unpin(d, r.id);
					stored++;
				}
				break;
			case 2:
				if (kvt__dram_get(d, &k, &r) == 0)
					kvt__dram_unpin(d, r.id);
				break;
			case 3:
				(void)kvt__dram_remove(d, &k);
				break;
			default: {
				uint32_t n = kvt__dram_dirty_victims(d, v, 4, 0);
				for (uint32_t j = 0; j < n; j++) {
					kvt__dram_set_dirty(d, v[j].id, false);
					kvt__dram_unpin(d, v[j].id);
				}
			}
			}
		}
		kvt__alloc_fail_after(0);
		assert_int_equal(kvt__alloc_bytes(), base);
		assert_true(stored > 1000);
		kvt__dram_destroy(d);
	}
}

/* A pool full of long chains: nearly every slot has a resident child, so only a few may
 * go first (the leaves). Finding one must not walk the others: a walk from the LRU end
 * past every prefix made each evicting put O(slots) - here 2^18 slots, 2^14 evicting puts
 * per policy took minutes. Each policy's evicting puts get a budget of 2 s or 40x what LRU's
 * took in this run, whichever is more (about 40x what they take on a quiet machine; under
 * TSan on a loaded one hda's took 2.0 s against LRU's 0.23 s), checked as they run so that
 * a walk fails in seconds, not minutes. Every
 * victim is a leaf: chains are longer than the puts, so every chain's first chunk (the
 * least recently used slot of all) stays. */
static void test_long_chains_evict_bounded(void **unused)
{
	enum { SLOTS = 1 << 18, CHAINS = 8, PUTS = 1 << 14, BUDGET_MS = 2000, LRU_TIMES = 40 };
	const char *pol[] = {"lru", "arc", "pslru", "hd", "hda", "lru2"}; /* lru first */
	uint64_t budget_ms = BUDGET_MS;
	for (size_t p = 0; p < sizeof(pol) / sizeof(pol[0]); p++) {
		struct kvt_dram *d = mk(pol[p], SLOTS, 4096);
		struct kvt_slot_ref r;
		/* key i is in chain i % CHAINS, its parent is key i - CHAINS; slot bytes are
		 * never touched, so the pool's pages stay unbacked */
		for (uint64_t i = 0; i < SLOTS + PUTS; i++) {
			if (i == SLOTS) {
				assert_int_equal(kvt__dram_headroom(d), CHAINS);
				break;
			}
			struct kvt_key k = key_n(i), pk = key_n(i - CHAINS);
			assert_int_equal(kvt__dram_alloc(d, &k, i >= CHAINS ? &pk : NULL, &r), 0);
			kvt__dram_publish(d, r.id, 4096, 1, false);
			kvt__dram_unpin(d, r.id);
		}
		uint64_t t0 = kvt__now_ns(), ms = 0;
		for (uint64_t i = SLOTS; i < SLOTS + PUTS; i++) {
			struct kvt_key k = key_n(i), pk = key_n(i - CHAINS);
			assert_int_equal(kvt__dram_alloc(d, &k, &pk, &r), 0);
			kvt__dram_publish(d, r.id, 4096, 1, false);
			kvt__dram_unpin(d, r.id);
			if (i % 64 == 0 && (ms = (kvt__now_ns() - t0) / 1000000) > budget_ms)
				fail_msg("%s: %llu evicting puts, %u chained slots: %llu ms, "
					 "over %llu ms: victims are searched for by a walk",
					 pol[p], (unsigned long long)(i - SLOTS), SLOTS,
					 (unsigned long long)ms, (unsigned long long)budget_ms);
		}
		ms = (kvt__now_ns() - t0) / 1000000;
		if (p == 0 && LRU_TIMES * ms > budget_ms)
			budget_ms = LRU_TIMES * ms;
		struct kvt_tier_stats st;
		kvt__dram_stats(d, &st);
		print_message("%s: %u evicting puts in a pool of %u chained slots: %llu ms\n",
			      pol[p], PUTS, SLOTS, (unsigned long long)ms);
		assert_int_equal(st.evictions, PUTS);
		for (uint64_t c = 0; c < CHAINS; c++)
			assert_true(has(d, c));
		kvt__dram_destroy(d);
	}
}

/* ---- multi-threaded stress ---- */

enum { ST_SLOTS = 16, ST_KEYS = 48, ST_SLOT_BYTES = 8192, ST_THREADS = 4 };

struct stress {
	struct kvt_dram *d;
	uint64_t deadline;
	unsigned seed;
	uint64_t ops, gets, allocs, removes, enospc, cleaned, mismatches;
};

static bool check_slot(const struct kvt_slot_ref *r, const struct kvt_key *k)
{
	const uint8_t *b = r->buf;
	return memcmp(b, k, sizeof(*k)) == 0 &&
	       memcmp(b + ST_SLOT_BYTES - sizeof(*k), k, sizeof(*k)) == 0 &&
	       r->object_bytes == ST_SLOT_BYTES;
}

static void *stress_thread(void *arg)
{
	struct stress *s = arg;
	uint64_t x = s->seed;
	struct kvt_slot_ref r, v[2];
	while (kvt__now_ns() < s->deadline) {
		for (int burst = 0; burst < 64; burst++) {
			x = mix(x);
			uint64_t i = (x >> 8) % ST_KEYS;
			struct kvt_key k = key_n(i), pk = key_n(i - 1);
			s->ops++;
			switch (x % 8) {
			case 0:
			case 1:
			case 2:
				if (kvt__dram_get(s->d, &k, &r) == 0) {
					s->gets++;
					if (!check_slot(&r, &k) || r.n_tokens != i)
						s->mismatches++;
					sched_yield();
					if (!check_slot(&r, &k))
						s->mismatches++;
					kvt__dram_unpin(s->d, r.id);
				}
				break;
			case 3:
			case 4: {
				int rc = kvt__dram_alloc(s->d, &k, i % 4 ? &pk : NULL, &r);
				if (rc == -ENOSPC)
					s->enospc++;
				if (rc)
					break;
				s->allocs++;
				memset(r.buf, (int)(x >> 40), ST_SLOT_BYTES);
				memcpy(r.buf, &k, sizeof(k));
				memcpy((uint8_t *)r.buf + ST_SLOT_BYTES - sizeof(k), &k, sizeof(k));
				if (x % 31 == 0) {
					kvt__dram_abort(s->d, r.id);
					break;
				}
				kvt__dram_publish(s->d, r.id, ST_SLOT_BYTES, (uint32_t)i,
						  (x >> 20) % 4 == 0);
				kvt__dram_unpin(s->d, r.id);
				break;
			}
			case 5:
				if (kvt__dram_remove(s->d, &k) != -ENOENT)
					s->removes++;
				break;
			case 6: {
				uint32_t n = kvt__dram_dirty_victims(s->d, v, 2, 0);
				for (uint32_t j = 0; j < n; j++) {
					struct kvt_key kk;
					kvt__dram_key(s->d, v[j].id, &kk);
					if (!check_slot(&v[j], &kk) || !v[j].dirty)
						s->mismatches++;
					kvt__dram_set_dirty(s->d, v[j].id, false);
					kvt__dram_unpin(s->d, v[j].id);
					s->cleaned++;
				}
				break;
			}
			default:
				(void)kvt__dram_contains(s->d, &k, x & 1);
				(void)kvt__dram_headroom(s->d);
				break;
			}
		}
	}
	return NULL;
}

static int scan_verify(void *arg, const struct kvt_key *key, uint64_t bytes)
{
	uint64_t *n = arg;
	(*n)++;
	return bytes == ST_SLOT_BYTES ? 0 : -1;
}

static void test_stress(void **unused)
{
	const char *ms_env = getenv("KVT_DRAM_STRESS_MS");
	uint64_t ms = ms_env ? strtoull(ms_env, NULL, 10) : 2000;
	const char *pol[] = {"lru", "arc", "pslru", "hd", "hda", "lru2"};
	for (size_t p = 0; p < sizeof(pol) / sizeof(pol[0]); p++) {
		struct kvt_dram *d = mk(pol[p], ST_SLOTS, ST_SLOT_BYTES);
		struct stress st[ST_THREADS];
		pthread_t th[ST_THREADS];
		uint64_t deadline = kvt__now_ns() + ms * 1000000ull / 2;
		for (int t = 0; t < ST_THREADS; t++) {
			st[t] =
			    (struct stress){.d = d, .deadline = deadline, .seed = 1000u * t + p};
			assert_int_equal(pthread_create(&th[t], NULL, stress_thread, &st[t]), 0);
		}
		uint64_t ops = 0, gets = 0, allocs = 0, removes = 0, enospc = 0, cleaned = 0;
		for (int t = 0; t < ST_THREADS; t++) {
			pthread_join(th[t], NULL);
			assert_int_equal(st[t].mismatches, 0);
			ops += st[t].ops;
			gets += st[t].gets;
			allocs += st[t].allocs;
			removes += st[t].removes;
			enospc += st[t].enospc;
			cleaned += st[t].cleaned;
		}
		print_message("stress %s: %llu ops, %llu get hits, %llu allocs, %llu removes, "
			      "%llu enospc, %llu cleaned\n",
			      pol[p], (unsigned long long)ops, (unsigned long long)gets,
			      (unsigned long long)allocs, (unsigned long long)removes,
			      (unsigned long long)enospc, (unsigned long long)cleaned);
		assert_true(gets > 100 && allocs > 100 && removes > 10 && cleaned > 10);
		/* quiescent: the counters agree with what is there, and every pin was dropped */
		struct kvt_slot_ref v[ST_SLOTS];
		uint32_t n = kvt__dram_dirty_victims(d, v, ST_SLOTS, kvt__dram_flush_pass(d));
		for (uint32_t j = 0; j < n; j++) {
			kvt__dram_set_dirty(d, v[j].id, false);
			kvt__dram_unpin(d, v[j].id);
		}
		struct kvt_tier_stats s;
		kvt__dram_stats(d, &s);
		uint64_t seen = 0;
		assert_int_equal(kvt__dram_scan(d, scan_verify, &seen), 0);
		assert_int_equal(seen, s.objects);
		assert_int_equal(s.bytes, s.objects * ST_SLOT_BYTES);
		/* all clean and unpinned: headroom = every slot except prefixes with children */
		uint32_t h = kvt__dram_headroom(d);
		assert_true(h >= ST_SLOTS - s.objects + 1 || s.objects == 0);
		/* every key can be removed, and then the whole pool is free again */
		for (uint64_t i = 0; i < ST_KEYS; i++) {
			struct kvt_key k = key_n(i);
			int rc = kvt__dram_remove(d, &k);
			assert_true(rc == 0 || rc == -ENOENT);
		}
		assert_int_equal(kvt__dram_headroom(d), ST_SLOTS);
		kvt__dram_stats(d, &s);
		assert_int_equal(s.objects, 0);
		assert_int_equal(s.bytes, 0);
		kvt__dram_destroy(d);
	}
}

/* dram.prefault: every page of the pool is resident right after create (mincore), and
 * without it a fresh pool is not. */
static size_t resident_pages(struct kvt_dram *d, size_t *pages)
{
	void *base;
	size_t len;
	kvt__dram_pool(d, &base, &len); /* returns the memfd, or -1 */
	long pg = sysconf(_SC_PAGESIZE);
	*pages = (len + (size_t)pg - 1) / (size_t)pg;
	unsigned char *vec = malloc(*pages);
	assert_non_null(vec);
	assert_int_equal(mincore(base, len, vec), 0);
	size_t n = 0;
	for (size_t i = 0; i < *pages; i++)
		n += vec[i] & 1;
	free(vec);
	return n;
}

static void test_prefault(void **unused)
{
	(void)unused;
	for (int shared = 0; shared < 2; shared++) {
		for (int pf = 0; pf < 2; pf++) {
			struct kvt_dram_options o = {.bytes = 32u << 20, .slot_bytes = 1u << 20,
						     .policy = "lru", .shared = shared,
						     .prefault = pf};
			struct kvt_dram *d = NULL;
			assert_int_equal(kvt__dram_create(&o, &d), 0);
			size_t pages, res = resident_pages(d, &pages);
			print_message("shared=%d prefault=%d: %zu of %zu pages resident\n", shared,
				      pf, res, pages);
			if (pf)
				assert_int_equal(res, pages);
			else
				assert_true(res < pages / 2);
			kvt__dram_destroy(d);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_create),
	    cmocka_unit_test(test_alloc_publish_get),
	    cmocka_unit_test(test_pinned_never_evicted),
	    cmocka_unit_test(test_dirty_never_evicted),
	    cmocka_unit_test(test_partial_first),
	    cmocka_unit_test(test_suffix_before_prefix),
	    cmocka_unit_test(test_remove_while_pinned),
	    cmocka_unit_test(test_enospc_all_pinned),
	    cmocka_unit_test(test_abort),
	    cmocka_unit_test(test_dirty_victims_order),
	    cmocka_unit_test(test_flush_pass_linear),
	    cmocka_unit_test(test_flush_passes_concurrent),
	    cmocka_unit_test(test_stats_and_scan),
	    cmocka_unit_test(test_no_heap_after_create),
	    cmocka_unit_test(test_long_chains_evict_bounded),
	    cmocka_unit_test(test_stress),
	    cmocka_unit_test(test_prefault),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
