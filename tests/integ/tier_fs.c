/*
 * tier_fs.c - the "fs" tier against real directories: ext4 under /tmp (O_DIRECT) and tmpfs
 * under /dev/shm (O_DIRECT refused, auto falls back). Round trips, ranges, misses, batched
 * lookups, two instances on one directory, two processes writing the same keys at once, a
 * writer SIGKILLed at random moments (no torn object ever visible; half of the kills come
 * only once the writer has published an object, so there is always something to check,
 * however slow the machine), flush and close with work in flight. Exit 0 pass, 1 fail.
 *
 * With KVT_FS_TEST_DIR=D (a shared mount such as CephFS, tests/integ/tier_fs_cephfs.sh) the
 * same checks run under D instead of /tmp, with fs.direct=auto where ext4 would use "on",
 * and the tmpfs check is left out. (The tier against fio: `kvtier bench --tier fs`.)
 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "lib/tierh.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

static char base[256];
static int scan_fn(void *arg, const struct kvt_key *k, uint64_t bytes);
static int count_fn(void *arg, const struct kvt_key *k, uint64_t bytes);

static void *abuf(size_t n)
{
	void *p = NULL;
	CHECK(posix_memalign(&p, 4096, n ? n : 4096) == 0);
	return p;
}

static struct kvt_tier *open_fs(const char *dir, const char *direct, const char *fsync)
{
	const char *kv[] = {"fs.dir", dir, "fs.direct", direct, "fs.fsync", fsync, "fs.threads",
			    "4", NULL};
	struct kvt_config *cfg = th_config(kv);
	struct kvt_tier *t;
	int rc = th_open(&kvt__tier_fs_ops, cfg, &t);
	kvt_config_destroy(cfg);
	CHECK_EQ(rc, 0);
	return t;
}

/* Round trip of several sizes, ranges, a range past the end, misses, remove. */
static void test_round_trip(const char *dir, const char *direct)
{
	struct kvt_tier *t = open_fs(dir, direct, "data");
	static const uint64_t sizes[] = {4096, 65536, 3u << 20, 5000, 40 << 20};
	for (size_t i = 0; i < KVT_ARRAY_SIZE(sizes); i++) {
		uint64_t len = sizes[i];
		struct kvt_key k;
		th_key(&k, i, 1);
		unsigned char *obj = abuf(len), *back = abuf(len + 8192);
		th_obj_fill(obj, len, 100 + i);
		CHECK_EQ(th_write(t, &k, obj, len), 0);
		memset(back, 0, len);
		CHECK_EQ(th_read_all(t, &k, back, KVT_ALIGN_UP(len, 4096)), (int64_t)len);
		CHECK(th_obj_check(back, len, NULL) == 0);
		/* two aligned ranges in one call, and one running past the end */
		if (len >= 3 * 4096) {
			struct kvt_seg segs[2] = {{4096, 4096, back}, {len - 4096 - len % 4096, 8192,
								       back + 4096}};
			memset(back, 0, 3 * 4096);
			int64_t want = 4096 + 4096 + (int64_t)(len % 4096);
			if (len % 4096 == 0)
				want = 4096 + 4096;
			CHECK_EQ(th_read(t, &k, segs, 2), want);
			CHECK(!memcmp(back, obj + 4096, 4096));
			CHECK(!memcmp(back + 4096, obj + segs[1].off, (size_t)(want - 4096)));
		}
		/* rewriting the same key is harmless */
		CHECK_EQ(th_write(t, &k, obj, len), 0);
		free(obj);
		free(back);
	}
	struct kvt_key miss;
	th_key(&miss, 999, 1);
	char b[4096] __attribute__((aligned(4096)));
	CHECK_EQ(th_read_all(t, &miss, b, sizeof(b)), -ENOENT);
	CHECK_EQ(th_remove(t, &miss), -ENOENT);
	struct kvt_key k0;
	th_key(&k0, 0, 1);
	CHECK_EQ(th_remove(t, &k0), 0);
	CHECK_EQ(th_read_all(t, &k0, b, sizeof(b)), -ENOENT);
	struct kvt_tier_stats st = {0};
	t->ops->stats(t, &st);
	CHECK(st.writes >= 10 && st.reads >= 5 && st.misses >= 2 && st.removes == 1);
	th_close(t);
}

/* Batched lookups, and a second instance seeing the first one's objects at once. */
static void test_exists_shared(const char *dir)
{
	struct kvt_tier *a = open_fs(dir, "auto", "none"), *b = open_fs(dir, "auto", "none");
	enum { N = 300 };
	struct kvt_key keys[N];
	uint8_t present[N];
	unsigned char *obj = abuf(8192);
	for (int i = 0; i < N; i++) {
		th_key(&keys[i], (uint64_t)i, 2);
		if (i % 3 == 0) {
			th_obj_fill(obj, 8192, (uint64_t)i);
			CHECK_EQ(th_write(a, &keys[i], obj, 8192), 0);
		}
	}
	memset(present, 0xee, sizeof(present));
	CHECK_EQ(th_exists(b, keys, N, present), 0);
	for (int i = 0; i < N; i++)
		CHECK_EQ(present[i], i % 3 == 0);
	CHECK_EQ(th_exists(b, keys, 0, present), 0); /* empty batch still calls back */
	/* b reads what a wrote; a sees b's removal immediately (no stale index). */
	CHECK_EQ(th_read_all(b, &keys[3], obj, 8192), 8192);
	CHECK(th_obj_check(obj, 8192, NULL) == 0);
	CHECK_EQ(th_remove(b, &keys[3]), 0);
	CHECK_EQ(th_exists(a, keys, 4, present), 0);
	CHECK(present[0] == 1 && present[3] == 0);
	CHECK_EQ(th_read_all(a, &keys[3], obj, 8192), -ENOENT);
	/* b writes, a sees */
	th_obj_fill(obj, 8192, 77);
	CHECK_EQ(th_write(b, &keys[1], obj, 8192), 0);
	CHECK_EQ(th_exists(a, &keys[1], 1, present), 0);
	CHECK_EQ(present[0], 1);
	/* scan lists exactly what is there */
	struct cnt {
		int n;
	} c = {0};
	CHECK_EQ(a->ops->scan(a, scan_fn, &c), 0);
	CHECK_EQ(c.n, N / 3 - 1 + 1);
	free(obj);
	th_close(a);
	th_close(b);
}

static int scan_fn(void *arg, const struct kvt_key *k, uint64_t bytes)
{
	(void)k;
	CHECK_EQ(bytes, 8192);
	((int *)arg)[0]++;
	return 0;
}

/* Writers in child processes; each object is self-checking so a mix of two is caught.
 * ready_fd >= 0: write a byte to it once the first object is published. */
static void writer_child(const char *dir, int id, int rounds, int nkeys, const char *fsync,
			 int ready_fd)
{
	struct kvt_tier *t = open_fs(dir, "auto", fsync);
	uint64_t x = (uint64_t)getpid() * 7919 + (uint64_t)id;
	for (int r = 0; r < rounds || rounds < 0; r++) {
		struct kvt_key k;
		th_key(&k, th_rand(&x) % (uint64_t)nkeys, 3);
		uint64_t len = 4096 * (1 + th_rand(&x) % 1024); /* up to 4 MiB */
		unsigned char *obj = abuf(len);
		th_obj_fill(obj, len, th_rand(&x));
		if (th_write(t, &k, obj, len) != 0)
			_exit(2);
		if (ready_fd >= 0) {
			if (write(ready_fd, "w", 1) != 1)
				_exit(3);
			close(ready_fd);
			ready_fd = -1;
		}
		free(obj);
	}
	th_close(t);
	_exit(0);
}

static int check_all_visible(const char *dir, int nkeys, int *seen)
{
	struct kvt_tier *t = open_fs(dir, "auto", "none");
	unsigned char *buf = abuf(4 << 20);
	int bad = 0;
	*seen = 0;
	for (int i = 0; i < nkeys; i++) {
		struct kvt_key k;
		th_key(&k, (uint64_t)i, 3);
		int rc = th_read_all(t, &k, buf, 4 << 20);
		if (rc == -ENOENT)
			continue;
		CHECK(rc > 0);
		(*seen)++;
		if (th_obj_check(buf, (uint64_t)rc, NULL) != 0) {
			fprintf(stderr, "key %d: torn or mixed object of %d bytes\n", i, rc);
			bad++;
		}
	}
	free(buf);
	th_close(t);
	return bad;
}

static void test_two_writers(const char *dir)
{
	enum { NKEYS = 16 };
	pid_t p[2];
	for (int i = 0; i < 2; i++) {
		p[i] = fork();
		CHECK(p[i] >= 0);
		if (p[i] == 0)
			writer_child(dir, i, 150, NKEYS, "none", -1);
	}
	/* read while they write: every object seen is whole */
	int seen = 0, bad = 0;
	for (int round = 0; round < 5; round++)
		bad += check_all_visible(dir, NKEYS, &seen);
	for (int i = 0; i < 2; i++) {
		int st;
		CHECK(waitpid(p[i], &st, 0) == p[i]);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	bad += check_all_visible(dir, NKEYS, &seen);
	CHECK_EQ(bad, 0);
	CHECK_EQ(seen, NKEYS);
}

/* Odd rounds kill the writer 5-155 ms after fork, wherever it is (opening the tier, or in
 * its first write on a slow machine); even rounds wait for its first published object
 * (up to 30 s), then kill it 0-50 ms later, in the middle of a later write. */
static void test_sigkill(const char *dir)
{
	enum { NKEYS = 32 };
	srand((unsigned)getpid());
	int kills = 0;
	for (int round = 0; round < 12; round++) {
		int ready[2];
		CHECK(pipe(ready) == 0);
		pid_t p = fork();
		CHECK(p >= 0);
		if (p == 0) {
			close(ready[0]);
			writer_child(dir, round, -1, NKEYS, round % 2 ? "none" : "data", ready[1]);
		}
		close(ready[1]);
		if (round % 2 == 0) {
			struct pollfd pfd = {.fd = ready[0], .events = POLLIN};
			char c;
			CHECKM(poll(&pfd, 1, 30000) == 1 && read(ready[0], &c, 1) == 1,
			       "writer %d published no object within 30 s", round);
			usleep((useconds_t)(rand() % 50000));
		} else {
			usleep((useconds_t)(5000 + rand() % 150000));
		}
		CHECK(kill(p, SIGKILL) == 0);
		int st;
		CHECK(waitpid(p, &st, 0) == p);
		close(ready[0]); /* only now: a writer that finds it closed would die of SIGPIPE */
		kills += WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
	}
	CHECK_EQ(kills, 12);
	int seen = 0;
	CHECK_EQ(check_all_visible(dir, NKEYS, &seen), 0);
	CHECK(seen > 0);
	/* the killed writers' temporaries are invisible to lookups and scans */
	struct kvt_tier *t = open_fs(dir, "auto", "none");
	int n = 0;
	CHECK_EQ(t->ops->scan(t, count_fn, &n), 0);
	CHECK_EQ(n, seen);
	th_close(t);
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "echo \"  sigkill: $(find %s -name '.*.tmp.*' | wc -l) "
		 "temporaries of killed writers left behind\" >&2", dir);
	CHECK(system(cmd) == 0);
	fprintf(stderr, "  sigkill: 12 writers killed mid-run, %d objects visible, all whole\n",
		seen);
}

static int count_fn(void *arg, const struct kvt_key *k, uint64_t bytes)
{
	(void)k;
	CHECK(bytes >= 4096);
	((int *)arg)[0]++;
	return 0;
}

/* Flush after many writes; close with work in flight calls every callback once. */
struct many {
	atomic_int calls, ok, canceled, other;
};
static void many_cb(void *arg, int64_t r)
{
	struct many *m = arg;
	atomic_fetch_add(&m->calls, 1);
	if (r >= 0)
		atomic_fetch_add(&m->ok, 1);
	else if (r == -ECANCELED)
		atomic_fetch_add(&m->canceled, 1);
	else
		atomic_fetch_add(&m->other, 1);
}

static void test_flush_close(const char *dir)
{
	enum { N = 200 };
	unsigned char *obj = abuf(65536);
	th_obj_fill(obj, 65536, 5);
	struct kvt_tier *t = open_fs(dir, "auto", "none");
	struct many m = {0};
	for (int i = 0; i < N; i++) {
		struct kvt_key k;
		th_key(&k, (uint64_t)i, 4);
		CHECK_EQ(t->ops->write(t, &k, obj, 65536, many_cb, &m), 0);
	}
	struct th_wait w;
	th_wait_init(&w);
	CHECK_EQ(th_wait_done(&w, t->ops->flush(t, th_cb, &w), TH_TIMEOUT), 0);
	th_wait_fini(&w);
	/* a flush completes only after every write submitted before it */
	CHECK_EQ(atomic_load(&m.ok), N);
	/* now close with lookups and reads queued */
	struct many m2 = {0};
	static uint8_t present[N][N];
	static struct kvt_key keys[N];
	static unsigned char bufs[N][4096] __attribute__((aligned(4096)));
	int submitted = 0;
	for (int i = 0; i < N; i++) {
		th_key(&keys[i], (uint64_t)i, 4);
		struct kvt_seg seg = {0, 4096, bufs[i]};
		submitted += t->ops->read(t, &keys[i], &seg, 1, many_cb, &m2) == 0;
		submitted += t->ops->exists(t, keys, N, present[i], many_cb, &m2) == 0;
	}
	th_close(t);
	CHECK_EQ(atomic_load(&m2.calls), submitted);
	CHECK_EQ(atomic_load(&m2.other), 0);
	fprintf(stderr, "  close: %d ops in flight, %d done, %d cancelled\n", submitted,
		atomic_load(&m2.ok), atomic_load(&m2.canceled));
	free(obj);
}

static void test_direct_on_tmpfs(void)
{
	char d[256];
	snprintf(d, sizeof(d), "/dev/shm/kvt-fs-test-%d", getpid());
	test_round_trip(d, "auto"); /* tmpfs refuses O_DIRECT: auto falls back */
	const char *kv[] = {"fs.dir", d, "fs.direct", "on", NULL};
	struct kvt_config *cfg = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, cfg, &t), 0);
	kvt_config_destroy(cfg);
	unsigned char *obj = abuf(8192);
	struct kvt_key k;
	th_key(&k, 1, 9);
	th_obj_fill(obj, 8192, 1);
	/* on: where tmpfs refuses O_DIRECT the write fails, never silently buffered */
	char probe[300];
	snprintf(probe, sizeof(probe), "%s/probe", d);
	int fd = open(probe, O_CREAT | O_WRONLY | O_DIRECT, 0644);
	int want = fd < 0 ? -EINVAL : 0;
	if (fd >= 0)
		close(fd);
	CHECK_EQ(th_write(t, &k, obj, 8192), want);
	free(obj);
	th_close(t);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", d);
	CHECK(system(cmd) == 0);
}

int main(void)
{
	const char *where = getenv("KVT_FS_TEST_DIR");
	snprintf(base, sizeof(base), "%s/kvt-fs-test-%d", where ? where : "/tmp", getpid());
	if (where)
		fprintf(stderr, "testing under %s\n", base);
	char d[300];
	snprintf(d, sizeof(d), "%s/rt-direct", base);
	test_round_trip(d, where ? "auto" : "on");
	fprintf(stderr, "ok round trip (O_DIRECT %s)\n", where ? "if the mount takes it" : "on ext4");
	snprintf(d, sizeof(d), "%s/rt-buffered", base);
	test_round_trip(d, "off");
	fprintf(stderr, "ok round trip (buffered)\n");
	if (!where) {
		test_direct_on_tmpfs();
		fprintf(stderr, "ok tmpfs: auto falls back, on refuses\n");
	}
	snprintf(d, sizeof(d), "%s/shared", base);
	test_exists_shared(d);
	fprintf(stderr, "ok batched exists, two instances on one directory, scan\n");
	snprintf(d, sizeof(d), "%s/writers", base);
	test_two_writers(d);
	fprintf(stderr, "ok two processes writing the same keys\n");
	snprintf(d, sizeof(d), "%s/sigkill", base);
	test_sigkill(d);
	fprintf(stderr, "ok SIGKILLed writers leave no torn object\n");
	snprintf(d, sizeof(d), "%s/flush", base);
	test_flush_close(d);
	fprintf(stderr, "ok flush and close with work in flight\n");
	struct kvt_config *cfg = th_config(NULL);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, cfg, &t), -EINVAL); /* fs.dir unset */
	kvt_config_destroy(cfg);
	/* On ceph-fuse a create that a SIGKILLed writer had sent can still land after the
	 * writer was reaped: rm then finds a directory not empty (seen once in CI). Retry. */
	char cmd[700];
	snprintf(cmd, sizeof(cmd),
		 "for i in 1 2 3 4 5 6 7 8 9 10; do rm -rf %s 2>/dev/null && exit 0; sleep 0.3; "
		 "done; rm -rf %s",
		 base, base);
	CHECK(system(cmd) == 0);
	fprintf(stderr, "PASS\n");
	return 0;
}
