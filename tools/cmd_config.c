/*
 * cmd_config.c - `kvtier config`: print every configuration key with its default and help
 * (from the library's one table, so the list cannot drift), or the effective values after a
 * file, the environment and --set are applied. docs/CONFIG.md is `kvtier config --markdown`.
 */
#include <string.h>

#include "cli.h"
#include "config.h"

int kvt_cmd_config(int argc, char **argv)
{
	struct cli_store_opts o = {0};
	bool markdown = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("usage: kvtier config [--markdown] [--config FILE] [--set K=V]... "
			       "[--json]\n"
			       "Print every configuration key: its effective value (defaults, then "
			       "FILE, then\nKVTIER_<SECTION>_<NAME> environment variables, then "
			       "--set) and its meaning.\n"
			       "  --markdown  the reference table of docs/CONFIG.md (defaults only)\n");
			return 0;
		}
		if (!strcmp(argv[i], "--markdown")) {
			markdown = true;
			continue;
		}
		int r = cli_store_opt(&o, argc, argv, &i);
		if (r < 0)
			return 2;
		if (r == 0)
			return cli_fail("config", "unknown option '%s' (see --help)", argv[i]), 2;
	}
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
