/*
 * tier_faulty.c - a test-only tier that wraps any other tier and injects faults (after
 * SQLite's test_vfs.c): operations report failure, reads come back with a flipped byte, or
 * callbacks are delayed like a slow server. It exists so that the engine's promises - a
 * failed tier is a miss, corrupted bytes are never served, a slow tier does not stall the
 * caller forever - are tested on every build, next to the tests that stop real servers.
 *
 * Chain name "faulty"; faulty.inner names the wrapped tier (its own keys configure it).
 * Faults can be changed at run time with kvt__faulty_set().
 *
 * A delay holds each answer back on the tier's own delay thread, not on the inner tier's
 * I/O thread: a slow device, whose calls each take delay_ms while others proceed. A very
 * long delay is a stalled device; close cancels (-ECANCELED) the answers still held.
 *
 * A gate (kvt__faulty_gate) holds writes by key until the test lets each one go, written
 * or failed: the engine's races between jobs of one key are forced step by step with it,
 * where a delay would leave their order to the clock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tier.h"
#include "tier_faulty.h"

struct fcall {
	struct fcall *next; /* held answers, by due time */
	uint64_t due;
	int64_t rc;
	struct faulty *f;
	kvt_tier_cb cb;
	void *arg;
	bool is_read;
	struct kvt_seg seg0; /* first segment of a read, for corruption */
	/* a write held back before it reaches the inner tier (kvt__faulty_set_write_delay, or
	 * the gate's list: kvt__faulty_gate) */
	bool submit;
	struct kvt_key key;
	const void *obj;
	uint64_t len;
};

struct faulty {
	struct kvt_tier *inner;
	_Atomic uint32_t fail_pct, corrupt_pct, delay_ms, write_delay_ms;
	uint32_t fail_errno; /* faulty.fail_errno: what an injected failure reports */
	_Atomic uint64_t write_rate; /* bytes/s of the one-lane write device, 0: off */
	uint64_t lane_free_ns;	     /* when that lane is done with the writes given it (m) */
	_Atomic uint64_t rng;
	_Atomic uint64_t injected;
	/* answers held back by the delay, and the thread that releases them */
	pthread_mutex_t m;
	pthread_cond_t cv; /* CLOCK_MONOTONIC */
	struct fcall *held;
	struct fcall *gated; /* writes the shut gate holds (m), till released or close */
	uint32_t n_gated;
	bool gate_shut;
	bool closing; /* held writes are cancelled, never submitted */
	bool stop;
	bool thread_started;
	pthread_t thread;
};

static void fcall_done(void *arg, int64_t rc);

/* A held write is due: hand it to the inner tier now (its answer comes back through
 * fcall_done), or cancel it when closing. Runs on the delay thread. */
static void submit_held(struct faulty *f, struct fcall *c, bool closing)
{
	c->submit = false;
	int rc = closing ? -ECANCELED
			 : f->inner->ops->write(f->inner, &c->key, c->obj, c->len, fcall_done, c);
	if (rc < 0) {
		kvt_tier_cb cb = c->cb;
		void *cbarg = c->arg;
		kvt__free(c);
		cb(cbarg, rc);
	}
}

static void *delay_main(void *arg)
{
	struct faulty *f = arg;
	pthread_mutex_lock(&f->m);
	for (;;) {
		struct fcall *c = f->held;
		uint64_t now = kvt__now_ns();
		if (c && (f->stop || c->due <= now || (c->submit && f->closing))) {
			f->held = c->next;
			bool closing = f->closing, stop = f->stop; /* read under the lock */
			pthread_mutex_unlock(&f->m);
			if (c->submit) {
				submit_held(f, c, closing);
				pthread_mutex_lock(&f->m);
				continue;
			}
			int64_t rc = stop && c->due > now ? -ECANCELED : c->rc;
			kvt_tier_cb cb = c->cb;
			void *cbarg = c->arg;
			kvt__free(c);
			cb(cbarg, rc);
			pthread_mutex_lock(&f->m);
			continue;
		}
		if (f->stop)
			break;
		if (c) {
			struct timespec ts = {.tv_sec = (time_t)(c->due / 1000000000ull),
					      .tv_nsec = (long)(c->due % 1000000000ull)};
			pthread_cond_timedwait(&f->cv, &f->m, &ts);
		} else {
			pthread_cond_wait(&f->cv, &f->m);
		}
	}
	pthread_mutex_unlock(&f->m);
	return NULL;
}

/* Hold an answer until due (sorted insert: the delay may change at run time). */
static void hold(struct faulty *f, struct fcall *c, int64_t rc, uint64_t delay_ns)
{
	c->rc = rc;
	c->due = kvt__now_ns() + delay_ns;
	pthread_mutex_lock(&f->m);
	struct fcall **pp = &f->held;
	while (*pp && (*pp)->due <= c->due)
		pp = &(*pp)->next;
	c->next = *pp;
	*pp = c;
	pthread_cond_signal(&f->cv);
	pthread_mutex_unlock(&f->m);
}

static bool roll(struct faulty *f, uint32_t pct)
{
	if (!pct)
		return false;
	uint64_t x = atomic_fetch_add(&f->rng, 0x9e3779b97f4a7c15ull);
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 29;
	return x % 100 < pct;
}

static void fcall_done(void *arg, int64_t rc)
{
	struct fcall *c = arg;
	struct faulty *f = c->f;
	uint32_t d = atomic_load(&f->delay_ms);
	if (rc >= 0 && roll(f, atomic_load(&f->fail_pct))) {
		atomic_fetch_add(&f->injected, 1);
		rc = -(int64_t)f->fail_errno;
	} else if (c->is_read && rc > 0 && roll(f, atomic_load(&f->corrupt_pct))) {
		atomic_fetch_add(&f->injected, 1);
		uint64_t n = KVT_MIN((uint64_t)rc, c->seg0.len);
		if (n) {
			uint64_t at = (atomic_fetch_add(&f->rng, 7919) * 2654435761u) % n;
			((uint8_t *)c->seg0.buf)[at] ^= 0x20;
		}
	}
	if (d) {
		hold(f, c, rc, (uint64_t)d * 1000000ull);
		return;
	}
	kvt_tier_cb cb = c->cb;
	void *cbarg = c->arg;
	kvt__free(c);
	cb(cbarg, rc);
}

static struct fcall *fcall_new(struct faulty *f, kvt_tier_cb cb, void *arg)
{
	struct fcall *c = kvt__calloc(1, sizeof(*c));
	if (c) {
		c->f = f;
		c->cb = cb;
		c->arg = arg;
	}
	return c;
}

#define WRAP(call)                                                                            \
	do {                                                                                  \
		struct faulty *f = t->state;                                                  \
		struct fcall *c = fcall_new(f, cb, arg);                                      \
		if (!c)                                                                       \
			return -ENOMEM;                                                       \
		int rc = (call);                                                              \
		if (rc < 0)                                                                   \
			kvt__free(c);                                                         \
		return rc;                                                                    \
	} while (0)

static int faulty_open(struct kvt_tier *t, const struct kvt_config *cfg)
{
	struct faulty *f = t->state;
	const char *inner = kvt__cfg_str(cfg, "faulty.inner");
	if (!strcmp(inner, "faulty") || !strcmp(inner, "dram")) {
		KVT_ERR(&t->log, "faulty.inner must name a deeper tier, not '%s'", inner);
		return -EINVAL;
	}
	char name[32];
	snprintf(name, sizeof(name), "%s", inner);
	int rc = kvt__tier_open_hooked(name, cfg, &t->log, t->geometry, t->index, t->on_evict,
				       t->on_evict_arg, &f->inner);
	if (rc < 0)
		return rc;
	pthread_mutex_init(&f->m, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&f->thread, NULL, delay_main, f) != 0) {
		kvt__tier_close(f->inner);
		pthread_cond_destroy(&f->cv);
		pthread_mutex_destroy(&f->m);
		return -EAGAIN;
	}
	f->thread_started = true;
	atomic_store(&f->fail_pct, (uint32_t)kvt__cfg_u64(cfg, "faulty.fail_pct"));
	f->fail_errno = (uint32_t)kvt__cfg_u64(cfg, "faulty.fail_errno");
	atomic_store(&f->corrupt_pct, (uint32_t)kvt__cfg_u64(cfg, "faulty.corrupt_pct"));
	atomic_store(&f->delay_ms, (uint32_t)kvt__cfg_u64(cfg, "faulty.delay_ms"));
	atomic_store(&f->rng, kvt__cfg_u64(cfg, "faulty.seed") | 1);
	atomic_store(&f->write_rate, kvt__cfg_u64(cfg, "faulty.write_bytes_per_s"));
	return 0;
}

static void faulty_close(struct kvt_tier *t)
{
	struct faulty *f = t->state;
	if (f->thread_started) { /* writes still held never reach the inner tier */
		pthread_mutex_lock(&f->m);
		while (f->gated) { /* the gate's too: cancelled by the delay thread */
			struct fcall *c = f->gated;
			f->gated = c->next;
			c->due = 0;
			c->next = f->held;
			f->held = c;
		}
		f->n_gated = 0;
		f->closing = true;
		pthread_cond_signal(&f->cv);
		pthread_mutex_unlock(&f->m);
	}
	kvt__tier_close(f->inner); /* every inner answer is now delivered or held */
	if (f->thread_started) {
		pthread_mutex_lock(&f->m);
		f->stop = true; /* held answers go out now, cancelled */
		pthread_cond_signal(&f->cv);
		pthread_mutex_unlock(&f->m);
		pthread_join(f->thread, NULL);
		pthread_cond_destroy(&f->cv);
		pthread_mutex_destroy(&f->m);
	}
}

static int faulty_exists(struct kvt_tier *t, const struct kvt_key *keys, uint32_t n,
			 uint8_t *present, kvt_tier_cb cb, void *arg)
{
	WRAP(f->inner->ops->exists(f->inner, keys, n, present, fcall_done, c));
}

static int faulty_read(struct kvt_tier *t, const struct kvt_key *key, const struct kvt_seg *segs,
		       uint32_t nsegs, kvt_tier_cb cb, void *arg)
{
	struct faulty *f = t->state;
	struct fcall *c = fcall_new(f, cb, arg);
	if (!c)
		return -ENOMEM;
	c->is_read = true;
	if (nsegs)
		c->seg0 = segs[0];
	int rc = f->inner->ops->read(f->inner, key, segs, nsegs, fcall_done, c);
	if (rc < 0)
		kvt__free(c);
	return rc;
}

/* A write passed to the inner tier later (held at the gate, or a slow device's). */
static struct fcall *write_call_new(struct faulty *fw, const struct kvt_key *key, const void *obj,
				    uint64_t len, kvt_tier_cb cb, void *arg)
{
	struct fcall *c = fcall_new(fw, cb, arg);
	if (c) {
		c->submit = true;
		c->key = *key;
		c->obj = obj;
		c->len = len;
	}
	return c;
}

static int faulty_write(struct kvt_tier *t, const struct kvt_key *key, const void *obj,
			uint64_t len, kvt_tier_cb cb, void *arg)
{
	struct faulty *fw = t->state;
	uint32_t wd = atomic_load(&fw->write_delay_ms);
	uint64_t rate = atomic_load(&fw->write_rate);
	pthread_mutex_lock(&fw->m);
	bool gate = fw->gate_shut;
	pthread_mutex_unlock(&fw->m);
	if (gate) { /* held as it is until kvt__faulty_gate_release (or close) */
		struct fcall *c = write_call_new(fw, key, obj, len, cb, arg);
		if (!c)
			return -ENOMEM;
		pthread_mutex_lock(&fw->m);
		c->next = fw->gated;
		fw->gated = c;
		fw->n_gated++;
		pthread_mutex_unlock(&fw->m);
		return 0;
	}
	if (wd || rate) { /* a slow device: the write lands only after wd ms, or its turn */
		struct fcall *c = write_call_new(fw, key, obj, len, cb, arg);
		if (!c)
			return -ENOMEM;
		uint64_t delay = (uint64_t)wd * 1000000ull;
		if (rate) {
			pthread_mutex_lock(&fw->m);
			uint64_t now = kvt__now_ns();
			uint64_t start = KVT_MAX(now, fw->lane_free_ns);
			fw->lane_free_ns = start + (uint64_t)((double)len * 1e9 / (double)rate);
			delay = fw->lane_free_ns - now;
			pthread_mutex_unlock(&fw->m);
		}
		hold(fw, c, 0, delay);
		return 0;
	}
	WRAP(f->inner->ops->write(f->inner, key, obj, len, fcall_done, c));
}

static int faulty_remove(struct kvt_tier *t, const struct kvt_key *key, kvt_tier_cb cb,
			 void *arg)
{
	WRAP(f->inner->ops->remove(f->inner, key, fcall_done, c));
}

static int faulty_flush(struct kvt_tier *t, kvt_tier_cb cb, void *arg)
{
	struct faulty *fy = t->state;
	if (fy->inner->ops->flush)
		WRAP(f->inner->ops->flush(f->inner, fcall_done, c));
	/* Nothing to make durable below: answer through the delay thread, never inline. */
	struct fcall *c = fcall_new(fy, cb, arg);
	if (!c)
		return -ENOMEM;
	hold(fy, c, 0, (uint64_t)atomic_load(&fy->delay_ms) * 1000000ull);
	return 0;
}

static void faulty_stats(struct kvt_tier *t, struct kvt_tier_stats *out)
{
	struct faulty *f = t->state;
	f->inner->ops->stats(f->inner, out);
}

static int faulty_scan(struct kvt_tier *t, kvt_scan_fn fn, void *arg)
{
	struct faulty *f = t->state;
	return f->inner->ops->scan ? f->inner->ops->scan(f->inner, fn, arg) : -ENOTSUP;
}

static void faulty_drop_corrupt(struct kvt_tier *t, const struct kvt_key *key)
{
	struct faulty *f = t->state;
	if (f->inner->ops->drop_corrupt)
		f->inner->ops->drop_corrupt(f->inner, key);
}

void kvt__faulty_set(struct kvt_tier *t, uint32_t fail_pct, uint32_t corrupt_pct,
		     uint32_t delay_ms)
{
	struct faulty *f = t->state;
	atomic_store(&f->fail_pct, fail_pct);
	atomic_store(&f->corrupt_pct, corrupt_pct);
	atomic_store(&f->delay_ms, delay_ms);
}

void kvt__faulty_set_write_delay(struct kvt_tier *t, uint32_t ms)
{
	struct faulty *f = t->state;
	atomic_store(&f->write_delay_ms, ms);
}

void kvt__faulty_set_write_rate(struct kvt_tier *t, uint64_t bytes_per_s)
{
	struct faulty *f = t->state;
	atomic_store(&f->write_rate, bytes_per_s);
}

void kvt__faulty_gate(struct kvt_tier *t, bool shut)
{
	struct faulty *f = t->state;
	pthread_mutex_lock(&f->m);
	f->gate_shut = shut;
	pthread_mutex_unlock(&f->m);
}

uint32_t kvt__faulty_gated(struct kvt_tier *t)
{
	struct faulty *f = t->state;
	pthread_mutex_lock(&f->m);
	uint32_t n = f->n_gated;
	pthread_mutex_unlock(&f->m);
	return n;
}

int kvt__faulty_gate_release(struct kvt_tier *t, const struct kvt_key *key, int rc)
{
	struct faulty *f = t->state;
	pthread_mutex_lock(&f->m);
	struct fcall **pp = &f->gated;
	while (*pp && !kvt__key_eq(&(*pp)->key, key))
		pp = &(*pp)->next;
	struct fcall *c = *pp;
	if (c) {
		*pp = c->next;
		f->n_gated--;
	}
	pthread_mutex_unlock(&f->m);
	if (!c)
		return -ENOENT;
	/* Through the delay thread, as every held call: never answered on the caller's. */
	c->submit = rc == 0;
	hold(f, c, rc, 0);
	return 0;
}

uint64_t kvt__faulty_injected(struct kvt_tier *t)
{
	struct faulty *f = t->state;
	return atomic_load(&f->injected);
}

const struct kvt_tier_ops kvt__tier_faulty_ops = {
	.name = "faulty",
	.version = 1,
	.state_size = sizeof(struct faulty),
	.open = faulty_open,
	.close = faulty_close,
	.exists = faulty_exists,
	.read = faulty_read,
	.write = faulty_write,
	.remove = faulty_remove,
	.stats = faulty_stats,
	.scan = faulty_scan,
	.flush = faulty_flush,
	.drop_corrupt = faulty_drop_corrupt,
};
