/*
 * kvt-test-labels: server
 *
 * store_stall_fs.c - the engine against a real device that stops answering: the fs and
 * nvme tiers on tests/fuse/slowfs, a passthrough FUSE mount whose calls hang (SIGUSR1)
 * the way a dead NFS server's or disk's do - the tier's threads sit in the kernel and no
 * signal gets them out. For each tier:
 *   - without DRAM, put, get, lookup, remove and a burst of gets each return within
 *     store.tier_timeout_ms plus slack (an error or a miss), counted as deadline misses;
 *   - with DRAM in front, puts return at once, flush names the tier within its deadlines,
 *     and kvt_store_close returns within store.sync_timeout_ms plus slack although the
 *     tier's threads cannot finish (the tier is left allocated, reported);
 *   - after SIGUSR2 the mount answers again and a new store works on it;
 *   - nvme: a zero-copy put (written from the caller's buffer, store.zero_copy_puts) whose
 *     write misses its deadline returns -ETIMEDOUT, the caller changes its buffer, and the
 *     write that lands once the mount answers is removed again (src/engine_wb.c,
 *     wb_leg_orphan): the key reads as a miss, no checksum failure, also after a reopen;
 *   - fs: an open (and a close) that gives up on the stalled tier does not call the
 *     caller's log function once it returned, when the caller may have freed its argument
 *     (src/tier_bounded.c, the log gate): the argument is freed (ASan reports a use) and
 *     a call after the return is counted.
 *   - dram,fs: while the tier hangs its late writes hold at most half the DRAM pool, and
 *     puts succeed once its first deadline has passed.
 * Exit 0 pass, 1 fail, 77 when slowfs is not built or /dev/fuse is missing (a failure
 * under CI=true: see CMakeLists.txt).
 */
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine.h"
#include "internal.h"
#include "testlib.h"
#include "lib/slowfs.h"

#define CEIL_MS 400
#define SYNC_MS 1000
#define SLACK_MS 800

/* An nvme store left closing on the stalled mount (its last close gave up) holds the
 * directory's lock until its close finishes, once the mount answers: wait for it. Opens
 * happen with the mount answering; on a very slow machine (a sanitizer build, 10 % of a
 * core) an open's scan can still pass store.sync_timeout_ms (-ETIMEDOUT): try again. */
static struct kvt_store *open_retrying(const struct kvt_config *c)
{
	struct kvt_store *s;
	int rc;
	for (int i = 0; ((rc = kvt_store_open(c, &s)) == -EBUSY || rc == -ETIMEDOUT) && i < 100;
	     i++)
		usleep(50000);
	CHECK_RC(rc, 0);
	return s;
}

static struct kvt_store *open_store(const char *tiers, const char *dir)
{
	struct kvt_config *c = test_config(tiers, dir);
	test_set(c, "fs.dir", dir);
	test_set(c, "fs.fsync", "none");
	test_set(c, "nvme.direct", "off"); /* FUSE here has no O_DIRECT */
	test_set(c, "nvme.bytes", "64MiB");
	test_set_deadline(c, "400", "100");
	test_set(c, "store.sync_timeout_ms", "1000");
	struct kvt_store *s = open_retrying(c);
	kvt_config_destroy(c);
	return s;
}

static void stalled_store(struct slowfs *f, const char *tier)
{
	fprintf(stderr, "== %s on slowfs\n", tier);
	char dir[4200], chain[32];
	snprintf(dir, sizeof(dir), "%s/%s", f->mnt, tier);
	CHECK(mkdir(dir, 0700) == 0);
	enum { N = 8 };

	/* ---- no DRAM: every call is a call to the stalled tier ---- */
	struct kvt_store *s = open_store(tier, dir);
	const struct kvt_geometry geo = *kvt_store_geometry(s), *g = &geo;
	size_t payload = kvt_payload_bytes(g, g->chunk_tokens);
	void *buf = malloc(payload);
	struct kvt_key k[N + 2];
	test_chain_keys(s, k, N + 2, 7);
	for (int i = 0; i < N; i++) {
		test_fill(buf, payload, (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &k[i], NULL, g->chunk_tokens, buf, payload), 0);
	}
	for (int i = 0; i < N; i++) {
		CHECK_RC(kvt_get_sync(s, &k[i], 0, 0, buf, payload, NULL), 0);
		CHECK(test_check(buf, payload, (uint64_t)i));
	}
	kill(f->pid, SIGUSR1);
	usleep(20000);
	double ms;
	int rc;
	TEST_BOUNDED(ms, CEIL_MS + SLACK_MS, "put",
		     rc = kvt_put_sync(s, &k[N], NULL, g->chunk_tokens, buf, payload),
		     "  stalled: put %.0f ms (%s)\n", ms, kvt_strerror(rc));
	CHECK_RC(rc, -ETIMEDOUT);
	TEST_BOUNDED(ms, CEIL_MS + SLACK_MS, "get",
		     rc = kvt_get_sync(s, &k[0], 0, 0, buf, payload, NULL),
		     "  stalled: get %.0f ms (%s)\n", ms, kvt_strerror(rc));
	CHECK_RC(rc, -ENOENT);
	int8_t tiers[N];
	TEST_BOUNDED(ms, CEIL_MS + SLACK_MS, "lookup", rc = kvt_lookup_sync(s, k, N, tiers),
		     "  stalled: lookup %.0f ms (%d found)\n", ms, rc);
	CHECKM(rc >= 0, "lookup: %s", kvt_strerror(rc));
	TEST_BOUNDED(ms, CEIL_MS + SLACK_MS, "remove", rc = kvt_remove_sync(s, &k[1]),
		     "  stalled: remove %.0f ms (%d removed)\n", ms, rc);
	struct test_box b[N];
	void *bufs = malloc(payload * N);
	TEST_BOUNDED(ms, CEIL_MS + SLACK_MS, "burst", test_get_burst(s, k, N, bufs, payload, b),
		     "  stalled: %d concurrent gets done in %.0f ms\n", N, ms);
	/* completed: the engine never writes a caller's buffer after its callback (the late
	 * tier answers go to the engine's own buffers) */
	free(bufs);
	struct kvt_stats st;
	kvt_stats(s, &st);
	CHECKM(st.tier[0].deadline_misses >= 2, "deadline misses counted (%llu)",
	       (unsigned long long)st.tier[0].deadline_misses);
	TEST_BOUNDED(ms, SYNC_MS + SLACK_MS, "close", kvt_store_close(s),
		     "  stalled: close %.0f ms\n", ms);

	/* ---- DRAM in front ---- */
	kill(f->pid, SIGUSR2);
	snprintf(chain, sizeof(chain), "dram,%s", tier);
	s = open_store(chain, dir);
	struct kvt_key k2[N];
	test_chain_keys(s, k2, N, 8);
	kill(f->pid, SIGUSR1);
	usleep(20000);
	TEST_BOUNDED(ms, 300, "puts", test_put_chain(s, k2, N, buf, payload, g->chunk_tokens, 200),
		     "  stalled, DRAM in front: %d puts %.1f ms\n", N, ms);
	CHECK_RC(kvt_get_sync(s, &k2[0], 0, 0, buf, payload, NULL), 0); /* a DRAM hit */
	struct test_box fb = {0};
	TEST_BOUNDED(ms, 2 * CEIL_MS + SLACK_MS, "flush", test_flush_wait(s, &fb),
		     "  stalled: flush %.0f ms, status %s, tier %d\n", ms,
		     kvt_strerror(fb.res.status), fb.res.tier);
	CHECK(fb.res.status < 0);
	CHECK_EQ(fb.res.tier, 1);
	TEST_BOUNDED(ms, SYNC_MS + 2 * CEIL_MS + SLACK_MS, "close", kvt_store_close(s),
		     "  stalled: close with write-behind out %.0f ms\n", ms);

	/* ---- resumed: works again ---- */
	kill(f->pid, SIGUSR2);
	s = open_store(tier, dir);
	test_fill(buf, payload, 999);
	CHECK_RC(kvt_put_sync(s, &k[N + 1], NULL, g->chunk_tokens, buf, payload), 0);
	CHECK_RC(kvt_get_sync(s, &k[N + 1], 0, 0, buf, payload, NULL), 0);
	CHECK(test_check(buf, payload, 999));
	kvt_store_close(s);
	free(buf);
}

/* A zero-copy put whose write lands after its deadline: removed again, since the caller
 * had its buffer back at -ETIMEDOUT and what landed may not be what was put. */
static void late_zero_copy(struct slowfs *f)
{
	fprintf(stderr, "== nvme on slowfs: a zero-copy put that lands after its deadline\n");
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/nvme-zc", f->mnt);
	CHECK(mkdir(dir, 0700) == 0);
	struct kvt_config *c = test_config("nvme", dir);
	test_set_big_model(c, "128"); /* 4 MiB chunks: zero-copy objects */
	test_set(c, "nvme.direct", "off");
	test_set(c, "nvme.bytes", "64MiB");
	test_set_deadline(c, "400", "100");
	test_set(c, "store.sync_timeout_ms", "1000");
	struct kvt_store *s = open_retrying(c);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t len = kvt_payload_bytes(g, g->chunk_tokens);
	uint8_t *buf = kvt__huge_alloc(len), *back = kvt__huge_alloc(len);
	CHECK(buf && back);
	struct kvt_key k[2];
	test_chain_keys(s, k, 2, 9);
	test_fill(buf, len, 1);
	CHECK_RC(kvt_put_sync(s, &k[0], NULL, g->chunk_tokens, buf, len), 0);
	CHECKM(kvt__store_zero_copy_puts(s) == 1, "the put went the zero-copy way");
	struct kvt_stats st0, st;
	kvt_stats(s, &st0);

	kill(f->pid, SIGUSR1);
	usleep(20000);
	test_fill(buf, len, 2);
	double ms;
	int rc;
	TEST_BOUNDED(ms, CEIL_MS + SLACK_MS, "zero-copy put",
		     rc = kvt_put_sync(s, &k[1], &k[0], g->chunk_tokens, buf, len),
		     "  stalled: zero-copy put %.0f ms (%s)\n", ms, kvt_strerror(rc));
	CHECK_RC(rc, -ETIMEDOUT);
	CHECK_EQ(kvt__store_zero_copy_puts(s), 2);
	memset(buf, 0xee, len); /* the caller's again: it may write anything there */
	kill(f->pid, SIGUSR2);

	/* The late write lands, then the engine removes it: wait for that removal. */
	bool removed = false;
	for (int i = 0; i < 500 && !removed; i++) {
		kvt_stats(s, &st);
		removed = st.tier[0].removes > st0.tier[0].removes;
		if (!removed)
			usleep(20000);
	}
	CHECKM(removed, "the late zero-copy write was removed (removes %llu)",
	       (unsigned long long)st.tier[0].removes);
	kvt_stats(s, &st);
	CHECK_EQ(st.tier[0].objects, st0.tier[0].objects);
	CHECK_RC(kvt_get_sync(s, &k[1], 0, 0, back, len, NULL), -ENOENT);
	CHECK_RC(kvt_get_sync(s, &k[0], 0, 0, back, len, NULL), 0);
	CHECK(test_check(back, len, 1));
	kvt_stats(s, &st);
	CHECK_EQ(st.tier[0].checksum_failures, st0.tier[0].checksum_failures);
	kvt_store_close(s);

	/* nothing of it on disk either */
	s = open_retrying(c);
	CHECK_RC(kvt_get_sync(s, &k[1], 0, 0, back, len, NULL), -ENOENT);
	CHECK_RC(kvt_get_sync(s, &k[0], 0, 0, back, len, NULL), 0);
	CHECK(test_check(back, len, 1));
	kvt_store_close(s);
	kvt_config_destroy(c);
	kvt__huge_free(buf, len);
	kvt__huge_free(back, len);
	fprintf(stderr, "  the late write was removed; the key is a miss, also after a reopen\n");
}

/* A log sink whose argument the caller frees once kvt_store_open / kvt_store_close
 * returned: nothing of the store may call it then. */
static atomic_int log_returned, log_late;
struct log_ctx {
	int magic;
};

static void ctx_log(void *arg, int level, const char *msg)
{
	if (atomic_load(&log_returned)) {
		atomic_fetch_add(&log_late, 1);
		fprintf(stderr, "  LOG AFTER RETURN (argument freed): [%d] %s\n", level, msg);
	}
	struct log_ctx *c = arg;
	(void)*(volatile int *)&c->magic; /* what a real sink does with its argument */
}

static struct kvt_config *ctx_config(const char *dir, struct log_ctx *ctx)
{
	struct kvt_config *c = test_config("fs", dir);
	kvt_config_set_log(c, ctx_log, ctx, KVT_LOG_DEBUG);
	test_set(c, "fs.dir", dir);
	test_set(c, "fs.fsync", "none");
	test_set_deadline(c, "400", "100");
	test_set(c, "store.sync_timeout_ms", "1000");
	return c;
}

/* Wait for what was left running once the mount answers again; count late log calls. */
static void release_and_count(struct slowfs *f, struct log_ctx *ctx, const char *what)
{
	atomic_store(&log_returned, 1);
	free(ctx);
	kill(f->pid, SIGUSR2);
	usleep(1500000);
	int late = atomic_exchange(&log_late, 0);
	atomic_store(&log_returned, 0);
	fprintf(stderr, "  %s: %d log calls after it returned\n", what, late);
	CHECKM(late == 0, "%s: the caller's log was called %d times after it returned", what,
	       late);
}

static void late_log(struct slowfs *f)
{
	fprintf(stderr, "== fs on slowfs: no log call after an open or close gave up\n");
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/fs-log", f->mnt);
	CHECK(mkdir(dir, 0700) == 0);

	/* an open past store.sync_timeout_ms: its tier opens later, and closes at once */
	struct log_ctx *ctx = calloc(1, sizeof(*ctx));
	struct kvt_config *c = ctx_config(dir, ctx);
	kill(f->pid, SIGUSR1);
	usleep(20000);
	struct kvt_store *s = NULL;
	double ms;
	int rc;
	TEST_BOUNDED(ms, SYNC_MS + SLACK_MS, "open", rc = kvt_store_open(c, &s),
		     "  stalled: open %.0f ms (%s)\n", ms, kvt_strerror(rc));
	kvt_config_destroy(c);
	CHECK_RC(rc, -ETIMEDOUT);
	release_and_count(f, ctx, "kvt_store_open");

	/* a close past it: a put left in the tier (it missed its deadline) holds its close */
	ctx = calloc(1, sizeof(*ctx));
	c = ctx_config(dir, ctx);
	s = open_retrying(c);
	kvt_config_destroy(c);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t payload = kvt_payload_bytes(g, g->chunk_tokens);
	void *buf = malloc(payload);
	struct kvt_key k;
	test_chain_keys(s, &k, 1, 11);
	test_fill(buf, payload, 1);
	kill(f->pid, SIGUSR1);
	usleep(20000);
	rc = kvt_put_sync(s, &k, NULL, g->chunk_tokens, buf, payload);
	CHECK_RC(rc, -ETIMEDOUT);
	/* the directory goes away under the held write (in the backing directory, past the
	 * mount): once the mount answers, the write fails, and the tier warns of it */
	char cmd[8400];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s/fs-log'", f->back);
	CHECK(system(cmd) == 0);
	TEST_BOUNDED(ms, SYNC_MS + SLACK_MS, "close", kvt_store_close(s),
		     "  stalled: close %.0f ms\n", ms);
	release_and_count(f, ctx, "kvt_store_close");
	free(buf);
}

/* A tier that hangs behind DRAM (write-through): puts go on in the rest of the pool. Its
 * unanswered writes hold their slots for as long as it hangs; until 2026-12-06 they held
 * the whole pool (1 MiB, 28 slots here) and every put after the 28th was refused -EAGAIN
 * for as long as the tier hung (172 of 200 over 2 s). Now what its calls may hold is half
 * the pool (store->late_cap): puts are told to retry until its first deadline passes (400
 * ms), then its writes are skipped and every put lands in DRAM. */
static void hung_pins(struct slowfs *f)
{
	fprintf(stderr, "== dram,fs on slowfs: puts while the tier hangs for seconds\n");
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/pins", f->mnt);
	CHECK(mkdir(dir, 0700) == 0);
	struct kvt_store *s = open_store("dram,fs", dir);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t payload = kvt_payload_bytes(g, g->chunk_tokens);
	void *buf = malloc(payload);
	kill(f->pid, SIGUSR1);
	usleep(20000);
	enum { N = 200, LATE = 100 };
	int fails = 0, late_fails = 0;
	uint64_t t0 = test_now_ns();
	for (int i = 0; i < N; i++) {
		struct kvt_key k;
		uint32_t t[2] = {12345, (uint32_t)i};
		kvt_key_next(kvt_store_ns_id(s), NULL, t, 2, &k);
		test_fill(buf, payload, (uint64_t)i);
		int rc = kvt_put_sync(s, &k, NULL, g->chunk_tokens, buf, payload);
		if (rc < 0) {
			fails++;
			late_fails += i >= LATE;
			CHECKM(rc == -EAGAIN, "put %d: %s", i, kvt_strerror(rc));
		}
		usleep(10000);
	}
	fprintf(stderr, "  %d of %d puts refused over %.0f ms, %d of the last %d\n", fails, N,
		test_ms_since(t0), late_fails, N - LATE);
	CHECKM(late_fails == 0, "puts refused %.0f ms into the hang: %d", test_ms_since(t0),
	       late_fails);
	/* what the hung tier holds, as `kvtier stat --json` and kvtierd's metrics report it */
	uint64_t cap, held = kvt__store_late_held(s, 1, &cap);
	uint64_t obj = kvt_object_bytes(g, g->chunk_tokens);
	fprintf(stderr, "  the tier holds %llu KiB in late calls, at most %llu KiB\n",
		(unsigned long long)(held >> 10), (unsigned long long)(cap >> 10));
	CHECKM(held >= cap && held <= cap + 2 * obj, "late held %llu, cap %llu",
	       (unsigned long long)held, (unsigned long long)cap);
	/* and as kvt_stats reports it to an embedder */
	struct kvt_stats st;
	CHECK_RC(kvt_stats(s, &st), 0);
	CHECKM(st.late_held_bytes[1] >= cap && st.late_held_bytes[1] <= cap + 2 * obj &&
		       st.late_held_cap_bytes == cap && st.late_held_bytes[0] == 0,
	       "kvt_stats: late held %llu (DRAM %llu), cap %llu",
	       (unsigned long long)st.late_held_bytes[1], (unsigned long long)st.late_held_bytes[0],
	       (unsigned long long)st.late_held_cap_bytes);
	kill(f->pid, SIGUSR2);
	kvt_store_close(s);
	free(buf);
}

int main(void)
{
	static struct slowfs f;
	int rc = slowfs_start(&f, "slowfs", NULL);
	if (rc)
		return rc;
	hung_pins(&f);
	stalled_store(&f, "fs");
	stalled_store(&f, "nvme");
	late_zero_copy(&f);
	late_log(&f);
	slowfs_stop(&f);
	fprintf(stderr, "store_stall_fs: ok\n");
	return 0;
}
