/*
 * nvme_stale.h - what the nvme_log_newest and nvme_log_outside tests share: a small log
 * (segments of 16 MiB, no spare, no reinsertion: objects of 64 KiB written one at a time
 * go 240 to a segment, in cycle order), keys written in ranges, a key overwritten with
 * other bytes ("v2"), and what a read of a key returns - absent, its first bytes, its v2
 * bytes, or anything else (never acceptable). Include after nvme_util.h.
 */
#ifndef KVT_TEST_NVME_STALE_H
#define KVT_TEST_NVME_STALE_H

#include <fcntl.h>

#define ST_OBJ (64u << 10)
#define ST_PER_SEG 240 /* (16 MiB - 4 KiB header) / (4 KiB record + 64 KiB object) */

enum { ST_ABSENT, ST_V1, ST_V2, ST_OTHER };

/* nvme.bytes: "80MiB" is a cycle of 5 segments (48 MiB live), "128MiB" of 8 (96 MiB). */
static inline int st_open(struct kvt_tier **t, const char *dir, const char *bytes, int ro)
{
	return open_tier(t, "nvme.dirs", dir, "nvme.bytes", bytes, "nvme.log_max", "256KiB",
			 "nvme.segment_bytes", "16MiB", "nvme.log_spare_pct", "0",
			 "nvme.log_reinsert_pct", "0", "nvme.fsync", "none",
			 ro ? "store.read_only" : NULL, "true", NULL);
}

/* Key k's bytes as first written (v2 0) or as overwritten (v2 1). */
static inline void st_fill(uint8_t *b, const struct kvt_key *k, int v2)
{
	fill_object(b, ST_OBJ, k);
	if (v2)
		for (uint32_t i = ST_OBJ / 2; i < ST_OBJ; i += 4096)
			b[i] ^= 0x5a;
}

static inline void st_write(struct kvt_tier *t, uint64_t seed, uint64_t from, uint64_t to)
{
	uint8_t *b = abuf(ST_OBJ);
	for (uint64_t i = from; i < to; i++) {
		struct kvt_key k = make_key(seed, i);
		st_fill(b, &k, 0);
		CHECK_EQ(t_write(t, &k, b, ST_OBJ), 0);
	}
	free(b);
}

/* Key i replaced by its v2 bytes (removed, then written: a write of a key that is stored
 * completes at once, keys being content addresses), key j removed: all acknowledged. */
static inline void st_overwrite_remove(struct kvt_tier *t, uint64_t seed, uint64_t i, uint64_t j)
{
	uint8_t *b = abuf(ST_OBJ);
	struct kvt_key k = make_key(seed, i);
	CHECK_EQ(t_remove(t, &k), 0);
	st_fill(b, &k, 1);
	CHECK_EQ(t_write(t, &k, b, ST_OBJ), 0);
	k = make_key(seed, j);
	CHECK_EQ(t_remove(t, &k), 0);
	free(b);
}

static inline int st_state(struct kvt_tier *t, uint64_t seed, uint64_t i)
{
	struct kvt_key k = make_key(seed, i);
	uint8_t p = 0;
	CHECK_EQ(t_exists(t, &k, 1, &p), 0);
	if (!p)
		return ST_ABSENT;
	uint8_t *b = abuf(ST_OBJ), *want = abuf(ST_OBJ);
	int rc = t_read1(t, &k, b, 0, ST_OBJ), st = ST_OTHER;
	if (rc == -ENOENT) {
		st = ST_ABSENT;
	} else if (rc == (int)ST_OBJ) {
		for (int v = 0; v < 2 && st == ST_OTHER; v++) {
			st_fill(want, &k, v);
			if (!memcmp(b, want, ST_OBJ))
				st = v ? ST_V2 : ST_V1;
		}
	}
	free(b);
	free(want);
	return st;
}

static inline const char *st_name(int st)
{
	return st == ST_ABSENT ? "absent" : st == ST_V1 ? "first bytes"
				  : st == ST_V2 ? "v2 bytes" : "CORRUPT";
}

static inline void st_path(char *p, size_t len, const char *dir, const char *name)
{
	snprintf(p, len, "%s/log/%s", dir, name);
}

static inline int st_exists(const char *dir, const char *name)
{
	char p[400];
	st_path(p, sizeof(p), dir, name);
	struct stat st;
	return lstat(p, &st) == 0;
}

/* Size and mtime of every entry of dir/log (itself included), to show that an open changed
 * nothing of the log. */
static inline uint64_t st_log_sum(const char *dir)
{
	char p[400];
	st_path(p, sizeof(p), dir, "");
	DIR *d = opendir(p);
	CHECK(d);
	uint64_t sum = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		struct stat st;
		if (!strcmp(de->d_name, "..")) /* the store's directory: not the log's */
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			sum = sum * 1000003 + (uint64_t)st.st_size * 31 + (uint64_t)st.st_mtim.tv_nsec +
			      (uint64_t)st.st_mtim.tv_sec * 7 + de->d_name[0];
	}
	closedir(d);
	return sum;
}

#endif
