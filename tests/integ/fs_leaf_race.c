/*
 * fs_leaf_race.c - with fs.fsync=full, a put into a leaf directory that another writer of
 * this process has just made is not answered before that leaf's name in its parent is
 * durable. Writer A makes leaf XY (mkdirat) and is held in the fsync of its parent X;
 * writer B (same leaf) finds XY already there, publishes, and must not answer while A
 * still waits: until 2026-12-04 B fsynced XY only and answered, while XY itself could
 * still vanish in a power cut (found by review; src/tier_fs.c open_level). Directory
 * fsyncs are held by slowfs, one let through at a time. Exit 0 pass, 1 fail, 77 no slowfs
 * (a failure under CI=true). */
#include <unistd.h>

#include "config.h"
#include "lib/slowfs.h"
#include "lib/tierh.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

static struct slowfs fs;

int main(void)
{
	int rc = slowfs_start(&fs, "leafrace", "fsyncdir");
	if (rc == 77)
		return 77;
	CHECK_EQ(rc, 0);
	alarm(120);
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/store", fs.mnt);
	const char *kv[] = {"fs.dir", dir, "fs.fsync", "full", "fs.direct", "off",
			    "fs.threads", "2", NULL};
	struct kvt_config *cfg = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, cfg, &t), 0);
	kvt_config_destroy(cfg);
	static uint8_t obj[8192];
	th_obj_fill(obj, sizeof(obj), 3);
	int bad = 0;
	for (int round = 0; round < 8 && !bad; round++) {
		struct kvt_key kp, ka, kb;
		th_key(&kp, (uint64_t)round, 91);
		kp.bytes[0] = (uint8_t)(0x10 + round);
		kp.bytes[1] = 0x01;
		CHECK_EQ(th_write(t, &kp, obj, sizeof(obj)), 0); /* first level X exists */
		ka = kp;
		ka.bytes[1] = 0x02; /* leaf X/02: new */
		ka.bytes[31] ^= 1;
		kb = ka;
		kb.bytes[31] ^= 2; /* same leaf */
		kill(fs.pid, SIGUSR1);
		usleep(100000);
		struct th_pending wa = {0}, wb = {0};
		CHECK_EQ(t->ops->write(t, &ka, obj, sizeof(obj), th_pending_cb, &wa), 0);
		usleep(300000); /* A: leaf made, held in the fsync of X */
		CHECK_EQ(t->ops->write(t, &kb, obj, sizeof(obj), th_pending_cb, &wb), 0);
		usleep(300000); /* B: published, held in the fsync of X/02 */
		kill(fs.pid, SIGRTMIN); /* one directory fsync through */
		th_pending_done_within(&wb, 500);
		bool a = atomic_load(&wa.done), b = atomic_load(&wb.done);
		printf("  round %d, one directory fsync let through: A %s, B %s\n", round,
		       a ? "answered" : "waiting", b ? "answered" : "waiting");
		if (b && !a) {
			printf("FAIL: B's put was answered (fs.fsync=full) while the sync of its "
			       "leaf's parent, made by A, was still held\n");
			bad = 1;
		}
		kill(fs.pid, SIGUSR2);
		CHECK(th_pending_done_within(&wa, 5000));
		CHECK(th_pending_done_within(&wb, 5000));
	}
	th_close(t);
	slowfs_stop(&fs);
	if (bad)
		return 1;
	printf("fs_leaf_race: ok\n");
	return 0;
}
