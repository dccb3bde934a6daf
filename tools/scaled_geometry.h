/*
 * scaled_geometry.h - a store geometry whose bytes per token are a model preset's KV bytes
 * per token times a scale factor, for the commands that move real bytes of a model's size
 * through the tiers (`kvtier replay` without --simulate, `kvtier bench --workload mlperf-kv`)
 * on disks too small for full-size KV.
 */
#ifndef KVT_SCALED_GEOMETRY_H
#define KVT_SCALED_GEOMETRY_H

#include <stdint.h>

#include "kvtier.h"

struct scaled_geometry {
	const char *model;        /* the preset's name */
	double scale;
	uint64_t preset_bpt;      /* the preset's dense KV bytes per token */
	uint64_t bpt;             /* the scaled geometry's bytes per token */
	struct kvt_geometry geo;  /* MLA-shaped: preset layers, kv_heads 1, bf16 */
	char sets[7][64];         /* model.* keys to apply to a configuration */
};

/* Parse a --scale value: a number in (0, 1]. 0 or -EINVAL. */
int scaled_parse(const char *v, double *out);
/* Geometry for a model preset at scale: the preset's layer count, kind "mla" with one head
 * of head_dim = max(1, round(preset_bpt * scale / (2 * layers))) bf16 elements, so the
 * object keeps the preset's per-layer structure and its bytes scale by `scale` (rounded to
 * whole elements). -EINVAL unknown model or bad scale. */
int scaled_geometry(const char *model, double scale, uint32_t chunk_tokens,
		    struct scaled_geometry *out);
/* Apply out->sets to cfg. 0 or the first error. */
int scaled_apply(const struct scaled_geometry *sg, struct kvt_config *cfg);

/* Deterministic payload of a chunk: bytes derived from its key and token count, so a reader
 * can tell whether what it got is exactly what was written for that key. */
void scaled_fill(const struct kvt_key *key, uint32_t n_tokens, void *buf, size_t len);
/* 1 if buf holds scaled_fill's bytes for (key, n_tokens), else 0. */
int scaled_check(const struct kvt_key *key, uint32_t n_tokens, const void *buf, size_t len);

#endif
