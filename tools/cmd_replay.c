/*
 * cmd_replay.c - `kvtier replay`: run a request trace (a Mooncake JSON-lines file or a
 * built-in generated workload) against DRAM + NVMe capacities and report what each tier
 * bought: hit ratios (blocks, tokens, per tier), bytes moved, NVMe write volume, prefill
 * tokens saved and TTFT under the cost model against no cache, for one or more eviction
 * policies side by side, with the offline optimum (Belady) as the bound. --simulate moves
 * metadata only (src/sim.c). The last line is one JSON object with --json, so scripts read
 * `tail -1 | jq`.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "cost.h"
#include "evict.h"
#include "gnuplot.h"
#include "open_path.h"
#include "replay_real.h"
#include "sketch.h"
#include "scaled_geometry.h"
#include "sim.h"
#include "trace.h"

#define CMD "replay"
#define MAX_POLICIES 8

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: kvtier replay (--trace FILE | --workload W) [--simulate]\n"
	    "                     [--policy P[,P...]] [--dram-tokens N] [--nvme-tokens N] "
	    "[--belady]\n"
	    "                     [--model M] [--gpu G] [--gpus N|auto] [--admit-freq N]\n"
	    "                     [--admit-predict off|chain] [--admit-oracle] [--no-prefetch]\n"
	    "                     [--no-leaf-first] [--sweep] [--plot FILE.png] [--json]\n"
	    "                     [--requests N] [--seed S] [--gen KNOB=VALUE]... [--save-trace "
	    "FILE]\n"
	    "                     [--config FILE] [--set key=value]...\n"
	    "\n"
	    "  --trace FILE        Mooncake FAST'25 JSON lines (timestamp ms, input_length,\n"
	    "                      output_length, hash_ids of 512-token blocks); '-' is stdin;\n"
	    "                      ids are prefix hashes; one that follows another id than at\n"
	    "                      its first sight (or comes twice in one request) is\n"
	    "                      simulated as a block of its own, with a warning\n"
	    "  --workload W        generate: chat, rag, agent or conversation (seeded)\n"
	    "  --requests N        generated requests, 1..%u (default 12000); --seed S\n"
	    "                      (default 42)\n"
	    "  --gen KNOB=VALUE    a generator knob (docs/COST_MODEL.md lists them), repeatable\n"
	    "  --save-trace FILE   write the trace that was replayed as JSON lines (512-token\n"
	    "                      blocks only: the format has no other)\n"
	    "  --simulate          metadata only; without it real bytes move through the store\n"
	    "                      (DRAM + NVMe in --dir D, default ./kvtier-data/replay)\n"
	    "  --scale X           real mode: KV bytes per token = the model's times X, in (0, 1]\n"
	    "                      (default 0.01; 1 = full size)\n"
	    "  --policy P,...      eviction policies to compare (default dram.policy, whose\n"
	    "                      default is %s; also hd, lru, arc, pslru, lru2)\n"
	    "  --dram-tokens N     DRAM capacity in tokens (default 262144; a block takes 512)\n"
	    "  --nvme-tokens N     NVMe capacity in tokens (default 4194304; 0 disables it)\n"
	    "  --belady            also compute the offline-optimal (MIN) hit ratio\n"
	    "  --model M, --gpu G  cost-model presets for bytes and TTFT (default: cost.model or\n"
	    "                      model.name, and cost.gpu)\n"
	    "  --gpus N|auto       prefill GPUs serving the queue (default auto: the fewest that\n"
	    "                      keep the no-cache load at %.0f%%, or one per request when\n"
	    "                      all arrive at once; warns when load exceeds 100%%)\n"
	    "  --admit-predict off|chain  NVMe admission by the store's rule (admission.predict):\n"
	    "                      chain writes blocks seen before and blocks extending a\n"
	    "                      reused chain (a conversation that came back)\n"
	    "  --admit-oracle      a bound, not a policy: write to NVMe only blocks the trace\n"
	    "                      uses again later (what perfect reuse prediction writes;\n"
	    "                      --simulate only)\n"
	    "  --admit-freq N      write to NVMe only blocks seen N times, 1..255 (frequency\n"
	    "                      sketch; default admission.min_freq; admission.* keys apply\n"
	    "                      too; without --simulate it sets admission.min_freq, and\n"
	    "                      --admit-predict admission.predict)\n"
	    "  --no-prefetch       do not stage NVMe hits into DRAM while a request queues\n"
	    "  --no-leaf-first     let eviction take a block whose suffix is still cached\n"
	    "                      (--simulate only: the store always evicts suffixes first)\n"
	    "  --sweep             DRAM-only capacity sweep (1/16x .. 4x of --dram-tokens,\n"
	    "                      which is then at most 2^62)\n"
	    "  --plot FILE.png     plot the sweep (implies --sweep; needs gnuplot)\n"
	    "  --json              print a JSON object as the last line\n",
	    KVT_TRACE_MAX_REQUESTS, KVT_SIM_DEFAULT_POLICY, KVT_SIM_AUTO_UTIL * 100);
}

struct opts {
	const char *trace, *workload, *save, *plot, *model, *gpu;
	const char *policies[MAX_POLICIES];
	int n_policies;
	unsigned long long dram, nvme, requests, seed, admit, gpus; /* gpus 0: auto */
	double scale;
	const char *predict; /* --admit-predict; NULL: admission.predict */
	bool oracle;
	bool simulate, belady, prefetch, leaf_first, sweep, json, have_requests, have_seed;
	bool no_leaf_first; /* given: the store has its own rule, so only with --simulate */
	bool partial_first; /* dram.partial_first */
	const char *gen[32];
	int n_gen;
};

static int parse_u64(const char *opt, const char *v, unsigned long long *out)
{
	uint64_t x; /* digits only: strtoull alone reads " -1" as 2^64 - 1 */
	int rc = kvt__parse_u64(v, &x);
	if (rc == -ERANGE)
		return cli_fail(CMD, "%s: '%s' is larger than 2^64 - 1", opt, v);
	if (rc < 0)
		return cli_fail(CMD, "%s: '%s' is not a non-negative integer", opt, v ? v : "");
	*out = x;
	return 0;
}

static int split_policies(struct opts *o, char *list)
{
	for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
		if (o->n_policies == MAX_POLICIES)
			return cli_fail(CMD, "at most %d policies", MAX_POLICIES);
		o->policies[o->n_policies++] = tok;
	}
	return o->n_policies ? 0 : cli_fail(CMD, "--policy needs a name");
}

static bool tty_progress;

static void progress(void *arg, uint64_t done, uint64_t total)
{
	const char *name = arg;
	if (!tty_progress || !total)
		return;
	int w = 40, n = (int)(done * (uint64_t)w / total);
	fprintf(stderr, "\r%-8s [%.*s%*s] %3d%%", name, n,
		"########################################", w - n, "", (int)(done * 100 / total));
	if (done == total)
		fputs("\r\033[K", stderr);
	fflush(stderr);
}

static const char *gib(double bytes, char *buf, size_t len)
{
	if (bytes >= 1099511627776.0)
		snprintf(buf, len, "%.2f TiB", bytes / 1099511627776.0);
	else
		snprintf(buf, len, "%.2f GiB", bytes / 1073741824.0);
	return buf;
}

static void print_human(const struct opts *o, const char *policy, const struct kvt_sim_result *r,
			bool cost)
{
	char a[32], b[32], c[32], d[32];
	printf("%-8s  blocks %.4f  tokens %.4f  dram %.4f  nvme %.4f", policy, r->block_hit_ratio,
	       r->token_hit_ratio, r->tier_token_hit_ratio[0], r->tier_token_hit_ratio[1]);
	if (o->belady)
		printf("  belady %.4f", r->belady_block_hit_ratio);
	printf("  (%.2f s)\n", r->elapsed_s);
	if (!cost)
		return;
	printf("          dram read %s written %s; nvme read %s written %s (%llu writes "
	       "skipped, %.1f MiB written per NVMe hit, %.1f MiB per hit)\n",
	       gib((double)r->read_bytes[0], a, sizeof(a)),
	       gib((double)r->write_bytes[0], b, sizeof(b)),
	       gib((double)r->read_bytes[1], c, sizeof(c)),
	       gib((double)r->write_bytes[1], d, sizeof(d)),
	       (unsigned long long)r->nvme_writes_skipped, r->nvme_bytes_per_hit / 1048576.0,
	       r->nvme_bytes_per_any_hit / 1048576.0);
	printf("          prefill tokens saved %llu of %llu; TTFT p50 %.1f ms p99 %.1f ms "
	       "(no cache: %.1f / %.1f ms)\n",
	       (unsigned long long)r->prefill_tokens_saved, (unsigned long long)r->input_tokens,
	       r->ttft_p50_s * 1e3, r->ttft_p99_s * 1e3, r->nocache_ttft_p50_s * 1e3,
	       r->nocache_ttft_p99_s * 1e3);
	replay_print_load(r->gpus, r->utilization, r->nocache_utilization, (size_t)r->requests,
			  "use more --gpus (or --gpus auto)");
}

static void json_run(const struct opts *o, const char *policy, const struct kvt_sim_result *r)
{
	char ub[32], ub0[32];
	printf("\"policy\":");
	cli_json_str(stdout, policy);
	printf(",\"requests\":%llu,\"blocks\":%llu,\"input_tokens\":%llu,"
	       "\"block_hit_ratio\":%.6f,\"token_hit_ratio\":%.6f,"
	       "\"dram_hit_ratio\":%.6f,\"nvme_hit_ratio\":%.6f,"
	       "\"dram_token_hit_ratio\":%.6f,\"nvme_token_hit_ratio\":%.6f,",
	       (unsigned long long)r->requests, (unsigned long long)r->blocks,
	       (unsigned long long)r->input_tokens, r->block_hit_ratio, r->token_hit_ratio,
	       r->tier_block_hit_ratio[0], r->tier_block_hit_ratio[1], r->tier_token_hit_ratio[0],
	       r->tier_token_hit_ratio[1]);
	if (o->belady)
		printf("\"belady_block_hit_ratio\":%.6f,\"belady_token_hit_ratio\":%.6f,",
		       r->belady_block_hit_ratio, r->belady_token_hit_ratio);
	printf("\"dram_read_bytes\":%llu,\"dram_write_bytes\":%llu,\"nvme_read_bytes\":%llu,"
	       "\"nvme_write_bytes\":%llu,\"nvme_writes_skipped\":%llu,"
	       "\"nvme_bytes_written_per_hit\":%.0f,\"nvme_bytes_written_per_any_hit\":%.0f,"
	       "\"dram_evictions\":%llu,\"nvme_evictions\":%llu,"
	       "\"prefill_tokens_saved\":%llu,\"ttft_p50_ms\":%.3f,\"ttft_p99_ms\":%.3f,"
	       "\"ttft_mean_ms\":%.3f,\"nocache_ttft_p50_ms\":%.3f,\"nocache_ttft_p99_ms\":%.3f,"
	       "\"nocache_ttft_mean_ms\":%.3f,\"gpu_busy_s\":%.3f,\"nocache_gpu_busy_s\":%.3f,"
	       "\"gpus\":%u,\"gpu_utilization\":%s,\"nocache_gpu_utilization\":%s,"
	       "\"elapsed_s\":%.3f",
	       (unsigned long long)r->read_bytes[0], (unsigned long long)r->write_bytes[0],
	       (unsigned long long)r->read_bytes[1], (unsigned long long)r->write_bytes[1],
	       (unsigned long long)r->nvme_writes_skipped, r->nvme_bytes_per_hit,
	       r->nvme_bytes_per_any_hit, (unsigned long long)r->evictions[0],
	       (unsigned long long)r->evictions[1], (unsigned long long)r->prefill_tokens_saved,
	       r->ttft_p50_s * 1e3, r->ttft_p99_s * 1e3, r->ttft_mean_s * 1e3,
	       r->nocache_ttft_p50_s * 1e3, r->nocache_ttft_p99_s * 1e3,
	       r->nocache_ttft_mean_s * 1e3, r->gpu_busy_s, r->nocache_gpu_busy_s, r->gpus,
	       replay_json_load(r->utilization, ub, sizeof(ub)),
	       replay_json_load(r->nocache_utilization, ub0, sizeof(ub0)), r->elapsed_s);
}

/* Sweep DRAM-only capacities for every policy (+ Belady); rows[p][i], belady[i]. The
 * capacities are --dram-tokens x num / den, in integers (a double product past 2^64 was
 * undefined); --dram-tokens is at most SWEEP_MAX_TOKENS with --sweep. */
#define SWEEP_N 7
static const unsigned sweep_num[SWEEP_N] = {1, 1, 1, 1, 1, 2, 4};
static const unsigned sweep_den[SWEEP_N] = {16, 8, 4, 2, 1, 1, 1};
#define SWEEP_MAX_TOKENS (UINT64_MAX / 4)

static int run_sweep(const struct opts *o, const struct kvt_trace *t, double rows[][SWEEP_N],
		     double *belady, uint64_t *caps)
{
	for (int i = 0; i < SWEEP_N; i++) {
		caps[i] = (uint64_t)o->dram * sweep_num[i] / sweep_den[i] / t->block_tokens *
			  t->block_tokens;
		if (!caps[i])
			caps[i] = t->block_tokens;
		int rc = kvt__sim_belady(t, caps[i] / t->block_tokens, &belady[i], NULL);
		if (rc)
			return cli_fail(CMD, "belady: %s", kvt_strerror(rc));
		for (int p = 0; p < o->n_policies; p++) {
			struct kvt_sim_opts so = {.policy = o->policies[p],
						  .dram_tokens = caps[i],
						  .leaf_first = o->leaf_first,
						  .partial_first = o->partial_first};
			struct kvt_sim_result r;
			rc = kvt__sim_run(t, &so, &r);
			if (rc)
				return cli_fail(CMD, "policy %s: %s", o->policies[p],
						kvt_strerror(rc));
			rows[p][i] = r.block_hit_ratio;
		}
	}
	return 0;
}

static int plot(const struct opts *o, double rows[][SWEEP_N], const double *belady,
		const uint64_t *caps)
{
	char data[] = "/tmp/kvtier-replay-XXXXXX";
	FILE *f = gp_data_open(CMD, data);
	if (!f)
		return 1;
	for (int i = 0; i < SWEEP_N; i++) {
		fprintf(f, "%llu %.6f", (unsigned long long)caps[i], belady[i]);
		for (int p = 0; p < o->n_policies; p++)
			fprintf(f, " %.6f", rows[p][i]);
		fputc('\n', f);
	}
	if (gp_data_close(CMD, f, data))
		return 1;
	FILE *g = gp_open(CMD, o->plot, 900, 560);
	if (!g) {
		unlink(data);
		return 1;
	}
	fprintf(g, "set title 'kvtier replay: block hit ratio vs DRAM capacity'\n"
		   "set xlabel 'DRAM capacity (tokens)'\nset ylabel 'block hit ratio'\n"
		   "set logscale x 2\nset key left top\nset grid\nplot ");
	gp_str(g, data);
	fprintf(g, " using 1:2 with linespoints dashtype 2 title 'belady (MIN)'");
	for (int p = 0; p < o->n_policies; p++) {
		fprintf(g, ", '' using 1:%d with linespoints title ", p + 3);
		gp_str(g, o->policies[p]);
	}
	int rc = gp_close(CMD, g);
	unlink(data);
	return rc;
}

static int load_trace(const struct opts *o, struct kvt_trace **out)
{
	struct kvt_trace *t;
	int rc = kvt__trace_create(512, &t);
	if (rc)
		return cli_fail(CMD, "%s", kvt_strerror(rc));
	char err[300];
	if (o->trace) {
		rc = kvt__trace_load(t, o->trace, err, sizeof(err));
		if (rc) {
			kvt__trace_destroy(t);
			return cli_fail(CMD, "%s: %s", o->trace, err);
		}
		if (!t->n) { /* nothing to replay: every ratio would be 0/0 */
			kvt__trace_destroy(t);
			return cli_fail(CMD, "%s: no requests (empty trace)", o->trace);
		}
	} else {
		int w = kvt__gen_workload(o->workload);
		if (w < 0) {
			kvt__trace_destroy(t);
			return cli_fail(CMD, "unknown workload '%s' (chat, rag, agent, conversation)",
					o->workload);
		}
		struct kvt_gen_opts g;
		kvt__gen_defaults(w, &g);
		if (o->have_requests) /* 1 .. KVT_TRACE_MAX_REQUESTS: checked with the option */
			g.requests = (uint32_t)o->requests;
		if (o->have_seed)
			g.seed = o->seed;
		for (int i = 0; i < o->n_gen; i++) {
			char key[64];
			const char *eq = strchr(o->gen[i], '=');
			if (!eq || eq == o->gen[i] || (size_t)(eq - o->gen[i]) >= sizeof(key)) {
				kvt__trace_destroy(t);
				return cli_fail(CMD, "--gen wants KNOB=VALUE, got '%s'", o->gen[i]);
			}
			snprintf(key, sizeof(key), "%.*s", (int)(eq - o->gen[i]), o->gen[i]);
			rc = kvt__gen_set(&g, key, eq + 1);
			if (rc) {
				kvt__trace_destroy(t);
				if (rc == -ERANGE)
					return cli_fail(CMD, "--gen %s: requests is 1..%u",
							o->gen[i], KVT_TRACE_MAX_REQUESTS);
				return cli_fail(CMD, "--gen %s: %s", o->gen[i],
						rc == -ENOENT ? "unknown knob" : "bad value");
			}
		}
		/* the file format has no block size: --trace reads 512-token blocks */
		if (o->save && g.block_tokens != 512) {
			kvt__trace_destroy(t);
			return cli_fail(
			    CMD,
			    "--save-trace needs --gen block_tokens=512 (the trace format "
			    "has 512-token blocks; got %u)",
			    g.block_tokens);
		}
		if (g.block_tokens != 512) {
			kvt__trace_destroy(t);
			if ((rc = kvt__trace_create(g.block_tokens, &t)))
				return cli_fail(CMD, "block_tokens: %s", kvt_strerror(rc));
		}
		rc = kvt__gen_run(&g, t);
		if (rc == -ENODATA) {
			size_t got = t->n;
			kvt__trace_destroy(t);
			return cli_fail(
			    CMD,
			    "generator: only %zu of %u prompts have a token (the --gen "
			    "knobs leave them empty: sys_tokens, user_*, out_*, q_*, ...)",
			    got, g.requests);
		}
		if (rc == -EFBIG) {
			kvt__trace_destroy(t);
			return cli_fail(CMD,
					"generator: the trace would hold more than %llu block ids "
					"(prompts too long for the requests asked: docs_per_req, "
					"doc_tokens, sys_tokens, ...; or fewer --requests)",
					(unsigned long long)KVT_TRACE_MAX_IDS);
		}
		if (rc == -ERANGE) {
			kvt__trace_destroy(t);
			return cli_fail(CMD,
					"generator: the requests would span more than %.0f ms "
					"(is --gen rate too small?)",
					KVT_TRACE_MAX_TS_MS);
		}
		if (rc) {
			kvt__trace_destroy(t);
			return cli_fail(CMD, "generator: %s (check the --gen knobs; docs, repos and "
					     "sys_prompts at most %u)",
					kvt_strerror(rc), KVT_GEN_MAX_ITEMS);
		}
	}
	if (o->save) {
		const char *what;
		int fd = kvt__open_path(o->save, O_WRONLY | O_CREAT | O_TRUNC, 0666, true, &what);
		FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
		if (!f && fd >= 0)
			close(fd);
		if (!f || kvt__trace_write(t, f) || fclose(f)) {
			kvt__trace_destroy(t);
			if (what)
				return cli_fail(CMD, "--save-trace %s: %s, not a regular file", o->save,
						what);
			return cli_fail(CMD, "%s: cannot write the trace%s%s", o->save,
					fd < 0 ? ": " : "", fd < 0 ? strerror(-fd) : "");
		}
	}
	*out = t;
	return 0;
}

enum {
	O_TRACE = CLI_O_FIRST_FREE, O_WORKLOAD, O_SAVE_TRACE, O_PLOT, O_MODEL, O_GPU, O_GEN,
	O_POLICY, O_DRAM_TOKENS, O_NVME_TOKENS, O_REQUESTS, O_SEED, O_GPUS, O_ADMIT_FREQ,
	O_ADMIT_PREDICT, O_ADMIT_ORACLE, O_SCALE, O_SIMULATE, O_BELADY, O_NO_PREFETCH,
	O_NO_LEAF_FIRST, O_SWEEP
};

struct replay_args {
	struct opts *o;
	char *policy_arg; /* --policy's list, split in place into o->policies */
};

/* One option of kvtier replay (cli_getopt): 0, 1 after --help, -1 after an error line. */
static int replay_opt(void *arg, int c, const char *v)
{
	struct replay_args *ra = arg;
	struct opts *o = ra->o;
	switch (c) {
	case 'h':
		usage(stdout);
		return 1;
	case O_TRACE: o->trace = v; return 0;
	case O_WORKLOAD: o->workload = v; return 0;
	case O_SAVE_TRACE: o->save = v; return 0;
	case O_PLOT: o->plot = v; o->sweep = true; return 0;
	case O_MODEL: o->model = v; return 0;
	case O_GPU: o->gpu = v; return 0;
	case O_GEN:
		if (o->n_gen == 32)
			return cli_fail(CMD, "too many --gen"), -1;
		o->gen[o->n_gen++] = v;
		return 0;
	case O_POLICY:
		free(ra->policy_arg);
		ra->policy_arg = strdup(v);
		o->n_policies = 0;
		if (!ra->policy_arg || split_policies(o, ra->policy_arg))
			return -1;
		return 0;
	case O_DRAM_TOKENS: return parse_u64("--dram-tokens", v, &o->dram) ? -1 : 0;
	case O_NVME_TOKENS: return parse_u64("--nvme-tokens", v, &o->nvme) ? -1 : 0;
	case O_REQUESTS:
		o->have_requests = true;
		if (parse_u64("--requests", v, &o->requests))
			return -1;
		if (!o->requests || o->requests > KVT_TRACE_MAX_REQUESTS)
			return cli_fail(CMD, "--requests is 1..%u (got %llu)",
					KVT_TRACE_MAX_REQUESTS, o->requests),
			       -1;
		return 0;
	case O_SEED:
		o->have_seed = true;
		return parse_u64("--seed", v, &o->seed) ? -1 : 0;
	case O_GPUS:
		if (!strcmp(v, "auto")) {
			o->gpus = 0;
			return 0;
		}
		if (parse_u64("--gpus", v, &o->gpus) || !o->gpus || o->gpus > KVT_SIM_MAX_GPUS)
			return cli_fail(CMD, "--gpus is 1..%d or auto", KVT_SIM_MAX_GPUS), -1;
		return 0;
	case O_ADMIT_PREDICT:
		if (kvt__admit_predict_parse(v) < 0)
			return cli_fail(CMD, "--admit-predict is off or chain"), -1;
		o->predict = v;
		return 0;
	case O_ADMIT_ORACLE: o->oracle = true; return 0;
	case O_ADMIT_FREQ: /* admission.min_freq's range */
		if (parse_u64("--admit-freq", v, &o->admit) || !o->admit || o->admit > 255)
			return cli_fail(CMD, "--admit-freq is 1..255"), -1;
		return 0;
	case O_SCALE:
		if (scaled_parse(v, &o->scale))
			return cli_fail(CMD, "--scale: '%s' is not a number in (0, 1]", v), -1;
		return 0;
	case O_SIMULATE: o->simulate = true; return 0;
	case O_BELADY: o->belady = true; return 0;
	case O_NO_PREFETCH: o->prefetch = false; return 0;
	case O_NO_LEAF_FIRST:
		o->leaf_first = false;
		o->no_leaf_first = true;
		return 0;
	default: /* O_SWEEP */
		o->sweep = true;
		return 0;
	}
}

int kvt_cmd_replay(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"trace", required_argument, NULL, O_TRACE},
	    {"workload", required_argument, NULL, O_WORKLOAD},
	    {"save-trace", required_argument, NULL, O_SAVE_TRACE},
	    {"plot", required_argument, NULL, O_PLOT},
	    {"model", required_argument, NULL, O_MODEL},
	    {"gpu", required_argument, NULL, O_GPU},
	    {"gen", required_argument, NULL, O_GEN},
	    {"policy", required_argument, NULL, O_POLICY},
	    {"dram-tokens", required_argument, NULL, O_DRAM_TOKENS},
	    {"nvme-tokens", required_argument, NULL, O_NVME_TOKENS},
	    {"requests", required_argument, NULL, O_REQUESTS},
	    {"seed", required_argument, NULL, O_SEED},
	    {"gpus", required_argument, NULL, O_GPUS},
	    {"admit-freq", required_argument, NULL, O_ADMIT_FREQ},
	    {"admit-predict", required_argument, NULL, O_ADMIT_PREDICT},
	    {"admit-oracle", no_argument, NULL, O_ADMIT_ORACLE},
	    {"scale", required_argument, NULL, O_SCALE},
	    {"simulate", no_argument, NULL, O_SIMULATE},
	    {"belady", no_argument, NULL, O_BELADY},
	    {"no-prefetch", no_argument, NULL, O_NO_PREFETCH},
	    {"no-leaf-first", no_argument, NULL, O_NO_LEAF_FIRST},
	    {"sweep", no_argument, NULL, O_SWEEP},
	    {NULL, 0, NULL, 0}};
	struct opts o = {.dram = 262144, .nvme = 4194304, .prefetch = true, .leaf_first = true,
			 .scale = 0.01};
	struct cli_store_opts so = {0};
	struct replay_args ra = {&o, NULL};
	int first = cli_getopt(CMD, argc, argv, &so, longopts, replay_opt, &ra);
	char *policy_arg = ra.policy_arg;
	if (first == -2)
		return free(policy_arg), 0;
	if (first < 0)
		return free(policy_arg), 2;
	if (first < argc)
		return free(policy_arg),
		       cli_fail(CMD, "unexpected argument '%s' (see --help)", argv[first]), 2;
	o.json = so.json;
	int rc = 2;
	struct kvt_config *cfg = NULL;
	struct kvt_cost *cost = NULL;
	struct kvt_trace *t = NULL;
	if (!!o.trace == !!o.workload) {
		cli_fail(CMD, "give exactly one of --trace FILE and --workload W");
		goto out;
	}
	if (!o.simulate && (o.sweep || o.belady || o.n_policies > 1)) {
		cli_fail(CMD, "--sweep, --belady and several policies need --simulate");
		goto out;
	}
	/* the real store has no oracle and always evicts suffixes first (src/dram.c) */
	if (!o.simulate && (o.oracle || o.no_leaf_first)) {
		cli_fail(CMD, "%s needs --simulate (the store has no such rule)",
			 o.oracle ? "--admit-oracle" : "--no-leaf-first");
		goto out;
	}
	/* output paths before any work: a FIFO would hold the write (or gnuplot) in open() */
	const char *unfit = o.save ? kvt__path_unfit(o.save, true) : NULL;
	if (unfit) {
		cli_fail(CMD, "--save-trace %s: %s, not a regular file", o.save, unfit);
		goto out;
	}
	if (o.plot && gp_check(CMD, o.plot))
		goto out;
	if (o.sweep && o.dram > SWEEP_MAX_TOKENS) {
		cli_fail(CMD,
			 "--sweep: --dram-tokens %llu is too large (4 x it must fit in 64 bits: "
			 "at most %llu)",
			 o.dram, (unsigned long long)SWEEP_MAX_TOKENS);
		goto out;
	}

	/* the cost model: configuration (file, environment, --set), then --model / --gpu */
	if (!(cfg = cli_config(&so)))
		goto out;
	char err[200];
	if ((o.model && kvt_config_set(cfg, "cost.model", o.model, err, sizeof(err))) ||
	    (o.gpu && kvt_config_set(cfg, "cost.gpu", o.gpu, err, sizeof(err))) ||
	    kvt_config_set(cfg, "store.tiers", "dram,nvme", err, sizeof(err))) {
		cli_fail(CMD, "%s", err);
		goto out;
	}
	kvt_config_set_log(cfg, cli_log, NULL, KVT_LOG_WARN);
	o.partial_first = kvt__cfg_bool(cfg, "dram.partial_first");
	/* no --policy: dram.policy (file, environment, --set), whose default is the replay's;
	 * copied, as an enum's text lives in a buffer the next lookup reuses */
	char cfg_policy[64];
	if (!o.n_policies) {
		snprintf(cfg_policy, sizeof(cfg_policy), "%s", kvt__cfg_str(cfg, "dram.policy"));
		o.policies[o.n_policies++] = cfg_policy;
	}
	if (kvt_cost_create(cfg, &cost) < 0) {
		cli_fail(CMD, "cannot build the cost model (see the message above)");
		goto out;
	}
	for (int p = 0; p < o.n_policies; p++) {
		struct kvt_evict *probe;
		if (kvt__evict_create(o.policies[p], 4, &probe) < 0) {
			cli_fail(CMD, "unknown policy '%s' (%s, lru, arc, pslru, lru2)", o.policies[p],
				 KVT_SIM_DEFAULT_POLICY);
			goto out;
		}
		kvt__evict_destroy(probe);
	}
	rc = 1; /* from here on, failures are about the data, not the command line */
	if (load_trace(&o, &t))
		goto out;
	tty_progress = isatty(STDERR_FILENO);
	if (!o.simulate) {
		/* --policy and the admission flags are the store's keys here; without them the
		 * configuration's own values stand */
		char freq[8];
		snprintf(freq, sizeof(freq), "%llu", o.admit);
		if ((policy_arg &&
		     kvt_config_set(cfg, "dram.policy", o.policies[0], err, sizeof(err))) ||
		    (o.admit &&
		     kvt_config_set(cfg, "admission.min_freq", freq, err, sizeof(err))) ||
		    (o.predict &&
		     kvt_config_set(cfg, "admission.predict", o.predict, err, sizeof(err)))) {
			cli_fail(CMD, "%s", err);
			goto out;
		}
		struct replay_real_opts ro = {
		    .dir = so.dir ? so.dir : "./kvtier-data/replay",
		    .source = o.trace ? o.trace : o.workload,
		    .scale = o.scale,
		    .dram_tokens = o.dram,
		    .nvme_tokens = o.nvme,
		    .gpus = (uint32_t)o.gpus,
		    .prefetch = o.prefetch,
		    .json = o.json,
		    .progress = progress,
		};
		rc = replay_real_run(&ro, t, cfg, cost);
		goto out;
	}

	/* the simulator's hit rule, leaf-first eviction and Belady's bound need blocks that
	 * are prefixes: an id seen under another parent is another block (src/sim.c) */
	char why[300];
	int rekeyed = kvt__sim_check_trace(t, why, sizeof(why));
	if (rekeyed < 0) {
		cli_fail(CMD, "%s: %s", o.trace ? o.trace : o.workload, kvt_strerror(rekeyed));
		goto out;
	}
	if (rekeyed)
		fprintf(stderr,
			"kvtier replay: %s: the hash ids are not all prefix hashes (%s): %d blocks "
			"are an id under another parent than at its first sight, each simulated as "
			"a block of its own, as its KV is\n",
			o.trace ? o.trace : o.workload, why, rekeyed);
	{
		const struct kvt_cost_params *cp = kvt__cost_params(cost);
		printf(
		    "replay %s: %zu requests, %zu blocks of %u tokens; DRAM %llu tokens, NVMe %llu "
		    "tokens; %s on %.0f TFLOP/s effective\n",
		    o.trace ? o.trace : o.workload, t->n, t->n_ids, t->block_tokens, o.dram, o.nvme,
		    cp->model.name, cp->flops_per_s / 1e12);
	}
	struct kvt_sim_result res[MAX_POLICIES];
	for (int p = 0; p < o.n_policies; p++) {
		struct kvt_sim_opts s = {
		    .policy = o.policies[p],
		    .dram_tokens = o.dram,
		    .nvme_tokens = o.nvme,
		    .leaf_first = o.leaf_first,
		    .partial_first = o.partial_first,
		    .belady = o.belady && p == 0,
		    .cost = cost,
		    .prefetch = o.prefetch,
		    .gpus = (uint32_t)o.gpus,
		    .admit_min_freq =
			(uint32_t)(o.admit ? o.admit : kvt__cfg_u64(cfg, "admission.min_freq")),
		    .admit_sketch_width = kvt__cfg_u64(cfg, "admission.sketch_counters"),
		    .admit_no_doorkeeper = !kvt__cfg_bool(cfg, "admission.doorkeeper"),
		    .admit_cost_check = kvt__cfg_bool(cfg, "admission.cost_check"),
		    .admit_min_prefix = kvt__cfg_u64(cfg, "admission.min_prefix_tokens"),
		    .admit_predict = kvt__admit_predict_parse(
			o.predict ? o.predict : kvt__cfg_str(cfg, "admission.predict")),
		    .admit_oracle = o.oracle,
		    .progress = progress,
		    .progress_arg = (void *)o.policies[p],
		};
		int r = kvt__sim_run(t, &s, &res[p]);
		if (r == -EINVAL) {
			cli_fail(CMD, "unknown policy '%s' (%s, lru, arc, pslru, lru2)", o.policies[p],
				 KVT_SIM_DEFAULT_POLICY);
			goto out;
		}
		if (r) {
			cli_fail(CMD, "simulation failed: %s", kvt_strerror(r));
			goto out;
		}
		if (p) {
			res[p].belady_block_hit_ratio = res[0].belady_block_hit_ratio;
			res[p].belady_token_hit_ratio = res[0].belady_token_hit_ratio;
		}
		print_human(&o, o.policies[p], &res[p], true);
	}

	double rows[MAX_POLICIES][SWEEP_N], belady[SWEEP_N];
	uint64_t caps[SWEEP_N];
	if (o.sweep) {
		if (run_sweep(&o, t, rows, belady, caps))
			goto out;
		printf("\nDRAM-only sweep (block hit ratio)\n%12s %8s", "tokens", "belady");
		for (int p = 0; p < o.n_policies; p++)
			printf(" %8s", o.policies[p]);
		putchar('\n');
		for (int i = 0; i < SWEEP_N; i++) {
			printf("%12llu %8.4f", (unsigned long long)caps[i], belady[i]);
			for (int p = 0; p < o.n_policies; p++)
				printf(" %8.4f", rows[p][i]);
			putchar('\n');
		}
		if (o.plot && plot(&o, rows, belady, caps))
			goto out;
		if (o.plot)
			printf("plot written to %s\n", o.plot);
	}

	if (o.json) {
		const struct kvt_cost_params *cp = kvt__cost_params(cost);
		printf("{");
		json_run(&o, o.policies[0], &res[0]);
		printf(",\"source\":");
		cli_json_str(stdout, o.trace ? o.trace : o.workload);
		printf(",\"model\":");
		cli_json_str(stdout, cp->model.name);
		printf(",\"block_tokens\":%u,\"dram_tokens\":%llu,\"nvme_tokens\":%llu",
		       t->block_tokens, o.dram, o.nvme);
		printf(",\"rekeyed_blocks\":%d", rekeyed);
		printf(",\"policies\":[");
		for (int p = 0; p < o.n_policies; p++) {
			printf("%s{", p ? "," : "");
			json_run(&o, o.policies[p], &res[p]);
			printf("}");
		}
		printf("]");
		if (o.sweep) {
			printf(",\"sweep\":[");
			for (int i = 0; i < SWEEP_N; i++) {
				printf("%s{\"dram_tokens\":%llu,\"belady_block_hit_ratio\":%.6f",
				       i ? "," : "", (unsigned long long)caps[i], belady[i]);
				for (int p = 0; p < o.n_policies; p++) {
					printf(",");
					cli_json_str(stdout, o.policies[p]);
					printf(":%.6f", rows[p][i]);
				}
				printf("}");
			}
			printf("]");
		}
		printf("}\n");
	}
	rc = 0;
out:
	kvt__trace_destroy(t);
	kvt_cost_destroy(cost);
	kvt_config_destroy(cfg);
	free(policy_arg);
	return rc;
}
