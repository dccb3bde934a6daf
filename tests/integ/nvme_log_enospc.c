/*
 * nvme_log_enospc.c - a log segment that cannot be created during a run (the file system is
 * full: ENOSPC) shrinks the log's cycle, and the live capacity the tier reports
 * (kvt_tier_stats.capacity_bytes) follows it at once. A 56 MiB tmpfs (needs root to mount;
 * exits 77 otherwise) under nvme.bytes of 80 MiB in segments of 16 MiB with no spare: the
 * open computes a cycle of 5 segments and 48 MiB live (clamped to the 3 segments' 16 MiB
 * and the rest of the disk, since 2026-12-06), 0.kvl .. 2.kvl fill the disk and
 * creating 3.kvl fails, so the run cycles over 3 segments, whose live capacity is 16 MiB.
 * Before the fix the tier kept reporting (and admitting) 48 MiB for the rest of the run:
 * reusing a segment evicted objects (region eviction) while the live bytes were far below
 * the capacity it reported. Checked after every write: no eviction while the live bytes
 * plus the new object fit under the reported capacity; the capacity reported after the
 * shrink is that of the 3-segment cycle; and a second run over the same directory, once it
 * meets the same full disk, reports the same capacity and again evicts nothing below it.
 */
#include "nvme_util.h"
#include "lib/tmpfs.h"

#define OBJ (64u << 10)
#define SEG (16ull << 20)

static int open_small(struct kvt_tier **t, const char *dir)
{
	return open_tier(t, "nvme.dirs", dir, "nvme.bytes", "80MiB", "nvme.log_max", "256KiB",
			 "nvme.segment_bytes", "16MiB", "nvme.log_spare_pct", "0", "nvme.fsync",
			 "none", NULL);
}

/* Write n objects of seed one at a time; returns how many evictions happened while the
 * live bytes before the write plus the object fit under the capacity reported after it
 * (the capacity only ever goes down within a run, so that is the tightest it was). */
static int write_run(struct kvt_tier *t, uint64_t seed, int n, uint64_t *cap_out)
{
	uint8_t *b = abuf(OBJ);
	struct kvt_tier_stats st;
	memset(&st, 0, sizeof(st));
	t->ops->stats(t, &st);
	int below = 0;
	for (int i = 0; i < n; i++) {
		struct kvt_key k = make_key(seed, (uint64_t)i);
		fill_object(b, OBJ, &k);
		uint64_t bytes = st.bytes, ev = st.evictions;
		CHECK_EQ(t_write(t, &k, b, OBJ), 0);
		t->ops->stats(t, &st);
		if (st.evictions > ev && bytes + OBJ <= st.capacity_bytes) {
			if (!below)
				printf("nvme_log_enospc: write %d: %llu evicted with %llu live bytes "
				       "under a capacity of %llu\n",
				       i, (unsigned long long)(st.evictions - ev),
				       (unsigned long long)bytes,
				       (unsigned long long)st.capacity_bytes);
			below++;
		}
	}
	*cap_out = st.capacity_bytes;
	free(b);
	return below;
}

int main(void)
{
	const char *mnt = tmpfs_mount("nvme-log-enospc", "56m");
	char dir[400], logdir[420];
	snprintf(dir, sizeof(dir), "%s/d", mnt);
	snprintf(logdir, sizeof(logdir), "%s/log", dir);

	struct kvt_tier *t;
	struct kvt_tier_stats st;
	log_clear();
	CHECK_EQ(open_small(&t, dir), 0);
	memset(&st, 0, sizeof(st));
	t->ops->stats(t, &st);
	/* 5 segments, less two, is 48 MiB live, but the disk holds 3 segments: since 2026-12-06
	 * the open's clamp counts in segments, their 16 MiB live plus the disk left over for
	 * objects in files (before, 48 MiB: the free space was compared with live bytes) */
	printf("nvme_log_enospc: capacity at the first open %llu\n",
	       (unsigned long long)st.capacity_bytes);
	CHECK(st.capacity_bytes >= SEG && st.capacity_bytes < 2 * SEG);
	CHECK_EQ(log_count("capacity clamped"), 1);
	/* 1200 x 64 KiB = 75 MiB: 3 segments fill the disk, 3.kvl fails, then round the 3. */
	uint64_t cap1 = 0;
	int below1 = write_run(t, 1, 1200, &cap1);
	int shrunk = log_count("the log keeps 3 segments");
	int segs = count_files(logdir, "", ".kvl");
	/* The newest objects are all there (the cycle kept going). */
	int newest = 0;
	for (int i = 1100; i < 1200; i++) {
		struct kvt_key k = make_key(1, (uint64_t)i);
		uint8_t p = 0;
		CHECK_EQ(t_exists(t, &k, 1, &p), 0);
		newest += p;
	}
	kvt__tier_close(t);
	printf("nvme_log_enospc: run 1: cycle shrunk %d time(s), %d segment files, capacity "
	       "%llu, %d write(s) evicted below it, %d of the newest 100 present\n",
	       shrunk, segs, (unsigned long long)cap1, below1, newest);
	CHECK_EQ(shrunk, 1);
	CHECK_EQ(segs, 3);
	CHECK_EQ(newest, 100);
	CHECK_EQ(cap1, SEG); /* was 48 MiB: the 5-segment cycle's */
	CHECK_EQ(below1, 0);

	/* A second run over the same directory: the open derives the cycle from nvme.bytes
	 * again (the disk's free space only clamps the capacity), and the run meets the same
	 * full disk at 3.kvl: it ends with the same capacity, evicting nothing below it. */
	log_clear();
	CHECK_EQ(open_small(&t, dir), 0);
	memset(&st, 0, sizeof(st));
	t->ops->stats(t, &st);
	uint64_t cap_open = st.capacity_bytes;
	uint64_t cap2 = 0;
	int below2 = write_run(t, 2, 1200, &cap2);
	shrunk = log_count("the log keeps 3 segments");
	kvt__tier_close(t);
	printf("nvme_log_enospc: run 2: capacity %llu at open, %llu after the cycle shrank "
	       "(%d time(s)), %d write(s) evicted below it\n",
	       (unsigned long long)cap_open, (unsigned long long)cap2, shrunk, below2);
	CHECK_EQ(shrunk, 1);
	CHECK_EQ(cap2, cap1);
	CHECK_EQ(below2, 0);
	printf("nvme_log_enospc: ok\n");
	return 0;
}
