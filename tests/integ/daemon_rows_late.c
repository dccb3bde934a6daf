/*
 * daemon_rows_late.c - a rows store through kvtierd (client mode) whose put was cut at its
 * call's deadline, and which kvtierd stored all the same, is reported by
 * kvt_rows_store_late, as an in-process store's late chunk is. Why: the vLLM connector
 * announces a store chunk only when its job counted it or kvt_rows_store_late names it;
 * until 2026-12-07 client mode named none, so a chunk kvtierd held was never announced to
 * the engine's KV events (and the connector kept it as not stored).
 * The daemon's one tier writes one object per second (faulty.write_bytes_per_s):
 *  1. a store of chunk A with 200 ms left is cut (-ETIME, 0 done); nothing is late yet;
 *  2. once A's write has landed (1.5 s), a store of B with 5 s left goes through - and
 *     then A is reported late, once; B (counted by its call) is not;
 *  3. a store of C cut the same way, then a remove of C (which waits for C's write): the
 *     next stores go through, and C, not there when looked up, is never reported.
 * A lookup after a store gets at most 200 ms: two stores follow each cut, so that a slow
 * (sanitizer) daemon has two chances to answer.
 */
#include "lib/daemon_harness.h" /* includes testlib.h */

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	char *dir = test_tmpdir("daemon_rows_late");
	char sock[100];
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	/* an object of the test model: 32 KiB of payload and a 4 KiB header */
	const char *args[] = {"--set", "store.tiers=faulty", "--set", "faulty.inner=nvme",
			      "--set", "faulty.write_bytes_per_s=36864", NULL};
	kvtd_start_test(sock, dir, args);
	struct kvt_store *s = kvtd_client_store(dir);
	struct kvt_row_layout lay = test_dense_layout(kvt_store_geometry(s));
	uint8_t *rows = calloc(2, lay.row_bytes);
	CHECK(rows);
	for (size_t i = 0; i < 2 * lay.row_bytes; i++)
		rows[i] = (uint8_t)(i * 7 + 3);
	struct kvt_rows *r;
	CHECK_RC(kvt_rows_open(s, &lay, rows, 2, 1, &r), 0);
	struct kvt_key ab[6];
	for (int i = 0; i < 6; i++)
		test_chain_keys(s, &ab[i], 1, 0xa1 + (uint32_t)i);
	uint64_t row0 = 0, row1 = 1;
	struct kvt_rows_result res;

	uint64_t t0 = (test_now_ns() / 1000000);
	int done = kvt_rows_store(r, &ab[0], NULL, NULL, &row0, 1,
				  test_now_ns() + 200ull * 1000000, &res);
	struct kvt_key late[4];
	size_t nl = kvt_rows_store_late(r, late, 4);
	printf("  1. store of A with 200 ms left: %d done, status %d, after %llu ms; late: %zu\n",
	       done, res.status, (unsigned long long)((test_now_ns() / 1000000) - t0), nl);
	CHECK_EQ(done, 0);
	CHECK_EQ(res.status, -ETIME);
	CHECK_EQ(nl, 0);

	usleep(1500 * 1000); /* A's write lands (one object a second) */
	done = kvt_rows_store(r, &ab[1], NULL, NULL, &row1, 1, test_now_ns() + 5000ull * 1000000,
			      &res);
	struct kvt_rows_result res2;
	int done2 = kvt_rows_store(r, &ab[2], NULL, NULL, &row1, 1,
				   test_now_ns() + 5000ull * 1000000, &res2);
	CHECK_EQ(done2, 1);
	nl = kvt_rows_store_late(r, late, 4);
	printf("  2. 1.5 s later, a store of B with 5 s left: %d done, status %d; late: %zu (%s)\n",
	       done, res.status, nl,
	       nl == 1 && !memcmp(&late[0], &ab[0], sizeof(ab[0])) ? "A" : nl ? "not A" : "none");
	CHECK_EQ(done, 1);
	CHECK_EQ(res.status, 0);
	CHECKM(nl == 1 && !memcmp(&late[0], &ab[0], sizeof(ab[0])),
	       "A, cut at its deadline and stored by the daemon since, was not reported late");
	CHECK_EQ(kvt_rows_store_late(r, late, 4), 0); /* once */

	done = kvt_rows_store(r, &ab[3], NULL, NULL, &row0, 1, test_now_ns() + 200ull * 1000000,
			      &res);
	CHECK_EQ(res.status, -ETIME);
	int rm = kvt_remove_sync(s, &ab[3]);
	for (int i = 4; i < 6; i++)
		CHECK_EQ(kvt_rows_store(r, &ab[i], NULL, NULL, &row1, 1,
					test_now_ns() + 5000ull * 1000000, &res), 1);
	nl = kvt_rows_store_late(r, late, 4);
	printf("  3. store of C cut, C removed from %d tier, two stores through: late: %zu\n", rm, nl);
	CHECK_EQ(rm, 1); /* from the one tier, where its write had landed */
	CHECKM(nl == 0, "a cut put that was removed before it could be looked up was reported");

	kvt_rows_close(r);
	kvt_store_close(s);
	kvtd_stop();
	free(rows);
	test_rmdir(dir);
	free(dir);
	printf("daemon_rows_late: ok\n");
	return 0;
}
