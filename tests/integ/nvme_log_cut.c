/*
 * nvme_log_cut.c - a log segment cut short from outside (truncate) never brings a removed
 * key back, and costs only what it must. A segment's header records the file's size when
 * it was written (the size only grows, at a reuse, before the header): an open that finds
 * the file shorter, with its records running into the cut, knows batches past the cut went
 * with the removals in them. Until 2026-12-06 the walk took the cut for the end of a full
 * segment, silently, and a key removed past it came back from an older segment.
 *  1. The tombstone's batch cut off a middle segment: the log is voided (one line naming
 *     the segment and both sizes), the removed key is not served, `kvtier verify`'s
 *     read-only open reports the same and writes nothing.
 *  2. The oldest segment cut (the next to be reused: its removals undo nothing elsewhere):
 *     only what lay past the cut is lost; the other segments' objects stay, no void.
 *  3. The newest segment cut above what it holds (its walk ends at a block that is no
 *     record, before the cut): nothing lost, no void.
 *  4. A middle segment cut below one block (0 or 4095 bytes: its header gone with the
 *     rest): voided as a cut, the removed key not served, verify's open says so. Until
 *     2026-12-06 (found by review) it passed for a segment that never held a batch.
 *  5. But a 0-byte file after the newest segment (a creation killed before its
 *     fallocate) is what it looks like: nothing lost, no void.
 */
#include "nvme_util.h"
#include "tier_nvme_log.h"

/* store.read_only when ro (kvtier verify's open) */
static int open_log_as(struct kvt_tier **t, const char *dir, bool ro)
{
	return open_tier(t, "nvme.dirs", dir, "nvme.bytes", "80MiB", "nvme.log_max", "256KiB",
			 "nvme.segment_bytes", "16MiB", "nvme.log_spare_pct", "0", "nvme.fsync",
			 "data", "store.read_only", ro ? "on" : "off", NULL);
}

static int open_log(struct kvt_tier **t, const char *dir)
{
	return open_log_as(t, dir, false);
}

static void cut(const char *dir, uint32_t n, uint64_t bytes)
{
	char p[400];
	snprintf(p, sizeof(p), "%s/log/%u.kvl", dir, n);
	CHECK(truncate(p, (off_t)bytes) == 0);
}

static uint64_t file_bytes(const char *dir, uint32_t n)
{
	char p[400];
	struct stat st;
	snprintf(p, sizeof(p), "%s/log/%u.kvl", dir, n);
	CHECK(stat(p, &st) == 0);
	return (uint64_t)st.st_size;
}

/* 0.kvl: K = (1,0); 1.kvl: (2,0), then K's tombstone in a batch of its own; 2.kvl: (3,0).
 * Each open starts a segment of its own. */
static void three_segments(const char *dir)
{
	struct kvt_tier *t;
	CHECK_EQ(open_log(&t, dir), 0);
	nv_test_put(t, 1, 0);
	kvt__tier_close(t);
	CHECK_EQ(open_log(&t, dir), 0);
	nv_test_put(t, 2, 0);
	CHECK_EQ(t_flush(t), 0);
	struct kvt_key k = make_key(1, 0);
	CHECK_EQ(t_remove(t, &k), 0);
	CHECK_EQ(t_flush(t), 0);
	kvt__tier_close(t);
	CHECK_EQ(open_log(&t, dir), 0);
	nv_test_put(t, 3, 0);
	kvt__tier_close(t);
}

static void middle_cut(const char *root)
{
	char dir[300];
	snprintf(dir, sizeof(dir), "%s/middle", root);
	three_segments(dir);
	uint64_t at[8];
	int nr = nv_test_log_records(dir, 1, at, 8);
	CHECK(nr >= 2);
	cut(dir, 1, at[nr - 1]); /* the tombstone's batch goes */
	uint64_t before = file_bytes(dir, 0);

	log_clear();
	struct kvt_tier *t;
	CHECK_EQ(open_log_as(&t, dir, true), 0);
	int ro_back = nv_test_served(t, 1, 0);
	kvt__tier_close(t);
	CHECK_EQ(file_bytes(dir, 0), before);
	int ro_lines = log_count("1.kvl is ");

	log_clear();
	CHECK_EQ(open_log(&t, dir), 0);
	int back = nv_test_served(t, 1, 0);
	int lines = log_count("(cut from outside?): removals past the cut are lost");
	kvt__tier_close(t);
	printf("nvme_log_cut: tombstone cut off a middle segment: removed key served %d (read-only "
	       "%d); void lines %d (read-only %d)\n",
	       back, ro_back, lines, ro_lines);
	CHECKM(!back && !ro_back, "a key removed past the cut came back");
	CHECK_EQ(lines, 1);
	CHECK_EQ(ro_lines, 1);
	/* voided: the next open indexes what it writes, and K stays gone */
	CHECK_EQ(open_log(&t, dir), 0);
	CHECK_EQ(nv_test_served(t, 1, 0), 0);
	nv_test_put(t, 4, 0);
	kvt__tier_close(t);
	log_clear();
	CHECK_EQ(open_log(&t, dir), 0);
	CHECK_EQ(nv_test_served(t, 4, 0), 1);
	CHECK_EQ(nv_test_served(t, 1, 0), 0);
	CHECK_EQ(log_count("nothing of the log is indexed"), 0);
	kvt__tier_close(t);
}

static void oldest_cut(const char *root)
{
	char dir[300];
	snprintf(dir, sizeof(dir), "%s/oldest", root);
	three_segments(dir);
	cut(dir, 0, 2 * NV_LOG_BLOCK); /* K's batch runs past the cut */
	log_clear();
	struct kvt_tier *t;
	CHECK_EQ(open_log(&t, dir), 0);
	int kept = nv_test_served(t, 2, 0) + nv_test_served(t, 3, 0);
	int k = nv_test_served(t, 1, 0);
	int voids = log_count("nothing of the log is indexed");
	kvt__tier_close(t);
	printf("nvme_log_cut: oldest segment cut: %d of 2 other objects kept, K %d, voids %d\n",
	       kept, k, voids);
	CHECKM(kept == 2 && voids == 0, "a cut of the oldest segment voided the log");
	CHECK_EQ(k, 0);
}

static void newest_cut_above(const char *root)
{
	char dir[300];
	snprintf(dir, sizeof(dir), "%s/newest", root);
	three_segments(dir);
	cut(dir, 2, 1 << 20); /* 2.kvl holds one small batch */
	log_clear();
	struct kvt_tier *t;
	CHECK_EQ(open_log(&t, dir), 0);
	int kept = nv_test_served(t, 2, 0) + nv_test_served(t, 3, 0);
	int voids = log_count("nothing of the log is indexed");
	kvt__tier_close(t);
	printf("nvme_log_cut: newest segment cut above its batches: %d of 2 kept, voids %d\n",
	       kept, voids);
	CHECKM(kept == 2 && voids == 0, "a cut above what was written voided the log");
}

static void middle_cut_headless(const char *root, uint64_t bytes)
{
	char dir[300];
	snprintf(dir, sizeof(dir), "%s/headless-%llu", root, (unsigned long long)bytes);
	three_segments(dir);
	cut(dir, 1, bytes); /* 1.kvl, K's tombstone in it, down to less than its header */
	log_clear();
	struct kvt_tier *t;
	CHECK_EQ(open_log_as(&t, dir, true), 0);
	int ro_back = nv_test_served(t, 1, 0);
	kvt__tier_close(t);
	int ro_lines = log_count("too short for its header");
	log_clear();
	CHECK_EQ(open_log(&t, dir), 0);
	int back = nv_test_served(t, 1, 0);
	int lines = log_count("too short for its header (cut from outside?)");
	kvt__tier_close(t);
	printf("nvme_log_cut: a middle segment cut to %llu bytes: removed key served %d "
	       "(read-only %d); void lines %d (read-only %d)\n",
	       (unsigned long long)bytes, back, ro_back, lines, ro_lines);
	CHECKM(!back && !ro_back, "a key removed in the cut segment came back");
	CHECK_EQ(lines, 1);
	CHECK_EQ(ro_lines, 1);
}

static void killed_creation(const char *root)
{
	char dir[300], p[400];
	snprintf(dir, sizeof(dir), "%s/killed", root);
	three_segments(dir);
	snprintf(p, sizeof(p), "%s/log/3.kvl", dir); /* created, killed before its fallocate */
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0);
	close(fd);
	log_clear();
	struct kvt_tier *t;
	CHECK_EQ(open_log(&t, dir), 0);
	int kept = nv_test_served(t, 2, 0) + nv_test_served(t, 3, 0);
	int voids = log_count("nothing of the log is indexed");
	kvt__tier_close(t);
	printf("nvme_log_cut: a 0-byte segment after the newest: %d of 2 kept, voids %d\n", kept,
	       voids);
	CHECKM(kept == 2 && voids == 0, "a killed segment creation voided the log");
}

int main(void)
{
	char root[] = "/var/tmp/kvt-nvme-log-cut-XXXXXX";
	CHECK(mkdtemp(root));
	middle_cut(root);
	oldest_cut(root);
	newest_cut_above(root);
	middle_cut_headless(root, 0);
	middle_cut_headless(root, NV_LOG_BLOCK - 1);
	killed_creation(root);
	rm_rf(root);
	printf("nvme_log_cut: ok\n");
	return 0;
}
