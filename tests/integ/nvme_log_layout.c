/*
 * nvme_log_layout.c - the small-object log's segments laid out ahead of the append point
 * (nvme.log_layout, tier_nvme_log_layout.c), on real files in /var/tmp (ext4 here and in
 * CI: FIEMAP tells written blocks from fallocate's unwritten ones). Parts:
 * (1) a fresh store reports the cycle pending before open returns, then lays out every
 *     segment as log/<n>.laid - the segment's size, no hole, no unwritten extent - but the
 *     one its first turn reaches (created then, as before);
 * (2) puts that fill segments take those very files (same inode) as <n>.kvl, and every
 *     object reads back after a reopen, which finds nothing left to lay out;
 * (3) a read-only open (the tier, and `kvtier ls` / `stat`) changes nothing in the log
 *     directory; the next open removes a layout a crash cut short (a temp file), a laid-out
 *     file whose segment exists, one outside the cycle and one of the wrong size, keeps a
 *     good one, and lays out again what it removed;
 * (4) a layout killed with SIGKILL leaves nothing the next open does not clean up;
 * (5) nvme.log_layout=false lays out nothing, and the log works as before.
 */
#include <signal.h>
#include <sys/wait.h>

#include "nvme_pool_util.h"

#define OBJ (64u << 10)
#define SEG (16u << 20)
#define NSEG 6 /* nvme.bytes 96 MiB: 4 segments live with no spare */

static int open_log(struct kvt_tier **t, const char *dir, const char *layout, const char *ro)
{
	return open_tier(t, "nvme.dirs", dir, "nvme.bytes", "96MiB", "nvme.log_max", "256KiB",
			 "nvme.segment_bytes", "16MiB", "nvme.log_spare_pct", "0",
			 "nvme.log_layout", layout,
			 "store.read_only", ro, NULL);
}

static void log_file(const char *dir, uint32_t n, const char *suffix, char *out, size_t len)
{
	snprintf(out, len, "%s/log/%u%s", dir, n, suffix);
}

/* inode of dir/log/<n><suffix>, 0 if absent; fails the test on a wrong size */
static ino_t seg_ino(const char *dir, uint32_t n, const char *suffix)
{
	char p[4096];
	struct stat st;
	log_file(dir, n, suffix, p, sizeof(p));
	if (stat(p, &st) < 0)
		return 0;
	CHECKM(st.st_size == SEG, "%s has %lld bytes", p, (long long)st.st_size);
	return st.st_ino;
}

/* Bytes of dir/log/<n>.laid not written on disk (holes, unwritten extents). */
static long laid_unwritten(const char *dir, uint32_t n)
{
	char p[4096];
	log_file(dir, n, ".laid", p, sizeof(p));
	int fd = open(p, O_RDONLY);
	CHECK(fd >= 0);
	long u = not_written(fd, SEG);
	close(fd);
	return u;
}

/* Every name in dir/log with its size and inode: what an inspection must leave as it is. */
static void log_snapshot(const char *dir, char *out, size_t len)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/log", dir);
	DIR *d = opendir(p);
	CHECK(d != NULL);
	size_t at = 0;
	out[0] = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		char f[8192];
		struct stat st;
		snprintf(f, sizeof(f), "%s/%s", p, de->d_name);
		CHECK_EQ(lstat(f, &st), 0);
		int n = snprintf(out + at, len - at, "%s %lld %llu\n", de->d_name,
				 (long long)st.st_size, (unsigned long long)st.st_ino);
		CHECK(n > 0 && at + (size_t)n < len);
		at += (size_t)n;
	}
	closedir(d);
}

static int temps(const char *dir)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/log", dir);
	return count_files(p, ".tmp.layout.", "");
}

static void put_range(struct kvt_tier *t, uint8_t *buf, uint64_t seed, int from, int to)
{
	for (int i = from; i < to; i++) {
		struct kvt_key k = make_key(seed, (uint64_t)i);
		fill_object(buf, OBJ, &k);
		CHECK_EQ(t_write(t, &k, buf, OBJ), 0);
	}
}

static void check_range(struct kvt_tier *t, uint8_t *buf, uint64_t seed, int from, int to)
{
	for (int i = from; i < to; i++) {
		struct kvt_key k = make_key(seed, (uint64_t)i);
		CHECKM(t_read1(t, &k, buf, 0, OBJ) == (int)OBJ, "object %d not served", i);
		CHECKM(check_object(buf, OBJ, &k) == 0, "object %d corrupt", i);
	}
}

static void write_file(const char *p, uint64_t bytes)
{
	int fd = open(p, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(ftruncate(fd, (off_t)bytes), 0);
	close(fd);
}

int main(void)
{
	char root[] = "/var/tmp/kvt-nvme-log-layout-XXXXXX";
	CHECK(mkdtemp(root));
	char dir[300], dir2[300], dir3[300], p[4096];
	snprintf(dir, sizeof(dir), "%s/d", root);
	snprintf(dir2, sizeof(dir2), "%s/e", root);
	snprintf(dir3, sizeof(dir3), "%s/f", root);
	uint8_t *buf = abuf(OBJ);
	struct kvt_tier *t;

	/* (1) the whole cycle pending at once, then laid out, each file written in full */
	CHECK_EQ(open_log(&t, dir, "true", "false"), 0);
	/* more than one segment pending: the whole cycle counted at once, not one segment at a
	 * time (the ring thread may have begun by the time the open returns: 4.5 of 5 segments
	 * were left once, in a CI run) */
	uint64_t pending = tier_stats(t).pool_pending_bytes;
	CHECKM(pending > SEG && pending <= (uint64_t)(NSEG - 1) * SEG, "pending after open: %llu",
	       (unsigned long long)pending);
	pool_wait(t);
	ino_t laid[NSEG] = {0};
	CHECK(!seg_ino(dir, 0, ".laid")); /* the first turn's: created then, not laid out */
	for (uint32_t n = 1; n < NSEG; n++) {
		CHECKM((laid[n] = seg_ino(dir, n, ".laid")) != 0, "segment %u not laid out", n);
		CHECK(!seg_ino(dir, n, ".kvl"));
		long u = laid_unwritten(dir, n);
		CHECKM(u == 0, "segment %u laid out with %ld bytes unwritten", n, u);
	}
	CHECK_EQ(temps(dir), 0);
	printf("nvme_log_layout: %d segments laid out, no block unwritten\n", NSEG - 1);

	/* (2) ~2.3 segments of puts: segment 0 is created, 1 and 2 are the laid-out files,
	 * renamed */
	int nobj = (int)(SEG / OBJ) * 2 + 80;
	put_range(t, buf, 1, 0, nobj);
	CHECK_EQ(t_flush(t), 0);
	CHECK(seg_ino(dir, 0, ".kvl") != 0);
	for (uint32_t n = 1; n < 3; n++) {
		ino_t k = seg_ino(dir, n, ".kvl");
		CHECKM(k == laid[n], "segment %u: inode %llu, laid out as %llu", n,
		       (unsigned long long)k, (unsigned long long)laid[n]);
		CHECK(!seg_ino(dir, n, ".laid"));
	}
	for (uint32_t n = 3; n < NSEG; n++)
		CHECK_EQ(seg_ino(dir, n, ".laid"), laid[n]);
	kvt__tier_close(t);
	CHECK_EQ(open_log(&t, dir, "true", "false"), 0);
	CHECK_EQ(tier_stats(t).pool_pending_bytes, 0); /* 3-5.laid found: nothing to lay out */
	check_range(t, buf, 1, 0, nobj);
	kvt__tier_close(t);
	printf("nvme_log_layout: %d puts took the laid-out files, all read back\n", nobj);

	/* (3) strays: a cut-short layout, a laid-out file of an existing segment, one outside
	 * the cycle, one of the wrong size; 3.laid and 5.laid are good */
	snprintf(p, sizeof(p), "%s/log/.tmp.layout.999.4", dir);
	write_file(p, 4096);
	log_file(dir, 1, ".laid", p, sizeof(p));
	write_file(p, SEG);
	log_file(dir, 77, ".laid", p, sizeof(p));
	write_file(p, SEG);
	log_file(dir, 4, ".laid", p, sizeof(p));
	CHECK_EQ(unlink(p), 0);
	write_file(p, 100);
	static char before[1 << 14], after[1 << 14];
	log_snapshot(dir, before, sizeof(before));
	CHECK_EQ(open_log(&t, dir, "true", "true"), 0);
	usleep(300000); /* a layout, if one started, would have written by now */
	CHECK_EQ(tier_stats(t).pool_pending_bytes, 0);
	check_range(t, buf, 1, 0, 50);
	kvt__tier_close(t);
	char bin[4200], cmd[8800];
	kvtier_bin(bin, sizeof(bin));
	static const char *cmds[] = {"ls", "stat"};
	for (int i = 0; i < 2; i++) {
		snprintf(cmd, sizeof(cmd),
			 "%s %s --dir %s --set nvme.bytes=96MiB --set nvme.log_max=256KiB "
			 "--set nvme.segment_bytes=16MiB >/dev/null 2>&1",
			 bin, cmds[i], dir);
		int rc = system(cmd);
		CHECKM(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "kvtier %s: %d", cmds[i], rc);
	}
	log_snapshot(dir, after, sizeof(after));
	CHECKM(!strcmp(before, after), "a read-only open changed the log directory:\n%s---\n%s",
	       before, after);
	CHECK_EQ(open_log(&t, dir, "true", "false"), 0);
	snprintf(p, sizeof(p), "%s/log/.tmp.layout.999.4", dir);
	CHECK(access(p, F_OK) != 0); /* (segment 4's own layout may be under way) */
	CHECK(!seg_ino(dir, 1, ".laid"));
	log_file(dir, 77, ".laid", p, sizeof(p));
	CHECK(access(p, F_OK) != 0);
	CHECK_EQ(seg_ino(dir, 3, ".laid"), laid[3]);
	CHECK_EQ(seg_ino(dir, 5, ".laid"), laid[5]);
	CHECK(tier_stats(t).pool_pending_bytes <= SEG); /* 4 again (or done already) */
	pool_wait(t);
	CHECK(seg_ino(dir, 4, ".laid") != 0);
	CHECK_EQ(laid_unwritten(dir, 4), 0);
	check_range(t, buf, 1, 0, nobj);
	kvt__tier_close(t);
	printf("nvme_log_layout: inspection changed nothing; the open cleaned up and laid out "
	       "segment 4 again\n");

	/* (4) killed mid-layout: the child lays out a larger cycle until the parent sees a
	 * temp file (or the layout ends) and kills it */
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (!pid) {
		struct kvt_tier *c;
		if (open_tier(&c, "nvme.dirs", dir2, "nvme.bytes", "512MiB", "nvme.log_max",
			      "256KiB", "nvme.segment_bytes", "16MiB", NULL))
			_exit(2);
		pool_wait(c);
		_exit(0);
	}
	for (int i = 0; i < 3000 && !temps(dir2); i++)
		usleep(1000);
	kill(pid, SIGKILL);
	int ws;
	CHECK_EQ(waitpid(pid, &ws, 0), pid);
	int left = temps(dir2);
	CHECKM(WIFSIGNALED(ws) && left > 0, "the child was not killed mid-layout (status %d, %d "
	       "temp files)", ws, left);
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir2, "nvme.bytes", "512MiB", "nvme.log_max", "256KiB",
			   "nvme.segment_bytes", "16MiB", NULL),
		 0);
	pool_wait(t);
	CHECK_EQ(temps(dir2), 0);
	for (uint32_t n = 1; n < 32; n++) {
		CHECKM(seg_ino(dir2, n, ".laid") != 0, "segment %u not laid out after the kill", n);
		CHECK_EQ(laid_unwritten(dir2, n), 0);
	}
	put_range(t, buf, 2, 0, 100);
	check_range(t, buf, 2, 0, 100);
	kvt__tier_close(t);
	printf("nvme_log_layout: killed mid-layout (%d temp file(s) left): the next open removed "
	       "them and laid out the rest\n",
	       left);

	/* (5) off: nothing laid out, segments created at their turn */
	CHECK_EQ(open_log(&t, dir3, "false", "false"), 0);
	CHECK_EQ(tier_stats(t).pool_pending_bytes, 0);
	put_range(t, buf, 3, 0, 300);
	kvt__tier_close(t);
	char ld[512];
	snprintf(ld, sizeof(ld), "%s/log", dir3);
	CHECK_EQ(count_files(ld, "", ".laid"), 0);
	CHECK(seg_ino(dir3, 0, ".kvl") && seg_ino(dir3, 1, ".kvl"));
	CHECK_EQ(open_log(&t, dir3, "false", "false"), 0);
	check_range(t, buf, 3, 0, 300);
	kvt__tier_close(t);
	printf("nvme_log_layout: nvme.log_layout=false lays out nothing\n");

	free(buf);
	rm_rf(root);
	printf("nvme_log_layout: ok\n");
	return 0;
}
