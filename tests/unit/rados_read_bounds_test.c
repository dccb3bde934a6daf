/*
 * rados_read_bounds_test.c - src/tier_rados.c's accounting of a read segment's answer,
 * without a cluster: the byte count librados reports for a segment is the cluster's word,
 * and a count above the bytes asked for must fail the read, never reach the caller as
 * the object's size (the engine verifies that many bytes of its buffer). A reply longer
 * than the segment is refused by the read op's handler, which copies nothing and reports
 * -ERANGE in the read step's result: the read fails -EIO (a completion made here, with no
 * cluster, stands for librados' answer). That the handler refuses it is librados' own
 * (C_bl_to_buf); the real reads are tests/integ/tier_rados.c's.
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

static struct kvt_tier t;
static struct rados_state s;

/* One read of one segment of len bytes, answered with rc and n bytes. */
static int64_t read_answered(uint64_t len, int rc, size_t n)
{
	s.t = &t;
	s.timeout_ns = 1000000000ULL;
	struct rados_op *op = op_new(&s, OP_READ, 1, 1, cb, NULL);
	assert_non_null(op);
	op->subs[0].len = len;
	op->subs[0].got = n;
	calls = 0;
	sub_done(&op->subs[0], rc);
	assert_int_equal(calls, 1);
	return got;
}

/* The same through the completion handler: the op's result 0 (a fresh completion's), the
 * read step's result prval, n bytes. */
static int64_t read_completed(uint64_t len, int prval, size_t n)
{
	s.t = &t;
	s.timeout_ns = 1000000000ULL;
	s.max_inflight = 4;
	s.inflight = 1;
	struct rados_op *op = op_new(&s, OP_READ, 1, 1, cb, NULL);
	assert_non_null(op);
	struct rados_sub *u = &op->subs[0];
	u->len = len;
	u->got = n;
	u->prval = prval;
	u->rop = rados_create_read_op(); /* released by the handler */
	assert_non_null(u->rop);
	rados_completion_t c;
	assert_int_equal(rados_aio_create_completion2(u, on_complete, &c), 0);
	calls = 0;
	on_complete(c, u);
	assert_int_equal(calls, 1);
	return got;
}

static void test_read_count_bounded(void **state)
{
	(void)state;
	assert_int_equal(read_answered(100, 0, 100), 100);
	assert_int_equal(read_answered(100, 0, 40), 40); /* past the end: short, as documented */
	assert_int_equal(read_answered(100, 0, 101), -EIO);
	assert_int_equal(read_answered(100, -ENOENT, 0), -ENOENT);
	/* no int in between: a segment past 2 GiB is counted whole */
	assert_int_equal(read_answered(3ULL << 30, 0, (size_t)3 << 30), (int64_t)3 << 30);
	assert_int_equal(read_completed(100, 0, 100), 100);
	/* the reply was longer than the segment: librados copied nothing */
	assert_int_equal(read_completed(100, -ERANGE, 0), -EIO);
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
