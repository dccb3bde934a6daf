/*
 * nvme_bench.c - throughput of the nvme tier through its vtable, shaped like the fio jobs
 * it is compared with (bench/nvme_vs_fio.sh): a closed loop of --qd operations in flight,
 * each completion submitting the next one from the tier's callback, fixed object size,
 * random keys for reads. Prints one parseable summary line per phase:
 *   nvme_bench phase=write objects=N bs=B qd=Q seconds=S MBps=X iops=Y
 * Not a test: numbers only, compared against fio in the same run.
 */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tier.h"

static struct kvt_tier *tier;
static uint64_t bs = 2u << 20, n_objects = 1024, duration_ns = 10000000000ull;
static unsigned qd = 32;
static uint64_t read_limit; /* 0: time-based */
static uint64_t key_offset; /* -k: write keys offset.. (a second set, to fill a full cache) */
static _Atomic uint64_t next_id, done_ops, done_bytes, failures;
static _Atomic int running;
static uint64_t t_end;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;

struct slot {
	void *buf;
	uint64_t state; /* xorshift for random reads */
};

static struct kvt_key key_of(uint64_t i)
{
	struct kvt_key k;
	for (int w = 0; w < 4; w++) {
		uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull + (uint64_t)w * 0x632be59bd9b4e019ull;
		x ^= x >> 31;
		x *= 0xbf58476d1ce4e5b9ull;
		x ^= x >> 29;
		memcpy(k.bytes + 8 * w, &x, 8);
	}
	return k;
}

static void slot_done(void)
{
	pthread_mutex_lock(&m);
	running--;
	pthread_cond_signal(&c);
	pthread_mutex_unlock(&m);
}

static void on_write(void *arg, int64_t res);
static void on_read(void *arg, int64_t res);

static void submit_write(struct slot *s)
{
	uint64_t id = atomic_fetch_add(&next_id, 1);
	if (id >= n_objects) {
		slot_done();
		return;
	}
	struct kvt_key k = key_of(id + key_offset);
	if (tier->ops->write(tier, &k, s->buf, bs, on_write, s) < 0) {
		failures++;
		slot_done();
	}
}

static void on_write(void *arg, int64_t res)
{
	if (res < 0)
		failures++;
	else {
		done_ops++;
		done_bytes += bs;
	}
	submit_write(arg);
}

static void submit_read(struct slot *s)
{
	if (read_limit ? atomic_fetch_add(&next_id, 1) >= read_limit : kvt__now_ns() >= t_end) {
		slot_done();
		return;
	}
	s->state ^= s->state << 13;
	s->state ^= s->state >> 7;
	s->state ^= s->state << 17;
	struct kvt_key k = key_of(s->state % n_objects);
	struct kvt_seg seg = {0, bs, s->buf};
	if (tier->ops->read(tier, &k, &seg, 1, on_read, s) < 0) {
		failures++;
		slot_done();
	}
}

static void on_read(void *arg, int64_t res)
{
	if (res < 0)
		failures++;
	else {
		done_ops++;
		done_bytes += (uint64_t)res;
	}
	submit_read(arg);
}

static void run_phase(const char *name, struct slot *slots, void (*submit)(struct slot *))
{
	done_ops = done_bytes = failures = 0;
	next_id = 0;
	running = (int)qd;
	uint64_t t0 = kvt__now_ns();
	t_end = t0 + duration_ns;
	for (unsigned i = 0; i < qd; i++)
		submit(&slots[i]);
	pthread_mutex_lock(&m);
	while (running > 0)
		pthread_cond_wait(&c, &m);
	pthread_mutex_unlock(&m);
	double s = (double)(kvt__now_ns() - t0) / 1e9;
	printf("nvme_bench phase=%s objects=%llu bs=%llu qd=%u seconds=%.2f MBps=%.1f iops=%.1f "
	       "failures=%llu\n",
	       name, (unsigned long long)n_objects, (unsigned long long)bs, qd, s,
	       (double)done_bytes / s / 1e6, (double)done_ops / s, (unsigned long long)failures);
	fflush(stdout);
}

static void log_fn(void *arg, int level, const char *msg)
{
	(void)arg;
	fprintf(stderr, "[%d] %s\n", level, msg);
}

int main(int argc, char **argv)
{
	const char *dir = "/tmp/kvt-nvme-bench", *fsync_mode = "none", *phases = "write,read";
	unsigned ring_qd = 0;
	int o;
	while ((o = getopt(argc, argv, "d:b:n:q:Q:s:f:p:r:k:")) != -1) {
		switch (o) {
		case 'd':
			dir = optarg;
			break;
		case 'b':
			bs = strtoull(optarg, NULL, 0);
			break;
		case 'n':
			n_objects = strtoull(optarg, NULL, 0);
			break;
		case 'q':
			qd = (unsigned)atoi(optarg);
			break;
		case 'Q':
			ring_qd = (unsigned)atoi(optarg);
			break;
		case 's':
			duration_ns = (uint64_t)(atof(optarg) * 1e9);
			break;
		case 'f':
			fsync_mode = optarg;
			break;
		case 'p':
			phases = optarg;
			break;
		case 'r':
			read_limit = strtoull(optarg, NULL, 0);
			break;
		case 'k':
			key_offset = strtoull(optarg, NULL, 0);
			break;
		default:
			fprintf(
			    stderr,
			    "usage: %s [-d dir] [-b bytes] [-n objects] [-q ops in flight] "
			    "[-Q ring depth] [-s read seconds] [-f none|data|full] "
			    "[-p write,read] [-r reads (instead of -s)] [-k write key offset]\n",
			    argv[0]);
			return 2;
		}
	}
	char qs[32], err[256];
	snprintf(qs, sizeof(qs), "%u", ring_qd ? ring_qd : qd);
	struct kvt_config *cfg;
	if (kvt_config_create(&cfg) || kvt_config_set(cfg, "nvme.dirs", dir, err, sizeof(err)) ||
	    kvt_config_set(cfg, "nvme.queue_depth", qs, err, sizeof(err)) ||
	    kvt_config_set(cfg, "nvme.fsync", fsync_mode, err, sizeof(err)) ||
	    kvt_config_set(cfg, "nvme.bytes", "1TiB", err, sizeof(err)) ||
	    kvt_config_apply_env(cfg, err, sizeof(err))) { /* KVTIER_NVME_* override */
		fprintf(stderr, "config: %s\n", err);
		return 1;
	}
	struct kvt_log log = {log_fn, NULL, KVT_LOG_INFO};
	struct kvt_geometry g = {1, 1, 128, 16, KVT_DTYPE_BF16, KVT_KIND_KV};
	int rc = kvt__tier_open("nvme", cfg, &log, &g, 0, &tier);
	kvt_config_destroy(cfg);
	if (rc) {
		fprintf(stderr, "open: %s\n", kvt_strerror(rc));
		return 1;
	}
	struct slot *slots = calloc(qd, sizeof(*slots));
	for (unsigned i = 0; i < qd; i++) {
		if (posix_memalign(&slots[i].buf, 4096, bs))
			return 1;
		memset(slots[i].buf, (int)i, bs);
		slots[i].state = 0x12345678u + i * 7919u;
	}
	if (strstr(phases, "write"))
		run_phase("write", slots, submit_write);
	if (strstr(phases, "read"))
		run_phase("read", slots, submit_read);
	struct kvt_tier_stats st;
	tier->ops->stats(tier, &st);
	fprintf(stderr, "tier: objects=%llu bytes=%llu errors=%llu\n",
		(unsigned long long)st.objects, (unsigned long long)st.bytes,
		(unsigned long long)st.errors);
	kvt__tier_close(tier);
	for (unsigned i = 0; i < qd; i++)
		free(slots[i].buf);
	free(slots);
	return 0;
}
