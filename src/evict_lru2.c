/*
 * evict_lru2.c - "lru2": LRU with admission on the second sighting, the baseline issue #12
 * measured on production traces ("admission alone"). A block requested for the first time
 * (per a filter of the keys first seen in the last 10-20 x capacity first sightings,
 * src/ghost.h; a count-min sketch's doorkeeper, used before, filled up and called most new
 * keys "seen", so this was LRU in all but name) waits
 * in a probation list that is evicted first, oldest first; a block seen before, or hit
 * while on probation, lives in the main LRU list. Kept as a reference point for the
 * default policy ("hd"), which learns when this rule pays instead of always applying it.
 */
#include <errno.h>

#include "evict_okset.h"
#include "evict_policy.h"
#include "internal.h"
#include "ghost.h"

/* first sightings remembered, per capacity entry */
#define SEEN_PER_ENTRY 20

struct lru2 {
	uint32_t cap;
	struct kvt_idlist prob, main;
	struct kvt_idlink *links;
	uint8_t *where; /* 0 none, 1 probation, 2 main */
	struct kvt_ghost *seen;
	struct kvt_okset oks; /* lists 0: probation, 1: main (where - 1) */
};

static void lru2_destroy(void *st)
{
	struct lru2 *l = st;
	if (!l)
		return;
	kvt__free(l->links);
	kvt__free(l->where);
	kvt__ghost_destroy(l->seen);
	kvt__okset_fini(&l->oks);
	kvt__free(l);
}

static int lru2_create(uint32_t cap, void **out)
{
	struct lru2 *l = kvt__calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->cap = cap;
	kvt__idl_init(&l->prob);
	kvt__idl_init(&l->main);
	l->links = kvt__calloc(cap, sizeof(*l->links));
	l->where = kvt__calloc(cap, 1);
	int rc = kvt__ghost_create(SEEN_PER_ENTRY * KVT_MIN(cap, UINT32_MAX / SEEN_PER_ENTRY), &l->seen);
	if (rc < 0 || !l->links || !l->where || kvt__okset_init(&l->oks, cap, 2) < 0) {
		lru2_destroy(l);
		return -ENOMEM;
	}
	*out = l;
	return 0;
}

static void lru2_insert(void *st, uint32_t id, uint64_t khash)
{
	struct lru2 *l = st;
	if (id >= l->cap || l->where[id])
		return;
	bool seen = kvt__ghost_test(l->seen, khash);
	if (!seen)
		kvt__ghost_add(l->seen, khash);
	l->where[id] = seen ? 2 : 1;
	kvt__okl_push_head(&l->oks, seen ? 1 : 0, seen ? &l->main : &l->prob, l->links, id);
}

static void lru2_touch(void *st, uint32_t id)
{
	struct lru2 *l = st;
	if (id >= l->cap || !l->where[id])
		return;
	kvt__okl_unlink(&l->oks, l->where[id] == 1 ? &l->prob : &l->main, l->links, id);
	l->where[id] = 2;
	kvt__okl_push_head(&l->oks, 1, &l->main, l->links, id);
}

static void lru2_remove(void *st, uint32_t id)
{
	struct lru2 *l = st;
	if (id >= l->cap || !l->where[id])
		return;
	kvt__okl_unlink(&l->oks, l->where[id] == 1 ? &l->prob : &l->main, l->links, id);
	l->where[id] = 0;
}

static int lru2_victim(void *st, kvt_evict_ok_fn ok, void *arg)
{
	struct lru2 *l = st;
	uint32_t id = kvt__idl_find_from_tail(&l->prob, l->links, ok, arg);
	if (id == KVT_IDL_NIL)
		id = kvt__idl_find_from_tail(&l->main, l->links, ok, arg);
	if (id == KVT_IDL_NIL)
		return -ENOENT;
	lru2_remove(l, id);
	return (int)id;
}

static void lru2_mark(void *st, uint32_t id, bool ok)
{
	struct lru2 *l = st;
	kvt__okset_mark(&l->oks, id, ok);
}

static int lru2_victim_marked(void *st)
{
	struct lru2 *l = st;
	uint32_t id = kvt__okset_first(&l->oks, 0);
	if (id == KVT_IDL_NIL)
		id = kvt__okset_first(&l->oks, 1);
	if (id == KVT_IDL_NIL)
		return -ENOENT;
	lru2_remove(l, id);
	return (int)id;
}

static uint32_t lru2_peek(void *st, uint32_t *ids, uint32_t n)
{
	struct lru2 *l = st;
	uint32_t k = kvt__idl_copy_from_tail(&l->prob, l->links, ids, n);
	return k + kvt__idl_copy_from_tail(&l->main, l->links, ids + k, n - k);
}

static uint32_t lru2_resident(const void *st)
{
	const struct lru2 *l = st;
	return l->prob.len + l->main.len;
}

const struct kvt_evict_ops kvt__evict_lru2_ops = {
    .name = "lru2",
    .create = lru2_create,
    .destroy = lru2_destroy,
    .insert = lru2_insert,
    .touch = lru2_touch,
    .remove = lru2_remove,
    .victim = lru2_victim,
    .mark = lru2_mark,
    .victim_marked = lru2_victim_marked,
    .peek = lru2_peek,
    .resident = lru2_resident,
};
