/*
 * cmd_status.c - `kvtier status --daemon PATH`: what a running kvtierd holds (clients
 * attached, requests in progress, shared regions mapped, protocol errors, refusals) and
 * its store's per-tier use. Why a command of its own: operators (and the robustness test's
 * reader) need to see that nothing is pinned without attaching a debugger. It only looks:
 * it attaches as one more client, asks, and leaves.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "daemon_client.h"
#include "daemon_proto.h"

/* The daemon's counters, in the order both outputs list them: JSON name, text label. */
#define ROW(f, json, text) {json, text, offsetof(struct kvtd_status, f)}
static const struct {
	const char *json, *text;
	size_t off;
} rows[] = {
    ROW(connections, "connections", "clients attached"),
    ROW(connections_total, "connections_total", "clients since start"),
    ROW(ops_in_progress, "ops_in_progress", "requests in progress"),
    ROW(regions_mapped, "regions_mapped", "shared regions mapped"),
    ROW(protocol_errors, "protocol_errors", "protocol errors"),
    ROW(refused, "refused", "connections refused"),
    ROW(pins, "pinned_slots", "slots pinned"),
    ROW(pinned_gets, "pinned_gets", "gets through the shared pool"),
    ROW(reserved, "reserved_slots", "slots reserved"),
    ROW(shared_puts, "shared_puts", "puts through the shared pool"),
    ROW(pins_expired, "lease_expired_pins", "pin leases expired"),
    ROW(reservations_expired, "lease_expired_reservations", "reservation leases expired"),
    ROW(quarantined, "quarantined_slots", "slots quarantined"),
    ROW(quarantined_bytes, "quarantined_bytes", "bytes quarantined"),
    ROW(tp_partials, "tp_objects_open", "tensor-parallel objects open"),
    ROW(tp_published, "tp_objects_published", "tensor-parallel objects published"),
    ROW(tp_cancelled, "tp_objects_cancelled", "tensor-parallel objects cancelled"),
    ROW(tp_quarantined, "tp_quarantined_slots", "tensor-parallel slots quarantined"),
    ROW(tp_quarantined_bytes, "tp_quarantined_bytes", "tensor-parallel bytes quarantined"),
    ROW(cut, "cut_requests", "requests cut at their client's deadline"),
    ROW(cut_running, "cut_requests_running", "cut requests whose call still runs"),
    ROW(busy_waits, "busy_waits", "calls the store refused for now, retried"),
};
#undef ROW

static unsigned long long row_value(const struct kvtd_status *st, size_t i)
{
	return (unsigned long long)*(const uint64_t *)((const char *)st + rows[i].off);
}

int kvt_cmd_status(int argc, char **argv)
{
	struct cli_store_opts o = {0};
	const char *path = NULL;
	int code;
	struct kvt_store *s = cli_open_daemon(
	    "status", argc, argv,
	    "usage: kvtier status --daemon PATH [--set K=V]... [--json]\n"
	    "The daemon's clients, requests in progress and shared regions, and its\n"
	    "tiers' use. The model keys (--set model.*) must match the daemon's.\n",
	    &o, &path, &code);
	if (!s)
		return code;
	struct kvtd_status st;
	struct kvt_stats ts;
	int rc = kvt__client_status(kvt__store_client(s), &st);
	if (rc == 0)
		rc = kvt_stats(s, &ts);
	if (rc < 0) {
		kvt_store_close(s);
		return cli_fail("status", "%s: %s", path, kvt_strerror(rc));
	}
	/* This command's own connection is not the daemon's business: leave it out. */
	st.connections -= st.connections > 0;
	st.regions_mapped -= st.regions_mapped > 0;
	size_t n = sizeof(rows) / sizeof(rows[0]);
	if (o.json) {
		for (size_t i = 0; i < n; i++)
			printf("%s\"%s\":%llu", i ? "," : "{", rows[i].json, row_value(&st, i));
		printf(",\"tiers\":{");
		for (uint32_t i = 0; i < ts.n_tiers && i < KVT_MAX_TIERS; i++) {
			printf("%s", i ? "," : "");
			cli_json_str(stdout, ts.tier[i].name);
			printf(":{\"objects\":%llu,\"bytes\":%llu,\"capacity_bytes\":%llu}",
			       (unsigned long long)ts.tier[i].objects,
			       (unsigned long long)ts.tier[i].bytes,
			       (unsigned long long)ts.tier[i].capacity_bytes);
		}
		printf("}}\n");
	} else {
		printf("kvtierd %s:\n", path);
		for (size_t i = 0; i < n; i++)
			printf("  %-36s %llu\n", rows[i].text, row_value(&st, i));
		for (uint32_t i = 0; i < ts.n_tiers && i < KVT_MAX_TIERS; i++)
			printf("  %-6s %llu objects, %llu bytes of %llu\n", ts.tier[i].name,
			       (unsigned long long)ts.tier[i].objects,
			       (unsigned long long)ts.tier[i].bytes,
			       (unsigned long long)ts.tier[i].capacity_bytes);
	}
	kvt_store_close(s);
	return 0;
}
