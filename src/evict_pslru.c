/*
 * evict_pslru.c - "pslru", the default policy for KV chunks: a segmented LRU shaped for
 * prefix caches. Three LRU lists:
 *   window     the newest 1% of insertions, evicted last: the chain a request is storing
 *              right now must not eat its own head when the request is larger than the
 *              cache;
 *   probation  entries used once (they leave the window here), evicted first;
 *   protected  entries used again, up to a target share of the capacity (starts at half);
 *              when it overflows, its coldest entry goes back to probation for one more
 *              round.
 * A victim is the least recently used entry the owner's ok() accepts, from probation,
 * else protected, else the window. The protected target adapts within [1/3, 2/3] of the
 * capacity: two small Bloom-style ghost filters remember recent victims by key hash, one
 * for entries evicted unproven, one for proven ones; when an evicted key comes back, the
 * segment that lost it was too small, and the target moves by capacity/256 toward it
 * (ARC's feedback, applied to the split of a segmented LRU rather than to what is
 * evicted).
 *
 * Why it fits prefix caches (docs/COST_MODEL.md has the measurements):
 *   - A chunk's second use is the moment it proves to be a *shared* prefix: a
 *     conversation's next turn, a second user of a document, another step of an agent on
 *     the same code base. Chunks used once are mostly dead on arrival: a prompt's partial
 *     last chunk (the next turn re-chunks it), a one-off question, a session's last turn.
 *     Probation-first eviction spends those before any proven prefix.
 *   - Protected is capped (at most 2/3), so recency still governs the cache: traffic whose
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
 * State is three intrusive lists over ids and the ghost bit sets (8 bits per entry, two
 * generations per kind), allocated once at create (the DRAM tier calls policies under its
 * lock on the hot path); every operation is O(1) apart from the scan over refused entries,
 * which kvt__evict_victim_marked does not need (src/evict_okset.h).
 */
#include <errno.h>
#include <string.h>

#include "evict_okset.h"
#include "evict_policy.h"
#include "evict_pslru.h"
#include "internal.h"

enum { L_NONE = 0, L_PROB, L_PROT, L_WIN, N_LISTS };

/* window share, and the protected share it starts from */
#define WIN_NUM 1
#define WIN_DEN 100
#define PROT_NUM 1
#define PROT_DEN 2
/* the protected share adapts within [1/GHOST_LO, 1 - 1/GHOST_LO] of the capacity, by
 * capacity/GHOST_STEP per ghost hit */
#define GHOST_LO 3
#define GHOST_STEP 256

struct pslru {
	uint32_t cap, prot_max, win_max;
	uint32_t *prev, *next; /* cap + N_LISTS entries: list sentinels at cap + list */
	uint8_t *list;
	uint8_t *proven; /* per id: has been in protected */
	uint64_t *khash;
	uint32_t size[N_LISTS];
	/* ghosts: two generations of bitsets per kind, remembering recent evictions */
	uint64_t *ghost[2][2];
	uint32_t ghost_bits, ghost_n[2];
	int ghost_cur[2];
	uint32_t prot_lo, prot_hi, step;
	struct kvt_okset oks; /* list l - 1 for L_PROB, L_PROT, L_WIN */
};

#define HEAD(p, l) ((p)->cap + (l))

static void unlink_id(struct pslru *p, uint32_t id)
{
	p->next[p->prev[id]] = p->next[id];
	p->prev[p->next[id]] = p->prev[id];
	p->size[p->list[id]]--;
	p->list[id] = L_NONE;
	kvt__okset_unlinked(&p->oks, id);
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
	kvt__okset_pushed(&p->oks, (uint32_t)l - 1, id);
}

void kvt__pslru_destroy(void *st)
{
	struct pslru *p = st;
	if (!p)
		return;
	kvt__free(p->prev);
	kvt__free(p->next);
	kvt__free(p->list);
	kvt__free(p->proven);
	kvt__free(p->khash);
	for (int k = 0; k < 2; k++)
		for (int g = 0; g < 2; g++)
			kvt__free(p->ghost[k][g]);
	kvt__okset_fini(&p->oks);
	kvt__free(p);
}

uint32_t kvt__pslru_ghost_bits(uint32_t capacity)
{
	/* 8 bits per slot, a power of two, at most 2^31 (a uint32_t): in 32-bit arithmetic
	 * 8 * capacity wrapped past 2^29 slots, and the doubling wrapped to 0 past 2^28 (a
	 * create that never returned) */
	uint64_t want = 8ull * capacity, bits = 64;
	while (bits < want && bits < (1ull << 31))
		bits <<= 1;
	return (uint32_t)bits;
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
	p->proven = kvt__calloc(capacity, 1);
	p->khash = kvt__calloc(capacity, sizeof(uint64_t));
	p->ghost_bits = kvt__pslru_ghost_bits(capacity);
	for (int k = 0; k < 2; k++)
		for (int g = 0; g < 2; g++)
			p->ghost[k][g] = kvt__calloc(p->ghost_bits / 64, sizeof(uint64_t));
	p->prot_lo = capacity / GHOST_LO;
	p->prot_hi = (uint32_t)((uint64_t)capacity * (GHOST_LO - 1) / GHOST_LO);
	p->step = KVT_MAX(1u, capacity / GHOST_STEP);
	if (!p->prev || !p->next || !p->list || !p->proven || !p->khash || !p->ghost[0][0] ||
	    !p->ghost[0][1] || !p->ghost[1][0] || !p->ghost[1][1] ||
	    kvt__okset_init(&p->oks, capacity, N_LISTS - 1) < 0) {
		kvt__pslru_destroy(p);
		return -ENOMEM;
	}
	for (int l = 0; l < N_LISTS; l++)
		p->prev[HEAD(p, l)] = p->next[HEAD(p, l)] = HEAD(p, l);
	*out = p;
	return 0;
}

static uint32_t gbit(const struct pslru *p, uint64_t h)
{
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ull;
	return (uint32_t)(h >> 32) & (p->ghost_bits - 1);
}

static bool ghost_has(const struct pslru *p, int kind, uint64_t h)
{
	uint32_t b = gbit(p, h);
	return (p->ghost[kind][0][b / 64] | p->ghost[kind][1][b / 64]) >> (b % 64) & 1;
}

static void ghost_add(struct pslru *p, int kind, uint64_t h)
{
	if (++p->ghost_n[kind] > p->cap) { /* forget the older generation */
		p->ghost_cur[kind] ^= 1;
		memset(p->ghost[kind][p->ghost_cur[kind]], 0, p->ghost_bits / 8);
		p->ghost_n[kind] = 1;
	}
	uint32_t b = gbit(p, h);
	p->ghost[kind][p->ghost_cur[kind]][b / 64] |= 1ull << (b % 64);
}

void kvt__pslru_insert(void *st, uint32_t id, uint64_t khash)
{
	struct pslru *p = st;
	if (id >= p->cap || p->list[id] != L_NONE)
		return;
	p->khash[id] = khash;
	p->proven[id] = 0;
	/* a recently evicted chunk is back: the segment it was evicted from was too small */
	bool g0 = ghost_has(p, 0, khash), g1 = ghost_has(p, 1, khash);
	if (g0 && p->prot_max > p->prot_lo)
		p->prot_max =
		    p->prot_max > p->prot_lo + p->step ? p->prot_max - p->step : p->prot_lo;
	else if (g1 && p->prot_max < p->prot_hi)
		p->prot_max = KVT_MIN(p->prot_hi, p->prot_max + p->step);
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
	if (to == L_PROT)
		p->proven[id] = 1;
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

static int evict(struct pslru *p, int64_t v)
{
	if (v < 0)
		return -ENOENT;
	unlink_id(p, (uint32_t)v);
	ghost_add(p, p->proven[v], p->khash[v]);
	return (int)v;
}

int kvt__pslru_victim(void *st, kvt_evict_ok_fn ok, void *arg)
{
	struct pslru *p = st;
	int64_t v = first_ok(p, L_PROB, ok, arg);
	if (v < 0)
		v = first_ok(p, L_PROT, ok, arg);
	if (v < 0)
		v = first_ok(p, L_WIN, ok, arg);
	return evict(p, v);
}

void kvt__pslru_mark(void *st, uint32_t id, bool ok)
{
	struct pslru *p = st;
	kvt__okset_mark(&p->oks, id, ok);
}

int kvt__pslru_victim_marked(void *st)
{
	struct pslru *p = st;
	int64_t v = -1;
	for (int l = L_PROB; l <= L_WIN && v < 0; l++) {
		uint32_t id = kvt__okset_first(&p->oks, (uint32_t)l - 1);
		if (id != KVT_IDL_NIL)
			v = id;
	}
	return evict(p, v);
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

/* The row of src/evict.c's policy table. */
const struct kvt_evict_ops kvt__evict_pslru_ops = {
    .name = "pslru",
    .create = kvt__pslru_create,
    .destroy = kvt__pslru_destroy,
    .insert = kvt__pslru_insert,
    .touch = kvt__pslru_touch,
    .remove = kvt__pslru_remove,
    .victim = kvt__pslru_victim,
    .mark = kvt__pslru_mark,
    .victim_marked = kvt__pslru_victim_marked,
    .peek = kvt__pslru_peek,
    .resident = kvt__pslru_resident,
};

