/* kvt-test-labels: server */
/*
 * daemon_reattach.c - what a client-mode store says about its daemon (tier count and
 * names, namespace) while it reconnects, with the real daemon binary restarted with
 * another tier chain. Why a test of its own: every attach used to copy the daemon's answer
 * over c->info, which the accessors read without a lock from any thread, so
 *  1. a tier name a caller held (a pointer into c->info) changed under it: "nvme" read ""
 *     once the daemon came back with the DRAM tier only (checked deterministically);
 *  2. a reader on another thread raced the reconnect's copy: a torn name, or a count from
 *     one attach with names from another. A reader thread checks every answer it gets
 *     while the main thread restarts the daemon, alternating dram,nvme and dram; under
 *     ThreadSanitizer the old copy is reported as a data race (halt_on_error=1 fails it).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "internal.h"
#include "lib/daemon_harness.h"

#define ROUNDS 6

static char *dir, sock_path[100];

static void start_daemon(bool nvme)
{
	const char *extra[] = {"--set", "dram.bytes=16MiB", "--set",
			       nvme ? "store.tiers=dram,nvme" : "store.tiers=dram", NULL};
	kvtd_start_test(sock_path, dir, extra);
}

struct reader {
	struct kvt_store *s;
	uint8_t ns[KVT_NS_ID_BYTES];
	atomic_bool stop;
	uint64_t reads, bad;
};

/* An answer is one of a chain's: a count of 1 or 2, "dram" first, "nvme" or "none" (past
 * the count: the chain may change between two calls) second, the namespace unchanged. */
static void *read_loop(void *arg)
{
	struct reader *r = arg;
	while (!atomic_load(&r->stop)) {
		int n = kvt_store_tier_count(r->s);
		bool ok = n == 1 || n == 2;
		ok &= !strcmp(kvt_store_tier_name(r->s, 0), "dram");
		const char *name = kvt_store_tier_name(r->s, 1);
		ok &= !strcmp(name, "nvme") || !strcmp(name, "none");
		const uint8_t *ns = kvt_store_ns_id(r->s);
		ok &= ns && !memcmp(ns, r->ns, sizeof(r->ns));
		r->reads++;
		r->bad += !ok;
	}
	return NULL;
}

int main(void)
{
	dir = test_tmpdir("daemon-reattach");
	snprintf(sock_path, sizeof(sock_path), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	start_daemon(true);
	struct kvt_store *s = kvtd_client_store(dir);
	CHECK_RC(kvt_store_tier_count(s), 2);
	const char *dram = kvt_store_tier_name(s, 0), *nvme = kvt_store_tier_name(s, 1);
	CHECK(!strcmp(dram, "dram") && !strcmp(nvme, "nvme"));
	struct reader r = {.s = s};
	memcpy(r.ns, kvt_store_ns_id(s), sizeof(r.ns));
	pthread_t t;
	CHECK(pthread_create(&t, NULL, read_loop, &r) == 0);
	struct kvt_key k = {{0x42}};
	for (int i = 0; i < ROUNDS; i++) {
		bool with_nvme = i % 2; /* dram only first */
		kvtd_stop();
		start_daemon(with_nvme);
		/* the first call after the restart reconnects (and is sent again: no miss) */
		CHECK_RC(kvt_lookup_sync(s, &k, 1, NULL), 0);
		CHECK_RC(kvt_store_tier_count(s), with_nvme ? 2 : 1);
		CHECK(!strcmp(kvt_store_tier_name(s, 1), with_nvme ? "nvme" : "none"));
		/* 1. the names handed out before are still theirs */
		printf("  after restart %d (%s): the name held for tier 1 reads \"%s\"\n", i + 1,
		       with_nvme ? "dram,nvme" : "dram", nvme);
		CHECK(!strcmp(dram, "dram") && !strcmp(nvme, "nvme"));
	}
	atomic_store(&r.stop, true);
	CHECK(pthread_join(t, NULL) == 0);
	/* 2. */
	printf("  a reader during %d reconnects: %llu answers, %llu inconsistent\n", ROUNDS,
	       (unsigned long long)r.reads, (unsigned long long)r.bad);
	CHECK(r.reads > 0 && r.bad == 0);
	kvt_store_close(s);
	kvtd_stop();
	test_rmdir(dir);
	printf("daemon_reattach: ok\n");
	return 0;
}
