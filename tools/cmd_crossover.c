/*
 * cmd_crossover.c - `kvtier crossover --model M --gpu G`: for each tier, the shortest
 * prefix whose restore beats recomputing it, with restore and recompute times at a few
 * prompt lengths, from the cost model (presets + the calibrate profile, cost.profile).
 * --plot FILE.png draws restore time per tier and recompute time against prefix length
 * through gnuplot. The answer to "is my storage fast enough for my model and GPU?".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "cost.h"
#include "gnuplot.h"

#define CMD "crossover"
#define ALL_TIERS "dram,nvme,fs,redis,rados,s3"

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: kvtier crossover [--model M] [--gpu G] [--mfu X] [--tp N]\n"
	    "                        [--tiers LIST] [--profile FILE] [--max-tokens N]\n"
	    "                        [--plot FILE.png] [--json] [--config FILE] [--set k=v]...\n"
	    "\n"
	    "  --model M        llama3.2-3b, llama3.1-8b, llama3.1-70b, qwen2.5-7b, qwen3-32b,\n"
	    "                   deepseek-v3\n"
	    "  --gpu G          h100-sxm, h200, a100-80gb, l40s\n"
	    "  --mfu X          fraction of the GPU's bf16 peak a prefill reaches (0.5)\n"
	    "  --tp N           GPUs per prefill (tensor parallel)\n"
	    "  --tiers LIST     tiers to report (default %s)\n"
	    "  --profile FILE   tier profile from kvtier calibrate, optionally with an [engine]\n"
	    "                   section (docs/COST_MODEL.md; else defaults)\n"
	    "  --max-tokens N   longest prefix considered (default 1048576)\n"
	    "  --plot FILE.png  restore vs recompute time plot (needs gnuplot)\n",
	    ALL_TIERS);
}

static const uint64_t lengths[] = {1024, 4096, 32768, 131072};

static int plot(const char *path, const struct kvt_cost *c, uint64_t max_tokens)
{
	char data[] = "/tmp/kvtier-crossover-XXXXXX";
	FILE *f = gp_data_open(CMD, data);
	if (!f)
		return 1;
	int n = kvt_cost_tier_count(c);
	for (uint64_t t = 256; t <= max_tokens; t = t * 5 / 4 + 1) {
		fprintf(f, "%llu %.6g", (unsigned long long)t, kvt_cost_recompute_s(c, 0, t));
		for (int i = 0; i < n; i++)
			fprintf(f, " %.6g", kvt_cost_restore_s(c, i, t));
		fputc('\n', f);
	}
	if (gp_data_close(CMD, f, data))
		return 1;
	FILE *g = gp_open(CMD, path, 900, 560);
	if (!g) {
		unlink(data);
		return 1;
	}
	const struct kvt_cost_params *p = kvt__cost_params(c);
	char title[200];
	snprintf(title, sizeof(title),
		 "restore vs recompute: %s, %.0f TFLOP/s effective, %.0f GB/s to GPU",
		 p->model.name, p->flops_per_s / 1e12, p->h2d_Bps / 1e9);
	fprintf(g, "set title ");
	gp_str(g, title);
	fprintf(g, "\nset xlabel 'prefix length (tokens)'\nset ylabel 'seconds'\n"
		   "set logscale xy\nset key left top\nset grid\nplot ");
	gp_str(g, data);
	fprintf(g, " using 1:2 with lines linewidth 3 title 'recompute'");
	for (int i = 0; i < n; i++) {
		char t[64];
		snprintf(t, sizeof(t), "restore from %s", kvt_cost_tier_name(c, i));
		fprintf(g, ", '' using 1:%d with lines title ", i + 3);
		gp_str(g, t);
	}
	int rc = gp_close(CMD, g);
	unlink(data);
	return rc;
}

/* options after the store's: the string ones index xo.s[], then --max-tokens */
enum { O_MODEL = CLI_O_FIRST_FREE, O_GPU, O_MFU, O_TP, O_PROFILE, O_PLOT, O_MAX_TOKENS };

struct xo_args {
	const char *s[O_MAX_TOKENS - O_MODEL];
	unsigned long long max_tokens;
};

static int xo_opt(void *arg, int c, const char *v)
{
	struct xo_args *a = arg;
	if (c == 'h') {
		usage(stdout);
		return 1;
	}
	if (c != O_MAX_TOKENS) {
		a->s[c - O_MODEL] = v;
		return 0;
	}
	uint64_t x; /* digits only: strtoull alone reads " -1" as 2^64 - 1 */
	if (kvt__parse_u64(v, &x) < 0 || !x || x > (1ull << 40))
		return cli_fail(CMD, "--max-tokens: '%s' is not 1..2^40", v), -1;
	a->max_tokens = x;
	return 0;
}

int kvt_cmd_crossover(int argc, char **argv)
{
	static const struct option extra[] = {
	    {"model", required_argument, NULL, O_MODEL},
	    {"gpu", required_argument, NULL, O_GPU},
	    {"mfu", required_argument, NULL, O_MFU},
	    {"tp", required_argument, NULL, O_TP},
	    {"profile", required_argument, NULL, O_PROFILE},
	    {"plot", required_argument, NULL, O_PLOT},
	    {"max-tokens", required_argument, NULL, O_MAX_TOKENS},
	    {NULL, 0, NULL, 0}};
	struct cli_store_opts so = {0};
	struct xo_args xo = {.max_tokens = 1u << 20};
	int first = cli_getopt(CMD, argc, argv, &so, extra, xo_opt, &xo);
	if (first == -2)
		return 0;
	if (first < 0)
		return 2;
	if (first < argc)
		return cli_fail(CMD, "unexpected argument '%s' (see --help)", argv[first]), 2;
	const char *model = xo.s[O_MODEL - O_MODEL], *gpu = xo.s[O_GPU - O_MODEL],
		   *mfu = xo.s[O_MFU - O_MODEL], *tp = xo.s[O_TP - O_MODEL],
		   *profile = xo.s[O_PROFILE - O_MODEL], *out_png = xo.s[O_PLOT - O_MODEL];
	unsigned long long max_tokens = xo.max_tokens;
	if (out_png && gp_check(CMD, out_png)) /* before the table: one line, exit 2 */
		return 2;
	struct kvt_config *cfg = cli_config(&so);
	if (!cfg)
		return 2;
	int rc = 2;
	struct kvt_cost *c = NULL;
	char err[200] = "";
	const char *keys[] = {"cost.model", "cost.gpu", "cost.mfu", "cost.tp", "cost.profile"};
	const char *vals[] = {model, gpu, mfu, tp, profile};
	for (int k = 0; k < 5; k++)
		if (vals[k] && kvt_config_set(cfg, keys[k], vals[k], err, sizeof(err))) {
			cli_fail(CMD, "%s", err);
			goto out;
		}
	if (!so.tiers && kvt_config_set(cfg, "store.tiers", ALL_TIERS, err, sizeof(err))) {
		cli_fail(CMD, "%s", err);
		goto out;
	}
	kvt_config_set_log(cfg, cli_log, NULL, KVT_LOG_WARN);
	if (kvt_cost_create(cfg, &c) < 0) {
		cli_fail(CMD, "cannot build the cost model (see the message above)");
		goto out;
	}
	const struct kvt_cost_params *p = kvt__cost_params(c);
	int n = kvt_cost_tier_count(c);
	long be[KVT_MAX_TIERS];
	for (int i = 0; i < n; i++)
		be[i] = kvt_cost_breakeven_tokens(c, i, max_tokens);

	if (so.json) {
		printf("{\"model\":");
		cli_json_str(stdout, p->model.name);
		printf(",\"kv_bytes_per_token\":%llu,\"flops_per_s\":%.6g,\"h2d_bytes_per_s\":%.6g,"
		       "\"tiers\":[",
		       (unsigned long long)kvt_cost_kv_bytes_per_token(c), p->flops_per_s,
		       p->h2d_Bps);
		for (int i = 0; i < n; i++) {
			const struct kvt_tier_profile *t = &p->tier[i];
			printf("%s{\"tier\":", i ? "," : "");
			cli_json_str(stdout, t->name);
			printf(",\"latency_us\":%.3f,\"read_gbps\":%.4f,\"measured\":%s,"
			       "\"breakeven_tokens\":",
			       t->latency_s * 1e6, t->read_Bps / 1e9,
			       t->measured ? "true" : "false");
			if (be[i] > 0)
				printf("%ld", be[i]);
			else
				printf("null");
			for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++)
				printf(",\"restore_%llu_s\":%.6g", (unsigned long long)lengths[l],
				       kvt_cost_restore_s(c, i, lengths[l]));
			printf("}");
		}
		printf("]");
		for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++)
			printf(",\"recompute_%llu_s\":%.6g", (unsigned long long)lengths[l],
			       kvt_cost_recompute_s(c, 0, lengths[l]));
		printf("}\n");
	} else {
		printf("%s: %.1f KiB of KV per token, prefill at %.0f TFLOP/s effective, %.0f GB/s "
		       "host->GPU\n\n",
		       p->model.name, kvt_cost_kv_bytes_per_token(c) / 1024.0,
		       p->flops_per_s / 1e12, p->h2d_Bps / 1e9);
		printf("%-6s %10s %10s  %-16s", "tier", "latency", "read", "break-even");
		for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++) {
			char h[32];
			snprintf(h, sizeof(h), "@%lluk", (unsigned long long)lengths[l] / 1024);
			printf(" %13s", h);
		}
		printf("\n");
		for (int i = 0; i < n; i++) {
			const struct kvt_tier_profile *t = &p->tier[i];
			char b[32];
			if (be[i] > 0)
				snprintf(b, sizeof(b), "%ld tokens", be[i]);
			else
				snprintf(b, sizeof(b), "> %llu", max_tokens);
			printf("%-6s %8.0fus %5.1f GB/s  %-16s", t->name, t->latency_s * 1e6,
			       t->read_Bps / 1e9, b);
			for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++)
				printf(" %12.3fs", kvt_cost_restore_s(c, i, lengths[l]));
			printf("%s\n", t->measured ? "" : "  (default profile)");
		}
		printf("%-6s %10s %10s  %-16s", "", "", "", "recompute");
		for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++)
			printf(" %12.3fs", kvt_cost_recompute_s(c, 0, lengths[l]));
		printf("\n(times: restoring, or recomputing, a prefix of that many tokens)\n"
		       "A prefix at least as long as the break-even restores faster than it "
		       "recomputes.\n");
	}
	if (out_png) {
		if (plot(out_png, c, max_tokens))
			goto out;
		if (!so.json)
			printf("plot written to %s\n", out_png);
	}
	rc = 0;
out:
	kvt_cost_destroy(c);
	kvt_config_destroy(cfg);
	return rc;
}
