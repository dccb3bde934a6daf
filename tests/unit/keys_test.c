/*
 * keys_test.c - chunk keys, namespace ids and geometry size math (src/keys.c).
 *
 * The expected hex values come from tests/unit/keys_vectors.py, an independent hashlib
 * implementation of docs/FORMAT.md; they are also printed in docs/FORMAT.md. If a vector
 * fails, the key algorithm or the canonical namespace text changed: every stored object
 * in the world becomes unreachable, so that is a format version bump, not a test update.
 * kvt-test-labels: onethread (no second thread, so nothing for TSan to check: scripts/test.sh
 * leaves it out of the TSan pass)
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

#include "internal.h"
#include "store_key.h"

struct vector {
	const char *name;
	const char *ns_id;
	int n_keys;
	const char *keys[4];
};

static const struct vector vectors[] = {
	/* llama_two_chunks: tokens i for i in 0..511 */
	{"llama_two_chunks",
	 "31adb4657a54d8eb7ae01f4dd2478a873420dd642b05380d5eadbacfc36cc8ab",
	 2,
	 {
		"97a43d99ac6802c423daec67ac34f3e98004ae247c9cbcd49f6ecd68f251a269",
		"453f8fd3004462f399f1cc21ac1db05f32e716fe2f5e63c7e87d329f8f41e21a",
	}},
	/* llama_tenant_salt: tokens i for i in 0..511 */
	{"llama_tenant_salt",
	 "5eff372b501ac2b3d2dc7488ad05f2925c5287a589af9e90c5bb4cd4e6ace193",
	 2,
	 {
		"783f6489a5779410374e5a450ca328ad7d973ef00068a3500ba0e1dddbe9587e",
		"952a32bea0cb8b00feb6f14f9d0011ab7a53a41040c9515f442e443c38c7a373",
	}},
	/* tiny_partial: tokens 1..10 (last chunk has 2 tokens) */
	{"tiny_partial",
	 "6009a3f8f385d7650af8fee904b8a3b7d8c28a87f6d085fc181dc2434b56d3df",
	 3,
	 {
		"6fc76e5ab7e90499a0a43d18a133dc6cf754574bd9f006a9f3fa7539a2a78222",
		"52ff7f510a58600f1cd1602fb36ce58fba6d404bdb66abc52355ec347de3db08",
		"41815f3f8a7e21cc25a4a37bb132787bdd6bdc16e79b006df8e72801db6d99ef",
	}},
	/* mla_fp8_wide_tokens: tokens (i * 2654435761 + 0xdeadbeef) mod 2^32 for i in 0..149 */
	{"mla_fp8_wide_tokens",
	 "1613b92441fed19127c79c3b5926af49b3a6ed6f7b1004882b71e7c1cd95c0c9",
	 3,
	 {
		"ec192403b83f044d9306b79843ad980da5686c593c0da2718685d583f2716eaf",
		"baf6562c395b55ae19520773470b5c89864700099ac0648f6c8f0f9fcc5b763f",
		"458949285d70be32c523cf38b3f8c6ec0e5ab6a6acf6b1ad77a3e32e8b35b4a9",
	}},
	/* single_token: tokens [4294967295] */
	{"single_token",
	 "16fe6deb1e5a3edef76b53cf560e0393e01943d047852502674ee09507a92e0e",
	 1,
	 {
		"30157011e779c92533405ff2743593fc5f5fae4755d229418c7f667d44802466",
	}},
};

#define LLAMA_MODEL "meta-llama/Llama-3.1-8B-Instruct"
#define LLAMA_REV "0e9e39f249a16976918f6564b8830bc894c89659"

/* The namespaces and token lists of the vectors, in the order of vectors[]. */
static void vector_case(int i, struct kvt_namespace *ns, uint32_t **tokens, size_t *n)
{
	const struct kvt_geometry llama = {32, 8, 128, 256, KVT_DTYPE_BF16, KVT_KIND_KV};
	memset(ns, 0, sizeof(*ns));
	switch (i) {
	case 0:
	case 1:
		ns->model = LLAMA_MODEL;
		ns->revision = LLAMA_REV;
		ns->tenant = i == 1 ? "acme-corp" : NULL;
		ns->geometry = llama;
		*n = 512;
		*tokens = malloc(*n * 4);
		for (size_t t = 0; t < *n; t++)
			(*tokens)[t] = (uint32_t)t;
		break;
	case 2:
		ns->model = "tiny";
		ns->revision = "r1";
		ns->tenant = "";
		ns->geometry = (struct kvt_geometry){2, 2, 4, 4, KVT_DTYPE_FP32, KVT_KIND_KV};
		*n = 10;
		*tokens = malloc(*n * 4);
		for (size_t t = 0; t < *n; t++)
			(*tokens)[t] = (uint32_t)t + 1;
		break;
	case 3:
		ns->model = "deepseek-ai/DeepSeek-V3";
		ns->revision = "main";
		ns->tenant = "t\xc3\xa9nant-\xc3\xbcnicode";
		ns->geometry = (struct kvt_geometry){61, 1, 576, 64, KVT_DTYPE_FP8, KVT_KIND_MLA};
		*n = 150;
		*tokens = malloc(*n * 4);
		for (size_t t = 0; t < *n; t++)
			(*tokens)[t] = (uint32_t)(t * 2654435761u + 0xdeadbeefu);
		break;
	default:
		ns->model = "m";
		ns->revision = NULL;
		ns->tenant = NULL;
		ns->geometry = (struct kvt_geometry){1, 1, 1, 65536, KVT_DTYPE_FP16, KVT_KIND_KV};
		*n = 1;
		*tokens = malloc(4);
		(*tokens)[0] = 0xffffffffu;
		break;
	}
	assert_non_null(*tokens);
}

static void hex_of(const uint8_t *b, char *out)
{
	struct kvt_key k;
	memcpy(k.bytes, b, 32);
	kvt_key_to_hex(&k, out);
}

static void test_vectors(void **state)
{
	for (int i = 0; i < (int)KVT_ARRAY_SIZE(vectors); i++) {
		struct kvt_namespace ns;
		uint32_t *tokens;
		size_t n;
		uint8_t ns_id[32];
		struct kvt_key keys[4];
		char hex[65];

		vector_case(i, &ns, &tokens, &n);
		assert_int_equal(kvt_namespace_id(&ns, ns_id), 0);
		hex_of(ns_id, hex);
		assert_string_equal(hex, vectors[i].ns_id);
		long c = kvt_keys_from_tokens(ns_id, ns.geometry.chunk_tokens, tokens, n, keys, 4);
		assert_int_equal(c, vectors[i].n_keys);
		for (int k = 0; k < c; k++) {
			kvt_key_to_hex(&keys[k], hex);
			assert_string_equal(hex, vectors[i].keys[k]);
		}
		/* The chained single-chunk call gives the same keys. */
		struct kvt_key prev, cur;
		for (int k = 0; k < c; k++) {
			size_t off = (size_t)k * ns.geometry.chunk_tokens;
			size_t m = KVT_MIN((size_t)ns.geometry.chunk_tokens, n - off);
			kvt_key_next(ns_id, k ? &prev : NULL, tokens + off, m, &cur);
			assert_memory_equal(cur.bytes, keys[k].bytes, 32);
			prev = cur;
		}
		free(tokens);
	}
}

static void test_namespace_text(void **state)
{
	struct kvt_namespace ns = {.model = "tiny", .revision = "r1",
				   .geometry = {2, 2, 4, 4, KVT_DTYPE_FP32, KVT_KIND_KV}};
	const char *want = "kvtier-ns-v1\nmodel=tiny\nrevision=r1\nlayers=2\nkv_heads=2\n"
			   "head_dim=4\ndtype=fp32\nkind=kv\nchunk_tokens=4\ntenant=\n";
	char buf[512];
	int n = kvt_namespace_text(&ns, buf, sizeof(buf));
	assert_int_equal(n, (int)strlen(want));
	assert_string_equal(buf, want);
	/* Exactly fitting (n + 1 for the NUL) works; one byte less is -ENOSPC. */
	assert_int_equal(kvt_namespace_text(&ns, buf, (size_t)n + 1), n);
	assert_int_equal(kvt_namespace_text(&ns, buf, (size_t)n), -ENOSPC);
	assert_int_equal(kvt_namespace_text(&ns, NULL, 0), -ENOSPC);

	/* NULL and "" tenant/revision are the same namespace. */
	uint8_t a[32], b[32];
	ns.tenant = "";
	assert_int_equal(kvt_namespace_id(&ns, a), 0);
	ns.tenant = NULL;
	assert_int_equal(kvt_namespace_id(&ns, b), 0);
	assert_memory_equal(a, b, 32);

	/* Every geometry field is part of the namespace. */
	struct kvt_namespace m = ns;
	uint8_t c[32];
	const struct kvt_geometry variants[] = {
		{3, 2, 4, 4, KVT_DTYPE_FP32, KVT_KIND_KV},
		{2, 1, 4, 4, KVT_DTYPE_FP32, KVT_KIND_KV},
		{2, 2, 8, 4, KVT_DTYPE_FP32, KVT_KIND_KV},
		{2, 2, 4, 8, KVT_DTYPE_FP32, KVT_KIND_KV},
		{2, 2, 4, 4, KVT_DTYPE_BF16, KVT_KIND_KV},
		{2, 1, 4, 4, KVT_DTYPE_FP32, KVT_KIND_MLA},
	};
	for (size_t i = 0; i < KVT_ARRAY_SIZE(variants); i++) {
		m.geometry = variants[i];
		assert_int_equal(kvt_namespace_id(&m, c), 0);
		assert_memory_not_equal(a, c, 32);
	}
	m = ns;
	m.revision = "r2";
	assert_int_equal(kvt_namespace_id(&m, c), 0);
	assert_memory_not_equal(a, c, 32);
}

static void test_namespace_invalid(void **state)
{
	struct kvt_namespace ns = {.model = "tiny", .revision = "r1",
				   .geometry = {2, 2, 4, 4, KVT_DTYPE_FP32, KVT_KIND_KV}};
	uint8_t id[32];
	char buf[256];
	const char *bad[] = {"a\nb", "a\rb", "tab\there", "del\x7f", "\x01"};

	for (size_t i = 0; i < KVT_ARRAY_SIZE(bad); i++) {
		struct kvt_namespace m = ns;
		m.model = bad[i];
		assert_int_equal(kvt_namespace_id(&m, id), -EINVAL);
		m = ns;
		m.revision = bad[i];
		assert_int_equal(kvt_namespace_id(&m, id), -EINVAL);
		m = ns;
		m.tenant = bad[i];
		assert_int_equal(kvt_namespace_text(&m, buf, sizeof(buf)), -EINVAL);
	}
	/* A tenant that tries to forge another line is refused, not escaped. */
	ns.tenant = "x\ntenant=y";
	assert_int_equal(kvt_namespace_id(&ns, id), -EINVAL);
	ns.tenant = NULL;
	ns.model = NULL;
	assert_int_equal(kvt_namespace_id(&ns, id), -EINVAL);
	ns.model = "";
	assert_int_equal(kvt_namespace_id(&ns, id), -EINVAL);
	ns.model = "ok";
	ns.geometry.layers = 0;
	assert_int_equal(kvt_namespace_id(&ns, id), -EINVAL);
	ns.geometry.layers = 2;
	assert_int_equal(kvt_namespace_id(NULL, id), -EINVAL);
	assert_int_equal(kvt_namespace_id(&ns, NULL), -EINVAL);

	/* Field length limit: 1024 bytes accepted (in all three fields), 1025 refused. */
	char *big = malloc(1026);
	assert_non_null(big);
	memset(big, 'a', 1025);
	big[1024] = '\0';
	ns.model = ns.revision = ns.tenant = big;
	assert_int_equal(kvt_namespace_id(&ns, id), 0);
	big[1024] = 'a';
	big[1025] = '\0';
	assert_int_equal(kvt_namespace_id(&ns, id), -EINVAL);
	ns.model = ns.revision = "ok";
	assert_int_equal(kvt_namespace_id(&ns, id), -EINVAL);
	free(big);
}

static void test_tenant_salt(void **state)
{
	struct kvt_namespace ns = {.model = "m", .revision = "r",
				   .geometry = {4, 2, 8, 16, KVT_DTYPE_BF16, KVT_KIND_KV}};
	uint8_t a[32], b[32], c[32];
	uint32_t tokens[40];
	struct kvt_key ka[3], kb[3], kc[3];

	for (int i = 0; i < 40; i++)
		tokens[i] = (uint32_t)i * 7;
	assert_int_equal(kvt_namespace_id(&ns, a), 0);
	ns.tenant = "alice";
	assert_int_equal(kvt_namespace_id(&ns, b), 0);
	ns.tenant = "bob";
	assert_int_equal(kvt_namespace_id(&ns, c), 0);
	assert_memory_not_equal(a, b, 32);
	assert_memory_not_equal(b, c, 32);
	assert_int_equal(kvt_keys_from_tokens(a, 16, tokens, 40, ka, 3), 3);
	assert_int_equal(kvt_keys_from_tokens(b, 16, tokens, 40, kb, 3), 3);
	assert_int_equal(kvt_keys_from_tokens(c, 16, tokens, 40, kc, 3), 3);
	for (int i = 0; i < 3; i++) {
		for (int j = 0; j < 3; j++) {
			assert_memory_not_equal(ka[i].bytes, kb[j].bytes, 32);
			assert_memory_not_equal(kb[i].bytes, kc[j].bytes, 32);
			assert_memory_not_equal(ka[i].bytes, kc[j].bytes, 32);
		}
	}
}

static void test_determinism_and_chaining(void **state)
{
	uint8_t ns[32];
	uint32_t t1[64], t2[64];
	struct kvt_key k1[4], k2[4], again[4];

	memset(ns, 0x5a, sizeof(ns));
	for (int i = 0; i < 64; i++)
		t1[i] = t2[i] = (uint32_t)i * 2654435761u;
	assert_int_equal(kvt_keys_from_tokens(ns, 16, t1, 64, k1, 4), 4);
	assert_int_equal(kvt_keys_from_tokens(ns, 16, t1, 64, again, 4), 4);
	assert_memory_equal(k1, again, sizeof(k1));
	/* A change in chunk 1 changes key 1 and every later key, never key 0. */
	t2[20] ^= 1;
	assert_int_equal(kvt_keys_from_tokens(ns, 16, t2, 64, k2, 4), 4);
	assert_memory_equal(k1[0].bytes, k2[0].bytes, 32);
	for (int i = 1; i < 4; i++)
		assert_memory_not_equal(k1[i].bytes, k2[i].bytes, 32);
	/* Same tokens of chunk 2 after a different prefix: different key (prefix-bound). */
	assert_memory_not_equal(k1[2].bytes, k2[2].bytes, 32);
	/* Different chunk size: different keys even where the first 16 tokens agree. */
	assert_int_equal(kvt_keys_from_tokens(ns, 32, t1, 64, k2, 4), 2);
	assert_memory_not_equal(k1[0].bytes, k2[0].bytes, 32);
	/* prev may alias out. */
	struct kvt_key x = k1[0];
	kvt_key_next(ns, &x, t1 + 16, 16, &x);
	assert_memory_equal(x.bytes, k1[1].bytes, 32);
	/* Token order matters byte-wise: 0x01020304 is hashed as 04 03 02 01. */
	uint32_t one = 0x01020304u, two = 0x04030201u;
	kvt_key_next(ns, NULL, &one, 1, &k2[0]);
	kvt_key_next(ns, NULL, &two, 1, &k2[1]);
	assert_memory_not_equal(k2[0].bytes, k2[1].bytes, 32);
}

static void test_partial_and_truncation(void **state)
{
	uint8_t ns[32] = {1};
	uint32_t tokens[1000];
	struct kvt_key full[4], some[4], sentinel;

	for (int i = 0; i < 1000; i++)
		tokens[i] = (uint32_t)i;
	/* 1000 tokens in chunks of 256: 3 full + one of 232. */
	assert_int_equal(kvt_keys_from_tokens(ns, 256, tokens, 1000, full, 4), 4);
	struct kvt_key last;
	kvt_key_next(ns, &full[2], tokens + 768, 232, &last);
	assert_memory_equal(last.bytes, full[3].bytes, 32);
	/* The partial chunk's key differs from the key over its full-length extension. */
	assert_int_equal(kvt_keys_from_tokens(ns, 256, tokens, 1024 - 24, some, 4), 4);
	assert_memory_equal(some[3].bytes, full[3].bytes, 32);
	struct kvt_key longer;
	kvt_key_next(ns, &full[2], tokens + 768, 231, &longer);
	assert_memory_not_equal(longer.bytes, full[3].bytes, 32);

	/* max_keys truncation: returns the full count, writes only max_keys. */
	memset(&sentinel, 0xee, sizeof(sentinel));
	for (int i = 0; i < 4; i++)
		some[i] = sentinel;
	assert_int_equal(kvt_keys_from_tokens(ns, 256, tokens, 1000, some, 2), 4);
	assert_memory_equal(some, full, 2 * sizeof(struct kvt_key));
	assert_memory_equal(some[2].bytes, sentinel.bytes, 32);
	assert_memory_equal(some[3].bytes, sentinel.bytes, 32);
	assert_int_equal(kvt_keys_from_tokens(ns, 256, tokens, 1000, NULL, 0), 4);
	/* Exact multiple: no extra empty chunk. */
	assert_int_equal(kvt_keys_from_tokens(ns, 250, tokens, 1000, NULL, 0), 4);
	assert_int_equal(kvt_keys_from_tokens(ns, 1, tokens, 1000, NULL, 0), 1000);
	assert_int_equal(kvt_keys_from_tokens(ns, 256, tokens, 0, NULL, 0), 0);
	assert_int_equal(kvt_keys_from_tokens(ns, 256, NULL, 0, NULL, 0), 0);

	/* Invalid arguments. */
	assert_int_equal(kvt_keys_from_tokens(ns, 0, tokens, 10, full, 4), -EINVAL);
	assert_int_equal(kvt_keys_from_tokens(ns, 65537, tokens, 10, full, 4), -EINVAL);
	assert_int_equal(kvt_keys_from_tokens(NULL, 256, tokens, 10, full, 4), -EINVAL);
	assert_int_equal(kvt_keys_from_tokens(ns, 256, NULL, 10, full, 4), -EINVAL);
	assert_int_equal(kvt_keys_from_tokens(ns, 256, tokens, 10, NULL, 4), -EINVAL);
	assert_int_equal(kvt_keys_from_tokens(ns, 65536, tokens, 1000, full, 4), 1);
}

/* Object names in the tiers: exactly 64 lowercase digits, nothing else. */
static void test_lowerhex(void **state)
{
	(void)state;
	struct kvt_key k, back;
	char hex[65];
	for (int i = 0; i < KVT_KEY_BYTES; i++)
		k.bytes[i] = (uint8_t)(i * 37 + 11);
	kvt_key_to_hex(&k, hex);
	assert_int_equal(kvt__key_from_lowerhex(hex, &back), 0);
	assert_memory_equal(k.bytes, back.bytes, KVT_KEY_BYTES);
	hex[10] = 'A';
	assert_int_equal(kvt__key_from_lowerhex(hex, &back), -EINVAL);
	hex[10] = 'g';
	assert_int_equal(kvt__key_from_lowerhex(hex, &back), -EINVAL);
	hex[10] = '\0';
	assert_int_equal(kvt__key_from_lowerhex(hex, &back), -EINVAL);
}

static void test_hex(void **state)
{
	struct kvt_key k, back;
	char hex[65];

	for (int i = 0; i < 32; i++)
		k.bytes[i] = (uint8_t)(i * 37 + 11);
	kvt_key_to_hex(&k, hex);
	assert_int_equal(strlen(hex), 64);
	for (int i = 0; i < 64; i++)
		assert_true((hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f'));
	assert_int_equal(kvt_key_from_hex(hex, &back), 0);
	assert_memory_equal(k.bytes, back.bytes, 32);
	assert_string_equal(hex, "0b30557a9fc4e90e33587da2c7ec1136"
				 "5b80a5caef14395e83a8cdf2173c6186");

	/* Upper case is accepted on input. */
	char up[65];
	for (int i = 0; i < 65; i++)
		up[i] = (char)(hex[i] >= 'a' ? hex[i] - 32 : hex[i]);
	assert_int_equal(kvt_key_from_hex(up, &back), 0);
	assert_memory_equal(k.bytes, back.bytes, 32);

	/* Bad inputs leave the key untouched. */
	const struct kvt_key before = back;
	char bad[80];
	assert_int_equal(kvt_key_from_hex("", &back), -EINVAL);
	assert_int_equal(kvt_key_from_hex("abc", &back), -EINVAL);
	memcpy(bad, hex, 63);
	bad[63] = '\0'; /* 63 digits */
	assert_int_equal(kvt_key_from_hex(bad, &back), -EINVAL);
	memcpy(bad, hex, 65);
	bad[64] = '0';
	bad[65] = '\0'; /* 65 digits */
	assert_int_equal(kvt_key_from_hex(bad, &back), -EINVAL);
	const char nonhex[] = {'g', ' ', 'x', '-', ':', '/', 'G'};
	for (size_t c = 0; c < sizeof(nonhex); c++) {
		for (int pos = 0; pos < 64; pos += 21) {
			memcpy(bad, hex, 65);
			bad[pos] = nonhex[c];
			assert_int_equal(kvt_key_from_hex(bad, &back), -EINVAL);
		}
	}
	memcpy(bad, hex, 65);
	bad[63] = 'z';
	assert_int_equal(kvt_key_from_hex(bad, &back), -EINVAL);
	assert_int_equal(kvt_key_from_hex(NULL, &back), -EINVAL);
	assert_memory_equal(before.bytes, back.bytes, 32);
}

/* Storage keys (docs/FORMAT.md 2b) against keys_vectors.py: a content key and an opaque
 * one in two namespaces; the opaque key names a different object in each. */
static void test_storage_keys(void **state)
{
	static const char *v[][3] = {
		{"31adb4657a54d8eb7ae01f4dd2478a873420dd642b05380d5eadbacfc36cc8ab",
		 "97a43d99ac6802c423daec67ac34f3e98004ae247c9cbcd49f6ecd68f251a269",
		 "f49c697f5d2e1b05af5633f1efbabfffba5dbfcd769b5ddfe33a4f3cd3b225df"},
		{"31adb4657a54d8eb7ae01f4dd2478a873420dd642b05380d5eadbacfc36cc8ab",
		 "4242424242424242424242424242424242424242424242424242424242424242",
		 "69053f39206c1100c5397bd7e1c74190bcaa6c5b1db132d05d8e671ce42263e7"},
		{"5eff372b501ac2b3d2dc7488ad05f2925c5287a589af9e90c5bb4cd4e6ace193",
		 "4242424242424242424242424242424242424242424242424242424242424242",
		 "5e448870c7117bb7e5cf3224037950f017d977823fbcebd2b57140ed97b2acf4"},
		{"16fe6deb1e5a3edef76b53cf560e0393e01943d047852502674ee09507a92e0e",
		 "30157011e779c92533405ff2743593fc5f5fae4755d229418c7f667d44802466",
		 "09a08f941f268c9d871d78842ebaaf1787ed2c1eda1d55da3f18428013d1b50a"},
	};
	struct kvt_key batch_in[40], nsk;
	for (int round = 0; round < 2; round++) /* the second round hits the cached first block */
		for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
			struct kvt_key ns, key, out;
			char hex[65];
			assert_int_equal(kvt_key_from_hex(v[i][0], &ns), 0);
			assert_int_equal(kvt_key_from_hex(v[i][1], &key), 0);
			assert_ptr_equal(kvt__storage_key(ns.bytes, &key, &out), &out);
			kvt_key_to_hex(&out, hex);
			assert_string_equal(hex, v[i][2]);
			assert_ptr_equal(kvt__storage_key(ns.bytes, &key, &key), &key); /* aliasing */
			assert_memory_equal(&key, &out, sizeof(key));
		}
	assert_int_equal(kvt_key_from_hex(v[2][0], &nsk), 0);
	assert_null(kvt__storage_key(nsk.bytes, NULL, &nsk));
	/* batches, on the stack and on the heap, equal key by key */
	for (int i = 0; i < 40; i++)
		memset(batch_in[i].bytes, i, sizeof(batch_in[i].bytes));
	size_t sizes[] = {0, 1, 16, 17, 40};
	for (size_t j = 0; j < sizeof(sizes) / sizeof(sizes[0]); j++) {
		struct kvt_storage_keys b;
		assert_int_equal(kvt__storage_keys(&b, nsk.bytes, batch_in, sizes[j]), 0);
		for (size_t i = 0; i < sizes[j]; i++) {
			struct kvt_key one;
			kvt__storage_key(nsk.bytes, &batch_in[i], &one);
			assert_memory_equal(&b.keys[i], &one, sizeof(one));
		}
		kvt__storage_keys_free(&b);
	}
}

static void test_geometry(void **state)
{
	struct kvt_geometry g = {32, 8, 128, 256, KVT_DTYPE_BF16, KVT_KIND_KV};

	assert_int_equal(kvt_geometry_check(&g), 0);
	assert_int_equal(kvt_dtype_bytes(KVT_DTYPE_BF16), 2);
	assert_int_equal(kvt_dtype_bytes(KVT_DTYPE_FP16), 2);
	assert_int_equal(kvt_dtype_bytes(KVT_DTYPE_FP8), 1);
	assert_int_equal(kvt_dtype_bytes(KVT_DTYPE_FP32), 4);
	assert_int_equal(kvt_dtype_bytes(0), 0);
	assert_int_equal(kvt_dtype_bytes(5), 0);

	/* Llama-3.1-8B chunk: 2 * 256 * 8 * 128 * 2 = 1 MiB per layer, 32 MiB payload. */
	assert_int_equal(kvt_layer_bytes(&g, 256), 1u << 20);
	assert_int_equal(kvt_payload_bytes(&g, 256), 32u << 20);
	assert_int_equal(kvt_object_bytes(&g, 256), 4096 + (32u << 20));
	assert_int_equal(kvt_layer_offset(&g, 256, 0), 4096);
	assert_int_equal(kvt_layer_offset(&g, 256, 1), 4096 + (1u << 20));
	assert_int_equal(kvt_layer_offset(&g, 256, 32), kvt_object_bytes(&g, 256));
	assert_int_equal(kvt_layer_offset(&g, 256, 33), 0);
	/* Partial chunk of 3 tokens: 12288 bytes per layer, padded to 12288. 1 token: 4096. */
	assert_int_equal(kvt_layer_bytes(&g, 3), 3 * 4096);
	assert_int_equal(kvt_layer_bytes(&g, 1), 4096);
	assert_int_equal(kvt_object_bytes(&g, 0), 4096);
	assert_int_equal(kvt_layer_bytes(&g, 257), 0);
	assert_int_equal(kvt_object_bytes(&g, 257), 0);

	/* Padding: a layer of 2 * 5 * 1 * 3 * 1 = 30 bytes takes a 4 KiB segment. */
	struct kvt_geometry s = {3, 1, 3, 8, KVT_DTYPE_FP8, KVT_KIND_KV};
	assert_int_equal(kvt_geometry_check(&s), 0);
	assert_int_equal(kvt_layer_bytes(&s, 5), 30);
	assert_int_equal(kvt_payload_bytes(&s, 5), 90);
	assert_int_equal(kvt_object_bytes(&s, 5), 4 * 4096);
	assert_int_equal(kvt_layer_offset(&s, 5, 2), 3 * 4096);

	/* MLA: one latent plane; kv_heads must be 1. DeepSeek-V3: 64 * 576 fp8 = 36 KiB. */
	struct kvt_geometry m = {61, 1, 576, 64, KVT_DTYPE_FP8, KVT_KIND_MLA};
	assert_int_equal(kvt_geometry_check(&m), 0);
	assert_int_equal(kvt_layer_bytes(&m, 64), 64 * 576);
	assert_int_equal(kvt_object_bytes(&m, 64), 4096 + 61 * 36864);
	m.kv_heads = 2;
	assert_int_equal(kvt_geometry_check(&m), -EINVAL);
	assert_int_equal(kvt_layer_bytes(&m, 64), 0);

	/* Field bounds. */
	struct kvt_geometry b;
	assert_int_equal(kvt_geometry_check(NULL), -EINVAL);
	b = g, b.layers = 0;
	assert_int_equal(kvt_geometry_check(&b), -EINVAL);
	b = g, b.layers = KVT_MAX_LAYERS;
	assert_int_equal(kvt_geometry_check(&b), 0);
	b = g, b.layers = KVT_MAX_LAYERS + 1;
	assert_int_equal(kvt_geometry_check(&b), -EINVAL);
	b = g, b.kv_heads = 0;
	assert_int_equal(kvt_geometry_check(&b), -EINVAL);
	b = g, b.head_dim = 0;
	assert_int_equal(kvt_geometry_check(&b), -EINVAL);
	b = g, b.chunk_tokens = 0;
	assert_int_equal(kvt_geometry_check(&b), -EINVAL);
	b = g, b.chunk_tokens = 65537;
	assert_int_equal(kvt_geometry_check(&b), -EINVAL);
	b = (struct kvt_geometry){1, 1, 1, 65536, KVT_DTYPE_FP8, KVT_KIND_MLA};
	assert_int_equal(kvt_geometry_check(&b), 0);
	b = g, b.dtype = 0;
	assert_int_equal(kvt_geometry_check(&b), -EINVAL);
	b = g, b.dtype = 5;
	assert_int_equal(kvt_geometry_check(&b), -EINVAL);
	b = g, b.kind = 0;
	assert_int_equal(kvt_geometry_check(&b), -EINVAL);
	b = g, b.kind = 3;
	assert_int_equal(kvt_geometry_check(&b), -EINVAL);
	assert_int_equal(kvt_payload_bytes(&b, 1), 0);
	assert_int_equal(kvt_layer_offset(&b, 1, 0), 0);
	assert_int_equal(kvt_layer_bytes(NULL, 1), 0);
	assert_int_equal(kvt_payload_bytes(NULL, 1), 0);
	assert_int_equal(kvt_object_bytes(NULL, 1), 0);
	assert_int_equal(kvt_layer_offset(NULL, 1, 0), 0);
}

static void test_geometry_size_limits(void **state)
{
	/* MLA fp8, 65536 tokens: a layer is 65536 * head_dim bytes. head_dim 65535 gives
	 * 4 GiB - 64 KiB + header: accepted. */
	struct kvt_geometry g = {1, 1, 65535, 65536, KVT_DTYPE_FP8, KVT_KIND_MLA};
	assert_int_equal(kvt_geometry_check(&g), 0);
	assert_int_equal(kvt_object_bytes(&g, 65536), 4096 + 65536ull * 65535);
	/* head_dim 65536: 4 GiB body + header > 4 GiB: refused. */
	g.head_dim = 65536;
	assert_int_equal(kvt_geometry_check(&g), -EINVAL);
	/* Object of exactly 4 GiB is accepted, 16 bytes more per layer is not: 16 tokens,
	 * MLA fp8, head_dim = (4 GiB - 4 KiB) / 16 = 268435200. */
	g = (struct kvt_geometry){1, 1, 268435200, 16, KVT_DTYPE_FP8, KVT_KIND_MLA};
	assert_int_equal(kvt_object_bytes(&g, 16), 4ull << 30);
	assert_int_equal(kvt_geometry_check(&g), 0);
	g.head_dim++;
	assert_int_equal(kvt_geometry_check(&g), -EINVAL);
	assert_int_equal(kvt_object_bytes(&g, 16), 0);

	/* Products that overflow uint64 are refused, not wrapped: 2 * 65536 * 2^32-1 *
	 * 2^32-1 * 4 overflows; a wrapped value could look small. */
	g = (struct kvt_geometry){256, UINT32_MAX, UINT32_MAX, 65536, KVT_DTYPE_FP32,
				  KVT_KIND_KV};
	assert_int_equal(kvt_geometry_check(&g), -EINVAL);
	assert_int_equal(kvt_layer_bytes(&g, 65536), 0);
	assert_int_equal(kvt_object_bytes(&g, 65536), 0);
	assert_int_equal(kvt_payload_bytes(&g, 65536), 0);
	/* 2^32 * 2^32 * 2 * 4 * 65536 = 2^83 mod 2^64 == 0: a naive product would be 0. */
	g = (struct kvt_geometry){1, 1u << 31, 1u << 31, 65536, KVT_DTYPE_FP32, KVT_KIND_KV};
	assert_int_equal(kvt_geometry_check(&g), -EINVAL);
	assert_int_equal(kvt_object_bytes(&g, 65536), 0);
	/* Large but not overflowing: far over 4 GiB. */
	g = (struct kvt_geometry){256, 1024, 1024, 65536, KVT_DTYPE_FP32, KVT_KIND_KV};
	assert_int_equal(kvt_geometry_check(&g), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vectors),
		cmocka_unit_test(test_lowerhex),
		cmocka_unit_test(test_namespace_text),
		cmocka_unit_test(test_namespace_invalid),
		cmocka_unit_test(test_tenant_salt),
		cmocka_unit_test(test_determinism_and_chaining),
		cmocka_unit_test(test_partial_and_truncation),
		cmocka_unit_test(test_hex),
		cmocka_unit_test(test_storage_keys),
		cmocka_unit_test(test_geometry),
		cmocka_unit_test(test_geometry_size_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
