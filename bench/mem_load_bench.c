/*
 * mem_load_bench.c - a memory load beside another benchmark: memcpy of 32 MiB buffers for
 * a share of each 10 ms (the duty), for a number of seconds, then one summary line with
 * the rate it copied. Why: on a virtual machine whose disk is emulated by a host process,
 * the guest's own copying can slow the "device" (docs/BENCHMARKS.md, "The machine");
 * running fio next to this load measures how much, with no kvtier code involved.
 *
 *   mem_load_bench SECONDS [DUTY 0..1, default 1]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile unsigned sink; /* keeps the copies from being optimised away */

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 5, duty = argc > 2 ? atof(argv[2]) : 1;
	if (!(secs > 0) || !(duty > 0) || duty > 1) {
		fprintf(stderr, "usage: mem_load_bench SECONDS [DUTY 0..1]\n");
		return 2;
	}
	size_t n = (size_t)32 << 20;
	char *a = malloc(n), *b = malloc(n);
	if (!a || !b)
		return 1;
	memset(a, 1, n);
	memset(b, 2, n);
	double t0 = now_s();
	unsigned long copies = 0;
	while (now_s() - t0 < secs) {
		double s = now_s();
		while (now_s() - s < 0.01 * duty) {
			memcpy(b, a, n);
			sink += (unsigned char)b[copies % n];
			copies++;
		}
		struct timespec idle = {0, (long)(1e7 * (1 - duty))};
		if (idle.tv_nsec > 0)
			nanosleep(&idle, NULL);
	}
	printf("mem_load_bench: seconds=%.1f duty=%.2f copied_GBps=%.1f\n", secs, duty,
	       (double)copies * (double)n / 1e9 / secs);
	free(a);
	free(b);
	return 0;
}
