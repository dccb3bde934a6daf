/*
 * layout_copy_test.c - the strided copy between canonical chunks and engine rows
 * (src/layout_copy.c) against an independent reference: rows written element by element
 * in the order each layout's description gives (a cursor walking the row), never from
 * strides. Layouts: vLLM's CPU "vec" pages (K transposed), its "amx" pages (tiles of
 * 16 tokens x 2 dims for K, 2 tokens x 16 dims for V) and CUDA FlashAttention's
 * [block_tokens][heads][K|V] pages ("nhd") and the HND variant, with tensor parallelism,
 * padded pages and 1, 2 and 4-byte elements. Padding must stay untouched, both directions
 * must be exact, and layouts that reach past a row must be refused.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvtier_layout.h"

enum { CPU_VEC, NHD, HND, CPU_AMX };

struct geo {
	uint32_t L, H, D, Tb, bpc, tp, eb, pad; /* pad: extra elements per page */
};

static uint32_t T_(const struct geo *g) { return g->Tb * g->bpc; }
static uint32_t Hr_(const struct geo *g) { return g->H / g->tp; }
static uint64_t page_e(const struct geo *g) { return 2ull * g->Tb * Hr_(g) * g->D + g->pad; }
static uint64_t row_e(const struct geo *g) { return (uint64_t)g->tp * g->L * g->bpc * page_e(g); }
static uint64_t chunk_e(const struct geo *g) { return 2ull * g->L * T_(g) * g->H * g->D; }

/* Element (l, kv, t, h, d) of a canonical chunk: its position, straight from the format. */
static uint64_t canon_at(const struct geo *g, uint32_t l, int kv, uint32_t t, uint32_t h,
			 uint32_t d)
{
	return ((((uint64_t)l * 2 + (uint64_t)kv) * T_(g) + t) * g->H + h) * g->D + d;
}

static uint32_t get(const void *p, uint64_t i, uint32_t eb)
{
	switch (eb) {
	case 1: return ((const uint8_t *)p)[i];
	case 2: return ((const uint16_t *)p)[i];
	default: return ((const uint32_t *)p)[i];
	}
}

static void put(void *p, uint64_t i, uint32_t eb, uint32_t v)
{
	switch (eb) {
	case 1: ((uint8_t *)p)[i] = (uint8_t)v; break;
	case 2: ((uint16_t *)p)[i] = (uint16_t)v; break;
	default: ((uint32_t *)p)[i] = v; break;
	}
}

/* The reference: walk the row in the layout's own order. */
static void reference_row(const struct geo *g, int kind, const void *chunk, void *row)
{
	const uint32_t Hr = Hr_(g), eb = g->eb;
	uint64_t pos = 0;
	for (uint32_t r = 0; r < g->tp; r++)
		for (uint32_t l = 0; l < g->L; l++)
			for (uint32_t j = 0; j < g->bpc; j++) {
				uint64_t start = pos;
				if (kind == CPU_VEC) {
					for (uint32_t hr = 0; hr < Hr; hr++) {
						uint32_t h = r * Hr + hr;
						for (uint32_t d = 0; d < g->D; d++) /* K^T */
							for (uint32_t tb = 0; tb < g->Tb; tb++)
								put(row, pos++, eb, get(chunk, canon_at(g, l, 0, j * g->Tb + tb, h, d), eb));
						for (uint32_t tb = 0; tb < g->Tb; tb++) /* V */
							for (uint32_t d = 0; d < g->D; d++)
								put(row, pos++, eb, get(chunk, canon_at(g, l, 1, j * g->Tb + tb, h, d), eb));
					}
				} else if (kind == CPU_AMX) {
					for (uint32_t hr = 0; hr < Hr; hr++) {
						uint32_t h = r * Hr + hr;
						/* K: tiles of 16 tokens, each of pairs of dims */
						for (uint32_t t0 = 0; t0 < g->Tb; t0 += 16)
							for (uint32_t d0 = 0; d0 < g->D; d0 += 2)
								for (uint32_t tb = t0; tb < t0 + 16; tb++)
									for (uint32_t d = d0; d < d0 + 2; d++)
										put(row, pos++, eb, get(chunk, canon_at(g, l, 0, j * g->Tb + tb, h, d), eb));
						/* V: tiles of 16 dims, each of pairs of tokens */
						for (uint32_t d0 = 0; d0 < g->D; d0 += 16)
							for (uint32_t t0 = 0; t0 < g->Tb; t0 += 2)
								for (uint32_t d = d0; d < d0 + 16; d++)
									for (uint32_t tb = t0; tb < t0 + 2; tb++)
										put(row, pos++, eb, get(chunk, canon_at(g, l, 1, j * g->Tb + tb, h, d), eb));
					}
				} else if (kind == NHD) {
					for (uint32_t tb = 0; tb < g->Tb; tb++)
						for (uint32_t hr = 0; hr < Hr; hr++)
							for (int kv = 0; kv < 2; kv++)
								for (uint32_t d = 0; d < g->D; d++)
									put(row, pos++, eb, get(chunk, canon_at(g, l, kv, j * g->Tb + tb, r * Hr + hr, d), eb));
				} else { /* HND */
					for (uint32_t hr = 0; hr < Hr; hr++)
						for (uint32_t tb = 0; tb < g->Tb; tb++)
							for (int kv = 0; kv < 2; kv++)
								for (uint32_t d = 0; d < g->D; d++)
									put(row, pos++, eb, get(chunk, canon_at(g, l, kv, j * g->Tb + tb, r * Hr + hr, d), eb));
				}
				pos = start + page_e(g); /* padding: skipped */
			}
}

/* The strides the same layouts have (what an engine binding derives). */
static struct kvt_row_layout strides_of(const struct geo *g, int kind)
{
	const int64_t Tb = g->Tb, D = g->D, Hr = Hr_(g), P = (int64_t)page_e(g);
	struct kvt_row_layout lay = {
		.elem_bytes = g->eb, .layers = g->L, .kv_heads = g->H, .head_dim = g->D,
		.block_tokens = g->Tb, .blocks_per_chunk = g->bpc, .heads_per_rank = (uint32_t)Hr,
		.row_bytes = row_e(g) * g->eb};
	struct kvt_row_strides base = {.layer = g->bpc * P, .block = P,
				       .rank = (int64_t)g->L * g->bpc * P};
	lay.k = lay.v = base;
	if (kind == CPU_VEC) {
		lay.k.head = lay.v.head = 2 * Tb * D;
		lay.k.token = 1, lay.k.dim = Tb;
		lay.v.offset = Tb * D, lay.v.token = D, lay.v.dim = 1;
	} else if (kind == CPU_AMX) {
		lay.k.head = lay.v.head = 2 * Tb * D;
		lay.k.token = 2, lay.k.dim = 1;
		lay.k.token_tile = 16, lay.k.token_tile_stride = 16 * D;
		lay.k.dim_tile = 2, lay.k.dim_tile_stride = 32;
		lay.v.offset = Tb * D, lay.v.token = 1, lay.v.dim = 2;
		lay.v.token_tile = 2, lay.v.token_tile_stride = 32;
		lay.v.dim_tile = 16, lay.v.dim_tile_stride = 16 * Tb;
	} else if (kind == NHD) {
		lay.k.token = lay.v.token = Hr * 2 * D;
		lay.k.head = lay.v.head = 2 * D;
		lay.k.dim = lay.v.dim = 1;
		lay.v.offset = D;
	} else {
		lay.k.head = lay.v.head = Tb * 2 * D;
		lay.k.token = lay.v.token = 2 * D;
		lay.k.dim = lay.v.dim = 1;
		lay.v.offset = D;
	}
	return lay;
}

static void one(const struct geo *g, int kind)
{
	uint64_t ce = chunk_e(g), re = row_e(g);
	uint8_t *chunk = malloc(ce * g->eb), *back = malloc(ce * g->eb);
	uint8_t *want = malloc(re * g->eb), *got = malloc(re * g->eb);
	assert_non_null(chunk);
	for (uint64_t i = 0; i < ce; i++) /* distinct values where the width allows */
		put(chunk, i, g->eb, (uint32_t)(i * 2654435761u + 7));
	memset(want, 0xA5, re * g->eb);
	memset(got, 0xA5, re * g->eb);
	reference_row(g, kind, chunk, want);
	struct kvt_row_layout lay = strides_of(g, kind);
	assert_int_equal(kvt_row_layout_check(&lay), 0);
	assert_int_equal(kvt_row_layout_chunk_bytes(&lay), ce * g->eb);
	assert_int_equal(kvt_row_from_canonical(&lay, chunk, got), 0);
	if (memcmp(want, got, re * g->eb)) {
		for (uint64_t i = 0; i < re; i++)
			if (get(want, i, g->eb) != get(got, i, g->eb)) {
				fail_msg("layout %d L%u H%u D%u Tb%u bpc%u tp%u eb%u pad%u: element %llu "
					 "is %u, want %u", kind, g->L, g->H, g->D, g->Tb, g->bpc, g->tp,
					 g->eb, g->pad, (unsigned long long)i, get(got, i, g->eb),
					 get(want, i, g->eb));
			}
	}
	memset(back, 0, ce * g->eb);
	assert_int_equal(kvt_row_to_canonical(&lay, want, back), 0);
	assert_memory_equal(back, chunk, ce * g->eb);
	free(chunk);
	free(back);
	free(want);
	free(got);
}

static const struct geo GEOS[] = {
	/* L  H  D   Tb  bpc tp eb pad */
	{2, 2, 64, 128, 1, 1, 2, 0},  /* the demo's tiny model */
	{3, 4, 8, 16, 2, 2, 2, 0},    /* TP=2, two blocks per chunk */
	{2, 4, 16, 32, 3, 4, 2, 40},  /* TP=4, padded pages */
	{1, 2, 5, 7, 2, 1, 4, 3},     /* odd sizes, 4-byte elements */
	{2, 3, 12, 20, 1, 3, 1, 0},   /* 1-byte elements (fp8) */
	{2, 8, 128, 128, 1, 1, 2, 0}, /* the demo's large geometry (2 of its 8 layers) */
};

static void test_cpu_vec(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(GEOS) / sizeof(GEOS[0]); i++)
		one(&GEOS[i], CPU_VEC);
}

/* Tiled pages need block_tokens and head_dim multiples of 16. */
static const struct geo AMX_GEOS[] = {
	/* L  H  D   Tb  bpc tp eb pad */
	{2, 2, 64, 128, 1, 1, 2, 0},
	{3, 4, 16, 16, 2, 2, 2, 0},
	{2, 4, 32, 32, 3, 4, 2, 40},
	{1, 2, 96, 64, 2, 1, 4, 3},
	{2, 8, 128, 128, 1, 1, 2, 0},
};

static void test_cpu_amx(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(AMX_GEOS) / sizeof(AMX_GEOS[0]); i++)
		one(&AMX_GEOS[i], CPU_AMX);
}

static void test_flash_attn(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(GEOS) / sizeof(GEOS[0]); i++) {
		one(&GEOS[i], NHD);
		one(&GEOS[i], HND);
	}
}

static void test_refused(void **state)
{
	(void)state;
	struct geo g = {2, 4, 16, 32, 2, 2, 2, 0};
	struct kvt_row_layout ok = strides_of(&g, CPU_VEC), lay;
	assert_int_equal(kvt_row_layout_check(&ok), 0);
	lay = ok;
	lay.row_bytes -= 2; /* the last V element falls outside */
	assert_int_equal(kvt_row_layout_check(&lay), -EINVAL);
	lay = ok;
	lay.k.dim = -1;
	assert_int_equal(kvt_row_layout_check(&lay), -EINVAL);
	lay = ok;
	lay.heads_per_rank = 3; /* does not divide 4 heads */
	assert_int_equal(kvt_row_layout_check(&lay), -EINVAL);
	lay = ok;
	lay.elem_bytes = 3;
	assert_int_equal(kvt_row_layout_check(&lay), -EINVAL);
	lay = ok;
	lay.k.rank = (int64_t)1 << 50; /* would overflow the bound computation */
	assert_int_equal(kvt_row_layout_check(&lay), -EINVAL);
	/* tiles: a size that does not divide its axis, or a negative tile stride */
	struct geo ga = {2, 4, 32, 32, 2, 2, 2, 0};
	struct kvt_row_layout amx = strides_of(&ga, CPU_AMX);
	assert_int_equal(kvt_row_layout_check(&amx), 0);
	lay = amx;
	lay.k.token_tile = 12; /* 32 tokens are not whole tiles of 12 */
	assert_int_equal(kvt_row_layout_check(&lay), -EINVAL);
	lay = amx;
	lay.v.dim_tile = 64; /* more than head_dim */
	assert_int_equal(kvt_row_layout_check(&lay), -EINVAL);
	lay = amx;
	lay.v.dim_tile_stride = -32;
	assert_int_equal(kvt_row_layout_check(&lay), -EINVAL);
	lay = amx;
	lay.row_bytes -= 2;
	assert_int_equal(kvt_row_layout_check(&lay), -EINVAL);
	lay = ok;
	lay.k.rank = (int64_t)1 << 50;
	char buf[8];
	assert_int_equal(kvt_row_from_canonical(&lay, buf, buf), -EINVAL);
	assert_int_equal(kvt_row_to_canonical(&lay, buf, buf), -EINVAL);
	assert_int_equal(kvt_row_from_canonical(NULL, buf, buf), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cpu_vec),
		cmocka_unit_test(test_cpu_amx),
		cmocka_unit_test(test_flash_attn),
		cmocka_unit_test(test_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
