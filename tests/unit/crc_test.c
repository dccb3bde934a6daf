/*
 * crc_test.c - kvt__crc32c (src/util.c) against published CRC32C (Castagnoli) check
 * values, so that object CRCs stay readable by any other CRC32C implementation; and
 * kvt__crc32c_combine against one pass over the bytes it combines.
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

/* kvt__crc32c_combine: the CRC of A then B from the two CRCs and B's length equals one
 * pass over A.B, for every cut of a buffer and across SIMD block sizes; and the factor for
 * lengths of up to 2^64 - 1 bytes, checked through associativity (no buffer that long). */
static void test_combine(void **state)
{
	const char *s = "123456789";
	for (size_t cut = 0; cut <= 9; cut++)
		assert_int_equal(kvt__crc32c_combine(kvt__crc32c(0, s, cut),
						     kvt__crc32c(0, s + cut, 9 - cut), 9 - cut),
				 0xe3069283u);
	size_t n = 70000;
	uint8_t *buf = malloc(n);
	assert_non_null(buf);
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		buf[i] = (uint8_t)x;
	}
	const size_t cuts[] = {0, 1, 7, 64, 255, 4096, 4097, 65536, 69999, 70000};
	uint32_t whole = kvt__crc32c(0, buf, n);
	for (size_t i = 0; i < KVT_ARRAY_SIZE(cuts); i++) {
		size_t c = cuts[i];
		uint32_t a = kvt__crc32c(0, buf, c), b = kvt__crc32c(0, buf + c, n - c);
		assert_int_equal(kvt__crc32c_combine(a, b, n - c), whole);
		assert_int_equal(kvt__crc32c_combine_op(kvt__crc32c_shift_op(n - c), a, b), whole);
	}
	/* many equal pieces folded with one factor, as kvt__object_crc folds layers */
	uint32_t op = kvt__crc32c_shift_op(7000), fold = kvt__crc32c(0, buf, 7000);
	for (size_t p = 1; p < 10; p++)
		fold = kvt__crc32c_combine_op(op, fold, kvt__crc32c(0, buf + p * 7000, 7000));
	assert_int_equal(fold, whole);
	/* an empty B leaves A's CRC */
	assert_int_equal(kvt__crc32c_combine(whole, 0, 0), whole);
	/* (a.b).c == a.(b.c) with huge lengths: every bit of the length's factor is used */
	const uint64_t lens[] = {1, 4096, (1ull << 33) + 5, (1ull << 40) + 123,
				 (1ull << 62) + 77, UINT64_MAX / 2};
	for (size_t i = 0; i < KVT_ARRAY_SIZE(lens); i++)
		for (size_t j = 0; j < KVT_ARRAY_SIZE(lens); j++) {
			uint32_t a = 0x12345678u, b = 0x9abcdef0u, c = 0x0f1e2d3cu;
			uint32_t left = kvt__crc32c_combine(kvt__crc32c_combine(a, b, lens[i]), c,
							    lens[j]);
			uint32_t right = kvt__crc32c_combine(a, kvt__crc32c_combine(b, c, lens[j]),
							     lens[i] + lens[j]);
			assert_int_equal(left, right);
		}
	/* and the factor is not the identity: a shifted CRC changes */
	assert_int_not_equal(kvt__crc32c_combine(0x12345678u, 0, UINT64_MAX), 0x12345678u);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_values),
		cmocka_unit_test(test_chained),
		cmocka_unit_test(test_against_reference),
		cmocka_unit_test(test_combine),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
