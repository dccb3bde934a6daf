/*
 * crc_test.c - kvt__crc32c (src/util.c) against published CRC32C (Castagnoli) check
 * values, so that object CRCs stay readable by any other CRC32C implementation.
 * kvt-test-labels: onethread (no second thread, so nothing for TSan to check: scripts/test.sh
 * leaves it out of the TSan pass)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"

/* Bit-at-a-time reference: reflected polynomial 0x82f63b78, init and final xor ~0. */
static uint32_t crc32c_ref(const uint8_t *p, size_t n)
{
	uint32_t c = 0xffffffffu;
	while (n--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
	}
	return ~c;
}

static void test_known_values(void **state)
{
	uint8_t buf[32];

	assert_int_equal(kvt__crc32c(0, "123456789", 9), 0xe3069283u);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(kvt__crc32c(0, buf, 32), 0x8a9136aau);
	memset(buf, 0xff, sizeof(buf));
	assert_int_equal(kvt__crc32c(0, buf, 32), 0x62a8ab43u);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)i;
	assert_int_equal(kvt__crc32c(0, buf, 32), 0x46dd794eu);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)(31 - i);
	assert_int_equal(kvt__crc32c(0, buf, 32), 0x113fdb5cu);
	assert_int_equal(kvt__crc32c(0, buf, 0), 0);
	assert_int_equal(kvt__crc32c(0x12345678u, buf, 0), 0x12345678u);
}

static void test_chained(void **state)
{
	const char *s = "123456789";
	for (size_t cut = 0; cut <= 9; cut++) {
		uint32_t c = kvt__crc32c(0, s, cut);
		c = kvt__crc32c(c, s + cut, 9 - cut);
		assert_int_equal(c, 0xe3069283u);
	}
	/* Three pieces. */
	uint32_t c = kvt__crc32c(0, s, 2);
	c = kvt__crc32c(c, s + 2, 5);
	c = kvt__crc32c(c, s + 7, 2);
	assert_int_equal(c, 0xe3069283u);
}

static void test_against_reference(void **state)
{
	size_t n = 1 << 20;
	uint8_t *buf = malloc(n);
	uint64_t x = 88172645463325252ull;

	assert_non_null(buf);
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		buf[i] = (uint8_t)x;
	}
	/* Lengths and alignments around SIMD block boundaries, and one large buffer. */
	const size_t lens[] = {1, 3, 7, 8, 15, 16, 31, 63, 64, 65, 255, 256, 257, 1023, 4096,
			       4097, 65536 + 5, 1 << 20};
	for (size_t i = 0; i < KVT_ARRAY_SIZE(lens); i++) {
		for (size_t off = 0; off < 4 && off + lens[i] <= n; off++) {
			uint32_t want = crc32c_ref(buf + off, lens[i]);
			assert_int_equal(kvt__crc32c(0, buf + off, lens[i]), want);
			size_t half = lens[i] / 2;
			uint32_t c = kvt__crc32c(0, buf + off, half);
			assert_int_equal(kvt__crc32c(c, buf + off + half, lens[i] - half), want);
		}
	}
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_values),
		cmocka_unit_test(test_chained),
		cmocka_unit_test(test_against_reference),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
