/*
 * nvme_spare.c - a removed object's file is kept as a spare and overwritten in place by the
 * next write of its size (same inode: no unlink, no new allocation), the new object reads
 * back intact, spares count against nvme.bytes (a write that needs the room drops them
 * before it evicts an object), a write of another size never takes one, and close leaves
 * no spare file behind. Crash safety of the temp-file publish is nvme_crash's.
 */
#include "nvme_util.h"

#define LEN (64 * 1024 + 4096)

static ino_t inode_of(const char *dir, const struct kvt_key *k)
{
	char p[512];
	struct stat st;
	key_path(dir, k, p, sizeof(p));
	return stat(p, &st) == 0 ? st.st_ino : 0;
}

int main(void)
{
	const char *base = getenv("KVT_TEST_DIR");
	char root[512];
	snprintf(root, sizeof(root), "%s/kvt-nvme-spare-XXXXXX", base && *base ? base : "/tmp");
	if (base && *base)
		mkdir(base, 0755);
	CHECK(mkdtemp(root));
	char cap[32];
	snprintf(cap, sizeof(cap), "%d", 4 * LEN);
	struct kvt_tier *t;
	CHECK_EQ(open_tier(&t, "nvme.dirs", root, "nvme.bytes", cap, "nvme.fsync", "data",
			   "nvme.queue_depth", "8", NULL), 0);
	uint8_t *buf = abuf(LEN + 8192), *rbuf = abuf(LEN + 8192);
	struct kvt_key k[8];
	for (int i = 0; i < 8; i++)
		k[i] = make_key(7, (uint64_t)i);

	/* remove -> spare -> the next write of that size reuses the file */
	fill_object(buf, LEN, &k[0]);
	CHECK_EQ(t_write(t, &k[0], buf, LEN), 0);
	ino_t ino0 = inode_of(root, &k[0]);
	CHECK(ino0 != 0);
	CHECK_EQ(t_remove(t, &k[0]), 0);
	CHECK_EQ(inode_of(root, &k[0]), 0);
	CHECK_EQ(count_files(root, ".tmp.spare.", ""), 1);
	fill_object(buf, LEN, &k[1]);
	CHECK_EQ(t_write(t, &k[1], buf, LEN), 0);
	CHECK_EQ(inode_of(root, &k[1]), ino0);
	CHECK_EQ(count_files(root, ".tmp.spare.", ""), 0);
	memset(rbuf, 0, LEN);
	CHECK_EQ(t_read1(t, &k[1], rbuf, 0, LEN), LEN);
	CHECK_EQ(check_object(rbuf, LEN, &k[1]), 0);
	uint8_t present = 0;
	CHECK_EQ(t_exists(t, &k[0], 1, &present), 0);
	CHECK_EQ(present, 0);

	/* a write of another size does not take a spare */
	CHECK_EQ(t_remove(t, &k[1]), 0);
	CHECK_EQ(count_files(root, ".tmp.spare.", ""), 1);
	fill_object(buf, LEN - 4096, &k[2]);
	CHECK_EQ(t_write(t, &k[2], buf, LEN - 4096), 0);
	CHECK(inode_of(root, &k[2]) != ino0);
	CHECK_EQ(count_files(root, ".tmp.spare.", ""), 1);

	/* spares count against nvme.bytes: a write that needs the spare's room drops it
	 * before it evicts an object */
	for (int i = 3; i < 5; i++) {
		fill_object(buf, LEN, &k[i]);
		CHECK_EQ(t_write(t, &k[i], buf, LEN), 0); /* the first takes the spare */
	}
	CHECK_EQ(count_files(root, ".tmp.spare.", ""), 0);
	CHECK_EQ(t_remove(t, &k[3]), 0);
	CHECK_EQ(count_files(root, ".tmp.spare.", ""), 1);
	/* k2 + k4 + spare + k5 = 4 x LEN + 4096 > nvme.bytes; without the spare it fits */
	fill_object(buf, LEN + 8192, &k[5]);
	CHECK_EQ(t_write(t, &k[5], buf, LEN + 8192), 0);
	CHECK_EQ(t_flush(t), 0);
	/* the dropped spare's unlink runs on io_uring's workers, after the write has
	 * completed: wait for it (up to 10 s, for a slow machine), it must happen */
	int spares = 0;
	for (int i = 0; i < 1000 && (spares = count_files(root, ".tmp.spare.", "")) != 0; i++)
		usleep(10 * 1000);
	CHECK_EQ(spares, 0);
	struct kvt_tier_stats st = {0};
	t->ops->stats(t, &st);
	CHECK_EQ(st.objects, 3);
	CHECK_EQ(st.evictions, 0);
	for (int i = 2; i < 6; i++) {
		if (i == 3)
			continue;
		uint64_t len = i == 2 ? LEN - 4096 : i == 5 ? LEN + 8192 : LEN;
		memset(rbuf, 0, LEN + 8192);
		CHECK_EQ(t_read1(t, &k[i], rbuf, 0, len), (int)len);
		CHECK_EQ(check_object(rbuf, len, &k[i]), 0);
	}

	/* close removes the spares */
	CHECK_EQ(t_remove(t, &k[4]), 0);
	CHECK_EQ(count_files(root, ".tmp.spare.", ""), 1);
	kvt__tier_close(t);
	CHECK_EQ(count_files(root, ".tmp.", ""), 0);
	rm_rf(root);
	free(buf);
	free(rbuf);
	printf("nvme_spare: ok\n");
	return 0;
}
