/*
 * sim.h - the metadata-only replay simulator behind `kvtier replay --simulate`: a DRAM and
 * an NVMe tier of given capacities (in blocks of the trace's block_tokens), eviction
 * policies through src/evict.h, optional admission to NVMe, offline Belady (MIN) as the
 * bound, and a FIFO queue over N prefill GPUs (sized to the load unless given) that turns
 * hits into TTFT with the cost model.
 */
#ifndef KVT_SIM_H
#define KVT_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trace.h"

#define KVT_SIM_DEFAULT_POLICY "hda" /* = dram.policy's default */
/* --gpus auto: the fewest GPUs that keep the no-cache load at or below this utilisation */
#define KVT_SIM_AUTO_UTIL 0.8
#define KVT_SIM_MAX_GPUS 65536

enum { KVT_SIM_DRAM = 0, KVT_SIM_NVME = 1, KVT_SIM_TIERS = 2 };

struct kvt_cost;

struct kvt_sim_opts {
	const char *policy;   /* for both tiers; NULL: KVT_SIM_DEFAULT_POLICY */
	uint64_t dram_tokens; /* capacity; 0 disables the tier */
	uint64_t nvme_tokens;
	bool leaf_first; /* evict only blocks with no resident child (the engine's rule) */
	/* tests: find leaf-first victims by asking ok() of each block in the policy's order,
	 * the reference for the index that finds the same ones without the walk */
	bool leaf_scan;
	bool belady;	 /* also run MIN with capacity dram + nvme blocks */
	/* dram.partial_first: a prompt's partial last block goes before any other until it
	 * is hit (its id changes with the next turn); DRAM tier only */
	bool partial_first;
	const struct kvt_cost *cost; /* tiers "dram,nvme"; NULL: no bytes, no TTFT */
	bool prefetch;		 /* stage NVMe hits into DRAM while a request waits in the queue */
	uint32_t gpus;		 /* prefill GPUs (instances) serving the queue; 0: sized to the
				  * trace's load (KVT_SIM_AUTO_UTIL without a cache) */
	uint32_t admit_min_freq; /* NVMe admission by frequency sketch; <= 1 admits all */
	/* that sketch, as the store's admission.sketch_counters and admission.doorkeeper:
	 * counters per row (0: the NVMe capacity in blocks, at least 1024), and no doorkeeper
	 * in front of it (the store's default has one) */
	uint64_t admit_sketch_width;
	bool admit_no_doorkeeper;
	bool admit_cost_check;	 /* skip NVMe writes whose restore is slower than recompute */
	uint64_t admit_min_prefix; /* skip NVMe writes of blocks ending before this token */
	/* NVMe admission by the store's own rule (admission.predict, src/sketch.h): an enum
	 * kvt_admit_predict; KVT_PREDICT_OFF (0): off */
	int admit_predict;
	/* an offline bound, not a policy: write a block to NVMe only if the trace uses it
	 * again later (what a perfect reuse predictor would write) */
	bool admit_oracle;
	/* called every few thousand requests; may be NULL */
	void (*progress)(void *arg, uint64_t done, uint64_t total);
	void *progress_arg;
};

struct kvt_sim_result {
	uint64_t requests, blocks, input_tokens;
	uint64_t hit_blocks, hit_tokens;
	uint64_t tier_hit_blocks[KVT_SIM_TIERS], tier_hit_tokens[KVT_SIM_TIERS];
	double block_hit_ratio, token_hit_ratio;
	double tier_block_hit_ratio[KVT_SIM_TIERS], tier_token_hit_ratio[KVT_SIM_TIERS];
	double belady_block_hit_ratio; /* -1 when not run */
	double belady_token_hit_ratio;
	uint64_t capacity_blocks[KVT_SIM_TIERS];
	uint64_t inserts[KVT_SIM_TIERS], evictions[KVT_SIM_TIERS];
	uint64_t nvme_writes_skipped;
	double nvme_bytes_per_hit; /* NVMe bytes written per block hit served from NVMe */
	double nvme_bytes_per_any_hit; /* NVMe bytes written per block hit from any tier */
	/* with a cost model */
	uint64_t read_bytes[KVT_SIM_TIERS], write_bytes[KVT_SIM_TIERS];
	uint64_t prefill_tokens_saved; /* tokens restored instead of recomputed */
	double ttft_p50_s, ttft_p99_s, ttft_mean_s;
	double nocache_ttft_p50_s, nocache_ttft_p99_s, nocache_ttft_mean_s;
	double gpu_busy_s, nocache_gpu_busy_s; /* summed over the GPUs */
	uint32_t gpus;			       /* how many served the queue */
	double span_s;			       /* first to last arrival */
	/* busy / (span x gpus); > 1: overloaded; INFINITY when all of several requests arrive
	 * at once (span 0) */
	double utilization, nocache_utilization;
	double elapsed_s; /* wall time of the simulation */
	/* blocks looked at to choose victims (ok() calls; a victim found through the
	 * policy's marks looks at none): the cost of eviction, which leaf-first must keep
	 * near one per victim, not one per resident */
	uint64_t victim_work;
};

/* The fleet --gpus auto picks: the fewest GPUs whose no-cache prefill load stays at or
 * below KVT_SIM_AUTO_UTIL over the trace's span (at least 1, at most KVT_SIM_MAX_GPUS);
 * when several requests all arrive at once (span 0) there is no rate to size for: one GPU
 * per request, up to KVT_SIM_MAX_GPUS. */
uint32_t kvt__sim_auto_gpus(const struct kvt_trace *t, const struct kvt_cost *c);
/* A FIFO fleet of n GPUs: free_at[] says when each frees, kept as a binary min-heap, so
 * free_at[0] is the GPU a request waits for (n zeros are a heap). Its new free time t
 * replaces it: O(log n). */
void kvt__sim_fleet_replace_first(double *free_at, uint32_t n, double t);

/* Ids are meant to be prefix hashes: every hash id always follows the same id, or always
 * starts hash_ids (which an id repeated in one request breaks). Where one does not, the
 * simulator takes each (id, parent) as a block of its own, as KV and the store's chained
 * keys are. Returns how many blocks that made (0: the ids are prefix hashes), with the
 * first case in note ("line N: hash id X follows Y here but ... on line M"); -ENOMEM,
 * -E2BIG. */
int kvt__sim_check_trace(const struct kvt_trace *t, char *note, size_t notelen);

/* Run the trace once. -EINVAL bad options or unknown policy, -ENOMEM. */
int kvt__sim_run(const struct kvt_trace *t, const struct kvt_sim_opts *o,
		 struct kvt_sim_result *out);
/* MIN alone: block and token hit ratios of an offline-optimal cache of capacity blocks
 * under the same prefix-hit rule (evicts the block used farthest in the future, never
 * stores one it would evict first), blocks as kvt__sim_check_trace says: its block ratio
 * is an upper bound for every policy's; its token ratio is that cache's own, not a bound
 * (MIN maximises hit blocks, and a partial last block holds fewer tokens than a full one). */
int kvt__sim_belady(const struct kvt_trace *t, uint64_t capacity_blocks, double *block_ratio,
		    double *token_ratio);

#endif
