/*
 * daemon_leases.c - kvtierd's leases and quarantine (docs/DAEMON.md "Leases and
 * quarantine"), with the real daemon binary, daemon.lease_ms=300 (1 s under a sanitizer) and 7 DRAM slots. Why: a
 * client that stops (SIGSTOP, a debugger, swap) while it holds part of the shared pool must
 * neither starve the others nor, once it resumes, read or write bytes that are no longer
 * its own.
 *  1. A client process stopped while it holds two pins and a half-written reservation:
 *     other clients keep putting and getting, exact bytes, each call well within its
 *     deadline; the expiry counters rise; the pins go back to the pool; the reservation's
 *     key is free again (another client stores it) while its slot is quarantined (STATUS,
 *     `kvtier status --daemon`, /metrics through promtool) and never reused: what the
 *     stopped client wrote there is still there when it resumes. Resumed, its late UNPINs
 *     and PUT_COMMIT (of a valid object) get -ETIMEDOUT and publish nothing; the
 *     quarantine stays while its connection is closed but the process lives, and empties
 *     once it exits.
 *  2. A late UNPIN names its lease: after a pin expired and the same connection pinned the
 *     same slot again, the old lease's UNPIN gets -ETIMEDOUT and the new pin stays.
 *  3. A library reader stopped in the middle of its copy out of the pool (a fault on its
 *     destination buffer stops it there) while its key is removed and the slot reused by a
 *     writer with other bytes: its get misses, never returns the writer's bytes mixed in.
 *  4. A process with KVTD_MAX_QUARANTINE quarantined slots gets -EBUSY for its next
 *     reservation, on any of its connections; they are freed when it exits.
 *  5. SIGTERM while a stopped process holds a quarantined slot: kvtierd exits 0 at once.
 *  6. kvt_device_load whose scatter is held back (a device dependency) past the pin's
 *     lease fails with -ETIMEDOUT instead of reporting bytes its slot may no longer hold,
 *     in its callback and in kvt_device_op_wait, and marks no layer ready; the same load
 *     without the hold succeeds, exact, every layer ready.
 *  7. The daemon restarted (with another pool size) while a load's scatter is held back,
 *     and another call of the same store reconnects: the load fails cleanly when released
 *     (its pin went with the old daemon), no layer marked ready - before, the reconnect
 *     unmapped the old pool under the pending scatter and the client died of SIGSEGV.
 *  8. A process that opens 12 connections and reserves a slot on each, all at once,
 *     before any lease ends (a pool of 28 slots): KVTD_MAX_QUARANTINE +
 *     KVTD_MAX_RESERVATIONS - 1 (7) of its reservations are taken, the rest -EBUSY, so at most 7 slots end up
 *     quarantined - the cap used to count only slots already quarantined, and all 12
 *     were; then it counted live ones only after each reserve, and requests at the same
 *     moment all passed.
 *  9. A get whose pin cannot be had (a one-slot pool, its slot pinned by another client,
 *     the key on NVMe) is answered through the region: counted once in the store's gets -
 *     the refused GET_PIN counted it too.
 * 10. A device load as the first call after the daemon restarted succeeds (its pin's
 *     request is sent again on a new connection, as a get's is).
 * 11. Eight device loads in flight at once on one client store all succeed (a pin each).
 */
#include <netinet/in.h>
#include <poll.h>

#include "format.h"
#include "internal.h"
#include "store_key.h"
#include "daemon_client.h"
#include "engine.h"
#include "lib/daemon_harness.h"
#include "../unit/device_common.h"

/* 300 ms; 1 s under a sanitizer, where a forked client's pins and the parent's status
 * call after them (fork, three round trips, SIGSTOP) can take a good part of 300 ms */
#define LEASE_MS (TEST_SANITIZED ? 1000 : 300)
#define LEASE_ARG (TEST_SANITIZED ? "daemon.lease_ms=1000" : "daemon.lease_ms=300")

/* The children this test forks, killed if it exits early (a failed CHECK): a child left
 * stopped (SIGSTOP) would otherwise keep ctest's output pipe open and hang the run. */
static pid_t forked[16];
static int n_forked;
static pid_t test_pid;

static void kill_forked(void)
{
	if (getpid() != test_pid) /* a child's exit runs the handlers it inherited */
		return;
	for (int i = 0; i < n_forked; i++)
		kill(forked[i], SIGKILL);
}

static pid_t fork_tracked(void)
{
	pid_t p = fork();
	if (p > 0 && n_forked < (int)(sizeof(forked) / sizeof(forked[0])))
		forked[n_forked++] = p;
	return p;
}

static char *dir, sock_path[100], metrics_addr[64];
static size_t PAYLOAD;
static uint64_t SLOT_BYTES;
static struct kvt_geometry GEO;

static void key_of(uint64_t i, struct kvt_key *k)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->bytes, &i, sizeof(i));
	k->bytes[31] = 0x1e;
}

/* STATUS until cond holds (2 s at most). */
#define WAIT_STATUS(r, st, cond)                                                                   \
	do {                                                                                       \
		for (int i_ = 0; i_ < 200; i_++) {                                                 \
			st = raw_status(r);                                                        \
			if (cond)                                                                  \
				break;                                                             \
			usleep(10000);                                                             \
		}                                                                                  \
		CHECKM(cond, "pins %llu reserved %llu quarantined %llu expired %llu/%llu",        \
		       (unsigned long long)st.pins, (unsigned long long)st.reserved,              \
		       (unsigned long long)st.quarantined, (unsigned long long)st.pins_expired,   \
		       (unsigned long long)st.reservations_expired);                               \
	} while (0)


/* STATUS through a library client store's own connection */
static struct kvtd_status raw_status_of(struct kvt_store *s)
{
	struct kvtd_status st;
	CHECK_RC(kvt__client_status(kvt__store_client(s), &st), 0);
	return st;
}

static void wait_stopped(pid_t p)
{
	int status;
	CHECK(waitpid(p, &status, WUNTRACED) == p && WIFSTOPPED(status));
}

static void wait_byte(int fd, char want)
{
	char b = 0;
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	CHECK(poll(&pf, 1, 10000) == 1 && read(fd, &b, 1) == 1 && b == want);
}

static int child_exit(pid_t p)
{
	int status;
	CHECK(waitpid(p, &status, 0) == p);
	CHECKM(WIFEXITED(status), "child status %d", status);
	return WEXITSTATUS(status);
}

/* ---- 1. a client stopped holding pins and a reservation */

struct lease {
	int32_t slot;
	uint32_t lease;
	uint64_t off, bytes;
};

static struct lease raw_op(struct raw *r, uint32_t op, uint64_t key)
{
	struct kvtd_req q = {.op = op, .n_tokens = 16};
	key_of(key, &q.key);
	struct kvtd_rep rep;
	/* no slot evictable for a moment (the others' write-through still running): retry */
	for (int i = 0; i < 200; i++) {
		CHECK_RC(raw_call(r->sock, &q, -1, &rep), 0);
		if (rep.res.status != -ENOSPC && rep.res.status != -EAGAIN)
			break;
		usleep(10000);
	}
	CHECK_RC(rep.res.status, 0);
	CHECK(rep.lease != 0);
	return (struct lease){rep.slot, rep.lease, rep.slot_off, rep.res.bytes};
}

static int raw_end(struct raw *r, uint32_t op, const struct lease *l)
{
	struct kvtd_req q = {.op = op, .n = (uint64_t)(uint32_t)l->slot, .lease = l->lease};
	struct kvtd_rep rep;
	CHECK_RC(raw_call(r->sock, &q, -1, &rep), 0);
	return rep.res.status;
}

#define MARK 0xc5

/* The client that gets stopped: exit status 0 or the number of the check that failed. */
static void stopped_child(int up, int down)
{
	uint8_t *pool;
	size_t pool_len;
	struct raw r = raw_attach_pool(&pool, &pool_len);
	struct lease p1 = raw_op(&r, KVTD_GET_PIN, 1), p2 = raw_op(&r, KVTD_GET_PIN, 2);
	struct lease rv = raw_op(&r, KVTD_PUT_RESERVE, 50);
	uint8_t *seen1 = malloc(p1.bytes), *seen2 = malloc(p2.bytes);
	memcpy(seen1, pool + p1.off, p1.bytes);
	memcpy(seen2, pool + p2.off, p2.bytes);
	memset(pool + rv.off, MARK, rv.bytes / 2); /* stopped half-way through its write */
	CHECK(write(up, "r", 1) == 1);
	raise(SIGSTOP);
	/* Resumed: the reservation's slot was nobody else's meanwhile. */
	for (uint64_t i = 0; i < rv.bytes / 2; i++)
		if (pool[rv.off + i] != MARK)
			_exit(10);
	if (raw_end(&r, KVTD_UNPIN, &p1) != -ETIMEDOUT || raw_end(&r, KVTD_UNPIN, &p2) != -ETIMEDOUT)
		_exit(11);
	/* The write finishes, a valid object of key 50, and is committed late. */
	uint8_t *src = malloc(PAYLOAD);
	test_fill(src, PAYLOAD, 50);
	struct kvt_key k, sk;
	key_of(50, &k);
	kvt__storage_key(kvtd_ns, &k, &sk);
	if (kvt__object_encode(pool + rv.off, rv.bytes, &GEO, kvtd_ns, &sk, 16, src, PAYLOAD) < 0)
		_exit(12);
	if (raw_end(&r, KVTD_PUT_COMMIT, &rv) != -ETIMEDOUT)
		_exit(13);
	/* The slots the pins held went back to the pool and other objects took them (the
	 * parent put 40 new ones into the 6 slots left): 2 reused, 1 reused, or 0. */
	int reused = !!memcmp(seen1, pool + p1.off, p1.bytes) + !!memcmp(seen2, pool + p2.off,
									    p2.bytes);
	raw_close(&r);
	char b = (char)('0' + reused);
	CHECK(write(up, &b, 1) == 1);
	wait_byte(down, 'x'); /* alive, connection closed, the pool still mapped */
	_exit(0);
}

static void test_stopped_client(struct raw *r, struct kvt_store *s)
{
	uint8_t *buf = malloc(PAYLOAD), *out = malloc(PAYLOAD);
	for (uint64_t i = 1; i <= 2; i++) {
		struct kvt_key k;
		key_of(i, &k);
		test_fill(buf, PAYLOAD, i);
		CHECK_RC(kvt_put_sync(s, &k, NULL, 16, buf, PAYLOAD), 0);
	}
	struct kvtd_status st0 = raw_status(r), st;
	int up[2], down[2];
	CHECK(pipe(up) == 0 && pipe(down) == 0);
	pid_t p = fork_tracked();
	if (p == 0)
		stopped_child(up[1], down[0]);
	wait_byte(up[0], 'r');
	wait_stopped(p);
	st = raw_status(r);
	CHECK(st.pins == 2 && st.reserved == 1 && st.quarantined == 0);

	/* Others go on: 40 puts and gets, 6 slots free (then 4 while the leases run). */
	uint64_t t_start = kvt__now_ns(), worst = 0;
	for (uint64_t i = 0; i < 40; i++) {
		struct kvt_key k;
		key_of(100 + i, &k);
		test_fill(buf, PAYLOAD, 100 + i);
		uint64_t t0 = kvt__now_ns();
		CHECK_RC(kvt_put_sync(s, &k, NULL, 16, buf, PAYLOAD), 0);
		memset(out, 0, PAYLOAD);
		CHECK_RC(kvt_get_sync(s, &k, 0, 0, out, PAYLOAD, NULL), 0);
		worst = KVT_MAX(worst, kvt__now_ns() - t0);
		CHECK(test_check(out, PAYLOAD, 100 + i));
		if (i == 20) /* the leases run out under the traffic */
			WAIT_STATUS(r, st, st.pins == 0 && st.reserved == 0);
	}
	/* The reservation's key is not held hostage by the quarantine: another client
	 * stores it (other bytes than the stopped client's). */
	struct kvt_key k50;
	key_of(50, &k50);
	test_fill(buf, PAYLOAD, 51);
	CHECK_RC(kvt_put_sync(s, &k50, NULL, 16, buf, PAYLOAD), 0);
	st = raw_status(r);
	fprintf(stderr, "stopped client: 80 calls of others in %.0f ms, slowest %.1f ms\n",
		(double)(kvt__now_ns() - t_start) / 1e6, (double)worst / 1e6);
	CHECKM(worst < 1000000000ull, "a call of another client took %.0f ms", worst / 1e6);
	CHECK(st.pins_expired >= st0.pins_expired + 2); /* + any of the others' under load */
	CHECK(st.reservations_expired >= st0.reservations_expired + 1);
	CHECK(st.pins == 0 && st.reserved == 0);
	CHECK_EQ(st.quarantined, 1);
	CHECK_EQ(st.quarantined_bytes, SLOT_BYTES);

	/* The same through /metrics (promtool-clean) and kvtier status --daemon. */
	char path[400], cmd[2400];
	snprintf(path, sizeof(path), "%s/metrics.txt", dir);
	kvtd_fetch_metrics(metrics_addr, path);
	snprintf(cmd, sizeof(cmd),
		 "promtool check metrics <%s && grep -qx 'kvtier_daemon_quarantined_slots 1' %s && "
		 "grep -qx 'kvtier_daemon_quarantined_bytes %llu' %s && "
		 "grep -q '^kvtier_daemon_lease_expired_reservations_total [1-9]' %s",
		 path, path, (unsigned long long)SLOT_BYTES, path, path);
	CHECKM(system(cmd) == 0, "%s", cmd);
	snprintf(cmd, sizeof(cmd),
		 "%s/kvtier status --daemon %s --set model.layers=4 --set model.kv_heads=2 --set "
		 "model.head_dim=64 --set model.chunk_tokens=16 --set model.name=test-model --json "
		 "| grep -q '\"quarantined_slots\":1,\"quarantined_bytes\":%llu'",
		 getenv("KVT_BIN") ? getenv("KVT_BIN") : ".", sock_path,
		 (unsigned long long)SLOT_BYTES);
	CHECKM(system(cmd) == 0, "%s", cmd);

	/* Resumed: its checks (see stopped_child), then its connection closes. */
	kill(p, SIGCONT);
	char reused;
	struct pollfd pf = {.fd = up[0], .events = POLLIN};
	if (poll(&pf, 1, 10000) != 1 || read(up[0], &reused, 1) != 1) {
		kill(p, SIGKILL);
		CHECKM(0, "the resumed client failed check %d", child_exit(p));
	}
	CHECKM(reused >= '1', "no slot the pins held was reused (%c)", reused);
	/* Its late commit published nothing: key 50 holds the other client's bytes. */
	memset(out, 0, PAYLOAD);
	CHECK_RC(kvt_get_sync(s, &k50, 0, 0, out, PAYLOAD, NULL), 0);
	CHECK(test_check(out, PAYLOAD, 51));
	/* Connection closed, process alive: the slot stays out of the pool. */
	WAIT_STATUS(r, st, st.connections == 2); /* r and s */
	usleep(3 * LEASE_MS * 1000);
	st = raw_status(r);
	CHECK_EQ(st.quarantined, 1);
	CHECK(write(down[1], "x", 1) == 1);
	CHECK_EQ(child_exit(p), 0);
	WAIT_STATUS(r, st, st.quarantined == 0 && st.quarantined_bytes == 0);
	/* What the stopped client held is readable and exact. */
	for (uint64_t i = 1; i <= 2; i++) {
		struct kvt_key k;
		key_of(i, &k);
		CHECK_RC(kvt_get_sync(s, &k, 0, 0, out, PAYLOAD, NULL), 0);
		CHECK(test_check(out, PAYLOAD, i));
	}
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
	free(buf);
	free(out);
}

/* ---- 2. a late UNPIN cannot end a newer pin of the same slot */

static void test_lease_ids(struct raw *r, struct kvt_store *s)
{
	uint8_t *buf = malloc(PAYLOAD);
	struct kvt_key k;
	key_of(3, &k);
	test_fill(buf, PAYLOAD, 3);
	CHECK_RC(kvt_put_sync(s, &k, NULL, 16, buf, PAYLOAD), 0);
	struct raw a = raw_attach();
	struct lease old = raw_op(&a, KVTD_GET_PIN, 3);
	usleep((LEASE_MS + 200) * 1000); /* expired; nothing else ran, the slot holds key 3 */
	struct lease now = raw_op(&a, KVTD_GET_PIN, 3);
	CHECK(now.slot == old.slot && now.lease != old.lease);
	CHECK_RC(raw_end(&a, KVTD_UNPIN, &old), -ETIMEDOUT);
	CHECK_EQ(raw_status(r).pins, 1);
	CHECK_RC(raw_end(&a, KVTD_UNPIN, &now), 0);
	CHECK_EQ(raw_status(r).pins, 0);
	/* More leases lapse than the connection remembers by name (12 pins, 4 at a time,
	 * each left to expire): the UNPIN of the first, however late, is still -ETIMEDOUT and
	 * the connection goes on. Until 2026-12-05 the forgotten lease read as an UNPIN of a
	 * slot never pinned, and the honest client was dropped as a protocol error. */
	struct lease lapsed[12];
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 4; i++)
			lapsed[round * 4 + i] = raw_op(&a, KVTD_GET_PIN, 3);
		usleep((LEASE_MS + 200) * 1000);
		(void)raw_status(&a); /* the connection's loop lets the leases go */
	}
	uint64_t errs = raw_status(r).protocol_errors;
	for (int i = 0; i < 12; i++)
		CHECK_RC(raw_end(&a, KVTD_UNPIN, &lapsed[i]), -ETIMEDOUT);
	CHECK_EQ(raw_status(&a).pins, 0); /* still attached */
	CHECK_EQ(raw_status(r).protocol_errors, errs);
	raw_close(&a);
	free(buf);
}

/* ---- 4. what one stopped process can hold is bounded */

/* Four reservations left to expire: the process is charged with four quarantined slots,
 * and its next PUT_RESERVE, on this connection or another, is refused. */
static void capped_child(int up, int down)
{
	struct raw a = raw_attach(), b = raw_attach();
	for (uint64_t i = 0; i < KVTD_MAX_QUARANTINE; i++)
		raw_op(&a, KVTD_PUT_RESERVE, 400 + i);
	usleep((LEASE_MS + 200) * 1000);
	struct kvtd_req q = {.op = KVTD_PUT_RESERVE, .n_tokens = 16};
	key_of(500, &q.key);
	struct kvtd_rep rep;
	if (raw_call(a.sock, &q, -1, &rep) < 0 || rep.res.status != -EBUSY)
		_exit(20);
	if (raw_call(b.sock, &q, -1, &rep) < 0 || rep.res.status != -EBUSY)
		_exit(21);
	CHECK(write(up, "q", 1) == 1);
	wait_byte(down, 'x');
	_exit(0);
}

/* Release a device load held back by ev (NULL: not held), wait for its device op and for
 * its one callback, run by kvt_poll. The op's own result and layers agree with the
 * callback's: a load that failed marks no layer it copied after its pin could have gone
 * (until 2026-12-06 every layer was marked ready as it ended and kvt_device_op_wait
 * answered 0 for a load whose unpin failed). */
static void finish_load(struct kvt_store *s, struct kvt_emu_event *ev, struct kvt_device_op *op,
			struct tr_done *d)
{
	if (ev)
		kvt_emu_event_signal(ev);
	int wrc = kvt_device_op_wait(op, 10000);
	uint32_t layers = kvt_device_op_layers_done(op);
	int lrc = kvt_device_op_wait_layer(op, GEO.layers - 1, 0);
	kvt_device_op_free(op);
	for (int i = 0; i < 1000 && !d->calls; i++)
		kvt_poll(s, 10);
	CHECK(d->calls == 1);
	CHECKM(wrc == d->res.status, "op wait %d, callback %d", wrc, d->res.status);
	if (d->res.status >= 0) {
		CHECK_EQ(layers, GEO.layers);
		CHECK_RC(lrc, 0);
	} else {
		/* released after the lease, or after the daemon restarted: nothing was copied
		 * while the pin was certainly held */
		CHECKM(layers == 0, "a failed load marked %u layers ready", layers);
		CHECKM(lrc < 0, "a failed load's last layer waits %d", lrc);
	}
}

static void test_device_load(struct kvt_store *s)
{
	const uint8_t POISON = 0xA5;
	struct kvt_key k;
	key_of(900, &k);
	uint8_t *payload = malloc(PAYLOAD);
	test_fill(payload, PAYLOAD, 900);
	CHECK_RC(kvt_put_sync(s, &k, NULL, 16, payload, PAYLOAD), 0);
	struct kvtd_status st0 = raw_status_of(s);
	for (int held = 0; held < 2; held++) {
		struct tr_rank r;
		uint32_t ids[1] = {2};
		CHECK(tr_rank_open(&r, NULL, &GEO, KVT_LAYOUT_FLASH_ATTN, 16, 4, 0, GEO.kv_heads,
				   POISON, NULL) == 0);
		struct kvt_emu_event *ev = NULL;
		CHECK(kvt_emu_event_create(&ev) == 0);
		struct kvt_device_dep dep = {KVT_DEP_EMU_EVENT, ev};
		struct tr_done d = {0};
		struct kvt_device_op *op;
		CHECK_RC(kvt_device_load(r.dev, s, &k, ids, 1, held ? &dep : NULL, tr_on_done, &d, &op),
			 0);
		if (held)
			usleep((LEASE_MS + 400) * 1000); /* past daemon.lease_ms and its sweep */
		finish_load(s, held ? ev : NULL, op, &d);
		if (held) {
			CHECKM(d.res.status == -ETIMEDOUT, "held load: %d", d.res.status);
		} else {
			CHECK_RC(d.res.status, 0);
			CHECK(tr_rank_check(&r, payload, 16, ids, POISON) == 0);
		}
		kvt_emu_event_destroy(ev);
		tr_rank_close(&r);
	}
	struct kvtd_status st = raw_status_of(s);
	CHECK_EQ(st.pins, 0);
	CHECK(st.pins_expired > st0.pins_expired);
	printf("device load: held past its lease -ETIMEDOUT, unheld exact\n");
	free(payload);
}

static void test_cap(struct raw *r, struct kvt_store *s)
{
	CHECK_RC(kvt_flush_sync(s), 0); /* no slot dirty: 4 can be reserved */
	int up[2], down[2];
	CHECK(pipe(up) == 0 && pipe(down) == 0);
	pid_t p = fork_tracked();
	if (p == 0)
		capped_child(up[1], down[0]);
	char b = 0;
	struct pollfd pf = {.fd = up[0], .events = POLLIN};
	if (poll(&pf, 1, 10000) != 1 || read(up[0], &b, 1) != 1) {
		kill(p, SIGKILL);
		CHECKM(0, "the capped client failed check %d", child_exit(p));
	}
	struct kvtd_status st = raw_status(r);
	CHECK_EQ(st.quarantined, KVTD_MAX_QUARANTINE);
	CHECK_EQ(st.reserved, 0);
	CHECK(write(down[1], "x", 1) == 1);
	CHECK_EQ(child_exit(p), 0);
	WAIT_STATUS(r, st, st.quarantined == 0);
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
}

/* ---- 3. a reader stopped mid-copy */

static uint8_t *guard_lo, *guard_hi;
static volatile sig_atomic_t faulted;
static int fault_fd;

/* The copy out of the pool reached the second half of the destination: say so, stop here
 * (the lease runs out, the slot is reused), then let the copy go on. */
static void on_segv(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	uint8_t *a = si->si_addr;
	if (a < guard_lo || a >= guard_hi || faulted) {
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	faulted = 1;
	ssize_t w = write(fault_fd, "f", 1);
	(void)w;
	raise(SIGSTOP);
	mprotect(guard_lo, (size_t)(guard_hi - guard_lo), PROT_READ | PROT_WRITE);
}

static void reader_child(int up)
{
	fault_fd = up;
	struct kvt_store *s = kvtd_client_store(dir);
	uint8_t *dst = mmap(NULL, PAYLOAD, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(dst != MAP_FAILED && PAYLOAD % 8192 == 0);
	guard_lo = dst + PAYLOAD / 2;
	guard_hi = dst + PAYLOAD;
	CHECK(mprotect(guard_lo, PAYLOAD / 2, PROT_NONE) == 0);
	struct sigaction sa = {.sa_sigaction = on_segv, .sa_flags = SA_SIGINFO};
	sigaction(SIGSEGV, &sa, NULL);
	struct kvt_key k;
	key_of(200, &k);
	int rc = kvt_get_sync(s, &k, 0, 0, dst, PAYLOAD, NULL);
	if (!faulted)
		_exit(6);
	if (rc == -ENOENT)
		_exit(0);
	if (rc == 0)
		_exit(test_check(dst, PAYLOAD, 200) ? 3 : 4); /* 4: bytes mixed in */
	_exit(5);
}

static void test_reader_stopped(struct raw *r, struct kvt_store *s)
{
	uint8_t *buf = malloc(PAYLOAD);
	struct kvt_key k;
	key_of(200, &k);
	test_fill(buf, PAYLOAD, 200);
	CHECK_RC(kvt_put_sync(s, &k, NULL, 16, buf, PAYLOAD), 0);
	struct kvtd_status st0 = raw_status(r), st;
	int up[2];
	CHECK(pipe(up) == 0);
	pid_t p = fork_tracked();
	if (p == 0)
		reader_child(up[1]);
	wait_byte(up[0], 'f');
	wait_stopped(p);
	CHECK_EQ(raw_status(r).pins, 1); /* stopped mid-copy, its pin held */
	WAIT_STATUS(r, st, st.pins == 0 && st.pins_expired >= st0.pins_expired + 1);
	/* The key goes, a writer takes its slot with other bytes (the freed slot is the
	 * next one handed out). */
	CHECK(kvt_remove_sync(s, &k) > 0);
	for (uint64_t i = 0; i < 8; i++) {
		struct kvt_key o;
		key_of(300 + i, &o);
		test_fill(buf, PAYLOAD, 300 + i);
		CHECK_RC(kvt_put_sync(s, &o, NULL, 16, buf, PAYLOAD), 0);
	}
	kill(p, SIGCONT);
	int rc = child_exit(p);
	CHECKM(rc == 0, "the stopped reader: %s",
	       rc == 4 ? "returned another object's bytes mixed into its own"
	       : rc == 3 ? "returned the removed object"
	       : rc == 6 ? "its copy never faulted" : "failed");
	close(up[0]);
	close(up[1]);
	free(buf);
}

/* Under ThreadSanitizer: the stopped reader (4.) is a forked child that opens a store,
 * i.e. starts threads, in a process forked from one with threads; TSan refuses that by
 * default. The parent's threads are idle at that point (it waits on a pipe), so the
 * child cannot inherit a lock held mid-operation. */
#if defined(__SANITIZE_THREAD__)
#define KVT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVT_TSAN 1
#endif
#endif
#ifdef KVT_TSAN
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
	return "die_after_fork=0";
}
#endif

static void test_load_across_restart(void)
{
	const char *args1[] = {"--set", "dram.bytes=256KiB", "--set", "daemon.lease_ms=5000", NULL};
	const char *args2[] = {"--set", "dram.bytes=512KiB", "--set", "daemon.lease_ms=5000", NULL};
	kvtd_start_test(sock_path, dir, args1);
	struct kvt_store *s = kvtd_client_store(dir);
	struct kvt_key k, k2;
	key_of(910, &k);
	key_of(911, &k2);
	uint8_t *payload = malloc(PAYLOAD), *out = malloc(PAYLOAD);
	test_fill(payload, PAYLOAD, 910);
	CHECK_RC(kvt_put_sync(s, &k, NULL, 16, payload, PAYLOAD), 0);
	struct tr_rank r;
	uint32_t ids[1] = {2};
	CHECK(tr_rank_open(&r, NULL, &GEO, KVT_LAYOUT_FLASH_ATTN, 16, 4, 0, GEO.kv_heads, 0xA5,
			   NULL) == 0);
	struct kvt_emu_event *ev = NULL;
	CHECK(kvt_emu_event_create(&ev) == 0);
	struct kvt_device_dep dep = {KVT_DEP_EMU_EVENT, ev};
	struct tr_done d = {0};
	struct kvt_device_op *op;
	CHECK_RC(kvt_device_load(r.dev, s, &k, ids, 1, &dep, tr_on_done, &d, &op), 0);
	kvtd_stop();
	kvtd_start_test(sock_path, dir, args2);
	struct kvt_result res;
	(void)kvt_get_sync(s, &k2, 0, 0, out, PAYLOAD, &res); /* reconnects: a new pool */
	finish_load(s, ev, op, &d);
	printf("a load across a daemon restart: %s\n", kvt_strerror(d.res.status));
	CHECKM(d.res.status < 0, "a load whose pin went with the old daemon succeeded");
	/* and the store works on the new daemon */
	CHECK_RC(kvt_put_sync(s, &k2, NULL, 16, payload, PAYLOAD), 0);
	CHECK_RC(kvt_get_sync(s, &k2, 0, 0, out, PAYLOAD, &res), 0);
	CHECK(memcmp(out, payload, PAYLOAD) == 0);
	kvt_emu_event_destroy(ev);
	tr_rank_close(&r);
	kvt_store_close(s);
	kvtd_stop();
	free(payload);
	free(out);
}

/* 8: run by a child that keeps its connections open (and alive) while the parent looks:
 * 12 connections, one PUT_RESERVE each, all sent at once (a barrier), so that the cap's
 * check and count race if they can */
enum { CONNS8 = 12 };
struct conn8 {
	struct raw c;
	pthread_barrier_t *bar;
	uint64_t key;
	int status;
};

static void *reserve8_main(void *arg)
{
	struct conn8 *x = arg;
	struct kvtd_req q = {.op = KVTD_PUT_RESERVE, .n_tokens = 16};
	key_of(x->key, &q.key);
	struct kvtd_rep rep;
	pthread_barrier_wait(x->bar);
	x->status = raw_call(x->c.sock, &q, -1, &rep) < 0 ? -EPIPE : rep.res.status;
	return NULL;
}

static void many_conns_child(int up, int down)
{
	struct conn8 x[CONNS8];
	pthread_t th[CONNS8];
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, CONNS8);
	for (int i = 0; i < CONNS8; i++) {
		x[i] = (struct conn8){.c = raw_attach(), .bar = &bar, .key = 700 + (uint64_t)i};
		if (pthread_create(&th[i], NULL, reserve8_main, &x[i]))
			_exit(31);
	}
	int taken = 0, busy = 0;
	for (int i = 0; i < CONNS8; i++) {
		pthread_join(th[i], NULL);
		if (x[i].status == -EPIPE)
			_exit(30);
		taken += x[i].status == 0;
		busy += x[i].status == -EBUSY;
	}
	usleep((LEASE_MS + 300) * 1000); /* every lease over: quarantined */
	uint8_t b[2] = {(uint8_t)taken, (uint8_t)busy};
	CHECK(write(up, b, 2) == 2);
	wait_byte(down, 'x');
	_exit(0);
}

static void test_cap_many_connections(void)
{
	const char *args[] = {"--set", "dram.bytes=1MiB", "--set", LEASE_ARG, NULL};
	kvtd_start_test(sock_path, dir, args);
	int up[2], down[2];
	CHECK(pipe(up) == 0 && pipe(down) == 0);
	pid_t p = fork_tracked();
	if (p == 0)
		many_conns_child(up[1], down[0]);
	uint8_t b[2];
	struct pollfd pf = {.fd = up[0], .events = POLLIN};
	if (poll(&pf, 1, 20000) != 1 || read(up[0], b, 2) != 2) {
		kill(p, SIGKILL);
		CHECKM(0, "the many-connection client failed check %d", child_exit(p));
	}
	struct raw r = raw_attach();
	struct kvtd_status st = raw_status(&r);
	printf("8. one process, 12 connections reserving at once: %u taken, %u refused (-EBUSY); "
	       "%llu slots quarantined\n",
	       b[0], b[1], (unsigned long long)st.quarantined);
	CHECK(st.quarantined <= KVTD_MAX_QUARANTINE + KVTD_MAX_RESERVATIONS - 1);
	CHECK_EQ(b[0], KVTD_MAX_QUARANTINE + KVTD_MAX_RESERVATIONS - 1);
	CHECK(write(down[1], "x", 1) == 1);
	CHECK_EQ(child_exit(p), 0);
	WAIT_STATUS(&r, st, st.quarantined == 0);
	raw_close(&r);
	kvtd_stop();
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
}

static void test_get_counted_once(void)
{
	const char *args[] = {"--set", "dram.bytes=40KiB", "--set", "daemon.lease_ms=10000", NULL};
	kvtd_start_test(sock_path, dir, args);
	struct kvt_store *s = kvtd_client_store(dir);
	uint8_t *a = malloc(PAYLOAD), *out = malloc(PAYLOAD);
	test_fill(a, PAYLOAD, 801);
	struct kvt_key k1, k2;
	key_of(801, &k1);
	key_of(802, &k2);
	CHECK_RC(kvt_put_sync(s, &k1, NULL, 16, a, PAYLOAD), 0);
	CHECK_RC(kvt_flush_sync(s), 0); /* on NVMe, its slot clean */
	struct raw r = raw_attach();
	struct kvtd_info info;
	memcpy(&info, r.shm, sizeof(info));
	CHECK_EQ(info.pool_bytes / info.slot_bytes, 1);
	test_fill(out, PAYLOAD, 802);
	int rc;
	for (int i = 0; i < 200 && (rc = kvt_put_sync(s, &k2, NULL, 16, out, PAYLOAD)) == -EAGAIN;
	     i++)
		usleep(10000);
	CHECK_RC(rc, 0); /* k1 evicted from the one slot */
	raw_op(&r, KVTD_GET_PIN, 802); /* the one slot pinned */
	struct kvt_stats st0, st1;
	CHECK_RC(kvt_stats(s, &st0), 0);
	struct kvt_result res;
	CHECK_RC(kvt_get_sync(s, &k1, 0, 0, out, PAYLOAD, &res), 0);
	CHECK(memcmp(out, a, PAYLOAD) == 0);
	CHECK_RC(kvt_stats(s, &st1), 0);
	printf("9. a get answered through the region after its pin was refused: gets +%llu\n",
	       (unsigned long long)(st1.gets - st0.gets));
	CHECK_EQ(st1.gets - st0.gets, 1);
	raw_close(&r);
	kvt_store_close(s);
	kvtd_stop();
	free(a);
	free(out);
}

/* 10. A device load that is the first call after the daemon restarted: its pin's request
 * finds the old connection dead before it leaves, reconnects and is sent again, as a get's
 * is - the load succeeds (from NVMe, through the new daemon). Until 2026-12-05 pins and TP
 * reservations were not sent again: the load failed with the dead connection's error. */
static void test_device_load_after_restart(void)
{
	const char *args[] = {"--set", "dram.bytes=1MiB", NULL};
	kvtd_start_test(sock_path, dir, args);
	struct kvt_store *s = kvtd_client_store(dir);
	const uint8_t POISON = 0x5A;
	uint8_t *payload = malloc(PAYLOAD);
	test_fill(payload, PAYLOAD, 1000);
	struct kvt_key k;
	key_of(1000, &k);
	CHECK_RC(kvt_put_sync(s, &k, NULL, 16, payload, PAYLOAD), 0);
	CHECK_RC(kvt_flush_sync(s), 0); /* on NVMe: the next daemon has it */
	kvtd_stop();
	kvtd_start_test(sock_path, dir, args);
	struct tr_rank r;
	uint32_t ids[1] = {3};
	CHECK(tr_rank_open(&r, NULL, &GEO, KVT_LAYOUT_FLASH_ATTN, 16, 4, 0, GEO.kv_heads, POISON,
			   NULL) == 0);
	struct tr_done d = {0};
	struct kvt_device_op *op;
	CHECK_RC(kvt_device_load(r.dev, s, &k, ids, 1, NULL, tr_on_done, &d, &op), 0);
	finish_load(s, NULL, op, &d);
	CHECKM(d.res.status == 0, "the first load after a restart: %d", d.res.status);
	CHECK(tr_rank_check(&r, payload, 16, ids, POISON) == 0);
	printf("10. a device load as the first call after a daemon restart: exact\n");
	tr_rank_close(&r);
	kvt_store_close(s);
	kvtd_stop();
	free(payload);
}

/* 11. Eight device loads in flight on one client store at once (each held by a device
 * dependency until all are started): each holds a pin of its own until its scatter ends,
 * and all eight succeed, exact. Until 2026-12-05 a connection could hold 4 pins (the
 * bound of its reservations), so the fifth and later loads failed -EBUSY and the engine
 * recomputed them. */
static void test_device_loads_in_flight(void)
{
	enum { N = 8 };
	const char *args[] = {"--set", "dram.bytes=1MiB", NULL};
	kvtd_start_test(sock_path, dir, args);
	struct kvt_store *s = kvtd_client_store(dir);
	const uint8_t POISON = 0x3C;
	uint8_t *payload[N];
	struct kvt_key k[N];
	for (int i = 0; i < N; i++) {
		payload[i] = malloc(PAYLOAD);
		test_fill(payload[i], PAYLOAD, 1100 + (uint64_t)i);
		key_of(1100 + (uint64_t)i, &k[i]);
		CHECK_RC(kvt_put_sync(s, &k[i], NULL, 16, payload[i], PAYLOAD), 0);
	}
	struct kvt_emu_event *ev = NULL;
	CHECK(kvt_emu_event_create(&ev) == 0);
	struct kvt_device_dep dep = {KVT_DEP_EMU_EVENT, ev};
	struct tr_rank r[N];
	struct tr_done d[N];
	struct kvt_device_op *op[N];
	uint32_t ids[1] = {1};
	for (int i = 0; i < N; i++) {
		CHECK(tr_rank_open(&r[i], NULL, &GEO, KVT_LAYOUT_FLASH_ATTN, 16, 2, 0, GEO.kv_heads,
				   POISON, NULL) == 0);
		d[i] = (struct tr_done){0};
		CHECK_RC(kvt_device_load(r[i].dev, s, &k[i], ids, 1, &dep, tr_on_done, &d[i], &op[i]),
			 0);
	}
	CHECK_EQ(raw_status_of(s).pins, N);
	kvt_emu_event_signal(ev);
	int ok = 0;
	for (int i = 0; i < N; i++) {
		finish_load(s, NULL, op[i], &d[i]);
		if (d[i].res.status == 0 && tr_rank_check(&r[i], payload[i], 16, ids, POISON) == 0)
			ok++;
		tr_rank_close(&r[i]);
		free(payload[i]);
	}
	CHECKM(ok == N, "%d of %d device loads in flight at once succeeded", ok, N);
	printf("11. %d device loads in flight on one store: all exact\n", N);
	kvt_emu_event_destroy(ev);
	kvt_store_close(s);
	kvtd_stop();
}

int main(void)
{
	test_pid = getpid();
	atexit(kill_forked);
	dir = test_tmpdir("daemon_leases");
	snprintf(sock_path, sizeof(sock_path), "%s/kvtierd.sock", dir);
	snprintf(metrics_addr, sizeof(metrics_addr), "127.0.0.1:%d", kvtd_free_port());
	signal(SIGPIPE, SIG_IGN);
	/* 7 DRAM slots of 36 KiB objects */
	const char *args[] = {"--metrics", metrics_addr, "--set", "dram.bytes=256KiB", "--set",
			      LEASE_ARG, NULL};
	/* the first daemon's stderr, for test 5 */
	static char log_path[400];
	snprintf(log_path, sizeof(log_path), "%s/kvtierd.log", dir);
	kvtd_log_path = log_path;
	kvtd_start_test(sock_path, dir, args);
	kvtd_log_path = NULL;
	struct kvt_store *s = kvtd_client_store(dir);
	GEO = *kvt_store_geometry(s);
	PAYLOAD = kvt_payload_bytes(&GEO, 16);
	memcpy(kvtd_ns, kvt_store_ns_id(s), sizeof(kvtd_ns));
	struct raw r = raw_attach();
	struct kvtd_info info;
	memcpy(&info, r.shm, sizeof(info));
	SLOT_BYTES = info.slot_bytes;
	CHECK(SLOT_BYTES > 0 && info.pool_bytes / SLOT_BYTES == 7);
	uint64_t t0 = kvt__now_ns();
	test_stopped_client(&r, s);
	test_lease_ids(&r, s);
	test_reader_stopped(&r, s);
	test_cap(&r, s);
	test_device_load(s);
	fprintf(stderr, "daemon_leases: %.1f s\n", (double)(kvt__now_ns() - t0) / 1e9);
	raw_close(&r);
	kvt_store_close(s);
	/* 5. SIGTERM while a stopped process holds a quarantined slot: the daemon does not
	 * wait for that process, flushes and exits 0, and does not give the slot back (other
	 * calls may still allocate during the shutdown, and the stopped writer may resume):
	 * its last lines say one slot was kept out of the pool. */
	int up[2];
	CHECK(pipe(up) == 0);
	pid_t p = fork_tracked();
	if (p == 0) {
		struct raw a = raw_attach();
		raw_op(&a, KVTD_PUT_RESERVE, 600);
		CHECK(write(up[1], "r", 1) == 1);
		raise(SIGSTOP);
		_exit(0);
	}
	wait_byte(up[0], 'r');
	wait_stopped(p);
	struct raw q = raw_attach();
	struct kvtd_status st;
	WAIT_STATUS(&q, st, st.quarantined == 1);
	raw_close(&q);
	uint64_t t_stop = kvt__now_ns();
	kvtd_stop();
	CHECKM(kvt__now_ns() - t_stop < 5000000000ull, "shutdown took %.1f s",
	       (double)(kvt__now_ns() - t_stop) / 1e9);
	kill(p, SIGKILL);
	waitpid(p, NULL, 0);
	{
		static char log[1 << 16];
		int fd = open(log_path, O_RDONLY);
		CHECK(fd >= 0);
		ssize_t n = read(fd, log, sizeof(log) - 1);
		close(fd);
		CHECK(n > 0);
		log[n] = 0;
		fputs(log, stderr);
		CHECKM(strstr(log, "kept out of the pool until the close: 1\n") &&
			       strstr(log, "kvtierd: stopped\n"),
		       "the daemon did not report the quarantined slot kept at its stop");
		printf("5. SIGTERM with a stopped process's slot quarantined: exit 0, slot kept\n");
	}
	test_load_across_restart();
	test_cap_many_connections();
	test_get_counted_once();
	test_device_load_after_restart();
	test_device_loads_in_flight();
	test_rmdir(dir);
	printf("daemon_leases: ok\n");
	return 0;
}
