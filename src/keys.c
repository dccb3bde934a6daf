/*
 * keys.c - chunk geometry size math, the canonical namespace text, and content-addressed
 * chunk keys (docs/FORMAT.md).
 *
 * Every size is computed in uint64 with explicit overflow checks, because a geometry may
 * come from an untrusted object header: kvt_geometry_check() bounds a full chunk's object
 * to 4 GiB, after which no later product can overflow. The public size helpers run that
 * check themselves and return 0 for an unusable geometry, so a caller can never get a
 * wrapped-around size out of them.
 *
 * Keys are chained SHA-256 digests, so a prompt's keys are inherently sequential (each
 * starts with the previous one: no midstate can be shared). OpenSSL's low-level SHA-256
 * context is used rather than EVP: it lives on the stack (kvt_key_next needs no allocation
 * or provider fetch) and still runs OpenSSL's SHA-NI code; bench/keys_bench.c measured it
 * ~5% faster than EVP with a reused context and within ~12% of one plain SHA-256 over the
 * same bytes. Tokens are hashed as little-endian u32 on every host.
 */
#define OPENSSL_SUPPRESS_DEPRECATED /* SHA256_Init & co: deprecated, still the fastest path */

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <openssl/sha.h>

#include "internal.h"
#include "store_key.h"

#define KEY_DOMAIN "kvtier-chunk-v1"
#define STORE_DOMAIN "kvtier-store-v1" /* padded with zeros to 32 bytes */
#define NS_TEXT_VERSION "kvtier-ns-v1"
/* Longest model / revision / tenant string accepted in a namespace. */
#define NS_FIELD_MAX 1024
/* Room for the canonical text: three fields plus the fixed lines and numbers. */
#define NS_TEXT_MAX (3 * NS_FIELD_MAX + 512)
#define MAX_CHUNK_TOKENS 65536u
#define MAX_OBJECT_BYTES (4ull << 30)

/* ------------------------------------------------------------- geometry */

uint32_t kvt_dtype_bytes(uint8_t dtype)
{
	switch (dtype) {
	case KVT_DTYPE_BF16:
	case KVT_DTYPE_FP16:
		return 2;
	case KVT_DTYPE_FP8:
		return 1;
	case KVT_DTYPE_FP32:
		return 4;
	default:
		return 0;
	}
}

static const char *dtype_name(uint8_t dtype)
{
	switch (dtype) {
	case KVT_DTYPE_BF16:
		return "bf16";
	case KVT_DTYPE_FP16:
		return "fp16";
	case KVT_DTYPE_FP8:
		return "fp8";
	case KVT_DTYPE_FP32:
		return "fp32";
	default:
		return NULL;
	}
}

static const char *kind_name(uint8_t kind)
{
	switch (kind) {
	case KVT_KIND_KV:
		return "kv";
	case KVT_KIND_MLA:
		return "mla";
	default:
		return NULL;
	}
}

/* Dense layer bytes with overflow detection; false if the product does not fit. */
static bool layer_bytes_checked(const struct kvt_geometry *g, uint32_t n_tokens, uint64_t *out)
{
	uint64_t b = kvt_dtype_bytes(g->dtype);
	uint64_t planes = g->kind == KVT_KIND_KV ? 2 : 1;
	if (__builtin_mul_overflow(b, planes, &b) ||
	    __builtin_mul_overflow(b, (uint64_t)n_tokens, &b) ||
	    __builtin_mul_overflow(b, (uint64_t)g->kv_heads, &b) ||
	    __builtin_mul_overflow(b, (uint64_t)g->head_dim, &b))
		return false;
	*out = b;
	return true;
}

/* Object bytes with overflow detection (layers already known to be <= KVT_MAX_LAYERS). */
static bool object_bytes_checked(const struct kvt_geometry *g, uint32_t n_tokens, uint64_t *out)
{
	uint64_t lb, seg, total;
	if (!layer_bytes_checked(g, n_tokens, &lb) || lb > UINT64_MAX - (KVT_ALIGN - 1))
		return false;
	seg = KVT_ALIGN_UP(lb, KVT_ALIGN);
	if (__builtin_mul_overflow(seg, (uint64_t)g->layers, &total) ||
	    __builtin_add_overflow(total, (uint64_t)KVT_HEADER_BYTES, &total))
		return false;
	*out = total;
	return true;
}

int kvt_geometry_check(const struct kvt_geometry *g)
{
	uint64_t total;

	if (!g)
		return -EINVAL;
	if (g->layers < 1 || g->layers > KVT_MAX_LAYERS || g->kv_heads < 1 || g->head_dim < 1 ||
	    g->chunk_tokens < 1 || g->chunk_tokens > MAX_CHUNK_TOKENS)
		return -EINVAL;
	if (!dtype_name(g->dtype) || !kind_name(g->kind))
		return -EINVAL;
	if (g->kind == KVT_KIND_MLA && g->kv_heads != 1)
		return -EINVAL;
	if (!object_bytes_checked(g, g->chunk_tokens, &total) || total > MAX_OBJECT_BYTES)
		return -EINVAL;
	return 0;
}

/* After a passing geometry check and n_tokens <= chunk_tokens nothing below overflows. */
static bool sizes_ok(const struct kvt_geometry *g, uint32_t n_tokens)
{
	return kvt_geometry_check(g) == 0 && n_tokens <= g->chunk_tokens;
}

uint64_t kvt_layer_bytes(const struct kvt_geometry *g, uint32_t n_tokens)
{
	uint64_t lb = 0;
	if (!sizes_ok(g, n_tokens) || !layer_bytes_checked(g, n_tokens, &lb))
		return 0;
	return lb;
}

uint64_t kvt_payload_bytes(const struct kvt_geometry *g, uint32_t n_tokens)
{
	return kvt_layer_bytes(g, n_tokens) * (g ? g->layers : 0);
}

uint64_t kvt_object_bytes(const struct kvt_geometry *g, uint32_t n_tokens)
{
	uint64_t total = 0;
	if (!sizes_ok(g, n_tokens) || !object_bytes_checked(g, n_tokens, &total))
		return 0;
	return total;
}

uint64_t kvt_layer_offset(const struct kvt_geometry *g, uint32_t n_tokens, uint32_t layer)
{
	uint64_t lb;
	if (!sizes_ok(g, n_tokens) || layer > g->layers || !layer_bytes_checked(g, n_tokens, &lb))
		return 0;
	return KVT_HEADER_BYTES + (uint64_t)layer * KVT_ALIGN_UP(lb, KVT_ALIGN);
}

/* ------------------------------------------------------------ namespace */

/* A namespace string: at most NS_FIELD_MAX bytes, no control bytes (so no newline can
 * forge another line of the canonical text). Bytes >= 0x80 (UTF-8) are kept verbatim. */
static bool field_ok(const char *s)
{
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p < 0x20 || *p == 0x7f || ++n > NS_FIELD_MAX)
			return false;
	return true;
}

int kvt_namespace_text(const struct kvt_namespace *ns, char *buf, size_t len)
{
	const char *rev, *tenant;
	int n;

	if (!ns || !ns->model || !ns->model[0] || kvt_geometry_check(&ns->geometry))
		return -EINVAL;
	rev = ns->revision ? ns->revision : "";
	tenant = ns->tenant ? ns->tenant : "";
	if (!field_ok(ns->model) || !field_ok(rev) || !field_ok(tenant))
		return -EINVAL;
	if (!buf && len)
		return -EINVAL;
	n = snprintf(buf, len,
		     NS_TEXT_VERSION "\n"
				     "model=%s\n"
				     "revision=%s\n"
				     "layers=%u\n"
				     "kv_heads=%u\n"
				     "head_dim=%u\n"
				     "dtype=%s\n"
				     "kind=%s\n"
				     "chunk_tokens=%u\n"
				     "tenant=%s\n",
		     ns->model, rev, ns->geometry.layers, ns->geometry.kv_heads,
		     ns->geometry.head_dim, dtype_name(ns->geometry.dtype),
		     kind_name(ns->geometry.kind), ns->geometry.chunk_tokens, tenant);
	if (n < 0)
		return -EINVAL;
	if ((size_t)n >= len)
		return -ENOSPC;
	return n;
}

int kvt_namespace_id(const struct kvt_namespace *ns, uint8_t ns_id[KVT_NS_ID_BYTES])
{
	char text[NS_TEXT_MAX];
	int n;

	if (!ns_id)
		return -EINVAL;
	n = kvt_namespace_text(ns, text, sizeof(text));
	if (n < 0)
		return n;
	SHA256((const unsigned char *)text, (size_t)n, ns_id);
	return 0;
}

/* ------------------------------------------------------------------ keys */

/* KVT_PORTABLE_LE forces the byte-by-byte path of big-endian hosts (to test it on x86). */
static void hash_tokens(SHA256_CTX *c, const uint32_t *tokens, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && \
	!defined(KVT_PORTABLE_LE)
	if (n)
		SHA256_Update(c, tokens, n * sizeof(uint32_t));
#else
	unsigned char le[1024];
	while (n) {
		size_t m = KVT_MIN(n, sizeof(le) / 4);
		for (size_t i = 0; i < m; i++) {
			le[4 * i + 0] = (unsigned char)tokens[i];
			le[4 * i + 1] = (unsigned char)(tokens[i] >> 8);
			le[4 * i + 2] = (unsigned char)(tokens[i] >> 16);
			le[4 * i + 3] = (unsigned char)(tokens[i] >> 24);
		}
		SHA256_Update(c, le, 4 * m);
		tokens += m;
		n -= m;
	}
#endif
}

static void key_next(const uint8_t ns_id[KVT_NS_ID_BYTES], const uint8_t prev[KVT_KEY_BYTES],
		     const uint32_t *tokens, size_t n_tokens, uint8_t out[KVT_KEY_BYTES])
{
	/* Domain tag, ns_id and the previous key in one update: 79 bytes, one call. */
	unsigned char head[sizeof(KEY_DOMAIN) - 1 + KVT_NS_ID_BYTES + KVT_KEY_BYTES];
	SHA256_CTX c;

	memcpy(head, KEY_DOMAIN, sizeof(KEY_DOMAIN) - 1);
	memcpy(head + sizeof(KEY_DOMAIN) - 1, ns_id, KVT_NS_ID_BYTES);
	memcpy(head + sizeof(KEY_DOMAIN) - 1 + KVT_NS_ID_BYTES, prev, KVT_KEY_BYTES);
	SHA256_Init(&c);
	SHA256_Update(&c, head, sizeof(head));
	hash_tokens(&c, tokens, n_tokens);
	SHA256_Final(out, &c);
}

void kvt_key_next(const uint8_t ns_id[KVT_NS_ID_BYTES], const struct kvt_key *prev,
		  const uint32_t *tokens, size_t n_tokens, struct kvt_key *out)
{
	static const uint8_t zero[KVT_KEY_BYTES];
	/* prev may alias out: key_next reads it into head before writing out. */
	key_next(ns_id, prev ? prev->bytes : zero, tokens, n_tokens, out->bytes);
}

long kvt_keys_from_tokens(const uint8_t ns_id[KVT_NS_ID_BYTES], uint32_t chunk_tokens,
			  const uint32_t *tokens, size_t n_tokens, struct kvt_key *keys,
			  size_t max_keys)
{
	static const uint8_t zero[KVT_KEY_BYTES];
	uint8_t prev[KVT_KEY_BYTES];
	size_t chunks, i;

	if (!ns_id || chunk_tokens < 1 || chunk_tokens > MAX_CHUNK_TOKENS ||
	    (n_tokens && !tokens) || (max_keys && !keys) || n_tokens > (size_t)LONG_MAX)
		return -EINVAL;
	chunks = n_tokens / chunk_tokens + (n_tokens % chunk_tokens != 0);
	memcpy(prev, zero, sizeof(prev));
	for (i = 0; i < chunks && i < max_keys; i++) {
		size_t off = i * (size_t)chunk_tokens;
		size_t n = KVT_MIN((size_t)chunk_tokens, n_tokens - off);
		key_next(ns_id, prev, tokens + off, n, keys[i].bytes);
		memcpy(prev, keys[i].bytes, sizeof(prev));
	}
	return (long)chunks;
}

/* ------------------------------------------------------------ storage keys */

/* The first SHA-256 block (domain, padding, ns_id: exactly 64 bytes) is the same for every
 * key of a store, so its state is computed once per thread and namespace, and each key
 * costs one compression of the second block. */
static __thread struct {
	bool valid;
	uint8_t ns_id[KVT_NS_ID_BYTES];
	SHA256_CTX after_ns;
} scope_cache;

const struct kvt_key *kvt__storage_key(const uint8_t ns_id[KVT_NS_ID_BYTES],
				       const struct kvt_key *key, struct kvt_key *out)
{
	if (!key)
		return NULL;
	if (!scope_cache.valid || memcmp(scope_cache.ns_id, ns_id, KVT_NS_ID_BYTES)) {
		unsigned char block[64] = {0};
		_Static_assert(sizeof(STORE_DOMAIN) - 1 <= 32, "domain fits its 32 bytes");
		memcpy(block, STORE_DOMAIN, sizeof(STORE_DOMAIN) - 1);
		memcpy(block + 32, ns_id, KVT_NS_ID_BYTES);
		SHA256_Init(&scope_cache.after_ns);
		SHA256_Update(&scope_cache.after_ns, block, sizeof(block));
		memcpy(scope_cache.ns_id, ns_id, KVT_NS_ID_BYTES);
		scope_cache.valid = true;
	}
	SHA256_CTX c = scope_cache.after_ns;
	uint8_t k[KVT_KEY_BYTES];
	memcpy(k, key->bytes, sizeof(k)); /* out may alias key */
	SHA256_Update(&c, k, sizeof(k));
	SHA256_Final(out->bytes, &c);
	return out;
}

int kvt__storage_keys(struct kvt_storage_keys *b, const uint8_t ns_id[KVT_NS_ID_BYTES],
		      const struct kvt_key *keys, size_t n)
{
	b->keys = NULL;
	if (!keys)
		return 0;
	if (n > (1u << 24)) /* more than any batch call accepts */
		return -EINVAL;
	b->keys = n <= KVT_ARRAY_SIZE(b->local) ? b->local : kvt__malloc(n * sizeof(*keys));
	if (!b->keys)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		kvt__storage_key(ns_id, &keys[i], &b->keys[i]);
	return 0;
}

void kvt__storage_keys_free(struct kvt_storage_keys *b)
{
	if (b->keys != b->local)
		kvt__free(b->keys);
	b->keys = NULL;
}

void kvt_key_to_hex(const struct kvt_key *key, char hex[2 * KVT_KEY_BYTES + 1])
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < KVT_KEY_BYTES; i++) {
		hex[2 * i] = digits[key->bytes[i] >> 4];
		hex[2 * i + 1] = digits[key->bytes[i] & 15];
	}
	hex[2 * KVT_KEY_BYTES] = '\0';
}

static int hex_val(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int kvt_key_from_hex(const char *hex, struct kvt_key *key)
{
	uint8_t b[KVT_KEY_BYTES];

	if (!hex || !key)
		return -EINVAL;
	for (size_t i = 0; i < KVT_KEY_BYTES; i++) {
		int hi = hex_val(hex[2 * i]), lo;
		if (hi < 0)
			return -EINVAL;
		lo = hex_val(hex[2 * i + 1]);
		if (lo < 0)
			return -EINVAL;
		b[i] = (uint8_t)(hi << 4 | lo);
	}
	if (hex[2 * KVT_KEY_BYTES] != '\0')
		return -EINVAL;
	memcpy(key->bytes, b, sizeof(b));
	return 0;
}

int kvt__key_from_lowerhex(const char *hex, struct kvt_key *key)
{
	uint8_t b[KVT_KEY_BYTES];
	for (size_t i = 0; i < 2 * KVT_KEY_BYTES; i++) {
		char c = hex[i];
		int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (v < 0)
			return -EINVAL;
		if (i % 2)
			b[i / 2] |= (uint8_t)v;
		else
			b[i / 2] = (uint8_t)(v << 4);
	}
	memcpy(key->bytes, b, sizeof(b));
	return 0;
}
