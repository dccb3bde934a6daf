/*
 * nvme_pool_powercut.c - a power cut on ext4 without a journal between a put that took a
 * preallocated slot and the sync of the pool directory: the object's leaf directory
 * reached the disk (its own flush sync, or writeback - a flush syncs leaves in parallel,
 * and a cut can land between them), pool/ did not, so pool/<id>.slot and the object's
 * name are two entries of one inode - whose link count on disk still says 1 (a rename
 * does not change it; e2fsck would make it 2). The next open must neither list that slot
 * free (the next put of its size would overwrite the object in place, and the object
 * would serve another key's bytes) nor unlink it (with a link count of 1 that frees the
 * inode the object's name still holds). Until 2026-12-03 it was listed free: the open's
 * check for a slot that is also an object's name was st_nlink > 1, which only e2fsck makes
 * true. Needs root (mount); CI runs as root.
 */
#include <sys/mount.h>

#include "nvme_pool_util.h"
#include "lib/loop_image.h"

#define OBJ 20480 /* one full object at test_geom, the slot size */

/* fsync directory dir/<leaf of k>: the put's name reaches the disk, pool/ does not. */
static void sync_leaf(const char *dir, const struct kvt_key *k)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%02x", dir, k->bytes[0]);
	int fd = open(p, O_RDONLY | O_DIRECTORY);
	CHECK(fd >= 0);
	CHECK_EQ(fsync(fd), 0);
	close(fd);
}

static int object_ino(const char *dir, const struct kvt_key *k, ino_t *ino)
{
	char p[512];
	key_path(dir, k, p, sizeof(p));
	struct stat st;
	if (stat(p, &st) < 0)
		return -errno;
	*ino = st.st_ino;
	return 0;
}

int main(void)
{
	int rc = loop_root("nvme-pool-powercut");
	if (rc)
		return rc;
	loop_mount("img", "mnt", 64, false);
	char dir[400], snap[400];
	snprintf(dir, sizeof(dir), "%s/mnt/s", g_root);
	snprintf(snap, sizeof(snap), "%s/snapmnt/s", g_root);

	/* Four slots laid out and made durable; two puts take two of them. */
	struct kvt_tier *t;
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "80KiB", "nvme.preallocate", "20480",
			   "nvme.fsync", "data", NULL),
		 0);
	CHECK_EQ(pool_wait(t), 4ull * OBJ);
	sh("sync -f %s", dir);
	uint8_t *buf = abuf(OBJ);
	struct kvt_key k[3] = {make_key(61, 0), make_key(61, 1), make_key(61, 2)};
	for (int i = 0; i < 2; i++) {
		fill_object(buf, OBJ, &k[i]);
		CHECK_EQ(t_write(t, &k[i], buf, OBJ), 0);
		sync_leaf(dir, &k[i]);
	}
	CHECK_EQ(tier_stats(t).pool_bytes, 2ull * OBJ);
	sh("cp --sparse=always %s/img %s/snap.img", g_root, g_root); /* the power cut */
	kvt__tier_close(t);
	sh("mount -o loop %s/snap.img %s/snapmnt", g_root, g_root);

	/* The state the cut left: slots the puts took still named in pool/ (not both, here:
	 * the second put's fdatasync also synced pool/, its file's first directory, with the
	 * first slot's name gone). */
	struct pool_list pl = {0};
	pool_list(snap, OBJ, &pl);
	int shared = 0;
	for (int i = 0; i < 2; i++) {
		ino_t ino = 0;
		CHECK_EQ(object_ino(snap, &k[i], &ino), 0);
		for (int j = 0; j < pl.n; j++)
			shared += pl.inos[j] == ino;
	}
	CHECKM(shared >= 1, "the cut did not leave both names (%d slots)", pl.n);
	uint64_t free_slots = (uint64_t)(pl.n - shared);

	/* Room for every slot listed (none dropped to fit), none laid out. */
	CHECK_EQ(
	    open_tier(&t, "nvme.dirs", snap, "nvme.bytes", "200KiB", "nvme.fsync", "data", NULL),
	    0);
	uint64_t listed = tier_stats(t).pool_bytes;
	/* Puts of the slot size take every slot listed free. */
	for (int i = 2; i < 2 + (int)(listed / OBJ); i++) {
		struct kvt_key x = make_key(62, (uint64_t)i);
		fill_object(buf, OBJ, &x);
		CHECK_EQ(t_write(t, &x, buf, OBJ), 0);
	}
	int wrong = 0, lost = 0;
	for (int i = 0; i < 2; i++) {
		uint8_t p = 0;
		CHECK_EQ(t_exists(t, &k[i], 1, &p), 0);
		if (!p) {
			lost++;
			continue;
		}
		memset(buf, 0, OBJ);
		wrong +=
		    t_read1(t, &k[i], buf, 0, OBJ) != (int)OBJ || check_object(buf, OBJ, &k[i]);
	}
	kvt__tier_close(t);
	printf("nvme_pool_powercut: %llu slots listed free (%llu really free, %d named twice), %d "
	       "of 2 objects read wrong after puts took the slots, %d lost\n",
	       (unsigned long long)(listed / OBJ), (unsigned long long)free_slots, shared, wrong,
	       lost);
	CHECKM(listed == free_slots * OBJ, "a slot whose inode is an object's is listed free");
	CHECKM(!wrong, "an object serves another key's bytes");
	CHECK_EQ(lost, 0);
	/* The slot's name is left (not unlinked: that would free the object's inode). */
	pool_list(snap, OBJ, &pl);
	ino_t ino0 = 0, ino1 = 0;
	CHECK_EQ(object_ino(snap, &k[0], &ino0), 0);
	CHECK_EQ(object_ino(snap, &k[1], &ino1), 0);
	int still = 0;
	for (int j = 0; j < pl.n; j++)
		still += pl.inos[j] == ino0 || pl.inos[j] == ino1;
	CHECK_EQ(still, shared);
	free(buf);
	printf("nvme_pool_powercut: ok\n");
	return 0;
}
