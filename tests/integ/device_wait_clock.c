/*
 * device_wait_clock.c - a device op's timed waits run on the monotonic clock: with the
 * wall clock read SKEW_S seconds ahead (as when it is stepped back during the wait),
 * kvt_device_op_wait_layer / kvt_device_op_wait with a 100 ms timeout still answer
 * -ETIMEDOUT after about 100 ms. clock_gettime is interposed here (the library's calls
 * bind to this one); the kernel's wall clock, which a CLOCK_REALTIME condvar deadline is
 * compared with, is not skewed, so a wall-clock deadline would wait SKEW_S s longer.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../unit/device_common.h"

#define SKEW_S 6
#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "device_wait_clock: %s:%d: check failed: %s\n", __FILE__,  \
				__LINE__, #c);                                                     \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static volatile int skew;

int clock_gettime(clockid_t id, struct timespec *ts)
{
	static int (*real)(clockid_t, struct timespec *);
	if (!real)
		real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
	int rc = real(id, ts);
	if (!rc && id == CLOCK_REALTIME && skew)
		ts->tv_sec += SKEW_S;
	return rc;
}

static double mono_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

int main(void)
{
	struct kvt_geometry g = {.layers = 2,
				 .kv_heads = 4,
				 .head_dim = 8,
				 .chunk_tokens = 32,
				 .dtype = KVT_DTYPE_BF16,
				 .kind = KVT_KIND_KV};
	struct tr_rank r;
	CHECK(tr_rank_open(&r, NULL, &g, KVT_LAYOUT_FLASH_ATTN, 16, 4, 0, 4, 0, NULL) == 0);
	size_t len = kvt_object_bytes(&g, 32);
	void *obj = malloc(len);
	uint32_t ids[2] = {0, 1};
	struct kvt_emu_event *ev;
	CHECK(kvt_emu_event_create(&ev) == 0);
	struct kvt_device_dep dep = {KVT_DEP_EMU_EVENT, ev};
	struct kvt_device_op *op;
	CHECK(kvt_device_gather(r.dev, ids, 2, 32, obj, len, &dep, &op) == 0); /* held back */
	skew = 1;
	double t0 = mono_s();
	int wl = kvt_device_op_wait_layer(op, 0, 100);
	double t1 = mono_s();
	int w = kvt_device_op_wait(op, 100);
	double t2 = mono_s();
	skew = 0;
	printf("  wall clock %d s ahead: wait_layer(100 ms) = %d after %.3f s, wait(100 ms) = %d "
	       "after %.3f s\n",
	       SKEW_S, wl, t1 - t0, w, t2 - t1);
	CHECK(wl == -ETIMEDOUT && w == -ETIMEDOUT);
	CHECK(t1 - t0 >= 0.09 && t1 - t0 < SKEW_S / 2.0);
	CHECK(t2 - t1 >= 0.09 && t2 - t1 < SKEW_S / 2.0);
	kvt_emu_event_signal(ev);
	CHECK(kvt_device_op_wait(op, 10000) == 0);
	kvt_device_op_free(op);
	tr_rank_close(&r);
	kvt_emu_event_destroy(ev);
	free(obj);
	printf("device_wait_clock: ok\n");
	return 0;
}
