/*
 * nvme_log_gap_cycle.c - a run that finds a gap in the log's segment numbers keeps the
 * whole cycle its capacity is computed for. With 1.kvl deleted from outside, the open-time
 * scan takes 0.kvl as the log and does not index 2.kvl (tier_nvme_log_recover.c); the run
 * creates 1.kvl again and, going on, reaches 2.kvl. Before the fix it tried to create that
 * one too (O_EXCL: "File exists"), took it for a full file system and cycled over 0 and 1
 * only: (a) the live capacity (3 segments, nvme.bytes less two segments) no longer fit the
 * 2-segment cycle, so reusing 0.kvl evicted acknowledged objects far below it; (b) 1.kvl,
 * which holds the run's tombstone of a key 2.kvl still has a put of, was reused while
 * 2.kvl was not, so at the next open (2.kvl in the cycle again) the removed key came back.
 * Now the files past a gap that the cycle reaches are its segments, and the capacity is
 * that of the cycle; and the open that finds the gap voids the whole log (nothing of it is
 * indexed) and starts appending at the missing segment.
 * Second part: a key only a segment past the gap holds, removed then (nothing indexed to
 * remove), stays removed at the next open (it came back once the run had filled the gap
 * and the next open indexed that segment again).
 * Third part: a wrapped log with a gap mid-lap, a key before the gap removed by a
 * tombstone in a segment past it (newer than the deleted one): it stays removed (it came
 * back while the segments before the gap were indexed).
 * Fourth part: an entry that cannot be a segment (a directory "3.kvl") ends the cycle
 * before it, and the capacity follows (it stayed that of 5 segments while the run, failing
 * to create 3.kvl, cycled over 3).
 * Fifth part (root: an immutable log directory): the gap's segment cannot be created again
 * while segments past it exist: log writes stop and the run's puts take the file path, so
 * a flush's puts survive the next open - until 2026-12-05 the cycle shrank to the segments
 * before the gap, the run appended there, and the next open, finding the gap again,
 * voided the log with every one of them.
 */
#include "nvme_util.h"

#include "lib/nvme_gap.h"

#define OBJ GAP_OBJ
#define NEW 480 /* 30 MiB: past 1.kvl, into 2.kvl (the cycle must not end at 1) */

/* Keys of the second run missing (the first run's went when the gap voided the log). */
static int missing(struct kvt_tier *t)
{
	int n = 0;
	for (uint64_t i = 0; i < NEW; i++)
		n += !gap_present(t, 2, i);
	return n;
}

int main(void)
{
	char root[] = "/tmp/kvt-nvme-log-gap-cycle-XXXXXX";
	CHECK(mkdtemp(root));
	char dir[300], p[400];
	snprintf(dir, sizeof(dir), "%s/d", root);
	struct kvt_tier *t;
	uint8_t *b = abuf(OBJ);
	/* Keys 0 .. 599 in segments 0, 1 and 2 (480 .. 599); then 1.kvl goes. */
	gap_make(dir, 1, b);

	/* Key 500 (a stale put in 2.kvl) written again and removed: its tombstone goes to the
	 * new 1.kvl. Then 30 MiB of new keys: the append point goes past 1.kvl. */
	log_clear();
	CHECK_EQ(gap_open_small(&t, dir), 0);
	struct kvt_tier_stats ts;
	memset(&ts, 0, sizeof(ts));
	t->ops->stats(t, &ts);
	CHECK_EQ(ts.capacity_bytes, 48ull << 20);
	CHECK_EQ(gap_present(t, 1, 100), 0); /* the log voided: 1.kvl's tombstones are gone */
	CHECK_EQ(gap_present(t, 1, 500), 0);
	struct kvt_key k = make_key(1, 500);
	fill_object(b, OBJ, &k);
	CHECK_EQ(t_write(t, &k, b, OBJ), 0);
	CHECK_EQ(t_remove(t, &k), 0);
	for (uint64_t i = 0; i < NEW; i++) {
		k = make_key(2, i);
		fill_object(b, OBJ, &k);
		CHECK_EQ(t_write(t, &k, b, OBJ), 0);
	}
	int lost = missing(t);
	int shrunk = log_count("the log keeps");
	kvt__tier_close(t);

	/* 2.kvl is in the cycle again: the removal stays, and nothing else went. */
	CHECK_EQ(gap_open_small(&t, dir), 0);
	int back = gap_present(t, 1, 500);
	int lost_reopen = missing(t);
	kvt__tier_close(t);
	printf("nvme_log_gap_cycle: cycle shrunk %d time(s); %d of %d keys evicted below capacity "
	       "(%d after the reopen); removed key back after the reopen: %d\n",
	       shrunk, lost, NEW, lost_reopen, back);
	CHECK_EQ(lost, 0); /* was: 0.kvl reused, 720 objects in 2 segments */
	CHECK_EQ(back, 0); /* was: 1.kvl's tombstone reused away, 2.kvl's put back */
	CHECK_EQ(lost_reopen, 0);
	CHECK_EQ(shrunk, 0); /* was: "log segment 2: File exists: the log keeps 2 segments" */

	/* A key only a segment past the gap holds (500, in 2.kvl), removed while that segment
	 * is not indexed: the remove finds nothing, and the key must not come back once the
	 * run has filled the gap (the next open indexes 2.kvl again unless it was voided). */
	snprintf(dir, sizeof(dir), "%s/f", root);
	gap_make(dir, 4, b);
	CHECK_EQ(gap_open_small(&t, dir), 0);
	CHECK_EQ(gap_present(t, 4, 500), 0);
	k = make_key(4, 500);
	int removed = t_remove(t, &k);
	for (uint64_t i = 0; i < 10; i++) { /* into the recreated 1.kvl */
		k = make_key(5, i);
		fill_object(b, OBJ, &k);
		CHECK_EQ(t_write(t, &k, b, OBJ), 0);
	}
	kvt__tier_close(t);
	CHECK_EQ(gap_open_small(&t, dir), 0);
	back = gap_present(t, 4, 500);
	int kept = gap_present(t, 5, 9) + !gap_present(t, 4, 100);
	kvt__tier_close(t);
	printf("nvme_log_gap_cycle: a key only past the gap, removed (%d): back at the next open: "
	       "%d\n",
	       removed, back);
	CHECK(removed == 0 || removed == -ENOENT);
	CHECK_EQ(back, 0); /* was: 2.kvl indexed again, its put of key 500 back */
	CHECK_EQ(kept, 2);

	/* A wrapped log whose gap is mid-lap: key 1300 put in 0.kvl (second lap), removed by a
	 * tombstone in 2.kvl, which is newer than the deleted 1.kvl. Indexing the segments
	 * before the gap (and voiding or ignoring those past it) brought key 1300 back. */
	snprintf(dir, sizeof(dir), "%s/g", root);
	CHECK_EQ(gap_open_small(&t, dir), 0);
	for (uint64_t i = 0; i < 1700; i++) { /* 0 .. 4, then 0, 1 and into 2 again */
		k = make_key(6, i);
		fill_object(b, OBJ, &k);
		CHECK_EQ(t_write(t, &k, b, OBJ), 0);
	}
	k = make_key(6, 1300);
	CHECK_EQ(t_remove(t, &k), 0);
	kvt__tier_close(t);
	snprintf(p, sizeof(p), "%s/log/1.kvl", dir);
	CHECK_EQ(unlink(p), 0);
	CHECK_EQ(gap_open_small(&t, dir), 0);
	back = gap_present(t, 6, 1300);
	kvt__tier_close(t);
	printf("nvme_log_gap_cycle: mid-lap gap, a key removed by a tombstone past it: back: %d\n",
	       back);
	CHECK_EQ(back, 0);

	/* A directory 3.kvl: a cycle of 3 segments, 16 MiB live (the writes go round it). */
	snprintf(dir, sizeof(dir), "%s/e", root);
	CHECK_EQ(gap_open_small(&t, dir), 0);
	kvt__tier_close(t);
	snprintf(p, sizeof(p), "%s/log/3.kvl", dir);
	CHECK_EQ(mkdir(p, 0700), 0);
	log_clear();
	CHECK_EQ(gap_open_small(&t, dir), 0);
	for (uint64_t i = 0; i < 900; i++) { /* 56 MiB: round the cycle */
		k = make_key(3, i);
		fill_object(b, OBJ, &k);
		CHECK_EQ(t_write(t, &k, b, OBJ), 0);
	}
	memset(&ts, 0, sizeof(ts));
	t->ops->stats(t, &ts);
	shrunk = log_count("the log keeps");
	kvt__tier_close(t);
	printf("nvme_log_gap_cycle: 3.kvl a directory: capacity %llu bytes, %llu live, cycle "
	       "shrunk %d time(s)\n",
	       (unsigned long long)ts.capacity_bytes, (unsigned long long)ts.bytes, shrunk);
	CHECK_EQ(ts.capacity_bytes, 16ull << 20); /* was 48 MiB */
	CHECK_EQ(shrunk, 0);

	/* 5. */
	if (check_part_runs(geteuid() == 0, "nvme_log_gap_cycle part 5",
			    "needs root (an immutable directory)")) {
		snprintf(dir, sizeof(dir), "%s/h", root);
		gap_make(dir, 7, b);
		snprintf(p, sizeof(p), "%s/log", dir);
		set_immutable(p, 1); /* 1.kvl cannot be created again */
		CHECK_EQ(gap_open_small(&t, dir), 0);
		for (uint64_t i = 0; i < 50; i++) {
			k = make_key(8, i);
			fill_object(b, OBJ, &k);
			CHECK_EQ(t_write(t, &k, b, OBJ), 0);
		}
		CHECK_EQ(t_flush(t), 0);
		kvt__tier_close(t);
		set_immutable(p, 0);
		CHECK_EQ(gap_open_small(&t, dir), 0);
		int served = 0;
		for (uint64_t i = 0; i < 50; i++)
			served += gap_present(t, 8, i);
		kvt__tier_close(t);
		printf("nvme_log_gap_cycle: the gap's segment cannot be made again: %d of 50 flushed "
		       "puts served after a reopen\n",
		       served);
		CHECK_EQ(served, 50);
	}
	free(b);
	rm_rf(root);
	printf("nvme_log_gap_cycle: ok\n");
	return 0;
}
