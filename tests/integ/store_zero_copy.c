/*
 * store_zero_copy.c - a put into a store without DRAM writes the caller's payload from the
 * caller's buffer, with only the 4 KiB header built by the store (store.zero_copy_puts,
 * src/engine_ops.c; the NVMe tier's write_split gathers header and payload in its first
 * I/O, src/tier_nvme_ops.c). Real files, O_DIRECT and io_uring in a temporary directory.
 * Checked, with nvme.fsync none and data:
 *  - objects of one I/O (1 MiB payload) and of several (4 MiB) from a buffer on a 2 MiB
 *    boundary, and small ones (64 KiB) from any 4 KiB-aligned buffer, go the zero-copy way
 *    (kvt__store_zero_copy_puts counts them) and read back exact, before and after the
 *    store is closed and opened again (the header on disk is the one kvt_put would have
 *    encoded: its CRCs match the payload written after it);
 *  - the caller's buffer is the caller's again once the put's callback ran: changing it
 *    then changes nothing stored;
 *  - with the small-object log taking objects that large (nvme.log_max), a zero-copy put's
 *    header and payload go into a log batch as two pieces of its write: no file of its
 *    own, read back exact, also after a reopen;
 *  - the copy path stays for what it must take: a buffer not 4 KiB-aligned (large or
 *    small, also into the log), an object of 512 KiB or more not on a 2 MiB boundary
 *    (likely 4 KiB pages, which make small device requests),
 *    store.zero_copy_puts=false, and a store with a DRAM tier.
 * Exit 0 pass, 1 fail.
 */
#include <ftw.h>

#include "engine.h"
#include "internal.h"
#include "testlib.h"

#define FULL 128 /* tokens: 8 layers x 512 KiB = 4 MiB, several I/Os */
#define PART 32	 /* 8 x 128 KiB = 1 MiB, one I/O */
#define SMALL 2	 /* 8 x 8 KiB = 64 KiB: zero-copy from any 4 KiB-aligned buffer */

static const char *log_max; /* nvme.log_max for open_store (NULL: the default, off) */

static struct kvt_store *open_store(const char *tiers, const char *dir, const char *fsync,
				    const char *zero_copy)
{
	struct kvt_config *c = test_config(tiers, dir);
	test_set_big_model(c, "128");
	test_set(c, "dram.bytes", "64MiB");
	test_set(c, "nvme.bytes", "64MiB");
	test_set(c, "nvme.fsync", fsync);
	if (zero_copy)
		test_set(c, "store.zero_copy_puts", zero_copy);
	if (log_max) {
		test_set(c, "nvme.log_max", log_max);
		test_set(c, "nvme.segment_bytes", "16MiB");
	}
	return test_open(c);
}

static void key_of(uint64_t i, struct kvt_key *k)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->bytes, &i, sizeof(i));
	k->bytes[31] = 0x5a;
}

/* Put chunk i (n_tokens) from buf (its payload filled with seed i) and check whether it
 * went the zero-copy way. */
static void put_one(struct kvt_store *s, uint64_t i, uint32_t n_tokens, uint8_t *buf,
		    bool want_zero_copy)
{
	size_t len = kvt_payload_bytes(kvt_store_geometry(s), n_tokens);
	struct kvt_key k;
	key_of(i, &k);
	test_fill(buf, len, i);
	uint64_t before = kvt__store_zero_copy_puts(s);
	CHECK_RC(kvt_put_sync(s, &k, NULL, n_tokens, buf, len), 0);
	CHECKM(kvt__store_zero_copy_puts(s) - before == (want_zero_copy ? 1u : 0u),
	       "chunk %llu (%u tokens, buffer %% 4096 = %zu): zero-copy %s", (unsigned long long)i,
	       n_tokens, (size_t)((uintptr_t)buf % 4096), want_zero_copy ? "expected" : "not expected");
	/* the buffer is the caller's again: what is stored must not follow it */
	memset(buf, 0xee, len);
}

/* Object files (<sub>/<key>.kvt) under an nvme directory. */
static int nkvt;
static int count_kvt(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)f;
	size_t n = strlen(p);
	nkvt += flag == FTW_F && n > 4 && !strcmp(p + n - 4, ".kvt");
	return 0;
}
static int object_files(const char *dir)
{
	nkvt = 0;
	nftw(dir, count_kvt, 8, FTW_PHYS);
	return nkvt;
}

static void get_one(struct kvt_store *s, uint64_t i, uint32_t n_tokens)
{
	size_t len = kvt_payload_bytes(kvt_store_geometry(s), n_tokens);
	uint8_t *back = kvt__huge_alloc(len);
	CHECK(back);
	struct kvt_key k;
	key_of(i, &k);
	struct kvt_result res;
	CHECK_RC(kvt_get_sync(s, &k, 0, 0, back, len, &res), 0);
	CHECKM(test_check(back, len, i), "chunk %llu read back wrong", (unsigned long long)i);
	kvt__huge_free(back, len);
}

int main(void)
{
	char *dir = test_tmpdir("store_zero_copy");
	size_t full = 4u << 20;
	uint8_t *aligned = kvt__huge_alloc(full), *raw = malloc(full + 64);
	CHECK(aligned && raw);
	uint8_t *unaligned = raw + 16;
	const char *modes[] = {"none", "data"};
	for (int m = 0; m < 2; m++) {
		test_rmdir(dir);
		struct kvt_store *s = open_store("nvme", dir, modes[m], NULL);
		put_one(s, 1, FULL, aligned, true);
		put_one(s, 2, PART, aligned, true);
		/* the same key again as soon as each put is answered: a put was answered before
		 * its job stopped counting as out, and the next one was refused -EAGAIN although
		 * nothing was late (until 2026-12-06) */
		for (int r = 0; r < 300; r++) {
			struct kvt_key k;
			key_of(2, &k);
			size_t len = kvt_payload_bytes(kvt_store_geometry(s), PART);
			test_fill(aligned, len, 2);
			int rc = kvt_put_sync(s, &k, NULL, PART, aligned, len);
			CHECKM(rc == 0, "put %d of one key in a row: %d", r, rc);
		}
		put_one(s, 3, FULL, unaligned, false);
		/* 4 KiB-aligned but not on a 2 MiB boundary: likely small pages, copied */
		put_one(s, 7, PART, aligned + 4096, false);
		put_one(s, 4, SMALL, aligned, true);
		/* small: one device request from any pages, so 4 KiB alignment is enough */
		put_one(s, 10, SMALL, aligned + 4096, true);
		put_one(s, 11, SMALL, unaligned, false);
		get_one(s, 1, FULL);
		get_one(s, 2, PART);
		get_one(s, 3, FULL);
		get_one(s, 4, SMALL);
		get_one(s, 7, PART);
		get_one(s, 10, SMALL);
		get_one(s, 11, SMALL);
		kvt_store_close(s);
		/* the objects on disk, found and read by a store that never saw them written */
		s = open_store("nvme", dir, modes[m], NULL);
		get_one(s, 1, FULL);
		get_one(s, 2, PART);
		get_one(s, 4, SMALL);
		get_one(s, 10, SMALL);
		CHECK_EQ(kvt__store_zero_copy_puts(s), 0);
		kvt_store_close(s);
		printf("fsync=%s: zero-copy puts of 64 KiB, 1 and 4 MiB read back exact, also "
		       "after a reopen; copies where they must be\n",
		       modes[m]);
	}
	/* off by configuration, and never with a DRAM tier (its slot is the copy) */
	test_rmdir(dir);
	struct kvt_store *s = open_store("nvme", dir, "none", "false");
	put_one(s, 5, FULL, aligned, false);
	get_one(s, 5, FULL);
	kvt_store_close(s);
	test_rmdir(dir);
	s = open_store("dram,nvme", dir, "none", NULL);
	put_one(s, 6, FULL, aligned, false);
	get_one(s, 6, FULL);
	kvt_store_close(s);
	printf("store.zero_copy_puts=false and a DRAM tier: copies, exact\n");

	/* the log takes objects up to 2 MiB - 4 KiB: the 1 MiB one goes there in two pieces */
	log_max = "2093056";
	for (int m = 0; m < 2; m++) {
		test_rmdir(dir);
		s = open_store("nvme", dir, modes[m], NULL);
		put_one(s, 8, PART, aligned, true);
		put_one(s, 9, SMALL, aligned, true);
		put_one(s, 12, SMALL, unaligned, false);
		get_one(s, 8, PART);
		get_one(s, 9, SMALL);
		get_one(s, 12, SMALL);
		kvt_store_close(s);
		char seg[8192];
		snprintf(seg, sizeof(seg), "%s/log/0.kvl", dir);
		CHECKM(object_files(dir) == 0, "logged objects have no files of their own (%d)",
		       object_files(dir));
		CHECKM(access(seg, F_OK) == 0, "no log segment %s", seg);
		s = open_store("nvme", dir, modes[m], NULL);
		get_one(s, 8, PART);
		get_one(s, 9, SMALL);
		get_one(s, 12, SMALL);
		kvt_store_close(s);
	}
	log_max = NULL;
	printf("with nvme.log_max: a zero-copy put goes into the log, exact, also after a reopen\n");
	kvt__huge_free(aligned, full);
	free(raw);
	test_rmdir(dir);
	free(dir);
	printf("pass\n");
	return 0;
}
