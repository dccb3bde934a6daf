/*
 * cmd_config.c - `kvtier config`: print every configuration key with its default and help
 * (from the library's one table, so the list cannot drift), or the effective values after a
 * file, the environment and --set are applied. docs/CONFIG.md is `kvtier config --markdown`.
 */
#include <string.h>

#include "cli.h"
#include "config.h"

enum { O_MARKDOWN = CLI_O_FIRST_FREE };

static int config_opt(void *arg, int c, const char *v)
{
	(void)v;
	if (c == 'h') {
		printf("usage: kvtier config [--markdown] [--config FILE] [--set K=V]... "
		       "[--json]\n"
		       "Print every configuration key: its effective value (defaults, then "
		       "FILE, then\nKVTIER_<SECTION>_<NAME> environment variables, then "
		       "--set) and its meaning.\n"
		       "  --markdown  the reference table of docs/CONFIG.md (defaults only)\n");
		return 1;
	}
	*(bool *)arg = true; /* O_MARKDOWN */
	return 0;
}

int kvt_cmd_config(int argc, char **argv)
{
	static const struct option extra[] = {{"markdown", no_argument, NULL, O_MARKDOWN},
					      {NULL, 0, NULL, 0}};
	struct cli_store_opts o = {0};
	bool markdown = false;
	int first = cli_getopt("config", argc, argv, &o, extra, config_opt, &markdown);
	if (first == -2)
		return 0;
	if (first < 0)
		return 2;
	if (first < argc)
		return cli_fail("config", "unexpected argument '%s' (see --help)", argv[first]), 2;
	const char *name, *def, *help;
	if (markdown) {
		printf("| key | default | meaning |\n| --- | --- | --- |\n");
		for (unsigned i = 0; (name = kvt_config_key_info(i, &def, &help)); i++)
			printf("| `%s` | `%s` | %s |\n", name, def, help);
		return 0;
	}
	struct kvt_config *cfg = cli_config(&o);
	if (!cfg)
		return 1;
	if (o.json)
		printf("{");
	for (unsigned i = 0; (name = kvt_config_key_info(i, &def, &help)); i++) {
		char val[4200];
		kvt__config_get_shown(cfg, name, val, sizeof(val)); /* never a password */
		if (o.json) {
			printf("%s", i ? "," : "");
			cli_json_str(stdout, name);
			printf(":");
			cli_json_str(stdout, val);
		} else {
			printf("%-28s = %-20s # %s\n", name, val, help);
		}
	}
	if (o.json)
		printf("}\n");
	kvt_config_destroy(cfg);
	return 0;
}
