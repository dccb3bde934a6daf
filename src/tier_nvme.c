/*
 * tier_nvme.c - the local NVMe tier: objects are files, one directory per drive, driven by
 * one io_uring ring per tier instance. This is the benchmark's hot path, so it is built
 * to keep the ring full with no per-I/O allocation and no lock held across I/O.
 *
 * Layout. Object key K lives in dirs[hash(K) % n]/<K[0] as 2 hex>/<K as 64 hex>.kvt. The
 * 256 fan-out subdirectories keep directories small. A write goes to
 * "<sub>/.tmp.<hex>.<pid>.<seq>" first and is renamed onto the final name only after its
 * data has completed (and, per nvme.fsync, been fdatasync'ed; "full" also fsyncs the
 * directory after the rename), so a process killed at any moment leaves at most a stray
 * temp file, never a torn object. The open-time scan deletes temp files and rebuilds the
 * in-memory index (key -> dir, bytes, LRU position) in mtime order: a restart keeps the
 * cache. It judges no object's content: an empty or misaligned file is indexed at its size
 * (with a warning) for the object format to judge when it is read or verified, and an entry
 * that is not a regular file is listed by scan_anomalies(), never followed or deleted. A
 * ".kvtier.lock" flock per directory stops two instances from deleting each other's temp
 * files. With store.read_only (kvtier ls/stat/verify) the open creates, locks, deletes and
 * evicts nothing and fails on a directory that is not a store.
 *
 * Modes: files are created nvme.file_mode (0600) and directories nvme.dir_mode (0700):
 * stored KV reveals the prompts it was computed from.
 *
 * Threads. Callers never touch the ring. A submitting call fills an operation (recycled
 * from a free list), appends it to a mutex-protected FIFO and writes an eventfd only when
 * the FIFO was empty; the ring thread keeps a read of that eventfd armed in the ring, so
 * one io_uring_submit_and_wait() sleeps on both I/O and new work. We chose the hand-off
 * over "submit under a mutex" because it lets the ring be SINGLE_ISSUER/DEFER_TASKRUN, keeps
 * the index, LRU, fd cache and capacity accounting single-threaded (no locks on the I/O
 * path), and costs one uncontended lock + at most one eventfd write per call. Callbacks run
 * on the ring thread. The index has a mutex only for scan() from other threads; stats are
 * atomics; the write budget has its own small mutex for can_write().
 *
 * Operations are small state machines advanced by completions. Data, fsync, close and
 * openat (temp create, read open) go through io_uring (openat and fsync are the slow
 * metadata operations, so they run on io_uring's workers without stalling the ring thread).
 * rename is a synchronous syscall on the ring thread, deliberately: doing every rename of
 * a final name in program order is what makes "evict/remove key K" and "publish a new write
 * of K" safe without per-key locking (an async unlink racing a later rename could delete
 * the new object). Measured here: ~8-30 us per rename on ext4, one per object written,
 * small against a 2 MiB write. unlink is NOT cheap: with ext4 mounted "discard" (as here),
 * unlinking a 2 MiB file takes ~1-2 ms, so an evicted or removed object is first renamed to
 * a unique ".tmp.evict.*" name (ordered, cheap) and that name is unlinked by an
 * IORING_OP_UNLINKAT on io_uring's workers (see ent_unlink). Only the rare disk-full path
 * unlinks synchronously, because it needs the space back before it retries. Large objects
 * are split into NV_IO_MAX pieces; at most nvme.queue_depth data/metadata SQEs are in
 * flight, each tracked by one preallocated nv_io slot.
 *
 * O_DIRECT: each directory is probed at open (create + 4 KiB write with O_DIRECT). With
 * nvme.direct=auto a refusal (EINVAL: ramfs, old tmpfs) gives one warning and buffered I/O
 * for that directory; "on" fails the open; "off" never uses it.
 *
 * Capacity (nvme.bytes, clamped at open to what the file systems can hold while keeping 2 %
 * of each free; smaller than one object is an open error) is enforced before a write by
 * evicting the least recently used *leaf*: writes name their parent chunk (write_chained),
 * an object with stored children - or a child's write in flight, counted from its start
 * since writes complete out of order - is not a leaf, so a chain is evicted from its end
 * and a prefix outlives its suffixes. A write whose only possible victims are its own ancestors
 * is refused instead (-ENOSPC): a session larger than the capacity keeps its first chunks,
 * which a resume can use. Parent links are saved at close in <first dir>/.kvtier.chains (a
 * key's parent never changes: keys are content addresses, so a stale file is still true)
 * and restored at open; after a crash every object is a leaf (plain LRU by mtime) until its
 * chain is written again. When the victim has the new object's size (full chunks all do) its file becomes
 * the new write's temp file and is overwritten in place (see recycle): a full cache then
 * writes at the speed of an overwrite, not of create + allocate + discard. A real ENOSPC from the
 * file system evicts objects of the same directory and retries once, else fails the write with
 * -ENOSPC after removing its temp file. The write budget (nvme.write_budget bytes per rolling 24 h,
 * hourly wall-clock buckets saved in <first dir>/.kvtier.budget so restarts do not reset it)
 * refuses writes with -EDQUOT; a budget dated in the future (the clock stepped back) is re-dated
 * to now. Refused writes are counted (writes_skipped) and reported at warning level, at most one
 * line per 10 s. A write of a key already stored completes at once: keys are content addresses.
 */
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
#define NV_SEG_INLINE 4
#define NV_NAME_MAX 128
#define NV_BUCKETS 24			/* hourly write-budget buckets: a rolling day */
#define NV_BUDGET_NAME ".kvtier.budget" /* the budget survives restarts */
#define NV_LEADER_BUCKETS 1024		/* in-flight writes by key */
#define NV_LOCK_NAME ".kvtier.lock"
#define NV_TMP_PREFIX ".tmp."
#define NV_REFUSED 1024 /* remembered refusals: their chains' later chunks are refused too */
#define NV_CHAINS_NAME ".kvtier.chains" /* parent links, saved at close */
#define NV_CHAINS_MAGIC "kvtier-chains-v1\n"

enum nv_fsync { NV_FSYNC_NONE, NV_FSYNC_DATA, NV_FSYNC_FULL };
enum nv_type { OP_WRITE, OP_READ, OP_EXISTS, OP_REMOVE, OP_FLUSH, OP_DROP };
enum nv_stage {
	ST_WAIT,      /* SQEs in flight; the next CQE moves the op on */
	ST_W_OPEN,    /* create the temp file */
	ST_W_DATA,    /* write pieces */
	ST_W_SYNC,    /* fdatasync */
	ST_W_CLOSE,   /* close, then rename (sync) */
	ST_W_DIRSYNC, /* fsync the subdirectory (nvme.fsync=full) */
	ST_W_FAIL,    /* clean up the temp file, maybe retry */
	ST_R_OPEN,    /* open the object for reading */
	ST_R_DATA,    /* read pieces */
	ST_DONE,
};
enum nv_kind { IO_OPEN, IO_WRITE, IO_READ, IO_FSYNC, IO_CLOSE, IO_DIRSYNC, IO_WAKE };

struct nv_dir {
	char *path;
	int fd;
	int lock_fd;
	bool direct;
};

/* A cached read descriptor. ent is NULL once its object is gone: closed at last unref. */
struct nv_fdc {
	struct nv_fdc *prev, *next;
	struct nv_ent *ent;
	int fd;
	uint32_t refs;
};

struct nv_ent {
	struct kvt_key key;
	struct nv_ent *hnext;
	struct nv_ent *prev, *next; /* LRU, head = most recent */
	struct nv_ent *lprev, *lnext; /* leaves (no stored children) only: the eviction order */
	bool in_leaf;
	uint32_t children;   /* stored entries and writes in flight naming this one as parent */
	uint64_t uid;	     /* unique per entry (or the write it came from), never reused */
	uint64_t parent_uid; /* uid of the parent entry or write counting this one (0: none) */
	bool has_parent;     /* parent is known (saved in .kvtier.chains) */
	struct kvt_key parent;
	struct nv_fdc *fdc;
	uint64_t bytes;
	uint64_t gen; /* tells this entry from a later one of the same key */
	uint32_t dir;
	uint32_t opening; /* read opens in flight: the file must not be recycled */
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
	bool issued;   /* has put an SQE in the ring: no longer cancellable */
	bool retried;  /* after ENOSPC */
	bool reopened; /* after EMFILE */
	bool recycled; /* the temp file is an evicted object's file, overwritten in place */
	bool has_parent; /* write: parent is the chunk before this one in its prompt */
	struct kvt_key parent;
	uint64_t uid;	     /* leader write: the entry it publishes gets this uid */
	uint32_t children;   /* leader write: writes naming its key as parent, counted here */
	uint64_t parent_uid; /* the parent entry or write counting this one (0: none) */
	kvt_tier_cb cb;
	void *arg;
	struct kvt_key key;
	uint64_t seq; /* writes and flushes */
	/* write */
	const uint8_t *obj;
	uint64_t len, cursor;
	int fd;
	uint32_t dir;
	uint32_t budget_hour;
	/* read */
	struct kvt_seg *segs;
	uint32_t nsegs, si;
	uint64_t soff, size, total;
	uint64_t gen; /* of the index entry the read started from */
	struct nv_fdc *fdc;
	/* exists */
	const struct kvt_key *keys;
	uint8_t *present;
	uint32_t n;
	/* not cleared by op_new */
	struct kvt_seg seg_inline[NV_SEG_INLINE];
	char name[NV_NAME_MAX]; /* temp name (write) or final name (read) */
};

struct nv_io {
	struct nv_op *op;
	struct nv_io *next_free;
	uint8_t *buf;
	uint64_t off;
	uint32_t len;
	enum nv_kind kind;
};

/* A removed object's file, renamed to a temp name and kept to be overwritten. */
struct nv_spare {
	uint32_t dir;
	uint64_t bytes;
	char name[NV_NAME_MAX];
};

struct nv_stats {
	_Atomic uint64_t objects, bytes, reads, read_bytes, writes, write_bytes, evictions,
	    checksum_failures, errors, writes_skipped, removes;
};

struct nv {
	const struct kvt_log *log;
	struct kvt_tier *tier; /* its eviction hook */
	struct nv_dir *dirs;
	uint32_t ndirs;
	uint64_t capacity, budget;
	uint32_t qd, open_files;
	int fsync_mode;
	pid_t pid;
	bool ro; /* store.read_only: inspection, nothing is created, deleted or written */
	mode_t file_mode, dir_mode;
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
	struct nv_op *whead, *wtail;
	struct nv_op *leaders[NV_LEADER_BUCKETS];
	struct nv_op *flush_head, *flush_tail; /* linked through next */
	struct nv_op *done_ops;		       /* back to free_ops at next drain */
	uint64_t active;
	uint32_t tmpseq;
	bool cancelled;
	struct nv_fdc *fdc_head, *fdc_tail, *free_fdc;
	uint32_t nfdc;
	uint64_t used, reserved;
	uint64_t gen;

	/* spare files (ring thread only): removed objects' files kept for the next write of
	 * their size, see spare_keep() */
	struct nv_spare *spares;
	uint32_t nspares;
	uint64_t spare_bytes;

	/* index: mutations under ilock (scan() reads it from other threads) */
	pthread_mutex_t ilock;
	struct nv_ent **buckets;
	uint64_t nbuckets, nents;
	struct nv_ent *lru_head, *lru_tail;
	struct nv_ent *leaf_head, *leaf_tail; /* ring thread only */
	uint64_t uids;
	uint64_t refused[NV_REFUSED];	      /* key hashes of chunks refused for room */
	uint32_t refused_next;

	/* write budget */
	pthread_mutex_t block;
	uint64_t bucket[NV_BUCKETS];
	uint64_t bucket_hour; /* wall-clock hours since the epoch */
	bool budget_dirty;
	uint64_t budget_used;

	struct nv_stats st;
};

#define ST_ADD(s, f, v) atomic_fetch_add_explicit(&(s)->st.f, (v), memory_order_relaxed)
#define ST_SET(s, f, v) atomic_store_explicit(&(s)->st.f, (v), memory_order_relaxed)
#define ST_GET(s, f) atomic_load_explicit(&(s)->st.f, memory_order_relaxed)

/* "<64 lowercase hex>.kvt" -> key; -1 if the name is not an object name. */
static int parse_object_name(const char *name, struct kvt_key *k)
{
	if (strlen(name) != 2 * KVT_KEY_BYTES + 4 || strcmp(name + 2 * KVT_KEY_BYTES, ".kvt"))
		return -1;
	return kvt__key_from_lowerhex(name, k) < 0 ? -1 : 0;
}

static void object_path(const struct kvt_key *k, char *out)
{
	char hex[2 * KVT_KEY_BYTES + 1];
	kvt_key_to_hex(k, hex);
	snprintf(out, NV_NAME_MAX, "%.2s/%s.kvt", hex, hex);
}

static uint32_t key_dir(const struct nv *s, const struct kvt_key *k)
{
	return (uint32_t)(kvt__key_hash(k) % s->ndirs);
}

/* ---------------------------------------------------------------- index */

static struct nv_ent *ent_find(struct nv *s, const struct kvt_key *k)
{
	struct nv_ent *e = s->buckets[kvt__key_hash(k) & (s->nbuckets - 1)];
	while (e && !kvt__key_eq(&e->key, k))
		e = e->hnext;
	return e;
}

static void lru_unlink(struct nv *s, struct nv_ent *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		s->lru_head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		s->lru_tail = e->prev;
	e->prev = e->next = NULL;
}

static void lru_push_head(struct nv *s, struct nv_ent *e)
{
	e->prev = NULL;
	e->next = s->lru_head;
	if (s->lru_head)
		s->lru_head->prev = e;
	else
		s->lru_tail = e;
	s->lru_head = e;
}

static void leaf_unlink(struct nv *s, struct nv_ent *e)
{
	if (!e->in_leaf)
		return;
	if (e->lprev)
		e->lprev->lnext = e->lnext;
	else
		s->leaf_head = e->lnext;
	if (e->lnext)
		e->lnext->lprev = e->lprev;
	else
		s->leaf_tail = e->lprev;
	e->lprev = e->lnext = NULL;
	e->in_leaf = false;
}

static void leaf_push(struct nv *s, struct nv_ent *e, bool head)
{
	leaf_unlink(s, e);
	e->in_leaf = true;
	if (head) {
		e->lprev = NULL;
		e->lnext = s->leaf_head;
		if (s->leaf_head)
			s->leaf_head->lprev = e;
		else
			s->leaf_tail = e;
		s->leaf_head = e;
	} else {
		e->lnext = NULL;
		e->lprev = s->leaf_tail;
		if (s->leaf_tail)
			s->leaf_tail->lnext = e;
		else
			s->leaf_head = e;
		s->leaf_tail = e;
	}
}

static void lru_touch(struct nv *s, struct nv_ent *e)
{
	if (e->in_leaf && s->leaf_head != e)
		leaf_push(s, e, true);
	if (s->lru_head == e)
		return;
	lru_unlink(s, e);
	lru_push_head(s, e);
}

static struct nv_ent *ent_find(struct nv *s, const struct kvt_key *k);
static struct nv_op **leader_slot(struct nv *s, const struct kvt_key *k);

/* Count (delta +1) a child of the chunk p on p's entry, or on p's write in flight (writes
 * complete out of order: the entry it publishes takes the count over), or uncount (-1) it
 * from the one with that uid. An entry with children is not a leaf, so not a victim; when
 * its last child goes it becomes the next leaf to evict (its chain's end was just evicted).
 * Returns the uid counted on, 0 when p is neither stored nor being written. */
static uint64_t parent_count(struct nv *s, const struct kvt_key *p, int delta, uint64_t uid)
{
	struct nv_ent *e = ent_find(s, p);
	if (e && (delta > 0 || e->uid == uid)) {
		if (delta > 0) {
			if (e->children++ == 0)
				leaf_unlink(s, e);
		} else if (e->children && --e->children == 0) {
			leaf_push(s, e, false);
		}
		return e->uid;
	}
	struct nv_op *w = *leader_slot(s, p);
	if (w && (delta > 0 || w->uid == uid)) {
		if (delta > 0)
			w->children++;
		else if (w->children)
			w->children--;
		return w->uid;
	}
	return 0;
}

/* A stored entry learns its parent (a later write of its key, or .kvtier.chains). */
static void chain_link(struct nv *s, struct nv_ent *e, const struct kvt_key *parent)
{
	if (e->parent_uid || kvt__key_eq(&e->key, parent))
		return;
	e->parent = *parent;
	e->has_parent = true;
	e->parent_uid = parent_count(s, parent, +1, 0);
}

/* e is going away: it is no longer a leaf, and no longer a child of its parent. */
static void chain_unlink(struct nv *s, struct nv_ent *e)
{
	leaf_unlink(s, e);
	if (e->parent_uid)
		parent_count(s, &e->parent, -1, e->parent_uid);
	e->parent_uid = 0;
}

/* A chunk refused for lack of room cuts its chain here: the chunks after it could never be
 * resumed from this tier, so they must not evict anything either (else a session larger
 * than the capacity would evict its own prefix one step removed). */
static void refused_add(struct nv *s, const struct kvt_key *k)
{
	s->refused[s->refused_next++ % NV_REFUSED] = kvt__key_hash(k) | 1;
}

static bool refused_has(const struct nv *s, const struct kvt_key *k)
{
	uint64_t h = kvt__key_hash(k) | 1;
	for (uint32_t i = 0; i < NV_REFUSED; i++)
		if (s->refused[i] == h)
			return true;
	return false;
}

/* The next object to evict for a write of op (NULL op: no write): the least recently used
 * leaf that is not op's parent. NULL when op's own ancestors are all that is left - or no
 * leaf at all: every stored object has a child stored or in flight (the leaves to be are
 * still being written), and evicting any would cut a chain. (Only a caller naming parents
 * in a cycle could leave no leaf for good; then writes are refused, nothing is lost.) */
static struct nv_ent *victim(struct nv *s, const struct nv_op *op)
{
	for (struct nv_ent *e = s->leaf_tail; e; e = e->lprev)
		if (!op || !op->has_parent || !kvt__key_eq(&e->key, &op->parent))
			return e;
	return NULL;
}

static void publish_counts(struct nv *s)
{
	ST_SET(s, objects, s->nents);
	ST_SET(s, bytes, s->used);
}

/* Called with ilock held. */
static int index_grow(struct nv *s)
{
	uint64_t nb = s->nbuckets * 2;
	struct nv_ent **b = kvt__calloc(nb, sizeof(*b));
	if (!b)
		return -ENOMEM;
	for (uint64_t i = 0; i < s->nbuckets; i++) {
		struct nv_ent *e = s->buckets[i], *nx;
		for (; e; e = nx) {
			nx = e->hnext;
			uint64_t h = kvt__key_hash(&e->key) & (nb - 1);
			e->hnext = b[h];
			b[h] = e;
		}
	}
	kvt__free(s->buckets);
	s->buckets = b;
	s->nbuckets = nb;
	return 0;
}

/* New entry at the LRU head (most recent). */
static struct nv_ent *ent_insert(struct nv *s, const struct kvt_key *k, uint32_t dir,
				 uint64_t bytes)
{
	struct nv_ent *e = kvt__calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->key = *k;
	e->dir = dir;
	e->bytes = bytes;
	e->gen = ++s->gen;
	e->uid = ++s->uids;
	pthread_mutex_lock(&s->ilock);
	if (s->nents >= s->nbuckets)
		index_grow(s); /* on failure chains just get longer */
	uint64_t h = kvt__key_hash(k) & (s->nbuckets - 1);
	e->hnext = s->buckets[h];
	s->buckets[h] = e;
	s->nents++;
	s->used += bytes;
	pthread_mutex_unlock(&s->ilock);
	lru_push_head(s, e);
	leaf_push(s, e, true);
	publish_counts(s);
	return e;
}

static void fdc_detach(struct nv *s, struct nv_ent *e);

static void ent_remove(struct nv *s, struct nv_ent *e)
{
	fdc_detach(s, e);
	chain_unlink(s, e);
	lru_unlink(s, e);
	pthread_mutex_lock(&s->ilock);
	struct nv_ent **pp = &s->buckets[kvt__key_hash(&e->key) & (s->nbuckets - 1)];
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	s->nents--;
	s->used -= e->bytes;
	pthread_mutex_unlock(&s->ilock);
	publish_counts(s);
	kvt__free(e);
}

/* Unlink the object's file and forget it. */
static void unlink_now(struct nv *s, struct nv_dir *d, const char *path)
{
	if (unlinkat(d->fd, path, 0) < 0 && errno != ENOENT) {
		KVT_WARN(s->log, "nvme: unlink %s/%s: %s", d->path, path, strerror(errno));
		ST_ADD(s, errors, 1);
	}
}

/* Unlink the object's file and forget it. Freeing a file's blocks costs milliseconds on
 * some file systems (ext4 mounted with discard: ~1-2 ms for 2 MiB), far too long for the
 * ring thread. So the file is renamed to a unique temp name here (~10-20 us, and in program
 * order with publishes of the same key) and that name is unlinked by io_uring's workers. A
 * crash in between leaves a ".tmp." file, which the next open deletes. now: the caller needs
 * the space back before it continues (the ENOSPC path), or there is no ring yet. */
/* Unlink a unique temp name on io_uring's workers (no ordering to keep with anything). */
static void unlink_async(struct nv *s, struct nv_dir *d, const char *name)
{
	struct io_uring_sqe *sqe = NULL;
	if (s->ring_ready && s->trash_inflight < s->qd && !(sqe = io_uring_get_sqe(&s->ring))) {
		io_uring_submit(&s->ring);
		sqe = io_uring_get_sqe(&s->ring);
	}
	if (!sqe) {
		unlink_now(s, d, name);
		return;
	}
	io_uring_prep_unlinkat(sqe, d->fd, name, 0);
	io_uring_sqe_set_data(sqe, &s->trash);
	s->trash_inflight++;
	/* Submit now: the kernel copies the name at submission and name[] may be on the
	 * caller's stack. Every other SQE in the ring is fully prepared whenever this runs. */
	io_uring_submit(&s->ring);
}

static void ent_unlink(struct nv *s, struct nv_ent *e, bool now)
{
	struct nv_dir *d = &s->dirs[e->dir];
	char path[NV_NAME_MAX], trash[NV_NAME_MAX];
	object_path(&e->key, path);
	ent_remove(s, e);
	if (now || !s->ring_ready || s->trash_inflight >= s->qd) {
		unlink_now(s, d, path);
		return;
	}
	snprintf(trash, sizeof(trash), "%.2s/" NV_TMP_PREFIX "evict.%d.%u", path, (int)s->pid,
		 ++s->tmpseq);
	if (renameat(d->fd, path, d->fd, trash) < 0) {
		unlink_now(s, d, path);
		return;
	}
	unlink_async(s, d, trash);
}

static void evict(struct nv *s, struct nv_ent *e, bool now)
{
	kvt__tier_evicted(s->tier, &e->key, e->bytes);
	ent_unlink(s, e, now);
	ST_ADD(s, evictions, 1);
}

/* Evict the LRU victim by making its file the temp file of write op, to be overwritten in
 * place: no unlink (discard), no block allocation, the steady state of a full cache costs
 * what an overwrite costs. Only for a victim of exactly op's size (full chunks all have one
 * size; a larger file would need a truncate) in op's directory, and never while a read of
 * it is in flight (that read would see the new bytes). The file is only ever visible under
 * a ".tmp." name until op renames it onto its own key, so crash safety is unchanged. */
static bool recycle(struct nv *s, struct nv_ent *v, struct nv_op *op)
{
	if (!op || op->recycled || v->dir != op->dir || v->bytes != op->len || v->opening ||
	    (v->fdc && v->fdc->refs))
		return false;
	char path[NV_NAME_MAX];
	object_path(&v->key, path);
	if (renameat(s->dirs[v->dir].fd, path, s->dirs[v->dir].fd, op->name) < 0)
		return false;
	kvt__tier_evicted(s->tier, &v->key, v->bytes);
	ent_remove(s, v);
	ST_ADD(s, evictions, 1);
	op->recycled = true;
	return true;
}

/* Spare files. A removed object's file (kvt_remove: a chunk replaced, a session dropped)
 * is not unlinked but renamed to a ".tmp.spare." name and kept, up to nvme.queue_depth of
 * them, and the next write of the same size overwrites it in place instead of creating and
 * allocating a new file: no unlink (a discard on ext4 mounted "discard"), no block
 * allocation, and with nvme.fsync=data an fdatasync that has no allocation to commit.
 * Spares count against nvme.bytes; make_room drops them before it evicts an object. They
 * are never objects (a crash leaves ".tmp." files, which the next open deletes) and only
 * ever become one through the temp-file write and rename of a new object, so crash safety
 * is that of every write. */
static void spare_drop(struct nv *s, uint32_t i, bool now)
{
	struct nv_spare *sp = &s->spares[i];
	if (now)
		unlink_now(s, &s->dirs[sp->dir], sp->name);
	else
		unlink_async(s, &s->dirs[sp->dir], sp->name);
	s->spare_bytes -= sp->bytes;
	s->spares[i] = s->spares[--s->nspares];
}

static void spare_drop_all(struct nv *s, bool now)
{
	while (s->nspares)
		spare_drop(s, s->nspares - 1, now);
}

/* Keep removed entry e's file as a spare instead of unlinking it; false if it cannot be
 * (a read of it in flight, no room under the capacity, the spare list full). */
static bool spare_keep(struct nv *s, struct nv_ent *e)
{
	if (!s->ring_ready || e->opening || (e->fdc && e->fdc->refs) ||
	    s->used + s->reserved + s->spare_bytes > s->capacity)
		return false;
	if (!s->spares && !(s->spares = kvt__calloc(s->qd, sizeof(*s->spares))))
		return false;
	if (s->nspares >= s->qd)
		spare_drop(s, 0, false); /* the oldest goes */
	struct nv_spare *sp = &s->spares[s->nspares];
	char path[NV_NAME_MAX];
	object_path(&e->key, path);
	snprintf(sp->name, sizeof(sp->name), "%.2s/" NV_TMP_PREFIX "spare.%d.%u", path,
		 (int)s->pid, ++s->tmpseq);
	if (renameat(s->dirs[e->dir].fd, path, s->dirs[e->dir].fd, sp->name) < 0)
		return false;
	sp->dir = e->dir;
	sp->bytes = e->bytes;
	s->nspares++;
	s->spare_bytes += e->bytes;
	ent_remove(s, e);
	return true;
}

/* Make a spare of op's size in op's directory op's temp file. */
static bool spare_take(struct nv *s, struct nv_op *op)
{
	for (uint32_t i = s->nspares; i-- > 0;) {
		struct nv_spare *sp = &s->spares[i];
		if (sp->dir != op->dir || sp->bytes != op->len)
			continue;
		memcpy(op->name, sp->name, sizeof(op->name));
		s->spare_bytes -= sp->bytes;
		s->spares[i] = s->spares[--s->nspares];
		op->recycled = true;
		return true;
	}
	return false;
}

/* Evict LRU objects until len more bytes fit under the capacity, recycling one victim's
 * file for op if it can (op may be NULL). Spare files go first. */
static int make_room(struct nv *s, uint64_t len, struct nv_op *op)
{
	if (len > s->capacity)
		return -ENOSPC; /* never fits: do not empty the cache for nothing */
	while (s->used + s->reserved + s->spare_bytes + len > s->capacity && s->nspares)
		spare_drop(s, 0, false);
	struct nv_ent *v;
	while (s->used + s->reserved + len > s->capacity && (v = victim(s, op)))
		if (!recycle(s, v, op))
			evict(s, v, false);
	return s->used + s->reserved + len > s->capacity ? -ENOSPC : 0;
}

/* After a real ENOSPC: evict LRU objects of one directory so that len bytes fit, counting
 * the file system's free space. Evicts nothing (returns 0) if even evicting every object of
 * the directory could not make room. Returns objects evicted. */
static int evict_in_dir(struct nv *s, uint32_t dir, uint64_t len)
{
	uint64_t freed = 0, in_dir = 0, avail = 0;
	int n = 0;
	struct statvfs vfs;
	if (!fstatvfs(s->dirs[dir].fd, &vfs))
		avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	len = len > avail ? len - avail : 0;
	KVT_DEBUG(s->log, "nvme: %s: ENOSPC with %" PRIu64 " bytes free, %" PRIu64 " needed",
		  s->dirs[dir].path, avail, len);
	len = KVT_ALIGN_UP(len, KVT_ALIGN) + KVT_ALIGN; /* a little slack for metadata */
	for (struct nv_ent *e = s->lru_head; e; e = e->next)
		if (e->dir == dir)
			in_dir += e->bytes;
	if (in_dir < len)
		return 0;
	/* Leaves first, like make_room; evicting one may make its parent the next leaf. */
	while (freed < len) {
		struct nv_ent *e = s->leaf_tail;
		while (e && e->dir != dir)
			e = e->lprev;
		if (!e)
			for (e = s->lru_tail; e && e->dir != dir; e = e->prev)
				;
		if (!e)
			break;
		freed += e->bytes;
		evict(s, e, true);
		n++;
	}
	return n;
}

/* ------------------------------------------------------------- fd cache */

static void fdc_list_unlink(struct nv *s, struct nv_fdc *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		s->fdc_head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		s->fdc_tail = c->prev;
	c->prev = c->next = NULL;
	s->nfdc--;
}

/* fd cache entries are recycled (ring thread only): no allocation per open. */
static void fdc_recycle(struct nv *s, struct nv_fdc *c)
{
	c->next = s->free_fdc;
	s->free_fdc = c;
}

static void fdc_free(struct nv *s, struct nv_fdc *c)
{
	close(c->fd);
	fdc_recycle(s, c);
}

/* The last reference to an evicted object's file: its close frees the blocks (slow, see
 * ent_unlink), so it runs on io_uring's workers. */
static void fdc_free_async(struct nv *s, struct nv_fdc *c)
{
	struct io_uring_sqe *sqe = s->ring_ready ? io_uring_get_sqe(&s->ring) : NULL;
	if (!sqe) {
		fdc_free(s, c);
		return;
	}
	KVT_DEBUG(s->log, "nvme: closing a removed object's last fd in the background");
	io_uring_prep_close(sqe, c->fd);
	io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
	io_uring_sqe_set_data(sqe, &s->trash);
	s->trash_inflight++;
	fdc_recycle(s, c);
}

/* The object is going away: its cached fd closes now, or at its last unref. */
static void fdc_detach(struct nv *s, struct nv_ent *e)
{
	struct nv_fdc *c = e->fdc;
	if (!c)
		return;
	e->fdc = NULL;
	c->ent = NULL;
	fdc_list_unlink(s, c);
	if (!c->refs)
		fdc_free(s, c);
}

static void fdc_trim(struct nv *s)
{
	struct nv_fdc *c = s->fdc_tail, *pv;
	for (; c && s->nfdc > s->open_files; c = pv) {
		pv = c->prev;
		if (c->refs)
			continue;
		c->ent->fdc = NULL;
		fdc_list_unlink(s, c);
		fdc_free(s, c);
	}
}

/* Out of descriptors: close every idle cached fd. Returns how many were closed. */
static uint32_t fdc_shed(struct nv *s)
{
	uint32_t keep = s->open_files, before = s->nfdc;
	s->open_files = 0;
	fdc_trim(s);
	s->open_files = keep;
	return before - s->nfdc;
}

static void fdc_put(struct nv *s, struct nv_fdc *c)
{
	if (--c->refs)
		return;
	if (!c->ent)
		fdc_free_async(s, c);
	else if (s->nfdc > s->open_files)
		fdc_trim(s);
}

static void fdc_use(struct nv *s, struct nv_fdc *c)
{
	c->refs++;
	if (s->fdc_head == c)
		return;
	fdc_list_unlink(s, c);
	c->next = s->fdc_head;
	if (s->fdc_head)
		s->fdc_head->prev = c;
	else
		s->fdc_tail = c;
	s->fdc_head = c;
	s->nfdc++;
}

/* A freshly opened read fd for op: cache it on the entry if the entry still wants one. */
static struct nv_fdc *fdc_adopt(struct nv *s, struct nv_op *op, int fd)
{
	struct nv_fdc *c = s->free_fdc;
	if (c)
		s->free_fdc = c->next;
	else if (!(c = kvt__malloc(sizeof(*c)))) {
		close(fd);
		return NULL;
	}
	memset(c, 0, sizeof(*c));
	c->fd = fd;
	c->refs = 1;
	struct nv_ent *e = ent_find(s, &op->key);
	if (e && e->fdc) {
		/* Another read opened it meanwhile: share that one. */
		fdc_free(s, c);
		fdc_use(s, e->fdc);
		return e->fdc;
	}
	if (e) {
		c->ent = e;
		e->fdc = c;
		c->next = s->fdc_head;
		if (s->fdc_head)
			s->fdc_head->prev = c;
		else
			s->fdc_tail = c;
		s->fdc_head = c;
		s->nfdc++;
		if (s->nfdc > s->open_files)
			fdc_trim(s);
	}
	return c;
}

/* --------------------------------------------------------- write budget */

static uint64_t hour_now(void)
{
	/* Wall clock, not monotonic: the buckets are saved across restarts and reboots. */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec / 3600;
}

/* The clock stepped back, or the saved budget is dated in the future: re-date the buckets
 * so that the newest is this hour. The counts keep their ages relative to one another, so
 * they roll off within a day instead of refusing writes until the clock catches up. */
static void budget_rebase(struct nv *s, uint64_t hour)
{
	uint64_t old[NV_BUCKETS];
	memcpy(old, s->bucket, sizeof(old));
	for (uint64_t k = 0; k < NV_BUCKETS; k++)
		s->bucket[(hour + NV_BUCKETS - k) % NV_BUCKETS] =
		    old[(s->bucket_hour + NV_BUCKETS - k) % NV_BUCKETS];
	s->bucket_hour = hour;
	s->budget_dirty = true;
}

static void budget_roll(struct nv *s, uint64_t hour)
{
	if (hour < s->bucket_hour)
		budget_rebase(s, hour);
	if (hour == s->bucket_hour)
		return;
	s->budget_dirty = true;
	if (hour - s->bucket_hour >= NV_BUCKETS) {
		memset(s->bucket, 0, sizeof(s->bucket));
	} else {
		for (uint64_t h = s->bucket_hour + 1; h <= hour; h++)
			s->bucket[h % NV_BUCKETS] = 0;
	}
	s->bucket_hour = hour;
	s->budget_used = 0;
	for (int i = 0; i < NV_BUCKETS; i++)
		s->budget_used += s->bucket[i];
}

/* Written at close and when the hour rolls (not per write: a crash loses at most the last
 * hour's count), through a temp name so a torn file is never read back. */
static void budget_save(struct nv *s)
{
	char text[64 + NV_BUCKETS * 24], tmp[64];
	size_t n = 0;
	pthread_mutex_lock(&s->block);
	n += (size_t)snprintf(text, sizeof(text), "kvtier-budget-v1 %" PRIu64, s->bucket_hour);
	for (int i = 0; i < NV_BUCKETS; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, " %" PRIu64, s->bucket[i]);
	n += (size_t)snprintf(text + n, sizeof(text) - n, "\n");
	s->budget_dirty = false;
	pthread_mutex_unlock(&s->block);
	int dfd = s->dirs[0].fd;
	snprintf(tmp, sizeof(tmp), NV_TMP_PREFIX "budget.%d", (int)s->pid);
	int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, s->file_mode);
	if (fd < 0)
		goto fail;
	bool ok = write(fd, text, n) == (ssize_t)n;
	close(fd);
	if (ok && renameat(dfd, tmp, dfd, NV_BUDGET_NAME) == 0)
		return;
	unlinkat(dfd, tmp, 0);
fail:
	KVT_WARN(s->log, "nvme: cannot save the write budget in %s: %s", s->dirs[0].path,
		 strerror(errno));
}

static void budget_load(struct nv *s)
{
	char text[64 + NV_BUCKETS * 24];
	int fd = openat(s->dirs[0].fd, NV_BUDGET_NAME, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0)
		return;
	text[n] = 0;
	uint64_t v[1 + NV_BUCKETS];
	char *p = text;
	if (strncmp(p, "kvtier-budget-v1 ", 17))
		goto bad;
	p += 17;
	for (int i = 0; i <= NV_BUCKETS; i++) {
		char *end;
		errno = 0;
		v[i] = strtoull(p, &end, 10);
		if (end == p || errno)
			goto bad;
		p = end;
	}
	s->bucket_hour = v[0];
	memcpy(s->bucket, v + 1, sizeof(s->bucket));
	s->budget_used = 0;
	for (int i = 0; i < NV_BUCKETS; i++)
		s->budget_used += s->bucket[i];
	uint64_t now = hour_now();
	if (v[0] > now)
		KVT_WARN(s->log,
			 "nvme: %s/%s is dated %" PRIu64 " hours in the future (the clock stepped "
			 "back?): counting it from now",
			 s->dirs[0].path, NV_BUDGET_NAME, v[0] - now);
	budget_roll(s, now);
	return;
bad:
	KVT_WARN(s->log, "nvme: ignoring a malformed %s/%s", s->dirs[0].path, NV_BUDGET_NAME);
}

/* Charge len to the budget if it fits: 0 or -EDQUOT. */
static int budget_take(struct nv *s, uint64_t len, uint32_t *hour_out)
{
	if (!s->budget)
		return 0;
	int rc = 0;
	uint64_t hour = hour_now();
	pthread_mutex_lock(&s->block);
	budget_roll(s, hour);
	hour = s->bucket_hour;
	if (s->budget_used + len > s->budget) {
		rc = -EDQUOT;
	} else {
		s->bucket[hour % NV_BUCKETS] += len;
		s->budget_used += len;
		*hour_out = (uint32_t)hour;
	}
	bool save = s->budget_dirty;
	pthread_mutex_unlock(&s->block);
	if (save)
		budget_save(s);
	return rc;
}

/* A write that never reached the media gives its budget back. */
static void budget_refund(struct nv *s, uint64_t len, uint32_t hour)
{
	if (!s->budget)
		return;
	pthread_mutex_lock(&s->block);
	if (hour + NV_BUCKETS > s->bucket_hour && s->bucket[hour % NV_BUCKETS] >= len) {
		s->bucket[hour % NV_BUCKETS] -= len;
		s->budget_used -= len;
	}
	pthread_mutex_unlock(&s->block);
}

/* A write not stored for lack of room or budget: counted, and reported at warning level,
 * the first at once and then at most one line per 10 s with the count since the last. */
static void report_skip(struct nv *s, int rc)
{
	ST_ADD(s, writes_skipped, 1);
	atomic_fetch_add(&s->skips_unreported, 1);
	uint64_t now = kvt__now_ns(), last = atomic_load(&s->last_skip_warn_ns);
	if (last && now - last < 10000000000ull)
		return;
	if (!atomic_compare_exchange_strong(&s->last_skip_warn_ns, &last, now))
		return;
	uint64_t n = atomic_exchange(&s->skips_unreported, 0);
	KVT_WARN(s->log, "nvme: %" PRIu64 " write(s) not stored: %s", n,
		 rc == -EDQUOT ? "the daily write budget (nvme.write_budget) is spent"
		 : rc == -EROFS ? "the store is open read-only"
				: "no room (nvme.bytes or the file system is full, and a chunk never "
				  "evicts its own prefix)");
}

/* ------------------------------------------------------------ ring core */

/* A slot and an SQE for op, or NULL when queue_depth SQEs are already in flight. */
static struct nv_io *io_start(struct nv *s, struct nv_op *op, enum nv_kind kind,
			      struct io_uring_sqe **sqe)
{
	struct nv_io *io = s->free_ios;
	if (!io)
		return NULL;
	/* The SQ holds queue_depth + 8 entries and we never have more than queue_depth + 1
	 * unsubmitted, so this cannot fail; be defensive anyway. */
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

static void io_put(struct nv *s, struct nv_io *io)
{
	io->op = NULL;
	io->next_free = s->free_ios;
	s->free_ios = io;
}

static void ready_push(struct nv *s, struct nv_op *op)
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

static void finish(struct nv *s, struct nv_op *op, int res);

static void check_flushes(struct nv *s)
{
	while (s->flush_head && (!s->whead || s->whead->seq > s->flush_head->seq)) {
		struct nv_op *f = s->flush_head;
		s->flush_head = f->next;
		if (!s->flush_head)
			s->flush_tail = NULL;
		finish(s, f, 0);
	}
}

static struct nv_op **leader_slot(struct nv *s, const struct kvt_key *k)
{
	struct nv_op **pp = &s->leaders[kvt__key_hash(k) & (NV_LEADER_BUCKETS - 1)];
	while (*pp && !kvt__key_eq(&(*pp)->key, k))
		pp = &(*pp)->lnext;
	return pp;
}

static void finish(struct nv *s, struct nv_op *op, int res)
{
	kvt_tier_cb cb = op->cb;
	void *arg = op->arg;
	bool was_write = op->type == OP_WRITE;
	struct nv_op *followers = NULL;
	ready_remove(s, op);
	if (was_write && op->parent_uid) { /* not handed to an entry: the write failed */
		parent_count(s, &op->parent, -1, op->parent_uid);
		op->parent_uid = 0;
	}
	if (op->leader) {
		struct nv_op **pp = leader_slot(s, &op->key);
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
		finish(s, f, res);
	}
	if (was_write)
		check_flushes(s);
}

/* ----------------------------------------------------------- write path */

static void tmp_name(struct nv *s, struct nv_op *op)
{
	char hex[2 * KVT_KEY_BYTES + 1];
	kvt_key_to_hex(&op->key, hex);
	snprintf(op->name, sizeof(op->name), "%.2s/" NV_TMP_PREFIX "%s.%d.%u", hex, hex,
		 (int)s->pid, ++s->tmpseq);
}

static void write_release(struct nv *s, struct nv_op *op)
{
	s->reserved -= op->len;
}

/* The temp file is closed and complete: rename it onto the object's name and index it. */
static int write_publish(struct nv *s, struct nv_op *op)
{
	struct nv_dir *d = &s->dirs[op->dir];
	char final[NV_NAME_MAX];
	object_path(&op->key, final);
	if (renameat(d->fd, op->name, d->fd, final) < 0)
		return -errno;
	struct nv_ent *e = ent_find(s, &op->key);
	if (e) {
		/* Same key written twice at once, or found in another directory (nvme.dirs
		 * changed): the newest copy wins. */
		if (e->dir != op->dir) {
			unlinkat(s->dirs[e->dir].fd, final, 0);
			e->dir = op->dir;
		}
		fdc_detach(s, e);
		pthread_mutex_lock(&s->ilock);
		s->used = s->used - e->bytes + op->len;
		e->bytes = op->len;
		e->gen = ++s->gen;
		pthread_mutex_unlock(&s->ilock);
		lru_touch(s, e);
		publish_counts(s);
	} else if (!(e = ent_insert(s, &op->key, op->dir, op->len))) {
		/* Cannot index it: do not leave an object we do not account for. */
		unlinkat(d->fd, final, 0);
		return -ENOMEM; /* the failure path releases the reservation */
	} else {
		e->uid = op->uid; /* what children in flight counted on */
	}
	/* The entry takes over the children counted on this write, and its own link. */
	if ((e->children += op->children) > 0)
		leaf_unlink(s, e);
	op->children = 0;
	if (op->has_parent && !e->has_parent) {
		e->parent = op->parent;
		e->has_parent = true;
	}
	if (op->parent_uid && !e->parent_uid) {
		e->parent_uid = op->parent_uid;
		op->parent_uid = 0;
	}
	write_release(s, op);
	ST_ADD(s, writes, 1);
	ST_ADD(s, write_bytes, op->len);
	return 0;
}

static bool write_fail(struct nv *s, struct nv_op *op)
{
	struct nv_dir *d = &s->dirs[op->dir];
	if (op->fd >= 0) {
		close(op->fd);
		op->fd = -1;
	}
	if (unlinkat(d->fd, op->name, 0) < 0 && errno != ENOENT)
		KVT_WARN(s->log, "nvme: cannot remove temp file %s/%s: %s", d->path, op->name,
			 strerror(errno));
	if (op->err == -ENOSPC && !op->retried && !s->cancelled) {
		uint32_t dropped = s->nspares;
		spare_drop_all(s, true);
		int n = evict_in_dir(s, op->dir, op->len) + (int)dropped;
		if (n > 0) {
			KVT_INFO(s->log, "nvme: %s full: evicted %d objects, retrying once",
				 d->path, n);
			op->retried = true;
			op->recycled = false;
			op->err = 0;
			op->cursor = 0;
			tmp_name(s, op);
			op->stage = ST_W_OPEN;
			return false;
		}
	}
	write_release(s, op);
	budget_refund(s, op->len, op->budget_hour);
	if (op->err == -ENOSPC) {
		report_skip(s, -ENOSPC);
	} else {
		ST_ADD(s, errors, 1);
		KVT_WARN(s->log, "nvme: write to %s failed: %s", d->path, strerror(-op->err));
	}
	return true;
}

/* Issue what the op can issue now. Returns with the op waiting for CQEs, parked in the
 * ready list (no free slot), or finished. */
static void pump(struct nv *s, struct nv_op *op)
{
	struct nv_io *io;
	struct io_uring_sqe *sqe;
	for (;;) {
		switch (op->stage) {
		case ST_WAIT:
		case ST_DONE:
			return;
		case ST_W_OPEN: {
			if (!(io = io_start(s, op, IO_OPEN, &sqe)))
				goto blocked;
			int fl = O_WRONLY | O_CLOEXEC;
			if (!op->recycled)
				fl |= O_CREAT | O_EXCL;
			if (s->dirs[op->dir].direct)
				fl |= O_DIRECT;
			io_uring_prep_openat(sqe, s->dirs[op->dir].fd, op->name, fl, s->file_mode);
			op->stage = ST_WAIT;
			return;
		}
		case ST_W_DATA:
			while (!op->err && op->cursor < op->len) {
				if (!(io = io_start(s, op, IO_WRITE, &sqe)))
					goto blocked;
				io->off = op->cursor;
				io->len = (uint32_t)KVT_MIN(op->len - op->cursor, NV_IO_MAX);
				io->buf = (uint8_t *)op->obj + op->cursor;
				op->cursor += io->len;
				io_uring_prep_write(sqe, op->fd, io->buf, io->len, io->off);
			}
			if (op->pending)
				return; /* CQEs call pump again */
			if (op->err)
				op->stage = ST_W_FAIL;
			else
				op->stage = s->fsync_mode == NV_FSYNC_NONE ? ST_W_CLOSE : ST_W_SYNC;
			break;
		case ST_W_SYNC:
			if (!(io = io_start(s, op, IO_FSYNC, &sqe)))
				goto blocked;
			io_uring_prep_fsync(sqe, op->fd, IORING_FSYNC_DATASYNC);
			op->stage = ST_WAIT;
			return;
		case ST_W_CLOSE:
			if (!(io = io_start(s, op, IO_CLOSE, &sqe)))
				goto blocked;
			io_uring_prep_close(sqe, op->fd);
			op->fd = -1;
			op->stage = ST_WAIT;
			return;
		case ST_W_DIRSYNC: {
			if (!(io = io_start(s, op, IO_DIRSYNC, &sqe)))
				goto blocked;
			char sub[3] = {op->name[0], op->name[1], 0};
			op->fd =
			    openat(s->dirs[op->dir].fd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (op->fd < 0) {
				op->err = -errno;
				io_uring_prep_nop(sqe);
			} else {
				io_uring_prep_fsync(sqe, op->fd, 0);
			}
			op->stage = ST_WAIT;
			return;
		}
		case ST_W_FAIL:
			if (write_fail(s, op)) {
				finish(s, op, op->err);
				return;
			}
			break;
		case ST_R_OPEN: {
			if (!(io = io_start(s, op, IO_OPEN, &sqe)))
				goto blocked;
			int fl = O_RDONLY | O_CLOEXEC | O_NOFOLLOW;
			if (s->dirs[op->dir].direct)
				fl |= O_DIRECT;
			io_uring_prep_openat(sqe, s->dirs[op->dir].fd, op->name, fl, 0);
			op->stage = ST_WAIT;
			return;
		}
		case ST_R_DATA:
			while (!op->err && op->si < op->nsegs) {
				struct kvt_seg *g = &op->segs[op->si];
				/* Aligned past a misaligned end (a damaged object): O_DIRECT
				 * refuses an unaligned length, and the read stops short at EOF. */
				uint64_t end =
				    KVT_MIN(g->off + g->len, KVT_ALIGN_UP(op->size, KVT_ALIGN));
				if (g->off + op->soff >= end) {
					op->si++;
					op->soff = 0;
					continue;
				}
				if (!(io = io_start(s, op, IO_READ, &sqe)))
					goto blocked;
				io->off = g->off + op->soff;
				io->len = (uint32_t)KVT_MIN(end - io->off, NV_IO_MAX);
				io->buf = (uint8_t *)g->buf + op->soff;
				op->soff += io->len;
				io_uring_prep_read(sqe, op->fdc->fd, io->buf, io->len, io->off);
			}
			if (op->pending)
				return;
			fdc_put(s, op->fdc);
			op->fdc = NULL;
			if (op->err) {
				ST_ADD(s, errors, 1);
				finish(s, op, op->err);
			} else {
				ST_ADD(s, reads, 1);
				ST_ADD(s, read_bytes, op->total);
				finish(s, op, (int)KVT_MIN(op->total, (uint64_t)INT32_MAX));
			}
			return;
		}
	}
blocked:
	ready_push(s, op);
}

static void on_cqe(struct nv *s, struct nv_io *io, int res)
{
	struct nv_op *op = io->op;
	op->pending--;
	switch (io->kind) {
	case IO_OPEN: {
		io_put(s, io);
		struct nv_ent *re = NULL;
		if (op->type == OP_READ && (re = ent_find(s, &op->key)) && re->gen == op->gen)
			re->opening--;
		else
			re = NULL;
		if ((res == -EMFILE || res == -ENFILE) && !op->reopened && fdc_shed(s)) {
			KVT_WARN(s->log, "nvme: out of file descriptors: closed idle cached ones "
					 "(lower nvme.open_files or raise RLIMIT_NOFILE)");
			op->reopened = true;
			if (op->type == OP_WRITE) {
				op->stage = ST_W_OPEN;
			} else if (!re) {
				finish(s, op, -ENOENT); /* removed meanwhile */
				return;
			} else {
				re->opening++;
				op->stage = ST_R_OPEN;
			}
			break;
		}
		if (op->type == OP_WRITE) {
			if (res < 0) {
				op->err = res;
				op->stage = ST_W_FAIL;
			} else {
				op->fd = res;
				op->stage = ST_W_DATA;
			}
		} else if (res < 0) {
			if (res == -ENOENT) {
				/* The file vanished behind our back: forget it (unless the entry
				 * is a newer one, published while this open was in flight). */
				struct nv_ent *e = ent_find(s, &op->key);
				if (e && e->gen == op->gen && !e->fdc)
					ent_remove(s, e);
			} else {
				ST_ADD(s, errors, 1);
				KVT_WARN(s->log, "nvme: open %s/%s: %s", s->dirs[op->dir].path,
					 op->name, strerror(-res));
			}
			finish(s, op, res);
			return;
		} else if (!(op->fdc = fdc_adopt(s, op, res))) {
			finish(s, op, -ENOMEM);
			return;
		} else {
			op->stage = ST_R_DATA;
		}
		break;
	}
	case IO_WRITE:
	case IO_READ:
		if (res < 0) {
			if (!op->err)
				op->err = res;
		} else if (io->kind == IO_READ) {
			op->total += (uint64_t)res;
			if (res > 0 && (uint32_t)res < io->len && !op->err &&
			    io->off + (uint64_t)res < op->size) {
				/* Short read inside the object's known size: read the rest. */
				io->off += (uint64_t)res;
				io->buf += res;
				io->len -= (uint32_t)res;
				struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
				if (sqe) {
					op->pending++;
					io_uring_prep_read(sqe, op->fdc->fd, io->buf, io->len,
							   io->off);
					io_uring_sqe_set_data(sqe, io);
					return;
				}
				op->err = -EIO;
			}
		} else if ((uint32_t)res < io->len && !op->err) {
			if (res == 0) {
				op->err = -ENOSPC;
			} else {
				io->off += (uint64_t)res;
				io->buf += res;
				io->len -= (uint32_t)res;
				struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
				if (sqe) {
					op->pending++;
					io_uring_prep_write(sqe, op->fd, io->buf, io->len, io->off);
					io_uring_sqe_set_data(sqe, io);
					return;
				}
				op->err = -EIO;
			}
		}
		io_put(s, io);
		break;
	case IO_FSYNC:
		io_put(s, io);
		if (res < 0) {
			op->err = res;
			op->stage = ST_W_FAIL;
		} else {
			op->stage = ST_W_CLOSE;
		}
		break;
	case IO_CLOSE:
		io_put(s, io);
		if (res < 0) {
			op->err = res;
			op->stage = ST_W_FAIL;
			break;
		}
		if ((res = write_publish(s, op)) < 0) {
			op->err = res;
			op->stage = ST_W_FAIL;
		} else if (s->fsync_mode == NV_FSYNC_FULL) {
			op->stage = ST_W_DIRSYNC;
		} else {
			finish(s, op, 0);
			return;
		}
		break;
	case IO_DIRSYNC:
		io_put(s, io);
		if (op->fd >= 0)
			close(op->fd);
		op->fd = -1;
		if (res < 0 && !op->err)
			op->err = res;
		if (op->err) {
			/* Published but its directory entry may not be durable: say so. */
			ST_ADD(s, errors, 1);
			KVT_WARN(s->log, "nvme: directory fsync in %s: %s", s->dirs[op->dir].path,
				 strerror(-op->err));
		}
		finish(s, op, op->err);
		return;
	case IO_WAKE:
		break;
	}
	pump(s, op);
}

/* ------------------------------------------------------- starting ops */

static void start_write(struct nv *s, struct nv_op *op)
{
	op->wnext = NULL;
	op->wprev = s->wtail;
	if (s->wtail)
		s->wtail->wnext = op;
	else
		s->whead = op;
	s->wtail = op;

	struct nv_ent *e = ent_find(s, &op->key);
	if (e && e->bytes >= KVT_HEADER_BYTES && e->bytes % KVT_ALIGN == 0) {
		/* Content-addressed: the same key is the same bytes. (A file too short or
		 * misaligned to be an object is damage: it gets overwritten.) */
		lru_touch(s, e);
		if (op->has_parent && !e->parent_uid) {
			e->has_parent = false; /* (re)learn it, counting on the parent now */
			chain_link(s, e, &op->parent);
		}
		finish(s, op, 0);
		return;
	}
	struct nv_op **slot = leader_slot(s, &op->key);
	if (*slot) {
		/* The same bytes are being written right now: share that write's result. */
		op->lnext = (*slot)->followers;
		(*slot)->followers = op;
		return;
	}
	op->dir = key_dir(s, &op->key);
	op->fd = -1;
	tmp_name(s, op);
	if (op->has_parent && !ent_find(s, &op->parent) && !*leader_slot(s, &op->parent) &&
	    refused_has(s, &op->parent)) {
		refused_add(s, &op->key);
		report_skip(s, -ENOSPC);
		finish(s, op, -ENOSPC);
		return;
	}
	int rc = budget_take(s, op->len, &op->budget_hour);
	if (!rc)
		spare_take(s, op);
	if (!rc && (rc = make_room(s, op->len, op)) < 0) {
		budget_refund(s, op->len, op->budget_hour);
		refused_add(s, &op->key);
	}
	if (rc < 0) {
		if (op->recycled)
			unlink_async(s, &s->dirs[op->dir], op->name);
		report_skip(s, rc);
		finish(s, op, rc);
		return;
	}
	s->reserved += op->len;
	op->leader = true;
	op->lnext = NULL;
	*slot = op;
	/* Counted now, not at publish: its ancestors must stop being victims while it is in
	 * flight, and it may publish before its parent does. */
	op->uid = e ? e->uid : ++s->uids;
	if (op->has_parent && !kvt__key_eq(&op->parent, &op->key))
		op->parent_uid = parent_count(s, &op->parent, +1, 0);
	op->stage = ST_W_OPEN;
	pump(s, op);
}

static void start_read(struct nv *s, struct nv_op *op)
{
	struct nv_ent *e = ent_find(s, &op->key);
	if (!e) {
		finish(s, op, -ENOENT);
		return;
	}
	lru_touch(s, e);
	op->size = e->bytes;
	op->dir = e->dir;
	op->gen = e->gen;
	if (e->fdc) {
		fdc_use(s, e->fdc);
		op->fdc = e->fdc;
		op->stage = ST_R_DATA;
	} else {
		object_path(&op->key, op->name);
		op->stage = ST_R_OPEN;
		e->opening++;
	}
	pump(s, op);
}

static void start_op(struct nv *s, struct nv_op *op)
{
	s->active++;
	struct nv_ent *e;
	switch (op->type) {
	case OP_WRITE:
		start_write(s, op);
		break;
	case OP_READ:
		start_read(s, op);
		break;
	case OP_EXISTS:
		for (uint32_t i = 0; i < op->n; i++)
			op->present[i] = (e = ent_find(s, &op->keys[i])) &&
					 e->bytes >= KVT_HEADER_BYTES;
		finish(s, op, 0);
		break;
	case OP_REMOVE:
		if (!(e = ent_find(s, &op->key))) {
			finish(s, op, -ENOENT);
			break;
		}
		if (!spare_keep(s, e))
			ent_unlink(s, e, false);
		ST_ADD(s, removes, 1);
		finish(s, op, 0);
		break;
	case OP_DROP:
		if ((e = ent_find(s, &op->key))) {
			KVT_WARN(s->log, "nvme: dropping corrupt object in %s",
				 s->dirs[e->dir].path);
			ent_unlink(s, e, false);
		}
		finish(s, op, 0);
		break;
	case OP_FLUSH:
		if (!s->whead || s->whead->seq > op->seq) {
			finish(s, op, 0);
			break;
		}
		op->next = NULL;
		if (s->flush_tail)
			s->flush_tail->next = op;
		else
			s->flush_head = op;
		s->flush_tail = op;
		break;
	}
}

/* Close: ops that have not put anything in the ring are cancelled. */
static void cancel_unissued(struct nv *s)
{
	struct nv_op *op = s->ready_head, *nx;
	for (; op; op = nx) {
		nx = op->next;
		if (op->issued || op->pending)
			continue;
		if (op->type == OP_WRITE) {
			write_release(s, op);
			budget_refund(s, op->len, op->budget_hour);
			if (op->recycled)
				unlink_async(s, &s->dirs[op->dir], op->name);
		}
		if (op->fdc) {
			fdc_put(s, op->fdc);
			op->fdc = NULL;
		}
		if (op->type == OP_READ && op->stage == ST_R_OPEN) {
			struct nv_ent *e = ent_find(s, &op->key);
			if (e && e->gen == op->gen)
				e->opening--;
		}
		finish(s, op, -ECANCELED);
	}
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
		if (closing) {
			/* Never started: complete without touching any state. */
			kvt_tier_cb cb = op->cb;
			void *arg = op->arg;
			op_release(s, op);
			if (cb)
				cb(arg, -ECANCELED);
		} else {
			start_op(s, op);
		}
	}
	if (closing && !s->cancelled) {
		s->cancelled = true;
		cancel_unissued(s);
	}
	return closing;
}

static void pump_ready(struct nv *s)
{
	while (s->ready_head && s->free_ios) {
		struct nv_op *op = s->ready_head;
		ready_remove(s, op);
		pump(s, op);
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

static void *ring_main(void *arg)
{
	struct nv *s = arg;
	int rc = ring_init(s);
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
		bool closing = drain_queue(s);
		pump_ready(s);
		if (closing && !s->active && !s->trash_inflight)
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
			} else {
				on_cqe(s, io, res);
			}
		}
		if (!s->wake_armed)
			arm_wake(s);
	}
	io_uring_queue_exit(&s->ring);
	return NULL;
}

/* ------------------------------------------------------- submit side */

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

static int nv_write_chained(struct kvt_tier *t, const struct kvt_key *key,
			    const struct kvt_key *parent, const void *obj, uint64_t len,
			    kvt_tier_cb cb, void *arg)
{
	struct nv *s = t->state;
	if (!len || len % KVT_ALIGN || (uintptr_t)obj % KVT_ALIGN || !cb)
		return -EINVAL;
	if (s->ro)
		return -EROFS;
	struct nv_op *op = op_new(s, OP_WRITE, cb, arg);
	if (!op)
		return -ENOMEM;
	op->key = *key;
	op->obj = obj;
	op->len = len;
	if (parent) {
		op->has_parent = true;
		op->parent = *parent;
	}
	return op_submit(s, op);
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
	if (len > s->capacity)
		return -ENOSPC;
	if (!s->budget)
		return 0;
	int rc = 0;
	pthread_mutex_lock(&s->block);
	budget_roll(s, hour_now());
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
	out->capacity_bytes = s->capacity;
	out->reads = ST_GET(s, reads);
	out->read_bytes = ST_GET(s, read_bytes);
	out->writes = ST_GET(s, writes);
	out->write_bytes = ST_GET(s, write_bytes);
	out->evictions = ST_GET(s, evictions);
	out->checksum_failures = ST_GET(s, checksum_failures);
	out->errors = ST_GET(s, errors);
	out->writes_skipped = ST_GET(s, writes_skipped);
	out->removes = ST_GET(s, removes);
	out->write_budget_bytes = s->budget;
	if (s->budget) {
		pthread_mutex_lock(&s->block);
		budget_roll(s, hour_now()); /* buckets older than a day no longer count */
		out->write_budget_used_bytes = s->budget_used;
		pthread_mutex_unlock(&s->block);
	}
}

static int nv_scan(struct kvt_tier *t, kvt_scan_fn fn, void *arg)
{
	struct nv *s = t->state;
	pthread_mutex_lock(&s->ilock);
	for (uint64_t i = 0; i < s->nbuckets; i++)
		for (struct nv_ent *e = s->buckets[i]; e; e = e->hnext)
			if (fn(arg, &e->key, e->bytes))
				goto out;
out:
	pthread_mutex_unlock(&s->ilock);
	return 0;
}

/* ------------------------------------------------------- open / close */

static int mkdir_p(const char *path, mode_t mode)
{
	char buf[4096];
	size_t n = strlen(path);
	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != 0)
			continue;
		char c = buf[i];
		buf[i] = 0;
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -errno;
		buf[i] = c;
	}
	return 0;
}

/* 1 if the directory takes O_DIRECT I/O, 0 if the file system refuses it, <0 error. */
static int probe_direct(struct nv *s, struct nv_dir *d)
{
	char name[64];
	snprintf(name, sizeof(name), NV_TMP_PREFIX "probe.%d", (int)s->pid);
	int fd = openat(d->fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT,
			s->file_mode);
	if (fd < 0) {
		int e = errno;
		unlinkat(d->fd, name, 0); /* some file systems create it before refusing */
		return e == EINVAL ? 0 : -e;
	}
	int rc = 1;
	void *buf = kvt__aligned_alloc(KVT_ALIGN);
	if (!buf) {
		rc = -ENOMEM;
	} else {
		memset(buf, 0, KVT_ALIGN);
		/* Only EINVAL says "no O_DIRECT"; a full disk must not stop a restart. */
		if (pwrite(fd, buf, KVT_ALIGN, 0) < 0 && errno == EINVAL)
			rc = 0;
		kvt__free_aligned(buf, KVT_ALIGN);
	}
	close(fd);
	unlinkat(d->fd, name, 0);
	return rc;
}

struct scan_item {
	struct nv_ent *e;
	int64_t mtime_ns;
};

static int cmp_mtime(const void *a, const void *b)
{
	const struct scan_item *x = a, *y = b;
	return x->mtime_ns < y->mtime_ns ? -1 : x->mtime_ns > y->mtime_ns;
}

static int anomaly_add(struct nv *s, const char *dir, const char *sub, const char *name,
		       const char *why)
{
	char **a = kvt__realloc(s->anomalies, (s->n_anomalies + 1) * sizeof(*a));
	if (!a)
		return -ENOMEM;
	s->anomalies = a;
	size_t n = strlen(dir) + strlen(sub) + strlen(name) + strlen(why) + 4;
	if (!(a[s->n_anomalies] = kvt__malloc(n)))
		return -ENOMEM;
	snprintf(a[s->n_anomalies++], n, "%s/%s/%s\t%s", dir, sub, name, why);
	return 0;
}

static int nv_scan_anomalies(struct kvt_tier *t,
			     void (*fn)(void *arg, const char *path, const char *why), void *arg)
{
	struct nv *s = t->state;
	for (size_t i = 0; i < s->n_anomalies; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s", s->anomalies[i]);
		char *tab = strchr(path, '\t');
		*tab = 0;
		fn(arg, path, tab + 1);
	}
	return 0;
}

/* The file systems under nvme.dirs can hold what is stored there plus their free space;
 * nvme.bytes above that, less 2 % of each file system kept free, would fill them to the
 * last block (and fail other programs' writes): clamp it, with a warning. */
static void clamp_capacity(struct nv *s)
{
	uint64_t room = 0;
	dev_t devs[64];
	uint32_t ndevs = 0;
	for (uint32_t i = 0; i < s->ndirs; i++) {
		struct stat st;
		struct statvfs vfs;
		if (fstat(s->dirs[i].fd, &st) < 0 || fstatvfs(s->dirs[i].fd, &vfs) < 0 ||
		    !vfs.f_blocks)
			return; /* cannot tell (ramfs has no size): leave nvme.bytes as is */
		bool seen = false;
		for (uint32_t j = 0; j < ndevs; j++)
			seen = seen || devs[j] == st.st_dev;
		if (seen)
			continue;
		if (ndevs == KVT_ARRAY_SIZE(devs))
			return;
		devs[ndevs++] = st.st_dev;
		uint64_t ours = 0;
		for (struct nv_ent *e = s->lru_head; e; e = e->next) {
			struct stat ds;
			if (e->dir == i || (!fstat(s->dirs[e->dir].fd, &ds) && ds.st_dev == st.st_dev))
				ours += e->bytes;
		}
		uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
		uint64_t keep = (uint64_t)vfs.f_blocks * vfs.f_frsize / 50;
		room += avail + ours > keep ? avail + ours - keep : 0;
	}
	if (room >= s->capacity)
		return;
	KVT_WARN(s->log,
		 "nvme: nvme.bytes (%" PRIu64 ") is more than the file system(s) under nvme.dirs "
		 "can hold while keeping 2 %% free: capacity clamped to %" PRIu64 " bytes%s",
		 s->capacity, room,
		 room < s->object_max ? " (less than one object: writes will be refused)" : "");
	s->capacity = room;
}

/* Add the objects of one directory to the index, cleaning up crash debris. */
static int scan_dir(struct nv *s, uint32_t di, struct scan_item **items, size_t *n, size_t *cap)
{
	struct nv_dir *d = &s->dirs[di];
	uint64_t temps = 0, junk = 0, odd = 0, dups = 0;
	for (int sub = -1; sub < 256; sub++) {
		char subname[3] = "";
		int sfd;
		if (sub < 0) {
			sfd = dup(d->fd); /* stray probe files at the top */
		} else {
			snprintf(subname, sizeof(subname), "%02x", sub);
			if (!s->ro && mkdirat(d->fd, subname, s->dir_mode) < 0 && errno != EEXIST)
				return -errno;
			sfd = openat(d->fd, subname, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
			if (sfd < 0 && s->ro && errno == ENOENT)
				continue; /* inspection creates nothing */
		}
		if (sfd < 0)
			return -errno;
		DIR *dir = fdopendir(sfd);
		if (!dir) {
			int e = -errno;
			close(sfd);
			return e;
		}
		struct dirent *de;
		while ((de = readdir(dir))) {
			const char *nm = de->d_name;
			if (!strncmp(nm, NV_TMP_PREFIX, strlen(NV_TMP_PREFIX))) {
				/* Ours or a dead instance's (we hold the lock): never a reader's. */
				if (!s->ro && unlinkat(sfd, nm, 0) == 0)
					temps++;
				continue;
			}
			struct kvt_key k;
			if (sub < 0 || parse_object_name(nm, &k) < 0 || k.bytes[0] != sub)
				continue; /* not ours: leave it alone */
			struct stat st;
			if (fstatat(sfd, nm, &st, AT_SYMLINK_NOFOLLOW) < 0)
				continue; /* gone meanwhile */
			if (!S_ISREG(st.st_mode)) {
				/* Never followed, never deleted: reported (scan_anomalies). */
				int rc = anomaly_add(s, d->path, subname, nm,
						     S_ISLNK(st.st_mode)   ? "a symbolic link"
						     : S_ISDIR(st.st_mode) ? "a directory"
									   : "not a regular file");
				if (rc < 0) {
					closedir(dir);
					return rc;
				}
				odd++;
				continue;
			}
			if (ent_find(s, &k)) {
				/* Also in another directory (nvme.dirs changed): one copy is
				 * enough. Inspection leaves it. */
				if (!s->ro && unlinkat(sfd, nm, 0) == 0)
					dups++;
				continue;
			}
			if (st.st_size < KVT_HEADER_BYTES || st.st_size % KVT_ALIGN)
				junk++; /* indexed all the same: the format judges it when read */
			if (*n == *cap) {
				size_t nc = *cap ? *cap * 2 : 1024;
				struct scan_item *ni = kvt__realloc(*items, nc * sizeof(**items));
				if (!ni) {
					closedir(dir);
					return -ENOMEM;
				}
				*items = ni;
				*cap = nc;
			}
			struct nv_ent *e = ent_insert(s, &k, di, (uint64_t)st.st_size);
			if (!e) {
				closedir(dir);
				return -ENOMEM;
			}
			(*items)[*n].e = e;
			(*items)[*n].mtime_ns =
			    (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
			(*n)++;
		}
		closedir(dir);
	}
	if (temps || dups)
		KVT_INFO(s->log,
			 "nvme: %s: removed %" PRIu64 " temp files left by a crash and %" PRIu64
			 " duplicate objects",
			 d->path, temps, dups);
	if ((junk || odd) && !s->ro)
		KVT_WARN(s->log,
			 "nvme: %s: %" PRIu64 " object files too short or misaligned to be objects "
			 "and %" PRIu64 " entries that are not regular files: kept; `kvtier verify` "
			 "reports them",
			 d->path, junk, odd);
	return 0;
}

/* Parent links survive restarts: (child key, parent key) pairs, written through a temp
 * name at close. Ring thread gone or not started: single-threaded. */
static void chains_save(struct nv *s)
{
	char tmp[64];
	int dfd = s->dirs[0].fd;
	snprintf(tmp, sizeof(tmp), NV_TMP_PREFIX "chains.%d", (int)s->pid);
	FILE *f = NULL;
	int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, s->file_mode);
	if (fd >= 0 && !(f = fdopen(fd, "w")))
		close(fd);
	bool ok = f && fputs(NV_CHAINS_MAGIC, f) >= 0;
	for (struct nv_ent *e = s->lru_tail; ok && e; e = e->prev)
		if (e->has_parent)
			ok = fwrite(&e->key, sizeof(e->key), 1, f) == 1 &&
			     fwrite(&e->parent, sizeof(e->parent), 1, f) == 1;
	if (f && fclose(f) != 0)
		ok = false;
	if (ok && renameat(dfd, tmp, dfd, NV_CHAINS_NAME) == 0)
		return;
	unlinkat(dfd, tmp, 0);
	KVT_WARN(s->log, "nvme: cannot save parent links in %s: %s", s->dirs[0].path,
		 strerror(errno));
}

static void chains_load(struct nv *s)
{
	int fd = openat(s->dirs[0].fd, NV_CHAINS_NAME, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	FILE *f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return;
	}
	char magic[sizeof(NV_CHAINS_MAGIC)] = {0};
	struct kvt_key pair[2];
	uint64_t n = 0;
	if (!fgets(magic, sizeof(magic), f) || strcmp(magic, NV_CHAINS_MAGIC)) {
		KVT_WARN(s->log, "nvme: ignoring a malformed %s/%s", s->dirs[0].path,
			 NV_CHAINS_NAME);
	} else {
		while (fread(pair, sizeof(pair), 1, f) == 1) {
			struct nv_ent *e = ent_find(s, &pair[0]);
			if (e && !e->has_parent) {
				chain_link(s, e, &pair[1]);
				n += e->parent_uid != 0;
			}
		}
	}
	fclose(f);
	KVT_DEBUG(s->log, "nvme: %" PRIu64 " parent links restored", n);
}

static int rebuild_index(struct nv *s)
{
	struct scan_item *items = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;
	for (uint32_t i = 0; i < s->ndirs && !rc; i++)
		rc = scan_dir(s, i, &items, &n, &cap);
	if (!rc && n) {
		/* Oldest first, each pushed to the head: the newest ends up most recent. */
		qsort(items, n, sizeof(*items), cmp_mtime);
		for (size_t i = 0; i < n; i++)
			lru_unlink(s, items[i].e);
		for (size_t i = 0; i < n; i++) {
			lru_push_head(s, items[i].e);
			leaf_push(s, items[i].e, true);
		}
	}
	kvt__free(items);
	if (!rc && !s->ro)
		chains_load(s);
	if (!rc && !s->ro)
		clamp_capacity(s);
	if (!rc && !s->ro && s->used > s->capacity) {
		uint64_t before = s->nents;
		make_room(s, 0, NULL);
		KVT_INFO(s->log, "nvme: over capacity at open: evicted %" PRIu64 " objects",
			 before - s->nents);
	}
	return rc;
}

struct dir_ctx {
	struct nv *s;
	uint32_t n;
};

static int count_dir(void *arg, const char *item)
{
	(void)item;
	((struct dir_ctx *)arg)->n++;
	return 0;
}

static int add_dir(void *arg, const char *item)
{
	struct dir_ctx *c = arg;
	struct nv_dir *d = &c->s->dirs[c->s->ndirs++];
	d->fd = d->lock_fd = -1;
	return (d->path = kvt__strdup(item)) ? 0 : -ENOMEM;
}

/* Read-only: a directory is a store if a writer has been there (its lock file or one of
 * its fan-out subdirectories exists). Anything else is most likely a mistyped path. */
static int check_store(struct nv *s, struct nv_dir *d)
{
	struct stat st;
	if (!fstatat(d->fd, NV_LOCK_NAME, &st, AT_SYMLINK_NOFOLLOW))
		return 0;
	for (int sub = 0; sub < 256; sub++) {
		char name[3];
		snprintf(name, sizeof(name), "%02x", sub);
		if (!fstatat(d->fd, name, &st, AT_SYMLINK_NOFOLLOW) && S_ISDIR(st.st_mode))
			return 0;
	}
	KVT_ERR(s->log, "nvme: %s is not a kvtier store (no %s, no object directories)", d->path,
		NV_LOCK_NAME);
	return -ENOENT;
}

static int open_dir(struct nv *s, struct nv_dir *d, const char *direct_mode)
{
	int rc = s->ro ? 0 : mkdir_p(d->path, s->dir_mode);
	if (rc < 0) {
		KVT_ERR(s->log, "nvme: cannot create %s: %s", d->path, strerror(-rc));
		return rc;
	}
	if ((d->fd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		rc = -errno;
		KVT_ERR(s->log, "nvme: cannot open %s: %s%s", d->path, strerror(-rc),
			s->ro && rc == -ENOENT ? " (not a kvtier store)" : "");
		return rc;
	}
	if (s->ro) {
		/* Inspection: no lock (a live writer may hold it), no probe file (O_DIRECT
		 * is tried on a stored object instead, after the scan). */
		d->direct = false;
		return check_store(s, d);
	}
	d->lock_fd = openat(d->fd, NV_LOCK_NAME, O_RDWR | O_CREAT | O_CLOEXEC, s->file_mode);
	if (d->lock_fd < 0 || flock(d->lock_fd, LOCK_EX | LOCK_NB) < 0) {
		rc = -errno;
		if (rc == -EWOULDBLOCK) {
			KVT_ERR(s->log, "nvme: %s is in use by another kvtier instance", d->path);
			return -EBUSY;
		}
		KVT_ERR(s->log, "nvme: cannot lock %s: %s", d->path, strerror(-rc));
		return rc;
	}
	d->direct = false;
	if (strcmp(direct_mode, "off")) {
		rc = probe_direct(s, d);
		if (rc < 0) {
			KVT_ERR(s->log, "nvme: cannot write in %s: %s", d->path, strerror(-rc));
			return rc;
		}
		if (rc == 0 && !strcmp(direct_mode, "on")) {
			KVT_ERR(s->log,
				"nvme: %s: the file system refuses O_DIRECT and nvme.direct=on; "
				"use nvme.direct=auto or off",
				d->path);
			return -EINVAL;
		}
		if (rc == 0)
			KVT_WARN(s->log,
				 "nvme: %s: the file system refuses O_DIRECT; falling back to "
				 "buffered I/O for this directory",
				 d->path);
		d->direct = rc == 1;
	}
	return 0;
}

/* Read-only: no probe file can be written, so try O_DIRECT on one stored object of each
 * directory instead (inspection then reads like the tier does, without filling the page
 * cache of a serving node with the whole store). */
static void probe_direct_ro(struct nv *s, const char *direct_mode)
{
	if (!strcmp(direct_mode, "off"))
		return;
	void *buf = kvt__aligned_alloc(KVT_ALIGN);
	if (!buf)
		return;
	for (uint32_t i = 0; i < s->ndirs; i++) {
		struct nv_ent *e = s->lru_head;
		while (e && (e->dir != i || e->bytes < KVT_ALIGN))
			e = e->next;
		if (!e)
			continue;
		char path[NV_NAME_MAX];
		object_path(&e->key, path);
		int fd = openat(s->dirs[i].fd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_DIRECT);
		if (fd < 0)
			continue;
		s->dirs[i].direct = pread(fd, buf, KVT_ALIGN, 0) == KVT_ALIGN;
		close(fd);
	}
	kvt__free_aligned(buf, KVT_ALIGN);
}

static void nv_free(struct nv *s)
{
	/* Ring thread is gone: everything below is single-threaded. */
	while (s->lru_head)
		ent_remove(s, s->lru_head);
	while (s->fdc_head) {
		struct nv_fdc *c = s->fdc_head;
		c->ent->fdc = NULL;
		fdc_list_unlink(s, c);
		fdc_free(s, c);
	}
	while (s->free_fdc) {
		struct nv_fdc *c = s->free_fdc;
		s->free_fdc = c->next;
		kvt__free(c);
	}
	kvt__free(s->buckets);
	while (s->done_ops) {
		struct nv_op *op = s->done_ops;
		s->done_ops = op->next;
		kvt__free(op);
	}
	while (s->free_ops) {
		struct nv_op *op = s->free_ops;
		s->free_ops = op->next;
		kvt__free(op);
	}
	kvt__free(s->ios);
	for (uint32_t i = 0; s->dirs && i < s->ndirs; i++) {
		if (s->dirs[i].lock_fd >= 0)
			close(s->dirs[i].lock_fd);
		if (s->dirs[i].fd >= 0)
			close(s->dirs[i].fd);
		kvt__free(s->dirs[i].path);
	}
	kvt__free(s->dirs);
	for (size_t i = 0; i < s->n_anomalies; i++)
		kvt__free(s->anomalies[i]);
	kvt__free(s->anomalies);
	if (s->efd >= 0)
		close(s->efd);
	pthread_mutex_destroy(&s->qlock);
	pthread_cond_destroy(&s->qcond);
	pthread_mutex_destroy(&s->ilock);
	pthread_mutex_destroy(&s->block);
}

static int nv_open(struct kvt_tier *t, const struct kvt_config *cfg)
{
	struct nv *s = t->state;
	int rc;
	s->log = &t->log;
	s->tier = t;
	s->efd = -1;
	s->pid = getpid();
	pthread_mutex_init(&s->qlock, NULL);
	pthread_cond_init(&s->qcond, NULL);
	pthread_mutex_init(&s->ilock, NULL);
	pthread_mutex_init(&s->block, NULL);

	s->capacity = kvt__cfg_u64(cfg, "nvme.bytes");
	s->ro = kvt__cfg_bool(cfg, "store.read_only");
	s->file_mode = (mode_t)strtoul(kvt__cfg_str(cfg, "nvme.file_mode"), NULL, 8);
	s->dir_mode = (mode_t)strtoul(kvt__cfg_str(cfg, "nvme.dir_mode"), NULL, 8);
	s->object_max = t->object_max;
	if (!s->ro && s->capacity < s->object_max) {
		KVT_ERR(s->log,
			"nvme: nvme.bytes (%" PRIu64 ") is smaller than one object (%" PRIu64
			" bytes at this geometry): nothing could be stored; raise it",
			s->capacity, s->object_max);
		rc = -EINVAL;
		goto fail;
	}
	s->qd = (uint32_t)kvt__cfg_u64(cfg, "nvme.queue_depth");
	s->budget = kvt__cfg_u64(cfg, "nvme.write_budget");
	s->open_files = (uint32_t)kvt__cfg_u64(cfg, "nvme.open_files");
	const char *fs = kvt__cfg_str(cfg, "nvme.fsync");
	s->fsync_mode = !strcmp(fs, "none")   ? NV_FSYNC_NONE
			: !strcmp(fs, "full") ? NV_FSYNC_FULL
					      : NV_FSYNC_DATA;
	char direct_mode[16];
	snprintf(direct_mode, sizeof(direct_mode), "%s", kvt__cfg_str(cfg, "nvme.direct"));
	s->bucket_hour = hour_now();

	/* Keep the fd cache well inside the process' descriptor limit. */
	struct rlimit rl;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY &&
	    s->open_files > rl.rlim_cur / 2) {
		KVT_INFO(s->log, "nvme: open_files %u capped to %lu by RLIMIT_NOFILE",
			 s->open_files, (unsigned long)(rl.rlim_cur / 2));
		s->open_files = (uint32_t)KVT_MAX(rl.rlim_cur / 2, 1);
	}

	const char *list = kvt__cfg_str(cfg, "nvme.dirs");
	struct dir_ctx dc = {s, 0};
	kvt__split_list(list, count_dir, &dc);
	if (!dc.n) {
		KVT_ERR(s->log, "nvme: nvme.dirs is empty");
		rc = -EINVAL;
		goto fail;
	}
	if (!(s->dirs = kvt__calloc(dc.n, sizeof(*s->dirs)))) {
		rc = -ENOMEM;
		goto fail;
	}
	if ((rc = kvt__split_list(list, add_dir, &dc)) < 0)
		goto fail;
	s->nbuckets = 1024;
	if (!(s->buckets = kvt__calloc(s->nbuckets, sizeof(*s->buckets)))) {
		rc = -ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < s->ndirs; i++)
		if ((rc = open_dir(s, &s->dirs[i], direct_mode)) < 0)
			goto fail;
	if ((rc = rebuild_index(s)) < 0) {
		KVT_ERR(s->log, "nvme: index rebuild failed: %s", strerror(-rc));
		goto fail;
	}
	if (s->budget && !s->ro)
		budget_load(s);
	if (s->ro)
		probe_direct_ro(s, direct_mode);
	for (uint32_t i = 0; i < s->ndirs; i++) {
		uint64_t objs = 0, bytes = 0;
		for (struct nv_ent *e = s->lru_head; e; e = e->next)
			if (e->dir == i) {
				objs++;
				bytes += e->bytes;
			}
		KVT_INFO(s->log, "nvme: %s: %s I/O, %" PRIu64 " objects, %" PRIu64 " bytes",
			 s->dirs[i].path, s->dirs[i].direct ? "O_DIRECT" : "buffered", objs, bytes);
	}

	if (!(s->ios = kvt__calloc(s->qd, sizeof(*s->ios)))) {
		rc = -ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < s->qd; i++) {
		s->ios[i].next_free = s->free_ios;
		s->free_ios = &s->ios[i];
	}
	if ((s->efd = eventfd(0, EFD_CLOEXEC)) < 0) {
		rc = -errno;
		goto fail;
	}
	if ((rc = -pthread_create(&s->thread, NULL, ring_main, s)) < 0)
		goto fail;
	pthread_mutex_lock(&s->qlock);
	while (!s->init_done)
		pthread_cond_wait(&s->qcond, &s->qlock);
	rc = s->init_rc;
	pthread_mutex_unlock(&s->qlock);
	if (rc < 0) {
		pthread_join(s->thread, NULL);
		KVT_ERR(s->log, "nvme: io_uring setup failed: %s", strerror(-rc));
		goto fail;
	}
	s->thread_started = true;
	return 0;
fail:
	nv_free(s);
	return rc;
}

static void nv_close(struct kvt_tier *t)
{
	struct nv *s = t->state;
	if (s->thread_started) {
		pthread_mutex_lock(&s->qlock);
		s->closing = true;
		pthread_mutex_unlock(&s->qlock);
		eventfd_write(s->efd, 1);
		pthread_join(s->thread, NULL);
		spare_drop_all(s, true);
		kvt__free(s->spares);
		if (s->budget && !s->ro)
			budget_save(s);
		if (!s->ro)
			chains_save(s);
		uint64_t n = atomic_load(&s->skips_unreported);
		if (n)
			KVT_WARN(s->log, "nvme: %" PRIu64 " more write(s) not stored (see above)", n);
	}
	nv_free(s);
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
    .scan_anomalies = nv_scan_anomalies,
};
