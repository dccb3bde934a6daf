/*
 * sim.c - replay a trace against block metadata only (src/sim.h). Moving no bytes makes a
 * 12,000-request trace take well under a second, so policies, capacities and admission
 * rules can be compared side by side and against the offline optimum.
 *
 * Model, in trace order:
 *   lookup   the hit is the longest run of the request's leading blocks resident in some
 *            tier; each hit block is served by the fastest tier holding it;
 *   plan     with a cost model, the scheduler loads the leading hit blocks that make
 *            restore + recompute least (kvt_cost_plan) and recomputes the rest;
 *   store    then every block of the request is inserted or touched, in order, in DRAM
 *            (a put or a promotion) and in NVMe (written through, if admission agrees);
 *            full tiers evict through their policy (src/evict.h); with leaf_first a block
 *            with a resident child is not evictable (the engine evicts suffixes first, a
 *            suffix being useless without its prefix): its slot is marked, and the policy
 *            finds the victim a walk would without stepping over marked blocks;
 *   queue    N GPUs serve prefills first-come first-served at the trace's arrival times,
 *            each request on the GPU that frees first (N given, or the fewest that keep
 *            the no-cache load at KVT_SIM_AUTO_UTIL: one GPU under a trace that needs two
 *            only measures an unbounded queue; one per request when all arrive at once);
 *            TTFT = queueing + restore + recompute, against the same queue with no cache;
 *            with prefetch, a request's NVMe blocks are staged into DRAM while it waits.
 * The cache state seen by a request includes every earlier arrival, even one still queued
 * (a store that indexes a prompt when it is scheduled behaves that way).
 *
 * Belady (MIN) runs as a separate pass: next-use positions are precomputed backwards, a
 * max-heap with lazy deletion finds the resident block used farthest in the future, and a
 * block whose own next use is farther than all of them is not stored. Block ids that repeat
 * mean the same prefix, so a parent's next use always precedes its child's and MIN keeps
 * prefix-closed sets: its block hits are an upper bound for every policy's prefix hits.
 *
 * All of this rests on blocks being prefixes: a block is its id *and* everything before
 * it, as KV is (a block's KV depends on every earlier token) and as the store's keys are
 * (kvt_key_next chains them; so does the replay's real mode). A trace's ids are meant to
 * be prefix hashes (src/trace.h), so an id always follows the same id; where one does not
 * (an id after two different ids, or twice in one prompt - a trace of content hashes, or a
 * production trace with a collision) each (id, parent) is a block of its own, counted in
 * kvt__sim_check_trace's note. Before 2026-12-03 such a trace was refused; taken as one
 * block, an id under another prefix would count a hit no store serves, and MIN would be
 * no bound (a 4-line trace had LRU at 0.29 over a "bound" of 0.14).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cold_fifo.h"
#include "cost.h"
#include "evict.h"
#include "internal.h"
#include "sim.h"
#include "sketch.h"

#define NONE UINT32_MAX

/* Dense indices for the trace's blocks - an id under one parent - and each block's parent. */
struct blocks {
	uint32_t *idx;	  /* per trace id position: dense block index */
	uint32_t *parent; /* per block: dense parent or NONE */
	uint64_t *id;	  /* per block: trace id */
	uint64_t *khash;  /* per block: the key hash policies and sketches see */
	uint32_t n;
	uint32_t rekeyed; /* blocks whose id was seen before under another parent */
};

static uint64_t hid(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static void blocks_free(struct blocks *b)
{
	kvt__free(b->idx);
	kvt__free(b->parent);
	kvt__free(b->id);
	kvt__free(b->khash);
}

/* An id at request r, position i that follows prev there but parent earlier: say where,
 * on one line. */
static void blocks_conflict(const struct kvt_trace *t, size_t r, uint32_t i, uint64_t id,
			    const uint64_t *prev, const uint64_t *parent, char *err, size_t errlen)
{
	if (!err || !errlen)
		return;
	const struct kvt_trace_req *q = &t->req[r];
	const uint64_t *ids = kvt__trace_blocks(t, q);
	for (uint32_t j = 0; j < i; j++)
		if (ids[j] == id) {
			snprintf(err, errlen,
				 "line %u: hash id %llu appears twice in hash_ids",
				 q->line, (unsigned long long)id);
			return;
		}
	uint32_t first = 0; /* the line that fixed the parent: the id's first request */
	for (size_t k = 0; k < r && !first; k++) {
		const uint64_t *kid = kvt__trace_blocks(t, &t->req[k]);
		for (uint32_t j = 0; j < t->req[k].n_blocks && !first; j++)
			if (kid[j] == id)
				first = t->req[k].line;
	}
	char here[48], before[48];
	if (prev)
		snprintf(here, sizeof(here), "follows %llu", (unsigned long long)*prev);
	else
		snprintf(here, sizeof(here), "starts hash_ids");
	if (parent)
		snprintf(before, sizeof(before), "follows %llu", (unsigned long long)*parent);
	else
		snprintf(before, sizeof(before), "starts hash_ids");
	snprintf(err, errlen,
		 "line %u: hash id %llu %s here but %s on line %u",
		 q->line, (unsigned long long)id, here, before, first);
}

/* Dense indices: one block per (id, parent). An id seen again under another parent
 * (which an id repeated in one request always is) is a block of its own, counted in
 * b->rekeyed, and the first such sight described in note when given. */
static int blocks_build(const struct kvt_trace *t, struct blocks *b, char *note, size_t notelen)
{
	memset(b, 0, sizeof(*b));
	if (note && notelen)
		note[0] = 0;
	if (t->n_ids > UINT32_MAX / 2)
		return -E2BIG;
	uint64_t slots = 16;
	while (slots < 2 * (uint64_t)t->n_ids)
		slots <<= 1;
	size_t n = t->n_ids ? t->n_ids : 1;
	/* by id alone (the first block of each id), then by (id, parent) */
	uint32_t *by_id = kvt__malloc(slots * sizeof(uint32_t));
	uint32_t *by_pair = kvt__malloc(slots * sizeof(uint32_t));
	b->idx = kvt__malloc(n * sizeof(uint32_t));
	b->parent = kvt__malloc(n * sizeof(uint32_t));
	b->id = kvt__malloc(n * sizeof(uint64_t));
	b->khash = kvt__malloc(n * sizeof(uint64_t));
	if (!by_id || !by_pair || !b->idx || !b->parent || !b->id || !b->khash) {
		kvt__free(by_id);
		kvt__free(by_pair);
		blocks_free(b);
		return -ENOMEM;
	}
	memset(by_id, 0xff, slots * sizeof(uint32_t));
	memset(by_pair, 0xff, slots * sizeof(uint32_t));
	for (size_t r = 0; r < t->n; r++) {
		const struct kvt_trace_req *q = &t->req[r];
		uint32_t prev = NONE;
		for (uint32_t i = 0; i < q->n_blocks; i++) {
			uint64_t id = t->ids[q->first + i];
			uint64_t pair = hid(id ^ hid((uint64_t)prev + 0x9e3779b97f4a7c15ull));
			uint64_t s = pair & (slots - 1);
			while (by_pair[s] != NONE &&
			       (b->id[by_pair[s]] != id || b->parent[by_pair[s]] != prev))
				s = (s + 1) & (slots - 1);
			if (by_pair[s] == NONE) {
				uint64_t f = hid(id) & (slots - 1);
				while (by_id[f] != NONE && b->id[by_id[f]] != id)
					f = (f + 1) & (slots - 1);
				uint32_t k = b->n++;
				by_pair[s] = k;
				b->id[k] = id;
				b->parent[k] = prev;
				if (by_id[f] == NONE) {
					by_id[f] = k;
					b->khash[k] = hid(id);
				} else { /* the same id under another prefix: another block */
					if (!b->rekeyed++) {
						uint32_t par = b->parent[by_id[f]];
						blocks_conflict(t, r, i, id,
								prev != NONE ? &b->id[prev] : NULL,
								par != NONE ? &b->id[par] : NULL, note,
								notelen);
					}
					b->khash[k] = pair;
				}
			}
			b->idx[q->first + i] = prev = by_pair[s];
		}
	}
	kvt__free(by_id);
	kvt__free(by_pair);
	return 0;
}

int kvt__sim_check_trace(const struct kvt_trace *t, char *note, size_t notelen)
{
	if (note && notelen)
		note[0] = 0;
	if (!t)
		return -EINVAL;
	struct blocks b;
	int rc = blocks_build(t, &b, note, notelen);
	if (rc)
		return rc;
	rc = (int)KVT_MIN(b.rekeyed, (uint32_t)INT32_MAX);
	blocks_free(&b);
	return rc;
}

/* ------------------------------------------------------------------ tiers */

struct tier {
	struct kvt_evict *ev;
	uint32_t cap, used;
	uint32_t *slot_of;  /* per block: slot or NONE */
	uint32_t *block_of; /* per slot */
	uint32_t *free_slots;
	uint32_t n_free;
	uint32_t *children; /* per block: resident children in this tier */
	const struct blocks *b;
	bool leaf_first;
	/* leaf-first through the policy's marks (src/evict.h, kvt__evict_mark): a slot may go
	 * while its block has no resident children, and the policy keeps such slots in its
	 * own order (src/evict_okset.h), so a victim is found without walking a chain */
	bool marks;
	uint64_t checks; /* ok() calls made here: victim_work (the marks make none) */
	/* partial_first: partial blocks put and not hit since, oldest first (a ring of cap
	 * block ids; an entry whose block was hit or evicted since is stale), as the store's
	 * DRAM pool keeps them (src/dram.c, cold_victim) */
	bool partial_first;
	struct kvt_cold_fifo ring;
	uint8_t *cold; /* per slot: its block is on the ring and not hit since */
};

static void tier_free(struct tier *t)
{
	if (t->ev)
		kvt__evict_destroy(t->ev);
	kvt__free(t->slot_of);
	kvt__free(t->block_of);
	kvt__free(t->free_slots);
	kvt__free(t->children);
	kvt__cold_free(&t->ring);
	kvt__free(t->cold);
}

static int tier_init(struct tier *t, const char *policy, uint64_t cap, const struct blocks *b,
		     bool leaf_first, bool leaf_scan, bool partial_first)
{
	memset(t, 0, sizeof(*t));
	t->b = b;
	t->leaf_first = leaf_first;
	t->partial_first = partial_first;
	if (!cap)
		return 0;
	cap = KVT_MIN(cap, (uint64_t)KVT_MAX(b->n, 1u)); /* more slots than blocks buys nothing */
	t->cap = (uint32_t)cap;
	int rc = kvt__evict_create(policy, t->cap, &t->ev);
	if (rc < 0) {
		t->ev = NULL;
		return rc;
	}
	t->marks = leaf_first && !leaf_scan;
	size_t nb = KVT_MAX(b->n, 1u);
	t->slot_of = kvt__malloc(nb * sizeof(uint32_t));
	t->block_of = kvt__malloc(cap * sizeof(uint32_t));
	t->free_slots = kvt__malloc(cap * sizeof(uint32_t));
	t->children = kvt__calloc(nb, sizeof(uint32_t));
	if (!t->slot_of || !t->block_of || !t->free_slots || !t->children)
		return -ENOMEM;
	if (t->partial_first) {
		t->cold = kvt__calloc(cap, 1);
		if (!t->cold || kvt__cold_init(&t->ring, t->cap) < 0)
			return -ENOMEM;
	}
	memset(t->slot_of, 0xff, nb * sizeof(uint32_t));
	for (uint32_t i = 0; i < t->cap; i++)
		t->free_slots[i] = t->cap - 1 - i;
	t->n_free = t->cap;
	return 0;
}

static bool leaf_ok(void *arg, uint32_t slot)
{
	struct tier *t = arg;
	t->checks++;
	return t->children[t->block_of[slot]] == 0;
}

static bool any_ok(void *arg, uint32_t slot)
{
	struct tier *t = arg;
	(void)slot;
	t->checks++;
	return true;
}

/* A resident block's count of resident children changed to n: with marks, its slot may
 * go (kvt__evict_mark's ok) while n is 0. */
static void tier_children(struct tier *t, uint32_t blk, uint32_t n)
{
	if (t->marks && t->slot_of[blk] != NONE && n <= 1)
		kvt__evict_mark(t->ev, t->slot_of[blk], n == 0);
}

static bool tier_has(const struct tier *t, uint32_t blk)
{
	return t->cap && t->slot_of[blk] != NONE;
}

static void tier_touch(struct tier *t, uint32_t blk)
{
	if (t->cold)
		t->cold[t->slot_of[blk]] = 0; /* hit: an ordinary block from now on */
	kvt__evict_touch(t->ev, t->slot_of[blk]);
}

/* A cold ring entry (a block id), as src/cold_fifo.h asks - the store's rule
 * (src/dram.c, cold_state) with no pins or dirt here: stale once the block was hit or
 * evicted, waiting while it has a resident child. */
static enum kvt_cold_state cold_state(void *arg, uint64_t e)
{
	const struct tier *t = arg;
	uint32_t blk = (uint32_t)e;
	if (t->slot_of[blk] == NONE || !t->cold[t->slot_of[blk]])
		return KVT_COLD_STALE;
	return t->children[blk] == 0 ? KVT_COLD_GO : KVT_COLD_WAIT;
}

/* partial_first: the slot of the oldest partial block not hit since its put that may go;
 * -1: none. */
static int cold_victim(struct tier *t)
{
	uint64_t blk;
	if (!kvt__cold_take(&t->ring, cold_state, t, &blk))
		return -1;
	uint32_t s = t->slot_of[blk];
	t->cold[s] = 0;
	return (int)s;
}

static void cold_push(struct tier *t, uint32_t blk)
{
	kvt__cold_put(&t->ring, blk, cold_state, t);
	t->cold[t->slot_of[blk]] = 1;
}

/* Second choice when no leaf can go: anything but the prefix of the block being
 * inserted (the store's rule too, src/dram.c). */
struct any_ctx {
	struct tier *t;
	uint32_t exclude;
};

static bool any_but_parent(void *arg, uint32_t slot)
{
	const struct any_ctx *c = arg;
	c->t->checks++;
	return slot != c->exclude;
}

/* Insert blk, evicting if full. Returns 1 if an eviction happened, <0 on error. As in the
 * store, the block counts as its parent's child before a victim is chosen, so an insert
 * never evicts its own prefix. */
static int tier_insert(struct tier *t, uint32_t blk, bool partial)
{
	int evicted = 0;
	uint32_t par = t->b->parent[blk];
	bool par_in = par != NONE && t->slot_of[par] != NONE;
	if (par != NONE)
		tier_children(t, par, ++t->children[par]);
	if (!t->n_free) {
		int v = t->ring.n ? cold_victim(t) : -1;
		if (v >= 0) {
			kvt__evict_expire(t->ev, (uint32_t)v);
		} else {
			v = t->marks	     ? kvt__evict_victim_marked(t->ev)
			    : t->leaf_first ? kvt__evict_victim(t->ev, leaf_ok, t)
					    : kvt__evict_victim(t->ev, any_ok, t);
		}
		if (v < 0) { /* no leaf but the prefix: anything else, else the prefix too */
			struct any_ctx c = {t, par_in ? t->slot_of[par] : NONE};
			v = kvt__evict_victim(t->ev, any_but_parent, &c);
			if (v < 0)
				v = kvt__evict_victim(t->ev, any_ok, t);
		}
		if (v < 0 || (uint32_t)v >= t->cap) {
			if (par != NONE)
				tier_children(t, par, --t->children[par]);
			return -ENOSPC;
		}
		uint32_t old = t->block_of[v];
		t->slot_of[old] = NONE;
		uint32_t po = t->b->parent[old];
		if (po != NONE)
			tier_children(t, po, --t->children[po]);
		t->free_slots[t->n_free++] = (uint32_t)v;
		evicted = 1;
	}
	uint32_t s = t->free_slots[--t->n_free];
	t->slot_of[blk] = s;
	t->block_of[s] = blk;
	if (t->marks) /* before the insert: the policy keeps it in order if it may go */
		kvt__evict_mark(t->ev, s, t->children[blk] == 0);
	kvt__evict_insert(t->ev, s, t->b->khash[blk] ^ 0x5bd1e995u);
	if (t->cold)
		t->cold[s] = 0;
	if (partial && t->cold)
		cold_push(t, blk);
	return evicted;
}

/* ------------------------------------------------------------------ helpers */


static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

uint32_t kvt__sim_auto_gpus(const struct kvt_trace *t, const struct kvt_cost *c)
{
	if (!t || !c || t->n < 2)
		return 1;
	double need = 0, span = (t->req[t->n - 1].ts_ms - t->req[0].ts_ms) / 1000.0;
	for (size_t r = 0; r < t->n; r++)
		need += kvt_cost_recompute_s(c, 0, t->req[r].input_len);
	if (!(span > 0)) /* all at once: no rate to size for, every request its own GPU */
		return (uint32_t)KVT_MIN(t->n, (size_t)KVT_SIM_MAX_GPUS);
	double n = ceil(need / span / KVT_SIM_AUTO_UTIL);
	return (uint32_t)KVT_MAX(1.0, KVT_MIN(n, (double)KVT_SIM_MAX_GPUS));
}

/* FIFO over a fleet: a request waits for the earliest free GPU, free_at[0] of a min-heap
 * (a scan of 65,536 GPUs per request was most of a replay's time). */
void kvt__sim_fleet_replace_first(double *free_at, uint32_t n, double t)
{
	uint32_t i = 0;
	for (;;) {
		uint64_t c = 2 * (uint64_t)i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && free_at[c + 1] < free_at[c])
			c++;
		if (!(free_at[c] < t))
			break;
		free_at[i] = free_at[c];
		i = (uint32_t)c;
	}
	free_at[i] = t;
}

/* ------------------------------------------------------------------ replay */

int kvt__sim_run(const struct kvt_trace *t, const struct kvt_sim_opts *o,
		 struct kvt_sim_result *out)
{
	if (!t || !o || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->belady_block_hit_ratio = out->belady_token_hit_ratio = -1;
	uint64_t t0 = kvt__now_ns();
	const char *policy = o->policy ? o->policy : KVT_SIM_DEFAULT_POLICY;
	int cost_tier[KVT_SIM_TIERS] = {-1, -1};
	if (o->cost) {
		cost_tier[0] = kvt_cost_tier_index(o->cost, "dram");
		cost_tier[1] = kvt_cost_tier_index(o->cost, "nvme");
		if (cost_tier[0] < 0 || cost_tier[1] < 0)
			return -EINVAL;
	}
	struct blocks b;
	int rc = blocks_build(t, &b, NULL, 0);
	if (rc)
		return rc;
	struct tier tier[KVT_SIM_TIERS];
	memset(tier, 0, sizeof(tier));
	struct kvt_admit *admit = NULL;
	uint32_t *uses_left = NULL; /* admit_oracle: later uses of each block */
	uint8_t *declined = NULL;  /* admission declined it while in DRAM: re-offered on hits */
	double *ttft = NULL, *ttft0 = NULL, *gfree = NULL, *gfree0 = NULL;
	int8_t *tiers = NULL, *found = NULL; /* per hit block: its cost tier, its sim tier */
	uint32_t max_blocks = 0;
	for (size_t r = 0; r < t->n; r++)
		max_blocks = KVT_MAX(max_blocks, t->req[r].n_blocks);

	uint64_t bt = t->block_tokens;
	rc = tier_init(&tier[0], policy, o->dram_tokens / bt, &b, o->leaf_first, o->leaf_scan,
		       o->partial_first);
	if (!rc)
		rc = tier_init(&tier[1], policy, o->nvme_tokens / bt, &b, o->leaf_first,
			       o->leaf_scan, false);
	if (rc)
		goto out;
	out->capacity_blocks[0] = o->dram_tokens / bt;
	out->capacity_blocks[1] = o->nvme_tokens / bt;
	if (!(declined = kvt__calloc(KVT_MAX(b.n, 1u), 1))) {
		rc = -ENOMEM;
		goto out;
	}
	if (o->admit_oracle) {
		if (!(uses_left = kvt__calloc(KVT_MAX(b.n, 1u), sizeof(uint32_t)))) {
			rc = -ENOMEM;
			goto out;
		}
		for (size_t r = 0; r < t->n; r++)
			for (uint32_t i = 0; i < t->req[r].n_blocks; i++)
				uses_left[b.idx[t->req[r].first + i]]++;
	}
	if (tier[1].cap && (o->admit_predict || o->admit_min_freq > 1 ||
			    o->admit_min_prefix || (o->cost && o->admit_cost_check))) {
		struct kvt_admit_cfg ac = {
		    .min_freq = KVT_MAX(1u, o->admit_min_freq),
		    .min_prefix_tokens = o->admit_min_prefix,
		    .sketch_width = o->admit_sketch_width
					? o->admit_sketch_width
					: KVT_MAX((uint64_t)tier[1].cap, 1024u),
		    .doorkeeper = !o->admit_no_doorkeeper,
		    .cost = o->admit_cost_check ? o->cost : NULL,
		    .cost_tier = cost_tier[1],
		    .predict = o->admit_predict,
		    .chunk_tokens = (uint32_t)bt,
		};
		if ((rc = kvt__admit_create(&ac, &admit)) < 0)
			goto out;
	}
	out->span_s = t->n ? (t->req[t->n - 1].ts_ms - t->req[0].ts_ms) / 1000.0 : 0;
	uint32_t ngpu = o->gpus;
	if (o->gpus > KVT_SIM_MAX_GPUS) {
		rc = -EINVAL;
		goto out;
	}
	if (!ngpu && o->cost) /* size the fleet: no-cache prefill seconds per second */
		ngpu = kvt__sim_auto_gpus(t, o->cost);
	out->gpus = ngpu = KVT_MAX(ngpu, 1u);
	ttft = kvt__malloc((t->n ? t->n : 1) * sizeof(double));
	ttft0 = kvt__malloc((t->n ? t->n : 1) * sizeof(double));
	gfree = kvt__calloc(ngpu, sizeof(double));
	gfree0 = kvt__calloc(ngpu, sizeof(double));
	tiers = kvt__malloc(KVT_MAX(max_blocks, 1u));
	found = kvt__malloc(KVT_MAX(max_blocks, 1u));
	if (!ttft || !ttft0 || !tiers || !found || !gfree || !gfree0) {
		rc = -ENOMEM;
		goto out;
	}

	double bpt = o->cost ? (double)kvt_cost_kv_bytes_per_token(o->cost) : 0;
	/* gfree: when each GPU finishes its queue, s (with the cache; gfree0 without), as
	 * min-heaps: all 0 is one */
	for (size_t r = 0; r < t->n; r++) {
		const struct kvt_trace_req *q = &t->req[r];
		const uint32_t *blk = b.idx + q->first;
		out->requests++;
		out->blocks += q->n_blocks;
		out->input_tokens += q->input_len;

		/* lookup */
		uint32_t hit = 0;
		for (; hit < q->n_blocks; hit++) {
			int where = tier_has(&tier[0], blk[hit])   ? 0
				    : tier_has(&tier[1], blk[hit]) ? 1
								   : -1;
			if (where < 0)
				break;
			uint32_t len = kvt__trace_block_len(t, q, hit);
			tiers[hit] = (int8_t)(o->cost ? cost_tier[where] : where);
			found[hit] = (int8_t)where;
			out->tier_hit_blocks[where]++;
			out->tier_hit_tokens[where] += len;
			out->hit_tokens += len;
		}
		out->hit_blocks += hit;

		/* plan and queue */
		uint32_t load = hit;
		if (o->cost) {
			struct kvt_cost_plan plan;
			kvt_cost_plan(o->cost, tiers, hit, t->block_tokens, q->input_len, &plan);
			load = plan.load_chunks;
			out->prefill_tokens_saved += kvt__cost_plan_saved(&plan, q->input_len);
			double arrive = q->ts_ms / 1000.0;
			double start = KVT_MAX(arrive, gfree[0]), wait = start - arrive;
			double restore = plan.restore_s;
			uint64_t nv = plan.tier_bytes[cost_tier[1]];
			if (o->prefetch && nv && wait > 0) {
				/* staging runs at NVMe speed during the wait; what is staged
				 * is then read from DRAM */
				const struct kvt_tier_profile *np =
				    &kvt__cost_params(o->cost)->tier[cost_tier[1]];
				double stage = np->latency_s + (double)nv / np->read_Bps;
				uint64_t moved =
				    (uint64_t)((double)nv * KVT_MIN(1.0, wait / stage));
				uint64_t by[KVT_MAX_TIERS];
				memcpy(by, plan.tier_bytes, sizeof(by));
				by[cost_tier[1]] -= moved;
				by[cost_tier[0]] += moved;
				restore = kvt__cost_restore_mix(o->cost, by);
			}
			double service = restore + plan.recompute_s;
			kvt__sim_fleet_replace_first(gfree, ngpu, start + service);
			out->gpu_busy_s += service;
			ttft[r] = start + service - arrive;
			double done0 = KVT_MAX(arrive, gfree0[0]) + plan.no_cache_s;
			kvt__sim_fleet_replace_first(gfree0, ngpu, done0);
			out->nocache_gpu_busy_s += plan.no_cache_s;
			ttft0[r] = done0 - arrive;
		} else {
			for (uint32_t i = 0; i < hit; i++)
				out->prefill_tokens_saved += kvt__trace_block_len(t, q, i);
		}

		/* store: every block inserted or touched, in order */
		for (uint32_t i = 0; i < q->n_blocks; i++) {
			uint32_t k = blk[i];
			uint64_t bytes = (uint64_t)(bpt * kvt__trace_block_len(t, q, i));
			bool in_dram = tier_has(&tier[0], k), in_nvme = tier_has(&tier[1], k);
			/* read from where the lookup found it: an earlier block's promotion in
			 * this loop may have evicted it from DRAM since */
			if (i < load)
				out->read_bytes[found[i]] += bytes;
			if (admit)
				kvt__admit_record(admit, b.khash[k]);
			if (uses_left)
				uses_left[k]--;
			if (tier[0].cap) {
				if (in_dram) {
					tier_touch(&tier[0], k);
				} else {
					/* (a block loaded from NVMe was just asked for: not cold) */
					bool partial = i >= load && kvt__trace_block_len(t, q, i) < bt;
					if ((rc = tier_insert(&tier[0], k, partial)) < 0)
						goto out;
					out->evictions[0] += (uint64_t)rc;
					out->inserts[0]++;
					out->write_bytes[0] += bytes;
				}
			}
			/* Offered to NVMe where the store offers it: when it enters DRAM (a put;
			 * a promotion comes from NVMe), and on a DRAM hit if admission declined it
			 * for a reason that can change (kvt__admit_reoffer: the store re-offers
			 * such a slot on its hits). */
			int verdict = KVT_ADMIT_YES;
			bool offer = !in_dram || declined[k];
			if (tier[1].cap) {
				if (in_nvme) {
					tier_touch(&tier[1], k);
				} else if (!offer) {
					/* in DRAM, written or declined for good: the store asks nothing */
				} else if (uses_left && !uses_left[k]) {
					out->nvme_writes_skipped++;
				} else if (admit &&
					   (verdict = kvt__admit_decide(admit, b.khash[k],
							     b.parent[k] != NONE ? b.khash[b.parent[k]] : 0,
							     (uint64_t)i * bt,
							     kvt__trace_block_len(t, q, i),
							     bytes)) != KVT_ADMIT_YES) {
					out->nvme_writes_skipped++;
					declined[k] = kvt__admit_reoffer(verdict);
				} else {
					declined[k] = 0;
					if ((rc = tier_insert(&tier[1], k, false)) < 0)
						goto out;
					out->evictions[1] += (uint64_t)rc;
					out->inserts[1]++;
					out->write_bytes[1] += bytes;
				}
			}
		}
		if (o->progress && (r % 4096 == 4095))
			o->progress(o->progress_arg, r + 1, t->n);
	}
	rc = 0;

	for (int i = 0; i < KVT_SIM_TIERS; i++)
		out->victim_work +=
		    tier[i].checks;
	out->nvme_bytes_per_hit =
	    out->tier_hit_blocks[1] ? (double)out->write_bytes[1] / out->tier_hit_blocks[1] : 0;
	out->nvme_bytes_per_any_hit =
	    out->hit_blocks ? (double)out->write_bytes[1] / out->hit_blocks : 0;
	out->block_hit_ratio = ratio(out->hit_blocks, out->blocks);
	out->token_hit_ratio = ratio(out->hit_tokens, out->input_tokens);
	for (int i = 0; i < KVT_SIM_TIERS; i++) {
		out->tier_block_hit_ratio[i] = ratio(out->tier_hit_blocks[i], out->blocks);
		out->tier_token_hit_ratio[i] = ratio(out->tier_hit_tokens[i], out->input_tokens);
	}
	if (out->span_s > 0) {
		out->utilization = out->gpu_busy_s / (out->span_s * ngpu);
		out->nocache_utilization = out->nocache_gpu_busy_s / (out->span_s * ngpu);
	} else if (t->n > 1) { /* all at once: any work is an unbounded load */
		out->utilization = out->gpu_busy_s > 0 ? INFINITY : 0;
		out->nocache_utilization = out->nocache_gpu_busy_s > 0 ? INFINITY : 0;
	}
	if (o->cost && t->n) {
		double s0 = 0, s1 = 0;
		for (size_t r = 0; r < t->n; r++) {
			s0 += ttft[r];
			s1 += ttft0[r];
		}
		out->ttft_mean_s = s0 / (double)t->n;
		out->nocache_ttft_mean_s = s1 / (double)t->n;
		qsort(ttft, t->n, sizeof(double), kvt__cmp_double);
		qsort(ttft0, t->n, sizeof(double), kvt__cmp_double);
		out->ttft_p50_s = kvt__percentile(ttft, t->n, 0.50);
		out->ttft_p99_s = kvt__percentile(ttft, t->n, 0.99);
		out->nocache_ttft_p50_s = kvt__percentile(ttft0, t->n, 0.50);
		out->nocache_ttft_p99_s = kvt__percentile(ttft0, t->n, 0.99);
	}
	if (o->progress)
		o->progress(o->progress_arg, t->n, t->n);
	if (o->belady)
		rc = kvt__sim_belady(t, out->capacity_blocks[0] + out->capacity_blocks[1],
				     &out->belady_block_hit_ratio, &out->belady_token_hit_ratio);
out:
	kvt__admit_destroy(admit);
	kvt__free(uses_left);
	kvt__free(declined);
	kvt__free(ttft);
	kvt__free(ttft0);
	kvt__free(gfree);
	kvt__free(gfree0);
	kvt__free(tiers);
	kvt__free(found);
	for (int i = 0; i < KVT_SIM_TIERS; i++)
		tier_free(&tier[i]);
	blocks_free(&b);
	out->elapsed_s = (double)(kvt__now_ns() - t0) / 1e9;
	return rc;
}

/* ------------------------------------------------------------------ Belady */

struct heap_ent {
	uint64_t next; /* position of next use; UINT64_MAX: never */
	uint32_t blk;
};

struct heap {
	struct heap_ent *e;
	size_t n, cap;
};

static int heap_push(struct heap *h, uint64_t next, uint32_t blk)
{
	if (h->n == h->cap) {
		size_t c = h->cap ? h->cap * 2 : 1024;
		void *p = kvt__realloc(h->e, c * sizeof(*h->e));
		if (!p)
			return -ENOMEM;
		h->e = p;
		h->cap = c;
	}
	size_t i = h->n++;
	while (i && h->e[(i - 1) / 2].next < next) {
		h->e[i] = h->e[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->e[i] = (struct heap_ent){next, blk};
	return 0;
}

static struct heap_ent heap_pop(struct heap *h)
{
	struct heap_ent top = h->e[0], last = h->e[--h->n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && h->e[c + 1].next > h->e[c].next)
			c++;
		if (h->e[c].next <= last.next)
			break;
		h->e[i] = h->e[c];
		i = c;
	}
	if (h->n)
		h->e[i] = last;
	return top;
}

int kvt__sim_belady(const struct kvt_trace *t, uint64_t capacity, double *block_ratio,
		    double *token_ratio)
{
	struct blocks b;
	int rc = blocks_build(t, &b, NULL, 0);
	if (rc)
		return rc;
	size_t n = t->n_ids;
	uint64_t *next = kvt__malloc((n ? n : 1) * sizeof(uint64_t));
	uint64_t *last = kvt__malloc((b.n ? b.n : 1) * sizeof(uint64_t));
	uint64_t *cur = kvt__malloc((b.n ? b.n : 1) * sizeof(uint64_t)); /* resident: next use */
	uint8_t *res = kvt__calloc(b.n ? b.n : 1, 1);
	struct heap h = {0};
	uint64_t hits = 0, blocks = 0, hit_tok = 0, tokens = 0, used = 0;
	if (!next || !last || !cur || !res) {
		rc = -ENOMEM;
		goto out;
	}
	/* requests are laid out in trace order in ids[], so the position is the index */
	for (uint32_t i = 0; i < b.n; i++)
		last[i] = UINT64_MAX;
	for (size_t p = n; p-- > 0;) {
		next[p] = last[b.idx[p]];
		last[b.idx[p]] = p;
	}
	for (size_t r = 0; r < t->n; r++) {
		const struct kvt_trace_req *q = &t->req[r];
		uint32_t hit = 0;
		while (hit < q->n_blocks && res[b.idx[q->first + hit]])
			hit++;
		for (uint32_t i = 0; i < hit; i++)
			hit_tok += kvt__trace_block_len(t, q, i);
		hits += hit;
		blocks += q->n_blocks;
		tokens += q->input_len;
		for (uint32_t i = 0; i < q->n_blocks && capacity; i++) {
			uint64_t pos = q->first + i;
			uint32_t k = b.idx[pos];
			if (res[k]) {
				cur[k] = next[pos];
				if ((rc = heap_push(&h, next[pos], k)))
					goto out;
				continue;
			}
			if (next[pos] == UINT64_MAX)
				continue; /* never used again: storing it cannot help */
			if (used == capacity) {
				/* farthest-used resident block, skipping stale heap entries */
				while (h.n && (!res[h.e[0].blk] || cur[h.e[0].blk] != h.e[0].next))
					heap_pop(&h);
				if (h.n && h.e[0].next <= next[pos])
					continue; /* the new block is the farthest: do not store */
				struct heap_ent v = heap_pop(&h);
				res[v.blk] = 0;
				used--;
			}
			res[k] = 1;
			cur[k] = next[pos];
			used++;
			if ((rc = heap_push(&h, next[pos], k)))
				goto out;
			/* stale entries could grow the heap without bound on long traces */
			if (h.n > 4 * (capacity + 1024) + n / 4) {
				size_t w = 0;
				for (size_t j = 0; j < h.n; j++)
					if (res[h.e[j].blk] && cur[h.e[j].blk] == h.e[j].next)
						h.e[w++] = h.e[j];
				struct heap_ent *tmp = h.e;
				size_t cnt = w;
				h.n = 0;
				for (size_t j = 0; j < cnt && !rc; j++) {
					struct heap_ent e = tmp[j];
					/* rebuild in place: pushing re-reads tmp[j] before writing
					 * positions <= j, since h.n <= j at each step */
					rc = heap_push(&h, e.next, e.blk);
				}
				if (rc)
					goto out;
			}
		}
	}
	*block_ratio = ratio(hits, blocks);
	if (token_ratio)
		*token_ratio = ratio(hit_tok, tokens);
out:
	kvt__free(h.e);
	kvt__free(next);
	kvt__free(last);
	kvt__free(cur);
	kvt__free(res);
	blocks_free(&b);
	return rc;
}
