/*
 * config.c - every configuration key in one declarative table (after Redis' config.c):
 * name, type, default, bounds and help. kvt_config_set() parses and validates against the
 * row; files (INI through libinih) and KVTIER_* environment variables go through the same
 * function, so there is one parser and one set of error messages. docs/CONFIG.md is the
 * same table in prose (`kvtier config --list` prints it from here).
 *
 * Adding a key: add a row below, read it where needed with kvt__cfg_u64/str/bool/double.
 */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

enum cfg_type { T_STR, T_U64, T_SIZE, T_BOOL, T_DOUBLE, T_ENUM };

struct cfg_row {
	const char *name;
	enum cfg_type type;
	const char *def;
	double min, max; /* numeric bounds (T_U64, T_SIZE, T_DOUBLE) */
	const char *choices; /* T_ENUM: "a|b|c" */
	const char *help;
};

#define U64MAX 1.8e19

/* clang-format off */
static const struct cfg_row rows[] = {
	/* store */
	{"store.tiers", T_STR, "dram,nvme", 0, 0, NULL, "ordered tier chain, fastest first: dram,nvme,fs,s3,rados,redis"},
	{"store.write_policy", T_ENUM, "write-through", 0, 0, "write-through|write-back|selective", "when deeper tiers are written: at put (behind the DRAM copy), when DRAM evicts, or after store.selective_hits hits"},
	{"store.selective_hits", T_U64, "2", 1, 1000000, NULL, "hits before a chunk is written deeper under the selective policy"},
	{"store.promote", T_BOOL, "true", 0, 0, NULL, "copy a deeper-tier hit into DRAM"},
	{"store.promote_local", T_BOOL, "true", 0, 0, NULL, "also write a hit from a deeper tier into the tiers above it (e.g. an s3 hit into nvme)"},
	{"store.max_inflight", T_U64, "4096", 1, 1048576, NULL, "operations in flight before calls return -EAGAIN"},
	{"store.tier_timeout_ms", T_U64, "10000", 1, 3600000, NULL, "ceiling of the deadline of every call to a deeper tier (read, lookup, write, remove, flush); below it the deadline is store.deadline_floor_ms + 4x what the call should cost from the tier's measured latency and bandwidth and the bytes queued ahead of it"},
	{"store.deadline_floor_ms", T_U64, "250", 1, 3600000, NULL, "allowance for jitter in the deadline of every call to a deeper tier: no call is given up on sooner"},
	{"store.max_object_bytes", T_SIZE, "4GiB", 4096, 4294967296.0, NULL, "largest object a reader accepts"},
	/* model / geometry: part of the namespace, hence of every key */
	{"model.name", T_STR, "llama3.1-8b", 0, 0, NULL, "model id, part of the namespace"},
	{"model.revision", T_STR, "main", 0, 0, NULL, "model revision, part of the namespace"},
	{"model.tenant", T_STR, "", 0, 0, NULL, "tenant salt: different tenants never share keys"},
	{"model.layers", T_U64, "32", 1, KVT_MAX_LAYERS, NULL, "layers"},
	{"model.kv_heads", T_U64, "8", 1, 4096, NULL, "KV heads of the whole model (before tensor parallelism); 1 for MLA"},
	{"model.head_dim", T_U64, "128", 1, 65536, NULL, "head dimension (MLA: latent dimension)"},
	{"model.dtype", T_ENUM, "bf16", 0, 0, "bf16|fp16|fp8|fp32", "KV element type"},
	{"model.kind", T_ENUM, "kv", 0, 0, "kv|mla", "K+V per layer, or one MLA latent"},
	{"model.chunk_tokens", T_U64, "256", 1, 65536, NULL, "tokens per chunk"},
	/* dram */
	{"dram.bytes", T_SIZE, "1GiB", 4096, 1e15, NULL, "DRAM pool size"},
	{"dram.policy", T_ENUM, "arc", 0, 0, "lru|arc", "DRAM eviction policy"},
	{"dram.hugepages", T_BOOL, "true", 0, 0, NULL, "back the pool with huge pages when available"},
	{"dram.mlock", T_BOOL, "false", 0, 0, NULL, "lock the pool into memory"},
	/* nvme */
	{"nvme.dirs", T_STR, "./kvtier-data", 0, 0, NULL, "comma-separated directories, one per drive; chunks are spread across them by key"},
	{"nvme.bytes", T_SIZE, "16GiB", 4096, 1e18, NULL, "capacity across all directories; least recently used objects are evicted beyond it"},
	{"nvme.queue_depth", T_U64, "64", 1, 4096, NULL, "I/Os in flight per ring"},
	{"nvme.fsync", T_ENUM, "data", 0, 0, "none|data|full", "before publishing: none, fdatasync, or fdatasync plus directory fsync"},
	{"nvme.direct", T_ENUM, "auto", 0, 0, "auto|on|off", "O_DIRECT: auto falls back to buffered I/O where refused (tmpfs)"},
	{"nvme.write_budget", T_SIZE, "0", 0, 1e18, NULL, "bytes written per day at most (0: unlimited); admission skips writes past it"},
	{"nvme.open_files", T_U64, "1024", 1, 1000000, NULL, "read file descriptors kept open"},
	/* faulty: the test-only fault-injecting wrapper tier */
	{"faulty.inner", T_STR, "nvme", 0, 0, NULL, "tests only: the tier the 'faulty' tier wraps"},
	{"faulty.fail_pct", T_U64, "0", 0, 100, NULL, "tests only: percent of operations reported as -EIO"},
	{"faulty.corrupt_pct", T_U64, "0", 0, 100, NULL, "tests only: percent of reads returned with a flipped byte"},
	{"faulty.delay_ms", T_U64, "0", 0, 600000, NULL, "tests only: delay of every completion"},
	{"faulty.seed", T_U64, "1", 0, 1.8e19, NULL, "tests only: fault pattern seed"},

	/* ---- fs tier (shared POSIX directory): rows below ---- */
	{"fs.dir", T_STR, "", 0, 0, NULL, "shared directory (CephFS, NFS, Lustre mount) holding objects under v1/ab/cd/<key>; instances pointing at the same directory share chunks"},
	{"fs.threads", T_U64, "8", 1, 64, NULL, "worker threads running the blocking file system calls (lookups of a batch are spread over them)"},
	{"fs.direct", T_ENUM, "auto", 0, 0, "auto|on|off", "O_DIRECT: auto falls back to buffered I/O where the file system refuses it"},
	{"fs.fsync", T_ENUM, "data", 0, 0, "none|data|full", "before publishing: none, fdatasync of the object, or fdatasync plus fsync of its directory"},

	/* ---- end fs ---- */

	/* ---- s3 tier: rows below ---- */
	{"s3.endpoint", T_STR, "", 0, 0, NULL, "S3 endpoint URL, http(s)://host[:port] (empty: KVTIER_S3_ENDPOINT)"},
	{"s3.region", T_STR, "", 0, 0, NULL, "SigV4 signing region (empty: AWS_DEFAULT_REGION, else us-east-1)"},
	{"s3.bucket", T_STR, "", 0, 0, NULL, "bucket holding the objects (empty: KVTIER_S3_BUCKET)"},
	{"s3.prefix", T_STR, "kvtier/", 0, 0, NULL, "key prefix inside the bucket; objects are <prefix><64 hex digits>"},
	{"s3.addressing", T_ENUM, "path", 0, 0, "path|virtual", "path-style (endpoint/bucket/key) or virtual-hosted (bucket.endpoint/key) URLs"},
	{"s3.credentials_file", T_STR, "", 0, 0, NULL, "AWS-style credentials file (empty: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"},
	{"s3.profile", T_STR, "default", 0, 0, NULL, "profile section of s3.credentials_file"},
	{"s3.tls_verify", T_BOOL, "true", 0, 0, NULL, "verify the server's TLS certificate and host name"},
	{"s3.ca_file", T_STR, "", 0, 0, NULL, "CA bundle for TLS verification (empty: the system's)"},
	{"s3.sign_payload", T_BOOL, "false", 0, 0, NULL, "sign the body's SHA-256 instead of sending UNSIGNED-PAYLOAD (costs a hash per write)"},
	{"s3.max_inflight", T_U64, "64", 1, 4096, NULL, "HTTP requests in flight at once (and keep-alive connections)"},
	{"s3.retries", T_U64, "3", 0, 20, NULL, "retries of a request on 5xx, SlowDown or a broken connection (exponential backoff with jitter)"},
	{"s3.timeout_ms", T_U64, "5000", 1, 3600000, NULL, "deadline of every operation, retries included"},
	{"s3.connect_timeout_ms", T_U64, "2000", 1, 3600000, NULL, "TCP/TLS connection set-up limit"},
	{"s3.create_bucket", T_BOOL, "true", 0, 0, NULL, "create the bucket at open if it does not exist"},

	/* ---- end s3 ---- */

	/* ---- rados tier: rows below ---- */
	{"rados.conf", T_STR, "", 0, 0, NULL, "ceph.conf path (empty: CEPH_CONF, else Ceph's default search)"},
	{"rados.pool", T_STR, "kvtier", 0, 0, NULL, "pool holding the objects (replicated or erasure-coded; env KVTIER_RADOS_POOL)"},
	{"rados.namespace", T_STR, "", 0, 0, NULL, "RADOS namespace inside the pool"},
	{"rados.user", T_STR, "admin", 0, 0, NULL, "Ceph client name without 'client.'"},
	{"rados.keyring", T_STR, "", 0, 0, NULL, "keyring path (empty: from the ceph.conf or CEPH_KEYRING)"},
	{"rados.create_pool", T_BOOL, "false", 0, 0, NULL, "create a replicated pool with the cluster's defaults if it does not exist"},
	{"rados.max_inflight", T_U64, "256", 1, 65536, NULL, "RADOS operations in flight at once"},
	{"rados.timeout_ms", T_U64, "5000", 1, 3600000, NULL, "deadline of every operation (an unreachable OSD or monitor gives -ETIMEDOUT)"},

	/* ---- end rados ---- */

	/* ---- redis tier: rows below ---- */
	{"redis.url", T_STR, "redis://127.0.0.1:6379", 0, 0, NULL, "redis://[:password@]host:port[/db] of a Redis or Valkey server (the password is never logged)"},
	{"redis.prefix", T_STR, "kvt:", 0, 0, NULL, "prefix of every key the tier stores"},
	{"redis.connections", T_U64, "4", 1, 64, NULL, "connections, each with its own I/O thread and a pipeline of requests in flight"},
	{"redis.timeout_ms", T_U64, "2000", 1, 3600000, NULL, "connect timeout, and the longest a request at the head of a pipeline may wait for its reply before the connection is dropped and its requests fail"},

	/* ---- end redis ---- */

	/* ---- device layer (GPU/emu): rows below ---- */
	{"device.backend", T_ENUM, "auto", 0, 0, "auto|emu|cuda", "transfer backend between an engine's GPU KV cache and chunks: auto picks cuda when a GPU is visible, else emu (host memory stands in for device memory)"},
	{"device.emu_gbps", T_DOUBLE, "0", 0, 100000, NULL, "emu backend: throttle each copy direction to this many GB/s (10^9 bytes) to stand in for PCIe; 0 = unthrottled"},

	/* ---- end device ---- */

	/* ---- cost model, admission, replay: rows below ---- */
	{"cost.model", T_STR, "", 0, 0, NULL, "cost-model preset: llama3.1-8b, llama3.1-70b, qwen2.5-7b, qwen3-32b, deepseek-v3, or custom (model.* geometry + cost.params_b); empty: model.name if it names a preset"},
	{"cost.gpu", T_STR, "h100-sxm", 0, 0, NULL, "GPU preset: h100-sxm, h200, a100-80gb, l40s; any other name needs cost.gpu_tflops and cost.h2d_gbps"},
	{"cost.mfu", T_DOUBLE, "0.5", 0.01, 1, NULL, "fraction of the GPU's dense bf16 peak a prefill reaches"},
	{"cost.gpu_tflops", T_DOUBLE, "0", 0, 1e6, NULL, "effective prefill TFLOP/s of one GPU, overriding preset peak x cost.mfu (0: preset)"},
	{"cost.h2d_gbps", T_DOUBLE, "0", 0, 1e5, NULL, "effective host-to-GPU GB/s of one GPU (0: preset)"},
	{"cost.tp", T_U64, "1", 1, 1024, NULL, "GPUs that serve one prefill (tensor parallel): throughput and host-to-GPU bandwidth scale with it"},
	{"cost.params_b", T_DOUBLE, "0", 0, 1e6, NULL, "parameters used per token, in billions (custom models; overrides a preset's when > 0)"},
	{"cost.attn_width", T_U64, "0", 0, 1048576, NULL, "custom models: query heads x head dim (0: model.kv_heads x model.head_dim)"},
	{"cost.profile", T_STR, "", 0, 0, NULL, "tier profile written by kvtier calibrate (INI); tiers it does not list keep default numbers"},
	{"admission.min_freq", T_U64, "1", 1, 255, NULL, "accesses (frequency-sketch estimate) before a chunk is written to a deeper tier; 1 admits everything"},
	{"admission.min_prefix_tokens", T_U64, "0", 0, 1e9, NULL, "do not write deeper a chunk that ends before this many prompt tokens"},
	{"admission.doorkeeper", T_BOOL, "true", 0, 0, NULL, "a Bloom filter in front of the sketch absorbs keys seen once"},
	{"admission.sketch_counters", T_U64, "0", 0, 1073741824, NULL, "counters per row of the frequency sketch (0: sized from the tier capacity)"},
	{"admission.cost_check", T_BOOL, "true", 0, 0, NULL, "do not write a chunk to a tier from which restoring it is slower than recomputing it (the store applies it only with a measured cost.profile; replay always)"},

	/* ---- end cost ---- */
};
/* clang-format on */

#define N_ROWS KVT_ARRAY_SIZE(rows)

union cfg_val {
	uint64_t u;
	double d;
	char *s;
};

struct kvt_config {
	union cfg_val v[N_ROWS];
	struct kvt_log log;
};

static int row_index(const char *name)
{
	for (size_t i = 0; i < N_ROWS; i++)
		if (!strcmp(rows[i].name, name))
			return (int)i;
	return -1;
}

int kvt__parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	if (!s || !*s || *s == '-')
		return -EINVAL;
	double v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v < 0)
		return -EINVAL;
	while (*end == ' ')
		end++;
	double mult = 1;
	switch (toupper((unsigned char)*end)) {
	case 0:
		break;
	case 'B':
		end++;
		break;
	case 'K':
		mult = 1024.0;
		end++;
		break;
	case 'M':
		mult = 1024.0 * 1024;
		end++;
		break;
	case 'G':
		mult = 1024.0 * 1024 * 1024;
		end++;
		break;
	case 'T':
		mult = 1024.0 * 1024 * 1024 * 1024;
		end++;
		break;
	default:
		return -EINVAL;
	}
	if (mult > 1) {
		if (*end == 'i' || *end == 'I')
			end++;
		if (*end == 'B' || *end == 'b')
			end++;
	}
	if (*end)
		return -EINVAL;
	v *= mult;
	if (v >= 1.8e19)
		return -EINVAL;
	*out = (uint64_t)v;
	return 0;
}

static int parse_bool(const char *s, bool *out)
{
	static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
	for (size_t i = 0; i < 4; i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

static int enum_index(const char *choices, const char *s)
{
	size_t n = strlen(s);
	int i = 0;
	for (const char *p = choices; *p; i++) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);
		if (len == n && !strncmp(p, s, n))
			return i;
		if (!bar)
			break;
		p = bar + 1;
	}
	return -1;
}

static void seterr(char *err, size_t errlen, const char *fmt, const char *a, const char *b)
{
	if (err && errlen)
		snprintf(err, errlen, fmt, a, b);
}

int kvt_config_set(struct kvt_config *cfg, const char *key, const char *value, char *err,
		   size_t errlen)
{
	if (!cfg || !key || !value)
		return -EINVAL;
	int i = row_index(key);
	if (i < 0) {
		seterr(err, errlen, "unknown configuration key '%s'%s", key, "");
		return -ENOENT;
	}
	const struct cfg_row *r = &rows[i];
	union cfg_val v = {0};
	char why[160];
	switch (r->type) {
	case T_STR:
		if (strlen(value) > 4096) {
			seterr(err, errlen, "%s: value longer than 4096 bytes%s", key, "");
			return -EINVAL;
		}
		if (!(v.s = kvt__strdup(value)))
			return -ENOMEM;
		kvt__free(cfg->v[i].s);
		cfg->v[i] = v;
		return 0;
	case T_U64:
	case T_SIZE: {
		char *end;
		if (r->type == T_SIZE) {
			if (kvt__parse_size(value, &v.u) < 0) {
				seterr(err, errlen, "%s: '%s' is not a size (e.g. 512MiB, 4G)", key,
				       value);
				return -EINVAL;
			}
		} else {
			errno = 0;
			if (!*value || *value == '-' ||
			    (v.u = strtoull(value, &end, 10), errno || *end)) {
				seterr(err, errlen, "%s: '%s' is not a non-negative integer", key,
				       value);
				return -EINVAL;
			}
		}
		if ((double)v.u < r->min || (double)v.u > r->max) {
			snprintf(why, sizeof(why), "%s: %s is out of range [%.0f, %.0f]", key, value,
				 r->min, r->max);
			seterr(err, errlen, "%s%s", why, "");
			return -EINVAL;
		}
		break;
	}
	case T_DOUBLE: {
		char *end;
		errno = 0;
		v.d = strtod(value, &end);
		if (errno || end == value || *end || !isfinite(v.d) || v.d < r->min ||
		    v.d > r->max) {
			snprintf(why, sizeof(why), "%s: '%.60s' is not a number in [%g, %g]", key,
				 value, r->min, r->max);
			seterr(err, errlen, "%s%s", why, "");
			return -EINVAL;
		}
		break;
	}
	case T_BOOL: {
		bool b;
		if (parse_bool(value, &b) < 0) {
			seterr(err, errlen, "%s: '%s' is not a boolean (true/false)", key, value);
			return -EINVAL;
		}
		v.u = b;
		break;
	}
	case T_ENUM: {
		int e = enum_index(r->choices, value);
		if (e < 0) {
			snprintf(why, sizeof(why), "%s: '%.60s' is not one of %s", key, value,
				 r->choices);
			seterr(err, errlen, "%s%s", why, "");
			return -EINVAL;
		}
		v.u = (uint64_t)e;
		break;
	}
	}
	cfg->v[i] = v;
	return 0;
}

int kvt_config_get(const struct kvt_config *cfg, const char *key, char *buf, size_t len)
{
	int i = row_index(key);
	if (i < 0)
		return -ENOENT;
	const struct cfg_row *r = &rows[i];
	int n = 0;
	switch (r->type) {
	case T_STR:
		n = snprintf(buf, len, "%s", cfg->v[i].s ? cfg->v[i].s : "");
		break;
	case T_U64:
	case T_SIZE:
		n = snprintf(buf, len, "%llu", (unsigned long long)cfg->v[i].u);
		break;
	case T_DOUBLE:
		n = snprintf(buf, len, "%g", cfg->v[i].d);
		break;
	case T_BOOL:
		n = snprintf(buf, len, "%s", cfg->v[i].u ? "true" : "false");
		break;
	case T_ENUM: {
		const char *p = r->choices;
		for (uint64_t k = 0; k < cfg->v[i].u; k++)
			p = strchr(p, '|') + 1;
		const char *bar = strchr(p, '|');
		int l = bar ? (int)(bar - p) : (int)strlen(p);
		n = snprintf(buf, len, "%.*s", l, p);
		break;
	}
	}
	return (n < 0 || (size_t)n >= len) ? -ENOSPC : n;
}

int kvt_config_create(struct kvt_config **out)
{
	struct kvt_config *cfg = kvt__calloc(1, sizeof(*cfg));
	if (!cfg)
		return -ENOMEM;
	cfg->log.level = KVT_LOG_WARN;
	for (size_t i = 0; i < N_ROWS; i++) {
		char err[200];
		int rc = kvt_config_set(cfg, rows[i].name, rows[i].def, err, sizeof(err));
		if (rc < 0) { /* a bad default is a bug in the table */
			kvt_config_destroy(cfg);
			return rc;
		}
	}
	*out = cfg;
	return 0;
}

void kvt_config_destroy(struct kvt_config *cfg)
{
	if (!cfg)
		return;
	for (size_t i = 0; i < N_ROWS; i++)
		if (rows[i].type == T_STR)
			kvt__free(cfg->v[i].s);
	kvt__free(cfg);
}

int kvt__config_copy(const struct kvt_config *src, struct kvt_config **out)
{
	struct kvt_config *cfg = kvt__calloc(1, sizeof(*cfg));
	if (!cfg)
		return -ENOMEM;
	*cfg = *src;
	for (size_t i = 0; i < N_ROWS; i++) {
		if (rows[i].type != T_STR)
			continue;
		cfg->v[i].s = kvt__strdup(src->v[i].s ? src->v[i].s : "");
		if (!cfg->v[i].s) {
			for (size_t j = 0; j < i; j++)
				if (rows[j].type == T_STR)
					kvt__free(cfg->v[j].s);
			kvt__free(cfg);
			return -ENOMEM;
		}
	}
	*out = cfg;
	return 0;
}

void kvt_config_set_log(struct kvt_config *cfg, kvt_log_fn fn, void *arg, int level)
{
	cfg->log.fn = fn;
	cfg->log.arg = arg;
	cfg->log.level = level;
}

const struct kvt_log *kvt__cfg_log(const struct kvt_config *cfg)
{
	return &cfg->log;
}

const char *kvt_config_key_info(unsigned i, const char **default_value, const char **help)
{
	if (i >= N_ROWS)
		return NULL;
	if (default_value)
		*default_value = rows[i].def;
	if (help)
		*help = rows[i].help;
	return rows[i].name;
}

static int must_index(const char *key)
{
	int i = row_index(key);
	if (i < 0) {
		/* A typo in the library's own code: fail loudly in debug builds. */
		assert(!"unknown configuration key");
		return 0;
	}
	return i;
}

uint64_t kvt__cfg_u64(const struct kvt_config *cfg, const char *key)
{
	return cfg->v[must_index(key)].u;
}

double kvt__cfg_double(const struct kvt_config *cfg, const char *key)
{
	return cfg->v[must_index(key)].d;
}

bool kvt__cfg_bool(const struct kvt_config *cfg, const char *key)
{
	return cfg->v[must_index(key)].u != 0;
}

const char *kvt__cfg_str(const struct kvt_config *cfg, const char *key)
{
	int i = must_index(key);
	if (rows[i].type == T_ENUM) {
		/* Enum values read as their text: stable storage in a per-row static table. */
		static __thread char buf[64];
		kvt_config_get(cfg, key, buf, sizeof(buf));
		return buf;
	}
	return cfg->v[i].s ? cfg->v[i].s : "";
}

struct ini_ctx {
	struct kvt_config *cfg;
	char *err;
	size_t errlen;
	int rc;
	char why[256];
};

/* libinih reports the line of the first handler failure as ini_parse_file's result. */
static int on_ini_pair(void *user, const char *section, const char *name, const char *value)
{
	struct ini_ctx *c = user;
	char key[160], why[200];
	if (!section || !*section) {
		seterr(c->why, sizeof(c->why), "'%s' outside a [section]%s", name, "");
		c->rc = -EINVAL;
		return 0;
	}
	snprintf(key, sizeof(key), "%s.%s", section, name);
	int rc = kvt_config_set(c->cfg, key, value, why, sizeof(why));
	if (rc < 0) {
		snprintf(c->why, sizeof(c->why), "%s", why);
		c->rc = rc == -ENOENT ? -EINVAL : rc;
		return 0;
	}
	return 1;
}

int kvt_config_load_file(struct kvt_config *cfg, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		int e = errno;
		seterr(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	struct ini_ctx c = {cfg, err, errlen, 0, ""};
	int line = ini_parse_file(f, on_ini_pair, &c);
	fclose(f);
	if (line == 0)
		return 0;
	if (err && errlen)
		snprintf(err, errlen, "%s:%d: %s", path, line, c.rc < 0 ? c.why : "syntax error");
	return c.rc < 0 ? c.rc : -EINVAL;
}

int kvt_config_apply_env(struct kvt_config *cfg, char *err, size_t errlen)
{
	for (size_t i = 0; i < N_ROWS; i++) {
		char env[128] = "KVTIER_";
		size_t o = strlen(env);
		for (const char *p = rows[i].name; *p && o < sizeof(env) - 1; p++)
			env[o++] = *p == '.' ? '_' : (char)toupper((unsigned char)*p);
		env[o] = 0;
		const char *v = getenv(env);
		if (!v)
			continue;
		char why[256];
		int rc = kvt_config_set(cfg, rows[i].name, v, why, sizeof(why));
		if (rc < 0) {
			seterr(err, errlen, "%s: %s", env, why);
			return rc;
		}
	}
	return 0;
}

int kvt__split_list(const char *list, int (*fn)(void *arg, const char *item), void *arg)
{
	char item[4096];
	const char *p = list;
	while (p && *p) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		while (len && isspace((unsigned char)*p)) {
			p++;
			len--;
		}
		while (len && isspace((unsigned char)p[len - 1]))
			len--;
		if (len >= sizeof(item))
			return -EINVAL;
		if (len) {
			memcpy(item, p, len);
			item[len] = 0;
			int rc = fn(arg, item);
			if (rc)
				return rc;
		}
		p = comma ? comma + 1 : NULL;
	}
	return 0;
}
