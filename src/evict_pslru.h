/*
 * evict_pslru.h - the "pslru" eviction policy (src/evict_pslru.c): the same operations as
 * src/evict.h on the policy's own state, in the shape of evict.c's ops table
 * (kvt__evict_pslru_ops is defined there once src/evict_policy.h exists).
 */
#ifndef KVT_EVICT_PSLRU_H
#define KVT_EVICT_PSLRU_H

#include "evict.h"

int kvt__pslru_create(uint32_t capacity, void **state);
void kvt__pslru_destroy(void *state);
void kvt__pslru_insert(void *state, uint32_t id, uint64_t khash);
void kvt__pslru_touch(void *state, uint32_t id);
void kvt__pslru_remove(void *state, uint32_t id);
int kvt__pslru_victim(void *state, kvt_evict_ok_fn ok, void *arg);
void kvt__pslru_mark(void *state, uint32_t id, bool ok);
int kvt__pslru_victim_marked(void *state);
uint32_t kvt__pslru_peek(void *state, uint32_t *ids, uint32_t n);
uint32_t kvt__pslru_resident(const void *state);
/* The ghost filters' size in bits for a capacity (a power of two, 64 to 2^31). */
uint32_t kvt__pslru_ghost_bits(uint32_t capacity);

#endif
