/*
 * format_bench.c - cost of the chunk object codec (src/format.c) on the put and get paths,
 * as ratios to memcpy measured in the same run.
 *
 * One Llama-3.1-8B chunk (32 layers x 1 MiB, bf16, 256 tokens) is encoded (copy + CRC per
 * layer + header), verified (CRC of every layer) and extracted (copy + CRC). References:
 * memcpy of the payload, and memcpy followed by a separate CRC pass over the destination
 * (what encode would cost without its blocked copy+CRC loop).
 *
 *   format_bench [runs]   prints one summary line "format_bench: ..." (fixed payload seed)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format.h"
#include "internal.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	return v[n / 2];
}

static volatile uint32_t sink;

int main(int argc, char **argv)
{
	int runs = argc > 1 ? atoi(argv[1]) : 31;
	const struct kvt_geometry g = {32, 8, 128, 256, KVT_DTYPE_BF16, KVT_KIND_KV};
	uint64_t plen = kvt_payload_bytes(&g, 256), olen = kvt_object_bytes(&g, 256);
	uint8_t *payload = kvt__aligned_alloc(plen), *obj = kvt__aligned_alloc(olen);
	uint8_t *dst = kvt__aligned_alloc(plen);
	uint64_t *t[5];
	uint8_t ns[32] = {1};
	struct kvt_key key = {{2}};
	struct kvt_header h;
	uint64_t x = 0x2545f4914f6cdd1dull;

	for (int i = 0; i < 5; i++)
		t[i] = malloc((size_t)(runs > 0 ? runs : 1) * 8);
	if (runs < 1 || !payload || !obj || !dst || !t[0] || !t[1] || !t[2] || !t[3] || !t[4]) {
		fprintf(stderr, "format_bench: setup failed\n");
		return 1;
	}
	for (uint64_t i = 0; i < plen / 8; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		memcpy(payload + 8 * i, &x, 8);
	}
	memset(obj, 0, olen);
	memset(dst, 0, plen);
	for (int r = 0; r < runs; r++) {
		uint64_t t0 = kvt__now_ns();
		memcpy(dst, payload, plen);
		uint64_t t1 = kvt__now_ns();
		memcpy(dst, payload, plen);
		uint32_t c = 0;
		for (int l = 0; l < 32; l++)
			c ^= kvt__crc32c(0, dst + (uint64_t)l * (1 << 20), 1 << 20);
		sink = c;
		uint64_t t2 = kvt__now_ns();
		if (kvt__object_encode(obj, olen, &g, ns, &key, 256, payload, plen))
			return 1;
		uint64_t t3 = kvt__now_ns();
		if (kvt__object_verify(obj, olen, NULL, &h))
			return 1;
		uint64_t t4 = kvt__now_ns();
		if (kvt__object_extract(&h, obj, 0, 32, dst, plen) != (int64_t)plen)
			return 1;
		uint64_t t5 = kvt__now_ns();
		t[0][r] = t1 - t0;
		t[1][r] = t2 - t1;
		t[2][r] = t3 - t2;
		t[3][r] = t4 - t3;
		t[4][r] = t5 - t4;
	}
	if (memcmp(dst, payload, plen))
		return 1;
	double m[5];
	for (int i = 0; i < 5; i++)
		m[i] = (double)median(t[i], runs);
	printf("format_bench: bytes=%llu runs=%d memcpy_GBps=%.2f memcpy_then_crc_GBps=%.2f "
	       "encode_GBps=%.2f verify_GBps=%.2f extract_GBps=%.2f encode_vs_memcpy=%.2f "
	       "extract_vs_memcpy=%.2f encode_vs_memcpy_then_crc=%.2f\n",
	       (unsigned long long)plen, runs, plen / m[0], plen / m[1], plen / m[2], plen / m[3],
	       plen / m[4], m[2] / m[0], m[4] / m[0], m[2] / m[1]);
	for (int i = 0; i < 5; i++)
		free(t[i]);
	kvt__free_aligned(dst, plen);
	kvt__free_aligned(obj, olen);
	kvt__free_aligned(payload, plen);
	return 0;
}
