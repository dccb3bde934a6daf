/*
 * kvtier.c - the kvtier command: a table of subcommands, each in tools/cmd_<name>.c.
 * Errors are one clear line on stderr and a non-zero exit; data goes to stdout, as JSON
 * with --json.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

struct subcommand {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static const struct subcommand commands[] = {
	/* subcommands: one row each, kept in alphabetical order */
	{"bench", kvt_cmd_bench, "measure a tier's throughput and latency against a reference"},
	{"calibrate", kvt_cmd_calibrate, "measure each tier's latency and bandwidth; write the cost profile"},
	{"clear", kvt_cmd_clear, "empty a kvtierd daemon's DRAM and nvme tiers"},
	{"config", kvt_cmd_config, "print configuration keys, defaults and effective values"},
	{"crossover", kvt_cmd_crossover, "break-even prefix length per tier: restore vs recompute"},
	{"ls", kvt_cmd_ls, "list stored objects"},
	{"replay", kvt_cmd_replay, "replay a request trace or workload: hit ratios, bytes, TTFT"},
	{"rm", kvt_cmd_rm, "remove chunks by key"},
	{"session", kvt_cmd_session, "save a conversation's KV, or resume it (on another node)"},
	{"stat", kvt_cmd_stat, "per-tier counters"},
	{"status", kvt_cmd_status, "a kvtierd daemon's state: clients, requests in progress, shared regions"},
	{"verify", kvt_cmd_verify, "check every object's checksums; optionally drop bad ones"},
	{NULL, NULL, NULL},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: kvtier <command> [options]   (kvtier <command> --help for details)\n\n"
		   "commands:\n");
	for (const struct subcommand *c = commands; c->name; c++)
		fprintf(f, "  %-10s %s\n", c->name, c->summary);
	fprintf(f, "\nkvtier --version prints the version and the tiers compiled in.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("kvtier %s\n", kvt_version());
		return 0;
	}
	for (const struct subcommand *c = commands; c->name; c++)
		if (!strcmp(argv[1], c->name))
			return c->fn(argc - 1, argv + 1);
	fprintf(stderr, "kvtier: unknown command '%s' (kvtier --help lists them)\n", argv[1]);
	return 2;
}
