/*
 * daemon_socket_probe.c - kvtierd replaces a socket file at its path only when nobody
 * listens there. Why: it probes the file with a connect, and used to count any failure as
 * "a daemon that died", so a live listener its connect could not reach (EACCES: a daemon
 * of another user; here, as root can connect anywhere, a SOCK_STREAM listener, which a
 * SOCK_SEQPACKET connect gets EPROTOTYPE from) had its socket unlinked under it.
 *  1. a live SOCK_STREAM listener at the path: kvtierd exits with an error, the listener's
 *     socket file is the same and still accepts;
 *  2. that listener closed (a stale file: ECONNREFUSED): kvtierd replaces it and serves;
 *  3. a second kvtierd for the same path while the first runs is refused whatever the
 *     socket file says: here with the file removed (as a daemon in the middle of its start
 *     has none yet) - before the lock it started and put its socket in the first's place.
 */
#include <sys/file.h>
#include <sys/stat.h>

#include "internal.h"
#include "lib/daemon_harness.h"

/* A kvtierd for socket sp over data, not waited for. */
static pid_t spawn(const char *data, const char *sp)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		execl(kvtd_bin(), "kvtierd", "--dir", data, "--socket", sp, "--set",
		      "model.layers=4", "--set", "model.kv_heads=2", "--set", "model.head_dim=64",
		      "--set", "model.chunk_tokens=16", "--set", "model.name=test-model", "--set",
		      "dram.bytes=1MiB", (char *)NULL);
		_exit(127);
	}
	return pid;
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	char *dir = test_tmpdir("daemon_socket_probe");
	char sp[100], data[300];
	snprintf(sp, sizeof(sp), "%s/d.sock", dir);
	snprintf(data, sizeof(data), "%s/data", dir);

	int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sp);
	CHECK(bind(ls, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(ls, 4) == 0);
	struct stat before, after;
	CHECK(stat(sp, &before) == 0);

	/* 1. kvtierd must leave the live listener alone and exit */
	pid_t pid = spawn(data, sp);
	int status = 0;
	bool exited = false, serving = false;
	uint64_t t0 = test_now_ns();
	while (!exited && !serving && test_ms_since(t0) < 30000) {
		exited = waitpid(pid, &status, WNOHANG) == pid;
		int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		serving = connect(s, (struct sockaddr *)&a, sizeof(a)) == 0;
		close(s);
		usleep(20000);
	}
	if (!exited) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	CHECKM(!serving, "kvtierd unlinked a live listener's socket and serves in its place");
	CHECKM(exited && WIFEXITED(status) && WEXITSTATUS(status) == 1,
	       "kvtierd status %#x (exited: %d)", status, exited);
	CHECK(stat(sp, &after) == 0 && after.st_ino == before.st_ino);
	int cs = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(connect(cs, (struct sockaddr *)&a, sizeof(a)) == 0);
	close(cs);

	/* 2. closed, the file is stale: replaced */
	close(ls);
	kvtd_start_test(sp, dir, NULL); /* returns once it answers on sp */

	/* 3. the first still running, its socket file gone: a second one is refused */
	CHECK(unlink(sp) == 0);
	char data2[300];
	snprintf(data2, sizeof(data2), "%s/data2", dir);
	pid = spawn(data2, sp);
	exited = false;
	t0 = test_now_ns();
	while (!exited && test_ms_since(t0) < 30000) {
		exited = waitpid(pid, &status, WNOHANG) == pid;
		usleep(20000);
	}
	if (!exited) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	CHECKM(exited && WIFEXITED(status) && WEXITSTATUS(status) == 1,
	       "a second kvtierd for a path in use: status %#x (exited: %d)", status, exited);
	CHECKM(access(sp, F_OK) != 0, "the second kvtierd put a socket at the first's path");
	kvtd_stop();
	test_rmdir(dir);
	free(dir);
	printf("daemon_socket_probe: ok\n");
	return 0;
}
