/*
 * tier_large.c - objects over 2 GiB read back at their true length. Tier read results
 * are 64-bit (src/tier.h); a backend that computed them as int once clamped or wrapped a
 * 2.5 GiB read, and the engine then judged a healthy object truncated and dropped it.
 *
 * No 2.5 GiB is written: a small object is stored through the tier, the tier is closed,
 * its file is extended to 2.5 GiB as a sparse file (a marker written past 2 GiB), and the
 * tier is reopened (the nvme tier indexes sizes at open). Then, for nvme and fs:
 *   - one read of many segments, all into the same 64 MiB buffer, covering the whole
 *     object, must answer exactly 2.5 GiB;
 *   - a range starting past 2 GiB reads the marker back, and a range over the end comes
 *     back short by the right amount.
 * Exit 0 pass, 1 fail.
 */
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "lib/tierh.h"
#include "testlib.h"

static const struct kvt_geometry GEO = {4, 2, 64, 16, KVT_DTYPE_BF16, KVT_KIND_KV};
static const uint64_t BIG = (5ull << 30) / 2;        /* 2.5 GiB */
static const uint64_t MARK_OFF = (2ull << 30) + 8192; /* past 2 GiB */
static const uint64_t PIECE = 64ull << 20;

/* The one object file under the tier's directory (names starting with '.' are the
 * tier's own: locks, budgets, temp files). */
static char found[4096];
static int find_obj(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	if (flag == FTW_F && S_ISREG(sb->st_mode) && p[ftw->base] != '.') {
		snprintf(found, sizeof(found), "%s", p);
		return 1;
	}
	return 0;
}

static void large(const char *name, const char *const *kv, const char *dir)
{
	fprintf(stderr, "== %s\n", name);
	struct kvt_key k;
	th_key(&k, 1, (uint64_t)getpid() << 20);
	const uint64_t SMALL = 4 * 4096;
	uint8_t *obj = kvt__aligned_alloc(SMALL);
	CHECK(obj);
	th_obj_fill(obj, SMALL, 7);
	struct kvt_tier *t = th_open_by_name(name, kv, &GEO);
	CHECK_EQ(th_write(t, &k, obj, SMALL), 0);
	kvt__tier_close(t);

	found[0] = 0;
	CHECK(nftw(dir, find_obj, 16, FTW_PHYS) == 1);
	int fd = open(found, O_WRONLY);
	CHECK(fd >= 0);
	CHECK(ftruncate(fd, (off_t)BIG) == 0); /* sparse: no 2.5 GiB written */
	uint8_t *mark = kvt__aligned_alloc(4096);
	CHECK(mark);
	memset(mark, 0xA5, 4096);
	CHECK(pwrite(fd, mark, 4096, (off_t)MARK_OFF) == 4096);
	CHECK(close(fd) == 0);

	t = th_open_by_name(name, kv, &GEO);
	/* the whole object, 40 segments of 64 MiB into one buffer */
	uint32_t n = (uint32_t)(BIG / PIECE);
	CHECK_EQ((uint64_t)n * PIECE, BIG);
	struct kvt_seg *segs = calloc(n, sizeof(*segs));
	uint8_t *buf = kvt__aligned_alloc(PIECE);
	CHECK(segs && buf);
	for (uint32_t i = 0; i < n; i++)
		segs[i] = (struct kvt_seg){(uint64_t)i * PIECE, PIECE, buf};
	int64_t got = th_read(t, &k, segs, n);
	fprintf(stderr, "   whole object: %lld bytes (want %llu)\n", (long long)got,
		(unsigned long long)BIG);
	CHECK_EQ(got, (int64_t)BIG);

	/* a range past 2 GiB: the marker; a range over the end: short */
	struct kvt_seg m = {MARK_OFF, 4096, buf};
	memset(buf, 0, 4096);
	CHECK_EQ(th_read(t, &k, &m, 1), 4096);
	CHECK(!memcmp(buf, mark, 4096));
	struct kvt_seg past = {BIG - 4096, 3 * 4096, buf};
	CHECK_EQ(th_read(t, &k, &past, 1), 4096);
	/* the head is still the object written through the tier */
	struct kvt_seg head = {0, SMALL, buf};
	CHECK_EQ(th_read(t, &k, &head, 1), (int64_t)SMALL);
	CHECK(!memcmp(buf, obj, SMALL));
	kvt__tier_close(t);
	free(segs);
	kvt__free_aligned(buf, PIECE);
	kvt__free_aligned(mark, 4096);
	kvt__free_aligned(obj, SMALL);
	fprintf(stderr, "   ok\n");
}

int main(void)
{
	char *d1 = test_tmpdir("large-nvme"), *d2 = test_tmpdir("large-fs");
	/* capacity above the object, so the reopen's index keeps it */
	const char *nvme[] = {"nvme.dirs", d1, "nvme.fsync", "none", "nvme.bytes", "8GiB", NULL};
	large("nvme", nvme, d1);
	const char *fs[] = {"fs.dir", d2, "fs.fsync", "none", NULL};
	large("fs", fs, d2);
	test_rmdir(d1);
	test_rmdir(d2);
	free(d1);
	free(d2);
	fprintf(stderr, "tier_large: ok\n");
	return 0;
}
