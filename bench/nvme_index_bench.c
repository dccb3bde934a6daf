/*
 * nvme_index_bench.c - what the NVMe tier's in-memory index (src/tier_nvme_index.c) costs
 * its ring thread as a store fills: the time of each insert, the worst of them, and the
 * inserts past 1 ms (the table growing), then the time of a lookup. Why: the index's hash
 * table grows by doubling; rehashed in one step, each doubling stops every read and write
 * of the tier for as long as a walk over every entry takes - at millions of objects (a
 * few hundred GiB of 64 KiB chunks) a stall an inference server sees as an outage.
 *
 *   nvme_index_bench [entries]   (default 4,194,304; ~1 GiB of memory)
 *
 * prints one summary line "nvme_index_bench: ...". No reference: the figure is the worst
 * single insert, against the mean (what a steady insert costs).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tier_nvme_internal.h"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void key_of(uint64_t i, struct kvt_key *k)
{
	/* splitmix64 over i, spread over the key as a chunk hash would be */
	memset(k, 0, sizeof(*k));
	for (int w = 0; w < 4; w++) {
		uint64_t z = i * 4 + (uint64_t)w + 0x9e3779b97f4a7c15u;
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
		z ^= z >> 31;
		memcpy(k->bytes + 8 * w, &z, 8);
	}
}

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 4194304u;
	struct nv *s = calloc(1, sizeof(*s));
	if (s)
		pthread_mutex_init(&s->ilock, NULL);
	if (!s || nv_index_init(s) < 0) {
		fprintf(stderr, "nvme_index_bench: out of memory\n");
		return 1;
	}
	uint64_t worst = 0, worst_at = 0, over_1ms = 0, total = 0;
	for (uint64_t i = 0; i < n; i++) {
		struct kvt_key k;
		key_of(i, &k);
		uint64_t t0 = now_ns();
		struct nv_ent *e = nv_ent_insert(s, &k, 0, 65536);
		uint64_t dt = now_ns() - t0;
		if (!e) {
			fprintf(stderr, "nvme_index_bench: out of memory at %llu\n",
				(unsigned long long)i);
			return 1;
		}
		total += dt;
		if (dt > worst) {
			worst = dt;
			worst_at = i;
		}
		if (dt > 1000000u)
			over_1ms++;
	}
	/* lookups of present keys, in another order than their inserts */
	uint64_t t0 = now_ns(), found = 0, m = n < 1000000u ? n : 1000000u;
	for (uint64_t i = 0; i < m; i++) {
		struct kvt_key k;
		key_of((i * 2654435761u) % n, &k);
		found += nv_ent_find(s, &k) != NULL;
	}
	uint64_t lookup = (now_ns() - t0) / (m ? m : 1);
	if (found != m) {
		fprintf(stderr, "nvme_index_bench: %llu of %llu keys not found\n",
			(unsigned long long)(m - found), (unsigned long long)m);
		return 1;
	}
	printf("nvme_index_bench: %llu entries, insert mean %llu ns, worst %.2f ms (insert %llu), "
	       "%llu inserts over 1 ms, lookup %llu ns\n",
	       (unsigned long long)n, (unsigned long long)(total / n), worst / 1e6,
	       (unsigned long long)worst_at, (unsigned long long)over_1ms,
	       (unsigned long long)lookup);
	return 0;
}
