/*
 * store_wb_newer_marks.c - a failed write-behind does not mark unsaved a slot that a newer
 * job of the same slot has written. wb_complete lets the newest job decide the slot's
 * marks; until 2026-12-06 (a review) the older job looked for a newer one under wb_lock and
 * applied its marks after letting it go, so a newer job registered, written and marked
 * clean in between was overwritten: the slot unsaved, its eviction counted as a loss and
 * the next flush -EIO, while the tier held the chunk.
 *
 * The window has no tier call in it, so the test runs the newer job inside it from the
 * engine's test hook (kvt__test_wb_decided), as a flush's rewrite of a dirty slot
 * (kvt__e_wb_rewrite: the pool's dirty slot, written to every deeper tier) would:
 *  1. put K; its write is held by the fault tier's gate, then let go failed (-EIO).
 *  2. its job completes; once it has decided its marks, the hook writes K's slot again
 *     (a newer job), which the tier takes, and waits for that job to complete.
 *  3. K's slot is clean (before: unsaved); once evicted, no loss is counted, a flush says
 *     0 and a get reads K's bytes from the tier.
 */
#include "dram.h"
#include "engine.h"
#include "engine_internal.h"
#include "testlib.h"
#include "tier.h"
#include "tier_faulty.h"
#include "lib/faulty_gate.h"

static struct kvt_store *S;
static struct kvt_key SK; /* K's storage key */
static _Atomic int hooked; /* 1: the newer job ran in the window, -1: it could not */

static uint64_t pending(void)
{
	struct kvt_stats st;
	CHECK_RC(kvt_stats(S, &st), 0);
	return st.write_behind_pending;
}

/* On K's failed job only, once: a newer job of the same slot, waited for to the end. */
static void decided(struct wb *w)
{
	if (atomic_load(&w->ok) || !kvt__key_eq(&w->key, &SK) || atomic_load(&hooked))
		return;
	struct kvt_slot_ref ref;
	if (kvt__dram_get_dirty(kvt__store_dram(S), &SK, &ref) < 0 || ref.id != w->ref.id) {
		atomic_store(&hooked, -1);
		return;
	}
	kvt__e_wb_submit(S, &SK, &ref, S->n_links, NULL, NULL, false);
	uint64_t t0 = test_now_ns();
	while (pending() > 1) /* the newer one complete; this one is still counted */
		CHECKM(test_ms_since(t0) < 10000, "the newer job did not complete in 10 s");
	atomic_store(&hooked, 1);
}

int main(void)
{
	char *dir = test_tmpdir("wb_newer_marks");
	S = gate_store_open(dir);
	struct kvt_tier *t = kvt__store_tier(S, 1);
	struct kvt_dram *d = kvt__store_dram(S);
	const struct kvt_geometry *g = kvt_store_geometry(S);
	size_t payload = kvt_payload_bytes(g, g->chunk_tokens);
	uint32_t next_tok = 1;

	/* 1. */
	struct kvt_key k;
	kvt_key_next(kvt_store_ns_id(S), NULL, &next_tok, 1, &k);
	next_tok++;
	kvt_storage_key(kvt_store_ns_id(S), &k, &SK);
	kvt__faulty_gate(t, true);
	test_put_seed(S, &k, 7);
	uint64_t t0 = test_now_ns();
	while (kvt__faulty_gated(t) != 1)
		CHECKM(test_ms_since(t0) < 10000, "K's write is not held");
	kvt__faulty_gate(t, false); /* the newer job's write passes */
	atomic_store(&kvt__test_wb_decided, decided);

	/* 2. */
	CHECK_RC(kvt__faulty_gate_release(t, &SK, -EIO), 0);
	test_wb_settle(S);
	atomic_store(&kvt__test_wb_decided, NULL);
	CHECKM(atomic_load(&hooked) == 1, "the newer job did not run in the window (%d)",
	       atomic_load(&hooked));

	/* 3. */
	struct kvt_slot_ref r;
	int dirty = kvt__dram_get_dirty(d, &SK, &r) == 0;
	if (dirty)
		kvt__dram_unpin(d, r.id);
	printf("store_wb_newer_marks: K's slot after both jobs: %s\n", dirty ? "DIRTY (unsaved)" : "clean");
	for (int i = 0; i < 200 && kvt__dram_contains(d, &SK, false); i++) {
		struct kvt_key o;
		uint32_t tok = next_tok++;
		kvt_key_next(kvt_store_ns_id(S), NULL, &tok, 1, &o);
		test_put_seed(S, &o, 1000 + (uint64_t)i);
	}
	test_wb_settle(S);
	CHECKM(!kvt__dram_contains(d, &SK, false), "K still in DRAM after 200 puts");
	struct kvt_stats st;
	CHECK_RC(kvt_stats(S, &st), 0);
	int rc = kvt_flush_sync(S);
	printf("store_wb_newer_marks: evicted unsaved %llu, flush %d\n",
	       (unsigned long long)st.evicted_unsaved, rc);
	void *buf = malloc(payload);
	struct kvt_result res;
	CHECK_RC(kvt_get_sync(S, &k, 0, 0, buf, payload, &res), 0);
	CHECK_EQ(res.tier, 1);
	CHECK(test_check(buf, payload, 7));
	free(buf);
	CHECKM(!dirty, "K's slot was marked unsaved after a newer job wrote it");
	CHECKM(st.evicted_unsaved == 0, "K's eviction counted as a loss: %llu",
	       (unsigned long long)st.evicted_unsaved);
	CHECKM(rc == 0, "flush after K's eviction: %d (want 0: the tier holds K)", rc);

	kvt_store_close(S);
	test_rmdir(dir);
	free(dir);
	printf("store_wb_newer_marks: ok\n");
	return 0;
}
