/*
 * store_flush_pinned.c - kvt_flush writes every dirty DRAM slot, pinned ones too, and a
 * promotion whose local write fails is no loss. Why (a review, 2026-12-05): flush asked the
 * pool for dirty slots that were not pinned, since a pin used to mean "a write of it is
 * under way" - but a reader's pin (a device load waiting on its GPU dependency, a rows
 * load converting, a daemon client's lease, kvt__store_acquire) says nothing of the kind,
 * and neither does the pin a write's late leg keeps after its job completed (the write
 * missed its deadline: the slot is unsaved). Flush skipped such a slot and answered 0; a
 * crash then lost the chunk. Each case: a child process puts K, flushes (0 wanted), and
 * _exits at once - a crash right after a successful flush; the parent reopens the store's
 * directory and must get K back exact:
 *  0. control: write-through, no pin;
 *  1. write-back, K's dirty slot pinned by a reader through the flush (before: flush 0,
 *     nvme writes 0, K gone after the reopen);
 *  2. write-through over a tier whose writes land after 5 s, 300 ms deadlines: K's write
 *     misses its deadline (unsaved) and its late leg keeps the slot pinned; the tier then
 *     answers in time again and flush runs (before: the same loss).
 * And 3. a promotion (a hit from fs, the tier below a failing nvme, written into nvme
 * only): its failed write used to mark the slot unsaved, so its eviction was counted as a
 * loss (evicted_unsaved) and the next flush failed -EIO although fs held the chunk; and
 * 3b. a flush started while such a write is out (it failed later) did the same.
 */
#include <stdatomic.h>
#include <sys/wait.h>

#include "engine.h"
#include "testlib.h"
#include "tier.h"
#include "tier_faulty.h"

static struct kvt_geometry G;
static size_t PAYLOAD;
static _Atomic int acquired;

static void acq_cb(void *arg, int rc, const struct kvt_slot_ref *ref, int tier)
{
	(void)arg;
	(void)ref;
	(void)tier;
	atomic_store(&acquired, rc == 0 ? 1 : -1);
}

static struct kvt_store *open_store(const char *dir, const char *tiers, const char *policy,
				    bool short_deadline)
{
	struct kvt_config *c = test_config(tiers, dir);
	if (strstr(tiers, "faulty"))
		test_set(c, "faulty.inner", "nvme");
	test_set(c, "store.write_policy", policy);
	if (short_deadline)
		test_set_deadline(c, "300", "300");
	struct kvt_store *s = test_open(c);
	G = *kvt_store_geometry(s);
	PAYLOAD = kvt_payload_bytes(&G, G.chunk_tokens);
	return s;
}


static const char *const CASES[] = {"no pin", "a reader's pin", "a late write's pin"};

/* A child process for one case, in a fresh directory (*dir): 0 in the child. */
static pid_t fork_case(char **dir)
{
	*dir = test_tmpdir("store_flush_pinned");
	fflush(stdout);
	pid_t pid = fork();
	CHECK(pid >= 0);
	return pid;
}

static void crash_after_flush(int mode)
{
	char *dir;
	uint32_t tok = 42;
	struct kvt_key k;
	pid_t pid = fork_case(&dir);
	if (pid == 0) {
		struct kvt_store *s =
		    mode == 2 ? open_store(dir, "dram,faulty", "write-through", true)
			      : open_store(dir, "dram,nvme", mode == 1 ? "write-back" : "write-through",
					   false);
		if (mode == 2)
			kvt__faulty_set_write_delay(kvt__store_tier(s, 1), 5000);
		kvt_key_next(kvt_store_ns_id(s), NULL, &tok, 1, &k);
		void *buf = malloc(PAYLOAD);
		test_fill(buf, PAYLOAD, 7);
		CHECK_RC(kvt_put_sync(s, &k, NULL, G.chunk_tokens, buf, PAYLOAD), 0);
		if (mode == 1) {
			struct kvt_key sk;
			kvt_storage_key(kvt_store_ns_id(s), &k, &sk);
			CHECK_RC(kvt__store_acquire(s, &sk, acq_cb, NULL), 0);
			while (!atomic_load(&acquired))
				usleep(1000);
			CHECK_EQ(atomic_load(&acquired), 1);
		}
		test_wb_settle(s);
		if (mode == 2) /* the tier answers in time again; the late write still holds K */
			kvt__faulty_set_write_delay(kvt__store_tier(s, 1), 0);
		int rc = kvt_flush_sync(s);
		struct kvt_stats st;
		kvt_stats(s, &st);
		printf("store_flush_pinned: %s: flush %d, tier 1 writes %llu\n", CASES[mode], rc,
		       (unsigned long long)st.tier[1].writes);
		fflush(stdout);
		_exit(rc == 0 ? 0 : 2); /* the crash, right after the flush */
	}
	int wst;
	CHECK(waitpid(pid, &wst, 0) == pid);
	CHECKM(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "%s: the child's flush failed (%d)",
	       CASES[mode], wst);
	struct kvt_store *s = open_store(dir, "dram,nvme", "write-through", false);
	kvt_key_next(kvt_store_ns_id(s), NULL, &tok, 1, &k);
	void *buf = malloc(PAYLOAD);
	struct kvt_result res;
	int rc = kvt_get_sync(s, &k, 0, 0, buf, PAYLOAD, &res);
	printf("store_flush_pinned: %s: after the crash and a reopen, get %d\n", CASES[mode], rc);
	CHECKM(rc == 0 && test_check(buf, PAYLOAD, 7), "%s: flush said 0, the chunk is gone (%d)",
	       CASES[mode], rc);
	kvt_store_close(s);
	free(buf);
	test_rmdir(dir);
	free(dir);
}

/* case 3 */
static uint32_t next_tok = 1000;

static void put_new(struct kvt_store *s, struct kvt_key *k, uint64_t seed)
{
	uint32_t tok = next_tok++;
	kvt_key_next(kvt_store_ns_id(s), NULL, &tok, 1, k);
	test_put_seed(s, k, seed);
}

static void evict(struct kvt_store *s, const struct kvt_key *k)
{
	struct kvt_key sk, o;
	kvt_storage_key(kvt_store_ns_id(s), k, &sk);
	for (int i = 0; i < 400; i++) {
		if (!kvt__dram_contains(kvt__store_dram(s), &sk, false))
			return;
		put_new(s, &o, 1000 + (uint64_t)i);
		if (i % 16 == 15)
			test_wb_settle(s); /* slots whose writes are out cannot go (a slow sanitizer build) */
	}
	CHECKM(0, "still in DRAM after 400 puts");
}

static void promotion_failed(void)
{
	char *d1 = test_tmpdir("store_flush_pinned"), *d2 = test_tmpdir("store_flush_pinned_fs");
	struct kvt_config *c = test_config("dram,faulty,fs", d1);
	test_set(c, "faulty.inner", "nvme");
	test_set(c, "fs.dir", d2);
	test_set(c, "dram.policy", "lru"); /* the coldest goes: evict() is then a count */
	struct kvt_store *s = test_open(c);
	G = *kvt_store_geometry(s);
	PAYLOAD = kvt_payload_bytes(&G, G.chunk_tokens);
	struct kvt_tier *t = kvt__store_tier(s, 1);
	void *buf = malloc(PAYLOAD);
	struct kvt_result res;
	struct kvt_key k;
	put_new(s, &k, 7); /* dram, faulty(nvme) and fs */
	test_wb_settle(s);
	evict(s, &k);
	CHECK_RC(kvt_flush_sync(s), 0);
	/* nvme fails every call: the read (the hit comes from fs) and the promotion's write */
	kvt__faulty_set(t, 100, 0, 0);
	CHECK_RC(kvt_get_sync(s, &k, 0, 0, buf, PAYLOAD, &res), 0);
	CHECK_EQ(res.tier, 2);
	test_wb_settle(s);
	kvt__faulty_set(t, 0, 0, 0);
	evict(s, &k); /* the promoted copy leaves DRAM; fs holds the chunk */
	struct kvt_stats st;
	CHECK_RC(kvt_stats(s, &st), 0);
	struct test_box fb = {0};
	test_flush_wait(s, &fb);
	printf("store_flush_pinned: a promotion whose write failed, evicted: evicted_unsaved "
	       "%llu, flush %d\n",
	       (unsigned long long)st.evicted_unsaved, fb.res.status);
	CHECK_EQ(st.evicted_unsaved, 0);
	CHECK_RC(fb.res.status, 0);
	CHECK_RC(kvt_get_sync(s, &k, 0, 0, buf, PAYLOAD, &res), 0);
	CHECK(test_check(buf, PAYLOAD, 7));
	/* 3b. the promotion's write still out when a flush starts, failing after it: the flush
	 * owes it nothing either (before 2026-12-06 its window opened at that job and its
	 * failure made the flush -EIO) */
	evict(s, &k);
	test_wb_settle(s); /* the puts that pushed K out are written */
	uint64_t inj = kvt__faulty_injected(t), t0 = test_now_ns();
	kvt__faulty_set(t, 100, 0, 1000); /* every nvme call fails, 1 s late */
	CHECK_RC(kvt_get_sync(s, &k, 0, 0, buf, PAYLOAD, &res), 0);
	CHECK_EQ(res.tier, 2);
	/* the promotion's write is out: once its failure is decided (held back for 1 s),
	 * the flush's own calls (nvme's fsync) are let succeed */
	while (kvt__faulty_injected(t) < inj + 2) { /* the read's, then the write's */
		CHECKM(test_ms_since(t0) < 10000, "the promotion's write was not failed in time");
		usleep(1000);
	}
	kvt__faulty_set(t, 0, 0, 0);
	CHECK_RC(kvt_stats(s, &st), 0);
	CHECKM(st.write_behind_pending == 1, "write-behind jobs out: %llu",
	       (unsigned long long)st.write_behind_pending);
	int frc = kvt_flush_sync(s);
	printf("store_flush_pinned: a flush while a promotion's write was out and failed: %d\n",
	       frc);
	CHECK_RC(frc, 0);
	kvt_store_close(s);
	free(buf);
	test_rmdir(d1);
	test_rmdir(d2);
	free(d1);
	free(d2);
}

/* case 4 (the review of the fix): write-back, a flush's job for K's slot A slow, K removed
 * (the remove waits for that job) and put again (slot B, dirty, no job), a second flush:
 * it must write B. The first version of the fix left B to "the key's job out" - A's - and
 * the remove then deleted K from nvme: flush 0, K gone after a crash. */
static void reput_during_flush(void)
{
	char *dir;
	uint32_t tok = 42;
	struct kvt_key k;
	pid_t pid = fork_case(&dir);
	if (pid == 0) {
		struct kvt_store *s = open_store(dir, "dram,faulty", "write-back", false);
		kvt_key_next(kvt_store_ns_id(s), NULL, &tok, 1, &k);
		void *buf = malloc(PAYLOAD);
		test_fill(buf, PAYLOAD, 7);
		CHECK_RC(kvt_put_sync(s, &k, NULL, G.chunk_tokens, buf, PAYLOAD), 0);
		kvt__faulty_set_write_delay(kvt__store_tier(s, 1), 1000);
		struct test_box f1 = {0}, r = {0};
		CHECK_RC(kvt_flush(s, test_box_cb, &f1), 0); /* A's job, slow */
		CHECK_RC(kvt_remove(s, &k, test_box_cb, &r), 0);
		int rc;
		while ((rc = kvt_put_sync(s, &k, NULL, G.chunk_tokens, buf, PAYLOAD)) == -EAGAIN)
			usleep(1000);
		CHECK_RC(rc, 0);
		kvt__faulty_set_write_delay(kvt__store_tier(s, 1), 0);
		rc = kvt_flush_sync(s);
		while (!f1.done || !r.done)
			kvt_poll(s, 20);
		printf("store_flush_pinned: put again while a flush wrote the old slot: flush %d, "
		       "remove %d\n", rc, r.res.status);
		fflush(stdout);
		_exit(rc == 0 ? 0 : 2);
	}
	int wst;
	CHECK(waitpid(pid, &wst, 0) == pid);
	CHECKM(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "the child's flush failed (%d)", wst);
	struct kvt_store *s = open_store(dir, "dram,nvme", "write-through", false);
	kvt_key_next(kvt_store_ns_id(s), NULL, &tok, 1, &k);
	void *buf = malloc(PAYLOAD);
	struct kvt_result res;
	int rc = kvt_get_sync(s, &k, 0, 0, buf, PAYLOAD, &res);
	printf("store_flush_pinned: after the crash and a reopen, get %d\n", rc);
	CHECKM(rc == 0 && test_check(buf, PAYLOAD, 7), "flush said 0, K is gone (%d)", rc);
	kvt_store_close(s);
	free(buf);
	test_rmdir(dir);
	free(dir);
}

int main(void)
{
	for (int mode = 0; mode < 3; mode++)
		crash_after_flush(mode);
	reput_during_flush();
	promotion_failed();
	printf("store_flush_pinned: ok\n");
	return 0;
}
