/*
 * nvme_log_outside.c - log segment files outside the cycle (left by a run with a larger
 * nvme.bytes, or past an entry that cannot be a segment) never let an older copy back. The
 * cycle is 0.kvl up to nvme.bytes' worth of segments, stretched over every file that follows
 * without a missing number: after nvme.bytes shrinks, a log whose files are all there is
 * still one cycle (part 1: everything indexed, removals kept). But with one of those files
 * missing, the files past it fall outside the cycle, and until 2026-12-03 they were only
 * read for their sequence numbers: the segments of the cycle were indexed without their
 * removals and replacements, so a key removed in one of them, or replaced there, came back
 * as its older copy from a segment inside the cycle (part 2: 5.kvl deleted, 6.kvl and 7.kvl
 * outside a 5-segment cycle; part 3: 3.kvl a dangling symlink, 4.kvl outside). With the
 * larger nvme.bytes the same missing file was a gap that voided the log; now files outside
 * the cycle that hold batches void it too, with one log line, and a read-write open
 * removes them (their space comes back); a read-only open changes nothing. Part 2 then
 * grows nvme.bytes back: nothing removed returns. Part 4: a segment that fails to open for
 * a reason other than not being a segment (immutable as root, mode 0 otherwise) ended the
 * cycle like a directory until 2026-12-03: the file after it was taken for one outside the
 * cycle and removed with the tombstones it held, the cycle voided, and the segment kept its
 * batches - indexed again once it opened, so a key removed before came back. Now the open
 * fails with one line and writes nothing.
 */
#include "nvme_util.h"

#include <fcntl.h>

#include "lib/nvme_stale.h"

/* Make segment file p fail a read-write open (on) or open again (off): immutable as root,
 * who passes permission checks (EPERM), mode 0 otherwise (EACCES). */
static void set_unopenable(const char *p, int on)
{
	if (geteuid() != 0) {
		CHECK_EQ(chmod(p, on ? 0 : 0600), 0);
		return;
	}
	set_immutable(p, on);
}

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

/* The log in dir opened again (read-only: ro) with nvme.bytes of bytes, its log lines
 * cleared first. */
static void reopen(struct kvt_tier **t, const char *dir, const char *bytes, int ro)
{
	log_clear();
	CHECK_EQ(st_open(t, dir, bytes, ro), 0);
}

/* Key `replaced` of seed was replaced (v2) and key `removed` removed: neither is served as
 * an older copy. */
static void check_not_back(struct kvt_tier *t, uint64_t seed, uint64_t replaced, uint64_t removed,
			   const char *when)
{
	int so = st_state(t, seed, replaced), sr = st_state(t, seed, removed);
	printf("nvme_log_outside: %s: replaced key %s, removed key %s\n", when, st_name(so),
	       st_name(sr));
	CHECKM(so != ST_V1 && so != ST_OTHER, "replaced key served %s", st_name(so));
	CHECKM(sr == ST_ABSENT, "removed key served %s", st_name(sr));
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
	reopen(&t, dir, "80MiB", 0);
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
	reopen(&t, dir, "80MiB", 1);
	check_not_back(t, 2, 1000, 1010,
		       "5.kvl deleted, 6.kvl and 7.kvl outside the cycle, read-only open");
	kvt__tier_close(t);
	CHECK_EQ(st_log_sum(dir), before);
	CHECK_EQ(log_count("outside the cycle"), 1);
	reopen(&t, dir, "80MiB", 0);
	check_not_back(t, 2, 1000, 1010, "5.kvl deleted, 6.kvl and 7.kvl outside the cycle, open");
	CHECK_EQ(log_count("outside the cycle"), 1);
	CHECK(!st_exists(dir, "6.kvl") && !st_exists(dir, "7.kvl")); /* space back */
	st_write(t, 3, 0, 300);
	kvt__tier_close(t);
	reopen(&t, dir, "80MiB", 0);
	for (uint64_t i = 0; i < 300; i++)
		CHECK_EQ(st_state(t, 3, i), ST_V1);
	CHECK_EQ(st_state(t, 2, 1010), ST_ABSENT);
	CHECK_EQ(log_count("outside the cycle"), 0);
	CHECK_EQ(log_count("is missing"), 0);
	kvt__tier_close(t);
	/* nvme.bytes grown back: 6.kvl and 7.kvl were removed, nothing removed returns. */
	reopen(&t, dir, "128MiB", 0);
	check_not_back(t, 2, 1000, 1010, "nvme.bytes grown back");
	for (uint64_t i = 0; i < 300; i++)
		CHECK_EQ(st_state(t, 3, i), ST_V1);
	CHECK_EQ(log_count("outside the cycle"), 0);
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
	reopen(&t, dir, "80MiB", 0);
	check_not_back(t, 4, 600, 610, "3.kvl a dangling symlink, 4.kvl outside the cycle");
	kvt__tier_close(t);
	CHECK_EQ(log_count("outside the cycle"), 1);

	/* (4) 5 segments as in (3), key 490 (2.kvl) and key 800 (3.kvl) removed: their
	 * tombstones are in 4.kvl. 3.kvl made to fail a read-write open, then opened again. */
	snprintf(dir, sizeof(dir), "%s/d", root);
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	st_write(t, 5, 0, 1100);
	struct kvt_key k490 = make_key(5, 490), k800 = make_key(5, 800), k750 = make_key(5, 750);
	CHECK_EQ(t_remove(t, &k490), 0);
	CHECK_EQ(t_remove(t, &k800), 0);
	kvt__tier_close(t);
	st_path(p, sizeof(p), dir, "3.kvl");
	set_unopenable(p, 1);
	before = st_log_sum(dir);
	log_clear();
	int orc = st_open(&t, dir, "80MiB", 0), rm750 = 0;
	int said = log_count("the log cannot be read whole"), kept4 = st_exists(dir, "4.kvl");
	if (orc == 0) { /* the old code: a key of 3.kvl removed in this run */
		rm750 = t_remove(t, &k750);
		kvt__tier_close(t);
	}
	uint64_t after = st_log_sum(dir);
	set_unopenable(p, 0);
	reopen(&t, dir, "80MiB", 0);
	int s490 = st_state(t, 5, 490), s800 = st_state(t, 5, 800), s750 = st_state(t, 5, 750);
	kvt__tier_close(t);
	printf("nvme_log_outside: 3.kvl failing to open: open %s, 4.kvl %s%s%s; once it "
	       "opens: removed keys %s and %s, key 750 %s\n",
	       orc ? strerror(-orc) : "succeeded", kept4 ? "kept" : "removed",
	       orc ? "" : ", key 750 removed in that run: ", orc ? "" : strerror(-rm750),
	       st_name(s490), st_name(s800), st_name(s750));
	CHECKM(s800 == ST_ABSENT, "a key removed before came back: %s", st_name(s800));
	CHECKM(s490 == ST_ABSENT, "a key removed before came back: %s", st_name(s490));
	CHECK(orc < 0);
	CHECK_EQ(said, 1);
	CHECK(kept4);
	CHECK_EQ(after, before); /* the failed open wrote nothing */
	CHECK_EQ(s750, ST_V1);

	/* (5) As (2), with 7.kvl impossible to remove (immutable as root): the open voids the
	 * log but cannot take 7.kvl away, so the next open would void it again - the log
	 * stops for the run, and the puts of the run take files and survive it. */
	if (geteuid() == 0) {
		snprintf(dir, sizeof(dir), "%s/e", root);
		CHECK_EQ(st_open(&t, dir, "128MiB", 0), 0);
		st_write(t, 6, 0, 2220);
		kvt__tier_close(t);
		st_path(p, sizeof(p), dir, "5.kvl");
		CHECK_EQ(unlink(p), 0);
		st_path(p, sizeof(p), dir, "7.kvl");
		set_immutable(p, 1);
		reopen(&t, dir, "80MiB", 0);
		CHECK_EQ(log_count("cannot be removed"), 1);
		st_write(t, 7, 0, 300);
		CHECK_EQ(t_flush(t), 0);
		kvt__tier_close(t);
		set_immutable(p, 0);
		reopen(&t, dir, "80MiB", 0);
		int kept = 0;
		for (uint64_t i = 0; i < 300; i++)
			kept += st_state(t, 7, i) == ST_V1;
		kvt__tier_close(t);
		printf("nvme_log_outside: 7.kvl not removable: %d of 300 puts of the run kept\n",
		       kept);
		CHECK_EQ(kept, 300);
	} else {
		printf("nvme_log_outside: not root: (5) not run\n");
	}

	rm_rf(root);
	printf("nvme_log_outside: ok\n");
	return 0;
}
