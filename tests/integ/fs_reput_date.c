/*
 * fs_reput_date.c - a put of a key the fs directory already holds dates the object as just
 * written, so the sweep (oldest max(atime, mtime) first) does not take it for the least
 * recently used. Why: until 2026-12-06 the put kept the old file and its old date, and the
 * key most recently put and flushed was the first a sweep removed (found by review).
 * Two instances on one directory, fs.bytes = 16 objects: A writes K0..K14, dated by hand
 * K0 200 s ago, then K1..K14 a second apart; B puts K0; A writes K15 and K16, and its sweep
 * removes two objects: K1 and K2, never K0.
 * Part 2, the same measure for a chain: a new child is dated just before its parent's age,
 * max(atime, mtime). Parent P written 1000 s ago and read since, 14 objects X idle for
 * 500 s, then child C of P, then two more X: the sweep removes X's, not C (until
 * 2026-12-06 C took P's mtime alone, 1000 s ago, and went first).
 */
#include <fcntl.h>
#include <sys/stat.h>

#include "lib/tierh.h"
#include "testlib.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

#define OBJ 8192

static struct kvt_tier *open_fs(const char *dir)
{
	const char *kv[] = {"fs.dir", dir, "fs.bytes", "131072", "fs.fsync", "data", NULL};
	struct kvt_config *c = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, c, &t), 0);
	kvt_config_destroy(c);
	return t;
}

static void set_times(const char *dir, const struct kvt_key *k, time_t at, time_t mt)
{
	char hex[65], p[4200];
	kvt_key_to_hex(k, hex);
	snprintf(p, sizeof(p), "%s/v1/%.2s/%.2s/%s", dir, hex, hex + 2, hex);
	struct timespec ts[2] = {{at, 0}, {mt, 0}};
	CHECK_EQ(utimensat(AT_FDCWD, p, ts, 0), 0);
}

static void chain_date(void)
{
	char *dir = test_tmpdir("fs_chain_date");
	const char *kv[] = {"fs.dir", dir, "fs.bytes", "131072", NULL};
	struct kvt_config *c = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, c, &t), 0);
	kvt_config_destroy(c);
	uint8_t *buf = aligned_alloc(4096, OBJ);
	CHECK(buf);
	struct kvt_key P, C, X[16];
	th_key(&P, 1, 9);
	th_key(&C, 2, 9);
	for (int i = 0; i < 16; i++)
		th_key(&X[i], 100 + (uint64_t)i, 9);
	time_t now = time(NULL);
	th_obj_fill(buf, OBJ, 1);
	CHECK_EQ(th_write(t, &P, buf, OBJ), 0);
	set_times(dir, &P, now, now - 1000); /* written 1000 s ago, read just now */
	for (int i = 0; i < 14; i++) {
		th_obj_fill(buf, OBJ, 100 + (uint64_t)i);
		CHECK_EQ(th_write(t, &X[i], buf, OBJ), 0);
		set_times(dir, &X[i], now - 500, now - 500);
	}
	struct th_wait w;
	th_wait_init(&w);
	th_obj_fill(buf, OBJ, 2);
	CHECK_EQ(th_wait_done(&w, t->ops->write_chained(t, &C, &P, buf, OBJ, th_cb, &w),
			      TH_TIMEOUT),
		 0);
	th_wait_fini(&w);
	for (int i = 14; i < 16; i++) { /* 18 objects over 16: the sweep removes some */
		th_obj_fill(buf, OBJ, 100 + (uint64_t)i);
		CHECK_EQ(th_write(t, &X[i], buf, OBJ), 0);
	}
	int n = 18;
	for (int i = 0; i < 1000 && n > 16; i++) {
		usleep(10000);
		n = th_present(t, &P) + th_present(t, &C);
		for (int j = 0; j < 16; j++)
			n += th_present(t, &X[j]);
	}
	usleep(200000); /* the rest of that sweep */
	int gone = 0;
	for (int i = 0; i < 14; i++)
		gone += !th_present(t, &X[i]);
	int pc = th_present(t, &C), pp = th_present(t, &P);
	printf("after the sweep: C (new child of P) %s, P %s, %d of the 14 idle X evicted\n",
	       pc ? "present" : "evicted", pp ? "present" : "evicted", gone);
	CHECKM(pc && pp && gone >= 2, "the sweep should take idle X's, not the new chain");
	th_close(t);
	free(buf);
	test_rmdir(dir);
	free(dir);
}

int main(void)
{
	chain_date();
	char *dir = test_tmpdir("fs_reput_date");
	uint8_t *buf = aligned_alloc(4096, OBJ);
	CHECK(buf);
	struct kvt_key k[17];
	for (int i = 0; i < 17; i++)
		th_key(&k[i], (uint64_t)i, 77);
	struct kvt_tier *a = open_fs(dir), *b = open_fs(dir);
	for (int i = 0; i < 15; i++) {
		th_obj_fill(buf, OBJ, 100 + (uint64_t)i);
		CHECK_EQ(th_write(a, &k[i], buf, OBJ), 0);
	}
	CHECK_EQ(th_flush(a), 0);
	/* Dated by hand, a second apart: K0 first, 200 s ago, then K1..K14. Written a few ms
	 * apart, they shared the file system's coarse timestamps (a clock tick), and the
	 * sweep's oldest-first order among equal dates is arbitrary: under TSan it once took
	 * K1 and K3 (2026-12-07). */
	time_t now = time(NULL);
	set_times(dir, &k[0], now - 200, now - 200);
	for (int i = 1; i < 15; i++)
		set_times(dir, &k[i], now - 100 + i, now - 100 + i);
	th_obj_fill(buf, OBJ, 100);
	CHECK_EQ(th_write(b, &k[0], buf, OBJ), 0); /* B's put of K0, the most recent */
	CHECK_EQ(th_flush(b), 0);
	for (int i = 15; i < 17; i++) {
		th_obj_fill(buf, OBJ, 100 + (uint64_t)i);
		CHECK_EQ(th_write(a, &k[i], buf, OBJ), 0);
	}
	CHECK_EQ(th_flush(a), 0);
	/* the sweep runs in the background: until two of the three are gone, up to 10 s */
	for (int i = 0; i < 1000 && th_present(a, &k[0]) + th_present(a, &k[1]) + th_present(a, &k[2]) > 1;
	     i++)
		usleep(10000);
	int p0 = th_present(a, &k[0]), p1 = th_present(a, &k[1]), p2 = th_present(a, &k[2]);
	printf("after the sweep: K0 (put by B last) %s, K1 %s, K2 %s\n",
	       p0 ? "present" : "evicted", p1 ? "present" : "evicted",
	       p2 ? "present" : "evicted");
	CHECKM(p0 && !p1 && !p2, "the sweep should take K1 and K2, the least recently written");
	th_close(a);
	th_close(b);
	free(buf);
	test_rmdir(dir);
	free(dir);
	printf("fs_reput_date: ok\n");
	return 0;
}
