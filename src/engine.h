/*
 * engine.h - internal hooks of the store for other library layers (the device layer moves
 * KV between an engine's GPU blocks and DRAM slots without an extra host copy; replay and
 * benchmarks drive the engine directly). The public API in kvtier.h is built on these.
 */
#ifndef KVT_ENGINE_H
#define KVT_ENGINE_H

#include <stdatomic.h>
#include <stdint.h>

#include "dram.h"
#include "kvtier.h"

struct kvt_tier;

/* Reserve a DRAM slot for a chunk the caller fills itself, in object layout: layer l's
 * dense bytes at kvt_layer_offset(geometry, n_tokens, l) of ref->buf (the header is
 * written by commit). The slot is pinned and invisible to readers until commit.
 * -EEXIST the key is already resident (nothing reserved), -ENOSPC no evictable slot,
 * -EINVAL bad n_tokens, -ENOTSUP the chain has no DRAM tier. */
/* key and parent here, and in kvt__store_acquire, are storage keys (src/store_key.h). */
/* Puts that wrote the caller's payload without copying it (store.zero_copy_puts). */
uint64_t kvt__store_zero_copy_puts(const struct kvt_store *s);
/* A DRAM slot for the caller to fill and commit (or cancel). A kvt_remove of the key before
 * the commit holds: the slot leaves the index at once (a put of the key may reserve
 * again), and the commit drops it (kvt__store_reserve_removed says so meanwhile). */
int kvt__store_reserve(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		       uint32_t n_tokens, struct kvt_slot_ref *ref);
/* Has a remove of the key overtaken this reservation (still held by the caller)? */
/* The same for one tensor-parallel rank's part of an object: a chunk already stored is
 * not counted (every rank would count it); the daemon counts it once per object with
 * kvt__store_put_resident (a put of a resident chunk: counted, a sighting for admission). */
int kvt__store_reserve_part(struct kvt_store *s, const struct kvt_key *key,
			    const struct kvt_key *parent, uint32_t n_tokens,
			    struct kvt_slot_ref *ref);
void kvt__store_put_resident(struct kvt_store *s, const struct kvt_key *key);
bool kvt__store_reserve_removed(struct kvt_store *s, const struct kvt_slot_ref *ref);
/* The body is filled: zero the padding, write header and CRCs, publish, unpin, and start
 * write-behind per the write policy. Returns 0: published (the slot belongs to the store
 * again); KVT__COMMIT_DROPPED: a remove overtook the reservation, so nothing was published
 * (the slot is freed) - the put still succeeded, ordered before the remove, but stored
 * nothing and is not counted in kvt_stats' puts; or -errno (sealing or protecting failed:
 * the slot is dropped). */
#define KVT__COMMIT_DROPPED 1
int kvt__store_commit(struct kvt_store *s, struct kvt_slot_ref *ref);
/* The same for a slot whose whole object (header, layers, CRCs) the caller wrote and
 * checked: publish it as it is (kvtierd, after a client encoded a put into the slot). */
int kvt__store_commit_sealed(struct kvt_store *s, struct kvt_slot_ref *ref);
/* Objects are MAC'ed or encrypted (security.*): only the store may write them. */
bool kvt__store_protected(const struct kvt_store *s);
/* Would a write-through commit of bytes now queue behind more than a deeper tier writes
 * within its deadline (the bound kvt_put applies before it answers -EAGAIN; reserve does
 * not apply it: the GPU save path has no retry)? kvtierd asks before a reservation. */
bool kvt__store_backlogged(struct kvt_store *s, uint64_t bytes);
/* Give back a reserved slot without publishing it. */
void kvt__store_cancel(struct kvt_store *s, struct kvt_slot_ref *ref);
/* A device operation on s (device_store.c) starts: hold, from its call until its completion
 * is queued on s, then release (its last touch of s). kvt_store_close waits for none to be
 * held: a copy (on the device's stream) may finish long after its call returned. */
void kvt__store_dev_hold(struct kvt_store *s);
void kvt__store_dev_release(struct kvt_store *s);
/* device_store.c: the half-written TP objects of s in the process-wide table, cancelled and
 * forgotten (kvt_store_close, before the store goes, once no device operation holds s);
 * returns how many were left because a rank's copy into them was still running (none: a
 * copy holds s until its entry is updated). */
int kvt__dev_store_forget(struct kvt_store *s);
/* How many half-written TP objects of s (compared by address only) the table holds. */
int kvt__dev_store_partials(const struct kvt_store *s);
/* Give back a reserved slot's key unpublished, as cancel does, but keep the slot itself out
 * of the pool until kvt__store_release(ref): a writer that may still write into it (kvtierd:
 * the expired reservation of a client process that is still alive) must never land in a
 * slot handed out for another object. */
void kvt__store_cancel_keep(struct kvt_store *s, struct kvt_slot_ref *ref);

/* Acquire a pinned DRAM slot holding the verified object of key, promoting it from the
 * fastest deeper tier that has it. Async contract as everywhere: 0 => cb runs exactly once
 * later (on a store thread, NOT through kvt_poll) with rc 0 and ref filled (pinned; give it
 * back with kvt__store_release) or rc < 0 (-ENOENT miss, -EBADMSG corrupt); < 0 => never.
 * While a remove of key is still out in a deeper tier (no put since), a miss in DRAM is a
 * miss: nothing is promoted (src/engine_ops.c, remove). The caller reads the chunk (a
 * device restore, a kvtierd client's get): a DRAM hit counts for admission as kvt_get's
 * does, and offers a declined chunk to the deeper tiers again. */
typedef void (*kvt_acquire_cb)(void *arg, int rc, const struct kvt_slot_ref *ref, int tier);
int kvt__store_acquire(struct kvt_store *s, const struct kvt_key *key, kvt_acquire_cb cb,
		       void *arg);
/* The same; a promotion that fails sets *cause (which must live until cb) before cb runs to
 * why no tier served it (kvt_result.cause: 0, -EBADMSG, -ETIMEDOUT, -EAGAIN, a tier's
 * error), so kvtierd can tell its clients. A hit leaves it alone. parent (a storage key, or
 * NULL): the chunk before key in its chain, which a promotion links it to in DRAM. */
int kvt__store_acquire_cause(struct kvt_store *s, const struct kvt_key *key,
			     const struct kvt_key *parent, kvt_acquire_cb cb, void *arg, int *cause);
void kvt__store_release(struct kvt_store *s, const struct kvt_slot_ref *ref);
/* kvt_lookup_sync that also fills res (may be NULL), whose cause says why the prefix
 * stopped when a tier could not answer, so kvtierd can tell its clients. */
int kvt__lookup_sync_res(struct kvt_store *s, const struct kvt_key *keys, size_t n,
			 int8_t *tiers, struct kvt_result *res);
/* Count a get served by acquire/release (kvtierd's clients reading the shared pool). */
void kvt__store_count_get(struct kvt_store *s);
/* Objects are encrypted at rest (security.encryption_key_*): slots hold ciphertext. */
bool kvt__store_encrypts(const struct kvt_store *s);
/* kvt_remove_sync of a storage key, as listed by a tier (kvtier rm of what kvtier ls shows). */
int kvt__store_remove_stored_sync(struct kvt_store *s, const struct kvt_key *storage_key);

/* Clear the store (src/engine_clear.c): remove every object its DRAM and nvme tiers hold,
 * then emit one KVT__EVENT_CLEARED per tier listed (tier set, key zero). *removed: objects
 * removed. until_ns (CLOCK_MONOTONIC, 0: none): no removal starts after it, though one
 * always does; 1 if objects listed were left for another call (no event then), 0 once
 * all were removed, or the first error (a tier's listing, a removal); -ENOTSUP on a client
 * store. kvtierd's CLEAR; the event is kvtier-internal until a public clear exists. */
#define KVT__EVENT_CLEARED 3
int kvt__store_clear_sync(struct kvt_store *s, uint64_t until_ns, uint64_t *removed);

/* The call gate (engine.c): every public call on a store runs between an enter that
 * returned 0 and a leave; kvt_store_close waits for them. enter is -ECANCELED once
 * kvt_store_shutdown or kvt_store_close has begun (-EINVAL for NULL). */
int kvt__store_enter(const struct kvt_store *s);
void kvt__store_leave(const struct kvt_store *s);
/* kvt_get / kvt_put (key and parent: the caller's keys) whose callback runs on the thread
 * that completes them, not through kvt_poll, inside the store's gate: kvtierd starts a
 * client's request with these so that it can stop waiting at the client's deadline while
 * the call runs to its end. 0: cb will run (possibly before this returns); < 0: it will
 * not (-EAGAIN: a tier's queue is full, try again). */
int kvt__store_get_direct(struct kvt_store *s, const struct kvt_key *key,
			  const struct kvt_key *parent, uint32_t layer_begin, uint32_t layer_end,
			  void *buf, size_t len, kvt_cb cb, void *arg);
int kvt__store_put_direct(struct kvt_store *s, const struct kvt_key *key,
			  const struct kvt_key *parent, uint32_t n_tokens, const void *buf,
			  size_t len, kvt_cb cb, void *arg);
/* The same for a lookup (tiers written at the end: it must live until cb), a remove and a
 * flush: kvtierd waits for them until the client's budget. */
int kvt__store_lookup_direct(struct kvt_store *s, const struct kvt_key *keys, size_t n,
			     int8_t *tiers, kvt_cb cb, void *arg);
int kvt__store_remove_direct(struct kvt_store *s, const struct kvt_key *key, kvt_cb cb,
			     void *arg);
/* A flush reports the unsaved evictions its caller has not heard of yet (*unsaved_seen, a
 * count of kvt__store_evicted_unsaved; NULL: the store's own count): kvtierd keeps one per
 * connection, so that every client flushing hears of a loss. */
int kvt__store_flush_direct(struct kvt_store *s, kvt_cb cb, void *arg,
			    _Atomic uint64_t *unsaved_seen);
uint64_t kvt__store_evicted_unsaved(struct kvt_store *s);
/* A prefetch (keys copied), the same way: kvtierd counts the ones it stops waiting for. */
int kvt__store_prefetch_direct(struct kvt_store *s, const struct kvt_key *keys, size_t n,
			       uint64_t deadline_ns, kvt_cb cb, void *arg);
/* The geometry and namespace id, for layers that have entered the gate (the public
 * accessors answer NULL once the store is closing). */
const struct kvt_geometry *kvt__store_geometry(const struct kvt_store *s);
const uint8_t *kvt__store_ns_id(const struct kvt_store *s);

/* Queue a user completion for kvt_poll() from any thread (the device layer's
 * completions go through the same queue as every other). */
void kvt__store_complete(struct kvt_store *s, kvt_cb cb, void *arg, const struct kvt_result *res);

/* For tools (ls, verify) and tests: the tier at a chain position (NULL for DRAM or out of
 * range), and the DRAM pool (NULL if the chain has none). */
struct kvt_tier *kvt__store_tier(struct kvt_store *s, int pos);
/* Bytes of store memory (slots, bounce buffers) the tier at chain position pos holds in
 * calls past their deadline, and the most it may (engine_health.c, late_cap); 0 for DRAM,
 * out of range, or a client of kvtierd. Not in struct kvt_tier_stats: that is ABI, sent
 * raw by kvtierd. For `kvtier stat` and kvtierd's metrics. */
uint64_t kvt__store_late_held(const struct kvt_store *s, int pos, uint64_t *cap);
/* store.sync_timeout_ms: the bound for a tier's synchronous calls (src/tier_bounded.c). */
uint64_t kvt__store_sync_timeout_ms(const struct kvt_store *s);
struct kvt_dram *kvt__store_dram(struct kvt_store *s);

/* What the store is waiting for, for a caller whose operations are overdue to say so
 * (kvtier bench): every operation should complete within two deadline ceilings (a remove
 * waits for the key's write-behind, then makes its own call), so one still out after that
 * is a liveness bug, and these counts say where it waits. */
struct kvt__store_waits {
	uint64_t ops;		      /* admitted operations not completed */
	uint64_t tier_calls;	      /* tier calls under a deadline (the deadline heap) */
	uint64_t wb_jobs;	      /* write-behind jobs not complete */
	uint64_t removes_waiting;     /* removes queued behind a write-behind job */
	uint64_t deadline_ceiling_ms; /* store.tier_timeout_ms */
};
void kvt__store_waits(struct kvt_store *s, struct kvt__store_waits *out);

#endif
