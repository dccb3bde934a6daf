/*
 * nvme_log_fdlimit.c - an open of the tier that fails changes nothing of the log. A log
 * whose 1.kvl was deleted (a gap: the open voids every segment and rewrites log/head) is
 * opened read-write in child processes with RLIMIT_NOFILE raised one descriptor at a time
 * from just above those in use, until an open succeeds. The opens that fail run out of
 * descriptors at some step - a segment, the io_uring ring - and until 2026-12-03 those
 * failing at the ring (after the index rebuild) had already voided the log and written
 * log/head: safe (the next open voids again) but not what a failed open may do. Checked:
 * every failed open leaves every entry of log/ as it was (size and mtime), at least one
 * failed after the index was rebuilt, and the open that succeeds voids the log.
 */
#include "nvme_util.h"

#include <sys/resource.h>
#include <sys/wait.h>

#include "lib/nvme_stale.h"

/* Open dir read-write with descriptors below lim only (the child keeps only 0 .. 2 of
 * those it inherits): 0 opened, 1 failed at the ring (after the index rebuild), 2 failed
 * before. */
static int open_limited(const char *dir, int lim)
{
	fflush(stdout);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (!pid) {
		struct rlimit r;
		CHECK_EQ(close_range(3, ~0u, 0), 0);
		CHECK_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
		r.rlim_cur = (rlim_t)lim;
		CHECK_EQ(setrlimit(RLIMIT_NOFILE, &r), 0);
		log_clear();
		struct kvt_tier *t;
		int rc = st_open(&t, dir, "80MiB", 0);
		if (!rc) {
			int voided = log_count("1.kvl is missing");
			kvt__tier_close(t);
			_exit(voided == 1 ? 0 : 3);
		}
		_exit(log_count("io_uring setup failed") ? 1 : 2);
	}
	int st = 0;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st));
	return WEXITSTATUS(st);
}

int main(void)
{
	char root[] = "/tmp/kvt-nvme-log-fdlimit-XXXXXX";
	CHECK(mkdtemp(root));
	char dir[300], p[400];
	snprintf(dir, sizeof(dir), "%s/a", root);
	struct kvt_tier *t;
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	st_write(t, 1, 0, 700); /* 0.kvl .. 2.kvl */
	kvt__tier_close(t);
	st_path(p, sizeof(p), dir, "1.kvl");
	CHECK_EQ(unlink(p), 0);

	int lim = 3, late = 0, early = 0, changed = 0, rc = 2;
	for (; lim < 64; lim++) {
		uint64_t before = st_log_sum(dir);
		rc = open_limited(dir, lim);
		if (!rc)
			break;
		CHECK(rc == 1 || rc == 2);
		late += rc == 1;
		early += rc == 2;
		if (st_log_sum(dir) != before) {
			changed++;
			printf("nvme_log_fdlimit: RLIMIT_NOFILE %d: the open failed (%s) and changed "
			       "the log\n",
			       lim, rc == 1 ? "io_uring setup" : "before it");
		}
	}
	printf("nvme_log_fdlimit: %d open(s) failed before the ring, %d at it, %d changed the "
	       "log; RLIMIT_NOFILE %d: opened (%d)\n",
	       early, late, changed, lim, rc);
	CHECK_EQ(rc, 0); /* opened, and voided the log */
	CHECK(late >= 1);
	CHECKM(changed == 0, "%d failed open(s) changed the log", changed);
	/* the void made: nothing of the log indexed, the log usable */
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	CHECK_EQ(st_state(t, 1, 10), ST_ABSENT);
	st_write(t, 2, 0, 10);
	kvt__tier_close(t);
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	for (uint64_t i = 0; i < 10; i++)
		CHECK_EQ(st_state(t, 2, i), ST_V1);
	kvt__tier_close(t);

	rm_rf(root);
	printf("nvme_log_fdlimit: ok\n");
	return 0;
}
