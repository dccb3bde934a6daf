/*
 * nvme_stress.c - many threads submitting a random mix of writes, reads (single and
 * multi-segment), removes, exists, flushes and drop_corrupt on a small key space, with a
 * capacity small enough that writes evict all the time (mostly by recycling the victim's
 * file, as sizes repeat), while another thread runs scan() and stats(). Every successful read must
 * return exactly its key's bytes; afterwards the index, the stats and the files on disk must agree.
 * Meant for the TSan/ASan builds too.
 */
#include "nvme_util.h"

#define THREADS 6
#define KEYS 160
#define SECONDS 2.0

static struct kvt_tier *tier;
static _Atomic int stop;
static _Atomic long n_reads, n_hits, n_writes, n_removes, n_bad;

static uint64_t len_of(int id)
{
	/* 64, 128, 192 or 256 KiB: few sizes, so evicted files are often recycled */
	return 65536ull * (1 + mix64((uint64_t)id * 31) % 4);
}

static void *worker(void *arg)
{
	uint64_t rnd = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
	uint8_t *wbuf = abuf(256 << 10), *rbuf = abuf(256 << 10);
	while (!stop) {
		rnd = mix64(rnd);
		int id = (int)(rnd % KEYS), what = (int)((rnd >> 32) % 100);
		struct kvt_key k = make_key(50, (uint64_t)id);
		uint64_t len = len_of(id);
		if (what < 35) {
			int rc = t_read1(tier, &k, rbuf, 0, len);
			n_reads++;
			if (rc >= 0) {
				n_hits++;
				if (rc != (int)len || check_object(rbuf, len, &k))
					n_bad++;
			} else if (rc != -ENOENT) {
				n_bad++;
			}
		} else if (what < 45) {
			/* three segments, the last one past the end of the object */
			struct kvt_seg sg[3] = {{len - 4096, 4096, rbuf},
						{0, 4096, rbuf + 8192},
						{len, 8192, rbuf + 16384}};
			int rc = t_read(tier, &k, sg, 3);
			if (rc >= 0 && (rc != 8192 || memcmp(rbuf + 8192 + 16, k.bytes, 32)))
				n_bad++;
			else if (rc < 0 && rc != -ENOENT)
				n_bad++;
		} else if (what < 75) {
			fill_object(wbuf, len, &k);
			int rc = t_write(tier, &k, wbuf, len);
			n_writes++;
			if (rc < 0 && rc != -ENOSPC)
				n_bad++;
		} else if (what < 85) {
			int rc = t_remove(tier, &k);
			n_removes++;
			if (rc < 0 && rc != -ENOENT)
				n_bad++;
		} else if (what < 93) {
			struct kvt_key ks[4];
			uint8_t present[4];
			for (int i = 0; i < 4; i++)
				ks[i] = make_key(50, (uint64_t)((id + i) % KEYS));
			if (t_exists(tier, ks, 4, present) < 0)
				n_bad++;
		} else if (what < 97) {
			if (t_flush(tier) < 0)
				n_bad++;
		} else {
			tier->ops->drop_corrupt(tier, &k);
		}
	}
	free(wbuf);
	free(rbuf);
	return NULL;
}

static int count_scan(void *arg, const struct kvt_key *k, uint64_t bytes)
{
	(void)k;
	uint64_t *acc = arg;
	acc[0]++;
	acc[1] += bytes;
	return 0;
}

static void *observer(void *arg)
{
	(void)arg;
	while (!stop) {
		uint64_t acc[2] = {0, 0};
		tier->ops->scan(tier, count_scan, acc);
		struct kvt_tier_stats st;
		tier->ops->stats(tier, &st);
		if (tier->ops->can_write(tier, 4096) != 0)
			n_bad++;
		usleep(2000);
	}
	return NULL;
}

int main(void)
{
	char root[] = "/tmp/kvt-nvme-stress-XXXXXX";
	CHECK(mkdtemp(root));
	char d0[300], d1[300], dirs[700];
	snprintf(d0, sizeof(d0), "%s/a", root);
	snprintf(d1, sizeof(d1), "%s/b", root);
	snprintf(dirs, sizeof(dirs), "%s,%s", d0, d1);
	CHECK_EQ(open_tier(&tier, "nvme.dirs", dirs, "nvme.bytes", "6MiB", "nvme.queue_depth", "8",
			   "nvme.open_files", "16", NULL),
		 0);
	pthread_t th[THREADS + 1];
	for (long i = 0; i < THREADS; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, worker, (void *)(i + 1)), 0);
	CHECK_EQ(pthread_create(&th[THREADS], NULL, observer, NULL), 0);
	usleep((useconds_t)(SECONDS * 1e6));
	stop = 1;
	for (int i = 0; i <= THREADS; i++)
		pthread_join(th[i], NULL);

	struct kvt_tier_stats st;
	tier->ops->stats(tier, &st);
	uint64_t acc[2] = {0, 0};
	CHECK_EQ(tier->ops->scan(tier, count_scan, acc), 0);
	printf("stress: %ld reads (%ld hits), %ld writes, %ld removes; %lu objects, %lu evictions, "
	       "%lu errors\n",
	       (long)n_reads, (long)n_hits, (long)n_writes, (long)n_removes,
	       (unsigned long)st.objects, (unsigned long)st.evictions, (unsigned long)st.errors);
	CHECK_EQ(n_bad, 0);
	CHECK(n_hits > 0 && st.evictions > 0);
	CHECK_EQ(st.errors, 0);
	CHECK_EQ(acc[0], st.objects);
	CHECK_EQ(acc[1], st.bytes);
	CHECK(st.bytes <= 6 << 20);
	kvt__tier_close(tier);

	/* Disk and index agree, and a restart finds exactly that. */
	CHECK_EQ(count_files(d0, ".tmp.", "") + count_files(d1, ".tmp.", ""), 0);
	CHECK_EQ(count_files(d0, "", ".kvt") + count_files(d1, "", ".kvt"), (int)st.objects);
	CHECK_EQ(open_tier(&tier, "nvme.dirs", dirs, "nvme.bytes", "6MiB", NULL), 0);
	struct kvt_tier_stats st2;
	tier->ops->stats(tier, &st2);
	CHECK_EQ(st2.objects, st.objects);
	CHECK_EQ(st2.bytes, st.bytes);
	uint8_t *rbuf = abuf(256 << 10);
	for (int id = 0; id < KEYS; id++) {
		struct kvt_key k = make_key(50, (uint64_t)id);
		int rc = t_read1(tier, &k, rbuf, 0, len_of(id));
		CHECK(rc == -ENOENT ||
		      (rc == (int)len_of(id) && !check_object(rbuf, len_of(id), &k)));
	}
	kvt__tier_close(tier);
	free(rbuf);
	CHECK_EQ(kvt__alloc_bytes(), 0);
	rm_rf(root);
	printf("nvme_stress: ok\n");
	return 0;
}
