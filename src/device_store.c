/*
 * device_store.c - the device layer on top of the store: gather an engine's blocks
 * straight into a reserved DRAM slot (no extra host copy), and scatter a chunk acquired
 * from the store into an engine's blocks layer by layer.
 *
 * Tensor parallelism. Under TP each rank holds a slice of the heads; the canonical object
 * holds all of them, so one object is written by several ranks. Ranks of one process that
 * share a store meet in a process-wide "partial object" table keyed by (store, key): the
 * first rank reserves the slot, every rank claims the heads of its range no one has
 * claimed yet and gathers only those (ranks that replicate a head, TP > kv_heads, do not
 * write it twice), and the rank whose copy completes the last missing head publishes the
 * object with kvt__store_commit. Until then the slot stays pinned and invisible to readers,
 * so a half-written object is never served. A kvt_remove of the key before the publish
 * holds: the slot leaves DRAM's index and the commit drops it; a store issued after the
 * remove starts a new object (kvt__store_reserve_removed). A partial object no rank has
 * touched for STALE_NS (a rank died or never came) is cancelled by the next store call,
 * and those of a store being closed by its close (the table outlives stores: an entry left
 * behind would be expired on freed memory, or found by a new store given the same
 * address).
 *
 * A copy runs on after its call returned (on the device's stream, behind its dependency),
 * and its completion updates the table, publishes, releases or cancels a slot of the store
 * and queues the callback there. So every operation holds its store (kvt__store_dev_hold)
 * from its call until that is done, and kvt_store_close waits for none to hold it before
 * it forgets the store's entries: no copy can then leave or re-create one, nor touch the
 * store once it is freed.
 *
 * Ranks in different processes share a store through kvtierd (store.daemon): for a client
 * store the partial-object table is the daemon's (daemon/tp_commit.c), with the same rules;
 * each rank asks it for the slot and its claim (TP_RESERVE), gathers into the daemon's
 * pool, which the client maps writable, and reports its heads written (TP_WRITTEN); the
 * daemon publishes. See docs/DEVICE.md and docs/DAEMON.md.
 */
#include <errno.h>
#include <string.h>

#include "daemon_client.h"
#include "device.h"
#include "engine.h"
#include "store_key.h"

struct kvt_device_op *kvt__dev_op_new(struct kvt_device *dev, int dir, uint32_t n_tokens,
				      const uint32_t *ids, uint32_t n_blocks,
				      const struct kvt_device_dep *dep, int *rc);
void kvt__dev_op_put(struct kvt_device_op *op);

#define STALE_NS (60ull * 1000000000ull)

enum { HEAD_FREE = 0, HEAD_CLAIMED = 1, HEAD_WRITTEN = 2 };

struct partial {
	struct partial *next;
	struct kvt_store *s;
	struct kvt_key key;
	struct kvt_slot_ref ref;
	uint32_t n_tokens;
	uint32_t kv_heads;
	uint32_t written;
	int writers;
	int error; /* a rank's copy failed: the object is cancelled */
	/* a kvt_remove of the key overtook the reservation (kvt__store_reserve_removed): off
	 * the table, never published, cancelled once its last writer is done */
	bool removed;
	uint64_t touched_ns;
	uint8_t head[]; /* kv_heads states */
};

static pthread_mutex_t tab_mu = PTHREAD_MUTEX_INITIALIZER;
static struct partial *tab;

struct store_ctx {
	struct kvt_store *s;
	kvt_cb cb;
	void *arg;
	struct partial *p; /* NULL: nothing to copy */
	int early;	   /* status when nothing is copied */
	uint32_t n_tokens;
	/* store through kvtierd: the daemon's partial object this op claimed heads of */
	bool remote;
	struct kvt_key key;
	int32_t slot;
	uint64_t gen;
	/* load */
	struct kvt_slot_ref ref;
	bool have_ref;
	int tier;
	/* load through kvtierd: the slot the daemon pinned in the shared pool (not ref's) */
	struct kvt_client_pin pin;
	bool have_pin;
	uint8_t mine[]; /* store: heads [h0, h1) this op claimed (1) */
};

static int check_store(const struct kvt_device *dev, struct kvt_store *s)
{
	const struct kvt_geometry *a = kvt__store_geometry(s), *b = &dev->desc.geometry;
	if (!a || a->layers != b->layers || a->kv_heads != b->kv_heads ||
	    a->head_dim != b->head_dim || a->chunk_tokens != b->chunk_tokens ||
	    a->dtype != b->dtype || a->kind != b->kind)
		return -EINVAL;
	return 0;
}

static void unlink_partial(struct partial *p)
{
	for (struct partial **pp = &tab; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			return;
		}
	}
}

/* Cancel partial objects nobody has worked on for STALE_NS. tab_mu held. */
static void expire_stale(void)
{
	uint64_t now = kvt__now_ns();
	struct partial **pp = &tab;
	while (*pp) {
		struct partial *p = *pp;
		if (!p->writers && now - p->touched_ns > STALE_NS) {
			*pp = p->next;
			kvt__store_cancel(p->s, &p->ref);
			kvt__free(p);
		} else {
			pp = &p->next;
		}
	}
}

int kvt__dev_store_forget(struct kvt_store *s)
{
	int busy = 0;
	pthread_mutex_lock(&tab_mu);
	struct partial **pp = &tab;
	while (*pp) {
		struct partial *p = *pp;
		if (p->s != s) {
			pp = &p->next;
		} else if (p->writers) { /* never: its op holds s, and close waited for those */
			busy++;
			pp = &p->next;
		} else {
			*pp = p->next;
			kvt__store_cancel(s, &p->ref);
			kvt__free(p);
		}
	}
	pthread_mutex_unlock(&tab_mu);
	return busy;
}

int kvt__dev_store_partials(const struct kvt_store *s)
{
	int n = 0;
	pthread_mutex_lock(&tab_mu);
	for (struct partial *p = tab; p; p = p->next)
		n += p->s == s;
	pthread_mutex_unlock(&tab_mu);
	return n;
}

/* A context holds its store (kvt__store_dev_hold) from here until ctx_free. */
static struct store_ctx *ctx_new(struct kvt_store *s, size_t extra)
{
	struct store_ctx *c = kvt__calloc(1, sizeof(*c) + extra);
	if (c) {
		c->s = s;
		kvt__store_dev_hold(s);
	}
	return c;
}

/* The operation's last touch of its store: once released, a close may free it. */
static void ctx_free(struct store_ctx *c)
{
	struct kvt_store *s = c->s;
	kvt__free(c);
	kvt__store_dev_release(s);
}

static void store_finish(struct kvt_device_op *op)
{
	struct store_ctx *c = op->ctx;
	struct kvt_result res = {op->status, KVT_TIER_NONE, c->n_tokens, 0, 0};
	struct partial *p = c->p, *publish = NULL, *cancel = NULL;
	const struct kvt_device_desc *d = &op->dev->desc;
	if (c->remote) {
		int rc = kvt__client_tp_written(kvt__store_client(c->s), &c->key, c->slot,
						d->head_begin, d->head_end, op->status < 0, c->gen);
		res.status = op->status < 0 ? op->status : rc;
		if (res.status >= 0)
			res.bytes = op->bytes;
		goto out;
	}
	if (!p) {
		res.status = op->status < 0 ? op->status : c->early;
		goto out;
	}
	pthread_mutex_lock(&tab_mu);
	p->writers--;
	p->touched_ns = kvt__now_ns();
	if (op->status < 0 && !p->error)
		p->error = op->status;
	if (!p->error) {
		/* Heads of this range still CLAIMED were claimed by this op (others only claim
		 * FREE heads, and a claim is written by the op that made it). */
		for (uint32_t h = d->head_begin; h < d->head_end; h++) {
			if (c->mine[h - d->head_begin]) {
				p->head[h] = HEAD_WRITTEN;
				p->written++;
			}
		}
		res.bytes = op->bytes;
	}
	/* a removed object another store started afresh: -ECANCELED, as from kvtierd */
	res.status = p->error     ? p->error
		     : p->removed ? -ECANCELED
				  : (int)(p->kv_heads - p->written);
	if ((p->error || p->removed) && !p->writers) {
		unlink_partial(p);
		cancel = p;
	} else if (!p->error && !p->removed && p->written == p->kv_heads) {
		unlink_partial(p);
		publish = p;
	}
	pthread_mutex_unlock(&tab_mu);
	if (publish) {
		/* sealing or protecting (MAC, encryption) may fail: the slot is then dropped */
		int crc = kvt__store_commit(publish->s, &publish->ref);
		if (crc < 0)
			res.status = crc;
		kvt__free(publish);
	}
	if (cancel) {
		kvt__store_cancel(cancel->s, &cancel->ref);
		kvt__free(cancel);
	}
out:
	op->status = res.status;
	kvt__store_complete(c->s, c->cb, c->arg, &res);
	ctx_free(c);
}

/* Nothing for this rank to copy: complete with c->early. Unless that is an error, every
 * layer counts as done (the object holds it), so kvt_device_op_wait_layer answers 0. */
static int no_copy(struct kvt_device_op *op, struct kvt_device_op **opp)
{
	struct store_ctx *c = op->ctx;
	op->finish = store_finish;
	op->bytes = 0;
	if (c->early >= 0)
		__atomic_store_n(&op->layers_done, op->layers, __ATOMIC_RELEASE);
	kvt__dev_op_done(op, 0); /* the user callback is queued for kvt_poll, not run here */
	if (opp)
		*opp = op;
	else
		kvt__dev_op_put(op);
	return 0;
}

static int failed(struct kvt_device_op *op, struct store_ctx *c, int rc)
{
	op->ctx = NULL;
	kvt__dev_op_done(op, rc);
	kvt__dev_op_put(op);
	ctx_free(c);
	return rc;
}

/* A client store (store.daemon): the daemon keeps the partial object; this rank gets the
 * shared slot and the heads it is to write, gathers them into the daemon's pool, and
 * store_finish reports them written. */
static int store_remote(struct kvt_device *dev, struct store_ctx *c, struct kvt_device_op *op,
			const struct kvt_key *key, const struct kvt_key *parent, uint32_t n_tokens,
			struct kvt_device_op **opp)
{
	const struct kvt_device_desc *d = &dev->desc;
	struct kvt_client *cl = kvt__store_client(c->s);
	uint32_t missing = 0;
	void *obj = NULL;
	int rc = kvt__client_tp_reserve(cl, key, parent, n_tokens, d->head_begin, d->head_end,
					c->mine, &missing, &obj, &c->slot, &c->gen);
	if (rc == 1) { /* stored already: nothing to copy */
		c->early = 0;
		return no_copy(op, opp);
	}
	if (rc < 0)
		return failed(op, c, rc);
	bool claimed = false;
	for (uint32_t h = 0; h < dev->heads; h++)
		claimed |= c->mine[h];
	if (!claimed) { /* another rank holds the same heads (replicated KV heads) */
		c->early = (int)missing;
		return no_copy(op, opp);
	}
	c->remote = true;
	c->key = *key;
	op->obj = obj;
	op->finish = store_finish;
	if ((rc = dev->ops->submit(op)) < 0) {
		/* give the claims back: the daemon cancels the object */
		kvt__client_tp_written(cl, key, c->slot, d->head_begin, d->head_end, true, c->gen);
		op->finish = NULL;
		return failed(op, c, rc);
	}
	if (opp)
		*opp = op;
	else
		kvt__dev_op_put(op);
	return 0;
}

static int device_store(struct kvt_device *dev, struct kvt_store *s, const struct kvt_key *key,
			const struct kvt_key *parent, uint32_t n_tokens, const uint32_t *block_ids,
			uint32_t n_blocks, const struct kvt_device_dep *dep, kvt_cb cb, void *arg,
			struct kvt_device_op **opp)
{
	int rc;
	if (!dev || !s || !key || !cb || !block_ids || !n_tokens)
		return -EINVAL;
	if ((rc = check_store(dev, s)) < 0)
		return rc;
	const struct kvt_device_desc *d = &dev->desc;
	struct store_ctx *c = ctx_new(s, dev->heads);
	if (!c)
		return -ENOMEM;
	c->cb = cb;
	c->arg = arg;
	c->n_tokens = n_tokens;
	struct kvt_device_op *op =
	    kvt__dev_op_new(dev, KVT_DEV_GATHER, n_tokens, block_ids, n_blocks, dep, &rc);
	if (!op) {
		ctx_free(c);
		return rc;
	}
	op->ctx = c;
	if (kvt__store_client(s))
		return store_remote(dev, c, op, key, parent, n_tokens, opp);

	pthread_mutex_lock(&tab_mu);
	expire_stale();
	struct partial *p = tab;
	while (p && (p->s != s || memcmp(&p->key, key, sizeof(*key))))
		p = p->next;
	if (p && kvt__store_reserve_removed(s, &p->ref)) {
		/* A kvt_remove of the key came since this object was started: it is not to be
		 * published (its commit would drop it), and this store, issued after the
		 * remove, starts a new one rather than finishing it. It goes now, or when its
		 * last copy is done (store_finish). */
		unlink_partial(p);
		p->removed = true;
		if (!p->writers) {
			kvt__store_cancel(s, &p->ref);
			kvt__free(p);
		}
		p = NULL;
	}
	if (!p) {
		struct kvt_slot_ref ref;
		struct kvt_key sk, sp; /* the store's names: scoped by namespace */
		/* A deeper tier has as much to write as its deadline allows: the same bound as
		 * kvt_put's (engine_wb.c), so a save that would only queue a write bound to
		 * miss its deadline is refused before anything is copied. A partial object
		 * another rank started is always finished. */
		if (kvt__store_backlogged(s, kvt_object_bytes(&d->geometry, n_tokens))) {
			rc = -EAGAIN;
			goto fail_locked;
		}
		rc = kvt__store_reserve(s, kvt__storage_key(kvt__store_ns_id(s), key, &sk),
					kvt__storage_key(kvt__store_ns_id(s), parent, &sp),
					n_tokens, &ref);
		if (rc == -EEXIST) {
			c->early = 0; /* resident already: nothing to copy */
			goto nocopy;
		}
		if (rc < 0)
			goto fail_locked;
		p = kvt__calloc(1, sizeof(*p) + d->geometry.kv_heads);
		if (!p) {
			kvt__store_cancel(s, &ref);
			rc = -ENOMEM;
			goto fail_locked;
		}
		p->s = s;
		p->key = *key;
		p->ref = ref;
		p->n_tokens = n_tokens;
		p->kv_heads = d->geometry.kv_heads;
		p->next = tab;
		tab = p;
	} else if (p->n_tokens != n_tokens) {
		rc = -EINVAL;
		goto fail_locked;
	} else if (p->error) {
		c->early = p->error;
		goto nocopy;
	}
	p->touched_ns = kvt__now_ns();
	uint32_t claimed = 0;
	for (uint32_t h = d->head_begin; h < d->head_end; h++) {
		if (p->head[h] == HEAD_FREE) {
			p->head[h] = HEAD_CLAIMED;
			c->mine[h - d->head_begin] = 1;
			claimed++;
		}
	}
	if (!claimed) {
		/* Another rank holds the same heads (replicated KV heads) and writes them. */
		c->early = (int)(p->kv_heads - p->written);
		goto nocopy;
	}
	/* A rank that replicates part of a claimed range still gathers its whole range (the
	 * bytes are identical); only the heads it claimed count as written by it. */
	p->writers++;
	c->p = p;
	op->obj = p->ref.buf;
	op->finish = store_finish;
	pthread_mutex_unlock(&tab_mu);
	/* Submit outside tab_mu: it may block until the copy, and so the engine's dependency,
	 * is complete (cuda into a DRAM pool it has not pinned), and that dependency may wait
	 * for another rank of this process (a collective) whose call needs tab_mu. The claim
	 * is complete, and p cannot go while it is out: this op is one of its writers (none of
	 * expire_stale, kvt__dev_store_forget and a cancel frees one with writers), and its
	 * heads are not written (nothing publishes it). The op's finish may run, and publish p,
	 * before submit returns; p and c are not touched after a submit that took the op. */
	rc = dev->ops->submit(op);
	if (rc < 0) {
		/* Nothing of the op ran: give the claim back. If another rank's copy failed
		 * meanwhile (p->error) and this was p's last writer, cancel it, as the last
		 * writer's store_finish does; if no head of it is claimed or written any more
		 * (this rank made it, no one else came), leave no trace. */
		pthread_mutex_lock(&tab_mu);
		for (uint32_t h = d->head_begin; h < d->head_end; h++)
			if (c->mine[h - d->head_begin])
				p->head[h] = HEAD_FREE;
		p->writers--;
		p->touched_ns = kvt__now_ns();
		c->p = NULL;
		op->finish = NULL;
		bool untouched = !p->writers;
		for (uint32_t h = 0; h < p->kv_heads; h++)
			untouched &= p->head[h] == HEAD_FREE;
		if (untouched || ((p->error || p->removed) && !p->writers)) {
			unlink_partial(p);
			kvt__store_cancel(s, &p->ref);
			kvt__free(p);
		}
		goto fail_locked;
	}
	if (opp)
		*opp = op;
	else
		kvt__dev_op_put(op);
	return 0;

nocopy:
	pthread_mutex_unlock(&tab_mu);
	return no_copy(op, opp);

fail_locked:
	pthread_mutex_unlock(&tab_mu);
	return failed(op, c, rc);
}

/* ------------------------------------------------------------------ load */

static void load_finish(struct kvt_device_op *op)
{
	struct store_ctx *c = op->ctx;
	struct kvt_result res = {op->status, c->tier, c->have_ref ? c->ref.n_tokens : 0,
				 op->status < 0 ? 0 : op->bytes, 0};
	if (c->have_pin) {
		/* Only a pin the daemon confirms held through the scatter proves the blocks hold
		 * the object: a lease that ran out (this process stalled) or a dropped connection
		 * means the slot may have been refilled under the copy. */
		int urc = kvt__client_unpin(kvt__store_client(c->s), &c->pin);
		if (urc < 0 && res.status >= 0) {
			res.status = urc;
			res.bytes = 0;
			op->status = urc; /* kvt_device_op_wait says so too (until 2026-12-06: 0) */
		}
		/* Layers that ended after the pin was certainly held (pin_layer_check) wait for
		 * this confirmation; without it they stay not done and their waits fail. */
		if (res.status >= 0) {
			pthread_mutex_lock(&op->mu); /* waiters read it under op->mu */
			__atomic_store_n(&op->layers_done, op->layers, __ATOMIC_RELEASE);
			pthread_mutex_unlock(&op->mu);
		}
	} else if (c->have_ref) {
		kvt__store_release(c->s, &c->ref);
	}
	kvt__store_complete(c->s, c->cb, c->arg, &res);
	ctx_free(c);
}

/* A device load through kvtierd marks a layer ready (kvt_device_op_wait_layer) only while
 * its pin is certainly held: past the lease, or after a dropped connection, the daemon may
 * have refilled the slot under the copy, and an engine computing on that layer would use
 * another chunk's bytes (until 2026-12-06 layers were marked as they ended and only the
 * final result failed). */
static bool pin_layer_check(struct kvt_device_op *op)
{
	struct store_ctx *c = op->ctx;
	return kvt__client_pin_holds(kvt__store_client(c->s), &c->pin);
}

static void on_acquired(void *arg, int rc, const struct kvt_slot_ref *ref, int tier)
{
	struct kvt_device_op *op = arg;
	struct store_ctx *c = op->ctx;
	struct kvt_device *dev = op->dev;
	if (rc < 0)
		goto fail;
	c->ref = *ref;
	c->have_ref = true;
	c->tier = tier;
	uint32_t bs = dev->desc.block_size, have = op->plan.n_blocks;
	uint32_t need = (ref->n_tokens + bs - 1) / bs;
	rc = -EINVAL;
	if (need > have)
		goto fail;
	if ((rc = kvt__dev_plan_init(dev, ref->n_tokens, op->ids, need, &op->plan)) < 0)
		goto fail;
	op->bytes =
	    (uint64_t)op->plan.layers * op->plan.planes * ref->n_tokens * op->plan.row_bytes;
	op->obj = ref->buf;
	if ((rc = dev->ops->submit(op)) < 0)
		goto fail;
	return;
fail:
	kvt__dev_op_done(op, rc);
}

static int device_load(struct kvt_device *dev, struct kvt_store *s, const struct kvt_key *key,
		       const uint32_t *block_ids, uint32_t n_blocks,
		       const struct kvt_device_dep *dep, kvt_cb cb, void *arg,
		       struct kvt_device_op **opp)
{
	int rc;
	if (!dev || !s || !key || !cb || !block_ids || !n_blocks)
		return -EINVAL;
	if ((rc = check_store(dev, s)) < 0)
		return rc;
	if (kvt__store_encrypts(s)) /* DRAM holds ciphertext; the scatter copies slots as-is */
		return -ENOTSUP;
	uint32_t max_blocks = dev->desc.geometry.chunk_tokens / dev->desc.block_size;
	if (n_blocks > max_blocks)
		return -EINVAL;
	for (uint32_t i = 0; i < n_blocks; i++)
		if (block_ids[i] >= dev->desc.num_blocks)
			return -EINVAL;
	struct store_ctx *c = ctx_new(s, 0);
	if (!c)
		return -ENOMEM;
	c->cb = cb;
	c->arg = arg;
	c->tier = KVT_TIER_NONE;
	struct kvt_device_op *op =
	    kvt__dev_op_new(dev, KVT_DEV_SCATTER, 0, block_ids, n_blocks, dep, &rc);
	if (!op) {
		ctx_free(c);
		return rc;
	}
	op->ctx = c;
	op->finish = load_finish;
	struct kvt_client *cl = kvt__store_client(s);
	if (cl) { /* through kvtierd: scatter straight from the slot it pins in the shared pool */
		rc = kvt__client_pin(cl, key, &c->pin);
		struct kvt_slot_ref ref = {.id = -1};
		if (rc == 0) {
			c->have_pin = true;
			op->layer_check = pin_layer_check;
			ref.buf = (void *)c->pin.obj;
			ref.object_bytes = c->pin.object_bytes;
			ref.n_tokens = c->pin.n_tokens;
		}
		/* A miss completes through cb as well. c may be gone when this returns;
		 * load_finish unpins (have_pin goes before have_ref there). */
		on_acquired(op, rc, &ref, c->pin.tier);
		if (opp)
			*opp = op;
		else
			kvt__dev_op_put(op);
		return 0;
	}
	struct kvt_key sk; /* the store's name: scoped by namespace */
	if ((rc = kvt__store_acquire(s, kvt__storage_key(kvt__store_ns_id(s), key, &sk),
				     on_acquired, op)) < 0) {
		op->finish = NULL;
		op->ctx = NULL;
		kvt__dev_op_done(op, rc);
		kvt__dev_op_put(op);
		ctx_free(c);
		return rc;
	}
	if (opp)
		*opp = op;
	else
		kvt__dev_op_put(op);
	return 0;
}

/* The public calls: inside the store's call gate (engine.c), like every call on it. */
int kvt_device_store(struct kvt_device *dev, struct kvt_store *s, const struct kvt_key *key,
		     const struct kvt_key *parent, uint32_t n_tokens, const uint32_t *block_ids,
		     uint32_t n_blocks, const struct kvt_device_dep *dep, kvt_cb cb, void *arg,
		     struct kvt_device_op **opp)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	rc = device_store(dev, s, key, parent, n_tokens, block_ids, n_blocks, dep, cb, arg, opp);
	kvt__store_leave(s);
	return rc;
}

int kvt_device_load(struct kvt_device *dev, struct kvt_store *s, const struct kvt_key *key,
		    const uint32_t *block_ids, uint32_t n_blocks, const struct kvt_device_dep *dep,
		    kvt_cb cb, void *arg, struct kvt_device_op **opp)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	rc = device_load(dev, s, key, block_ids, n_blocks, dep, cb, arg, opp);
	kvt__store_leave(s);
	return rc;
}
