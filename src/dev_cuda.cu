/*
 * dev_cuda.cu - the CUDA device backend: gathers an engine's paged KV blocks into host
 * objects and scatters them back, with DMA doing the PCIe part and a small kernel doing the
 * paged part.
 *
 * Why staged copies: a chunk touches layers x 2 x blocks small regions (32 x 2 x 16 of
 * 32 KiB for a Llama-8B chunk), far too many for one cudaMemcpyAsync each, and a kernel
 * reading or writing host memory directly over PCIe depends on access patterns we cannot
 * tune without hardware. So each layer goes through a device scratch buffer in this rank's
 * compact row order: gather = kernel (HBM to HBM, paged -> compact) + one DMA (one
 * cudaMemcpyAsync when the rank holds all heads, else one cudaMemcpy2DAsync per plane onto
 * the strided slice of the object); scatter = the reverse. The DMA moves exactly the bytes
 * a plain cudaMemcpyAsync would, and the kernel costs ~1% at HBM speed.
 *
 * One stream per direction (gathers and scatters overlap on a full-duplex link). Before
 * any copy of an operation the stream waits on the engine's event (cudaStreamWaitEvent) -
 * a block is never read while a kernel may still write it. Two scratch buffers per stream
 * alternate between layers; stream order makes reuse safe. After each layer an event is
 * recorded; a completion thread per stream waits for those events in order (blocking-sync
 * events: no spinning core) and reports layers, then the operation. Host callbacks
 * (cudaLaunchHostFunc) are not used: they stall the stream for a host round trip per
 * layer, and completion work (publishing a slot) must not run on CUDA's thread.
 *
 * UNVERIFIED ON HARDWARE: written and compiled without a GPU (docs/DEVICE.md); run
 * bench/gpu_check.sh on a GPU machine before trusting it.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

extern "C" {
#include "device.h"
}

namespace
{

struct copy_args {
	const uint32_t *ids; /* device memory */
	uint32_t n_tokens;
	uint32_t block_size;
	uint32_t planes;
	uint64_t row_bytes;
	uint64_t block_stride;
	uint64_t plane_stride;
};

/* Element i of the layer's compact scratch [plane][token][row] maps to one vector of one
 * row of the paged tensor. */
template <typename V, bool GATHER>
__global__ void paged_copy(uint8_t *layer, uint8_t *scratch, copy_args a)
{
	const uint64_t per_row = a.row_bytes / sizeof(V);
	const uint64_t total = (uint64_t)a.planes * a.n_tokens * per_row;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
	     i += (uint64_t)gridDim.x * blockDim.x) {
		uint64_t row = i / per_row, v = i - row * per_row;
		uint32_t p = (uint32_t)(row / a.n_tokens),
			 t = (uint32_t)(row - (uint64_t)p * a.n_tokens);
		uint64_t doff = (uint64_t)a.ids[t / a.block_size] * a.block_stride +
				(uint64_t)p * a.plane_stride +
				(uint64_t)(t % a.block_size) * a.row_bytes + v * sizeof(V);
		V *d = reinterpret_cast<V *>(layer + doff);
		V *s = reinterpret_cast<V *>(scratch + row * a.row_bytes) + v;
		if (GATHER)
			*s = *d;
		else
			*d = *s;
	}
}

/* One kernel launch; its own error only. cudaLaunchKernel answers for this launch, where
 * cudaGetLastError after <<<>>> would also take (and clear) an error the engine's own
 * earlier launches left on this thread, and fail an op half queued for it. */
template <typename V, bool GATHER>
cudaError_t launch_v(unsigned blocks, unsigned threads, cudaStream_t st, uint8_t *layer,
		     uint8_t *scratch, copy_args a)
{
	void *args[] = {&layer, &scratch, &a};
	return cudaLaunchKernel((const void *)paged_copy<V, GATHER>, dim3(blocks), dim3(threads),
				args, 0, st);
}

template <bool GATHER>
cudaError_t launch(uint8_t *layer, uint8_t *scratch, const copy_args &a, unsigned vec,
		   cudaStream_t st)
{
	uint64_t total = (uint64_t)a.planes * a.n_tokens * (a.row_bytes / vec);
	unsigned threads = 256;
	uint64_t blocks = (total + threads - 1) / threads;
	if (blocks > 2048)
		blocks = 2048;
	if (!blocks)
		return cudaSuccess;
	switch (vec) {
	case 16:
		return launch_v<uint4, GATHER>((unsigned)blocks, threads, st, layer, scratch, a);
	case 8:
		return launch_v<uint2, GATHER>((unsigned)blocks, threads, st, layer, scratch, a);
	case 4:
		return launch_v<uint32_t, GATHER>((unsigned)blocks, threads, st, layer, scratch, a);
	default:
		return launch_v<uint8_t, GATHER>((unsigned)blocks, threads, st, layer, scratch, a);
	}
}

/* Widest vector that every address and stride of the plan is aligned to. */
unsigned vec_width(const struct kvt_device *dev, const struct kvt_dev_plan *pl)
{
	uint64_t acc = pl->row_bytes | pl->dev_block_stride | pl->dev_plane_stride;
	for (uint32_t l = 0; l < pl->layers; l++)
		acc |= (uint64_t)(uintptr_t)dev->base[l];
	for (unsigned v = 16; v > 1; v /= 2)
		if (!(acc % v))
			return v;
	return 1;
}

struct pending {
	struct kvt_device_op *op;
	uint32_t layer;
	bool last;
	int status;	/* an error found while enqueuing */
	cudaEvent_t ev; /* NULL: none could be recorded; the completer syncs the stream */
	struct pending *next;
};

/* Per-op resources: block ids staged through pinned memory into device memory. */
struct ids_buf {
	uint32_t *host; /* pinned */
	uint32_t *dev;
	struct ids_buf *next;
};

struct cuda_dir {
	struct kvt_device *dev;
	cudaStream_t stream;
	uint8_t *scratch[2];
	/* takes a KVT_DEP_CUDA_EVENT at the call (dep_capture): waits for the engine's event
	 * as recorded then, and an event of ours recorded behind that wait stands for it */
	cudaStream_t cap_stream;
	pthread_mutex_t submit_mu; /* one op's layers are enqueued together */
	pthread_mutex_t mu;	   /* the pending FIFO and the pools */
	pthread_cond_t cv;
	struct pending *head, *tail;
	cudaEvent_t *ev_pool;
	uint32_t ev_n, ev_cap;
	struct ids_buf *ids_pool;
	bool stop;
	bool started;
	pthread_t thread;
};

struct cuda_state {
	int device;
	uint32_t max_blocks;
	uint64_t scratch_bytes;
	struct cuda_dir dir[2];
};

/* Whether this thread has a CUDA context current (one the caller made, or had made for it),
 * asked of the driver through the runtime (cuCtxGetCurrent; linking libcuda would make
 * the library fail to load where no driver is installed). Unknown: true. */
static bool thread_has_context(void)
{
#if CUDART_VERSION >= 12050
	typedef int (*ctx_get_current_fn)(void **);
	static ctx_get_current_fn fn = [] {
		void *p = NULL;
		cudaDriverEntryPointQueryResult q;
		if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &p, 12000, cudaEnableDefault,
						     &q) != cudaSuccess ||
		    q != cudaDriverEntryPointSuccess)
			p = NULL;
		return (ctx_get_current_fn)p;
	}();
	void *ctx = NULL;
	return !fn || fn(&ctx) != 0 || ctx != NULL;
#else
	return true;
#endif
}

/* Run with the registered device current, restoring the caller's - only where the thread
 * had a context, and another device's: cudaGetDevice answers 0 on a thread that never
 * chose one (the library's own tier and verify threads), and setting device 0 "back" then
 * created a primary context on GPU 0 (cudaSetDevice does since CUDA 12), several hundred
 * MiB on a GPU a TP rank never uses (a review, 2026-12-05). */
struct device_guard {
	int prev;
	bool ok;
	explicit device_guard(int dev) : prev(-1), ok(false)
	{
		bool had = thread_has_context();
		if (!had || cudaGetDevice(&prev) != cudaSuccess || prev == dev)
			prev = -1;
		ok = cudaSetDevice(dev) == cudaSuccess;
	}
	~device_guard()
	{
		if (prev >= 0)
			cudaSetDevice(prev);
	}
};

int cuda_err(struct kvt_device *dev, cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	KVT_ERR(&dev->log, "cuda: %s: %s", what, cudaGetErrorString(e));
	return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

cudaEvent_t ev_get(struct cuda_dir *d)
{
	cudaEvent_t ev = NULL;
	pthread_mutex_lock(&d->mu);
	if (d->ev_n)
		ev = d->ev_pool[--d->ev_n];
	pthread_mutex_unlock(&d->mu);
	if (!ev && cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventBlockingSync) !=
		       cudaSuccess)
		return NULL;
	return ev;
}

void ev_put(struct cuda_dir *d, cudaEvent_t ev)
{
	pthread_mutex_lock(&d->mu);
	if (d->ev_n == d->ev_cap) {
		uint32_t cap = d->ev_cap ? 2 * d->ev_cap : 64;
		cudaEvent_t *p = (cudaEvent_t *)kvt__realloc(d->ev_pool, cap * sizeof(*p));
		if (!p) {
			pthread_mutex_unlock(&d->mu);
			cudaEventDestroy(ev);
			return;
		}
		d->ev_pool = p;
		d->ev_cap = cap;
	}
	d->ev_pool[d->ev_n++] = ev;
	pthread_mutex_unlock(&d->mu);
}

struct ids_buf *ids_get(struct cuda_dir *d, uint32_t max_blocks)
{
	pthread_mutex_lock(&d->mu);
	struct ids_buf *b = d->ids_pool;
	if (b)
		d->ids_pool = b->next;
	pthread_mutex_unlock(&d->mu);
	if (b)
		return b;
	b = (struct ids_buf *)kvt__calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	size_t n = (size_t)max_blocks * sizeof(uint32_t);
	if (cudaMallocHost((void **)&b->host, n) != cudaSuccess) {
		kvt__free(b);
		return NULL;
	}
	if (cudaMalloc((void **)&b->dev, n) != cudaSuccess) {
		cudaFreeHost(b->host);
		kvt__free(b);
		return NULL;
	}
	return b;
}

void ids_put(struct cuda_dir *d, struct ids_buf *b)
{
	pthread_mutex_lock(&d->mu);
	b->next = d->ids_pool;
	d->ids_pool = b;
	pthread_mutex_unlock(&d->mu);
}

void *completer(void *arg)
{
	struct cuda_dir *d = (struct cuda_dir *)arg;
	struct cuda_state *st = (struct cuda_state *)d->dev->bstate;
	cudaSetDevice(st->device);
	pthread_mutex_lock(&d->mu);
	for (;;) {
		while (!d->head && !d->stop)
			pthread_cond_wait(&d->cv, &d->mu);
		if (!d->head)
			break;
		struct pending *p = d->head;
		d->head = p->next;
		if (!d->head)
			d->tail = NULL;
		pthread_mutex_unlock(&d->mu);

		/* Nothing of the op is reported before everything queued ahead of this entry is
		 * complete, an error entry included: part of its layer may be queued (a kernel,
		 * one plane's DMA) and still read or write the blocks, the object and the
		 * scratch after the caller was told the op is over. */
		int status = p->status, rc;
		if (p->ev) {
			rc = cuda_err(d->dev, cudaEventSynchronize(p->ev), "event synchronize");
			ev_put(d, p->ev);
		} else { /* no event could be recorded behind it: wait for the whole stream */
			rc = cuda_err(d->dev, cudaStreamSynchronize(d->stream),
				      "stream synchronize");
		}
		if (!status)
			status = rc;
		struct kvt_device_op *op = p->op;
		if (status < 0 && !op->status)
			op->status = status; /* remembered until the op's last entry */
		if (!op->status && !p->last)
			kvt__dev_layer_done(op, p->layer);
		if (p->last) {
			if (!op->status)
				kvt__dev_layer_done(op, p->layer);
			ids_put(d, (struct ids_buf *)op->bpriv);
			op->bpriv = NULL;
			kvt__dev_op_done(op, op->status);
		}
		if (p->last)
			kvt__free(p - p->layer); /* the op's entry array */
		pthread_mutex_lock(&d->mu);
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

void dir_stop(struct cuda_dir *d)
{
	if (d->started) {
		pthread_mutex_lock(&d->mu);
		d->stop = true;
		pthread_cond_signal(&d->cv);
		pthread_mutex_unlock(&d->mu);
		pthread_join(d->thread, NULL);
	}
	for (uint32_t i = 0; i < d->ev_n; i++)
		cudaEventDestroy(d->ev_pool[i]);
	kvt__free(d->ev_pool);
	while (d->ids_pool) {
		struct ids_buf *b = d->ids_pool;
		d->ids_pool = b->next;
		cudaFreeHost(b->host);
		cudaFree(b->dev);
		kvt__free(b);
	}
	for (int i = 0; i < 2; i++)
		if (d->scratch[i])
			cudaFree(d->scratch[i]);
	if (d->cap_stream)
		cudaStreamDestroy(d->cap_stream);
	if (d->stream)
		cudaStreamDestroy(d->stream);
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->mu);
	pthread_mutex_destroy(&d->submit_mu);
}

bool cuda_available(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	static int count;
	pthread_once(&once, [] {
		if (cudaGetDeviceCount(&count) != cudaSuccess)
			count = 0;
	});
	return count > 0;
}

int cuda_open(struct kvt_device *dev)
{
	const struct kvt_device_desc *desc = &dev->desc;
	struct cuda_state *st = (struct cuda_state *)kvt__calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->device = desc->cuda_device;
	st->max_blocks = desc->geometry.chunk_tokens / desc->block_size;
	uint32_t planes = desc->geometry.kind == KVT_KIND_MLA ? 1 : 2;
	st->scratch_bytes = (uint64_t)planes * desc->geometry.chunk_tokens * dev->heads *
			    desc->geometry.head_dim * dev->es;
	dev->bstate = st;
	int rc = -ENODEV;
	device_guard g(st->device);
	if (!g.ok)
		goto fail_state;
	/* A layer pointer that is not device memory of this GPU would fault the copy kernel,
	 * and a fault ends the engine's whole CUDA context: refuse it here instead. */
	for (uint32_t l = 0; l < desc->geometry.layers; l++) {
		cudaPointerAttributes at;
		cudaError_t e = cudaPointerGetAttributes(&at, desc->layer_base[l]);
		if (e != cudaSuccess)
			(void)cudaGetLastError(); /* that call's own error, left as the last one */
		if (e != cudaSuccess ||
		    (at.type != cudaMemoryTypeDevice && at.type != cudaMemoryTypeManaged) ||
		    at.device != st->device) {
			KVT_ERR(&dev->log,
				"cuda: layer %u's base %p is not device memory of cuda device %d", l,
				desc->layer_base[l], st->device);
			rc = -EINVAL;
			goto fail_state;
		}
	}
	for (int i = 0; i < 2; i++) {
		struct cuda_dir *d = &st->dir[i];
		d->dev = dev;
		pthread_mutex_init(&d->submit_mu, NULL);
		pthread_mutex_init(&d->mu, NULL);
		pthread_cond_init(&d->cv, NULL);
		if ((rc =
			 cuda_err(dev, cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking),
				  "stream create")) < 0 ||
		    (rc = cuda_err(dev,
				   cudaStreamCreateWithFlags(&d->cap_stream, cudaStreamNonBlocking),
				   "stream create")) < 0 ||
		    (rc = cuda_err(dev, cudaMalloc((void **)&d->scratch[0], st->scratch_bytes),
				   "scratch")) < 0 ||
		    (rc = cuda_err(dev, cudaMalloc((void **)&d->scratch[1], st->scratch_bytes),
				   "scratch")) < 0)
			goto fail_dirs;
		if ((rc = -pthread_create(&d->thread, NULL, completer, d)) < 0)
			goto fail_dirs;
		d->started = true;
	}
	return 0;

fail_dirs:
	for (int i = 0; i < 2; i++)
		if (st->dir[i].dev)
			dir_stop(&st->dir[i]);
fail_state:
	kvt__free(st);
	dev->bstate = NULL;
	return rc;
}

void cuda_close(struct kvt_device *dev)
{
	struct cuda_state *st = (struct cuda_state *)dev->bstate;
	device_guard g(st->device);
	for (int i = 0; i < 2; i++)
		dir_stop(&st->dir[i]);
	kvt__free(st);
	dev->bstate = NULL;
}

/* Queue one FIFO entry with an event recorded now on the stream, behind everything queued
 * so far - an error entry too: the op's earlier calls may have queued part of its layer.
 * Without an event (none could be made or recorded) the completer waits for the stream.
 * p is entry `layer` of the op's array, allocated before anything was enqueued so that
 * queuing cannot fail half way and leave an op that never completes. */
int push(struct cuda_dir *d, struct pending *p, struct kvt_device_op *op, uint32_t layer, bool last,
	 int status)
{
	p->op = op;
	p->layer = layer;
	p->last = last;
	p->status = status;
	p->ev = ev_get(d);
	if (p->ev && cudaEventRecord(p->ev, d->stream) != cudaSuccess) {
		ev_put(d, p->ev);
		p->ev = NULL;
	}
	if (!p->ev && !p->status)
		p->status = -EIO;
	/* read before it is queued: the completer may take the op's last entry, sync it and
	 * free the entries as soon as the lock is let go */
	int rc = p->status;
	pthread_mutex_lock(&d->mu);
	if (d->tail)
		d->tail->next = p;
	else
		d->head = p;
	d->tail = p;
	pthread_cond_signal(&d->cv);
	pthread_mutex_unlock(&d->mu);
	return rc;
}

/* Enqueue the DMA between the compact scratch of one layer and the object. */
cudaError_t layer_dma(const struct kvt_dev_plan *pl, uint32_t l, uint8_t *obj, uint8_t *scratch,
		      bool gather, cudaStream_t st)
{
	uint64_t plane = (uint64_t)pl->n_tokens * pl->row_bytes;
	uint8_t *o = obj + pl->layer_off[l];
	cudaMemcpyKind kind = gather ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
	if (pl->row_bytes == pl->obj_row_pitch) /* all heads: K and V are one dense range */
		return gather ? cudaMemcpyAsync(o, scratch, pl->planes * plane, kind, st)
			      : cudaMemcpyAsync(scratch, o, pl->planes * plane, kind, st);
	for (uint32_t p = 0; p < pl->planes; p++) {
		uint8_t *os = o + p * pl->obj_plane_bytes + pl->obj_head_off;
		uint8_t *ss = scratch + p * plane;
		cudaError_t e = gather ? cudaMemcpy2DAsync(os, pl->obj_row_pitch, ss, pl->row_bytes,
							   pl->row_bytes, pl->n_tokens, kind, st)
				       : cudaMemcpy2DAsync(ss, pl->row_bytes, os, pl->obj_row_pitch,
							   pl->row_bytes, pl->n_tokens, kind, st);
		if (e != cudaSuccess)
			return e;
	}
	return cudaSuccess;
}

/* The dependency as it stands at the call, on the caller's thread (submit may run later on
 * another: a load's, once the chunk is acquired). KVT_DEP_CUDA_STREAM: an event recorded on
 * the engine's stream now (cudaStreamPerThread then means the caller's stream, not the
 * submitting thread's). KVT_DEP_CUDA_EVENT: the event as recorded now, through cap_stream
 * (a record the engine makes after the call is not waited for). The captured event is what
 * submit waits on; dep_release gives it back. */
int cuda_dep_capture(struct kvt_device_op *op)
{
	if (op->dep.kind != KVT_DEP_NONE && op->dep.kind != KVT_DEP_CUDA_EVENT &&
	    op->dep.kind != KVT_DEP_CUDA_STREAM)
		return -EINVAL;
	if (op->dep.kind == KVT_DEP_NONE)
		return 0;
	if (!op->dep.handle)
		return -EINVAL;
	struct kvt_device *dev = op->dev;
	struct cuda_state *st = (struct cuda_state *)dev->bstate;
	struct cuda_dir *d = &st->dir[op->dir == KVT_DEV_GATHER ? 0 : 1];
	device_guard g(st->device);
	if (!g.ok)
		return -ENODEV;
	cudaEvent_t ev = ev_get(d);
	if (!ev)
		return -ENOMEM;
	cudaError_t e;
	if (op->dep.kind == KVT_DEP_CUDA_STREAM) {
		e = cudaEventRecord(ev, (cudaStream_t)op->dep.handle);
	} else {
		e = cudaStreamWaitEvent(d->cap_stream, (cudaEvent_t)op->dep.handle, 0);
		if (e == cudaSuccess)
			e = cudaEventRecord(ev, d->cap_stream);
	}
	int rc = cuda_err(dev, e, "take the engine's dependency");
	if (rc < 0) {
		ev_put(d, ev);
		return rc;
	}
	op->dep_priv = ev;
	return 0;
}

/* After the op: every wait on the captured event was enqueued long before (a wait takes
 * the event's state when it is enqueued), so it may be recorded again. */
void cuda_dep_release(struct kvt_device_op *op)
{
	if (!op->dep_priv)
		return;
	struct cuda_state *st = (struct cuda_state *)op->dev->bstate;
	ev_put(&st->dir[op->dir == KVT_DEV_GATHER ? 0 : 1], (cudaEvent_t)op->dep_priv);
	op->dep_priv = NULL;
}

int cuda_submit(struct kvt_device_op *op)
{
	struct kvt_device *dev = op->dev;
	struct cuda_state *st = (struct cuda_state *)dev->bstate;
	const struct kvt_dev_plan *pl = &op->plan;
	bool gather = op->dir == KVT_DEV_GATHER;
	struct cuda_dir *d = &st->dir[gather ? 0 : 1];
	if (op->dep.kind != KVT_DEP_NONE && !op->dep_priv)
		return -EINVAL; /* not taken by cuda_dep_capture */
	if (pl->n_blocks > st->max_blocks)
		return -EINVAL;
	device_guard g(st->device);
	if (!g.ok)
		return -ENODEV;
	struct pending *ents = (struct pending *)kvt__calloc(pl->layers, sizeof(*ents));
	if (!ents)
		return -ENOMEM;
	struct ids_buf *ids = ids_get(d, st->max_blocks);
	if (!ids) {
		kvt__free(ents);
		return -ENOMEM;
	}
	memcpy(ids->host, op->ids, pl->n_blocks * sizeof(uint32_t));
	op->bpriv = ids;

	int rc = 0;
	pthread_mutex_lock(&d->submit_mu);
	/* The dependency first, as taken at the call: nothing below may start before it. */
	if (op->dep_priv)
		rc = cuda_err(dev, cudaStreamWaitEvent(d->stream, (cudaEvent_t)op->dep_priv, 0),
			      "wait engine event");
	if (!rc)
		rc = cuda_err(dev,
			      cudaMemcpyAsync(ids->dev, ids->host, pl->n_blocks * sizeof(uint32_t),
					      cudaMemcpyHostToDevice, d->stream),
			      "block ids");
	if (rc < 0) { /* nothing of this op is queued yet */
		pthread_mutex_unlock(&d->submit_mu);
		op->bpriv = NULL;
		ids_put(d, ids);
		kvt__free(ents);
		return rc;
	}
	copy_args a = {ids->dev,      pl->n_tokens,	    pl->block_size,	 pl->planes,
		       pl->row_bytes, pl->dev_block_stride, pl->dev_plane_stride};
	unsigned vec = vec_width(dev, pl);
	for (uint32_t l = 0; l < pl->layers; l++) {
		uint8_t *scratch = d->scratch[l & 1], *layer = (uint8_t *)dev->base[l];
		cudaError_t e;
		if (gather) {
			e = launch<true>(layer, scratch, a, vec, d->stream);
			if (e == cudaSuccess)
				e = layer_dma(pl, l, (uint8_t *)op->obj, scratch, true, d->stream);
		} else {
			e = layer_dma(pl, l, (uint8_t *)op->obj, scratch, false, d->stream);
			if (e == cudaSuccess)
				e = launch<false>(layer, scratch, a, vec, d->stream);
		}
		bool last = l + 1 == pl->layers;
		if (e != cudaSuccess) {
			/* Part of the op is queued: it completes, with this error, after it. */
			push(d, &ents[l], op, l, true,
			     cuda_err(dev, e, gather ? "gather" : "scatter"));
			break;
		}
		push(d, &ents[l], op, l, last, 0);
	}
	pthread_mutex_unlock(&d->submit_mu);
	return 0;
}

int cuda_mem_alloc(struct kvt_device *dev, size_t n, void **out)
{
	struct cuda_state *st = (struct cuda_state *)dev->bstate;
	device_guard g(st->device);
	return cuda_err(dev, cudaMalloc(out, n), "cudaMalloc");
}

void cuda_mem_free(struct kvt_device *dev, void *p)
{
	struct cuda_state *st = (struct cuda_state *)dev->bstate;
	device_guard g(st->device);
	cudaFree(p);
}

int cuda_to_dev(struct kvt_device *dev, void *dst, const void *src, size_t n)
{
	struct cuda_state *st = (struct cuda_state *)dev->bstate;
	device_guard g(st->device);
	return cuda_err(dev, cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "copy to device");
}

int cuda_to_host(struct kvt_device *dev, void *dst, const void *src, size_t n)
{
	struct cuda_state *st = (struct cuda_state *)dev->bstate;
	device_guard g(st->device);
	return cuda_err(dev, cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "copy to host");
}

int cuda_host_register(struct kvt_device *dev, void *p, size_t n)
{
	struct cuda_state *st = (struct cuda_state *)dev->bstate;
	device_guard g(st->device);
	return cuda_err(dev, cudaHostRegister(p, n, cudaHostRegisterPortable), "host register");
}

int cuda_host_unregister(struct kvt_device *dev, void *p)
{
	struct cuda_state *st = (struct cuda_state *)dev->bstate;
	device_guard g(st->device);
	return cuda_err(dev, cudaHostUnregister(p), "host unregister");
}

} // namespace

extern "C" const struct kvt_dev_ops kvt__dev_cuda_ops = {
    "cuda",	   cuda_available,   cuda_open,	       cuda_close,	   cuda_mem_alloc,
    cuda_mem_free, cuda_to_dev,	     cuda_to_host,     cuda_host_register, cuda_host_unregister,
    cuda_submit,   cuda_dep_capture, cuda_dep_release,
};
