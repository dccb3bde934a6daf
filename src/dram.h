/*
 * dram.h - the DRAM tier: a pool of object-sized slots allocated once at open (huge pages
 * when the kernel gives them, optionally mlock'ed), a hash index from key to slot, and an
 * eviction policy (src/evict.h). It is the hub of the host-centric data flow: puts land
 * here, deeper tiers are written behind from a slot's bytes, deeper hits are promoted into
 * a slot, so a slot holds the complete encoded object (header + padded layers) and can be
 * handed to O_DIRECT or a network send without another copy.
 *
 * Unlike the deeper tiers it is not behind the async vtable: its operations are memory
 * operations that complete in the call, and the engine needs slot pointers, not copies.
 *
 * Rules the pool enforces:
 *   - a pinned slot (being read, filled or written behind) is never evicted or reused;
 *   - a dirty slot (write-behind pending) is never evicted, except one marked unsaved (its
 *     write-behind reached no deeper tier: kvt__dram_set_unsaved), which is counted;
 *   - a slot whose chunk has resident children (chunks that name it as parent) is evicted
 *     only after them: suffixes go before prefixes;
 *   - a slot being filled (alloc'ed, not yet published) is invisible to lookups.
 * Thread-safe: one mutex, never held across I/O (there is none here).
 */
#ifndef KVT_DRAM_H
#define KVT_DRAM_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"

struct kvt_dram;

/* What happened to a published chunk: the store turns these into its KV events. */
enum kvt_dram_change { KVT_DRAM_STORED = 1, KVT_DRAM_EVICTED = 2, KVT_DRAM_REMOVED = 3 };
/* Called with the pool's mutex held, in the order of the changes (so it must not call
 * into the pool). parent: NULL unless the chunk was stored naming one. */
typedef void (*kvt_dram_change_fn)(void *arg, int change, const struct kvt_key *key,
				   const struct kvt_key *parent, uint32_t n_tokens,
				   uint64_t object_bytes);

struct kvt_dram_options {
	uint64_t bytes;       /* pool size; slots = bytes / slot_bytes (at least 1) */
	uint64_t slot_bytes;  /* object bytes of a full chunk, a multiple of KVT_ALIGN */
	const char *policy;   /* src/evict.h names; NULL: "hda" */
	bool hugepages;       /* try MAP_HUGETLB / THP advice first */
	bool mlock;           /* lock the pool into memory (failure is logged, not fatal) */
	bool prefault;        /* fault every page in at open (failure is logged, not fatal) */
	bool shared;          /* a memfd (kvt__dram_pool) other processes may map */
	/* dram.partial_first: a chunk of fewer tokens than this (a full chunk's) is evicted
	 * before any other until it is hit; 0: off */
	uint32_t partial_below;
	const struct kvt_log *log;
	kvt_dram_change_fn on_change; /* may be NULL */
	void *on_change_arg;
};

/* A pinned slot, as the caller sees it. */
struct kvt_slot_ref {
	int32_t id;
	void *buf;             /* slot_bytes, KVT_ALIGN-aligned */
	uint64_t object_bytes; /* valid bytes (0 while being filled) */
	uint32_t n_tokens;
	bool dirty;
	uint32_t depth; /* chunks before this one in its prompt, if DRAM held its prefix at
			 * alloc (0 when unknown): admission's position-dependent checks */
	bool has_parent;       /* the put named the chunk before it: deeper tiers evict */
	struct kvt_key parent; /* suffixes before prefixes (tier write_chained) */
	bool discarded; /* false from DRAM; set by the engine on a promotion a remove overtook:
			 * the slot never entered the index, its bytes are only this pin's to
			 * read (the chunk is not resident) */
	uint8_t reoffer; /* chain positions (bits) whose admission declined it for a reason
			  * that can change: offered to them again on a hit */
};

int kvt__dram_create(const struct kvt_dram_options *o, struct kvt_dram **out);
/* All slots must be unpinned. */
void kvt__dram_destroy(struct kvt_dram *d);
uint32_t kvt__dram_slots(const struct kvt_dram *d);
uint64_t kvt__dram_slot_bytes(const struct kvt_dram *d);

/* Is key resident and published? touch: a lookup found it - the policy keeps it from going
 * first until its get, which is the use (kvt__evict_refresh: hd counts no hit for it). */
bool kvt__dram_contains(struct kvt_dram *d, const struct kvt_key *key, bool touch);
/* The published slot key is indexed under, or -1. */
int32_t kvt__dram_indexed(struct kvt_dram *d, const struct kvt_key *key);
/* Pin a resident, published slot without touching it or counting a hit (a prefetch holds
 * what it found staged until it answers): its id, or -1. */
int32_t kvt__dram_pin_resident(struct kvt_dram *d, const struct kvt_key *key);
/* Pin a resident, published slot (and touch it). 0 or -ENOENT. */
int kvt__dram_get(struct kvt_dram *d, const struct kvt_key *key, struct kvt_slot_ref *ref);
/* Reserve a slot for key, evicting by policy if needed; returned pinned and unpublished.
 * parent (may be NULL) links suffix to prefix for eviction order.
 * -EEXIST key already resident, -EBUSY key being filled (not stored yet; nothing reserved
 * either way), -ENOSPC every slot is pinned, dirty or a prefix of something resident. */
int kvt__dram_alloc(struct kvt_dram *d, const struct kvt_key *key, const struct kvt_key *parent,
		    struct kvt_slot_ref *ref);
/* kvt__dram_alloc for a slot its reserver fills and publishes itself (a device store, a
 * daemon client's write) rather than a promotion: a kvt__dram_remove of the key before the
 * publish takes the slot out of the index (-EBUSY), and the publish then drops it. */
int kvt__dram_reserve(struct kvt_dram *d, const struct kvt_key *key, const struct kvt_key *parent,
		      struct kvt_slot_ref *ref);
/* Make a reserved slot visible with its contents; it stays pinned until unpinned. false
 * (nothing published, the slot still pinned) if a remove took the reservation out of the
 * index first. */
bool kvt__dram_publish(struct kvt_dram *d, int32_t id, uint64_t object_bytes, uint32_t n_tokens,
		       bool dirty);
/* The same for a chunk a put brought (a fill from a deeper tier, just asked for, uses
 * kvt__dram_publish): with partial_below, one of fewer tokens goes first until hit. */
bool kvt__dram_publish_put(struct kvt_dram *d, int32_t id, uint64_t object_bytes,
			   uint32_t n_tokens, bool dirty);
/* Give back a reserved, unpublished slot (fill failed), or one of kvt__dram_reserve a
 * remove took out of the index. Unpins it. */
void kvt__dram_abort(struct kvt_dram *d, int32_t id);
/* Did a remove take this kvt__dram_reserve slot out of the index (the caller holds its pin)? */
bool kvt__dram_reserve_removed(struct kvt_dram *d, int32_t id);
void kvt__dram_pin(struct kvt_dram *d, int32_t id);
void kvt__dram_unpin(struct kvt_dram *d, int32_t id);
/* Pin the key's published slot if it is dirty, whether or not it is pinned already (a
 * write of it may be under way that skipped a tier): its write is started again. 0 or
 * -ENOENT (not resident, or clean). */
int kvt__dram_get_dirty(struct kvt_dram *d, const struct kvt_key *key, struct kvt_slot_ref *ref);
/* Mark a published slot dirty (write-behind pending) or clean. */
void kvt__dram_set_dirty(struct kvt_dram *d, int32_t id, bool dirty);
/* Mark a published slot unsaved: its write-behind reached no deeper tier. It stays dirty
 * (flush and close write it again; kvt__dram_get_dirty finds it) but may be evicted, which
 * kvt__dram_evicted_unsaved counts. A later set_dirty clears the mark. */
void kvt__dram_set_unsaved(struct kvt_dram *d, int32_t id);
/* A late write of an unsaved slot landed: clean (a deeper tier holds it). Only an unsaved
 * slot: one dirty for another reason stays so. */
void kvt__dram_clear_unsaved(struct kvt_dram *d, int32_t id);
uint64_t kvt__dram_evicted_unsaved(struct kvt_dram *d);
/* Admission at the deeper tiers in links (bits of chain positions) declined the published
 * slot for a reason a later sighting can change (kvt__admit_reoffer): its hits offer it
 * again. take: the marks, cleared, for the one hit that offers it (0: none, or another
 * hit took them). Both cleared with the slot. */
void kvt__dram_add_reoffer(struct kvt_dram *d, int32_t id, uint8_t links);
/* One more get served from slot id's copy (pinned by the caller): the count since the copy
 * entered DRAM, for the selective write policy (a new copy starts at 0). */
uint32_t kvt__dram_count_hit(struct kvt_dram *d, int32_t id);
/* Tests: key's copy's count (0: none resident), then set to set unless it is negative. */
uint32_t kvt__dram_test_hits(struct kvt_dram *d, const struct kvt_key *key, int64_t set);
/* Pin key's published slot if it is clean and marked to be offered again, without touching
 * it (a put of a resident chunk: a sighting, not a use). 0 or -ENOENT. */
int kvt__dram_pin_reoffer(struct kvt_dram *d, const struct kvt_key *key, struct kvt_slot_ref *ref);
uint8_t kvt__dram_take_reoffer(struct kvt_dram *d, int32_t id);
/* A tier in links took the chunk after all (a late write landed): not offered to it again. */
void kvt__dram_clear_reoffer(struct kvt_dram *d, int32_t id, uint8_t links);
/* Remove key: 0, -ENOENT, or -EBUSY if pinned (it is then unlinked from the index at once
 * and its slot freed at the last unpin; so is a kvt__dram_reserve slot not published yet,
 * which then never is). */
int kvt__dram_remove(struct kvt_dram *d, const struct kvt_key *key);
/* Up to n dirty slots, pinned for the caller (who writes them, then unpins), the count
 * returned. pass 0 (write-back, keeping headroom): those nearest to eviction, only unpinned
 * ones that are not unsaved (an unsaved slot is evictable already, a pinned one cannot go
 * anyway). pass from kvt__dram_flush_pass (flush, close: every dirty slot must be written
 * or waited for): in slot order, the pass's calls walking the pool once; unsaved and
 * pinned ones too - a reader's pin (a device load, a daemon
 * client's lease) does not make a slot durable, and until 2026-12-05 flush skipped them
 * and answered 0 - each once per pass, except those a job is writing (kvt__dram_job). */
uint32_t kvt__dram_flush_pass(struct kvt_dram *d);
/* A write-behind job of slot id starts (registered: a flush that comes after waits for it)
 * or completes (its marks set). A flush pass leaves a slot with a job out to that job; the
 * key's other jobs say nothing of this slot (a job of an older slot of the key, removed
 * and put again, does not write this one). */
void kvt__dram_job(struct kvt_dram *d, int32_t id, bool start);
uint32_t kvt__dram_dirty_victims(struct kvt_dram *d, struct kvt_slot_ref *refs, uint32_t n,
				 uint32_t pass);
/* Count of free (never used or evicted) + clean evictable slots: the headroom. */
uint32_t kvt__dram_headroom(struct kvt_dram *d);
/* Key of a slot (for write-behind bookkeeping). */
void kvt__dram_key(struct kvt_dram *d, int32_t id, struct kvt_key *out);
/* objects, bytes, capacity, evictions, hits, misses. */
void kvt__dram_stats(struct kvt_dram *d, struct kvt_tier_stats *out);
/* The pool's mapping, and its memfd (-1 unless created shared): slot bytes start at
 * base + id * slot_bytes. */
int kvt__dram_pool(const struct kvt_dram *d, void **base, size_t *len);
/* Visit published slots (for `kvtier ls` on a live store). */
int kvt__dram_scan(struct kvt_dram *d, int (*fn)(void *arg, const struct kvt_key *key,
						 uint64_t bytes), void *arg);

#endif
