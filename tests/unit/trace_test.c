/*
 * trace_test.c - the Mooncake trace parser on good and malformed input (each error must
 * name its line and reason), files, the writer round trip, and the generator's determinism
 * and shape; knobs that never end a session (end_prob=1e-300, steps=4e9, turns that add
 * no token) end at the request count instead of running forever, and one that makes them
 * long ends them at KVT_GEN_MAX_TURNS; the widest length range is not read as empty; a
 * FIFO is refused, not waited on.
 * kvt-test-labels: onethread (no second thread, so nothing for TSan to check: scripts/test.sh
 * leaves it out of the TSan pass)
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "trace.h"

static struct kvt_trace *parse(const char *text, int *rc, char *err, size_t errlen)
{
	struct kvt_trace *t;
	assert_int_equal(kvt__trace_create(512, &t), 0);
	err[0] = 0;
	*rc = kvt__trace_parse(t, text, strlen(text), err, errlen);
	return t;
}

static void test_good(void **state)
{
	(void)state;
	const char *text =
	    "{\"timestamp\": 0, \"input_length\": 6755, \"output_length\": 500, "
	    "\"hash_ids\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}\n"
	    "\n   \r\n"
	    "{\"hash_ids\":[0,14],\"output_length\":0,\"input_length\":1000,\"timestamp\":3052,"
	    "\"extra\":{\"a\":[1,2,{\"b\":null}],\"s\":\"x\\\"\\u00e9\"},\"f\":-1.5e3,\"t\":true}\n"
	    "{\"timestamp\": 3052.5, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}";
	char err[256];
	int rc;
	struct kvt_trace *t = parse(text, &rc, err, sizeof(err));
	assert_int_equal(rc, 0);
	assert_int_equal(t->n, 3);
	assert_int_equal(t->req[0].n_blocks, 14);
	assert_int_equal(t->req[0].input_len, 6755);
	assert_int_equal(kvt__trace_block_len(t, &t->req[0], 0), 512);
	assert_int_equal(kvt__trace_block_len(t, &t->req[0], 13), 6755 - 13 * 512);
	assert_int_equal(t->req[1].n_blocks, 2);
	assert_int_equal(kvt__trace_blocks(t, &t->req[1])[1], 14);
	assert_true(t->req[2].ts_ms == 3052.5);
	assert_int_equal(t->req[2].n_blocks, 0);
	kvt__trace_destroy(t);
}

static void test_malformed(void **state)
{
	(void)state;
	static const char ok[] = "{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5, "
				 "\"hash_ids\": [1, 2]}\n";
	/* clang-format off */
	struct {
		const char *line;
		const char *why;
	} cases[] = {
		{"{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5}", "missing field \"hash_ids\""},
		{"{\"input_length\": 600, \"output_length\": 5, \"hash_ids\": []}", "missing field \"timestamp\""},
		{"{\"timestamp\": -1, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": []}", "must not be negative"},
		{"{\"timestamp\": 1, \"input_length\": -600, \"output_length\": 5, \"hash_ids\": []}", "must not be negative"},
		{"{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, -2]}", "must not be negative"},
		{"{\"timestamp\": 1, \"input_length\": \"600\", \"output_length\": 5, \"hash_ids\": []}", "non-negative integer"},
		{"{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": 7}", "array"},
		{"{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [\"a\"]}", "non-negative integer"},
		{"{\"timestamp\": 1, \"input_length\": 600.5, \"output_length\": 5, \"hash_ids\": []}", "must be an integer"},
		{"{\"timestamp\": 1, \"input_length\": 6e2, \"output_length\": 5, \"hash_ids\": []}", "exponent"},
		{"{\"timestamp\": 1, \"input_length\": 99999999999, \"output_length\": 5, \"hash_ids\": []}", "too large"},
		{"{\"timestamp\": 9000000000000000.9, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": []}", "timestamp is over"},
		{"{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [99999999999999999999]}", "too large"},
		{"{\"timestamp\": 1, \"input_length\": 0, \"output_length\": 5, \"hash_ids\": []}", "at least 1"},
		{"{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2, 3]}", "fills at most 2"},
		{"{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": []}", "before the previous"},
		{"{\"timestamp\": 1, \"timestamp\": 2, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": []}", "duplicate field"},
		{"{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2]", "expected ',' or '}'"},
		{"{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2", "expected ',' or ']'"},
		{"{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1,]}", "non-negative integer"},
		{"{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [01]}", "leading zero"},
		{"{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": []} x", "text after"},
		{"[1, 2]", "expected '{'"},
		{"{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [], \"x\": tru}", "unexpected character"},
		{"{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [], \"x\": \"abc}", "unterminated string"},
		{"{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [], \"x\": \"\\q\"}", "bad escape"},
		{"{\"timestamp\" 1}", "expected ':'"},
		{"{timestamp: 1}", "expected a string"},
		{"{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [], \"x\": "
		 "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}", "nested too deeply"},
	};
	/* clang-format on */
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char text[4096], err[256];
		int rc;
		/* the bad line comes third, after a good line and an empty one */
		snprintf(text, sizeof(text), "%s\n%s\n", ok, cases[i].line);
		struct kvt_trace *t = parse(text, &rc, err, sizeof(err));
		if (rc != -EINVAL || !strstr(err, cases[i].why) || strncmp(err, "line 3: ", 8))
			fail_msg("case %zu: rc %d err '%s', wanted line 3 and '%s'", i, rc, err,
				 cases[i].why);
		assert_int_equal(t->n, 1); /* the good line before it stays */
		kvt__trace_destroy(t);
	}
}

static void test_huge_array(void **state)
{
	(void)state;
	/* an attacker-sized hash_ids array is refused at the bound, never allocated */
	size_t n = KVT_TRACE_MAX_BLOCKS + 10;
	char *text = malloc(n * 2 + 200);
	size_t o = (size_t)sprintf(text, "{\"timestamp\": 1, \"input_length\": 16777216, "
					 "\"output_length\": 5, \"hash_ids\": [");
	for (size_t i = 0; i < n; i++)
		o += (size_t)sprintf(text + o, i ? ",0" : "0");
	strcpy(text + o, "]}\n");
	char err[256];
	int rc;
	struct kvt_trace *t = parse(text, &rc, err, sizeof(err));
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(err, "more than 65536 entries"));
	kvt__trace_destroy(t);
	free(text);

	/* a line longer than the limit */
	size_t big = KVT_TRACE_MAX_LINE + 100;
	text = malloc(big + 1);
	memset(text, ' ', big);
	text[0] = '{';
	text[big] = 0;
	t = parse(text, &rc, err, sizeof(err));
	assert_int_equal(rc, -E2BIG);
	assert_non_null(strstr(err, "line 1: line longer"));
	kvt__trace_destroy(t);
	free(text);
}

static void test_nul_and_truncated_file(void **state)
{
	(void)state;
	struct kvt_trace *t;
	assert_int_equal(kvt__trace_create(512, &t), 0);
	const char bad[] = "{\"timestamp\": 1\0, \"input_length\": 5}\n";
	char err[256];
	assert_int_equal(kvt__trace_parse(t, bad, sizeof(bad) - 1, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "NUL"));
	kvt__trace_destroy(t);

	/* a file cut in the middle of its last line */
	char path[] = "/tmp/kvt-trace-XXXXXX";
	int fd = mkstemp(path);
	const char *text = "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 1, "
			   "\"hash_ids\": [7]}\n{\"timestamp\": 5, \"input_len";
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	assert_int_equal(kvt__trace_create(512, &t), 0);
	assert_int_equal(kvt__trace_load(t, path, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "line 2: "));
	assert_int_equal(t->n, 1);
	kvt__trace_destroy(t);
	unlink(path);

	assert_int_equal(kvt__trace_create(512, &t), 0);
	assert_int_equal(kvt__trace_load(t, "/nonexistent/trace.jsonl", err, sizeof(err)), -ENOENT);
	kvt__trace_destroy(t);

	/* a FIFO nobody writes: refused by kind, not waited on in open() for ever */
	char dir[] = "/tmp/kvt-trace-fifo-XXXXXX", fifo[64];
	assert_non_null(mkdtemp(dir));
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	alarm(20);
	assert_int_equal(kvt__trace_create(512, &t), 0);
	assert_int_equal(kvt__trace_load(t, fifo, err, sizeof(err)), -EINVAL);
	alarm(0);
	assert_string_equal(err, "a FIFO, not a trace file (give '-' to read a pipe from stdin)");
	kvt__trace_destroy(t);
	unlink(fifo);
	rmdir(dir);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void test_generator(void **state)
{
	(void)state;
	for (int w = 0; w < KVT_GEN_N; w++) {
		struct kvt_gen_opts o;
		kvt__gen_defaults(w, &o);
		o.requests = 2000;
		struct kvt_trace *a, *b, *c;
		assert_int_equal(kvt__trace_create(512, &a), 0);
		assert_int_equal(kvt__trace_create(512, &b), 0);
		assert_int_equal(kvt__trace_create(512, &c), 0);
		assert_int_equal(kvt__gen_run(&o, a), 0);
		assert_int_equal(kvt__gen_run(&o, b), 0);
		o.seed = 43;
		assert_int_equal(kvt__gen_run(&o, c), 0);
		assert_int_equal(a->n, 2000);
		assert_int_equal(a->n, b->n);
		assert_int_equal(a->n_ids, b->n_ids);
		assert_memory_equal(a->ids, b->ids, a->n_ids * sizeof(uint64_t));
		for (size_t i = 0; i < a->n; i++) {
			assert_true(a->req[i].ts_ms == b->req[i].ts_ms);
			assert_int_equal(a->req[i].input_len, b->req[i].input_len);
			/* every block of the prompt has an id; times never go back */
			assert_int_equal(a->req[i].n_blocks, (a->req[i].input_len + 511) / 512);
			if (i)
				assert_true(a->req[i].ts_ms >= a->req[i - 1].ts_ms);
		}
		/* another seed, another trace */
		assert_true(c->n_ids != a->n_ids ||
			    memcmp(a->ids, c->ids, a->n_ids * sizeof(uint64_t)));
		/* prefixes are shared: some request's first block is an earlier one's */
		uint64_t *firsts = malloc(a->n * sizeof(*firsts));
		assert_non_null(firsts);
		for (size_t i = 0; i < a->n; i++)
			firsts[i] = a->ids[a->req[i].first];
		qsort(firsts, a->n, sizeof(*firsts), cmp_u64);
		size_t repeats = 0;
		for (size_t i = 1; i < a->n; i++)
			repeats += firsts[i] == firsts[i - 1];
		free(firsts);
		assert_true(repeats > 0);

		/* written out and read back, the trace is the same */
		char *buf;
		size_t len;
		FILE *f = open_memstream(&buf, &len);
		assert_int_equal(kvt__trace_write(a, f), 0);
		fclose(f);
		struct kvt_trace *d;
		assert_int_equal(kvt__trace_create(512, &d), 0);
		char err[256] = "";
		if (kvt__trace_parse(d, buf, len, err, sizeof(err)))
			fail_msg("%s", err);
		assert_int_equal(d->n, a->n);
		assert_memory_equal(d->ids, a->ids, a->n_ids * sizeof(uint64_t));
		free(buf);
		kvt__trace_destroy(a);
		kvt__trace_destroy(b);
		kvt__trace_destroy(c);
		kvt__trace_destroy(d);
	}
}

static void test_knobs(void **state)
{
	(void)state;
	struct kvt_gen_opts o;
	kvt__gen_defaults(KVT_GEN_RAG, &o);
	assert_int_equal(kvt__gen_set(&o, "docs", "50"), 0);
	assert_int_equal(o.docs, 50);
	assert_int_equal(kvt__gen_set(&o, "zipf", "1.2"), 0);
	assert_true(o.zipf == 1.2);
	assert_int_equal(kvt__gen_set(&o, "seed", "18446744073709551615"), 0);
	assert_int_equal(kvt__gen_set(&o, "docs", "-1"), -EINVAL);
	assert_int_equal(kvt__gen_set(&o, "docs", "x"), -EINVAL);
	assert_int_equal(kvt__gen_set(&o, "nope", "1"), -ENOENT);
	assert_int_equal(kvt__gen_workload("agent"), KVT_GEN_AGENT);
	assert_int_equal(kvt__gen_workload("video"), -EINVAL);
	assert_int_equal(kvt__gen_workload("conversation"), KVT_GEN_CONV);
	assert_int_equal(kvt__gen_set(&o, "long_frac", "0.2"), 0);
	assert_true(o.long_frac == 0.2);
	/* the request count is checked where it is set, not as "invalid argument" later */
	assert_int_equal(kvt__gen_set(&o, "requests", "0"), -ERANGE);
	assert_int_equal(kvt__gen_set(&o, "requests", "16777217"), -ERANGE);
	assert_int_equal(kvt__gen_set(&o, "requests", "16777216"), 0);
	assert_int_equal(o.requests, KVT_TRACE_MAX_REQUESTS);
	struct kvt_trace *t;
	assert_int_equal(kvt__trace_create(512, &t), 0);
	o.doc_min = 10, o.doc_max = 5;
	assert_int_equal(kvt__gen_run(&o, t), -EINVAL);
	kvt__trace_destroy(t);
}

/* The conversation workload's block statistics against the published ones it was fitted
 * to (docs/COST_MODEL.md, "The conversation workload"), over several seeds: most blocks
 * are never reused (Mooncake FAST'25: "over 50 %"), reuse is skewed (Wang et al., ATC'25:
 * the top 10 % of blocks carry ~77 % of reuses), and reuse predicts reuse: a block used
 * twice is more likely to be used again than a block used once (turn counts with a
 * decreasing chance of ending). The memoryless shape it replaced fails the last check. */
static void block_stats(const struct kvt_gen_opts *g, double *never, double *top10,
			double *again1, double *again2)
{
	struct kvt_trace *t;
	assert_int_equal(kvt__trace_create(512, &t), 0);
	assert_int_equal(kvt__gen_run(g, t), 0);
	uint64_t *ids = malloc(t->n_ids * sizeof(*ids));
	uint32_t *uses = malloc(t->n_ids * sizeof(*uses));
	assert_non_null(ids);
	assert_non_null(uses);
	memcpy(ids, t->ids, t->n_ids * sizeof(*ids));
	qsort(ids, t->n_ids, sizeof(*ids), cmp_u64);
	size_t nb = 0;
	for (size_t i = 0; i < t->n_ids;) {
		size_t j = i;
		while (j < t->n_ids && ids[j] == ids[i])
			j++;
		uses[nb++] = (uint32_t)(j - i);
		i = j;
	}
	uint64_t reuse = 0, n1 = 0, n2 = 0, n3 = 0, zero = 0;
	for (size_t i = 0; i < nb; i++) {
		reuse += uses[i] - 1;
		zero += uses[i] == 1;
		n2 += uses[i] >= 2;
		n3 += uses[i] >= 3;
	}
	n1 = nb;
	/* the top tenth by reuse count: sort the counts descending */
	for (size_t i = 0; i < nb; i++)
		ids[i] = UINT32_MAX - uses[i];
	qsort(ids, nb, sizeof(*ids), cmp_u64);
	uint64_t top = 0;
	for (size_t i = 0; i < nb / 10; i++)
		top += UINT32_MAX - ids[i] - 1;
	*never = (double)zero / nb;
	*top10 = (double)top / (double)reuse;
	*again1 = (double)n2 / n1;
	*again2 = (double)n3 / n2;
	free(ids);
	free(uses);
	kvt__trace_destroy(t);
}

static void test_conversation_statistics(void **state)
{
	(void)state;
	for (uint64_t seed = 1; seed <= 3; seed++) {
		struct kvt_gen_opts g;
		kvt__gen_defaults(KVT_GEN_CONV, &g);
		g.seed = seed;
		g.requests = 4000;
		double never, top10, a1, a2;
		block_stats(&g, &never, &top10, &a1, &a2);
		print_message("seed %llu: never reused %.2f, top 10%% carry %.2f of reuses, "
			      "P(again | 1 use) %.2f, P(again | 2 uses) %.2f\n",
			      (unsigned long long)seed, never, top10, a1, a2);
		assert_true(never > 0.5);
		assert_true(top10 > 0.65 && top10 < 0.9);
		assert_true(a2 > a1 + 0.1);
		/* the geometric shape it replaced: no such signal */
		g.turn_alpha = 0, g.pace_sigma = 0, g.think_s = 200, g.end_prob = 0.65;
		block_stats(&g, &never, &top10, &a1, &a2);
		assert_true(a2 < a1 + 0.1);
	}
}

/* Generate with knobs "KNOB=VALUE KNOB=VALUE ...". */
static struct kvt_trace *gen(int w, uint32_t requests, const char *knobs, int *rc)
{
	struct kvt_gen_opts o;
	kvt__gen_defaults(w, &o);
	o.requests = requests;
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", knobs);
	for (char *kv = strtok(buf, " "); kv; kv = strtok(NULL, " ")) {
		char *eq = strchr(kv, '=');
		assert_non_null(eq);
		*eq = 0;
		assert_int_equal(kvt__gen_set(&o, kv, eq + 1), 0);
	}
	struct kvt_trace *t;
	assert_int_equal(kvt__trace_create(512, &t), 0);
	*rc = kvt__gen_run(&o, t);
	return t;
}

/* The peak resident memory of generating in a child process (knobs NULL: of a child that
 * does nothing, which starts with what it shares with this process), KiB. */
static long gen_peak_kib(int w, uint32_t requests, const char *knobs)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		int rc = 0;
		struct kvt_trace *t = knobs ? gen(w, requests, knobs, &rc) : NULL;
		_exit(rc == 0 && (!t || t->n == requests) ? 0 : 1);
	}
	int st;
	struct rusage ru;
	assert_int_equal(wait4(pid, &st, 0, &ru), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return ru.ru_maxrss;
}

/* A session ended only by its end_prob (or 1/steps) or at a 16M-token prompt: with
 * end_prob=1e-300 and turns of 0 tokens it never ended (a hang: the alarm ends the test
 * instead of the suite's timeout), with end_prob=1e-9 it grew towards 16M tokens (2.9 GB
 * of peak memory for 10 requests, 930 MB for steps=2^32-1; now under 1 MB more than an
 * idle child). */
static void test_sessions_end(void **state)
{
	(void)state;
	int rc;
	alarm(120);
	const char *zero = "user_min=0 user_max=0 out_min=0 out_max=0";
	char knobs[200];
	snprintf(knobs, sizeof(knobs), "end_prob=1e-300 sys_tokens=0 %s", zero);
	struct kvt_trace *t = gen(KVT_GEN_CHAT, 10, knobs, &rc);
	assert_int_equal(rc, -ENODATA); /* every prompt is empty: no request at all */
	assert_int_equal(t->n, 0);
	kvt__trace_destroy(t);
	snprintf(knobs, sizeof(knobs), "end_prob=1e-300 sys_tokens=1 %s", zero);
	t = gen(KVT_GEN_CHAT, 10, knobs, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(t->n, 10);
	for (size_t i = 0; i < t->n; i++) /* a session's turn that adds nothing ends it */
		assert_int_equal(t->req[i].input_len, 1);
	kvt__trace_destroy(t);
	t = gen(KVT_GEN_AGENT, 10, "steps=4294967295 out_min=0 out_max=0 tool_min=0 tool_max=0",
		&rc);
	assert_int_equal(rc, 0);
	assert_int_equal(t->n, 10);
	kvt__trace_destroy(t);
	snprintf(knobs, sizeof(knobs), "turn_alpha=0 end_prob=1e-300 %s", zero);
	t = gen(KVT_GEN_CONV, 10, knobs, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(t->n, 10);
	kvt__trace_destroy(t);
	/* endless but growing sessions stop at the count: 10 requests take little memory
	 * (they took 2.9 GB and 950 MB, growing one session to a 16M-token prompt) */
	long base = gen_peak_kib(KVT_GEN_CHAT, 10, NULL);
	long peak_chat = gen_peak_kib(KVT_GEN_CHAT, 10, "end_prob=1e-9") - base;
	long peak_agent = gen_peak_kib(KVT_GEN_AGENT, 10, "steps=4294967295") - base;
	print_message("peak memory over a child's baseline: chat %ld KiB, agent %ld KiB\n",
		      peak_chat, peak_agent);
	assert_true(peak_chat < 256 * 1024 && peak_agent < 256 * 1024);
	alarm(0);
}

/* A session ends after KVT_GEN_MAX_TURNS turns, whatever the knobs: end_prob=1e-9 made one
 * chat of every request (at the default 12,000 requests 15,064 turns, 105 M blocks, 2.3
 * GB). With no system prompt and a user message of a full block, a session is the
 * requests that share their first block id. */
static void test_turns_capped(void **state)
{
	(void)state;
	int rc;
	alarm(120);
	const uint32_t n = 2 * KVT_GEN_MAX_TURNS + 500;
	struct kvt_trace *t = gen(KVT_GEN_CHAT, n, "end_prob=1e-9 sys_tokens=0 user_min=512", &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(t->n, n);
	uint64_t *first = malloc(n * sizeof(*first));
	assert_non_null(first);
	for (size_t i = 0; i < t->n; i++)
		first[i] = kvt__trace_blocks(t, &t->req[i])[0];
	qsort(first, n, sizeof(*first), cmp_u64);
	size_t sessions = 0, longest = 0;
	for (size_t i = 0, j; i < n; i = j) {
		for (j = i; j < n && first[j] == first[i]; j++)
			;
		sessions++;
		longest = j - i > longest ? j - i : longest;
	}
	print_message("%zu sessions, the longest %zu turns\n", sessions, longest);
	assert_true(longest <= KVT_GEN_MAX_TURNS); /* the trace keeps the earliest n: tails go */
	assert_true(sessions >= 3);
	free(first);
	kvt__trace_destroy(t);
	alarm(0);
}

/* Lengths drawn from [0, 2^32 - 1]: the width hi - lo + 1 wrapped to 0 in 32 bits, so
 * every draw was 0 (empty prompts); now they are long and cut at the longest prompt. */
static void test_widest_range(void **state)
{
	(void)state;
	int rc;
	struct kvt_trace *t =
	    gen(KVT_GEN_CHAT, 3, "sys_tokens=0 user_min=0 user_max=4294967295 out_min=0 out_max=0",
		&rc);
	assert_int_equal(rc, 0);
	assert_int_equal(t->n, 3);
	for (size_t i = 0; i < t->n; i++)
		assert_true(t->req[i].input_len > 1000000);
	kvt__trace_destroy(t);
}

/* "\u0000" inside a field name: names are compared as C strings, so "timestamp\u0000x"
 * read as "timestamp". Refused; in a value that is skipped it is fine. Requests keep the
 * line they came from (blank lines counted) for later messages. */
static void test_nul_escape_and_lines(void **state)
{
	(void)state;
	char err[256];
	int rc;
	struct kvt_trace *t =
	    parse("{\"timestamp\\u0000x\": 0, \"input_length\": 1, \"output_length\": 1, "
		  "\"hash_ids\": [1]}\n",
		  &rc, err, sizeof(err));
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(err, "line 1: \\u0000 in a field name"));
	assert_int_equal(t->n, 0);
	kvt__trace_destroy(t);
	t = parse(
	    "\n{\"note\": \"a\\u0000b\", \"timestamp\": 0, \"input_length\": 1, "
	    "\"output_length\": 1, \"hash_ids\": [1]}\n\n\n"
	    "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}",
	    &rc, err, sizeof(err));
	if (rc)
		fail_msg("%s", err);
	assert_int_equal(t->n, 2);
	assert_int_equal(t->req[0].line, 2);
	assert_int_equal(t->req[1].line, 5);
	kvt__trace_destroy(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_good),
	    cmocka_unit_test(test_malformed),
	    cmocka_unit_test(test_huge_array),
	    cmocka_unit_test(test_nul_and_truncated_file),
	    cmocka_unit_test(test_generator),
	    cmocka_unit_test(test_knobs),
	    cmocka_unit_test(test_conversation_statistics),
	    cmocka_unit_test(test_sessions_end),
	    cmocka_unit_test(test_turns_capped),
	    cmocka_unit_test(test_widest_range),
	    cmocka_unit_test(test_nul_escape_and_lines),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
