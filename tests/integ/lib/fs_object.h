/*
 * fs_object.h - where the fs tier keeps a store's object of a caller's key:
 * <fs.dir>/v1/<2 hex>/<2 hex>/<storage key in hex> (docs/TIERS.md, "fs"). Why a header:
 * tests that damage or replace an object's file by hand need its path, and each had its own
 * copy of the derivation.
 */
#ifndef KVT_TEST_FS_OBJECT_H
#define KVT_TEST_FS_OBJECT_H

#include <stdio.h>

#include "kvtier.h"
#include "store_key.h"

static inline void test_fs_object_path(struct kvt_store *s, const char *fs_dir,
				       const struct kvt_key *k, char *path, size_t n)
{
	struct kvt_key sk;
	char hex[65];
	kvt__storage_key(kvt_store_ns_id(s), k, &sk);
	kvt_key_to_hex(&sk, hex);
	snprintf(path, n, "%s/v1/%.2s/%.2s/%s", fs_dir, hex, hex + 2, hex);
}

#endif
