/* tier_faulty.h - run-time control of the fault-injecting test tier (src/tier_faulty.c). */
#ifndef KVT_TIER_FAULTY_H
#define KVT_TIER_FAULTY_H

#include <stdint.h>

struct kvt_tier;

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
/* Faults injected so far. */
uint64_t kvt__faulty_injected(struct kvt_tier *t);

#endif
