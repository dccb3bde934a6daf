/*
 * device_store_remove.c - kvt_remove against a kvt_device_store still copying, on the emu
 * backend. kvt_device_store returns once the gather is queued; the object is published
 * later, when the copy (and so the engine's dependency) is complete. A remove of the key in
 * between must hold: once kvt_remove has returned, no read returns the bytes of a store
 * issued before it - not while the copy waits, not after it completed (the late publish
 * is dropped), and nothing of it reaches a deeper tier. A put, or a device store, of the
 * key issued after the remove lands, and is what reads return. The copy is held back by an
 * emu event as its dependency (signalled by the test), so the order is exact, not timed.
 * The old code published the late copy over the remove: the key came back.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "../unit/device_common.h"
#include "engine.h" /* kvt__dev_store_partials */

#define DSO_TEST "device_store_remove" /* CHECK's messages start with it */
#include "lib/device_store_open.h"

static struct kvt_geometry G; /* dso_geometry(32), set first in main */
static const uint32_t N = 50, BS = 16, NB = 8, NBLK = 4;
static uint32_t ids[4] = {5, 1, 6, 2};
static size_t plen;
static uint8_t *got;

/* A rank holding heads [h0, h1) whose blocks hold the logical KV kv. */
static void rank(struct tr_rank *r, uint32_t h0, uint32_t h1, const uint8_t *kv)
{
	CHECK(tr_rank_open(r, NULL, &G, KVT_LAYOUT_FLASH_ATTN, BS, NB, h0, h1, 0, NULL) == 0);
	tr_rank_load_logical(r, kv, N, ids);
}

/* A store of the key by r, its copy held until ev is signalled. */
static struct kvt_device_op *store_held(struct tr_rank *r, struct kvt_store *s,
					const struct kvt_key *key, struct kvt_emu_event *ev,
					struct tr_done *d)
{
	struct kvt_device_dep dep = {KVT_DEP_EMU_EVENT, ev};
	struct kvt_device_op *op = NULL;
	kvt_emu_event_reset(ev);
	CHECK(kvt_device_store(r->dev, s, key, NULL, N, ids, NBLK, &dep, tr_on_done, d, &op) == 0);
	CHECK(kvt_device_op_layers_done(op) == 0 && d->calls == 0); /* still waiting */
	return op;
}

/* Let the held copy run to its end (publish or not) and its callback be delivered; the
 * callback's status. */
static int release(struct kvt_store *s, struct kvt_emu_event *ev, struct kvt_device_op *op,
		   struct tr_done *d)
{
	kvt_emu_event_signal(ev);
	int rc = kvt_device_op_wait(op, 10000);
	CHECK(rc != -ETIMEDOUT);
	kvt_device_op_free(op);
	poll_until(s, d, 1);
	CHECK(d->res.status == rc);
	return rc;
}

/* What a reader finds: 1 and the payload in got if kvt_get serves the key, 0 if it misses
 * (lookup and get must agree). */
static int served(struct kvt_store *s, const struct kvt_key *key)
{
	struct kvt_result gr;
	int lk = kvt_lookup_sync(s, key, 1, NULL);
	int gt = kvt_get_sync(s, key, 0, 0, got, plen, &gr);
	CHECK((lk == 1 && gt == 0) || (lk == 0 && gt == -ENOENT));
	return lk;
}

int main(void)
{
	G = dso_geometry(32);
	plen = G.layers * kvt_layer_bytes(&G, N);
	uint64_t seed = 77;
	uint8_t *kv_old = malloc(plen), *kv_new = malloc(plen);
	got = malloc(plen);
	CHECK(kv_old && kv_new && got);
	tr_fill(&seed, kv_old, plen);
	tr_fill(&seed, kv_new, plen);
	struct kvt_key key;
	tr_fill(&seed, key.bytes, sizeof(key.bytes));
	struct kvt_emu_event *ev;
	CHECK(kvt_emu_event_create(&ev) == 0);
	struct tr_rank all, lo, hi, lo2;
	rank(&all, 0, 8, kv_old);
	rank(&lo, 0, 4, kv_old);
	rank(&hi, 4, 8, kv_new);
	rank(&lo2, 0, 4, kv_new);
	struct kvt_device_op *op;
	int late;

	/* 1. TP=1, a DRAM store over nvme (write-through: a publish also writes the key
	 * behind). The remove lands between the store's return and its publish. */
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/kvt-devrm-XXXXXX",
		 getenv("KVT_TEST_DIR") ? getenv("KVT_TEST_DIR") : "/var/tmp");
	CHECK(mkdtemp(dir) != NULL);
	struct kvt_store *s = dso_open_store(&G, false, dir);
	struct tr_done d1 = {0};
	op = store_held(&all, s, &key, ev, &d1);
	CHECK(kvt_remove_sync(s, &key) >= 0);
	CHECK(served(s, &key) == 0); /* nothing was published yet */
	CHECK(release(s, ev, op, &d1) == 0); /* the store completed, before the remove */
	late = served(s, &key);
	CHECK(kvt_flush_sync(s) == 0);
	kvt_store_close(s);
	s = dso_open_store(&G, false, dir); /* what nvme holds */
	int on_nvme = kvt_lookup_sync(s, &key, 1, NULL);
	printf("  TP=1, removed while its copy was held: after the copy, %s; on nvme: %s\n",
	       late ? "SERVED AGAIN" : "a miss", on_nvme ? "PRESENT" : "absent");
	CHECK(late == 0 && on_nvme == 0);
	kvt_store_close(s);
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0);

	/* 2. TP=2: one rank's half is written, the other's held; the remove comes; the held
	 * rank's completion is the one that would publish the object. */
	s = dso_open_store(&G, false, NULL);
	key.bytes[0]++; /* each case its own key: a failure does not carry over */
	struct tr_done dh = {0}, dl = {0};
	CHECK(kvt_device_store(hi.dev, s, &key, NULL, N, ids, NBLK, NULL, tr_on_done, &dh, NULL) ==
	      0);
	poll_until(s, &dh, 1);
	CHECK(dh.res.status == 4);
	op = store_held(&lo, s, &key, ev, &dl);
	CHECK(kvt_remove_sync(s, &key) >= 0);
	CHECK(served(s, &key) == 0);
	CHECK(release(s, ev, op, &dl) == 0);
	late = served(s, &key);
	printf("  TP=2, removed while the last rank's copy was held: after it, %s\n",
	       late ? "SERVED AGAIN" : "a miss");
	CHECK(late == 0);
	CHECK(kvt__dev_store_partials(s) == 0);

	/* 3. A put issued after the remove lands, and the late copy does not replace it. A
	 * put refused with -EAGAIN is retried once the copy is done (the old code's answer,
	 * after which the late publish made the put "already stored"). */
	struct tr_done d3 = {0};
	key.bytes[0]++;
	op = store_held(&all, s, &key, ev, &d3);
	CHECK(kvt_remove_sync(s, &key) >= 0);
	int prc = kvt_put_sync(s, &key, NULL, N, kv_new, plen);
	bool released = false;
	if (prc == -EAGAIN) {
		CHECK(release(s, ev, op, &d3) == 0);
		released = true;
		prc = kvt_put_sync(s, &key, NULL, N, kv_new, plen);
	}
	CHECK(prc == 0);
	if (!released)
		CHECK(release(s, ev, op, &d3) == 0);
	int put_held = served(s, &key) && memcmp(got, kv_new, plen) == 0;
	printf("  a put after the remove (%s at once): after the late copy, %s\n",
	       released ? "refused" : "stored", put_held ? "the put's bytes" : "NOT THE PUT'S");
	CHECK(put_held);
	CHECK(kvt_remove_sync(s, &key) >= 0);
	CHECK(served(s, &key) == 0);

	/* 4. Device stores issued after the remove start a new object: TP=2 ranks write it
	 * (new bytes) while the old object's copy is still held, and it is what is served,
	 * before and after the old copy completes. */
	struct tr_done d4 = {0}, dh2 = {0}, dl2 = {0};
	key.bytes[0]++;
	op = store_held(&lo, s, &key, ev, &d4);
	CHECK(kvt_remove_sync(s, &key) >= 0);
	CHECK(kvt_device_store(hi.dev, s, &key, NULL, N, ids, NBLK, NULL, tr_on_done, &dh2, NULL) ==
	      0);
	poll_until(s, &dh2, 1);
	CHECK(kvt_device_store(lo2.dev, s, &key, NULL, N, ids, NBLK, NULL, tr_on_done, &dl2, NULL) ==
	      0);
	poll_until(s, &dl2, 1);
	int new_now = served(s, &key) && memcmp(got, kv_new, plen) == 0;
	int old_rc = release(s, ev, op, &d4); /* its object was restarted: -ECANCELED */
	int new_late = served(s, &key) && memcmp(got, kv_new, plen) == 0;
	printf("  TP=2 stores after the remove (statuses %d, %d): %s; after the old copy, %s\n",
	       dh2.res.status, dl2.res.status, new_now ? "served" : "NOT SERVED",
	       new_late ? "served" : "NOT SERVED");
	CHECK(dh2.res.status == 4 && dl2.res.status == 0 && old_rc == -ECANCELED);
	CHECK(new_now && new_late);
	CHECK(kvt__dev_store_partials(s) == 0);
	kvt_store_close(s);

	tr_rank_close(&all);
	tr_rank_close(&lo);
	tr_rank_close(&hi);
	tr_rank_close(&lo2);
	kvt_emu_event_destroy(ev);
	free(kv_old);
	free(kv_new);
	free(got);
	printf("device_store_remove: ok\n");
	return 0;
}
