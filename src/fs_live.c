/*
 * fs_live.c - proof that an fs-tier writer is dead, on the node it ran on (fs_live.h says
 * why). One file per writing instance, "<fs.live_dir>/kvtier-fs-writer.<nonce>", created
 * exclusively and flock()ed for the instance's life. flock locks belong to the open file,
 * so a probe from the same process (another open) is refused like anyone's while the owner
 * holds it, and the kernel drops the lock when the owner's last descriptor closes - at
 * exit, kill or crash.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "fs_live.h"

#define LIVE_PREFIX "kvtier-fs-writer."
#define LIVE_NAME LIVE_PREFIX "%016llx"

/* File systems by their statfs magic (linux/magic.h's values, spelled out: not every one is
 * in the headers of every distribution): the node-local ones, and common others named for
 * the warning. */
static const struct {
	unsigned long magic;
	const char *name;
	bool local;
} known_fs[] = {
    {0x01021994, "tmpfs", true},    {0x858458f6, "ramfs", true},
    {0xef53, "ext4", true},	    {0x58465342, "xfs", true},
    {0x9123683e, "btrfs", true},    {0xf2f52010, "f2fs", true},
    {0x794c7630, "overlay", true},  {0x2fc12fc1, "zfs", true},
    {0xca451a4e, "bcachefs", true}, {0x3153464a, "jfs", true},
    {0x52654973, "reiserfs", true}, {0x6969, "nfs", false},
    {0x00c36400, "cephfs", false},  {0x65735546, "fuse", false},
    {0xff534d42, "cifs", false},    {0xfe534d42, "smb2", false},
    {0x01161970, "gfs2", false},    {0x7461636f, "ocfs2", false},
    {0x0bd00bd0, "lustre", false},  {0x5346414f, "afs", false},
    {0x01021997, "9p", false},	    {0x6a656a63, "fakeowner", false},
    {0x6b414653, "kafs", false},
};

int kvt__fs_live_local(const char *dir, char *type, size_t n)
{
	struct statfs st;
	if (statfs(dir, &st) < 0)
		return -errno;
	unsigned long m = (unsigned long)(uint32_t)st.f_type;
	for (size_t i = 0; i < sizeof(known_fs) / sizeof(known_fs[0]); i++) {
		if (known_fs[i].magic != m)
			continue;
		if (known_fs[i].local)
			return 1;
		snprintf(type, n, "%s", known_fs[i].name);
		return 0;
	}
	snprintf(type, n, "type 0x%lx", m);
	return 0;
}

static int live_path(char *out, size_t cap, const char *dir, uint64_t nonce)
{
	int n = snprintf(out, cap, "%s/" LIVE_NAME, dir, (unsigned long long)nonce);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int kvt__fs_live_claim(const char *dir, uint64_t nonce)
{
	char p[4200], tmp[4210];
	int rc = live_path(p, sizeof(p), dir, nonce);
	if (rc < 0)
		return rc;
	/* Locked under another name, then renamed: a probe never sees the file unlocked
	 * while its writer lives (between the creation and the flock it would have). */
	snprintf(tmp, sizeof(tmp), "%s.new", p);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0 ||
	    renameat2(AT_FDCWD, tmp, AT_FDCWD, p, RENAME_NOREPLACE) < 0) {
		rc = -errno;
		unlink(tmp);
		close(fd);
		return rc;
	}
	return fd;
}

void kvt__fs_live_release(const char *dir, uint64_t nonce, int fd)
{
	char p[4200];
	if (fd < 0)
		return;
	/* unlink first: a probe that opened the file before this still finds it locked */
	if (live_path(p, sizeof(p), dir, nonce) == 0)
		unlink(p);
	close(fd);
}

enum kvt_fs_writer kvt__fs_live_probe(const char *dir, uint64_t nonce, uid_t owner, int *fd)
{
	char p[4200];
	*fd = -1;
	if (live_path(p, sizeof(p), dir, nonce) < 0)
		return FS_WRITER_UNKNOWN;
	int f = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (f < 0)
		return FS_WRITER_UNKNOWN; /* not a writer of this node (or gone already) */
	struct stat st;
	/* Only the temporary's owner could have been its writer: a file anyone else put
	 * there proves nothing about that writer, nor does a second link to one of the
	 * owner's files (where fs.protected_hardlinks is off, anyone may make one). */
	if (fstat(f, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != owner || st.st_nlink != 1) {
		close(f);
		return FS_WRITER_UNKNOWN;
	}
	if (flock(f, LOCK_EX | LOCK_NB) == 0) {
		*fd = f;
		return FS_WRITER_DEAD;
	}
	int e = errno;
	close(f);
	return e == EWOULDBLOCK ? FS_WRITER_LIVE : FS_WRITER_UNKNOWN;
}

void kvt__fs_live_prune(const char *dir, uint64_t max_age_s)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	time_t now = time(NULL);
	for (struct dirent *e; (e = readdir(d));) {
		if (strncmp(e->d_name, LIVE_PREFIX, sizeof(LIVE_PREFIX) - 1))
			continue;
		int f = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
		struct stat st;
		if (f < 0)
			continue;
		if (fstat(f, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
		    now - st.st_mtime > (time_t)max_age_s && flock(f, LOCK_EX | LOCK_NB) == 0)
			unlinkat(dirfd(d), e->d_name, 0);
		close(f);
	}
	closedir(d);
}

int kvt__fs_live_nonce(const char *name, const char *host, uint64_t *nonce)
{
	const char *t = strstr(name, ".tmp.");
	size_t hl = strlen(host);
	/* a writer of this node only: of another host it cannot be known here, and asking
	 * would only crowd the sweep's table (fs_live.h) */
	if (t && (strncmp(t + 5, host, hl) || t[5 + hl] != '.'))
		return 0;
	const char *last = strrchr(name, '.');
	if (!t || !last || last <= t + 4)
		return 0;
	const char *q = last; /* the nonce ends here; find where it starts */
	while (q > t + 4 && q[-1] != '.')
		q--;
	if (last - q != 16 || q[-1] != '.')
		return 0;
	uint64_t v = 0;
	for (const char *c = q; c < last; c++) {
		int d = *c >= '0' && *c <= '9'	 ? *c - '0'
			: *c >= 'a' && *c <= 'f' ? *c - 'a' + 10
						 : -1;
		if (d < 0)
			return 0;
		v = v << 4 | (uint64_t)d;
	}
	*nonce = v;
	return 1;
}
