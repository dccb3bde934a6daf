/*
 * store_key.h - the name every tier stores a chunk under: its storage key, derived from the
 * store's namespace and the key the engine passed (docs/FORMAT.md section 2b). Engines may
 * pass opaque keys (vLLM block hashes) that are equal across tenants and models; scoping
 * them by ns_id once, at the store's API boundary, means that no tier - dram, nvme, fs,
 * redis, s3, rados - can ever see two namespaces' chunks under one name, so one tenant can
 * neither probe another's cache nor block its writes.
 */
#ifndef KVT_STORE_KEY_H
#define KVT_STORE_KEY_H

#include <stddef.h>

#include "internal.h"

/* out = SHA-256("kvtier-store-v1" || 17 zero bytes || ns_id || key). Returns out; NULL
 * (out untouched) when key is NULL, so an optional key (a put's parent) maps to NULL. out
 * may alias key. */
const struct kvt_key *kvt__storage_key(const uint8_t ns_id[KVT_NS_ID_BYTES],
				       const struct kvt_key *key, struct kvt_key *out);

/* The storage keys of a batch: small batches live in the struct, larger ones on the heap. */
struct kvt_storage_keys {
	struct kvt_key *keys; /* NULL when the input was NULL */
	struct kvt_key local[16];
};
/* 0, or -ENOMEM. keys NULL (or n 0) gives b->keys NULL / an empty batch. */
int kvt__storage_keys(struct kvt_storage_keys *b, const uint8_t ns_id[KVT_NS_ID_BYTES],
		      const struct kvt_key *keys, size_t n);
void kvt__storage_keys_free(struct kvt_storage_keys *b);

#endif
