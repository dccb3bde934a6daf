/*
 * tmpfs.h - a small tmpfs for the tests that need a file system of a known size (a full
 * disk, a log that cannot grow): mounted under a fresh /tmp/kvt-<name>-XXXXXX, unmounted and
 * removed at exit. Why a header: three tests mounted one the same way, each with its own
 * copy of the set-up. Include after nvme_util.h (rm_rf, CHECK).
 */
#ifndef KVT_TEST_TMPFS_H
#define KVT_TEST_TMPFS_H

#include <sys/mount.h>

static char tmpfs_root[64], tmpfs_mnt[300];

static void tmpfs_cleanup(void)
{
	if (tmpfs_mnt[0])
		umount2(tmpfs_mnt, MNT_DETACH);
	rm_rf(tmpfs_root);
}

/* Mount a tmpfs of size (its mount option: "8m") at <root>/tmpfs and return that path; the
 * root directory (for other mounts beside it) is tmpfs_root. Exits 77 (a skip) without root
 * or where mounting is not permitted. */
static inline const char *tmpfs_mount(const char *name, const char *size)
{
	if (geteuid() != 0) {
		printf("SKIP: needs root to mount tmpfs\n");
		exit(77);
	}
	snprintf(tmpfs_root, sizeof(tmpfs_root), "/tmp/kvt-%s-XXXXXX", name);
	CHECK(mkdtemp(tmpfs_root));
	atexit(tmpfs_cleanup);
	char m[300], opt[64];
	snprintf(m, sizeof(m), "%s/tmpfs", tmpfs_root);
	snprintf(opt, sizeof(opt), "size=%s", size);
	CHECK_EQ(mkdir(m, 0755), 0);
	if (mount("tmpfs", m, "tmpfs", 0, opt) < 0) {
		printf("SKIP: mount -t tmpfs not permitted here: %s\n", strerror(errno));
		exit(77);
	}
	snprintf(tmpfs_mnt, sizeof(tmpfs_mnt), "%s", m);
	return tmpfs_mnt;
}

#endif
