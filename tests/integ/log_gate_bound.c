/*
 * log_gate_bound.c - a caller's log function that blocks does not turn a bounded open into
 * a hang (src/tier_bounded.c, the log gate).
 *
 * A tier's open runs on a helper thread, bounded by store.sync_timeout_ms. When the bound
 * passes, the opener closes the log gate and waits for calls already inside the caller's
 * log function - but at most LOG_GATE_WAIT_MS (1 s): a logger stuck on a full pipe or a
 * dead syslog must not hold kvt_store_open past its deadline for ever. The tier here is
 * the test tier "faulty" misconfigured (faulty.inner = dram), whose open logs one error
 * from the helper thread; the log function blocks 4 s on that message. The open must
 * return -ETIMEDOUT within the bound plus the gate's wait plus slack, well before the
 * logger returns, and the log function must not be entered again once the open returned.
 * Exit 0 pass, 1 fail.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"

#define SYNC_MS 300
#define GATE_WAIT_MS 1000 /* LOG_GATE_WAIT_MS */
#define SLACK_MS 1200
#define BLOCK_MS 4000

static pthread_t main_thread;
static atomic_int returned, late, blocked;

static void blocking_log(void *arg, int level, const char *msg)
{
	(void)arg;
	if (atomic_load(&returned)) {
		atomic_fetch_add(&late, 1);
		fprintf(stderr, "  LOG AFTER RETURN: [%d] %s\n", level, msg);
	}
	if (!pthread_equal(pthread_self(), main_thread) && strstr(msg, "faulty.inner")) {
		atomic_fetch_add(&blocked, 1);
		fprintf(stderr, "  log function blocking %d ms on: %s\n", BLOCK_MS, msg);
		usleep(BLOCK_MS * 1000);
		return;
	}
	fprintf(stderr, "  [%d] %s\n", level, msg);
}

int main(void)
{
	main_thread = pthread_self();
	char *dir = test_tmpdir("log-gate");
	struct kvt_config *c = test_config("faulty", dir);
	kvt_config_set_log(c, blocking_log, NULL, KVT_LOG_DEBUG);
	test_set(c, "faulty.inner", "dram"); /* refused by the tier's open, which logs why */
	test_set(c, "store.sync_timeout_ms", "300");

	struct kvt_store *s = NULL;
	double ms;
	int rc;
	TEST_BOUNDED(ms, SYNC_MS + GATE_WAIT_MS + SLACK_MS, "open", rc = kvt_store_open(c, &s),
		     "  open with a blocked logger: %.0f ms (%s)\n", ms, kvt_strerror(rc));
	atomic_store(&returned, 1);
	CHECKM(atomic_load(&blocked) == 1, "the tier's open logged %d times through the gate",
	       atomic_load(&blocked));
	CHECK_RC(rc, -ETIMEDOUT);
	CHECKM(ms >= SYNC_MS, "open returned in %.0f ms, before its bound", ms);
	kvt_config_destroy(c);

	/* the logger returns; the tier's open fails then, and nothing logs through the closed
	 * gate */
	usleep((BLOCK_MS + 500) * 1000);
	CHECKM(atomic_load(&late) == 0, "the log function was called %d times after the open "
					"returned", atomic_load(&late));
	test_rmdir(dir);
	free(dir);
	fprintf(stderr, "log_gate_bound: ok\n");
	return 0;
}
