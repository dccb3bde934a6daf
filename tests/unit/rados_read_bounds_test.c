/*
 * rados_read_bounds_test.c - src/tier_rados.c's accounting of a read segment's answer,
 * without a cluster: the byte count librados reports for a segment is the cluster's word,
 * and a count above the bytes asked for must fail the read, never reach the caller as
 * the object's size (the engine verifies that many bytes of its buffer).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#ifdef KVT_HAVE_RADOS
/* The tier's statics, compiled here under another name for its ops table. */
#define kvt__tier_rados_ops test_rados_ops
#include "../../src/tier_rados.c"

static int64_t got;
static int calls;

static void cb(void *arg, int64_t result)
{
	(void)arg;
	got = result;
	calls++;
}

/* One read of one segment of len bytes, answered with rc. */
static int64_t read_answered(uint64_t len, int rc)
{
	static struct kvt_tier t;
	static struct rados_state s;
	s.t = &t;
	s.timeout_ns = 1000000000ULL;
	struct rados_op *op = op_new(&s, OP_READ, 1, 1, cb, NULL);
	assert_non_null(op);
	op->subs[0].len = len;
	calls = 0;
	sub_done(&op->subs[0], rc);
	assert_int_equal(calls, 1);
	return got;
}

static void test_read_count_bounded(void **state)
{
	(void)state;
	assert_int_equal(read_answered(100, 100), 100);
	assert_int_equal(read_answered(100, 40), 40); /* past the end: short, as documented */
	assert_int_equal(read_answered(100, 101), -EIO);
	assert_int_equal(read_answered(100, -ENOENT), -ENOENT);
}
#else
static void test_read_count_bounded(void **state)
{
	(void)state;
	skip();
}
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_read_count_bounded)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
