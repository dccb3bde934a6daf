/*
 * store_put_remove_race.c - a put racing a remove of the same key, write-through to a real
 * nvme tier in a temporary directory. After both calls have returned and write-behind has
 * settled (and a flush), a key DRAM still holds must also be on the nvme tier: with
 * write-through a DRAM copy with no deeper copy is clean, so an eviction drops it and the
 * acknowledged put is lost with no call to explain it.
 *
 * Each round releases one put and one remove of a fresh key at once, on two threads, the
 * remove after a random short spin so that it lands anywhere in the put (alloc, encode,
 * publish, job registration); a third of the keys are stored before their round. Several
 * pairs run at once on one store (wb_lock contention, and more threads than CPUs, so a
 * thread is preempted inside a call now and then).
 *
 * The interleaving this watches for (engine_ops.c, engine_wb.c, dram.c):
 *   remove: kvt__dram_remove while the put's slot is still S_FILLING: -ENOENT, DRAM keeps it
 *   put:    kvt__dram_publish_put, then kvt__e_wb_register (seq n, the slot is indexed, so
 *           the job is kept)
 *   remove: kvt__e_remove_start takes seq n+1, waits for job n, then removes the key from
 *           nvme
 *   put:    job n wrote nvme and marked the slot clean: DRAM serves the key, nvme lacks it.
 *
 * A replay of the same steps in that order (below) makes it deterministic. Environment:
 * KVT_RACE_MS (stress run, default 8000), KVT_RACE_PAIRS (3), KVT_RACE_TOKENS (64),
 * KVT_RACE_NOISE (threads taking wb_lock, 1), KVT_RACE_NO_REPLAY. Exit 0 pass, 1 fail.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "dram.h"
#include "engine.h"
#include "engine_internal.h" /* the replay: a remove and a put taken step by step */
#include "lib/tierh.h"
#include "store_key.h"
#include "testlib.h"
#include "tier.h"

enum { MAX_PAIRS = 8, BATCH = 128 };
static int PAIRS = 3;

static struct kvt_store *S;
static size_t LEN;
static uint32_t TOKENS;

struct pair {
	int idx;
	uint32_t salt;
	struct kvt_key keys[BATCH];
	_Atomic int round;   /* released by the put thread */
	_Atomic int rm_done; /* the last round whose remove returned */
	pthread_t tp, tr;
	uint64_t rng;
	uint32_t spin_max;
};

static struct pair pairs[MAX_PAIRS];
static _Atomic uint32_t spin_max = 4000;

static uint64_t xs(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Takes and lets go of the write-behind lock all the time (kvt__store_waits holds it while it
 * walks the jobs): a remove that has to wait for it in kvt__e_remove_start sleeps, and a put
 * that published meanwhile can take it first. */
static _Atomic int stop_noise;

static void *noise_thread(void *a)
{
	(void)a;
	struct kvt__store_waits w;
	while (!atomic_load(&stop_noise))
		kvt__store_waits(S, &w);
	return NULL;
}

static void *put_thread(void *a)
{
	struct pair *p = a;
	void *buf = malloc(LEN);
	CHECK(buf);
	for (int r = 0; r < BATCH; r++) {
		test_fill(buf, LEN, (uint64_t)p->salt << 16 | (uint64_t)r);
		atomic_store(&p->round, r);
		int rc;
		while ((rc = kvt_put_sync(S, &p->keys[r], NULL, TOKENS, buf, LEN)) == -EAGAIN)
			usleep(100);
		CHECK_RC(rc, 0);
		while (atomic_load(&p->rm_done) < r)
			sched_yield();
	}
	free(buf);
	return NULL;
}

static void *rm_thread(void *a)
{
	struct pair *p = a;
	for (int r = 0; r < BATCH; r++) {
		while (atomic_load(&p->round) < r)
			sched_yield();
		uint32_t spin = (uint32_t)(xs(&p->rng) % (atomic_load(&spin_max) + 1));
		for (volatile uint32_t i = 0; i < spin; i++)
			;
		CHECK(kvt_remove_sync(S, &p->keys[r]) >= 0);
		atomic_store(&p->rm_done, r);
	}
	return NULL;
}

/* ---------------------------------------------------------------- replay
 * The same interleaving, forced: the steps of kvt__e_do_put and of kvt__e_do_remove
 * (kvt__e_remove_mark, kvt__e_fill_removed, kvt__e_remove_start), in the order the stress
 * part hits only by chance (a few times a minute on a 2-CPU VM): the remove marks the key
 * while the put's slot is still filling, the put publishes and registers its write job,
 * then the remove takes its place in the key's order. Before 2026-12-06 DRAM let go in
 * between (kvt__e_do_remove, before kvt__e_remove_start), found nothing filling, and kept
 * the put's copy while the remove deleted the deeper one. Two orders: the job started
 * after the remove took its place, or done before. */
static _Atomic int replay_rm_done;

static void replay_rm_cb(void *a, const struct kvt_result *r)
{
	(void)a;
	(void)r;
	atomic_store(&replay_rm_done, 1);
}

/* start_first: the job starts (and is waited for) before the remove takes its place */
static bool replay(struct kvt_store *s, struct kvt_tier *nv, bool start_first)
{
	struct kvt_key k, sk;
	test_chain_keys(s, &k, 1, 0x7e000000u + start_first);
	kvt__storage_key(s->ns_id, &k, &sk);
	void *buf = malloc(LEN);
	CHECK(buf);
	test_fill(buf, LEN, 99);
	uint64_t obj_bytes = kvt_object_bytes(&s->geo, TOKENS);
	atomic_store(&replay_rm_done, 0);

	/* put: alloc and encode - its slot is S_FILLING */
	struct kvt_slot_ref ref;
	CHECK_RC(kvt__dram_alloc(s->dram, &sk, NULL, &ref), 0);
	CHECK_RC(kvt__object_encode(ref.buf, obj_bytes, &s->geo, s->ns_id, &sk, TOKENS, buf, LEN),
		 0);
	/* remove: the key marked, fills marked */
	int rc = 0;
	struct remove_op *o = kvt__e_remove_mark(s, &sk, replay_rm_cb, NULL, true, &rc);
	CHECK(o);
	kvt__e_fill_removed(s, &sk);
	/* put: publish and register its write-through job (seq n), then it would be
	 * acknowledged */
	CHECK(kvt__dram_publish_put(s->dram, ref.id, obj_bytes, TOKENS, true));
	ref.object_bytes = obj_bytes;
	ref.n_tokens = TOKENS;
	struct wb *w = kvt__e_wb_register(s, &sk, &ref, NULL, 0, NULL, NULL, false);
	CHECK(w);
	/* remove: its place in the order (seq n+1), after the job: it waits for the job, then
	 * removes the key from nvme */
	if (start_first) {
		kvt__e_wb_start(w, s->n_links);
		test_wb_settle(s);
		kvt__e_remove_start(o);
	} else {
		kvt__e_remove_start(o);
		kvt__e_wb_start(w, s->n_links);
	}

	uint64_t t0 = test_now_ns();
	while (!atomic_load(&replay_rm_done)) {
		CHECKM(test_ms_since(t0) < 10000, "the replayed remove never completed");
		usleep(1000);
	}
	test_wb_settle(s);
	CHECK_RC(kvt_flush_sync(s), 0);
	uint8_t present = 0;
	CHECK_EQ(th_exists(nv, &sk, 1, &present), 0);
	bool in_dram = kvt__dram_contains(s->dram, &sk, false);
	struct kvt_slot_ref dref;
	bool dirty = kvt__dram_get_dirty(s->dram, &sk, &dref) == 0;
	if (dirty)
		kvt__dram_unpin(s->dram, dref.id);
	printf("  replay (job %s): after both, DRAM %s%s, nvme %s\n",
	       start_first ? "done before the remove's turn" : "started after it",
	       in_dram ? "holds it" : "lacks it", in_dram ? (dirty ? " (dirty)" : " (clean)") : "",
	       present ? "holds it" : "lacks it");
	CHECK(kvt_remove_sync(s, &k) >= 0);
	free(buf);
	return !in_dram || present;
}

int main(void)
{
	char *dir = test_tmpdir("store_put_remove_race");
	if (getenv("KVT_RACE_PAIRS"))
		PAIRS = KVT_MAX(1, KVT_MIN(MAX_PAIRS, atoi(getenv("KVT_RACE_PAIRS"))));
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "store.write_policy", "write-through");
	test_set(c, "model.chunk_tokens",
		 getenv("KVT_RACE_TOKENS")
		     ? getenv("KVT_RACE_TOKENS")
		     : "64"); /* 128 KiB payloads: a put's encode is a window */
	test_set(c, "dram.bytes", "256MiB");
	test_set(c, "nvme.bytes", "1GiB");
	S = test_open(c);
	const struct kvt_geometry *g = kvt_store_geometry(S);
	TOKENS = g->chunk_tokens;
	LEN = kvt_payload_bytes(g, TOKENS);
	struct kvt_dram *d = kvt__store_dram(S);
	struct kvt_tier *nv = kvt__store_tier(S, 1);
	CHECK(d && nv);
	const uint8_t *ns = kvt__store_ns_id(S);
	void *buf = malloc(LEN);
	CHECK(buf);
	int replay_bad = 0;
	if (!getenv("KVT_RACE_NO_REPLAY"))
		for (int v = 0; v < 2; v++)
			replay_bad += !replay(S, nv, v);

	const char *env = getenv("KVT_RACE_MS");
	double run_ms = env ? atof(env) : 8000;
	uint64_t t0 = test_now_ns();
	int batches = 0;
	long both = 0, none = 0, dram_only = 0, nvme_only = 0;
	uint64_t rng = 0x1234567;
	int n_noise = getenv("KVT_RACE_NOISE") ? atoi(getenv("KVT_RACE_NOISE")) : 1;
	pthread_t noise[4];
	for (int i = 0; i < n_noise && i < 4; i++)
		CHECK(pthread_create(&noise[i], NULL, noise_thread, NULL) == 0);
	do {
		for (int i = 0; i < PAIRS; i++) {
			struct pair *p = &pairs[i];
			p->idx = i;
			p->salt = (uint32_t)(batches * PAIRS + i + 1);
			p->rng = xs(&rng) | 1;
			test_chain_keys(S, p->keys, BATCH, 0x51000000u + p->salt);
			atomic_store(&p->round, -1);
			atomic_store(&p->rm_done, -1);
			/* a third stored before their round: the put finds them (-EEXIST) unless
			 * the remove took DRAM's copy first */
			for (int r = 0; r < BATCH; r += 3) {
				test_fill(buf, LEN, (uint64_t)p->salt << 16 | (uint64_t)r);
				int rc;
				while ((rc = kvt_put_sync(S, &p->keys[r], NULL, TOKENS, buf,
							  LEN)) == -EAGAIN)
					usleep(100);
				CHECK_RC(rc, 0);
			}
		}
		/* vary how far into the put the remove lands, batch by batch */
		atomic_store(&spin_max, (uint32_t)(500 + (batches % 8) * 1500));
		for (int i = 0; i < PAIRS; i++) {
			CHECK(pthread_create(&pairs[i].tr, NULL, rm_thread, &pairs[i]) == 0);
			CHECK(pthread_create(&pairs[i].tp, NULL, put_thread, &pairs[i]) == 0);
		}
		for (int i = 0; i < PAIRS; i++) {
			pthread_join(pairs[i].tp, NULL);
			pthread_join(pairs[i].tr, NULL);
		}
		/* every call has returned: let write-behind end, write anything dirty */
		test_wb_settle(S);
		CHECK_RC(kvt_flush_sync(S), 0);
		test_wb_settle(S);
		for (int i = 0; i < PAIRS; i++) {
			struct pair *p = &pairs[i];
			struct kvt_key sk[BATCH];
			uint8_t present[BATCH];
			for (int r = 0; r < BATCH; r++)
				kvt__storage_key(ns, &p->keys[r], &sk[r]);
			CHECK_EQ(th_exists(nv, sk, BATCH, present), 0);
			for (int r = 0; r < BATCH; r++) {
				bool in_dram = kvt__dram_contains(d, &sk[r], false);
				if (in_dram && present[r]) {
					both++;
				} else if (!in_dram && !present[r]) {
					none++;
				} else if (in_dram) {
					if (dram_only < 5) {
						struct kvt_slot_ref ref;
						bool dirty =
						    kvt__dram_get_dirty(d, &sk[r], &ref) == 0;
						if (dirty)
							kvt__dram_unpin(d, ref.id);
						printf("  batch %d pair %d round %d (%s): in DRAM "
						       "(%s), "
						       "not on nvme\n",
						       batches, i, r,
						       r % 3 ? "absent before" : "stored before",
						       dirty ? "dirty" : "clean");
					}
					dram_only++;
				} else {
					nvme_only++; /* DRAM evicted it: the pool is sized so it
							never does */
				}
			}
			/* clear the batch's keys: DRAM stays roomy */
			for (int r = 0; r < BATCH; r++)
				CHECK(kvt_remove_sync(S, &p->keys[r]) >= 0);
		}
		batches++;
	} while (test_ms_since(t0) < run_ms);
	atomic_store(&stop_noise, 1);
	for (int i = 0; i < n_noise && i < 4; i++)
		pthread_join(noise[i], NULL);
	printf("  %d batches of %d x %d racing put/remove pairs: in both %ld, in neither %ld, "
	       "DRAM only %ld, nvme only %ld\n",
	       batches, PAIRS, BATCH, both, none, dram_only, nvme_only);
	CHECK_EQ(nvme_only, 0);
	CHECKM(replay_bad == 0,
	       "%d of 2 replays left the key in DRAM (clean) and not on the deeper tier",
	       replay_bad);
	CHECKM(dram_only == 0,
	       "%ld key(s) held by DRAM (clean) with no copy on the deeper tier after a put "
	       "raced a remove",
	       dram_only);
	kvt_store_close(S);
	free(buf);
	test_rmdir(dir);
	free(dir);
	printf("store_put_remove_race: ok\n");
	return 0;
}
