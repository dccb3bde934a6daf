/*
 * tier_nvme_flush.c - what the NVMe tier's flush makes durable: every put and remove
 * submitted before it (kvt_flush's contract, include/kvtier.h).
 *
 * A put's data is durable before its publish with nvme.fsync=data|full (RWF_DSYNC or
 * fdatasync), but the publishing rename is a change of its leaf directory, durable only once
 * that directory is synced (fsync=full does it per write, before the put is answered); a
 * remove renames or unlinks a name, the same. So every publish (data, none) and every name
 * taken away by a remove marks its leaf directory dirty, and a flush, once the writes before
 * it are done, fsyncs the leaves dirty at that moment: IORING_OP_FSYNC on the leaf, on
 * io_uring's workers (a directory fsync takes milliseconds, far too long for the ring
 * thread), as many at a time as there are free I/O slots. With nvme.fsync=none no data is
 * durable either, so the flush runs syncfs on each drive that changed: synchronously, on
 * the ring thread (io_uring has no syncfs; none is the mode that trades safety for speed).
 * Flushes sync one after another, so a flush also completes after every earlier flush's
 * syncs: a flush never vouches for a name whose sync another flush still has in flight. A
 * leaf whose sync failed is dirty again, and the flush fails with that error.
 *
 * The small-object log (tier_nvme_log.c) renames nothing: its puts are answered once their
 * batch is written (and fdatasynced with data/full), but a remove of a log object is
 * answered once its tombstone is queued, so a flush also waits until the log has written
 * every tombstone queued before it (nv_flush_waits); with none, the log's writes mark their
 * drive for the syncfs (nv_dirty_fs).
 *
 * A write whose file was renamed out of another directory - an evicted object's file
 * (recycled), a spare's, a preallocated slot's in <dir>/pool - changes that one too, and
 * on a file system without a journal (ext4 -O ^has_journal, ext2) a sync of the new name's
 * leaf does not carry the old name's removal: after a power cut both names held the one
 * file. A slot's or a spare's old name is reused or deleted by the next open, taking the
 * flushed put's data with it; an evicted key's came back holding another key's object. So
 * the source leaf is marked dirty too (NV_LEAF_POOL is the pool directory's bit), and with
 * nvme.fsync=full it is synced before the put is answered (tier_nvme_ops.c, IO_DIRSYNC).
 * On a journalled file system one directory fsync commits every earlier rename, and the
 * second sync finds nothing to do.
 */
#include "tier_nvme_internal.h"

void nv_dirty_leaf(struct nv *s, uint32_t dir, uint32_t leaf)
{
	s->dirs[dir].dirty[leaf >> 6] |= 1ull << (leaf & 63);
}

void nv_dirty(struct nv *s, uint32_t dir, const struct kvt_key *k)
{
	nv_dirty_leaf(s, dir, k->bytes[0]);
}

/* A change of directory dir's drive that only a syncfs makes durable: with nvme.fsync=none,
 * the small-object log's writes (its batches, headers, log/head, segments made or voided);
 * with data and full they are durable before they count (tier_nvme_log.c). Until
 * 2026-12-03 nothing marked them, and a flush after log puts only ran no syncfs: after a
 * power cut every flushed log put was lost (integ.nvme_log_powercut). */
void nv_dirty_fs(struct nv *s, uint32_t dir)
{
	if (s->fsync_mode == NV_FSYNC_NONE)
		s->dirs[dir].dirty[0] |= 1; /* with none, any bit means "syncfs this drive" */
}

/* Flush f waits for the writes submitted before it, and for the log's removals queued
 * before it to be written (nv_log_flushed): a remove of a log object is answered once its
 * tombstone is queued. */
bool nv_flush_waits(const struct nv *s, const struct nv_op *f)
{
	return (s->whead && s->whead->seq <= f->seq) || !nv_log_flushed(s, f->tomb_mark);
}

static void leaf_name(uint32_t leaf, char out[8])
{
	if (leaf == NV_LEAF_POOL)
		snprintf(out, 8, "%s", NV_POOL_DIR);
	else
		snprintf(out, 8, "%02x", leaf & 255);
}

/* A read-only descriptor of leaf `leaf` of directory dir, to fsync; -1 with errno. */
int nv_leaf_open(struct nv *s, uint32_t dir, uint32_t leaf)
{
	char name[8];
	leaf_name(leaf, name);
	return openat(s->dirs[dir].fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

static void round_start(struct nv *s, struct nv_op *f);

/* f's syncs are all answered: f is done, the next flush starts its own. */
static void round_done(struct nv *s, struct nv_op *f)
{
	s->fsync_head = f->lnext;
	if (!s->fsync_head)
		s->fsync_tail = NULL;
	f->lnext = NULL;
	int err = f->err;
	struct nv_op *next = s->fsync_head;
	nv_finish(s, f, err);
	if (next)
		round_start(s, next);
}

static void round_start(struct nv *s, struct nv_op *f)
{
	f->err = 0;
	f->cursor = 0;
	for (uint32_t i = 0; i < s->ndirs; i++) {
		struct nv_dir *d = &s->dirs[i];
		bool any = false;
		for (int w = 0; w < 5; w++) {
			d->syncing[w] = d->dirty[w];
			d->dirty[w] = 0;
			any |= d->syncing[w] != 0;
		}
		if (s->fsync_mode != NV_FSYNC_NONE || !any)
			continue;
		memset(d->syncing, 0, sizeof(d->syncing));
		if (syncfs(d->fd) < 0) {
			f->err = -errno;
			KVT_WARN(s->log, "nvme: flush: syncfs %s: %s", d->path, strerror(errno));
			ST_ADD(s, errors, 1);
			d->dirty[0] = 1; /* tried again at the next flush */
		}
	}
	if (!f->err)
		f->err = nv_log_flush_err(s);
	f->stage = ST_F_SYNC;
	nv_pump(s, f);
}

/* The writes submitted before flush f are done: f syncs what they and the removes before
 * them changed, after the flushes before it. */
void nv_flush_ready(struct nv *s, struct nv_op *f)
{
	f->lnext = NULL;
	if (s->fsync_tail) {
		s->fsync_tail->lnext = f;
		s->fsync_tail = f;
		return;
	}
	s->fsync_head = s->fsync_tail = f;
	round_start(s, f);
}

/* Issue f's leaf syncs (f->cursor: the next leaf, dir * NV_LEAVES + leaf). False when out
 * of I/O slots (f waits on the ready list). */
bool nv_flush_pump(struct nv *s, struct nv_op *f)
{
	for (; f->cursor < (uint64_t)s->ndirs * NV_LEAVES; f->cursor++) {
		uint32_t dir = (uint32_t)(f->cursor / NV_LEAVES);
		struct nv_dir *d = &s->dirs[dir];
		uint32_t sub = (uint32_t)(f->cursor % NV_LEAVES);
		if (!(d->syncing[sub >> 6] & (1ull << (sub & 63))))
			continue;
		struct io_uring_sqe *sqe;
		struct nv_io *io = nv_io_start(s, f, IO_FLUSHSYNC, &sqe);
		if (!io)
			return false;
		d->syncing[sub >> 6] &= ~(1ull << (sub & 63));
		io->off = f->cursor;
		io->fd = nv_leaf_open(s, dir, sub);
		if (io->fd < 0) {
			io->len = (uint32_t)errno; /* answered with the CQE of a nop */
			io_uring_prep_nop(sqe);
		} else {
			io->len = 0;
			io_uring_prep_fsync(sqe, io->fd, 0);
		}
	}
	f->stage = ST_WAIT;
	if (!f->pending)
		round_done(s, f);
	return true;
}

void nv_flush_on_cqe(struct nv *s, struct nv_io *io, int res)
{
	struct nv_op *f = io->op;
	struct nv_dir *d = &s->dirs[io->off / NV_LEAVES];
	uint32_t sub = (uint32_t)(io->off % NV_LEAVES);
	if (io->fd >= 0)
		close(io->fd);
	else
		res = -(int)io->len;
	nv_io_put(s, io);
	if (res < 0) {
		char leaf[8];
		leaf_name(sub, leaf);
		KVT_WARN(s->log, "nvme: flush: fsync %s/%s: %s", d->path, leaf, strerror(-res));
		ST_ADD(s, errors, 1);
		d->dirty[sub >> 6] |= 1ull << (sub & 63); /* tried again at the next flush */
		if (!f->err)
			f->err = res;
	}
	if (f->stage == ST_WAIT && !f->pending)
		round_done(s, f);
}
