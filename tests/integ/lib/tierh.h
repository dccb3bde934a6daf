/*
 * tierh.h - helpers for integration tests that drive one tier backend directly through its
 * vtable (src/tier.h), without the engine: open an instance from a configuration, wait for
 * a callback while checking the async contract (exactly once, never on the submitting
 * thread, so never inside the call), poll for one that must still be out (th_pending), and
 * self-checking test objects whose every byte is verifiable, so a torn or mixed object
 * cannot pass.
 */
#ifndef KVT_TEST_TIERH_H
#define KVT_TEST_TIERH_H

#include "check.h"
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "tier.h"


static inline void th_log(void *arg, int level, const char *msg)
{
	(void)arg;
	fprintf(stderr, "  [tier %s] %s\n", level == 0 ? "error" : level == 1 ? "warn" : "info",
		msg);
}

static inline int th_open(const struct kvt_tier_ops *ops, struct kvt_config *cfg,
			  struct kvt_tier **out)
{
	struct kvt_tier *t = calloc(1, sizeof(*t));
	CHECK(t);
	t->ops = ops;
	t->log.fn = th_log;
	t->log.level = getenv("KVT_TEST_VERBOSE") ? KVT_LOG_DEBUG : KVT_LOG_WARN;
	t->state = kvt__calloc(1, ops->state_size);
	CHECK(t->state);
	int rc = ops->open(t, cfg);
	if (rc < 0) {
		kvt__free(t->state);
		free(t);
		return rc;
	}
	*out = t;
	return 0;
}

static inline void th_close(struct kvt_tier *t)
{
	t->ops->close(t);
	kvt__free(t->state);
	free(t);
}

static inline struct kvt_config *th_config(const char *const *kv)
{
	struct kvt_config *cfg;
	char err[256];
	CHECK(kvt_config_create(&cfg) == 0);
	for (; kv && kv[0]; kv += 2) {
		if (kvt_config_set(cfg, kv[0], kv[1], err, sizeof(err)) < 0) {
			fprintf(stderr, "config %s=%s: %s\n", kv[0], kv[1], err);
			exit(1);
		}
	}
	return cfg;
}

/* Errors always, everything else with KVT_TEST_VERBOSE set. */
static inline void th_quiet_log(void *arg, int level, const char *msg)
{
	(void)arg;
	if (getenv("KVT_TEST_VERBOSE") || level <= KVT_LOG_ERROR)
		fprintf(stderr, "  [tier %d] %s\n", level, msg);
}

/* Open a backend by name through the registry (kvt__tier_open), as the store does, with
 * kv's settings; exits the test if it does not open. */
static inline struct kvt_tier *th_open_by_name(const char *name, const char *const *kv,
					       const struct kvt_geometry *geo)
{
	struct kvt_config *cfg = th_config(kv);
	struct kvt_log log = {th_quiet_log, NULL, KVT_LOG_DEBUG};
	struct kvt_tier *t;
	int rc = kvt__tier_open(name, cfg, &log, geo, 1, &t);
	kvt_config_destroy(cfg);
	if (rc < 0) {
		fprintf(stderr, "%s: open failed: %s\n", name, kvt_strerror(rc));
		exit(1);
	}
	return t;
}

static inline uint64_t th_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- one awaited callback ---- */
struct th_wait {
	pthread_mutex_t m;
	pthread_cond_t c;
	pthread_t submitter;
	int calls;
	int64_t result; /* a read's length may exceed 2 GiB */
	int contract_broken;
};

static inline void th_wait_init(struct th_wait *w)
{
	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->m, NULL);
	pthread_cond_init(&w->c, NULL);
	w->submitter = pthread_self();
}

static inline void th_cb(void *arg, int64_t result)
{
	struct th_wait *w = arg;
	pthread_mutex_lock(&w->m);
	if (pthread_equal(pthread_self(), w->submitter))
		w->contract_broken = 1;
	w->calls++;
	w->result = result;
	pthread_cond_broadcast(&w->c);
	pthread_mutex_unlock(&w->m);
}

/* After the submitting call returned rc: wait (up to timeout_ms) for the callback. Returns
 * its result; fails the test if the contract is broken or the callback never comes. */
static inline int64_t th_wait_done(struct th_wait *w, int rc, int timeout_ms)
{
	if (rc < 0) {
		pthread_mutex_lock(&w->m);
		CHECK_EQ(w->calls, 0);
		pthread_mutex_unlock(&w->m);
		return rc;
	}
	uint64_t end = th_now_ms() + (uint64_t)timeout_ms;
	pthread_mutex_lock(&w->m);
	while (!w->calls && th_now_ms() < end) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 10 * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&w->c, &w->m, &ts);
	}
	int calls = w->calls, broken = w->contract_broken;
	int64_t res = w->result;
	pthread_mutex_unlock(&w->m);
	if (!calls) {
		fprintf(stderr, "callback did not come within %d ms\n", timeout_ms);
		exit(1);
	}
	CHECK_EQ(calls, 1);
	CHECK(!broken);
	return res;
}

static inline void th_wait_fini(struct th_wait *w)
{
	/* a second callback arriving late would also be caught here */
	CHECK(w->calls <= 1);
	pthread_cond_destroy(&w->c);
	pthread_mutex_destroy(&w->m);
}

/* ---- a callback looked at without waiting for it (is the call still out?) ---- */
struct th_pending {
	_Atomic int done;
	_Atomic int64_t rc;
};

static inline void th_pending_cb(void *arg, int64_t rc)
{
	struct th_pending *w = arg;
	atomic_store(&w->rc, rc);
	atomic_store(&w->done, 1);
}

/* Wait up to ms for the callback, polling every 10 ms; true if it came. */
static inline bool th_pending_done_within(struct th_pending *w, int ms)
{
	for (int i = 0; i < ms / 10 && !atomic_load(&w->done); i++)
		usleep(10000);
	return atomic_load(&w->done);
}

#define TH_TIMEOUT 60000

static inline int th_write(struct kvt_tier *t, const struct kvt_key *k, const void *obj,
			   uint64_t len)
{
	struct th_wait w;
	th_wait_init(&w);
	int rc = th_wait_done(&w, t->ops->write(t, k, obj, len, th_cb, &w), TH_TIMEOUT);
	th_wait_fini(&w);
	return rc;
}

static inline int64_t th_read(struct kvt_tier *t, const struct kvt_key *k,
			      const struct kvt_seg *segs, uint32_t n)
{
	struct th_wait w;
	th_wait_init(&w);
	int64_t rc = th_wait_done(&w, t->ops->read(t, k, segs, n, th_cb, &w), TH_TIMEOUT);
	th_wait_fini(&w);
	return rc;
}

static inline int64_t th_read_all(struct kvt_tier *t, const struct kvt_key *k, void *buf,
				  uint64_t len)
{
	struct kvt_seg seg = {0, len, buf};
	return th_read(t, k, &seg, 1);
}

static inline int th_exists(struct kvt_tier *t, const struct kvt_key *keys, uint32_t n,
			    uint8_t *present)
{
	struct th_wait w;
	th_wait_init(&w);
	int rc = th_wait_done(&w, t->ops->exists(t, keys, n, present, th_cb, &w), TH_TIMEOUT);
	th_wait_fini(&w);
	return rc;
}

static inline int th_remove(struct kvt_tier *t, const struct kvt_key *k)
{
	struct th_wait w;
	th_wait_init(&w);
	int rc = th_wait_done(&w, t->ops->remove(t, k, th_cb, &w), TH_TIMEOUT);
	th_wait_fini(&w);
	return rc;
}

/* ---- self-checking objects ----
 * bytes [0,8) magic, [8,16) length, [16,24) seed, [24,28) CRC32C of [32, len), then
 * pseudo-random bytes from the seed. Any torn, truncated or mixed object fails th_obj_check. */
#define TH_MAGIC 0x4b56544f424a3031ull

static inline uint64_t th_rand(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* flush, waited for: its result */
static inline int th_flush(struct kvt_tier *t)
{
	struct th_wait w;
	th_wait_init(&w);
	int rc = (int)th_wait_done(&w, t->ops->flush(t, th_cb, &w), TH_TIMEOUT);
	th_wait_fini(&w);
	return rc;
}

/* 1 if the tier holds k, else 0 (its exists must answer) */
static inline int th_present(struct kvt_tier *t, const struct kvt_key *k)
{
	uint8_t p = 0;
	CHECK_EQ(th_exists(t, k, 1, &p), 0);
	return p;
}

static inline void th_key(struct kvt_key *k, uint64_t id, uint64_t salt)
{
	uint64_t x = id * 0x9e3779b97f4a7c15ull + salt + 1;
	for (int i = 0; i < 4; i++) {
		uint64_t v = th_rand(&x);
		memcpy(k->bytes + 8 * i, &v, 8);
	}
}

static inline void th_obj_fill(void *buf, uint64_t len, uint64_t seed)
{
	unsigned char *p = buf;
	uint64_t x = seed | 1;
	for (uint64_t i = 32; i + 8 <= len; i += 8) {
		uint64_t v = th_rand(&x);
		memcpy(p + i, &v, 8);
	}
	for (uint64_t i = len - (len - 32) % 8; i < len; i++)
		p[i] = (unsigned char)i;
	uint64_t magic = TH_MAGIC;
	memcpy(p, &magic, 8);
	memcpy(p + 8, &len, 8);
	memcpy(p + 16, &seed, 8);
	uint32_t crc = kvt__crc32c(0, p + 32, len - 32);
	memcpy(p + 24, &crc, 4);
	memset(p + 28, 0, 4);
}

/* 0 if buf holds a complete object of exactly len bytes; the seed in *seed. */
static inline int th_obj_check(const void *buf, uint64_t len, uint64_t *seed)
{
	const unsigned char *p = buf;
	uint64_t magic, l;
	uint32_t crc;
	if (len < 32)
		return -1;
	memcpy(&magic, p, 8);
	memcpy(&l, p + 8, 8);
	memcpy(&crc, p + 24, 4);
	if (magic != TH_MAGIC || l != len || kvt__crc32c(0, p + 32, len - 32) != crc)
		return -1;
	if (seed)
		memcpy(seed, p + 16, 8);
	return 0;
}

#endif
