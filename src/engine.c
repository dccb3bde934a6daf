/*
 * engine.c - the store: an ordered chain of tiers with a DRAM slot pool at its head, and
 * the orchestration of put / lookup / get / prefetch / remove / flush over it.
 *
 * Data flow (DESIGN.md, "host-centric"): a put is encoded once, straight from the caller's
 * buffer into a DRAM slot (copy + CRC in one pass); the put completes; deeper tiers are
 * then written *behind* from that slot (write-through: now; write-back: when DRAM needs the
 * slot; selective: after N hits), the slot pinned and marked dirty so it can be neither
 * evicted nor reused meanwhile. A get is served from DRAM when resident; otherwise the
 * object is read from the fastest deeper tier that has it straight into a fresh DRAM slot
 * (promotion), verified there, and then copied out - the bytes move device -> slot -> caller
 * and nowhere else. Concurrent misses on one key share one fill. Without a DRAM tier an
 * aligned bounce buffer stands in for the slot.
 *
 * Threads: submitting calls run on the caller's thread and never wait for I/O. Tier
 * callbacks run on tier threads; they continue the operation (verify, copy, publish) and
 * push the user's completion onto a queue that kvt_poll() drains, signalled by an eventfd.
 * The *_sync wrappers use "direct" operations whose callback signals a condition variable
 * instead. One small service thread runs internal callbacks that must not run inside the
 * submitting call. Locks (queue, fills, write-behind list, DRAM's own) are never held
 * across a tier call.
 *
 * Failure is a miss: a tier that errors is skipped for this operation; after
 * BREAKER_FAILS consecutive failures it is skipped altogether (circuit open) for a
 * cool-down that doubles up to BREAKER_MAX_NS, with one probe operation let through when
 * the cool-down ends. Corrupt objects are dropped from the tier that served them and the
 * next tier is tried.
 */
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
#include "dram.h"
#include "engine.h"
#include "format.h"
#include "sketch.h"
#include "tier.h"

#define BREAKER_FAILS 5
#define BREAKER_BASE_NS (500ull * 1000 * 1000)
#define BREAKER_MAX_NS (30ull * 1000 * 1000 * 1000)
#define FILL_BUCKETS 1024
#define SELECTIVE_SLOTS 65536
#define BOUNCE_CACHE 256
#define VERIFY_THREADS 2
/* A deadline is store.deadline_floor_ms plus this many times what the call should cost
 * (latency + bytes queued ahead of it and its own bytes over bandwidth), at most
 * store.tier_timeout_ms: room for ordinary jitter and variance, not for a stall. */
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
	struct kvt_admit *admit; /* deeper tiers: what is worth writing here (NULL: all) */
	_Atomic uint64_t admission_rejects;
	/* what a call should cost here (EWMA of answers, seeded from the cost model's tier
	 * profile) and what the tier has been given and not answered yet */
	_Atomic uint64_t lat_ns;
	_Atomic uint64_t bw_Bps;
	_Atomic uint64_t samples;
	_Atomic uint64_t queued_bytes;
	_Atomic uint64_t deadline_misses;
};

struct completion {
	struct completion *next;
	kvt_cb cb;
	void *arg;
	struct kvt_result res;
};

/* An internal callback deferred to the service thread. */
struct work {
	struct work *next;
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
	uint64_t deadline; /* 0 until armed */
	uint64_t bytes;    /* bytes this call moves */
	uint64_t ahead;    /* bytes the tier held unanswered when this call was submitted */
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
	int32_t orphan_slot; /* a reserved DRAM slot to abort, -1 none */
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
};

/* One in-flight promotion of a key into a DRAM slot, shared by concurrent acquirers. */
struct fill {
	struct chain_read cr; /* first: a fill is its chain read */
	struct fill *next;
	struct kvt_key key;
	struct kvt_store *s;
	struct kvt_slot_ref ref;
	struct fill_waiter *waiters;
};

/* One write-behind: a slot (or staging buffer) being written to the deeper tiers. Two
 * counts: legs (tiers not yet answered or expired, +1 while submitting) decide when the job
 * is complete - its put callback, flushes and removes waiting for it go on then - and refs
 * (+1 per tier still holding the bytes, +1 until complete) decide when the slot or buffer
 * is let go: a tier that missed its deadline may still be reading it. */
struct wb {
	struct wb *prev, *next; /* outstanding list, in submission order */
	uint64_t seq;
	struct kvt_store *s;
	struct kvt_key key;
	struct kvt_slot_ref ref; /* ref.id < 0: staging buffer owned by the job */
	_Atomic int legs;
	_Atomic int refs;
	_Atomic int ok;
	_Atomic int first_err;
	_Atomic bool removed; /* a kvt_remove of key came while this job was out */
	bool keep_dirty;      /* a tier was never tried (no memory): stay dirty for a retry */
	struct remove_op *after; /* removes of key waiting for this job */
	/* put completion when the put waits for the writes (no DRAM tier) */
	kvt_cb cb;
	void *arg;
	bool direct;
};

struct wb_leg {
	struct wb *w;
	struct link *l;
};

struct flush_waiter {
	struct flush_waiter *next;
	struct kvt_store *s;
	uint64_t target; /* complete once every job up to this one is */
	uint64_t from;   /* write failures of jobs from this one on are this flush's */
	kvt_cb cb;
	void *arg;
	bool direct;
	_Atomic int remaining; /* tier flushes in flight, +1 while submitting */
	_Atomic int status;
	_Atomic int bad_tier;
};

struct kvt_store {
	struct kvt_config *cfg;
	struct kvt_log log;
	struct kvt_geometry geo;
	uint8_t ns_id[KVT_NS_ID_BYTES];
	uint64_t obj_max;
	uint64_t max_object_bytes;

	struct kvt_dram *dram;
	int dram_pos; /* -1 if no DRAM tier */
	struct kvt_cost *cost; /* for admission's restore-vs-recompute check; may be NULL */
	int n_links;
	struct link links[KVT_MAX_TIERS];
	/* per link: the newest write-behind job whose write there failed or was skipped
	 * because the tier was unwell (flush reports it) */
	_Atomic uint64_t wb_fail_seq[KVT_MAX_TIERS];

	int write_policy;
	uint32_t selective_hits;
	bool promote;
	bool promote_local;
	uint64_t max_inflight;
	_Atomic uint64_t inflight;
	_Atomic bool closing; /* kvt_store_close has begun: no new operations */

	/* completion queue for kvt_poll; every admitted operation reserves one node of the
	 * free list, so queueing its completion never fails for lack of memory */
	pthread_mutex_t cq_lock;
	struct completion *cq_head, *cq_tail;
	struct completion *cq_free;
	uint64_t cq_nfree, cq_reserved;
	int efd;

	/* deadlines of tier calls: a min-heap on guard->deadline */
	pthread_mutex_t guard_lock;
	struct guard **heap;
	size_t heap_n, heap_cap;
	uint64_t deadline_floor_ns, deadline_ceiling_ns;
	_Atomic uint64_t heap_gen; /* bumped when a new deadline becomes the earliest */

	/* service thread */
	pthread_mutex_t work_lock;
	pthread_cond_t work_cond; /* CLOCK_MONOTONIC */
	struct work *work_head, *work_tail;
	bool stopping;
	pthread_t service;

	/* verify pool: CRC checks and copy-out of objects read from deeper tiers run here,
	 * not on the tier's I/O thread */
	pthread_mutex_t pool_lock;
	pthread_cond_t pool_cond;
	struct work *pool_head, *pool_tail;
	bool pool_stopping;
	int n_pool;
	pthread_t pool[VERIFY_THREADS];

	/* fills in flight */
	pthread_mutex_t fill_lock;
	struct fill *fills[FILL_BUCKETS];

	/* write-behind */
	pthread_mutex_t wb_lock;
	pthread_cond_t wb_cond;
	struct wb *wb_head, *wb_tail;
	uint64_t wb_seq;
	uint64_t wb_pending;
	struct flush_waiter *flushes;

	_Atomic uint8_t hitcount[SELECTIVE_SLOTS];

	/* object-sized aligned buffers for chains without DRAM, reused (no mmap per I/O) */
	pthread_mutex_t bounce_lock;
	void *bounce[BOUNCE_CACHE];
	int n_bounce;

	_Atomic uint64_t puts, gets, lookups, prefetches, lookup_chunks, lookup_hit_chunks,
		promotions;
};

/* ------------------------------------------------------------ completions */

/* Reserve a completion node for an operation being admitted: its completion can then be
 * queued even when memory runs out later (never run inside a tier's or the caller's call
 * instead). -ENOMEM if none can be had now. */
static int cq_reserve(struct kvt_store *s)
{
	pthread_mutex_lock(&s->cq_lock);
	if (s->cq_nfree > s->cq_reserved) {
		s->cq_reserved++;
		pthread_mutex_unlock(&s->cq_lock);
		return 0;
	}
	pthread_mutex_unlock(&s->cq_lock);
	struct completion *c = kvt__malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_lock(&s->cq_lock);
	c->next = s->cq_free;
	s->cq_free = c;
	s->cq_nfree++;
	s->cq_reserved++;
	pthread_mutex_unlock(&s->cq_lock);
	return 0;
}

static void cq_unreserve(struct kvt_store *s)
{
	pthread_mutex_lock(&s->cq_lock);
	s->cq_reserved--;
	pthread_mutex_unlock(&s->cq_lock);
}

static void cq_push(struct kvt_store *s, struct completion *c, kvt_cb cb, void *arg,
		    const struct kvt_result *res)
{
	c->next = NULL;
	c->cb = cb;
	c->arg = arg;
	c->res = *res;
	if (s->cq_tail)
		s->cq_tail->next = c;
	else
		s->cq_head = c;
	s->cq_tail = c;
}

static void cq_signal(struct kvt_store *s)
{
	uint64_t one = 1;
	ssize_t w = write(s->efd, &one, sizeof(one));
	(void)w;
}

/* Complete an admitted operation (it reserved a node in admit_inflight). */
static void complete(struct kvt_store *s, kvt_cb cb, void *arg, bool direct,
		     const struct kvt_result *res)
{
	if (direct) {
		cq_unreserve(s);
		atomic_fetch_sub(&s->inflight, 1);
		cb(arg, res);
		return;
	}
	pthread_mutex_lock(&s->cq_lock);
	struct completion *c = s->cq_free; /* reserved: never NULL */
	s->cq_free = c->next;
	s->cq_nfree--;
	s->cq_reserved--;
	cq_push(s, c, cb, arg, res);
	pthread_mutex_unlock(&s->cq_lock);
	atomic_fetch_sub(&s->inflight, 1);
	cq_signal(s);
}

void kvt__store_complete(struct kvt_store *s, kvt_cb cb, void *arg, const struct kvt_result *res)
{
	/* Not admitted through the store (the device layer): a node now, from the spare
	 * ones if malloc fails, else wait for one - never run the callback here. */
	for (;;) {
		struct completion *c = kvt__malloc(sizeof(*c));
		pthread_mutex_lock(&s->cq_lock);
		if (!c && s->cq_nfree > s->cq_reserved) {
			c = s->cq_free;
			s->cq_free = c->next;
			s->cq_nfree--;
		}
		if (c) {
			cq_push(s, c, cb, arg, res);
			pthread_mutex_unlock(&s->cq_lock);
			cq_signal(s);
			return;
		}
		pthread_mutex_unlock(&s->cq_lock);
		usleep(1000);
	}
}

int kvt_store_fd(const struct kvt_store *s)
{
	return s->efd;
}

int kvt_poll(struct kvt_store *s, int timeout_ms)
{
	pthread_mutex_lock(&s->cq_lock);
	bool empty = !s->cq_head;
	pthread_mutex_unlock(&s->cq_lock);
	if (empty && timeout_ms != 0) {
		struct pollfd p = {.fd = s->efd, .events = POLLIN};
		int r = poll(&p, 1, timeout_ms);
		if (r < 0)
			return -errno;
	}
	uint64_t v;
	ssize_t rd = read(s->efd, &v, sizeof(v)); /* non-blocking; resets the counter */
	(void)rd;
	pthread_mutex_lock(&s->cq_lock);
	struct completion *c = s->cq_head;
	s->cq_head = s->cq_tail = NULL;
	pthread_mutex_unlock(&s->cq_lock);
	int n = 0;
	while (c) {
		struct completion *next = c->next;
		c->cb(c->arg, &c->res);
		/* Back to the spare list (bounded: at most what was ever in flight). */
		pthread_mutex_lock(&s->cq_lock);
		c->next = s->cq_free;
		s->cq_free = c;
		s->cq_nfree++;
		pthread_mutex_unlock(&s->cq_lock);
		c = next;
		n++;
	}
	return n;
}

/* ------------------------------------------------------------ deadlines */

static void bounce_put(struct kvt_store *s, void *b);
static void link_result(struct kvt_store *s, struct link *l, int rc);

static void heap_swap(struct guard **h, size_t a, size_t b)
{
	struct guard *t = h[a];
	h[a] = h[b];
	h[b] = t;
	h[a]->heap_idx = a;
	h[b]->heap_idx = b;
}

static void heap_up(struct guard **h, size_t i)
{
	while (i > 0 && h[(i - 1) / 2]->deadline > h[i]->deadline) {
		heap_swap(h, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void heap_down(struct guard **h, size_t n, size_t i)
{
	for (;;) {
		size_t m = i, a = 2 * i + 1, b = a + 1;
		if (a < n && h[a]->deadline < h[m]->deadline)
			m = a;
		if (b < n && h[b]->deadline < h[m]->deadline)
			m = b;
		if (m == i)
			return;
		heap_swap(h, i, m);
		i = m;
	}
}

/* Under guard_lock. */
static void heap_remove(struct kvt_store *s, struct guard *g)
{
	size_t i = g->heap_idx;
	if (i == SIZE_MAX)
		return;
	s->heap_n--;
	if (i != s->heap_n) {
		s->heap[i] = s->heap[s->heap_n];
		s->heap[i]->heap_idx = i;
		heap_down(s->heap, s->heap_n, i);
		heap_up(s->heap, i);
	}
	g->heap_idx = SIZE_MAX;
}

/* What a call of bytes, with ahead bytes queued before it, should take on l. */
static uint64_t deadline_budget(struct kvt_store *s, struct link *l, uint64_t ahead,
				uint64_t bytes)
{
	if (atomic_load(&l->samples) < DEADLINE_WARMUP)
		return s->deadline_ceiling_ns;
	double lat = (double)atomic_load(&l->lat_ns);
	double bw = (double)atomic_load(&l->bw_Bps);
	double est = lat + (bw > 0 ? (double)(ahead + bytes) * 1e9 / bw : 0);
	/* The floor is the allowance for jitter (scheduling, a GC pause, a busy core): every
	 * call gets it on top of what it should cost. */
	double d = (double)s->deadline_floor_ns + DEADLINE_SLACK * est;
	if (d > (double)s->deadline_ceiling_ns)
		return s->deadline_ceiling_ns;
	return (uint64_t)d;
}

/* Learn from an answer (in time or late: a late one says the tier got slower). */
static void deadline_learn(struct link *l, const struct guard *g, uint64_t now)
{
	uint64_t elapsed = now > g->start ? now - g->start : 1;
	uint64_t moved = g->ahead + g->bytes;
	uint64_t lat = atomic_load(&l->lat_ns);
	/* The first answers replace the seed (a guess for server-class hardware) rather
	 * than being averaged with it. */
	bool first = atomic_fetch_add(&l->samples, 1) < DEADLINE_WARMUP / 2;
	if (moved <= DEADLINE_SMALL_BYTES) {
		atomic_store(&l->lat_ns, first ? KVT_MAX(lat, elapsed) : (7 * lat + elapsed) / 8);
	} else {
		uint64_t service = elapsed > lat + elapsed / 8 ? elapsed - lat : elapsed / 8 + 1;
		uint64_t sample = (uint64_t)((double)moved * 1e9 / (double)service);
		uint64_t bw = atomic_load(&l->bw_Bps);
		atomic_store(&l->bw_Bps, first ? KVT_MIN(bw, sample) : (7 * bw + sample) / 8);
	}
}

/* A guard for one call of bytes on link l. It has two references: the submitter's
 * (dropped by guard_arm, or the whole guard by guard_cancel) and the tier's (dropped when
 * the tier calls back). The service thread holds a third while it expires the call. */
static struct guard *guard_new(struct kvt_store *s, struct link *l, const char *what,
			       uint64_t bytes, void *op, void (*resume)(void *, int64_t),
			       void (*expire)(struct guard *))
{
	struct guard *g = kvt__calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->heap_idx = SIZE_MAX;
	g->s = s;
	g->l = l;
	g->what = what;
	g->bytes = bytes;
	g->op = op;
	g->resume = resume;
	g->expire = expire;
	g->orphan_slot = -1;
	g->orphan_pin = -1;
	g->start = kvt__now_ns();
	g->ahead = atomic_fetch_add(&l->queued_bytes, bytes);
	atomic_store(&g->refs, 2);
	return g;
}

static void guard_put(struct guard *g)
{
	if (atomic_fetch_sub(&g->refs, 1) != 1)
		return;
	struct kvt_store *s = g->s;
	/* Last reference: the tier has answered and expire() (if it ran) has returned. */
	if (g->orphan_buf)
		bounce_put(s, g->orphan_buf);
	if (g->orphan_slot >= 0)
		kvt__dram_abort(s->dram, g->orphan_slot);
	if (g->orphan_pin >= 0)
		kvt__dram_unpin(s->dram, g->orphan_pin);
	kvt__free(g->orphan_mem[0]);
	kvt__free(g->orphan_mem[1]);
	if (g->orphan_fn)
		g->orphan_fn(g);
	kvt__free(g);
}

/* The tier accepted the call: its deadline starts to count (from submission). */
static void guard_arm(struct guard *g)
{
	struct kvt_store *s = g->s;
	uint64_t deadline = g->start + deadline_budget(s, g->l, g->ahead, g->bytes);
	bool wake = false;
	pthread_mutex_lock(&s->guard_lock);
	if (atomic_load(&g->state) == G_PENDING) { /* not answered already */
		if (s->heap_n == s->heap_cap) {
			size_t cap = s->heap_cap ? 2 * s->heap_cap : 256;
			struct guard **h = kvt__realloc(s->heap, cap * sizeof(*h));
			if (h) {
				s->heap = h;
				s->heap_cap = cap;
			}
		}
		if (s->heap_n < s->heap_cap) {
			g->deadline = deadline;
			g->heap_idx = s->heap_n;
			s->heap[s->heap_n++] = g;
			heap_up(s->heap, g->heap_idx);
			wake = g->heap_idx == 0;
			if (wake)
				atomic_fetch_add(&s->heap_gen, 1);
		}
		/* else no memory for the heap: the call waits for the tier's own answer */
	}
	pthread_mutex_unlock(&s->guard_lock);
	if (wake) { /* earlier than any the service thread knows of: tell it */
		pthread_mutex_lock(&s->work_lock);
		pthread_cond_signal(&s->work_cond);
		pthread_mutex_unlock(&s->work_lock);
	}
	guard_put(g);
}

/* The tier refused the call (returned < 0): it will never call back. */
static void guard_cancel(struct guard *g)
{
	atomic_fetch_sub(&g->l->queued_bytes, g->bytes);
	kvt__free(g);
}

/* The tier's callback for every guarded call. */
static void guard_cb(void *arg, int64_t rc)
{
	struct guard *g = arg;
	struct kvt_store *s = g->s;
	uint64_t now = kvt__now_ns();
	atomic_fetch_sub(&g->l->queued_bytes, g->bytes);
	if (rc >= 0 || rc == -ENOENT)
		deadline_learn(g->l, g, now);
	pthread_mutex_lock(&s->guard_lock);
	int expected = G_PENDING;
	bool in_time = atomic_compare_exchange_strong(&g->state, &expected, G_DONE);
	if (in_time)
		heap_remove(s, g);
	pthread_mutex_unlock(&s->guard_lock);
	if (in_time && g->resume)
		g->resume(g->op, rc);
	else /* after the deadline: the operation went on without it; what it left with the
	      * guard is released with the last reference */
		g->late_rc = rc;
	guard_put(g);
}

/* The service thread: expire every overdue call; returns the next deadline (UINT64_MAX:
 * none). Runs on every turn of the service loop, whatever else is queued. */
static uint64_t guards_expire(struct kvt_store *s, uint64_t *gen)
{
	for (;;) {
		uint64_t now = kvt__now_ns();
		struct guard *due = NULL;
		uint64_t next = UINT64_MAX;
		pthread_mutex_lock(&s->guard_lock);
		*gen = atomic_load(&s->heap_gen);
		if (s->heap_n) {
			struct guard *g = s->heap[0];
			if (g->deadline <= now) {
				int expected = G_PENDING;
				atomic_compare_exchange_strong(&g->state, &expected, G_EXPIRED);
				heap_remove(s, g);
				atomic_fetch_add(&g->refs, 1); /* ours while expire() runs */
				due = g;
			} else {
				next = g->deadline;
			}
		}
		pthread_mutex_unlock(&s->guard_lock);
		if (!due)
			return next;
		struct link *l = due->l;
		atomic_fetch_add(&l->deadline_misses, 1);
		link_result(s, l, -ETIMEDOUT);
		KVT_WARN(&s->log, "%s tier missed its deadline of %llu ms on a %s (%s)", l->name,
			 (unsigned long long)((due->deadline - due->start) / 1000000), due->what,
			 l->local ? "slow" : "remote: slow or unreachable");
		if (due->expire) /* none for a fire-and-forget call */
			due->expire(due);
		guard_put(due);
	}
}

/* ------------------------------------------------------------ service thread */

static int defer(struct kvt_store *s, void (*fn)(void *), void *arg)
{
	struct work *w = kvt__malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->next = NULL;
	w->fn = fn;
	w->arg = arg;
	pthread_mutex_lock(&s->work_lock);
	if (s->work_tail)
		s->work_tail->next = w;
	else
		s->work_head = w;
	s->work_tail = w;
	pthread_cond_signal(&s->work_cond);
	pthread_mutex_unlock(&s->work_lock);
	return 0;
}

static void *service_main(void *arg)
{
	struct kvt_store *s = arg;
	for (;;) {
		/* Deadlines first, on every turn: a steady stream of work must not hold them
		 * off. */
		uint64_t gen;
		uint64_t next = guards_expire(s, &gen);
		pthread_mutex_lock(&s->work_lock);
		struct work *w = s->work_head;
		if (w) {
			s->work_head = w->next;
			if (!s->work_head)
				s->work_tail = NULL;
			pthread_mutex_unlock(&s->work_lock);
			w->fn(w->arg);
			kvt__free(w);
			continue;
		}
		if (s->stopping) {
			pthread_mutex_unlock(&s->work_lock);
			return NULL;
		}
		/* Sleep until the next deadline (at most 1 s). A deadline armed since we looked
		 * that comes first bumped heap_gen before signalling under work_lock. */
		uint64_t now = kvt__now_ns();
		uint64_t wake = KVT_MIN(next, now + 1000000000ull);
		if (wake > now && gen == atomic_load(&s->heap_gen)) {
			struct timespec ts = {.tv_sec = (time_t)(wake / 1000000000ull),
					      .tv_nsec = (long)(wake % 1000000000ull)};
			pthread_cond_timedwait(&s->work_cond, &s->work_lock, &ts);
		}
		pthread_mutex_unlock(&s->work_lock);
	}
}

/* ------------------------------------------------------------ verify pool */

/* Queue fn(arg) for a verify thread. -ENOMEM (caller runs it itself) if no memory. */
static int pool_defer(struct kvt_store *s, void (*fn)(void *), void *arg)
{
	struct work *w = kvt__malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->next = NULL;
	w->fn = fn;
	w->arg = arg;
	pthread_mutex_lock(&s->pool_lock);
	if (s->pool_tail)
		s->pool_tail->next = w;
	else
		s->pool_head = w;
	s->pool_tail = w;
	pthread_cond_signal(&s->pool_cond);
	pthread_mutex_unlock(&s->pool_lock);
	return 0;
}

static void *pool_main(void *arg)
{
	struct kvt_store *s = arg;
	pthread_mutex_lock(&s->pool_lock);
	for (;;) {
		struct work *w = s->pool_head;
		if (w) {
			s->pool_head = w->next;
			if (!s->pool_head)
				s->pool_tail = NULL;
			pthread_mutex_unlock(&s->pool_lock);
			w->fn(w->arg);
			kvt__free(w);
			pthread_mutex_lock(&s->pool_lock);
			continue;
		}
		if (s->pool_stopping)
			break;
		pthread_cond_wait(&s->pool_cond, &s->pool_lock);
	}
	pthread_mutex_unlock(&s->pool_lock);
	return NULL;
}

static void pool_stop(struct kvt_store *s)
{
	pthread_mutex_lock(&s->pool_lock);
	s->pool_stopping = true;
	pthread_cond_broadcast(&s->pool_cond);
	pthread_mutex_unlock(&s->pool_lock);
	for (int i = 0; i < s->n_pool; i++)
		pthread_join(s->pool[i], NULL);
	s->n_pool = 0;
}

/* ------------------------------------------------------------ bounce buffers */

static void *bounce_get(struct kvt_store *s)
{
	void *b = NULL;
	pthread_mutex_lock(&s->bounce_lock);
	if (s->n_bounce)
		b = s->bounce[--s->n_bounce];
	pthread_mutex_unlock(&s->bounce_lock);
	return b ? b : kvt__aligned_alloc(s->obj_max);
}

static void bounce_put(struct kvt_store *s, void *b)
{
	pthread_mutex_lock(&s->bounce_lock);
	if (s->n_bounce < BOUNCE_CACHE) {
		s->bounce[s->n_bounce++] = b;
		b = NULL;
	}
	pthread_mutex_unlock(&s->bounce_lock);
	kvt__free_aligned(b, s->obj_max);
}

/* ------------------------------------------------------------ circuit breaker */

/* May this operation use the tier? Closed: yes. Open: no, except one probe after the
 * cool-down. */
static bool link_usable(struct link *l)
{
	if (!l->t)
		return true;
	uint64_t until = atomic_load(&l->open_until_ns);
	if (!until)
		return true;
	if (kvt__now_ns() < until)
		return false;
	int expected = 0;
	return atomic_compare_exchange_strong(&l->probing, &expected, 1);
}

/* Record the outcome of an operation: errors that say the tier is unwell count. */
static void link_result(struct kvt_store *s, struct link *l, int rc)
{
	bool failure = rc < 0 && rc != -ENOENT && rc != -ENOSPC && rc != -EDQUOT &&
		       rc != -EBADMSG && rc != -ECANCELED && rc != -EEXIST;
	if (!failure) {
		if (atomic_load(&l->open_until_ns))
			KVT_INFO(&s->log, "tier %s recovered", l->name);
		atomic_store(&l->fails, 0);
		atomic_store(&l->open_until_ns, 0);
		atomic_store(&l->cooldown_ns, 0);
		atomic_store(&l->probing, 0);
		return;
	}
	atomic_fetch_add(&l->errors, 1);
	uint32_t f = atomic_fetch_add(&l->fails, 1) + 1;
	if (f >= BREAKER_FAILS) {
		uint64_t cd = atomic_load(&l->cooldown_ns);
		cd = cd ? KVT_MIN(cd * 2, BREAKER_MAX_NS) : BREAKER_BASE_NS;
		atomic_store(&l->cooldown_ns, cd);
		atomic_store(&l->open_until_ns, kvt__now_ns() + cd);
		atomic_store(&l->probing, 0);
		if (f == BREAKER_FAILS || cd > BREAKER_BASE_NS)
			KVT_WARN(&s->log, "tier %s: %u consecutive failures (%s); skipping it for %llu ms",
				 l->name, f, kvt_strerror(rc), (unsigned long long)(cd / 1000000));
	}
}

static void wb_submit(struct kvt_store *s, const struct kvt_key *key,
		      const struct kvt_slot_ref *ref, int end, kvt_cb cb, void *arg, bool direct);
static void wb_dirty_all(struct kvt_store *s);

/* ------------------------------------------------------------ open / close */

static int parse_geometry(struct kvt_store *s, char *err, size_t errlen)
{
	const struct kvt_config *c = s->cfg;
	static const uint8_t dtypes[] = {KVT_DTYPE_BF16, KVT_DTYPE_FP16, KVT_DTYPE_FP8,
					 KVT_DTYPE_FP32};
	const char *dt = kvt__cfg_str(c, "model.dtype");
	s->geo.dtype = !strcmp(dt, "bf16")   ? dtypes[0]
		       : !strcmp(dt, "fp16") ? dtypes[1]
		       : !strcmp(dt, "fp8")  ? dtypes[2]
					     : dtypes[3];
	s->geo.kind = !strcmp(kvt__cfg_str(c, "model.kind"), "mla") ? KVT_KIND_MLA : KVT_KIND_KV;
	s->geo.layers = (uint32_t)kvt__cfg_u64(c, "model.layers");
	s->geo.kv_heads = (uint32_t)kvt__cfg_u64(c, "model.kv_heads");
	s->geo.head_dim = (uint32_t)kvt__cfg_u64(c, "model.head_dim");
	s->geo.chunk_tokens = (uint32_t)kvt__cfg_u64(c, "model.chunk_tokens");
	if (kvt_geometry_check(&s->geo) < 0) {
		snprintf(err, errlen, "invalid model geometry (layers/kv_heads/head_dim/kind)");
		return -EINVAL;
	}
	struct kvt_namespace ns = {
		.model = kvt__cfg_str(c, "model.name"),
		.revision = kvt__cfg_str(c, "model.revision"),
		.tenant = kvt__cfg_str(c, "model.tenant"),
		.geometry = s->geo,
	};
	/* kvt__cfg_str of an enum returns a per-thread buffer; the strings above are plain
	 * strings and stay valid while cfg lives. */
	if (kvt_namespace_id(&ns, s->ns_id) < 0) {
		snprintf(err, errlen, "invalid model name, revision or tenant");
		return -EINVAL;
	}
	s->obj_max = kvt_object_bytes(&s->geo, s->geo.chunk_tokens);
	return 0;
}

/* Start a tier's estimate from the cost model's profile: calibrate's measurement when
 * cost.profile names one, else the defaults for its kind. Answers refine it. */
static void deadline_seed(struct kvt_store *s, struct link *l)
{
	struct kvt_tier_profile p;
	kvt__tier_profile_default(l->name, &p);
	const char *path = kvt__cfg_str(s->cfg, "cost.profile");
	if (*path) {
		char err[160];
		(void)kvt__profile_load(path, &p, 1, err, sizeof(err)); /* bad file: defaults */
	}
	double bw = KVT_MIN(p.read_Bps, p.write_Bps);
	atomic_store(&l->lat_ns, (uint64_t)(p.latency_s * 1e9));
	atomic_store(&l->bw_Bps, bw > 0 ? (uint64_t)bw : 1000000000ull);
}

struct chain_ctx {
	struct kvt_store *s;
	int rc;
};

static int add_link(void *arg, const char *name)
{
	struct chain_ctx *c = arg;
	struct kvt_store *s = c->s;
	if (s->n_links >= KVT_MAX_TIERS) {
		KVT_ERR(&s->log, "store.tiers: more than %d tiers", KVT_MAX_TIERS);
		return c->rc = -EINVAL;
	}
	for (int i = 0; i < s->n_links; i++)
		if (!strcmp(s->links[i].name, name)) {
			KVT_ERR(&s->log, "store.tiers: '%s' listed twice", name);
			return c->rc = -EINVAL;
		}
	struct link *l = &s->links[s->n_links];
	snprintf(l->name, sizeof(l->name), "%s", name);
	if (!strcmp(name, "dram")) {
		if (s->n_links != 0) {
			KVT_ERR(&s->log, "store.tiers: dram must come first");
			return c->rc = -EINVAL;
		}
		struct kvt_dram_options o = {
			.bytes = kvt__cfg_u64(s->cfg, "dram.bytes"),
			.slot_bytes = s->obj_max,
			.policy = kvt__cfg_str(s->cfg, "dram.policy"),
			.hugepages = kvt__cfg_bool(s->cfg, "dram.hugepages"),
			.mlock = kvt__cfg_bool(s->cfg, "dram.mlock"),
			.log = &s->log,
		};
		char policy[32];
		snprintf(policy, sizeof(policy), "%s", o.policy);
		o.policy = policy;
		int rc = kvt__dram_create(&o, &s->dram);
		if (rc < 0) {
			KVT_ERR(&s->log, "dram: cannot create a %llu-byte pool of %llu-byte slots: %s",
				(unsigned long long)o.bytes, (unsigned long long)o.slot_bytes,
				kvt_strerror(rc));
			return c->rc = rc;
		}
		s->dram_pos = s->n_links;
	} else {
		int rc = kvt__tier_open(name, s->cfg, &s->log, &s->geo, s->n_links, &l->t);
		if (rc < 0)
			return c->rc = rc;
		/* The faulty test tier is as local as what it wraps. */
		const char *dev = strcmp(name, "faulty") ? name
							  : kvt__cfg_str(s->cfg, "faulty.inner");
		l->local = !strcmp(dev, "nvme");
		deadline_seed(s, l);
	}
	s->n_links++;
	return 0;
}

/* Admission to each deeper tier (src/sketch.h): a frequency sketch (admission.min_freq),
 * a minimum prefix length, and - with a measured tier profile (cost.profile) - no write
 * to a tier from which restoring would be slower than recomputing. Capacity and the NVMe
 * write budget are the tier's own can_write(). With the defaults nothing is filtered and
 * no sketch is kept. */
static int admission_open(struct kvt_store *s)
{
	uint32_t min_freq = (uint32_t)kvt__cfg_u64(s->cfg, "admission.min_freq");
	uint64_t min_prefix = kvt__cfg_u64(s->cfg, "admission.min_prefix_tokens");
	bool cost_check = kvt__cfg_bool(s->cfg, "admission.cost_check") &&
			  *kvt__cfg_str(s->cfg, "cost.profile");
	if (cost_check && kvt_cost_create(s->cfg, &s->cost) < 0) {
		KVT_WARN(&s->log, "admission: no cost model for this configuration; restore-vs-"
				  "recompute admission is off");
		s->cost = NULL;
	}
	if (min_freq <= 1 && !min_prefix && !s->cost)
		return 0;
	uint64_t width = kvt__cfg_u64(s->cfg, "admission.sketch_counters");
	if (!width)
		width = 1u << 20;
	for (int i = s->dram_pos + 1; i < s->n_links; i++) {
		struct kvt_admit_cfg ac = {
			.min_freq = min_freq,
			.min_prefix_tokens = min_prefix,
			.sketch_width = width,
			.doorkeeper = kvt__cfg_bool(s->cfg, "admission.doorkeeper"),
			.cost = s->cost,
			.cost_tier = i,
		};
		int rc = kvt__admit_create(&ac, &s->links[i].admit);
		if (rc < 0)
			return rc;
	}
	KVT_INFO(&s->log, "admission: min_freq %u, min_prefix_tokens %llu, cost check %s",
		 min_freq, (unsigned long long)min_prefix, s->cost ? "on" : "off");
	return 0;
}

static void admission_record(struct kvt_store *s, const struct kvt_key *key)
{
	uint64_t h = kvt__key_hash(key);
	for (int i = s->dram_pos + 1; i < s->n_links; i++)
		if (s->links[i].admit)
			kvt__admit_record(s->links[i].admit, h);
}

static void close_links(struct kvt_store *s)
{
	for (int i = 0; i < s->n_links; i++) {
		kvt__admit_destroy(s->links[i].admit);
		s->links[i].admit = NULL;
	}
	kvt_cost_destroy(s->cost);
	s->cost = NULL;
	for (int i = s->n_links - 1; i >= 0; i--) {
		kvt__tier_close(s->links[i].t);
		s->links[i].t = NULL;
	}
	if (s->dram)
		kvt__dram_destroy(s->dram);
	s->dram = NULL;
}

int kvt_store_open(const struct kvt_config *cfg, struct kvt_store **out)
{
	if (!cfg || !out)
		return -EINVAL;
	struct kvt_store *s = kvt__calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	int rc = kvt__config_copy(cfg, &s->cfg);
	if (rc < 0)
		goto fail_free;
	s->log = *kvt__cfg_log(cfg);
	s->dram_pos = -1;
	s->efd = -1;
	char err[200];
	rc = parse_geometry(s, err, sizeof(err));
	if (rc < 0) {
		KVT_ERR(&s->log, "%s", err);
		goto fail_cfg;
	}
	const char *wp = kvt__cfg_str(cfg, "store.write_policy");
	s->write_policy = !strcmp(wp, "write-back") ? WP_BACK
			  : !strcmp(wp, "selective") ? WP_SELECTIVE
						     : WP_THROUGH;
	s->selective_hits = (uint32_t)KVT_MIN(kvt__cfg_u64(cfg, "store.selective_hits"), 250);
	s->promote = kvt__cfg_bool(cfg, "store.promote");
	s->promote_local = kvt__cfg_bool(cfg, "store.promote_local");
	s->max_inflight = kvt__cfg_u64(cfg, "store.max_inflight");
	s->max_object_bytes = kvt__cfg_u64(cfg, "store.max_object_bytes");
	pthread_mutex_init(&s->cq_lock, NULL);
	pthread_mutex_init(&s->work_lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are monotonic */
	pthread_cond_init(&s->work_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&s->fill_lock, NULL);
	pthread_mutex_init(&s->wb_lock, NULL);
	pthread_cond_init(&s->wb_cond, NULL);
	pthread_mutex_init(&s->bounce_lock, NULL);
	pthread_mutex_init(&s->guard_lock, NULL);
	pthread_mutex_init(&s->pool_lock, NULL);
	pthread_cond_init(&s->pool_cond, NULL);
	s->deadline_ceiling_ns = kvt__cfg_u64(cfg, "store.tier_timeout_ms") * 1000000ull;
	s->deadline_floor_ns = kvt__cfg_u64(cfg, "store.deadline_floor_ms") * 1000000ull;
	if (s->deadline_floor_ns > s->deadline_ceiling_ns) {
		KVT_WARN(&s->log, "store.deadline_floor_ms above store.tier_timeout_ms (the "
				  "ceiling): using the ceiling for both");
		s->deadline_floor_ns = s->deadline_ceiling_ns;
	}
	if (s->max_object_bytes < s->obj_max)
		KVT_WARN(&s->log, "store.max_object_bytes (%llu) is below this geometry's full "
				  "chunk (%llu bytes): such objects are misses (never deleted)",
			 (unsigned long long)s->max_object_bytes, (unsigned long long)s->obj_max);
	s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->efd < 0) {
		rc = -errno;
		goto fail_sync;
	}
	struct chain_ctx cc = {s, 0};
	char tiers[512];
	snprintf(tiers, sizeof(tiers), "%s", kvt__cfg_str(cfg, "store.tiers"));
	rc = kvt__split_list(tiers, add_link, &cc);
	if (rc < 0 || cc.rc < 0 || s->n_links == 0) {
		if (s->n_links == 0 && rc >= 0 && cc.rc >= 0)
			KVT_ERR(&s->log, "store.tiers is empty");
		rc = cc.rc < 0 ? cc.rc : rc < 0 ? rc : -EINVAL;
		goto fail_links;
	}
	rc = admission_open(s);
	if (rc < 0)
		goto fail_links;
	rc = pthread_create(&s->service, NULL, service_main, s);
	if (rc) {
		rc = -rc;
		goto fail_links;
	}
	for (int i = 0; i < VERIFY_THREADS; i++) {
		if (pthread_create(&s->pool[i], NULL, pool_main, s))
			break; /* fewer verify threads; with none, tier threads verify */
		s->n_pool++;
	}
	*out = s;
	return 0;

fail_links:
	close_links(s);
	close(s->efd);
fail_sync:
	pthread_mutex_destroy(&s->cq_lock);
	pthread_mutex_destroy(&s->work_lock);
	pthread_cond_destroy(&s->work_cond);
	pthread_mutex_destroy(&s->fill_lock);
	pthread_mutex_destroy(&s->wb_lock);
	pthread_cond_destroy(&s->wb_cond);
fail_cfg:
	kvt_config_destroy(s->cfg);
fail_free:
	kvt__free(s);
	return rc;
}

void kvt_store_close(struct kvt_store *s)
{
	if (!s)
		return;
	/* 1. Stop admitting: every call from here on returns -ECANCELED. */
	atomic_store(&s->closing, true);
	/* 2. Dirty chunks (write-back, or left dirty by a lack of memory) are written now, so
	 * a clean shutdown keeps them. */
	if (s->dram && s->n_links > s->dram_pos + 1)
		wb_dirty_all(s);
	/* 3. Drain. Every tier call has a deadline the service thread enforces, so write-
	 * behind and operations in flight finish within a few deadlines (at most one per tier
	 * of the chain, each at most store.tier_timeout_ms), whatever the tiers do. */
	pthread_mutex_lock(&s->wb_lock);
	while (s->wb_pending)
		pthread_cond_wait(&s->wb_cond, &s->wb_lock);
	pthread_mutex_unlock(&s->wb_lock);
	while (atomic_load(&s->inflight))
		kvt_poll(s, 10);
	/* 4. Now no operation can call a tier: close them. They cancel what they still hold
	 * (calls that missed their deadline), and those late answers release what the
	 * engine left with their guards. */
	for (int i = s->n_links - 1; i >= 0; i--) {
		kvt__tier_close(s->links[i].t);
		s->links[i].t = NULL;
	}
	pool_stop(s);
	pthread_mutex_lock(&s->work_lock);
	s->stopping = true;
	pthread_cond_signal(&s->work_cond);
	pthread_mutex_unlock(&s->work_lock);
	pthread_join(s->service, NULL);
	kvt_poll(s, 0);
	close_links(s);
	close(s->efd);
	while (s->n_bounce)
		kvt__free_aligned(s->bounce[--s->n_bounce], s->obj_max);
	while (s->cq_free) {
		struct completion *c = s->cq_free;
		s->cq_free = c->next;
		kvt__free(c);
	}
	kvt__free(s->heap);
	pthread_mutex_destroy(&s->bounce_lock);
	pthread_mutex_destroy(&s->guard_lock);
	pthread_mutex_destroy(&s->pool_lock);
	pthread_cond_destroy(&s->pool_cond);
	pthread_mutex_destroy(&s->cq_lock);
	pthread_mutex_destroy(&s->work_lock);
	pthread_cond_destroy(&s->work_cond);
	pthread_mutex_destroy(&s->fill_lock);
	pthread_mutex_destroy(&s->wb_lock);
	pthread_cond_destroy(&s->wb_cond);
	kvt_config_destroy(s->cfg);
	kvt__free(s);
}

const struct kvt_geometry *kvt_store_geometry(const struct kvt_store *s)
{
	return &s->geo;
}

const uint8_t *kvt_store_ns_id(const struct kvt_store *s)
{
	return s->ns_id;
}

int kvt_store_tier_count(const struct kvt_store *s)
{
	return s->n_links;
}

const char *kvt_store_tier_name(const struct kvt_store *s, int tier)
{
	return tier >= 0 && tier < s->n_links ? s->links[tier].name : "none";
}

struct kvt_tier *kvt__store_tier(struct kvt_store *s, int pos)
{
	return pos >= 0 && pos < s->n_links ? s->links[pos].t : NULL;
}

/* Admit one operation: -ECANCELED while closing, -EAGAIN past store.max_inflight, else 0
 * with its completion node reserved. Undo with unadmit() if it then fails to start. */
static int admit_inflight(struct kvt_store *s)
{
	if (atomic_load(&s->closing))
		return -ECANCELED;
	if (atomic_fetch_add(&s->inflight, 1) >= s->max_inflight) {
		atomic_fetch_sub(&s->inflight, 1);
		return -EAGAIN;
	}
	if (cq_reserve(s) < 0) {
		atomic_fetch_sub(&s->inflight, 1);
		return -ENOMEM;
	}
	return 0;
}

static void unadmit(struct kvt_store *s)
{
	cq_unreserve(s);
	atomic_fetch_sub(&s->inflight, 1);
}

/* ------------------------------------------------------------ write-behind */

static void remove_start(struct remove_op *o);
static void flush_tiers(struct flush_waiter *f);

static void wb_unref(struct wb *w)
{
	if (atomic_fetch_sub(&w->refs, 1) != 1)
		return;
	struct kvt_store *s = w->s;
	if (w->ref.id >= 0)
		kvt__dram_unpin(s->dram, w->ref.id);
	else
		bounce_put(s, w->ref.buf);
	kvt__free(w);
}

static void wb_set_err(struct wb *w, int rc)
{
	int zero = 0;
	atomic_compare_exchange_strong(&w->first_err, &zero, rc);
}

/* A tier did not take this job's object for a reason flush must report. */
static void wb_tier_failed(struct wb *w, struct link *l, int rc)
{
	struct kvt_store *s = w->s;
	int i = (int)(l - s->links);
	uint64_t cur = atomic_load(&s->wb_fail_seq[i]);
	while (cur < w->seq && !atomic_compare_exchange_weak(&s->wb_fail_seq[i], &cur, w->seq))
		;
	wb_set_err(w, rc);
}

/* The job is complete: every tier answered or missed its deadline. */
static void wb_complete(struct wb *w)
{
	struct kvt_store *s = w->s;
	/* Clean unless a tier was never tried: then it stays dirty for flush or write-back
	 * to retry. A tier that failed or missed its deadline simply lacks the object. */
	if (w->ref.id >= 0 && !w->keep_dirty)
		kvt__dram_set_dirty(s->dram, w->ref.id, false);
	if (w->cb) {
		int err = atomic_load(&w->first_err);
		struct kvt_result res = {.status = atomic_load(&w->ok) ? 0 : (err ? err : -EIO),
					 .tier = KVT_TIER_NONE,
					 .bytes = w->ref.object_bytes};
		complete(s, w->cb, w->arg, w->direct, &res);
	}
	/* Unlink; wake flushes whose target is now below every outstanding job, and the
	 * removes that waited for this job. */
	struct flush_waiter *ready = NULL;
	pthread_mutex_lock(&s->wb_lock);
	if (w->prev)
		w->prev->next = w->next;
	else
		s->wb_head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	else
		s->wb_tail = w->prev;
	s->wb_pending--;
	uint64_t oldest = s->wb_head ? s->wb_head->seq : UINT64_MAX;
	struct flush_waiter **pp = &s->flushes;
	while (*pp) {
		struct flush_waiter *f = *pp;
		if (f->target < oldest) {
			*pp = f->next;
			f->next = ready;
			ready = f;
		} else {
			pp = &f->next;
		}
	}
	struct remove_op *after = w->after;
	w->after = NULL;
	pthread_cond_broadcast(&s->wb_cond);
	pthread_mutex_unlock(&s->wb_lock);
	while (after) {
		struct remove_op *o = after;
		after = *(struct remove_op **)o; /* next_after is a remove_op's first member */
		remove_start(o);
	}
	while (ready) {
		struct flush_waiter *f = ready;
		ready = f->next;
		flush_tiers(f);
	}
	wb_unref(w);
}

static void wb_leg_finish(struct wb *w)
{
	if (atomic_fetch_sub(&w->legs, 1) == 1)
		wb_complete(w);
}

static void wb_leg_account(struct wb *w, struct link *l, int rc)
{
	struct kvt_store *s = w->s;
	if (rc < 0) {
		if (rc == -ENOSPC || rc == -EDQUOT) {
			atomic_fetch_add(&l->writes_skipped, 1);
			wb_set_err(w, rc);
		} else {
			wb_tier_failed(w, l, rc);
		}
		KVT_DEBUG(&s->log, "write-behind to %s failed: %s", l->name, kvt_strerror(rc));
	} else {
		atomic_fetch_add(&w->ok, 1);
	}
}

/* The tier answered in time. */
static void wb_leg_done(void *arg, int64_t rc64)
{
	struct wb_leg *leg = arg;
	struct wb *w = leg->w;
	int rc = rc64 < 0 ? (int)rc64 : 0;
	link_result(w->s, leg->l, rc);
	wb_leg_account(w, leg->l, rc);
	kvt__free(leg);
	wb_leg_finish(w);
	wb_unref(w); /* the tier's hold on the bytes */
}

/* The late answer to a write that missed its deadline (the guard's last reference). If a
 * remove of the key came meanwhile, the object that just landed is removed again. */
static void wb_leg_orphan(struct guard *g)
{
	struct wb_leg *leg = g->orphan_arg;
	struct wb *w = leg->w;
	struct kvt_store *s = w->s;
	struct link *l = leg->l;
	if (g->late_rc >= 0 && atomic_load(&w->removed) && !atomic_load(&s->closing) && l->t) {
		struct guard *rg = guard_new(s, l, "remove", 0, NULL, NULL, NULL);
		if (rg) {
			if (l->t->ops->remove(l->t, &w->key, guard_cb, rg) == 0)
				guard_arm(rg);
			else
				guard_cancel(rg);
		}
	}
	kvt__free(leg);
	wb_unref(w);
}

/* The write missed its deadline: the job goes on without this tier (the object is not
 * there, as far as the engine knows); the slot or buffer stays held for the tier until it
 * answers. */
static void wb_leg_expire(struct guard *g)
{
	struct wb_leg *leg = g->op;
	struct wb *w = leg->w;
	atomic_fetch_add(&leg->l->writes_skipped, 1);
	wb_tier_failed(w, leg->l, -ETIMEDOUT);
	g->orphan_fn = wb_leg_orphan;
	g->orphan_arg = leg;
	wb_leg_finish(w);
}

/* Write an object (a pinned slot, or a staging buffer when ref->id < 0) to every deeper
 * tier before chain position end that admits it. The job owns the pin / buffer from here
 * on. If cb is set it runs when all writes are done (status 0 if any tier took it). */
static void wb_submit(struct kvt_store *s, const struct kvt_key *key,
		      const struct kvt_slot_ref *ref, int end, kvt_cb cb, void *arg, bool direct)
{
	struct wb *w = kvt__calloc(1, sizeof(*w));
	if (!w) {
		/* No memory for the job: the chunk stays in DRAM, still dirty, for flush or
		 * write-back to retry; never marked clean unwritten. */
		if (ref->id >= 0)
			kvt__dram_unpin(s->dram, ref->id);
		else
			bounce_put(s, ref->buf);
		if (cb) {
			struct kvt_result res = {.status = -ENOMEM, .tier = KVT_TIER_NONE};
			complete(s, cb, arg, direct, &res);
		}
		return;
	}
	w->s = s;
	w->key = *key;
	w->ref = *ref;
	w->cb = cb;
	w->arg = arg;
	w->direct = direct;
	atomic_store(&w->legs, 1); /* held by this function until all legs are out */
	atomic_store(&w->refs, 1); /* dropped when the job completes */
	pthread_mutex_lock(&s->wb_lock);
	w->seq = ++s->wb_seq;
	w->prev = s->wb_tail;
	if (s->wb_tail)
		s->wb_tail->next = w;
	else
		s->wb_head = w;
	s->wb_tail = w;
	s->wb_pending++;
	pthread_mutex_unlock(&s->wb_lock);

	for (int i = s->dram_pos + 1; i < end; i++) {
		struct link *l = &s->links[i];
		if (l->admit &&
		    kvt__admit_decide(l->admit, kvt__key_hash(key),
				      (uint64_t)ref->depth * s->geo.chunk_tokens, ref->n_tokens,
				      ref->object_bytes) != KVT_ADMIT_YES) {
			atomic_fetch_add(&l->admission_rejects, 1);
			atomic_fetch_add(&l->writes_skipped, 1);
			continue;
		}
		if (!link_usable(l)) { /* circuit open: the tier is unwell */
			atomic_fetch_add(&l->writes_skipped, 1);
			wb_tier_failed(w, l, -EIO);
			continue;
		}
		if (l->t->ops->can_write && l->t->ops->can_write(l->t, ref->object_bytes) < 0) {
			atomic_fetch_add(&l->writes_skipped, 1);
			continue;
		}
		struct wb_leg *leg = kvt__malloc(sizeof(*leg));
		struct guard *g = leg ? guard_new(s, l, "write", ref->object_bytes, leg,
						  wb_leg_done, wb_leg_expire)
				      : NULL;
		if (!g) {
			kvt__free(leg);
			w->keep_dirty = true;
			wb_set_err(w, -ENOMEM);
			continue;
		}
		leg->w = w;
		leg->l = l;
		atomic_fetch_add(&w->legs, 1);
		atomic_fetch_add(&w->refs, 1);
		int rc = l->t->ops->write(l->t, key, ref->buf, ref->object_bytes, guard_cb, g);
		if (rc == 0) {
			guard_arm(g);
			continue;
		}
		guard_cancel(g);
		kvt__free(leg);
		atomic_fetch_sub(&w->legs, 1);
		atomic_fetch_sub(&w->refs, 1);
		link_result(s, l, rc);
		if (rc == -ENOMEM)
			w->keep_dirty = true;
		wb_leg_account(w, l, rc);
	}
	wb_leg_finish(w);
}

/* Write every dirty slot not already being written (flush, close). Bounded by the pool:
 * a slot that stays dirty (no memory for its job) is not retried in the same pass. */
static void wb_dirty_all(struct kvt_store *s)
{
	uint32_t budget = kvt__dram_slots(s->dram);
	struct kvt_slot_ref refs[16];
	uint32_t n;
	while (budget && (n = kvt__dram_dirty_victims(s->dram, refs, KVT_MIN(16u, budget))) > 0) {
		for (uint32_t i = 0; i < n; i++) {
			struct kvt_key key;
			kvt__dram_key(s->dram, refs[i].id, &key);
			wb_submit(s, &key, &refs[i], s->n_links, NULL, NULL, false);
		}
		budget -= n;
	}
}

/* Write-back: keep some DRAM headroom by writing the coldest dirty slots behind. */
static void writeback_clean(struct kvt_store *s)
{
	uint32_t slots = kvt__dram_slots(s->dram);
	uint32_t low = KVT_MAX(1u, slots / 8);
	if (kvt__dram_headroom(s->dram) >= low)
		return;
	struct kvt_slot_ref refs[16];
	uint32_t n = kvt__dram_dirty_victims(s->dram, refs, KVT_MIN(16u, low));
	for (uint32_t i = 0; i < n; i++) {
		struct kvt_key key;
		kvt__dram_key(s->dram, refs[i].id, &key);
		wb_submit(s, &key, &refs[i], s->n_links, NULL, NULL, false);
	}
}

/* ------------------------------------------------------------ put */

struct put_ctx {
	kvt_cb cb;
	void *arg;
	bool direct;
};

static int do_put(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		  uint32_t n_tokens, const void *buf, size_t len, kvt_cb cb, void *arg,
		  bool direct)
{
	if (!s || !key || !buf || !cb)
		return -EINVAL;
	if (n_tokens == 0 || n_tokens > s->geo.chunk_tokens ||
	    len != kvt_payload_bytes(&s->geo, n_tokens))
		return -EINVAL;
	int arc = admit_inflight(s);
	if (arc < 0)
		return arc;
	atomic_fetch_add(&s->puts, 1);
	admission_record(s, key);
	uint64_t obj_bytes = kvt_object_bytes(&s->geo, n_tokens);
	bool deeper = s->n_links > s->dram_pos + 1;
	struct kvt_result res = {.status = 0, .tier = KVT_TIER_NONE, .n_tokens = n_tokens,
				 .bytes = len};

	if (!s->dram) {
		struct kvt_slot_ref ref = {.id = -1, .object_bytes = obj_bytes, .n_tokens = n_tokens};
		ref.buf = bounce_get(s);
		if (!ref.buf) {
			unadmit(s);
			return -ENOMEM;
		}
		kvt__object_encode(ref.buf, obj_bytes, &s->geo, s->ns_id, key, n_tokens, buf, len);
		wb_submit(s, key, &ref, s->n_links, cb, arg, direct);
		return 0;
	}

	struct kvt_slot_ref ref;
	int rc = kvt__dram_alloc(s->dram, key, parent, &ref);
	if (rc == -EEXIST) { /* same content already stored: a put is idempotent */
		complete(s, cb, arg, direct, &res);
		return 0;
	}
	if (rc < 0) {
		unadmit(s);
		if (rc != -ENOSPC)
			return rc;
		/* Every slot is pinned or dirty. If write-behind is under way, slots come free
		 * soon: tell the caller to retry. */
		if (s->write_policy == WP_BACK)
			writeback_clean(s);
		pthread_mutex_lock(&s->wb_lock);
		bool pending = s->wb_pending > 0;
		pthread_mutex_unlock(&s->wb_lock);
		return pending ? -EAGAIN : -ENOSPC;
	}
	rc = kvt__object_encode(ref.buf, obj_bytes, &s->geo, s->ns_id, key, n_tokens, buf, len);
	if (rc < 0) {
		kvt__dram_abort(s->dram, ref.id);
		unadmit(s);
		return rc;
	}
	bool write_now = deeper && s->write_policy == WP_THROUGH;
	bool dirty = deeper && (s->write_policy == WP_THROUGH || s->write_policy == WP_BACK);
	kvt__dram_publish(s->dram, ref.id, obj_bytes, n_tokens, dirty);
	ref.object_bytes = obj_bytes;
	ref.n_tokens = n_tokens;
	complete(s, cb, arg, direct, &res);
	if (write_now)
		wb_submit(s, key, &ref, s->n_links, NULL, NULL, false);
	else
		kvt__dram_unpin(s->dram, ref.id);
	if (deeper && s->write_policy == WP_BACK)
		writeback_clean(s);
	return 0;
}

int kvt_put(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
	    uint32_t n_tokens, const void *buf, size_t len, kvt_cb cb, void *arg)
{
	return do_put(s, key, parent, n_tokens, buf, len, cb, arg, false);
}

int kvt__store_reserve(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		       uint32_t n_tokens, struct kvt_slot_ref *ref)
{
	if (!s->dram)
		return -ENOTSUP;
	if (n_tokens == 0 || n_tokens > s->geo.chunk_tokens)
		return -EINVAL;
	int rc = kvt__dram_alloc(s->dram, key, parent, ref);
	if (rc < 0)
		return rc;
	ref->n_tokens = n_tokens;
	ref->object_bytes = kvt_object_bytes(&s->geo, n_tokens);
	return 0;
}

int kvt__store_commit(struct kvt_store *s, struct kvt_slot_ref *ref)
{
	struct kvt_key key;
	kvt__dram_key(s->dram, ref->id, &key);
	int rc = kvt__object_seal(ref->buf, ref->object_bytes, &s->geo, s->ns_id, &key,
				  ref->n_tokens);
	if (rc < 0) {
		kvt__dram_abort(s->dram, ref->id);
		return rc;
	}
	atomic_fetch_add(&s->puts, 1);
	bool deeper = s->n_links > s->dram_pos + 1;
	bool dirty = deeper && (s->write_policy == WP_THROUGH || s->write_policy == WP_BACK);
	kvt__dram_publish(s->dram, ref->id, ref->object_bytes, ref->n_tokens, dirty);
	if (deeper && s->write_policy == WP_THROUGH)
		wb_submit(s, &key, ref, s->n_links, NULL, NULL, false);
	else
		kvt__dram_unpin(s->dram, ref->id);
	if (deeper && s->write_policy == WP_BACK)
		writeback_clean(s);
	return 0;
}

void kvt__store_cancel(struct kvt_store *s, struct kvt_slot_ref *ref)
{
	kvt__dram_abort(s->dram, ref->id);
}

/* ------------------------------------------------------------ chain reads */

/* Read a whole object from the fastest deeper tier that has it, into buf (a DRAM slot or a
 * bounce buffer), and verify header and every layer CRC there. A tier that misses, fails or
 * serves a corrupt object (dropped from that tier, counted) is passed over for the next.
 * done() runs once, on a tier thread or in the submitting call: rc 0 with the decoded
 * header and the chain position that served it, or -ENOENT when no tier could. */

static void chain_read_next(struct chain_read *cr);
static void chain_read_expire(struct guard *g);

static bool same_geometry(const struct kvt_geometry *a, const struct kvt_geometry *b)
{
	return a->layers == b->layers && a->kv_heads == b->kv_heads &&
	       a->head_dim == b->head_dim && a->chunk_tokens == b->chunk_tokens &&
	       a->dtype == b->dtype && a->kind == b->kind;
}

/* A failure found before chain_read_start returned is reported from the service thread:
 * done() never runs inside the submitting call. */
struct deferred_done {
	struct chain_read *cr;
	int rc;
};

static void deferred_done_run(void *arg)
{
	struct deferred_done *d = arg;
	struct chain_read *cr = d->cr;
	int rc = d->rc;
	kvt__free(d);
	cr->done(cr, rc, NULL);
}

static void chain_read_fail(struct chain_read *cr, int rc)
{
	if (!cr->in_submit) {
		cr->done(cr, rc, NULL);
		return;
	}
	cr->in_submit = false;
	/* Short of memory to defer it, wait for some: never run done() here, never lose it. */
	for (;;) {
		struct deferred_done *d = kvt__malloc(sizeof(*d));
		if (d) {
			d->cr = cr;
			d->rc = rc;
			if (defer(cr->s, deferred_done_run, d) == 0)
				return;
			kvt__free(d);
		}
		usleep(1000);
	}
}

/* Is the object in buf sound but not ours to serve - another namespace or geometry under
 * the same (opaque) key, or larger than store.max_object_bytes? Then it is a miss and
 * stays for whoever it belongs to: only damaged bytes are ever dropped. */
static bool chain_read_foreign(struct kvt_store *s, const void *buf, uint64_t len,
			       const char **why)
{
	struct kvt_header h;
	struct kvt_expect any = {.max_object_bytes = 0}; /* the format's own bound */
	if (kvt__header_decode(buf, &h, &any) < 0)
		return false;
	if (!same_geometry(&h.geometry, &s->geo) || memcmp(h.ns_id, s->ns_id, KVT_NS_ID_BYTES)) {
		*why = "another namespace or geometry";
		return true;
	}
	if (h.object_bytes > s->max_object_bytes) {
		*why = "an object larger than store.max_object_bytes";
		return true;
	}
	(void)len;
	return false;
}

static void chain_read_verify(struct chain_read *cr, int64_t rc);

struct verify_job {
	struct chain_read *cr;
	int64_t rc;
};

static void verify_job_run(void *arg)
{
	struct verify_job *j = arg;
	struct chain_read *cr = j->cr;
	int64_t rc = j->rc;
	kvt__free(j);
	chain_read_verify(cr, rc);
}

/* The tier answered in time (on its I/O thread): the object's checks and whatever
 * follows (publish, copy-out) go to the verify pool, so the tier's thread goes back to
 * its I/O at once. */
static void chain_read_done(void *arg, int64_t rc)
{
	struct chain_read *cr = arg;
	struct kvt_store *s = cr->s;
	link_result(s, &s->links[cr->pos], rc < 0 ? (int)rc : 0);
	if (rc > 0 && s->n_pool) {
		struct verify_job *j = kvt__malloc(sizeof(*j));
		if (j) {
			j->cr = cr;
			j->rc = rc;
			if (pool_defer(s, verify_job_run, j) == 0)
				return;
			kvt__free(j);
		}
	}
	chain_read_verify(cr, rc); /* no pool or no memory: here */
}

static void chain_read_verify(struct chain_read *cr, int64_t rc)
{
	struct kvt_store *s = cr->s;
	struct link *l = &s->links[cr->pos];
	if (rc > 0) {
		struct kvt_header h;
		struct kvt_expect exp = {.geometry = &s->geo, .ns_id = s->ns_id, .key = &cr->key,
					 .max_object_bytes = s->max_object_bytes};
		int v = kvt__object_verify(cr->buf, (uint64_t)rc, &exp, &h);
		if (v == 0) {
			atomic_fetch_add(&l->hits, 1);
			cr->done(cr, 0, &h);
			return;
		}
		const char *why;
		if (chain_read_foreign(s, cr->buf, (uint64_t)rc, &why)) {
			atomic_fetch_add(&l->misses, 1);
			KVT_DEBUG(&s->log, "tier %s holds %s under this key: a miss, left in place",
				  l->name, why);
			cr->pos++;
			chain_read_next(cr);
			return;
		}
		atomic_fetch_add(&l->checksum_failures, 1);
		KVT_WARN(&s->log, "tier %s served a corrupt object (dropped): %s", l->name,
			 kvt_strerror(v));
		if (l->t->ops->drop_corrupt)
			l->t->ops->drop_corrupt(l->t, &cr->key);
	} else {
		atomic_fetch_add(&l->misses, 1);
	}
	cr->pos++;
	chain_read_next(cr);
}

static void chain_read_next(struct chain_read *cr)
{
	struct kvt_store *s = cr->s;
	for (; cr->pos < s->n_links; cr->pos++) {
		struct link *l = &s->links[cr->pos];
		if (!l->t || !link_usable(l))
			continue;
		struct guard *g =
			guard_new(s, l, "read", s->obj_max, cr, chain_read_done, chain_read_expire);
		if (!g)
			continue;
		struct kvt_seg seg = {.off = 0, .len = s->obj_max, .buf = cr->buf};
		/* Once the tier has the call, cr belongs to its answer: leave submit mode first. */
		bool submitting = cr->in_submit;
		cr->in_submit = false;
		int rc = l->t->ops->read(l->t, &cr->key, &seg, 1, guard_cb, g);
		if (rc == 0) {
			guard_arm(g);
			return;
		}
		cr->in_submit = submitting;
		guard_cancel(g);
		link_result(s, l, rc);
	}
	chain_read_fail(cr, -ENOENT);
}

/* The tier missed its deadline: a miss there. It may still write into the buffer, so the
 * buffer goes to the guard. A bounce read goes on to the next tier with a fresh buffer; a
 * fill cannot take a second slot for its key, so it fails (the get that started it falls
 * back to a bounce read). Runs on the service thread. */
static void chain_read_expire(struct guard *g)
{
	struct chain_read *cr = g->op;
	struct kvt_store *s = cr->s;
	struct link *l = &s->links[cr->pos];
	atomic_fetch_add(&l->misses, 1);
	if (cr->in_slot) {
		struct fill *f = (struct fill *)cr;
		g->orphan_slot = f->ref.id;
		cr->lost = true;
		cr->done(cr, -ETIMEDOUT, NULL);
		return;
	}
	g->orphan_buf = cr->buf;
	cr->buf = bounce_get(s);
	if (!cr->buf) {
		cr->done(cr, -ENOMEM, NULL);
		return;
	}
	cr->pos++;
	chain_read_next(cr);
}

/* Start the read; done() runs later, on another thread. */
static void chain_read_start(struct chain_read *cr, struct kvt_store *s, const struct kvt_key *key,
			     void *buf, bool in_slot, int from,
			     void (*done)(struct chain_read *, int, const struct kvt_header *))
{
	cr->s = s;
	cr->key = *key;
	cr->buf = buf;
	cr->in_slot = in_slot;
	cr->lost = false;
	cr->pos = from;
	cr->done = done;
	cr->in_submit = true;
	chain_read_next(cr); /* cr may be gone when this returns */
}

/* ------------------------------------------------------------ fills (promotion) */

static struct fill **fill_bucket(struct kvt_store *s, const struct kvt_key *key)
{
	return &s->fills[kvt__key_hash(key) % FILL_BUCKETS];
}

/* Hand the result to every waiter: each gets its own pin on success. */
static void fill_finish(struct fill *f, int rc, int tier)
{
	struct kvt_store *s = f->s;
	pthread_mutex_lock(&s->fill_lock);
	struct fill **pp = fill_bucket(s, &f->key);
	while (*pp != f)
		pp = &(*pp)->next;
	*pp = f->next;
	struct fill_waiter *w = f->waiters;
	pthread_mutex_unlock(&s->fill_lock);
	if (rc == 0) {
		atomic_fetch_add(&s->promotions, 1);
		for (struct fill_waiter *x = w->next; x; x = x->next)
			kvt__dram_pin(s->dram, f->ref.id);
	}
	while (w) {
		struct fill_waiter *next = w->next;
		w->cb(w->arg, rc, rc == 0 ? &f->ref : NULL, tier);
		kvt__free(w);
		w = next;
	}
	kvt__free(f);
}

static void fill_read_done(struct chain_read *cr, int rc, const struct kvt_header *h)
{
	struct fill *f = (struct fill *)cr; /* cr is the fill's first member */
	struct kvt_store *s = f->s;
	if (rc < 0) {
		if (!cr->lost) /* else the late tier's guard gives the slot back */
			kvt__dram_abort(s->dram, f->ref.id);
		/* tier: where a deadline was missed, so a get can go on after it */
		fill_finish(f, rc, rc == -ETIMEDOUT ? cr->pos : KVT_TIER_NONE);
		return;
	}
	f->ref.object_bytes = h->object_bytes;
	f->ref.n_tokens = h->n_tokens;
	/* A hit from a shared tier is also kept on the local tiers above it, so the next miss
	 * in DRAM does not cross the network again. */
	bool local = s->promote_local && cr->pos > s->dram_pos + 1;
	kvt__dram_publish(s->dram, f->ref.id, h->object_bytes, h->n_tokens, local);
	if (local) {
		kvt__dram_pin(s->dram, f->ref.id);
		wb_submit(s, &f->key, &f->ref, cr->pos, NULL, NULL, false);
	}
	admission_record(s, &f->key);
	fill_finish(f, 0, cr->pos);
}

struct deferred_hit {
	kvt_acquire_cb cb;
	void *arg;
	struct kvt_slot_ref ref;
	int tier;
};

static void deferred_hit_run(void *arg)
{
	struct deferred_hit *d = arg;
	d->cb(d->arg, 0, &d->ref, d->tier);
	kvt__free(d);
}

/* Start (or join) the promotion of key. Returns 0 (cb later) or -errno:
 * -EBUSY the key is being filled by a put right now, -ENOSPC no slot. */
static int fill_start(struct kvt_store *s, const struct kvt_key *key, kvt_acquire_cb cb,
		      void *arg)
{
	struct fill_waiter *w = kvt__malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->cb = cb;
	w->arg = arg;
	w->next = NULL;
	pthread_mutex_lock(&s->fill_lock);
	struct fill **b = fill_bucket(s, key);
	for (struct fill *f = *b; f; f = f->next)
		if (kvt__key_eq(&f->key, key)) {
			w->next = f->waiters->next; /* the first waiter keeps the fill's pin */
			f->waiters->next = w;
			pthread_mutex_unlock(&s->fill_lock);
			return 0;
		}
	struct fill *f = kvt__calloc(1, sizeof(*f));
	if (!f) {
		pthread_mutex_unlock(&s->fill_lock);
		kvt__free(w);
		return -ENOMEM;
	}
	int rc = kvt__dram_alloc(s->dram, key, NULL, &f->ref);
	if (rc < 0) {
		pthread_mutex_unlock(&s->fill_lock);
		kvt__free(f);
		kvt__free(w);
		return rc == -EEXIST ? -EBUSY : rc;
	}
	f->key = *key;
	f->s = s;
	f->waiters = w;
	f->next = *b;
	*b = f;
	pthread_mutex_unlock(&s->fill_lock);
	chain_read_start(&f->cr, s, key, f->ref.buf, true, s->dram_pos + 1, fill_read_done);
	return 0;
}

int kvt__store_acquire(struct kvt_store *s, const struct kvt_key *key, kvt_acquire_cb cb,
		       void *arg)
{
	if (!s->dram)
		return -ENOTSUP;
	struct kvt_slot_ref ref;
	if (kvt__dram_get(s->dram, key, &ref) == 0) {
		struct deferred_hit *d = kvt__malloc(sizeof(*d));
		if (!d) {
			kvt__dram_unpin(s->dram, ref.id);
			return -ENOMEM;
		}
		d->cb = cb;
		d->arg = arg;
		d->ref = ref;
		d->tier = s->dram_pos;
		atomic_fetch_add(&s->links[s->dram_pos].hits, 1);
		int rc = defer(s, deferred_hit_run, d);
		if (rc < 0) {
			kvt__dram_unpin(s->dram, ref.id);
			kvt__free(d);
		}
		return rc;
	}
	int rc = fill_start(s, key, cb, arg);
	if (rc == -EBUSY) {
		/* A put of this key is being published right now; it is a hit once it lands. */
		if (kvt__dram_get(s->dram, key, &ref) == 0) {
			kvt__dram_unpin(s->dram, ref.id);
			return kvt__store_acquire(s, key, cb, arg);
		}
	}
	return rc;
}

void kvt__store_release(struct kvt_store *s, const struct kvt_slot_ref *ref)
{
	kvt__dram_unpin(s->dram, ref->id);
}

/* ------------------------------------------------------------ get */

struct get_op {
	struct chain_read cr; /* first: the bounce path is a chain read */
	struct kvt_store *s;
	struct kvt_key key;
	uint32_t l0, l1;
	void *buf;
	size_t len;
	kvt_cb cb;
	void *arg;
	bool direct;
	void *bounce; /* no DRAM slot: the object is read here */
};

static void get_finish(struct get_op *g, int status, int tier, uint32_t n_tokens, uint64_t bytes)
{
	struct kvt_result res = {.status = status, .tier = tier, .n_tokens = n_tokens,
				 .bytes = bytes};
	struct kvt_store *s = g->s;
	if (g->bounce && g->cr.buf) /* the chain read may have swapped buffers */
		bounce_put(s, g->cr.buf);
	complete(s, g->cb, g->arg, g->direct, &res);
	kvt__free(g);
}

/* Copy the requested layers out of an object in a DRAM slot. Objects enter DRAM verified
 * (encoded from the caller's bytes, or checked in full on promotion), so only the header
 * is decoded here, not the layer CRCs again. */
static int64_t get_extract(struct get_op *g, const void *obj, struct kvt_header *h)
{
	struct kvt_store *s = g->s;
	struct kvt_expect exp = {.geometry = &s->geo, .ns_id = s->ns_id, .key = &g->key,
				 .max_object_bytes = s->max_object_bytes};
	int rc = kvt__header_decode(obj, h, &exp);
	if (rc < 0)
		return rc;
	return kvt__object_copy_layers(h, obj, g->l0, g->l1, g->buf, g->len);
}

/* Selective write policy: a chunk goes deeper once it has been hit selective_hits times
 * in DRAM (counted in a small saturating table; collisions only make it go earlier). ref is
 * pinned by the caller. */
static void get_selective(struct kvt_store *s, const struct kvt_key *key,
			  const struct kvt_slot_ref *ref)
{
	if (s->write_policy != WP_SELECTIVE || s->n_links <= s->dram_pos + 1)
		return;
	_Atomic uint8_t *c = &s->hitcount[kvt__key_hash(key) % SELECTIVE_SLOTS];
	if (atomic_load(c) > s->selective_hits)
		return;
	if ((uint32_t)atomic_fetch_add(c, 1) + 1 != s->selective_hits)
		return;
	kvt__dram_pin(s->dram, ref->id); /* the write-behind job's own pin */
	kvt__dram_set_dirty(s->dram, ref->id, true);
	wb_submit(s, key, ref, s->n_links, NULL, NULL, false);
}


static int get_bounce_start(struct get_op *g, int from);

static void get_acquired(void *arg, int rc, const struct kvt_slot_ref *ref, int tier)
{
	struct get_op *g = arg;
	struct kvt_store *s = g->s;
	if (rc == -ETIMEDOUT && tier >= 0 && tier + 1 < s->n_links) {
		/* The promotion's tier missed its deadline: read on from the next tier through
		 * a bounce buffer (the fill's slot is the late tier's until it answers). */
		if (get_bounce_start(g, tier + 1) == 0)
			return;
		rc = -ENOMEM;
	}
	if (rc < 0) {
		get_finish(g, rc == -ETIMEDOUT ? -ENOENT : rc, KVT_TIER_NONE, 0, 0);
		return;
	}
	struct kvt_header h;
	int64_t n = get_extract(g, ref->buf, &h);
	kvt__dram_unpin(s->dram, ref->id);
	if (n < 0) {
		get_finish(g, (int)n, KVT_TIER_NONE, 0, 0);
		return;
	}
	get_finish(g, 0, tier, h.n_tokens, (uint64_t)n);
}

static void get_bounce_done(struct chain_read *cr, int rc, const struct kvt_header *h)
{
	struct get_op *g = (struct get_op *)cr; /* cr is the op's first member */
	if (rc < 0) {
		get_finish(g, rc, KVT_TIER_NONE, 0, 0);
		return;
	}
	/* Verified in full by the chain read: copy without checking again. */
	int64_t n = kvt__object_copy_layers(h, cr->buf, g->l0, g->l1, g->buf, g->len);
	if (n < 0)
		get_finish(g, (int)n, KVT_TIER_NONE, 0, 0);
	else
		get_finish(g, 0, cr->pos, h->n_tokens, (uint64_t)n);
}

static int get_bounce_start(struct get_op *g, int from)
{
	g->bounce = bounce_get(g->s);
	if (!g->bounce)
		return -ENOMEM;
	chain_read_start(&g->cr, g->s, &g->key, g->bounce, false, from, get_bounce_done);
	return 0;
}

static int do_get(struct kvt_store *s, const struct kvt_key *key, uint32_t l0, uint32_t l1,
		  void *buf, size_t len, kvt_cb cb, void *arg, bool direct)
{
	if (!s || !key || !buf || !cb)
		return -EINVAL;
	if (l1 == 0)
		l1 = s->geo.layers;
	if (l0 >= l1 || l1 > s->geo.layers)
		return -EINVAL;
	if (len < (uint64_t)(l1 - l0) * kvt_layer_bytes(&s->geo, 1))
		return -EINVAL;
	int arc = admit_inflight(s);
	if (arc < 0)
		return arc;
	atomic_fetch_add(&s->gets, 1);
	struct get_op *g = kvt__calloc(1, sizeof(*g));
	if (!g) {
		unadmit(s);
		return -ENOMEM;
	}
	g->s = s;
	g->key = *key;
	g->l0 = l0;
	g->l1 = l1;
	g->buf = buf;
	g->len = len;
	g->cb = cb;
	g->arg = arg;
	g->direct = direct;

	if (s->dram) {
		struct kvt_slot_ref ref;
		if (kvt__dram_get(s->dram, key, &ref) == 0) {
			/* Objects enter DRAM verified (encoded from the caller's bytes, or checked
			 * on promotion), so a DRAM hit checks the header only. */
			struct kvt_header h;
			int64_t n = get_extract(g, ref.buf, &h);
			atomic_fetch_add(&s->links[s->dram_pos].hits, 1);
			admission_record(s, key);
			get_selective(s, key, &ref);
			kvt__dram_unpin(s->dram, ref.id);
			if (n < 0)
				get_finish(g, (int)n, KVT_TIER_NONE, 0, 0);
			else
				get_finish(g, 0, s->dram_pos, h.n_tokens, (uint64_t)n);
			return 0;
		}
		atomic_fetch_add(&s->links[s->dram_pos].misses, 1);
		if (s->n_links == s->dram_pos + 1) {
			get_finish(g, -ENOENT, KVT_TIER_NONE, 0, 0);
			return 0;
		}
		if (s->promote) {
			int rc = fill_start(s, key, get_acquired, g);
			if (rc == 0)
				return 0;
			/* No slot to promote into (or a put of the key is landing): read through
			 * a bounce buffer instead. */
		}
	}
	int rc = get_bounce_start(g, s->dram_pos + 1);
	if (rc < 0) {
		kvt__free(g);
		unadmit(s);
	}
	return rc;
}

int kvt_get(struct kvt_store *s, const struct kvt_key *key, uint32_t layer_begin,
	    uint32_t layer_end, void *buf, size_t len, kvt_cb cb, void *arg)
{
	return do_get(s, key, layer_begin, layer_end, buf, len, cb, arg, false);
}

/* ------------------------------------------------------------ lookup */

struct lookup_op {
	struct kvt_store *s;
	size_t n;
	struct kvt_key *keys; /* copy */
	int8_t *tiers;        /* internal result */
	int8_t *out;          /* caller's array, may be NULL */
	/* the batch asked of the current tier */
	struct kvt_key *ask;
	uint32_t *ask_idx;
	uint8_t *present;
	uint32_t n_ask;
	int pos;
	kvt_cb cb;
	void *arg;
	bool direct;
};

static size_t lookup_prefix(const struct lookup_op *o)
{
	size_t p = 0;
	while (p < o->n && o->tiers[p] != KVT_TIER_NONE)
		p++;
	return p;
}

static void lookup_finish(struct lookup_op *o)
{
	struct kvt_store *s = o->s;
	size_t p = lookup_prefix(o);
	if (o->out)
		for (size_t i = 0; i < o->n; i++)
			o->out[i] = i < p ? o->tiers[i] : KVT_TIER_NONE;
	atomic_fetch_add(&s->lookup_chunks, o->n);
	atomic_fetch_add(&s->lookup_hit_chunks, p);
	struct kvt_result res = {.status = (int)p, .tier = KVT_TIER_NONE};
	kvt_cb cb = o->cb;
	void *arg = o->arg;
	bool direct = o->direct;
	kvt__free(o->keys);
	kvt__free(o->tiers);
	kvt__free(o->ask);
	kvt__free(o->ask_idx);
	kvt__free(o->present);
	kvt__free(o);
	complete(s, cb, arg, direct, &res);
}

static void lookup_next(struct lookup_op *o);
static void lookup_expire(struct guard *g);

/* What the tier answered (rc < 0: it holds none of them, as far as this lookup knows). */
static void lookup_answer(struct lookup_op *o, int rc)
{
	if (rc >= 0)
		for (uint32_t i = 0; i < o->n_ask; i++)
			if (o->present[i])
				o->tiers[o->ask_idx[i]] = (int8_t)o->pos;
	o->pos++;
	lookup_next(o);
}

static void lookup_done(void *arg, int64_t rc)
{
	struct lookup_op *o = arg;
	link_result(o->s, &o->s->links[o->pos], rc < 0 ? (int)rc : 0);
	lookup_answer(o, rc < 0 ? (int)rc : 0);
}

static void lookup_next(struct lookup_op *o)
{
	struct kvt_store *s = o->s;
	for (; o->pos < s->n_links; o->pos++) {
		struct link *l = &s->links[o->pos];
		if (!l->t || !link_usable(l))
			continue;
		/* Ask about unresolved keys from the first unresolved one on. */
		size_t first = lookup_prefix(o);
		if (first == o->n)
			break;
		o->n_ask = 0;
		for (size_t i = first; i < o->n; i++)
			if (o->tiers[i] == KVT_TIER_NONE) {
				o->ask[o->n_ask] = o->keys[i];
				o->ask_idx[o->n_ask++] = (uint32_t)i;
			}
		struct guard *g = guard_new(s, l, "lookup", (uint64_t)o->n_ask * KVT_KEY_BYTES, o,
					    lookup_done, lookup_expire);
		if (!g)
			continue;
		int rc = l->t->ops->exists(l->t, o->ask, o->n_ask, o->present, guard_cb, g);
		if (rc == 0) {
			guard_arm(g);
			return;
		}
		guard_cancel(g);
		link_result(s, l, rc);
	}
	lookup_finish(o);
}

/* The tier is too slow: it counts as holding none of the keys. It may still read ask[]
 * and write present[], so those go to the guard and the lookup goes on with new ones. */
static void lookup_expire(struct guard *g)
{
	struct lookup_op *o = g->op;
	size_t m = o->n ? o->n : 1;
	g->orphan_mem[0] = o->ask;
	g->orphan_mem[1] = o->present;
	o->ask = kvt__malloc(m * sizeof(*o->ask));
	o->present = kvt__calloc(m, 1);
	if (!o->ask || !o->present) {
		lookup_finish(o); /* what faster tiers found */
		return;
	}
	lookup_answer(o, -ETIMEDOUT);
}

static int do_lookup(struct kvt_store *s, const struct kvt_key *keys, size_t n, int8_t *tiers,
		     kvt_cb cb, void *arg, bool direct)
{
	if (!s || (!keys && n) || !cb || n > (1u << 24))
		return -EINVAL;
	int arc = admit_inflight(s);
	if (arc < 0)
		return arc;
	atomic_fetch_add(&s->lookups, 1);
	struct lookup_op *o = kvt__calloc(1, sizeof(*o));
	size_t m = n ? n : 1;
	if (!o || !(o->keys = kvt__malloc(m * sizeof(*keys))) || !(o->tiers = kvt__malloc(m)) ||
	    !(o->ask = kvt__malloc(m * sizeof(*keys))) ||
	    !(o->ask_idx = kvt__malloc(m * sizeof(uint32_t))) || !(o->present = kvt__calloc(m, 1))) {
		if (o) {
			kvt__free(o->keys);
			kvt__free(o->tiers);
			kvt__free(o->ask);
			kvt__free(o->ask_idx);
			kvt__free(o);
		}
		unadmit(s);
		return -ENOMEM;
	}
	o->s = s;
	o->n = n;
	if (n)
		memcpy(o->keys, keys, n * sizeof(*keys));
	memset(o->tiers, KVT_TIER_NONE, m);
	o->out = tiers;
	o->cb = cb;
	o->arg = arg;
	o->direct = direct;
	size_t i = 0;
	if (s->dram)
		for (; i < n && kvt__dram_contains(s->dram, &keys[i], true); i++)
			o->tiers[i] = (int8_t)s->dram_pos;
	/* Keys past the DRAM prefix may still be in DRAM; mark them so deeper tiers are
	 * asked only about what DRAM lacks. */
	if (s->dram)
		for (size_t j = i; j < n; j++)
			if (kvt__dram_contains(s->dram, &keys[j], false))
				o->tiers[j] = (int8_t)s->dram_pos;
	o->pos = s->dram_pos + 1;
	lookup_next(o);
	return 0;
}

int kvt_lookup(struct kvt_store *s, const struct kvt_key *keys, size_t n, int8_t *tiers,
	       kvt_cb cb, void *arg)
{
	return do_lookup(s, keys, n, tiers, cb, arg, false);
}

/* ------------------------------------------------------------ prefetch */

struct prefetch_op {
	struct kvt_store *s;
	struct kvt_key *keys;
	size_t n;
	uint64_t deadline;
	_Atomic size_t remaining;
	_Atomic size_t resident;
	size_t prefix;
	kvt_cb cb;
	void *arg;
	bool direct;
};

static void prefetch_finish(struct prefetch_op *p)
{
	struct kvt_result res = {.status = (int)atomic_load(&p->resident), .tier = KVT_TIER_NONE};
	struct kvt_store *s = p->s;
	kvt_cb cb = p->cb;
	void *arg = p->arg;
	bool direct = p->direct;
	kvt__free(p->keys);
	kvt__free(p);
	complete(s, cb, arg, direct, &res);
}

static void prefetch_one_done(void *arg, int rc, const struct kvt_slot_ref *ref, int tier)
{
	struct prefetch_op *p = arg;
	if (rc == 0) {
		atomic_fetch_add(&p->resident, 1);
		kvt__dram_unpin(p->s->dram, ref->id);
	}
	if (atomic_fetch_sub(&p->remaining, 1) == 1)
		prefetch_finish(p);
}

static void prefetch_looked_up(void *arg, const struct kvt_result *res)
{
	struct prefetch_op *p = arg;
	struct kvt_store *s = p->s;
	size_t prefix = res->status > 0 ? (size_t)res->status : 0;
	atomic_store(&p->remaining, 1);
	for (size_t i = 0; i < prefix; i++) {
		if (kvt__dram_contains(s->dram, &p->keys[i], false)) {
			atomic_fetch_add(&p->resident, 1);
			continue;
		}
		if (p->deadline && kvt__now_ns() >= p->deadline)
			break; /* not started by the deadline: dropped */
		atomic_fetch_add(&p->remaining, 1);
		if (kvt__store_acquire(s, &p->keys[i], prefetch_one_done, p) < 0)
			atomic_fetch_sub(&p->remaining, 1);
	}
	if (atomic_fetch_sub(&p->remaining, 1) == 1)
		prefetch_finish(p);
}

static int do_prefetch(struct kvt_store *s, const struct kvt_key *keys, size_t n,
		       uint64_t deadline_ns, kvt_cb cb, void *arg, bool direct)
{
	if (!s || (!keys && n) || !cb)
		return -EINVAL;
	if (!s->dram)
		return -ENOTSUP;
	struct prefetch_op *p = kvt__calloc(1, sizeof(*p));
	if (!p || !(p->keys = kvt__malloc((n ? n : 1) * sizeof(*keys)))) {
		kvt__free(p);
		return -ENOMEM;
	}
	if (n)
		memcpy(p->keys, keys, n * sizeof(*keys));
	p->s = s;
	p->n = n;
	p->deadline = deadline_ns;
	p->cb = cb;
	p->arg = arg;
	p->direct = direct;
	int arc = admit_inflight(s);
	if (arc < 0) {
		kvt__free(p->keys);
		kvt__free(p);
		return arc;
	}
	atomic_fetch_add(&s->prefetches, 1);
	/* The lookup's completion continues the prefetch on the completing thread. */
	int rc = do_lookup(s, p->keys, n, NULL, prefetch_looked_up, p, true);
	if (rc < 0) {
		unadmit(s);
		kvt__free(p->keys);
		kvt__free(p);
	}
	return rc;
}

int kvt_prefetch(struct kvt_store *s, const struct kvt_key *keys, size_t n, uint64_t deadline_ns,
		 kvt_cb cb, void *arg)
{
	return do_prefetch(s, keys, n, deadline_ns, cb, arg, false);
}

/* ------------------------------------------------------------ remove */

/* A remove runs after every write-behind of its key that was out when it came: otherwise
 * the write could land after it and the key reappear in a deeper tier. A write that
 * missed its deadline and lands later still is removed again when it answers
 * (wb_leg_orphan). */
struct remove_op {
	struct remove_op *next_after; /* first: a job's list of removes waiting for it */
	struct kvt_store *s;
	struct kvt_key key;
	_Atomic int remaining;
	_Atomic int removed;
	kvt_cb cb;
	void *arg;
	bool direct;
};

struct remove_leg {
	struct remove_op *o;
	struct link *l;
};

static void remove_release(struct remove_op *o)
{
	if (atomic_fetch_sub(&o->remaining, 1) != 1)
		return;
	struct kvt_result res = {.status = atomic_load(&o->removed), .tier = KVT_TIER_NONE};
	struct kvt_store *s = o->s;
	kvt_cb cb = o->cb;
	void *arg = o->arg;
	bool direct = o->direct;
	kvt__free(o);
	complete(s, cb, arg, direct, &res);
}

static void remove_leg_done(void *arg, int64_t rc)
{
	struct remove_leg *leg = arg;
	struct remove_op *o = leg->o;
	link_result(o->s, leg->l, rc < 0 ? (int)rc : 0);
	if (rc == 0)
		atomic_fetch_add(&o->removed, 1);
	kvt__free(leg);
	remove_release(o);
}

/* The tier missed its deadline: the key may still be there; it is not counted. */
static void remove_leg_expire(struct guard *g)
{
	struct remove_leg *leg = g->op;
	struct remove_op *o = leg->o;
	kvt__free(leg);
	remove_release(o);
}

/* Wait for write-behind of the key still out, else remove it from every deeper tier. */
static void remove_start(struct remove_op *o)
{
	struct kvt_store *s = o->s;
	pthread_mutex_lock(&s->wb_lock);
	struct wb *last = NULL;
	for (struct wb *w = s->wb_head; w; w = w->next)
		if (kvt__key_eq(&w->key, &o->key)) {
			atomic_store(&w->removed, true);
			last = w;
		}
	if (last) {
		o->next_after = last->after;
		last->after = o;
		pthread_mutex_unlock(&s->wb_lock);
		return;
	}
	pthread_mutex_unlock(&s->wb_lock);
	for (int i = s->dram_pos + 1; i < s->n_links; i++) {
		struct link *l = &s->links[i];
		if (!link_usable(l))
			continue;
		struct remove_leg *leg = kvt__malloc(sizeof(*leg));
		struct guard *g = leg ? guard_new(s, l, "remove", 0, leg, remove_leg_done,
						  remove_leg_expire)
				      : NULL;
		if (!g) {
			kvt__free(leg);
			continue;
		}
		leg->o = o;
		leg->l = l;
		atomic_fetch_add(&o->remaining, 1);
		int rc = l->t->ops->remove(l->t, &o->key, guard_cb, g);
		if (rc == 0) {
			guard_arm(g);
			continue;
		}
		guard_cancel(g);
		atomic_fetch_sub(&o->remaining, 1);
		kvt__free(leg);
		link_result(s, l, rc);
	}
	/* The last reference may be ours: the completion goes through the queue (unless
	 * direct, where the caller is a sync wrapper waiting for it). */
	remove_release(o);
}

static int do_remove(struct kvt_store *s, const struct kvt_key *key, kvt_cb cb, void *arg,
		     bool direct)
{
	if (!s || !key || !cb)
		return -EINVAL;
	struct remove_op *o = kvt__calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	int arc = admit_inflight(s);
	if (arc < 0) {
		kvt__free(o);
		return arc;
	}
	o->s = s;
	o->key = *key;
	o->cb = cb;
	o->arg = arg;
	o->direct = direct;
	atomic_store(&o->remaining, 1);
	if (s->dram) {
		/* A slot being written behind is unlinked now and freed when the job lets go;
		 * a dirty one not yet written never will be. */
		int rc = kvt__dram_remove(s->dram, key);
		if (rc == 0 || rc == -EBUSY)
			atomic_fetch_add(&o->removed, 1);
	}
	remove_start(o);
	return 0;
}

int kvt_remove(struct kvt_store *s, const struct kvt_key *key, kvt_cb cb, void *arg)
{
	return do_remove(s, key, cb, arg, false);
}

/* ------------------------------------------------------------ flush */

/* kvt_flush: write every dirty slot, wait for every write-behind submitted before it,
 * then call each tier's durability op (flush) under its deadline. status 0, or the error
 * of a tier that did not take a write of the flush's window or missed its deadline, with
 * res.tier naming it. */
struct flush_leg {
	struct flush_waiter *f;
	struct link *l;
};

static void flush_bad(struct flush_waiter *f, struct link *l, int rc, const char *why)
{
	struct kvt_store *s = f->s;
	int zero = 0;
	if (atomic_compare_exchange_strong(&f->status, &zero, rc))
		atomic_store(&f->bad_tier, (int)(l - s->links));
	KVT_WARN(&s->log, "flush: tier %s %s", l->name, why);
}

static void flush_release(struct flush_waiter *f)
{
	if (atomic_fetch_sub(&f->remaining, 1) != 1)
		return;
	struct kvt_store *s = f->s;
	struct kvt_result res = {.status = atomic_load(&f->status),
				 .tier = atomic_load(&f->bad_tier)};
	kvt_cb cb = f->cb;
	void *arg = f->arg;
	bool direct = f->direct;
	kvt__free(f);
	complete(s, cb, arg, direct, &res);
}

static void flush_leg_done(void *arg, int64_t rc)
{
	struct flush_leg *leg = arg;
	struct flush_waiter *f = leg->f;
	link_result(f->s, leg->l, rc < 0 ? (int)rc : 0);
	if (rc < 0)
		flush_bad(f, leg->l, (int)rc, "could not make its writes durable");
	kvt__free(leg);
	flush_release(f);
}

static void flush_leg_expire(struct guard *g)
{
	struct flush_leg *leg = g->op;
	struct flush_waiter *f = leg->f;
	flush_bad(f, leg->l, -ETIMEDOUT, "missed its deadline making its writes durable");
	kvt__free(leg);
	flush_release(f);
}

/* Every write-behind up to f->target is complete: report tiers that did not take one,
 * and make the others durable. */
static void flush_tiers(struct flush_waiter *f)
{
	struct kvt_store *s = f->s;
	for (int i = s->dram_pos + 1; i < s->n_links; i++) {
		struct link *l = &s->links[i];
		uint64_t failed = atomic_load(&s->wb_fail_seq[i]);
		if (failed >= f->from && failed <= f->target) {
			flush_bad(f, l, -EIO, "did not take a write-behind (failed, unwell or missed "
					      "its deadline)");
			continue;
		}
		if (!l->t->ops->flush)
			continue; /* durable when the write completes */
		if (!link_usable(l)) {
			flush_bad(f, l, -EIO, "is unwell (circuit open)");
			continue;
		}
		struct flush_leg *leg = kvt__malloc(sizeof(*leg));
		struct guard *g = leg ? guard_new(s, l, "flush", 0, leg, flush_leg_done,
						  flush_leg_expire)
				      : NULL;
		if (!g) {
			kvt__free(leg);
			flush_bad(f, l, -ENOMEM, "could not be asked (no memory)");
			continue;
		}
		leg->f = f;
		leg->l = l;
		atomic_fetch_add(&f->remaining, 1);
		int rc = l->t->ops->flush(l->t, guard_cb, g);
		if (rc == 0) {
			guard_arm(g);
			continue;
		}
		guard_cancel(g);
		kvt__free(leg);
		atomic_fetch_sub(&f->remaining, 1);
		link_result(s, l, rc);
		flush_bad(f, l, rc, "refused to flush");
	}
	flush_release(f);
}

static int do_flush(struct kvt_store *s, kvt_cb cb, void *arg, bool direct)
{
	if (!s || !cb)
		return -EINVAL;
	struct flush_waiter *f = kvt__calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	int arc = admit_inflight(s);
	if (arc < 0) {
		kvt__free(f);
		return arc;
	}
	f->s = s;
	f->cb = cb;
	f->arg = arg;
	f->direct = direct;
	atomic_store(&f->remaining, 1);
	atomic_store(&f->bad_tier, KVT_TIER_NONE);
	/* Dirty slots (write-back, or left dirty for lack of memory) are part of "everything
	 * submitted before the flush". */
	if (s->dram && s->n_links > s->dram_pos + 1)
		wb_dirty_all(s);
	pthread_mutex_lock(&s->wb_lock);
	f->target = s->wb_seq;
	f->from = s->wb_head ? s->wb_head->seq : s->wb_seq + 1;
	bool ready = !s->wb_head || s->wb_head->seq > f->target;
	if (!ready) {
		f->next = s->flushes;
		s->flushes = f;
	}
	pthread_mutex_unlock(&s->wb_lock);
	if (ready)
		flush_tiers(f);
	return 0;
}

int kvt_flush(struct kvt_store *s, kvt_cb cb, void *arg)
{
	return do_flush(s, cb, arg, false);
}

/* ------------------------------------------------------------ stats */

int kvt_stats(struct kvt_store *s, struct kvt_stats *out)
{
	if (!s || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->n_tiers = (uint32_t)s->n_links;
	for (int i = 0; i < s->n_links; i++) {
		struct link *l = &s->links[i];
		struct kvt_tier_stats *t = &out->tier[i];
		if (l->t)
			l->t->ops->stats(l->t, t);
		else
			kvt__dram_stats(s->dram, t);
		snprintf(t->name, sizeof(t->name), "%s", l->name);
		t->hits = atomic_load(&l->hits);
		t->misses = atomic_load(&l->misses);
		/* A tier with drop_corrupt counts the objects the engine found bad itself. */
		if (!l->t || !l->t->ops->drop_corrupt)
			t->checksum_failures += atomic_load(&l->checksum_failures);
		t->errors += atomic_load(&l->errors);
		t->writes_skipped += atomic_load(&l->writes_skipped);
	}
	out->puts = atomic_load(&s->puts);
	out->gets = atomic_load(&s->gets);
	out->lookups = atomic_load(&s->lookups);
	out->prefetches = atomic_load(&s->prefetches);
	out->lookup_chunks = atomic_load(&s->lookup_chunks);
	out->lookup_hit_chunks = atomic_load(&s->lookup_hit_chunks);
	out->promotions = atomic_load(&s->promotions);
	pthread_mutex_lock(&s->wb_lock);
	out->write_behind_pending = s->wb_pending;
	pthread_mutex_unlock(&s->wb_lock);
	out->dram_alloc_bytes = kvt__alloc_bytes();
	return 0;
}

/* ------------------------------------------------------------ sync wrappers */

struct waiter {
	pthread_mutex_t m;
	pthread_cond_t c;
	bool done;
	struct kvt_result res;
};

static void waiter_init(struct waiter *w)
{
	pthread_mutex_init(&w->m, NULL);
	pthread_cond_init(&w->c, NULL);
	w->done = false;
}

static void waiter_cb(void *arg, const struct kvt_result *res)
{
	struct waiter *w = arg;
	pthread_mutex_lock(&w->m);
	w->res = *res;
	w->done = true;
	pthread_cond_signal(&w->c);
	pthread_mutex_unlock(&w->m);
}

static int waiter_wait(struct waiter *w, int rc, struct kvt_result *res)
{
	if (rc == 0) {
		pthread_mutex_lock(&w->m);
		while (!w->done)
			pthread_cond_wait(&w->c, &w->m);
		pthread_mutex_unlock(&w->m);
		rc = w->res.status;
		if (res)
			*res = w->res;
	}
	pthread_mutex_destroy(&w->m);
	pthread_cond_destroy(&w->c);
	return rc;
}

int kvt_put_sync(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		 uint32_t n_tokens, const void *buf, size_t len)
{
	struct waiter w;
	waiter_init(&w);
	return waiter_wait(&w, do_put(s, key, parent, n_tokens, buf, len, waiter_cb, &w, true),
			   NULL);
}

int kvt_lookup_sync(struct kvt_store *s, const struct kvt_key *keys, size_t n, int8_t *tiers)
{
	struct waiter w;
	waiter_init(&w);
	return waiter_wait(&w, do_lookup(s, keys, n, tiers, waiter_cb, &w, true), NULL);
}

int kvt_get_sync(struct kvt_store *s, const struct kvt_key *key, uint32_t layer_begin,
		 uint32_t layer_end, void *buf, size_t len, struct kvt_result *res)
{
	struct waiter w;
	waiter_init(&w);
	return waiter_wait(
		&w, do_get(s, key, layer_begin, layer_end, buf, len, waiter_cb, &w, true), res);
}

int kvt_prefetch_sync(struct kvt_store *s, const struct kvt_key *keys, size_t n,
		      uint64_t deadline_ns)
{
	struct waiter w;
	waiter_init(&w);
	return waiter_wait(&w, do_prefetch(s, keys, n, deadline_ns, waiter_cb, &w, true), NULL);
}

int kvt_remove_sync(struct kvt_store *s, const struct kvt_key *key)
{
	struct waiter w;
	waiter_init(&w);
	return waiter_wait(&w, do_remove(s, key, waiter_cb, &w, true), NULL);
}

int kvt_flush_sync(struct kvt_store *s)
{
	struct waiter w;
	waiter_init(&w);
	return waiter_wait(&w, do_flush(s, waiter_cb, &w, true), NULL);
}

struct kvt_dram *kvt__store_dram(struct kvt_store *s)
{
	return s->dram;
}
