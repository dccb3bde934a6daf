/*
 * trace_test.c - the Mooncake trace parser on good and malformed input (each error must
 * name its line and reason), files, the writer round trip, and the generator's determinism
 * and shape.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
		/* prefixes are shared: some first block repeats */
		size_t repeats = 0;
		for (size_t i = 1; i < a->n; i++)
			repeats += a->ids[a->req[i].first] == a->ids[a->req[0].first];
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
	struct kvt_trace *t;
	assert_int_equal(kvt__trace_create(512, &t), 0);
	o.doc_min = 10, o.doc_max = 5;
	assert_int_equal(kvt__gen_run(&o, t), -EINVAL);
	kvt__trace_destroy(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_good),       cmocka_unit_test(test_malformed),
	    cmocka_unit_test(test_huge_array), cmocka_unit_test(test_nul_and_truncated_file),
	    cmocka_unit_test(test_generator),  cmocka_unit_test(test_knobs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
