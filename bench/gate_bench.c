/*
 * gate_bench.c - what the call gate costs (src/engine.c: every public call on a store adds
 * one to s->callers, checks closing, and subtracts one again: two sequentially consistent
 * atomics on one shared cache line). It times, on a DRAM-only store holding one chunk:
 *   - kvt_store_tier_count: the gate and one field read, so all but the read is the gate;
 *   - kvt_lookup_sync of that chunk: the cheapest call that does work (an index probe,
 *     a completion and a wait), for scale;
 * each on 1 thread, then on 2 threads at once (the shared line moving between cores is
 * what a second caller adds). Best of 5 rounds of N calls per thread.
 *
 * CMake has no bench target; it uses only the public API, so build it by hand against the
 * shared library:
 *   gcc -O2 -Iinclude bench/gate_bench.c -LBUILD -lkvtier -Wl,-rpath,$PWD/BUILD -lpthread \
 *       -o gate_bench
 * usage: gate_bench [calls per thread (default 2000000)]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvtier.h"

static struct kvt_store *s;
static struct kvt_key key;
static long calls;
static int what; /* 0 tier_count, 1 lookup_sync */
static pthread_barrier_t bar;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *run(void *arg)
{
	double *ns = arg;
	long sink = 0;
	pthread_barrier_wait(&bar);
	double t0 = now_s();
	for (long i = 0; i < calls; i++)
		sink += what ? kvt_lookup_sync(s, &key, 1, NULL) : kvt_store_tier_count(s);
	*ns = (now_s() - t0) * 1e9 / (double)calls;
	if (sink < 0)
		fprintf(stderr, "a call failed\n");
	return NULL;
}

static double best(int threads)
{
	double b = 1e18;
	for (int round = 0; round < 5; round++) {
		pthread_t th[2];
		double ns[2];
		pthread_barrier_init(&bar, NULL, (unsigned)threads);
		for (int i = 0; i < threads; i++)
			pthread_create(&th[i], NULL, run, &ns[i]);
		for (int i = 0; i < threads; i++)
			pthread_join(th[i], NULL);
		pthread_barrier_destroy(&bar);
		for (int i = 0; i < threads; i++)
			b = ns[i] < b ? ns[i] : b;
	}
	return b;
}

int main(int argc, char **argv)
{
	calls = argc > 1 ? strtol(argv[1], NULL, 0) : 2000000;
	struct kvt_config *c;
	char err[256];
	if (kvt_config_create(&c) || kvt_config_set(c, "store.tiers", "dram", err, sizeof(err)) ||
	    kvt_config_set(c, "dram.bytes", "64MiB", err, sizeof(err)) ||
	    kvt_config_set(c, "model.layers", "2", err, sizeof(err)) ||
	    kvt_store_open(c, &s)) {
		fprintf(stderr, "gate_bench: cannot open a DRAM store\n");
		return 1;
	}
	kvt_config_destroy(c);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t len = kvt_payload_bytes(g, g->chunk_tokens);
	void *buf = calloc(1, len);
	memset(key.bytes, 7, sizeof(key.bytes));
	if (!buf || kvt_put_sync(s, &key, NULL, g->chunk_tokens, buf, len) < 0) {
		fprintf(stderr, "gate_bench: put failed\n");
		return 1;
	}
	what = 0;
	double a1 = best(1), a2 = best(2);
	long c0 = calls;
	calls = c0 / 10;
	what = 1;
	double l1 = best(1), l2 = best(2);
	printf("gate_bench calls=%ld tier_count_ns=%.1f tier_count_2threads_ns=%.1f "
	       "lookup_sync_ns=%.1f lookup_sync_2threads_ns=%.1f\n",
	       c0, a1, a2, l1, l2);
	kvt_store_close(s);
	free(buf);
	return 0;
}
