/*
 * format.c - encode, decode and verify the canonical chunk object, format v1
 * (docs/FORMAT.md has the byte layout; keep the two in step).
 *
 * The header is written and read field by field in little-endian order, never by copying a
 * struct, so the on-disk bytes do not depend on the compiler or host. Decoding trusts
 * nothing: the magic and the header CRC are checked first, then every field against fixed
 * bounds (kvt_geometry_check caps a chunk at 4 GiB), and only then are sizes derived from
 * the fields and compared with the stored offsets and lengths. Every reserved byte must be
 * zero so that a later version can give them meaning without old readers misreading them.
 *
 * Encoding is on the put path and extraction on the get path, so both copy a layer in
 * blocks small enough to stay in L2 and run the CRC over each block right after copying it:
 * the source is read from memory once, and the CRC reads a hot cache line instead of a
 * second pass over DRAM (bench/format_bench.c compares this with memcpy).
 */
#include <errno.h>
#include <string.h>

#include "format.h"
#include "internal.h"

/* Header byte layout (all integers little-endian). */
#define OFF_MAGIC 0           /* 8 bytes "KVTCHNK1" */
#define OFF_VERSION 8         /* u16 */
#define OFF_FLAGS 10          /* u16, KVT_FLAG_MAC | KVT_FLAG_ENCRYPTED, else 0 */
#define OFF_HEADER_BYTES 12   /* u32 = 4096 */
#define OFF_LAYERS 16         /* u32 */
#define OFF_KV_HEADS 20       /* u32 */
#define OFF_HEAD_DIM 24       /* u32 */
#define OFF_CHUNK_TOKENS 28   /* u32 */
#define OFF_DTYPE 32          /* u8 */
#define OFF_KIND 33           /* u8 */
#define OFF_RESERVED0 34      /* 2 bytes, zero */
#define OFF_N_TOKENS 36       /* u32 */
#define OFF_OBJECT_BYTES 40   /* u64 */
#define OFF_NS_ID 48          /* 32 bytes */
#define OFF_KEY 80            /* 32 bytes */
#define OFF_LAYER_ALIGN 112   /* u32 = 4096 */
#define OFF_RESERVED1 116     /* 4 bytes, zero */
#define OFF_LAYER_BYTES 120   /* u64, dense bytes of one layer */
#define OFF_LAYER_OFFSET 128  /* u64[256], zero past the last layer */
#define OFF_LAYER_CRC 2176    /* u32[256], zero past the last layer */
#define OFF_MAC 3200          /* 32 bytes, HMAC-SHA-256 iff KVT_FLAG_MAC, else zero */
#define OFF_GCM_NONCE 3232    /* 12 bytes iff KVT_FLAG_ENCRYPTED, else zero */
#define OFF_GCM_TAG 3244      /* 16 bytes iff KVT_FLAG_ENCRYPTED, else zero */
#define OFF_RESERVED2 3260    /* zero up to the header CRC */
#define OFF_HEADER_CRC 4092   /* u32, CRC32C of bytes [0, 4092) */

_Static_assert(OFF_LAYER_OFFSET + 8 * KVT_MAX_LAYERS == OFF_LAYER_CRC, "layout");
_Static_assert(OFF_LAYER_CRC + 4 * KVT_MAX_LAYERS == OFF_MAC, "layout");
_Static_assert(OFF_MAC == KVT_HDR_OFF_MAC && OFF_GCM_NONCE == KVT_HDR_OFF_GCM_NONCE &&
		       OFF_GCM_TAG == KVT_HDR_OFF_GCM_TAG && OFF_FLAGS == KVT_HDR_OFF_FLAGS &&
		       OFF_LAYER_CRC == KVT_HDR_OFF_LAYER_CRC && OFF_HEADER_CRC == KVT_HDR_OFF_CRC &&
		       OFF_LAYER_BYTES + 8 == KVT_HDR_AAD_BYTES,
	       "format.h exports the same layout");
_Static_assert(OFF_GCM_TAG + 16 == OFF_RESERVED2, "layout");
_Static_assert(OFF_HEADER_CRC + 4 == KVT_HEADER_BYTES, "layout");

#define MAX_OBJECT_BYTES (4ull << 30)
/* Copy+CRC block: still in L1 when the CRC reads it back. 16 KiB measured best of 8-256 KiB
 * (encode 1.0-1.17x memcpy time; a separate CRC pass after memcpy costs ~1.5x). */
#ifndef COPY_BLOCK
#define COPY_BLOCK (16u << 10)
#endif

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	uint8_t acc = 0;
	for (size_t i = 0; i < n; i++)
		acc |= p[i];
	return acc == 0;
}

/* Copy n bytes and return the CRC32C of them, in cache-sized blocks. */
static uint32_t copy_crc(uint8_t *dst, const uint8_t *src, uint64_t n)
{
	uint32_t crc = 0;
	while (n) {
		size_t b = n > COPY_BLOCK ? COPY_BLOCK : (size_t)n;
		memcpy(dst, src, b);
		crc = kvt__crc32c(crc, dst, b);
		dst += b;
		src += b;
		n -= b;
	}
	return crc;
}

static uint64_t segment_bytes(uint64_t layer_bytes)
{
	return KVT_ALIGN_UP(layer_bytes, KVT_ALIGN);
}

/* Everything but the layer bytes: fields, per-layer offsets and CRCs, header CRC. */
static void write_header(uint8_t *o, const struct kvt_geometry *g,
			 const uint8_t ns_id[KVT_NS_ID_BYTES], const struct kvt_key *key,
			 uint32_t n_tokens, const uint32_t *crcs)
{
	uint64_t lb = kvt_layer_bytes(g, n_tokens), seg = segment_bytes(lb);
	memset(o, 0, KVT_HEADER_BYTES);
	for (uint32_t l = 0; l < g->layers; l++) {
		put64(o + OFF_LAYER_OFFSET + 8 * l, KVT_HEADER_BYTES + l * seg);
		put32(o + OFF_LAYER_CRC + 4 * l, crcs[l]);
	}
	memcpy(o + OFF_MAGIC, KVT_FORMAT_MAGIC, 8);
	put16(o + OFF_VERSION, KVT_FORMAT_VERSION);
	put16(o + OFF_FLAGS, 0);
	put32(o + OFF_HEADER_BYTES, KVT_HEADER_BYTES);
	put32(o + OFF_LAYERS, g->layers);
	put32(o + OFF_KV_HEADS, g->kv_heads);
	put32(o + OFF_HEAD_DIM, g->head_dim);
	put32(o + OFF_CHUNK_TOKENS, g->chunk_tokens);
	o[OFF_DTYPE] = g->dtype;
	o[OFF_KIND] = g->kind;
	put32(o + OFF_N_TOKENS, n_tokens);
	put64(o + OFF_OBJECT_BYTES, kvt_object_bytes(g, n_tokens));
	memcpy(o + OFF_NS_ID, ns_id, KVT_NS_ID_BYTES);
	memcpy(o + OFF_KEY, key->bytes, KVT_KEY_BYTES);
	put32(o + OFF_LAYER_ALIGN, KVT_ALIGN);
	put64(o + OFF_LAYER_BYTES, lb);
	put32(o + OFF_HEADER_CRC, kvt__crc32c(0, o, OFF_HEADER_CRC));
}

int kvt__object_encode(void *obj, uint64_t obj_len, const struct kvt_geometry *g,
		       const uint8_t ns_id[KVT_NS_ID_BYTES], const struct kvt_key *key,
		       uint32_t n_tokens, const void *payload, uint64_t payload_len)
{
	uint8_t *o = obj;
	const uint8_t *src = payload;
	uint32_t crcs[KVT_MAX_LAYERS];

	if (!obj || !ns_id || !key || kvt_geometry_check(g) || n_tokens < 1 ||
	    n_tokens > g->chunk_tokens)
		return -EINVAL;
	uint64_t lb = kvt_layer_bytes(g, n_tokens), seg = segment_bytes(lb);
	if (!payload || payload_len != lb * g->layers || obj_len < kvt_object_bytes(g, n_tokens))
		return -EINVAL;
	for (uint32_t l = 0; l < g->layers; l++) {
		uint64_t off = KVT_HEADER_BYTES + l * seg;
		crcs[l] = copy_crc(o + off, src + l * lb, lb);
		if (seg > lb)
			memset(o + off + lb, 0, seg - lb);
	}
	write_header(o, g, ns_id, key, n_tokens, crcs);
	return 0;
}

int kvt__object_header(void *hdr, const struct kvt_geometry *g,
		       const uint8_t ns_id[KVT_NS_ID_BYTES], const struct kvt_key *key,
		       uint32_t n_tokens, const void *payload, uint64_t payload_len)
{
	const uint8_t *src = payload;
	uint32_t crcs[KVT_MAX_LAYERS];
	if (!hdr || !ns_id || !key || !payload || !kvt__object_contiguous(g, n_tokens))
		return -EINVAL;
	uint64_t lb = kvt_layer_bytes(g, n_tokens);
	if (payload_len != lb * g->layers)
		return -EINVAL;
	for (uint32_t l = 0; l < g->layers; l++)
		crcs[l] = kvt__crc32c(0, src + l * lb, lb);
	write_header(hdr, g, ns_id, key, n_tokens, crcs);
	return 0;
}

bool kvt__object_contiguous(const struct kvt_geometry *g, uint32_t n_tokens)
{
	if (kvt_geometry_check(g) || n_tokens < 1 || n_tokens > g->chunk_tokens)
		return false;
	uint64_t lb = kvt_layer_bytes(g, n_tokens);
	return segment_bytes(lb) == lb;
}

int kvt__object_seal(void *obj, uint64_t obj_len, const struct kvt_geometry *g,
		     const uint8_t ns_id[KVT_NS_ID_BYTES], const struct kvt_key *key,
		     uint32_t n_tokens)
{
	uint8_t *o = obj;
	uint32_t crcs[KVT_MAX_LAYERS];

	if (!obj || !ns_id || !key || kvt_geometry_check(g) || n_tokens < 1 ||
	    n_tokens > g->chunk_tokens)
		return -EINVAL;
	uint64_t lb = kvt_layer_bytes(g, n_tokens), seg = segment_bytes(lb);
	if (obj_len < kvt_object_bytes(g, n_tokens))
		return -EINVAL;
	for (uint32_t l = 0; l < g->layers; l++) {
		uint64_t off = KVT_HEADER_BYTES + l * seg;
		crcs[l] = kvt__crc32c(0, o + off, lb);
		if (seg > lb)
			memset(o + off + lb, 0, seg - lb);
	}
	write_header(o, g, ns_id, key, n_tokens, crcs);
	return 0;
}

static bool geometry_eq(const struct kvt_geometry *a, const struct kvt_geometry *b)
{
	return a->layers == b->layers && a->kv_heads == b->kv_heads &&
	       a->head_dim == b->head_dim && a->chunk_tokens == b->chunk_tokens &&
	       a->dtype == b->dtype && a->kind == b->kind;
}

static int decode(const uint8_t *p, struct kvt_header *h, const struct kvt_expect *exp)
{
	struct kvt_geometry *g = &h->geometry;
	uint64_t lb, seg, total, max;

	/* Cheap rejections first, then the CRC, then field semantics. */
	if (memcmp(p + OFF_MAGIC, KVT_FORMAT_MAGIC, 8))
		return -EBADMSG;
	if (get32(p + OFF_HEADER_CRC) != kvt__crc32c(0, p, OFF_HEADER_CRC))
		return -EBADMSG;
	h->version = get16(p + OFF_VERSION);
	h->flags = get16(p + OFF_FLAGS);
	if (h->version != KVT_FORMAT_VERSION ||
	    (h->flags & ~(KVT_FLAG_MAC | KVT_FLAG_ENCRYPTED)) ||
	    get32(p + OFF_HEADER_BYTES) != KVT_HEADER_BYTES ||
	    get32(p + OFF_LAYER_ALIGN) != KVT_ALIGN)
		return -EBADMSG;
	if (!all_zero(p + OFF_RESERVED0, 2) || !all_zero(p + OFF_RESERVED1, 4) ||
	    !all_zero(p + OFF_RESERVED2, OFF_HEADER_CRC - OFF_RESERVED2))
		return -EBADMSG;
	/* A flag and its field come together: a MAC flag with no MAC (or a MAC without the
	 * flag) is damage, as is a tag without the encryption flag. */
	bool mac = h->flags & KVT_FLAG_MAC, enc = h->flags & KVT_FLAG_ENCRYPTED;
	if (mac == all_zero(p + OFF_MAC, 32) || enc == all_zero(p + OFF_GCM_TAG, 16) ||
	    (!enc && !all_zero(p + OFF_GCM_NONCE, 12)))
		return -EBADMSG;
	memcpy(h->mac, p + OFF_MAC, sizeof(h->mac));
	memcpy(h->gcm_nonce, p + OFF_GCM_NONCE, sizeof(h->gcm_nonce));
	memcpy(h->gcm_tag, p + OFF_GCM_TAG, sizeof(h->gcm_tag));

	memset(g, 0, sizeof(*g));
	g->layers = get32(p + OFF_LAYERS);
	g->kv_heads = get32(p + OFF_KV_HEADS);
	g->head_dim = get32(p + OFF_HEAD_DIM);
	g->chunk_tokens = get32(p + OFF_CHUNK_TOKENS);
	g->dtype = p[OFF_DTYPE];
	g->kind = p[OFF_KIND];
	/* From here on the geometry is bounded: every size below fits in 4 GiB. */
	if (kvt_geometry_check(g))
		return -EBADMSG;
	h->n_tokens = get32(p + OFF_N_TOKENS);
	if (h->n_tokens < 1 || h->n_tokens > g->chunk_tokens)
		return -EBADMSG;
	memcpy(h->ns_id, p + OFF_NS_ID, KVT_NS_ID_BYTES);
	memcpy(h->key.bytes, p + OFF_KEY, KVT_KEY_BYTES);
	if (exp && exp->geometry && !geometry_eq(g, exp->geometry))
		return -EBADMSG;
	if (exp && exp->ns_id && memcmp(h->ns_id, exp->ns_id, KVT_NS_ID_BYTES))
		return -EBADMSG;
	if (exp && exp->key && memcmp(h->key.bytes, exp->key->bytes, KVT_KEY_BYTES))
		return -EBADMSG;

	lb = kvt_layer_bytes(g, h->n_tokens);
	seg = segment_bytes(lb);
	total = kvt_object_bytes(g, h->n_tokens);
	max = exp && exp->max_object_bytes ? exp->max_object_bytes : MAX_OBJECT_BYTES;
	h->object_bytes = get64(p + OFF_OBJECT_BYTES);
	if (get64(p + OFF_LAYER_BYTES) != lb || h->object_bytes != total || total > max)
		return -EBADMSG;
	for (uint32_t l = 0; l < KVT_MAX_LAYERS; l++) {
		uint64_t want = l < g->layers ? KVT_HEADER_BYTES + l * seg : 0;
		h->layer_offset[l] = get64(p + OFF_LAYER_OFFSET + 8 * l);
		h->layer_crc[l] = get32(p + OFF_LAYER_CRC + 4 * l);
		if (h->layer_offset[l] != want || (l >= g->layers && h->layer_crc[l] != 0))
			return -EBADMSG;
	}
	return 0;
}

int kvt__header_decode(const void *hdr, struct kvt_header *out, const struct kvt_expect *exp)
{
	int rc;

	if (!hdr || !out)
		return -EINVAL;
	rc = decode(hdr, out, exp);
	if (rc)
		memset(out, 0, sizeof(*out));
	return rc;
}

/* Layer bytes and segment stride of a header, recomputed rather than read from it, so a
 * hand-made header cannot steer a read; 0 if the header is not a decodable one. */
static uint64_t header_layer_bytes(const struct kvt_header *h, uint64_t *seg)
{
	uint64_t lb;
	if (h->n_tokens < 1)
		return 0;
	lb = kvt_layer_bytes(&h->geometry, h->n_tokens);
	*seg = segment_bytes(lb);
	return lb;
}

int kvt__layers_verify(const struct kvt_header *h, uint32_t l0, uint32_t l1, const void *base)
{
	const uint8_t *b = base;
	uint64_t lb, seg = 0;

	if (!h || !base || l0 > l1 || l1 > h->geometry.layers)
		return -EINVAL;
	lb = header_layer_bytes(h, &seg);
	if (!lb)
		return -EINVAL;
	for (uint32_t l = l0; l < l1; l++)
		if (kvt__crc32c(0, b + (l - l0) * seg, lb) != h->layer_crc[l])
			return -EBADMSG;
	return 0;
}

int kvt__object_verify(const void *obj, uint64_t obj_len, const struct kvt_expect *exp,
		       struct kvt_header *out)
{
	struct kvt_header local;
	struct kvt_header *h = out ? out : &local;
	int rc;

	if (!obj)
		return -EINVAL;
	if (obj_len < KVT_HEADER_BYTES) {
		if (out)
			memset(out, 0, sizeof(*out));
		return -EBADMSG;
	}
	rc = kvt__header_decode(obj, h, exp);
	if (rc)
		return rc;
	if (h->object_bytes > obj_len) { /* bytes past object_bytes are not part of it */
		rc = -EBADMSG;
		goto fail;
	}
	rc = kvt__layers_verify(h, 0, h->geometry.layers, (const uint8_t *)obj + KVT_HEADER_BYTES);
	if (rc)
		goto fail;
	return 0;
fail:
	memset(h, 0, sizeof(*h));
	return rc;
}

int64_t kvt__object_extract(const struct kvt_header *h, const void *obj, uint32_t l0, uint32_t l1,
			    void *dst, uint64_t dst_len)
{
	const uint8_t *o = obj;
	uint8_t *d = dst;
	uint64_t lb, seg = 0, need;

	if (!h || !obj || l0 > l1 || l1 > h->geometry.layers)
		return -EINVAL;
	lb = header_layer_bytes(h, &seg);
	if (!lb)
		return -EINVAL;
	need = (uint64_t)(l1 - l0) * lb;
	if (need && (!dst || dst_len < need))
		return -EINVAL;
	for (uint32_t l = l0; l < l1; l++) {
		uint32_t crc = copy_crc(d + (l - l0) * lb, o + KVT_HEADER_BYTES + l * seg, lb);
		if (crc != h->layer_crc[l])
			return -EBADMSG;
	}
	return (int64_t)need;
}

int64_t kvt__object_copy_layers(const struct kvt_header *h, const void *obj, uint32_t l0,
				uint32_t l1, void *dst, uint64_t dst_len)
{
	const uint8_t *o = obj;
	uint8_t *d = dst;
	uint64_t seg = 0;

	if (!h || !obj || l0 > l1 || l1 > h->geometry.layers)
		return -EINVAL;
	uint64_t lb = header_layer_bytes(h, &seg);
	if (!lb)
		return -EINVAL;
	uint64_t need = (uint64_t)(l1 - l0) * lb;
	if (need && (!dst || dst_len < need))
		return -EINVAL;
	if (seg == lb) /* unpadded layers are one contiguous range */
		memcpy(d, o + KVT_HEADER_BYTES + l0 * seg, need);
	else
		for (uint32_t l = l0; l < l1; l++)
			memcpy(d + (l - l0) * lb, o + KVT_HEADER_BYTES + l * seg, lb);
	return (int64_t)need;
}

int kvt__object_crc(const void *hdr, uint32_t *crc)
{
	struct kvt_header h;
	uint64_t seg = 0;
	if (!hdr || !crc || kvt__header_decode(hdr, &h, &(struct kvt_expect){0}) < 0)
		return -EINVAL;
	uint64_t lb = header_layer_bytes(&h, &seg);
	if (!lb || seg != lb || h.flags)
		return -EINVAL;
	uint32_t op = kvt__crc32c_shift_op(lb);
	uint32_t payload = h.layer_crc[0];
	for (uint32_t l = 1; l < h.geometry.layers; l++)
		payload = kvt__crc32c_combine_op(op, payload, h.layer_crc[l]);
	/* the header's CRC: its stored CRC of the bytes before it (checked by the decode),
	 * continued over the 4 bytes that hold it - no second pass over the header */
	const uint8_t *p = hdr;
	uint32_t head = kvt__crc32c(get32(p + OFF_HEADER_CRC), p + OFF_HEADER_CRC,
				    KVT_HEADER_BYTES - OFF_HEADER_CRC);
	*crc = kvt__crc32c_combine(head, payload, lb * h.geometry.layers);
	return 0;
}
