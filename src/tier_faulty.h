/* tier_faulty.h - run-time control of the fault-injecting test tier (src/tier_faulty.c). */
#ifndef KVT_TIER_FAULTY_H
#define KVT_TIER_FAULTY_H

#include <stdbool.h>
#include <stdint.h>

struct kvt_tier;
struct kvt_key;

/* Percent of operations that fail with -EIO / reads that come back with one flipped byte;
 * milliseconds each completion is held back. */
void kvt__faulty_set(struct kvt_tier *t, uint32_t fail_pct, uint32_t corrupt_pct,
		     uint32_t delay_ms);
/* Writes reach the inner tier only ms after they were submitted (0: at once): a device
 * slow to land writes, while reads and removes go through at once. */
void kvt__faulty_set_write_delay(struct kvt_tier *t, uint32_t ms);
/* Writes reach the inner tier one after another at bytes_per_s (0: off): a device with a
 * fixed write bandwidth, where a write queued behind others waits for them. */
void kvt__faulty_set_write_rate(struct kvt_tier *t, uint64_t bytes_per_s);
/* Shut (true): every write from now on is held at the tier, reaching neither the inner
 * tier nor its answer, until kvt__faulty_gate_release lets it go; open (false): new writes
 * pass, those held stay held. Close cancels (-ECANCELED) writes still held. */
void kvt__faulty_gate(struct kvt_tier *t, bool shut);
/* Writes the gate holds now. */
uint32_t kvt__faulty_gated(struct kvt_tier *t);
/* Let the held write of key go (the newest, if several): rc 0 hands it to the inner tier
 * (the answer is the inner tier's), rc < 0 answers it rc with nothing written. Answered on
 * the tier's delay thread. -ENOENT: no write of key held. */
int kvt__faulty_gate_release(struct kvt_tier *t, const struct kvt_key *key, int rc);
/* Faults injected so far. */
uint64_t kvt__faulty_injected(struct kvt_tier *t);

#endif
