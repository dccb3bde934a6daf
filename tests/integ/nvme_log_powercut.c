/*
 * nvme_log_powercut.c - a flush makes the small-object log's puts and removes before it
 * durable, in every nvme.fsync mode (kvt_flush's contract, docs/TIERS.md): a power cut at
 * the moment the flush answers keeps the flushed puts and brings no removed key back.
 * Until 2026-12-03 it did not: a flush waited for the writes before it but not for the
 * tombstones of the removes before it (a log object's remove is answered when its
 * tombstone is queued), so the removed keys came back; and with nvme.fsync=none a log
 * put marks no leaf directory dirty, so the flush ran no syncfs and every flushed log put
 * was lost.
 *
 * The power cut is taken inside the flush's callback (on the tier's ring thread, so that
 * no batch the flush did not wait for is submitted meanwhile): the loop-mounted ext4
 * image's backing file is copied (every block the kernel sent to the device, nothing
 * still in memory), mounted and the tier opened on the copy. As nvme_flush_powercut.c, a
 * journalled image and one without a journal. Needs root (mount); CI runs as root.
 */
#include <sys/mount.h>

#include "nvme_util.h"
#include "lib/loop_image.h"

#define OBJ 20480		 /* one full object at test_geom: a log object */
enum { NPUT = 600, NREM = 400 }; /* 400 tombstones: six batches' records */

/* A flush whose callback copies the image before it answers: the power cut. */
struct cut {
	struct waiter w;
	const char *img;
	int copied;
};

static void cut_cb(void *arg, int64_t res)
{
	struct cut *c = arg;
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "cp --sparse=always %s/%s %s/snap.img", g_root, c->img, g_root);
	c->copied = system(cmd) == 0;
	waiter_cb(&c->w, res);
}

static int flush_and_cut(struct kvt_tier *t, const char *img)
{
	struct cut c = {WAITER_INIT, img, 0};
	int rc = waiter_wait(&c.w, t->ops->flush(t, cut_cb, &c));
	CHECKM(c.copied, "copying %s failed", img);
	return rc;
}

static const char *const cfg_log[] = {"nvme.bytes",	    "64MiB", "nvme.log_max",	   "256KiB",
				      "nvme.segment_bytes", "16MiB", "nvme.log_spare_pct", "0"};

static int open_log(struct kvt_tier **t, const char *dir, const char *mode)
{
	const char *const *c = cfg_log;
	return open_tier(t, "nvme.dirs", dir, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
			 "nvme.fsync", mode, NULL);
}

static void put_all(struct kvt_tier *t, uint64_t seed, int from, int to)
{
	uint8_t *buf = abuf((uint64_t)(to - from) * OBJ);
	struct batch b = BATCH_INIT;
	for (int i = from; i < to; i++) {
		uint8_t *p = buf + (uint64_t)(i - from) * OBJ;
		struct kvt_key k = make_key(seed, (uint64_t)i);
		fill_object(p, OBJ, &k);
		batch_add(&b);
		CHECK_EQ(t->ops->write(t, &k, p, OBJ, batch_cb, &b), 0);
	}
	batch_wait(&b, 0);
	CHECK_EQ(b.failed, 0);
	free(buf);
}

static void remove_all(struct kvt_tier *t, uint64_t seed, int from, int to)
{
	struct batch b = BATCH_INIT;
	for (int i = from; i < to; i++) {
		struct kvt_key k = make_key(seed, (uint64_t)i);
		batch_add(&b);
		CHECK_EQ(t->ops->remove(t, &k, batch_cb, &b), 0);
	}
	batch_wait(&b, 0);
	CHECK_EQ(b.failed, 0);
}

/* The copy holds keys [NREM, NPUT) exact and none of [0, NREM). */
static void check_copy(const char *snapdir, const char *mode, uint64_t seed, const char *what)
{
	sh("mount -o loop %s/snap.img %s/snapmnt", g_root, g_root);
	struct kvt_tier *t;
	CHECK_EQ(open_log(&t, snapdir, mode), 0);
	uint8_t *buf = abuf(OBJ);
	int lost = 0, back = 0, bad = 0;
	for (int i = 0; i < NPUT; i++) {
		struct kvt_key k = make_key(seed, (uint64_t)i);
		uint8_t p = 0;
		CHECK_EQ(t_exists(t, &k, 1, &p), 0);
		if (i < NREM) {
			back += p;
			continue;
		}
		if (!p) {
			lost++;
			continue;
		}
		memset(buf, 0, OBJ);
		bad += t_read1(t, &k, buf, 0, OBJ) != (int)OBJ || check_object(buf, OBJ, &k) != 0;
	}
	kvt__tier_close(t);
	loop_umount("snapmnt");
	sh("rm -f %s/snap.img", g_root);
	free(buf);
	CHECKM(
	    !lost && !back && !bad,
	    "%s, nvme.fsync=%s: after a flush and a power cut %d of %d flushed log puts are lost, "
	    "%d of %d removed and flushed keys are back, %d read wrong",
	    what, mode, lost, NPUT - NREM, back, NREM, bad);
}

/* Puts, a flush, removes of two thirds, a flush that cuts the power as it answers. */
static void one_mode(const char *mnt, const char *img, const char *mode, bool sync_files,
		     const char *what)
{
	char dir[400], snapdir[400];
	snprintf(dir, sizeof(dir), "%s/%s/%s", g_root, mnt, mode);
	snprintf(snapdir, sizeof(snapdir), "%s/snapmnt/%s", g_root, mode);
	uint64_t seed = 71 + (uint64_t)mode[0];
	struct kvt_tier *t;
	CHECK_EQ(open_log(&t, dir, mode), 0);
	if (sync_files) {
		/* Without a journal only syncfs writes a new file's inode bitmap (see
		 * nvme_flush_powercut.c): the segments and log/head are made here, so what
		 * follows writes into files that exist. */
		put_all(t, seed + 1000, 0, 1);
		sh("sync -f %s", dir);
	}
	put_all(t, seed, 0, NPUT);
	CHECK_EQ(t_flush(t), 0);
	remove_all(t, seed, 0, NREM);
	CHECK_EQ(flush_and_cut(t, img), 0);
	kvt__tier_close(t);
	check_copy(snapdir, mode, seed, what);
}

/* A key stored as a file (a run without the log), its file evicted in a run with the
 * log, then put into the log and removed there, and a flush that cuts the power as it
 * answers: the removed key stays removed. Until 2026-12-06 the eviction's removal of the
 * file's name was not synced by the flush (only a remove's was), and the log's tombstone
 * leaves files alone: the open indexed the old file. On the image without a journal,
 * where nothing but the flush writes the directory. */
static void evicted_file(const char *mnt, const char *img)
{
	char dir[400], snapdir[400];
	snprintf(dir, sizeof(dir), "%s/%s/evicted", g_root, mnt);
	snprintf(snapdir, sizeof(snapdir), "%s/snapmnt/evicted", g_root);
	struct kvt_tier *t;
	const uint64_t seed = 90;
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "64MiB", "nvme.fsync", "data", NULL), 0);
	put_all(t, seed, 0, 1); /* K: a file of its own */
	CHECK_EQ(t_flush(t), 0);
	kvt__tier_close(t);
	sh("sync -f %s", dir);
	CHECK_EQ(open_log(&t, dir, "data"), 0);
	/* Log puts up to the live capacity, K kept; made durable (segments created: see
	 * one_mode); then one more put evicts K, the oldest. */
	struct kvt_tier_stats st;
	t->ops->stats(t, &st);
	CHECK(st.capacity_bytes > st.bytes + OBJ);
	int fill = (int)((st.capacity_bytes - st.bytes) / OBJ);
	put_all(t, seed + 1, 0, fill);
	struct kvt_key k = make_key(seed, 0);
	uint8_t p = 0;
	CHECK_EQ(t_exists(t, &k, 1, &p), 0);
	CHECK_EQ(p, 1);
	sh("sync -f %s", dir);
	put_all(t, seed + 1, fill, fill + 1);
	p = 1;
	CHECK_EQ(t_exists(t, &k, 1, &p), 0);
	CHECK_EQ(p, 0);
	put_all(t, seed, 0, 1); /* K again: into the log */
	remove_all(t, seed, 0, 1);
	CHECK_EQ(flush_and_cut(t, img), 0);
	kvt__tier_close(t);
	sh("mount -o loop %s/snap.img %s/snapmnt", g_root, g_root);
	CHECK_EQ(open_log(&t, snapdir, "data"), 0);
	p = 0;
	CHECK_EQ(t_exists(t, &k, 1, &p), 0);
	kvt__tier_close(t);
	loop_umount("snapmnt");
	sh("rm -f %s/snap.img", g_root);
	CHECKM(p == 0, "an evicted file's key, put into the log and removed, is back after a "
		       "flush and a power cut");
}

int main(void)
{
	int rc = loop_root("nvme-log-powercut");
	if (rc)
		return rc;
	loop_mount("img", "mnt", 256, true); /* 3 x 64 MiB of fallocated segments */
	one_mode("mnt", "img", "none", false, "journal");
	one_mode("mnt", "img", "data", false, "journal");
	one_mode("mnt", "img", "full", false, "journal");
	loop_mount("img2", "mnt2", 256, false);
	one_mode("mnt2", "img2", "none", true, "no journal");
	one_mode("mnt2", "img2", "data", true, "no journal");
	one_mode("mnt2", "img2", "full", true, "no journal");
	evicted_file("mnt2", "img2");
	printf("nvme_log_powercut: ok\n");
	return 0;
}
