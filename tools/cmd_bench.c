/*
 * cmd_bench.c - `kvtier bench`: throughput and latency of one tier through the real store
 * API (kvt_put / kvt_get with many operations in flight), next to a reference measured in
 * the same run on the same machine: memcpy for DRAM, fio (io_uring, O_DIRECT, same block
 * size, queue depth and file count) for NVMe and shared directories. Machines here are
 * shared and noisy, so only the ratio to the reference means anything.
 *
 * The benchmark geometry is derived from --chunk-bytes so that an object is exactly one
 * 4 KiB header plus chunk-bytes of layers (no padding): the I/O size is chunk-bytes + 4 KiB,
 * and fio is run with that block size. Both sides' GiB/s count the same bytes per operation
 * (the object, header included; dram: the chunk, which is what memcpy copies), so that a
 * ratio of GiB/s is a ratio of operations.
 *
 * Phases: write (read-pct 0), read (100) and mixed (--mixed-pct, default 70) unless
 * --read-pct picks one. The last line with --json is one JSON object.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "config.h"
#include "engine.h"

struct bench_opts {
	const char *tier;
	unsigned long long chunk_bytes;
	unsigned queue_depth;
	double seconds, ramp, settle;
	int read_pct;  /* -1: all phases */
	int mixed_pct;
	int rounds; /* kvtier and reference alternate, so both see the same machine noise */
	unsigned long long set_bytes; /* working set */
	const char *fsync; /* NULL: the configured (shipped default: data) */
	bool no_ref;
	unsigned long key_set; /* which keys: clients sharing one store (kvtierd) use disjoint sets */
	struct cli_store_opts so;
};

/* ------------------------------------------------------------ store phases */

/* The benchmark's keys: id i of this run. The salt differs per run, so a directory that
 * still holds an earlier run's objects never turns a measured write into a skipped one
 * (keys are content addresses: a put of a key the store holds moves no bytes). */
struct keygen {
	const uint8_t *ns;
	uint32_t salt;
};

static void key_of(const struct keygen *g, uint64_t id, struct kvt_key *k)
{
	uint32_t tok[3] = {(uint32_t)id, (uint32_t)(id >> 32), g->salt};
	kvt_key_next(g->ns, NULL, tok, 3, k);
}

struct slot {
	struct run *r;
	void *buf;
	bool is_read;
	size_t k;    /* index in keys, or SIZE_MAX for a fresh key */
	uint64_t id; /* a fresh key's id */
	struct kvt_key key;
	uint64_t t0;
};

struct run {
	struct kvt_store *s;
	struct kvt_key *keys; /* the working set: stored, read and replaced */
	size_t n_keys;
	size_t payload;
	size_t op_bytes; /* bytes one operation counts for: as the reference counts its own */
	uint32_t n_tokens;
	int read_pct;
	/* Writes store new keys (nvme: an empty store fills, then each write evicts the least
	 * recently used object; rados: one write_full each, the round's objects removed after
	 * it) instead of replacing a working-set key. */
	bool fresh;
	/* A replacement is one put over the stored object, no remove first (redis, s3: the
	 * tier's SET / PUT replaces it, as the reference's SET / PUT over its key space do). */
	bool in_place;
	const struct keygen *kg;
	uint64_t *next_id;
	uint64_t *done_ids; /* fresh writes in completion order, a ring of n_keys */
	uint64_t *n_done;
	uint8_t *busy; /* keys an operation in flight is using */
	uint64_t ramp_ns, end_ns; /* operations count if they complete after ramp_ns */
	uint64_t t_last;	  /* the last completion */
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
	uint64_t now = kvt__now_ns();
	double us = (double)(now - sl->t0) / 1000.0;
	r->inflight--;
	if (sl->k != SIZE_MAX)
		r->busy[sl->k] = 0;
	if (res->status < 0) {
		r->errors++;
		r->last_err = res->status;
	} else {
		/* the write phase's last writes become the working set; a mixed phase's
		 * fresh writes do not (the reads use the set stored before it) */
		if (sl->k == SIZE_MAX && r->read_pct == 0)
			r->done_ids[(*r->n_done)++ % r->n_keys] = sl->id;
		if (now >= r->ramp_ns) {
			r->t_last = now;
			if (sl->is_read) {
				r->reads++;
				lat_add(&r->rl, us);
			} else {
				r->writes++;
				lat_add(&r->wl, us);
			}
		}
	}
	if (now < r->end_ns)
		submit(sl);
}

/* Start the operation chosen for a slot; on failure the slot goes idle. Latency runs from
 * this call (the put or get) to its callback. */
static void start_op(struct slot *sl)
{
	struct run *r = sl->r;
	sl->t0 = kvt__now_ns();
	int rc;
	for (;;) {
		rc = sl->is_read ? kvt_get(r->s, &sl->key, 0, 0, sl->buf, r->payload, op_done, sl)
				 : kvt_put(r->s, &sl->key, NULL, r->n_tokens, sl->buf, r->payload,
					   op_done, sl);
		if (rc != -EAGAIN)
			break;
		kvt_poll(r->s, 1);
	}
	if (rc < 0) {
		r->errors++;
		r->last_err = rc;
		if (sl->k != SIZE_MAX)
			r->busy[sl->k] = 0;
		r->inflight--;
	}
}

static void removed(void *arg, const struct kvt_result *res)
{
	(void)res;
	start_op(arg);
}

/* Reads pick a working-set key no other slot is using (a write replaces its object, so a
 * read of the same key at the same moment could miss). A write either stores a new key
 * (fresh: one tier write) or replaces a working-set key. A store with a tier that skips a
 * put of a key it holds (content addresses: DRAM, nvme, fs) first removes the old object -
 * the steady state of a full cache, where every new chunk replaces an old one - two tier
 * operations per write; redis and s3 (in_place) overwrite it with the one put. */
static void submit(struct slot *sl)
{
	struct run *r = sl->r;
	sl->is_read = (int)(bench_rnd(&r->rng) % 100) < r->read_pct;
	r->inflight++;
	if (!sl->is_read && r->fresh) {
		sl->k = SIZE_MAX;
		sl->id = (*r->next_id)++;
		key_of(r->kg, sl->id, &sl->key);
		start_op(sl);
		return;
	}
	size_t k;
	do
		k = bench_rnd(&r->rng) % r->n_keys;
	while (r->busy[k]);
	r->busy[k] = 1;
	sl->k = k;
	sl->key = r->keys[k];
	if (sl->is_read || r->in_place || kvt_remove(r->s, &sl->key, removed, sl) < 0)
		start_op(sl);
}

/* Throughput over the measured window, from the end of the ramp to the last completion
 * (new operations stop at end_ns; those in flight complete and count). fio does the same:
 * it resets its statistics and clock at the end of its ramp, and its run time includes
 * reaping the I/Os in flight when the time is up. */
static void phase_fill(struct run *r, struct phase_result *out)
{
	lat_sort(&r->rl);
	lat_sort(&r->wl);
	double secs = r->t_last > r->ramp_ns ? (double)(r->t_last - r->ramp_ns) / 1e9 : 0;
	double gib = (double)r->op_bytes / (1024.0 * 1024 * 1024);
	out->read_iops = secs > 0 ? (double)r->reads / secs : 0;
	out->write_iops = secs > 0 ? (double)r->writes / secs : 0;
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

struct phase_args {
	struct kvt_store *s;
	struct kvt_key *keys;
	size_t n_keys, payload, op_bytes;
	uint32_t n_tokens;
	unsigned qd;
	double ramp, seconds;
	int read_pct;
	bool fresh, in_place;
	const struct keygen *kg;
	uint64_t *next_id, *done_ids, *n_done;
};

/* Wait for the phase's last operations. Every store operation completes within two
 * deadline ceilings (src/engine.h, kvt__store_waits), so one still out well after that is
 * a bug in the store: say once what the store is waiting for, and go on waiting (the
 * operation may still use its buffer). */
static void wait_phase_end(struct run *r)
{
	struct kvt__store_waits w;
	kvt__store_waits(r->s, &w);
	uint64_t report_at = r->end_ns + (2 * w.deadline_ceiling_ms + 5000) * 1000000ull;
	bool reported = false;
	while (r->inflight) {
		kvt_poll(r->s, 100);
		uint64_t now = kvt__now_ns();
		if (reported || !r->inflight || now < report_at)
			continue;
		kvt__store_waits(r->s, &w);
		fprintf(stderr,
			"kvtier bench: %llu operations still out %.1f s after the phase ended, past "
			"every deadline (store: %llu operations admitted, %llu tier calls under a "
			"deadline, %llu write-behind jobs, %llu removes waiting for one)\n",
			(unsigned long long)r->inflight, (double)(now - r->end_ns) / 1e9,
			(unsigned long long)w.ops, (unsigned long long)w.tier_calls,
			(unsigned long long)w.wb_jobs, (unsigned long long)w.removes_waiting);
		reported = true;
	}
}

/* Run one phase: qd operations in flight for ramp + seconds. */
static int run_phase(const struct phase_args *a, struct phase_result *out)
{
	struct run r = {.s = a->s, .keys = a->keys, .n_keys = a->n_keys, .payload = a->payload,
			.op_bytes = a->op_bytes, .n_tokens = a->n_tokens, .read_pct = a->read_pct,
			.fresh = a->fresh,
			.in_place = a->in_place,
			.kg = a->kg, .next_id = a->next_id, .done_ids = a->done_ids,
			.n_done = a->n_done, .rng = 0x9e3779b97f4a7c15ull ^ *a->next_id};
	unsigned qd = a->qd ? a->qd : 1; /* at most n_keys / 2: kvt_cmd_bench */
	struct slot *slots = calloc(qd, sizeof(*slots));
	r.busy = calloc(a->n_keys, 1);
	if (!slots || !r.busy) {
		free(slots);
		free(r.busy);
		return -ENOMEM;
	}
	/* The engine's buffers: one region of qd payloads offered to transparent huge pages,
	 * as fio's one buffer of iodepth blocks is (fio runs with glibc.malloc.hugetlb=1;
	 * docs/BENCHMARKS.md, "buffer memory"): a zero-copy put (store.zero_copy_puts) sends
	 * them to the device as they are. A buffer of its own per slot got 4 KiB pages below
	 * 2 MiB (kvt__huge_alloc), so 1 MiB puts went out in requests of ~580 KiB against
	 * fio's ~770. */
	uint8_t *bufs = kvt__huge_alloc((size_t)qd * a->payload);
	if (!bufs) {
		free(slots);
		free(r.busy);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < qd; i++) {
		slots[i].buf = bufs + (size_t)i * a->payload; /* payloads are 4 KiB multiples */
		memset(slots[i].buf, (int)(0x11 * (i + 1)), a->payload);
		slots[i].r = &r;
	}
	uint64_t t0 = kvt__now_ns();
	r.ramp_ns = t0 + (uint64_t)(a->ramp * 1e9);
	r.end_ns = r.ramp_ns + (uint64_t)(a->seconds * 1e9);
	for (unsigned i = 0; i < qd; i++)
		submit(&slots[i]);
	wait_phase_end(&r);
	phase_fill(&r, out);
	if (r.errors)
		fprintf(stderr, "kvtier bench: %llu operations failed (last: %s)\n",
			(unsigned long long)r.errors, kvt_strerror(r.last_err));
	kvt__huge_free(bufs, (size_t)qd * a->payload);
	free(slots);
	free(r.busy);
	free(r.rl.v);
	free(r.wl.v);
	return 0;
}

/* The working set for reads and replacements: the n_keys most recent fresh writes (all
 * still stored: the capacity holds n_keys plus two queue depths, more than the completion
 * order can differ from the eviction order), topped up with new keys stored now. */
static int working_set(struct kvt_store *s, const struct keygen *kg, struct kvt_key *keys,
		       size_t n_keys, uint32_t n_tokens, size_t payload, uint64_t *next_id,
		       const uint64_t *done_ids, uint64_t n_done)
{
	size_t n = 0;
	for (uint64_t i = n_done > n_keys ? n_done - n_keys : 0; i < n_done; i++)
		key_of(kg, done_ids[i % n_keys], &keys[n++]);
	if (n == n_keys)
		return 0;
	void *buf = NULL;
	if (posix_memalign(&buf, KVT_ALIGN, payload))
		return -ENOMEM;
	memset(buf, 0x33, payload);
	int rc = 0;
	while (n < n_keys && rc >= 0) {
		key_of(kg, (*next_id)++, &keys[n]);
		rc = kvt_put_sync(s, &keys[n++], NULL, n_tokens, buf, payload);
	}
	free(buf);
	kvt_flush_sync(s);
	return rc < 0 ? rc : 0;
}

struct rm_ctx {
	unsigned inflight;
};

static void rm_done(void *arg, const struct kvt_result *res)
{
	(void)res; /* -ENOENT: a write that failed */
	((struct rm_ctx *)arg)->inflight--;
}

static void remove_one(struct kvt_store *s, const struct kvt_key *k, struct rm_ctx *c)
{
	while (c->inflight >= 32)
		kvt_poll(s, 100);
	int rc;
	while ((rc = kvt_remove(s, k, rm_done, c)) == -EAGAIN)
		kvt_poll(s, 100);
	if (rc == 0)
		c->inflight++;
}

/* Remove the objects of key ids [lo, hi) but those in keep[0..nkeep): a RADOS pool, a
 * bucket or a Redis server keeps what the bench writes, so the bench cleans up after
 * itself as `rados bench` does. Not timed; up to 32 removals in flight. */
static void remove_ids(struct kvt_store *s, const struct keygen *kg, uint64_t lo, uint64_t hi,
		       const uint64_t *keep, size_t nkeep)
{
	if (hi <= lo)
		return;
	uint8_t *kept = calloc((size_t)(hi - lo), 1);
	if (!kept)
		return;
	for (size_t i = 0; i < nkeep; i++)
		if (keep[i] >= lo && keep[i] < hi)
			kept[keep[i] - lo] = 1;
	struct rm_ctx c = {0};
	for (uint64_t id = lo; id < hi; id++) {
		if (kept[id - lo])
			continue;
		struct kvt_key k;
		key_of(kg, id, &k);
		remove_one(s, &k, &c);
	}
	while (c.inflight)
		kvt_poll(s, 100);
	free(kept);
}

/* Remove the working set: what the per-round and per-phase removals leave stored. */
static void remove_keys(struct kvt_store *s, const struct kvt_key *keys, size_t n)
{
	struct rm_ctx c = {0};
	for (size_t i = 0; i < n; i++)
		remove_one(s, &keys[i], &c);
	while (c.inflight)
		kvt_poll(s, 100);
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
	qsort(v, (size_t)n, sizeof(double), kvt__cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void combine(const struct phase_result *r, int n, struct phase_result *out)
{
	double v[100];
	memset(out, 0, sizeof(*out));
	if (n <= 0) /* no round measured: zeros, as a ratio over them says (0) */
		return;
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
	MED(sync_p50);
	MED(sync_p99);
#undef MED
}

/* A reference round counts only if it measured what its phase does: reads unless the
 * phase writes only, writes unless it reads only. A round that failed (or that measured
 * one side of a mixed phase, or nothing: redis-benchmark without its SET line, rados
 * bench without its write summary) is left out of the means and the round range; it
 * used to count as 0 GiB/s, so one failed round of three raised the ratio 1.5x. */
static bool ref_round_ok(int rc, const struct phase_result *r, int read_pct)
{
	return rc == 0 && (read_pct == 0 || r->read_gibps > 0) &&
	       (read_pct == 100 || r->write_gibps > 0);
}

/* The rounds of v whose ok is set, packed into out: how many. */
static int ok_rounds(const struct phase_result *v, const bool *ok, int n, struct phase_result *out)
{
	int m = 0;
	for (int i = 0; i < n; i++)
		if (ok[i])
			out[m++] = v[i];
	return m;
}

/* ------------------------------------------------------------ driver */

static void usage(void)
{
	printf("usage: kvtier bench --tier dram|nvme|fs|redis|s3|rados [options]\n"
	       "Throughput (GiB/s, ops/s) and latency (p50/p99/p99.9, call to callback) of one\n"
	       "tier through the store API, next to a reference measured in the same run with the\n"
	       "same I/O shape, and the ratio (docs/BENCHMARKS.md). GiB/s count whole objects\n"
	       "(chunk + 4 KiB header; dram: the chunk) on both sides.\n"
	       "  --tier T            dram | nvme | fs | redis | s3 | rados (default nvme)\n"
	       "  --dir D             directory for nvme and fs (default ./kvtier-bench)\n"
	       "Remote tiers take their connection from --config, or from the environment:\n"
	       "KVTIER_S3_ENDPOINT, KVTIER_S3_BUCKET, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,\n"
	       "AWS_DEFAULT_REGION; CEPH_CONF, KVTIER_RADOS_POOL; KVTIER_REDIS_URL.\n"
	       "References: memcpy (dram); fio, io_uring, O_DIRECT, one I/O = one object, iodepth =\n"
	       "objects in flight, over one file per object laid out once and overwritten (nvme,\n"
	       "fs); redis-benchmark; curl --parallel (time-based); rados bench.\n"
	       "  --chunk-bytes N     payload bytes per chunk, a multiple of 4096 (default 2M);\n"
	       "                      an object (one I/O) is this plus its 4 KiB header\n"
	       "  --queue-depth N     objects in flight, on both sides (default 32; dram: 1);\n"
	       "                      at most half the working set; nvme.queue_depth is set\n"
	       "                      to hold N whole objects\n"
	       "  --seconds S         measured time per phase (default 5)\n"
	       "  --ramp S            unmeasured warm-up before each measured slice, on both\n"
	       "                      sides (default 0.5)\n"
	       "  --settle S          nvme, fs: seconds the disk rests after the files are laid\n"
	       "                      out (fio's; nvme: and the slots), before the first round\n"
	       "                      (default 3; none with --no-ref)\n"
	       "  --fsync MODE        none | data | full for nvme and fs (default: the configured\n"
	       "                      nvme.fsync / fs.fsync, shipped default data); fio gets\n"
	       "                      --fdatasync=1 unless none\n"
	       "  --read-pct P        one phase with P%% reads (default: write, read, mixed)\n"
	       "  --mixed-pct P       reads in the mixed phase (default 70)\n"
	       "  --set-bytes N       working set (default 2G; dram 512M); nvme capacity holds it\n"
	       "                      plus two queue depths of objects\n"
	       "  --rounds N          kvtier and the reference alternate N times per phase,\n"
	       "                      each for seconds/N (default 3): both see the same noise;\n"
	       "                      who goes first alternates from round to round, across\n"
	       "                      phases (kvtier first in the very first)\n"
	       "  --no-ref            skip the reference\n"
	       "  --key-set N         mixed into this run's key salt (default 0): clients sharing\n"
	       "                      one store (store.daemon) are sure to use disjoint keys\n"
	       "  --config/--set/--json as for every command\n"
	       "nvme writes store new keys into a store that starts empty (then each write evicts\n"
	       "the least recently used object); its capacity is first laid out as files of the\n"
	       "object size (nvme.preallocate, untimed like fio's layout; --set\n"
	       "nvme.preallocate=0: without). rados writes (write and mixed phases) store new\n"
	       "keys, one write_full each, removed after each round, untimed; redis and s3 writes\n"
	       "overwrite a working-set key with one SET / PUT (as the references do); dram and fs\n"
	       "writes replace a working-set key (remove, then put). redis, s3 and rados: the\n"
	       "working set is removed at the end, untimed (not after failed operations).\n"
	       "kvtier bench --workload mlperf-kv --help: the MLPerf Storage KV-cache workload\n");
}

static void print_phase(const char *name, const struct phase_result *k,
			const struct phase_result *r, int read_pct)
{
	if (read_pct != 0)
		printf("  %-6s read : kvtier %7.3f GiB/s %8.0f op/s p50 %8.1f p99 %8.1f p99.9 %8.1f us"
		       " | ref %7.3f GiB/s p50 %8.1f p99 %8.1f us | ratio %.3f\n",
		       name, k->read_gibps, k->read_iops, k->read_p50, k->read_p99, k->read_p999,
		       r->read_gibps, r->read_p50, r->read_p99,
		       r->read_gibps > 0 ? k->read_gibps / r->read_gibps : 0);
	if (read_pct != 100)
		printf("  %-6s write: kvtier %7.3f GiB/s %8.0f op/s p50 %8.1f p99 %8.1f p99.9 %8.1f us"
		       " | ref %7.3f GiB/s p50 %8.1f p99 %8.1f us | ratio %.3f\n",
		       name, k->write_gibps, k->write_iops, k->write_p50, k->write_p99, k->write_p999,
		       r->write_gibps, r->write_p50, r->write_p99,
		       r->write_gibps > 0 ? k->write_gibps / r->write_gibps : 0);
	if (read_pct != 100 && r->sync_p50 > 0)
		printf("  %-6s (ref's fdatasync, timed apart from its write: p50 %.1f p99 %.1f us;"
		       " kvtier's write latency includes its own)\n",
		       name, r->sync_p50, r->sync_p99);
}

/* kvtier's bytes per second over the reference's, reads and writes together. */
static double both_ratio(const struct phase_result *k, const struct phase_result *r)
{
	double rt = r->read_gibps + r->write_gibps;
	return rt > 0 ? (k->read_gibps + k->write_gibps) / rt : 0;
}

/* GiB/s with six decimals: at the 0.05-0.07 GiB/s of a small run on a busy machine four
 * left up to 0.1 % of rounding in GiB/s x 2^30 / op/s, the bytes per operation that
 * integ.bench_accounting checks to within 0.1 % (it failed on that once). */
static void json_phase(const char *prefix, const struct phase_result *p)
{
	printf(",\"%sread_gibps\":%.6f,\"%swrite_gibps\":%.6f,\"%sread_iops\":%.1f,"
	       "\"%swrite_iops\":%.1f,\"%sread_p50_us\":%.1f,\"%sread_p99_us\":%.1f,"
	       "\"%sread_p999_us\":%.1f,\"%swrite_p50_us\":%.1f,\"%swrite_p99_us\":%.1f,"
	       "\"%swrite_p999_us\":%.1f",
	       prefix, p->read_gibps, prefix, p->write_gibps, prefix, p->read_iops, prefix,
	       p->write_iops, prefix, p->read_p50, prefix, p->read_p99, prefix, p->read_p999,
	       prefix, p->write_p50, prefix, p->write_p99, prefix, p->write_p999);
	if (p->sync_p50 > 0)
		printf(",\"%swrite_sync_p50_us\":%.1f,\"%swrite_sync_p99_us\":%.1f", prefix,
		       p->sync_p50, prefix, p->sync_p99);
}

/* The block device's own counters for the device under dir (/sys/dev/block/M:m/stat):
 * completed read and write requests and sectors. Whatever the file system adds (journal,
 * metadata) is in them, and they show the request size the device really got. */
/* /sys/block/.../stat fields: requests, sectors and time (ms) per direction; io_ticks, the
 * time with any request in flight; flushes (kernels >= 5.5; 0 before); discards (sectors
 * and time, kernels >= 4.18: an unlink on a file system mounted "discard" sends them, and
 * a virtual disk may spend as long on them as on writes). Requests in flight while busy =
 * ticks / io_ticks: what each side actually kept at the device. */
struct devstat {
	long long rios, rsect, wios, wsect;
	long long rticks, wticks, io_ticks, flushes;
	long long dsect, dticks;
	long long t_ms; /* when read (dev_stat); dev_acc: the wall time accumulated */
};

/* The block device's counters file under dir (stat of dir), found once right after the
 * store opened: later readings touch only /sys, never the mount - which may hang. */
static void dev_path(const char *dir, char *path, size_t len)
{
	struct stat st;
	path[0] = 0;
	if (dir && stat(dir, &st) == 0)
		snprintf(path, len, "/sys/dev/block/%u:%u/stat", major(st.st_dev),
			 minor(st.st_dev));
}

static int dev_stat(const char *path, struct devstat *d)
{
	char buf[512];
	if (!path[0])
		return -1;
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long long v[17] = {0};
	int n = fgets(buf, sizeof(buf), f)
			? sscanf(buf,
				 "%lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld "
				 "%lld %lld %lld %lld",
				 &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9],
				 &v[10], &v[11], &v[12], &v[13], &v[14], &v[15], &v[16])
			: 0;
	fclose(f);
	if (n < 11)
		return -1;
	d->rios = v[0], d->rsect = v[2], d->wios = v[4], d->wsect = v[6];
	d->rticks = v[3], d->wticks = v[7], d->io_ticks = v[9];
	d->flushes = n >= 16 ? v[15] : 0;
	d->dsect = n >= 15 ? v[13] : 0;
	d->dticks = n >= 15 ? v[14] : 0;
	d->t_ms = (long long)(kvt__now_ns() / 1000000);
	return 0;
}

/* Add the counters' change since *before to *acc. */
static void dev_acc(const char *path, const struct devstat *before, struct devstat *acc)
{
	struct devstat now;
	if (dev_stat(path, &now) < 0)
		return;
	acc->rios += now.rios - before->rios, acc->rsect += now.rsect - before->rsect;
	acc->wios += now.wios - before->wios, acc->wsect += now.wsect - before->wsect;
	acc->rticks += now.rticks - before->rticks, acc->wticks += now.wticks - before->wticks;
	acc->io_ticks += now.io_ticks - before->io_ticks;
	acc->flushes += now.flushes - before->flushes;
	acc->dsect += now.dsect - before->dsect, acc->dticks += now.dticks - before->dticks;
	acc->t_ms += now.t_ms - before->t_ms;
}

/* Where a kvtier slice's device counters go: the block device's stat file (NULL: none),
 * the phase's sum, and the write phase's device bytes and stored bytes (write
 * amplification, counted over kvtier's slices only). */
struct slice_dev {
	const char *path;
	struct devstat *acc;
	long long *wa_dev;
	uint64_t *wa_stored;
};

/* One kvtier slice of a round: the phase run for pa->seconds, flushed, and (remove_round:
 * rados' new objects) the slice's objects removed, untimed, but - in the write phase - the
 * last n_keys, the working set to come, so a small test cluster does not fill up over a
 * phase. Within a slice nothing is removed: the pool needs room for one slice's writes on
 * top of the working set. */
static void kvtier_slice(struct phase_args *pa, bool remove_round, const struct slice_dev *sd,
			 struct phase_result *out)
{
	struct kvt_stats sa;
	struct devstat d0;
	kvt_stats(pa->s, &sa);
	uint64_t wbytes0 = sa.tier[0].write_bytes;
	bool have_dev = sd->path && dev_stat(sd->path, &d0) == 0;
	uint64_t round_id = *pa->next_id;
	run_phase(pa, out);
	kvt_flush_sync(pa->s);
	if (remove_round) {
		bool w = pa->read_pct == 0;
		remove_ids(pa->s, pa->kg, round_id, *pa->next_id, w ? pa->done_ids : NULL,
			   w ? (size_t)KVT_MIN(*pa->n_done, (uint64_t)pa->n_keys) : 0);
	}
	if (!have_dev)
		return;
	struct devstat before = *sd->acc;
	dev_acc(sd->path, &d0, sd->acc);
	kvt_stats(pa->s, &sa);
	if (pa->read_pct == 0) {
		*sd->wa_dev += sd->acc->wsect - before.wsect;
		*sd->wa_stored += sa.tier[0].write_bytes - wbytes0;
	}
}

/* The share of the wall time the device had a request in flight. The interval is the
 * measured slice plus its ramp (kvtier: and the flush after it; fio: and its start-up,
 * which opens every file), so it is a lower bound of the slice's own. */
static double busy(const struct devstat *d)
{
	return d->t_ms > 0 ? (double)d->io_ticks / (double)d->t_ms : 0;
}

/* Mean requests of one direction in flight at the device while it was busy. */
static double in_flight(long long ticks, long long io_ticks)
{
	return io_ticks > 0 ? (double)ticks / (double)io_ticks : 0;
}

static double kib_per_req(long long sect, long long ios)
{
	return ios > 0 ? (double)sect * 512.0 / 1024.0 / (double)ios : 0;
}

enum {
	O_NO_REF = CLI_O_FIRST_FREE, O_TIER, O_CHUNK_BYTES, O_QUEUE_DEPTH, O_SECONDS, O_RAMP,
	O_SETTLE, O_FSYNC, O_READ_PCT, O_MIXED_PCT, O_KEY_SET, O_ROUNDS, O_SET_BYTES
};

/* One option of kvtier bench (cli_getopt): 0, 1 after --help, -1 after an error line. */
static int bench_opt(void *arg, int c, const char *v)
{
	struct bench_opts *o = arg;
	long q;
	double d;
	uint64_t u;
	switch (c) {
	case 'h':
		usage();
		return 1;
	case O_NO_REF:
		o->no_ref = true;
		return 0;
	case O_TIER:
		o->tier = v;
		return 0;
	case O_CHUNK_BYTES:
		if (cli_parse_size(v, &o->chunk_bytes) < 0 || o->chunk_bytes < 4096 ||
		    o->chunk_bytes % 4096 || o->chunk_bytes > (1ull << 30))
			return cli_fail("bench", "--chunk-bytes: '%s' is not a multiple of 4096 "
						 "in [4K, 1G]", v), -1;
		return 0;
	case O_QUEUE_DEPTH:
		if (cli_parse_int(v, 1, 4096, &q) < 0)
			return cli_fail("bench", "--queue-depth: '%s' is not in [1, 4096]", v), -1;
		o->queue_depth = (unsigned)q;
		return 0;
	case O_SECONDS:
	case O_RAMP:
		if (cli_parse_number(v, &d) < 0 || !(c == O_RAMP ? d >= 0 : d > 0) || d > 86400)
			return cli_fail("bench", "--%s: '%s' is not in %s, 86400]",
					c == O_RAMP ? "ramp" : "seconds", v, c == O_RAMP ? "[0" : "(0"),
			       -1;
		*(c == O_RAMP ? &o->ramp : &o->seconds) = d;
		return 0;
	case O_SETTLE:
		if (cli_parse_number(v, &d) < 0 || !(d >= 0) || d > 600)
			return cli_fail("bench", "--settle: '%s' is not in [0, 600]", v), -1;
		o->settle = d;
		return 0;
	case O_FSYNC:
		if (strcmp(v, "none") && strcmp(v, "data") && strcmp(v, "full"))
			return cli_fail("bench", "--fsync: '%s' is not none, data or full", v), -1;
		o->fsync = v;
		return 0;
	case O_READ_PCT:
	case O_MIXED_PCT:
		if (cli_parse_int(v, 0, 100, &q) < 0)
			return cli_fail("bench", "--%s: '%s' is not in [0, 100]",
					c == O_READ_PCT ? "read-pct" : "mixed-pct", v), -1;
		*(c == O_READ_PCT ? &o->read_pct : &o->mixed_pct) = (int)q;
		return 0;
	case O_KEY_SET:
		/* digits only: strtoul alone reads "-18446744073709551615" as 1 */
		if (kvt__parse_u64(v, &u) < 0 || u > 1000000)
			return cli_fail("bench", "--key-set: '%s' is not in [0, 1000000]", v), -1;
		o->key_set = (unsigned long)u;
		return 0;
	case O_ROUNDS:
		if (cli_parse_int(v, 1, 100, &q) < 0)
			return cli_fail("bench", "--rounds: '%s' is not in [1, 100]", v), -1;
		o->rounds = (int)q;
		return 0;
	default: /* O_SET_BYTES */
		if (cli_parse_size(v, &o->set_bytes) < 0)
			return cli_fail("bench", "--set-bytes: '%s' is not a size", v), -1;
		return 0;
	}
}

/* Wait for the nvme tier's background layout - preallocated slots (nvme.preallocate) and
 * the log's segments (nvme.log_layout) - the counterpart of fio laying out its files:
 * neither is timed. -1 if it makes no
 * progress for stall_ns (store.sync_timeout_ms: a device that stops answering during the
 * layout must not hold the run past the store's own bound; tests/integ/bench_stall_fs.sh
 * waited out a fixed minute when its stall came during a slow layout). */
static int wait_layout(struct kvt_store *s, uint64_t stall_ns)
{
	uint64_t t0 = kvt__now_ns(), last = UINT64_MAX, since = t0;
	bool waited = false;
	for (;;) {
		struct kvt_stats st;
		kvt_stats(s, &st);
		uint64_t left = st.tier[0].pool_pending_bytes;
		uint64_t now = kvt__now_ns();
		if (!left) {
			if (st.tier[0].pool_bytes)
				fprintf(stderr, "kvtier bench: %.2f GiB of preallocated slots ready "
						"(laid out in %.1f s, untimed)\n",
					(double)st.tier[0].pool_bytes / 1073741824.0,
					(double)(now - t0) / 1e9);
			else if (waited)
				fprintf(stderr, "kvtier bench: log segments laid out in %.1f s "
						"(untimed)\n",
					(double)(now - t0) / 1e9);
			return 0;
		}
		waited = true;
		if (left != last) {
			last = left;
			since = now;
		} else if (now - since > stall_ns) {
			return -1; /* no progress within the store's bound */
		}
		usleep(20000);
	}
}

int kvt_cmd_bench(int argc, char **argv)
{
	struct bench_opts o = {.tier = "nvme", .chunk_bytes = 2ull << 20, .queue_depth = 0,
			       .seconds = 5, .ramp = 0.5, .settle = 3, .read_pct = -1,
			       .mixed_pct = 70, .rounds = 3};
	for (int i = 1; i < argc; i++) /* --workload W or --workload=W */
		if (!strncmp(argv[i], "--workload", 10) && (!argv[i][10] || argv[i][10] == '='))
			return kvt_bench_mlperf(argc, argv);
	static const struct option longopts[] = {
	    {"no-ref", no_argument, NULL, O_NO_REF},
	    {"tier", required_argument, NULL, O_TIER},
	    {"chunk-bytes", required_argument, NULL, O_CHUNK_BYTES},
	    {"queue-depth", required_argument, NULL, O_QUEUE_DEPTH},
	    {"seconds", required_argument, NULL, O_SECONDS},
	    {"ramp", required_argument, NULL, O_RAMP},
	    {"settle", required_argument, NULL, O_SETTLE},
	    {"fsync", required_argument, NULL, O_FSYNC},
	    {"read-pct", required_argument, NULL, O_READ_PCT},
	    {"mixed-pct", required_argument, NULL, O_MIXED_PCT},
	    {"key-set", required_argument, NULL, O_KEY_SET},
	    {"rounds", required_argument, NULL, O_ROUNDS},
	    {"set-bytes", required_argument, NULL, O_SET_BYTES},
	    {NULL, 0, NULL, 0}};
	int first = cli_getopt("bench", argc, argv, &o.so, longopts, bench_opt, &o);
	if (first == -2)
		return 0;
	if (first < 0)
		return 2;
	if (first < argc)
		return cli_fail("bench", "unexpected argument '%s' (see --help)", argv[first]), 2;
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
	bool nvme = !strcmp(o.tier, "nvme");
	bool rados = !strcmp(o.tier, "rados");
	/* One server write per measured write, as the references: rados stores new objects
	 * (`rados bench write`), redis and s3 overwrite working-set keys (redis-benchmark's
	 * SET over -r keys, curl's PUT over as many names). Servers keep what the bench wrote:
	 * it removes it (untimed). */
	bool in_place = !strcmp(o.tier, "redis") || !strcmp(o.tier, "s3");
	bool remote = rados || in_place;
	bool local = nvme || !strcmp(o.tier, "fs");
	if (o.fsync && !local)
		return cli_fail("bench", "--fsync applies to the nvme and fs tiers only"), 2;

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
	if (so.n_sets > 18)
		return cli_fail("bench", "at most 18 --set options"), 2;
	const char *extra[] = {"model.kind=mla", "model.kv_heads=1", "model.dtype=bf16",
			       "model.chunk_tokens=256", sl, sh, "model.name=kvtier-bench"};
	for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++)
		so.sets[so.n_sets++] = extra[i];
	if (!o.set_bytes)
		o.set_bytes = dram ? (512ull << 20) : (2ull << 30);
	size_t n_keys = (size_t)(o.set_bytes / o.chunk_bytes);
	if (n_keys < 2)
		n_keys = 2;
	/* The working set is held in memory (its keys) and, for dram, in the pool: a set no
	 * machine holds is refused here, by name (until 2026-12-06 the pool's size wrapped
	 * past 2^64 and the run ended "out of memory" with exit 0). */
	if (n_keys > (1ull << 40) / 32 || o.set_bytes > (1ull << 50))
		return cli_fail("bench", "--set-bytes %llu: a working set of %zu objects is "
					 "more than this benchmark can hold",
				(unsigned long long)o.set_bytes, n_keys),
		       2;
	/* An operation picks a working-set key no other one is using: at most half the keys
	 * in flight, so there are idle keys to pick from. Capped here, not in the phase, so
	 * that the reference, the tier's configuration and the result all get the depth
	 * kvtier really ran at (the phase once capped it alone, and fio ran at the asked
	 * depth while the JSON said both had). */
	if (o.queue_depth > n_keys / 2) {
		fprintf(stderr, "kvtier bench: --queue-depth %u is more than half the working set "
				"(%zu objects): %zu in flight on both sides\n",
			o.queue_depth, n_keys, n_keys / 2);
		o.queue_depth = (unsigned)(n_keys / 2);
	}
	uint64_t obj = o.chunk_bytes + 4096;
	/* One object is ceil(obj / 2 MiB) I/Os and nvme.queue_depth counts I/Os: hold
	 * queue_depth whole objects, the bytes fio has in flight at iodepth = queue_depth. */
	uint64_t pieces = (obj + (2u << 20) - 1) / (2u << 20);
	char dramb[64], tiers[16], fsdir[4096], nvb[64], nvf[64], nvp[64], qds[48], fst[48],
	    fsy[2][32];
	const char *dir = o.so.dir ? o.so.dir : "./kvtier-bench";
	if (dram) {
		/* The pool holds the whole working set: every read is a DRAM hit. */
		snprintf(dramb, sizeof(dramb), "dram.bytes=%llu",
			 (unsigned long long)((n_keys + 8) * obj));
		so.sets[so.n_sets++] = dramb;
		so.tiers = "dram";
	} else {
		/* No DRAM tier: every get reaches the drive. */
		snprintf(tiers, sizeof(tiers), "%s", o.tier);
		so.tiers = tiers;
		if (!strcmp(o.tier, "fs")) {
			snprintf(fsdir, sizeof(fsdir), "fs.dir=%s", dir);
			so.sets[so.n_sets++] = fsdir;
			/* the fs tier's concurrency is its worker threads */
			snprintf(fst, sizeof(fst), "fs.threads=%u", KVT_MIN(o.queue_depth, 64u));
			so.sets[so.n_sets++] = fst;
		} else {
			so.dir = dir;
		}
		if (nvme) {
			snprintf(nvb, sizeof(nvb), "nvme.bytes=%llu",
				 (unsigned long long)((n_keys + 2ull * o.queue_depth) * obj));
			so.sets[so.n_sets++] = nvb;
			/* fio keeps every file of its set open (openfiles = nrfiles): so may the
			 * tier's read descriptor cache (the tier caps it below RLIMIT_NOFILE,
			 * raised here to its hard limit, which fio inherits too) */
			struct rlimit rl;
			if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
				rl.rlim_cur = rl.rlim_max;
				(void)setrlimit(RLIMIT_NOFILE, &rl);
			}
			snprintf(nvf, sizeof(nvf), "nvme.open_files=%llu",
				 (unsigned long long)(n_keys + 2ull * o.queue_depth));
			so.sets[so.n_sets++] = nvf;
			/* The capacity laid out as files of the object size, written once, as fio
			 * lays out its files: waited for below, untimed like fio's layout. */
			snprintf(nvp, sizeof(nvp), "nvme.preallocate=%llu", (unsigned long long)obj);
			so.sets[so.n_sets++] = nvp;
		}
		int mrc = local ? bench_mkdirs(dir, 0700) : 0;
		if (mrc < 0)
			return cli_fail("bench", "cannot create %s: %s", dir, strerror(-mrc));
	}
	snprintf(qds, sizeof(qds), "nvme.queue_depth=%llu",
		 (unsigned long long)KVT_MIN((uint64_t)o.queue_depth * pieces, 4096));
	so.sets[so.n_sets++] = qds;
	/* The user's --set come last, so they override the benchmark's choices; --fsync after
	 * them. */
	{
		const char *order[32];
		int n = 0;
		for (int i = o.so.n_sets; i < so.n_sets; i++)
			order[n++] = so.sets[i];
		for (int i = 0; i < o.so.n_sets; i++)
			order[n++] = so.sets[i];
		memcpy(so.sets, order, sizeof(order[0]) * (size_t)n);
	}
	if (local && o.fsync) {
		snprintf(fsy[0], sizeof(fsy[0]), "nvme.fsync=%s", o.fsync);
		snprintf(fsy[1], sizeof(fsy[1]), "fs.fsync=%s", o.fsync);
		so.sets[so.n_sets++] = fsy[0];
		so.sets[so.n_sets++] = fsy[1];
	}
	struct kvt_config *cfg = cli_config(&so);
	if (!cfg)
		return 1;
	char fsync_mode[16] = "";
	if (local)
		kvt_config_get(cfg, nvme ? "nvme.fsync" : "fs.fsync", fsync_mode, sizeof(fsync_mode));
	bool ref_sync = local && strcmp(fsync_mode, "none");
	struct kvt_store *s;
	/* The directory's block device, for its counters: looked up before the store opens,
	 * while nothing has touched the device, since a stat of a directory on a device that
	 * stopped answering never returns (tests/integ/bench_stall_fs.sh). */
	char devp[256] = "";
	if (local)
		dev_path(dir, devp, sizeof(devp));
	uint64_t stall_ns = kvt__cfg_u64(cfg, "store.sync_timeout_ms") * 1000000ull;
	int orc = kvt_store_open(cfg, &s);
	if (orc < 0) {
		kvt_config_destroy(cfg);
		return cli_fail("bench", "cannot open the %s tier: %s", o.tier, kvt_strerror(orc));
	}
	struct kvt_stats st0;
	kvt_stats(s, &st0);
	if (nvme && st0.tier[0].objects)
		fprintf(stderr, "kvtier bench: %s already holds %llu objects: writes are not "
				"measured from an empty store\n",
			dir, (unsigned long long)st0.tier[0].objects);
	if (nvme && wait_layout(s, stall_ns) < 0)
		fprintf(stderr, "kvtier bench: the nvme tier's background layout (preallocated "
				"slots, log segments) made no progress: writes may find no free slot "
				"or unwritten segments\n");
	char c1[4200], c2[4200], c3[256];

	size_t payload = (size_t)o.chunk_bytes;
	/* What one operation counts for in GiB/s, on both sides: the object (fio's --bs,
	 * redis-benchmark's -d, curl's upload, rados bench's -b are all obj); memcpy copies
	 * the chunk. Counting kvtier's chunk against the reference's object understated a
	 * ratio by 4 KiB / obj: 5.9 % at 64 KiB. */
	size_t op_bytes = dram ? payload : (size_t)obj;
	uint32_t n_tokens = 256;
	struct keygen kg = {.ns = kvt_store_ns_id(s),
			    .salt = (uint32_t)(kvt__now_ns() ^ ((uint64_t)getpid() << 16) ^
					       (o.key_set * 0x9e3779b9ul))};
	struct kvt_key *keys = calloc(n_keys, sizeof(*keys));
	uint64_t *done_ids = calloc(n_keys, sizeof(*done_ids));
	if (!keys || !done_ids) {
		free(keys);
		free(done_ids);
		kvt_store_close(s);
		kvt_config_destroy(cfg);
		return cli_fail("bench", "out of memory");
	}
	uint64_t next_id = 0, n_done = 0;
	if (!o.so.json) {
		printf("kvtier bench: tier %s, chunk %llu B (object = one I/O = %llu B), %u objects "
		       "in flight (%.1f MiB) on both sides, working set %zu objects (%.2f GiB), "
		       "%.1f s measured + %.1f s ramp per phase in %d rounds",
		       o.tier, o.chunk_bytes, (unsigned long long)obj, o.queue_depth,
		       (double)o.queue_depth * (double)obj / 1048576.0, n_keys,
		       (double)n_keys * (double)obj / 1073741824.0, o.seconds, o.ramp, o.rounds);
		if (local)
			printf(", fsync %s (reference: fio%s)", fsync_mode,
			       ref_sync ? " --fdatasync=1" : " without fsync");
		printf("\n");
	}
	int phases[3], n_ph = 0;
	if (o.read_pct >= 0)
		phases[n_ph++] = o.read_pct;
	else {
		phases[n_ph++] = 0;
		phases[n_ph++] = 100;
		phases[n_ph++] = o.mixed_pct;
	}
	/* A first phase of fresh writes (nvme: into the empty store; rados) needs no working
	 * set before it; everything else does. */
	bool have_set = false;
	if (!(nvme || rados) || phases[0] != 0) {
		int wrc = working_set(s, &kg, keys, n_keys, n_tokens, payload, &next_id, done_ids,
				      n_done);
		if (wrc < 0)
			fprintf(stderr, "kvtier bench: storing the working set: %s\n",
				kvt_strerror(wrc));
		have_set = true;
	}
	int rrc = 0;
	if (local && !o.no_ref && (rrc = bench_ref_fio_layout(dir, obj, n_keys)) < 0)
		fprintf(stderr, "kvtier bench: laying out fio's files failed: %s\n",
			kvt_strerror(rrc));
	/* Both sides' files are laid out (kvtier's slots first, then fio's): the disk is let
	 * settle before the first round, untimed. Gigabytes first written leave this machine's
	 * virtual disk slower for a second or two after (docs/BENCHMARKS.md, "How a slot is
	 * first written"), which fell on the first round alone - whichever side it was. Both
	 * layouts fdatasync'ed every file: nothing is left to sync (a sync() here would also
	 * wait on every other file system of the machine, a stalled one included). */
	double settled = 0; /* the rest taken (JSON "settle") */
	if (local && !o.no_ref && rrc >= 0 && o.settle > 0) {
		settled = o.settle;
		struct timespec ts = {.tv_sec = (time_t)o.settle,
				      .tv_nsec = (long)((o.settle - (double)(time_t)o.settle) * 1e9)};
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	/* device requests under kvtier and under the reference, per phase */
	struct devstat kd[3] = {{0}}, rd[3] = {{0}}, d0;
	bool have_dev = local && dev_stat(devp, &d0) == 0;
	struct phase_result kr[3] = {0}, rr[3] = {0}, dr[3] = {0};
	bool have_dsync = false;
	/* reference rounds (fio --sync=dsync's included) that failed or measured nothing;
	 * a reference that declined to run (a Redis password, no free database, S3 keys not
	 * in the environment) is none */
	int ref_failed = 0;
	double spread[3][2] = {{0}};
	double slice = o.seconds / o.rounds;
	/* the RADOS reference's read set, laid out before its first read (bench_ref_rados_layout) */
	bool rados_set = false;
	char rados_pool[256] = "";
	long long wa_dev = 0;
	uint64_t wa_stored = 0;
	int turn = 0; /* rounds so far, over every phase: who goes first alternates on it */
	for (int p = 0; p < n_ph; p++) {
		struct phase_result kround[100], rround[100], dround[100], packed[100];
		bool rok[100] = {false}, dok[100] = {false};
		/* nvme: writes into the empty store. rados: writes of new objects in the write
		 * and the mixed phase, one write_full each like `rados bench write` (a replacement
		 * by remove, then put is two operations) */
		bool fresh = (nvme && phases[p] == 0) || (rados && phases[p] < 100);
		uint64_t first_id = next_id;
		if (!fresh && !have_set) {
			int wrc = working_set(s, &kg, keys, n_keys, n_tokens, payload, &next_id,
					      done_ids, n_done);
			if (wrc < 0)
				fprintf(stderr, "kvtier bench: storing the working set: %s\n",
					kvt_strerror(wrc));
			have_set = true;
		}
		for (int r = 0; r < o.rounds; r++) {
			memset(&kround[r], 0, sizeof(kround[r]));
			memset(&rround[r], 0, sizeof(rround[r]));
			memset(&dround[r], 0, sizeof(dround[r]));
			struct phase_args pa = {.s = s, .keys = keys, .n_keys = n_keys,
						.payload = payload, .op_bytes = op_bytes,
						.n_tokens = n_tokens,
						.qd = o.queue_depth, .ramp = o.ramp, .seconds = slice,
						.read_pct = phases[p], .fresh = fresh,
						.in_place = in_place, .kg = &kg,
						.next_id = &next_id, .done_ids = done_ids,
						.n_done = &n_done};
			struct slice_dev sd = {.path = have_dev ? devp : NULL, .acc = &kd[p],
					       .wa_dev = &wa_dev, .wa_stored = &wa_stored};
			/* Who goes first alternates by round, counted across phases (a count
			 * that started again each phase gave every phase's first slice to kvtier,
			 * right after the reference's last write slice, with odd --rounds). The
			 * side that runs second inherits the first one's aftermath (a server's
			 * background work after a write round, the device's write-back), and a
			 * fixed order gave it to the same side every round (docs/BENCHMARKS.md,
			 * "S3 reads"). */
			bool ref_first = (turn++ & 1) && !o.no_ref;
			if (!ref_first)
				kvtier_slice(&pa, fresh && rados, &sd, &kround[r]);
			if (o.no_ref)
				continue;
			if (have_dev)
				dev_stat(devp, &d0);
			rrc = 0;
			if (dram)
				bench_ref_memcpy(payload, n_keys, o.queue_depth, slice, phases[p], &rround[r]);
			else if (local)
				rrc = bench_ref_fio(dir, obj, n_keys, o.queue_depth, o.ramp, slice,
						    phases[p],
						    ref_sync ? REF_SYNC_FDATASYNC : REF_SYNC_NONE,
						    &rround[r]);
			else if (!strcmp(o.tier, "redis")) {
				kvt_config_get(cfg, "redis.url", c1, sizeof(c1));
				kvt_config_get(cfg, "redis.connections", c2, sizeof(c2));
				rrc = bench_ref_redis(c1, obj, n_keys, o.queue_depth,
						      (unsigned)strtoul(c2, NULL, 10), slice,
						      phases[p], &rround[r]);
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
				rrc = bench_ref_s3(c1, c2, c3, obj, n_keys, o.queue_depth, o.ramp,
						   slice, phases[p], &rround[r]);
			} else if (!strcmp(o.tier, "rados")) {
				kvt_config_get(cfg, "rados.pool", rados_pool, sizeof(rados_pool));
				rrc = 0;
				if (phases[p] > 0 && !rados_set &&
				    (rrc = bench_ref_rados_layout(rados_pool, obj, n_keys,
								  o.queue_depth)) == 0)
					rados_set = true;
				if (!rrc)
					rrc = bench_ref_rados(rados_pool, obj, o.queue_depth, slice,
							      phases[p], &rround[r]);
			}
			if (have_dev)
				dev_acc(devp, &d0, &rd[p]);
			/* fio's fdatasync is an I/O of its own in its iodepth, so it keeps fewer
			 * writes in flight than its iodepth, and at iodepth > 1 it is issued
			 * before its write completes (docs/BENCHMARKS.md). --sync=dsync makes
			 * each write durable at its completion, as kvtier's are: measured too. */
			if (ref_sync && phases[p] < 100) {
				int drc = bench_ref_fio(dir, obj, n_keys, o.queue_depth, o.ramp, slice,
							phases[p], REF_SYNC_DSYNC, &dround[r]);
				dok[r] = ref_round_ok(drc, &dround[r], phases[p]);
				have_dsync |= dok[r];
				if (!dok[r]) {
					ref_failed++;
					fprintf(stderr, "kvtier bench: fio --sync=dsync failed or measured "
							"nothing in round %d: left out\n", r + 1);
				}
			}
			rok[r] = ref_round_ok(rrc, &rround[r], phases[p]);
			bool declined = rrc == -EPERM || rrc == -ENOKEY ||
					(rrc == -EBUSY && !strcmp(o.tier, "redis"));
			if (!rok[r] && !declined) {
				ref_failed++;
				if (rrc == 0)
					fprintf(stderr, "kvtier bench: the %s reference did not measure "
							"%s in round %d: left out\n", reference_name(o.tier),
						phases[p] == 100 ? "reads" : phases[p] == 0 ? "writes"
								: "both reads and writes", r + 1);
			}
			if (rrc == -EPERM)
				fprintf(stderr, "kvtier bench: no reference: redis-benchmark takes a "
						"password only on its command line, which any user "
						"can read\n");
			else if (rrc == -ENOKEY)
				fprintf(stderr, "kvtier bench: no reference: curl needs the S3 keys in "
						"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY and an "
						"endpoint (s3.endpoint or KVTIER_S3_ENDPOINT)\n");
			else if (rrc == -EBUSY && !strcmp(o.tier, "redis"))
				fprintf(stderr, "kvtier bench: no reference: no empty redis database "
						"(1-15, not the tier's) for redis-benchmark to write "
						"into and clean up after\n");
			else if (rrc < 0)
				fprintf(stderr, "kvtier bench: the %s reference failed: %s\n",
					reference_name(o.tier), kvt_strerror(rrc));
			if (ref_first)
				kvtier_slice(&pa, fresh && rados, &sd, &kround[r]);
		}
		combine(kround, o.rounds, &kr[p]);
		/* the references over the rounds they measured (ref_round_ok) */
		combine(packed, ok_rounds(rround, rok, o.rounds, packed), &rr[p]);
		combine(packed, ok_rounds(dround, dok, o.rounds, packed), &dr[p]);
		/* The spread of the rounds' own ratios (kvtier round r / reference round r, run
		 * back to back): how far the machine's noise moves one ratio. */
		for (int r = 0, seen = 0; r < o.rounds && !o.no_ref; r++) {
			if (!rok[r])
				continue;
			double kt = kround[r].read_gibps + kround[r].write_gibps;
			double rt = rround[r].read_gibps + rround[r].write_gibps;
			double q = kt / rt;
			if (!seen || q < spread[p][0])
				spread[p][0] = q;
			if (!seen++ || q > spread[p][1])
				spread[p][1] = q;
		}
		if (fresh && phases[p] == 0) {
			/* reads and replacements use the objects the write phase stored last */
			uint64_t last_id = next_id;
			int wrc = working_set(s, &kg, keys, n_keys, n_tokens, payload, &next_id,
					      done_ids, n_done);
			if (wrc < 0)
				fprintf(stderr, "kvtier bench: storing the working set: %s\n",
					kvt_strerror(wrc));
			have_set = true;
			if (rados) /* the rest of the phase's objects */
				remove_ids(s, &kg, first_id, last_id, done_ids,
					   (size_t)KVT_MIN(n_done, (uint64_t)n_keys));
		}
	}
	if (local && !o.no_ref)
		bench_ref_fio_remove(dir);
	if (rados_set)
		bench_ref_rados_remove(rados_pool);
	struct kvt_stats st;
	kvt_stats(s, &st);
	/* After the statistics: the removals are no part of the measurement. Not after failed
	 * operations: a server that fails (full, stalled) would hold the result up by a
	 * deadline per batch of removals. */
	uint64_t failed = 0;
	for (int p = 0; p < n_ph; p++)
		failed += kr[p].errors;
	if (remote && have_set && !failed)
		remove_keys(s, keys, n_keys);
	else if (remote && have_set)
		fprintf(stderr, "kvtier bench: operations failed: the working set (%zu objects) is "
				"left on the %s tier\n", n_keys, o.tier);
	kvt_store_close(s);
	kvt_config_destroy(cfg);
	free(keys);
	free(done_ids);

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
			ref.read_iops = rr[p].read_iops;
		}
		if (phases[p] == 0 || (n_ph == 1 && phases[p] < 100)) {
			head.write_gibps = kr[p].write_gibps, head.write_iops = kr[p].write_iops;
			head.write_p50 = kr[p].write_p50, head.write_p99 = kr[p].write_p99;
			head.write_p999 = kr[p].write_p999;
			ref.write_gibps = rr[p].write_gibps, ref.write_p99 = rr[p].write_p99;
			ref.write_p50 = rr[p].write_p50, ref.write_p999 = rr[p].write_p999;
			ref.write_iops = rr[p].write_iops;
			ref.sync_p50 = rr[p].sync_p50, ref.sync_p99 = rr[p].sync_p99;
		}
		if (phases[p] > 0 && phases[p] < 100 && n_ph > 1) {
			mixed = kr[p];
			mref = rr[p];
			have_mixed = true;
		}
	}
	uint64_t errors = 0;
	for (int p = 0; p < n_ph; p++)
		errors += kr[p].errors;
	if (!o.so.json) {
		static const char *names[] = {"write", "read", "mixed"};
		for (int p = 0; p < n_ph; p++)
			print_phase(n_ph == 1 ? "run" : names[p], &kr[p], &rr[p], phases[p]);
		for (int p = 0; p < n_ph && have_dsync; p++)
			if (phases[p] < 100)
				printf("  %-6s vs fio --sync=dsync (each write durable at its "
				       "completion, as kvtier's): ref read %.3f write %.3f GiB/s | "
				       "ratio %.3f\n",
				       n_ph == 1 ? "run" : names[p], dr[p].read_gibps,
				       dr[p].write_gibps, both_ratio(&kr[p], &dr[p]));
		printf("  reference: %s\n", reference_name(o.tier));
		if (ref_failed)
			printf("  reference rounds that failed or measured nothing (left out of the "
			       "reference's figures and the round ranges): %d\n", ref_failed);
		if (!o.no_ref)
			for (int p = 0; p < n_ph; p++)
				printf("  %-6s ratio of each round (kvtier / reference, back to back): "
				       "%.3f .. %.3f\n", n_ph == 1 ? "run" : names[p], spread[p][0],
				       spread[p][1]);
		if (have_dev) {
			for (int p = 0; p < n_ph; p++)
				printf("  %-6s device requests: kvtier read %.0f KiB, write %.0f KiB | "
				       "ref read %.0f KiB, write %.0f KiB (mean size)\n",
				       n_ph == 1 ? "run" : names[p], kib_per_req(kd[p].rsect, kd[p].rios),
				       kib_per_req(kd[p].wsect, kd[p].wios),
				       kib_per_req(rd[p].rsect, rd[p].rios),
				       kib_per_req(rd[p].wsect, rd[p].wios));
			for (int p = 0; p < n_ph; p++)
				printf("  %-6s device requests in flight while busy: kvtier read %.1f, "
				       "write %.1f, busy %.0f%%, %lld flushes | ref read %.1f, write "
				       "%.1f, busy %.0f%%, %lld flushes\n",
				       n_ph == 1 ? "run" : names[p],
				       in_flight(kd[p].rticks, kd[p].io_ticks),
				       in_flight(kd[p].wticks, kd[p].io_ticks), 100 * busy(&kd[p]),
				       kd[p].flushes, in_flight(rd[p].rticks, rd[p].io_ticks),
				       in_flight(rd[p].wticks, rd[p].io_ticks), 100 * busy(&rd[p]),
				       rd[p].flushes);
			for (int p = 0; p < n_ph; p++)
				if (kd[p].dsect || rd[p].dsect)
					printf("  %-6s device discards: kvtier %.0f MiB, %.1f in flight "
					       "while busy | ref %.0f MiB, %.1f in flight\n",
					       n_ph == 1 ? "run" : names[p], kd[p].dsect / 2048.0,
					       in_flight(kd[p].dticks, kd[p].io_ticks), rd[p].dsect / 2048.0,
					       in_flight(rd[p].dticks, rd[p].io_ticks));
			if (wa_stored)
				printf("  write amplification (device bytes written / bytes stored, "
				       "write phase): %.3f\n", (double)wa_dev * 512.0 / (double)wa_stored);
		}
		if (st.tier[0].reinsert_bytes)
			printf("  re-appended to keep hot objects: %llu bytes (%.3f x the bytes stored)\n",
			       (unsigned long long)st.tier[0].reinsert_bytes,
			       st.tier[0].write_bytes ? (double)st.tier[0].reinsert_bytes /
							    (double)st.tier[0].write_bytes : 0.0);
		return errors || ref_failed ? 1 : 0;
	}
	printf("{\"tier\":\"%s\",\"chunk_bytes\":%llu,\"object_bytes\":%llu,\"queue_depth\":%u,"
	       "\"bytes_in_flight\":%llu,\"objects\":%zu,\"seconds\":%.1f,\"ramp\":%.1f,"
	       "\"settle\":%.1f,"
	       "\"rounds\":%d,\"read_pct\":%d,\"fsync\":\"%s\",\"reference\":\"%s%s\"",
	       o.tier, o.chunk_bytes, (unsigned long long)obj, o.queue_depth,
	       (unsigned long long)obj * o.queue_depth, n_keys, o.seconds, o.ramp, settled,
	       o.rounds, o.read_pct, local ? fsync_mode : "", reference_name(o.tier),
	       ref_sync ? " --fdatasync=1" : "");
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
	for (int p = 0; p < n_ph && have_dsync; p++) {
		if (phases[p] == 100)
			continue;
		const char *pn = n_ph == 1 ? "run" : phases[p] == 0 ? "write" : "mixed";
		const char *pre = n_ph > 1 && phases[p] == 0 ? "" : n_ph == 1 ? "run_" : "mixed_";
		printf(",\"ref_dsync_%sread_gibps\":%.6f,\"ref_dsync_%swrite_gibps\":%.6f,"
		       "\"dsync_%s_ratio\":%.4f",
		       pre, dr[p].read_gibps, pre, dr[p].write_gibps, pn, both_ratio(&kr[p], &dr[p]));
	}
	if (!o.no_ref) {
		static const char *sn[] = {"write", "read", "mixed"};
		for (int p = 0; p < n_ph; p++)
			printf(",\"%s_round_ratio_min\":%.4f,\"%s_round_ratio_max\":%.4f",
			       n_ph == 1 ? "run" : sn[p], spread[p][0], n_ph == 1 ? "run" : sn[p],
			       spread[p][1]);
	}
	if (have_dev) {
		static const char *pn[] = {"", "read_phase_", "mixed_phase_"};
		for (int p = 0; p < n_ph; p++) {
			const char *pre = n_ph == 1 ? "" : pn[p];
			printf(",\"%sdev_read_req_kib\":%.1f,\"%sdev_write_req_kib\":%.1f,"
			       "\"%sref_dev_read_req_kib\":%.1f,\"%sref_dev_write_req_kib\":%.1f",
			       pre, kib_per_req(kd[p].rsect, kd[p].rios), pre,
			       kib_per_req(kd[p].wsect, kd[p].wios), pre,
			       kib_per_req(rd[p].rsect, rd[p].rios), pre,
			       kib_per_req(rd[p].wsect, rd[p].wios));
			printf(",\"%sdev_read_inflight\":%.2f,\"%sdev_write_inflight\":%.2f,"
			       "\"%sdev_busy\":%.3f,\"%sdev_flushes\":%lld,"
			       "\"%sref_dev_read_inflight\":%.2f,\"%sref_dev_write_inflight\":%.2f,"
			       "\"%sref_dev_busy\":%.3f,\"%sref_dev_flushes\":%lld",
			       pre, in_flight(kd[p].rticks, kd[p].io_ticks), pre,
			       in_flight(kd[p].wticks, kd[p].io_ticks), pre, busy(&kd[p]), pre,
			       kd[p].flushes, pre, in_flight(rd[p].rticks, rd[p].io_ticks), pre,
			       in_flight(rd[p].wticks, rd[p].io_ticks), pre, busy(&rd[p]), pre,
			       rd[p].flushes);
			printf(",\"%sdev_discard_mib\":%.1f,\"%sdev_discard_inflight\":%.2f,"
			       "\"%sref_dev_discard_mib\":%.1f,\"%sref_dev_discard_inflight\":%.2f",
			       pre, kd[p].dsect / 2048.0, pre, in_flight(kd[p].dticks, kd[p].io_ticks),
			       pre, rd[p].dsect / 2048.0, pre, in_flight(rd[p].dticks, rd[p].io_ticks));
		}
		if (wa_stored)
			printf(",\"write_amplification\":%.4f", (double)wa_dev * 512.0 / (double)wa_stored);
	}
	/* Bytes the tier rewrote on its own to keep hot objects (the NVMe log's reinsertion),
	 * over the whole run, against the bytes it was given to store. */
	printf(",\"tier_write_bytes\":%llu,\"reinsert_bytes\":%llu,\"reinsert_amplification\":%.4f",
	       (unsigned long long)st.tier[0].write_bytes, (unsigned long long)st.tier[0].reinsert_bytes,
	       st.tier[0].write_bytes ? (double)(st.tier[0].write_bytes + st.tier[0].reinsert_bytes) /
					    (double)st.tier[0].write_bytes : 0.0);
	printf(",\"errors\":%llu,\"ref_failed_rounds\":%d,\"checksum_failures\":%llu,"
	       "\"deadline_misses\":%llu,\"deadline_extensions\":%llu}\n",
	       (unsigned long long)errors, ref_failed,
	       (unsigned long long)st.tier[0].checksum_failures,
	       (unsigned long long)st.tier[0].deadline_misses,
	       (unsigned long long)st.tier[0].deadline_extensions);
	/* Out now: the exit may wait on a tier thread stuck in a hung mount (and under ASan
	 * LeakSanitizer's exit check waits on every thread), the result must not. */
	fflush(stdout);
	/* A failed reference round is an error of the measurement: the figures stand on the
	 * other rounds, the exit status says they are fewer. */
	return errors || ref_failed ? 1 : 0;
}
