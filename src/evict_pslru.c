/*
 * evict_pslru.c - "pslru", the default policy for KV chunks: a segmented LRU shaped for
 * prefix caches. Three LRU lists:
 *   window     the newest 1% of insertions, evicted last: the chain a request is storing
 *              right now must not eat its own head when the request is larger than the
 *              cache;
 *   probation  entries used once (they leave the window here), evicted first;
 *   protected  entries used again, at most half the capacity; when it overflows, its
 *              coldest entry goes back to probation for one more round.
 * A victim is the least recently used entry the owner's ok() accepts, from probation,
 * else protected, else the window.
 *
 * Why it fits prefix caches (docs/COST_MODEL.md has the measurements):
 *   - A chunk's second use is the moment it proves to be a *shared* prefix: a
 *     conversation's next turn, a second user of a document, another step of an agent on
 *     the same code base. Chunks used once are mostly dead on arrival: a prompt's partial
 *     last chunk (the next turn re-chunks it), a one-off question, a session's last turn.
 *     Probation-first eviction spends those before any proven prefix.
 *   - Protected is capped at half, so recency still governs the cache: traffic whose
 *     reuse is "the same session again soon" behaves much as under LRU, which is already
 *     near-optimal there, while shared prefixes (system prompts, popular documents,
 *     repository contexts) can no longer be flushed by a burst of one-off chunks - the
 *     failure of LRU at small capacities.
 *   - The owner's ok() refuses entries with resident children, so eviction walks a chain
 *     from its end: suffixes go before prefixes, and a hit prefix is never cut in the
 *     middle. The scan steps over refused entries without reordering them.
 * Frequency sketches (W-TinyLFU), ARC-style adaptation and frequency-credit CLOCK were
 * measured as well: on conversational and agent traffic, where reuse is recency, they
 * protect stale chunks and fall behind LRU at medium and large capacities.
 *
 * State is three intrusive lists over ids, allocated once at create (the DRAM tier calls
 * policies under its lock on the hot path); every operation is O(1) apart from the scan
 * over refused entries.
 */
#include <errno.h>

#include "evict_pslru.h"
#include "internal.h"

#if __has_include("evict_policy.h")
#include "evict_policy.h"
#define KVT_HAVE_EVICT_POLICY 1
#endif

enum { L_NONE = 0, L_PROB, L_PROT, L_WIN, N_LISTS };

/* window and protected shares of the capacity */
#define WIN_NUM 1
#define WIN_DEN 100
#define PROT_NUM 1
#define PROT_DEN 2

struct pslru {
	uint32_t cap, prot_max, win_max;
	uint32_t *prev, *next; /* cap + N_LISTS entries: list sentinels at cap + list */
	uint8_t *list;
	uint32_t size[N_LISTS];
};

#define HEAD(p, l) ((p)->cap + (l))

static void unlink_id(struct pslru *p, uint32_t id)
{
	p->next[p->prev[id]] = p->next[id];
	p->prev[p->next[id]] = p->prev[id];
	p->size[p->list[id]]--;
	p->list[id] = L_NONE;
}

/* Most recent end: just before the sentinel; least recent: just after it. */
static void push_mru(struct pslru *p, uint32_t id, int l)
{
	uint32_t h = HEAD(p, l);
	p->prev[id] = p->prev[h];
	p->next[id] = h;
	p->next[p->prev[h]] = id;
	p->prev[h] = id;
	p->list[id] = (uint8_t)l;
	p->size[l]++;
}

void kvt__pslru_destroy(void *st)
{
	struct pslru *p = st;
	if (!p)
		return;
	kvt__free(p->prev);
	kvt__free(p->next);
	kvt__free(p->list);
	kvt__free(p);
}

int kvt__pslru_create(uint32_t capacity, void **out)
{
	if (!capacity || capacity > UINT32_MAX - N_LISTS || !out)
		return -EINVAL;
	struct pslru *p = kvt__calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->cap = capacity;
	p->prot_max = (uint32_t)((uint64_t)capacity * PROT_NUM / PROT_DEN);
	p->win_max = KVT_MAX(1u, (uint32_t)((uint64_t)capacity * WIN_NUM / WIN_DEN));
	size_t n = (size_t)capacity + N_LISTS;
	p->prev = kvt__malloc(n * sizeof(uint32_t));
	p->next = kvt__malloc(n * sizeof(uint32_t));
	p->list = kvt__calloc(capacity, 1);
	if (!p->prev || !p->next || !p->list) {
		kvt__pslru_destroy(p);
		return -ENOMEM;
	}
	for (int l = 0; l < N_LISTS; l++)
		p->prev[HEAD(p, l)] = p->next[HEAD(p, l)] = HEAD(p, l);
	*out = p;
	return 0;
}

void kvt__pslru_insert(void *st, uint32_t id, uint64_t khash)
{
	struct pslru *p = st;
	(void)khash;
	if (id >= p->cap || p->list[id] != L_NONE)
		return;
	push_mru(p, id, L_WIN);
	if (p->size[L_WIN] > p->win_max) {
		uint32_t old = p->next[HEAD(p, L_WIN)];
		unlink_id(p, old);
		push_mru(p, old, L_PROB);
	}
}

void kvt__pslru_touch(void *st, uint32_t id)
{
	struct pslru *p = st;
	if (id >= p->cap || p->list[id] == L_NONE)
		return;
	int to = p->list[id] == L_WIN ? L_WIN : L_PROT;
	unlink_id(p, id);
	push_mru(p, id, to);
	if (p->size[L_PROT] > p->prot_max) { /* the coldest proven entry gets one more round */
		uint32_t cold = p->next[HEAD(p, L_PROT)];
		unlink_id(p, cold);
		push_mru(p, cold, L_PROB);
	}
}

void kvt__pslru_remove(void *st, uint32_t id)
{
	struct pslru *p = st;
	if (id < p->cap && p->list[id] != L_NONE)
		unlink_id(p, id);
}

static int64_t first_ok(struct pslru *p, int l, kvt_evict_ok_fn ok, void *arg)
{
	for (uint32_t id = p->next[HEAD(p, l)]; id != HEAD(p, l); id = p->next[id])
		if (!ok || ok(arg, id))
			return id;
	return -1;
}

int kvt__pslru_victim(void *st, kvt_evict_ok_fn ok, void *arg)
{
	struct pslru *p = st;
	int64_t v = first_ok(p, L_PROB, ok, arg);
	if (v < 0)
		v = first_ok(p, L_PROT, ok, arg);
	if (v < 0)
		v = first_ok(p, L_WIN, ok, arg);
	if (v < 0)
		return -ENOENT;
	unlink_id(p, (uint32_t)v);
	return (int)v;
}

uint32_t kvt__pslru_peek(void *st, uint32_t *ids, uint32_t n)
{
	struct pslru *p = st;
	uint32_t k = 0;
	for (int l = L_PROB; l <= L_WIN; l++)
		for (uint32_t id = p->next[HEAD(p, l)]; id != HEAD(p, l) && k < n; id = p->next[id])
			ids[k++] = id;
	return k;
}

uint32_t kvt__pslru_resident(const void *st)
{
	const struct pslru *p = st;
	return p->size[L_PROB] + p->size[L_PROT] + p->size[L_WIN];
}

#ifdef KVT_HAVE_EVICT_POLICY
/* The row src/evict.c's table points at (declare it in evict_policy.h). */
const struct kvt_evict_ops kvt__evict_pslru_ops = {
	.name = "pslru",
	.create = kvt__pslru_create,
	.destroy = kvt__pslru_destroy,
	.insert = kvt__pslru_insert,
	.touch = kvt__pslru_touch,
	.remove = kvt__pslru_remove,
	.victim = kvt__pslru_victim,
	.peek = kvt__pslru_peek,
	.resident = kvt__pslru_resident,
};
#endif
