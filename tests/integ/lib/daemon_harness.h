/*
 * daemon_harness.h - the real kvtierd binary for the daemon tests (daemon_clients.c,
 * daemon_events.c, daemon_leases.c). Why a header: each of them starts the daemon and
 * waits for it the same way, must never leave it running behind a failed CHECK, and the
 * ones that misbehave on purpose speak the raw protocol (src/daemon_proto.h) the same way.
 * One test program includes it once: the state below is that program's daemon.
 */
#ifndef KVT_DAEMON_HARNESS_H
#define KVT_DAEMON_HARNESS_H

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "daemon_proto.h"
#include "../testlib.h"

static char kvtd_sock[108];               /* the daemon's socket */
static pid_t kvtd_pid, kvtd_main_pid;     /* the daemon; the test's main process */
static uint8_t kvtd_ns[KVT_NS_ID_BYTES];  /* the namespace raw clients say HELLO with */

/* A failing CHECK exits: never leave the daemon running behind it (forked children that
 * exit do not kill it). */
static inline void kvtd_kill(void)
{
	if (kvtd_pid > 0 && getpid() == kvtd_main_pid) {
		kill(kvtd_pid, SIGKILL);
		waitpid(kvtd_pid, NULL, 0);
		kvtd_pid = 0;
	}
}

static inline const char *kvtd_bin(void)
{
	static char bin[512];
	snprintf(bin, sizeof(bin), "%s/kvtierd", getenv("KVT_BIN") ? getenv("KVT_BIN") : ".");
	return bin;
}

/* Where a kvtd_start'ed daemon writes its stderr (appended), for a test that reads what it
 * printed; NULL: the test's own stderr. */
static const char *kvtd_log_path;

/* Start kvtierd with argv[1..] = args (NULL-terminated; --socket sock is added), and
 * return once it answers on sock (a stale socket file of a killed daemon may be there).
 * Waits up to 30 s: the daemon pre-faults its DRAM pool before it listens, which under a
 * sanitizer on a slow, shared machine took more than 5 s; a daemon that exits first fails
 * at once, with its status. */
static inline void kvtd_start(const char *sock, const char *const *args)
{
	if (!kvtd_main_pid) {
		kvtd_main_pid = getpid();
		atexit(kvtd_kill);
	}
	snprintf(kvtd_sock, sizeof(kvtd_sock), "%s", sock);
	const char *argv[64] = {"kvtierd", "--socket", kvtd_sock};
	int n = 3;
	for (int i = 0; args[i] && n < 63; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	pid_t parent = getpid();
	kvtd_pid = fork();
	if (kvtd_pid == 0) {
		/* Dies with the test even when the test cannot run its atexit kill (a
		 * sanitizer's abort): an orphan daemon kept the test's output pipe open and
		 * ctest waited for it until its own timeout. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		if (kvtd_log_path) {
			int fd = open(kvtd_log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
			if (fd < 0 || dup2(fd, 2) < 0)
				_exit(127);
		}
		execv(kvtd_bin(), (char *const *)argv);
		perror("exec kvtierd");
		_exit(127);
	}
	uint64_t t0 = test_now_ns();
	while (test_ms_since(t0) < 30000) {
		int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		memcpy(a.sun_path, kvtd_sock, sizeof(kvtd_sock));
		int ok = connect(s, (struct sockaddr *)&a, sizeof(a)) == 0;
		close(s);
		if (ok)
			return;
		int status;
		if (waitpid(kvtd_pid, &status, WNOHANG) == kvtd_pid) {
			kvtd_pid = 0;
			fprintf(stderr, "kvtierd exited before it listened (status %d)\n", status);
			exit(1);
		}
		usleep(20000);
	}
	fprintf(stderr, "kvtierd did not come up within 30 s\n");
	exit(1);
}

/* kvtd_start with the tests' model (test-model: 4 layers, 2 KV heads, head dim 64, 16-token
 * chunks), "--dir <dir>/data", nvme.fsync=none, a 2 s deadline floor (as testlib.h gives
 * in-process stores: the daemon's default 1 s timed out an attach at a few % of a core),
 * then extra (NULL-terminated; may be NULL): what every daemon test but the TP one runs. */
static inline void kvtd_start_test(const char *sock, const char *dir, const char *const *extra)
{
	static char data[300];
	snprintf(data, sizeof(data), "%s/data", dir);
	const char *args[64] = {"--dir", data, "--set", "model.layers=4", "--set",
				"model.kv_heads=2", "--set", "model.head_dim=64", "--set",
				"model.chunk_tokens=16", "--set", "model.name=test-model", "--set",
				"nvme.fsync=none", "--set", "store.deadline_floor_ms=2000"};
	int n = 16;
	for (int i = 0; extra && extra[i] && n < 63; i++)
		args[n++] = extra[i];
	args[n] = NULL;
	kvtd_start(sock, args);
}

/* The daemon's state letter from /proc (T: stopped), or '?'. */
static inline char kvtd_state(void)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)kvtd_pid);
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = 0;
	const char *p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : '?';
}

/* SIGSTOP the daemon and wait until it is stopped (a loaded machine delivers the stop
 * late, and a request sent before it would still be answered). SIGCONT resumes it. */
static inline void kvtd_pause(void)
{
	kill(kvtd_pid, SIGSTOP);
	for (int i = 0; i < 200 && kvtd_state() != 'T'; i++)
		usleep(5000);
	CHECK(kvtd_state() == 'T');
}

/* SIGTERM: the daemon flushes and must exit 0. */
static inline void kvtd_stop(void)
{
	kill(kvtd_pid, SIGTERM);
	int status;
	waitpid(kvtd_pid, &status, 0);
	kvtd_pid = 0;
	CHECKM(WIFEXITED(status) && WEXITSTATUS(status) == 0, "kvtierd exit status %d", status);
}

/* A put of a chunk of seed's bytes (16 tokens) through the client store s, then a get of
 * it: exact. The daemon is alive after. */
static inline void kvtd_check_roundtrip(struct kvt_store *s, const struct kvt_key *k,
					uint64_t seed)
{
	size_t payload = kvt_payload_bytes(kvt_store_geometry(s), 16);
	uint8_t *buf = malloc(payload), *out = malloc(payload);
	CHECK(buf && out);
	test_fill(buf, payload, seed);
	CHECK_RC(kvt_put_sync(s, k, NULL, 16, buf, payload), 0);
	struct kvt_result res;
	CHECK_RC(kvt_get_sync(s, k, 0, 0, out, payload, &res), 0);
	CHECK(!memcmp(out, buf, payload));
	free(buf);
	free(out);
}

/* ---- a raw protocol client, to look at the daemon's state and to misbehave */

struct raw {
	int sock;
	uint8_t *shm;
	size_t len;
};

static inline int raw_connect(void)
{
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	memcpy(a.sun_path, kvtd_sock, sizeof(kvtd_sock));
	struct timeval tv = {.tv_sec = 5};
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	CHECK(connect(s, (struct sockaddr *)&a, sizeof(a)) == 0);
	return s;
}

static inline int raw_memfd(size_t len, bool seal)
{
	int fd = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	CHECK(fd >= 0 && ftruncate(fd, (off_t)len) == 0);
	if (seal)
		CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
	return fd;
}

static inline int raw_call(int sock, struct kvtd_req *r, int fd, struct kvtd_rep *rep)
{
	r->magic = KVTD_MAGIC;
	int rc = kvtd_send(sock, r, sizeof(*r), fd);
	if (rc < 0)
		return rc;
	long got = kvtd_recv(sock, rep, sizeof(*rep), NULL);
	return got == sizeof(*rep) ? 0 : got == 0 ? -ECONNRESET : (int)got;
}

/* Attached (HELLO with kvtd_ns). *pool_fd: the descriptor of the daemon's DRAM pool it was
 * handed (the caller's to close), or -1 when none was offered; what was offered is in the
 * struct kvtd_info at the start of the returned shm. */
static inline struct raw raw_attach_fd(int *pool_fd)
{
	struct raw r = {.sock = raw_connect(), .len = KVTD_SHM_MIN};
	int fd = raw_memfd(r.len, true);
	r.shm = mmap(NULL, r.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(r.shm != MAP_FAILED);
	struct kvtd_req q = {.magic = KVTD_MAGIC, .op = KVTD_HELLO, .version = KVTD_VERSION};
	memcpy(q.ns_id, kvtd_ns, sizeof(kvtd_ns));
	CHECK_RC(kvtd_send(r.sock, &q, sizeof(q), fd), 0);
	struct kvtd_rep rep;
	*pool_fd = -1;
	CHECK(kvtd_recv(r.sock, &rep, sizeof(rep), pool_fd) == sizeof(rep));
	CHECK_RC(rep.res.status, 0);
	close(fd);
	return r;
}

/* Attached (HELLO with kvtd_ns). pool: if not NULL, the daemon's DRAM pool is mapped there
 * (writable when offered so) and *pool_len set. */
static inline struct raw raw_attach_pool(uint8_t **pool, size_t *pool_len)
{
	int pfd;
	struct raw r = raw_attach_fd(&pfd);
	if (pool) {
		struct kvtd_info info;
		memcpy(&info, r.shm, sizeof(info));
		CHECKM(pfd >= 0 && info.pool_writable && info.pool_bytes,
		       "the pool is offered writable");
		*pool = mmap(NULL, info.pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
		CHECK(*pool != MAP_FAILED);
		*pool_len = info.pool_bytes;
	}
	if (pfd >= 0)
		close(pfd);
	return r;
}

static inline struct raw raw_attach(void)
{
	return raw_attach_pool(NULL, NULL);
}

static inline struct kvtd_status raw_status(struct raw *r)
{
	struct kvtd_req q = {.op = KVTD_STATUS, .len = sizeof(struct kvtd_status)};
	struct kvtd_rep rep;
	CHECK_RC(raw_call(r->sock, &q, -1, &rep), 0);
	CHECK_RC(rep.res.status, 0);
	struct kvtd_status st;
	memcpy(&st, r->shm, sizeof(st));
	return st;
}

static inline void raw_close(struct raw *r)
{
	close(r->sock);
	munmap(r->shm, r->len);
}

/* A loopback TCP port free now, for --metrics. */
static inline int kvtd_free_port(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(a);
	CHECK(bind(s, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	      getsockname(s, (struct sockaddr *)&a, &l) == 0);
	close(s);
	return ntohs(a.sin_port);
}

/* /metrics of the daemon's --metrics addr ("127.0.0.1:PORT") over plain HTTP: the body,
 * into path. */
static inline void kvtd_fetch_metrics(const char *addr, const char *path)
{
	char host[64];
	int port;
	CHECK(sscanf(addr, "%63[^:]:%d", host, &port) == 2);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	CHECK(connect(s, (struct sockaddr *)&a, sizeof(a)) == 0);
	const char *req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
	CHECK(write(s, req, strlen(req)) == (ssize_t)strlen(req));
	size_t cap = 1 << 20, n = 0;
	char *buf = malloc(cap);
	ssize_t got;
	while (n < cap - 1 && (got = read(s, buf + n, cap - 1 - n)) > 0)
		n += (size_t)got;
	buf[n] = 0;
	close(s);
	char *body = strstr(buf, "\r\n\r\n");
	CHECKM(body && strstr(buf, " 200 "), "metrics answer: %.200s", buf);
	FILE *f = fopen(path, "w");
	CHECK(f && fputs(body + 4, f) >= 0 && fclose(f) == 0);
	free(buf);
}

/* A store in client mode of this program's daemon (dram,nvme under dir; the daemon's own
 * configuration decides what is really used). */
static inline struct kvt_store *kvtd_client_store(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "store.daemon", kvtd_sock);
	test_set(c, "store.daemon_timeout_ms", "2000");
	return test_open(c);
}

#endif
