/*
 * tier_nvme_log_reinsert.c - why: a log segment is reused whole (tier_nvme_log.c), so
 * without this every object still in it is evicted however recently it was read, where the
 * file-per-object layout evicts the least recently used, and only above nvme.bytes. So
 * shortly before the append point reaches the segment after the current one, that segment's
 * live objects are listed - those read since they were written or last re-appended
 * (nv_ent.hot) first, as CacheLib's BlockCache reinserts by hits, then the rest - each most
 * recently used first, up to lg->reins_max bytes per reuse (nvme.log_reinsert_pct bounds the
 * write amplification), and copied in segment order into ordinary batches at the tail of the
 * current segment. The copies are read asynchronously, one io_uring read per batch (the span
 * covering its objects, at most NV_LOG_BUF), so the ring thread keeps completing the load's
 * reads and writes meanwhile (a synchronous pread here stalled them). What is left is
 * evicted at reuse as before; nvme.log_spare_pct gives the log room so that little is.
 *
 * Crash safety: an index entry moves only when its batch is acknowledged (written, and
 * fdatasynced per nvme.fsync), and only if it still points where it was copied from (a
 * removal or a newer write in between wins); the segment copied from is not reused while a
 * batch carrying its objects is unacknowledged (nv_seg.movers). So after a crash a key is at
 * its old place (its segment's generation unchanged), or at its new one (a later batch: the
 * scan applies batches in sequence order), both the same bytes, each checked as any batch.
 */
#include "tier_nvme_log.h"

static int cmp_from(const void *a, const void *b)
{
	const struct nv_move *x = a, *y = b;
	return x->from < y->from ? -1 : x->from > y->from;
}

/* Append entry e to the list; false when the bound or memory is reached. */
static bool list_one(struct nv_log *lg, const struct nv_ent *e, uint64_t *bytes)
{
	uint64_t need = KVT_ALIGN_UP(e->bytes, NV_LOG_BLOCK);
	if (*bytes + need > lg->reins_max)
		return false;
	if (lg->rq_n == lg->rq_cap) {
		uint32_t nc = lg->rq_cap ? 2 * lg->rq_cap : 256;
		struct nv_move *q = kvt__realloc(lg->rq, nc * sizeof(*q));
		if (!q)
			return false; /* out of memory: fewer are kept */
		lg->rq = q;
		lg->rq_cap = nc;
	}
	struct nv_move *m = &lg->rq[lg->rq_n++];
	m->key = e->key;
	m->gen = e->gen;
	m->lseg = e->lseg;
	m->from = e->loff;
	m->len = (uint32_t)e->bytes;
	*bytes += need;
	return true;
}

/* Hot first, then the rest; each most recently used first. */
static int cmp_keep(const void *a, const void *b)
{
	const struct nv_ent *x = *(const struct nv_ent *const *)a;
	const struct nv_ent *y = *(const struct nv_ent *const *)b;
	if (x->hot != y->hot)
		return x->hot ? -1 : 1;
	return x->used_at > y->used_at ? -1 : x->used_at < y->used_at;
}

/* List segment seg's live objects up to lg->reins_max bytes: those read since they were
 * written or last re-appended first, then the others, each most recently used first. Every
 * object still indexed is within nvme.bytes (the index's LRU evicts above it, as for files),
 * so dropping one here would evict below capacity what file-per-object keeps; the hot bit
 * only decides what goes when the bound binds. Then in segment order, so that one read
 * covers a batch's worth. The segment's own list of entries, sorted, not a walk of the whole
 * LRU list (twice, until 2026-12-04): O(objects in the segment) per reuse. */
static void collect(struct nv *s, uint32_t seg)
{
	struct nv_log *lg = s->lg;
	uint64_t bytes = 0;
	lg->rq_n = lg->rq_head = 0;
	size_t n = 0;
	for (const struct nv_ent *e = lg->segs[seg].ents; e; e = e->snext)
		n++;
	struct nv_ent **v = n ? kvt__malloc(n * sizeof(*v)) : NULL;
	if (!v) {
		lg->reins_left = 0;
		return; /* nothing live, or out of memory: none kept (evicted at reuse) */
	}
	n = 0;
	for (struct nv_ent *e = lg->segs[seg].ents; e; e = e->snext)
		v[n++] = e;
	qsort(v, n, sizeof(*v), cmp_keep);
	for (size_t i = 0; i < n && list_one(lg, v[i], &bytes); i++)
		;
	kvt__free(v);
	if (lg->rq_n > 1) /* rq is NULL until the first object is listed */
		qsort(lg->rq, lg->rq_n, sizeof(*lg->rq), cmp_from);
	lg->reins_left = bytes;
}

/* The tail of the current segment kept for the listed objects' copies: their bytes plus, at
 * worst, a commit record each. Puts that would take it wait (tier_nvme_log.c stage_one):
 * otherwise a busy writer fills the segment first and the copies, finding no room, are
 * dropped - evicted below nvme.bytes. */
uint64_t nv_log_copy_room(const struct nv_log *lg)
{
	if (!lg->reins_left || (lg->rd_state == NV_RD_IDLE && lg->rq_head >= lg->rq_n))
		return 0; /* nothing left to copy: nothing kept (never a wait on nothing) */
	uint32_t n = lg->rq_n - lg->rq_head + (lg->rd_state != NV_RD_IDLE ? lg->rd_j - lg->rd_i : 0);
	return lg->reins_left + (uint64_t)(n + 1) * NV_LOG_BLOCK;
}

static void left_less(struct nv_log *lg, uint32_t i, uint32_t j)
{
	for (uint32_t k = i; k < j; k++) {
		uint64_t need = KVT_ALIGN_UP(lg->rq[k].len, NV_LOG_BLOCK);
		lg->reins_left -= KVT_MIN(need, lg->reins_left);
	}
}

/* Drop the rest of the list: no room for it in the current segment (evicted at reuse). */
static void drop_rest(struct nv_log *lg)
{
	if (lg->rd_state == NV_RD_READY) { /* only then: a read in flight still owns rbuf */
		lg->segs[lg->rd_seg].readers--;
		lg->rd_state = NV_RD_IDLE;
	}
	lg->reins_left = 0;
	lg->rq_head = lg->rq_n;
}

/* Issue one asynchronous read of the span covering the next listed objects that fit one
 * batch (record + objects: at most NV_LOG_BUF). The segment read from is not reused until
 * its copies are staged (readers) and then acknowledged (movers). */
static void read_next(struct nv *s)
{
	struct nv_log *lg = s->lg;
	if (lg->rd_state != NV_RD_IDLE || lg->rq_head >= lg->rq_n)
		return;
	struct nv_seg *from = &lg->segs[lg->reins_seg];
	uint32_t i = lg->rq_head, j = i;
	uint64_t start = lg->rq[i].from, end = start;
	for (; j < lg->rq_n && j - i < NV_LOG_MAXENT; j++) {
		uint64_t need = KVT_ALIGN_UP(lg->rq[j].len, NV_LOG_BLOCK);
		if (lg->rq[j].from + need - start > NV_LOG_BUF - NV_LOG_BLOCK)
			break;
		end = lg->rq[j].from + need;
	}
	if (j == i || end > from->bytes) {
		lg->rq_head = lg->rq_n; /* cannot be (log_max < one batch) or damaged: evicted */
		lg->reins_left = 0;
		return;
	}
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
	if (!sqe) {
		io_uring_submit(&s->ring);
		if (!(sqe = io_uring_get_sqe(&s->ring)))
			return; /* next turn */
	}
	io_uring_prep_read(sqe, from->fd, lg->rbuf, (unsigned)(end - start), (off_t)start);
	io_uring_sqe_set_data(sqe, &lg->rd_io);
	lg->rd_i = i;
	lg->rd_j = j;
	lg->rd_seg = lg->reins_seg;
	lg->rd_start = start;
	lg->rd_len = end - start;
	lg->rq_head = j;
	lg->rd_state = NV_RD_READING;
	from->readers++;
}

void nv_log_read_done(struct nv *s, int res)
{
	struct nv_log *lg = s->lg;
	if (res != (int)lg->rd_len) {
		/* Unreadable: these objects are evicted at reuse as before. */
		left_less(lg, lg->rd_i, lg->rd_j);
		lg->segs[lg->rd_seg].readers--;
		lg->rd_state = NV_RD_IDLE;
		return;
	}
	lg->rd_state = NV_RD_READY; /* copied into a batch by the next nv_log_reinsert */
}

/* Copy the objects read into a new batch (each still indexed where it was read from, and
 * fitting the current segment) and seal it. */
static void copy_ready(struct nv *s)
{
	struct nv_log *lg = s->lg;
	struct nv_batch *b = nv_log_filling(lg);
	if (b && lg->cur_off + b->used > lg->segs[lg->cur].bytes) {
		/* The puts staged before need the next segment, which is the one these
		 * objects come from: no room left for them (and holding it would wait on
		 * ourselves). */
		drop_rest(lg);
		return;
	}
	if (b && !nv_log_seal(s, b))
		return; /* no SQE: next turn */
	/* The copies' batch is sealed in this call, never left filling for a later turn: it
	 * holds its source segment (movers), and a batch write of the current segment failing
	 * meanwhile gives that segment up (ack), so the copies no longer fit and sealing them
	 * needs the next segment - the one they hold: every put, and close, waited forever
	 * (until 2026-12-05, integ.nvme_log_copy_seal). So its SQE first; the batch fits the
	 * room left (below) and the log is running, so with one free its seal cannot fail. */
	if (!io_uring_sq_space_left(&s->ring)) {
		io_uring_submit(&s->ring);
		if (!io_uring_sq_space_left(&s->ring))
			return; /* no SQE: next turn (the read stays ready) */
	}
	if (!(b = nv_log_new_batch(lg)))
		return; /* every buffer in flight: next turn */
	struct nv_log_rec *r = (struct nv_log_rec *)b->buf;
	uint64_t room = lg->segs[lg->cur].bytes - lg->cur_off;
	for (uint32_t k = lg->rd_i; k < lg->rd_j && r->n < NV_LOG_MAXENT; k++) {
		struct nv_move *m = &lg->rq[k];
		uint64_t need = KVT_ALIGN_UP(m->len, NV_LOG_BLOCK);
		if (b->used + need > room || b->used + need > NV_LOG_BUF) {
			lg->rq_head = lg->rq_n; /* the current segment is full: the rest goes */
			break;
		}
		struct nv_ent *e = nv_ent_find(s, &m->key);
		if (!e || e->gen != m->gen || e->lseg != m->lseg || e->loff != m->from)
			continue; /* removed or rewritten since */
		uint8_t *dst = nv_log_batch_copy(b, need); /* rbuf is reused by the next read */
		memcpy(dst, lg->rbuf + (m->from - lg->rd_start), need);
		e->hot = false; /* kept first again only if read again */
		struct nv_log_rent *en = &r->ent[r->n++];
		memcpy(en->key, m->key.bytes, KVT_KEY_BYTES);
		en->off = b->used; /* relative to the batch until it is sealed */
		en->len = m->len;
		/* The bytes as read: the engine verifies the object format on every read,
		 * so a copy of a damaged object is caught as the original would be. */
		en->crc = kvt__crc32c(0, dst, m->len);
		en->type = NV_LOG_PUT;
		struct nv_move *mv = &b->mv[b->nmv++];
		*mv = *m;
		mv->loff = b->used;
		b->used += need;
	}
	left_less(lg, lg->rd_i, lg->rd_j);
	if (lg->rq_head >= lg->rq_n)
		lg->reins_left = 0; /* the rest was dropped */
	lg->segs[lg->rd_seg].readers--;
	lg->rd_state = NV_RD_IDLE;
	if (!b->nmv) {
		/* Nothing copied (all gone, or no room): give the buffer back. */
		b->state = NV_B_FREE;
		lg->count--;
		return;
	}
	b->mvseg = lg->rd_seg;
	lg->segs[lg->rd_seg].movers++;
	nv_log_seal(s, b); /* true: its SQE was checked for above */
}

void nv_log_reinsert(struct nv *s)
{
	struct nv_log *lg = s->lg;
	if (!lg->reins_max || lg->broken || !lg->have_cur || lg->nmax < 2)
		return;
	pthread_mutex_lock(&s->qlock); /* nv_close sets closing under it */
	bool closing = s->closing;
	pthread_mutex_unlock(&s->qlock);
	if (closing) {
		/* Nothing more is copied: drop the list whatever the read's state. Left listed
		 * (idle after a failed read), it kept the current segment's tail and its segment
		 * from reuse, and the puts close waits for waited on it forever. A read in flight
		 * is dropped when it completes. */
		drop_rest(lg);
		return;
	}
	if (lg->rd_state == NV_RD_READY)
		copy_ready(s);
	if (lg->rd_state != NV_RD_IDLE)
		return; /* the read is in flight, or its copy waits for a buffer */
	uint32_t next = (lg->cur + 1) % lg->nmax;
	struct nv_seg *ng = &lg->segs[next], *cg = &lg->segs[lg->cur];
	if (ng->fd < 0 || ng->bytes < NV_LOG_BLOCK + NV_LOG_BUF || lg->cur_off > cg->bytes)
		return; /* next is not a segment with objects */
	/* Not before the current segment has just the room for the copies left (plus the
	 * batches filling and in flight meanwhile: the copies' reads are asynchronous, puts
	 * keep being appended while they are read). */
	if (cg->bytes - lg->cur_off > lg->reins_max + NV_LOG_BUFS * (uint64_t)NV_LOG_BUF)
		return;
	if (lg->reins_seg != next || lg->reins_gen != ng->gen) {
		lg->reins_seg = next;
		lg->reins_gen = ng->gen;
		collect(s, next);
	}
	read_next(s);
}

/* Batch b is acknowledged (or failed): its copies' entries move to it. */
void nv_log_moved(struct nv *s, struct nv_batch *b)
{
	struct nv_log *lg = s->lg;
	if (!b->nmv)
		return;
	lg->segs[b->mvseg].movers--;
	for (uint32_t i = 0; i < b->nmv && !b->err; i++) {
		struct nv_move *m = &b->mv[i];
		struct nv_ent *e = nv_ent_find(s, &m->key);
		if (!e || e->gen != m->gen || e->lseg != m->lseg || e->loff != m->from)
			continue; /* removed or rewritten meanwhile: the later record wins too */
		pthread_mutex_lock(&s->ilock);
		nv_ent_set_lseg(s, e, b->seg + 1);
		e->loff = m->loff;
		pthread_mutex_unlock(&s->ilock);
		ST_ADD(s, reinserts, 1);
		ST_ADD(s, reinsert_bytes, KVT_ALIGN_UP(m->len, NV_LOG_BLOCK));
	}
	b->nmv = 0;
}
