/*
 * nvme_tmpfs.c - the nvme tier on small RAM file systems (needs root to mount; exits 77
 * otherwise). (1) A file system that refuses O_DIRECT: direct=auto warns once and works
 * buffered, direct=on fails open with a clear error. Linux >= 6.6 tmpfs accepts O_DIRECT,
 * so when it does, ramfs (which never does) plays that part. (2) A full 8 MiB tmpfs: nvme.bytes
 * of 1 GiB is clamped at open to what the disk holds less 2 %, so eviction keeps it from
 * filling; a disk filled by someone else (a ballast file) gives real ENOSPCs, which evict and
 * retry; an impossible write (also one whose fallocate fails) fails with -ENOSPC leaving no
 * temp file and every stored object intact, never a crash. (3) nvme.bytes below the disk size.
 */
#include <fcntl.h>

#include "nvme_util.h"
#include "lib/tmpfs.h"

static char mnt_ramfs[300];
static const char *mnt_tmpfs;

/* Runs before tmpfs.h's cleanup (registered after it), which removes the root. */
static void cleanup_ramfs(void)
{
	if (mnt_ramfs[0])
		umount2(mnt_ramfs, MNT_DETACH);
}

/* 1 if the file system at dir refuses O_DIRECT opens. */
static int refuses_direct(const char *dir)
{
	char p[400];
	snprintf(p, sizeof(p), "%s/probe", dir);
	int fd = open(p, O_CREAT | O_WRONLY | O_DIRECT, 0644);
	if (fd >= 0) {
		close(fd);
		unlink(p);
		return 0;
	}
	return errno == EINVAL;
}

/* Every object the tier lists reads back intact. Returns how many. */
static int list_and_check(struct kvt_tier *t, int expect_min)
{
	static struct collect c;
	c.n = 0;
	CHECK_EQ(t->ops->scan(t, collect_fn, &c), 0);
	CHECK(c.n >= expect_min);
	for (int i = 0; i < c.n; i++) {
		uint8_t *b = abuf(c.bytes[i]);
		CHECK_EQ(t_read1(t, &c.keys[i], b, 0, c.bytes[i]), (int)c.bytes[i]);
		CHECK_EQ(check_object(b, c.bytes[i], &c.keys[i]), 0);
		free(b);
	}
	return c.n;
}

int main(void)
{
	mnt_tmpfs = tmpfs_mount("nvme-tmpfs", "8m");
	atexit(cleanup_ramfs);
	char m[300];

	/* ---- (1) O_DIRECT refused */
	const char *nodirect = mnt_tmpfs;
	if (!refuses_direct(mnt_tmpfs)) {
		snprintf(m, sizeof(m), "%s/ramfs", tmpfs_root);
		CHECK_EQ(mkdir(m, 0755), 0);
		if (mount("ramfs", m, "ramfs", 0, "") < 0) {
			printf("SKIP: this tmpfs takes O_DIRECT and ramfs cannot be mounted\n");
			return 77;
		}
		snprintf(mnt_ramfs, sizeof(mnt_ramfs), "%s", m);
		CHECK(refuses_direct(mnt_ramfs));
		nodirect = mnt_ramfs;
		printf("tmpfs accepts O_DIRECT on this kernel: testing the fallback on ramfs\n");
	}
	char dir[400];
	snprintf(dir, sizeof(dir), "%s/nd", nodirect);
	struct kvt_tier *t;
	log_clear();
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.direct", "on", NULL), -EINVAL);
	CHECK_EQ(log_count("refuses O_DIRECT and nvme.direct=on"), 1);
	log_clear();
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, NULL), 0); /* auto is the default */
	CHECK_EQ(log_count("1 nvme:"), 1);		    /* exactly one warning */
	CHECK_EQ(log_count("falling back to buffered I/O"), 1);
	CHECK_EQ(log_count("buffered I/O, 0 objects"), 1);
	uint8_t *buf = abuf(16 << 20), *rbuf = abuf(16 << 20);
	struct kvt_key k[64];
	for (int i = 0; i < 8; i++) {
		k[i] = make_key(20, (uint64_t)i);
		fill_object(buf, 65536, &k[i]);
		CHECK_EQ(t_write(t, &k[i], buf, 65536), 0);
	}
	for (int i = 0; i < 8; i++) {
		CHECK_EQ(t_read1(t, &k[i], rbuf, 0, 65536), 65536);
		CHECK_EQ(check_object(rbuf, 65536, &k[i]), 0);
	}
	CHECK_EQ(log_count("1 nvme:"), 1); /* still one warning */
	kvt__tier_close(t);
	log_clear();
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.direct", "off", NULL), 0);
	CHECK_EQ(log_count("1 nvme:"), 0);
	CHECK_EQ(list_and_check(t, 8), 8);
	kvt__tier_close(t);

	/* ---- (2) disk full: 8 MiB tmpfs, capacity far larger */
	snprintf(dir, sizeof(dir), "%s/full", mnt_tmpfs);
	log_clear();
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "1GiB", NULL), 0);
	CHECK_EQ(log_count("capacity clamped to"), 1);
	struct kvt_tier_stats st;
	/* 48 x 512 KiB = 24 MiB through an 8 MiB disk: eviction keeps it from filling. */
	for (int i = 0; i < 48; i++) {
		k[i] = make_key(21, (uint64_t)i);
		fill_object(buf, 512 << 10, &k[i]);
		CHECK_EQ(t_write(t, &k[i], buf, 512 << 10), 0);
	}
	memset(&st, 0, sizeof(st));
	t->ops->stats(t, &st);
	printf("disk full: %lu objects kept, %lu evictions, %lu errors\n",
	       (unsigned long)st.objects, (unsigned long)st.evictions, (unsigned long)st.errors);
	CHECK(st.evictions > 0);
	CHECK_EQ(st.errors, 0);
	int kept = list_and_check(t, 8);
	CHECK_EQ(count_files(dir, ".tmp.", ""), 0);
	/* The last one written is there. */
	CHECK_EQ(t_read1(t, &k[47], rbuf, 0, 512 << 10), 512 << 10);

	/* An object larger than the disk: -ENOSPC, nothing evicted, nothing lost. */
	struct kvt_key big = make_key(22, 0);
	fill_object(buf, 16 << 20, &big);
	uint64_t ev = st.evictions;
	CHECK_EQ(t_write(t, &big, buf, 16 << 20), -ENOSPC);
	t->ops->stats(t, &st);
	CHECK_EQ(st.evictions, ev);
	CHECK_EQ(st.writes_skipped, 1);
	CHECK_EQ(count_files(dir, ".tmp.", ""), 0);
	CHECK_EQ(list_and_check(t, kept), kept);

	/* Fill the rest of the disk with a ballast file outside the tier, keep only two tier
	 * objects (1 MiB): a 2 MiB write cannot be made to fit -> -ENOSPC, both survive. */
	for (int i = 0; i < 46; i++)
		t_remove(t, &k[i]);
	t->ops->stats(t, &st);
	CHECK_EQ(st.objects, 2);
	/* Removed files are unlinked in the background; close waits for that, so the space is
	 * really free before the ballast takes it. */
	kvt__tier_close(t);
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "1GiB", NULL), 0);
	t->ops->stats(t, &st);
	CHECK_EQ(st.objects, 2);
	char ballast[400];
	snprintf(ballast, sizeof(ballast), "%s/ballast", mnt_tmpfs);
	int bfd = open(ballast, O_CREAT | O_WRONLY, 0644);
	CHECK(bfd >= 0);
	memset(rbuf, 0x5a, 65536);
	while (write(bfd, rbuf, 4096) > 0)
		;
	close(bfd);
	fill_object(buf, 2 << 20, &big);
	CHECK_EQ(t_write(t, &big, buf, 2 << 20), -ENOSPC);
	CHECK_EQ(count_files(dir, ".tmp.", ""), 0);
	CHECK_EQ(list_and_check(t, 2), 2);
	/* The same for an object of more than two pieces, whose new file is fallocated first:
	 * the fallocate's ENOSPC takes the same path (evict in the directory, retry, give up). */
	fill_object(buf, 5 << 20, &big);
	CHECK_EQ(t_write(t, &big, buf, 5 << 20), -ENOSPC);
	CHECK_EQ(count_files(dir, ".tmp.", ""), 0);
	CHECK_EQ(list_and_check(t, 2), 2);
	/* A 256 KiB write can be made to fit by evicting one object: it is, exactly one. */
	t->ops->stats(t, &st);
	ev = st.evictions;
	struct kvt_key small = make_key(22, 1);
	fill_object(buf, 256 << 10, &small);
	CHECK_EQ(t_write(t, &small, buf, 256 << 10), 0);
	t->ops->stats(t, &st);
	CHECK_EQ(st.evictions, ev + 1);
	int r46 = t_read1(t, &k[46], rbuf, 0, 4096), r47 = t_read1(t, &k[47], rbuf, 0, 4096);
	CHECK((r46 == -ENOENT) != (r47 == -ENOENT));
	CHECK_EQ(list_and_check(t, 2), 2);
	kvt__tier_close(t);
	unlink(ballast);

	/* ---- (3) nvme.bytes below the disk size: LRU eviction keeps within it */
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "2MiB", NULL), 0);
	for (int i = 0; i < 20; i++) {
		k[i] = make_key(23, (uint64_t)i);
		fill_object(buf, 512 << 10, &k[i]);
		CHECK_EQ(t_write(t, &k[i], buf, 512 << 10), 0);
		t->ops->stats(t, &st);
		CHECK(st.bytes <= 2 << 20);
	}
	CHECK_EQ(list_and_check(t, 4), 4);
	kvt__tier_close(t);

	/* ---- (4) a real ENOSPC never evicts the writing chain's own prefix: a chain c0..c3
	 * stored, the disk filled by a ballast, then c4 (parent c3) written. Only chunks
	 * without a child stored may go (none here): -ENOSPC and the chain intact. Until
	 * 2026-12-05 the oldest object went when no leaf was left - c0 - and the write
	 * succeeded on a chain that could no longer be resumed. */
	rm_rf(dir);
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "1GiB", NULL), 0);
	struct kvt_key c[5];
	for (int i = 0; i < 5; i++) {
		c[i] = make_key(24, (uint64_t)i);
		fill_object(buf, 20480, &c[i]);
		if (i < 4) {
			struct waiter w = WAITER_INIT;
			CHECK_EQ(waiter_wait(&w, t->ops->write_chained(t, &c[i], i ? &c[i - 1] : NULL,
									buf, 20480, waiter_cb, &w)),
				 0);
		}
	}
	bfd = open(ballast, O_CREAT | O_WRONLY, 0644);
	CHECK(bfd >= 0);
	while (write(bfd, rbuf, 4096) > 0)
		;
	close(bfd);
	struct waiter w4 = WAITER_INIT;
	int rc4 = waiter_wait(&w4, t->ops->write_chained(t, &c[4], &c[3], buf, 20480, waiter_cb, &w4));
	CHECKM(rc4 == -ENOSPC, "(4) c4 on a full disk: %d", rc4);
	for (int i = 0; i < 4; i++) {
		CHECKM(t_read1(t, &c[i], rbuf, 0, 20480) == 20480, "(4) c%d of the chain is gone", i);
		CHECK_EQ(check_object(rbuf, 20480, &c[i]), 0);
	}
	CHECK_EQ(count_files(dir, ".tmp.", ""), 0);
	kvt__tier_close(t);
	unlink(ballast);

	free(buf);
	free(rbuf);
	printf("nvme_tmpfs: ok\n");
	return 0;
}
