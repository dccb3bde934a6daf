/*
 * fs_drop_remove.c - a remove that comes while the fs tier drops a corrupt object must stay
 * done. The drop looks at the name, then moves it aside and checks what it moved (POSIX has
 * no "unlink if it is still this file"); when that was not the corrupt file but a copy
 * another node published between the look and the move, the old tier linked it back - and
 * a remove of the key that came while the name was aside found nothing, answered -ENOENT
 * (for kvt_remove: done), and the object was back after it (kvtier.h: a removed key does
 * not reappear).
 * On the test FUSE file system (tests/fuse/slowfs), holding only lookups of temporary names
 * from the start (--stall-only getattr --stall-path .tmp. --stalled), the race is walked
 * one step at a time:
 *   1. an object another node wrote (in the backing directory: that node's own mount) is
 *      read (the tier remembers that file) and reported corrupt; the drop looks (it is
 *      that file) and its rename to the aside name is held at the lookup of that name;
 *   2. meanwhile the other node removes the corrupt file and publishes a good copy;
 *   3. the rename is let through: the good copy is moved aside, and the drop is held at its
 *      next call on the aside name;
 *   4. a remove of the key through the tier answers (0 or -ENOENT: removed);
 *   5. everything is let go and the tier closed: the key must be absent, nothing left aside.
 * The old tier linked the copy back at 5. Exit 0 pass, 1 fail, 77 when slowfs or /dev/fuse
 * is missing (a failure under CI=true).
 */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "config.h"
#include "lib/slowfs.h"
#include "lib/tierh.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

#define OBJ 8192

static struct slowfs fs;

static struct kvt_tier *open_tier(const char *dir)
{
	const char *kv[] = {"fs.dir", dir, "fs.threads", "4", "fs.direct", "off", NULL};
	struct kvt_config *cfg = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, cfg, &t), 0);
	kvt_config_destroy(cfg);
	return t;
}

/* Is a thread of this process inside rename (a tier worker held in the kernel by slowfs)? */
static bool thread_in_rename(void)
{
	DIR *d = opendir("/proc/self/task");
	CHECK(d);
	bool found = false;
	for (struct dirent *e; !found && (e = readdir(d));) {
		char p[300];
		long nr = -1;
		snprintf(p, sizeof(p), "/proc/self/task/%s/syscall", e->d_name);
		FILE *f = e->d_name[0] != '.' ? fopen(p, "r") : NULL;
		if (f && fscanf(f, "%ld", &nr) == 1) {
#ifdef SYS_renameat
			found = nr == SYS_renameat;
#endif
#ifdef SYS_renameat2
			found = found || nr == SYS_renameat2;
#endif
		}
		if (f)
			fclose(f);
	}
	closedir(d);
	return found;
}

/* Names in the leaf (backing directory) that start with prefix. */
static int names_with(const char *leaf, const char *prefix)
{
	DIR *d = opendir(leaf);
	CHECK(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += !strncmp(e->d_name, prefix, strlen(prefix));
	closedir(d);
	return n;
}

static bool wait_for(bool (*cond)(const void *), const void *arg, int ms)
{
	for (int i = 0; i < ms / 10; i++) {
		if (cond(arg))
			return true;
		usleep(10000);
	}
	return cond(arg);
}

static bool cond_in_rename(const void *arg)
{
	(void)arg;
	return thread_in_rename();
}

static bool answered(struct th_wait *w)
{
	pthread_mutex_lock(&w->m);
	bool done = w->calls > 0;
	pthread_mutex_unlock(&w->m);
	return done;
}

static char g_leaf[4400], g_aside_prefix[80];

static bool cond_moved_aside(const void *arg)
{
	(void)arg;
	return names_with(g_leaf, g_aside_prefix) > 0;
}

int main(void)
{
	int rc = slowfs_mount(&fs, "dropremove", "getattr", ".tmp.", true);
	if (rc == 77)
		return 77;
	CHECK_EQ(rc, 0);
	alarm(120);
	char dir[4200], hex[65], name[4500], other[4600];
	snprintf(dir, sizeof(dir), "%s/store", fs.mnt);
	struct kvt_key k;
	th_key(&k, 4, 1234);
	kvt_key_to_hex(&k, hex);
	snprintf(g_leaf, sizeof(g_leaf), "%s/store/v1/%.2s/%.2s", fs.back, hex, hex + 2);
	snprintf(name, sizeof(name), "%s/%s", g_leaf, hex);
	snprintf(other, sizeof(other), "%s/.other-node", g_leaf);
	snprintf(g_aside_prefix, sizeof(g_aside_prefix), ".%s.tmp.", hex);
	uint8_t *obj = NULL, *back = NULL;
	CHECK(posix_memalign((void **)&obj, 4096, OBJ) == 0);
	CHECK(posix_memalign((void **)&back, 4096, OBJ) == 0);
	th_obj_fill(obj, OBJ, 9);

	/* Written by the other node: a write of this one would be held (its temporary). */
	char cmd[9000];
	snprintf(cmd, sizeof(cmd), "mkdir -p -m 0700 '%s'", g_leaf);
	CHECK_EQ(system(cmd), 0);
	int fd = open(other, O_CREAT | O_EXCL | O_WRONLY, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, obj, OBJ), OBJ);
	CHECK_EQ(close(fd), 0);
	CHECK_EQ(rename(other, name), 0);
	struct kvt_tier *t = open_tier(dir);
	CHECK_EQ(th_read_all(t, &k, back, OBJ), OBJ); /* the read the engine found corrupt */
	CHECK(!memcmp(back, obj, OBJ));

	/* 1. */
	t->ops->drop_corrupt(t, &k);
	CHECK(wait_for(cond_in_rename, NULL, 10000));
	printf("  1. the drop's rename to its aside name is held\n");
	/* 2. The old file is kept open so that the new one cannot get its inode number. */
	int oldfd = open(name, O_RDONLY);
	CHECK(oldfd >= 0);
	CHECK_EQ(unlink(name), 0);
	fd = open(other, O_CREAT | O_EXCL | O_WRONLY, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, obj, OBJ), OBJ);
	CHECK_EQ(close(fd), 0);
	CHECK_EQ(rename(other, name), 0);
	printf("  2. another node removed it and published a good copy\n");
	/* 3. */
	kill(fs.pid, SIGRTMIN);
	CHECK(wait_for(cond_moved_aside, NULL, 10000));
	printf("  3. the drop moved the good copy aside\n");
	/* 4. Asynchronous: a drop that holds the directory (in the kernel) may delay it. */
	struct th_wait w;
	th_wait_init(&w);
	int sub = t->ops->remove(t, &k, th_cb, &w);
	for (int i = 0; i < 300 && !answered(&w); i++)
		usleep(10000);
	/* 5. */
	kill(fs.pid, SIGUSR2);
	int64_t removed = th_wait_done(&w, sub, TH_TIMEOUT);
	th_wait_fini(&w);
	printf("  4. a remove of the key answered %lld (%s)\n", (long long)removed,
	       removed == 0 ? "removed" : removed == -ENOENT ? "not there" : "an error");
	CHECK(removed == 0 || removed == -ENOENT);
	th_close(t); /* waits for the drop */
	close(oldfd);
	struct stat st;
	bool back_again = stat(name, &st) == 0;
	printf("  5. after the drop: the key is %s, %d name(s) left aside\n",
	       back_again ? "PRESENT AGAIN (the remove was undone)" : "absent",
	       names_with(g_leaf, g_aside_prefix));
	CHECK(!back_again);
	CHECK_EQ(names_with(g_leaf, g_aside_prefix), 0);
	t = open_tier(dir);
	CHECK_EQ(th_read_all(t, &k, back, OBJ), -ENOENT);
	th_close(t);
	free(obj);
	free(back);
	slowfs_stop(&fs);
	printf("fs_drop_remove: ok\n");
	return 0;
}
