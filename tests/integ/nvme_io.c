/*
 * nvme_io.c - the nvme tier on real files under /tmp (a real disk, so O_DIRECT must be in
 * use): many writes and reads in flight, multi-segment and short reads, misses, exists,
 * remove, flush ordering, spread over two directories, restart (index rebuilt, crash debris
 * cleaned, junk dropped, a small fd cache), close with operations still queued.
 */
#include <sys/resource.h>

#include "nvme_util.h"

#define N_OBJ 300

static uint64_t obj_len(int i)
{
	if (i == 7)
		return 5u << 20; /* more than one SQE */
	return 4096ull * (1 + (uint64_t)(mix64((uint64_t)i) % 48));
}

struct thread_probe {
	pthread_mutex_t m;
	pthread_cond_t c;
	int done;
	pthread_t caller;
	int on_caller_thread;
};

static void probe_cb(void *arg, int64_t res)
{
	struct thread_probe *p = arg;
	pthread_mutex_lock(&p->m);
	p->on_caller_thread = pthread_equal(pthread_self(), p->caller);
	p->done = res == 0 ? 1 : -1;
	pthread_cond_signal(&p->c);
	pthread_mutex_unlock(&p->m);
}

struct scan_ctx {
	int n;
	uint64_t bytes;
};

static int scan_count(void *arg, const struct kvt_key *k, uint64_t bytes)
{
	(void)k;
	struct scan_ctx *c = arg;
	c->n++;
	c->bytes += bytes;
	return 0;
}

static void write_file(const char *path, size_t len)
{
	FILE *f = fopen(path, "w");
	CHECK(f);
	for (size_t i = 0; i < len; i++)
		fputc('x', f);
	fclose(f);
}

int main(void)
{
	char root[] = "/tmp/kvt-nvme-io-XXXXXX";
	CHECK(mkdtemp(root));
	char d0[300], d1[300], dirs[700];
	snprintf(d0, sizeof(d0), "%s/d0", root);
	snprintf(d1, sizeof(d1), "%s/d1", root);
	snprintf(dirs, sizeof(dirs), "%s, %s", d0, d1);

	struct kvt_tier *t;
	CHECK_EQ(open_tier(&t, "nvme.dirs", dirs, "nvme.queue_depth", "32", NULL), 0);
	/* Real disk: both directories must run O_DIRECT. */
	CHECK_EQ(log_count("O_DIRECT I/O"), 2);
	CHECK_EQ(log_count("refuses O_DIRECT"), 0);

	/* ---- many writes in flight */
	struct kvt_key keys[N_OBJ];
	uint8_t *bufs[N_OBJ];
	uint64_t total = 0;
	struct batch b = BATCH_INIT;
	for (int i = 0; i < N_OBJ; i++) {
		keys[i] = make_key(1, (uint64_t)i);
		bufs[i] = abuf(obj_len(i));
		fill_object(bufs[i], obj_len(i), &keys[i]);
		total += obj_len(i);
		batch_add(&b);
		CHECK_EQ(t->ops->write(t, &keys[i], bufs[i], obj_len(i), batch_cb, &b), 0);
	}
	batch_wait(&b, 0);
	CHECK_EQ(b.ok, N_OBJ);
	CHECK_EQ(b.failed, 0);
	struct kvt_tier_stats st = {0};
	t->ops->stats(t, &st);
	CHECK_EQ(st.objects, N_OBJ);
	CHECK_EQ(st.bytes, total);
	CHECK_EQ(st.writes, N_OBJ);
	CHECK_EQ(st.write_bytes, total);
	CHECK_EQ(count_files(d0, ".tmp.", "") + count_files(d1, ".tmp.", ""), 0);

	/* Spread: each directory holds 35%..65% of the objects. */
	int n0 = count_files(d0, "", ".kvt"), n1 = count_files(d1, "", ".kvt");
	printf("spread: %d / %d\n", n0, n1);
	CHECK_EQ(n0 + n1, N_OBJ);
	CHECK(n0 > N_OBJ * 35 / 100 && n1 > N_OBJ * 35 / 100);

	/* Invalid arguments fail synchronously. */
	CHECK_EQ(t->ops->write(t, &keys[0], bufs[0] + 1, 4096, batch_cb, &b), -EINVAL);
	CHECK_EQ(t->ops->write(t, &keys[0], bufs[0], 100, batch_cb, &b), -EINVAL);

	/* ---- many reads in flight, whole objects */
	uint8_t *rbufs[N_OBJ];
	for (int i = 0; i < N_OBJ; i++) {
		rbufs[i] = abuf(obj_len(i));
		memset(rbufs[i], 0, obj_len(i));
		struct kvt_seg sg = {0, obj_len(i), rbufs[i]};
		batch_add(&b);
		CHECK_EQ(t->ops->read(t, &keys[i], &sg, 1, batch_cb, &b), 0);
	}
	batch_wait(&b, 0);
	CHECK_EQ(b.failed, 0);
	for (int i = 0; i < N_OBJ; i++)
		CHECK_EQ(check_object(rbufs[i], obj_len(i), &keys[i]), 0);
	/* Each result is the byte count. */
	CHECK_EQ(t_read1(t, &keys[7], rbufs[7], 0, obj_len(7)), (int)obj_len(7));
	CHECK_EQ(check_object(rbufs[7], obj_len(7), &keys[7]), 0);

	/* ---- multi-segment read: 6 segments of object 7 (5 MiB), in scrambled order */
	{
		uint64_t len = obj_len(7);
		struct kvt_seg sg[6];
		uint8_t *seg_buf[6];
		uint64_t offs[6] = {len - 4096, 0, 2u << 20, 4096 * 3, (1u << 20) + 8192, len / 2};
		uint64_t lens[6] = {4096, 8192, 3u << 20, 4096, 65536, 4096};
		uint64_t want = 0;
		for (int j = 0; j < 6; j++) {
			seg_buf[j] = abuf(lens[j]);
			sg[j] = (struct kvt_seg){offs[j], lens[j], seg_buf[j]};
			want += lens[j];
		}
		CHECK_EQ(t_read(t, &keys[7], sg, 6), (int)want);
		for (int j = 0; j < 6; j++) {
			CHECK(!memcmp(seg_buf[j], bufs[7] + offs[j], lens[j]));
			free(seg_buf[j]);
		}
	}

	/* ---- short read at EOF: object 0, segment straddling the end, one past it */
	{
		uint64_t len = obj_len(0);
		uint8_t *x = abuf(len + 8192), *y = abuf(4096);
		struct kvt_seg sg[2] = {{len - 4096, 8192, x}, {len + 4096, 4096, y}};
		CHECK_EQ(t_read(t, &keys[0], sg, 2), 4096);
		CHECK(!memcmp(x, bufs[0] + len - 4096, 4096));
		free(x);
		free(y);
	}

	/* ---- misses and exists */
	struct kvt_key absent = make_key(999, 1);
	CHECK_EQ(t_read1(t, &absent, rbufs[0], 0, 4096), -ENOENT);
	{
		struct kvt_key q[3] = {keys[3], absent, keys[N_OBJ - 1]};
		uint8_t present[3] = {9, 9, 9};
		CHECK_EQ(t_exists(t, q, 3, present), 0);
		CHECK(present[0] == 1 && present[1] == 0 && present[2] == 1);
	}

	/* ---- rewrite of a stored key: harmless, no new file */
	CHECK_EQ(t_write(t, &keys[5], bufs[5], obj_len(5)), 0);
	t->ops->stats(t, &st);
	CHECK_EQ(st.objects, N_OBJ);

	/* ---- remove every third object */
	int removed = 0;
	for (int i = 0; i < N_OBJ; i += 3) {
		CHECK_EQ(t_remove(t, &keys[i]), 0);
		removed++;
	}
	CHECK_EQ(t_remove(t, &keys[0]), -ENOENT);
	CHECK_EQ(t_read1(t, &keys[3], rbufs[3], 0, 4096), -ENOENT);
	char path[600];
	struct stat sb;
	key_path(d0, &keys[3], path, sizeof(path));
	CHECK(stat(path, &sb) < 0);
	key_path(d1, &keys[3], path, sizeof(path));
	CHECK(stat(path, &sb) < 0);
	t->ops->stats(t, &st);
	CHECK_EQ(st.objects, N_OBJ - removed);
	CHECK_EQ(st.removes, removed);

	/* ---- flush waits for the writes submitted before it */
	{
		struct batch fb = BATCH_INIT;
		struct kvt_key fk[40];
		for (int i = 0; i < 40; i++) {
			fk[i] = make_key(2, (uint64_t)i);
			batch_add(&fb);
			/* reuse buffers of removed objects: content need not match their key */
			CHECK_EQ(t->ops->write(t, &fk[i], bufs[1], obj_len(1), batch_cb, &fb), 0);
		}
		struct waiter w = WAITER_INIT;
		CHECK_EQ(t->ops->flush(t, waiter_cb, &w), 0);
		waiter_wait(&w, 0);
		pthread_mutex_lock(&fb.m);
		CHECK_EQ(fb.outstanding, 0);
		CHECK_EQ(fb.ok, 40);
		pthread_mutex_unlock(&fb.m);
		for (int i = 0; i < 40; i++)
			CHECK_EQ(t_remove(t, &fk[i]), 0);
		CHECK_EQ(t_flush(t), 0); /* nothing pending */
	}

	/* ---- remove an object while a read of it is in flight: the read completes whole
	 * (the open file outlives its name), the object is gone afterwards */
	{
		struct batch rb = BATCH_INIT;
		struct kvt_seg sg = {0, obj_len(7), rbufs[7]};
		memset(rbufs[7], 0, obj_len(7));
		batch_add(&rb);
		CHECK_EQ(t->ops->read(t, &keys[7], &sg, 1, batch_cb, &rb), 0);
		CHECK_EQ(t_remove(t, &keys[7]), 0);
		batch_wait(&rb, 0);
		CHECK_EQ(rb.ok, 1);
		CHECK_EQ(check_object(rbufs[7], obj_len(7), &keys[7]), 0);
		CHECK_EQ(t_read1(t, &keys[7], rbufs[7], 0, 4096), -ENOENT);
		removed++;
	}

	/* ---- callbacks run on the tier's thread, never inside the submitting call */
	{
		struct thread_probe p = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0,
					 pthread_self(), 0};
		uint8_t present = 0;
		CHECK_EQ(t->ops->exists(t, &keys[2], 1, &present, probe_cb, &p), 0);
		pthread_mutex_lock(&p.m);
		while (!p.done)
			pthread_cond_wait(&p.c, &p.m);
		pthread_mutex_unlock(&p.m);
		CHECK_EQ(p.on_caller_thread, 0);
		CHECK_EQ(present, 1);
	}

	/* ---- concurrent writes of one key: one write reaches the disk, all complete */
	{
		struct kvt_tier_stats before, after;
		t->ops->stats(t, &before);
		struct kvt_key dk = make_key(5, 1);
		uint8_t *dbuf = abuf(1 << 20);
		fill_object(dbuf, 1 << 20, &dk);
		struct batch db = BATCH_INIT;
		for (int i = 0; i < 10; i++) {
			batch_add(&db);
			CHECK_EQ(t->ops->write(t, &dk, dbuf, 1 << 20, batch_cb, &db), 0);
		}
		CHECK_EQ(t_flush(t), 0);
		CHECK_EQ(db.outstanding, 0);
		CHECK_EQ(db.ok, 10);
		t->ops->stats(t, &after);
		CHECK_EQ(after.writes, before.writes + 1);
		CHECK_EQ(after.objects, before.objects + 1);
		CHECK_EQ(t_read1(t, &dk, rbufs[0], 0, 4096), 4096);
		CHECK_EQ(t_remove(t, &dk), 0);
		free(dbuf);
	}

	/* ---- drop_corrupt */
	t->ops->drop_corrupt(t, &keys[1]);
	CHECK_EQ(t_flush(t), 0); /* ordered after the drop on the ring thread */
	CHECK_EQ(t_read1(t, &keys[1], rbufs[1], 0, 4096), -ENOENT);
	t->ops->stats(t, &st);
	CHECK_EQ(st.checksum_failures, 1);
	removed++;
	kvt__tier_close(t);
	CHECK_EQ(count_files(d0, ".tmp.", "") + count_files(d1, ".tmp.", ""), 0);
	CHECK_EQ(count_files(d0, "", ".kvt") + count_files(d1, "", ".kvt"), N_OBJ - removed);

	/* ---- crash debris and junk, then restart */
	char junk[700];
	snprintf(junk, sizeof(junk), "%s/ab/.tmp.%064d.123.7", d0, 0);
	write_file(junk, 8192);
	snprintf(junk, sizeof(junk), "%s/.tmp.probe.99", d1);
	write_file(junk, 10);
	struct kvt_key jk1 = make_key(3, 1), jk2 = make_key(3, 2);
	key_path(d1, &jk1, path, sizeof(path));
	write_file(path, 1000); /* not a multiple of 4096 */
	key_path(d0, &jk2, path, sizeof(path));
	write_file(path, 0); /* empty */
	snprintf(junk, sizeof(junk), "%s/ab/README", d0);
	write_file(junk, 5); /* not ours: must survive */

	log_clear();
	/* a tiny fd cache to exercise its trimming under many reads */
	CHECK_EQ(open_tier(&t, "nvme.dirs", dirs, "nvme.open_files", "8", NULL), 0);
	CHECK_EQ(log_count("O_DIRECT I/O"), 2);
	/* Damaged objects are not deleted at open (only `verify --drop` does that): they are
	 * kept, indexed at their size, reported with a warning, and never reported present. */
	CHECK_EQ(log_count("too short or misaligned to be objects"), 2);
	t->ops->stats(t, &st);
	CHECK_EQ(st.objects, N_OBJ - removed + 2);
	struct scan_ctx sc = {0, 0};
	CHECK_EQ(t->ops->scan(t, scan_count, &sc), 0);
	CHECK_EQ(sc.n, N_OBJ - removed + 2);
	CHECK_EQ(sc.bytes, st.bytes);
	CHECK_EQ(count_files(d0, ".tmp.", "") + count_files(d1, ".tmp.", ""), 0);
	CHECK(stat(path, &sb) == 0);
	{
		struct kvt_key jk[2] = {jk1, jk2};
		uint8_t pr[2] = {1, 1};
		struct batch eb = BATCH_INIT;
		batch_add(&eb);
		CHECK_EQ(t->ops->exists(t, jk, 2, pr, batch_cb, &eb), 0);
		batch_wait(&eb, 0);
		CHECK(!pr[0] && !pr[1]);
	}
	key_path(d1, &jk1, path, sizeof(path));
	CHECK(stat(path, &sb) == 0);
	CHECK(stat(junk, &sb) == 0);
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < N_OBJ; i++) {
			memset(rbufs[i], 0, obj_len(i));
			struct kvt_seg sg = {0, obj_len(i), rbufs[i]};
			batch_add(&b);
			CHECK_EQ(t->ops->read(t, &keys[i], &sg, 1, batch_cb, &b), 0);
		}
		batch_wait(&b, 0);
		for (int i = 0; i < N_OBJ; i++) {
			if (i % 3 == 0 || i == 1 || i == 7)
				continue;
			CHECK_EQ(check_object(rbufs[i], obj_len(i), &keys[i]), 0);
		}
	}

	/* ---- out of file descriptors: the tier sheds its idle cached fds and retries */
	{
		struct rlimit old, low;
		CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
		/* Take every free fd number below the highest one in use (the cached fds may sit
		 * anywhere), then allow none above: only shedding the cache can make room. */
		int maxfd = 0, nd = 0, fd;
		static int dummies[8192];
		DIR *pd = opendir("/proc/self/fd");
		CHECK(pd);
		for (struct dirent *de; (de = readdir(pd));)
			if (atoi(de->d_name) > maxfd)
				maxfd = atoi(de->d_name);
		closedir(pd);
		while ((fd = dup(0)) >= 0 && fd < maxfd && nd < 8192)
			dummies[nd++] = fd;
		CHECK(fd >= maxfd);
		close(fd);
		low = old;
		low.rlim_cur = (rlim_t)fd;
		CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
		log_clear();
		int rc = t_read1(t, &keys[2], rbufs[2], 0, obj_len(2));
		CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
		while (nd)
			close(dummies[--nd]);
		CHECK_EQ(rc, (int)obj_len(2));
		CHECK_EQ(check_object(rbufs[2], obj_len(2), &keys[2]), 0);
		CHECK_EQ(log_count("out of file descriptors"), 1);
	}

	/* ---- close with work queued: every callback runs once, ok or cancelled */
	{
		struct batch cb = BATCH_INIT;
		struct kvt_key ck[200];
		for (int i = 0; i < 200; i++) {
			ck[i] = make_key(4, (uint64_t)i);
			batch_add(&cb);
			CHECK_EQ(t->ops->write(t, &ck[i], bufs[9], obj_len(9), batch_cb, &cb), 0);
		}
		kvt__tier_close(t);
		CHECK_EQ(cb.outstanding, 0);
		CHECK_EQ(cb.ok + cb.cancelled, 200);
		CHECK_EQ(cb.failed, 0);
		printf("close: %d written, %d cancelled\n", cb.ok, cb.cancelled);
		CHECK_EQ(open_tier(&t, "nvme.dirs", dirs, NULL), 0);
		int present = 0;
		for (int i = 0; i < 200; i++) {
			int rc = t_read1(t, &ck[i], rbufs[9], 0, obj_len(9));
			CHECK(rc == (int)obj_len(9) || rc == -ENOENT);
			present += rc > 0;
		}
		CHECK_EQ(present, cb.ok);
		kvt__tier_close(t);
	}

	/* ---- the fd cache's cap: the limit less 1/8 of it for the rest of the process, or
	 * less min(512, half of it) where that is more (a cache of half the limit left fio,
	 * which keeps every file open, more descriptors than the tier at the same set; a
	 * spare of 512 at any limit left a cache of 1 at a limit of 256). Where the hard
	 * limit is 1,024 or less, the old half-the-limit rule passes too. */
	{
		struct rlimit old, low;
		CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
		/* 256, 2,048 and 16,384, or the hard limit if lower: caps of 128, 1,536 and
		 * 14,336 */
		const rlim_t lims[] = {256, 2048, 16384};
		for (size_t i = 0; i < sizeof(lims) / sizeof(lims[0]); i++) {
			rlim_t lim = lims[i] < old.rlim_max ? lims[i] : old.rlim_max;
			rlim_t half = lim / 2 < 512 ? lim / 2 : 512;
			rlim_t spare = lim / 8 > half ? lim / 8 : half;
			char want[96];
			snprintf(want, sizeof(want), "capped to %llu by RLIMIT_NOFILE",
				 (unsigned long long)(lim > spare ? lim - spare : 1));
			low = old;
			low.rlim_cur = lim;
			CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
			log_clear();
			int rc = open_tier(&t, "nvme.dirs", dirs, "nvme.open_files", "1000000", NULL);
			CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
			CHECK_EQ(rc, 0);
			CHECK_EQ(log_count(want), 1);
			kvt__tier_close(t);
		}
	}

	for (int i = 0; i < N_OBJ; i++) {
		free(bufs[i]);
		free(rbufs[i]);
	}
	CHECK_EQ(kvt__alloc_bytes(), 0); /* the tier freed everything it allocated */
	rm_rf(root);
	printf("nvme_io: ok\n");
	return 0;
}
