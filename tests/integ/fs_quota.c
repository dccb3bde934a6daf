/*
 * fs_quota.c - the fs tier on a file system whose quota is reached answers a write
 * -ENOSPC (a write refused), not -EDQUOT, and says so once a while, not per write. Why:
 * -EDQUOT is the engine's word for the NVMe tier's daily write budget, whose refusals it
 * offers again at every DRAM hit, so a full CephFS quota (ceph.quota.max_bytes) or an NFS
 * or XFS user quota turned every hit into another doomed write and another warning line
 * (until 2026-12-06; the S3 and RADOS tiers were fixed the day before). pwrite is
 * interposed (the tier is linked in statically) to fail with EDQUOT or ENOSPC on demand;
 * every other call goes to the kernel.
 *  - 20 writes under a full quota: each -ENOSPC, no temporary left behind, one warning;
 *  - the same with no space (ENOSPC);
 *  - room again: the next write lands and reads back.
 */
#include <ftw.h>
#include <sys/syscall.h>

#include "lib/tierh.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;
#define OBJ 8192

static _Atomic int fail_errno;
static _Atomic int warnings;

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	int e = atomic_load(&fail_errno);
	if (e) {
		errno = e;
		return -1;
	}
	return syscall(SYS_pwrite64, fd, buf, n, off);
}

static void count_log(void *arg, int level, const char *msg)
{
	(void)arg;
	fprintf(stderr, "  [tier %d] %s\n", level, msg);
	if (level <= KVT_LOG_WARN)
		atomic_fetch_add(&warnings, 1);
}

static int files;
static int count(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)p;
	(void)st;
	(void)f;
	files += flag == FTW_F && !strstr(p, ".sweep.lock");
	return 0;
}

int main(void)
{
	char root[] = "/var/tmp/kvt-fs_quota-XXXXXX";
	CHECK(mkdtemp(root));
	const char *kv[] = {"fs.dir", root, "fs.fsync", "none", "fs.direct", "off", NULL};
	struct kvt_config *cfg = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, cfg, &t), 0);
	kvt_config_destroy(cfg);
	t->log.fn = count_log;
	uint8_t *obj = malloc(OBJ), *back = malloc(OBJ);
	th_obj_fill(obj, OBJ, 7);
	const int errs[] = {EDQUOT, ENOSPC};
	for (int e = 0; e < 2; e++) {
		atomic_store(&warnings, 0);
		atomic_store(&fail_errno, errs[e]);
		for (int i = 0; i < 20; i++) {
			struct kvt_key k;
			th_key(&k, (uint64_t)(e * 100 + i), 5);
			int rc = th_write(t, &k, obj, OBJ);
			CHECKM(rc == -ENOSPC, "%s: write %d answered %d, wanted -ENOSPC",
			       strerror(errs[e]), i, rc);
		}
		atomic_store(&fail_errno, 0);
		printf("fs_quota: %s: 20 writes refused -ENOSPC, %d warning line(s)\n",
		       strerror(errs[e]), atomic_load(&warnings));
		CHECKM(atomic_load(&warnings) <= 1, "%d warning lines for 20 refused writes",
		       atomic_load(&warnings));
		files = 0;
		nftw(root, count, 16, FTW_PHYS);
		CHECKM(files == 0, "%d files left behind by refused writes", files);
	}
	struct kvt_key k;
	th_key(&k, 999, 5);
	CHECK_EQ(th_write(t, &k, obj, OBJ), 0);
	struct kvt_seg seg = {.off = 0, .len = OBJ, .buf = back};
	CHECK_EQ(th_read(t, &k, &seg, 1), OBJ);
	CHECK(memcmp(obj, back, OBJ) == 0);
	th_close(t);
	free(obj);
	free(back);
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	CHECK(system(cmd) == 0);
	printf("fs_quota: ok\n");
	return 0;
}
