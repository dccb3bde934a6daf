/*
 * scaled_geometry.c - model-sized KV at a fraction of the bytes (scaled_geometry.h). The
 * scaled geometry is MLA-shaped (one latent per layer) because that lets the bytes per
 * token be chosen to one element's precision while keeping the preset's layer count, which
 * is what shapes an object on disk (a 4 KiB header, each layer padded to 4 KiB). Payloads
 * are a xorshift stream seeded from the key, cheap to generate and to check on 2 cores.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "cost.h"
#include "scaled_geometry.h"

int scaled_parse(const char *v, double *out)
{
	double x;
	if (kvt__parse_double(v, &x) < 0 || !(x > 0) || x > 1)
		return -EINVAL;
	*out = x;
	return 0;
}

int scaled_geometry(const char *model, double scale, uint32_t chunk_tokens,
		    struct scaled_geometry *out)
{
	const struct kvt_model_preset *p = kvt__model_find(model);
	if (!p || !(scale > 0) || scale > 1 || !chunk_tokens)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->model = p->name;
	out->scale = scale;
	out->preset_bpt = (uint64_t)p->layers * p->kv_heads * p->head_dim * 2 *
			  (p->kind == KVT_KIND_MLA ? 1 : 2);
	double hd = floor((double)out->preset_bpt * scale / (2.0 * p->layers) + 0.5);
	if (hd < 1)
		hd = 1;
	if (hd > 65536)
		return -EINVAL;
	out->geo = (struct kvt_geometry){.layers = p->layers, .kv_heads = 1,
					 .head_dim = (uint32_t)hd, .chunk_tokens = chunk_tokens,
					 .dtype = KVT_DTYPE_BF16, .kind = KVT_KIND_MLA};
	if (kvt_geometry_check(&out->geo))
		return -EINVAL;
	out->bpt = kvt_payload_bytes(&out->geo, 1);
	snprintf(out->sets[0], 64, "%s", p->name);
	snprintf(out->sets[1], 64, "%u", p->layers);
	snprintf(out->sets[2], 64, "%u", (uint32_t)hd);
	snprintf(out->sets[3], 64, "%u", chunk_tokens);
	return 0;
}

int scaled_apply(const struct scaled_geometry *sg, struct kvt_config *cfg)
{
	const char *kv[][2] = {
	    {"model.name", sg->sets[0]},     {"model.layers", sg->sets[1]},
	    {"model.head_dim", sg->sets[2]}, {"model.chunk_tokens", sg->sets[3]},
	    {"model.kind", "mla"},	     {"model.kv_heads", "1"},
	    {"model.dtype", "bf16"},
	};
	for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++) {
		int rc = kvt_config_set(cfg, kv[i][0], kv[i][1], NULL, 0);
		if (rc)
			return rc;
	}
	return 0;
}

static uint64_t seed_of(const struct kvt_key *key, uint32_t n_tokens)
{
	uint64_t s;
	memcpy(&s, key->bytes, 8);
	s ^= (uint64_t)n_tokens * 0x9e3779b97f4a7c15ull;
	return s ? s : 0x2545f4914f6cdd1dull;
}

static inline uint64_t step(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

void scaled_fill(const struct kvt_key *key, uint32_t n_tokens, void *buf, size_t len)
{
	uint64_t x = seed_of(key, n_tokens), v;
	uint8_t *p = buf;
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		v = step(&x);
		memcpy(p + i, &v, 8);
	}
	v = step(&x);
	memcpy(p + i, &v, len - i);
}

int scaled_check(const struct kvt_key *key, uint32_t n_tokens, const void *buf, size_t len)
{
	uint64_t x = seed_of(key, n_tokens), v;
	const uint8_t *p = buf;
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		v = step(&x);
		if (memcmp(p + i, &v, 8))
			return 0;
	}
	v = step(&x);
	return memcmp(p + i, &v, len - i) == 0;
}
