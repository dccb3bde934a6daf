/*
 * tier_nvme_space.c - where the NVMe tier's object files live and how room is found for a
 * write: file names, eviction (capacity), recycling an evicted object's file, spare files
 * and freeing blocks off the ring thread (preallocated slots: tier_nvme_pool.c).
 *
 * Layout. Object key K lives in dirs[hash(K) % n]/<K[0] as 2 hex>/<K as 64 hex>.kvt. The
 * 256 fan-out subdirectories keep directories small.
 *
 * unlink is NOT cheap: with ext4 mounted "discard", unlinking a 2 MiB file takes ~1-2 ms, so
 * an evicted or removed object is first renamed to a unique ".tmp.evict.*" name (ordered,
 * cheap) and that name is unlinked by an IORING_OP_UNLINKAT on io_uring's workers (see
 * nv_ent_unlink). Only the rare disk-full path unlinks synchronously, because it needs the
 * space back before it retries.
 *
 * Capacity (nvme.bytes, clamped at open to what the file systems can hold while keeping 2 %
 * of each free) is enforced before a write by evicting the least recently used *leaf* (see
 * tier_nvme_index.c). When the victim has the new object's size (full chunks all do) its
 * file becomes the new write's temp file and is overwritten in place (see recycle()): a full
 * cache then writes at the speed of an overwrite, not of create + allocate + discard. A
 * real ENOSPC from the file system evicts objects of the same directory and retries once.
 */
#include "tier_nvme_internal.h"

/* "<64 lowercase hex>.kvt" -> key; -1 if the name is not an object name. */
int nv_parse_object_name(const char *name, struct kvt_key *k)
{
	if (strlen(name) != 2 * KVT_KEY_BYTES + 4 || strcmp(name + 2 * KVT_KEY_BYTES, ".kvt"))
		return -1;
	return kvt__key_from_lowerhex(name, k) < 0 ? -1 : 0;
}

void nv_object_path(const struct kvt_key *k, char *out)
{
	char hex[2 * KVT_KEY_BYTES + 1];
	kvt_key_to_hex(k, hex);
	snprintf(out, NV_NAME_MAX, "%.2s/%s.kvt", hex, hex);
}

uint32_t nv_key_dir(const struct nv *s, const struct kvt_key *k)
{
	return (uint32_t)(kvt__key_hash(k) % s->ndirs);
}

/* Unlink a file now, on this thread (it may take milliseconds: see nv_ent_unlink). 0, or
 * -errno when the name is still there. */
static int unlink_now(struct nv *s, struct nv_dir *d, const char *path)
{
	if (unlinkat(d->fd, path, 0) < 0 && errno != ENOENT) {
		int err = errno;
		KVT_WARN(s->log, "nvme: unlink %s/%s: %s", d->path, path, strerror(err));
		ST_ADD(s, errors, 1);
		return -err;
	}
	return 0;
}

/* Unlink a unique temp name on io_uring's workers (no ordering to keep with anything). */
void nv_unlink_async(struct nv *s, struct nv_dir *d, const char *name)
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

/* Unlink the object's file and forget it. Freeing a file's blocks costs milliseconds on
 * some file systems (ext4 mounted with discard: ~1-2 ms for 2 MiB), far too long for the
 * ring thread. So the file is renamed to a unique temp name here (~10-20 us, and in program
 * order with publishes of the same key) and that name is unlinked by io_uring's workers. A
 * crash in between leaves a ".tmp." file, which the next open deletes. now: the caller needs
 * the space back before it continues (the ENOSPC path), or there is no ring yet.
 * The entry leaves the index either way (never served again); returns -errno when the
 * object's name could not be taken away (both the rename and the unlink failed: EROFS, EIO,
 * an immutable file): the file is still an object, which the next open indexes again, so a
 * remove must not be reported done. 0 otherwise (a failed unlink of the renamed temp name
 * leaves a ".tmp." file, which the next open deletes). */
int nv_ent_unlink(struct nv *s, struct nv_ent *e, bool now)
{
	if (e->lseg) {
		/* In a log segment: its bytes are reclaimed when the segment is reused, but its
		 * put record stays valid until then, and a restart would index it again - a
		 * stale copy once the key was stored as a file since and removed. So every way
		 * out of the index (remove, drop, LRU eviction, open-time eviction) leaves a
		 * tombstone, except the reuse of its segment, whose new generation voids the put
		 * (nv_log_tombstone tells). Cheap under heavy eviction: each victim makes room
		 * for a put, whose batch has a commit record anyway, and a tombstone is one more
		 * of its NV_LOG_MAXENT (72) entries; a 2 MiB batch holds at most 31 objects of
		 * 64 KiB, so puts and their victims' tombstones share one record and nothing more
		 * is written. Only objects below ~56 KiB fill records sooner (at 4 KiB, 36 puts a
		 * record instead of 72: a 4 KiB record per 148 KiB instead of per 292 KiB). */
		nv_log_tombstone(s, e);
		nv_ent_remove(s, e);
		return 0;
	}
	struct nv_dir *d = &s->dirs[e->dir];
	char path[NV_NAME_MAX], trash[NV_NAME_MAX];
	nv_object_path(&e->key, path);
	/* The name's removal is synced by the next flush, as a remove's is: an eviction too.
	 * Else a later put of the key into the log and its remove there (a tombstone, which
	 * leaves a file alone) were flushed while the file's name still stood on disk: after
	 * a power cut the open indexed the old file and served the removed key (until
	 * 2026-12-06; integ.nvme_log_powercut, "evicted file"). */
	nv_dirty(s, e->dir, &e->key);
	nv_ent_remove(s, e);
	if (now || !s->ring_ready || s->trash_inflight >= s->qd)
		return unlink_now(s, d, path);
	snprintf(trash, sizeof(trash), "%.2s/" NV_TMP_PREFIX "evict.%d.%u", path, (int)s->pid,
		 ++s->tmpseq);
	if (renameat(d->fd, path, d->fd, trash) < 0)
		return unlink_now(s, d, path);
	nv_unlink_async(s, d, trash);
	return 0;
}

void nv_evict(struct nv *s, struct nv_ent *e, bool now)
{
	kvt__tier_evicted(s->tier, &e->key, e->bytes);
	nv_ent_unlink(s, e, now);
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
	if (!op || op->log || v->lseg || op->recycled || v->dir != op->dir || v->bytes != op->len || v->opening ||
	    (v->fdc && v->fdc->refs))
		return false;
	char path[NV_NAME_MAX];
	nv_object_path(&v->key, path);
	if (renameat(s->dirs[v->dir].fd, path, s->dirs[v->dir].fd, op->name) < 0)
		return false;
	/* v's name is gone from its leaf: a flush syncs that too, and so does op's publish
	 * with fsync=full (tier_nvme_flush.c) */
	nv_dirty(s, v->dir, &v->key);
	op->moved = true;
	op->moved_from = v->key.bytes[0];
	kvt__tier_evicted(s->tier, &v->key, v->bytes);
	nv_ent_remove(s, v);
	ST_ADD(s, evictions, 1);
	op->recycled = true;
	return true;
}

/* Spare files. A removed object's file (kvt_remove: a chunk replaced, a session dropped)
 * is not unlinked but renamed to a ".tmp.spare." name and kept, up to nvme.queue_depth of
 * them, and the next write of the same size overwrites it in place instead of creating and
 * allocating a new file: no unlink (a discard on ext4 mounted "discard"), no block
 * allocation, and with nvme.fsync=data an fdatasync that has no allocation to commit.
 * Spares count against nvme.bytes; nv_make_room drops them before it evicts an object. They
 * are never objects (a crash leaves ".tmp." files, which the next open deletes) and only
 * ever become one through the temp-file write and rename of a new object, so crash safety
 * is that of every write. */
static void spare_drop(struct nv *s, uint32_t i, bool now)
{
	struct nv_spare *sp = &s->spares[i];
	if (now)
		unlink_now(s, &s->dirs[sp->dir], sp->name);
	else
		nv_unlink_async(s, &s->dirs[sp->dir], sp->name);
	s->spare_bytes -= sp->bytes;
	s->spares[i] = s->spares[--s->nspares];
}

void nv_spare_drop_all(struct nv *s, bool now)
{
	while (s->nspares)
		spare_drop(s, s->nspares - 1, now);
}

/* Keep removed entry e's file as a spare instead of unlinking it; false if it cannot be
 * (a read of it in flight, no room under the capacity, the spare list full). */
bool nv_spare_keep(struct nv *s, struct nv_ent *e)
{
	if (!s->ring_ready || e->lseg || e->opening || (e->fdc && e->fdc->refs) ||
	    s->used + s->reserved + s->spare_bytes + s->pool_bytes + s->layout_bytes > s->capacity)
		return false;
	if (!s->spares && !(s->spares = kvt__calloc(s->qd, sizeof(*s->spares))))
		return false;
	if (s->nspares >= s->qd)
		spare_drop(s, 0, false); /* the oldest goes */
	struct nv_spare *sp = &s->spares[s->nspares];
	char path[NV_NAME_MAX];
	nv_object_path(&e->key, path);
	snprintf(sp->name, sizeof(sp->name), "%.2s/" NV_TMP_PREFIX "spare.%d.%u", path, (int)s->pid,
		 ++s->tmpseq);
	if (renameat(s->dirs[e->dir].fd, path, s->dirs[e->dir].fd, sp->name) < 0)
		return false;
	sp->dir = e->dir;
	sp->leaf = e->key.bytes[0];
	sp->bytes = e->bytes;
	s->nspares++;
	s->spare_bytes += e->bytes;
	nv_ent_remove(s, e);
	return true;
}

/* Make a spare of op's size in op's directory op's temp file. */
bool nv_spare_take(struct nv *s, struct nv_op *op)
{
	for (uint32_t i = s->nspares; i-- > 0;) {
		struct nv_spare *sp = &s->spares[i];
		if (sp->dir != op->dir || sp->bytes != op->len)
			continue;
		memcpy(op->name, sp->name, sizeof(op->name));
		op->moved = true; /* published out of the spare's leaf */
		op->moved_from = sp->leaf;
		s->spare_bytes -= sp->bytes;
		s->spares[i] = s->spares[--s->nspares];
		op->recycled = true;
		return true;
	}
	return false;
}

/* The parent of e in its chain, or NULL (none, or not here). */
static struct nv_ent *chain_up(struct nv *s, const struct nv_ent *e)
{
	return e->has_parent && !kvt__key_eq(&e->parent, &e->key) ? nv_ent_find(s, &e->parent)
								  : NULL;
}

/* Entries from e up its chain (e included), at most limit + 1 counted. */
static uint64_t chain_len(struct nv *s, struct nv_ent *e, uint64_t limit)
{
	uint64_t n = 0;
	for (; e && n <= limit; e = chain_up(s, e))
		n++;
	return n;
}

/* Could evicting free need bytes for op? Never an underestimate: the leaves (bar op's
 * parent) first - almost always enough, in a step or two - and where they are not, every
 * object but those evicting the leaves cannot reach: op's parent and its ancestors (the
 * parent is never a victim, so nothing above it becomes a leaf), and the copy of op's own
 * key that its admission sets aside (no victim either, nv_victim: it stays on disk until op
 * has stored its new copy) with its ancestors, for the same reason. Before 2026-12-06 the
 * eviction loop found out by trying: it evicted every other leaf and then refused the
 * write, the cache copies lost for nothing; until 2026-12-07 the set-aside copy's ancestors
 * were counted as evictable, with the same result (nvme_reput_chain). */
static bool room_possible(struct nv *s, uint64_t need, const struct nv_op *op)
{
	if (!nv_victim(s, op))
		return false; /* nothing to evict at all: refused at once, as before */
	bool parent = op && op->has_parent && !kvt__key_eq(&op->parent, &op->key);
	struct nv_ent *own = op ? nv_ent_find(s, &op->key) : NULL;
	if (own && !nv_ent_aside_kept(own))
		own = NULL;
	uint64_t leaves = 0;
	for (struct nv_ent *e = s->leaf_tail; e; e = e->lprev)
		if ((!parent || !kvt__key_eq(&e->key, &op->parent)) && e != own)
			if ((leaves += e->bytes) >= need)
				return true;
	/* The two chains (from op's parent, from its own kept copy) join where they share an
	 * ancestor, and are one chain above it: walked in step once the longer one has been
	 * walked down to the other's length, they meet there, and each entry counts once. */
	struct nv_ent *a = parent ? nv_ent_find(s, &op->parent) : NULL, *b = own;
	uint64_t la = chain_len(s, a, s->nents), lb = chain_len(s, b, s->nents);
	/* a walk longer than the index is a cycle in links restored from a damaged
	 * .kvtier.chains (its bytes counted over and over): no answer, try evicting */
	if (la > s->nents || lb > s->nents)
		return true;
	uint64_t kept = 0;
	for (; la > lb; la--, a = chain_up(s, a))
		kept += a->bytes;
	for (; lb > la; lb--, b = chain_up(s, b))
		kept += b->bytes;
	for (; a && a != b; a = chain_up(s, a), b = chain_up(s, b))
		kept += a->bytes + b->bytes;
	for (; a; a = chain_up(s, a)) /* the shared part, once */
		kept += a->bytes;
	return s->used > kept && s->used - kept >= need;
}

/* Evict LRU objects until len more bytes fit under the capacity, recycling one victim's
 * file for op if it can (op may be NULL). Spare files go first. Evicts nothing where
 * evicting could not make the room (room_possible). */
int nv_make_room(struct nv *s, uint64_t len, struct nv_op *op)
{
	if (len > s->capacity)
		return -ENOSPC; /* never fits: do not empty the cache for nothing */
	uint64_t fixed = s->used + s->reserved + s->layout_bytes + len;
	if (fixed > s->capacity && !room_possible(s, fixed - s->capacity, op))
		return -ENOSPC;
	/* Spare files first, then free preallocated slots (tier_nvme_pool.c): neither holds
	 * data. Slots being laid out count like objects: they are written already. */
	while (s->used + s->reserved + s->spare_bytes + s->pool_bytes + s->layout_bytes + len >
		   s->capacity &&
	       s->nspares)
		spare_drop(s, 0, false);
	while (s->used + s->reserved + s->pool_bytes + s->layout_bytes + len > s->capacity &&
	       nv_pool_drop_one(s, false))
		;
	struct nv_ent *v;
	while (s->used + s->reserved + s->layout_bytes + len > s->capacity && (v = nv_victim(s, op)))
		if (!recycle(s, v, op))
			nv_evict(s, v, false);
	return s->used + s->reserved + s->layout_bytes + len > s->capacity ? -ENOSPC : 0;
}

/* After a real ENOSPC: evict LRU objects of one directory so that len bytes fit, counting
 * the file system's free space. Evicts nothing (returns 0) if even evicting every object of
 * the directory could not make room. Returns objects evicted. */
int nv_evict_in_dir(struct nv *s, uint32_t dir, uint64_t len)
{
	uint64_t freed = 0, in_dir = 0, avail = 0;
	int n = 0;
	struct statvfs vfs;
	if (!fstatvfs(s->dirs[dir].fd, &vfs))
		avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	/* the object and a little slack for metadata, less what is free: the slots
	 * nv_pool_drop_dir just unlinked may have made all the room (until 2026-12-06 the
	 * slack was added after, so a leaf was evicted even then: integ.nvme_pool_enospc) */
	uint64_t want = KVT_ALIGN_UP(len, KVT_ALIGN) + KVT_ALIGN;
	len = want > avail ? want - avail : 0;
	KVT_DEBUG(s->log, "nvme: %s: ENOSPC with %" PRIu64 " bytes free, %" PRIu64 " more needed",
		  s->dirs[dir].path, avail, len);
	if (!len)
		return 0;
	/* Only leaves can go, and log objects do not count: evicting one frees no blocks (its
	 * segment stays). Counting every object evicted leaves for nothing when they could not
	 * make room (the write failed all the same). A chain's end evicted makes its parent a
	 * leaf, so this is a lower bound of what could go. */
	for (struct nv_ent *e = s->leaf_head; e; e = e->lnext)
		if (e->dir == dir && !e->lseg)
			in_dir += e->bytes;
	if (in_dir < len)
		return 0;
	/* Leaves only, like nv_make_room; evicting one may make its parent the next leaf. A
	 * chunk with a child stored (or being written: the write that hit ENOSPC counts on
	 * its parent) never goes here - until 2026-12-05 the LRU tail did when no leaf was
	 * left, and a session larger than the room lost its first chunk to its own next
	 * write. */
	while (freed < len) {
		struct nv_ent *e = s->leaf_tail;
		while (e && (e->dir != dir || e->lseg))
			e = e->lprev;
		if (!e)
			break;
		freed += e->bytes;
		nv_evict(s, e, true);
		n++;
	}
	return n;
}
