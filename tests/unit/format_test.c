/*
 * format_test.c - the chunk object format v1 (src/format.c): round trips for every dtype and
 * kind, full and partial chunks, layer-range extraction, and rejection (-EBADMSG) of every
 * class of corruption, including hand-made headers whose own CRC is valid.
 *
 * The header offsets below are written out from docs/FORMAT.md rather than taken from
 * format.c, so a silent layout change in the code fails here.
 * kvt-test-labels: onethread (no second thread, so nothing for TSan to check: scripts/test.sh
 * leaves it out of the TSan pass)
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "format.h"
#include "internal.h"

/* docs/FORMAT.md, header layout. */
enum {
	H_MAGIC = 0,
	H_VERSION = 8,
	H_FLAGS = 10,
	H_HEADER_BYTES = 12,
	H_LAYERS = 16,
	H_KV_HEADS = 20,
	H_HEAD_DIM = 24,
	H_CHUNK_TOKENS = 28,
	H_DTYPE = 32,
	H_KIND = 33,
	H_RESERVED0 = 34,
	H_N_TOKENS = 36,
	H_OBJECT_BYTES = 40,
	H_NS_ID = 48,
	H_KEY = 80,
	H_LAYER_ALIGN = 112,
	H_RESERVED1 = 116,
	H_LAYER_BYTES = 120,
	H_LAYER_OFFSET = 128,
	H_LAYER_CRC = 2176,
	H_RESERVED2 = 3200,
	H_CRC = 4092,
};

struct obj {
	struct kvt_geometry g;
	uint32_t n_tokens;
	uint8_t ns_id[32];
	struct kvt_key key;
	uint8_t *payload;
	uint64_t payload_len;
	uint8_t *bytes;
	uint64_t len;
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint8_t next_byte(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (uint8_t)(rng >> 24);
}

static void w32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void w64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t r32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t r64(const uint8_t *p)
{
	return (uint64_t)r32(p) | (uint64_t)r32(p + 4) << 32;
}

static void fix_crc(uint8_t *hdr)
{
	w32(hdr + H_CRC, kvt__crc32c(0, hdr, H_CRC));
}

static void obj_make(struct obj *o, struct kvt_geometry g, uint32_t n_tokens)
{
	memset(o, 0, sizeof(*o));
	o->g = g;
	o->n_tokens = n_tokens;
	for (int i = 0; i < 32; i++) {
		o->ns_id[i] = next_byte();
		o->key.bytes[i] = next_byte();
	}
	o->payload_len = kvt_payload_bytes(&g, n_tokens);
	assert_true(o->payload_len > 0);
	o->payload = malloc(o->payload_len);
	assert_non_null(o->payload);
	for (uint64_t i = 0; i < o->payload_len; i++)
		o->payload[i] = next_byte();
	o->len = kvt_object_bytes(&g, n_tokens);
	o->bytes = aligned_alloc(KVT_ALIGN, o->len);
	assert_non_null(o->bytes);
	memset(o->bytes, 0xcd, o->len); /* encode must overwrite every byte it owns */
	assert_int_equal(kvt__object_encode(o->bytes, o->len, &g, o->ns_id, &o->key, n_tokens,
					    o->payload, o->payload_len),
			 0);
}

static void obj_free(struct obj *o)
{
	free(o->payload);
	free(o->bytes);
}

static struct kvt_expect full_expect(const struct obj *o)
{
	struct kvt_expect e = {.geometry = &o->g, .ns_id = o->ns_id, .key = &o->key};
	return e;
}

static int verify(const struct obj *o, const uint8_t *bytes, uint64_t len)
{
	struct kvt_expect e = full_expect(o);
	struct kvt_header h;
	return kvt__object_verify(bytes, len, &e, &h);
}

/* Encode, verify, decode every field, extract all layers and every sub-range. */
static void round_trip(struct kvt_geometry g, uint32_t n_tokens)
{
	struct obj o;
	struct kvt_header h;
	struct kvt_expect e;

	obj_make(&o, g, n_tokens);
	e = full_expect(&o);
	assert_int_equal(kvt__object_verify(o.bytes, o.len, &e, &h), 0);
	assert_int_equal(kvt__object_verify(o.bytes, o.len, NULL, NULL), 0);
	assert_int_equal(h.version, 1);
	assert_int_equal(h.flags, 0);
	assert_int_equal(h.geometry.layers, g.layers);
	assert_int_equal(h.geometry.kv_heads, g.kv_heads);
	assert_int_equal(h.geometry.head_dim, g.head_dim);
	assert_int_equal(h.geometry.chunk_tokens, g.chunk_tokens);
	assert_int_equal(h.geometry.dtype, g.dtype);
	assert_int_equal(h.geometry.kind, g.kind);
	assert_int_equal(h.n_tokens, n_tokens);
	assert_int_equal(h.object_bytes, o.len);
	assert_memory_equal(h.ns_id, o.ns_id, 32);
	assert_memory_equal(h.key.bytes, o.key.bytes, 32);

	uint64_t lb = kvt_layer_bytes(&g, n_tokens);
	for (uint32_t l = 0; l < KVT_MAX_LAYERS; l++) {
		if (l < g.layers) {
			assert_int_equal(h.layer_offset[l], kvt_layer_offset(&g, n_tokens, l));
			assert_int_equal(h.layer_offset[l] % KVT_ALIGN, 0);
			const uint8_t *seg = o.bytes + h.layer_offset[l];
			/* Body bytes are the payload bytes, padding is zero. */
			assert_memory_equal(seg, o.payload + l * lb, lb);
			uint64_t pad = KVT_ALIGN_UP(lb, KVT_ALIGN) - lb;
			for (uint64_t i = 0; i < pad; i++)
				assert_int_equal(seg[lb + i], 0);
			assert_int_equal(h.layer_crc[l], kvt__crc32c(0, seg, lb));
		} else {
			assert_int_equal(h.layer_offset[l], 0);
			assert_int_equal(h.layer_crc[l], 0);
		}
	}
	/* Raw header bytes at the documented offsets. */
	assert_memory_equal(o.bytes, "KVTCHNK1", 8);
	assert_int_equal(r32(o.bytes + H_LAYERS), g.layers);
	assert_int_equal(r32(o.bytes + H_N_TOKENS), n_tokens);
	assert_int_equal(r64(o.bytes + H_OBJECT_BYTES), o.len);
	assert_int_equal(r64(o.bytes + H_LAYER_BYTES), lb);
	assert_int_equal(o.bytes[H_DTYPE], g.dtype);
	assert_int_equal(o.bytes[H_KIND], g.kind);
	assert_memory_equal(o.bytes + H_KEY, o.key.bytes, 32);
	for (int i = H_RESERVED2; i < H_CRC; i++)
		assert_int_equal(o.bytes[i], 0);

	/* the whole object's CRC from its header alone (kvt__object_crc): a contiguous
	 * object's equals a pass over its bytes; one with padding has none */
	uint32_t whole = 0;
	if (kvt__object_contiguous(&g, n_tokens)) {
		assert_int_equal(kvt__object_crc(o.bytes, &whole), 0);
		assert_int_equal(whole, kvt__crc32c(0, o.bytes, o.len));
	} else {
		assert_int_equal(kvt__object_crc(o.bytes, &whole), -EINVAL);
	}

	uint8_t *dst = malloc(o.payload_len + 1);
	assert_non_null(dst);
	assert_int_equal(kvt__object_extract(&h, o.bytes, 0, g.layers, dst, o.payload_len),
			 (int64_t)o.payload_len);
	assert_memory_equal(dst, o.payload, o.payload_len);
	/* Layer ranges. */
	for (uint32_t l0 = 0; l0 <= g.layers; l0 += 1 + g.layers / 5) {
		for (uint32_t l1 = l0; l1 <= g.layers; l1 += 1 + g.layers / 7) {
			uint64_t want = (uint64_t)(l1 - l0) * lb;
			memset(dst, 0, o.payload_len);
			assert_int_equal(kvt__object_extract(&h, o.bytes, l0, l1, dst, want),
					 (int64_t)want);
			assert_memory_equal(dst, o.payload + l0 * lb, want);
			const uint8_t *base = o.bytes + kvt_layer_offset(&g, n_tokens, l0);
			assert_int_equal(kvt__layers_verify(&h, l0, l1, base), 0);
			if (want)
				assert_int_equal(kvt__object_extract(&h, o.bytes, l0, l1, dst,
								     want - 1),
						 -EINVAL);
		}
	}
	assert_int_equal(kvt__object_extract(&h, o.bytes, 1, 0, dst, o.payload_len), -EINVAL);
	assert_int_equal(kvt__object_extract(&h, o.bytes, 0, g.layers + 1, dst, o.payload_len + lb),
			 -EINVAL);
	free(dst);
	obj_free(&o);
}

static void test_round_trips(void **state)
{
	const struct kvt_geometry gs[] = {
		{4, 2, 16, 16, KVT_DTYPE_BF16, KVT_KIND_KV},
		{3, 3, 5, 7, KVT_DTYPE_FP32, KVT_KIND_KV},
		{5, 4, 8, 32, KVT_DTYPE_FP8, KVT_KIND_KV},
		{2, 1, 64, 16, KVT_DTYPE_FP16, KVT_KIND_KV},
		{6, 1, 576, 16, KVT_DTYPE_FP8, KVT_KIND_MLA},
		{3, 1, 512, 8, KVT_DTYPE_BF16, KVT_KIND_MLA},
		{1, 1, 1, 1, KVT_DTYPE_FP32, KVT_KIND_MLA},
		{KVT_MAX_LAYERS, 1, 8, 4, KVT_DTYPE_BF16, KVT_KIND_KV},
		/* Layer exactly 4 KiB (no padding): 2 * 8 * 2 * 64 * 2. */
		{3, 2, 64, 8, KVT_DTYPE_BF16, KVT_KIND_KV},
	};
	for (size_t i = 0; i < KVT_ARRAY_SIZE(gs); i++) {
		round_trip(gs[i], gs[i].chunk_tokens);             /* full */
		round_trip(gs[i], 1);                               /* one token */
		if (gs[i].chunk_tokens > 2)
			round_trip(gs[i], gs[i].chunk_tokens / 2 + 1); /* partial */
	}
}

static void test_realistic_chunk(void **state)
{
	/* Llama-3.1-8B, one full 256-token chunk: 32 MiB. */
	round_trip((struct kvt_geometry){32, 8, 128, 256, KVT_DTYPE_BF16, KVT_KIND_KV}, 256);
	round_trip((struct kvt_geometry){32, 8, 128, 256, KVT_DTYPE_BF16, KVT_KIND_KV}, 77);
}

static void test_encode_invalid(void **state)
{
	struct kvt_geometry g = {2, 2, 4, 8, KVT_DTYPE_FP32, KVT_KIND_KV};
	uint8_t ns[32] = {0}, payload[2 * 2 * 8 * 2 * 4 * 4];
	struct kvt_key key = {{0}};
	uint64_t plen = kvt_payload_bytes(&g, 8), olen = kvt_object_bytes(&g, 8);
	uint8_t *obj = aligned_alloc(KVT_ALIGN, olen + KVT_ALIGN);

	assert_non_null(obj);
	assert_int_equal(plen, sizeof(payload));
	memset(payload, 7, sizeof(payload));
	assert_int_equal(kvt__object_encode(obj, olen, &g, ns, &key, 8, payload, plen), 0);
	/* A larger buffer is fine: only object_bytes are written. */
	memset(obj, 0xab, olen + KVT_ALIGN);
	assert_int_equal(kvt__object_encode(obj, olen + KVT_ALIGN, &g, ns, &key, 8, payload, plen),
			 0);
	assert_int_equal(obj[olen], 0xab);
	assert_int_equal(kvt__object_verify(obj, olen, NULL, NULL), 0);

	assert_int_equal(kvt__object_encode(obj, olen - 1, &g, ns, &key, 8, payload, plen),
			 -EINVAL);
	assert_int_equal(kvt__object_encode(obj, olen, &g, ns, &key, 8, payload, plen - 1),
			 -EINVAL);
	assert_int_equal(kvt__object_encode(obj, olen, &g, ns, &key, 8, payload, plen + 1),
			 -EINVAL);
	assert_int_equal(kvt__object_encode(obj, olen, &g, ns, &key, 0, payload, 0), -EINVAL);
	assert_int_equal(kvt__object_encode(obj, olen, &g, ns, &key, 9, payload, plen), -EINVAL);
	assert_int_equal(kvt__object_encode(NULL, olen, &g, ns, &key, 8, payload, plen), -EINVAL);
	assert_int_equal(kvt__object_encode(obj, olen, NULL, ns, &key, 8, payload, plen), -EINVAL);
	assert_int_equal(kvt__object_encode(obj, olen, &g, NULL, &key, 8, payload, plen), -EINVAL);
	assert_int_equal(kvt__object_encode(obj, olen, &g, ns, NULL, 8, payload, plen), -EINVAL);
	assert_int_equal(kvt__object_encode(obj, olen, &g, ns, &key, 8, NULL, plen), -EINVAL);
	struct kvt_geometry bad = g;
	bad.kind = KVT_KIND_MLA;
	assert_int_equal(kvt__object_encode(obj, olen, &bad, ns, &key, 8, payload, plen), -EINVAL);
	bad = g;
	bad.dtype = 0;
	assert_int_equal(kvt__object_encode(obj, olen, &bad, ns, &key, 8, payload, plen), -EINVAL);

	struct kvt_header h;
	assert_int_equal(kvt__header_decode(NULL, &h, NULL), -EINVAL);
	assert_int_equal(kvt__header_decode(obj, NULL, NULL), -EINVAL);
	assert_int_equal(kvt__object_verify(NULL, olen, NULL, &h), -EINVAL);
	free(obj);
}

/* Every header byte: a flipped bit fails the header CRC; with the CRC recomputed, the field
 * checks (or the layer CRCs, or the expected ns/key) still catch it. */
static void test_header_every_byte(void **state)
{
	struct obj o;
	uint8_t *copy;

	obj_make(&o, (struct kvt_geometry){3, 2, 16, 8, KVT_DTYPE_BF16, KVT_KIND_KV}, 5);
	copy = malloc(o.len);
	assert_non_null(copy);
	for (int off = 0; off < KVT_HEADER_BYTES; off++) {
		for (int bit = 0; bit < 8; bit += 7) {
			memcpy(copy, o.bytes, o.len);
			copy[off] ^= (uint8_t)(1u << bit);
			assert_int_equal(verify(&o, copy, o.len), -EBADMSG);
			assert_int_equal(kvt__object_verify(copy, o.len, NULL, NULL), -EBADMSG);
			if (off >= H_CRC)
				continue;
			fix_crc(copy);
			if (verify(&o, copy, o.len) != -EBADMSG)
				fail_msg("header byte %d bit %d accepted with a valid CRC", off,
					 bit);
			/* Without expectations only the ns_id and key bytes may pass, and a
			 * chunk_tokens that still covers n_tokens (sizes do not depend on it). */
			int rc = kvt__object_verify(copy, o.len, NULL, NULL);
			uint32_t ct = r32(copy + H_CHUNK_TOKENS);
			bool may_pass = (off >= H_NS_ID && off < H_KEY + 32) ||
					(off >= H_CHUNK_TOKENS && off < H_CHUNK_TOKENS + 4 &&
					 ct >= 5 && ct <= 65536);
			if (may_pass != (rc == 0))
				fail_msg("header byte %d bit %d: rc %d without expectations", off,
					 bit, rc);
		}
	}
	free(copy);
	obj_free(&o);
}

static void test_layer_corruption(void **state)
{
	struct obj o;
	struct kvt_header h;
	uint8_t *copy, *dst;

	obj_make(&o, (struct kvt_geometry){4, 2, 16, 8, KVT_DTYPE_FP16, KVT_KIND_KV}, 8);
	uint64_t lb = kvt_layer_bytes(&o.g, 8);
	copy = malloc(o.len);
	dst = malloc(o.payload_len);
	assert_non_null(copy);
	assert_non_null(dst);
	for (uint32_t l = 0; l < o.g.layers; l++) {
		uint64_t base = kvt_layer_offset(&o.g, 8, l);
		const uint64_t where[] = {0, 1, lb / 2, lb - 1};
		for (size_t w = 0; w < KVT_ARRAY_SIZE(where); w++) {
			memcpy(copy, o.bytes, o.len);
			copy[base + where[w]] ^= 0x10;
			assert_int_equal(verify(&o, copy, o.len), -EBADMSG);
			/* The header itself is fine; only that layer fails. */
			assert_int_equal(kvt__header_decode(copy, &h, NULL), 0);
			for (uint32_t k = 0; k < o.g.layers; k++) {
				int rc = kvt__layers_verify(&h, k, k + 1,
							    copy + kvt_layer_offset(&o.g, 8, k));
				assert_int_equal(rc, k == l ? -EBADMSG : 0);
				int64_t n = kvt__object_extract(&h, copy, k, k + 1, dst, lb);
				assert_int_equal(n, k == l ? -EBADMSG : (int64_t)lb);
			}
			assert_int_equal(kvt__object_extract(&h, copy, 0, o.g.layers, dst,
							     o.payload_len),
					 -EBADMSG);
		}
		/* Padding is not part of any CRC: readers ignore it. */
		memcpy(copy, o.bytes, o.len);
		copy[base + lb] ^= 1;
		assert_int_equal(verify(&o, copy, o.len), 0);
	}
	free(dst);
	free(copy);
	obj_free(&o);
}

static void test_truncation(void **state)
{
	struct obj o;

	obj_make(&o, (struct kvt_geometry){2, 1, 8, 4, KVT_DTYPE_BF16, KVT_KIND_MLA}, 4);
	const uint64_t lens[] = {0, 1, 8, KVT_HEADER_BYTES - 1, KVT_HEADER_BYTES,
				 KVT_HEADER_BYTES + 1, o.len - KVT_ALIGN, o.len - 1};
	for (size_t i = 0; i < KVT_ARRAY_SIZE(lens); i++)
		assert_int_equal(verify(&o, o.bytes, lens[i]), -EBADMSG);
	uint8_t *big = calloc(1, o.len + 1);
	assert_non_null(big);
	memcpy(big, o.bytes, o.len);
	/* Bytes past object_bytes are not part of the object: every reader (a fixed-length
	 * get, kvtier verify) judges a copy with bytes appended alike, as sound. */
	assert_int_equal(verify(&o, big, o.len + 1), 0);
	assert_int_equal(verify(&o, big, o.len), 0);
	free(big);
	obj_free(&o);
}

static void test_wrong_expectations(void **state)
{
	struct obj o;
	struct kvt_header h;

	obj_make(&o, (struct kvt_geometry){4, 2, 16, 8, KVT_DTYPE_BF16, KVT_KIND_KV}, 8);
	struct kvt_expect e = full_expect(&o);
	struct kvt_geometry g;
	assert_int_equal(kvt__object_verify(o.bytes, o.len, &e, &h), 0);
	e.geometry = &g;
	for (int f = 0; f < 6; f++) {
		g = o.g;
		switch (f) {
		case 0: g.layers++; break;
		case 1: g.kv_heads++; break;
		case 2: g.head_dim++; break;
		case 3: g.chunk_tokens++; break;
		case 4: g.dtype = KVT_DTYPE_FP16; break;
		default: g.kind = KVT_KIND_MLA; g.kv_heads = 1; break;
		}
		assert_int_equal(kvt__object_verify(o.bytes, o.len, &e, &h), -EBADMSG);
		assert_int_equal(kvt__header_decode(o.bytes, &h, &e), -EBADMSG);
	}
	e = full_expect(&o);
	uint8_t ns[32];
	memcpy(ns, o.ns_id, 32);
	ns[31] ^= 1;
	e.ns_id = ns;
	assert_int_equal(kvt__object_verify(o.bytes, o.len, &e, &h), -EBADMSG);
	e = full_expect(&o);
	struct kvt_key k = o.key;
	k.bytes[0] ^= 0x80;
	e.key = &k;
	assert_int_equal(kvt__object_verify(o.bytes, o.len, &e, &h), -EBADMSG);
	/* The header is zeroed on failure, never half-filled. */
	struct kvt_header zero;
	memset(&zero, 0, sizeof(zero));
	assert_memory_equal(&h, &zero, sizeof(h));
	e = full_expect(&o);
	e.max_object_bytes = o.len - 1;
	assert_int_equal(kvt__object_verify(o.bytes, o.len, &e, &h), -EBADMSG);
	e.max_object_bytes = o.len;
	assert_int_equal(kvt__object_verify(o.bytes, o.len, &e, &h), 0);
	obj_free(&o);
}

/* Hand-made hostile headers with valid header CRCs: each must be refused by decode without
 * touching memory beyond the 4 KiB header (ASan checks that: the header is heap-allocated
 * with nothing after it). */
static void test_crafted_headers(void **state)
{
	struct obj o;
	struct kvt_header h;
	uint8_t *hdr = malloc(KVT_HEADER_BYTES);

	assert_non_null(hdr);
	obj_make(&o, (struct kvt_geometry){4, 2, 16, 8, KVT_DTYPE_BF16, KVT_KIND_KV}, 6);
	memcpy(hdr, o.bytes, KVT_HEADER_BYTES);
	assert_int_equal(kvt__header_decode(hdr, &h, NULL), 0);

	struct edit {
		int off, width;
		uint64_t val;
	};
	const struct edit edits[] = {
		{H_VERSION, 2, 0}, {H_VERSION, 2, 2}, {H_VERSION, 2, 0xffff},
		{H_FLAGS, 2, 1}, {H_FLAGS, 2, 0x8000},
		{H_HEADER_BYTES, 4, 8192}, {H_HEADER_BYTES, 4, 0},
		{H_LAYERS, 4, 0}, {H_LAYERS, 4, 257}, {H_LAYERS, 4, 0xffffffff}, {H_LAYERS, 4, 5},
		{H_KV_HEADS, 4, 0}, {H_KV_HEADS, 4, 0xffffffff}, {H_KV_HEADS, 4, 1u << 31},
		{H_HEAD_DIM, 4, 0}, {H_HEAD_DIM, 4, 0xffffffff},
		{H_CHUNK_TOKENS, 4, 0}, {H_CHUNK_TOKENS, 4, 5}, {H_CHUNK_TOKENS, 4, 65537},
		{H_CHUNK_TOKENS, 4, 0xffffffff},
		{H_DTYPE, 1, 0}, {H_DTYPE, 1, 5}, {H_DTYPE, 1, 0xff},
		{H_KIND, 1, 0}, {H_KIND, 1, 2}, {H_KIND, 1, 3},
		{H_RESERVED0, 1, 1}, {H_RESERVED0 + 1, 1, 0x80},
		{H_N_TOKENS, 4, 0}, {H_N_TOKENS, 4, 9}, {H_N_TOKENS, 4, 0xffffffff},
		{H_N_TOKENS, 4, 5}, {H_N_TOKENS, 4, 7},
		{H_OBJECT_BYTES, 8, 0}, {H_OBJECT_BYTES, 8, UINT64_MAX},
		{H_OBJECT_BYTES, 8, 1ull << 40}, {H_OBJECT_BYTES, 8, 4ull << 30},
		{H_LAYER_ALIGN, 4, 512}, {H_LAYER_ALIGN, 4, 0},
		{H_RESERVED1, 4, 1},
		{H_LAYER_BYTES, 8, 0}, {H_LAYER_BYTES, 8, UINT64_MAX},
		{H_LAYER_OFFSET, 8, 0}, {H_LAYER_OFFSET, 8, 4095},
		{H_LAYER_OFFSET + 8, 8, 1ull << 62}, {H_LAYER_OFFSET + 8, 8, UINT64_MAX},
		{H_LAYER_OFFSET + 8 * 3, 8, 4096},
		{H_LAYER_OFFSET + 8 * 4, 8, 4096 * 5}, /* an offset for a layer that is not there */
		{H_LAYER_OFFSET + 8 * 255, 8, 1},
		{H_LAYER_CRC + 4 * 4, 4, 1}, {H_LAYER_CRC + 4 * 255, 4, 0xffffffff},
		{H_RESERVED2, 1, 1}, {H_RESERVED2 + 100, 1, 0x20}, {H_CRC - 1, 1, 1},
	};
	for (size_t i = 0; i < KVT_ARRAY_SIZE(edits); i++) {
		memcpy(hdr, o.bytes, KVT_HEADER_BYTES);
		if (edits[i].width == 1)
			hdr[edits[i].off] = (uint8_t)edits[i].val;
		else if (edits[i].width == 2)
			hdr[edits[i].off] = (uint8_t)edits[i].val,
			hdr[edits[i].off + 1] = (uint8_t)(edits[i].val >> 8);
		else if (edits[i].width == 4)
			w32(hdr + edits[i].off, (uint32_t)edits[i].val);
		else
			w64(hdr + edits[i].off, edits[i].val);
		fix_crc(hdr);
		if (kvt__header_decode(hdr, &h, NULL) != -EBADMSG)
			fail_msg("edit %zu (offset %d = %llu) accepted", i, edits[i].off,
				 (unsigned long long)edits[i].val);
	}

	/* A self-consistent header for a 4 GiB object must still be refused when the reader's
	 * bound is lower, and a consistent huge header cannot be verified against a short
	 * buffer: the length check comes before any layer is read. */
	memset(hdr, 0, KVT_HEADER_BYTES);
	memcpy(hdr, "KVTCHNK1", 8);
	hdr[H_VERSION] = 1;
	w32(hdr + H_HEADER_BYTES, 4096);
	w32(hdr + H_LAYERS, 1);
	w32(hdr + H_KV_HEADS, 1);
	w32(hdr + H_HEAD_DIM, 268435200);
	w32(hdr + H_CHUNK_TOKENS, 16);
	hdr[H_DTYPE] = KVT_DTYPE_FP8;
	hdr[H_KIND] = KVT_KIND_MLA;
	w32(hdr + H_N_TOKENS, 16);
	w64(hdr + H_OBJECT_BYTES, 4ull << 30);
	w32(hdr + H_LAYER_ALIGN, 4096);
	w64(hdr + H_LAYER_BYTES, (4ull << 30) - 4096);
	w64(hdr + H_LAYER_OFFSET, 4096);
	fix_crc(hdr);
	assert_int_equal(kvt__header_decode(hdr, &h, NULL), 0);
	assert_int_equal(h.object_bytes, 4ull << 30);
	struct kvt_expect e = {.max_object_bytes = 1 << 20};
	assert_int_equal(kvt__header_decode(hdr, &h, &e), -EBADMSG);
	assert_int_equal(kvt__object_verify(hdr, KVT_HEADER_BYTES, NULL, &h), -EBADMSG);

	free(hdr);
	obj_free(&o);
}

/* An object written by tests/fuzz/make_corpus.py, an independent Python encoder of
 * docs/FORMAT.md, must verify, and re-encoding its payload in C must give the same bytes. */
/* The MAC and encryption flags (FORMAT.md 5b) come with their fields, and only with them. */
static void test_protection_flags(void **state)
{
	struct obj o;
	struct kvt_header h;
	uint8_t *hdr = malloc(KVT_HEADER_BYTES);
	assert_non_null(hdr);
	obj_make(&o, (struct kvt_geometry){4, 2, 16, 8, KVT_DTYPE_BF16, KVT_KIND_KV}, 6);
	struct {
		uint16_t flags;
		int mac, nonce, tag; /* fill the field with nonzero bytes */
		int ok;
	} cases[] = {
		{KVT_FLAG_MAC, 1, 0, 0, 1},
		{KVT_FLAG_ENCRYPTED, 0, 1, 1, 1},
		{KVT_FLAG_ENCRYPTED, 0, 0, 1, 1}, /* a zero nonce is possible, if unlikely */
		{KVT_FLAG_MAC | KVT_FLAG_ENCRYPTED, 1, 1, 1, 1},
		{0, 1, 0, 0, 0},                  /* MAC without its flag */
		{KVT_FLAG_MAC, 0, 0, 0, 0},       /* flag without its MAC */
		{KVT_FLAG_ENCRYPTED, 0, 1, 0, 0}, /* encrypted without a tag */
		{0, 0, 1, 0, 0},                  /* nonce without the flag */
		{0, 0, 0, 1, 0},                  /* tag without the flag */
		{4, 0, 0, 0, 0},                  /* an undefined flag */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memcpy(hdr, o.bytes, KVT_HEADER_BYTES);
		hdr[KVT_HDR_OFF_FLAGS] = (uint8_t)cases[i].flags;
		memset(hdr + KVT_HDR_OFF_MAC, cases[i].mac ? 0xa5 : 0, 32);
		memset(hdr + KVT_HDR_OFF_GCM_NONCE, cases[i].nonce ? 0x5a : 0, 12);
		memset(hdr + KVT_HDR_OFF_GCM_TAG, cases[i].tag ? 0x3c : 0, 16);
		fix_crc(hdr);
		int rc = kvt__header_decode(hdr, &h, NULL);
		assert_int_equal(rc, cases[i].ok ? 0 : -EBADMSG);
		if (cases[i].ok) {
			assert_int_equal(h.flags, cases[i].flags);
			assert_int_equal(h.mac[31], cases[i].mac ? 0xa5 : 0);
			assert_int_equal(h.gcm_tag[0], cases[i].tag ? 0x3c : 0);
		}
	}
	free(hdr);
	obj_free(&o);
}

/* kvt__object_crc refuses what it cannot answer from the header: a protected object (its
 * layers are not the bytes the CRCs cover), a header that does not decode. */
static void test_object_crc_refusals(void **state)
{
	struct obj o;
	uint32_t crc;
	obj_make(&o, (struct kvt_geometry){3, 2, 64, 8, KVT_DTYPE_BF16, KVT_KIND_KV}, 8);
	assert_true(kvt__object_contiguous(&o.g, 8));
	assert_int_equal(kvt__object_crc(o.bytes, &crc), 0);
	assert_int_equal(crc, kvt__crc32c(0, o.bytes, o.len));
	uint8_t *hdr = malloc(KVT_HEADER_BYTES);
	assert_non_null(hdr);
	memcpy(hdr, o.bytes, KVT_HEADER_BYTES);
	hdr[KVT_HDR_OFF_FLAGS] = KVT_FLAG_MAC;
	memset(hdr + KVT_HDR_OFF_MAC, 0xa5, 32);
	fix_crc(hdr);
	assert_int_equal(kvt__object_crc(hdr, &crc), -EINVAL);
	memcpy(hdr, o.bytes, KVT_HEADER_BYTES);
	hdr[KVT_HDR_OFF_LAYER_CRC] ^= 1; /* not fixed: the header's own CRC fails */
	assert_int_equal(kvt__object_crc(hdr, &crc), -EINVAL);
	fix_crc(hdr); /* a layer CRC changed: the combined CRC follows it */
	assert_int_equal(kvt__object_crc(hdr, &crc), 0);
	assert_int_not_equal(crc, kvt__crc32c(0, o.bytes, o.len));
	/* ... to the value the header's three layer CRCs give folded the other way round */
	uint64_t lb = kvt_layer_bytes(&o.g, 8);
	uint32_t lc[3];
	memcpy(lc, hdr + KVT_HDR_OFF_LAYER_CRC, sizeof(lc)); /* little-endian, as written */
	uint32_t payload = kvt__crc32c_combine(lc[0], kvt__crc32c_combine(lc[1], lc[2], lb), 2 * lb);
	assert_int_equal(crc, kvt__crc32c_combine(kvt__crc32c(0, hdr, KVT_HEADER_BYTES), payload,
						  3 * lb));
	assert_int_equal(kvt__object_crc(NULL, &crc), -EINVAL);
	assert_int_equal(kvt__object_crc(o.bytes, NULL), -EINVAL);
	free(hdr);
	obj_free(&o);
}

static void test_python_object(void **state)
{
	const char *src = getenv("KVT_SRC");
	char path[4096];
	if (!src)
		skip();
	snprintf(path, sizeof(path), "%s/tests/fuzz/corpus/header_fuzz/valid-kv-bf16-partial",
		 src);
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	uint8_t *buf = malloc(1 << 20);
	assert_non_null(buf);
	size_t n = fread(buf, 1, 1 << 20, f);
	fclose(f);

	struct kvt_header h;
	assert_int_equal(kvt__object_verify(buf, n, NULL, &h), 0);
	uint64_t plen = kvt_payload_bytes(&h.geometry, h.n_tokens);
	uint8_t *payload = malloc(plen);
	uint8_t *again = aligned_alloc(KVT_ALIGN, n);
	assert_non_null(payload);
	assert_non_null(again);
	assert_int_equal(kvt__object_extract(&h, buf, 0, h.geometry.layers, payload, plen),
			 (int64_t)plen);
	assert_int_equal(kvt__object_encode(again, n, &h.geometry, h.ns_id, &h.key, h.n_tokens,
					    payload, plen),
			 0);
	assert_memory_equal(again, buf, n);
	free(again);
	free(payload);
	free(buf);
}

/* Every file of the Python-made corpus: valid-* verify, everything else is -EBADMSG. */
static void test_python_corpus(void **state)
{
	const char *src = getenv("KVT_SRC");
	char dir[4096], path[8192];
	if (!src)
		skip();
	snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/header_fuzz", src);
	DIR *d = opendir(dir);
	assert_non_null(d);
	struct dirent *e;
	int valid = 0, invalid = 0;
	uint8_t *buf = malloc(1 << 20);
	assert_non_null(buf);
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		FILE *f = fopen(path, "rb");
		assert_non_null(f);
		size_t n = fread(buf, 1, 1 << 20, f);
		fclose(f);
		struct kvt_header h;
		int rc = kvt__object_verify(buf, n, NULL, &h);
		bool want_ok = !strncmp(e->d_name, "valid-", 6);
		if (rc != (want_ok ? 0 : -EBADMSG))
			fail_msg("%s: rc %d", e->d_name, rc);
		want_ok ? valid++ : invalid++;
	}
	closedir(d);
	free(buf);
	assert_true(valid >= 3);
	assert_true(invalid >= 20);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trips),
		cmocka_unit_test(test_realistic_chunk),
		cmocka_unit_test(test_encode_invalid),
		cmocka_unit_test(test_header_every_byte),
		cmocka_unit_test(test_layer_corruption),
		cmocka_unit_test(test_truncation),
		cmocka_unit_test(test_wrong_expectations),
		cmocka_unit_test(test_crafted_headers),
		cmocka_unit_test(test_protection_flags),
		cmocka_unit_test(test_object_crc_refusals),
		cmocka_unit_test(test_python_object),
		cmocka_unit_test(test_python_corpus),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
