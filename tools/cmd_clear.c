/*
 * cmd_clear.c - `kvtier clear --daemon PATH`: empty a running kvtierd's store (every object
 * its DRAM and nvme tiers hold; docs/DAEMON.md, KVTD_CLEAR), which publishes a removal per
 * object and then AllBlocksCleared per tier to the KV event stream. Why a command: an
 * operator resetting a node's cache (a model's weights patched under the same name) must
 * not stop the daemon and its clients to do it.
 */
#include <stdio.h>

#include "cli.h"
#include "daemon_client.h"

int kvt_cmd_clear(int argc, char **argv)
{
	struct cli_store_opts o = {0};
	const char *path = NULL;
	int code;
	struct kvt_store *s = cli_open_daemon(
	    "clear", argc, argv,
	    "usage: kvtier clear --daemon PATH [--set K=V]... [--json]\n"
	    "Remove every object the daemon's DRAM and nvme tiers hold (from every tier\n"
	    "of its chain). The model keys (--set model.*) must match the daemon's.\n",
	    &o, &path, &code);
	if (!s)
		return code;
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
