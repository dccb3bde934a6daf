/*
 * nvme_flush_powercut.c - a flush makes the NVMe tier's puts and removes before it durable,
 * in every nvme.fsync mode (kvt_flush's contract): a power cut right after the flush keeps
 * the flushed puts and does not bring the removed keys back. Until 2026-12-03 the flush synced
 * nothing: with data (the default) a put's rename and every remove were lost.
 *
 * The power cut: the tier lives on ext4 on a loop device; the loop's backing file is copied
 * right after the flush answers (it holds every block the kernel sent to the device and
 * nothing still in memory: the disk a power cut would leave), the copy is mounted (its
 * journal replayed) and the tier opened on it. Needs root (mount); CI runs as root.
 *
 * The second half runs on ext4 without a journal (as this project's own machines' disks
 * are), where a directory fsync carries only that directory: a put whose file was renamed
 * out of another leaf - an evicted object's file (recycled), a removed object's (a spare),
 * a preallocated slot - must have that leaf synced too. Until 2026-12-03 it was not: after
 * the flush and a power cut the old name still held the put's file (the next open deletes
 * a spare's name and reuses a slot's, taking the flushed put with them).
 */
#include <ftw.h>
#include <sys/mount.h>

#include "nvme_pool_util.h"
#include "lib/loop_image.h"

#define OBJ 20480 /* one full object at test_geom */

static int present(struct kvt_tier *t, const struct kvt_key *k)
{
	uint8_t p = 0;
	CHECK_EQ(t_exists(t, k, 1, &p), 0);
	return p;
}

static void one_mode(const char *mode)
{
	char dir[400], snapdir[400];
	snprintf(dir, sizeof(dir), "%s/mnt/%s", g_root, mode);
	snprintf(snapdir, sizeof(snapdir), "%s/snapmnt/%s", g_root, mode);
	struct kvt_tier *t;
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "16MiB", "nvme.fsync", mode, NULL), 0);
	uint8_t *buf = abuf(OBJ);
	struct kvt_key k[4];
	for (int i = 0; i < 4; i++) {
		k[i] = make_key(31, (uint64_t)i);
		fill_object(buf, OBJ, &k[i]);
		CHECK_EQ(t_write(t, &k[i], buf, OBJ), 0);
	}
	CHECK_EQ(t_flush(t), 0);
	CHECK_EQ(t_remove(t, &k[0]), 0);
	CHECK_EQ(t_remove(t, &k[1]), 0);
	CHECK_EQ(t_flush(t), 0);
	sh("cp --sparse=always %s/img %s/snap.img", g_root, g_root); /* the power cut */
	kvt__tier_close(t);
	sh("mount -o loop %s/snap.img %s/snapmnt", g_root, g_root);
	CHECK_EQ(open_tier(&t, "nvme.dirs", snapdir, "nvme.bytes", "16MiB", NULL), 0);
	for (int i = 0; i < 4; i++) {
		int want = i >= 2;
		CHECKM(present(t, &k[i]) == want, "nvme.fsync=%s: K%d %s after a power cut", mode,
		       i, want ? "lost (put and flushed)" : "back (removed and flushed)");
		if (want) {
			memset(buf, 0, OBJ);
			CHECK_EQ(t_read1(t, &k[i], buf, 0, OBJ), (int)OBJ);
			CHECK_EQ(check_object(buf, OBJ, &k[i]), 0);
		}
	}
	kvt__tier_close(t);
	loop_umount("snapmnt");
	sh("rm -f %s/snap.img", g_root);
	free(buf);
}

/* Inode numbers of the regular files under a directory: two names of one file fail. */
static ino_t g_inos[4096];
static int g_ninos;
static char g_shared[512];
static int ino_add(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag != FTW_F)
		return 0;
	for (int i = 0; i < g_ninos; i++)
		if (g_inos[i] == st->st_ino && !g_shared[0])
			snprintf(g_shared, sizeof(g_shared), "%s", p);
	CHECK(g_ninos < 4096);
	g_inos[g_ninos++] = st->st_ino;
	return 0;
}

static void no_file_named_twice(const char *dir, const char *what)
{
	g_ninos = 0;
	g_shared[0] = 0;
	CHECKM(nftw(dir, ino_add, 16, FTW_PHYS) == 0, "walk %s: %s", dir, strerror(errno));
	CHECKM(!g_shared[0], "%s: after a flush and a power cut, %s names a file that has another name too",
	       what, g_shared);
}

static void check_key(struct kvt_tier *t, const struct kvt_key *k, bool want, const char *what)
{
	CHECKM(present(t, k) == want, "%s: %s after a flush and a power cut", what,
	       want ? "the put is lost" : "the evicted or removed key is back");
	if (!want)
		return;
	uint8_t *buf = abuf(OBJ);
	CHECK_EQ(t_read1(t, k, buf, 0, OBJ), (int)OBJ);
	CHECK_EQ(check_object(buf, OBJ, k), 0);
	free(buf);
}

/* Key i of seed whose leaf (first byte) differs from every one of avoid[0..n): a put whose
 * file came from the same leaf would not show a missed sync. */
static struct kvt_key key_apart(uint64_t seed, uint64_t *i, const struct kvt_key *avoid, int n)
{
	for (;; (*i)++) {
		struct kvt_key k = make_key(seed, *i);
		bool ok = true;
		for (int j = 0; j < n; j++)
			ok &= k.bytes[0] != avoid[j].bytes[0];
		if (ok) {
			(*i)++;
			return k;
		}
	}
}

/* Puts whose files come from another leaf, each flushed, then a power cut. On the image
 * without a journal, mounted at <root>/mnt2. */
static void moved_files(const char *mode)
{
	char dir[400], pdir[400], snap[400], psnap[400], what[64];
	snprintf(dir, sizeof(dir), "%s/mnt2/%s", g_root, mode);
	snprintf(pdir, sizeof(pdir), "%s/mnt2/%s-pool", g_root, mode);
	snprintf(snap, sizeof(snap), "%s/snapmnt/%s", g_root, mode);
	snprintf(psnap, sizeof(psnap), "%s/snapmnt/%s-pool", g_root, mode);
	uint8_t *buf = abuf(OBJ);
	struct kvt_key k[6];
	uint64_t i = 0;

	/* Three objects fill the tier: the fourth put recycles the least recent one's file,
	 * and a removed object's file is kept as a spare for the next put of its size. */
	struct kvt_tier *t;
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "60KiB", "nvme.fsync", mode, NULL), 0);
	for (int j = 0; j < 3; j++) {
		k[j] = key_apart(41, &i, k, j);
		fill_object(buf, OBJ, &k[j]);
		CHECK_EQ(t_write(t, &k[j], buf, OBJ), 0);
	}
	CHECK_EQ(t_flush(t), 0);
	/* Without a journal an fsync does not write a new file's inode bitmap or its group's
	 * counts, only syncfs does (a new file after a power cut needs e2fsck there, whatever
	 * the tier does): so the files are made durable here, and what follows only renames
	 * them, which directory fsyncs must carry. */
	sh("sync -f %s", dir);
	k[3] = key_apart(41, &i, k, 3);
	fill_object(buf, OBJ, &k[3]);
	CHECK_EQ(t_write(t, &k[3], buf, OBJ), 0); /* recycles k0's file */
	CHECK_EQ(t_flush(t), 0);
	CHECK_EQ(present(t, &k[0]), 0);
	CHECK_EQ(t_remove(t, &k[1]), 0); /* k1's file: a spare */
	CHECK_EQ(t_flush(t), 0);
	k[4] = key_apart(41, &i, k, 4);
	fill_object(buf, OBJ, &k[4]);
	CHECK_EQ(t_write(t, &k[4], buf, OBJ), 0); /* takes the spare */
	CHECK_EQ(t_flush(t), 0);

	/* A preallocated slot: the put's file comes out of <dir>/pool. */
	struct kvt_tier *tp;
	CHECK_EQ(open_tier(&tp, "nvme.dirs", pdir, "nvme.bytes", "200KiB", "nvme.preallocate",
			   "20480", "nvme.fsync", mode, NULL),
		 0);
	CHECK(pool_wait(tp) > 0);
	sh("sync -f %s", pdir); /* the slot files (new files: see above) */
	k[5] = make_key(43, 0);
	fill_object(buf, OBJ, &k[5]);
	CHECK_EQ(t_write(tp, &k[5], buf, OBJ), 0);
	CHECK_EQ(tier_stats(tp).pool_bytes, 9ull * OBJ); /* it took a slot */
	CHECK_EQ(t_flush(tp), 0);

	sh("cp --sparse=always %s/img2 %s/snap.img", g_root, g_root); /* the power cut */
	kvt__tier_close(t);
	kvt__tier_close(tp);
	sh("mount -o loop %s/snap.img %s/snapmnt", g_root, g_root);
	snprintf(what, sizeof(what), "no journal, nvme.fsync=%s", mode);
	no_file_named_twice(snap, what);
	no_file_named_twice(psnap, what);
	CHECK_EQ(open_tier(&t, "nvme.dirs", snap, "nvme.bytes", "60KiB", NULL), 0);
	snprintf(what, sizeof(what), "no journal, nvme.fsync=%s, recycled", mode);
	check_key(t, &k[0], false, what);
	check_key(t, &k[3], true, what);
	snprintf(what, sizeof(what), "no journal, nvme.fsync=%s, spare", mode);
	check_key(t, &k[1], false, what);
	check_key(t, &k[4], true, what);
	check_key(t, &k[2], true, what);
	kvt__tier_close(t);
	CHECK_EQ(open_tier(&tp, "nvme.dirs", psnap, "nvme.bytes", "200KiB", NULL), 0);
	snprintf(what, sizeof(what), "no journal, nvme.fsync=%s, slot", mode);
	check_key(tp, &k[5], true, what);
	kvt__tier_close(tp);
	loop_umount("snapmnt");
	sh("rm -f %s/snap.img", g_root);
	free(buf);
}

int main(void)
{
	int rc = loop_root("nvme-powercut");
	if (rc)
		return rc;
	loop_mount("img", "mnt", 64, true);
	one_mode("data");
	one_mode("none");
	one_mode("full");
	loop_mount("img2", "mnt2", 64, false);
	moved_files("data");
	moved_files("full");
	printf("nvme_flush_powercut: ok\n");
	return 0;
}
