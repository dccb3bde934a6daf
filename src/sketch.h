/*
 * sketch.h - admission: a count-min frequency sketch with periodic halving (TinyLFU), an
 * optional doorkeeper (src/ghost.h's filter, sized for a period of first sightings), and
 * the decision whether a chunk is worth writing to a deeper tier (frequency, minimum
 * prefix length, a reuse prediction from the chunk chain, write budget, cost model). Pure
 * logic; not thread-safe (the owner locks).
 */
#ifndef KVT_SKETCH_H
#define KVT_SKETCH_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"

struct kvt_sketch;

/* width: counters per row (rounded up to a power of two, at least 64); max_count: where a
 * counter saturates (1..255; TinyLFU uses 15); after 10 * width additions every counter is
 * halved, so old popularity fades; the doorkeeper remembers a key seen once for between
 * 5 and 10 x width additions (20 B per counter column). -EINVAL, -ENOMEM. */
int kvt__sketch_create(uint64_t width, uint32_t max_count, bool doorkeeper,
		       struct kvt_sketch **out);
void kvt__sketch_destroy(struct kvt_sketch *s);
/* Record one access of h; returns the estimate after it. */
uint32_t kvt__sketch_add(struct kvt_sketch *s, uint64_t h);
/* The same without the estimate (a hot path that only counts). */
void kvt__sketch_record(struct kvt_sketch *s, uint64_t h);
/* n accesses of h at once (n = 0: nothing). */
void kvt__sketch_record_n(struct kvt_sketch *s, uint64_t h, uint32_t n);
/* Estimated accesses of h since it was last forgotten: never below the true count (up to
 * max_count) unless halving happened in between. */
uint32_t kvt__sketch_estimate(const struct kvt_sketch *s, uint64_t h);
/* Halve every counter now (done automatically every 10 * width additions). */
void kvt__sketch_halve(struct kvt_sketch *s);
uint64_t kvt__sketch_width(const struct kvt_sketch *s);
uint64_t kvt__sketch_halvings(const struct kvt_sketch *s);

/* ---- admission to a deeper tier */

struct kvt_cost;

enum kvt_admit_verdict {
	KVT_ADMIT_YES = 0,
	KVT_ADMIT_COLD = 1,	 /* frequency estimate below min_freq */
	KVT_ADMIT_SHORT = 2,	 /* the chunk ends before min_prefix_tokens */
	KVT_ADMIT_RECOMPUTE = 3, /* restoring it from the tier is slower than recomputing it */
	KVT_ADMIT_BUDGET = 4,	 /* the write budget refuses the bytes */
	KVT_ADMIT_UNPREDICTED = 5, /* predict=chain: neither reused nor continuing a reused chain */
};

/* What predicts that a chunk written deeper will be read again (admission.predict). */
enum kvt_admit_predict {
	KVT_PREDICT_OFF = 0, /* min_freq alone */
	/* a chunk is written if it was seen before (a second sighting), or if it continues a
	 * chain that is being reused: its parent was seen before and this is its only full
	 * child (the end of an earlier prompt being extended: a conversation that came
	 * back; a shared system prompt has a child per conversation), or its parent was
	 * written by this rule (the rest of that request's new chunks), or it is a new
	 * chain's full chunk while new chains are measured to be read again at least half
	 * the time. A partial chunk seen once (a prompt's end, which the next turn
	 * replaces) is never written. docs/COST_MODEL.md has the measurements. */
	KVT_PREDICT_CHAIN = 1,
};

/* May bytes be written now? (an NVMe endurance budget, a rate limit). It should account
 * the bytes when it says yes. */
typedef bool (*kvt_budget_fn)(void *arg, uint64_t bytes);

struct kvt_admit_cfg {
	uint32_t min_freq;	    /* 1: no frequency filter */
	uint64_t min_prefix_tokens; /* 0: none */
	uint64_t sketch_width;	    /* counters per row (see kvt__sketch_create) */
	bool doorkeeper;
	const struct kvt_cost *cost; /* NULL: no cost check */
	int cost_tier;		     /* the tier's index in the cost model */
	kvt_budget_fn budget;	     /* NULL: unlimited */
	void *budget_arg;
	int predict;	       /* enum kvt_admit_predict */
	uint32_t chunk_tokens; /* predict=chain: a full chunk's tokens (0: every chunk is) */
};

struct kvt_admit;

int kvt__admit_create(const struct kvt_admit_cfg *cfg, struct kvt_admit **out);
void kvt__admit_destroy(struct kvt_admit *a);
/* Count an access of a chunk (every lookup hit or put sees it once). */
void kvt__admit_record(struct kvt_admit *a, uint64_t khash);
/* Should the chunk with tokens [begin, begin + n_tokens) of its prompt, bytes long, be
 * written to the tier? parent: its parent chunk's key hash, 0 for a chain's first chunk
 * (predict=chain uses it). Call it once per put of a chunk, after kvt__admit_record()
 * of the chunk and of its parent (it counts the parent's children on a first sighting).
 * The checks run cheapest first; the budget is asked last, so it is only charged for
 * writes that happen. Returns an enum kvt_admit_verdict. */
int kvt__admit_decide(struct kvt_admit *a, uint64_t khash, uint64_t parent, uint64_t begin,
		      uint32_t n_tokens, uint64_t bytes);
/* "off" / "chain" -> enum kvt_admit_predict; -EINVAL otherwise. */
int kvt__admit_predict_parse(const char *name);
const char *kvt__admit_verdict_name(int verdict);
/* Can a later access change this verdict? COLD, UNPREDICTED and BUDGET depend on what was
 * seen and when; SHORT and RECOMPUTE on the chunk's position only. The store re-offers a
 * DRAM slot declined for a reason that can change on the slot's next hit (a second
 * sighting that hits DRAM is what min_freq = 2 waits for); the replay does the same. */
static inline bool kvt__admit_reoffer(int verdict)
{
	return verdict == KVT_ADMIT_COLD || verdict == KVT_ADMIT_UNPREDICTED ||
	       verdict == KVT_ADMIT_BUDGET;
}
struct kvt_sketch *kvt__admit_sketch(struct kvt_admit *a);

#endif
