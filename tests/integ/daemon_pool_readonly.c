/*
 * daemon_pool_readonly.c - with daemon.shared_writes=false kvtierd hands its clients the
 * DRAM pool to read objects in place, and no client can write it: not through the
 * descriptor it was given (opened O_RDONLY), and not through that descriptor reopened
 * O_RDWR by its /proc/self/fd entry - a memfd's access is checked on the file, not on the
 * descriptor, so until 2026-12-04 the reopen mapped the whole pool writable and a client
 * could change any published object, which the daemon and every client then served (a
 * review's reproducer: "get after the write through the reopened fd: ... payload DIFFERS").
 * The pool is now sealed with F_SEAL_FUTURE_WRITE before it is handed out.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>

#include "internal.h"
#include "lib/daemon_harness.h"

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	char *dir = test_tmpdir("daemon_pool_readonly");
	char sock[100];
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	const char *args[] = {"--set", "dram.bytes=256KiB", "--set", "daemon.shared_writes=false",
			      NULL};
	kvtd_start_test(sock, dir, args);
	struct kvt_store *s = kvtd_client_store(dir);
	memcpy(kvtd_ns, kvt_store_ns_id(s), sizeof(kvtd_ns));
	size_t payload = kvt_payload_bytes(kvt_store_geometry(s), 16);
	uint8_t *buf = malloc(payload), *out = malloc(payload);
	CHECK(buf && out);
	test_fill(buf, payload, 1);
	struct kvt_key k = {{0}};
	k.bytes[0] = 0x5a;
	CHECK_RC(kvt_put_sync(s, &k, NULL, 16, buf, payload), 0);

	/* A raw client's HELLO, keeping the pool descriptor it is given. */
	int pfd;
	struct raw r = raw_attach_fd(&pfd);
	struct kvtd_rep rep;
	struct kvtd_info info;
	memcpy(&info, r.shm, sizeof(info));
	CHECKM(pfd >= 0 && info.pool_bytes && !info.pool_writable,
	       "the pool is offered, read-only (fd %d, writable %u)", pfd, info.pool_writable);
	CHECK(mmap(NULL, info.pool_bytes, PROT_READ, MAP_SHARED, pfd, 0) != MAP_FAILED);

	/* Every way to write it fails. */
	void *w1 = mmap(NULL, info.pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
	char proc[64];
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", pfd);
	int wfd = open(proc, O_RDWR | O_CLOEXEC);
	void *w2 = MAP_FAILED;
	ssize_t wr = -1;
	if (wfd >= 0) {
		w2 = mmap(NULL, info.pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, wfd, 0);
		uint8_t junk[64];
		memset(junk, 0xee, sizeof(junk));
		wr = pwrite(wfd, junk, sizeof(junk), 0);
	}
	printf("read-only pool: mmap writable %s; reopened O_RDWR %s, then mmap writable %s, "
	       "pwrite %s\n",
	       w1 == MAP_FAILED ? "refused" : "ALLOWED", wfd >= 0 ? "allowed" : "refused",
	       wfd < 0 ? "-" : w2 == MAP_FAILED ? "refused" : "ALLOWED",
	       wfd < 0 ? "-" : wr < 0 ? "refused" : "ALLOWED");
	if (w2 != MAP_FAILED) { /* the old code: show what it lets a client do */
		struct kvtd_req g = {.op = KVTD_GET_PIN, .key = k};
		CHECK_RC(raw_call(r.sock, &g, -1, &rep), 0);
		if (rep.res.status == 0)
			memset((uint8_t *)w2 + rep.slot_off + rep.res.bytes - 64, 0xee, 64);
		memset(out, 0, payload);
		CHECK_RC(kvt_get_sync(s, &k, 0, 0, out, payload, NULL), 0);
		printf("  a get after writing through the reopened descriptor: payload %s\n",
		       memcmp(out, buf, payload) ? "CHANGED" : "the same");
	}
	CHECK(w1 == MAP_FAILED);
	CHECK(w2 == MAP_FAILED);
	CHECK(wr < 0);
	memset(out, 0, payload);
	CHECK_RC(kvt_get_sync(s, &k, 0, 0, out, payload, NULL), 0);
	CHECK(!memcmp(out, buf, payload));

	/* The daemon itself still writes its pool: a put after the seal is served back. */
	k.bytes[1] = 1;
	test_fill(buf, payload, 2);
	CHECK_RC(kvt_put_sync(s, &k, NULL, 16, buf, payload), 0);
	memset(out, 0, payload);
	CHECK_RC(kvt_get_sync(s, &k, 0, 0, out, payload, NULL), 0);
	CHECK(!memcmp(out, buf, payload));

	if (wfd >= 0)
		close(wfd);
	close(pfd);
	raw_close(&r);
	kvt_store_close(s);
	kvtd_stop();
	test_rmdir(dir);
	free(dir);
	free(buf);
	free(out);
	printf("daemon_pool_readonly: ok\n");
	return 0;
}
