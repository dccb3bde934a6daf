/*
 * dev_emu.c - the emulated device backend: "device memory" is ordinary host memory and
 * copies are memcpy, so the whole device layer (layouts, tensor parallelism, the
 * dependency rule, layer-by-layer completion) is tested on machines without a GPU.
 *
 * It mirrors the CUDA backend's execution model on purpose: one worker thread per
 * direction plays the role of a copy stream (operations of a direction run in submission
 * order; gathers and scatters overlap, like a full-duplex PCIe link), an operation first
 * waits for its dependency event exactly as cudaStreamWaitEvent would, and each layer is
 * reported complete before the next starts. device.emu_gbps throttles each direction to a
 * link speed (a pacing clock per worker, so bursts do not exceed it) to stand in for PCIe.
 * device.emu_pageable models host memory CUDA has not pinned: cudaMemcpyAsync from the
 * device into pageable memory returns only once the copy has completed, so a gather's
 * submit waits until the worker has copied it (behind its dependency); its completion is
 * still reported by the worker, as CUDA's completion thread does.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "device.h"

struct emu_queue {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_cond_t copied_cv; /* copied moved (device.emu_pageable) */
	struct kvt_device_op *head, *tail;
	uint64_t queued; /* ops submitted to this queue */
	uint64_t copied; /* of those, ops whose copy is over (they run in order) */
	bool stop;
	bool started;
	uint64_t pace_ns; /* throttle clock: when the link is free again */
	struct kvt_device *dev;
};

struct emu_state {
	struct emu_queue q[2]; /* indexed by enum kvt_dev_dir */
};

struct copy_ctx {
	uint8_t *base;
	uint8_t *obj;
	int dir;
};

static int copy_run(void *arg, uint64_t dev_off, uint64_t obj_off, uint64_t len)
{
	struct copy_ctx *c = arg;
	if (c->dir == KVT_DEV_GATHER)
		memcpy(c->obj + obj_off, c->base + dev_off, len);
	else
		memcpy(c->base + dev_off, c->obj + obj_off, len);
	return 0;
}

static void sleep_until(uint64_t t_ns)
{
	struct timespec ts = {(time_t)(t_ns / 1000000000ull), (long)(t_ns % 1000000000ull)};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/* Charge bytes to the link: after this, the copy may not have finished before the link
 * could have carried it. */
static void throttle(struct emu_queue *q, uint64_t bytes)
{
	double gbps = q->dev->emu_gbps;
	if (gbps <= 0)
		return;
	uint64_t now = kvt__now_ns();
	if (q->pace_ns < now)
		q->pace_ns = now;
	q->pace_ns += (uint64_t)((double)bytes / gbps); /* bytes / (GB/s) = ns */
	if (q->pace_ns > now)
		sleep_until(q->pace_ns);
}

static void run_op(struct emu_queue *q, struct kvt_device_op *op)
{
	const struct kvt_dev_plan *pl = &op->plan;
	if (op->dep.kind == KVT_DEP_EMU_EVENT) /* the record the call saw (emu_dep_capture) */
		kvt__emu_event_wait(op->dep.handle, op->dep_seq);
	/* A fresh pacing window per op: idle time on the link is not credit for later. */
	q->pace_ns = kvt__now_ns();
	uint64_t layer_bytes = (uint64_t)pl->planes * pl->n_tokens * pl->row_bytes;
	for (uint32_t l = 0; l < pl->layers; l++) {
		struct copy_ctx c = {op->dev->base[l], op->obj, op->dir};
		kvt__dev_plan_runs(pl, l, copy_run, &c);
		throttle(q, layer_bytes);
		kvt__dev_layer_done(op, l);
	}
	pthread_mutex_lock(&q->mu);
	q->copied++;
	pthread_cond_broadcast(&q->copied_cv);
	pthread_mutex_unlock(&q->mu);
	kvt__dev_op_done(op, 0);
}

static void *worker(void *arg)
{
	struct emu_queue *q = arg;
	pthread_mutex_lock(&q->mu);
	for (;;) {
		while (!q->head && !q->stop)
			pthread_cond_wait(&q->cv, &q->mu);
		if (!q->head)
			break;
		struct kvt_device_op *op = q->head;
		q->head = op->next;
		if (!q->head)
			q->tail = NULL;
		pthread_mutex_unlock(&q->mu);
		run_op(q, op);
		pthread_mutex_lock(&q->mu);
	}
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

static void stop_queues(struct emu_state *st)
{
	for (int i = 0; i < 2; i++) {
		struct emu_queue *q = &st->q[i];
		if (!q->started)
			continue;
		pthread_mutex_lock(&q->mu);
		q->stop = true;
		pthread_cond_signal(&q->cv);
		pthread_mutex_unlock(&q->mu);
		pthread_join(q->thread, NULL);
		pthread_cond_destroy(&q->copied_cv);
		pthread_cond_destroy(&q->cv);
		pthread_mutex_destroy(&q->mu);
	}
}

static int emu_open(struct kvt_device *dev)
{
	struct emu_state *st = kvt__calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	for (int i = 0; i < 2; i++) {
		struct emu_queue *q = &st->q[i];
		q->dev = dev;
		pthread_mutex_init(&q->mu, NULL);
		pthread_cond_init(&q->cv, NULL);
		pthread_cond_init(&q->copied_cv, NULL);
		int rc = pthread_create(&q->thread, NULL, worker, q);
		if (rc) {
			pthread_cond_destroy(&q->copied_cv);
			pthread_cond_destroy(&q->cv);
			pthread_mutex_destroy(&q->mu);
			stop_queues(st);
			kvt__free(st);
			return -rc;
		}
		q->started = true;
	}
	dev->bstate = st;
	return 0;
}

static void emu_close(struct kvt_device *dev)
{
	struct emu_state *st = dev->bstate;
	stop_queues(st);
	kvt__free(st);
	dev->bstate = NULL;
}

/* The event's latest record at the call, as cudaStreamWaitEvent takes it: a reset after
 * the call (the engine's next step) is not this copy's dependency. */
static int emu_dep_capture(struct kvt_device_op *op)
{
	if (op->dep.kind != KVT_DEP_NONE && op->dep.kind != KVT_DEP_EMU_EVENT)
		return -EINVAL;
	if (op->dep.kind == KVT_DEP_EMU_EVENT) {
		if (!op->dep.handle)
			return -EINVAL;
		op->dep_seq = kvt__emu_event_epoch(op->dep.handle);
	}
	return 0;
}

static int emu_submit(struct kvt_device_op *op)
{
	struct emu_state *st = op->dev->bstate;
	if (op->dep.kind != KVT_DEP_NONE && op->dep.kind != KVT_DEP_EMU_EVENT)
		return -EINVAL;
	if (op->dep.kind == KVT_DEP_EMU_EVENT && !op->dep.handle)
		return -EINVAL;
	struct emu_queue *q = &st->q[op->dir == KVT_DEV_GATHER ? 0 : 1];
	/* Into pageable memory: back only once the worker has copied it. Read now: once
	 * queued, op may be done and freed before this returns. */
	bool pageable = op->dev->emu_pageable && op->dir == KVT_DEV_GATHER;
	op->next = NULL;
	pthread_mutex_lock(&q->mu);
	if (q->tail)
		q->tail->next = op;
	else
		q->head = op;
	q->tail = op;
	uint64_t seq = ++q->queued;
	pthread_cond_signal(&q->cv);
	if (pageable)
		while (q->copied < seq)
			pthread_cond_wait(&q->copied_cv, &q->mu);
	pthread_mutex_unlock(&q->mu);
	return 0;
}

static int emu_mem_alloc(struct kvt_device *dev, size_t n, void **out)
{
	void *p = kvt__aligned_alloc(n + KVT_ALIGN);
	if (!p)
		return -ENOMEM;
	/* Remember the length in front for free (device memory has no size argument). */
	memcpy(p, &n, sizeof(n));
	*out = (uint8_t *)p + KVT_ALIGN;
	return 0;
}

static void emu_mem_free(struct kvt_device *dev, void *p)
{
	if (!p)
		return;
	uint8_t *base = (uint8_t *)p - KVT_ALIGN;
	size_t n;
	memcpy(&n, base, sizeof(n));
	kvt__free_aligned(base, n + KVT_ALIGN);
}

static int emu_copy(struct kvt_device *dev, void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
	return 0;
}

const struct kvt_dev_ops kvt__dev_emu_ops = {
    .name = "emu",
    .available = NULL,
    .open = emu_open,
    .close = emu_close,
    .mem_alloc = emu_mem_alloc,
    .mem_free = emu_mem_free,
    .mem_to_dev = emu_copy,
    .mem_to_host = emu_copy,
    .host_register = NULL,
    .host_unregister = NULL,
    .submit = emu_submit,
    .dep_capture = emu_dep_capture,
    .dep_release = NULL,
};
