/*
 * nvme_budget_enospc.c - a write that hits a real ENOSPC and is retried (evict in its
 * directory, write again: tier_nvme_write.c, nv_write_fail) is charged to the write
 * budget (nvme.write_budget) for what its first attempt wrote too, not only for the object
 * once. An 8 MiB tmpfs (needs root to mount; exits 77 otherwise): A (1 MiB) stored under a
 * budget of 3 MiB, a ballast file outside the tier leaves 512 KiB free, and B (1 MiB) is
 * written: its first attempt writes about half of it and stops short (ENOSPC), A is evicted
 * and B written again. The disk took about 2.5 MiB, so another 1 MiB no longer fits the
 * budget. Until 2026-12-06 only 2 MiB were counted and it did: each retry let up to its own
 * size through unbudgeted.
 */
#include "nvme_util.h"
#include "lib/tmpfs.h"

#define MIB (1u << 20)

int main(void)
{
	const char *mnt = tmpfs_mount("nvme-budget-enospc", "8m");
	char dir[400], ballast[400];
	snprintf(dir, sizeof(dir), "%s/s", mnt);
	snprintf(ballast, sizeof(ballast), "%s/ballast", mnt);
	struct kvt_tier *t;
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "1GiB", "nvme.write_budget", "3MiB",
			   "nvme.direct", "off", "nvme.preallocate", "0", "nvme.log_max", "0", NULL),
		 0);
	uint8_t *buf = abuf(MIB), *rbuf = abuf(MIB);
	struct kvt_key a = make_key(31, 0), b = make_key(31, 1);
	fill_object(buf, MIB, &a);
	CHECK_EQ(t_write(t, &a, buf, MIB), 0);

	/* the disk full but for 512 KiB */
	int bfd = open(ballast, O_CREAT | O_WRONLY, 0644);
	CHECK(bfd >= 0);
	memset(rbuf, 0x5a, 65536);
	off_t size = 0;
	ssize_t n;
	while ((n = write(bfd, rbuf, 65536)) > 0)
		size += n;
	CHECK(size > 512 << 10);
	CHECK_EQ(ftruncate(bfd, size - (512 << 10)), 0);
	close(bfd);

	struct kvt_tier_stats st = {0};
	t->ops->stats(t, &st);
	uint64_t ev = st.evictions;
	log_clear();
	fill_object(buf, MIB, &b);
	CHECK_EQ(t_write(t, &b, buf, MIB), 0);
	t->ops->stats(t, &st);
	CHECKM(log_count("retrying once") == 1 && st.evictions == ev + 1,
	       "B was not retried after evicting A (%d retries, %llu evictions)",
	       log_count("retrying once"), (unsigned long long)(st.evictions - ev));
	CHECK_EQ(t_read1(t, &b, rbuf, 0, MIB), (int)MIB);
	CHECK_EQ(check_object(rbuf, MIB, &b), 0);

	int cw = t->ops->can_write(t, MIB);
	printf("nvme_budget_enospc: 1 MiB more under a 3 MiB budget after A and B's retried "
	       "write: %d (%s)\n",
	       cw, cw == -EDQUOT ? "refused" : "admitted: the first attempt was not counted");
	CHECKM(cw == -EDQUOT, "B's first attempt was not charged to the write budget");
	kvt__tier_close(t);
	free(buf);
	free(rbuf);
	printf("nvme_budget_enospc: ok\n");
	return 0;
}
