/*
 * nvme_fifo_swap.c - an object file replaced by a FIFO while the tier is open (after the
 * open's scan, which would have listed it for `kvtier verify` and not indexed it): a read
 * of the key answers at once with a miss (-ENOENT), with one warning line, and the key
 * leaves the index; other keys read as before. The read's io_uring open could block on the
 * FIFO until a writer opened it (no O_NONBLOCK until 2026-12-04), holding the read, and
 * close, forever. An alarm fails the test if a read hangs. The write side, a recycled
 * file swapped for a link or a FIFO: swapped_victim below.
 */
#include "nvme_util.h"

#include <signal.h>

#include "tier_nvme_internal.h"

#define OBJ 20480 /* one full object at test_geom */

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "nvme_fifo_swap: a read or write of a FIFO hangs\n";
	ssize_t w = write(2, m, sizeof(m) - 1);
	(void)w;
	_exit(1);
}

/* The same on the write side: a full tier (two objects' room) recycles its LRU object's
 * file for the next write (renames it to the write's temporary name and overwrites it).
 * That file swapped from outside for a symbolic link to a file outside the store, or for a
 * FIFO: the write fails with a warning, the link's target is untouched, the put does not
 * hang, and the next write succeeds. Until 2026-12-05 the write's open followed the link
 * and overwrote its target with the object (a review's reproducer). */
static void swapped_victim(const char *root, const char *kind)
{
	char dir[300], outside[300], name[NV_NAME_MAX], p[600];
	snprintf(dir, sizeof(dir), "%s/%s", root, kind);
	snprintf(outside, sizeof(outside), "%s/outside-%s", root, kind);
	uint8_t *b = abuf(OBJ), *o = abuf(OBJ);
	memset(o, 'A', OBJ);
	int fd = open(outside, O_CREAT | O_WRONLY, 0600);
	CHECK(fd >= 0 && write(fd, o, OBJ) == OBJ && close(fd) == 0);
	struct kvt_key k[4];
	const char *opt[] = {"nvme.dirs", dir, "nvme.bytes", "40960", "nvme.log_max", "0",
			     "nvme.direct", "off", NULL};
	struct kvt_tier *t;
	CHECK_EQ(open_tier(&t, opt[0], opt[1], opt[2], opt[3], opt[4], opt[5], opt[6], opt[7],
			   NULL),
		 0);
	for (int i = 0; i < 2; i++) {
		k[i] = make_key(8, (uint64_t)i);
		fill_object(b, OBJ, &k[i]);
		CHECK_EQ(t_write(t, &k[i], b, OBJ), 0);
		usleep(20000); /* k[0] the older: the victim */
	}
	kvt__tier_close(t);
	CHECK_EQ(open_tier(&t, opt[0], opt[1], opt[2], opt[3], opt[4], opt[5], opt[6], opt[7],
			   NULL),
		 0);
	nv_object_path(&k[0], name);
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	CHECK_EQ(unlink(p), 0);
	CHECK_EQ(!strcmp(kind, "fifo") ? mkfifo(p, 0600) : symlink(outside, p), 0);
	signal(SIGALRM, on_alarm);
	alarm(30);
	log_clear();
	k[2] = make_key(8, 2);
	fill_object(b, OBJ, &k[2]);
	int rc = t_write(t, &k[2], b, OBJ);
	printf("nvme_fifo_swap: a write recycling a file swapped for a %s: %d, %d warning(s)\n",
	       kind, rc, log_count("not a regular file") + log_count("write to"));
	CHECK(rc < 0);
	k[3] = make_key(8, 3);
	fill_object(b, OBJ, &k[3]);
	CHECK_EQ(t_write(t, &k[3], b, OBJ), 0);
	CHECK_EQ(t_read1(t, &k[3], b, 0, OBJ), OBJ);
	CHECK_EQ(check_object(b, OBJ, &k[3]), 0);
	kvt__tier_close(t);
	alarm(0);
	fd = open(outside, O_RDONLY);
	CHECK(fd >= 0 && read(fd, b, OBJ) == OBJ && close(fd) == 0);
	CHECKM(!memcmp(b, o, OBJ), "the file outside the store was overwritten");
	free(b);
	free(o);
}

int main(void)
{
	char root[] = "/var/tmp/kvt-nvme-fifo-swap-XXXXXX";
	CHECK(mkdtemp(root));
	char dir[300];
	snprintf(dir, sizeof(dir), "%s/d", root);
	struct kvt_tier *t;
	uint8_t *b = abuf(OBJ);
	struct kvt_key k[3];
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.log_max", "0", "nvme.direct", "off", NULL), 0);
	for (int i = 0; i < 3; i++) {
		k[i] = make_key(7, (uint64_t)i);
		fill_object(b, OBJ, &k[i]);
		CHECK_EQ(t_write(t, &k[i], b, OBJ), 0);
	}
	kvt__tier_close(t);
	/* Reopened: no descriptor of the files cached yet. */
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.log_max", "0", "nvme.direct", "off", NULL), 0);
	char name[NV_NAME_MAX], p[600];
	nv_object_path(&k[0], name);
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	CHECK_EQ(unlink(p), 0);
	CHECK_EQ(mkfifo(p, 0600), 0);
	signal(SIGALRM, on_alarm);
	alarm(30);
	log_clear();
	CHECK_EQ(t_read1(t, &k[0], b, 0, OBJ), -ENOENT);
	CHECK_EQ(log_count("not a regular file"), 1);
	uint8_t present = 1;
	CHECK_EQ(t_exists(t, &k[0], 1, &present), 0);
	CHECK_EQ(present, 0); /* left the index */
	for (int i = 1; i < 3; i++) { /* regular files read as before (O_NONBLOCK cleared) */
		CHECK_EQ(t_read1(t, &k[i], b, 0, OBJ), OBJ);
		CHECK_EQ(check_object(b, OBJ, &k[i]), 0);
	}
	kvt__tier_close(t);
	alarm(0);
	struct stat st;
	CHECK_EQ(lstat(p, &st), 0);
	CHECK(S_ISFIFO(st.st_mode)); /* left on disk, as the scan leaves such entries */
	swapped_victim(root, "symlink");
	swapped_victim(root, "fifo");
	free(b);
	rm_rf(root);
	printf("nvme_fifo_swap: ok\n");
	return 0;
}
