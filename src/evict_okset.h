/*
 * evict_okset.h - the ids an owner allows as victims, kept in each policy list's order, so
 * that the first allowed id from a list's LRU end is found without walking past refused
 * ones. A policy's kvt_evict_ok_fn scan (kvt__idl_find_from_tail) costs one call per
 * refused id nearer the tail; in a full DRAM pool of long prefix chains almost every id is
 * refused (it has a resident child), so each eviction walked most of the pool.
 *
 * The owner marks ids (kvt__evict_mark: the same answer its ok() would give, updated when
 * it changes) and asks kvt__evict_victim_marked; the policy tells its okset when it pushes
 * an id at the MRU end of one of its lists and when it unlinks one. Every list a policy
 * keeps only ever grows at its MRU end, so its order is the order of those pushes: each
 * push takes a stamp from a clock, and a list's allowed members are its allowed ids in
 * stamp order. They are kept in two places:
 *   sorted  an intrusive list in stamp order. An id allowed when pushed is the newest and
 *           joins at the head; one allowed later (unpinned, cleaned, its last child gone)
 *           joins at either end when it is older or newer than all, or where a few steps
 *           from either end find its place;
 *   heap    otherwise: a binary min-heap by stamp, per list.
 * The first allowed id from the LRU end is the older of the sorted tail and the heap top.
 * Push, unlink and marks are O(1) for sorted members, O(log n) for heap members.
 *
 * A family is a set of lists over one id space where an id is in at most one of them (a
 * policy with overlapping lists, hd's LRU list and its probation list, keeps one family
 * per list). Allocated whole at init, like the policies.
 */
#ifndef KVT_EVICT_OKSET_H
#define KVT_EVICT_OKSET_H

#include <stdbool.h>
#include <stdint.h>

#include "evict_policy.h"

struct kvt_okset_list {
	struct kvt_idlist sorted;
	uint32_t *heap;
	uint32_t hn;
};

struct kvt_okset {
	uint32_t cap, nlists;
	uint64_t clock;
	uint64_t *stamp;	  /* per id: when it was last pushed at its list's MRU end */
	uint8_t *ok;		  /* per id: the owner's mark */
	uint8_t *list;		  /* per id: 1 + the list holding it, 0 none */
	uint8_t *where;		  /* per id: OKS_NONE, OKS_SORTED or OKS_HEAP */
	struct kvt_idlink *links; /* sorted lists */
	uint32_t *hpos;		  /* position in its list's heap */
	struct kvt_okset_list *l;
};

enum { KVT_OKS_NONE = 0, KVT_OKS_SORTED, KVT_OKS_HEAP };

/* 0 or -ENOMEM; fini frees what init allocated (also after a failed init). */
int kvt__okset_init(struct kvt_okset *s, uint32_t cap, uint32_t nlists);
void kvt__okset_fini(struct kvt_okset *s);
/* The allowed member of list l nearest its LRU end, or KVT_IDL_NIL. */
uint32_t kvt__okset_first(const struct kvt_okset *s, uint32_t l);
/* Slow paths of the three below: an allowed member of a list that was not allowed when
 * pushed joins / one leaves. */
void kvt__okset_track(struct kvt_okset *s, uint32_t id);
void kvt__okset_untrack(struct kvt_okset *s, uint32_t id);

/* id was just pushed at the MRU end of list l. */
static inline void kvt__okset_pushed(struct kvt_okset *s, uint32_t l, uint32_t id)
{
	s->stamp[id] = ++s->clock;
	s->list[id] = (uint8_t)(l + 1);
	if (s->ok[id]) {
		s->where[id] = KVT_OKS_SORTED;
		kvt__idl_push_head(&s->l[l].sorted, s->links, id);
	}
}

/* id just left its list. */
static inline void kvt__okset_unlinked(struct kvt_okset *s, uint32_t id)
{
	if (s->where[id] == KVT_OKS_SORTED) {
		kvt__idl_unlink(&s->l[s->list[id] - 1].sorted, s->links, id);
		s->where[id] = KVT_OKS_NONE;
	} else if (s->where[id] != KVT_OKS_NONE) {
		kvt__okset_untrack(s, id);
	}
	s->list[id] = 0;
}

/* The owner's mark for id, resident or not. */
static inline void kvt__okset_mark(struct kvt_okset *s, uint32_t id, bool ok)
{
	if (id >= s->cap || (s->ok[id] != 0) == ok)
		return;
	s->ok[id] = ok;
	if (!s->list[id])
		return;
	if (ok)
		kvt__okset_track(s, id);
	else
		kvt__okset_untrack(s, id);
}

static inline bool kvt__okset_ok(const struct kvt_okset *s, uint32_t id)
{
	return s->ok[id] != 0;
}

static inline uint64_t kvt__okset_stamp(const struct kvt_okset *s, uint32_t id)
{
	return s->stamp[id];
}

/* The list operations of src/evict_policy.h with the okset told. */
static inline void kvt__okl_push_head(struct kvt_okset *s, uint32_t l, struct kvt_idlist *il,
				      struct kvt_idlink *lk, uint32_t id)
{
	kvt__idl_push_head(il, lk, id);
	kvt__okset_pushed(s, l, id);
}

static inline void kvt__okl_unlink(struct kvt_okset *s, struct kvt_idlist *il,
				   struct kvt_idlink *lk, uint32_t id)
{
	kvt__idl_unlink(il, lk, id);
	kvt__okset_unlinked(s, id);
}

/* A use: the head stays where it is (its stamp is already its list's newest). */
static inline void kvt__okl_to_head(struct kvt_okset *s, uint32_t l, struct kvt_idlist *il,
				    struct kvt_idlink *lk, uint32_t id)
{
	if (il->head == id)
		return;
	kvt__okl_unlink(s, il, lk, id);
	kvt__okl_push_head(s, l, il, lk, id);
}

#endif
