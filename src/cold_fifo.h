/*
 * cold_fifo.h - the FIFO behind dram.partial_first, shared by the store's DRAM pool
 * (src/dram.c) and the replay's DRAM model (src/sim.c) so that both run one rule: entries
 * (64-bit, the owner's: a slot and its generation, or a block id) in the order they were
 * put; the owner says of each whether it is stale (hit or gone since), may not go yet
 * (pinned, dirty, with children) or may go. Allocated whole at init, like the pool.
 */
#ifndef KVT_COLD_FIFO_H
#define KVT_COLD_FIFO_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "internal.h"

enum kvt_cold_state { KVT_COLD_STALE, KVT_COLD_WAIT, KVT_COLD_GO };
typedef enum kvt_cold_state (*kvt_cold_state_fn)(void *arg, uint64_t e);

/* At most this many entries looked at per take: stale ones dropped, waiting ones moved
 * to the tail, so a take stays O(1) however many are waiting. */
#define KVT_COLD_LOOK 16u

struct kvt_cold_fifo {
	uint64_t *e;
	uint32_t cap, head, n;
};

static inline int kvt__cold_init(struct kvt_cold_fifo *q, uint32_t cap)
{
	q->cap = cap ? cap : 1;
	q->head = q->n = 0;
	q->e = kvt__malloc((size_t)q->cap * sizeof(*q->e));
	return q->e ? 0 : -ENOMEM;
}

static inline void kvt__cold_free(struct kvt_cold_fifo *q)
{
	kvt__free(q->e);
	q->e = NULL;
}

/* The oldest entry state() lets go, taken off the FIFO, in *out: true; false if none of
 * the KVT_COLD_LOOK looked at may. */
static inline bool kvt__cold_take(struct kvt_cold_fifo *q, kvt_cold_state_fn state, void *arg,
				  uint64_t *out)
{
	for (uint32_t k = q->n < KVT_COLD_LOOK ? q->n : KVT_COLD_LOOK; k; k--) {
		uint64_t e = q->e[q->head];
		q->head = (q->head + 1) % q->cap;
		q->n--;
		enum kvt_cold_state s = state(arg, e);
		if (s == KVT_COLD_GO) {
			*out = e;
			return true;
		}
		if (s == KVT_COLD_WAIT)
			q->e[(q->head + q->n++) % q->cap] = e;
	}
	return false;
}

/* Append e. A full FIFO is compacted first, in order: each cold slot or block has one live
 * entry and the one being put has none, so a full FIFO holds a stale entry - dropping the
 * oldest instead could drop a live one. O(cap), and only after as many puts as it had
 * stale entries. */
static inline void kvt__cold_put(struct kvt_cold_fifo *q, uint64_t e, kvt_cold_state_fn state,
				 void *arg)
{
	if (q->n == q->cap) {
		uint32_t n = 0;
		for (uint32_t k = 0; k < q->n; k++) {
			uint64_t x = q->e[(q->head + k) % q->cap];
			if (state(arg, x) != KVT_COLD_STALE)
				q->e[(q->head + n++) % q->cap] = x;
		}
		q->n = n;
		if (n == q->cap) /* (not reached, by the count above) */
			return;
	}
	q->e[(q->head + q->n++) % q->cap] = e;
}

#endif
