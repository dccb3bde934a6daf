/*
 * fs_flush_remove.c - a flush of the fs tier makes the removes submitted before it durable.
 * Why: kvt_flush promises everything submitted before it is durable, and a removed key
 * must not come back after a power cut that followed a flush. Two ways it did not hold,
 * found by a review (2026-12-05):
 *  1. the tier's workers run calls in parallel and a flush waited only for the writes
 *     before it, so a flush submitted right after a remove (the engine does exactly that:
 *     kvt_remove hands the remove to the tier, flush_tiers queues the flush after it)
 *     answered before the unlink, and its leaf directory was never synced: 295 of 300
 *     flushes here answered first with fs.fsync=data;
 *  2. with fs.fsync=full, a remove whose leaf fsync failed answered the error but left the
 *     leaf unmarked: the retry found no name (-ENOENT) and the next flush synced nothing.
 * fsync is interposed (the tier is linked in statically) to count the fsyncs of the key's
 * leaf directory and to fail one on demand; every other call goes to the kernel.
 *  - data and full: for each of 300 keys, put, flush, then remove and flush submitted
 *    back to back: the flush answers after the remove, the name is gone, and the leaf has
 *    been synced since the remove was submitted;
 *  - full: a leaf fsync fails under a remove (-EIO); the next flush syncs that leaf.
 */
#include <ftw.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "lib/tierh.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;
#define OBJ 8192

static _Atomic int fail_dir_once;
static _Atomic dev_t leaf_dev;
static _Atomic ino_t leaf_ino;
static _Atomic int leaf_syncs;

int fsync(int fd)
{
	struct stat st;
	if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
		if (st.st_ino == atomic_load(&leaf_ino) && st.st_dev == atomic_load(&leaf_dev))
			atomic_fetch_add(&leaf_syncs, 1);
		if (atomic_exchange(&fail_dir_once, 0)) {
			errno = EIO;
			return -1;
		}
	}
	return (int)syscall(SYS_fsync, fd);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p) < 0 ? -1 : 0;
}

static void rm_tree(const char *root)
{
	nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

struct pair {
	char path[600];
	_Atomic int rm_done, fl_done;
	int64_t rm_rc, fl_rc;
	bool fl_first, name_left;
	int syncs_at_flush;
};

static void rm_cb(void *arg, int64_t rc)
{
	struct pair *p = arg;
	p->rm_rc = rc;
	atomic_store(&p->rm_done, 1);
}

static void fl_cb(void *arg, int64_t rc)
{
	struct pair *p = arg;
	struct stat sb;
	p->fl_rc = rc;
	p->fl_first = !atomic_load(&p->rm_done);
	p->name_left = lstat(p->path, &sb) == 0;
	p->syncs_at_flush = atomic_load(&leaf_syncs);
	atomic_store(&p->fl_done, 1);
}

static int flush_sync(struct kvt_tier *t)
{
	struct th_wait w;
	th_wait_init(&w);
	int rc = (int)th_wait_done(&w, t->ops->flush(t, th_cb, &w), TH_TIMEOUT);
	th_wait_fini(&w);
	return rc;
}

static struct kvt_tier *open_fs(const char *root, const char *mode, const char *threads)
{
	const char *kv[] = {"fs.dir", root, "fs.fsync", mode, "fs.direct", "off",
			    "fs.threads", threads, NULL};
	struct kvt_config *cfg = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, cfg, &t), 0);
	kvt_config_destroy(cfg);
	return t;
}

/* The key's leaf directory, watched by the fsync above; its object's path in *path. */
static void watch_leaf(const char *root, const struct kvt_key *k, char *path, size_t len)
{
	char hex[65], leaf[200];
	kvt_key_to_hex(k, hex);
	snprintf(leaf, sizeof(leaf), "%s/v1/%.2s/%.2s", root, hex, hex + 2);
	snprintf(path, len, "%s/%s", leaf, hex);
	struct stat st;
	CHECK_EQ(stat(leaf, &st), 0);
	atomic_store(&leaf_dev, st.st_dev);
	atomic_store(&leaf_ino, st.st_ino);
	atomic_store(&leaf_syncs, 0);
}

static void back_to_back(const char *mode)
{
	char root[] = "/var/tmp/kvt-fs_flush_remove-XXXXXX";
	CHECK(mkdtemp(root));
	struct kvt_tier *t = open_fs(root, mode, "8");
	void *buf = NULL;
	CHECK(posix_memalign(&buf, 4096, OBJ) == 0);
	int n = 300, first = 0, left = 0, unsynced = 0;
	for (int i = 0; i < n; i++) {
		struct kvt_key k;
		th_key(&k, (uint64_t)i, 77);
		th_obj_fill(buf, OBJ, (uint64_t)i);
		CHECK_EQ(th_write(t, &k, buf, OBJ), 0);
		CHECK_EQ(flush_sync(t), 0);
		struct pair p = {0};
		watch_leaf(root, &k, p.path, sizeof(p.path));
		CHECK_EQ(t->ops->remove(t, &k, rm_cb, &p), 0);
		CHECK_EQ(t->ops->flush(t, fl_cb, &p), 0); /* submitted after the remove */
		while (!atomic_load(&p.rm_done) || !atomic_load(&p.fl_done))
			usleep(100);
		CHECK_EQ(p.rm_rc, 0);
		CHECK_EQ(p.fl_rc, 0);
		first += p.fl_first;
		left += p.name_left;
		unsynced += p.syncs_at_flush == 0;
	}
	printf("fs_flush_remove: fs.fsync=%s, %d removes each followed at once by a flush: %d "
	       "flushes answered first, %d with the name still there, %d with its leaf never "
	       "synced\n", mode, n, first, left, unsynced);
	CHECK(first == 0 && left == 0 && unsynced == 0);
	th_close(t);
	free(buf);
	rm_tree(root);
}

static void failed_leaf_sync(void)
{
	char root[] = "/var/tmp/kvt-fs_flush_remove-XXXXXX";
	CHECK(mkdtemp(root));
	struct kvt_tier *t = open_fs(root, "full", "1");
	void *buf = NULL;
	CHECK(posix_memalign(&buf, 4096, OBJ) == 0);
	struct kvt_key k;
	th_key(&k, 1, 99);
	th_obj_fill(buf, OBJ, 1);
	CHECK_EQ(th_write(t, &k, buf, OBJ), 0);
	CHECK_EQ(flush_sync(t), 0);
	char path[600];
	watch_leaf(root, &k, path, sizeof(path));
	atomic_store(&fail_dir_once, 1);
	int r1 = th_remove(t, &k), r2 = th_remove(t, &k);
	atomic_store(&leaf_syncs, 0);
	int f = flush_sync(t);
	int syncs = atomic_load(&leaf_syncs);
	printf("fs_flush_remove: fs.fsync=full, the leaf's fsync failing under a remove: remove "
	       "%d, again %d, then the flush %d synced the leaf %d times\n", r1, r2, f, syncs);
	CHECK_EQ(r1, -EIO);
	CHECK_EQ(r2, -ENOENT);
	CHECK_EQ(f, 0);
	CHECK(syncs >= 1);
	th_close(t);
	free(buf);
	rm_tree(root);
}

int main(void)
{
	back_to_back("data");
	back_to_back("full");
	failed_leaf_sync();
	printf("fs_flush_remove: ok\n");
	return 0;
}
