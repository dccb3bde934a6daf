/*
 * event_queue.c - a bounded queue of a store's KV events for a consumer that polls. Why:
 * kvt_store_set_events calls its function on a library thread with the store's locks held,
 * so a caller that cannot return at once - an interpreter's callback waiting for its global
 * lock (the vLLM plug-in, through ctypes) - would hold DRAM's lock meanwhile. This queue is
 * such a function that only copies the event in; the consumer takes them out on its own
 * thread. When full, an event is dropped and counted: the consumer then knows it missed
 * some and must look at the store itself (a full check), never that nothing changed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "kvtier.h"

struct kvt_event_queue {
	pthread_mutex_t mu;
	uint32_t cap, head, n;
	uint64_t lost; /* dropped while full, since the last drain */
	struct kvt_event ev[];
};

struct kvt_event_queue *kvt_event_queue_new(uint32_t capacity)
{
	if (!capacity || capacity > (1u << 24))
		return NULL; /* 1..16M events (16M is ~1.6 GB of them) */
	struct kvt_event_queue *q =
	    kvt__calloc(1, sizeof(*q) + (size_t)capacity * sizeof(struct kvt_event));
	if (!q)
		return NULL;
	if (pthread_mutex_init(&q->mu, NULL) != 0) {
		kvt__free(q);
		return NULL;
	}
	q->cap = capacity;
	return q;
}

void kvt_event_queue_free(struct kvt_event_queue *q)
{
	if (!q)
		return;
	pthread_mutex_destroy(&q->mu);
	kvt__free(q);
}

void kvt_event_queue_push(void *arg, const struct kvt_event *ev)
{
	struct kvt_event_queue *q = arg;
	pthread_mutex_lock(&q->mu);
	if (q->n == q->cap)
		q->lost++;
	else
		q->ev[(q->head + q->n++) % q->cap] = *ev;
	pthread_mutex_unlock(&q->mu);
}

uint32_t kvt_event_queue_drain(struct kvt_event_queue *q, struct kvt_event *out, uint32_t max,
			       uint64_t *lost)
{
	pthread_mutex_lock(&q->mu);
	uint32_t n = q->n < max ? q->n : max;
	for (uint32_t i = 0; i < n; i++)
		out[i] = q->ev[(q->head + i) % q->cap];
	q->head = (q->head + n) % q->cap;
	q->n -= n;
	if (lost) {
		*lost = q->lost;
		q->lost = 0;
	}
	pthread_mutex_unlock(&q->mu);
	return n;
}
