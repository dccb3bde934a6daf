/*
 * nvme_log_crash.c - crash safety of the nvme tier's small-object log (nvme.log_max,
 * docs/NVME_LOG.md), in nvme_crash.c's style. A child writes self-checking objects (content
 * derived from the key, CRC32C inside), most small enough for the log and one in 16 of 4-5
 * MiB (a file of its own), many in flight, and is SIGKILLed at a random moment (0-300 ms),
 * mid-batch. The parent reopens the tier: every object the index lists must read back
 * complete and exact (no torn batch, no object of a reused segment's earlier generation
 * served under a key it no longer holds), every write the child saw acknowledged must be
 * there, and objects the parent removed before a clean close must stay removed. Cycles
 * nvme.fsync none/data/full; odd iterations use a capacity of a few segments, so the child
 * reuses segments (the test checks generations went past 1) while it is killed. On odd
 * iterations the child also reads back what earlier children left in the log, then objects
 * between rounds (a hot set of its own, and ones an earlier child wrote), which keeps them
 * live and hot: segment reuse then re-appends them (tier_nvme_log_reinsert.c). Half the
 * segment-reusing children are killed shortly after they report re-appended bytes, so kills
 * land mid-reclaim, while copies are staged or in flight, however slow the machine. Every
 * read the child makes must be exact too, and the children must have re-appended objects
 * (the count each reports in a side file).
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "nvme_crash_lib.h"

#define ITERATIONS 40
#define LOG_MAX "512KiB"
#define SEGMENT "16MiB"

/* Even iterations never evict, so every acknowledged write must be found afterwards; odd
 * ones run with a small capacity, so eviction (rename to a temp name + async unlink) is
 * also interrupted by the kill. */
static const char *child_capacity(int iter)
{
	/* the log's segments fit in nvme.bytes: 48 MiB is a cycle of 3 (no spare), 80 MiB of
	 * 5 (100 % spare), each 16 MiB (24 MiB) of live objects */
	return iter % 2 ? (iter % 4 == 1 ? "48MiB" : "80MiB") : "1GiB";
}

/* No spare on half the segment-reusing children (the tight 3-segment cycle: most of a reused
 * segment is live), 100 % on the others (5 segments, the default's room); the asynchronous
 * reinsertion reads are killed mid-flight in both. */
static const char *child_spare(int iter)
{
	return iter % 4 == 1 ? "0" : "100";
}


/* Reads back this child's hot set - its 16 most recent objects whose number is a multiple of
 * 128, re-read every round (48 writes) so the index's LRU keeps them while the log goes round
 * its cycle (1,280 writes at 80 MiB), and their segment's reuse re-appends them - and a few of
 * the child two before's (mostly evicted). Each read: exact, or not found (evicted). */
static void child_reads(struct kvt_tier *t, int iter, uint64_t n, uint8_t *rbuf)
{
	for (int i = 0; i < 20; i++) {
		uint64_t id;
		if (i < 16) {
			uint64_t last = n ? (n - 1) / 128 : 0;
			if (!n || (uint64_t)i > last)
				continue; /* nothing of this child's yet */
			id = (uint64_t)iter << 32 | (last - (uint64_t)i) * 128;
		} else {
			id = (uint64_t)(iter >= 2 ? iter - 2 : iter) << 32 |
			     mix64(n * 31 + (uint64_t)i) % 4096;
		}
		struct kvt_key k = make_key(77, id);
		int rc = t_read1(t, &k, rbuf, 0, 64 << 10);
		if (rc == -ENOENT)
			continue;
		if (rc != 64 << 10 || check_object(rbuf, 64 << 10, &k))
			_exit(6); /* a torn or stale read during reinsertion */
	}
}

struct hot {
	struct kvt_key k[2048];
	uint64_t len[2048];
	int n;
};

static int hot_fn(void *arg, const struct kvt_key *k, uint64_t bytes)
{
	struct hot *h = arg;
	if (bytes <= (512u << 10) && h->n < 2048) {
		h->k[h->n] = *k;
		h->len[h->n++] = bytes;
	}
	return 0;
}

/* Reads back what earlier children left in the log (exact, or evicted meanwhile): those
 * objects are hot, so the segments this child reuses first have objects to re-append. */
static void child_read_old(struct kvt_tier *t, uint8_t *rbuf)
{
	static struct hot h;
	h.n = 0;
	if (t->ops->scan(t, hot_fn, &h) < 0)
		_exit(8);
	for (int i = 0; i < h.n; i++) {
		int rc = t_read1(t, &h.k[i], rbuf, 0, h.len[i]);
		if (rc != -ENOENT && (rc != (int)h.len[i] || check_object(rbuf, h.len[i], &h.k[i])))
			_exit(6);
	}
}

static void child(const char *dir, int iter, int ack_fd, int stat_fd)
{
	struct kvt_tier *t;
	if (open_tier(&t, "nvme.dirs", dir, "nvme.bytes", child_capacity(iter), "nvme.fsync",
		      fsync_modes[iter % 3], "nvme.queue_depth", "32", "nvme.log_max", LOG_MAX,
		      "nvme.segment_bytes", SEGMENT, "nvme.log_spare_pct", child_spare(iter), NULL))
		_exit(3);
	enum { SLOTS = 48 };
	uint8_t *bufs[SLOTS];
	struct slot slots[SLOTS];
	struct batch b = BATCH_INIT;
	for (int i = 0; i < SLOTS; i++)
		bufs[i] = abuf(MAX_OBJ);
	uint8_t *rbuf = abuf(MAX_OBJ);
	if (iter % 2)
		child_read_old(t, rbuf);
	uint64_t deadline = kvt__now_ns() + 10ull * 1000000000ull; /* never runs away */
	for (uint64_t n = 0; kvt__now_ns() < deadline; n++) {
		/* Buffers are borrowed until the callback: rounds of SLOTS writes, one per slot. */
		if (n % SLOTS == 0) {
			batch_wait(&b, 0);
			if (iter % 2) {
				child_reads(t, iter, n, rbuf);
				struct kvt_tier_stats st = {0};
				t->ops->stats(t, &st);
				if (pwrite(stat_fd, &st.reinsert_bytes, 8, 0) != 8)
					_exit(7);
			}
		}
		struct slot *sl = &slots[n % SLOTS];
		sl->id = (uint64_t)iter << 32 | n;
		sl->ack_fd = ack_fd;
		sl->b = &b;
		struct kvt_key k = make_key(77, sl->id);
		/* odd iterations: 64 KiB objects, all in the log, reusing segments */
		uint64_t len = iter % 2 ? 64 << 10 : obj_len(sl->id);
		fill_object(bufs[n % SLOTS], len, &k);
		batch_add(&b);
		if (t->ops->write(t, &k, bufs[n % SLOTS], len, child_cb, sl) < 0)
			_exit(4);
	}
	_exit(0);
}

/* The highest generation in the log's segment headers (bytes 16-24: docs/NVME_LOG.md). */
static uint64_t max_generation(const char *dir)
{
	uint64_t best = 0;
	for (int n = 0; n < 256; n++) {
		char p[400];
		snprintf(p, sizeof(p), "%s/log/%d.kvl", dir, n);
		int fd = open(p, O_RDONLY);
		if (fd < 0)
			continue;
		uint8_t h[24];
		uint64_t g;
		if (pread(fd, h, sizeof(h), 0) == (ssize_t)sizeof(h) && !memcmp(h, "KVTSEG1", 8)) {
			memcpy(&g, h + 16, 8);
			best = g > best ? g : best;
		}
		close(fd);
	}
	return best;
}

/* Whether the child's side file (its reinsert_bytes, rewritten every round) says it has
 * re-appended something; arg: the file's descriptor. */
static bool reinserted(void *arg)
{
	uint64_t rb = 0;
	return pread(*(int *)arg, &rb, 8, 0) == 8 && rb;
}

int main(void)
{
	char root[] = "/tmp/kvt-nvme-log-crash-XXXXXX";
	CHECK(mkdtemp(root));
	/* Even iterations (no eviction, many segments) and odd ones (a 3-segment cycle that the
	 * children go round) use their own directories: in one, the odd children's cycle would
	 * cover every segment the even ones created, and the segments they reuse would hold
	 * nothing left to keep. */
	char dirs[2][300];
	snprintf(dirs[0], sizeof(dirs[0]), "%s/d", root);
	snprintf(dirs[1], sizeof(dirs[1]), "%s/r", root);
	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	uint8_t *rbuf = abuf(MAX_OBJ);
	struct collect c = {0};
	long total_checked = 0, total_acked = 0, total_large = 0;
	int max_listed = 0;
	uint64_t t0 = kvt__now_ns();
	static uint64_t acked[1 << 16];
	static struct kvt_key removed_by[2][1 << 14];
	int n_removed_by[2] = {0, 0};
	long total_removed = 0;
	uint64_t total_reinserted = 0;
	int kills_after_reinsert = 0;
	char statp[320];
	snprintf(statp, sizeof(statp), "%s/reinserted", root);
	for (int iter = 0; iter < ITERATIONS; iter++) {
		const char *dir = dirs[iter % 2];
		struct kvt_key *removed = removed_by[iter % 2];
		int *np = &n_removed_by[iter % 2], n_removed = *np;
		int p[2];
		CHECK_EQ(pipe(p), 0);
		fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
		int sfd = open(statp, O_RDWR | O_CREAT | O_TRUNC, 0600);
		CHECK(sfd >= 0);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			close(p[0]);
			child(dir, iter, p[1], sfd);
		}
		close(p[1]);
		/* 0-300 ms, open included; odd iterations 200-1500 ms. Half the odd ones are
		 * killed by progress instead of by the clock: 0-100 ms after the child reports
		 * re-appended bytes, so that kills land while reclaim copies are staged or in
		 * flight however slow the machine (CI's TSan run on 2 loaded cores had none of its
		 * 20 clock-timed children report any). */
		useconds_t delay = (useconds_t)(iter % 2 ? 200000 + rand() % 1300000
							 : rand() % 300000);
		if (iter % 2 && (iter / 4) % 2) {
			/* 8 s: less than the child's 10 s of writing, so it still runs */
			kills_after_reinsert += crash_wait_until(reinserted, &sfd, 8000000);
			delay = (useconds_t)(rand() % 100000);
		}
		int n_acked = crash_kill(pid, p[0], delay, acked,
					 sizeof(acked) / sizeof(acked[0]));
		if (n_acked < 0)
			return 1;
		uint64_t rb = 0;
		if (pread(sfd, &rb, 8, 0) == 8)
			total_reinserted += rb;
		close(sfd);
		if (iter % 2 == 0)
			total_acked += n_acked;

		struct kvt_tier *t;
		CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "1GiB", "nvme.log_max",
				   LOG_MAX, "nvme.segment_bytes", SEGMENT, NULL),
			 0);
		CHECK_EQ(count_files(dir, ".tmp.", ""), 0);
		/* Removed before the last clean close: still removed (tombstones). */
		for (int i = 0; i < n_removed; i++) {
			uint8_t present = 1;
			CHECK_EQ(t_exists(t, &removed[i], 1, &present), 0);
			if (present) {
				fprintf(stderr, "iteration %d: removed object %d is back\n", iter, i);
				return 1;
			}
		}
		total_removed += n_removed;
		n_removed = 0;
		*np = 0;
		/* Every object the index lists is whole and correct; an acknowledged write
		 * survives the kill (unless evicted, odd iterations). */
		uint64_t listed_bytes = 0;
		if (crash_verify(t, iter, &c, rbuf, acked, n_acked, iter % 2 == 0, &listed_bytes,
				 &total_large))
			return 1;
		total_checked += c.n;
		if (c.n > max_listed)
			max_listed = c.n;
		/* Keep the read-back of the next iteration short; and every fifth iteration
		 * whatever the children wrote, so that removals are checked however slow the
		 * machine (CI's TSan run on 2 loaded cores, 2026-12-07: no child got past 48
		 * MiB, and the test failed for checking no removal) */
		if (listed_bytes > (48u << 20) || iter % 5 == 4)
			for (int i = 0; i < c.n; i++) {
				/* -ENOENT: evicted meanwhile, when recording the removals
				 * reused a segment */
				int rc = t_remove(t, &c.keys[i]);
				CHECK(rc == 0 || rc == -ENOENT);
				if (!rc && n_removed < (int)(sizeof(removed_by[0]) /
							       sizeof(removed_by[0][0])))
					removed[n_removed++] = c.keys[i];
			}
		*np = n_removed;
		kvt__tier_close(t);
	}
	uint64_t max_gen = max_generation(dirs[1]);
	char logdir[320];
	snprintf(logdir, sizeof(logdir), "%s/log", dirs[1]);
	printf("nvme_log_crash: %d iterations, %ld objects verified (max %d at once, %ld of more "
	       "than 4 MiB), %ld acknowledged writes checked, %ld removals checked, %d log "
	       "segments, highest generation %llu, %llu bytes re-appended by children, %d kills "
	       "during reinsertion, %.1f s\n",
	       ITERATIONS, total_checked, max_listed, total_large, total_acked, total_removed,
	       count_files(logdir, "", ".kvl"), (unsigned long long)max_gen,
	       (unsigned long long)total_reinserted, kills_after_reinsert,
	       (double)(kvt__now_ns() - t0) / 1e9);
	CHECK(max_listed > 0 && total_acked > 0 && total_large > 0 && total_removed > 0);
	CHECK(max_gen >= 2); /* segments were reused while children were killed */
	CHECK(total_reinserted > 0); /* and hot objects were re-appended */
	CHECK(kills_after_reinsert > 0); /* with kills while their copies were in flight */
	free(c.keys);
	free(c.bytes);
	free(rbuf);
	rm_rf(root);
	return 0;
}
