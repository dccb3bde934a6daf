/*
 * tier_nvme_pool.c - preallocated slots (nvme.preallocate): the NVMe tier's capacity laid
 * out as files of one object size, each written once in full, that writes of that size
 * overwrite in place. Why: on ext4 (and most file systems) the first write into a block -
 * a new file's, or a fallocate'd file's, whose extents are "unwritten" until converted -
 * costs far more than an overwrite (allocation, extent conversion, with "discard" the
 * discard of the blocks freed before); fio lays out its files before it measures for the
 * same reason. A store that starts empty otherwise pays that price for its first
 * nvme.bytes of writes (docs/BENCHMARKS.md, "Writes from an empty store"). A slot is laid
 * out through the page cache, not O_DIRECT (tier_nvme_ops.c, ST_W_OPEN): on the virtual
 * disk measured, slots first written O_DIRECT were overwritten at ~0.6x the speed of
 * slots first written back ("How a slot is first written").
 *
 * On disk: <dir>/pool/<id>.slot, one per slot; a slot being laid out is
 * pool/.tmp.layout.<pid>.<id> until its data is written and fdatasync'ed, so a crash
 * mid-layout leaves a temp file, deleted at the next open, and the layout resumes there.
 * A write takes a free slot of its size and directory and writes into pool/<id>.slot
 * directly; the usual publish (rename onto the object's name, after its fdatasync per
 * nvme.fsync) makes it an object. Until that rename the file is a slot, never an object:
 * a crash mid-write leaves a slot with mixed bytes, which goes back to the pool at the
 * next open and is never served. A removed object's file of the slot size is renamed back
 * to a slot (persistent, unlike the spare files of tier_nvme_space.c); an evicted one is
 * recycled by the write that evicts it (tier_nvme_space.c), as without a pool.
 *
 * Accounting: free slots and slots being laid out count against nvme.bytes like objects.
 * A write that needs room drops free slots before it evicts any object (a slot holds no
 * data). The layout runs on the ring thread in the background - open stays bounded, and
 * a write that finds no free slot takes the path of a new file - at most NV_LAYOUTS slots
 * at a time, started only while no operation waits for an I/O slot, until the capacity
 * is held; then it stops until the next open (it never re-lays out what a write of
 * another size took: that would be a slot's worth of writing per small object).
 * stats.pool_pending_bytes says what is left to lay out (0: done): `kvtier bench` waits
 * for it before it measures. A read-only open (store.read_only) only counts the free
 * slots (pool_bytes, which `kvtier stat` shows): it never lays out, removes or changes one.
 */
#include "tier_nvme_internal.h"

#define NV_LAYOUTS 2 /* slots laid out at a time */

static void slot_path(uint32_t id, char *out)
{
	snprintf(out, NV_NAME_MAX, NV_POOL_DIR "/%u.slot", id);
}

/* disk: what the file holds on disk (bytes, but for one found with holes at open) */
static int slot_add(struct nv *s, uint32_t dir, uint32_t id, uint64_t bytes, uint64_t disk)
{
	if (s->nslots == s->slots_cap) {
		uint32_t nc = s->slots_cap ? 2 * s->slots_cap : 64;
		struct nv_slot *n = kvt__realloc(s->slots, nc * sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->slots = n;
		s->slots_cap = nc;
	}
	s->slots[s->nslots++] = (struct nv_slot){.dir = dir, .id = id, .bytes = bytes, .disk = disk};
	s->pool_bytes += bytes;
	ST_SET(s, pool_bytes, s->pool_bytes);
	return 0;
}

static void slot_forget(struct nv *s, uint32_t i)
{
	s->pool_bytes -= s->slots[i].bytes;
	s->slots[i] = s->slots[--s->nslots];
	ST_SET(s, pool_bytes, s->pool_bytes);
}

/* Unlink slot i: its blocks go back to the file system. */
static void slot_drop(struct nv *s, uint32_t i, bool now)
{
	char path[NV_NAME_MAX];
	struct nv_dir *d = &s->dirs[s->slots[i].dir];
	slot_path(s->slots[i].id, path);
	slot_forget(s, i);
	if (!now) {
		nv_unlink_async(s, d, path); /* copies the name at submission */
	} else if (unlinkat(d->fd, path, 0) < 0 && errno != ENOENT) {
		KVT_WARN(s->log, "nvme: unlink %s/%s: %s", d->path, path, strerror(errno));
		ST_ADD(s, errors, 1);
	}
}

/* At open (writer only): each directory's pool - interrupted layouts deleted, slots
 * listed with their sizes. Creates pool/ only when nvme.preallocate asks for slots. */
int nv_pool_scan(struct nv *s, const void *objects, size_t nobjects)
{
	for (uint32_t di = 0; di < s->ndirs; di++) {
		struct nv_dir *d = &s->dirs[di];
		if (s->prealloc && mkdirat(d->fd, NV_POOL_DIR, s->dir_mode) < 0 && errno != EEXIST)
			return -errno;
		int fd = openat(d->fd, NV_POOL_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0) {
			if (errno == ENOENT)
				continue;
			return -errno;
		}
		DIR *dir = fdopendir(fd);
		if (!dir) {
			int e = -errno;
			close(fd);
			return e;
		}
		uint64_t temps = 0, n = 0;
		struct dirent *de;
		while ((de = readdir(dir))) {
			const char *nm = de->d_name;
			if (!strncmp(nm, NV_TMP_PREFIX, strlen(NV_TMP_PREFIX))) {
				if (!s->ro && unlinkat(fd, nm, 0) == 0)
					temps++;
				continue;
			}
			char *end;
			unsigned long id = strtoul(nm, &end, 10);
			struct stat st;
			if (nm[0] < '1' || nm[0] > '9' || strcmp(end, ".slot") || id > UINT32_MAX)
				continue; /* not a slot's name */
			/* Never named again, even if not a slot (left alone, not overwritten by
			 * a rename: until 2026-12-05 only a valid slot reserved its id) */
			if (id > s->pool_seq)
				s->pool_seq = (uint32_t)id;
			if (fstatat(fd, nm, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
			    st.st_size < KVT_ALIGN || st.st_size % KVT_ALIGN)
				continue; /* not a slot of ours: left alone */
			bool obj = nv_scan_is_object(objects, nobjects, di, (uint64_t)st.st_ino);
			if (obj || st.st_nlink > 1) {
				/* Also an object's name: a power cut kept the slot's entry
				 * after the rename that published it (a file system without a
				 * journal: the object's leaf directory reached the disk, pool/
				 * did not). Overwriting it would overwrite the object. Such a
				 * file's link count on disk is still 1 (a rename keeps it; e2fsck
				 * makes it 2): unlinking the slot's name then would free the
				 * inode the object's name holds, so it is only left out, until a
				 * count of 2 says both names are counted. Until 2026-12-03 only
				 * the count was checked: the slot was listed free, and the next
				 * put of its size overwrote the object, which then served that
				 * put's bytes (integ.nvme_pool_powercut). */
				if (st.st_nlink > 1 && !s->ro && unlinkat(fd, nm, 0) == 0)
					temps++;
				else if (!s->ro)
					KVT_WARN(
					    s->log,
					    "nvme: %s/%s/%s is also an object's file, with one "
					    "link (a power cut on a file system without a "
					    "journal: run its fsck): not used as a free slot",
					    d->path, NV_POOL_DIR, nm);
				continue;
			}
			int rc = slot_add(s, di, (uint32_t)id, (uint64_t)st.st_size,
					  KVT_MIN((uint64_t)st.st_size, (uint64_t)st.st_blocks * 512));
			if (rc < 0) {
				closedir(dir);
				return rc;
			}
			n++;
		}
		closedir(dir);
		if ((n || temps) && !s->ro)
			KVT_INFO(s->log,
				 "nvme: %s: %" PRIu64 " preallocated slots free, %" PRIu64
				 " interrupted layouts (or stale slot names) removed",
				 d->path, n, temps);
	}
	return 0;
}

/* Allocated, not sized: a slot file with holes (a copy of the store made with `cp --sparse`)
 * takes its holes from the free space when an object overwrites it, so only what it holds
 * is room the tier already has (as nv_log_disk_bytes for segments). From the open's scan
 * (nv_slot.disk), not a stat of every slot again. */
uint64_t nv_pool_disk_bytes(const struct nv *s, dev_t dev)
{
	uint64_t n = 0;
	for (uint32_t j = 0; j < s->nslots; j++) {
		const struct nv_slot *sl = &s->slots[j];
		struct stat st;
		if (fstat(s->dirs[sl->dir].fd, &st) == 0 && st.st_dev == dev)
			n += sl->disk;
	}
	return n;
}

/* A free slot of op's size in op's directory becomes op's file, overwritten in place. */
bool nv_pool_take(struct nv *s, struct nv_op *op)
{
	for (uint32_t i = s->nslots; i-- > 0;) {
		struct nv_slot *sl = &s->slots[i];
		if (sl->dir != op->dir || sl->bytes != op->len)
			continue;
		op->slot = sl->id;
		slot_path(sl->id, op->name);
		op->recycled = true;
		op->moved = true; /* published out of the pool directory */
		op->moved_from = NV_LEAF_POOL;
		slot_forget(s, i);
		return true;
	}
	return false;
}

/* A write that took a slot and never issued anything: the slot is free again. */
bool nv_pool_untake(struct nv *s, struct nv_op *op)
{
	if (!op->slot)
		return false;
	if (slot_add(s, op->dir, op->slot, op->len, op->len) < 0)
		nv_unlink_async(s, &s->dirs[op->dir], op->name);
	op->slot = 0;
	op->recycled = false;
	op->moved = false;
	return true;
}

/* Removed entry e's file becomes a free slot (it has the slot size): no unlink, and the
 * next write of its size overwrites it. False if it cannot (then the caller unlinks). */
bool nv_pool_keep(struct nv *s, struct nv_ent *e)
{
	if (!s->prealloc || e->bytes != s->prealloc || e->lseg || e->opening ||
	    (e->fdc && e->fdc->refs))
		return false;
	char path[NV_NAME_MAX], slot[NV_NAME_MAX];
	uint32_t id = s->pool_seq + 1;
	nv_object_path(&e->key, path);
	slot_path(id, slot);
	struct nv_dir *d = &s->dirs[e->dir];
	if (renameat(d->fd, path, d->fd, slot) < 0)
		return false;
	s->pool_seq = id;
	nv_dirty_leaf(s, e->dir, NV_LEAF_POOL); /* the slot's new name (the key's: the remove) */
	uint32_t dir = e->dir;
	uint64_t bytes = e->bytes;
	nv_ent_remove(s, e);
	if (slot_add(s, dir, id, bytes, bytes) < 0)
		nv_unlink_async(s, d, slot);
	return true;
}

/* For room: drop one free slot (the oldest given). False when there is none. */
bool nv_pool_drop_one(struct nv *s, bool now)
{
	if (!s->nslots)
		return false;
	slot_drop(s, 0, now);
	return true;
}

/* After a real ENOSPC in dir: free slots there go (unlinked now) until the file system has
 * len bytes free for the write's retry, and no more are laid out until the next open. The
 * others stay free slots (writes of their size still land in them; a write of another
 * size drops them as it needs room): until 2026-12-05 every slot of the directory was
 * unlinked on the ring thread - 8,192 slots of 2 MiB at 1-2 ms each with discard stopped
 * the tier for seconds, every call past its deadline - and the background unlink has only
 * a queue depth of room. Returns the slots dropped. */
uint32_t nv_pool_drop_dir(struct nv *s, uint32_t dir, uint64_t len)
{
	uint64_t avail = 0, freed = 0;
	struct statvfs vfs;
	if (!fstatvfs(s->dirs[dir].fd, &vfs))
		avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	uint64_t need = len + 2 * KVT_ALIGN > avail ? len + 2 * KVT_ALIGN - avail : 0;
	uint32_t n = 0;
	for (uint32_t i = s->nslots; i-- > 0 && freed < need;)
		if (s->slots[i].dir == dir) {
			freed += s->slots[i].bytes;
			slot_drop(s, i, true);
			n++;
		}
	s->layout_done = true;
	return n;
}

/* Bytes still to lay out: the capacity nothing holds, in whole slots, plus the slots
 * being laid out. */
uint64_t nv_pool_pending(const struct nv *s)
{
	if (!s->prealloc || s->layout_done)
		return 0;
	uint64_t held = s->used + s->reserved + s->spare_bytes + s->pool_bytes + s->layout_bytes;
	uint64_t left = s->capacity > held ? s->capacity - held : 0;
	return left / s->prealloc * s->prealloc + s->layout_bytes;
}

static void layout_start(struct nv *s)
{
	struct nv_op *op = kvt__calloc(1, sizeof(*op));
	if (!op) {
		s->layout_done = true;
		return;
	}
	op->type = OP_LAYOUT;
	op->fd = -1;
	op->len = s->prealloc;
	op->slot = ++s->pool_seq;
	op->dir = op->slot % s->ndirs; /* spread evenly over the directories */
	snprintf(op->name, sizeof(op->name), NV_POOL_DIR "/" NV_TMP_PREFIX "layout.%d.%u",
		 (int)s->pid, op->slot);
	s->layout_bytes += op->len;
	s->layouts++;
	s->active++; /* close waits for it (or cancels it) */
	op->stage = ST_W_OPEN;
	nv_pump(s, op);
}

/* The layouts' source of zeros (a slot's and a log segment's), allocated at the first
 * layout. false: out of memory. */
bool nv_zero_ready(struct nv *s)
{
	if (!s->zero) {
		if (!(s->zero = kvt__aligned_alloc(NV_ZERO_BYTES)))
			return false;
		memset(s->zero, 0, NV_ZERO_BYTES);
	}
	return true;
}

/* stats.pool_pending_bytes: what the slots' and the log's layouts have left to do. */
void nv_layout_publish(struct nv *s)
{
	ST_SET(s, pool_pending, nv_pool_pending(s) + nv_log_layout_pending(s));
}

/* Ring thread, each turn of its loop: start laying out more slots if there is capacity
 * for them and no operation waits for an I/O slot (nv_layout_publish, after it, says what is
 * left). */
void nv_pool_kick(struct nv *s)
{
	if (!s->prealloc || s->layout_done)
		return;
	if (!nv_zero_ready(s)) {
		s->layout_done = true;
		return;
	}
	while (!s->cancelled && s->layouts < NV_LAYOUTS && !s->ready_head && s->free_ios) {
		uint64_t held =
		    s->used + s->reserved + s->spare_bytes + s->pool_bytes + s->layout_bytes;
		if (held + s->prealloc > s->capacity)
			break;
		layout_start(s);
	}
	if (!s->layouts) {
		uint64_t held =
		    s->used + s->reserved + s->spare_bytes + s->pool_bytes + s->layout_bytes;
		if (s->cancelled || held + s->prealloc > s->capacity) {
			s->layout_done = true;
			KVT_INFO(s->log, "nvme: preallocated pool: %u free slots, %" PRIu64 " bytes",
				 s->nslots, s->pool_bytes);
		}
	}
}

static void layout_end(struct nv *s, struct nv_op *op)
{
	s->layout_bytes -= op->len;
	s->layouts--;
	nv_finish(s, op, op->err);
}

/* A slot's data is written, fdatasync'ed and its file closed: name it a slot. */
void nv_pool_laid(struct nv *s, struct nv_op *op)
{
	struct nv_dir *d = &s->dirs[op->dir];
	char slot[NV_NAME_MAX];
	slot_path(op->slot, slot);
	if (renameat(d->fd, op->name, d->fd, slot) < 0) {
		op->err = -errno;
		nv_pool_layout_fail(s, op);
		return;
	}
	if (slot_add(s, op->dir, op->slot, op->len, op->len) < 0)
		nv_unlink_async(s, d, slot);
	layout_end(s, op);
}

/* A layout failed (ENOSPC, an I/O error) or was cancelled by close: its temp file goes,
 * and the layout stops until the next open (not when cancelled: it resumes there). */
void nv_pool_layout_fail(struct nv *s, struct nv_op *op)
{
	struct nv_dir *d = &s->dirs[op->dir];
	if (op->fd >= 0) {
		close(op->fd);
		op->fd = -1;
	}
	if (op->issued && unlinkat(d->fd, op->name, 0) < 0 && errno != ENOENT)
		KVT_WARN(s->log, "nvme: cannot remove %s/%s: %s", d->path, op->name,
			 strerror(errno));
	if (op->err != -ECANCELED) {
		KVT_WARN(s->log, "nvme: laying out a preallocated slot in %s failed: %s; writes "
				 "without a free slot create their files",
			 d->path, strerror(-op->err));
		ST_ADD(s, errors, 1);
	}
	s->layout_done = true;
	layout_end(s, op);
}
