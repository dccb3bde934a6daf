/*
 * daemon_tp_backlog.c - the write-behind bound with tensor-parallel ranks racing through
 * kvtierd. Two rank processes (TP=2, one KV head each) save the same chunks, each at its
 * own pace, into a daemon whose deeper tier writes 20 objects a second. The daemon refuses
 * a *new* chunk while the tier is backlogged (-EAGAIN, the rank retries) but must finish a
 * chunk the other rank has started: were that rank refused too, the started object would
 * hold its DRAM slot until its lease ran out and be cancelled. So: every save of both
 * ranks completes, some were told to retry, no object is cancelled or left partial, the
 * flush succeeds (it fails on a write-behind that missed its deadline), and after the
 * daemon stops every chunk is on the NVMe tier with both heads, intact.
 * daemon_device_backlog.c is the same flood from one TP=1 rank.
 */
#include <sys/wait.h>

#include "../unit/device_common.h"
#include "testlib.h"
#include "lib/daemon_harness.h"
#include "lib/device_flood.h"

enum { WARM = 10, M = 30, NTOK = 256, SEED = 700, RANKS = 2 };

/* Fork RANKS rank processes, rank r holding KV head r, to save chunks [from, to); wait for
 * them and put each one's -EAGAIN count in eagain[r]. led: rank 0 saves each chunk first
 * and then passes its index to rank 1 through a pipe; else both run free. Forked with no
 * store open in this process (no threads to lose in the fork). */
static void run_ranks(const char *dir, const char *sock, const struct kvt_geometry *g,
		      const struct kvt_key *k, int from, int to, bool led, int *eagain)
{
	int res[2], hand[2];
	CHECK(pipe(res) == 0 && pipe(hand) == 0);
	pid_t pid[RANKS];
	for (int r = 0; r < RANKS; r++) {
		pid[r] = fork();
		CHECK(pid[r] >= 0);
		if (pid[r])
			continue;
		struct kvt_store *s = dfl_client(dir, sock);
		int n = 0;
		for (int i = from; i < to; i++) {
			int got = i;
			if (led && r == 1) /* a chunk rank 0 has started, and only then */
				CHECK(read(hand[0], &got, sizeof(got)) == (ssize_t)sizeof(got) &&
				      got == i);
			n += dfl_flood_heads(s, g, k, i, i + 1, SEED, (uint32_t)r, (uint32_t)r + 1);
			if (led && r == 0)
				CHECK(write(hand[1], &i, sizeof(i)) == (ssize_t)sizeof(i));
		}
		kvt_store_close(s);
		int rep[2] = {r, n};
		CHECK(write(res[1], rep, sizeof(rep)) == (ssize_t)sizeof(rep));
		_exit(0);
	}
	close(res[1]);
	close(hand[0]);
	close(hand[1]);
	for (int r = 0; r < RANKS; r++) {
		int st, rep[2];
		CHECK(waitpid(pid[r], &st, 0) == pid[r]);
		CHECKM(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d failed (status %#x)", r, st);
		CHECK(read(res[0], rep, sizeof(rep)) == (ssize_t)sizeof(rep));
		eagain[rep[0]] = rep[1];
	}
	close(res[0]);
}

int main(void)
{
	char *dir = test_tmpdir("daemon_tp_backlog");
	char sock[108];
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	dfl_daemon_start(sock, dir);
	const struct kvt_geometry g = DFL_GEO;

	struct kvt_key k[WARM + 2 * M];
	{ /* warm-up, closed again before the ranks fork: no store threads in a fork */
		struct kvt_store *s = dfl_client(dir, sock);
		test_chain_keys(s, k, WARM + 2 * M, 17);
		dfl_warm(s, k, WARM, NTOK, SEED);
		memcpy(kvtd_ns, kvt_store_ns_id(s), sizeof(kvtd_ns)); /* for raw_status */
		kvt_store_close(s);
	}
	uint64_t t0 = test_now_ns();

	/* Phase 1, one rank leads: rank 0 saves each chunk first (told to retry while the tier
	 * is backlogged) and then hands it to rank 1, whose save of a chunk rank 0 started
	 * must never be refused. Phase 2, both ranks race over fresh chunks. */
	int led[2];
	run_ranks(dir, sock, &g, k, WARM, WARM + M, true, led);
	CHECKM(led[0] > 0, "the daemon never held the leading rank back");
	CHECKM(led[1] == 0, "a save of a chunk the other rank had started was refused %d times",
	       led[1]);
	int raced[2];
	run_ranks(dir, sock, &g, k, WARM + M, WARM + 2 * M, false, raced);
	CHECKM(raced[0] + raced[1] > 0, "the daemon never held a racing rank back");

	struct kvt_store *s = dfl_client(dir, sock);
	CHECK_RC(kvt_flush_sync(s), 0); /* fails on a write-behind that missed its deadline */
	kvt_store_close(s);
	struct raw raw = raw_attach();
	struct kvtd_status st = raw_status(&raw);
	raw_close(&raw);
	fprintf(stderr, "  TP=2 ranks through kvtierd over a 20-objects/s tier, %d chunks each "
			"phase: led, %d + %d told to retry; raced, %d + %d; %.0f ms; published %llu, "
			"cancelled %llu, partial %llu\n",
		M, led[0], led[1], raced[0], raced[1], test_ms_since(t0),
		(unsigned long long)st.tp_published, (unsigned long long)st.tp_cancelled,
		(unsigned long long)st.tp_partials);
	CHECK_EQ(st.tp_published, (uint64_t)(2 * M));
	CHECK_EQ(st.tp_cancelled, 0);
	CHECK_EQ(st.tp_partials, 0);
	kvtd_stop();

	char data[300];
	snprintf(data, sizeof(data), "%s/data", dir);
	dfl_check_landed(data, k, WARM + 2 * M, "256", SEED);
	test_rmdir(dir);
	free(dir);
	printf("daemon_tp_backlog: ok\n");
	return 0;
}
