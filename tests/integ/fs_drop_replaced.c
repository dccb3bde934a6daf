/*
 * fs_drop_replaced.c - dropping a damaged shared copy never deletes a sound copy another node
 * put under the name while the drop read the damaged one again. A corruption report reads
 * the copy again (copy_sound: round trips on NFS or CephFS) before it moves the name aside
 * and removes it; a put by any node replaces the name meanwhile (a put over a taken name
 * replaces it). Until 2026-12-06 the move took whatever the name held by then: that node's
 * acknowledged copy was deleted (a review's reproducer). Now the name is looked at again
 * just before the move.
 *
 * Node A's tier on tests/fuse/slowfs (each data call takes 1 s: A's re-read spans seconds);
 * node B's on the backing directory. B puts a damaged copy of K; A reads it and reports it
 * corrupt; 1.5 s later (A's re-read under way) B puts a sound copy of K. After the drop,
 * K is B's sound copy.
 */
#include "testlib.h"

#include "format.h"
#include "lib/slowfs.h"
#include "lib/tierh.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

static const struct kvt_geometry GEO = {2, 2, 4, 8, KVT_DTYPE_FP32, KVT_KIND_KV};

static struct kvt_tier *open_at(const char *dir)
{
	const char *kv[] = {"fs.dir", dir, "fs.threads", "1", "fs.direct", "off", NULL};
	struct kvt_config *cfg = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, cfg, &t), 0);
	kvt_config_destroy(cfg);
	t->geo = GEO; /* as the engine opens it (kvt__tier_open) */
	t->geometry = &t->geo;
	t->object_max = kvt_object_bytes(&GEO, GEO.chunk_tokens);
	return t;
}

int main(void)
{
	static struct slowfs fs;
	const char *opts[] = {"--delay-ms", "1000", NULL};
	int rc = slowfs_mount_opts(&fs, "fs_drop_replaced", opts);
	if (rc == 77 && !(getenv("CI") && !strcmp(getenv("CI"), "true")))
		return 77;
	CHECK_EQ(rc, 0);
	struct kvt_tier *b = open_at(fs.back); /* opens (and lays out) the store first */
	struct kvt_tier *a = open_at(fs.mnt);
	static const uint8_t ns[KVT_NS_ID_BYTES] = {1};
	uint64_t on = kvt_object_bytes(&GEO, 8), pn = kvt_payload_bytes(&GEO, 8);
	uint8_t *good = malloc(on), *bad = malloc(on), *back = malloc(on), *payload = malloc(pn);
	CHECK(good && bad && back && payload);
	for (uint64_t i = 0; i < pn; i++)
		payload[i] = (uint8_t)(i * 5 + 1);
	struct kvt_key k;
	th_key(&k, 7, 43);
	CHECK_EQ(kvt__object_encode(good, on, &GEO, ns, &k, 8, payload, pn), 0);
	memcpy(bad, good, on);
	bad[KVT_HEADER_BYTES + 10] ^= 0x40; /* damaged at rest */
	CHECK_EQ(th_write(b, &k, bad, on), 0);
	CHECK_EQ(th_read_all(a, &k, back, on), (int64_t)on); /* A's read: the damaged copy */
	uint64_t t0 = test_now_ns();
	a->ops->drop_corrupt(a, &k);
	usleep(1500 * 1000); /* A's re-read is under way: opened at ~1 s, read at ~2 s */
	CHECK_EQ(th_write(b, &k, good, on), 0); /* B's sound copy replaces the name */
	double put_ms = test_ms_since(t0);
	int64_t n = 0;
	for (int i = 0; i < 100; i++) { /* the drop has run: A's worker answers after it */
		usleep(100 * 1000);
		if (test_ms_since(t0) > 5000)
			break;
	}
	memset(back, 0, on);
	n = th_read_all(b, &k, back, on);
	bool sound = n == (int64_t)on && !memcmp(back, good, on);
	printf("fs_drop_replaced: B's sound copy put %.0f ms into A's drop of the damaged one: "
	       "after the drop %s\n",
	       put_ms, sound ? "K is B's sound copy" : n < 0 ? "K is gone" : "K is not B's copy");
	th_close(a);
	th_close(b);
	slowfs_stop(&fs);
	free(good);
	free(bad);
	free(back);
	free(payload);
	CHECKM(sound, "a drop of a damaged copy deleted the sound copy another node put meanwhile");
	printf("fs_drop_replaced: ok\n");
	return 0;
}
