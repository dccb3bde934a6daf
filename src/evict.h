/*
 * evict.h - eviction policies over a fixed set of entry ids (0 .. capacity-1), pure logic
 * with no I/O so that the DRAM tier, the NVMe index and the replay simulator share them and
 * unit tests drive them directly. An entry is named by its id (a slot) and by a 64-bit key
 * hash (ARC's ghost lists remember hashes of entries no longer resident).
 *
 * Not thread-safe: the owner holds its own lock around calls.
 */
#ifndef KVT_EVICT_H
#define KVT_EVICT_H

#include <stdbool.h>
#include <stdint.h>

struct kvt_evict;

/* May the owner evict this entry now (not pinned, not dirty, no resident children)? */
typedef bool (*kvt_evict_ok_fn)(void *arg, uint32_t id);

/* policy: "hda" (the default), "hd", "lru", "arc", "pslru" or "lru2". -EINVAL unknown,
 * -ENOMEM. */
int kvt__evict_create(const char *policy, uint32_t capacity, struct kvt_evict **out);
void kvt__evict_destroy(struct kvt_evict *e);
const char *kvt__evict_name(const struct kvt_evict *e);
/* id becomes resident (it must not be). */
void kvt__evict_insert(struct kvt_evict *e, uint32_t id, uint64_t khash);
/* A hit on a resident id. */
void kvt__evict_touch(struct kvt_evict *e, uint32_t id);
/* id is about to be used (found by a lookup): see struct kvt_evict_ops.refresh */
void kvt__evict_refresh(struct kvt_evict *e, uint32_t id);
/* id leaves without being a policy victim (explicit remove, corrupt). */
void kvt__evict_remove(struct kvt_evict *e, uint32_t id);
/* id leaves as a victim the owner chose (dram.partial_first): the policy counts it as an
 * eviction where it learns from them (hd, hda), and keeps no ghost of it. */
void kvt__evict_expire(struct kvt_evict *e, uint32_t id);
/* Choose a victim among resident ids for which ok() holds, in policy order; it is removed
 * from the resident set (ARC remembers it in a ghost list). Returns the id or -ENOENT. */
int kvt__evict_victim(struct kvt_evict *e, kvt_evict_ok_fn ok, void *arg);
/* The owner's answer to "may id go?" (what its ok() would say), kept by the policy in its
 * own order: marks start false, may be set for any id below capacity, resident or not, and
 * hold until changed. kvt__evict_victim_marked is kvt__evict_victim with ok(id) = the
 * mark - the same victim - at O(1) per call (O(log n) for ids marked long after their
 * last use) instead of one ok() call per refused id nearer the LRU end. An owner whose
 * ok() refuses most of a full pool (the DRAM tier's leaf-first rule, with long prefix
 * chains resident) needs it: the scan is O(n) per eviction there. */
void kvt__evict_mark(struct kvt_evict *e, uint32_t id, bool ok);
int kvt__evict_victim_marked(struct kvt_evict *e);
/* Up to n resident ids in the order the policy would evict them (ok() not applied);
 * write-back uses it to clean the coldest dirty entries ahead of need. Returns count. */
uint32_t kvt__evict_peek(struct kvt_evict *e, uint32_t *ids, uint32_t n);
uint32_t kvt__evict_resident(const struct kvt_evict *e);

#endif
