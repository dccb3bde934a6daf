/*
 * daemon_proto_fuzz.c - libFuzzer target for kvtierd's request validator (src/daemon_proto.c):
 * arbitrary bytes as a received message, checked against a region size taken from the
 * input, for a fixed geometry. Whatever passes must promise the daemon what it relies on:
 * every byte range inside the region, payload lengths that match n_tokens, key counts
 * that fit. A violation traps.
 *
 * Built two ways: with tests/fuzz/replay_main.c as a ctest test replaying the corpus, and
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *         tests/fuzz/daemon_proto_fuzz.c src/daemon_proto.c src/format.c src/keys.c \
 *         src/util.c -lisal -lcrypto -o /tmp/daemon_proto_fuzz
 * for real fuzzing.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon_proto.h"

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c))                                                                          \
			__builtin_trap();                                                          \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct kvt_geometry g = {.layers = 4, .kv_heads = 2, .head_dim = 64,
					      .chunk_tokens = 16, .dtype = KVT_DTYPE_BF16,
					      .kind = KVT_KIND_KV};
	uint64_t shm_len = 0;
	if (size >= 8) { /* the first 8 bytes choose the region size (0: before HELLO) */
		memcpy(&shm_len, data, 8);
		shm_len &= (1ull << 40) - 1;
		data += 8;
		size -= 8;
	}
	struct kvtd_req r;
	memset(&r, 0, sizeof(r));
	memcpy(&r, data, size < sizeof(r) ? size : sizeof(r));
	char err[128];
	if (kvtd_req_check(&r, size, shm_len, &g, err, sizeof(err)) != 0)
		return 0;
	CHECK(size == sizeof(r) && r.magic == KVTD_MAGIC);
	if (r.op == KVTD_HELLO)
		return 0;
	CHECK(shm_len > 0);
	CHECK(r.off <= shm_len && r.len <= shm_len - r.off);
	if (r.op == KVTD_PUT)
		CHECK(r.n_tokens >= 1 && r.n_tokens <= g.chunk_tokens &&
		      r.len == kvt_payload_bytes(&g, r.n_tokens));
	if (r.op == KVTD_LOOKUP || r.op == KVTD_PREFETCH)
		CHECK(r.n * (KVT_KEY_BYTES + 1) == r.len);
	if (r.op == KVTD_GET || r.op == KVTD_GET_PIN)
		CHECK(r.layer_end <= g.layers &&
		      r.layer_begin < (r.layer_end ? r.layer_end : g.layers));
	if (r.op == KVTD_PUT_RESERVE)
		CHECK(r.n_tokens >= 1 && r.n_tokens <= g.chunk_tokens);
	if (r.op == KVTD_UNPIN || r.op == KVTD_PUT_COMMIT) /* a slot id the daemon looks up */
		CHECK(r.n < INT32_MAX);
	if (r.op == KVTD_TP_RESERVE || r.op == KVTD_TP_WRITTEN) /* heads [h0, h1) index arrays */
		CHECK(r.layer_begin < r.layer_end && r.layer_end <= g.kv_heads);
	if (r.op == KVTD_TP_RESERVE) /* the claim written back fits in the range */
		CHECK(r.n_tokens >= 1 && r.n_tokens <= g.chunk_tokens &&
		      r.len >= sizeof(struct kvtd_tp_claim) + g.kv_heads);
	if (r.op == KVTD_TP_WRITTEN)
		CHECK(r.n < INT32_MAX && r.flags <= 1);
	return 0;
}
