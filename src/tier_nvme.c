/*
 * tier_nvme.c - the local NVMe tier: objects are files, one directory per drive, driven by
 * one io_uring ring per tier instance. This is the benchmark's hot path, so it is built
 * to keep the ring full with no per-I/O allocation and no lock held across I/O. This file
 * is the tier's face: the vtable and the submit side, which only queue operations for the
 * ring thread. The tier's files, one concern each (tier_nvme_internal.h holds the types):
 *
 *   tier_nvme_open.c     open/close: directories, locks, O_DIRECT probe, ring thread start
 *   tier_nvme_recover.c  the open-time scan (crash debris, index rebuild), saved chain links
 *   tier_nvme_index.c    in-memory index, LRU and leaf (eviction) order, chain counts
 *   tier_nvme_space.c    file names, capacity, eviction, recycled and spare files, unlinks
 *   tier_nvme_pool.c     preallocated slots (nvme.preallocate): layout, reuse, accounting
 *   tier_nvme_write.c    write admission, crash-safe publish (temp file + rename), failures
 *   tier_nvme_ops.c      per-op state machines: what to issue, what a completion means
 *   tier_nvme_ring.c     the ring thread: slots, ready list, completion, the wait loop
 *   tier_nvme_flush.c    flush: syncs the leaf directories that puts and removes changed
 *   tier_nvme_fdc.c      cached read descriptors
 *   tier_nvme_budget.c   the daily write budget
 *   tier_nvme_log.c      small objects appended in batches to log segments (nvme.log_max)
 *   tier_nvme_log_turn.c  the log's segment turns: creation, FIFO reuse, a new generation
 *   tier_nvme_log_recover.c  the log's open-time scan
 *   tier_nvme_log_reinsert.c  hot objects re-appended before their segment is reused
 *   (tier_nvme_log.h holds the log's on-disk format, shared by those four only)
 */
#include "tier_nvme_internal.h"

static struct nv_op *op_new(struct nv *s, enum nv_type type, kvt_tier_cb cb, void *arg)
{
	pthread_mutex_lock(&s->qlock);
	struct nv_op *op = s->free_ops;
	if (op)
		s->free_ops = op->next;
	pthread_mutex_unlock(&s->qlock);
	if (!op && !(op = kvt__malloc(sizeof(*op))))
		return NULL;
	memset(op, 0, offsetof(struct nv_op, seg_inline));
	op->type = type;
	op->cb = cb;
	op->arg = arg;
	op->fd = -1;
	return op;
}

static int op_submit(struct nv *s, struct nv_op *op)
{
	pthread_mutex_lock(&s->qlock);
	if (s->closing) {
		op->next = s->free_ops;
		s->free_ops = op;
		pthread_mutex_unlock(&s->qlock);
		return -ECANCELED;
	}
	if (op->type == OP_WRITE)
		op->seq = ++s->wseq;
	else if (op->type == OP_FLUSH)
		op->seq = s->wseq;
	bool was_empty = !s->qhead;
	op->next = NULL;
	if (s->qtail)
		s->qtail->next = op;
	else
		s->qhead = op;
	s->qtail = op;
	pthread_mutex_unlock(&s->qlock);
	if (was_empty)
		eventfd_write(s->efd, 1);
	return 0;
}

/* A write op of len bytes: the object at obj, or (tail non-NULL) its first head_len bytes
 * at obj and the rest at tail; crc, where not NULL, the CRC32C of all of it. Arguments
 * already checked. */
static int submit_write(struct nv *s, const struct kvt_key *key, const struct kvt_key *parent,
			const void *obj, uint64_t head_len, const void *tail, uint64_t len,
			const uint32_t *crc, kvt_tier_cb cb, void *arg)
{
	if (s->ro)
		return -EROFS;
	struct nv_op *op = op_new(s, OP_WRITE, cb, arg);
	if (!op)
		return -ENOMEM;
	op->key = *key;
	op->obj = obj;
	op->head_len = head_len;
	op->tail = tail;
	op->len = len;
	/* A write the log may take needs a CRC32C of its bytes for the log's entry: the
	 * caller's (a split write's, combined from the object's layer CRCs: the payload is not
	 * read again), or computed here, on the caller's thread, so the ring thread only lists
	 * the object. */
	if (len <= nv_log_max(s)) {
		op->lcrc = crc	? *crc
			   : tail ? kvt__crc32c(kvt__crc32c(0, obj, head_len), tail, len - head_len)
				  : kvt__crc32c(0, obj, len);
	}
	if (parent) {
		op->has_parent = true;
		op->parent = *parent;
	}
	return op_submit(s, op);
}

static int nv_write_chained(struct kvt_tier *t, const struct kvt_key *key,
			    const struct kvt_key *parent, const void *obj, uint64_t len,
			    kvt_tier_cb cb, void *arg)
{
	if (!len || len % KVT_ALIGN || (uintptr_t)obj % KVT_ALIGN || !cb)
		return -EINVAL;
	return submit_write(t->state, key, parent, obj, 0, NULL, len, NULL, cb, arg);
}

/* The object in two pieces (header, payload), written from where they are: the first
 * I/O gathers the header and the payload's start (tier_nvme_ops.c); in the log, the two
 * pieces are two pieces of the batch's gathered write (tier_nvme_log.c). */
static int nv_write_split(struct kvt_tier *t, const struct kvt_key *key,
			  const struct kvt_key *parent, const void *head, uint64_t head_len,
			  const void *tail, uint64_t tail_len, uint32_t crc, kvt_tier_cb cb,
			  void *arg)
{
	if (!head_len || head_len % KVT_ALIGN || (uintptr_t)head % KVT_ALIGN || !tail_len ||
	    tail_len % KVT_ALIGN || (uintptr_t)tail % KVT_ALIGN || !cb)
		return -EINVAL;
	return submit_write(t->state, key, parent, head, head_len, tail, head_len + tail_len,
			    &crc, cb, arg);
}

static int nv_write(struct kvt_tier *t, const struct kvt_key *key, const void *obj, uint64_t len,
		    kvt_tier_cb cb, void *arg)
{
	return nv_write_chained(t, key, NULL, obj, len, cb, arg);
}

static int nv_read(struct kvt_tier *t, const struct kvt_key *key, const struct kvt_seg *segs,
		   uint32_t nsegs, kvt_tier_cb cb, void *arg)
{
	struct nv *s = t->state;
	if (!nsegs || !cb)
		return -EINVAL;
	for (uint32_t i = 0; i < nsegs; i++)
		if (segs[i].off % KVT_ALIGN || segs[i].len % KVT_ALIGN ||
		    (uintptr_t)segs[i].buf % KVT_ALIGN)
			return -EINVAL;
	struct nv_op *op = op_new(s, OP_READ, cb, arg);
	if (!op)
		return -ENOMEM;
	op->key = *key;
	struct kvt_seg *copy = op->seg_inline;
	if (nsegs > NV_SEG_INLINE && !(copy = kvt__malloc(nsegs * sizeof(*segs)))) {
		kvt__free(op); /* never seen by anyone else */
		return -ENOMEM;
	}
	memcpy(copy, segs, nsegs * sizeof(*segs));
	op->segs = copy;
	op->nsegs = nsegs;
	int rc = op_submit(s, op);
	if (rc < 0 && copy != op->seg_inline) {
		/* op went back to the free list (do not touch it); the copy is ours. */
		kvt__free(copy);
	}
	return rc;
}

static int nv_exists(struct kvt_tier *t, const struct kvt_key *keys, uint32_t n, uint8_t *present,
		     kvt_tier_cb cb, void *arg)
{
	struct nv *s = t->state;
	if (!cb || (n && (!keys || !present)))
		return -EINVAL;
	struct nv_op *op = op_new(s, OP_EXISTS, cb, arg);
	if (!op)
		return -ENOMEM;
	op->keys = keys;
	op->present = present;
	op->n = n;
	return op_submit(s, op);
}

static int nv_remove(struct kvt_tier *t, const struct kvt_key *key, kvt_tier_cb cb, void *arg)
{
	struct nv *s = t->state;
	if (!cb)
		return -EINVAL;
	if (s->ro)
		return -EROFS;
	struct nv_op *op = op_new(s, OP_REMOVE, cb, arg);
	if (!op)
		return -ENOMEM;
	op->key = *key;
	return op_submit(s, op);
}

static int nv_flush(struct kvt_tier *t, kvt_tier_cb cb, void *arg)
{
	struct nv *s = t->state;
	if (!cb)
		return -EINVAL;
	struct nv_op *op = op_new(s, OP_FLUSH, cb, arg);
	if (!op)
		return -ENOMEM;
	return op_submit(s, op);
}

static void nv_drop_corrupt(struct kvt_tier *t, const struct kvt_key *key)
{
	struct nv *s = t->state;
	ST_ADD(s, checksum_failures, 1);
	if (s->ro)
		return; /* inspection never deletes */
	struct nv_op *op = op_new(s, OP_DROP, NULL, NULL);
	if (!op)
		return;
	op->key = *key;
	op_submit(s, op); /* when closing it is simply not dropped */
}

static int nv_can_write(struct kvt_tier *t, uint64_t len)
{
	struct nv *s = t->state;
	if (s->ro)
		return -EROFS;
	if (len > atomic_load_explicit(&s->capacity, memory_order_relaxed))
		return -ENOSPC;
	if (!s->budget)
		return 0;
	if (len > s->budget)
		return -EFBIG; /* no day's budget takes it: not worth offering again */
	int rc = 0;
	pthread_mutex_lock(&s->block);
	nv_budget_roll(s, s->clock_hour());
	if (s->budget_used + len > s->budget)
		rc = -EDQUOT;
	pthread_mutex_unlock(&s->block);
	return rc;
}

static void nv_stats(struct kvt_tier *t, struct kvt_tier_stats *out)
{
	struct nv *s = t->state;
	out->objects = ST_GET(s, objects);
	out->bytes = ST_GET(s, bytes);
	out->capacity_bytes = atomic_load_explicit(&s->capacity, memory_order_relaxed);
	out->reads = ST_GET(s, reads);
	out->read_bytes = ST_GET(s, read_bytes);
	out->writes = ST_GET(s, writes);
	out->write_bytes = ST_GET(s, write_bytes);
	out->evictions = ST_GET(s, evictions);
	out->checksum_failures = ST_GET(s, checksum_failures);
	out->errors = ST_GET(s, errors);
	out->writes_skipped = ST_GET(s, writes_skipped);
	out->removes = ST_GET(s, removes);
	out->reinsert_bytes = ST_GET(s, reinsert_bytes);
	out->pool_bytes = ST_GET(s, pool_bytes);
	out->pool_pending_bytes = ST_GET(s, pool_pending);
	out->write_budget_bytes = s->budget;
	if (s->budget) {
		pthread_mutex_lock(&s->block);
		nv_budget_roll(s, s->clock_hour()); /* buckets older than a day no longer count */
		out->write_budget_used_bytes = s->budget_used;
		pthread_mutex_unlock(&s->block);
	}
}

static int nv_scan(struct kvt_tier *t, kvt_scan_fn fn, void *arg)
{
	nv_index_walk(t->state, fn, arg);
	return 0;
}

const struct kvt_tier_ops kvt__tier_nvme_ops = {
    .name = "nvme",
    .version = 1,
    .state_size = sizeof(struct nv),
    .open = nv_open,
    .close = nv_close,
    .exists = nv_exists,
    .read = nv_read,
    .write = nv_write,
    .remove = nv_remove,
    .stats = nv_stats,
    .scan = nv_scan,
    .flush = nv_flush,
    .can_write = nv_can_write,
    .drop_corrupt = nv_drop_corrupt,
    .write_chained = nv_write_chained,
    .write_split = nv_write_split,
    .scan_anomalies = nv_scan_anomalies,
};
