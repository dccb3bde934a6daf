/*
 * tier_nvme_log.h - the on-disk format and the in-memory state of the NVMe tier's
 * small-object log, shared by its writer (tier_nvme_log.c), its segment turns
 * (tier_nvme_log_turn.c), its open-time scan (tier_nvme_log_recover.c) and its
 * reinsertion (tier_nvme_log_reinsert.c) only. Why a log, and its crash-safety argument:
 * docs/NVME_LOG.md.
 *
 * A segment <first dir>/log/<n>.kvl is a 4 KiB header (magic, segment number, generation,
 * format version, CRC32C) followed by batches. A batch is one write: a 4 KiB commit record
 * (magic, segment, generation, sequence number, its own offset and length, its entries,
 * CRC32C) followed by the objects it lists, each 4 KiB-aligned. Entries are puts (key,
 * offset, length, CRC32C of the object's bytes: the tier does not parse objects) and
 * tombstones (key: removed), applied in order. <first dir>/log/head names the segment
 * appended to (the newest started: number, generation, the sequence number before its first
 * batch) in one of two 4 KiB slots written in turn (the one with the higher count holds; a
 * torn write leaves the other), so that the open-time scan can tell the newest segment was
 * deleted. Host byte order: a store is not moved between machines of different endianness.
 */
#ifndef KVT_TIER_NVME_LOG_H
#define KVT_TIER_NVME_LOG_H

#include "tier_nvme_internal.h"

#define NV_LOG_DIR "log"
#define NV_LOG_BUFS 4		 /* staging buffers: batches in flight + the one filling */
#define NV_LOG_BUF NV_IO_MAX	 /* bytes per batch, record included */
#define NV_LOG_BATCH_NOSYNC (256u << 10) /* nvme.log_batch_bytes 0 with nvme.fsync=none */
#define NV_LOG_BLOCK 4096	 /* segment header; commit record */
#define NV_LOG_SEG_MAGIC "KVTSEG1"
#define NV_LOG_REC_MAGIC "KVTREC1"
#define NV_LOG_HEAD_MAGIC "KVTHED1"
#define NV_LOG_HEAD "head"
/* Generations stay below this: one crafted or misread far above cannot wrap a segment's to
 * 0, where its first lap's records would check again. */
#define NV_LOG_GEN_MAX (UINT64_MAX >> 1)
#define NV_LOG_NONE UINT32_MAX /* log/head: no segment to check (nothing of the log indexed) */
#define NV_LOG_PUT 1
#define NV_LOG_TOMB 2
/* A put whose object did not match its entry's CRC when an open read it back - a write
 * torn by a crash, or a late zero-copy write whose caller had its buffer back at the
 * deadline and changed it before the device read it. The open rewrites the entry with
 * this type, so that no later scan indexes it, and keeps the rest of its batch and the
 * batches after it (docs/NVME_LOG.md, "Recovery"). Builds before 2026-12-08 skip it as a
 * type they do not know. */
#define NV_LOG_VOID 3
/* Segment header versions: 0 (the field was zero) before log/head existed; from 2 on the
 * log keeps a log/head, so a header of that version with no valid log/head means the head
 * was deleted. Older binaries ignore the field (it lies in the header's zeroed rest, under
 * the same CRC), as they ignore log/head. */
#define NV_LOG_SEG_VER 2

struct nv_log_seghdr {
	char magic[8];
	uint32_t crc; /* CRC32C of the 4 KiB block with this field zero */
	uint32_t seg;
	uint64_t gen;
	uint32_t ver; /* NV_LOG_SEG_VER, or 0 (written before log/head existed) */
	uint32_t pad;
	/* the file's size when this header was written (0: by a build before 2026-12-06): a
	 * file shorter than this was cut from outside since, and the batches past the cut
	 * went with their removals (tier_nvme_log_recover.c, walk) */
	uint64_t bytes;
};

/* One slot of log/head: the segment the log appends to, made durable after that segment's
 * header and before any batch in it is acknowledged. */
struct nv_log_head {
	char magic[8];
	uint32_t crc;  /* CRC32C of the 4 KiB block with this field zero */
	uint32_t seg;  /* NV_LOG_NONE: none */
	uint64_t gen;  /* seg's generation then */
	uint64_t seq;  /* every batch written before seg's first has at most this sequence */
	uint64_t count; /* writes of the head: the slot (count % 2) with the higher one holds */
};

struct nv_log_rent {
	uint8_t key[KVT_KEY_BYTES];
	uint64_t off; /* in the segment */
	uint32_t len;
	uint32_t crc;  /* CRC32C of the object's len bytes: the scan checks the newest batches */
	uint32_t type; /* NV_LOG_PUT | NV_LOG_TOMB | NV_LOG_VOID (written only by an open) */
	uint32_t pad;
};

struct nv_log_rec {
	char magic[8];
	uint32_t crc; /* CRC32C of the 4 KiB block with this field zero */
	uint32_t seg;
	uint32_t n;	/* entries */
	uint32_t flags; /* NV_LOG_REC_*; 0 in records of builds before 2026-12-04 */
	uint64_t gen;
	uint64_t seq;
	uint64_t off; /* of this record in the segment */
	uint64_t len; /* of the batch, this record included */
	struct nv_log_rent ent[];
};

/* Written by a run with nvme.fsync=none: its batches reach the device's cache in order
 * but may persist out of order at a power cut, so a hole with batches past it is that
 * mode's loss, not damage (judge_stops). */
#define NV_LOG_REC_UNORDERED 1u

#define NV_LOG_MAXENT ((NV_LOG_BLOCK - sizeof(struct nv_log_rec)) / sizeof(struct nv_log_rent))
#define NV_LOG_MAXIOV (1 + 2 * NV_LOG_MAXENT) /* the record, then one or two pieces per entry */

struct nv_seg {
	int fd;		  /* -1: the segment file does not exist (yet) */
	uint64_t bytes;	  /* file size */
	uint64_t gen;	  /* from its header; bumped each time it is reused */
	uint64_t hdr_gen; /* the header's own, as the open read it (a newer lap's record can
			   * raise gen above it): store.read_only's lap check */
	/* the open found its header block whole but not checking (torn or damaged); with
	 * hdr_batches an intact record after it too (tier_nvme_log_recover.c, walk) */
	bool hdr_bad, hdr_batches;
	/* the open found it shorter than its header says, its records running into the cut:
	 * batches past the cut (and their removals) are lost; hdr_bytes the header's size */
	bool cut;
	uint64_t hdr_bytes;
	uint32_t readers; /* reads in flight: not reused meanwhile */
	uint32_t batches; /* batches written and not yet acknowledged */
	uint32_t movers;  /* unacknowledged batches re-appending its objects: not reused meanwhile */
	struct nv_ent *ents; /* index entries of objects in it (nv_ent_set_lseg), newest first */
	/* no file yet: log/<n>.laid is laid out for it, or being laid out (tier_nvme_log_layout.c) */
	bool laid, laying;
};

enum nv_bstate { NV_B_FREE, NV_B_FILL, NV_B_FLIGHT, NV_B_DONE };

/* An object being re-appended (tier_nvme_log_reinsert.c): where its index entry pointed when
 * it was copied; the entry moves at the batch's acknowledgement only if it still does. */
struct nv_move {
	struct kvt_key key;
	uint64_t gen;  /* the entry's */
	uint32_t lseg; /* the entry's (segment + 1) and offset when it was collected */
	uint64_t from;
	uint64_t loff; /* in a batch: its new offset */
	uint32_t len;
};

struct nv_batch {
	struct nv_io io; /* kind IO_LOG; first member: the CQE's user data is the batch */
	enum nv_bstate state;
	bool syncing;
	int err;
	uint8_t *buf; /* NV_LOG_BUF bytes, aligned: the record, then objects that are copied */
	uint64_t used;	   /* bytes of the batch (its length in the segment) */
	uint64_t bufused;  /* bytes of buf in use (the record and the copies) */
	struct iovec *iov; /* the batch in order: the record, then each object where it is */
	uint32_t niov;
	struct nv_op *ops, *ops_tail; /* the writes it acknowledges */
	uint32_t ntombs;	      /* removals it records (drained from nv_log.tombs) */
	struct nv_move *mv;	      /* re-appended objects (NV_LOG_MAXENT slots) */
	uint32_t nmv;
	uint32_t mvseg; /* the segment they come from */
	uint32_t seg;
	uint64_t off, seq;
};

struct nv_log {
	uint64_t log_max, seg_bytes;
	uint64_t batch_max; /* nvme.log_batch_bytes: puts join a batch up to this (a bigger
			     * object goes alone), at most NV_LOG_BUF */
	uint64_t spare_pct; /* nvme.log_spare_pct, at most 400 */
	uint32_t nmax;	 /* segments in the cycle: as many as fit in nvme.bytes (at least 3), or
			  * fewer where an entry that cannot be a segment ends it at open (the
			  * capacity follows: tier_nvme_log_recover.c) or a full file system
			  * during a run (nv_log_advance; the capacity follows at once, from 3
			  * segments up) */
	uint32_t nsegs;	 /* entries in segs[] (>= nmax when an earlier run had more) */
	struct nv_seg *segs;
	int dfd;
	int hfd;	 /* log/head, -1 until opened or created (tier_nvme_log_recover.c) */
	uint64_t hcount; /* the head's newest slot count */
	bool direct;
	bool broken; /* log writes stopped for the run: new writes take the file path */
	/* The stopped log let an object go without a tombstone on disk (a removal, drop or
	 * eviction while stopped; tombstones queued or staged when it stopped; a segment's
	 * objects evicted for a reuse whose header then failed): the next open would index its
	 * put again. nv_log_settle voids the log on disk (voided) before a remove is reported
	 * done, and fails the remove where it cannot. */
	bool owed, voided;
	/* the drain of drain_seg evicted objects whose records still stand (nv_log_advance; until
	 * the segment's new header, or its truncation, ends them) */
	bool drain_evicted;
	bool have_cur;
	uint32_t cur, start; /* segment appended to; where the first append of a run goes */
	uint64_t cur_off;
	uint64_t seq;
	struct nv_batch b[NV_LOG_BUFS]; /* a ring: head is the oldest not yet acknowledged */
	uint32_t head, count, inflight;
	uint32_t fail_seg; /* after a failed batch, later batches of its segment fail too */
	uint64_t fail_upto;
	uint8_t *zero; /* one zeroed block */
	/* segments laid out ahead of the append point (tier_nvme_log_layout.c): on
	 * (nvme.log_layout: wanted, and on where the log writes), done for the run, the next
	 * to look at, layouts in flight, segments still to lay out */
	bool lay_want, lay_on, lay_done;
	bool lay_abort; /* stopped for a turn's room (nv_log_layout_yield) */
	uint32_t lay_next, lay_flight, lay_left;
	uint32_t lay_first; /* the first turn's segment at open: never counted in lay_left */
	struct nv_op *lay_op; /* the layout in flight (NV_LOG_LAYOUTS is 1) */
	struct kvt_key *tombs; /* removals not yet in a batch, oldest first from tomb_head */
	uint32_t ntombs, tomb_head, tomb_cap;
	/* removals ever queued, and those in acknowledged batches (queued ones go into
	 * batches in order, batches are acknowledged in order): a flush waits until every
	 * removal queued before it is written (nv_log_flushed) */
	uint64_t tombs_queued, tombs_written;
	/* writes waiting for a staging buffer or a segment, oldest first (through bnext): not
	 * in the ring's ready list, where they would hold up reads a segment reuse waits for */
	struct nv_op *wait_head, *wait_tail;
	/* reinsertion (tier_nvme_log_reinsert.c): the live objects of the segment after cur,
	 * collected once per reuse of that segment, re-appended a batch at a time */
	uint64_t reins_max;	 /* bytes per reuse at most */
	uint32_t reins_seg;	 /* segment they were collected from (UINT32_MAX: none) */
	uint64_t reins_gen;	 /* and its generation then */
	struct nv_move *rq;	 /* collected, not yet copied: rq[rq_head .. rq_n) */
	uint32_t rq_n, rq_head, rq_cap;
	uint8_t *rbuf; /* NV_LOG_BUF: one read covers the copies of one batch */
	/* The copies' read is asynchronous (an io_uring read into rbuf, rd_io's CQE): the ring
	 * thread keeps completing reads and writes meanwhile. rq[rd_i .. rd_j) are in rbuf
	 * from segment offset rd_start when rd_state is NV_RD_READY. */
	struct nv_io rd_io; /* kind IO_LOG, told from a batch's by its address */
	enum { NV_RD_IDLE, NV_RD_READING, NV_RD_READY } rd_state;
	uint32_t rd_i, rd_j, rd_seg;
	uint64_t rd_start, rd_len;
	/* bytes of listed objects not yet copied nor dropped: the current segment's tail is
	 * kept for them (puts wait rather than take it, nv_log_copy_room) */
	uint64_t reins_left;
	/* the segment (and its generation) whose objects nv_log_advance evicted ahead of its reuse,
	 * waiting for the reads already in flight */
	uint32_t drain_seg;
	uint64_t drain_gen;
	/* What the open-time scan decided to write (tier_nvme_log_recover.c), written by
	 * nv_log_open_writes only once nothing can fail the tier's open any more. */
	struct {
		bool voids, gap, lost, headless; /* the log is voided: why */
		bool head_there; /* headless: log/head exists but does not check (damaged) */
		bool head;			 /* log/head is written, naming hs (generation hgen) */
		uint32_t end, top, outside, out_first, hd_seg, hs;
		uint64_t hd_gen, hgen;
		uint32_t *out; /* files outside the cycle, removed if voided (NV_LOG_NONE: kept) */
		size_t nout;
		/* a record damaged in the middle of a segment (not a torn tail) voids the log
		 * too: its segment, offset and the valid batches newer than it */
		bool damaged;
		uint32_t dmg_seg;
		uint64_t dmg_off, dmg_newer;
		/* a segment whose header does not check but that holds batches: voids too */
		bool badhdr;
		uint32_t badhdr_seg;
		/* the oldest segment's header does not check and it held batches: those are
		 * not indexed, the rest is (oldest_seg) */
		uint32_t oldest_cut;
		/* a segment cut from outside below the size its header gives, its records
		 * running into the cut: voids too, unless it is the oldest (oldest_seg) */
		bool cut;
		uint32_t cut_seg;
		/* records zeroed: those of incomplete batches and of the batches after them
		 * in their segment, and a torn tail's (a record that does not check and those
		 * that landed past it) */
		struct nv_log_at {
			uint32_t seg;
			uint64_t off;
		} *wipe;
		uint32_t nwipe, wipe_cap;
		/* put entries to rewrite as NV_LOG_VOID: entry idx of the record at (seg, off),
		 * batch sequence seq */
		struct nv_log_void {
			uint32_t seg, idx;
			uint64_t off, seq;
		} *vent;
		uint32_t nvent, vent_cap;
	} ow;
};

uint32_t nv_log_crc(const void *block);
uint8_t *nv_log_batch_copy(struct nv_batch *b, uint64_t need);
struct nv_batch *nv_log_filling(struct nv_log *lg);
struct nv_batch *nv_log_new_batch(struct nv_log *lg);
bool nv_log_seal(struct nv *s, struct nv_batch *b);
void nv_log_reinsert(struct nv *s);
void nv_log_moved(struct nv *s, struct nv_batch *b);
void nv_log_read_done(struct nv *s, int res);
uint64_t nv_log_copy_room(const struct nv_log *lg);
uint64_t nv_log_live(const struct nv_log *lg, uint32_t nseg);
#define NV_LOG_NOT_NOW 1 /* nv_log_seg_open: try the turn again once the layout is gone */
int nv_log_seg_open(struct nv *s, uint32_t n, bool create);
void nv_log_seg_name(uint32_t n, char *out, size_t len);
bool nv_log_parse_name(const char *nm, const char *suffix, uint32_t *out);
bool nv_log_advance(struct nv *s); /* tier_nvme_log_turn.c */
int nv_log_write_header(struct nv *s, uint32_t n, uint64_t gen);
int nv_log_write_head(struct nv *s, uint32_t seg, uint64_t gen);
void nv_log_stop(struct nv *s); /* log writes stop for the run (lg->broken) */
/* tier_nvme_log_layout.c */
bool nv_log_layout_take(struct nv *s, uint32_t n);
void nv_log_layout_untake(struct nv *s, uint32_t n);
bool nv_log_layout_yield(struct nv *s);
bool nv_log_layout_drop_after(struct nv *s, uint32_t n);
uint64_t nv_log_laid_disk_bytes(const struct nv *s, uint32_t n);

#endif
