/*
 * nvme_log_gap.c - a removal made while log segments past a gap were ignored stays removed
 * when they come back. With a segment file missing in the middle (deleted from outside),
 * the open-time scan indexes 0.kvl up to the gap only, not the files past it (segments
 * of the cycle, reused in turn: tier_nvme_log_recover.c); the run then creates the missing
 * segment, so at the next open the files past it that it did not reuse are indexed again,
 * with their old batches. Those batches must
 * order before everything the run in between wrote: before the fix that run restarted the
 * sequence numbers from the newest batch before the gap, so a stale put of a key past the
 * gap came after, and undid, a removal of that key acknowledged before the close. Since
 * 2026-12-03 the open that finds the gap voids every segment of the log (a new header
 * generation: the deleted one's tombstones are gone, so no put can be trusted), so
 * nothing of theirs can come back; the sequence floor still guards batches that a failed
 * void or removal leaves on disk.
 */
#include "nvme_util.h"

#include "lib/nvme_gap.h"

#define OBJ GAP_OBJ

static int present(struct kvt_tier *t, uint64_t i)
{
	return gap_present(t, 1, i);
}

int main(void)
{
	char root[] = "/tmp/kvt-nvme-log-gap-XXXXXX";
	CHECK(mkdtemp(root));
	char dir[300], p[400];
	snprintf(dir, sizeof(dir), "%s/d", root);
	struct kvt_tier *t;
	uint8_t *b = abuf(OBJ);
	/* Keys 0 .. 599 in segments 0, 1 and 2 (480 .. 599); then 1.kvl goes. */
	gap_make(dir, 1, b);
	snprintf(p, sizeof(p), "%s/log/1.kvl", dir);
	/* 2.kvl is past the gap: its keys are not there. Key 500 written again (into a new
	 * 1.kvl) and removed, both acknowledged. */
	log_clear();
	CHECK_EQ(gap_open_small(&t, dir), 0);
	CHECK_EQ(log_count("1.kvl is missing (deleted from outside?): nothing of the log is "
			   "indexed, 2 segment(s) emptied"),
		 1);
	CHECK_EQ(present(t, 100), 0); /* 0.kvl voided too */
	CHECK_EQ(present(t, 500), 0);
	struct kvt_key k = make_key(1, 500);
	fill_object(b, OBJ, &k);
	CHECK_EQ(t_write(t, &k, b, OBJ), 0);
	CHECK_EQ(present(t, 500), 1);
	CHECK_EQ(t_remove(t, &k), 0);
	CHECK_EQ(present(t, 500), 0);
	kvt__tier_close(t);
	CHECK_EQ(access(p, F_OK), 0); /* the gap is filled: 2.kvl is a segment again */
	CHECK_EQ(gap_open_small(&t, dir), 0);
	CHECK_EQ(present(t, 520), 0); /* 2.kvl was voided at the open that found the gap */
	CHECK_EQ(present(t, 100), 0);
	CHECK_EQ(present(t, 500), 0); /* was: back as its stale copy in 2.kvl */
	kvt__tier_close(t);
	free(b);
	rm_rf(root);
	printf("nvme_log_gap: ok\n");
	return 0;
}
