/*
 * nvme_recycle_powercut.c - a power cut after a put that recycled an evicted object's file,
 * before any flush, on a journalled ext4 (nvme.fsync=data, the default). The recycle's
 * rename (V's name -> the put's temp name) is metadata in ext4's running transaction; the
 * put's data goes to V's blocks with RWF_DSYNC, which commits no journal transaction for
 * an overwrite. After the cut V's name is back and holds J's whole, valid object, and the
 * next open indexes it as V (a read of it is refused by the store's header check: a miss,
 * never J's bytes as V's). A put of V must then store V: until 2026-12-06 the same-key
 * shortcut (nv_start_write) acknowledged it without writing anything (found by review);
 * now an entry the open found by its name is written again at its key's first put.
 * Needs root (a loop-mounted ext4 image).
 */
#include "nvme_util.h"
#include "lib/loop_image.h"

#define OBJ 20480

static struct kvt_tier_stats tier_stats(struct kvt_tier *t)
{
	struct kvt_tier_stats st = {0};
	t->ops->stats(t, &st);
	return st;
}

static const char *who(const uint8_t *buf, const struct kvt_key *v, const struct kvt_key *j)
{
	if (!check_object(buf, OBJ, v))
		return "V's own bytes";
	if (!check_object(buf, OBJ, j))
		return "J's bytes (another key's valid object)";
	return "damaged bytes";
}

int main(void)
{
	int rc = loop_root("nvme-recycle-powercut");
	if (rc)
		return rc;
	loop_mount("img", "mnt", 64, true);
	char dir[400], snap[400];
	snprintf(dir, sizeof(dir), "%s/mnt/s", g_root);
	snprintf(snap, sizeof(snap), "%s/snapmnt/s", g_root);

	struct kvt_tier *t;
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "40KiB", "nvme.fsync", "data", NULL), 0);
	uint8_t *buf = abuf(OBJ);
	struct kvt_key v = make_key(71, 0), x = make_key(71, 1), j = make_key(71, 2);
	fill_object(buf, OBJ, &v);
	CHECK_EQ(t_write(t, &v, buf, OBJ), 0);
	fill_object(buf, OBJ, &x);
	CHECK_EQ(t_write(t, &x, buf, OBJ), 0);
	CHECK_EQ(t_flush(t), 0);
	sh("sync -f %s", dir); /* V and X fully on disk, journal committed */
	uint64_t ev0 = tier_stats(t).evictions;
	fill_object(buf, OBJ, &j);
	CHECK_EQ(t_write(t, &j, buf, OBJ), 0); /* evicts V, the LRU tail: recycles its file */
	CHECKM(tier_stats(t).evictions == ev0 + 1, "V was not evicted");
	sh("cp --sparse=always %s/img %s/snap.img", g_root, g_root); /* the power cut */
	kvt__tier_close(t);
	sh("mount -o loop %s/snap.img %s/snapmnt", g_root, g_root);

	CHECK_EQ(open_tier(&t, "nvme.dirs", snap, "nvme.bytes", "40KiB", "nvme.fsync", "data", NULL), 0);
	uint8_t p[3] = {0};
	struct kvt_key ks[3] = {v, x, j};
	CHECK_EQ(t_exists(t, ks, 3, p), 0);
	printf("after the cut: V %s, X %s, J %s\n", p[0] ? "indexed" : "absent",
	       p[1] ? "indexed" : "absent", p[2] ? "indexed" : "absent");
	int bad = 0;
	if (p[0]) {
		memset(buf, 0, OBJ);
		int r = t_read1(t, &v, buf, 0, OBJ);
		printf("read V: %d bytes, %s\n", r, who(buf, &v, &j));
		/* the engine puts V again (a get found it bad, or a new session): acknowledged */
		fill_object(buf, OBJ, &v);
		int w = t_write(t, &v, buf, OBJ);
		memset(buf, 0, OBJ);
		r = t_read1(t, &v, buf, 0, OBJ);
		printf("put V again: %d (acknowledged); read V: %d bytes, %s\n", w, r, who(buf, &v, &j));
		bad = w == 0 && check_object(buf, OBJ, &v) != 0;
	}
	kvt__tier_close(t);
	free(buf);
	CHECKM(!bad, "an acknowledged put of V stored nothing: V still serves J's bytes");
	printf("nvme_recycle_powercut: ok\n");
	return 0;
}
