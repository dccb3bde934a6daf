/*
 * cli.h - shared pieces of the kvtier command-line programs: the subcommand table, opening
 * a store from the common options, and error reporting (one clear line, non-zero exit).
 * Each subcommand lives in tools/cmd_<name>.c and exports kvt_cmd_<name>().
 */
#ifndef KVT_CLI_H
#define KVT_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "kvtier.h"

/* Options every store-opening subcommand accepts. */
struct cli_store_opts {
	const char *config;    /* --config FILE */
	const char *dir;       /* --dir D: nvme.dirs = D (no config file needed) */
	const char *tiers;     /* --tiers dram,nvme */
	const char *sets[32];  /* --set key=value, repeatable */
	int n_sets;
	bool json;             /* --json */
};

/* The common store options as getopt_long entries (--config, --dir, --tiers, --set,
 * --json, and --help as 'h'), for a command's option table; their codes are CLI_O_*. */
enum { CLI_O_CONFIG = 0x100, CLI_O_DIR, CLI_O_TIERS, CLI_O_SET, CLI_O_JSON, CLI_O_FIRST_FREE };
#define CLI_STORE_LONGOPTS                                                                    \
	{"config", required_argument, NULL, CLI_O_CONFIG},                                    \
	    {"dir", required_argument, NULL, CLI_O_DIR},                                      \
	    {"tiers", required_argument, NULL, CLI_O_TIERS},                                  \
	    {"set", required_argument, NULL, CLI_O_SET}, {"json", no_argument, NULL, CLI_O_JSON}, \
	    {"help", no_argument, NULL, 'h'}
/* Apply getopt_long's answer c (with its optarg) if it is a store option: 1 taken, 0 not
 * one, -1 after printing an error (a --set without '=', too many). */
int cli_store_getopt(struct cli_store_opts *o, int c, const char *arg);
/* getopt_long's answer c for an unknown option ('?') or a missing value (':', with an
 * optstring starting with ':'): one line naming it; returns 1. */
int cli_getopt_fail(const char *cmd, int c, int argc, char **argv);
/* One command's options through getopt_long: the store options plus extra (an option
 * table ending in a zero entry; codes from CLI_O_FIRST_FREE). Every option that is not a
 * store option - 'h' for --help included - goes to on(arg, code, value), which returns 0,
 * 1 to stop with exit status 0 (help printed), or < 0 after printing an error. Returns the
 * index of the first operand; -1 after one error line; -2 when on() asked to stop. */
int cli_getopt(const char *cmd, int argc, char **argv, struct cli_store_opts *o,
	       const struct option *extra, int (*on)(void *arg, int c, const char *v), void *arg);
/* Build a configuration: defaults, then --config, then KVTIER_* environment, then --dir,
 * --tiers and --set. NULL after printing one error line. */
struct kvt_config *cli_config(const struct cli_store_opts *o);
/* cli_config + kvt_store_open; NULL after printing one error line. */
struct kvt_store *cli_open_store(const struct cli_store_opts *o);
/* For the commands that talk to a running kvtierd: parse the store options plus
 * `--daemon PATH` (required; --help prints usage) and open a store whose calls go to that
 * daemon. NULL with *exit_code set (0 after --help, 2 for a usage error, 1 if the daemon
 * could not be reached), after one error line. */
struct kvt_store *cli_open_daemon(const char *cmd, int argc, char **argv, const char *usage,
				  struct cli_store_opts *o, const char **path, int *exit_code);
/* Print "kvtier <cmd>: <message>" to stderr; returns 1 (the exit code to use). */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Log callback printing library messages to stderr with a level prefix. */
void cli_log(void *arg, int level, const char *msg);
/* Parse a size with binary units ("4M", "2GiB"): kvt__parse_size, the syntax of size
 * configuration keys. 0 or -1. */
int cli_parse_size(const char *s, unsigned long long *out);
/* Parse a whole number in [lo, hi] (0 <= lo): decimal digits after optional blanks, no
 * sign. 0 or -1. */
int cli_parse_int(const char *s, long lo, long hi, long *out);
/* Parse a non-negative decimal number ("2", "0.5", "1e3"): kvt__parse_double, the syntax
 * of number configuration keys (no sign, hexadecimal, inf or nan). 0 or -1. */
int cli_parse_number(const char *s, double *out);
/* Print a JSON string with escaping. */
void cli_json_str(FILE *f, const char *s);

/* Subcommands: argv[0] is the subcommand's name. Return the exit code. */
int kvt_cmd_ls(int argc, char **argv);
int kvt_cmd_stat(int argc, char **argv);
int kvt_cmd_verify(int argc, char **argv);
int kvt_cmd_rm(int argc, char **argv);
int kvt_cmd_bench(int argc, char **argv);
int kvt_cmd_config(int argc, char **argv);
int kvt_cmd_session(int argc, char **argv);
int kvt_cmd_calibrate(int argc, char **argv);
int kvt_cmd_crossover(int argc, char **argv);
int kvt_cmd_replay(int argc, char **argv);
int kvt_cmd_status(int argc, char **argv);
int kvt_cmd_clear(int argc, char **argv);

#endif
