/*
 * list.h - one intrusive doubly-linked list (after the Linux kernel's list_head), so the
 * engine's queues and lists (completions, deferred work, write-behind jobs, flushes) share
 * one tested set of splices instead of each hand-writing head/tail/prev/next updates.
 * A list is a struct kvt_list head, initialised empty; an element embeds a struct
 * kvt_list and is found back with kvt_list_entry. No locking: callers hold theirs.
 */
#ifndef KVT_LIST_H
#define KVT_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct kvt_list {
	struct kvt_list *prev, *next;
};

#define KVT_LIST_INIT(name) {&(name), &(name)}
#define kvt_list_entry(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

static inline void kvt_list_init(struct kvt_list *h)
{
	h->prev = h->next = h;
}

static inline bool kvt_list_empty(const struct kvt_list *h)
{
	return h->next == h;
}

static inline void kvt_list__insert(struct kvt_list *n, struct kvt_list *prev,
				    struct kvt_list *next)
{
	n->prev = prev;
	n->next = next;
	prev->next = n;
	next->prev = n;
}

/* Append n at the tail (a queue) / push it at the head (a stack). */
static inline void kvt_list_add_tail(struct kvt_list *h, struct kvt_list *n)
{
	kvt_list__insert(n, h->prev, h);
}

static inline void kvt_list_add_head(struct kvt_list *h, struct kvt_list *n)
{
	kvt_list__insert(n, h, h->next);
}

/* Unlink n from whatever list holds it; n is left self-linked (empty). */
static inline void kvt_list_del(struct kvt_list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	kvt_list_init(n);
}

/* The first element, or NULL when empty. */
static inline struct kvt_list *kvt_list_first(const struct kvt_list *h)
{
	return kvt_list_empty(h) ? NULL : h->next;
}

/* Unlink and return the first element, or NULL when empty. */
static inline struct kvt_list *kvt_list_pop(struct kvt_list *h)
{
	struct kvt_list *n = kvt_list_first(h);
	if (n)
		kvt_list_del(n);
	return n;
}

/* Move every element of from to the tail of h; from is left empty. */
static inline void kvt_list_splice_tail(struct kvt_list *h, struct kvt_list *from)
{
	if (kvt_list_empty(from))
		return;
	struct kvt_list *first = from->next, *last = from->prev;
	first->prev = h->prev;
	h->prev->next = first;
	last->next = h;
	h->prev = last;
	kvt_list_init(from);
}

/* Iterate; the _safe form allows deleting pos inside the loop. */
#define kvt_list_for_each(pos, h) for ((pos) = (h)->next; (pos) != (h); (pos) = (pos)->next)
#define kvt_list_for_each_safe(pos, tmp, h)                                                   \
	for ((pos) = (h)->next, (tmp) = (pos)->next; (pos) != (h); (pos) = (tmp), (tmp) = (pos)->next)

#endif
