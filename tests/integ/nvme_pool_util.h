/*
 * nvme_pool_util.h - what the preallocated-pool tests (nvme_pool.c, nvme_pool_crash.c)
 * share: waiting for the background layout through the tier's statistics, and listing the
 * slot files of <dir>/pool as the file system sees them. Include after nvme_util.h.
 */
#ifndef KVT_NVME_POOL_UTIL_H
#define KVT_NVME_POOL_UTIL_H

#include "nvme_util.h"

/* Until the tier has laid out everything it will (pool_pending_bytes 0); fails the test
 * after 60 s. Returns the free slots' bytes. */
static inline uint64_t pool_wait(struct kvt_tier *t)
{
	for (int i = 0; i < 6000; i++) {
		struct kvt_tier_stats st;
		memset(&st, 0, sizeof(st));
		t->ops->stats(t, &st);
		if (!st.pool_pending_bytes)
			return st.pool_bytes;
		usleep(10000);
	}
	fprintf(stderr, "the layout did not finish in 60 s\n");
	exit(1);
}

static inline struct kvt_tier_stats tier_stats(struct kvt_tier *t)
{
	struct kvt_tier_stats st;
	memset(&st, 0, sizeof(st));
	t->ops->stats(t, &st);
	return st;
}

/* The files of dir/pool: slots (<id>.slot) counted in *n with their bytes in *bytes and
 * inode numbers in inos, temp files (layouts under way or interrupted) counted. Slots of
 * another size than want (if nonzero) fail the test. */
struct pool_list {
	int n, temps, temps_of; /* temps_of: temp files of process pid_of (if set) */
	pid_t pid_of;
	uint64_t bytes;
	ino_t inos[4096];
};

static inline void pool_list(const char *dir, uint64_t want, struct pool_list *pl)
{
	char p[4096], mine[64];
	pid_t of = pl->pid_of;
	memset(pl, 0, sizeof(*pl));
	pl->pid_of = of;
	snprintf(mine, sizeof(mine), ".tmp.layout.%d.", (int)of);
	snprintf(p, sizeof(p), "%s/pool", dir);
	DIR *d = opendir(p);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!strncmp(de->d_name, ".tmp.", 5)) {
			pl->temps++;
			pl->temps_of += of && !strncmp(de->d_name, mine, strlen(mine));
			continue;
		}
		size_t nl = strlen(de->d_name);
		CHECK(nl > 5 && !strcmp(de->d_name + nl - 5, ".slot"));
		char f[8192];
		snprintf(f, sizeof(f), "%s/%s", p, de->d_name);
		struct stat st;
		CHECK_EQ(stat(f, &st), 0);
		if (want && (uint64_t)st.st_size != want) {
			fprintf(stderr, "slot %s has %lld bytes, not %llu\n", f,
				(long long)st.st_size, (unsigned long long)want);
			exit(1);
		}
		if (pl->n < (int)(sizeof(pl->inos) / sizeof(pl->inos[0])))
			pl->inos[pl->n] = st.st_ino;
		pl->n++;
		pl->bytes += (uint64_t)st.st_size;
	}
	closedir(d);
}

/* Bytes of every regular file under dir except its bookkeeping (.kvtier.*): objects,
 * slots and temp files - what the store holds on disk against nvme.bytes. */
static uint64_t g_disk_bytes;
static inline int disk_add(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag == FTW_F && S_ISREG(st->st_mode) && !strstr(p, "/.kvtier."))
		g_disk_bytes += (uint64_t)st->st_size;
	return 0;
}

static inline uint64_t disk_bytes(const char *dir)
{
	g_disk_bytes = 0;
	nftw(dir, disk_add, 16, FTW_PHYS);
	return g_disk_bytes;
}

#endif
