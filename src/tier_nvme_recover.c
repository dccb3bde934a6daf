/*
 * tier_nvme_recover.c - what a restart keeps: the open-time scan that deletes crash debris
 * and rebuilds the index, and the parent links saved at close.
 *
 * The scan deletes temp files and rebuilds the in-memory index in mtime order: a restart
 * keeps the cache (and lists the preallocated slots of pool/, tier_nvme_pool.c). It judges no object's content: an empty or misaligned file is indexed at
 * its size (with a warning) for the object format to judge when it is read or verified, and
 * an entry that is not a regular file is listed by scan_anomalies(), never followed or
 * deleted. Parent links are saved in <first dir>/.kvtier.chains (a key's parent never
 * changes: keys are content addresses, so a stale file is still true).
 */
#include "tier_nvme_internal.h"

struct scan_item {
	struct nv_ent *e;
	int64_t mtime_ns;
	uint64_t ino; /* the object file's inode, in directory dir (nv_pool_scan) */
	uint32_t dir;
};

static int cmp_ino(const void *a, const void *b)
{
	const struct scan_item *x = a, *y = b;
	if (x->dir != y->dir)
		return x->dir < y->dir ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* Is inode ino of directory dir an object file's? (items sorted by cmp_ino) */
bool nv_scan_is_object(const void *items, size_t n, uint32_t dir, uint64_t ino)
{
	const struct scan_item key = {.dir = dir, .ino = ino};
	return n && bsearch(&key, items, n, sizeof(key), cmp_ino);
}

static int cmp_mtime(const void *a, const void *b)
{
	const struct scan_item *x = a, *y = b;
	return x->mtime_ns < y->mtime_ns ? -1 : x->mtime_ns > y->mtime_ns;
}

/* "dir/sub/name" reported by scan_anomalies (`kvtier verify`: bad) as why. Open only. */
int nv_anomaly_add(struct nv *s, const char *dir, const char *sub, const char *name,
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

int nv_scan_anomalies(struct kvt_tier *t, void (*fn)(void *arg, const char *path, const char *why),
		      void *arg)
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
 * last block (and fail other programs' writes): clamp it, with a warning.
 * With the log (docs/NVME_LOG.md) the capacity counts live bytes, held inside the segment
 * files, which are created once and kept: their bytes are the tier's own room, and the
 * objects in them take none besides. The limit is then the live bytes of the segments that
 * fit in that room, plus what is left of it for objects in files of their own. Until
 * 2026-12-06 the segments counted as free space used by others and log objects as files,
 * so an open with few live objects on a disk sized for the segments clamped the capacity
 * to the disk's few free bytes, for good (found by review: every write refused). */
static void clamp_capacity(struct nv *s)
{
	bool lg = nv_log_max(s) > 0;
	struct stat d0;
	if (fstat(s->dirs[0].fd, &d0) < 0)
		return;
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
			if (lg && e->lseg) /* inside a segment, counted below */
				continue;
			if (e->dir == i ||
			    (!fstat(s->dirs[e->dir].fd, &ds) && ds.st_dev == st.st_dev))
				ours += e->bytes;
		}
		if (lg && st.st_dev == d0.st_dev) /* the log lives under the first directory */
			ours += nv_log_disk_bytes(s);
		ours += nv_pool_disk_bytes(s, st.st_dev); /* preallocated slots are ours too */
		uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
		uint64_t keep = (uint64_t)vfs.f_blocks * vfs.f_frsize / 50;
		room += avail + ours > keep ? avail + ours - keep : 0;
	}
	uint64_t limit = lg ? nv_log_capacity_in(s, room) : room;
	if (limit >= s->capacity)
		return;
	room = limit;
	KVT_WARN(s->log,
		 "nvme: nvme.bytes (%" PRIu64 ") is more than the file system(s) under nvme.dirs "
		 "can hold while keeping 2 %% free: capacity clamped to %" PRIu64 " bytes%s",
		 s->capacity, room,
		 room < s->object_max ? " (less than one object: writes will be refused)" : "");
	s->capacity = room;
}

/* A temporary name found by scan_dir, removed once the directory's objects are known. */
struct scan_tmp {
	char sub[3];
	char name[256];
	uint64_t ino;
	bool one_link;
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The temporaries of directory di go, except one that is also an object's file with a
 * link count of 1: a power cut on a file system without a journal can keep both names of a
 * rename (the recycled file's temporary name, and the object it was published as) with
 * the inode's count still 1, and unlinking the temporary then freed the inode the object's
 * name still holds (until 2026-12-05; the pool scan has checked its slots so since
 * 2026-12-03). Such a name is left, with a warning to run the file system's check. Returns
 * the temporaries removed. */
static uint64_t scan_drop_temps(struct nv *s, uint32_t di, const struct scan_tmp *t, size_t nt,
				const struct scan_item *items, size_t n0, size_t n)
{
	struct nv_dir *d = &s->dirs[di];
	uint64_t *inos = n > n0 ? kvt__malloc((n - n0) * sizeof(*inos)) : NULL;
	for (size_t i = n0; inos && i < n; i++)
		inos[i - n0] = items[i].ino;
	if (inos)
		qsort(inos, n - n0, sizeof(*inos), cmp_u64);
	uint64_t removed = 0;
	for (size_t i = 0; i < nt; i++) {
		char path[300];
		snprintf(path, sizeof(path), "%s%s%s", t[i].sub, *t[i].sub ? "/" : "", t[i].name);
		bool shared = t[i].one_link && n > n0 &&
			      (!inos || bsearch(&t[i].ino, inos, n - n0, sizeof(*inos), cmp_u64));
		if (shared) { /* (no memory for the check: kept, as if shared) */
			KVT_WARN(s->log,
				 "nvme: %s/%s is also an object's file, with one link (a power cut "
				 "on a file system without a journal: run its fsck): left in place",
				 d->path, path);
			continue;
		}
		if (unlinkat(d->fd, path, 0) == 0)
			removed++;
	}
	kvt__free(inos);
	return removed;
}

/* Add the objects of one directory to the index, cleaning up crash debris. */
static int scan_dir(struct nv *s, uint32_t di, struct scan_item **items, size_t *n, size_t *cap)
{
	struct nv_dir *d = &s->dirs[di];
	uint64_t temps = 0, junk = 0, odd = 0, dups = 0;
	size_t n0 = *n, ntmp = 0, tcap = 0;
	struct scan_tmp *tmps = NULL;
	int rc = 0;
	for (int sub = -1; sub < 256; sub++) {
		char subname[3] = "";
		int sfd;
		if (sub < 0) {
			sfd = dup(d->fd); /* stray probe files at the top */
		} else {
			snprintf(subname, sizeof(subname), "%02x", sub);
			if (!s->ro && mkdirat(d->fd, subname, s->dir_mode) < 0 && errno != EEXIST) {
				rc = -errno;
				goto out;
			}
			sfd =
			    openat(d->fd, subname, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
			if (sfd < 0 && s->ro && errno == ENOENT)
				continue; /* inspection creates nothing */
		}
		if (sfd < 0) {
			rc = -errno;
			goto out;
		}
		DIR *dir = fdopendir(sfd);
		if (!dir) {
			rc = -errno;
			close(sfd);
			goto out;
		}
		struct dirent *de;
		while ((de = readdir(dir))) {
			const char *nm = de->d_name;
			if (!strncmp(nm, NV_TMP_PREFIX, strlen(NV_TMP_PREFIX))) {
				/* Ours or a dead instance's (we hold the lock): never a reader's.
				 * Removed once the directory's objects are known (scan_drop_temps).
				 */
				struct stat tst;
				if (s->ro || strlen(nm) >= sizeof(tmps->name) ||
				    fstatat(sfd, nm, &tst, AT_SYMLINK_NOFOLLOW) < 0)
					continue;
				if (ntmp == tcap) {
					size_t nc = tcap ? tcap * 2 : 64;
					struct scan_tmp *g = kvt__realloc(tmps, nc * sizeof(*g));
					if (!g) {
						closedir(dir);
						rc = -ENOMEM;
						goto out;
					}
					tmps = g;
					tcap = nc;
				}
				struct scan_tmp *x = &tmps[ntmp++];
				snprintf(x->sub, sizeof(x->sub), "%s", subname);
				snprintf(x->name, sizeof(x->name), "%s", nm);
				x->ino = (uint64_t)tst.st_ino;
				x->one_link = S_ISREG(tst.st_mode) && tst.st_nlink < 2;
				continue;
			}
			struct kvt_key k;
			if (sub < 0 || nv_parse_object_name(nm, &k) < 0 || k.bytes[0] != sub)
				continue; /* not ours: leave it alone */
			struct stat st;
			if (fstatat(sfd, nm, &st, AT_SYMLINK_NOFOLLOW) < 0)
				continue; /* gone meanwhile */
			/* Larger than the tier's capacity (a sparse or damaged file: a put that
			 * long is refused): indexed at its size it would be charged to the
			 * capacity and evict every object at a read-write open (a 1 TB sparse
			 * file evicted them all and dropped every preallocated slot, until
			 * 2026-12-04). Kept and reported instead, as other entries that cannot
			 * be objects; the free space it takes still lowers the capacity. Only in
			 * a read-write open: an inspection's nvme.bytes need not be the writer's,
			 * and it evicts nothing (verify reports such a file as damaged). */
			bool big = S_ISREG(st.st_mode) && !s->ro && s->capacity &&
				   (uint64_t)st.st_size > s->capacity;
			if (!S_ISREG(st.st_mode) || big) {
				/* Never followed, never deleted: reported (scan_anomalies). */
				rc = nv_anomaly_add(s, d->path, subname, nm,
							big		      ? "larger than the tier's capacity"
							: S_ISLNK(st.st_mode) ? "a symbolic link"
							: S_ISDIR(st.st_mode) ? "a directory"
									      : "not a regular file");
				if (rc < 0) {
					closedir(dir);
					goto out;
				}
				odd++;
				continue;
			}
			if (nv_ent_find(s, &k)) {
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
					rc = -ENOMEM;
					goto out;
				}
				*items = ni;
				*cap = nc;
			}
			struct nv_ent *e = nv_ent_insert(s, &k, di, (uint64_t)st.st_size);
			if (!e) {
				closedir(dir);
				rc = -ENOMEM;
				goto out;
			}
			e->scanned = true;
			(*items)[*n].e = e;
			(*items)[*n].mtime_ns =
			    (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
			(*items)[*n].ino = (uint64_t)st.st_ino;
			(*items)[*n].dir = di;
			(*n)++;
		}
		closedir(dir);
	}
	temps = scan_drop_temps(s, di, tmps, ntmp, *items, n0, *n);
	if (temps || dups)
		KVT_INFO(s->log,
			 "nvme: %s: removed %" PRIu64 " temp files left by a crash and %" PRIu64
			 " duplicate objects",
			 d->path, temps, dups);
	if ((junk || odd) && !s->ro)
		KVT_WARN(s->log,
			 "nvme: %s: %" PRIu64 " object files too short or misaligned to be objects "
			 "and %" PRIu64
			 " entries that are not regular files: kept; `kvtier verify` "
			 "reports them",
			 d->path, junk, odd);
	rc = 0;
out:
	kvt__free(tmps);
	return rc;
}

/* Parent links survive restarts: (child key, parent key) pairs, written through a temp
 * name at close. Ring thread gone or not started: single-threaded. */
void nv_chains_save(struct nv *s)
{
	char tmp[64];
	int dfd = s->dirs[0].fd;
	snprintf(tmp, sizeof(tmp), NV_TMP_PREFIX "chains.%d", (int)s->pid);
	FILE *f = NULL;
	int fd = nv_tmp_create(dfd, tmp, 0, s->file_mode);
	if (fd >= 0 && !(f = fdopen(fd, "w")))
		close(fd);
	bool ok = f && fputs(NV_CHAINS_MAGIC, f) >= 0;
	for (struct nv_ent *e = s->lru_tail; ok && e; e = e->prev)
		if (e->has_parent)
			ok = fwrite(&e->key, sizeof(e->key), 1, f) == 1 &&
			     fwrite(&e->parent, sizeof(e->parent), 1, f) == 1;
	/* Its bytes before its name (nvme.fsync data or full): after a power cut the rename
	 * must not name a file whose blocks never reached the disk. The file has no checksum
	 * (a torn one at worst links a wrong parent); the sync is the cheap half of making it
	 * whole, paid once per close. */
	if (ok && s->fsync_mode != NV_FSYNC_NONE)
		ok = fflush(f) == 0 && fdatasync(fileno(f)) == 0;
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
	int fd = openat(s->dirs[0].fd, NV_CHAINS_NAME,
			 O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK); /* a FIFO: no hang */
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
			struct nv_ent *e = nv_ent_find(s, &pair[0]);
			if (e && !e->has_parent) {
				nv_chain_link(s, e, &pair[1]);
				n += e->parent_uid != 0;
			}
		}
	}
	fclose(f);
	KVT_DEBUG(s->log, "nvme: %" PRIu64 " parent links restored", n);
}

int nv_rebuild_index(struct nv *s)
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
			nv_lru_unlink(s, items[i].e);
		for (size_t i = 0; i < n; i++) {
			nv_lru_push_head(s, items[i].e);
			nv_leaf_push(s, items[i].e, true);
		}
	}
	if (!rc)
		rc = nv_log_recover(s); /* objects in log segments (tier_nvme_log_recover.c) */
	if (!rc) /* laid-out segments kept or removed: before the clamp counts them */
		nv_log_layout_scan(s);
	if (!rc && !s->ro)
		chains_load(s);
	/* Preallocated slots (tier_nvme_pool.c; read-only: counted), told from the object
	 * files' inodes: a slot's name can be an object's too. */
	if (!rc && n > 1)
		qsort(items, n, sizeof(*items), cmp_ino);
	if (!rc)
		rc = nv_pool_scan(s, items, n);
	kvt__free(items);
	if (!rc && !s->ro)
		clamp_capacity(s);
	if (!rc && !s->ro && s->used + s->pool_bytes > s->capacity) {
		uint64_t before = s->nents, slots = s->nslots;
		nv_make_room(s, 0, NULL); /* free slots go first */
		KVT_INFO(s->log,
			 "nvme: over capacity at open: dropped %" PRIu64
			 " preallocated slots, evicted %" PRIu64 " objects",
			 slots - s->nslots, before - s->nents);
	}
	return rc;
}
