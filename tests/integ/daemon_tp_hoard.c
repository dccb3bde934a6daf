/*
 * daemon_tp_hoard.c - the per-client bounds of kvtierd's tensor-parallel reservations
 * (daemon/tp_commit.c). Why: TP_RESERVE used to have only the daemon-wide bound of 1024
 * objects, so one connection that reserved objects and went silent (a rank stopped, or
 * one that never reports) took every DRAM slot of a small pool, and once their leases ran
 * out their slots stayed quarantined as long as it stayed connected: every other client's
 * put then failed with -ENOSPC. PUT_RESERVE has had per-client bounds from the start.
 * With a 14-slot pool and a 300 ms lease:
 *  - a connection reserving one new object after another gets -EBUSY once it holds claims
 *    on half the pool (before: it took all 14, then -ENOSPC), and so does another
 *    connection of its process (before 2026-12-05 each connection had its own half);
 *  - silent for longer than the lease, its objects are quarantined (STATUS counts them:
 *    tp_quarantined and its bytes), and it, and any other connection of its process, gets
 *    -EBUSY for any TP_RESERVE; a connection of another process still reserves; /metrics
 *    and kvtier status --daemon show the quarantine too (and a STATUS of an older client,
 *    shorter by those fields, is still answered);
 *  - another client's put succeeds and reads back;
 *  - the connection closed, the quarantined slots are back in the pool.
 */
#include <sys/wait.h>

#include "internal.h"
#include "lib/daemon_harness.h"

static void key_of(uint64_t i, struct kvt_key *k)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->bytes, &i, sizeof(i));
	k->bytes[31] = 0x5b;
}

/* A TP_RESERVE of the object of key i, claiming head 0; the reply's status. */
static int tp_reserve(struct raw *r, const struct kvt_geometry *g, uint64_t i, int32_t *slot)
{
	struct kvtd_req q = {.op = KVTD_TP_RESERVE, .n_tokens = 16, .layer_begin = 0,
			     .layer_end = 1, .len = sizeof(struct kvtd_tp_claim) + g->kv_heads};
	key_of(i, &q.key);
	struct kvtd_rep rep;
	CHECK_RC(raw_call(r->sock, &q, -1, &rep), 0);
	if (slot)
		*slot = rep.slot;
	return rep.res.status;
}

/* STATUS once tp_quarantined reaches want (the lease ends on the daemon's clock). */
static struct kvtd_status wait_quarantined(struct raw *r, uint64_t want)
{
	uint64_t t0 = test_now_ns();
	struct kvtd_status st = raw_status(r);
	while (st.tp_quarantined != want && test_ms_since(t0) < 10000) {
		usleep(20000);
		st = raw_status(r);
	}
	CHECKM(st.tp_quarantined == want, "tp_quarantined %llu, want %llu",
	       (unsigned long long)st.tp_quarantined, (unsigned long long)want);
	return st;
}

int main(void)
{
	char *dir = test_tmpdir("daemon_tp_hoard");
	char sp[100], maddr[64];
	snprintf(sp, sizeof(sp), "%s/d.sock", dir);
	snprintf(maddr, sizeof(maddr), "127.0.0.1:%d", kvtd_free_port());
	const char *args[] = {"--metrics", maddr, "--set", "dram.bytes=512KiB", "--set",
			      "daemon.lease_ms=300", NULL};
	kvtd_start_test(sp, dir, args);
	struct kvt_store *s = kvtd_client_store(dir);
	memcpy(kvtd_ns, kvt_store_ns_id(s), sizeof(kvtd_ns));
	const struct kvt_geometry *g = kvt_store_geometry(s);

	/* The hoarder: new objects until it is refused. */
	struct raw h = raw_attach();
	int held = 0, rc = 0;
	for (uint64_t i = 100; i < 200 && (rc = tp_reserve(&h, g, i, NULL)) == 0; i++)
		held++;
	printf("one connection holds %d TP objects, then status %d (%s)\n", held, rc,
	       kvt_strerror(rc));
	CHECK_EQ(rc, -EBUSY);
	CHECK(held >= KVTD_MAX_RESERVATIONS && held <= 8); /* half the pool's 14 slots (7) */
	struct raw o = raw_attach(); /* another connection, the same process */
	/* no second budget: the bound is per process (it was per connection until
	 * 2026-12-05, so a process with n connections took n halves: the whole pool) */
	CHECK_EQ(tp_reserve(&o, g, 250, NULL), -EBUSY);
	CHECK_EQ(raw_status(&o).tp_partials, (uint64_t)held);

	/* Silent past its lease: every object quarantined, counted, and the process
	 * refused. */
	struct kvtd_status st = wait_quarantined(&o, (uint64_t)held);
	CHECK_EQ(st.tp_partials, 0);
	CHECK(st.tp_quarantined_bytes >= (uint64_t)held * kvt_object_bytes(g, 16));
	/* the same through /metrics and kvtier status --daemon */
	char path[400], cmd[2400];
	snprintf(path, sizeof(path), "%s/metrics.txt", dir);
	kvtd_fetch_metrics(maddr, path);
	snprintf(cmd, sizeof(cmd),
		 "promtool check metrics <%s && "
		 "grep -qx 'kvtier_daemon_tp_quarantined_slots %d' %s && "
		 "grep -qx 'kvtier_daemon_tp_quarantined_bytes %llu' %s",
		 path, held, path, (unsigned long long)st.tp_quarantined_bytes, path);
	CHECKM(system(cmd) == 0, "%s", cmd);
	snprintf(cmd, sizeof(cmd),
		 "%s/kvtier status --daemon %s --set model.layers=4 --set model.kv_heads=2 --set "
		 "model.head_dim=64 --set model.chunk_tokens=16 --set model.name=test-model --json "
		 "| grep -q '\"tp_quarantined_slots\":%d,\"tp_quarantined_bytes\":%llu'",
		 getenv("KVT_BIN") ? getenv("KVT_BIN") : ".", sp, held,
		 (unsigned long long)st.tp_quarantined_bytes);
	CHECKM(system(cmd) == 0, "%s", cmd);
	/* a client that predates the tp_quarantined fields asks for less: still served */
	struct kvtd_req oq = {.op = KVTD_STATUS, .len = KVTD_STATUS_MIN_BYTES};
	struct kvtd_rep orep;
	CHECK_RC(raw_call(o.sock, &oq, -1, &orep), 0);
	CHECK_EQ(orep.res.status, 0);
	CHECK_EQ(tp_reserve(&h, g, 300, NULL), -EBUSY);
	CHECK_EQ(tp_reserve(&o, g, 301, NULL), -EBUSY);

	/* Another process reserves (and cancels its object: a failed copy). */
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct raw c = raw_attach();
		int32_t slot;
		CHECK_EQ(tp_reserve(&c, g, 302, &slot), 0);
		struct kvtd_req w = {.op = KVTD_TP_WRITTEN, .n = (uint64_t)(uint32_t)slot,
				     .layer_begin = 0, .layer_end = 1, .flags = 1};
		key_of(302, &w.key);
		struct kvtd_rep rep;
		CHECK_RC(raw_call(c.sock, &w, -1, &rep), 0);
		CHECK_EQ(rep.res.status, -EIO);
		raw_close(&c);
		_exit(0);
	}
	int wst;
	CHECK(waitpid(pid, &wst, 0) == pid);
	CHECKM(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "child status %#x", wst);

	/* Another client's put still finds a slot. */
	struct kvt_key k;
	key_of(9, &k);
	kvtd_check_roundtrip(s, &k, 3);

	/* The hoarder gone: its quarantined slots go back to the pool. */
	raw_close(&h);
	wait_quarantined(&o, 0);
	CHECK_EQ(raw_status(&o).tp_quarantined_bytes, 0);
	CHECK_EQ(tp_reserve(&o, g, 303, NULL), 0);
	raw_close(&o); /* its claim dropped: the object is cancelled */

	kvt_store_close(s);
	kvtd_stop();

	/* A pool of ~2,200 slots: half of it is more than the daemon's table of 1,024 open
	 * objects, so one process's bound is a quarter of the table instead (256), and what
	 * it can leave quarantined leaves room for others (until 2026-12-06 it reserved 400
	 * here and could take all 1,024). */
	const char *big[] = {"--set", "dram.bytes=80MiB", "--set", "daemon.lease_ms=300", NULL};
	kvtd_start_test(sp, dir, big);
	s = kvtd_client_store(dir);
	g = kvt_store_geometry(s);
	h = raw_attach();
	held = 0;
	for (uint64_t i = 1000; i < 1400 && (rc = tp_reserve(&h, g, i, NULL)) == 0; i++)
		held++;
	printf("with a large pool one process holds %d TP objects, then status %d\n", held, rc);
	CHECK_EQ(held, 256);
	CHECK_EQ(rc, -EBUSY);
	raw_close(&h);
	kvt_store_close(s);
	kvtd_stop();
	test_rmdir(dir);
	free(dir);
	printf("daemon_tp_hoard: ok\n");
	return 0;
}
