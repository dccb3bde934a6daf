/*
 * fs_sweep_relook.c - a sweep looks at each name again just before it removes it, and a
 * file that is not the one its walk listed, or was used since, stays (commit 33e9439: the
 * walk and the sort take minutes on a large shared tree, and until 2026-12-06 the names
 * listed were removed whatever they held by then - another node's acknowledged put of the
 * key went). The window is forced by pausing the sweep between its listing and its
 * removals: qsort is interposed (the tier is linked in statically; the sweep sorts what it
 * listed, oldest first, exactly there), and while it is held "another node"
 *   - puts k0 again (a new file renamed over the name),
 *   - reads k1 (its atime moves to now).
 * Six objects on a directory of fs.bytes = 4 objects: k0..k4 dated 2001 (oldest first), the
 * sixth put by this node (its first write, which sweeps). The sweep must remove k2 and
 * keep k0 (the new copy) and k1.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "lib/tierh.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

#define OBJ 8192
#define PLANTED 5

static char paths[PLANTED][800];
static ino_t k0_new_ino;
static _Atomic int armed, paused;

/* "Another node", while the sweep is between its listing and its removals. */
static void meanwhile(void)
{
	char tmp[900];
	snprintf(tmp, sizeof(tmp), "%s.othernode.tmp", paths[0]);
	int fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY, 0600);
	CHECK(fd >= 0);
	static uint8_t obj[OBJ];
	th_obj_fill(obj, OBJ, 100);
	CHECK_EQ(write(fd, obj, OBJ), OBJ);
	struct stat st;
	CHECK_EQ(fstat(fd, &st), 0);
	k0_new_ino = st.st_ino;
	close(fd);
	CHECK_EQ(rename(tmp, paths[0]), 0); /* k0 put again */
	struct timespec used[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
	CHECK_EQ(utimensat(AT_FDCWD, paths[1], used, 0), 0); /* k1 read */
	atomic_store(&paused, 1);
}

typedef void (*qsort_fn)(void *, size_t, size_t, int (*)(const void *, const void *));

void qsort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
	/* the sweep's sort of the six objects it listed, once */
	if (n == PLANTED + 1 && atomic_exchange(&armed, 0))
		meanwhile();
	static qsort_fn real;
	if (!real)
		real = (qsort_fn)dlsym(RTLD_NEXT, "qsort");
	real(base, n, size, cmp);
}

static bool present(const char *p, ino_t *ino)
{
	struct stat st;
	if (lstat(p, &st) < 0)
		return false;
	if (ino)
		*ino = st.st_ino;
	return true;
}

int main(void)
{
	const char *base = getenv("KVT_TEST_DIR") ? getenv("KVT_TEST_DIR") : "/tmp";
	char root[400], dir[500], cmd[1000], cap[32];
	snprintf(root, sizeof(root), "%s/kvt-fs-sweep-relook-XXXXXX", base);
	CHECK(mkdtemp(root));
	snprintf(dir, sizeof(dir), "%s/store", root);
	uint8_t *obj = malloc(OBJ);
	CHECK(obj);
	/* k0..k4 as other nodes left them, oldest first */
	for (int i = 0; i < PLANTED; i++) {
		struct kvt_key k;
		char hex[65];
		th_key(&k, (uint64_t)i, 44);
		kvt_key_to_hex(&k, hex);
		snprintf(cmd, sizeof(cmd), "mkdir -p %s/v1/%.2s/%.2s", dir, hex, hex + 2);
		CHECK_EQ(system(cmd), 0);
		snprintf(paths[i], sizeof(paths[i]), "%s/v1/%.2s/%.2s/%s", dir, hex, hex + 2, hex);
		th_obj_fill(obj, OBJ, (uint64_t)i);
		int fd = open(paths[i], O_CREAT | O_EXCL | O_WRONLY, 0600);
		CHECK(fd >= 0);
		CHECK_EQ(write(fd, obj, OBJ), OBJ);
		struct timespec ts[2] = {{1000000000 + i * 1000, 0}, {1000000000 + i * 1000, 0}};
		CHECK_EQ(futimens(fd, ts), 0);
		close(fd);
	}
	ino_t k0_old;
	CHECK(present(paths[0], &k0_old));
	snprintf(cap, sizeof(cap), "%d", 4 * OBJ);
	const char *kv[] = {"fs.dir", dir, "fs.direct", "off", "fs.threads", "2", "fs.bytes", cap,
			    NULL};
	struct kvt_config *c = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, c, &t), 0);
	kvt_config_destroy(c);
	struct kvt_key k5;
	th_key(&k5, 5, 44);
	th_obj_fill(obj, OBJ, 5);
	atomic_store(&armed, 1);
	CHECK_EQ(th_write(t, &k5, obj, OBJ), 0); /* its first write: a sweep */
	th_close(t);                              /* waits for it */
	CHECKM(atomic_load(&paused), "the sweep never sorted the six objects it listed");
	ino_t k0_now = 0;
	bool k0 = present(paths[0], &k0_now), k1 = present(paths[1], NULL),
	     k2 = present(paths[2], NULL);
	printf("fs_sweep_relook: k0 (put again meanwhile) %s, k1 (read meanwhile) %s, k2 "
	       "(untouched, oldest left) %s\n",
	       k0 ? (k0_now == k0_new_ino ? "kept (the new copy)" : "kept (OLD copy?)")
		  : "REMOVED",
	       k1 ? "kept" : "REMOVED", k2 ? "KEPT" : "removed");
	CHECKM(k0 && k0_now == k0_new_ino && k0_now != k0_old,
	       "another node's copy put while the sweep ran was removed");
	CHECKM(k1, "an object read while the sweep ran was removed as least recently used");
	CHECK(!k2);
	free(obj);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	CHECK_EQ(system(cmd), 0);
	printf("fs_sweep_relook: ok\n");
	return 0;
}
