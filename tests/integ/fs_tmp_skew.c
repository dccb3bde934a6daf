/*
 * fs_tmp_skew.c - whether a temporary is a dead writer's does not depend on the writer's
 * clock. Until 2026-12-06 a sweep removed a temporary whose ctime was fs.tmp_max_age_s
 * behind this node's clock; on a shared file system a file is dated by the writer's clock
 * (CephFS: the writing client's), so
 *  - a live writer whose clock is behind had its temporary removed under it at once, and
 *  - a dead writer whose clock was ahead left a temporary no sweep ever removed.
 * Now a temporary is stale once this node's sweeps have seen it unchanged (file, size,
 * mtime, ctime) for fs.tmp_max_age_s by this node's monotonic clock. The two clocks are
 * real ctimes on a loop-mounted ext4 image, set with debugfs while it is unmounted (a
 * month behind, a month ahead), as such writers would have left them. With
 * fs.tmp_max_age_s = 2 and fs.bytes = 16 objects (so that every write sweeps):
 *  1. the first sweep keeps both (it has not seen them before);
 *  2. the "live" one grows (its writer writes on), then a sweep 2.5 s after the first
 *     removes the dead one (unchanged since) and keeps the live one (changed since);
 *  3. a sweep 2.5 s later removes the live one too (its writer died meanwhile);
 *  4. after a restart with fs.tmp_max_age_s an hour, a temporary dated a month ago by this
 *     node's clock goes once seen unchanged for fs.tmp_grace_s, one dated now stays.
 * Needs root (mount, debugfs); skips otherwise (exit 77).
 */
#include <fcntl.h>
#include <sys/stat.h>

#include "lib/tierh.h"
#include "lib/fs_sweep.h"
#include "lib/loop_image.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

#define OBJ 65536


static void count_log(void *arg, int level, const char *msg)
{
	(void)arg;
	fs_sweep_log_line(msg);
	if (level <= KVT_LOG_WARN || getenv("KVT_TEST_VERBOSE"))
		fprintf(stderr, "  [tier %d] %s\n", level, msg);
}

/* A write that sweeps after it (every write: fs.bytes is 16 objects), and the sweep over. */
static void write_and_sweep(struct kvt_tier *t, uint64_t i, const uint8_t *obj)
{
	fs_write_and_sweep(t, i, 91, obj, OBJ);
}

static bool present(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

int main(void)
{
	int rc = loop_root("fs-tmp-skew");
	if (rc)
		return rc;
	loop_mount("img", "mnt", 32, true);
	char dir[400], leafrel[100], hex[65], live[800], dead[800], liverel[300], deadrel[300];
	snprintf(dir, sizeof(dir), "%s/mnt/store", g_root);
	struct kvt_key k;
	th_key(&k, 1, 90);
	kvt_key_to_hex(&k, hex);
	snprintf(leafrel, sizeof(leafrel), "store/v1/%.2s/%.2s", hex, hex + 2);
	snprintf(liverel, sizeof(liverel), "%s/.%s.tmp.slowclock.1.0000000000000001.0", leafrel,
		 hex);
	snprintf(deadrel, sizeof(deadrel), "%s/.%s.tmp.fastclock.2.0000000000000002.0", leafrel,
		 hex);
	snprintf(live, sizeof(live), "%s/mnt/%s", g_root, liverel);
	snprintf(dead, sizeof(dead), "%s/mnt/%s", g_root, deadrel);
	sh("mkdir -p %s/mnt/%s && head -c 4096 /dev/zero > %s && head -c 4096 /dev/zero > %s",
	   g_root, leafrel, live, dead);
	/* Dated by the writers' clocks: a month behind this node's, a month ahead. */
	long now = (long)time(NULL), month = 30L * 86400;
	sh("umount %s/mnt && debugfs -w -R 'set_inode_field /%s ctime @%ld' %s/img >/dev/null 2>&1"
	   " && debugfs -w -R 'set_inode_field /%s ctime @%ld' %s/img >/dev/null 2>&1 && "
	   "mount -o loop %s/img %s/mnt",
	   g_root, liverel, now - month, g_root, deadrel, now + month, g_root, g_root, g_root);
	struct stat st;
	CHECK_EQ(lstat(live, &st), 0);
	CHECK(st.st_ctime < now - month / 2);
	CHECK_EQ(lstat(dead, &st), 0);
	CHECK(st.st_ctime > now + month / 2);

	char bytes[32];
	snprintf(bytes, sizeof(bytes), "%d", 16 * OBJ);
	const char *kv[] = {"fs.dir", dir, "fs.direct", "off", "fs.fsync", "none",
			    "fs.threads", "2", "fs.tmp_max_age_s", "2", "fs.bytes", bytes, NULL};
	struct kvt_config *c = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, c, &t), 0);
	kvt_config_destroy(c);
	t->log.fn = count_log;
	t->log.level = KVT_LOG_DEBUG;
	uint8_t *obj = malloc(OBJ);
	CHECK(obj);
	th_obj_fill(obj, OBJ, 9);

	/* 1. First seen: both stay, whatever their ctimes say. */
	write_and_sweep(t, 10, obj);
	printf("  1. first sweep: the live writer's temporary (clock a month behind) %s, the "
	       "dead one's (a month ahead) %s\n", present(live) ? "kept" : "REMOVED",
	       present(dead) ? "kept" : "removed");
	CHECKM(present(live), "a live writer's temporary was removed at first sight (its ctime "
			      "is a month old by its writer's slow clock)");
	CHECK(present(dead));

	/* 2. The live writer writes on; the dead one's stays as it is. */
	sleep(1);
	int fd = open(live, O_WRONLY | O_APPEND);
	CHECK(fd >= 0);
	char more[4096] = {0};
	CHECK_EQ(write(fd, more, sizeof(more)), (ssize_t)sizeof(more));
	close(fd);
	usleep(1500 * 1000);
	write_and_sweep(t, 11, obj);
	printf("  2. 2.5 s later: the live temporary (changed 1.5 s ago) %s, the dead one "
	       "(unchanged) %s\n", present(live) ? "kept" : "REMOVED",
	       present(dead) ? "KEPT" : "removed");
	CHECK(present(live));
	CHECKM(!present(dead), "a dead writer's temporary, unchanged for 2.5 s with "
			       "fs.tmp_max_age_s 2, was kept (its ctime is in the future)");

	/* 3. The live writer died: its temporary goes once unchanged for 2 s. */
	usleep(2500 * 1000);
	write_and_sweep(t, 12, obj);
	printf("  3. 2.5 s later, unchanged: the live writer's temporary %s\n",
	       present(live) ? "KEPT" : "removed");
	CHECK(!present(live));
	th_close(t);

	/* 4. A restarted writer (fs.tmp_max_age_s an hour) finds debris dated a month ago by
	 * this node's clock and a temporary dated now: the old one goes once its sweeps have
	 * seen it unchanged for fs.tmp_grace_s (1 s here), the new one waits for the hour.
	 * Without the grace a file system filled by dead writers stayed full for an hour after
	 * a restart (every temporary first seen then). */
	char oldrel[300], newrel[300], oldp[800], newp[800];
	snprintf(oldrel, sizeof(oldrel), "%s/.%s.tmp.died.3.0000000000000003.0", leafrel, hex);
	snprintf(newrel, sizeof(newrel), "%s/.%s.tmp.busy.4.0000000000000004.0", leafrel, hex);
	snprintf(oldp, sizeof(oldp), "%s/mnt/%s", g_root, oldrel);
	snprintf(newp, sizeof(newp), "%s/mnt/%s", g_root, newrel);
	sh("head -c 4096 /dev/zero > %s && head -c 4096 /dev/zero > %s", oldp, newp);
	now = (long)time(NULL);
	sh("umount %s/mnt && debugfs -w -R 'set_inode_field /%s ctime @%ld' %s/img >/dev/null 2>&1"
	   " && mount -o loop %s/img %s/mnt",
	   g_root, oldrel, now - month, g_root, g_root, g_root);
	CHECK_EQ(lstat(oldp, &st), 0);
	CHECK(st.st_ctime < now - month / 2);
	const char *kv2[] = {"fs.dir", dir, "fs.direct", "off", "fs.fsync", "none",
			     "fs.threads", "2", "fs.tmp_max_age_s", "3600", "fs.tmp_grace_s", "1",
			     "fs.bytes", bytes, NULL};
	c = th_config(kv2);
	CHECK_EQ(th_open(&kvt__tier_fs_ops, c, &t), 0);
	kvt_config_destroy(c);
	t->log.fn = count_log;
	t->log.level = KVT_LOG_DEBUG;
	write_and_sweep(t, 20, obj);
	printf("  4. restart, first sweep: the month-old temporary %s, the new one %s\n",
	       present(oldp) ? "kept" : "REMOVED", present(newp) ? "kept" : "REMOVED");
	CHECK(present(oldp) && present(newp));
	usleep(1500 * 1000);
	write_and_sweep(t, 21, obj);
	printf("     1.5 s later, both unchanged: the month-old one %s, the new one %s\n",
	       present(oldp) ? "KEPT" : "removed", present(newp) ? "kept" : "REMOVED");
	CHECKM(!present(oldp), "a temporary dated a month ago, unchanged for 1.5 s with "
			       "fs.tmp_grace_s 1, was kept");
	CHECKM(present(newp), "a temporary dated now was removed before fs.tmp_max_age_s");
	th_close(t);
	free(obj);
	printf("fs_tmp_skew: ok\n");
	return 0;
}
