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
 */
#include <sys/mount.h>

#include "nvme_util.h"

#define OBJ 20480 /* one full object at test_geom */

static char g_root[256];

static void sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	CHECKM(system(cmd) == 0, "failed: %s", cmd);
}

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
	sh("umount %s/snapmnt && rm -f %s/snap.img", g_root, g_root);
	free(buf);
}

/* At exit, a failed check's included (lazy: the tier's descriptors may still be open). */
static void cleanup(void)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd),
		 "umount -l %s/snapmnt 2>/dev/null; umount -l %s/mnt 2>/dev/null; rm -rf %s", g_root,
		 g_root, g_root);
	if (system(cmd) != 0)
		fprintf(stderr, "cleanup of %s failed\n", g_root);
}

int main(void)
{
	bool ci = getenv("CI") && !strcmp(getenv("CI"), "true");
	if (geteuid() != 0) {
		printf("%s: needs root to mount a loop file system\n", ci ? "FAIL" : "SKIP");
		return ci ? 1 : 77;
	}
	snprintf(g_root, sizeof(g_root), "/var/tmp/kvt-nvme-powercut-XXXXXX");
	CHECK(mkdtemp(g_root));
	atexit(cleanup);
	sh("truncate -s 64M %s/img && mkfs.ext4 -q -F %s/img && mkdir %s/mnt %s/snapmnt && "
	   "mount -o loop %s/img %s/mnt",
	   g_root, g_root, g_root, g_root, g_root, g_root);
	one_mode("data");
	one_mode("none");
	one_mode("full");
	printf("nvme_flush_powercut: ok\n");
	return 0;
}
