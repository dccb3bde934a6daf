/*
 * kvtierd.h - state shared by the daemon's files: the connection server (kvtierd.c) counts
 * what it does here, and the metrics endpoint (metrics.c) reads it.
 */
#ifndef KVTIERD_H
#define KVTIERD_H

#include <stdatomic.h>
#include <stdint.h>

#include "kvtier.h"

/* Latency of requests served, by operation: a Prometheus histogram. */
#define KVTD_HIST_BUCKETS 12
extern const double kvtd_hist_bounds[KVTD_HIST_BUCKETS]; /* seconds, ascending */
enum { KVTD_H_PUT, KVTD_H_GET, KVTD_H_LOOKUP, KVTD_H_OTHER, KVTD_H_N };
struct kvtd_hist {
	_Atomic uint64_t bucket[KVTD_HIST_BUCKETS + 1]; /* last: +Inf */
	_Atomic uint64_t count;
	_Atomic uint64_t sum_ns;
};

struct kvtd_state {
	struct kvt_store *store;
	_Atomic uint64_t connections, connections_total, ops_in_progress, regions_mapped,
		protocol_errors, refused;
	struct kvtd_hist hist[KVTD_H_N];
};

void kvtd_hist_record(struct kvtd_hist *h, uint64_t ns);

struct MHD_Daemon;
/* Serve GET /metrics on addr ("127.0.0.1:PORT", loopback only). 0, or -EINVAL with a
 * message on stderr. */
int kvtd_metrics_start(const char *addr, struct kvtd_state *st, struct MHD_Daemon **out);
void kvtd_metrics_stop(struct MHD_Daemon *d);

#endif
