/*
 * cli.c - what every kvtier subcommand shares: the common store options (--config, --dir,
 * --tiers, --set, --json), building a configuration in a fixed order (defaults, file,
 * environment, command line), and one-line errors.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config.h"

int cli_fail(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "kvtier %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

/* errors the library logged: a failed open then says nothing more (its reason is said) */
static _Atomic unsigned cli_errors_logged;

void cli_log(void *arg, int level, const char *msg)
{
	static const char *names[] = {"error", "warning", "info", "debug"};
	if (level <= KVT_LOG_ERROR)
		atomic_fetch_add(&cli_errors_logged, 1);
	fprintf(stderr, "kvtier: %s: %s\n", names[level < 0 ? 0 : level > 3 ? 3 : level], msg);
}

int cli_parse_int(const char *s, long lo, long hi, long *out)
{
	uint64_t v; /* digits only: strtol alone takes "+8", " 8" and "-0" */
	if (kvt__parse_u64(s, &v) < 0 || v < (uint64_t)lo || v > (uint64_t)hi)
		return -1;
	*out = (long)v;
	return 0;
}

int cli_parse_number(const char *s, double *out)
{
	return kvt__parse_double(s, out) < 0 ? -1 : 0;
}

int cli_parse_size(const char *s, unsigned long long *out)
{
	uint64_t v; /* the one size syntax, the configuration's (src/config.c) */
	if (kvt__parse_size(s, &v) < 0)
		return -1;
	*out = v;
	return 0;
}

void cli_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (size_t n; *s; s += n) {
		unsigned char c = (unsigned char)*s;
		n = kvt__utf8_len(s);
		if (!n) { /* JSON text is UTF-8: a stray byte (a Latin-1 path) becomes U+FFFD */
			fputs("\\ufffd", f);
			n = 1;
		} else if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fwrite(s, 1, n, f);
	}
	fputc('"', f);
}

int cli_store_getopt(struct cli_store_opts *o, int c, const char *arg)
{
	switch (c) {
	case CLI_O_JSON:
		o->json = true;
		return 1;
	case CLI_O_CONFIG:
		o->config = arg;
		return 1;
	case CLI_O_DIR:
		o->dir = arg;
		return 1;
	case CLI_O_TIERS:
		o->tiers = arg;
		return 1;
	case CLI_O_SET:
		if (!strchr(arg, '=')) {
			fprintf(stderr, "kvtier: --set needs key=value\n");
			return -1;
		}
		if (o->n_sets >= (int)(sizeof(o->sets) / sizeof(o->sets[0]))) {
			fprintf(stderr, "kvtier: too many --set options\n");
			return -1;
		}
		o->sets[o->n_sets++] = arg;
		return 1;
	default:
		return 0;
	}
}

int cli_getopt_fail(const char *cmd, int c, int argc, char **argv)
{
	const char *a = optind >= 1 && optind - 1 < argc ? argv[optind - 1] : "";
	if (c == ':')
		return cli_fail(cmd, "%s needs a value (see --help)", a);
	if (optopt > 0 && optopt < 128 && !(a[0] == '-' && a[1] == '-'))
		return cli_fail(cmd, "unknown option '-%c' (see --help)", optopt);
	return cli_fail(cmd, "unknown option '%s' (see --help)", a);
}

int cli_getopt(const char *cmd, int argc, char **argv, struct cli_store_opts *o,
	       const struct option *extra, int (*on)(void *arg, int c, const char *v), void *arg)
{
	static const struct option store[] = {CLI_STORE_LONGOPTS};
	enum { N_STORE = sizeof(store) / sizeof(store[0]) };
	size_t n_extra = 0;
	while (extra && extra[n_extra].name)
		n_extra++;
	struct option all[N_STORE + 32];
	if (n_extra > 31)
		return cli_fail(cmd, "internal: too many options"), -1;
	memcpy(all, store, sizeof(store));
	if (n_extra)
		memcpy(all + N_STORE, extra, n_extra * sizeof(*extra));
	memset(&all[N_STORE + n_extra], 0, sizeof(all[0]));
	opterr = 0;
	optind = 0; /* glibc: a full re-initialisation */
	int c;
	while ((c = getopt_long(argc, argv, ":h", all, NULL)) != -1) {
		if (c == '?' || c == ':')
			return cli_getopt_fail(cmd, c, argc, argv), -1;
		int r = cli_store_getopt(o, c, optarg);
		if (r < 0)
			return -1;
		if (r > 0)
			continue;
		r = on(arg, c, optarg);
		if (r < 0)
			return -1;
		if (r > 0)
			return -2;
	}
	return optind;
}

struct kvt_config *cli_config(const struct cli_store_opts *o)
{
	struct kvt_config *cfg;
	char err[320];
	if (kvt_config_create(&cfg) < 0) {
		fprintf(stderr, "kvtier: out of memory\n");
		return NULL;
	}
	kvt_config_set_log(cfg, cli_log, NULL, getenv("KVTIER_DEBUG") ? KVT_LOG_DEBUG : KVT_LOG_WARN);
	if (o->config && kvt_config_load_file(cfg, o->config, err, sizeof(err)) < 0)
		goto fail;
	if (kvt_config_apply_env(cfg, err, sizeof(err)) < 0)
		goto fail;
	if (o->dir && kvt_config_set(cfg, "nvme.dirs", o->dir, err, sizeof(err)) < 0)
		goto fail;
	if (o->tiers && kvt_config_set(cfg, "store.tiers", o->tiers, err, sizeof(err)) < 0)
		goto fail;
	for (int i = 0; i < o->n_sets; i++) {
		char key[128];
		const char *eq = strchr(o->sets[i], '=');
		size_t n = (size_t)(eq - o->sets[i]);
		if (n >= sizeof(key)) {
			snprintf(err, sizeof(err), "--set: key too long");
			goto fail;
		}
		memcpy(key, o->sets[i], n);
		key[n] = 0;
		if (kvt_config_set(cfg, key, eq + 1, err, sizeof(err)) < 0)
			goto fail;
	}
	return cfg;
fail:
	fprintf(stderr, "kvtier: %s\n", err);
	kvt_config_destroy(cfg);
	return NULL;
}

struct kvt_store *cli_open_store(const struct cli_store_opts *o)
{
	struct kvt_config *cfg = cli_config(o);
	if (!cfg)
		return NULL;
	struct kvt_store *s;
	unsigned logged = atomic_load(&cli_errors_logged);
	int rc = kvt_store_open(cfg, &s);
	kvt_config_destroy(cfg);
	if (rc < 0) {
		/* One line: the library's error names the tier and the reason ("nvme: cannot open
		 * D: No such file or directory"); a second one from here said only "not found
		 * (miss)" (until 2026-12-06). */
		if (atomic_load(&cli_errors_logged) == logged)
			fprintf(stderr, "kvtier: cannot open the store: %s\n", kvt_strerror(rc));
		return NULL;
	}
	return s;
}
