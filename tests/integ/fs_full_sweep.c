/*
 * fs_full_sweep.c - a file system filled by dead writers' temporaries (writers killed
 * mid-write) gets its room back. Sweeps followed successful writes only, so once such
 * debris filled it every write failed with ENOSPC for ever and nothing ever swept (until
 * 2026-12-06). Now a write refused for room queues a sweep (at most one a minute, or one
 * per fs.tmp_max_age_s if that is shorter) and answers at once. On a real 1 MiB tmpfs:
 *  A. temporaries still young (fs.tmp_max_age_s 3600): 20 writes are refused, -ENOSPC, with
 *     one sweep among them (rate-limited), and no temporary is touched;
 *  B. the same temporaries with fs.tmp_max_age_s 1: a first write is refused (its sweep is
 *     the first to see them: a temporary is stale once this node has seen it unchanged
 *     for fs.tmp_max_age_s); a write 1.5 s later is refused too, and answers while its
 *     sweep - which removes them - is held (unlinkat interposed: the sweep's first removal
 *     of a temporary waits): until 2026-12-07 the sweep ran inside the write, on the pending list flushes
 *     wait for, for as long as a walk of the tree took (minutes on a large shared one; a
 *     review); then a write lands, and reads back.
 * Needs root to mount the tmpfs (skips otherwise, exit 77).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>

#include "lib/rm_rf.h"
#include "lib/tierh.h"


#include "lib/tmpfs.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

#define OBJ 65536

static _Atomic int sweeps_called; /* "is full: sweeping" lines */
static _Atomic int sweeps_over;	  /* "fs: sweep of" lines, one per sweep */
static _Atomic int armed, held, released;

typedef int (*unlinkat_fn)(int, const char *, int);

/* A sweep removes a stale temporary (a planted one) with unlinkat: armed, the first such
 * removal is held until released (at most 5 s). */
int unlinkat(int dfd, const char *name, int flags)
{
	if (strstr(name, ".tmp.deadhost.") && atomic_exchange(&armed, 0)) {
		atomic_store(&held, 1);
		for (int i = 0; i < 500 && !atomic_load(&released); i++)
			usleep(10000);
	}
	static unlinkat_fn real;
	if (!real)
		real = (unlinkat_fn)dlsym(RTLD_NEXT, "unlinkat");
	return real(dfd, name, flags);
}

static void wait_sweeps(int n)
{
	for (int i = 0; i < 1000 && atomic_load(&sweeps_over) < n; i++)
		usleep(10000);
	CHECKM(atomic_load(&sweeps_over) >= n, "%d sweep(s) over in 10 s, want %d",
	       atomic_load(&sweeps_over), n);
}

static void count_log(void *arg, int level, const char *msg)
{
	(void)arg;
	if (strstr(msg, "fs: sweep of"))
		atomic_fetch_add(&sweeps_over, 1);
	if (strstr(msg, "is full: sweeping"))
		atomic_fetch_add(&sweeps_called, 1);
	else if (level <= KVT_LOG_WARN || getenv("KVT_TEST_VERBOSE"))
		fprintf(stderr, "  [tier %d] %s\n", level, msg);
}

static struct kvt_tier *open_fs(const char *dir, const char *max_age)
{
	const char *kv[] = {"fs.dir", dir, "fs.direct", "off", "fs.fsync", "none",
			    "fs.threads", "2", "fs.tmp_max_age_s", max_age, NULL};
	struct kvt_config *c = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, c, &t), 0);
	kvt_config_destroy(c);
	t->log.fn = count_log;
	t->log.level = KVT_LOG_DEBUG;
	return t;
}

/* Dead writers' temporaries in leaf, 64 KiB each, until the file system is full. */
static void fill_with_temps(const char *leaf, const char *hex)
{
	static char junk[OBJ];
	for (int n = 0;; n++) {
		char p[1200];
		snprintf(p, sizeof(p), "%s/.%s.tmp.deadhost.%d.00000000deadbeef.0", leaf, hex, n);
		int fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0600);
		if (fd < 0) {
			CHECK(errno == ENOSPC);
			break;
		}
		ssize_t w = write(fd, junk, sizeof(junk));
		close(fd);
		if (w != (ssize_t)sizeof(junk)) {
			CHECK(w >= 0 || errno == ENOSPC);
			break;
		}
	}
}

static int temps_in(const char *leaf)
{
	DIR *d = opendir(leaf);
	CHECK(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += strstr(e->d_name, ".tmp.deadhost.") != NULL;
	closedir(d);
	return n;
}

int main(void)
{
	const char *mnt = tmpfs_mount("fs_full_sweep", "1m");
	char dir[400], leaf[600], hex[65], cmd[800];
	snprintf(dir, sizeof(dir), "%s/store", mnt);
	struct kvt_key k;
	th_key(&k, 1, 77);
	kvt_key_to_hex(&k, hex);
	snprintf(leaf, sizeof(leaf), "%s/v1/%.2s/%.2s", dir, hex, hex + 2);
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", leaf);
	CHECK_EQ(system(cmd), 0);
	fill_with_temps(leaf, hex);
	int planted = temps_in(leaf); /* the last one cut short by ENOSPC too */
	printf("fs_full_sweep: %d dead temporaries fill the file system\n", planted);
	CHECK(planted >= 8);
	uint8_t *obj = malloc(OBJ), *back = malloc(OBJ);
	CHECK(obj && back);
	th_obj_fill(obj, OBJ, 5);

	/* A. Young temporaries: refused, one sweep for 20 writes, nothing removed. */
	struct kvt_tier *t = open_fs(dir, "3600");
	for (int i = 0; i < 20; i++) {
		struct kvt_key ki;
		th_key(&ki, (uint64_t)(100 + i), 77);
		int rc = th_write(t, &ki, obj, OBJ);
		CHECKM(rc == -ENOSPC, "A: write %d into a full file system answered %d", i, rc);
	}
	th_close(t);
	int left = temps_in(leaf);
	printf("  A. young temporaries: 20 writes refused, %d sweep(s), %d of %d temporaries "
	       "left\n", atomic_load(&sweeps_called), left, planted);
	CHECK_EQ(left, planted);
	int sweeps_a = atomic_load(&sweeps_called); /* checked after B, the failure that matters */

	/* B. The same temporaries, seen, then stale: a refused write's sweep takes them away
	 * without holding the write, and the next write lands. */
	atomic_store(&sweeps_called, 0);
	atomic_store(&sweeps_over, 0);
	t = open_fs(dir, "1");
	int rc = th_write(t, &k, obj, OBJ);
	CHECKM(rc == -ENOSPC, "B: a write before the temporaries were seen for 1 s: %d", rc);
	wait_sweeps(1);
	CHECK_EQ(temps_in(leaf), planted);
	usleep(1500 * 1000);
	atomic_store(&armed, 1);
	uint64_t t0 = th_now_ms();
	rc = th_write(t, &k, obj, OBJ);
	uint64_t took = th_now_ms() - t0;
	for (int i = 0; i < 500 && !atomic_load(&held); i++)
		usleep(10000);
	printf("  B. temporaries seen 1.5 s before: a write refused (%d) in %llu ms, its sweep "
	       "%s\n", rc, (unsigned long long)took, atomic_load(&held) ? "held" : "NOT HELD");
	CHECK_EQ(rc, -ENOSPC);
	CHECKM(atomic_load(&held), "the refused write queued no sweep");
	CHECKM(took < 1000, "a refused write waited %llu ms for its sweep (held 5 s)",
	       (unsigned long long)took);
	atomic_store(&released, 1);
	wait_sweeps(2);
	left = temps_in(leaf);
	rc = th_write(t, &k, obj, OBJ);
	printf("     after the sweep (%d of %d temporaries left) the write answered %d\n", left,
	       planted, rc);
	CHECK_EQ(left, 0);
	CHECKM(rc == 0, "a write after the sweep of stale temporaries: %d", rc);
	CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ);
	CHECK(!memcmp(back, obj, OBJ));
	th_close(t);
	CHECKM(sweeps_a == 1,
	       "A: %d sweeps for 20 refused writes, wanted 1 (a refused write sweeps, "
	       "rate-limited)", sweeps_a);
	free(obj);
	free(back);
	printf("fs_full_sweep: ok\n");
	return 0;
}
