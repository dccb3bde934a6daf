/*
 * cmd_status.c - `kvtier status --daemon PATH`: what a running kvtierd holds (clients
 * attached, requests in progress, shared regions mapped, protocol errors, refusals) and
 * its store's per-tier use. Why a command of its own: operators (and the robustness test's
 * reader) need to see that nothing is pinned without attaching a debugger. It only looks:
 * it attaches as one more client, asks, and leaves.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "daemon_client.h"
#include "daemon_proto.h"

enum { O_DAEMON = CLI_O_FIRST_FREE };

static int status_opt(void *arg, int c, const char *v)
{
	if (c == 'h') {
		printf("usage: kvtier status --daemon PATH [--set K=V]... [--json]\n"
		       "The daemon's clients, requests in progress and shared regions, and its\n"
		       "tiers' use. The model keys (--set model.*) must match the daemon's.\n");
		return 1;
	}
	*(const char **)arg = v; /* O_DAEMON */
	return 0;
}

int kvt_cmd_status(int argc, char **argv)
{
	static const struct option extra[] = {{"daemon", required_argument, NULL, O_DAEMON},
					      {NULL, 0, NULL, 0}};
	struct cli_store_opts o = {0};
	const char *path = NULL;
	char set[4200];
	int first = cli_getopt("status", argc, argv, &o, extra, status_opt, &path);
	if (first == -2)
		return 0;
	if (first < 0)
		return 2;
	if (first < argc)
		return cli_fail("status", "unexpected argument '%s' (see --help)", argv[first]), 2;
	if (!path)
		return cli_fail("status", "--daemon PATH is required"), 2;
	if (snprintf(set, sizeof(set), "store.daemon=%s", path) >= (int)sizeof(set) ||
	    o.n_sets >= 32)
		return cli_fail("status", "--daemon: path too long"), 2;
	o.sets[o.n_sets++] = set;
	struct kvt_store *s = cli_open_store(&o);
	if (!s)
		return 1;
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
	st.connections -= 1;
	st.regions_mapped -= 1;
	if (o.json) {
		printf("{\"connections\":%llu,\"connections_total\":%llu,\"ops_in_progress\":%llu,"
		       "\"regions_mapped\":%llu,\"protocol_errors\":%llu,\"refused\":%llu,"
		       "\"pinned_slots\":%llu,\"pinned_gets\":%llu,\"reserved_slots\":%llu,"
		       "\"shared_puts\":%llu,\"lease_expired_pins\":%llu,"
		       "\"lease_expired_reservations\":%llu,\"quarantined_slots\":%llu,"
		       "\"quarantined_bytes\":%llu,\"tp_objects_open\":%llu,"
		       "\"tp_objects_published\":%llu,\"tp_objects_cancelled\":%llu,\"tiers\":{",
		       (unsigned long long)st.connections, (unsigned long long)st.connections_total,
		       (unsigned long long)st.ops_in_progress, (unsigned long long)st.regions_mapped,
		       (unsigned long long)st.protocol_errors, (unsigned long long)st.refused,
		       (unsigned long long)st.pins, (unsigned long long)st.pinned_gets,
		       (unsigned long long)st.reserved, (unsigned long long)st.shared_puts,
		       (unsigned long long)st.pins_expired,
		       (unsigned long long)st.reservations_expired,
		       (unsigned long long)st.quarantined, (unsigned long long)st.quarantined_bytes,
		       (unsigned long long)st.tp_partials, (unsigned long long)st.tp_published,
		       (unsigned long long)st.tp_cancelled);
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
		printf("kvtierd %s: %llu clients (%llu since start), %llu requests in progress, "
		       "%llu shared regions mapped, %llu protocol errors, %llu refused, %llu slots "
		       "pinned and %llu reserved (%llu gets and %llu puts through the shared "
		       "pool); leases expired: %llu pins, %llu reservations; %llu slots (%llu bytes) "
		       "quarantined; tensor-parallel objects: %llu open, %llu published, %llu "
		       "cancelled\n",
		       path, (unsigned long long)st.connections,
		       (unsigned long long)st.connections_total,
		       (unsigned long long)st.ops_in_progress, (unsigned long long)st.regions_mapped,
		       (unsigned long long)st.protocol_errors, (unsigned long long)st.refused,
		       (unsigned long long)st.pins, (unsigned long long)st.reserved,
		       (unsigned long long)st.pinned_gets, (unsigned long long)st.shared_puts,
		       (unsigned long long)st.pins_expired,
		       (unsigned long long)st.reservations_expired,
		       (unsigned long long)st.quarantined, (unsigned long long)st.quarantined_bytes,
		       (unsigned long long)st.tp_partials, (unsigned long long)st.tp_published,
		       (unsigned long long)st.tp_cancelled);
		for (uint32_t i = 0; i < ts.n_tiers && i < KVT_MAX_TIERS; i++)
			printf("  %-6s %llu objects, %llu bytes of %llu\n", ts.tier[i].name,
			       (unsigned long long)ts.tier[i].objects,
			       (unsigned long long)ts.tier[i].bytes,
			       (unsigned long long)ts.tier[i].capacity_bytes);
	}
	kvt_store_close(s);
	return 0;
}
