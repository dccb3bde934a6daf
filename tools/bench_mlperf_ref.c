/*
 * bench_mlperf_ref.c - the reference side of `kvtier bench --workload mlperf-kv --ref`: the
 * MLPerf harness's storage path, driven by the same users and request stream as the store,
 * in the same run, so the two can be compared on the same disk.
 *
 * The harness keeps an entry's KV in a plain file written and read through the page cache
 * (buffered I/O) and fsyncs each file it writes. Here: one file per conversation under
 * <dir>/ref (its entries back to back, chunk i at offset i x chunk bytes), written with
 * pwrite and, with fsync data, made durable by fdatasync before the write completes (the
 * store's nvme.fsync=data makes each object durable at its completion: the same
 * durability per operation), read with pread. The same bytes per operation (one chunk) and
 * in flight (one worker thread per queue slot, so --queue-depth chunk operations at once).
 *
 * Memory budget: the page cache stands in for the store's DRAM tier, so it is held to the
 * same bytes. Chunks are kept in least-recently-used order (written or read); past the
 * budget the oldest are dropped from it (POSIX_FADV_DONTNEED on their range, clean once
 * fdatasync'ed), as the kernel's own LRU or the harness's CPU-memory dict would. With no
 * budget (the store has no DRAM tier) every chunk leaves the cache once its operation is
 * done, and reads come from the disk, as the store's do. A conversation's file is removed
 * when its user starts the next one (no later request reads it); the rest at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "bench_mlperf_ref.h"

struct rop {
	struct rop *next;
	struct mref *r;
	uint32_t user, chunk;
	int fd;
	bool write;
	uint64_t off;
	void *buf;
	size_t len;
	kvt_cb cb;
	void *arg;
	int status;
};

/* A chunk's place in the page cache's LRU (newest at the head). */
struct rchunk {
	struct rchunk *prev, *next;
	uint32_t user, index;
	uint64_t bytes; /* in the cache; 0: not listed */
	uint32_t busy;	/* operations in flight on it */
	bool stored;	/* its last write succeeded: a read of it is a hit */
};

struct rfile {
	int fd;	       /* -1: none open */
	uint64_t conv; /* the conversation it holds */
	uint32_t busy;		/* operations in flight on it */
	struct rchunk *chunks; /* max_chunks */
};

struct mref {
	char dir[4096];
	bool fsync_data;
	uint64_t budget, cached;
	uint32_t n_users;
	struct rfile *files;
	uint32_t max_chunks; /* per conversation */
	struct rchunk *lru_head, *lru_tail;
	pthread_t *threads;
	unsigned n_threads;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct rop *queue, *queue_tail; /* for the workers */
	struct rop *done, *done_tail;   /* for mref_poll */
	bool stopping;
	int efd;
	uint64_t dropped_bytes;
};

static void file_path(const struct mref *r, uint32_t user, uint64_t conv, char *out, size_t len)
{
	snprintf(out, len, "%s/u%u-c%llu", r->dir, user, (unsigned long long)conv);
}

/* A finished operation for mref_poll (lock held). */
static void done_push(struct mref *r, struct rop *op)
{
	op->next = NULL;
	if (r->done_tail)
		r->done_tail->next = op;
	else
		r->done = op;
	r->done_tail = op;
	uint64_t one = 1;
	ssize_t w = write(r->efd, &one, sizeof(one));
	(void)w;
}

/* The whole of op's range, or -errno: a write the disk cuts short is carried on, so a full
 * disk reports ENOSPC rather than a short count; a read short of the range is -EIO (the
 * entry is not all there). */
static int full_io(const struct rop *op)
{
	size_t done = 0;
	while (done < op->len) {
		ssize_t n = op->write ? pwrite(op->fd, (const char *)op->buf + done, op->len - done,
					       (off_t)(op->off + done))
				      : pread(op->fd, (char *)op->buf + done, op->len - done,
					      (off_t)(op->off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += (size_t)n;
	}
	return 0;
}

static void *worker(void *arg)
{
	struct mref *r = arg;
	pthread_mutex_lock(&r->lock);
	for (;;) {
		while (!r->queue && !r->stopping)
			pthread_cond_wait(&r->cond, &r->lock);
		struct rop *op = r->queue;
		if (!op)
			break;
		r->queue = op->next;
		if (!r->queue)
			r->queue_tail = NULL;
		pthread_mutex_unlock(&r->lock);
		op->status = full_io(op);
		if (!op->status && op->write && op->r->fsync_data && fdatasync(op->fd) < 0)
			op->status = -errno;
		pthread_mutex_lock(&r->lock);
		done_push(r, op);
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

int mref_open(const char *dir, uint32_t n_users, uint32_t max_chunks, unsigned threads,
	      uint64_t cache_budget, bool fsync_data, struct mref **out)
{
	struct mref *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	snprintf(r->dir, sizeof(r->dir), "%s/ref", dir);
	if (mkdir(r->dir, 0700) < 0 && errno != EEXIST) {
		int e = -errno;
		free(r);
		return e;
	}
	r->fsync_data = fsync_data;
	r->budget = cache_budget;
	r->n_users = n_users;
	r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	r->files = calloc(n_users, sizeof(*r->files));
	r->threads = calloc(threads, sizeof(*r->threads));
	if (r->efd < 0 || !r->files || !r->threads) {
		if (r->efd >= 0)
			close(r->efd);
		free(r->files);
		free(r->threads);
		free(r);
		return -ENOMEM;
	}
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	r->max_chunks = max_chunks;
	for (uint32_t i = 0; i < n_users; i++)
		r->files[i].fd = -1;
	for (uint32_t i = 0; i < n_users; i++) {
		if (!(r->files[i].chunks = calloc(max_chunks, sizeof(struct rchunk)))) {
			mref_close(r);
			return -ENOMEM;
		}
		for (uint32_t c = 0; c < max_chunks; c++) {
			r->files[i].chunks[c].user = i;
			r->files[i].chunks[c].index = c;
		}
	}
	for (unsigned i = 0; i < threads; i++) {
		if (pthread_create(&r->threads[i], NULL, worker, r))
			break;
		r->n_threads++;
	}
	if (!r->n_threads) {
		mref_close(r);
		return -EAGAIN;
	}
	*out = r;
	return 0;
}

/* ------------------------------------------------------------ the page-cache budget */

static void lru_unlink(struct mref *r, struct rchunk *c)
{
	if (!c->bytes)
		return;
	if (c->prev)
		c->prev->next = c->next;
	else
		r->lru_head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		r->lru_tail = c->prev;
	c->prev = c->next = NULL;
	r->cached -= c->bytes;
	c->bytes = 0;
}

static void lru_touch(struct mref *r, struct rchunk *c, uint64_t bytes)
{
	lru_unlink(r, c);
	c->bytes = bytes;
	r->cached += bytes;
	c->next = r->lru_head;
	if (r->lru_head)
		r->lru_head->prev = c;
	r->lru_head = c;
	if (!r->lru_tail)
		r->lru_tail = c;
}

/* Drop the least recently used chunks from the cache until it is within the budget (a
 * chunk with an operation in flight stays until it is done). */
static void cache_trim(struct mref *r)
{
	struct rchunk *c = r->lru_tail;
	while (r->cached > r->budget && c) {
		struct rchunk *prev = c->prev;
		struct rfile *f = &r->files[c->user];
		if (!c->busy && f->fd >= 0) {
			r->dropped_bytes += c->bytes;
			posix_fadvise(f->fd, (off_t)c->index * (off_t)c->bytes, (off_t)c->bytes,
				      POSIX_FADV_DONTNEED);
			lru_unlink(r, c);
		}
		c = prev;
	}
}

/* ------------------------------------------------------------ operations */

/* The user's file for conversation conv: a new conversation removes the last one's. */
static int user_file(struct mref *r, uint32_t user, uint64_t conv, struct rfile **out)
{
	if (user >= r->n_users)
		return -EINVAL;
	struct rfile *f = &r->files[user];
	if (f->fd >= 0 && f->conv == conv) {
		*out = f;
		return 0;
	}
	char path[4200];
	if (f->fd >= 0) {
		if (f->busy)
			return -EBUSY; /* the user model never moves on with operations out */
		for (uint32_t i = 0; i < r->max_chunks; i++) {
			lru_unlink(r, &f->chunks[i]);
			f->chunks[i].stored = false;
		}
		close(f->fd);
		f->fd = -1;
		file_path(r, user, f->conv, path, sizeof(path));
		unlink(path);
	}
	file_path(r, user, conv, path, sizeof(path));
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	f->fd = fd;
	f->conv = conv;
	*out = f;
	return 0;
}

/* Queue a chunk operation for the workers; a read of a chunk not stored (never written, or
 * its write failed: a full disk) is a miss, delivered through mref_poll as the store's is. */
static int submit(struct mref *r, uint32_t user, uint64_t conv, uint32_t chunk, bool write,
		  void *buf, size_t len, kvt_cb cb, void *arg)
{
	struct rfile *f;
	if (chunk >= r->max_chunks)
		return -EINVAL;
	int rc = user_file(r, user, conv, &f);
	if (rc < 0)
		return rc;
	struct rop *op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	*op = (struct rop){.r = r, .user = user, .chunk = chunk, .fd = f->fd, .write = write,
			   .off = (uint64_t)chunk * len, .buf = buf, .len = len, .cb = cb,
			   .arg = arg};
	bool miss = !write && !f->chunks[chunk].stored;
	f->busy++;
	f->chunks[chunk].busy++;
	pthread_mutex_lock(&r->lock);
	if (miss) {
		op->status = -ENOENT;
		done_push(r, op);
	} else {
		if (r->queue_tail)
			r->queue_tail->next = op;
		else
			r->queue = op;
		r->queue_tail = op;
		pthread_cond_signal(&r->cond);
	}
	pthread_mutex_unlock(&r->lock);
	return 0;
}

int mref_put(struct mref *r, uint32_t user, uint64_t conv, uint32_t chunk, const void *buf,
	     size_t len, kvt_cb cb, void *arg)
{
	return submit(r, user, conv, chunk, true, (void *)buf, len, cb, arg);
}

int mref_get(struct mref *r, uint32_t user, uint64_t conv, uint32_t chunk, void *buf,
	     size_t len, kvt_cb cb, void *arg)
{
	return submit(r, user, conv, chunk, false, buf, len, cb, arg);
}

int mref_poll(struct mref *r, int timeout_ms)
{
	struct pollfd p = {.fd = r->efd, .events = POLLIN};
	pthread_mutex_lock(&r->lock);
	bool empty = !r->done;
	pthread_mutex_unlock(&r->lock);
	if (empty && timeout_ms && poll(&p, 1, timeout_ms) < 0)
		return -errno;
	uint64_t v;
	ssize_t rd = read(r->efd, &v, sizeof(v));
	(void)rd;
	pthread_mutex_lock(&r->lock);
	struct rop *list = r->done;
	r->done = r->done_tail = NULL;
	pthread_mutex_unlock(&r->lock);
	int n = 0;
	while (list) {
		struct rop *op = list;
		list = op->next;
		struct rfile *f = &r->files[op->user];
		struct rchunk *c = &f->chunks[op->chunk];
		f->busy--;
		c->busy--;
		if (op->write)
			c->stored = !op->status;
		if (!op->status)
			lru_touch(r, c, op->len);
		cache_trim(r);
		struct kvt_result res = {.status = op->status, .tier = op->status ? KVT_TIER_NONE : 0,
					 .bytes = op->status ? 0 : op->len};
		kvt_cb cb = op->cb;
		void *arg = op->arg;
		free(op);
		cb(arg, &res);
		n++;
	}
	return n;
}

uint64_t mref_dropped_bytes(const struct mref *r)
{
	return r->dropped_bytes;
}

void mref_close(struct mref *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->stopping = true;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	for (unsigned i = 0; i < r->n_threads; i++)
		pthread_join(r->threads[i], NULL);
	while (r->done) { /* completions nobody polled for */
		struct rop *op = r->done;
		r->done = op->next;
		free(op);
	}
	char path[4200];
	for (uint32_t i = 0; i < r->n_users; i++) {
		if (r->files[i].fd >= 0) {
			close(r->files[i].fd);
			file_path(r, i, r->files[i].conv, path, sizeof(path));
			unlink(path);
		}
		free(r->files[i].chunks);
	}
	rmdir(r->dir);
	close(r->efd);
	pthread_mutex_destroy(&r->lock);
	pthread_cond_destroy(&r->cond);
	free(r->threads);
	free(r->files);
	free(r);
}

/* After the reference: its files' removal may still be going on at the device (ext4
 * mounted `discard` sends a discard per freed extent at the journal's next commit), which
 * the store's run must not pay for. Commit now, then wait for the device's queue to stay
 * empty for a second (at most 60 s). */
void mref_settle(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct stat st;
	if (fd < 0)
		return;
	syncfs(fd);
	bool have = fstat(fd, &st) == 0;
	close(fd);
	if (!have)
		return;
	char path[64];
	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/inflight", major(st.st_dev),
		 minor(st.st_dev));
	int quiet_ms = 0;
	for (int waited = 0; waited < 60000 && quiet_ms < 1000; waited += 50) {
		FILE *f = fopen(path, "r");
		unsigned long long r = 0, w = 0;
		bool ok = f && fscanf(f, "%llu %llu", &r, &w) == 2;
		if (f)
			fclose(f);
		if (!ok)
			return; /* not a block device (tmpfs, a network file system) */
		quiet_ms = r + w ? 0 : quiet_ms + 50;
		usleep(50 * 1000);
	}
}
