/*
 * daemon_prefetch_timens.c - a client in another time namespace than kvtierd (unshare -T,
 * a container, a restored checkpoint: CLOCK_MONOTONIC differs by an offset) prefetches as
 * any other. Every budget a client sends is a duration the daemon reads on its own clock;
 * PREFETCH sent an absolute CLOCK_MONOTONIC deadline until 2026-12-06 (a review): from a
 * client whose clock is 20 s behind the daemon's, every prefetch with a deadline was cut
 * at once (-ETIME), and one 20 s ahead held the daemon past the client's timeout.
 *
 * kvtierd (DRAM over NVMe, each answer of which takes 50 ms); 8 chunks put and flushed, the
 * daemon restarted (DRAM empty). A child in a new time namespace whose
 * CLOCK_MONOTONIC is 20 s behind opens a client store and prefetches them with a deadline
 * 3 s away: the count (8), well within the deadline, then a get of one reads it back.
 * Needs root (a time namespace), as CI has.
 */
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>

#include "internal.h"
#include "lib/daemon_harness.h"

enum { N = 8 };

int main(void)
{
	char *dir = test_tmpdir("daemon_pf_timens"), sock_path[100];
	snprintf(sock_path, sizeof(sock_path), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	/* DRAM over NVMe whose every answer takes 50 ms: a prefetch is not over at once */
	const char *extra[] = {"--set", "store.tiers=dram,faulty", "--set", "faulty.inner=nvme",
			       "--set", "faulty.delay_ms=50", NULL};
	kvtd_start_test(sock_path, dir, extra);
	struct kvt_store *s = kvtd_client_store(dir);
	size_t payload = kvt_payload_bytes(kvt_store_geometry(s), 16);
	uint8_t *buf = malloc(payload), *out = malloc(payload);
	CHECK(buf && out);
	struct kvt_key k[N];
	for (int i = 0; i < N; i++) {
		memset(k[i].bytes, 0x30 + i, sizeof(k[i].bytes));
		test_fill(buf, payload, 100 + (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &k[i], NULL, 16, buf, payload), 0);
	}
	CHECK_RC(kvt_flush_sync(s), 0);
	kvt_store_close(s);
	kvtd_stop(); /* a new daemon: its DRAM empty, the chunks on NVMe */
	kvtd_start_test(sock_path, dir, extra);

	if (unshare(CLONE_NEWTIME) < 0) {
		fprintf(stderr, "daemon_prefetch_timens: unshare(CLONE_NEWTIME): %s\n",
			strerror(errno));
		kvtd_stop();
		CHECKM(0, "no time namespace here (needs root and Linux 5.6)");
	}
	FILE *f = fopen("/proc/self/timens_offsets", "w");
	CHECK(f);
	CHECK(fprintf(f, "monotonic -20 0\n") > 0);
	CHECKM(fclose(f) == 0, "timens_offsets: %s", strerror(errno));
	fflush(NULL);
	pid_t p = fork();
	if (p == 0) {
		alarm(30);
		uint64_t t0 = test_now_ns();
		struct kvt_store *c = kvtd_client_store(dir);
		int rc = kvt_prefetch_sync(c, k, N, kvt__now_ns() + 3000 * 1000000ull);
		double ms = test_ms_since(t0);
		struct kvt_result res;
		int grc = kvt_get_sync(c, &k[3], 0, 0, out, payload, &res);
		test_fill(buf, payload, 103);
		bool same = grc == 0 && !memcmp(out, buf, payload);
		printf("daemon_prefetch_timens: a client 20 s behind the daemon's clock: prefetch "
		       "(deadline 3 s) %d after %.0f ms; a get %d%s\n",
		       rc, ms, grc, same ? ", exact" : "");
		kvt_store_close(c);
		fflush(NULL);
		_exit(rc == N && ms < 2500 && same ? 0 : 1);
	}
	CHECK(p > 0);
	int st;
	CHECK(waitpid(p, &st, 0) == p);
	kvtd_stop();
	free(buf);
	free(out);
	test_rmdir(dir);
	free(dir);
	CHECKM(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the client in another time namespace: %d",
	       st);
	printf("daemon_prefetch_timens: ok\n");
	return 0;
}
