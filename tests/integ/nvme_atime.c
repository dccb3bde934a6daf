/*
 * nvme_atime.c - a read of a stored object leaves the file's atime alone (O_NOATIME: the
 * tier never uses atime, and on a relatime mount an object's first read after a day, or
 * after its write, dirtied the inode - a journal write per read until 2026-12-06), and a
 * store whose files belong to another owner, where the kernel refuses O_NOATIME (EPERM),
 * is still read: the tier opens without it from then on.
 */
#include <linux/capability.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "nvme_util.h"

#define OBJ 20480 /* one full object at test_geom */

static int read_ok(const char *dir, const struct kvt_key *k)
{
	struct kvt_tier *t;
	if (open_tier(&t, "nvme.dirs", dir, NULL))
		return -1;
	uint8_t *b = abuf(OBJ);
	int rc = t_read1(t, k, b, 0, OBJ) == OBJ && !check_object(b, OBJ, k) ? 0 : -1;
	kvt__tier_close(t);
	free(b);
	return rc;
}

/* The calling process loses CAP_FOWNER: O_NOATIME then needs the file's owner. */
static int drop_fowner(void)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d))
		return -1;
	d[CAP_FOWNER / 32].effective &= ~(1u << (CAP_FOWNER % 32));
	return (int)syscall(SYS_capset, &h, d);
}

int main(void)
{
	char root[] = "/tmp/kvt-nvme-atime-XXXXXX";
	CHECK(mkdtemp(root));
	char dir[300], path[600];
	snprintf(dir, sizeof(dir), "%s/d", root);
	struct kvt_tier *t;
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, NULL), 0);
	struct kvt_key k = make_key(1, 0);
	uint8_t *b = abuf(OBJ);
	fill_object(b, OBJ, &k);
	CHECK_EQ(t_write(t, &k, b, OBJ), 0);
	kvt__tier_close(t);
	free(b);
	key_path(dir, &k, path, sizeof(path));

	/* An atime three days old: relatime updates it at the next read. */
	struct timespec ts[2] = {{time(NULL) - 3 * 86400, 0}, {0, UTIME_OMIT}};
	CHECK_EQ(utimensat(AT_FDCWD, path, ts, 0), 0);
	struct stat st;
	CHECK_EQ(read_ok(dir, &k), 0);
	CHECK_EQ(stat(path, &st), 0);
	CHECKM(st.st_atim.tv_sec == ts[0].tv_sec, "a read moved the object's atime by %lld s",
	       (long long)(st.st_atim.tv_sec - ts[0].tv_sec));

	/* Files of another owner, read by a process that may not set O_NOATIME on them. */
	if (geteuid() != 0) {
		printf("nvme_atime: not root: the EPERM fallback is not tested\n");
		rm_rf(root);
		return 77;
	}
	CHECK_EQ(chown(path, 4321, 4321), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (drop_fowner()) {
			perror("capset");
			_exit(2);
		}
		int fd = open(path, O_RDONLY | O_NOATIME);
		if (fd >= 0 || errno != EPERM) {
			fprintf(stderr, "O_NOATIME was not refused: the fallback is not tested\n");
			_exit(3);
		}
		_exit(read_ok(dir, &k) ? 1 : 0);
	}
	int ws;
	CHECK_EQ(waitpid(pid, &ws, 0), pid);
	CHECKM(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
	       "a store of another owner's files was not read (child status %d)", ws);
	rm_rf(root);
	printf("nvme_atime: ok\n");
	return 0;
}
