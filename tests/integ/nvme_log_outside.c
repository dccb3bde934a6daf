/*
 * nvme_log_outside.c - log segment files outside the cycle (left by a run with a larger
 * nvme.bytes, or past an entry that cannot be a segment) never let an older copy back. The
 * cycle is 0.kvl up to nvme.bytes' worth of segments, stretched over every file that follows
 * without a missing number: after nvme.bytes shrinks, a log whose files are all there is
 * still one cycle (part 1: everything indexed, removals kept). But with one of those files
 * missing, the files past it fall outside the cycle, and until 2026-12-04 they were only
 * read for their sequence numbers: the segments of the cycle were indexed without their
 * removals and replacements, so a key removed in one of them, or replaced there, came back
 * as its older copy from a segment inside the cycle (part 2: 5.kvl deleted, 6.kvl and 7.kvl
 * outside a 5-segment cycle; part 3: 3.kvl a dangling symlink, 4.kvl outside). With the
 * larger nvme.bytes the same missing file was a gap that voided the log; now files outside
 * the cycle that hold batches void it too, with one log line, and a read-write open
 * removes them (their space comes back); a read-only open changes nothing.
 */
#include "nvme_util.h"

#include "lib/nvme_stale.h"

static int count_segs(const char *dir)
{
	int n = 0;
	char name[32];
	for (int i = 0; i < 16; i++) {
		snprintf(name, sizeof(name), "%d.kvl", i);
		n += st_exists(dir, name);
	}
	return n;
}

int main(void)
{
	char root[] = "/tmp/kvt-nvme-log-outside-XXXXXX";
	CHECK(mkdtemp(root));
	char dir[300], p[400];
	struct kvt_tier *t;

	/* (1) 8 segments (128 MiB), not wrapped: keys 0 .. 1599 in 0 .. 6; key 100 (0.kvl)
	 * replaced and key 110 removed, in 6.kvl. Reopened with 80 MiB (5 segments): the
	 * 7 files are still one cycle, indexed whole. */
	snprintf(dir, sizeof(dir), "%s/a", root);
	CHECK_EQ(st_open(&t, dir, "128MiB", 0), 0);
	st_write(t, 1, 0, 1600);
	st_overwrite_remove(t, 1, 100, 110);
	kvt__tier_close(t);
	CHECK_EQ(count_segs(dir), 7);
	log_clear();
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	int so = st_state(t, 1, 100), sr = st_state(t, 1, 110), newest = st_state(t, 1, 1599);
	kvt__tier_close(t);
	printf("nvme_log_outside: nvme.bytes shrunk, all files there: replaced key %s, removed "
	       "key %s, newest key %s\n",
	       st_name(so), st_name(sr), st_name(newest));
	CHECK(so == ST_V2 || so == ST_ABSENT); /* the capacity (48 MiB) may evict it */
	CHECK_EQ(sr, ST_ABSENT);
	CHECK_EQ(newest, ST_V1);
	CHECK_EQ(log_count("not in the log's cycle"), 0);

	/* (2) 8 segments, a lap and a bit: keys 0 .. 1919 in 0 .. 7, key 1000 (4.kvl)
	 * replaced and key 1010 (4.kvl) removed while 7.kvl was being filled, then keys
	 * 1920 .. 2219 in 0.kvl and 1.kvl (the newest). 5.kvl deleted; reopened with 80 MiB:
	 * 6.kvl and 7.kvl are outside the cycle. */
	snprintf(dir, sizeof(dir), "%s/b", root);
	CHECK_EQ(st_open(&t, dir, "128MiB", 0), 0);
	st_write(t, 2, 0, 1700);
	st_overwrite_remove(t, 2, 1000, 1010);
	st_write(t, 2, 1700, 2220);
	kvt__tier_close(t);
	CHECK_EQ(count_segs(dir), 8);
	st_path(p, sizeof(p), dir, "5.kvl");
	CHECK_EQ(unlink(p), 0);
	uint64_t before = st_log_sum(dir);
	log_clear();
	CHECK_EQ(st_open(&t, dir, "80MiB", 1), 0);
	so = st_state(t, 2, 1000);
	sr = st_state(t, 2, 1010);
	kvt__tier_close(t);
	printf("nvme_log_outside: 5.kvl deleted, 6.kvl and 7.kvl outside the cycle, read-only "
	       "open: replaced key %s, removed key %s\n",
	       st_name(so), st_name(sr));
	CHECKM(so != ST_V1 && so != ST_OTHER, "replaced key served %s", st_name(so));
	CHECKM(sr == ST_ABSENT, "removed key served %s", st_name(sr));
	CHECK_EQ(st_log_sum(dir), before);
	CHECK_EQ(log_count("outside the cycle"), 1);
	log_clear();
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	so = st_state(t, 2, 1000);
	sr = st_state(t, 2, 1010);
	printf("nvme_log_outside: 5.kvl deleted, 6.kvl and 7.kvl outside the cycle, open: "
	       "replaced key %s, removed key %s\n",
	       st_name(so), st_name(sr));
	CHECKM(so != ST_V1 && so != ST_OTHER, "replaced key served %s", st_name(so));
	CHECKM(sr == ST_ABSENT, "removed key served %s", st_name(sr));
	CHECK_EQ(log_count("outside the cycle"), 1);
	CHECK(!st_exists(dir, "6.kvl") && !st_exists(dir, "7.kvl")); /* space back */
	st_write(t, 3, 0, 300);
	kvt__tier_close(t);
	log_clear();
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	for (uint64_t i = 0; i < 300; i++)
		CHECK_EQ(st_state(t, 3, i), ST_V1);
	CHECK_EQ(st_state(t, 2, 1010), ST_ABSENT);
	CHECK_EQ(log_count("outside the cycle"), 0);
	CHECK_EQ(log_count("is missing"), 0);
	kvt__tier_close(t);

	/* (3) 5 segments: keys 0 .. 1099 (0 .. 3, and 4.kvl the newest), key 600 (2.kvl)
	 * replaced and 610 removed, in 4.kvl. 3.kvl replaced by a dangling symlink: the
	 * cycle ends before it, 4.kvl is outside. */
	snprintf(dir, sizeof(dir), "%s/c", root);
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	st_write(t, 4, 0, 1100);
	st_overwrite_remove(t, 4, 600, 610);
	kvt__tier_close(t);
	st_path(p, sizeof(p), dir, "3.kvl");
	CHECK_EQ(unlink(p), 0);
	CHECK_EQ(symlink("/nonexistent/3.kvl", p), 0);
	log_clear();
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	so = st_state(t, 4, 600);
	sr = st_state(t, 4, 610);
	kvt__tier_close(t);
	printf("nvme_log_outside: 3.kvl a dangling symlink, 4.kvl outside the cycle: replaced "
	       "key %s, removed key %s\n",
	       st_name(so), st_name(sr));
	CHECKM(so != ST_V1 && so != ST_OTHER, "replaced key served %s", st_name(so));
	CHECKM(sr == ST_ABSENT, "removed key served %s", st_name(sr));
	CHECK_EQ(log_count("outside the cycle"), 1);

	rm_rf(root);
	printf("nvme_log_outside: ok\n");
	return 0;
}
