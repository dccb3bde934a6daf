/*
 * ceph_harness.h - shared by the s3 and rados tier tests: start a private single-node Ceph
 * with the project's scripts/ceph/start-ceph.sh in a temporary directory, on free loopback
 * ports, and stop it on every way out (normal exit, failed assertion, signal; a watchdog in
 * the script covers SIGKILL). Also: a tier instance built straight from its ops table, and
 * a waitable completion that checks the async contract (exactly once, never on the
 * submitting thread).
 */
#ifndef KVT_CEPH_HARNESS_H
#define KVT_CEPH_HARNESS_H

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tier.h"

static char ceph_dir[256];
static char ceph_scripts[1024];
static int ceph_rgw_port;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);            \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static inline void ceph_stop(void)
{
	static atomic_flag once = ATOMIC_FLAG_INIT;
	if (!ceph_dir[0] || atomic_flag_test_and_set(&once))
		return;
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "'%s/stop-ceph.sh' '%s' >/dev/null 2>&1; rm -rf '%s'",
		 ceph_scripts, ceph_dir, ceph_dir);
	if (getenv("KVT_KEEP_CEPH"))
		snprintf(cmd, sizeof(cmd), "'%s/stop-ceph.sh' '%s' >/dev/null 2>&1", ceph_scripts,
			 ceph_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "warning: stopping the test cluster in %s failed\n", ceph_dir);
}

static inline void on_fatal_signal(int sig)
{
	ceph_stop();
	signal(sig, SIG_DFL);
	raise(sig);
}

static inline int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(a);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &l) < 0) {
		perror("free_port");
		exit(1);
	}
	close(fd);
	return ntohs(a.sin_port);
}

/* Run a shell command; returns its exit status. */
static inline int shf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int shf(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Start a cluster: osds OSDs, radosgw if rgw. Exits 77 when the Ceph packages are missing. */
static inline void ceph_start(int osds, int rgw)
{
	const char *src = getenv("KVT_SRC");
	if (src)
		snprintf(ceph_scripts, sizeof(ceph_scripts), "%s/scripts/ceph", src);
	else { /* run by hand: find the scripts next to this source file */
		snprintf(ceph_scripts, sizeof(ceph_scripts), "%s", __FILE__);
		char *slash = strrchr(ceph_scripts, '/');
		if (slash)
			*slash = 0;
		strncat(ceph_scripts, "/../../scripts/ceph",
			sizeof(ceph_scripts) - strlen(ceph_scripts) - 1);
	}
	if (shf("command -v ceph-mon >/dev/null && command -v ceph-osd >/dev/null && "
		"command -v ceph >/dev/null%s",
		rgw ? " && command -v radosgw >/dev/null" : "")) {
		fprintf(stderr, "SKIP: Ceph is not installed (apt-get install -y ceph-mon ceph-osd "
				"ceph-mgr radosgw ceph-common)\n");
		exit(77);
	}
	snprintf(ceph_dir, sizeof(ceph_dir), "/tmp/kvt-ceph.XXXXXX");
	if (!mkdtemp(ceph_dir)) {
		perror("mkdtemp");
		exit(1);
	}
	atexit(ceph_stop);
	int sigs[] = {SIGINT, SIGTERM, SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGHUP};
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], on_fatal_signal);
	ceph_rgw_port = free_port();
	int v2 = free_port(), v1 = free_port();
	uint64_t t0 = kvt__now_ns();
	/* WATCH_PID: the cluster stops (and its directory goes) even if this process is killed. */
	int rc = shf("OSDS=%d RGW=%d RGW_PORT=%d MON_V2=%d MON_V1=%d WATCH_PID=%d WATCH_RM=%d "
		     "'%s/start-ceph.sh' '%s' > '%s.start.log' 2>&1",
		     osds, rgw, ceph_rgw_port, v2, v1, (int)getpid(),
		     getenv("KVT_KEEP_CEPH") ? 0 : 1, ceph_scripts, ceph_dir, ceph_dir);
	if (rc) {
		shf("cat '%s.start.log' >&2; rm -f '%s.start.log'", ceph_dir, ceph_dir);
		if (rc == 77) {
			fprintf(stderr, "SKIP: Ceph cannot start here\n");
			exit(77);
		}
		fprintf(stderr, "FAIL: start-ceph.sh exited %d\n", rc);
		exit(1);
	}
	shf("rm -f '%s.start.log'", ceph_dir);
	fprintf(stderr, "ceph: %d OSD(s)%s up in %s after %.1f s\n", osds, rgw ? " + radosgw" : "",
		ceph_dir, (double)(kvt__now_ns() - t0) / 1e9);
	/* Take the cluster's env file: CEPH_CONF, KVTIER_S3_ENDPOINT, AWS_* ... */
	char path[512], line[1024];
	snprintf(path, sizeof(path), "%s/env", ceph_dir);
	FILE *f = fopen(path, "r");
	CHECK(f, "no %s", path);
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *eq;
		if (!strncmp(p, "export ", 7))
			p += 7;
		p[strcspn(p, "\n")] = 0;
		if (!(eq = strchr(p, '=')))
			continue;
		*eq = 0;
		setenv(p, eq + 1, 1);
	}
	fclose(f);
}

/* The PID of one daemon ("rgw.a", "osd.1"). */
static inline pid_t ceph_pid(const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/run/%s.pid", ceph_dir, name);
	FILE *f = fopen(path, "r");
	CHECK(f, "no pid file %s", path);
	int pid = 0;
	CHECK(fscanf(f, "%d", &pid) == 1, "bad pid file %s", path);
	fclose(f);
	return pid;
}

/* SIGSTOP a daemon and wait until every one of its threads is stopped: kill() returns
 * before the signal has taken effect, and a thread still running could answer. */
static inline void stop_daemon(pid_t pid)
{
	CHECK(kill(pid, SIGSTOP) == 0, "SIGSTOP %d", (int)pid);
	for (int i = 0; i < 200; i++) {
		if (shf("for f in /proc/%d/task/*/stat; do s=$(sed 's/.*) //' $f | cut -c1); "
			"[ \"$s\" = T ] || [ \"$s\" = t ] || exit 1; done",
			(int)pid) == 0)
			return;
		usleep(10000);
	}
	CHECK(0, "daemon %d did not stop", (int)pid);
}

/* ---- logging: collected so tests can check what was said (and that secrets were not) */
static char log_text[65536];
static size_t log_len;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static inline void test_log(void *arg, int level, const char *msg)
{
	(void)arg;
	fprintf(stderr, "  [tier %d] %s\n", level, msg);
	pthread_mutex_lock(&log_lock);
	int n = snprintf(log_text + log_len, sizeof(log_text) - log_len, "%s\n", msg);
	if (n > 0 && log_len + (size_t)n < sizeof(log_text))
		log_len += (size_t)n;
	pthread_mutex_unlock(&log_lock);
}

static inline void log_clear(void)
{
	pthread_mutex_lock(&log_lock);
	log_len = 0;
	log_text[0] = 0;
	pthread_mutex_unlock(&log_lock);
}

/* ---- a tier instance from its ops table (the engine's kvt__tier_open does the same) */
static inline int tier_open(const struct kvt_tier_ops *ops, struct kvt_config *cfg,
			    struct kvt_tier **out)
{
	struct kvt_tier *t = calloc(1, sizeof(*t));
	t->ops = ops;
	t->state = calloc(1, ops->state_size);
	t->log.fn = test_log;
	t->log.level = KVT_LOG_INFO;
	int rc = ops->open(t, cfg);
	if (rc < 0) {
		free(t->state);
		free(t);
		return rc;
	}
	*out = t;
	return 0;
}

static inline void tier_close(struct kvt_tier *t)
{
	t->ops->close(t);
	free(t->state);
	free(t);
}

/* ---- completions */
struct done {
	pthread_mutex_t m;
	pthread_cond_t c;
	atomic_int calls;
	int result;
	pthread_t submitter;
	atomic_int on_submitter;
	uint64_t t_submit, t_done;
};

static inline void done_init(struct done *d)
{
	pthread_mutex_init(&d->m, NULL);
	pthread_cond_init(&d->c, NULL);
	atomic_init(&d->calls, 0);
	atomic_init(&d->on_submitter, 0);
	d->result = 0;
	d->submitter = pthread_self();
	d->t_submit = kvt__now_ns();
	d->t_done = 0;
}

static inline void done_cb(void *arg, int64_t result)
{
	struct done *d = arg;
	if (pthread_equal(pthread_self(), d->submitter))
		atomic_store(&d->on_submitter, 1);
	pthread_mutex_lock(&d->m);
	d->result = result;
	d->t_done = kvt__now_ns();
	atomic_fetch_add(&d->calls, 1);
	pthread_cond_broadcast(&d->c);
	pthread_mutex_unlock(&d->m);
}

/* Wait up to ms for the callback; returns its result, or -999 on a hang. */
static inline int done_wait(struct done *d, int ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&d->m);
	while (!atomic_load(&d->calls))
		if (pthread_cond_timedwait(&d->c, &d->m, &ts) == ETIMEDOUT)
			break;
	int calls = atomic_load(&d->calls), r = d->result;
	pthread_mutex_unlock(&d->m);
	if (!calls)
		return -999;
	CHECK(!atomic_load(&d->on_submitter), "callback ran on the submitting thread");
	return r;
}

/* Submit-and-wait helpers: check the call returned 0 and the callback ran exactly once. */
#define SYNC_MS 30000
static inline int t_write(struct kvt_tier *t, const struct kvt_key *k, const void *p, uint64_t n)
{
	struct done d;
	done_init(&d);
	int rc = t->ops->write(t, k, p, n, done_cb, &d);
	if (rc < 0)
		return rc;
	rc = done_wait(&d, SYNC_MS);
	CHECK(rc != -999, "write hung");
	return rc;
}

static inline int t_read(struct kvt_tier *t, const struct kvt_key *k, const struct kvt_seg *s,
			 uint32_t n)
{
	struct done d;
	done_init(&d);
	int rc = t->ops->read(t, k, s, n, done_cb, &d);
	if (rc < 0)
		return rc;
	rc = done_wait(&d, SYNC_MS);
	CHECK(rc != -999, "read hung");
	return rc;
}

static inline int t_exists(struct kvt_tier *t, const struct kvt_key *k, uint32_t n,
			   uint8_t *present)
{
	struct done d;
	done_init(&d);
	int rc = t->ops->exists(t, k, n, present, done_cb, &d);
	if (rc < 0)
		return rc;
	rc = done_wait(&d, SYNC_MS);
	CHECK(rc != -999, "exists hung");
	return rc;
}

static inline int t_remove(struct kvt_tier *t, const struct kvt_key *k)
{
	struct done d;
	done_init(&d);
	int rc = t->ops->remove(t, k, done_cb, &d);
	if (rc < 0)
		return rc;
	rc = done_wait(&d, SYNC_MS);
	CHECK(rc != -999, "remove hung");
	return rc;
}

/* ---- deterministic data */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static inline uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static inline void fill(void *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
	uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		b[i] = (uint8_t)(x >> 24);
	}
}

static inline void key_of(struct kvt_key *k, uint64_t tag, uint64_t i)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->bytes, &tag, 8);
	memcpy(k->bytes + 8, &i, 8);
	uint64_t salt = (uint64_t)getpid();
	memcpy(k->bytes + 16, &salt, 8);
}

static inline void *aligned(size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, KVT_ALIGN, n ? n : KVT_ALIGN))
		return NULL;
	return p;
}

static inline struct kvt_config *cfg_new(void)
{
	struct kvt_config *cfg;
	CHECK(kvt_config_create(&cfg) == 0, "config");
	kvt_config_set_log(cfg, test_log, NULL, KVT_LOG_INFO);
	return cfg;
}

static inline void cfg_set(struct kvt_config *cfg, const char *k, const char *v)
{
	char err[256];
	int rc = kvt_config_set(cfg, k, v, err, sizeof(err));
	CHECK(rc == 0, "%s", err);
}

/* A store of the tests' small model (2 layers, 2 KV heads, head dim 4, 8-token chunks) on
 * the given tiers, opened from cfg (which it destroys): the engine's read path over a
 * real server. */
static inline struct kvt_store *store_on(struct kvt_config *cfg, const char *tiers)
{
	cfg_set(cfg, "store.tiers", tiers);
	cfg_set(cfg, "model.layers", "2");
	cfg_set(cfg, "model.kv_heads", "2");
	cfg_set(cfg, "model.head_dim", "4");
	cfg_set(cfg, "model.chunk_tokens", "8");
	cfg_set(cfg, "model.name", "test-model");
	struct kvt_store *st;
	int rc = kvt_store_open(cfg, &st);
	CHECK(rc == 0, "a store on %s: %d", tiers, rc);
	kvt_config_destroy(cfg);
	return st;
}

#endif
