/*
 * util.c - foundations shared by every subsystem: the accounted allocator (one place to
 * count the library's heap and to inject allocation failures in tests), logging through
 * the caller's callback, the monotonic clock, CRC32C through ISA-L, key hashing,
 * kvt_strerror() and the one percentile function (simulator, replay and benchmarks).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <isa-l/crc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "internal.h"

static _Atomic uint64_t alloc_bytes;
static _Atomic uint64_t alloc_fail_countdown;

/* Each block carries its size in a 16-byte prefix so free can account without a table. */
#define PREFIX 16

static bool inject_failure(void)
{
	uint64_t n = atomic_load(&alloc_fail_countdown);
	while (n) {
		if (atomic_compare_exchange_weak(&alloc_fail_countdown, &n, n - 1))
			return n == 1;
	}
	return false;
}

void kvt__alloc_fail_after(uint64_t n)
{
	atomic_store(&alloc_fail_countdown, n);
}

uint64_t kvt__alloc_bytes(void)
{
	return atomic_load(&alloc_bytes);
}

void *kvt__malloc(size_t n)
{
	if (inject_failure() || n > SIZE_MAX - PREFIX)
		return NULL;
	unsigned char *p = malloc(n + PREFIX);
	if (!p)
		return NULL;
	memcpy(p, &n, sizeof(n));
	atomic_fetch_add(&alloc_bytes, n);
	return p + PREFIX;
}

/* calloc, not malloc and memset: a large block comes from fresh pages the kernel zeroes
 * when first touched, so allocating a big table (the NVMe index's next size) costs no
 * pass over it (a memset of 32 MiB stalled the ring thread 14 ms). */
void *kvt__calloc(size_t n, size_t size)
{
	if (size && n > SIZE_MAX / size)
		return NULL;
	size_t b = n * size;
	if (inject_failure() || b > SIZE_MAX - PREFIX)
		return NULL;
	unsigned char *p = calloc(1, b + PREFIX);
	if (!p)
		return NULL;
	memcpy(p, &b, sizeof(b));
	atomic_fetch_add(&alloc_bytes, b);
	return p + PREFIX;
}

void *kvt__realloc(void *p, size_t n)
{
	if (!p)
		return kvt__malloc(n);
	if (inject_failure() || n > SIZE_MAX - PREFIX)
		return NULL;
	unsigned char *base = (unsigned char *)p - PREFIX;
	size_t old;
	memcpy(&old, base, sizeof(old));
	unsigned char *q = realloc(base, n + PREFIX);
	if (!q)
		return NULL;
	memcpy(q, &n, sizeof(n));
	atomic_fetch_add(&alloc_bytes, n);
	atomic_fetch_sub(&alloc_bytes, old);
	return q + PREFIX;
}

char *kvt__strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = kvt__malloc(n);
	if (p)
		memcpy(p, s, n);
	return p;
}

void kvt__free(void *p)
{
	if (!p)
		return;
	unsigned char *base = (unsigned char *)p - PREFIX;
	size_t n;
	memcpy(&n, base, sizeof(n));
	atomic_fetch_sub(&alloc_bytes, n);
	free(base);
}

void *kvt__aligned_alloc(size_t n)
{
	if (inject_failure())
		return NULL;
	void *p = NULL;
	size_t len = KVT_ALIGN_UP(n ? n : 1, KVT_ALIGN);
	if (posix_memalign(&p, KVT_ALIGN, len))
		return NULL;
	atomic_fetch_add(&alloc_bytes, len);
	return p;
}

void kvt__free_aligned(void *p, size_t n)
{
	if (!p)
		return;
	atomic_fetch_sub(&alloc_bytes, KVT_ALIGN_UP(n ? n : 1, KVT_ALIGN));
	free(p);
}

/* Buffers of at least a huge page are mapped on their own, aligned to 2 MiB and offered
 * to transparent huge pages: what the DRAM pool does (dram.hugepages), for the buffers an
 * object passes through without one (the engine's bounce buffers). Why: an O_DIRECT I/O
 * becomes one block request per run of physically contiguous pages, at most
 * max_segments (254 on virtio) of them; from 4 KiB pages a 2 MiB write is split into
 * requests of ~0.5 MiB, from a huge page it is one (docs/BENCHMARKS.md, "The machine"). */
#define HUGE_BYTES (2u << 20)

void *kvt__huge_alloc(size_t n)
{
	size_t len = KVT_ALIGN_UP(n ? n : 1, KVT_ALIGN);
	if (len < HUGE_BYTES)
		return kvt__aligned_alloc(n);
	if (inject_failure())
		return NULL;
	/* Map len at a 2 MiB-aligned address: over-map by one huge page and trim. Only the
	 * whole huge pages are offered to THP; a tail (an object's 4 KiB header past 2 MiB)
	 * stays in small pages, so a buffer never holds a mostly empty huge page. */
	size_t map = len + HUGE_BYTES;
	uint8_t *m = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	uint8_t *p = (uint8_t *)KVT_ALIGN_UP((uintptr_t)m, HUGE_BYTES);
	if (p > m)
		munmap(m, (size_t)(p - m));
	if (m + map > p + len)
		munmap(p + len, (size_t)(m + map - (p + len)));
	(void)madvise(p, len / HUGE_BYTES * HUGE_BYTES, MADV_HUGEPAGE); /* a hint only */
	atomic_fetch_add(&alloc_bytes, len);
	return p;
}

void kvt__huge_free(void *p, size_t n)
{
	if (!p)
		return;
	size_t len = KVT_ALIGN_UP(n ? n : 1, KVT_ALIGN);
	if (len < HUGE_BYTES) {
		kvt__free_aligned(p, n);
		return;
	}
	atomic_fetch_sub(&alloc_bytes, len);
	munmap(p, len);
}

void kvt__scrub_controls(char *s, size_t cap)
{
	if (!s)
		return;
	size_t n = strnlen(s, cap);
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x80) {
			if (c < 0x20 || c == 0x7f)
				s[i] = '?';
			i++;
			continue;
		}
		/* a UTF-8 sequence: its length from the lead byte, then its continuation bytes */
		size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
			     : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
		bool ok = len && i + len <= n;
		uint32_t cp = ok ? c & (0xff >> (len + 1)) : 0;
		for (size_t k = 1; ok && k < len; k++) {
			unsigned char d = (unsigned char)s[i + k];
			ok = (d & 0xc0) == 0x80;
			cp = cp << 6 | (d & 0x3f);
		}
		if (!ok) { /* not UTF-8 (a lone 0x9b is CSI to an 8-bit terminal): this byte */
			s[i++] = '?';
			continue;
		}
		if (cp >= 0x80 && cp <= 0x9f) /* the C1 controls, as UTF-8 */
			memset(s + i, '?', len);
		i += len;
	}
}

void kvt__logf(const struct kvt_log *log, int level, const char *fmt, ...)
{
	if (!log || !log->fn || level > log->level)
		return;
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log->fn(log->arg, level, msg);
}

void kvt__logf_limited(const struct kvt_log *log, struct kvt_log_limit *lim, int level,
		       const char *fmt, ...)
{
	if (!log || !log->fn || level > log->level)
		return;
	uint64_t now = kvt__now_ns() | 1; /* 0 means "never logged" */
	uint64_t last = __atomic_load_n(&lim->last_ns, __ATOMIC_RELAXED);
	/* signed: another thread may have stored a later time than our now */
	if ((last && (int64_t)(now - last) < (int64_t)KVT_LOG_LIMIT_NS) ||
	    !__atomic_compare_exchange_n(&lim->last_ns, &last, now, false, __ATOMIC_RELAXED,
					 __ATOMIC_RELAXED)) {
		__atomic_fetch_add(&lim->dropped, 1, __ATOMIC_RELAXED);
		return;
	}
	uint64_t dropped = __atomic_exchange_n(&lim->dropped, 0, __ATOMIC_RELAXED);
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (dropped) {
		size_t n = strlen(msg);
		snprintf(msg + n, sizeof(msg) - n, " (%llu more like it not logged)",
			 (unsigned long long)dropped);
	}
	log->fn(log->arg, level, msg);
}

uint64_t kvt__now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint32_t kvt__crc32c(uint32_t crc, const void *buf, size_t len)
{
	/* ISA-L's crc32_iscsi is the reflected Castagnoli CRC without the final inversion
	 * and with the caller's initial value: wrap it into the standard CRC32C. */
	const unsigned char *p = buf;
	crc = ~crc;
	while (len) {
		int n = len > (1u << 30) ? (1 << 30) : (int)len;
		crc = crc32_iscsi((unsigned char *)p, n, crc);
		p += n;
		len -= (size_t)n;
	}
	return ~crc;
}

/* Combining CRC32Cs (ISA-L has no combine): the CRC of A then B from the CRCs of A and B
 * and B's length, as zlib's crc32_combine does for its own polynomial. The arithmetic is
 * on polynomials over GF(2) modulo the Castagnoli polynomial, in the CRC's reflected bit
 * order (bit 31 is x^0). Appending n bytes multiplies the register by x^(8n), whatever the
 * initial and final inversions (they cancel), so crc(A.B) = crc(A) * x^(8|B|) + crc(B). */
#define CRC32C_POLY_REFLECTED 0x82f63b78u

/* a * b modulo the polynomial */
static uint32_t gf2_mulmod(uint32_t a, uint32_t b)
{
	uint32_t p = 0;
	for (uint32_t m = 1u << 31; m && a; m >>= 1) {
		if (a & m) {
			p ^= b;
			a ^= m;
		}
		b = (b & 1) ? (b >> 1) ^ CRC32C_POLY_REFLECTED : b >> 1;
	}
	return p;
}

/* x^(2^k) modulo the polynomial, k < 67 (enough for x^(8n) of any 64-bit n) */
static uint32_t x_pow2k[67];
static pthread_once_t x_pow2k_once = PTHREAD_ONCE_INIT;

static void x_pow2k_init(void)
{
	uint32_t p = 1u << 30; /* x^1 */
	x_pow2k[0] = p;
	for (unsigned k = 1; k < 67; k++)
		x_pow2k[k] = p = gf2_mulmod(p, p);
}

uint32_t kvt__crc32c_shift_op(uint64_t len)
{
	pthread_once(&x_pow2k_once, x_pow2k_init);
	uint32_t p = 1u << 31; /* x^0 */
	for (unsigned k = 3; len; len >>= 1, k++) /* x^(8 len) = product of x^(2^k), bits of 8 len */
		if (len & 1)
			p = gf2_mulmod(x_pow2k[k], p);
	return p;
}

uint32_t kvt__crc32c_combine_op(uint32_t op, uint32_t crc1, uint32_t crc2)
{
	return gf2_mulmod(op, crc1) ^ crc2;
}

uint32_t kvt__crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
	return kvt__crc32c_combine_op(kvt__crc32c_shift_op(len2), crc1, crc2);
}

uint64_t kvt__key_hash(const struct kvt_key *key)
{
	uint64_t h[4];
	memcpy(h, key->bytes, sizeof(h));
	uint64_t x = h[0] ^ (h[1] * 0x9e3779b97f4a7c15ull) ^ (h[2] >> 7) ^ (h[3] << 3);
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

const char *kvt_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -ENOENT:
		return "not found (miss)";
	case -ENOSPC:
		return "no space: tier full and nothing evictable";
	case -EAGAIN:
		return "too many operations in flight, retry";
	case -EBADMSG:
		return "corrupt or invalid object (format or checksum)";
	case -ETIMEDOUT:
		return "a tier missed its deadline";
	case -ECANCELED:
		return "cancelled: store closing";
	case -EINVAL:
		return "invalid argument";
	case -EDQUOT:
		return "write budget exhausted";
	case -EEXIST:
		return "already exists";
	case -EBUSY:
		return "busy";
	case -ENOMEM:
		return "out of memory";
	case -EIO:
		return "I/O error";
	case -EHOSTDOWN:
		return "tier unavailable (circuit open)";
	default:
		return err < 0 ? strerror(-err) : "unknown";
	}
}

/* ------------------------------------------------------------ percentiles */

int kvt__cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double kvt__percentile(const double *sorted, size_t n, double p)
{
	if (!n)
		return 0;
	size_t i = (size_t)ceil(p * (double)n);
	i = i ? i - 1 : 0;
	return sorted[i < n ? i : n - 1];
}
