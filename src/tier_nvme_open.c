/*
 * tier_nvme_open.c - opening and closing the NVMe tier: its directories, their locks, the
 * O_DIRECT probe, the ring thread's start and the state's teardown.
 *
 * A ".kvtier.lock" flock per directory stops two instances from deleting each other's temp
 * files. With store.read_only (kvtier ls/stat/verify) the open creates, locks, deletes and
 * evicts nothing and fails on a directory that is not a store. Files are created
 * nvme.file_mode (0600) and directories nvme.dir_mode (0700): stored KV reveals the prompts
 * it was computed from.
 *
 * O_DIRECT: each directory is probed at open (create + 4 KiB write with O_DIRECT). With
 * nvme.direct=auto a refusal (EINVAL: ramfs, old tmpfs) gives one warning and buffered I/O
 * for that directory; "on" fails the open; "off" never uses it.
 */
#include "tier_nvme_internal.h"

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

int nv_openat_look(const struct nv *s, int dfd, const char *name, int flags, mode_t mode)
{
	if (s->ro && !(flags & O_CREAT)) {
		int fd = openat(dfd, name, flags | O_NOATIME, mode);
		if (fd >= 0 || errno != EPERM)
			return fd;
	}
	return openat(dfd, name, flags, mode);
}

int nv_tmp_create(int dfd, const char *name, int flags, mode_t mode)
{
	(void)unlinkat(dfd, name, 0); /* (a directory stays, and the open then fails) */
	return openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | flags,
		      mode);
}

/* 1 if the directory takes O_DIRECT I/O, 0 if the file system refuses it, <0 error. */
static int probe_direct(struct nv *s, struct nv_dir *d)
{
	char name[64];
	snprintf(name, sizeof(name), NV_TMP_PREFIX "probe.%d", (int)s->pid);
	int fd = nv_tmp_create(d->fd, name, O_DIRECT, s->file_mode);
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
		nv_object_path(&e->key, path);
		/* O_NONBLOCK: a FIFO put in its place since the scan must not hang the open */
		int fd = nv_openat_look(s, s->dirs[i].fd, path,
					O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_DIRECT | O_NONBLOCK, 0);
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
		nv_ent_remove(s, s->lru_head);
	while (s->fdc_head) {
		struct nv_fdc *c = s->fdc_head;
		c->ent->fdc = NULL;
		nv_fdc_list_unlink(s, c);
		nv_fdc_free(s, c);
	}
	while (s->free_fdc) {
		struct nv_fdc *c = s->free_fdc;
		s->free_fdc = c->next;
		kvt__free(c);
	}
	nv_index_free(s);
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
	kvt__free(s->slots);
	kvt__free(s->orphans);
	kvt__free(s->kids);
	if (s->zero)
		kvt__free_aligned(s->zero, NV_ZERO_BYTES);
	nv_log_close(s);
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

int nv_open(struct kvt_tier *t, const struct kvt_config *cfg)
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
	/* Read-only inspection never lays out (nor lists) preallocated slots. */
	s->prealloc = s->ro ? 0 : KVT_ALIGN_UP(kvt__cfg_u64(cfg, "nvme.preallocate"), KVT_ALIGN);
	s->qd = (uint32_t)kvt__cfg_u64(cfg, "nvme.queue_depth");
	s->budget = kvt__cfg_u64(cfg, "nvme.write_budget");
	s->open_files = (uint32_t)kvt__cfg_u64(cfg, "nvme.open_files");
	const char *fs = kvt__cfg_str(cfg, "nvme.fsync");
	s->fsync_mode = !strcmp(fs, "none")   ? NV_FSYNC_NONE
			: !strcmp(fs, "full") ? NV_FSYNC_FULL
					      : NV_FSYNC_DATA;
	char direct_mode[16];
	snprintf(direct_mode, sizeof(direct_mode), "%s", kvt__cfg_str(cfg, "nvme.direct"));
	s->clock_hour = nv_hour_now;
	s->bucket_hour = s->clock_hour();

	/* Keep the fd cache inside the process' descriptor limit, leaving the rest of the
	 * process an eighth of it, but at least 512 or half of it, whichever is less (half
	 * of the common soft limit of 1,024; a limit of 256 leaves the cache 128, not 1). A
	 * cache that still runs out sheds its idle fds and retries (tier_nvme_ops.c). */
	struct rlimit rl;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY) {
		uint64_t lim = rl.rlim_cur, spare = KVT_MAX(lim / 8, KVT_MIN(lim / 2, 512));
		uint64_t cap = lim > spare ? lim - spare : 1;
		if (s->open_files > cap) {
			KVT_INFO(s->log, "nvme: open_files %u capped to %llu by RLIMIT_NOFILE",
				 s->open_files, (unsigned long long)cap);
			s->open_files = (uint32_t)cap;
		}
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
	if ((rc = nv_index_init(s)) < 0)
		goto fail;
	for (uint32_t i = 0; i < s->ndirs; i++)
		if ((rc = open_dir(s, &s->dirs[i], direct_mode)) < 0)
			goto fail;
	/* The small-object log (docs/NVME_LOG.md): opened, and scanned by nv_rebuild_index,
	 * whenever it exists, so that turning nvme.log_max off keeps its objects readable. */
	if ((rc = nv_log_open(s, kvt__cfg_u64(cfg, "nvme.log_max"),
			      kvt__cfg_u64(cfg, "nvme.log_batch_bytes"),
			      kvt__cfg_u64(cfg, "nvme.segment_bytes"),
			      kvt__cfg_u64(cfg, "nvme.log_reinsert_pct"),
			      kvt__cfg_u64(cfg, "nvme.log_spare_pct"))) < 0) {
		KVT_ERR(s->log, "nvme: log: %s", strerror(-rc));
		goto fail;
	}
	nv_log_layout_want(s, kvt__cfg_bool(cfg, "nvme.log_layout"));
	if ((rc = nv_rebuild_index(s)) < 0) {
		KVT_ERR(s->log, "nvme: index rebuild failed: %s", strerror(-rc));
		goto fail;
	}
	if (s->budget && !s->ro)
		nv_budget_load(s);
	/* What the background layout has to do, known before open returns (a caller waiting
	 * for pool_pending_bytes to reach 0 must not see 0 before the ring thread starts). */
	s->layout_done = !nv_pool_pending(s);
	nv_layout_publish(s);
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
	if ((rc = -pthread_create(&s->thread, NULL, nv_ring_main, s)) < 0)
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

void nv_close(struct kvt_tier *t)
{
	struct nv *s = t->state;
	if (s->thread_started) {
		pthread_mutex_lock(&s->qlock);
		s->closing = true;
		pthread_mutex_unlock(&s->qlock);
		eventfd_write(s->efd, 1);
		pthread_join(s->thread, NULL);
		nv_spare_drop_all(s, true);
		kvt__free(s->spares);
		if (s->budget && !s->ro)
			nv_budget_save(s);
		if (!s->ro)
			nv_chains_save(s);
		uint64_t n = atomic_load(&s->skips_unreported);
		if (n)
			KVT_WARN(s->log, "nvme: %" PRIu64 " more write(s) not stored (see above)",
				 n);
	}
	nv_free(s);
}
