/*
 * engine_internal.h - the store's private types and the functions its files share
 * (src/engine*.c; docs/ARCHITECTURE.md tells how they fit together). Nothing here is API:
 * the public calls are in include/kvtier.h, the hooks for other library layers in
 * engine.h. Functions shared between the engine's files are named kvt__e_*.
 */
#ifndef KVT_ENGINE_INTERNAL_H
#define KVT_ENGINE_INTERNAL_H

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "config.h"
#include "cost.h"
#include "daemon_client.h"
#include "dram.h"
#include "engine.h"
#include "format.h"
#include "list.h"
#include "protect.h"
#include "sketch.h"
#include "store_key.h"
#include "tier.h"

#define BREAKER_FAILS 5
#define BREAKER_BASE_NS (500ull * 1000 * 1000)
#define BREAKER_MAX_NS (30ull * 1000 * 1000 * 1000)
#define FILL_BUCKETS 1024
#define KEYREC_BUCKETS 1024
#define BOUNCE_CACHE 256
#define VERIFY_THREADS 2
/* A deadline is store.deadline_floor_ms plus this many times what the call should cost
 * (latency + bytes queued ahead of it and its own bytes over bandwidth) plus 4 mean
 * deviations of past answers, at most store.tier_timeout_ms: room for ordinary jitter and
 * variance, not for a stall. */
#define DEADLINE_SLACK 4.0
/* Until a tier has answered this many calls its estimate is a guess: deadlines are the
 * ceiling (a slow start is not a stall). */
#define DEADLINE_WARMUP 8
/* Calls moving at most this many bytes (with what is queued ahead) measure latency;
 * larger ones measure bandwidth. */
#define DEADLINE_SMALL_BYTES (256u * 1024)

enum write_policy { WP_THROUGH = 0, WP_BACK = 1, WP_SELECTIVE = 2 };

struct link {
	struct kvt_tier *t; /* NULL for the DRAM position */
	char name[16];
	bool local; /* a local device (nvme): a missed deadline means slow, not unreachable */
	_Atomic uint32_t fails;         /* consecutive failures */
	_Atomic uint64_t open_until_ns; /* circuit open until then */
	_Atomic uint64_t cooldown_ns;
	_Atomic int probing;
	_Atomic uint64_t hits, misses, checksum_failures, errors, writes_skipped;
	/* writes the tier refused for room (ENOSPC/EDQUOT): a tier that counts its own
	 * refusals (nvme) already has these in its writes_skipped */
	_Atomic uint64_t writes_refused;
	struct kvt_admit *admit; /* deeper tiers: what is worth writing here (NULL: all) */
	_Atomic uint64_t admission_rejects;
	/* what a call should cost here (EWMA of answers, seeded from the cost model's tier
	 * profile) and what the tier has been given and not answered yet */
	_Atomic uint64_t lat_ns;
	_Atomic uint64_t bw_Bps[2]; /* [0] reads (and calls moving no object), [1] writes */
	_Atomic uint64_t dev_ns; /* mean deviation of answers from the estimate */
	_Atomic uint64_t samples;
	_Atomic uint64_t queued_bytes[2]; /* given to the tier, not answered: [0] reads, [1] writes */
	/* write bytes given to the tier whose calls are neither answered nor past their
	 * deadline: the backlog a new write would queue behind (kvt__e_wb_backlogged) */
	_Atomic uint64_t live_write_bytes;
	_Atomic uint32_t live_writes; /* their number: each holds a slot or buffer of obj_max */
	_Atomic uint64_t deadline_misses;
	/* bytes of calls past their deadline that the tier has not answered: engine memory
	 * (DRAM slots, bounce buffers) it may still write into or read from, held for as
	 * long as it hangs. At store->late_cap no read or write is given to it (link_late_full) */
	_Atomic uint64_t late_bytes;
	/* when the tier last answered a call of each kind ([0] reads and other calls, [1]
	 * writes), and how many overdue calls were given more time because it had */
	_Atomic uint64_t last_answer_ns[2];
	_Atomic uint64_t deadline_extensions;
};

struct completion {
	struct kvt_list node; /* in the queue for kvt_poll, or the spare list */
	kvt_cb cb;
	void *arg;
	struct kvt_result res;
};

/* An internal callback deferred to the service thread. */
struct work {
	struct kvt_list node;
	void (*fn)(void *arg);
	void *arg;
};

/* A whole-object read from the fastest deeper tier that has it, into buf (a DRAM slot or a
 * bounce buffer), verified there (header and every layer CRC). A tier that misses, fails or
 * serves a corrupt object (dropped from that tier, counted) is passed over for the next.
 * done() runs once, on a tier thread or the service thread, never in the submitting call:
 * rc 0 with the decoded header (cr->pos is the chain position that served it), or -ENOENT
 * when no tier could. */
struct chain_read {
	struct kvt_store *s;
	struct kvt_key key;
	void *buf;
	bool in_slot; /* buf is a reserved DRAM slot (a fill), else a bounce buffer */
	bool lost;    /* a late tier still owns buf: the slot went to its guard */
	bool in_submit; /* chain_read_start has not returned: done() must not run here */
	int pos;
	int cause; /* the first failure met that was not a plain absence (kvt_result.cause) */
	void (*done)(struct chain_read *cr, int rc, const struct kvt_header *h);
};

/* Every call into a deeper tier (read, exists, write, remove, flush) goes through a guard
 * with a deadline. The tier's callback argument is the guard, never the operation, so a
 * tier that answers after the engine gave up finds only the guard. At the deadline the
 * service thread completes the operation without the tier (expire) and hands the guard
 * what the tier may still touch (a buffer it writes into, a reserved or pinned slot, the
 * lookup's arrays, a write-behind job). Those leftovers are released by whoever drops the
 * guard's last reference - the late answer, or expire() itself if the answer came first -
 * never by one side while the other may still use them. */
enum { G_PENDING, G_DONE, G_EXPIRED };

struct guard {
	size_t heap_idx;   /* position in the store's deadline heap while armed and pending */
	uint64_t start;    /* submitted (CLOCK_MONOTONIC ns) */
	uint64_t deadline; /* 0 until armed; moved later while a local tier makes progress */
	uint64_t budget;   /* the deadline's first distance from start */
	uint64_t bytes;    /* bytes this call moves */
	uint64_t held;     /* engine memory the tier may touch until it answers (late_bytes) */
	uint64_t ahead[2]; /* bytes the tier held unanswered at submission: reads, writes */
	bool write;        /* a write: its bandwidth is the tier's write bandwidth */
	_Atomic int state;
	_Atomic int refs;
	struct kvt_store *s;
	struct link *l;
	const char *what; /* "read", "lookup", "write", "remove", "flush" */
	void *op;
	void (*resume)(void *op, int64_t rc); /* the tier answered in time */
	void (*expire)(struct guard *g);      /* the deadline passed: hand over, move on */
	/* left behind by expire() for the last reference to release */
	void *orphan_buf;    /* a bounce buffer */
	int32_t orphan_pin;  /* a pinned DRAM slot to unpin, -1 none */
	void *orphan_mem[2]; /* kvt__malloc'ed arrays */
	void (*orphan_fn)(struct guard *g); /* e.g. drop a write-behind job's reference */
	void *orphan_arg;
	int64_t late_rc; /* the late answer, for orphan_fn */
};

struct fill_waiter {
	struct fill_waiter *next;
	kvt_acquire_cb cb;
	void *arg;
	int *cause; /* NULL, or where a failed fill says why (chain_read.cause) */
	bool use;   /* reads the chunk now (a get, a device restore), not a prefetch's staging */
};

/* One in-flight promotion of a key into a DRAM slot, shared by concurrent acquirers. */
struct fill {
	struct chain_read cr; /* first: a fill is its chain read */
	struct fill *next;
	struct kvt_key key;
	struct kvt_store *s;
	struct kvt_slot_ref ref;
	struct fill_waiter *waiters;
	bool removed; /* a remove of the key came while it read: never published (fill_lock) */
};

/* One write-behind: a slot (or staging buffer) being written to the deeper tiers. Two
 * counts: legs (tiers not yet answered or expired, +1 while submitting) decide when the job
 * is complete - its put callback, flushes and removes waiting for it go on then - and refs
 * (+1 per tier still holding the bytes, +1 until kvt__e_complete) decide when the slot or buffer
 * is let go: a tier that missed its deadline may still be reading it. */
struct wb {
	struct kvt_list node; /* the outstanding list, in submission order */
	uint64_t seq;
	struct kvt_store *s;
	struct kvt_key key;
	struct kvt_slot_ref ref; /* ref.id < 0: staging buffer owned by the job */
	_Atomic int legs;
	_Atomic int refs;
	_Atomic int ok;
	_Atomic int first_err;
	_Atomic int failed_link; /* 1 + a link whose write failed or was skipped unwell; 0 */
	_Atomic uint32_t wrote;  /* links that took the write in time (bits) */
	/* links whose failure a flush must report (bits; wb_tier_failed, under wb_lock): a
	 * flush starting while the job is out takes them into its window */
	uint32_t flush_failed;
	struct keyrec *rec;   /* the key's order record (NULL: no memory for it) */
	uint32_t blocked;     /* links this job must not write (kvt__e_keyrec_blocked) */
	/* parked (kvt__e_wb_start) while a remove of its key is out on a tier, in time */
	struct wb *park_next; /* the key record's parked list */
	int end;              /* the chain position it writes up to (set at registration) */
	bool keep_dirty;      /* a tier was never tried (no memory): stay dirty */
	/* a hit's second offer of a clean slot (kvt__e_wb_reoffer): written only to these
	 * positions (bits), whose admission declined it before; 0 for every other job */
	uint8_t reoffer;
	_Atomic bool hold_dropped; /* no longer counted in the store's wb_holds */
	struct remove_op *after; /* removes of key waiting for this job */
	/* put completion when the put waits for the writes (no DRAM tier) */
	kvt_cb cb;
	void *arg;
	bool direct;
	/* zero-copy put (no DRAM tier, store.zero_copy_puts): ref.buf holds only the header,
	 * the payload is the caller's, written from where it is (tier write_split) */
	const void *tail;
	uint64_t tail_bytes;
	uint32_t obj_crc; /* and the whole object's CRC32C (kvt__object_crc) */
};

struct wb_leg {
	struct wb *w;
	struct link *l;
};

/* The order of puts and removes of one key while a write of it is out (engine_keyorder.c).
 * Under wb_lock. */
struct keyrec {
	struct keyrec *next; /* hash chain */
	struct kvt_key key;
	uint64_t last_put;    /* seq of the newest job of the key */
	uint64_t last_remove; /* seq of the newest remove of the key */
	/* jobs (until their bytes are let go), removes (until every deeper tier answered them,
	 * late answers included: removing), undos */
	uint32_t refs;
	uint32_t removing;    /* removes and late remove calls a deeper tier has not answered */
	uint32_t unordered;   /* removes letting DRAM go, not in the order yet (no seq) */
	uint32_t pending;     /* jobs not complete */
	uint32_t zc_pending;  /* zero-copy jobs not complete */
	uint32_t zc_late[KVT_MAX_TIERS]; /* zero-copy writes past their deadline, per link */
	/* writes of the key past their deadline, not answered yet: one may land at any time,
	 * and if a remove came after it, what lands is not to be served (kvt__e_keyrec_removing) */
	uint32_t late_writes;
	uint32_t undoing[KVT_MAX_TIERS]; /* late writes being removed again, per link */
	uint32_t rm_on[KVT_MAX_TIERS];   /* remove calls out within their deadline, per link */
	uint32_t rm_late[KVT_MAX_TIERS]; /* remove calls past their deadline, per link */
	/* links a job of the key's DRAM slot was to skip as blocked (the slot stays dirty):
	 * once a link is no longer blocked, its bit goes and the slot is written again */
	uint32_t redo;
	/* per link: the newest job of the key complete that wrote it in time (its seq; 0:
	 * none) - a failure of an older job there is repaired (flush_tiers) */
	uint64_t wrote[KVT_MAX_TIERS];
	struct wb *parked; /* jobs of the key waiting for rm_on to drain (kvt__e_wb_start) */
};

/* A write-behind's failure on one link in a flush's window, held with its key's record
 * (a reference) until the flush looks at it (flush_tiers). */
struct flush_fail {
	struct keyrec *rec;
	uint64_t seq; /* the job's */
	int link;
};

struct flush_waiter {
	struct kvt_list node; /* waiting for write-behind, or ready */
	struct kvt_store *s;
	/* complete once every job up to this one is (UINT64_MAX while the flush writes the
	 * dirty slots: its window is not closed yet) */
	uint64_t target;
	uint64_t from; /* write failures of jobs from this one on are this flush's */
	/* per link: the oldest job from `from` on whose write there failed (UINT64_MAX: none),
	 * under wb_lock. The oldest, not the newest: a job after the window failing first
	 * must not hide one inside it. */
	uint64_t first_fail[KVT_MAX_TIERS];
	/* failures of its window kept with their key's record instead (under wb_lock), so
	 * that one a newer job of the key has repaired does not fail the flush */
	struct flush_fail *fails;
	uint32_t n_fails, cap_fails;
	kvt_cb cb;
	void *arg;
	bool direct;
	_Atomic int remaining; /* tier flushes in flight, +1 while submitting */
	_Atomic int status;
	_Atomic int bad_tier;
	/* unsaved chunks evicted since the flush before (kvt__dram_evicted_unsaved), and the
	 * link whose failure last left one unsaved */
	uint64_t lost;
	int lost_link;
	/* the store's count of unsaved evictions this flush reports up to, taken as reported
	 * when it answers (a flush with the store's own count: kvt__e_do_flush); 0: none */
	uint64_t lost_upto;
	uint64_t nomem; /* dirty slots it had no memory to start a write of */
};

/* An installed event callback with its argument: published as one pointer, so a thread
 * never calls one callback with another's argument (engine_events.c). */
struct ev_sink {
	kvt_event_fn fn;
	void *arg;
	struct ev_sink *next; /* every sink installed, freed with the store */
};

struct kvt_store {
	struct kvt_client *client; /* client mode (store.daemon): every call goes there */
	struct ev_sink *_Atomic ev_sink;  /* KV events (engine_events.c); NULL: none */
	struct ev_sink *_Atomic ev_sinks; /* all ever installed: a thread may still use one */
	struct kvt_config *cfg;
	struct kvt_log log;
	struct kvt_geometry geo;
	uint8_t ns_id[KVT_NS_ID_BYTES];
	uint64_t obj_max;
	uint64_t max_object_bytes;
	struct kvt_protect *prot; /* MAC / encryption of objects (src/protect.h); NULL: off */

	struct kvt_dram *dram;
	int dram_pos; /* -1 if no DRAM tier */
	struct kvt_cost *cost; /* for admission's restore-vs-recompute check; may be NULL */
	int n_links;
	struct link links[KVT_MAX_TIERS];
	/* the link whose failure last left a DRAM slot unsaved (no deeper tier took it), and
	 * how many unsaved evictions flushes have reported */
	_Atomic int unsaved_link;
	_Atomic uint64_t flush_unsaved_seen;

	int write_policy;
	/* a put without a DRAM tier writes the caller's payload itself, no copy
	 * (store.zero_copy_puts; engine_ops.c says when) */
	bool zero_copy;
	_Atomic uint64_t zero_copy_puts; /* puts that did (kvt__store_zero_copy_puts) */
	uint32_t selective_hits;
	bool promote;
	bool promote_local;
	uint64_t max_inflight;
	_Atomic uint64_t inflight;
	_Atomic bool closing; /* kvt_store_shutdown/close has begun: no new operations */
	_Atomic bool teardown; /* kvt_store_close itself has begun: kvt_poll refused too */
	/* public calls running on the store (kvt__store_enter/leave): kvt_store_close waits
	 * for them before it drains and again before it frees the store (engine.c) */
	_Atomic uint64_t callers;
	/* device operations on the store (kvt_device_store/load, device_store.c) from their
	 * call until their completion is queued: they run on after the call returned, and
	 * kvt_store_close waits for them before it forgets their half-written objects */
	_Atomic uint64_t dev_ops;

	/* completion queue for kvt_poll; every admitted operation reserves one node of the
	 * free list, so queueing its completion never fails for lack of memory */
	pthread_mutex_t cq_lock;
	struct kvt_list cq;      /* completions waiting for kvt_poll */
	struct kvt_list cq_free; /* spare nodes */
	uint64_t cq_len; /* on cq */
	uint64_t cq_nfree, cq_reserved;
	int efd;

	/* deadlines of tier calls: a min-heap on guard->deadline */
	pthread_mutex_t guard_lock;
	struct guard **heap;
	size_t heap_n, heap_cap;
	size_t heap_resv; /* places held for guards made and not yet armed or cancelled */
	uint64_t deadline_floor_ns, deadline_ceiling_ns;
	/* what one deeper tier's unanswered calls may hold of the engine's memory: half the
	 * DRAM pool (without DRAM, 64 objects' bounce buffers), shared by the deeper tiers -
	 * link_late_full, and the write backlog (kvt__e_wb_backlogged) */
	uint64_t late_cap;
	uint64_t sync_timeout_ms; /* bound on tier open, close and listing (src/tier_bounded.c) */
	struct kvt_store *next_abandoned; /* closed with a stuck tier: left allocated (engine.c) */
	_Atomic uint64_t heap_gen; /* bumped when a new deadline becomes the earliest */

	/* service thread */
	pthread_mutex_t work_lock;
	pthread_cond_t work_cond; /* CLOCK_MONOTONIC */
	struct kvt_list work;
	bool stopping;
	pthread_t service;

	/* verify pool: CRC checks and copy-out of objects read from deeper tiers run here,
	 * not on the tier's I/O thread */
	pthread_mutex_t pool_lock;
	pthread_cond_t pool_cond;
	struct kvt_list pool_work;
	bool pool_stopping;
	int n_pool;
	pthread_t pool[VERIFY_THREADS];

	/* fills in flight */
	pthread_mutex_t fill_lock;
	struct fill *fills[FILL_BUCKETS];
	struct keyrec *keyrecs[KEYREC_BUCKETS]; /* under wb_lock */
	/* the sum of every record's removing and unordered, and of their late_writes: while
	 * both are 0, no read asks the records */
	_Atomic uint64_t removes_out;
	_Atomic uint64_t late_writes;

	/* write-behind */
	pthread_mutex_t wb_lock;
	/* the deeper tiers' admission state (src/sketch.h is not thread-safe; puts, lookups
	 * and write-behind update it from many threads) */
	pthread_mutex_t admit_lock;
	pthread_cond_t wb_cond;
	struct kvt_list wb; /* outstanding jobs, oldest first */
	uint64_t wb_seq;
	uint64_t wb_pending;
	/* write-behind jobs whose slot or buffer will come free soon: from submission until
	 * the tiers let go of the bytes, or until a tier misses its deadline (its late answer
	 * may never come). A job leaves wb_pending before the tiers let go of its bytes, so a
	 * put that finds every slot pinned asks this, not wb_pending (kvt__e_do_put). */
	_Atomic uint64_t wb_holds;
	struct kvt_list flushes;
	/* under wb_lock: kvt_store_close is about to close the tiers, so no late write is
	 * removed again, and no slot written again (kvt__e_wb_rewrite), from now on
	 * (tiers_closing), once the undo calls and rewrites being sent (undo_sending) are out
	 * (engine_wb.c) */
	bool tiers_closing;
	uint32_t undo_sending;


	/* object-sized aligned buffers for chains without DRAM, reused (no mmap per I/O);
	 * objects under 2 MiB: carved from huge-page regions (engine_read.c), kept to close */
	pthread_mutex_t bounce_lock;
	void *bounce[BOUNCE_CACHE];
	int n_bounce;
	void *bounce_carved;   /* free carved buffers, linked through their first word */
	void **bounce_regions; /* the regions carved (carve_region bytes), freed at close */
	uint32_t n_regions, cap_regions;

	_Atomic uint64_t puts, gets, lookups, prefetches, lookup_chunks, lookup_hit_chunks,
		promotions, promotions_discarded; /* published; overtaken by a remove */
};

struct remove_op {
	struct remove_op *next_after; /* first: a job's list of removes waiting for it */
	struct kvt_store *s;
	struct kvt_key key;
	uint64_t seq;        /* in the write-behind order (wb_seq) */
	struct keyrec *rec;  /* its key's record: held and counted (unordered, removing) till done */
	_Atomic int remaining;
	_Atomic int removed;
	kvt_cb cb;
	void *arg;
	bool direct;
};

/* engine.c: admission of operations */
void kvt__e_admission_record(struct kvt_store *s, const struct kvt_key *key);
int kvt__e_admit_inflight(struct kvt_store *s);
void kvt__e_unadmit(struct kvt_store *s);

/* engine_events.c: the KV events. tier is a chain position. */
/* The event pairs kvt_store_set_events installed, freed once no thread can use one. */
void kvt__e_events_free(struct kvt_store *s);
void kvt__e_event(struct kvt_store *s, uint32_t type, uint32_t reason, int tier,
		  const struct kvt_key *key, uint64_t bytes);
void kvt__e_dram_changed(void *arg, int change, const struct kvt_key *key,
			 const struct kvt_key *parent, uint32_t n_tokens, uint64_t object_bytes);
void kvt__e_tier_evicted(void *arg, int index, const struct kvt_key *key, uint64_t bytes);

/* engine_health.c */
void kvt__e_guard_arm(struct guard *g);
void kvt__e_guard_cancel(struct guard *g);
void kvt__e_guard_cb(void *arg, int64_t rc);
struct guard *kvt__e_guard_new(struct kvt_store *s, struct link *l, const char *what, uint64_t bytes, void *op, void (*resume)(void *, int64_t), void (*expire)(struct guard *));
uint64_t kvt__e_guards_expire(struct kvt_store *s, uint64_t *gen);
void kvt__e_link_result(struct kvt_store *s, struct link *l, int rc);
bool kvt__e_link_usable(struct link *l);
bool kvt__e_link_late_full(const struct kvt_store *s, struct link *l);
/* The caller was let through (it may have been the probe) but made no call after all. */
void kvt__e_link_unused(struct link *l);
bool kvt__e_wb_backlogged(struct kvt_store *s, uint64_t bytes);

/* engine.c: storage keys. The public calls take the engine's keys; everything below them -
 * DRAM and every tier - sees only storage keys, scoped by the store's namespace
 * (src/store_key.h). */
const struct kvt_key *kvt__e_skey(const struct kvt_store *s, const struct kvt_key *key,
				  struct kvt_key *out);
int kvt__e_skeys(const struct kvt_store *s, struct kvt_storage_keys *b, const struct kvt_key *keys,
		 size_t n);

/* engine_ops.c */
int kvt__e_do_lookup(struct kvt_store *s, const struct kvt_key *keys, size_t n, int8_t *tiers, kvt_cb cb, void *arg, bool direct);
/* A prefetch's lookup: under the prefetch's in-flight place, cb called as it ends. */
int kvt__e_do_lookup_inner(struct kvt_store *s, const struct kvt_key *keys, size_t n,
			   kvt_cb cb, void *arg);
int kvt__e_do_put(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent, uint32_t n_tokens, const void *buf, size_t len, kvt_cb cb, void *arg, bool direct);
int kvt__e_do_remove(struct kvt_store *s, const struct kvt_key *key, kvt_cb cb, void *arg, bool direct);
/* kvt__e_do_remove's first step: the op, its key marked as being removed (admitted under
 * store.max_inflight); NULL with *rc set. Then kvt__e_fill_removed, kvt__e_remove_start. */
struct remove_op *kvt__e_remove_mark(struct kvt_store *s, const struct kvt_key *key, kvt_cb cb,
				     void *arg, bool direct, int *rc);
void kvt__e_remove_start(struct remove_op *o);
/* Is a remove of key still out in a deeper tier (or a late write of it that the remove
 * followed), with no put of it since? Then what a deeper tier holds of it is on its way
 * out, and a read or lookup takes it for a miss. Takes
 * wb_lock (callers may hold fill_lock: fill_lock is taken before wb_lock, never after). */
bool kvt__e_remove_pending(struct kvt_store *s, const struct kvt_key *key);

/* engine_queue.c */
int kvt__e_poll(struct kvt_store *s, int timeout_ms); /* kvt_poll without the call gate */
void kvt__e_complete(struct kvt_store *s, kvt_cb cb, void *arg, bool direct, const struct kvt_result *res);
int kvt__e_cq_reserve(struct kvt_store *s);
void kvt__e_cq_unreserve(struct kvt_store *s);
int kvt__e_defer(struct kvt_store *s, void (*fn)(void *), void *arg);
int kvt__e_pool_defer(struct kvt_store *s, void (*fn)(void *), void *arg);
void *kvt__e_pool_main(void *arg);
void kvt__e_pool_stop(struct kvt_store *s);
void *kvt__e_service_main(void *arg);

/* engine_read.c */
void *kvt__e_bounce_get(struct kvt_store *s);
/* A remove of key is starting: mark the key's fills in flight so none publishes it. */
void kvt__e_fill_removed(struct kvt_store *s, const struct kvt_key *key);
void kvt__e_bounce_free_all(struct kvt_store *s); /* at close */
void kvt__e_bounce_put(struct kvt_store *s, void *b);
/* parent: see do_get (NULL: none known) */
int kvt__e_do_get(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent, uint32_t l0, uint32_t l1, void *buf, size_t len, kvt_cb cb, void *arg, bool direct);
/* A get of all layers whose verified object is handed to sink (on the thread that has it:
 * a pinned DRAM slot or a bounce buffer; layer l at obj + KVT_HEADER_BYTES + l * the
 * padded layer size) instead of being copied out; sink returns the bytes it took or a
 * -errno, which becomes the get's status. Stores with object protection (s->prot) refuse
 * it (-EINVAL): their layers must be decrypted into a buffer. */
typedef int64_t (*kvt__get_sink)(void *arg, const struct kvt_header *h, const void *obj);
int kvt__e_do_get_sink(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent, kvt__get_sink sink, void *sink_arg, kvt_cb cb, void *arg, bool direct);
/* A write's failure that says it was not applied (no room, too large, refused, unreachable):
 * a late one need not be removed again (engine_wb.c). */
bool kvt__e_write_refused(int rc);
int kvt__e_do_prefetch(struct kvt_store *s, const struct kvt_key *keys, size_t n, uint64_t deadline_ns, kvt_cb cb, void *arg, bool direct);

/* engine_keyorder.c: all under wb_lock */
struct keyrec *kvt__e_keyrec_find(struct kvt_store *s, const struct kvt_key *key);
struct keyrec *kvt__e_keyrec_get(struct kvt_store *s, const struct kvt_key *key);
void kvt__e_keyrec_put(struct kvt_store *s, struct keyrec *r);
uint32_t kvt__e_keyrec_blocked(const struct keyrec *r);
bool kvt__e_keyrec_removed_since(const struct keyrec *r, uint64_t seq);
bool kvt__e_keyrec_put_since(const struct keyrec *r, uint64_t seq);
bool kvt__e_keyrec_removing(const struct keyrec *r);
bool kvt__e_keyrec_rm_on(const struct keyrec *r);
void kvt__e_keyrec_rm_over(struct kvt_store *s, struct keyrec *r, int link, bool late);
bool kvt__e_keyrec_unblocked(struct keyrec *r, int link);
bool kvt__e_keyrec_any_removing(struct kvt_store *s);
void kvt__e_keyrec_free_all(struct kvt_store *s);

/* engine_wb.c */
/* Test hook (NULL: none): a job's completion calls it with the job once the job has
 * decided its DRAM slot's marks, before it lets flushes and removes go - a test runs a
 * newer job of the same slot there (integ.store_wb_newer_marks). */
extern void (*_Atomic kvt__test_wb_decided)(struct wb *w);
/* unsaved_seen: the caller's count of unsaved evictions already reported to it (NULL: the
 * store's own, for its one in-process user; kvtierd keeps one per connection). */
int kvt__e_do_flush(struct kvt_store *s, kvt_cb cb, void *arg, bool direct,
		    _Atomic uint64_t *unsaved_seen);
uint64_t kvt__e_wb_dirty_all(struct kvt_store *s);
void kvt__e_wb_submit(struct kvt_store *s, const struct kvt_key *key, const struct kvt_slot_ref *ref, int end, kvt_cb cb, void *arg, bool direct);
/* A DRAM hit's second offer of a chunk admission declined (engine_wb.c). */
void kvt__e_wb_reoffer(struct kvt_store *s, const struct kvt_key *key,
		       const struct kvt_slot_ref *hit);
struct wb *kvt__e_wb_register(struct kvt_store *s, const struct kvt_key *key, const struct kvt_slot_ref *ref, const void *tail, uint64_t tail_bytes, kvt_cb cb, void *arg, bool direct);
void kvt__e_wb_start(struct wb *w, int end);
bool kvt__e_wb_rewrite_claim(struct kvt_store *s, struct keyrec *rec, int link);
void kvt__e_wb_rewrite(struct kvt_store *s, const struct kvt_key *key);
void kvt__e_writeback_clean(struct kvt_store *s);

#endif
