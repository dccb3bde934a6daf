/*
 * trace_fuzz.c - libFuzzer target for the Mooncake trace parser (src/trace.c): arbitrary
 * bytes are parsed as JSON lines; whatever is accepted must respect the bounds the
 * simulator relies on, survive a write/parse round trip unchanged, and replay through the
 * Belady pass (which builds the block index every simulation uses) or be refused there as
 * ids that are not prefix hashes, with the line saying where. A violation traps.
 *
 * Built two ways: with tests/fuzz/replay_main.c as a ctest test replaying the corpus
 * (tests/fuzz/corpus/trace_fuzz), and
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Iinclude -Isrc \
 *         tests/fuzz/trace_fuzz.c src/trace.c src/sim.c src/util.c ... -o /tmp/trace_fuzz
 * for real fuzzing.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "sim.h"
#include "trace.h"
/* stands in for src/evict.c until that file is in this tree; empty once it is */

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c))                                                                          \
			__builtin_trap();                                                          \
	} while (0)

static void check_trace(const struct kvt_trace *t)
{
	uint64_t ids = 0;
	for (size_t i = 0; i < t->n; i++) {
		const struct kvt_trace_req *r = &t->req[i];
		CHECK(r->input_len >= 1 && r->input_len <= KVT_TRACE_MAX_INPUT);
		CHECK(r->output_len <= KVT_TRACE_MAX_OUTPUT);
		CHECK(r->n_blocks <= KVT_TRACE_MAX_BLOCKS);
		CHECK((uint64_t)r->n_blocks * t->block_tokens <
		      (uint64_t)r->input_len + t->block_tokens);
		CHECK(r->ts_ms >= 0 && r->ts_ms <= KVT_TRACE_MAX_TS_MS);
		CHECK(!i || r->ts_ms >= t->req[i - 1].ts_ms);
		CHECK(r->first == ids);
		for (uint32_t b = 0; b < r->n_blocks; b++)
			CHECK(t->ids[r->first + b] <= KVT_TRACE_MAX_ID);
		ids += r->n_blocks;
	}
	CHECK(ids == t->n_ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvt_trace *t, *u;
	char err[256];
	if (kvt__trace_create(512, &t))
		return 0;
	err[0] = 0;
	int rc = kvt__trace_parse(t, (const char *)data, size, err, sizeof(err));
	/* an error always names its line */
	CHECK(rc == 0 || !strncmp(err, "line ", 5) || rc == -ENOMEM);
	check_trace(t); /* what was accepted before an error is sound too */
	if (rc == 0 && t->n) {
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);
		if (f) {
			CHECK(kvt__trace_write(t, f) == 0);
			fclose(f);
			if (!kvt__trace_create(512, &u)) {
				CHECK(kvt__trace_parse(u, buf, len, err, sizeof(err)) == 0);
				CHECK(u->n == t->n && u->n_ids == t->n_ids);
				CHECK(!t->n_ids ||
				      !memcmp(u->ids, t->ids, t->n_ids * sizeof(uint64_t)));
				for (size_t i = 0; i < t->n; i++)
					CHECK(u->req[i].input_len == t->req[i].input_len &&
					      u->req[i].n_blocks == t->req[i].n_blocks);
				kvt__trace_destroy(u);
			}
			free(buf);
		}
		double block = -1, token = -1;
		int brc = kvt__sim_belady(t, 3, &block, &token);
		if (brc == 0)
			CHECK(block >= 0 && block <= 1 && token >= 0 && token <= 1);
		char why[300];
		int crc = kvt__sim_check_trace(t, why, sizeof(why));
		/* a trace's ids need not be prefix hashes (each (id, parent) is a block): the
		 * bound always runs, and a count of such blocks comes with the line of the first */
		CHECK(brc == 0 || brc == -ENOMEM || brc == -E2BIG);
		CHECK(crc >= 0 || crc == -ENOMEM || crc == -E2BIG);
		CHECK(crc <= 0 || !strncmp(why, "line ", 5));
	}
	kvt__trace_destroy(t);
	return 0;
}
