/*
 * tier_nvme_log_recover.c - the open-time scan of the small-object log: what a restart
 * keeps, and why nothing torn or stale comes back (docs/NVME_LOG.md, "Crash safety").
 *
 * Each segment's header gives its generation; its commit records are walked from the first
 * batch on, each found at the end of the one before, and the walk stops at the first record
 * whose CRC, segment, generation or offset does not check: a batch that was never written
 * or was torn ends its segment's valid prefix, and records of an earlier generation (a
 * reused segment) are never accepted. Batches are acknowledged in sequence order and at
 * most NV_LOG_BUFS are unacknowledged at once, so only the NV_LOG_BUFS newest batches can
 * be incomplete: every object of those is read back and checked against the CRC32C its
 * entry records before it is indexed (the engine checks the object format on every read), and the record of one that fails is zeroed so that no later scan
 * trusts it. Entries are then applied in sequence order (puts, tombstones); a key also
 * stored as its own file keeps the file. A put entry of a valid record that does not lie in
 * its segment is damage, not a tear: skipped and counted (ent_ok). Segments are canonical
 * names 0.kvl, 1.kvl, ... up to the cycle's end; a gap (a segment deleted from outside)
 * voids the whole log (nothing indexed: its tombstones are gone), and files outside the
 * cycle are only read for their newest sequence number; other entries are warned about
 * and left.
 */
#include "tier_nvme_log.h"

struct rbatch {
	uint32_t seg;
	uint64_t off, seq;
	uint32_t n;
	struct nv_log_rent *ent;
	bool cut;
};

static int cmp_seq(const void *a, const void *b)
{
	const struct rbatch *x = a, *y = b;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* Segment n's name, canonical decimal only: "07.kvl" would also open as segment 7 (its fd
 * leaked by the second open), and two files cannot both be segment 7. */
static bool parse_seg(const char *nm, uint32_t *out)
{
	uint32_t v = 0;
	const char *p = nm;
	if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9'))
		return false;
	for (; *p >= '0' && *p <= '9'; p++)
		if ((v = v * 10 + (uint32_t)(*p - '0')) >= (1u << 20))
			return false;
	if (strcmp(p, ".kvl"))
		return false;
	*out = v;
	return true;
}

/* Put entry en lies in segment g, block-aligned past its header, and fits one batch. A
 * record's CRC proves it was written whole, not that it is well formed: compared without
 * overflow, or an entry whose off + len wraps would pass and its length (GiBs) be charged
 * to the index, evicting everything at open. */
static bool ent_ok(const struct nv_seg *g, const struct nv_log_rent *en)
{
	return en->len >= KVT_HEADER_BYTES && en->len <= NV_LOG_BUF - NV_LOG_BLOCK &&
	       en->off >= NV_LOG_BLOCK && en->off % NV_LOG_BLOCK == 0 && en->off <= g->bytes &&
	       KVT_ALIGN_UP((uint64_t)en->len, NV_LOG_BLOCK) <= g->bytes - en->off;
}

/* Walk segment n's records (g: its file) into *bs. */
static int walk(struct nv_seg *g, uint32_t n, uint8_t *blk, struct rbatch **bs, size_t *nb,
		size_t *cap)
{
	if (pread(g->fd, blk, NV_LOG_BLOCK, 0) != NV_LOG_BLOCK)
		return 0; /* empty: used from generation 1 */
	struct nv_log_seghdr *h = (struct nv_log_seghdr *)blk;
	if (memcmp(h->magic, NV_LOG_SEG_MAGIC, sizeof(h->magic)) || h->seg != n ||
	    h->crc != nv_log_crc(blk))
		return 0;
	g->gen = h->gen;
	uint64_t off = NV_LOG_BLOCK;
	while (off + NV_LOG_BLOCK <= g->bytes) {
		if (pread(g->fd, blk, NV_LOG_BLOCK, (off_t)off) != NV_LOG_BLOCK)
			break;
		struct nv_log_rec *r = (struct nv_log_rec *)blk;
		if (memcmp(r->magic, NV_LOG_REC_MAGIC, sizeof(r->magic)) || r->seg != n ||
		    r->gen != g->gen || r->off != off || r->len < NV_LOG_BLOCK ||
		    r->len % NV_LOG_BLOCK || r->len > NV_LOG_BUF || off + r->len > g->bytes ||
		    r->n > NV_LOG_MAXENT || r->crc != nv_log_crc(blk))
			break;
		if (*nb == *cap) {
			size_t nc = *cap ? 2 * *cap : 256;
			struct rbatch *x = kvt__realloc(*bs, nc * sizeof(*x));
			if (!x)
				return -ENOMEM;
			*bs = x;
			*cap = nc;
		}
		struct rbatch *rb = &(*bs)[(*nb)++];
		rb->seg = n;
		rb->off = off;
		rb->seq = r->seq;
		rb->n = r->n;
		rb->cut = false;
		if (!(rb->ent = kvt__malloc(r->n * sizeof(*rb->ent) + 1)))
			return -ENOMEM;
		memcpy(rb->ent, r->ent, r->n * sizeof(*rb->ent));
		off += r->len;
	}
	return 0;
}

/* Raise *seq to the newest batch of g (file n, not indexed this run), and set g->gen from
 * its header: a file left valid (outside the cycle) is indexed at a later open, and then
 * its batches must be older than this run's, or their stale puts would undo this run's
 * removals. */
static int newest_seq(struct nv_seg *g, uint32_t n, uint8_t *blk, uint64_t *seq)
{
	struct rbatch *bs = NULL;
	size_t nb = 0, cap = 0;
	int rc = walk(g, n, blk, &bs, &nb, &cap);
	for (size_t i = 0; i < nb; i++) {
		*seq = KVT_MAX(*seq, bs[i].seq);
		kvt__free(bs[i].ent);
	}
	kvt__free(bs);
	return rc;
}

/* The same for file n, not in the cycle (past a number it does not reach, or past a file
 * that cannot be a segment): it can be at a later open (nvme.bytes grown, that file gone). */
static int past_gap_seq(struct nv *s, uint32_t n, uint8_t *blk, uint64_t *seq)
{
	char name[32];
	snprintf(name, sizeof(name), "%u.kvl", n);
	int fd = openat(s->lg->dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0; /* not a file that can become a segment */
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		struct nv_seg g = {.fd = fd, .bytes = (uint64_t)st.st_size};
		rc = newest_seq(&g, n, blk, seq);
	}
	close(fd);
	return rc;
}

/* Read back and verify every object batch b lists. */
static bool batch_whole(struct nv *s, const struct rbatch *b, uint8_t *buf)
{
	struct nv_seg *g = &s->lg->segs[b->seg];
	for (uint32_t i = 0; i < b->n; i++) {
		const struct nv_log_rent *en = &b->ent[i];
		if (en->type != NV_LOG_PUT)
			continue;
		if (!ent_ok(g, en))
			continue; /* damaged, not torn: apply skips it and says so */
		uint64_t len = KVT_ALIGN_UP(en->len, NV_LOG_BLOCK);
		if (pread(g->fd, buf, len, (off_t)en->off) != (ssize_t)len)
			return false;
		if (kvt__crc32c(0, buf, en->len) != en->crc)
			return false;
	}
	return true;
}

static void apply(struct nv *s, const struct rbatch *b, uint64_t *bad)
{
	struct nv_seg *g = &s->lg->segs[b->seg];
	for (uint32_t i = 0; i < b->n; i++) {
		const struct nv_log_rent *en = &b->ent[i];
		struct kvt_key k;
		memcpy(k.bytes, en->key, KVT_KEY_BYTES);
		struct nv_ent *e = nv_ent_find(s, &k);
		if (en->type == NV_LOG_TOMB) {
			if (e && e->lseg)
				nv_ent_remove(s, e);
			continue;
		}
		if (en->type != NV_LOG_PUT)
			continue; /* not ours */
		if (!ent_ok(g, en)) {
			(*bad)++;
			continue;
		}
		if (e && !e->lseg)
			continue; /* the key has a file of its own */
		if (e)
			nv_ent_remove(s, e); /* a newer copy */
		if ((e = nv_ent_insert(s, &k, 0, en->len))) {
			e->lseg = b->seg + 1;
			e->loff = en->off;
		}
	}
}

int nv_log_recover(struct nv *s)
{
	struct nv_log *lg = s->lg;
	if (!lg)
		return 0;
	int dfd2 = dup(lg->dfd);
	DIR *dir = dfd2 >= 0 ? fdopendir(dfd2) : NULL;
	if (!dir) {
		if (dfd2 >= 0)
			close(dfd2);
		return -errno;
	}
	struct dirent *de;
	uint32_t n, *ns = NULL;
	size_t nn = 0, ncap = 0;
	while ((de = readdir(dir))) {
		if (!parse_seg(de->d_name, &n))
			continue;
		if (nn == ncap) {
			size_t nc = ncap ? 2 * ncap : 64;
			uint32_t *x = kvt__realloc(ns, nc * sizeof(*x));
			if (!x) {
				kvt__free(ns);
				closedir(dir);
				return -ENOMEM;
			}
			ns = x;
			ncap = nc;
		}
		ns[nn++] = n;
	}
	closedir(dir);
	if (nn > 1)
		qsort(ns, nn, sizeof(*ns), cmp_u32);
	/* Segments are created in cycle order from 0, so a log's are 0.kvl .. k-1.kvl, unless
	 * one was deleted from outside (a gap). A missing segment is created again when the
	 * cycle reaches it, and the cycle goes on into the files after it: those it reaches
	 * (every number before one is below the cycle's end, so created by then) are its
	 * segments too, reused in turn (the log voided first: below). Left
	 * out, the run reached the first of them, failed to create it ("File exists") and
	 * cycled over the segments before it only: fewer than the capacity was computed for
	 * (reuse evicted far below it), and it reused the segments holding its tombstones
	 * while the files past the gap kept stale puts of those keys, which came back at the
	 * next open (integ.nvme_log_gap_cycle). A file past a number the cycle never reaches
	 * is left alone, with a warning: it must neither fail the open nor stretch the cycle
	 * past nvme.bytes (a stray "1048575.kvl" would have made it a million segments). The
	 * cycle covers every segment that exists, also when nvme.bytes shrank: reusing
	 * segments strictly in cycle order is what keeps a put's segment from outliving the
	 * segment of the tombstone that removed it. */
	uint32_t end = lg->nmax, m = 0;
	for (; m < nn && ns[m] <= end; m++)
		end = KVT_MAX(end, ns[m] + 1);
	uint32_t alloc = KVT_MAX(end, (uint32_t)nn);
	if (!(lg->segs = kvt__calloc(alloc, sizeof(*lg->segs)))) {
		kvt__free(ns);
		return -ENOMEM;
	}
	lg->nsegs = alloc;
	for (uint32_t i = 0; i < alloc; i++)
		lg->segs[i].fd = -1;
	/* One that does not open (a directory, a dangling symlink) cannot be created either:
	 * the cycle ends before it. */
	uint32_t k = 0;
	int rc = 0;
	for (; k < m; k++)
		if ((rc = nv_log_seg_open(s, ns[k], false)) < 0) {
			KVT_WARN(s->log, "nvme: log segment %u.kvl: %s: not used, nor any after it",
				 ns[k], strerror(-rc));
			rc = 0;
			end = ns[k++];
			break;
		}
	if (k < nn)
		KVT_WARN(s->log,
			 "nvme: log: %zu file(s) from %u.kvl on are not in the log's cycle: ignored",
			 nn - k, ns[k]);
	if (end < lg->nmax && lg->log_max && !s->ro) {
		/* Shorter than the capacity was computed for: the capacity follows, or below 3
		 * segments the log is off, as at nv_log_open (objects keep their files; the
		 * capacity, already less than nvme.bytes by two segments, holds them beside the
		 * segments left). */
		if (end < 3) {
			KVT_WARN(s->log, "nvme: log: the cycle ends at %u segment(s): the log is off",
				 end);
			lg->log_max = 0;
		} else {
			s->capacity = KVT_MIN(s->capacity, nv_log_live(lg, end));
			KVT_WARN(s->log,
				 "nvme: log: the cycle ends at %u segments: capacity %" PRIu64
				 " bytes",
				 end, s->capacity);
		}
	}
	lg->nmax = end;
	lg->broken = !end; /* no segment: nothing to cycle over */
	uint32_t top = 0; /* indexed: the segments before the first gap */
	while (top < end && lg->segs[top].fd >= 0)
		top++;

	uint8_t *blk = kvt__aligned_alloc(NV_LOG_BUF);
	struct rbatch *bs = NULL;
	size_t nb = 0, cap = 0;
	if (!blk) {
		kvt__free(ns);
		return -ENOMEM;
	}
	for (uint32_t i = k; i < nn && !rc; i++)
		rc = past_gap_seq(s, ns[i], blk, &lg->seq);
	kvt__free(ns);
	/* A gap (a segment missing with segments after it: deleted from outside) took with it
	 * tombstones that any put written before it may need, and the numbering does not say
	 * which segments those are once the log has wrapped: segments past the gap can be
	 * newer than it, holding tombstones the older ones need, or older, holding puts its
	 * tombstones undid. So no put of the log can be trusted and none is indexed: every
	 * segment of the cycle is voided (a header of its next generation, not in a read-only
	 * open) and the log starts empty - its objects become misses, a removed key never
	 * comes back. (Until 2026-12-03 the segments before the gap were indexed and those
	 * past it read again at a later open: a key removed while only a segment past the gap
	 * held it, or whose tombstone the deleted segment held, came back;
	 * integ.nvme_log_gap_cycle.) A segment whose header cannot be written turns the log
	 * off for the run (puts get files), so the gap stays and the next open voids again. */
	bool gap = false;
	for (uint32_t i = top; i < end; i++)
		gap |= lg->segs[i].fd >= 0;
	uint32_t voided = 0;
	for (uint32_t i = 0; gap && i < end && !rc && !lg->broken; i++) {
		struct nv_seg *g = &lg->segs[i];
		if (g->fd < 0)
			continue;
		rc = newest_seq(g, i, blk, &lg->seq); /* its generation, its newest batch */
		if (rc || s->ro)
			continue;
		int w = nv_log_write_header(s, i, g->gen + 1);
		if (w < 0) {
			KVT_WARN(s->log, "nvme: log segment %u.kvl header: %s: log writes stop", i,
				 strerror(-w));
			lg->broken = true;
			break;
		}
		g->gen++;
		voided++;
	}
	if (gap)
		lg->start = top; /* the first batch recreates the missing one: the gap closes */
	if (gap)
		KVT_WARN(s->log,
			 "nvme: log: %u.kvl is missing (deleted from outside?): nothing of the log "
			 "is indexed, %u segment(s) emptied",
			 top, voided);
	for (uint32_t i = 0; !gap && i < top && !rc; i++)
		rc = walk(&lg->segs[i], i, blk, &bs, &nb, &cap);
	uint64_t torn = 0, objs = 0, bad = 0;
	if (!rc && nb) {
		qsort(bs, nb, sizeof(*bs), cmp_seq);
		lg->seq = KVT_MAX(lg->seq, bs[nb - 1].seq);
		lg->start = bs[nb - 1].seg + 1;
		/* The newest batches may be incomplete: check every object they list. */
		for (size_t i = nb > NV_LOG_BUFS ? nb - NV_LOG_BUFS : 0; i < nb; i++) {
			if (bs[i].cut || batch_whole(s, &bs[i], blk))
				continue;
			torn++;
			/* This batch and every later one of its segment are dropped; zeroing its
			 * record keeps later scans from trusting it. */
			for (size_t j = i; j < nb; j++)
				if (bs[j].seg == bs[i].seg && bs[j].off >= bs[i].off)
					bs[j].cut = true;
			if (!s->ro && pwrite(lg->segs[bs[i].seg].fd, lg->zero, NV_LOG_BLOCK,
					     (off_t)bs[i].off) == NV_LOG_BLOCK)
				fdatasync(lg->segs[bs[i].seg].fd);
		}
		for (size_t i = 0; i < nb; i++)
			if (!bs[i].cut)
				apply(s, &bs[i], &bad);
		for (struct nv_ent *e = s->lru_head; e; e = e->next)
			objs += e->lseg != 0;
	}
	for (size_t i = 0; i < nb; i++)
		kvt__free(bs[i].ent);
	kvt__free(bs);
	kvt__free_aligned(blk, NV_LOG_BUF);
	if (bad)
		KVT_WARN(s->log,
			 "nvme: log: %" PRIu64 " damaged entries skipped (outside their segment, "
			 "misaligned or longer than a batch)",
			 bad);
	if (!rc)
		KVT_INFO(s->log,
			 "nvme: log: %" PRIu64 " batches, %" PRIu64 " objects, %" PRIu64
			 " incomplete batches dropped",
			 (uint64_t)nb, objs, torn);
	return rc;
}
