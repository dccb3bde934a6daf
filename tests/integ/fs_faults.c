/*
 * fs_faults.c - the fs tier leaves no temporary file behind when a write fails after
 * creating one, and writes where the file system refuses O_DIRECT. Why: a temporary holds
 * an object's bytes for fs.tmp_max_age_s (an hour), and sweeps do not count it against
 * fs.bytes; found by review on 2026-12-05.
 *  1. A publish the server fails (slowfs --eio-rename: rename and link of temporaries get
 *     EIO): each put fails -EIO, and no temporary is left in the directory (before: one
 *     per put, 8 KiB each).
 *  2. A file system that refuses O_DIRECT (ramfs; tmpfs did before Linux 6.6), fs.direct
 *     auto: the first put succeeds (before: -EEXIST, its O_DIRECT create had created the
 *     file, then failed EINVAL, and the buffered retry met it) and no temporary is left;
 *     with fs.direct on a put fails with one line and leaves nothing behind.
 *  3b. An object whose stat fails (slowfs --eio-getattr): the listing lists the rest and
 *     fails -EIO (the object vanished from it before).
 *  3. A leaf directory whose listing fails (slowfs --eio-readdir): the tier's listing
 *     fails with EIO (it returned 0 with the objects of the other leaves, so `kvtier
 *     verify` said "0 bad" over a store it had not seen whole).
 * Exit 0 pass, 1 fail, 77 when slowfs, /dev/fuse or root (to mount ramfs) is missing (a
 * failure under CI=true).
 */
#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "lib/slowfs.h"
#include "lib/tierh.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

#define OBJ 8192

static struct kvt_tier *open_tier(const char *dir, const char *direct)
{
	const char *kv[] = {"fs.dir", dir, "fs.threads", "2", "fs.direct", direct, NULL};
	struct kvt_config *cfg = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, cfg, &t), 0);
	kvt_config_destroy(cfg);
	return t;
}

/* Files under dir (recursively) whose name contains part. */
static int count_named(const char *dir, const char *part)
{
	DIR *d = opendir(dir);
	CHECK(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char p[8400];
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		struct stat st;
		if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
			n += count_named(p, part);
		else if (strstr(e->d_name, part))
			n++;
	}
	closedir(d);
	return n;
}

static void *new_obj(uint64_t seed)
{
	void *obj = aligned_alloc(4096, OBJ); /* aligned: the tier tries O_DIRECT */
	CHECK(obj);
	th_obj_fill(obj, OBJ, seed);
	return obj;
}

static void publish_fails(void)
{
	struct slowfs fs = {0};
	const char *opts[] = {"--eio-rename", ".tmp.", NULL};
	int rc = slowfs_mount_opts(&fs, "fs_faults", opts);
	if (rc == 77) {
		check_part_runs(false, "publish fails", "slowfs or /dev/fuse missing");
		return;
	}
	CHECK_EQ(rc, 0);
	struct kvt_tier *t = open_tier(fs.mnt, "off");
	void *obj = new_obj(7);
	for (uint64_t i = 0; i < 3; i++) {
		struct kvt_key k;
		th_key(&k, i, 11);
		CHECK_EQ(th_write(t, &k, obj, OBJ), -EIO);
	}
	int left = count_named(fs.back, ".tmp.");
	CHECKM(left == 0, "1: %d temporaries left behind by failed publishes", left);
	th_close(t);
	free(obj);
	slowfs_stop(&fs);
	fprintf(stderr, "1: failed publishes left no temporary\n");
}

static char mnt[4096]; /* the ramfs, while mounted: taken down at any exit */

static void unmount_at_exit(void)
{
	if (mnt[0] && umount2(mnt, MNT_DETACH) == 0)
		rmdir(mnt);
}

static void direct_refused(void)
{
	const char *base = getenv("KVT_TEST_DIR");
	snprintf(mnt, sizeof(mnt), "%s/kvt-fs_odirect-XXXXXX", base && *base ? base : "/var/tmp");
	CHECK(mkdtemp(mnt));
	bool mounted = geteuid() == 0 && mount("ramfs", mnt, "ramfs", 0, "mode=0700") == 0;
	if (mounted)
		atexit(unmount_at_exit);
	if (!check_part_runs(mounted, "O_DIRECT refused", "needs root to mount ramfs")) {
		rmdir(mnt);
		mnt[0] = 0;
		return;
	}
	/* ramfs refuses O_DIRECT: the case under test, checked rather than assumed */
	char probe[4200];
	snprintf(probe, sizeof(probe), "%s/probe", mnt);
	int pfd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_DIRECT, 0600);
	CHECKM(pfd < 0 && errno == EINVAL, "ramfs took O_DIRECT (fd %d): nothing to test", pfd);
	unlink(probe);

	void *obj = new_obj(9), *back = aligned_alloc(4096, OBJ);
	CHECK(back);
	struct kvt_tier *t = open_tier(mnt, "auto");
	for (uint64_t i = 0; i < 3; i++) {
		struct kvt_key k;
		th_key(&k, i, 12);
		CHECKM(th_write(t, &k, obj, OBJ) == 0, "2: put %llu with fs.direct=auto on ramfs",
		       (unsigned long long)i);
		CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ);
		CHECK(!memcmp(back, obj, OBJ));
	}
	CHECK_EQ(count_named(mnt, ".tmp."), 0);
	th_close(t);

	t = open_tier(mnt, "on");
	struct kvt_key k;
	th_key(&k, 99, 12);
	int rc = th_write(t, &k, obj, OBJ);
	CHECKM(rc < 0, "2: fs.direct=on on ramfs: put returned %d", rc);
	int left = count_named(mnt, ".tmp.");
	CHECKM(left == 0, "2: fs.direct=on left %d temporaries", left);
	th_close(t);
	free(obj);
	free(back);
	CHECK(umount(mnt) == 0);
	rmdir(mnt);
	mnt[0] = 0;
	fprintf(stderr, "2: O_DIRECT refused: auto writes, on fails cleanly\n");
}

static int count_listed(void *arg, const struct kvt_key *key, uint64_t bytes)
{
	(void)key;
	(void)bytes;
	(*(int *)arg)++;
	return 0;
}

static void listing_fails(void)
{
	struct kvt_key a, b;
	th_key(&a, 1, 13);
	th_key(&b, 2, 13);
	CHECK(a.bytes[0] != b.bytes[0]); /* two leaves */
	char leaf[8];
	snprintf(leaf, sizeof(leaf), "%02x/%02x", a.bytes[0], a.bytes[1]);
	struct slowfs fs = {0};
	const char *opts[] = {"--eio-readdir", leaf, NULL};
	int rc = slowfs_mount_opts(&fs, "fs_list_fail", opts);
	if (rc == 77) {
		check_part_runs(false, "listing fails", "slowfs or /dev/fuse missing");
		return;
	}
	CHECK_EQ(rc, 0);
	struct kvt_tier *t = open_tier(fs.mnt, "off");
	void *obj = new_obj(5);
	CHECK_EQ(th_write(t, &a, obj, OBJ), 0);
	CHECK_EQ(th_write(t, &b, obj, OBJ), 0);
	int n = 0;
	rc = t->ops->scan(t, count_listed, &n);
	CHECKM(rc == -EIO, "3: a leaf that cannot be listed: scan %d with %d objects", rc, n);
	th_close(t);
	free(obj);
	slowfs_stop(&fs);
	fprintf(stderr, "3: a listing cut short fails\n");
}

/* 3b. An object whose stat fails with EIO (slowfs --eio-getattr on its name): the listing
 * lists the others and fails -EIO; until 2026-12-06 the object vanished from it and the
 * scan answered 0. The objects are written through the backing directory, so that the
 * mount has cached nothing of them. */
static void entry_stat_fails(void)
{
	struct kvt_key keys[9];
	for (int i = 0; i < 9; i++)
		th_key(&keys[i], (uint64_t)i + 1, 17);
	char hex[2 * KVT_KEY_BYTES + 1];
	for (int i = 0; i < KVT_KEY_BYTES; i++)
		snprintf(hex + 2 * i, 3, "%02x", keys[4].bytes[i]);
	struct slowfs fs = {0};
	const char *opts[] = {"--eio-getattr", hex, NULL};
	int rc = slowfs_mount_opts(&fs, "fs_stat_fail", opts);
	if (rc == 77) {
		check_part_runs(false, "entry stat fails", "slowfs or /dev/fuse missing");
		return;
	}
	CHECK_EQ(rc, 0);
	struct kvt_tier *b = open_tier(fs.back, "off");
	void *obj = new_obj(6);
	for (int i = 0; i < 9; i++)
		CHECK_EQ(th_write(b, &keys[i], obj, OBJ), 0);
	CHECK_EQ(th_flush(b), 0);
	th_close(b);
	struct kvt_tier *t = open_tier(fs.mnt, "off");
	int n = 0;
	rc = t->ops->scan(t, count_listed, &n);
	CHECKM(rc == -EIO && n == 8,
	       "3b: an object whose stat fails: scan %d with %d of 9 objects listed", rc, n);
	th_close(t);
	free(obj);
	slowfs_stop(&fs);
	fprintf(stderr, "3b: a listing with an entry it cannot stat fails (the rest listed)\n");
}

int main(void)
{
	listing_fails();
	entry_stat_fails();
	publish_fails();
	direct_refused();
	printf("fs_faults: ok\n");
	return 0;
}
