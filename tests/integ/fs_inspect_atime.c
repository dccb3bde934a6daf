/*
 * fs_inspect_atime.c - inspection (store.read_only: `kvtier verify`, `ls`, `stat`) never
 * changes an fs store's atimes, which its sweeps evict by (the later of atime and mtime),
 * also when an object belongs to another user. Its reads ask for O_NOATIME, which the
 * kernel refuses (EPERM) to a process that neither owns the file nor has CAP_FOWNER; until
 * 2026-12-06 the read was then made without it, and moved the atime (a look changed which
 * objects the sweeps evict next). Putting the atime back after the read is no way out: an
 * explicit time needs the same owner or capability (checked below). Now such a file is
 * read only on a mount that never updates atimes (noatime), else refused (-EPERM).
 * The reader is a child that drops CAP_FOWNER; the object is chown'ed to another uid and
 * dated 2020 (atime = mtime: relatime updates it at the next read), on a real tmpfs:
 *  1. relatime: the read is refused, the atime stays; futimens would be refused too;
 *  2. noatime: the read succeeds, the atime stays.
 * Needs root (mounts, chown); skips otherwise (exit 77).
 */
#include <fcntl.h>
#include <ftw.h>
#include <linux/capability.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "lib/rm_rf.h"
#include "lib/tierh.h"


#include "lib/tmpfs.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

#define OBJ 8192
#define OTHER_UID 65534
#define DATED 1577836800 /* 2020-01-01 */

static char noatime_mnt[400];

static void noatime_cleanup(void)
{
	if (noatime_mnt[0])
		umount2(noatime_mnt, MNT_DETACH);
}

static struct kvt_tier *open_fs(const char *dir, bool ro)
{
	const char *kv[] = {"fs.dir", dir, "fs.direct", "off", "fs.threads", "2",
			    "store.read_only", ro ? "true" : "false", NULL};
	struct kvt_config *c = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, c, &t), 0);
	kvt_config_destroy(c);
	return t;
}

/* The calling process loses CAP_FOWNER (as nvme_atime.c): O_NOATIME, and setting a file's
 * times explicitly, then need the file's owner. */
static int drop_fowner(void)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d))
		return -1;
	d[CAP_FOWNER / 32].effective &= ~(1u << (CAP_FOWNER % 32));
	return (int)syscall(SYS_capset, &h, d);
}

/* A store at dir holding key k, its file owned by OTHER_UID and dated DATED; its path. */
static void plant(const char *dir, const struct kvt_key *k, const uint8_t *obj, char *path,
		  size_t n)
{
	struct kvt_tier *t = open_fs(dir, false);
	CHECK_EQ(th_write(t, k, obj, OBJ), 0);
	th_close(t);
	char hex[65];
	kvt_key_to_hex(k, hex);
	snprintf(path, n, "%s/v1/%.2s/%.2s/%s", dir, hex, hex + 2, hex);
	CHECK_EQ(chown(path, OTHER_UID, OTHER_UID), 0);
	struct timespec ts[2] = {{DATED, 0}, {DATED, 0}};
	CHECK_EQ(utimensat(AT_FDCWD, path, ts, 0), 0);
}

/* In a child without CAP_FOWNER: an inspection's read of k. Exit status: 0 read whole,
 * 1 refused -EPERM, 2 anything else; 3 when restore is set and putting the atime back
 * explicitly (the way out the fix does not take) was allowed. */
static int inspect(const char *dir, const struct kvt_key *k, const char *path, bool restore)
{
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (drop_fowner() < 0) {
			perror("capset");
			_exit(2);
		}
		if (restore) {
			struct timespec ts[2] = {{DATED, 0}, {0, UTIME_OMIT}};
			if (utimensat(AT_FDCWD, path, ts, 0) == 0 || errno != EPERM)
				_exit(3);
		}
		struct kvt_tier *t = open_fs(dir, true);
		uint8_t *back = malloc(OBJ);
		int64_t rc = th_read_all(t, k, back, OBJ);
		th_close(t);
		printf("    inspection's read: %lld\n", (long long)rc);
		fflush(stdout);
		_exit(rc == OBJ ? 0 : rc == -EPERM ? 1 : 2);
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static time_t atime_of(const char *path)
{
	struct stat st;
	CHECK_EQ(stat(path, &st), 0);
	return st.st_atime;
}

int main(void)
{
	const char *mnt = tmpfs_mount("fs_inspect_atime", "16m"); /* relatime, the default */
	snprintf(noatime_mnt, sizeof(noatime_mnt), "%s/noatime", tmpfs_root);
	CHECK_EQ(mkdir(noatime_mnt, 0755), 0);
	CHECK_EQ(mount("tmpfs", noatime_mnt, "tmpfs", MS_NOATIME, "size=16m"), 0);
	atexit(noatime_cleanup);
	uint8_t *obj = malloc(OBJ);
	CHECK(obj);
	struct kvt_key k;
	th_key(&k, 1, 33);
	th_obj_fill(obj, OBJ, 3);
	char dir[500], path[800];

	/* 1. relatime: refused, atime kept. */
	snprintf(dir, sizeof(dir), "%s/store", mnt);
	plant(dir, &k, obj, path, sizeof(path));
	int r = inspect(dir, &k, path, true);
	time_t a = atime_of(path);
	printf("  1. relatime, another owner: the read %s, atime %s\n",
	       r == 0 ? "was made" : r == 1 ? "was refused" : "FAILED",
	       a == DATED ? "unchanged" : "CHANGED");
	CHECKM(r != 3, "futimens with an explicit atime was allowed without CAP_FOWNER");
	CHECKM(a == DATED, "inspection moved the atime of another user's object (%lld -> %lld)",
	       (long long)DATED, (long long)a);
	CHECK_EQ(r, 1);

	/* 2. noatime: read, atime kept. */
	snprintf(dir, sizeof(dir), "%s/store", noatime_mnt);
	plant(dir, &k, obj, path, sizeof(path));
	r = inspect(dir, &k, path, false);
	a = atime_of(path);
	printf("  2. noatime, another owner: the read %s, atime %s\n",
	       r == 0 ? "was made" : r == 1 ? "was refused" : "FAILED",
	       a == DATED ? "unchanged" : "CHANGED");
	CHECK_EQ(r, 0);
	CHECK(a == DATED);
	free(obj);
	printf("fs_inspect_atime: ok\n");
	return 0;
}
