/*
 * bench.h - shared pieces of `kvtier bench`: one phase's figures, latency samples, and the
 * reference runners of bench_ref.c (one per storage system).
 */
#ifndef KVT_BENCH_H
#define KVT_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "internal.h"

struct phase_result {
	double read_gibps, write_gibps, read_iops, write_iops;
	double read_p50, read_p99, read_p999, write_p50, write_p99, write_p999; /* µs */
	/* fio --fdatasync=1 times each fdatasync apart from its write (its "sync" latency);
	 * kvtier's write latency includes it. 0 when there is none. µs. */
	double sync_p50, sync_p99;
	uint64_t errors;
};

struct lat {
	double *v;
	size_t n, cap;
};

void lat_add(struct lat *l, double us);
void lat_sort(struct lat *l);
/* p-th percentile (0-100) of sorted samples: kvt__percentile (src/util.c) on l's. */
double lat_pct(struct lat *l, double p);

static inline uint64_t bench_rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* References, each measured with the same object size, objects in flight and mix.
 * 0 or -errno. */
void bench_ref_memcpy(size_t chunk, size_t n_bufs, unsigned qd, double seconds, int read_pct,
		      struct phase_result *out);
/* fio's file set (dir/fio-ref, one file of bs bytes per object, written in full) is laid
 * out once per run and removed at its end; each measurement overwrites it in place. */
int bench_ref_fio_layout(const char *dir, size_t bs, size_t n_files);
void bench_ref_fio_remove(const char *dir);
/* How the fio reference makes its writes durable: not at all; --fdatasync=1 (an
 * fdatasync after each write, issued as an I/O of its own in the iodepth, the issue's
 * reference); --sync=dsync (each write durable when it completes: kvtier's guarantee). */
enum ref_sync { REF_SYNC_NONE, REF_SYNC_FDATASYNC, REF_SYNC_DSYNC };
int bench_ref_fio(const char *dir, size_t bs, size_t n_files, unsigned qd, double ramp,
		  double seconds, int read_pct, enum ref_sync sync, struct phase_result *out);
/* -EPERM: the URL has a password, which redis-benchmark would show on its command line. */
/* threads: the client's threads, the tier's I/O threads (redis.connections). */
int bench_ref_redis(const char *url, size_t bs, size_t n_keys, unsigned qd, unsigned threads,
		    double seconds, int read_pct, struct phase_result *out);
int bench_ref_s3(const char *endpoint, const char *bucket, const char *region, size_t bs,
		 size_t n_keys, unsigned qd, double ramp, double seconds, int read_pct,
		 struct phase_result *out);
/* Reads go over the set bench_ref_rados_layout wrote (once per run, untimed, n_objs =
 * the tier's working set; rados bench would read what its write phase made, a larger
 * set); bench_ref_rados_remove removes it. */
int bench_ref_rados_layout(const char *pool, size_t bs, size_t n_objs, unsigned qd);
void bench_ref_rados_remove(const char *pool);
int bench_ref_rados(const char *pool, size_t bs, unsigned qd, double seconds, int read_pct,
		    struct phase_result *out);

/* mkdir -p path (each missing component with mode). 0 or -errno. */
int bench_mkdirs(const char *path, mode_t mode);

/* `kvtier bench --workload mlperf-kv` (bench_mlperf.c): the whole command. Exit code. */
int kvt_bench_mlperf(int argc, char **argv);

#endif
