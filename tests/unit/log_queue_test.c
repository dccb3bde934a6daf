/*
 * log_queue_test.c - the bounded log queue (src/log_queue.c): lines come out in the order
 * they went in, with their levels, across the ring's wrap; a full queue drops new lines and
 * says how many; a line longer than the caller's buffer is cut, not overrun; the eventfd is
 * readable exactly while lines wait; and, installed on a real store whose tier misses its
 * deadline, it receives the service thread's warning.
 */
#include <poll.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvtier.h"

static bool readable(const struct kvt_log_queue *q)
{
	struct pollfd p = {.fd = kvt_log_queue_fd(q), .events = POLLIN};
	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static void test_order_loss_and_fd(void **state)
{
	(void)state;
	assert_null(kvt_log_queue_new(0));
	assert_null(kvt_log_queue_new((1u << 16) + 1));
	struct kvt_log_queue *q = kvt_log_queue_new(3);
	assert_non_null(q);
	char buf[600];
	int level = -1;
	uint64_t lost = 99;
	assert_false(readable(q));
	assert_int_equal(kvt_log_queue_pop(q, &level, buf, sizeof(buf), &lost), 0);
	assert_int_equal(lost, 0);
	unsigned in = 0, out = 0;
	for (int round = 0; round < 4; round++) { /* 2 in, 1 out: the ring wraps, then fills */
		for (int i = 0; i < 2; i++, in++) {
			char line[32];
			snprintf(line, sizeof(line), "line %u", in);
			kvt_log_queue_push(q, (int)(in % 4), line);
		}
		assert_true(readable(q));
		assert_int_equal(kvt_log_queue_pop(q, &level, buf, sizeof(buf), &lost), 1);
		char want[32];
		snprintf(want, sizeof(want), "line %u", out);
		assert_string_equal(buf, want);
		assert_int_equal(level, (int)(out % 4));
		out++;
		if (round == 2)
			assert_int_equal(lost, 1); /* 3 slots: the 6th line found the queue full */
	}
	/* drain: 0 when empty, and the fd is no longer readable until the next push */
	int n = 0;
	while (kvt_log_queue_pop(q, &level, buf, sizeof(buf), &lost) == 1)
		n++;
	assert_int_equal(n, 2);
	assert_false(readable(q));
	kvt_log_queue_push(q, 1, "again");
	assert_true(readable(q));
	/* a buffer shorter than the line: cut and terminated */
	char small[4];
	assert_int_equal(kvt_log_queue_pop(q, &level, small, sizeof(small), NULL), 1);
	assert_string_equal(small, "aga");
	/* a line longer than a slot is cut at the slot, not beyond */
	char big[2000];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	kvt_log_queue_push(q, 0, big);
	kvt_log_queue_push(q, 0, NULL);
	assert_int_equal(kvt_log_queue_pop(q, &level, buf, sizeof(buf), NULL), 1);
	assert_true(strlen(buf) < 512 && strlen(buf) > 400);
	assert_int_equal(kvt_log_queue_pop(q, &level, buf, sizeof(buf), NULL), 1);
	assert_string_equal(buf, "");
	kvt_log_queue_free(q);
	kvt_log_queue_free(NULL);
}

static void test_a_missed_deadline_on_a_store(void **state)
{
	(void)state;
	char dir[] = "/tmp/kvt_logq_XXXXXX";
	assert_non_null(mkdtemp(dir));
	struct kvt_log_queue *q = kvt_log_queue_new(64);
	struct kvt_config *cfg;
	assert_int_equal(kvt_config_create(&cfg), 0);
	kvt_config_set_log(cfg, kvt_log_queue_push, q, 1);
	char err[256];
	const char *kv[][2] = {{"store.tiers", "faulty"}, {"faulty.inner", "fs"},
			       {"fs.dir", dir},           {"faulty.delay_ms", "3000"},
			       {"store.tier_timeout_ms", "100"}, {"model.layers", "2"},
			       {"model.kv_heads", "2"},   {"model.head_dim", "64"}};
	for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
		assert_int_equal(kvt_config_set(cfg, kv[i][0], kv[i][1], err, sizeof(err)), 0);
	struct kvt_store *s;
	assert_int_equal(kvt_store_open(cfg, &s), 0);
	struct kvt_key k = {{7, 7, 7}};
	int8_t tier = 9;
	(void)kvt_lookup_sync(s, &k, 1, &tier); /* answered at its deadline, as a miss */
	assert_true(readable(q));
	char buf[600];
	int level = -1;
	bool seen = false;
	while (kvt_log_queue_pop(q, &level, buf, sizeof(buf), NULL) == 1)
		if (strstr(buf, "missed its deadline") && level == 1)
			seen = true;
	assert_true(seen);
	kvt_store_close(s);
	kvt_log_queue_free(q); /* after the close: no library thread pushes any more */
	kvt_config_destroy(cfg);
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_loss_and_fd),
		cmocka_unit_test(test_a_missed_deadline_on_a_store),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
