/*
 * tier_bounded.c - a tier's synchronous calls (open, close, scan, scan_anomalies) with a
 * time limit. They touch the device directly, and on a hung one (a stalled NFS or FUSE
 * mount, a dead disk) a system call can block in the kernel without end and no signal
 * gets it out. So each runs on a helper thread while the caller waits at most a bound
 * (store.sync_timeout_ms): past it the caller gets -ETIMEDOUT and goes on; the call is
 * left running, and whatever it still uses is released by the helper when (if ever) it
 * returns. A tier with a call left running is never closed or freed under it: closing
 * waits for it within the same bound, then gives up and leaves the tier allocated
 * (kvt__tier_close_bounded), which the engine reports and works around.
 *
 * Such a tier's late work must not reach the caller either: the caller may free what it
 * passed once the call returned. The eviction hook and the log sink go through gates the
 * caller closes when it gives up (an open past its bound; a close given up on, where the
 * store stays allocated for the hook but its owner may free the log's argument).
 *
 * The asynchronous calls need none of this: the engine's deadlines bound them
 * (src/engine_health.c). can_write and drop_corrupt must not block on I/O (src/tier.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "tier.h"

struct bcall {
	pthread_mutex_t m;
	pthread_cond_t c;
	bool done, abandoned;
	int64_t rc;
	int64_t (*fn)(void *arg);
	void (*orphan)(void *arg, int64_t rc); /* the caller gave up: release arg */
	void *arg;
	struct kvt_tier *busy; /* counted busy while fn runs (NULL: none) */
};

static void bcall_free(struct bcall *b)
{
	pthread_mutex_destroy(&b->m);
	pthread_cond_destroy(&b->c);
	kvt__free(b);
}

static void *bcall_main(void *p)
{
	struct bcall *b = p;
	int64_t rc = b->fn(b->arg);
	if (b->busy)
		atomic_fetch_sub(&b->busy->busy, 1);
	pthread_mutex_lock(&b->m);
	b->rc = rc;
	b->done = true;
	bool abandoned = b->abandoned;
	pthread_cond_signal(&b->c);
	pthread_mutex_unlock(&b->m);
	if (abandoned) { /* the caller is gone: b and arg are ours */
		if (b->orphan)
			b->orphan(b->arg, rc);
		bcall_free(b);
	}
	return NULL;
}

/* Run fn(arg) on a helper thread, wait at most ms. fn's result, or -ETIMEDOUT with
 * *gave_up set: then fn goes on, and orphan(arg, rc) runs after it (arg must not live on
 * the caller's stack). *gave_up, not the code, tells the two apart: fn may return
 * -ETIMEDOUT itself (a tier's own timeout, within the bound), and then arg is still the
 * caller's to free. */
static int64_t bounded(struct kvt_tier *busy, int64_t (*fn)(void *), void *arg,
		       void (*orphan)(void *, int64_t), uint64_t ms, bool *gave_up)
{
	*gave_up = false;
	struct bcall *b = kvt__calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	pthread_mutex_init(&b->m, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&b->c, &ca);
	pthread_condattr_destroy(&ca);
	b->fn = fn;
	b->arg = arg;
	b->orphan = orphan;
	b->busy = busy;
	if (busy)
		atomic_fetch_add(&busy->busy, 1);
	/* Joinable, joined when fn finishes in time: a call that returned leaves no thread
	 * behind (a process that forks after closing a store is single-threaded again, as
	 * fork wants); detached only when the caller gives up on it. */
	pthread_t th;
	int e = pthread_create(&th, NULL, bcall_main, b);
	if (e) {
		if (busy)
			atomic_fetch_sub(&busy->busy, 1);
		bcall_free(b);
		return -e;
	}
	struct timespec end;
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += (time_t)(ms / 1000);
	end.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (end.tv_nsec >= 1000000000L) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&b->m);
	while (!b->done && pthread_cond_timedwait(&b->c, &b->m, &end) != ETIMEDOUT)
		;
	if (b->done) {
		int64_t rc = b->rc;
		pthread_mutex_unlock(&b->m);
		pthread_join(th, NULL); /* it only unlocks and returns: b is still ours */
		bcall_free(b);
		return rc;
	}
	b->abandoned = true;
	pthread_mutex_unlock(&b->m);
	pthread_detach(th);
	*gave_up = true;
	return -ETIMEDOUT;
}

/* ------------------------------------------------------------ open */

/* The eviction hook goes through a gate: a tier whose open outlived its bound may still
 * report evictions while it recovers, after the opener (a store) has given up and been
 * freed. The opener closes the gate at the timeout; a report in flight finishes first.
 * Two references: the opener's, and the tier's (kvt__tier_close drops it). */
struct kvt_evict_gate {
	pthread_mutex_t m;
	bool closed;
	atomic_int refs;
	void (*fn)(void *arg, int index, const struct kvt_key *key, uint64_t bytes);
	void *arg;
};

static void gate_forward(void *arg, int index, const struct kvt_key *key, uint64_t bytes)
{
	struct kvt_evict_gate *g = arg;
	pthread_mutex_lock(&g->m);
	if (!g->closed)
		g->fn(g->arg, index, key, bytes);
	pthread_mutex_unlock(&g->m);
}

void kvt__evict_gate_put(struct kvt_evict_gate *g)
{
	if (g && atomic_fetch_sub(&g->refs, 1) == 1) {
		pthread_mutex_destroy(&g->m);
		kvt__free(g);
	}
}

/* The tier's log sink goes through a gate too (t->log, and the log of its configuration
 * copy): the caller's log function and argument are only valid until the call that gave
 * up returns. The gate closes then (open past its bound, close given up on): later
 * messages are dropped, and the close waits for those already inside the caller's function
 * (at most LOG_GATE_WAIT_MS: a logger that blocks must not turn a bounded call into a hang),
 * except one running on the closing thread itself. The lock is never held across the
 * caller's function, which may call back into the library or log from another thread.
 * Two references: the opener's, and the open's then the tier's (kvt__tier_close drops
 * it). */
#define LOG_GATE_WAIT_MS 1000

struct kvt_log_gate {
	pthread_mutex_t m;
	pthread_cond_t idle;
	bool closed;
	int inside; /* calls of the caller's function running now */
	atomic_int refs;
	struct kvt_log to;
};

static _Thread_local const struct kvt_log_gate *forwarding; /* on this thread, if any */

static void log_gate_forward(void *arg, int level, const char *msg)
{
	struct kvt_log_gate *g = arg;
	pthread_mutex_lock(&g->m);
	bool open = !g->closed;
	if (open)
		g->inside++;
	pthread_mutex_unlock(&g->m);
	if (!open)
		return;
	const struct kvt_log_gate *up = forwarding;
	forwarding = g;
	g->to.fn(g->to.arg, level, msg);
	forwarding = up;
	pthread_mutex_lock(&g->m);
	if (--g->inside == 0)
		pthread_cond_broadcast(&g->idle);
	pthread_mutex_unlock(&g->m);
}

static void log_gate_close(struct kvt_log_gate *g)
{
	if (!g)
		return;
	pthread_mutex_lock(&g->m);
	g->closed = true;
	int own = forwarding == g; /* this thread is inside the caller's function itself */
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += LOG_GATE_WAIT_MS / 1000;
	while (g->inside > own &&
	       pthread_cond_timedwait(&g->idle, &g->m, &until) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&g->m);
}

void kvt__log_gate_put(struct kvt_log_gate *g)
{
	if (g && atomic_fetch_sub(&g->refs, 1) == 1) {
		pthread_mutex_destroy(&g->m);
		pthread_cond_destroy(&g->idle);
		kvt__free(g);
	}
}

struct open_call {
	char name[32];
	struct kvt_config *cfg; /* a copy: the tier keeps it (t->own_cfg) */
	struct kvt_log log;     /* through lgate when the caller logs, else the caller's */
	struct kvt_log_gate *lgate; /* the open's reference (then the tier's); NULL: none */
	struct kvt_geometry geo;
	int index;
	struct kvt_evict_gate *gate; /* NULL: no eviction hook */
	struct kvt_tier *t;
};

static int64_t open_run(void *arg)
{
	struct open_call *o = arg;
	int rc = kvt__tier_open_hooked(o->name, o->cfg, &o->log, &o->geo, o->index,
				       o->gate ? gate_forward : NULL, o->gate, &o->t);
	if (rc == 0) {
		o->t->own_cfg = o->cfg; /* tiers may keep pointers into their configuration */
		o->cfg = NULL;
		o->t->own_gate = o->gate; /* the tier's reference */
		o->t->own_log_gate = o->lgate;
	} else {
		kvt__evict_gate_put(o->gate);
		kvt__log_gate_put(o->lgate);
	}
	o->gate = NULL;
	o->lgate = NULL;
	return rc;
}

static void open_orphan(void *arg, int64_t rc)
{
	struct open_call *o = arg;
	if (rc == 0)
		kvt__tier_close(o->t); /* opened too late: nobody wants it now */
	kvt_config_destroy(o->cfg);
	kvt__free(o);
}

int kvt__tier_open_bounded(const char *name, const struct kvt_config *cfg,
			   const struct kvt_log *log, const struct kvt_geometry *g, int index,
			   void (*on_evict)(void *, int, const struct kvt_key *, uint64_t),
			   void *on_evict_arg, uint64_t ms, struct kvt_tier **out)
{
	struct open_call *o = kvt__calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	snprintf(o->name, sizeof(o->name), "%s", name);
	int rc = kvt__config_copy(cfg, &o->cfg);
	if (rc < 0) {
		kvt__free(o);
		return rc;
	}
	o->log = *log;
	o->geo = *g;
	o->index = index;
	struct kvt_log_gate *lgate = NULL;
	if (log->fn) {
		if (!(lgate = kvt__calloc(1, sizeof(*lgate)))) {
			kvt_config_destroy(o->cfg);
			kvt__free(o);
			return -ENOMEM;
		}
		pthread_mutex_init(&lgate->m, NULL);
		pthread_condattr_t ca; /* timed waits on the monotonic clock */
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&lgate->idle, &ca);
		pthread_condattr_destroy(&ca);
		atomic_init(&lgate->refs, 2); /* ours, and the open's (then the tier's) */
		lgate->to = *log;
		o->lgate = lgate;
		o->log = (struct kvt_log){log_gate_forward, lgate, log->level};
		/* a tier may log through its configuration's sink too */
		kvt_config_set_log(o->cfg, log_gate_forward, lgate, log->level);
	}
	struct kvt_evict_gate *gate = NULL;
	if (on_evict) {
		if (!(gate = kvt__calloc(1, sizeof(*gate)))) {
			kvt__log_gate_put(lgate);
			kvt__log_gate_put(lgate);
			kvt_config_destroy(o->cfg);
			kvt__free(o);
			return -ENOMEM;
		}
		pthread_mutex_init(&gate->m, NULL);
		atomic_init(&gate->refs, 2); /* ours, and the open's (then the tier's) */
		gate->fn = on_evict;
		gate->arg = on_evict_arg;
		o->gate = gate;
	}
	bool gave_up;
	int64_t r = bounded(NULL, open_run, o, open_orphan, ms, &gave_up);
	if (!gave_up) { /* if bounded() failed before open_run ran, the open's references */
		kvt__evict_gate_put(o->gate);
		kvt__log_gate_put(o->lgate);
		o->gate = NULL;
		o->lgate = NULL;
	}
	if (gate) {
		if (gave_up) { /* the opener goes away: no report may reach it now */
			pthread_mutex_lock(&gate->m);
			gate->closed = true;
			pthread_mutex_unlock(&gate->m);
		}
		kvt__evict_gate_put(gate);
	}
	if (gave_up) /* the caller may free the log's argument once we return */
		log_gate_close(lgate);
	kvt__log_gate_put(lgate);
	if (gave_up) {
		KVT_ERR(log, "tier %s did not open within %llu ms (store.sync_timeout_ms): its "
			     "device or server does not answer",
			name, (unsigned long long)ms);
		return (int)r;
	}
	if (r == 0)
		*out = o->t;
	kvt_config_destroy(o->cfg);
	kvt__free(o);
	return (int)r;
}

/* ------------------------------------------------------------ close */

static int64_t close_run(void *arg)
{
	kvt__tier_close(arg);
	return 0;
}

int kvt__tier_close_bounded(struct kvt_tier *t, uint64_t ms)
{
	if (!t)
		return 0;
	/* a call left running in the tier: wait for it within the bound */
	uint64_t end = kvt__now_ns() + ms * 1000000ull;
	while (atomic_load(&t->busy) && kvt__now_ns() < end)
		usleep(2000);
	if (atomic_load(&t->busy)) {
		KVT_ERR(&t->log, "tier %s is still in a call left running after %llu ms "
				 "(store.sync_timeout_ms): left open, its memory not freed",
			t->ops->name, (unsigned long long)ms);
		log_gate_close(t->own_log_gate); /* the call left running logs no more */
		return -EBUSY;
	}
	uint64_t now = kvt__now_ns();
	uint64_t left = end > now ? (end - now) / 1000000ull : 0;
	/* t is gone once close_run returns: log through copies, the gate kept alive by a
	 * reference of ours (t->log goes through it when the tier was opened bounded) */
	struct kvt_log log = t->log;
	struct kvt_log_gate *lgate = t->own_log_gate;
	if (lgate)
		atomic_fetch_add(&lgate->refs, 1);
	const char *name = t->ops->name;
	bool gave_up;
	int64_t r = bounded(NULL, close_run, t, NULL, KVT_MAX(left, 1), &gave_up);
	if (gave_up) {
		KVT_ERR(&log, "tier %s did not close within %llu ms (store.sync_timeout_ms): "
			      "its device or server does not answer; left closing",
			name, (unsigned long long)ms);
		log_gate_close(lgate); /* the close left running logs no more */
	}
	kvt__log_gate_put(lgate);
	return (int)r;
}

/* ------------------------------------------------------------ scan */

struct scan_item {
	struct kvt_key key;
	uint64_t bytes;
};

struct scan_call {
	struct kvt_tier *t;
	struct scan_item *v;
	size_t n, cap;
	bool nomem;
};

static int scan_collect(void *arg, const struct kvt_key *key, uint64_t bytes)
{
	struct scan_call *c = arg;
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 1024;
		struct scan_item *v = realloc(c->v, cap * sizeof(*v));
		if (!v) {
			c->nomem = true;
			return 1;
		}
		c->v = v;
		c->cap = cap;
	}
	c->v[c->n++] = (struct scan_item){*key, bytes};
	return 0;
}

static int64_t scan_run(void *arg)
{
	struct scan_call *c = arg;
	int rc = c->t->ops->scan(c->t, scan_collect, c);
	return rc < 0 ? rc : c->nomem ? -ENOMEM : 0;
}

static void scan_orphan(void *arg, int64_t rc)
{
	struct scan_call *c = arg;
	(void)rc;
	free(c->v);
	kvt__free(c);
}

int kvt__tier_scan_bounded(struct kvt_tier *t, kvt_scan_fn fn, void *arg, uint64_t ms)
{
	if (!t->ops->scan)
		return -EOPNOTSUPP;
	struct scan_call *c = kvt__calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->t = t;
	bool gave_up;
	int64_t r = bounded(t, scan_run, c, scan_orphan, ms, &gave_up);
	if (gave_up) {
		KVT_ERR(&t->log, "tier %s: listing did not finish within %llu ms "
				 "(store.sync_timeout_ms): its device or server does not answer",
			t->ops->name, (unsigned long long)ms);
		return -ETIMEDOUT;
	}
	for (size_t i = 0; r == 0 && i < c->n; i++) /* on the caller's thread */
		if (fn(arg, &c->v[i].key, c->v[i].bytes))
			break;
	free(c->v);
	kvt__free(c);
	return (int)r;
}

/* ------------------------------------------------------------ scan_anomalies */

struct anom_call {
	struct kvt_tier *t;
	char *text; /* "path\0why\0" pairs */
	size_t len, cap;
	bool nomem;
};

static void anom_add(void *arg, const char *path, const char *why)
{
	struct anom_call *c = arg;
	size_t need = strlen(path) + strlen(why) + 2;
	if (c->len + need > c->cap) {
		size_t cap = KVT_MAX(2 * c->cap, c->len + need + 4096);
		char *p = realloc(c->text, cap);
		if (!p) {
			c->nomem = true;
			return;
		}
		c->text = p;
		c->cap = cap;
	}
	memcpy(c->text + c->len, path, strlen(path) + 1);
	c->len += strlen(path) + 1;
	memcpy(c->text + c->len, why, strlen(why) + 1);
	c->len += strlen(why) + 1;
}

static int64_t anom_run(void *arg)
{
	struct anom_call *c = arg;
	int rc = c->t->ops->scan_anomalies(c->t, anom_add, c);
	return rc < 0 ? rc : c->nomem ? -ENOMEM : 0;
}

static void anom_orphan(void *arg, int64_t rc)
{
	struct anom_call *c = arg;
	(void)rc;
	free(c->text);
	kvt__free(c);
}

int kvt__tier_scan_anomalies_bounded(struct kvt_tier *t,
				     void (*fn)(void *arg, const char *path, const char *why),
				     void *arg, uint64_t ms)
{
	if (!t->ops->scan_anomalies)
		return -EOPNOTSUPP;
	struct anom_call *c = kvt__calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->t = t;
	bool gave_up;
	int64_t r = bounded(t, anom_run, c, anom_orphan, ms, &gave_up);
	if (gave_up) {
		KVT_ERR(&t->log, "tier %s: checking entries did not finish within %llu ms "
				 "(store.sync_timeout_ms): its device or server does not answer",
			t->ops->name, (unsigned long long)ms);
		return -ETIMEDOUT;
	}
	for (size_t off = 0; r == 0 && off < c->len;) {
		const char *path = c->text + off;
		const char *why = path + strlen(path) + 1;
		fn(arg, path, why);
		off = (size_t)(why + strlen(why) + 1 - c->text);
	}
	free(c->text);
	kvt__free(c);
	return (int)r;
}
