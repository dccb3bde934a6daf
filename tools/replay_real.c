/*
 * replay_real.c - `kvtier replay` without --simulate: every request of the trace goes through
 * the real store (kvt_lookup, kvt_prefetch, kvt_get, kvt_put on DRAM + NVMe in a local
 * directory) with real bytes: a 512-token block is one chunk of the chosen model's size
 * times --scale (tools/scaled_geometry.h). Keys chain kvt_key_next over the request's block
 * ids, so equal id chains give equal keys, as a serving engine's token-derived keys would.
 *
 * Per request, in trace order and as fast as the machine goes (arrival times only drive the
 * queueing model, never sleeps):
 *   lookup   the longest contiguous prefix present and each chunk's tier;
 *   prefetch if the request would wait in the FIFO queue model and part of its hit is on
 *            NVMe, stage the hit into DRAM with kvt_prefetch and a deadline at its modelled
 *            start: scheduler-aware prefetch; staging time beyond the wait counts as restore;
 *   get      every hit chunk, many in flight (DRAM and NVMe at once); the wall time from the
 *            first submit to the last completion is the measured restore; every byte is
 *            checked against the payload derived from the key, so corruption is seen;
 *            a failed get (-EBADMSG: checksum) ends the served prefix there;
 *   put      every chunk after the served prefix, parent = the previous chunk's key.
 * TTFT = queue wait + max(measured restore, modelled restore) + modelled recompute of the
 * rest, on the simulator's fleet (--gpus, default sized to the load) served first come
 * first served, each request on the GPU that frees first, against the same fleet with no
 * cache.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "config.h"
#include "cost.h"
#include "replay_real.h"
#include "scaled_geometry.h"
#include "sim.h"

#define CMD "replay"
#define WINDOW 32 /* chunk operations in flight */

struct rr;

struct slot {
	struct rr *r;
	bool busy;
	size_t idx;
	uint32_t n_tokens;
	void *buf;
};

struct rr {
	struct kvt_store *s;
	struct slot slot[WINDOW];
	size_t payload_max;
	unsigned inflight;
	const struct kvt_key *keys;
	/* per batch */
	size_t fail_at;	  /* first get that failed */
	uint64_t last_ns; /* last completion */
	uint64_t verify_ns;
	uint64_t bytes;
	int tier_map[KVT_MAX_TIERS]; /* store tier -> dram 0 / nvme 1 */
	uint64_t served_bytes[2];      /* get bytes by the tier that served them */
	/* totals */
	uint64_t checksum_failures, rejected, get_errors, put_errors, mismatches, put_bytes, gets, puts;
	int last_err;
};

static void get_done(void *arg, const struct kvt_result *res)
{
	struct slot *sl = arg;
	struct rr *r = sl->r;
	if (res->status < 0) {
		if (res->status == -EBADMSG)
			r->rejected++;
		else
			r->get_errors++;
		r->last_err = res->status;
		if (sl->idx < r->fail_at)
			r->fail_at = sl->idx;
	} else {
		uint64_t t0 = kvt__now_ns();
		size_t len = (size_t)res->bytes;
		if (!scaled_check(&r->keys[sl->idx], res->n_tokens, sl->buf, len)) {
			r->mismatches++;
			if (sl->idx < r->fail_at)
				r->fail_at = sl->idx;
		}
		r->bytes += res->bytes;
		if (res->tier >= 0 && res->tier < KVT_MAX_TIERS)
			r->served_bytes[r->tier_map[res->tier]] += res->bytes;
		r->verify_ns += kvt__now_ns() - t0;
	}
	sl->busy = false;
	r->inflight--;
	/* at the end: the restore's time is up to here less every byte check before it
	 * (callbacks run one at a time on the polling thread), never less than zero */
	r->last_ns = kvt__now_ns();
}

static void put_done(void *arg, const struct kvt_result *res)
{
	struct slot *sl = arg;
	struct rr *r = sl->r;
	if (res->status < 0) {
		r->put_errors++;
		r->last_err = res->status;
	} else {
		r->put_bytes += res->bytes;
	}
	sl->busy = false;
	r->inflight--;
}

static struct slot *free_slot(struct rr *r)
{
	for (;;) {
		for (int i = 0; i < WINDOW; i++)
			if (!r->slot[i].busy)
				return &r->slot[i];
		kvt_poll(r->s, 100);
	}
}

static void drain(struct rr *r)
{
	while (r->inflight)
		kvt_poll(r->s, 100);
}

/* Get chunks [0, n) concurrently; returns the served prefix length. */
static size_t get_all(struct rr *r, size_t n)
{
	r->fail_at = n;
	for (size_t i = 0; i < n; i++) {
		struct slot *sl = free_slot(r);
		sl->idx = i;
		sl->busy = true;
		r->inflight++;
		int rc;
		/* each names its parent, so a promotion is linked in DRAM as the simulator
		 * links every block (a get without one could lose a chain's first chunk first) */
		while ((rc = kvt_get_linked(r->s, &r->keys[i], i ? &r->keys[i - 1] : NULL, 0, 0,
					    sl->buf, r->payload_max, get_done, sl)) == -EAGAIN)
			kvt_poll(r->s, 1);
		r->gets++;
		if (rc < 0) {
			sl->busy = false;
			r->inflight--;
			r->get_errors++;
			r->last_err = rc;
			if (i < r->fail_at)
				r->fail_at = i;
		}
	}
	drain(r);
	return r->fail_at;
}

static void put_range(struct rr *r, const struct kvt_geometry *g, const struct kvt_trace *t,
		      const struct kvt_trace_req *q, size_t from)
{
	for (size_t i = from; i < q->n_blocks; i++) {
		struct slot *sl = free_slot(r);
		uint32_t nt = kvt__trace_block_len(t, q, (uint32_t)i);
		size_t len = (size_t)kvt_payload_bytes(g, nt);
		scaled_fill(&r->keys[i], nt, sl->buf, len);
		sl->idx = i;
		sl->busy = true;
		r->inflight++;
		int rc;
		while ((rc = kvt_put(r->s, &r->keys[i], i ? &r->keys[i - 1] : NULL, nt, sl->buf, len,
				     put_done, sl)) == -EAGAIN)
			kvt_poll(r->s, 1);
		r->puts++;
		if (rc < 0) {
			sl->busy = false;
			r->inflight--;
			r->put_errors++;
			r->last_err = rc;
		}
	}
	drain(r);
}


static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

void replay_print_load(uint32_t gpus, double util, double util0, size_t requests, const char *hint)
{
	if (isinf(util) || isinf(util0)) {
		printf("          %u prefill GPU%s, load unbounded (all %zu requests arrive at "
		       "once)\n",
		       gpus, gpus == 1 ? "" : "s", requests);
		fprintf(
		    stderr,
		    "kvtier replay: warning: all %zu requests arrive at the same time: the load "
		    "is unbounded at any fleet size and TTFT measures one burst on %u GPU%s\n",
		    requests, gpus, gpus == 1 ? "" : "s");
		return;
	}
	printf("          %u prefill GPU%s, load %.0f%% (no cache %.0f%%)\n", gpus,
	       gpus == 1 ? "" : "s", 100 * util, 100 * util0);
	if (util > 1 || util0 > 1)
		fprintf(stderr,
			"kvtier replay: warning: %u GPU%s at %.0f%% load (no cache %.0f%%): the "
			"queue grows without bound and TTFT measures it; %s\n",
			gpus, gpus == 1 ? "" : "s", 100 * util, 100 * util0, hint);
}

const char *replay_json_load(double util, char *buf, size_t len)
{
	if (isfinite(util))
		snprintf(buf, len, "%.4f", util);
	else
		snprintf(buf, len, "null");
	return buf;
}

static int set(struct kvt_config *cfg, const char *k, const char *v)
{
	char err[200];
	if (kvt_config_set(cfg, k, v, err, sizeof(err)) < 0)
		return cli_fail(CMD, "%s=%s: %s", k, v, err);
	return 0;
}

/* The store's directory and its parents, 0700 as nvme.dir_mode's default: KV is not for
 * other users (the tiers create theirs the same way). */
static void mkdirs(const char *path)
{
	char buf[4096];
	if (!*path || snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
		return; /* nothing, or a path cut short: create none of it (the open says why) */
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			mkdir(buf, 0700);
			*p = '/';
		}
	mkdir(buf, 0700);
}

int replay_real_run(const struct replay_real_opts *o, const struct kvt_trace *t,
		    struct kvt_config *cfg, const struct kvt_cost *cost)
{
	const struct kvt_cost_params *cp = kvt__cost_params(cost);
	struct scaled_geometry sg;
	if (t->block_tokens != 512)
		return cli_fail(CMD, "real replay needs 512-token blocks (got %u)",
				t->block_tokens);
	if (scaled_geometry(cp->model.name, o->scale, 512, &sg))
		return cli_fail(CMD, "model %s at scale %g has no usable geometry", cp->model.name,
				o->scale);
	if (!o->dram_tokens && !o->nvme_tokens)
		return cli_fail(CMD, "--dram-tokens and --nvme-tokens are both 0");
	uint64_t obj = kvt_object_bytes(&sg.geo, 512);
	/* tokens / 512 x object bytes must fit in 64 bits (it wrapped: 2^61 tokens gave a
	 * 6.5 MB pool) */
	if (obj && o->dram_tokens / 512 > UINT64_MAX / obj)
		return cli_fail(CMD,
				"--dram-tokens %llu is too large: at %llu B per 512 tokens "
				"the pool would be over 2^64 bytes (at most %llu tokens)",
				(unsigned long long)o->dram_tokens, (unsigned long long)obj,
				(unsigned long long)(UINT64_MAX / obj * 512 + 511));
	if (obj && o->nvme_tokens / 512 > UINT64_MAX / obj)
		return cli_fail(CMD,
				"--nvme-tokens %llu is too large: at %llu B per 512 tokens "
				"the pool would be over 2^64 bytes (at most %llu tokens)",
				(unsigned long long)o->nvme_tokens, (unsigned long long)obj,
				(unsigned long long)(UINT64_MAX / obj * 512 + 511));
	char dram_b[32], nvme_b[32];
	snprintf(dram_b, sizeof(dram_b), "%llu",
		 (unsigned long long)KVT_MAX(4096, o->dram_tokens / 512 * obj));
	snprintf(nvme_b, sizeof(nvme_b), "%llu",
		 (unsigned long long)KVT_MAX(4096, o->nvme_tokens / 512 * obj));
	const char *tiers = !o->nvme_tokens ? "dram" : !o->dram_tokens ? "nvme" : "dram,nvme";
	mkdirs(o->dir);
	if (scaled_apply(&sg, cfg) || set(cfg, "store.tiers", tiers) ||
	    set(cfg, "dram.bytes", dram_b) || set(cfg, "nvme.bytes", nvme_b) ||
	    set(cfg, "nvme.dirs", o->dir) || set(cfg, "nvme.fsync", "none"))
		return 1;

	struct kvt_store *s = NULL;
	int rc = kvt_store_open(cfg, &s);
	if (rc < 0)
		return cli_fail(CMD, "cannot open the store in %s: %s", o->dir, kvt_strerror(rc));
	int st_cost[KVT_MAX_TIERS], sim_idx[KVT_MAX_TIERS] = {0}; /* store tier -> cost / dram=0,nvme=1 */
	for (int i = 0; i < kvt_store_tier_count(s); i++) {
		const char *nm = kvt_store_tier_name(s, i);
		st_cost[i] = kvt_cost_tier_index(cost, nm);
		sim_idx[i] = strcmp(nm, "dram") ? 1 : 0;
	}

	struct rr r = {.s = s, .payload_max = (size_t)kvt_payload_bytes(&sg.geo, 512)};
	memcpy(r.tier_map, sim_idx, sizeof(sim_idx));
	uint32_t max_blocks = 1;
	for (size_t i = 0; i < t->n; i++)
		max_blocks = KVT_MAX(max_blocks, t->req[i].n_blocks);
	struct kvt_key *keys = calloc(max_blocks, sizeof(*keys));
	int8_t *tiers_of = calloc(max_blocks, 1), *cost_tiers = calloc(max_blocks, 1);
	double *ttft = calloc(t->n + 1, sizeof(double)), *ttft0 = calloc(t->n + 1, sizeof(double));
	/* the same FIFO fleet as the simulator (src/sim.c) */
	uint32_t ngpu = o->gpus ? o->gpus : kvt__sim_auto_gpus(t, cost);
	double *gfree = calloc(ngpu, sizeof(double)), *gfree0 = calloc(ngpu, sizeof(double));
	double *rest = calloc(t->n + 1, sizeof(double));
	rc = 1;
	if (!keys || !tiers_of || !cost_tiers || !ttft || !ttft0 || !rest || !gfree || !gfree0) {
		cli_fail(CMD, "out of memory");
		goto out;
	}
	for (int i = 0; i < WINDOW; i++) {
		r.slot[i].r = &r;
		if (posix_memalign(&r.slot[i].buf, KVT_ALIGN, r.payload_max)) {
			cli_fail(CMD, "out of memory");
			goto out;
		}
	}
	r.keys = keys;

	printf("real replay: %s at scale %g: %llu B/token (preset %llu), object %llu B; "
		       "tiers %s in %s; DRAM %s B, NVMe %s B\n",
		       sg.model, o->scale, (unsigned long long)sg.bpt,
		       (unsigned long long)sg.preset_bpt, (unsigned long long)obj, tiers, o->dir,
		       o->dram_tokens ? dram_b : "0", o->nvme_tokens ? nvme_b : "0");
	fflush(stdout);

	uint64_t blocks = 0, hit_blocks = 0, input_tokens = 0, hit_tokens = 0, saved = 0;
	uint64_t tier_blocks[2] = {0}, tier_tokens[2] = {0}, prefetches = 0, staged = 0;
	uint64_t restore_bytes = 0, restore_ns = 0, put_ns = 0;
	size_t n_rest = 0;
	double busy = 0, busy0 = 0;
	uint64_t t_start = kvt__now_ns();
	for (size_t ri = 0; ri < t->n; ri++) {
		const struct kvt_trace_req *q = &t->req[ri];
		const uint64_t *ids = kvt__trace_blocks(t, q);
		for (uint32_t i = 0; i < q->n_blocks; i++) {
			uint32_t tok[2] = {(uint32_t)ids[i], (uint32_t)(ids[i] >> 32)};
			kvt_key_next(kvt_store_ns_id(s), i ? &keys[i - 1] : NULL, tok, 2, &keys[i]);
		}
		blocks += q->n_blocks;
		input_tokens += q->input_len;
		int hit = kvt_lookup_sync(s, keys, q->n_blocks, tiers_of);
		if (hit < 0) {
			r.get_errors++;
			hit = 0;
		}
		bool on_nvme = false;
		for (int i = 0; i < hit; i++)
			on_nvme |= sim_idx[tiers_of[i]] == 1;

		/* queue model: when would this request start on the GPU? */
		double arrive = q->ts_ms / 1000.0;
		double start = KVT_MAX(arrive, gfree[0]), wait = start - arrive, stage_s = 0;
		if (o->prefetch && on_nvme && wait > 0) {
			uint64_t t0 = kvt__now_ns();
			int n = kvt_prefetch_sync(s, keys, (size_t)hit,
						  t0 + (uint64_t)(wait * 1e9));
			stage_s = (double)(kvt__now_ns() - t0) / 1e9;
			prefetches++;
			if (n > 0)
				staged += (uint64_t)n;
		}

		/* restore: every hit chunk, concurrently, timed without the byte check */
		size_t served = 0;
		double restore_meas = 0;
		if (hit > 0) {
			r.verify_ns = 0;
			r.bytes = 0;
			uint64_t t0 = kvt__now_ns();
			r.last_ns = t0;
			served = get_all(&r, (size_t)hit);
			uint64_t ns = r.last_ns - t0 - KVT_MIN(r.verify_ns, r.last_ns - t0);
			restore_meas = (double)ns / 1e9 + KVT_MAX(0.0, stage_s - wait);
			restore_bytes += r.bytes;
			restore_ns += ns;
			rest[n_rest++] = restore_meas;
		}
		for (size_t i = 0; i < served; i++) {
			uint32_t len = kvt__trace_block_len(t, q, (uint32_t)i);
			int w = sim_idx[tiers_of[i]];
			tier_blocks[w]++;
			tier_tokens[w] += len;
			hit_tokens += len;
			cost_tiers[i] = (int8_t)st_cost[tiers_of[i]];
		}
		hit_blocks += served;

		struct kvt_cost_plan plan;
		kvt_cost_plan(cost, cost_tiers, served, 512, q->input_len, &plan);
		saved += kvt__cost_plan_saved(&plan, q->input_len);
		double service = (plan.load_chunks ? KVT_MAX(restore_meas, plan.restore_s) : 0) +
				 plan.recompute_s;
		kvt__sim_fleet_replace_first(gfree, ngpu, start + service);
		busy += service;
		ttft[ri] = start + service - arrive;
		double done0 = KVT_MAX(arrive, gfree0[0]) + plan.no_cache_s;
		kvt__sim_fleet_replace_first(gfree0, ngpu, done0);
		busy0 += plan.no_cache_s;
		ttft0[ri] = done0 - arrive;

		uint64_t p0 = kvt__now_ns();
		put_range(&r, &sg.geo, t, q, served);
		put_ns += kvt__now_ns() - p0;
		if (o->progress && (ri % 64 == 63))
			o->progress((void *)"real", ri + 1, t->n);
	}
	kvt_flush_sync(s);
	double elapsed = (double)(kvt__now_ns() - t_start) / 1e9;
	if (o->progress)
		o->progress((void *)"real", t->n, t->n);
	struct kvt_stats st;
	kvt_stats(s, &st);
	uint64_t rb[2] = {0}, wb[2] = {0}, ev[2] = {0}, skipped = 0;
	for (uint32_t i = 0; i < st.n_tiers && i < (uint32_t)kvt_store_tier_count(s); i++) {
		int w = sim_idx[i];
		rb[w] += st.tier[i].read_bytes;
		wb[w] += st.tier[i].write_bytes;
		ev[w] += st.tier[i].evictions;
		r.checksum_failures += st.tier[i].checksum_failures;
		if (w == 1)
			skipped += st.tier[i].writes_skipped;
	}
	/* The DRAM tier does not count bytes in kvt_stats (it moves no I/O): DRAM reads are the
	 * get bytes it served, DRAM writes the bytes put (every put lands in DRAM first). */
	if (!rb[0])
		rb[0] = r.served_bytes[0];
	if (!wb[0] && o->dram_tokens)
		wb[0] = r.put_bytes;
	qsort(ttft, t->n, sizeof(double), kvt__cmp_double);
	qsort(ttft0, t->n, sizeof(double), kvt__cmp_double);
	qsort(rest, n_rest, sizeof(double), kvt__cmp_double);
	double m = 0, m0 = 0;
	for (size_t i = 0; i < t->n; i++)
		m += ttft[i], m0 += ttft0[i];
	m = t->n ? m / (double)t->n : 0;
	m0 = t->n ? m0 / (double)t->n : 0;
	double restore_gibps = restore_ns ? (double)restore_bytes / 1073741824.0 /
						((double)restore_ns / 1e9)
					  : 0;
	double put_gibps =
	    put_ns ? (double)r.put_bytes / 1073741824.0 / ((double)put_ns / 1e9) : 0;

	printf("real      blocks %.4f  tokens %.4f  dram %.4f  nvme %.4f  (%.2f s)\n",
	       ratio(hit_blocks, blocks), ratio(hit_tokens, input_tokens),
	       ratio(tier_tokens[0], input_tokens), ratio(tier_tokens[1], input_tokens), elapsed);
	printf("          dram read %.3f GiB written %.3f GiB; nvme read %.3f GiB written %.3f GiB "
	       "(%llu writes skipped)\n",
	       rb[0] / 1073741824.0, wb[0] / 1073741824.0, rb[1] / 1073741824.0,
	       wb[1] / 1073741824.0, (unsigned long long)skipped);
	printf("          restore measured %.3f GiB/s (p50 %.2f ms, p99 %.2f ms per request); "
	       "puts %.3f GiB/s; %llu prefetches staged %llu chunks\n",
	       restore_gibps, kvt__percentile(rest, n_rest, 0.5) * 1e3, kvt__percentile(rest, n_rest, 0.99) * 1e3,
	       put_gibps, (unsigned long long)prefetches, (unsigned long long)staged);
	printf("          prefill tokens saved %llu of %llu; TTFT p50 %.1f ms p99 %.1f ms "
	       "(no cache: %.1f / %.1f ms)\n",
	       (unsigned long long)saved, (unsigned long long)input_tokens,
	       kvt__percentile(ttft, t->n, 0.5) * 1e3, kvt__percentile(ttft, t->n, 0.99) * 1e3, kvt__percentile(ttft0, t->n, 0.5) * 1e3,
	       kvt__percentile(ttft0, t->n, 0.99) * 1e3);
	double span = t->n > 1 ? (t->req[t->n - 1].ts_ms - t->req[0].ts_ms) / 1000.0 : 0;
	/* as the simulator (src/sim.c): all of several requests at once is an unbounded load */
	double util = span > 0 ? busy / (span * ngpu) : t->n > 1 && busy > 0 ? INFINITY : 0;
	double util0 = span > 0 ? busy0 / (span * ngpu) : t->n > 1 && busy0 > 0 ? INFINITY : 0;
	replay_print_load(ngpu, util, util0, t->n, "use more --gpus");
	printf("          checksum failures %llu (%llu gets rejected, never served), payload "
	       "mismatches %llu, get errors %llu, put errors %llu\n",
	       (unsigned long long)r.checksum_failures, (unsigned long long)r.rejected, (unsigned long long)r.mismatches,
	       (unsigned long long)r.get_errors, (unsigned long long)r.put_errors);
	if (o->json) {
		char ub[32], ub0[32];
		printf("{\"mode\":\"real\",\"policy\":");
		cli_json_str(stdout, kvt__cfg_str(cfg, "dram.policy"));
		printf(",\"source\":");
		cli_json_str(stdout, o->source);
		printf(",\"model\":");
		cli_json_str(stdout, sg.model);
		printf(
		    ",\"scale\":%g,\"bytes_per_token\":%llu,\"object_bytes\":%llu,"
		    "\"block_tokens\":512,\"dram_tokens\":%llu,\"nvme_tokens\":%llu,"
		    "\"requests\":%zu,\"blocks\":%llu,\"input_tokens\":%llu,"
		    "\"block_hit_ratio\":%.6f,\"token_hit_ratio\":%.6f,"
		    "\"dram_hit_ratio\":%.6f,\"nvme_hit_ratio\":%.6f,"
		    "\"dram_token_hit_ratio\":%.6f,\"nvme_token_hit_ratio\":%.6f,"
		    "\"dram_read_bytes\":%llu,\"dram_write_bytes\":%llu,\"nvme_read_bytes\":%llu,"
		    "\"nvme_write_bytes\":%llu,\"nvme_writes_skipped\":%llu,"
		    "\"dram_evictions\":%llu,\"nvme_evictions\":%llu,"
		    "\"prefill_tokens_saved\":%llu,\"ttft_p50_ms\":%.3f,\"ttft_p99_ms\":%.3f,"
		    "\"ttft_mean_ms\":%.3f,\"nocache_ttft_p50_ms\":%.3f,"
		    "\"nocache_ttft_p99_ms\":%.3f,\"nocache_ttft_mean_ms\":%.3f,"
		    "\"gpu_busy_s\":%.3f,\"nocache_gpu_busy_s\":%.3f,\"gpus\":%u,"
		    "\"gpu_utilization\":%s,\"nocache_gpu_utilization\":%s,"
		    "\"restore_gibps\":%.4f,\"put_gibps\":%.4f,\"restore_p50_ms\":%.3f,"
		    "\"restore_p99_ms\":%.3f,\"restore_bytes\":%llu,\"put_bytes\":%llu,"
		    "\"prefetches\":%llu,\"prefetch_staged_chunks\":%llu,"
		    "\"checksum_failures\":%llu,\"rejected_gets\":%llu,\"payload_mismatches\":%llu,"
		    "\"get_errors\":%llu,\"put_errors\":%llu,\"elapsed_s\":%.3f}\n",
		    o->scale, (unsigned long long)sg.bpt, (unsigned long long)obj,
		    (unsigned long long)o->dram_tokens, (unsigned long long)o->nvme_tokens, t->n,
		    (unsigned long long)blocks, (unsigned long long)input_tokens,
		    ratio(hit_blocks, blocks), ratio(hit_tokens, input_tokens),
		    ratio(tier_blocks[0], blocks), ratio(tier_blocks[1], blocks),
		    ratio(tier_tokens[0], input_tokens), ratio(tier_tokens[1], input_tokens),
		    (unsigned long long)rb[0], (unsigned long long)wb[0], (unsigned long long)rb[1],
		    (unsigned long long)wb[1], (unsigned long long)skipped,
		    (unsigned long long)ev[0], (unsigned long long)ev[1], (unsigned long long)saved,
		    kvt__percentile(ttft, t->n, 0.5) * 1e3, kvt__percentile(ttft, t->n, 0.99) * 1e3,
		    m * 1e3, kvt__percentile(ttft0, t->n, 0.5) * 1e3,
		    kvt__percentile(ttft0, t->n, 0.99) * 1e3, m0 * 1e3, busy, busy0, ngpu,
		    replay_json_load(util, ub, sizeof(ub)),
		    replay_json_load(util0, ub0, sizeof(ub0)), restore_gibps, put_gibps,
		    kvt__percentile(rest, n_rest, 0.5) * 1e3,
		    kvt__percentile(rest, n_rest, 0.99) * 1e3, (unsigned long long)restore_bytes,
		    (unsigned long long)r.put_bytes, (unsigned long long)prefetches,
		    (unsigned long long)staged, (unsigned long long)r.checksum_failures,
		    (unsigned long long)r.rejected, (unsigned long long)r.mismatches,
		    (unsigned long long)r.get_errors, (unsigned long long)r.put_errors, elapsed);
	}
	/* bytes that did not match their key were served: that is a failure of the store */
	rc = r.mismatches ? 1 : 0;
	if (r.mismatches)
		cli_fail(CMD, "%llu chunks came back with wrong bytes",
			 (unsigned long long)r.mismatches);
out:
	for (int i = 0; i < WINDOW; i++)
		free(r.slot[i].buf);
	kvt_store_close(s);
	free(keys);
	free(tiers_of);
	free(cost_tiers);
	free(ttft);
	free(ttft0);
	free(gfree);
	free(gfree0);
	free(rest);
	return rc;
}
