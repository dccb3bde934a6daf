/* bench_mlperf_ref.h - the MLPerf harness's storage path as mlperf-kv's same-run reference
 * (tools/bench_mlperf_ref.c): plain files through the page cache, held to a memory budget. */
#ifndef KVT_BENCH_MLPERF_REF_H
#define KVT_BENCH_MLPERF_REF_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"
#include "kvtier.h"

struct mref;

/* Files under <dir>/ref, at most max_chunks chunks per conversation, threads workers
 * (the queue depth), the page cache held to cache_budget bytes, fdatasync before a write
 * completes if fsync_data. */
int mref_open(const char *dir, uint32_t n_users, uint32_t max_chunks, unsigned threads,
	      uint64_t cache_budget, bool fsync_data, struct mref **out);
/* Chunk chunk (len bytes) of user's conversation conv; cb runs from mref_poll, with
 * kvt_result's status and bytes as the store's. A get of a chunk not stored (never written,
 * or its write failed, e.g. the disk was full): -ENOENT; a write refused for space: -ENOSPC. */
int mref_put(struct mref *r, uint32_t user, uint64_t conv, uint32_t chunk, const void *buf,
	     size_t len, kvt_cb cb, void *arg);
int mref_get(struct mref *r, uint32_t user, uint64_t conv, uint32_t chunk, void *buf,
	     size_t len, kvt_cb cb, void *arg);
int mref_poll(struct mref *r, int timeout_ms);
/* Bytes dropped from the page cache to keep within the budget. */
uint64_t mref_dropped_bytes(const struct mref *r);
/* Waits for the workers and removes every file. */
void mref_close(struct mref *r);
/* Wait until the device under dir has had nothing in flight for a second (at most 60 s):
 * the removal's discards are the reference's cost, not the store's. */
void mref_settle(const char *dir);

#endif
