/*
 * nvme_gap.h - the small log and the gap the nvme_log_gap* tests share: 5 segments of
 * 16 MiB (no spare, a live capacity of 48 MiB; 240 objects of 64 KiB fill one when written
 * one at a time), keys 0 .. 599 of a seed written into segments 0, 1 and 2 (480 .. 599 in
 * 2.kvl), then 1.kvl deleted from outside. Include after nvme_util.h.
 */
#ifndef KVT_TEST_NVME_GAP_H
#define KVT_TEST_NVME_GAP_H

#define GAP_OBJ (64u << 10)

static inline int gap_open_small(struct kvt_tier **t, const char *dir)
{
	return open_tier(t, "nvme.dirs", dir, "nvme.bytes", "80MiB", "nvme.log_max", "256KiB",
			 "nvme.segment_bytes", "16MiB", "nvme.log_spare_pct", "0", "nvme.fsync",
			 "none", NULL);
}

static inline int gap_present(struct kvt_tier *t, uint64_t seed, uint64_t i)
{
	struct kvt_key k = make_key(seed, i);
	uint8_t p = 0;
	CHECK_EQ(t_exists(t, &k, 1, &p), 0);
	return p;
}

/* A log in dir holding keys 0 .. 599 of seed, and 1.kvl gone. b: GAP_OBJ bytes. */
static inline void gap_make(const char *dir, uint64_t seed, uint8_t *b)
{
	struct kvt_tier *t;
	CHECK_EQ(gap_open_small(&t, dir), 0);
	for (uint64_t i = 0; i < 600; i++) {
		struct kvt_key k = make_key(seed, i);
		fill_object(b, GAP_OBJ, &k);
		CHECK_EQ(t_write(t, &k, b, GAP_OBJ), 0);
	}
	kvt__tier_close(t);
	char p[400];
	snprintf(p, sizeof(p), "%s/log/1.kvl", dir);
	CHECK_EQ(unlink(p), 0);
}

#endif
