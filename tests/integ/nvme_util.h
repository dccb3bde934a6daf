/*
 * nvme_util.h - helpers shared by the nvme tier integration programs: synchronous wrappers
 * over the asynchronous tier calls, a log sink that keeps messages for assertions,
 * deterministic keys and self-checking payloads (each object's bytes derive from its key
 * and carry a CRC32C, so any torn or mixed-up object is caught), temp directories.
 */
#ifndef KVT_NVME_UTIL_H
#define KVT_NVME_UTIL_H

#include "lib/check.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tier.h"


/* ---- log capture */
struct logcap {
	pthread_mutex_t m;
	char text[1 << 16];
	size_t len;
	int verbose;
};
static struct logcap g_log = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0};

static inline void log_fn(void *arg, int level, const char *msg)
{
	struct logcap *l = arg;
	pthread_mutex_lock(&l->m);
	int n = snprintf(l->text + l->len, sizeof(l->text) - l->len, "%d %s\n", level, msg);
	if (n > 0 && l->len + (size_t)n < sizeof(l->text))
		l->len += (size_t)n;
	pthread_mutex_unlock(&l->m);
	if (l->verbose || getenv("KVT_TEST_VERBOSE"))
		fprintf(stderr, "log[%d] %s\n", level, msg);
}

static inline void log_clear(void)
{
	pthread_mutex_lock(&g_log.m);
	g_log.len = 0;
	g_log.text[0] = 0;
	pthread_mutex_unlock(&g_log.m);
}

/* Occurrences of needle in the captured log. */
static inline int log_count(const char *needle)
{
	int n = 0;
	pthread_mutex_lock(&g_log.m);
	for (const char *p = g_log.text; (p = strstr(p, needle)); p++)
		n++;
	pthread_mutex_unlock(&g_log.m);
	return n;
}

static const struct kvt_log test_log = {log_fn, &g_log, KVT_LOG_DEBUG};
static const struct kvt_geometry test_geom = {2, 1, 128, 16, KVT_DTYPE_BF16, KVT_KIND_KV};

/* ---- opening a tier: NULL-terminated key, value pairs */
static inline int open_tier(struct kvt_tier **t, const char *first, ...)
{
	struct kvt_config *cfg;
	char err[256];
	if (kvt_config_create(&cfg))
		return -ENOMEM;
	va_list ap;
	va_start(ap, first);
	for (const char *k = first; k; k = va_arg(ap, const char *)) {
		const char *v = va_arg(ap, const char *);
		int rc = kvt_config_set(cfg, k, v, err, sizeof(err));
		if (rc) {
			fprintf(stderr, "config %s=%s: %s\n", k, v, err);
			exit(1);
		}
	}
	va_end(ap);
	int rc = kvt__tier_open("nvme", cfg, &test_log, &test_geom, 0, t);
	kvt_config_destroy(cfg);
	return rc;
}

/* ---- synchronous waits */
struct waiter {
	pthread_mutex_t m;
	pthread_cond_t c;
	int done;
	int res;
	int calls;
};
#define WAITER_INIT                                                                                \
	{                                                                                          \
		PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0                       \
	}

static inline void waiter_cb(void *arg, int64_t res)
{
	struct waiter *w = arg;
	pthread_mutex_lock(&w->m);
	w->done = 1;
	w->res = res;
	w->calls++;
	pthread_cond_signal(&w->c);
	pthread_mutex_unlock(&w->m);
}

static inline int waiter_wait(struct waiter *w, int rc)
{
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&w->m);
	while (!w->done)
		pthread_cond_wait(&w->c, &w->m);
	int r = w->res;
	pthread_mutex_unlock(&w->m);
	return r;
}

static inline int t_write(struct kvt_tier *t, const struct kvt_key *k, const void *buf,
			  uint64_t len)
{
	struct waiter w = WAITER_INIT;
	return waiter_wait(&w, t->ops->write(t, k, buf, len, waiter_cb, &w));
}

static inline int t_read(struct kvt_tier *t, const struct kvt_key *k, struct kvt_seg *segs,
			 uint32_t n)
{
	struct waiter w = WAITER_INIT;
	return waiter_wait(&w, t->ops->read(t, k, segs, n, waiter_cb, &w));
}

static inline int t_read1(struct kvt_tier *t, const struct kvt_key *k, void *buf, uint64_t off,
			  uint64_t len)
{
	struct kvt_seg s = {off, len, buf};
	return t_read(t, k, &s, 1);
}

static inline int t_exists(struct kvt_tier *t, const struct kvt_key *k, uint32_t n,
			   uint8_t *present)
{
	struct waiter w = WAITER_INIT;
	return waiter_wait(&w, t->ops->exists(t, k, n, present, waiter_cb, &w));
}

static inline int t_remove(struct kvt_tier *t, const struct kvt_key *k)
{
	struct waiter w = WAITER_INIT;
	return waiter_wait(&w, t->ops->remove(t, k, waiter_cb, &w));
}

static inline int t_flush(struct kvt_tier *t)
{
	struct waiter w = WAITER_INIT;
	return waiter_wait(&w, t->ops->flush(t, waiter_cb, &w));
}

/* ---- many operations in flight */
struct batch {
	pthread_mutex_t m;
	pthread_cond_t c;
	int outstanding;
	int ok, failed, cancelled;
	int last_err;
};
#define BATCH_INIT                                                                                 \
	{                                                                                          \
		PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0                 \
	}

static inline void batch_add(struct batch *b)
{
	pthread_mutex_lock(&b->m);
	b->outstanding++;
	pthread_mutex_unlock(&b->m);
}

static inline void batch_cb(void *arg, int64_t res)
{
	struct batch *b = arg;
	pthread_mutex_lock(&b->m);
	if (res >= 0)
		b->ok++;
	else if (res == -ECANCELED)
		b->cancelled++;
	else {
		b->failed++;
		b->last_err = res;
	}
	b->outstanding--;
	pthread_cond_broadcast(&b->c);
	pthread_mutex_unlock(&b->m);
}

/* Wait until at most max ops are outstanding. */
static inline void batch_wait(struct batch *b, int max)
{
	pthread_mutex_lock(&b->m);
	while (b->outstanding > max)
		pthread_cond_wait(&b->c, &b->m);
	pthread_mutex_unlock(&b->m);
}

/* ---- keys and payloads */
static inline uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static inline struct kvt_key make_key(uint64_t seed, uint64_t i)
{
	struct kvt_key k;
	for (int w = 0; w < 4; w++) {
		uint64_t v = mix64(seed * 0x100000001b3ull + i * 4 + (uint64_t)w);
		memcpy(k.bytes + 8 * w, &v, 8);
	}
	return k;
}

/* Object layout: [0..8) magic, [8..16) length, [16..48) key, [48..52) crc32c of bytes
 * [64..len), rest: words derived from the key and their offset. */
#define PAYLOAD_MAGIC 0x6b76746e766d6521ull

static inline void fill_object(uint8_t *buf, uint64_t len, const struct kvt_key *k)
{
	uint64_t seed;
	memcpy(&seed, k->bytes, 8);
	for (uint64_t off = 64; off + 8 <= len; off += 8) {
		uint64_t v = mix64(seed ^ off);
		memcpy(buf + off, &v, 8);
	}
	memset(buf, 0, 64);
	uint64_t magic = PAYLOAD_MAGIC;
	memcpy(buf, &magic, 8);
	memcpy(buf + 8, &len, 8);
	memcpy(buf + 16, k->bytes, 32);
	uint32_t crc = kvt__crc32c(0, buf + 64, len - 64);
	memcpy(buf + 48, &crc, 4);
}

/* 0 if buf[0..len) is exactly the object of key k and length len. */
static inline int check_object(const uint8_t *buf, uint64_t len, const struct kvt_key *k)
{
	uint64_t magic, l;
	uint32_t crc;
	memcpy(&magic, buf, 8);
	memcpy(&l, buf + 8, 8);
	memcpy(&crc, buf + 48, 4);
	if (magic != PAYLOAD_MAGIC || l != len || memcmp(buf + 16, k->bytes, 32))
		return -1;
	if (kvt__crc32c(0, buf + 64, len - 64) != crc)
		return -2;
	uint64_t seed;
	memcpy(&seed, k->bytes, 8);
	for (uint64_t off = 64; off + 8 <= len; off += 8) {
		uint64_t v = mix64(seed ^ off), got;
		memcpy(&got, buf + off, 8);
		if (got != v)
			return -3;
	}
	return 0;
}

static inline void *abuf(uint64_t len)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, len ? len : 4096))
		exit(1);
	return p;
}

/* ---- directories */
#include "lib/rm_rf.h"   /* rm_rf */

/* Files under a tier directory whose name starts with prefix (e.g. ".tmp." or "" for
 * objects ending in suffix ".kvt"). */
static inline int count_files(const char *dir, const char *prefix, const char *suffix)
{
	int n = 0;
	char sub[4096];
	for (int i = -1; i < 256; i++) {
		if (i < 0)
			snprintf(sub, sizeof(sub), "%s", dir);
		else
			snprintf(sub, sizeof(sub), "%s/%02x", dir, i);
		DIR *d = opendir(sub);
		if (!d)
			continue;
		struct dirent *de;
		while ((de = readdir(d))) {
			size_t nl = strlen(de->d_name), sl = strlen(suffix);
			if (de->d_name[0] == '.' && !prefix[0])
				continue;
			if (!strncmp(de->d_name, prefix, strlen(prefix)) && nl >= sl &&
			    !strcmp(de->d_name + nl - sl, suffix) && strcmp(de->d_name, ".") &&
			    strcmp(de->d_name, ".."))
				n++;
		}
		closedir(d);
	}
	return n;
}

/* Set or clear the immutable flag of p (root only): no rename, unlink or write of it. */
static inline void set_immutable(const char *p, int on)
{
	int fd = open(p, O_RDONLY | O_CLOEXEC), fl = 0;
	CHECK(fd >= 0);
	CHECK_EQ(ioctl(fd, FS_IOC_GETFLAGS, &fl), 0);
	fl = on ? fl | FS_IMMUTABLE_FL : fl & ~FS_IMMUTABLE_FL;
	CHECKM(ioctl(fd, FS_IOC_SETFLAGS, &fl) == 0,
	       "cannot make %s immutable (the file system of /tmp must support it): %s", p,
	       strerror(errno));
	close(fd);
}

static inline void key_path(const char *dir, const struct kvt_key *k, char *out, size_t len)
{
	char hex[65];
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", k->bytes[i]);
	snprintf(out, len, "%s/%.2s/%s.kvt", dir, hex, hex);
}

/* Everything a tier's scan lists (keys and sizes), in a growable array: c.n = 0 before
 * each scan reuses it. */
struct collect {
	struct kvt_key *keys;
	uint64_t *bytes;
	int n, cap;
};

static inline int collect_fn(void *arg, const struct kvt_key *k, uint64_t bytes)
{
	struct collect *c = arg;
	if (c->n == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 1024;
		c->keys = realloc(c->keys, (size_t)c->cap * sizeof(*c->keys));
		c->bytes = realloc(c->bytes, (size_t)c->cap * sizeof(*c->bytes));
		CHECK(c->keys && c->bytes);
	}
	c->keys[c->n] = *k;
	c->bytes[c->n++] = bytes;
	return 0;
}

/* ---- whole kvtier objects of test_geom (16 tokens: a 20 KiB object), for the log tests */

#include "format.h"
#include "tier_nvme_log.h"

#define NV_TEST_TOKENS 16

static inline uint64_t nv_test_obj_bytes(void)
{
	return kvt_object_bytes(&test_geom, NV_TEST_TOKENS);
}

/* Key (seed, i) as a sound kvtier object, written on its own (one batch). */
static inline void nv_test_put(struct kvt_tier *t, uint64_t seed, uint64_t i)
{
	struct kvt_key k = make_key(seed, i);
	uint64_t len = nv_test_obj_bytes();
	uint64_t plen = test_geom.layers * kvt_layer_bytes(&test_geom, NV_TEST_TOKENS);
	uint8_t *obj = abuf(len), *pay = malloc(plen);
	CHECK(pay);
	for (uint64_t j = 0; j < plen; j++)
		pay[j] = (uint8_t)(j * 31 + i * 7 + seed);
	uint8_t ns[KVT_NS_ID_BYTES] = {0};
	CHECK_EQ(kvt__object_encode(obj, len, &test_geom, ns, &k, NV_TEST_TOKENS, pay, plen), 0);
	CHECK_EQ(t_write(t, &k, obj, len), 0);
	free(pay);
	free(obj);
}

/* Key (seed, i) is served: listed, and it reads back as a sound object. */
static inline int nv_test_served(struct kvt_tier *t, uint64_t seed, uint64_t i)
{
	struct kvt_key k = make_key(seed, i);
	uint8_t p = 0;
	CHECK_EQ(t_exists(t, &k, 1, &p), 0);
	if (!p)
		return 0;
	uint64_t len = nv_test_obj_bytes();
	uint8_t *b = abuf(len);
	int rc = t_read1(t, &k, b, 0, len);
	struct kvt_expect exp = {.key = &k};
	int ok = rc == (int)len && kvt__object_verify(b, len, &exp, NULL) == 0;
	free(b);
	return ok;
}

/* The offsets of log segment n's valid records under dir, in order, as the open's walk
 * finds them (at most max); their count. */
static inline int nv_test_log_records(const char *dir, uint32_t n, uint64_t *at, int max)
{
	char p[4400];
	snprintf(p, sizeof(p), "%s/log/%u.kvl", dir, n);
	int fd = open(p, O_RDONLY);
	CHECK(fd >= 0);
	struct nv_log_seghdr h;
	CHECK_EQ(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	struct nv_log_rec r;
	uint64_t off = NV_LOG_BLOCK;
	int nr = 0;
	while (nr < max && pread(fd, &r, sizeof(r), (off_t)off) == (ssize_t)sizeof(r) &&
	       !memcmp(r.magic, NV_LOG_REC_MAGIC, sizeof(r.magic)) && r.gen == h.gen &&
	       r.off == off && r.len >= NV_LOG_BLOCK) {
		at[nr++] = off;
		off += r.len;
	}
	close(fd);
	return nr;
}

/* The log segment file at path gets a header without its size, as a build before
 * 2026-12-06 wrote it (CRC recomputed): a cut of it then cannot be told from its end, as
 * then. For tests that cut segments to reach states other than a cut's (a short segment,
 * a stopped log); a file with no header is left as it is. */
static inline void nv_test_hdr_unsized(const char *path)
{
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	uint8_t *blk = abuf(NV_LOG_BLOCK);
	if (pread(fd, blk, NV_LOG_BLOCK, 0) == NV_LOG_BLOCK &&
	    !memcmp(blk, NV_LOG_SEG_MAGIC, 8)) {
		struct nv_log_seghdr *h = (struct nv_log_seghdr *)blk;
		h->bytes = 0;
		h->crc = nv_log_crc(blk);
		CHECK_EQ(pwrite(fd, blk, NV_LOG_BLOCK, 0), NV_LOG_BLOCK);
	}
	free(blk);
	close(fd);
}

/* One bit of the length of the record at off in log segment n under dir flipped (8 KiB):
 * its CRC then fails - damage, not a tear. */
static inline void nv_test_flip_rec_len(const char *dir, uint32_t n, uint64_t off)
{
	char p[4400];
	snprintf(p, sizeof(p), "%s/log/%u.kvl", dir, n);
	int fd = open(p, O_RDWR);
	CHECK(fd >= 0);
	off_t at = (off_t)(off + offsetof(struct nv_log_rec, len) + 1);
	uint8_t x;
	CHECK_EQ(pread(fd, &x, 1, at), 1);
	x ^= 0x20;
	CHECK_EQ(pwrite(fd, &x, 1, at), 1);
	close(fd);
}

#endif
