/*
 * tier_nvme_log_reinsert.c - why: a log segment is reused whole (tier_nvme_log.c), so
 * without this every object still in it is evicted however recently it was read, where the
 * file-per-object layout evicts the least recently used. Hits-based reinsertion, as
 * CacheLib's BlockCache does for its regions: shortly before the append point reaches the
 * segment after the current one, the objects of that segment read since they were written
 * or last re-appended (nv_ent.hot) are chosen, most recently used first, up to lg->reins_max
 * bytes per reuse (nvme.log_reinsert_pct: write amplification stays bounded), and copied in
 * segment order into ordinary batches at the tail of the current segment, one read per batch
 * (the span covering its objects, at most NV_LOG_BUF: a read per object blocked the ring
 * thread for too long). The rest is evicted at reuse as before.
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

/* List segment seg's hot objects, most recently used first, up to lg->reins_max bytes; then
 * in segment order, so that one read covers a batch's worth. */
static void collect(struct nv *s, uint32_t seg)
{
	struct nv_log *lg = s->lg;
	uint32_t tag = seg + 1;
	uint64_t bytes = 0;
	lg->rq_n = lg->rq_head = 0;
	for (struct nv_ent *e = s->lru_head; e; e = e->next) {
		if (e->lseg != tag || !e->hot)
			continue;
		uint64_t need = KVT_ALIGN_UP(e->bytes, NV_LOG_BLOCK);
		if (bytes + need > lg->reins_max)
			break;
		if (lg->rq_n == lg->rq_cap) {
			uint32_t nc = lg->rq_cap ? 2 * lg->rq_cap : 256;
			struct nv_move *q = kvt__realloc(lg->rq, nc * sizeof(*q));
			if (!q)
				break; /* out of memory: fewer are kept */
			lg->rq = q;
			lg->rq_cap = nc;
		}
		struct nv_move *m = &lg->rq[lg->rq_n++];
		m->key = e->key;
		m->gen = e->gen;
		m->lseg = e->lseg;
		m->from = e->loff;
		m->len = (uint32_t)e->bytes;
		bytes += need;
	}
	if (lg->rq_n > 1) /* rq is NULL until the first object is listed */
		qsort(lg->rq, lg->rq_n, sizeof(*lg->rq), cmp_from);
}

/* Copy listed objects into batch b (new, empty) while they fit it and the current segment:
 * one read of the span they cover, then a copy of each still indexed there. */
static void fill(struct nv *s, struct nv_batch *b)
{
	struct nv_log *lg = s->lg;
	struct nv_log_rec *r = (struct nv_log_rec *)b->buf;
	struct nv_seg *from = &lg->segs[lg->reins_seg];
	uint64_t room = lg->segs[lg->cur].bytes - lg->cur_off;
	while (lg->rq_head < lg->rq_n && r->n < NV_LOG_MAXENT) {
		uint32_t i = lg->rq_head, j = i;
		uint64_t start = lg->rq[i].from, end = start, sum = 0;
		for (; j < lg->rq_n && r->n + (j - i) < NV_LOG_MAXENT; j++) {
			uint64_t need = KVT_ALIGN_UP(lg->rq[j].len, NV_LOG_BLOCK);
			if (b->used + sum + need > NV_LOG_BUF || lg->rq[j].from + need - start > NV_LOG_BUF)
				break;
			if (b->used + sum + need > room) {
				if (j == i)
					lg->rq_head = lg->rq_n; /* the current segment is full: the rest goes */
				break;
			}
			sum += need;
			end = lg->rq[j].from + need;
		}
		if (j == i)
			break; /* the batch is full */
		lg->rq_head = j;
		if (end > from->bytes ||
		    pread(from->fd, lg->rbuf, end - start, (off_t)start) != (ssize_t)(end - start))
			continue; /* unreadable: evicted at reuse as before */
		for (uint32_t k = i; k < j; k++) {
			struct nv_move *m = &lg->rq[k];
			uint64_t need = KVT_ALIGN_UP(m->len, NV_LOG_BLOCK);
			struct nv_ent *e = nv_ent_find(s, &m->key);
			if (!e || e->gen != m->gen || e->lseg != m->lseg || e->loff != m->from)
				continue; /* removed or rewritten since */
			uint8_t *dst = b->buf + b->used;
			memcpy(dst, lg->rbuf + (m->from - start), need);
			e->hot = false; /* kept once; kept again only if read again */
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
	}
}

void nv_log_reinsert(struct nv *s)
{
	struct nv_log *lg = s->lg;
	if (!lg->reins_max || lg->broken || !lg->have_cur || lg->nmax < 2)
		return;
	pthread_mutex_lock(&s->qlock); /* nv_close sets closing under it */
	bool closing = s->closing;
	pthread_mutex_unlock(&s->qlock);
	if (closing)
		return;
	uint32_t next = (lg->cur + 1) % lg->nmax;
	struct nv_seg *ng = &lg->segs[next], *cg = &lg->segs[lg->cur];
	if (ng->fd < 0 || ng->bytes < NV_LOG_BLOCK + NV_LOG_BUF || lg->cur_off > cg->bytes)
		return; /* next is not a segment with objects */
	/* Not before the current segment has just the room for the copies left (plus the
	 * batch filling now and one more): objects read meanwhile are still kept. */
	if (cg->bytes - lg->cur_off > lg->reins_max + 2 * (uint64_t)NV_LOG_BUF)
		return;
	if (lg->reins_seg != next || lg->reins_gen != ng->gen) {
		lg->reins_seg = next;
		lg->reins_gen = ng->gen;
		collect(s, next);
	}
	while (lg->rq_head < lg->rq_n) {
		struct nv_batch *b = nv_log_filling(lg);
		if (b && !nv_log_seal(s, b))
			return; /* the puts staged before go first */
		if (!(b = nv_log_new_batch(lg)))
			return; /* every buffer in flight: next turn */
		fill(s, b);
		if (!b->nmv) {
			/* Nothing copied (all gone, or no room): give the buffer back. */
			b->state = NV_B_FREE;
			lg->count--;
			continue;
		}
		b->mvseg = next;
		ng->movers++;
		nv_log_seal(s, b); /* false: it stays the filling batch, puts may join it */
	}
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
		e->lseg = b->seg + 1;
		e->loff = m->loff;
		pthread_mutex_unlock(&s->ilock);
		ST_ADD(s, reinserts, 1);
		ST_ADD(s, reinsert_bytes, KVT_ALIGN_UP(m->len, NV_LOG_BLOCK));
	}
	b->nmv = 0;
}
