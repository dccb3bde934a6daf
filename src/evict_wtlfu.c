/*
 * evict_wtlfu.c - the default eviction policy for KV chunks: a small LRU window in front of
 * a segmented LRU (probation + protected), where a chunk leaving the window enters the main
 * cache only if a frequency sketch says it has been used more often than the chunk it
 * would push out (W-TinyLFU, Einziger, Friedman & Manes).
 *
 * Why this shape fits prefix caches: requests share prefixes, so a chunk's worth is the
 * number of future requests whose prompt starts with it, and that is what its access
 * frequency measures - a system prompt or a popular document is touched by every request
 * that uses it, a user's unique question once. LRU ranks only by recency and lets one long
 * burst of never-reused chunks (an agent's tool output, a RAG answer's unique context) flush
 * the shared prefixes; when the reuse distance of most chunks exceeds the cache, LRU keeps
 * cycling and hits almost nothing, while frequency-gated admission keeps a stable, most-used
 * subset. The window keeps pure recency for what was just stored (the next turn of a
 * conversation usually comes soon) and the probation/protected split lets a chunk used
 * twice outlive a scan. Frequency is monotone along a prefix chain (every use of a chunk is
 * a use of its parent), so prefixes win duels against their own suffixes; the owner's ok()
 * ("no resident children") makes eviction take suffixes before prefixes, and the victim
 * scan skips entries it refuses.
 *
 * Lists are intrusive doubly-linked arrays indexed by entry id (no allocation after
 * create); the sketch is src/sketch.c, sized to the capacity and halved every 10 x width
 * accesses so old popularity fades.
 */
#include <errno.h>

#include "evict_wtlfu.h"
#include "internal.h"
#include "sketch.h"

enum { L_NONE = 0, L_WIN, L_PROB, L_PROT, N_LISTS };

struct kvt_wtlfu {
	uint32_t cap;
	uint32_t *prev, *next; /* cap + N_LISTS: sentinels at cap + list */
	uint8_t *list;
	uint64_t *hash;
	uint32_t size[N_LISTS];
	uint32_t win_max, prot_max;
	struct kvt_sketch *sketch;
};

#define HEAD(p, l) ((p)->cap + (l))

static void unlink_id(struct kvt_wtlfu *p, uint32_t id)
{
	p->next[p->prev[id]] = p->next[id];
	p->prev[p->next[id]] = p->prev[id];
	p->size[p->list[id]]--;
	p->list[id] = L_NONE;
}

/* Most recently used end: before the sentinel; least recently used: after it. */
static void push_mru(struct kvt_wtlfu *p, uint32_t id, int l)
{
	uint32_t h = HEAD(p, l);
	p->prev[id] = p->prev[h];
	p->next[id] = h;
	p->next[p->prev[h]] = id;
	p->prev[h] = id;
	p->list[id] = (uint8_t)l;
	p->size[l]++;
}

static void move_mru(struct kvt_wtlfu *p, uint32_t id, int l)
{
	unlink_id(p, id);
	push_mru(p, id, l);
}

int kvt__wtlfu_create(uint32_t capacity, struct kvt_wtlfu **out)
{
	if (!capacity || capacity > UINT32_MAX - N_LISTS || !out)
		return -EINVAL;
	struct kvt_wtlfu *p = kvt__calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->cap = capacity;
	size_t n = (size_t)capacity + N_LISTS;
	p->prev = kvt__malloc(n * sizeof(uint32_t));
	p->next = kvt__malloc(n * sizeof(uint32_t));
	p->list = kvt__calloc(capacity, 1);
	p->hash = kvt__calloc(capacity, sizeof(uint64_t));
	if (!p->prev || !p->next || !p->list || !p->hash ||
	    kvt__sketch_create(capacity, 15, false, &p->sketch) < 0) {
		kvt__wtlfu_destroy(p);
		return -ENOMEM;
	}
	for (int l = 0; l < N_LISTS; l++)
		p->prev[HEAD(p, l)] = p->next[HEAD(p, l)] = HEAD(p, l);
	/* 1% window as in Caffeine's default, at least one entry; protected half of main */
	p->win_max = KVT_MAX(1u, capacity / 100);
	p->prot_max = (uint32_t)(((uint64_t)capacity - p->win_max) / 2);
	*out = p;
	return 0;
}

void kvt__wtlfu_destroy(struct kvt_wtlfu *p)
{
	if (!p)
		return;
	kvt__sketch_destroy(p->sketch);
	kvt__free(p->prev);
	kvt__free(p->next);
	kvt__free(p->list);
	kvt__free(p->hash);
	kvt__free(p);
}

uint32_t kvt__wtlfu_resident(const struct kvt_wtlfu *p)
{
	return p->size[L_WIN] + p->size[L_PROB] + p->size[L_PROT];
}

void kvt__wtlfu_insert(struct kvt_wtlfu *p, uint32_t id, uint64_t khash)
{
	if (id >= p->cap || p->list[id] != L_NONE)
		return;
	p->hash[id] = khash;
	kvt__sketch_add(p->sketch, khash);
	push_mru(p, id, L_WIN);
	/* While the main cache has room, the window overflows into probation without a duel:
	 * admission only matters once something must be pushed out. */
	while (p->size[L_WIN] > p->win_max &&
	       p->size[L_PROB] + p->size[L_PROT] < p->cap - p->win_max)
		move_mru(p, p->next[HEAD(p, L_WIN)], L_PROB);
}

void kvt__wtlfu_touch(struct kvt_wtlfu *p, uint32_t id)
{
	if (id >= p->cap || p->list[id] == L_NONE)
		return;
	kvt__sketch_add(p->sketch, p->hash[id]);
	switch (p->list[id]) {
	case L_WIN:
		move_mru(p, id, L_WIN);
		break;
	case L_PROB:
		move_mru(p, id, L_PROT);
		if (p->size[L_PROT] > p->prot_max) /* demote the coldest protected entry */
			move_mru(p, p->next[HEAD(p, L_PROT)], L_PROB);
		break;
	default:
		move_mru(p, id, L_PROT);
	}
}

void kvt__wtlfu_remove(struct kvt_wtlfu *p, uint32_t id)
{
	if (id < p->cap && p->list[id] != L_NONE)
		unlink_id(p, id);
}

/* The least recently used entry of a list that ok() accepts, or -1. */
static int64_t first_ok(struct kvt_wtlfu *p, int l, kvt_evict_ok_fn ok, void *arg)
{
	for (uint32_t id = p->next[HEAD(p, l)]; id != HEAD(p, l); id = p->next[id])
		if (!ok || ok(arg, id))
			return id;
	return -1;
}

static int64_t main_victim(struct kvt_wtlfu *p, kvt_evict_ok_fn ok, void *arg)
{
	int64_t v = first_ok(p, L_PROB, ok, arg);
	return v >= 0 ? v : first_ok(p, L_PROT, ok, arg);
}

int kvt__wtlfu_victim(struct kvt_wtlfu *p, kvt_evict_ok_fn ok, void *arg)
{
	int64_t v = -1;
	if (p->size[L_WIN] > p->win_max || !(p->size[L_PROB] + p->size[L_PROT])) {
		int64_t cand = first_ok(p, L_WIN, ok, arg);
		if (cand >= 0) {
			int64_t mv = main_victim(p, ok, arg);
			/* The window's oldest entry duels the main cache's victim: the more
			 * frequently used one stays; ties keep the incumbent, so a stream of
			 * one-off chunks cannot wash out the main cache. */
			if (mv >= 0 && kvt__sketch_estimate(p->sketch, p->hash[cand]) >
					       kvt__sketch_estimate(p->sketch, p->hash[mv])) {
				move_mru(p, (uint32_t)cand, L_PROB);
				v = mv;
			} else {
				v = cand;
			}
		}
	}
	if (v < 0)
		v = main_victim(p, ok, arg);
	if (v < 0)
		v = first_ok(p, L_WIN, ok, arg);
	if (v < 0)
		return -ENOENT;
	unlink_id(p, (uint32_t)v);
	return (int)v;
}

uint32_t kvt__wtlfu_peek(struct kvt_wtlfu *p, uint32_t *ids, uint32_t n)
{
	static const int order[] = {L_WIN, L_PROB, L_PROT};
	uint32_t k = 0;
	for (int i = 0; i < 3 && k < n; i++)
		for (uint32_t id = p->next[HEAD(p, order[i])]; id != HEAD(p, order[i]) && k < n;
		     id = p->next[id])
			ids[k++] = id;
	return k;
}
