/*
 * dir_count.h - how many entries a directory holds (not "." or ".."): a process's threads
 * (/proc/PID/task) or open descriptors (/proc/PID/fd), for the tests that check a tier or
 * the daemon gives back what it took.
 */
#ifndef KVT_TEST_DIR_COUNT_H
#define KVT_TEST_DIR_COUNT_H

#include <dirent.h>

#include "check.h"

static inline int dir_count(const char *path)
{
	DIR *d = opendir(path);
	CHECK(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

#endif
