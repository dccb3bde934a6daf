/*
 * daemon_device_backlog.c - the GPU save path through kvtierd obeys the write-behind bound:
 * a client process floods device saves (kvt_device_store on a store.daemon client, the
 * tensor-parallel reservation path of daemon/tp_commit.c) into a daemon whose deeper tier
 * writes 20 objects a second (the fault-injecting tier over a real NVMe directory,
 * faulty.write_bytes_per_s). The daemon must refuse new chunks (-EAGAIN, nothing copied)
 * rather than queue writes that can only miss their deadline: the flush then succeeds (it
 * fails on a missed write-behind), and after the daemon stops every chunk is on the NVMe
 * tier, intact. The in-process path has the same test (device_backlog.c).
 */
#include <sys/wait.h>

#include "../unit/device_common.h"
#include "testlib.h"
#include "lib/daemon_harness.h"
#include "lib/device_flood.h"

enum { WARM = 10, M = 30, NTOK = 256, SEED = 500 };

int main(void)
{
	char *dir = test_tmpdir("daemon_device_backlog");
	char sock[108];
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	dfl_daemon_start(sock, dir);
	const struct kvt_geometry g = DFL_GEO;

	struct kvt_store *s = dfl_client(dir, sock);
	struct kvt_key k[WARM + M];
	test_chain_keys(s, k, WARM + M, 13);
	dfl_warm(s, k, WARM, NTOK, SEED);

	uint64_t t0 = test_now_ns();
	int eagain = dfl_flood(s, &g, k, WARM, WARM + M, SEED);
	/* a write the daemon had queued past its deadline fails the flush */
	CHECK_RC(kvt_flush_sync(s), 0);
	fprintf(stderr, "  %d device saves through kvtierd over a 20-objects/s tier: %.0f ms, %d "
			"told to retry\n",
		M, test_ms_since(t0), eagain);
	CHECKM(eagain > 0, "the daemon never held a device save back");
	kvt_store_close(s);
	kvtd_stop();

	/* every chunk reached the NVMe tier, intact: the daemon's directory opened in-process */
	char data[300];
	snprintf(data, sizeof(data), "%s/data", dir);
	dfl_check_landed(data, k, WARM + M, "256", SEED);
	test_rmdir(dir);
	free(dir);
	printf("daemon_device_backlog: ok\n");
	return 0;
}
