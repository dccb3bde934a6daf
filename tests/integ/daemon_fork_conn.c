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
	kvtd_stop();
	test_rmdir(dir);
	free(dir);
	printf("daemon_fork_conn: ok\n");
	return 0;
}
