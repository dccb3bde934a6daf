/*
 * daemon_restart_pool.c - a client-mode store lets go of a dead daemon's DRAM pool once it
 * knows the daemon is gone. Why: the pool is a memfd (hugetlbfs pages by default,
 * dram.hugepages=true) that lives as long as any mapping of it; the client unmaps it only in
 * the attach that follows a successful HELLO of the next daemon - and that daemon allocates
 * (and prefaults) its own pool before it listens, so at every restart the node holds two
 * pools: with huge pages reserved for one, the new one silently falls back to 4K shared
 * memory (and twice the memory), or a large pool OOMs the node.
 *  1. a store attached, a round trip through the pool; the daemon stopped (SIGTERM);
 *  2. with no call, the store lets go of the pool within about a second (2a: its worker
 *     sees the socket hang up); a get then finds the daemon gone (a miss, -ENOTCONN);
 *  3. the dead daemon's pool must no longer be mapped (until 2026-12-06 it was, until the
 *     next attach); /proc/meminfo Shmem before and after a new daemon starts shows what
 *     the node holds meanwhile;
 *  4. the store reattaches to the new daemon and maps its pool.
 */
#include <signal.h>

#include "internal.h"
#include "lib/daemon_harness.h"

static int pool_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;
	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, "kvtier-dram") != NULL;
	if (f)
		fclose(f);
	return n;
}

static long shmem_mib(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	long kb = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Shmem: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb / 1024;
}

int main(void)
{
	char *dir = test_tmpdir("daemon_restart_pool"), sock_path[100];
	snprintf(sock_path, sizeof(sock_path), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	const char *extra[] = {"--set", "dram.bytes=64MiB", NULL};
	kvtd_start_test(sock_path, dir, extra);
	struct kvt_store *s = kvtd_client_store(dir);
	struct kvt_key k;
	memset(k.bytes, 0x42, sizeof(k.bytes));
	kvtd_check_roundtrip(s, &k, 5);
	printf("1. attached: %d pool mapping(s), Shmem %ld MiB\n", pool_maps(), shmem_mib());
	kvtd_stop();
	/* 2a. the store idle: its worker notices the hang-up and lets go of the pool within
	 * about a second (until 2026-12-06 only a call did) */
	uint64_t t0 = test_now_ns();
	while (pool_maps() && test_ms_since(t0) < 5000)
		usleep(50 * 1000);
	int maps_idle = pool_maps();
	printf("2a. daemon gone, store idle: %d pool mapping(s) after %.0f ms\n", maps_idle,
	       test_ms_since(t0));
	CHECKM(maps_idle == 0, "an idle store still maps the dead daemon's pool after 5 s");

	size_t payload = kvt_payload_bytes(kvt_store_geometry(s), 16);
	uint8_t *out = malloc(payload);
	struct kvt_result res;
	int rc = kvt_get_sync(s, &k, 0, 0, out, payload, &res);
	printf("2. daemon gone: get %d (cause %d); %d pool mapping(s), Shmem %ld MiB\n", rc,
	       res.cause, pool_maps(), shmem_mib());
	int maps_dead = pool_maps();

	kvtd_start_test(sock_path, dir, extra);
	printf("3. a new daemon up, client not yet back: %d pool mapping(s), Shmem %ld MiB\n",
	       pool_maps(), shmem_mib());
	CHECK_RC(kvt_get_sync(s, &k, 0, 0, out, payload, &res), 0); /* from nvme */
	int maps_back = pool_maps();
	printf("4. reattached: %d pool mapping(s), Shmem %ld MiB\n", maps_back, shmem_mib());
	CHECKM(maps_back == 1, "%d pool mappings after the reattach", maps_back);
	CHECKM(maps_dead == 0, "the store still maps the dead daemon's pool (%d mapping)",
	       maps_dead);
	kvt_store_close(s);
	free(out);
	kvtd_stop();
	test_rmdir(dir);
	free(dir);
	printf("daemon_restart_pool: ok\n");
	return 0;
}
