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
 * puts reached the daemon, and a remove_sync overtook them). The device layer's calls run
 * on the caller's thread too, and wait the same way: a kvt_device_load issued right after
 * kvt_remove returned misses (its GET_PIN waits for the remove), and a kvt_device_store
 * issued after it wins (its TP_RESERVE waits: one that overtook the remove found the key
 * still stored, copied nothing, and the remove then deleted it; each wait taken out in
 * turn, one run: 'kvt_device_load hit 49/50', 'kvt_device_store then get_sync: hit
 * 0/50'). A kvt_remove_sync while a device store's copy is still held (behind an emu event)
 * holds: the daemon drops the late publish, and a store issued after the remove starts a
 * new object (old code: the removed key was served again, and the later store joined the
 * removed object and copied nothing). The real daemon binary, the emu device backend.
 * Exit 0 pass, 1 fail.
 */
#include <signal.h>

#include "daemon_client.h"
#include "daemon_proto.h"
#include "internal.h"
#include "../unit/device_common.h"
#include "lib/daemon_harness.h"

/* Queue kvt_remove(k) behind `ahead` queued lookups (the worker is busy when the next call
 * comes: without its wait, that call overtakes the remove); the remove's box. */
static void remove_behind(struct kvt_store *s, const struct kvt_key *k, struct test_box *r,
			  struct test_box *pre, int ahead)
{
	memset(pre, 0, sizeof(*pre) * (size_t)ahead);
	for (int j = 0; j < ahead; j++)
		CHECK_RC(kvt_lookup(s, k, 1, NULL, test_box_cb, &pre[j]), 0);
	memset(r, 0, sizeof(*r));
	CHECK_RC(kvt_remove(s, k, test_box_cb, r), 0);
}

static void poll_done(struct kvt_store *s, const int *done)
{
	uint64_t t0 = test_now_ns();
	while (!*done) {
		CHECKM(test_ms_since(t0) < 10000, "a call never completed");
		kvt_poll(s, 20);
	}
}

/* The device path after kvt_remove: a device load of the removed chunk misses; a device
 * store of it (TP=1: every head) stores it again, the remove queued before it
 * notwithstanding. */
static void device_after_remove(struct kvt_store *s, uint8_t *buf, uint8_t *back, size_t len)
{
	enum { AHEAD = 4 };
	const struct kvt_geometry *g = kvt_store_geometry(s);
	const uint8_t POISON = 0xA5;
	struct tr_rank r;
	uint32_t ids[1] = {1};
	CHECK_RC(tr_rank_open(&r, NULL, g, KVT_LAYOUT_FLASH_ATTN, g->chunk_tokens, 4, 0,
			      g->kv_heads, POISON, NULL),
		 0);
	struct test_box pre[AHEAD];
	int loaded = 0, kept = 0, rounds = 50;
	for (int i = 0; i < rounds; i++) {
		struct kvt_key k = {{0}};
		k.bytes[0] = 0x44;
		k.bytes[1] = (uint8_t)i;
		test_fill(buf, len, 300 + i);
		CHECK_RC(kvt_put_sync(s, &k, NULL, g->chunk_tokens, buf, len), 0);
		/* a load issued after kvt_remove returned misses */
		struct test_box rm;
		remove_behind(s, &k, &rm, pre, AHEAD);
		struct tr_done d = {0};
		CHECK_RC(kvt_device_load(r.dev, s, &k, ids, 1, NULL, tr_on_done, &d, NULL), 0);
		poll_done(s, &d.calls);
		CHECKM(d.res.status == 0 || d.res.status == -ENOENT, "load %d: status %d", i,
		       d.res.status);
		loaded += d.res.status == 0;
		poll_done(s, &rm.done);
		CHECKM(rm.res.status > 0, "remove %d: status %d", i, rm.res.status);
		for (int j = 0; j < AHEAD; j++)
			poll_done(s, &pre[j].done);
		/* a store issued after kvt_remove returned wins: put back first, so a reservation
		 * that overtook the remove would find it stored and copy nothing */
		CHECK_RC(kvt_put_sync(s, &k, NULL, g->chunk_tokens, buf, len), 0);
		test_fill(back, len, 400 + i);
		tr_rank_load_logical(&r, back, g->chunk_tokens, ids);
		remove_behind(s, &k, &rm, pre, AHEAD);
		struct tr_done w = {0};
		CHECK_RC(kvt_device_store(r.dev, s, &k, NULL, g->chunk_tokens, ids, 1, NULL,
					  tr_on_done, &w, NULL),
			 0);
		poll_done(s, &w.calls);
		CHECK_RC(w.res.status, 0);
		poll_done(s, &rm.done);
		for (int j = 0; j < AHEAD; j++)
			poll_done(s, &pre[j].done);
		memset(back, 0, len);
		if (kvt_get_sync(s, &k, 0, 0, back, len, NULL) == 0 && test_check(back, len, 400 + i))
			kept++;
	}
	tr_rank_close(&r);
	printf("client store, after kvt_remove returned: kvt_device_load hit %d/%d; "
	       "kvt_device_store then get_sync: hit %d/%d\n", loaded, rounds, kept, rounds);
	CHECK_EQ(loaded, 0);
	CHECK_EQ(kept, rounds);
}

/* The daemon's TP objects published and the store's puts. */
static void daemon_counts(struct kvt_store *s, uint64_t *published, uint64_t *puts)
{
	struct kvtd_status st;
	struct kvt_stats ks;
	CHECK_RC(kvt__client_status(kvt__store_client(s), &st), 0);
	CHECK_RC(kvt_stats(s, &ks), 0);
	*published = st.tp_published;
	*puts = ks.puts;
}

/* A device store whose copy is still held (behind an emu event) when kvt_remove_sync of
 * its key returns: the daemon's publish, when the copy is done, is dropped (the old code
 * published it: the removed key was served again). A store issued after the remove, while
 * the old copy is still held, starts a new object, which is what is served; the old copy
 * is then told -ECANCELED. */
static void device_store_overtaken(struct kvt_store *s, uint8_t *buf, uint8_t *back, size_t len)
{
	const struct kvt_geometry *g = kvt_store_geometry(s);
	struct tr_rank old, neu;
	uint32_t ids[1] = {1};
	struct kvt_emu_event *ev;
	CHECK_RC(kvt_emu_event_create(&ev), 0);
	struct kvt_device_dep dep = {KVT_DEP_EMU_EVENT, ev};
	CHECK_RC(tr_rank_open(&old, NULL, g, KVT_LAYOUT_FLASH_ATTN, g->chunk_tokens, 4, 0,
			      g->kv_heads, 0, NULL),
		 0);
	CHECK_RC(tr_rank_open(&neu, NULL, g, KVT_LAYOUT_FLASH_ATTN, g->chunk_tokens, 4, 0,
			      g->kv_heads, 0, NULL),
		 0);
	test_fill(buf, len, 500);
	tr_rank_load_logical(&old, buf, g->chunk_tokens, ids);
	test_fill(buf, len, 501);
	tr_rank_load_logical(&neu, buf, g->chunk_tokens, ids);
	struct kvt_key k = {{0}};
	k.bytes[0] = 0x55;
	int served[2], kept[2], old_rc[2], new_rc = 0;
	/* What the daemon counts: a publish the remove dropped stored nothing (until
	 * 2026-12-04 it counted as a TP object published and as a put). */
	uint64_t published[3], puts[3];
	for (int i = 0; i < 2; i++) { /* 0: nothing after the remove; 1: a store after it */
		daemon_counts(s, &published[i], &puts[i]);
		k.bytes[1] = (uint8_t)i;
		struct tr_done d = {0}, dn = {0};
		struct kvt_device_op *op;
		kvt_emu_event_reset(ev);
		CHECK_RC(kvt_device_store(old.dev, s, &k, NULL, g->chunk_tokens, ids, 1, &dep,
					  tr_on_done, &d, &op),
			 0);
		CHECK(kvt_remove_sync(s, &k) >= 0);
		CHECK_EQ(kvt_lookup_sync(s, &k, 1, NULL), 0);
		if (i == 1) {
			CHECK_RC(kvt_device_store(neu.dev, s, &k, NULL, g->chunk_tokens, ids, 1, NULL,
						  tr_on_done, &dn, NULL),
				 0);
			poll_done(s, &dn.calls);
			new_rc = dn.res.status;
		}
		kvt_emu_event_signal(ev);
		old_rc[i] = kvt_device_op_wait(op, 10000);
		kvt_device_op_free(op);
		poll_done(s, &d.calls);
		memset(back, 0, len);
		served[i] = kvt_get_sync(s, &k, 0, 0, back, len, NULL) == 0;
		kept[i] = served[i] && test_check(back, len, 501);
	}
	daemon_counts(s, &published[2], &puts[2]);
	printf("client store, kvt_remove_sync while a device store's copy was held: after the "
	       "copy, %s (status %d); with a store after the remove (status %d): %s (old copy's "
	       "status %d)\n",
	       served[0] ? "SERVED AGAIN" : "a miss", old_rc[0], new_rc,
	       kept[1] ? "the new store served" : "NOT THE NEW STORE", old_rc[1]);
	CHECK_EQ(served[0], 0);
	CHECK_RC(old_rc[0], 0);
	CHECK_RC(new_rc, 0);
	CHECK_EQ(kept[1], 1);
	CHECK_RC(old_rc[1], -ECANCELED);
	printf("daemon's counts: round 0 (publish dropped): +%llu TP objects published, +%llu "
	       "puts; round 1 (the new store): +%llu, +%llu\n",
	       (unsigned long long)(published[1] - published[0]),
	       (unsigned long long)(puts[1] - puts[0]),
	       (unsigned long long)(published[2] - published[1]),
	       (unsigned long long)(puts[2] - puts[1]));
	CHECK_EQ(published[1] - published[0], 0);
	CHECK_EQ(puts[1] - puts[0], 0);
	CHECK_EQ(published[2] - published[1], 1);
	CHECK_EQ(puts[2] - puts[1], 1);
	tr_rank_close(&old);
	tr_rank_close(&neu);
	kvt_emu_event_destroy(ev);
}

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

	device_after_remove(s, buf, back, len);
	device_store_overtaken(s, buf, back, len);
	kvt_store_close(s);
	kvtd_stop();
	test_rmdir(dir);
	free(dir);
	free(buf);
	free(back);
	printf("daemon_remove_order: ok\n");
	return 0;
}
