/*
 * nvme_tmp_shared.c - the NVMe tier's open leaves a temporary name that is also an object's
 * file with a link count of 1 (a state a power cut leaves on a file system without a
 * journal: a recycled file's rename reached the disk in one directory block but not the
 * inode's count) instead of unlinking it, which freed the inode the object's name still
 * holds: the object unreadable and the file system damaged (found by review, 2026-12-05;
 * the pool scan has checked its slots the same way since 2026-12-03). The state is made
 * by hand on an ext4 image without a journal: a hard link under a temporary name, then
 * debugfs sets the inode's count back to 1 while the image is not mounted. A temporary
 * that is a second counted link, or no object's file, still goes. Needs root (mount).
 */
#include <sys/stat.h>

#include "nvme_util.h"
#include "lib/loop_image.h"

#define OBJ 20480

int main(void)
{
	int rc = loop_root("nvme-tmp-shared");
	if (rc)
		return rc;
	loop_mount("img", "mnt", 64, false);
	char dir[400], objp[4096], tmpp[4200], tmp2[4200], rel[4200];
	snprintf(dir, sizeof(dir), "%s/mnt/d", g_root);
	struct kvt_tier *t;
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.fsync", "data", NULL), 0);
	uint8_t *buf = abuf(OBJ), *rbuf = abuf(OBJ);
	struct kvt_key k = make_key(77, 0), k2 = make_key(77, 1);
	fill_object(buf, OBJ, &k);
	CHECK_EQ(t_write(t, &k, buf, OBJ), 0);
	fill_object(buf, OBJ, &k2);
	CHECK_EQ(t_write(t, &k2, buf, OBJ), 0);
	kvt__tier_close(t);
	key_path(dir, &k, objp, sizeof(objp));
	/* the object's leaf: a temporary name for its inode, and one for k2's (counted) */
	snprintf(tmpp, sizeof(tmpp), "%.*s/.tmp.w.1", (int)(strrchr(objp, '/') - objp), objp);
	CHECK_EQ(link(objp, tmpp), 0);
	char obj2[4096];
	key_path(dir, &k2, obj2, sizeof(obj2));
	snprintf(tmp2, sizeof(tmp2), "%.*s/.tmp.w.2", (int)(strrchr(obj2, '/') - obj2), obj2);
	CHECK_EQ(link(obj2, tmp2), 0);
	/* the power cut's state: the inode counts one link though two names hold it */
	snprintf(rel, sizeof(rel), "%s", objp + strlen(g_root) + strlen("/mnt"));
	sh("umount %s/mnt && debugfs -w -R 'sif %s links_count 1' %s/img >/dev/null 2>&1 && "
	   "mount -o loop %s/img %s/mnt",
	   g_root, rel, g_root, g_root, g_root);
	struct stat st;
	CHECK_EQ(stat(objp, &st), 0);
	CHECKM(st.st_nlink == 1, "the crafted state: %lu links", (unsigned long)st.st_nlink);

	log_clear();
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.fsync", "data", NULL), 0);
	CHECKM(t_read1(t, &k, rbuf, 0, OBJ) == OBJ && check_object(rbuf, OBJ, &k) == 0,
	       "the object whose inode a temporary name shared is gone or damaged");
	CHECK_EQ(t_read1(t, &k2, rbuf, 0, OBJ), OBJ);
	CHECK_EQ(check_object(rbuf, OBJ, &k2), 0);
	kvt__tier_close(t);
	/* remounted (the kernel's copy of the inode gone): still there */
	sh("umount %s/mnt && mount -o loop %s/img %s/mnt", g_root, g_root, g_root);
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.fsync", "data", "store.read_only", "true",
			   NULL),
		 0);
	CHECKM(t_read1(t, &k, rbuf, 0, OBJ) == OBJ && check_object(rbuf, OBJ, &k) == 0,
	       "after a remount, the object whose inode a temporary name shared is gone");
	kvt__tier_close(t);
	CHECKM(access(tmpp, F_OK) == 0, "the shared temporary name was unlinked");
	CHECKM(access(tmp2, F_OK) != 0, "a temporary that was a second counted link stayed");
	CHECK_EQ(log_count("is also an object's file, with one link"), 1);
	free(buf);
	free(rbuf);
	printf("nvme_tmp_shared: ok\n");
	return 0;
}
