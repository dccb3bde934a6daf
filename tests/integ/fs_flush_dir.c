/*
 * fs_flush_dir.c - with fs.fsync=data (the default) each object's data is synced before it
 * is published, but the name it is published under lives in its leaf directory, and only a
 * directory fsync makes that durable. A flush used to return without one, so a power loss
 * after a flush that said "durable" could still lose the object. On the test FUSE file
 * system (tests/fuse/slowfs, which passes directory fsyncs through and can hold only them,
 * --stall-only fsyncdir):
 *   1. a write, then a flush while directory fsyncs are held: the flush waits for them (it
 *      is still out after 600 ms) and completes, status 0, once they are let go - the old
 *      tier's flush completed at once, without any;
 *   2. a second flush with nothing written since does not fsync again (it completes while
 *      directory fsyncs are held);
 *   3. a remove, then a flush while directory fsyncs are held: the flush waits for them too
 *      (the name's removal is durable only once its leaf is synced; before 2026-12-03 the
 *      flush completed at once, and a removed key could come back after a power cut);
 *   4. with fs.fsync=full a remove is answered only after its leaf directory's fsync;
 *   5. a write that made its leaf (and the first level above it): the flush also syncs the
 *      directories the new ones were made in - a new leaf's name is durable only once its
 *      parent is synced - so with one directory fsync let through (SIGRTMIN) it still
 *      waits; the old tier synced the leaf alone and answered;
 *   6. the same for fs.fsync=full's write, which syncs them before it answers.
 * Exit 0 pass, 1 fail, 77 when slowfs or /dev/fuse is missing (a failure under CI=true).
 */
#include <unistd.h>

#include "config.h"
#include "lib/slowfs.h"
#include "lib/tierh.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

static struct slowfs fs;

/* With directory fsyncs held: start a flush (or, remove non-NULL, a remove of it) and
 * check that it is still out after 600 ms, then let the fsyncs go and check it completes
 * with status 0 (sections 1, 3, 4). */
static void waits_for_dir_fsync(struct kvt_tier *t, const struct kvt_key *remove,
				const char *what)
{
	kill(fs.pid, SIGUSR1); /* directory fsyncs are held from now on */
	usleep(50000);
	struct th_pending w = {0};
	if (remove)
		CHECK_EQ(t->ops->remove(t, remove, th_pending_cb, &w), 0);
	else
		CHECK_EQ(t->ops->flush(t, th_pending_cb, &w), 0);
	bool early = th_pending_done_within(&w, 600);
	printf("  %s, directory fsyncs held: %s after 600 ms\n", what,
	       early ? "answered" : "still waiting");
	CHECK(!early);
	kill(fs.pid, SIGUSR2);
	CHECK(th_pending_done_within(&w, 5000));
	CHECK_EQ(atomic_load(&w.rc), 0);
	printf("     and answered, status 0, once they were let go\n");
}

/* A key whose first-level directory is not in the store dir yet. */
static void fresh_key(const char *dir, struct kvt_key *k)
{
	char hex[65], p[4400];
	for (uint64_t id = 100;; id++) {
		th_key(k, id, 77);
		kvt_key_to_hex(k, hex);
		snprintf(p, sizeof(p), "%s/v1/%.2s", dir, hex);
		if (access(p, F_OK) < 0)
			return;
	}
}

/* Directory fsyncs held: a flush (put NULL) or a write of put, into a leaf that does not
 * exist yet, is still out after 600 ms, and again after one directory fsync is let through
 * (the leaf's own: there are more to wait for, its parent's and v1's); once they are all
 * let go it completes with status 0 (sections 5, 6). */
static void waits_for_parents(struct kvt_tier *t, const struct kvt_key *put, const void *obj,
			      size_t len, const char *what)
{
	kill(fs.pid, SIGUSR1);
	usleep(50000);
	struct th_pending w = {0};
	if (put)
		CHECK_EQ(t->ops->write(t, put, obj, len, th_pending_cb, &w), 0);
	else
		CHECK_EQ(t->ops->flush(t, th_pending_cb, &w), 0);
	CHECK(!th_pending_done_within(&w, 600));
	kill(fs.pid, SIGRTMIN); /* one directory fsync through */
	bool early = th_pending_done_within(&w, 600);
	printf("  %s, one directory fsync let through: %s after 600 ms\n", what,
	       early ? "answered (the new directories' parents never synced)" : "still waiting");
	CHECK(!early);
	kill(fs.pid, SIGUSR2);
	CHECK(th_pending_done_within(&w, 5000));
	CHECK_EQ(atomic_load(&w.rc), 0);
}

int main(void)
{
	int rc = slowfs_start(&fs, "flushdir", "fsyncdir");
	if (rc == 77)
		return 77;
	CHECK_EQ(rc, 0);
	alarm(120);
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/store", fs.mnt);
	const char *kv[] = {"fs.dir", dir, "fs.fsync", "data", "fs.direct", "off", NULL};
	struct kvt_config *cfg = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, cfg, &t), 0);
	kvt_config_destroy(cfg);
	uint8_t obj[8192];
	th_obj_fill(obj, sizeof(obj), 3);
	struct kvt_key k;
	th_key(&k, 1, 77);
	CHECK_EQ(th_write(t, &k, obj, sizeof(obj)), 0);

	waits_for_dir_fsync(t, NULL, "1. flush after a write");

	kill(fs.pid, SIGUSR1);
	usleep(50000);
	struct th_pending w2 = {0};
	CHECK_EQ(t->ops->flush(t, th_pending_cb, &w2), 0);
	bool quick = th_pending_done_within(&w2, 2000);
	printf("  2. a flush with nothing written since: %s\n", quick ? "completed" : "waited");
	CHECK(quick);
	CHECK_EQ(atomic_load(&w2.rc), 0);
	kill(fs.pid, SIGUSR2);

	CHECK_EQ(th_remove(t, &k), 0);
	waits_for_dir_fsync(t, NULL, "3. flush after a remove");
	th_close(t);

	const char *kvf[] = {"fs.dir", dir, "fs.fsync", "full", "fs.direct", "off", NULL};
	cfg = th_config(kvf);
	CHECK_EQ(th_open(&kvt__tier_fs_ops, cfg, &t), 0);
	kvt_config_destroy(cfg);
	CHECK_EQ(th_write(t, &k, obj, sizeof(obj)), 0);
	waits_for_dir_fsync(t, &k, "4. fs.fsync=full: a remove");
	th_close(t);

	/* One worker: the directories are synced one at a time. */
	const char *kv1[] = {"fs.dir", dir, "fs.fsync", "data", "fs.direct", "off",
			     "fs.threads", "1", NULL};
	cfg = th_config(kv1);
	CHECK_EQ(th_open(&kvt__tier_fs_ops, cfg, &t), 0);
	kvt_config_destroy(cfg);
	struct kvt_key k5;
	fresh_key(dir, &k5);
	CHECK_EQ(th_write(t, &k5, obj, sizeof(obj)), 0);
	waits_for_parents(t, NULL, NULL, 0, "5. flush after a write that made its leaf");
	th_close(t);

	const char *kv1f[] = {"fs.dir", dir, "fs.fsync", "full", "fs.direct", "off",
			      "fs.threads", "1", NULL};
	cfg = th_config(kv1f);
	CHECK_EQ(th_open(&kvt__tier_fs_ops, cfg, &t), 0);
	kvt_config_destroy(cfg);
	fresh_key(dir, &k5);
	waits_for_parents(t, &k5, obj, sizeof(obj),
			  "6. fs.fsync=full: a write that made its leaf");
	th_close(t);
	slowfs_stop(&fs);
	printf("fs_flush_dir: ok\n");
	return 0;
}
