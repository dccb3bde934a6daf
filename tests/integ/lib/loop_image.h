/*
 * loop_image.h - what the power-cut tests share (nvme_flush_powercut.c, nvme_log_powercut.c,
 * nvme_pool_powercut.c; fs_inode_reuse.c, an image of its own format): a scratch root under
 * /var/tmp holding ext4 images, journalled or not, mounted on loop devices at <root>/<mnt>,
 * with <root>/snapmnt for the copy; a shell helper; and the clean-up at exit (lazy
 * unmounts: a failed check may leave a tier's descriptors open). A power cut is a copy of
 * an image's backing file right after the flush: it holds every block the kernel sent to
 * the device and nothing still in memory. Mounting needs root: CI runs as root; elsewhere
 * the test skips. Include after nvme_util.h (CHECK, CHECKM).
 */
#ifndef KVT_LOOP_IMAGE_H
#define KVT_LOOP_IMAGE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_root[256];

static void sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	CHECKM(system(cmd) == 0, "failed: %s", cmd);
}

/* Unmount <root>/<mnt>, retried for up to 5 s: a tier just closed can still hold files
 * there for a moment - io_uring's workers drop their last references to closed files
 * asynchronously (a background layout's fadvise and close run on them) - and umount then
 * says "target is busy" (nvme_log_powercut, 2026-12-07). Fails the test if it never goes. */
static inline void loop_umount(const char *mnt)
{
	sh("for i in $(seq 50); do umount %s/%s 2>/dev/null && exit 0; sleep 0.1; done; "
	   "umount %s/%s",
	   g_root, mnt, g_root, mnt);
}

static void loop_cleanup(void)
{
	char cmd[1400];
	snprintf(cmd, sizeof(cmd),
		 "umount -l %s/snapmnt 2>/dev/null; umount -l %s/mnt 2>/dev/null; "
		 "umount -l %s/mnt2 2>/dev/null; rm -rf %s",
		 g_root, g_root, g_root, g_root);
	if (system(cmd) != 0)
		fprintf(stderr, "cleanup of %s failed\n", g_root);
}

/* Make the root /var/tmp/kvt-<name>-XXXXXX, cleaned up at exit: 0; or, not root, the
 * test's exit status (1 in CI, where a test must not skip; else 77, skip). */
static int loop_root(const char *name)
{
	if (!check_part_runs(geteuid() == 0, name, "needs root to mount a loop file system"))
		return 77;
	snprintf(g_root, sizeof(g_root), "/var/tmp/kvt-%s-XXXXXX", name);
	CHECK(mkdtemp(g_root));
	atexit(loop_cleanup);
	sh("mkdir %s/snapmnt", g_root);
	return 0;
}

/* An ext4 image of mib MiB at <root>/<img>, made with mkfs.ext4 options opts, mounted on
 * <root>/<mnt>. */
static inline void loop_mount_mkfs(const char *img, const char *mnt, unsigned mib,
				   const char *opts)
{
	sh("truncate -s %uM %s/%s && mkfs.ext4 -q -F %s %s/%s && mkdir %s/%s && "
	   "mount -o loop %s/%s %s/%s",
	   mib, g_root, img, opts, g_root, img, g_root, mnt, g_root, img, g_root, mnt);
}

/* An ext4 image of mib MiB at <root>/<img>, with a journal or without, mounted on
 * <root>/<mnt>. */
static inline void loop_mount(const char *img, const char *mnt, unsigned mib, bool journal)
{
	loop_mount_mkfs(img, mnt, mib, journal ? "" : "-O ^has_journal");
}

#endif
