/*
 * kvtierd.h - state shared by the daemon's files: the connection server (kvtierd.c) counts
 * what it does here, and the metrics endpoint (metrics.c) reads it.
 */
#ifndef KVTIERD_H
#define KVTIERD_H

#include <stdatomic.h>
#include <stdbool.h>
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
	_Atomic uint64_t events_published, event_batches, events_dropped;
	_Atomic uint64_t pins, pinned_gets; /* slots pinned for clients' own copies */
	_Atomic uint64_t reserved, shared_puts; /* slots reserved for clients' puts */
	/* pins released and reservations cancelled because their lease (daemon.lease_ms) ran
	 * out while the client held them */
	_Atomic uint64_t pins_expired, reservations_expired;
	/* slots of expired reservations kept out of the pool until their client process is
	 * gone (it may still write into them), and their bytes */
	_Atomic uint64_t quarantined, quarantined_bytes;
	/* requests answered -ETIME at their client's deadline (kvtd_req.deadline_ns), and of
	 * those the calls still running (each holding its client's region or a slot) */
	_Atomic uint64_t cut, cut_running;
	/* calls the store refused for now (-EAGAIN: its in-flight bound store.max_inflight, a
	 * deeper tier backlogged, a slot being filled) and the daemon retried (RETRY_COUNTED,
	 * held_call), one count per call: a daemon at its bounds is told from one that never
	 * reached them */
	_Atomic uint64_t busy_waits;
	struct kvtd_hist hist[KVTD_H_N];
};

void kvtd_hist_record(struct kvtd_hist *h, uint64_t ns);

struct MHD_Daemon;
/* Serve GET /metrics on addr ("127.0.0.1:PORT", loopback only). 0, or -EINVAL with a
 * message on stderr. */
int kvtd_metrics_start(const char *addr, struct kvtd_state *st, struct MHD_Daemon **out);
void kvtd_metrics_stop(struct MHD_Daemon *d);

/* The KV event stream (events.c): daemon.events, daemon.events_replay, _topic, _queue,
 * _buffer. Nothing to do (0, *out NULL) when daemon.events is empty; -EINVAL with a
 * one-line message on stderr for a malformed endpoint or one that cannot be bound. Stop
 * it only after the store is closed (the store calls into it until then). */
struct kvtd_events;
struct kvt_config;
int kvtd_events_start(const struct kvt_config *cfg, struct kvtd_state *st,
		      struct kvtd_events **out);
void kvtd_events_stop(struct kvtd_events *e);
/* 0 if ep is a usable endpoint (tcp:// or ipc://, bounded, no spaces; a tcp:// one on a
 * loopback address unless allow_remote), else -EINVAL and a reason naming what (the key)
 * in err. */
int kvtd_events_check_endpoint(const char *ep, const char *what, bool allow_remote, char *err,
			       size_t errlen);

#endif
