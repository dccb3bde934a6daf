/*
 * fuse_mounted.h - whether a FUSE file system is mounted at a path (/proc/mounts), for the
 * tests that run a tier on the test FUSE file system (tests/fuse/slowfs): they wait for
 * the mount before using it and check it is gone after. One copy instead of one per test.
 */
#ifndef KVT_TEST_FUSE_MOUNTED_H
#define KVT_TEST_FUSE_MOUNTED_H

#include <stdio.h>
#include <string.h>

static inline int fuse_mounted(const char *mnt)
{
	FILE *f = fopen("/proc/mounts", "r");
	char line[8192];
	int found = 0;
	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, mnt) && strstr(line, " fuse"))
			found = 1;
	if (f)
		fclose(f);
	return found;
}

#endif
