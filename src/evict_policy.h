/*
 * evict_policy.h - what a policy file provides to src/evict.c: one ops row (the table in
 * evict.c is keyed by name), plus the intrusive id list every recency-based policy needs.
 * A new policy lives in src/evict_<name>.c, defines `const struct kvt_evict_ops
 * kvt__evict_<name>_ops`, declares it below and adds one row to the table in evict.c.
 *
 * Policy state is allocated whole at create: nothing allocates afterwards, so the DRAM
 * tier can call a policy under its mutex on the hot path.
 */
#ifndef KVT_EVICT_POLICY_H
#define KVT_EVICT_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "evict.h"

struct kvt_evict_ops {
	const char *name;
	/* capacity >= 1. 0 or -ENOMEM; *state is then owned by the policy. */
	int (*create)(uint32_t capacity, void **state);
	void (*destroy)(void *state);
	void (*insert)(void *state, uint32_t id, uint64_t khash);
	void (*touch)(void *state, uint32_t id);
	/* Optional (NULL: touch): id is about to be used (a lookup found it; the get that
	 * follows is the use): keep it from going first without counting a hit - hd counts
	 * each touch as a hit at its age, and a store's lookup, prefetch and get of one chunk
	 * made three (the replay, one) */
	void (*refresh)(void *state, uint32_t id);
	void (*remove)(void *state, uint32_t id);
	/* Optional (NULL: remove): id leaves before its turn as a victim would, counted in
	 * the policy's statistics (hd's evictions by age) but remembered nowhere (no ghost):
	 * the owner's "goes first" rule (dram.partial_first) */
	void (*expire)(void *state, uint32_t id);
	int (*victim)(void *state, kvt_evict_ok_fn ok, void *arg);
	/* src/evict.h's kvt__evict_mark and kvt__evict_victim_marked: the victim ok() would
	 * give if it answered with the marks, without a walk past refused ids (a policy
	 * keeps its marked ids in list order with src/evict_okset.h) */
	void (*mark)(void *state, uint32_t id, bool ok);
	int (*victim_marked)(void *state);
	uint32_t (*peek)(void *state, uint32_t *ids, uint32_t n);
	uint32_t (*resident)(const void *state);
};

extern const struct kvt_evict_ops kvt__evict_lru_ops;
extern const struct kvt_evict_ops kvt__evict_arc_ops;
extern const struct kvt_evict_ops kvt__evict_pslru_ops;
extern const struct kvt_evict_ops kvt__evict_hd_ops;
extern const struct kvt_evict_ops kvt__evict_hda_ops;
extern const struct kvt_evict_ops kvt__evict_lru2_ops;

/* ---- an intrusive doubly linked list over ids: links live in a caller array ---- */

#define KVT_IDL_NIL UINT32_MAX

struct kvt_idlink {
	uint32_t prev, next; /* prev: towards the head (MRU), next: towards the tail (LRU) */
};

struct kvt_idlist {
	uint32_t head, tail, len;
};

static inline void kvt__idl_init(struct kvt_idlist *l)
{
	l->head = l->tail = KVT_IDL_NIL;
	l->len = 0;
}

static inline void kvt__idl_push_head(struct kvt_idlist *l, struct kvt_idlink *lk, uint32_t id)
{
	lk[id].prev = KVT_IDL_NIL;
	lk[id].next = l->head;
	if (l->head != KVT_IDL_NIL)
		lk[l->head].prev = id;
	else
		l->tail = id;
	l->head = id;
	l->len++;
}

static inline void kvt__idl_unlink(struct kvt_idlist *l, struct kvt_idlink *lk, uint32_t id)
{
	uint32_t p = lk[id].prev, n = lk[id].next;
	if (p != KVT_IDL_NIL)
		lk[p].next = n;
	else
		l->head = n;
	if (n != KVT_IDL_NIL)
		lk[n].prev = p;
	else
		l->tail = p;
	lk[id].prev = lk[id].next = KVT_IDL_NIL;
	l->len--;
}

/* Link id in just towards the head from member at (at becomes its next). */
static inline void kvt__idl_insert_before(struct kvt_idlist *l, struct kvt_idlink *lk, uint32_t at,
					  uint32_t id)
{
	uint32_t p = lk[at].prev;
	lk[id].prev = p;
	lk[id].next = at;
	lk[at].prev = id;
	if (p != KVT_IDL_NIL)
		lk[p].next = id;
	else
		l->head = id;
	l->len++;
}

/* Link id in just towards the tail from member at (at becomes its prev). */
static inline void kvt__idl_insert_after(struct kvt_idlist *l, struct kvt_idlink *lk, uint32_t at,
					 uint32_t id)
{
	uint32_t n = lk[at].next;
	lk[id].next = n;
	lk[id].prev = at;
	lk[at].next = id;
	if (n != KVT_IDL_NIL)
		lk[n].prev = id;
	else
		l->tail = id;
	l->len++;
}

/* Move a member to the head (a use). */
static inline void kvt__idl_to_head(struct kvt_idlist *l, struct kvt_idlink *lk, uint32_t id)
{
	if (l->head == id)
		return;
	kvt__idl_unlink(l, lk, id);
	kvt__idl_push_head(l, lk, id);
}

/* The member nearest the tail for which ok() holds, or KVT_IDL_NIL. */
static inline uint32_t kvt__idl_find_from_tail(const struct kvt_idlist *l,
					       const struct kvt_idlink *lk, kvt_evict_ok_fn ok,
					       void *arg)
{
	for (uint32_t id = l->tail; id != KVT_IDL_NIL; id = lk[id].prev)
		if (!ok || ok(arg, id))
			return id;
	return KVT_IDL_NIL;
}

/* Copy up to n members, tail first; returns the count. */
static inline uint32_t kvt__idl_copy_from_tail(const struct kvt_idlist *l,
					       const struct kvt_idlink *lk, uint32_t *ids,
					       uint32_t n)
{
	uint32_t k = 0;
	for (uint32_t id = l->tail; id != KVT_IDL_NIL && k < n; id = lk[id].prev)
		ids[k++] = id;
	return k;
}

#endif
