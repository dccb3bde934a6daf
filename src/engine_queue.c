/*
 * engine_queue.c - where the engine's work runs besides the caller's thread and the tiers'
 * I/O threads. User completions are queued for kvt_poll() (an eventfd signals them); each
 * admitted operation reserves its queue node up front, so a completion is never run inside
 * a call for lack of memory. The service thread runs internal callbacks that must not run
 * inside the submitting call, and on every turn expires overdue tier calls
 * (engine_health.c). The verify pool checks objects read from deeper tiers (CRCs) and
 * copies them out, so a tier's I/O thread goes back to its I/O at once.
 */
#include "engine_internal.h"

/* ------------------------------------------------------------ completions */

/* Reserve a completion node for an operation being admitted: its completion can then be
 * queued even when memory runs out later (never run inside a tier's or the caller's call
 * instead). -ENOMEM if none can be had now. */
int kvt__e_cq_reserve(struct kvt_store *s)
{
	pthread_mutex_lock(&s->cq_lock);
	if (s->cq_nfree > s->cq_reserved) {
		s->cq_reserved++;
		pthread_mutex_unlock(&s->cq_lock);
		return 0;
	}
	pthread_mutex_unlock(&s->cq_lock);
	struct completion *c = kvt__malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_lock(&s->cq_lock);
	kvt_list_add_head(&s->cq_free, &c->node);
	s->cq_nfree++;
	s->cq_reserved++;
	pthread_mutex_unlock(&s->cq_lock);
	return 0;
}

void kvt__e_cq_unreserve(struct kvt_store *s)
{
	pthread_mutex_lock(&s->cq_lock);
	s->cq_reserved--;
	pthread_mutex_unlock(&s->cq_lock);
}

static void cq_push(struct kvt_store *s, struct completion *c, kvt_cb cb, void *arg,
		    const struct kvt_result *res)
{
	c->cb = cb;
	c->arg = arg;
	c->res = *res;
	kvt_list_add_tail(&s->cq, &c->node);
	s->cq_len++;
}

static void cq_signal(struct kvt_store *s)
{
	uint64_t one = 1;
	ssize_t w = write(s->efd, &one, sizeof(one));
	(void)w;
}

/* Complete an admitted operation (it reserved a node in kvt__e_admit_inflight). */
void kvt__e_complete(struct kvt_store *s, kvt_cb cb, void *arg, bool direct,
		     const struct kvt_result *res)
{
	if (direct) {
		kvt__e_cq_unreserve(s);
		atomic_fetch_sub(&s->inflight, 1);
		cb(arg, res);
		return;
	}
	pthread_mutex_lock(&s->cq_lock);
	/* reserved: never NULL */
	struct completion *c = kvt_list_entry(kvt_list_pop(&s->cq_free), struct completion, node);
	s->cq_nfree--;
	s->cq_reserved--;
	cq_push(s, c, cb, arg, res);
	pthread_mutex_unlock(&s->cq_lock);
	atomic_fetch_sub(&s->inflight, 1);
	cq_signal(s);
}

void kvt__store_complete(struct kvt_store *s, kvt_cb cb, void *arg, const struct kvt_result *res)
{
	if (s->client) { /* a client store's completions are its client's */
		while (kvt__client_complete(s->client, cb, arg, res) < 0)
			usleep(1000);
		return;
	}
	/* Not admitted through the store (the device layer): a node now, from the spare
	 * ones if malloc fails, else wait for one - never run the callback here. */
	for (;;) {
		struct completion *c = kvt__malloc(sizeof(*c));
		pthread_mutex_lock(&s->cq_lock);
		if (!c && s->cq_nfree > s->cq_reserved) {
			c = kvt_list_entry(kvt_list_pop(&s->cq_free), struct completion, node);
			s->cq_nfree--;
		}
		if (c) {
			cq_push(s, c, cb, arg, res);
			pthread_mutex_unlock(&s->cq_lock);
			cq_signal(s);
			return;
		}
		pthread_mutex_unlock(&s->cq_lock);
		usleep(1000);
	}
}

/* kvt_poll (engine.c) once past the call gate, and the close's own polls. */
int kvt__e_poll(struct kvt_store *s, int timeout_ms)
{
	pthread_mutex_lock(&s->cq_lock);
	bool empty = kvt_list_empty(&s->cq);
	pthread_mutex_unlock(&s->cq_lock);
	if (empty && timeout_ms != 0) {
		struct pollfd p = {.fd = s->efd, .events = POLLIN};
		int r = poll(&p, 1, timeout_ms);
		if (r < 0)
			return -errno;
	}
	uint64_t v;
	ssize_t rd = read(s->efd, &v, sizeof(v)); /* non-blocking; resets the counter */
	(void)rd;
	/* Run as many completions as are queued now, taking one at a time: what this poll has
	 * not reached yet stays on the queue, so a kvt_poll nested in one of its callbacks can
	 * run a sibling completion queued together with its own (and this poll may then run
	 * one queued since, within the same count). Anything queued after the eventfd was
	 * read made it readable again. */
	pthread_mutex_lock(&s->cq_lock);
	uint64_t queued = s->cq_len;
	int n = 0;
	while (queued-- > 0 && !kvt_list_empty(&s->cq)) {
		struct completion *c =
			kvt_list_entry(kvt_list_pop(&s->cq), struct completion, node);
		s->cq_len--;
		pthread_mutex_unlock(&s->cq_lock);
		c->cb(c->arg, &c->res);
		n++;
		/* Back to the spare list (bounded: at most what was ever in flight). */
		pthread_mutex_lock(&s->cq_lock);
		kvt_list_add_head(&s->cq_free, &c->node);
		s->cq_nfree++;
	}
	pthread_mutex_unlock(&s->cq_lock);
	return n;
}

/* ------------------------------------------------------------ service thread */

int kvt__e_defer(struct kvt_store *s, void (*fn)(void *), void *arg)
{
	struct work *w = kvt__malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->fn = fn;
	w->arg = arg;
	pthread_mutex_lock(&s->work_lock);
	kvt_list_add_tail(&s->work, &w->node);
	pthread_cond_signal(&s->work_cond);
	pthread_mutex_unlock(&s->work_lock);
	return 0;
}

void *kvt__e_service_main(void *arg)
{
	struct kvt_store *s = arg;
	for (;;) {
		/* Deadlines first, on every turn: a steady stream of work must not hold them
		 * off. */
		uint64_t gen;
		uint64_t next = kvt__e_guards_expire(s, &gen);
		pthread_mutex_lock(&s->work_lock);
		struct kvt_list *p = kvt_list_pop(&s->work);
		if (p) {
			struct work *w = kvt_list_entry(p, struct work, node);
			pthread_mutex_unlock(&s->work_lock);
			w->fn(w->arg);
			kvt__free(w);
			continue;
		}
		if (s->stopping) {
			pthread_mutex_unlock(&s->work_lock);
			return NULL;
		}
		/* Sleep until the next deadline (at most 1 s). A deadline armed since we looked
		 * that comes first bumped heap_gen before signalling under work_lock. */
		uint64_t now = kvt__now_ns();
		uint64_t wake = KVT_MIN(next, now + 1000000000ull);
		if (wake > now && gen == atomic_load(&s->heap_gen)) {
			struct timespec ts = {.tv_sec = (time_t)(wake / 1000000000ull),
					      .tv_nsec = (long)(wake % 1000000000ull)};
			pthread_cond_timedwait(&s->work_cond, &s->work_lock, &ts);
		}
		pthread_mutex_unlock(&s->work_lock);
	}
}

/* ------------------------------------------------------------ verify pool */

/* Queue fn(arg) for a verify thread. -ENOMEM (caller runs it itself) if no memory. */
int kvt__e_pool_defer(struct kvt_store *s, void (*fn)(void *), void *arg)
{
	struct work *w = kvt__malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->fn = fn;
	w->arg = arg;
	pthread_mutex_lock(&s->pool_lock);
	kvt_list_add_tail(&s->pool_work, &w->node);
	pthread_cond_signal(&s->pool_cond);
	pthread_mutex_unlock(&s->pool_lock);
	return 0;
}

void *kvt__e_pool_main(void *arg)
{
	struct kvt_store *s = arg;
	pthread_mutex_lock(&s->pool_lock);
	for (;;) {
		struct kvt_list *p = kvt_list_pop(&s->pool_work);
		if (p) {
			struct work *w = kvt_list_entry(p, struct work, node);
			pthread_mutex_unlock(&s->pool_lock);
			w->fn(w->arg);
			kvt__free(w);
			pthread_mutex_lock(&s->pool_lock);
			continue;
		}
		if (s->pool_stopping)
			break;
		pthread_cond_wait(&s->pool_cond, &s->pool_lock);
	}
	pthread_mutex_unlock(&s->pool_lock);
	return NULL;
}

void kvt__e_pool_stop(struct kvt_store *s)
{
	pthread_mutex_lock(&s->pool_lock);
	s->pool_stopping = true;
	pthread_cond_broadcast(&s->pool_cond);
	pthread_mutex_unlock(&s->pool_lock);
	for (int i = 0; i < s->n_pool; i++)
		pthread_join(s->pool[i], NULL);
	s->n_pool = 0;
}
