/*
 * cmd_bench.c - `kvtier bench`: throughput and latency of one tier through the real store
 * API (kvt_put / kvt_get with many operations in flight), next to a reference measured in
 * the same run on the same machine: memcpy for DRAM, fio (io_uring, O_DIRECT, same block
 * size, queue depth and file count) for NVMe and shared directories. Machines here are
 * shared and noisy, so only the ratio to the reference means anything.
 *
 * The benchmark geometry is derived from --chunk-bytes so that an object is exactly one
 * 4 KiB header plus chunk-bytes of layers (no padding): the I/O size is chunk-bytes + 4 KiB,
 * and fio is run with that block size.
 *
 * Phases: write (read-pct 0), read (100) and mixed (--mixed-pct, default 70) unless
 * --read-pct picks one. The last line with --json is one JSON object.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

struct bench_opts {
	const char *tier;
	unsigned long long chunk_bytes;
	unsigned queue_depth;
	double seconds;
	int read_pct;  /* -1: all phases */
	int mixed_pct;
	int rounds; /* kvtier and reference alternate, so both see the same machine noise */
	unsigned long long set_bytes; /* working set */
	bool no_ref;
	struct cli_store_opts so;
};

/* ------------------------------------------------------------ store phases */

struct slot {
	struct run *r;
	void *buf;
	bool is_read;
	size_t k;
	uint64_t t0;
};

struct run {
	struct kvt_store *s;
	struct kvt_key *keys;
	size_t n_keys;
	size_t payload;
	uint32_t n_tokens;
	int read_pct;
	uint8_t *busy; /* keys an operation in flight is using */
	uint64_t end_ns;
	uint64_t rng;
	uint64_t reads, writes, errors, inflight;
	struct lat rl, wl;
	int last_err;
};


static void submit(struct slot *sl);

static void op_done(void *arg, const struct kvt_result *res)
{
	struct slot *sl = arg;
	struct run *r = sl->r;
	double us = (double)(kvt__now_ns() - sl->t0) / 1000.0;
	r->inflight--;
	r->busy[sl->k] = 0;
	if (res->status < 0) {
		r->errors++;
		r->last_err = res->status;
	} else if (sl->is_read) {
		r->reads++;
		lat_add(&r->rl, us);
	} else {
		r->writes++;
		lat_add(&r->wl, us);
	}
	if (kvt__now_ns() < r->end_ns)
		submit(sl);
}

/* Start the operation chosen for a slot; on failure the slot goes idle. */
static void start_op(struct slot *sl)
{
	struct run *r = sl->r;
	const struct kvt_key *key = &r->keys[sl->k];
	sl->t0 = kvt__now_ns();
	int rc;
	for (;;) {
		rc = sl->is_read ? kvt_get(r->s, key, 0, 0, sl->buf, r->payload, op_done, sl)
				 : kvt_put(r->s, key, NULL, r->n_tokens, sl->buf, r->payload, op_done,
					   sl);
		if (rc != -EAGAIN)
			break;
		kvt_poll(r->s, 1);
	}
	if (rc < 0) {
		r->errors++;
		r->last_err = rc;
		r->busy[sl->k] = 0;
		r->inflight--;
	}
}

static void removed(void *arg, const struct kvt_result *res)
{
	(void)res;
	start_op(arg);
}

/* Pick a key no other slot is using (a write replaces its object, so a read of the same
 * key at the same moment could miss), then read it, or replace it: a content-addressed
 * store skips a put of a key it holds, so a write first removes the old object - the
 * steady state of a full cache, where every new chunk replaces an old one. */
static void submit(struct slot *sl)
{
	struct run *r = sl->r;
	size_t k;
	do
		k = bench_rnd(&r->rng) % r->n_keys;
	while (r->busy[k]);
	r->busy[k] = 1;
	sl->k = k;
	sl->is_read = (int)(bench_rnd(&r->rng) % 100) < r->read_pct;
	r->inflight++;
	if (sl->is_read || kvt_remove(r->s, &r->keys[k], removed, sl) < 0)
		start_op(sl);
}

static void phase_fill(struct run *r, struct phase_result *out, double secs)
{
	struct lat *ls[2] = {&r->rl, &r->wl};
	for (int i = 0; i < 2; i++)
		if (ls[i]->n) /* qsort(NULL, 0, ...) is UB: a phase may have no reads or writes */
			qsort(ls[i]->v, ls[i]->n, sizeof(double), cmp_double);
	double gib = (double)r->payload / (1024.0 * 1024 * 1024);
	out->read_iops = (double)r->reads / secs;
	out->write_iops = (double)r->writes / secs;
	out->read_gibps = out->read_iops * gib;
	out->write_gibps = out->write_iops * gib;
	out->read_p50 = lat_pct(&r->rl, 50);
	out->read_p99 = lat_pct(&r->rl, 99);
	out->read_p999 = lat_pct(&r->rl, 99.9);
	out->write_p50 = lat_pct(&r->wl, 50);
	out->write_p99 = lat_pct(&r->wl, 99);
	out->write_p999 = lat_pct(&r->wl, 99.9);
	out->errors = r->errors;
}

/* Run one phase: queue_depth operations in flight for `seconds`. */
static int run_phase(struct kvt_store *s, struct kvt_key *keys, size_t n_keys, size_t payload,
		     uint32_t n_tokens, unsigned qd, double seconds, int read_pct,
		     struct phase_result *out)
{
	struct run r = {.s = s, .keys = keys, .n_keys = n_keys, .payload = payload,
			.n_tokens = n_tokens, .read_pct = read_pct,
			.rng = 0x9e3779b97f4a7c15ull};
	if (qd > n_keys / 2)
		qd = (unsigned)(n_keys / 2); /* leave idle keys to pick from */
	struct slot *slots = calloc(qd, sizeof(*slots));
	r.busy = calloc(n_keys, 1);
	if (!slots || !r.busy) {
		free(slots);
		free(r.busy);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < qd; i++) {
		if (posix_memalign(&slots[i].buf, KVT_ALIGN, payload)) {
			for (unsigned j = 0; j < i; j++)
				free(slots[j].buf);
			free(slots);
			return -ENOMEM;
		}
		memset(slots[i].buf, (int)(0x11 * (i + 1)), payload);
		slots[i].r = &r;
	}
	uint64_t t0 = kvt__now_ns();
	r.end_ns = t0 + (uint64_t)(seconds * 1e9);
	for (unsigned i = 0; i < qd; i++)
		submit(&slots[i]);
	while (r.inflight)
		kvt_poll(s, 100);
	double secs = (double)(kvt__now_ns() - t0) / 1e9;
	phase_fill(&r, out, secs);
	if (r.errors)
		fprintf(stderr, "kvtier bench: %llu operations failed (last: %s)\n",
			(unsigned long long)r.errors, kvt_strerror(r.last_err));
	for (unsigned i = 0; i < qd; i++)
		free(slots[i].buf);
	free(slots);
	free(r.busy);
	free(r.rl.v);
	free(r.wl.v);
	return 0;
}

static const char *reference_name(const char *tier)
{
	return !strcmp(tier, "dram")    ? "memcpy"
	       : !strcmp(tier, "redis") ? "redis-benchmark"
	       : !strcmp(tier, "s3")    ? "curl --parallel"
	       : !strcmp(tier, "rados") ? "rados bench"
					: "fio io_uring O_DIRECT";
}

/* Rounds of equal length: throughput is the mean, a percentile the median of the rounds'. */
static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void combine(const struct phase_result *r, int n, struct phase_result *out)
{
	double v[100];
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < n; i++) {
		out->read_gibps += r[i].read_gibps / n;
		out->write_gibps += r[i].write_gibps / n;
		out->read_iops += r[i].read_iops / n;
		out->write_iops += r[i].write_iops / n;
		out->errors += r[i].errors;
	}
#define MED(field)                                                                            \
	do {                                                                                  \
		for (int i = 0; i < n; i++)                                                   \
			v[i] = r[i].field;                                                    \
		out->field = median(v, n);                                                    \
	} while (0)
	MED(read_p50);
	MED(read_p99);
	MED(read_p999);
	MED(write_p50);
	MED(write_p99);
	MED(write_p999);
#undef MED
}

/* ------------------------------------------------------------ driver */

static void usage(void)
{
	printf("usage: kvtier bench --tier dram|nvme|fs|redis|s3|rados [options]\n"
	       "Throughput (GiB/s, ops/s) and latency (p50/p99/p99.9) of one tier through the\n"
	       "store API, with a reference measured in the same run (memcpy for dram; fio\n"
	       "with io_uring + O_DIRECT at the same block size, queue depth and file count for\n"
	       "nvme) and the ratio.\n"
	       "  --tier T            dram | nvme | fs | redis | s3 | rados (default nvme)\n"
	       "  --dir D             directory for nvme and fs (default ./kvtier-bench)\n"
	       "Remote tiers take their connection from --config, or from the environment:\n"
	       "KVTIER_S3_ENDPOINT, KVTIER_S3_BUCKET, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,\n"
	       "AWS_DEFAULT_REGION; CEPH_CONF, KVTIER_RADOS_POOL; KVTIER_REDIS_URL.\n"
	       "References: redis-benchmark, curl --parallel, rados bench, fio.\n"
	       "  --chunk-bytes N     payload bytes per chunk, a multiple of 4096 (default 2M)\n"
	       "  --queue-depth N     operations in flight (default 32; dram: 1)\n"
	       "  --seconds S         per phase (default 5)\n"
	       "  --read-pct P        one phase with P%% reads (default: write, read, mixed)\n"
	       "  --mixed-pct P       reads in the mixed phase (default 70)\n"
	       "  --set-bytes N       working set (default 2G for nvme, 512M for dram)\n"
	       "  --rounds N          kvtier and the reference alternate N times per phase,\n"
	       "                      each for seconds/N (default 3): both see the same noise\n"
	       "  --no-ref            skip the reference\n"
	       "  --config/--set/--json as for every command\n"
	       "kvtier bench --workload mlperf-kv --help: the MLPerf Storage KV-cache workload\n");
}

static void print_phase(const char *name, const struct phase_result *k,
			const struct phase_result *r, int read_pct)
{
	if (read_pct != 0)
		printf("  %-6s read : kvtier %7.3f GiB/s %8.0f op/s p50 %8.1f p99 %8.1f p99.9 %8.1f us"
		       " | ref %7.3f GiB/s p99 %8.1f us | ratio %.3f\n",
		       name, k->read_gibps, k->read_iops, k->read_p50, k->read_p99, k->read_p999,
		       r->read_gibps, r->read_p99, r->read_gibps > 0 ? k->read_gibps / r->read_gibps : 0);
	if (read_pct != 100)
		printf("  %-6s write: kvtier %7.3f GiB/s %8.0f op/s p50 %8.1f p99 %8.1f p99.9 %8.1f us"
		       " | ref %7.3f GiB/s p99 %8.1f us | ratio %.3f\n",
		       name, k->write_gibps, k->write_iops, k->write_p50, k->write_p99, k->write_p999,
		       r->write_gibps, r->write_p99,
		       r->write_gibps > 0 ? k->write_gibps / r->write_gibps : 0);
}

static void json_phase(const char *prefix, const struct phase_result *p)
{
	printf(",\"%sread_gibps\":%.4f,\"%swrite_gibps\":%.4f,\"%sread_iops\":%.1f,"
	       "\"%swrite_iops\":%.1f,\"%sread_p50_us\":%.1f,\"%sread_p99_us\":%.1f,"
	       "\"%sread_p999_us\":%.1f,\"%swrite_p50_us\":%.1f,\"%swrite_p99_us\":%.1f,"
	       "\"%swrite_p999_us\":%.1f",
	       prefix, p->read_gibps, prefix, p->write_gibps, prefix, p->read_iops, prefix,
	       p->write_iops, prefix, p->read_p50, prefix, p->read_p99, prefix, p->read_p999,
	       prefix, p->write_p50, prefix, p->write_p99, prefix, p->write_p999);
}

int kvt_cmd_bench(int argc, char **argv)
{
	struct bench_opts o = {.tier = "nvme", .chunk_bytes = 2ull << 20, .queue_depth = 0,
			       .seconds = 5, .read_pct = -1, .mixed_pct = 70, .rounds = 3};
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--workload"))
			return kvt_bench_mlperf(argc, argv);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int r = cli_store_opt(&o.so, argc, argv, &i);
		if (r < 0)
			return 2;
		if (r > 0)
			continue;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage();
			return 0;
		}
		if (!strcmp(a, "--no-ref")) {
			o.no_ref = true;
			continue;
		}
		if (!v)
			return cli_fail("bench", "%s needs a value (see --help)", a), 2;
		char *end;
		i++;
		if (!strcmp(a, "--tier"))
			o.tier = v;
		else if (!strcmp(a, "--chunk-bytes")) {
			if (cli_parse_size(v, &o.chunk_bytes) < 0 || o.chunk_bytes < 4096 ||
			    o.chunk_bytes % 4096 || o.chunk_bytes > (1ull << 30))
				return cli_fail("bench", "--chunk-bytes: '%s' is not a multiple of 4096 "
							 "in [4K, 1G]", v), 2;
		} else if (!strcmp(a, "--queue-depth")) {
			long q = strtol(v, &end, 10);
			if (*end || q < 1 || q > 4096)
				return cli_fail("bench", "--queue-depth: '%s' is not in [1, 4096]", v), 2;
			o.queue_depth = (unsigned)q;
		} else if (!strcmp(a, "--seconds")) {
			o.seconds = strtod(v, &end);
			if (*end || !(o.seconds > 0) || o.seconds > 86400)
				return cli_fail("bench", "--seconds: '%s' is not in (0, 86400]", v), 2;
		} else if (!strcmp(a, "--read-pct") || !strcmp(a, "--mixed-pct")) {
			long p = strtol(v, &end, 10);
			if (*end || p < 0 || p > 100)
				return cli_fail("bench", "%s: '%s' is not in [0, 100]", a, v), 2;
			*(!strcmp(a, "--read-pct") ? &o.read_pct : &o.mixed_pct) = (int)p;
		} else if (!strcmp(a, "--rounds")) {
			long q = strtol(v, &end, 10);
			if (*end || q < 1 || q > 100)
				return cli_fail("bench", "--rounds: '%s' is not in [1, 100]", v), 2;
			o.rounds = (int)q;
		} else if (!strcmp(a, "--set-bytes")) {
			if (cli_parse_size(v, &o.set_bytes) < 0)
				return cli_fail("bench", "--set-bytes: '%s' is not a size", v), 2;
		} else
			return cli_fail("bench", "unknown option '%s' (see --help)", a), 2;
	}
	bool dram = !strcmp(o.tier, "dram");
	/* DRAM operations complete in the call; more in flight only adds queueing. */
	if (!o.queue_depth)
		o.queue_depth = dram ? 1 : 32;
	static const char *known[] = {"dram", "nvme", "fs", "redis", "s3", "rados"};
	bool ok = false;
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		ok |= !strcmp(o.tier, known[i]);
	if (!ok)
		return cli_fail("bench", "--tier '%s': expected dram, nvme, fs, redis, s3 or rados",
				o.tier), 2;
	bool local = !strcmp(o.tier, "nvme") || !strcmp(o.tier, "fs");

	/* Geometry: an MLA-shaped bf16 chunk of 256 tokens whose layers are 4 KiB multiples. */
	uint32_t layers = 32;
	while (layers > 1 && o.chunk_bytes % ((uint64_t)layers * 4096))
		layers /= 2;
	uint64_t head_dim = o.chunk_bytes / ((uint64_t)layers * 256 * 2);
	char sl[48], sh[48];
	snprintf(sl, sizeof(sl), "model.layers=%u", layers);
	snprintf(sh, sizeof(sh), "model.head_dim=%llu", (unsigned long long)head_dim);
	if (head_dim > 65536)
		return cli_fail("bench", "--chunk-bytes too large for the benchmark geometry"), 2;
	struct cli_store_opts so = o.so;
	const char *extra[] = {"model.kind=mla", "model.kv_heads=1", "model.dtype=bf16",
			       "model.chunk_tokens=256", sl, sh, "model.name=kvtier-bench"};
	for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]) && so.n_sets < 32; i++)
		so.sets[so.n_sets++] = extra[i];
	if (!o.set_bytes)
		o.set_bytes = dram ? (512ull << 20) : (2ull << 30);
	size_t n_keys = (size_t)(o.set_bytes / o.chunk_bytes);
	if (n_keys < 2)
		n_keys = 2;
	char dramb[64], tiers[16], fsdir[4096];
	const char *dir = o.so.dir ? o.so.dir : "./kvtier-bench";
	if (dram) {
		/* The pool holds the whole working set: every read is a DRAM hit. */
		snprintf(dramb, sizeof(dramb), "dram.bytes=%llu",
			 (unsigned long long)((n_keys + 8) * (o.chunk_bytes + 4096)));
		so.sets[so.n_sets++] = dramb;
		so.tiers = "dram";
	} else {
		/* No DRAM tier: every get reaches the drive. */
		snprintf(tiers, sizeof(tiers), "%s", o.tier);
		so.tiers = tiers;
		if (!strcmp(o.tier, "fs")) {
			snprintf(fsdir, sizeof(fsdir), "fs.dir=%s", dir);
			so.sets[so.n_sets++] = fsdir;
		} else {
			so.dir = dir;
		}
		if (local) {
			/* fio does not fsync either */
			so.sets[so.n_sets++] = "nvme.fsync=none";
			so.sets[so.n_sets++] = "fs.fsync=none";
			mkdir(dir, 0755);
		}
	}
	char qds[48];
	snprintf(qds, sizeof(qds), "nvme.queue_depth=%u", o.queue_depth);
	so.sets[so.n_sets++] = qds;
	struct kvt_config *cfg = cli_config(&so);
	if (!cfg)
		return 1;
	struct kvt_store *s;
	int orc = kvt_store_open(cfg, &s);
	if (orc < 0) {
		kvt_config_destroy(cfg);
		return cli_fail("bench", "cannot open the %s tier: %s", o.tier, kvt_strerror(orc));
	}
	char c1[4200], c2[4200], c3[256];

	size_t payload = (size_t)o.chunk_bytes;
	uint32_t n_tokens = 256;
	struct kvt_key *keys = calloc(n_keys, sizeof(*keys));
	if (!keys) {
		kvt_store_close(s);
		return cli_fail("bench", "out of memory");
	}
	for (size_t i = 0; i < n_keys; i++) {
		uint32_t tok[2] = {(uint32_t)i, 0xbe7c4u};
		kvt_key_next(kvt_store_ns_id(s), NULL, tok, 2, &keys[i]);
	}
	if (!o.so.json)
		printf("kvtier bench: tier %s, chunk %llu B (object %llu B), queue depth %u, "
		       "%zu objects (%.2f GiB), %.0f s per phase\n",
		       o.tier, o.chunk_bytes, o.chunk_bytes + 4096, o.queue_depth, n_keys,
		       (double)n_keys * (double)o.chunk_bytes / 1073741824.0, o.seconds);
	/* Populate the working set once so reads hit. */
	{
		struct phase_result fill;
		struct kvt_key *k = keys;
		void *buf = NULL;
		if (posix_memalign(&buf, KVT_ALIGN, payload) == 0) {
			memset(buf, 0x33, payload);
			for (size_t i = 0; i < n_keys; i++)
				kvt_put_sync(s, &k[i], NULL, n_tokens, buf, payload);
			free(buf);
		}
		kvt_flush_sync(s);
		(void)fill;
	}

	int phases[3], n_ph = 0;
	if (o.read_pct >= 0)
		phases[n_ph++] = o.read_pct;
	else {
		phases[n_ph++] = 0;
		phases[n_ph++] = 100;
		phases[n_ph++] = o.mixed_pct;
	}
	struct phase_result kr[3] = {0}, rr[3] = {0};
	double slice = o.seconds / o.rounds;
	for (int p = 0; p < n_ph; p++) {
		struct phase_result kround[100], rround[100];
		for (int r = 0; r < o.rounds; r++) {
			memset(&kround[r], 0, sizeof(kround[r]));
			memset(&rround[r], 0, sizeof(rround[r]));
			run_phase(s, keys, n_keys, payload, n_tokens, o.queue_depth, slice, phases[p],
				  &kround[r]);
			kvt_flush_sync(s);
			if (o.no_ref)
				continue;
			int rrc = 0;
			size_t obj = payload + 4096;
			if (dram)
				bench_ref_memcpy(payload, n_keys, o.queue_depth, slice, phases[p], &rround[r]);
			else if (local)
				rrc = bench_ref_fio(dir, obj, n_keys, o.queue_depth, slice, phases[p],
						    &rround[r]);
			else if (!strcmp(o.tier, "redis")) {
				kvt_config_get(cfg, "redis.url", c1, sizeof(c1));
				rrc = bench_ref_redis(c1, obj, n_keys, o.queue_depth, slice, phases[p],
						      &rround[r]);
			} else if (!strcmp(o.tier, "s3")) {
				kvt_config_get(cfg, "s3.endpoint", c1, sizeof(c1));
				kvt_config_get(cfg, "s3.bucket", c2, sizeof(c2));
				kvt_config_get(cfg, "s3.region", c3, sizeof(c3));
				if (!c1[0] && getenv("KVTIER_S3_ENDPOINT"))
					snprintf(c1, sizeof(c1), "%s", getenv("KVTIER_S3_ENDPOINT"));
				if (!c2[0] && getenv("KVTIER_S3_BUCKET"))
					snprintf(c2, sizeof(c2), "%s", getenv("KVTIER_S3_BUCKET"));
				if (!c3[0])
					snprintf(c3, sizeof(c3), "%s",
						 getenv("AWS_DEFAULT_REGION") ? getenv("AWS_DEFAULT_REGION")
									      : "us-east-1");
				rrc = bench_ref_s3(c1, c2, c3, obj, n_keys, o.queue_depth, slice,
						   phases[p], &rround[r]);
			} else if (!strcmp(o.tier, "rados")) {
				kvt_config_get(cfg, "rados.pool", c1, sizeof(c1));
				rrc = bench_ref_rados(c1, obj, o.queue_depth, slice, phases[p],
						      &rround[r]);
			}
			if (rrc < 0)
				fprintf(stderr, "kvtier bench: the %s reference failed: %s\n",
					reference_name(o.tier), kvt_strerror(rrc));
		}
		combine(kround, o.rounds, &kr[p]);
		combine(rround, o.rounds, &rr[p]);
	}
	struct kvt_stats st;
	kvt_stats(s, &st);
	kvt_store_close(s);
	kvt_config_destroy(cfg);
	free(keys);

	/* Headline figures: reads from the read phase, writes from the write phase. */
	struct phase_result head = {0}, ref = {0}, mixed = {0}, mref = {0};
	bool have_mixed = false;
	for (int p = 0; p < n_ph; p++) {
		if (phases[p] == 100 || (n_ph == 1 && phases[p] > 0)) {
			head.read_gibps = kr[p].read_gibps, head.read_iops = kr[p].read_iops;
			head.read_p50 = kr[p].read_p50, head.read_p99 = kr[p].read_p99;
			head.read_p999 = kr[p].read_p999;
			ref.read_gibps = rr[p].read_gibps, ref.read_p99 = rr[p].read_p99;
			ref.read_p50 = rr[p].read_p50, ref.read_p999 = rr[p].read_p999;
		}
		if (phases[p] == 0 || (n_ph == 1 && phases[p] < 100)) {
			head.write_gibps = kr[p].write_gibps, head.write_iops = kr[p].write_iops;
			head.write_p50 = kr[p].write_p50, head.write_p99 = kr[p].write_p99;
			head.write_p999 = kr[p].write_p999;
			ref.write_gibps = rr[p].write_gibps, ref.write_p99 = rr[p].write_p99;
			ref.write_p50 = rr[p].write_p50, ref.write_p999 = rr[p].write_p999;
		}
		if (phases[p] > 0 && phases[p] < 100 && n_ph > 1) {
			mixed = kr[p];
			mref = rr[p];
			have_mixed = true;
		}
	}
	if (!o.so.json) {
		static const char *names[] = {"write", "read", "mixed"};
		for (int p = 0; p < n_ph; p++)
			print_phase(n_ph == 1 ? "run" : names[p], &kr[p], &rr[p], phases[p]);
		printf("  reference: %s\n", reference_name(o.tier));
		return 0;
	}
	printf("{\"tier\":\"%s\",\"chunk_bytes\":%llu,\"object_bytes\":%llu,\"queue_depth\":%u,"
	       "\"objects\":%zu,\"seconds\":%.1f,\"read_pct\":%d,\"reference\":\"%s\"",
	       o.tier, o.chunk_bytes, o.chunk_bytes + 4096, o.queue_depth, n_keys, o.seconds,
	       o.read_pct, reference_name(o.tier));
	json_phase("", &head);
	json_phase("ref_", &ref);
	printf(",\"read_ratio\":%.4f,\"write_ratio\":%.4f",
	       ref.read_gibps > 0 ? head.read_gibps / ref.read_gibps : 0,
	       ref.write_gibps > 0 ? head.write_gibps / ref.write_gibps : 0);
	if (have_mixed) {
		json_phase("mixed_", &mixed);
		json_phase("ref_mixed_", &mref);
		double kt = mixed.read_gibps + mixed.write_gibps, rt = mref.read_gibps + mref.write_gibps;
		printf(",\"mixed_ratio\":%.4f", rt > 0 ? kt / rt : 0);
	}
	uint64_t errors = 0;
	for (int p = 0; p < n_ph; p++)
		errors += kr[p].errors;
	printf(",\"errors\":%llu,\"checksum_failures\":%llu}\n", (unsigned long long)errors,
	       (unsigned long long)st.tier[0].checksum_failures);
	return errors ? 1 : 0;
}
