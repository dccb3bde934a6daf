/*
 * kvt-test-labels: server
 *
 * nvme_dsync.c - with nvme.fsync=data a write is acknowledged only after the file system
 * has made it durable, whichever way the tier asks for it: an object of one I/O is written
 * with RWF_DSYNC (no separate fdatasync), a larger one with pieces and an fdatasync
 * (tier_nvme_ops.c). Why this test: a crash test (SIGKILL) cannot tell a synced write from
 * an unsynced one, the page cache survives it. So the tier runs on tests/fuse/slowfs, a
 * real FUSE passthrough whose fsync requests can be held (--stall-only fsync): a DSYNC
 * write reaches the file system as a FUSE fsync, like fdatasync does. While fsync is held,
 * no fsync=data write may complete; once released, each completes and reads back whole.
 * The same writes with nvme.fsync=none complete while fsync is held (the hold stops only
 * syncs, so the check above can fail). Exit 0 pass, 1 fail, 77 without slowfs or
 * /dev/fuse (a failure under CI=true: see CMakeLists.txt).
 */
#include <signal.h>

#include "nvme_util.h"
#include "lib/slowfs.h"


static int wait_ms(struct waiter *w, int ms)
{
	for (int i = 0; i < ms / 10; i++) {
		pthread_mutex_lock(&w->m);
		int d = w->done;
		pthread_mutex_unlock(&w->m);
		if (d)
			return 1;
		usleep(10000);
	}
	return 0;
}

/* Writes of one I/O (2 MiB + the 4 KiB header block) and of several (5 MiB + 4 KiB) with
 * the given nvme.fsync while slowfs holds every fsync; held says whether they must wait. */
static void run(pid_t fs, const char *dir, const char *fsync, int held)
{
	static const uint64_t lens[] = {(2u << 20) + 4096, (5u << 20) + 4096};
	struct kvt_tier *t;
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "64MiB", "nvme.fsync", fsync,
			   "nvme.direct", "off", "nvme.preallocate", "0", NULL),
		 0);
	for (int i = 0; i < 2; i++) {
		uint64_t len = lens[i];
		struct kvt_key k = make_key(held ? 11 : 12, (uint64_t)i);
		uint8_t *buf = abuf(len), *back = abuf(len);
		fill_object(buf, len, &k);
		struct waiter w = WAITER_INIT;
		CHECK_EQ(kill(fs, SIGUSR1), 0); /* hold fsync */
		CHECK_EQ(t->ops->write(t, &k, buf, len, waiter_cb, &w), 0);
		int done = wait_ms(&w, 700);
		fprintf(stderr, "  fsync=%s, %llu B: %s while fsync is held\n", fsync,
			(unsigned long long)len, done ? "completed" : "waiting");
		CHECK_EQ(done, !held);
		CHECK_EQ(kill(fs, SIGUSR2), 0);
		CHECK_EQ(waiter_wait(&w, 0), 0);
		CHECK_EQ(t_read1(t, &k, back, 0, len), (int)len);
		CHECK_EQ(check_object(back, len, &k), 0);
		free(buf);
		free(back);
	}
	kvt__tier_close(t);
}

static struct slowfs g_fs;

int main(void)
{
	int rc = slowfs_start(&g_fs, "dsync", "fsync");
	if (rc == 77)
		return 77;
	CHECK_EQ(rc, 0);
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/d", g_fs.mnt);
	CHECK_EQ(mkdir(dir, 0700), 0);
	run(g_fs.pid, dir, "data", 1);
	run(g_fs.pid, dir, "none", 0);
	slowfs_stop(&g_fs);
	fprintf(stderr, "nvme_dsync: ok\n");
	return 0;
}
