/*
 * nvme_log_clamp.c - the open-time capacity clamp counts the log's segment files as the
 * tier's own room, so a reopen with few live objects on a disk sized for the segments keeps
 * the log's live capacity. Why: until 2026-12-06 clamp_capacity counted only the live
 * objects' bytes as ours and the segments (created once, kept, nearly all of nvme.bytes on
 * disk) as space used by others, so such an open cut the capacity to the disk's few free
 * bytes, and every later open again: 31 of 512 puts kept, or every write refused on a
 * slightly smaller disk (found by review).
 *
 * A tmpfs of 100 MiB (and one of 98 MiB), nvme.bytes 96 MiB, 16 MiB segments (6 segments,
 * 32 MiB live at the default spare). Run 1 fills the log past 6 segments, removes every
 * key and closes. Runs 2 and 3 reopen at run 1's capacity and keep nearly all of 512
 * puts of 64 KiB (32 MiB). The same with the log voided (log/head deleted) instead of
 * the removes. And segments with holes, which hold no room (run_sparse).
 */
#include "nvme_util.h"
#include "lib/tmpfs.h"
#include <fcntl.h>
#include <stdbool.h>
#include <sys/statvfs.h>

#define OBJ (64u << 10)

static int open_t(struct kvt_tier **t, const char *dir)
{
	return open_tier(t, "nvme.dirs", dir, "nvme.bytes", "96MiB", "nvme.log_max", "256KiB",
			 "nvme.segment_bytes", "16MiB", NULL);
}

static int present(struct kvt_tier *t, uint64_t seed, int n)
{
	int p = 0;
	for (int i = 0; i < n; i++) {
		struct kvt_key k = make_key(seed, (uint64_t)i);
		uint8_t x = 0;
		CHECK_EQ(t_exists(t, &k, 1, &x), 0);
		p += x;
	}
	return p;
}

static void run(const char *name, const char *size, bool voidmode)
{
	const char *mnt = tmpfs_mount(name, size);
	char dir[400], logdir[420];
	snprintf(dir, sizeof(dir), "%s/d", mnt);
	snprintf(logdir, sizeof(logdir), "%s/log", dir);
	uint8_t *b = abuf(OBJ);
	struct kvt_tier *t;
	struct kvt_tier_stats st;

	CHECK_EQ(open_t(&t, dir), 0);
	memset(&st, 0, sizeof(st));
	t->ops->stats(t, &st);
	uint64_t cap0 = st.capacity_bytes;
	int n1 = 1700; /* 106 MiB: every segment created, the cycle wraps */
	for (int i = 0; i < n1; i++) {
		struct kvt_key k = make_key(1, (uint64_t)i);
		fill_object(b, OBJ, &k);
		CHECK_EQ(t_write(t, &k, b, OBJ), 0);
	}
	int live1 = present(t, 1, n1);
	for (int i = 0; i < n1 && !voidmode; i++) {
		struct kvt_key k = make_key(1, (uint64_t)i);
		int rc = t_remove(t, &k);
		CHECK(rc == 0 || rc == -ENOENT);
	}
	kvt__tier_close(t);
	if (voidmode) { /* no removes: the log voided instead (log/head deleted) */
		char hp[460];
		snprintf(hp, sizeof(hp), "%s/head", logdir);
		CHECK_EQ(unlink(hp), 0);
	}
	int segs = count_files(logdir, "", ".kvl");
	printf("nvme_log_clamp %s%s: run 1: capacity %llu, %d of %d live, %d segments\n", size,
	       voidmode ? " void" : "", (unsigned long long)cap0, live1, n1, segs);

	int bad = 0;
	for (int run = 2; run <= 3; run++) {
		log_clear();
		CHECK_EQ(open_t(&t, dir), 0);
		memset(&st, 0, sizeof(st));
		t->ops->stats(t, &st);
		uint64_t cap = st.capacity_bytes;
		int n = 512; /* 32 MiB */
		int ok = 0;
		for (int i = 0; i < n; i++) {
			struct kvt_key k = make_key(run, (uint64_t)i);
			fill_object(b, OBJ, &k);
			ok += t_write(t, &k, b, OBJ) == 0;
		}
		int p = present(t, run, n);
		printf("nvme_log_clamp %s%s: run %d: capacity %llu at open (%d 'capacity clamped' "
		       "lines), %d of %d writes ok, %d present\n",
		       size, voidmode ? " void" : "", run, (unsigned long long)cap,
		       log_count("capacity clamped"), ok, n, p);
		CHECKM(ok == n && p >= n * 9 / 10, "run %d kept %d of %d puts", run, p, n);
		/* keep nothing for the next run's open, as run 1 did */
		for (int i = 0; i < n; i++) {
			struct kvt_key k = make_key(run, (uint64_t)i);
			int rc = t_remove(t, &k);
			CHECK(rc == 0 || rc == -ENOENT);
		}
		kvt__tier_close(t);
		bad |= cap != cap0;
	}
	CHECKM(!bad, "the capacity at a reopen differs from the first open's");
	free(b);
	tmpfs_cleanup();
	tmpfs_mnt[0] = 0;
}

/* Segments with holes (a copy of the store made with `cp --sparse`): the holes are not room
 * the tier has, so the reopen clamps to what the disk holds. Run 1 fills every segment and
 * removes its keys; then every segment past its first block is punched out and a file of
 * other data takes all but 8 MiB of the freed space. The segments' sizes (96 MiB) counted
 * as ours until 2026-12-06: no clamp, 32 MiB of live capacity on 8 MiB of free disk. */
static void run_sparse(void)
{
	const char *mnt = tmpfs_mount("log-clamp-sparse", "100m");
	char dir[400], logdir[420], other[420];
	snprintf(dir, sizeof(dir), "%s/d", mnt);
	snprintf(logdir, sizeof(logdir), "%s/log", dir);
	snprintf(other, sizeof(other), "%s/other", mnt);
	uint8_t *b = abuf(OBJ);
	struct kvt_tier *t;
	struct kvt_tier_stats st;
	CHECK_EQ(open_t(&t, dir), 0);
	for (int i = 0; i < 1700; i++) {
		struct kvt_key k = make_key(7, (uint64_t)i);
		fill_object(b, OBJ, &k);
		CHECK_EQ(t_write(t, &k, b, OBJ), 0);
	}
	for (int i = 0; i < 1700; i++) {
		struct kvt_key k = make_key(7, (uint64_t)i);
		int rc = t_remove(t, &k);
		CHECK(rc == 0 || rc == -ENOENT);
	}
	kvt__tier_close(t);
	int punched = 0;
	for (int n = 1; n <= 64; n++) {
		char p[460];
		snprintf(p, sizeof(p), "%s/%d.kvl", logdir, n);
		int fd = open(p, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			continue;
		struct stat fs;
		CHECK_EQ(fstat(fd, &fs), 0);
		CHECK_EQ(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096,
				   fs.st_size - 4096),
			 0);
		close(fd);
		punched++;
	}
	CHECK(punched >= 3);
	struct statvfs v;
	CHECK_EQ(statvfs(mnt, &v), 0);
	uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize;
	CHECK(avail > (16u << 20));
	int fd = open(other, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	CHECK(fd >= 0);
	CHECK_EQ(fallocate(fd, 0, 0, (off_t)(avail - (8u << 20))), 0);
	close(fd);
	log_clear();
	CHECK_EQ(open_t(&t, dir), 0);
	memset(&st, 0, sizeof(st));
	t->ops->stats(t, &st);
	printf("nvme_log_clamp sparse: %d segments punched, capacity %llu at the reopen "
	       "(%d 'capacity clamped' lines)\n",
	       punched, (unsigned long long)st.capacity_bytes, log_count("capacity clamped"));
	CHECKM(st.capacity_bytes <= (8u << 20),
	       "capacity %llu on 8 MiB of free disk and segments that hold nothing",
	       (unsigned long long)st.capacity_bytes);
	CHECK(log_count("capacity clamped") >= 1);
	kvt__tier_close(t);
	free(b);
	tmpfs_cleanup();
	tmpfs_mnt[0] = 0;
}

int main(void)
{
	run_sparse();
	run("log-clamp", "100m", false);
	run("log-clamp", "98m", false);
	run("log-clamp", "100m", true);
	printf("nvme_log_clamp: ok\n");
	return 0;
}
