/*
 * evict_wtlfu.h - the "wtlfu" eviction policy (window + frequency-gated segmented LRU, see
 * src/evict_wtlfu.c), written against the same operations as src/evict.h so that evict.c's
 * policy table dispatches to it by name: each function below is the policy's version of
 * the kvt__evict_* call of the same suffix, on the policy's own state.
 */
#ifndef KVT_EVICT_WTLFU_H
#define KVT_EVICT_WTLFU_H

#include "evict.h"

struct kvt_wtlfu;

int kvt__wtlfu_create(uint32_t capacity, struct kvt_wtlfu **out);
void kvt__wtlfu_destroy(struct kvt_wtlfu *p);
void kvt__wtlfu_insert(struct kvt_wtlfu *p, uint32_t id, uint64_t khash);
void kvt__wtlfu_touch(struct kvt_wtlfu *p, uint32_t id);
void kvt__wtlfu_remove(struct kvt_wtlfu *p, uint32_t id);
int kvt__wtlfu_victim(struct kvt_wtlfu *p, kvt_evict_ok_fn ok, void *arg);
uint32_t kvt__wtlfu_peek(struct kvt_wtlfu *p, uint32_t *ids, uint32_t n);
uint32_t kvt__wtlfu_resident(const struct kvt_wtlfu *p);

#endif
