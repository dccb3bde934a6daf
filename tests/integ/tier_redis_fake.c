/*
 * tier_redis_fake.c - the redis tier's listing (scan: kvtier ls, verify) against a server
 * that cannot be followed to the end: a fake Redis on 127.0.0.1 (a thread here, speaking
 * RESP) whose SCAN answers as the test says. A real redis-server cannot be made to do this;
 * tier_redis.c covers the real one.
 *   1. a cursor that comes back unchanged: -EPROTO at the second call, not a loop;
 *   2. a cursor cycling between two values (which the unchanged-cursor check cannot see):
 *      -EPROTO after at most 4 x (DBSIZE / 1000 + 1) + 64 calls - the listing used to go
 *      on for ever, on a thread the caller's bound had already given up on;
 *   3. a server that ends its SCAN: the key it lists is reported with STRLEN's size.
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

enum mode { STUCK, CYCLE, ENDS };
static _Atomic int mode;
static _Atomic int scans; /* SCAN calls answered */
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

static void reply(int fd, const char *s)
{
	size_t n = strlen(s), off = 0;
	while (off < n) {
		ssize_t w = write(fd, s + off, n - off);
		if (w <= 0)
			return;
		off += (size_t)w;
	}
}

static void serve(int fd)
{
	char buf[65536];
	size_t len = 0;
	for (;;) {
		ssize_t r = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (r <= 0)
			return;
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
				else
					snprintf(out, sizeof(out), "*2\r\n$1\r\n0\r\n*1\r\n$%zu\r\nkvt-test:%s\r\n",
						 strlen("kvt-test:") + 64, key_hex);
			} else if (argc >= 1 && !strcasecmp(argv[0], "DBSIZE")) {
				snprintf(out, sizeof(out), ":10\r\n");
			} else if (argc >= 1 && !strcasecmp(argv[0], "STRLEN")) {
				snprintf(out, sizeof(out), ":4096\r\n");
			} else {
				snprintf(out, sizeof(out), "+OK\r\n");
			}
			reply(fd, out);
			memmove(buf, buf + used, len - used);
			len -= used;
		}
	}
}

static void *server_main(void *arg)
{
	(void)arg;
	int fd;
	while ((fd = accept(listen_fd, NULL, NULL)) >= 0) {
		serve(fd);
		close(fd);
	}
	return NULL;
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
	shutdown(listen_fd, SHUT_RDWR);
	close(listen_fd);
	pthread_join(th, NULL);
	printf("tier_redis_fake: ok\n");
	return 0;
}
