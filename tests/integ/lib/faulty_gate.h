/*
 * faulty_gate.h - what the write-behind tests that step writes through the fault tier's
 * gate (kvt__faulty_gate) share: a new chunk key with its storage key, waiting until the
 * gate holds n writes, and waiting for a flush's answer. Include after testlib.h.
 */
#ifndef KVT_TEST_FAULTY_GATE_H
#define KVT_TEST_FAULTY_GATE_H

#include "engine.h"
#include "tier_faulty.h"

/* DRAM over the fault tier around NVMe in dir, write-through, with deadlines long enough
 * for a write held at the gate to stay within them. */
static inline struct kvt_store *gate_store_open(const char *dir)
{
	struct kvt_config *c = test_config("dram,faulty", dir);
	test_set(c, "faulty.inner", "nvme");
	test_set(c, "store.write_policy", "write-through");
	test_set_deadline(c, "10000", "5000");
	return test_open(c);
}

/* A key of its own for each call (one token each), and what DRAM and the tiers see. */
static inline void gate_new_key(struct kvt_store *s, struct kvt_key *k, struct kvt_key *sk)
{
	static uint32_t next_tok = 1;
	uint32_t tok = next_tok++;
	kvt_key_next(kvt_store_ns_id(s), NULL, &tok, 1, k);
	kvt_storage_key(kvt_store_ns_id(s), k, sk);
}

/* Until the gate holds exactly n writes (10 s at most). */
static inline void gate_wait_held(struct kvt_tier *t, uint32_t n)
{
	uint64_t t0 = test_now_ns();
	while (kvt__faulty_gated(t) != n)
		CHECKM(test_ms_since(t0) < 10000, "the gate holds %u writes, want %u",
		       kvt__faulty_gated(t), n);
}

/* Until the flush answering into b has answered (10 s at most), polling s. */
static inline void gate_wait_flush(struct kvt_store *s, struct test_box *b)
{
	uint64_t t0 = test_now_ns();
	while (!b->done) {
		CHECKM(test_ms_since(t0) < 10000, "a flush did not answer in 10 s");
		kvt_poll(s, 50);
	}
}

#endif
