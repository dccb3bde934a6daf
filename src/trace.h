/*
 * trace.h - request traces for replay: the Mooncake FAST'25 JSON-lines format and a seeded
 * generator of the same shape (multi-turn chat, RAG over shared documents, agents over
 * code bases). A request is an arrival time, prompt and output lengths and the ids of its
 * prompt's blocks (block_tokens tokens each, the last one possibly partial), where equal
 * ids mean equal content *and* equal prefix, so the longest run of cached leading ids is
 * the reusable prefix.
 */
#ifndef KVT_TRACE_H
#define KVT_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Bounds a trace line must respect (anything larger is rejected, never allocated). */
#define KVT_TRACE_MAX_LINE (4u << 20)	    /* bytes per line */
#define KVT_TRACE_MAX_BYTES (16ull << 30)   /* bytes per trace file */
#define KVT_TRACE_MAX_INPUT (1u << 24)	    /* prompt tokens per request */
#define KVT_TRACE_MAX_OUTPUT (1u << 24)	    /* output tokens per request */
#define KVT_TRACE_MAX_BLOCKS 65536u	    /* hash_ids per request */
#define KVT_TRACE_MAX_REQUESTS (1u << 24)   /* requests per trace */
/* Hash ids per trace, all requests together: 512 MiB of them; the Mooncake conversation
 * trace holds 0.3 M. The per-request bounds alone allow 2^24 x 65,536, a 16 GiB file ~8 G
 * ids (64 GiB), a generator's long prompts (docs_per_req=4e9) ~400 M. */
#define KVT_TRACE_MAX_IDS (1ull << 26)
#define KVT_TRACE_MAX_TS_MS 9.0e15	    /* timestamp, ms (exact in a double) */
#define KVT_TRACE_MAX_ID ((1ull << 63) - 1) /* hash id */
/* The generator's shared items (system prompts, documents, repositories) at most: each is
 * a length and a Zipf weight, allocated up front. */
#define KVT_GEN_MAX_ITEMS (1u << 24)
/* Turns (agent steps) of one generated session at most. A session's prompt grows with
 * each turn and every turn's request carries all of it, so its blocks grow with the
 * square of its turns: end_prob=1e-9 made one chat of 15,064 turns, 105 M blocks and
 * 2.3 GB. At the default knobs a session this long has a chance of 1e-97 (chat), 2e-38
 * (agent) or 2e-6 (conversation); knobs that ask for longer ones get sessions this long. */
#define KVT_GEN_MAX_TURNS 1000u

struct kvt_trace_req {
	double ts_ms;	     /* arrival, ms from the start of the trace */
	uint32_t input_len;  /* prompt tokens */
	uint32_t output_len; /* generated tokens */
	uint32_t n_blocks;   /* ids[first .. first + n_blocks) */
	/* the line of the file it was read from, for messages; a request added otherwise:
	 * its position from 1 (the line kvt__trace_write gives it) */
	uint32_t line;
	uint64_t first;
};

struct kvt_trace {
	struct kvt_trace_req *req;
	size_t n, cap;
	uint64_t *ids;
	size_t n_ids, ids_cap;
	uint32_t block_tokens;
};

static inline const uint64_t *kvt__trace_blocks(const struct kvt_trace *t,
						const struct kvt_trace_req *r)
{
	return t->ids + r->first;
}

/* Tokens of block i of a request: block_tokens, or what is left of input_len. */
static inline uint32_t kvt__trace_block_len(const struct kvt_trace *t,
					    const struct kvt_trace_req *r, uint32_t i)
{
	uint64_t start = (uint64_t)i * t->block_tokens;
	if (start >= r->input_len)
		return 0;
	uint64_t left = r->input_len - start;
	return left < t->block_tokens ? (uint32_t)left : t->block_tokens;
}

int kvt__trace_create(uint32_t block_tokens, struct kvt_trace **out);
void kvt__trace_destroy(struct kvt_trace *t);
/* Append a request (ids copied). -EINVAL out of bounds, -ENOMEM. */
int kvt__trace_add(struct kvt_trace *t, double ts_ms, uint32_t input_len, uint32_t output_len,
		   const uint64_t *ids, uint32_t n_blocks);

/* Parse Mooncake JSON lines from memory: one object per line with "timestamp" (ms, >= 0,
 * non-decreasing), "input_length" (>= 1), "output_length" (>= 0) and "hash_ids" (integers
 * >= 0, at most ceil(input_length / block_tokens) of them); other fields are skipped;
 * whitespace-only lines are ignored. Stops at the first error: -EINVAL (or -E2BIG for an
 * over-limit size) with "line N: reason" in err. Requests already parsed stay in t. */
int kvt__trace_parse(struct kvt_trace *t, const char *buf, size_t len, char *err, size_t errlen);
/* The same from a file ("-" is stdin), read line by line: at most KVT_TRACE_MAX_BYTES.
 * By name a regular file or a character device; a FIFO (which would hold open() until a
 * writer came), a socket or a block device is -EINVAL, a directory -EISDIR (src/
 * open_path.h): a pipe is read as "-". -errno if unreadable, -EFBIG past the bound; err
 * always says why. */
int kvt__trace_load(struct kvt_trace *t, const char *path, char *err, size_t errlen);
/* Write a trace in the same format (what the generator's output looks like on disk). */
int kvt__trace_write(const struct kvt_trace *t, FILE *f);

/* ---- generator */

enum kvt_gen_workload {
	KVT_GEN_CHAT = 0,
	KVT_GEN_RAG = 1,
	KVT_GEN_AGENT = 2,
	KVT_GEN_CONV = 3, /* "conversation": fitted to the Mooncake FAST'25 conversation trace */
	KVT_GEN_N
};

/* Knobs (docs/COST_MODEL.md, "Workloads"); kvt__gen_defaults() fills typical values. */
struct kvt_gen_opts {
	int workload;
	uint64_t seed;
	uint32_t requests;
	double rate; /* requests per second, on average */
	uint32_t block_tokens;
	/* chat */
	uint32_t sys_prompts;	     /* distinct shared system prompts */
	uint32_t sys_tokens;	     /* tokens of each */
	double end_prob;	     /* a conversation ends after a turn with this probability */
	uint32_t user_min, user_max; /* tokens of one user message */
	uint32_t out_min, out_max;   /* tokens of one answer (appended to the context) */
	double think_s;		     /* mean pause between a answer and the next turn */
	/* rag */
	uint32_t docs;		   /* shared corpus size */
	uint32_t doc_min, doc_max; /* tokens per document */
	double zipf;		   /* document (and repository) popularity skew */
	uint32_t docs_per_req;	   /* retrieved documents per request (1 .. this) */
	uint32_t q_min, q_max;	   /* tokens of a question */
	/* agent */
	uint32_t repos;		     /* code bases */
	uint32_t repo_min, repo_max; /* tokens of a repository's context (files, tools) */
	uint32_t steps;		     /* mean steps of one agent task (geometric) */
	uint32_t tool_min, tool_max; /* tokens of one tool result appended per step */
	double step_s;		     /* mean pause between steps (tool latency) */
	/* conversation (also uses sys_prompts, sys_tokens, zipf, end_prob, user_*, out_*,
	 * think_s): the first turn carries a long, unique context (a pasted document, a file)
	 * whose length is log-normal */
	uint32_t first_mean; /* mean tokens of the first turn's own content */
	double first_sigma;  /* log-normal shape of it */
	/* turn counts are a mix of two geometrics: this share of conversations ends after a
	 * turn with long_end_prob instead of end_prob (engaged users keep going) */
	double long_frac;
	double long_end_prob;
	double long_think_s; /* and pause this long between turns on average */
	/* turn_alpha > 0: turns per conversation are power-law, P(turns >= t) = t^-alpha,
	 * instead of geometric (end_prob and the long_* mix are then unused): the chance of
	 * another turn grows with the turns already taken */
	double turn_alpha;
	/* think_sigma > 0: pauses between turns are log-normal with mean think_s and this
	 * shape instead of exponential */
	double think_sigma;
	/* pace_sigma > 0: each conversation's mean pause is think_s times a log-normal factor
	 * of mean 1 and this shape (some users, and some request categories, come back in
	 * seconds, others in many minutes) */
	double pace_sigma;
	/* what-if, not fitted: the pause after the first turn and after later turns are
	 * scaled by these (1: no change); e.g. a long read of the first answer, then quick
	 * follow-ups */
	double think_first, think_later;
};

void kvt__gen_defaults(int workload, struct kvt_gen_opts *o);
/* "chat", "rag", "agent", "conversation" -> enum; -EINVAL. */
int kvt__gen_workload(const char *name);
const char *kvt__gen_workload_name(int workload);
/* Set one knob by name ("docs", "zipf", "think_s", ...). -ENOENT unknown, -EINVAL bad,
 * -ERANGE requests outside 1 .. KVT_TRACE_MAX_REQUESTS. */
int kvt__gen_set(struct kvt_gen_opts *o, const char *key, const char *value);
/* Generate o->requests requests into t (created with o->block_tokens), sorted by time.
 * Same options and seed => the same trace, on every machine. A session ends by its knobs
 * (end_prob, steps, turn_alpha), after KVT_GEN_MAX_TURNS turns, at a prompt of
 * KVT_TRACE_MAX_INPUT tokens, after a turn that added no token, or once the generator has
 * what it needs. -EINVAL bad knobs, -ENOMEM, -ERANGE when the requests span more than
 * KVT_TRACE_MAX_TS_MS (a tiny rate), -ENODATA when the knobs leave prompts empty (0
 * tokens: no request) so that fewer than o->requests requests came out (t holds those). */
int kvt__gen_run(const struct kvt_gen_opts *o, struct kvt_trace *t);

#endif
