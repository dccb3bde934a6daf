/* kvt-test-labels: server */
/*
 * daemon_remove_order.c - kvt_remove's promise (include/kvtier.h: a get, lookup or
 * prefetch issued after kvt_remove returned misses; a put issued after it wins) for a
 * store attached to kvtierd. Why a test of its own: in client mode kvt_remove only queues
 * the request for the client's worker thread, while a *_sync call runs at once on the
 * caller's thread, so a get_sync or lookup_sync issued right after kvt_remove returned
 * overtook the queued remove and found the key, and a put_sync issued after it could be
 * deleted by the remove running later (old code, one run: 'get_sync hit 31/50, lookup_sync
 * found 19/50; put_sync after kvt_remove then get_sync: hit 12/50'). Now a *_sync call
 * first waits (bounded by store.daemon_timeout_ms) until the removes submitted before it
 * have been answered by the daemon. Flush, remove and clear wait for everything submitted
 * before them: a put queued before kvt_flush_sync is durable (found) when it returns, and
 * one queued before kvt_remove_sync is removed (old code: flush returned before queued
 * puts reached the daemon, and a remove_sync overtook them). The real daemon binary.
 * Exit 0 pass, 1 fail.
 */
#include <signal.h>

#include "internal.h"
#include "lib/daemon_harness.h"

int main(void)
{
	char *dir = test_tmpdir("daemon_remove_order");
	char sock[100];
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	const char *extra[] = {"--set", "dram.bytes=16MiB", NULL};
	kvtd_start_test(sock, dir, extra);
	struct kvt_store *s = kvtd_client_store(dir);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t len = kvt_payload_bytes(g, g->chunk_tokens);
	uint8_t *buf = malloc(len), *back = malloc(len);
	CHECK(buf && back);
	int hits = 0, found = 0, kept = 0, rounds = 50;
	for (int i = 0; i < rounds; i++) {
		struct kvt_key k = {{0}};
		k.bytes[0] = 0x11;
		k.bytes[1] = (uint8_t)i;
		test_fill(buf, len, 100 + i);
		CHECK_RC(kvt_put_sync(s, &k, NULL, g->chunk_tokens, buf, len), 0);
		struct test_box r = {0};
		CHECK_RC(kvt_remove(s, &k, test_box_cb, &r), 0);
		/* issued after kvt_remove returned: misses */
		hits += kvt_get_sync(s, &k, 0, 0, back, len, NULL) == 0;
		found += kvt_lookup_sync(s, &k, 1, NULL) > 0;
		while (!r.done)
			kvt_poll(s, 20);
		/* a put issued after kvt_remove returned wins */
		struct test_box r2 = {0};
		CHECK_RC(kvt_remove(s, &k, test_box_cb, &r2), 0);
		CHECK_RC(kvt_put_sync(s, &k, NULL, g->chunk_tokens, buf, len), 0);
		while (!r2.done)
			kvt_poll(s, 20);
		memset(back, 0, len);
		if (kvt_get_sync(s, &k, 0, 0, back, len, NULL) == 0 && test_check(back, len, 100 + i))
			kept++;
	}
	printf("client store, after kvt_remove returned: get_sync hit %d/%d, lookup_sync found "
	       "%d/%d; put_sync after kvt_remove then get_sync: hit %d/%d\n",
	       hits, rounds, found, rounds, kept, rounds);
	CHECK_EQ(hits, 0);
	CHECK_EQ(found, 0);
	CHECK_EQ(kept, rounds);

	/* flush, remove and clear wait for everything submitted before them: puts queued
	 * (not polled), then kvt_flush_sync; a lookup then finds every one (flush promises
	 * everything submitted before it). Then puts queued and kvt_remove_sync of each: none
	 * is left (a remove issued after a put removes it). */
	enum { N = 64 };
	struct kvt_key ks[N];
	struct test_box pb[N];
	memset(ks, 0, sizeof(ks));
	memset(pb, 0, sizeof(pb));
	for (int i = 0; i < N; i++) {
		ks[i].bytes[0] = 0x22;
		ks[i].bytes[1] = (uint8_t)i;
		CHECK_RC(kvt_put(s, &ks[i], NULL, g->chunk_tokens, buf, len, test_box_cb, &pb[i]), 0);
	}
	CHECK_RC(kvt_flush_sync(s), 0);
	int8_t tiers[N];
	int present = kvt_lookup_sync(s, ks, N, tiers);
	for (int i = 0; i < N; i++)
		while (!pb[i].done)
			kvt_poll(s, 20);
	memset(pb, 0, sizeof(pb));
	for (int i = 0; i < N; i++) {
		ks[i].bytes[0] = 0x33;
		CHECK_RC(kvt_put(s, &ks[i], NULL, g->chunk_tokens, buf, len, test_box_cb, &pb[i]), 0);
	}
	for (int i = 0; i < N; i++)
		kvt_remove_sync(s, &ks[i]);
	int left = 0;
	for (int i = 0; i < N; i++) {
		while (!pb[i].done)
			kvt_poll(s, 20);
		left += kvt_get_sync(s, &ks[i], 0, 0, back, len, NULL) == 0;
	}
	printf("puts queued then kvt_flush_sync: %d/%d found after it; puts queued then "
	       "kvt_remove_sync of each: %d/%d left\n", present, N, left, N);
	CHECK_EQ(present, N);
	CHECK_EQ(left, 0);
	kvt_store_close(s);
	kvtd_stop();
	test_rmdir(dir);
	free(dir);
	free(buf);
	free(back);
	printf("daemon_remove_order: ok\n");
	return 0;
}
