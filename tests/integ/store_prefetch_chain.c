/*
 * store_prefetch_chain.c - a chain a prefetch promotes from NVMe into DRAM is linked there as
 * a put's is (each chunk counted as its parent's child), so DRAM evicts it from its end, not
 * from its first chunk. Why it matters: a lookup stops at the first chunk missing, so a chain
 * whose first chunk went first leaves the rest of it in DRAM unusable until evicted in turn;
 * and the replay, whose figures the store should follow, links every block to its parent
 * (docs/COST_MODEL.md, "Where the simulated replay and the store differ", 3). Until
 * 2026-12-06 a promotion had no parent: with dram.policy=lru, the first chunk of a promoted
 * chain was the first of it evicted.
 *
 * DRAM of 7 slots, write-through to NVMe, LRU: chain A (3 chunks) put, then 7 others put to
 * push A out of DRAM (it stays on NVMe); a prefetch of A brings it back; 5 more puts evict 5
 * chunks: the 4 older others, then one of A's - its last, A[2], while A[0] and A[1] stay.
 * The same with A brought back by a rows load (kvt_rows_load, what the vLLM connector
 * restores with), whose gets name no parent to the public API but whose keys are a chain:
 * until 2026-12-06 its promotions had no parent and A[0] went first.
 * And a started rows load of A[0] and A[2] only (what a vLLM primary tier misses when it
 * holds A[1]) whose links say A[2] does not follow A[0] (kvt_rows_load_start_linked): A[2]
 * is promoted with no parent, so after a get of A[2] LRU evicts A[0] first; until
 * 2026-12-06 every chunk of a load was linked to the one before it, A[2] counted as
 * A[0]'s child, and A[0] was kept while A[2] went (a review).
 */
#include "dram.h"
#include "engine.h"
#include "store_key.h"
#include "testlib.h"

static void put_all(struct kvt_store *s, const struct kvt_key *k, int n, const void *buf,
		    size_t len, uint32_t tokens)
{
	for (int i = 0; i < n; i++)
		CHECK_RC(kvt_put_sync(s, &k[i], i ? &k[i - 1] : NULL, tokens, buf, len), 0);
	test_wb_settle(s); /* written to NVMe: clean, evictable */
}

static bool resident(struct kvt_store *s, const struct kvt_key *k)
{
	struct kvt_key sk;
	return kvt__dram_contains(kvt__store_dram(s), kvt__storage_key(kvt_store_ns_id(s), k, &sk),
				  false);
}

/* DRAM of 7 slots under LRU, write-through to NVMe, in a fresh directory (*dir); *buf
 * holds one chunk's payload (*len bytes, *tokens tokens). */
static struct kvt_store *open_seven(const char *name, char **dir, void **buf, size_t *len,
				    uint32_t *tokens)
{
	*dir = test_tmpdir(name);
	struct kvt_config *c = test_config("dram,nvme", *dir);
	test_set(c, "store.write_policy", "write-through");
	test_set(c, "dram.policy", "lru");
	test_set(c, "dram.bytes", "256KiB");
	struct kvt_store *s = test_open(c);
	CHECK_EQ(kvt__dram_slots(kvt__store_dram(s)), 7);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	*tokens = g->chunk_tokens;
	*len = kvt_payload_bytes(g, *tokens);
	*buf = malloc(*len);
	CHECK(*buf);
	test_fill(*buf, *len, 7);
	return s;
}

static const char *how_name[] = {"prefetch", "rows load", "kvt_get_linked", "kvt_get"};

/* A's 3 chunks brought back into DRAM by how: 0 a prefetch, 1 a rows load, 2 gets naming
 * their parents (kvt_get_linked), 3 gets that do not (kvt_get: its promotions have no
 * parent, so LRU takes A[0] first - the contrast that shows the others linked). */
static void run(int how)
{
	char *dir;
	void *buf;
	size_t len;
	uint32_t tokens;
	struct kvt_store *s = open_seven("store_prefetch_chain", &dir, &buf, &len, &tokens);

	struct kvt_key a[3], b[7], d[5];
	test_chain_keys(s, a, 3, 0xa0);
	for (int i = 0; i < 7; i++)
		test_chain_keys(s, &b[i], 1, 0xb0 + (uint32_t)i); /* 7 chains of one */
	for (int i = 0; i < 5; i++)
		test_chain_keys(s, &d[i], 1, 0xd0 + (uint32_t)i);

	put_all(s, a, 3, buf, len, tokens);
	for (int i = 0; i < 7; i++)
		put_all(s, &b[i], 1, buf, len, tokens);
	for (int i = 0; i < 3; i++)
		CHECKM(!resident(s, &a[i]), "A[%d] pushed out of DRAM", i);
	int8_t tiers[3];
	CHECK_EQ(kvt_lookup_sync(s, a, 3, tiers), 3); /* on NVMe */

	if (how == 0)
		CHECK_EQ(kvt_prefetch_sync(s, a, 3, 0), 3);
	else if (how == 1)
		test_rows_load_exact(s, a, 3, 3, buf, len);
	else /* from NVMe: promoted */
		CHECK_EQ(test_get_chain(s, a, 3, buf, len, how == 2, 7), 1);
	for (int i = 0; i < 3; i++)
		CHECKM(resident(s, &a[i]), "A[%d] promoted", i);

	for (int i = 0; i < 5; i++)
		put_all(s, &d[i], 1, buf, len, tokens);
	bool in[3] = {resident(s, &a[0]), resident(s, &a[1]), resident(s, &a[2])};
	int others = 0;
	for (int i = 0; i < 7; i++)
		others += resident(s, &b[i]);
	printf("  %s, then 5 puts into 7 slots: A[0] %s, A[1] %s, A[2] %s; %d of the 7 others\n",
	       how_name[how], in[0] ? "resident" : "evicted", in[1] ? "resident" : "evicted",
	       in[2] ? "resident" : "evicted", others);
	CHECK_EQ(others, 0);
	if (how == 3) { /* unlinked: LRU's own order, the oldest promotion first */
		CHECKM(!in[0] && in[1] && in[2], "kvt_get's promotions were linked after all");
		kvt_store_close(s);
		free(buf);
		test_rmdir(dir);
		free(dir);
		return;
	}
	CHECKM(in[0] && in[1] && !in[2], "the promoted chain is evicted from its end");
	/* and what stays is a usable prefix */
	CHECK_EQ(kvt_lookup_sync(s, a, 3, tiers), 3);
	CHECK_EQ(tiers[0], 0);
	CHECK_EQ(tiers[1], 0);

	kvt_store_close(s);
	free(buf);
	test_rmdir(dir);
	free(dir);
}

/* A started load of A[0] and A[2], not linked: A[2] names no parent in DRAM. */
static void unlinked_load(void)
{
	char *dir;
	void *buf;
	size_t len;
	uint32_t tokens;
	struct kvt_store *s = open_seven("store_prefetch_unlinked", &dir, &buf, &len, &tokens);
	struct kvt_key a[3], b[7], d[6];
	test_chain_keys(s, a, 3, 0xa8);
	for (int i = 0; i < 7; i++)
		test_chain_keys(s, &b[i], 1, 0xb8 + (uint32_t)i);
	for (int i = 0; i < 6; i++)
		test_chain_keys(s, &d[i], 1, 0xd8 + (uint32_t)i);
	put_all(s, a, 3, buf, len, tokens);
	for (int i = 0; i < 7; i++)
		put_all(s, &b[i], 1, buf, len, tokens);
	struct kvt_key two[2] = {a[0], a[2]};
	uint8_t linked[2] = {0, 0};
	struct kvt_row_layout lay = test_dense_layout(kvt_store_geometry(s));
	uint8_t *rows = calloc(2, lay.row_bytes);
	uint64_t ids[2] = {0, 1};
	CHECK(rows);
	struct kvt_rows *r;
	CHECK_RC(kvt_rows_open(s, &lay, rows, 2, 2, &r), 0);
	struct kvt_rows_job *j;
	CHECK_RC(kvt_rows_load_start_linked(r, two, linked, ids, 2, 0, &j), 0);
	struct kvt_rows_result res;
	CHECK_EQ(kvt_rows_job_poll(j, -1, &res), 1);
	CHECK_EQ(res.done, 2);
	kvt_rows_job_free(j);
	kvt_rows_close(r);
	free(rows);
	CHECK(resident(s, &a[0]) && resident(s, &a[2]));
	struct kvt_result gr;
	CHECK_RC(kvt_get_sync(s, &a[2], 0, 0, buf, len, &gr), 0); /* A[2] the newest */
	for (int i = 0; i < 6; i++) /* the 5 B's left, then one of A[0], A[2] */
		put_all(s, &d[i], 1, buf, len, tokens);
	bool in0 = resident(s, &a[0]), in2 = resident(s, &a[2]);
	printf("  a load of A[0] and A[2], not linked, A[2] read again, then 6 puts: A[0] %s, "
	       "A[2] %s\n",
	       in0 ? "resident" : "evicted", in2 ? "resident" : "evicted");
	CHECKM(!in0 && in2, "A[2] was promoted as A[0]'s child: LRU's choice refused");
	kvt_store_close(s);
	free(buf);
	test_rmdir(dir);
	free(dir);
}

int main(void)
{
	for (int how = 0; how < 4; how++)
		run(how);
	unlinked_load();
	printf("store_prefetch_chain: ok\n");
	return 0;
}
