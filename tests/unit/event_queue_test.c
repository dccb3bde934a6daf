/*
 * event_queue_test.c - the bounded event queue (src/event_queue.c): events come out in
 * the order they went in, across the ring's wrap; a full queue drops new events and says
 * how many; a drain smaller than the queue leaves the rest; capacity is bounded; and the
 * queue installed on a real store receives its DRAM events.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvtier.h"

static struct kvt_event ev(uint32_t i)
{
	struct kvt_event e = {.type = KVT_EVENT_STORED, .tier = (int)(i % 3), .bytes = i};
	memcpy(e.key.bytes, &i, sizeof(i));
	return e;
}

static void test_order_wrap_and_loss(void **state)
{
	(void)state;
	assert_null(kvt_event_queue_new(0));
	assert_null(kvt_event_queue_new((1u << 24) + 1));
	struct kvt_event_queue *q = kvt_event_queue_new(4);
	assert_non_null(q);
	struct kvt_event out[8];
	uint64_t lost = 99;
	assert_int_equal(kvt_event_queue_drain(q, out, 8, &lost), 0);
	assert_int_equal(lost, 0);
	uint32_t next_in = 0, next_out = 0, queued = 0, dropped = 0;
	for (int round = 0; round < 5; round++) { /* 3 in, 2 out: the ring wraps, fills */
		for (int i = 0; i < 3; i++) {
			struct kvt_event e = ev(next_in);
			kvt_event_queue_push(q, &e);
			if (queued < 4) { /* room: 4 slots */
				queued++;
				next_in++;
			} else {
				dropped++;
			}
		}
		uint32_t n = kvt_event_queue_drain(q, out, 2, &lost);
		assert_int_equal(n, 2);
		assert_int_equal(lost, dropped); /* the drops since the last drain */
		dropped = 0;
		queued -= n;
		for (uint32_t i = 0; i < n; i++, next_out++)
			assert_int_equal(out[i].bytes, next_out);
	}
	uint32_t n = kvt_event_queue_drain(q, out, 8, &lost);
	assert_int_equal(n, queued);
	for (uint32_t i = 0; i < n; i++, next_out++)
		assert_int_equal(out[i].bytes, next_out);
	assert_int_equal(next_out, next_in);
	assert_true(next_in < 15); /* some were dropped */
	assert_int_equal(kvt_event_queue_drain(q, out, 8, &lost), 0);
	assert_int_equal(lost, 0);
	for (uint32_t i = 0; i < 7; i++) {
		struct kvt_event e = ev(100 + i);
		kvt_event_queue_push(q, &e);
	}
	assert_int_equal(kvt_event_queue_drain(q, out, 8, &lost), 4);
	assert_int_equal(lost, 3);
	assert_int_equal(out[0].bytes, 100);
	assert_int_equal(out[3].bytes, 103);
	kvt_event_queue_free(q);
	kvt_event_queue_free(NULL);
}

/* A store of one DRAM tier of `bytes` (its config in *cfg, the caller's to destroy). */
static struct kvt_store *dram_store(const char *bytes, struct kvt_config **cfg)
{
	assert_int_equal(kvt_config_create(cfg), 0);
	char err[256];
	const char *kv[][2] = {{"store.tiers", "dram"}, {"dram.bytes", bytes},
			       {"dram.hugepages", "false"}, {"model.layers", "2"},
			       {"model.kv_heads", "2"},     {"model.head_dim", "64"}};
	for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
		assert_int_equal(kvt_config_set(*cfg, kv[i][0], kv[i][1], err, sizeof(err)), 0);
	struct kvt_store *s;
	assert_int_equal(kvt_store_open(*cfg, &s), 0);
	return s;
}

static void test_on_a_store(void **state)
{
	(void)state;
	struct kvt_config *cfg;
	struct kvt_store *s = dram_store("4MiB", &cfg);
	struct kvt_event_queue *q = kvt_event_queue_new(16);
	assert_int_equal(kvt_store_set_events(s, kvt_event_queue_push, q), 0);
	size_t len = kvt_payload_bytes(kvt_store_geometry(s), kvt_store_geometry(s)->chunk_tokens);
	void *buf = calloc(1, len);
	struct kvt_key k = {{1, 2, 3}};
	assert_int_equal(kvt_put_sync(s, &k, NULL, kvt_store_geometry(s)->chunk_tokens, buf, len), 0);
	struct kvt_key sk;
	kvt_storage_key(kvt_store_ns_id(s), &k, &sk);
	struct kvt_event out[16];
	uint64_t lost;
	uint32_t n = kvt_event_queue_drain(q, out, 16, &lost);
	assert_int_equal(n, 1);
	assert_int_equal(lost, 0);
	assert_int_equal(out[0].type, KVT_EVENT_STORED);
	assert_memory_equal(out[0].key.bytes, sk.bytes, KVT_KEY_BYTES);
	kvt_store_close(s);
	kvt_event_queue_free(q); /* after the close: no library thread pushes any more */
	kvt_config_destroy(cfg);
	free(buf);
}

struct toggler {
	struct kvt_store *s;
	struct kvt_event_queue *q;
	atomic_bool stop;
	unsigned flips;
};

static void *toggle(void *arg)
{
	struct toggler *t = arg;
	while (!atomic_load(&t->stop)) {
		assert_int_equal(kvt_store_set_events(t->s, kvt_event_queue_push, t->q), 0);
		assert_int_equal(kvt_store_set_events(t->s, NULL, NULL), 0);
		t->flips++;
	}
	return NULL;
}

/* The callback removed and installed again while puts and evictions raise events on
 * another thread: fn and arg were two atomics, so a thread could load the old fn and then
 * the removal's NULL arg, and called kvt_event_queue_push(NULL, ...) (a crash). */
static void test_removed_while_events_flow(void **state)
{
	(void)state;
	struct kvt_config *cfg;
	struct kvt_store *s = dram_store("2MiB", &cfg);
	struct toggler t = {.s = s, .q = kvt_event_queue_new(1024)};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, toggle, &t), 0);
	uint32_t tokens = kvt_store_geometry(s)->chunk_tokens;
	size_t len = kvt_payload_bytes(kvt_store_geometry(s), tokens);
	void *buf = calloc(1, len);
	for (uint32_t i = 0; i < 20000; i++) { /* each put past the pool's size evicts one */
		struct kvt_key k = {{0}};
		memcpy(k.bytes, &i, sizeof(i));
		assert_int_equal(kvt_put_sync(s, &k, NULL, tokens, buf, len), 0);
	}
	atomic_store(&t.stop, true);
	pthread_join(th, NULL);
	struct kvt_event out[64];
	uint64_t lost, seen = 0;
	uint32_t n;
	while ((n = kvt_event_queue_drain(t.q, out, 64, &lost)) > 0)
		seen += n;
	assert_true(t.flips > 0 && seen + lost > 0);
	kvt_store_close(s);
	kvt_event_queue_free(t.q);
	kvt_config_destroy(cfg);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_wrap_and_loss),
		cmocka_unit_test(test_on_a_store),
		cmocka_unit_test(test_removed_while_events_flow),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
