/*
 * tier_nvme_log.c - the NVMe tier's small-object log: objects up to nvme.log_max are
 * appended to preallocated segment files in batches instead of each getting its own file,
 * so a 64 KiB put costs a place in a batch's write, not an open, two renames, a close and
 * an fdatasync (docs/NVME_LOG.md has the measurements and the crash-safety argument).
 *
 * On the ring thread: a write is listed in the filling batch (ST_W_STAGE) - its memory
 * (or, split, its header's and its payload's) becomes a piece of the batch's gathered
 * write, never copied; its CRC32C was computed by the submitting thread. Only re-appended
 * objects are copied into the batch's buffer (tier_nvme_log_reinsert.c). nv_log_kick,
 * once per loop turn, seals the filling batch (group commit: whatever arrived while
 * earlier batches were in flight) by writing its commit record and issuing one writev
 * for record and objects, then one fdatasync for all of them (nvme.fsync data/full).
 * Batches are acknowledged strictly in sequence order, so at most NV_LOG_BUFS
 * unacknowledged batches exist and they are the newest: the open-time scan verifies those
 * and trusts the rest.
 * Objects enter the index only when their batch is acknowledged, as a file-per-object write
 * enters it only after its rename. Segments are reused in FIFO order: the next segment's
 * remaining objects are evicted, its generation bumped and its header made durable, then
 * log/head names it (durable too), before the first batch of the new generation is written:
 * the head is what tells the open-time scan that the newest segment was deleted.
 * A log whose writes stopped for the run records no removal; one it lets go unrecorded is
 * owed, and voids the log on disk before a remove is reported done (nv_log_settle).
 */
#include "tier_nvme_log.h"


uint32_t nv_log_crc(const void *block)
{
	/* The CRC field sits at the same offset in both block kinds' headers. */
	_Static_assert(offsetof(struct nv_log_seghdr, crc) == offsetof(struct nv_log_rec, crc),
		       "crc offset");
	_Static_assert(offsetof(struct nv_log_head, crc) == offsetof(struct nv_log_rec, crc),
		       "crc offset");
	uint8_t tmp[NV_LOG_BLOCK];
	memcpy(tmp, block, sizeof(tmp));
	memset(tmp + offsetof(struct nv_log_rec, crc), 0, sizeof(uint32_t));
	return kvt__crc32c(0, tmp, sizeof(tmp));
}

void nv_log_seg_name(uint32_t n, char *out, size_t len)
{
	snprintf(out, len, "%u.kvl", n);
}

/* "<n><suffix>" with n in canonical decimal (no leading zero) below 2^20: the log's names
 * for segments (".kvl", nv_log_seg_name) and laid-out segments (".laid"). */
bool nv_log_parse_name(const char *nm, const char *suffix, uint32_t *out)
{
	uint32_t v = 0;
	const char *p = nm;
	if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9'))
		return false;
	for (; *p >= '0' && *p <= '9'; p++)
		if ((v = v * 10 + (uint32_t)(*p - '0')) >= (1u << 20))
			return false;
	if (strcmp(p, suffix))
		return false;
	*out = v;
	return true;
}

/* Open segment n (its file exists), or create it preallocated (create): from its laid-out
 * file where the layout made one (tier_nvme_log_layout.c), else a new file. 0, -errno, or
 * NV_LOG_NOT_NOW (create: no room while a layout in flight may hold it). */
int nv_log_seg_open(struct nv *s, uint32_t n, bool create)
{
	struct nv_log *lg = s->lg;
	struct nv_seg *g = &lg->segs[n];
	char name[32];
	nv_log_seg_name(n, name, sizeof(name));
	/* O_NONBLOCK: a FIFO in a segment's place fails the S_ISREG check, not hangs the open */
	int fl = (s->ro ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
	if (lg->direct)
		fl |= O_DIRECT;
	bool taken = create && nv_log_layout_take(s, n);
	if (create && !taken)
		fl |= O_CREAT | O_EXCL;
	int fd = nv_openat_look(s, lg->dfd, name, fl, s->file_mode);
	if (fd < 0) {
		int err = errno;
		if (taken)
			nv_log_layout_untake(s, n);
		return -err;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		if (taken)
			nv_log_layout_untake(s, n);
		return -EINVAL;
	}
	/* io_uring would honour O_NONBLOCK: cleared, and only it (F_SETFL also sets O_NOATIME,
	 * O_DIRECT: taken from the open file as it is, or an inspection's O_NOATIME went) */
	int cur = fcntl(fd, F_GETFL);
	if (cur >= 0)
		fcntl(fd, F_SETFL, cur & ~O_NONBLOCK);
	g->bytes = (uint64_t)st.st_size;
	if (create) {
		/* (a laid-out file has its size and its blocks: a no-op for it) */
		int rc = fallocate(fd, 0, 0, (off_t)lg->seg_bytes) < 0 ? -errno : 0;
		/* No room: the layout (tier_nvme_log_layout.c) runs ahead of the turns, so the
		 * room may be in segments laid out for later in the cycle - it stops, and theirs
		 * goes first, so that the cycle stays segments 0..k - or in a layout in flight
		 * (below). */
		bool flying = false;
		if (rc == -ENOSPC || rc == -EDQUOT)
			flying = nv_log_layout_yield(s);
		while ((rc == -ENOSPC || rc == -EDQUOT) && nv_log_layout_drop_after(s, n))
			rc = fallocate(fd, 0, 0, (off_t)lg->seg_bytes) < 0 ? -errno : 0;
		/* The new name must survive a crash before objects in it are acknowledged, and
		 * before log/head names it, whatever nvme.fsync: a head naming a segment that
		 * a power cut left without its name voids the log at the next open (flushed
		 * objects with it). Once per segment, on the first lap only. */
		if (!rc && fsync(lg->dfd) < 0)
			rc = -errno;
		if (rc < 0) {
			close(fd);
			unlinkat(lg->dfd, name, 0);
			/* a layout in flight may hold the room: stopped, and the turn waits for it
			 * to go (its completion wakes the ring) rather than shorten the cycle */
			if ((rc == -ENOSPC || rc == -EDQUOT) && flying)
				return NV_LOG_NOT_NOW;
			return rc;
		}
		g->bytes = lg->seg_bytes;
		g->gen = 0;
		nv_dirty_fs(s, 0); /* with fsync=none, a flush's syncfs makes it durable */
	}
	g->fd = fd;
	return 0;
}

/* The live bytes a cycle of nseg segments (at least 2) holds: less the one being filled and
 * what batches leave unused at segment ends, over 1 + nvme.log_spare_pct. */
uint64_t nv_log_live(const struct nv_log *lg, uint32_t nseg)
{
	return (nseg - 2) * lg->seg_bytes * 100 / (100 + lg->spare_pct);
}

int nv_log_open(struct nv *s, uint64_t log_max, uint64_t batch_bytes, uint64_t segment_bytes,
		uint64_t reinsert_pct, uint64_t spare_pct)
{
	struct nv_dir *d = &s->dirs[0];
	int dfd = openat(d->fd, NV_LOG_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0 && errno == ENOENT && log_max && !s->ro) {
		if (mkdirat(d->fd, NV_LOG_DIR, s->dir_mode) < 0 && errno != EEXIST)
			return -errno;
		if (s->fsync_mode != NV_FSYNC_NONE)
			fsync(d->fd);
		dfd = openat(d->fd, NV_LOG_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	}
	if (dfd < 0)
		return errno == ENOENT && (!log_max || s->ro) ? 0 : -errno; /* no log yet */
	struct nv_log *lg = kvt__calloc(1, sizeof(*lg));
	if (!lg) {
		close(dfd);
		return -ENOMEM;
	}
	s->lg = lg;
	lg->dfd = dfd;
	lg->hfd = -1;
	lg->direct = d->direct;
	lg->log_max = KVT_MIN(log_max, NV_LOG_BUF - NV_LOG_BLOCK);
	lg->seg_bytes = KVT_ALIGN_UP(segment_bytes, NV_LOG_BLOCK);
	/* Without an fdatasync per batch, smaller batches put several writes at the device
	 * at once (a closed loop of 32 x 64 KiB puts formed ~1 MiB batches, about 2 at the
	 * device: 0.60-0.66x fio; sealed at 256 KiB, 0.79x: docs/BENCHMARKS.md); with one,
	 * a full buffer shares it among the most objects (256 KiB: 0.91x against 1.06x). */
	if (!batch_bytes)
		batch_bytes = s->fsync_mode == NV_FSYNC_NONE ? NV_LOG_BATCH_NOSYNC : NV_LOG_BUF;
	lg->batch_max = KVT_MIN(KVT_ALIGN_UP(batch_bytes, NV_LOG_BLOCK), (uint64_t)NV_LOG_BUF);
	/* The log's segments lie inside nvme.bytes (the disk budget a user sets): the cycle
	 * is as many segments as fit in it, and the live objects (the index's capacity) are
	 * what fits in the cycle less two segments (the one being filled, and what batches
	 * leave unused at segment ends), divided by 1 + nvme.log_spare_pct. The spare is
	 * room for dead objects: a log reclaims a whole segment for each one it fills, and
	 * with no spare the oldest segment is mostly live (log cleaning at ~90 %
	 * utilisation), so it is either copied at ~10 bytes written per byte stored or
	 * evicted below capacity. So with the log on, nvme.bytes holds fewer live objects
	 * than with a file each (half of it at the default spare, docs/NVME_LOG.md); files
	 * of objects above log_max count in the same capacity and come on top of the
	 * segments on disk. A segment the file system cannot hold shortens the cycle during
	 * the run, and the capacity with it (nv_log_advance). */
	lg->spare_pct = KVT_MIN(spare_pct, 400);
	uint64_t fit = s->capacity / lg->seg_bytes;
	lg->nmax = (uint32_t)KVT_MIN(KVT_MAX(fit, 3), 1u << 20);
	if (lg->log_max && !s->ro) {
		uint64_t live = nv_log_live(lg, lg->nmax);
		if (fit < 3 || live < s->object_max) {
			KVT_WARN(s->log,
				 "nvme: nvme.bytes (%" PRIu64 ") holds fewer than 3 log segments of %" PRIu64
				 " bytes (or too few live bytes for one object): the log is off",
				 s->capacity, lg->seg_bytes);
			lg->log_max = 0;
		} else {
			s->capacity = live;
		}
	}
	/* Preallocated slots (nvme.preallocate) of a size the log takes would never be
	 * written: each log write would only unlink one to make room, and meanwhile they
	 * and the segments would both sit on disk. */
	if (lg->log_max && s->prealloc && s->prealloc <= lg->log_max) {
		KVT_INFO(s->log, "nvme: nvme.preallocate (%" PRIu64 ") is off: objects of that size "
				 "go to the log (nvme.log_max)", s->prealloc);
		s->prealloc = 0;
	}
	lg->fail_seg = UINT32_MAX;
	lg->reins_seg = UINT32_MAX;
	lg->drain_seg = UINT32_MAX;
	lg->rd_io.kind = IO_LOG;
	lg->rd_state = NV_RD_IDLE;
	/* A fraction of a segment, not all of its hot objects: at high utilisation almost
	 * everything in the oldest segment is live, and copying all of it each pass would
	 * multiply the bytes written without bound (log cleaning's cost). The rest is evicted
	 * as before. Stopped a batch short of the segment: the copies go to the tail of the
	 * segment before it, which must still have room for them. */
	lg->reins_max = KVT_MIN(lg->seg_bytes * KVT_MIN(reinsert_pct, 75) / 100,
				lg->seg_bytes - NV_LOG_BUFS * (uint64_t)NV_LOG_BUF);
	if (!(lg->zero = kvt__aligned_alloc(NV_LOG_BLOCK)))
		return -ENOMEM;
	memset(lg->zero, 0, NV_LOG_BLOCK);
	for (uint32_t i = 0; i < NV_LOG_BUFS; i++) {
		lg->b[i].io.kind = IO_LOG;
		if (!s->ro && !(lg->b[i].buf = kvt__aligned_alloc(NV_LOG_BUF)))
			return -ENOMEM;
		if (!s->ro && !(lg->b[i].iov = kvt__calloc(NV_LOG_MAXIOV, sizeof(struct iovec))))
			return -ENOMEM;
		if (!s->ro && lg->reins_max &&
		    !(lg->b[i].mv = kvt__calloc(NV_LOG_MAXENT, sizeof(*lg->b[i].mv))))
			return -ENOMEM;
	}
	if (!s->ro && lg->reins_max && !(lg->rbuf = kvt__aligned_alloc(NV_LOG_BUF)))
		return -ENOMEM;
	return 0;
}

void nv_log_close(struct nv *s)
{
	struct nv_log *lg = s->lg;
	if (!lg)
		return;
	for (uint32_t i = 0; i < lg->nsegs; i++)
		if (lg->segs[i].fd >= 0)
			close(lg->segs[i].fd);
	for (uint32_t i = 0; i < NV_LOG_BUFS; i++)
		if (lg->b[i].buf)
			kvt__free_aligned(lg->b[i].buf, NV_LOG_BUF);
	for (uint32_t i = 0; i < NV_LOG_BUFS; i++) {
		kvt__free(lg->b[i].mv);
		kvt__free(lg->b[i].iov);
	}
	kvt__free(lg->rq);
	if (lg->rbuf)
		kvt__free_aligned(lg->rbuf, NV_LOG_BUF);
	if (lg->zero)
		kvt__free_aligned(lg->zero, NV_LOG_BLOCK);
	kvt__free(lg->segs);
	kvt__free(lg->tombs);
	kvt__free(lg->ow.out);
	kvt__free(lg->ow.wipe);
	kvt__free(lg->ow.vent);
	if (lg->hfd >= 0)
		close(lg->hfd);
	close(lg->dfd);
	kvt__free(lg);
	s->lg = NULL;
}

/* A segment's list of entries: what its reuse evicts (nv_log_advance, tier_nvme_log_turn.c)
 * and what reinsertion copies (tier_nvme_log_reinsert.c collect). Both used to walk the
 * whole LRU list for the entries of one segment at every segment turn, on the ring thread: at
 * 131,072 objects of 64 KiB that walk was 87 % of the ring's time in nv_log_seal, writes
 * 1.37-1.59 GiB/s against 2.13 at 16,384 objects (docs/BENCHMARKS.md), and it grows with
 * the store. Ring thread only (the log's state is), like every index mutation. */
static void seg_unlink(struct nv *s, struct nv_ent *e)
{
	if (e->sprev)
		e->sprev->snext = e->snext;
	else
		s->lg->segs[e->lseg - 1].ents = e->snext;
	if (e->snext)
		e->snext->sprev = e->sprev;
	e->sprev = e->snext = NULL;
}

void nv_ent_set_lseg(struct nv *s, struct nv_ent *e, uint32_t lseg)
{
	if (e->lseg == lseg)
		return;
	if (e->lseg)
		seg_unlink(s, e);
	e->lseg = lseg;
	if (!lseg)
		return;
	struct nv_seg *g = &s->lg->segs[lseg - 1];
	e->sprev = NULL;
	e->snext = g->ents;
	if (g->ents)
		g->ents->sprev = e;
	g->ents = e;
}

uint64_t nv_log_max(const struct nv *s)
{
	return s->lg ? s->lg->log_max : 0; /* set at open, constant until close */
}

/* What a segment holds on disk, not its size: a segment with holes (punched, or a copy of
 * the store made with `cp --sparse`) allocates its holes from the free space when a lap
 * writes them. Until 2026-12-06 its size counted, so the open-time clamp took the holes
 * for room it already had and left nvme.bytes above what the disk could hold (found by
 * review; integ.nvme_log_clamp's sparse run). */
uint64_t nv_log_disk_bytes(const struct nv *s)
{
	uint64_t n = 0;
	for (uint32_t i = 0; s->lg && i < s->lg->nsegs; i++) {
		const struct nv_seg *g = &s->lg->segs[i];
		struct stat st;
		if (g->fd >= 0 && fstat(g->fd, &st) == 0)
			n += KVT_MIN(g->bytes, (uint64_t)st.st_blocks * 512);
		else if (g->fd < 0)
			n += nv_log_laid_disk_bytes(s, i); /* laid out ahead: the cycle's too */
	}
	return n;
}

uint64_t nv_log_capacity_in(const struct nv *s, uint64_t room)
{
	const struct nv_log *lg = s->lg;
	uint64_t fit = KVT_MIN(room / lg->seg_bytes, (uint64_t)lg->nmax);
	return (fit >= 3 ? nv_log_live(lg, (uint32_t)fit) : 0) + (room - fit * lg->seg_bytes);
}

bool nv_log_takes(struct nv *s, const struct nv_op *op)
{
	struct nv_log *lg = s->lg;
	return lg && lg->log_max && !lg->broken && !s->ro && op->len <= lg->log_max;
}

int nv_log_read_fd(struct nv *s, uint32_t lseg)
{
	return s->lg->segs[lseg - 1].fd;
}

/* A read-only open (no lock: a writer may be running) has read from segment lseg: does the
 * segment still hold the lap it was indexed in? A writer rewrites a segment's header, and
 * syncs it, before it writes any record of the next lap over the old one (nv_log_advance), so a
 * header still at the generation the open read, after the read, means the bytes read were
 * the indexed object's: 1. A whole header of another generation: the object was evicted
 * meanwhile, 0 (a miss, not damage: `kvtier verify` on a live store called hundreds of
 * such objects corrupt). A header that does not check twice running (one read could meet
 * the writer's rewrite half done), or a read that fails: an error, < 0, never a miss - a
 * header damaged from outside must not make its objects vanish from an inspection. */
int nv_log_lap_current(struct nv *s, uint32_t lseg)
{
	const struct nv_seg *g = &s->lg->segs[lseg - 1];
	_Alignas(NV_LOG_BLOCK) uint8_t blk[NV_LOG_BLOCK]; /* O_DIRECT: aligned, one block */
	for (int tries = 0; tries < 2; tries++) {
		ssize_t got = pread(g->fd, blk, NV_LOG_BLOCK, 0);
		if (got < 0)
			return -errno;
		if (got == NV_LOG_BLOCK && nv_log_seghdr_ok(blk, lseg - 1))
			return ((const struct nv_log_seghdr *)blk)->gen == g->hdr_gen;
	}
	return -EIO;
}

void nv_log_read_ref(struct nv *s, uint32_t lseg, int delta)
{
	s->lg->segs[lseg - 1].readers += (uint32_t)delta;
}

struct nv_batch *nv_log_filling(struct nv_log *lg)
{
	if (!lg->count)
		return NULL;
	struct nv_batch *b = &lg->b[(lg->head + lg->count - 1) % NV_LOG_BUFS];
	return b->state == NV_B_FILL ? b : NULL;
}

struct nv_batch *nv_log_new_batch(struct nv_log *lg)
{
	if (lg->count == NV_LOG_BUFS)
		return NULL;
	struct nv_batch *b = &lg->b[(lg->head + lg->count++) % NV_LOG_BUFS];
	b->state = NV_B_FILL;
	b->used = NV_LOG_BLOCK;
	b->bufused = NV_LOG_BLOCK;
	b->iov[0] = (struct iovec){.iov_base = b->buf, .iov_len = NV_LOG_BLOCK};
	b->niov = 1;
	b->ops = b->ops_tail = NULL;
	b->ntombs = 0;
	b->nmv = 0;
	b->err = 0;
	b->syncing = false;
	struct nv_log_rec *r = (struct nv_log_rec *)b->buf;
	memset(r, 0, NV_LOG_BLOCK);
	return b;
}

/* need bytes of b's own buffer for an object copied into the batch (a re-appended one,
 * whose read buffer is reused), listed as the batch's next piece. */
uint8_t *nv_log_batch_copy(struct nv_batch *b, uint64_t need)
{
	uint8_t *dst = b->buf + b->bufused;
	struct iovec *last = &b->iov[b->niov - 1];
	if ((uint8_t *)last->iov_base + last->iov_len == dst)
		last->iov_len += need; /* follows the previous copy */
	else
		b->iov[b->niov++] = (struct iovec){.iov_base = dst, .iov_len = need};
	b->bufused += need;
	return dst;
}

/* Write segment n's header for generation gen and make it durable, whatever nvme.fsync:
 * once per segment turn, and it must land before any record of its lap. Under
 * nvme.fsync=none, until 2026-12-04, a power cut could keep the lap's first records, or
 * log/head naming the lap, and lose the header: the next open then voided the log (a
 * head naming a generation the segment does not have) or walked the old lap into the
 * new one's records (found by review). */
int nv_log_write_header(struct nv *s, uint32_t n, uint64_t gen)
{
	struct nv_log *lg = s->lg;
	/* above a header crafted near the top: never wrap to 0 (a generation is one above
	 * what was read, so a crafted 2^64-1 arrives here as 0: until 2026-12-06 it passed,
	 * and the log's first lap checked again - voided objects, removed keys, served) */
	if (gen == 0 || gen >= NV_LOG_GEN_MAX)
		return -EOVERFLOW;
	uint8_t *blk = kvt__aligned_alloc(NV_LOG_BLOCK);
	if (!blk)
		return -ENOMEM;
	memset(blk, 0, NV_LOG_BLOCK);
	struct nv_log_seghdr *h = (struct nv_log_seghdr *)blk;
	memcpy(h->magic, NV_LOG_SEG_MAGIC, sizeof(h->magic));
	h->seg = n;
	h->gen = gen;
	h->ver = NV_LOG_SEG_VER;
	h->bytes = lg->segs[n].bytes;
	h->crc = nv_log_crc(blk);
	int rc = 0;
	if (pwrite(lg->segs[n].fd, blk, NV_LOG_BLOCK, 0) != NV_LOG_BLOCK)
		rc = errno ? -errno : -EIO;
	else if (fdatasync(lg->segs[n].fd) < 0)
		rc = -errno;
	nv_dirty_fs(s, 0);
	kvt__free_aligned(blk, NV_LOG_BLOCK);
	return rc;
}

static int head_slot(struct nv *s, uint8_t *blk, uint32_t seg, uint64_t gen)
{
	struct nv_log *lg = s->lg;
	memset(blk, 0, NV_LOG_BLOCK);
	struct nv_log_head *h = (struct nv_log_head *)blk;
	memcpy(h->magic, NV_LOG_HEAD_MAGIC, sizeof(h->magic));
	h->seg = seg;
	h->gen = gen;
	h->seq = lg->seq;
	h->count = ++lg->hcount;
	h->crc = nv_log_crc(blk);
	off_t at = (off_t)(h->count % 2) * NV_LOG_BLOCK;
	if (pwrite(lg->hfd, blk, NV_LOG_BLOCK, at) != NV_LOG_BLOCK)
		return errno ? -errno : -EIO;
	return 0;
}

/* Name segment seg (generation gen; NV_LOG_NONE: none) in log/head, durably (with
 * nvme.fsync), creating the file the first time (both slots written: no hole to fill on a
 * full file system later). Only after seg's header is durable: a head naming a segment
 * whose header did not land would void the log at the next open. */
int nv_log_write_head(struct nv *s, uint32_t seg, uint64_t gen)
{
	struct nv_log *lg = s->lg;
	bool created = false;
	if (lg->hfd < 0) {
		lg->hfd = openat(lg->dfd, NV_LOG_HEAD, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
				 s->file_mode);
		if (lg->hfd < 0)
			return -errno;
		created = true;
	}
	uint8_t *blk = kvt__aligned_alloc(NV_LOG_BLOCK);
	if (!blk)
		return -ENOMEM;
	int rc = head_slot(s, blk, seg, gen);
	if (!rc && created)
		rc = head_slot(s, blk, seg, gen);
	nv_dirty_fs(s, 0);
	kvt__free_aligned(blk, NV_LOG_BLOCK);
	/* Created: durable with its name whatever nvme.fsync (once per log), since segment
	 * headers say a head exists and a log that lost it is voided. */
	if (!rc && (created || s->fsync_mode != NV_FSYNC_NONE) &&
	    (fdatasync(lg->hfd) < 0 || (created && fsync(lg->dfd) < 0)))
		rc = -errno;
	return rc;
}

/* Called before a remove is reported done. A log whose writes stopped can record no
 * removal, and a put whose tombstone it owes (lg->owed) would be indexed again at the next
 * open: a removed key would come back. So the log is voided on disk once, for the next open
 * (tier_nvme_log_recover.c indexes nothing of it: its objects become misses), by unlinking
 * a segment file - 0.kvl, else the lowest one below the highest: a gap; or the only one:
 * nothing left - which, unlike any write, works on a full or failing file system. The
 * segment's fd stays open: this run reads its objects on, and writes nothing more (only a
 * stopped log gets here; a running one would append to the unlinked file). Failing the
 * remove instead (what is left where the unlink fails too: an immutable or read-only
 * directory) keeps the caller from counting on a removal a clean restart would undo, but
 * not a key removed from the file path after its log copy was evicted or dropped while the
 * log was stopped: so while the void is owed, every remove fails. 0: nothing owed (the
 * remove is as durable as a running log's); -EIO: owed, and the unlink failed. */
int nv_log_settle(struct nv *s)
{
	struct nv_log *lg = s->lg;
	if (!lg || !lg->owed)
		return 0;
	uint32_t lo = 0, hi = lg->nsegs;
	while (hi && lg->segs[hi - 1].fd < 0)
		hi--;
	while (lo < hi && lg->segs[lo].fd < 0)
		lo++;
	int err = 0;
	bool done = lo > 0 || lo == hi; /* 0.kvl gone already (a gap), or no segment at all */
	for (uint32_t i = lo; i < hi && !done; i++) {
		if (lg->segs[i].fd < 0 || (i == hi - 1 && i != lo))
			continue; /* the highest, with others below it: no gap */
		char name[32];
		nv_log_seg_name(i, name, sizeof(name));
		if (unlinkat(lg->dfd, name, 0) == 0 || errno == ENOENT) {
			done = true;
			if (s->fsync_mode != NV_FSYNC_NONE)
				fsync(lg->dfd);
			nv_dirty_fs(s, 0);
			KVT_WARN(s->log,
				 "nvme: log writes are stopped and a removal could not be recorded: "
				 "%s removed, so the next open indexes nothing of the log (its "
				 "objects become misses) and no removed key comes back",
				 name);
		} else if (!err) {
			err = -errno;
		}
	}
	if (!done) {
		KVT_ERR(s->log,
			"nvme: log writes are stopped, a removal could not be recorded and no log "
			"segment can be removed (%s): removes fail until one can",
			strerror(-err));
		return -EIO;
	}
	lg->owed = false;
	lg->voided = true;
	return 0;
}

/* Log writes stop for the rest of the run. Tombstones queued or staged in the filling
 * batch will never be written, and some are of removes already reported done: the void is
 * owed, at once. So is it when a segment's drain evicted objects whose records its new
 * header has not yet ended (drain_evicted): a stop for any reason in that window (a
 * failed batch while the drained segment's reads finish) left them to be indexed again at
 * the next open - a key evicted there, written again as a file and removed, came back
 * (until 2026-12-06; found by review, not forced by a test). */
void nv_log_stop(struct nv *s)
{
	struct nv_log *lg = s->lg;
	lg->broken = true;
	lg->owed |= lg->drain_evicted;
	const struct nv_batch *b = nv_log_filling(lg);
	const struct nv_log_rec *r = b ? (const struct nv_log_rec *)b->buf : NULL;
	for (uint32_t i = 0; r && i < r->n; i++)
		lg->owed |= r->ent[i].type == NV_LOG_TOMB;
	lg->owed |= lg->ntombs > 0;
	nv_log_settle(s);
}

/* Seal batch b and issue its write. false: it stays the filling batch for now. */
bool nv_log_seal(struct nv *s, struct nv_batch *b)
{
	struct nv_log *lg = s->lg;
	if (lg->broken)
		return false;
	if (lg->seq >= NV_LOG_GEN_MAX) {
		/* a head or record crafted near the top: the next batches would wrap to 0 and
		 * sort before every older one, so a tombstone lost to the put it removed
		 * (until 2026-12-06) */
		KVT_WARN(s->log, "nvme: log batch sequence %llu at its bound: log writes stop",
			 (unsigned long long)lg->seq);
		nv_log_stop(s);
		return false;
	}
	if (!lg->have_cur || lg->cur_off + b->used > lg->segs[lg->cur].bytes)
		if (!nv_log_advance(s))
			return false;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
	if (!sqe) {
		io_uring_submit(&s->ring);
		if (!(sqe = io_uring_get_sqe(&s->ring)))
			return false;
	}
	struct nv_seg *g = &lg->segs[lg->cur];
	b->seg = lg->cur;
	b->off = lg->cur_off;
	b->seq = ++lg->seq;
	lg->cur_off += b->used;
	nv_dirty_fs(s, 0); /* with fsync=none, the flush after its ack syncs it */
	g->batches++;
	struct nv_log_rec *r = (struct nv_log_rec *)b->buf;
	memcpy(r->magic, NV_LOG_REC_MAGIC, sizeof(r->magic));
	r->seg = b->seg;
	r->flags = s->fsync_mode == NV_FSYNC_NONE ? NV_LOG_REC_UNORDERED : 0;
	r->gen = g->gen;
	r->seq = b->seq;
	r->off = b->off;
	r->len = b->used;
	for (uint32_t i = 0; i < r->n; i++)
		if (r->ent[i].type == NV_LOG_PUT)
			r->ent[i].off += b->off; /* staged relative to the batch */
	for (struct nv_op *op = b->ops; op; op = op->bnext)
		op->loff += b->off;
	for (uint32_t i = 0; i < b->nmv; i++)
		b->mv[i].loff += b->off;
	r->crc = nv_log_crc(r);
	b->state = NV_B_FLIGHT;
	lg->inflight++;
	io_uring_prep_writev(sqe, g->fd, b->iov, b->niov, b->off);
	io_uring_sqe_set_data(sqe, &b->io);
	return true;
}

static bool drain_tombs(struct nv_log *lg, struct nv_batch *b);

/* List op in the filling batch: 1 staged, 0 not now, -1 the file path takes it. */
static int stage_one(struct nv *s, struct nv_op *op)
{
	struct nv_log *lg = s->lg;
	if (lg->broken) {
		op->log = false;
		return -1; /* the file path takes it */
	}
	uint64_t need = KVT_ALIGN_UP(op->len, NV_LOG_BLOCK);
	struct nv_batch *b = nv_log_filling(lg);
	struct nv_log_rec *r = b ? (struct nv_log_rec *)b->buf : NULL;
	uint64_t keep = nv_log_copy_room(lg);
	if (keep && lg->have_cur &&
	    lg->cur_off + (b ? b->used : NV_LOG_BLOCK) + need + keep > lg->segs[lg->cur].bytes)
		return 0; /* the segment's tail is kept for re-appended objects: wait for them */
	/* A batch of re-appended objects (tier_nvme_log_reinsert.c) was sized to fit the
	 * current segment: it goes alone, or advancing past it could wait on itself. */
	if (b && (b->used + need > lg->batch_max || r->n >= NV_LOG_MAXENT || b->nmv)) {
		if (!nv_log_seal(s, b)) {
			if (lg->broken) {
				op->log = false;
				return -1;
			}
			return 0;
		}
		b = NULL;
	}
	if (!b && !(b = nv_log_new_batch(lg)))
		return 0; /* every buffer in flight */
	r = (struct nv_log_rec *)b->buf;
	if (!drain_tombs(lg, b) || r->n >= NV_LOG_MAXENT) {
		nv_log_seal(s, b); /* removals first: this put goes into a later batch */
		return 0;
	}
	/* Written from where it is, not copied: a tier write is KVT_ALIGN-aligned and a
	 * multiple of it (tier_nvme.c), as a direct write needs, and its memory stays the
	 * caller's until the batch is acknowledged (nv_finish), as a file-per-object write's
	 * does until it lands. */
	_Static_assert(NV_LOG_BLOCK == KVT_ALIGN, "a tier write is whole log blocks");
	if (op->tail) { /* a split object (write_split): its header, then its payload */
		b->iov[b->niov++] = (struct iovec){.iov_base = (void *)op->obj, .iov_len = op->head_len};
		b->iov[b->niov++] =
		    (struct iovec){.iov_base = (void *)op->tail, .iov_len = op->len - op->head_len};
	} else {
		b->iov[b->niov++] = (struct iovec){.iov_base = (void *)op->obj, .iov_len = need};
	}
	struct nv_log_rent *en = &r->ent[r->n++];
	memcpy(en->key, op->key.bytes, KVT_KEY_BYTES);
	en->off = b->used;
	en->len = (uint32_t)op->len;
	en->crc = op->lcrc; /* submit_write computed it: every write the log may take has it */
	en->type = NV_LOG_PUT;
	op->loff = b->used;
	b->used += need;
	op->bnext = NULL;
	if (b->ops_tail)
		b->ops_tail->bnext = op;
	else
		b->ops = op;
	b->ops_tail = op;
	op->issued = true;
	return 1;
}

int nv_log_stage(struct nv *s, struct nv_op *op)
{
	struct nv_log *lg = s->lg;
	int r = lg->wait_head ? 0 : stage_one(s, op); /* in arrival order */
	if (!r) {
		op->bnext = NULL;
		if (lg->wait_tail)
			lg->wait_tail->bnext = op;
		else
			lg->wait_head = op;
		lg->wait_tail = op;
	}
	return r;
}

/* Stage waiting writes, oldest first, until one has to wait again. */
static void retry_waiting(struct nv *s)
{
	struct nv_log *lg = s->lg;
	struct nv_op *op;
	while ((op = lg->wait_head)) {
		struct nv_op *nx = op->bnext; /* stage_one reuses bnext for the batch's list */
		int r = stage_one(s, op);
		if (!r)
			return;
		lg->wait_head = nx;
		if (!lg->wait_head)
			lg->wait_tail = NULL;
		op->bnext = NULL;
		if (r > 0) {
			op->stage = ST_WAIT;
		} else {
			op->stage = ST_W_OPEN;
			nv_pump(s, op);
		}
	}
}

/* Queue a removal of key for the next batch; false: out of memory. */
static bool queue_tomb(struct nv *s, const struct kvt_key *key)
{
	struct nv_log *lg = s->lg;
	if (lg->tomb_head + lg->ntombs == lg->tomb_cap) {
		if (lg->tomb_head) {
			memmove(lg->tombs, lg->tombs + lg->tomb_head, lg->ntombs * sizeof(*lg->tombs));
			lg->tomb_head = 0;
		} else {
			uint32_t nc = lg->tomb_cap ? 2 * lg->tomb_cap : 256;
			struct kvt_key *t = kvt__realloc(lg->tombs, nc * sizeof(*t));
			if (!t)
				return false;
			lg->tombs = t;
			lg->tomb_cap = nc;
		}
	}
	lg->tombs[lg->tomb_head + lg->ntombs++] = *key;
	lg->tombs_queued++;
	return true;
}

/* A removal is recorded in the next batch, in order with the puts around it (a put of the
 * same key after it must win at the next open). One the log cannot record is owed
 * (nv_log_settle): while its writes are stopped, or out of memory (the log stops: a
 * removed key that came back at the next open would break what a remove promises). */
void nv_log_tombstone(struct nv *s, const struct nv_ent *e)
{
	struct nv_log *lg = s->lg;
	if (!lg || !lg->b[0].buf || !e->lseg || lg->voided)
		return;
	/* Not for an object of the segment being reused (nv_log_advance): the header of its next
	 * generation, written before anything else goes into it (and close waits for the batch
	 * that needs it), voids every put it holds; a tombstone for each would cost a record
	 * entry per object of the segment, for nothing. (If that header fails, the turn owes
	 * them.) */
	if (lg->drain_seg == e->lseg - 1 && lg->drain_gen == lg->segs[e->lseg - 1].gen)
		return;
	if (lg->broken) {
		lg->owed = true;
	} else if (!queue_tomb(s, &e->key)) {
		KVT_WARN(s->log, "nvme: out of memory for a removal record: log writes stop");
		lg->owed = true;
		nv_log_stop(s);
	}
}

/* Move pending removals into batch b; false if some are left (b is full). */
static bool drain_tombs(struct nv_log *lg, struct nv_batch *b)
{
	struct nv_log_rec *r = (struct nv_log_rec *)b->buf;
	while (lg->ntombs && r->n < NV_LOG_MAXENT) {
		struct nv_log_rent *en = &r->ent[r->n++];
		memset(en, 0, sizeof(*en));
		memcpy(en->key, lg->tombs[lg->tomb_head++].bytes, KVT_KEY_BYTES);
		en->type = NV_LOG_TOMB;
		lg->ntombs--;
		b->ntombs++;
	}
	if (!lg->ntombs)
		lg->tomb_head = 0;
	return !lg->ntombs;
}

/* Group commit: seal the filling batch when a buffer is free to keep filling behind it. */
void nv_log_kick(struct nv *s)
{
	struct nv_log *lg = s->lg;
	nv_log_reinsert(s); /* before the segment after cur is reused: keep its hot objects */
	retry_waiting(s);
	struct nv_batch *b = nv_log_filling(lg);
	uint64_t keep = nv_log_copy_room(lg);
	if (!b && lg->ntombs && !lg->broken && lg->inflight < NV_LOG_BUFS - 1 &&
	    (!keep || !lg->have_cur ||
	     lg->cur_off + NV_LOG_BLOCK + keep <= lg->segs[lg->cur].bytes))
		b = nv_log_new_batch(lg); /* (a batch of removals only takes the copies' room too) */
	if (b)
		drain_tombs(lg, b);
	if (b && ((struct nv_log_rec *)b->buf)->n && lg->inflight < NV_LOG_BUFS - 1)
		nv_log_seal(s, b);
	if (lg->broken && (b = nv_log_filling(lg)) && b->ops) {
		/* No segment: hand the staged writes to the file path. */
		struct nv_op *op = b->ops;
		b->ops = b->ops_tail = NULL;
		b->state = NV_B_FREE;
		lg->count--;
		while (op) {
			struct nv_op *nx = op->bnext;
			op->log = false;
			op->stage = ST_W_OPEN;
			nv_pump(s, op);
			op = nx;
		}
	}
}

/* A flush (tier_nvme_flush.c) vouches for the removes before it: true once every removal
 * queued before it (mark: tombs_queued then) is in an acknowledged batch - written, and with
 * nvme.fsync data/full fdatasynced -, or the log's writes stopped (the removals it could
 * not write are owed: nv_log_settle voided the log, or the flush fails, nv_log_flush_err).
 * Until 2026-12-03 a flush waited only for the writes before it: a log object's remove is
 * answered once its tombstone is queued, and after a flush and a power cut the removed key
 * came back (integ.nvme_log_powercut). */
bool nv_log_flushed(const struct nv *s, uint64_t mark)
{
	const struct nv_log *lg = s->lg;
	/* stopped: what is owed is the flush's error; a batch already at the disk still lands
	 * its removals (or, failing, owes them) - until 2026-12-05 a stopped log answered at
	 * once, and a removal batch in flight was not waited for */
	return !lg || (lg->broken ? lg->inflight == 0 : lg->tombs_written >= mark);
}

uint64_t nv_log_flush_mark(const struct nv *s)
{
	return s->lg ? s->lg->tombs_queued : 0;
}

/* A flush's error from the log: a removal it could neither record nor void (the log's
 * writes stopped and no segment could be unlinked, nv_log_settle) is not durable. */
int nv_log_flush_err(const struct nv *s)
{
	return s->lg && s->lg->owed ? -EIO : 0;
}

/* Staged or written batches not yet acknowledged (close waits for them). */
bool nv_log_busy(struct nv *s)
{
	return s->lg && (((s->lg->count || s->lg->ntombs) && !s->lg->broken) ||
			 s->lg->inflight || /* at the disk, stopped or not: its CQE is reaped */
			 s->lg->rd_state == NV_RD_READING); /* its CQE must be reaped */
}

/* Failed batch b's removals are lost with it, and were acknowledged long ago (a remove is
 * done when its tombstone is queued): left out, they came back at the next open. The log
 * stops and owes them (nv_log_settle voids it). Not queued again: on a device where every
 * batch write fails (but header writes pass) each retry took a segment, and close, waiting
 * for queued tombstones, never ended. */
static void tombs_lost(struct nv *s, const struct nv_batch *b)
{
	struct nv_log *lg = s->lg;
	const struct nv_log_rec *r = (const struct nv_log_rec *)b->buf;
	bool any = false;
	for (uint32_t i = 0; i < r->n; i++)
		any |= r->ent[i].type == NV_LOG_TOMB;
	if (!any || lg->voided)
		return;
	if (!lg->broken)
		KVT_WARN(s->log, "nvme: a log batch with removals failed: log writes stop");
	lg->owed = true;
	nv_log_stop(s);
}

/* A write whose batch was issued: its bytes stay charged to the write budget (they may
 * have reached the media, as nv_write_fail counts issued bytes). */
static void fail_op(struct nv *s, struct nv_op *op, int err)
{
	nv_write_release(s, op);
	ST_ADD(s, errors, 1);
	nv_finish(s, op, err);
}

/* Acknowledge finished batches, oldest first. */
static void ack(struct nv *s)
{
	struct nv_log *lg = s->lg;
	while (lg->count && lg->b[lg->head].state == NV_B_DONE) {
		struct nv_batch *b = &lg->b[lg->head];
		if (!b->err && b->seg == lg->fail_seg && b->seq <= lg->fail_upto)
			b->err = -EIO; /* after a failed batch of its segment: unreachable */
		if (b->err) {
			KVT_WARN(s->log, "nvme: log batch write failed: %s", strerror(-b->err));
			/* Its record must not be found by a scan; nothing after it in this
			 * segment is acknowledged, and appends move to the next segment. */
			int fd = lg->segs[b->seg].fd;
			bool erased = pwrite(fd, lg->zero, NV_LOG_BLOCK, (off_t)b->off) ==
					      NV_LOG_BLOCK &&
				      fdatasync(fd) == 0;
			nv_dirty_fs(s, 0);
			lg->fail_seg = b->seg;
			lg->fail_upto = lg->seq;
			if (lg->have_cur && lg->cur == b->seg)
				lg->cur_off = lg->segs[b->seg].bytes;
			tombs_lost(s, b);
			if (!erased && !lg->voided) {
				/* A record that may have landed with objects that did not, left
				 * checking: once out of the newest batches the next open would index
				 * them unchecked (until 2026-12-05). The log is voided instead. */
				KVT_WARN(s->log, "nvme: log: the failed batch's record at %u.kvl:%" PRIu64
						 " cannot be erased: the log is voided for the next open",
					 b->seg, (uint64_t)b->off);
				lg->owed = true;
				nv_log_stop(s);
			}
		}
		lg->tombs_written += b->ntombs; /* (a failed batch's are owed: tombs_lost) */
		nv_log_moved(s, b);
		struct nv_op *op = b->ops;
		b->ops = b->ops_tail = NULL;
		b->state = NV_B_FREE;
		lg->segs[b->seg].batches--;
		lg->head = (lg->head + 1) % NV_LOG_BUFS;
		lg->count--;
		while (op) {
			struct nv_op *nx = op->bnext;
			int rc = b->err ? b->err : nv_write_index(s, op, b->seg + 1, op->loff);
			if (rc < 0)
				fail_op(s, op, rc);
			else
				nv_finish(s, op, 0);
			op = nx;
		}
	}
}

void nv_log_on_cqe(struct nv *s, struct nv_io *io, int res)
{
	struct nv_log *lg = s->lg;
	if (io == &lg->rd_io) {
		nv_log_read_done(s, res); /* a reinsertion read (tier_nvme_log_reinsert.c) */
		return;
	}
	struct nv_batch *b = (struct nv_batch *)io;
	if (!b->syncing) {
		if (res != (int)b->used)
			b->err = res < 0 ? res : -EIO;
		else if (s->fsync_mode != NV_FSYNC_NONE) {
			/* One fdatasync for every object of the batch. */
			struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
			if (!sqe) {
				io_uring_submit(&s->ring);
				sqe = io_uring_get_sqe(&s->ring);
			}
			if (sqe) {
				b->syncing = true;
				io_uring_prep_fsync(sqe, lg->segs[b->seg].fd, IORING_FSYNC_DATASYNC);
				io_uring_sqe_set_data(sqe, &b->io);
				return;
			}
			if (fdatasync(lg->segs[b->seg].fd) < 0)
				b->err = -errno;
		}
	} else if (res < 0) {
		b->err = res;
	}
	b->state = NV_B_DONE;
	lg->inflight--;
	ack(s);
}
