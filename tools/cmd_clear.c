/*
 * cmd_clear.c - `kvtier clear --daemon PATH`: empty a running kvtierd's store (every object
 * its DRAM and nvme tiers hold; docs/DAEMON.md, KVTD_CLEAR), which publishes a removal per
 * object and then AllBlocksCleared per tier to the KV event stream. Why a command: an
 * operator resetting a node's cache (a model's weights patched under the same name) must
 * not stop the daemon and its clients to do it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "daemon_client.h"

enum { O_DAEMON = CLI_O_FIRST_FREE };

static int clear_opt(void *arg, int c, const char *v)
{
	if (c == 'h') {
		printf("usage: kvtier clear --daemon PATH [--set K=V]... [--json]\n"
		       "Remove every object the daemon's DRAM and nvme tiers hold (from every tier\n"
		       "of its chain). The model keys (--set model.*) must match the daemon's.\n");
		return 1;
	}
	*(const char **)arg = v; /* O_DAEMON */
	return 0;
}

int kvt_cmd_clear(int argc, char **argv)
{
	static const struct option extra[] = {{"daemon", required_argument, NULL, O_DAEMON},
					      {NULL, 0, NULL, 0}};
	struct cli_store_opts o = {0};
	const char *path = NULL;
	char set[4200];
	int first = cli_getopt("clear", argc, argv, &o, extra, clear_opt, &path);
	if (first == -2)
		return 0;
	if (first < 0)
		return 2;
	if (first < argc)
		return cli_fail("clear", "unexpected argument '%s' (see --help)", argv[first]), 2;
	if (!path)
		return cli_fail("clear", "--daemon PATH is required"), 2;
	if (snprintf(set, sizeof(set), "store.daemon=%s", path) >= (int)sizeof(set) ||
	    o.n_sets >= 32)
		return cli_fail("clear", "--daemon: path too long"), 2;
	o.sets[o.n_sets++] = set;
	struct kvt_store *s = cli_open_store(&o);
	if (!s)
		return 1;
	uint64_t removed = 0;
	int rc = kvt__client_clear_sync(kvt__store_client(s), &removed);
	kvt_store_close(s);
	if (rc < 0)
		return cli_fail("clear", "%s: %s", path, kvt_strerror(rc));
	if (o.json)
		printf("{\"removed\":%llu}\n", (unsigned long long)removed);
	else
		printf("kvtierd %s: %llu objects removed\n", path, (unsigned long long)removed);
	return 0;
}
