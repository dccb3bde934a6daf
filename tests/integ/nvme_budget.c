/*
 * nvme_budget.c - admission limits of the nvme tier: the daily write budget (-EDQUOT,
 * writes_skipped, can_write) and the capacity (LRU eviction of the least recently *used*
 * object, -ENOSPC for an object that can never fit without emptying the cache, eviction at
 * open when the capacity shrank). Also runs the fsync=full and fsync=none publish paths.
 */
#include "nvme_util.h"

#define K64 65536

int main(void)
{
	char root[] = "/tmp/kvt-nvme-budget-XXXXXX";
	CHECK(mkdtemp(root));
	char dir[300];
	struct kvt_tier *t;
	struct kvt_tier_stats st;
	uint8_t *buf = abuf(1 << 20), *rbuf = abuf(1 << 20);

	/* ---- write budget: 1 MiB per day = 16 objects of 64 KiB */
	snprintf(dir, sizeof(dir), "%s/budget", root);
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.write_budget", "1MiB", NULL), 0);
	CHECK_EQ(t->ops->can_write(t, K64), 0);
	struct kvt_key k[32];
	for (int i = 0; i < 16; i++) {
		k[i] = make_key(10, (uint64_t)i);
		fill_object(buf, K64, &k[i]);
		CHECK_EQ(t_write(t, &k[i], buf, K64), 0);
	}
	CHECK_EQ(t->ops->can_write(t, K64), -EDQUOT);
	CHECK_EQ(t->ops->can_write(t, 0), 0);
	k[16] = make_key(10, 16);
	fill_object(buf, K64, &k[16]);
	CHECK_EQ(t_write(t, &k[16], buf, K64), -EDQUOT);
	memset(&st, 0, sizeof(st));
	t->ops->stats(t, &st);
	CHECK_EQ(st.writes_skipped, 1);
	CHECK_EQ(st.writes, 16);
	CHECK_EQ(st.objects, 16);
	/* A stored key costs nothing to "write" again. */
	fill_object(buf, K64, &k[3]);
	CHECK_EQ(t_write(t, &k[3], buf, K64), 0);
	CHECK_EQ(t_read1(t, &k[16], rbuf, 0, K64), -ENOENT);
	CHECK_EQ(t_read1(t, &k[3], rbuf, 0, K64), K64);
	CHECK_EQ(check_object(rbuf, K64, &k[3]), 0);
	kvt__tier_close(t);
	/* The budget is a rolling day, not per process: a restart does not reset it. */
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.write_budget", "1MiB", NULL), 0);
	CHECK_EQ(t->ops->can_write(t, K64), -EDQUOT);
	CHECK_EQ(t_write(t, &k[16], buf, K64), -EDQUOT);
	kvt__tier_close(t);
	/* A damaged budget file is ignored with a warning, never trusted or fatal. */
	{
		char bpath[400];
		snprintf(bpath, sizeof(bpath), "%s/.kvtier.budget", dir);
		char saved[1024] = {0};
		FILE *f = fopen(bpath, "r");
		CHECK(f && fread(saved, 1, sizeof(saved) - 1, f) > 0);
		fclose(f);
		CHECK(!strncmp(saved, "kvtier-budget-v1 ", 17));
		f = fopen(bpath, "w");
		fputs("kvtier-budget-v1 12 garbage", f);
		fclose(f);
		log_clear();
		CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.write_budget", "1MiB", NULL), 0);
		CHECK_EQ(log_count("malformed"), 1);
		CHECK_EQ(t->ops->can_write(t, K64), 0);
		kvt__tier_close(t);
		f = fopen(bpath, "w");
		fputs(saved, f);
		fclose(f);
	}
	/* A larger budget leaves room for more. */
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.write_budget", "2MiB", NULL), 0);
	CHECK_EQ(t->ops->can_write(t, K64), 0);
	fill_object(buf, K64, &k[16]);
	CHECK_EQ(t_write(t, &k[16], buf, K64), 0);
	kvt__tier_close(t);

	/* ---- capacity: 256 KiB = 4 objects of 64 KiB */
	snprintf(dir, sizeof(dir), "%s/cap", root);
	CHECK_EQ(
	    open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "256KiB", "nvme.fsync", "full", NULL), 0);
	for (int i = 0; i < 4; i++) {
		k[i] = make_key(11, (uint64_t)i);
		fill_object(buf, K64, &k[i]);
		CHECK_EQ(t_write(t, &k[i], buf, K64), 0);
	}
	t->ops->stats(t, &st);
	CHECK_EQ(st.capacity_bytes, 4 * K64);
	CHECK_EQ(st.bytes, 4 * K64);
	CHECK_EQ(st.evictions, 0);
	/* Use object 0: object 1 becomes the least recently used. */
	CHECK_EQ(t_read1(t, &k[0], rbuf, 0, 4096), 4096);
	k[4] = make_key(11, 4);
	fill_object(buf, K64, &k[4]);
	char path[600];
	struct stat sb;
	key_path(dir, &k[1], path, sizeof(path));
	CHECK_EQ(stat(path, &sb), 0);
	ino_t victim_ino = sb.st_ino;
	CHECK_EQ(t_write(t, &k[4], buf, K64), 0);
	/* Same size, same directory: the victim's file was recycled, not unlinked. */
	key_path(dir, &k[4], path, sizeof(path));
	CHECK_EQ(stat(path, &sb), 0);
	CHECK_EQ(sb.st_ino, victim_ino);
	t->ops->stats(t, &st);
	CHECK_EQ(st.evictions, 1);
	CHECK_EQ(st.objects, 4);
	CHECK_EQ(st.bytes, 4 * K64);
	CHECK_EQ(t_read1(t, &k[1], rbuf, 0, 4096), -ENOENT);
	key_path(dir, &k[1], path, sizeof(path));
	CHECK(stat(path, &sb) < 0);
	for (int i = 0; i < 5; i++) {
		if (i == 1)
			continue;
		CHECK_EQ(t_read1(t, &k[i], rbuf, 0, K64), K64);
		CHECK_EQ(check_object(rbuf, K64, &k[i]), 0);
	}
	/* Larger than the whole capacity: refused, and nothing evicted for it. */
	CHECK_EQ(t->ops->can_write(t, 512 * 1024), -ENOSPC);
	k[5] = make_key(11, 5);
	fill_object(buf, 512 * 1024, &k[5]);
	CHECK_EQ(t_write(t, &k[5], buf, 512 * 1024), -ENOSPC);
	t->ops->stats(t, &st);
	CHECK_EQ(st.evictions, 1);
	CHECK_EQ(st.objects, 4);
	CHECK_EQ(st.writes_skipped, 1);
	/* The reads above left the LRU order 0, 2, 3, 4 (oldest first): a 128 KiB object
	 * evicts 0 and 2. */
	k[6] = make_key(11, 6);
	fill_object(buf, 2 * K64, &k[6]);
	CHECK_EQ(t_write(t, &k[6], buf, 2 * K64), 0);
	t->ops->stats(t, &st);
	CHECK_EQ(st.evictions, 3);
	CHECK_EQ(st.bytes, 4 * K64);
	CHECK_EQ(t_read1(t, &k[0], rbuf, 0, 4096), -ENOENT);
	CHECK_EQ(t_read1(t, &k[2], rbuf, 0, 4096), -ENOENT);
	CHECK_EQ(t_read1(t, &k[3], rbuf, 0, K64), K64);
	CHECK_EQ(t_read1(t, &k[6], rbuf, 0, 2 * K64), 2 * K64);
	CHECK_EQ(check_object(rbuf, 2 * K64, &k[6]), 0);
	kvt__tier_close(t);
	/* Evicted files are unlinked behind the ring thread's back; close waits for that. */
	CHECK_EQ(count_files(dir, ".tmp.", ""), 0);
	CHECK_EQ(count_files(dir, "", ".kvt"), 3);

	/* ---- restart with a smaller capacity: evicted at open down to it */
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "128KiB", "nvme.fsync", "none",
			   "nvme.queue_depth", "1", NULL),
		 0);
	t->ops->stats(t, &st);
	CHECK(st.bytes <= 2 * K64);
	CHECK(st.objects >= 1);
	CHECK_EQ(count_files(dir, "", ".kvt"), (int)st.objects);
	/* fsync=none still publishes whole objects */
	k[7] = make_key(11, 7);
	fill_object(buf, K64, &k[7]);
	CHECK_EQ(t_write(t, &k[7], buf, K64), 0);
	CHECK_EQ(t_read1(t, &k[7], rbuf, 0, K64), K64);
	CHECK_EQ(check_object(rbuf, K64, &k[7]), 0);
	t->ops->stats(t, &st);
	CHECK(st.bytes <= 2 * K64);
	kvt__tier_close(t);

	/* ---- every allocation of open failing in turn: -ENOMEM, nothing leaked, and the
	 * directory (with objects in it) still opens afterwards */
	{
		struct kvt_config *cfg;
		char err[128];
		CHECK_EQ(kvt_config_create(&cfg), 0);
		CHECK_EQ(kvt_config_set(cfg, "nvme.dirs", dir, err, sizeof(err)), 0);
		uint64_t base = kvt__alloc_bytes();
		int n, failures = 0;
		for (n = 1; n < 1000; n++) {
			kvt__alloc_fail_after((uint64_t)n);
			int rc = kvt__tier_open("nvme", cfg, &test_log, &test_geom, 0, &t);
			kvt__alloc_fail_after(0);
			if (rc == 0) {
				kvt__tier_close(t);
				break;
			}
			CHECK_EQ(rc, -ENOMEM);
			CHECK_EQ(kvt__alloc_bytes(), base);
			failures++;
		}
		CHECK(n < 1000 && failures > 3);
		CHECK_EQ(kvt__alloc_bytes(), base);
		CHECK_EQ(kvt__tier_open("nvme", cfg, &test_log, &test_geom, 0, &t), 0);
		t->ops->stats(t, &st);
		CHECK(st.objects >= 1);
		/* a failed op allocation is a synchronous -ENOMEM (callback never runs) */
		struct waiter w = WAITER_INIT;
		struct kvt_seg sg[8];
		for (int i = 0; i < 8; i++)
			sg[i] = (struct kvt_seg){(uint64_t)i * 4096, 4096, rbuf + i * 4096};
		kvt__alloc_fail_after(2); /* the op comes from the free list; segs[] > 4 do not */
		int rc = t->ops->read(t, &k[7], sg, 8, waiter_cb, &w);
		kvt__alloc_fail_after(0);
		CHECK(rc == -ENOMEM || rc == 0);
		if (rc == 0)
			waiter_wait(&w, 0);
		else
			CHECK_EQ(w.calls, 0);
		kvt__tier_close(t);
		kvt_config_destroy(cfg);
	}
	CHECK_EQ(kvt__alloc_bytes(), 0);

	free(buf);
	free(rbuf);
	rm_rf(root);
	printf("nvme_budget: ok\n");
	return 0;
}
