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
 *   4. with fs.fsync=full a remove is answered only after its leaf directory's fsync.
 * Exit 0 pass, 1 fail, 77 when slowfs or /dev/fuse is missing (a failure under CI=true).
 */
#include <unistd.h>

#include "config.h"
#include "lib/slowfs.h"
#include "lib/tierh.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

static struct slowfs fs;

struct flush_wait {
	_Atomic int done;
	_Atomic int64_t rc;
};

static void flush_cb(void *arg, int64_t rc)
{
	struct flush_wait *w = arg;
	atomic_store(&w->rc, rc);
	atomic_store(&w->done, 1);
}

/* Wait up to ms for the flush; true if it completed. */
static bool flush_done_within(struct flush_wait *w, int ms)
{
	for (int i = 0; i < ms / 10 && !atomic_load(&w->done); i++)
		usleep(10000);
	return atomic_load(&w->done);
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

	kill(fs.pid, SIGUSR1); /* directory fsyncs are held from now on */
	usleep(50000);
	struct flush_wait w1 = {0};
	CHECK_EQ(t->ops->flush(t, flush_cb, &w1), 0);
	bool early = flush_done_within(&w1, 600);
	printf("  1. flush with directory fsyncs held: %s after 600 ms\n",
	       early ? "completed" : "still waiting");
	CHECK(!early); /* it waits for the leaf directory's fsync */
	kill(fs.pid, SIGUSR2);
	CHECK(flush_done_within(&w1, 5000));
	CHECK_EQ(atomic_load(&w1.rc), 0);
	printf("     and completed once they were let go\n");

	kill(fs.pid, SIGUSR1);
	usleep(50000);
	struct flush_wait w2 = {0};
	CHECK_EQ(t->ops->flush(t, flush_cb, &w2), 0);
	bool quick = flush_done_within(&w2, 2000);
	printf("  2. a flush with nothing written since: %s\n", quick ? "completed" : "waited");
	CHECK(quick);
	CHECK_EQ(atomic_load(&w2.rc), 0);
	kill(fs.pid, SIGUSR2);

	CHECK_EQ(th_remove(t, &k), 0);
	kill(fs.pid, SIGUSR1);
	usleep(50000);
	struct flush_wait w3 = {0};
	CHECK_EQ(t->ops->flush(t, flush_cb, &w3), 0);
	early = flush_done_within(&w3, 600);
	printf("  3. flush after a remove, directory fsyncs held: %s after 600 ms\n",
	       early ? "completed" : "still waiting");
	CHECK(!early);
	kill(fs.pid, SIGUSR2);
	CHECK(flush_done_within(&w3, 5000));
	CHECK_EQ(atomic_load(&w3.rc), 0);
	th_close(t);

	const char *kvf[] = {"fs.dir", dir, "fs.fsync", "full", "fs.direct", "off", NULL};
	cfg = th_config(kvf);
	CHECK_EQ(th_open(&kvt__tier_fs_ops, cfg, &t), 0);
	kvt_config_destroy(cfg);
	CHECK_EQ(th_write(t, &k, obj, sizeof(obj)), 0);
	kill(fs.pid, SIGUSR1);
	usleep(50000);
	struct flush_wait w4 = {0};
	CHECK_EQ(t->ops->remove(t, &k, flush_cb, &w4), 0);
	early = flush_done_within(&w4, 600);
	printf("  4. fs.fsync=full: a remove with directory fsyncs held: %s after 600 ms\n",
	       early ? "answered" : "still waiting");
	CHECK(!early);
	kill(fs.pid, SIGUSR2);
	CHECK(flush_done_within(&w4, 5000));
	CHECK_EQ(atomic_load(&w4.rc), 0);
	th_close(t);
	slowfs_stop(&fs);
	printf("fs_flush_dir: ok\n");
	return 0;
}
