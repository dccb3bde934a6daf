/*
 * daemon_events.c - kvtierd's KV event stream (issue 13, docs/DAEMON.md "KV events"), seen
 * by a real subscriber: libzmq SUB and DEALER sockets, payloads decoded with msgpack-c.
 *  1. a workload that forces evictions in both tiers (a DRAM pool of 7 slots, an nvme tier
 *     of 1 MiB under 60 puts in chains of 6), removes, and reads that promote: the live stream has
 *     consecutive sequence numbers; a replay from 0 gives every batch, in order, with no
 *     gap, each live batch bit-identical to its replayed copy, then the end marker (-1);
 *  2. the events, applied in order, give exactly the store's state: for every key the
 *     fastest tier holding it (a lookup) is the one the events say, each tier's object
 *     count and eviction count equal those of kvt_stats, and the removed keys were
 *     announced as removed (reason "removed") from each tier;
 *  3. a malformed, oversized or unbindable endpoint, and an out-of-range queue size, stop
 *     kvtierd at start with a one-line error;
 *  4. with daemon.events_buffer=10 a replay from 0 answers the newest 10 batches only;
 *  5. a CLEAR of the daemon's store: the stream goes on in sequence with a BlockRemoved
 *     (reason "removed") for every object still resident, then one AllBlocksCleared per
 *     tier (dram, nvme), after which the events say nothing is held, and nothing is;
 *  6. a replay of more batches than a ZeroMQ pipe holds by default (1,000) answers every
 *     one, in order, and its end marker;
 *  7. a tcp:// endpoint that is not loopback stops kvtierd at start unless
 *     daemon.events_allow_remote; loopback ones (127.0.0.1, localhost) start;
 *  8. a peer that asks 20 times without reading gets one replay, the rest refused (busy);
 *  9. a flood of replay requests from peers that never read does not hold up the stream;
 * 10. 24 peers asking at once (16 replays run at a time) each get the whole replay;
 * 11. 81 asking at once and reading nothing: 16 run, 64 wait, one is refused (busy);
 * 12. a replay ends at the batch that was newest when it started.
 */
#include <fcntl.h>
#include <msgpack.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <zmq.h>

#include "daemon_client.h"
#include "engine.h"
#include "internal.h"
#include "lib/daemon_harness.h"

#define N_PUT 60
#define MAX_BATCHES 100000
#define EV_PER_BATCH_MAX 1024 /* events in one batch: 256 at most */

static char *dir, sock_path[100], ev_ep[160], replay_ep[160];

static void start_daemon(const char *extra) /* one more --set K=V */
{
	/* 7 DRAM slots of 36 KiB objects, nvme capped at 1 MiB (28 objects) */
	const char *args[] = {"--events", ev_ep, "--set", replay_ep,
			      "--set", "dram.bytes=256KiB",
			      "--set", "nvme.bytes=1MiB", "--set", extra, NULL};
	kvtd_start_test(sock_path, dir, args);
}

/* ---- messages */

struct batch {
	uint64_t seq;
	size_t len;
	char *buf;
};

/* Receive one multipart message of exactly nparts frames; frames >= 1 are returned
 * (malloc'ed) in out[]. 0, or -1 if nothing came within timeout_ms. */
static int recv_parts(void *sock, int nparts, int timeout_ms, zmq_msg_t *out)
{
	zmq_pollitem_t pi = {.socket = sock, .events = ZMQ_POLLIN};
	if (zmq_poll(&pi, 1, timeout_ms) <= 0)
		return -1;
	int n = 0, more = 1;
	while (more) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		CHECK(zmq_msg_recv(&m, sock, 0) >= 0);
		more = zmq_msg_more(&m);
		CHECKM(n < nparts, "a message with more than %d frames", nparts);
		out[n++] = m;
	}
	CHECKM(n == nparts, "a message of %d frames, expected %d", n, nparts);
	return 0;
}

static uint64_t seq_of(zmq_msg_t *m)
{
	CHECK_EQ(zmq_msg_size(m), 8);
	const uint8_t *p = zmq_msg_data(m);
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static struct batch take(uint64_t seq, zmq_msg_t *payload)
{
	struct batch b = {.seq = seq, .len = zmq_msg_size(payload)};
	b.buf = malloc(b.len);
	memcpy(b.buf, zmq_msg_data(payload), b.len);
	zmq_msg_close(payload);
	return b;
}

/* ---- decoding: just what the checks need, every type checked */

struct ev {
	bool stored;
	bool cleared; /* AllBlocksCleared: no key, tier and medium set */
	int tier;
	char reason[16], medium[16];
	uint64_t bytes;
	struct kvt_key key;
};

static const msgpack_object *get(const msgpack_object *map, const char *name)
{
	CHECK(map->type == MSGPACK_OBJECT_MAP);
	for (uint32_t i = 0; i < map->via.map.size; i++) {
		const msgpack_object_kv *kv = &map->via.map.ptr[i];
		if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == strlen(name) &&
		    !memcmp(kv->key.via.str.ptr, name, strlen(name)))
			return &kv->val;
	}
	return NULL;
}

static void str_of(const msgpack_object *o, char *out, size_t len)
{
	CHECK(o && o->type == MSGPACK_OBJECT_STR && o->via.str.size < len);
	memcpy(out, o->via.str.ptr, o->via.str.size);
	out[o->via.str.size] = 0;
}

/* Appends the batch's events to evs (n in/out). */
static void decode(const struct batch *b, const uint8_t *ns, struct ev *evs, size_t *n,
		   size_t cap)
{
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	size_t off = 0;
	CHECK(msgpack_unpack_next(&u, b->buf, b->len, &off) == MSGPACK_UNPACK_SUCCESS);
	CHECK_EQ(off, b->len);
	const msgpack_object *ts = get(&u.data, "ts"), *list = get(&u.data, "events");
	CHECK(ts && ts->type == MSGPACK_OBJECT_FLOAT64 && ts->via.f64 > 1.6e9);
	CHECK(list && list->type == MSGPACK_OBJECT_ARRAY && list->via.array.size > 0);
	for (uint32_t i = 0; i < list->via.array.size; i++) {
		const msgpack_object *o = &list->via.array.ptr[i];
		CHECK(*n < cap);
		struct ev *e = &evs[(*n)++];
		memset(e, 0, sizeof(*e));
		char type[32];
		str_of(get(o, "type"), type, sizeof(type));
		CHECKM(!strcmp(type, "BlockStored") || !strcmp(type, "BlockRemoved") ||
			       !strcmp(type, "AllBlocksCleared"),
		       "type %s", type);
		e->stored = !strcmp(type, "BlockStored");
		if (!strcmp(type, "AllBlocksCleared")) {
			e->cleared = true;
			const msgpack_object *t = get(o, "tier"), *nsp = get(o, "namespace");
			CHECK(t && t->type == MSGPACK_OBJECT_POSITIVE_INTEGER && t->via.u64 < 2);
			e->tier = (int)t->via.u64;
			CHECK(!get(o, "block_hashes"));
			CHECK(nsp && nsp->type == MSGPACK_OBJECT_BIN && nsp->via.bin.size == 32 &&
			      !memcmp(nsp->via.bin.ptr, ns, 32));
			str_of(get(o, "medium"), e->medium, sizeof(e->medium));
			CHECK(!strcmp(e->medium, e->tier == 0 ? "dram" : "nvme"));
			continue;
		}
		const msgpack_object *h = get(o, "block_hashes");
		CHECK(h && h->type == MSGPACK_OBJECT_ARRAY && h->via.array.size == 1);
		CHECK(h->via.array.ptr[0].type == MSGPACK_OBJECT_BIN &&
		      h->via.array.ptr[0].via.bin.size == KVT_KEY_BYTES);
		memcpy(e->key.bytes, h->via.array.ptr[0].via.bin.ptr, KVT_KEY_BYTES);
		const msgpack_object *t = get(o, "tier"), *by = get(o, "bytes"),
				     *nsp = get(o, "namespace");
		CHECK(t && t->type == MSGPACK_OBJECT_POSITIVE_INTEGER && t->via.u64 < 2);
		e->tier = (int)t->via.u64;
		CHECK(by && by->type == MSGPACK_OBJECT_POSITIVE_INTEGER);
		e->bytes = by->via.u64;
		CHECK(nsp && nsp->type == MSGPACK_OBJECT_BIN && nsp->via.bin.size == 32 &&
		      !memcmp(nsp->via.bin.ptr, ns, 32));
		str_of(get(o, "medium"), e->medium, sizeof(e->medium));
		CHECK(!strcmp(e->medium, e->tier == 0 ? "dram" : "nvme"));
		if (e->stored) {
			/* vLLM's fields a router decodes */
			const msgpack_object *bs = get(o, "block_size"), *p = get(o, "parent_block_hash");
			CHECK(bs && bs->type == MSGPACK_OBJECT_POSITIVE_INTEGER);
			CHECK(p && (p->type == MSGPACK_OBJECT_NIL || (p->type == MSGPACK_OBJECT_BIN &&
								     p->via.bin.size == 32)));
			CHECK(get(o, "token_ids") && get(o, "lora_id") && get(o, "lora_name"));
			CHECK(e->bytes == 36864); /* a full chunk's object, both tiers */
			if (e->tier == 0)
				CHECK_EQ(bs->via.u64, 16);
		} else {
			str_of(get(o, "reason"), e->reason, sizeof(e->reason));
			CHECKM(!strcmp(e->reason, "evicted") || !strcmp(e->reason, "removed"),
			       "reason %s", e->reason);
		}
	}
	msgpack_unpacked_destroy(&u);
}

/* Do the events of batches b[0..n) account for the store's state: per tier, the objects
 * the events leave resident and the evictions they announce equal kvt_stats'? The live
 * stream is read until they do (or a deadline), not merely until a quiet second: a
 * publisher paused for longer would otherwise end it early. */
static bool events_match_store(const struct batch *b, size_t n, const uint8_t *ns,
			       struct kvt_store *s)
{
	size_t cap = 100000, n_ev = 0;
	struct ev *evs = malloc(cap * sizeof(*evs));
	CHECK(evs);
	for (size_t i = 0; i < n; i++)
		decode(&b[i], ns, evs, &n_ev, cap);
	int64_t objs[2] = {0, 0};
	uint64_t evicted[2] = {0, 0};
	for (size_t i = 0; i < n_ev; i++) {
		if (evs[i].cleared)
			continue;
		objs[evs[i].tier] += evs[i].stored ? 1 : -1;
		evicted[evs[i].tier] += !evs[i].stored && !strcmp(evs[i].reason, "evicted");
	}
	free(evs);
	struct kvt_stats st;
	CHECK_RC(kvt_stats(s, &st), 0);
	for (int t = 0; t < 2; t++)
		if (objs[t] != (int64_t)st.tier[t].objects || evicted[t] != st.tier[t].evictions)
			return false;
	return true;
}

/* ---- 3. bad configurations */

/* What kvtd_start_test sets, for a daemon started by hand that must refuse one setting. */
#define COMMON_ARGS                                                                                \
	"--set", "model.layers=4", "--set", "model.kv_heads=2", "--set", "model.head_dim=64",      \
		"--set", "model.chunk_tokens=16", "--set", "model.name=test-model", "--set",       \
		"nvme.fsync=none", "--set", "store.deadline_floor_ms=2000"

/* Starts kvtierd with --set k=v (and --set also, K=V, unless NULL) by hand; returns once it
 * has exited (true, its status in *status) or listens on its socket (false: it started,
 * and was stopped again). Its stderr goes to dir/stderr. */
static bool run_daemon(const char *k, const char *v, const char *also, int *status)
{
	char d[300], out[300], arg[600];
	snprintf(d, sizeof(d), "%s/bad", dir);
	snprintf(out, sizeof(out), "%s/stderr", dir);
	snprintf(arg, sizeof(arg), "%s=%s", k, v);
	char sock2[150];
	snprintf(sock2, sizeof(sock2), "%s/bad.sock", dir);
	unlink(sock2);
	pid_t p = fork();
	if (p == 0) {
		int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(fd, 2);
		const char *argv[40] = {"kvtierd", "--dir", d, "--socket", sock2, "--set", arg,
					COMMON_ARGS};
		int n = 0;
		while (argv[n])
			n++;
		if (also) {
			argv[n++] = "--set";
			argv[n++] = also;
		}
		execv(kvtd_bin(), (char *const *)argv);
		_exit(127);
	}
	uint64_t t0 = test_now_ns();
	for (;;) {
		pid_t w = waitpid(p, status, WNOHANG);
		CHECK(w >= 0);
		if (w == p)
			return true;
		int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		CHECK(strlen(sock2) < sizeof(a.sun_path));
		memcpy(a.sun_path, sock2, strlen(sock2) + 1);
		bool up = connect(c, (struct sockaddr *)&a, sizeof(a)) == 0;
		close(c);
		if (up || test_ms_since(t0) > 60000) {
			kill(p, up ? SIGTERM : SIGKILL);
			CHECK(waitpid(p, status, 0) == p);
			CHECKM(up, "kvtierd neither exited nor listened within 60 s");
			return false;
		}
		usleep(20000);
	}
}

/* kvtierd with --set k=v (and also) must stop at start with one line naming k (or a bind
 * failure), and naming must too unless NULL. */
static void expect_refused_with(const char *what, const char *k, const char *v,
				const char *also, const char *must)
{
	int status;
	CHECKM(run_daemon(k, v, also, &status), "%s: kvtierd started with %s=%s", what, k, v);
	CHECKM(WIFEXITED(status) && WEXITSTATUS(status) == 2, "%s: status %d", what, status);
	char out[300];
	snprintf(out, sizeof(out), "%s/stderr", dir);
	FILE *f = fopen(out, "r");
	char line[1024], extra[1024];
	CHECK(f && fgets(line, sizeof(line), f));
	CHECKM(!fgets(extra, sizeof(extra), f), "%s: more than one line: %s%s", what, line, extra);
	fclose(f);
	CHECKM(strstr(line, k) || strstr(line, "cannot bind"), "%s: %s", what, line);
	CHECKM(!must || strstr(line, must), "%s: no '%s' in %s", what, must, line);
	CHECKM(strlen(line) < 300, "%s: a %zu-byte line", what, strlen(line));
	printf("  refused (%s): %s", what, line);
}

static void expect_refused(const char *what, const char *k, const char *v)
{
	expect_refused_with(what, k, v, NULL, NULL);
}

/* kvtierd with --set k=v (and also) starts. */
static void expect_started(const char *what, const char *k, const char *v, const char *also)
{
	int status;
	CHECKM(!run_daemon(k, v, also, &status), "%s: kvtierd exited (status %d) with %s=%s",
	       what, status, k, v);
	printf("  started (%s): %s=%s%s%s\n", what, k, v, also ? ", " : "", also ? also : "");
}

static void test_bad_config(void)
{
	char big[400];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	memcpy(big, "tcp://", 6);
	expect_refused("no scheme", "daemon.events", "127.0.0.1:5557");
	expect_refused("oversized", "daemon.events", big);
	expect_refused("space", "daemon.events", "tcp://127.0.0.1: 5557");
	expect_refused_with("unbindable", "daemon.events", "tcp://256.1.1.1:5557",
			    "daemon.events_allow_remote=true", "cannot bind");
	expect_refused("replay alone", "daemon.events_replay", "ipc:///tmp/x");
	expect_refused("queue too small", "daemon.events_queue", "3");
	expect_refused("oversized topic", "daemon.events_topic", big);

	/* 7. the stream names every tenant's cached blocks: loopback or ipc:// only, unless
	 * opted in (the old daemon bound all of these) */
	char ep[100], ipc_ev[200];
	snprintf(ipc_ev, sizeof(ipc_ev), "daemon.events=ipc://%s/bad-events", dir);
	snprintf(ep, sizeof(ep), "tcp://0.0.0.0:%d", kvtd_free_port());
	expect_refused_with("any address", "daemon.events", ep, NULL, "allow_remote");
	snprintf(ep, sizeof(ep), "tcp://*:%d", kvtd_free_port());
	expect_refused_with("any interface", "daemon.events", ep, NULL, "allow_remote");
	expect_refused_with("replay on any address", "daemon.events_replay", ep, ipc_ev,
			    "allow_remote");
	expect_started("opted in", "daemon.events", ep, "daemon.events_allow_remote=true");
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", kvtd_free_port());
	expect_started("loopback", "daemon.events", ep, NULL);
	int s6 = socket(AF_INET6, SOCK_STREAM, 0);
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	if (s6 >= 0 && bind(s6, (struct sockaddr *)&a6, sizeof(a6)) == 0) {
		socklen_t l = sizeof(a6);
		CHECK(getsockname(s6, (struct sockaddr *)&a6, &l) == 0);
		snprintf(ep, sizeof(ep), "tcp://[::1]:%d", ntohs(a6.sin6_port));
		close(s6);
		expect_started("IPv6 loopback replay", "daemon.events_replay", ep, ipc_ev);
	} else {
		printf("  no IPv6 loopback here: tcp://[::1] not tried\n");
		if (s6 >= 0)
			close(s6);
	}
}

/* ---- 4. the replay buffer keeps the newest batches only: with daemon.events_buffer=10,
 * a replay from 0 after 40 puts answers exactly the newest 10, in order, then -1. The
 * publisher puts whatever is queued into one batch, so a lagging one (a slow machine)
 * would make fewer batches than puts: each put waits until a batch newer than the last
 * one seen is out (a replay from there answers it), so 40 puts make at least 40. */

/* Replay from sequence `from`: returns how many batches came (consecutive, none before
 * from), the first and the last in *first and *last. */
static uint64_t replay_from(void *dealer, uint64_t from, uint64_t *first, uint64_t *last)
{
	uint8_t f[8];
	for (int i = 0; i < 8; i++)
		f[i] = (uint8_t)(from >> (56 - 8 * i));
	CHECK(zmq_send(dealer, "", 0, ZMQ_SNDMORE) == 0);
	CHECK(zmq_send(dealer, f, 8, 0) == 8);
	zmq_msg_t parts[3];
	uint64_t n = 0;
	for (;;) {
		CHECKM(recv_parts(dealer, 3, 30000, parts) == 0, "replay from %llu: no answer after %llu batches",
		       (unsigned long long)from, (unsigned long long)n);
		uint64_t seq = seq_of(&parts[1]);
		for (int i = 0; i < 3; i++)
			zmq_msg_close(&parts[i]);
		if (seq == UINT64_MAX)
			break;
		CHECKM(n ? seq == *last + 1 : seq >= from, "replay from %llu: %llu after %llu",
		       (unsigned long long)from, (unsigned long long)seq,
		       (unsigned long long)(n ? *last : from));
		if (!n)
			*first = seq;
		*last = seq;
		n++;
	}
	return n;
}

static void test_replay_bound(void *zc, struct kvt_store *s)
{
	void *dealer = zmq_socket(zc, ZMQ_DEALER);
	CHECK(zmq_connect(dealer, strchr(replay_ep, '=') + 1) == 0);
	size_t len = kvt_payload_bytes(kvt_store_geometry(s), 16);
	void *buf = malloc(len);
	uint64_t next = 0, first = 0, last = 0; /* next: the first batch not seen yet */
	for (int i = 0; i < 40; i++) {
		struct kvt_key k;
		memset(&k, 0, sizeof(k));
		k.bytes[0] = (uint8_t)i;
		k.bytes[1] = 0xb0;
		test_fill(buf, len, (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &k, NULL, 16, buf, len), 0);
		uint64_t t0 = test_now_ns();
		while (!replay_from(dealer, next, &first, &last)) {
			CHECKM(test_ms_since(t0) < 30000, "put %d: no new batch within 30 s", i);
			usleep(2000);
		}
		next = last + 1;
	}
	free(buf);
	uint64_t n = replay_from(dealer, 0, &first, &last);
	printf("  replay with daemon.events_buffer=10: batches %llu..%llu, the newest seen %llu\n",
	       (unsigned long long)first, (unsigned long long)last, (unsigned long long)(next - 1));
	CHECK_EQ(n, 10);
	CHECKM(last >= next - 1, "the replay ends before the newest batch seen");
	CHECKM(first >= 30, "40 puts made at least 40 batches: the oldest are gone");
	zmq_close(dealer);
}

/* ---- 6. a replay longer than a ZeroMQ pipe's default high-water mark (1,000 messages):
 * a ROUTER drops what does not fit, silently, so a replay of the 10,000-batch default
 * buffer used to answer ~2,000 batches with gaps and no end marker. Now every batch comes,
 * in order, then -1 (replay_from checks both). */
static void test_replay_long(void *zc, struct kvt_store *s)
{
	size_t len = kvt_payload_bytes(kvt_store_geometry(s), 16);
	void *buf = malloc(len);
	test_fill(buf, len, 5);
	for (int i = 0; i < 2000; i++) {
		struct kvt_key k;
		memset(&k, 0, sizeof(k));
		memcpy(k.bytes, &i, sizeof(i));
		k.bytes[31] = 0xc5;
		CHECK_RC(kvt_put_sync(s, &k, NULL, 16, buf, len), 0);
		if (i % 2)
			usleep(300); /* let the publisher cut separate batches */
	}
	free(buf);
	usleep(300 * 1000);
	void *dealer = zmq_socket(zc, ZMQ_DEALER);
	CHECK(zmq_connect(dealer, strchr(replay_ep, '=') + 1) == 0);
	uint64_t first = 0, last = 0;
	uint64_t n = replay_from(dealer, 0, &first, &last);
	printf("  a long replay: %llu batches (%llu..%llu), then the end marker\n",
	       (unsigned long long)n, (unsigned long long)first, (unsigned long long)last);
	CHECKM(n > 1200, "too few batches (%llu) to pass the pipe's default bound",
	       (unsigned long long)n);
	CHECK_EQ(first, 0);
	CHECK_EQ(n, last + 1);
	zmq_close(dealer);
}

/* ---- 8. one replay per peer: a peer that asks 20 times before it reads gets one replay,
 * whole, then its end marker; the other requests are refused with the busy marker (-2)
 * where its queue has room. The old daemon queued a copy of the buffer for every request
 * its ROUTER's high-water mark held (4 x daemon.events_buffer messages: 4 copies in the
 * last run), memory for each peer that asks and does not read. */
#define SEQ_BUSY (UINT64_MAX - 1)

static void test_replay_one_per_peer(void *zc)
{
	void *dealer = zmq_socket(zc, ZMQ_DEALER);
	CHECK(zmq_connect(dealer, strchr(replay_ep, '=') + 1) == 0);
	uint64_t first = 0, last = 0;
	uint64_t n_hist = replay_from(dealer, 0, &first, &last);
	uint8_t zero[8] = {0};
	for (int i = 0; i < 20; i++) {
		CHECK(zmq_send(dealer, "", 0, ZMQ_SNDMORE) == 0);
		CHECK(zmq_send(dealer, zero, 8, 0) == 8);
	}
	usleep(500 * 1000); /* the daemon takes the requests; the peer reads nothing yet */
	uint64_t n = 0, ends = 0, busy = 0, prev = 0;
	zmq_msg_t parts[3];
	while (recv_parts(dealer, 3, 2000, parts) == 0) {
		uint64_t seq = seq_of(&parts[1]);
		for (int i = 0; i < 3; i++)
			zmq_msg_close(&parts[i]);
		if (seq == UINT64_MAX) {
			ends++;
		} else if (seq == SEQ_BUSY) {
			busy++;
		} else {
			CHECKM(ends || (n ? seq == prev + 1 : seq == first),
			       "20 requests: batch %llu after %llu", (unsigned long long)seq,
			       (unsigned long long)(n ? prev : first));
			prev = seq;
			n++;
		}
	}
	printf("  20 requests before reading: %llu batches, %llu end markers, %llu busy (a "
	       "replay: %llu batches)\n", (unsigned long long)n, (unsigned long long)ends,
	       (unsigned long long)busy, (unsigned long long)n_hist);
	CHECKM(ends == 1, "%llu end markers: a replay was queued for each request",
	       (unsigned long long)ends);
	CHECK_EQ(n, n_hist);
	CHECKM(busy >= 1 && busy <= 19, "%llu busy markers", (unsigned long long)busy);
	zmq_close(dealer);
}

/* ---- 10. more peers than replays run at once (16), each asking once before any reads:
 * every one gets the whole replay, in order, and its end marker, none a busy marker - the
 * 8 past the 16 wait for a place. Until 2026-12-04 they were refused with -2, which
 * vLLM's subscribers do not know. All are read round-robin, so none stalls 5 s. */
#define N_QUEUED 24

static void test_replay_queued(void *zc)
{
	void *d[N_QUEUED];
	uint64_t n[N_QUEUED] = {0}, prev[N_QUEUED] = {0}, ends[N_QUEUED] = {0};
	uint64_t busy = 0, first = 0, last = 0;
	void *probe = zmq_socket(zc, ZMQ_DEALER);
	CHECK(zmq_connect(probe, strchr(replay_ep, '=') + 1) == 0);
	uint64_t n_hist = replay_from(probe, 0, &first, &last);
	zmq_close(probe);
	CHECK(n_hist > 0);
	uint8_t zero[8] = {0};
	zmq_pollitem_t pi[N_QUEUED];
	for (int i = 0; i < N_QUEUED; i++) {
		d[i] = zmq_socket(zc, ZMQ_DEALER);
		CHECK(zmq_connect(d[i], strchr(replay_ep, '=') + 1) == 0);
		pi[i] = (zmq_pollitem_t){.socket = d[i], .events = ZMQ_POLLIN};
	}
	for (int i = 0; i < N_QUEUED; i++) {
		CHECK(zmq_send(d[i], "", 0, ZMQ_SNDMORE) == 0);
		CHECK(zmq_send(d[i], zero, 8, 0) == 8);
	}
	usleep(300 * 1000); /* the daemon takes every request before anyone reads */
	uint64_t t0 = test_now_ns();
	int done = 0;
	while (done < N_QUEUED && test_ms_since(t0) < 60000) {
		if (zmq_poll(pi, N_QUEUED, 1000) <= 0)
			continue;
		for (int i = 0; i < N_QUEUED; i++) {
			zmq_msg_t parts[3];
			if (!(pi[i].revents & ZMQ_POLLIN) || recv_parts(d[i], 3, 0, parts))
				continue;
			uint64_t seq = seq_of(&parts[1]);
			for (int j = 0; j < 3; j++)
				zmq_msg_close(&parts[j]);
			if (seq == SEQ_BUSY) {
				busy++;
			} else if (seq == UINT64_MAX) {
				ends[i]++;
				done++;
			} else {
				CHECKM(n[i] ? seq == prev[i] + 1 : seq == first,
				       "peer %d: batch %llu after %llu", i, (unsigned long long)seq,
				       (unsigned long long)(n[i] ? prev[i] : first));
				prev[i] = seq;
				n[i]++;
			}
		}
	}
	int whole = 0;
	for (int i = 0; i < N_QUEUED; i++)
		whole += ends[i] == 1 && n[i] == n_hist;
	printf("  %d peers asking at once (16 run at a time): %d got the whole replay (%llu "
	       "batches) and its end marker, %llu busy markers\n",
	       N_QUEUED, whole, (unsigned long long)n_hist, (unsigned long long)busy);
	CHECK_EQ(busy, 0); /* was 8 */
	CHECK_EQ(whole, N_QUEUED);
	for (int i = 0; i < N_QUEUED; i++)
		zmq_close(d[i]);
}

/* ---- 11. the queue is bounded: 81 peers ask at once and read nothing, 16 replays start,
 * 64 requests wait, and exactly one peer is refused with the busy marker. Closing them all
 * frees every place: a peer asking after that gets its replay. */
#define N_FULL (16 + 64 + 1)

static void test_replay_queue_full(void *zc)
{
	void *d[N_FULL];
	uint8_t zero[8] = {0};
	int linger = 0;
	for (int i = 0; i < N_FULL; i++) {
		d[i] = zmq_socket(zc, ZMQ_DEALER);
		zmq_setsockopt(d[i], ZMQ_LINGER, &linger, sizeof(linger));
		CHECK(zmq_connect(d[i], strchr(replay_ep, '=') + 1) == 0);
	}
	usleep(200 * 1000); /* connected before any request: the daemon sees all 81 */
	for (int i = 0; i < N_FULL; i++) {
		CHECK(zmq_send(d[i], "", 0, ZMQ_SNDMORE) == 0);
		CHECK(zmq_send(d[i], zero, 8, 0) == 8);
	}
	/* Taken 4 a pass, each running replay's first batch sent: polled (a sanitizer's daemon
	 * is slower than the 1 s once slept here) until 16 run and one was refused, and for
	 * 300 ms more, to see no seventeenth start. Within 4 s: no replay stalls yet (5 s). */
	int busy = 0, running = 0, quiet = 0;
	bool answered[N_FULL] = {false};
	uint64_t t_sent = test_now_ns(), t_full = 0;
	while (test_ms_since(t_sent) < 4000 && (!t_full || test_ms_since(t_full) < 300)) {
		for (int i = 0; i < N_FULL; i++) {
			zmq_msg_t parts[3];
			if (answered[i] || recv_parts(d[i], 3, 0, parts))
				continue;
			answered[i] = true;
			uint64_t seq = seq_of(&parts[1]);
			for (int j = 0; j < 3; j++)
				zmq_msg_close(&parts[j]);
			busy += seq == SEQ_BUSY;
			running += seq != SEQ_BUSY && seq != UINT64_MAX;
		}
		if (!t_full && running >= 16 && busy >= 1)
			t_full = test_now_ns();
		usleep(20 * 1000);
	}
	for (int i = 0; i < N_FULL; i++)
		quiet += !answered[i];
	printf("  %d peers asking at once, reading nothing: %d replays running, %d waiting, %d "
	       "busy\n", N_FULL, running, quiet, busy);
	CHECK_EQ(running, 16);
	CHECK_EQ(quiet, 64);
	CHECK_EQ(busy, 1);
	for (int i = 0; i < N_FULL; i++)
		zmq_close(d[i]);
	/* A peer asking now, as a client should, asks again after a busy marker: the queue
	 * stays full until the daemon has found the dead peers gone - at once where a send
	 * fails (EHOSTUNREACH), else by the 5 s stall, 16 at a time (up to 25 s, longer on a
	 * loaded machine). */
	void *late = zmq_socket(zc, ZMQ_DEALER);
	CHECK(zmq_connect(late, strchr(replay_ep, '=') + 1) == 0);
	uint64_t t0 = test_now_ns(), seq = SEQ_BUSY;
	int asked = 0;
	while (seq == SEQ_BUSY && test_ms_since(t0) < 90000) {
		CHECK(zmq_send(late, "", 0, ZMQ_SNDMORE) == 0);
		CHECK(zmq_send(late, zero, 8, 0) == 8);
		asked++;
		zmq_msg_t parts[3];
		CHECKM(recv_parts(late, 3, 90000, parts) == 0, "no answer after the 81 peers left");
		seq = seq_of(&parts[1]);
		for (int j = 0; j < 3; j++)
			zmq_msg_close(&parts[j]);
		if (seq == SEQ_BUSY)
			usleep(500 * 1000);
	}
	printf("  a peer asking after they left: its replay began after %.1f s (%d requests)\n",
	       test_ms_since(t0) / 1000.0, asked);
	CHECKM(seq != SEQ_BUSY, "still busy 90 s after the 81 peers left");
	zmq_close(late);
}

/* ---- 12. a replay ends at what the buffer held when it started: batches published while
 * it runs reach the peer on the live stream, not in the replay. Until 2026-12-04 a replay
 * followed the stream's head, so one to a peer reading slower than batches were published
 * never ended, and held one of the 16 places for good. Here the peer asks, reads nothing
 * while 8 puts publish new batches (its replay, thousands of batches, cannot finish
 * before: 256 fit in its queue), then reads: the newest replayed is older than them. */
static void test_replay_snapshot(void *zc, struct kvt_store *s)
{
	void *dealer = zmq_socket(zc, ZMQ_DEALER);
	CHECK(zmq_connect(dealer, strchr(replay_ep, '=') + 1) == 0);
	uint64_t first = 0, last = 0;
	uint64_t n0 = replay_from(dealer, 0, &first, &last);
	CHECKM(n0 > 1000, "a replay of %llu batches: too short to be running during the puts",
	       (unsigned long long)n0);
	uint64_t before = last; /* the newest batch when the replay starts */
	uint8_t zero[8] = {0};
	CHECK(zmq_send(dealer, "", 0, ZMQ_SNDMORE) == 0);
	CHECK(zmq_send(dealer, zero, 8, 0) == 8);
	usleep(200 * 1000);
	size_t len = kvt_payload_bytes(kvt_store_geometry(s), 16);
	void *buf = malloc(len);
	for (int i = 0; i < 8; i++) {
		struct kvt_key k;
		memset(&k, 0, sizeof(k));
		k.bytes[0] = (uint8_t)i;
		k.bytes[31] = 0xd7;
		test_fill(buf, len, (uint64_t)i + 700);
		CHECK_RC(kvt_put_sync(s, &k, NULL, 16, buf, len), 0);
		usleep(20 * 1000); /* a batch each */
	}
	free(buf);
	usleep(200 * 1000);
	uint64_t n = 0, newest = 0, ends = 0;
	zmq_msg_t parts[3];
	while (!ends && recv_parts(dealer, 3, 10000, parts) == 0) {
		uint64_t seq = seq_of(&parts[1]);
		for (int i = 0; i < 3; i++)
			zmq_msg_close(&parts[i]);
		if (seq == UINT64_MAX)
			ends++;
		else
			newest = seq, n++;
	}
	CHECK(replay_from(dealer, before + 1, &first, &last) > 0); /* the puts made batches */
	printf("  a replay started at batch %llu: %llu batches, the newest %llu, then its end "
	       "marker; batches published meanwhile: %llu..%llu\n",
	       (unsigned long long)before, (unsigned long long)n, (unsigned long long)newest,
	       (unsigned long long)first, (unsigned long long)last);
	CHECK_EQ(ends, 1);
	CHECKM(newest <= before, "the replay went on to batch %llu, published after it started "
	       "(%llu)", (unsigned long long)newest, (unsigned long long)before);
	zmq_close(dealer);
}

/* ---- 9. a flood of replay requests (two peers that ask as fast as they can and never
 * read) while the store changes: every put's event is published within 3 s. The old daemon
 * served every waiting request before it published again, and the flood never let the
 * queue empty: nothing was published while it lasted. */
struct flood {
	void *zc;
	atomic_bool stop;
	atomic_uint_fast64_t sent;
};

static void *flood_main(void *arg)
{
	struct flood *f = arg;
	void *d[2];
	uint8_t zero[8] = {0};
	int linger = 0;
	for (int i = 0; i < 2; i++) {
		d[i] = zmq_socket(f->zc, ZMQ_DEALER);
		zmq_setsockopt(d[i], ZMQ_LINGER, &linger, sizeof(linger));
		CHECK(zmq_connect(d[i], strchr(replay_ep, '=') + 1) == 0);
	}
	while (!atomic_load(&f->stop)) {
		bool any = false;
		for (int i = 0; i < 2; i++)
			if (zmq_send(d[i], "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) == 0) {
				zmq_send(d[i], zero, 8, ZMQ_DONTWAIT);
				atomic_fetch_add(&f->sent, 1);
				any = true;
			}
		if (!any)
			usleep(200);
	}
	for (int i = 0; i < 2; i++)
		zmq_close(d[i]);
	return NULL;
}

static void test_replay_flood(void *zc, struct kvt_store *s)
{
	void *sub = zmq_socket(zc, ZMQ_SUB);
	CHECK(zmq_connect(sub, ev_ep) == 0);
	CHECK(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0) == 0);
	usleep(300000);
	struct flood f = {.zc = zc};
	pthread_t th;
	CHECK(pthread_create(&th, NULL, flood_main, &f) == 0);
	usleep(300000); /* the flood is on */
	uint8_t ns[KVT_NS_ID_BYTES];
	memcpy(ns, kvt_store_ns_id(s), sizeof(ns));
	size_t len = kvt_payload_bytes(kvt_store_geometry(s), 16);
	void *buf = malloc(len);
	struct ev *evs = malloc(EV_PER_BATCH_MAX * sizeof(*evs));
	CHECK(buf && evs);
	double worst = 0;
	for (int i = 0; i < 20; i++) {
		struct kvt_key k, sk;
		memset(&k, 0, sizeof(k));
		k.bytes[0] = (uint8_t)i;
		k.bytes[31] = 0xf1;
		test_fill(buf, len, (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &k, NULL, 16, buf, len), 0);
		kvt_storage_key(ns, &k, &sk);
		uint64_t t0 = test_now_ns();
		bool seen = false;
		while (!seen) {
			zmq_msg_t parts[3];
			int left = 3000 - (int)test_ms_since(t0);
			CHECKM(left > 0 && recv_parts(sub, 3, left, parts) == 0,
			       "put %d: not published within 3 s during a flood of %llu replay "
			       "requests", i, (unsigned long long)atomic_load(&f.sent));
			zmq_msg_close(&parts[0]);
			struct batch b = take(seq_of(&parts[1]), &parts[2]);
			zmq_msg_close(&parts[1]);
			size_t n_ev = 0;
			decode(&b, ns, evs, &n_ev, EV_PER_BATCH_MAX);
			for (size_t j = 0; j < n_ev; j++)
				seen |= evs[j].stored && evs[j].tier == 0 &&
					kvt__key_eq(&evs[j].key, &sk);
			free(b.buf);
		}
		if (test_ms_since(t0) > worst)
			worst = test_ms_since(t0);
		usleep(50000);
	}
	atomic_store(&f.stop, true);
	CHECK(pthread_join(th, NULL) == 0);
	printf("  a flood of %llu replay requests from 2 peers that never read: every put "
	       "published within %.0f ms\n", (unsigned long long)atomic_load(&f.sent), worst);
	free(evs);
	free(buf);
	zmq_close(sub);
}

/* ---- 1, 2 */

static void key_of(uint64_t i, struct kvt_key *k)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->bytes, &i, sizeof(i));
	k->bytes[31] = 0xe7;
}

int main(void)
{
	dir = test_tmpdir("daemon_events");
	snprintf(sock_path, sizeof(sock_path), "%s/kvtierd.sock", dir);
	snprintf(ev_ep, sizeof(ev_ep), "ipc://%s/events", dir);
	snprintf(replay_ep, sizeof(replay_ep), "daemon.events_replay=ipc://%s/replay", dir);
	signal(SIGPIPE, SIG_IGN);
	test_bad_config();
	start_daemon("daemon.events_buffer=10000");

	void *zc = zmq_ctx_new();
	void *sub = zmq_socket(zc, ZMQ_SUB);
	CHECK(zmq_connect(sub, ev_ep) == 0);
	CHECK(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0) == 0);
	usleep(300000); /* let the subscription reach the publisher; replay covers the rest */

	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "store.daemon", sock_path);
	struct kvt_store *s;
	CHECK_RC(kvt_store_open(c, &s), 0);
	kvt_config_destroy(c);
	uint8_t ns[KVT_NS_ID_BYTES];
	memcpy(ns, kvt_store_ns_id(s), sizeof(ns));
	size_t len = kvt_payload_bytes(kvt_store_geometry(s), 16);
	void *buf = malloc(len);
	struct kvt_key keys[N_PUT];
	for (int i = 0; i < N_PUT; i++) {
		key_of((uint64_t)i, &keys[i]);
		test_fill(buf, len, (uint64_t)i);
		/* chains of 6: nvme evicts whole chains from their ends, never a live prefix */
		CHECK_RC(kvt_put_sync(s, &keys[i], i % 6 ? &keys[i - 1] : NULL, 16, buf, len), 0);
	}
	/* removes: the newest (in DRAM and nvme) and one in the middle (nvme only, or gone) */
	const int removed[] = {N_PUT - 1, 45};
	for (size_t i = 0; i < 2; i++)
		CHECK(kvt_remove_sync(s, &keys[removed[i]]) >= 0);
	/* reads of chunks only nvme holds: promoted back into DRAM, evicting others */
	int promoted = 0;
	for (int i = 0; i < N_PUT && promoted < 4; i++) {
		int8_t tier = KVT_TIER_NONE;
		if (kvt_lookup_sync(s, &keys[i], 1, &tier) != 1 || tier != 1)
			continue;
		struct kvt_result res;
		CHECK_RC(kvt_get_sync(s, &keys[i], 0, 0, buf, len, &res), 0);
		CHECK(test_check(buf, len, (uint64_t)i));
		promoted++;
	}
	CHECK_EQ(promoted, 4);
	CHECK_RC(kvt_flush_sync(s), 0);

	/* live stream, until the events account for the store's state and a second passes
	 * quiet (nothing more may come), for up to 30 s */
	static struct batch live[MAX_BATCHES], all[MAX_BATCHES];
	size_t n_live = 0;
	zmq_msg_t parts[4];
	uint64_t live_end = kvt__now_ns() + 30000000000ull;
	for (;;) {
		if (recv_parts(sub, 3, 1000, parts) < 0) {
			if (events_match_store(live, n_live, ns, s) || kvt__now_ns() > live_end)
				break;
			continue;
		}
		CHECK_EQ(zmq_msg_size(&parts[0]), 0); /* the default topic: "" */
		zmq_msg_close(&parts[0]);
		uint64_t seq = seq_of(&parts[1]);
		zmq_msg_close(&parts[1]);
		CHECK(n_live < MAX_BATCHES);
		if (n_live)
			CHECKM(seq == live[n_live - 1].seq + 1, "live gap: %llu after %llu",
			       (unsigned long long)seq, (unsigned long long)live[n_live - 1].seq);
		live[n_live++] = take(seq, &parts[2]);
	}
	CHECKM(n_live > 0, "the subscriber received nothing");

	/* replay from 0: every batch, in order, then -1 */
	void *dealer = zmq_socket(zc, ZMQ_DEALER);
	char rep_ep[160];
	snprintf(rep_ep, sizeof(rep_ep), "%s", strchr(replay_ep, '=') + 1);
	CHECK(zmq_connect(dealer, rep_ep) == 0);
	uint8_t zero[8] = {0};
	CHECK(zmq_send(dealer, "", 0, ZMQ_SNDMORE) == 0);
	CHECK(zmq_send(dealer, zero, 8, 0) == 8);
	size_t n_all = 0;
	for (;;) {
		CHECKM(recv_parts(dealer, 3, 30000, parts) == 0, "replay: no answer");
		CHECK_EQ(zmq_msg_size(&parts[0]), 0);
		zmq_msg_close(&parts[0]);
		uint64_t seq = seq_of(&parts[1]);
		zmq_msg_close(&parts[1]);
		if (seq == UINT64_MAX) {
			CHECK_EQ(zmq_msg_size(&parts[2]), 0);
			zmq_msg_close(&parts[2]);
			break;
		}
		CHECKM(seq == n_all, "replay: batch %llu where %zu was due", (unsigned long long)seq,
		       n_all);
		CHECK(n_all < MAX_BATCHES);
		all[n_all++] = take(seq, &parts[2]);
	}
	CHECKM(n_all == live[n_live - 1].seq + 1, "replay gave %zu batches, the last live was %llu",
	       n_all, (unsigned long long)live[n_live - 1].seq);
	for (size_t i = 0; i < n_live; i++) {
		const struct batch *a = &all[live[i].seq];
		CHECK(a->len == live[i].len && !memcmp(a->buf, live[i].buf, a->len));
	}

	/* apply the events in order */
	size_t cap = 100000, n_ev = 0;
	struct ev *evs = malloc(cap * sizeof(*evs));
	for (size_t i = 0; i < n_all; i++)
		decode(&all[i], ns, evs, &n_ev, cap);
	struct kvt_key sk[N_PUT];
	for (int i = 0; i < N_PUT; i++)
		kvt_storage_key(ns, &keys[i], &sk[i]);
	bool in[2][N_PUT] = {{0}};
	uint64_t evicted[2] = {0}, stored[2] = {0}, removed_ev[2][N_PUT] = {{0}};
	for (size_t i = 0; i < n_ev; i++) {
		CHECKM(!evs[i].cleared, "event %zu: AllBlocksCleared before any clear", i);
		int k = -1;
		for (int j = 0; j < N_PUT; j++)
			if (kvt__key_eq(&evs[i].key, &sk[j]))
				k = j;
		CHECKM(k >= 0, "event %zu names a key never put", i);
		int t = evs[i].tier;
		if (evs[i].stored) {
			stored[t]++;
			in[t][k] = true;
		} else {
			CHECKM(in[t][k], "event %zu: %s removed from %s while absent", i, evs[i].reason,
			       evs[i].medium);
			in[t][k] = false;
			if (!strcmp(evs[i].reason, "evicted"))
				evicted[t]++;
			else
				removed_ev[t][k]++;
		}
	}
	/* against the store */
	struct kvt_stats st;
	CHECK_RC(kvt_stats(s, &st), 0);
	for (int t = 0; t < 2; t++) {
		uint64_t objs = 0;
		for (int k = 0; k < N_PUT; k++)
			objs += in[t][k];
		printf("  %s: %llu stored, %llu evicted, %llu resident by the events; the store: "
		       "%llu objects, %llu evictions\n",
		       st.tier[t].name, (unsigned long long)stored[t], (unsigned long long)evicted[t],
		       (unsigned long long)objs, (unsigned long long)st.tier[t].objects,
		       (unsigned long long)st.tier[t].evictions);
		CHECK_EQ(objs, st.tier[t].objects);
		CHECK_EQ(evicted[t], st.tier[t].evictions);
		CHECKM(evicted[t] >= 20, "the workload should force evictions in %s",
		       st.tier[t].name);
	}
	for (int k = 0; k < N_PUT; k++) {
		int8_t tier = KVT_TIER_NONE;
		int hit = kvt_lookup_sync(s, &keys[k], 1, &tier);
		int want = in[0][k] ? 0 : in[1][k] ? 1 : KVT_TIER_NONE;
		CHECKM((hit == 1 ? tier : KVT_TIER_NONE) == want,
		       "key %d: the store has it in tier %d, the events say %d", k,
		       hit == 1 ? tier : -1, want);
	}
	/* the newest chunk was in DRAM and nvme when removed */
	CHECK_EQ(removed_ev[0][N_PUT - 1], 1);
	CHECK_EQ(removed_ev[1][N_PUT - 1], 1);
	CHECK(!in[0][45] && !in[1][45]);

	/* 5. clear: the removals of what is resident, then AllBlocksCleared per tier, in
	 * sequence after the last live batch */
	uint64_t resident = 0, n_removed = 0;
	for (int t = 0; t < 2; t++)
		for (int k = 0; k < N_PUT; k++)
			resident += in[t][k];
	CHECK(resident > 0);
	CHECK_RC(kvt__client_clear_sync(kvt__store_client(s), &n_removed), 0);
	CHECK(n_removed > 0);
	uint64_t last = live[n_live - 1].seq;
	size_t n_cl = 0, cleared_at[2] = {0, 0};
	int n_cleared = 0;
	struct ev *cev = malloc(cap * sizeof(*cev));
	/* up to 30 s for the two AllBlocksCleared (a slow machine), then until quiet for 1 s:
	 * nothing may follow them */
	int seen_cleared = 0;
	while (recv_parts(sub, 3, seen_cleared < 2 ? 30000 : 1000, parts) == 0) {
		zmq_msg_close(&parts[0]);
		uint64_t seq = seq_of(&parts[1]);
		zmq_msg_close(&parts[1]);
		CHECKM(seq == last + 1, "clear: batch %llu after %llu", (unsigned long long)seq,
		       (unsigned long long)last);
		last = seq;
		struct batch b = take(seq, &parts[2]);
		size_t from = n_cl;
		decode(&b, ns, cev, &n_cl, cap);
		for (size_t i = from; i < n_cl; i++)
			seen_cleared += cev[i].cleared;
		free(b.buf);
	}
	for (size_t i = 0; i < n_cl; i++) {
		int t = cev[i].tier;
		if (cev[i].cleared) {
			for (int k = 0; k < N_PUT; k++)
				CHECKM(!in[t][k], "AllBlocksCleared of %s while key %d is there",
				       cev[i].medium, k);
			cleared_at[t] = i;
			n_cleared++;
			continue;
		}
		int k = -1;
		for (int j = 0; j < N_PUT; j++)
			if (kvt__key_eq(&cev[i].key, &sk[j]))
				k = j;
		CHECKM(k >= 0 && !cev[i].stored && !strcmp(cev[i].reason, "removed") && in[t][k],
		       "clear: event %zu is not the removal of a resident key", i);
		in[t][k] = false;
	}
	CHECK_EQ(n_cleared, 2); /* dram and nvme, once each, and last */
	CHECK(cleared_at[0] >= n_cl - 2 && cleared_at[1] >= n_cl - 2);
	CHECK_EQ(n_cl, resident + 2);
	for (int k = 0; k < N_PUT; k++)
		CHECK_RC(kvt_lookup_sync(s, &keys[k], 1, NULL), 0);
	CHECK_RC(kvt_stats(s, &st), 0);
	CHECK(st.tier[0].objects == 0 && st.tier[1].objects == 0);
	printf("  clear: %llu objects removed, %zu events, then AllBlocksCleared for dram and "
	       "nvme\n", (unsigned long long)n_removed, n_cl);
	free(cev);

	kvt_store_close(s);
	kvtd_stop();
	zmq_close(sub);
	zmq_close(dealer);

	/* 4. a daemon with a small replay buffer; 6. a replay of more batches than a pipe
	 * holds by default; 8. one replay per peer; 9. a flood of replay requests */
	const char *replay_sets[2] = {"daemon.events_buffer=10", "daemon.events_buffer=10000"};
	for (int i = 0; i < 2; i++) {
		start_daemon(replay_sets[i]);
		c = test_config("dram,nvme", dir);
		test_set(c, "store.daemon", sock_path);
		CHECK_RC(kvt_store_open(c, &s), 0);
		kvt_config_destroy(c);
		if (i == 0) {
			test_replay_bound(zc, s);
		} else {
			test_replay_long(zc, s);
			test_replay_one_per_peer(zc);
			test_replay_queued(zc);
			test_replay_queue_full(zc);
			test_replay_snapshot(zc, s);
			test_replay_flood(zc, s);
		}
		kvt_store_close(s);
		kvtd_stop();
	}
	zmq_ctx_term(zc);
	for (size_t i = 0; i < n_live; i++)
		free(live[i].buf);
	for (size_t i = 0; i < n_all; i++)
		free(all[i].buf);
	free(evs);
	free(buf);
	test_rmdir(dir);
	printf("daemon_events: ok (%zu batches, %zu events)\n", n_all, n_ev);
	return 0;
}
