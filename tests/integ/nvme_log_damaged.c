/*
 * nvme_log_damaged.c - a commit record of the small-object log damaged where a crash cannot
 * leave one (one bit of its length flipped, with acknowledged batches after it) is damage,
 * not a torn tail. Until 2026-12-04 the open-time scan took every record that does not
 * check for the end of its segment: the batches after it vanished silently, their
 * tombstones with them, so a key removed there came back as its older put, and `kvtier
 * verify` said "0 bad". Now the scan looks past it (tier_nvme_log_recover.c, look_past and
 * judge_stops), voids the log as for a gap (nothing of it indexed: no removed key is
 * served), says so in one line, and verify reports it (exit 3). (1) The record of the 4th
 * of 16 batches in 0.kvl, tombstones of keys put before it in batches after it; (2) only
 * a segment's own records judge its stop: two holes a power cut left among the batches in
 * flight, or what an older build left past a torn record, never void the log once later
 * runs have written elsewhere; (2b) a hole in a segment written with nvme.fsync=none is a
 * torn tail, and what is before it survives the next open too; (2c) an intact record of
 * the next lap (a reused segment whose header a power cut lost) ends the walk, as a torn
 * tail, and a log/head naming that lap is no lost segment; (2d) a void writes headers above
 * the generation log/head names; (2e) a log/head at the last generation stops log writes
 * (no header wraps to a small generation). (3) What a crash can leave is still a torn tail, taken
 * silently: the newest record, or the third newest (two batches after it were in flight
 * with it); the records from there on are zeroed, so that the next open, after the run
 * has written newer batches, does not take them for damage. (4) Any void of the log (here
 * a gap, and log/head deleted) makes verify exit 3. Objects are in kvtier's format, so
 * that verify finds nothing else bad.
 */
#include "nvme_util.h"

#include <sys/wait.h>

#include "format.h"
#include "tier_nvme_log.h"

static const char *fsync_mode = "data";

static int open_log(struct kvt_tier **t, const char *dir, bool ro)
{
	return open_tier(t, "nvme.dirs", dir, "nvme.bytes", "80MiB", "nvme.log_max", "256KiB",
			 "nvme.segment_bytes", "16MiB", "nvme.log_spare_pct", "0", "nvme.fsync",
			 fsync_mode, "store.read_only", ro ? "true" : "false", NULL);
}

/* How many of keys (seed, 0 .. n-1) are served. */
static int served_below(struct kvt_tier *t, uint64_t seed, uint64_t n)
{
	int k = 0;
	for (uint64_t i = 0; i < n; i++)
		k += nv_test_served(t, seed, i);
	return k;
}

static void del(struct kvt_tier *t, uint64_t seed, uint64_t i)
{
	struct kvt_key k = make_key(seed, i);
	CHECK_EQ(t_remove(t, &k), 0);
}

/* `kvtier verify` of dir: its exit status; *log_bad: it printed a BAD line for log/. */
static int verify(const char *dir, int *log_bad)
{
	const char *b = getenv("KVT_BIN");
	char self[4096], cmd[9000], out[600];
	ssize_t l = readlink("/proc/self/exe", self, sizeof(self) - 1);
	CHECK(b || l > 0);
	if (!b) { /* run by hand: the CLI is next to this program */
		self[l] = 0;
		*strrchr(self, '/') = 0;
		b = self;
	}
	snprintf(out, sizeof(out), "%s.verify", dir);
	snprintf(cmd, sizeof(cmd),
		 "%s/kvtier verify --dir %s --set nvme.bytes=80MiB --set nvme.log_max=256KiB "
		 "--set nvme.segment_bytes=16MiB --set nvme.log_spare_pct=0 >%s 2>&1",
		 b, dir, out);
	int rc = system(cmd);
	CHECK(WIFEXITED(rc));
	FILE *f = fopen(out, "r");
	CHECK(f);
	char line[1024];
	*log_bad = 0;
	while (fgets(line, sizeof(line), f)) {
		if (getenv("KVT_TEST_VERBOSE"))
			fprintf(stderr, "verify: %s", line);
		*log_bad += !strncmp(line, "BAD ", 4) && strstr(line, "/log/");
	}
	fclose(f);
	unlink(out);
	return WEXITSTATUS(rc);
}

static const char DAMAGE[] = "does not check and";

/* (1) A record in the middle of 0.kvl: keys 0 .. 9, removals of 1 and 2, keys 10 .. 13. */
static void test_mid_segment(const char *root)
{
	char dir[300];
	snprintf(dir, sizeof(dir), "%s/mid", root);
	struct kvt_tier *t;
	CHECK_EQ(open_log(&t, dir, false), 0);
	for (uint64_t i = 0; i < 10; i++)
		nv_test_put(t, 1, i);
	del(t, 1, 1);
	del(t, 1, 2);
	for (uint64_t i = 10; i < 14; i++)
		nv_test_put(t, 1, i);
	kvt__tier_close(t);
	int bad = 0;
	CHECK_EQ(verify(dir, &bad), 0); /* sound before */
	CHECK_EQ(bad, 0);
	uint64_t at[64];
	int nr = 0;
	nr = nv_test_log_records(dir, 0, at, 64);
	CHECK(nr >= 14);
	nv_test_flip_rec_len(dir, 0, at[3]); /* key 3's batch: keys 0 .. 2 and the removals around it */
	/* Inspection: a removed key is not served, and verify says damage, not "0 bad". */
	log_clear();
	CHECK_EQ(open_log(&t, dir, true), 0);
	CHECK_EQ(nv_test_served(t, 1, 1), 0); /* was served: its tombstone came after the damage */
	kvt__tier_close(t);
	CHECK_EQ(log_count(DAMAGE), 1);
	CHECK_EQ(verify(dir, &bad), 3);
	CHECK_EQ(bad, 1);
	/* A read-write open voids the log: no removed key is served, nothing else either. */
	log_clear();
	CHECK_EQ(open_log(&t, dir, false), 0);
	int back = nv_test_served(t, 1, 1) + nv_test_served(t, 1, 2), any = 0;
	for (uint64_t i = 0; i < 14; i++)
		any += nv_test_served(t, 1, i);
	printf("nvme_log_damaged: mid-segment: %d removed keys served, %d of 14 keys, %d damage "
	       "line(s)\n",
	       back, any, log_count(DAMAGE));
	CHECK_EQ(back, 0); /* was 2: their tombstones came after the damaged record */
	CHECK_EQ(log_count(DAMAGE), 1);
	CHECK_EQ(any, 0);
	nv_test_put(t, 1, 20); /* the run's writes stay */
	kvt__tier_close(t);
	log_clear();
	CHECK_EQ(open_log(&t, dir, false), 0);
	CHECK_EQ(nv_test_served(t, 1, 20), 1);
	CHECK_EQ(nv_test_served(t, 1, 1) + nv_test_served(t, 1, 2), 0);
	CHECK_EQ(log_count(DAMAGE), 0);
	kvt__tier_close(t);
	CHECK_EQ(verify(dir, &bad), 0); /* voided and written: sound again */
}

/* One 4 KiB block of segment n at off: read into b, or (wr) written from it. */
static void rec_io(const char *dir, uint32_t n, uint64_t off, uint8_t *b, bool wr)
{
	char p[400];
	snprintf(p, sizeof(p), "%s/log/%u.kvl", dir, n);
	int fd = open(p, O_RDWR);
	CHECK(fd >= 0);
	if (wr)
		CHECK_EQ(pwrite(fd, b, NV_LOG_BLOCK, (off_t)off), NV_LOG_BLOCK);
	else
		CHECK_EQ(pread(fd, b, NV_LOG_BLOCK, (off_t)off), NV_LOG_BLOCK);
	close(fd);
}

/* A store at root/name whose 0.kvl holds 12 batches, keys (seed, 0 .. 11), one each; their
 * records' offsets in at[12]. dir gets the store's path (300 bytes). */
static void log_of_12(const char *root, const char *name, uint64_t seed, char *dir, uint64_t *at)
{
	snprintf(dir, 300, "%s/%s", root, name);
	struct kvt_tier *t;
	CHECK_EQ(open_log(&t, dir, false), 0);
	for (uint64_t i = 0; i < 12; i++)
		nv_test_put(t, seed, i);
	kvt__tier_close(t);
	uint64_t all[64];
	int nr = 0;
	nr = nv_test_log_records(dir, 0, all, 64);
	CHECK_EQ(nr, 12);
	memcpy(at, all, 12 * sizeof(*at));
}

/* (2) What crashes leave is never judged by other segments' batches. A power cut with
 * four batches in flight, X and X+2 never landed, X+1 and X+3 did (the run after it zeroes
 * X+1, the chain past X stops at the hole); and a store an older build ran after a crash,
 * which left X+1 .. X+3 past a torn X as they were. In both, the next run writes eight
 * batches into 1.kvl, and the open after it must take the stop in 0.kvl for a torn tail
 * again. A first version of the damage check counted those later batches as newer than
 * the stop and voided the healthy log (found by review: keys 0 and 27 no longer served). */
static void test_crash_left(const char *root, bool old_build)
{
	char dir[300], name[16];
	snprintf(name, sizeof(name), "crash%d", old_build);
	uint64_t at[12];
	log_of_12(root, name, 5, dir, at);
	struct kvt_tier *t;
	static uint8_t zero[NV_LOG_BLOCK], saved[3][NV_LOG_BLOCK];
	for (int k = 0; k < 3; k++)
		rec_io(dir, 0, at[9 + k], saved[k], false);
	rec_io(dir, 0, at[8], zero, true); /* X */
	if (!old_build)
		rec_io(dir, 0, at[10], zero, true); /* X + 2 */
	log_clear();
	CHECK_EQ(open_log(&t, dir, false), 0);
	CHECK_EQ(log_count(DAMAGE), 0);
	for (uint64_t i = 20; i < 28; i++)
		nv_test_put(t, 5, i);
	kvt__tier_close(t);
	if (old_build) /* the older build zeroed nothing past the stop */
		for (int k = 0; k < 3; k++)
			rec_io(dir, 0, at[9 + k], saved[k], true);
	int bad = 0;
	CHECK_EQ(verify(dir, &bad), 0);
	log_clear();
	CHECK_EQ(open_log(&t, dir, false), 0);
	int d = log_count(DAMAGE), s0 = nv_test_served(t, 5, 0), s27 = nv_test_served(t, 5, 27);
	printf("nvme_log_damaged: %s: damage lines %d, key 0 served %d, key 27 served %d\n",
	       old_build ? "older build's crash" : "two holes", d, s0, s27);
	CHECK_EQ(d, 0);
	CHECK_EQ(s0, 1);
	CHECK_EQ(s27, 1);
	CHECK_EQ(nv_test_served(t, 5, 8), 0); /* X's key: lost with its batch, as a torn tail */
	kvt__tier_close(t);
}

/* (2b) A segment written with nvme.fsync=none (its records say so): a hole with batches
 * past it is a power cut's loss in that mode (batches were acknowledged once in the
 * device's cache), taken as a torn tail - the batches before it stay, where voiding the
 * log would lose what a flush had made durable. */
static void test_unordered(const char *root)
{
	char dir[300];
	uint64_t at[12];
	fsync_mode = "none";
	log_of_12(root, "unordered", 6, dir, at);
	struct kvt_tier *t;
	nv_test_flip_rec_len(dir, 0, at[3]);
	log_clear();
	CHECK_EQ(open_log(&t, dir, false), 0);
	int kept = served_below(t, 6, 3);
	printf("nvme_log_damaged: fsync=none, a hole with 8 batches past it: %d damage lines, "
	       "%d of the 3 keys before it served\n",
	       log_count(DAMAGE), kept);
	CHECK_EQ(log_count(DAMAGE), 0);
	CHECK_EQ(kept, 3);
	CHECK_EQ(nv_test_served(t, 6, 3), 0);
	nv_test_put(t, 6, 20);
	kvt__tier_close(t);
	/* Reopened, everything before the hole is still there: zeroing what lay past it once
	 * read offsets past the look's list, and zeroed the segment's header with them. */
	log_clear();
	CHECK_EQ(open_log(&t, dir, false), 0);
	CHECK_EQ(served_below(t, 6, 3), 3);
	CHECK_EQ(nv_test_served(t, 6, 20), 1);
	CHECK_EQ(log_count(DAMAGE), 0);
	kvt__tier_close(t);
	int bad = 0;
	CHECK_EQ(verify(dir, &bad), 0);
	fsync_mode = "data";
}

/* log/head of dir rewritten (a newer slot) to name segment seg at generation gen. */
/* Rewrite log/head's current slot as the next write of it, CRC and all, with seg and gen
 * (set_seg) or seq (!set_seg) replaced: a head crafted from outside. */
static void head_rewrite(const char *dir, bool set_seg, uint32_t seg, uint64_t gen,
			 uint64_t seq)
{
	char hp[400];
	static uint8_t b[NV_LOG_BLOCK];
	snprintf(hp, sizeof(hp), "%s/log/head", dir);
	int fd = open(hp, O_RDWR);
	CHECK(fd >= 0);
	struct nv_log_head hd[2];
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(pread(fd, b, NV_LOG_BLOCK, (off_t)i * NV_LOG_BLOCK), NV_LOG_BLOCK);
		memcpy(&hd[i], b, sizeof(hd[i]));
	}
	struct nv_log_head *h = (struct nv_log_head *)b;
	*h = hd[hd[1].count > hd[0].count];
	if (set_seg) {
		h->seg = seg;
		h->gen = gen;
	} else {
		h->seq = seq;
	}
	h->count++;
	h->crc = nv_log_crc(b);
	CHECK_EQ(pwrite(fd, b, NV_LOG_BLOCK, (off_t)(h->count % 2) * NV_LOG_BLOCK), NV_LOG_BLOCK);
	close(fd);
}

static void head_names(const char *dir, uint32_t seg, uint64_t gen)
{
	head_rewrite(dir, true, seg, gen, 0);
}

/* Segment n's header generation in dir. */
static uint64_t seg_gen(const char *dir, uint32_t n)
{
	uint8_t b[NV_LOG_BLOCK];
	rec_io(dir, n, 0, b, false);
	return ((struct nv_log_seghdr *)b)->gen;
}

/* (2c) A segment reused with nvme.fsync=none whose new header a power cut lost, while a
 * batch of its new lap landed: the walk follows the old lap's records up to the new lap's
 * record, intact (its CRC checks) but of the next generation, with the old lap's records
 * after it. That is the end of this lap's writes, not damage: the old lap's records before
 * it stay, and nothing is voided. Until 2026-12-04 the stop's room for a batch made the scan
 * look past it, count the old lap's chain and void the log (found by review). Crafted: the
 * record of the 6th of 12 batches rewritten as an intact record of the next generation. */
static void test_new_lap_record(const char *root)
{
	char dir[300];
	uint64_t at[12];
	log_of_12(root, "newlap", 7, dir, at);
	struct kvt_tier *t;
	static uint8_t b[NV_LOG_BLOCK];
	rec_io(dir, 0, at[5], b, false);
	struct nv_log_rec *r = (struct nv_log_rec *)b;
	uint64_t lap = ++r->gen;
	r->crc = 0;
	r->crc = nv_log_crc(b);
	rec_io(dir, 0, at[5], b, true);
	log_clear();
	CHECK_EQ(open_log(&t, dir, true), 0);
	int kept = served_below(t, 7, 5);
	printf("nvme_log_damaged: a new lap's record before the old lap's: %d damage lines, "
	       "%d of the 5 keys before it served\n",
	       log_count(DAMAGE), kept);
	CHECK_EQ(log_count(DAMAGE), 0);
	CHECK_EQ(kept, 5); /* was 0: the log was voided */
	CHECK_EQ(nv_test_served(t, 7, 5), 0);
	kvt__tier_close(t);
	int bad = 0;
	CHECK_EQ(verify(dir, &bad), 0);
	CHECK_EQ(bad, 0);
	/* log/head naming that lap (it landed, the header did not): the segment is taken at
	 * the lap's generation, not for a lost newest segment (a void). */
	head_names(dir, 0, lap);
	for (int ro = 1; ro >= 0; ro--) {
		log_clear();
		CHECK_EQ(open_log(&t, dir, ro), 0);
		CHECK_EQ(served_below(t, 7, 5), 5); /* was 0: voided, the head's segment "lost" */
		kvt__tier_close(t);
	}
	CHECK_EQ(verify(dir, &bad), 0);
}

/* (2d) log/head names a lap of 0.kvl its header does not have (lost with a power cut, no
 * record of it at the stop): the log is voided, as for a lost segment, and the void's new
 * header is above the generation the head names - at it, that lap's surviving records
 * would check again, with sequence numbers this open never saw. */
static void test_head_lap(const char *root)
{
	char dir[300];
	uint64_t at[12];
	log_of_12(root, "headlap", 8, dir, at);
	uint64_t g = seg_gen(dir, 0);
	head_names(dir, 0, g + 1);
	struct kvt_tier *t;
	log_clear();
	CHECK_EQ(open_log(&t, dir, false), 0);
	CHECK_EQ(served_below(t, 8, 12), 0); /* voided */
	kvt__tier_close(t);
	printf("nvme_log_damaged: log/head names generation %llu of 0.kvl (at %llu): voided, "
	       "its new header %llu\n", (unsigned long long)(g + 1), (unsigned long long)g,
	       (unsigned long long)seg_gen(dir, 0));
	CHECK(seg_gen(dir, 0) > g + 1); /* was g + 1 */
}

/* (2e) log/head crafted to name 0.kvl at the last generation a header may carry
 * (NV_LOG_GEN_MAX - 1): the void must write above it, cannot, and says so in one line;
 * log writes stop for the run (puts get a file each), the header is not written past the
 * bound (walked on to 2^64 - 1, the next reuse would wrap it to 0, and a lap's old records
 * would check again), and what is put then is served, before and after a reopen. */
static void test_gen_bound(const char *root, uint64_t crafted)
{
	char dir[300], name[32];
	uint64_t at[12];
	snprintf(name, sizeof(name), "genmax%llx", (unsigned long long)crafted);
	log_of_12(root, name, 9, dir, at);
	uint64_t g = seg_gen(dir, 0);
	head_names(dir, 0, crafted);
	struct kvt_tier *t;
	log_clear();
	CHECK_EQ(open_log(&t, dir, false), 0);
	CHECK_EQ(log_count("0.kvl header: Value too large"), 1);
	CHECK_EQ(log_count("log writes stop"), 1);
	CHECK_EQ(seg_gen(dir, 0), g); /* not wrapped, not written */
	nv_test_put(t, 10, 0);
	CHECK_EQ(nv_test_served(t, 10, 0), 1);
	kvt__tier_close(t);
	printf("nvme_log_damaged: log/head at generation %#llx: header stays at %llu, log "
	       "writes stop, a put is served\n", (unsigned long long)crafted,
	       (unsigned long long)seg_gen(dir, 0));
	CHECK_EQ(seg_gen(dir, 0), g);
	CHECK_EQ(open_log(&t, dir, true), 0);
	CHECK_EQ(nv_test_served(t, 10, 0), 1);
	kvt__tier_close(t);
}

static void head_seq(const char *dir, uint64_t seq)
{
	head_rewrite(dir, false, 0, 0, seq);
}

/* A log/head crafted with a batch sequence near 2^64: the next batches' sequence numbers
 * wrapped to 0, sorted before every older batch at the next open, and a removed key's put
 * won over its tombstone. Log writes stop at the bound instead; removes still hold. */
static void test_seq_bound(const char *root)
{
	char dir[300];
	uint64_t at[12];
	log_of_12(root, "seqmax", 9, dir, at);
	head_seq(dir, UINT64_MAX - 1);
	struct kvt_tier *t;
	log_clear();
	CHECK_EQ(open_log(&t, dir, false), 0);
	for (uint64_t i = 3; i < 8; i++)
		del(t, 9, i);
	nv_test_put(t, 20, 0);
	kvt__tier_close(t);
	int stopped = log_count("at its bound: log writes stop");
	CHECK_EQ(open_log(&t, dir, true), 0);
	int back = 0;
	for (uint64_t i = 3; i < 8; i++)
		back += nv_test_served(t, 9, i);
	CHECK_EQ(nv_test_served(t, 20, 0), 1);
	kvt__tier_close(t);
	printf("nvme_log_damaged: log/head at sequence 2^64-2: log writes stop, %d of 5 removed "
	       "keys back after a reopen\n", back);
	CHECK_EQ(back, 0);
	CHECK_EQ(stopped, 1);
}

/* (3) A torn tail: record back of the newest (0: the newest) damaged, in a log of 12
 * batches; taken silently, every key before it served. */
static void test_torn(const char *root, int back)
{
	char dir[300], name[16];
	snprintf(name, sizeof(name), "torn%d", back);
	uint64_t at[12];
	log_of_12(root, name, 3, dir, at);
	struct kvt_tier *t;
	int nr = 12;
	nv_test_flip_rec_len(dir, 0, at[nr - 1 - back]);
	int bad = 0;
	CHECK_EQ(verify(dir, &bad), 0);
	CHECK_EQ(bad, 0);
	log_clear();
	CHECK_EQ(open_log(&t, dir, false), 0);
	CHECK_EQ(log_count(DAMAGE), 0);
	for (int i = 0; i < 12; i++)
		CHECK_EQ(nv_test_served(t, 3, (uint64_t)i), i < 11 - back);
	for (uint64_t i = 20; i < 28; i++) /* newer batches, in 1.kvl */
		nv_test_put(t, 3, i);
	kvt__tier_close(t);
	/* The torn record and those past it were zeroed: no damage now either. */
	log_clear();
	CHECK_EQ(open_log(&t, dir, false), 0);
	CHECK_EQ(log_count(DAMAGE), 0);
	CHECK_EQ(nv_test_served(t, 3, 0), 1);
	CHECK_EQ(nv_test_served(t, 3, 27), 1);
	CHECK_EQ(nv_test_served(t, 3, 11 - (uint64_t)back), 0);
	kvt__tier_close(t);
	CHECK_EQ(verify(dir, &bad), 0);
}

/* (4) A whole-log void found by an inspection is damage for `kvtier verify` too, with one
 * BAD line: a gap (1.kvl of three deleted), and log/head deleted. Until 2026-12-04 it was
 * only a warning, and verify exited 0 ("0 objects checked, 0 bad"). */
static void test_void_verify(const char *root)
{
	static const char *what[] = {"log/1.kvl", "log/head"};
	for (int w = 0; w < 2; w++) {
		char dir[300], p[400];
		snprintf(dir, sizeof(dir), "%s/void%d", root, w);
		struct kvt_tier *t;
		for (uint64_t run = 0; run < 3; run++) { /* each run starts a segment */
			CHECK_EQ(open_log(&t, dir, false), 0);
			for (uint64_t i = 0; i < 3; i++)
				nv_test_put(t, 4, run * 10 + i);
			kvt__tier_close(t);
		}
		int bad = 0;
		CHECK_EQ(verify(dir, &bad), 0);
		snprintf(p, sizeof(p), "%s/%s", dir, what[w]);
		CHECK_EQ(unlink(p), 0);
		CHECK_EQ(verify(dir, &bad), 3); /* was 0 */
		CHECK_EQ(bad, 1);
	}
}

int main(void)
{
	char root[] = "/var/tmp/kvt-nvme-log-damaged-XXXXXX";
	CHECK(mkdtemp(root));
	test_mid_segment(root);
	test_crash_left(root, false);
	test_crash_left(root, true);
	test_unordered(root);
	test_new_lap_record(root);
	test_head_lap(root);
	test_gen_bound(root, NV_LOG_GEN_MAX - 1);
	test_gen_bound(root, UINT64_MAX); /* +1 wrapped to 0 and passed (until 2026-12-06) */
	test_seq_bound(root);
	test_torn(root, 0);
	test_torn(root, 2);
	test_void_verify(root);
	rm_rf(root);
	printf("nvme_log_damaged: ok\n");
	return 0;
}
