/*
 * cost.h - internal side of the restore-or-recompute cost model (public part: the "Cost
 * model" section of include/kvtier.h). Model and GPU presets (src/presets.c), tier
 * profiles measured by `kvtier calibrate` (an INI file, src/cost.c), and a constructor
 * from plain parameters so the simulator and the crossover tool need no configuration.
 *
 * Units: seconds, bytes, bytes per second, FLOPs. Formulas are in docs/COST_MODEL.md.
 */
#ifndef KVT_COST_H
#define KVT_COST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "internal.h"

struct kvt_model_preset {
	const char *name;
	uint8_t kind; /* KVT_KIND_KV or KVT_KIND_MLA */
	uint32_t layers;
	uint32_t kv_heads;    /* MLA: 1 */
	uint32_t head_dim;    /* K/V head dim; MLA: latent dim (kv_lora_rank + rope dim) */
	uint32_t q_heads;     /* attention (query) heads */
	uint32_t qk_dim;      /* per-head dim of Q.K^T */
	uint32_t v_dim;	      /* per-head dim of the value product */
	double params;	      /* total parameters */
	double active_params; /* parameters touched per token (MoE: active experts) */
	const char *source;   /* where the numbers come from */
};

struct kvt_gpu_preset {
	const char *name;
	double peak_tflops; /* dense bf16 tensor peak, TFLOP/s */
	double h2d_gbps;    /* effective pinned host->GPU copy, GB/s (1e9) */
	const char *note;
};

/* Measured or default behaviour of one tier. */
struct kvt_tier_profile {
	char name[16];
	double latency_s; /* first byte of one read */
	double read_Bps;  /* sequential read bandwidth of large objects */
	double write_Bps;
	bool measured; /* from a calibrate profile, not a default */
};

/* Everything the cost model needs, filled from presets or by hand. */
struct kvt_cost_params {
	struct kvt_model_preset model; /* name points to static or caller storage */
	uint32_t dtype_bytes;	       /* KV element size (2 for bf16) */
	double flops_per_s;	       /* effective prefill throughput of the whole instance */
	double h2d_Bps;		       /* effective host->GPU bandwidth of the whole instance */
	/* fixed costs of one restore that recomputing does not pay (docs/COST_MODEL.md):
	 * the scheduler step the request waits for and the block-table update, once; the
	 * K and V copy launches, once per layer */
	double restore_fixed_s;
	double layer_launch_s;
	int n_tiers;
	struct kvt_tier_profile tier[KVT_MAX_TIERS];
};

#define KVT_DEFAULT_MFU 0.5
/* the defaults of cost.restore_fixed_us and cost.layer_launch_us (docs/COST_MODEL.md) */
#define KVT_DEFAULT_RESTORE_FIXED_S 1e-3
#define KVT_DEFAULT_LAYER_LAUNCH_S 10e-6

extern const struct kvt_model_preset kvt__model_presets[];
extern const size_t kvt__n_model_presets;
extern const struct kvt_gpu_preset kvt__gpu_presets[];
extern const size_t kvt__n_gpu_presets;

/* Case-insensitive lookup with a few aliases ("h100" = "h100-sxm"); NULL if unknown. */
const struct kvt_model_preset *kvt__model_find(const char *name);
const struct kvt_gpu_preset *kvt__gpu_find(const char *name);

/* Defaults for a tier name (dram, nvme, fs, s3, redis, rados; others get nvme-like values). */
void kvt__tier_profile_default(const char *name, struct kvt_tier_profile *p);
/* Read a calibrate profile: sections [tier.<name>] with latency_us, read_gbps, write_gbps.
 * Updates matching entries of p[0..n) and marks them measured; sections for tiers not in p
 * are ignored. -errno / -EINVAL with a line-numbered reason in err. */
int kvt__profile_load(const char *path, struct kvt_tier_profile *p, int n, char *err,
		      size_t errlen);
/* The [engine] section of the same file: what a serving engine adds to the presets (mfu,
 * restore_fixed_us, layer_launch_us, h2d_gbps). A key not in the file leaves the field
 * alone; tier sections are skipped. -errno / -EINVAL with a reason in err. */
struct kvt_engine_profile {
	double mfu, restore_fixed_s, layer_launch_s, h2d_Bps; /* < 0: not in the file */
};
int kvt__profile_load_engine(const char *path, struct kvt_engine_profile *e, char *err,
			     size_t errlen);
/* Write profiles in the same format (what calibrate saves). */
int kvt__profile_write(FILE *f, const struct kvt_tier_profile *p, int n);

/* Parameters for a model and GPU preset by name, tiers from the comma list with defaults.
 * tp GPUs scale throughput and host->GPU bandwidth. -EINVAL unknown name. */
int kvt__cost_params_preset(const char *model, const char *gpu, double mfu, int tp,
			    const char *tiers, struct kvt_cost_params *out);
int kvt__cost_create_params(const struct kvt_cost_params *p, struct kvt_cost **out);
const struct kvt_cost_params *kvt__cost_params(const struct kvt_cost *c);

/* Prefill tokens a plan spares the GPU: the tokens it loads, less the last prompt token,
 * which the engine recomputes whatever is loaded (it needs its logits). */
static inline uint64_t kvt__cost_plan_saved(const struct kvt_cost_plan *p, uint64_t prompt_tokens)
{
	uint64_t must = prompt_tokens ? prompt_tokens - 1 : 0;
	return p->load_tokens < must ? p->load_tokens : must;
}

/* Restore time of a set of chunks read from several tiers at once: bytes_per_tier[i] bytes
 * from tier i (0 = unused). Pipelined layer by layer with the host->GPU copy. */
double kvt__cost_restore_mix(const struct kvt_cost *c, const uint64_t *bytes_per_tier);

#endif
