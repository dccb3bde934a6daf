/*
 * nvme_log_newest.c - the newest log segment deleted from outside: no older copy of what it
 * held comes back. The open-time scan judges a missing segment by the numbers of the files
 * left: one missing below a file that exists is a gap (the whole log voided,
 * nvme_log_gap.c), but the newest segment is usually the highest-numbered file (a log not
 * yet wrapped, or one whose lap ends at the last segment), and without it the files left
 * look like a whole log that ends one segment earlier. Until 2026-12-03 that log was
 * indexed: a key replaced in the deleted segment came back with its first bytes, a key
 * removed there came back, after an acknowledged replacement and removal, and nothing was
 * logged. Now log/head names the segment appended to (written when a segment is started,
 * before anything in it is acknowledged): the open that finds it missing indexes nothing of
 * the log, with one log line (a read-only open changes nothing on disk), and the run goes
 * on. Parts: (1) a log not yet wrapped, 2.kvl the newest; (2) a wrapped log whose second
 * lap ends in 4.kvl, the last; (3) log/head deleted too (segment headers say a head
 * exists: the open cannot tell what is newest, and voids); (4) log/head alone deleted;
 * (5) a log written before log/head existed (headers of version 0, no head) is indexed
 * whole, and the open gives it a head: its newest segment deleted afterwards is caught.
 */
#include "nvme_util.h"

#include "lib/nvme_stale.h"
#include "tier_nvme_log.h"

/* Segment n's generation, from its header. */
static uint64_t seg_gen(const char *dir, int n)
{
	char name[32], p[400];
	snprintf(name, sizeof(name), "%d.kvl", n);
	st_path(p, sizeof(p), dir, name);
	int fd = open(p, O_RDONLY);
	CHECK(fd >= 0);
	struct nv_log_seghdr h;
	CHECK_EQ(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	return h.gen;
}

/* Segment n's header rewritten as a binary from before log/head wrote it: version 0. (The
 * field, NV_LOG_SEG_VER = 2 now, follows the generation; reached by offset, so that this
 * program also builds against the code before it, to show parts 1 and 2 fail there.) */
static void header_v0(const char *dir, int n)
{
	char name[32], p[400];
	snprintf(name, sizeof(name), "%d.kvl", n);
	st_path(p, sizeof(p), dir, name);
	int fd = open(p, O_RDWR);
	CHECK(fd >= 0);
	uint8_t blk[NV_LOG_BLOCK];
	CHECK_EQ(pread(fd, blk, sizeof(blk), 0), (ssize_t)sizeof(blk));
	struct nv_log_seghdr *h = (struct nv_log_seghdr *)blk;
	uint32_t ver, zero = 0;
	size_t at = offsetof(struct nv_log_seghdr, gen) + sizeof(h->gen);
	memcpy(&ver, blk + at, sizeof(ver));
	CHECK_EQ(ver, 2);
	memcpy(blk + at, &zero, sizeof(zero));
	h->crc = nv_log_crc(blk);
	CHECK_EQ(pwrite(fd, blk, sizeof(blk), 0), (ssize_t)sizeof(blk));
	close(fd);
}

/* Key ov replaced and key rm removed in the newest segment, then that segment
 * deleted: neither key is served as before (a read-only open first). */
static void check_open(const char *dir, uint64_t seed, uint64_t ov, uint64_t rm,
		       const char *part, const char *line)
{
	struct kvt_tier *t;
	uint64_t before = st_log_sum(dir);
	log_clear();
	CHECK_EQ(st_open(&t, dir, "80MiB", 1), 0);
	int so = st_state(t, seed, ov), sr = st_state(t, seed, rm);
	kvt__tier_close(t);
	printf("nvme_log_newest: %s, read-only open: key replaced there %s, key removed there "
	       "%s\n",
	       part, st_name(so), st_name(sr));
	CHECKM(so != ST_V1 && so != ST_OTHER, "replaced key served %s", st_name(so));
	CHECKM(sr == ST_ABSENT, "removed key served %s", st_name(sr));
	CHECK_EQ(st_log_sum(dir), before); /* inspection changes nothing */
	CHECK_EQ(log_count(line), 1);
	log_clear();
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	so = st_state(t, seed, ov);
	sr = st_state(t, seed, rm);
	printf("nvme_log_newest: %s, open: key replaced there %s, key removed there %s\n",
	       part, st_name(so), st_name(sr));
	CHECKM(so != ST_V1 && so != ST_OTHER, "replaced key served %s", st_name(so));
	CHECKM(sr == ST_ABSENT, "removed key served %s", st_name(sr));
	CHECK_EQ(log_count(line), 1);
	/* The run goes on: what it writes survives the next open, which finds nothing amiss. */
	st_write(t, seed + 100, 0, 300);
	kvt__tier_close(t);
	log_clear();
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	for (uint64_t i = 0; i < 300; i++)
		CHECK_EQ(st_state(t, seed + 100, i), ST_V1);
	CHECK_EQ(st_state(t, seed, rm), ST_ABSENT);
	so = st_state(t, seed, ov);
	CHECK(so != ST_V1 && so != ST_OTHER);
	CHECK_EQ(log_count("is missing"), 0);
	kvt__tier_close(t);
}

static void unlink_log(const char *dir, const char *name)
{
	char p[400];
	st_path(p, sizeof(p), dir, name);
	CHECK_EQ(unlink(p), 0);
}

int main(void)
{
	char root[] = "/tmp/kvt-nvme-log-newest-XXXXXX";
	CHECK(mkdtemp(root));
	char dir[300];
	struct kvt_tier *t;

	/* (1) Keys 0 .. 499: 0.kvl, 1.kvl and 2.kvl (480 .. 499). Key 10 (in 0.kvl) replaced
	 * and key 20 (in 0.kvl) removed: both in 2.kvl, the newest, which then goes. */
	snprintf(dir, sizeof(dir), "%s/a", root);
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	st_write(t, 1, 0, 500);
	st_overwrite_remove(t, 1, 10, 20);
	CHECK_EQ(st_state(t, 1, 10), ST_V2);
	kvt__tier_close(t);
	CHECK(st_exists(dir, "2.kvl") && !st_exists(dir, "3.kvl"));
	unlink_log(dir, "2.kvl");
	check_open(dir, 1, 10, 20, "2.kvl (newest, not wrapped) deleted", "the newest segment");

	/* (2) Keys 0 .. 2169: 0 .. 4 (0 .. 1199), then 0 .. 3 again (1200 .. 2159) and 4.kvl
	 * (2160 ..). Key 1420 (in 0.kvl, second lap) replaced, key 1430 removed: in 4.kvl. */
	snprintf(dir, sizeof(dir), "%s/b", root);
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	st_write(t, 2, 0, 9 * ST_PER_SEG + 10);
	st_overwrite_remove(t, 2, 1420, 1430);
	CHECK_EQ(st_state(t, 2, 1420), ST_V2);
	kvt__tier_close(t);
	CHECK(seg_gen(dir, 0) == 2 && seg_gen(dir, 4) == 2); /* 4.kvl: the second lap's end */
	unlink_log(dir, "4.kvl");
	check_open(dir, 2, 1420, 1430, "4.kvl (newest, wrapped, the last) deleted",
		   "the newest segment");

	/* (3) As (1), log/head deleted with the newest segment. */
	snprintf(dir, sizeof(dir), "%s/c", root);
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	st_write(t, 3, 0, 500);
	st_overwrite_remove(t, 3, 10, 20);
	kvt__tier_close(t);
	unlink_log(dir, "2.kvl");
	unlink_log(dir, "head");
	check_open(dir, 3, 10, 20, "2.kvl and log/head deleted", "log/head is missing");

	/* (4) log/head alone deleted: the newest segment cannot be checked, so nothing is
	 * indexed (all is there, but nothing says so). */
	snprintf(dir, sizeof(dir), "%s/d", root);
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	st_write(t, 4, 0, 500);
	st_overwrite_remove(t, 4, 10, 20);
	kvt__tier_close(t);
	unlink_log(dir, "head");
	check_open(dir, 4, 10, 20, "log/head deleted", "log/head is missing");

	/* (4b) log/head there but garbage: voided the same, and said to be damaged, not
	 * missing (until 2026-12-06 the line said "missing" of a file that was there) */
	snprintf(dir, sizeof(dir), "%s/d2", root);
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	st_write(t, 14, 0, 500);
	st_overwrite_remove(t, 14, 10, 20);
	kvt__tier_close(t);
	{
		char hp[600];
		uint8_t junk[8192];
		for (size_t i = 0; i < sizeof(junk); i++)
			junk[i] = (uint8_t)(i * 131u + 7u);
		snprintf(hp, sizeof(hp), "%s/log/head", dir);
		int fd = open(hp, O_WRONLY | O_TRUNC);
		CHECK(fd >= 0);
		CHECK(write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
		close(fd);
	}
	check_open(dir, 14, 10, 20, "log/head garbage", "log/head is damaged (it does not check)");

	/* (5) As (1), with version-0 headers and no log/head: indexed whole, given a head. */
	snprintf(dir, sizeof(dir), "%s/e", root);
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	st_write(t, 5, 0, 500);
	st_overwrite_remove(t, 5, 10, 20);
	kvt__tier_close(t);
	for (int i = 0; i < 3; i++)
		header_v0(dir, i);
	unlink_log(dir, "head");
	log_clear();
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	CHECK_EQ(st_state(t, 5, 10), ST_V2);
	CHECK_EQ(st_state(t, 5, 20), ST_ABSENT);
	CHECK_EQ(st_state(t, 5, 100), ST_V1);
	CHECK_EQ(st_state(t, 5, 499), ST_V1);
	CHECK_EQ(log_count("is missing"), 0);
	kvt__tier_close(t);
	CHECK(st_exists(dir, "head"));
	unlink_log(dir, "2.kvl");
	check_open(dir, 5, 10, 20, "2.kvl deleted after the open that gave the log a head",
		   "the newest segment");

	rm_rf(root);
	printf("nvme_log_newest: ok\n");
	return 0;
}
