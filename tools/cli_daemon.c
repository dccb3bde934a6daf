/*
 * cli_daemon.c - the options and the connection shared by the commands that talk to a
 * running kvtierd (`kvtier status --daemon`, `kvtier clear --daemon`): one parser for
 * `--daemon PATH` next to the store options, and one way to open a store whose every call
 * goes to that daemon (store.daemon = PATH). Why apart: each such command used to carry
 * its own copy of this, and they drifted in their messages.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

enum { O_DAEMON = CLI_O_FIRST_FREE };

struct daemon_opt {
	const char *usage;
	const char *path;
};

static int daemon_opt(void *arg, int c, const char *v)
{
	struct daemon_opt *d = arg;
	if (c == 'h') {
		fputs(d->usage, stdout);
		return 1;
	}
	d->path = v; /* O_DAEMON */
	return 0;
}

struct kvt_store *cli_open_daemon(const char *cmd, int argc, char **argv, const char *usage,
				  struct cli_store_opts *o, const char **path, int *exit_code)
{
	static const struct option extra[] = {{"daemon", required_argument, NULL, O_DAEMON},
					      {NULL, 0, NULL, 0}};
	/* o->sets keeps a pointer to it until the store is open: static, one per process */
	static char set[4200];
	struct daemon_opt d = {.usage = usage};
	int first = cli_getopt(cmd, argc, argv, o, extra, daemon_opt, &d);
	*exit_code = first == -2 ? 0 : 2;
	if (first < 0)
		return NULL;
	if (first < argc)
		return cli_fail(cmd, "unexpected argument '%s' (see --help)", argv[first]), NULL;
	if (!d.path)
		return cli_fail(cmd, "--daemon PATH is required"), NULL;
	if (snprintf(set, sizeof(set), "store.daemon=%s", d.path) >= (int)sizeof(set))
		return cli_fail(cmd, "--daemon: path too long"), NULL;
	if (o->n_sets >= (int)(sizeof(o->sets) / sizeof(o->sets[0])))
		return cli_fail(cmd, "too many --set options (at most %d with --daemon)",
				(int)(sizeof(o->sets) / sizeof(o->sets[0])) - 1),
		       NULL;
	o->sets[o->n_sets++] = set;
	*path = d.path;
	*exit_code = 1;
	return cli_open_store(o);
}
