/*
 * fs_inode_reuse.c - a late corruption report must not drop a good copy written since, even
 * where the copy is indistinguishable by inode number, change time and size. On ext4 with
 * 128-byte inodes (mkfs.ext4 -I 128) timestamps have whole seconds, and a file created
 * right after one was removed gets its inode number: another node that removes the corrupt
 * copy and writes the key again within the second publishes a file that matches the one
 * this node read in all of (device, inode, ctime, size). Until 2026-12-04 the drop took it
 * for the corrupt file and removed it (a review saw 200 rounds of 200 lose the good copy).
 * Each round: this node reads K (the read the report is about), the other node (a second
 * tier open on the same directory) removes K and writes it again, the report comes, and K
 * must still read back whole; and a report about the copy that is there drops it. Needs
 * root (mount); CI runs as root.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "lib/tierh.h"
#include "lib/loop_image.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

#define OBJ 8192
#define ROUNDS 40

/* One worker: a read queued after a drop runs after it (the queue is FIFO). */
static struct kvt_tier *fs_open(const char *dir)
{
	const char *kv[] = {"fs.dir", dir, "fs.threads", "1", "fs.direct", "off", NULL};
	struct kvt_config *c = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, c, &t), 0);
	kvt_config_destroy(c);
	return t;
}

int main(void)
{
	int rc = loop_root("fs-inode-reuse");
	if (rc)
		return rc;
	loop_mount_mkfs("img", "mnt", 64, "-I 128");
	char dir[400];
	snprintf(dir, sizeof(dir), "%s/mnt/store", g_root);
	uint8_t *obj = NULL, *back = NULL;
	CHECK(posix_memalign((void **)&obj, 4096, OBJ) == 0);
	CHECK(posix_memalign((void **)&back, 4096, OBJ) == 0);
	th_obj_fill(obj, OBJ, 3);
	struct kvt_tier *t = fs_open(dir), *other = fs_open(dir);
	int reused = 0, lost = 0;
	for (int r = 0; r < ROUNDS; r++) {
		struct kvt_key k;
		char hex[65], path[600];
		th_key(&k, 5, (uint64_t)r);
		kvt_key_to_hex(&k, hex);
		snprintf(path, sizeof(path), "%s/v1/%.2s/%.2s/%s", dir, hex, hex + 2, hex);
		CHECK_EQ(th_write(other, &k, obj, OBJ), 0);
		CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ); /* found corrupt, reported late */
		struct stat before, after;
		CHECK_EQ(stat(path, &before), 0);
		CHECK_EQ(th_remove(other, &k), 0); /* the other node: away with it, a good copy */
		CHECK_EQ(th_write(other, &k, obj, OBJ), 0);
		CHECK_EQ(stat(path, &after), 0);
		bool same = before.st_ino == after.st_ino &&
			    before.st_ctim.tv_sec == after.st_ctim.tv_sec &&
			    before.st_ctim.tv_nsec == after.st_ctim.tv_nsec;
		reused += same;
		t->ops->drop_corrupt(t, &k); /* about the copy that is gone */
		memset(back, 0, OBJ);
		int64_t got = th_read_all(t, &k, back, OBJ); /* runs after the drop */
		if (got != OBJ || memcmp(back, obj, OBJ)) {
			lost++;
			printf("  round %d (inode %s): the good copy written since is GONE "
			       "(read %lld)\n",
			       r, same ? "and ctime the same" : "or ctime new", (long long)got);
		}
	}
	printf("  %d rounds, %d with the old copy's inode number and ctime, %d good copies lost\n",
	       ROUNDS, reused, lost);
	CHECKM(reused > 0, "no round reused an inode number within its second: the test "
			   "checked nothing");
	CHECK_EQ(lost, 0);
	/* A report about the copy that is there still drops it. */
	struct kvt_key k;
	th_key(&k, 5, 0);
	CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ);
	t->ops->drop_corrupt(t, &k);
	CHECK_EQ(th_read_all(t, &k, back, OBJ), -ENOENT);
	/* Part 3: this node itself reads K, removes it, writes it again and reads the new copy
	 * before the report about the first read arrives. The report names the key only; it
	 * may be about either read, so the new copy stays (until 2026-12-04 the write made
	 * the node forget the first read, and the report was taken for the second). */
	int lost_own = 0;
	for (int r = 0; r < 5; r++) {
		th_key(&k, 6, (uint64_t)r);
		CHECK_EQ(th_write(t, &k, obj, OBJ), 0);
		CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ); /* the read reported late */
		CHECK_EQ(th_remove(t, &k), 0);
		CHECK_EQ(th_write(t, &k, obj, OBJ), 0);
		CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ); /* the new copy, good */
		t->ops->drop_corrupt(t, &k);
		memset(back, 0, OBJ);
		lost_own += th_read_all(t, &k, back, OBJ) != OBJ || memcmp(back, obj, OBJ);
	}
	printf("  this node's own rewrite, read again before the report: %d of 5 good copies "
	       "lost\n", lost_own);
	CHECK_EQ(lost_own, 0);
	/* That report used up, a report about the read just made (the copy there) drops it. */
	t->ops->drop_corrupt(t, &k);
	CHECK_EQ(th_read_all(t, &k, back, OBJ), -ENOENT);
	th_close(t);
	th_close(other);
	free(obj);
	free(back);
	printf("fs_inode_reuse: ok\n");
	return 0;
}
