/*
 * nvme_reput_refused.c - a put of a key whose file the open found, refused or failing, never
 * loses the stored copy. The open indexes a file under its key's name marked "found" (after
 * a power cut it may hold another key's bytes: nvme_recycle_powercut), and the key's first
 * put writes it again. Until 2026-12-06 that put dropped the found copy before its own
 * admission: refused by the write budget (here), for room, or failing, it left the key on
 * no tier at all although it had been written and flushed (a review's reproducer).
 *  1. nvme.write_budget of one object: K written and flushed; reopened; a put of K is
 *     refused (-EDQUOT: the budget is spent) and K still reads back exact.
 *  2. A put that fails after its admission: K written and flushed in a directory, which is
 *     then opened through tests/fuse/slowfs failing the publish of K's temp files
 *     (--eio-rename ".tmp.<K>"); the put of K fails (-EIO) and K still reads back exact,
 *     there and after a reopen, and no temp file is left. Until 2026-12-06 the found copy
 *     was dropped at the admission, and a write failing after it lost it (a miss). Needs
 *     slowfs and /dev/fuse (exit 77 without, a failure under CI=true).
 *  3. As 2, in a store exactly full (nvme.bytes of two objects: K, then J) in which K's
 *     found copy is the least recently used (J read after the reopen): the put of K must
 *     make room, and the room-making must not take K's own copy - it takes J. Until
 *     2026-12-06 it evicted K's copy (or recycled its file as the put's temp file), the
 *     publish failed, and K was on no tier (a miss, also after a reopen). Here slowfs fails
 *     the recycling's rename too (either path of a rename counts), so it was the eviction.
 *  4. While the re-put of K is in flight (slowfs holds the writes into its temp file) in
 *     that store of two objects, the copy set aside still counts: a put of L is refused
 *     for room (-ENOSPC). Until 2026-12-07 it was admitted, and the store held three
 *     objects' bytes under an nvme.bytes of two.
 *  5. A remove of K while its re-put is in flight (slowfs holds the writes into its temp
 *     file, then fails its publish): the remove answers 0 and the failed put does not put
 *     the set-aside copy back - K stays removed, also after a reopen. Until 2026-12-07 the
 *     remove found nothing indexed (-ENOENT) and the failure brought K back.
 */
#include "nvme_util.h"
#include "lib/slowfs.h"

#define OBJ 20480

static int open_budget(struct kvt_tier **t, const char *dir)
{
	return open_tier(t, "nvme.dirs", dir, "nvme.bytes", "1MiB", "nvme.log_max", "0",
			 "nvme.write_budget", "20480", NULL);
}

/* Open on a directory of nvme.bytes bytes. */
static int open_sized(struct kvt_tier **t, const char *dir, const char *bytes)
{
	return open_tier(t, "nvme.dirs", dir, "nvme.bytes", bytes, "nvme.log_max", "0",
			 "nvme.direct", "off", "nvme.preallocate", "0", NULL);
}

static int open_plain(struct kvt_tier **t, const char *dir)
{
	return open_sized(t, dir, "1MiB");
}

/* Open on the backing directory of a store just closed through slowfs: the store's lock
 * there is let go when slowfs handles the file's release, which FUSE sends after the close
 * returns - until then the open finds the store in use (-EBUSY); it gets 5 s. */
static int reopen_back(struct kvt_tier **t, const char *dir, const char *bytes)
{
	int rc = -EBUSY;
	for (int i = 0; i < 250 && (rc = open_sized(t, dir, bytes)) == -EBUSY; i++)
		usleep(20000);
	return rc;
}

/* What slowfs does to K's temp files (".tmp.<K>" in their names): fail their publish
 * (--eio-rename), hold the writes into them until SIGUSR2 (--stall-path, --stall-only
 * write, --stalled; not the recycling's rename, which runs on the tier's ring thread, nor
 * the set-aside rename, named K's own). */
enum { FAIL_PUBLISH = 1, HOLD_WRITES = 2 };

/* fs mounted through slowfs doing `how` to K's temp files, back and mnt its directory "d"
 * on each side. 0, or 77 without slowfs. */
static int mount_for(struct slowfs *fs, const char *name, const struct kvt_key *k, int how,
		     char *back, char *mnt, size_t len)
{
	char hex[2 * KVT_KEY_BYTES + 1], pat[64];
	kvt_key_to_hex(k, hex);
	snprintf(pat, sizeof(pat), ".tmp.%.32s", hex);
	const char *opts[9];
	int n = 0;
	if (how & FAIL_PUBLISH) {
		opts[n++] = "--eio-rename";
		opts[n++] = pat;
	}
	if (how & HOLD_WRITES) {
		opts[n++] = "--stall-path";
		opts[n++] = pat;
		opts[n++] = "--stall-only";
		opts[n++] = "write";
		opts[n++] = "--stalled";
	}
	opts[n] = NULL;
	int rc = slowfs_mount_opts(fs, name, opts);
	if (rc == 77)
		return 77;
	CHECK_EQ(rc, 0);
	int nb = snprintf(back, len, "%s/d", fs->back);
	int nm = snprintf(mnt, len, "%s/d", fs->mnt);
	CHECK(nb > 0 && nb < (int)len && nm > 0 && nm < (int)len);
	return 0;
}

/* keys[0..n) written and flushed on dir (nvme.bytes `bytes`), then closed: written on the
 * backing directory itself, where nothing fails. */
static void stored_on(const char *dir, const char *bytes, const struct kvt_key *keys, int n,
		      uint8_t *buf)
{
	struct kvt_tier *t;
	CHECK_EQ(open_sized(&t, dir, bytes), 0);
	for (int i = 0; i < n; i++) {
		fill_object(buf, OBJ, &keys[i]);
		CHECK_EQ(t_write(t, &keys[i], buf, OBJ), 0);
	}
	CHECK_EQ(t_flush(t), 0);
	kvt__tier_close(t);
}

/* 2: the put's publish fails (slowfs --eio-rename). 0, or 77 without slowfs. */
static int publish_fails(void)
{
	struct kvt_key k = make_key(5, 2);
	static struct slowfs fs;
	char back[4200], mnt[4200];
	int rc = mount_for(&fs, "reput", &k, FAIL_PUBLISH, back, mnt, sizeof(back));
	if (rc)
		return rc;
	uint8_t *buf = abuf(OBJ);
	struct kvt_tier *t;
	stored_on(back, "1MiB", &k, 1, buf);

	CHECK_EQ(open_plain(&t, mnt), 0);
	fill_object(buf, OBJ, &k);
	int w = t_write(t, &k, buf, OBJ);
	memset(buf, 0, OBJ);
	int r = t_read1(t, &k, buf, 0, OBJ);
	int ok = r == OBJ && check_object(buf, OBJ, &k) == 0;
	printf("nvme_reput_refused: a put of a key found at open, its publish failing: %d; then a "
	       "read: %d (%s)\n",
	       w, r, ok ? "exact" : "the stored copy is gone");
	CHECK_EQ(w, -EIO);
	CHECKM(ok, "a put of a key found at open that failed after its admission lost the copy");
	kvt__tier_close(t);

	CHECK_EQ(count_files(back, ".tmp.", ""), 0);
	CHECK_EQ(reopen_back(&t, back, "1MiB"), 0);
	memset(buf, 0, OBJ);
	CHECK_EQ(t_read1(t, &k, buf, 0, OBJ), OBJ);
	CHECK_EQ(check_object(buf, OBJ, &k), 0);
	kvt__tier_close(t);
	free(buf);
	slowfs_stop(&fs);
	return 0;
}

/* 3: as 2, the put making room in a full store where K's found copy is the LRU leaf. */
static int room_from_own_copy(void)
{
	struct kvt_key kj[2] = {make_key(5, 3), make_key(5, 4)}, k = kj[0], j = kj[1];
	static struct slowfs fs;
	char back[4200], mnt[4200], full[32];
	int rc = mount_for(&fs, "reput", &k, FAIL_PUBLISH, back, mnt, sizeof(back));
	if (rc)
		return rc;
	snprintf(full, sizeof(full), "%d", 2 * OBJ); /* K and J: exactly full */
	uint8_t *buf = abuf(OBJ);
	struct kvt_tier *t;
	stored_on(back, full, kj, 2, buf);

	CHECK_EQ(open_sized(&t, mnt, full), 0);
	/* J read: K is the least recently used, whatever order the open gave them (their
	 * mtimes may be equal) */
	CHECK_EQ(t_read1(t, &j, buf, 0, OBJ), OBJ);
	CHECK_EQ(check_object(buf, OBJ, &j), 0);
	fill_object(buf, OBJ, &k);
	int w = t_write(t, &k, buf, OBJ);
	memset(buf, 0, OBJ);
	int r = t_read1(t, &k, buf, 0, OBJ);
	int ok = r == OBJ && check_object(buf, OBJ, &k) == 0;
	printf("nvme_reput_refused: a put of a key found at open making room in a full store, "
	       "its publish failing: %d; then a read: %d (%s)\n",
	       w, r, ok ? "exact" : "the stored copy is gone");
	CHECK_EQ(w, -EIO);
	CHECKM(ok, "the room made for a put of a key found at open took its own copy");
	/* the room came from J, the only other object */
	CHECK_EQ(t_read1(t, &j, buf, 0, OBJ), -ENOENT);
	kvt__tier_close(t);

	CHECK_EQ(count_files(back, ".tmp.", ""), 0);
	CHECK_EQ(reopen_back(&t, back, full), 0);
	memset(buf, 0, OBJ);
	CHECK_EQ(t_read1(t, &k, buf, 0, OBJ), OBJ);
	CHECK_EQ(check_object(buf, OBJ, &k), 0);
	kvt__tier_close(t);
	free(buf);
	slowfs_stop(&fs);
	return 0;
}

/* 4: while the put of K is in flight (its temp file's writes held by slowfs), the copy
 * set aside still counts: a store of two objects holding K's old copy and its new temp file
 * is full, and a put of L is refused for room. 0, or 77 without slowfs. */
static int aside_counted(void)
{
	struct kvt_key kj[2] = {make_key(5, 5), make_key(5, 6)}, k = kj[0], j = kj[1];
	struct kvt_key l = make_key(5, 7);
	static struct slowfs fs;
	char back[4200], mnt[4200], full[32];
	int rc = mount_for(&fs, "aside", &k, HOLD_WRITES, back, mnt, sizeof(back));
	if (rc)
		return rc;
	snprintf(full, sizeof(full), "%d", 2 * OBJ);
	uint8_t *buf = abuf(OBJ), *kbuf = abuf(OBJ);
	struct kvt_tier *t;
	stored_on(back, full, kj, 2, buf);

	CHECK_EQ(open_sized(&t, mnt, full), 0);
	CHECK_EQ(t_read1(t, &j, buf, 0, OBJ), OBJ); /* K the least recently used */
	fill_object(kbuf, OBJ, &k);
	struct waiter wk = WAITER_INIT;
	CHECK_EQ(t->ops->write(t, &k, kbuf, OBJ, waiter_cb, &wk), 0);
	usleep(300 * 1000); /* K admitted (J's room taken), its temp file's write held */
	fill_object(buf, OBJ, &l);
	int wl = t_write(t, &l, buf, OBJ);
	printf("nvme_reput_refused: a put of L while the re-put of K is in flight, its old copy "
	       "set aside, in a store of two objects: %d\n", wl);
	CHECKM(wl == -ENOSPC, "a put was admitted into the bytes of a copy set aside, past "
			      "nvme.bytes");
	kill(fs.pid, SIGUSR2);
	CHECK_EQ(waiter_wait(&wk, 0), 0);
	memset(buf, 0, OBJ);
	CHECK_EQ(t_read1(t, &k, buf, 0, OBJ), OBJ);
	CHECK_EQ(check_object(buf, OBJ, &k), 0);
	kvt__tier_close(t);
	free(buf);
	free(kbuf);
	slowfs_stop(&fs);
	return 0;
}

/* 5: a remove of K while its re-put is in flight (slowfs holding the writes into its temp
 * file) takes the copy set aside too: the write, let go and failing at its publish, does
 * not put it back. 0, or 77 without slowfs. */
static int aside_removed(void)
{
	struct kvt_key k = make_key(5, 8);
	static struct slowfs fs;
	char back[4200], mnt[4200];
	int rc = mount_for(&fs, "removed", &k, HOLD_WRITES | FAIL_PUBLISH, back, mnt,
			   sizeof(back));
	if (rc)
		return rc;
	uint8_t *buf = abuf(OBJ);
	struct kvt_tier *t;
	stored_on(back, "1MiB", &k, 1, buf);

	CHECK_EQ(open_plain(&t, mnt), 0);
	struct waiter wk = WAITER_INIT;
	CHECK_EQ(t->ops->write(t, &k, buf, OBJ, waiter_cb, &wk), 0);
	usleep(300 * 1000); /* admitted, the found copy set aside, its temp file's write held */
	int rm = t_remove(t, &k);
	kill(fs.pid, SIGUSR2); /* the write goes on; its publish fails */
	int w = waiter_wait(&wk, 0);
	memset(buf, 0, OBJ);
	int r = t_read1(t, &k, buf, 0, OBJ);
	printf("nvme_reput_refused: a remove of K during its re-put: %d; the put: %d; then a "
	       "read: %d\n", rm, w, r);
	CHECK_EQ(w, -EIO);
	CHECKM(r == -ENOENT, "a key removed while its re-put was in flight came back when the "
			     "put failed");
	CHECK_EQ(rm, 0);
	kvt__tier_close(t);
	CHECK_EQ(reopen_back(&t, back, "1MiB"), 0);
	CHECKM(t_read1(t, &k, buf, 0, OBJ) == -ENOENT, "the removed key is back after a reopen");
	kvt__tier_close(t);
	free(buf);
	slowfs_stop(&fs);
	return 0;
}

int main(void)
{
	char root[] = "/var/tmp/kvt-nvme-reput-XXXXXX";
	CHECK(mkdtemp(root));
	struct kvt_tier *t;
	CHECK_EQ(open_budget(&t, root), 0);
	uint8_t *buf = abuf(OBJ);
	struct kvt_key k = make_key(5, 1);
	fill_object(buf, OBJ, &k);
	CHECK_EQ(t_write(t, &k, buf, OBJ), 0);
	CHECK_EQ(t_flush(t), 0);
	kvt__tier_close(t);

	CHECK_EQ(open_budget(&t, root), 0);
	fill_object(buf, OBJ, &k);
	int w = t_write(t, &k, buf, OBJ);
	memset(buf, 0, OBJ);
	int r = t_read1(t, &k, buf, 0, OBJ);
	int ok = r == OBJ && check_object(buf, OBJ, &k) == 0;
	printf("nvme_reput_refused: a put of a key found at open, refused: %d; then a read: %d "
	       "(%s)\n",
	       w, r, ok ? "exact" : "the stored copy is gone");
	CHECK(w < 0);
	CHECKM(ok, "a refused put of a key found at open lost its stored copy");
	kvt__tier_close(t);
	free(buf);
	rm_rf(root);
	int rc = publish_fails();
	if (!rc)
		rc = room_from_own_copy();
	if (!rc)
		rc = aside_counted();
	if (!rc)
		rc = aside_removed();
	if (rc)
		return rc;
	printf("nvme_reput_refused: ok\n");
	return 0;
}
