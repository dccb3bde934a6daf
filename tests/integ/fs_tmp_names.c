/*
 * fs_tmp_names.c - the fs tier's temporary names must be unique per open, not only per host
 * and pid: a restarted instance of a container is pid 1 again on the same host name, and
 * two opens in one process share both. Until 2026-12-04 a name was
 * .<key>.tmp.<host>.<pid>.<n> with n counting from 0 at each open, so
 *   1. a put of a key whose temporary a killed earlier instance (same host, same pid) left
 *      behind failed with EEXIST until a sweep removed it (fs.tmp_max_age_s, an hour);
 *   2. a drop of a corrupt object renamed it aside onto such a name, replacing the file
 *      there (another writer's temporary, lost to it).
 * The leftovers are planted with the names the old scheme gave this process's writes.
 */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/tierh.h"
#include "lib/fs_sweep.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

#define OBJ 8192
#define LEFT 64 /* leftovers planted per key: n = 0 .. LEFT-1 */

static char g_root[256];

static struct kvt_tier *fs_open(const char *dir)
{
	const char *kv[] = {"fs.dir", dir, "fs.threads", "2", "fs.direct", "off", NULL};
	struct kvt_config *c = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, c, &t), 0);
	kvt_config_destroy(c);
	return t;
}

/* Plant, in k's leaf, the temporaries an earlier instance with this host and pid left
 * (old names, n = 0 .. LEFT-1), each holding 100 bytes. The leaf's path in leaf. */
static void plant_leftovers(const char *dir, const struct kvt_key *k, char *leaf, size_t n)
{
	char hex[65], host[64], p[1200], cmd[1300];
	kvt_key_to_hex(k, hex);
	fs_host_part(host, sizeof(host));
	snprintf(leaf, n, "%s/v1/%.2s/%.2s", dir, hex, hex + 2);
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", leaf);
	CHECK_EQ(system(cmd), 0);
	for (int i = 0; i < LEFT; i++) {
		snprintf(p, sizeof(p), "%s/.%s.tmp.%s.%ld.%d", leaf, hex, host, (long)getpid(), i);
		int fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0600);
		CHECK(fd >= 0);
		char junk[100] = {0};
		CHECK_EQ(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
		close(fd);
	}
}

/* Files in leaf whose names start with prefix and that hold 100 bytes (the leftovers). */
static int leftovers(const char *leaf, const char *prefix)
{
	DIR *d = opendir(leaf);
	CHECK(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));) {
		struct stat st;
		if (strncmp(e->d_name, prefix, strlen(prefix)) ||
		    fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		n += st.st_size == 100;
	}
	closedir(d);
	return n;
}

int main(void)
{
	const char *base = getenv("KVT_TEST_DIR") ? getenv("KVT_TEST_DIR") : "/tmp";
	snprintf(g_root, sizeof(g_root), "%s/kvt-fs-tmp-names-XXXXXX", base);
	CHECK(mkdtemp(g_root));
	char dir[400], leaf[800], hex[65], prefix[80], cmd[600];
	snprintf(dir, sizeof(dir), "%s/store", g_root);
	uint8_t *obj = NULL, *back = NULL;
	CHECK(posix_memalign((void **)&obj, 4096, OBJ) == 0);
	CHECK(posix_memalign((void **)&back, 4096, OBJ) == 0);
	th_obj_fill(obj, OBJ, 11);

	/* 1. A put over an earlier instance's leftovers, by two opens in turn (the second a
	 * restart, as far as the names go). */
	struct kvt_key k;
	th_key(&k, 1, 500);
	kvt_key_to_hex(&k, hex);
	snprintf(prefix, sizeof(prefix), ".%s.tmp.", hex);
	plant_leftovers(dir, &k, leaf, sizeof(leaf));
	for (int i = 0; i < 2; i++) {
		struct kvt_tier *t = fs_open(dir);
		int w = th_write(t, &k, obj, OBJ);
		printf("  1. open %d: a put of a key with %d leftover temporaries: %d\n", i + 1,
		       LEFT, w);
		CHECK_EQ(w, 0);
		CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ);
		CHECK(!memcmp(back, obj, OBJ));
		CHECK_EQ(th_remove(t, &k), 0);
		th_close(t);
	}
	CHECK_EQ(leftovers(leaf, prefix), LEFT); /* a sweep's business, not the put's */

	/* 2. A drop moves the corrupt object aside without replacing a temporary there. */
	struct kvt_key k2;
	th_key(&k2, 2, 500);
	kvt_key_to_hex(&k2, hex);
	snprintf(prefix, sizeof(prefix), ".%s.tmp.", hex);
	plant_leftovers(dir, &k2, leaf, sizeof(leaf));
	char path[1000];
	snprintf(path, sizeof(path), "%s/%s", leaf, hex);
	int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600); /* another node's object */
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, obj, OBJ), OBJ);
	close(fd);
	struct kvt_tier *t = fs_open(dir); /* a fresh open: its first old name was n = 0 */
	CHECK_EQ(th_read_all(t, &k2, back, OBJ), OBJ); /* the read found corrupt */
	t->ops->drop_corrupt(t, &k2);
	th_close(t); /* runs the drop */
	int left = leftovers(leaf, prefix);
	printf("  2. a drop with %d leftover temporaries: the object %s, %d of them left\n", LEFT,
	       access(path, F_OK) ? "dropped" : "STILL THERE", left);
	CHECK(access(path, F_OK) < 0);
	CHECK_EQ(left, LEFT);

	free(obj);
	free(back);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_root);
	CHECK_EQ(system(cmd), 0);
	printf("fs_tmp_names: ok\n");
	return 0;
}
