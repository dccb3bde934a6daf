/*
 * daemon_lookup_reconnect.c - the first lookup and prefetch after a reconnect send their
 * keys. A client-mode store whose connection is down (a call timed out: the daemon was
 * stopped) reconnects on its next call with a new region, whose HELLO answer the daemon
 * writes at its offset 0. Until 2026-12-05 a lookup copied its keys into the region before
 * reconnecting, so they went out as the answer's bytes: the first lookup after every cut
 * or timeout found nothing (0, tier -1) for a stored key, and a prefetch staged nothing (a
 * review's reproducer). With the real daemon binary:
 *  1. put K; lookup finds it; SIGSTOP the daemon; a get times out (1 s); SIGCONT, and
 *     after the backoff the first lookup finds K in DRAM.
 *  2. the same again with a prefetch as the first call after the reconnect: 1 resident.
 *  3. the same with a get: exact bytes (it always copied after reconnecting).
 */
#include <signal.h>

#include "internal.h"
#include "lib/daemon_harness.h"

static struct kvt_store *s;
static size_t len;

/* The daemon stops answering; a get times out, leaving the connection down. */
static void cut(const struct kvt_key *k, uint8_t *back)
{
	kvtd_pause();
	struct kvt_result r;
	int rc = kvt_get_sync(s, k, 0, 0, back, len, &r);
	CHECKM(rc < 0 || r.cause < 0, "a get while the daemon is stopped: %d, cause %d", rc,
	       r.cause);
	kill(kvtd_pid, SIGCONT);
	usleep(2500 * 1000); /* past the reconnect backoff (the timeout), with room */
}

int main(void)
{
	char *dir = test_tmpdir("daemon_lookup_reconnect");
	char sock[100];
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	const char *extra[] = {"--set", "dram.bytes=16MiB", NULL};
	kvtd_start_test(sock, dir, extra);
	struct kvt_config *cf = test_config("dram,nvme", dir);
	test_set(cf, "store.daemon", kvtd_sock);
	test_set(cf, "store.daemon_timeout_ms", "1000"); /* its backoff too */
	s = test_open(cf);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	len = kvt_payload_bytes(g, g->chunk_tokens);
	uint8_t *buf = malloc(len), *back = malloc(len);
	struct kvt_key k = {{0}};
	k.bytes[0] = 0x77;
	test_fill(buf, len, 5);
	CHECK_RC(kvt_put_sync(s, &k, NULL, g->chunk_tokens, buf, len), 0);
	int8_t tier = -9;
	CHECK_EQ(kvt_lookup_sync(s, &k, 1, &tier), 1);

	/* 1. */
	cut(&k, back);
	tier = -9;
	int n = kvt_lookup_sync(s, &k, 1, &tier);
	printf("daemon_lookup_reconnect: first lookup after a reconnect: %d (tier %d)\n", n, tier);
	CHECKM(n == 1 && tier == 0, "first lookup after a reconnect: %d (tier %d), want 1 (0)", n,
	       tier);

	/* 2. */
	cut(&k, back);
	n = kvt_prefetch_sync(s, &k, 1, 0);
	printf("daemon_lookup_reconnect: first prefetch after a reconnect: %d\n", n);
	CHECKM(n == 1, "first prefetch after a reconnect: %d, want 1", n);

	/* 3. */
	cut(&k, back);
	memset(back, 0, len);
	struct kvt_result r;
	CHECK_RC(kvt_get_sync(s, &k, 0, 0, back, len, &r), 0);
	CHECK(test_check(back, len, 5));

	kvt_store_close(s);
	kvtd_stop();
	test_rmdir(dir);
	free(dir);
	free(buf);
	free(back);
	printf("daemon_lookup_reconnect: ok\n");
	return 0;
}
