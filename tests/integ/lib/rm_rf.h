/*
 * rm_rf.h - remove a test's directory tree (nftw, depth first, symbolic links not
 * followed), what every test that makes one needs at its end; one copy for them all.
 */
#ifndef KVT_TEST_RM_RF_H
#define KVT_TEST_RM_RF_H

#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

static inline int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(p);
	return 0;
}

static inline void rm_rf(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
