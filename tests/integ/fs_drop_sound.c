/*
 * fs_drop_sound.c - a corruption report about a read of a shared fs copy that is sound on
 * disk (the read was damaged on its way: NFS, CephFS, a FUSE daemon, a bad NIC) leaves the
 * copy in place; a copy damaged at rest is still dropped. The engine calls drop_corrupt
 * after its check of what a read served failed; here the stored copy is good, so the report
 * stands for a read damaged in transit. Until 2026-12-06 the fs tier dropped the copy
 * whenever the name still held the file read: every node sharing the directory lost the
 * chunk (a review: one flipped byte in a read buffer, 10 files became 9, and the copy
 * deleted verified sound). S3 and Redis read again before deleting; now the fs tier does.
 * A real directory, one worker (the drop runs before the lookup after it).
 */
#include "testlib.h"

#include "format.h"
#include "lib/tierh.h"

extern const struct kvt_tier_ops kvt__tier_fs_ops;

int main(void)
{
	char *dir = test_tmpdir("fs_drop_sound");
	const char *kv[] = {"fs.dir", dir, "fs.threads", "1", "fs.direct", "off", NULL};
	struct kvt_config *cfg = th_config(kv);
	struct kvt_tier *t;
	CHECK_EQ(th_open(&kvt__tier_fs_ops, cfg, &t), 0);
	kvt_config_destroy(cfg);
	static const struct kvt_geometry geo = {2, 2, 4, 8, KVT_DTYPE_FP32, KVT_KIND_KV};
	t->geo = geo; /* as the engine opens it (kvt__tier_open) */
	t->geometry = &t->geo;
	t->object_max = kvt_object_bytes(&geo, geo.chunk_tokens);
	static const uint8_t ns[KVT_NS_ID_BYTES] = {1};
	uint64_t on = kvt_object_bytes(&geo, 8), pn = kvt_payload_bytes(&geo, 8);
	uint8_t *obj = malloc(on), *back = malloc(on), *payload = malloc(pn);
	CHECK(obj && back && payload);
	for (uint64_t i = 0; i < pn; i++)
		payload[i] = (uint8_t)(i * 7 + 3);
	struct kvt_key k;
	th_key(&k, 1, 42);
	CHECK_EQ(kvt__object_encode(obj, on, &geo, ns, &k, 8, payload, pn), 0);

	/* 1. sound on disk: the report is about a read damaged on its way - kept */
	CHECK_EQ(th_write(t, &k, obj, on), 0);
	CHECK_EQ(th_read_all(t, &k, back, on), (int64_t)on);
	t->ops->drop_corrupt(t, &k);
	int kept = th_present(t, &k);
	memset(back, 0, on);
	int64_t rd = th_read_all(t, &k, back, on);
	printf("fs_drop_sound: a sound copy reported corrupt: %s, read again %lld bytes%s\n",
	       kept ? "kept" : "dropped", (long long)rd,
	       rd == (int64_t)on && !memcmp(back, obj, on) ? ", exact" : "");
	CHECKM(kept && rd == (int64_t)on && !memcmp(back, obj, on),
	       "a sound shared copy was dropped for a read damaged on its way");

	/* 2. damaged at rest (a byte of a layer flipped): dropped */
	obj[KVT_HEADER_BYTES + 10] ^= 0x40;
	struct kvt_key k2;
	th_key(&k2, 2, 42);
	CHECK_EQ(kvt__object_encode(back, on, &geo, ns, &k2, 8, payload, pn), 0);
	back[KVT_HEADER_BYTES + 10] ^= 0x40;
	CHECK_EQ(th_write(t, &k2, back, on), 0);
	CHECK_EQ(th_read_all(t, &k2, obj, on), (int64_t)on);
	t->ops->drop_corrupt(t, &k2);
	int left = th_present(t, &k2);
	printf("fs_drop_sound: a copy damaged at rest reported corrupt: %s\n",
	       left ? "kept" : "dropped");
	CHECKM(!left, "a copy damaged at rest was kept");

	th_close(t);
	free(obj);
	free(back);
	free(payload);
	test_rmdir(dir);
	free(dir);
	printf("fs_drop_sound: ok\n");
	return 0;
}
