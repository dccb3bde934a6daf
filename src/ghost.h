/*
 * ghost.h - a "ghost list" of recently evicted keys, approximately: two Bloom filters that
 * take turns (the current one takes additions; once it holds `window / 2` keys the older
 * one is cleared and becomes the current), so a key is remembered for between window / 2
 * and window additions. Why: an adaptive admission rule (ARC's) needs to ask "was this key
 * evicted recently?" on every insert, and an exact list with a hash index costs pointer
 * chasing and deletions; two bit arrays cost two cache lines. 16 bits per remembered key,
 * two probes: about 1 % false positives. Allocated at create; not thread-safe.
 */
#ifndef KVT_GHOST_H
#define KVT_GHOST_H

#include <stdbool.h>
#include <stdint.h>

struct kvt_ghost;

/* window >= 2 keys. -EINVAL, -ENOMEM. */
int kvt__ghost_create(uint32_t window, struct kvt_ghost **out);
void kvt__ghost_destroy(struct kvt_ghost *g);
void kvt__ghost_add(struct kvt_ghost *g, uint64_t h);
bool kvt__ghost_test(const struct kvt_ghost *g, uint64_t h);
/* Keys added and still remembered (an estimate: the sizes of both generations). */
uint32_t kvt__ghost_size(const struct kvt_ghost *g);

#endif
