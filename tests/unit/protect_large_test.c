/*
 * protect_large_test.c - encryption of a layer of 2 GiB (src/protect.c). The format accepts
 * one (kvt_geometry_check caps only the whole object at 4 GiB), and OpenSSL takes an int
 * length: the layer used to be passed as (int)lb, negative at 2 GiB, and the first put of
 * such a chunk crashed in EVP_EncryptUpdate. Here a 1-layer object of 2 GiB + its header
 * is sealed, encrypted, authenticated and read back (the CTR path), and compared with what
 * was written. Needs about 4 GiB of memory for a few seconds. Found by a review helper.
 * kvt-test-labels: big (one thread, 4 GiB: TSan's shadow memory made that 20 GiB and 83 s,
 * so scripts/test.sh leaves it out there; release and ASan run it)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "format.h"
#include "protect.h"

static uint64_t word_at(uint64_t i)
{
	return (i + 1) * 0x9e3779b97f4a7c15ull;
}

static void two_gib_layer(void **state)
{
	(void)state;
	setenv("KVT_PROTECT_LARGE_KEY",
	       "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 1);
	struct kvt_config *cfg;
	assert_int_equal(kvt_config_create(&cfg), 0);
	assert_int_equal(kvt_config_set(cfg, "security.encryption_key_env",
					"KVT_PROTECT_LARGE_KEY", NULL, 0),
			 0);
	struct kvt_protect *p = NULL;
	assert_int_equal(kvt__protect_open(cfg, kvt__cfg_log(cfg), &p), 0);
	assert_true(kvt__protect_encrypts(p));
	struct kvt_geometry g = {.layers = 1, .kv_heads = 8, .head_dim = 1024,
				 .chunk_tokens = 65536, .dtype = KVT_DTYPE_BF16,
				 .kind = KVT_KIND_KV};
	assert_int_equal(kvt_geometry_check(&g), 0);
	uint64_t lb = kvt_layer_bytes(&g, 65536), ob = kvt_object_bytes(&g, 65536);
	assert_true(lb >= (2ull << 30));
	uint8_t *o = malloc(ob), *back = malloc(lb);
	assert_non_null(o);
	assert_non_null(back);
	memset(o, 0, KVT_HEADER_BYTES);
	uint64_t *w = (uint64_t *)(o + KVT_HEADER_BYTES);
	for (uint64_t i = 0; i < lb / 8; i++)
		w[i] = word_at(i);
	uint8_t ns[KVT_NS_ID_BYTES] = {1};
	struct kvt_key k = {{2}};
	assert_int_equal(kvt__object_seal(o, ob, &g, ns, &k, 65536), 0);
	assert_int_equal(kvt__object_protect(o, ob, p), 0); /* was: SIGSEGV in OpenSSL */
	assert_true(w[0] != word_at(0) || w[1] != word_at(1));   /* encrypted */
	assert_true(w[lb / 8 - 1] != word_at(lb / 8 - 1));       /* past 2 GiB too */
	struct kvt_header h;
	assert_int_equal(kvt__object_verify(o, ob, NULL, &h), 0);
	assert_int_equal(kvt__object_authenticate(o, ob, &h, p), 0); /* the GCM tag */
	assert_int_equal(kvt__object_read_layers(&h, o, 0, 1, back, lb, p), (int64_t)lb);
	const uint64_t *r = (const uint64_t *)back;
	uint64_t bad = 0;
	for (uint64_t i = 0; i < lb / 8; i++)
		bad += r[i] != word_at(i);
	assert_int_equal(bad, 0);
	free(back);
	free(o);
	kvt__protect_close(p);
	kvt_config_destroy(cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(two_gib_layer)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
