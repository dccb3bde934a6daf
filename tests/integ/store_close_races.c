/*
 * store_close_races.c - kvt_store_close while other threads are inside calls on the store
 * (include/kvtier.h, at kvt_store_close and kvt_store_shutdown). Real files: chains
 * "dram,nvme", "nvme" and "dram" in a temporary directory.
 *
 *  1. Three threads loop over every call on the store (put, get, lookup, prefetch, remove,
 *     flush and their *_sync forms, stats, the accessors, a non-blocking poll) and two poll
 *     (one waiting forever, one 5 ms at a time) while the main thread closes it, 40 times
 *     at varying moments. Each thread stops at the first -ECANCELED. So that no thread
 *     starts a call once the close has returned (no library can catch that: the store is
 *     freed), the close is held open until every thread has stopped by a completion that
 *     the close itself delivers (queued just before it): it waits for the other threads.
 *     The close used to free the store and close its tiers under the calls still running
 *     (a use after free, under ASan) and leave a waiting poll asleep; the polls never
 *     returned -ECANCELED, so the pollers never stopped.
 *  2. kvt_store_close from a completion callback, inside kvt_poll on the same thread: the
 *     close used to free the store under the kvt_poll running the callback. It is now
 *     finished when that kvt_poll returns.
 *  3. kvt_store_close from a callback that the close itself runs: used to free the store
 *     twice. A close already under way on the thread is left to finish.
 *  4. kvt_store_shutdown, then join the threads (a poll waiting forever must be woken),
 *     then kvt_store_close: the two-phase close for threads that stop on -ECANCELED.
 *  5. After kvt_store_shutdown, kvt_poll still runs a completion already queued, then
 *     answers -ECANCELED (it used to leave it for the close).
 *  6. A callback that polls for a sibling's completion while another thread closes: its
 *     nested kvt_poll still runs completions (its outer kvt_poll holds the close), so it
 *     gets it and the close finishes (its polls used to be refused: the close hung).
 *  7. 1 again with client-mode stores of a real kvtierd (store.daemon): the gate is the
 *     store's, in front of the client's calls.
 * Every asynchronous call that returned 0 must have had its callback exactly once by the
 * time the close returns. Exit 0 pass, 1 fail.
 */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

#include "engine.h" /* kvt__store_complete: a completion no operation owns */
#include "lib/daemon_harness.h"
#include "testlib.h"

#define WORKERS 3
#define POLLERS 2
#define THREADS (WORKERS + POLLERS)
#define NK 6
#define ROUNDS 40

static struct kvt_store *g_s;
static struct kvt_key g_keys[NK];
static size_t g_len;
static uint32_t g_tokens;
static uint8_t *g_payload;
static uint8_t *g_get_buf[WORKERS], *g_sync_buf[WORKERS];
static _Atomic int g_get_busy[WORKERS]; /* one async get per worker at a time (its buffer) */
static _Atomic int g_stopped[THREADS];
static _Thread_local int t_idx = -1;
static _Atomic long g_submitted, g_callbacks, g_calls;
static _Atomic int g_blocker_ran, g_blocker_timeout;

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "store_close_races: FAIL: hung (a thread never returned or "
				  "the close never finished)\n";
	ssize_t w = write(2, msg, sizeof(msg) - 1);
	(void)w;
	_exit(1);
}

static void count_cb(void *arg, const struct kvt_result *r)
{
	(void)arg;
	(void)r;
	/* a callback may call into the store: while it closes, that is refused, not a crash */
	(void)kvt_store_tier_count(g_s);
	atomic_fetch_add(&g_callbacks, 1);
}

static void get_cb(void *arg, const struct kvt_result *r)
{
	(void)r;
	atomic_store((_Atomic int *)arg, 0);
	atomic_fetch_add(&g_callbacks, 1);
}

static int async_rc(int rc)
{
	if (rc == 0)
		atomic_fetch_add(&g_submitted, 1);
	return rc;
}

/* One call of kind i on the store; -ECANCELED once it is closing. */
static int one_call(int id, unsigned i)
{
	const struct kvt_key *k = &g_keys[i % NK];
	int rc = 0;
	switch (i % 14) {
	case 0:
		return async_rc(kvt_put(g_s, k, NULL, g_tokens, g_payload, g_len, count_cb, NULL));
	case 1:
		if (atomic_exchange(&g_get_busy[id], 1))
			return 0;
		rc = kvt_get(g_s, k, 0, 0, g_get_buf[id], g_len, get_cb, &g_get_busy[id]);
		if (rc < 0)
			atomic_store(&g_get_busy[id], 0);
		return async_rc(rc);
	case 2:
		return async_rc(kvt_lookup(g_s, g_keys, NK, NULL, count_cb, NULL));
	case 3:
		return async_rc(kvt_prefetch(g_s, g_keys, NK, 0, count_cb, NULL));
	case 4:
		return async_rc(kvt_remove(g_s, k, count_cb, NULL));
	case 5:
		return async_rc(kvt_flush(g_s, count_cb, NULL));
	case 6:
		return kvt_get_sync(g_s, k, 0, 0, g_sync_buf[id], g_len, NULL);
	case 7:
		return kvt_put_sync(g_s, k, NULL, g_tokens, g_payload, g_len);
	case 8: {
		int8_t tiers[NK];
		return kvt_lookup_sync(g_s, g_keys, NK, tiers);
	}
	case 9: {
		struct kvt_stats st;
		return kvt_stats(g_s, &st);
	}
	case 10:
		rc = kvt_store_tier_count(g_s);
		if (rc >= 0 && strcmp(kvt_store_tier_name(g_s, 0), "none") == 0)
			return -ECANCELED;
		return rc;
	case 11:
		if (!kvt_store_geometry(g_s) || !kvt_store_ns_id(g_s))
			return -ECANCELED;
		return kvt_store_fd(g_s);
	case 12:
		return kvt_poll(g_s, 0);
	default:
		return kvt_remove_sync(g_s, k);
	}
}

static void *worker(void *arg)
{
	int id = (int)(intptr_t)arg;
	t_idx = id;
	for (unsigned i = (unsigned)id * 5;; i++) {
		atomic_fetch_add(&g_calls, 1);
		if (one_call(id, i) == -ECANCELED)
			break;
	}
	atomic_store(&g_stopped[id], 1);
	return NULL;
}

static void *poller(void *arg)
{
	int id = (int)(intptr_t)arg;
	t_idx = id;
	int timeout = id == WORKERS ? -1 : 5;
	for (;;) {
		atomic_fetch_add(&g_calls, 1);
		if (kvt_poll(g_s, timeout) == -ECANCELED)
			break;
	}
	atomic_store(&g_stopped[id], 1);
	return NULL;
}

/* Delivered by the close (or by a poll that took it first, which the close then waits
 * for): holds the close open until every other thread has stopped calling. */
static void blocker_cb(void *arg, const struct kvt_result *r)
{
	(void)arg;
	(void)r;
	uint64_t t0 = test_now_ns();
	for (;;) {
		int running = 0;
		for (int i = 0; i < THREADS; i++)
			if (i != t_idx && !atomic_load(&g_stopped[i]))
				running++;
		if (!running)
			break;
		if (test_ms_since(t0) > 10000) {
			fprintf(stderr,
				"  %d thread(s) still calling 10 s into the close: they "
				"never got -ECANCELED\n",
				running);
			atomic_store(&g_blocker_timeout, 1);
			break;
		}
		usleep(500);
	}
	atomic_store(&g_blocker_ran, 1);
	atomic_fetch_add(&g_callbacks, 1);
}

static struct kvt_store *open_store(const char *dir, const char *tiers)
{
	struct kvt_store *s;
	if (!strcmp(tiers, "client")) {
		s = kvtd_client_store(dir);
	} else {
		struct kvt_config *c = test_config(tiers, dir);
		s = test_open(c);
	}
	const struct kvt_geometry *g = kvt_store_geometry(s);
	g_tokens = g->chunk_tokens;
	g_len = kvt_payload_bytes(g, g_tokens);
	test_chain_keys(s, g_keys, NK, 42);
	return s;
}

static void start_threads(pthread_t *th)
{
	for (int i = 0; i < THREADS; i++) {
		atomic_store(&g_stopped[i], 0);
		CHECK(pthread_create(&th[i], NULL, i < WORKERS ? worker : poller,
				     (void *)(intptr_t)i) == 0);
	}
}

static void check_callbacks(const char *what)
{
	long sub = atomic_load(&g_submitted), cbs = atomic_load(&g_callbacks);
	CHECKM(sub == cbs, "%s: %ld calls returned 0 but %ld callbacks ran", what, sub, cbs);
}

static void reset_counts(void)
{
	atomic_store(&g_submitted, 0);
	atomic_store(&g_callbacks, 0);
	atomic_store(&g_blocker_ran, 0);
	atomic_store(&g_blocker_timeout, 0);
	for (int i = 0; i < WORKERS; i++)
		atomic_store(&g_get_busy[i], 0);
}

/* 1 (and 5: chains is {"client"}). close under calls in flight */
static void test_close_under_calls(const char *base, const char *const *chains, int n_chains,
				   int rounds)
{
	long calls = 0;
	for (int round = 0; round < rounds; round++) {
		char dir[300];
		snprintf(dir, sizeof(dir), "%s/r%d", base, round);
		const char *tiers = chains[round % n_chains];
		g_s = open_store(dir, tiers);
		reset_counts();
		for (int i = 0; i < NK; i += 2) /* some hits */
			CHECK_RC(kvt_put_sync(g_s, &g_keys[i], NULL, g_tokens, g_payload, g_len),
				 0);
		atomic_store(&g_calls, 0);
		pthread_t th[THREADS];
		start_threads(th);
		usleep((useconds_t)((round * 1733) % 20000)); /* close at varying moments */
		struct kvt_result res = {.status = 0, .tier = KVT_TIER_NONE};
		atomic_fetch_add(&g_submitted, 1);
		kvt__store_complete(g_s, blocker_cb, NULL, &res);
		kvt_store_close(g_s);
		int running = 0;
		for (int i = 0; i < THREADS; i++)
			running += !atomic_load(&g_stopped[i]);
		if (running || !atomic_load(&g_blocker_ran)) {
			fprintf(stderr,
				"round %d (%s): the close returned with %d thread(s) still "
				"calling (the completion queued before it %s)\n",
				round, tiers, running,
				atomic_load(&g_blocker_ran)
				    ? "ran"
				    : "still running on another thread's kvt_poll");
			/* what they do with the freed store, for a sanitizer to see */
			usleep(1000 * 1000);
			exit(1);
		}
		CHECKM(!atomic_load(&g_blocker_timeout),
		       "round %d (%s): threads were never told "
		       "the store is closing",
		       round, tiers);
		for (int i = 0; i < THREADS; i++)
			pthread_join(th[i], NULL);
		check_callbacks(tiers);
		calls += atomic_load(&g_calls);
		test_rmdir(dir);
	}
	printf("  close under calls (%s%s): %d closes, %ld calls from 5 threads, every one "
	       "returned and every callback ran once\n",
	       chains[0], n_chains > 1 ? ", ..." : "", rounds, calls);
}

/* 2 and 3: close from a completion callback */
static _Atomic int g_close_cb_ran;

static void close_cb(void *arg, const struct kvt_result *r)
{
	(void)arg;
	(void)r;
	kvt_store_close(g_s); /* inside kvt_poll (2) or inside the close itself (3) */
	atomic_store(&g_close_cb_ran, 1);
	atomic_fetch_add(&g_callbacks, 1);
}

static void test_close_from_callback(const char *base)
{
	char dir[300];
	snprintf(dir, sizeof(dir), "%s/cb", base);
	g_s = open_store(dir, "dram,nvme");
	reset_counts();
	atomic_store(&g_close_cb_ran, 0);
	CHECK_RC(
	    async_rc(kvt_put(g_s, &g_keys[0], NULL, g_tokens, g_payload, g_len, close_cb, NULL)),
	    0);
	CHECK_RC(
	    async_rc(kvt_put(g_s, &g_keys[1], NULL, g_tokens, g_payload, g_len, count_cb, NULL)),
	    0);
	uint64_t t0 = test_now_ns();
	int n = 0;
	while (!atomic_load(&g_close_cb_ran) && test_ms_since(t0) < 10000)
		n = kvt_poll(g_s, 100); /* the poll that runs close_cb finishes the close */
	CHECK(atomic_load(&g_close_cb_ran));
	CHECK_RC(n, -ECANCELED); /* it freed the store: the caller's cue to stop (was 1) */
	check_callbacks("close from a callback");
	printf("  close from a callback inside kvt_poll: done when the poll returned\n");

	snprintf(dir, sizeof(dir), "%s/cb2", base);
	g_s = open_store(dir, "dram,nvme");
	reset_counts();
	atomic_store(&g_close_cb_ran, 0);
	CHECK_RC(
	    async_rc(kvt_put(g_s, &g_keys[0], NULL, g_tokens, g_payload, g_len, close_cb, NULL)),
	    0);
	kvt_store_close(g_s); /* delivers close_cb, which closes again */
	CHECK(atomic_load(&g_close_cb_ran));
	check_callbacks("close from a callback the close runs");
	printf("  close from a callback that the close runs: one close\n");
}

/* 4. the two-phase close */
static void test_shutdown(const char *base)
{
	long calls = 0;
	for (int round = 0; round < 6; round++) {
		char dir[300];
		snprintf(dir, sizeof(dir), "%s/sd%d", base, round);
		g_s = open_store(dir, round % 2 ? "nvme" : "dram,nvme");
		reset_counts();
		atomic_store(&g_calls, 0);
		pthread_t th[THREADS];
		start_threads(th);
		usleep((useconds_t)(round * 3000));
		kvt_store_shutdown(g_s);
		for (int i = 0; i < THREADS; i++) /* they all stop: the waiting poll is woken */
			pthread_join(th[i], NULL);
		CHECK_RC(kvt_put_sync(g_s, &g_keys[0], NULL, g_tokens, g_payload, g_len),
			 -ECANCELED);
		int r; /* completions still arriving are run, without a wait; then -ECANCELED */
		while ((r = kvt_poll(g_s, -1)) > 0)
			;
		CHECK_RC(r, -ECANCELED);
		kvt_store_close(g_s);
		check_callbacks("shutdown");
		calls += atomic_load(&g_calls);
		test_rmdir(dir);
	}
	printf("  shutdown, join, close: 6 rounds, %ld calls, every thread stopped on "
	       "-ECANCELED\n",
	       calls);
}

/* 5. after kvt_store_shutdown, kvt_poll still runs what is queued (a worker collecting its
 * own completions before it exits), and only then answers -ECANCELED */
static void test_shutdown_collects(const char *base)
{
	char dir[300];
	snprintf(dir, sizeof(dir), "%s/sc", base);
	g_s = open_store(dir, "dram");
	reset_counts();
	CHECK_RC(
	    async_rc(kvt_put(g_s, &g_keys[0], NULL, g_tokens, g_payload, g_len, count_cb, NULL)),
	    0);
	struct pollfd pfd = {.fd = kvt_store_fd(g_s), .events = POLLIN};
	CHECK(poll(&pfd, 1, 10000) == 1); /* its completion is queued */
	kvt_store_shutdown(g_s);
	int first = kvt_poll(g_s, -1), second = kvt_poll(g_s, -1);
	printf("  after shutdown: a queued completion run by kvt_poll (%d), then %d\n", first,
	       second);
	CHECK_RC(first, 1); /* was -ECANCELED, the callback left for the close */
	CHECK_RC(second, -ECANCELED);
	CHECK(atomic_load(&g_callbacks) == 1);
	kvt_store_close(g_s);
	check_callbacks("shutdown, then poll");
}

/* 6. a callback that polls for a sibling's completion while another thread closes the
 * store: its nested kvt_poll still runs completions (its outer kvt_poll holds the close),
 * so it gets the sibling's and returns, and the close finishes */
static _Atomic int g_in_cb1, g_cb2_ran, g_cb1_timeout;

static void cb2(void *arg, const struct kvt_result *r)
{
	(void)arg;
	(void)r;
	atomic_store(&g_cb2_ran, 1);
	atomic_fetch_add(&g_callbacks, 1);
}

static void cb1(void *arg, const struct kvt_result *r)
{
	(void)arg;
	(void)r;
	atomic_store(&g_in_cb1, 1);
	uint64_t t0 = test_now_ns();
	while (!atomic_load(&g_cb2_ran) && test_ms_since(t0) < 5000)
		kvt_poll(g_s, 10);
	if (!atomic_load(&g_cb2_ran))
		atomic_store(&g_cb1_timeout, 1);
	atomic_fetch_add(&g_callbacks, 1);
}

static void *poll_once(void *arg)
{
	(void)arg;
	kvt_poll(g_s, 5000);
	return NULL;
}

static void *closer(void *arg)
{
	(void)arg;
	kvt_store_close(g_s);
	return NULL;
}

static void test_nested_poll_during_close(const char *base)
{
	char dir[300];
	snprintf(dir, sizeof(dir), "%s/np", base);
	g_s = open_store(dir, "dram");
	reset_counts();
	struct kvt_result res = {0};
	pthread_t a, c;
	CHECK(pthread_create(&a, NULL, poll_once, NULL) == 0);
	kvt__store_complete(g_s, cb1, NULL, &res);
	uint64_t t0 = test_now_ns();
	while (!atomic_load(&g_in_cb1) && test_ms_since(t0) < 5000)
		usleep(1000);
	CHECK(atomic_load(&g_in_cb1));
	CHECK(pthread_create(&c, NULL, closer, NULL) == 0);
	usleep(50000); /* the close has begun: it waits for the poll running cb1 */
	kvt__store_complete(g_s, cb2, NULL, &res);
	pthread_join(a, NULL);
	pthread_join(c, NULL);
	printf("  a callback polling for its sibling during a close: %s\n",
	       atomic_load(&g_cb1_timeout) ? "never got it (5 s)" : "got it, the close finished");
	CHECK(!atomic_load(&g_cb1_timeout)); /* was: its polls refused, the close waiting */
	CHECK(atomic_load(&g_cb2_ran));
}

/* 7. a callback that polls for a sibling completion queued together with its own: the
 * outer kvt_poll has not run it yet, so the nested one must find it on the queue (each
 * poll takes one completion at a time; it used to take the whole queue first, and the
 * nested poll waited out its 5 s for a completion held by its caller) */
static void test_nested_poll_sibling(const char *dir, const char *tiers)
{
	g_s = open_store(dir, tiers);
	reset_counts();
	atomic_store(&g_in_cb1, 0);
	atomic_store(&g_cb2_ran, 0);
	atomic_store(&g_cb1_timeout, 0);
	struct kvt_result res = {0};
	kvt__store_complete(g_s, cb1, NULL, &res);
	kvt__store_complete(g_s, cb2, NULL, &res);
	uint64_t t0 = test_now_ns();
	int n = kvt_poll(g_s, 5000); /* both are queued: it runs cb1, whose poll runs cb2 */
	double ms = test_ms_since(t0);
	printf("  %s: a callback polling for a sibling queued with it: %s in %.0f ms, outer "
	       "poll ran %d\n",
	       tiers, atomic_load(&g_cb1_timeout) ? "never got it" : "got it", ms, n);
	CHECK(atomic_load(&g_in_cb1));
	CHECK(!atomic_load(&g_cb1_timeout)); /* was: waited its 5 s, then the outer ran cb2 */
	CHECK(atomic_load(&g_cb2_ran));
	CHECK(n == 1); /* the nested poll ran cb2, so the outer one ran only cb1 */
	CHECK(kvt_poll(g_s, 0) == 0); /* nothing left, nothing run twice */
	CHECK(atomic_load(&g_callbacks) == 2);
	kvt_store_close(g_s);
}

int main(void)
{
	signal(SIGALRM, on_alarm);
	alarm(600);
	char *base = test_tmpdir("close-races");
	g_payload = malloc(4 << 20);
	test_fill(g_payload, 4 << 20, 7);
	for (int i = 0; i < WORKERS; i++) {
		g_get_buf[i] = malloc(4 << 20);
		g_sync_buf[i] = malloc(4 << 20);
	}
	static const char *const chains[] = {"dram,nvme", "nvme", "dram"};
	test_close_under_calls(base, chains, 3, ROUNDS);
	test_close_from_callback(base);
	test_shutdown(base);
	test_shutdown_collects(base);
	test_nested_poll_during_close(base);
	char nps[300];
	snprintf(nps, sizeof(nps), "%s/nps", base);
	test_nested_poll_sibling(nps, "dram");
	char sock[100], ddir[200];
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", base);
	snprintf(ddir, sizeof(ddir), "%s/daemon", base);
	CHECK(mkdir(ddir, 0700) == 0);
	kvtd_start_test(sock, ddir, NULL);
	static const char *const client[] = {"client"};
	test_close_under_calls(ddir, client, 1, 8);
	test_nested_poll_sibling(ddir, "client");
	kvtd_stop();
	test_rmdir(base);
	free(base);
	printf("store_close_races: ok\n");
	return 0;
}
