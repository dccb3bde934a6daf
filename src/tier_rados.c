/*
 * tier_rados.c - the "rados" tier: objects in a Ceph pool through librados' C async API.
 *
 * One object per chunk, named by the key's 64 hex digits, in rados.pool and
 * rados.namespace. write is rados_aio_write_full (the OSD replaces the object atomically:
 * a reader sees the old or the new object, never a mix); read issues one read op (a
 * rados_read_op_read, see issue()) per segment at its offset, so a layer range costs only
 * its bytes; exists is one rados_aio_stat
 * per key, all in flight at once; remove is rados_aio_remove. The pool may be replicated or
 * erasure-coded: Ceph does the coding, and every call here works on both (no partial
 * overwrites, no omap), see docs/TIERS.md.
 *
 * Corrupt objects: each read remembers the object version the OSD served (per key, recent
 * reads), and drop_corrupt removes the object only if it still has that version (one write
 * op: assert_version, then remove). Another node may have replaced the object with good
 * bytes since that read (write_full makes a new version); an unconditional remove would
 * delete that good copy, and every node would then miss the key. A key whose recent reads
 * served different versions, or that no remembered read served, is left in place: a corrupt
 * copy left costs a later re-read (which reports it again), a good copy dropped costs every
 * node a miss.
 *
 * Submission: librados' objecter throttles inside the submitting call; this tier lifts
 * those limits and keeps its own (rados.max_inflight). A call with room under the limit and
 * nothing queued ahead is issued straight from the caller's thread (no hop); otherwise it
 * waits in a FIFO that the tier's submission thread drains as completions free room.
 * Completions arrive on librados' finisher thread (a thread of this tier's cluster handle),
 * which runs the callbacks; a call whose requests all fail synchronously has its callback
 * handed to the submission thread, so no callback ever runs inside the caller's call.
 *
 * Writes are zero-copy where src/rados_zc.cc is built (rados.zero_copy): librados sends
 * from the caller's buffer, which the caller keeps until the callback (src/tier.h). A write
 * whose completion arrives while librados still holds a reference to that buffer (its
 * messenger has not sent it yet, e.g. after a timeout) is not answered until it lets go:
 * the submission thread polls such "lingering" writes, and close answers the rest after
 * rados_shutdown, when no librados thread is left to read the memory.
 *
 * Timeouts: rados.timeout_ms sets client_mount_timeout, rados_mon_op_timeout and
 * rados_osd_op_timeout, so an unreachable OSD or monitor fails an operation with
 * -ETIMEDOUT instead of hanging; operations still queued past their deadline fail the same.
 * A listing (rt_scan) is held as a whole to RADOS_LIST_TIMEOUTS times rados.timeout_ms.
 * close() cancels queued operations (-ECANCELED) and waits for those in flight.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rados/librados.h>

#include "tier.h"
#ifdef KVT_HAVE_RADOS_ZC
#include "rados_zc.h"
#endif

enum rados_kind { OP_EXISTS, OP_READ, OP_WRITE, OP_REMOVE, OP_DROP };

struct rados_op;

/* One librados call of an operation. */
struct rados_sub {
	struct rados_op *op;
	uint32_t idx;
	uint64_t size; /* stat */
	time_t mtime;
	void *buf; /* read */
	uint64_t off, len;
	void *hold;		 /* zero-copy write: librados' references to the buffer */
	uint64_t ver;		 /* read: the object version the OSD served (0: none) */
	size_t got;		 /* read: bytes the OSD returned */
	int prval;		 /* read: the read step's own result */
	rados_read_op_t rop;	 /* read: released when it completes */
	rados_write_op_t wop;	 /* drop: released when it completes */
	int rc;			 /* a lingering write's result */
	struct rados_sub *next;	 /* lingering list */
};

/* One tier call. */
struct rados_op {
	struct rados_state *s;
	struct rados_op *next; /* queue */
	enum rados_kind kind;
	kvt_tier_cb cb;
	void *arg;
	uint64_t deadline_ns;
	_Atomic uint32_t pending;
	_Atomic int result;
	_Atomic uint64_t total;
	uint8_t *present;
	const void *obj;
	uint64_t len;
	uint32_t nsub;
	struct kvt_key key;		     /* read, drop */
	uint64_t ver;			     /* drop: the version the read served */
	char (*oids)[2 * KVT_KEY_BYTES + 1]; /* one per sub (exists) or one for all */
	struct rados_sub subs[];
};

#define RADOS_SERVED 4096 /* reads remembered for drop_corrupt */

struct rados_served {
	struct kvt_key key;
	uint64_t ver; /* the version read; 0: reads served more than one (drop nothing) */
	uint32_t reads; /* reads remembered and not yet reported (a report takes one) */
	bool used;
};

struct rados_state {
	bool ro; /* store.read_only: inspection writes, deletes and creates nothing */
	struct kvt_log_limit refuse_limit; /* the lines of refused writes (op_complete) */
	struct kvt_tier *t;
	rados_t cluster;
	rados_ioctx_t io;
	bool connected, have_io;
	uint32_t max_inflight;
	uint64_t timeout_ns;
	uint64_t list_ns; /* a whole listing's bound (kvt__tier_list_ns) */
	char pool[256];
	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* queue not empty, slot freed, closing */
	bool closing;
	struct rados_op *head, *tail;
	/* the submission thread issues an op it took off the queue: callers queue behind it
	 * (the fast path would take the slot it waits for, every time under load) */
	bool issuing;
	struct rados_op *deferred; /* issued directly, all ended before the call returned */
	struct rados_sub *linger;  /* zero-copy writes completed, buffer still referenced */
	bool zero_copy;
	uint64_t lingered; /* writes that waited for librados to release their buffer */
	uint32_t direct;	   /* callers inside issue_direct(): close waits for them */
	uint32_t inflight;	   /* librados calls not yet completed */
	struct kvt_io_counters cnt;
	/* Which object version each recent read of a key served (by key hash, direct-mapped,
	 * under served_lock): drop_corrupt removes only that version (see the note above). */
	pthread_mutex_t served_lock;
	struct rados_served served[RADOS_SERVED];
};

static const char *sub_oid(struct rados_sub *u)
{
	return u->op->kind == OP_EXISTS ? u->op->oids[u->idx] : u->op->oids[0];
}

static void op_complete(struct rados_op *op);

static struct rados_served *served_slot(struct rados_state *s, const struct kvt_key *key)
{
	return &s->served[kvt__key_hash(key) % RADOS_SERVED];
}

/* A read of key served version ver (0: more than one, its segments disagreed). A second
 * read that served another version than the one remembered makes the key ambiguous until
 * the next drop_corrupt: a report may then be about either copy. */
static void remember_served(struct rados_state *s, const struct kvt_key *key, uint64_t ver)
{
	pthread_mutex_lock(&s->served_lock);
	struct rados_served *e = served_slot(s, key);
	if (e->used && kvt__key_eq(&e->key, key)) {
		if (e->ver != ver)
			e->ver = 0;
		e->reads += e->reads < UINT32_MAX;
	} else {
		*e = (struct rados_served){.key = *key, .ver = ver, .reads = 1, .used = true};
	}
	pthread_mutex_unlock(&s->served_lock);
}

/* The one version recent reads of key served; 0 if none or several. A report takes one
 * read: the record is forgotten once none is left (or at once if ambiguous: the next
 * report is about a later read). Kept while reads are left, a read of another version
 * before the late report of one of them makes the key ambiguous - forgotten at the first
 * report, as until 2026-12-05, the late report was taken for a new good copy and dropped
 * it (a review's reproducer: two reads of copy 1, one report, copy 2 written and read,
 * the second report). */
static uint64_t recall_served(struct rados_state *s, const struct kvt_key *key)
{
	uint64_t ver = 0;
	pthread_mutex_lock(&s->served_lock);
	struct rados_served *e = served_slot(s, key);
	if (e->used && kvt__key_eq(&e->key, key)) {
		ver = e->ver;
		e->used = ver != 0 && --e->reads > 0;
	}
	pthread_mutex_unlock(&s->served_lock);
	return ver;
}

/* A sub-request ended with rc (librados' return value, or our own -errno). */
static void sub_done(struct rados_sub *u, int rc)
{
	struct rados_op *op = u->op;
	struct rados_state *s = op->s;
	switch (op->kind) {
	case OP_EXISTS:
		if (rc == -ENOENT) {
			op->present[u->idx] = 0;
			rc = 0;
		} else if (rc >= 0) {
			op->present[u->idx] = 1;
		}
		break;
	case OP_READ:
		/* The count is the OSD reply's length. More than the segment is never bytes of
		 * it and must not reach the caller as the object's size (it verifies that many
		 * bytes of its buffer): the read op refuses such a reply before copying it
		 * (on_complete), and the count is checked again here as it is added. */
		if (rc >= 0 && u->got > u->len)
			rc = -EIO;
		if (rc >= 0) {
			atomic_fetch_add(&op->total, (uint64_t)u->got);
			atomic_fetch_add(&s->cnt.read_bytes, (uint64_t)u->got);
			rc = 0;
		}
		break;
	case OP_WRITE:
		if (rc >= 0)
			atomic_fetch_add(&s->cnt.write_bytes, op->len);
		break;
	case OP_DROP:
		/* The version assert failed: the object is not the copy the read served (a newer
		 * one, written since) and stays. Not an error. */
		if (rc == -ERANGE || rc == -EOVERFLOW) {
			KVT_INFO(&s->t->log, "rados: %s was rewritten since the corrupt read; left "
					     "in place", op->oids[0]);
			rc = 0;
		} else if (rc >= 0) {
			atomic_fetch_add(&s->cnt.removes, 1);
		}
		break;
	default:
		break;
	}
	if (rc < 0) {
		int zero = 0;
		atomic_compare_exchange_strong(&op->result, &zero, rc);
	}
	if (atomic_fetch_sub(&op->pending, 1) == 1)
		op_complete(op);
}

/* Every sub-request has ended: the one callback of the tier call, then the op is freed. */
static void op_complete(struct rados_op *op)
{
	struct rados_state *s = op->s;
	int64_t result = atomic_load(&op->result);
	if (result >= 0 && op->kind == OP_READ) { /* never clamped: objects may exceed 2 GiB */
		result = (int64_t)atomic_load(&op->total);
		/* Before the callback: the caller may report the bytes corrupt from it. */
		uint64_t ver = 0;
		bool any = false;
		for (uint32_t i = 0; i < op->nsub; i++) {
			uint64_t v = op->subs[i].ver;
			if (!v)
				continue; /* not issued (empty segment) */
			ver = any && v != ver ? 0 : v;
			any = true;
			if (!ver)
				break;
		}
		if (any)
			remember_served(s, &op->key, ver);
	}
	/* A write larger than the OSDs take in one message (osd_max_write_size: -EMSGSIZE)
	 * is refused for its size, as one above osd_max_object_size (-EFBIG) is: the engine
	 * counts -EFBIG, and a full pool's -EDQUOT / -ENOSPC, as writes refused rather than
	 * as a failing tier (until 2026-12-06 -EMSGSIZE opened the circuit, and none of them
	 * said a word above debug level). */
	if (result == -EMSGSIZE)
		result = -EFBIG;
	if (result == -EFBIG || result == -EDQUOT || result == -ENOSPC)
		kvt__logf_limited(&s->t->log, &s->refuse_limit, KVT_LOG_WARN,
				  "rados: pool '%s' refuses writes: %s", s->pool,
				  result == -EFBIG    ? "an object larger than the OSDs take "
							"(osd_max_write_size, osd_max_object_size)"
				  : result == -EDQUOT ? "the pool is at its quota"
						      : "the cluster or pool is full");
	/* A quota is a full pool to the engine: -EDQUOT is its NVMe write budget, a rolling
	 * day, which offers the chunk again at every hit. */
	if (result == -EDQUOT)
		result = -ENOSPC;
	if (result < 0 && result != -ENOENT && result != -ECANCELED) {
		atomic_fetch_add(&s->cnt.errors, 1);
		KVT_DEBUG(&s->t->log, "rados: %s: %s", op->oids[0], strerror((int)-result));
	}
	kvt_tier_cb cb = op->cb;
	void *arg = op->arg;
	kvt__free(op);
	if (cb)
		cb(arg, result);
}

/* A zero-copy write's buffer is the caller's again: answer it. */
static void zc_finish(struct rados_sub *u)
{
#ifdef KVT_HAVE_RADOS_ZC
	kvt__rados_zc_release(u->hold);
#endif
	u->hold = NULL;
	sub_done(u, u->rc);
}

/* librados finisher thread. */
static void on_complete(rados_completion_t c, void *arg)
{
	struct rados_sub *u = arg;
	struct rados_state *s = u->op->s;
	int rc = rados_aio_get_return_value(c);
	if (rc >= 0 && u->op->kind == OP_READ) {
		/* the version is the op's (librados keeps it for read ops as for aio_read) */
		u->ver = rados_aio_get_version(c);
		/* -ERANGE: the reply was longer than the segment, nothing of it copied */
		if (u->prval < 0)
			rc = u->prval == -ERANGE ? -EIO : u->prval;
	}
	rados_aio_release(c);
	if (u->rop) {
		rados_release_read_op(u->rop);
		u->rop = NULL;
	}
	if (u->wop) {
		rados_release_write_op(u->wop);
		u->wop = NULL;
	}
	if (rc == -ETIMEDOUT || rc == -ETIME)
		rc = -ETIMEDOUT;
	bool linger = false;
#ifdef KVT_HAVE_RADOS_ZC
	linger = u->hold && kvt__rados_zc_busy(u->hold);
#endif
	u->rc = rc;
	if (!linger) {
		if (u->hold)
			zc_finish(u);
		else
			sub_done(u, rc);
	}
	pthread_mutex_lock(&s->lock);
	if (linger) { /* answered by the submission thread once librados lets go */
		s->lingered++;
		u->next = s->linger;
		s->linger = u;
	}
	if (s->inflight-- == s->max_inflight || s->closing || linger)
		pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

/* Answer the lingering writes whose buffers librados has released (all of them when
 * force: after rados_shutdown). Called with s->lock held; drops it around callbacks. */
static void linger_sweep(struct rados_state *s, bool force)
{
	struct rados_sub **pp = &s->linger;
	while (*pp) {
		struct rados_sub *u = *pp;
		bool busy = false;
#ifdef KVT_HAVE_RADOS_ZC
		busy = !force && kvt__rados_zc_busy(u->hold);
#endif
		if (busy) {
			pp = &u->next;
			continue;
		}
		*pp = u->next;
		pthread_mutex_unlock(&s->lock);
		zc_finish(u);
		pthread_mutex_lock(&s->lock);
		pp = &s->linger; /* the list may have changed while unlocked */
	}
}

static int issue(struct rados_state *s, struct rados_sub *u)
{
	rados_completion_t c;
	int rc = rados_aio_create_completion2(u, on_complete, &c);
	if (rc < 0)
		return rc;
	const char *oid = sub_oid(u);
	struct rados_op *op = u->op;
	switch (op->kind) {
	case OP_EXISTS:
		rc = rados_aio_stat(s->io, oid, c, &u->size, &u->mtime);
		break;
	case OP_READ: {
		/* A read op, not rados_aio_read: that one copies the OSD's reply into buf at the
		 * reply's length, unbounded, so a reply longer than the segment (a faulty OSD,
		 * or anyone on a messenger without secure mode) overflowed the caller's buffer
		 * before sub_done could refuse it. The read op's handler copies nothing and
		 * sets -ERANGE then. It has no INT_MAX limit on the length either (rados_aio_read
		 * refused such a segment, -EDOM); one reply still carries at most what one OSD
		 * message does (under 4 GiB) and the object, osd_max_object_size. */
		rados_read_op_t r = rados_create_read_op();
		if (!r) {
			rc = -ENOMEM;
			break;
		}
		rados_read_op_read(r, u->off, (size_t)u->len, u->buf, &u->got, &u->prval);
		u->rop = r; /* before the completion can run */
		rc = rados_aio_read_op_operate(r, s->io, c, oid, LIBRADOS_OPERATION_NOFLAG);
		if (rc < 0) { /* no completion will run: u is still ours */
			u->rop = NULL;
			rados_release_read_op(r);
		}
		atomic_fetch_add(&s->cnt.reads, 1);
		break;
	}
	case OP_WRITE:
#ifdef KVT_HAVE_RADOS_ZC
		if (s->zero_copy) {
			rc = kvt__rados_zc_write_full(s->io, oid, c, op->obj, (size_t)op->len,
						      &u->hold);
			atomic_fetch_add(&s->cnt.writes, 1);
			break;
		}
#endif
		rc = rados_aio_write_full(s->io, oid, c, op->obj, (size_t)op->len);
		atomic_fetch_add(&s->cnt.writes, 1);
		break;
	case OP_REMOVE:
		rc = rados_aio_remove(s->io, oid, c);
		atomic_fetch_add(&s->cnt.removes, 1);
		break;
	case OP_DROP: {
		/* Removes the object only if it is still the version the corrupt read served. */
		rados_write_op_t w = rados_create_write_op();
		if (!w) {
			rc = -ENOMEM;
			break;
		}
		rados_write_op_assert_version(w, op->ver);
		rados_write_op_remove(w);
		u->wop = w; /* before the completion can run */
		rc = rados_aio_write_op_operate(w, s->io, c, oid, NULL, 0);
		if (rc < 0) { /* no completion will run: u is still ours */
			u->wop = NULL;
			rados_release_write_op(w);
		}
		break;
	}
	}
	if (rc < 0)
		rados_aio_release(c);
	return rc;
}

/* Under s->lock: run the callbacks of direct callers' ops that ended (s->deferred) and of
 * lingering zero-copy writes librados let go of. */
static void deliver(struct rados_state *s)
{
	while (s->deferred) {
		struct rados_op *d = s->deferred;
		s->deferred = d->next;
		pthread_mutex_unlock(&s->lock);
		op_complete(d);
		pthread_mutex_lock(&s->lock);
	}
	if (s->linger)
		linger_sweep(s, false);
}

static void *submit_thread(void *arg)
{
	struct rados_state *s = arg;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		/* Exit only once closing, with nothing queued, nothing to deliver and no caller
		 * still issuing directly (it may yet hand over a callback). */
		while (!s->head && !s->deferred && (!s->closing || s->direct)) {
			if (!s->linger) {
				pthread_cond_wait(&s->cond, &s->lock);
				continue;
			}
			linger_sweep(s, false);
			if (s->linger) { /* poll: librados says nothing when it lets go */
				struct timespec ts;
				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_nsec += 1000000;
				if (ts.tv_nsec >= 1000000000) {
					ts.tv_sec++;
					ts.tv_nsec -= 1000000000;
				}
				pthread_cond_timedwait(&s->cond, &s->lock, &ts);
			}
		}
		/* also while the queue is never empty: a lingering write's callback, and the
		 * caller's buffer, were held back until it was (a review) */
		deliver(s);
		struct rados_op *op = s->head;
		if (!op && s->closing && !s->direct)
			break;
		if (!op)
			continue;
		s->head = op->next;
		if (!s->head)
			s->tail = NULL;
		s->issuing = true;
		/* Once its last sub-request is issued the op may complete and be freed on a
		 * librados thread: nothing of it is read after that. */
		uint32_t nsub = op->nsub;
		for (uint32_t i = 0; i < nsub; i++) {
			struct rados_sub *u = &op->subs[i];
			/* A slot frees when an op in flight ends, which may be long after this
			 * op's deadline (a stalled OSD): the wait ends at the deadline too, and the
			 * op is answered -ETIMEDOUT then, as the file comment says (until
			 * 2026-12-06 it waited for a slot, then failed, up to a timeout late). */
			while (s->inflight >= s->max_inflight && !s->closing) {
				uint64_t now = kvt__now_ns();
				if (now >= op->deadline_ns)
					break;
				uint64_t left = KVT_MIN(op->deadline_ns - now, 1000000000ull);
				struct timespec ts;
				clock_gettime(CLOCK_REALTIME, &ts); /* s->cond's clock */
				uint64_t ns = (uint64_t)ts.tv_nsec + left;
				ts.tv_sec += (time_t)(ns / 1000000000ull);
				ts.tv_nsec = (long)(ns % 1000000000ull);
				pthread_cond_timedwait(&s->cond, &s->lock, &ts);
				/* meanwhile, what the loop above delivers (until 2026-12-06 held back
				 * for the whole wait: a zero-copy write's buffer with it) */
				deliver(s);
			}
			int rc = 0;
			if (s->closing)
				rc = -ECANCELED;
			else if (kvt__now_ns() >= op->deadline_ns)
				rc = -ETIMEDOUT;
			else if (op->kind == OP_READ && !u->len)
				rc = 1; /* an empty segment: nothing to ask for */
			if (rc == 0) {
				s->inflight++;
				pthread_mutex_unlock(&s->lock);
				rc = issue(s, u);
				pthread_mutex_lock(&s->lock);
				if (rc >= 0)
					continue;
				s->inflight--;
			}
			pthread_mutex_unlock(&s->lock);
			sub_done(u, rc > 0 ? 0 : rc);
			pthread_mutex_lock(&s->lock);
		}
		s->issuing = false;
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* ------------------------------------------------------------------ submission */

static struct rados_op *op_new(struct rados_state *s, enum rados_kind kind, uint32_t nsub,
			       uint32_t noids, kvt_tier_cb cb, void *arg)
{
	size_t sz = sizeof(struct rados_op) + nsub * sizeof(struct rados_sub);
	sz = KVT_ALIGN_UP(sz, 8);
	struct rados_op *op = kvt__calloc(1, sz + (size_t)noids * (2 * KVT_KEY_BYTES + 1));
	if (!op)
		return NULL;
	op->s = s;
	op->kind = kind;
	op->cb = cb;
	op->arg = arg;
	op->nsub = nsub;
	atomic_init(&op->pending, nsub);
	op->deadline_ns = kvt__now_ns() + s->timeout_ns;
	op->oids = (void *)((char *)op + sz);
	for (uint32_t i = 0; i < nsub; i++) {
		op->subs[i].op = op;
		op->subs[i].idx = i;
	}
	return op;
}

/* Issue every sub-request of op from the caller's thread. librados queues the request and
 * returns (the objecter's throttles are set above anything this tier lets through, so it
 * does not block), and its completions always come through its finisher thread. A guard
 * reference keeps op alive until the last issue returns; if everything has already ended
 * by then (a synchronous failure), the callback is handed to the tier's thread, so it
 * never runs inside this call. */
static void issue_direct(struct rados_state *s, struct rados_op *op)
{
	uint32_t nsub = op->nsub;
	atomic_fetch_add(&op->pending, 1);
	for (uint32_t i = 0; i < nsub; i++) {
		struct rados_sub *u = &op->subs[i];
		int rc = op->kind == OP_READ && !u->len ? 1 : issue(s, u);
		if (rc >= 0 && rc != 1)
			continue;
		pthread_mutex_lock(&s->lock);
		s->inflight--;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
		sub_done(u, rc > 0 ? 0 : rc);
	}
	bool last = atomic_fetch_sub(&op->pending, 1) == 1;
	pthread_mutex_lock(&s->lock);
	if (last) {
		op->next = s->deferred;
		s->deferred = op;
	}
	s->direct--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

static int submit(struct rados_state *s, struct rados_op *op)
{
	pthread_mutex_lock(&s->lock);
	if (s->closing) {
		pthread_mutex_unlock(&s->lock);
		kvt__free(op);
		return -ECANCELED;
	}
	/* Fast path: nothing queued ahead and room for all of it - no thread hop. */
	if (!s->head && !s->issuing && s->inflight + op->nsub <= s->max_inflight) {
		s->inflight += op->nsub;
		s->direct++;
		pthread_mutex_unlock(&s->lock);
		issue_direct(s, op);
		return 0;
	}
	op->next = NULL;
	if (s->tail)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static int rt_exists(struct kvt_tier *t, const struct kvt_key *keys, uint32_t n, uint8_t *present,
		     kvt_tier_cb cb, void *arg)
{
	struct rados_state *s = t->state;
	if (!cb || (n && (!keys || !present)))
		return -EINVAL;
	if (!n) { /* nothing to ask: still complete later, on the tier's thread */
		struct rados_op *op = op_new(s, OP_READ, 1, 1, cb, arg);
		if (!op)
			return -ENOMEM;
		return submit(s, op);
	}
	struct rados_op *op = op_new(s, OP_EXISTS, n, n, cb, arg);
	if (!op)
		return -ENOMEM;
	op->present = present;
	for (uint32_t i = 0; i < n; i++)
		kvt_key_to_hex(&keys[i], op->oids[i]);
	return submit(s, op);
}

static int rt_read(struct kvt_tier *t, const struct kvt_key *key, const struct kvt_seg *segs,
		   uint32_t nsegs, kvt_tier_cb cb, void *arg)
{
	struct rados_state *s = t->state;
	if (!cb || !key || (nsegs && !segs))
		return -EINVAL;
	struct rados_op *op = op_new(s, OP_READ, nsegs ? nsegs : 1, 1, cb, arg);
	if (!op)
		return -ENOMEM;
	kvt_key_to_hex(key, op->oids[0]);
	op->key = *key;
	/* Each segment is its own OSD read, so several are not atomic: a remove between them
	 * ends the read -ENOENT (a miss), and a rewrite may mix two writes of the key (equal
	 * bytes unless encrypted: fresh nonce), which the reader's CRC/MAC checks refuse
	 * (-EBADMSG). The engine reads whole objects as one segment: one read, atomic. */
	for (uint32_t i = 0; i < nsegs; i++) {
		if ((segs[i].len && !segs[i].buf) || segs[i].len > SIZE_MAX / 2) {
			kvt__free(op);
			return -EINVAL;
		}
		op->subs[i].buf = segs[i].buf;
		op->subs[i].off = segs[i].off;
		op->subs[i].len = segs[i].len;
	}
	return submit(s, op);
}

static int rt_write(struct kvt_tier *t, const struct kvt_key *key, const void *obj, uint64_t len,
		    kvt_tier_cb cb, void *arg)
{
	struct rados_state *s = t->state;
	if (!cb || !key || (len && !obj) || len > SIZE_MAX / 2)
		return -EINVAL;
	if (s->ro)
		return -EROFS;
	struct rados_op *op = op_new(s, OP_WRITE, 1, 1, cb, arg);
	if (!op)
		return -ENOMEM;
	kvt_key_to_hex(key, op->oids[0]);
	op->obj = obj;
	op->len = len;
	return submit(s, op);
}

static int rt_remove(struct kvt_tier *t, const struct kvt_key *key, kvt_tier_cb cb, void *arg)
{
	struct rados_state *s = t->state;
	if (!cb || !key)
		return -EINVAL;
	if (s->ro)
		return -EROFS;
	struct rados_op *op = op_new(s, OP_REMOVE, 1, 1, cb, arg);
	if (!op)
		return -ENOMEM;
	kvt_key_to_hex(key, op->oids[0]);
	return submit(s, op);
}

static void rt_drop_corrupt(struct kvt_tier *t, const struct kvt_key *key)
{
	struct rados_state *s = t->state;
	atomic_fetch_add(&s->cnt.checksum_failures, 1);
	if (s->ro)
		return; /* inspection never deletes */
	uint64_t ver = recall_served(s, key);
	if (!ver) {
		char hex[2 * KVT_KEY_BYTES + 1];
		kvt_key_to_hex(key, hex);
		KVT_DEBUG(&s->t->log, "rados: %s: recent reads served no single copy; not dropped",
			  hex);
		return;
	}
	struct rados_op *op = op_new(s, OP_DROP, 1, 1, NULL, NULL);
	if (!op)
		return;
	kvt_key_to_hex(key, op->oids[0]);
	op->key = *key;
	op->ver = ver;
	submit(s, op);
}

static void rt_stats(struct kvt_tier *t, struct kvt_tier_stats *out)
{
	struct rados_state *s = t->state;
	kvt__io_counters_read(&s->cnt, out);
}

/* A whole listing's limit, in rados.timeout_ms: 30 s by default, the caller's own
 * store.sync_timeout_ms, which raises it where longer (kvt__tier_list_ns). */
#define RADOS_LIST_TIMEOUTS 6

/* Synchronous listing of this namespace (recovery, `kvtier ls`): objects whose names are
 * keys, with their sizes. Other objects in the pool are skipped. Each librados call is made
 * of objecter ops, each cancelled -ETIMEDOUT by rados_osd_op_timeout (rados.timeout_ms in
 * whole seconds, rounded up: rt_open), so none blocks for ever. The whole listing is held
 * to RADOS_LIST_TIMEOUTS times rados.timeout_ms, or the caller's bound where that is longer
 * (kvt__tier_list_ns), checked before each call, else -ETIMEDOUT: past the caller's bound
 * (store.sync_timeout_ms, src/tier_bounded.c) a listing left running keeps the tier busy
 * and its close waiting, so it must end by itself, also on a cluster that answers every
 * call in time, or one that holds many objects.
 *
 * One call must be short too. The OSDs filter by namespace only after reading the objects
 * of every namespace, and a listing call goes on asking placement groups until it has an
 * entry or reaches the end of its range: with rados_nobjects_list_next (until 2026-12-05) a
 * namespace that is empty in a pool shared with others that hold 10 million objects was
 * one call of ~10,000 requests, far past the bound. So the pool's hash range is cut into
 * slices of about LIST_SLICE_OBJECTS objects of all namespaces (from the pool's
 * statistics) and each call lists within one slice (rados_object_list): a call is at most
 * ~16 requests, and the listing may overrun its bound by one of them. Measured on the
 * test cluster (memstore, 252,556 objects in another namespace, this one empty, a 60 ms
 * bound): the old listing's one call ran 0.1-0.2 s past it and the store closed with the
 * tier still busy; sliced, it stops at the bound. A small pool is one slice. */
#define LIST_SLICE_OBJECTS 16384u
#define LIST_PAGE 1024u

static int rt_scan(struct kvt_tier *t, kvt_scan_fn fn, void *arg)
{
	struct rados_state *s = t->state;
	uint64_t list_end = kvt__now_ns() + s->list_ns;
	uint64_t listed = 0; /* names the listing returned */
	struct rados_pool_stat_t ps;
	int rc = rados_ioctx_pool_stat(s->io, &ps);
	if (rc < 0)
		return rc == -ETIME ? -ETIMEDOUT : rc;
	uint64_t slices = KVT_MAX((uint64_t)1, ps.num_objects / LIST_SLICE_OBJECTS + 1);
	slices = KVT_MIN(slices, (uint64_t)1 << 20);
	rados_object_list_item *items = kvt__calloc(LIST_PAGE, sizeof(*items));
	rados_object_list_cursor begin = rados_object_list_begin(s->io);
	rados_object_list_cursor finish = rados_object_list_end(s->io);
	if (!items || !begin || !finish) {
		rc = items ? -ENOENT : -ENOMEM; /* a NULL cursor: the pool is gone */
		goto out;
	}
	bool over = false, stop = false; /* the whole listing's limit reached; fn said stop */
	for (uint64_t k = 0; k < slices && !rc && !over && !stop; k++) {
		/* the slice's cursors must exist before it fills them (librados asserts) */
		rados_object_list_cursor cur = rados_object_list_begin(s->io);
		rados_object_list_cursor end = rados_object_list_end(s->io);
		if (!cur || !end) {
			if (cur)
				rados_object_list_cursor_free(s->io, cur);
			if (end)
				rados_object_list_cursor_free(s->io, end);
			rc = -ENOENT;
			break;
		}
		rados_object_list_slice(s->io, begin, finish, (size_t)k, (size_t)slices, &cur, &end);
		while (!rc && !over && !stop && rados_object_list_cursor_cmp(s->io, cur, end) < 0) {
			if (kvt__now_ns() >= list_end) {
				over = true;
				break;
			}
			int n = rados_object_list(s->io, cur, end, LIST_PAGE, NULL, 0, items, &cur);
			if (n < 0) {
				rc = n;
				break;
			}
			for (int i = 0; i < n && !rc && !over && !stop; i++) {
				listed++;
				char name[2 * KVT_KEY_BYTES + 1];
				struct kvt_key key;
				if (items[i].oid_length != 2 * KVT_KEY_BYTES)
					continue;
				memcpy(name, items[i].oid, items[i].oid_length);
				name[2 * KVT_KEY_BYTES] = 0;
				if (kvt__key_from_lowerhex(name, &key) < 0)
					continue;
				if (kvt__now_ns() >= list_end) {
					over = true;
					break;
				}
				uint64_t size = 0;
				time_t mtime;
				int src = rados_stat(s->io, name, &size, &mtime);
				if (src == -ENOENT)
					continue; /* removed since it was listed */
				if (src < 0)
					rc = src;
				else if (fn(arg, &key, size))
					stop = true;
			}
			rados_object_list_free(LIST_PAGE, items);
			memset(items, 0, LIST_PAGE * sizeof(*items));
			if (n == 0 && rados_object_list_is_end(s->io, cur))
				break;
		}
		rados_object_list_cursor_free(s->io, cur);
		rados_object_list_cursor_free(s->io, end);
	}
	if (over) {
		KVT_WARN(&t->log,
			 "rados: listing pool '%s': not done within %llu ms (the longer of %d x "
			 "rados.timeout_ms and store.sync_timeout_ms), given up after %llu objects",
			 s->pool, (unsigned long long)(s->list_ns / 1000000), RADOS_LIST_TIMEOUTS,
			 (unsigned long long)listed);
		rc = -ETIMEDOUT;
	}
out:
	if (begin)
		rados_object_list_cursor_free(s->io, begin);
	if (finish)
		rados_object_list_cursor_free(s->io, finish);
	kvt__free(items);
	/* (rados_nobjects_list_next ended a listing with -ENOENT; rados_object_list ends it
	 * with its cursor at the slice's end, so -ENOENT here is the pool gone midway: a
	 * listing not whole, not an empty one) */
	return rc == -ETIME ? -ETIMEDOUT : rc; /* as on_complete: one name for a timeout */
}

/* ------------------------------------------------------------------ open / close */

static void teardown(struct rados_state *s)
{
	if (s->have_io)
		rados_ioctx_destroy(s->io);
	s->have_io = false;
	if (s->cluster)
		rados_shutdown(s->cluster);
	s->cluster = NULL;
	/* No librados thread is left to read a lingering write's buffer: answer them. */
	pthread_mutex_lock(&s->lock);
	linger_sweep(s, true);
	pthread_mutex_unlock(&s->lock);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->served_lock);
}

static int set_opt(struct rados_state *s, const char *k, const char *v)
{
	int rc = rados_conf_set(s->cluster, k, v);
	if (rc < 0)
		KVT_ERR(&s->t->log, "rados: setting %s = %s: %s", k, v, strerror(-rc));
	return rc;
}

static int rt_open(struct kvt_tier *t, const struct kvt_config *cfg)
{
	struct rados_state *s = t->state;
	const struct kvt_log *log = &t->log;
	int rc;
	s->t = t;
	s->ro = kvt__cfg_bool(cfg, "store.read_only");
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	pthread_mutex_init(&s->served_lock, NULL);
	s->max_inflight = (uint32_t)kvt__cfg_u64(cfg, "rados.max_inflight");
	s->timeout_ns = kvt__cfg_u64(cfg, "rados.timeout_ms") * 1000000ULL;
	s->list_ns = kvt__tier_list_ns(cfg, s->timeout_ns, RADOS_LIST_TIMEOUTS);
	s->zero_copy = kvt__cfg_bool(cfg, "rados.zero_copy");
	snprintf(s->pool, sizeof(s->pool), "%s", kvt__cfg_str(cfg, "rados.pool"));
	if (!s->pool[0]) {
		KVT_ERR(log, "rados: rados.pool is empty");
		rc = -EINVAL;
		goto fail;
	}
	char name[256];
	snprintf(name, sizeof(name), "client.%s", kvt__cfg_str(cfg, "rados.user"));
	rc = rados_create2(&s->cluster, "ceph", name, 0);
	if (rc < 0) {
		KVT_ERR(log, "rados: rados_create2(%s): %s", name, strerror(-rc));
		s->cluster = NULL;
		goto fail;
	}
	const char *conf = kvt__cfg_str(cfg, "rados.conf");
	if (!*conf && getenv("CEPH_CONF"))
		conf = getenv("CEPH_CONF");
	rc = rados_conf_read_file(s->cluster, *conf ? conf : NULL);
	if (rc < 0) {
		KVT_ERR(log, "rados: reading %s: %s", *conf ? conf : "the default ceph.conf",
			strerror(-rc));
		goto fail;
	}
	rados_conf_parse_env(s->cluster, NULL); /* CEPH_ARGS */
	const char *keyring = kvt__cfg_str(cfg, "rados.keyring");
	if (!*keyring && getenv("CEPH_KEYRING"))
		keyring = getenv("CEPH_KEYRING");
	if (*keyring && (rc = set_opt(s, "keyring", keyring)) < 0)
		goto fail;
	/* Seconds, rounded up: librados' timeouts have one-second granularity here. */
	char secs[32];
	snprintf(secs, sizeof(secs), "%llu",
		 (unsigned long long)((s->timeout_ns + 999999999ULL) / 1000000000ULL));
	if ((rc = set_opt(s, "client_mount_timeout", secs)) < 0 ||
	    (rc = set_opt(s, "rados_mon_op_timeout", secs)) < 0 ||
	    (rc = set_opt(s, "rados_osd_op_timeout", secs)) < 0)
		goto fail;
	/* The objecter throttles in the submitting call; this tier limits operations itself
	 * (rados.max_inflight) and callers own the bytes, so lift its limits out of the way. */
	char ops[32];
	snprintf(ops, sizeof(ops), "%u", KVT_MAX(s->max_inflight * 2, 1024u));
	if ((rc = set_opt(s, "objecter_inflight_ops", ops)) < 0 ||
	    (rc = set_opt(s, "objecter_inflight_op_bytes", "1099511627776")) < 0)
		goto fail;
	/* A library never writes a log file of its own next to the caller's. */
	rados_conf_set(s->cluster, "log_to_stderr", "false");
	rados_conf_set(s->cluster, "err_to_stderr", "false");
	rc = rados_connect(s->cluster);
	if (rc < 0) {
		KVT_ERR(log, "rados: cannot connect to the cluster (%s, as %s): %s",
			*conf ? conf : "default ceph.conf", name, strerror(-rc));
		goto fail;
	}
	s->connected = true;
	if (rados_pool_lookup(s->cluster, s->pool) == -ENOENT) {
		if (!kvt__cfg_bool(cfg, "rados.create_pool") || s->ro) { /* ro: creates nothing */
			KVT_ERR(log,
				"rados: pool '%s' does not exist; create it (docs/TIERS.md shows "
				"a replicated and an erasure-coded one) or set "
				"rados.create_pool = true",
				s->pool);
			rc = -ENOENT;
			goto fail;
		}
		rc = rados_pool_create(s->cluster, s->pool);
		if (rc < 0 && rc != -EEXIST) {
			KVT_ERR(log, "rados: creating pool '%s': %s", s->pool, strerror(-rc));
			goto fail;
		}
		KVT_INFO(log, "rados: created replicated pool '%s'", s->pool);
	}
	rc = rados_ioctx_create(s->cluster, s->pool, &s->io);
	if (rc < 0) {
		KVT_ERR(log, "rados: opening pool '%s': %s", s->pool, strerror(-rc));
		goto fail;
	}
	s->have_io = true;
	/* On a pool flagged full (its quota reached, or the cluster full) librados holds
	 * every write-type op - removes and drops too - until rados_osd_op_timeout, then says
	 * -ETIMEDOUT: puts kept their buffers that long, nothing could free space, and the
	 * timeouts opened the tier's circuit for reads as well. With full-try a write fails at
	 * once (-EDQUOT / -ENOSPC: refused, as tier.h says) and a remove goes through. */
	rados_set_pool_full_try(s->io);
	rados_ioctx_set_namespace(s->io, kvt__cfg_str(cfg, "rados.namespace"));
	rc = -pthread_create(&s->thread, NULL, submit_thread, s);
	if (rc < 0) {
		KVT_ERR(log, "rados: cannot start the submission thread: %s", strerror(-rc));
		goto fail;
	}
	s->thread_started = true;
#ifndef KVT_HAVE_RADOS_ZC
	s->zero_copy = false; /* built without librados.hpp: the C API copies */
#endif
	KVT_INFO(log, "rados: pool '%s' namespace '%s' as %s, %s writes", s->pool,
		 kvt__cfg_str(cfg, "rados.namespace"), name, s->zero_copy ? "zero-copy" : "copied");
	return 0;
fail:
	teardown(s);
	return rc;
}

static void rt_close(struct kvt_tier *t)
{
	struct rados_state *s = t->state;
	pthread_mutex_lock(&s->lock);
	s->closing = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	if (s->thread_started)
		pthread_join(s->thread, NULL);
	/* In flight: librados ends each within rados_osd_op_timeout; wait for the callbacks. */
	pthread_mutex_lock(&s->lock);
	while (s->inflight)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
	if (s->lingered)
		KVT_INFO(&t->log, "rados: %llu zero-copy writes completed before librados "
				  "released their buffer, and were answered after it",
			 (unsigned long long)s->lingered);
	teardown(s);
}

const struct kvt_tier_ops kvt__tier_rados_ops = {
    .name = "rados",
    .version = 1,
    .state_size = sizeof(struct rados_state),
    .open = rt_open,
    .close = rt_close,
    .exists = rt_exists,
    .read = rt_read,
    .write = rt_write,
    .remove = rt_remove,
    .stats = rt_stats,
    .drop_corrupt = rt_drop_corrupt,
    .scan = rt_scan,
};
