/*
 * bench_mlperf.c - `kvtier bench --workload mlperf-kv`: the MLPerf Storage v3.0 KV-cache
 * workload run natively against the configured tiers (docs/MLPERF_KV.md says how it maps to
 * the rules and what differs).
 *
 * Simulated users hold conversations of chatbot (512-4096 context tokens), coding
 * (4096-25000) or document (4096-16384) type; a conversation ends after each turn with
 * probability 0.2. Two user models (--user-model):
 *   - harness (the default): the MLPerf harness's own (kv_cache/workload.py and
 *     benchmark.py at mlcommons/storage 23aa82e, read 2026-12-02): each user draws a maximum
 *     context and output once, each request a context in [max/4, max] and an output in
 *     [max/4, max]; a request reads every earlier turn's entry of its conversation, writes
 *     its own entry (new keys: entries do not share chunks), and, below 10,000 context
 *     tokens, reads that entry back 1 + ceil(output / 32) times; classes 15/35/50 %.
 *   - chained: what a prefix cache does with the same users: a turn extends its
 *     conversation's context, reads the cached prefix (earlier turns, or one of four
 *     shared system prompts, 20 % of conversations), writes only the new chunks, then
 *     re-reads the whole entry every 32 decode tokens; classes uniform thirds.
 * When the store's queue is full, the next chunk operation comes from the highest class
 * that has one ready.
 *
 * An entry is the chunks of 512 tokens of the context (KV bytes of the model's size times
 * --scale); its read or write is all its chunks, submitted as fast as the global queue
 * depth allows; its latency is the first submit to the last completion, like a request's
 * storage time in the MLPerf harness. Users are state machines driven by one thread through
 * the store's asynchronous API (the store's own I/O threads do the I/O), so 200 users need
 * no 200 threads. Writes come from one static buffer (the harness uses a static noise buffer
 * for the same reason: generating bytes must not be the bottleneck).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "bench.h"
#include "bench_mlperf_ref.h"
#include "cli.h"
#include "config.h"
#include "scaled_geometry.h"

#define CMD "bench"
#define CHUNK 512u
#define MAX_CTX 32768u /* a conversation stops growing past this */
#define MAX_CHUNKS (MAX_CTX / CHUNK + 8)
#define H_MAX_TURNS 50u	     /* the harness caps a conversation at 50 turns */
#define H_PREFILL_ONLY 10000u /* the harness's requests from this context on get no decode */
#define H_KEYS (H_MAX_TURNS * (25000u / CHUNK + 1))
#define SYS_TOKENS 2048u
#define N_SYS 4u /* distinct shared system prompts */
#define DECODE_READ_EVERY 32u
#define N_CLASSES 3

static const char *class_name[N_CLASSES] = {"interactive", "responsive", "batch"};

enum ukind { U_CHAT = 0, U_CODE = 1, U_DOC = 2 };
static const char *kind_name[3] = {"chatbot", "coding", "document"};
static const uint32_t ctx_min[3] = {512, 4096, 4096}, ctx_max[3] = {4096, 25000, 16384};
static const uint32_t out_min[3] = {50, 100, 200}, out_max[3] = {200, 500, 800}; /* harness */

enum umodel { UM_HARNESS = 0, UM_CHAINED = 1 };
static const char *umodel_name[2] = {"harness", "chained"};

struct mb;

struct user {
	struct mb *m;
	uint32_t id, kind, cls;
	uint64_t rng, conv;
	int sys; /* -1 or the system prompt used by this conversation */
	uint32_t ctx_chunks, cached_chunks, decode_reads_left;
	/* harness model: per-user maxima, the conversation's entries back to back in keys[],
	 * the current one at [entry_begin, ctx_chunks) */
	uint32_t hctx_max, hout_max, entry_begin, turns;
	bool written;
	struct kvt_key *keys; /* MAX_CHUNKS (chained) or H_KEYS (harness) */
	/* the entry operation in progress */
	bool is_read, active;
	uint32_t op_begin, op_end, next, done, hits;
	uint64_t t0;
};

struct gslot {
	struct user *u;
	void *buf;
	bool busy;
};

struct mb {
	struct kvt_store *s;  /* the store, or */
	struct mref *ref;     /* the reference (--ref): the harness's files */
	uint8_t ns[KVT_NS_ID_BYTES]; /* the keys' namespace */
	enum umodel model;
	struct user *users;
	uint32_t n_users, qd, inflight;
	struct gslot *slots;
	void *wbuf;
	size_t payload;
	uint32_t rr[N_CLASSES];
	uint64_t tick;
	struct kvt_key sys_keys[N_SYS][SYS_TOKENS / CHUNK];
	bool stop;
	/* results */
	uint64_t read_bytes, write_bytes, read_chunks, hit_chunks, write_chunks, errors;
	uint64_t writes_rejected, entries_read, entries_written, requests, cached_tokens;
	struct lat rl, wl, rl_cls[N_CLASSES];
	int last_err;
};

static double uni(uint64_t *r)
{
	return (double)(bench_rnd(r) >> 11) / 9007199254740992.0;
}

static uint32_t range_u(uint64_t *r, uint32_t lo, uint32_t hi)
{
	return lo + (uint32_t)(uni(r) * (double)(hi - lo + 1));
}

static void new_turn_entry(struct user *u);
static void harness_request(struct user *u);

static void op_start(struct user *u, bool read, uint32_t begin, uint32_t end)
{
	u->is_read = read;
	u->op_begin = u->next = begin;
	u->op_end = end;
	u->done = u->hits = 0;
	u->active = true;
	u->t0 = kvt__now_ns();
}

/* A new conversation: type-dependent context, maybe a shared system prompt. */
static void new_conversation(struct user *u)
{
	const struct kvt_key *parent = NULL;
	uint32_t tok[3];
	u->conv++;
	if (u->m->model == UM_HARNESS) {
		u->ctx_chunks = u->turns = 0;
		harness_request(u);
		return;
	}
	u->sys = uni(&u->rng) < 0.2 ? (int)(bench_rnd(&u->rng) % N_SYS) : -1;
	uint32_t ctx = range_u(&u->rng, ctx_min[u->kind], ctx_max[u->kind]);
	u->ctx_chunks = (ctx + CHUNK - 1) / CHUNK;
	uint32_t first = 0;
	u->cached_chunks = 0;
	if (u->sys >= 0) {
		first = SYS_TOKENS / CHUNK;
		memcpy(u->keys, u->m->sys_keys[u->sys], sizeof(u->m->sys_keys[0]));
		u->cached_chunks = first; /* shared: expected in the cache */
		u->ctx_chunks += first;
		parent = &u->keys[first - 1];
	}
	for (uint32_t i = first; i < u->ctx_chunks; i++) {
		tok[0] = u->id;
		tok[1] = (uint32_t)u->conv;
		tok[2] = i;
		kvt_key_next(u->m->ns, parent, tok, 3, &u->keys[i]);
		parent = &u->keys[i];
	}
	new_turn_entry(u);
}

/* A turn: read the cached prefix (if any), else go straight to the prefill write. */
static void new_turn_entry(struct user *u)
{
	u->m->requests++;
	if (u->cached_chunks)
		op_start(u, true, 0, u->cached_chunks);
	else
		op_start(u, false, 0, u->ctx_chunks);
}

/* A harness request: draw its context and output, lay out its entry's keys after the
 * conversation's earlier entries, and read those first (the harness reads every earlier
 * turn's entry), else go straight to writing the entry. */
static void harness_request(struct user *u)
{
	struct mb *m = u->m;
	uint32_t ctx = range_u(&u->rng, KVT_MAX(u->hctx_max / 4, 1), u->hctx_max);
	uint32_t out = range_u(&u->rng, KVT_MAX(u->hout_max / 4, 1), u->hout_max);
	uint32_t n = (ctx + CHUNK - 1) / CHUNK;
	m->requests++;
	u->turns++;
	u->entry_begin = u->ctx_chunks;
	u->ctx_chunks += n;
	u->written = false;
	u->decode_reads_left = ctx < H_PREFILL_ONLY ? 1 + (out + DECODE_READ_EVERY - 1) /
							      DECODE_READ_EVERY
						 : 0;
	for (uint32_t i = u->entry_begin; i < u->ctx_chunks; i++) {
		uint32_t tok[3] = {u->id, (uint32_t)u->conv, i};
		kvt_key_next(m->ns, i > u->entry_begin ? &u->keys[i - 1] : NULL,
			     tok, 3, &u->keys[i]);
	}
	if (u->entry_begin)
		op_start(u, true, 0, u->entry_begin);
	else
		op_start(u, false, 0, u->ctx_chunks);
}

/* The harness model's next step after an entry operation: earlier turns read -> write the
 * entry -> decode reads of it -> the next request, or a new conversation. */
static void harness_next(struct user *u)
{
	if (!u->written) {
		if (u->is_read) { /* the earlier turns are read: now the entry's prefill */
			op_start(u, false, u->entry_begin, u->ctx_chunks);
			return;
		}
		u->written = true;
	}
	if (u->decode_reads_left) {
		u->decode_reads_left--;
		op_start(u, true, u->entry_begin, u->ctx_chunks);
		return;
	}
	if (uni(&u->rng) < 0.2 || u->turns >= H_MAX_TURNS)
		new_conversation(u);
	else
		harness_request(u);
}

/* The entry operation of u completed: record it and choose the user's next one. */
static void op_finished(struct user *u)
{
	struct mb *m = u->m;
	double us = (double)(kvt__now_ns() - u->t0) / 1000.0;
	u->active = false;
	if (u->is_read) {
		lat_add(&m->rl, us);
		lat_add(&m->rl_cls[u->cls], us);
		m->entries_read++;
		m->cached_tokens += (uint64_t)u->hits * CHUNK;
	} else {
		lat_add(&m->wl, us);
		m->entries_written++;
	}
	if (m->stop)
		return;
	if (m->model == UM_HARNESS) {
		harness_next(u);
		return;
	}
	if (u->is_read && u->op_end == u->cached_chunks && u->decode_reads_left == 0 &&
	    u->cached_chunks < u->ctx_chunks) {
		/* prefix read done: prefill writes the rest of the entry - all of it when some of
		 * the prefix missed (a shared system prompt nobody stored yet, or one evicted):
		 * the chunks still held are skipped by the store (a put is idempotent), the
		 * missing ones are stored again, as an engine that recomputed them would */
		bool whole = u->hits < u->op_end - u->op_begin;
		op_start(u, false, whole ? 0 : u->cached_chunks, u->ctx_chunks);
		return;
	}
	if (!u->is_read) {
		/* prefill written: decode re-reads the entry every 32 tokens */
		uint32_t out = range_u(&u->rng, 64, 512);
		u->decode_reads_left = out / DECODE_READ_EVERY;
		u->cached_chunks = u->ctx_chunks;
		u->rng ^= out;
	}
	if (u->decode_reads_left) {
		u->decode_reads_left--;
		op_start(u, true, 0, u->ctx_chunks);
		return;
	}
	/* the turn is over: end the conversation, or grow the context for the next turn */
	uint32_t grow = (range_u(&u->rng, 64, 512) + range_u(&u->rng, 64, 512) + CHUNK - 1) / CHUNK;
	if (uni(&u->rng) < 0.2 || u->ctx_chunks + grow > MAX_CHUNKS - 1) {
		new_conversation(u);
		return;
	}
	const struct kvt_key *parent = &u->keys[u->ctx_chunks - 1];
	for (uint32_t i = u->ctx_chunks; i < u->ctx_chunks + grow; i++) {
		uint32_t tok[3] = {u->id, (uint32_t)u->conv, i};
		kvt_key_next(m->ns, parent, tok, 3, &u->keys[i]);
		parent = &u->keys[i];
	}
	u->ctx_chunks += grow;
	new_turn_entry(u);
}

static void chunk_done(void *arg, const struct kvt_result *res)
{
	struct gslot *sl = arg;
	struct user *u = sl->u;
	struct mb *m = u->m;
	sl->busy = false;
	m->inflight--;
	if (u->is_read) {
		m->read_chunks++;
		if (res->status >= 0) {
			m->hit_chunks++;
			u->hits++;
			m->read_bytes += res->bytes;
		} else if (res->status != -ENOENT) {
			m->errors++;
			m->last_err = res->status;
		}
	} else {
		m->write_chunks++;
		if (res->status >= 0) {
			m->write_bytes += res->bytes;
		} else if (res->status == -ENOSPC) {
			m->writes_rejected++;
		} else {
			m->errors++;
			m->last_err = res->status;
		}
	}
	if (++u->done == u->op_end - u->op_begin)
		op_finished(u);
}

/* Submit one chunk operation of class c: 1 submitted, 0 none ready, -1 queue full. */
static int submit_one(struct mb *m, int c)
{
	for (uint32_t k = 0; k < m->n_users; k++) {
		uint32_t i = (m->rr[c] + k) % m->n_users;
		struct user *u = &m->users[i];
		if (u->cls != (uint32_t)c || !u->active || u->next >= u->op_end)
			continue;
		struct gslot *sl = NULL;
		for (uint32_t j = 0; j < m->qd && !sl; j++)
			if (!m->slots[j].busy)
				sl = &m->slots[j];
		if (!sl)
			return -1;
		uint32_t ci = u->next;
		sl->u = u;
		int rc;
		if (m->ref)
			rc = u->is_read ? mref_get(m->ref, u->id, u->conv, ci, sl->buf, m->payload,
						   chunk_done, sl)
					: mref_put(m->ref, u->id, u->conv, ci, m->wbuf, m->payload,
						   chunk_done, sl);
		else
			rc = u->is_read ? kvt_get(m->s, &u->keys[ci], 0, 0, sl->buf, m->payload,
						  chunk_done, sl)
					: kvt_put(m->s, &u->keys[ci],
						  ci > u->entry_begin ? &u->keys[ci - 1] : NULL, CHUNK,
						  m->wbuf, m->payload, chunk_done, sl);
		if (rc == -EAGAIN)
			return -1;
		u->next++;
		m->rr[c] = i + 1;
		if (rc < 0) {
			m->errors++;
			m->last_err = rc;
			if (++u->done == u->op_end - u->op_begin)
				op_finished(u);
			return 1;
		}
		sl->busy = true;
		m->inflight++;
		return 1;
	}
	return 0;
}

/* Submit chunk operations while the queue has room. Classes share it 4:2:1 (interactive,
 * responsive, batch) when all have work; a class with nothing ready gives its turn to the
 * next one, highest first, so no capacity is left idle and no class starves. */
static void dispatch(struct mb *m)
{
	static const int pattern[7] = {0, 1, 0, 2, 0, 1, 0};
	while (m->inflight < m->qd && !m->stop) {
		int c0 = pattern[m->tick++ % 7], r = submit_one(m, c0);
		for (int c = 0; c < N_CLASSES && r == 0; c++)
			if (c != c0)
				r = submit_one(m, c);
		if (r <= 0)
			return;
	}
}

/* Users for a run (their key arrays); freed, with the run's latencies, by mb_free_users. */
static int mb_alloc_users(struct mb *m)
{
	m->users = calloc(m->n_users, sizeof(*m->users));
	if (!m->users)
		return -ENOMEM;
	for (uint32_t i = 0; i < m->n_users; i++)
		if (!(m->users[i].keys = calloc(m->model == UM_HARNESS ? H_KEYS : MAX_CHUNKS,
						sizeof(struct kvt_key))))
			return -ENOMEM;
	return 0;
}

static void mb_free_users(struct mb *m)
{
	if (m->users)
		for (uint32_t i = 0; i < m->n_users; i++)
			free(m->users[i].keys);
	free(m->users);
	m->users = NULL;
	free(m->rl.v);
	free(m->wl.v);
	for (int c = 0; c < N_CLASSES; c++)
		free(m->rl_cls[c].v);
}

static int mb_poll(struct mb *m, int timeout_ms)
{
	return m->ref ? mref_poll(m->ref, timeout_ms) : kvt_poll(m->s, timeout_ms);
}

/* Drive the users (the same ones for the store and the reference: same seed) for seconds,
 * then wait for the operations in flight. The measured seconds. */
static double run_users(struct mb *m, uint64_t seed, double seconds, uint64_t kinds[3])
{
	for (uint32_t p = 0; p < N_SYS; p++)
		for (uint32_t c = 0; c < SYS_TOKENS / CHUNK; c++) {
			uint32_t tok[3] = {0xffffffffu, p, c};
			kvt_key_next(m->ns, c ? &m->sys_keys[p][c - 1] : NULL, tok, 3,
				     &m->sys_keys[p][c]);
		}
	kinds[0] = kinds[1] = kinds[2] = 0;
	for (uint32_t i = 0; i < m->n_users; i++) {
		struct user *u = &m->users[i];
		u->m = m;
		u->id = i;
		u->rng = (seed + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)i * 0xbf58476d1ce4e5b9ull);
		if (!u->rng)
			u->rng = 1;
		bench_rnd(&u->rng);
		u->kind = (uint32_t)(bench_rnd(&u->rng) % 3);
		if (m->model == UM_HARNESS) { /* 15 % interactive, 35 % responsive, 50 % batch */
			double c = uni(&u->rng);
			u->cls = c < 0.15 ? 0 : c < 0.5 ? 1 : 2;
			u->hctx_max = range_u(&u->rng, ctx_min[u->kind], ctx_max[u->kind]);
			u->hout_max = range_u(&u->rng, out_min[u->kind], out_max[u->kind]);
		} else {
			u->cls = (uint32_t)(bench_rnd(&u->rng) % N_CLASSES);
		}
		kinds[u->kind]++;
		new_conversation(u);
	}
	uint64_t t0 = kvt__now_ns(), end = t0 + (uint64_t)(seconds * 1e9);
	while (kvt__now_ns() < end) {
		dispatch(m);
		mb_poll(m, 10);
	}
	m->stop = true;
	while (m->inflight)
		mb_poll(m, 100);
	return (double)(kvt__now_ns() - t0) / 1e9;
}

static void usage(void)
{
	printf("usage: kvtier bench --workload mlperf-kv [--option 1|2|3] [--model M] [--users N]\n"
	       "                    [--seconds S] [--dir D] [--dram-bytes B] [--nvme-bytes B]\n"
	       "                    [--scale X] [--queue-depth N] [--seed S]\n"
	       "                    [--user-model harness|chained] [--json]\n"
	       "The MLPerf Storage v3.0 KV-cache workload against the tiers (docs/MLPERF_KV.md).\n"
	       "  --option N       the rules' submission options (explicit flags override):\n"
	       "                   1: llama3.1-8b, 200 users, no CPU memory (NVMe only), 300 s\n"
	       "                   2: llama3.1-8b, 100 users, 4 GiB CPU memory (DRAM + NVMe), 300 s\n"
	       "                   3: llama3.1-70b, 70 users, no CPU memory, 300 s\n"
	       "  --model M        model preset (default llama3.1-8b)\n"
	       "  --users N        simulated users, 1..100000 (default 200)\n"
	       "  --seconds S      run time (default 30; options: 300)\n"
	       "  --dir D          NVMe directory (default ./kvtier-data/mlperf-kv)\n"
	       "  --dram-bytes B   CPU memory of the rules (unscaled; the pool gets B x scale);\n"
	       "                   0 (default): no DRAM tier\n"
	       "  --nvme-bytes B   NVMe capacity (default: the users' working set, about 12k tokens\n"
	       "                   each, capped at 80%% of the free space in D)\n"
	       "  --scale X        KV bytes = the model's x X, in (0, 1] (default 1: the rules' sizes)\n"
	       "  --queue-depth N  chunk operations in flight (default: 64, at most 1 GiB of\n"
	       "                   chunks, at least 4)\n"
	       "  --seed S         (default 42)\n"
	       "  --user-model M   harness (default): the MLPerf harness's requests (an entry\n"
	       "                   per request, earlier turns read, 1 + output/32 re-reads);\n"
	       "                   chained: turns extend a shared prefix, only new chunks written\n"
	       "  --fsync none|data  nvme.fsync (default data, the shipped default: the harness\n"
	       "                   fsyncs each entry's file)\n"
	       "  --ref            first run the same users against the harness's storage path\n"
	       "                   (a file per conversation through the page cache, held to the\n"
	       "                   DRAM pool's bytes; same chunk size, queue depth and fsync)\n"
	       "                   and report the ratios\n");
}

/* Mean tokens a user holds live: context drawn uniformly per kind (chatbot 512-4096,
 * coding 4096-25000, document 4096-16384: 9031 on average over the three) plus ~5 turns
 * of 128-1024 new tokens (a conversation ends with probability 0.2 per turn). */
#define LIVE_TOKENS_PER_USER 12288ull
/* The harness model: an entry averages 5/8 of its user's maximum (5,645 tokens over the
 * kinds), and a conversation's ~5 entries stay live (every later turn reads them). */
#define LIVE_TOKENS_PER_USER_HARNESS 28672ull

enum {
	O_WORKLOAD = CLI_O_FIRST_FREE, O_OPTION, O_MODEL, O_USERS, O_QUEUE_DEPTH, O_SECONDS,
	O_SCALE, O_DRAM_BYTES, O_NVME_BYTES, O_SEED, O_USER_MODEL, O_FSYNC, O_REF
};

struct ml_args {
	const char *model;
	unsigned long long dram, nvme, seed;
	double seconds, scale;
	long users, qd, option;
	enum umodel umodel;
	const char *fsync; /* nvme.fsync: "data" (the shipped default, the harness fsyncs) */
	bool g_model, g_users, g_secs, g_dram; /* given on the command line */
	bool ref; /* run the harness's storage path first, same users (bench_mlperf_ref.c) */
};

/* One option of the mlperf-kv workload (cli_getopt): 0, 1 after --help, -1 after an error. */
static int ml_opt(void *arg, int c, const char *v)
{
	struct ml_args *m = arg;
	uint64_t u;
	switch (c) {
	case 'h':
		usage();
		return 1;
	case O_WORKLOAD:
		if (strcmp(v, "mlperf-kv"))
			return cli_fail(CMD, "--workload: '%s' is unknown (mlperf-kv)", v), -1;
		return 0;
	case O_OPTION:
		if (cli_parse_int(v, 1, 3, &m->option) < 0)
			return cli_fail(CMD, "--option: '%s' is not 1, 2 or 3", v), -1;
		return 0;
	case O_MODEL:
		m->model = v;
		m->g_model = true;
		return 0;
	case O_USERS:
		if (cli_parse_int(v, 1, 100000, &m->users) < 0)
			return cli_fail(CMD, "--users: '%s' is not in [1, 100000]", v), -1;
		m->g_users = true;
		return 0;
	case O_QUEUE_DEPTH:
		if (cli_parse_int(v, 1, 4096, &m->qd) < 0)
			return cli_fail(CMD, "--queue-depth: '%s' is not in [1, 4096]", v), -1;
		return 0;
	case O_SECONDS:
		if (cli_parse_number(v, &m->seconds) < 0 || !(m->seconds > 0) || m->seconds > 86400)
			return cli_fail(CMD, "--seconds: '%s' is not in (0, 86400]", v), -1;
		m->g_secs = true;
		return 0;
	case O_SCALE:
		if (scaled_parse(v, &m->scale))
			return cli_fail(CMD, "--scale: '%s' is not a number in (0, 1]", v), -1;
		return 0;
	case O_DRAM_BYTES:
		if (cli_parse_size(v, &m->dram) < 0)
			return cli_fail(CMD, "--dram-bytes: '%s' is not a size", v), -1;
		m->g_dram = true;
		return 0;
	case O_NVME_BYTES:
		if (cli_parse_size(v, &m->nvme) < 0 || m->nvme < (1ull << 20))
			return cli_fail(CMD, "--nvme-bytes: '%s' is not a size >= 1M", v), -1;
		return 0;
	case O_USER_MODEL:
		if (!strcmp(v, "harness"))
			m->umodel = UM_HARNESS;
		else if (!strcmp(v, "chained"))
			m->umodel = UM_CHAINED;
		else
			return cli_fail(CMD, "--user-model: '%s' is not harness or chained", v), -1;
		return 0;
	case O_REF:
		m->ref = true;
		return 0;
	case O_FSYNC:
		if (strcmp(v, "none") && strcmp(v, "data"))
			return cli_fail(CMD, "--fsync: '%s' is not none or data", v), -1;
		m->fsync = v;
		return 0;
	default: /* O_SEED */
		/* digits only: strtoull alone reads " -1" as 2^64 - 1 */
		if (kvt__parse_u64(v, &u) < 0)
			return cli_fail(CMD, "--seed: '%s' is not a non-negative integer", v), -1;
		m->seed = u;
		return 0;
	}
}

int kvt_bench_mlperf(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"workload", required_argument, NULL, O_WORKLOAD},
	    {"option", required_argument, NULL, O_OPTION},
	    {"model", required_argument, NULL, O_MODEL},
	    {"users", required_argument, NULL, O_USERS},
	    {"queue-depth", required_argument, NULL, O_QUEUE_DEPTH},
	    {"seconds", required_argument, NULL, O_SECONDS},
	    {"scale", required_argument, NULL, O_SCALE},
	    {"dram-bytes", required_argument, NULL, O_DRAM_BYTES},
	    {"nvme-bytes", required_argument, NULL, O_NVME_BYTES},
	    {"seed", required_argument, NULL, O_SEED},
	    {"user-model", required_argument, NULL, O_USER_MODEL},
	    {"fsync", required_argument, NULL, O_FSYNC},
	    {"ref", no_argument, NULL, O_REF},
	    {NULL, 0, NULL, 0}};
	struct ml_args ma = {.model = "llama3.1-8b", .seed = 42, .seconds = 30, .scale = 1, .fsync = "data",
			    .users = 200};
	struct cli_store_opts so = {0};
	int first = cli_getopt(CMD, argc, argv, &so, longopts, ml_opt, &ma);
	if (first == -2)
		return 0;
	if (first < 0)
		return 2;
	if (first < argc)
		return cli_fail(CMD, "unexpected argument '%s' (see --workload mlperf-kv --help)",
				argv[first]), 2;
	if (ma.ref && ma.umodel != UM_HARNESS)
		return cli_fail(CMD, "--ref runs the harness's user model: not with --user-model "
				     "chained"), 2;
	const char *model = ma.model;
	unsigned long long dram = ma.dram, nvme = ma.nvme, seed = ma.seed;
	double seconds = ma.seconds, scale = ma.scale;
	long users = ma.users, qd = ma.qd, option = ma.option;
	bool g_model = ma.g_model, g_users = ma.g_users, g_secs = ma.g_secs, g_dram = ma.g_dram;
	if (option) {
		/* MLPerf Storage v3.0 KV cache, submission options 1-3 (seed 42, no GPU memory) */
		static const struct {
			const char *model;
			long users;
			unsigned long long cpu;
		} opt[3] = {{"llama3.1-8b", 200, 0}, {"llama3.1-8b", 100, 4ull << 30},
			    {"llama3.1-70b", 70, 0}};
		if (!g_model)
			model = opt[option - 1].model;
		if (!g_users)
			users = opt[option - 1].users;
		if (!g_dram)
			dram = opt[option - 1].cpu;
		if (!g_secs)
			seconds = 300;
	}
	struct scaled_geometry sg;
	if (scaled_geometry(model, scale, CHUNK, &sg))
		return cli_fail(CMD, "--model '%s' is not a model preset usable at scale %g", model,
				scale), 2;
	const char *dir = so.dir ? so.dir : "./kvtier-data/mlperf-kv";
	uint64_t obj = kvt_object_bytes(&sg.geo, CHUNK);
	if (!qd) {
		qd = (long)KVT_MIN((uint64_t)64, (1ull << 30) / obj);
		qd = KVT_MAX(qd, 4);
	}
	int mrc = bench_mkdirs(dir, 0700);
	if (mrc < 0)
		return cli_fail(CMD, "cannot create %s: %s", dir, strerror(-mrc));
	/* Capacity that holds the users' live KV, within the disk. */
	uint64_t want = (uint64_t)users *
			    (ma.umodel == UM_HARNESS ? LIVE_TOKENS_PER_USER_HARNESS
						     : LIVE_TOKENS_PER_USER) *
			    sg.bpt +
			(uint64_t)N_SYS * SYS_TOKENS * sg.bpt + 2 * (uint64_t)qd * obj;
	bool capped = false;
	if (!nvme) {
		struct statvfs vfs;
		uint64_t room = statvfs(dir, &vfs) == 0 ? (uint64_t)vfs.f_bavail * vfs.f_frsize / 10 * 8
							: UINT64_MAX; /* unknown: not capped */
		/* at least 1 GiB (small scales), never more than the room: the message below
		 * says 80% of the free space, and the tier would clamp it anyway (one object at
		 * least, the tier's own minimum: a full disk is then the tier's to report) */
		nvme = KVT_MAX(KVT_MIN(KVT_MAX(want, 1ull << 30), room), obj);
		capped = want > room;
	}
	uint64_t dram_pool = (uint64_t)((double)dram * scale);
	/* in-flight operations pin DRAM slots: a pool below two queue depths of objects would
	 * refuse puts (-ENOSPC) for want of an evictable slot, not for want of capacity */
	if (dram && dram_pool < (2 * (uint64_t)qd + 16) * obj)
		dram_pool = (2 * (uint64_t)qd + 16) * obj;
	char nb[32], db[32];
	snprintf(nb, sizeof(nb), "%llu", nvme);
	snprintf(db, sizeof(db), "%llu", (unsigned long long)dram_pool);
	so.tiers = dram ? "dram,nvme" : "nvme";
	so.dir = dir;
	struct kvt_config *cfg = cli_config(&so);
	if (!cfg)
		return 1;
	/* nvme.queue_depth counts I/Os of at most 2 MiB: hold qd whole chunks */
	char qds[32];
	snprintf(qds, sizeof(qds), "%llu",
		 (unsigned long long)KVT_MIN((uint64_t)qd * ((obj + (2u << 20) - 1) / (2u << 20)),
					     4096));
	if (scaled_apply(&sg, cfg) || kvt_config_set(cfg, "nvme.bytes", nb, NULL, 0) ||
	    (dram && kvt_config_set(cfg, "dram.bytes", db, NULL, 0)) ||
	    (dram && kvt_config_set(cfg, "dram.prefault", "true", NULL, 0)) ||
	    kvt_config_set(cfg, "nvme.fsync", ma.fsync, NULL, 0) ||
	    kvt_config_set(cfg, "nvme.queue_depth", qds, NULL, 0)) {
		kvt_config_destroy(cfg);
		return cli_fail(CMD, "cannot configure the store");
	}
	if (capped)
		fprintf(stderr, "kvtier bench: the users' working set (~%.1f GiB) does not fit in %s: "
				"NVMe capacity %.2f GiB (%s); expect evictions\n",
			(double)want / 1073741824.0, dir, (double)nvme / 1073741824.0,
			nvme == obj ? "one object: the free space holds less"
				    : "80% of the free space");
	/* The DRAM pool is faulted in at open (dram.prefault, as kvtierd does), untimed: a
	 * serving process maps its pool once at start, and first touches inside the run cost
	 * a zeroed huge page per 2 MiB written (65-80 % of the CPU of a short run on this VM) -
	 * start-up, not storage. The open's time is reported apart (open_s). */
	struct mb m = {.model = ma.umodel, .n_users = (uint32_t)users, .qd = (uint32_t)qd,
		       .payload = (size_t)kvt_payload_bytes(&sg.geo, CHUNK)};
	struct mb ref = m;
	struct kvt_store *s = NULL;
	uint64_t kinds[3] = {0};
	double ref_secs = 0;
	uint64_t ref_dropped = 0;
	int rc = 1;
	m.slots = calloc((size_t)qd, sizeof(*m.slots));
	if (!m.slots || posix_memalign(&m.wbuf, KVT_ALIGN, m.payload)) {
		cli_fail(CMD, "out of memory");
		goto out;
	}
	for (long i = 0; i < qd; i++)
		if (posix_memalign(&m.slots[i].buf, KVT_ALIGN, m.payload)) {
			cli_fail(CMD, "out of memory");
			goto out;
		}
	uint64_t nr = 0x5eed ^ seed;
	for (size_t i = 0; i < m.payload; i++)
		((uint8_t *)m.wbuf)[i] = (uint8_t)(bench_rnd(&nr) >> 24);
	ref.slots = m.slots;
	ref.wbuf = m.wbuf;
	if (ma.ref) {
		/* First, on the disk as the store will find it: the harness's files, the page
		 * cache held to the store's DRAM pool. */
		int frc = mref_open(dir, (uint32_t)users, H_KEYS, (unsigned)qd,
				    dram ? dram_pool : 0, !strcmp(ma.fsync, "data"), &ref.ref);
		if (frc < 0) {
			cli_fail(CMD, "cannot start the reference in %s: %s", dir, kvt_strerror(frc));
			goto out;
		}
		if (mb_alloc_users(&ref) < 0) {
			cli_fail(CMD, "out of memory");
			goto out;
		}
		uint64_t rkinds[3];
		ref_secs = run_users(&ref, seed, seconds, rkinds);
		ref_dropped = mref_dropped_bytes(ref.ref);
		mref_close(ref.ref);
		ref.ref = NULL;
		mref_settle(dir);
	}
	/* The DRAM pool is faulted in at open (dram.prefault, as kvtierd does), untimed: a
	 * serving process maps its pool once at start, and first touches inside the run cost
	 * a zeroed huge page per 2 MiB written (65-80 % of the CPU of a short run on this VM) -
	 * start-up, not storage. The open's time is reported apart (open_s). */
	uint64_t t_open = kvt__now_ns();
	int orc = kvt_store_open(cfg, &s);
	double open_s = (double)(kvt__now_ns() - t_open) / 1e9;
	kvt_config_destroy(cfg);
	cfg = NULL;
	if (orc < 0) {
		s = NULL;
		cli_fail(CMD, "cannot open the store in %s: %s", dir, kvt_strerror(orc));
		goto out;
	}
	m.s = s;
	memcpy(m.ns, kvt_store_ns_id(s), sizeof(m.ns));
	if (mb_alloc_users(&m) < 0) {
		cli_fail(CMD, "out of memory");
		goto out;
	}
	if (!so.json)
		printf("mlperf-kv: %s at scale %g (%llu B/token, object %llu B), %ld users (%s), "
		       "tiers %s (DRAM pool %s B), NVMe %s B in %s, %ld chunks in flight, "
		       "fsync %s, %.0f s, seed %llu\n",
		       sg.model, scale, (unsigned long long)sg.bpt, (unsigned long long)obj, users,
		       umodel_name[m.model], so.tiers, dram ? db : "0", nb, dir, qd, ma.fsync, seconds, seed);
	fflush(stdout); /* the store's run starts now: say so while it runs, even into a pipe */
	double secs = run_users(&m, seed, seconds, kinds);
	struct kvt_stats st;
	kvt_stats(s, &st);
	uint64_t csum = 0, missed = 0, extended = 0;
	for (uint32_t i = 0; i < st.n_tiers; i++) {
		csum += st.tier[i].checksum_failures;
		missed += st.tier[i].deadline_misses;
		extended += st.tier[i].deadline_extensions;
	}

	lat_sort(&m.rl);
	lat_sort(&m.wl);
	double gib = 1073741824.0;
	double rg = (double)m.read_bytes / gib / secs, wg = (double)m.write_bytes / gib / secs;
	double hit = m.read_chunks ? (double)m.hit_chunks / (double)m.read_chunks : 0;
	/* the reference's, over its own measured time */
	lat_sort(&ref.rl);
	lat_sort(&ref.wl);
	double rrg = ref_secs > 0 ? (double)ref.read_bytes / gib / ref_secs : 0;
	double rwg = ref_secs > 0 ? (double)ref.write_bytes / gib / ref_secs : 0;
	uint64_t ref_budget = dram ? dram_pool : 0;
	if (!so.json) {
		printf("  users: %llu chatbot, %llu coding, %llu document\n",
		       (unsigned long long)kinds[0], (unsigned long long)kinds[1],
		       (unsigned long long)kinds[2]);
		printf("  read : %7.3f GiB/s  %llu entries  p50 %9.1f p95 %9.1f p99 %9.1f p99.9 "
		       "%9.1f us\n",
		       rg, (unsigned long long)m.entries_read, lat_pct(&m.rl, 50),
		       lat_pct(&m.rl, 95), lat_pct(&m.rl, 99), lat_pct(&m.rl, 99.9));
		printf("  write: %7.3f GiB/s  %llu entries  p50 %9.1f p95 %9.1f p99 %9.1f p99.9 "
		       "%9.1f us\n",
		       wg, (unsigned long long)m.entries_written, lat_pct(&m.wl, 50),
		       lat_pct(&m.wl, 95), lat_pct(&m.wl, 99), lat_pct(&m.wl, 99.9));
		for (int c = 0; c < N_CLASSES; c++) {
			lat_sort(&m.rl_cls[c]);
			printf("  %-11s read p95 %9.1f us (%zu entries)\n", class_name[c],
			       lat_pct(&m.rl_cls[c], 95), m.rl_cls[c].n);
		}
		printf("  requests %llu, chunk hit ratio %.4f, cached tokens/s %.0f, writes rejected "
		       "(full) %llu, errors %llu, checksum failures %llu\n",
		       (unsigned long long)m.requests, hit, (double)m.cached_tokens / secs,
		       (unsigned long long)m.writes_rejected,
		       (unsigned long long)m.errors, (unsigned long long)csum);
		if (ma.ref)
			printf("  reference (the harness's files, page cache held to %llu B): read "
			       "%.3f GiB/s (kvtier %.2fx), write %.3f GiB/s (kvtier %.2fx); read p50 "
			       "%.1f p95 %.1f us, write p50 %.1f p95 %.1f us; %llu requests, writes "
			       "rejected (disk full) %llu, errors %llu\n",
			       (unsigned long long)ref_budget, rrg, rrg > 0 ? rg / rrg : 0, rwg,
			       rwg > 0 ? wg / rwg : 0, lat_pct(&ref.rl, 50), lat_pct(&ref.rl, 95),
			       lat_pct(&ref.wl, 50), lat_pct(&ref.wl, 95),
			       (unsigned long long)ref.requests,
			       (unsigned long long)ref.writes_rejected, (unsigned long long)ref.errors);
	} else {
		printf("{\"workload\":\"mlperf-kv\",\"tier\":");
		cli_json_str(stdout, so.tiers);
		printf(",\"model\":");
		cli_json_str(stdout, sg.model);
		printf(",\"user_model\":\"%s\"", umodel_name[m.model]);
		printf(",\"fsync\":\"%s\"", ma.fsync);
		printf(",\"option\":%ld,\"users\":%ld,\"seconds\":%.3f,\"scale\":%g,\"seed\":%llu,"
		       "\"object_bytes\":%llu,\"dram_pool_bytes\":%llu,\"nvme_bytes\":%llu,"
		       "\"queue_depth\":%ld,\"requests\":%llu,\"hit_ratio\":%.6f,"
		       "\"read_entries\":%llu,\"write_entries\":%llu,\"read_chunks\":%llu,"
		       "\"hit_chunks\":%llu,\"read_bytes\":%llu,"
		       "\"write_bytes\":%llu,\"read_gibps\":%.4f,\"write_gibps\":%.4f,"
		       "\"read_p50_us\":%.1f,\"read_p95_us\":%.1f,\"read_p99_us\":%.1f,"
		       "\"read_p999_us\":%.1f,\"write_p50_us\":%.1f,\"write_p95_us\":%.1f,"
		       "\"write_p99_us\":%.1f,\"write_p999_us\":%.1f,\"cached_tokens_per_s\":%.1f",
		       option, users, secs, scale, seed, (unsigned long long)obj,
		       (unsigned long long)(dram ? dram_pool : 0), nvme, qd,
		       (unsigned long long)m.requests, hit, (unsigned long long)m.entries_read,
		       (unsigned long long)m.entries_written, (unsigned long long)m.read_chunks,
		       (unsigned long long)m.hit_chunks, (unsigned long long)m.read_bytes,
		       (unsigned long long)m.write_bytes, rg, wg, lat_pct(&m.rl, 50),
		       lat_pct(&m.rl, 95), lat_pct(&m.rl, 99), lat_pct(&m.rl, 99.9),
		       lat_pct(&m.wl, 50), lat_pct(&m.wl, 95), lat_pct(&m.wl, 99),
		       lat_pct(&m.wl, 99.9), (double)m.cached_tokens / secs);
		for (int c = 0; c < N_CLASSES; c++) {
			lat_sort(&m.rl_cls[c]);
			printf(",\"%s_read_p95_us\":%.1f", class_name[c], lat_pct(&m.rl_cls[c], 95));
		}
		printf(",\"writes_rejected\":%llu,\"open_s\":%.3f", (unsigned long long)m.writes_rejected,
		       open_s);
		if (ma.ref)
			printf(",\"ref\":\"harness files\",\"ref_cache_bytes\":%llu,"
			       "\"ref_cache_dropped_bytes\":%llu,\"ref_seconds\":%.3f,"
			       "\"ref_requests\":%llu,\"ref_read_gibps\":%.4f,\"ref_write_gibps\":%.4f,"
			       "\"ref_read_p50_us\":%.1f,\"ref_read_p95_us\":%.1f,"
			       "\"ref_write_p50_us\":%.1f,\"ref_write_p95_us\":%.1f,\"ref_hit_ratio\":%.6f,"
			       "\"ref_writes_rejected\":%llu,\"ref_errors\":%llu,\"read_ratio\":%.4f,"
			       "\"write_ratio\":%.4f",
			       (unsigned long long)ref_budget, (unsigned long long)ref_dropped,
			       ref_secs, (unsigned long long)ref.requests, rrg, rwg,
			       lat_pct(&ref.rl, 50), lat_pct(&ref.rl, 95), lat_pct(&ref.wl, 50),
			       lat_pct(&ref.wl, 95),
			       ref.read_chunks ? (double)ref.hit_chunks / (double)ref.read_chunks : 0,
			       (unsigned long long)ref.writes_rejected, (unsigned long long)ref.errors,
			       rrg > 0 ? rg / rrg : 0,
			       rwg > 0 ? wg / rwg : 0);
		printf(",\"users_by_kind\":{\"%s\":%llu,\"%s\":%llu,\"%s\":%llu},\"errors\":%llu,"
		       "\"checksum_failures\":%llu,\"deadline_misses\":%llu,"
		       "\"deadline_extensions\":%llu}\n",
		       kind_name[0], (unsigned long long)kinds[0], kind_name[1],
		       (unsigned long long)kinds[1], kind_name[2], (unsigned long long)kinds[2],
		       (unsigned long long)m.errors, (unsigned long long)csum,
		       (unsigned long long)missed, (unsigned long long)extended);
		fflush(stdout); /* before close, which may wait on a stuck tier */
	}
	/* A reference whose disk filled refused writes a store would have evicted for: it did
	 * less work than the run it is compared with. */
	rc = m.errors || ref.errors || ref.writes_rejected ? 1 : 0;
	if (m.errors)
		fprintf(stderr, "kvtier bench: %llu operations failed (last: %s)\n",
			(unsigned long long)m.errors, kvt_strerror(m.last_err));
	if (ref.errors)
		fprintf(stderr, "kvtier bench: %llu of the reference's operations failed (last: "
				"%s): its figures are not comparable\n",
			(unsigned long long)ref.errors, kvt_strerror(ref.last_err));
	if (ref.writes_rejected)
		fprintf(stderr, "kvtier bench: the reference's disk filled: %llu of its writes were "
				"refused (%s): its figures are not comparable\n",
			(unsigned long long)ref.writes_rejected, strerror(ENOSPC));
out:
	kvt_config_destroy(cfg);
	mref_close(ref.ref);
	kvt_store_close(s);
	if (m.slots)
		for (long i = 0; i < qd; i++)
			free(m.slots[i].buf);
	free(m.slots);
	free(m.wbuf);
	mb_free_users(&m);
	mb_free_users(&ref);
	return rc;
}
