/*
 * daemon_signals.c - a client-mode call against a daemon that stopped answering (SIGSTOP)
 * ends at store.daemon_timeout_ms even while the client's threads are signalled more often
 * than that (a profiler's timer, SIGCHLD in a busy server). Why: a receive under
 * SO_RCVTIMEO is interrupted by any signal with a handler (EINTR, whatever SA_RESTART
 * says), and until 2026-12-06 the client retried it with a whole timeout again, so the call
 * waited as long as the signals came. With a 1 s timeout and every thread of the process
 * signalled every 100 ms (a no-op handler, SA_RESTART) for 6 s, a get_sync returns within
 * 2 s (before: after the signals stopped, ~7 s).
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>

#include "internal.h"
#include "lib/daemon_harness.h"

static _Atomic int stop_signals;
static pid_t signaller_tid;

static void on_sig(int sig)
{
	(void)sig;
}

/* Every 100 ms, SIGUSR2 to every other thread of the process, for at most 6 s. */
static void *signaller(void *arg)
{
	(void)arg;
	signaller_tid = (pid_t)syscall(SYS_gettid);
	uint64_t t0 = test_now_ns();
	while (!atomic_load(&stop_signals) && test_ms_since(t0) < 6000) {
		DIR *d = opendir("/proc/self/task");
		struct dirent *e;
		while (d && (e = readdir(d))) {
			pid_t tid = (pid_t)atoi(e->d_name);
			if (tid > 0 && tid != signaller_tid)
				syscall(SYS_tgkill, getpid(), tid, SIGUSR2);
		}
		if (d)
			closedir(d);
		usleep(100 * 1000);
	}
	return NULL;
}

int main(void)
{
	char *dir = test_tmpdir("daemon_signals");
	char sp[100];
	snprintf(sp, sizeof(sp), "%s/d.sock", dir);
	struct sigaction sa = {.sa_handler = on_sig, .sa_flags = SA_RESTART};
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGUSR2, &sa, NULL) == 0);
	kvtd_start_test(sp, dir, NULL);
	struct kvt_config *cfg = test_config("dram,nvme", dir);
	test_set(cfg, "store.daemon", sp);
	test_set(cfg, "store.daemon_timeout_ms", "1000");
	struct kvt_store *s = test_open(cfg);
	memcpy(kvtd_ns, kvt_store_ns_id(s), sizeof(kvtd_ns));
	struct kvt_key k;
	memset(k.bytes, 0x42, sizeof(k.bytes));
	kvtd_check_roundtrip(s, &k, 7); /* the connection is up */

	/* stopped for sure before the get (kvtd_pause waits for state T): a plain kill()
	 * returns before the stop lands, and under ASan once the daemon answered the get
	 * first - "0 (success) after 0 ms" (CI, 2026-12-06) */
	kvtd_pause();
	pthread_t t;
	CHECK(pthread_create(&t, NULL, signaller, NULL) == 0);
	size_t payload = kvt_payload_bytes(kvt_store_geometry(s), 16);
	uint8_t *buf = malloc(payload);
	struct kvt_result res;
	uint64_t t0 = test_now_ns();
	int rc = kvt_get_sync(s, &k, 0, 0, buf, payload, &res);
	uint64_t took = test_ms_since(t0);
	atomic_store(&stop_signals, 1);
	pthread_join(t, NULL);
	printf("a get from a stopped daemon, the client's threads signalled every 100 ms: %d "
	       "(%s) after %llu ms\n",
	       rc, kvt_strerror(rc), (unsigned long long)took);
	CHECKM(took < 2000, "the call waited %llu ms with a 1 s timeout", (unsigned long long)took);
	CHECK(rc < 0);
	kill(kvtd_pid, SIGCONT);
	free(buf);
	kvt_store_close(s);
	kvtd_stop();
	test_rmdir(dir);
	free(dir);
	printf("daemon_signals: ok\n");
	return 0;
}
