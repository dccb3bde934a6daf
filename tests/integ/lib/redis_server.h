/*
 * redis_server.h - start a real redis-server for a test: 127.0.0.1 only (or r->bind), a free port, a
 * temporary directory, no persistence, optional requirepass. The test can SIGKILL or
 * SIGSTOP it and start it again on the same port. The server dies with the thread that
 * started it (PR_SET_PDEATHSIG): a failed test leaves none running. rs_start returns 77 when redis-server is
 * not installed, so the caller can exit with "skip".
 */
#ifndef KVT_TEST_REDIS_SERVER_H
#define KVT_TEST_REDIS_SERVER_H

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

struct rs {
	pid_t pid;
	int port;
	char dir[128];
	char pass[64];
	const char *extra[4]; /* more redis-server arguments (NULL-terminated), set before launch */
	const char *bind;     /* the one loopback address it listens on (NULL: 127.0.0.1) */
};

static inline const char *rs_bind(const struct rs *r)
{
	return r->bind ? r->bind : "127.0.0.1";
}

static inline int rs_free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return ntohs(a.sin_port);
}

/* 0 once the server answers PING (with AUTH if set), -1 after 5 s. */
static inline int rs_wait_ready(struct rs *r)
{
	for (int i = 0; i < 500; i++) {
		struct timeval tv = {1, 0};
		redisContext *c = redisConnectWithTimeout(rs_bind(r), r->port, tv);
		if (c && !c->err) {
			redisReply *rep = r->pass[0] ? redisCommand(c, "AUTH %s", r->pass) : NULL;
			if (rep)
				freeReplyObject(rep);
			rep = redisCommand(c, "PING");
			int ok = rep && rep->type == REDIS_REPLY_STATUS;
			if (rep)
				freeReplyObject(rep);
			redisFree(c);
			if (ok)
				return 0;
		} else if (c) {
			redisFree(c);
		}
		usleep(10000);
	}
	return -1;
}

/* (Re)start on r->port (0: pick a free one). 0, -1 on failure, 77 if not installed. */
static inline int rs_launch(struct rs *r)
{
	if (system("command -v redis-server >/dev/null 2>&1") != 0)
		return 77;
	for (int attempt = 0; attempt < 5; attempt++) {
		bool pick = r->port == 0;
		if (pick)
			r->port = rs_free_port();
		char port[16], log[200];
		snprintf(port, sizeof(port), "%d", r->port);
		snprintf(log, sizeof(log), "%s/redis.log", r->dir);
		pid_t parent = getpid();
		pid_t pid = fork();
		if (pid < 0)
			return -1;
		if (pid == 0) {
			/* a test that fails (abort, CHECK's exit) takes its server with it */
			if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
				_exit(126);
			int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
			if (fd >= 0) {
				dup2(fd, 1);
				dup2(fd, 2);
			}
			const char *argv[32] = {"redis-server", "--port", port, "--bind", rs_bind(r),
						"--dir", r->dir, "--save", "", "--appendonly", "no",
						"--daemonize", "no", "--protected-mode", "yes"};
			int n = 15;
			if (r->pass[0]) {
				argv[n++] = "--requirepass";
				argv[n++] = r->pass;
			}
			for (int i = 0; i < 4 && r->extra[i]; i++)
				argv[n++] = r->extra[i];
			argv[n] = NULL;
			execvp("redis-server", (char **)argv);
			_exit(127);
		}
		r->pid = pid;
		if (rs_wait_ready(r) == 0)
			return 0;
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		r->pid = 0;
		if (pick)
			r->port = 0; /* the port was taken meanwhile: try another */
		else
			usleep(200000);
	}
	return -1;
}

/* A fresh r with its temporary directory, not started: set r->extra, then rs_launch. */
static inline int rs_prepare(struct rs *r, const char *pass)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->dir, sizeof(r->dir), "/tmp/kvt-redis-XXXXXX");
	if (!mkdtemp(r->dir))
		return -1;
	if (pass)
		snprintf(r->pass, sizeof(r->pass), "%s", pass);
	return 0;
}

static inline int rs_start(struct rs *r, const char *pass)
{
	return rs_prepare(r, pass) < 0 ? -1 : rs_launch(r);
}

static inline void rs_signal(struct rs *r, int sig)
{
	if (r->pid > 0) {
		kill(r->pid, sig);
		if (sig == SIGKILL || sig == SIGTERM) {
			waitpid(r->pid, NULL, 0);
			r->pid = 0;
		}
	}
}

static inline void rs_stop(struct rs *r)
{
	rs_signal(r, SIGCONT);
	rs_signal(r, SIGTERM);
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", r->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", r->dir);
}

#endif
