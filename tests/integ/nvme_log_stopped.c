/*
 * nvme_log_stopped.c - a log that stops writing during a run (no usable segment, a segment
 * header or log/head that cannot be written: "log writes stop") never lets a removed key
 * come back. Until 2026-12-03 a removal in that state took the object out of the index but
 * wrote no tombstone (nor did the tombstones queued when the log stopped ever land), so the
 * next open indexed the old put again: the removed key came back. The log is stopped here
 * without root: every segment of the cycle is cut to 1 MiB (shorter than one batch, passed
 * over by the run), which keeps the objects of its first MiB indexed.
 *   (1) removes before and after the stop are reported done, and none of the keys comes back
 *       after a clean close (the run voids the log on disk: the next open indexes none of
 *       it); a write in the stopped state takes the file path and survives.
 *   (2) an object dropped in the stopped state (its put keeps no tombstone either), written
 *       again (a file: the log is stopped) and then removed does not come back from the log.
 *   (3) when the log cannot be voided (its directory refuses the unlink: immutable as root,
 *       mode 0555 otherwise), a remove in the stopped state fails (the caller is told it is
 *       not durable) and the key is not served in the run; once the unlink works again,
 *       removes succeed and the first removed key stays gone after a reopen.
 *   (4) (root: exits 77 after (3) otherwise) a batch write that fails takes the removals it
 *       holds with it: the log stops and is voided, and the key stays removed after a
 *       reopen; a write after it (the file path) survives.
 */
#include "nvme_util.h"

#include <fcntl.h>

#include "lib/nvme_stale.h"

/* A log of 5 segments (80 MiB), keys 0 .. 299 of seed in 0.kvl (240) and 1.kvl, then
 * every segment of the cycle cut to 1 MiB: keys 0 .. 14 and 240 .. 254 stay indexed. */
static void make_short_log(const char *dir, uint64_t seed)
{
	struct kvt_tier *t;
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	st_write(t, seed, 0, 300);
	kvt__tier_close(t);
	char p[400], name[32];
	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "%d.kvl", i);
		st_path(p, sizeof(p), dir, name);
		int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		CHECK(fd >= 0);
		CHECK_EQ(ftruncate(fd, 1 << 20), 0);
		close(fd);
		nv_test_hdr_unsized(p); /* a cut read as the segment's end (nvme_log_cut.c) */
	}
}

/* make_short_log(root/name, seed), opened with the log lines cleared; its path in dir. */
static struct kvt_tier *open_short_log(char *dir, size_t size, const char *root, const char *name,
				       uint64_t seed)
{
	struct kvt_tier *t;
	snprintf(dir, size, "%s/%s", root, name);
	make_short_log(dir, seed);
	log_clear();
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	return t;
}

/* t closed and dir's log opened again. */
static struct kvt_tier *reopen(struct kvt_tier *t, const char *dir)
{
	kvt__tier_close(t);
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	return t;
}

/* Key i of seed removed: t_remove's answer. */
static int remove_key(struct kvt_tier *t, uint64_t seed, uint64_t i)
{
	struct kvt_key k = make_key(seed, i);
	return t_remove(t, &k);
}

/* Wait until the run has said its log writes stop. */
static void wait_stopped(void)
{
	for (int i = 0; i < 5000 && !log_count("log writes stop"); i++)
		usleep(1000);
	CHECK_EQ(log_count("log writes stop"), 1);
}

/* A write of a new key: its batch finds no usable segment, and the log stops. */
static void stop_log(struct kvt_tier *t, uint64_t seed)
{
	st_write(t, seed, 0, 1);
	wait_stopped();
}

/* Make dir's log directory allow (on) or refuse (off) an unlink: immutable as root, who
 * passes permission checks, mode 0555 otherwise. */
static void set_unlinkable(const char *dir, int on)
{
	char p[400];
	st_path(p, sizeof(p), dir, "");
	if (geteuid() != 0)
		CHECK_EQ(chmod(p, on ? 0755 : 0555), 0);
	else
		set_immutable(p, !on);
}

static void removes_around_stop(const char *root)
{
	char dir[300];

	/* (1) key 5 removed before the stop (its tombstone queued: the batch that takes it
	 * finds no segment), keys 7 and 245 after it. */
	struct kvt_tier *t = open_short_log(dir, sizeof(dir), root, "a", 1);
	CHECK_EQ(st_state(t, 1, 5), ST_V1);
	CHECK_EQ(st_state(t, 1, 245), ST_V1);
	CHECK_EQ(remove_key(t, 1, 5), 0);
	wait_stopped();
	CHECK_EQ(remove_key(t, 1, 7), 0);
	CHECK_EQ(remove_key(t, 1, 245), 0);
	st_write(t, 2, 0, 1); /* the file path */
	CHECK_EQ(st_state(t, 1, 7), ST_ABSENT);
	CHECK_EQ(st_state(t, 2, 0), ST_V1);
	log_clear();
	t = reopen(t, dir);
	int s5 = st_state(t, 1, 5), s7 = st_state(t, 1, 7), s245 = st_state(t, 1, 245);
	int s9 = st_state(t, 1, 9), sw = st_state(t, 2, 0);
	kvt__tier_close(t);
	printf("nvme_log_stopped: removed before the stop: key 5 %s; after it: keys 7 %s, 245 "
	       "%s; kept: key 9 %s; written while stopped: %s\n",
	       st_name(s5), st_name(s7), st_name(s245), st_name(s9), st_name(sw));
	CHECKM(s5 == ST_ABSENT, "a key removed before the log stopped came back: %s", st_name(s5));
	CHECKM(s7 == ST_ABSENT, "a key removed while the log was stopped came back: %s",
	       st_name(s7));
	CHECKM(s245 == ST_ABSENT, "a key removed while the log was stopped came back: %s",
	       st_name(s245));
	CHECK(s9 == ST_ABSENT || s9 == ST_V1);
	CHECK_EQ(sw, ST_V1);
}

static void drop_then_remove(const char *root)
{
	char dir[300];

	/* (2) key 8 dropped while the log is stopped, written again (a file), removed. */
	struct kvt_tier *t = open_short_log(dir, sizeof(dir), root, "b", 3);
	stop_log(t, 4);
	CHECK_EQ(st_state(t, 3, 8), ST_V1); /* read: served, so the drop takes it */
	struct kvt_key k = make_key(3, 8);
	t->ops->drop_corrupt(t, &k);
	for (int i = 0; i < 5000 && st_state(t, 3, 8) != ST_ABSENT; i++)
		usleep(1000);
	CHECK_EQ(st_state(t, 3, 8), ST_ABSENT);
	st_write(t, 3, 8, 9);
	CHECK_EQ(st_state(t, 3, 8), ST_V1);
	CHECK_EQ(t_remove(t, &k), 0);
	t = reopen(t, dir);
	int s8 = st_state(t, 3, 8);
	kvt__tier_close(t);
	printf("nvme_log_stopped: dropped while stopped, written again and removed: key 8 %s\n",
	       st_name(s8));
	CHECKM(s8 == ST_ABSENT, "a removed key came back from the log: %s", st_name(s8));
}

static void not_voidable(const char *root)
{
	char dir[300];

	/* (3) the log directory refuses unlinks: removes while stopped fail, until it allows
	 * them again. */
	struct kvt_tier *t = open_short_log(dir, sizeof(dir), root, "c", 5);
	stop_log(t, 6);
	set_unlinkable(dir, 0);
	int r5 = remove_key(t, 5, 5), g5 = st_state(t, 5, 5);
	int rw = remove_key(t, 6, 0); /* a file object: a key the log may still hold a put of */
	set_unlinkable(dir, 1);
	int r6 = remove_key(t, 5, 6);
	t = reopen(t, dir);
	int s5 = st_state(t, 5, 5);
	int s6 = st_state(t, 5, 6);
	kvt__tier_close(t);
	printf("nvme_log_stopped: log not voidable: remove of key 5 %s (then %s), of a file "
	       "object %s; voidable again: remove of key 6 %s; after a reopen keys 5 %s, 6 %s\n",
	       r5 ? strerror(-r5) : "done", st_name(g5), rw ? strerror(-rw) : "done",
	       r6 ? strerror(-r6) : "done", st_name(s5), st_name(s6));
	CHECK_EQ(g5, ST_ABSENT);
	CHECKM(r5 < 0 || s5 == ST_ABSENT, "a remove reported done, and the key came back: %s",
	       st_name(s5));
	CHECK(r5 < 0);
	CHECK(rw < 0);
	CHECK_EQ(r6, 0);
	CHECK_EQ(s5, ST_ABSENT);
	CHECK_EQ(s6, ST_ABSENT);
}

static void failed_batch(const char *root)
{
	char dir[300];
	struct kvt_tier *t;

	/* (4) a batch that fails (its segment made immutable, as root) loses the removals it
	 * holds with it: until 2026-12-03 they were never written, and the key came back. Now
	 * the log stops (and is voided): key 3 (0.kvl) removed while 1.kvl is appended to. */
	snprintf(dir, sizeof(dir), "%s/d", root);
	log_clear();
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	st_write(t, 7, 0, 250); /* 0.kvl, and 10 in 1.kvl */
	char p1[400];
	st_path(p1, sizeof(p1), dir, "1.kvl");
	set_immutable(p1, 1);
	CHECK_EQ(remove_key(t, 7, 3), 0); /* its batch goes to 1.kvl and fails */
	for (int i = 0; i < 5000 && !log_count("log batch write failed"); i++)
		usleep(1000);
	int failed = log_count("log batch write failed");
	st_write(t, 7, 250, 251);
	CHECK_EQ(t_flush(t), 0);
	set_immutable(p1, 0);
	t = reopen(t, dir);
	int s3 = st_state(t, 7, 3), s4 = st_state(t, 7, 4), s250 = st_state(t, 7, 250);
	kvt__tier_close(t);
	printf("nvme_log_stopped: a removal's batch failed (%d): key 3 %s; kept: keys 4 %s, "
	       "250 %s\n",
	       failed, st_name(s3), st_name(s4), st_name(s250));
	CHECK(failed >= 1);
	CHECKM(s3 == ST_ABSENT, "a key whose removal's batch failed came back: %s", st_name(s3));
	CHECK(s4 == ST_ABSENT || s4 == ST_V1);
	CHECK_EQ(s250, ST_V1);
}

int main(void)
{
	char root[] = "/tmp/kvt-nvme-log-stopped-XXXXXX";
	CHECK(mkdtemp(root));
	removes_around_stop(root);
	drop_then_remove(root);
	not_voidable(root);
	if (geteuid() != 0) {
		rm_rf(root);
		printf("SKIP (part 4): needs root to make a segment immutable\n");
		return 77;
	}
	failed_batch(root);
	rm_rf(root);
	printf("nvme_log_stopped: ok\n");
	return 0;
}
