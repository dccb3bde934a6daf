/*
 * evict.c - eviction policies over a fixed id space, behind a small ops table keyed by
 * policy name (src/evict_policy.h says how to add one). Two policies live here:
 *
 * "lru": one intrusive list over ids (head = most recent). Every operation is O(1); a
 * victim is the entry nearest the tail that the owner's ok() accepts, so pinned or dirty
 * entries are stepped over, not reordered - one ok() call each. An owner that marks ids
 * instead (kvt__evict_mark; the DRAM tier) gets the same victim from src/evict_okset.h,
 * which keeps the marked ids of every list in its order, with no such walk.
 *
 * "arc": Megiddo & Modha's Adaptive Replacement Cache, turned around for an owner that
 * asks for a victim before inserting (the DRAM tier must free a slot first). T1 holds
 * entries seen once recently, T2 entries seen at least twice; B1 and B2 remember the
 * key hashes of entries evicted from T1 and T2. A ghost hit at insert means the list it
 * was evicted from was too small, so the target size p of T1 moves towards it (by the
 * ratio of ghost list sizes, as in the paper) and the entry enters T2. victim() applies
 * REPLACE: take from T1 when |T1| > p, else from T2; the paper's tie rule (x in B2 and
 * |T1| == p) needs the incoming key, which is not known yet, so ties go to T2. When the
 * preferred list has nothing ok() accepts, the other list is tried. Ghosts are bounded to
 * the capacity (|T1| + |B1| <= c, |B1| + |B2| <= c), so everything is allocated at create.
 * A one-time scan fills T1 and is evicted from T1 while p stays small, which is what keeps
 * a frequently used working set in T2 resident.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "evict_okset.h"
#include "evict_policy.h"
#include "internal.h"

/* ------------------------------------------------------------------ lru */

struct lru {
	uint32_t cap;
	struct kvt_idlist list;
	struct kvt_idlink *links;
	uint8_t *in;
	struct kvt_okset oks;
};

static void lru_destroy(void *st)
{
	struct lru *l = st;
	if (!l)
		return;
	kvt__free(l->links);
	kvt__free(l->in);
	kvt__okset_fini(&l->oks);
	kvt__free(l);
}

static int lru_create(uint32_t cap, void **out)
{
	struct lru *l = kvt__calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->cap = cap;
	kvt__idl_init(&l->list);
	l->links = kvt__calloc(cap, sizeof(*l->links));
	l->in = kvt__calloc(cap, 1);
	if (!l->links || !l->in || kvt__okset_init(&l->oks, cap, 1) < 0) {
		lru_destroy(l);
		return -ENOMEM;
	}
	*out = l;
	return 0;
}

static void lru_insert(void *st, uint32_t id, uint64_t khash)
{
	struct lru *l = st;
	if (id >= l->cap || l->in[id])
		return;
	l->in[id] = 1;
	kvt__okl_push_head(&l->oks, 0, &l->list, l->links, id);
}

static void lru_touch(void *st, uint32_t id)
{
	struct lru *l = st;
	if (id < l->cap && l->in[id])
		kvt__okl_to_head(&l->oks, 0, &l->list, l->links, id);
}

static void lru_remove(void *st, uint32_t id)
{
	struct lru *l = st;
	if (id >= l->cap || !l->in[id])
		return;
	l->in[id] = 0;
	kvt__okl_unlink(&l->oks, &l->list, l->links, id);
}

static int lru_victim(void *st, kvt_evict_ok_fn ok, void *arg)
{
	struct lru *l = st;
	uint32_t id = kvt__idl_find_from_tail(&l->list, l->links, ok, arg);
	if (id == KVT_IDL_NIL)
		return -ENOENT;
	lru_remove(l, id);
	return (int)id;
}

static void lru_mark(void *st, uint32_t id, bool ok)
{
	struct lru *l = st;
	kvt__okset_mark(&l->oks, id, ok);
}

static int lru_victim_marked(void *st)
{
	struct lru *l = st;
	uint32_t id = kvt__okset_first(&l->oks, 0);
	if (id == KVT_IDL_NIL)
		return -ENOENT;
	lru_remove(l, id);
	return (int)id;
}

static uint32_t lru_peek(void *st, uint32_t *ids, uint32_t n)
{
	struct lru *l = st;
	return kvt__idl_copy_from_tail(&l->list, l->links, ids, n);
}

static uint32_t lru_resident(const void *st)
{
	const struct lru *l = st;
	return l->list.len;
}

const struct kvt_evict_ops kvt__evict_lru_ops = {
    .name = "lru",
    .create = lru_create,
    .destroy = lru_destroy,
    .insert = lru_insert,
    .touch = lru_touch,
    .remove = lru_remove,
    .victim = lru_victim,
    .mark = lru_mark,
    .victim_marked = lru_victim_marked,
    .peek = lru_peek,
    .resident = lru_resident,
};

/* ------------------------------------------------------------------ arc */

enum { ARC_NONE = 0, ARC_T1 = 1, ARC_T2 = 2, ARC_B1 = 1, ARC_B2 = 2 };

struct arc {
	uint32_t cap;
	uint32_t p; /* target size of T1, 0 .. cap */
	/* resident entries, by id */
	struct kvt_idlist t1, t2;
	struct kvt_idlink *links;
	uint64_t *khash;
	uint8_t *where;
	struct kvt_okset oks; /* lists 0: T1, 1: T2 */
	/* ghost entries: a pool of cap nodes, found by key hash through chained buckets */
	struct kvt_idlist b1, b2;
	struct kvt_idlink *glinks;
	uint64_t *ghash;
	uint32_t *gchain;
	uint8_t *gwhere;
	uint32_t gfree; /* free nodes chained through glinks[].next */
	uint32_t *buckets;
	uint32_t bmask;
};

static void arc_destroy(void *st)
{
	struct arc *a = st;
	if (!a)
		return;
	kvt__free(a->links);
	kvt__free(a->khash);
	kvt__free(a->where);
	kvt__free(a->glinks);
	kvt__free(a->ghash);
	kvt__free(a->gchain);
	kvt__free(a->gwhere);
	kvt__free(a->buckets);
	kvt__okset_fini(&a->oks);
	kvt__free(a);
}

static int arc_create(uint32_t cap, void **out)
{
	struct arc *a = kvt__calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->cap = cap;
	kvt__idl_init(&a->t1);
	kvt__idl_init(&a->t2);
	kvt__idl_init(&a->b1);
	kvt__idl_init(&a->b2);
	uint64_t nb = 1;
	while (nb < cap)
		nb <<= 1;
	a->bmask = (uint32_t)(nb - 1);
	a->links = kvt__calloc(cap, sizeof(*a->links));
	a->khash = kvt__calloc(cap, sizeof(*a->khash));
	a->where = kvt__calloc(cap, sizeof(*a->where));
	a->glinks = kvt__calloc(cap, sizeof(*a->glinks));
	a->ghash = kvt__calloc(cap, sizeof(*a->ghash));
	a->gchain = kvt__calloc(cap, sizeof(*a->gchain));
	a->gwhere = kvt__calloc(cap, sizeof(*a->gwhere));
	a->buckets = kvt__malloc(nb * sizeof(*a->buckets));
	if (!a->links || !a->khash || !a->where || !a->glinks || !a->ghash || !a->gchain ||
	    !a->gwhere || !a->buckets || kvt__okset_init(&a->oks, cap, 2) < 0) {
		arc_destroy(a);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < nb; i++)
		a->buckets[i] = KVT_IDL_NIL;
	for (uint32_t i = 0; i < cap; i++)
		a->glinks[i].next = i + 1 < cap ? i + 1 : KVT_IDL_NIL;
	a->gfree = 0;
	*out = a;
	return 0;
}

static uint32_t ghost_find(const struct arc *a, uint64_t h)
{
	for (uint32_t g = a->buckets[h & a->bmask]; g != KVT_IDL_NIL; g = a->gchain[g])
		if (a->ghash[g] == h)
			return g;
	return KVT_IDL_NIL;
}

static struct kvt_idlist *ghost_list(struct arc *a, uint8_t which)
{
	return which == ARC_B1 ? &a->b1 : &a->b2;
}

static void ghost_drop(struct arc *a, uint32_t g)
{
	kvt__idl_unlink(ghost_list(a, a->gwhere[g]), a->glinks, g);
	a->gwhere[g] = ARC_NONE;
	uint32_t *pp = &a->buckets[a->ghash[g] & a->bmask];
	while (*pp != g)
		pp = &a->gchain[*pp];
	*pp = a->gchain[g];
	a->glinks[g].next = a->gfree;
	a->gfree = g;
}

static void ghost_add(struct arc *a, uint8_t which, uint64_t h)
{
	if (a->gfree == KVT_IDL_NIL) {
		/* |B1| + |B2| == c: the oldest ghost of B2 goes first, as in ARC's case IV. */
		ghost_drop(a, a->b2.len ? a->b2.tail : a->b1.tail);
	}
	uint32_t g = a->gfree;
	a->gfree = a->glinks[g].next;
	a->ghash[g] = h;
	a->gwhere[g] = which;
	kvt__idl_push_head(ghost_list(a, which), a->glinks, g);
	uint32_t *b = &a->buckets[h & a->bmask];
	a->gchain[g] = *b;
	*b = g;
}

static void arc_insert(void *st, uint32_t id, uint64_t khash)
{
	struct arc *a = st;
	if (id >= a->cap || a->where[id] != ARC_NONE)
		return;
	a->khash[id] = khash;
	uint32_t g = ghost_find(a, khash);
	if (g != KVT_IDL_NIL && a->gwhere[g] == ARC_B1) {
		/* Evicted from T1 too early: grow T1's target. */
		uint32_t d = a->b1.len >= a->b2.len ? 1 : a->b2.len / a->b1.len;
		a->p = a->cap - a->p > d ? a->p + d : a->cap;
		ghost_drop(a, g);
		a->where[id] = ARC_T2;
		kvt__okl_push_head(&a->oks, 1, &a->t2, a->links, id);
		return;
	}
	if (g != KVT_IDL_NIL) {
		/* Evicted from T2 too early: shrink T1's target. */
		uint32_t d = a->b2.len >= a->b1.len ? 1 : a->b1.len / a->b2.len;
		a->p = a->p > d ? a->p - d : 0;
		ghost_drop(a, g);
		a->where[id] = ARC_T2;
		kvt__okl_push_head(&a->oks, 1, &a->t2, a->links, id);
		return;
	}
	a->where[id] = ARC_T1;
	kvt__okl_push_head(&a->oks, 0, &a->t1, a->links, id);
	while (a->t1.len + a->b1.len > a->cap && a->b1.len)
		ghost_drop(a, a->b1.tail);
}

static void arc_touch(void *st, uint32_t id)
{
	struct arc *a = st;
	if (id >= a->cap)
		return;
	if (a->where[id] == ARC_T1) {
		kvt__okl_unlink(&a->oks, &a->t1, a->links, id);
		a->where[id] = ARC_T2;
		kvt__okl_push_head(&a->oks, 1, &a->t2, a->links, id);
	} else if (a->where[id] == ARC_T2) {
		kvt__okl_to_head(&a->oks, 1, &a->t2, a->links, id);
	}
}

static void arc_remove(void *st, uint32_t id)
{
	struct arc *a = st;
	if (id >= a->cap || a->where[id] == ARC_NONE)
		return;
	kvt__okl_unlink(&a->oks, a->where[id] == ARC_T1 ? &a->t1 : &a->t2, a->links, id);
	a->where[id] = ARC_NONE;
}

/* REPLACE's choice: T1 when it is over its target. */
static bool arc_prefers_t1(const struct arc *a)
{
	return a->t1.len > 0 && a->t1.len > a->p;
}

/* The victim id (KVT_IDL_NIL: none) leaves list from for its ghost list. */
static int arc_evict(struct arc *a, struct kvt_idlist *from, uint32_t id)
{
	if (id == KVT_IDL_NIL)
		return -ENOENT;
	kvt__okl_unlink(&a->oks, from, a->links, id);
	a->where[id] = ARC_NONE;
	ghost_add(a, from == &a->t1 ? ARC_B1 : ARC_B2, a->khash[id]);
	return (int)id;
}

static int arc_victim(void *st, kvt_evict_ok_fn ok, void *arg)
{
	struct arc *a = st;
	bool t1_first = arc_prefers_t1(a);
	struct kvt_idlist *first = t1_first ? &a->t1 : &a->t2;
	struct kvt_idlist *second = t1_first ? &a->t2 : &a->t1;
	struct kvt_idlist *from = first;
	uint32_t id = kvt__idl_find_from_tail(first, a->links, ok, arg);
	if (id == KVT_IDL_NIL) {
		from = second;
		id = kvt__idl_find_from_tail(second, a->links, ok, arg);
	}
	return arc_evict(a, from, id);
}

static void arc_mark(void *st, uint32_t id, bool ok)
{
	struct arc *a = st;
	kvt__okset_mark(&a->oks, id, ok);
}

static int arc_victim_marked(void *st)
{
	struct arc *a = st;
	bool t1_first = arc_prefers_t1(a);
	struct kvt_idlist *from = t1_first ? &a->t1 : &a->t2;
	uint32_t id = kvt__okset_first(&a->oks, t1_first ? 0 : 1);
	if (id == KVT_IDL_NIL) {
		from = t1_first ? &a->t2 : &a->t1;
		id = kvt__okset_first(&a->oks, t1_first ? 1 : 0);
	}
	return arc_evict(a, from, id);
}

static uint32_t arc_peek(void *st, uint32_t *ids, uint32_t n)
{
	struct arc *a = st;
	bool t1_first = arc_prefers_t1(a);
	uint32_t k = kvt__idl_copy_from_tail(t1_first ? &a->t1 : &a->t2, a->links, ids, n);
	return k + kvt__idl_copy_from_tail(t1_first ? &a->t2 : &a->t1, a->links, ids + k, n - k);
}

static uint32_t arc_resident(const void *st)
{
	const struct arc *a = st;
	return a->t1.len + a->t2.len;
}

const struct kvt_evict_ops kvt__evict_arc_ops = {
    .name = "arc",
    .create = arc_create,
    .destroy = arc_destroy,
    .insert = arc_insert,
    .touch = arc_touch,
    .remove = arc_remove,
    .victim = arc_victim,
    .mark = arc_mark,
    .victim_marked = arc_victim_marked,
    .peek = arc_peek,
    .resident = arc_resident,
};

/* ---------------------------------------------------------- the table */

static const struct kvt_evict_ops *const policies[] = {
    &kvt__evict_lru_ops,
    &kvt__evict_arc_ops,
    &kvt__evict_pslru_ops,
    &kvt__evict_hd_ops,
    &kvt__evict_hda_ops,
    &kvt__evict_lru2_ops,
};

struct kvt_evict {
	const struct kvt_evict_ops *ops;
	void *state;
};

int kvt__evict_create(const char *policy, uint32_t capacity, struct kvt_evict **out)
{
	if (!policy || !out || capacity == 0 || capacity > (uint32_t)INT32_MAX)
		return -EINVAL;
	const struct kvt_evict_ops *ops = NULL;
	for (size_t i = 0; i < KVT_ARRAY_SIZE(policies); i++)
		if (strcmp(policies[i]->name, policy) == 0)
			ops = policies[i];
	if (!ops)
		return -EINVAL;
	struct kvt_evict *e = kvt__malloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->ops = ops;
	int rc = ops->create(capacity, &e->state);
	if (rc < 0) {
		kvt__free(e);
		return rc;
	}
	*out = e;
	return 0;
}

void kvt__evict_destroy(struct kvt_evict *e)
{
	if (!e)
		return;
	e->ops->destroy(e->state);
	kvt__free(e);
}

const char *kvt__evict_name(const struct kvt_evict *e)
{
	return e->ops->name;
}

void kvt__evict_insert(struct kvt_evict *e, uint32_t id, uint64_t khash)
{
	e->ops->insert(e->state, id, khash);
}

void kvt__evict_touch(struct kvt_evict *e, uint32_t id)
{
	e->ops->touch(e->state, id);
}

void kvt__evict_refresh(struct kvt_evict *e, uint32_t id)
{
	if (e->ops->refresh)
		e->ops->refresh(e->state, id);
	else
		e->ops->touch(e->state, id);
}

void kvt__evict_remove(struct kvt_evict *e, uint32_t id)
{
	e->ops->remove(e->state, id);
}

void kvt__evict_expire(struct kvt_evict *e, uint32_t id)
{
	if (e->ops->expire)
		e->ops->expire(e->state, id);
	else
		e->ops->remove(e->state, id);
}

int kvt__evict_victim(struct kvt_evict *e, kvt_evict_ok_fn ok, void *arg)
{
	return e->ops->victim(e->state, ok, arg);
}

void kvt__evict_mark(struct kvt_evict *e, uint32_t id, bool ok)
{
	e->ops->mark(e->state, id, ok);
}

int kvt__evict_victim_marked(struct kvt_evict *e)
{
	return e->ops->victim_marked(e->state);
}

uint32_t kvt__evict_peek(struct kvt_evict *e, uint32_t *ids, uint32_t n)
{
	return e->ops->peek(e->state, ids, n);
}

uint32_t kvt__evict_resident(const struct kvt_evict *e)
{
	return e->ops->resident(e->state);
}
