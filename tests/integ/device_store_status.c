/*
 * device_store_status.c - what kvt_device_store reports, on the emu backend with a DRAM
 * store: bad block ids are refused before one is read; an op with nothing to copy (the key
 * is resident, or a rank replicating heads another rank writes) has every layer done, so
 * kvt_device_op_wait_layer answers 0, not -EIO; and a publish whose protection fails
 * (RAND_bytes, interposed here, fails while `rand_fail` is set: no nonce for the
 * encryption) reports that error to the rank, not 0 (published). A load's dependency is
 * the one its call saw: a reset of the event after the call does not hold the scatter the
 * load submits later from another thread; a kind the backend cannot honour is -EINVAL from
 * the load call.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "../unit/device_common.h"

#define DSO_TEST "device_store_status" /* CHECK's messages start with it */
#include "lib/device_store_open.h"

/* OpenSSL's RAND_bytes, failing on demand (the library's calls bind to this one). */
static volatile int rand_fail;
int RAND_bytes(unsigned char *buf, int num);
int RAND_bytes(unsigned char *buf, int num)
{
	static int (*real)(unsigned char *, int);
	if (rand_fail)
		return 0;
	if (!real)
		real = (int (*)(unsigned char *, int))dlsym(RTLD_NEXT, "RAND_bytes");
	return real ? real(buf, num) : 0;
}

int main(void)
{
	struct kvt_geometry g = dso_geometry(16);
	const uint32_t n = 64, bs = 16, nb = 8, nblk = 4;
	uint64_t seed = 7;
	struct kvt_store *s = dso_open_store(&g, false, NULL);
	struct kvt_key key, parent = {{0}};
	tr_fill(&seed, key.bytes, sizeof(key.bytes));
	uint32_t *ids = malloc(nblk * sizeof(uint32_t)); /* on the heap: ASan sees reads past it */
	for (uint32_t i = 0; i < nblk; i++)
		ids[i] = i;
	struct tr_rank all;
	CHECK(tr_rank_open(&all, NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 0, 8, 0, &seed) == 0);

	/* 1. Bad block ids: -EINVAL, no op, no callback, nothing reserved. */
	struct tr_done dbad = {0};
	struct kvt_device_op *op = NULL;
	CHECK(kvt_device_store(all.dev, s, &key, &parent, n, NULL, nblk, NULL, tr_on_done, &dbad,
			       &op) == -EINVAL);
	const uint32_t bad[] = {1000, 64, 1u << 28, UINT32_MAX, 0};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(kvt_device_store(all.dev, s, &key, &parent, n, ids, bad[i], NULL, tr_on_done,
				       &dbad, &op) == -EINVAL);
	CHECK(kvt_device_store(all.dev, s, &key, &parent, 0, ids, nblk, NULL, tr_on_done, &dbad,
			       &op) == -EINVAL);
	CHECK(op == NULL);
	kvt_poll(s, 10);
	CHECK(dbad.calls == 0);
	CHECK(kvt_lookup_sync(s, &key, 1, NULL) == 0);

	/* 2a. Stored, then stored again: the second op copies nothing, and has every layer. */
	struct tr_done d1 = {0}, d2 = {0};
	CHECK(kvt_device_store(all.dev, s, &key, &parent, n, ids, nblk, NULL, tr_on_done, &d1,
			       &op) == 0);
	CHECK(kvt_device_op_wait(op, 10000) == 0);
	CHECK(kvt_device_op_wait_layer(op, 0, 10000) == 0);
	kvt_device_op_free(op);
	poll_until(s, &d1, 1);
	CHECK(d1.res.status == 0 && d1.res.bytes > 0);
	CHECK(kvt_device_store(all.dev, s, &key, &parent, n, ids, nblk, NULL, tr_on_done, &d2,
			       &op) == 0);
	CHECK(kvt_device_op_wait(op, 10000) == 0);
	for (uint32_t l = 0; l < g.layers; l++) {
		int wl = kvt_device_op_wait_layer(op, l, 10000);
		if (wl)
			fprintf(stderr, "resident key: wait_layer(%u) = %d\n", l, wl);
		CHECK(wl == 0);
	}
	CHECK(kvt_device_op_layers_done(op) == g.layers);
	kvt_device_op_free(op);
	poll_until(s, &d2, 1);
	CHECK(d2.res.status == 0 && d2.res.bytes == 0);
	tr_rank_close(&all);

	/* 2b. TP > kv_heads: ranks a and b both hold heads [0, 4); a writes them, b has none
	 * left to claim and completes at once with 4 heads missing, every layer done. */
	struct kvt_key key2 = key;
	key2.bytes[0] ^= 1;
	struct tr_rank a, b, c;
	CHECK(tr_rank_open(&a, NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 0, 4, 0, &seed) == 0);
	CHECK(tr_rank_open(&b, NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 0, 4, 0, &seed) == 0);
	CHECK(tr_rank_open(&c, NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 4, 8, 0, &seed) == 0);
	struct tr_done da = {0}, db = {0}, dc = {0};
	CHECK(kvt_device_store(a.dev, s, &key2, &parent, n, ids, nblk, NULL, tr_on_done, &da,
			       NULL) == 0);
	poll_until(s, &da, 1);
	CHECK(da.res.status == 4);
	CHECK(kvt_device_store(b.dev, s, &key2, &parent, n, ids, nblk, NULL, tr_on_done, &db,
			       &op) == 0);
	CHECK(kvt_device_op_wait(op, 10000) == 4);
	int wl = kvt_device_op_wait_layer(op, g.layers - 1, 10000);
	if (wl)
		fprintf(stderr, "replicated heads: wait_layer = %d\n", wl);
	CHECK(wl == 0);
	CHECK(kvt_device_op_layers_done(op) == g.layers);
	kvt_device_op_free(op);
	poll_until(s, &db, 1);
	CHECK(db.res.status == 4 && db.res.bytes == 0);
	CHECK(kvt_device_store(c.dev, s, &key2, &parent, n, ids, nblk, NULL, tr_on_done, &dc,
			       NULL) == 0);
	poll_until(s, &dc, 1);
	CHECK(dc.res.status == 0);
	CHECK(kvt_lookup_sync(s, &key2, 1, NULL) == 1);
	tr_rank_close(&a);
	tr_rank_close(&b);
	tr_rank_close(&c);

	/* 3. A load's dependency is the one its call saw. A load submits its scatter later, on
	 * another thread, once the chunk is acquired (even a DRAM hit is deferred); what the
	 * engine starts on its event after the call - here a reset, its next step - must not
	 * hold the copy. The scatter queue is kept busy past the reset by an earlier scatter
	 * (on `busy`). The old code took the event when the scatter started, and the load
	 * waited for the engine's next signal. A kind the backend cannot honour is refused at
	 * the call (it used to come back through the callback, after the acquire). */
	struct tr_rank r;
	struct kvt_emu_event *busy, *ev;
	struct tr_done dl = {0}, dx = {0};
	size_t olen = kvt_object_bytes(&g, n);
	uint8_t *obj = malloc(olen);
	CHECK(obj != NULL);
	memset(obj, 0, olen);
	CHECK(tr_rank_open(&r, NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 0, 8, 0xA5, NULL) == 0);
	CHECK(kvt_emu_event_create(&busy) == 0 && kvt_emu_event_create(&ev) == 0);
	struct kvt_device_dep dep_busy = {KVT_DEP_EMU_EVENT, busy}, dep = {KVT_DEP_EMU_EVENT, ev};
	struct kvt_device_dep dep_cuda = {KVT_DEP_CUDA_EVENT, ev};
	struct kvt_device_op *hold, *lop;
	CHECK(kvt_device_load(r.dev, s, &key, ids, nblk, &dep_cuda, tr_on_done, &dx, &lop) ==
	      -EINVAL);
	CHECK(kvt_device_scatter(r.dev, obj, olen, n, ids, nblk, &dep_busy, &hold) == 0);
	kvt_emu_event_signal(ev); /* the engine is done with the blocks */
	CHECK(kvt_device_load(r.dev, s, &key, ids, nblk, &dep, tr_on_done, &dl, &lop) == 0);
	kvt_emu_event_reset(ev); /* its next step */
	kvt_emu_event_signal(busy);
	CHECK(kvt_device_op_wait(hold, 10000) == 0);
	int lw = kvt_device_op_wait(lop, 2000);
	printf("  a load whose dependency was complete at the call, the event reset after it: "
	       "%s\n",
	       lw == 0 ? "ran" : "waited for the engine's next signal");
	kvt_emu_event_signal(ev);
	CHECK(kvt_device_op_wait(lop, 10000) == 0);
	poll_until(s, &dl, 1);
	CHECK(lw == 0);
	CHECK(dl.res.status == 0 && dl.res.n_tokens == n);
	kvt_poll(s, 10);
	CHECK(dx.calls == 0);
	kvt_device_op_free(hold);
	kvt_device_op_free(lop);
	tr_rank_close(&r);
	kvt_emu_event_destroy(busy);
	kvt_emu_event_destroy(ev);
	free(obj);
	kvt_store_close(s);

	/* 4. Encryption needs a nonce from RAND_bytes; without one the publish fails, and the
	 * rank whose copy completed the object is told (it used to get 0: published). */
	s = dso_open_store(&g, true, NULL);
	struct tr_rank w;
	struct tr_done dp = {0};
	CHECK(tr_rank_open(&w, NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 0, 8, 0, &seed) == 0);
	rand_fail = 1;
	CHECK(kvt_device_store(w.dev, s, &key, &parent, n, ids, nblk, NULL, tr_on_done, &dp, &op) ==
	      0);
	int st = kvt_device_op_wait(op, 10000);
	kvt_device_op_free(op);
	poll_until(s, &dp, 1);
	rand_fail = 0;
	printf("  a publish whose encryption fails: op %d, callback %d\n", st, dp.res.status);
	CHECK(st < 0 && dp.res.status == st);
	CHECK(kvt_lookup_sync(s, &key, 1, NULL) == 0); /* nothing published */
	/* and with a nonce it goes through */
	struct tr_done dq = {0};
	CHECK(kvt_device_store(w.dev, s, &key, &parent, n, ids, nblk, NULL, tr_on_done, &dq,
			       NULL) == 0);
	poll_until(s, &dq, 1);
	CHECK(dq.res.status == 0);
	CHECK(kvt_lookup_sync(s, &key, 1, NULL) == 1);
	tr_rank_close(&w);
	kvt_store_close(s);
	free(ids);
	printf("device_store_status: ok\n");
	return 0;
}
