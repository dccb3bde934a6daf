/*
 * device_store.c - the device layer through a real store (DRAM tier), on the emu backend:
 * TP=2 ranks gather their halves of a chunk straight into one DRAM slot, the object is
 * published only when both have written (a reader sees nothing before), kvt_get returns
 * the canonical payload byte for byte, and TP=1 / TP=4 ranks load it back into poisoned
 * blocks layer by layer. Also: a resident key is not copied again, a dependency holds the
 * gather back, a miss completes with -ENOENT. A store's close forgets its half-written
 * objects, and waits for its copies still running (a gather, a scatter) before it frees
 * it. With a MAC and encryption on, a gathered chunk reaches nvme protected and kvt_get
 * decrypts it; kvt_device_load is refused.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>


#include <unistd.h>

#include "../unit/device_common.h"
#include "engine.h" /* kvt__dev_store_partials */

#define POISON 0xA5
#define DSO_TEST "device_store" /* CHECK's messages start with it */
#include "lib/device_store_open.h"


/* Signals ev ms milliseconds after it starts; done is set first. */
struct late_signal {
	struct kvt_emu_event *ev;
	int ms;
	atomic_bool done;
};

static void *signal_later(void *arg)
{
	struct late_signal *l = arg;
	usleep((useconds_t)l->ms * 1000);
	atomic_store(&l->done, true);
	kvt_emu_event_signal(l->ev);
	return NULL;
}

int main(void)
{
	struct kvt_geometry g = dso_geometry(32);
	struct kvt_store *s = dso_open_store(&g, false, NULL);
	uint64_t seed = 2024;
	const uint32_t n = 50, bs = 16, nb = 10, nblk = 4;
	struct kvt_key key, parent = {{0}};
	tr_fill(&seed, key.bytes, sizeof(key.bytes));
	size_t plen = g.layers * kvt_layer_bytes(&g, n);
	uint8_t *logical = malloc(plen), *got = malloc(plen);
	tr_fill(&seed, logical, plen);

	/* TP=2 writers; rank 0 waits on an event. */
	struct tr_rank w[2];
	uint32_t ids[4][4];
	struct kvt_emu_event *ev;
	CHECK(kvt_emu_event_create(&ev) == 0);
	struct kvt_device_dep dep = {KVT_DEP_EMU_EVENT, ev};
	struct tr_done dw[2] = {{0}};
	struct kvt_device_op *op;
	for (int i = 0; i < 2; i++) {
		CHECK(tr_rank_open(&w[i], NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 4 * i, 4 * i + 4,
				   0, NULL) == 0);
		tr_shuffled_ids(&seed, nb, ids[i], nblk);
		tr_rank_load_logical(&w[i], logical, n, ids[i]);
	}
	CHECK(kvt_device_store(w[1].dev, s, &key, &parent, n, ids[1], nblk, NULL, tr_on_done, &dw[1],
			       NULL) == 0);
	poll_until(s, &dw[1], 1);
	CHECK(dw[1].res.status == 4); /* 4 heads still missing */
	/* Half an object is never visible. */
	CHECK(kvt_lookup_sync(s, &key, 1, NULL) == 0);
	CHECK(kvt_device_store(w[0].dev, s, &key, &parent, n, ids[0], nblk, &dep, tr_on_done, &dw[0],
			       &op) == 0);
	usleep(50000);
	CHECK(kvt_device_op_layers_done(op) == 0);
	CHECK(dw[0].calls == 0);
	kvt_emu_event_signal(ev);
	CHECK(kvt_device_op_wait(op, 10000) == 0); /* published: status 0 missing heads */
	kvt_device_op_free(op);
	poll_until(s, &dw[0], 1);
	CHECK(dw[0].res.status == 0);
	CHECK(kvt_lookup_sync(s, &key, 1, NULL) == 1);

	/* The stored object is canonical: kvt_get returns the dense payload. */
	struct kvt_result gr;
	CHECK(kvt_get_sync(s, &key, 0, 0, got, plen, &gr) == 0);
	CHECK(gr.n_tokens == n);
	CHECK(memcmp(got, logical, plen) == 0);

	/* Storing a resident key copies nothing and completes with 0. */
	struct tr_done again = {0};
	CHECK(kvt_device_store(w[0].dev, s, &key, &parent, n, ids[0], nblk, NULL, tr_on_done, &again,
			       NULL) == 0);
	poll_until(s, &again, 1);
	CHECK(again.res.status == 0 && again.res.bytes == 0);
	for (int i = 0; i < 2; i++)
		tr_rank_close(&w[i]);

	/* TP=1 and TP=4 readers load it layer by layer into poisoned blocks. */
	const uint32_t split1[2] = {0, 8}, split4[5] = {0, 2, 4, 6, 8};
	const uint32_t *splits[2] = {split1, split4};
	uint32_t counts[2] = {1, 4};
	for (int k = 0; k < 2; k++) {
		struct tr_rank r[4];
		struct tr_done dl[4] = {{0}};
		struct kvt_device_op *lop[4];
		for (uint32_t i = 0; i < counts[k]; i++) {
			CHECK(tr_rank_open(&r[i], NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb,
					   splits[k][i], splits[k][i + 1], POISON, NULL) == 0);
			tr_shuffled_ids(&seed, nb, ids[i], nblk);
			CHECK(kvt_device_load(r[i].dev, s, &key, ids[i], nblk, NULL, tr_on_done,
					      &dl[i], &lop[i]) == 0);
		}
		for (uint32_t i = 0; i < counts[k]; i++) {
			for (uint32_t l = 0; l < g.layers; l++) {
				CHECK(kvt_device_op_wait_layer(lop[i], l, 10000) == 0);
				CHECK(tr_rank_check_layers(&r[i], logical, n, ids[i], POISON, l,
							   l + 1) == 0);
			}
			CHECK(kvt_device_op_wait(lop[i], 10000) == 0);
			kvt_device_op_free(lop[i]);
			poll_until(s, &dl[i], 1);
			CHECK(dl[i].res.status == 0 && dl[i].res.n_tokens == n);
			CHECK(tr_rank_check(&r[i], logical, n, ids[i], POISON) == 0);
			tr_rank_close(&r[i]);
		}
	}

	/* A miss. */
	struct kvt_key missing = key;
	missing.bytes[0] ^= 1;
	struct tr_rank r;
	struct tr_done dm = {0};
	CHECK(tr_rank_open(&r, NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 0, 8, POISON, NULL) == 0);
	CHECK(kvt_device_load(r.dev, s, &missing, ids[0], nblk, NULL, tr_on_done, &dm, NULL) == 0);
	poll_until(s, &dm, 1);
	CHECK(dm.res.status == -ENOENT);
	CHECK(tr_rank_check(&r, logical, 0, ids[0], POISON) == 0);
	tr_rank_close(&r);

	/* A half-written object whose other rank never comes does not outlive its store's
	 * close: the process-wide table used to keep it, so 60 s later a kvt_device_store on
	 * any store expired it on the freed store (ASan: heap-use-after-free), or a new store
	 * given the same address found it and published a chunk it never held. */
	kvt_store_close(s);
	s = dso_open_store(&g, false, NULL);
	struct tr_rank half;
	struct tr_done dh = {0};
	CHECK(tr_rank_open(&half, NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 4, 8, 0, NULL) == 0);
	tr_shuffled_ids(&seed, nb, ids[1], nblk);
	tr_rank_load_logical(&half, logical, n, ids[1]);
	CHECK(kvt_device_store(half.dev, s, &key, &parent, n, ids[1], nblk, NULL, tr_on_done, &dh,
			       NULL) == 0);
	poll_until(s, &dh, 1);
	CHECK(dh.res.status == 4); /* rank 0's 4 heads missing */
	CHECK(kvt__dev_store_partials(s) == 1);
	const struct kvt_store *closed = s;
	kvt_store_close(s);
	printf("  a half-written TP object after its store's close: %d left in the table\n",
	       kvt__dev_store_partials(closed));
	CHECK(kvt__dev_store_partials(closed) == 0); /* compared by address, not read */
	tr_rank_close(&half);

	/* Copies still running when their store is closed: the close waits for them. It used
	 * to go on (the entry of the half-written object was left, its rank's op holding it)
	 * and free the store under them: the late gather then copied into the unmapped DRAM
	 * pool (SIGSEGV), queued its callback on the freed store and left its entry behind
	 * keyed by the freed pointer; a load's scatter read the freed pool and released its
	 * slot into the freed store. Both wait here on an event another thread signals 300 ms
	 * after the close began. */
	s = dso_open_store(&g, false, NULL);
	struct kvt_key key2 = key;
	key2.bytes[1] ^= 1;
	struct tr_rank full, lr;
	struct tr_done df = {0}, dh2 = {0}, dl2 = {0};
	CHECK(tr_rank_open(&full, NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 0, 8, 0, NULL) == 0);
	tr_shuffled_ids(&seed, nb, ids[0], nblk);
	tr_rank_load_logical(&full, logical, n, ids[0]);
	CHECK(kvt_device_store(full.dev, s, &key2, &parent, n, ids[0], nblk, NULL, tr_on_done, &df,
			       NULL) == 0);
	poll_until(s, &df, 1);
	CHECK(df.res.status == 0); /* key2 resident: the load below scatters it */
	CHECK(tr_rank_open(&half, NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 4, 8, 0, NULL) == 0);
	CHECK(tr_rank_open(&lr, NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 0, 8, POISON, NULL) == 0);
	tr_shuffled_ids(&seed, nb, ids[1], nblk);
	tr_rank_load_logical(&half, logical, n, ids[1]);
	tr_shuffled_ids(&seed, nb, ids[2], nblk);
	struct late_signal late = {.ev = ev, .ms = 300};
	kvt_emu_event_reset(ev);
	CHECK(kvt_device_store(half.dev, s, &key, &parent, n, ids[1], nblk, &dep, tr_on_done, &dh2,
			       NULL) == 0);
	CHECK(kvt_device_load(lr.dev, s, &key2, ids[2], nblk, &dep, tr_on_done, &dl2, NULL) == 0);
	usleep(50000);
	CHECK(dh2.calls == 0 && dl2.calls == 0);
	pthread_t signaller;
	CHECK(pthread_create(&signaller, NULL, signal_later, &late) == 0);
	closed = s;
	kvt_store_close(s);
	bool waited = atomic_load(&late.done);
	printf("  copies in flight at their store's close: close %s for them, %d left in the "
	       "table\n", waited ? "waited" : "did not wait", kvt__dev_store_partials(closed));
	CHECK(kvt__dev_store_partials(closed) == 0);
	CHECK(waited);
	/* their callbacks were delivered by the close */
	CHECK(dh2.calls == 1 && dh2.res.status == 4);
	CHECK(dl2.calls == 1 && dl2.res.status == 0 && dl2.res.n_tokens == n);
	CHECK(tr_rank_check(&lr, logical, n, ids[2], POISON) == 0);
	CHECK(pthread_join(signaller, NULL) == 0);
	/* A new store (often at the freed one's address) finds no half-written object: rank 0
	 * starts a fresh one, 4 heads missing (a stale entry would have it publish). */
	s = dso_open_store(&g, false, NULL);
	CHECK(kvt__dev_store_partials(s) == 0);
	struct tr_rank r0;
	struct tr_done d0 = {0};
	CHECK(tr_rank_open(&r0, NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 0, 4, 0, NULL) == 0);
	tr_shuffled_ids(&seed, nb, ids[3], nblk);
	tr_rank_load_logical(&r0, logical, n, ids[3]);
	CHECK(kvt_device_store(r0.dev, s, &key, &parent, n, ids[3], nblk, NULL, tr_on_done, &d0,
			       NULL) == 0);
	poll_until(s, &d0, 1);
	CHECK(d0.res.status == 4);
	CHECK(kvt_lookup_sync(s, &key, 1, NULL) == 0);
	kvt_store_close(s);
	tr_rank_close(&r0);
	tr_rank_close(&lr);
	tr_rank_close(&half);
	tr_rank_close(&full);

	/* With a MAC and encryption: a gathered chunk is sealed, MACed and encrypted in its
	 * slot, kvt_get decrypts it; a load (which copies slots as they are) is refused. */
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/kvt-device-protect-XXXXXX",
		 getenv("KVT_TEST_DIR") ? getenv("KVT_TEST_DIR") : "/var/tmp");
	CHECK(mkdtemp(dir) != NULL);
	s = dso_open_store(&g, true, dir);
	struct tr_rank wp;
	struct tr_done dp = {0};
	CHECK(tr_rank_open(&wp, NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 0, 8, 0, NULL) == 0);
	tr_shuffled_ids(&seed, nb, ids[0], nblk);
	tr_rank_load_logical(&wp, logical, n, ids[0]);
	CHECK(kvt_device_store(wp.dev, s, &key, NULL, n, ids[0], nblk, NULL, tr_on_done, &dp, NULL) ==
	      0);
	poll_until(s, &dp, 1);
	CHECK(dp.res.status == 0);
	memset(got, 0, plen);
	CHECK(kvt_get_sync(s, &key, 0, 0, got, plen, &gr) == 0);
	CHECK(memcmp(got, logical, plen) == 0);
	struct tr_done dn = {0};
	CHECK(kvt_device_load(wp.dev, s, &key, ids[0], nblk, NULL, tr_on_done, &dn, NULL) == -ENOTSUP);
	tr_rank_close(&wp);
	CHECK(kvt_flush_sync(s) == 0);
	kvt_store_close(s);
	/* what reached nvme is protected: a store without the keys finds nothing to serve */
	s = dso_open_store(&g, false, dir);
	CHECK(kvt_lookup_sync(s, &key, 1, NULL) == 1);
	CHECK(kvt_get_sync(s, &key, 0, 0, got, plen, &gr) == -ENOENT);
	kvt_store_close(s);
	s = dso_open_store(&g, true, dir);
	memset(got, 0, plen);
	CHECK(kvt_get_sync(s, &key, 0, 0, got, plen, &gr) == 0);
	CHECK(memcmp(got, logical, plen) == 0);
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0);

	kvt_emu_event_destroy(ev);
	kvt_store_close(s);
	free(logical);
	free(got);
	printf("device_store: ok\n");
	return 0;
}
