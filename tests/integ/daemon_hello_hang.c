/*
 * daemon_hello_hang.c - a client-mode store against a daemon that answers HELLO and then
 * no request (one whose listener and handshake still run while the threads that serve
 * requests hang). Why a test of its own: the client's backoff (src/daemon_client.c,
 * DOWN_BACKOFF_MAX_MS) is reset by the daemon answering, and each probe reconnects, so if
 * the HELLO answer counted as the daemon being back, every probe would reset the backoff
 * instead of doubling it, and while the probe then waits on its request every other call
 * would stop failing at once and queue behind it for up to a whole
 * store.daemon_timeout_ms. Only a request's answer may count. The real kvtierd cannot be
 * made to hang exactly between its HELLO answer and the next request (SIGSTOP after the
 * handshake is a race), so the daemon here is a thread of this test on the socket the
 * store connects to, speaking src/daemon_proto.h: it answers each connection's HELLO as
 * kvtierd would (the attach info in the client's region, no DRAM pool) and then reads
 * requests and never answers them.
 *
 * With a timeout T, one kvt_get_sync, then two threads calling it in a loop: the first
 * call and each probe wait one T (a miss, its cause -ETIMEDOUT), every other call misses
 * at once (under T/2; the other thread's calls during a probe included), each connection
 * gets exactly one request, and the pauses between a probe timing out and the next HELLO
 * (the backoffs) are T, 2T, 4T, 8T. With the HELLO counted (the check in exchange_fd
 * taken out), one run: '8 slow calls for 4 probes; backoffs 1.01 1.01 1.01 1.01 T': each
 * probe's HELLO reset the backoff, and the other thread's call during each probe waited
 * on it.
 */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "daemon_proto.h"
#include "internal.h"
#include "testlib.h"

#define T_MS 250
#define T_NS ((uint64_t)T_MS * 1000000u)
#define CONNS 5 /* the open's connection, then 4 probes: backoffs T, 2T, 4T, 8T */
#define SLOW_NS (T_NS / 2) /* a call this long waited on the daemon; others fail at once */

static double in_t(uint64_t ns)
{
	return (double)ns / (double)T_NS;
}

/* ---- the daemon that answers HELLO and then nothing */

static struct fake {
	int lfd;
	pthread_mutex_t lock;
	bool stop;                 /* under lock */
	int conns;                 /* connections over (under lock) */
	uint64_t hello_at[CONNS + 4], end_at[CONNS + 4];
	int reqs[CONNS + 4];       /* requests each connection got */
} F = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const struct kvt_geometry GEO = {.layers = 4, .kv_heads = 2, .head_dim = 64,
					.chunk_tokens = 16, .dtype = KVT_DTYPE_BF16,
					.kind = KVT_KIND_KV}; /* test_config's */

static bool stopping(void)
{
	pthread_mutex_lock(&F.lock);
	bool s = F.stop;
	pthread_mutex_unlock(&F.lock);
	return s;
}

/* One message, waiting in 50 ms steps until it comes or the test stops (0 then). */
static long recv_one(int s, struct kvtd_req *q, int *fd)
{
	for (;;) {
		long r = kvtd_recv(s, q, sizeof(*q), fd);
		if (r != -ETIMEDOUT || stopping())
			return r == -ETIMEDOUT ? 0 : r;
	}
}

/* HELLO answered as kvtierd answers it: the attach info at offset 0 of the client's
 * region, status 0, no pool descriptor. */
static void answer_hello(int s, const struct kvtd_req *q, int fd)
{
	CHECKM(q->magic == KVTD_MAGIC && q->op == KVTD_HELLO && fd >= 0, "op %u first", q->op);
	struct stat st;
	CHECK(fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(struct kvtd_info));
	void *shm = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(shm != MAP_FAILED);
	struct kvtd_info info = {.version = KVTD_VERSION, .n_tiers = 2, .geo = GEO};
	memcpy(info.ns_id, q->ns_id, sizeof(info.ns_id));
	snprintf(info.tier[0], KVTD_MAX_TIER_NAME, "dram");
	snprintf(info.tier[1], KVTD_MAX_TIER_NAME, "nvme");
	memcpy(shm, &info, sizeof(info));
	munmap(shm, (size_t)st.st_size);
	close(fd);
	struct kvtd_rep rep = {.magic = KVTD_MAGIC, .op = KVTD_HELLO, .seq = q->seq};
	CHECK_RC(kvtd_send(s, &rep, sizeof(rep), -1), 0);
}

static void *fake_main(void *arg)
{
	(void)arg;
	while (!stopping()) {
		struct pollfd p = {.fd = F.lfd, .events = POLLIN};
		if (poll(&p, 1, 50) <= 0)
			continue;
		int s = accept4(F.lfd, NULL, NULL, SOCK_CLOEXEC);
		CHECK(s >= 0);
		struct timeval tv = {.tv_usec = 50000};
		setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		struct kvtd_req q;
		int fd = -1;
		long r = recv_one(s, &q, &fd);
		uint64_t hello = test_now_ns();
		if (r == (long)sizeof(q))
			answer_hello(s, &q, fd);
		else if (fd >= 0)
			close(fd);
		int n = 0; /* requests read, none answered, until the client lets go */
		while (r == (long)sizeof(q) && (r = recv_one(s, &q, NULL)) == (long)sizeof(q))
			n++;
		close(s);
		pthread_mutex_lock(&F.lock);
		if (F.conns < CONNS + 4) {
			F.hello_at[F.conns] = hello;
			F.end_at[F.conns] = test_now_ns();
			F.reqs[F.conns] = n;
		}
		F.conns++;
		pthread_mutex_unlock(&F.lock);
	}
	return NULL;
}

static int conns_over(void)
{
	pthread_mutex_lock(&F.lock);
	int n = F.conns;
	pthread_mutex_unlock(&F.lock);
	return n;
}

/* ---- the callers */

static uint64_t give_up_at; /* set before the callers start: 40 T after the first call */

struct caller {
	struct kvt_store *s;
	pthread_t th;
	int calls, slow, bad;    /* bad: a slow call that did not take about one T */
	uint64_t slowest_fast;   /* the longest call that was not a probe */
	int wrong;               /* calls that did not miss with -ETIMEDOUT as their cause */
};

static void *caller_main(void *arg)
{
	struct caller *c = arg;
	struct kvt_key k = {{0}};
	k.bytes[0] = 0x5a;
	size_t len = kvt_payload_bytes(&GEO, GEO.chunk_tokens);
	uint8_t *buf = malloc(len);
	CHECK(buf);
	while (conns_over() < CONNS && test_now_ns() < give_up_at) {
		struct kvt_result res = {0};
		uint64_t t = test_now_ns();
		int rc = kvt_get_sync(c->s, &k, 0, 0, buf, len, &res);
		uint64_t took = test_now_ns() - t;
		c->calls++;
		c->wrong += rc != -ENOENT || res.cause != -ETIMEDOUT;
		if (took >= SLOW_NS) {
			c->slow++;
			c->bad += took < T_NS * 8 / 10 || took > T_NS * 16 / 10;
		} else {
			c->slowest_fast = KVT_MAX(c->slowest_fast, took);
		}
		usleep(5000);
	}
	free(buf);
	return NULL;
}

int main(void)
{
	char *dir = test_tmpdir("daemon_hello_hang");
	char sock[108];
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	F.lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
	CHECK(F.lfd >= 0 && bind(F.lfd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	      listen(F.lfd, 8) == 0);
	pthread_t fake;
	CHECK(pthread_create(&fake, NULL, fake_main, NULL) == 0);

	struct kvt_config *cfg = test_config("dram,nvme", dir);
	test_set(cfg, "store.daemon", sock);
	char t_ms[16];
	snprintf(t_ms, sizeof(t_ms), "%d", T_MS);
	test_set(cfg, "store.daemon_timeout_ms", t_ms);
	struct kvt_store *s = test_open(cfg); /* attached: the HELLO was answered */

	/* the first call, alone (a second caller would queue behind it: nothing is down yet),
	 * times out and marks the daemon down */
	uint64_t t0 = test_now_ns();
	struct kvt_key k0 = {{0}};
	size_t len = kvt_payload_bytes(&GEO, GEO.chunk_tokens);
	uint8_t *buf = malloc(len);
	struct kvt_result res = {0};
	CHECK_RC(kvt_get_sync(s, &k0, 0, 0, buf, len, &res), -ENOENT);
	uint64_t first = test_now_ns() - t0;
	CHECK_RC(res.cause, -ETIMEDOUT);
	CHECKM(first >= T_NS * 8 / 10 && first < T_NS * 16 / 10, "the first call took %.2f T",
	       in_t(first));
	free(buf);
	give_up_at = test_now_ns() + 40 * T_NS;
	struct caller c[2] = {{.s = s}, {.s = s}};
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&c[i].th, NULL, caller_main, &c[i]) == 0);
	for (int i = 0; i < 2; i++)
		pthread_join(c[i].th, NULL);
	uint64_t took = test_now_ns() - t0 - first;
	kvt_store_close(s);
	pthread_mutex_lock(&F.lock);
	F.stop = true;
	pthread_mutex_unlock(&F.lock);
	pthread_join(fake, NULL);
	close(F.lfd);

	int calls = c[0].calls + c[1].calls, slow = c[0].slow + c[1].slow;
	int bad = c[0].bad + c[1].bad, wrong = c[0].wrong + c[1].wrong;
	uint64_t fast = KVT_MAX(c[0].slowest_fast, c[1].slowest_fast);
	int n = KVT_MIN(conns_over(), CONNS + 4);
	printf("the first call %.2f T; then %d get_sync calls on 2 threads over %.2f T: %d slow "
	       "calls for %d probes (%d not about one T); the slowest other call %.3f T\n",
	       in_t(first), calls, in_t(took), slow, CONNS - 1, bad, in_t(fast));
	printf("backoffs (a probe timing out to the next HELLO):");
	for (int i = 0; i + 1 < n; i++)
		printf(" %.2f", in_t(F.hello_at[i + 1] - F.end_at[i]));
	printf(" T; requests per connection:");
	for (int i = 0; i < n; i++)
		printf(" %d", F.reqs[i]);
	printf("\n");

	CHECKM(n >= CONNS, "%d probes within 40 T, not %d", n - 1, CONNS - 1);
	CHECKM(wrong == 0, "%d calls did not miss with -ETIMEDOUT as their cause", wrong);
	/* one request per connection: the first call's, then each probe's; the calls between
	 * never reached the daemon */
	for (int i = 0; i < CONNS; i++)
		CHECKM(F.reqs[i] == 1, "connection %d got %d requests", i, F.reqs[i]);
	/* each probe cost one call one T; every other call failed at once, the other thread's
	 * calls while a probe waited included */
	CHECKM(slow == CONNS - 1 && bad == 0, "%d slow calls (%d not about one T) for %d probes",
	       slow, bad, CONNS - 1);
	/* the backoff doubled with each probe: the HELLO that opened it did not reset it */
	for (int i = 0; i + 1 < CONNS; i++) {
		uint64_t want = T_NS << i, got = F.hello_at[i + 1] - F.end_at[i];
		CHECKM(got + T_NS / 5 >= want && got < want + T_NS / 2,
		       "backoff %d: %.2f T, not %.0f T", i, in_t(got), in_t(want));
	}
	test_rmdir(dir);
	free(dir);
	printf("daemon_hello_hang: ok\n");
	return 0;
}
