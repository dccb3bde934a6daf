/*
 * presets.c - model and GPU presets of the cost model. A preset is data, not code: the
 * geometry that sets KV bytes per token, the attention width that sets the quadratic part
 * of prefill FLOPs, and the parameter count (active parameters for MoE) that sets the
 * linear part. GPU rows hold the dense bf16 tensor peak and an effective pinned host->GPU
 * copy rate; the fraction of peak a prefill reaches (MFU) is applied by the cost model
 * (cost.mfu, default KVT_DEFAULT_MFU), so the table stays the vendor's numbers.
 *
 * Anything not listed here is described through configuration (cost.model = custom with
 * the model.* geometry and cost.params_b; cost.gpu_tflops / cost.h2d_gbps overrides).
 */
#include <string.h>
#include <strings.h>

#include "cost.h"

/* clang-format off */
const struct kvt_model_preset kvt__model_presets[] = {
	/* name, kind, layers, kv_heads, head_dim, q_heads, qk_dim, v_dim, params, active */
	{"llama3.2-3b", KVT_KIND_KV, 28, 8, 128, 24, 128, 128, 3.21e9, 3.21e9,
	 "Meta Llama 3.2 3B config.json: hidden 3072, 24 heads, 8 KV heads, head_dim 128"},
	{"llama3.1-8b", KVT_KIND_KV, 32, 8, 128, 32, 128, 128, 8.03e9, 8.03e9,
	 "Meta Llama 3.1 8B config.json: hidden 4096, 32 heads, 8 KV heads, GQA"},
	{"llama3.1-70b", KVT_KIND_KV, 80, 8, 128, 64, 128, 128, 70.6e9, 70.6e9,
	 "Meta Llama 3.1 70B config.json: hidden 8192, 64 heads, 8 KV heads, GQA"},
	{"qwen2.5-7b", KVT_KIND_KV, 28, 4, 128, 28, 128, 128, 7.62e9, 7.62e9,
	 "Qwen2.5-7B config.json: hidden 3584, 28 heads, 4 KV heads"},
	{"qwen3-32b", KVT_KIND_KV, 64, 8, 128, 64, 128, 128, 32.8e9, 32.8e9,
	 "Qwen3-32B config.json: hidden 5120, 64 heads, 8 KV heads, head_dim 128"},
	/* MLA: the cache holds kv_lora_rank (512) + qk_rope_head_dim (64) = 576 per token per
	 * layer; attention runs over 128 heads with q/k dim 128+64 and v dim 128. */
	{"deepseek-v3", KVT_KIND_MLA, 61, 1, 576, 128, 192, 128, 671e9, 37e9,
	 "DeepSeek-V3 config.json: 61 layers, MLA kv_lora_rank 512 + rope 64, MoE 37B active"},
};
const size_t kvt__n_model_presets = sizeof(kvt__model_presets) / sizeof(kvt__model_presets[0]);

const struct kvt_gpu_preset kvt__gpu_presets[] = {
	/* dense bf16 tensor peak from the vendor data sheets (no sparsity); host->GPU is
	 * about 80% of the PCIe link, what pinned cudaMemcpy reaches in practice */
	{"h100-sxm", 989.4, 50.0, "PCIe Gen5 x16 (64 GB/s link)"},
	{"h200", 989.4, 50.0, "same compute as H100 SXM, PCIe Gen5 x16"},
	{"a100-80gb", 312.0, 25.0, "PCIe Gen4 x16 (32 GB/s link)"},
	{"l40s", 362.05, 25.0, "PCIe Gen4 x16 (32 GB/s link)"},
};
const size_t kvt__n_gpu_presets = sizeof(kvt__gpu_presets) / sizeof(kvt__gpu_presets[0]);
/* clang-format on */

static const struct {
	const char *alias, *name;
} aliases[] = {
    {"h100", "h100-sxm"},
    {"h100sxm", "h100-sxm"},
    {"a100", "a100-80gb"},
    {"a100-80g", "a100-80gb"},
    {"llama-3.2-3b", "llama3.2-3b"},
    {"llama-3.1-8b", "llama3.1-8b"},
    {"llama-3.1-70b", "llama3.1-70b"},
    {"deepseek-v3-671b", "deepseek-v3"},
};

static const char *resolve(const char *name)
{
	for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
		if (!strcasecmp(name, aliases[i].alias))
			return aliases[i].name;
	return name;
}

const struct kvt_model_preset *kvt__model_find(const char *name)
{
	if (!name)
		return NULL;
	name = resolve(name);
	for (size_t i = 0; i < kvt__n_model_presets; i++)
		if (!strcasecmp(name, kvt__model_presets[i].name))
			return &kvt__model_presets[i];
	return NULL;
}

const struct kvt_gpu_preset *kvt__gpu_find(const char *name)
{
	if (!name)
		return NULL;
	name = resolve(name);
	for (size_t i = 0; i < kvt__n_gpu_presets; i++)
		if (!strcasecmp(name, kvt__gpu_presets[i].name))
			return &kvt__gpu_presets[i];
	return NULL;
}
