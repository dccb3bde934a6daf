/*
 * snapshot.h - a text listing of a directory tree (path, mode, size, mtime per entry), so a
 * test can prove that a command which only inspects a store changed nothing in it: take
 * one before, one after, compare with strcmp. Not thread-safe (nftw has no context).
 */
#ifndef KVT_TEST_SNAPSHOT_H
#define KVT_TEST_SNAPSHOT_H

#define _XOPEN_SOURCE_EXTENDED 1
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char *g_snap;
static size_t g_snap_len;

static int snap_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)flag;
	(void)ftw;
	char line[1024];
	int n = snprintf(line, sizeof(line), "%s %o %lld %lld.%09ld\n", p, st->st_mode,
			 (long long)st->st_size, (long long)st->st_mtim.tv_sec,
			 st->st_mtim.tv_nsec);
	g_snap = realloc(g_snap, g_snap_len + (size_t)n + 1);
	memcpy(g_snap + g_snap_len, line, (size_t)n + 1);
	g_snap_len += (size_t)n;
	return 0;
}

/* The listing of dir, malloc'ed (free it). */
static char *snapshot(const char *dir)
{
	g_snap = NULL;
	g_snap_len = 0;
	nftw(dir, snap_one, 16, FTW_PHYS);
	return g_snap ? g_snap : strdup("");
}

#endif
