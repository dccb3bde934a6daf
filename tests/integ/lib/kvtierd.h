/*
 * kvtierd.h - start and stop a real kvtierd for integration tests. Why a header: the daemon
 * tests each need "fork, exec the binary built next to them ($KVT_BIN), wait until its
 * socket answers, SIGKILL it when the test exits", and one copy keeps them the same.
 */
#ifndef KVT_TEST_KVTIERD_H
#define KVT_TEST_KVTIERD_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* The kvtierd binary next to the test programs. */
static inline const char *kvtd_test_bin(void)
{
	static char bin[512];
	snprintf(bin, sizeof(bin), "%s/kvtierd", getenv("KVT_BIN") ? getenv("KVT_BIN") : ".");
	return bin;
}

/* Wait until a daemon answers on sock_path (a stale socket file of a killed daemon may be
 * there before): 0, or -1 after about 5 s. */
static inline int kvtd_test_wait_ready(const char *sock_path)
{
	for (int i = 0; i < 250; i++) {
		int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock_path);
		int ok = connect(s, (struct sockaddr *)&a, sizeof(a)) == 0;
		close(s);
		if (ok)
			return 0;
		usleep(20000);
	}
	return -1;
}

/* Run kvtierd with argv (argv[0] "kvtierd", NULL-terminated; it must name sock_path with
 * --socket) and wait until it serves. Exits the test if it does not come up. */
static inline pid_t kvtd_test_start(char *const argv[], const char *sock_path)
{
	pid_t pid = fork();
	if (pid == 0) {
		execv(kvtd_test_bin(), argv);
		perror("exec kvtierd");
		_exit(127);
	}
	if (pid < 0 || kvtd_test_wait_ready(sock_path) < 0) {
		fprintf(stderr, "kvtierd did not come up\n");
		if (pid > 0) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
		}
		exit(1);
	}
	return pid;
}

/* SIGKILL *pid and reap it (nothing if already 0); only from owner, the test's main process,
 * so that forked children exiting through atexit do not kill it. */
static inline void kvtd_test_kill(pid_t *pid, pid_t owner)
{
	if (*pid > 0 && getpid() == owner) {
		kill(*pid, SIGKILL);
		waitpid(*pid, NULL, 0);
		*pid = 0;
	}
}

#endif
