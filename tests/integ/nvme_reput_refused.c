/*
 * nvme_reput_refused.c - a put of a key whose file the open found, refused or failing, never
 * loses the stored copy. The open indexes a file under its key's name marked "found" (after
 * a power cut it may hold another key's bytes: nvme_recycle_powercut), and the key's first
 * put writes it again. Until 2026-12-06 that put dropped the found copy before its own
 * admission: refused by the write budget (here), for room, or failing, it left the key on
 * no tier at all although it had been written and flushed (a review's reproducer).
 *  1. nvme.write_budget of one object: K written and flushed; reopened; a put of K is
 *     refused (-EDQUOT: the budget is spent) and K still reads back exact.
 */
#include "nvme_util.h"

#define OBJ 20480

static int open_budget(struct kvt_tier **t, const char *dir)
{
	return open_tier(t, "nvme.dirs", dir, "nvme.bytes", "1MiB", "nvme.log_max", "0",
			 "nvme.write_budget", "20480", NULL);
}

int main(void)
{
	char root[] = "/var/tmp/kvt-nvme-reput-XXXXXX";
	CHECK(mkdtemp(root));
	struct kvt_tier *t;
	CHECK_EQ(open_budget(&t, root), 0);
	uint8_t *buf = abuf(OBJ);
	struct kvt_key k = make_key(5, 1);
	fill_object(buf, OBJ, &k);
	CHECK_EQ(t_write(t, &k, buf, OBJ), 0);
	CHECK_EQ(t_flush(t), 0);
	kvt__tier_close(t);

	CHECK_EQ(open_budget(&t, root), 0);
	fill_object(buf, OBJ, &k);
	int w = t_write(t, &k, buf, OBJ);
	memset(buf, 0, OBJ);
	int r = t_read1(t, &k, buf, 0, OBJ);
	int ok = r == OBJ && check_object(buf, OBJ, &k) == 0;
	printf("nvme_reput_refused: a put of a key found at open, refused: %d; then a read: %d "
	       "(%s)\n",
	       w, r, ok ? "exact" : "the stored copy is gone");
	CHECK(w < 0);
	CHECKM(ok, "a refused put of a key found at open lost its stored copy");
	kvt__tier_close(t);
	free(buf);
	rm_rf(root);
	printf("nvme_reput_refused: ok\n");
	return 0;
}
