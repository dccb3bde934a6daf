/*
 * kvtier_layout.h - moving canonical chunks between a kvtier store and an engine's host
 * rows laid out its own way, one call per batch of chunks.
 *
 * Why: an engine that keeps KV in host memory in its own layout (vLLM's CPU offload tier:
 * one "row" per offloaded chunk, whose interior depends on the attention backend) had to
 * read each chunk into a buffer and permute it in Python, needing the interpreter's lock
 * many times per chunk; behind a busy engine loop that starved the restore for seconds.
 * Here a whole load (or store) job is one call that needs no lock of the caller: the reads
 * are waited for in C, with the job's deadline, and each chunk is written straight into
 * its destination row described by strides, so any backend's layout is a stride set.
 *
 * The canonical chunk is the payload of kvt_put/kvt_get (include/kvtier.h): per layer,
 * K then V, each [chunk_tokens][kv_heads][head_dim], dense. A row holds the same
 * elements elsewhere: element (layer l, token t, head h, dim d) of K is at
 *
 *   k.offset + l*k.layer + (t / block_tokens)*k.block + (t % block_tokens)*k.token
 *            + (h / heads_per_rank)*k.rank + (h % heads_per_rank)*k.head + d*k.dim
 *
 * elements from the start of the row (V likewise with v). The strides are in elements of
 * elem_bytes each; a row is row_bytes long and every element must fall inside it. Rows
 * are copied as integers of elem_bytes: bit-exact. Examples (python/kvtier/vllm/layout.py
 * derives these from its tensor views): vLLM's CPU "vec" pages (per rank, layer, block,
 * head: K transposed [head_dim][block_tokens], then V [block_tokens][head_dim]) and
 * FlashAttention's [block_tokens][heads][K | V].
 *
 * Tiled pages (token_tile or dim_tile non-zero): a page laid out for matrix units packs
 * small tiles, e.g. vLLM's CPU "amx" pages, whose K holds 16 tokens x 2 dims per tile and
 * V 2 tokens x 16 dims. Then the token term above, for tt = t % block_tokens, is
 *
 *   (tt / token_tile)*token_tile_stride + (tt % token_tile)*token
 *
 * (block_tokens a multiple of token_tile), and the dim term (d / dim_tile)*dim_tile_stride
 * + (d % dim_tile)*dim (head_dim a multiple of dim_tile). 0: not tiled, the plain term.
 */
#ifndef KVTIER_LAYOUT_H
#define KVTIER_LAYOUT_H

#include "kvtier.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvt_row_strides {
	int64_t offset; /* element (0, 0, 0, 0) */
	int64_t layer, block, token, rank, head, dim;
	int64_t token_tile, token_tile_stride; /* 0, 0: tokens not tiled (see above) */
	int64_t dim_tile, dim_tile_stride;     /* 0, 0: dims not tiled */
};

struct kvt_row_layout {
	uint32_t elem_bytes;       /* 1, 2 or 4 */
	uint32_t layers;           /* the canonical chunk's geometry (all heads) */
	uint32_t kv_heads;
	uint32_t head_dim;
	uint32_t block_tokens;     /* chunk_tokens = block_tokens * blocks_per_chunk */
	uint32_t blocks_per_chunk;
	uint32_t heads_per_rank;   /* kv_heads % heads_per_rank == 0 */
	uint32_t reserved;         /* 0 */
	uint64_t row_bytes;        /* distance between rows; every element lies inside one */
	struct kvt_row_strides k, v;
};

/* 0 if the layout is usable: sizes non-zero, strides >= 0, every element inside
 * row_bytes; -EINVAL otherwise. */
KVT_EXPORT int kvt_row_layout_check(const struct kvt_row_layout *lay);
/* Dense bytes of one canonical chunk of the layout. */
KVT_EXPORT uint64_t kvt_row_layout_chunk_bytes(const struct kvt_row_layout *lay);

/* One chunk, no store: canonical -> row and row -> canonical. 0 or -EINVAL. */
KVT_EXPORT int kvt_row_from_canonical(const struct kvt_row_layout *lay, const void *chunk,
				      void *row);
KVT_EXPORT int kvt_row_to_canonical(const struct kvt_row_layout *lay, const void *row,
				    void *chunk);

/* Rows of an engine bound to a store, with staging buffers of its own (made and touched
 * at open, reused: no page faults on a restore's path). Calls on one handle may come from
 * several threads at once; they share its staging buffers. */
struct kvt_rows;

/* rows: n_rows rows of lay->row_bytes each, borrowed until kvt_rows_close.
 * staging: how many chunk buffers (reads or writes in flight at once, all calls
 * together), >= 1. The store's geometry must match the layout (its payload size). */
KVT_EXPORT int kvt_rows_open(struct kvt_store *s, const struct kvt_row_layout *lay, void *rows,
			     uint64_t n_rows, uint32_t staging, struct kvt_rows **out);
/* Waits for the reads and writes still in flight (each bounded by its tier deadline),
 * then frees the handle. Call before kvt_store_close. The calls below that use the store
 * (and kvt_rows_open) are calls on it like any other: once it is closing they return
 * -ECANCELED, and a close waits for those running (include/kvtier.h, kvt_store_close). A
 * handle's own calls must have returned before kvt_rows_close, a job's before
 * kvt_rows_job_free: those free what the calls use. */
KVT_EXPORT void kvt_rows_close(struct kvt_rows *r);

/* Why chunk `done` of a batch failed. */
enum kvt_rows_failure {
	KVT_ROWS_OK = 0,        /* every chunk done */
	KVT_ROWS_MISS = 1,      /* -ENOENT: the chunk is in no tier */
	KVT_ROWS_CORRUPT = 2,   /* -EBADMSG: it failed its checks (never copied) */
	KVT_ROWS_TIMEOUT = 3,   /* -ETIMEDOUT: a tier missed its own deadline */
	KVT_ROWS_DEADLINE = 4,  /* the batch's deadline passed first */
	KVT_ROWS_SHORT = 5,     /* the stored chunk has fewer tokens than a full one */
	KVT_ROWS_ERROR = 6,     /* anything else (status tells) */
};

struct kvt_rows_result {
	uint32_t done;       /* leading chunks that succeeded */
	int32_t failure;     /* enum kvt_rows_failure of chunk `done` */
	int32_t status;      /* its -errno (0 when all done) */
	uint32_t reserved;
	uint64_t wait_ns;    /* time the call spent waiting for the store */
	uint64_t convert_ns; /* time spent converting, summed over the threads that did */
	uint64_t submit_ns;  /* time spent in the store's submitting calls (and the inline
			      * conversions of DRAM hits) */
};

/* Read keys[0..n) and write each into row row_ids[i] (converted on the thread its read
 * completes on, or on this one). Returns the number of leading chunks written (res->done).
 * The failed chunk's row is never written; a later chunk's row may hold that chunk when
 * its read completed before the failure was known; nothing is written after the call
 * returns (reads it gave up are dropped when they complete). deadline_ns: CLOCK_MONOTONIC;
 * 0 = none (the tiers' own deadlines still bound every read); no chunk is read once it has
 * passed, a DRAM hit included (KVT_ROWS_DEADLINE). -EINVAL on bad arguments (nothing
 * read). keys are taken as one chain in order: a chunk promoted into DRAM by the load is
 * linked there to keys[i-1] as its parent, as a put with that parent would be (eviction
 * order, and the parent in KV events). */
KVT_EXPORT int kvt_rows_load(struct kvt_rows *r, const struct kvt_key *keys,
			     const uint64_t *row_ids, size_t n, uint64_t deadline_ns,
			     struct kvt_rows_result *res);
/* The same load without waiting, for a caller whose thread must not block and should not
 * hand the job to another thread (an engine's scheduler holding a language runtime's lock:
 * a helper thread would need that lock back to report): start queues the job (keys and
 * row_ids are copied) for the handle's pump thread (made at the first start; joined by
 * kvt_rows_close), which submits its reads as the handle's permits come back - started
 * jobs are served oldest first - and converts its DRAM hits; poll looks at the job (checks
 * the deadline) and returns 1 with res filled once it is over, 0 while not, waiting up to
 * timeout_ms for that (0: not at all, -1: no limit); free gives the job up if it is not
 * over (nothing is written into a row once free returns) and releases it. Where the pump
 * thread cannot be made, start and poll submit the reads themselves.
 * One thread at a time polls a job. A store in client mode (store.daemon) queues the job
 * for the handle's two worker threads, which run jobs in arrival order (one call to the
 * daemon per chunk, each bounded by the deadline); free then returns at once, and the
 * job's last call ends by its deadline (kvt_rows_close waits for the workers). */
struct kvt_rows_job;
KVT_EXPORT int kvt_rows_load_start(struct kvt_rows *r, const struct kvt_key *keys,
				   const uint64_t *row_ids, size_t n, uint64_t deadline_ns,
				   struct kvt_rows_job **out);
/* kvt_rows_load_start for keys that are not one chain: linked[i] (i > 0) says keys[i-1] is
 * chunk i's parent, the chunk right before it in its prompt; 0, that the chunk before it
 * in the prompt is not in this load (a primary tier that holds it: the load names only
 * what it misses), so a promotion names no parent. linked NULL: every chunk after the
 * first is linked, as kvt_rows_load_start. */
KVT_EXPORT int kvt_rows_load_start_linked(struct kvt_rows *r, const struct kvt_key *keys,
					  const uint8_t *linked, const uint64_t *row_ids,
					  size_t n, uint64_t deadline_ns,
					  struct kvt_rows_job **out);
KVT_EXPORT int kvt_rows_job_poll(struct kvt_rows_job *j, int timeout_ms,
				 struct kvt_rows_result *res);
KVT_EXPORT void kvt_rows_job_free(struct kvt_rows_job *j);

/* Convert rows row_ids[0..n) and kvt_put each under keys[i] with parent parents[i] when
 * has_parent[i] (either may be NULL: no parents). Returns the number of leading chunks
 * the store accepted (a put completes once its bytes are in a DRAM slot, or written where
 * there is no DRAM tier). */
KVT_EXPORT int kvt_rows_store(struct kvt_rows *r, const struct kvt_key *keys,
			      const struct kvt_key *parents, const uint8_t *has_parent,
			      const uint64_t *row_ids, size_t n, uint64_t deadline_ns,
			      struct kvt_rows_result *res);
/* The keys of store chunks (kvt_rows_store on this handle) that were stored but not
 * counted in their call's result: puts still in flight when the call returned (at its
 * deadline, or at an earlier chunk's failure) that succeeded since, and puts that had
 * succeeded out of order after the first chunk not done. Each is reported once, oldest
 * first; up to max are copied into keys and taken, and their number returned (0: none). At
 * most 4096 are kept between two calls (the oldest are dropped). In client mode
 * (store.daemon) a put cut at its call's deadline may still land in kvtierd: such a chunk
 * is looked up after a later kvt_rows_store on the handle that went through (on that
 * call's thread, within 200 ms of its time, if 20 ms of it are left) and reported here once
 * found, up to a minute after its cut (until 2026-12-07 client mode reported none). */
KVT_EXPORT size_t kvt_rows_store_late(struct kvt_rows *r, struct kvt_key *keys, size_t max);

#ifdef __cplusplus
}
#endif
#endif
