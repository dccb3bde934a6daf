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
#include "dram.h"
#include "engine.h"
#include "format.h"
#include "protect.h"
#include "sketch.h"
#include "store_key.h"
#include "tier.h"

#define BREAKER_FAILS 5
#define BREAKER_BASE_NS (500ull * 1000 * 1000)
#define BREAKER_MAX_NS (30ull * 1000 * 1000 * 1000)
#define FILL_BUCKETS 1024
#define SELECTIVE_SLOTS 65536
#define BOUNCE_CACHE 256

enum write_policy { WP_THROUGH = 0, WP_BACK = 1, WP_SELECTIVE = 2 };

struct link {
	struct kvt_tier *t; /* NULL for the DRAM position */
	char name[16];
	_Atomic uint32_t fails;         /* consecutive failures */
	_Atomic uint64_t open_until_ns; /* circuit open until then */
	_Atomic uint64_t cooldown_ns;
	_Atomic int probing;
	_Atomic uint64_t hits, misses, checksum_failures, errors, writes_skipped;
	struct kvt_admit *admit; /* deeper tiers: what is worth writing here (NULL: all) */
	_Atomic uint64_t admission_rejects;
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
 * done() runs once, on a tier thread or in the submitting call: rc 0 with the decoded
 * header (cr->pos is the chain position that served it), or -ENOENT when no tier could. */
struct chain_read {
	struct kvt_store *s;
	struct kvt_key key;
	void *buf;
	bool in_slot; /* buf is a reserved DRAM slot (a fill), else a bounce buffer */
	bool lost;    /* a late tier still owns buf: the slot went to its guard */
	int pos;
	void (*done)(struct chain_read *cr, int rc, const struct kvt_header *h);
};

/* A tier call the engine may stop waiting for (store.tier_timeout_ms). The tier's callback
 * argument is the guard, never the operation, so a tier that answers after the engine gave
 * up finds only the guard: it then releases what the operation left with it (a buffer the
 * tier was writing into, a reserved slot, the lookup's arrays) and frees the guard. */
enum { G_PENDING, G_DONE, G_EXPIRED };

struct guard {
	struct guard *prev, *next; /* the store's pending guards */
	uint64_t deadline;
	_Atomic int state;
	_Atomic int refs;
	bool linked;
	struct kvt_store *s;
	void *op;
	void (*resume)(void *op, int rc); /* the tier answered in time */
	void (*expire)(struct guard *g);  /* the deadline passed: hand over, move on */
	/* left behind by expire() for the late answer to release */
	void *orphan_buf;   /* a bounce buffer */
	int32_t orphan_slot; /* a reserved DRAM slot, -1 none */
	void *orphan_mem[2]; /* kvt__malloc'ed arrays */
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

/* One write-behind: a slot (or staging buffer) being written to the deeper tiers. */
struct wb {
	struct wb *prev, *next; /* outstanding list, in submission order */
	uint64_t seq;
	struct kvt_store *s;
	struct kvt_key key;
	struct kvt_slot_ref ref; /* ref.id < 0: staging buffer owned by the job */
	_Atomic int remaining;
	_Atomic int ok;
	int first_err;
	/* put completion when the put waits for the writes (no DRAM tier) */
	kvt_cb cb;
	void *arg;
	bool direct;
};

struct flush_waiter {
	struct flush_waiter *next;
	uint64_t target;
	kvt_cb cb;
	void *arg;
	bool direct;
};

struct kvt_store {
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

	int write_policy;
	uint32_t selective_hits;
	bool promote;
	bool promote_local;
	uint64_t max_inflight;
	_Atomic uint64_t inflight;

	/* completion queue for kvt_poll */
	pthread_mutex_t cq_lock;
	struct completion *cq_head, *cq_tail;
	int efd;

	/* guarded tier calls (deadline watchdog on the service thread) */
	pthread_mutex_t guard_lock;
	struct guard *guards;
	uint64_t tier_timeout_ns;

	/* service thread */
	pthread_mutex_t work_lock;
	pthread_cond_t work_cond;
	struct work *work_head, *work_tail;
	bool stopping;
	pthread_t service;

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

static void complete(struct kvt_store *s, kvt_cb cb, void *arg, bool direct,
		     const struct kvt_result *res)
{
	atomic_fetch_sub(&s->inflight, 1);
	if (direct) {
		cb(arg, res);
		return;
	}
	kvt__store_complete(s, cb, arg, res);
}

void kvt__store_complete(struct kvt_store *s, kvt_cb cb, void *arg, const struct kvt_result *res)
{
	struct completion *c = kvt__malloc(sizeof(*c));
	if (!c) {
		/* Never lose a completion: run it here rather than drop it. */
		cb(arg, res);
		return;
	}
	c->next = NULL;
	c->cb = cb;
	c->arg = arg;
	c->res = *res;
	pthread_mutex_lock(&s->cq_lock);
	if (s->cq_tail)
		s->cq_tail->next = c;
	else
		s->cq_head = c;
	s->cq_tail = c;
	pthread_mutex_unlock(&s->cq_lock);
	uint64_t one = 1;
	ssize_t w = write(s->efd, &one, sizeof(one));
	(void)w;
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
		kvt__free(c);
		c = next;
		n++;
	}
	return n;
}

/* ------------------------------------------------------------ guarded tier calls */

/* A guard has two references: the submitter's (dropped by guard_arm or guard_cancel) and
 * the tier's (dropped when the tier calls back). Only armed guards - whose tier call was
 * accepted - can expire; state changes and list membership are decided under guard_lock
 * or by compare-and-swap, so an answer and the deadline never both continue the op. */
static struct guard *guard_new(struct kvt_store *s, void *op, void (*resume)(void *, int),
			       void (*expire)(struct guard *))
{
	struct guard *g = kvt__calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->s = s;
	g->op = op;
	g->resume = resume;
	g->expire = expire;
	g->orphan_slot = -1;
	atomic_store(&g->refs, 2);
	return g;
}

static void guard_put(struct guard *g)
{
	if (atomic_fetch_sub(&g->refs, 1) == 1)
		kvt__free(g);
}

/* The tier accepted the call: start the clock. */
static void guard_arm(struct guard *g)
{
	struct kvt_store *s = g->s;
	pthread_mutex_lock(&s->guard_lock);
	if (atomic_load(&g->state) == G_PENDING) { /* not answered already */
		g->deadline = kvt__now_ns() + s->tier_timeout_ns;
		g->next = s->guards;
		if (s->guards)
			s->guards->prev = g;
		s->guards = g;
		g->linked = true;
	}
	pthread_mutex_unlock(&s->guard_lock);
	guard_put(g);
}

/* The tier refused the call (returned < 0): it will never call back. */
static void guard_cancel(struct guard *g)
{
	kvt__free(g);
}

static void bounce_put(struct kvt_store *s, void *b);

/* The tier's callback for every guarded call. */
static void guard_cb(void *arg, int rc)
{
	struct guard *g = arg;
	struct kvt_store *s = g->s;
	pthread_mutex_lock(&s->guard_lock);
	int expected = G_PENDING;
	bool in_time = atomic_compare_exchange_strong(&g->state, &expected, G_DONE);
	if (in_time && g->linked) {
		if (g->prev)
			g->prev->next = g->next;
		else
			s->guards = g->next;
		if (g->next)
			g->next->prev = g->prev;
		g->linked = false;
	}
	pthread_mutex_unlock(&s->guard_lock);
	if (in_time) {
		g->resume(g->op, rc);
	} else {
		/* Answered after the deadline: the operation went on without it. */
		if (g->orphan_buf)
			bounce_put(s, g->orphan_buf);
		if (g->orphan_slot >= 0)
			kvt__dram_abort(s->dram, g->orphan_slot);
		kvt__free(g->orphan_mem[0]);
		kvt__free(g->orphan_mem[1]);
	}
	guard_put(g);
}

/* Run by the service thread: expire every overdue guarded call. */
static void guards_expire(struct kvt_store *s)
{
	for (;;) {
		uint64_t now = kvt__now_ns();
		struct guard *due = NULL;
		pthread_mutex_lock(&s->guard_lock);
		for (struct guard *g = s->guards; g; g = g->next) {
			int expected = G_PENDING;
			if (g->deadline <= now &&
			    atomic_compare_exchange_strong(&g->state, &expected, G_EXPIRED)) {
				if (g->prev)
					g->prev->next = g->next;
				else
					s->guards = g->next;
				if (g->next)
					g->next->prev = g->prev;
				g->linked = false;
				due = g;
				break;
			}
		}
		pthread_mutex_unlock(&s->guard_lock);
		if (!due)
			return;
		due->expire(due); /* the tier's reference keeps it alive until it answers */
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
	pthread_mutex_lock(&s->work_lock);
	for (;;) {
		while (!s->work_head && !s->stopping) {
			/* Wake at least every 20 ms to expire overdue tier calls. */
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 20 * 1000 * 1000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			if (pthread_cond_timedwait(&s->work_cond, &s->work_lock, &ts) == ETIMEDOUT) {
				pthread_mutex_unlock(&s->work_lock);
				guards_expire(s);
				pthread_mutex_lock(&s->work_lock);
			}
		}
		if (!s->work_head)
			break;
		struct work *w = s->work_head;
		s->work_head = w->next;
		if (!s->work_head)
			s->work_tail = NULL;
		pthread_mutex_unlock(&s->work_lock);
		w->fn(w->arg);
		kvt__free(w);
		pthread_mutex_lock(&s->work_lock);
	}
	pthread_mutex_unlock(&s->work_lock);
	return NULL;
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
	if ((rc = kvt__protect_open(cfg, &s->log, &s->prot)) < 0)
		goto fail_cfg;
	pthread_mutex_init(&s->cq_lock, NULL);
	pthread_mutex_init(&s->work_lock, NULL);
	pthread_cond_init(&s->work_cond, NULL);
	pthread_mutex_init(&s->fill_lock, NULL);
	pthread_mutex_init(&s->wb_lock, NULL);
	pthread_cond_init(&s->wb_cond, NULL);
	pthread_mutex_init(&s->bounce_lock, NULL);
	pthread_mutex_init(&s->guard_lock, NULL);
	s->tier_timeout_ns = kvt__cfg_u64(cfg, "store.tier_timeout_ms") * 1000000ull;
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
	kvt__protect_close(s->prot);
	kvt_config_destroy(s->cfg);
fail_free:
	kvt__free(s);
	return rc;
}

void kvt_store_close(struct kvt_store *s)
{
	if (!s)
		return;
	/* Write-behind first: it needs the tiers. Under write-back, dirty chunks are written
	 * now so a clean shutdown keeps them. Then the tiers (which cancel what is left), then
	 * operations still running finish, then the service thread. */
	if (s->dram && s->write_policy == WP_BACK && s->n_links > s->dram_pos + 1) {
		struct kvt_slot_ref refs[16];
		uint32_t n;
		while ((n = kvt__dram_dirty_victims(s->dram, refs, 16)) > 0)
			for (uint32_t i = 0; i < n; i++) {
				struct kvt_key key;
				kvt__dram_key(s->dram, refs[i].id, &key);
				wb_submit(s, &key, &refs[i], s->n_links, NULL, NULL, false);
			}
	}
	pthread_mutex_lock(&s->wb_lock);
	while (s->wb_pending)
		pthread_cond_wait(&s->wb_cond, &s->wb_lock);
	pthread_mutex_unlock(&s->wb_lock);
	for (int i = s->n_links - 1; i >= 0; i--) {
		kvt__tier_close(s->links[i].t);
		s->links[i].t = NULL;
	}
	while (atomic_load(&s->inflight))
		kvt_poll(s, 10);
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
	pthread_mutex_destroy(&s->bounce_lock);
	pthread_mutex_destroy(&s->guard_lock);
	pthread_mutex_destroy(&s->cq_lock);
	pthread_mutex_destroy(&s->work_lock);
	pthread_cond_destroy(&s->work_cond);
	pthread_mutex_destroy(&s->fill_lock);
	pthread_mutex_destroy(&s->wb_lock);
	pthread_cond_destroy(&s->wb_cond);
	kvt__protect_close(s->prot);
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

static bool admit_inflight(struct kvt_store *s)
{
	if (atomic_fetch_add(&s->inflight, 1) >= s->max_inflight) {
		atomic_fetch_sub(&s->inflight, 1);
		return false;
	}
	return true;
}

/* ------------------------------------------------------------ write-behind */

static void wb_finish(struct wb *w);

static void wb_tier_done(void *arg, int rc)
{
	struct wb *w = arg;
	/* Which link? The job writes links in order; each callback carries the job only, so
	 * outcome accounting per link happens in wb_submit's per-link wrapper below. */
	(void)rc;
	if (atomic_fetch_sub(&w->remaining, 1) == 1)
		wb_finish(w);
}

struct wb_leg {
	struct wb *w;
	struct link *l;
};

static void wb_leg_done(void *arg, int rc)
{
	struct wb_leg *leg = arg;
	struct wb *w = leg->w;
	struct kvt_store *s = w->s;
	link_result(s, leg->l, rc);
	if (rc < 0) {
		if (rc == -ENOSPC || rc == -EDQUOT)
			atomic_fetch_add(&leg->l->writes_skipped, 1);
		if (!w->first_err)
			w->first_err = rc;
		KVT_DEBUG(&s->log, "write-behind to %s failed: %s", leg->l->name, kvt_strerror(rc));
	} else {
		atomic_fetch_add(&w->ok, 1);
	}
	kvt__free(leg);
	wb_tier_done(w, rc);
}

static void wb_finish(struct wb *w)
{
	struct kvt_store *s = w->s;
	if (w->ref.id >= 0) {
		kvt__dram_set_dirty(s->dram, w->ref.id, false);
		kvt__dram_unpin(s->dram, w->ref.id);
	}
	if (w->cb) {
		struct kvt_result res = {.status = atomic_load(&w->ok) ? 0 : w->first_err,
					 .tier = KVT_TIER_NONE,
					 .bytes = w->ref.object_bytes};
		complete(s, w->cb, w->arg, w->direct, &res);
	}
	if (w->ref.id < 0)
		bounce_put(s, w->ref.buf);
	/* Unlink; wake flushes whose target is now below every outstanding job. */
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
	pthread_cond_broadcast(&s->wb_cond);
	pthread_mutex_unlock(&s->wb_lock);
	kvt__free(w);
	while (ready) {
		struct flush_waiter *f = ready;
		ready = f->next;
		struct kvt_result res = {.status = 0, .tier = KVT_TIER_NONE};
		complete(s, f->cb, f->arg, f->direct, &res);
		kvt__free(f);
	}
}

/* Write an object (a pinned slot, or a staging buffer when ref->id < 0) to every deeper
 * tier before chain position end that admits it. The job owns the pin / buffer from here
 * on. If cb is set it runs when all writes are done (status 0 if any tier took it). */
static void wb_submit(struct kvt_store *s, const struct kvt_key *key,
		      const struct kvt_slot_ref *ref, int end, kvt_cb cb, void *arg, bool direct)
{
	struct wb *w = kvt__calloc(1, sizeof(*w));
	if (!w) {
		/* No memory for the job: the chunk stays in DRAM only. */
		if (ref->id >= 0) {
			kvt__dram_set_dirty(s->dram, ref->id, false);
			kvt__dram_unpin(s->dram, ref->id);
		} else {
			bounce_put(s, ref->buf);
		}
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
	atomic_store(&w->remaining, 1); /* held by this function until all legs are out */
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
		if (!link_usable(l) ||
		    (l->t->ops->can_write && l->t->ops->can_write(l->t, ref->object_bytes) < 0)) {
			atomic_fetch_add(&l->writes_skipped, 1);
			continue;
		}
		struct wb_leg *leg = kvt__malloc(sizeof(*leg));
		if (!leg)
			continue;
		leg->w = w;
		leg->l = l;
		atomic_fetch_add(&w->remaining, 1);
		int rc = l->t->ops->write_chained
			     ? l->t->ops->write_chained(l->t, key, ref->has_parent ? &ref->parent : NULL,
							ref->buf, ref->object_bytes, wb_leg_done, leg)
			     : l->t->ops->write(l->t, key, ref->buf, ref->object_bytes, wb_leg_done,
						leg);
		if (rc < 0) {
			atomic_fetch_sub(&w->remaining, 1);
			kvt__free(leg);
			link_result(s, l, rc);
			if (!w->first_err)
				w->first_err = rc;
		}
	}
	wb_tier_done(w, 0);
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

/* The public calls take the engine's keys; everything below them - DRAM and every tier -
 * sees only storage keys, scoped by the store's namespace (src/store_key.h). */
static const struct kvt_key *skey(const struct kvt_store *s, const struct kvt_key *key,
				  struct kvt_key *out)
{
	return s ? kvt__storage_key(s->ns_id, key, out) : key;
}

static int skeys(const struct kvt_store *s, struct kvt_storage_keys *b, const struct kvt_key *keys,
		 size_t n)
{
	return s ? kvt__storage_keys(b, s->ns_id, keys, n) : ((b->keys = NULL), 0);
}

static int do_put(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		  uint32_t n_tokens, const void *buf, size_t len, kvt_cb cb, void *arg,
		  bool direct)
{
	if (!s || !key || !buf || !cb)
		return -EINVAL;
	if (n_tokens == 0 || n_tokens > s->geo.chunk_tokens ||
	    len != kvt_payload_bytes(&s->geo, n_tokens))
		return -EINVAL;
	if (!admit_inflight(s))
		return -EAGAIN;
	atomic_fetch_add(&s->puts, 1);
	admission_record(s, key);
	uint64_t obj_bytes = kvt_object_bytes(&s->geo, n_tokens);
	bool deeper = s->n_links > s->dram_pos + 1;
	struct kvt_result res = {.status = 0, .tier = KVT_TIER_NONE, .n_tokens = n_tokens,
				 .bytes = len};

	if (!s->dram) {
		struct kvt_slot_ref ref = {.id = -1, .object_bytes = obj_bytes, .n_tokens = n_tokens,
					   .has_parent = parent != NULL};
		if (parent)
			ref.parent = *parent;
		ref.buf = bounce_get(s);
		if (!ref.buf) {
			atomic_fetch_sub(&s->inflight, 1);
			return -ENOMEM;
		}
		kvt__object_encode(ref.buf, obj_bytes, &s->geo, s->ns_id, key, n_tokens, buf, len);
		kvt__object_protect(ref.buf, obj_bytes, s->prot); /* MAC, encryption */
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
		atomic_fetch_sub(&s->inflight, 1);
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
	if (rc == 0)
		rc = kvt__object_protect(ref.buf, obj_bytes, s->prot); /* MAC, encryption */
	if (rc < 0) {
		kvt__dram_abort(s->dram, ref.id);
		atomic_fetch_sub(&s->inflight, 1);
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
	struct kvt_key sk, sp;
	return do_put(s, skey(s, key, &sk), skey(s, parent, &sp), n_tokens, buf, len, cb, arg,
		      false);
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
	if (rc == 0)
		rc = kvt__object_protect(ref->buf, ref->object_bytes, s->prot);
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

static void chain_read_done(void *arg, int rc)
{
	struct chain_read *cr = arg;
	struct kvt_store *s = cr->s;
	struct link *l = &s->links[cr->pos];
	link_result(s, l, rc);
	if (rc > 0) {
		struct kvt_header h;
		struct kvt_expect exp = {.geometry = &s->geo, .ns_id = s->ns_id, .key = &cr->key,
					 .max_object_bytes = s->max_object_bytes};
		int v = kvt__object_verify(cr->buf, (uint64_t)rc, &exp, &h);
		int a = v ? v : kvt__object_authenticate(cr->buf, (uint64_t)rc, &h, s->prot);
		if (a < 0 && a != -EBADMSG) { /* sound, not ours to read (src/protect.h): kept */
			atomic_fetch_add(&l->misses, 1);
			KVT_DEBUG(&s->log, "tier %s: object not readable here: %s", l->name,
				  kvt_strerror(a));
			cr->pos++;
			chain_read_next(cr);
			return;
		}
		v = a; /* a MAC that does not verify is damage (or forgery): dropped below */
		if (v == 0) {
			atomic_fetch_add(&l->hits, 1);
			cr->done(cr, 0, &h);
			return;
		}
		/* A sound header of another namespace or geometry (an opaque key that another
		 * model also uses) means the object is not ours, not that it is damaged: a miss,
		 * and it stays for its owner. Only damage is dropped. */
		struct kvt_expect any = {.max_object_bytes = s->max_object_bytes};
		if (kvt__header_decode(cr->buf, &h, &any) == 0 &&
		    (!same_geometry(&h.geometry, &s->geo) ||
		     memcmp(h.ns_id, s->ns_id, KVT_NS_ID_BYTES))) {
			atomic_fetch_add(&l->misses, 1);
			KVT_DEBUG(&s->log, "tier %s holds this key for another namespace or geometry",
				  l->name);
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
		struct guard *g = guard_new(s, cr, chain_read_done, chain_read_expire);
		if (!g)
			continue;
		struct kvt_seg seg = {.off = 0, .len = s->obj_max, .buf = cr->buf};
		int rc = l->t->ops->read(l->t, &cr->key, &seg, 1, guard_cb, g);
		if (rc == 0) {
			guard_arm(g);
			return;
		}
		guard_cancel(g);
		link_result(s, l, rc);
	}
	cr->done(cr, -ENOENT, NULL);
}

/* The tier is too slow (store.tier_timeout_ms): a miss there. It may still write into the
 * buffer, so the buffer goes to the guard. A bounce read goes on to the next tier with a
 * fresh buffer; a fill cannot take a second slot for its key, so it fails (the get that
 * started it falls back to a bounce read). */
static void chain_read_expire(struct guard *g)
{
	struct chain_read *cr = g->op;
	struct kvt_store *s = cr->s;
	struct link *l = &s->links[cr->pos];
	link_result(s, l, -ETIMEDOUT);
	atomic_fetch_add(&l->misses, 1);
	KVT_WARN(&s->log, "tier %s: no answer within store.tier_timeout_ms; treated as a miss",
		 l->name);
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

static void chain_read_start(struct chain_read *cr, struct kvt_store *s, const struct kvt_key *key,
			     void *buf, bool in_slot,
			     void (*done)(struct chain_read *, int, const struct kvt_header *))
{
	cr->s = s;
	cr->key = *key;
	cr->buf = buf;
	cr->in_slot = in_slot;
	cr->lost = false;
	cr->pos = s->dram_pos + 1;
	cr->done = done;
	chain_read_next(cr);
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
		fill_finish(f, rc, KVT_TIER_NONE);
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
	chain_read_start(&f->cr, s, key, f->ref.buf, true, fill_read_done);
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
	return kvt__object_read_layers(h, obj, g->l0, g->l1, g->buf, g->len, s->prot);
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


static void get_acquired(void *arg, int rc, const struct kvt_slot_ref *ref, int tier)
{
	struct get_op *g = arg;
	struct kvt_store *s = g->s;
	if (rc < 0) {
		get_finish(g, rc, KVT_TIER_NONE, 0, 0);
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
	int64_t n = kvt__object_read_layers(h, cr->buf, g->l0, g->l1, g->buf, g->len, g->s->prot);
	if (n < 0)
		get_finish(g, (int)n, KVT_TIER_NONE, 0, 0);
	else
		get_finish(g, 0, cr->pos, h->n_tokens, (uint64_t)n);
}

static int get_bounce_start(struct get_op *g)
{
	g->bounce = bounce_get(g->s);
	if (!g->bounce)
		return -ENOMEM;
	chain_read_start(&g->cr, g->s, &g->key, g->bounce, false, get_bounce_done);
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
	if (!admit_inflight(s))
		return -EAGAIN;
	atomic_fetch_add(&s->gets, 1);
	struct get_op *g = kvt__calloc(1, sizeof(*g));
	if (!g) {
		atomic_fetch_sub(&s->inflight, 1);
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
	int rc = get_bounce_start(g);
	if (rc < 0) {
		kvt__free(g);
		atomic_fetch_sub(&s->inflight, 1);
	}
	return rc;
}

int kvt_get(struct kvt_store *s, const struct kvt_key *key, uint32_t layer_begin,
	    uint32_t layer_end, void *buf, size_t len, kvt_cb cb, void *arg)
{
	struct kvt_key sk;
	return do_get(s, skey(s, key, &sk), layer_begin, layer_end, buf, len, cb, arg, false);
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

static void lookup_done(void *arg, int rc)
{
	struct lookup_op *o = arg;
	struct link *l = &o->s->links[o->pos];
	link_result(o->s, l, rc);
	if (rc >= 0)
		for (uint32_t i = 0; i < o->n_ask; i++)
			if (o->present[i])
				o->tiers[o->ask_idx[i]] = (int8_t)o->pos;
	o->pos++;
	lookup_next(o);
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
		struct guard *g = guard_new(s, o, lookup_done, lookup_expire);
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
	struct kvt_store *s = o->s;
	size_t m = o->n ? o->n : 1;
	KVT_WARN(&s->log, "tier %s: no answer within store.tier_timeout_ms; treated as a miss",
		 s->links[o->pos].name);
	g->orphan_mem[0] = o->ask;
	g->orphan_mem[1] = o->present;
	o->ask = kvt__malloc(m * sizeof(*o->ask));
	o->present = kvt__calloc(m, 1);
	if (!o->ask || !o->present) {
		link_result(s, &s->links[o->pos], -ETIMEDOUT);
		lookup_finish(o); /* what faster tiers found */
		return;
	}
	lookup_done(o, -ETIMEDOUT);
}

static int do_lookup(struct kvt_store *s, const struct kvt_key *keys, size_t n, int8_t *tiers,
		     kvt_cb cb, void *arg, bool direct)
{
	if (!s || (!keys && n) || !cb || n > (1u << 24))
		return -EINVAL;
	if (!admit_inflight(s))
		return -EAGAIN;
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
		atomic_fetch_sub(&s->inflight, 1);
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
	struct kvt_storage_keys b;
	int rc = skeys(s, &b, keys, n);
	rc = rc ? rc : do_lookup(s, b.keys, n, tiers, cb, arg, false);
	kvt__storage_keys_free(&b);
	return rc;
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
	if (!admit_inflight(s)) {
		kvt__free(p->keys);
		kvt__free(p);
		return -EAGAIN;
	}
	atomic_fetch_add(&s->prefetches, 1);
	/* The lookup's completion continues the prefetch on the completing thread. */
	int rc = do_lookup(s, p->keys, n, NULL, prefetch_looked_up, p, true);
	if (rc < 0) {
		atomic_fetch_sub(&s->inflight, 1);
		kvt__free(p->keys);
		kvt__free(p);
	}
	return rc;
}

int kvt_prefetch(struct kvt_store *s, const struct kvt_key *keys, size_t n, uint64_t deadline_ns,
		 kvt_cb cb, void *arg)
{
	struct kvt_storage_keys b;
	int rc = skeys(s, &b, keys, n);
	rc = rc ? rc : do_prefetch(s, b.keys, n, deadline_ns, cb, arg, false);
	kvt__storage_keys_free(&b);
	return rc;
}

/* ------------------------------------------------------------ remove */

struct remove_op {
	struct kvt_store *s;
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

static void remove_leg_done(void *arg, int rc)
{
	struct remove_leg *leg = arg;
	link_result(leg->o->s, leg->l, rc);
	if (rc == 0)
		atomic_fetch_add(&leg->o->removed, 1);
	struct remove_op *o = leg->o;
	kvt__free(leg);
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
	if (!admit_inflight(s)) {
		kvt__free(o);
		return -EAGAIN;
	}
	o->s = s;
	o->cb = cb;
	o->arg = arg;
	o->direct = direct;
	atomic_store(&o->remaining, 1);
	if (s->dram) {
		int rc = kvt__dram_remove(s->dram, key);
		if (rc == 0 || rc == -EBUSY)
			atomic_fetch_add(&o->removed, 1);
	}
	for (int i = s->dram_pos + 1; i < s->n_links; i++) {
		struct link *l = &s->links[i];
		if (!link_usable(l))
			continue;
		struct remove_leg *leg = kvt__malloc(sizeof(*leg));
		if (!leg)
			continue;
		leg->o = o;
		leg->l = l;
		atomic_fetch_add(&o->remaining, 1);
		if (l->t->ops->remove(l->t, key, remove_leg_done, leg) < 0) {
			atomic_fetch_sub(&o->remaining, 1);
			kvt__free(leg);
		}
	}
	/* The last reference may be ours: complete through the queue (not inside this call
	 * unless direct, where the caller is a sync wrapper waiting for it). */
	remove_release(o);
	return 0;
}

int kvt_remove(struct kvt_store *s, const struct kvt_key *key, kvt_cb cb, void *arg)
{
	struct kvt_key sk;
	return do_remove(s, skey(s, key, &sk), cb, arg, false);
}

/* ------------------------------------------------------------ flush */

static int do_flush(struct kvt_store *s, kvt_cb cb, void *arg, bool direct)
{
	if (!s || !cb)
		return -EINVAL;
	struct flush_waiter *f = kvt__malloc(sizeof(*f));
	if (!f)
		return -ENOMEM;
	atomic_fetch_add(&s->inflight, 1);
	f->cb = cb;
	f->arg = arg;
	f->direct = direct;
	pthread_mutex_lock(&s->wb_lock);
	f->target = s->wb_seq;
	bool done = !s->wb_head || s->wb_head->seq > f->target;
	if (!done) {
		f->next = s->flushes;
		s->flushes = f;
	}
	pthread_mutex_unlock(&s->wb_lock);
	if (done) {
		struct kvt_result res = {.status = 0, .tier = KVT_TIER_NONE};
		complete(s, cb, arg, direct, &res);
		kvt__free(f);
	}
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
	struct kvt_key sk, sp;
	return waiter_wait(&w, do_put(s, skey(s, key, &sk), skey(s, parent, &sp), n_tokens, buf,
				      len, waiter_cb, &w, true),
			   NULL);
}

int kvt_lookup_sync(struct kvt_store *s, const struct kvt_key *keys, size_t n, int8_t *tiers)
{
	struct waiter w;
	waiter_init(&w);
	struct kvt_storage_keys b;
	int rc = skeys(s, &b, keys, n);
	rc = waiter_wait(&w, rc ? rc : do_lookup(s, b.keys, n, tiers, waiter_cb, &w, true), NULL);
	kvt__storage_keys_free(&b);
	return rc;
}

int kvt_get_sync(struct kvt_store *s, const struct kvt_key *key, uint32_t layer_begin,
		 uint32_t layer_end, void *buf, size_t len, struct kvt_result *res)
{
	struct waiter w;
	waiter_init(&w);
	struct kvt_key sk;
	return waiter_wait(&w, do_get(s, skey(s, key, &sk), layer_begin, layer_end, buf, len,
				      waiter_cb, &w, true),
			   res);
}

int kvt_prefetch_sync(struct kvt_store *s, const struct kvt_key *keys, size_t n,
		      uint64_t deadline_ns)
{
	struct waiter w;
	waiter_init(&w);
	struct kvt_storage_keys b;
	int rc = skeys(s, &b, keys, n);
	rc = waiter_wait(&w, rc ? rc : do_prefetch(s, b.keys, n, deadline_ns, waiter_cb, &w, true),
			 NULL);
	kvt__storage_keys_free(&b);
	return rc;
}

int kvt_remove_sync(struct kvt_store *s, const struct kvt_key *key)
{
	struct waiter w;
	waiter_init(&w);
	struct kvt_key sk;
	return waiter_wait(&w, do_remove(s, skey(s, key, &sk), waiter_cb, &w, true), NULL);
}

bool kvt__store_encrypts(const struct kvt_store *s)
{
	return kvt__protect_encrypts(s->prot);
}

int kvt__store_remove_stored_sync(struct kvt_store *s, const struct kvt_key *storage_key)
{
	struct waiter w;
	waiter_init(&w);
	return waiter_wait(&w, do_remove(s, storage_key, waiter_cb, &w, true), NULL);
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
