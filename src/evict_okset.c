/*
 * evict_okset.c - allowed victims in policy order (src/evict_okset.h says why and how).
 */
#include <errno.h>
#include <string.h>

#include "evict_okset.h"
#include "internal.h"

enum { OKS_NONE = KVT_OKS_NONE, OKS_SORTED = KVT_OKS_SORTED, OKS_HEAP = KVT_OKS_HEAP };

/* Steps from either end of a sorted list to look for a late id's place before it goes to
 * the heap: enough for the usual cases (an id unpinned just after another one's use, the
 * write-back cleaning the coldest few in order), small enough to stay O(1). */
#define PLACE_STEPS 8

int kvt__okset_init(struct kvt_okset *s, uint32_t cap, uint32_t nlists)
{
	memset(s, 0, sizeof(*s));
	s->cap = cap;
	s->nlists = nlists;
	s->stamp = kvt__calloc(cap, sizeof(*s->stamp));
	s->ok = kvt__calloc(cap, 1);
	s->list = kvt__calloc(cap, 1);
	s->where = kvt__calloc(cap, 1);
	s->links = kvt__calloc(cap, sizeof(*s->links));
	s->hpos = kvt__calloc(cap, sizeof(*s->hpos));
	s->l = kvt__calloc(nlists, sizeof(*s->l));
	if (!s->stamp || !s->ok || !s->list || !s->where || !s->links || !s->hpos || !s->l)
		return -ENOMEM;
	for (uint32_t i = 0; i < nlists; i++) {
		kvt__idl_init(&s->l[i].sorted);
		s->l[i].heap = kvt__malloc((size_t)cap * sizeof(uint32_t));
		if (!s->l[i].heap)
			return -ENOMEM;
	}
	return 0;
}

void kvt__okset_fini(struct kvt_okset *s)
{
	if (s->l)
		for (uint32_t i = 0; i < s->nlists; i++)
			kvt__free(s->l[i].heap);
	kvt__free(s->l);
	kvt__free(s->stamp);
	kvt__free(s->ok);
	kvt__free(s->list);
	kvt__free(s->where);
	kvt__free(s->links);
	kvt__free(s->hpos);
	memset(s, 0, sizeof(*s));
}

/* ---- the heap: min by stamp */

static void heap_set(struct kvt_okset *s, struct kvt_okset_list *l, uint32_t i, uint32_t id)
{
	l->heap[i] = id;
	s->hpos[id] = i;
}

static void sift_up(struct kvt_okset *s, struct kvt_okset_list *l, uint32_t i)
{
	uint32_t id = l->heap[i];
	while (i > 0) {
		uint32_t up = (i - 1) / 2;
		if (s->stamp[l->heap[up]] <= s->stamp[id])
			break;
		heap_set(s, l, i, l->heap[up]);
		i = up;
	}
	heap_set(s, l, i, id);
}

static void sift_down(struct kvt_okset *s, struct kvt_okset_list *l, uint32_t i)
{
	uint32_t id = l->heap[i];
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= l->hn)
			break;
		if (c + 1 < l->hn && s->stamp[l->heap[c + 1]] < s->stamp[l->heap[c]])
			c++;
		if (s->stamp[id] <= s->stamp[l->heap[c]])
			break;
		heap_set(s, l, i, l->heap[c]);
		i = c;
	}
	heap_set(s, l, i, id);
}

static void heap_add(struct kvt_okset *s, struct kvt_okset_list *l, uint32_t id)
{
	heap_set(s, l, l->hn++, id);
	sift_up(s, l, l->hn - 1);
}

static void heap_del(struct kvt_okset *s, struct kvt_okset_list *l, uint32_t id)
{
	uint32_t i = s->hpos[id], last = l->heap[--l->hn];
	if (i == l->hn)
		return;
	heap_set(s, l, i, last);
	if (i > 0 && s->stamp[last] < s->stamp[l->heap[(i - 1) / 2]])
		sift_up(s, l, i);
	else
		sift_down(s, l, i);
}

/* ---- the sorted list */

/* Where a member of list l that just became allowed goes. */
void kvt__okset_track(struct kvt_okset *s, uint32_t id)
{
	struct kvt_okset_list *l = &s->l[s->list[id] - 1];
	struct kvt_idlist *sl = &l->sorted;
	uint64_t st = s->stamp[id];
	s->where[id] = OKS_SORTED;
	if (sl->head == KVT_IDL_NIL || st > s->stamp[sl->head]) {
		kvt__idl_push_head(sl, s->links, id);
		return;
	}
	/* older than the head: from the tail, the first member newer than id */
	uint32_t at = sl->tail;
	for (int k = 0; k < PLACE_STEPS && at != KVT_IDL_NIL; k++, at = s->links[at].prev) {
		if (s->stamp[at] > st) {
			kvt__idl_insert_after(sl, s->links, at, id);
			return;
		}
	}
	/* from the head, the first member older than id */
	at = s->links[sl->head].next;
	for (int k = 0; k < PLACE_STEPS && at != KVT_IDL_NIL; k++, at = s->links[at].next) {
		if (s->stamp[at] < st) {
			kvt__idl_insert_before(sl, s->links, at, id);
			return;
		}
	}
	s->where[id] = OKS_HEAP;
	heap_add(s, l, id);
}

void kvt__okset_untrack(struct kvt_okset *s, uint32_t id)
{
	struct kvt_okset_list *l = &s->l[s->list[id] - 1];
	if (s->where[id] == OKS_SORTED)
		kvt__idl_unlink(&l->sorted, s->links, id);
	else if (s->where[id] == OKS_HEAP)
		heap_del(s, l, id);
	s->where[id] = OKS_NONE;
}

uint32_t kvt__okset_first(const struct kvt_okset *s, uint32_t l)
{
	const struct kvt_okset_list *ol = &s->l[l];
	uint32_t a = ol->sorted.tail, b = ol->hn ? ol->heap[0] : KVT_IDL_NIL;
	if (a == KVT_IDL_NIL)
		return b;
	if (b == KVT_IDL_NIL)
		return a;
	return s->stamp[a] < s->stamp[b] ? a : b;
}
