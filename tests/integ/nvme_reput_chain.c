/*
 * nvme_reput_chain.c - a put that cannot be given room evicts nothing. A re-put of a key
 * whose copy the open found keeps that copy (set aside, in case the put fails), and a kept
 * copy keeps its ancestors too: eviction is leaf first, and a parent with a resident child
 * is no leaf. The check that comes before any eviction (room_possible,
 * src/tier_nvme_space.c) counted the kept copy as unevictable but not its ancestors, so
 * where the other leaves were too few for the put, it evicted them all and then refused the
 * put anyway (found by a review, 2026-12-06; reproduced here 2026-12-07).
 * Store: P (20 KiB) <- K (20 KiB, a child of P), and J (8 KiB), exactly full. After a
 * reopen (K is a found copy), a put of K without a parent needs 20 KiB: only J (8 KiB) is
 * evictable, so the put is refused (-ENOSPC) - and J must still be there.
 */
#include "nvme_util.h"

#define BIG 20480
#define SMALL 8192

static int open_full(struct kvt_tier **t, const char *dir)
{
	return open_tier(t, "nvme.dirs", dir, "nvme.bytes", "49152", "nvme.log_max", "0",
			 "nvme.direct", "off", "nvme.preallocate", "0", NULL);
}

int main(void)
{
	const char *base = getenv("KVT_TEST_DIR");
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/kvt-reput-chain-XXXXXX", base && *base ? base : "/tmp");
	CHECK(mkdtemp(dir));
	struct kvt_key p = make_key(31, 1), k = make_key(31, 2), j = make_key(31, 3);
	uint8_t *buf = abuf(BIG);
	struct kvt_tier *t;
	CHECK_EQ(open_full(&t, dir), 0);
	fill_object(buf, BIG, &p);
	CHECK_EQ(t_write(t, &p, buf, BIG), 0);
	fill_object(buf, BIG, &k);
	struct waiter w = WAITER_INIT;
	CHECK_EQ(waiter_wait(&w, t->ops->write_chained(t, &k, &p, buf, BIG, waiter_cb, &w)), 0);
	fill_object(buf, SMALL, &j);
	CHECK_EQ(t_write(t, &j, buf, SMALL), 0);
	CHECK_EQ(t_flush(t), 0);
	kvt__tier_close(t);

	CHECK_EQ(open_full(&t, dir), 0);
	fill_object(buf, BIG, &k);
	int rc = t_write(t, &k, buf, BIG);
	memset(buf, 0, BIG);
	int rj = t_read1(t, &j, buf, 0, SMALL);
	bool j_ok = rj == SMALL && check_object(buf, SMALL, &j) == 0;
	memset(buf, 0, BIG);
	int rk = t_read1(t, &k, buf, 0, BIG);
	bool k_ok = rk == BIG && check_object(buf, BIG, &k) == 0;
	printf("nvme_reput_chain: re-put of a found copy whose chain fills the store: %d; the "
	       "other object afterwards: %s; the key: %s\n", rc,
	       j_ok ? "kept" : "EVICTED for nothing", k_ok ? "exact" : "LOST");
	CHECK_EQ(rc, -ENOSPC);
	CHECKM(j_ok, "a put refused for room evicted an object first");
	CHECK(k_ok);
	kvt__tier_close(t);
	free(buf);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_EQ(system(cmd), 0);
	printf("nvme_reput_chain: ok\n");
	return 0;
}
