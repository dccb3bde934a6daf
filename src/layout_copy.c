/*
 * layout_copy.c - the strided copy between a canonical chunk and an engine's row
 * (include/kvtier_layout.h): why it exists is there; this file only moves elements.
 *
 * A chunk is cut into tiles of one (layer, K|V, block, head): block_tokens x head_dim
 * elements, dense in the canonical chunk (token stride kv_heads*head_dim, dim stride 1)
 * and strided in the row. Rows whose dim stride is 1 copy a token's head_dim elements at
 * once; a transposed page (token stride 1, e.g. vLLM CPU "vec" K) is copied in small
 * square blocks so both sides stay in cache. A tiled page (vLLM CPU "amx") is copied one
 * of its tiles at a time, each a small strided tile as above.
 */
#include <errno.h>
#include <string.h>

#include "internal.h"
#include "layout_copy.h"

#define BLK 16

uint64_t kvt_row_layout_chunk_bytes(const struct kvt_row_layout *lay)
{
	return 2ull * lay->layers * lay->block_tokens * lay->blocks_per_chunk * lay->kv_heads *
	       lay->head_dim * lay->elem_bytes;
}

/* The tiling of n elements along one axis (tokens of a block, dims of a head): tiles of
 * `size` elements (size n when not tiled), `count` of them, the last element's offset. */
struct axis {
	uint32_t size, count;
	int64_t stride, tile_stride;
};

static int axis_of(uint32_t n, int64_t stride, int64_t tile, int64_t tile_stride,
		   struct axis *a)
{
	if (!tile && !tile_stride) {
		*a = (struct axis){n, 1, stride, 0};
		return 1;
	}
	if (tile <= 0 || tile > n || n % tile || tile_stride < 0)
		return 0;
	*a = (struct axis){(uint32_t)tile, n / (uint32_t)tile, stride, tile_stride};
	return 1;
}

static uint64_t axis_last(const struct axis *a)
{
	return (uint64_t)(a->count - 1) * (uint64_t)a->tile_stride +
	       (uint64_t)(a->size - 1) * (uint64_t)a->stride;
}

static int strides_ok(const struct kvt_row_layout *lay, const struct kvt_row_strides *s)
{
	if (s->offset < 0 || s->layer < 0 || s->block < 0 || s->token < 0 || s->rank < 0 ||
	    s->head < 0 || s->dim < 0)
		return 0;
	uint64_t ranks = lay->kv_heads / lay->heads_per_rank;
	/* bound each stride first so the largest offset below cannot overflow */
	const int64_t lim = (int64_t)1 << 40;
	if (s->offset > lim || s->layer > lim || s->block > lim || s->token > lim ||
	    s->rank > lim || s->head > lim || s->dim > lim || s->token_tile_stride > lim ||
	    s->dim_tile_stride > lim)
		return 0;
	struct axis at, ad;
	if (!axis_of(lay->block_tokens, s->token, s->token_tile, s->token_tile_stride, &at) ||
	    !axis_of(lay->head_dim, s->dim, s->dim_tile, s->dim_tile_stride, &ad))
		return 0;
	uint64_t last = (uint64_t)s->offset + (uint64_t)(lay->layers - 1) * (uint64_t)s->layer +
			(uint64_t)(lay->blocks_per_chunk - 1) * (uint64_t)s->block +
			axis_last(&at) + (ranks - 1) * (uint64_t)s->rank +
			(uint64_t)(lay->heads_per_rank - 1) * (uint64_t)s->head + axis_last(&ad);
	return (last + 1) * lay->elem_bytes <= lay->row_bytes;
}

int kvt_row_layout_check(const struct kvt_row_layout *lay)
{
	if (!lay || (lay->elem_bytes != 1 && lay->elem_bytes != 2 && lay->elem_bytes != 4) ||
	    !lay->layers || lay->layers > KVT_MAX_LAYERS || !lay->kv_heads || !lay->head_dim ||
	    !lay->block_tokens || !lay->blocks_per_chunk || !lay->heads_per_rank ||
	    lay->kv_heads % lay->heads_per_rank || lay->kv_heads > 65536 ||
	    lay->head_dim > 65536 || (uint64_t)lay->block_tokens * lay->blocks_per_chunk > 65536 ||
	    lay->reserved)
		return -EINVAL;
	if (!strides_ok(lay, &lay->k) || !strides_ok(lay, &lay->v))
		return -EINVAL;
	return 0;
}

/* Copy an nt x nd tile: dst[t*dt + d*dd] = src[t*st + d*sd] (strides in elements). */
#define TILE_FN(name, T)                                                                      \
	static void name(T *dst, int64_t dt, int64_t dd, const T *src, int64_t st, int64_t sd, \
			 uint32_t nt, uint32_t nd)                                             \
	{                                                                                     \
		if (dd == 1 && sd == 1) {                                                     \
			for (uint32_t t = 0; t < nt; t++)                                     \
				memcpy(dst + t * dt, src + t * st, (size_t)nd * sizeof(T));   \
			return;                                                               \
		}                                                                             \
		if (dt != 1 && st != 1) { /* no transpose: d innermost */                     \
			for (uint32_t t = 0; t < nt; t++) {                                   \
				T *o = dst + t * dt;                                          \
				const T *i = src + t * st;                                    \
				for (uint32_t d = 0; d < nd; d++)                             \
					o[d * dd] = i[d * sd];                                \
			}                                                                     \
			return;                                                               \
		}                                                                             \
		/* a transpose: square blocks, the destination's contiguous axis innermost */ \
		for (uint32_t t0 = 0; t0 < nt; t0 += BLK) {                                   \
			uint32_t t1 = t0 + BLK < nt ? t0 + BLK : nt;                          \
			for (uint32_t d0 = 0; d0 < nd; d0 += BLK) {                           \
				uint32_t d1 = d0 + BLK < nd ? d0 + BLK : nd;                  \
				if (dt == 1) {                                                \
					for (uint32_t d = d0; d < d1; d++) {                  \
						T *o = dst + d * dd;                          \
						const T *i = src + d * sd;                    \
						for (uint32_t t = t0; t < t1; t++)            \
							o[t] = i[t * st];                     \
					}                                                     \
				} else {                                                      \
					for (uint32_t t = t0; t < t1; t++) {                  \
						T *o = dst + t * dt;                          \
						const T *i = src + t * st;                    \
						for (uint32_t d = d0; d < d1; d++)            \
							o[d * dd] = i[d * sd];                \
					}                                                     \
				}                                                             \
			}                                                                     \
		}                                                                             \
	}

TILE_FN(tile8, uint8_t)
TILE_FN(tile16, uint16_t)
TILE_FN(tile32, uint32_t)

static void tile(uint32_t eb, char *dst, int64_t dt, int64_t dd, const char *src, int64_t st,
		 int64_t sd, uint32_t nt, uint32_t nd)
{
	switch (eb) {
	case 1:
		tile8((uint8_t *)dst, dt, dd, (const uint8_t *)src, st, sd, nt, nd);
		break;
	case 2:
		tile16((uint16_t *)dst, dt, dd, (const uint16_t *)src, st, sd, nt, nd);
		break;
	default:
		tile32((uint32_t *)dst, dt, dd, (const uint32_t *)src, st, sd, nt, nd);
		break;
	}
}

/* Tiles of 2 tokens x n dims whose tokens alternate in the row (vLLM CPU "amx" V: d0t0,
 * d0t1, d1t0, ...), 2-byte elements: two canonical runs of n interleaved, in a loop the
 * compiler vectorises. By tile: 3x faster than one strided 2 x n copy call per tile. */
static void interleave_pairs(uint16_t *r, uint16_t *a, uint16_t *b, uint32_t n, int to_row)
{
	if (to_row) {
		for (uint32_t i = 0; i < n; i++) {
			r[2 * i] = a[i];
			r[2 * i + 1] = b[i];
		}
	} else {
		for (uint32_t i = 0; i < n; i++) {
			a[i] = r[2 * i];
			b[i] = r[2 * i + 1];
		}
	}
}

/* One (layer, K|V, block, head) of a chunk: c its first element in the canonical chunk,
 * r in the row; tile by tile when the page is tiled (the layout was checked). */
static void copy_head(const struct kvt_row_layout *lay, const struct kvt_row_strides *s,
		      char *r, char *c, int to_row)
{
	const uint32_t eb = lay->elem_bytes;
	const int64_t ct = (int64_t)lay->kv_heads * lay->head_dim;
	struct axis at = {0}, ad = {0};
	axis_of(lay->block_tokens, s->token, s->token_tile, s->token_tile_stride, &at);
	axis_of(lay->head_dim, s->dim, s->dim_tile, s->dim_tile_stride, &ad);
	const uint32_t wide = ad.size * eb;
	if (ad.count > 1 && ad.stride == 1 && (wide == 2 || wide == 4) &&
	    at.stride % ad.size == 0 && at.tile_stride % ad.size == 0 &&
	    ad.tile_stride % ad.size == 0 &&
	    (uintptr_t)r % wide == 0 && (uintptr_t)c % wide == 0) {
		/* a dim tile is adjacent elements on both sides (vLLM CPU "amx" K: 2 dims):
		 * moved as one element of its width, a whole token tile per call */
		for (uint32_t ti = 0; ti < at.count; ti++) {
			char *rt = r + ti * at.tile_stride * eb;
			char *cc = c + (int64_t)ti * at.size * ct * eb;
			if (to_row)
				tile(wide, rt, at.stride / ad.size, ad.tile_stride / ad.size, cc,
				     ct / ad.size, 1, at.size, ad.count);
			else
				tile(wide, cc, ct / ad.size, 1, rt, at.stride / ad.size,
				     ad.tile_stride / ad.size, at.size, ad.count);
		}
		return;
	}
	if (eb == 2 && at.count > 1 && at.size == 2 && at.stride == 1 && ad.stride == 2) {
		for (uint32_t ti = 0; ti < at.count; ti++)
			for (uint32_t di = 0; di < ad.count; di++) {
				uint16_t *rt = (uint16_t *)r + ti * at.tile_stride +
					       di * ad.tile_stride;
				uint16_t *a = (uint16_t *)c + (int64_t)ti * 2 * ct +
					      (int64_t)di * ad.size;
				interleave_pairs(rt, a, a + ct, ad.size, to_row);
			}
		return;
	}
	for (uint32_t ti = 0; ti < at.count; ti++) {
		for (uint32_t di = 0; di < ad.count; di++) {
			char *rt = r + (ti * at.tile_stride + di * ad.tile_stride) * eb;
			char *cc = c + ((int64_t)ti * at.size * ct + (int64_t)di * ad.size) * eb;
			if (to_row)
				tile(eb, rt, at.stride, ad.stride, cc, ct, 1, at.size, ad.size);
			else
				tile(eb, cc, ct, 1, rt, at.stride, ad.stride, at.size, ad.size);
		}
	}
}

/* to_row: canonical -> row, else row -> canonical. Layer l of the chunk starts at
 * chunk + l * lstride bytes (0: dense, one layer after the other). */
static void convert(const struct kvt_row_layout *lay, char *row, char *chunk, uint64_t lstride,
		    int to_row)
{
	const uint32_t eb = lay->elem_bytes, H = lay->kv_heads, D = lay->head_dim,
		       Tb = lay->block_tokens, Hr = lay->heads_per_rank;
	const uint64_t T = (uint64_t)Tb * lay->blocks_per_chunk;
	const int64_t ct = (int64_t)H * D; /* canonical token stride */
	if (!lstride)
		lstride = 2 * T * (uint64_t)ct * eb;
	for (uint32_t l = 0; l < lay->layers; l++) {
		for (int kv = 0; kv < 2; kv++) {
			const struct kvt_row_strides *s = kv ? &lay->v : &lay->k;
			char *cbase = chunk + l * lstride + (uint64_t)kv * T * (uint64_t)ct * eb;
			for (uint32_t b = 0; b < lay->blocks_per_chunk; b++) {
				for (uint32_t h = 0; h < H; h++) {
					char *c = cbase + ((uint64_t)b * Tb * (uint64_t)ct +
							   (uint64_t)h * D) * eb;
					char *r = row + (uint64_t)(s->offset + l * s->layer +
								   b * s->block +
								   (h / Hr) * s->rank +
								   (h % Hr) * s->head) * eb;
					copy_head(lay, s, r, c, to_row);
				}
			}
		}
	}
}

int kvt_row_from_canonical(const struct kvt_row_layout *lay, const void *chunk, void *row)
{
	if (!chunk || !row || kvt_row_layout_check(lay))
		return -EINVAL;
	convert(lay, row, (char *)chunk, 0, 1);
	return 0;
}

int kvt_row_to_canonical(const struct kvt_row_layout *lay, const void *row, void *chunk)
{
	if (!chunk || !row || kvt_row_layout_check(lay))
		return -EINVAL;
	convert(lay, (char *)row, chunk, 0, 0);
	return 0;
}

/* For rows_io.c: the same without the checks (the handle checked the layout once). */
void kvt__row_from_canonical(const struct kvt_row_layout *lay, const void *chunk,
			     uint64_t layer_stride, void *row)
{
	convert(lay, row, (char *)chunk, layer_stride, 1);
}

void kvt__row_to_canonical(const struct kvt_row_layout *lay, const void *row, void *chunk)
{
	convert(lay, (char *)row, chunk, 0, 0);
}
