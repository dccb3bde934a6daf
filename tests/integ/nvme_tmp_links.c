/*
 * nvme_tmp_links.c - the nvme tier's own side files, written through predictable temp names
 * (<dir>/.tmp.chains.<pid>, .tmp.budget.<pid>, .tmp.probe.<pid>), are created afresh
 * (nv_tmp_create: O_EXCL | O_NOFOLLOW after an unlink), so what anyone who can write the
 * directory plants under those names does no harm. Until 2026-12-06 (found by review) they
 * were opened with O_CREAT | O_TRUNC:
 *  1. a symbolic link at .tmp.chains.<pid> had its target, outside the store, truncated and
 *     overwritten at close;
 *  2. a FIFO at .tmp.budget.<pid> blocked the ring thread in open() at the first write of
 *     a new hour: every later call hung;
 *  3. a FIFO at .tmp.probe.<pid> blocked the tier's open for ever.
 * Each case runs in a child with an alarm: a hang, or a child that fails, is a failure.
 */
#include "nvme_util.h"
#include <signal.h>
#include <sys/wait.h>

static char root[256], dir[300], outside[300];

static void mk_store(void)
{
	rm_rf(root);
	CHECK_EQ(mkdir(root, 0700), 0);
	CHECK_EQ(mkdir(dir, 0700), 0);
}

/* Runs fn in a child under an alarm; returns its wait status. */
static int in_child(void (*fn)(void), int secs)
{
	pid_t p = fork();
	CHECK(p >= 0);
	if (p == 0) {
		alarm((unsigned)secs);
		fn();
		_exit(0);
	}
	int st = 0;
	CHECK_EQ(waitpid(p, &st, 0), p);
	return st;
}

static void case_chains_symlink(void)
{
	char tmp[400];
	snprintf(tmp, sizeof(tmp), "%s/.tmp.chains.%d", dir, (int)getpid());
	struct kvt_tier *t;
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "64MiB", NULL), 0);
	uint8_t *buf = abuf(65536);
	struct kvt_key k = make_key(7, 1), p = make_key(7, 0);
	fill_object(buf, 65536, &p);
	CHECK_EQ(t_write(t, &p, buf, 65536), 0);
	struct waiter w = WAITER_INIT;
	fill_object(buf, 65536, &k);
	CHECK_EQ(waiter_wait(&w, t->ops->write_chained(t, &k, &p, buf, 65536, waiter_cb, &w)), 0);
	/* planted while the tier runs (the open's scan deletes .tmp.* names) */
	CHECK_EQ(symlink(outside, tmp), 0);
	kvt__tier_close(t);
}

static void case_budget_fifo(void)
{
	char tmp[400], bf[400];
	snprintf(tmp, sizeof(tmp), "%s/.tmp.budget.%d", dir, (int)getpid());
	snprintf(bf, sizeof(bf), "%s/.kvtier.budget", dir);
	/* the budget file a previous run left, dated an hour ago (any restart) */
	FILE *f = fopen(bf, "w");
	CHECK(f);
	fprintf(f, "kvtier-budget-v1 %llu", (unsigned long long)(time(NULL) / 3600 - 1));
	for (int i = 0; i < 24; i++)
		fprintf(f, " 0");
	fprintf(f, "\n");
	fclose(f);
	struct kvt_tier *t;
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "64MiB", "nvme.write_budget",
			   "1GiB", NULL),
		 0);
	CHECK_EQ(mkfifo(tmp, 0600), 0); /* planted after the open's scan */
	uint8_t *buf = abuf(65536);
	struct kvt_key k = make_key(8, 1);
	fill_object(buf, 65536, &k);
	fprintf(stderr, "budget case: writing...\n");
	CHECK_EQ(t_write(t, &k, buf, 65536), 0);
	fprintf(stderr, "budget case: write returned\n");
	unlink(tmp);
	kvt__tier_close(t);
}

static void case_probe_fifo(void)
{
	char tmp[400];
	snprintf(tmp, sizeof(tmp), "%s/.tmp.probe.%d", dir, (int)getpid());
	CHECK_EQ(mkfifo(tmp, 0600), 0);
	struct kvt_tier *t;
	fprintf(stderr, "probe case: opening...\n");
	int rc = open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "64MiB", NULL);
	fprintf(stderr, "probe case: open returned %d\n", rc);
	if (rc == 0)
		kvt__tier_close(t);
}

int main(void)
{
	snprintf(root, sizeof(root), "/tmp/kvt-tmplinks-%d", (int)getpid());
	snprintf(dir, sizeof(dir), "%s/s", root);
	snprintf(outside, sizeof(outside), "%s/precious.txt", root);
	int fails = 0;

	mk_store();
	FILE *f = fopen(outside, "w");
	CHECK(f);
	fputs("precious data outside the store\n", f);
	fclose(f);
	int st = in_child(case_chains_symlink, 20);
	char got[256] = {0};
	f = fopen(outside, "r");
	CHECK(f);
	size_t n = fread(got, 1, sizeof(got) - 1, f);
	fclose(f);
	struct stat lst;
	int islink = lstat(outside, &lst) == 0 && S_ISLNK(lst.st_mode);
	fprintf(stderr, "1. chains: child status %d; file outside the store now holds %zu bytes: %.17s%s\n",
		st, n, got, strcmp(got, "precious data outside the store\n") ? " (CLOBBERED)" : " (intact)");
	(void)islink;
	if (strcmp(got, "precious data outside the store\n") || !WIFEXITED(st) || WEXITSTATUS(st))
		fails++;

	mk_store();
	st = in_child(case_budget_fifo, 10);
	fprintf(stderr, "2. budget FIFO: child %s\n",
		WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? "HUNG (killed by its 10 s alarm)"
							 : "finished");
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fails++;

	mk_store();
	st = in_child(case_probe_fifo, 10);
	fprintf(stderr, "3. probe FIFO: child %s\n",
		WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? "HUNG in open (killed by its 10 s alarm)"
							 : "finished");
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fails++;
	rm_rf(root);
	CHECKM(fails == 0, "%d of 3 planted side-file names did harm", fails);
	printf("nvme_tmp_links: ok\n");
	return 0;
}
