/*
 * nvme_dirsync.c - nvme.fsync=full and the directory fsync after a publish, when the
 * process runs out of file descriptors (the fsync opens the object's subdirectory, on the
 * ring thread). Guarantees: (1) a put answered success is stored and reads back whole, a
 * put answered failure is not visible (exists, read), and a re-put of such a key is
 * written again, not answered from the index as if it had been made durable; (2) an
 * EMFILE on the directory's open sheds the idle cached read descriptors and retries, as
 * the temp-file and read opens do, so the put succeeds.
 *
 * Part 1 is the reproducer: concurrent puts under a RLIMIT_NOFILE that leaves four spare
 * descriptors. Which opens fail there depends on timing, so parts 2 and 3 make the
 * directory's open itself meet a full descriptor table: this program's openat64 (the
 * library's calls resolve to it) takes every free descriptor with dup() just before the
 * subdirectory's open it is armed for, and the kernel then answers EMFILE for real.
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "nvme_util.h"

#define OBJ (64u << 10)

/* ---- the directory open's descriptor starvation */
static _Atomic int g_arm;    /* starve the next subdirectory open */
static _Atomic int g_starved; /* subdirectory opens met starved */
static int g_dummies[4096];
static _Atomic int g_ndummies;

static int is_subdir_open(const char *path, int flags)
{
	return (flags & O_DIRECTORY) && strlen(path) == 2 && path[0] != '.' &&
	       strspn(path, "0123456789abcdef") == 2;
}

int openat64(int dfd, const char *path, int flags, ...)
{
	mode_t mode = 0;
	if (flags & (O_CREAT | O_TMPFILE)) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	if (is_subdir_open(path, flags) && atomic_exchange(&g_arm, 0)) {
		int n = 0, fd;
		while (n < (int)(sizeof(g_dummies) / sizeof(g_dummies[0])) && (fd = dup(2)) >= 0)
			g_dummies[n++] = fd;
		atomic_store(&g_ndummies, n);
		atomic_fetch_add(&g_starved, 1);
	}
	return (int)syscall(SYS_openat, dfd, path, flags, mode);
}

static void unstarve(void)
{
	int n = atomic_exchange(&g_ndummies, 0);
	while (n)
		close(g_dummies[--n]);
}

/* A descriptor limit that leaves spare numbers free below it (an inherited descriptor
 * may sit anywhere: what is used is looked up, not counted). */
static rlim_t limit_leaving(int spare)
{
	int fd = 0;
	for (; spare; fd++)
		if (fcntl(fd, F_GETFD) < 0)
			spare--;
	return (rlim_t)fd;
}

struct put {
	struct batch *b;
	int64_t rc;
};

static void put_cb(void *arg, int64_t res)
{
	struct put *p = arg;
	p->rc = res; /* read after batch_wait: its mutex orders it */
	batch_cb(p->b, res);
}

static int exists(struct kvt_tier *t, const struct kvt_key *k)
{
	uint8_t p = 0;
	CHECK_EQ(t_exists(t, k, 1, &p), 0);
	return p;
}

static uint64_t objects(struct kvt_tier *t)
{
	struct kvt_tier_stats st;
	t->ops->stats(t, &st);
	return st.objects;
}

/* A stored key reads back whole; one not stored is a miss. */
static void check_key(struct kvt_tier *t, const struct kvt_key *k, int stored, uint8_t *buf)
{
	CHECK_EQ(exists(t, k), stored);
	int rc = t_read1(t, k, buf, 0, OBJ);
	if (stored) {
		CHECK_EQ(rc, (int)OBJ);
		CHECK_EQ(check_object(buf, OBJ, k), 0);
	} else {
		CHECK_EQ(rc, -ENOENT);
	}
}

int main(void)
{
	const char *base = getenv("KVT_TEST_DIR") ? getenv("KVT_TEST_DIR") : "/var/tmp";
	char dir[300];
	snprintf(dir, sizeof(dir), "%s/kvt-nvme-dirsync-XXXXXX", base);
	CHECK(mkdtemp(dir));
	struct rlimit old;
	CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
	uint8_t *o = abuf(512ull * OBJ), *back = abuf(OBJ);

	/* ---- 1. the reproducer: 320 concurrent puts, 16 in flight, with four spare
	 * descriptors (and one cached read fd) */
	{
		struct kvt_tier *t;
		CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "64MiB",
				   "nvme.queue_depth", "16", "nvme.open_files", "1", "nvme.fsync",
				   "full", NULL),
			 0);
		for (int i = 0; i < 64; i++) {
			struct kvt_key k = make_key(9, (uint64_t)i);
			fill_object(o + (uint64_t)i * OBJ, OBJ, &k);
			CHECK_EQ(t_write(t, &k, o + (uint64_t)i * OBJ, OBJ), 0);
		}
		for (int i = 0; i < 64; i++) {
			struct kvt_key k = make_key(9, (uint64_t)i);
			CHECK_EQ(t_read1(t, &k, back, 0, OBJ), (int)OBJ);
		}
		enum { ROUNDS = 5, PER = 64 };
		static struct put pr[ROUNDS * PER];
		struct kvt_key keys[ROUNDS * PER];
		struct batch b = BATCH_INIT;
		struct rlimit low = old;
		low.rlim_cur = limit_leaving(4);
		CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
		for (int r = 0; r < ROUNDS; r++) {
			for (int i = 0; i < PER; i++) {
				int j = r * PER + i;
				keys[j] = make_key(10 + (uint64_t)r, (uint64_t)i);
				fill_object(o + (uint64_t)(64 + j) * OBJ, OBJ, &keys[j]);
				pr[j] = (struct put){&b, 1};
				batch_add(&b);
				CHECK_EQ(t->ops->write(t, &keys[j], o + (uint64_t)(64 + j) * OBJ,
						       OBJ, put_cb, &pr[j]),
					 0);
			}
			batch_wait(&b, 0);
		}
		CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
		int visible_failed = 0, missing_ok = 0;
		for (int j = 0; j < ROUNDS * PER; j++) {
			CHECK(pr[j].rc == 0 || pr[j].rc == -EMFILE || pr[j].rc == -ENFILE);
			int p = exists(t, &keys[j]);
			visible_failed += p && pr[j].rc;
			missing_ok += !p && !pr[j].rc;
		}
		printf("1. reproducer: puts ok %d failed %d; failed but visible %d, ok but "
		       "missing %d; directory fsync failures %d\n",
		       b.ok, b.failed, visible_failed, missing_ok,
		       log_count("directory fsync in"));
		CHECK_EQ(b.ok + b.failed, ROUNDS * PER);
		CHECK_EQ(visible_failed, 0);
		CHECK_EQ(missing_ok, 0);
		for (int j = 0; j < ROUNDS * PER; j++)
			check_key(t, &keys[j], !pr[j].rc, back);
		/* the index holds exactly the successes, and the directory exactly the index */
		CHECK_EQ(objects(t), 64 + (uint64_t)b.ok);
		CHECK_EQ(count_files(dir, "", ".kvt"), 64 + b.ok);
		CHECK_EQ(count_files(dir, ".tmp.", ""), 0);
		/* with descriptors back, every failed put goes through when retried */
		for (int j = 0; j < ROUNDS * PER; j++)
			if (pr[j].rc) {
				CHECK_EQ(t_write(t, &keys[j], o + (uint64_t)(64 + j) * OBJ, OBJ), 0);
				check_key(t, &keys[j], 1, back);
			}
		CHECK_EQ(objects(t), 64 + ROUNDS * PER);
		kvt__tier_close(t);
		rm_rf(dir);
		CHECK_EQ(mkdir(dir, 0700), 0);
	}

	/* ---- 2. the directory's open meets a full table while the fd cache holds idle
	 * descriptors: it sheds them and retries, and every put succeeds */
	struct kvt_tier *t;
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "64MiB", "nvme.open_files", "64",
			   "nvme.fsync", "full", NULL),
		 0);
	for (int i = 0; i < 32; i++) {
		struct kvt_key k = make_key(20, (uint64_t)i);
		fill_object(o + (uint64_t)i * OBJ, OBJ, &k);
		CHECK_EQ(t_write(t, &k, o + (uint64_t)i * OBJ, OBJ), 0);
	}
	struct rlimit low = old;
	low.rlim_cur = limit_leaving(64); /* what the dummies take stays small */
	CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
	log_clear();
	atomic_store(&g_starved, 0);
	for (int i = 0; i < 32; i++) {
		/* a read puts one idle descriptor in the cache (the last shed emptied it) */
		struct kvt_key rk = make_key(20, (uint64_t)i);
		CHECK_EQ(t_read1(t, &rk, back, 0, OBJ), (int)OBJ);
		struct kvt_key k = make_key(21, (uint64_t)i);
		fill_object(o + (uint64_t)(32 + i) * OBJ, OBJ, &k);
		atomic_store(&g_arm, 1);
		int rc = t_write(t, &k, o + (uint64_t)(32 + i) * OBJ, OBJ);
		CHECK_EQ(atomic_load(&g_arm), 0); /* the open was starved */
		CHECK(atomic_load(&g_ndummies) > 0); /* by the dummies */
		unstarve();
		CHECKM(rc == 0, "put %d with its directory open starved: %d", i, rc);
		check_key(t, &k, 1, back);
	}
	CHECK_EQ(atomic_load(&g_starved), 32);
	CHECK_EQ(log_count("out of file descriptors"), 32);
	CHECK_EQ(log_count("directory fsync in"), 0);
	printf("2. starved directory opens with idle cached fds: 32 puts ok, 32 sheds\n");

	/* ---- 3. nothing to shed (a fresh open: an empty fd cache): the put fails, and its
	 * key is not stored - not by the index (exists, read, a re-put), not on disk (a
	 * reopen) */
	CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
	kvt__tier_close(t);
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.open_files", "64", "nvme.fsync", "full",
			   NULL),
		 0);
	low.rlim_cur = limit_leaving(64);
	CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
	log_clear();
	uint64_t before_objects = objects(t);
	struct kvt_key fk[4];
	for (int i = 0; i < 4; i++) {
		fk[i] = make_key(22, (uint64_t)i);
		fill_object(o + (uint64_t)(64 + i) * OBJ, OBJ, &fk[i]);
		for (int attempt = 0; attempt < 2; attempt++) { /* the put, then a re-put */
			atomic_store(&g_arm, 1);
			int rc = t_write(t, &fk[i], o + (uint64_t)(64 + i) * OBJ, OBJ);
			CHECK_EQ(atomic_load(&g_arm), 0);
			unstarve();
			CHECKM(rc == -EMFILE, "put %d (attempt %d) without descriptors: %d", i,
			       attempt, rc);
			check_key(t, &fk[i], 0, back);
		}
	}
	CHECK_EQ(objects(t), before_objects);
	CHECK_EQ(log_count("directory fsync in"), 8);
	CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
	kvt__tier_close(t);
	CHECK_EQ(count_files(dir, "", ".kvt"), (int)before_objects);
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.fsync", "full", NULL), 0);
	CHECK_EQ(objects(t), before_objects);
	for (int i = 0; i < 4; i++) {
		check_key(t, &fk[i], 0, back);
		/* descriptors back: the same put succeeds */
		CHECK_EQ(t_write(t, &fk[i], o + (uint64_t)(64 + i) * OBJ, OBJ), 0);
		check_key(t, &fk[i], 1, back);
	}
	printf("3. no descriptor to shed: 8 puts failed, none stored; re-puts ok after\n");
	kvt__tier_close(t);

	free(o);
	free(back);
	CHECK_EQ(kvt__alloc_bytes(), 0);
	rm_rf(dir);
	printf("nvme_dirsync: ok\n");
	return 0;
}
