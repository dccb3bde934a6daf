/*
 * daemon_tp_cut.c - a gather still copying into a TP slot when its connection is cut must
 * not write into the daemon's pool any more. Why: a device store's gathers run on its own
 * threads, outside the client's io_lock, between TP_RESERVE and TP_WRITTEN; a call cut at
 * its deadline drops the connection, the daemon cancels that connection's claims and may
 * give the slot to another client's put at once. DRAM hits are not CRC-checked, so a late
 * byte of the old gather in that slot would be served as the new object's. The client
 * swaps its pool mapping for anonymous memory before it closes the socket (before
 * 2026-12-05 it closed first, leaving a window between the two).
 *
 * With the real daemon binary and a 1 MiB DRAM pool (a few dozen slots):
 *  1. client A reserves every head of an object (kvt__client_tp_reserve) and a thread of
 *     its own starts writing 0xEE over the slot without pause;
 *  2. the daemon is stopped, a get of A's times out (the connection is dropped), and the
 *     daemon resumes: it cancels A's claims (STATUS: no partial object, nothing
 *     quarantined);
 *  3. client B (another connection) puts more objects than the pool has slots, so the
 *     freed one is reused, and reads each back while A's thread still writes: every byte
 *     is B's;
 *  4. A's TP_WRITTEN for the old claim answers -ECANCELED.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "internal.h"
#include "daemon_client.h"
#include "lib/daemon_harness.h"

static uint8_t *gather_dst;
static size_t gather_len;
static atomic_bool gather_stop;
static atomic_ullong gather_laps;

/* A gather that never ends: what a device copy still running after the cut does. */
static void *cut_gather_writes(void *arg)
{
	(void)arg;
	while (!atomic_load(&gather_stop)) {
		memset(gather_dst, 0xEE, gather_len);
		atomic_fetch_add(&gather_laps, 1);
	}
	return NULL;
}

static struct kvt_store *client(const char *dir)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "store.daemon", kvtd_sock);
	test_set(c, "store.daemon_timeout_ms", "1000"); /* its backoff too */
	return test_open(c);
}

static void key_of(unsigned i, struct kvt_key *k)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->bytes, &i, sizeof(i));
	k->bytes[31] = 0xc7;
}

int main(void)
{
	char *dir = test_tmpdir("daemon_tp_cut");
	char sock[100];
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	const char *extra[] = {"--set", "dram.bytes=1MiB", "--set", "dram.hugepages=false", NULL};
	kvtd_start_test(sock, dir, extra);
	struct kvt_store *a = client(dir), *b = client(dir);
	const struct kvt_geometry *g = kvt_store_geometry(a);
	struct kvt_client *ca = kvt__store_client(a);
	CHECK(ca != NULL);
	size_t len = kvt_payload_bytes(g, g->chunk_tokens);

	/* 1. */
	struct kvt_key tk;
	key_of(1000000, &tk);
	uint8_t claimed[64] = {0};
	uint32_t missing = 0;
	void *obj = NULL;
	int32_t slot = -1;
	uint64_t gen = 0;
	CHECK_RC(kvt__client_tp_reserve(ca, &tk, NULL, g->chunk_tokens, 0, g->kv_heads, claimed,
					&missing, &obj, &slot, &gen),
		 0);
	CHECK(claimed[0] && obj != NULL && slot >= 0);
	gather_dst = obj;
	gather_len = kvt_object_bytes(g, g->chunk_tokens);
	pthread_t th;
	CHECK(pthread_create(&th, NULL, cut_gather_writes, NULL) == 0);
	memcpy(kvtd_ns, kvt_store_ns_id(a), sizeof(kvtd_ns));
	struct raw r = raw_attach();
	CHECK_EQ(raw_status(&r).tp_partials, 1);

	/* 2. */
	uint8_t *buf = malloc(len), *back = malloc(len);
	kvtd_pause();
	struct kvt_result res;
	int rc = kvt_get_sync(a, &tk, 0, 0, back, len, &res);
	CHECKM(rc < 0 || res.cause < 0, "a get while the daemon is stopped: %d, cause %d", rc,
	       res.cause);
	kill(kvtd_pid, SIGCONT);
	uint64_t t0 = test_now_ns();
	struct kvtd_status st = raw_status(&r);
	while ((st.tp_partials || st.tp_quarantined) && test_ms_since(t0) < 10000) {
		usleep(20000);
		st = raw_status(&r);
	}
	CHECKM(!st.tp_partials && !st.tp_quarantined, "after the cut: %llu partial, %llu quarantined",
	       (unsigned long long)st.tp_partials, (unsigned long long)st.tp_quarantined);
	uint64_t laps = atomic_load(&gather_laps);

	/* 3. */
	unsigned n = 0;
	for (unsigned i = 0; i < 64; i++, n++) {
		struct kvt_key k;
		key_of(i, &k);
		test_fill(buf, len, 300 + i);
		CHECK_RC(kvt_put_sync(b, &k, NULL, g->chunk_tokens, buf, len), 0);
		memset(back, 0, len);
		CHECK_RC(kvt_get_sync(b, &k, 0, 0, back, len, &res), 0);
		CHECKM(test_check(back, len, 300 + i), "object %u read back with other bytes", i);
	}
	for (unsigned i = 0; i < n; i++) {
		struct kvt_key k;
		key_of(i, &k);
		memset(back, 0, len);
		if (kvt_get_sync(b, &k, 0, 0, back, len, &res) == 0)
			CHECKM(test_check(back, len, 300 + i), "object %u read back with other bytes",
			       i);
	}
	CHECKM(atomic_load(&gather_laps) > laps, "the gather stopped writing (%llu laps)",
	       (unsigned long long)laps);
	printf("daemon_tp_cut: %u puts of another client read back exact while the cut gather "
	       "wrote on (%llu laps)\n",
	       n, (unsigned long long)atomic_load(&gather_laps));

	/* 4. */
	atomic_store(&gather_stop, true);
	pthread_join(th, NULL);
	CHECK_RC(kvt__client_tp_written(ca, &tk, slot, 0, g->kv_heads, false, gen), -ECANCELED);

	raw_close(&r);
	kvt_store_close(a);
	kvt_store_close(b);
	kvtd_stop();
	test_rmdir(dir);
	free(dir);
	free(buf);
	free(back);
	printf("daemon_tp_cut: ok\n");
	return 0;
}
