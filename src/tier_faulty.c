/*
 * tier_faulty.c - a test-only tier that wraps any other tier and injects faults (after
 * SQLite's test_vfs.c): operations report failure, reads come back with a flipped byte, or
 * callbacks are delayed like a slow server. It exists so that the engine's promises - a
 * failed tier is a miss, corrupted bytes are never served, a slow tier does not stall the
 * caller forever - are tested on every build, next to the tests that stop real servers.
 *
 * Chain name "faulty"; faulty.inner names the wrapped tier (its own keys configure it).
 * Faults can be changed at run time with kvt__faulty_set().
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tier.h"
#include "tier_faulty.h"

struct faulty {
	struct kvt_tier *inner;
	_Atomic uint32_t fail_pct, corrupt_pct, delay_ms;
	_Atomic uint64_t rng;
	_Atomic uint64_t injected;
};

struct fcall {
	struct faulty *f;
	kvt_tier_cb cb;
	void *arg;
	bool is_read;
	struct kvt_seg seg0; /* first segment of a read, for corruption */
};

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
	if (d)
		usleep(d * 1000u);
	if (rc >= 0 && roll(f, atomic_load(&f->fail_pct))) {
		atomic_fetch_add(&f->injected, 1);
		rc = -EIO;
	} else if (c->is_read && rc > 0 && roll(f, atomic_load(&f->corrupt_pct))) {
		atomic_fetch_add(&f->injected, 1);
		uint64_t n = KVT_MIN((uint64_t)rc, c->seg0.len);
		if (n) {
			uint64_t at = (atomic_fetch_add(&f->rng, 7919) * 2654435761u) % n;
			((uint8_t *)c->seg0.buf)[at] ^= 0x20;
		}
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
	int rc = kvt__tier_open(name, cfg, &t->log, t->geometry, t->index, &f->inner);
	if (rc < 0)
		return rc;
	atomic_store(&f->fail_pct, (uint32_t)kvt__cfg_u64(cfg, "faulty.fail_pct"));
	atomic_store(&f->corrupt_pct, (uint32_t)kvt__cfg_u64(cfg, "faulty.corrupt_pct"));
	atomic_store(&f->delay_ms, (uint32_t)kvt__cfg_u64(cfg, "faulty.delay_ms"));
	atomic_store(&f->rng, kvt__cfg_u64(cfg, "faulty.seed") | 1);
	return 0;
}

static void faulty_close(struct kvt_tier *t)
{
	struct faulty *f = t->state;
	kvt__tier_close(f->inner);
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

static int faulty_write(struct kvt_tier *t, const struct kvt_key *key, const void *obj,
			uint64_t len, kvt_tier_cb cb, void *arg)
{
	WRAP(f->inner->ops->write(f->inner, key, obj, len, fcall_done, c));
}

static int faulty_remove(struct kvt_tier *t, const struct kvt_key *key, kvt_tier_cb cb,
			 void *arg)
{
	WRAP(f->inner->ops->remove(f->inner, key, fcall_done, c));
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
	.drop_corrupt = faulty_drop_corrupt,
};
