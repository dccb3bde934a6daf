/*
 * layout_bench.c - CPU cost of converting one chunk between kvtier's canonical layout and
 * an engine's row (src/layout_copy.c, include/kvtier_layout.h), for vLLM's CPU pages
 * ("vec": K transposed; "amx": K in 16-token x 2-dim tiles, V in 2-token x 16-dim tiles)
 * and FlashAttention's [tokens][heads][K|V] pages ("nhd"), against memcpy of the same
 * bytes. Why: a restore writes every chunk into its row and a store reads every row into
 * a chunk, on the I/O completion threads; a layout whose copy is slow caps the tier. One
 * thread, no I/O: GB/s of chunk bytes over all runs.
 *
 *   layout_bench [runs]     one line per layout and direction; the default geometry is a
 *                           128-token chunk of 32 layers x 8 KV heads x 128 dims, bf16
 *                           (16 MiB: Llama-3-8B's)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvtier_layout.h"

enum { L = 32, H = 8, D = 128, TB = 128 };

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The strides of one layout, TP=1, one block per chunk, unpadded pages (as
 * python/kvtier/vllm/layout.py derives them). */
static struct kvt_row_layout layout_of(const char *name)
{
	const int64_t P = 2LL * TB * H * D; /* a page: one layer's block */
	struct kvt_row_layout lay = {.elem_bytes = 2, .layers = L, .kv_heads = H, .head_dim = D,
				     .block_tokens = TB, .blocks_per_chunk = 1, .heads_per_rank = H,
				     .row_bytes = (uint64_t)L * P * 2};
	struct kvt_row_strides base = {.layer = P, .block = P, .rank = P * L};
	lay.k = lay.v = base;
	if (!strcmp(name, "cpu-vec")) {
		lay.k.head = lay.v.head = 2LL * TB * D;
		lay.k.token = 1, lay.k.dim = TB;
		lay.v.offset = (int64_t)TB * D, lay.v.token = D, lay.v.dim = 1;
	} else if (!strcmp(name, "cpu-amx")) {
		lay.k.head = lay.v.head = 2LL * TB * D;
		lay.k.token = 2, lay.k.dim = 1;
		lay.k.token_tile = 16, lay.k.token_tile_stride = 16LL * D;
		lay.k.dim_tile = 2, lay.k.dim_tile_stride = 32;
		lay.v.offset = (int64_t)TB * D, lay.v.token = 1, lay.v.dim = 2;
		lay.v.token_tile = 2, lay.v.token_tile_stride = 32;
		lay.v.dim_tile = 16, lay.v.dim_tile_stride = 16LL * TB;
	} else { /* nhd */
		lay.k.token = lay.v.token = 2LL * H * D;
		lay.k.head = lay.v.head = 2LL * D;
		lay.k.dim = lay.v.dim = 1;
		lay.v.offset = D;
	}
	return lay;
}

int main(int argc, char **argv)
{
	int runs = argc > 1 ? atoi(argv[1]) : 20;
	if (runs < 1)
		runs = 1;
	const char *names[] = {"cpu-vec", "cpu-amx", "nhd"};
	struct kvt_row_layout probe = layout_of("nhd");
	uint64_t bytes = kvt_row_layout_chunk_bytes(&probe);
	uint8_t *chunk = malloc(bytes), *row = malloc(probe.row_bytes), *copy = malloc(bytes);
	if (!chunk || !row || !copy)
		return 1;
	for (uint64_t i = 0; i < bytes; i++)
		chunk[i] = (uint8_t)(i * 2654435761u >> 13);
	memcpy(row, chunk, bytes);
	double t0 = now();
	for (int r = 0; r < runs; r++)
		memcpy(copy, r & 1 ? row : chunk, bytes);
	double ref = (double)bytes * runs / (now() - t0) / 1e9;
	printf("layout_bench: %llu-byte chunk (%d layers x %d heads x %d dims x %d tokens, bf16), "
	       "%d runs, memcpy %.2f GB/s\n",
	       (unsigned long long)bytes, L, H, D, TB, runs, ref);
	for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++) {
		struct kvt_row_layout lay = layout_of(names[n]);
		if (kvt_row_layout_check(&lay) < 0) {
			fprintf(stderr, "layout_bench: %s: bad strides\n", names[n]);
			return 1;
		}
		kvt_row_from_canonical(&lay, chunk, row); /* warm */
		t0 = now();
		for (int r = 0; r < runs; r++)
			kvt_row_from_canonical(&lay, chunk, row);
		double to_row = (double)bytes * runs / (now() - t0) / 1e9;
		t0 = now();
		for (int r = 0; r < runs; r++)
			kvt_row_to_canonical(&lay, row, copy);
		double to_canon = (double)bytes * runs / (now() - t0) / 1e9;
		if (memcmp(copy, chunk, bytes)) {
			fprintf(stderr, "layout_bench: %s: the round trip changed the chunk\n",
				names[n]);
			return 1;
		}
		printf("layout_bench: %-8s to row %6.2f GB/s (%.2fx memcpy)  to canonical %6.2f "
		       "GB/s (%.2fx)\n",
		       names[n], to_row, to_row / ref, to_canon, to_canon / ref);
	}
	free(chunk);
	free(row);
	free(copy);
	return 0;
}
