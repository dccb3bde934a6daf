/*
 * fs_dead_writer.c - a temporary whose writer died on this node is removed by the next
 * sweep, not an hour later. Until 2026-12-07 a sweep removed a temporary only once it had
 * watched it unchanged for fs.tmp_max_age_s (3600 s), so an engine that crashed and
 * restarted every few minutes never removed what its predecessors left (a queue of objects
 * per crash). Now each writing instance holds a locked file in fs.live_dir (src/fs_live.h)
 * and a sweep that can take a writer's lock removes that writer's temporaries at once.
 * Real writers: child processes writing 4 MiB objects in a loop, caught (SIGSTOP) while a
 * temporary of theirs exists.
 *  1. a stopped (live) writer's temporary is kept, and so is one of another node's writer
 *     (no liveness file here);
 *  2. once that writer is killed, the next sweep removes its temporary and its liveness
 *     file, and keeps the other node's;
 *  3. a liveness file not owned by the temporary's owner proves nothing (root only): kept
 *     until the file is the owner's again;
 *     nor does one linked twice (anyone may link where fs.protected_hardlinks is off);
 *  4. a second instance in the sweeping process is alive to it (flock, not fcntl, locks);
 *  5. the liveness file of a writer that died with no temporary on the directory goes once
 *     older than fs.tmp_max_age_s (at an instance's first sweep); a recent one stays;
 *  6. a writer that closes cleanly leaves no liveness file, nor does the sweeping instance.
 */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/rm_rf.h"
#include "lib/tierh.h"
#include "lib/fs_sweep.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

#define OBJ 65536
#define CHILD_OBJ (4u << 20)

static char g_dir[600], g_live[600];
static _Atomic int dead_removed;

static void count_log(void *arg, int level, const char *msg)
{
	(void)arg;
	unsigned long long n = 0;
	if (strstr(msg, "fs: sweep of") && strstr(msg, "left by dead writers") &&
	    sscanf(strrchr(msg, '(') + 1, "%llu", &n) == 1)
		atomic_fetch_add(&dead_removed, (int)n);
	fs_sweep_log_line(msg);
	if (level <= KVT_LOG_WARN || getenv("KVT_TEST_VERBOSE"))
		fprintf(stderr, "  [tier %d] %s\n", level, msg);
}

static struct kvt_tier *open_fs(const char *bytes, const char *fsync)
{
	const char *kv[] = {"fs.dir", g_dir, "fs.live_dir", g_live, "fs.direct", "off",
			    "fs.fsync", fsync, "fs.threads", "2", "fs.bytes", bytes, NULL};
	struct kvt_config *c = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, c, &t), 0);
	kvt_config_destroy(c);
	return t;
}

/* Writers still running when a check fails are killed on the way out (they would hold
 * ctest's output pipe open). */
static pid_t g_parent, g_writers[8];
static unsigned g_nwriters;

static void kill_writers(void)
{
	if (getpid() != g_parent)
		return;
	for (unsigned i = 0; i < g_nwriters; i++)
		if (g_writers[i] > 0)
			kill(g_writers[i], SIGKILL);
}

/* A writer process: once started (start_writer), puts 4 MiB objects (fsync data) until it
 * is killed, or closes cleanly after one put if once. All are forked before the sweeping
 * instance starts its threads: a child of a process with threads that starts threads
 * itself is refused by TSan, and fragile anywhere. */
struct writer {
	pid_t pid;
	int go; /* a byte written here starts it */
};

static struct writer writer(int salt, bool once)
{
	int p[2];
	CHECK_EQ(pipe(p), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid) {
		close(p[0]);
		if (g_nwriters < 8)
			g_writers[g_nwriters++] = pid;
		return (struct writer){pid, p[1]};
	}
	close(p[1]);
	char go;
	if (read(p[0], &go, 1) != 1)
		_exit(0); /* the parent ended without starting it */
	struct kvt_tier *t = open_fs("0", "data");
	uint8_t *obj = malloc(CHILD_OBJ);
	if (!obj)
		_exit(2);
	th_obj_fill(obj, CHILD_OBJ, (uint64_t)salt);
	for (uint64_t i = 0;; i++) {
		struct kvt_key k;
		th_key(&k, i, (uint64_t)salt);
		if (th_write(t, &k, obj, CHILD_OBJ) != 0)
			_exit(3);
		if (once) {
			th_close(t);
			_exit(0);
		}
	}
}

static char g_found[1200];
static const char *g_skip; /* a temporary not to report (another node's) */

static int find_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	if (flag == FTW_F && strstr(p + ftw->base, ".tmp.") && (!g_skip || strcmp(p, g_skip))) {
		snprintf(g_found, sizeof(g_found), "%s", p);
		return 1;
	}
	return 0;
}

static bool present(const char *p)
{
	struct stat st;
	return lstat(p, &st) == 0;
}

/* Stops writer pid while a temporary of its own exists; that temporary's path in out. */
static void start_writer(struct writer w)
{
	CHECK_EQ(write(w.go, "g", 1), 1);
	close(w.go);
}

/* Does a stopped writer hold the directory's sweep lock (stopped mid-sweep)? The sweeping
 * instance would then skip every sweep. */
static bool sweep_lock_held(void)
{
	char p[700];
	snprintf(p, sizeof(p), "%s/v1/.sweep.lock", g_dir);
	int f = open(p, O_RDONLY);
	if (f < 0)
		return false;
	bool held = flock(f, LOCK_EX | LOCK_NB) < 0;
	close(f); /* (releases it if taken) */
	return held;
}

/* Stops writer pid while a temporary of its own exists (and it holds no sweep lock); that
 * temporary's path in out. */
static void catch_writer(pid_t pid, char *out, size_t n)
{
	uint64_t end = th_now_ms() + 60000;
	while (th_now_ms() < end) {
		g_found[0] = 0;
		if (nftw(g_dir, find_one, 16, FTW_PHYS) == 1) {
			kill(pid, SIGSTOP);
			int st;
			CHECK_EQ(waitpid(pid, &st, WUNTRACED), pid); /* stopped now, not later */
			CHECK(WIFSTOPPED(st));
			if (present(g_found) && !sweep_lock_held()) {
				snprintf(out, n, "%s", g_found);
				return;
			}
			kill(pid, SIGCONT); /* published meanwhile, or sweeping: the next one */
		}
		usleep(500);
	}
	CHECKM(false, "writer %d: no temporary of its seen in 60 s", (int)pid);
}

static int live_files(void)
{
	DIR *d = opendir(g_live);
	CHECK(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += !strncmp(e->d_name, "kvtier-fs-writer.", 17);
	closedir(d);
	return n;
}

/* The names of the liveness files now (at most max). */
static int list_live(char (*out)[80], int max)
{
	DIR *d = opendir(g_live);
	CHECK(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d)) && n < max;)
		if (!strncmp(e->d_name, "kvtier-fs-writer.", 17))
			snprintf(out[n++], 80, "%.79s", e->d_name);
	closedir(d);
	return n;
}

static void kill_writer(pid_t pid)
{
	kill(pid, SIGKILL);
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	for (unsigned i = 0; i < g_nwriters; i++)
		if (g_writers[i] == pid)
			g_writers[i] = 0;
}

/* A write of the sweeping instance, and the sweep it sets off (fs.bytes is 16 objects). */
static void write_and_sweep(struct kvt_tier *t, uint64_t i, const uint8_t *obj)
{
	fs_write_and_sweep(t, i, 77, obj, OBJ);
}

int main(void)
{
	g_parent = getpid();
	atexit(kill_writers);
	const char *base = getenv("KVT_TEST_DIR") ? getenv("KVT_TEST_DIR") : "/var/tmp";
	char root[300];
	snprintf(root, sizeof(root), "%s/kvt-fs-dead-XXXXXX", base);
	CHECK(mkdtemp(root));
	snprintf(g_dir, sizeof(g_dir), "%s/store", root);
	/* on tmpfs, as fs.live_dir's default: the test directory may be on a file system the
	 * tier does not take for node-local, and would then not use (integ.fs_live_local) */
	snprintf(g_live, sizeof(g_live), "/dev/shm/kvt-fs-dead-live-XXXXXX");
	CHECK(mkdtemp(g_live));

	struct writer wa = writer(1, false), wb = writer(2, false), wc = writer(3, true);

	/* 1. A live (stopped) writer's temporary, and another node's. */
	pid_t a = wa.pid;
	char ta[1200], other[1300];
	start_writer(wa);
	catch_writer(a, ta, sizeof(ta));
	snprintf(other, sizeof(other), "%s", ta);
	char *dot = strstr(other, ".tmp.");
	CHECK(dot);
	snprintf(dot, sizeof(other) - (size_t)(dot - other), ".tmp.othernode.7.%016llx.0",
		 0x5eed5eed5eed5eedull);
	int fd = open(other, O_CREAT | O_EXCL | O_WRONLY, 0600);
	CHECK(fd >= 0);
	close(fd);
	g_skip = other;

	char bytes[32];
	snprintf(bytes, sizeof(bytes), "%d", 16 * OBJ);
	struct kvt_tier *t = open_fs(bytes, "none");
	t->log.fn = count_log;
	t->log.level = KVT_LOG_DEBUG;
	int live_before = live_files(); /* the writer's and this instance's */
	uint8_t *obj = malloc(OBJ);
	CHECK(obj);
	th_obj_fill(obj, OBJ, 5);
	write_and_sweep(t, 1, obj);
	printf("  1. a sweep: the stopped writer's temporary %s, another node's %s\n",
	       present(ta) ? "kept" : "REMOVED", present(other) ? "kept" : "REMOVED");
	CHECKM(present(ta), "a live writer's temporary was removed");
	CHECK(present(other));

	/* 2. The writer dies: its temporary goes at the next sweep. */
	kill_writer(a);
	write_and_sweep(t, 2, obj);
	printf("  2. writer killed, next sweep: its temporary %s (%d counted), its liveness file "
	       "%s, another node's temporary %s\n", present(ta) ? "KEPT" : "removed",
	       atomic_load(&dead_removed), live_files() == 1 ? "removed" : "KEPT",
	       present(other) ? "kept" : "REMOVED");
	CHECKM(!present(ta), "a temporary whose writer died on this node was kept (it waits for "
			     "fs.tmp_max_age_s, an hour)");
	CHECK_EQ(live_before, 2);
	CHECK_EQ(atomic_load(&dead_removed), 1);
	CHECK_EQ(live_files(), 1);
	CHECK(present(other));

	/* 3. A liveness file someone else owns proves nothing. */
	if (geteuid() == 0) {
		pid_t b = wb.pid;
		char tb[1200];
		start_writer(wb);
		catch_writer(b, tb, sizeof(tb));
		kill_writer(b);
		char lf[900];
		DIR *d = opendir(g_live);
		CHECK(d);
		lf[0] = 0;
		for (struct dirent *e; (e = readdir(d));)
			if (!strncmp(e->d_name, "kvtier-fs-writer.", 17)) {
				char p[900];
				snprintf(p, sizeof(p), "%s/%s", g_live, e->d_name);
				struct stat st;
				CHECK_EQ(stat(p, &st), 0);
				/* not this instance's (locked by t): the dead writer's */
				int f = open(p, O_RDONLY);
				CHECK(f >= 0);
				if (flock(f, LOCK_EX | LOCK_NB) == 0)
					snprintf(lf, sizeof(lf), "%s", p);
				close(f);
			}
		closedir(d);
		CHECK(lf[0]);
		CHECK_EQ(chown(lf, 65534, 65534), 0);
		write_and_sweep(t, 3, obj);
		printf("  3. dead writer, its liveness file owned by another user: temporary %s\n",
		       present(tb) ? "kept" : "REMOVED");
		CHECKM(present(tb), "a liveness file of another owner was taken as proof");
		CHECK_EQ(chown(lf, 0, 0), 0);
		char lf2[1000];
		snprintf(lf2, sizeof(lf2), "%s/a-second-link", g_live);
		CHECK_EQ(link(lf, lf2), 0);
		write_and_sweep(t, 4, obj);
		printf("     the writer's again but linked twice: temporary %s\n",
		       present(tb) ? "kept" : "REMOVED");
		CHECKM(present(tb), "a liveness file with a second link was taken as proof");
		CHECK_EQ(unlink(lf2), 0);
		write_and_sweep(t, 5, obj);
		printf("     linked once: temporary %s\n", present(tb) ? "KEPT" : "removed");
		CHECK(!present(tb));
	} else {
		kill_writer(wb.pid);
		printf("  3. skipped: chown needs root\n");
	}

	/* 4. Another instance of this very process is alive to the sweeps: a lock of this
	 * process's own (fcntl's would be) must not read as its writer's death. Its temporary
	 * is planted under its nonce and this host. */
	char before[64][80];
	int nb = list_live(before, 64);
	struct kvt_tier *t2 = open_fs("0", "none");
	char after[64][80];
	int na = list_live(after, 64);
	CHECK_EQ(na, nb + 1);
	const char *mine = NULL;
	for (int i = 0; i < na && !mine; i++) {
		bool old = false;
		for (int j = 0; j < nb; j++)
			old |= !strcmp(after[i], before[j]);
		if (!old)
			mine = after[i];
	}
	CHECK(mine);
	char planted[1300], host[64];
	fs_host_part(host, sizeof(host));
	snprintf(planted, sizeof(planted), "%s", other);
	dot = strstr(planted, ".tmp.");
	snprintf(dot, sizeof(planted) - (size_t)(dot - planted), ".tmp.%s.%ld.%s.0", host,
		 (long)getpid(), mine + 17);
	fd = open(planted, O_CREAT | O_EXCL | O_WRONLY, 0600);
	CHECK(fd >= 0);
	close(fd);
	write_and_sweep(t, 6, obj);
	printf("  4. a temporary of a second instance of this process: %s\n",
	       present(planted) ? "kept" : "REMOVED");
	CHECKM(present(planted), "the temporary of a live instance of the sweeping process "
				 "was removed");
	th_close(t2);
	unlink(planted);

	/* 5. A writer that died with no temporary left: its file goes once older than
	 * fs.tmp_max_age_s (an hour), a recent one stays. */
	char aged[900], recent[900];
	snprintf(aged, sizeof(aged), "%s/kvtier-fs-writer.%016llx", g_live, 0xa9edull);
	snprintf(recent, sizeof(recent), "%s/kvtier-fs-writer.%016llx", g_live, 0x7ecee7ull);
	fd = open(aged, O_CREAT | O_EXCL | O_WRONLY, 0600);
	CHECK(fd >= 0);
	close(fd);
	fd = open(recent, O_CREAT | O_EXCL | O_WRONLY, 0600);
	CHECK(fd >= 0);
	close(fd);
	struct timespec two_h[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
	CHECK_EQ(utimensat(AT_FDCWD, aged, two_h, 0), 0);
	/* pruned by an instance's first sweep, then at most every 10 minutes: a new one */
	struct kvt_tier *t3 = open_fs(bytes, "none");
	t3->log.fn = count_log;
	t3->log.level = KVT_LOG_DEBUG;
	write_and_sweep(t3, 7, obj);
	th_close(t3);
	printf("  5. liveness files of dead writers with no temporary: 2 h old %s, new %s\n",
	       present(aged) ? "KEPT" : "removed", present(recent) ? "kept" : "REMOVED");
	CHECK(!present(aged));
	CHECK(present(recent));
	unlink(recent);

	/* 6. Clean closes leave no liveness file. */
	pid_t c = wc.pid;
	start_writer(wc);
	int st;
	CHECK_EQ(waitpid(c, &st, 0), c);
	g_writers[g_nwriters - 1] = 0;
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK_EQ(live_files(), 1);
	th_close(t);
	printf("  6. a writer closed cleanly, then the sweeping instance: %d liveness files left\n",
	       live_files());
	CHECK_EQ(live_files(), 0);
	free(obj);
	rm_rf(root);
	rm_rf(g_live);
	printf("fs_dead_writer: ok\n");
	return 0;
}
