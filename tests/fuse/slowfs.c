/*
 * slowfs.c - a tiny passthrough FUSE file system that can be made slow or stop answering,
 * for tests of kvtier against a real slow or hung device (a stalled NFS server, a dying
 * disk behind a file system). Every call is passed to a backing directory; on top:
 *   --delay-ms N   each data call (open, create, read, write, fsync, fsyncdir) sleeps N ms first;
 *   SIGUSR1        stall: every call, metadata included, waits until SIGUSR2 (a hung
 *                  mount: the kernel keeps the caller waiting in the system call);
 *   SIGUSR2        resume;
 *   --stall-only OP  a stall holds only that call (a FUSE operation name: readdir, read,
 *                  write, open, create, fsync, getattr, ...), as a server that hangs on
 *                  one kind of request;
 *   --stall-path S   a stall holds only calls on a path that contains S (either path of
 *                  a rename or link), so that a test can stop one step of a sequence;
 *   SIGRTMIN       let one held call through (or the next one to be held), the stall
 *                  staying on: a test walks a caller from one held call to the next;
 *   --stalled      start stalled, as after SIGUSR1 (a signal is handled some time after
 *                  kill returns: a test that must have its first call held cannot race it);
 *   --eio-path S --eio-at OFF  a read of a file whose path contains S, over a range that
 *                  holds byte OFF, fails with EIO (a bad sector; read with O_DIRECT, as the
 *                  page cache would otherwise serve what it read before);
 *   --eio-rename S   a rename or link either of whose paths contains S fails with EIO (a
 *                  server that fails a publish);
 *   --eio-readdir S  listing a directory whose path contains S fails with EIO;
 *   --eio-getattr S  a stat of a path that contains S fails with EIO (a damaged inode, an
 *                  NFS server's error for one file).
 * Usage: slowfs BACKING_DIR MOUNTPOINT [--delay-ms N] [--stall-only OP] [--stall-path S]
 * [--stalled] [--eio-path S --eio-at OFF] [--eio-rename S] [--eio-readdir S] [--eio-getattr S] (runs in the foreground, multithreaded; unmount with
 * `fusermount3 -u MOUNTPOINT` or `umount -l`).
 * Test-only: it is built when libfuse3 is found and installed nowhere.
 */
#define FUSE_USE_VERSION 31
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <unistd.h>

static int bfd = -1;		/* the backing directory */
static unsigned delay_ms;	/* per data call */
static atomic_int stalled;	/* set by SIGUSR1 (or --stalled), cleared by SIGUSR2 */
static const char *stall_only;	/* NULL: a stall holds every call */
static const char *stall_path;	/* NULL: a stall holds calls on any path */
static atomic_int passes;	/* held calls to let through (SIGRTMIN) */
static const char *eio_path;	/* NULL: no read fails */
static off_t eio_at;		/* the byte whose reads fail */
static const char *eio_rename;	/* NULL: no rename or link fails */
static const char *eio_readdir; /* NULL: no directory listing fails */
static const char *eio_getattr; /* NULL: no stat fails */

static void on_signal(int sig)
{
	if (sig == SIGUSR1 || sig == SIGUSR2)
		atomic_store(&stalled, sig == SIGUSR1);
	else
		atomic_fetch_add(&passes, 1);
}

static int held(const char *op, const char *path, const char *path2)
{
	if (!atomic_load(&stalled) || (stall_only && strcmp(stall_only, op)))
		return 0;
	return !stall_path || (path && strstr(path, stall_path)) ||
	       (path2 && strstr(path2, stall_path));
}

/* Every call passes here first: wait out a stall, then (data calls) the delay. */
static void gate_op(const char *op, const char *path, const char *path2, int data)
{
	while (held(op, path, path2)) {
		int p = atomic_load(&passes);
		if (p > 0 && atomic_compare_exchange_weak(&passes, &p, p - 1))
			break;
		usleep(5000);
	}
	if (data && delay_ms)
		usleep(delay_ms * 1000u);
}

/* FUSE paths start with '/': relative to the backing directory ("." for the root). */
static const char *rel(const char *path)
{
	while (*path == '/')
		path++;
	return *path ? path : ".";
}

#define gate(data) gate_op(__func__ + 2, path, NULL, data) /* s_read -> "read" */

#define RET(expr) return (expr) < 0 ? -errno : 0

static int s_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	gate(0);
	if (eio_getattr && path && strstr(path, eio_getattr))
		return -EIO;
	if (fi)
		RET(fstat((int)fi->fh, st));
	RET(fstatat(bfd, rel(path), st, AT_SYMLINK_NOFOLLOW));
}

static int s_access(const char *path, int mask)
{
	gate(0);
	RET(faccessat(bfd, rel(path), mask, 0));
}

static int s_readlink(const char *path, char *buf, size_t size)
{
	gate(0);
	ssize_t n = readlinkat(bfd, rel(path), buf, size - 1);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	return 0;
}

static int s_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
		     struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	(void)off;
	(void)fi;
	(void)flags;
	gate(0);
	if (eio_readdir && path && strstr(path, eio_readdir))
		return -EIO;
	int fd = openat(bfd, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		struct stat st = {.st_ino = e->d_ino, .st_mode = (mode_t)DTTOIF(e->d_type)};
		if (fill(buf, e->d_name, &st, 0, 0))
			break;
	}
	closedir(d);
	return 0;
}

static int s_mkdir(const char *path, mode_t mode)
{
	gate(0);
	RET(mkdirat(bfd, rel(path), mode));
}

static int s_unlink(const char *path)
{
	gate(0);
	RET(unlinkat(bfd, rel(path), 0));
}

static int s_rmdir(const char *path)
{
	gate(0);
	RET(unlinkat(bfd, rel(path), AT_REMOVEDIR));
}

static int s_symlink(const char *target, const char *path)
{
	gate(0);
	RET(symlinkat(target, bfd, rel(path)));
}

/* --eio-rename S: a rename or link either of whose paths contains S fails with EIO. */
static int rename_fails(const char *from, const char *to)
{
	return eio_rename && ((from && strstr(from, eio_rename)) || (to && strstr(to, eio_rename)));
}

static int s_rename(const char *from, const char *to, unsigned int flags)
{
	gate_op("rename", from, to, 0);
	if (rename_fails(from, to))
		return -EIO;
	RET(renameat2(bfd, rel(from), bfd, rel(to), flags));
}

static int s_link(const char *from, const char *to)
{
	gate_op("link", from, to, 0);
	if (rename_fails(from, to))
		return -EIO;
	RET(linkat(bfd, rel(from), bfd, rel(to), 0));
}

static int s_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	gate(0);
	if (fi)
		RET(fchmod((int)fi->fh, mode));
	RET(fchmodat(bfd, rel(path), mode, 0));
}

static int s_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi)
{
	gate(0);
	if (fi)
		RET(fchown((int)fi->fh, uid, gid));
	RET(fchownat(bfd, rel(path), uid, gid, AT_SYMLINK_NOFOLLOW));
}

static int s_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
	gate(1);
	if (fi)
		RET(ftruncate((int)fi->fh, size));
	int fd = openat(bfd, rel(path), O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = ftruncate(fd, size) < 0 ? -errno : 0;
	close(fd);
	return rc;
}

static int s_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi)
{
	gate(0);
	if (fi)
		RET(futimens((int)fi->fh, tv));
	RET(utimensat(bfd, rel(path), tv, AT_SYMLINK_NOFOLLOW));
}

/* O_DIRECT is the kernel's business above us; the backing file is opened without it so
 * that any buffer the kernel hands down works. */
static int open_flags(int flags)
{
	return (flags & ~O_DIRECT) | O_CLOEXEC;
}

static int s_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	gate(1);
	int fd = openat(bfd, rel(path), open_flags(fi->flags) | O_CREAT, mode);
	if (fd < 0)
		return -errno;
	fi->fh = (uint64_t)fd;
	return 0;
}

static int s_open(const char *path, struct fuse_file_info *fi)
{
	gate(1);
	int fd = openat(bfd, rel(path), open_flags(fi->flags));
	if (fd < 0)
		return -errno;
	fi->fh = (uint64_t)fd;
	return 0;
}

static int s_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	gate(1);
	if (eio_path && path && strstr(path, eio_path) && off <= eio_at &&
	    eio_at < off + (off_t)size)
		return -EIO;
	ssize_t n = pread((int)fi->fh, buf, size, off);
	return n < 0 ? -errno : (int)n;
}

static int s_write(const char *path, const char *buf, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	(void)path;
	gate(1);
	ssize_t n = pwrite((int)fi->fh, buf, size, off);
	return n < 0 ? -errno : (int)n;
}

static int s_statfs(const char *path, struct statvfs *st)
{
	(void)path;
	gate(0);
	RET(fstatvfs(bfd, st));
}

static int s_release(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	close((int)fi->fh); /* never gated: the caller's close must not be what hangs */
	return 0;
}

static int s_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
	(void)path;
	gate(1);
	RET(datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh));
}

/* A directory's fsync: what makes a name created, renamed or linked in it durable. */
static int s_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi)
{
	(void)fi;
	gate(1);
	int fd = openat(bfd, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = (datasync ? fdatasync(fd) : fsync(fd)) < 0 ? -errno : 0;
	close(fd);
	return rc;
}

static int s_fallocate(const char *path, int mode, off_t off, off_t len,
		       struct fuse_file_info *fi)
{
	(void)path;
	gate(1);
	RET(fallocate((int)fi->fh, mode, off, len));
}

static int s_flock(const char *path, struct fuse_file_info *fi, int op)
{
	(void)path;
	gate(0);
	RET(flock((int)fi->fh, op));
}

static void *s_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	(void)conn;
	cfg->use_ino = 1;
	cfg->entry_timeout = cfg->attr_timeout = cfg->negative_timeout = 0; /* see every call */
	return NULL;
}

static const struct fuse_operations ops = {
	.init = s_init,
	.getattr = s_getattr,
	.access = s_access,
	.readlink = s_readlink,
	.readdir = s_readdir,
	.mkdir = s_mkdir,
	.unlink = s_unlink,
	.rmdir = s_rmdir,
	.symlink = s_symlink,
	.rename = s_rename,
	.link = s_link,
	.chmod = s_chmod,
	.chown = s_chown,
	.truncate = s_truncate,
	.utimens = s_utimens,
	.create = s_create,
	.open = s_open,
	.read = s_read,
	.write = s_write,
	.statfs = s_statfs,
	.release = s_release,
	.fsync = s_fsync,
	.fsyncdir = s_fsyncdir,
	.fallocate = s_fallocate,
	.flock = s_flock,
};

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: slowfs BACKING_DIR MOUNTPOINT [--delay-ms N] "
				"[--stall-only OP] [--stall-path S] [--stalled] [--eio-path S "
				"--eio-at OFF] [--eio-rename S] [--eio-readdir S] [--eio-getattr S]\n");
		return 2;
	}
	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--delay-ms") && i + 1 < argc) {
			delay_ms = (unsigned)strtoul(argv[++i], NULL, 10);
		} else if (!strcmp(argv[i], "--stall-only") && i + 1 < argc) {
			stall_only = argv[++i];
		} else if (!strcmp(argv[i], "--stall-path") && i + 1 < argc) {
			stall_path = argv[++i];
		} else if (!strcmp(argv[i], "--eio-path") && i + 1 < argc) {
			eio_path = argv[++i];
		} else if (!strcmp(argv[i], "--eio-readdir") && i + 1 < argc) {
			eio_readdir = argv[++i];
		} else if (!strcmp(argv[i], "--eio-getattr") && i + 1 < argc) {
			eio_getattr = argv[++i];
		} else if (!strcmp(argv[i], "--eio-rename") && i + 1 < argc) {
			eio_rename = argv[++i];
		} else if (!strcmp(argv[i], "--eio-at") && i + 1 < argc) {
			eio_at = (off_t)strtoull(argv[++i], NULL, 10);
		} else if (!strcmp(argv[i], "--stalled")) {
			atomic_store(&stalled, 1);
		} else {
			fprintf(stderr, "slowfs: unknown option '%s'\n", argv[i]);
			return 2;
		}
	}
	bfd = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (bfd < 0) {
		perror(argv[1]);
		return 1;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGUSR2, &sa, NULL);
	sigaction(SIGRTMIN, &sa, NULL);
	/* foreground, multithreaded; other users (the tests run as root) may use it */
	char *fargv[] = {argv[0], argv[2], "-f", "-o", "fsname=slowfs,default_permissions",
			 NULL};
	return fuse_main(5, fargv, &ops, NULL);
}
