/*
 * keys_bench.c - cost of hashing a long prompt into chunk keys (src/keys.c).
 *
 * A 131,072-token prompt in 256-token chunks gives 512 chained keys; the time per prompt is
 * the median of many runs. Two references are measured in the same run: one plain SHA-256
 * over the same number of bytes (the floor any chained-hash design pays), and the same keys
 * through OpenSSL's EVP interface (the alternative API), which must agree bit for bit.
 *
 *   keys_bench [runs]     prints one summary line "keys_bench: ..." (fixed token seed)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "internal.h"

#define N_TOKENS 131072
#define CHUNK 256
#define N_KEYS (N_TOKENS / CHUNK)

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

/* The same key chain through EVP with one reused context and a pre-fetched digest. */
static void keys_evp(EVP_MD_CTX *ctx, const EVP_MD *md, const uint8_t *ns_id,
		     const uint32_t *tokens, struct kvt_key *keys)
{
	static const uint8_t zero[32];
	const uint8_t *prev = zero;
	for (int i = 0; i < N_KEYS; i++) {
		EVP_DigestInit_ex(ctx, md, NULL);
		EVP_DigestUpdate(ctx, "kvtier-chunk-v1", 15);
		EVP_DigestUpdate(ctx, ns_id, 32);
		EVP_DigestUpdate(ctx, prev, 32);
		EVP_DigestUpdate(ctx, tokens + (size_t)i * CHUNK, CHUNK * 4);
		EVP_DigestFinal_ex(ctx, keys[i].bytes, NULL);
		prev = keys[i].bytes;
	}
}

int main(int argc, char **argv)
{
	int runs = argc > 1 ? atoi(argv[1]) : 301;
	uint32_t *tokens = malloc(N_TOKENS * sizeof(uint32_t));
	struct kvt_key *keys = malloc(N_KEYS * sizeof(*keys));
	struct kvt_key *ref = malloc(N_KEYS * sizeof(*ref));
	uint64_t *t_keys = malloc((size_t)runs * 8), *t_evp = malloc((size_t)runs * 8),
		 *t_sha = malloc((size_t)runs * 8);
	struct kvt_namespace ns = {.model = "meta-llama/Llama-3.1-8B-Instruct", .revision = "main",
				   .geometry = {32, 8, 128, CHUNK, KVT_DTYPE_BF16, KVT_KIND_KV}};
	uint8_t ns_id[32], digest[32];
	uint64_t x = 0x2545f4914f6cdd1dull;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	EVP_MD *md = EVP_MD_fetch(NULL, "SHA256", NULL);

	if (runs < 1 || !tokens || !keys || !ref || !t_keys || !t_evp || !t_sha || !ctx || !md ||
	    kvt_namespace_id(&ns, ns_id)) {
		fprintf(stderr, "keys_bench: setup failed\n");
		return 1;
	}
	for (int i = 0; i < N_TOKENS; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		tokens[i] = (uint32_t)(x % 128256); /* Llama-3 vocabulary size */
	}
	for (int r = 0; r < runs; r++) {
		uint64_t t0 = kvt__now_ns();
		long n = kvt_keys_from_tokens(ns_id, CHUNK, tokens, N_TOKENS, keys, N_KEYS);
		uint64_t t1 = kvt__now_ns();
		keys_evp(ctx, md, ns_id, tokens, ref);
		uint64_t t2 = kvt__now_ns();
		EVP_Digest(tokens, (size_t)N_KEYS * (79 + CHUNK * 4), digest, NULL, md, NULL);
		uint64_t t3 = kvt__now_ns();
		if (n != N_KEYS || memcmp(keys, ref, N_KEYS * sizeof(*keys))) {
			fprintf(stderr, "keys_bench: EVP and kvt keys differ\n");
			return 1;
		}
		t_keys[r] = t1 - t0;
		t_evp[r] = t2 - t1;
		t_sha[r] = t3 - t2;
	}
	uint64_t mk = median(t_keys, runs), me = median(t_evp, runs), ms = median(t_sha, runs);
	double mb = (double)N_KEYS * (79 + CHUNK * 4) / 1e6;
	printf("keys_bench: tokens=%d chunk=%d keys=%d runs=%d median_us=%.1f min_us=%.1f "
	       "ns_per_key=%.0f MBps=%.0f evp_median_us=%.1f sha256_floor_us=%.1f "
	       "vs_floor=%.2f\n",
	       N_TOKENS, CHUNK, N_KEYS, runs, mk / 1e3, t_keys[0] / 1e3, (double)mk / N_KEYS,
	       mb / (mk / 1e9), me / 1e3, ms / 1e3, (double)mk / (double)ms);
	EVP_MD_free(md);
	EVP_MD_CTX_free(ctx);
	free(t_sha);
	free(t_evp);
	free(t_keys);
	free(ref);
	free(keys);
	free(tokens);
	return 0;
}
