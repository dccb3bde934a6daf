/*
 * tier.h - the one interface every storage backend implements (docs/ARCHITECTURE.md).
 * The engine reaches a backend only through struct kvt_tier_ops; backends live in
 * src/tier_<name>.c and are listed in the static table of src/tier.c.
 *
 * Asynchronous contract, for every call that takes a kvt_tier_cb:
 *   returns 0  => cb(arg, result) runs exactly once, later, on a thread of the tier
 *                 (never inside the submitting call);
 *   returns <0 => cb never runs.
 * Callbacks must be short and must not call back into the same tier synchronously in a
 * way that waits; they may submit new operations. No tier holds a lock across I/O.
 *
 * Objects are opaque byte strings to a tier (src/format.h gives them meaning): a tier
 * stores, finds, reads ranges of and deletes them by key. Buffers and lengths handed to a
 * tier are KVT_ALIGN-aligned (offsets and lengths multiples of KVT_ALIGN) so that O_DIRECT
 * needs no bounce buffer.
 */
#ifndef KVT_TIER_H
#define KVT_TIER_H

#include <stdint.h>

#include "config.h"
#include "internal.h"

struct kvt_tier;

/* result: >= 0 success (a read: bytes read, which may exceed 2 GiB), < 0 -errno. The engine
 * puts its own deadline on every call (src/engine_health.c): a tier may answer after it,
 * and must still answer exactly once (close answers what is left with -ECANCELED). */
typedef void (*kvt_tier_cb)(void *arg, int64_t result);
/* scan: called once per object; return non-zero to stop. */
typedef int (*kvt_scan_fn)(void *arg, const struct kvt_key *key, uint64_t bytes);

/* One contiguous range of an object to read into buf. */
struct kvt_seg {
	uint64_t off;
	uint64_t len;
	void *buf;
};

struct kvt_tier_ops {
	const char *name; /* "nvme", "fs", "s3", "rados", "redis" */
	uint32_t version; /* of this backend's on-media layout */
	size_t state_size; /* bytes of t->state, zeroed before open */

	/* Required. Read the "<name>.*" keys of cfg, set up, start the tier's I/O thread.
	 * 0 or -errno with a reason logged. */
	int (*open)(struct kvt_tier *t, const struct kvt_config *cfg);
	/* Required. Wait for or cancel (-ECANCELED) every pending operation - their callbacks
	 * have all run when close returns - then free everything. */
	void (*close)(struct kvt_tier *t);
	/* Required. present[i] = 1 if keys[i] is stored, else 0; one callback for the batch
	 * with result 0 or -errno (then present[] is undefined and the engine counts misses). */
	int (*exists)(struct kvt_tier *t, const struct kvt_key *keys, uint32_t n, uint8_t *present,
		      kvt_tier_cb cb, void *arg);
	/* Required. Read nsegs ranges of one object. result = total bytes read (a range past
	 * the end of the object comes back short), -ENOENT if the object is absent. */
	int (*read)(struct kvt_tier *t, const struct kvt_key *key, const struct kvt_seg *segs,
		    uint32_t nsegs, kvt_tier_cb cb, void *arg);
	/* Required. Store obj[0..len) under key, atomically: a reader sees the whole object
	 * or nothing, never a torn one, even if the process dies mid-write. Writing a key that
	 * exists is harmless. obj is borrowed until the callback: the caller keeps it alive
	 * and unchanged until then (tiers send or write straight from it), and owns it again
	 * once the callback runs. result 0, -ENOSPC (full, nothing evictable), -EDQUOT (write
	 * budget spent), -errno. */
	int (*write)(struct kvt_tier *t, const struct kvt_key *key, const void *obj, uint64_t len,
		     kvt_tier_cb cb, void *arg);
	/* Required. result 0, or -ENOENT if it was not there. */
	int (*remove)(struct kvt_tier *t, const struct kvt_key *key, kvt_tier_cb cb, void *arg);
	/* Required. Fill counters (name is filled by the engine). Safe from any thread. */
	void (*stats)(struct kvt_tier *t, struct kvt_tier_stats *out);

	/* Optional, may be NULL: list stored objects synchronously (recovery, `kvtier ls`).
	 * May block on the device: callers use kvt__tier_scan_bounded. open, close and
	 * scan_anomalies may block too (kvt__tier_open_bounded, ...). */
	int (*scan)(struct kvt_tier *t, kvt_scan_fn fn, void *arg);
	/* Optional, may be NULL: completes when writes submitted before it are durable. */
	int (*flush)(struct kvt_tier *t, kvt_tier_cb cb, void *arg);
	/* Optional, may be NULL: would a write of len bytes be accepted now (capacity, write
	 * budget, the server's largest value)? 0 yes, -EDQUOT (not today: the write budget) /
	 * -EFBIG (never: over a whole day's budget, or larger than the tier takes) / -ENOSPC
	 * no. Lets admission skip a doomed write cheaply.
	 * Runs in the caller's put: answers from memory, never waits for I/O. */
	int (*can_write)(struct kvt_tier *t, uint64_t len);
	/* Optional, may be NULL: the object was found corrupt by the engine; drop it. Hands
	 * the removal to the tier's thread: never waits for I/O. */
	void (*drop_corrupt)(struct kvt_tier *t, const struct kvt_key *key);
	/* Optional, may be NULL: write() that also names the chunk before this one in its
	 * prompt (parent, NULL if none or unknown), so a tier that evicts can drop suffixes
	 * before their prefixes. Same contract as write(). */
	int (*write_chained)(struct kvt_tier *t, const struct kvt_key *key,
			     const struct kvt_key *parent, const void *obj, uint64_t len,
			     kvt_tier_cb cb, void *arg);
	/* Optional, may be NULL: write_chained() of an object in two pieces, its head (the
	 * header, head_len bytes) then its tail (the payload, tail_len bytes), each
	 * KVT_ALIGN-aligned in address and length, written from where they are: the put of
	 * a store without DRAM sends the caller's payload to the device without copying it
	 * (store.zero_copy_puts). Same contract as write() for both pieces. crc is the CRC32C
	 * of the whole object (head, then tail), which the caller has without reading the tail
	 * (kvt__object_crc): a tier that records one per object (the NVMe log) takes it rather
	 * than pass over the payload again. */
	int (*write_split)(struct kvt_tier *t, const struct kvt_key *key,
			   const struct kvt_key *parent, const void *head, uint64_t head_len,
			   const void *tail, uint64_t tail_len, uint32_t crc, kvt_tier_cb cb,
			   void *arg);
	/* Optional, may be NULL: list, synchronously, entries that sit where an object would
	 * but cannot be read as one (a symlink, a directory, a special file), with a short
	 * reason. For `kvtier verify`; scan() does not list them. */
	int (*scan_anomalies)(struct kvt_tier *t,
			      void (*fn)(void *arg, const char *path, const char *why), void *arg);
};

struct kvt_evict_gate;
struct kvt_log_gate;

struct kvt_tier {
	const struct kvt_tier_ops *ops;
	void *state;
	int index;            /* position in the chain */
	struct kvt_log log;   /* copy of the store's log sink (through own_log_gate if set) */
	const struct kvt_geometry *geometry; /* the store's geometry (points at geo) */
	uint64_t object_max;  /* bytes of a full chunk's object */
	struct kvt_geometry geo; /* a copy: the tier may outlive whoever opened it */
	struct kvt_config *own_cfg; /* opened by kvt__tier_open_bounded: its config copy */
	struct kvt_evict_gate *own_gate; /* and the gate its eviction hook goes through */
	struct kvt_log_gate *own_log_gate; /* and the one its log goes through (NULL: none) */
	_Atomic int busy; /* bounded synchronous calls running in the tier */
	/* Set by the engine before open: the tier evicted key by its own policy or for room
	 * (its KV events). May be called from any of the tier's threads. */
	void (*on_evict)(void *arg, int index, const struct kvt_key *key, uint64_t bytes);
	void *on_evict_arg;
};

/* A tier reports that it evicted key (no-op when nobody listens). */
static inline void kvt__tier_evicted(struct kvt_tier *t, const struct kvt_key *key,
				     uint64_t bytes)
{
	if (t && t->on_evict)
		t->on_evict(t->on_evict_arg, t->index, key, bytes);
}

/* The I/O counters the remote and shared tiers keep, updated from their threads. */
struct kvt_io_counters {
	_Atomic uint64_t hits, misses, reads, read_bytes, writes, write_bytes, errors, removes;
	_Atomic uint64_t checksum_failures; /* objects the engine found bad (drop_corrupt calls) */
};

static inline void kvt__io_counters_read(struct kvt_io_counters *c, struct kvt_tier_stats *out)
{
	out->hits = c->hits;
	out->misses = c->misses;
	out->reads = c->reads;
	out->read_bytes = c->read_bytes;
	out->writes = c->writes;
	out->write_bytes = c->write_bytes;
	out->errors = c->errors;
	out->removes = c->removes;
	out->checksum_failures = c->checksum_failures;
}

/* Backend table (src/tier.c). */
const struct kvt_tier_ops *kvt__tier_find(const char *name);
/* Space-separated names of the compiled-in tiers. */
const char *kvt__tier_names(void);

/* Create/destroy a tier instance by name: allocates state, calls open. */
int kvt__tier_open(const char *name, const struct kvt_config *cfg, const struct kvt_log *log,
		   const struct kvt_geometry *g, int index, struct kvt_tier **out);
/* The same, with the eviction hook (struct kvt_tier's on_evict) in place before open. */
int kvt__tier_open_hooked(const char *name, const struct kvt_config *cfg,
			  const struct kvt_log *log, const struct kvt_geometry *g, int index,
			  void (*on_evict)(void *, int, const struct kvt_key *, uint64_t),
			  void *on_evict_arg, struct kvt_tier **out);
void kvt__tier_close(struct kvt_tier *t);
/* Drop the tier's reference to its eviction gate (kvt__tier_close does; tier_bounded.c). */
void kvt__evict_gate_put(struct kvt_evict_gate *g);
/* The same for its log gate. */
void kvt__log_gate_put(struct kvt_log_gate *g);

/* The synchronous calls with a time limit (src/tier_bounded.c): on a hung device they
 * return -ETIMEDOUT after ms and leave the call running on a helper thread; whatever it
 * still uses is released when it returns. open: as kvt__tier_open_hooked (a tier that
 * opens after its bound is closed at once; an eviction it reports while recovering in that
 * window still reaches on_evict_arg, which must therefore outlive it). close: 0 closed;
 * -ETIMEDOUT: left closing (it frees itself when the close returns); -EBUSY: a call left
 * running in it, so it was not closed (still allocated, the caller's to keep). Either way
 * the caller must free nothing the tier's late callbacks may touch, except the log's
 * argument: once an open or close returns, a tier it left running logs no more (its log
 * gate, tier_bounded.c). scan / scan_anomalies: the listing is collected on the helper
 * thread, then fn runs on the caller's thread; -EOPNOTSUPP when the tier cannot list. */
int kvt__tier_open_bounded(const char *name, const struct kvt_config *cfg,
			   const struct kvt_log *log, const struct kvt_geometry *g, int index,
			   void (*on_evict)(void *, int, const struct kvt_key *, uint64_t),
			   void *on_evict_arg, uint64_t ms, struct kvt_tier **out);
int kvt__tier_close_bounded(struct kvt_tier *t, uint64_t ms);
/* A remote tier's bound on a whole listing (its scan), in ns: n times its own timeout, or
 * the caller's bound, store.sync_timeout_ms, where that is longer - so that a user who
 * raises the caller's bound to list a large store is not cut short by the tier's. Past
 * the caller's bound a listing left running keeps the tier busy and its close waiting, so
 * it must end by itself. */
uint64_t kvt__tier_list_ns(const struct kvt_config *cfg, uint64_t timeout_ns, unsigned n);
int kvt__tier_scan_bounded(struct kvt_tier *t, kvt_scan_fn fn, void *arg, uint64_t ms);
int kvt__tier_scan_anomalies_bounded(struct kvt_tier *t,
				     void (*fn)(void *arg, const char *path, const char *why),
				     void *arg, uint64_t ms);

#endif
