/*
 * tier_redis_fake.c - the redis tier's listing (scan: kvtier ls, verify) against a server
 * that cannot be followed to the end: a fake Redis on 127.0.0.1 (a thread here, speaking
 * RESP) whose SCAN answers as the test says. A real redis-server cannot be made to do this;
 * tier_redis.c covers the real one.
 *   1. a cursor that comes back unchanged: -EPROTO at the second call, not a loop;
 *   2. a cursor cycling between two values (which the unchanged-cursor check cannot see):
 *      -EPROTO after at most 4 x (DBSIZE / 1000 + 1) + 64 calls - the listing used to go
 *      on for ever, on a thread the caller's bound had already given up on;
 *   3. a server that ends its SCAN: the key it lists is reported with STRLEN's size;
 *   4. a reply trickled a byte at a time, each byte well within redis.timeout_ms but the
 *      whole reply not (to AUTH, SELECT, DBSIZE, SCAN, STRLEN in turn): the listing fails
 *      with -ETIMEDOUT within the timeout plus slack - it used to wait for the whole reply,
 *      a socket timeout bounding only each recv();
 *   5. the same through the store's bounds (kvt__tier_scan_bounded, close_bounded): the
 *      listing ends by the tier's own timeout and the tier then closes at once - it used to
 *      stay busy, the close refused (-EBUSY) and the tier leaked with its threads running;
 *   6. a server that answers every SET with an error (OOM: full, noeviction): each put
 *      fails with -ENOSPC and the log gets about a line a second, not a line per put, its
 *      text with the control characters the server put in it (a terminal escape) shown as
 *      '?' - they used to go to the log as sent;
 *   7. a server that answers every SCAN in time (each reply half a redis.timeout_ms after
 *      its call) with a new cursor, for longer than 16 x redis.timeout_ms (a huge
 *      keyspace, or a slow server): the listing fails with -ETIMEDOUT at that bound with one
 *      log line saying so - it used to go on for as many timeouts as there were replies;
 *   8. a corruption report whose drop reads the value's 4 KiB header, answered with a bulk
 *      string of 4 GB announced and streamed (FLOOD_BYTES of it): the drop fails at once
 *      and the process's peak RSS grows by less than FLOOD_RSS_MIB - hiredis used to
 *      buffer the whole body until the timeout (1.3 GB in 2 s over loopback);
 *   9. a SCAN answered with an array of 100,000,000 elements, streamed (FLOOD_ELEMS
 *      empty strings): the listing fails with -EPROTO at once, the same bound on RSS -
 *      hiredis used to make an object per element until the timeout;
 *  10. a read whose GETRANGE reply is followed by two bytes other than the "\r\n" that ends
 *      a bulk string: -EPROTO - they used to be taken for it, unchecked;
 *  11. a server that answers AUTH, SELECT and SET each in 0.7 x redis.timeout_ms: the put
 *      (its reconnect included) fails -ETIMEDOUT at its timeout - each step used to restart
 *      the clock, and the put succeeded after 2.1 x the timeout;
 *  12. a read whose STRLEN says 4096 and whose GETRANGE then answers "" (the value removed
 *      in between): -ENOENT - it used to succeed with 0 bytes;
 *  13. a slow server: PIPE_N puts pipelined on one connection, each SET answered a third of
 *      redis.timeout_ms after the one before: every put is answered (done, or -ETIMEDOUT)
 *      within its own timeout plus slack of its submission - the timeout used to restart
 *      at every reply, and the last put succeeded after PIPE_N / 3 timeouts.
 *  14. the same with redis.min_bytes_per_s low enough that the value bytes ahead of each
 *      put outlast the server's pace: every put is kept (the allowance for bytes is the
 *      key's, not a constant).
 *  15. SET answered MISCONF (the server cannot persist): -ENOSPC, not -EIO; a value above
 *      Redis's 512 MiB bulk limit: -EFBIG before anything is sent.
 * Exit 0 pass, 1 fail.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <strings.h>
#include <unistd.h>

#include "config.h"
#include "lib/tierh.h"

extern const struct kvt_tier_ops kvt__tier_redis_ops;

enum mode { STUCK, CYCLE, ENDS, SLOW };
static _Atomic int mode;
static _Atomic int scans; /* SCAN calls answered */
/* the command whose reply is trickled (sections 4, 5), NULL for none */
static const char *_Atomic trickle_cmd;
static _Atomic bool set_oom; /* SET answered with an OOM error (section 6) */
static _Atomic bool set_misconf; /* SET answered with a MISCONF error (section 15) */
/* sections 8 and 9: GETRANGE, or SCAN, answered with a reply far larger than asked for */
enum flood { FLOOD_NONE, FLOOD_BULK, FLOOD_ARRAY };
static _Atomic int flood;
static _Atomic bool misframe; /* GETRANGE's bulk string ends in "XY", not "\r\n" (10) */
static _Atomic bool vanished; /* GETRANGE answers "" after STRLEN's 4096: removed (12) */
static _Atomic int step_delay_ms; /* before each reply to AUTH, SELECT and SET (11, 13) */
#define FLOOD_TIMEOUT_MS 1000
/* what the flooding server sends at most: well past FLOOD_RSS_MIB for a client that keeps
 * it all, little enough to be sent within FLOOD_TIMEOUT_MS on a loaded machine */
#define FLOOD_BYTES (128u << 20)
#define FLOOD_ELEMS 1500000 /* "$0\r\n\r\n": 9 MB on the wire, 150 MB as hiredis objects */
#define FLOOD_RSS_MIB 64
#define TIMEOUT_MS 500	 /* redis.timeout_ms of sections 4-6 */
#define TRICKLE_MS 200	 /* between the bytes of a trickled reply: within the timeout */
#define SLACK_MS 1000
#define SLOW_TIMEOUT_MS 500		   /* redis.timeout_ms of section 7 */
/* between a SCAN and its reply: in time, with room for a loaded machine (at a quarter of
 * the timeout; at half, TSan under load 10 timed one reply out and ended the listing at
 * 3.7 s instead of its bound) */
#define SLOW_MS (SLOW_TIMEOUT_MS / 4)
#define LIST_MS (16 * SLOW_TIMEOUT_MS)	   /* the whole listing's bound (RD_LIST_TIMEOUTS) */
#define SLOW_CALLS (2 * LIST_MS / SLOW_MS) /* SCAN replies before the cursor ends */
static int listen_fd;
static const char key_hex[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/* One command (RESP array of bulk strings) from buf[0..*len): its words in argv (at most 8,
 * NUL-terminated in place), the bytes used, or 0 if incomplete. */
static size_t parse(char *buf, size_t len, char **argv, int *argc)
{
	char *p = buf, *end = buf + len;
	char *nl = memchr(p, '\n', (size_t)(end - p));
	if (!nl || *p != '*')
		return 0;
	int n = atoi(p + 1);
	p = nl + 1;
	*argc = 0;
	for (int i = 0; i < n; i++) {
		nl = p < end ? memchr(p, '\n', (size_t)(end - p)) : NULL;
		if (!nl || *p != '$')
			return 0;
		size_t l = (size_t)atol(p + 1);
		p = nl + 1;
		if ((size_t)(end - p) < l + 2)
			return 0;
		p[l] = 0;
		if (*argc < 8)
			argv[(*argc)++] = p;
		p += l + 2;
	}
	return (size_t)(p - buf);
}

/* MSG_NOSIGNAL: a client that gave up on a trickled reply must not SIGPIPE the test */
static int reply(int fd, const char *s)
{
	size_t n = strlen(s), off = 0;
	while (off < n) {
		ssize_t w = send(fd, s + off, n - off, MSG_NOSIGNAL);
		if (w <= 0)
			return -1;
		off += (size_t)w;
	}
	return 0;
}

/* A well-formed reply, a byte every TRICKLE_MS; -1 once the client is gone. */
static int trickle(int fd, const char *s)
{
	for (; *s; s++) {
		usleep(TRICKLE_MS * 1000);
		if (send(fd, s, 1, MSG_NOSIGNAL) != 1)
			return -1;
	}
	return 0;
}

/* head, then unit over and over until total bytes have gone; -1 once the client is gone */
static int flood_send(int fd, const char *head, const char *unit, size_t total)
{
	if (reply(fd, head) < 0)
		return -1;
	size_t ul = strlen(unit), cap = (1u << 20) / ul * ul;
	char *chunk = malloc(cap);
	CHECK(chunk);
	for (size_t o = 0; o < cap; o += ul)
		memcpy(chunk + o, unit, ul);
	int rc = 0;
	for (size_t sent = 0; sent < total && rc == 0;) {
		size_t n = KVT_MIN(cap, total - sent), off = 0;
		while (off < n) {
			ssize_t w = send(fd, chunk + off, n - off, MSG_NOSIGNAL);
			if (w <= 0) {
				rc = -1;
				break;
			}
			off += (size_t)w;
		}
		sent += n;
	}
	free(chunk);
	return rc;
}

static void serve(int fd)
{
	char buf[65536];
	size_t len = 0;
	char *big = malloc(16384); /* a trickled SCAN reply: 1000 keys */
	CHECK(big);
	for (;;) {
		ssize_t r = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (r <= 0)
			break;
		len += (size_t)r;
		char *argv[8];
		int argc;
		size_t used;
		while (len && (used = parse(buf, len, argv, &argc)) > 0) {
			char out[512];
			if (argc >= 2 && !strcasecmp(argv[0], "SCAN")) {
				int n = atomic_fetch_add(&scans, 1);
				int m = atomic_load(&mode);
				if (m == STUCK)
					snprintf(out, sizeof(out), "*2\r\n$1\r\n5\r\n*0\r\n");
				else if (m == CYCLE)
					snprintf(out, sizeof(out), "*2\r\n$1\r\n%d\r\n*0\r\n", 5 + n % 2);
				else if (m == SLOW) {
					/* a new cursor each time, 0 after SLOW_CALLS */
					usleep(SLOW_MS * 1000);
					int cur = n + 1 < SLOW_CALLS ? n + 1 : 0;
					snprintf(out, sizeof(out), "*2\r\n$%d\r\n%d\r\n*0\r\n",
						 snprintf(NULL, 0, "%d", cur), cur);
				} else
					snprintf(out, sizeof(out), "*2\r\n$1\r\n0\r\n*1\r\n$%zu\r\nkvt-test:%s\r\n",
						 strlen("kvt-test:") + 64, key_hex);
			} else if (argc >= 1 && !strcasecmp(argv[0], "DBSIZE")) {
				/* section 7: a keyspace large enough for all those calls */
				snprintf(out, sizeof(out), ":%d\r\n",
					 atomic_load(&mode) == SLOW ? 100000000 : 10);
			} else if (argc >= 1 && !strcasecmp(argv[0], "STRLEN")) {
				snprintf(out, sizeof(out), ":4096\r\n");
			} else if (argc >= 1 && !strcasecmp(argv[0], "SET") &&
				   atomic_load(&set_misconf)) {
				snprintf(out, sizeof(out),
					 "-MISCONF Redis is configured to save RDB snapshots, but "
					 "it's currently unable to persist to disk.\r\n");
			} else if (argc >= 1 && !strcasecmp(argv[0], "SET") &&
				   atomic_load(&set_oom)) {
				/* with a terminal escape (ESC, BEL) in its text */
				snprintf(out, sizeof(out),
					 "-OOM command not allowed \033[2J\007when used memory > "
					 "'maxmemory'.\r\n");
			} else {
				snprintf(out, sizeof(out), "+OK\r\n");
			}
			const char *tc = atomic_load(&trickle_cmd);
			int rc;
			int delay = atomic_load(&step_delay_ms);
			if (delay && argc >= 1 &&
			    (!strcasecmp(argv[0], "AUTH") || !strcasecmp(argv[0], "SELECT") ||
			     !strcasecmp(argv[0], "SET")))
				usleep((useconds_t)delay * 1000);
			int fl = atomic_load(&flood);
			bool getrange = argc >= 4 && !strcasecmp(argv[0], "GETRANGE");
			if (fl == FLOOD_BULK && getrange) {
				rc = flood_send(fd, "$4000000000\r\n", "x", FLOOD_BYTES);
			} else if (fl == FLOOD_ARRAY && argc >= 1 && !strcasecmp(argv[0], "SCAN")) {
				rc = flood_send(fd, "*2\r\n$1\r\n0\r\n*100000000\r\n", "$0\r\n\r\n",
						(size_t)FLOOD_ELEMS * 6);
			} else if (atomic_load(&vanished) && getrange) {
				rc = reply(fd, "$0\r\n\r\n");
			} else if (atomic_load(&misframe) && getrange) {
				/* the range asked for, then "XY" where "\r\n" belongs */
				long n = atol(argv[3]) - atol(argv[2]) + 1;
				char *body = malloc((size_t)n + 32);
				CHECK(body);
				int h = sprintf(body, "$%ld\r\n", n);
				memset(body + h, 'v', (size_t)n);
				memcpy(body + h + n, "XY", 3);
				rc = reply(fd, body);
				free(body);
			} else if (tc && argc >= 1 && !strcasecmp(argv[0], tc)) {
				if (!strcasecmp(tc, "SCAN")) { /* long enough to last for ever */
					size_t o = (size_t)sprintf(big, "*2\r\n$1\r\n0\r\n"
									"*1000\r\n");
					for (int i = 0; i < 1000; i++)
						o += (size_t)sprintf(big + o, "$3\r\nabc\r\n");
					rc = trickle(fd, big);
				} else {
					rc = trickle(fd, out);
				}
			} else {
				rc = reply(fd, out);
			}
			if (rc < 0)
				goto out;
			memmove(buf, buf + used, len - used);
			len -= used;
		}
	}
out:
	free(big);
}

/* A thread per connection: one left trickling must not hold up the next. */
static void *serve_main(void *arg)
{
	int fd = (int)(intptr_t)arg;
	serve(fd);
	close(fd);
	return NULL;
}

static void *server_main(void *arg)
{
	(void)arg;
	int fd;
	while ((fd = accept(listen_fd, NULL, NULL)) >= 0) {
		pthread_t th;
		CHECK_EQ(pthread_create(&th, NULL, serve_main, (void *)(intptr_t)fd), 0);
		pthread_detach(th);
	}
	return NULL;
}

static _Atomic int oom_lines, other_lines, refused_lines;
static pthread_mutex_t last_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_oom[512], last_other[512];

static void count_log(void *arg, int level, const char *msg)
{
	(void)arg;
	if (strstr(msg, "refused"))
		atomic_fetch_add(&refused_lines, 1);
	if (strstr(msg, "OOM")) {
		atomic_fetch_add(&oom_lines, 1);
		pthread_mutex_lock(&last_lock);
		snprintf(last_oom, sizeof(last_oom), "%s", msg);
		pthread_mutex_unlock(&last_lock);
	} else {
		atomic_fetch_add(&other_lines, 1);
		pthread_mutex_lock(&last_lock);
		snprintf(last_other, sizeof(last_other), "%s", msg);
		pthread_mutex_unlock(&last_lock);
	}
	if (getenv("KVT_TEST_VERBOSE"))
		fprintf(stderr, "  [tier %d] %s\n", level, msg);
}

/* th_open with the counting log: set before the tier's threads start */
static struct kvt_tier *open_counting(const char *const *kv)
{
	struct kvt_config *cfg = th_config(kv);
	struct kvt_tier *t = calloc(1, sizeof(*t));
	CHECK(t);
	t->ops = &kvt__tier_redis_ops;
	t->log.fn = count_log;
	t->log.level = KVT_LOG_WARN;
	t->state = kvt__calloc(1, t->ops->state_size);
	CHECK(t->state);
	CHECK_EQ(t->ops->open(t, cfg), 0);
	kvt_config_destroy(cfg);
	return t;
}

static int listed;
static uint64_t listed_bytes;

static int on_key(void *arg, const struct kvt_key *key, uint64_t bytes)
{
	(void)arg;
	(void)key;
	listed++;
	listed_bytes = bytes;
	return 0;
}

/* The peak resident set from here on starts at the current one (Linux 4.0 on): each
 * flood measured on its own, not against an earlier one's peak. */
static void peak_rss_reset(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");
	CHECK(f);
	CHECK(fputs("5", f) >= 0);
	CHECK_EQ(fclose(f), 0);
}

/* the process's peak resident set since peak_rss_reset (VmHWM), in MiB */
static long peak_rss_mib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	CHECK(f);
	char line[256];
	long kib = -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmHWM:", 6))
			kib = atol(line + 6);
	fclose(f);
	CHECK(kib >= 0);
	return kib / 1024;
}

static bool has_control(const char *msg)
{
	for (const unsigned char *p = (const unsigned char *)msg; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return true;
	return false;
}

/* section 13: one pipelined put's submission and answer */
#define PIPE_N 12
struct pipe_put {
	uint64_t sent_ms;
	_Atomic uint64_t done_ms;
	_Atomic int64_t rc;
};
static _Atomic int pipe_done;

static void pipe_cb(void *arg, int64_t rc)
{
	struct pipe_put *p = arg;
	atomic_store(&p->rc, rc);
	atomic_store(&p->done_ms, th_now_ms());
	atomic_fetch_add(&pipe_done, 1);
}

/* Sections 13 and 14: with every server reply TIMEOUT_MS / 3 after the one before, PIPE_N
 * puts of obj (keys 100 * section + i) pipelined on t, waited for (each records its answer
 * and when it came in pp). */
static void run_pipeline(struct kvt_tier *t, const void *obj, size_t len, struct pipe_put *pp,
			 int section)
{
	atomic_store(&step_delay_ms, TIMEOUT_MS / 3);
	atomic_store(&pipe_done, 0);
	for (int i = 0; i < PIPE_N; i++) {
		struct kvt_key pk;
		th_key(&pk, 100 * (uint64_t)section + (uint64_t)i, (uint64_t)section);
		atomic_store(&pp[i].rc, 1);
		pp[i].sent_ms = th_now_ms();
		CHECK_EQ(t->ops->write(t, &pk, obj, len, pipe_cb, &pp[i]), 0);
	}
	uint64_t t0 = th_now_ms();
	while (atomic_load(&pipe_done) < PIPE_N && th_now_ms() - t0 < 20000)
		usleep(1000);
	CHECK_EQ(atomic_load(&pipe_done), PIPE_N);
}

static int run_scan(struct kvt_tier *t, enum mode m, double *ms)
{
	atomic_store(&mode, m);
	atomic_store(&scans, 0);
	listed = 0;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	int rc = t->ops->scan(t, on_key, NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	*ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
	return rc;
}

int main(void)
{
	alarm(60); /* a listing that never ends is a failure, not a hang */
	listen_fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	CHECK_EQ(bind(listen_fd, (struct sockaddr *)&a, sizeof(a)), 0);
	CHECK_EQ(listen(listen_fd, 8), 0);
	CHECK_EQ(getsockname(listen_fd, (struct sockaddr *)&a, &al), 0);
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, server_main, NULL), 0);
	char url[64];
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", ntohs(a.sin_port));
	const char *kv[] = {"redis.url", url, "redis.timeout_ms", "2000", "redis.prefix",
			    "kvt-test:", "store.read_only", "true", NULL};
	struct kvt_config *cfg = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_redis_ops, cfg, &t), 0);
	kvt_config_destroy(cfg);

	double ms;
	int rc = run_scan(t, STUCK, &ms);
	printf("  1. cursor unchanged: %s after %d SCAN calls, %.0f ms\n", kvt_strerror(rc),
	       atomic_load(&scans), ms);
	CHECK_EQ(rc, -EPROTO);
	CHECK_EQ(atomic_load(&scans), 2);

	rc = run_scan(t, CYCLE, &ms);
	printf("  2. cursor cycling: %s after %d SCAN calls, %.0f ms\n", kvt_strerror(rc),
	       atomic_load(&scans), ms);
	CHECK_EQ(rc, -EPROTO);
	CHECK(atomic_load(&scans) <= 4 * (10 / 1000 + 1) + 64);
	CHECK(ms < 5000);

	rc = run_scan(t, ENDS, &ms);
	printf("  3. a SCAN that ends: %s, %d key(s) of %llu bytes\n", kvt_strerror(rc), listed,
	       (unsigned long long)listed_bytes);
	CHECK_EQ(rc, 0);
	CHECK_EQ(listed, 1);
	CHECK_EQ(listed_bytes, 4096);

	th_close(t);

	/* 4. a password and a database, so that AUTH and SELECT are sent too */
	char url2[96];
	snprintf(url2, sizeof(url2), "redis://:secret@127.0.0.1:%d/2", ntohs(a.sin_port));
	char tmo[16];
	snprintf(tmo, sizeof(tmo), "%d", TIMEOUT_MS);
	const char *kv2[] = {"redis.url", url2, "redis.timeout_ms", tmo, "redis.prefix",
			     "kvt-test:", "store.read_only", "true", NULL};
	static const struct kvt_geometry geo = {4, 2, 64, 16, KVT_DTYPE_BF16, KVT_KIND_KV};
	t = th_open_by_name("redis", kv2, &geo);
	static const char *const slow[] = {"AUTH", "SELECT", "DBSIZE", "SCAN", "STRLEN"};
	for (size_t i = 0; i < KVT_ARRAY_SIZE(slow); i++) {
		atomic_store(&trickle_cmd, slow[i]);
		rc = run_scan(t, ENDS, &ms);
		printf("  4. %s's reply trickled: %s after %.0f ms (timeout %d ms)\n", slow[i],
		       kvt_strerror(rc), ms, TIMEOUT_MS);
		CHECK_EQ(rc, -ETIMEDOUT);
		CHECKM(ms >= TIMEOUT_MS - 50 && ms < TIMEOUT_MS + SLACK_MS, "%s: %.0f ms", slow[i],
		       ms);
	}

	/* 5. through the store's bounds, which are far longer than the tier's timeout */
	atomic_store(&trickle_cmd, "SCAN");
	uint64_t t0 = th_now_ms();
	rc = kvt__tier_scan_bounded(t, on_key, NULL, 10000);
	uint64_t scan_ms = th_now_ms() - t0;
	printf("  5. listing, bounded at 10000 ms: %s after %llu ms\n", kvt_strerror(rc),
	       (unsigned long long)scan_ms);
	CHECK_EQ(rc, -ETIMEDOUT);
	CHECK(scan_ms < TIMEOUT_MS + SLACK_MS);
	t0 = th_now_ms();
	rc = kvt__tier_close_bounded(t, 3000);
	uint64_t close_ms = th_now_ms() - t0;
	printf("     close, bounded at 3000 ms: %s after %llu ms\n", kvt_strerror(rc),
	       (unsigned long long)close_ms);
	CHECK_EQ(rc, 0);
	CHECK(close_ms < SLACK_MS);
	atomic_store(&trickle_cmd, NULL);

	/* 6. every put refused with an error reply */
	const char *kv3[] = {"redis.url", url, "redis.timeout_ms", tmo, "redis.prefix",
			     "kvt-test:", NULL};
	t = open_counting(kv3);
	atomic_store(&set_oom, true);
	enum { N = 300 };
	char obj[256];
	memset(obj, 7, sizeof(obj));
	t0 = th_now_ms();
	for (int i = 0; i < N; i++) {
		struct kvt_key k;
		th_key(&k, (uint64_t)i, 6);
		CHECK_EQ(th_write(t, &k, obj, sizeof(obj)), -ENOSPC);
	}
	uint64_t put_ms = th_now_ms() - t0;
	int lines = atomic_load(&oom_lines);
	printf("  6. %d puts refused (OOM) in %llu ms: %d log line(s) naming it, %d other(s)\n", N,
	       (unsigned long long)put_ms, lines, atomic_load(&other_lines));
	CHECKM(lines >= 1, "the error reply was never logged");
	pthread_mutex_lock(&last_lock);
	CHECKM(!has_control(last_oom), "control characters logged: %s", last_oom);
	pthread_mutex_unlock(&last_lock);
	CHECKM((uint64_t)lines <= 1 + put_ms / 1000 + 1, "%d lines for %d error replies", lines, N);
	/* a second later the next one is logged, saying how many were left out */
	usleep(1100 * 1000);
	struct kvt_key k;
	th_key(&k, N, 6);
	CHECK_EQ(th_write(t, &k, obj, sizeof(obj)), -ENOSPC);
	pthread_mutex_lock(&last_lock);
	printf("     a second later: %s\n", last_oom);
	CHECK_EQ(atomic_load(&oom_lines), lines + 1);
	CHECKM(strstr(last_oom, "more like it not logged"), "%s", last_oom);
	pthread_mutex_unlock(&last_lock);
	th_close(t);

	/* 7. every SCAN answered in time, the listing as a whole not */
	char slow_tmo[16];
	snprintf(slow_tmo, sizeof(slow_tmo), "%d", SLOW_TIMEOUT_MS);
	const char *kv4[] = {"redis.url", url, "redis.timeout_ms", slow_tmo, "redis.prefix",
			     "kvt-test:", "store.read_only", "true",
			     /* shorter than 16 x redis.timeout_ms, which rules then */
			     "store.sync_timeout_ms", "1000", NULL};
	t = open_counting(kv4);
	int before = atomic_load(&other_lines);
	rc = run_scan(t, SLOW, &ms);
	int lines7 = atomic_load(&other_lines) - before;
	pthread_mutex_lock(&last_lock);
	printf("  7. %d SCAN replies %d ms apart, each in time (timeout %d ms): %s after %d calls, "
	       "%.0f ms (bound %d ms); %d log line(s): %s\n",
	       SLOW_CALLS, SLOW_MS, SLOW_TIMEOUT_MS, kvt_strerror(rc), atomic_load(&scans), ms,
	       LIST_MS, lines7, lines7 ? last_other : "");
	pthread_mutex_unlock(&last_lock);
	CHECK_EQ(rc, -ETIMEDOUT);
	CHECKM(ms >= LIST_MS - 50 && ms < LIST_MS + SLACK_MS, "%.0f ms, bound %d ms", ms, LIST_MS);
	CHECK_EQ(lines7, 1);
	pthread_mutex_lock(&last_lock);
	CHECKM(strstr(last_other, "listing") && strstr(last_other, "redis.timeout_ms") &&
		   !strchr(last_other, '\n'),
	       "%s", last_other);
	pthread_mutex_unlock(&last_lock);
	th_close(t);

	/* 8. a drop's header read answered with 4 GB: the drop thread and its connection need
	 * a read-write tier */
	char flood_tmo[16];
	snprintf(flood_tmo, sizeof(flood_tmo), "%d", FLOOD_TIMEOUT_MS);
	const char *kv5[] = {"redis.url", url, "redis.timeout_ms", flood_tmo, "redis.prefix",
			     "kvt-test:", NULL};
	t = open_counting(kv5);
	t->geometry = &geo;
	atomic_store(&flood, FLOOD_BULK);
	peak_rss_reset();
	long rss0 = peak_rss_mib();
	int refused0 = atomic_load(&refused_lines);
	struct kvt_tier_stats st = {0};
	th_key(&k, 8, 8);
	t0 = th_now_ms();
	t->ops->drop_corrupt(t, &k);
	/* done when it counts its error; room past the timeout for the code that waited it out */
	while (t->ops->stats(t, &st), !st.errors && th_now_ms() - t0 < 10000)
		usleep(5000);
	uint64_t drop_ms = th_now_ms() - t0;
	long grew = peak_rss_mib() - rss0;
	printf("  8. a drop's 4 KiB header read answered with 4 GB: %llu error(s) after %llu ms "
	       "(timeout %d ms), peak RSS +%ld MiB, %d line(s) refusing it\n",
	       (unsigned long long)st.errors, (unsigned long long)drop_ms, FLOOD_TIMEOUT_MS, grew,
	       atomic_load(&refused_lines) - refused0);
	CHECKM(grew < FLOOD_RSS_MIB, "peak RSS grew by %ld MiB", grew);
	CHECK_EQ(st.errors, 1);
	CHECK(drop_ms < FLOOD_TIMEOUT_MS);
	CHECK_EQ(atomic_load(&refused_lines) - refused0, 1);
	atomic_store(&flood, FLOOD_NONE);

	/* 9. a SCAN answered with 100,000,000 elements (the tier of section 8), a second on:
	 * refusals are logged at most once a second */
	usleep(1100 * 1000);
	atomic_store(&flood, FLOOD_ARRAY);
	peak_rss_reset();
	rss0 = peak_rss_mib();
	refused0 = atomic_load(&refused_lines);
	rc = run_scan(t, ENDS, &ms);
	grew = peak_rss_mib() - rss0;
	printf("  9. SCAN answered with 100,000,000 elements: %s after %.0f ms (timeout %d ms), "
	       "peak RSS +%ld MiB, %d line(s) refusing it\n",
	       kvt_strerror(rc), ms, FLOOD_TIMEOUT_MS, grew,
	       atomic_load(&refused_lines) - refused0);
	CHECKM(grew < FLOOD_RSS_MIB, "peak RSS grew by %ld MiB", grew);
	CHECK_EQ(rc, -EPROTO);
	CHECK(ms < FLOOD_TIMEOUT_MS);
	CHECK_EQ(atomic_load(&refused_lines) - refused0, 1);
	atomic_store(&flood, FLOOD_NONE);

	/* 10. a bulk string misframed, on the I/O path (a read) */
	atomic_store(&misframe, true);
	char got[4096];
	int64_t r64 = th_read_all(t, &k, got, sizeof(got));
	printf(" 10. a read's GETRANGE reply ending in \"XY\", not \"\\r\\n\": %s\n",
	       r64 < 0 ? kvt_strerror((int)r64) : "read whole");
	CHECK_EQ(r64, -EPROTO);
	atomic_store(&misframe, false);

	/* 12. the value removed between the read's STRLEN and its GETRANGE (another node's
	 * remove, an eviction): a miss - the read used to succeed with 0 bytes, which the
	 * engine took for a corrupt object */
	atomic_store(&vanished, true);
	r64 = th_read_all(t, &k, got, sizeof(got));
	printf(" 12. a value removed between STRLEN and GETRANGE: %s\n",
	       r64 < 0 ? kvt_strerror((int)r64) : "read");
	CHECK_EQ(r64, -ENOENT);
	atomic_store(&vanished, false);
	th_close(t);

	/* 11. the reconnect a put waits for is inside its timeout */
	const char *kv6[] = {"redis.url", url2, "redis.timeout_ms", tmo, "redis.prefix",
			     "kvt-test:", "redis.connections", "1", NULL};
	t = open_counting(kv6);
	atomic_store(&set_oom, false); /* section 6's */
	atomic_store(&step_delay_ms, TIMEOUT_MS * 7 / 10);
	t0 = th_now_ms();
	rc = th_write(t, &k, obj, sizeof(obj));
	uint64_t step_ms = th_now_ms() - t0;
	printf(" 11. AUTH, SELECT and SET each answered after %d ms (timeout %d ms): the put %s "
	       "after %llu ms\n",
	       TIMEOUT_MS * 7 / 10, TIMEOUT_MS, rc ? kvt_strerror(rc) : "succeeded",
	       (unsigned long long)step_ms);
	CHECK_EQ(rc, -ETIMEDOUT);
	CHECKM(step_ms >= TIMEOUT_MS - 50 && step_ms < TIMEOUT_MS + SLACK_MS / 2, "%llu ms",
	       (unsigned long long)step_ms);
	atomic_store(&step_delay_ms, 0);
	th_close(t);

	/* 13. a slow server, a pipeline of puts: each put within its own timeout */
	const char *kv7[] = {"redis.url", url, "redis.timeout_ms", tmo, "redis.prefix",
			     "kvt-test:", "redis.connections", "1", NULL};
	t = open_counting(kv7);
	CHECK_EQ(th_write(t, &k, obj, sizeof(obj)), 0); /* connected before the clock runs */
	static struct pipe_put pp[PIPE_N];
	run_pipeline(t, obj, sizeof(obj), pp, 13);
	int ok = 0, timed_out = 0;
	uint64_t worst = 0;
	for (int i = 0; i < PIPE_N; i++) {
		uint64_t waited = atomic_load(&pp[i].done_ms) - pp[i].sent_ms;
		int64_t prc = atomic_load(&pp[i].rc);
		worst = KVT_MAX(worst, waited);
		ok += prc == 0;
		timed_out += prc == -ETIMEDOUT;
		CHECKM(prc == 0 || prc == -ETIMEDOUT, "put %d: %s", i, kvt_strerror((int)prc));
	}
	printf(" 13. %d puts pipelined, each SET answered %d ms after the one before (timeout "
	       "%d ms): %d done, %d -ETIMEDOUT, the longest answered after %llu ms\n",
	       PIPE_N, TIMEOUT_MS / 3, TIMEOUT_MS, ok, timed_out, (unsigned long long)worst);
	CHECKM(worst < TIMEOUT_MS + SLACK_MS / 2, "a put answered after %llu ms",
	       (unsigned long long)worst);
	CHECK(timed_out >= 1);
	atomic_store(&step_delay_ms, 0);
	th_close(t);

	/* 15. a server that cannot persist (MISCONF: its disk full) refuses writes: -ENOSPC,
	 * a full tier, not -EIO; and a value above Redis's bulk limit (512 MiB) is refused
	 * before it is sent (-EFBIG): sent, the server would close the connection and fail
	 * every request pipelined on it */
	const char *kv9[] = {"redis.url", url, "redis.timeout_ms", tmo, "redis.prefix",
			     "kvt-test:", NULL};
	t = open_counting(kv9);
	atomic_store(&set_misconf, true);
	int misconf = 0;
	for (int i = 0; i < 8; i++) {
		struct kvt_key mk;
		th_key(&mk, 1500 + (uint64_t)i, 15);
		misconf += th_write(t, &mk, obj, sizeof(obj)) == -ENOSPC;
	}
	atomic_store(&set_misconf, false);
	int big = t->ops->can_write(t, (512ull << 20) + 1);
	int small_ok = t->ops->can_write(t, 1ull << 20);
	struct kvt_key bk;
	th_key(&bk, 1600, 15);
	int bigw = t->ops->write(t, &bk, obj, (512ull << 20) + 1, pipe_cb, &pp[0]);
	printf(" 15. MISCONF: %d of 8 puts -ENOSPC; a value of 512 MiB + 1: can_write %s, write "
	       "%s\n",
	       misconf, kvt_strerror(big), kvt_strerror(bigw));
	CHECK_EQ(misconf, 8);
	CHECK_EQ(big, -EFBIG);
	CHECK_EQ(small_ok, 0);
	CHECK_EQ(bigw, -EFBIG);
	th_close(t);

	/* 14. the same server and pipeline with redis.min_bytes_per_s at 1 KiB/s: each 256-byte
	 * value adds 250 ms to its deadline and to every later one's, more than the server's
	 * TIMEOUT_MS / 3 per reply, so every put is kept, the last well past TIMEOUT_MS */
	const char *kv8[] = {"redis.url", url, "redis.timeout_ms", tmo, "redis.prefix",
			     "kvt-test:", "redis.connections", "1", "redis.min_bytes_per_s",
			     "1KiB", NULL};
	t = open_counting(kv8);
	CHECK_EQ(th_write(t, &k, obj, sizeof(obj)), 0);
	run_pipeline(t, obj, sizeof(obj), pp, 14);
	ok = 0;
	worst = 0;
	for (int i = 0; i < PIPE_N; i++) {
		worst = KVT_MAX(worst, atomic_load(&pp[i].done_ms) - pp[i].sent_ms);
		ok += atomic_load(&pp[i].rc) == 0;
	}
	printf(" 14. the same at redis.min_bytes_per_s=1KiB: %d of %d done, the longest answered "
	       "after %llu ms\n",
	       ok, PIPE_N, (unsigned long long)worst);
	CHECK_EQ(ok, PIPE_N);
	CHECKM(worst > 2 * TIMEOUT_MS, "the last put answered after %llu ms",
	       (unsigned long long)worst);
	atomic_store(&step_delay_ms, 0);
	th_close(t);

	shutdown(listen_fd, SHUT_RDWR);
	close(listen_fd);
	pthread_join(th, NULL);
	printf("tier_redis_fake: ok\n");
	return 0;
}
