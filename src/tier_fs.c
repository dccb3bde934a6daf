/*
 * tier_fs.c - the "fs" tier: a shared POSIX directory (CephFS, NFS, Lustre, or any local
 * file system) that several kvtier instances, on one node or many, use at the same time.
 *
 * Layout: <fs.dir>/v1/<hex[0:2]>/<hex[2:4]>/<hex>, where hex is the 64-digit key. Keys are
 * content addresses, so two instances that point at the same directory find each other's
 * chunks with no configuration, and two writers of the same key write the same bytes.
 * The two-level fan-out keeps directories small (65536 leaves) on file systems whose
 * lookups slow down with huge directories; leaves are created on first use.
 *
 * Publishing: an object is written to a temporary name in its leaf directory
 * (".<hex>.tmp.<host>.<pid>.<nonce>.<n>", unique across nodes, processes and opens: the
 * nonce is random per open), optionally synced,
 * then moved onto the final name without replacing one (renameat2 RENAME_NOREPLACE, or
 * link() + unlink() where that is refused, or rename() where hard links are refused too).
 * A reader therefore sees the whole object or nothing, even if the writer is SIGKILLed;
 * a link() that finds the name taken means another writer won, which is fine.
 *
 * Capacity and debris (fs.bytes, fs.tmp_max_age_s): every *writing* instance sweeps the
 * directory now and then - at its first write, then whenever it has written fs.bytes/16
 * since its last sweep (or 10 minutes passed), and when a write is refused for room
 * (ENOSPC, EDQUOT: at most once a minute, queued; the write answers at once). A sweep
 * walks the tree once, removes temporaries its instance's sweeps have seen unchanged for
 * fs.tmp_max_age_s (a dead writer's; struct fs_temp_seen) or whose writer ran on this node
 * and is dead (fs.live_dir, fs_live.h), adds up the objects' sizes,
 * and if they exceed fs.bytes removes the oldest (by max(atime, mtime)) until 15/16 of it
 * is used. Any number of nodes may sweep at once: removal is one unlink of a published
 * name, a name already gone counts as freed, a reader that has the file open keeps
 * reading it (or gets ESTALE on NFS: a miss), and a writer racing a removal of the same
 * key at worst loses that copy - never a torn object. A non-blocking flock on
 * v1/.sweep.lock keeps nodes from walking at the same time where the file system has
 * locks. Usage may thus exceed fs.bytes by 1/16 plus what others write between sweeps.
 * Chains: a chunk written with its parent (write_chained) gets the parent's mtime minus
 * 1 ns, so oldest-first removal takes a chain's end before its prefix; a chunk whose parent
 * is named but absent here (it could never be resumed from this tier) is dated 1970 and
 * goes first. Inspection (store.read_only) creates, sweeps and removes nothing.
 *
 * Modes: files fs.file_mode (0600), directories fs.dir_mode (0700); nodes running as
 * different users of one group need 0660/0770 and a umask that allows them.
 *
 * No index in memory: another node may add or delete objects at any time, so exists()
 * stats paths and read() opens them by name. Every blocking POSIX call runs on a small
 * pool of worker threads (fs.threads); submitting calls only queue work, and a batch of
 * lookups is spread over the workers. O_DIRECT is used when fs.direct allows it and the
 * file system accepts it (auto falls back to buffered I/O, e.g. on tmpfs or some FUSE).
 */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "format.h"
#include "fs_live.h"
#include "tier.h"

#define FS_LAYOUT "v1"
#define FS_EXISTS_PIECE 16    /* fewest keys worth handing to another worker */
#define FS_SWEEP_PERIOD_NS (600ull * 1000000000ull) /* a writer sweeps at least this often */
/* A write refused for room sweeps at most this often (or every fs.tmp_max_age_s, if that is
 * shorter: no temporary turns stale sooner): a walk of a large shared tree takes minutes. */
#define FS_FULL_SWEEP_NS (60ull * 1000000000ull)
#define FS_SWEEP_LOCK ".sweep.lock"

#define FS_LEAVES 65536 /* leaf directories: <hex[0:2]>/<hex[2:4]> */
/* Directories a flush may have to sync, by index: leaves (the key's first two bytes), then
 * the 256 first-level directories (FS_TOP(i): <i>), then v1 itself (FS_ROOT). */
#define FS_TOP(i) (FS_LEAVES + (i))
#define FS_ROOT FS_TOP(256)
#define FS_DIRS (FS_ROOT + 1)
#define FS_DIRS_BYTES ((FS_DIRS + 7) / 8)
#define FS_SERVED 4096 /* reads remembered for drop_corrupt */

enum fs_direct { DIRECT_AUTO, DIRECT_ON, DIRECT_OFF };

/* A file's identity: the inode number alone is not one (ext4 gives a file written after
 * another was removed the same number), and neither is it with the change time and size:
 * where timestamps have whole seconds (ext4 with 128-byte inodes, some NFS servers) a copy
 * published in the same second as the one removed matches in all of them. The file handle
 * (name_to_handle_at) tells them apart: it holds the inode's generation, which a file
 * system changes when it reuses a number (ext4, xfs, btrfs, tmpfs; NFS and CephFS hand out
 * handles of their own that do the same). Its hash is kept; where the file system has no
 * handles (EOPNOTSUPP: FUSE without export support) the other fields must do. */
struct fs_ident {
	dev_t dev;
	ino_t ino;
	struct timespec ctime;
	off_t size;
	bool has_handle;
	uint64_t handle; /* FNV-1a of the handle's type and bytes */
};

struct fs_served {
	struct kvt_key key;
	struct fs_ident id;
	uint32_t reads; /* reads remembered and not yet reported (a report takes one) */
	bool used;
	bool conflicted; /* reads of key since served different files: which one is bad? */
};
enum fs_sync { SYNC_NONE, SYNC_DATA, SYNC_FULL };
enum fs_kind { OP_EXISTS, OP_READ, OP_WRITE, OP_REMOVE, OP_FLUSH, OP_DROP, OP_SWEEP, OP_SYNCDIRS };

/* One lookup batch, shared by the pieces the workers run. */
struct fs_batch {
	struct kvt_key *keys; /* copy */
	uint8_t *present;
	atomic_uint pieces_left;
	atomic_int err;
	kvt_tier_cb cb;
	void *arg;
};

/* fs.fsync=data: the directory syncs that the flushes in `flushes` wait for, spread over the
 * workers in pieces. Jobs finish in the order they started (s->dirsync_head), so a flush
 * never completes before an earlier flush's directories are synced. */
struct fs_dirsync {
	struct fs_dirsync *next;
	uint8_t *dirty;        /* directories to sync (a bitmap of FS_DIRS), NULL: none */
	struct fs_op *flushes; /* ready flushes, completed with err once this job is over */
	atomic_uint pieces_left;
	atomic_int err;
	bool done; /* under lock */
};

struct fs_op {
	struct fs_op *next; /* work queue */
	enum fs_kind kind;
	kvt_tier_cb cb;
	void *arg;
	struct kvt_key key;
	/* OP_READ */
	struct kvt_seg *segs; /* points just past this struct */
	uint32_t nsegs;
	/* OP_WRITE */
	const void *obj;
	uint64_t len;
	bool has_parent;
	struct kvt_key parent;
	/* OP_WRITE, OP_REMOVE: also on the pending list, in submission order, for flush */
	uint64_t ticket;
	struct fs_op *wprev, *wnext;
	/* OP_EXISTS: keys [i0, i1) of batch; OP_SYNCDIRS: directories [i0, i1) of dirsync */
	struct fs_batch *batch;
	struct fs_dirsync *dirsync;
	uint32_t i0, i1;
	bool full_sweep; /* OP_SWEEP: a refused write's (queue_sweep) */
};

/* A temporary as a sweep saw it. It is stale (a dead writer's) once this node's sweeps
 * have seen it unchanged - same file, size, mtime and ctime - for fs.tmp_max_age_s by this
 * node's monotonic clock. Comparing its ctime with this node's clock, as until 2026-12-06,
 * compared two clocks on a shared file system (CephFS dates a file by the writing client's
 * clock): a live writer whose clock was behind had its temporary removed under it, and a
 * dead one whose clock was ahead left debris nobody ever removed. */
struct fs_temp_seen {
	uint64_t name; /* FNV-1a of its name (unique: key, host, pid, nonce, counter) */
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
	uint64_t since_ns; /* kvt__now_ns() when first seen as it is */
};
#define FS_TEMPS_SEEN_MAX 65536 /* watched at once: more wait until some are gone */

struct fs_state {
	struct kvt_tier *t;
	int rootfd; /* <fs.dir>/v1 */
	char dir[4096];
	char host[64];
	enum fs_direct direct;
	enum fs_sync sync;
	atomic_int direct_ok;  /* auto: cleared on the first refusal */
	atomic_int noreplace_ok; /* cleared when renameat2(RENAME_NOREPLACE) is refused */
	atomic_int link_ok;    /* cleared when link() is refused: use rename() */
	atomic_int handle_ok;  /* cleared when name_to_handle_at is refused (fs_ident) */
	struct kvt_log_limit full_warn; /* "is full" (a quota, no space): once a while */
	struct kvt_log_limit foreign_warn; /* inspection refused another user's file */
	/* Temporary names: a random value per open and a counter. The host and pid alone are
	 * not unique: a restarted container's instance is pid 1 again, and two opens in one
	 * process share both; with a counter restarting at 0 such an instance collided with a
	 * temporary another left (EEXIST, until a sweep took it) or one it was writing. */
	uint64_t tmp_nonce;
	atomic_uint_fast64_t tmp_counter;
	/* fs.live_dir: this instance's flock on live_dir's file for tmp_nonce (-1: none) says
	 * it is alive to this node's sweeps (fs_live.h) */
	char live_dir[4096];
	int live_fd;
	uint64_t live_pruned_ns; /* the last kvt__fs_live_prune (0: never); under sweep_lock */
	bool ro;
	mode_t file_mode, dir_mode;
	uint64_t capacity;     /* fs.bytes, 0: unbounded */
	uint64_t tmp_max_age;  /* seconds */
	uint64_t tmp_grace;    /* seconds (fs.tmp_grace_s; sweep_temp) */
	atomic_uint_fast64_t written_since; /* bytes since the last sweep started */
	atomic_uint_fast64_t last_sweep_ns; /* 0: never */
	atomic_uint_fast64_t full_sweep_ns; /* the last sweep a refused write ran (0: never) */
	atomic_bool sweep_queued;
	atomic_uint_fast64_t sweeps, sweep_evictions, sweep_temps;
	/* The temporaries the last sweep saw, sorted (temp_cmp), and a sweep's own lock: one
	 * at a time per instance even where flock does not work (sweep_lock). */
	pthread_mutex_t sweep_lock;
	struct fs_temp_seen *temps_seen;
	size_t ntemps_seen;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* keys being written by the workers now (under lock): a chunk published before its
	 * parent waits for the parent's write to be dated first (wcond) */
	struct kvt_key writing[64];
	bool writing_used[64];
	pthread_cond_t wcond;
	struct fs_op *head, *tail; /* work queue */
	bool closing;
	unsigned nthreads;
	pthread_t threads[64];
	/* writes and removes not yet completed, oldest first, and flushes waiting on them */
	struct fs_op *wfirst, *wlast;
	/* fs.fsync=data: directories (by index, FS_DIRS) that got or lost a name since the
	 * last flush - leaves an object's, their parents a new leaf's or first level's -
	 * whose fsync makes those names durable (under lock) */
	uint8_t dirty_dir[FS_DIRS_BYTES];
	/* per parent directory (v1 and the first level: FS_DIRS index - FS_LEAVES), makers of
	 * a directory in it that have not yet synced or marked it (open_level) */
	atomic_uint unsynced[FS_DIRS - FS_LEAVES];
	bool any_dirty_dir;
	struct fs_dirsync *dirsync_head, *dirsync_tail; /* started, not yet finished */
	uint64_t next_ticket;
	struct fs_op *flush_head, *flush_tail;

	struct kvt_io_counters cnt;

	/* Which file each recent read served (by key hash, direct-mapped, under served_lock):
	 * a drop of a corrupt object removes only that file, never a good copy published under
	 * the same name since (see run_drop). Reads of one key that served different files
	 * mark it conflicted: a drop does not say which read it is about, so it drops none. */
	pthread_mutex_t served_lock;
	struct fs_served served[FS_SERVED];
};

static void key_path(const struct kvt_key *key, char *path /* >= 72 bytes */)
{
	char hex[2 * KVT_KEY_BYTES + 1];
	kvt_key_to_hex(key, hex);
	snprintf(path, 72, "%.2s/%.2s/%s", hex, hex + 2, hex);
}

/* The object's name within its leaf directory. */
static const char *leaf_name(const char *path)
{
	return path + 6;
}

static void mark_dir_dirty(struct fs_state *s, unsigned dir) /* lock held; FS_DIRS index */
{
	s->dirty_dir[dir / 8] |= (uint8_t)(1u << (dir % 8));
	s->any_dirty_dir = true;
}

/* A directory was made in dfd (index dir, FS_DIRS): its name there is durable once dfd is
 * synced, as an object's name is once its leaf is (write_object), and a flush must not say
 * "durable" of an object whose leaf could still vanish. full: sync dfd now (before the put
 * answers), data: mark it for the next flush, as for a name in a leaf; none: the flush's
 * syncfs. 0 or the fsync's -errno (the directory is then marked, for the next flush). */
static int dir_made(struct fs_state *s, int dfd, unsigned dir)
{
	if (s->sync == SYNC_NONE || (s->sync == SYNC_FULL && fsync(dfd) == 0))
		return 0;
	int rc = s->sync == SYNC_FULL ? -errno : 0;
	pthread_mutex_lock(&s->lock);
	mark_dir_dirty(s, dir);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* Open directory name in dfd (index parent, FS_DIRS); create: make it if missing, and see
 * that its name in dfd is made durable (dir_made) by whoever may depend on it: its maker,
 * and any writer that opens it while a maker in this process has not yet synced or marked
 * dfd (s->unsynced[parent]) - such a writer would otherwise publish into the new directory
 * and answer (fs.fsync=full) or be flushed (data) while the directory's own name could
 * still vanish in a power cut (integ.fs_leaf_race). The maker's mark comes after its mkdir
 * (a flush before that would sync dfd without the name). Writers of other processes and
 * nodes are not covered: a directory another one made is as durable as it made it. */
static int open_level(struct fs_state *s, int dfd, const char *name, bool create,
		      unsigned parent)
{
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	atomic_uint *unsynced = create ? &s->unsynced[parent - FS_LEAVES] : NULL;
	bool maker = false;
	if (fd < 0 && errno == ENOENT && create) {
		atomic_fetch_add(unsynced, 1);
		maker = true;
		if (mkdirat(dfd, name, s->dir_mode) < 0 && errno != EEXIST) {
			int rc = -errno;
			atomic_fetch_sub(unsynced, 1);
			return rc;
		}
		fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (fd < 0) { /* ELOOP: a symbolic link in a directory's place, never followed */
		int rc = errno == ELOOP ? -ENOTDIR : -errno;
		if (maker)
			atomic_fetch_sub(unsynced, 1);
		return rc;
	}
	if (create && (maker || atomic_load(unsynced) > 0)) {
		int rc = dir_made(s, dfd, parent);
		if (maker)
			atomic_fetch_sub(unsynced, 1);
		if (rc < 0) {
			close(fd);
			return rc;
		}
	}
	return fd;
}

/* The leaf directory (<hex[0:2]>/<hex[2:4]>) of an object path, opened one level at a time
 * without following a symbolic link: anyone who can write the shared directory can plant
 * one in a directory's place, and a path resolved through it would read, create and unlink
 * files outside fs.dir (O_NOFOLLOW guards only a path's last component). Every call on an
 * object names it relative to this descriptor. create: make missing levels. A descriptor,
 * or -ENOENT (no such leaf), -ENOTDIR (something else in a directory's place), -errno. */
static int leaf_open(struct fs_state *s, const char *path, bool create)
{
	char d[3] = {path[0], path[1], 0};
	int top = open_level(s, s->rootfd, d, create, FS_ROOT);
	if (top < 0)
		return top;
	d[0] = path[3];
	d[1] = path[4];
	/* path starts "<hex[0:2]>/": strtoul stops at the slash */
	int leaf = open_level(s, top, d, create, FS_TOP((unsigned)strtoul(path, NULL, 16)));
	close(top);
	return leaf;
}

/* A leaf that is not there, or is not a directory of ours: the object is absent. */
static bool leaf_absent(int rc)
{
	return rc == -ENOENT || rc == -ENOTDIR || rc == -ESTALE;
}

/* ------------------------------------------------------------ work queue */

static int submit(struct fs_state *s, struct fs_op *op)
{
	pthread_mutex_lock(&s->lock);
	if (s->closing) {
		pthread_mutex_unlock(&s->lock);
		return -ECANCELED;
	}
	if (op->kind == OP_WRITE || op->kind == OP_REMOVE) {
		op->ticket = s->next_ticket++;
		op->wprev = s->wlast;
		op->wnext = NULL;
		if (s->wlast)
			s->wlast->wnext = op;
		else
			s->wfirst = op;
		s->wlast = op;
	} else if (op->kind == OP_FLUSH) {
		op->ticket = s->next_ticket; /* waits for every write or remove with a smaller ticket */
	}
	op->next = NULL;
	if (s->tail)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* Queue ops[0..n) at the queue's end, or at its front (front: short calls that something
 * already waited for must not wait behind the writes queued since). */
static int submit_many(struct fs_state *s, struct fs_op **ops, unsigned n, bool front)
{
	pthread_mutex_lock(&s->lock);
	if (s->closing) {
		pthread_mutex_unlock(&s->lock);
		return -ECANCELED;
	}
	for (unsigned i = 0; i < n; i++) {
		ops[i]->next = NULL;
		if (front) {
			ops[i]->next = s->head;
			s->head = ops[i];
			if (!s->tail)
				s->tail = ops[i];
		} else if (s->tail) {
			s->tail->next = ops[i];
			s->tail = ops[i];
		} else {
			s->head = s->tail = ops[i];
		}
	}
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* Flushes whose writes are all done, detached from the waiting list (lock held). */
static struct fs_op *ready_flushes(struct fs_state *s)
{
	struct fs_op *ready = NULL, **tailp = &ready;
	while (s->flush_head && (!s->wfirst || s->wfirst->ticket >= s->flush_head->ticket)) {
		struct fs_op *f = s->flush_head;
		s->flush_head = f->next;
		if (!s->flush_head)
			s->flush_tail = NULL;
		f->next = NULL;
		*tailp = f;
		tailp = &f->next;
	}
	return ready;
}

static void complete_flushes(struct fs_state *s, struct fs_op *f, int result)
{
	while (f) {
		struct fs_op *next = f->next;
		int rc = result;
		/* With fsync off, writes are only in the page cache: make them durable now. */
		if (!rc && s->sync == SYNC_NONE && syncfs(s->rootfd) < 0)
			rc = -errno;
		f->cb(f->arg, rc);
		kvt__free(f);
		f = next;
	}
}

/* fsync directory dfd (index dir, FS_DIRS; dfd < 0: why it did not open): on a failure
 * it is marked dirty again, for the next flush, and the first error kept in *rc; one gone
 * since (-ENOENT: swept, removed) has nothing left to persist. */
static void sync_one(struct fs_state *s, int dfd, unsigned dir, int *rc)
{
	int r = dfd < 0 ? dfd : fsync(dfd) < 0 ? -errno : 0;
	if (r < 0 && r != -ENOENT) {
		*rc = *rc ? *rc : r;
		pthread_mutex_lock(&s->lock);
		mark_dir_dirty(s, dir);
		pthread_mutex_unlock(&s->lock);
	}
}

/* fsync the directories of dirty (FS_DIRS indices) in [lo, hi); one whose fsync fails is
 * marked dirty again, for the next flush. 0 or the first error; a leaf gone since (swept,
 * removed) has nothing left to persist. Each first-level directory is opened once for all
 * its dirty leaves, not once per leaf as leaf_open would (an openat each: a round trip on a
 * network file system); the tier never removes a directory, so the one held is still the
 * leaves' parent. */
static int sync_dirs(struct fs_state *s, const uint8_t *dirty, unsigned lo, unsigned hi)
{
	int rc = 0, top = -ENOENT;
	unsigned top_at = ~0u; /* top: first-level directory top_at, or why it did not open */
	for (unsigned leaf = lo; leaf < hi; leaf++) {
		if (!(dirty[leaf / 8] & (1u << (leaf % 8))))
			continue;
		char d[3];
		if (leaf >= FS_LEAVES) { /* a parent: a first-level directory, or v1 */
			int dfd = s->rootfd;
			if (leaf != FS_ROOT) {
				snprintf(d, sizeof(d), "%02x", (leaf - FS_TOP(0)) & 0xff);
				dfd = open_level(s, s->rootfd, d, false, 0);
			}
			sync_one(s, dfd, leaf, &rc);
			if (dfd >= 0 && dfd != s->rootfd)
				close(dfd);
			continue;
		}
		if (leaf >> 8 != top_at) {
			if (top >= 0)
				close(top);
			top_at = leaf >> 8;
			snprintf(d, sizeof(d), "%02x", top_at & 0xff);
			top = open_level(s, s->rootfd, d, false, 0);
		}
		snprintf(d, sizeof(d), "%02x", leaf & 0xff);
		int dfd = top < 0 ? top : open_level(s, top, d, false, 0);
		sync_one(s, dfd, leaf, &rc);
		if (dfd >= 0)
			close(dfd);
	}
	if (top >= 0)
		close(top);
	return rc;
}

/* A job's last piece is over: finish, in start order, every job that is done. A job that
 * failed fails the jobs started before its leaves were marked again too (they may have
 * missed them). */
static void dirsync_done(struct fs_state *s, struct fs_dirsync *d)
{
	struct fs_dirsync *over = NULL, **tailp = &over;
	pthread_mutex_lock(&s->lock);
	d->done = true;
	while (s->dirsync_head && s->dirsync_head->done) {
		struct fs_dirsync *j = s->dirsync_head;
		s->dirsync_head = j->next;
		if (!s->dirsync_head)
			s->dirsync_tail = NULL;
		int err = atomic_load(&j->err);
		for (struct fs_dirsync *k = s->dirsync_head; err && k; k = k->next) {
			int zero = 0;
			atomic_compare_exchange_strong(&k->err, &zero, err);
		}
		j->next = NULL;
		*tailp = j;
		tailp = &j->next;
	}
	pthread_mutex_unlock(&s->lock);
	while (over) {
		struct fs_dirsync *next = over->next;
		complete_flushes(s, over->flushes, atomic_load(&over->err));
		kvt__free(over->dirty);
		kvt__free(over);
		over = next;
	}
}

static void run_syncdirs(struct fs_state *s, struct fs_op *op, bool cancel)
{
	struct fs_dirsync *d = op->dirsync;
	int rc = cancel ? -ECANCELED : sync_dirs(s, d->dirty, op->i0, op->i1);
	int zero = 0;
	if (rc < 0)
		atomic_compare_exchange_strong(&d->err, &zero, rc);
	kvt__free(op);
	if (atomic_fetch_sub(&d->pieces_left, 1) == 1)
		dirsync_done(s, d);
}

static struct fs_op *op_new(enum fs_kind kind, size_t extra, kvt_tier_cb cb, void *arg);
static int submit_many(struct fs_state *s, struct fs_op **ops, unsigned n, bool front);

/* fs.fsync=data syncs each object's data before it is published, but not its name: a power
 * loss after a flush could still take back the rename or link into the leaf directory. So
 * the flushes in ready complete after an fsync of every leaf directory that got a name
 * since the last flush (and of the parent of every directory made since: dir_made), run
 * by the workers in parallel (each costs a round trip on a
 * network file system), and after every earlier flush's. */
/* Cut [0, FS_DIRS) into at most n (<= 64) ranges, bounds[0..ret], that hold about as many
 * of dirty's directories each; 0 ranges when dirty is NULL or holds none. */
static unsigned dirsync_cut(const uint8_t *dirty, unsigned n, uint32_t *bounds)
{
	unsigned total = 0, np = 0, seen = 0;
	for (unsigned b = 0; dirty && b < FS_DIRS_BYTES; b++)
		total += (unsigned)__builtin_popcount(dirty[b]);
	if (!total || !n)
		return 0;
	unsigned per = (total + n - 1) / n;
	bounds[0] = 0;
	for (uint32_t i = 0; i < FS_DIRS && np + 1 < n; i++) {
		if (!dirty[i / 8]) { /* a byte with none: skip it whole */
			i |= 7;
			continue;
		}
		if ((dirty[i / 8] & (1u << (i % 8))) && ++seen == per * (np + 1))
			bounds[++np] = i + 1;
	}
	if (seen == total && np) /* the last cut took the last one: its range runs to the end */
		bounds[np] = FS_DIRS;
	else
		bounds[++np] = FS_DIRS;
	return np;
}

static void start_dirsync(struct fs_state *s, struct fs_op *ready)
{
	struct fs_dirsync *d = kvt__calloc(1, sizeof(*d));
	uint8_t *dirty = kvt__malloc(FS_DIRS_BYTES);
	if (!d || !dirty) {
		kvt__free(d);
		kvt__free(dirty);
		complete_flushes(s, ready, -ENOMEM);
		return;
	}
	d->flushes = ready;
	struct fs_op *pieces[64];
	unsigned n = 0;
	pthread_mutex_lock(&s->lock);
	if (s->any_dirty_dir) {
		memcpy(dirty, s->dirty_dir, FS_DIRS_BYTES);
		memset(s->dirty_dir, 0, FS_DIRS_BYTES);
		s->any_dirty_dir = false;
		d->dirty = dirty;
		dirty = NULL;
		n = s->nthreads;
	}
	if (s->dirsync_tail)
		s->dirsync_tail->next = d;
	else
		s->dirsync_head = d;
	s->dirsync_tail = d;
	pthread_mutex_unlock(&s->lock);
	kvt__free(dirty);

	/* At most one piece per worker, each a range of directories holding about as many
	 * dirty ones as the others: cut by index alone, every parent (v1 and the first
	 * level, all numbered past the leaves) fell to the last worker, whose serial fsyncs
	 * then outlasted the flush's deadline on a slow mount (integ.bench_stall_fs). */
	uint32_t bounds[65];
	n = dirsync_cut(d->dirty, n, bounds);
	atomic_store(&d->pieces_left, n + 1); /* +1 while submitting */
	unsigned queued = 0;
	for (unsigned i = 0; i < n; i++) {
		uint32_t lo = bounds[i], hi = bounds[i + 1];
		struct fs_op *op = op_new(OP_SYNCDIRS, 0, NULL, NULL);
		if (!op) { /* these directories wait for the next flush; this one fails */
			pthread_mutex_lock(&s->lock);
			for (uint32_t leaf = lo; leaf < hi; leaf++)
				if (d->dirty[leaf / 8] & (1u << (leaf % 8)))
					mark_dir_dirty(s, leaf);
			pthread_mutex_unlock(&s->lock);
			atomic_store(&d->err, -ENOMEM);
			atomic_fetch_sub(&d->pieces_left, 1);
			continue;
		}
		op->dirsync = d;
		op->i0 = lo;
		op->i1 = hi;
		pieces[queued++] = op;
	}
	/* At the queue's front: the flush has waited for its writes already, and the writes
	 * queued since (not counted in its deadline) must not hold it up. */
	if (queued && submit_many(s, pieces, queued, true) < 0) /* closing: sync them here */
		for (unsigned i = 0; i < queued; i++)
			run_syncdirs(s, pieces[i], false);
	if (atomic_fetch_sub(&d->pieces_left, 1) == 1)
		dirsync_done(s, d);
}

/* data: the flush syncs the directories that got or lost a name since the last one. full: a
 * put or remove synced its own leaf (and a new leaf's parents) before answering, so only
 * the names a sweep or a drop took away, and directories whose sync failed, are left to
 * sync (unlink_marked, dir_made); with none marked that costs nothing. */
static void finish_flushes(struct fs_state *s, struct fs_op *ready, int result)
{
	if (ready && !result && s->sync != SYNC_NONE)
		start_dirsync(s, ready);
	else
		complete_flushes(s, ready, result);
}

/* A write or remove is over: take it off the pending list and release the flushes it held
 * back. */
static void write_done(struct fs_state *s, struct fs_op *op)
{
	pthread_mutex_lock(&s->lock);
	if (op->wprev)
		op->wprev->wnext = op->wnext;
	else
		s->wfirst = op->wnext;
	if (op->wnext)
		op->wnext->wprev = op->wprev;
	else
		s->wlast = op->wprev;
	struct fs_op *ready = ready_flushes(s);
	pthread_mutex_unlock(&s->lock);
	finish_flushes(s, ready, 0);
}

/* ------------------------------------------------------------ operations */

static void run_exists(struct fs_state *s, struct fs_op *op, bool cancel)
{
	struct fs_batch *b = op->batch;
	if (cancel) {
		atomic_store(&b->err, -ECANCELED);
	} else {
		for (uint32_t i = op->i0; i < op->i1; i++) {
			char path[72];
			struct stat st;
			key_path(&b->keys[i], path);
			int dfd = leaf_open(s, path, false);
			int r = dfd < 0 ? dfd
					: fstatat(dfd, leaf_name(path), &st, AT_SYMLINK_NOFOLLOW) < 0
					? -errno
					: 0;
			if (dfd >= 0)
				close(dfd);
			if (r == 0) {
				b->present[i] = S_ISREG(st.st_mode) && st.st_size >= KVT_HEADER_BYTES;
			} else if (leaf_absent(r)) {
				b->present[i] = 0;
			} else {
				int e = r;
				atomic_store(&b->err, e);
				atomic_fetch_add(&s->cnt.errors, 1);
				KVT_WARN(&s->t->log, "fs: stat %s/%s: %s", s->dir, path,
					 strerror(-e));
				break;
			}
		}
	}
	if (atomic_fetch_sub(&b->pieces_left, 1) == 1) {
		b->cb(b->arg, atomic_load(&b->err));
		kvt__free(b->keys);
		kvt__free(b);
	}
}

static bool aligned(const void *p, uint64_t off, uint64_t len)
{
	return !(((uintptr_t)p | off | len) & (KVT_ALIGN - 1));
}

static void direct_refused(struct fs_state *s)
{
	if (atomic_exchange(&s->direct_ok, 0))
		KVT_INFO(&s->t->log, "fs: %s refuses O_DIRECT, using buffered I/O", s->dir);
}

/* Open with O_DIRECT when allowed; fall back to buffered I/O where refused (auto). A file
 * created here (O_EXCL) is created without it and then switched (F_SETFL): a file system
 * that refuses O_DIRECT (tmpfs before Linux 6.6, ramfs, some FUSE) refuses it in open only
 * after it has created the file, so the buffered retry met its own file (EEXIST) - the
 * put failed and left the empty file behind, until 2026-12-05. The switch refuses without
 * creating anything. On failure of a create nothing is left behind (errno kept). */
static int open_maybe_direct(struct fs_state *s, int dfd, const char *name, int flags,
			     bool want_direct)
{
	if (want_direct && s->direct != DIRECT_OFF && atomic_load(&s->direct_ok) &&
	    (flags & O_EXCL)) {
		int fd = openat(dfd, name, flags | O_CLOEXEC | O_NOFOLLOW, s->file_mode);
		if (fd < 0)
			return fd;
		int fl = fcntl(fd, F_GETFL);
		if (fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0)
			return fd;
		int e = errno;
		if (e == EINVAL && s->direct != DIRECT_ON) {
			direct_refused(s);
			return fd;
		}
		close(fd);
		unlinkat(dfd, name, 0);
		errno = e;
		return -1;
	}
	if (want_direct && s->direct != DIRECT_OFF && atomic_load(&s->direct_ok)) {
		int fd = openat(dfd, name, flags | O_DIRECT | O_CLOEXEC | O_NOFOLLOW,
				s->file_mode);
		if (fd >= 0 || errno != EINVAL || s->direct == DIRECT_ON)
			return fd;
		direct_refused(s);
	}
	return openat(dfd, name, flags | O_CLOEXEC | O_NOFOLLOW, s->file_mode);
}

/* pread/pwrite that clears O_DIRECT and retries if the kernel refuses it (auto). */
static ssize_t io_full(struct fs_state *s, int fd, bool wr, void *buf, uint64_t len, uint64_t off)
{
	uint64_t done = 0;
	while (done < len) {
		size_t n = (size_t)KVT_MIN(len - done, (uint64_t)1 << 30);
		ssize_t r = wr ? pwrite(fd, (char *)buf + done, n, (off_t)(off + done))
			       : pread(fd, (char *)buf + done, n, (off_t)(off + done));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			int fl = fcntl(fd, F_GETFL);
			if (errno == EINVAL && s->direct == DIRECT_AUTO && fl >= 0 &&
			    (fl & O_DIRECT)) {
				if (fcntl(fd, F_SETFL, fl & ~O_DIRECT) == 0)
					continue;
			}
			return -errno;
		}
		if (r == 0)
			break; /* end of file: a short read */
		done += (uint64_t)r;
	}
	return (ssize_t)done;
}

static struct fs_served *served_slot(struct fs_state *s, const struct kvt_key *key)
{
	return &s->served[kvt__key_hash(key) % FS_SERVED];
}

/* The identity (struct fs_ident) of open file fd (O_PATH will do), st its fstat. One system
 * call on top of the fstat, on a descriptor already open, and nothing on the network:
 * name_to_handle_at encodes the handle from the inode in memory (an inode generation
 * ioctl would cost the same, but has no O_PATH form and is missing on NFS and CephFS). */
static void ident_of(struct fs_state *s, int fd, const struct stat *st, struct fs_ident *id)
{
	*id = (struct fs_ident){.dev = st->st_dev, .ino = st->st_ino, .ctime = st->st_ctim,
				.size = st->st_size};
	if (!atomic_load(&s->handle_ok))
		return;
	union {
		struct file_handle fh;
		char room[sizeof(struct file_handle) + MAX_HANDLE_SZ];
	} h;
	int mount_id;
	h.fh.handle_bytes = MAX_HANDLE_SZ;
	if (name_to_handle_at(fd, "", &h.fh, &mount_id, AT_EMPTY_PATH) < 0) {
		if ((errno == EOPNOTSUPP || errno == ENOSYS) && atomic_exchange(&s->handle_ok, 0))
			KVT_INFO(&s->t->log, "fs: %s has no file handles: a file is told from one "
					     "written since by inode, change time and size only",
				 s->dir);
		return;
	}
	uint64_t x = 14695981039346656037ull;
	const unsigned char *b = h.fh.f_handle;
	x = (x ^ (uint32_t)h.fh.handle_type) * 1099511628211ull;
	for (unsigned i = 0; i < h.fh.handle_bytes && i < MAX_HANDLE_SZ; i++)
		x = (x ^ b[i]) * 1099511628211ull;
	id->has_handle = true;
	id->handle = x;
}

/* The handles count where both were had: a refusal since (handle_ok) leaves the rest. */
static bool ident_eq(const struct fs_ident *a, const struct fs_ident *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->ctime.tv_sec == b->ctime.tv_sec &&
	       a->ctime.tv_nsec == b->ctime.tv_nsec && a->size == b->size &&
	       (!a->has_handle || !b->has_handle || a->handle == b->handle);
}

static void remember_served(struct fs_state *s, const struct kvt_key *key,
			    const struct fs_ident *id)
{
	pthread_mutex_lock(&s->served_lock);
	struct fs_served *e = served_slot(s, key);
	/* Another read of key is remembered: if it served another file (a copy replaced in
	 * between), a later drop may be about either read, and taking it for this one would
	 * remove a good copy because of a corrupt one. Keep neither: the drop drops nothing
	 * (a corrupt copy left in place is found again by the next read that uses it). */
	if (e->used && kvt__key_eq(&e->key, key)) {
		if (!ident_eq(&e->id, id))
			e->conflicted = true;
		e->reads += e->reads < UINT32_MAX;
	} else {
		*e = (struct fs_served){.key = *key, .id = *id, .reads = 1, .used = true};
	}
	pthread_mutex_unlock(&s->served_lock);
}

/* This node wrote or removed key: a read remembered from before is of a copy that is gone,
 * and a read after it serves another. Until the key's next report, its reports drop
 * nothing (that report may be about either). Until 2026-12-04 the earlier read was
 * forgotten instead: a read of the new copy was then remembered alone, and the late report
 * about the old read was taken for it - a good copy dropped (fs_inode_reuse part 3). */
static void served_replaced(struct fs_state *s, const struct kvt_key *key)
{
	pthread_mutex_lock(&s->served_lock);
	struct fs_served *e = served_slot(s, key);
	if (e->used && kvt__key_eq(&e->key, key))
		e->conflicted = true;
	pthread_mutex_unlock(&s->served_lock);
}

/* The file a read of key served, if still remembered and not conflicted: true and its
 * identity. A report takes one read: the record is forgotten once none is left, or at once
 * if conflicted (tier_rados.c's recall_served says why it is kept until then). */
static bool recall_served(struct fs_state *s, const struct kvt_key *key, struct fs_ident *id)
{
	pthread_mutex_lock(&s->served_lock);
	struct fs_served *e = served_slot(s, key);
	bool ok = e->used && kvt__key_eq(&e->key, key);
	if (ok) {
		*id = e->id;
		ok = !e->conflicted;
		e->used = ok && --e->reads > 0;
	}
	pthread_mutex_unlock(&s->served_lock);
	return ok;
}

static int64_t run_read(struct fs_state *s, struct fs_op *op)
{
	char path[72];
	key_path(&op->key, path);
	bool direct = true;
	for (uint32_t i = 0; i < op->nsegs; i++)
		direct = direct && aligned(op->segs[i].buf, op->segs[i].off, op->segs[i].len);
	/* Inspection leaves atime alone: it is the sweeps' measure of recent use (see the
	 * EPERM case below). O_NONBLOCK: a FIFO planted in an object's place (anyone can write
	 * the shared directory) would block the open, and this worker with it, until a writer
	 * came. */
	int dfd = leaf_open(s, path, false);
	if (dfd < 0) {
		if (dfd == -ENOTDIR)
			KVT_WARN(&s->t->log, "fs: %s/%.5s is not a directory of ours (a symbolic "
					     "link?): its objects are misses", s->dir, path);
		if (leaf_absent(dfd)) {
			atomic_fetch_add(&s->cnt.misses, 1);
			return -ENOENT;
		}
		atomic_fetch_add(&s->cnt.errors, 1);
		KVT_WARN(&s->t->log, "fs: open %s/%.5s: %s", s->dir, path, strerror(-dfd));
		return dfd;
	}
	const char *name = leaf_name(path);
	int fd = open_maybe_direct(s, dfd, name,
				   O_RDONLY | O_NONBLOCK | (s->ro ? O_NOATIME : 0), direct);
	if (fd < 0 && errno == EPERM && s->ro) {
		/* O_NOATIME needs the file's owner or CAP_FOWNER. A read without it moves the
		 * atime wherever the mount updates atimes, and the sweeps evict by it: a look
		 * would change what the store evicts next (until 2026-12-06 inspection read so).
		 * Putting the atime back after the read (futimens) needs the same owner or
		 * capability. So such a file is read only where the mount never updates atimes
		 * (noatime), else refused (-EPERM: `kvtier verify` names it, unchecked). */
		struct statvfs vfs;
		if (fstatvfs(dfd, &vfs) == 0 && (vfs.f_flag & ST_NOATIME)) {
			fd = open_maybe_direct(s, dfd, name, O_RDONLY | O_NONBLOCK, direct);
		} else {
			close(dfd);
			atomic_fetch_add(&s->cnt.errors, 1);
			kvt__logf_limited(&s->t->log, &s->foreign_warn, KVT_LOG_WARN,
					  "fs: %s/%s belongs to another user: not read, as reading "
					  "it would change its atime, which the sweeps evict by (run "
					  "as its owner, with CAP_FOWNER, or on a noatime mount)",
					  s->dir, path);
			return -EPERM;
		}
	}
	int open_errno = errno;
	close(dfd);
	errno = open_errno;
	struct stat fst;
	if (fd >= 0 && (fstat(fd, &fst) < 0 || !S_ISREG(fst.st_mode))) {
		close(fd);
		KVT_WARN(&s->t->log, "fs: %s/%s is not a regular file, not an object", s->dir, path);
		atomic_fetch_add(&s->cnt.misses, 1);
		return -ENOENT;
	}
	/* Shorter than a header (cut short by a power loss with fs.fsync=none, or planted): no
	 * object, a miss as for exists(); a write of the key replaces it (publish_taken). It
	 * used to be a hit of its few bytes, or of none. */
	if (fd >= 0 && fst.st_size < KVT_HEADER_BYTES) {
		close(fd);
		KVT_WARN(&s->t->log, "fs: %s/%s holds %lld bytes, less than an object header: a "
				     "miss", s->dir, path, (long long)fst.st_size);
		atomic_fetch_add(&s->cnt.misses, 1);
		return -ENOENT;
	}
	if (fd < 0) {
		/* ESTALE: NFS had the name cached, another node removed the file: a miss too */
		if (errno == ENOENT || errno == ENOTDIR || errno == ESTALE) {
			atomic_fetch_add(&s->cnt.misses, 1);
			return -ENOENT;
		}
		int e = -errno;
		if (e == -ELOOP) { /* a symlink in an object's place: never followed, a miss */
			KVT_WARN(&s->t->log, "fs: %s/%s is a symbolic link, not an object", s->dir,
				 path);
			atomic_fetch_add(&s->cnt.misses, 1);
			return -ENOENT;
		}
		atomic_fetch_add(&s->cnt.errors, 1);
		KVT_WARN(&s->t->log, "fs: open %s/%s: %s", s->dir, path, strerror(-e));
		return e;
	}
	uint64_t total = 0;
	int rc = 0;
	for (uint32_t i = 0; i < op->nsegs; i++) {
		ssize_t r = io_full(s, fd, false, op->segs[i].buf, op->segs[i].len,
				    op->segs[i].off);
		if (r == -ESTALE) { /* removed by another node while we read it */
			rc = -ENOENT;
			atomic_fetch_add(&s->cnt.misses, 1);
			break;
		}
		if (r < 0) {
			rc = (int)r;
			atomic_fetch_add(&s->cnt.errors, 1);
			KVT_WARN(&s->t->log, "fs: read %s/%s: %s", s->dir, path, strerror(-rc));
			break;
		}
		total += (uint64_t)r;
	}
	if (rc == 0) {
		struct fs_ident id;
		ident_of(s, fd, &fst, &id);
		remember_served(s, &op->key, &id);
	}
	close(fd);
	if (rc < 0)
		return rc;
	atomic_fetch_add(&s->cnt.hits, 1);
	atomic_fetch_add(&s->cnt.reads, 1);
	atomic_fetch_add(&s->cnt.read_bytes, total);
	return (int64_t)total; /* objects may exceed 2 GiB: never clamped */
}

/* The name is taken (another writer published first, or something was planted there): the
 * temporary replaces it, whatever it holds. Keeping a regular file of the object's size, as
 * until 2026-12-06, acknowledged puts that stored nothing this store can read: a copy
 * without the MAC this store requires, one under a rotated encryption key, a damaged one
 * (the next read drops it: the put was lost), and it kept the old file's date, so the
 * sweep took the key just put for the least recently used. Replacing is safe: every
 * sound copy of a key holds the same data, a reader keeps the file it opened, and a drop
 * spares a file its read did not serve (served_replaced). Only what cannot be an object
 * is worth a warning. */
static int publish_taken(struct fs_state *s, int dfd, const char *tmp, const char *name,
			 uint64_t len)
{
	struct stat st;
	int got = fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW);
	if (got == 0 && !(S_ISREG(st.st_mode) && (uint64_t)st.st_size == len))
		KVT_WARN(&s->t->log, "fs: %s/.../%s held %s, not the object: replaced", s->dir,
			 name,
			 S_ISLNK(st.st_mode)   ? "a symbolic link"
			 : S_ISDIR(st.st_mode) ? "a directory"
			 : S_ISREG(st.st_mode) ? "a file of another size"
					       : "a special file");
	if (renameat(dfd, tmp, dfd, name) == 0)
		return 0;
	int e = -errno; /* a directory in its place: not ours to remove */
	unlinkat(dfd, tmp, 0);
	return e;
}

/* A new temporary name for object name, in its leaf (see the top of the file). */
static void tmp_name(struct fs_state *s, const char *name, char *out, size_t n)
{
	snprintf(out, n, ".%s.tmp.%s.%ld.%016llx.%llu", name, s->host, (long)getpid(),
		 (unsigned long long)s->tmp_nonce,
		 (unsigned long long)atomic_fetch_add(&s->tmp_counter, 1));
}

/* Rename from onto to (a temporary name, both in dfd) without replacing a file there: a
 * temporary of that name is another writer's. Where the file system cannot refuse to
 * replace (no RENAME_NOREPLACE), a plain rename: the random part of to makes a clash as
 * good as impossible. 0 or -errno (-EEXIST: the name is taken). */
static int rename_aside(struct fs_state *s, int dfd, const char *from, const char *to)
{
	if (atomic_load(&s->noreplace_ok)) {
		if (renameat2(dfd, from, dfd, to, RENAME_NOREPLACE) == 0)
			return 0;
		if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP && errno != EOPNOTSUPP)
			return -errno;
		atomic_store(&s->noreplace_ok, 0);
	}
	return renameat(dfd, from, dfd, to) < 0 ? -errno : 0;
}

/* Move a finished temporary (len bytes) onto its final name, both in leaf dfd:
 * renameat2(RENAME_NOREPLACE) in one step where the file system has it (ext4, xfs, btrfs,
 * tmpfs), else link() + unlink(), else a plain rename. A name already taken is replaced
 * all the same (publish_taken: the refusal only lets it warn about what was planted
 * there); a plain rename replaces at once. That is harmless: every sound copy of a key
 * holds the same data (encrypted ones differ in their nonce), a read reads one file whole,
 * and a drop spares a file its read did not serve. */
static int publish(struct fs_state *s, int dfd, const char *tmp, const char *name, uint64_t len)
{
	if (atomic_load(&s->noreplace_ok)) {
		if (renameat2(dfd, tmp, dfd, name, RENAME_NOREPLACE) == 0)
			return 0;
		if (errno == EEXIST)
			return publish_taken(s, dfd, tmp, name, len);
		if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP && errno != EOPNOTSUPP)
			return -errno;
		atomic_store(&s->noreplace_ok, 0);
	}
	if (atomic_load(&s->link_ok)) {
		if (linkat(dfd, tmp, dfd, name, 0) == 0) {
			unlinkat(dfd, tmp, 0);
			return 0;
		}
		if (errno == EEXIST)
			return publish_taken(s, dfd, tmp, name, len);
		if (errno != EPERM && errno != ENOTSUP && errno != EOPNOTSUPP &&
		    errno != ENOSYS && errno != EMLINK)
			return -errno;
		if (atomic_exchange(&s->link_ok, 0))
			KVT_INFO(&s->t->log, "fs: %s refuses hard links, publishing by rename",
				 s->dir);
	}
	return renameat(dfd, tmp, dfd, name) < 0 ? -errno : 0;
}

static bool writing_has(struct fs_state *s, const struct kvt_key *k)
{
	for (unsigned i = 0; i < KVT_ARRAY_SIZE(s->writing); i++)
		if (s->writing_used[i] && kvt__key_eq(&s->writing[i], k))
			return true;
	return false;
}

/* Date a published chunk just before its parent (oldest-first removal then takes a chain's
 * end first), or in 1970 when the parent is not here (it could not be resumed from here).
 * Writes complete out of order: if a worker is writing the parent right now, wait (at most
 * 2 s: a caller's parent loop must not hang the workers) for it to be published and dated.
 * Only a write already running is waited for, and the queue is FIFO (a parent is put
 * before its child), so workers never wait on each other in a cycle. Only the eviction
 * order depends on the date: failures are ignored. */
static void date_in_chain(struct fs_state *s, int dfd, const char *tmp,
			  const struct kvt_key *parent)
{
	char ppath[72];
	struct stat st;
	struct timespec ts[2] = {{1, 0}, {1, 0}}; /* atime too: the age is max(atime, mtime) */
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	pthread_mutex_lock(&s->lock);
	while (writing_has(s, parent) &&
	       pthread_cond_timedwait(&s->wcond, &s->lock, &until) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&s->lock);
	key_path(parent, ppath);
	int pfd = leaf_open(s, ppath, false);
	int got = pfd >= 0 ? fstatat(pfd, leaf_name(ppath), &st, AT_SYMLINK_NOFOLLOW) : -1;
	if (pfd >= 0)
		close(pfd);
	if (got == 0 && S_ISREG(st.st_mode)) {
		/* just before the parent's age as the sweep measures it: a parent written long
		 * ago and read since is young, and so must its new child be (until 2026-12-06
		 * the child took the parent's mtime alone, and went before objects idle far
		 * longer) */
		bool a_newer = st.st_atim.tv_sec > st.st_mtim.tv_sec ||
			       (st.st_atim.tv_sec == st.st_mtim.tv_sec &&
				st.st_atim.tv_nsec > st.st_mtim.tv_nsec);
		ts[1] = a_newer ? st.st_atim : st.st_mtim;
		if (ts[1].tv_nsec > 0) {
			ts[1].tv_nsec--;
		} else if (ts[1].tv_sec > 1) {
			ts[1].tv_sec--;
			ts[1].tv_nsec = 999999999;
		}
		ts[0] = ts[1];
	}
	utimensat(dfd, tmp, ts, AT_SYMLINK_NOFOLLOW);
}

static int write_object(struct fs_state *s, struct fs_op *op);
static void queue_sweep(struct fs_state *s, bool full);
static void run_sweep(struct fs_state *s, bool queued);

/* A write was refused for room: is a sweep due (at most one per FS_FULL_SWEEP_NS, or per
 * fs.tmp_max_age_s if shorter, over all workers)? Claims it if so. */
static bool full_sweep_due(struct fs_state *s)
{
	uint64_t now = kvt__now_ns(), last = atomic_load(&s->full_sweep_ns);
	uint64_t period = KVT_MIN(FS_FULL_SWEEP_NS, s->tmp_max_age * 1000000000ull);
	return (!last || now - last >= period) &&
	       atomic_compare_exchange_strong(&s->full_sweep_ns, &last, now);
}

static int run_write(struct fs_state *s, struct fs_op *op)
{
	unsigned slot = KVT_ARRAY_SIZE(s->writing);
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < KVT_ARRAY_SIZE(s->writing); i++)
		if (!s->writing_used[i]) {
			s->writing_used[i] = true;
			s->writing[i] = op->key;
			slot = i;
			break;
		}
	pthread_mutex_unlock(&s->lock);
	int rc = write_object(s, op);
	/* No room: a sweep is queued, and the write answers at once. Sweeps otherwise follow
	 * successful writes only, so a file system filled by dead writers' temporaries
	 * (writers killed mid-write) refused every write for ever, its debris never collected
	 * (until 2026-12-06; fs_full_sweep). The sweep also brings the directory under
	 * fs.bytes. Not run here: a walk of a large shared tree takes minutes, and this write
	 * is on the pending list that flushes wait for (a review: a flush behind it missed its
	 * deadline; fs_full_sweep part C). */
	if ((rc == -ENOSPC || rc == -EDQUOT) && full_sweep_due(s)) {
		KVT_DEBUG(&s->t->log, "fs: %s is full: sweeping", s->dir);
		queue_sweep(s, true);
	}
	if (rc == -ENOSPC || rc == -EDQUOT) {
		/* A quota (CephFS ceph.quota.max_bytes, an NFS or XFS user or project quota) or
		 * a full file system: -ENOSPC, a write refused. Passed on as -EDQUOT the engine
		 * took it for the NVMe tier's daily write budget and offered the chunk again at
		 * every hit, each offer a doomed write and a warning line (until 2026-12-06). */
		kvt__logf_limited(&s->t->log, &s->full_warn, KVT_LOG_WARN,
				  "fs: %s is full (%s): writes are refused until it has room", s->dir,
				  rc == -EDQUOT ? "its quota" : "no space");
		rc = -ENOSPC;
	}
	if (slot < KVT_ARRAY_SIZE(s->writing)) {
		pthread_mutex_lock(&s->lock);
		s->writing_used[slot] = false;
		pthread_cond_broadcast(&s->wcond);
		pthread_mutex_unlock(&s->lock);
	}
	return rc;
}

static int write_object(struct fs_state *s, struct fs_op *op)
{
	char path[72], tmp[256];
	key_path(&op->key, path);
	const char *name = leaf_name(path);
	tmp_name(s, name, tmp, sizeof(tmp));
	bool direct = aligned(op->obj, 0, op->len);
	int rc = 0, fd = -1;
	int dfd = leaf_open(s, path, true);
	if (dfd < 0) {
		rc = dfd;
		goto fail;
	}
	fd = open_maybe_direct(s, dfd, tmp, O_WRONLY | O_CREAT | O_EXCL, direct);
	if (fd < 0) {
		rc = -errno;
		goto fail;
	}
	ssize_t w = io_full(s, fd, true, (void *)op->obj, op->len, 0);
	if (w < 0)
		rc = (int)w;
	else if ((uint64_t)w != op->len) /* a write of 0 bytes: never publish a short object */
		rc = -EIO;
	else if (s->sync != SYNC_NONE && fdatasync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && !rc)
		rc = -errno;
	if (rc < 0)
		goto fail_unlink;
	/* Dated before it is published (the name carries the inode's times over): a sweep must
	 * never see it with a newer date than its chain gives it. */
	if (op->has_parent)
		date_in_chain(s, dfd, tmp, &op->parent);
	rc = publish(s, dfd, tmp, name, op->len);
	if (rc < 0) /* the temporary too (a publish that gave up on it removed it already): it
		     * would hold an object's bytes for fs.tmp_max_age_s, uncounted by sweeps */
		goto fail_unlink;
	served_replaced(s, &op->key);
	if (s->sync == SYNC_DATA) { /* the next flush makes the name durable */
		pthread_mutex_lock(&s->lock);
		mark_dir_dirty(s, (unsigned)op->key.bytes[0] << 8 | op->key.bytes[1]);
		pthread_mutex_unlock(&s->lock);
	}
	if (s->sync == SYNC_FULL && fsync(dfd) < 0) {
		rc = -errno;
		goto fail;
	}
	close(dfd);
	atomic_fetch_add(&s->cnt.writes, 1);
	atomic_fetch_add(&s->cnt.write_bytes, op->len);
	atomic_fetch_add(&s->written_since, op->len);
	return 0;

fail_unlink:
	unlinkat(dfd, tmp, 0);
fail:
	if (dfd >= 0)
		close(dfd);
	if (rc == -EDQUOT || rc == -ENOSPC) /* a quota or no space: a write refused (run_write) */
		return rc;
	atomic_fetch_add(&s->cnt.errors, 1);
	KVT_WARN(&s->t->log, "fs: write %s/%s: %s", s->dir, path,
		 rc == -ENOTDIR ? "its directory is not a directory of ours (a symbolic link?)"
				: strerror(-rc));
	return rc;
}

/* A name this node's sweep or drop took away: its leaf is synced by the next flush (data and
 * full; none: the flush's syncfs). Until 2026-12-03 nothing marked it: a key the sweep had
 * evicted, then removed (-ENOENT: no name left to take) and flushed, came back after a
 * power cut, as the unlink was never made durable (integ.fs_powercut). */
/* The sweep and the drop call this before the name goes, not only after: a kvt_remove of
 * the key in between finds no name (-ENOENT, which marks nothing), and a flush that
 * follows it must sync the leaf, or a power cut brings the key back (found by review,
 * 2026-12-06; not forced by a test: the window is one close). Again after, for a flush
 * that ran in between. */
static void unlink_marked(struct fs_state *s, const struct kvt_key *k)
{
	if (s->sync == SYNC_NONE)
		return;
	pthread_mutex_lock(&s->lock);
	mark_dir_dirty(s, (unsigned)k->bytes[0] << 8 | k->bytes[1]);
	pthread_mutex_unlock(&s->lock);
}

static int run_remove(struct fs_state *s, struct fs_op *op)
{
	char path[72];
	key_path(&op->key, path);
	served_replaced(s, &op->key);
	int dfd = leaf_open(s, path, false);
	if (leaf_absent(dfd))
		return -ENOENT;
	int r = dfd < 0 ? dfd : unlinkat(dfd, leaf_name(path), 0) < 0 ? -errno : 0;
	/* The name's removal is a change of its leaf directory, durable once that is synced,
	 * as a publish's name is (run_write): fsync=full syncs it before answering, data marks
	 * the leaf for the next flush (a removed key must not come back after a power cut
	 * that followed a flush). */
	bool unlinked = r == 0, synced = false;
	if (unlinked && s->sync == SYNC_FULL) {
		synced = fsync(dfd) == 0;
		if (!synced)
			r = -errno; /* the name is gone all the same: the next flush syncs it */
	}
	if (unlinked && !synced && s->sync != SYNC_NONE) {
		pthread_mutex_lock(&s->lock);
		mark_dir_dirty(s, (unsigned)op->key.bytes[0] << 8 | op->key.bytes[1]);
		pthread_mutex_unlock(&s->lock);
	}
	if (dfd >= 0)
		close(dfd);
	if (r < 0) {
		int e = r;
		if (e == -ENOENT || e == -ENOTDIR || e == -ESTALE)
			return -ENOENT;
		atomic_fetch_add(&s->cnt.errors, 1);
		KVT_WARN(&s->t->log, "fs: unlink %s/%s: %s", s->dir, path, strerror(-e));
		return e;
	}
	atomic_fetch_add(&s->cnt.removes, 1);
	return 0;
}

/* Is the file under name in dfd - still the one the corrupt read was served (id) - sound
 * when read again? The read may have been damaged on its way (NFS, CephFS, a FUSE daemon,
 * a bad NIC) while the stored copy is good, and dropping it costs every node that shares
 * the directory a miss: it is read again, its cached pages dropped first so that the
 * bytes come from the file system's server where it has one, and checked as the engine
 * checks (header and every layer CRC for this store's geometry and key; a MAC the engine
 * refused passes, the tier has no key). Without a geometry (a tier opened outside a
 * store), a size no object can have, or no memory: not sound, as before the check. Until
 * 2026-12-06 every report dropped the copy (a review: one flipped byte in a read's buffer
 * deleted a sound shared chunk; S3 and Redis already read again). */
static bool copy_sound(struct fs_state *s, int dfd, const char *name, const struct fs_ident *id,
		       const struct kvt_key *key)
{
	if (!s->t->geometry)
		return false;
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return false;
	struct stat st;
	struct fs_ident now;
	bool sound = false;
	uint8_t *buf = NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		goto out;
	ident_of(s, fd, &st, &now);
	if (!ident_eq(&now, id) || (uint64_t)st.st_size < KVT_HEADER_BYTES ||
	    (uint64_t)st.st_size > s->t->object_max)
		goto out;
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	if (!(buf = kvt__malloc((size_t)st.st_size)))
		goto out;
	uint64_t got = 0;
	while (got < (uint64_t)st.st_size) {
		ssize_t r = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			goto out;
		got += (uint64_t)r;
	}
	struct kvt_expect exp = {.geometry = s->t->geometry, .key = key,
				 .max_object_bytes = s->t->object_max};
	sound = kvt__object_verify(buf, got, &exp, NULL) == 0;
out:
	kvt__free(buf);
	close(fd);
	return sound;
}

/* Drop a corrupt object the engine read. A good copy may have been published under the same
 * name since (by another node, or by this one after a remove), and that copy must survive.
 * The file under the name is opened (which pins its inode: its number cannot be reused
 * while we hold it) and compared with the one the read served (struct fs_ident); only if it
 * is that file, and damaged when read again (copy_sound), is the name moved aside to a
 * temporary name (atomic; never over another writer's temporary where RENAME_NOREPLACE
 * works) and removed. What was moved goes even if
 * it is not that file: a copy published in the instant between the look and the move (after
 * someone else removed the corrupt one) is lost, as a copy written while a remove runs may
 * be. Linking it back would undo a remove that came meanwhile: it found no name and
 * answered -ENOENT (for kvt_remove, a done remove), and the object would be back. A read no
 * longer remembered drops nothing: the next read that finds the object damaged reports it
 * again, and that report is about a remembered read. Nor does one of several reads of the
 * key that served different files (remember_served): the drop does not say which of them it
 * is about. A crash between the two steps leaves a temporary that sweeps remove after
 * fs.tmp_max_age_s. */
static int run_drop(struct fs_state *s, struct fs_op *op)
{
	struct fs_ident id;
	if (!recall_served(s, &op->key, &id))
		return 0;
	char path[72], aside[256];
	key_path(&op->key, path);
	const char *name = leaf_name(path);
	int dfd = leaf_open(s, path, false);
	if (dfd < 0)
		return leaf_absent(dfd) ? -ENOENT : dfd;
	int fd = openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	struct fs_ident now;
	if (fd < 0 || fstat(fd, &st) < 0) {
		int rc = errno == ENOENT || errno == ESTALE ? -ENOENT : -errno;
		if (fd >= 0)
			close(fd);
		close(dfd);
		return rc;
	}
	ident_of(s, fd, &st, &now);
	if (!ident_eq(&now, &id)) {
		close(fd);
		close(dfd);
		KVT_INFO(&s->t->log, "fs: %s/%s was rewritten since the corrupt read; left in "
				     "place", s->dir, path);
		return 0;
	}
	if (copy_sound(s, dfd, name, &id, &op->key)) {
		close(fd);
		close(dfd);
		KVT_INFO(&s->t->log, "fs: %s/%s is sound when read again (the corrupt read was "
				     "damaged on its way); left in place", s->dir, path);
		return 0;
	}
	/* Looked at again just before the move: the re-read above takes round trips on a
	 * shared file system, and a copy another node put meanwhile (a put over the name
	 * replaces it) must not go with the move (until 2026-12-06 it did; a review). What
	 * is left is the instant between this look and the move. */
	struct stat again;
	if (fstatat(dfd, name, &again, AT_SYMLINK_NOFOLLOW) < 0 || again.st_dev != st.st_dev ||
	    again.st_ino != st.st_ino) {
		close(fd);
		close(dfd);
		KVT_INFO(&s->t->log, "fs: %s/%s was rewritten while it was read again; left in "
				     "place", s->dir, path);
		return 0;
	}
	tmp_name(s, name, aside, sizeof(aside));
	unlink_marked(s, &op->key);
	int rc = rename_aside(s, dfd, name, aside);
	if (rc < 0) {
		rc = rc == -ENOENT || rc == -ESTALE ? -ENOENT : rc;
	} else {
		struct stat moved;
		if (fstatat(dfd, aside, &moved, AT_SYMLINK_NOFOLLOW) < 0 ||
		    moved.st_dev != st.st_dev || moved.st_ino != st.st_ino)
			KVT_INFO(&s->t->log, "fs: %s/%s: a copy published while the corrupt one was "
					     "being dropped was dropped with it", s->dir, path);
		unlinkat(dfd, aside, 0);
		unlink_marked(s, &op->key);
		atomic_fetch_add(&s->cnt.removes, 1);
	}
	close(fd);
	close(dfd);
	return rc;
}

/* A flush reached a worker: complete it now if no earlier write is pending, else park it. */
static void run_flush(struct fs_state *s, struct fs_op *op, bool cancel)
{
	pthread_mutex_lock(&s->lock);
	op->next = NULL;
	if (s->flush_tail)
		s->flush_tail->next = op;
	else
		s->flush_head = op;
	s->flush_tail = op;
	struct fs_op *ready = ready_flushes(s);
	pthread_mutex_unlock(&s->lock);
	finish_flushes(s, ready, cancel ? -ECANCELED : 0);
}

static void maybe_sweep(struct fs_state *s);

static void run_op(struct fs_state *s, struct fs_op *op, bool cancel)
{
	int64_t rc = -ECANCELED;
	switch (op->kind) {
	case OP_EXISTS:
		run_exists(s, op, cancel);
		kvt__free(op);
		return;
	case OP_FLUSH:
		run_flush(s, op, cancel);
		return;
	case OP_SYNCDIRS:
		run_syncdirs(s, op, cancel);
		return;
	case OP_READ:
		if (!cancel)
			rc = run_read(s, op);
		break;
	case OP_WRITE:
		if (!cancel && (rc = run_write(s, op)) == 0)
			maybe_sweep(s); /* queued before the callback, so before any close */
		/* the write's callback runs before any flush that waited for it */
		op->cb(op->arg, rc);
		write_done(s, op);
		kvt__free(op);
		return;
	case OP_REMOVE:
		/* a flush submitted after it waits for it, as for a write: the workers run
		 * ops in parallel, and a flush that ran before the unlink (and its leaf's
		 * mark) answered with the removal not durable - the key came back after a
		 * power cut */
		if (!cancel)
			rc = run_remove(s, op);
		op->cb(op->arg, rc);
		write_done(s, op);
		kvt__free(op);
		return;
	case OP_DROP:
		/* Even while closing: a corrupt object left in place would make the rightful
		 * writer's next put of that key look already done. */
		rc = run_drop(s, op);
		break;
	case OP_SWEEP:
		/* Even while closing: the writes that called for it are done, and a writer's
		 * last sweep is what keeps the directory under fs.bytes. Not a refused write's:
		 * it is for the writes that would follow, and a close after a full file system
		 * would walk the tree for nothing (minutes on a large shared one) */
		if (!(cancel && op->full_sweep))
			run_sweep(s, !op->full_sweep);
		kvt__free(op);
		return;
	}
	if (op->cb)
		op->cb(op->arg, rc);
	kvt__free(op);
}

static void *worker(void *arg)
{
	struct fs_state *s = arg;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (!s->head && !s->closing)
			pthread_cond_wait(&s->cond, &s->lock);
		struct fs_op *op = s->head;
		if (!op)
			break; /* closing and drained */
		s->head = op->next;
		if (!s->head)
			s->tail = NULL;
		bool cancel = s->closing;
		pthread_mutex_unlock(&s->lock);
		run_op(s, op, cancel);
		pthread_mutex_lock(&s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* ------------------------------------------------------------ vtable */

static int mkdir_p(char *path, mode_t mode)
{
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		int rc = mkdir(path, mode);
		*p = '/';
		if (rc < 0 && errno != EEXIST)
			return -errno;
	}
	return mkdir(path, mode) < 0 && errno != EEXIST ? -errno : 0;
}

static int fs_open(struct kvt_tier *t, const struct kvt_config *cfg)
{
	struct fs_state *s = t->state;
	s->t = t;
	s->rootfd = -1;
	s->live_fd = -1;
	const char *dir = kvt__cfg_str(cfg, "fs.dir");
	if (!*dir) {
		KVT_ERR(&t->log, "fs: fs.dir is not set (the shared directory to use)");
		return -EINVAL;
	}
	int n = snprintf(s->dir, sizeof(s->dir), "%s/" FS_LAYOUT, dir);
	if (n < 0 || (size_t)n >= sizeof(s->dir)) {
		KVT_ERR(&t->log, "fs: fs.dir is too long");
		return -ENAMETOOLONG;
	}
	s->ro = kvt__cfg_bool(cfg, "store.read_only");
	s->file_mode = (mode_t)strtoul(kvt__cfg_str(cfg, "fs.file_mode"), NULL, 8);
	s->dir_mode = (mode_t)strtoul(kvt__cfg_str(cfg, "fs.dir_mode"), NULL, 8);
	s->capacity = kvt__cfg_u64(cfg, "fs.bytes");
	s->tmp_max_age = kvt__cfg_u64(cfg, "fs.tmp_max_age_s");
	s->tmp_grace = kvt__cfg_u64(cfg, "fs.tmp_grace_s");
	const char *live = kvt__cfg_str(cfg, "fs.live_dir");
	if (strlen(live) >= sizeof(s->live_dir)) {
		KVT_ERR(&t->log, "fs: fs.live_dir is too long");
		return -ENAMETOOLONG;
	}
	strcpy(s->live_dir, live);
	if (!s->ro && s->capacity && s->capacity < t->object_max) {
		KVT_ERR(&t->log,
			"fs: fs.bytes (%llu) is smaller than one object (%llu bytes at this "
			"geometry): nothing could be stored; raise it or set 0 (unbounded)",
			(unsigned long long)s->capacity, (unsigned long long)t->object_max);
		return -EINVAL;
	}
	/* Read-only (inspection): create nothing; a missing v1/ means this is not a store. */
	/* v1 itself is not followed if it is a symbolic link, as no level below it is
	 * (leaf_open): anyone who can write the shared directory could plant one, and this
	 * node's objects would go, and its sweeps unlink, wherever it points. fs.dir may be
	 * one (an administrator's mount point). */
	int rc = s->ro ? 0 : mkdir_p(s->dir, s->dir_mode);
	if (rc < 0 ||
	    (s->rootfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		rc = rc < 0 ? rc : -errno;
		KVT_ERR(&t->log, "fs: cannot use %s: %s%s", s->dir, strerror(-rc),
			s->ro && rc == -ENOENT ? " (not a kvtier fs store)"
			: rc == -ELOOP || rc == -ENOTDIR
			    ? " (a symbolic link or not a directory: refused, see docs/TIERS.md)"
			    : "");
		return rc;
	}
	const char *d = kvt__cfg_str(cfg, "fs.direct");
	s->direct = !strcmp(d, "on") ? DIRECT_ON : !strcmp(d, "off") ? DIRECT_OFF : DIRECT_AUTO;
	const char *y = kvt__cfg_str(cfg, "fs.fsync");
	s->sync = !strcmp(y, "none") ? SYNC_NONE : !strcmp(y, "full") ? SYNC_FULL : SYNC_DATA;
	atomic_store(&s->direct_ok, 1);
	atomic_store(&s->link_ok, 1);
	atomic_store(&s->noreplace_ok, 1);
	atomic_store(&s->handle_ok, 1);
	if (getrandom(&s->tmp_nonce, sizeof(s->tmp_nonce), GRND_NONBLOCK) != sizeof(s->tmp_nonce))
		s->tmp_nonce = kvt__now_ns() ^ (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)s;
	/* A liveness file is proof only where every writer that could own it runs on this
	 * node and its lock is this kernel's: a node-local file system. Elsewhere no proof is
	 * offered or trusted, and dead writers' temporaries wait for the watch. */
	char fstype[32];
	int local = !s->ro && s->live_dir[0]
			    ? kvt__fs_live_local(s->live_dir, fstype, sizeof(fstype)) : 1;
	if (local == 0) {
		KVT_WARN(&t->log, "fs: fs.live_dir %s is on %s, not a node-local file system: "
				  "not used (a dead writer's temporaries wait fs.tmp_max_age_s); "
				  "set a tmpfs such as /dev/shm", s->live_dir, fstype);
		s->live_dir[0] = '\0';
	}
	if (!s->ro && s->live_dir[0]) {
		s->live_fd = kvt__fs_live_claim(s->live_dir, s->tmp_nonce);
		if (s->live_fd < 0)
			KVT_INFO(&t->log, "fs: %s: cannot hold this writer's liveness file (%s): if it "
					  "dies, this node's sweeps wait fs.tmp_max_age_s for its "
					  "temporaries", s->live_dir, strerror(-s->live_fd));
	}
	/* The host name makes temporaries unique across nodes; keep it to safe characters. */
	char host[256] = "host";
	gethostname(host, sizeof(host) - 1);
	size_t o = 0;
	for (const char *p = host; *p && o < sizeof(s->host) - 1; p++)
		s->host[o++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
						      (*p >= '0' && *p <= '9') || *p == '-'
					      ? *p
					      : '_');
	uint64_t nt = kvt__cfg_u64(cfg, "fs.threads");
	s->nthreads = (unsigned)KVT_MIN(KVT_MAX(nt, 1), KVT_ARRAY_SIZE(s->threads));

	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->served_lock, NULL);
	pthread_mutex_init(&s->sweep_lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	pthread_cond_init(&s->wcond, NULL);
	for (unsigned i = 0; i < s->nthreads; i++) {
		rc = -pthread_create(&s->threads[i], NULL, worker, s);
		if (rc < 0) {
			KVT_ERR(&t->log, "fs: cannot start worker threads: %s", strerror(-rc));
			pthread_mutex_lock(&s->lock);
			s->closing = true;
			pthread_cond_broadcast(&s->cond);
			pthread_mutex_unlock(&s->lock);
			for (unsigned j = 0; j < i; j++)
				pthread_join(s->threads[j], NULL);
			pthread_cond_destroy(&s->cond);
			pthread_cond_destroy(&s->wcond);
			pthread_mutex_destroy(&s->lock);
			pthread_mutex_destroy(&s->served_lock);
			pthread_mutex_destroy(&s->sweep_lock);
			kvt__fs_live_release(s->live_dir, s->tmp_nonce, s->live_fd);
			close(s->rootfd);
			return rc;
		}
	}
	/* from the values, not d and y: kvt__cfg_str returns one per-thread buffer, so both
	 * point at the last string read */
	static const char *const direct_names[] = {[DIRECT_AUTO] = "auto", [DIRECT_ON] = "on",
						    [DIRECT_OFF] = "off"};
	static const char *const sync_names[] = {[SYNC_NONE] = "none", [SYNC_DATA] = "data",
						  [SYNC_FULL] = "full"};
	KVT_INFO(&t->log, "fs: %s, %u threads, direct %s, fsync %s", s->dir, s->nthreads,
		 direct_names[s->direct], sync_names[s->sync]);
	return 0;
}

static void fs_close(struct kvt_tier *t)
{
	struct fs_state *s = t->state;
	pthread_mutex_lock(&s->lock);
	s->closing = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	for (unsigned i = 0; i < s->nthreads; i++)
		pthread_join(s->threads[i], NULL);
	/* Every write has completed, so no flush can still be waiting. */
	assert(!s->flush_head && !s->wfirst && !s->dirsync_head);
	pthread_cond_destroy(&s->cond);
	pthread_cond_destroy(&s->wcond);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->served_lock);
	pthread_mutex_destroy(&s->sweep_lock);
	kvt__free(s->temps_seen);
	kvt__fs_live_release(s->live_dir, s->tmp_nonce, s->live_fd);
	close(s->rootfd);
}

static struct fs_op *op_new(enum fs_kind kind, size_t extra, kvt_tier_cb cb, void *arg)
{
	struct fs_op *op = kvt__calloc(1, sizeof(*op) + extra);
	if (op) {
		op->kind = kind;
		op->cb = cb;
		op->arg = arg;
	}
	return op;
}

static int fs_exists(struct kvt_tier *t, const struct kvt_key *keys, uint32_t n, uint8_t *present,
		     kvt_tier_cb cb, void *arg)
{
	struct fs_state *s = t->state;
	if (!cb || (n && (!keys || !present)))
		return -EINVAL;
	unsigned pieces = (unsigned)KVT_MIN(KVT_MAX(n / FS_EXISTS_PIECE, 1), s->nthreads);
	struct fs_op *ops[KVT_ARRAY_SIZE(s->threads)] = {0};
	struct fs_batch *b = kvt__calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->keys = kvt__malloc(n ? (size_t)n * sizeof(*keys) : 1);
	if (!b->keys)
		goto nomem;
	if (n)
		memcpy(b->keys, keys, (size_t)n * sizeof(*keys));
	b->present = present;
	b->cb = cb;
	b->arg = arg;
	atomic_init(&b->pieces_left, pieces);
	atomic_init(&b->err, 0);
	for (unsigned i = 0; i < pieces; i++) {
		if (!(ops[i] = op_new(OP_EXISTS, 0, NULL, NULL)))
			goto nomem;
		ops[i]->batch = b;
		ops[i]->i0 = (uint32_t)((uint64_t)n * i / pieces);
		ops[i]->i1 = (uint32_t)((uint64_t)n * (i + 1) / pieces);
	}
	int rc = submit_many(s, ops, pieces, false);
	if (rc == 0)
		return 0;
	for (unsigned i = 0; i < pieces; i++)
		kvt__free(ops[i]);
	kvt__free(b->keys);
	kvt__free(b);
	return rc;
nomem:
	for (unsigned i = 0; i < pieces; i++)
		kvt__free(ops[i]);
	kvt__free(b->keys);
	kvt__free(b);
	return -ENOMEM;
}

static int fs_read(struct kvt_tier *t, const struct kvt_key *key, const struct kvt_seg *segs,
		   uint32_t nsegs, kvt_tier_cb cb, void *arg)
{
	if (!cb || !key || (nsegs && !segs))
		return -EINVAL;
	struct fs_op *op = op_new(OP_READ, (size_t)nsegs * sizeof(*segs), cb, arg);
	if (!op)
		return -ENOMEM;
	op->key = *key;
	op->segs = (struct kvt_seg *)(op + 1);
	op->nsegs = nsegs;
	if (nsegs)
		memcpy(op->segs, segs, (size_t)nsegs * sizeof(*segs));
	int rc = submit(t->state, op);
	if (rc < 0)
		kvt__free(op);
	return rc;
}

static int fs_write_chained(struct kvt_tier *t, const struct kvt_key *key,
			    const struct kvt_key *parent, const void *obj, uint64_t len,
			    kvt_tier_cb cb, void *arg)
{
	if (!cb || !key || (len && !obj))
		return -EINVAL;
	if (((struct fs_state *)t->state)->ro)
		return -EROFS;
	struct fs_op *op = op_new(OP_WRITE, 0, cb, arg);
	if (!op)
		return -ENOMEM;
	op->key = *key;
	op->obj = obj;
	op->len = len;
	if (parent) {
		op->has_parent = true;
		op->parent = *parent;
	}
	int rc = submit(t->state, op);
	if (rc < 0)
		kvt__free(op);
	return rc;
}

static int fs_write(struct kvt_tier *t, const struct kvt_key *key, const void *obj, uint64_t len,
		    kvt_tier_cb cb, void *arg)
{
	return fs_write_chained(t, key, NULL, obj, len, cb, arg);
}

static int fs_remove(struct kvt_tier *t, const struct kvt_key *key, kvt_tier_cb cb, void *arg)
{
	if (!cb || !key)
		return -EINVAL;
	if (((struct fs_state *)t->state)->ro)
		return -EROFS;
	struct fs_op *op = op_new(OP_REMOVE, 0, cb, arg);
	if (!op)
		return -ENOMEM;
	op->key = *key;
	int rc = submit(t->state, op);
	if (rc < 0)
		kvt__free(op);
	return rc;
}

static int fs_flush(struct kvt_tier *t, kvt_tier_cb cb, void *arg)
{
	if (!cb)
		return -EINVAL;
	struct fs_op *op = op_new(OP_FLUSH, 0, cb, arg);
	if (!op)
		return -ENOMEM;
	int rc = submit(t->state, op);
	if (rc < 0)
		kvt__free(op);
	return rc;
}

static void fs_drop_corrupt(struct kvt_tier *t, const struct kvt_key *key)
{
	atomic_fetch_add(&((struct fs_state *)t->state)->cnt.checksum_failures, 1);
	if (((struct fs_state *)t->state)->ro)
		return; /* inspection never deletes */
	struct fs_op *op = op_new(OP_DROP, 0, NULL, NULL);
	if (!op)
		return;
	op->key = *key;
	if (submit(t->state, op) < 0)
		kvt__free(op);
}

static void fs_stats(struct kvt_tier *t, struct kvt_tier_stats *out)
{
	struct fs_state *s = t->state;
	/* objects/bytes stay 0: other nodes change the directory, there is no count to keep. */
	kvt__io_counters_read(&s->cnt, out);
	out->capacity_bytes = s->capacity;
	out->evictions = atomic_load(&s->sweep_evictions);
}

static bool is_hex(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
			return false;
	return true;
}

/* A directory of the walk could not be opened (not a symbolic link, which is no directory
 * of ours, nor one gone meanwhile): the walk is not whole. */
static bool walk_open_failed(int err)
{
	return err != ENOENT && err != ENOTDIR && err != ELOOP;
}

/* Visit every leaf directory v1/xx/yy (never through a symlink); fn returns > 0 to stop,
 * < 0 when it could not read its leaf. 0, or -errno if a directory could not be read (the
 * walk goes on past it; the first error is returned): a listing cut short by EIO, ESTALE
 * or EACCES was taken for whole until 2026-12-05, and `kvtier verify` said "0 bad". */
static int walk_leaves(struct fs_state *s, int (*fn)(struct fs_state *s, int dfd, void *arg),
		       void *arg)
{
	/* A new open file description: a dup would share (and leave at the end) the offset. */
	int dup = openat(s->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *top = dup >= 0 ? fdopendir(dup) : NULL;
	if (!top) {
		int e = -errno;
		if (dup >= 0)
			close(dup);
		return e;
	}
	int stop = 0, err = 0;
	struct dirent *a;
	for (;;) {
		errno = 0;
		if (stop || !(a = readdir(top)))
			break;
		if (strlen(a->d_name) != 2 || !is_hex(a->d_name, 2))
			continue;
		int afd = openat(s->rootfd, a->d_name,
				 O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		DIR *mid = afd >= 0 ? fdopendir(afd) : NULL;
		if (!mid) {
			if (walk_open_failed(errno) && !err)
				err = -errno;
			if (afd >= 0)
				close(afd);
			continue;
		}
		struct dirent *b;
		for (;;) {
			errno = 0;
			if (stop || !(b = readdir(mid)))
				break;
			if (strlen(b->d_name) != 2 || !is_hex(b->d_name, 2))
				continue;
			int dfd = openat(afd, b->d_name,
					 O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
			if (dfd < 0) {
				if (walk_open_failed(errno) && !err)
					err = -errno;
				continue;
			}
			int r = fn(s, dfd, arg);
			close(dfd);
			if (r < 0 && !err)
				err = r;
			stop = r > 0;
		}
		if (!stop && errno && !err)
			err = -errno;
		closedir(mid);
	}
	if (!stop && errno && !err)
		err = -errno;
	closedir(top);
	return err;
}

/* Each entry of one leaf (dfd is the caller's): fn(name, lstat) until it returns > 0; one
 * that returns < 0 (an entry it could not read) makes the answer that error, the rest
 * still visited. */
static int each_entry(int dfd, int (*fn)(int dfd, const char *name, void *arg), void *arg)
{
	int d2 = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
	if (!d) {
		int e = errno;
		if (d2 >= 0)
			close(d2);
		return walk_open_failed(e) ? -e : 0;
	}
	int stop = 0, err = 0;
	struct dirent *e;
	for (;;) {
		errno = 0;
		if (stop || !(e = readdir(d))) {
			if (!stop && errno && !err)
				err = -errno; /* a listing cut short: not whole */
			break;
		}
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			int r = fn(dfd, e->d_name, arg);
			if (r < 0 && !err)
				err = r; /* an entry that could not be read: the rest are listed */
			stop = r > 0;
		}
	}
	closedir(d);
	return err ? err : stop;
}

static bool object_name(const char *name, struct kvt_key *key)
{
	return strlen(name) == 2 * KVT_KEY_BYTES && kvt__key_from_lowerhex(name, key) == 0;
}

struct scan_arg {
	kvt_scan_fn fn;
	void *arg;
};

/* An entry's stat failed: removed meanwhile (ENOENT, ESTALE) is no entry; anything else
 * (EIO from NFS, a damaged inode) leaves the listing not whole. Until 2026-12-06 every
 * failure made the entry vanish: `kvtier verify` said "8 objects, 0 bad" over 9 (a
 * review; fs_faults 3b). */
static int entry_stat_failed(int err)
{
	return err == ENOENT || err == ESTALE ? 0 : -err;
}

static int scan_entry(int dfd, const char *name, void *arg)
{
	struct scan_arg *a = arg;
	struct kvt_key key;
	struct stat st;
	if (!object_name(name, &key))
		return 0;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return entry_stat_failed(errno);
	if (!S_ISREG(st.st_mode))
		return 0;
	/* any non-zero from fn is "stop" (tier.h), never a read error for walk_leaves */
	return a->fn(a->arg, &key, (uint64_t)st.st_size) ? 1 : 0;
}

static int scan_leaf(struct fs_state *s, int dfd, void *arg)
{
	(void)s;
	return each_entry(dfd, scan_entry, arg);
}

/* Lists; never removes anything (temporaries are the writers' sweeps' business). */
static int fs_scan(struct kvt_tier *t, kvt_scan_fn fn, void *arg)
{
	struct fs_state *s = t->state;
	if (!fn)
		return -EINVAL;
	struct scan_arg a = {fn, arg};
	return walk_leaves(s, scan_leaf, &a);
}

struct anom_arg {
	struct fs_state *s;
	void (*fn)(void *arg, const char *path, const char *why);
	void *arg;
	int dfd;
};

static int anom_entry(int dfd, const char *name, void *arg)
{
	struct anom_arg *a = arg;
	struct kvt_key key;
	struct stat st;
	if (!object_name(name, &key) || fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
	    S_ISREG(st.st_mode))
		return 0;
	char path[4200], leaf[72];
	key_path(&key, leaf);
	snprintf(path, sizeof(path), "%s/%s", a->s->dir, leaf);
	a->fn(a->arg, path,
	      S_ISLNK(st.st_mode)   ? "a symbolic link"
	      : S_ISDIR(st.st_mode) ? "a directory"
				    : "not a regular file");
	return 0;
}

static int anom_leaf(struct fs_state *s, int dfd, void *arg)
{
	(void)s;
	return each_entry(dfd, anom_entry, arg);
}

static int fs_scan_anomalies(struct kvt_tier *t,
			     void (*fn)(void *arg, const char *path, const char *why), void *arg)
{
	struct fs_state *s = t->state;
	struct anom_arg a = {s, fn, arg, -1};
	return walk_leaves(s, anom_leaf, &a);
}

/* ------------------------------------------------------------ sweeping */

struct sweep_item {
	struct kvt_key key;
	uint64_t bytes;
	int64_t age_ns; /* max(atime, mtime) */
	dev_t dev;	/* the file listed */
	ino_t ino;
};

struct sweep {
	struct fs_state *s;
	struct sweep_item *v;
	size_t n, cap;
	uint64_t total, temps;
	bool collect, nomem;
	uint64_t now_ns;
	time_t wall_s; /* this node's clock, for a temporary's dates */
	struct fs_temp_seen *tv; /* the temporaries this sweep saw and left */
	size_t tn, tcap;
	/* this node's writers the walk asked about (fs_live.h), so that each is asked once;
	 * a dead one's file stays locked by fd until the walk is over */
	struct {
		uint64_t nonce;
		uid_t owner;
		enum kvt_fs_writer verdict;
		int fd;
	} writers[64];
	unsigned nwriters;
	uint64_t dead_temps; /* of temps: those a dead writer of this node left */
};

/* Is the writer of a temporary (its name, its owner) known to be dead? Only for a writer
 * of this node (by the host in the name) whose liveness file this sweep could lock; never
 * this instance itself. */
static bool writer_dead(struct sweep *w, const char *name, uid_t owner)
{
	struct fs_state *s = w->s;
	uint64_t nonce;
	if (!s->live_dir[0] || !kvt__fs_live_nonce(name, s->host, &nonce) || nonce == s->tmp_nonce)
		return false;
	for (unsigned i = 0; i < w->nwriters; i++)
		if (w->writers[i].nonce == nonce && w->writers[i].owner == owner)
			return w->writers[i].verdict == FS_WRITER_DEAD;
	if (w->nwriters == KVT_ARRAY_SIZE(w->writers))
		return false; /* a next sweep asks */
	int fd;
	enum kvt_fs_writer v = kvt__fs_live_probe(s->live_dir, nonce, owner, &fd);
	w->writers[w->nwriters++] = (typeof(w->writers[0])){nonce, owner, v, fd};
	return v == FS_WRITER_DEAD;
}

/* After the walk: a dead writer's liveness file goes with its temporaries. */
static void writers_done(struct sweep *w)
{
	for (unsigned i = 0; i < w->nwriters; i++)
		if (w->writers[i].verdict == FS_WRITER_DEAD)
			kvt__fs_live_release(w->s->live_dir, w->writers[i].nonce, w->writers[i].fd);
	/* at most every 10 minutes: it lists the whole directory (/dev/shm holds others'
	 * files too), and removes only files older than fs.tmp_max_age_s */
	struct fs_state *s = w->s;
	if (s->live_dir[0] && (!s->live_pruned_ns || w->now_ns - s->live_pruned_ns >=
							  FS_SWEEP_PERIOD_NS)) {
		s->live_pruned_ns = w->now_ns;
		kvt__fs_live_prune(s->live_dir, s->tmp_max_age);
	}
}

static int temp_cmp(const void *a, const void *b)
{
	const struct fs_temp_seen *x = a, *y = b;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	if (x->name != y->name)
		return x->name < y->name ? -1 : 1;
	return x->dev < y->dev ? -1 : x->dev > y->dev;
}

static bool ts_eq(struct timespec a, struct timespec b)
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

/* A temporary (name, st) the walk found: removed if stale (struct fs_temp_seen), else
 * remembered for the next sweep. */
static void sweep_temp(struct sweep *w, int dfd, const char *name, const struct stat *st)
{
	struct fs_state *s = w->s;
	uint64_t h = 14695981039346656037ull;
	for (const char *p = name; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	struct fs_temp_seen cur = {.name = h, .dev = st->st_dev, .ino = st->st_ino,
				   .size = st->st_size, .mtime = st->st_mtim,
				   .ctime = st->st_ctim, .since_ns = w->now_ns};
	const struct fs_temp_seen *was =
		s->ntemps_seen ? bsearch(&cur, s->temps_seen, s->ntemps_seen, sizeof(cur), temp_cmp)
			       : NULL;
	/* ctime too: a live writer dates its temporary into the past just before publishing
	 * it (chains), which changes ctime, and ctime cannot be set back */
	if (was && was->size == cur.size && ts_eq(was->mtime, cur.mtime) &&
	    ts_eq(was->ctime, cur.ctime))
		cur.since_ns = was->since_ns;
	/* Stale: seen unchanged for fs.tmp_max_age_s; or dated older than that by this node's
	 * clock and seen unchanged for fs.tmp_grace_s (two minutes) - so that after a restart, a
	 * file system filled by dead writers' temporaries is cleared by the refused writes'
	 * sweeps a minute or two apart, not an hour later, while a live writer whose clock is
	 * behind still gets the grace without progress before its temporary goes (its write's
	 * own deadline is seconds) */
	uint64_t max_ns = s->tmp_max_age * 1000000000ull, seen_ns = w->now_ns - cur.since_ns;
	uint64_t grace_ns = KVT_MIN(max_ns, s->tmp_grace * 1000000000ull);
	bool dated_old = w->wall_s - st->st_ctim.tv_sec > (time_t)s->tmp_max_age;
	/* Or its writer ran on this node and is dead: no watch needed (fs_live.h) */
	bool dead = writer_dead(w, name, st->st_uid);
	if (dead || seen_ns >= max_ns || (dated_old && seen_ns >= grace_ns)) {
		if (unlinkat(dfd, name, 0) == 0) {
			w->temps++;
			w->dead_temps += dead;
		}
		return;
	}
	if (w->tn == w->tcap) {
		size_t nc = w->tcap ? w->tcap * 2 : 256;
		struct fs_temp_seen *nv = nc <= FS_TEMPS_SEEN_MAX
						  ? kvt__realloc(w->tv, nc * sizeof(*nv))
						  : NULL;
		if (!nv)
			return; /* not watched: its watch starts in a later sweep */
		w->tv = nv;
		w->tcap = nc;
	}
	w->tv[w->tn++] = cur;
}

static int sweep_entry(int dfd, const char *name, void *arg)
{
	struct sweep *w = arg;
	struct stat st;
	struct kvt_key key;
	if (name[0] == '.') {
		if (strstr(name, ".tmp.") && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode))
			sweep_temp(w, dfd, name, &st);
		return 0;
	}
	if (!object_name(name, &key) || fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
	    !S_ISREG(st.st_mode))
		return 0;
	w->total += (uint64_t)st.st_size;
	if (!w->collect || w->nomem)
		return 0;
	if (w->n == w->cap) {
		size_t nc = w->cap ? w->cap * 2 : 4096;
		struct sweep_item *nv = kvt__realloc(w->v, nc * sizeof(*nv));
		if (!nv) {
			w->nomem = true;
			return 0;
		}
		w->v = nv;
		w->cap = nc;
	}
	int64_t a = (int64_t)st.st_atim.tv_sec * 1000000000ll + st.st_atim.tv_nsec;
	int64_t m = (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
	w->v[w->n++] = (struct sweep_item){key, (uint64_t)st.st_size, a > m ? a : m, st.st_dev,
					   st.st_ino};
	return 0;
}

static int sweep_leaf(struct fs_state *s, int dfd, void *arg)
{
	(void)s;
	each_entry(dfd, sweep_entry, arg);
	return 0;
}

static int cmp_age(const void *a, const void *b)
{
	const struct sweep_item *x = a, *y = b;
	return x->age_ns < y->age_ns ? -1 : x->age_ns > y->age_ns;
}

static uint64_t sweep_threshold(const struct fs_state *s)
{
	return s->capacity ? KVT_MAX(s->capacity / 16, 1) : UINT64_MAX;
}

/* Is the file under name the one the sweep listed (it), unchanged and unused since? A
 * name gone is "listed" (the unlink then finds it gone: freed all the same). */
static bool sweep_still_listed(int dfd, const char *name, const struct sweep_item *it)
{
	struct stat st;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return true;
	int64_t a = (int64_t)st.st_atim.tv_sec * 1000000000ll + st.st_atim.tv_nsec;
	int64_t m = (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
	return st.st_dev == it->dev && st.st_ino == it->ino && (a > m ? a : m) <= it->age_ns;
}

static void sweep_once(struct fs_state *s)
{
	atomic_store(&s->written_since, 0);
	atomic_store(&s->last_sweep_ns, kvt__now_ns());
	struct sweep w = {.s = s, .collect = s->capacity > 0, .now_ns = kvt__now_ns(),
			 .wall_s = time(NULL)};
	walk_leaves(s, sweep_leaf, &w);
	writers_done(&w);
	/* What this walk saw replaces what the last one saw: a temporary not seen now is gone
	 * (or in a leaf the walk could not read: its watch starts again) */
	if (w.tn)
		qsort(w.tv, w.tn, sizeof(*w.tv), temp_cmp);
	kvt__free(s->temps_seen);
	s->temps_seen = w.tv;
	s->ntemps_seen = w.tn;
	uint64_t removed = 0, freed = 0, before = w.total;
	if (s->capacity && w.total > s->capacity && !w.nomem) {
		uint64_t low = s->capacity - s->capacity / 16;
		qsort(w.v, w.n, sizeof(*w.v), cmp_age);
		for (size_t i = 0; i < w.n && w.total > low; i++) {
			char path[72];
			key_path(&w.v[i].key, path);
			int dfd = leaf_open(s, path, false);
			/* Still the file listed, and not used since? The walk and the removals
			 * before this one take a while (minutes on a large shared tree), and
			 * another node may have put the key again meanwhile: its acknowledged copy
			 * is not the least recently used one. Until 2026-12-06 the name was removed
			 * whatever it held by then (a review's reproducer; fs_sweep_relook holds
			 * the sweep here). What is left is the instant between this look and the
			 * unlink, as for any removal. */
			if (dfd >= 0 && !sweep_still_listed(dfd, leaf_name(path), &w.v[i])) {
				close(dfd);
				continue;
			}
			if (dfd >= 0)
				unlink_marked(s, &w.v[i].key);
			int r = dfd < 0 ? -1 : unlinkat(dfd, leaf_name(path), 0);
			if (dfd >= 0) {
				int e = errno;
				close(dfd);
				errno = e;
			} else {
				errno = leaf_absent(dfd) ? ENOENT : -dfd;
			}
			if (r == 0) {
				removed++;
				unlink_marked(s, &w.v[i].key);
				kvt__tier_evicted(s->t, &w.v[i].key, w.v[i].bytes);
			} else if (errno != ENOENT && errno != ESTALE) {
				KVT_WARN(&s->t->log, "fs: sweep: unlink %s/%s: %s", s->dir, path,
					 strerror(errno));
				atomic_fetch_add(&s->cnt.errors, 1);
				continue;
			} /* else another node removed it first: freed all the same */
			w.total -= w.v[i].bytes;
			freed += w.v[i].bytes;
		}
	}
	kvt__free(w.v);
	atomic_fetch_add(&s->sweeps, 1);
	atomic_fetch_add(&s->sweep_evictions, removed);
	atomic_fetch_add(&s->sweep_temps, w.temps);
	if (removed || w.temps)
		KVT_INFO(&s->t->log,
			 "fs: sweep of %s: %llu bytes stored, removed %llu least recently used "
			 "objects (%llu bytes) and %llu stale temporary files (%llu of them left "
			 "by dead writers of this node)",
			 s->dir, (unsigned long long)before, (unsigned long long)removed,
			 (unsigned long long)freed, (unsigned long long)w.temps,
			 (unsigned long long)w.dead_temps);
	else
		KVT_DEBUG(&s->t->log, "fs: sweep of %s: %llu bytes stored, nothing removed, %zu "
				      "temporaries watched", s->dir, (unsigned long long)before, w.tn);
	if (w.nomem)
		KVT_WARN(&s->t->log, "fs: sweep of %s: out of memory listing objects", s->dir);
	else if (s->capacity && w.total > s->capacity)
		KVT_WARN(&s->t->log, "fs: %s holds %llu bytes, over fs.bytes (%llu)", s->dir,
			 (unsigned long long)w.total, (unsigned long long)s->capacity);
}

/* One sweep at a time per instance, and per directory where flock works (a node that
 * finds another sweeping leaves it to that one). queued: the sweep maybe_sweep queued,
 * which repeats while writes arrived meanwhile that call for another; else a refused
 * write's (run_write), which sweeps once and leaves the queued one's flag alone. */
static void run_sweep(struct fs_state *s, bool queued)
{
	if (pthread_mutex_trylock(&s->sweep_lock)) { /* this instance is sweeping */
		if (queued)
			atomic_store(&s->sweep_queued, false);
		return;
	}
	int lfd = openat(s->rootfd, FS_SWEEP_LOCK, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
			 s->file_mode);
	if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK) {
		KVT_DEBUG(&s->t->log, "fs: %s: another instance is sweeping", s->dir);
		close(lfd);
		pthread_mutex_unlock(&s->sweep_lock);
		atomic_store(&s->last_sweep_ns, kvt__now_ns());
		if (queued)
			atomic_store(&s->sweep_queued, false);
		return;
	}
	for (;;) {
		sweep_once(s);
		if (!queued)
			break;
		atomic_store(&s->sweep_queued, false);
		if (atomic_load(&s->written_since) < sweep_threshold(s) ||
		    atomic_exchange(&s->sweep_queued, true))
			break;
	}
	if (lfd >= 0)
		close(lfd); /* releases the flock */
	pthread_mutex_unlock(&s->sweep_lock);
}

/* After a write: queue a sweep if one is due (see the top of the file). */
static void maybe_sweep(struct fs_state *s)
{
	uint64_t last = atomic_load(&s->last_sweep_ns);
	bool due = !last || atomic_load(&s->written_since) >= sweep_threshold(s) ||
		   kvt__now_ns() - last >= FS_SWEEP_PERIOD_NS;
	if (!due || atomic_exchange(&s->sweep_queued, true))
		return;
	queue_sweep(s, false);
}

/* Hand a sweep to a worker: the one maybe_sweep claimed (sweep_queued set), or (full) a
 * refused write's, which full_sweep_due rate-limits and which leaves sweep_queued alone. */
static void queue_sweep(struct fs_state *s, bool full)
{
	struct fs_op *op = kvt__calloc(1, sizeof(*op));
	if (op) {
		op->kind = OP_SWEEP;
		op->full_sweep = full;
	}
	if (!op || submit(s, op) < 0) {
		kvt__free(op);
		if (!full)
			atomic_store(&s->sweep_queued, false);
	}
}

static int fs_can_write(struct kvt_tier *t, uint64_t len)
{
	struct fs_state *s = t->state;
	if (s->ro)
		return -EROFS;
	return s->capacity && len > s->capacity ? -ENOSPC : 0;
}

const struct kvt_tier_ops kvt__tier_fs_ops = {
	.name = "fs",
	.version = 1,
	.state_size = sizeof(struct fs_state),
	.open = fs_open,
	.close = fs_close,
	.exists = fs_exists,
	.read = fs_read,
	.write = fs_write,
	.remove = fs_remove,
	.stats = fs_stats,
	.scan = fs_scan,
	.flush = fs_flush,
	.can_write = fs_can_write,
	.drop_corrupt = fs_drop_corrupt,
	.write_chained = fs_write_chained,
	.scan_anomalies = fs_scan_anomalies,
};
