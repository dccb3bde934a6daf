/*
 * device.c - the device layer's common part: registering an engine's paged KV cache,
 * choosing a transfer backend (emu or cuda), the row index math shared by all backends,
 * and the operation object (a gather or a scatter) with its per-layer completion.
 *
 * Backends only copy bytes. Everything about where bytes go is computed here (a plan per
 * operation) so that emu, cuda and the tests agree by construction. An operation is
 * reference counted - one reference for the caller's handle, one while it is in flight -
 * so a caller may free its handle early and a backend may finish late. Completion runs the
 * store-level finish hook first (publish a slot, queue the user callback), then wakes
 * waiters: when kvt_device_op_wait() returns, the store already sees the result.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "device.h"

static const struct kvt_dev_ops *const backends[] = {
#ifdef KVT_HAVE_CUDA
    &kvt__dev_cuda_ops,
#endif
    &kvt__dev_emu_ops,
};

static const struct kvt_dev_ops *find_backend(const char *name)
{
	for (size_t i = 0; i < KVT_ARRAY_SIZE(backends); i++)
		if (!strcmp(backends[i]->name, name))
			return backends[i];
	return NULL;
}

bool kvt__dev_backend_available(const char *name)
{
	const struct kvt_dev_ops *o = find_backend(name);
	return o && (!o->available || o->available());
}

/* ------------------------------------------------------------ index math */

int kvt__dev_plan_init(const struct kvt_device *dev, uint32_t n_tokens, const uint32_t *ids,
		       uint32_t n_blocks, struct kvt_dev_plan *pl)
{
	const struct kvt_device_desc *d = &dev->desc;
	const struct kvt_geometry *g = &d->geometry;
	if (!n_tokens || n_tokens > g->chunk_tokens || !ids)
		return -EINVAL;
	if (n_blocks != (n_tokens + d->block_size - 1) / d->block_size)
		return -EINVAL;
	for (uint32_t i = 0; i < n_blocks; i++)
		if (ids[i] >= d->num_blocks)
			return -EINVAL;
	memset(pl, 0, sizeof(*pl));
	pl->layers = g->layers;
	pl->planes = g->kind == KVT_KIND_MLA ? 1 : 2;
	pl->n_tokens = n_tokens;
	pl->block_size = d->block_size;
	pl->n_blocks = n_blocks;
	pl->ids = ids;
	uint64_t head = (uint64_t)g->head_dim * dev->es;
	pl->row_bytes = dev->heads * head;
	pl->obj_row_pitch = g->kv_heads * head;
	pl->obj_head_off = d->head_begin * head;
	pl->obj_plane_bytes = n_tokens * pl->obj_row_pitch;
	uint64_t block = (uint64_t)d->block_size * pl->row_bytes;
	switch (d->layout) {
	case KVT_LAYOUT_FLASH_ATTN:
		pl->dev_block_stride = block;
		pl->dev_plane_stride = (uint64_t)d->num_blocks * block;
		break;
	case KVT_LAYOUT_FLASHINFER:
		pl->dev_block_stride = 2 * block;
		pl->dev_plane_stride = block;
		break;
	case KVT_LAYOUT_MLA:
		pl->dev_block_stride = block;
		pl->dev_plane_stride = 0;
		break;
	default:
		return -EINVAL;
	}
	for (uint32_t l = 0; l < g->layers; l++)
		pl->layer_off[l] = kvt_layer_offset(g, n_tokens, l);
	return 0;
}

int kvt__dev_plan_runs(const struct kvt_dev_plan *pl, uint32_t l,
		       int (*fn)(void *arg, uint64_t dev_off, uint64_t obj_off, uint64_t len),
		       void *arg)
{
	bool dense = pl->row_bytes == pl->obj_row_pitch;
	for (uint32_t p = 0; p < pl->planes; p++) {
		for (uint32_t t0 = 0; t0 < pl->n_tokens; t0 += pl->block_size) {
			uint32_t t1 = KVT_MIN(t0 + pl->block_size, pl->n_tokens);
			if (dense) {
				int rc = fn(arg, kvt__dev_row_dev_off(pl, p, t0),
					    kvt__dev_row_obj_off(pl, l, p, t0),
					    (t1 - t0) * pl->row_bytes);
				if (rc)
					return rc;
				continue;
			}
			for (uint32_t t = t0; t < t1; t++) {
				int rc = fn(arg, kvt__dev_row_dev_off(pl, p, t),
					    kvt__dev_row_obj_off(pl, l, p, t), pl->row_bytes);
				if (rc)
					return rc;
			}
		}
	}
	return 0;
}

/* -------------------------------------------------------------- devices */

static int check_desc(const struct kvt_device_desc *d)
{
	if (!d || d->size < sizeof(*d))
		return -EINVAL;
	const struct kvt_geometry *g = &d->geometry;
	if (kvt_geometry_check(g) < 0 || !d->layer_base)
		return -EINVAL;
	if (!d->block_size || g->chunk_tokens % d->block_size || !d->num_blocks)
		return -EINVAL;
	if (d->head_begin >= d->head_end || d->head_end > g->kv_heads)
		return -EINVAL;
	bool mla = g->kind == KVT_KIND_MLA;
	if (mla != (d->layout == KVT_LAYOUT_MLA))
		return -EINVAL;
	if (d->layout != KVT_LAYOUT_FLASH_ATTN && d->layout != KVT_LAYOUT_FLASHINFER &&
	    d->layout != KVT_LAYOUT_MLA)
		return -EINVAL;
	for (uint32_t l = 0; l < g->layers; l++)
		if (!d->layer_base[l])
			return -EINVAL;
	return 0;
}

int kvt_device_open(const struct kvt_config *cfg, const char *backend,
		    const struct kvt_device_desc *desc, struct kvt_device **out)
{
	struct kvt_config *defcfg = NULL;
	struct kvt_device *dev = NULL;
	int rc;
	if (!out || !desc || check_desc(desc) < 0)
		return -EINVAL;
	if (!cfg) {
		if ((rc = kvt_config_create(&defcfg)) < 0)
			return rc;
		cfg = defcfg;
	}
	if (!backend)
		backend = kvt__cfg_str(cfg, "device.backend");
	const struct kvt_dev_ops *ops;
	if (!strcmp(backend, "auto")) {
		ops = &kvt__dev_emu_ops;
		for (size_t i = 0; i < KVT_ARRAY_SIZE(backends); i++) {
			if (!backends[i]->available || backends[i]->available()) {
				ops = backends[i];
				break;
			}
		}
	} else if (!(ops = find_backend(backend))) {
		rc = !strcmp(backend, "cuda") ? -ENODEV : -EINVAL;
		goto fail;
	} else if (ops->available && !ops->available()) {
		rc = -ENODEV;
		goto fail;
	}
	rc = -ENOMEM;
	if (!(dev = kvt__calloc(1, sizeof(*dev))))
		goto fail;
	dev->ops = ops;
	dev->desc = *desc;
	dev->desc.size = sizeof(dev->desc);
	dev->log = *kvt__cfg_log(cfg);
	dev->emu_gbps = (double)kvt__cfg_double(cfg, "device.emu_gbps");
	dev->emu_pageable = kvt__cfg_bool(cfg, "device.emu_pageable");
	dev->es = kvt_dtype_bytes(desc->geometry.dtype);
	dev->heads = desc->head_end - desc->head_begin;
	if (!(dev->base = kvt__calloc(desc->geometry.layers, sizeof(void *))))
		goto fail_dev;
	memcpy(dev->base, desc->layer_base, desc->geometry.layers * sizeof(void *));
	dev->desc.layer_base = dev->base;
	pthread_mutex_init(&dev->mu, NULL);
	pthread_cond_init(&dev->cv, NULL);
	if ((rc = ops->open(dev)) < 0)
		goto fail_sync;
	KVT_INFO(&dev->log, "device: %s backend, layout %u, heads [%u, %u) of %u, %u blocks of %u",
		 ops->name, desc->layout, desc->head_begin, desc->head_end, desc->geometry.kv_heads,
		 desc->num_blocks, desc->block_size);
	kvt_config_destroy(defcfg);
	*out = dev;
	return 0;

fail_sync:
	pthread_cond_destroy(&dev->cv);
	pthread_mutex_destroy(&dev->mu);
	kvt__free(dev->base);
fail_dev:
	kvt__free(dev);
fail:
	kvt_config_destroy(defcfg);
	return rc;
}

void kvt_device_close(struct kvt_device *dev)
{
	if (!dev)
		return;
	pthread_mutex_lock(&dev->mu);
	while (dev->inflight)
		pthread_cond_wait(&dev->cv, &dev->mu);
	pthread_mutex_unlock(&dev->mu);
	dev->ops->close(dev);
	pthread_cond_destroy(&dev->cv);
	pthread_mutex_destroy(&dev->mu);
	kvt__free(dev->base);
	kvt__free(dev);
}

const char *kvt_device_backend(const struct kvt_device *dev)
{
	return dev ? dev->ops->name : "";
}

int kvt_device_host_register(struct kvt_device *dev, void *ptr, size_t len)
{
	if (!dev || !ptr || !len)
		return -EINVAL;
	return dev->ops->host_register ? dev->ops->host_register(dev, ptr, len) : 0;
}

int kvt_device_host_unregister(struct kvt_device *dev, void *ptr)
{
	if (!dev || !ptr)
		return -EINVAL;
	return dev->ops->host_unregister ? dev->ops->host_unregister(dev, ptr) : 0;
}

int kvt__dev_mem_alloc(struct kvt_device *dev, size_t n, void **out)
{
	return dev->ops->mem_alloc(dev, n, out);
}

void kvt__dev_mem_free(struct kvt_device *dev, void *p)
{
	dev->ops->mem_free(dev, p);
}

int kvt__dev_mem_to_dev(struct kvt_device *dev, void *dst, const void *src, size_t n)
{
	return dev->ops->mem_to_dev(dev, dst, src, n);
}

int kvt__dev_mem_to_host(struct kvt_device *dev, void *dst, const void *src, size_t n)
{
	return dev->ops->mem_to_host(dev, dst, src, n);
}

/* ----------------------------------------------------------- operations */

/* Exported to device_store.c through these two (not in device.h: not for backends). */
struct kvt_device_op *kvt__dev_op_new(struct kvt_device *dev, int dir, uint32_t n_tokens,
				      const uint32_t *ids, uint32_t n_blocks,
				      const struct kvt_device_dep *dep, int *rc);
void kvt__dev_op_put(struct kvt_device_op *op);

/* The block ids a call hands in, checked before one is read: with n_tokens, exactly
 * ceil(n_tokens / block_size) of them; without (a load: the slot gives n_tokens later),
 * 1 .. blocks per chunk. The ids themselves are checked by kvt__dev_plan_init. */
static int check_ids(const struct kvt_device *dev, uint32_t n_tokens, const uint32_t *ids,
		     uint32_t n_blocks)
{
	const struct kvt_device_desc *d = &dev->desc;
	if (!ids || !n_blocks || n_blocks > d->geometry.chunk_tokens / d->block_size)
		return -EINVAL;
	if (n_tokens && (n_tokens > d->geometry.chunk_tokens ||
			 n_blocks != (n_tokens + d->block_size - 1) / d->block_size))
		return -EINVAL;
	return 0;
}

struct kvt_device_op *kvt__dev_op_new(struct kvt_device *dev, int dir, uint32_t n_tokens,
				      const uint32_t *ids, uint32_t n_blocks,
				      const struct kvt_device_dep *dep, int *rc)
{
	if ((*rc = check_ids(dev, n_tokens, ids, n_blocks)) < 0)
		return NULL;
	struct kvt_device_op *op = kvt__calloc(1, sizeof(*op));
	if (!op || !(op->ids = kvt__malloc(n_blocks * sizeof(uint32_t)))) {
		kvt__free(op);
		*rc = -ENOMEM;
		return NULL;
	}
	memcpy(op->ids, ids, n_blocks * sizeof(uint32_t));
	op->dev = dev;
	op->dir = dir;
	op->layers = dev->desc.geometry.layers;
	if (dep)
		op->dep = *dep;
	op->refs = 2;
	op->plan.layers = dev->desc.geometry.layers;
	op->plan.n_blocks = n_blocks;
	pthread_mutex_init(&op->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* wait deadlines are monotonic */
	pthread_cond_init(&op->cv, &ca);
	pthread_condattr_destroy(&ca);
	/* n_tokens 0: the caller fills the plan later (a load learns it from the slot). */
	if (n_tokens &&
	    (*rc = kvt__dev_plan_init(dev, n_tokens, op->ids, n_blocks, &op->plan)) < 0) {
		pthread_cond_destroy(&op->cv);
		pthread_mutex_destroy(&op->mu);
		kvt__free(op->ids);
		kvt__free(op);
		return NULL;
	}
	/* The dependency as it is now, at the call: the copy may be submitted later, from
	 * another thread (a load, once its chunk is acquired). */
	if (dev->ops->dep_capture && (*rc = dev->ops->dep_capture(op)) < 0) {
		pthread_cond_destroy(&op->cv);
		pthread_mutex_destroy(&op->mu);
		kvt__free(op->ids);
		kvt__free(op);
		return NULL;
	}
	op->bytes = (uint64_t)op->plan.layers * op->plan.planes * n_tokens * op->plan.row_bytes;
	pthread_mutex_lock(&dev->mu);
	dev->inflight++;
	pthread_mutex_unlock(&dev->mu);
	*rc = 0;
	return op;
}

static void op_free(struct kvt_device_op *op)
{
	pthread_cond_destroy(&op->cv);
	pthread_mutex_destroy(&op->mu);
	kvt__free(op->ids);
	kvt__free(op);
}

/* Drop one reference. */
void kvt__dev_op_put(struct kvt_device_op *op)
{
	pthread_mutex_lock(&op->mu);
	bool last = --op->refs == 0;
	pthread_mutex_unlock(&op->mu);
	if (last)
		op_free(op);
}

void kvt__dev_layer_done(struct kvt_device_op *op, uint32_t layer)
{
	bool trusted = !op->layer_check || op->layer_check(op);
	pthread_mutex_lock(&op->mu);
	if (!trusted)
		op->layers_held = true;
	/* Backends complete layers in order; a gap would be a backend bug. */
	if (layer == op->layers_done && !op->layers_held)
		__atomic_store_n(&op->layers_done, layer + 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&op->cv);
	pthread_mutex_unlock(&op->mu);
}

void kvt__dev_op_done(struct kvt_device_op *op, int status)
{
	struct kvt_device *dev = op->dev;
	if (dev->ops->dep_release)
		dev->ops->dep_release(op); /* every copy of the op is complete, or none began */
	op->status = status;
	if (op->finish)
		op->finish(op); /* may rewrite op->status (store-level result) */
	pthread_mutex_lock(&op->mu);
	op->done = true;
	pthread_cond_broadcast(&op->cv);
	pthread_mutex_unlock(&op->mu);
	kvt__dev_op_put(op);
	pthread_mutex_lock(&dev->mu);
	if (!--dev->inflight)
		pthread_cond_broadcast(&dev->cv);
	pthread_mutex_unlock(&dev->mu);
}

static int buffer_op(struct kvt_device *dev, int dir, void *obj, size_t obj_len, uint32_t n_tokens,
		     const uint32_t *ids, uint32_t n_blocks, const struct kvt_device_dep *dep,
		     struct kvt_device_op **out)
{
	int rc;
	if (!dev || !obj || !out || !n_tokens || n_tokens > dev->desc.geometry.chunk_tokens)
		return -EINVAL;
	if (obj_len < kvt_object_bytes(&dev->desc.geometry, n_tokens))
		return -EINVAL;
	struct kvt_device_op *op = kvt__dev_op_new(dev, dir, n_tokens, ids, n_blocks, dep, &rc);
	if (!op)
		return rc;
	op->obj = obj;
	if ((rc = dev->ops->submit(op)) < 0) {
		/* Nobody waits yet: drop the in-flight reference, then the caller's. */
		kvt__dev_op_done(op, rc);
		kvt__dev_op_put(op);
		return rc;
	}
	*out = op;
	return 0;
}

int kvt_device_gather(struct kvt_device *dev, const uint32_t *block_ids, uint32_t n_blocks,
		      uint32_t n_tokens, void *obj, size_t obj_len,
		      const struct kvt_device_dep *dep, struct kvt_device_op **op)
{
	return buffer_op(dev, KVT_DEV_GATHER, obj, obj_len, n_tokens, block_ids, n_blocks, dep, op);
}

int kvt_device_scatter(struct kvt_device *dev, const void *obj, size_t obj_len, uint32_t n_tokens,
		       const uint32_t *block_ids, uint32_t n_blocks,
		       const struct kvt_device_dep *dep, struct kvt_device_op **op)
{
	return buffer_op(dev, KVT_DEV_SCATTER, (void *)obj, obj_len, n_tokens, block_ids, n_blocks,
			 dep, op);
}

/* Wait on op->cv until pred holds or the deadline passes. Called with op->mu held. */
static int wait_until(struct kvt_device_op *op, uint32_t need_layers, int timeout_ms)
{
	struct timespec dl;
	if (timeout_ms >= 0) {
		clock_gettime(CLOCK_MONOTONIC, &dl); /* op->cv's clock: immune to wall steps */
		dl.tv_sec += timeout_ms / 1000;
		dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (dl.tv_nsec >= 1000000000L) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000L;
		}
	}
	while (!op->done && op->layers_done < need_layers) {
		if (timeout_ms < 0) {
			pthread_cond_wait(&op->cv, &op->mu);
		} else if (pthread_cond_timedwait(&op->cv, &op->mu, &dl) == ETIMEDOUT) {
			if (!op->done && op->layers_done < need_layers)
				return -ETIMEDOUT;
		}
	}
	return 0;
}

int kvt_device_op_wait_layer(struct kvt_device_op *op, uint32_t layer, int timeout_ms)
{
	if (!op || layer >= op->layers)
		return -EINVAL;
	pthread_mutex_lock(&op->mu);
	int rc = wait_until(op, layer + 1, timeout_ms);
	if (!rc && op->layers_done <= layer)
		rc = op->status < 0 ? op->status : -EIO; /* done without this layer: failed */
	pthread_mutex_unlock(&op->mu);
	return rc;
}

int kvt_device_op_wait(struct kvt_device_op *op, int timeout_ms)
{
	if (!op)
		return -EINVAL;
	pthread_mutex_lock(&op->mu);
	int rc = wait_until(op, UINT32_MAX, timeout_ms);
	if (!rc)
		rc = op->status;
	pthread_mutex_unlock(&op->mu);
	return rc;
}

uint32_t kvt_device_op_layers_done(const struct kvt_device_op *op)
{
	return op ? __atomic_load_n(&op->layers_done, __ATOMIC_ACQUIRE) : 0;
}

void kvt_device_op_free(struct kvt_device_op *op)
{
	if (op)
		kvt__dev_op_put(op);
}

/* --------------------------------------------------------- emulated event */

/* Like a CUDA event: records (resets) and their completion (signals). A new event is a
 * record not yet complete. */
struct kvt_emu_event {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t recorded;  /* the latest record */
	uint64_t completed; /* the latest record complete (== recorded: signalled) */
};

int kvt_emu_event_create(struct kvt_emu_event **out)
{
	struct kvt_emu_event *ev = kvt__calloc(1, sizeof(*ev));
	if (!out || !ev) {
		kvt__free(ev);
		return out ? -ENOMEM : -EINVAL;
	}
	pthread_mutex_init(&ev->mu, NULL);
	pthread_cond_init(&ev->cv, NULL);
	ev->recorded = 1;
	*out = ev;
	return 0;
}

void kvt_emu_event_signal(struct kvt_emu_event *ev)
{
	pthread_mutex_lock(&ev->mu);
	ev->completed = ev->recorded;
	pthread_cond_broadcast(&ev->cv);
	pthread_mutex_unlock(&ev->mu);
}

/* A new record: copies that took the event before it do not wait for it. */
void kvt_emu_event_reset(struct kvt_emu_event *ev)
{
	pthread_mutex_lock(&ev->mu);
	if (ev->completed == ev->recorded)
		ev->recorded++;
	pthread_mutex_unlock(&ev->mu);
}

uint64_t kvt__emu_event_epoch(struct kvt_emu_event *ev)
{
	pthread_mutex_lock(&ev->mu);
	uint64_t e = ev->recorded;
	pthread_mutex_unlock(&ev->mu);
	return e;
}

void kvt__emu_event_wait(struct kvt_emu_event *ev, uint64_t epoch)
{
	pthread_mutex_lock(&ev->mu);
	while (ev->completed < epoch)
		pthread_cond_wait(&ev->cv, &ev->mu);
	pthread_mutex_unlock(&ev->mu);
}

void kvt_emu_event_destroy(struct kvt_emu_event *ev)
{
	if (!ev)
		return;
	pthread_cond_destroy(&ev->cv);
	pthread_mutex_destroy(&ev->mu);
	kvt__free(ev);
}
