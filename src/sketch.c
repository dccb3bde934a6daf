/*
 * sketch.c - admission for deeper tiers. Writing a chunk to NVMe costs endurance and
 * bandwidth, and most chunks (one user's unique question, an agent's one-off tool output)
 * are never read again; a chunk that has been seen a few times recently is likely to be
 * seen again. Counting that exactly would need a table as large as the key space, so this
 * is a count-min sketch (TinyLFU, Einziger et al.): 4 rows of small saturating counters,
 * each key hashed to one counter per row, the estimate the smallest of the four; every
 * 10 x width additions all counters are halved, which turns counts into a recency-weighted
 * popularity and bounds the error. Updates are conservative (only counters equal to the
 * minimum grow), which keeps over-estimates low. An optional doorkeeper takes the first
 * sighting of a key so one-off keys do not occupy the counters. It is src/ghost.h's pair of
 * alternating Bloom filters sized for one period's additions (16 bits per key), not one
 * Bloom filter of 8 bits per counter cleared at halving: KV traffic is mostly first
 * sightings, so a period brings up to 10 x width distinct keys and that filter ended each
 * period ~92 % full, calling most new keys "seen" (every estimate one too high, min_freq=2
 * admitting nearly everything).
 *
 * The admission decision layers the cheap checks around the sketch: minimum prefix length,
 * the cost model's "recomputing this chunk is cheaper than restoring it from that tier",
 * and the caller's write budget, asked last so it is charged only for real writes.
 */
#include <errno.h>
#include <string.h>

#include "cost.h"
#include "ghost.h"
#include "sketch.h"

#define ROWS 4

struct kvt_sketch {
	uint8_t *cnt; /* ROWS * width */
	struct kvt_ghost *door; /* first sightings of the last period or two */
	uint64_t width, mask;
	uint64_t adds, period, halvings;
	uint32_t max;
};

static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

int kvt__sketch_create(uint64_t width, uint32_t max_count, bool doorkeeper, struct kvt_sketch **out)
{
	if (!out || !max_count || max_count > 255 || width > (1ull << 32))
		return -EINVAL;
	uint64_t w = 64;
	while (w < width)
		w <<= 1;
	struct kvt_sketch *s = kvt__calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cnt = kvt__calloc(ROWS, w);
	if (!s->cnt)
		goto fail;
	/* a key seen once is remembered for between half a period and a period of additions
	 * (at most one distinct key per addition): 20 B per counter column */
	if (doorkeeper && kvt__ghost_create((uint32_t)KVT_MIN(10 * w, UINT32_MAX), &s->door) < 0)
		goto fail;
	s->width = w;
	s->mask = w - 1;
	s->period = 10 * w;
	s->max = max_count;
	*out = s;
	return 0;
fail:
	kvt__free(s->cnt);
	kvt__free(s);
	return -ENOMEM;
}

void kvt__sketch_destroy(struct kvt_sketch *s)
{
	if (!s)
		return;
	kvt__ghost_destroy(s->door);
	kvt__free(s->cnt);
	kvt__free(s);
}

uint64_t kvt__sketch_width(const struct kvt_sketch *s)
{
	return s->width;
}

uint64_t kvt__sketch_halvings(const struct kvt_sketch *s)
{
	return s->halvings;
}

/* Row r's counter: one 64-bit mix split into four independent-enough indices, each row
 * with its own seed so collisions in one row are unlikely to repeat in another. */
static uint64_t slot(const struct kvt_sketch *s, uint64_t h, int r)
{
	uint64_t x = mix(h + 0x9e3779b97f4a7c15ull * (uint64_t)(r + 1));
	return (uint64_t)r * s->width + (x & s->mask);
}

static uint32_t raw_min(const struct kvt_sketch *s, uint64_t h)
{
	uint32_t m = 255;
	for (int r = 0; r < ROWS; r++) {
		uint8_t c = s->cnt[slot(s, h, r)];
		if (c < m)
			m = c;
	}
	return m;
}

uint32_t kvt__sketch_estimate(const struct kvt_sketch *s, uint64_t h)
{
	uint32_t e = raw_min(s, h);
	if (s->door && kvt__ghost_test(s->door, h))
		e++;
	return KVT_MIN(e, s->max);
}

void kvt__sketch_halve(struct kvt_sketch *s)
{
	for (uint64_t i = 0; i < ROWS * s->width; i++)
		s->cnt[i] >>= 1;
	/* the doorkeeper ages by itself (its older generation is dropped as the newer fills) */
	s->adds /= 2;
	s->halvings++;
}

void kvt__sketch_record_n(struct kvt_sketch *s, uint64_t h, uint32_t n)
{
	if (!n)
		return;
	uint32_t left = n;
	if (s->door && !kvt__ghost_test(s->door, h)) {
		kvt__ghost_add(s->door, h);
		left--;
	}
	if (left) {
		/* conservative update by `left`: each counter rises to at least min + left */
		uint32_t m = raw_min(s, h);
		/* the doorkeeper already stands for one access */
		uint32_t cap = s->door ? s->max - 1 : s->max;
		uint32_t to = KVT_MIN(m + left, cap);
		if (m < cap)
			for (int r = 0; r < ROWS; r++) {
				uint8_t *c = &s->cnt[slot(s, h, r)];
				if (*c < to)
					*c = (uint8_t)to;
			}
	}
	s->adds += n;
	if (s->adds >= s->period)
		kvt__sketch_halve(s);
}

void kvt__sketch_record(struct kvt_sketch *s, uint64_t h)
{
	kvt__sketch_record_n(s, h, 1);
}

uint32_t kvt__sketch_add(struct kvt_sketch *s, uint64_t h)
{
	kvt__sketch_record(s, h);
	return kvt__sketch_estimate(s, h);
}

/* ------------------------------------------------------------------ admission */

struct kvt_admit {
	struct kvt_admit_cfg cfg;
	struct kvt_sketch *sketch;
	/* predict=chain: children first seen under each parent (a count-min without a
	 * doorkeeper), and the chunks this rule admitted as a chain's continuation */
	struct kvt_sketch *kids;
	struct kvt_ghost *cont;
	/* and the chunks of new chains seen lately, with how many of them were seen again:
	 * the measured chance that a new chain (a first turn, a first read of a document) is
	 * reused, decayed by half every `width` new chunks */
	struct kvt_ghost *fresh;
	double fresh_n, fresh_reused;
};

/* predict=chain writes a new chain's chunks while at least this share of them is read
 * again (at most two writes per hit); below it, only reused and continuing chunks */
#define NEW_CHAIN_MIN_REUSE 0.5

int kvt__admit_predict_parse(const char *name)
{
	if (!name || !strcmp(name, "off"))
		return KVT_PREDICT_OFF;
	if (!strcmp(name, "chain"))
		return KVT_PREDICT_CHAIN;
	return -EINVAL;
}

int kvt__admit_create(const struct kvt_admit_cfg *cfg, struct kvt_admit **out)
{
	if (!cfg || !out || !cfg->min_freq || cfg->min_freq > 255 ||
	    (cfg->predict != KVT_PREDICT_OFF && cfg->predict != KVT_PREDICT_CHAIN))
		return -EINVAL;
	if (cfg->cost && (cfg->cost_tier < 0 || cfg->cost_tier >= kvt_cost_tier_count(cfg->cost)))
		return -EINVAL;
	struct kvt_admit *a = kvt__calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->cfg = *cfg;
	uint32_t max = KVT_MAX(15u, cfg->min_freq);
	uint64_t width = cfg->sketch_width ? cfg->sketch_width : 4096;
	int rc = kvt__sketch_create(width, max, cfg->doorkeeper, &a->sketch);
	if (!rc && cfg->predict == KVT_PREDICT_CHAIN) {
		rc = kvt__sketch_create(width, 15, false, &a->kids);
		if (!rc)
			rc = kvt__ghost_create((uint32_t)KVT_MIN(width, UINT32_MAX), &a->cont);
		if (!rc) /* as long as the doorkeeper remembers a first sighting */
			rc = kvt__ghost_create((uint32_t)KVT_MIN(10 * width, UINT32_MAX),
					       &a->fresh);
	}
	if (rc < 0) {
		kvt__admit_destroy(a);
		return rc;
	}
	*out = a;
	return 0;
}

void kvt__admit_destroy(struct kvt_admit *a)
{
	if (!a)
		return;
	kvt__sketch_destroy(a->sketch);
	kvt__sketch_destroy(a->kids);
	kvt__ghost_destroy(a->cont);
	kvt__ghost_destroy(a->fresh);
	kvt__free(a);
}

struct kvt_sketch *kvt__admit_sketch(struct kvt_admit *a)
{
	return a->sketch;
}

void kvt__admit_record(struct kvt_admit *a, uint64_t khash)
{
	uint32_t e = kvt__sketch_add(a->sketch, khash);
	if (a->fresh && e == 2 && kvt__ghost_test(a->fresh, khash))
		a->fresh_reused += 1; /* a new chain's chunk, seen again */
}

/* predict=chain (src/sketch.h): does this chunk's reuse look likely? */
static bool chain_predicts(struct kvt_admit *a, uint64_t khash, uint64_t parent, bool full)
{
	uint32_t seen = kvt__sketch_estimate(a->sketch, khash);
	/* a first sighting of a full chunk: one more child under its parent (a partial last
	 * chunk is a prompt's end that the next turn replaces, not a branch) */
	if (parent && seen <= 1 && full)
		kvt__sketch_record(a->kids, parent);
	if (seen >= 2)
		return true;
	/* a partial chunk seen once is the end of a prompt, whose id the next turn replaces
	 * (it extends the chunk): not written, not counted below */
	if (!full)
		return false;
	bool cont = parent && (kvt__ghost_test(a->cont, parent) ||
		    (kvt__sketch_estimate(a->sketch, parent) >= 2 &&
		     kvt__sketch_estimate(a->kids, parent) <= 1));
	if (cont) {
		kvt__ghost_add(a->cont, khash);
		return true;
	}
	/* a new chain's chunk: written while such chunks are measured to be reused often
	 * enough; reuses are counted in kvt__admit_record whether or not the chunk was
	 * written, so the rate is learned while nothing is written (a Laplace prior, which
	 * the first new chunk already outweighs) */
	if (seen <= 1) {
		kvt__ghost_add(a->fresh, khash);
		if ((a->fresh_n += 1) >= (double)kvt__sketch_width(a->sketch))
			a->fresh_n /= 2, a->fresh_reused /= 2;
	}
	return (a->fresh_reused + 1) >= NEW_CHAIN_MIN_REUSE * (a->fresh_n + 2);
}

int kvt__admit_decide(struct kvt_admit *a, uint64_t khash, uint64_t parent, uint64_t begin,
		      uint32_t n_tokens, uint64_t bytes)
{
	const struct kvt_admit_cfg *c = &a->cfg;
	if (begin + n_tokens < c->min_prefix_tokens)
		return KVT_ADMIT_SHORT;
	if (c->min_freq > 1 && kvt__sketch_estimate(a->sketch, khash) < c->min_freq)
		return KVT_ADMIT_COLD;
	if (c->predict == KVT_PREDICT_CHAIN &&
	    !chain_predicts(a, khash, parent, !c->chunk_tokens || n_tokens >= c->chunk_tokens))
		return KVT_ADMIT_UNPREDICTED;
	if (c->cost) {
		/* The chunk is read as part of its prefix, so its latency is shared with the
		 * chunks before it: compare its marginal restore time with the recompute time
		 * of its tokens at their position, which grows with the position. */
		double restore = kvt_cost_restore_s(c->cost, c->cost_tier, begin + n_tokens) -
				 kvt_cost_restore_s(c->cost, c->cost_tier, begin);
		if (restore >= kvt_cost_recompute_s(c->cost, begin, begin + n_tokens))
			return KVT_ADMIT_RECOMPUTE;
	}
	if (c->budget && !c->budget(c->budget_arg, bytes))
		return KVT_ADMIT_BUDGET;
	return KVT_ADMIT_YES;
}

const char *kvt__admit_verdict_name(int verdict)
{
	static const char *names[] = {
	    "admit", "cold", "short-prefix", "recompute-cheaper", "write-budget", "unpredicted"};
	return verdict >= 0 && verdict < (int)KVT_ARRAY_SIZE(names) ? names[verdict] : "?";
}
