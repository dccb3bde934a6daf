/*
 * tier_nvme_log_recover.c - the open-time scan of the small-object log: what a restart
 * keeps, and why nothing torn or stale comes back (docs/NVME_LOG.md, "Crash safety").
 *
 * Each segment's header gives its generation; its commit records are walked from the first
 * batch on, each found at the end of the one before, and the walk stops at the first record
 * whose CRC, segment, generation or offset does not check: a batch that was never written
 * or was torn ends its segment's valid prefix, and records of an earlier generation (a
 * reused segment) are never accepted. Where a walk stops short, the batch after it is
 * looked for (look_past): more valid batches past the stop in its segment than a crash can
 * leave (judge_stops) make it a damaged record, not a torn tail, and void the log, as a gap
 * does. Batches are acknowledged in sequence order and at most NV_LOG_BUFS are
 * unacknowledged at once, so only the NV_LOG_BUFS newest batches can be incomplete: every
 * object of those is read back and checked against the CRC32C its entry records before it
 * is indexed (the engine checks the object format on every read): one that does not match
 * is voided alone (its entry rewritten as NV_LOG_VOID, so that no later scan indexes it),
 * and the records of a batch with an object past its segment file's end, and of those
 * after it in its segment, are zeroed so that no later scan trusts them. Entries are then
 * applied in sequence order (puts, tombstones); a key also stored as its own file keeps
 * the file. A put entry of a valid record that does not lie in
 * its segment is damage, not a tear: skipped and counted (ent_ok). Segments are canonical
 * names 0.kvl, 1.kvl, ... up to the cycle's end. Whatever says a segment with batches is
 * gone voids the whole log (nothing indexed: its tombstones went with it, and with them the
 * right to trust any older put), with a log line saying why: a gap (a segment deleted from
 * outside), a file outside the cycle that holds batches (the gap of a longer, earlier
 * cycle; removed by a read-write open), and log/head naming a newest segment that is not
 * there (deleted: it leaves no gap when it is the highest-numbered) or missing itself when
 * the headers say it was kept, and a segment whose header does not check but that holds
 * batches (walk_bad_header), unless it is the oldest, whose removals undo nothing
 * elsewhere (oldest_seg); `kvtier verify` reports a void as damage (void_anomaly).
 * Files outside the cycle holding no batch, and other entries,
 * are warned about and left. A read-only open indexes nothing then, and writes nothing. A
 * segment file that fails to open for a reason other than not being a segment fails the
 * open before anything is written (seg_open_failed), as does a read of a segment that
 * fails (seg_pread: an I/O error is not the end of what was written). The scan writes
 * nothing: what it decides to write (a void's headers, files outside the cycle removed,
 * torn records zeroed, log/head) is made by nv_log_open_writes, on the ring thread once it
 * is set up, so a failed open changes nothing of the log.
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
	return nv_log_parse_name(nm, ".kvl", out);
}

/* Did file n fail to open (err, -errno) because it cannot be a segment - a symlink (ELOOP:
 * opened with O_NOFOLLOW), a directory (EISDIR), not a regular file (EINVAL, from
 * nv_log_seg_open), a socket (ENXIO), gone since it was listed (ENOENT)? Any other error
 * (EACCES, EPERM, EMFILE, EIO, ...) says nothing about what the file holds: it may be a
 * segment with batches that the rest of the log needs, and it may open again later. Until
 * 2026-12-03 such a file ended the cycle like a directory: the files after it were taken
 * for files outside the cycle, voided or removed, while it kept its batches unvoided, and
 * the first open that could read it again indexed its puts - keys removed before (their
 * tombstones in the files removed) or during the run that could not read it (no tombstone:
 * it was not indexed) came back (integ.nvme_log_outside part 4). So the open fails, with
 * one line, before anything is written. */
static int seg_open_failed(struct nv *s, uint32_t n, int err)
{
	if (err == -ELOOP || err == -EISDIR || err == -EINVAL || err == -ENXIO || err == -ENOENT)
		return 0;
	KVT_ERR(s->log,
		"nvme: log segment %u.kvl: %s: the log cannot be read whole, so the tier does "
		"not open (nothing was changed)%s",
		n, strerror(-err),
		err == -EMFILE || err == -ENFILE
		    ? "; the log keeps every segment open: raise the open-file limit (ulimit -n, "
		      "RLIMIT_NOFILE) or lower nvme.bytes / raise nvme.segment_bytes"
		    : "");
	return err;
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

/* The block at off (blk) is a valid commit record of segment n, generation gen, in a
 * segment of bytes bytes. */
static bool rec_ok(const uint8_t *blk, uint32_t n, uint64_t gen, uint64_t off, uint64_t bytes)
{
	const struct nv_log_rec *r = (const struct nv_log_rec *)blk;
	return !memcmp(r->magic, NV_LOG_REC_MAGIC, sizeof(r->magic)) && r->seg == n &&
	       r->gen == gen && r->off == off && r->len >= NV_LOG_BLOCK &&
	       r->len % NV_LOG_BLOCK == 0 && r->len <= NV_LOG_BUF && off + r->len <= bytes &&
	       r->n <= NV_LOG_MAXENT && r->crc == nv_log_crc(blk);
}

/* Read len bytes of segment n (g) at off: the bytes read, fewer only at the file's end, or
 * -errno with one line naming the segment and offset. Until 2026-12-04 a failed read (EIO,
 * or a read cut short inside the file by one) was the end of what was written: the walk
 * stopped there, and a read-write open took the batches after it for gone - zeroed (torn
 * records), or the segment reused - data lost to what may be a transient error. An error
 * says nothing about what the file holds, so the open fails before anything is written, as
 * for a segment that fails to open (seg_open_failed) or an unreadable log/head. */
/* Reads len bytes at off, looping over short reads; a short count only at the file's end
 * (it shrank since it was opened). A read that fails, or that ends before the file does,
 * fails the open with one line: an I/O error is not the end of what was written. */
static ssize_t seg_pread(struct nv *s, const struct nv_seg *g, uint32_t n, void *buf, size_t len,
			 uint64_t off)
{
	size_t done = 0;
	int err = 0;
	while (done < len && !err) {
		ssize_t got = pread(g->fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));
		struct stat st;
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			err = errno;
		else if (got == 0 &&
			 (fstat(g->fd, &st) < 0 || off + done < (uint64_t)st.st_size))
			err = EIO; /* nothing read inside the file: the read ended at an error */
		else if (got == 0)
			break;
		done += got > 0 ? (size_t)got : 0;
	}
	if (!err)
		return (ssize_t)done;
	KVT_ERR(s->log,
		"nvme: log segment %u.kvl: reading %zu bytes at offset %" PRIu64 ": %s: the log "
		"cannot be read whole, so the tier does not open (nothing was changed)",
		n, len, off, strerror(err));
	return -err;
}

/* Where a segment's walk stopped short of its end, and what lies past that point in the
 * segment (look_past); judged by judge_stops. */
struct rstop {
	uint64_t off;  /* the block the walk stopped at; 0: it did not stop short */
	uint64_t prev; /* the sequence number of the record before it in the segment; 0: none */
	bool rec;      /* the block is a record of this segment, generation and offset whose
			* length or CRC fails: torn or damaged, not the end of what was written */
	uint32_t nahead;	  /* valid records of the generation past it, in a chain */
	bool unordered;		  /* one of them says NV_LOG_REC_UNORDERED */
	uint64_t newest;	  /* the highest sequence number of them */
	uint64_t at[NV_LOG_BUFS]; /* the offsets of the first NV_LOG_BUFS of them */
};

/* The walk of segment n stopped at off, whose block blk holds, short of the segment's end:
 * is that the end of what was written (a batch never written or torn by a crash) or a
 * record damaged in the middle (a flipped bit), with batches after it? A damaged record's
 * successor starts at most one batch (NV_LOG_BUF) past it, so those bytes are read (one
 * read, only where stop_suspect says so) for a valid record of the segment's
 * generation, and the records from there are followed as the walk does. blk is
 * NV_LOG_BUF bytes. A read that fails fails the open, as the walk's own do: taken for
 * "nothing past the stop" (briefly, on 2026-12-04), a read-write open then zeroed the
 * damaged record and served the objects before it, removed keys among them, and the next
 * open without the error voided the log (found by review). */
static int look_past(struct nv *s, const struct nv_seg *g, uint32_t n, uint8_t *blk, uint64_t off,
		     struct rstop *st)
{
	const struct nv_log_rec *r = (const struct nv_log_rec *)blk;
	st->rec = !memcmp(r->magic, NV_LOG_REC_MAGIC, sizeof(r->magic)) && r->seg == n &&
		  r->gen == g->gen && r->off == off;
	uint64_t from = off + NV_LOG_BLOCK, at = 0;
	if (from + NV_LOG_BLOCK > g->bytes)
		return 0;
	uint64_t span =
	    KVT_MIN((uint64_t)NV_LOG_BUF, (g->bytes - from) / NV_LOG_BLOCK * NV_LOG_BLOCK);
	ssize_t got = seg_pread(s, g, n, blk, span, from);
	for (ssize_t i = 0; !at && i + NV_LOG_BLOCK <= got; i += NV_LOG_BLOCK)
		if (rec_ok(blk + i, n, g->gen, from + (uint64_t)i, g->bytes))
			at = from + (uint64_t)i;
	/* the chain from there, each record newer than the one before (the stop's
	 * predecessor first): what a writer appended, not a block that only checks */
	uint64_t last = st->prev;
	while (at && at + NV_LOG_BLOCK <= g->bytes &&
	       (got = seg_pread(s, g, n, blk, NV_LOG_BLOCK, at)) == NV_LOG_BLOCK &&
	       rec_ok(blk, n, g->gen, at, g->bytes) && r->seq > last) {
		if (st->nahead < NV_LOG_BUFS)
			st->at[st->nahead] = at;
		st->nahead++;
		st->unordered |= (r->flags & NV_LOG_REC_UNORDERED) != 0;
		st->newest = last = r->seq;
		at += r->len;
	}
	return got < 0 ? (int)got : 0;
}

/* Is a walk's stop at off (its block blk, not a valid record) worth a look past it
 * (look_past, one read of up to a batch)? Yes where the block resembles a record of this
 * segment's lap - its magic, or its segment, generation and offset, which one flipped bit
 * leaves; and where a segment with a batch in it stops with room for another whole batch
 * (a zeroed or
 * garbled record: the writer moves on to the next segment only when a batch does not fit,
 * or when a run starts, once per run). Not otherwise: a segment sealed full, or holding
 * no batch (every segment of a voided log), ends in zeros or an earlier lap's bytes, and
 * reading a batch past each would cost an open up to NV_LOG_BUF per segment. Never where
 * the block is an intact record of another lap (its CRC checks, so no bit flipped): the
 * end of this lap's writes. That comes first: with nvme.fsync=none a power cut can keep
 * a new lap's records and lose its segment header, so the old lap is walked up to the
 * new lap's first surviving record, and the old lap's records past that (a chain of
 * batches) voided a healthy log until 2026-12-04. */
static bool stop_suspect(const uint8_t *blk, uint32_t n, uint64_t gen, uint64_t off,
			 uint64_t bytes)
{
	const struct nv_log_rec *r = (const struct nv_log_rec *)blk;
	bool magic = !memcmp(r->magic, NV_LOG_REC_MAGIC, sizeof(r->magic));
	if (magic && r->crc == nv_log_crc(blk) && (r->seg != n || r->gen != gen))
		return false; /* another lap's, written whole by a writer: no flipped bit */
	if (off > NV_LOG_BLOCK && bytes - off >= NV_LOG_BUF)
		return true;
	return magic || (r->seg == n && r->gen == gen && r->off == off);
}

/* Is blk a whole header of segment n? */
bool nv_log_seghdr_ok(const uint8_t *blk, uint32_t n)
{
	const struct nv_log_seghdr *h = (const struct nv_log_seghdr *)blk;
	return !memcmp(h->magic, NV_LOG_SEG_MAGIC, sizeof(h->magic)) && h->seg == n &&
	       h->crc == nv_log_crc(blk);
}

/* Does segment n's header still say g->gen (blk: a block to read it into)? 1 yes, 0 no,
 * or a read error (the open fails, as for any read of the log that fails). */
static int same_lap(struct nv *s, const struct nv_seg *g, uint32_t n, uint8_t *blk)
{
	const struct nv_log_seghdr *h = (const struct nv_log_seghdr *)blk;
	ssize_t got = seg_pread(s, g, n, blk, NV_LOG_BLOCK, 0);
	if (got < 0)
		return (int)got;
	return got == NV_LOG_BLOCK && nv_log_seghdr_ok(blk, n) && h->gen == g->gen;
}

/* The block at a walk's stop is an intact record of segment n with a generation above
 * gen: a newer lap whose header a power cut lost (written before 2026-12-04 with
 * nvme.fsync=none, when headers were not synced in that mode). Its generation is taken
 * as the segment's: the next reuse then writes a generation above it, so that none of
 * that lap's records can ever check again (they carry sequence numbers this open never
 * saw), and a log/head naming that lap does not count as a lost segment. Not seen: a
 * newer lap whose record at the stop was lost too (a later void or reuse writes above a
 * generation log/head names, nv_log_open_writes, but not above one nothing names). */
static uint64_t newer_lap(const uint8_t *blk, uint32_t n, uint64_t gen, uint64_t off,
			  uint64_t bytes)
{
	const struct nv_log_rec *r = (const struct nv_log_rec *)blk;
	/* a whole record of this segment and offset (an object's bytes that happen to carry
	 * the magic do not pass), with a generation no run could have wrapped */
	bool ok = r->gen > gen && r->gen < NV_LOG_GEN_MAX && rec_ok(blk, n, r->gen, off, bytes);
	return ok ? r->gen : 0;
}

/* Segment n's header block is whole but does not check (torn by a power cut while a reuse
 * wrote it, or damaged since): nothing of it is walked, and what follows it decides. An
 * intact record of this segment at the first batch's place (any generation: the lap that
 * last wrote batches) says it held batches - their tombstones are lost with the header,
 * and the log is voided (nv_log_recover, badhdr) unless it is the oldest segment
 * (oldest_seg: its objects are dropped, nothing else), where until 2026-12-05 the segment was
 * taken for empty without a word and a removed key came back (integ.nvme_log_header).
 * Either way its generation is raised above what its records carry (that record's here,
 * every segment's in nv_log_recover), so that the generation its next header gets can
 * never make an old lap's records check again: from 0, a reuse wrote generation 1, and
 * the first lap's leftover records were valid again. A read-only open (no lock) reads the
 * header once more first: a writer may have been writing it. */
/* Segment n (g), too short to hold a record, was cut from outside. A segment file is created
 * empty and given its whole size at once (fallocate), so only the newest segment file can
 * be this short honestly: 0 bytes, its creation killed before the fallocate. Any other was
 * cut, and the removals it held are lost: voided as a cut (until 2026-12-06 it passed for a
 * segment that never held a batch, and keys it had removed came back from older segments;
 * found by review). Its hdr_bytes stays 0: the reports say "too short for its header". A
 * crash inside short_seg_renew, between its truncate and its fallocate, also leaves a short
 * file in the cycle (one already cut, its objects drained): voided too, which costs the
 * log's objects, never a removed key. */
static bool short_seg_cut(struct nv *s, const struct nv_seg *g, uint32_t n)
{
	bool newest = true;
	for (uint32_t i = n + 1; i < s->lg->nsegs && newest; i++) {
		char later[32];
		struct stat st;
		nv_log_seg_name(i, later, sizeof(later));
		newest = s->lg->segs[i].fd < 0 &&
			 fstatat(s->lg->dfd, later, &st, AT_SYMLINK_NOFOLLOW) != 0;
	}
	return !(newest && g->bytes == 0);
}

static int walk_bad_header(struct nv *s, struct nv_seg *g, uint32_t n, uint8_t *blk)
{
	ssize_t got;
	if (s->ro) {
		usleep(10000);
		if ((got = seg_pread(s, g, n, blk, NV_LOG_BLOCK, 0)) < 0)
			return (int)got;
		if (got == NV_LOG_BLOCK && nv_log_seghdr_ok(blk, n))
			return 1; /* it checks now: walk it */
	}
	g->hdr_bad = true;
	if (g->bytes < 2 * NV_LOG_BLOCK) {
		g->cut = short_seg_cut(s, g, n); /* no room for a record */
		return 0;
	}
	if ((got = seg_pread(s, g, n, blk, NV_LOG_BLOCK, NV_LOG_BLOCK)) < 0)
		return (int)got;
	uint64_t rg = got == NV_LOG_BLOCK ? newer_lap(blk, n, 0, NV_LOG_BLOCK, g->bytes) : 0;
	if (rg) {
		g->hdr_batches = true;
		g->gen = KVT_MAX(g->gen, rg);
	}
	return 0;
}

/* The segment the cycle reuses next after the one log/head names (hd): the oldest of the
 * log, whose batches precede every other segment's. Its removals can undo no put of
 * another segment, so a header of it that does not check loses only its own objects -
 * and that is the state a power cut leaves while a reuse writes its header (nv_log_advance: the
 * segment's objects drained, then its header, then log/head), which until 2026-12-06
 * voided the whole log. The cycle goes on after hd's segment into the next file, or
 * wraps to 0 where there is none (a next file not yet created would get a new header
 * of its own). NV_LOG_NONE without a head, or where the head's segment is itself in
 * doubt (missing, of another generation than the head says, or its header not
 * checking): the log is voided as before. */
static uint32_t oldest_seg(const struct nv_log *lg, const struct nv_log_head *hd, uint32_t top)
{
	if (!hd || hd->seg == NV_LOG_NONE || hd->seg >= top)
		return NV_LOG_NONE;
	const struct nv_seg *h = &lg->segs[hd->seg];
	if (h->hdr_bad || h->gen != hd->gen) /* above it: a head a power cut left stale */
		return NV_LOG_NONE;
	uint32_t n = hd->seg + 1 < top ? hd->seg + 1 : 0;
	return n == hd->seg ? NV_LOG_NONE : n;
}

/* Walk segment n's records (g: its file) into *bs; *ver (if not NULL) is raised to its
 * header's version. st (if not NULL): where the walk stopped short, and what is past it
 * (look_past). */
static int walk(struct nv *s, struct nv_seg *g, uint32_t n, uint8_t *blk, struct rbatch **bs,
		size_t *nb, size_t *cap, uint32_t *ver, struct rstop *st)
{
	ssize_t got = seg_pread(s, g, n, blk, NV_LOG_BLOCK, 0);
	if (got < 0)
		return (int)got;
	if (got != NV_LOG_BLOCK) { /* empty: used from generation 1, unless it was cut */
		g->cut = short_seg_cut(s, g, n);
		return 0;
	}
	struct nv_log_seghdr *h = (struct nv_log_seghdr *)blk;
	if (!nv_log_seghdr_ok(blk, n)) {
		int rc = walk_bad_header(s, g, n, blk);
		if (rc <= 0)
			return rc;
	}
	g->hdr_bad = g->hdr_batches = g->cut = false;
	g->gen = g->hdr_gen = h->gen;
	g->hdr_bytes = h->bytes;
	if (ver)
		*ver = KVT_MAX(*ver, h->ver);
	uint64_t off = NV_LOG_BLOCK, prev = 0, rechecked = 0;
	bool shrank = false, runs_past = false;
	while (off + NV_LOG_BLOCK <= g->bytes) {
		if ((got = seg_pread(s, g, n, blk, NV_LOG_BLOCK, off)) < 0)
			return (int)got;
		if (got != NV_LOG_BLOCK) {
			shrank = true; /* the file's end: it shrank since it was opened */
			break;
		}
		struct nv_log_rec *r = (struct nv_log_rec *)blk;
		if (!rec_ok(blk, n, g->gen, off, g->bytes)) {
			/* a whole record whose batch runs past the file's end */
			runs_past = rec_ok(blk, n, g->gen, off, UINT64_MAX);
			uint64_t newer = newer_lap(blk, n, g->gen, off, g->bytes);
			if (newer) {
				g->gen = newer;
				break;
			}
			if (!st || rechecked == off)
				break;
			*st = (struct rstop){.off = off, .prev = prev};
			if (!stop_suspect(blk, n, g->gen, off, g->bytes))
				break;
			int rc = look_past(s, g, n, blk, off, st);
			if (rc < 0)
				return rc;
			/* A writer running meanwhile (a read-only open takes no lock) may have
			 * landed this record since: then it was a write in flight, and the walk
			 * goes on. */
			rechecked = off;
			/* A read-only open (it takes no lock) racing a writer that reused
			 * the segment (a new header and generation) saw two laps: what it
			 * found says nothing. A read-write open holds the lock: no writer. */
			if (s->ro && (st->rec || st->nahead) && (rc = same_lap(s, g, n, blk)) <= 0) {
				if (rc < 0)
					return rc;
				*st = (struct rstop){0};
				break;
			}
			if ((st->rec || st->nahead) &&
			    (got = seg_pread(s, g, n, blk, NV_LOG_BLOCK, off)) == NV_LOG_BLOCK &&
			    rec_ok(blk, n, g->gen, off, g->bytes)) {
				*st = (struct rstop){0};
				continue;
			}
			if (got < 0)
				return (int)got;
			break;
		}
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
		prev = r->seq;
		off += r->len;
	}
	/* Its records ran into the file's end, and the header says the file was longer:
	 * it was cut from outside since (a segment's size only grows, at a reuse, before
	 * its header is written), and what lay past the cut - batches, the removals in them
	 * - is lost. Until 2026-12-06 that passed for a full segment's end, silently, and a
	 * key removed past the cut came back from an older segment. A walk that stopped at
	 * a block that is no record ended before the cut: nothing was lost. */
	g->cut = g->hdr_bytes > g->bytes && (shrank || runs_past || off + NV_LOG_BLOCK > g->bytes);
	return 0;
}

/* Raise *seq to the newest batch of g (file n, not indexed this run), and set g->gen from
 * its header: the run numbers its batches above every batch left on disk, so that one
 * neither voided nor removed (a header or an unlink that failed) never orders after the
 * run's. *had (if not NULL): it holds a batch. */
static int newest_seq(struct nv *s, struct nv_seg *g, uint32_t n, uint8_t *blk, uint64_t *seq,
		      bool *had)
{
	struct rbatch *bs = NULL;
	size_t nb = 0, cap = 0;
	int rc = walk(s, g, n, blk, &bs, &nb, &cap, NULL, NULL);
	if (had)
		*had = nb > 0;
	for (size_t i = 0; i < nb; i++) {
		*seq = KVT_MAX(*seq, bs[i].seq);
		kvt__free(bs[i].ent);
	}
	kvt__free(bs);
	return rc;
}

/* The same for file n, not in the cycle (past a number it does not reach, or past a file
 * that cannot be a segment). */
static int past_gap_seq(struct nv *s, uint32_t n, uint8_t *blk, uint64_t *seq, bool *had)
{
	char name[32];
	nv_log_seg_name(n, name, sizeof(name));
	int fd = nv_openat_look(s, s->lg->dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0);
	if (fd < 0) /* not a file that can become a segment, or the open fails */
		return seg_open_failed(s, n, -errno);
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		struct nv_seg g = {.fd = fd, .bytes = (uint64_t)st.st_size};
		rc = newest_seq(s, &g, n, blk, seq, had);
	}
	close(fd);
	return rc;
}

/* log/head's newer valid slot into *h: 1; 0: no head (no file, an entry that cannot be one,
 * or no valid slot); or -errno: log/head is there but cannot be read (EACCES, EPERM,
 * EMFILE, EIO, ...; EINVAL: a FIFO, a device or a directory), which fails the open, with
 * one line, before anything is written - as a segment that fails to open does
 * (seg_open_failed).
 * Until 2026-12-03 any failure was "no head": with the segments' headers saying the log
 * has one, the head was taken for deleted and the log voided - a read-write open emptied
 * every segment, and the live objects were gone for good though nothing on disk was
 * (integ.nvme_log_head_unreadable).
 * Its file is kept open for the run's writes (not in a read-only open). Read before the
 * segments are listed: a writer running meanwhile (a read-only open takes no lock) only
 * adds segments and raises generations, which the check allows. */
static int read_head(struct nv *s, struct nv_log_head *h)
{
	struct nv_log *lg = s->lg;
	_Alignas(uint64_t) uint8_t blk[NV_LOG_BLOCK];
	int fl = (s->ro ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
	lg->hfd = nv_openat_look(s, lg->dfd, NV_LOG_HEAD, fl, 0);
	int err = 0;
	if (lg->hfd < 0 && errno != ENOENT && errno != ELOOP && errno != EISDIR && errno != ENXIO)
		err = -errno;
	/* A FIFO or a device opens (O_NONBLOCK: no hang) but cannot be read as a head: the
	 * open fails as for an unreadable head (taken for "no head", a log with version-2
	 * headers would be voided for good over an entry planted from outside), with a line
	 * that says why - until 2026-12-04 the "Illegal seek" of its pread. So does a
	 * directory: a read-only open opens it (and finds it no regular file), a read-write one
	 * gets EISDIR - until 2026-12-04 taken for "no head", which voided the log. */
	struct stat hst;
	bool dir = lg->hfd < 0 && errno == EISDIR;
	if (dir || (lg->hfd >= 0 && fstat(lg->hfd, &hst) == 0 && !S_ISREG(hst.st_mode))) {
		KVT_ERR(s->log,
			"nvme: %s/%s/%s: not a regular file: the log cannot be read whole, so the "
			"tier does not open (nothing was changed)",
			s->dirs[0].path, NV_LOG_DIR, NV_LOG_HEAD);
		if (lg->hfd >= 0)
			close(lg->hfd);
		lg->hfd = -1;
		return -EINVAL;
	}
	lg->ow.head_there = lg->hfd >= 0; /* (kept only if the log turns out headless) */
	bool ok = false;
	for (int i = 0; lg->hfd >= 0 && i < 2; i++) {
		ssize_t got = pread(lg->hfd, blk, NV_LOG_BLOCK, (off_t)i * NV_LOG_BLOCK);
		if (got < 0)
			err = -errno;
		if (got != NV_LOG_BLOCK)
			break; /* short: a slot never written (the file's creation cut) */
		const struct nv_log_head *x = (const struct nv_log_head *)blk;
		if (memcmp(x->magic, NV_LOG_HEAD_MAGIC, sizeof(x->magic)) ||
		    x->crc != nv_log_crc(blk) || (ok && x->count <= h->count))
			continue;
		*h = *x;
		ok = true;
	}
	if (err < 0) {
		KVT_ERR(s->log,
			"nvme: log/head: %s: the log cannot be read whole, so the tier does not "
			"open (nothing was changed)",
			strerror(-err));
		return err;
	}
	if (ok)
		lg->hcount = h->count;
	if (s->ro && lg->hfd >= 0) {
		close(lg->hfd);
		lg->hfd = -1;
	}
	return ok;
}

/* Entry idx of the record at (seg, off) to be rewritten as NV_LOG_VOID by the open's
 * writes (nv_log_open_writes). */
static int void_add(struct nv_log *lg, uint32_t seg, uint64_t off, uint64_t seq, uint32_t idx)
{
	typeof(lg->ow) *w = &lg->ow;
	if (w->nvent == w->vent_cap) {
		uint32_t nc = w->vent_cap ? 2 * w->vent_cap : 8;
		struct nv_log_void *x = kvt__realloc(w->vent, nc * sizeof(*x));
		if (!x)
			return -ENOMEM;
		w->vent = x;
		w->vent_cap = nc;
	}
	w->vent[w->nvent++] = (struct nv_log_void){.seg = seg, .idx = idx, .off = off, .seq = seq};
	return 0;
}

/* Read back and verify every object batch b lists: 1 whole, 0 not (an object runs past
 * the segment file's end), or -errno where a read fails (seg_pread: a failed read is no
 * torn batch, whose records would be zeroed). An object that reads in full but does not
 * match its entry's CRC is voided alone (its entry's type set to NV_LOG_VOID here, and on
 * disk by the open's writes; *voided counted), not its batch: its record checked, so the
 * batch's other objects and removals are what was written, each object checked by its own
 * CRC. Until 2026-12-08 the batch was dropped with every later batch of its segment, and a
 * late zero-copy write whose caller had changed its buffer (allowed once the put's
 * deadline answered it) took other keys' acknowledged objects with it at the next open. */
static int batch_whole(struct nv *s, struct rbatch *b, uint8_t *buf, uint64_t *voided)
{
	struct nv_seg *g = &s->lg->segs[b->seg];
	/* a batch dropped after all leaves no void behind (its record is zeroed instead) */
	uint32_t nvent0 = s->lg->ow.nvent;
	uint64_t voided0 = *voided;
	for (uint32_t i = 0; i < b->n; i++) {
		struct nv_log_rent *en = &b->ent[i];
		if (en->type != NV_LOG_PUT)
			continue;
		if (!ent_ok(g, en))
			continue; /* damaged, not torn: apply skips it and says so */
		uint64_t len = KVT_ALIGN_UP(en->len, NV_LOG_BLOCK);
		ssize_t got = seg_pread(s, g, b->seg, buf, len, en->off);
		if (got < 0)
			return (int)got;
		if (got != (ssize_t)len) {
			s->lg->ow.nvent = nvent0;
			*voided = voided0;
			return 0;
		}
		if (kvt__crc32c(0, buf, en->len) != en->crc) {
			en->type = NV_LOG_VOID; /* apply() passes it over */
			(*voided)++;
			if (!s->ro) {
				int rc = void_add(s->lg, b->seg, b->off, b->seq, i);
				if (rc < 0)
					return rc;
			}
		}
	}
	return 1;
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
			nv_ent_set_lseg(s, e, b->seg + 1);
			e->loff = en->off;
		}
	}
}

/* Record (seg, off) to be zeroed by the open's writes (nv_log_open_writes). */
static int wipe_add(struct nv_log *lg, uint32_t seg, uint64_t off)
{
	typeof(lg->ow) *w = &lg->ow;
	if (off < NV_LOG_BLOCK)
		return -EINVAL; /* never a segment's header: only records past a stop */
	if (w->nwipe == w->wipe_cap) {
		uint32_t nc = w->wipe_cap ? 2 * w->wipe_cap : 2 * NV_LOG_BUFS;
		struct nv_log_at *x = kvt__realloc(w->wipe, nc * sizeof(*x));
		if (!x)
			return -ENOMEM;
		w->wipe = x;
		w->wipe_cap = nc;
	}
	w->wipe[w->nwipe++] = (struct nv_log_at){seg, off};
	return 0;
}

/* Judge where the walks of segments 0 .. nst-1 stopped short (look_past), each by what
 * lies past its stop in its own segment. Batches are acknowledged in sequence order, a
 * staging buffer is reused only once its batch is acknowledged, and at most NV_LOG_BUFS
 * are unacknowledged at once; a run appends to a segment only while every batch before
 * in it was written (a failed batch moves appends on), and a new run starts in the next
 * segment. So a crash, or a batch that failed, leaves at most NV_LOG_BUFS - 1 valid
 * records past a stop in its segment and generation, and none is ever added after them.
 * NV_LOG_BUFS or more there is damage, not a torn tail: the batch at the stop was
 * acknowledged, and its tombstones with it, which any older put may need - the log is
 * voided, as for a gap. Until 2026-12-04 every stop was taken for a torn tail: one
 * flipped bit in a record mid-segment dropped the batches after it silently, tombstones
 * with them, and a removed key came back. Only the segment's own records count: batches
 * of later runs elsewhere say nothing about this stop (counting them voided a healthy log
 * one run after a power cut left two holes among the batches in flight, and the first
 * open of a store an older build had run after a crash). Returns the damaged segment (its
 * stop's offset and the records past it in *dmg), or NV_LOG_NONE. A torn stop's record
 * and the records found past it are zeroed by a read-write open (so that nothing past a
 * torn tail is found again), and the run numbers its batches above them. Not told apart:
 * damage with fewer than NV_LOG_BUFS records after it in its segment, and damage whose
 * successor lies more than a batch past it (two damaged records in a row): taken for a
 * torn tail, as before; and any stop in a segment a run with nvme.fsync=none wrote
 * (NV_LOG_REC_UNORDERED): its batches were acknowledged once in the device's cache, so
 * a power cut may keep later ones without the one at the stop, and losing the batches
 * past that hole (unflushed, in that mode) is what it promises, where voiding the log
 * would lose what a flush had made durable. */
static uint32_t judge_stops(struct nv_log *lg, const struct rstop *st, uint32_t nst,
			    uint64_t dmg[2], int *rc)
{
	for (uint32_t i = 0; i < nst; i++) {
		const struct rstop *x = &st[i];
		if (!x->off || (!x->rec && !x->nahead))
			continue; /* the end of what was written (or the segment's end) */
		if (x->nahead >= NV_LOG_BUFS && !x->unordered) {
			dmg[0] = x->off;
			dmg[1] = x->nahead;
			return i;
		}
		lg->seq = KVT_MAX(lg->seq, x->newest);
		if (x->rec && (*rc = wipe_add(lg, i, x->off)) < 0)
			return NV_LOG_NONE;
		/* at[] holds only the first NV_LOG_BUFS (more get here only from an unordered
		 * segment, never voided); the rest stay, never applied (the walk ends at the
		 * stop) and dead once the segment is reused. Reading past at[] zeroed whatever
		 * offsets followed it in memory, the segment's header among them, until
		 * 2026-12-04. */
		for (uint32_t k = 0; k < KVT_MIN(x->nahead, (uint32_t)NV_LOG_BUFS); k++)
			if ((*rc = wipe_add(lg, i, x->at[k])) < 0)
				return NV_LOG_NONE;
	}
	return NV_LOG_NONE;
}

/* A voided log as an entry `kvtier verify` reports (scan_anomalies), so that it counts as
 * damage there (exit 3), not only as a warning in the log: every object the log held is
 * lost to the store. Until 2026-12-04 verify said "0 bad" and exited 0. The first reason
 * is named; the open's log lines give each (nv_log_open_writes). */
static int void_anomaly(struct nv *s)
{
	typeof(s->lg->ow) *w = &s->lg->ow;
	char name[32], why[256];
	int n;
	if (w->gap) {
		nv_log_seg_name(w->top, name, sizeof(name));
		n = snprintf(why, sizeof(why), "missing, with segments after it (a gap)");
	} else if (w->outside) {
		nv_log_seg_name(w->out_first, name, sizeof(name));
		n = snprintf(why, sizeof(why),
			     "holds batches but is outside the cycle (a file before it is missing "
			     "or not a segment)");
	} else if (w->lost) {
		nv_log_seg_name(w->hd_seg, name, sizeof(name));
		n = snprintf(why, sizeof(why),
			     "the newest segment by log/head is missing or older");
	} else if (w->headless) {
		snprintf(name, sizeof(name), "%s", NV_LOG_HEAD);
		n = snprintf(why, sizeof(why), "%s, and the segments were written with one",
			     w->head_there ? "damaged (it does not check)" : "missing");
	} else if (w->cut && !s->lg->segs[w->cut_seg].hdr_bytes) {
		nv_log_seg_name(w->cut_seg, name, sizeof(name));
		n = snprintf(why, sizeof(why),
			     "%" PRIu64 " bytes, too short for its header (cut from outside)",
			     s->lg->segs[w->cut_seg].bytes);
	} else if (w->cut) {
		nv_log_seg_name(w->cut_seg, name, sizeof(name));
		n = snprintf(why, sizeof(why),
			     "%" PRIu64 " bytes, its header says %" PRIu64 " (cut from outside)",
			     s->lg->segs[w->cut_seg].bytes, s->lg->segs[w->cut_seg].hdr_bytes);
	} else if (w->badhdr) {
		nv_log_seg_name(w->badhdr_seg, name, sizeof(name));
		n = snprintf(why, sizeof(why),
			     "its header does not check and it holds batches (torn or damaged)");
	} else {
		nv_log_seg_name(w->dmg_seg, name, sizeof(name));
		n = snprintf(why, sizeof(why),
			     "commit record at offset %" PRIu64 " damaged, %" PRIu64
			     " newer batches after it in its segment (not a torn tail)",
			     w->dmg_off, w->dmg_newer);
	}
	snprintf(why + n, sizeof(why) - (size_t)n,
		 ": the log is voided, none of its objects is indexed");
	return nv_anomaly_add(s, s->dirs[0].path, NV_LOG_DIR, name, why);
}

int nv_log_recover(struct nv *s)
{
	struct nv_log *lg = s->lg;
	if (!lg)
		return 0;
	lg->ow.oldest_cut = NV_LOG_NONE;
	struct nv_log_head hd = {0};
	int hrc = read_head(s, &hd); /* before the segments are listed: read_head */
	if (hrc < 0)
		return hrc;
	bool have_head = hrc > 0;
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
	/* One that cannot be a segment (a directory, a symlink: seg_open_failed) cannot be
	 * created either: the cycle ends before it. One that fails to open for another reason
	 * fails the open. */
	uint32_t k = 0;
	int rc = 0;
	for (; k < m; k++)
		if ((rc = nv_log_seg_open(s, ns[k], false)) < 0) {
			int err = rc;
			if ((rc = seg_open_failed(s, ns[k], err)) < 0) {
				kvt__free(ns);
				return rc;
			}
			KVT_WARN(s->log, "nvme: log segment %u.kvl: %s: not used, nor any after it",
				 ns[k], strerror(-err));
			end = ns[k++];
			break;
		}
	if (k < nn)
		KVT_WARN(s->log,
			 "nvme: log: %zu file(s) from %u.kvl on are not in the log's cycle: not "
			 "indexed",
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
	/* Files outside the cycle (past a number it does not reach, or past an entry that
	 * cannot be a segment) are neither indexed nor reused. One that holds batches was a
	 * segment of an earlier, longer cycle with a number before it now missing (deleted,
	 * or not a file): a gap that a larger nvme.bytes would have seen. Its tombstones and
	 * newer puts are as needed as a missing segment's, so it voids the log too; until
	 * 2026-12-03 the segments of the cycle were indexed without them, and a key removed or
	 * replaced there came back as its older copy (integ.nvme_log_outside). A read-write
	 * open then removes it, once the cycle is voided (left, it would void every later
	 * open, and it takes space the cycle does not count). Others (no batch: strays,
	 * voided files) are left alone. */
	uint32_t outside = 0, out_first = 0;
	for (uint32_t i = k; i < nn && !rc; i++) {
		bool had = false;
		rc = past_gap_seq(s, ns[i], blk, &lg->seq, &had);
		if (had && !outside++)
			out_first = ns[i];
		if (!had)
			ns[i] = NV_LOG_NONE; /* not removed below */
	}
	if (rc) { /* nothing written yet */
		kvt__free(ns);
		kvt__free_aligned(blk, NV_LOG_BUF);
		return rc;
	}
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
	/* The newest segment is usually the highest-numbered file (a log not yet wrapped, or a
	 * lap ending at the last segment): deleted, it leaves no gap, and the files left look
	 * like a whole log one segment shorter - until 2026-12-03 indexed as such, so a key
	 * removed or replaced in the deleted segment came back as its older copy
	 * (integ.nvme_log_newest). log/head names the segment appended to, made durable after
	 * its header and before anything in it is acknowledged (nv_log_advance): if that segment is
	 * not among those indexed with at least that generation, the newest segment (and the
	 * tombstones in it) is gone, and the log is voided as for a gap. With no log/head, a
	 * segment header of NV_LOG_SEG_VER says the head was deleted (a log gets its head at
	 * the first read-write open, before any such header, or right after a void's - a
	 * crash between voids again): that voids the log too. A log written before log/head
	 * existed has version-0 headers and is indexed as before. */
	bool lost = false, headless = false;
	if (have_head)
		lg->seq = KVT_MAX(lg->seq, hd.seq);
	uint32_t ver = 0, dseg = NV_LOG_NONE, badhdr_seg = NV_LOG_NONE, cut_seg = NV_LOG_NONE;
	uint64_t dmg[2] = {0, 0};
	struct rstop *st = NULL;
	if (!gap && !outside && top && !(st = kvt__calloc(top, sizeof(*st))))
		rc = -ENOMEM;
	if (!gap && !outside && !rc) {
		for (uint32_t i = 0; i < top && !rc; i++)
			rc = walk(s, &lg->segs[i], i, blk, &bs, &nb, &cap, &ver, &st[i]);
		if (!rc)
			dseg = judge_stops(lg, st, top, dmg, &rc);
		uint32_t oldest = oldest_seg(lg, have_head ? &hd : NULL, top);
		for (uint32_t i = 0; i < top && badhdr_seg == NV_LOG_NONE; i++)
			if (lg->segs[i].hdr_batches && i != oldest)
				badhdr_seg = i;
		for (uint32_t i = 0; i < top && cut_seg == NV_LOG_NONE; i++)
			if (lg->segs[i].cut && i != oldest)
				cut_seg = i;
		if (oldest != NV_LOG_NONE && lg->segs[oldest].hdr_batches)
			lg->ow.oldest_cut = oldest;
		if (have_head)
			lost = hd.seg != NV_LOG_NONE &&
			       (hd.seg >= top || lg->segs[hd.seg].gen < hd.gen);
		else
			headless = ver >= NV_LOG_SEG_VER;
		if (lost || headless || dseg != NV_LOG_NONE || badhdr_seg != NV_LOG_NONE ||
		    cut_seg != NV_LOG_NONE) {
			for (size_t i = 0; i < nb; i++)
				kvt__free(bs[i].ent);
			nb = 0;
		}
	}
	kvt__free(st);
	bool damaged = dseg != NV_LOG_NONE, badhdr = badhdr_seg != NV_LOG_NONE;
	bool cut = cut_seg != NV_LOG_NONE;
	bool voids = gap || outside || lost || headless || damaged || badhdr || cut;
	if (voids)
		lg->ow.nwipe = lg->ow.nvent = 0; /* every segment gets a new generation: nothing
						    * to zero or void */
	/* Every segment of the cycle is voided (nv_log_open_writes): read for its generation
	 * and its newest batch now. */
	for (uint32_t i = 0; voids && i < end && !rc; i++)
		if (lg->segs[i].fd >= 0)
			rc = newest_seq(s, &lg->segs[i], i, blk, &lg->seq, NULL);
	if (voids)
		lg->start = top; /* the first batch recreates a missing one: the gap closes */
	/* A segment whose header did not check: above every generation the log has used
	 * (walk_bad_header). Segments are reused in cycle order, so a lap's records are never
	 * more than a generation or so above the other segments' headers. */
	uint64_t maxgen = 0;
	for (uint32_t i = 0; i < end; i++)
		maxgen = KVT_MAX(maxgen, lg->segs[i].gen);
	for (uint32_t i = 0; i < end; i++) /* saturated: a crafted 2^64-1 must not wrap */
		if (lg->segs[i].hdr_bad)
			lg->segs[i].gen = maxgen >= NV_LOG_GEN_MAX ? NV_LOG_GEN_MAX : maxgen + 1;
	uint64_t torn = 0, objs = 0, bad = 0, voided = 0;
	if (!rc && nb) {
		qsort(bs, nb, sizeof(*bs), cmp_seq);
		lg->seq = KVT_MAX(lg->seq, bs[nb - 1].seq);
		lg->start = bs[nb - 1].seg + 1;
		/* The newest batches may be incomplete: check every object they list. */
		for (size_t i = nb > NV_LOG_BUFS ? nb - NV_LOG_BUFS : 0; i < nb && !rc; i++) {
			int whole = bs[i].cut ? 1 : batch_whole(s, &bs[i], blk, &voided);
			if (whole < 0) {
				rc = whole;
				break;
			}
			if (whole)
				continue;
			/* This batch and every later one of its segment are dropped; zeroing their
			 * records (nv_log_open_writes) keeps later scans from trusting them. */
			for (size_t j = i; j < nb && !rc; j++)
				if (bs[j].seg == bs[i].seg && bs[j].off >= bs[i].off) {
					bs[j].cut = true;
					rc = wipe_add(lg, bs[j].seg, bs[j].off);
				}
			torn++;
		}
		for (size_t i = 0; i < nb && !rc; i++)
			if (!bs[i].cut)
				apply(s, &bs[i], &bad);
		for (struct nv_ent *e = s->lru_head; e; e = e->next)
			objs += e->lseg != 0;
	}
	/* log/head names a segment whose lap holds no batch yet (the run that moved to it was
	 * stopped, or its first batch failed or was cut, before one landed): the batches go on
	 * in it, under the header it has - not into a new lap of it. Starting after the newest
	 * batch's segment rewrote that same header (nv_log_advance) while log/head still named the
	 * old generation, and a power cut tearing that write made the head's segment look
	 * lost: the whole log voided for a segment that held nothing (until 2026-12-06; a
	 * review's reproducer, integ.nvme_log_header). */
	bool head_empty = !rc && !voids && !s->ro && have_head && hd.seg != NV_LOG_NONE &&
			  hd.seg < top && hd.seg < lg->nmax;
	for (size_t i = 0; head_empty && i < nb; i++)
		head_empty = bs[i].seg != hd.seg;
	if (head_empty) {
		const struct nv_seg *g = &lg->segs[hd.seg];
		if (g->fd >= 0 && !g->hdr_bad && g->gen == hd.gen && g->hdr_gen == hd.gen &&
		    !g->ents && g->bytes >= NV_LOG_BLOCK + NV_LOG_BUF) {
			lg->cur = hd.seg;
			lg->cur_off = NV_LOG_BLOCK;
			lg->have_cur = true;
		}
	}
	/* What to write, once the open cannot fail (nv_log_open_writes). A voided log has
	 * nothing to check (the head named a segment it may not have); a log without a head
	 * (written before it existed) gets one, naming its newest segment. */
	lg->ow.voids = voids;
	lg->ow.gap = gap;
	lg->ow.lost = lost;
	lg->ow.headless = headless;
	lg->ow.head_there = headless && lg->ow.head_there; /* there, but it did not check */
	lg->ow.end = end;
	lg->ow.top = top;
	lg->ow.outside = outside;
	lg->ow.out_first = out_first;
	lg->ow.hd_seg = hd.seg;
	lg->ow.hd_gen = hd.gen;
	lg->ow.damaged = damaged;
	lg->ow.badhdr = badhdr;
	lg->ow.badhdr_seg = badhdr_seg;
	lg->ow.cut = cut;
	lg->ow.cut_seg = cut_seg;
	lg->ow.dmg_seg = dseg;
	lg->ow.dmg_off = dmg[0];
	lg->ow.dmg_newer = dmg[1];
	lg->ow.head = !rc && (voids || !have_head);
	lg->ow.hs = !voids && nb ? bs[nb - 1].seg : NV_LOG_NONE;
	lg->ow.hgen = lg->ow.hs == NV_LOG_NONE ? 0 : lg->segs[lg->ow.hs].gen;
	if (nn > k)
		memmove(ns, ns + k, (nn - k) * sizeof(*ns)); /* those outside the cycle */
	lg->ow.out = ns;
	lg->ow.nout = nn - k;
	for (size_t i = 0; i < nb; i++)
		kvt__free(bs[i].ent);
	kvt__free(bs);
	kvt__free_aligned(blk, NV_LOG_BUF);
	if (!rc && voids)
		rc = void_anomaly(s);
	if (bad)
		KVT_WARN(s->log,
			 "nvme: log: %" PRIu64 " damaged entries skipped (outside their segment, "
			 "misaligned or longer than a batch)",
			 bad);
	if (!rc)
		KVT_INFO(s->log,
			 "nvme: log: %" PRIu64 " batches, %" PRIu64 " objects, %" PRIu64
			 " incomplete batches dropped, %" PRIu64 " objects that did not match "
			 "their CRC voided",
			 (uint64_t)nb, objs, torn, voided);
	return rc;
}

/* The open's writes, decided by nv_log_recover: made by the ring thread once it is set up,
 * when nothing can fail the tier's open any more, so that a failed open (out of file
 * descriptors for the ring, out of memory) changes nothing of the log. Until 2026-12-03
 * they were made during the scan: an open that then failed (io_uring setup: EMFILE) had
 * already voided the log and written log/head. A read-only open writes nothing and says
 * what a read-write one would do. */
void nv_log_open_writes(struct nv *s)
{
	struct nv_log *lg = s->lg;
	if (!lg)
		return;
	typeof(lg->ow) *w = &lg->ow;
	uint32_t voided = 0, removed = 0;
	/* The void: every segment of the cycle a header of its next generation. A segment
	 * whose header cannot be written turns the log off for the run (puts get files), so
	 * the gap stays and the next open voids again. The segment that is the reason (a
	 * damaged record's or header's, the one log/head names as lost) gets its header last:
	 * its new header erases the reason, so a crash (or a failed write) in the middle must
	 * leave it in place for the next open to void again - until 2026-12-05 the headers
	 * went from 0 up, and a crash after the reason's left the segments not yet voided to
	 * be indexed without the tombstones of those voided. */
	enum { NLAST = 4 };
	uint32_t last[NLAST] = {w->damaged ? w->dmg_seg : NV_LOG_NONE,
				w->badhdr ? w->badhdr_seg : NV_LOG_NONE,
				w->lost ? w->hd_seg : NV_LOG_NONE,
				w->cut ? w->cut_seg : NV_LOG_NONE};
	for (uint32_t k = 0; w->voids && !s->ro && k < w->end + NLAST && !lg->broken; k++) {
		bool late = k >= w->end, skip = false;
		uint32_t i = late ? last[k - w->end] : k;
		/* a reason is written in its late turn, once (the first time it is named) */
		for (uint32_t j = 0; j < (late ? k - w->end : NLAST); j++)
			skip |= last[j] == i;
		if (i >= w->end || skip)
			continue;
		struct nv_seg *g = &lg->segs[i];
		if (g->fd < 0)
			continue;
		/* above the generation log/head names too: a lap whose header a power cut
		 * lost (an older build, nvme.fsync=none) must not check again */
		uint64_t gen = KVT_MAX(g->gen, i == w->hd_seg ? w->hd_gen : 0) + 1;
		int rc = nv_log_write_header(s, i, gen);
		if (rc < 0) {
			KVT_WARN(s->log, "nvme: log segment %u.kvl header: %s: log writes stop", i,
				 strerror(-rc));
			nv_log_stop(s);
			break;
		}
		g->gen = gen;
		voided++;
	}
	/* A file outside the cycle that stays (its unlink refused: immutable, a read-only
	 * directory) would void the log again at every open, with every put of this run in
	 * it: the log stops instead, and puts take files (until 2026-12-06 they went to the
	 * log and were lost at the next open; integ.nvme_log_outside (5)). */
	int kept_err = 0;
	for (size_t i = 0; w->outside && i < w->nout && !s->ro && !lg->broken; i++) {
		char name[32];
		nv_log_seg_name(w->out[i], name, sizeof(name));
		if (w->out[i] == NV_LOG_NONE)
			continue;
		if (unlinkat(lg->dfd, name, 0) == 0) {
			removed++;
		} else if (errno != ENOENT && !kept_err) {
			kept_err = errno;
			KVT_WARN(s->log, "nvme: log: %s, outside the cycle, cannot be removed (%s): "
					 "log writes stop",
				 name, strerror(errno));
		}
	}
	if (removed && s->fsync_mode != NV_FSYNC_NONE && fsync(lg->dfd) < 0 && !kept_err) {
		kept_err = errno;
		KVT_WARN(s->log, "nvme: log: removing files outside the cycle: directory fsync: %s: "
				 "log writes stop",
			 strerror(errno));
	}
	if (kept_err && !lg->broken)
		nv_log_stop(s);
	if (removed || w->nwipe)
		nv_dirty_fs(s, 0); /* with fsync=none, a flush's syncfs makes them durable */
	kvt__free(w->out);
	w->out = NULL;
	if (w->gap)
		KVT_WARN(s->log,
			 "nvme: log: %u.kvl is missing (deleted from outside?): nothing of the log "
			 "is indexed, %u segment(s) emptied",
			 w->top, voided);
	if (w->outside)
		KVT_WARN(s->log,
			 "nvme: log: %u.kvl holds batches but is outside the cycle (%u segments; a "
			 "file before it is missing or not a segment): nothing of the log is "
			 "indexed, %u segment(s) emptied, %u file(s) outside it removed",
			 w->out_first, w->end, voided, removed);
	if (w->lost)
		KVT_WARN(s->log,
			 "nvme: log: %u.kvl, the newest segment (generation %" PRIu64
			 " by log/head), is missing or older (deleted or replaced from outside?): "
			 "nothing of the log is indexed, %u segment(s) emptied",
			 w->hd_seg, w->hd_gen, voided);
	if (w->headless)
		KVT_WARN(s->log,
			 "nvme: log: log/head is %s and the segments were written with one: the "
			 "newest segment cannot be checked, nothing of the log is indexed, %u "
			 "segment(s) emptied",
			 w->head_there ? "damaged (it does not check)" : "missing (deleted from outside?)",
			 voided);
	if (w->badhdr)
		KVT_WARN(s->log,
			 "nvme: log: %u.kvl: its header does not check and it holds batches (torn "
			 "or damaged: removals in it are lost): nothing of the log is indexed, %u "
			 "segment(s) emptied",
			 w->badhdr_seg, voided);
	if (w->oldest_cut != NV_LOG_NONE && !w->voids)
		KVT_WARN(s->log,
			 "nvme: log: %u.kvl: its header does not check and it holds batches; it "
			 "is the oldest segment, the next to be reused (a power cut while its "
			 "reuse wrote the header, or damage): its objects are not indexed, the "
			 "rest of the log is",
			 w->oldest_cut);
	if (w->cut && !lg->segs[w->cut_seg].hdr_bytes)
		KVT_WARN(s->log,
			 "nvme: log: %u.kvl is %" PRIu64 " bytes, too short for its header (cut "
			 "from outside?): the removals it held are lost: nothing of the log is "
			 "indexed, %u segment(s) emptied",
			 w->cut_seg, lg->segs[w->cut_seg].bytes, voided);
	else if (w->cut)
		KVT_WARN(s->log,
			 "nvme: log: %u.kvl is %" PRIu64 " bytes, its header says %" PRIu64
			 " (cut from outside?): removals past the cut are lost: nothing of the log "
			 "is indexed, %u segment(s) emptied",
			 w->cut_seg, lg->segs[w->cut_seg].bytes, lg->segs[w->cut_seg].hdr_bytes,
			 voided);
	if (w->damaged)
		KVT_WARN(s->log,
			 "nvme: log: %u.kvl: the commit record at offset %" PRIu64
			 " does not check and %" PRIu64
			 " newer batches follow it in its segment (damage, not a torn tail: removals in its batch "
			 "are lost): nothing of the log is indexed, %u segment(s) emptied",
			 w->dmg_seg, w->dmg_off, w->dmg_newer, voided);
	/* Objects that did not match their CRC (batch_whole): their entries rewritten as
	 * NV_LOG_VOID in their records, so that no later open indexes them once their batch
	 * is no longer among the newest it reads back. Where that fails the log stops, as for
	 * a wipe: appending on would push the record out of the newest batches. */
	uint8_t *rb = w->nvent && !s->ro ? kvt__aligned_alloc(NV_LOG_BLOCK) : NULL;
	for (uint32_t i = 0; i < w->nvent && !s->ro && !lg->broken; i++) {
		const struct nv_log_void *v = &w->vent[i];
		const struct nv_seg *g = &lg->segs[v->seg];
		struct nv_log_rec *r = (struct nv_log_rec *)rb;
		int err = 0;
		if (!rb)
			err = ENOMEM;
		/* The record the scan read: same place and sequence, checked under its own
		 * generation - not g->gen, which a walk that found a newer lap's record at a
		 * stop has raised above that of the records before the stop. */
		else if (pread(g->fd, rb, NV_LOG_BLOCK, (off_t)v->off) != NV_LOG_BLOCK)
			err = errno ? errno : EIO;
		else if (!rec_ok(rb, v->seg, r->gen, v->off, g->bytes) || r->seq != v->seq ||
			 v->idx >= r->n)
			err = EBADMSG;
		else if (r->ent[v->idx].type == NV_LOG_PUT) {
			r->ent[v->idx].type = NV_LOG_VOID;
			r->crc = nv_log_crc(rb);
			if (pwrite(g->fd, rb, NV_LOG_BLOCK, (off_t)v->off) != NV_LOG_BLOCK ||
			    fdatasync(g->fd) < 0)
				err = errno ? errno : EIO;
		}
		if (err) {
			KVT_WARN(s->log, "nvme: log: %u.kvl: cannot void the object that did not "
					 "match its CRC in the batch at offset %" PRIu64 " (%s): log "
					 "writes stop",
				 v->seg, (uint64_t)v->off, strerror(err));
			nv_log_stop(s);
		}
	}
	if (rb)
		kvt__free_aligned(rb, NV_LOG_BLOCK);
	kvt__free(w->vent);
	w->vent = NULL;
	w->nvent = w->vent_cap = 0;
	for (uint32_t i = 0; i < w->nwipe && !s->ro && !lg->broken; i++) {
		int fd = lg->segs[w->wipe[i].seg].fd;
		if (pwrite(fd, lg->zero, NV_LOG_BLOCK, (off_t)w->wipe[i].off) != NV_LOG_BLOCK ||
		    fdatasync(fd) < 0) {
			/* The torn batch's record still checks on disk: appending on would push
			 * it out of the newest batches, which the next open reads back, and it
			 * would be indexed unchecked (until 2026-12-05). Stopped, it stays among
			 * them for the next open to judge again. */
			KVT_WARN(s->log, "nvme: log: %u.kvl: cannot erase the torn batch at offset "
					 "%" PRIu64 " (%s): log writes stop",
				 w->wipe[i].seg, (uint64_t)w->wipe[i].off,
				 strerror(errno ? errno : EIO));
			nv_log_stop(s);
		}
	}
	kvt__free(w->wipe);
	w->wipe = NULL;
	w->nwipe = w->wipe_cap = 0;
	/* The head after the void's headers: a crash between leaves the old head (or none,
	 * with headers that say there was one), and the next open voids again. A log's first
	 * head comes before any header of NV_LOG_SEG_VER is written (the run's first
	 * nv_log_advance). */
	if (w->head && !s->ro && !lg->broken) {
		int rc = nv_log_write_head(s, w->hs, w->hgen);
		if (rc < 0) {
			KVT_WARN(s->log, "nvme: log head: %s: log writes stop", strerror(-rc));
			nv_log_stop(s);
		}
	}
}
