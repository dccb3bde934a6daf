/*
 * fs_live_local.c - fs.live_dir is used only on a node-local file system. A writer's
 * liveness file (src/fs_live.h) proves it dead when a sweep can take its flock; on a file
 * system shared between nodes that lock may not be seen by another node's probe, and a
 * remote writer with this host's name (a container) could pass for a local one, so its
 * temporaries would be removed under it. Until 2026-12-07 nothing checked the docs' "must be
 * node-local" (docs/TIERS.md, fs): now a live_dir on any file system not known to be
 * node-local is not used, with a one-line warning naming its type.
 *
 *  1. fs.live_dir on a FUSE mount (tests/fuse/slowfs): the store opens and stores, the
 *     warning names fuse, and no liveness file is created there;
 *  2. fs.live_dir on tmpfs (/dev/shm): the store holds its liveness file there while open,
 *     and no warning.
 */
#include <dirent.h>

#include "lib/slowfs.h"
#include "testlib.h"

static char warned[512]; /* the last log line about fs.live_dir */

static void capture(void *arg, int level, const char *msg)
{
	(void)arg;
	if (strstr(msg, "fs.live_dir"))
		snprintf(warned, sizeof(warned), "%s", msg);
	test_log(NULL, level, msg);
}

/* Files named kvtier-fs-writer.* in dir. */
static int writer_files(const char *dir)
{
	DIR *d = opendir(dir);
	CHECK(d);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, "kvtier-fs-writer.", 17);
	closedir(d);
	return n;
}

/* An fs store on dir/fs with fs.live_dir = live: a chunk put and flushed, then the number
 * of liveness files in live while it is open. */
static int open_and_count(const char *dir, const char *live)
{
	char fsdir[4200];
	snprintf(fsdir, sizeof(fsdir), "%s/fs", dir);
	struct kvt_config *c = test_config("fs", dir);
	kvt_config_set_log(c, capture, NULL, KVT_LOG_DEBUG);
	test_set(c, "fs.dir", fsdir);
	test_set(c, "fs.fsync", "none");
	test_set(c, "fs.live_dir", live);
	struct kvt_store *s = test_open(c);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	size_t len = kvt_payload_bytes(g, g->chunk_tokens);
	void *buf = malloc(len);
	CHECK(buf);
	test_fill(buf, len, 3);
	struct kvt_key k;
	test_chain_keys(s, &k, 1, 0x5a);
	CHECK_RC(kvt_put_sync(s, &k, NULL, g->chunk_tokens, buf, len), 0);
	CHECK_RC(kvt_flush_sync(s), 0);
	int n = writer_files(live);
	kvt_store_close(s);
	free(buf);
	return n;
}

int main(void)
{
	static struct slowfs f;
	int rc = slowfs_start(&f, "fs_live_local", NULL);
	if (rc)
		return rc;
	char *dir = test_tmpdir("fs_live_local");

	/* 1. on FUSE: not used, and said so */
	int n = open_and_count(dir, f.mnt);
	printf("  fs.live_dir on FUSE: %d liveness files; log: %s\n", n, warned);
	CHECKM(n == 0, "a liveness file on a FUSE mount");
	CHECKM(strstr(warned, "fuse") && strstr(warned, "not a node-local"),
	       "no warning naming the file system: '%s'", warned);
	slowfs_stop(&f);

	/* 2. on tmpfs (a directory in /dev/shm, fs.live_dir's default): used while open.
	 * Not under the test directory, which may be on any file system. */
	char live[] = "/dev/shm/kvt-fs_live_local-XXXXXX";
	CHECKM(mkdtemp(live), "mkdtemp in /dev/shm: %s", strerror(errno));
	warned[0] = '\0';
	n = open_and_count(dir, live);
	printf("  fs.live_dir on %s: %d liveness file(s) while open, %d after close\n", live, n,
	       writer_files(live));
	CHECKM(n == 1, "the store held no liveness file on a local file system");
	CHECKM(writer_files(live) == 0, "a liveness file left after close");
	CHECKM(!strstr(warned, "not a node-local"), "warned on a local file system: %s", warned);
	CHECK(rmdir(live) == 0);

	test_rmdir(dir);
	free(dir);
	printf("fs_live_local: ok\n");
	return 0;
}
