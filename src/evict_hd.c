/*
 * evict_hd.c - "hd" and "hda", the policies for KV blocks: evict the block with the lowest
 * expected hit density, learned online from the blocks' own history (LHD, Beckmann et al.,
 * NSDI'18), with admission by the same ranking. Why: on production conversation traffic a
 * small DRAM misses because of capacity and one-hit blocks, not ordering (issue #12: a
 * second-sighting filter alone doubles LRU's hit ratio at 1M tokens); how much a block's
 * history predicts its reuse differs from trace to trace and with the pool's size, so the
 * policy measures it instead of fixing a rule:
 *
 *   class   how often the block has been requested: sightings before it was inserted
 *           (a doorkeeper + count-min sketch that remembers ~160x the capacity in accesses,
 *           src/sketch.c) plus hits while resident, in 8 log-spaced classes. A KV block's
 *           sightings are the number of requests that shared it (a shared system prompt,
 *           a conversation's earlier turns);
 *   age     accesses since the block's last use, in log-spaced bins;
 *   density for each (class, age): expected further hits / expected further time in the
 *           cache, from counts of hits and evictions at each age (decayed by half every
 *           reconfiguration), recomputed every RECONF accesses.
 * Victim: the lowest density among LRU's own choice (an LRU list is kept alongside) and
 * SAMPLES random resident blocks the owner's ok() accepts (a block with resident children
 * is refused, so a chain goes from its end). Admission is the same ranking: a block
 * inserted on its first sighting starts in class 0, and where class 0's density is low it
 * goes before any proven block, so DRAM in effect admits on the second sighting exactly
 * when that pays. Where history predicts nothing beyond recency (a large pool, memoryless
 * reuse), density falls with age alike in every class and the ranking is LRU's, and LRU's
 * choice is always on the table, which keeps the policy at LRU's level there.
 *
 * "hda" (the default) is hd with explicit admission. Measured, the implicit admission
 * above does not reach what a second-sighting filter does where history predicts reuse
 * (the power-law conversation workload: hd 0.074, lru2 0.087 at 1M tokens), while a fixed
 * filter loses to LRU where it does not (lru2 -0.03 on agent and chat at 1M tokens). So hda keeps a
 * probation list of blocks on their first sighting (a filter of the last ~20 x capacity
 * first sightings, src/ghost.h, says which; not the sketch, whose counters and doorkeeper
 * carry collisions) that is evicted first, oldest first, whenever it is over a target size;
 * a hit admits, as does a second sighting. The target moves as in ARC (Megiddo & Modha):
 * a block evicted from probation and asked for again (a ghost of the last ~capacity such
 * evictions) grows it, one evicted from the rest and asked for again shrinks it, by the
 * ratio of the two ghosts' sizes. Under the target, hd's ranking picks the victim among
 * all. Extra cost: three Bloom-filter probes per insert, one per eviction.
 *
 * State is allocated at create; insert/touch/remove are O(1), a victim costs at most TRIES
 * ok() calls and SAMPLES density lookups, plus LRU's choice: a walk from the LRU end past
 * the blocks ok() refuses (and a scan when none may go; hda: up to PROB_TRIES probation
 * blocks first). kvt__evict_victim_marked makes the same choice without the walks: the
 * marked blocks of both lists are kept in list order (src/evict_okset.h), and whether
 * probation's oldest marked block is within PROB_TRIES of its tail is one comparison with
 * the PROB_TRIES-th oldest (pwin). A reconfiguration is O(CLASSES x BINS) every
 * max(RECONF_MIN, capacity) accesses.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "evict_okset.h"
#include "evict_policy.h"
#include "ghost.h"
#include "internal.h"
#include "sketch.h"

#define CLASSES 8
#define BINS 48
#define SAMPLES 8 /* candidates the owner's ok() accepts */
#define TRIES 128  /* random draws to find them */
/* hda: probation blocks looked at for one that may go; a long new chain is refused from
 * its oldest end (each block has its child resident), so this must exceed a chain */
#define PROB_TRIES 4096
#define RECONF_MIN 4096
/* hda: first sightings remembered per capacity entry (src/ghost.h: 4 B each), as long as
 * lru2's memory */
#define SEEN_PER_ENTRY 20
/* sketch counters per capacity entry: halving every 10 x width accesses, so a block seen
 * once is remembered for 160 x capacity accesses (a conversation turn minutes later at a
 * small pool); 64 B of counters (4 rows) and 320-640 B of doorkeeper (src/sketch.c) per
 * entry, against MiB-sized chunks. Measured: 2x -> 16x raised RAG at 128k tokens from
 * 0.128 to 0.158 */
#define SKETCH_PER_ENTRY 16

struct hd {
	uint32_t cap, n;
	uint32_t *res;	   /* resident ids, dense; pos[id] indexes it */
	uint32_t *pos;	   /* UINT32_MAX: not resident */
	uint64_t *last;	   /* access clock at the last use */
	uint64_t *khash;
	uint8_t *cls;
	uint8_t *uses; /* sightings so far, saturating */
	uint8_t *res_hits; /* hits during this residency, saturating */
	uint64_t now;	   /* accesses so far */
	uint64_t gran;	   /* accesses per age unit */
	double width[BINS]; /* accesses spanned by each bin */
	double hits[CLASSES][BINS], evicts[CLASSES][BINS];
	float density[CLASSES][BINS];
	uint64_t next_reconf, reconf_every;
	uint64_t rng;
	struct kvt_sketch *freq;
	struct kvt_idlist lru;
	struct kvt_idlink *links;
	/* "hda" only: explicit admission (see the top of the file) */
	bool adm;
	struct kvt_idlist prob;	   /* resident blocks on probation, newest at the head */
	struct kvt_idlink *plinks;
	uint8_t *inprob;
	uint32_t target;	   /* probation's target size, adapted by the ghosts */
	struct kvt_ghost *g_prob, *g_main; /* recently evicted from probation / the rest */
	struct kvt_ghost *seen;		   /* recent first sightings */
	/* kvt__evict_victim_marked: the marked ids of lru and of prob in list order, and the
	 * PROB_TRIES-th oldest probation block (its newest if fewer), so that "within
	 * PROB_TRIES of the tail" is a stamp comparison */
	struct kvt_okset lok, pok;
	uint32_t pwin;
};

static void hd_destroy(void *st)
{
	struct hd *p = st;
	if (!p)
		return;
	kvt__free(p->res);
	kvt__free(p->pos);
	kvt__free(p->last);
	kvt__free(p->khash);
	kvt__free(p->cls);
	kvt__free(p->uses);
	kvt__free(p->res_hits);
	kvt__free(p->links);
	kvt__free(p->plinks);
	kvt__free(p->inprob);
	kvt__ghost_destroy(p->g_prob);
	kvt__ghost_destroy(p->g_main);
	kvt__ghost_destroy(p->seen);
	kvt__sketch_destroy(p->freq);
	kvt__okset_fini(&p->lok);
	kvt__okset_fini(&p->pok);
	kvt__free(p);
}

static int create(uint32_t capacity, bool adm, void **out)
{
	if (!capacity || !out)
		return -EINVAL;
	struct hd *p = kvt__calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->cap = capacity;
	p->res = kvt__malloc((size_t)capacity * sizeof(uint32_t));
	p->pos = kvt__malloc((size_t)capacity * sizeof(uint32_t));
	p->last = kvt__calloc(capacity, sizeof(uint64_t));
	p->khash = kvt__calloc(capacity, sizeof(uint64_t));
	p->cls = kvt__calloc(capacity, 1);
	p->uses = kvt__calloc(capacity, 1);
	p->res_hits = kvt__calloc(capacity, 1);
	p->links = kvt__calloc(capacity, sizeof(*p->links));
	kvt__idl_init(&p->lru);
	/* A sketch takes at most 2^32 counters (16 GiB): past 2^28 slots it saturates sooner
	 * rather than refusing the store. */
	uint64_t width = KVT_MIN((uint64_t)capacity * SKETCH_PER_ENTRY, 1ull << 32);
	int rc = kvt__sketch_create(width, 15, true, &p->freq);
	p->pwin = KVT_IDL_NIL;
	if (rc < 0 || !p->res || !p->pos || !p->last || !p->khash || !p->cls || !p->uses ||
	    !p->res_hits || !p->links || kvt__okset_init(&p->lok, capacity, 1) < 0) {
		hd_destroy(p);
		return -ENOMEM;
	}
	if (adm) {
		p->adm = true;
		kvt__idl_init(&p->prob);
		p->plinks = kvt__calloc(capacity, sizeof(*p->plinks));
		p->inprob = kvt__calloc(capacity, 1);
		uint32_t gw = KVT_MAX(2u, capacity);
		if (!p->plinks || !p->inprob || kvt__okset_init(&p->pok, capacity, 1) < 0 ||
		    kvt__ghost_create(gw, &p->g_prob) < 0 ||
		    kvt__ghost_create(gw, &p->g_main) < 0 ||
		    kvt__ghost_create(SEEN_PER_ENTRY * KVT_MIN(capacity, UINT32_MAX / SEEN_PER_ENTRY),
				      &p->seen) < 0) {
			hd_destroy(p);
			return -ENOMEM;
		}
		p->target = capacity / 2; /* ARC starts at 0, hd is cap; half measured best */
	}
	memset(p->pos, 0xff, (size_t)capacity * sizeof(uint32_t));
	/* ages are counted in units of capacity/16 accesses; bins are quarter octaves, so
	 * the last bin is 2^12 units = 256 x capacity */
	p->gran = KVT_MAX(1u, capacity / 16);
	for (int a = 0; a < BINS; a++) /* bin a starts where 1 + age/gran = 2^(a/4) */
		p->width[a] = (double)p->gran * (exp2((a + 1) / 4.0) - exp2(a / 4.0));
	p->reconf_every = KVT_MAX((uint64_t)RECONF_MIN, (uint64_t)capacity);
	p->next_reconf = p->reconf_every;
	p->rng = 0x9e3779b97f4a7c15ull ^ capacity;
	/* before anything is learned: density falls with age, higher classes first (LRU
	 * within a class, frequency across) */
	for (int c = 0; c < CLASSES; c++)
		for (int a = 0; a < BINS; a++)
			p->density[c][a] = (float)((1.0 + c) / (1.0 + a));
	*out = p;
	return 0;
}

static int hd_create(uint32_t capacity, void **out)
{
	return create(capacity, false, out);
}

static int hda_create(uint32_t capacity, void **out)
{
	return create(capacity, true, out);
}

/* Quarter-octave bin of an age: 4 x floor(log2(1 + age / gran)) plus the two bits below
 * the leading one, in integer arithmetic (this runs on every victim candidate). */
static uint32_t bin_of(const struct hd *p, uint64_t age)
{
	uint64_t u = 1 + age / p->gran;
	uint32_t o = 63 - (uint32_t)__builtin_clzll(u);
	uint32_t frac = o >= 2 ? (uint32_t)(u >> (o - 2)) & 3 : (uint32_t)(u << (2 - o)) & 3;
	uint32_t b = 4 * o + frac;
	return b < BINS ? b : BINS - 1;
}

static uint64_t rnd(struct hd *p)
{
	uint64_t x = p->rng;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return p->rng = x;
}

static double events_of(const struct hd *p, int c)
{
	double e = 0;
	for (int a = 0; a < BINS; a++)
		e += p->hits[c][a] + p->evicts[c][a];
	return e;
}

/* LHD's hit density per (class, age): hits still to come over the cache time still to be
 * spent, both summed over the ages from a onwards. */
static void reconfigure(struct hd *p)
{
	for (int c = 0; c < CLASSES; c++) {
		double hits_after = 0, events_after = 0, life_after = 0;
		if (c > 0 && events_of(p, c) < 1) {
			/* nothing seen in this class yet: rank it as the class below, not
			 * as worthless. A density of 0 would evict every block that reaches
			 * the class before it can show a hit, so the class would never
			 * learn (a hot key's sightings outrunning the classes observed so
			 * far: test_hd_learns_reuse). */
			memcpy(p->density[c], p->density[c - 1], sizeof(p->density[c]));
			continue;
		}
		for (int a = BINS - 1; a >= 0; a--) {
			hits_after += p->hits[c][a];
			events_after += p->hits[c][a] + p->evicts[c][a];
			/* a block alive at bin a spends this bin's width in the cache */
			life_after += events_after * p->width[a];
			p->density[c][a] = life_after > 0 ? (float)(hits_after / life_after) : 0;
			p->hits[c][a] *= 0.5;
			p->evicts[c][a] *= 0.5;
		}
	}
	p->next_reconf = p->now + p->reconf_every;
}

static void tick(struct hd *p)
{
	if (++p->now >= p->next_reconf)
		reconfigure(p);
}

/* Sightings before this use -> class: 0, 1, 2, 3, 4-5, 6-8, 9-12, 13+ (the sketch
 * saturates at 15). */
static uint8_t class_of(uint32_t uses)
{
	static const uint8_t map[16] = {0, 1, 2, 3, 4, 4, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7};
	return map[uses < 16 ? uses : 15];
}

/* hda: ARC's adaptation between probation and the rest. A block evicted from probation
 * and asked for again means probation was too small; one evicted from the rest, that the
 * rest was. A block with history (sightings before this one, or a ghost) is admitted;
 * a first sighting goes on probation. */
static bool admit(struct hd *p, uint32_t id, uint64_t khash)
{
	bool before = kvt__ghost_test(p->seen, khash);
	if (!before)
		kvt__ghost_add(p->seen, khash);
	bool gp = kvt__ghost_test(p->g_prob, khash), gm = !gp && kvt__ghost_test(p->g_main, khash);
	uint32_t np = KVT_MAX(1u, kvt__ghost_size(p->g_prob));
	uint32_t nm = KVT_MAX(1u, kvt__ghost_size(p->g_main));
	if (gp) {
		uint32_t d = KVT_MAX(1u, nm / np);
		p->target = p->cap - p->target > d ? p->target + d : p->cap;
	} else if (gm) {
		uint32_t d = KVT_MAX(1u, np / nm);
		p->target = p->target > d ? p->target - d : 0;
	}
	if (before || gp || gm)
		return false;
	p->inprob[id] = 1;
	kvt__okl_push_head(&p->pok, 0, &p->prob, p->plinks, id);
	if (p->prob.len <= PROB_TRIES) /* all of probation is within reach: up to its head */
		p->pwin = id;
	return true;
}

static void unprobe(struct hd *p, uint32_t id)
{
	if (p->adm && p->inprob[id]) {
		p->inprob[id] = 0;
		/* id within PROB_TRIES of the tail: the one after the window's end joins it */
		if (kvt__okset_stamp(&p->pok, id) <= kvt__okset_stamp(&p->pok, p->pwin)) {
			if (p->prob.len > PROB_TRIES)
				p->pwin = p->plinks[p->pwin].prev;
			else if (id == p->pwin)
				p->pwin = p->plinks[id].next;
		}
		kvt__okl_unlink(&p->pok, &p->prob, p->plinks, id);
	}
}

static void hd_insert(void *st, uint32_t id, uint64_t khash)
{
	struct hd *p = st;
	if (id >= p->cap || p->pos[id] != UINT32_MAX)
		return;
	uint32_t seen = kvt__sketch_add(p->freq, khash); /* this sighting included */
	p->khash[id] = khash;
	p->uses[id] = (uint8_t)KVT_MIN(seen - 1, 255u);
	p->res_hits[id] = 0;
	p->cls[id] = class_of(seen - 1);
	p->last[id] = p->now;
	p->pos[id] = p->n;
	p->res[p->n++] = id;
	kvt__okl_push_head(&p->lok, 0, &p->lru, p->links, id);
	if (p->adm && admit(p, id, khash)) /* a first sighting: class 0 whatever the sketch says */
		p->uses[id] = 0, p->cls[id] = 0;
	tick(p);
}

static void hd_touch(void *st, uint32_t id)
{
	struct hd *p = st;
	if (id >= p->cap || p->pos[id] == UINT32_MAX)
		return;
	if (p->res_hits[id] < 255) /* the sketch learns them at eviction, off the hit path */
		p->res_hits[id]++;
	p->hits[p->cls[id]][bin_of(p, p->now - p->last[id])] += 1;
	if (p->uses[id] < 255)
		p->uses[id]++;
	p->cls[id] = class_of(p->uses[id]);
	p->last[id] = p->now;
	kvt__okl_to_head(&p->lok, 0, &p->lru, p->links, id);
	unprobe(p, id); /* a hit on probation admits */
	tick(p);
}

/* A lookup found it: to the head of the LRU list (so it is not LRU's candidate before its
 * get), nothing counted - its age and class move at the get, its one use. */
static void hd_refresh(void *st, uint32_t id)
{
	struct hd *p = st;
	if (id >= p->cap || p->pos[id] == UINT32_MAX)
		return;
	kvt__okl_to_head(&p->lok, 0, &p->lru, p->links, id);
}

static void drop(struct hd *p, uint32_t id)
{
	/* the hits of this residency join the block's history now (one sketch update per
	 * eviction instead of one per hit) */
	kvt__sketch_record_n(p->freq, p->khash[id], p->res_hits[id]);
	uint32_t i = p->pos[id], last = p->res[--p->n];
	p->res[i] = last;
	p->pos[last] = i;
	p->pos[id] = UINT32_MAX;
	kvt__okl_unlink(&p->lok, &p->lru, p->links, id);
	unprobe(p, id);
}

static void hd_remove(void *st, uint32_t id)
{
	struct hd *p = st;
	if (id < p->cap && p->pos[id] != UINT32_MAX)
		drop(p, id);
}

/* An eviction the owner chose: it teaches the densities as a victim's does (a partial
 * block that was never hit counts against its class at its age), without a ghost (its id
 * does not come back, and would crowd out ones that do). */
static void hd_expire(void *st, uint32_t id)
{
	struct hd *p = st;
	if (id >= p->cap || p->pos[id] == UINT32_MAX)
		return;
	p->evicts[p->cls[id]][bin_of(p, p->now - p->last[id])] += 1;
	drop(p, id);
}

static float density(const struct hd *p, uint32_t id)
{
	return p->density[p->cls[id]][bin_of(p, p->now - p->last[id])];
}

/* May id go: the owner's ok() (none: all may), or with marked, its mark. */
static bool may_go(const struct hd *p, kvt_evict_ok_fn ok, void *arg, bool marked, uint32_t id)
{
	if (marked)
		return kvt__okset_ok(&p->lok, id);
	return !ok || ok(arg, id);
}

/* hd_victim and hd_victim_marked: the same choice, by a scan with ok() or from the marks. */
static int choose(struct hd *p, kvt_evict_ok_fn ok, void *arg, bool marked)
{
	if (!p->n)
		return -ENOENT;
	int64_t best = -1;
	float bd = INFINITY;
	if (p->adm && p->prob.len > p->target && marked) {
		uint32_t id = kvt__okset_first(&p->pok, 0);
		if (id != KVT_IDL_NIL &&
		    kvt__okset_stamp(&p->pok, id) <= kvt__okset_stamp(&p->pok, p->pwin))
			best = id;
	} else if (p->adm && p->prob.len > p->target) {
		/* probation over its target: its oldest block that may go, within PROB_TRIES */
		int k = 0;
		for (uint32_t id = p->prob.tail; id != KVT_IDL_NIL && k < PROB_TRIES;
		     id = p->plinks[id].prev, k++)
			if (!ok || ok(arg, id)) {
				best = id;
				break;
			}
	}
	uint32_t lv = KVT_IDL_NIL;
	if (best < 0)
		lv = marked ? kvt__okset_first(&p->lok, 0)
			    : kvt__idl_find_from_tail(&p->lru, p->links, ok, arg);
	if (lv != KVT_IDL_NIL) /* LRU's choice is always a candidate */
		best = lv, bd = density(p, lv);
	int got = best >= 0 && lv == KVT_IDL_NIL ? SAMPLES : 0; /* probation chose */
	for (int i = 0; i < TRIES && got < SAMPLES; i++) {
		uint32_t id = p->res[rnd(p) % p->n];
		if (!may_go(p, ok, arg, marked, id))
			continue;
		got++;
		float d = density(p, id);
		if (d < bd)
			bd = d, best = id;
	}
	if (best < 0) { /* none of the samples may go: the first resident one that may */
		uint32_t start = (uint32_t)(rnd(p) % p->n);
		/* (marked: LRU's choice is the oldest marked id, so there is none) */
		for (uint32_t k = 0; k < p->n && best < 0 && !marked; k++) {
			uint32_t id = p->res[(start + k) % p->n];
			if (!ok || ok(arg, id))
				best = id;
		}
	}
	if (best < 0)
		return -ENOENT;
	uint32_t v = (uint32_t)best;
	p->evicts[p->cls[v]][bin_of(p, p->now - p->last[v])] += 1;
	if (p->adm)
		kvt__ghost_add(p->inprob[v] ? p->g_prob : p->g_main, p->khash[v]);
	drop(p, v);
	return (int)v;
}

static int hd_victim(void *st, kvt_evict_ok_fn ok, void *arg)
{
	return choose(st, ok, arg, false);
}

static int hd_victim_marked(void *st)
{
	return choose(st, NULL, NULL, true);
}

static void hd_mark(void *st, uint32_t id, bool ok)
{
	struct hd *p = st;
	kvt__okset_mark(&p->lok, id, ok);
	if (p->adm)
		kvt__okset_mark(&p->pok, id, ok);
}

/* The n blocks to write back first (dram.c's write-back: the coldest dirty slots, so that
 * clean ones are there when eviction wants them): hda's probation from its oldest while
 * probation is over its target (where its victims come from), then the LRU list from its
 * tail - LRU's choice is always a candidate of the ranking. O(n), not the order of victim()
 * exactly. Until 2026-12-05 it ranked every resident block by density for each call:
 * 2.5 ms at 65,536 blocks and 9.7 ms at 262,144 under the pool's mutex, for every 16 slots
 * write-back cleaned (LRU's peek: 0.1 us). */
static uint32_t hd_peek(void *st, uint32_t *ids, uint32_t n)
{
	struct hd *p = st;
	uint32_t k = 0;
	bool prob_first = p->adm && p->prob.len > p->target;
	if (prob_first)
		for (uint32_t id = p->prob.tail; id != KVT_IDL_NIL && k < n; id = p->plinks[id].prev)
			ids[k++] = id;
	for (uint32_t id = p->lru.tail; id != KVT_IDL_NIL && k < n; id = p->links[id].prev)
		if (!prob_first || !p->inprob[id]) /* those were listed above */
			ids[k++] = id;
	return k;
}

static uint32_t hd_resident(const void *st)
{
	const struct hd *p = st;
	return p->n;
}

const struct kvt_evict_ops kvt__evict_hd_ops = {
    .name = "hd",
    .create = hd_create,
    .destroy = hd_destroy,
    .insert = hd_insert,
    .touch = hd_touch,
    .refresh = hd_refresh,
    .remove = hd_remove,
    .expire = hd_expire,
    .victim = hd_victim,
    .mark = hd_mark,
    .victim_marked = hd_victim_marked,
    .peek = hd_peek,
    .resident = hd_resident,
};

const struct kvt_evict_ops kvt__evict_hda_ops = {
    .name = "hda",
    .create = hda_create,
    .destroy = hd_destroy,
    .insert = hd_insert,
    .touch = hd_touch,
    .refresh = hd_refresh,
    .remove = hd_remove,
    .expire = hd_expire,
    .victim = hd_victim,
    .mark = hd_mark,
    .victim_marked = hd_victim_marked,
    .peek = hd_peek,
    .resident = hd_resident,
};
