/*
 * held_tier.h - a store one of whose tiers answers late, as a device stalled on a call
 * would: the store race tests (store_late_writes.c, store_fill_races.c) route the tier
 * through held_ops (held_wrap), a copy of its vtable with their own entries, which submit
 * a chosen call late or pass its answer on late, each on a detached thread. held_out counts
 * the calls and answers still held. Also the fixture their sections share. One test program
 * includes it once: the state below is that program's. Include after engine.h, testlib.h
 * and tier.h.
 */
#ifndef KVT_TEST_HELD_TIER_H
#define KVT_TEST_HELD_TIER_H

#include <pthread.h>
#include <stdatomic.h>

static const struct kvt_tier_ops *inner_ops; /* the tier's own entries */
static struct kvt_tier_ops held_ops;
static _Atomic int held_out; /* calls or answers held, not yet passed on */

/* An answer passed on late: the first member of a test's record of a held call, so that
 * freeing it frees the record. */
struct held_answer {
	int ms; /* how long after the tier answered */
	kvt_tier_cb cb;
	void *arg;
	int64_t rc;
};

/* fn(arg) on a detached thread; false if none could start. */
static inline bool held_start(void *(*fn)(void *), void *arg)
{
	pthread_t th;
	if (pthread_create(&th, NULL, fn, arg))
		return false;
	pthread_detach(th);
	return true;
}

/* Passes the answer on a->ms late, frees a and lets go of the held_out it holds. */
static inline void *held_answer_later(void *p)
{
	struct held_answer *a = p;
	usleep((useconds_t)a->ms * 1000);
	a->cb(a->arg, a->rc);
	free(a);
	atomic_fetch_sub(&held_out, 1);
	return NULL;
}

/* A kvt_tier_cb for a held answer (arg: its struct held_answer): passed on a.ms later on a
 * thread of its own, or at once on this one if a.ms is 0 or no thread starts. */
static inline void held_answered(void *arg, int64_t rc)
{
	struct held_answer *a = arg;
	a->rc = rc;
	if (!a->ms || !held_start(held_answer_later, a)) {
		a->ms = 0;
		held_answer_later(a);
	}
}

/* Route the tier at chain position pos through held_ops: a copy of its entries, with the
 * test's own put in by own before the tier is switched over. */
static inline void held_wrap(struct kvt_store *s, int pos, void (*own)(struct kvt_tier_ops *))
{
	struct kvt_tier *t = kvt__store_tier(s, pos);
	inner_ops = t->ops;
	held_ops = *inner_ops;
	own(&held_ops);
	t->ops = &held_ops;
}

/* The store a section runs on, its configuration (kept for a reopen), one key and a
 * chunk's buffers. */
struct fixture {
	char dir[300];
	struct kvt_config *c;
	struct kvt_store *s;
	size_t len;
	uint32_t tokens;
	uint8_t *buf, *back;
	struct kvt_key k;
};

#endif
