/*
 * slowfs.h - a C test's mount of tests/fuse/slowfs (a passthrough FUSE file system that can
 * be made slow or hung, see its header): started on a fresh backing directory and mount
 * point under $KVT_TEST_DIR (else /var/tmp), and taken down - held calls released,
 * unmounted, files removed - by slowfs_stop or at any exit, a failed check's included, so
 * that no mount outlives its test or stays hung. One copy for every test that uses it.
 */
#ifndef KVT_TEST_SLOWFS_H
#define KVT_TEST_SLOWFS_H

#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuse_mounted.h"

extern char **environ;

struct slowfs {
	pid_t pid; /* 0: not running */
	char back[4096], mnt[4096];
};

static struct slowfs *slowfs_mounted; /* the one slowfs_at_exit takes down */

static void slowfs_stop(struct slowfs *f)
{
	if (!f->pid)
		return;
	kill(f->pid, SIGUSR2); /* release held calls, or the unmount waits for them */
	char cmd[8400];
	snprintf(cmd, sizeof(cmd), "fusermount3 -u '%s' 2>/dev/null || umount -l '%s'", f->mnt,
		 f->mnt);
	if (system(cmd) != 0)
		fprintf(stderr, "  (unmount of %s failed)\n", f->mnt);
	/* A lazy unmount leaves slowfs serving while this process still holds files there (a
	 * tier left open by a failed check): it would never exit, and this wait never end. */
	for (int i = 0; i < 250 && waitpid(f->pid, NULL, WNOHANG) == 0; i++)
		usleep(20000);
	if (kill(f->pid, 0) == 0) {
		kill(f->pid, SIGKILL);
		waitpid(f->pid, NULL, 0);
	}
	f->pid = 0;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'; rmdir '%s'", f->back, f->mnt);
	if (system(cmd) != 0)
		fprintf(stderr, "  (cleanup of %s failed)\n", f->back);
	if (slowfs_mounted == f)
		slowfs_mounted = NULL;
}

static void slowfs_at_exit(void)
{
	if (slowfs_mounted)
		slowfs_stop(slowfs_mounted);
}

/* Mount slowfs for the test called name with options opts (NULL-terminated, at most 8;
 * may be NULL). 0; 77 when slowfs is not built or /dev/fuse is missing (a failure under
 * CI=true); 1 when it did not mount. */
static int slowfs_mount_opts(struct slowfs *f, const char *name, const char *const *opts)
{
	char bin[4096];
	snprintf(bin, sizeof(bin), "%s/slowfs", getenv("KVT_BIN") ? getenv("KVT_BIN") : "build");
	if (access(bin, X_OK) || access("/dev/fuse", R_OK | W_OK)) {
		fprintf(stderr, "SKIP: %s not built or /dev/fuse missing\n", bin);
		return 77;
	}
	const char *base = getenv("KVT_TEST_DIR");
	base = base && *base ? base : "/var/tmp";
	mkdir(base, 0755);
	snprintf(f->back, sizeof(f->back), "%s/kvt-%s-back-XXXXXX", base, name);
	snprintf(f->mnt, sizeof(f->mnt), "%s/kvt-%s-mnt-XXXXXX", base, name);
	if (!mkdtemp(f->back) || !mkdtemp(f->mnt)) {
		perror("slowfs: mkdtemp");
		return 1;
	}
	char *argv[12] = {bin, f->back, f->mnt};
	int argc = 3;
	for (int i = 0; opts && opts[i] && argc < 11; i++)
		argv[argc++] = (char *)opts[i];
	argv[argc] = NULL;
	if (posix_spawn(&f->pid, bin, NULL, NULL, argv, environ)) {
		f->pid = 0;
		return 1;
	}
	if (!slowfs_mounted) {
		static int registered;
		if (!registered++)
			atexit(slowfs_at_exit);
		slowfs_mounted = f;
	}
	for (int i = 0; i < 250 && !fuse_mounted(f->mnt); i++)
		usleep(20000);
	return fuse_mounted(f->mnt) ? 0 : 1;
}

/* slowfs_mount_opts with stall_only: its --stall-only operation (NULL: a stall holds every
 * call), stall_path: its --stall-path (NULL: on any path), stalled: start stalled
 * (--stalled). */
static int slowfs_mount(struct slowfs *f, const char *name, const char *stall_only,
			const char *stall_path, bool stalled)
{
	const char *opts[8];
	int n = 0;
	if (stall_only) {
		opts[n++] = "--stall-only";
		opts[n++] = stall_only;
	}
	if (stall_path) {
		opts[n++] = "--stall-path";
		opts[n++] = stall_path;
	}
	if (stalled)
		opts[n++] = "--stalled";
	opts[n] = NULL;
	return slowfs_mount_opts(f, name, opts);
}

static inline int slowfs_start(struct slowfs *f, const char *name, const char *stall_only)
{
	return slowfs_mount(f, name, stall_only, NULL, false);
}

#endif
