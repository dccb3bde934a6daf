/*
 * evict_shim.h - test-only stand-in for src/evict.c while that file is being written in
 * another branch: a plain LRU under the name "lru" and the "pslru" policy through its own
 * functions, behind the src/evict.h interface. It compiles to nothing as soon as
 * src/evict.c exists, so the tests then run against the real policy table (which must list
 * "pslru").
 */
#ifndef KVT_EVICT_SHIM_H
#define KVT_EVICT_SHIM_H

#if !__has_include("evict.c")
#include <errno.h>
#include <string.h>

#include "evict.h"
#include "evict_pslru.h"
#include "internal.h"

struct kvt_evict {
	void *ps; /* pslru state, or NULL for the LRU below */
	uint32_t cap, n;
	uint32_t *prev, *next; /* sentinel at cap */
	uint8_t *in;
};

void kvt__evict_destroy(struct kvt_evict *e)
{
	if (!e)
		return;
	kvt__pslru_destroy(e->ps);
	kvt__free(e->prev);
	kvt__free(e->next);
	kvt__free(e->in);
	kvt__free(e);
}

int kvt__evict_create(const char *policy, uint32_t capacity, struct kvt_evict **out)
{
	if (!capacity)
		return -EINVAL;
	struct kvt_evict *e = kvt__calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	if (!strcmp(policy, "pslru")) {
		int rc = kvt__pslru_create(capacity, &e->ps);
		if (rc) {
			kvt__free(e);
			return rc;
		}
	} else if (!strcmp(policy, "lru")) {
		e->cap = capacity;
		e->prev = kvt__malloc((capacity + 1) * sizeof(uint32_t));
		e->next = kvt__malloc((capacity + 1) * sizeof(uint32_t));
		e->in = kvt__calloc(capacity, 1);
		if (!e->prev || !e->next || !e->in) {
			kvt__evict_destroy(e);
			return -ENOMEM;
		}
		e->prev[capacity] = e->next[capacity] = capacity;
	} else {
		kvt__free(e);
		return -EINVAL;
	}
	*out = e;
	return 0;
}

const char *kvt__evict_name(const struct kvt_evict *e)
{
	return e->ps ? "pslru" : "lru";
}

static void shim_unlink(struct kvt_evict *e, uint32_t id)
{
	e->next[e->prev[id]] = e->next[id];
	e->prev[e->next[id]] = e->prev[id];
}

static void shim_mru(struct kvt_evict *e, uint32_t id)
{
	e->prev[id] = e->prev[e->cap];
	e->next[id] = e->cap;
	e->next[e->prev[e->cap]] = id;
	e->prev[e->cap] = id;
}

void kvt__evict_insert(struct kvt_evict *e, uint32_t id, uint64_t khash)
{
	if (e->ps) {
		kvt__pslru_insert(e->ps, id, khash);
		return;
	}
	e->in[id] = 1;
	e->n++;
	shim_mru(e, id);
}

void kvt__evict_touch(struct kvt_evict *e, uint32_t id)
{
	if (e->ps) {
		kvt__pslru_touch(e->ps, id);
		return;
	}
	shim_unlink(e, id);
	shim_mru(e, id);
}

void kvt__evict_remove(struct kvt_evict *e, uint32_t id)
{
	if (e->ps) {
		kvt__pslru_remove(e->ps, id);
		return;
	}
	if (e->in[id]) {
		shim_unlink(e, id);
		e->in[id] = 0;
		e->n--;
	}
}

int kvt__evict_victim(struct kvt_evict *e, kvt_evict_ok_fn ok, void *arg)
{
	if (e->ps)
		return kvt__pslru_victim(e->ps, ok, arg);
	for (uint32_t id = e->next[e->cap]; id != e->cap; id = e->next[id])
		if (ok(arg, id)) {
			kvt__evict_remove(e, id);
			return (int)id;
		}
	return -ENOENT;
}

uint32_t kvt__evict_peek(struct kvt_evict *e, uint32_t *ids, uint32_t n)
{
	if (e->ps)
		return kvt__pslru_peek(e->ps, ids, n);
	uint32_t k = 0;
	for (uint32_t id = e->next[e->cap]; id != e->cap && k < n; id = e->next[id])
		ids[k++] = id;
	return k;
}

uint32_t kvt__evict_resident(const struct kvt_evict *e)
{
	return e->ps ? kvt__pslru_resident(e->ps) : e->n;
}
#endif

#endif
