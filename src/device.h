/*
 * device.h - the device layer's internals: the transfer backend vtable (emu, cuda), the
 * registered cache, the operation object, and the index math that maps a token of a chunk
 * to its row in an engine's paged tensor and to its row in the canonical object.
 *
 * The math is shared by every backend (and by the tests) so that there is one definition
 * of where a byte goes. For layer l, plane p (0 = K, 1 = V; MLA has only plane 0), token t
 * of the chunk, with row = (h1 - h0) * head_dim * dtype_bytes, the bytes of this rank's
 * heads of that token are
 *   device: layer_base[l] + ids[t / bs] * block_stride + p * plane_stride + (t % bs) * row
 *   object: kvt_layer_offset(g, n, l) + p * n * kv_heads * head_dim * es
 *           + t * kv_heads * head_dim * es + h0 * head_dim * es
 * and are row bytes long on both sides. Rows of one block are contiguous on the device;
 * in the object they are contiguous only when the rank holds every head.
 *
 * Backend contract (submit): returns 0 => the backend calls kvt__dev_layer_done() for
 * layers 0, 1, ... in order and then kvt__dev_op_done() exactly once, later, never inside
 * submit; returns < 0 => it calls neither. Operations of one direction start in
 * submission order and none starts copying before its dependency is complete.
 * submit may block until the copy, and so its dependency, has completed: cuda does for a
 * gather into host memory it has not pinned (cudaMemcpyAsync into pageable memory returns
 * only then), emu does with device.emu_pageable. So a caller must not hold, across submit,
 * a lock that another rank's call or an op's completion takes: the dependency may wait for
 * that rank (a collective), which then never gets past the lock.
 */
#ifndef KVT_DEVICE_H
#define KVT_DEVICE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "dram.h"
#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

enum kvt_dev_dir {
	KVT_DEV_GATHER = 0,  /* device blocks -> host object (device to host) */
	KVT_DEV_SCATTER = 1, /* host object -> device blocks (host to device) */
};

/* Where each row of one operation goes; see the formula above. */
struct kvt_dev_plan {
	uint32_t layers;
	uint32_t planes; /* 2 for K+V, 1 for MLA */
	uint32_t n_tokens;
	uint32_t block_size;
	uint32_t n_blocks;
	uint64_t row_bytes;	  /* one token, one plane, this rank's heads */
	uint64_t obj_row_pitch;	  /* one token, one plane, all heads */
	uint64_t obj_head_off;	  /* h0 * head_dim * es */
	uint64_t obj_plane_bytes; /* n_tokens * obj_row_pitch */
	uint64_t dev_block_stride;
	uint64_t dev_plane_stride;
	const uint32_t *ids;		    /* n_blocks block ids */
	uint64_t layer_off[KVT_MAX_LAYERS]; /* kvt_layer_offset of each layer for n_tokens */
};

struct kvt_device;
struct kvt_device_op;

struct kvt_dev_ops {
	const char *name;
	/* Can this backend run here (cuda: the runtime sees a GPU)? */
	bool (*available)(void);
	/* Set up dev->bstate (streams, threads). 0 or -errno. */
	int (*open)(struct kvt_device *dev);
	/* Every submitted op has completed when this is called (the device layer waits). */
	void (*close)(struct kvt_device *dev);
	/* "Device" memory for tests and checks: allocate, free, synchronous copies. */
	int (*mem_alloc)(struct kvt_device *dev, size_t n, void **out);
	void (*mem_free)(struct kvt_device *dev, void *p);
	int (*mem_to_dev)(struct kvt_device *dev, void *dst, const void *src, size_t n);
	int (*mem_to_host)(struct kvt_device *dev, void *dst, const void *src, size_t n);
	/* Pin host memory for asynchronous copies (NULL: nothing to do). */
	int (*host_register)(struct kvt_device *dev, void *p, size_t n);
	int (*host_unregister)(struct kvt_device *dev, void *p);
	/* Start op (op->dir, op->plan, op->obj, op->dep as dep_capture took it); contract in
	 * the file comment. */
	int (*submit)(struct kvt_device_op *op);
	/* Take op->dep as it stands now, on the calling thread, when the op is made: submit
	 * may come much later and from another thread (a load submits once its chunk is
	 * acquired), and what the engine queues on its stream, or records on its event, after
	 * the call must not change what the copy waits for. A dependency kind the backend does
	 * not understand is -EINVAL (no op is made). NULL: nothing to take. */
	int (*dep_capture)(struct kvt_device_op *op);
	/* Give back what dep_capture took: once, when the op is done (submitted or not). */
	void (*dep_release)(struct kvt_device_op *op);
};

extern const struct kvt_dev_ops kvt__dev_emu_ops;
#ifdef KVT_HAVE_CUDA
extern const struct kvt_dev_ops kvt__dev_cuda_ops;
#endif

struct kvt_device {
	const struct kvt_dev_ops *ops;
	struct kvt_device_desc desc; /* layer_base points at base below */
	void **base;		     /* layers entries */
	struct kvt_log log;
	double emu_gbps;   /* device.emu_gbps; 0 = unthrottled */
	bool emu_pageable; /* device.emu_pageable: a gather's submit waits for its copy */
	uint32_t es;	   /* dtype bytes */
	uint32_t heads;	   /* h1 - h0 */
	void *bstate;	   /* the backend's */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t inflight; /* ops created and not yet done */
};

/* Store-level completion work, run once when the copy is done (before waiters wake). */
typedef void (*kvt_dev_finish_fn)(struct kvt_device_op *op);

struct kvt_device_op {
	struct kvt_device *dev;
	int dir;
	uint32_t layers; /* immutable copy for waiters (plan is filled late by load) */
	struct kvt_dev_plan plan;
	uint32_t *ids; /* owned copy of the block ids */
	void *obj;     /* host object buffer */
	struct kvt_device_dep dep;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t layers_done; /* layers complete, in order */
	bool layers_held;     /* layer_check said no: layers_done stops where it is */
	bool done;
	int status;
	int refs;	/* the caller's handle + in flight */
	uint64_t bytes; /* bytes this op copies */
	kvt_dev_finish_fn finish;
	/* NULL, or asked as each layer's copy ends: false = the source may have changed under
	 * the copy, so the layer is not marked done (no later one is either); finish then
	 * decides the op's result and whether every layer counts as done */
	bool (*layer_check)(struct kvt_device_op *op);
	void *ctx;		    /* the store-level context of finish */
	void *bpriv;		    /* the backend's per-op state */
	void *dep_priv;		    /* the backend's capture of dep (dep_capture) */
	uint64_t dep_seq;	    /* emu: the event's record the op waits for */
	struct kvt_device_op *next; /* backend queue link */
};

/* Fill plan for dev, n_tokens and ids (not copied). 0 or -EINVAL. */
int kvt__dev_plan_init(const struct kvt_device *dev, uint32_t n_tokens, const uint32_t *ids,
		       uint32_t n_blocks, struct kvt_dev_plan *plan);
/* Device byte offset (from the layer's base) and object byte offset of token t, plane p. */
static inline uint64_t kvt__dev_row_dev_off(const struct kvt_dev_plan *pl, uint32_t p, uint32_t t)
{
	return (uint64_t)pl->ids[t / pl->block_size] * pl->dev_block_stride +
	       (uint64_t)p * pl->dev_plane_stride + (uint64_t)(t % pl->block_size) * pl->row_bytes;
}
static inline uint64_t kvt__dev_row_obj_off(const struct kvt_dev_plan *pl, uint32_t l, uint32_t p,
					    uint32_t t)
{
	return pl->layer_off[l] + (uint64_t)p * pl->obj_plane_bytes +
	       (uint64_t)t * pl->obj_row_pitch + pl->obj_head_off;
}
/* Visit the maximal contiguous runs of layer l: fn(arg, dev_off, obj_off, len) per run,
 * dev_off from the layer's base. Stops at fn's first non-zero return and returns it. */
int kvt__dev_plan_runs(const struct kvt_dev_plan *pl, uint32_t l,
		       int (*fn)(void *arg, uint64_t dev_off, uint64_t obj_off, uint64_t len),
		       void *arg);

/* Called by backends, from any thread. */
void kvt__dev_layer_done(struct kvt_device_op *op, uint32_t layer);
void kvt__dev_op_done(struct kvt_device_op *op, int status);

/* The emulated event behind KVT_DEP_EMU_EVENT, modelled on a CUDA event: a reset is a new
 * record (work started, not yet complete), a signal completes the latest record. epoch
 * says which record a dependency taken now waits for (as cudaStreamWaitEvent at the call);
 * wait blocks until that record is complete. */
uint64_t kvt__emu_event_epoch(struct kvt_emu_event *ev);
void kvt__emu_event_wait(struct kvt_emu_event *ev, uint64_t epoch);

/* Test access to the backend's memory helpers. */
int kvt__dev_mem_alloc(struct kvt_device *dev, size_t n, void **out);
void kvt__dev_mem_free(struct kvt_device *dev, void *p);
int kvt__dev_mem_to_dev(struct kvt_device *dev, void *dst, const void *src, size_t n);
int kvt__dev_mem_to_host(struct kvt_device *dev, void *dst, const void *src, size_t n);
/* Is the cuda backend compiled in and does it see a GPU? */
bool kvt__dev_backend_available(const char *name);

#ifdef __cplusplus
}
#endif
#endif
