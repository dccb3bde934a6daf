/*
 * header_fuzz.c - libFuzzer target for the chunk object parser (src/format.c): arbitrary
 * bytes go to kvt__object_verify as a whole object, and again with the header CRC
 * recomputed so that the fuzzer gets past the CRC and exercises the field checks. Whatever
 * decodes must satisfy the invariants readers rely on; a violation traps.
 *
 * Built two ways: with tests/fuzz/replay_main.c as a ctest test replaying the corpus, and
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc tests/fuzz/header_fuzz.c \
 *         src/format.c src/keys.c src/util.c -lisal -lcrypto -o /tmp/header_fuzz
 * for real fuzzing (see docs/FORMAT.md).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format.h"
#include "internal.h"

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c))                                                                          \
			__builtin_trap();                                                          \
	} while (0)

/* What every successfully decoded header must promise a reader of a len-byte object. */
static void check_header(const struct kvt_header *h, uint64_t len)
{
	const struct kvt_geometry *g = &h->geometry;
	CHECK(kvt_geometry_check(g) == 0);
	CHECK(h->n_tokens >= 1 && h->n_tokens <= g->chunk_tokens);
	CHECK(h->object_bytes <= (4ull << 30));
	CHECK(h->object_bytes == kvt_object_bytes(g, h->n_tokens));
	uint64_t lb = kvt_layer_bytes(g, h->n_tokens);
	for (uint32_t l = 0; l < g->layers; l++) {
		CHECK(h->layer_offset[l] >= KVT_HEADER_BYTES);
		CHECK(h->layer_offset[l] % KVT_ALIGN == 0);
		CHECK(h->layer_offset[l] + lb <= h->object_bytes);
	}
	if (len)
		CHECK(h->object_bytes <= len); /* bytes past the object are ignored */
}

static void try_object(const uint8_t *obj, size_t size)
{
	struct kvt_header h;

	if (kvt__object_verify(obj, size, NULL, &h) != 0)
		return;
	check_header(&h, size);
	uint64_t plen = kvt_payload_bytes(&h.geometry, h.n_tokens);
	CHECK(plen <= size);
	uint8_t *dst = malloc(plen ? plen : 1);
	if (!dst)
		return;
	CHECK(kvt__object_extract(&h, obj, 0, h.geometry.layers, dst, plen) == (int64_t)plen);
	/* Extracted layer l is the object's bytes at layer_offset[l]. */
	uint64_t lb = plen / h.geometry.layers;
	for (uint32_t l = 0; l < h.geometry.layers; l++)
		CHECK(memcmp(dst + l * lb, obj + h.layer_offset[l], lb) == 0);
	free(dst);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvt_header h;

	try_object(data, size);
	if (size < KVT_HEADER_BYTES)
		return 0;

	uint8_t *copy = malloc(size);
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	uint32_t crc = kvt__crc32c(0, copy, KVT_HEADER_BYTES - 4);
	for (int i = 0; i < 4; i++)
		copy[KVT_HEADER_BYTES - 4 + i] = (uint8_t)(crc >> (8 * i));
	if (kvt__header_decode(copy, &h, NULL) == 0)
		check_header(&h, 0);
	try_object(copy, size);
	free(copy);
	return 0;
}
