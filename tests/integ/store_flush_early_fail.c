/*
 * store_flush_early_fail.c - a flush called while a write-behind job is still out counts a
 * failure that job already had on another tier. A job writes every deeper tier; one tier
 * can fail it at once while another still holds it, and the flush called in between must
 * report that failure: the job's flush_failed bits are the only record of it (the tier does
 * not report it again). Found by a review of 61e0a05, which kept each failure with its key's
 * record but looked at the jobs out before it opened the flush's window (f->target 0): every
 * such failure was taken for one after the window and dropped, and the flush answered 0.
 *
 * Tier 1 an fs tier whose fan-out directory for K was replaced by a symbolic link after the
 * open (never followed: K's write there fails at once, -ENOTDIR), tier 2 a fault-injecting
 * tier around NVMe whose gate (kvt__faulty_gate) holds K's write until the test lets it go:
 *  1. put K; tier 1 fails it, tier 2 holds it;
 *  2. a flush is called while tier 2 still holds K's write;
 *  3. tier 2's is let go, written: the flush fails naming tier 1 (before: 0).
 */
#include "engine.h"
#include "testlib.h"
#include "tier.h"
#include "tier_faulty.h"
#include "lib/faulty_gate.h"

#include <sys/stat.h>

int main(void)
{
	char *dir = test_tmpdir("flush_early_fail");
	char fsdir[600], nvdir[600];
	snprintf(fsdir, sizeof(fsdir), "%s/fs", dir);
	snprintf(nvdir, sizeof(nvdir), "%s/nv", dir);
	CHECK(mkdir(fsdir, 0700) == 0 && mkdir(nvdir, 0700) == 0);
	struct kvt_config *c = test_config("dram,fs,faulty", dir);
	test_set(c, "nvme.dirs", nvdir);
	test_set(c, "fs.dir", fsdir);
	test_set(c, "store.write_policy", "write-through");
	test_set_deadline(c, "10000", "5000"); /* a held write stays within its deadline */
	struct kvt_store *s = test_open(c);
	struct kvt_tier *t2 = kvt__store_tier(s, 2);

	/* 1. */
	uint32_t tok = 1;
	struct kvt_key k, sk;
	kvt_key_next(kvt_store_ns_id(s), NULL, &tok, 1, &k);
	kvt_storage_key(kvt_store_ns_id(s), &k, &sk);
	char hex[2 * KVT_KEY_BYTES + 1], cmd[1400];
	kvt_key_to_hex(&sk, hex);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s/v1/%.2s' && ln -s /nonexistent '%s/v1/%.2s'", fsdir,
		 hex, fsdir, hex);
	CHECK(system(cmd) == 0);
	kvt__faulty_gate(t2, true);
	test_put_seed(s, &k, 5);
	gate_wait_held(t2, 1);
	uint64_t t0 = test_now_ns();
	struct kvt_stats st;
	do { /* tier 1's failure reaches the job */
		CHECKM(test_ms_since(t0) < 10000, "tier 1 did not fail K's write in 10 s");
		kvt_poll(s, 10);
		CHECK_RC(kvt_stats(s, &st), 0);
	} while (!st.tier[1].errors);
	kvt_poll(s, 0);

	/* 2. */
	struct test_box f = {0};
	CHECK_RC(kvt_flush(s, test_box_cb, &f), 0);
	kvt_poll(s, 0);
	CHECKM(!f.done, "the flush answered with a write of its window held");

	/* 3. */
	kvt__faulty_gate(t2, false);
	CHECK_RC(kvt__faulty_gate_release(t2, &sk, 0), 0);
	t0 = test_now_ns();
	while (!f.done) {
		CHECKM(test_ms_since(t0) < 10000, "the flush did not answer in 10 s");
		kvt_poll(s, 50);
	}
	printf("store_flush_early_fail: flush %d (tier %d)\n", f.res.status, f.res.tier);
	CHECKM(f.res.status < 0 && f.res.tier == 1,
	       "a flush called after a job out failed on tier 1: %d, tier %d (want < 0, 1)",
	       f.res.status, f.res.tier);

	kvt_store_close(s);
	test_rmdir(dir);
	free(dir);
	printf("store_flush_early_fail: ok\n");
	return 0;
}
