/*
 * tier_nvme_ops.c - the NVMe tier's operations as small state machines advanced by
 * completions (nv_pump issues, nv_on_cqe moves on), and the start of every kind of op.
 *
 * Data, fallocate, fsync, close and openat (temp create, read open) go through io_uring
 * (openat, fallocate and fsync are the slow metadata operations, so they run on io_uring's
 * workers without stalling the ring thread). Large objects are split into NV_IO_MAX pieces;
 * the last piece carries a remainder of up to NV_IO_CARRY, so a 2 MiB chunk with its 4 KiB
 * header block is one write, and one read.
 *
 * Durability (nvme.fsync data/full) of an object written in one I/O: the write carries
 * RWF_DSYNC instead of being followed by an fdatasync. Same guarantee - the kernel
 * completes a DSYNC write only once its data, and any metadata needed to read it back, is
 * durable (a FUA write where the device has FUA, else write + cache flush) - but no
 * IORING_OP_FSYNC, which io_uring always hands to a worker thread, and one ring round trip
 * less. Measured (docs/BENCHMARKS.md "NVMe write path at 2 MiB with fsync=data"): same
 * GiB/s on a quiet machine, 14 % less CPU and half the context switches per object.
 * Objects of several pieces keep one fdatasync after all of them: a DSYNC per piece would
 * be one cache flush per piece. tests/integ/nvme_dsync.c checks that neither path
 * completes a write while the file system's fsync is held.
 */
#include "tier_nvme_internal.h"

/* A read's descriptor: its cached file's, or its log segment's. */
static int read_fd(struct nv *s, const struct nv_op *op)
{
	return op->lseg ? nv_log_read_fd(s, op->lseg) : op->fdc->fd;
}

/* store.read_only (no lock: a writer may be running), after a read: is what was read still
 * the object? A writer renames an object's file away (recycle, the spare files, the slot
 * pool) before it writes anything else into it, and rewrites a log segment's header before
 * it writes over the segment's old lap, so a name still bound to the inode read - or a
 * segment still at the lap the open read - after the read means the bytes read were the
 * object's: 1. The name gone or bound to another file, or another lap: 0, the object went
 * while it was read (a miss, not damage: until 2026-12-04 `kvtier verify` on a store a
 * writer was filling called most of its objects corrupt, exit 3). A check that cannot be
 * made: < 0, the read's error (never a miss: nothing may vanish from an inspection because
 * a stat failed). Not seen: the file recycled away and back to this name within one read
 * (several writes of the writer), whose bytes the caller's checksums then catch. */
static int ro_read_current(struct nv *s, const struct nv_op *op)
{
	if (op->lseg)
		return nv_log_lap_current(s, op->lseg);
	if (!op->fdc)
		return -EINVAL;
	struct stat a, b;
	char name[NV_NAME_MAX];
	nv_object_path(&op->key, name);
	if (fstat(op->fdc->fd, &a) < 0)
		return -errno;
	if (fstatat(s->dirs[op->dir].fd, name, &b, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	return a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

/* One I/O [io->off, io->off + io->len) of a split object (nv_write_split): a gather of
 * the header and the payload's start while it covers the header, else a plain write from
 * the payload. No byte is copied. */
static void prep_split_write(struct nv_op *op, struct nv_io *io, struct io_uring_sqe *sqe)
{
	uint64_t off = io->off, len = io->len;
	if (off >= op->head_len) {
		io->buf = (uint8_t *)op->tail + (off - op->head_len);
		io_uring_prep_write(sqe, op->fd, io->buf, (unsigned)len, off);
		return;
	}
	uint64_t in_head = KVT_MIN(len, op->head_len - off);
	io->iov[0] = (struct iovec){.iov_base = (uint8_t *)op->obj + off, .iov_len = in_head};
	io->iov[1] = (struct iovec){.iov_base = (uint8_t *)op->tail, .iov_len = len - in_head};
	io_uring_prep_writev(sqe, op->fd, io->iov, len > in_head ? 2 : 1, off);
}

/* The rest of a short read or write (io's off, buf and len moved past what completed):
 * into sqe, or, with no SQE free, on the list nv_io_resume issues from. The op keeps
 * waiting for it either way (pending). Until 2026-12-06 a full SQ failed the op with -EIO:
 * the SQ holds queue_depth + 8 and data I/Os take at most queue_depth of it, but the
 * background closes of removed objects' cached fds (tier_nvme_fdc.c) are not bounded, and
 * a submission the kernel refused (-EBUSY, -EAGAIN) leaves its SQEs in place. */
static void prep_rest(struct nv *s, struct nv_op *op, struct nv_io *io, struct io_uring_sqe *sqe)
{
	if (io->kind == IO_READ) {
		io_uring_prep_read(sqe, read_fd(s, op), io->buf, io->len, op->base + io->off);
	} else {
		if (op->tail) /* the rest, from the pieces themselves */
			prep_split_write(op, io, sqe);
		else
			io_uring_prep_write(sqe, op->fd, io->buf, io->len, io->off);
		if (op->dsync)
			sqe->rw_flags = RWF_DSYNC;
	}
	io_uring_sqe_set_data(sqe, io);
}

static void resubmit(struct nv *s, struct nv_op *op, struct nv_io *io)
{
	op->pending++;
	struct io_uring_sqe *sqe = s->resub_head ? NULL : io_uring_get_sqe(&s->ring);
	if (sqe) {
		prep_rest(s, op, io, sqe);
		return;
	}
	io->next_free = NULL; /* (not free: the link is unused meanwhile) */
	if (s->resub_tail)
		s->resub_tail->next_free = io;
	else
		s->resub_head = io;
	s->resub_tail = io;
}

void nv_io_resume(struct nv *s)
{
	struct io_uring_sqe *sqe;
	while (s->resub_head && (sqe = io_uring_get_sqe(&s->ring))) {
		struct nv_io *io = s->resub_head;
		if (!(s->resub_head = io->next_free))
			s->resub_tail = NULL;
		io->next_free = NULL;
		prep_rest(s, io->op, io, sqe);
	}
}

/* A layout (a pool slot's or a log segment's) failed or was cancelled. */
static void layout_failed(struct nv *s, struct nv_op *op)
{
	if (op->log_layout)
		nv_log_layout_fail(s, op);
	else
		nv_pool_layout_fail(s, op);
}

/* Issue what the op can issue now. Returns with the op waiting for CQEs, parked in the
 * ready list (no free slot), or finished. */
void nv_pump(struct nv *s, struct nv_op *op)
{
	struct nv_io *io;
	struct io_uring_sqe *sqe;
	for (;;) {
		switch (op->stage) {
		case ST_WAIT:
		case ST_DONE:
			return;
		case ST_W_OPEN: {
			if (!(io = nv_io_start(s, op, IO_OPEN, &sqe)))
				goto blocked;
			/* A recycled file (an evicted object's, a slot, a spare) was put in
			 * place from outside if it is a link or a FIFO now: not followed, not
			 * waited on (O_NONBLOCK; write_open_ok checks and clears it) */
			int fl = O_WRONLY | O_CLOEXEC | O_NOFOLLOW;
			fl |= op->recycled ? O_NONBLOCK : O_CREAT | O_EXCL;
			/* A layout writes through the page cache (then fdatasync, as fio lays
			 * out its files): on the virtual disks measured, blocks first written
			 * with O_DIRECT overwrite at 0.5-0.6x the speed of blocks first written
			 * back from the page cache, for good (docs/BENCHMARKS.md, "How a slot
			 * is first written"). The object writes that later overwrite the slot
			 * stay O_DIRECT. */
			if (s->dirs[op->dir].direct && op->type != OP_LAYOUT)
				fl |= O_DIRECT;
			io_uring_prep_openat(sqe, s->dirs[op->dir].fd, op->name, fl, s->file_mode);
			op->stage = ST_WAIT;
			return;
		}
		case ST_W_ALLOC:
			if (!(io = nv_io_start(s, op, IO_ALLOC, &sqe)))
				goto blocked;
			io_uring_prep_fallocate(sqe, op->fd, 0, 0, (off_t)op->len);
			op->stage = ST_WAIT;
			return;
		case ST_W_DATA:
			if (op->type == OP_LAYOUT && !op->err &&
			    (s->cancelled || (op->log_layout && nv_log_layout_aborted(s))))
				op->err = -ECANCELED; /* close (or a turn's room): stop laying out */
			while (!op->err && op->cursor < op->len) {
				if (op->type == OP_LAYOUT && op->pending >= NV_LAYOUT_DEPTH)
					return; /* a background layout leaves room to others */
				if (!(io = nv_io_start(s, op, IO_WRITE, &sqe)))
					goto blocked;
				io->off = op->cursor;
				io->len = (uint32_t)KVT_MIN(op->len - op->cursor, NV_IO_MAX);
				/* a piece takes a small remainder along: one write, and for a
				 * layout one allocation, so the slot is usually one extent and a
				 * read of it one device request (s->zero holds NV_ZERO_BYTES) */
				if (op->len - op->cursor - io->len <= NV_IO_CARRY)
					io->len = (uint32_t)(op->len - op->cursor);
				/* a whole object in one I/O: durable by RWF_DSYNC, no fsync */
				op->dsync = op->type == OP_WRITE && s->fsync_mode != NV_FSYNC_NONE &&
					    !op->cursor && io->len == op->len;
				/* a layout writes zeros: the slot's content is never read */
				io->buf = op->type == OP_LAYOUT ? s->zero
								: (uint8_t *)op->obj + op->cursor;
				op->cursor += io->len;
				if (op->tail)
					prep_split_write(op, io, sqe);
				else
					io_uring_prep_write(sqe, op->fd, io->buf, io->len, io->off);
				if (op->dsync)
					sqe->rw_flags = RWF_DSYNC;
			}
			if (op->pending)
				return; /* CQEs call nv_pump again */
			if (op->err)
				op->stage = ST_W_FAIL;
			else
				op->stage = (s->fsync_mode == NV_FSYNC_NONE && op->type != OP_LAYOUT) ||
						    op->dsync
						? ST_W_CLOSE
						: ST_W_SYNC;
			break;
		case ST_W_SYNC:
			if (!(io = nv_io_start(s, op, IO_FSYNC, &sqe)))
				goto blocked;
			io_uring_prep_fsync(sqe, op->fd, IORING_FSYNC_DATASYNC);
			op->stage = ST_WAIT;
			return;
		case ST_W_DROP:
			/* A laid-out slot's zeros, clean since its fdatasync, leave the page
			 * cache: they are never read, and the first O_DIRECT overwrite would
			 * otherwise have to drop them. Through io_uring (always run by a worker
			 * for DONTNEED): dropping pages can wait on every CPU's page batches,
			 * which the ring thread must not. */
			if (!(io = nv_io_start(s, op, IO_DROP, &sqe)))
				goto blocked;
			io_uring_prep_fadvise(sqe, op->fd, 0, 0, POSIX_FADV_DONTNEED);
			op->stage = ST_WAIT;
			return;
		case ST_W_CLOSE:
			if (!(io = nv_io_start(s, op, IO_CLOSE, &sqe)))
				goto blocked;
			io_uring_prep_close(sqe, op->fd);
			op->fd = -1;
			op->stage = ST_WAIT;
			return;
		case ST_W_PUBLISH:
			if (!(io = nv_io_start(s, op, IO_RENAME, &sqe)))
				goto blocked;
			nv_write_publish_prep(s, op, sqe);
			op->stage = ST_WAIT;
			return;
		case ST_W_DIRSYNC: {
			if (!(io = nv_io_start(s, op, IO_DIRSYNC, &sqe)))
				goto blocked;
			/* the object's leaf, then the one its file was renamed out of (a slot's,
			 * a spare's, an evicted object's: tier_nvme_flush.c) */
			uint32_t leaf = op->syncing_moved ? op->moved_from : op->key.bytes[0];
			op->fd = nv_leaf_open(s, op->dir, leaf);
			int e = op->fd < 0 ? errno : 0;
			/* out of descriptors: shed the idle cached ones and retry, as the temp
			 * and read opens do (nv_on_cqe, IO_OPEN) */
			if ((e == EMFILE || e == ENFILE) && nv_fdc_shed(s)) {
				KVT_WARN(s->log,
					 "nvme: out of file descriptors: closed idle cached ones "
					 "(lower nvme.open_files or raise RLIMIT_NOFILE)");
				op->fd = nv_leaf_open(s, op->dir, leaf);
				e = op->fd < 0 ? errno : 0;
			}
			if (op->fd < 0) {
				op->err = -e;
				io_uring_prep_nop(sqe);
			} else {
				io_uring_prep_fsync(sqe, op->fd, 0);
			}
			op->stage = ST_WAIT;
			return;
		}
		case ST_F_SYNC:
			if (!nv_flush_pump(s, op))
				goto blocked;
			return;
		case ST_W_FAIL:
			if (op->type == OP_LAYOUT) {
				layout_failed(s, op);
				return;
			}
			if (nv_write_fail(s, op)) {
				nv_finish(s, op, op->err);
				return;
			}
			break;
		case ST_R_OPEN: {
			if (!(io = nv_io_start(s, op, IO_OPEN, &sqe)))
				goto blocked;
			/* O_NONBLOCK: an object file swapped for a FIFO since the open's scan
			 * opens at once (read_open_ok turns it away), instead of holding an
			 * io_uring worker, and the read, until a writer opens the FIFO. */
			int fl = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
			if (s->dirs[op->dir].direct)
				fl |= O_DIRECT;
			op->noatime = !s->no_noatime;
			if (op->noatime)
				fl |= O_NOATIME;
			io_uring_prep_openat(sqe, s->dirs[op->dir].fd, op->name, fl, 0);
			op->stage = ST_WAIT;
			return;
		}
		case ST_W_STAGE: {
			int r = nv_log_stage(s, op);
			if (!r)
				return; /* waits in the log's list: nv_log_kick retries it */
			if (r < 0) {
				op->stage = ST_W_OPEN; /* no log segment: a file of its own */
				break;
			}
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
				if (!(io = nv_io_start(s, op, IO_READ, &sqe)))
					goto blocked;
				io->off = g->off + op->soff;
				io->len = (uint32_t)KVT_MIN(end - io->off, NV_IO_MAX);
				/* the same carry as a write's: a 2 MiB chunk and its header block
				 * are one device request, as fio reads the same object */
				if (end - io->off - io->len <= NV_IO_CARRY)
					io->len = (uint32_t)(end - io->off);
				io->buf = (uint8_t *)g->buf + op->soff;
				op->soff += io->len;
				io_uring_prep_read(sqe, read_fd(s, op), io->buf, io->len,
						   op->base + io->off);
			}
			if (op->pending)
				return;
			int current = s->ro && !op->err ? ro_read_current(s, op) : 1;
			if (current < 0)
				op->err = current;
			if (op->fdc)
				nv_fdc_put(s, op->fdc);
			op->fdc = NULL;
			if (!current) {
				/* gone: out of the index too (with its cached fd), or every later
				 * read of the key would read the same file and miss again */
				struct nv_ent *e = nv_ent_find(s, &op->key);
				if (e && e->gen == op->gen)
					nv_ent_remove(s, e);
				nv_finish(s, op, -ENOENT);
			} else if (op->err) {
				ST_ADD(s, errors, 1);
				nv_finish(s, op, op->err);
			} else {
				ST_ADD(s, reads, 1);
				ST_ADD(s, read_bytes, op->total);
				nv_finish(s, op, (int64_t)op->total); /* may exceed 2 GiB */
			}
			return;
		}
	}
blocked:
	nv_ready_push(s, op);
}

/* A read's file, just opened (ST_R_OPEN, O_NONBLOCK): a regular file gets its O_NONBLOCK
 * cleared (io_uring honours it: a read that would wait fails with -EAGAIN instead). Any
 * other entry (a FIFO, a device put in the object's place from outside after the open's
 * scan, which lists such entries for `kvtier verify`) is closed and not read: false, a
 * miss, with a warning, and the key leaves the index (its entry is left on disk). */
static bool read_open_ok(struct nv *s, struct nv_op *op, struct nv_ent *e, int fd)
{
	struct stat st;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		/* (F_SETFL sets O_NOATIME too: kept) */
		fcntl(fd, F_SETFL,
		      (s->dirs[op->dir].direct ? O_DIRECT : 0) | (op->noatime ? O_NOATIME : 0));
		return true;
	}
	close(fd);
	ST_ADD(s, errors, 1);
	KVT_WARN(s->log, "nvme: %s/%s: not a regular file (replaced from outside?): not read",
		 s->dirs[op->dir].path, op->name);
	if (!e->fdc)
		nv_ent_remove(s, e);
	return false;
}

/* A recycled file just opened for a write (ST_W_OPEN, O_NOFOLLOW | O_NONBLOCK): a regular
 * file gets its O_NONBLOCK cleared, as a read's does. Anything else (a FIFO or a device
 * swapped in from outside; a symbolic link already failed the open with ELOOP) is closed
 * and not written: false, with a warning, and the write fails. */
static bool write_open_ok(struct nv *s, struct nv_op *op, int fd)
{
	struct stat st;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		fcntl(fd, F_SETFL, s->dirs[op->dir].direct ? O_DIRECT : 0);
		return true;
	}
	close(fd);
	KVT_WARN(s->log, "nvme: %s/%s: a reused file is not a regular file (replaced from "
			 "outside?): not written",
		 s->dirs[op->dir].path, op->name);
	return false;
}

void nv_on_cqe(struct nv *s, struct nv_io *io, int res)
{
	struct nv_op *op = io->op;
	op->pending--;
	switch (io->kind) {
	case IO_OPEN: {
		nv_io_put(s, io);
		struct nv_ent *re = NULL;
		if (op->type == OP_READ && (re = nv_ent_find(s, &op->key)) && re->gen == op->gen)
			re->opening--;
		else
			re = NULL;
		if (res == -EPERM && op->type == OP_READ && op->noatime) {
			/* O_NOATIME on a file of another owner: every read open goes without */
			s->no_noatime = true;
			if (!re) {
				nv_finish(s, op, -ENOENT); /* removed meanwhile */
				return;
			}
			re->opening++;
			op->stage = ST_R_OPEN;
			break;
		}
		if ((res == -EMFILE || res == -ENFILE) && !op->reopened && nv_fdc_shed(s)) {
			KVT_WARN(s->log, "nvme: out of file descriptors: closed idle cached ones "
					 "(lower nvme.open_files or raise RLIMIT_NOFILE)");
			op->reopened = true;
			if (op->type == OP_WRITE || op->type == OP_LAYOUT) {
				op->stage = ST_W_OPEN;
			} else if (!re) {
				nv_finish(s, op, -ENOENT); /* removed meanwhile */
				return;
			} else {
				re->opening++;
				op->stage = ST_R_OPEN;
			}
			break;
		}
		if (op->type == OP_WRITE || op->type == OP_LAYOUT) {
			if (res >= 0 && op->recycled && !write_open_ok(s, op, res))
				res = -EINVAL;
			if (res < 0) {
				op->err = res;
				op->stage = ST_W_FAIL;
			} else {
				op->fd = res;
				/* A new file of more than two pieces is given its size first:
				 * pieces past the end of the file would each extend it, which
				 * ext4 does only under the inode's exclusive lock, so io_uring
				 * punts every one to a worker and they run one after another. Not a
				 * layout's: its writes go through the page cache (the inode lock
				 * either way), and its blocks are allocated at its fdatasync, in one
				 * piece, as fio's files are (tools/bench_ref.c). */
				op->stage = !op->recycled && op->type != OP_LAYOUT &&
							    op->len > 2ull * NV_IO_MAX
						? ST_W_ALLOC
						: ST_W_DATA;
			}
		} else if (res < 0) {
			if (res == -ENOENT) {
				/* The file vanished behind our back: forget it (unless the entry
				 * is a newer one, published while this open was in flight). */
				struct nv_ent *e = nv_ent_find(s, &op->key);
				if (e && e->gen == op->gen && !e->fdc)
					nv_ent_remove(s, e);
			} else {
				ST_ADD(s, errors, 1);
				KVT_WARN(s->log, "nvme: open %s/%s: %s", s->dirs[op->dir].path,
					 op->name, strerror(-res));
			}
			nv_finish(s, op, res);
			return;
		} else if (!re) {
			/* The copy this read started on was removed or replaced while its open
			 * waited: the fd may be a newer copy's file, which nothing kept from
			 * being recycled meanwhile (its opening count was 0). Not cached, not
			 * read: a miss, as a removal during the read is. */
			close(res);
			nv_finish(s, op, -ENOENT);
			return;
		} else if (!read_open_ok(s, op, re, res)) {
			nv_finish(s, op, -ENOENT);
			return;
		} else if (!(op->fdc = nv_fdc_adopt(s, op, res))) {
			nv_finish(s, op, -ENOMEM);
			return;
		} else {
			op->stage = ST_R_DATA;
		}
		break;
	}
	case IO_WRITE:
	case IO_READ:
		if (res > 0 && io->kind == IO_WRITE)
			op->wrote += (uint64_t)res;
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
				resubmit(s, op, io);
				return;
			}
		} else if ((uint32_t)res < io->len && !op->err) {
			if (res == 0) {
				op->err = -ENOSPC;
			} else {
				io->off += (uint64_t)res;
				io->buf += res;
				io->len -= (uint32_t)res;
				resubmit(s, op, io);
				return;
			}
		}
		nv_io_put(s, io);
		break;
	case IO_ALLOC:
		nv_io_put(s, io);
		if (res < 0 && res != -EOPNOTSUPP) {
			op->err = res;
			op->stage = ST_W_FAIL;
		} else {
			op->stage = ST_W_DATA;
		}
		break;
	case IO_FSYNC:
		nv_io_put(s, io);
		if (res < 0) {
			op->err = res;
			op->stage = ST_W_FAIL;
		} else {
			op->stage = op->type == OP_LAYOUT ? ST_W_DROP : ST_W_CLOSE;
		}
		break;
	case IO_DROP:
		nv_io_put(s, io); /* advice: a slot whose pages stay cached is still a slot */
		op->stage = ST_W_CLOSE;
		break;
	case IO_CLOSE:
		nv_io_put(s, io);
		if (res < 0) {
			op->err = res;
			op->stage = ST_W_FAIL;
			break;
		}
		if (op->type == OP_LAYOUT) {
			if (op->log_layout)
				nv_log_laid(s, op); /* a log segment to be */
			else
				nv_pool_laid(s, op); /* a slot, not an object */
			return;
		}
		op->stage = ST_W_PUBLISH;
		break;
	case IO_RENAME:
		nv_io_put(s, io);
		if (res >= 0 && s->fsync_mode == NV_FSYNC_FULL) {
			op->stage = ST_W_DIRSYNC; /* indexed once its name is durable */
		} else if ((res = nv_write_published(s, op, res)) < 0) {
			op->err = res;
			op->stage = ST_W_FAIL;
		} else {
			nv_finish(s, op, 0);
			return;
		}
		break;
	case IO_DIRSYNC:
		/* nvme.fsync=full: the object is renamed onto its name but not indexed yet, so
		 * nothing sees it - no get, exists, eviction or re-put (a re-put of the key
		 * follows this write, the leader, and gets its result). It is indexed only
		 * once the directory fsync succeeded. If that fails the put fails and its
		 * file goes: the name's durability promised by fsync=full is not there, and
		 * an object left indexed would be found by a re-put's fast path (a stored key
		 * completes at once) and answered durable without ever being fsynced. Why
		 * not keep it indexed and marked "dirsync owed" instead: every path that
		 * answers for a stored key (re-put, flush) would have to redo the fsync, and
		 * one that failed leaves a put both failed and stored. The removal (not
		 * fsynced either) cannot tear anything: the file's data was made durable
		 * before its rename, so a crash that brings the name back brings back a
		 * whole object, which the next open indexes as any other. */
		nv_io_put(s, io);
		if (op->fd >= 0)
			close(op->fd);
		op->fd = -1;
		if (res < 0 && !op->err)
			op->err = res;
		if (!op->err && op->moved && !op->syncing_moved &&
		    op->moved_from != op->key.bytes[0]) {
			op->syncing_moved = true; /* the old name's removal is durable too */
			op->stage = ST_W_DIRSYNC;
			break;
		}
		if (!op->err) {
			if ((op->err = nv_write_published(s, op, 0)) == 0) {
				nv_finish(s, op, 0);
				return;
			}
			/* not indexed: nv_write_published removed the file */
		} else {
			KVT_WARN(s->log, "nvme: directory fsync in %s: %s: the write fails",
				 s->dirs[op->dir].path, strerror(-op->err));
			if (unlinkat(s->dirs[op->dir].fd, op->final, 0) < 0 && errno != ENOENT)
				KVT_WARN(s->log, "nvme: cannot remove %s/%s: %s",
					 s->dirs[op->dir].path, op->final, strerror(errno));
		}
		op->stage = ST_W_FAIL; /* releases its room and budget, counts the error */
		break;
	case IO_FLUSHSYNC:
		nv_flush_on_cqe(s, io, res);
		return;
	case IO_WAKE:
	case IO_LOG: /* handled by nv_log_on_cqe */
		break;
	}
	nv_pump(s, op);
}

static void start_read(struct nv *s, struct nv_op *op)
{
	struct nv_ent *e = nv_ent_find(s, &op->key);
	if (!e) {
		nv_finish(s, op, -ENOENT);
		return;
	}
	nv_lru_touch(s, e);
	nv_served_note(s, e); /* the copy a corruption report about this read can name */
	op->size = e->bytes;
	op->dir = e->dir;
	op->gen = e->gen;
	if (e->lseg) {
		/* In a log segment: the segment's fd, no open; the segment is not reused while
		 * this read is in flight (nv_finish drops the reference). */
		op->lseg = e->lseg;
		op->base = e->loff;
		e->hot = true; /* kept when its segment is reused (tier_nvme_log_reinsert.c) */
		nv_log_read_ref(s, op->lseg, +1);
		op->stage = ST_R_DATA;
	} else if (e->fdc) {
		nv_fdc_use(s, e->fdc);
		op->fdc = e->fdc;
		op->stage = ST_R_DATA;
	} else {
		nv_object_path(&op->key, op->name);
		op->stage = ST_R_OPEN;
		e->opening++;
	}
	nv_pump(s, op);
}

void nv_start_op(struct nv *s, struct nv_op *op)
{
	s->active++;
	struct nv_ent *e;
	switch (op->type) {
	case OP_WRITE:
		nv_start_write(s, op);
		break;
	case OP_READ:
		start_read(s, op);
		break;
	case OP_EXISTS:
		for (uint32_t i = 0; i < op->n; i++)
			op->present[i] =
			    (e = nv_ent_find(s, &op->keys[i])) && e->bytes >= KVT_HEADER_BYTES;
		nv_finish(s, op, 0);
		break;
	case OP_REMOVE: {
		int rc = -ENOENT;
		if ((e = nv_ent_find(s, &op->key))) {
			/* a log object's removal survives a restart: nv_ent_unlink queues its
			 * tombstone. A file whose name could not be taken away (rename and unlink
			 * failed: EROFS, EIO) fails the remove: the key is not served from here
			 * any more, but the next open indexes it again. */
			rc = 0;
			uint32_t dir = e->dir;
			bool file = !e->lseg;
			if (!nv_pool_keep(s, e) && !nv_spare_keep(s, e))
				rc = nv_ent_unlink(s, e, false);
			if (rc == 0)
				ST_ADD(s, removes, 1);
			if (rc == 0 && file)
				nv_dirty(s, dir, &op->key); /* its name's removal: synced by a flush */
		}
		/* A write of the key in flight holding the copy the open found, set aside (out
		 * of the index): that copy is removed too - it is unlinked when the write ends,
		 * whatever its outcome. Until 2026-12-07 a write failing after this remove put it
		 * back (a refusal, or a close cancelling it), and the key removed came back (a
		 * review; nvme_reput_refused 5). */
		struct nv_op *w = *nv_leader_slot(s, &op->key);
		if (w && w->aside && !w->aside_removed) {
			w->aside_removed = true;
			if (rc == -ENOENT) {
				rc = 0;
				ST_ADD(s, removes, 1);
			}
		}
		/* Unless the log's writes stopped and it owes a tombstone - maybe of this key,
		 * even one not indexed now (evicted or dropped from the log while it was
		 * stopped): then the log is voided on disk first, or the remove fails (not
		 * durable; the key is not served either way). */
		int lrc = nv_log_settle(s);
		nv_finish(s, op, lrc < 0 ? lrc : rc);
		break;
	}
	case OP_DROP:
		/* Only the copy that the reads of K since its last report all served: one no
		 * read has started on, or one of several copies reads served, may not be the
		 * one found corrupt (K was removed and written again since that read, whose
		 * report came late). It stays (nv_served_take). */
		e = nv_ent_find(s, &op->key);
		if (nv_served_take(s, &op->key, e)) {
			KVT_WARN(s->log, "nvme: dropping corrupt object in %s%s",
				 s->dirs[e->dir].path, e->lseg ? " (log)" : "");
			nv_ent_unlink(s, e, false); /* with a tombstone if in the log */
		}
		nv_finish(s, op, 0);
		break;
	case OP_LAYOUT: /* started by nv_pool_kick or nv_log_layout_kick, never queued */
		nv_finish(s, op, -EINVAL);
		break;
	case OP_FLUSH:
		op->tomb_mark = nv_log_flush_mark(s);
		if (!nv_flush_waits(s, op)) {
			nv_flush_ready(s, op); /* no write before it is out: its syncs */
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
void nv_cancel_unissued(struct nv *s)
{
	struct nv_op *op = s->ready_head, *nx;
	for (; op; op = nx) {
		nx = op->next;
		if (op->issued || op->pending || op->type == OP_FLUSH)
			continue; /* a flush syncing only waits for I/O slots: it finishes */
		if (op->type == OP_LAYOUT) {
			op->err = -ECANCELED; /* nothing issued: no file to remove */
			layout_failed(s, op);
			continue;
		}
		if (op->type == OP_WRITE) {
			nv_write_release(s, op);
			nv_budget_refund(s, op->len, op->budget_hour);
			if (op->recycled && !nv_pool_untake(s, op))
				nv_unlink_async(s, &s->dirs[op->dir], op->name);
		}
		if (op->fdc) {
			nv_fdc_put(s, op->fdc);
			op->fdc = NULL;
		}
		if (op->type == OP_READ && op->stage == ST_R_OPEN) {
			struct nv_ent *e = nv_ent_find(s, &op->key);
			if (e && e->gen == op->gen)
				e->opening--;
		}
		nv_finish(s, op, -ECANCELED);
	}
}
