/*
 * device_common.h - helpers shared by the device layer's tests: a reference model of the
 * paged layouts and of the canonical object written independently of src/device.c (so a
 * wrong index formula there cannot agree with itself here), random data, and a fake
 * "engine" that owns one TP rank's per-layer tensors.
 *
 * While src/keys.c (kvt_layer_offset & co.) does not exist yet, a copy of the documented
 * object formula stands in for it; once keys.c is there, the library's own functions are
 * used and this copy is compiled out.
 */
#ifndef KVT_TEST_DEVICE_COMMON_H
#define KVT_TEST_DEVICE_COMMON_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "kvtier.h"


/* xorshift64*: fixed seeds, reproducible failures. */
static inline uint64_t tr_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}
static inline void tr_fill(uint64_t *seed, void *buf, size_t n)
{
	uint8_t *p = (uint8_t *)buf;
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(tr_next(seed) >> 56);
}
/* A random permutation of num_blocks ids, first n used: non-contiguous, shuffled. */
static inline void tr_shuffled_ids(uint64_t *seed, uint32_t num_blocks, uint32_t *ids, uint32_t n)
{
	uint32_t *all = (uint32_t *)malloc(num_blocks * sizeof(*all));
	for (uint32_t i = 0; i < num_blocks; i++)
		all[i] = i;
	for (uint32_t i = num_blocks - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(tr_next(seed) % (i + 1));
		uint32_t t = all[i];
		all[i] = all[j];
		all[j] = t;
	}
	memcpy(ids, all, n * sizeof(*ids));
	free(all);
}

/* One TP rank's registered cache, with the test's own view of it. */
struct tr_rank {
	struct kvt_device *dev;
	struct kvt_device_desc desc;
	void *base[KVT_MAX_LAYERS];
	size_t layer_bytes; /* bytes of each layer's tensor */
};

static inline size_t tr_layer_tensor_bytes(const struct kvt_device_desc *d)
{
	const struct kvt_geometry *g = &d->geometry;
	size_t planes = g->kind == KVT_KIND_MLA ? 1 : 2;
	return planes * d->num_blocks * d->block_size * (d->head_end - d->head_begin) *
	       g->head_dim * kvt_dtype_bytes(g->dtype);
}

/* Reference model: byte offset inside a layer tensor of (plane, block, row, head), where
 * head is relative to the rank's first head. Written from the layout definitions. */
static inline size_t tr_dev_off(const struct kvt_device_desc *d, uint32_t plane, uint32_t blk,
				uint32_t row, uint32_t head)
{
	size_t hl = d->head_end - d->head_begin, D = d->geometry.head_dim;
	size_t es = kvt_dtype_bytes(d->geometry.dtype), BS = d->block_size, NB = d->num_blocks;
	size_t idx;
	switch (d->layout) {
	case KVT_LAYOUT_FLASH_ATTN: /* [2][NB][BS][H][D] */
		idx = (((plane * NB + blk) * BS + row) * hl + head) * D;
		break;
	case KVT_LAYOUT_FLASHINFER: /* [NB][2][BS][H][D] */
		idx = (((blk * 2 + plane) * BS + row) * hl + head) * D;
		break;
	default: /* MLA [NB][BS][D] */
		idx = (blk * BS + row) * D;
		break;
	}
	return idx * es;
}
/* Reference model: byte offset in the object of (layer, plane, token, absolute head). */
static inline size_t tr_obj_off(const struct kvt_geometry *g, uint32_t n, uint32_t l,
				uint32_t plane, uint32_t t, uint32_t head)
{
	size_t es = kvt_dtype_bytes(g->dtype);
	return kvt_layer_offset(g, n, l) +
	       ((((size_t)plane * n + t) * g->kv_heads + head) * g->head_dim) * es;
}

static inline int tr_rank_open(struct tr_rank *r, const struct kvt_config *cfg,
			       const struct kvt_geometry *g, uint32_t layout, uint32_t bs,
			       uint32_t nb, uint32_t h0, uint32_t h1, uint8_t fill, uint64_t *seed)
{
	memset(r, 0, sizeof(*r));
	r->desc.size = sizeof(r->desc);
	r->desc.geometry = *g;
	r->desc.layout = layout;
	r->desc.block_size = bs;
	r->desc.num_blocks = nb;
	r->desc.head_begin = h0;
	r->desc.head_end = h1;
	r->layer_bytes = tr_layer_tensor_bytes(&r->desc);
	/* emu "device" memory is host memory: the engine's tensors are plain allocations. */
	for (uint32_t l = 0; l < g->layers; l++) {
		r->base[l] = malloc(r->layer_bytes);
		if (!r->base[l])
			return -ENOMEM;
		if (seed)
			tr_fill(seed, r->base[l], r->layer_bytes);
		else
			memset(r->base[l], fill, r->layer_bytes);
	}
	r->desc.layer_base = r->base;
	return kvt_device_open(cfg, "emu", &r->desc, &r->dev);
}

static inline void tr_rank_close(struct tr_rank *r)
{
	kvt_device_close(r->dev);
	for (uint32_t l = 0; l < r->desc.geometry.layers; l++)
		free(r->base[l]);
	memset(r, 0, sizeof(*r));
}

/* A full "logical" KV for one chunk: [layer][plane][t][all heads][dim] as the object's
 * dense payload (no padding), from which every rank's blocks are filled and against which
 * every result is checked. */
static inline size_t tr_logical_off(const struct kvt_geometry *g, uint32_t n, uint32_t l,
				    uint32_t plane, uint32_t t, uint32_t head)
{
	return (size_t)l * kvt_layer_bytes(g, n) +
	       ((((size_t)plane * n + t) * g->kv_heads + head) * g->head_dim) *
		   kvt_dtype_bytes(g->dtype);
}

/* Copy the logical KV of tokens [0, n) into rank r's blocks ids (the engine "computing"). */
static inline void tr_rank_load_logical(struct tr_rank *r, const uint8_t *logical, uint32_t n,
					const uint32_t *ids)
{
	const struct kvt_device_desc *d = &r->desc;
	const struct kvt_geometry *g = &d->geometry;
	uint32_t planes = g->kind == KVT_KIND_MLA ? 1 : 2;
	size_t head = (size_t)g->head_dim * kvt_dtype_bytes(g->dtype);
	for (uint32_t l = 0; l < g->layers; l++)
		for (uint32_t p = 0; p < planes; p++)
			for (uint32_t t = 0; t < n; t++)
				for (uint32_t h = d->head_begin; h < d->head_end; h++)
					memcpy((uint8_t *)r->base[l] +
						   tr_dev_off(d, p, ids[t / d->block_size],
							      t % d->block_size, h - d->head_begin),
					       logical + tr_logical_off(g, n, l, p, t, h), head);
}

/* Does rank r hold exactly the logical KV of tokens [0, n) in blocks ids, and is every
 * other byte of its tensors still `poison`? Returns the number of wrong bytes. */
static inline size_t tr_rank_check_layers(const struct tr_rank *r, const uint8_t *logical,
					  uint32_t n, const uint32_t *ids, uint8_t poison,
					  uint32_t l0, uint32_t l1)
{
	const struct kvt_device_desc *d = &r->desc;
	const struct kvt_geometry *g = &d->geometry;
	uint32_t planes = g->kind == KVT_KIND_MLA ? 1 : 2;
	size_t head = (size_t)g->head_dim * kvt_dtype_bytes(g->dtype), bad = 0;
	uint8_t *expect = (uint8_t *)malloc(r->layer_bytes);
	for (uint32_t l = l0; l < l1; l++) {
		memset(expect, poison, r->layer_bytes);
		for (uint32_t p = 0; p < planes; p++)
			for (uint32_t t = 0; t < n; t++)
				for (uint32_t h = d->head_begin; h < d->head_end; h++)
					memcpy(expect + tr_dev_off(d, p, ids[t / d->block_size],
								   t % d->block_size,
								   h - d->head_begin),
					       logical + tr_logical_off(g, n, l, p, t, h), head);
		const uint8_t *got = (const uint8_t *)r->base[l];
		for (size_t i = 0; i < r->layer_bytes; i++)
			bad += got[i] != expect[i];
	}
	free(expect);
	return bad;
}
static inline size_t tr_rank_check(const struct tr_rank *r, const uint8_t *logical, uint32_t n,
				   const uint32_t *ids, uint8_t poison)
{
	return tr_rank_check_layers(r, logical, n, ids, poison, 0, r->desc.geometry.layers);
}

/* Does obj hold the logical KV of heads [h0, h1) (everything else `poison`)? Wrong bytes. */
static inline size_t tr_obj_check(const uint8_t *obj, size_t obj_len, const struct kvt_geometry *g,
				  const uint8_t *logical, uint32_t n, uint32_t h0, uint32_t h1,
				  uint8_t poison)
{
	uint32_t planes = g->kind == KVT_KIND_MLA ? 1 : 2;
	size_t head = (size_t)g->head_dim * kvt_dtype_bytes(g->dtype), bad = 0;
	uint8_t *expect = (uint8_t *)malloc(obj_len);
	memset(expect, poison, obj_len);
	for (uint32_t l = 0; l < g->layers; l++)
		for (uint32_t p = 0; p < planes; p++)
			for (uint32_t t = 0; t < n; t++)
				for (uint32_t h = h0; h < h1; h++)
					memcpy(expect + tr_obj_off(g, n, l, p, t, h),
					       logical + tr_logical_off(g, n, l, p, t, h), head);
	for (size_t i = 0; i < obj_len; i++)
		bad += obj[i] != expect[i];
	free(expect);
	return bad;
}

/* One store or device call's completion, counted: the result of the last one. */
struct tr_done {
	int calls;
	struct kvt_result res;
};

static inline void tr_on_done(void *arg, const struct kvt_result *res)
{
	struct tr_done *d = (struct tr_done *)arg; /* also compiled as C++ (bench/gpu_check.cu) */
	d->calls++;
	d->res = *res;
}

#endif
