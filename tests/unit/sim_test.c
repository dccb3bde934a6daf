/*
 * sim_test.c - the replay simulator: its LRU agrees hit for hit with an independent, naive
 * implementation written here; Belady (MIN) bounds every policy on random prefix traces;
 * the default policy beats LRU at small capacity on each generated workload and is no
 * worse at large capacity; two tiers, admission and the TTFT model behave. Also: a trace
 * whose ids are not prefix hashes is refused with its line (MIN was no bound there); read
 * bytes go to the tier the lookup found a block in; requests that all arrive at once are
 * an unbounded load; the fleet's min-heap agrees with a scan; leaf-first eviction through
 * the policies' marks picks the very victims the walk picks, at a bounded cost per victim.
 * kvt-test-labels: onethread (no second thread, so nothing for TSan to check: scripts/test.sh
 * leaves it out of the TSan pass)
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "cost.h"
#include "evict.h"
#include "internal.h"
#include "sim.h"
#include "sketch.h"
#include "trace.h"

#define NEAR_REL(a, b, rel) assert_true(fabs((a) - (b)) <= (rel) * fabs(b))

static uint64_t rng_state;
static uint32_t rnd(uint32_t n)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return n ? (uint32_t)((rng_state >> 33) % n) : 0;
}

/* Requests that share prefixes of earlier ones: ids form a tree, as real traces do. */
static struct kvt_trace *random_trace(uint64_t seed, uint32_t n_req, uint32_t max_blocks)
{
	rng_state = seed;
	struct kvt_trace *t;
	assert_int_equal(kvt__trace_create(512, &t), 0);
	uint64_t next_id = 1, ids[64];
	for (uint32_t r = 0; r < n_req; r++) {
		uint32_t n = 0;
		if (t->n && rnd(4)) {
			const struct kvt_trace_req *base =
			    &t->req[t->n - 1 - rnd((uint32_t)KVT_MIN(t->n, 30u))];
			n = rnd(base->n_blocks + 1);
			memcpy(ids, kvt__trace_blocks(t, base), n * sizeof(uint64_t));
		}
		uint32_t total = KVT_MIN(max_blocks, n + 1 + rnd(max_blocks));
		while (n < total)
			ids[n++] = next_id++;
		uint32_t input = n * 512 - rnd(512);
		assert_int_equal(kvt__trace_add(t, r * 10.0, input, 1, ids, n), 0);
	}
	return t;
}

/* ---- an independent LRU: arrays, linear scans, stamps */
struct naive {
	uint64_t id[4096], parent[4096], stamp[4096];
	uint32_t n, cap;
	uint64_t pid[65536], ppar[65536]; /* first-sight parents */
	uint32_t np;
};

static int nfind(struct naive *c, uint64_t id)
{
	for (uint32_t i = 0; i < c->n; i++)
		if (c->id[i] == id)
			return (int)i;
	return -1;
}

static uint64_t nparent(struct naive *c, uint64_t id, uint64_t prev)
{
	for (uint32_t i = 0; i < c->np; i++)
		if (c->pid[i] == id)
			return c->ppar[i];
	c->pid[c->np] = id;
	c->ppar[c->np++] = prev;
	return prev;
}

static void naive_run(const struct kvt_trace *t, uint32_t cap, bool leaf_first, uint64_t *hits,
		      uint64_t *hit_tokens)
{
	struct naive *c = calloc(1, sizeof(*c));
	c->cap = cap;
	uint64_t clock = 0;
	*hits = *hit_tokens = 0;
	for (size_t r = 0; r < t->n; r++) {
		const struct kvt_trace_req *q = &t->req[r];
		const uint64_t *ids = kvt__trace_blocks(t, q);
		uint32_t h = 0;
		while (h < q->n_blocks && nfind(c, ids[h]) >= 0) {
			*hit_tokens += kvt__trace_block_len(t, q, h);
			h++;
		}
		*hits += h;
		for (uint32_t i = 0; i < q->n_blocks; i++) {
			uint64_t par = nparent(c, ids[i], i ? ids[i - 1] : 0);
			int at = nfind(c, ids[i]);
			if (at >= 0) {
				c->stamp[at] = ++clock;
				continue;
			}
			if (c->n == c->cap) {
				int victim = -1;
				for (uint32_t j = 0; j < c->n; j++) {
					bool leaf = true;
					for (uint32_t k = 0; leaf_first && k < c->n; k++)
						if (c->parent[k] == c->id[j] && k != j)
							leaf = false;
					/* the incoming block already counts as its parent's child */
					if (leaf_first && c->id[j] == par)
						leaf = false;
					if (leaf && (victim < 0 || c->stamp[j] < c->stamp[victim]))
						victim = (int)j;
				}
				bool any = victim < 0; /* no leaf: the LRU one but the prefix */
				for (uint32_t j = 0; any && j < c->n; j++)
					if (c->id[j] != par &&
					    (victim < 0 || c->stamp[j] < c->stamp[victim]))
						victim = (int)j;
				if (victim < 0)
					victim = 0; /* only the prefix is left */
				c->n--;
				c->id[victim] = c->id[c->n];
				c->parent[victim] = c->parent[c->n];
				c->stamp[victim] = c->stamp[c->n];
			}
			c->id[c->n] = ids[i];
			c->parent[c->n] = par;
			c->stamp[c->n++] = ++clock;
		}
	}
	free(c);
}

static void test_lru_matches_naive(void **state)
{
	(void)state;
	for (uint64_t seed = 1; seed <= 6; seed++) {
		struct kvt_trace *t = random_trace(seed, 400, 12);
		uint32_t caps[] = {1, 2, 5, 16, 40, 300};
		for (size_t ci = 0; ci < sizeof(caps) / sizeof(caps[0]); ci++) {
			for (int lf = 0; lf < 2; lf++) {
				struct kvt_sim_opts o = {.policy = "lru",
							 .dram_tokens = caps[ci] * 512ull,
							 .leaf_first = lf};
				struct kvt_sim_result res;
				assert_int_equal(kvt__sim_run(t, &o, &res), 0);
				uint64_t hits, tok;
				naive_run(t, caps[ci], lf, &hits, &tok);
				if (res.hit_blocks != hits || res.hit_tokens != tok)
					fail_msg(
					    "seed %llu cap %u leaf_first %d: sim %llu/%llu naive "
					    "%llu/%llu",
					    (unsigned long long)seed, caps[ci], lf,
					    (unsigned long long)res.hit_blocks,
					    (unsigned long long)res.hit_tokens,
					    (unsigned long long)hits, (unsigned long long)tok);
				assert_int_equal(res.tier_hit_blocks[KVT_SIM_DRAM], hits);
			}
		}
		kvt__trace_destroy(t);
	}
}

static void test_belady_bounds(void **state)
{
	(void)state;
	const char *policies[] = {"lru", "pslru", "arc"};
	for (uint64_t seed = 11; seed <= 18; seed++) {
		struct kvt_trace *t = random_trace(seed, 1500, 20);
		uint32_t caps[] = {3, 10, 40, 150};
		for (size_t ci = 0; ci < 4; ci++) {
			double bel;
			assert_int_equal(kvt__sim_belady(t, caps[ci], &bel, NULL), 0);
			for (size_t p = 0; p < 3; p++) {
				struct kvt_evict *probe;
				if (kvt__evict_create(policies[p], 4, &probe) < 0)
					continue; /* "arc" lives in evict.c */
				kvt__evict_destroy(probe);
				for (int lf = 0; lf < 2; lf++) {
					struct kvt_sim_opts o = {.policy = policies[p],
								 .dram_tokens = caps[ci] * 512ull,
								 .leaf_first = lf};
					struct kvt_sim_result r;
					assert_int_equal(kvt__sim_run(t, &o, &r), 0);
					if (r.block_hit_ratio > bel + 1e-12)
						fail_msg("%s cap %u: %.4f > belady %.4f",
							 policies[p], caps[ci], r.block_hit_ratio,
							 bel);
				}
			}
		}
		/* a cache larger than the trace: MIN hits every repeat */
		double bel, tok;
		assert_int_equal(kvt__sim_belady(t, 1u << 30, &bel, &tok), 0);
		struct kvt_sim_opts o = {.policy = "lru", .dram_tokens = 1ull << 40};
		struct kvt_sim_result r;
		assert_int_equal(kvt__sim_run(t, &o, &r), 0);
		assert_true(r.block_hit_ratio == bel);
		assert_true(r.token_hit_ratio == tok);
		kvt__trace_destroy(t);
	}
}

/* The default policy against LRU on the generator's workloads (leaf-first, DRAM only). */
static void test_default_beats_lru(void **state)
{
	(void)state;
	for (int w = 0; w < 3; w++) {
		struct kvt_gen_opts g;
		kvt__gen_defaults(w, &g);
		struct kvt_trace *t;
		assert_int_equal(kvt__trace_create(512, &t), 0);
		assert_int_equal(kvt__gen_run(&g, t), 0);
		/* small: 64k and 128k tokens; large: 8M tokens (docs/COST_MODEL.md has the
		 * whole sweep, including where the two are within noise of each other) */
		uint64_t small[] = {128, 256}, large[] = {16384};
		for (int s = 0; s < 3; s++) {
			uint64_t cap = s < 2 ? small[s] : large[s - 2];
			struct kvt_sim_opts o = {
			    .dram_tokens = cap * 512, .leaf_first = true, .belady = true};
			struct kvt_sim_result d, l;
			o.policy = KVT_SIM_DEFAULT_POLICY;
			assert_int_equal(kvt__sim_run(t, &o, &d), 0);
			o.policy = "lru";
			o.belady = false;
			assert_int_equal(kvt__sim_run(t, &o, &l), 0);
			print_message(
			    "%-5s %6llu blocks: %s %.4f  lru %.4f  belady %.4f  (%.2fs)\n",
			    kvt__gen_workload_name(w), (unsigned long long)cap,
			    KVT_SIM_DEFAULT_POLICY, d.block_hit_ratio, l.block_hit_ratio,
			    d.belady_block_hit_ratio, d.elapsed_s);
			if (s < 2)
				assert_true(d.block_hit_ratio > l.block_hit_ratio);
			else
				assert_true(d.block_hit_ratio >= l.block_hit_ratio - 1e-9);
			assert_true(d.block_hit_ratio <= d.belady_block_hit_ratio + 1e-12);
		}
		kvt__trace_destroy(t);
	}
}

/* Workload w's generated trace (512-token blocks) of n requests from seed. */
static struct kvt_trace *gen_trace(int w, uint64_t seed, uint64_t n)
{
	struct kvt_gen_opts g;
	kvt__gen_defaults(w, &g);
	g.requests = n;
	g.seed = seed;
	struct kvt_trace *t;
	assert_int_equal(kvt__trace_create(512, &t), 0);
	assert_int_equal(kvt__gen_run(&g, t), 0);
	return t;
}

/* A property over seeds, workloads and capacities rather than one seed's outcome: the
 * default policy is never below LRU by more than 0.005 and above it on average. */
static void test_default_vs_lru_many_seeds(void **state)
{
	(void)state;
	const uint64_t caps[] = {65536, 262144, 1048576}; /* tokens */
	for (int w = 0; w < KVT_GEN_N; w++) {
		double sum = 0, worst = 1;
		int n = 0;
		for (uint64_t seed = 1; seed <= 4; seed++) {
			struct kvt_trace *t = gen_trace(w, seed, 2000);
			for (size_t c = 0; c < sizeof(caps) / sizeof(caps[0]); c++) {
				/* the default (hda, dram.partial_first) against plain LRU */
				struct kvt_sim_opts o = {.dram_tokens = caps[c], .leaf_first = true,
							 .partial_first = true};
				struct kvt_sim_result d, l;
				assert_int_equal(kvt__sim_run(t, &o, &d), 0);
				o.policy = "lru";
				o.partial_first = false;
				assert_int_equal(kvt__sim_run(t, &o, &l), 0);
				double diff = d.block_hit_ratio - l.block_hit_ratio;
				sum += diff;
				worst = diff < worst ? diff : worst;
				n++;
				if (diff < -0.005)
					fail_msg("%s seed %llu %llu tokens: %s %.4f < lru %.4f",
						 kvt__gen_workload_name(w), (unsigned long long)seed,
						 (unsigned long long)caps[c], KVT_SIM_DEFAULT_POLICY,
						 d.block_hit_ratio, l.block_hit_ratio);
			}
			kvt__trace_destroy(t);
		}
		print_message("%-12s %s - lru: mean %+.4f, worst %+.4f over %d runs\n",
			      kvt__gen_workload_name(w), KVT_SIM_DEFAULT_POLICY, sum / n, worst, n);
		assert_true(sum / n > 0);
	}
}

/* dram.partial_first (a prompt's partial last block goes first until hit) over seeds,
 * workloads and pool sizes, for plain LRU and the default policy: never more than 0.01
 * below the same policy without it at any point, not below it on average on any workload,
 * and a gain on chat, whose prompts end mid-block and are rarely asked again verbatim. */
static void test_partial_first_many_seeds(void **state)
{
	(void)state;
	const uint64_t caps[] = {65536, 262144, 1048576}; /* tokens */
	const char *pol[] = {"lru", KVT_SIM_DEFAULT_POLICY};
	for (int w = 0; w < KVT_GEN_N; w++) {
		double sum[2] = {0, 0}, worst[2] = {1, 1}, like = 0, on_p[2];
		int n = 0;
		for (uint64_t seed = 1; seed <= 4; seed++) {
			struct kvt_trace *t = gen_trace(w, seed, 2000);
			for (size_t c = 0; c < sizeof(caps) / sizeof(caps[0]); c++, n++)
				for (int p = 0; p < 2; p++) {
					struct kvt_sim_opts o = {.policy = pol[p],
								 .dram_tokens = caps[c],
								 .leaf_first = true};
					struct kvt_sim_result off, on;
					assert_int_equal(kvt__sim_run(t, &o, &off), 0);
					o.partial_first = true;
					assert_int_equal(kvt__sim_run(t, &o, &on), 0);
					double diff = on.block_hit_ratio - off.block_hit_ratio;
					on_p[p] = on.block_hit_ratio;
					if (p == 1) /* the default against LRU, both with the rule */
						like += on_p[1] - on_p[0];
					sum[p] += diff;
					worst[p] = diff < worst[p] ? diff : worst[p];
					if (diff < -0.01)
						fail_msg("%s seed %llu %llu tokens: %s %.4f with "
							 "partial_first, %.4f without",
							 kvt__gen_workload_name(w),
							 (unsigned long long)seed,
							 (unsigned long long)caps[c], pol[p],
							 on.block_hit_ratio, off.block_hit_ratio);
				}
			kvt__trace_destroy(t);
		}
		print_message("%-12s %s - lru, both with partial_first: mean %+.4f\n",
			      kvt__gen_workload_name(w), KVT_SIM_DEFAULT_POLICY, like / n);
		for (int p = 0; p < 2; p++) {
			print_message("%-12s %-4s partial_first - without: mean %+.4f, worst %+.4f "
				      "over %d runs\n",
				      kvt__gen_workload_name(w), pol[p], sum[p] / n, worst[p], n);
			assert_true(sum[p] / n >= -0.0005);
			if (w == KVT_GEN_CHAT)
				assert_true(sum[p] / n > 0.005);
		}
	}
}

static double hit_ratio(const struct kvt_trace *t, const char *policy, uint64_t tokens)
{
	struct kvt_sim_opts o = {.policy = policy, .dram_tokens = tokens, .leaf_first = true};
	struct kvt_sim_result r;
	assert_int_equal(kvt__sim_run(t, &o, &r), 0);
	return r.block_hit_ratio;
}

/* DRAM admission pays where reuse predicts reuse (the conversation workload: power-law
 * turn counts) and costs nothing where it does not (its memoryless geometric variant):
 * over seeds and two pool sizes, hda beats hd and LRU on the first on average, and is
 * never below LRU by more than 0.005 on either. */
static void test_admission_where_reuse_predicts(void **state)
{
	(void)state;
	const uint64_t caps[] = {262144, 1000000};
	for (int shape = 0; shape < 2; shape++) {
		double vs_hd = 0, vs_lru = 0;
		int n = 0;
		for (uint64_t seed = 1; seed <= 3; seed++) {
			struct kvt_gen_opts g;
			kvt__gen_defaults(KVT_GEN_CONV, &g);
			g.requests = 4000;
			g.seed = seed;
			if (shape) /* the memoryless shape of earlier versions */
				g.turn_alpha = 0, g.pace_sigma = 0, g.think_s = 200;
			struct kvt_trace *t;
			assert_int_equal(kvt__trace_create(512, &t), 0);
			assert_int_equal(kvt__gen_run(&g, t), 0);
			for (size_t c = 0; c < 2; c++) {
				double a = hit_ratio(t, "hda", caps[c]), h = hit_ratio(t, "hd", caps[c]);
				double l = hit_ratio(t, "lru", caps[c]);
				if (a < l - 0.005)
					fail_msg("shape %d seed %llu %llu tokens: hda %.4f < lru %.4f",
						 shape, (unsigned long long)seed,
						 (unsigned long long)caps[c], a, l);
				vs_hd += a - h, vs_lru += a - l, n++;
			}
			kvt__trace_destroy(t);
		}
		print_message("%s: hda - hd %+.4f, hda - lru %+.4f on average over %d runs\n",
			      shape ? "geometric turns" : "power-law turns", vs_hd / n, vs_lru / n, n);
		if (!shape) {
			assert_true(vs_hd / n > 0.002);
			assert_true(vs_lru / n > 0.005);
		}
	}
}

/* The fleet: one GPU under the conversation trace's load is overloaded (utilisation > 1, an
 * unbounded queue), --gpus auto sizes it to the load, and more GPUs never raise TTFT. */
static void test_fleet_sizing(void **state)
{
	(void)state;
	struct kvt_gen_opts g;
	kvt__gen_defaults(KVT_GEN_CONV, &g);
	g.requests = 2000;
	struct kvt_trace *t;
	assert_int_equal(kvt__trace_create(512, &t), 0);
	assert_int_equal(kvt__gen_run(&g, t), 0);
	struct kvt_cost_params p;
	assert_int_equal(
	    kvt__cost_params_preset("llama3.1-70b", "h100-sxm", 0.5, 1, "dram,nvme", &p), 0);
	struct kvt_cost *c;
	assert_int_equal(kvt__cost_create_params(&p, &c), 0);
	struct kvt_sim_opts o = {.dram_tokens = 1000000, .leaf_first = true, .cost = c, .gpus = 1};
	struct kvt_sim_result one, aut, more;
	assert_int_equal(kvt__sim_run(t, &o, &one), 0);
	assert_int_equal(one.gpus, 1);
	assert_true(one.nocache_utilization > 1);
	o.gpus = 0;
	assert_int_equal(kvt__sim_run(t, &o, &aut), 0);
	assert_int_equal(aut.gpus, kvt__sim_auto_gpus(t, c));
	assert_true(aut.gpus > 1);
	assert_true(aut.nocache_utilization <= KVT_SIM_AUTO_UTIL + 1e-9);
	assert_true(aut.nocache_utilization > KVT_SIM_AUTO_UTIL * (aut.gpus - 1) / aut.gpus);
	assert_true(aut.ttft_p50_s < one.ttft_p50_s / 10);
	/* the same work, spread over more GPUs */
	NEAR_REL(aut.gpu_busy_s, one.gpu_busy_s, 1e-9);
	o.gpus = aut.gpus * 2;
	assert_int_equal(kvt__sim_run(t, &o, &more), 0);
	assert_true(more.ttft_p99_s <= aut.ttft_p99_s + 1e-12);
	assert_true(more.ttft_p50_s <= aut.ttft_p50_s + 1e-12);
	o.gpus = KVT_SIM_MAX_GPUS + 1;
	assert_int_equal(kvt__sim_run(t, &o, &more), -EINVAL);
	kvt_cost_destroy(c);
	kvt__trace_destroy(t);
}

/* NVMe admission that predicts reuse, on conversation traffic where engaged users keep
 * going: admission.predict=chain (writing a continuation's blocks) keeps more hits than
 * the second-sighting rule and writes far less than storing everything; bytes written
 * per NVMe hit are reported. */
static void test_nvme_admission_predicts(void **state)
{
	(void)state;
	for (uint64_t seed = 1; seed <= 3; seed++) {
		struct kvt_gen_opts g;
		kvt__gen_defaults(KVT_GEN_CONV, &g);
		g.requests = 4000;
		g.seed = seed;
		g.end_prob = 0.97, g.think_s = 600, g.first_mean = 9000;
		g.long_frac = 0.15, g.long_end_prob = 0.12, g.long_think_s = 70;
		g.turn_alpha = 0, g.pace_sigma = 0; /* the two-class geometric shape */
		struct kvt_trace *t;
		assert_int_equal(kvt__trace_create(512, &t), 0);
		assert_int_equal(kvt__gen_run(&g, t), 0);
		struct kvt_cost_params p;
		assert_int_equal(
		    kvt__cost_params_preset("llama3.1-8b", "h100-sxm", 0.5, 1, "dram,nvme", &p), 0);
		struct kvt_cost *c;
		assert_int_equal(kvt__cost_create_params(&p, &c), 0);
		struct kvt_sim_opts o = {.dram_tokens = 1000000,
					 .nvme_tokens = 50000000,
					 .leaf_first = true,
					 .cost = c};
		struct kvt_sim_result all, twice, pred;
		assert_int_equal(kvt__sim_run(t, &o, &all), 0);
		o.admit_min_freq = 2;
		assert_int_equal(kvt__sim_run(t, &o, &twice), 0);
		o.admit_min_freq = 0;
		o.admit_predict = KVT_PREDICT_CHAIN;
		assert_int_equal(kvt__sim_run(t, &o, &pred), 0);
		print_message("seed %llu: all %.4f %.2f TB, twice %.4f %.2f TB, predict %.4f %.2f "
			      "TB (%.0f MiB per hit)\n",
			      (unsigned long long)seed, all.block_hit_ratio, all.write_bytes[1] / 1e12,
			      twice.block_hit_ratio, twice.write_bytes[1] / 1e12,
			      pred.block_hit_ratio, pred.write_bytes[1] / 1e12,
			      pred.nvme_bytes_per_hit / 1048576.0);
		assert_true(pred.block_hit_ratio > twice.block_hit_ratio);
		assert_true(pred.write_bytes[1] * 2 < all.write_bytes[1]);
		assert_true(pred.nvme_bytes_per_hit < all.nvme_bytes_per_hit);
		assert_true(all.nvme_bytes_per_hit > 0);
		o.admit_predict = 7;
		assert_int_equal(kvt__sim_run(t, &o, &pred), -EINVAL);
		kvt_cost_destroy(c);
		kvt__trace_destroy(t);
	}
}

/* admission.predict=chain (src/sketch.c, the store's rule) against writing every block,
 * the second-sighting rule and the offline bound (write only blocks used again), over
 * four seeds of four workloads (4,000 requests each; DRAM 1M + NVMe 50M tokens for
 * conversation, 128k + 4M for the others). Asserted: never fewer hits than the second-
 * sighting rule; where the generator's new chains are usually continued (chat, agent)
 * the hits of writing everything at a fraction of its bytes; on RAG a sixth of the bytes
 * for the hits of the second-sighting rule; on the fitted conversation shape under a
 * third of the bytes, while the bound shows that writing a quarter would lose nothing if
 * turn 2 could be told at turn 1 - the generator draws it independently of everything a
 * request shows, so no online rule can (docs/COST_MODEL.md). */
static void test_nvme_predict_many_seeds(void **state)
{
	(void)state;
	static const struct {
		enum kvt_gen_workload w;
		const char *name;
		uint64_t dram, nvme;
		double max_gap, max_bytes; /* mean hit gap to writing all; mean bytes share */
	} wl[] = {
	    {KVT_GEN_CONV, "conversation", 1000000, 50000000, 1.0, 0.30},
	    {KVT_GEN_CHAT, "chat", 131072, 4194304, 0.005, 0.80},
	    {KVT_GEN_AGENT, "agent", 131072, 4194304, 0.005, 0.95},
	    {KVT_GEN_RAG, "rag", 131072, 4194304, 0.035, 0.20},
	};
	struct kvt_cost_params p;
	assert_int_equal(kvt__cost_params_preset("llama3.1-8b", "h100-sxm", 0.5, 1, "dram,nvme", &p),
			 0);
	struct kvt_cost *c;
	assert_int_equal(kvt__cost_create_params(&p, &c), 0);
	for (size_t w = 0; w < sizeof(wl) / sizeof(wl[0]); w++) {
		double gap = 0, share = 0, over_twice = 0, bound_gap = 0, bound_share = 0;
		for (uint64_t seed = 1; seed <= 4; seed++) {
			struct kvt_gen_opts g;
			kvt__gen_defaults(wl[w].w, &g);
			g.requests = 4000;
			g.seed = seed;
			struct kvt_trace *t;
			assert_int_equal(kvt__trace_create(512, &t), 0);
			assert_int_equal(kvt__gen_run(&g, t), 0);
			struct kvt_sim_opts o = {.dram_tokens = wl[w].dram,
						 .nvme_tokens = wl[w].nvme,
						 .leaf_first = true,
						 .cost = c};
			struct kvt_sim_result all, twice, chain, bound;
			assert_int_equal(kvt__sim_run(t, &o, &all), 0);
			o.admit_min_freq = 2;
			assert_int_equal(kvt__sim_run(t, &o, &twice), 0);
			o.admit_min_freq = 0;
			o.admit_predict = KVT_PREDICT_CHAIN;
			assert_int_equal(kvt__sim_run(t, &o, &chain), 0);
			o.admit_predict = KVT_PREDICT_OFF;
			o.admit_oracle = true;
			assert_int_equal(kvt__sim_run(t, &o, &bound), 0);
			double b_all = (double)all.write_bytes[1];
			print_message("%s seed %llu: all %.4f %.2f TB, twice %.4f %.2f TB, chain "
				      "%.4f %.2f TB (%.0f MiB per NVMe hit), bound %.4f %.2f TB\n",
				      wl[w].name, (unsigned long long)seed, all.block_hit_ratio,
				      b_all / 1e12, twice.block_hit_ratio,
				      twice.write_bytes[1] / 1e12, chain.block_hit_ratio,
				      chain.write_bytes[1] / 1e12, chain.nvme_bytes_per_hit / 1048576.0,
				      bound.block_hit_ratio, bound.write_bytes[1] / 1e12);
			assert_true(b_all > 0 && chain.nvme_bytes_per_any_hit > 0);
			assert_true(chain.block_hit_ratio >= twice.block_hit_ratio - 0.001);
			assert_true(chain.write_bytes[1] < all.write_bytes[1]);
			gap += (all.block_hit_ratio - chain.block_hit_ratio) / 4;
			share += chain.write_bytes[1] / b_all / 4;
			over_twice += (chain.block_hit_ratio - twice.block_hit_ratio) / 4;
			bound_gap += (all.block_hit_ratio - bound.block_hit_ratio) / 4;
			bound_share += bound.write_bytes[1] / b_all / 4;
			kvt__trace_destroy(t);
		}
		print_message("%s mean: chain %.4f below all at %.2f of its bytes (%.4f above "
			      "twice); bound %.4f below at %.2f\n",
			      wl[w].name, gap, share, over_twice, bound_gap, bound_share);
		assert_true(gap <= wl[w].max_gap);
		assert_true(share <= wl[w].max_bytes);
		assert_true(over_twice > 0.003 || wl[w].w == KVT_GEN_RAG);
		assert_true(bound_gap <= 0.001);
		if (wl[w].w == KVT_GEN_CONV) /* the goal needs prediction, not capacity */
			assert_true(bound_share <= 0.5);
	}
	kvt_cost_destroy(c);
}

/* One policy for the store and the replay: dram.policy's default is the replay's default,
 * and the DRAM pool accepts it. */
static void test_store_and_replay_share_the_default(void **state)
{
	(void)state;
	struct kvt_config *cfg;
	assert_int_equal(kvt_config_create(&cfg), 0);
	assert_string_equal(kvt__cfg_str(cfg, "dram.policy"), KVT_SIM_DEFAULT_POLICY);
	struct kvt_evict *e;
	assert_int_equal(kvt__evict_create(kvt__cfg_str(cfg, "dram.policy"), 16, &e), 0);
	assert_string_equal(kvt__evict_name(e), "hda");
	kvt__evict_destroy(e);
	/* the partial-block rule: one key, on by default, read by the store's DRAM pool
	 * (src/engine.c) and by kvtier replay (tools/cmd_replay.c) */
	assert_true(kvt__cfg_bool(cfg, "dram.partial_first"));
	kvt_config_destroy(cfg);
}

static void test_two_tiers_admission_ttft(void **state)
{
	(void)state;
	struct kvt_gen_opts g;
	kvt__gen_defaults(KVT_GEN_CHAT, &g);
	g.requests = 3000;
	g.rate = 2;
	struct kvt_trace *t;
	assert_int_equal(kvt__trace_create(512, &t), 0);
	assert_int_equal(kvt__gen_run(&g, t), 0);
	struct kvt_cost_params p;
	assert_int_equal(
	    kvt__cost_params_preset("llama3.1-8b", "h100-sxm", 0.5, 1, "dram,nvme", &p), 0);
	struct kvt_cost *c;
	assert_int_equal(kvt__cost_create_params(&p, &c), 0);
	struct kvt_sim_opts o = {.policy = "lru",
				 .dram_tokens = 64 * 512,
				 .nvme_tokens = 4096 * 512,
				 .leaf_first = true,
				 .cost = c,
				 .prefetch = true,
				 .belady = true};
	struct kvt_sim_result a, b, dram_only;
	assert_int_equal(kvt__sim_run(t, &o, &a), 0);
	/* per-tier ratios add up; NVMe serves what DRAM cannot hold */
	assert_true(a.tier_hit_blocks[0] + a.tier_hit_blocks[1] == a.hit_blocks);
	assert_true(a.tier_hit_blocks[1] > 0);
	assert_true(a.read_bytes[1] > 0 && a.write_bytes[1] > 0);
	assert_int_equal(a.write_bytes[1], a.inserts[1] == 0 ? 0 : a.write_bytes[1]);
	assert_true(a.belady_block_hit_ratio >= a.block_hit_ratio);
	o.nvme_tokens = 0;
	o.belady = false;
	assert_int_equal(kvt__sim_run(t, &o, &dram_only), 0);
	assert_true(a.block_hit_ratio > dram_only.block_hit_ratio);
	/* TTFT: a cache never makes the median worse than recomputing everything */
	assert_true(a.ttft_p50_s > 0 && a.ttft_p50_s <= a.nocache_ttft_p50_s);
	assert_true(a.ttft_p99_s >= a.ttft_p50_s);
	assert_true(a.prefill_tokens_saved > 0 && a.prefill_tokens_saved <= a.hit_tokens);
	assert_true(a.gpu_busy_s < a.nocache_gpu_busy_s);
	/* admission: only chunks seen twice go to NVMe: fewer bytes written */
	o.nvme_tokens = 4096 * 512;
	o.admit_min_freq = 2;
	assert_int_equal(kvt__sim_run(t, &o, &b), 0);
	assert_true(b.write_bytes[1] < a.write_bytes[1]);
	assert_true(b.nvme_writes_skipped > 0);
	/* bad options */
	o.policy = "no-such-policy";
	assert_int_equal(kvt__sim_run(t, &o, &b), -EINVAL);
	kvt_cost_destroy(c);
	kvt__trace_destroy(t);
}

static struct kvt_trace *parse_trace(const char *text)
{
	struct kvt_trace *t;
	assert_int_equal(kvt__trace_create(512, &t), 0);
	char err[200];
	if (kvt__trace_parse(t, text, strlen(text), err, sizeof(err)))
		fail_msg("parse: %s", err);
	return t;
}

/* Ids are meant to be prefix hashes. A reviewer's fuzzer found a 4-line trace breaking it
 * where LRU hit 0.2857 and the Belady "bound" 0.1429 (an id under another prefix counted
 * as a hit); such traces were then refused. A KV block is its id and its prefix, as the
 * store's chained keys are, so each (id, parent) is now a block of its own: the trace runs,
 * MIN bounds every policy, and the first case is named with its lines (lines of the file:
 * the blank one is counted). */
static void test_ids_not_prefix_hashes(void **state)
{
	(void)state;
	struct kvt_trace *t =
	    parse_trace("{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 1, "
			"\"hash_ids\": [3]}\n"
			"\n"
			"{\"timestamp\": 1000, \"input_length\": 1536, \"output_length\": 1, "
			"\"hash_ids\": [1, 0, 3]}\n"
			"{\"timestamp\": 2000, \"input_length\": 512, \"output_length\": 1, "
			"\"hash_ids\": [0]}\n"
			"{\"timestamp\": 3000, \"input_length\": 1024, \"output_length\": 1, "
			"\"hash_ids\": [1, 0]}\n");
	char note[300];
	/* 3 under 0 (line 3) and 0 at the start (line 4) are blocks of their own */
	assert_int_equal(kvt__sim_check_trace(t, note, sizeof(note)), 2);
	assert_non_null(
	    strstr(note, "line 3: hash id 3 follows 0 here but starts hash_ids on line 1"));
	const char *policies[] = {"lru", "arc", "hda"};
	for (uint64_t cap = 1; cap <= 4; cap++) {
		double bel;
		assert_int_equal(kvt__sim_belady(t, cap, &bel, NULL), 0);
		for (int p = 0; p < 3; p++) {
			struct kvt_sim_opts o = {.policy = policies[p],
						 .dram_tokens = cap * 512,
						 .leaf_first = true,
						 .belady = true};
			struct kvt_sim_result r;
			assert_int_equal(kvt__sim_run(t, &o, &r), 0);
			if (r.block_hit_ratio > bel + 1e-9)
				fail_msg("%s at %llu blocks: %.4f over the bound %.4f", policies[p],
					 (unsigned long long)cap, r.block_hit_ratio, bel);
			/* only line 5's [1, 0] can hit (line 3's [1, 0] prefix): 2 of 7 blocks */
			assert_true(r.block_hit_ratio <= 2.0 / 7 + 1e-9);
		}
	}
	kvt__trace_destroy(t);

	/* an id first seen after another, then at the start of hash_ids: no hit, as a store
	 * keyed by the prefix has none */
	t = parse_trace("{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 1, "
			"\"hash_ids\": [7, 8]}\n"
			"{\"timestamp\": 1, \"input_length\": 512, \"output_length\": 1, "
			"\"hash_ids\": [8]}\n");
	assert_int_equal(kvt__sim_check_trace(t, note, sizeof(note)), 1);
	assert_non_null(
	    strstr(note, "line 2: hash id 8 starts hash_ids here but follows 7 on line 1"));
	struct kvt_sim_opts o = {.policy = "lru", .dram_tokens = 4 * 512, .leaf_first = true};
	struct kvt_sim_result r;
	assert_int_equal(kvt__sim_run(t, &o, &r), 0);
	assert_int_equal(r.hit_blocks, 0);
	kvt__trace_destroy(t);

	/* an id twice in one request (its second sight has another parent, always) */
	t = parse_trace("{\"timestamp\": 0, \"input_length\": 1536, \"output_length\": 1, "
			"\"hash_ids\": [5, 6, 5]}\n"
			"{\"timestamp\": 1, \"input_length\": 1536, \"output_length\": 1, "
			"\"hash_ids\": [5, 6, 5]}\n");
	assert_int_equal(kvt__sim_check_trace(t, note, sizeof(note)), 1);
	assert_non_null(strstr(note, "line 1: hash id 5 appears twice in hash_ids"));
	assert_int_equal(kvt__sim_run(t, &o, &r), 0);
	assert_int_equal(r.hit_blocks, 3); /* the second request, all three blocks */
	kvt__trace_destroy(t);

	/* prefix trees: nothing to say, generated traces too */
	t = random_trace(5, 300, 10);
	assert_int_equal(kvt__sim_check_trace(t, note, sizeof(note)), 0);
	assert_string_equal(note, "");
	kvt__trace_destroy(t);
}

/* Read bytes are charged to the tier the lookup found each block in: the second request
 * finds block 1 on NVMe and block 2 in DRAM, and promoting block 1 into the one-block
 * DRAM evicts block 2 before block 2's turn in the store loop (it was charged to NVMe:
 * a DRAM hit ratio of 0.25 with 0 bytes read from DRAM). */
static void test_read_bytes_by_lookup_tier(void **state)
{
	(void)state;
	struct kvt_trace *t = parse_trace(
	    "{\"timestamp\":0,\"input_length\":1024,\"output_length\":1,\"hash_ids\":[1,2]}\n"
	    "{\"timestamp\":1000,\"input_length\":1024,\"output_length\":1,\"hash_ids\":[1,2]}\n");
	struct kvt_cost_params p;
	assert_int_equal(
	    kvt__cost_params_preset("llama3.1-8b", "h100-sxm", 0.5, 1, "dram,nvme", &p), 0);
	struct kvt_cost *c;
	assert_int_equal(kvt__cost_create_params(&p, &c), 0);
	const char *policies[] = {"lru", "hda"};
	for (int i = 0; i < 2; i++) {
		struct kvt_sim_opts o = {.policy = policies[i],
					 .dram_tokens = 512,
					 .nvme_tokens = 16 * 512,
					 .leaf_first = true,
					 .cost = c};
		struct kvt_sim_result r;
		assert_int_equal(kvt__sim_run(t, &o, &r), 0);
		uint64_t block = 512 * kvt_cost_kv_bytes_per_token(c);
		assert_int_equal(r.tier_hit_blocks[KVT_SIM_DRAM], 1);
		assert_int_equal(r.tier_hit_blocks[KVT_SIM_NVME], 1);
		/* both were loaded; the last token is recomputed all the same (until 2026-12-06
		 * it was counted as saved too) */
		assert_int_equal(r.prefill_tokens_saved, 1023);
		assert_int_equal(r.read_bytes[KVT_SIM_DRAM], block);
		assert_int_equal(r.read_bytes[KVT_SIM_NVME], block);
	}
	kvt_cost_destroy(c);
	kvt__trace_destroy(t);
}

/* All requests at one timestamp: a span of 0 s gave a load of 0 %, no warning and a fleet
 * of one GPU under --gpus auto. Now the load is unbounded (INFINITY) and auto gives each
 * request a GPU, up to the maximum. */
static void test_all_at_once(void **state)
{
	(void)state;
	struct kvt_trace *t;
	assert_int_equal(kvt__trace_create(512, &t), 0);
	for (uint64_t r = 0; r < 40; r++) {
		uint64_t ids[4] = {r * 4 + 1, r * 4 + 2, r * 4 + 3, r * 4 + 4};
		assert_int_equal(kvt__trace_add(t, 5.0, 2048, 1, ids, 4), 0);
	}
	struct kvt_cost_params p;
	assert_int_equal(
	    kvt__cost_params_preset("llama3.1-8b", "h100-sxm", 0.5, 1, "dram,nvme", &p), 0);
	struct kvt_cost *c;
	assert_int_equal(kvt__cost_create_params(&p, &c), 0);
	assert_int_equal(kvt__sim_auto_gpus(t, c), 40);
	struct kvt_sim_opts o = {.dram_tokens = 1 << 20, .leaf_first = true, .cost = c};
	struct kvt_sim_result r;
	assert_int_equal(kvt__sim_run(t, &o, &r), 0);
	assert_int_equal(r.gpus, 40);
	assert_true(isinf(r.utilization) && isinf(r.nocache_utilization));
	/* every request on its own GPU: no queue */
	assert_true(fabs(r.ttft_p99_s - r.nocache_ttft_p99_s) < 1e-12);
	o.gpus = 1;
	assert_int_equal(kvt__sim_run(t, &o, &r), 0);
	assert_true(isinf(r.utilization) && r.ttft_p99_s > 30 * r.ttft_p50_s / 20);
	/* one request alone has no span either, and no load to speak of */
	t->n = 1;
	assert_int_equal(kvt__sim_auto_gpus(t, c), 1);
	assert_int_equal(kvt__sim_run(t, &o, &r), 0);
	assert_true(r.utilization == 0);
	kvt_cost_destroy(c);
	kvt__trace_destroy(t);
}

/* The fleet's min-heap against a scan for the earliest free GPU (what it replaced), on
 * random service times, fleet sizes from 1 to 65,536. */
static void test_fleet_heap(void **state)
{
	(void)state;
	const uint32_t sizes[] = {1, 2, 3, 7, 64, 1000, KVT_SIM_MAX_GPUS};
	rng_state = 99;
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		uint32_t n = sizes[si];
		double *heap = calloc(n, sizeof(double)), *flat = calloc(n, sizeof(double));
		assert_non_null(heap);
		assert_non_null(flat);
		double now = 0;
		uint32_t steps = n > 1000 ? 200 : 5000;
		for (uint32_t k = 0; k < steps; k++) {
			now += rnd(100) / 1000.0;
			uint32_t g = 0;
			for (uint32_t i = 1; i < n; i++)
				if (flat[i] < flat[g])
					g = i;
			assert_true(heap[0] == flat[g]);
			double done = KVT_MAX(now, flat[g]) + rnd(5000) / 1000.0;
			flat[g] = done;
			kvt__sim_fleet_replace_first(heap, n, done);
		}
		for (uint32_t i = 1; i < n; i++) /* still a heap */
			assert_true(heap[(i - 1) / 2] <= heap[i]);
		free(heap);
		free(flat);
	}
}

static void same_result(const char *what, const struct kvt_sim_result *a,
			const struct kvt_sim_result *b)
{
	if (a->hit_blocks != b->hit_blocks || a->hit_tokens != b->hit_tokens ||
	    a->tier_hit_blocks[0] != b->tier_hit_blocks[0] ||
	    a->tier_hit_blocks[1] != b->tier_hit_blocks[1] || a->inserts[0] != b->inserts[0] ||
	    a->inserts[1] != b->inserts[1] || a->evictions[0] != b->evictions[0] ||
	    a->evictions[1] != b->evictions[1] || a->read_bytes[0] != b->read_bytes[0] ||
	    a->read_bytes[1] != b->read_bytes[1] || a->ttft_p99_s != b->ttft_p99_s)
		fail_msg("%s: index %llu hits %llu/%llu evictions, walk %llu hits %llu/%llu", what,
			 (unsigned long long)a->hit_blocks, (unsigned long long)a->evictions[0],
			 (unsigned long long)a->evictions[1], (unsigned long long)b->hit_blocks,
			 (unsigned long long)b->evictions[0], (unsigned long long)b->evictions[1]);
}

static const char *const all_policies[] = {"lru", "hda", "hd", "arc", "lru2", "pslru"};

/* Leaf-first eviction finds its victims through the policies' marks (src/evict.h): the
 * same victims as asking ok() of every block in policy order (leaf_scan), on random
 * prefix trees at small and large capacities and on generated workloads with two tiers. */
static void test_leaf_index_same_victims(void **state)
{
	(void)state;
	for (size_t pi = 0; pi < sizeof(all_policies) / sizeof(all_policies[0]); pi++) {
		for (uint64_t seed = 1; seed <= 3; seed++) {
			struct kvt_trace *t = random_trace(seed * 7, 1500, 20);
			const uint64_t caps[][2] = {{3, 0}, {20, 50}, {100, 0}, {600, 2000}};
			for (size_t ci = 0; ci < 4; ci++) {
				struct kvt_sim_opts o = {.policy = all_policies[pi],
							 .dram_tokens = caps[ci][0] * 512,
							 .nvme_tokens = caps[ci][1] * 512,
							 .leaf_first = true};
				struct kvt_sim_result a, b;
				assert_int_equal(kvt__sim_run(t, &o, &a), 0);
				o.leaf_scan = true;
				assert_int_equal(kvt__sim_run(t, &o, &b), 0);
				same_result(all_policies[pi], &a, &b);
			}
			kvt__trace_destroy(t);
		}
	}
	struct kvt_cost_params p;
	assert_int_equal(
	    kvt__cost_params_preset("llama3.1-8b", "h100-sxm", 0.5, 1, "dram,nvme", &p), 0);
	struct kvt_cost *c;
	assert_int_equal(kvt__cost_create_params(&p, &c), 0);
	for (int w = 0; w < KVT_GEN_N; w++) {
		struct kvt_gen_opts g;
		kvt__gen_defaults(w, &g);
		g.requests = 1500;
		struct kvt_trace *t;
		assert_int_equal(kvt__trace_create(512, &t), 0);
		assert_int_equal(kvt__gen_run(&g, t), 0);
		for (size_t pi = 0; pi < sizeof(all_policies) / sizeof(all_policies[0]); pi++) {
			struct kvt_sim_opts o = {.policy = all_policies[pi],
						 .dram_tokens = 65536,
						 .nvme_tokens = 1 << 20,
						 .leaf_first = true,
						 .cost = c,
						 .admit_predict = KVT_PREDICT_CHAIN};
			struct kvt_sim_result a, b;
			assert_int_equal(kvt__sim_run(t, &o, &a), 0);
			o.leaf_scan = true;
			assert_int_equal(kvt__sim_run(t, &o, &b), 0);
			same_result(kvt__gen_workload_name(w), &a, &b);
		}
		kvt__trace_destroy(t);
	}
	kvt_cost_destroy(c);
}

/* The cost of leaf-first eviction, counted (blocks looked at per victim), not timed: long
 * chains are the case where a walk from the policy's oldest end steps over every resident
 * block of a chain but its end, for each victim (12 chains of 32,768 blocks took 13.6 s
 * with LRU, 0.05 s without leaf-first). Through the policies' marks (src/evict_okset.h)
 * a victim is found without asking ok() of any block (0.8 per victim, the no-leaf
 * fallback's), or, for hd, of its ~8 sampled candidates (7.1): at most 16 per victim,
 * with the walk's victims. The walk (leaf_scan, the old way) is checked to cost
 * what it did. */
static void test_leaf_first_work(void **state)
{
	(void)state;
	struct kvt_trace *t;
	assert_int_equal(kvt__trace_create(512, &t), 0);
	uint64_t *ids = malloc(8192 * sizeof(uint64_t));
	assert_non_null(ids);
	for (uint64_t r = 0; r < 6; r++) {
		for (uint64_t i = 0; i < 8192; i++)
			ids[i] = r * 8192 + i + 1;
		assert_int_equal(kvt__trace_add(t, (double)r * 1000, 8192 * 512, 1, ids, 8192), 0);
	}
	free(ids);
	for (size_t pi = 0; pi < sizeof(all_policies) / sizeof(all_policies[0]); pi++) {
		struct kvt_sim_opts o = {.policy = all_policies[pi],
					 .dram_tokens = 1024 * 512,
					 .nvme_tokens = 3000 * 512,
					 .leaf_first = true};
		struct kvt_sim_result r, walk;
		assert_int_equal(kvt__sim_run(t, &o, &r), 0);
		uint64_t victims = r.evictions[0] + r.evictions[1];
		assert_true(victims > 40000);
		print_message("%-6s %llu victims: %.1f blocks looked at per victim\n",
			      all_policies[pi], (unsigned long long)victims,
			      (double)r.victim_work / (double)victims);
		assert_true(r.victim_work <= 16 * victims);
		if (!strcmp(all_policies[pi], "lru")) { /* the walk: ~ a chain per victim */
			o.leaf_scan = true;
			assert_int_equal(kvt__sim_run(t, &o, &walk), 0);
			same_result("chains", &r, &walk);
			print_message("lru by walking: %.1f per victim\n",
				      (double)walk.victim_work / (double)victims);
			assert_true(walk.victim_work > 500 * victims);
		}
	}
	kvt__trace_destroy(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ids_not_prefix_hashes),
	    cmocka_unit_test(test_read_bytes_by_lookup_tier),
	    cmocka_unit_test(test_all_at_once),
	    cmocka_unit_test(test_fleet_heap),
	    cmocka_unit_test(test_leaf_index_same_victims),
	    cmocka_unit_test(test_leaf_first_work),
	    cmocka_unit_test(test_lru_matches_naive),
	    cmocka_unit_test(test_belady_bounds),
	    cmocka_unit_test(test_default_beats_lru),
	    cmocka_unit_test(test_default_vs_lru_many_seeds),
	    cmocka_unit_test(test_partial_first_many_seeds),
	    cmocka_unit_test(test_admission_where_reuse_predicts),
	    cmocka_unit_test(test_two_tiers_admission_ttft),
	    cmocka_unit_test(test_fleet_sizing),
	    cmocka_unit_test(test_store_and_replay_share_the_default),
	    cmocka_unit_test(test_nvme_admission_predicts),
	    cmocka_unit_test(test_nvme_predict_many_seeds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
