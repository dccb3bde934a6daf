/*
 * fs_safety.c - the fs tier's guarantees to whoever owns the data (issue #10): files 0600
 * and directories 0700 unless configured; a read-only open creates, sweeps and deletes
 * nothing, refuses a path that is not a store, and lists symlinks or directories in place
 * of objects; writers collect dead writers' temporaries; fs.bytes is kept by writers'
 * sweeps, removing a chain's end before its prefix, and stays safe with several writers
 * and a racing remover (no torn object is ever read, a vanished name is only a miss);
 * dropping a corrupt object never removes a good copy another node published before the
 * drop ran, nor one a later read of the same key served (the drop does not say which read
 * it is about); a FIFO planted in an object's place is a miss, not a worker blocked in open
 * for good (and a close that waits for it); a late corruption report spares a copy written
 * since even when it got the old inode number or the read was forgotten; a symbolic link
 * planted in a directory's place, or in v1's, is never followed; a write replaces a link, FIFO or
 * truncated file planted under its name, and fails on a directory, instead of an
 * acknowledged write that can never be read; a file shorter than an object header under a
 * key's name (a power cut with fs.fsync=none) is a miss to read as it is to exists.
 */
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "lib/tierh.h"
#include "lib/snapshot.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

#define OBJ 8192

static char g_root[256];

static void *abuf(size_t n)
{
	void *p = NULL;
	CHECK(posix_memalign(&p, 4096, n ? n : 4096) == 0);
	return p;
}

/* NULL-terminated key, value pairs after dir. */
static int open_fs(struct kvt_tier **t, const char *dir, ...)
{
	const char *kv[32] = {"fs.dir", dir, "fs.threads", "4"};
	int n = 4;
	va_list ap;
	va_start(ap, dir);
	for (const char *k; (k = va_arg(ap, const char *)) && n < 30;) {
		kv[n++] = k;
		kv[n++] = va_arg(ap, const char *);
	}
	va_end(ap);
	kv[n] = NULL;
	struct kvt_config *cfg = th_config(kv);
	int rc = th_open(&kvt__tier_fs_ops, cfg, t);
	kvt_config_destroy(cfg);
	return rc;
}

static int write_chained(struct kvt_tier *t, const struct kvt_key *k, const struct kvt_key *parent,
			 const void *obj, uint64_t len)
{
	struct th_wait w;
	th_wait_init(&w);
	int rc = th_wait_done(&w, t->ops->write_chained(t, k, parent, obj, len, th_cb, &w),
			      TH_TIMEOUT);
	th_wait_fini(&w);
	return rc;
}

static void key_file(const char *dir, const struct kvt_key *k, char *out, size_t n)
{
	char hex[65];
	kvt_key_to_hex(k, hex);
	snprintf(out, n, "%s/v1/%.2s/%.2s/%s", dir, hex, hex + 2, hex);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(p);
	return 0;
}

struct usage {
	int n;
	uint64_t bytes;
};

static int usage_fn(void *arg, const struct kvt_key *k, uint64_t bytes)
{
	(void)k;
	struct usage *u = arg;
	u->n++;
	u->bytes += bytes;
	return 0;
}

static struct usage usage_of(struct kvt_tier *t)
{
	struct usage u = {0, 0};
	CHECK_EQ(t->ops->scan(t, usage_fn, &u), 0);
	return u;
}

static void anom_cb(void *arg, const char *path, const char *why)
{
	(void)path;
	char *text = arg;
	strncat(text, why, 1000 - strlen(text));
	strncat(text, ";", 1000 - strlen(text));
}

/* Sweeps log one line each ("fs: sweep of ...": what it removed, or nothing). */
static _Atomic int sweeps_logged;

static void sweep_log(void *arg, int level, const char *msg)
{
	if (strstr(msg, "fs: sweep of"))
		atomic_fetch_add(&sweeps_logged, 1);
	if (level <= KVT_LOG_WARN)
		th_log(arg, level, msg);
}

/* Wait (up to 10 s) for a sweep after the first `before`. */
static void wait_sweep(int before)
{
	for (int i = 0; i < 1000 && atomic_load(&sweeps_logged) == before; i++)
		usleep(10000);
	CHECKM(atomic_load(&sweeps_logged) > before, "no sweep within 10 s");
}

static void test_modes_read_only_temps(void)
{
	char dir[400], path[700];
	struct kvt_tier *t, *ro;
	struct stat sb;
	unsigned char *obj = abuf(OBJ);
	mode_t old = umask(022);
	snprintf(dir, sizeof(dir), "%s/shared", g_root);

	/* Not a store: read-only open fails and creates nothing. */
	CHECK_EQ(open_fs(&ro, dir, "store.read_only", "true", NULL), -ENOENT);
	CHECK(stat(dir, &sb) < 0);

	CHECK_EQ(open_fs(&t, dir, NULL), 0);
	struct kvt_key k[5];
	for (int i = 0; i < 4; i++) {
		th_key(&k[i], (uint64_t)i, 60);
		th_obj_fill(obj, OBJ, (uint64_t)i);
		CHECK_EQ(th_write(t, &k[i], obj, OBJ), 0);
	}
	key_file(dir, &k[0], path, sizeof(path));
	CHECK_EQ(stat(path, &sb), 0);
	CHECK_EQ(sb.st_mode & 0777, 0600);
	*strrchr(path, '/') = 0;
	CHECK_EQ(stat(path, &sb), 0);
	CHECK_EQ(sb.st_mode & 0777, 0700);
	*strrchr(path, '/') = 0;
	CHECK_EQ(stat(path, &sb), 0);
	CHECK_EQ(sb.st_mode & 0777, 0700);
	snprintf(path, sizeof(path), "%s/v1", dir);
	CHECK_EQ(stat(path, &sb), 0);
	CHECK_EQ(sb.st_mode & 0777, 0700);
	th_close(t);

	/* Debris of dead writers (one stale, one fresh), and non-objects in objects' places. */
	char leaf[700], stale[800], fresh[800];
	key_file(dir, &k[1], leaf, sizeof(leaf));
	*strrchr(leaf, '/') = 0;
	snprintf(stale, sizeof(stale), "%s/.dead.tmp.hostx.1.1", leaf);
	snprintf(fresh, sizeof(fresh), "%s/.live.tmp.hostx.2.1", leaf);
	int fd = open(stale, O_CREAT | O_WRONLY, 0600);
	CHECK(fd >= 0);
	close(fd);
	struct kvt_key ks, kd;
	th_key(&ks, 100, 60);
	th_key(&kd, 101, 60);
	key_file(dir, &ks, path, sizeof(path));
	*strrchr(path, '/') = 0;
	snprintf(leaf, sizeof(leaf), "%s", path);
	char mk[800];
	snprintf(mk, sizeof(mk), "mkdir -p %s", leaf);
	CHECK_EQ(system(mk), 0);
	key_file(dir, &ks, path, sizeof(path));
	CHECK_EQ(symlink("/etc/passwd", path), 0);
	key_file(dir, &kd, path, sizeof(path));
	*strrchr(path, '/') = 0;
	snprintf(mk, sizeof(mk), "mkdir -p %s", path);
	CHECK_EQ(system(mk), 0);
	key_file(dir, &kd, path, sizeof(path));
	CHECK_EQ(mkdir(path, 0700), 0);

	/* Inspection changes nothing, even with a writer open beside it (one whose every write
	 * sweeps: fs.bytes is 16 objects). */
	char cap[32];
	snprintf(cap, sizeof(cap), "%d", 16 * OBJ);
	CHECK_EQ(open_fs(&t, dir, "fs.tmp_max_age_s", "2", "fs.bytes", cap, NULL), 0);
	char *before = snapshot(dir);
	CHECK_EQ(open_fs(&ro, dir, "store.read_only", "true", NULL), 0);
	CHECK_EQ(usage_of(ro).n, 4);
	char text[1024] = "";
	CHECK_EQ(ro->ops->scan_anomalies(ro, anom_cb, text), 0);
	CHECK(strstr(text, "a symbolic link") && strstr(text, "a directory"));
	uint8_t pr = 1;
	CHECK_EQ(th_exists(ro, &ks, 1, &pr), 0);
	CHECK_EQ(pr, 0); /* a symlink is not an object */
	CHECK_EQ(th_read_all(ro, &ks, obj, OBJ), -ENOENT); /* and is never followed */
	CHECK_EQ(th_write(ro, &k[0], obj, OBJ), -EROFS);
	CHECK_EQ(th_remove(ro, &k[0]), -EROFS);
	CHECK_EQ(ro->ops->can_write(ro, OBJ), -EROFS);
	ro->ops->drop_corrupt(ro, &k[0]);
	th_close(ro);
	char *after = snapshot(dir);
	if (strcmp(before, after))
		fprintf(stderr, "before:\n%s\nafter:\n%s\n", before, after);
	CHECK(!strcmp(before, after));
	free(before);
	free(after);

	/* A writer's sweeps remove a temporary they have seen unchanged for fs.tmp_max_age_s
	 * (2 s): its first write's sweep sees both and keeps them; the live writer then dates
	 * its temporary into the past, as it does just before publishing; a sweep 2.5 s after
	 * the first removes the dead writer's only. */
	fd = open(fresh, O_CREAT | O_WRONLY, 0600);
	CHECK(fd >= 0);
	close(fd);
	t->log.fn = sweep_log;
	t->log.level = KVT_LOG_DEBUG;
	th_key(&k[3], 3, 61);
	th_obj_fill(obj, OBJ, 33);
	int swept = atomic_load(&sweeps_logged);
	CHECK_EQ(th_write(t, &k[3], obj, OBJ), 0);
	wait_sweep(swept);
	CHECK_EQ(stat(stale, &sb), 0);
	CHECK_EQ(stat(fresh, &sb), 0);
	fd = open(fresh, O_WRONLY);
	CHECK(fd >= 0);
	struct timespec past[2] = {{1, 0}, {1, 0}};
	CHECK_EQ(futimens(fd, past), 0);
	close(fd);
	usleep(2500 * 1000);
	th_key(&k[4], 4, 61);
	swept = atomic_load(&sweeps_logged);
	CHECK_EQ(th_write(t, &k[4], obj, OBJ), 0);
	wait_sweep(swept);
	th_close(t);
	CHECK(stat(stale, &sb) < 0);
	CHECK_EQ(stat(fresh, &sb), 0);
	CHECK_EQ(lstat(path, &sb), 0); /* the directory in an object's place is left alone */

	/* Configured modes, for nodes sharing a group. */
	umask(002);
	char dir2[500];
	snprintf(dir2, sizeof(dir2), "%s/group", g_root);
	CHECK_EQ(open_fs(&t, dir2, "fs.file_mode", "0660", "fs.dir_mode", "0770", NULL), 0);
	CHECK_EQ(th_write(t, &k[0], obj, OBJ), 0);
	th_close(t);
	key_file(dir2, &k[0], path, sizeof(path));
	CHECK_EQ(stat(path, &sb), 0);
	CHECK_EQ(sb.st_mode & 0777, 0660);
	*strrchr(path, '/') = 0;
	CHECK_EQ(stat(path, &sb), 0);
	CHECK_EQ(sb.st_mode & 0777, 0770);
	umask(old);
	free(obj);
}

static void chain_cb(void *arg, int64_t rc)
{
	struct th_wait *w = arg;
	(void)rc;
	pthread_mutex_lock(&w->m);
	w->result++; /* counts completions */
	pthread_cond_broadcast(&w->c);
	pthread_mutex_unlock(&w->m);
}

/* A session larger than fs.bytes: the sweeps keep a prefix. inflight: every write is
 * submitted at once (as write-behind does), so they complete in any order. */
static void test_capacity_chain(bool inflight)
{
	char dir[400];
	struct kvt_tier *t;
	unsigned char *obj = abuf(OBJ);
	snprintf(dir, sizeof(dir), "%s/cap%d", g_root, inflight);
	char cap[32];
	snprintf(cap, sizeof(cap), "%d", 10 * OBJ);
	CHECK_EQ(open_fs(&t, dir, "fs.bytes", cap, NULL), 0);
	enum { N = 40 };
	struct kvt_key c[N];
	unsigned char *objs = abuf(N * OBJ);
	struct th_wait w;
	th_wait_init(&w);
	w.result = 0;
	for (int i = 0; i < N; i++) {
		th_key(&c[i], (uint64_t)i, 70);
		th_obj_fill(objs + i * OBJ, OBJ, 1000 + (uint64_t)i);
		if (inflight)
			CHECK_EQ(t->ops->write_chained(t, &c[i], i ? &c[i - 1] : NULL, objs + i * OBJ,
						       OBJ, chain_cb, &w),
				 0);
		else
			CHECK_EQ(write_chained(t, &c[i], i ? &c[i - 1] : NULL, objs + i * OBJ, OBJ), 0);
	}
	pthread_mutex_lock(&w.m);
	while (inflight && w.result < N)
		pthread_cond_wait(&w.c, &w.m);
	pthread_mutex_unlock(&w.m);
	free(objs);
	th_close(t); /* waits for the sweeps the writes called for */
	CHECK_EQ(open_fs(&t, dir, "fs.bytes", cap, NULL), 0);
	struct usage u = usage_of(t);
	CHECK(u.bytes <= 10 * OBJ);
	CHECK(u.n >= 5);
	uint8_t present[N];
	CHECK_EQ(th_exists(t, c, N, present), 0);
	int prefix = 0;
	while (prefix < N && present[prefix])
		prefix++;
	/* What is left is a prefix (at least half the bound), plus at most a chunk or two
	 * written after the last trim that stayed within the bound. With oldest-first removal
	 * by write time, the first chunks would be gone and no prefix left. */
	if (prefix < 5 || u.n - prefix > 2) {
		for (int i = 0; i < N; i++)
			fprintf(stderr, "%d", present[i]);
		fprintf(stderr, "\n");
	}
	CHECK(prefix >= 5);
	CHECK(u.n - prefix <= 2);
	struct kvt_tier_stats st;
	memset(&st, 0, sizeof(st));
	t->ops->stats(t, &st);
	CHECK_EQ(st.capacity_bytes, 10 * OBJ);
	th_close(t);
	free(obj);
}

/* Two writers sweeping one directory and a rogue remover deleting at random: every
 * write succeeds, every read is a whole object or a miss, and the directory ends under
 * its bound once a writer has swept last. */
static void writer(const char *dir, const char *cap, int id)
{
	struct kvt_tier *t;
	if (open_fs(&t, dir, "fs.bytes", cap, "fs.fsync", "none", NULL))
		_exit(2);
	unsigned char *obj = abuf(OBJ), *back = abuf(OBJ);
	uint64_t x = (uint64_t)getpid() * 31 + (uint64_t)id;
	for (int r = 0; r < 300; r++) {
		struct kvt_key k;
		uint64_t kid = th_rand(&x) % 200;
		th_key(&k, kid, 80);
		th_obj_fill(obj, OBJ, kid);
		if (th_write(t, &k, obj, OBJ) != 0)
			_exit(3);
		th_key(&k, th_rand(&x) % 200, 80);
		int rc = th_read_all(t, &k, back, OBJ);
		if (rc != -ENOENT && (rc != OBJ || th_obj_check(back, OBJ, NULL)))
			_exit(4);
	}
	struct kvt_tier_stats st;
	memset(&st, 0, sizeof(st));
	t->ops->stats(t, &st);
	th_close(t);
	_exit(st.errors ? 5 : 0);
}

static int rogue_fn(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_F && strlen(p + ftw->base) == 64 && rand() % 4 == 0)
		unlink(p);
	return 0;
}

static void test_racing_sweepers(void)
{
	char dir[400];
	snprintf(dir, sizeof(dir), "%s/race", g_root);
	char cap[32];
	snprintf(cap, sizeof(cap), "%d", 40 * OBJ);
	pid_t w[2];
	for (int i = 0; i < 2; i++)
		if ((w[i] = fork()) == 0)
			writer(dir, cap, i);
	pid_t rogue = fork();
	if (rogue == 0) {
		char v1[500];
		snprintf(v1, sizeof(v1), "%s/v1", dir);
		for (;;) {
			nftw(v1, rogue_fn, 16, FTW_PHYS);
			usleep(2000);
		}
	}
	for (int i = 0; i < 2; i++) {
		int status;
		CHECK_EQ(waitpid(w[i], &status, 0), w[i]);
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			fprintf(stderr, "writer %d: status %d\n", i, status);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	kill(rogue, SIGKILL);
	waitpid(rogue, NULL, 0);
	/* One more writer: its sweep brings the directory under the bound. */
	struct kvt_tier *t;
	CHECK_EQ(open_fs(&t, dir, "fs.bytes", cap, NULL), 0);
	unsigned char *obj = abuf(OBJ);
	struct kvt_key k;
	th_key(&k, 999, 80);
	th_obj_fill(obj, OBJ, 999);
	CHECK_EQ(th_write(t, &k, obj, OBJ), 0);
	th_close(t);
	CHECK_EQ(open_fs(&t, dir, "fs.bytes", cap, "store.read_only", "true", NULL), 0);
	CHECK(usage_of(t).bytes <= 40 * OBJ);
	th_close(t);
	free(obj);
}

/* The engine read a corrupt object and drops it; meanwhile another node published a good
 * copy under the same name (rename over it). The drop must remove only the file it read. */
static void test_drop_spares_rewrite(void)
{
	char dir[500], path[700], other[800];
	snprintf(dir, sizeof(dir), "%s/drop", g_root);
	struct kvt_tier *t;
	struct kvt_key k;
	th_key(&k, 7, 91);
	uint8_t *obj = abuf(OBJ), *back = abuf(OBJ);
	th_obj_fill(obj, OBJ, 5);
	CHECK_EQ(open_fs(&t, dir, NULL), 0);
	CHECK_EQ(th_write(t, &k, obj, OBJ), 0);
	CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ); /* the read the engine found corrupt */
	key_file(dir, &k, path, sizeof(path));
	snprintf(other, sizeof(other), "%s.othernode", path);
	th_obj_fill(obj, OBJ, 6);
	int fd = open(other, O_CREAT | O_WRONLY, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, obj, OBJ), OBJ);
	close(fd);
	CHECK_EQ(rename(other, path), 0); /* the other node's good copy */
	t->ops->drop_corrupt(t, &k);
	th_close(t); /* runs the queued drop */
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0); /* the good copy survived */
	CHECK_EQ(read(fd, back, OBJ), OBJ);
	close(fd);
	CHECK(!memcmp(obj, back, OBJ));

	/* Not rewritten: the object read is the one dropped. */
	CHECK_EQ(open_fs(&t, dir, NULL), 0);
	CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ);
	t->ops->drop_corrupt(t, &k);
	th_close(t);
	struct stat sb;
	CHECK(stat(path, &sb) < 0 && errno == ENOENT);
	/* and nothing is left aside */
	*strrchr(path, '/') = 0;
	char cmd[900];
	snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s')\"", path);
	CHECK_EQ(system(cmd), 0);
	free(obj);
	free(back);
}

/* A late corruption report about a copy that is gone must not drop the copy written since:
 * (a) another node rewrote the name with a new file that got the old one's inode number
 * (ext4 reuses it; the old tier compared inode numbers only), (b) this node removed and
 * wrote it again, (c) reads of other keys came in between (the old tier remembered 256
 * reads by the key's first byte, and an unremembered read dropped the name, whatever was
 * there). */
static void test_stale_drop(void)
{
	char dir[500], path[700];
	snprintf(dir, sizeof(dir), "%s/stale", g_root);
	struct kvt_tier *t;
	uint8_t *obj = abuf(OBJ), *back = abuf(OBJ);
	th_obj_fill(obj, OBJ, 21);
	CHECK_EQ(open_fs(&t, dir, NULL), 0);
	for (int variant = 0; variant < 3; variant++) {
		struct kvt_key k;
		th_key(&k, 8, (uint64_t)(300 + variant));
		CHECK_EQ(th_write(t, &k, obj, OBJ), 0);
		CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ); /* the read the report is about */
		key_file(dir, &k, path, sizeof(path));
		struct stat before, after;
		CHECK_EQ(stat(path, &before), 0);
		if (variant == 0) { /* another node: unlink, then a new file under the name */
			CHECK_EQ(unlink(path), 0);
			int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600);
			CHECK(fd >= 0);
			CHECK_EQ(write(fd, obj, OBJ), OBJ);
			close(fd);
		} else {
			CHECK_EQ(th_remove(t, &k), 0);
			CHECK_EQ(th_write(t, &k, obj, OBJ), 0);
		}
		if (variant == 2) /* 300 reads of other keys */
			for (int i = 0; i < 300; i++) {
				struct kvt_key o;
				th_key(&o, 9, (uint64_t)i);
				CHECK_EQ(th_write(t, &o, obj, OBJ), 0);
				CHECK_EQ(th_read_all(t, &o, back, OBJ), OBJ);
			}
		CHECK_EQ(stat(path, &after), 0);
		t->ops->drop_corrupt(t, &k); /* late: about the copy that is gone */
		CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ); /* queued after the drop: FIFO */
		printf("  stale report %d (inode %s): the copy written since survives\n", variant,
		       before.st_ino == after.st_ino ? "number reused" : "new");
		CHECK(!memcmp(back, obj, OBJ));
	}
	th_close(t);
	free(obj);
	free(back);
}

/* Two reads of one key, and a drop about the first: read #1 served a corrupt copy C1;
 * another node dropped C1 and published a good copy C2; read #2 served C2; then read #1's
 * check fails. The old tier remembered one read per key, read #2's, and the drop removed
 * C2 - a miss for every node. Reads of a key that served different files drop nothing (a
 * corrupt copy left is reported again by the next read of it); reads that served one file
 * still drop it. */
static void test_drop_second_read(void)
{
	char dir[500], path[700], other[800];
	snprintf(dir, sizeof(dir), "%s/second", g_root);
	struct kvt_tier *t;
	struct kvt_key k;
	th_key(&k, 10, 1);
	uint8_t *c1 = abuf(OBJ), *c2 = abuf(OBJ), *back = abuf(OBJ);
	th_obj_fill(c1, OBJ, 31);
	th_obj_fill(c2, OBJ, 32);
	CHECK_EQ(open_fs(&t, dir, NULL), 0);
	CHECK_EQ(th_write(t, &k, c1, OBJ), 0);
	CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ); /* read #1: C1, found corrupt later */
	CHECK(!memcmp(back, c1, OBJ));
	key_file(dir, &k, path, sizeof(path));
	snprintf(other, sizeof(other), "%s.othernode", path);
	CHECK_EQ(unlink(path), 0); /* the other node drops C1 and publishes C2 */
	int fd = open(other, O_CREAT | O_EXCL | O_WRONLY, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, c2, OBJ), OBJ);
	close(fd);
	CHECK_EQ(rename(other, path), 0);
	CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ); /* read #2: C2 */
	CHECK(!memcmp(back, c2, OBJ));
	t->ops->drop_corrupt(t, &k); /* read #1's report */
	th_close(t); /* runs the queued drop */
	struct stat sb;
	bool present = stat(path, &sb) == 0;
	printf("  the good copy C2 after the drop about C1: %s\n",
	       present ? "present" : "GONE (removed for a read of C1)");
	CHECK(present);
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	CHECK_EQ(read(fd, back, OBJ), OBJ);
	close(fd);
	CHECK(!memcmp(back, c2, OBJ));

	/* Two reads of the same file: a drop removes it. */
	CHECK_EQ(open_fs(&t, dir, NULL), 0);
	CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ);
	CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ);
	t->ops->drop_corrupt(t, &k);
	th_close(t);
	CHECK(stat(path, &sb) < 0 && errno == ENOENT);
	free(c1);
	free(c2);
	free(back);
}

/* A symbolic link planted in a fan-out directory's place (v1/<xx> -> elsewhere): the tier
 * used to follow it, reading, creating and unlinking files outside fs.dir. Now every level
 * is opened without following: a miss, a remove that touches nothing, a write that fails. */
static void test_symlinked_leaf(void)
{
	char dir[500], outside[600], v1[600], link[700], p[900], hex[65], hex2[65];
	snprintf(dir, sizeof(dir), "%s/symleaf", g_root);
	snprintf(outside, sizeof(outside), "%s/outside", g_root);
	snprintf(v1, sizeof(v1), "%s/v1", dir);
	CHECK_EQ(mkdir(dir, 0700), 0);
	CHECK_EQ(mkdir(v1, 0700), 0);
	CHECK_EQ(mkdir(outside, 0700), 0);
	struct kvt_key k, k2;
	th_key(&k, 10, 1);
	k2 = k;
	k2.bytes[1] ^= 0x55; /* same first level, another second level */
	kvt_key_to_hex(&k, hex);
	kvt_key_to_hex(&k2, hex2);
	snprintf(link, sizeof(link), "%s/%.2s", v1, hex);
	CHECK_EQ(symlink(outside, link), 0);
	/* a file outside the store, where the link would lead the object's path */
	snprintf(p, sizeof(p), "%s/%.2s", outside, hex + 2);
	CHECK_EQ(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/%.2s/%s", outside, hex + 2, hex);
	uint8_t *obj = abuf(OBJ), *back = abuf(OBJ);
	th_obj_fill(obj, OBJ, 42);
	int fd = open(p, O_CREAT | O_WRONLY, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, obj, OBJ), OBJ);
	close(fd);
	struct kvt_tier *t;
	CHECK_EQ(open_fs(&t, dir, NULL), 0);
	uint8_t present = 1;
	CHECK_EQ(th_exists(t, &k, 1, &present), 0);
	CHECK_EQ(present, 0);
	CHECK_EQ(th_read_all(t, &k, back, OBJ), -ENOENT);
	CHECK_EQ(th_remove(t, &k), -ENOENT);
	CHECK_EQ(access(p, F_OK), 0); /* still there */
	CHECK(th_write(t, &k2, obj, OBJ) < 0);
	snprintf(p, sizeof(p), "%s/%.2s/%s", outside, hex2 + 2, hex2);
	CHECK(access(p, F_OK) < 0); /* nothing created outside */
	th_close(t);
	/* v1 itself a link (a node joining, or restarting, after someone planted it): the
	 * open fails with one line; it used to open, and objects went under the link's
	 * target (the sweeps unlinking there) */
	char d2[600], out2[600], v1b[700];
	snprintf(d2, sizeof(d2), "%s/symv1", g_root);
	snprintf(out2, sizeof(out2), "%s/outside-v1", g_root);
	snprintf(v1b, sizeof(v1b), "%s/v1", d2);
	CHECK_EQ(mkdir(d2, 0700), 0);
	CHECK_EQ(mkdir(out2, 0700), 0);
	CHECK_EQ(symlink(out2, v1b), 0);
	int rc = open_fs(&t, d2, NULL);
	printf("fs_safety: v1 a symbolic link: open %d\n", rc);
	CHECK(rc == -ENOTDIR || rc == -ELOOP); /* O_NOFOLLOW | O_DIRECTORY: ENOTDIR */
	rc = open_fs(&t, d2, "store.read_only", "true", NULL);
	CHECK(rc == -ENOTDIR || rc == -ELOOP);
	free(obj);
	free(back);
}

/* Something planted under an object's name: a write used to be acknowledged ("another writer
 * published first") while every read missed, for good. Now what cannot be the object is
 * replaced (a symbolic link, a FIFO, a truncated file), and a directory fails the write. */
static void test_planted_name(void)
{
	char dir[500], path[700];
	snprintf(dir, sizeof(dir), "%s/planted", g_root);
	const char *kinds[] = {"a symbolic link", "a FIFO", "a truncated file", "a directory"};
	uint8_t *obj = abuf(OBJ), *back = abuf(OBJ);
	struct kvt_tier *t;
	CHECK_EQ(open_fs(&t, dir, NULL), 0);
	for (int i = 0; i < 4; i++) {
		struct kvt_key k;
		th_key(&k, 11, (uint64_t)i);
		th_obj_fill(obj, OBJ, (uint64_t)(50 + i));
		CHECK_EQ(th_write(t, &k, obj, OBJ), 0); /* makes the leaf */
		key_file(dir, &k, path, sizeof(path));
		CHECK_EQ(unlink(path), 0);
		if (i == 0)
			CHECK_EQ(symlink("/nonexistent", path), 0);
		if (i == 1)
			CHECK_EQ(mkfifo(path, 0600), 0);
		if (i == 2) {
			int fd = open(path, O_CREAT | O_WRONLY, 0600);
			CHECK(fd >= 0);
			CHECK_EQ(write(fd, obj, 64), 64);
			close(fd);
		}
		if (i == 3)
			CHECK_EQ(mkdir(path, 0700), 0);
		int w = th_write(t, &k, obj, OBJ);
		memset(back, 0, OBJ);
		int64_t r = th_read_all(t, &k, back, OBJ);
		printf("  %s under the name: write %d, read %lld\n", kinds[i], w, (long long)r);
		if (i < 3) {
			CHECK_EQ(w, 0);
			CHECK_EQ(r, OBJ);
			CHECK(!memcmp(back, obj, OBJ));
		} else {
			CHECK(w < 0); /* not acknowledged */
		}
	}
	th_close(t);
	free(obj);
	free(back);
}

/* A file under a key's name too short to hold an object header: what a power cut can leave
 * with fs.fsync=none. exists() called it absent, read() a hit of its few bytes (or of none,
 * for an empty file). Both miss now, and a put of the key replaces it. */
static void test_short_file(void)
{
	char dir[500], path[700];
	snprintf(dir, sizeof(dir), "%s/short", g_root);
	uint8_t *obj = abuf(OBJ), *back = abuf(OBJ);
	struct kvt_tier *t;
	CHECK_EQ(open_fs(&t, dir, NULL), 0);
	const int sizes[] = {0, 100, KVT_HEADER_BYTES - 1};
	for (int i = 0; i < 3; i++) {
		struct kvt_key k;
		th_key(&k, 12, (uint64_t)i);
		th_obj_fill(obj, OBJ, (uint64_t)(60 + i));
		CHECK_EQ(th_write(t, &k, obj, OBJ), 0); /* makes the leaf */
		key_file(dir, &k, path, sizeof(path));
		CHECK_EQ(truncate(path, sizes[i]), 0);
		uint8_t present = 1;
		CHECK_EQ(th_exists(t, &k, 1, &present), 0);
		int64_t r = th_read_all(t, &k, back, OBJ);
		printf("  a %d-byte file under the name: exists %d, read %lld\n", sizes[i], present,
		       (long long)r);
		CHECK_EQ(present, 0);
		CHECK_EQ(r, -ENOENT);
		CHECK_EQ(th_write(t, &k, obj, OBJ), 0);
		memset(back, 0, OBJ);
		CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ);
		CHECK(!memcmp(back, obj, OBJ));
	}
	th_close(t);
	free(obj);
	free(back);
}

static void test_fifo(void)
{
	char dir[500], path[700];
	snprintf(dir, sizeof(dir), "%s/fifo", g_root);
	struct kvt_tier *t;
	struct kvt_key k;
	th_key(&k, 7, 92);
	uint8_t *obj = abuf(OBJ);
	th_obj_fill(obj, OBJ, 7);
	CHECK_EQ(open_fs(&t, dir, NULL), 0);
	CHECK_EQ(th_write(t, &k, obj, OBJ), 0);
	key_file(dir, &k, path, sizeof(path));
	CHECK_EQ(unlink(path), 0);
	CHECK_EQ(mkfifo(path, 0600), 0); /* anyone who can write the shared directory */
	alarm(30); /* the old tier blocked here for good */
	for (int i = 0; i < 8; i++) /* more reads than fs.threads workers */
		CHECK_EQ(th_read_all(t, &k, obj, OBJ), -ENOENT);
	th_close(t);
	alarm(0);
	free(obj);
}

int main(void)
{
	const char *base = getenv("KVT_TEST_DIR") ? getenv("KVT_TEST_DIR") : "/tmp";
	snprintf(g_root, sizeof(g_root), "%s/kvt-fs-safety-XXXXXX", base);
	CHECK(mkdtemp(g_root));
	test_modes_read_only_temps();
	printf("ok modes, read-only inspection, temporaries\n");
	test_capacity_chain(false);
	test_capacity_chain(true);
	printf("ok capacity keeps a prefix (writes in order and all in flight)\n");
	test_racing_sweepers();
	printf("ok racing sweepers and remover\n");
	test_drop_spares_rewrite();
	printf("ok a drop spares a copy published since the corrupt read\n");
	test_fifo();
	printf("ok a FIFO in an object's place is a miss\n");
	test_stale_drop();
	printf("ok a stale corruption report spares the copy written since\n");
	test_drop_second_read();
	printf("ok a drop about one of two reads that served different copies drops neither\n");
	test_symlinked_leaf();
	printf("ok a symbolic link in a directory's place is never followed\n");
	test_planted_name();
	printf("ok a write replaces what cannot be the object under its name\n");
	test_short_file();
	printf("ok a file shorter than a header is a miss, and a write replaces it\n");
	nftw(g_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}
