/*
 * device_store_pageable.c - a TP rank whose gather blocks in submit does not hold the other
 * ranks of its process out. With CUDA and a DRAM pool it has not pinned, a gather's
 * cudaMemcpyAsync returns only once the copy, and so the engine's dependency, is complete
 * (the emu backend does the same with device.emu_pageable). Rank A's dependency stands for
 * a collective: it completes only once rank B's kvt_device_store for the same key has
 * returned. kvt_device_store used to submit under the process-wide partial-object lock, so
 * B waited on that lock for A, and A on B: both hung. Now B returns, A's copy runs, and the
 * object is published whole.
 *
 * A submit that fails after the lock was let go gives its claim back under the lock: when
 * another rank's copy failed meanwhile and this was the object's last writer, it cancels
 * the object, as that last writer's completion would have (a left-over entry would answer
 * every store of the key with the old error until it expired, 60 s on). The failures are
 * injected by wrapping the emu backend's submit (it never fails by itself).
 *
 * A watchdog bounds every wait (a hang fails with a message, it does not stall ctest).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../unit/device_common.h"
#include "engine.h" /* kvt__dev_store_partials */

#define DSO_TEST "device_store_pageable" /* CHECK's messages start with it */
#include "lib/device_store_open.h"

#define WATCHDOG_MS 5000

/* One rank's kvt_device_store on its own thread; signal (B: the collective's part) is
 * signalled once the call has returned. */
struct rank_call {
	struct tr_rank *r;
	struct kvt_store *s;
	const struct kvt_key *key;
	uint32_t n, nblk;
	const uint32_t *ids;
	const struct kvt_device_dep *dep;
	struct kvt_emu_event *signal;
	struct tr_done done;
	struct kvt_device_op *op;
	int rc;
	atomic_bool returned;
};

static void *rank_main(void *arg)
{
	struct rank_call *c = arg;
	struct kvt_key parent = {{0}};
	c->rc = kvt_device_store(c->r->dev, c->s, c->key, &parent, c->n, c->ids, c->nblk, c->dep,
				 tr_on_done, &c->done, &c->op);
	atomic_store(&c->returned, true);
	if (c->signal)
		kvt_emu_event_signal(c->signal);
	return NULL;
}

/* Wait until both calls returned; a hang past the watchdog fails the test at once. */
static void wait_returned(struct rank_call *a, struct rank_call *b)
{
	for (int ms = 0; ms < WATCHDOG_MS; ms += 10) {
		if (atomic_load(&a->returned) && atomic_load(&b->returned))
			return;
		usleep(10000);
	}
	fprintf(stderr,
		"device_store_pageable: deadlock: after %d ms rank A's kvt_device_store has %s, "
		"rank B's (same key, which A's dependency waits for) has %s\n",
		WATCHDOG_MS, atomic_load(&a->returned) ? "returned" : "not returned",
		atomic_load(&b->returned) ? "returned" : "not returned");
	_exit(1);
}

/* Injected failures. Rank A's submit fails, but only once rank B's copy has failed while
 * A's claim was out; rank B's copy fails on a thread of its own, as a backend's does. */
static struct kvt_dev_ops fail_after_b_ops, fail_async_ops;
static atomic_bool a_in_submit, b_failed;
static pthread_t b_fail_thread;

static int submit_fail_after_b(struct kvt_device_op *op)
{
	(void)op;
	atomic_store(&a_in_submit, true);
	for (int ms = 0; !atomic_load(&b_failed); ms += 10) {
		if (ms >= WATCHDOG_MS) {
			fprintf(stderr,
				"device_store_pageable: deadlock: rank B's copy did not "
				"fail within %d ms while rank A was in submit\n",
				WATCHDOG_MS);
			_exit(1);
		}
		usleep(10000);
	}
	return -EIO;
}

static void *b_fail_main(void *arg)
{
	kvt__dev_op_done(arg, -EIO);
	atomic_store(&b_failed, true);
	return NULL;
}

static int submit_fail_async(struct kvt_device_op *op)
{
	return -pthread_create(&b_fail_thread, NULL, b_fail_main, op);
}

int main(void)
{
	struct kvt_geometry g = dso_geometry(32);
	struct kvt_store *s = dso_open_store(&g, false, NULL);
	struct kvt_config *cfg;
	CHECK(kvt_config_create(&cfg) == 0);
	CHECK(kvt_config_set(cfg, "device.emu_pageable", "true", NULL, 0) == 0);
	uint64_t seed = 77;
	const uint32_t n = 50, bs = 16, nb = 10, nblk = 4;
	struct kvt_key key;
	tr_fill(&seed, key.bytes, sizeof(key.bytes));
	size_t plen = g.layers * kvt_layer_bytes(&g, n);
	uint8_t *logical = malloc(plen), *got = malloc(plen);
	CHECK(logical && got);
	tr_fill(&seed, logical, plen);

	struct tr_rank w[2];
	uint32_t ids[2][4];
	for (int i = 0; i < 2; i++) {
		CHECK(tr_rank_open(&w[i], cfg, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 4 * i, 4 * i + 4,
				   0, NULL) == 0);
		tr_shuffled_ids(&seed, nb, ids[i], nblk);
		tr_rank_load_logical(&w[i], logical, n, ids[i]);
	}
	struct kvt_emu_event *ev; /* A's engine event: complete once B has launched its part */
	CHECK(kvt_emu_event_create(&ev) == 0);
	struct kvt_device_dep dep = {KVT_DEP_EMU_EVENT, ev};
	struct rank_call a = {
	    .r = &w[0], .s = s, .key = &key, .n = n, .nblk = nblk, .ids = ids[0], .dep = &dep};
	struct rank_call b = {
	    .r = &w[1], .s = s, .key = &key, .n = n, .nblk = nblk, .ids = ids[1], .signal = ev};
	pthread_t ta, tb;
	CHECK(pthread_create(&ta, NULL, rank_main, &a) == 0);
	usleep(100000);			  /* A is in its call, its copy waiting on ev */
	CHECK(!atomic_load(&a.returned)); /* pageable: the gather's submit waits for its copy */
	CHECK(pthread_create(&tb, NULL, rank_main, &b) == 0);
	wait_returned(&a, &b);
	CHECK(pthread_join(ta, NULL) == 0 && pthread_join(tb, NULL) == 0);
	printf("  rank A blocked in its gather's submit, rank B's call for the same key: "
	       "both returned\n");
	CHECK(a.rc == 0 && b.rc == 0);
	/* The copy whose completion came first left the other's 4 heads missing; the other
	 * published. (B's copy ran first, but its completion is reported apart from its call's
	 * return, and may come after A's.) */
	int sa = kvt_device_op_wait(a.op, WATCHDOG_MS), sb = kvt_device_op_wait(b.op, WATCHDOG_MS);
	CHECK((sa == 0 && sb == 4) || (sa == 4 && sb == 0));
	kvt_device_op_free(a.op);
	kvt_device_op_free(b.op);
	poll_until(s, &a.done, 1);
	poll_until(s, &b.done, 1);
	CHECK(a.done.res.status == sa && b.done.res.status == sb);
	CHECK(kvt__dev_store_partials(s) == 0);
	CHECK(kvt_lookup_sync(s, &key, 1, NULL) == 1);
	struct kvt_result gr;
	CHECK(kvt_get_sync(s, &key, 0, 0, got, plen, &gr) == 0);
	CHECK(gr.n_tokens == n);
	CHECK(memcmp(got, logical, plen) == 0);

	/* A second key: A's submit fails after B's copy failed while A's claim was out. */
	struct kvt_key key2 = key;
	key2.bytes[0] ^= 1;
	const struct kvt_dev_ops *emu = w[0].dev->ops;
	fail_after_b_ops = *emu;
	fail_after_b_ops.submit = submit_fail_after_b;
	fail_async_ops = *emu;
	fail_async_ops.submit = submit_fail_async;
	w[0].dev->ops = &fail_after_b_ops;
	w[1].dev->ops = &fail_async_ops;
	struct rank_call a2 = {
	    .r = &w[0], .s = s, .key = &key2, .n = n, .nblk = nblk, .ids = ids[0]};
	struct rank_call b2 = {
	    .r = &w[1], .s = s, .key = &key2, .n = n, .nblk = nblk, .ids = ids[1]};
	CHECK(pthread_create(&ta, NULL, rank_main, &a2) == 0);
	for (int ms = 0; !atomic_load(&a_in_submit); ms += 10) {
		CHECK(ms < WATCHDOG_MS);
		usleep(10000);
	}
	CHECK(pthread_create(&tb, NULL, rank_main, &b2) == 0);
	wait_returned(&a2, &b2);
	CHECK(pthread_join(ta, NULL) == 0 && pthread_join(tb, NULL) == 0);
	CHECK(pthread_join(b_fail_thread, NULL) == 0);
	CHECK(a2.rc == -EIO && a2.op == NULL);
	CHECK(b2.rc == 0);
	CHECK(kvt_device_op_wait(b2.op, WATCHDOG_MS) == -EIO);
	kvt_device_op_free(b2.op);
	poll_until(s, &b2.done, 1);
	CHECK(b2.done.res.status == -EIO);
	printf("  a submit failing after another rank's copy failed: %d half-written object(s) "
	       "left\n",
	       kvt__dev_store_partials(s));
	CHECK(kvt__dev_store_partials(s) == 0);
	/* so the key stores afresh (an entry left with the error would answer -EIO) */
	w[0].dev->ops = emu;
	w[1].dev->ops = emu;
	struct tr_done d2[2] = {{0}};
	struct kvt_key parent = {{0}};
	for (int i = 0; i < 2; i++) {
		CHECK(kvt_device_store(w[i].dev, s, &key2, &parent, n, ids[i], nblk, NULL,
				       tr_on_done, &d2[i], NULL) == 0);
		poll_until(s, &d2[i], 1);
	}
	CHECK(d2[0].res.status == 4 && d2[1].res.status == 0);
	memset(got, 0, plen);
	CHECK(kvt_get_sync(s, &key2, 0, 0, got, plen, &gr) == 0);
	CHECK(memcmp(got, logical, plen) == 0);

	for (int i = 0; i < 2; i++)
		tr_rank_close(&w[i]);
	kvt_emu_event_destroy(ev);
	kvt_config_destroy(cfg);
	kvt_store_close(s);
	free(logical);
	free(got);
	printf("device_store_pageable: ok\n");
	return 0;
}
