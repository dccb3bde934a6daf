/*
 * metrics.c - kvtierd's Prometheus endpoint (GET /metrics, text format 0.0.4), served by
 * libmicrohttpd on a loopback address. Why here and not in the library: only the daemon
 * serves HTTP; the numbers come from kvt_stats and the daemon's own counters.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "kvtierd.h"
#include "tp_commit.h"

const double kvtd_hist_bounds[KVTD_HIST_BUCKETS] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025,
						     0.005,  0.01,    0.025,  0.05,  0.1,
						     0.25,   1.0};

void kvtd_hist_record(struct kvtd_hist *h, uint64_t ns)
{
	double s = (double)ns / 1e9;
	int i = 0;
	while (i < KVTD_HIST_BUCKETS && s > kvtd_hist_bounds[i])
		i++;
	atomic_fetch_add(&h->bucket[i], 1);
	atomic_fetch_add(&h->count, 1);
	atomic_fetch_add(&h->sum_ns, ns);
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

#define PER_TIER(metric, type, help, field)                                                        \
	do {                                                                                       \
		family(f, metric, type, help);                                                     \
		for (uint32_t i = 0; i < st.n_tiers; i++)                                          \
			fprintf(f, "%s{tier=\"%s\"} %llu\n", metric, st.tier[i].name,              \
				(unsigned long long)st.tier[i].field);                             \
	} while (0)

#define ONE(name, type, help, value)                                                               \
	do {                                                                                       \
		family(f, name, type, help);                                                       \
		fprintf(f, "%s %llu\n", name, (unsigned long long)(value));                        \
	} while (0)

static char *render(struct kvtd_state *s, size_t *len)
{
	struct kvt_stats st;
	if (kvt_stats(s->store, &st) < 0)
		return NULL;
	if (st.n_tiers > KVT_MAX_TIERS)
		st.n_tiers = KVT_MAX_TIERS;
	for (uint32_t i = 0; i < st.n_tiers; i++)
		st.tier[i].name[sizeof(st.tier[i].name) - 1] = '\0';
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	if (!f)
		return NULL;
	PER_TIER("kvtier_tier_hits_total", "counter", "Gets served from the tier.", hits);
	PER_TIER("kvtier_tier_misses_total", "counter", "Lookups of the tier that missed.", misses);
	PER_TIER("kvtier_tier_read_bytes_total", "counter", "Bytes the tier read.", read_bytes);
	PER_TIER("kvtier_tier_written_bytes_total", "counter", "Bytes the tier wrote.",
		 write_bytes);
	PER_TIER("kvtier_tier_reads_total", "counter", "Reads the tier performed.", reads);
	PER_TIER("kvtier_tier_writes_total", "counter", "Writes the tier performed.", writes);
	PER_TIER("kvtier_tier_used_bytes", "gauge", "Bytes resident in the tier.", bytes);
	PER_TIER("kvtier_tier_capacity_bytes", "gauge", "Capacity of the tier (0: unbounded).",
		 capacity_bytes);
	PER_TIER("kvtier_tier_objects", "gauge", "Objects resident in the tier.", objects);
	PER_TIER("kvtier_tier_evictions_total", "counter", "Objects evicted from the tier.",
		 evictions);
	PER_TIER("kvtier_tier_checksum_failures_total", "counter",
		 "Objects rejected by their format or checksum checks.", checksum_failures);
	PER_TIER("kvtier_tier_errors_total", "counter", "I/O errors and timeouts of the tier.",
		 errors);
	PER_TIER("kvtier_tier_writes_skipped_total", "counter",
		 "Writes refused by admission, the write budget or a full tier.", writes_skipped);
	PER_TIER("kvtier_tier_removes_total", "counter", "Objects removed from the tier.", removes);
	PER_TIER("kvtier_tier_deadline_misses_total", "counter",
		 "Calls to the tier given up on at their deadline.", deadline_misses);
	PER_TIER("kvtier_tier_deadline_extensions_total", "counter",
		 "Overdue calls to a local device given more time because it kept answering others.",
		 deadline_extensions);
	PER_TIER("kvtier_tier_write_budget_bytes", "gauge",
		 "The tier's write budget per rolling 24 h (0: no budget).", write_budget_bytes);
	PER_TIER("kvtier_tier_write_budget_used_bytes", "gauge",
		 "Bytes charged to the write budget over the last 24 h.", write_budget_used_bytes);
	/* not in kvt_stats (its layout is ABI): read from the engine */
	family(f, "kvtier_tier_late_held_bytes", "gauge",
	       "Store memory the tier holds in calls past their deadline (reads and writes to "
	       "it stop at kvtier_late_held_cap_bytes).");
	for (uint32_t i = 0; i < st.n_tiers; i++)
		fprintf(f, "kvtier_tier_late_held_bytes{tier=\"%s\"} %llu\n", st.tier[i].name,
			(unsigned long long)kvt__store_late_held(s->store, (int)i, NULL));
	uint64_t late_cap = 0;
	(void)kvt__store_late_held(s->store, -1, &late_cap);
	ONE("kvtier_late_held_cap_bytes", "gauge",
	    "What one deeper tier's calls past their deadline may hold of store memory.",
	    late_cap);
	ONE("kvtier_puts_total", "counter", "Chunks stored.", st.puts);
	ONE("kvtier_gets_total", "counter", "Chunk reads requested.", st.gets);
	ONE("kvtier_lookups_total", "counter", "Prefix lookups.", st.lookups);
	ONE("kvtier_lookup_chunks_total", "counter", "Chunks asked for by lookups.",
	    st.lookup_chunks);
	ONE("kvtier_lookup_hit_chunks_total", "counter", "Chunks lookups found.",
	    st.lookup_hit_chunks);
	ONE("kvtier_prefetches_total", "counter", "Prefetch calls.", st.prefetches);
	ONE("kvtier_promotions_total", "counter", "Deeper-tier hits copied into DRAM.",
	    st.promotions);
	ONE("kvtier_promotions_discarded_total", "counter",
	    "Deeper-tier hits read for DRAM but not kept: the key was removed meanwhile.",
	    st.promotions_discarded);
	ONE("kvtier_evicted_unsaved_total", "counter",
	    "Chunks evicted from DRAM after their write-behind reached no deeper tier (lost).",
	    st.evicted_unsaved);
	ONE("kvtier_write_behind_pending", "gauge", "Writes to deeper tiers not yet done.",
	    st.write_behind_pending);
	ONE("kvtier_heap_bytes", "gauge", "Heap memory accounted by the library.",
	    st.dram_alloc_bytes);
	ONE("kvtier_daemon_connections", "gauge", "Clients attached now.",
	    atomic_load(&s->connections));
	ONE("kvtier_daemon_connections_total", "counter", "Clients attached since start.",
	    atomic_load(&s->connections_total));
	ONE("kvtier_daemon_ops_in_progress", "gauge", "Client requests being served.",
	    atomic_load(&s->ops_in_progress));
	ONE("kvtier_daemon_regions_mapped", "gauge", "Client shared regions mapped.",
	    atomic_load(&s->regions_mapped));
	ONE("kvtier_daemon_protocol_errors_total", "counter",
	    "Clients dropped for a malformed message.", atomic_load(&s->protocol_errors));
	ONE("kvtier_daemon_refused_total", "counter", "Connections refused at the limit.",
	    atomic_load(&s->refused));
	ONE("kvtier_daemon_pinned_slots", "gauge",
	    "DRAM slots pinned while a client copies from the shared pool.", atomic_load(&s->pins));
	ONE("kvtier_daemon_pinned_gets_total", "counter",
	    "Gets a client copied straight from the shared DRAM pool.",
	    atomic_load(&s->pinned_gets));
	ONE("kvtier_daemon_reserved_slots", "gauge",
	    "DRAM slots reserved while a client encodes a put into the shared pool.",
	    atomic_load(&s->reserved));
	ONE("kvtier_daemon_shared_puts_total", "counter",
	    "Puts a client encoded straight into the shared DRAM pool.",
	    atomic_load(&s->shared_puts));
	ONE("kvtier_daemon_cut_requests_total", "counter",
	    "Requests answered -ETIME at their client's deadline while their call still ran.",
	    atomic_load(&s->cut));
	ONE("kvtier_daemon_cut_requests_running", "gauge",
	    "Cut requests whose call is still running (each holds its client's region or a slot).",
	    atomic_load(&s->cut_running));
	ONE("kvtier_daemon_busy_waits_total", "counter",
	    "Calls the store refused for now (in-flight bound, backlog, slot being filled), retried.",
	    atomic_load(&s->busy_waits));
	ONE("kvtier_daemon_lease_expired_pins_total", "counter",
	    "Pins released because the client held them past daemon.lease_ms.",
	    atomic_load(&s->pins_expired));
	ONE("kvtier_daemon_lease_expired_reservations_total", "counter",
	    "Put reservations cancelled because the client held them past daemon.lease_ms.",
	    atomic_load(&s->reservations_expired));
	ONE("kvtier_daemon_quarantined_slots", "gauge",
	    "DRAM slots of expired put reservations held out of the pool until their client "
	    "process is gone (it may still write into them).",
	    atomic_load(&s->quarantined));
	ONE("kvtier_daemon_quarantined_bytes", "gauge",
	    "Bytes of the DRAM slots in kvtier_daemon_quarantined_slots.",
	    atomic_load(&s->quarantined_bytes));
	uint64_t tp_open, tp_published, tp_cancelled, tp_quar, tp_quar_bytes;
	kvtd_tp_counts(&tp_open, &tp_published, &tp_cancelled, &tp_quar, &tp_quar_bytes);
	ONE("kvtier_daemon_tp_objects_open", "gauge",
	    "Tensor-parallel objects reserved and waiting for ranks' heads.", tp_open);
	ONE("kvtier_daemon_tp_objects_published_total", "counter",
	    "Tensor-parallel objects published once every head was written.", tp_published);
	ONE("kvtier_daemon_tp_objects_cancelled_total", "counter",
	    "Tensor-parallel objects cancelled (a rank failed, died or the object went stale).",
	    tp_cancelled);
	ONE("kvtier_daemon_tp_quarantined_slots", "gauge",
	    "DRAM slots of tensor-parallel objects cancelled at the end of their lease, held "
	    "out of the pool until the ranks holding claims on them report or go.",
	    tp_quar);
	ONE("kvtier_daemon_tp_quarantined_bytes", "gauge",
	    "Bytes of the DRAM slots in kvtier_daemon_tp_quarantined_slots.", tp_quar_bytes);
	ONE("kvtier_events_published_total", "counter", "KV events published (daemon.events).",
	    atomic_load(&s->events_published));
	ONE("kvtier_event_batches_total", "counter", "KV event batches (messages) published.",
	    atomic_load(&s->event_batches));
	ONE("kvtier_events_dropped_total", "counter",
	    "KV events dropped because the publisher's queue was full.",
	    atomic_load(&s->events_dropped));
	static const char *ops[KVTD_H_N] = {"put", "get", "lookup", "other"};
	family(f, "kvtier_daemon_request_duration_seconds", "histogram",
	       "Time to serve one client request.");
	for (int o = 0; o < KVTD_H_N; o++) {
		struct kvtd_hist *h = &s->hist[o];
		uint64_t cum = 0;
		for (int b = 0; b <= KVTD_HIST_BUCKETS; b++) {
			cum += atomic_load(&h->bucket[b]);
			if (b < KVTD_HIST_BUCKETS)
				fprintf(f,
					"kvtier_daemon_request_duration_seconds_bucket{op=\"%s\","
					"le=\"%g\"} %llu\n",
					ops[o], kvtd_hist_bounds[b], (unsigned long long)cum);
			else
				fprintf(f,
					"kvtier_daemon_request_duration_seconds_bucket{op=\"%s\","
					"le=\"+Inf\"} %llu\n",
					ops[o], (unsigned long long)cum);
		}
		fprintf(f, "kvtier_daemon_request_duration_seconds_sum{op=\"%s\"} %.9f\n", ops[o],
			(double)atomic_load(&h->sum_ns) / 1e9);
		fprintf(f, "kvtier_daemon_request_duration_seconds_count{op=\"%s\"} %llu\n", ops[o],
			(unsigned long long)cum);
	}
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_len, void **con_cls)
{
	struct kvtd_state *s = cls;
	struct MHD_Response *r;
	unsigned code = MHD_HTTP_OK;
	if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
		code = MHD_HTTP_METHOD_NOT_ALLOWED;
		r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	} else if (strcmp(url, "/metrics")) {
		static const char nf[] = "not found: try /metrics\n";
		code = MHD_HTTP_NOT_FOUND;
		r = MHD_create_response_from_buffer(sizeof(nf) - 1, (void *)nf,
						    MHD_RESPMEM_PERSISTENT);
	} else {
		size_t len = 0;
		char *body = render(s, &len);
		if (!body)
			return MHD_NO;
		r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
		MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4");
	}
	if (!r)
		return MHD_NO;
	enum MHD_Result ret = MHD_queue_response(conn, code, r);
	MHD_destroy_response(r);
	return ret;
}

int kvtd_metrics_start(const char *addr, struct kvtd_state *st, struct MHD_Daemon **out)
{
	char host[64];
	const char *colon = strrchr(addr, ':');
	char *end;
	long port = colon ? strtol(colon + 1, &end, 10) : -1;
	struct sockaddr_in sa = {.sin_family = AF_INET};
	if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof(host) || *end ||
	    port < 1 || port > 65535) {
		fprintf(stderr, "kvtierd: --metrics wants ADDR:PORT (e.g. 127.0.0.1:9400), got '%s'\n",
			addr);
		return -EINVAL;
	}
	snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
	    (ntohl(sa.sin_addr.s_addr) >> 24) != 127) {
		fprintf(stderr, "kvtierd: metrics address '%s' is not an IPv4 loopback address "
				"(127.x.x.x)\n", host);
		return -EINVAL;
	}
	sa.sin_port = htons((uint16_t)port);
	*out = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
				handle, st, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
				MHD_OPTION_CONNECTION_LIMIT, 16u, MHD_OPTION_CONNECTION_TIMEOUT,
				10u, MHD_OPTION_END);
	if (!*out) {
		fprintf(stderr, "kvtierd: cannot serve metrics on %s (port in use?)\n", addr);
		return -EINVAL;
	}
	return 0;
}

void kvtd_metrics_stop(struct MHD_Daemon *d)
{
	if (d)
		MHD_stop_daemon(d);
}
