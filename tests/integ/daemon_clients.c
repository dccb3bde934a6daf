/*
 * daemon_clients.c - kvtierd against its clients (issue 13), with the real daemon binary:
 *  1. a client-mode store keeps the async contract (no callback inside the submitting call,
 *     the eventfd turns readable, kvt_poll runs it) and returns the bytes put;
 *  2. 100 client processes killed with SIGKILL in the middle of puts and gets leave the
 *     daemon serving, with no connection, request or shared region left behind (STATUS);
 *  3. malformed messages (wrong size, a range outside the region, an operation before
 *     HELLO, an unsealed region) get only that connection dropped;
 *  4. the daemon stopped, then killed under a client: calls fail or miss within the
 *     deadline, and after a restart on the same socket the same store reconnects and works,
 *     its first call after a restart included (a stopped one: after its backoff).
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include "internal.h"
#include "lib/daemon_harness.h"

static char *dir, sock_path[100];
static size_t PAYLOAD;

static void start_daemon(void)
{
	const char *extra[] = {"--set", "dram.bytes=16MiB", NULL};
	kvtd_start_test(sock_path, dir, extra);
}

static void key_of(uint64_t i, struct kvt_key *k)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->bytes, &i, sizeof(i));
	k->bytes[31] = 0x5a;
}

/* Wait until the daemon has let go of every connection but `keep`. */
static struct kvtd_status settle(struct raw *r, uint64_t keep)
{
	struct kvtd_status st;
	for (int i = 0; i < 500; i++) {
		st = raw_status(r);
		if (st.connections == keep && st.ops_in_progress == 0 && st.regions_mapped == keep &&
		    st.pins == 0 && st.reserved == 0 && st.quarantined == 0)
			return st;
		usleep(10000);
	}
	fprintf(stderr, "daemon did not settle: %llu connections, %llu ops, %llu regions, %llu pins, "
			"%llu reserved\n",
		(unsigned long long)st.connections, (unsigned long long)st.ops_in_progress,
		(unsigned long long)st.regions_mapped, (unsigned long long)st.pins,
		(unsigned long long)st.reserved);
	exit(1);
}

/* ---- 1. async contract */

struct cbstate {
	int calls;
	struct kvt_result res;
};
static __thread bool in_submit;
static void cb(void *arg, const struct kvt_result *res)
{
	struct cbstate *c = arg;
	CHECK(!in_submit);
	c->calls++;
	c->res = *res;
}

static void wait_cb(struct kvt_store *s, struct cbstate *c)
{
	for (int i = 0; i < 500 && !c->calls; i++) {
		struct pollfd p = {.fd = kvt_store_fd(s), .events = POLLIN};
		poll(&p, 1, 10);
		kvt_poll(s, 0);
	}
	CHECK(c->calls == 1);
}

static void test_async(void)
{
	struct kvt_store *s = kvtd_client_store(dir);
	CHECK(kvt_store_tier_count(s) == 2 && !strcmp(kvt_store_tier_name(s, 0), "dram"));
	uint8_t *buf = malloc(PAYLOAD), *out = malloc(PAYLOAD);
	struct kvt_key k;
	key_of(1, &k);
	test_fill(buf, PAYLOAD, 1);
	struct cbstate c = {0};
	in_submit = true;
	CHECK_RC(kvt_put(s, &k, NULL, 16, buf, PAYLOAD, cb, &c), 0);
	in_submit = false;
	CHECK(c.calls == 0);
	wait_cb(s, &c);
	CHECK_RC(c.res.status, 0);
	c = (struct cbstate){0};
	in_submit = true;
	CHECK_RC(kvt_get(s, &k, 0, 0, out, PAYLOAD, cb, &c), 0);
	in_submit = false;
	wait_cb(s, &c);
	CHECK_RC(c.res.status, 0);
	CHECK(c.res.tier == 0 && c.res.n_tokens == 16 && c.res.bytes == PAYLOAD);
	CHECK(test_check(out, PAYLOAD, 1));
	int8_t tiers[2];
	struct kvt_key ks[2];
	ks[0] = k;
	key_of(2, &ks[1]);
	CHECK_RC(kvt_lookup_sync(s, ks, 2, tiers), 1);
	CHECK(tiers[0] == 0 && tiers[1] == KVT_TIER_NONE);
	CHECK_RC(kvt_put_sync(s, &k, NULL, 16, buf, PAYLOAD - 1), -EINVAL);
	CHECK_RC(kvt_get_sync(s, &ks[1], 0, 0, out, PAYLOAD, NULL), -ENOENT);
	struct kvt_stats st;
	CHECK_RC(kvt_stats(s, &st), 0);
	CHECK(st.n_tiers == 2 && st.puts >= 1 && st.tier[0].hits >= 1);
	CHECK_RC(kvt_flush_sync(s), 0); /* the write-through to NVMe is done */
	CHECK_RC(kvt_remove_sync(s, &k), 2);
	CHECK_RC(kvt_get_sync(s, &k, 0, 0, out, PAYLOAD, NULL), -ENOENT);
	free(buf);
	free(out);
	kvt_store_close(s);
}

/* ---- 2. clients killed mid-operation */

static void child_loop(unsigned seed, int ready)
{
	struct kvt_store *s = kvtd_client_store(dir);
	CHECK(write(ready, "r", 1) == 1); /* attached: the kill lands in the put/get loop */
	uint8_t *buf = malloc(PAYLOAD);
	for (uint64_t i = 0;; i++) {
		struct kvt_key k;
		key_of(1000 + (seed * 7919 + i) % 64, &k);
		test_fill(buf, PAYLOAD, 1000 + (seed * 7919 + i) % 64);
		kvt_put_sync(s, &k, NULL, 16, buf, PAYLOAD);
		kvt_get_sync(s, &k, 0, 0, buf, PAYLOAD, NULL);
	}
}

static void test_kills(struct raw *r)
{
	srand(42);
	for (unsigned i = 0; i < 100; i++) {
		int pp[2];
		CHECK(pipe(pp) == 0);
		pid_t p = fork();
		if (p == 0)
			child_loop(i, pp[1]);
		close(pp[1]);
		char b;
		struct pollfd pf = {.fd = pp[0], .events = POLLIN};
		CHECK(poll(&pf, 1, 10000) == 1 && read(pp[0], &b, 1) == 1);
		close(pp[0]);
		struct timespec ts = {0, (long)(rand() % 5000) * 1000};
		nanosleep(&ts, NULL);
		kill(p, SIGKILL);
		waitpid(p, NULL, 0);
	}
	struct kvtd_status st = settle(r, 1); /* pins of killed clients included: 0 left */
	CHECK(st.connections_total >= 100);
	CHECKM(st.pinned_gets > 0, "the gets went through the shared pool");
	CHECKM(st.shared_puts > 0, "the puts went through the shared pool");
	/* Whatever was stored whole is readable and exact; nothing else is visible. */
	struct kvt_store *s = kvtd_client_store(dir);
	uint8_t *buf = malloc(PAYLOAD);
	int found = 0;
	for (uint64_t i = 0; i < 64; i++) {
		struct kvt_key k;
		key_of(1000 + i, &k);
		int rc = kvt_get_sync(s, &k, 0, 0, buf, PAYLOAD, NULL);
		CHECK(rc == 0 || rc == -ENOENT);
		if (rc == 0) {
			CHECK(test_check(buf, PAYLOAD, 1000 + i));
			found++;
		}
	}
	fprintf(stderr, "kills: 100 clients killed, %d objects readable and exact\n", found);
	free(buf);
	kvt_store_close(s);
	settle(r, 1);
}

/* ---- 3. misbehaving peers */

static void expect_dropped(int sock)
{
	char b[64];
	long got = kvtd_recv(sock, b, sizeof(b), NULL);
	CHECK(got == 0 || got == -ECONNRESET);
	close(sock);
}

static void test_garbage(struct raw *r)
{
	uint64_t errs0 = raw_status(r).protocol_errors;
	/* wrong size */
	int s = raw_connect();
	char junk[7] = "garbage";
	CHECK_RC(kvtd_send(s, junk, sizeof(junk), -1), 0);
	expect_dropped(s);
	/* an operation before HELLO */
	s = raw_connect();
	struct kvtd_req q = {.magic = KVTD_MAGIC, .op = KVTD_GET, .len = 16};
	CHECK_RC(kvtd_send(s, &q, sizeof(q), -1), 0);
	expect_dropped(s);
	/* an unsealed region is refused (it could shrink under the daemon) */
	s = raw_connect();
	int fd = raw_memfd(KVTD_SHM_MIN, false);
	q = (struct kvtd_req){.op = KVTD_HELLO, .version = KVTD_VERSION};
	memcpy(q.ns_id, kvtd_ns, sizeof(kvtd_ns));
	struct kvtd_rep rep;
	CHECK_RC(raw_call(s, &q, fd, &rep), 0);
	CHECK_RC(rep.res.status, -EPERM);
	close(fd);
	close(s);
	/* a region of the wrong size */
	s = raw_connect();
	fd = raw_memfd(4096, true);
	CHECK_RC(raw_call(s, &q, fd, &rep), 0);
	CHECK_RC(rep.res.status, -EMSGSIZE);
	close(fd);
	close(s);
	/* a byte range outside the region, and an overflowing one */
	struct raw a = raw_attach();
	q = (struct kvtd_req){.magic = KVTD_MAGIC, .op = KVTD_GET, .off = a.len - 8, .len = 16};
	CHECK_RC(kvtd_send(a.sock, &q, sizeof(q), -1), 0);
	expect_dropped(a.sock);
	munmap(a.shm, a.len);
	a = raw_attach();
	q = (struct kvtd_req){.magic = KVTD_MAGIC, .op = KVTD_LOOKUP, .off = 8,
			      .n = UINT64_MAX / 33 + 1, .len = 33};
	CHECK_RC(kvtd_send(a.sock, &q, sizeof(q), -1), 0);
	expect_dropped(a.sock);
	munmap(a.shm, a.len);
	/* an UNPIN of a slot this connection never pinned */
	a = raw_attach();
	q = (struct kvtd_req){.magic = KVTD_MAGIC, .op = KVTD_UNPIN, .n = 0};
	CHECK_RC(kvtd_send(a.sock, &q, sizeof(q), -1), 0);
	expect_dropped(a.sock);
	munmap(a.shm, a.len);
	/* a peer that never says HELLO is dropped after the daemon's deadline (5 s) */
	s = raw_connect();
	uint64_t t0 = kvt__now_ns();
	char b[64];
	struct timeval tv = {.tv_sec = 15};
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	CHECK(kvtd_recv(s, b, sizeof(b), NULL) == 0);
	CHECK(kvt__now_ns() - t0 < 10000000000ull);
	close(s);
	struct kvtd_status st = settle(r, 1);
	CHECK(st.protocol_errors >= errs0 + 5);
}

/* ---- 3b. a client that writes into the shared pool wrongly: a reservation it abandons,
 * an object it scribbled, a commit of a slot it never reserved */

static void test_shared_writes(struct raw *r)
{
	int s = raw_connect();
	int fd = raw_memfd(KVTD_SHM_MIN, true);
	uint8_t *shm = mmap(NULL, KVTD_SHM_MIN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	struct kvtd_req q = {.magic = KVTD_MAGIC, .op = KVTD_HELLO, .version = KVTD_VERSION};
	memcpy(q.ns_id, kvtd_ns, sizeof(kvtd_ns));
	CHECK_RC(kvtd_send(s, &q, sizeof(q), fd), 0);
	struct kvtd_rep rep;
	int pfd = -1;
	CHECK(kvtd_recv(s, &rep, sizeof(rep), &pfd) == sizeof(rep) && rep.res.status == 0);
	struct kvtd_info info;
	memcpy(&info, shm, sizeof(info));
	CHECKM(pfd >= 0 && info.pool_writable && info.pool_bytes, "the pool is offered writable");
	uint8_t *pool = mmap(NULL, info.pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
	CHECK(pool != MAP_FAILED);
	close(pfd);
	struct kvt_key k;
	key_of(777, &k);
	/* scribbled: refused at commit, the slot given back, the key not visible */
	q = (struct kvtd_req){.op = KVTD_PUT_RESERVE, .key = k, .n_tokens = 16};
	CHECK_RC(raw_call(s, &q, -1, &rep), 0);
	CHECK_RC(rep.res.status, 0);
	CHECK(rep.slot_off + rep.res.bytes <= info.pool_bytes);
	memset(pool + rep.slot_off, 0xab, rep.res.bytes);
	CHECK_EQ(raw_status(&(struct raw){.sock = s, .shm = shm}).reserved, 1);
	q = (struct kvtd_req){.op = KVTD_PUT_COMMIT, .n = (uint64_t)rep.slot,
			      .lease = rep.lease};
	CHECK_RC(raw_call(s, &q, -1, &rep), 0);
	CHECK_RC(rep.res.status, -EBADMSG);
	/* abandoned: the connection closes with a reservation; nothing shows */
	q = (struct kvtd_req){.op = KVTD_PUT_RESERVE, .key = k, .n_tokens = 16};
	CHECK_RC(raw_call(s, &q, -1, &rep), 0);
	CHECK_RC(rep.res.status, 0);
	close(s);
	settle(r, 1);
	struct kvt_store *st = kvtd_client_store(dir);
	uint8_t *buf = malloc(PAYLOAD);
	CHECK_RC(kvt_get_sync(st, &k, 0, 0, buf, PAYLOAD, NULL), -ENOENT);
	free(buf);
	kvt_store_close(st);
	/* a commit of a slot this connection never reserved */
	struct raw a = raw_attach();
	q = (struct kvtd_req){.magic = KVTD_MAGIC, .op = KVTD_PUT_COMMIT, .n = 0};
	CHECK_RC(kvtd_send(a.sock, &q, sizeof(q), -1), 0);
	expect_dropped(a.sock);
	munmap(a.shm, a.len);
	munmap(pool, info.pool_bytes);
	munmap(shm, KVTD_SHM_MIN);
	close(fd);
	settle(r, 1);
}

/* ---- 4. the daemon dies and comes back */

static void test_restart(void)
{
	struct kvt_store *s = kvtd_client_store(dir);
	uint8_t *buf = malloc(PAYLOAD);
	struct kvt_key k;
	key_of(7, &k);
	test_fill(buf, PAYLOAD, 7);
	CHECK_RC(kvt_put_sync(s, &k, NULL, 16, buf, PAYLOAD), 0);
	CHECK_RC(kvt_flush_sync(s), 0);
	/* A hung daemon (stopped): the call returns a miss at its deadline (2 s here), and
	 * once the daemon runs again the first call after the backoff (one timeout: calls
	 * meanwhile miss at once, daemon_hung.c) reconnects, with a fresh region. */
	kill(kvtd_pid, SIGSTOP);
	waitpid(kvtd_pid, NULL, WUNTRACED); /* returns once it is stopped */
	uint64_t h0 = kvt__now_ns();
	CHECK_RC(kvt_get_sync(s, &k, 0, 0, buf, PAYLOAD, NULL), -ENOENT);
	uint64_t waited = kvt__now_ns() - h0;
	CHECK(waited >= 1500000000ull && waited < 4000000000ull);
	kill(kvtd_pid, SIGCONT);
	usleep(2100000);
	memset(buf, 0, PAYLOAD);
	CHECK_RC(kvt_get_sync(s, &k, 0, 0, buf, PAYLOAD, NULL), 0);
	CHECK(test_check(buf, PAYLOAD, 7));
	kill(kvtd_pid, SIGKILL);
	waitpid(kvtd_pid, NULL, 0);
	uint64_t t0 = kvt__now_ns();
	CHECK_RC(kvt_get_sync(s, &k, 0, 0, buf, PAYLOAD, NULL), -ENOENT);
	int8_t tier;
	CHECK_RC(kvt_lookup_sync(s, &k, 1, &tier), 0);
	CHECK(kvt_put_sync(s, &k, NULL, 16, buf, PAYLOAD) < 0);
	struct cbstate c = {0};
	CHECK_RC(kvt_get(s, &k, 0, 0, buf, PAYLOAD, cb, &c), 0);
	wait_cb(s, &c);
	CHECK_RC(c.res.status, -ENOENT);
	CHECK(kvt__now_ns() - t0 < 3000000000ull);
	/* The stale socket file is replaced; the same store reconnects. The object was
	 * written through to NVMe before the crash, so it is a hit again. */
	start_daemon();
	CHECK_RC(kvt_get_sync(s, &k, 0, 0, buf, PAYLOAD, NULL), 0);
	CHECK(test_check(buf, PAYLOAD, 7));
	/* A restart between two calls: the first call after it finds its connection dead
	 * before its request left, reconnects and sends it again - no failed call (it was
	 * -EPIPE, a miss, before). Each kind of request once: get (through the pool), lookup,
	 * put (through a reservation), remove. */
	struct kvt_key k2;
	key_of(8, &k2);
	for (int kind = 0; kind < 4; kind++) {
		kill(kvtd_pid, SIGTERM);
		waitpid(kvtd_pid, NULL, 0);
		start_daemon();
		memset(buf, 0, PAYLOAD);
		if (kind == 0) {
			CHECK_RC(kvt_get_sync(s, &k, 0, 0, buf, PAYLOAD, NULL), 0);
			CHECK(test_check(buf, PAYLOAD, 7));
		} else if (kind == 1) {
			CHECK_RC(kvt_lookup_sync(s, &k, 1, &tier), 1);
		} else if (kind == 2) {
			test_fill(buf, PAYLOAD, 8);
			CHECK_RC(kvt_put_sync(s, &k2, NULL, 16, buf, PAYLOAD), 0);
			CHECK_RC(kvt_flush_sync(s), 0);
		} else {
			CHECK_RC(kvt_remove_sync(s, &k2), 1); /* from nvme: the restart emptied DRAM */
			CHECK_RC(kvt_lookup_sync(s, &k2, 1, &tier), 0);
		}
	}
	free(buf);
	kvt_store_close(s);
}

int main(void)
{
	dir = test_tmpdir("daemon");
	snprintf(sock_path, sizeof(sock_path), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	start_daemon();
	struct kvt_store *s = kvtd_client_store(dir);
	PAYLOAD = kvt_payload_bytes(kvt_store_geometry(s), 16);
	memcpy(kvtd_ns, kvt_store_ns_id(s), sizeof(kvtd_ns));
	kvt_store_close(s);
	test_async();
	struct raw r = raw_attach();
	test_kills(&r);
	test_garbage(&r);
	test_shared_writes(&r);
	close(r.sock);
	test_restart();
	kvtd_stop();
	test_rmdir(dir);
	printf("daemon_clients: ok\n");
	return 0;
}
