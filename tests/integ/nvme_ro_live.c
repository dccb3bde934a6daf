/*
 * nvme_ro_live.c - a read-only open (store.read_only: kvtier ls, stat, verify; it takes no
 * lock) of an NVMe store that a writer - here in the same process - keeps changing: a read
 * of an object the writer evicted meanwhile is a miss, never another object's bytes, and
 * what the writer kept is still served whole. Deterministic counterpart of
 * nvme_ro_race.sh, which races real processes.
 *   (1) Per file: the read-only tier reads key 0, so its file's descriptor is cached; the
 *       writer puts new keys until key 0 is evicted and its file recycled for one of them;
 *       the read-only tier reads key 0 again. Until 2026-12-04 that read returned the new
 *       key's object through the cached descriptor (an inspection called it corrupt).
 *   (2) The log: the writer cycles the log until key 0's segment is reused; the read-only
 *       tier's read of key 0 read the new lap's bytes at its old offset.
 * Now both are -ENOENT (tier_nvme_ops.c, ro_read_current), and the key leaves the
 * read-only index: a second read misses at once. (3) A check that cannot be made is an
 * error, not a miss: segment 0's header damaged after the read-only open makes its read
 * fail with -EIO (an inspection reports it; a miss would make the object vanish from it).
 */
#include "nvme_util.h"

#include "tier_nvme_log.h"

#define OBJ (64 * 1024)

static void put(struct kvt_tier *t, uint64_t seed, uint64_t i, uint8_t *buf)
{
	struct kvt_key k = make_key(seed, i);
	fill_object(buf, OBJ, &k);
	CHECK_EQ(t_write(t, &k, buf, OBJ), 0);
}

/* 1: served whole; 0: a miss; -1: bytes that are not the object (the bug). */
static int ro_read(struct kvt_tier *t, uint64_t seed, uint64_t i, uint8_t *buf)
{
	struct kvt_key k = make_key(seed, i);
	memset(buf, 0, OBJ);
	int rc = t_read1(t, &k, buf, 0, OBJ);
	if (rc == -ENOENT)
		return 0;
	CHECK_EQ(rc, OBJ);
	return check_object(buf, OBJ, &k) == 0 ? 1 : -1;
}

/* The generation in dir's log segment 0 header (0: no log). */
static uint64_t seg0_gen(const char *dir)
{
	char p[400];
	snprintf(p, sizeof(p), "%s/log/0.kvl", dir);
	int fd = open(p, O_RDONLY);
	if (fd < 0)
		return 0;
	static uint8_t b[NV_LOG_BLOCK];
	CHECK_EQ(pread(fd, b, NV_LOG_BLOCK, 0), NV_LOG_BLOCK);
	close(fd);
	return ((const struct nv_log_seghdr *)b)->gen;
}

static int present(struct kvt_tier *t, uint64_t seed, uint64_t i)
{
	struct kvt_key k = make_key(seed, i);
	uint8_t p = 0;
	CHECK_EQ(t_exists(t, &k, 1, &p), 0);
	return p;
}

/* Keys (1, 0 .. n-1) written, a read-only tier opened on them, key 0 read through it; then
 * the writer puts keys (2, ...) until key 0 is gone from it (at most max of them), and
 * `more` after that. Returns the read-only tier; *kept: a first key the writer still holds
 * (n: none). */
static struct kvt_tier *live(struct kvt_tier *w, const char *dir, const char *const *extra,
			     uint64_t n, uint64_t max, uint64_t more, uint8_t *buf,
			     uint64_t *kept)
{
	for (uint64_t i = 0; i < n; i++)
		put(w, 1, i, buf);
	CHECK_EQ(t_flush(w), 0);
	struct kvt_tier *ro;
	CHECK_EQ(open_tier(&ro, "nvme.dirs", dir, "store.read_only", "true", extra[0], extra[1],
			   extra[2], extra[3], extra[4], extra[5], NULL),
		 0);
	CHECK_EQ(ro_read(ro, 1, 0, buf), 1);
	uint64_t j = 0;
	while (present(w, 1, 0) && j < max)
		put(w, 2, j++, buf);
	for (uint64_t m = 0; m < more; m++)
		put(w, 2, j++, buf);
	CHECK_EQ(t_flush(w), 0);
	CHECK_EQ(present(w, 1, 0), 0);
	*kept = n;
	for (uint64_t i = n; i-- > 1;)
		if (present(w, 1, i))
			*kept = i;
	return ro;
}

static void run(const char *root, const char *name, const char *const *extra, uint64_t n,
		uint64_t max, uint64_t more)
{
	char dir[300];
	snprintf(dir, sizeof(dir), "%s/%s", root, name);
	uint8_t *buf = abuf(OBJ);
	struct kvt_tier *w, *ro;
	CHECK_EQ(open_tier(&w, "nvme.dirs", dir, extra[0], extra[1], extra[2], extra[3],
			   extra[4], extra[5], NULL),
		 0);
	uint64_t kept, gen = seg0_gen(dir);
	ro = live(w, dir, extra, n, max, more, buf, &kept);
	int again = ro_read(ro, 1, 0, buf);
	int twice = ro_read(ro, 1, 0, buf);
	int whole = 0, miss = 0, wrong = 0;
	for (uint64_t i = 1; i < n; i++) {
		int r = ro_read(ro, 1, i, buf);
		whole += r == 1, miss += r == 0, wrong += r < 0;
	}
	printf("nvme_ro_live: %s: evicted key read %s, again %s; of the other %llu first keys "
	       "(the writer holds %llu) %d served whole, %d misses, %d another object's bytes; "
	       "segment 0 at generation %llu, was %llu\n",
	       name, again < 0 ? "as another object's bytes" : again ? "whole" : "a miss",
	       twice ? "not a miss" : "a miss", (unsigned long long)(n - 1),
	       (unsigned long long)(n - kept), whole, miss, wrong, (unsigned long long)seg0_gen(dir),
	       (unsigned long long)gen);
	CHECK_EQ(again, 0); /* was -1: the recycled file's, or the new lap's, bytes */
	CHECK_EQ(twice, 0);
	CHECK_EQ(wrong, 0);
	if (kept < n)
		CHECK(whole > 0); /* what the writer kept is still served */
	kvt__tier_close(ro);
	kvt__tier_close(w);
	free(buf);
}

static void damaged_header(const char *root, const char *const *extra)
{
	char dir[300], p[400];
	snprintf(dir, sizeof(dir), "%s/hdr", root);
	uint8_t *buf = abuf(OBJ);
	struct kvt_tier *w, *ro;
	CHECK_EQ(open_tier(&w, "nvme.dirs", dir, extra[0], extra[1], extra[2], extra[3],
			   extra[4], extra[5], NULL),
		 0);
	for (uint64_t i = 0; i < 4; i++)
		put(w, 3, i, buf);
	kvt__tier_close(w);
	CHECK_EQ(open_tier(&ro, "nvme.dirs", dir, "store.read_only", "true", extra[0], extra[1],
			   extra[2], extra[3], extra[4], extra[5], NULL),
		 0);
	CHECK_EQ(ro_read(ro, 3, 1, buf), 1);
	snprintf(p, sizeof(p), "%s/log/0.kvl", dir);
	int fd = open(p, O_RDWR);
	CHECK(fd >= 0);
	uint8_t b = 0;
	CHECK_EQ(pread(fd, &b, 1, 0), 1);
	b ^= 0xff; /* the magic's first byte */
	CHECK_EQ(pwrite(fd, &b, 1, 0), 1);
	close(fd);
	struct kvt_key k = make_key(3, 2);
	int rc = t_read1(ro, &k, buf, 0, OBJ);
	printf("nvme_ro_live: segment header damaged after the open: read %d (%s)\n", rc,
	       strerror(-rc));
	CHECK_EQ(rc, -EIO); /* not -ENOENT */
	kvt__tier_close(ro);
	free(buf);
}

int main(void)
{
	char root[] = "/var/tmp/kvt-nvme-ro-live-XXXXXX";
	CHECK(mkdtemp(root));
	/* 64 KiB objects in 4 MiB, one file each */
	const char *files[] = {"nvme.bytes", "4MiB", "nvme.fsync", "none", "nvme.log_max", "0"};
	run(root, "files", files, 32, 256, 0);
	/* the log: 16 MiB segments in 80 MiB; 2,000 puts after key 0's eviction cycle it, so
	 * its segment is reused (evicted, a log object's bytes stay until then) */
	const char *log[] = {"nvme.bytes", "80MiB", "nvme.log_max", "256KiB", "nvme.segment_bytes",
			     "16MiB"};
	run(root, "log", log, 32, 4000, 2000);
	damaged_header(root, log);
	rm_rf(root);
	printf("nvme_ro_live: ok\n");
	return 0;
}
