/*
 * kvtier.h - the public interface of kvtier, a tiered KV-cache store.
 *
 * This header is the reference manual. Every function returns >= 0 on success
 * (0 or a count) and -errno on failure; kvt_strerror() names the error:
 *
 *   -ENOENT     miss (the key is in no tier)
 *   -ENOSPC     a tier is full and nothing could be evicted
 *   -EAGAIN     back-pressure: too many operations in flight, retry after kvt_poll()
 *   -EBADMSG    an object failed its format or checksum checks (it is dropped, never served)
 *   -ETIMEDOUT  a tier missed its deadline (store.deadline_floor_ms + what the call should
 *               cost from the tier's measured latency and bandwidth, at most
 *               store.tier_timeout_ms); a get or lookup then goes on to the next tier
 *   -ECANCELED  the store is closing
 *   -EINVAL     a bad argument or configuration value
 *
 * Asynchronous contract (every call that takes a kvt_cb):
 *   - it returns 0, and its callback runs exactly once, later, on the thread that
 *     calls kvt_poll() - never inside the submitting call; or
 *   - it returns < 0, and its callback never runs.
 *   Buffers passed in are borrowed until the callback has returned.
 *
 * Threads: all calls are safe from any thread. Submitting calls never block on I/O;
 * the *_sync wrappers do, and do not need kvt_poll() (their completions never enter
 * the poll queue), so several threads may use them at once. kvt_store_close() may be
 * called while other threads are inside calls on the store: it waits for them, and
 * refuses (-ECANCELED) the calls that begin while it runs - see it for the one thing it
 * cannot catch, a call that begins after it has returned.
 *
 * Data: a chunk is chunk_tokens consecutive tokens (the last chunk of a prompt may be
 * partial). A caller's chunk buffer is *dense and layer-major*: for each layer, K then V,
 * each [n_tokens][kv_heads][head_dim] of the geometry's dtype (MLA: one latent
 * [n_tokens][head_dim] per layer, with kv_heads == 1). Its size is
 * kvt_payload_bytes(geometry, n_tokens). The stored object adds a 4 KiB header and
 * pads each layer to 4 KiB (docs/FORMAT.md).
 */
#ifndef KVTIER_H
#define KVTIER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KVT_BUILDING_LIBRARY) && defined(__GNUC__)
#define KVT_EXPORT __attribute__((visibility("default")))
#else
#define KVT_EXPORT
#endif

#define KVT_VERSION_STRING "0.1.0"

#define KVT_KEY_BYTES 32
#define KVT_NS_ID_BYTES 32
#define KVT_MAX_LAYERS 256
#define KVT_HEADER_BYTES 4096
#define KVT_ALIGN 4096
#define KVT_MAX_TIERS 8
#define KVT_TIER_NONE (-1)

/* ---------------------------------------------------------------- errors */

/* A static string for a -errno returned by any kvtier call. Never NULL. */
KVT_EXPORT const char *kvt_strerror(int err);

/* -------------------------------------------------------------- geometry */

enum kvt_dtype {
	KVT_DTYPE_BF16 = 1,
	KVT_DTYPE_FP16 = 2,
	KVT_DTYPE_FP8 = 3,
	KVT_DTYPE_FP32 = 4,
};

enum kvt_kind {
	KVT_KIND_KV = 1,  /* K and V per layer */
	KVT_KIND_MLA = 2, /* one compressed latent per layer; kv_heads must be 1 */
};

/* The shape of one model's KV cache, before tensor parallelism. */
struct kvt_geometry {
	uint32_t layers;       /* 1 .. KVT_MAX_LAYERS */
	uint32_t kv_heads;     /* all KV heads of the model (MLA: 1) */
	uint32_t head_dim;     /* elements per head (MLA: the latent dimension) */
	uint32_t chunk_tokens; /* tokens per chunk, 1 .. 65536 */
	uint8_t dtype;         /* enum kvt_dtype */
	uint8_t kind;          /* enum kvt_kind */
};

/* 0 if the geometry is usable; -EINVAL otherwise (zero or out-of-range fields,
 * an object that would exceed 4 GiB, MLA with kv_heads != 1). */
KVT_EXPORT int kvt_geometry_check(const struct kvt_geometry *g);
/* Bytes per element of a dtype, 0 if unknown. */
KVT_EXPORT uint32_t kvt_dtype_bytes(uint8_t dtype);
/* Dense bytes of one layer for n_tokens (K+V, or the latent). */
KVT_EXPORT uint64_t kvt_layer_bytes(const struct kvt_geometry *g, uint32_t n_tokens);
/* Dense bytes of a whole chunk as callers hand it over: layers * layer bytes. */
KVT_EXPORT uint64_t kvt_payload_bytes(const struct kvt_geometry *g, uint32_t n_tokens);
/* Bytes of the stored object: header + each layer padded to KVT_ALIGN. */
KVT_EXPORT uint64_t kvt_object_bytes(const struct kvt_geometry *g, uint32_t n_tokens);
/* Byte offset of a layer's segment inside the stored object. */
KVT_EXPORT uint64_t kvt_layer_offset(const struct kvt_geometry *g, uint32_t n_tokens,
				     uint32_t layer);

/* ------------------------------------------------------------------ keys */

/* The content address of one chunk and everything before it. */
struct kvt_key {
	uint8_t bytes[KVT_KEY_BYTES];
};

/* A namespace: model identity + geometry + optional tenant salt. Chunks of different
 * namespaces never share keys. tenant may be NULL or "" for none. */
struct kvt_namespace {
	const char *model;
	const char *revision;
	const char *tenant;
	struct kvt_geometry geometry;
};

/* The canonical text form of a namespace (docs/FORMAT.md), NUL-terminated.
 * Returns its length, or -ENOSPC if it does not fit len, -EINVAL if invalid. */
KVT_EXPORT int kvt_namespace_text(const struct kvt_namespace *ns, char *buf, size_t len);
/* ns_id = SHA-256(canonical text). */
KVT_EXPORT int kvt_namespace_id(const struct kvt_namespace *ns, uint8_t ns_id[KVT_NS_ID_BYTES]);

/* key = SHA-256("kvtier-chunk-v1" || ns_id || prev || tokens as little-endian u32).
 * prev NULL means the first chunk (32 zero bytes). n_tokens may be 0..UINT32_MAX/4. */
KVT_EXPORT void kvt_key_next(const uint8_t ns_id[KVT_NS_ID_BYTES], const struct kvt_key *prev,
			     const uint32_t *tokens, size_t n_tokens, struct kvt_key *out);
/* Keys of every chunk of a prompt: ceil(n_tokens / chunk_tokens) keys, the last one over a
 * partial chunk. Writes at most max_keys; returns the number of chunks of the prompt
 * (which may exceed max_keys), or -EINVAL. */
KVT_EXPORT long kvt_keys_from_tokens(const uint8_t ns_id[KVT_NS_ID_BYTES], uint32_t chunk_tokens,
				     const uint32_t *tokens, size_t n_tokens, struct kvt_key *keys,
				     size_t max_keys);
/* 64 lowercase hex digits + NUL. */
KVT_EXPORT void kvt_key_to_hex(const struct kvt_key *key, char hex[2 * KVT_KEY_BYTES + 1]);
/* 0, or -EINVAL if hex is not exactly 64 hex digits. */
KVT_EXPORT int kvt_key_from_hex(const char *hex, struct kvt_key *key);

/* ---------------------------------------------------------- configuration */

struct kvt_config;

enum kvt_log_level { KVT_LOG_ERROR = 0, KVT_LOG_WARN = 1, KVT_LOG_INFO = 2, KVT_LOG_DEBUG = 3 };
/* The library never prints; it calls this (from any of its threads). */
typedef void (*kvt_log_fn)(void *arg, int level, const char *msg);

/* A configuration with every key at its default (docs/CONFIG.md). */
KVT_EXPORT int kvt_config_create(struct kvt_config **out);
KVT_EXPORT void kvt_config_destroy(struct kvt_config *cfg);
/* Set one key ("nvme.dirs", "dram.bytes", ...). -ENOENT unknown key, -EINVAL bad value;
 * err (may be NULL) receives a one-line reason. */
KVT_EXPORT int kvt_config_set(struct kvt_config *cfg, const char *key, const char *value,
			      char *err, size_t errlen);
/* The value of a key as text. -ENOENT unknown key, -ENOSPC buffer too small. */
KVT_EXPORT int kvt_config_get(const struct kvt_config *cfg, const char *key, char *buf,
			      size_t len);
/* Load an INI file: "[section]" then "name = value" sets "section.name". Stops at the first
 * error with -EINVAL (or -errno if unreadable) and a line-numbered reason in err. */
KVT_EXPORT int kvt_config_load_file(struct kvt_config *cfg, const char *path, char *err,
				    size_t errlen);
/* Apply KVTIER_<SECTION>_<NAME> environment variables (e.g. KVTIER_NVME_DIRS). */
KVT_EXPORT int kvt_config_apply_env(struct kvt_config *cfg, char *err, size_t errlen);
KVT_EXPORT void kvt_config_set_log(struct kvt_config *cfg, kvt_log_fn fn, void *arg, int level);
/* Iterate the documented keys: returns the i-th key's name/default/help, NULL past the end. */
KVT_EXPORT const char *kvt_config_key_info(unsigned i, const char **default_value,
					   const char **help);

/* ----------------------------------------------------------------- store */

struct kvt_store;

/* Open a store: the tier chain of cfg.store.tiers (default "dram,nvme"). The
 * configuration is copied; cfg may be destroyed afterwards. */
KVT_EXPORT int kvt_store_open(const struct kvt_config *cfg, struct kvt_store **out);
/* Close the store and free it:
 *  1. stop admitting: every call on s from then on - from any thread, from callbacks -
 *     returns -ECANCELED (the accessors below answer as they say);
 *  2. wait for the calls other threads are inside: a kvt_poll() waiting is woken and
 *     returns, a *_sync or kvt_rows call returns when its operations complete (within
 *     their deadlines), a completion callback a kvt_poll() is running must return;
 *  3. write dirty DRAM slots behind, wait for the operations and write-behind in flight
 *     - each tier call bounded by its deadline, so this takes at most a few
 *     store.tier_timeout_ms however the tiers behave - then close the tiers (what they
 *     still hold is cancelled) and free everything. Completions not yet polled are
 *     delivered (run on this thread) before it returns.
 * Calls running on other threads when close begins finish safely, and calls that begin
 * while it runs return -ECANCELED. A call that begins after close has returned is a use
 * after free that no library can catch: a thread that got -ECANCELED must not call on s
 * again, and threads that call in a loop (a kvt_poll() loop among them) must be stopped
 * with kvt_store_shutdown(), joined, and only then the store closed. A close from a completion callback (inside
 * kvt_poll() on that thread) cannot wait for the kvt_poll() running it: it refuses calls
 * at once and returns, and that kvt_poll() finishes the close as it returns - its caller
 * must not use s afterwards. A close from a callback that a close is running does nothing
 * more. Never from a kvt_event_fn, never twice otherwise. Device operations on s
 * (kvt_device_store/load) go on after their call returned: close waits for them in its
 * step 2 (a copy waits for its dependency first: an event signalled only after close
 * returns would hold it forever) and delivers their callbacks. */
KVT_EXPORT void kvt_store_close(struct kvt_store *s);
/* The first half of kvt_store_close() for a store that several threads use: every call on
 * s from then on returns -ECANCELED and each kvt_poll() waiting is woken (it returns), so
 * threads that loop on calls see -ECANCELED and stop. kvt_poll() still runs the
 * completions already queued (without waiting for more) and returns -ECANCELED when there
 * are none, so a thread can collect its own before it exits; the accessors still answer.
 * It neither waits nor frees: s stays valid, refusing calls, until kvt_store_close(),
 * which does the rest (and delivers the completions of operations still in flight).
 * Idempotent; from any thread or callback. */
KVT_EXPORT void kvt_store_shutdown(struct kvt_store *s);
/* These answer while the store is closing; what they return stays valid until
 * kvt_store_close() returns. A store of a kvtierd (store.daemon) answers NULL, -ECANCELED
 * and "none" once kvt_store_close() has begun (its answers go with the connection). */
KVT_EXPORT const struct kvt_geometry *kvt_store_geometry(const struct kvt_store *s);
KVT_EXPORT const uint8_t *kvt_store_ns_id(const struct kvt_store *s);
/* Tiers in chain order; names are "dram", "nvme", ... */
KVT_EXPORT int kvt_store_tier_count(const struct kvt_store *s);
KVT_EXPORT const char *kvt_store_tier_name(const struct kvt_store *s, int tier);

/* An eventfd: readable while completions wait for kvt_poll(). Owned by the store (open
 * until kvt_store_close() returns). kvt_store_shutdown() and kvt_store_close() write it
 * so that a thread waiting on it comes back and sees kvt_poll() answer -ECANCELED. */
KVT_EXPORT int kvt_store_fd(const struct kvt_store *s);
/* Run waiting completion callbacks on this thread; waits up to timeout_ms (-1: forever,
 * 0: not at all) for the first one. Returns how many ran. Once the store is closing it
 * does not wait (a poll waiting then is woken): it runs what is queued and returns how
 * many, or -ECANCELED when none was; -ECANCELED at once once kvt_store_close() has begun,
 * except in a completion callback of s run on this thread; and -ECANCELED when a callback
 * it ran closed the store (s is then freed, unless this kvt_poll itself runs inside a
 * callback of s: then the outermost one frees it). It runs at most as many completions as
 * were queued when it began, taking one at a time, so a kvt_poll in a callback runs the
 * completions still queued, a sibling queued with its own included. */
KVT_EXPORT int kvt_poll(struct kvt_store *s, int timeout_ms);

struct kvt_result {
	int status;        /* >= 0 success (operation-specific count), < 0 -errno */
	int tier;          /* get/prefetch: the tier the bytes came from; else KVT_TIER_NONE */
	uint32_t n_tokens; /* get: tokens in the chunk */
	uint64_t bytes;    /* bytes delivered (get) or accepted (put) */
	int cause;         /* get that missed (-ENOENT): why no tier served it - 0 absent from
			    * every tier asked, -EBADMSG a copy was corrupt (dropped), -ETIMEDOUT a
			    * tier missed its deadline, -EAGAIN a tier was skipped (its circuit is
			    * open after repeated failures), another -errno a tier failed; the
			    * first such cause on the way; on a client of kvtierd the daemon's, or
			    * the transport's error when it could not be reached (docs/DAEMON.md).
			    * lookup whose prefix is shorter than n: the same for the tiers asked
			    * (-ETIMEDOUT, -EAGAIN, a tier's -errno, the transport's), 0 when every
			    * tier answered, so the key after the prefix is known absent.
			    * 0 otherwise. */
};
typedef void (*kvt_cb)(void *arg, const struct kvt_result *res);

/* Store one chunk from buf (kvt_payload_bytes(geometry, n_tokens) bytes, dense layer-major).
 * parent is the key of the chunk before it in its prompt (NULL for the first chunk or if
 * unknown): DRAM evicts a suffix before its prefix. buf must stay unchanged until the
 * callback runs; then the caller may reuse it. The bytes are copied into a DRAM slot, and
 * deeper tiers are written behind according to the write policy; without a DRAM tier the
 * put completes when the deeper tiers have the chunk, and a chunk from a buffer on a 4 KiB
 * boundary (an object under 512 KiB) or on a 2 MiB boundary (a larger one) is written from
 * buf itself (store.zero_copy_puts). status 0; -EINVAL bad
 * length/n_tokens; -ENOSPC no slot; without a DRAM tier, -EAGAIN when an earlier write of
 * the same key is still out (a zero-copy put of it in flight, or one past its deadline that
 * the tier has not answered): retry later. */
KVT_EXPORT int kvt_put(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		       uint32_t n_tokens, const void *buf, size_t len, kvt_cb cb, void *arg);

/* Longest contiguous prefix of keys[0..n) present in some tier. tiers[i] (caller-owned,
 * n entries, may be NULL) receives the fastest tier holding key i for i < status, and
 * KVT_TIER_NONE after. status = length of the prefix. Tiers that fail count as misses;
 * kvt_result.cause says whether one did. */
KVT_EXPORT int kvt_lookup(struct kvt_store *s, const struct kvt_key *keys, size_t n, int8_t *tiers,
			  kvt_cb cb, void *arg);

/* Read layers [layer_begin, layer_end) of one chunk into buf (dense, layer-major;
 * layer_end 0 means all layers). len must hold those layers of the stored chunk
 * (result.bytes, result.n_tokens tell its size); if it does not, status is -EINVAL. A hit in a deeper
 * tier is promoted into DRAM when the store is configured to (store.promote). Checksums are
 * verified before a byte is copied out. status 0; -ENOENT miss; -EINVAL bad range. */
KVT_EXPORT int kvt_get(struct kvt_store *s, const struct kvt_key *key, uint32_t layer_begin,
		       uint32_t layer_end, void *buf, size_t len, kvt_cb cb, void *arg);

/* kvt_get of a chunk whose parent (the chunk before it in its prompt, as kvt_put's) the
 * caller knows: a hit in a deeper tier promoted into DRAM is linked there as the parent's
 * child, as a put is, so DRAM evicts the chain from its end. kvt_get's promotion has no
 * parent: restored chunk by chunk with it, a chain's first chunk could go first and leave
 * the rest of it in DRAM unreachable by a lookup. parent NULL: kvt_get. */
KVT_EXPORT int kvt_get_linked(struct kvt_store *s, const struct kvt_key *key,
			      const struct kvt_key *parent, uint32_t layer_begin,
			      uint32_t layer_end, void *buf, size_t len, kvt_cb cb, void *arg);

/* Stage chunks into DRAM from deeper tiers, stopping at the first miss. A deadline
 * (CLOCK_MONOTONIC ns; 0 = none) drops the part not started by then. status = number of
 * chunks resident in DRAM when it answers (counting those already there; it holds them
 * until then, at most three quarters of DRAM: a longer chain stages its head and keeps what
 * was there). */
KVT_EXPORT int kvt_prefetch(struct kvt_store *s, const struct kvt_key *keys, size_t n,
			    uint64_t deadline_ns, kvt_cb cb, void *arg);

/* Remove a chunk from every tier, after any write-behind of it still in flight (a removed
 * key does not reappear in a deeper tier, even from a write that lands after its deadline).
 * A put of the key issued after the remove wins over it. status = number of tiers it was
 * removed from; a tier that misses its deadline is not counted. The key leaves DRAM before
 * the call returns; from then on, until every deeper tier has answered the remove (a late
 * answer included), a get, lookup or prefetch of the key issued after it misses whatever a
 * deeper tier still holds of it, and nothing promotes it back into DRAM - unless a put of
 * the key came after the remove. (A tier that failed the remove, or that the remove skipped
 * as unwell, may still hold and serve the key afterwards; status does not count it.) The
 * costs of that order: a write-behind of the key put after the remove waits for the
 * remove's call to a tier (at most that call's deadline; past it, the write skips the tier
 * until the late answer); through kvtierd, a *_sync call (and a device load or store) waits
 * until the removes submitted before it have been answered by the daemon, and flush,
 * remove and clear until everything submitted before them has (-ETIMEDOUT only when no
 * request was answered for store.daemon_timeout_ms). */
KVT_EXPORT int kvt_remove(struct kvt_store *s, const struct kvt_key *key, kvt_cb cb, void *arg);

/* Make everything submitted before it durable in every tier: dirty DRAM slots are written
 * behind (chunks whose earlier write-behind reached no deeper tier included), every
 * write-behind submitted before it finishes, then each tier's durability op runs, each
 * under its deadline. status 0; or < 0 (-ETIMEDOUT: a deadline was missed, -EIO: a tier
 * failed or was skipped as unwell, or chunks that no deeper tier took have been evicted
 * from DRAM since the last flush that had answered reporting such a loss when this one
 * was called - flushes called at once each report it: kvt_stats.evicted_unsaved) with
 * res.tier naming the tier that could not. */
KVT_EXPORT int kvt_flush(struct kvt_store *s, kvt_cb cb, void *arg);

struct kvt_tier_stats {
	char name[16];
	uint64_t objects;           /* resident objects (where the tier knows) */
	uint64_t bytes;             /* resident bytes */
	uint64_t capacity_bytes;    /* 0: unbounded or unknown */
	uint64_t hits;              /* gets served from this tier */
	uint64_t misses;
	uint64_t reads, read_bytes; /* I/O the tier performed */
	uint64_t writes, write_bytes;
	uint64_t evictions;
	uint64_t checksum_failures; /* objects rejected with -EBADMSG */
	uint64_t errors;            /* I/O errors, timeouts */
	uint64_t writes_skipped;    /* refused by admission, the write budget or ENOSPC */
	uint64_t removes;
	uint64_t deadline_misses;     /* calls the engine gave up on at their deadline */
	uint64_t write_budget_bytes;  /* the tier's write budget per rolling day (0: none) */
	uint64_t write_budget_used_bytes; /* bytes charged to it over the last 24 h */
	uint64_t reinsert_bytes; /* rewritten by the tier itself to keep hot objects (NVMe log) */
	uint64_t pool_bytes;	     /* NVMe nvme.preallocate: free preallocated slots */
	uint64_t pool_pending_bytes; /* NVMe: slots and log segments still to lay out (0: the
				      * background layout is done) */
	/* calls to a local device past their first deadline that were given more time
	 * because the device kept answering others (queued, not stalled) */
	uint64_t deadline_extensions;
};

struct kvt_stats {
	uint32_t n_tiers;
	struct kvt_tier_stats tier[KVT_MAX_TIERS];
	uint64_t puts, gets, lookups, prefetches;
	uint64_t lookup_chunks, lookup_hit_chunks;
	uint64_t promotions; /* deeper-tier hits published in DRAM */
	uint64_t write_behind_pending;
	uint64_t dram_alloc_bytes; /* heap accounted by the library */
	/* promotions read whole but never published: a kvt_remove of the key came while they
	 * read (the gets that joined before it still got the bytes; nothing became resident) */
	uint64_t promotions_discarded;
	/* chunks evicted from DRAM after their write-behind had reached no deeper tier (each
	 * failed or missed its deadline): gone from the store; the next kvt_flush fails -EIO */
	uint64_t evicted_unsaved;
	/* per tier (as tier[]): bytes its calls past their deadline still hold (a put's copy, a
	 * get's buffer) until the tier answers them; the store refuses new calls to the tier
	 * (-EAGAIN) once they reach late_held_cap_bytes (docs/ARCHITECTURE.md). Appended after
	 * the fields above so that a reader of an older layout keeps its offsets. */
	uint64_t late_held_bytes[KVT_MAX_TIERS];
	uint64_t late_held_cap_bytes;
};

KVT_EXPORT int kvt_stats(struct kvt_store *s, struct kvt_stats *out);

/* sizeof(struct <struct_name>) for the public structures ("kvt_stats", "kvt_result", ...;
 * src/abi.c lists them), 0 for any other name: bindings that mirror a structure check
 * their copy against it when they load. */
KVT_EXPORT size_t kvt_abi_sizeof(const char *struct_name);

/* ------------------------------------------------------------ KV events */
/*
 * What the store holds, as it changes: a chunk stored in a tier, or removed from one
 * (evicted by the tier's policy, removed by kvt_remove, or dropped as corrupt). Routers
 * follow a node's cache with these (kvtierd publishes them over ZeroMQ, docs/DAEMON.md).
 *
 * key is the chunk's storage key - the name every tier holds it under, derived from the
 * store's namespace and the caller's key (kvt_storage_key) - because that is all a tier
 * knows when it evicts. Events of one tier come in the order its state changed (DRAM's
 * under its own lock); events of different tiers are not ordered with each other.
 *
 * Covered: DRAM (stored at publish - puts and promotions -, evicted, removed), every
 * deeper tier's writes (stored) and kvt_remove (removed) through the engine, corrupt
 * objects dropped, and the evictions of the nvme tier and of this store's fs sweeps. Not
 * covered: what other processes write into or sweep from a shared tier.
 */
enum kvt_event_type { KVT_EVENT_STORED = 1, KVT_EVENT_REMOVED = 2 };
enum kvt_event_reason {
	KVT_REASON_NONE = 0,    /* stored */
	KVT_REASON_REMOVED = 1, /* kvt_remove */
	KVT_REASON_EVICTED = 2, /* the tier's replacement policy or capacity */
	KVT_REASON_CORRUPT = 3, /* failed its checks when read, dropped */
};
struct kvt_event {
	uint32_t type;   /* enum kvt_event_type */
	uint32_t reason; /* enum kvt_event_reason */
	int tier;        /* chain position, as kvt_store_tier_name() names it */
	uint32_t n_tokens; /* stored from DRAM's slot: tokens in the chunk; else 0 (unknown) */
	uint64_t bytes;  /* object bytes (header included) where the tier knows them, else 0 */
	struct kvt_key key;
	uint8_t has_parent; /* DRAM stored events of chunks put with a parent */
	struct kvt_key parent; /* the parent's storage key */
};
/* Runs on a library thread, possibly with the store's internal locks held: copy what you
 * need and return at once; never call into the store from it. */
typedef void (*kvt_event_fn)(void *arg, const struct kvt_event *ev);
/* Install (fn non-NULL) or remove (NULL) the store's one event callback. Call it before
 * the store is used by other threads; events from before it are not replayed (replaced or
 * removed later, a library thread may still be calling the previous fn with its own arg).
 * -ENOTSUP on a client-mode store (store.daemon: the daemon publishes its store's events);
 * -ENOMEM without memory. */
KVT_EXPORT int kvt_store_set_events(struct kvt_store *s, kvt_event_fn fn, void *arg);
/* A bounded queue of events for a consumer that polls instead (an interpreter, whose
 * callback would wait for its own lock while the store's are held). Install it with
 * kvt_store_set_events(s, kvt_event_queue_push, q); free it only after kvt_store_close
 * (or after removing it and letting every library thread finish: the store does not wait
 * for a callback in progress). capacity: 1..2^24 events, else NULL (NULL too without
 * memory). When full an event is dropped and counted; drain copies out up to max of the
 * oldest, in order, and sets *lost (if non-NULL) to the events dropped since the last
 * drain: a consumer told lost > 0 must look at the store itself. */
struct kvt_event_queue;
KVT_EXPORT struct kvt_event_queue *kvt_event_queue_new(uint32_t capacity);
KVT_EXPORT void kvt_event_queue_push(void *q, const struct kvt_event *ev);
KVT_EXPORT uint32_t kvt_event_queue_drain(struct kvt_event_queue *q, struct kvt_event *out,
					  uint32_t max, uint64_t *lost);
KVT_EXPORT void kvt_event_queue_free(struct kvt_event_queue *q);
/* A bounded queue of log lines for the same kind of consumer: the library logs on its own
 * threads (the service thread answering a missed deadline, an I/O thread finding a corrupt
 * copy), and a log function that waits there (an interpreter's callback waiting for its
 * lock) delays what that thread does next. Install it with
 * kvt_config_set_log(cfg, kvt_log_queue_push, q, level) and free it only after every store
 * opened with cfg is closed. capacity: 1..65536 lines, else NULL (NULL too without memory or
 * an eventfd). kvt_log_queue_fd is readable while lines wait (poll it, then pop until 0).
 * pop takes the oldest line: 1 with *level and buf (cut to len, NUL-terminated) set, 0 when
 * none waits; *lost (if non-NULL) receives the lines dropped while the queue was full since
 * the last pop. */
struct kvt_log_queue;
KVT_EXPORT struct kvt_log_queue *kvt_log_queue_new(uint32_t capacity);
KVT_EXPORT void kvt_log_queue_push(void *q, int level, const char *msg);
KVT_EXPORT int kvt_log_queue_fd(const struct kvt_log_queue *q);
KVT_EXPORT int kvt_log_queue_pop(struct kvt_log_queue *q, int *level, char *buf, size_t len,
				 uint64_t *lost);
KVT_EXPORT void kvt_log_queue_free(struct kvt_log_queue *q);
/* The storage key of an engine key in a namespace (what events carry). */
KVT_EXPORT void kvt_storage_key(const uint8_t ns_id[KVT_NS_ID_BYTES], const struct kvt_key *key,
				struct kvt_key *out);

/* Blocking wrappers: submit, wait, return the status (and fill res if non-NULL). */
KVT_EXPORT int kvt_put_sync(struct kvt_store *s, const struct kvt_key *key,
			    const struct kvt_key *parent, uint32_t n_tokens, const void *buf,
			    size_t len);
KVT_EXPORT int kvt_lookup_sync(struct kvt_store *s, const struct kvt_key *keys, size_t n,
			       int8_t *tiers);
KVT_EXPORT int kvt_get_sync(struct kvt_store *s, const struct kvt_key *key, uint32_t layer_begin,
			    uint32_t layer_end, void *buf, size_t len, struct kvt_result *res);
/* With a deadline it returns by then: the chunks resident, or -ETIME if the prefetch was not
 * over (what it started goes on and lands in DRAM). */
KVT_EXPORT int kvt_prefetch_sync(struct kvt_store *s, const struct kvt_key *keys, size_t n,
				 uint64_t deadline_ns);
KVT_EXPORT int kvt_remove_sync(struct kvt_store *s, const struct kvt_key *key);
KVT_EXPORT int kvt_flush_sync(struct kvt_store *s);

/* Library version and the tiers compiled in, e.g. "0.1.0 tiers: dram nvme fs redis". */
KVT_EXPORT const char *kvt_version(void);

/* ------------------------------------------------- Device KV cache (GPU) */
/*
 * Moving KV between an engine's paged GPU KV cache and canonical chunk objects
 * (docs/DEVICE.md). An engine registers its cache once per TP rank with
 * kvt_device_open(); each gather (device blocks -> object) or scatter (object -> device
 * blocks) is one asynchronous operation, a struct kvt_device_op.
 *
 * Device tensor layouts, per layer (layer_base[l] points at element 0; heads = h1 - h0,
 * the heads this rank holds; dense, C order):
 *   KVT_LAYOUT_FLASH_ATTN  [2][num_blocks][block_size][heads][head_dim]   (K plane, V plane)
 *   KVT_LAYOUT_FLASHINFER  [num_blocks][2][block_size][heads][head_dim]
 *   KVT_LAYOUT_MLA         [num_blocks][block_size][head_dim]             (latent; kind MLA)
 * Token t of a chunk lives in block block_ids[t / block_size], row t % block_size.
 *
 * Object layout (the canonical chunk, format v1): layer l at
 * kvt_layer_offset(geometry, n_tokens, l); inside it K then V, each
 * [n_tokens][kv_heads][head_dim] over ALL heads of the model. A rank holding heads
 * [h0, h1) reads and writes only that strided slice, so objects are independent of the
 * writer's tensor parallelism: TP=2 writers, TP=1 or TP=4 readers.
 *
 * The dependency rule: a copy never starts before its dependency is complete. For a
 * gather, pass the event the engine recorded after the compute that writes the blocks;
 * for a scatter, one recorded after the last reads of the blocks being overwritten.
 *
 * Completion: operations of one direction (gathers, scatters) run in submission order on
 * one copy queue (a CUDA stream); each layer completes in order, observable with
 * kvt_device_op_wait_layer(). Handles are owned by the caller until kvt_device_op_free().
 */

enum kvt_device_layout {
	KVT_LAYOUT_FLASH_ATTN = 1, /* vLLM FlashAttention: [2][blocks][block_size][heads][dim] */
	KVT_LAYOUT_FLASHINFER = 2, /* FlashInfer: [blocks][2][block_size][heads][dim] */
	KVT_LAYOUT_MLA = 3,        /* MLA latent: [blocks][block_size][dim] */
};

/* An engine's KV cache, as registered by one TP rank. Copied by kvt_device_open except
 * the memory layer_base points to, which must stay valid until kvt_device_close. */
struct kvt_device_desc {
	uint32_t size;                 /* sizeof(struct kvt_device_desc) */
	struct kvt_geometry geometry;  /* the model's, before TP; must equal the store's */
	uint32_t layout;               /* enum kvt_device_layout (MLA iff geometry.kind MLA) */
	uint32_t block_size;           /* tokens per block; chunk_tokens % block_size == 0 */
	uint32_t num_blocks;           /* blocks in each layer's tensor */
	uint32_t head_begin, head_end; /* heads [h0, h1) this rank holds; {0, kv_heads} = all */
	int cuda_device;               /* CUDA device ordinal of the tensors (cuda backend) */
	void *const *layer_base;       /* geometry.layers device pointers (emu: host memory) */
};

/* A dependency a copy waits for (NULL or kind NONE: none). */
enum kvt_device_dep_kind {
	KVT_DEP_NONE = 0,
	KVT_DEP_CUDA_EVENT = 1,  /* handle is a cudaEvent_t: its record as of the call */
	KVT_DEP_CUDA_STREAM = 2, /* handle is a cudaStream_t: the work queued on it before the
				  * call (cudaStreamPerThread: the calling thread's) */
	KVT_DEP_EMU_EVENT = 3,   /* handle is a struct kvt_emu_event * (emu backend) */
};
struct kvt_device_dep {
	int kind;
	void *handle; /* must stay valid until the operation has completed */
};

struct kvt_device;
struct kvt_device_op;

/* Register an engine's KV cache. backend: "auto" (cuda if a GPU is visible, else emu),
 * "emu" or "cuda"; NULL takes device.backend from cfg. cfg (NULL: defaults) also gives
 * device.emu_gbps and the log callback. -EINVAL bad descriptor, -ENODEV cuda requested but
 * not built in or no GPU, -ENOMEM. */
KVT_EXPORT int kvt_device_open(const struct kvt_config *cfg, const char *backend,
			       const struct kvt_device_desc *desc, struct kvt_device **out);
/* Waits for every operation of this device, then frees it. Handles not yet freed with
 * kvt_device_op_free stay valid (complete) until they are. */
KVT_EXPORT void kvt_device_close(struct kvt_device *dev);
/* "emu" or "cuda". */
KVT_EXPORT const char *kvt_device_backend(const struct kvt_device *dev);
/* Make host memory usable for fast asynchronous copies (cuda: cudaHostRegister; emu: a
 * no-op). Buffers handed to gather/scatter should be registered (or come from a registered
 * store's DRAM pool); unregistered memory still works, slower. */
KVT_EXPORT int kvt_device_host_register(struct kvt_device *dev, void *ptr, size_t len);
KVT_EXPORT int kvt_device_host_unregister(struct kvt_device *dev, void *ptr);

/* Buffer level, without a store. obj is an object-layout buffer of at least
 * kvt_object_bytes(geometry, n_tokens) bytes (its header is neither read nor written);
 * block_ids[0..n_blocks) with n_blocks == ceil(n_tokens / block_size), each < num_blocks;
 * 1 <= n_tokens <= chunk_tokens. Gather writes this rank's heads of every layer into obj;
 * scatter reads them from obj into the blocks (rows past n_tokens in the last block are
 * not touched). *op receives the handle. obj and block_ids are borrowed until the op has
 * completed (block_ids: only until the call returns). 0, or -EINVAL / -ENOMEM (no op). */
KVT_EXPORT int kvt_device_gather(struct kvt_device *dev, const uint32_t *block_ids,
				 uint32_t n_blocks, uint32_t n_tokens, void *obj, size_t obj_len,
				 const struct kvt_device_dep *dep, struct kvt_device_op **op);
KVT_EXPORT int kvt_device_scatter(struct kvt_device *dev, const void *obj, size_t obj_len,
				  uint32_t n_tokens, const uint32_t *block_ids, uint32_t n_blocks,
				  const struct kvt_device_dep *dep, struct kvt_device_op **op);

/* Wait until layer is in place (scatter) / copied (gather): 0, the op's error if it
 * failed, -ETIMEDOUT after timeout_ms (-1: forever; timeouts use the monotonic clock),
 * -EINVAL bad layer. */
KVT_EXPORT int kvt_device_op_wait_layer(struct kvt_device_op *op, uint32_t layer,
					int timeout_ms);
/* Wait for the whole operation: its status (>= 0 success), or -ETIMEDOUT. */
KVT_EXPORT int kvt_device_op_wait(struct kvt_device_op *op, int timeout_ms);
/* Layers completed so far (0 .. layers), without waiting. */
KVT_EXPORT uint32_t kvt_device_op_layers_done(const struct kvt_device_op *op);
/* Give the handle back. An op still in flight completes on its own afterwards. */
KVT_EXPORT void kvt_device_op_free(struct kvt_device_op *op);

/* Store level. Gather this rank's heads of the chunk in block_ids into a DRAM slot of s
 * and publish the object once ranks covering all heads have written theirs (ranks of one
 * process sharing s, or ranks of several processes whose stores are clients of one kvtierd;
 * see docs/DEVICE.md). cb runs through kvt_poll() once this rank's
 * copy is done: the engine may free or reuse its blocks. status = heads of the object
 * still missing (0: published, or already resident); < 0 on failure (-ENOSPC no slot; the
 * rank that completes the object gets the publish's error, e.g. encryption failing).
 * block_ids and n_blocks as for kvt_device_gather (-EINVAL). An op with nothing to copy
 * (resident already, or other ranks write all of this rank's heads) completes at once
 * with every layer done.
 * -EAGAIN: a deeper tier already has as many writes queued as its deadline allows (the
 * bound kvt_put applies); nothing was copied, retry after kvt_poll(). A chunk another
 * rank has started is never refused. Closing s waits for this copy (cb then runs from
 * the close) and cancels the objects of s other ranks have yet to complete.
 * The geometry of dev and s must be equal (-EINVAL). op may be NULL (no handle wanted). */
KVT_EXPORT int kvt_device_store(struct kvt_device *dev, struct kvt_store *s,
				const struct kvt_key *key, const struct kvt_key *parent,
				uint32_t n_tokens, const uint32_t *block_ids, uint32_t n_blocks,
				const struct kvt_device_dep *dep, kvt_cb cb, void *arg,
				struct kvt_device_op **op);
/* Load a chunk from s (promoting it from a deeper tier if needed) and scatter this rank's
 * heads into block_ids layer by layer; wait for layers through *op (may be NULL). cb runs
 * through kvt_poll() when every layer is in place (res.n_tokens, res.tier, res.bytes =
 * bytes this rank copied). -ENOENT miss; -EINVAL if the chunk has more tokens than the
 * blocks hold (the op then fails). */
KVT_EXPORT int kvt_device_load(struct kvt_device *dev, struct kvt_store *s,
			       const struct kvt_key *key, const uint32_t *block_ids,
			       uint32_t n_blocks, const struct kvt_device_dep *dep, kvt_cb cb,
			       void *arg, struct kvt_device_op **op);

/* An emulated engine event for the emu backend, modelled on a CUDA event: created or reset
 * = work recorded and not yet complete, signal = that work complete. A copy that depends
 * on it waits for the record it had at the copy's call: not before the next
 * kvt_emu_event_signal() if it was unsignalled then, not at all if it was signalled (a
 * reset after the call does not hold the copy). */
struct kvt_emu_event;
KVT_EXPORT int kvt_emu_event_create(struct kvt_emu_event **out);
KVT_EXPORT void kvt_emu_event_signal(struct kvt_emu_event *ev);
KVT_EXPORT void kvt_emu_event_reset(struct kvt_emu_event *ev);
KVT_EXPORT void kvt_emu_event_destroy(struct kvt_emu_event *ev);
/* ------------------------------------------------------------ cost model */

/* Restore or recompute (docs/COST_MODEL.md). A cost model combines a model (KV bytes per
 * token, prefill FLOPs), a GPU (effective prefill throughput, host->GPU bandwidth) and a
 * profile per tier (latency, read/write bandwidth, measured by `kvtier calibrate`). It is
 * immutable after creation and safe to use from any thread. All times are in seconds. */
struct kvt_cost;

/* Build from a configuration: cost.model (a preset; empty: model.name if it names one),
 * cost.gpu, cost.mfu, cost.tp, the cost.gpu_tflops / cost.h2d_gbps overrides, and tier
 * profiles from cost.profile (defaults for tiers it does not list). Tier i of the cost
 * model is the i-th name of store.tiers: the same index kvt_lookup() returns for a store
 * opened from the same configuration. -EINVAL unknown preset or bad profile (logged). */
KVT_EXPORT int kvt_cost_create(const struct kvt_config *cfg, struct kvt_cost **out);
KVT_EXPORT void kvt_cost_destroy(struct kvt_cost *c);
KVT_EXPORT int kvt_cost_tier_count(const struct kvt_cost *c);
/* Name of tier i ("dram", "nvme", ...), NULL out of range. Valid while c lives. */
KVT_EXPORT const char *kvt_cost_tier_name(const struct kvt_cost *c, int tier);
/* Index of a tier by name, -ENOENT if the chain does not have it. */
KVT_EXPORT int kvt_cost_tier_index(const struct kvt_cost *c, const char *name);

/* Dense KV bytes of one token (all layers; K+V, or the MLA latent). */
KVT_EXPORT uint64_t kvt_cost_kv_bytes_per_token(const struct kvt_cost *c);
/* Prefill FLOPs of tokens [begin, end) with the KV of [0, begin) already present:
 * 2 * active_params * (end - begin) + layers * heads * (qk_dim + v_dim) *
 * (end * (end + 1) - begin * (begin + 1)). */
KVT_EXPORT double kvt_cost_prefill_flops(const struct kvt_cost *c, uint64_t begin, uint64_t end);
/* Time to recompute tokens [begin, end): FLOPs / effective throughput. */
KVT_EXPORT double kvt_cost_recompute_s(const struct kvt_cost *c, uint64_t begin, uint64_t end);
/* Time to restore the KV of tokens from one tier into GPU memory: latency + the tier read
 * and the host->GPU copy pipelined layer by layer. INFINITY for a bad tier index. */
KVT_EXPORT double kvt_cost_restore_s(const struct kvt_cost *c, int tier, uint64_t tokens);

/* What a scheduler does with a lookup result. */
struct kvt_cost_plan {
	uint32_t load_chunks;                /* leading chunks to restore; recompute the rest */
	uint64_t load_tokens;                /* tokens those chunks hold */
	double restore_s;                    /* restoring them (tiers read at once) */
	double recompute_s;                  /* prefill of the remaining tokens */
	double total_s;                      /* restore_s + recompute_s */
	double no_cache_s;                   /* prefill of the whole prompt */
	uint64_t tier_bytes[KVT_MAX_TIERS];  /* bytes to read from each tier */
};

/* Given the per-chunk tiers of a lookup hit (tiers[0..n_hit), as kvt_lookup() fills them),
 * chunks of chunk_tokens tokens and a prompt of prompt_tokens tokens (the last chunk may be
 * partial), choose how many leading chunks to load so that restore + recompute is least.
 * At least the last prompt token is always recomputed. Returns load_chunks or -EINVAL. */
KVT_EXPORT int kvt_cost_plan(const struct kvt_cost *c, const int8_t *tiers, size_t n_hit,
			     uint32_t chunk_tokens, uint64_t prompt_tokens,
			     struct kvt_cost_plan *out);
/* The shortest prefix (tokens, starting at position 0) whose restore from tier beats its
 * recompute; -ERANGE if none up to max_tokens, -EINVAL bad arguments. */
KVT_EXPORT long kvt_cost_breakeven_tokens(const struct kvt_cost *c, int tier,
					  uint64_t max_tokens);

#ifdef __cplusplus
}
#endif
#endif
