/*
 * cost.c - restore or recompute. For a prefix whose KV sits in some tier, restoring it
 * costs the tier's first-byte latency plus moving its bytes through two stages, the tier
 * read and the host->GPU copy, pipelined layer by layer (the object is layer-major, so
 * layer l can cross PCIe while layer l+1 is still being read); recomputing it costs its
 * prefill FLOPs at the GPU's effective throughput. The scheduler-facing answer is how many
 * leading chunks of a lookup to load: the k that minimises restore(first k) + recompute
 * (the rest), evaluated exactly for every k because the recompute cost of a token grows
 * with its position (the attention term) while the restore cost of a chunk does not.
 *
 * Tier numbers come from a profile that `kvtier calibrate` measures on the machine, with
 * conservative defaults for tiers it has not measured. Everything here is arithmetic on
 * doubles: no I/O except reading the profile, no state after creation, thread-safe.
 * docs/COST_MODEL.md states the formulas with a worked example.
 */
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "cost.h"

struct kvt_cost {
	struct kvt_cost_params p;
	double bytes_per_token;
};

/* clang-format off */
static const struct kvt_tier_profile default_profiles[] = {
	/* name, latency, read B/s, write B/s: a server-class local setup; calibrate replaces
	 * them with measurements */
	/* DMA source: the host memory bus; reads are capped at the host->GPU link when the
	 * model is built. 10 us: a pinned cudaMemcpyAsync's launch and DMA start */
	{"dram", 10e-6, 100e9, 20e9, false},
	{"nvme", 100e-6, 6e9, 3e9, false},    /* one PCIe Gen4 data-center drive */
	{"fs", 1e-3, 2e9, 1e9, false},        /* shared file system over a 25 GbE link */
	{"s3", 20e-3, 1e9, 0.5e9, false},     /* object store, several parallel range GETs */
	{"redis", 300e-6, 1e9, 1e9, false},   /* one connection set over 10-25 GbE */
	{"rados", 2e-3, 1.5e9, 1e9, false},   /* Ceph pool, replicated */
};
/* clang-format on */

void kvt__tier_profile_default(const char *name, struct kvt_tier_profile *p)
{
	const struct kvt_tier_profile *d = &default_profiles[1];
	for (size_t i = 0; i < KVT_ARRAY_SIZE(default_profiles); i++)
		if (!strcmp(name, default_profiles[i].name))
			d = &default_profiles[i];
	*p = *d;
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->measured = false;
}

/* ------------------------------------------------------------------ profile file */

struct prof_ctx {
	struct kvt_tier_profile *p;
	int n;
	struct kvt_engine_profile *e; /* NULL: [engine] is skipped */
	char why[200];
};

static int on_engine(struct prof_ctx *c, const char *name, double v)
{
	if (!c->e)
		return 1;
	if (!strcmp(name, "mfu") && v <= 1)
		c->e->mfu = v;
	else if (!strcmp(name, "restore_fixed_us"))
		c->e->restore_fixed_s = v * 1e-6;
	else if (!strcmp(name, "layer_launch_us"))
		c->e->layer_launch_s = v * 1e-6;
	else if (!strcmp(name, "h2d_gbps"))
		c->e->h2d_Bps = v * 1e9;
	else {
		snprintf(c->why, sizeof(c->why), "[engine]: unknown key or bad value '%.40s'", name);
		return 0;
	}
	return 1;
}

static int on_prof(void *user, const char *section, const char *name, const char *value)
{
	struct prof_ctx *c = user;
	if (strncmp(section, "tier.", 5) != 0 && strcmp(section, "engine") != 0) {
		snprintf(c->why, sizeof(c->why),
			 "section [%.40s]: expected [tier.<name>] or [engine]",
			 section);
		return 0;
	}
	double v;
	if (kvt__parse_double(value, &v) < 0 || v <= 0 || v > 1e12) {
		snprintf(c->why, sizeof(c->why), "%.40s: '%.40s' is not a positive number", name,
			 value);
		return 0;
	}
	if (!strcmp(section, "engine"))
		return on_engine(c, name, v);
	struct kvt_tier_profile *t = NULL;
	for (int i = 0; i < c->n; i++)
		if (!strcmp(c->p[i].name, section + 5))
			t = &c->p[i];
	if (!t)
		return 1; /* a tier this chain does not use */
	if (!strcmp(name, "latency_us"))
		t->latency_s = v * 1e-6;
	else if (!strcmp(name, "read_gbps"))
		t->read_Bps = v * 1e9;
	else if (!strcmp(name, "write_gbps"))
		t->write_Bps = v * 1e9;
	else if (strcmp(name, "objects") && strcmp(name, "object_bytes")) {
		snprintf(c->why, sizeof(c->why), "unknown key '%.40s'", name);
		return 0;
	}
	t->measured = true;
	return 1;
}

static int profile_parse(const char *path, struct prof_ctx *c, char *err, size_t errlen)
{
	int line, rc = kvt__ini_load(path, KVT_CONFIG_MAX_FILE_BYTES, on_prof, c, err, errlen,
				     &line); /* bounded: a regular file (not /dev/zero), no NUL */
	if (rc < 0)
		return rc;
	if (line == 0)
		return 0;
	if (err && errlen)
		snprintf(err, errlen, "%s:%d: %s", path, line, c->why[0] ? c->why : "syntax error");
	return -EINVAL;
}

int kvt__profile_load_engine(const char *path, struct kvt_engine_profile *e, char *err,
			     size_t errlen)
{
	struct prof_ctx c = {NULL, 0, e, ""};
	return profile_parse(path, &c, err, errlen);
}

int kvt__profile_load(const char *path, struct kvt_tier_profile *p, int n, char *err, size_t errlen)
{
	struct prof_ctx c = {p, n, NULL, ""};
	return profile_parse(path, &c, err, errlen);
}

int kvt__profile_write(FILE *f, const struct kvt_tier_profile *p, int n)
{
	fprintf(f, "# kvtier tier profile (kvtier calibrate); read by cost.profile\n");
	for (int i = 0; i < n; i++)
		fprintf(f, "\n[tier.%s]\nlatency_us = %.3f\nread_gbps = %.4f\nwrite_gbps = %.4f\n",
			p[i].name, p[i].latency_s * 1e6, p[i].read_Bps / 1e9, p[i].write_Bps / 1e9);
	return ferror(f) ? -EIO : 0;
}

/* ------------------------------------------------------------------ construction */

static int add_tier(void *arg, const char *name)
{
	struct kvt_cost_params *p = arg;
	if (p->n_tiers >= KVT_MAX_TIERS || strlen(name) >= sizeof(p->tier[0].name))
		return -EINVAL;
	for (const unsigned char *c = (const unsigned char *)name; *c; c++)
		if (*c <= 0x20 || *c >= 0x7f) /* a tier's name: printable, no blank */
			return -EINVAL;
	kvt__tier_profile_default(name, &p->tier[p->n_tiers++]);
	return 0;
}

int kvt__cost_params_preset(const char *model, const char *gpu, double mfu, int tp,
			    const char *tiers, struct kvt_cost_params *out)
{
	const struct kvt_model_preset *m = kvt__model_find(model);
	const struct kvt_gpu_preset *g = kvt__gpu_find(gpu);
	if (!m || !g || !(mfu > 0 && mfu <= 1) || tp < 1)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->model = *m;
	out->dtype_bytes = 2;
	out->flops_per_s = g->peak_tflops * 1e12 * mfu * tp;
	out->h2d_Bps = g->h2d_gbps * 1e9 * tp;
	out->restore_fixed_s = KVT_DEFAULT_RESTORE_FIXED_S;
	out->layer_launch_s = KVT_DEFAULT_LAYER_LAUNCH_S;
	return kvt__split_list(tiers ? tiers : "dram,nvme", add_tier, out);
}

static bool params_ok(const struct kvt_cost_params *p)
{
	const struct kvt_model_preset *m = &p->model;
	if (!m->layers || !m->head_dim || !m->kv_heads || !m->q_heads || !m->qk_dim || !m->v_dim)
		return false;
	if (!(m->active_params > 0) || !(p->flops_per_s > 0) || !(p->h2d_Bps > 0))
		return false;
	if (!p->dtype_bytes || p->n_tiers < 0 || p->n_tiers > KVT_MAX_TIERS)
		return false;
	if (!(p->restore_fixed_s >= 0) || !(p->layer_launch_s >= 0))
		return false;
	for (int i = 0; i < p->n_tiers; i++)
		if (!(p->tier[i].read_Bps > 0) || !(p->tier[i].latency_s >= 0))
			return false;
	return true;
}

int kvt__cost_create_params(const struct kvt_cost_params *p, struct kvt_cost **out)
{
	if (!p || !out || !params_ok(p))
		return -EINVAL;
	struct kvt_cost *c = kvt__calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->p = *p;
	/* every restore crosses the host->GPU link: DRAM cannot be read faster than that */
	for (int i = 0; i < c->p.n_tiers; i++)
		if (!strcmp(c->p.tier[i].name, "dram") && c->p.tier[i].read_Bps > c->p.h2d_Bps)
			c->p.tier[i].read_Bps = c->p.h2d_Bps;
	const struct kvt_model_preset *m = &p->model;
	double per_layer =
	    m->kind == KVT_KIND_MLA ? (double)m->head_dim : 2.0 * m->kv_heads * m->head_dim;
	c->bytes_per_token = per_layer * m->layers * p->dtype_bytes;
	*out = c;
	return 0;
}

const struct kvt_cost_params *kvt__cost_params(const struct kvt_cost *c)
{
	return &c->p;
}

static uint32_t dtype_size(const char *s)
{
	if (!strcmp(s, "fp8"))
		return 1;
	if (!strcmp(s, "fp32"))
		return 4;
	return 2;
}

int kvt_cost_create(const struct kvt_config *cfg, struct kvt_cost **out)
{
	if (!cfg || !out)
		return -EINVAL;
	const struct kvt_log *log = kvt__cfg_log(cfg);
	struct kvt_cost_params p;
	memset(&p, 0, sizeof(p));

	const char *mname = kvt__cfg_str(cfg, "cost.model");
	if (!*mname)
		mname = kvt__model_find(kvt__cfg_str(cfg, "model.name"))
			    ? kvt__cfg_str(cfg, "model.name")
			    : "custom";
	const struct kvt_model_preset *m = kvt__model_find(mname);
	double params_b = kvt__cfg_double(cfg, "cost.params_b");
	if (m) {
		p.model = *m;
		if (params_b > 0)
			p.model.active_params = params_b * 1e9;
	} else if (!strcasecmp(mname, "custom")) {
		p.model.name = "custom";
		p.model.kind =
		    strcmp(kvt__cfg_str(cfg, "model.kind"), "mla") ? KVT_KIND_KV : KVT_KIND_MLA;
		p.model.layers = (uint32_t)kvt__cfg_u64(cfg, "model.layers");
		p.model.kv_heads = (uint32_t)kvt__cfg_u64(cfg, "model.kv_heads");
		p.model.head_dim = (uint32_t)kvt__cfg_u64(cfg, "model.head_dim");
		uint64_t width = kvt__cfg_u64(cfg, "cost.attn_width");
		if (!width)
			width = (uint64_t)p.model.kv_heads * p.model.head_dim;
		p.model.q_heads = 1;
		p.model.qk_dim = p.model.v_dim = (uint32_t)KVT_MIN(width, UINT32_MAX);
		p.model.params = p.model.active_params = params_b * 1e9;
		if (!(params_b > 0)) {
			KVT_ERR(log, "cost model: cost.model=custom needs cost.params_b");
			return -EINVAL;
		}
	} else {
		KVT_ERR(log, "cost model: unknown model preset '%s'", mname);
		return -EINVAL;
	}
	p.dtype_bytes = dtype_size(kvt__cfg_str(cfg, "model.dtype"));

	const char *gname = kvt__cfg_str(cfg, "cost.gpu");
	const struct kvt_gpu_preset *g = kvt__gpu_find(gname);
	double tflops = kvt__cfg_double(cfg, "cost.gpu_tflops");
	double h2d = kvt__cfg_double(cfg, "cost.h2d_gbps");
	double mfu = kvt__cfg_double(cfg, "cost.mfu");
	double tp = (double)kvt__cfg_u64(cfg, "cost.tp");
	if (!g && !(tflops > 0 && h2d > 0)) {
		KVT_ERR(log,
			"cost model: unknown GPU '%s' (a custom GPU needs cost.gpu_tflops "
			"and cost.h2d_gbps)",
			gname);
		return -EINVAL;
	}
	p.restore_fixed_s = kvt__cfg_double(cfg, "cost.restore_fixed_us") * 1e-6;
	p.layer_launch_s = kvt__cfg_double(cfg, "cost.layer_launch_us") * 1e-6;
	const char *prof = kvt__cfg_str(cfg, "cost.profile");
	if (*prof) { /* an [engine] section overrides the keys above */
		struct kvt_engine_profile e = {-1, -1, -1, -1};
		char err[256];
		int erc = kvt__profile_load_engine(prof, &e, err, sizeof(err));
		if (erc < 0) {
			KVT_ERR(log, "cost model: %s", err);
			return erc;
		}
		if (e.mfu > 0 && g)
			mfu = e.mfu, tflops = 0;
		if (e.h2d_Bps > 0)
			h2d = e.h2d_Bps / 1e9;
		if (e.restore_fixed_s >= 0)
			p.restore_fixed_s = e.restore_fixed_s;
		if (e.layer_launch_s >= 0)
			p.layer_launch_s = e.layer_launch_s;
	}
	p.flops_per_s = (tflops > 0 ? tflops : g->peak_tflops * mfu) * 1e12 * tp;
	p.h2d_Bps = (h2d > 0 ? h2d : g->h2d_gbps) * 1e9 * tp;

	int rc = kvt__split_list(kvt__cfg_str(cfg, "store.tiers"), add_tier, &p);
	if (rc < 0) {
		KVT_ERR(log, "cost model: bad store.tiers list");
		return rc;
	}
	if (*prof) {
		char err[256];
		rc = kvt__profile_load(prof, p.tier, p.n_tiers, err, sizeof(err));
		if (rc < 0) {
			KVT_ERR(log, "cost model: %s", err);
			return rc;
		}
	}
	return kvt__cost_create_params(&p, out);
}

void kvt_cost_destroy(struct kvt_cost *c)
{
	kvt__free(c);
}

/* ------------------------------------------------------------------ formulas */

uint64_t kvt_cost_kv_bytes_per_token(const struct kvt_cost *c)
{
	return (uint64_t)c->bytes_per_token;
}

double kvt_cost_prefill_flops(const struct kvt_cost *c, uint64_t begin, uint64_t end)
{
	if (end <= begin)
		return 0;
	const struct kvt_model_preset *m = &c->p.model;
	double b = (double)begin, e = (double)end;
	double linear = 2.0 * m->active_params * (e - b);
	/* token i attends to i+1 positions: QK^T and AV cost 2(i+1)(qk_dim + v_dim) per head
	 * and layer; summed over i in [b, e) that is (e(e+1) - b(b+1)) * heads * (qk+v). */
	double attn = (double)m->layers * m->q_heads * ((double)m->qk_dim + m->v_dim) *
		      (e * (e + 1) - b * (b + 1));
	return linear + attn;
}

double kvt_cost_recompute_s(const struct kvt_cost *c, uint64_t begin, uint64_t end)
{
	return kvt_cost_prefill_flops(c, begin, end) / c->p.flops_per_s;
}

/* Two stages, tier read (S1) and host->GPU (S2), over L layer-sized pieces: the pipeline
 * finishes after the slower stage has handled every layer plus the faster stage's share of
 * one layer (the first piece through it, or the last one out). */
static double pipeline(double s1, double s2, uint32_t layers)
{
	double hi = s1 > s2 ? s1 : s2, lo = s1 > s2 ? s2 : s1;
	return hi + lo / (layers ? layers : 1);
}

double kvt__cost_restore_mix(const struct kvt_cost *c, const uint64_t *bytes)
{
	double lat = 0, s1 = 0, total = 0;
	for (int i = 0; i < c->p.n_tiers; i++) {
		if (!bytes[i])
			continue;
		const struct kvt_tier_profile *t = &c->p.tier[i];
		/* tiers are read at once: the slowest one sets the read stage */
		lat = KVT_MAX(lat, t->latency_s);
		s1 = KVT_MAX(s1, (double)bytes[i] / t->read_Bps);
		total += (double)bytes[i];
	}
	if (total == 0)
		return 0;
	return c->p.restore_fixed_s + c->p.layer_launch_s * c->p.model.layers + lat +
	       pipeline(s1, total / c->p.h2d_Bps, c->p.model.layers);
}

double kvt_cost_restore_s(const struct kvt_cost *c, int tier, uint64_t tokens)
{
	if (tier < 0 || tier >= c->p.n_tiers || !tokens)
		return tier < 0 || tier >= c->p.n_tiers ? INFINITY : 0;
	uint64_t bytes[KVT_MAX_TIERS] = {0};
	bytes[tier] = (uint64_t)(c->bytes_per_token * (double)tokens);
	return kvt__cost_restore_mix(c, bytes);
}

int kvt_cost_tier_count(const struct kvt_cost *c)
{
	return c->p.n_tiers;
}

const char *kvt_cost_tier_name(const struct kvt_cost *c, int tier)
{
	return tier >= 0 && tier < c->p.n_tiers ? c->p.tier[tier].name : NULL;
}

int kvt_cost_tier_index(const struct kvt_cost *c, const char *name)
{
	for (int i = 0; i < c->p.n_tiers; i++)
		if (!strcmp(c->p.tier[i].name, name))
			return i;
	return -ENOENT;
}

int kvt_cost_plan(const struct kvt_cost *c, const int8_t *tiers, size_t n_hit,
		  uint32_t chunk_tokens, uint64_t prompt_tokens, struct kvt_cost_plan *out)
{
	if (!c || !out || (!tiers && n_hit) || !chunk_tokens)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	/* the engine must run at least the last prompt token to produce logits */
	uint64_t must = prompt_tokens ? prompt_tokens - 1 : 0;
	out->no_cache_s = kvt_cost_recompute_s(c, 0, prompt_tokens);
	out->recompute_s = out->total_s = out->no_cache_s;

	uint64_t bytes[KVT_MAX_TIERS] = {0};
	uint64_t loaded = 0;
	for (size_t k = 0; k < n_hit && loaded < prompt_tokens; k++) {
		int t = tiers[k];
		if (t < 0 || t >= c->p.n_tiers)
			break; /* the hit prefix ends at the first chunk without a usable tier */
		uint64_t n = KVT_MIN((uint64_t)chunk_tokens, prompt_tokens - loaded);
		loaded += n;
		bytes[t] += (uint64_t)(c->bytes_per_token * (double)n);
		double restore = kvt__cost_restore_mix(c, bytes);
		double recompute = kvt_cost_recompute_s(c, KVT_MIN(loaded, must), prompt_tokens);
		/* <=: on a tie, load (it frees the GPU for other requests) */
		if (restore + recompute <= out->total_s) {
			out->load_chunks = (uint32_t)(k + 1);
			out->load_tokens = loaded;
			out->restore_s = restore;
			out->recompute_s = recompute;
			out->total_s = restore + recompute;
			memcpy(out->tier_bytes, bytes, sizeof(bytes));
		}
	}
	return (int)out->load_chunks;
}

long kvt_cost_breakeven_tokens(const struct kvt_cost *c, int tier, uint64_t max_tokens)
{
	if (!c || tier < 0 || tier >= c->p.n_tiers || !max_tokens)
		return -EINVAL;
		/* recompute(n) - restore(n) is convex in n (quadratic minus linear) and negative at
		 * 0 (latency), so the n where restore starts to win is unique: bisect for it. */
#define WINS(n) (kvt_cost_restore_s(c, tier, (n)) < kvt_cost_recompute_s(c, 0, (n)))
	if (!WINS(max_tokens))
		return -ERANGE;
	uint64_t lo = 0, hi = max_tokens; /* WINS(hi), !WINS(lo) (0 tokens never wins) */
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (WINS(mid))
			hi = mid;
		else
			lo = mid;
	}
#undef WINS
	return (long)hi;
}
