/*
 * daemon_cause.c - a miss through kvtierd says why, as an in-process get does
 * (kvt_result.cause, docs/DAEMON.md). Why a test of its own: the cause crosses three
 * pieces (the engine's promotion, the daemon's GET_PIN / GET reply, the client library)
 * and each can drop it. With the real daemon binary:
 *  1. an object whose file on the nvme tier is corrupt: a client-mode store's get (through
 *     the shared pool, GET_PIN) misses with cause -EBADMSG; so does a raw GET through the
 *     region; the next get of the dropped object is a plain absence (cause 0);
 *  2. the daemon gone: a get misses with the transport's error as its cause; so does a
 *     lookup (its miss is not known absent).
 */
#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>

#include "engine.h"
#include "internal.h"
#include "lib/daemon_harness.h"

static char *dir, sock_path[100];
static size_t PAYLOAD;

static void start_daemon(void)
{
	const char *extra[] = {"--set", "dram.bytes=16MiB", NULL};
	kvtd_start_test(sock_path, dir, extra);
}

static void key_of(uint64_t i, struct kvt_key *k)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->bytes, &i, sizeof(i));
	k->bytes[31] = 0xca;
}

/* The object files of the nvme tier: every file of at least a header and a body. */
static int n_files;
static char files[16][4096];
static int collect(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag == FTW_F && (size_t)sb->st_size >= 4096 + PAYLOAD && n_files < 16)
		snprintf(files[n_files++], sizeof(files[0]), "%s", p);
	return 0;
}

int main(void)
{
	dir = test_tmpdir("daemon_cause");
	snprintf(sock_path, sizeof(sock_path), "%s/kvtierd.sock", dir);
	signal(SIGPIPE, SIG_IGN);
	start_daemon();
	struct kvt_store *s = kvtd_client_store(dir);
	PAYLOAD = kvt_payload_bytes(kvt_store_geometry(s), 16);
	memcpy(kvtd_ns, kvt_store_ns_id(s), sizeof(kvtd_ns));
	uint8_t *buf = malloc(PAYLOAD);
	struct kvt_key k[2];
	for (int i = 0; i < 2; i++) {
		key_of((uint64_t)i + 1, &k[i]);
		test_fill(buf, PAYLOAD, 50 + (uint64_t)i);
		CHECK_RC(kvt_put_sync(s, &k[i], NULL, 16, buf, PAYLOAD), 0);
	}
	CHECK_RC(kvt_flush_sync(s), 0); /* on the nvme tier */
	kvt_store_close(s);
	kvtd_stop();

	/* Flip one byte in the body of each object; the restarted daemon's DRAM is empty, so
	 * every get promotes from the nvme tier and meets the corrupt copy. */
	char d[300];
	snprintf(d, sizeof(d), "%s/data", dir);
	nftw(d, collect, 16, FTW_PHYS);
	CHECKM(n_files == 2, "%d object files", n_files);
	for (int i = 0; i < n_files; i++) {
		int fd = open(files[i], O_RDWR);
		CHECK(fd >= 0);
		uint8_t b;
		CHECK(pread(fd, &b, 1, 4096 + 100) == 1);
		b ^= 0x40;
		CHECK(pwrite(fd, &b, 1, 4096 + 100) == 1);
		close(fd);
	}
	start_daemon();
	s = kvtd_client_store(dir);

	/* 1a. A client store (it maps the pool: GET_PIN) misses, saying why. */
	struct kvt_result res = {0};
	CHECK_RC(kvt_get_sync(s, &k[0], 0, 0, buf, PAYLOAD, &res), -ENOENT);
	CHECKM(res.cause == -EBADMSG, "client get of a corrupt object: cause %d", res.cause);
	/* dropped: now simply absent */
	res = (struct kvt_result){0};
	CHECK_RC(kvt_get_sync(s, &k[0], 0, 0, buf, PAYLOAD, &res), -ENOENT);
	CHECKM(res.cause == 0, "get of a dropped object: cause %d", res.cause);

	/* 1b. A GET through the region (no pool) carries it too. */
	struct raw r = raw_attach();
	struct kvtd_req q = {.op = KVTD_GET, .key = k[1], .off = 0, .len = PAYLOAD};
	struct kvtd_rep rep;
	CHECK_RC(raw_call(r.sock, &q, -1, &rep), 0);
	CHECK_RC(rep.res.status, -ENOENT);
	CHECKM(rep.res.cause == -EBADMSG, "region GET of a corrupt object: cause %d",
	       rep.res.cause);
	raw_close(&r);
	struct kvt_stats st;
	CHECK_RC(kvt_stats(s, &st), 0);
	CHECK(st.tier[1].checksum_failures == 2);

	/* 2. The daemon gone: a miss whose cause is the transport's error. */
	kvtd_kill();
	res = (struct kvt_result){0};
	CHECK_RC(kvt_get_sync(s, &k[1], 0, 0, buf, PAYLOAD, &res), -ENOENT);
	CHECKM(res.cause < 0 && res.cause != -ENOENT, "get without a daemon: cause %d",
	       res.cause);
	res = (struct kvt_result){0};
	CHECK_RC(kvt__lookup_sync_res(s, &k[1], 1, NULL, &res), 0);
	CHECKM(res.cause < 0 && res.cause != -ENOENT, "lookup without a daemon: cause %d",
	       res.cause);
	kvt_store_close(s);
	free(buf);
	test_rmdir(dir);
	printf("daemon_cause: ok\n");
	return 0;
}
