/*
 * store_circuit.c - a deeper tier's circuit breaker lets the tier back in once it heals.
 * The engine skips a tier after 5 failures in a row (its circuit open) for a cool-down of
 * 0.5 s, doubled by each failed probe up to 30 s; one call (the probe) is let through
 * after it. With DRAM and a fault-injecting tier around a real NVMe tier, 300 ms
 * deadlines, every answer of the tier held back 5 s:
 *  1. A burst of 12 reads that all miss their deadline, then the tier heals: a read
 *     reaches it again within 3 s. Until 2026-12-05 every failure from the fifth on
 *     doubled the cool-down, those of calls made before it opened included: 0.5, 1, 2, 4,
 *     8, 16, 30 s - one stall skipped the tier for 30 s.
 *  2. A lookup after the cool-down of a key whose remove is still out on the tier (it is
 *     not asked about: the tier's answer could predate the remove): the lookup took the
 *     probe and, asking nothing, never gave it back - the tier was skipped until restart.
 *     After the tier heals, a read reaches it again within 3 s.
 *  3. Writes the tier refuses - larger than it takes (an S3 server's EntityTooLarge:
 *     -EFBIG), over a quota (-EDQUOT), full (-ENOSPC) - are writes skipped, not failures
 *     that count towards opening the circuit (which would skip the tier's reads too):
 *     until 2026-12-06 -EFBIG was one.
 */
#include "engine.h"
#include "testlib.h"
#include "tier.h"
#include "tier_faulty.h"

#define HELD_MS 5000
#define BACK_MS 3000

static size_t PAYLOAD;
static uint32_t next_tok = 1;

static struct kvt_store *open_store(const char *dir)
{
	struct kvt_config *c = test_config("dram,faulty", dir);
	test_set(c, "faulty.inner", "nvme");
	test_set_deadline(c, "300", "300");
	struct kvt_store *s = test_open(c);
	PAYLOAD = kvt_payload_bytes(kvt_store_geometry(s), kvt_store_geometry(s)->chunk_tokens);
	return s;
}

static void new_key(struct kvt_store *s, struct kvt_key *k)
{
	uint32_t tok = next_tok++;
	kvt_key_next(kvt_store_ns_id(s), NULL, &tok, 1, k);
}

static double ms_until_back(struct kvt_store *s, double limit_ms)
{
	return test_ms_until_tier_answers(s, PAYLOAD, new_key, limit_ms, 20);
}

int main(void)
{
	char *dir = test_tmpdir("circuit");
	struct kvt_store *s = open_store(dir);
	struct kvt_tier *t = kvt__store_tier(s, 1);

	/* 1. */
	enum { N = 12 };
	struct kvt_key k[N];
	for (int i = 0; i < N; i++)
		new_key(s, &k[i]);
	void *bufs = malloc(PAYLOAD * N);
	struct test_box b[N];
	kvt__faulty_set(t, 0, 0, HELD_MS);
	test_get_burst(s, k, N, bufs, PAYLOAD, b);
	kvt__faulty_set(t, 0, 0, 0);
	double ms = ms_until_back(s, 40000);
	printf("store_circuit: %d reads past their deadline, the tier healed: back after %.0f ms\n",
	       N, ms);
	CHECKM(ms < BACK_MS, "back after %.0f ms", ms);
	free(bufs);

	/* 2. */
	struct kvt_key r;
	new_key(s, &r);
	test_put_seed(s, &r, 3);
	test_wb_settle(s);
	kvt__faulty_set(t, 0, 0, HELD_MS);
	CHECK(kvt_remove_sync(s, &r) >= 0); /* its call to the tier goes late */
	void *buf = malloc(PAYLOAD);
	for (int i = 0; i < 5; i++) { /* the circuit opens */
		struct kvt_key a;
		struct kvt_result res;
		new_key(s, &a);
		kvt_get_sync(s, &a, 0, 0, buf, PAYLOAD, &res);
	}
	usleep(700 * 1000); /* past the cool-down: the next call is the probe */
	int8_t tier = 0;
	CHECK_RC(kvt_lookup_sync(s, &r, 1, &tier), 0);
	kvt__faulty_set(t, 0, 0, 0);
	ms = ms_until_back(s, 40000);
	printf("store_circuit: a lookup asked nothing after the cool-down, the tier healed: back "
	       "after %.0f ms\n",
	       ms);
	CHECKM(ms < BACK_MS, "back after %.0f ms", ms);
	free(buf);
	usleep(HELD_MS * 1000); /* the held answers come in before close */
	kvt_store_close(s);
	test_rmdir(dir);
	free(dir);

	/* 3. */
	static const struct {
		int err;
		const char *name;
	} refusals[] = {{EFBIG, "27"}, {EDQUOT, "122"}, {ENOSPC, "28"}};
	for (size_t r3 = 0; r3 < sizeof(refusals) / sizeof(refusals[0]); r3++) {
		dir = test_tmpdir("circuit3");
		struct kvt_config *c = test_config("dram,faulty", dir);
		test_set(c, "faulty.inner", "nvme");
		test_set(c, "faulty.fail_pct", "100");
		test_set(c, "faulty.fail_errno", refusals[r3].name);
		s = test_open(c);
		for (int i = 0; i < 8; i++) {
			struct kvt_key a;
			new_key(s, &a);
			test_put_seed(s, &a, 30 + (uint64_t)i);
			test_wb_settle(s);
		}
		struct kvt_stats st;
		CHECK_RC(kvt_stats(s, &st), 0);
		printf("store_circuit: 8 writes refused %s: tier errors %llu, writes skipped %llu\n",
		       kvt_strerror(-refusals[r3].err), (unsigned long long)st.tier[1].errors,
		       (unsigned long long)st.tier[1].writes_skipped);
		CHECK_EQ(st.tier[1].errors, 0);
		CHECK(st.tier[1].writes_skipped >= 8);
		kvt_store_close(s);
		test_rmdir(dir);
		free(dir);
	}
	printf("store_circuit: ok\n");
	return 0;
}
