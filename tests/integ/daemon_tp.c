/*
 * daemon_tp.c - the device layer's tensor-parallel commit across processes through a real
 * kvtierd (issue 13, item 2; docs/DEVICE.md "Tensor parallelism"). Why: ranks of one model
 * run as separate processes, each a client of the node daemon, and an object must be
 * published only when every head is written, by whichever rank comes last. Each rank here
 * is this program re-executed ("rank" mode, emu backend), attached to the daemon:
 *  1. TP=2 and TP=4 ranks released one by one: a reader (this process, its own client)
 *     misses after every rank but the last; after the last it gets exactly the payload a
 *     single-process TP=1 device store of the same blocks produces;
 *  2. TP=4 ranks released at once: the same bytes;
 *  3. TP=8 over 4 KV heads (each head on two ranks): every head is copied once (the
 *     ranks' bytes add up to one payload, four ranks copy nothing);
 *  4. a rank SIGKILLed after it reserved its heads, before it wrote them: nothing visible,
 *     the daemon cancels the object (STATUS: nothing reserved, no partial object left) and
 *     the same key can be written afresh;
 *  5. two ranks of one process sharing one client store (one connection): each reports
 *     only its own heads written, so the object appears after the second;
 *  6. a daemon stopped (SIGTERM) with an object still waiting for a rank that never came
 *     exits cleanly (it cancels the object before closing the store);
 *  7. a rank SIGSTOPped after it reserved its heads (alive, connected, silent): the object's
 *     lease (daemon.lease_ms) ends, the daemon cancels it, and the same key can be written
 *     afresh while the stopped rank still holds its claims;
 *  8. a failure report (TP_WRITTEN, failed) from a connection that holds no claim on the
 *     object changes nothing: the rank that does completes and publishes it (before, any
 *     connection's report cancelled it);
 *  9. (short lease) half an object written, every rank gone, no claim outstanding: the
 *     daemon cancels it after 6 leases by itself - it used to wait for the next rank's
 *     TP_RESERVE, holding the slot until then, for ever if none came.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "../unit/device_common.h"
#include "daemon_proto.h"
#include "daemon_client.h"
#include "lib/daemon_harness.h"

static const char *MODEL[][2] = {{"model.layers", "4"},       {"model.kv_heads", "4"},
				 {"model.head_dim", "32"},    {"model.chunk_tokens", "64"},
				 {"model.dtype", "bf16"},     {"model.name", "tp-model"},
				 {"dram.bytes", "16MiB"},     {"dram.hugepages", "false"},
				 {"nvme.fsync", "none"}};
#define N_MODEL (sizeof(MODEL) / sizeof(MODEL[0]))
static const struct kvt_geometry G = {.layers = 4, .kv_heads = 4, .head_dim = 32,
				      .chunk_tokens = 64, .dtype = KVT_DTYPE_BF16,
				      .kind = KVT_KIND_KV};
#define NTOK 50u /* a partial chunk: 4 blocks of 16, the last one short */
#define BS 16u
#define NB 10u
#define NBLK 4u

static char *dir, sock_path[108];
static pid_t main_pid;

/* Rank processes still running (a failed check exits with them waiting on their gates). */
static pid_t live[64];

static void kill_ranks(void) /* the daemon: lib/daemon_harness.h */
{
	for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++)
		if (live[i] > 0 && getpid() == main_pid) {
			kill(live[i], SIGKILL);
			waitpid(live[i], NULL, 0);
			live[i] = 0;
		}
}

static void track(pid_t p, bool add)
{
	for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++)
		if (add ? !live[i] : live[i] == p) {
			live[i] = add ? p : 0;
			return;
		}
}

static struct kvt_config *model_config(void)
{
	struct kvt_config *c;
	CHECK(kvt_config_create(&c) == 0);
	kvt_config_set_log(c, test_log, NULL, KVT_LOG_WARN);
	for (size_t i = 0; i < N_MODEL; i++)
		test_set(c, MODEL[i][0], MODEL[i][1]);
	return c;
}

static struct kvt_store *open_client(void)
{
	struct kvt_config *c = model_config();
	test_set(c, "store.daemon", sock_path);
	test_set(c, "store.daemon_timeout_ms", "5000");
	return test_open(c);
}

/* The chunk every rank holds its slice of, and the block ids it sits in: from seed, so
 * every process derives the same. */
static uint8_t *logical_of(uint64_t seed, size_t *len)
{
	*len = (size_t)G.layers * kvt_layer_bytes(&G, NTOK);
	uint8_t *p = malloc(*len);
	CHECK(p);
	tr_fill(&seed, p, *len);
	return p;
}

static void key_of(uint64_t seed, struct kvt_key *k)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->bytes, &seed, sizeof(seed));
	k->bytes[31] = 0x7e;
}


/* What a rank reports on the shared result pipe (one write, atomic). */
struct report {
	int32_t rank;
	int32_t status; /* kvt_device_store's result; INT32_MIN: reserved and hanging */
	uint64_t bytes;
};

/* Gather heads [h0, h1) of chunk `seed` into the store; the result through kvt_poll. */
static struct kvt_result device_store(struct kvt_store *s, uint64_t seed, uint32_t h0,
				      uint32_t h1, const struct kvt_device_dep *dep,
				      struct tr_rank *r)
{
	size_t len;
	uint8_t *logical = logical_of(seed, &len);
	uint64_t bseed = seed ^ 0x5bd1e995u;
	uint32_t ids[NBLK];
	CHECK(tr_rank_open(r, NULL, &G, KVT_LAYOUT_FLASH_ATTN, BS, NB, h0, h1, 0, NULL) == 0);
	tr_shuffled_ids(&bseed, NB, ids, NBLK);
	tr_rank_load_logical(r, logical, NTOK, ids);
	free(logical);
	struct kvt_key key;
	key_of(seed, &key);
	struct tr_done d = {0};
	CHECK_RC(kvt_device_store(r->dev, s, &key, NULL, NTOK, ids, NBLK, dep, tr_on_done, &d, NULL),
		 0);
	if (dep) /* held back by a dependency never signalled: it stays reserved */
		return (struct kvt_result){.status = INT32_MIN};
	for (int i = 0; i < 2000 && !d.calls; i++)
		kvt_poll(s, 10);
	CHECK(d.calls == 1);
	return d.res;
}

/* "rank SEED H0 H1 GATE_FD RESULT_FD RANK HANG": one rank process. */
static int rank_main(char **argv)
{
	uint64_t seed = strtoull(argv[2], NULL, 0);
	uint32_t h0 = (uint32_t)atoi(argv[3]), h1 = (uint32_t)atoi(argv[4]);
	int gate = atoi(argv[5]), out = atoi(argv[6]);
	struct report rep = {.rank = atoi(argv[7])};
	bool hang = atoi(argv[8]);
	snprintf(sock_path, sizeof(sock_path), "%s", getenv("KVT_TP_SOCK"));
	struct kvt_store *s = open_client();
	char b;
	CHECK(read(gate, &b, 1) == 1);
	struct kvt_emu_event *ev = NULL;
	struct kvt_device_dep dep = {KVT_DEP_EMU_EVENT, NULL};
	if (hang) {
		CHECK(kvt_emu_event_create(&ev) == 0);
		dep.handle = ev;
	}
	struct tr_rank r;
	struct kvt_result res = device_store(s, seed, h0, h1, hang ? &dep : NULL, &r);
	rep.status = res.status;
	rep.bytes = res.bytes;
	CHECK(write(out, &rep, sizeof(rep)) == (ssize_t)sizeof(rep));
	if (hang)
		for (;;)
			pause(); /* until SIGKILL */
	tr_rank_close(&r);
	kvt_store_close(s);
	return 0;
}

struct ranks {
	int n;
	pid_t pid[8];
	int gate[8]; /* write ends */
	int result;  /* read end */
};

/* Start n rank processes for chunk seed; rank i holds heads [h[i], h[i+1]) unless repl
 * (then head i / 2: TP = 2 * kv_heads). Each waits for its gate. hang_rank: that rank
 * reserves and then hangs (-1: none). */
static struct ranks spawn_ranks(int n, uint64_t seed, bool repl, int hang_rank)
{
	struct ranks rs = {.n = n};
	int res[2];
	/* close-on-exec: a rank keeps only its own gate's read end and the result's write end,
	 * so a gate closed by this process (or its death) reads as end of file */
	CHECK(pipe2(res, O_CLOEXEC) == 0);
	for (int i = 0; i < n; i++) {
		uint32_t per = G.kv_heads / (uint32_t)(repl ? G.kv_heads : (uint32_t)n);
		uint32_t h0 = repl ? (uint32_t)i / 2 : (uint32_t)i * per;
		uint32_t h1 = repl ? h0 + 1 : h0 + per;
		int g[2];
		CHECK(pipe2(g, O_CLOEXEC) == 0);
		char a[7][32];
		snprintf(a[0], 32, "%llu", (unsigned long long)seed);
		snprintf(a[1], 32, "%u", h0);
		snprintf(a[2], 32, "%u", h1);
		snprintf(a[3], 32, "%d", g[0]);
		snprintf(a[4], 32, "%d", res[1]);
		snprintf(a[5], 32, "%d", i);
		snprintf(a[6], 32, "%d", i == hang_rank);
		pid_t p = fork();
		if (p == 0) {
			fcntl(g[0], F_SETFD, 0);
			fcntl(res[1], F_SETFD, 0);
			char *argv[] = {"daemon_tp", "rank", a[0], a[1], a[2], a[3],
					a[4],        a[5],   a[6], NULL};
			execv("/proc/self/exe", argv);
			_exit(127);
		}
		CHECK(p > 0);
		track(p, true);
		close(g[0]);
		rs.pid[i] = p;
		rs.gate[i] = g[1];
	}
	close(res[1]);
	rs.result = res[0];
	return rs;
}

static void release(struct ranks *rs, int i)
{
	CHECK(write(rs->gate[i], "g", 1) == 1);
	close(rs->gate[i]);
}

static struct report next_report(struct ranks *rs)
{
	struct report r;
	CHECK(read(rs->result, &r, sizeof(r)) == (ssize_t)sizeof(r));
	return r;
}

static void reap(struct ranks *rs)
{
	for (int i = 0; i < rs->n; i++) {
		int st;
		CHECK(waitpid(rs->pid[i], &st, 0) == rs->pid[i]);
		track(rs->pid[i], false);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	close(rs->result);
}

static struct kvtd_status status(struct kvt_store *s)
{
	struct kvtd_status st;
	CHECK_RC(kvt__client_status(kvt__store_client(s), &st), 0);
	return st;
}

/* The reader: nothing of chunk seed is visible. */
static void expect_miss(struct kvt_store *s, uint64_t seed, uint8_t *buf, size_t len)
{
	struct kvt_key key;
	key_of(seed, &key);
	struct kvt_result gr;
	CHECK_RC(kvt_lookup_sync(s, &key, 1, NULL), 0);
	CHECK_RC(kvt_get_sync(s, &key, 0, 0, buf, len, &gr), -ENOENT);
}

/* The reader: chunk seed reads back as ref, byte for byte. */
static void expect_bytes(struct kvt_store *s, uint64_t seed, const uint8_t *ref, size_t len)
{
	struct kvt_key key;
	key_of(seed, &key);
	uint8_t *got = calloc(1, len);
	struct kvt_result gr;
	CHECK_RC(kvt_get_sync(s, &key, 0, 0, got, len, &gr), 0);
	CHECK_EQ(gr.n_tokens, NTOK);
	CHECK_EQ(gr.bytes, len);
	CHECK(memcmp(got, ref, len) == 0);
	free(got);
}

/* What a single process with TP=1 stores for chunk seed (an in-process DRAM store). */
static uint8_t *reference(uint64_t seed, size_t *len)
{
	struct kvt_config *c = model_config();
	test_set(c, "store.tiers", "dram");
	struct kvt_store *s;
	CHECK_RC(kvt_store_open(c, &s), 0);
	kvt_config_destroy(c);
	struct tr_rank r;
	struct kvt_result res = device_store(s, seed, 0, G.kv_heads, NULL, &r);
	CHECK_RC(res.status, 0);
	tr_rank_close(&r);
	uint8_t *logical = logical_of(seed, len);
	uint8_t *ref = calloc(1, *len);
	struct kvt_key key;
	key_of(seed, &key);
	struct kvt_result gr;
	CHECK_RC(kvt_get_sync(s, &key, 0, 0, ref, *len, &gr), 0);
	CHECK(memcmp(ref, logical, *len) == 0); /* and it is the canonical payload */
	free(logical);
	kvt_store_close(s);
	return ref;
}

/* 1. ranks released one by one: a miss until the last has written. */
static void test_sequential(struct kvt_store *rd, int tp, uint64_t seed)
{
	size_t len;
	uint8_t *ref = reference(seed, &len), *buf = malloc(len);
	struct kvtd_status st0 = status(rd);
	struct ranks rs = spawn_ranks(tp, seed, false, -1);
	uint64_t bytes = 0;
	for (int i = 0; i < tp; i++) {
		release(&rs, i);
		struct report r = next_report(&rs);
		CHECK_EQ(r.rank, i);
		bytes += r.bytes;
		/* status: heads still missing after this rank */
		CHECK_EQ(r.status, (int)(G.kv_heads - (uint32_t)(i + 1) * (G.kv_heads / tp)));
		if (i < tp - 1) {
			expect_miss(rd, seed, buf, len);
			CHECK_EQ(status(rd).tp_partials, 1);
		}
	}
	reap(&rs);
	expect_bytes(rd, seed, ref, len);
	struct kvtd_status st = status(rd);
	CHECK_EQ(st.tp_partials, 0);
	CHECK_EQ(st.reserved, 0);
	CHECK_EQ(st.tp_published, st0.tp_published + 1);
	CHECK_EQ(bytes, len); /* each head once */
	printf("  TP=%d ranks in %d processes, one by one: miss until the last, then the TP=1 "
	       "bytes\n", tp, tp);
	free(ref);
	free(buf);
}

/* 1c. The object again, while it is stored: nothing is reserved, and the object counts
 * one put (a sighting for admission), whatever the number of ranks - counted by the rank
 * of its first head. Until 2026-12-05 none counted; a first fix counted one per rank. */
static void test_again(struct kvt_store *rd, int tp, uint64_t seed)
{
	struct kvt_stats a, b;
	CHECK_RC(kvt_stats(rd, &a), 0);
	struct kvtd_status st0 = status(rd);
	struct ranks rs = spawn_ranks(tp, seed, false, -1);
	for (int i = 0; i < tp; i++) {
		release(&rs, i);
		struct report r = next_report(&rs);
		CHECKM(r.status >= 0, "rank %d: %d", r.rank, r.status);
	}
	reap(&rs);
	CHECK_RC(kvt_stats(rd, &b), 0);
	CHECKM(b.puts == a.puts + 1, "a stored object put again by %d ranks counted %llu puts",
	       tp, (unsigned long long)(b.puts - a.puts));
	CHECK_EQ(status(rd).tp_published, st0.tp_published);
	printf("  TP=%d ranks putting a stored object again: one put counted\n", tp);
}

/* 1b. kvt_device_load through the daemon: two ranks (heads [0, 2) and [2, 4)) of this
 * process scatter chunk seed, published by the ranks of test_sequential, from the slot the
 * daemon pins in the shared pool into poisoned blocks; then a miss completes with -ENOENT
 * through the callback, and no pin is left behind. */
static void test_load(struct kvt_store *rd, uint64_t seed)
{
	const uint8_t POISON = 0xA5;
	size_t len;
	uint8_t *logical = logical_of(seed, &len);
	struct kvt_key key;
	key_of(seed, &key);
	uint64_t bseed = seed ^ 0x77u;
	for (uint32_t i = 0; i < 2; i++) {
		struct tr_rank r;
		uint32_t ids[NBLK];
		CHECK(tr_rank_open(&r, NULL, &G, KVT_LAYOUT_FLASH_ATTN, BS, NB, 2 * i, 2 * i + 2,
				   POISON, NULL) == 0);
		tr_shuffled_ids(&bseed, NB, ids, NBLK);
		struct tr_done d = {0};
		struct kvt_device_op *op;
		CHECK_RC(kvt_device_load(r.dev, rd, &key, ids, NBLK, NULL, tr_on_done, &d, &op), 0);
		CHECK(kvt_device_op_wait(op, 10000) == 0);
		kvt_device_op_free(op);
		for (int k = 0; k < 1000 && !d.calls; k++)
			kvt_poll(rd, 10);
		CHECK(d.calls == 1);
		CHECK_RC(d.res.status, 0);
		CHECK_EQ(d.res.n_tokens, NTOK);
		CHECK(tr_rank_check(&r, logical, NTOK, ids, POISON) == 0);
		tr_rank_close(&r);
	}
	struct kvt_key missing = key;
	missing.bytes[0] ^= 1;
	struct tr_rank r;
	uint32_t ids[NBLK];
	CHECK(tr_rank_open(&r, NULL, &G, KVT_LAYOUT_FLASH_ATTN, BS, NB, 0, 4, POISON, NULL) == 0);
	tr_shuffled_ids(&bseed, NB, ids, NBLK);
	struct tr_done d = {0};
	CHECK_RC(kvt_device_load(r.dev, rd, &missing, ids, NBLK, NULL, tr_on_done, &d, NULL), 0);
	for (int k = 0; k < 1000 && !d.calls; k++)
		kvt_poll(rd, 10);
	CHECK(d.calls == 1);
	CHECK_RC(d.res.status, -ENOENT);
	tr_rank_close(&r);
	CHECK_EQ(status(rd).pins, 0);
	printf("  kvt_device_load through the daemon: TP=2 ranks scatter the chunk from the "
	       "pinned slot; a miss completes with -ENOENT; no pin left\n");
	free(logical);
}

/* 2. all ranks at once */
static void test_concurrent(struct kvt_store *rd, int tp, uint64_t seed)
{
	size_t len;
	uint8_t *ref = reference(seed, &len);
	struct ranks rs = spawn_ranks(tp, seed, false, -1);
	for (int i = 0; i < tp; i++)
		release(&rs, i);
	int published = 0;
	uint64_t bytes = 0;
	for (int i = 0; i < tp; i++) {
		struct report r = next_report(&rs);
		CHECK(r.status >= 0);
		published += r.status == 0;
		bytes += r.bytes;
	}
	reap(&rs);
	CHECK_EQ(published, 1); /* one rank completed the object */
	CHECK_EQ(bytes, len);
	expect_bytes(rd, seed, ref, len);
	CHECK_EQ(status(rd).tp_partials, 0);
	printf("  TP=%d ranks at once: published once, the TP=1 bytes\n", tp);
	free(ref);
}

/* 3. TP = 2 * kv_heads: each head on two ranks, written once */
static void test_replicated(struct kvt_store *rd, uint64_t seed)
{
	size_t len;
	uint8_t *ref = reference(seed, &len), *buf = malloc(len);
	int tp = 2 * (int)G.kv_heads;
	struct ranks rs = spawn_ranks(tp, seed, true, -1);
	uint64_t bytes = 0;
	int copied = 0;
	for (int i = 0; i < tp; i++) {
		release(&rs, i);
		struct report r = next_report(&rs);
		CHECK(r.status >= 0);
		bytes += r.bytes;
		copied += r.bytes > 0;
		if (i % 2 == 1) /* the replica of a head written already copies nothing */
			CHECK_EQ(r.bytes, 0);
		if (i < tp - 2)
			expect_miss(rd, seed, buf, len);
	}
	reap(&rs);
	CHECK_EQ(copied, (int)G.kv_heads);
	CHECK_EQ(bytes, len);
	expect_bytes(rd, seed, ref, len);
	printf("  TP=%d over %u KV heads: %d ranks copied, each head once\n", tp, G.kv_heads,
	       copied);
	free(ref);
	free(buf);
}

/* 4. a rank killed between its reserve and its write */
static void test_killed(struct kvt_store *rd, uint64_t seed)
{
	size_t len;
	uint8_t *ref = reference(seed, &len), *buf = malloc(len);
	struct kvtd_status st0 = status(rd);
	struct ranks rs = spawn_ranks(2, seed, false, 1);
	release(&rs, 0);
	struct report r = next_report(&rs);
	CHECK_EQ(r.status, 2); /* rank 0 wrote its half */
	release(&rs, 1);
	r = next_report(&rs);
	CHECK_EQ(r.rank, 1);
	CHECK_EQ(r.status, INT32_MIN); /* rank 1 reserved and hangs before copying */
	CHECK_EQ(status(rd).tp_partials, 1);
	expect_miss(rd, seed, buf, len);
	kill(rs.pid[1], SIGKILL);
	int st;
	CHECK(waitpid(rs.pid[1], &st, 0) == rs.pid[1] && WIFSIGNALED(st));
	CHECK(waitpid(rs.pid[0], &st, 0) == rs.pid[0] && WIFEXITED(st) && !WEXITSTATUS(st));
	track(rs.pid[0], false);
	track(rs.pid[1], false);
	close(rs.result);
	struct kvtd_status s1;
	for (int i = 0; i < 500; i++) {
		s1 = status(rd);
		if (s1.tp_partials == 0 && s1.connections == st0.connections)
			break;
		usleep(10000);
	}
	CHECK_EQ(s1.tp_partials, 0);
	CHECK_EQ(s1.reserved, 0);
	CHECK_EQ(s1.tp_cancelled, st0.tp_cancelled + 1);
	CHECK_EQ(s1.tp_published, st0.tp_published);
	expect_miss(rd, seed, buf, len);
	/* the slot and the key are free: the same object can be written again */
	struct ranks again = spawn_ranks(2, seed, false, -1);
	release(&again, 0);
	release(&again, 1);
	int published = 0;
	for (int i = 0; i < 2; i++)
		published += next_report(&again).status == 0;
	reap(&again);
	CHECK_EQ(published, 1);
	expect_bytes(rd, seed, ref, len);
	printf("  a rank SIGKILLed mid-write: nothing visible, the object cancelled, no slot "
	       "held; rewritten afterwards\n");
	free(ref);
	free(buf);
}

/* The raw protocol: claim every head of key seed's object on sock; returns its slot. */
static int32_t raw_claim_all(int sock, uint64_t seed)
{
	struct kvtd_req q = {.op = KVTD_TP_RESERVE, .n_tokens = NTOK, .layer_end = G.kv_heads,
			     .len = sizeof(struct kvtd_tp_claim) + G.kv_heads};
	key_of(seed, &q.key);
	struct kvtd_rep rep;
	CHECK_RC(raw_call(sock, &q, -1, &rep), 0);
	CHECK_RC(rep.res.status, 0);
	return rep.slot;
}

/* 7. a rank stopped, not dead: only the lease ends its object (daemon started with
 * daemon.lease_ms = lease_ms) */
static void test_stopped(struct kvt_store *rd, uint64_t seed, int lease_ms)
{
	size_t len;
	uint8_t *ref = reference(seed, &len), *buf = malloc(len);
	struct kvtd_status st0 = status(rd);
	struct ranks rs = spawn_ranks(2, seed, false, 1);
	release(&rs, 0);
	CHECK_EQ(next_report(&rs).status, 2); /* rank 0 wrote its half */
	release(&rs, 1);
	struct report r = next_report(&rs);
	CHECK_EQ(r.rank, 1);
	CHECK_EQ(r.status, INT32_MIN); /* rank 1 reserved its heads */
	CHECK(kill(rs.pid[1], SIGSTOP) == 0);
	int st;
	CHECK(waitpid(rs.pid[0], &st, 0) == rs.pid[0] && WIFEXITED(st) && !WEXITSTATUS(st));
	track(rs.pid[0], false);
	uint64_t t0 = kvt__now_ns();
	struct kvtd_status s1 = status(rd);
	CHECK_EQ(s1.tp_partials, 1);
	expect_miss(rd, seed, buf, len);
	/* within the lease plus slack for a loaded machine, nothing held by the stopped rank -
	 * though another connection keeps asking for the object's heads and reporting them,
	 * claiming none (until 2026-12-05 its requests kept the object alive for ever). It
	 * reports its copy failed: should its request come just after the cancel and start the
	 * object afresh, that one is cancelled too, never published with bytes nobody wrote. */
	memcpy(kvtd_ns, kvt_store_ns_id(rd), sizeof(kvtd_ns));
	struct raw toucher = raw_attach();
	while (kvt__now_ns() - t0 < (uint64_t)(lease_ms + 5000) * 1000000ull) {
		struct kvtd_req q = {.op = KVTD_TP_RESERVE, .n_tokens = NTOK,
				     .layer_end = G.kv_heads,
				     .len = sizeof(struct kvtd_tp_claim) + G.kv_heads};
		key_of(seed, &q.key);
		struct kvtd_rep rep;
		CHECK_RC(raw_call(toucher.sock, &q, -1, &rep), 0);
		if (rep.res.status == 0) {
			struct kvtd_req w = {.op = KVTD_TP_WRITTEN, .n = (uint64_t)(uint32_t)rep.slot,
					     .layer_end = G.kv_heads, .flags = 1};
			key_of(seed, &w.key);
			CHECK_RC(raw_call(toucher.sock, &w, -1, &rep), 0);
		}
		s1 = status(rd);
		if (s1.tp_partials == 0)
			break;
		usleep(20000);
	}
	raw_close(&toucher);
	CHECKM(s1.tp_partials == 0, "a stopped rank's object still open after %d ms",
	       lease_ms + 5000);
	CHECK(s1.tp_cancelled >= st0.tp_cancelled + 1);
	CHECK_EQ(s1.tp_published, st0.tp_published);
	expect_miss(rd, seed, buf, len);
	/* the key is free while the rank still holds its claims: written afresh, elsewhere */
	struct ranks again = spawn_ranks(2, seed, false, -1);
	release(&again, 0);
	release(&again, 1);
	int published = 0;
	for (int i = 0; i < 2; i++)
		published += next_report(&again).status == 0;
	reap(&again);
	CHECK_EQ(published, 1);
	expect_bytes(rd, seed, ref, len);
	kill(rs.pid[1], SIGKILL);
	CHECK(waitpid(rs.pid[1], &st, 0) == rs.pid[1] && WIFSIGNALED(st));
	track(rs.pid[1], false);
	close(rs.result);
	CHECK_EQ(status(rd).tp_partials, 0);
	printf("  a rank SIGSTOPped mid-write: its object cancelled at the end of the lease "
	       "(%d ms), rewritten while the rank was still stopped\n", lease_ms);

	/* A rank that speaks again after the lease (the raw protocol: claim every head, then
	 * silence): its report is refused with -ETIMEDOUT, its claims end there (again:
	 * -ECANCELED), and nothing is published. */
	memcpy(kvtd_ns, kvt_store_ns_id(rd), sizeof(kvtd_ns));
	uint8_t *pool;
	size_t pool_len;
	struct raw w = raw_attach_pool(&pool, &pool_len);
	struct kvt_key k;
	key_of(seed + 1, &k);
	int32_t slot = raw_claim_all(w.sock, seed + 1);
	struct kvtd_rep rep;
	CHECK_EQ(status(rd).tp_partials, 1);
	t0 = kvt__now_ns();
	uint64_t bound = (uint64_t)(lease_ms + 5000) * 1000000ull;
	while (status(rd).tp_partials && kvt__now_ns() - t0 < bound)
		usleep(20000);
	CHECK_EQ(status(rd).tp_partials, 0);
	struct kvtd_req wq = {.op = KVTD_TP_WRITTEN, .key = k, .n = (uint64_t)(uint32_t)slot,
			      .layer_end = G.kv_heads};
	CHECK_RC(raw_call(w.sock, &wq, -1, &rep), 0);
	CHECK_RC(rep.res.status, -ETIMEDOUT);
	CHECK_RC(raw_call(w.sock, &wq, -1, &rep), 0);
	CHECK_RC(rep.res.status, -ECANCELED);
	expect_miss(rd, seed + 1, buf, len);
	raw_close(&w);
	munmap(pool, pool_len);
	printf("  a rank's report after its object's lease: -ETIMEDOUT, nothing published\n");
	free(ref);
	free(buf);
}

/* 9. half an object written, then every rank gone (daemon.lease_ms = lease_ms) */
static void test_abandoned(struct kvt_store *rd, uint64_t seed, int lease_ms)
{
	struct kvtd_status st0 = status(rd);
	struct ranks rs = spawn_ranks(2, seed, false, -1);
	release(&rs, 0);
	CHECK_EQ(next_report(&rs).status, 2); /* rank 0 wrote its half, and exits */
	kill(rs.pid[1], SIGKILL);		/* never released: it claimed nothing */
	for (int i = 0; i < 2; i++) {
		CHECK(waitpid(rs.pid[i], NULL, 0) == rs.pid[i]);
		track(rs.pid[i], false);
	}
	close(rs.result);
	uint64_t t0 = kvt__now_ns();
	CHECK_EQ(status(rd).tp_partials, 1);
	uint64_t bound = (uint64_t)(6 * lease_ms + 5000) * 1000000ull;
	struct kvtd_status s1;
	while ((s1 = status(rd)).tp_partials && kvt__now_ns() - t0 < bound)
		usleep(50000);
	printf("  half an object, every rank gone: %s after %.1f s (6 leases: %.1f s)\n",
	       s1.tp_partials ? "still open" : "cancelled",
	       (double)(kvt__now_ns() - t0) / 1e9, 6 * lease_ms / 1e3);
	CHECK_EQ(s1.tp_partials, 0);
	CHECK_EQ(s1.tp_cancelled, st0.tp_cancelled + 1);
	CHECK_EQ(s1.tp_published, st0.tp_published);
}

/* 5. two ranks in this process, on the reader's store (one connection to the daemon) */
static void test_one_process(struct kvt_store *rd, uint64_t seed)
{
	size_t len;
	uint8_t *ref = reference(seed, &len), *buf = malloc(len);
	struct tr_rank r[2];
	struct kvt_result a = device_store(rd, seed, 0, 2, NULL, &r[0]);
	CHECK_EQ(a.status, 2);
	expect_miss(rd, seed, buf, len);
	struct kvt_result b = device_store(rd, seed, 2, 4, NULL, &r[1]);
	CHECK_EQ(b.status, 0);
	CHECK_EQ(a.bytes + b.bytes, len);
	expect_bytes(rd, seed, ref, len);
	tr_rank_close(&r[0]);
	tr_rank_close(&r[1]);
	printf("  TP=2 ranks of one process on one client store: published after the second\n");
	free(ref);
	free(buf);
}

/* 8. a failure reported by a connection with no part in the object */
static void test_foreign_report(struct kvt_store *rd, uint64_t seed)
{
	memcpy(kvtd_ns, kvt_store_ns_id(rd), sizeof(kvtd_ns));
	uint8_t *pool;
	size_t pool_len;
	struct raw a = raw_attach_pool(&pool, &pool_len), b = raw_attach();
	struct kvt_key k;
	key_of(seed, &k);
	int32_t slot = raw_claim_all(a.sock, seed);
	struct kvtd_rep rep;
	struct kvtd_req wq = {.op = KVTD_TP_WRITTEN, .key = k, .n = (uint64_t)(uint32_t)slot,
			      .layer_end = G.kv_heads, .flags = 1};
	CHECK_RC(raw_call(b.sock, &wq, -1, &rep), 0);
	printf("  a failure reported by a connection with no claim: %d\n", rep.res.status);
	CHECK(rep.res.status >= 0); /* heads still to write, no error */
	wq.flags = 0;
	CHECK_RC(raw_call(a.sock, &wq, -1, &rep), 0);
	CHECK_RC(rep.res.status, 0); /* every head written: published */
	CHECK_EQ(status(rd).tp_partials, 0);
	raw_close(&a);
	raw_close(&b);
	munmap(pool, pool_len);
}

int main(int argc, char **argv)
{
	if (argc == 9 && !strcmp(argv[1], "rank"))
		return rank_main(argv);
	main_pid = getpid();
	dir = test_tmpdir("daemon_tp");
	snprintf(sock_path, sizeof(sock_path), "%s/kvtierd.sock", dir);
	setenv("KVT_TP_SOCK", sock_path, 1);
	char data[300];
	snprintf(data, sizeof(data), "%s/data", dir);
	const char *args[4 + 2 * N_MODEL + 3];
	char sets[N_MODEL][64];
	int n = 0;
	args[n++] = "--dir";
	args[n++] = data;
	for (size_t i = 0; i < N_MODEL; i++) {
		snprintf(sets[i], sizeof(sets[i]), "%s=%s", MODEL[i][0], MODEL[i][1]);
		args[n++] = "--set";
		args[n++] = sets[i];
	}
	args[n] = NULL;
	atexit(kill_ranks);
	kvtd_start(sock_path, args);

	struct kvt_store *rd = open_client(); /* the reader, a process of its own */
	test_sequential(rd, 2, 101);
	test_sequential(rd, 4, 102);
	test_again(rd, 4, 102);
	test_load(rd, 102);
	test_concurrent(rd, 4, 103);
	test_replicated(rd, 104);
	test_killed(rd, 105);
	test_one_process(rd, 107);
	test_foreign_report(rd, 120);

	/* 6. half an object open at shutdown */
	struct ranks rs = spawn_ranks(2, 106, false, -1);
	release(&rs, 0);
	CHECK_EQ(next_report(&rs).status, 2);
	kill(rs.pid[1], SIGKILL); /* never released: it claimed nothing */
	for (int i = 0; i < 2; i++) {
		CHECK(waitpid(rs.pid[i], NULL, 0) == rs.pid[i]);
		track(rs.pid[i], false);
	}
	close(rs.result);
	CHECK_EQ(status(rd).tp_partials, 1);
	kvt_store_close(rd);
	kvtd_stop(); /* SIGTERM: must exit 0 */
	printf("  SIGTERM with an object waiting for a rank: clean exit\n");

	/* 7. again with a short lease */
	args[n++] = "--set";
	args[n++] = "daemon.lease_ms=600";
	args[n] = NULL;
	kvtd_start(sock_path, args);
	rd = open_client();
	test_stopped(rd, 108, 600);
	test_abandoned(rd, 109, 600);
	kvt_store_close(rd);
	kvtd_stop();
	test_rmdir(dir);
	printf("daemon_tp: ok\n");
	return 0;
}
