/*
 * nvme_pool_crash.c - crash safety with preallocated slots (nvme.preallocate). A child
 * opens the tier with a pool and is SIGKILLed at a random moment: while the pool is
 * being laid out (fresh stores, writes start at once and partly fall back to new files)
 * or while its writes overwrite slots in place (it waits for the layout first). Half the
 * children of each kind are killed shortly after their progress shows instead (a
 * layout's temp file, the first acknowledged write), so that both kinds of kill happen
 * however slow the machine. Most writes have the slot size, the others make room by
 * dropping slots. The parent reopens and holds the tier to nvme_crash_lib.h's rule -
 * every listed object whole and exact, every acknowledged write present - and checks the
 * pool: no temp file left, every slot whole (the slot size), nothing on disk past
 * nvme.bytes, and the layout resumes to fill the capacity. Cycles nvme.fsync
 * none/data/full.
 */
#include <fcntl.h>
#include <ftw.h>
#include <time.h>

#include "nvme_crash_lib.h"
#include "nvme_pool_util.h"

#define ITERATIONS 16
#define SLOT (64u * 4096) /* one of obj_len()'s sizes */
#define CAP (128ull << 20)
#define WAIT_US 8000000 /* for the child's progress (a layout, an ack) */

/* The next id from n on whose object has the slot size (obj_len: ~1 id in 137). */
static uint64_t slot_id(uint64_t *n, int iter)
{
	for (;; (*n)++)
		if (obj_len((uint64_t)iter << 32 | *n) == SLOT)
			return (uint64_t)iter << 32 | (*n)++;
}

static void child(const char *dir, int iter, int ack_fd)
{
	struct kvt_tier *t;
	if (open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "128MiB", "nvme.preallocate", "262144",
		      "nvme.fsync", fsync_modes[iter % 3], "nvme.queue_depth", "32", NULL))
		_exit(3);
	if (iter % 2) /* the kill lands in writes into slots */
		pool_wait(t);
	enum { SLOTS = 32 };
	uint8_t *bufs[SLOTS];
	struct slot slots[SLOTS];
	struct batch b = BATCH_INIT;
	for (int i = 0; i < SLOTS; i++)
		bufs[i] = abuf(MAX_OBJ);
	uint64_t written = 0, id = 0;
	/* Half the capacity at most: nothing is evicted, so every acknowledged write must be
	 * found afterwards. Then it idles until the kill. */
	for (uint64_t n = 0; written + MAX_OBJ < CAP / 2; n++) {
		if (n % SLOTS == 0)
			batch_wait(&b, 0);
		struct slot *sl = &slots[n % SLOTS];
		/* three writes in four have the slot size */
		sl->id = n % 4 ? slot_id(&id, iter) : (uint64_t)iter << 32 | id++;
		sl->ack_fd = ack_fd;
		sl->b = &b;
		struct kvt_key k = make_key(77, sl->id);
		uint64_t len = obj_len(sl->id);
		fill_object(bufs[n % SLOTS], len, &k);
		batch_add(&b);
		written += len;
		if (t->ops->write(t, &k, bufs[n % SLOTS], len, child_cb, sl) < 0)
			_exit(4);
	}
	batch_wait(&b, 0);
	for (;;)
		pause();
}

/* How many temp files of layouts by process pid dir/pool holds, by name only: unlike
 * pool_list, safe while the child renames slots. */
static int layout_temps(const char *dir, pid_t pid)
{
	char p[4096], mine[64];
	snprintf(mine, sizeof(mine), ".tmp.layout.%d.", (int)pid);
	snprintf(p, sizeof(p), "%s/pool", dir);
	DIR *d = opendir(p);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		n += !strncmp(de->d_name, mine, strlen(mine));
	closedir(d);
	return n;
}

struct layout_of {
	const char *dir;
	pid_t pid;
};

/* Whether the child is laying out a slot (arg: struct layout_of). */
static bool laying_out(void *arg)
{
	const struct layout_of *l = arg;
	return layout_temps(l->dir, l->pid) > 0;
}

int main(void)
{
	char root[] = "/var/tmp/kvt-nvme-pool-crash-XXXXXX";
	CHECK(mkdtemp(root));
	char dir[300];
	snprintf(dir, sizeof(dir), "%s/d", root);
	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	uint8_t *rbuf = abuf(MAX_OBJ);
	struct collect c = {0};
	long total_checked = 0, total_acked = 0, total_large = 0, interrupted_layouts = 0;
	long slot_kills = 0;
	uint64_t t0 = kvt__now_ns();
	static uint64_t acked[1 << 16];
	const size_t cap = sizeof(acked) / sizeof(acked[0]);
	int layout_waits = 0, ack_waits = 0;
	for (int iter = 0; iter < ITERATIONS; iter++) {
		if (iter % 4 == 0)
			rm_rf(dir); /* a fresh store: the child lays out the whole pool */
		int p[2];
		CHECK_EQ(pipe(p), 0);
		fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			close(p[0]);
			child(dir, iter, p[1]);
		}
		close(p[1]);
		/* 0-300 ms, open (and for odd iterations the layout) included. Half the fresh
		 * stores' children and half the odd ones are killed by progress instead of by the
		 * clock, so that kills land mid-layout and in writes into slots however slow the
		 * machine (on 2 loaded cores or under TSan, 300 ms may not reach either): 0-50 ms
		 * after a layout's temp file appeared, or 0-100 ms after the first write into a
		 * slot was acknowledged (kept: it is checked below). */
		useconds_t delay = (useconds_t)(rand() % 300000);
		size_t got = 0;
		if (iter % 8 == 0) {
			struct layout_of l = {dir, pid};
			layout_waits += crash_wait_until(laying_out, &l, WAIT_US);
			delay = (useconds_t)(rand() % 50000);
		} else if (iter % 4 == 3) {
			ack_waits += crash_wait_ack(p[0], acked, cap, &got, NULL, WAIT_US);
			delay = (useconds_t)(rand() % 100000);
		}
		int n_acked = crash_kill_from(pid, p[0], delay, acked, cap, got);
		if (n_acked < 0)
			return 1;
		total_acked += n_acked;
		struct pool_list pl = {.pid_of = pid};
		pool_list(dir, SLOT, &pl); /* every slot whole, even after the kill */
		interrupted_layouts += pl.temps_of > 0;
		slot_kills += iter % 2 && n_acked > 0;

		struct kvt_tier *t;
		CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "128MiB", "nvme.preallocate",
				   "262144", NULL),
			 0);
		CHECK_EQ(count_files(dir, ".tmp.", ""), 0);
		pool_list(dir, SLOT, &pl);
		CHECK_EQ(pl.temps_of, 0); /* the child's; the reopened tier lays out its own */
		uint64_t listed_bytes = 0;
		if (crash_verify(t, iter, &c, rbuf, acked, n_acked, true, &listed_bytes,
				 &total_large))
			return 1;
		total_checked += c.n;
		/* The layout resumes: afterwards the capacity is held, in whole slots. */
		uint64_t pool = pool_wait(t);
		struct kvt_tier_stats st = tier_stats(t);
		CHECK_EQ(st.bytes, listed_bytes);
		CHECK(st.bytes + pool <= CAP && st.bytes + pool + SLOT > CAP);
		pool_list(dir, SLOT, &pl);
		CHECK_EQ(pl.bytes, pool);
		CHECK(disk_bytes(dir) <= CAP);
		for (int i = 0; i < c.n; i++) /* slot-sized files go back to the pool */
			CHECK_EQ(t_remove(t, &c.keys[i]), 0);
		kvt__tier_close(t);
	}
	printf("nvme_pool_crash: %d iterations, %ld objects verified (%ld of more than 4 MiB), "
	       "%ld acknowledged writes checked, %ld kills left an interrupted layout, %ld "
	       "killed writes into slots, %d kills after a layout began, %d after an ack, %.1f s\n",
	       ITERATIONS, total_checked, total_large, total_acked, interrupted_layouts,
	       slot_kills, layout_waits, ack_waits, (double)(kvt__now_ns() - t0) / 1e9);
	CHECK(total_checked > 0 && total_acked > 0 && slot_kills > 0);
	CHECK(interrupted_layouts > 0);
	free(c.keys);
	free(c.bytes);
	free(rbuf);
	rm_rf(root);
	return 0;
}
