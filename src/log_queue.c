/*
 * log_queue.c - a bounded queue of a store's log lines for a consumer that polls. Why: the
 * library logs on whichever of its threads sees the event - the service thread as it
 * answers a missed deadline, an I/O thread as it finds a corrupt copy - and calls the log
 * function there and then. A function that cannot return at once (an interpreter's
 * callback waiting for its global lock: the vLLM plug-in, through ctypes, inside an engine
 * whose step loop holds that lock for long stretches) would hold that thread meanwhile, so
 * a stalled tier's deadlines were answered one lock hand-off apart instead of at once.
 * This queue is a log function that only copies the line in and signals an eventfd; the
 * consumer takes the lines out on its own thread (poll the fd, then pop). When full, a line
 * is dropped and counted, and the count is reported with the next line taken out.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"
#include "kvtier.h"

#define LOGQ_LINE 512 /* as kvt__logf's own buffer: a line is never cut twice */

struct logq_line {
	int level;
	char msg[LOGQ_LINE];
};

struct kvt_log_queue {
	pthread_mutex_t mu;
	int efd;
	uint32_t cap, head, n;
	uint64_t lost; /* dropped while full, since the last pop */
	struct logq_line line[];
};

struct kvt_log_queue *kvt_log_queue_new(uint32_t capacity)
{
	if (!capacity || capacity > (1u << 16))
		return NULL; /* 1..64k lines (64k is 32 MiB of them) */
	struct kvt_log_queue *q =
	    kvt__calloc(1, sizeof(*q) + (size_t)capacity * sizeof(struct logq_line));
	if (!q)
		return NULL;
	q->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (q->efd < 0 || pthread_mutex_init(&q->mu, NULL) != 0) {
		if (q->efd >= 0)
			close(q->efd);
		kvt__free(q);
		return NULL;
	}
	q->cap = capacity;
	return q;
}

void kvt_log_queue_free(struct kvt_log_queue *q)
{
	if (!q)
		return;
	close(q->efd);
	pthread_mutex_destroy(&q->mu);
	kvt__free(q);
}

int kvt_log_queue_fd(const struct kvt_log_queue *q)
{
	return q->efd;
}

void kvt_log_queue_push(void *arg, int level, const char *msg)
{
	struct kvt_log_queue *q = arg;
	bool signal;
	pthread_mutex_lock(&q->mu);
	if (q->n == q->cap) {
		q->lost++;
		signal = false; /* the fd is readable already: nothing was taken since it filled */
	} else {
		struct logq_line *l = &q->line[(q->head + q->n++) % q->cap];
		l->level = level;
		snprintf(l->msg, sizeof(l->msg), "%s", msg ? msg : "");
		signal = q->n == 1; /* the consumer reads the fd only when the queue was empty */
	}
	pthread_mutex_unlock(&q->mu);
	if (signal) {
		uint64_t one = 1;
		/* EAGAIN: the counter is at its maximum, i.e. readable, which is all it says */
		ssize_t r = write(q->efd, &one, sizeof(one));
		(void)r;
	}
}

int kvt_log_queue_pop(struct kvt_log_queue *q, int *level, char *buf, size_t len,
		      uint64_t *lost)
{
	pthread_mutex_lock(&q->mu);
	if (lost) {
		*lost = q->lost;
		q->lost = 0;
	}
	if (!q->n) {
		/* empty: reset the fd under the lock, so a push after this signals again */
		uint64_t v;
		ssize_t r = read(q->efd, &v, sizeof(v));
		(void)r;
		pthread_mutex_unlock(&q->mu);
		return 0;
	}
	struct logq_line *l = &q->line[q->head];
	if (level)
		*level = l->level;
	if (buf && len)
		snprintf(buf, len, "%s", l->msg);
	q->head = (q->head + 1) % q->cap;
	q->n--;
	pthread_mutex_unlock(&q->mu);
	return 1;
}
