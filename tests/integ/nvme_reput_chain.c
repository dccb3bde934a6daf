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
 * And where the two unevictable chains (the put's parent's, the kept copy's) are one: P <-
 * K (found) and Q (12 KiB) <- R (8 KiB), exactly full; a put of K with its parent P needs
 * 20 KiB, and Q + R are exactly that (R first, then Q, a leaf once R is gone) - counting
 * P twice would refuse it. It is stored, Q and R evicted.
 */
#include "nvme_util.h"
#include "lib/rm_rf.h"

#define BIG 20480
#define SMALL 8192

static int open_full(struct kvt_tier **t, const char *dir, const char *bytes)
{
	return open_tier(t, "nvme.dirs", dir, "nvme.bytes", bytes, "nvme.log_max", "0",
			 "nvme.direct", "off", "nvme.preallocate", "0", NULL);
}

/* A write of k as parent's child, waited for (a waiter of its own: a used one answers at
 * once with its old result, and the caller would reuse buf under the write). */
static int chained(struct kvt_tier *t, const struct kvt_key *k, const struct kvt_key *parent,
		   const void *buf, uint64_t len)
{
	struct waiter w = WAITER_INIT;
	return waiter_wait(&w, t->ops->write_chained(t, k, parent, buf, len, waiter_cb, &w));
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
	CHECK_EQ(open_full(&t, dir, "49152"), 0);
	fill_object(buf, BIG, &p);
	CHECK_EQ(t_write(t, &p, buf, BIG), 0);
	fill_object(buf, BIG, &k);
	CHECK_EQ(chained(t, &k, &p, buf, BIG), 0);
	fill_object(buf, SMALL, &j);
	CHECK_EQ(t_write(t, &j, buf, SMALL), 0);
	CHECK_EQ(t_flush(t), 0);
	kvt__tier_close(t);

	CHECK_EQ(open_full(&t, dir, "49152"), 0);
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

	/* The chains meet: P counted once. */
	rm_rf(dir); /* a store of its own: none of part 1's files (its .kvtier.chains) */
	CHECK_EQ(mkdir(dir, 0700), 0);
	struct kvt_key q = make_key(31, 4), rr = make_key(31, 5);
	CHECK_EQ(open_full(&t, dir, "61440"), 0);
	fill_object(buf, BIG, &p);
	CHECK_EQ(t_write(t, &p, buf, BIG), 0);
	fill_object(buf, BIG, &k);
	CHECK_EQ(chained(t, &k, &p, buf, BIG), 0);
	fill_object(buf, 12288, &q);
	CHECK_EQ(t_write(t, &q, buf, 12288), 0);
	fill_object(buf, SMALL, &rr);
	CHECK_EQ(chained(t, &rr, &q, buf, SMALL),
		 0);
	CHECK_EQ(t_flush(t), 0);
	kvt__tier_close(t);
	CHECK_EQ(open_full(&t, dir, "61440"), 0);
	fill_object(buf, BIG, &k);
	rc = chained(t, &k, &p, buf, BIG);
	memset(buf, 0, BIG);
	int rk2 = t_read1(t, &k, buf, 0, BIG);
	k_ok = rk2 == BIG && check_object(buf, BIG, &k) == 0;
	int rq = t_read1(t, &q, buf, 0, 12288), rr_ = t_read1(t, &rr, buf, 0, SMALL);
	printf("nvme_reput_chain: re-put of the found copy with its parent, exactly enough "
	       "evictable: %d; the key %s; Q %d, R %d (evicted: %d)\n", rc,
	       k_ok ? "exact" : "LOST", rq, rr_, -ENOENT);
	CHECKM(rc == 0, "a put that evicting could make room for was refused");
	CHECK(k_ok);
	CHECK_EQ(rq, -ENOENT);
	CHECK_EQ(rr_, -ENOENT);
	kvt__tier_close(t);
	free(buf);
	rm_rf(dir);
	printf("nvme_reput_chain: ok\n");
	return 0;
}
