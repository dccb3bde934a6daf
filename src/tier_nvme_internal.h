/*
 * tier_nvme_internal.h - the NVMe tier's private types and the functions its files share
 * (src/tier_nvme*.c; tier_nvme.c lists them). Nothing here is API: the tier is reached
 * through kvt__tier_nvme_ops. Functions shared between the tier's files are named nv_*.
 */
#ifndef KVT_TIER_NVME_INTERNAL_H
#define KVT_TIER_NVME_INTERNAL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "config.h"
#include "tier.h"

#define NV_IO_MAX (2u << 20) /* bytes per SQE */
/* An object's last piece carries a remainder up to this much (the header block of a chunk
 * of NV_IO_MAX bytes): such an object is one SQE, which nvme.fsync=data makes durable with
 * RWF_DSYNC instead of a separate fdatasync (tier_nvme_ops.c). */
#define NV_IO_CARRY (64u << 10)
#define NV_ZERO_BYTES (NV_IO_MAX + NV_IO_CARRY) /* a layout's source of zeros: one piece */
#define NV_SEG_INLINE 4
#define NV_NAME_MAX 128
#define NV_BUCKETS 24			/* hourly write-budget buckets: a rolling day */
#define NV_BUDGET_NAME ".kvtier.budget" /* the budget survives restarts */
#define NV_LEADER_BUCKETS 1024		/* in-flight writes by key */
#define NV_LOCK_NAME ".kvtier.lock"
#define NV_TMP_PREFIX ".tmp."
/* Create the side file name (an NV_TMP_PREFIX name: budget, chains, probe) in dfd afresh for
 * writing: whatever holds the name goes first, and the open never follows a symbolic link
 * nor opens a FIFO (O_EXCL | O_NOFOLLOW). Planted there, one truncated a file outside the
 * store, or blocked the ring thread or the open for ever (until 2026-12-06; found by
 * review, integ.nvme_tmp_links). A descriptor, or -1 with errno. */
int nv_tmp_create(int dfd, const char *name, int flags, mode_t mode);
/* openat that, in a read-only open (store.read_only: kvtier ls, stat, verify), leaves the
 * file's atime alone (O_NOATIME; a file of another owner refuses it, EPERM: opened without
 * it). An inspection must not change the store: until 2026-12-06 its O_DIRECT probe, the
 * log's segments and log/head were opened without it (found by review). */
struct nv;
int nv_openat_look(const struct nv *s, int dfd, const char *name, int flags, mode_t mode);
#define NV_REFUSED 1024 /* remembered refusals: their chains' later chunks are refused too */
#define NV_CHAINS_NAME ".kvtier.chains" /* parent links, saved at close */
#define NV_CHAINS_MAGIC "kvtier-chains-v1\n"
#define NV_POOL_DIR "pool" /* preallocated slots: <dir>/pool/<id>.slot (tier_nvme_pool.c) */
#define NV_LEAF_POOL 256	    /* the pool directory, as a leaf: after the 256 fan-out ones */
#define NV_LEAVES 257	    /* leaves per directory that names live in */
#define NV_LAYOUT_DEPTH 8  /* pieces in flight per slot being laid out */
#define NV_SERVED 4096	   /* reads remembered for drop_corrupt (struct nv_served) */

enum nv_fsync { NV_FSYNC_NONE, NV_FSYNC_DATA, NV_FSYNC_FULL };
enum nv_type { OP_WRITE, OP_READ, OP_EXISTS, OP_REMOVE, OP_FLUSH, OP_DROP, OP_LAYOUT };
enum nv_stage {
	ST_WAIT,      /* SQEs in flight; the next CQE moves the op on */
	ST_W_OPEN,    /* create the temp file */
	ST_W_ALLOC,   /* give a new temp file its size first (fallocate) */
	ST_W_DATA,    /* write pieces */
	ST_W_SYNC,    /* fdatasync */
	ST_W_DROP,    /* a layout: its clean zeros leave the page cache (fadvise, io-wq) */
	ST_W_CLOSE,   /* close */
	ST_W_PUBLISH, /* rename the temp file onto the object's name (io_uring, async) */
	ST_W_DIRSYNC, /* fsync the subdirectory (nvme.fsync=full), then index the object */
	ST_W_FAIL,    /* clean up the temp file, maybe retry */
	ST_R_OPEN,    /* open the object for reading */
	ST_R_DATA,    /* read pieces */
	ST_W_STAGE,   /* log write: copy into the staging batch (tier_nvme_log.c) */
	ST_F_SYNC,    /* flush: fsync the leaf directories changed before it (tier_nvme_flush.c) */
	ST_DONE,
};
enum nv_kind {
	IO_OPEN,
	IO_ALLOC,
	IO_WRITE,
	IO_READ,
	IO_FSYNC,
	IO_DROP, /* a layout's fadvise(DONTNEED): advice, its result ignored */
	IO_CLOSE,
	IO_DIRSYNC,
	IO_RENAME, /* a write's publish */
	IO_WAKE,
	IO_LOG, /* a log batch's write or fdatasync: io is the batch's, io->op is NULL */
	IO_FLUSHSYNC, /* a flush's fsync of a leaf directory (tier_nvme_flush.c) */
};

struct nv_dir {
	char *path;
	int fd;
	int lock_fd;
	bool direct;
	/* leaves (bit = the fan-out subdirectory, or NV_LEAF_POOL) whose names changed since
	 * the last flush, and those the running flush syncs (tier_nvme_flush.c; ring thread
	 * only) */
	uint64_t dirty[5], syncing[5];
};

/* A cached read descriptor. ent is NULL once its object is gone: closed at last unref. */
struct nv_fdc {
	struct nv_fdc *prev, *next;
	struct nv_ent *ent;
	int fd;
	uint32_t refs;
};

#define NV_ORPHAN_BUCKETS 4096u
#define NV_KIDS_BUCKETS 65536u

struct nv_ent {
	struct kvt_key key;
	struct nv_ent *hnext;
	struct nv_ent *prev, *next;   /* LRU, head = most recent */
	struct nv_ent *lprev, *lnext; /* leaves (no stored children) only: the eviction order */
	bool in_leaf;
	uint32_t children;   /* stored entries and writes in flight naming this one as parent */
	uint64_t uid;	     /* unique per entry (or the write it came from), never reused */
	uint64_t parent_uid; /* uid of the parent entry or write counting this one (0: none) */
	bool has_parent;     /* parent is known (saved in .kvtier.chains) */
	struct kvt_key parent;
	/* Filed by its parent's key (tier_nvme_index.c, "Children by parent"): on s->orphans
	 * while parent_uid is 0 (the parent neither stored nor being written), so that the
	 * parent's entry counts it once it is written; on s->kids while counted, so that a
	 * parent copy or write that goes away hands it back to the orphans. */
	enum { NV_UNFILED, NV_ORPHAN, NV_KID } filed;
	struct nv_ent *oprev, *onext;
	struct nv_fdc *fdc;
	uint64_t bytes;
	uint64_t gen; /* unique per entry (s->gen): tells this copy from any other of its key */
	uint32_t dir;
	uint32_t opening; /* read opens in flight: the file must not be recycled */
	uint32_t lseg;	  /* 0: its own file; else in log segment lseg - 1 at loff */
	uint64_t loff;
	/* log objects: the other entries of segment lseg - 1 (nv_ent_set_lseg), so that the
	 * segment's reuse finds its objects without a walk over the whole index */
	struct nv_ent *sprev, *snext;
	uint64_t used_at; /* s->lru_clock when last put at the LRU head: MRU order in a segment */
	bool hot; /* read since written or last re-appended: kept when its log segment is reused */
	/* indexed by the open's scan from its name alone, not written in this run: after a
	 * power cut the name of an object whose file was recycled can hold the new object of
	 * another key (the rename was not durable, the data was), so a put of its key writes
	 * the object again rather than trusting the name (nv_start_write) */
	bool scanned;
};

/* Is e, under the key of a write being admitted, a copy that the admission sets aside
 * (tier_nvme_write.c, aside_take) and puts back if the write fails: found by the open, of
 * an object's shape, in a file of its own. Such a copy is no victim of its own key's
 * room-making (nv_victim, room_possible); a damaged file is dropped at the admission
 * anyway, and may go there. */
static inline bool nv_ent_aside_kept(const struct nv_ent *e)
{
	return e->scanned && !e->lseg && e->bytes >= KVT_HEADER_BYTES && e->bytes % KVT_ALIGN == 0;
}

/* Which copy (entry gen) the reads of a key served since its last drop_corrupt
 * (tier_nvme_index.c, nv_served_note): a report names a key, not the copy its read found. */
struct nv_served {
	struct kvt_key key;
	uint64_t gen;
	uint32_t reads; /* reads remembered and not yet reported (a report takes one) */
	bool used;
	bool conflicted; /* reads of key served different copies: which one is bad? */
};

struct nv_op {
	struct nv_op *next, *prev;   /* submit FIFO, then the ready list */
	struct nv_op *wnext, *wprev; /* active writes, in submission order */
	struct nv_op *lnext;	     /* in-flight leader writes, chained by key hash */
	struct nv_op *followers;     /* same-key writes that wait for this one */
	bool leader;
	enum nv_type type;
	enum nv_stage stage;
	int err;
	uint32_t pending; /* SQEs in flight */
	bool in_ready;
	bool issued;	 /* has put an SQE in the ring: no longer cancellable */
	bool retried;	 /* after ENOSPC */
	bool reopened;	 /* after EMFILE */
	bool noatime;	 /* its read open asked for O_NOATIME */
	bool recycled;	 /* the temp file is an evicted object's file, overwritten in place */
	bool dsync;	 /* write: one RWF_DSYNC I/O stands in for the fdatasync (tier_nvme_ops.c) */
	uint32_t slot;	 /* write: the pool slot overwritten in place; layout: the slot made,
			  * or the log segment laid out (log_layout) */
	bool log_layout; /* layout: a log segment's (tier_nvme_log_layout.c), not a slot's */
	/* write: its file was renamed out of another leaf (an evicted object's, a spare's, a
	 * pool slot's), which the put's durability also needs synced (tier_nvme_flush.c) */
	bool moved;
	uint16_t moved_from; /* that leaf (0-255, or NV_LEAF_POOL) */
	bool syncing_moved;  /* nvme.fsync=full: the directory fsync is that leaf's */
	bool has_parent; /* write: parent is the chunk before this one in its prompt */
	struct kvt_key parent;
	/* write: the file under its key's name that the open found, renamed to aside_name at
	 * the write's admission (tier_nvme_write.c, aside_take): removed once the new copy is
	 * indexed, put back under its name and indexed again if the write fails */
	bool aside;
	bool aside_removed; /* a remove of the key came meanwhile: never put back */
	bool aside_has_parent;
	uint32_t aside_dir;
	uint64_t aside_bytes;
	struct kvt_key aside_parent;
	uint64_t uid;	     /* leader write: the entry it publishes gets this uid */
	uint32_t children;   /* leader write: writes naming its key as parent, counted here */
	uint64_t parent_uid; /* the parent entry or write counting this one (0: none) */
	kvt_tier_cb cb;
	void *arg;
	struct kvt_key key;
	uint64_t seq; /* writes and flushes */
	uint64_t tomb_mark; /* flush: the log's removals queued before it (nv_log_flushed) */
	/* write: the object at obj, len bytes; or, split (tail non-NULL), its first head_len
	 * bytes at obj and the rest at tail */
	const uint8_t *obj;
	const uint8_t *tail;
	uint64_t head_len;
	uint64_t len, cursor;
	uint64_t wrote; /* write: bytes its data I/Os wrote, this attempt (the ENOSPC retry) */
	int fd;
	uint32_t dir;
	uint32_t budget_hour;
	/* read */
	struct kvt_seg *segs;
	uint32_t nsegs, si;
	uint64_t soff, size, total;
	uint64_t gen; /* of the index entry the read started from */
	struct nv_fdc *fdc;
	uint32_t lseg; /* read from log segment lseg - 1 (0: from fdc), at base + offset */
	uint64_t base;
	/* log write (tier_nvme_log.c) */
	bool log;
	uint32_t lcrc; /* the object's CRC32C (the log's entry CRC), for every write of at most
			* nvme.log_max bytes: computed on the submitting thread, off the ring */
	struct nv_op *bnext; /* the next op of its batch */
	uint64_t loff;	     /* offset in the staging buffer, then in the segment */
	/* exists */
	const struct kvt_key *keys;
	uint8_t *present;
	uint32_t n;
	/* not cleared by op_new */
	struct kvt_seg seg_inline[NV_SEG_INLINE];
	char name[NV_NAME_MAX]; /* temp name (write) or final name (read) */
	char final[NV_NAME_MAX]; /* write: the object's name, while its publish is in flight */
	char aside_name[NV_NAME_MAX]; /* write: see aside */
};

struct nv_io {
	struct nv_op *op;
	struct nv_io *next_free;
	struct iovec iov[2]; /* a split object's first I/O: header, then the payload's start */
	uint8_t *buf;
	uint64_t off;
	uint32_t len;
	int fd; /* IO_FLUSHSYNC: the leaf directory's */
	enum nv_kind kind;
};

/* A removed object's file, renamed to a temp name and kept to be overwritten. */
struct nv_spare {
	uint32_t dir;
	uint8_t leaf; /* the fan-out subdirectory its name is in */
	uint64_t bytes;
	char name[NV_NAME_MAX];
};

/* A preallocated slot: a file of bytes laid out (written once) and free to overwrite. */
struct nv_slot {
	uint32_t dir, id;
	uint64_t bytes;
	uint64_t disk; /* what it holds on disk: bytes, less the holes of one found so at open */
};

struct nv_stats {
	_Atomic uint64_t objects, bytes, reads, read_bytes, writes, write_bytes, evictions,
	    checksum_failures, errors, writes_skipped, removes;
	_Atomic uint64_t reinsert_bytes, reinserts; /* log objects re-appended at segment reuse */
	_Atomic uint64_t pool_bytes, pool_pending; /* free preallocated slots; still to lay out */
};

struct nv {
	const struct kvt_log *log;
	struct kvt_tier *tier; /* its eviction hook */
	struct nv_dir *dirs;
	uint32_t ndirs;
	/* live bytes the index admits: set at open, lowered by the ring thread when the log's
	 * cycle shrinks (nv_log_advance, tier_nvme_log_turn.c); read by other threads without a lock */
	_Atomic uint64_t capacity;
	uint64_t budget;
	uint32_t qd, open_files;
	int fsync_mode;
	pid_t pid;
	bool ro; /* store.read_only: inspection, nothing is created, deleted or written */
	mode_t file_mode, dir_mode;
	/* Read opens ask for O_NOATIME (until one is refused with EPERM: files of another
	 * owner): nothing in the tier uses atime, and a read that updates it dirties the
	 * inode - a journal write per object's first read. Ring thread only. */
	bool no_noatime;
	uint64_t object_max;
	_Atomic uint64_t skips_unreported, last_skip_warn_ns;
	char **anomalies; /* "path\twhy" of entries that cannot be objects (scan_anomalies) */
	size_t n_anomalies;

	/* submit side, under qlock */
	pthread_mutex_t qlock;
	pthread_cond_t qcond; /* ring thread start-up handshake */
	struct nv_op *qhead, *qtail;
	struct nv_op *free_ops;
	bool closing;
	uint64_t wseq;
	int efd;
	int init_rc;
	bool init_done;
	pthread_t thread;
	bool thread_started;

	/* ring thread only */
	struct io_uring ring;
	struct nv_io *ios, *free_ios;
	struct nv_io wake;
	struct nv_io trash; /* marks the CQEs of evicted files' unlinks */
	uint32_t trash_inflight;
	bool ring_ready;
	uint64_t wake_val;
	bool wake_armed;
	struct nv_op *ready_head, *ready_tail;
	/* short reads and writes whose rest found the SQ full, oldest first (linked through
	 * next_free): issued by nv_io_resume once submissions made room */
	struct nv_io *resub_head, *resub_tail;
	struct nv_op *whead, *wtail;
	struct nv_op *leaders[NV_LEADER_BUCKETS];
	struct nv_op *flush_head, *flush_tail; /* linked through next */
	struct nv_op *fsync_head, *fsync_tail; /* flushes syncing, the head first (lnext) */
	struct nv_op *done_ops;		       /* back to free_ops at next drain */
	uint64_t active;
	uint32_t tmpseq;
	bool cancelled;
	struct nv_fdc *fdc_head, *fdc_tail, *free_fdc;
	uint32_t nfdc;
	uint64_t used, reserved;
	uint64_t gen; /* the last entry gen given (nv_ent_insert, nv_write_index) */
	/* the copies recent reads served, by key hash, direct-mapped (nv_served_note) */
	struct nv_served served[NV_SERVED];

	/* spare files (ring thread only): removed objects' files kept for the next write of
	 * their size, see nv_spare_keep() */
	struct nv_spare *spares;
	uint32_t nspares;
	uint64_t spare_bytes;

	/* preallocated pool (tier_nvme_pool.c; ring thread only once open) */
	uint64_t prealloc;		   /* nvme.preallocate: slot size laid out (0: none) */
	struct nv_slot *slots;		   /* free slots */
	uint32_t nslots, slots_cap, pool_seq; /* pool_seq: the last slot id given */
	uint64_t pool_bytes, layout_bytes; /* free slots; slots being laid out */
	uint32_t layouts;		   /* layout ops in flight */
	bool layout_done;		   /* nothing more to lay out until the next open */
	uint8_t *zero;			   /* NV_ZERO_BYTES zero bytes: what a layout writes */

	/* index: mutations under ilock (scan() reads it from other threads) */
	pthread_mutex_t ilock;
	struct nv_ent **buckets;
	uint64_t nbuckets, nents;
	/* while the table grows: the table before, whose buckets below old_moved have moved
	 * into buckets (tier_nvme_index.c, index_step); NULL otherwise */
	struct nv_ent **old_buckets;
	uint64_t old_nbuckets, old_moved;
	struct nv_ent *lru_head, *lru_tail;
	uint64_t lru_clock; /* stamps nv_ent.used_at */
	struct nv_ent *leaf_head, *leaf_tail; /* ring thread only */
	struct nv_ent **orphans; /* NV_ORPHAN_BUCKETS lists by parent key (ring thread only) */
	struct nv_ent **kids;	 /* NV_KIDS_BUCKETS lists by parent key (ring thread only) */
	uint64_t uids;
	uint64_t refused[NV_REFUSED]; /* key hashes of chunks refused for room */
	uint32_t refused_next;

	/* write budget */
	pthread_mutex_t block;
	uint64_t (*clock_hour)(void); /* nv_hour_now; a test's clock in tests */
	uint64_t bucket[NV_BUCKETS];
	uint64_t bucket_hour; /* wall-clock hours since the epoch */
	bool budget_dirty;
	uint64_t budget_used;

	struct nv_stats st;

	/* small-object log (tier_nvme_log.c); NULL when nvme.log_max is 0 and no log exists */
	struct nv_log *lg;
};

#define ST_ADD(s, f, v) atomic_fetch_add_explicit(&(s)->st.f, (v), memory_order_relaxed)
#define ST_SET(s, f, v) atomic_store_explicit(&(s)->st.f, (v), memory_order_relaxed)
#define ST_GET(s, f) atomic_load_explicit(&(s)->st.f, memory_order_relaxed)

/* tier_nvme_index.c */
int nv_index_init(struct nv *s); /* an empty table (ilock is the caller's); nv_index_free frees it */
void nv_index_free(struct nv *s);
/* fn for every entry (until it returns nonzero), under ilock: scan() from any thread */
void nv_index_walk(struct nv *s, kvt_scan_fn fn, void *arg);
struct nv_ent *nv_ent_find(struct nv *s, const struct kvt_key *k);
void nv_lru_unlink(struct nv *s, struct nv_ent *e);
void nv_lru_push_head(struct nv *s, struct nv_ent *e);
void nv_leaf_unlink(struct nv *s, struct nv_ent *e);
void nv_leaf_push(struct nv *s, struct nv_ent *e, bool head);
void nv_lru_touch(struct nv *s, struct nv_ent *e);
uint64_t nv_parent_count(struct nv *s, const struct kvt_key *p, int delta, uint64_t uid);
/* Chain links of an entry written before its parent (tier_nvme_index.c): counted when the
 * parent is indexed. */
void nv_chain_count(struct nv *s, struct nv_ent *e);
void nv_orphans_adopt(struct nv *s, struct nv_ent *p);
void nv_chain_take(struct nv *s, struct nv_ent *e, struct nv_op *op);
void nv_kids_orphan(struct nv *s, const struct kvt_key *parent, uint64_t uid);
void nv_kids_relabel(struct nv *s, const struct kvt_key *parent, uint64_t from, uint64_t to);
void nv_chain_link(struct nv *s, struct nv_ent *e, const struct kvt_key *parent);
void nv_refused_add(struct nv *s, const struct kvt_key *k);
bool nv_refused_has(const struct nv *s, const struct kvt_key *k);
struct nv_ent *nv_victim(struct nv *s, const struct nv_op *op);
void nv_publish_counts(struct nv *s);
struct nv_ent *nv_ent_insert(struct nv *s, const struct kvt_key *k, uint32_t dir, uint64_t bytes);
void nv_ent_remove(struct nv *s, struct nv_ent *e);
/* Place e in log segment lseg - 1 (0: in a file of its own), on that segment's list of
 * entries (struct nv_seg.ents). Every change of an entry's lseg goes through here. */
void nv_ent_set_lseg(struct nv *s, struct nv_ent *e, uint32_t lseg);
void nv_served_note(struct nv *s, const struct nv_ent *e);
bool nv_served_take(struct nv *s, const struct kvt_key *k, const struct nv_ent *e);

/* tier_nvme_space.c */
int nv_parse_object_name(const char *name, struct kvt_key *k);
void nv_object_path(const struct kvt_key *k, char *out);
uint32_t nv_key_dir(const struct nv *s, const struct kvt_key *k);
void nv_unlink_async(struct nv *s, struct nv_dir *d, const char *name);
int nv_ent_unlink(struct nv *s, struct nv_ent *e, bool now);
void nv_evict(struct nv *s, struct nv_ent *e, bool now);
void nv_spare_drop_all(struct nv *s, bool now);
bool nv_spare_keep(struct nv *s, struct nv_ent *e);
bool nv_spare_take(struct nv *s, struct nv_op *op);
int nv_make_room(struct nv *s, uint64_t len, struct nv_op *op);
int nv_evict_in_dir(struct nv *s, uint32_t dir, uint64_t len);

/* tier_nvme_pool.c */
/* objects: the open's object files (nv_scan_is_object tells a slot that is one of them) */
int nv_pool_scan(struct nv *s, const void *objects, size_t nobjects);
bool nv_pool_take(struct nv *s, struct nv_op *op);
bool nv_pool_untake(struct nv *s, struct nv_op *op);
bool nv_pool_keep(struct nv *s, struct nv_ent *e);
bool nv_pool_drop_one(struct nv *s, bool now);
uint32_t nv_pool_drop_dir(struct nv *s, uint32_t dir, uint64_t len);
void nv_pool_kick(struct nv *s);
bool nv_zero_ready(struct nv *s);
void nv_layout_publish(struct nv *s);
void nv_pool_laid(struct nv *s, struct nv_op *op);
void nv_pool_layout_fail(struct nv *s, struct nv_op *op);
uint64_t nv_pool_pending(const struct nv *s);
/* Bytes the free slots on file system dev hold on disk (holes left out): the open's clamp. */
uint64_t nv_pool_disk_bytes(const struct nv *s, dev_t dev);

/* tier_nvme_fdc.c */
void nv_fdc_list_unlink(struct nv *s, struct nv_fdc *c);
void nv_fdc_free(struct nv *s, struct nv_fdc *c);
void nv_fdc_detach(struct nv *s, struct nv_ent *e);
uint32_t nv_fdc_shed(struct nv *s);
void nv_fdc_put(struct nv *s, struct nv_fdc *c);
void nv_fdc_use(struct nv *s, struct nv_fdc *c);
struct nv_fdc *nv_fdc_adopt(struct nv *s, struct nv_op *op, int fd);

/* tier_nvme_budget.c */
uint64_t nv_hour_now(void);
void nv_budget_roll(struct nv *s, uint64_t hour);
void nv_budget_save(struct nv *s);
void nv_budget_load(struct nv *s);
int nv_budget_take(struct nv *s, uint64_t len, uint32_t *hour_out);
void nv_budget_refund(struct nv *s, uint64_t len, uint32_t hour);

/* tier_nvme_write.c */
void nv_write_release(struct nv *s, struct nv_op *op);
void nv_write_publish_prep(struct nv *s, struct nv_op *op, struct io_uring_sqe *sqe);
int nv_write_published(struct nv *s, struct nv_op *op, int res);
bool nv_write_fail(struct nv *s, struct nv_op *op);
void nv_start_write(struct nv *s, struct nv_op *op);
/* A leader write is over (stored: it indexed its object): the copy it set aside goes, or
 * (not stored) comes back (nv_finish). */
void nv_write_aside_end(struct nv *s, struct nv_op *op, bool stored);

/* tier_nvme_ops.c */
void nv_pump(struct nv *s, struct nv_op *op);
void nv_on_cqe(struct nv *s, struct nv_io *io, int res);
void nv_start_op(struct nv *s, struct nv_op *op);
void nv_cancel_unissued(struct nv *s);
/* Issue the rests of short I/Os that found no free SQE, while SQEs are free (ring loop). */
void nv_io_resume(struct nv *s);

/* tier_nvme_ring.c */
struct nv_io *nv_io_start(struct nv *s, struct nv_op *op, enum nv_kind kind,
			  struct io_uring_sqe **sqe);
void nv_io_put(struct nv *s, struct nv_io *io);
void nv_ready_push(struct nv *s, struct nv_op *op);
struct nv_op **nv_leader_slot(struct nv *s, const struct kvt_key *k);
void nv_finish(struct nv *s, struct nv_op *op, int64_t res);
void *nv_ring_main(void *arg);

/* tier_nvme_flush.c */
void nv_dirty(struct nv *s, uint32_t dir, const struct kvt_key *k);
void nv_dirty_leaf(struct nv *s, uint32_t dir, uint32_t leaf);
int nv_leaf_open(struct nv *s, uint32_t dir, uint32_t leaf);
void nv_dirty_fs(struct nv *s, uint32_t dir);
bool nv_flush_waits(const struct nv *s, const struct nv_op *f);
void nv_flush_ready(struct nv *s, struct nv_op *f);
bool nv_flush_pump(struct nv *s, struct nv_op *f);
void nv_flush_on_cqe(struct nv *s, struct nv_io *io, int res);

/* tier_nvme_recover.c */
int nv_anomaly_add(struct nv *s, const char *dir, const char *sub, const char *name,
		   const char *why);
int nv_scan_anomalies(struct kvt_tier *t, void (*fn)(void *arg, const char *path, const char *why),
		      void *arg);
void nv_chains_save(struct nv *s);
int nv_rebuild_index(struct nv *s);
bool nv_scan_is_object(const void *items, size_t n, uint32_t dir, uint64_t ino);

/* tier_nvme_write.c, shared with the log */
int nv_write_index(struct nv *s, struct nv_op *op, uint32_t lseg, uint64_t loff);

/* tier_nvme_log.c */
int nv_log_open(struct nv *s, uint64_t log_max, uint64_t batch_bytes, uint64_t segment_bytes, uint64_t reinsert_pct,
		uint64_t spare_pct);
void nv_log_close(struct nv *s);
bool nv_log_takes(struct nv *s, const struct nv_op *op);
uint64_t nv_log_max(const struct nv *s); /* objects up to this size may go to the log (0: none) */
/* Bytes the log's segment files hold on disk, holes left out (created once, kept: the tier's
 * own room). */
uint64_t nv_log_disk_bytes(const struct nv *s);
/* The capacity (live bytes) room bytes of disk give: the live bytes of the cycle's segments
 * that fit in it, plus the rest for objects in files of their own (clamp_capacity). */
uint64_t nv_log_capacity_in(const struct nv *s, uint64_t room);
int nv_log_stage(struct nv *s, struct nv_op *op); /* 1 staged, 0 blocked, -1 file path */
void nv_log_kick(struct nv *s);
bool nv_log_busy(struct nv *s);
void nv_log_on_cqe(struct nv *s, struct nv_io *io, int res);
void nv_log_tombstone(struct nv *s, const struct nv_ent *e);
int nv_log_settle(struct nv *s); /* before a remove is reported done: 0, or it is not durable */
uint64_t nv_log_flush_mark(const struct nv *s);
bool nv_log_flushed(const struct nv *s, uint64_t mark);
int nv_log_flush_err(const struct nv *s);
int nv_log_read_fd(struct nv *s, uint32_t lseg);
int nv_log_lap_current(struct nv *s, uint32_t lseg); /* store.read_only: 1, 0 gone, < 0 */
void nv_log_read_ref(struct nv *s, uint32_t lseg, int delta);

/* tier_nvme_log_recover.c */
int nv_log_recover(struct nv *s);
bool nv_log_seghdr_ok(const uint8_t *blk, uint32_t n);
void nv_log_open_writes(struct nv *s); /* the ring thread, once it is set up */
/* segments laid out ahead of the append point (tier_nvme_log_layout.c) */
void nv_log_layout_want(struct nv *s, bool on); /* nvme.log_layout, before the scan */
void nv_log_layout_scan(struct nv *s); /* in nv_rebuild_index, before the clamp */
uint64_t nv_log_layout_pending(const struct nv *s);
void nv_log_layout_kick(struct nv *s);
void nv_log_laid(struct nv *s, struct nv_op *op);
void nv_log_layout_fail(struct nv *s, struct nv_op *op);
bool nv_log_layout_aborted(const struct nv *s);

/* tier_nvme_open.c */
int nv_open(struct kvt_tier *t, const struct kvt_config *cfg);
void nv_close(struct kvt_tier *t);

#endif
