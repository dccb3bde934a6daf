/*
 * tier_nvme_write.c - a write's life outside the ring: admission (same key stored or in
 * flight, refused chains, budget, room), the crash-safe publish and the failure path.
 *
 * A write goes to "<sub>/.tmp.<hex>.<pid>.<seq>" first and is renamed onto the final name
 * only after its data has completed (and, per nvme.fsync, been made durable - by an
 * fdatasync, or for an object of one I/O by writing it with RWF_DSYNC; "full" also
 * fsyncs the directory after the rename), so a process killed at any moment leaves at most
 * a stray temp file, never a torn object.
 *
 * Renames. Those that take a final name away (an evicted or removed object's file to a
 * temp name) are synchronous syscalls on the ring thread, in program order. The publish -
 * the temp file onto the new object's name - is an IORING_OP_RENAMEAT on io_uring's
 * workers, and the object is indexed only when it completes (nv_write_published; with
 * nvme.fsync=full only once the directory fsync after it also succeeded, else the write
 * fails and the file is removed: tier_nvme_ops.c, IO_DIRSYNC). That
 * is safe without per-key locking because a final name is only ever taken away from an
 * indexed object, and an object is indexed only after its publish completed (a damaged
 * file of K that open indexed is dropped when K's write starts): no eviction or removal
 * of K can race the publish of K, and two publishes of K cannot be in flight (one
 * leader write per key). Why async: a synchronous rename stalls the ring
 * thread for its duration (p99 ~200 us), and every completion and submission behind it;
 * measured (docs/BENCHMARKS.md, "NVMe write path"): 2 MiB writes +18 %, 64 KiB +4 %. A
 * failed publish leaves the temp file, which the failure path removes. A write of a key
 * already stored completes at once: keys are content addresses. Refused writes are counted
 * (writes_skipped) and reported at warning level, at most one line per 10 s.
 */
#include "tier_nvme_internal.h"

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
		 : rc == -EROFS
		     ? "the store is open read-only"
		     : "no room (nvme.bytes or the file system is full, and a chunk never "
		       "evicts its own prefix)");
}

static void tmp_name(struct nv *s, struct nv_op *op)
{
	char hex[2 * KVT_KEY_BYTES + 1];
	kvt_key_to_hex(&op->key, hex);
	snprintf(op->name, sizeof(op->name), "%.2s/" NV_TMP_PREFIX "%s.%d.%u", hex, hex,
		 (int)s->pid, ++s->tmpseq);
}

void nv_write_release(struct nv *s, struct nv_op *op)
{
	s->reserved -= op->len;
}

/* The temp file is closed and complete: rename it onto the object's name, on io_uring's
 * workers (sqe), and index it when that completes (nv_write_published). */
void nv_write_publish_prep(struct nv *s, struct nv_op *op, struct io_uring_sqe *sqe)
{
	int dfd = s->dirs[op->dir].fd;
	nv_object_path(&op->key, op->final);
	io_uring_prep_renameat(sqe, dfd, op->name, dfd, op->final, 0);
}

int nv_write_published(struct nv *s, struct nv_op *op, int res)
{
	if (res < 0)
		return res;
	int rc = nv_write_index(s, op, 0, 0);
	if (rc < 0) /* do not leave an object we do not account for */
		unlinkat(s->dirs[op->dir].fd, op->final, 0);
	else if (s->fsync_mode != NV_FSYNC_FULL) { /* full synced both before this */
		nv_dirty(s, op->dir, &op->key); /* the new name: synced by a flush */
		if (op->moved) /* and the old one's removal (tier_nvme_flush.c) */
			nv_dirty_leaf(s, op->dir, op->moved_from);
	}
	return rc;
}

/* Index op's object, now complete and durable per nvme.fsync: in its own file (lseg 0,
 * already renamed onto its final name) or in log segment lseg - 1 at loff. */
int nv_write_index(struct nv *s, struct nv_op *op, uint32_t lseg, uint64_t loff)
{
	char final[NV_NAME_MAX];
	nv_object_path(&op->key, final);
	struct nv_ent *e = nv_ent_find(s, &op->key);
	if (e) {
		/* Not expected (a valid copy ends a write at its start, a damaged one is dropped
		 * there); kept so that an index never holds two entries of a key: the newest
		 * copy wins. */
		if (!e->lseg && (e->dir != op->dir || lseg)) {
			unlinkat(s->dirs[e->dir].fd, final, 0);
			nv_dirty(s, e->dir, &op->key); /* as nv_ent_unlink's */
		}
		if (e->lseg && !lseg)
			nv_log_tombstone(s, e); /* its put must not outlive it (nv_ent_unlink) */
		e->dir = op->dir;
		nv_ent_set_lseg(s, e, lseg);
		e->loff = loff;
		e->hot = false; /* a new object: not read yet */
		/* Read opens in flight are the old copy's: each sees the new gen when it
		 * completes and counts nothing down (nv_on_cqe, IO_OPEN). Carried over, they
		 * kept the new copy from ever being recycled, kept spare or as a pool slot. */
		e->opening = 0;
		nv_fdc_detach(s, e);
		pthread_mutex_lock(&s->ilock);
		s->used = s->used - e->bytes + op->len;
		e->bytes = op->len;
		e->gen = ++s->gen; /* a new copy: no report of an earlier read is about it */
		pthread_mutex_unlock(&s->ilock);
		nv_lru_touch(s, e);
		nv_publish_counts(s);
		/* one uid for both: the children counted on this write (in flight too) */
		nv_kids_relabel(s, &op->key, e->uid, op->uid);
		e->uid = op->uid;
	} else if (!(e = nv_ent_insert(s, &op->key, op->dir, op->len))) {
		return -ENOMEM; /* the failure path releases the reservation */
	} else {
		e->uid = op->uid; /* what children in flight counted on */
		nv_ent_set_lseg(s, e, lseg);
		e->loff = loff;
	}
	/* The entry takes over the children counted on this write, and its own link. */
	if ((e->children += op->children) > 0)
		nv_leaf_unlink(s, e);
	op->children = 0;
	if (op->has_parent && !e->has_parent) {
		e->parent = op->parent;
		e->has_parent = true;
	}
	nv_chain_take(s, e, op); /* its count on its parent, or an orphan */
	nv_orphans_adopt(s, e);	 /* children written before it */
	nv_write_release(s, op);
	ST_ADD(s, writes, 1);
	ST_ADD(s, write_bytes, op->len);
	return 0;
}

bool nv_write_fail(struct nv *s, struct nv_op *op)
{
	struct nv_dir *d = &s->dirs[op->dir];
	if (op->fd >= 0) {
		close(op->fd);
		op->fd = -1;
	}
	if (unlinkat(d->fd, op->name, 0) < 0 && errno != ENOENT)
		KVT_WARN(s->log, "nvme: cannot remove temp file %s/%s: %s", d->path, op->name,
			 strerror(errno));
	/* The retry writes the whole object again, which its admission charged to the write
	 * budget once: what this attempt wrote before the disk filled is charged on top (a
	 * budget it does not fit in refuses the retry, -EDQUOT). Until 2026-12-06 it was not
	 * counted, and every retried write got up to its own size through unbudgeted
	 * (integ.nvme_budget_enospc). */
	uint32_t extra_hour = 0;
	if (op->err == -ENOSPC && !op->retried && !s->cancelled &&
	    nv_budget_take(s, op->wrote, &extra_hour) < 0)
		op->err = -EDQUOT;
	if (op->err == -ENOSPC && !op->retried && !s->cancelled) {
		uint32_t dropped = s->nspares + nv_pool_drop_dir(s, op->dir, op->len);
		nv_spare_drop_all(s, true);
		int evicted = nv_evict_in_dir(s, op->dir, op->len);
		if (evicted > 0 || dropped > 0) {
			KVT_INFO(s->log,
				 "nvme: %s full: unlinked %u free files, evicted %d objects, "
				 "retrying once",
				 d->path, dropped, evicted);
			op->retried = true;
			op->recycled = false;
			op->moved = op->syncing_moved = false;
			op->slot = 0;
			op->err = 0;
			op->cursor = op->wrote = 0;
			tmp_name(s, op);
			op->stage = ST_W_OPEN;
			return false;
		}
		/* no retry: what it wrote is covered by the admission's charge */
		nv_budget_refund(s, op->wrote, extra_hour);
	}
	nv_write_release(s, op);
	/* Only what was never issued goes back: issued bytes may have reached the media (a
	 * publish that failed after the data was written: all of them). */
	nv_budget_refund(s, op->len - op->cursor, op->budget_hour);
	if (op->err == -ENOSPC || op->err == -EDQUOT) {
		report_skip(s, op->err);
	} else {
		ST_ADD(s, errors, 1);
		KVT_WARN(s->log, "nvme: write to %s failed: %s", d->path, strerror(-op->err));
	}
	return true;
}

/* Set e, the file under op's key's name that the open found, aside for op: renamed to a
 * temp name in its leaf (no data moves; a crash leaves a ".tmp." file, which the next open
 * deletes - as the unlink it replaces would have lost the copy) and out of the index, so
 * nothing takes K's name away while op's publish is in flight. false: not an object's
 * shape (damage, nothing to keep), in the log, or the rename failed. */
static bool aside_take(struct nv *s, struct nv_op *op, struct nv_ent *e)
{
	if (!nv_ent_aside_kept(e)) /* (the copies nv_victim leaves to it) */
		return false;
	char path[NV_NAME_MAX];
	int dfd = s->dirs[e->dir].fd;
	nv_object_path(&e->key, path);
	snprintf(op->aside_name, sizeof(op->aside_name), "%.2s/" NV_TMP_PREFIX "aside.%d.%u", path,
		 (int)s->pid, ++s->tmpseq);
	if (renameat(dfd, path, dfd, op->aside_name) < 0)
		return false;
	op->aside = true;
	op->aside_dir = e->dir;
	op->aside_bytes = e->bytes;
	op->aside_has_parent = e->has_parent;
	op->aside_parent = e->parent;
	nv_ent_remove(s, e); /* (a read holding its fd reads on: the same file) */
	/* Its bytes stay on the disk until the write ends: still counted (as reserved), or
	 * writes admitted meanwhile would take the store past nvme.bytes by as much */
	s->reserved += op->aside_bytes;
	return true;
}

void nv_write_aside_end(struct nv *s, struct nv_op *op, bool stored)
{
	if (!op->aside)
		return;
	op->aside = false;
	s->reserved -= op->aside_bytes; /* (aside_take) */
	struct nv_dir *d = &s->dirs[op->aside_dir];
	/* stored: the new copy is indexed (under K's name, or in the log); aside_removed: K
	 * was removed while the write was in flight (OP_REMOVE) */
	if (stored || op->aside_removed) {
		/* K's name held the found copy until its admission: the name's change is synced
		 * by the next flush, as nv_ent_unlink's removal is (a copy put in the log and
		 * removed there leaves the name alone: the old file must not come back) */
		nv_dirty(s, op->aside_dir, &op->key);
		nv_unlink_async(s, d, op->aside_name);
		return;
	}
	/* Indexed first (memory), then renamed back: a name nothing accounts for must not be
	 * left (nv_write_published's rule). The name is free: the failed write's publish never
	 * happened or was undone. */
	char path[NV_NAME_MAX];
	nv_object_path(&op->key, path);
	struct nv_ent *e = nv_ent_insert(s, &op->key, op->aside_dir, op->aside_bytes);
	if (!e || renameat(d->fd, op->aside_name, d->fd, path) < 0) {
		KVT_WARN(s->log, "nvme: cannot put back the copy of a key found at open (%s/%s): %s",
			 d->path, path, e ? strerror(errno) : "no memory");
		if (e)
			nv_ent_remove(s, e);
		nv_unlink_async(s, d, op->aside_name);
		return;
	}
	e->scanned = true; /* still found by its name only: its next put writes it again */
	e->uid = op->uid;  /* the children counted on the write counted on it before */
	if ((e->children = op->children) > 0)
		nv_leaf_unlink(s, e);
	op->children = 0;
	if (op->aside_has_parent || op->has_parent) {
		e->parent = op->aside_has_parent ? op->aside_parent : op->parent;
		e->has_parent = true;
	}
	nv_chain_take(s, e, op); /* its count on its parent, or an orphan */
	nv_orphans_adopt(s, e);
	nv_dirty(s, op->aside_dir, &op->key); /* the name back: synced by a flush */
}

void nv_start_write(struct nv *s, struct nv_op *op)
{
	op->wnext = NULL;
	op->wprev = s->wtail;
	if (s->wtail)
		s->wtail->wnext = op;
	else
		s->whead = op;
	s->wtail = op;

	struct nv_ent *e = nv_ent_find(s, &op->key);
	if (e && e->bytes >= KVT_HEADER_BYTES && e->bytes % KVT_ALIGN == 0 && !e->scanned) {
		/* Content-addressed: the same key is the same bytes. (A file too short or
		 * misaligned to be an object is damage: it gets overwritten. So is a file the
		 * open found under the name, once: after a power cut it may hold another key's
		 * object - a recycled file's rename lost, its new data kept - and until
		 * 2026-12-06 a put of the key was acknowledged without storing anything,
		 * integ.nvme_recycle_powercut.) */
		nv_lru_touch(s, e);
		if (op->has_parent && !e->parent_uid) /* (re)learn it, counting on it now */
			nv_chain_link(s, e, &op->parent);
		nv_finish(s, op, 0);
		return;
	}
	struct nv_op **slot = nv_leader_slot(s, &op->key);
	if (*slot) {
		/* The same bytes are being written right now: share that write's result. */
		op->lnext = (*slot)->followers;
		(*slot)->followers = op;
		return;
	}
	/* K's write from here on, under the uid the children counted on (the uid of a file
	 * under K's name, if there is one): a child that the room made below evicts is
	 * uncounted from it, and a failure below (nv_finish) hands them back to the orphans.
	 * (Registered after the room was made until 2026-12-05: an evicted child then stayed
	 * counted, and the parent was never a leaf again.) */
	op->leader = true;
	op->lnext = NULL;
	*slot = op;
	op->uid = e ? e->uid : ++s->uids;
	op->dir = nv_key_dir(s, &op->key);
	op->fd = -1;
	tmp_name(s, op);
	if (op->has_parent && !nv_ent_find(s, &op->parent) && !*nv_leader_slot(s, &op->parent) &&
	    nv_refused_has(s, &op->parent)) {
		nv_refused_add(s, &op->key);
		report_skip(s, -ENOSPC);
		nv_finish(s, op, -ENOSPC);
		return;
	}
	op->log = nv_log_takes(s, op);
	if (op->log)
		op->dir = 0; /* the log lives in the first directory */
	int rc = nv_budget_take(s, op->len, &op->budget_hour);
	if (!rc && !op->log && !nv_pool_take(s, op))
		nv_spare_take(s, op);
	if (!rc && (rc = nv_make_room(s, op->len, op)) < 0) {
		nv_budget_refund(s, op->len, op->budget_hour);
		nv_refused_add(s, &op->key);
	}
	if (rc < 0) {
		if (op->recycled && !nv_pool_untake(s, op))
			nv_unlink_async(s, &s->dirs[op->dir], op->name);
		report_skip(s, rc);
		nv_finish(s, op, rc);
		return;
	}
	/* A file under K's name the open found (possibly another key's bytes after a power
	 * cut), or a damaged one left indexed for reads to judge, leaves the index now that
	 * the write is admitted and before it is issued: indexed, it could be removed while
	 * K's publish is in flight and take the new file with it (the rename comment at the
	 * top). Its children pass to this write. A found file of an object's shape is only
	 * set aside (aside_take), and comes back if the write fails (nv_write_aside_end);
	 * a damaged one goes. Until 2026-12-06 the found file went before the admission (a
	 * put refused for room or write budget lost a flushed copy found at open, a review's
	 * reproducer), then at it: a write failing after its admission (a publish the file
	 * system failed, a full disk) still lost it (nvme_reput_refused 2). The room made
	 * above leaves such a copy alone (nv_victim); until 2026-12-06 it could evict it, or
	 * recycle its file for this write, and a failure then lost it all the same
	 * (nvme_reput_refused 3). A damaged file may have gone there already. */
	if ((e = nv_ent_find(s, &op->key))) {
		op->children += e->children;
		e->children = 0;
		if (!aside_take(s, op, e))
			nv_ent_unlink(s, e, false);
		e = NULL;
	}
	s->reserved += op->len;
	/* Counted now, not at publish: its ancestors must stop being victims while it is in
	 * flight, and it may publish before its parent does. */
	if (op->has_parent && !kvt__key_eq(&op->parent, &op->key))
		op->parent_uid = nv_parent_count(s, &op->parent, +1, 0);
	op->stage = op->log ? ST_W_STAGE : ST_W_OPEN;
	nv_pump(s, op);
}
