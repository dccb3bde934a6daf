/*
 * nvme_budget_test.c - the NVMe tier's daily write budget (src/tier_nvme_budget.c) on a
 * clock the test moves: charges refused over the budget, hours rolling off after a day,
 * a clock stepped back (re-dating, not a refusal until it catches up), refunds, and the
 * saved file read back by a restart. The integration test (integ.nvme_budget) covers the
 * budget through the tier; this one covers time, which it cannot move.
 * kvt-test-labels: onethread (no second thread, so nothing for TSan to check: scripts/test.sh
 * leaves it out of the TSan pass)
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tier_nvme_internal.h"

static uint64_t fake_hour;

static uint64_t test_clock(void)
{
	return fake_hour;
}

struct fixture {
	char dir[64];
	struct nv_dir d;
	struct nv *s;
};

static struct nv *budget_state(struct fixture *f, uint64_t budget)
{
	struct nv *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	pthread_mutex_init(&s->block, NULL);
	s->budget = budget;
	s->clock_hour = test_clock;
	s->bucket_hour = fake_hour;
	s->dirs = &f->d;
	s->ndirs = 1;
	s->pid = getpid();
	s->file_mode = 0600;
	return s;
}

static void free_state(struct nv *s)
{
	pthread_mutex_destroy(&s->block);
	free(s);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/kvt-budget-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	f->d.path = f->dir;
	f->d.fd = open(f->dir, O_RDONLY | O_DIRECTORY);
	fake_hour = 500000; /* an hour in 2027 */
	*state = f;
	return f->d.fd < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	unlinkat(f->d.fd, NV_BUDGET_NAME, 0);
	close(f->d.fd);
	rmdir(f->dir);
	free(f);
	return 0;
}

static void test_refuse_and_roll_off(void **state)
{
	struct fixture *f = *state;
	struct nv *s = budget_state(f, 100);
	uint32_t h = 0;
	assert_int_equal(nv_budget_take(s, 60, &h), 0);
	assert_int_equal(h, (uint32_t)fake_hour);
	assert_int_equal(nv_budget_take(s, 50, &h), -EDQUOT); /* 110 > 100 */
	assert_int_equal(s->budget_used, 60);
	fake_hour += 10;
	assert_int_equal(nv_budget_take(s, 40, &h), 0); /* 100: exactly the budget */
	assert_int_equal(nv_budget_take(s, 1, &h), -EDQUOT);
	/* 24 h after the first charge it has rolled off; the second is still counted. */
	fake_hour += 14;
	assert_int_equal(nv_budget_take(s, 60, &h), 0);
	assert_int_equal(s->budget_used, 100);
	assert_int_equal(nv_budget_take(s, 1, &h), -EDQUOT);
	/* A day after the last charge nothing is left. */
	fake_hour += 24;
	assert_int_equal(nv_budget_take(s, 100, &h), 0);
	assert_int_equal(s->budget_used, 100);
	free_state(s);
}

static void test_refund(void **state)
{
	struct fixture *f = *state;
	struct nv *s = budget_state(f, 100);
	uint32_t h = 0;
	assert_int_equal(nv_budget_take(s, 80, &h), 0);
	nv_budget_refund(s, 80, h); /* the write never reached the media */
	assert_int_equal(s->budget_used, 0);
	assert_int_equal(nv_budget_take(s, 100, &h), 0);
	/* A refund for an hour that has rolled off takes nothing back (no underflow). */
	fake_hour += 30;
	nv_budget_roll(s, fake_hour);
	assert_int_equal(s->budget_used, 0);
	nv_budget_refund(s, 100, h);
	assert_int_equal(s->budget_used, 0);
	assert_int_equal(nv_budget_take(s, 100, &h), 0);
	assert_int_equal(s->budget_used, 100);
	free_state(s);
}

static void test_clock_stepped_back(void **state)
{
	struct fixture *f = *state;
	struct nv *s = budget_state(f, 100);
	uint32_t h = 0;
	assert_int_equal(nv_budget_take(s, 70, &h), 0);
	fake_hour -= 48; /* the clock jumps two days back */
	/* Re-dated, not forgotten and not frozen: still counted now... */
	assert_int_equal(nv_budget_take(s, 40, &h), -EDQUOT);
	assert_int_equal(s->bucket_hour, fake_hour);
	assert_int_equal(nv_budget_take(s, 30, &h), 0);
	/* ... and gone a day later on the new clock, not two days after that. */
	fake_hour += 24;
	assert_int_equal(nv_budget_take(s, 100, &h), 0);
	free_state(s);
}

static void test_saved_across_restart(void **state)
{
	struct fixture *f = *state;
	struct nv *s = budget_state(f, 100);
	uint32_t h = 0;
	assert_int_equal(nv_budget_take(s, 30, &h), 0);
	fake_hour += 2;
	assert_int_equal(nv_budget_take(s, 45, &h), 0);
	nv_budget_save(s);
	free_state(s);

	fake_hour += 1;
	struct nv *r = budget_state(f, 100);
	nv_budget_load(r);
	assert_int_equal(r->budget_used, 75);
	assert_int_equal(nv_budget_take(r, 26, &h), -EDQUOT);
	assert_int_equal(nv_budget_take(r, 25, &h), 0);
	/* The first charge rolls off 24 h after its hour, the second two hours later. */
	fake_hour += 21;
	assert_int_equal(nv_budget_take(r, 30, &h), 0);
	assert_int_equal(nv_budget_take(r, 1, &h), -EDQUOT);
	free_state(r);

	/* A file dated in the future (the clock stepped back since) is counted from now. */
	fake_hour -= 100;
	struct nv *b = budget_state(f, 100);
	nv_budget_load(b);
	assert_int_equal(b->bucket_hour, fake_hour);
	assert_true(b->budget_used > 0);
	free_state(b);

	/* A file whose buckets add up past 2^64: the budget is spent, not open again (the sum
	 * wrapped to 6 and a charge of 50 was taken, until 2026-12-06). */
	char text[1024];
	int n = snprintf(text, sizeof(text), "kvtier-budget-v1 %llu 18446744073709551610 12",
			 (unsigned long long)fake_hour);
	for (int i = 2; i < NV_BUCKETS; i++)
		n += snprintf(text + n, sizeof(text) - (size_t)n, " 0");
	n += snprintf(text + n, sizeof(text) - (size_t)n, "\n");
	int fd = openat(f->d.fd, NV_BUDGET_NAME, O_WRONLY | O_TRUNC | O_CREAT, 0600);
	assert_true(fd >= 0 && write(fd, text, (size_t)n) == n);
	close(fd);
	struct nv *w = budget_state(f, 100);
	nv_budget_load(w);
	assert_int_equal(nv_budget_take(w, 50, &h), -EDQUOT);
	assert_true(w->budget_used >= 100);
	free_state(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_refuse_and_roll_off, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refund, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_clock_stepped_back, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_saved_across_restart, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
