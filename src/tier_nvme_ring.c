/*
 * tier_nvme_ring.c - the NVMe tier's ring thread: I/O slots, the ready list, completion of
 * operations and the loop that sleeps on both I/O and new work.
 *
 * Callers never touch the ring. A submitting call fills an operation (recycled from a free
 * list), appends it to a mutex-protected FIFO and writes an eventfd only when the FIFO was
 * empty; the ring thread keeps a read of that eventfd armed in the ring, so one
 * io_uring_submit_and_wait() sleeps on both I/O and new work. We chose the hand-off over
 * "submit under a mutex" because it lets the ring be SINGLE_ISSUER/DEFER_TASKRUN, keeps the
 * index, LRU, fd cache and capacity accounting single-threaded (no locks on the I/O path),
 * and costs one uncontended lock + at most one eventfd write per call. Callbacks run on the
 * ring thread. At most nvme.queue_depth data/metadata SQEs are in flight, each tracked by
 * one preallocated nv_io slot.
 */
#include "tier_nvme_internal.h"

/* A slot and an SQE for op, or NULL when queue_depth SQEs are already in flight. */
struct nv_io *nv_io_start(struct nv *s, struct nv_op *op, enum nv_kind kind,
			  struct io_uring_sqe **sqe)
{
	struct nv_io *io = s->free_ios;
	if (!io)
		return NULL;
	/* The SQ holds queue_depth + 8 entries and data I/Os take at most queue_depth of them,
	 * but not all of the rest is bounded (the background closes of tier_nvme_fdc.c, SQEs
	 * a refused submission left): none free, the op waits in the ready list. */
	if (!(*sqe = io_uring_get_sqe(&s->ring)))
		return NULL;
	s->free_ios = io->next_free;
	io->next_free = NULL;
	io->op = op;
	io->kind = kind;
	op->pending++;
	op->issued = true;
	io_uring_sqe_set_data(*sqe, io);
	return io;
}

void nv_io_put(struct nv *s, struct nv_io *io)
{
	io->op = NULL;
	io->next_free = s->free_ios;
	s->free_ios = io;
}

void nv_ready_push(struct nv *s, struct nv_op *op)
{
	if (op->in_ready)
		return;
	op->in_ready = true;
	op->next = NULL;
	op->prev = s->ready_tail;
	if (s->ready_tail)
		s->ready_tail->next = op;
	else
		s->ready_head = op;
	s->ready_tail = op;
}

static void ready_remove(struct nv *s, struct nv_op *op)
{
	if (!op->in_ready)
		return;
	if (op->prev)
		op->prev->next = op->next;
	else
		s->ready_head = op->next;
	if (op->next)
		op->next->prev = op->prev;
	else
		s->ready_tail = op->prev;
	op->next = op->prev = NULL;
	op->in_ready = false;
}

static void op_release(struct nv *s, struct nv_op *op)
{
	if (op->segs && op->segs != op->seg_inline)
		kvt__free(op->segs);
	op->segs = NULL;
	op->next = s->done_ops;
	s->done_ops = op;
}

static void check_flushes(struct nv *s)
{
	while (s->flush_head && !nv_flush_waits(s, s->flush_head)) {
		struct nv_op *f = s->flush_head;
		s->flush_head = f->next;
		if (!s->flush_head)
			s->flush_tail = NULL;
		nv_flush_ready(s, f); /* now its syncs (tier_nvme_flush.c) */
	}
}

struct nv_op **nv_leader_slot(struct nv *s, const struct kvt_key *k)
{
	struct nv_op **pp = &s->leaders[kvt__key_hash(k) & (NV_LEADER_BUCKETS - 1)];
	while (*pp && !kvt__key_eq(&(*pp)->key, k))
		pp = &(*pp)->lnext;
	return pp;
}

void nv_finish(struct nv *s, struct nv_op *op, int64_t res)
{
	kvt_tier_cb cb = op->cb;
	void *arg = op->arg;
	bool was_write = op->type == OP_WRITE;
	struct nv_op *followers = NULL;
	ready_remove(s, op);
	if (was_write) /* before its children and parent count are let go: they may be its */
		nv_write_aside_end(s, op, res >= 0);
	if (op->lseg) { /* a read from a log segment: the segment may be reused again */
		nv_log_read_ref(s, op->lseg, -1);
		op->lseg = 0;
	}
	if (was_write && op->parent_uid) { /* not handed to an entry: the write failed */
		nv_parent_count(s, &op->parent, -1, op->parent_uid);
		op->parent_uid = 0;
	}
	if (was_write && op->children) { /* the same: its children are orphans again */
		nv_kids_orphan(s, &op->key, op->uid);
		op->children = 0;
	}
	if (op->leader) {
		struct nv_op **pp = nv_leader_slot(s, &op->key);
		*pp = op->lnext;
		op->leader = false;
		followers = op->followers;
		op->followers = NULL;
	}
	if (was_write) {
		if (op->wprev)
			op->wprev->wnext = op->wnext;
		else
			s->whead = op->wnext;
		if (op->wnext)
			op->wnext->wprev = op->wprev;
		else
			s->wtail = op->wprev;
	}
	op->stage = ST_DONE;
	s->active--;
	op_release(s, op);
	if (cb)
		cb(arg, res);
	while (followers) {
		struct nv_op *f = followers;
		followers = f->lnext;
		nv_finish(s, f, res);
	}
	if (was_write)
		check_flushes(s);
}

/* A started op's I/O goes to the device at once rather than with the rest of the batch
 * drained with it. Ops reach this thread in bursts (a caller resubmits as its completions
 * come back), and a burst submitted in one go comes back as one burst: on the virtual
 * disk of docs/BENCHMARKS.md the device then sat idle 19 % of the time with 32 reads of
 * 64 KiB queued in the tier, against 4 % for fio, which submits each I/O as it queues it.
 * It costs one io_uring_enter per op instead of per batch; submitting each at once read
 * 5-7 % faster (docs/BENCHMARKS.md, "64 KiB reads: convoys, not CPU"). */
static void submit_now(struct nv *s)
{
	if (io_uring_sq_ready(&s->ring))
		io_uring_submit(&s->ring);
}

/* Take new ops from the FIFO; give finished ones back to the free list. */
static bool drain_queue(struct nv *s)
{
	pthread_mutex_lock(&s->qlock);
	struct nv_op *list = s->qhead;
	s->qhead = s->qtail = NULL;
	bool closing = s->closing;
	while (s->done_ops) {
		struct nv_op *op = s->done_ops;
		s->done_ops = op->next;
		op->next = s->free_ops;
		s->free_ops = op;
	}
	pthread_mutex_unlock(&s->qlock);
	while (list) {
		struct nv_op *op = list;
		list = op->next;
		op->next = NULL;
		if (closing && op->type != OP_DROP) {
			/* Never started: complete without touching any state. A drop of a corrupt
			 * object is still done: it only unlinks an index entry (and queues a log
			 * tombstone, which close waits for), and a get that found the object
			 * corrupt may have returned just before this close - its drop must
			 * survive the restart. */
			kvt_tier_cb cb = op->cb;
			void *arg = op->arg;
			op_release(s, op);
			if (cb)
				cb(arg, -ECANCELED);
		} else {
			nv_start_op(s, op);
			submit_now(s);
		}
	}
	if (closing && !s->cancelled) {
		s->cancelled = true;
		nv_cancel_unissued(s);
	}
	return closing;
}

static void pump_ready(struct nv *s)
{
	while (s->ready_head && s->free_ios) {
		struct nv_op *op = s->ready_head;
		ready_remove(s, op);
		nv_pump(s, op);
		if (op->in_ready)
			break; /* still blocked: no slot or no SQE */
	}
}

static void arm_wake(struct nv *s)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
	if (!sqe) {
		io_uring_submit(&s->ring);
		sqe = io_uring_get_sqe(&s->ring);
	}
	if (!sqe)
		return;
	io_uring_prep_read(sqe, s->efd, &s->wake_val, sizeof(s->wake_val), 0);
	io_uring_sqe_set_data(sqe, &s->wake);
	s->wake_armed = true;
}

static int ring_init(struct nv *s)
{
	unsigned entries = s->qd + 8;
	static const unsigned flag_sets[] = {
	    IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
	    IORING_SETUP_COOP_TASKRUN,
	    0,
	};
	int rc = -EINVAL;
	for (size_t i = 0; i < KVT_ARRAY_SIZE(flag_sets); i++) {
		struct io_uring_params p;
		memset(&p, 0, sizeof(p));
		p.flags = flag_sets[i] | IORING_SETUP_CQSIZE;
		p.cq_entries = 2 * entries;
		rc = io_uring_queue_init_params(entries, &s->ring, &p);
		if (rc == 0)
			return 0;
		if (rc != -EINVAL)
			break;
	}
	return rc;
}

void *nv_ring_main(void *arg)
{
	struct nv *s = arg;
	int rc = ring_init(s);
	/* The last step of the open that can fail is behind: the log's open-time writes, which
	 * a failed open must not have made, before the open returns (the opener waits). */
	if (rc == 0)
		nv_log_open_writes(s);
	pthread_mutex_lock(&s->qlock);
	s->init_rc = rc;
	s->init_done = true;
	pthread_cond_broadcast(&s->qcond);
	pthread_mutex_unlock(&s->qlock);
	if (rc < 0)
		return NULL;
	s->wake.kind = IO_WAKE;
	s->ring_ready = true;
	arm_wake(s);
	for (;;) {
		nv_io_resume(s); /* short I/Os' rests first: their ops hold slots already */
		bool closing = drain_queue(s);
		pump_ready(s);
		if (s->lg) {
			nv_log_kick(s); /* seal and write the staged batch (group commit) */
			check_flushes(s); /* one waiting for the log's removals */
		}
		nv_pool_kick(s); /* lay out preallocated slots in the background */
		nv_log_layout_kick(s); /* and log segments ahead of the append point */
		nv_layout_publish(s);
		if (closing && !s->active && !s->trash_inflight && !nv_log_busy(s))
			break;
		rc = io_uring_submit_and_wait(&s->ring, 1);
		if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY && rc != -ETIME) {
			KVT_ERR(s->log, "nvme: io_uring_submit_and_wait: %s", strerror(-rc));
			usleep(1000);
		}
		struct io_uring_cqe *cqe;
		while (io_uring_peek_cqe(&s->ring, &cqe) == 0) {
			struct nv_io *io = io_uring_cqe_get_data(cqe);
			int res = cqe->res;
			io_uring_cqe_seen(&s->ring, cqe);
			if (io == &s->wake) {
				s->wake_armed = false;
			} else if (io == &s->trash) {
				s->trash_inflight--;
				if (res < 0 && res != -ENOENT) {
					KVT_WARN(s->log, "nvme: background unlink/close: %s",
						 strerror(-res));
					ST_ADD(s, errors, 1);
				}
			} else if (io->kind == IO_LOG) {
				nv_log_on_cqe(s, io, res);
			} else {
				nv_on_cqe(s, io, res);
			}
		}
		if (!s->wake_armed)
			arm_wake(s);
	}
	io_uring_queue_exit(&s->ring);
	return NULL;
}
