/*
 * tier_nvme_log_turn.c - the small-object log's segment turns: moving the append point to
 * the next segment of the cycle (nv_log_advance, called when a sealed batch does not fit
 * the current one). A turn creates the segment on the first lap, or evicts what is left in
 * it (FIFO reuse: region eviction), gives it its next generation's header - durable before
 * any record of the new lap - and names it in log/head. A segment too short to take a
 * batch is emptied and given its size again; a file system too full for a new one shortens
 * the cycle. docs/NVME_LOG.md has the crash-safety argument these steps keep.
 */
#include "tier_nvme_log.h"

/* Does a segment file numbered above n exist (opened or not: the open does not index the
 * segments past a gap)? */
static bool segs_after(const struct nv_log *lg, uint32_t n)
{
	for (uint32_t i = n + 1; i < lg->nsegs; i++) {
		char name[32];
		struct stat st;
		nv_log_seg_name(i, name, sizeof(name));
		if (lg->segs[i].fd >= 0 || fstatat(lg->dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			return true;
	}
	return false;
}

/* Some segment of the cycle can take a batch (or is still to be created). */
static bool cycle_usable(const struct nv_log *lg)
{
	for (uint32_t i = 0; i < lg->nmax; i++)
		if (lg->segs[i].fd < 0 || lg->segs[i].bytes >= NV_LOG_BLOCK + NV_LOG_BUF)
			return true;
	return false;
}

/* Segment `next`, too short to be appended to (nv_log_advance): its objects evicted, truncated to
 * nothing, then given its whole size again so that the cycle keeps the segments its live
 * capacity counts (fallocate: as at its creation). false: not now (reads of it in flight)
 * or log writes stopped; true with g->bytes still short: the file system has no room for
 * it (passed over; tried again next lap). */
static bool short_seg_renew(struct nv *s, uint32_t next)
{
	struct nv_log *lg = s->lg;
	struct nv_seg *g = &lg->segs[next];
	if (g->bytes) {
		if (lg->drain_seg != next || lg->drain_gen != g->gen) {
			lg->drain_seg = next; /* set first: these evictions need no tombstone */
			lg->drain_gen = g->gen;
			lg->drain_evicted = false;
		}
		while (g->ents) {
			nv_evict(s, g->ents, false);
			lg->drain_evicted = true;
		}
		if (g->readers || g->movers ||
		    (lg->rd_state != NV_RD_IDLE && lg->rd_seg == next))
			return false;
		if (ftruncate(g->fd, 0) < 0 ||
		    (s->fsync_mode != NV_FSYNC_NONE && fdatasync(g->fd) < 0)) {
			int err = errno;
			KVT_WARN(s->log, "nvme: log segment %u, shorter than one batch: cannot "
					 "empty it (%s): log writes stop",
				 next, strerror(err));
			lg->owed |= lg->drain_evicted; /* its records still name them */
			nv_log_stop(s);
			return false;
		}
		g->bytes = 0;
		lg->drain_evicted = false; /* their records are gone with the bytes */
		nv_dirty_fs(s, 0); /* with fsync=none, a flush's syncfs makes it durable */
	}
	if (fallocate(g->fd, 0, 0, (off_t)lg->seg_bytes) == 0) {
		g->bytes = lg->seg_bytes;
		KVT_INFO(s->log, "nvme: log segment %u was shorter than one batch (cut from "
				 "outside, or its creation interrupted): emptied and allocated again",
			 next);
	} else {
		(void)ftruncate(g->fd, 0); /* what a failed fallocate left */
	}
	return true;
}

/* Move the append point to the next segment of the cycle: create it, or evict what is left
 * in it and start its next generation. false: not now (reads or batches of it in flight) or
 * never (lg->broken). */
bool nv_log_advance(struct nv *s)
{
	struct nv_log *lg = s->lg;
	for (uint32_t tries = 0;; tries++) {
		if (tries > lg->nmax + 1) {
			KVT_WARN(s->log, "nvme: no usable log segment: log writes stop");
			nv_log_stop(s);
			return false;
		}
		uint32_t next = lg->have_cur ? (lg->cur + 1) % lg->nmax : lg->start % lg->nmax;
		struct nv_seg *g = &lg->segs[next];
		if (g->fd < 0) {
			int rc = nv_log_seg_open(s, next, true);
			if (rc == NV_LOG_NOT_NOW)
				return false; /* a layout in flight holds the room: not now */
			if (rc < 0 && segs_after(lg, next)) {
				/* Segments past it exist (the gap an open voided, still there): a
				 * shorter cycle would leave the gap, and the next open would void
				 * again everything this run wrote - flushed puts included (until
				 * 2026-12-05). Puts take the file path instead. */
				KVT_WARN(s->log, "nvme: log segment %u: %s, and segments after it "
						 "exist: log writes stop",
					 next, strerror(-rc));
				nv_log_stop(s);
				return false;
			}
			if (rc < 0) {
				/* The file system is full (or refuses): cycle over the segments
				 * that exist. The live capacity follows the shorter cycle at once:
				 * left at the longer cycle's, the index admitted objects that
				 * reusing a segment then evicted below the capacity the tier
				 * reports. (Below 3 segments the formula leaves no live room: the
				 * capacity stays, as before.) Read without a lock by nv_can_write
				 * and nv_stats on other threads: atomic. */
				KVT_WARN(s->log, "nvme: log segment %u: %s: the log keeps %u segments",
					 next, strerror(-rc), next);
				lg->nmax = next;
				if (!lg->nmax) {
					nv_log_stop(s);
					return false;
				}
				if (next >= 3 && nv_log_live(lg, next) < s->capacity)
					atomic_store_explicit(&s->capacity, nv_log_live(lg, next),
							      memory_order_relaxed);
				lg->have_cur = false;
				lg->start = 0;
				continue;
			}
		}
		if (g->bytes < NV_LOG_BLOCK + NV_LOG_BUF) {
			/* Shorter than one batch (cut from outside; 0 bytes: its creation
			 * killed before its fallocate): emptied and given its size again, then
			 * reused as any segment (short_seg_renew). Until 2026-12-06 it was passed
			 * over forever: its records never ended (a reuse's new generation is what
			 * ends them), so a put in it outlived its tombstone once the tombstone's
			 * segment was reused and the next open indexed the removed key again, and
			 * the cycle was a segment shorter than the live capacity counted. Passed
			 * over where the file system has no room for it, and where no segment of
			 * the cycle can take a batch: the log stops, its objects stay served, and
			 * a removal then voids the log on disk (nv_log_settle). */
			if (cycle_usable(lg) && !short_seg_renew(s, next))
				return false;
			if (g->bytes < NV_LOG_BLOCK + NV_LOG_BUF) {
				lg->cur = next;
				lg->cur_off = g->bytes; /* never appended to */
				lg->have_cur = true;
				continue;
			}
			/* given its size again: reused below as any segment (a new generation) */
		}
		if (g->batches || g->movers || (lg->rd_state != NV_RD_IDLE && lg->rd_seg == next) ||
		    (lg->reins_seg == next && lg->reins_gen == g->gen && lg->rq_head < lg->rq_n))
			return false; /* its copies are still being made */
		/* FIFO reuse: what is left of the segment's objects goes (region eviction) -
		 * before waiting for its reads in flight, so that no new read of it starts:
		 * under a steady random read load some read of it is nearly always in flight,
		 * and waiting for a moment with none stalled every write behind it. */
		if (lg->drain_seg != next || lg->drain_gen != g->gen) {
			/* Set first: these evictions need no tombstone (nv_log_tombstone). */
			lg->drain_seg = next;
			lg->drain_gen = g->gen;
			lg->drain_evicted = false;
			while (g->ents) { /* each eviction takes its entry off the list */
				nv_evict(s, g->ents, false);
				lg->drain_evicted = true;
			}
		}
		if (g->readers)
			return false; /* reads started before: they finish first */
		/* nvme.fsync=none through the page cache (nvme.direct off, or a file system that
		 * refuses O_DIRECT): copies moved here from segment `next` (reinsertion) are
		 * acknowledged from the page cache, and the durable header below ends their old
		 * place. Synced first, or a power cut after the header lost them from both
		 * places (from a review; not reproduced: a test cannot drop the page cache as a
		 * power cut does). With O_DIRECT they are at the device already. */
		if (s->fsync_mode == NV_FSYNC_NONE && !lg->direct && lg->have_cur &&
		    lg->segs[lg->cur].fd >= 0)
			(void)fdatasync(lg->segs[lg->cur].fd);
		/* cut from outside but still longer than a batch: its whole size again, as
		 * short_seg_renew gives a shorter one (kept as it is where there is no room) */
		if (g->bytes < lg->seg_bytes && fallocate(g->fd, 0, 0, (off_t)lg->seg_bytes) == 0)
			g->bytes = lg->seg_bytes;
		int rc = nv_log_write_header(s, next, g->gen + 1);
		if (rc < 0) {
			KVT_WARN(s->log, "nvme: log segment %u header: %s: log writes stop", next,
				 strerror(-rc));
			/* the old header still holds: the objects drained above left no tombstone */
			lg->owed |= lg->drain_evicted;
			nv_log_stop(s);
			return false;
		}
		g->gen++;
		lg->drain_evicted = false; /* the new header ended the records naming them */
		if ((rc = nv_log_write_head(s, next, g->gen)) < 0) {
			/* Written on, the segment would hold acknowledged objects whose loss
			 * with the file (deleted from outside) the next open could not tell. */
			KVT_WARN(s->log, "nvme: log head (segment %u): %s: log writes stop", next,
				 strerror(-rc));
			nv_log_stop(s);
			return false;
		}
		if (lg->rd_state == NV_RD_IDLE) {
			/* copies still listed were for a segment before: none kept for them */
			lg->rq_head = lg->rq_n;
			lg->reins_left = 0;
		}
		lg->cur = next;
		lg->cur_off = NV_LOG_BLOCK;
		lg->have_cur = true;
		return true;
	}
}
