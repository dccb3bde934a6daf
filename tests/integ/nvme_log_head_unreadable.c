/*
 * nvme_log_head_unreadable.c - log/head exists but cannot be opened (immutable as root,
 * mode 0 otherwise): the open fails, with one line, and changes nothing; once the head
 * opens again every live object is there and no removed key is back. Until 2026-12-03 the
 * open took any failure to open log/head for "no head": the segments' headers say the log
 * has one, so it was taken for deleted and the log voided ("log/head is missing") - a
 * read-write open wrote every segment a header of its next generation, and the live
 * objects were gone for good, though nothing was lost on disk (a segment that fails to open
 * for such a reason already failed the open: nvme_log_outside.c part 4). No removed key
 * came back either way (a void indexes nothing): what the head check guards held, the
 * data did not.
 */
#include "nvme_util.h"

#include "lib/nvme_stale.h"

/* Make p fail a read-write open (on) or open again (off): immutable as root, who passes
 * permission checks (EPERM), mode 0 otherwise (EACCES). */
static void set_unopenable(const char *p, int on)
{
	if (geteuid() != 0) {
		CHECK_EQ(chmod(p, on ? 0 : 0600), 0);
		return;
	}
	set_immutable(p, on);
}

int main(void)
{
	char root[] = "/var/tmp/kvt-nvme-log-head-XXXXXX", dir[300], p[400];
	CHECK(mkdtemp(root));
	snprintf(dir, sizeof(dir), "%s/s", root);

	/* 600 keys over three segments; key 100 replaced, key 300 removed. */
	struct kvt_tier *t;
	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	st_write(t, 9, 0, 600);
	st_overwrite_remove(t, 9, 100, 300);
	kvt__tier_close(t);

	st_path(p, sizeof(p), dir, "head");
	set_unopenable(p, 1);
	uint64_t before = st_log_sum(dir);
	log_clear();
	int orc = st_open(&t, dir, "80MiB", 0);
	int said = log_count("log/head");
	if (orc == 0)
		kvt__tier_close(t);
	uint64_t after = st_log_sum(dir);
	set_unopenable(p, 0);

	CHECK_EQ(st_open(&t, dir, "80MiB", 0), 0);
	int lost = 0, back = 0, wrong = 0;
	for (uint64_t i = 0; i < 600; i++) {
		int st = st_state(t, 9, i);
		int want = i == 300 ? ST_ABSENT : i == 100 ? ST_V2 : ST_V1;
		lost += st == ST_ABSENT && want != ST_ABSENT;
		back += i == 300 && st != ST_ABSENT;
		wrong += st != want && st != ST_ABSENT;
	}
	kvt__tier_close(t);
	printf("nvme_log_head_unreadable: log/head failing to open: open %s, log %s; once it "
	       "opens: %d of 599 live keys lost, removed key %s, %d read wrong\n",
	       orc ? strerror(-orc) : "succeeded", after == before ? "unchanged" : "CHANGED", lost,
	       back ? "BACK" : "absent", wrong);
	CHECKM(!lost, "%d live keys lost after log/head failed to open once", lost);
	CHECK(!back && !wrong);
	CHECK(orc < 0);
	CHECK_EQ(after, before);
	CHECK_EQ(said, 1);
	rm_rf(root);
	printf("nvme_log_head_unreadable: ok\n");
	return 0;
}
