/*
 * daemon_fork_conn.c - a client-mode store's connection ends when the store drops it, even
 * if the process forked (without exec) while it was open. Why: the socket (SOCK_CLOEXEC:
 * closed at exec only) and the region memfd are inherited by fork(), so a child keeps the
 * daemon's end open after the parent's close: the daemon never sees EOF, so the
 * connection keeps its thread, region and daemon.max_clients place, its pins until their
 * lease, its expired reservations quarantined (charged to the parent) and a cut
 * connection's TP claims until the child exits (the pool is mapped MADV_DONTFORK for this
 * reason; the socket is not handled).
 *  1. a store attached, a round trip; fork() a child that only sleeps (a worker of a fork
 *     pool); the parent closes its store;
 *  2. STATUS from a fresh raw connection must show only itself;
 *  3. with daemon.max_clients=3: each of three open/fork/close cycles leaves one connection
 *     behind, and a fourth store cannot attach at all.
 *  4. a forked child that calls the store it inherited: every call fails -ENOTCONN at once
 *     (a get misses)
 *     (it has none of the parent's threads, and no pool: MADV_DONTFORK) and its close
 *     returns; the parent's store works on, and nothing the child tried reached the pool.
 *     Until 2026-12-06 the child reconnected, its new region could be unmapped with the
 *     pool's stale range and the new pool mapped there: its puts wrote into the shared pool
 *     over other clients' objects and its gets returned pool bytes (a review's reproducer).
 */
#include <signal.h>
#include <sys/wait.h>

#include "internal.h"
#include "lib/daemon_harness.h"

static pid_t sleeper(void)
{
	pid_t p = fork();
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a failed test */
		for (;;)
			pause();
	}
	CHECK(p > 0);
	return p;
}

int main(void)
{
	char *dir = test_tmpdir("daemon_fork_conn"), sock_path[100];
	snprintf(sock_path, sizeof(sock_path), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	const char *extra[] = {"--set", "daemon.max_clients=3", "--set", "dram.bytes=64MiB", NULL};
	kvtd_start_test(sock_path, dir, extra);
	pid_t kids[4];
	int nk = 0;
	struct kvt_key k;
	memset(k.bytes, 0x42, sizeof(k.bytes));
	struct kvt_store *s = kvtd_client_store(dir);
	memcpy(kvtd_ns, kvt_store_ns_id(s), sizeof(kvtd_ns));
	kvtd_check_roundtrip(s, &k, 1);
	kids[nk++] = sleeper();
	kvt_store_close(s);
	usleep(300 * 1000);
	struct raw r = raw_attach();
	struct kvtd_status st = raw_status(&r);
	raw_close(&r);
	printf("1-2. store closed, a forked child alive: the daemon counts %llu connection(s) "
	       "(expected 1: the STATUS one)\n", (unsigned long long)st.connections);
	int leaked = (int)st.connections - 1;
	/* 3 */
	for (int i = 0; i < 2; i++) {
		usleep(300 * 1000);
		s = kvtd_client_store(dir);
		k.bytes[0] = (uint8_t)(0x50 + i); /* a key of its own: a put is idempotent */
		kvtd_check_roundtrip(s, &k, 2 + (uint64_t)i);
		kids[nk++] = sleeper();
		kvt_store_close(s);
	}
	usleep(300 * 1000);
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "store.daemon", kvtd_sock);
	struct kvt_store *s4 = NULL;
	int rc = kvt_store_open(c, &s4);
	printf("3. after three open/fork/close cycles, a new store's open: %d\n", rc);
	if (rc == 0)
		kvt_store_close(s4);
	kvt_config_destroy(c);
	for (int i = 0; i < nk; i++) {
		kill(kids[i], SIGKILL);
		waitpid(kids[i], NULL, 0);
	}
	CHECKM(leaked == 0, "the closed store's connection stays open while a forked child "
			    "lives (%d left)", leaked);
	CHECKM(rc == 0, "a store cannot attach: the daemon's places are held by closed stores");

	/* 4. */
	s = kvtd_client_store(dir);
	struct kvt_key pk, ck;
	memset(pk.bytes, 0x61, sizeof(pk.bytes));
	memset(ck.bytes, 0x62, sizeof(ck.bytes));
	kvtd_check_roundtrip(s, &pk, 7);
	size_t payload = kvt_payload_bytes(kvt_store_geometry(s), 16);
	uint8_t *buf = malloc(payload), *out = malloc(payload);
	CHECK(buf && out);
	fflush(NULL);
	pid_t p = fork();
	if (p == 0) {
		alarm(20); /* a hang is a failure, not a stuck test */
		test_fill(buf, payload, 8);
		uint64_t t0 = test_now_ns();
		int prc = kvt_put_sync(s, &ck, NULL, 16, buf, payload);
		struct kvt_result res;
		int grc = kvt_get_sync(s, &pk, 0, 0, out, payload, &res);
		struct kvt_stats cst;
		int src = kvt_stats(s, &cst);
		double ms = test_ms_since(t0);
		kvt_store_close(s);
		printf("4. child: put %d, get %d, stats %d after %.0f ms; closed\n", prc, grc, src,
		       ms);
		fflush(NULL);
		/* a get that cannot be asked reads as a miss, as through a dead daemon */
		_exit(prc == -ENOTCONN && grc == -ENOENT && src == -ENOTCONN && ms < 1000 ? 0 : 1);
	}
	CHECK(p > 0);
	int wst;
	CHECK(waitpid(p, &wst, 0) == p);
	CHECKM(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "the child's calls: status %d", wst);
	struct kvt_result pres;
	CHECK_RC(kvt_get_sync(s, &pk, 0, 0, out, payload, &pres), 0);
	test_fill(buf, payload, 7);
	CHECKM(!memcmp(out, buf, payload), "the parent's chunk changed under the child's calls");
	CHECK_EQ(kvt_get_sync(s, &ck, 0, 0, out, payload, &pres), -ENOENT);
	kvtd_check_roundtrip(s, &ck, 9);
	kvt_store_close(s);
	free(buf);
	free(out);
	kvtd_stop();
	test_rmdir(dir);
	free(dir);
	printf("daemon_fork_conn: ok\n");
	return 0;
}
