/*
 * redis_addrs.c - the redis tier tries every address its server's name has. Why: a name
 * often has more than one ("localhost" is ::1 and 127.0.0.1 on most machines) and a server
 * may listen on only one of them; the tier used to connect to the first address the lookup
 * gave and fail every request with "connection refused" while the server ran. Here a name
 * has two loopback addresses (a hosts file bind-mounted over /etc/hosts in a private mount
 * namespace, so glibc's real lookup answers it) and a real redis-server listens on the one
 * getaddrinfo() gives second:
 *   - a put and a get through the tier's I/O connections: exact bytes;
 *   - the listing (kvtier ls / verify use it; a synchronous connection of its own) sees
 *     the object;
 *   - redis killed and started again on the same address: the next put reconnects (the
 *     name looked up again, the first address refused again).
 * Needs root (a mount namespace); exit 0 pass, 1 fail.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <sched.h>
#include <sys/mount.h>

#include "engine.h"
#include "testlib.h"
#include "tier.h"
#include "lib/redis_server.h"

#define HOST "kvt-two-addrs.test"

static char order[2][46]; /* the name's addresses in getaddrinfo's order */

static void private_hosts(const char *dir)
{
	char path[300];
	snprintf(path, sizeof(path), "%s/hosts", dir);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	fprintf(f, "127.0.0.1 localhost\n127.0.0.2 %s\n127.0.0.3 %s\n", HOST, HOST);
	CHECK(fclose(f) == 0);
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount(path, "/etc/hosts", NULL, MS_BIND, NULL) < 0) {
		fprintf(stderr, "FAIL: a private /etc/hosts: %s (root needed)\n", strerror(errno));
		exit(1);
	}
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
	CHECK_EQ(getaddrinfo(HOST, "6379", &hints, &res), 0);
	int n = 0;
	for (struct addrinfo *a = res; a && n < 2; a = a->ai_next, n++)
		CHECK(getnameinfo(a->ai_addr, a->ai_addrlen, order[n], sizeof(order[n]), NULL, 0,
				  NI_NUMERICHOST) == 0);
	freeaddrinfo(res);
	CHECKM(n == 2 && strcmp(order[0], order[1]), "the name has %d addresses", n);
	printf("  %s: %s, then %s; the server listens on %s only\n", HOST, order[0], order[1],
	       order[1]);
}

static int count_key(void *arg, const struct kvt_key *key, uint64_t bytes)
{
	(void)key;
	(void)bytes;
	(*(int *)arg)++;
	return 0;
}

int main(void)
{
	char *dir = test_tmpdir("redis_addrs");
	private_hosts(dir);
	struct rs r;
	CHECK_EQ(rs_prepare(&r, NULL), 0);
	r.bind = order[1];
	int rc = rs_launch(&r);
	if (rc != 0) {
		fprintf(stderr, "FAIL: redis-server on %s: %d\n", order[1], rc);
		return 1;
	}
	char url[200];
	snprintf(url, sizeof(url), "redis://%s:%d", HOST, r.port);
	struct kvt_config *c = test_config("redis", dir);
	test_set(c, "redis.url", url);
	test_set(c, "redis.timeout_ms", "2000");
	struct kvt_store *s = test_open(c);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t len = kvt_payload_bytes(g, g->chunk_tokens);
	uint8_t *buf = malloc(len), *back = malloc(len);
	struct kvt_key k[2];
	test_chain_keys(s, k, 2, 9);

	test_fill(buf, len, 11);
	CHECK_RC(kvt_put_sync(s, &k[0], NULL, g->chunk_tokens, buf, len), 0);
	struct kvt_result res;
	CHECK_RC(kvt_get_sync(s, &k[0], 0, 0, back, len, &res), 0);
	CHECK(test_check(back, len, 11));
	printf("  put and get through %s: exact bytes\n", HOST);

	int listed = 0;
	struct kvt_tier *t = kvt__store_tier(s, 0);
	CHECK_RC(t->ops->scan(t, count_key, &listed), 0);
	CHECK_EQ(listed, 1);
	printf("  listing: 1 object\n");

	rs_signal(&r, SIGKILL);
	CHECK_EQ(rs_launch(&r), 0);
	test_fill(buf, len, 12);
	rc = -1;
	for (int i = 0; i < 20 && rc != 0; i++) { /* the connection's loss may fail one put */
		rc = kvt_put_sync(s, &k[1], &k[0], g->chunk_tokens, buf, len);
		if (rc != 0)
			usleep(100000);
	}
	CHECK_RC(rc, 0);
	CHECK_RC(kvt_get_sync(s, &k[1], 0, 0, back, len, &res), 0);
	CHECK(test_check(back, len, 12));
	printf("  after a restart of the server: reconnected, exact bytes\n");

	kvt_store_close(s);
	rs_stop(&r);
	test_rmdir(dir);
	free(dir);
	free(buf);
	free(back);
	printf("redis_addrs: ok\n");
	return 0;
}
