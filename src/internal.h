/*
 * internal.h - cross-file helpers of the library: accounted allocation (so DRAM use is
 * known and allocation failure can be injected in tests), logging through the caller's
 * callback (the library never prints), time, and small utilities. Names are kvt__*.
 */
#ifndef KVT_INTERNAL_H
#define KVT_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvtier.h"

#define KVT_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define KVT_ALIGN_UP(x, a) (((x) + ((a)-1)) & ~((uint64_t)(a)-1))
#define KVT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define KVT_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- allocation: every heap byte of the library goes through these ---- */
void *kvt__malloc(size_t n);
void *kvt__calloc(size_t n, size_t size);
void *kvt__realloc(void *p, size_t n);
char *kvt__strdup(const char *s);
void kvt__free(void *p);
/* KVT_ALIGN-aligned memory for O_DIRECT buffers; freed with kvt__free_aligned. */
void *kvt__aligned_alloc(size_t n);
void kvt__free_aligned(void *p, size_t n);
/* The same for buffers of a huge page or more, mapped 2 MiB-aligned and offered to
 * transparent huge pages (larger block requests); freed with kvt__huge_free(p, same n). */
void *kvt__huge_alloc(size_t n);
void kvt__huge_free(void *p, size_t n);
/* Bytes currently allocated through the wrappers. */
uint64_t kvt__alloc_bytes(void);
/* Test hook: the n-th allocation from now fails (0 disables). */
void kvt__alloc_fail_after(uint64_t n);

/* ---- logging ---- */
struct kvt_log {
	kvt_log_fn fn;
	void *arg;
	int level;
};
void kvt__logf(const struct kvt_log *log, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
#define KVT_ERR(log, ...) kvt__logf((log), KVT_LOG_ERROR, __VA_ARGS__)
#define KVT_WARN(log, ...) kvt__logf((log), KVT_LOG_WARN, __VA_ARGS__)
#define KVT_INFO(log, ...) kvt__logf((log), KVT_LOG_INFO, __VA_ARGS__)
#define KVT_DEBUG(log, ...) kvt__logf((log), KVT_LOG_DEBUG, __VA_ARGS__)

/* For failures that repeat with every request (a server that is down or full, an endpoint
 * that refuses): at most one line a second per limiter, so they cannot flood the caller's
 * log; the next line that goes out says how many were left out. Zero-initialised; shared
 * between threads (plain words under __atomic builtins, so C++ units may include this). */
struct kvt_log_limit {
	uint64_t last_ns;
	uint64_t dropped;
};
#define KVT_LOG_LIMIT_NS 1000000000ull
void kvt__logf_limited(const struct kvt_log *log, struct kvt_log_limit *lim, int level,
		       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ---- time ---- */
uint64_t kvt__now_ns(void); /* CLOCK_MONOTONIC */
/* Replace the control characters of s (at most cap bytes, up to its NUL) with '?' - C0,
 * DEL, C1 (as UTF-8) and every byte that is not part of a UTF-8 sequence (a lone 0x9b is
 * CSI to an 8-bit terminal) - leaving other UTF-8 as it is: an error message that echoes
 * input (a config value, a trace's field name) stays one line and carries no terminal
 * escape. */
void kvt__scrub_controls(char *s, size_t cap);

/* ---- statistics: the one percentile of the code base (sim, replay, bench) ---- */
int kvt__cmp_double(const void *a, const void *b); /* qsort ascending */
/* Nearest-rank percentile of sorted[0..n): p in [0, 1]; 0 when n is 0. */
double kvt__percentile(const double *sorted, size_t n, double p);

/* ---- keys ---- */
/* A well-mixed 64-bit hash of a key: all 32 bytes folded into one word, then a
 * murmur3-style finaliser, so opaque keys that differ only in their tail (an engine's
 * short hashes padded with zeros) still spread over buckets. Not cryptographic. */
uint64_t kvt__key_hash(const struct kvt_key *key);
/* memcmp, not uint64_t loads: a struct kvt_key has no alignment guarantee. Compilers turn
 * a fixed 32-byte memcmp into a few vector compares. */
static inline bool kvt__key_eq(const struct kvt_key *a, const struct kvt_key *b)
{
	return !memcmp(a->bytes, b->bytes, KVT_KEY_BYTES);
}

/* The key named by exactly 2*KVT_KEY_BYTES lowercase hex digits at hex (no terminator
 * needed): the canonical form tiers use in object names. 0, or -EINVAL for anything else. */
int kvt__key_from_lowerhex(const char *hex, struct kvt_key *key);

/* ---- CRC32C (Castagnoli), through ISA-L ---- */
/* Standard CRC32C of buf continuing from crc (start with 0). crc32c("123456789") = 0xe3069283. */
uint32_t kvt__crc32c(uint32_t crc, const void *buf, size_t len);
/* The CRC32C of A then B, from crc1 = CRC of A, crc2 = CRC of B and len2 = B's bytes,
 * without reading either. _shift_op(len2) is the factor that depends only on len2: with
 * it, _combine_op(op, crc1, crc2) does the same in a few dozen operations, for many pieces
 * of one length. */
uint32_t kvt__crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);
uint32_t kvt__crc32c_shift_op(uint64_t len2);
uint32_t kvt__crc32c_combine_op(uint32_t op, uint32_t crc1, uint32_t crc2);

#endif
