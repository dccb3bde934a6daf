/*
 * tier_nvme_log_layout.c - the small-object log's segments laid out ahead of the append
 * point, in the background, on the log's first lap. Why: a segment created at its turn is
 * fallocate'd, so every first write into it converts an unwritten extent; on the virtual
 * disk measured, 64 KiB log writes into such segments ran at about half the speed of
 * writes into segments laid out through the page cache (docs/BENCHMARKS.md, "64 KiB log
 * writes on this host"). fio lays out its files before it measures for the same reason,
 * and the preallocated slots (tier_nvme_pool.c) do the same for files of one object size:
 * a layout is the same OP_LAYOUT - zeros written through the page cache, fdatasync'ed,
 * then dropped from the cache (tier_nvme_ops.c).
 *
 * On disk: log/.tmp.layout.<pid>.<n> while it is written, then log/<n>.laid. A laid-out
 * file is not a segment: the open-time scan reads only <n>.kvl (tier_nvme_log_recover.c),
 * and the turn that first reaches segment n renames <n>.laid to <n>.kvl (RENAME_NOREPLACE)
 * where it would have created and fallocate'd the file (nv_log_seg_open). The rest of that
 * turn - the directory's fsync, the header, log/head - is unchanged, so the crash-safety
 * argument of docs/NVME_LOG.md is unchanged: before that rename nothing reads the file,
 * and its zeros are never read (the header comes first, and records end at the first block
 * that does not check). A crash leaves temp files, removed at the next open, and .laid
 * files, kept where segment n is still to be created and the file has the segment's size
 * (else removed). A read-only open neither lays out nor removes anything.
 *
 * Background: started only while no operation waits for an I/O slot, one segment at a
 * time, in cycle order from the first segment still to be created, never the one the next
 * turn reaches (created at its turn, as before); stopped for the run by a failure, or by a
 * turn short of room, which first takes back the room of segments laid out later in the
 * cycle, or waits for the layout in flight to go (nv_log_layout_yield, _drop_after), so
 * that the cycle stays segments 0..k as without a layout. What is left is counted
 * in stats.pool_pending_bytes with the slots' (`kvtier bench` waits for 0 before it
 * measures). nvme.log_layout off: segments are created at their turn, as before.
 */
#include "tier_nvme_log.h"

#include <dirent.h>

#define NV_LOG_LAYOUTS 1 /* segments laid out at a time: each is NV_LAYOUT_DEPTH writes deep */
#define LAID_SUFFIX ".laid"
#define LAYOUT_TMP NV_TMP_PREFIX "layout."

static void laid_name(uint32_t n, char *out, size_t len)
{
	snprintf(out, len, "%u" LAID_SUFFIX, n);
}

/* Bytes on disk of segment n's laid-out file (0: none, or not a regular file), at most a
 * segment's: the open's clamp to the free space counts them as the tier's own room
 * (nv_log_disk_bytes), before nv_log_layout_scan decides which stay. */
uint64_t nv_log_laid_disk_bytes(const struct nv *s, uint32_t n)
{
	char name[32];
	struct stat st;
	laid_name(n, name, sizeof(name));
	if (fstatat(s->lg->dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
		return 0;
	return KVT_MIN(s->lg->seg_bytes, (uint64_t)st.st_blocks * 512);
}

/* The segment the next turn reaches (nv_log_advance): never laid out - the turn would find
 * it being laid out and create it anyway - but created at its turn, as before. */
static uint32_t next_turn(const struct nv_log *lg)
{
	return lg->have_cur ? (lg->cur + 1) % lg->nmax : lg->start % lg->nmax;
}

/* Is segment n one the layout still has to do (no file, none laid out, none being)? */
static bool to_lay(const struct nv_log *lg, uint32_t n)
{
	const struct nv_seg *g = &lg->segs[n];
	return g->fd < 0 && !g->laid && !g->laying;
}

void nv_log_layout_want(struct nv *s, bool on)
{
	if (s->lg)
		s->lg->lay_want = on; /* nv_log_layout_scan turns the layout on where it can */
}

void nv_log_layout_scan(struct nv *s)
{
	struct nv_log *lg = s->lg;
	if (!lg || s->ro)
		return;
	int dfd2 = dup(lg->dfd);
	DIR *dir = dfd2 >= 0 ? fdopendir(dfd2) : NULL;
	if (!dir) {
		if (dfd2 >= 0)
			close(dfd2);
		KVT_WARN(s->log, "nvme: log: cannot list for laid-out segments: %s: not laid out",
			 strerror(errno));
		return;
	}
	rewinddir(dir); /* the dup shares its offset with lg->dfd, which the open's scan read */
	bool log_on = lg->log_max && !lg->broken;
	struct dirent *de;
	while ((de = readdir(dir))) {
		const char *nm = de->d_name;
		uint32_t n;
		if (!strncmp(nm, LAYOUT_TMP, strlen(LAYOUT_TMP))) {
			(void)unlinkat(lg->dfd, nm, 0); /* a layout a crash or kill cut short */
			continue;
		}
		if (!nv_log_parse_name(nm, LAID_SUFFIX, &n))
			continue;
		struct stat st;
		bool keep = log_on && n < lg->nmax && lg->segs[n].fd < 0 &&
			    fstatat(lg->dfd, nm, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISREG(st.st_mode) && (uint64_t)st.st_size == lg->seg_bytes;
		if (keep)
			lg->segs[n].laid = true;
		else
			(void)unlinkat(lg->dfd, nm, 0); /* its segment exists, or a stray */
	}
	closedir(dir);
	lg->lay_on = lg->lay_want && log_on;
	lg->lay_left = 0;
	lg->lay_first = next_turn(lg);
	if (lg->lay_on)
		for (uint32_t n = 0; n < lg->nmax; n++)
			lg->lay_left += to_lay(lg, n) && n != next_turn(lg);
}

uint64_t nv_log_layout_pending(const struct nv *s)
{
	const struct nv_log *lg = s->lg;
	if (!lg || !lg->lay_on || lg->lay_done)
		return 0;
	/* The one in flight by what it has still to write - at least 1 until it is named, so
	 * that 0 means done: a waiter (kvtier bench's wait_layout) sees progress within a
	 * segment, not only at its end. */
	uint64_t flight = lg->lay_op ? KVT_MAX(lg->lay_op->len - KVT_MIN(lg->lay_op->wrote,
									 lg->lay_op->len),
					       1)
				     : 0;
	return (uint64_t)lg->lay_left * lg->seg_bytes + flight;
}

static void layout_start(struct nv *s, uint32_t n)
{
	struct nv_log *lg = s->lg;
	struct nv_op *op = kvt__calloc(1, sizeof(*op));
	if (!op) {
		lg->lay_left = 0; /* out of memory: segments are created at their turn */
		lg->lay_next = lg->nmax;
		return;
	}
	op->type = OP_LAYOUT;
	op->log_layout = true;
	op->fd = -1;
	op->len = lg->seg_bytes;
	op->slot = n;
	op->dir = 0; /* the log lives in the first directory */
	snprintf(op->name, sizeof(op->name), NV_LOG_DIR "/" LAYOUT_TMP "%d.%u", (int)s->pid, n);
	lg->segs[n].laying = true;
	if (lg->lay_left) /* (one the scan did not count: a kept file removed for room) */
		lg->lay_left--;
	lg->lay_op = op;
	lg->lay_flight++;
	s->active++; /* close waits for it (or cancels it) */
	op->stage = ST_W_OPEN;
	nv_pump(s, op);
}

void nv_log_layout_kick(struct nv *s)
{
	struct nv_log *lg = s->lg;
	if (!lg || !lg->lay_on || lg->lay_done)
		return;
	if (lg->broken || s->cancelled) {
		lg->lay_left = 0; /* log writes stopped, or closing: nothing more to lay out */
		if (!lg->lay_flight)
			lg->lay_done = true;
		return;
	}
	if (!nv_zero_ready(s)) {
		lg->lay_done = true;
		return;
	}
	/* Never the segment the next turn reaches (next_turn): a segment of zeros written for
	 * nothing, and on a nearly full file system two segments' room taken at once. */
	uint32_t turn = next_turn(lg);
	while (lg->lay_flight < NV_LOG_LAYOUTS && !s->ready_head && s->free_ios) {
		while (lg->lay_next < lg->nmax && !to_lay(lg, lg->lay_next))
			lg->lay_next++;
		if (lg->lay_next < lg->nmax && lg->lay_next == turn) {
			/* passed over: no longer the layout's to do (counted at the scan unless it
			 * was the first turn's) */
			if (lg->lay_left && turn != lg->lay_first)
				lg->lay_left--;
			lg->lay_next++;
			continue;
		}
		if (lg->lay_next >= lg->nmax)
			break;
		layout_start(s, lg->lay_next++);
	}
	if (lg->lay_next >= lg->nmax && !lg->lay_flight) {
		lg->lay_done = true;
		lg->lay_left = 0;
		KVT_INFO(s->log, "nvme: log: background layout ended (%s)",
			 lg->lay_abort ? "stopped for a turn's room" : "every segment it could");
	}
}

static void layout_end(struct nv *s, struct nv_op *op)
{
	struct nv_log *lg = s->lg;
	lg->segs[op->slot].laying = false;
	lg->lay_op = NULL;
	lg->lay_flight--;
	nv_finish(s, op, op->err);
}

/* A turn found no room to create its segment (ENOSPC, EDQUOT): the layout stops for the run
 * (the cycle needs the room more than a faster first lap). true: one is in flight, whose
 * file may hold that room - cancelled at its next write, or removed when it ends - and the
 * turn tries again once it is gone (nv_log_advance: not now). false: none in flight. */
bool nv_log_layout_yield(struct nv *s)
{
	struct nv_log *lg = s->lg;
	lg->lay_left = 0;
	lg->lay_next = lg->nmax;
	if (!lg->lay_flight)
		return false;
	lg->lay_abort = true;
	return true;
}

/* A turn found no room to create segment n (ENOSPC): a segment laid out for later in the
 * cycle may hold it - the layout ran ahead of the turns. The highest-numbered such file is
 * removed (its segment is created at its turn, if there is room then, or the cycle ends
 * before it, as without a layout): true, try again; false: none is left. */
bool nv_log_layout_drop_after(struct nv *s, uint32_t n)
{
	struct nv_log *lg = s->lg;
	for (uint32_t i = lg->nmax; i-- > n + 1;) { /* (none is laid out past nmax) */
		struct nv_seg *g = &lg->segs[i];
		if (!g->laid)
			continue;
		char name[32];
		laid_name(i, name, sizeof(name));
		g->laid = false;
		if (unlinkat(lg->dfd, name, 0) == 0) {
			KVT_INFO(s->log, "nvme: log segment %u: no room to create it: the file laid "
					 "out for segment %u removed for it",
				 n, i);
			return true;
		}
	}
	return false;
}

bool nv_log_layout_aborted(const struct nv *s)
{
	return s->lg && s->lg->lay_abort;
}

/* A segment's zeros are written, fdatasync'ed and its file closed: name it laid out - or
 * remove it, where the turn reached the segment meanwhile and created it, or stopped the
 * layout for room (nv_log_layout_yield). */
void nv_log_laid(struct nv *s, struct nv_op *op)
{
	struct nv_log *lg = s->lg;
	struct nv_seg *g = &lg->segs[op->slot];
	char name[NV_NAME_MAX];
	snprintf(name, sizeof(name), NV_LOG_DIR "/");
	laid_name(op->slot, name + strlen(name), sizeof(name) - strlen(name));
	int dfd = s->dirs[0].fd;
	if (g->fd >= 0 || op->slot >= lg->nmax || lg->broken || lg->lay_abort) {
		/* emptied first: its blocks free at once (see nv_log_layout_fail) */
		int fd = openat(dfd, op->name, O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
		if (fd >= 0)
			close(fd);
		(void)unlinkat(dfd, op->name, 0);
	} else if (renameat(dfd, op->name, dfd, name) < 0) {
		op->err = -errno;
		nv_log_layout_fail(s, op);
		return;
	} else {
		g->laid = true;
	}
	layout_end(s, op);
}

/* A layout failed (ENOSPC, an I/O error) or was cancelled by close: its temp file goes,
 * and laying out stops for the run (segments are then created at their turn). */
void nv_log_layout_fail(struct nv *s, struct nv_op *op)
{
	struct nv_log *lg = s->lg;
	if (op->fd >= 0) {
		/* its blocks freed now, not when io_uring's workers drop their last reference
		 * to the file (asynchronously): a turn may be waiting for the room */
		(void)ftruncate(op->fd, 0);
		close(op->fd);
		op->fd = -1;
	}
	if (op->issued && unlinkat(s->dirs[0].fd, op->name, 0) < 0 && errno != ENOENT)
		KVT_WARN(s->log, "nvme: cannot remove %s/%s: %s", s->dirs[0].path, op->name,
			 strerror(errno));
	if (op->err != -ECANCELED) {
		KVT_WARN(s->log, "nvme: laying out log segment %u failed: %s; the rest are "
				 "created when the log reaches them",
			 op->slot, strerror(-op->err));
		if (op->err != -ENOSPC && op->err != -EDQUOT) /* the cycle's to meet */
			ST_ADD(s, errors, 1);
	}
	lg->lay_done = true;
	lg->lay_left = 0;
	layout_end(s, op);
}

/* The turn creating segment n (nv_log_seg_open): a laid-out file is renamed into its place
 * (true: <n>.kvl exists now, to be opened without O_CREAT; nv_log_layout_untake if that
 * open fails); false: none, or the rename failed (the file is then created as before). A
 * segment still being laid out (the turn caught up with the layout) is created: the
 * layout's file is removed when it ends (nv_log_laid). */
bool nv_log_layout_take(struct nv *s, uint32_t n)
{
	struct nv_log *lg = s->lg;
	struct nv_seg *g = &lg->segs[n];
	if (!g->laid) {
		if (lg->lay_on && !lg->lay_done && !g->laying && n >= lg->lay_next &&
		    n != lg->lay_first && lg->lay_left) {
			lg->lay_left--; /* created at its turn: no longer the layout's to do */
		}
		return false;
	}
	g->laid = false;
	char from[32], to[32];
	laid_name(n, from, sizeof(from));
	nv_log_seg_name(n, to, sizeof(to));
	if (renameat2(lg->dfd, from, lg->dfd, to, RENAME_NOREPLACE) == 0)
		return true;
	KVT_WARN(s->log, "nvme: log segment %u: cannot take its laid-out file (%s): created "
			 "instead",
		 n, strerror(errno));
	(void)unlinkat(lg->dfd, from, 0);
	return false;
}

/* The open of a segment taken from its laid-out file failed: the file goes back to its
 * laid-out name (or, failing that, away), so that no headerless <n>.kvl is left outside the
 * cycle the failed turn shortens. */
void nv_log_layout_untake(struct nv *s, uint32_t n)
{
	struct nv_log *lg = s->lg;
	char from[32], to[32];
	nv_log_seg_name(n, from, sizeof(from));
	laid_name(n, to, sizeof(to));
	if (renameat2(lg->dfd, from, lg->dfd, to, RENAME_NOREPLACE) == 0)
		lg->segs[n].laid = true;
	else
		(void)unlinkat(lg->dfd, from, 0);
}
