/*
 * fs_put_taken.c - a put whose name in the fs tier is already taken by a file of the
 * object's size replaces that file, so what the put acknowledged is what a read finds. Why:
 * until 2026-12-06 such a file was kept as "the same object", so kvt_put and kvt_flush
 * returned 0 while this store could not read what was there (found by review):
 *   A. MAC on, the name held by a copy written without a MAC: a miss for good (a node
 *      without the key, or anyone who can write the directory, blocked the key);
 *   B. the encryption key rotated: the old key's ciphertext stayed, a miss for good;
 *   C. a damaged copy of the right size (bit rot): the next read dropped it, the put lost.
 * Each case puts, flushes, reopens and reads the key back exact.
 */
#include <fcntl.h>
#include <sys/stat.h>

#include "testlib.h"

#include "format.h"
#include "lib/fs_object.h"

static const char *dir;
static char keydir[4096];

static const char *key_file(int slot, const char *content, size_t len)
{
	static char paths[4][4200];
	snprintf(paths[slot], sizeof(paths[slot]), "%s/key%d", keydir, slot);
	int fd = open(paths[slot], O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	CHECK(write(fd, content, len) == (ssize_t)len);
	close(fd);
	return paths[slot];
}

static struct kvt_store *open_with(const char *mac_file, const char *enc_file)
{
	struct kvt_config *c = test_config("dram,fs", dir);
	char fsdir[4200];
	snprintf(fsdir, sizeof(fsdir), "%s/fs", dir);
	test_set(c, "fs.dir", fsdir);
	test_set(c, "fs.fsync", "none");
	test_set(c, "model.tenant", "tenant-p");
	if (mac_file)
		test_set(c, "security.mac_key_file", mac_file);
	if (enc_file)
		test_set(c, "security.encryption_key_file", enc_file);
	return test_open(c);
}

static void put(struct kvt_store *s, const struct kvt_key *k, uint64_t seed)
{
	uint32_t nt = kvt_store_geometry(s)->chunk_tokens;
	size_t len = kvt_payload_bytes(kvt_store_geometry(s), nt);
	void *buf = malloc(len);
	CHECK(buf);
	test_fill(buf, len, seed);
	CHECK_RC(kvt_put_sync(s, k, NULL, nt, buf, len), 0);
	CHECK_RC(kvt_flush_sync(s), 0);
	free(buf);
	kvt_store_close(s);
}

/* A fresh store of these keys reads k back exact: 0, or its get's -errno. */
static int read_back(const char *mac, const char *enc, const struct kvt_key *k, uint64_t seed)
{
	struct kvt_store *s = open_with(mac, enc);
	uint32_t nt = kvt_store_geometry(s)->chunk_tokens;
	size_t len = kvt_payload_bytes(kvt_store_geometry(s), nt);
	uint8_t *want = malloc(len), *got = malloc(len);
	CHECK(want && got);
	test_fill(want, len, seed);
	int rc = kvt_get_sync(s, k, 0, 0, got, len, NULL);
	if (rc == 0)
		CHECKM(!memcmp(got, want, len), "read back, but not the bytes put");
	kvt_store_close(s);
	free(want);
	free(got);
	return rc;
}

static void object_path(struct kvt_store *s, const struct kvt_key *k, char *path, size_t n)
{
	char fsdir[2048];
	snprintf(fsdir, sizeof(fsdir), "%s/fs", dir);
	test_fs_object_path(s, fsdir, k, path, n);
}

int main(void)
{
	dir = test_tmpdir("fs_put_taken");
	snprintf(keydir, sizeof(keydir), "%s/keys", dir);
	CHECK(mkdir(keydir, 0700) == 0);
	const char *mac = key_file(0, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n", 65);
	const char *enc1 = key_file(1, "ENCRYPTION-KEY-ONE-32-BYTES-LONG", 32);
	const char *enc2 = key_file(2, "ENCRYPTION-KEY-TWO-32-BYTES-LONG", 32);
	struct kvt_key k[3];
	for (int i = 0; i < 3; i++)
		memset(k[i].bytes, 0x30 + i, sizeof(k[i].bytes));

	/* A. written without a MAC, then put by a store that requires one */
	put(open_with(NULL, NULL), &k[0], 1);
	put(open_with(mac, NULL), &k[0], 1);
	int rc = read_back(mac, NULL, &k[0], 1);
	CHECKM(rc == 0, "A: a MAC store's put over an unMACed copy, flushed: get %s",
	       kvt_strerror(rc));
	printf("A. put over a copy without the MAC: read back exact\n");

	/* B. the encryption key rotated */
	put(open_with(NULL, enc1), &k[1], 2);
	put(open_with(NULL, enc2), &k[1], 2);
	rc = read_back(NULL, enc2, &k[1], 2);
	CHECKM(rc == 0, "B: a put under the new encryption key, flushed: get %s", kvt_strerror(rc));
	printf("B. put after an encryption key rotation: read back exact\n");

	/* C. a damaged copy of the object's size */
	struct kvt_store *s = open_with(NULL, NULL);
	char path[4200];
	object_path(s, &k[2], path, sizeof(path));
	put(s, &k[2], 3);
	int fd = open(path, O_RDWR);
	CHECKM(fd >= 0, "%s: %s", path, strerror(errno));
	uint8_t b;
	CHECK(pread(fd, &b, 1, KVT_HEADER_BYTES + 100) == 1);
	b ^= 1;
	CHECK(pwrite(fd, &b, 1, KVT_HEADER_BYTES + 100) == 1);
	close(fd);
	put(open_with(NULL, NULL), &k[2], 3);
	rc = read_back(NULL, NULL, &k[2], 3);
	CHECKM(rc == 0, "C: a put over a damaged copy of its size, flushed: get %s",
	       kvt_strerror(rc));
	printf("C. put over a damaged copy: read back exact\n");

	test_rmdir(dir);
	free((void *)dir);
	printf("fs_put_taken: ok\n");
	return 0;
}
