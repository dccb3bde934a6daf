/*
 * fs_powercut.c - a key this node's sweep evicted, then removed and flushed, stays gone after
 * a power cut (kvt_flush's contract: the removes before a flush are durable), with
 * fs.fsync=data and full, on ext4 with a journal and without. Until 2026-12-03 a sweep's
 * unlink marked nothing for the flush: the remove found no name (-ENOENT) and synced
 * nothing, the flush had nothing to sync (with full it never synced leaves at all), and the
 * key came back. The power cut is a copy of the loop image's backing file right after the
 * flush (lib/loop_image.h). Needs root (mount); CI runs as root.
 */
#include <unistd.h>

#include "lib/tierh.h"
#include "lib/loop_image.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

#define OBJ 8192

static struct kvt_tier *fs_open(const char *dir, const char *mode, const char *bytes, bool ro)
{
	const char *kv[] = {"fs.dir", dir, "fs.fsync", mode, "fs.bytes", bytes,
			    "store.read_only", ro ? "true" : "false", NULL};
	struct kvt_config *c = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, c, &t), 0);
	kvt_config_destroy(c);
	return t;
}

static void swept_then_removed(const char *mnt, const char *img, const char *mode,
			       const char *what, uint64_t salt)
{
	char dir[400], snap[400];
	snprintf(dir, sizeof(dir), "%s/%s/%s", g_root, mnt, mode);
	snprintf(snap, sizeof(snap), "%s/snapmnt/%s", g_root, mode);
	uint8_t *buf = malloc(OBJ);
	CHECK(buf);
	struct kvt_key old, k;
	th_key(&old, 999, salt);
	struct kvt_tier *t = fs_open(dir, mode, "65536", false);
	th_obj_fill(buf, OBJ, 1);
	CHECK_EQ(th_write(t, &old, buf, OBJ), 0);
	CHECK_EQ(th_flush(t), 0);
	sleep(1); /* older than the rest: the sweep's first victim */
	int n = 0;
	for (; n < 32 && th_present(t, &old); n++) {
		th_key(&k, (uint64_t)n, salt + 7);
		th_obj_fill(buf, OBJ, (uint64_t)n + 2);
		CHECK_EQ(th_write(t, &k, buf, OBJ), 0);
		for (int i = 0; i < 50 && th_present(t, &old); i++)
			usleep(10000);
	}
	CHECKM(!th_present(t, &old), "%s: the sweep never evicted the key", what);
	CHECK_EQ(th_flush(t), 0);
	int r = th_remove(t, &old); /* -ENOENT: the sweep took the name */
	CHECK(r == 0 || r == -ENOENT);
	CHECK_EQ(th_flush(t), 0);
	sh("cp --sparse=always %s/%s %s/snap.img", g_root, img, g_root); /* the power cut */
	th_close(t);
	sh("mount -o loop %s/snap.img %s/snapmnt", g_root, g_root);
	struct kvt_tier *s = fs_open(snap, mode, "0", true);
	CHECKM(!th_present(s, &old),
	       "%s, fs.fsync=%s: a key swept, removed (%d) and flushed is back after a power cut",
	       what, mode, r);
	th_close(s);
	loop_umount("snapmnt");
	sh("rm -f %s/snap.img", g_root);
	free(buf);
}

/* A store opened in a directory that does not exist yet: its puts, flushed, are there after
 * a power cut, directories the open made (fs.dir's missing components and v1) included.
 * The tier syncs the parents of the directories its puts make (dir_made), not those its
 * open makes: ext4 makes those durable with the first fsync under them (a journal commit,
 * or without a journal the fsync of a new inode's parents). This guards that. */
static void fresh_store(const char *mnt, const char *img, const char *mode, const char *what,
			uint64_t salt)
{
	char dir[400], snap[400];
	snprintf(dir, sizeof(dir), "%s/%s/fresh-%s/a/b", g_root, mnt, mode);
	snprintf(snap, sizeof(snap), "%s/snapmnt/fresh-%s/a/b", g_root, mode);
	uint8_t *buf = malloc(OBJ);
	CHECK(buf);
	struct kvt_tier *t = fs_open(dir, mode, "0", false);
	enum { KEYS = 16 };
	struct kvt_key k;
	for (int i = 0; i < KEYS; i++) {
		th_key(&k, (uint64_t)i, salt);
		th_obj_fill(buf, OBJ, (uint64_t)i);
		CHECK_EQ(th_write(t, &k, buf, OBJ), 0);
	}
	CHECK_EQ(th_flush(t), 0);
	sh("cp --sparse=always %s/%s %s/snap.img", g_root, img, g_root); /* the power cut */
	th_close(t);
	sh("mount -o loop %s/snap.img %s/snapmnt", g_root, g_root);
	int there = 0;
	if (access(snap, F_OK) == 0) {
		struct kvt_tier *r = fs_open(snap, mode, "0", true);
		for (int i = 0; i < KEYS; i++) {
			th_key(&k, (uint64_t)i, salt);
			there += th_present(r, &k);
		}
		th_close(r);
	}
	loop_umount("snapmnt");
	sh("rm -f %s/snap.img", g_root);
	CHECKM(there == KEYS,
	       "%s, fs.fsync=%s: a new store's flushed puts after a power cut: %d of %d there%s",
	       what, mode, there, KEYS, there ? "" : " (its directory is gone)");
	free(buf);
}

int main(void)
{
	int rc = loop_root("fs-powercut");
	if (rc)
		return rc;
	loop_mount("img", "mnt", 64, true);
	swept_then_removed("mnt", "img", "data", "journal", 1000);
	swept_then_removed("mnt", "img", "full", "journal", 2000);
	loop_mount("img2", "mnt2", 64, false);
	swept_then_removed("mnt2", "img2", "data", "no journal", 3000);
	swept_then_removed("mnt2", "img2", "full", "no journal", 4000);
	fresh_store("mnt2", "img2", "data", "no journal", 5000);
	fresh_store("mnt2", "img2", "full", "no journal", 6000);
	fresh_store("mnt", "img", "data", "journal", 7000);
	printf("fs_powercut: ok\n");
	return 0;
}
