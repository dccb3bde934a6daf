/*
 * ghost_test.c - the approximate ghost list (src/ghost.h): a key added is remembered for at
 * least window / 2 further additions and forgotten after window; false positives stay
 * near the 1 % its sizing promises.
 * kvt-test-labels: onethread (no second thread, so nothing for TSan to check: scripts/test.sh
 * leaves it out of the TSan pass)
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ghost.h"

static uint64_t key(uint64_t i)
{
	return i * 0x9e3779b97f4a7c15ull + 7;
}

static void test_window(void **state)
{
	(void)state;
	struct kvt_ghost *g;
	assert_int_equal(kvt__ghost_create(1, &g), -EINVAL);
	assert_int_equal(kvt__ghost_create(2000, &g), 0);
	assert_false(kvt__ghost_test(g, key(0)));
	for (uint64_t i = 0; i < 1000; i++)
		kvt__ghost_add(g, key(i));
	for (uint64_t i = 0; i < 1000; i++) /* the last window / 2: all there */
		assert_true(kvt__ghost_test(g, key(i)));
	assert_int_equal(kvt__ghost_size(g), 1000);
	for (uint64_t i = 1000; i < 3001; i++)
		kvt__ghost_add(g, key(i));
	uint32_t old = 0, fp = 0;
	for (uint64_t i = 0; i < 1000; i++) /* more than a window ago: gone (but for FPs) */
		old += kvt__ghost_test(g, key(i));
	for (uint64_t i = 0; i < 10000; i++)
		fp += kvt__ghost_test(g, key(1000000 + i));
	assert_true(old < 40);
	assert_true(fp < 400); /* ~1 % expected with both generations full */
	for (uint64_t i = 2001; i < 3001; i++)
		assert_true(kvt__ghost_test(g, key(i)));
	assert_true(kvt__ghost_size(g) <= 2000);
	kvt__ghost_destroy(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_window),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
