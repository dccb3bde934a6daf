/*
 * nvme_pool_util.h - what the background-layout tests (nvme_pool.c, nvme_pool_crash.c for
 * preallocated slots, nvme_log_layout.c for log segments) share: waiting for the layout
 * through the tier's statistics, listing the slot files of <dir>/pool as the file system
 * sees them, finding blocks a layout left unwritten, and the kvtier CLI's path. Include
 * after nvme_util.h.
 */
#ifndef KVT_NVME_POOL_UTIL_H
#define KVT_NVME_POOL_UTIL_H

#include "nvme_util.h"

#include <linux/fiemap.h>

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

/* Bytes of fd's first `size` bytes that are not written blocks on disk: holes, and extents
 * allocated but "unwritten" (fallocate's), whose first write converts them - the slow first
 * write a layout exists to take out of the measured path. st_blocks counts unwritten
 * extents as allocated, so FIEMAP (ext4, xfs: the file systems these tests run on). */
static inline long not_written(int fd, off_t size)
{
	enum { N = 256 };
	struct fiemap *fm = calloc(1, sizeof(*fm) + N * sizeof(struct fiemap_extent));
	CHECK(fm != NULL);
	long written = 0;
	uint64_t start = 0;
	for (;;) {
		memset(fm, 0, sizeof(*fm));
		fm->fm_start = start;
		fm->fm_length = (uint64_t)size - start;
		fm->fm_flags = FIEMAP_FLAG_SYNC;
		fm->fm_extent_count = N;
		CHECKM(ioctl(fd, FS_IOC_FIEMAP, fm) == 0, "FIEMAP: %s", strerror(errno));
		if (!fm->fm_mapped_extents)
			break;
		const struct fiemap_extent *x = NULL;
		for (uint32_t i = 0; i < fm->fm_mapped_extents; i++) {
			x = &fm->fm_extents[i];
			uint64_t a = KVT_MAX(x->fe_logical, start);
			uint64_t b = KVT_MIN(x->fe_logical + x->fe_length, (uint64_t)size);
			if (b > a && !(x->fe_flags & FIEMAP_EXTENT_UNWRITTEN))
				written += (long)(b - a);
		}
		start = x->fe_logical + x->fe_length;
		if ((x->fe_flags & FIEMAP_EXTENT_LAST) || start >= (uint64_t)size)
			break;
	}
	free(fm);
	return (long)size - written;
}

/* The kvtier CLI next to this program (ctest sets KVT_BIN; run by hand: its directory). */
static inline void kvtier_bin(char *out, size_t n) /* n: at least 4104 */
{
	const char *b = getenv("KVT_BIN");
	char self[4096];
	ssize_t l = readlink("/proc/self/exe", self, sizeof(self) - 1);
	CHECK(b || l > 0);
	if (!b) {
		self[l] = 0;
		*strrchr(self, '/') = 0;
		b = self;
	}
	snprintf(out, n, "%s/kvtier", b);
}

#endif
