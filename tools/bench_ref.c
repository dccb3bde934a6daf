/*
 * bench_ref.c - the references `kvtier bench` measures each tier against, in the same run:
 * the standard tool for each storage system, driven with the same I/O shape, so that a
 * ratio says how much of the system's speed kvtier delivers.
 *   dram:  memcpy shaped like the tier's copies
 *   nvme, fs: fio with io_uring and O_DIRECT, block size = the object, iodepth = objects in
 *          flight, over a file set of one file per object laid out (written in full) once
 *          and overwritten in place; when the tier fsyncs, --fdatasync=1 and, a second
 *          reference of kvtier's own guarantee, --sync=dsync
 *   redis: redis-benchmark (SET, then GET over the same key space; as many client threads
 *          as the tier has connections, -n sized to fill the slice)
 *   s3:    one curl process with --parallel (keep-alive, SigV4), time-based, timed from its
 *          first completion so that curl's start-up is not measured
 *   rados: rados bench (write, then rand)
 * Every child is started with posix_spawnp and an argv array (no shell: paths and URLs are
 * never parsed as shell text); secrets reach children through the environment or a 0600
 * file, never through their command line (which `ps` shows to every user).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <hiredis/hiredis.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "redis_url.h"

extern char **environ;

/* ------------------------------------------------------------ child processes */

/* Start argv[0] (found in PATH) in directory cwd (NULL: ours) with stdin and stderr on
 * /dev/null and stdout into a pipe (*out_fd) or /dev/null (out_fd NULL). pid or -errno. */
/* envp: the child's environment (NULL: ours). */
static pid_t spawn_child(char *const argv[], const char *cwd, int *out_fd, char *const envp[])
{
	int p[2] = {-1, -1};
	if (out_fd && pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	if (out_fd)
		posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	else
		posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	if (cwd)
		posix_spawn_file_actions_addchdir_np(&fa, cwd);
	pid_t pid;
	int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, envp ? envp : environ);
	posix_spawn_file_actions_destroy(&fa);
	if (out_fd) {
		close(p[1]);
		if (rc)
			close(p[0]);
		else
			*out_fd = p[0];
	}
	return rc ? -rc : pid;
}

static int wait_child(pid_t pid)
{
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Run argv and return its stdout (NUL-terminated, malloc'd), or NULL if it could not run
 * or exited non-zero. */
static char *run_capture_env(char *const argv[], const char *cwd, char *const envp[])
{
	int fd;
	pid_t pid = spawn_child(argv, cwd, &fd, envp);
	if (pid < 0)
		return NULL;
	size_t cap = 1 << 20, n = 0;
	char *out = malloc(cap);
	ssize_t got;
	while (out && (got = read(fd, out + n, cap - 1 - n)) != 0) {
		if (got < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		n += (size_t)got;
		if (n == cap - 1) {
			char *bigger = realloc(out, cap * 2);
			if (!bigger) {
				free(out);
				out = NULL;
				break;
			}
			out = bigger;
			cap *= 2;
		}
	}
	close(fd);
	int st = wait_child(pid);
	if (!out || st != 0) {
		free(out);
		return NULL;
	}
	out[n] = 0;
	return out;
}

static char *run_capture(char *const argv[], const char *cwd)
{
	return run_capture_env(argv, cwd, NULL);
}

/* fio's environment: ours plus glibc.malloc.hugetlb=1, so that fio's I/O buffers (one
 * malloc of iodepth x bs, started on a 2 MiB boundary by --iomem_align: FIO_MEM_ALIGN)
 * are offered to transparent huge pages as kvtier's are (its DRAM pool, dram.hugepages,
 * and its bounce buffers, kvt__huge_alloc or carved from 2 MiB regions). How physically
 * contiguous a buffer is sets the device request's size and segments (docs/BENCHMARKS.md,
 * "The machine"): both sides get the same kind of memory, so the same requests. Without
 * the alignment a 2.2 MiB buffer (32 x 68 KiB) got no huge page at all (smaps). */
#define FIO_MEM_ALIGN "--iomem_align=2m"

static char **fio_environ(void)
{
	static char **env;
	static char tun[512];
	if (env)
		return env;
	size_t n = 0;
	while (environ[n])
		n++;
	if (!(env = calloc(n + 2, sizeof(*env))))
		return NULL;
	const char *old = getenv("GLIBC_TUNABLES");
	snprintf(tun, sizeof(tun), "GLIBC_TUNABLES=%s%sglibc.malloc.hugetlb=1", old ? old : "",
		 old ? ":" : "");
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "GLIBC_TUNABLES=", 15))
			env[k++] = environ[i];
	env[k++] = tun;
	env[k] = NULL;
	return env;
}

static int run_quiet(char *const argv[])
{
	pid_t pid = spawn_child(argv, NULL, NULL, NULL);
	return pid < 0 ? (int)pid : wait_child(pid);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)f;
	if ((flag == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT)
		fprintf(stderr, "kvtier bench: cannot remove %s: %s\n", path, strerror(errno));
	return 0;
}

static void remove_tree(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int bench_mkdirs(const char *path, mode_t mode)
{
	char p[4096];
	if (snprintf(p, sizeof(p), "%s", path) >= (int)sizeof(p))
		return -ENAMETOOLONG;
	for (char *c = p + 1; *c; c++)
		if (*c == '/') {
			*c = 0;
			if (mkdir(p, mode) < 0 && errno != EEXIST)
				return -errno;
			*c = '/';
		}
	return mkdir(p, mode) < 0 && errno != EEXIST ? -errno : 0;
}

/* A file only we can read, for what must not appear on a command line. */
static FILE *private_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	return fd < 0 ? NULL : fdopen(fd, "w");
}

/* ------------------------------------------------------------ latency samples */

void lat_add(struct lat *l, double us)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 65536;
		double *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = us;
}

double lat_pct(struct lat *l, double p)
{
	return kvt__percentile(l->v, l->n, p / 100.0);
}


void lat_sort(struct lat *l)
{
	if (l->n) /* qsort(NULL, 0) is undefined */
		qsort(l->v, l->n, sizeof(double), kvt__cmp_double);
}

/* ------------------------------------------------------------ memcpy and fio */

/* memcpy shaped like the DRAM tier's copies: a get copies a random slot of the working set
 * into one of qd caller buffers, a put copies a caller buffer into a random slot. The
 * working set is on transparent huge pages like the DRAM pool (dram.hugepages,
 * kvt__huge_alloc); the caller buffers are ordinary memory on both sides. */
void bench_ref_memcpy(size_t chunk, size_t n_bufs, unsigned qd, double seconds, int read_pct,
		       struct phase_result *out)
{
	char *pool = kvt__huge_alloc(chunk * n_bufs), *user = NULL;
	if (!pool || posix_memalign((void **)&user, KVT_ALIGN, chunk * qd)) {
		kvt__huge_free(pool, chunk * n_bufs);
		return;
	}
	memset(pool, 0x5a, chunk * n_bufs);
	memset(user, 0x11, chunk * qd);
	struct lat rl = {0}, wl = {0};
	uint64_t rng = 12345, nr = 0, nw = 0, t0 = kvt__now_ns(), now;
	uint64_t end = t0 + (uint64_t)(seconds * 1e9);
	do {
		char *slot = pool + (bench_rnd(&rng) % n_bufs) * chunk, *u = user + (bench_rnd(&rng) % qd) * chunk;
		bool rd = (int)(bench_rnd(&rng) % 100) < read_pct;
		uint64_t t = kvt__now_ns();
		if (rd)
			memcpy(u, slot, chunk);
		else
			memcpy(slot, u, chunk);
		now = kvt__now_ns();
		lat_add(rd ? &rl : &wl, (double)(now - t) / 1000.0);
		*(rd ? &nr : &nw) += 1;
	} while (now < end);
	double secs = (double)(now - t0) / 1e9, g = 1073741824.0;
	lat_sort(&rl);
	lat_sort(&wl);
	out->read_iops = (double)nr / secs;
	out->write_iops = (double)nw / secs;
	out->read_gibps = out->read_iops * (double)chunk / g;
	out->write_gibps = out->write_iops * (double)chunk / g;
	out->read_p50 = lat_pct(&rl, 50);
	out->read_p99 = lat_pct(&rl, 99);
	out->read_p999 = lat_pct(&rl, 99.9);
	out->write_p50 = lat_pct(&wl, 50);
	out->write_p99 = lat_pct(&wl, 99);
	out->write_p999 = lat_pct(&wl, 99.9);
	free(rl.v);
	free(wl.v);
	kvt__huge_free(pool, chunk * n_bufs);
	free(user);
}

/* The number after "key" : inside the JSON object that starts at the first `section`. */
static double json_num_after(const char *json, const char *section, const char *key)
{
	const char *p = strstr(json, section);
	if (!p)
		return 0;
	p = strstr(p, key);
	if (!p)
		return 0;
	p = strchr(p + strlen(key), ':');
	return p ? strtod(p + 1, NULL) : 0;
}

#define FIO_SUBDIR "fio-ref"

static void fmt_num(char *buf, size_t n, const char *fmt, unsigned long long v)
{
	snprintf(buf, n, fmt, v);
}

/* The reference's file set, laid out once per bench run: n_files files of bs bytes in
 * dir/fio-ref, each written in full, so that every measured write overwrites allocated
 * blocks and no round pays for layout. Written as kvtier lays out its slots
 * (nvme.preallocate, tier_nvme_pool.c): through the page cache, each file fdatasync'ed
 * once written and given its blocks then (no fallocate: each file starts on a 2 MiB
 * boundary, as a slot does; file by file, so that each fdatasync is the file just written
 * - with fio's default round-robin the sync went to the next file, and half the files
 * stayed dirty in the page cache). On the virtual disk measured, how a file is first written
 * decides how fast it is overwritten ever after (docs/BENCHMARKS.md, "How a slot is first
 * written"), so both sides' files are made alike. The caller lets the disk rest after it
 * (kvtier bench --settle). */
int bench_ref_fio_layout(const char *dir, size_t bs, size_t n_files)
{
	char path[4096], a_bs[48], a_nr[48], a_fs[48], a_sz[48];
	snprintf(path, sizeof(path), "%s/" FIO_SUBDIR, dir);
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -errno;
	fmt_num(a_bs, sizeof(a_bs), "--bs=%llu", bs);
	fmt_num(a_nr, sizeof(a_nr), "--nrfiles=%llu", n_files);
	fmt_num(a_fs, sizeof(a_fs), "--filesize=%llu", bs);
	fmt_num(a_sz, sizeof(a_sz), "--size=%llu", (unsigned long long)bs * n_files);
	char *argv[] = {"fio", "--name=ref", "--directory=" FIO_SUBDIR, "--ioengine=psync",
			"--fdatasync=1", "--file_service_type=sequential", "--fallocate=none",
			a_bs, "--rw=write", a_nr, a_fs, a_sz, "--output-format=terse", NULL};
	char *out = run_capture_env(argv, dir, fio_environ());
	if (!out)
		return -EIO;
	free(out);
	return 0;
}

void bench_ref_fio_remove(const char *dir)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/" FIO_SUBDIR, dir);
	remove_tree(path);
}

/* fio over the laid-out file set: one I/O = one whole file = one object, `qd` in flight,
 * random files, time-based after a ramp of the same length as the tier's. Latency is fio's
 * total latency (submission to completion, like the tier's call to callback). */
int bench_ref_fio(const char *dir, size_t bs, size_t n_files, unsigned qd, double ramp,
		  double seconds, int read_pct, enum ref_sync sync, struct phase_result *out)
{
	char a_bs[48], a_qd[48], a_nr[48], a_fs[48], a_sz[48], a_rt[48], a_ramp[48], a_mix[48];
	fmt_num(a_bs, sizeof(a_bs), "--bs=%llu", bs);
	fmt_num(a_qd, sizeof(a_qd), "--iodepth=%llu", qd);
	fmt_num(a_nr, sizeof(a_nr), "--nrfiles=%llu", n_files);
	fmt_num(a_fs, sizeof(a_fs), "--filesize=%llu", bs);
	fmt_num(a_sz, sizeof(a_sz), "--size=%llu", (unsigned long long)bs * n_files);
	fmt_num(a_rt, sizeof(a_rt), "--runtime=%llums", (unsigned long long)(seconds * 1000));
	fmt_num(a_ramp, sizeof(a_ramp), "--ramp_time=%llums", (unsigned long long)(ramp * 1000));
	fmt_num(a_mix, sizeof(a_mix), "--rwmixread=%llu",
		(unsigned long long)(read_pct > 0 && read_pct < 100 ? read_pct : 50));
	const char *rw = read_pct >= 100 ? "--rw=randread"
			 : read_pct <= 0 ? "--rw=randwrite"
					 : "--rw=randrw";
	char *argv[32] = {"fio", "--name=ref", "--directory=" FIO_SUBDIR, "--ioengine=io_uring",
			  "--direct=1", FIO_MEM_ALIGN, a_bs, a_qd, (char *)rw, a_mix, a_nr, a_fs, a_sz,
			  "--file_service_type=random", "--time_based", a_rt, a_ramp,
			  "--group_reporting", "--clat_percentiles=0", "--lat_percentiles=1",
			  "--percentile_list=50:99:99.9", "--output-format=json", NULL};
	bool fdatasync = sync == REF_SYNC_FDATASYNC;
	if (sync != REF_SYNC_NONE && read_pct < 100) {
		int n = 0;
		while (argv[n])
			n++;
		argv[n] = fdatasync ? "--fdatasync=1" : "--sync=dsync";
		argv[n + 1] = NULL;
	}
	char *json = run_capture_env(argv, dir, fio_environ());
	if (!json || !strstr(json, "\"jobs\"")) {
		free(json);
		return -EIO;
	}
	const char *rd = strstr(json, "\"read\" :"), *wr = strstr(json, "\"write\" :"),
		   *sy = strstr(json, "\"sync\" :");
	double g = 1073741824.0;
	if (rd) {
		out->read_gibps = json_num_after(rd, "\"read\"", "\"bw_bytes\"") / g;
		out->read_iops = json_num_after(rd, "\"read\"", "\"iops\"");
		out->read_p50 = json_num_after(rd, "\"lat_ns\"", "\"50.000000\"") / 1000.0;
		out->read_p99 = json_num_after(rd, "\"lat_ns\"", "\"99.000000\"") / 1000.0;
		out->read_p999 = json_num_after(rd, "\"lat_ns\"", "\"99.900000\"") / 1000.0;
	}
	if (wr) {
		out->write_gibps = json_num_after(wr, "\"write\"", "\"bw_bytes\"") / g;
		out->write_iops = json_num_after(wr, "\"write\"", "\"iops\"");
		out->write_p50 = json_num_after(wr, "\"lat_ns\"", "\"50.000000\"") / 1000.0;
		out->write_p99 = json_num_after(wr, "\"lat_ns\"", "\"99.000000\"") / 1000.0;
		out->write_p999 = json_num_after(wr, "\"lat_ns\"", "\"99.900000\"") / 1000.0;
	}
	if (sy && fdatasync) {
		out->sync_p50 = json_num_after(sy, "\"lat_ns\"", "\"50.000000\"") / 1000.0;
		out->sync_p99 = json_num_after(sy, "\"lat_ns\"", "\"99.000000\"") / 1000.0;
	}
	free(json);
	return 0;
}

/* A reference that measured reads and writes in separate phases stands for a mixed load by
 * giving each operation its share of the time: ops/s = 1 / (r / read_ops + (1-r) / write_ops). */
static void mix_harmonic(struct phase_result *out, int read_pct, size_t bs)
{
	if (read_pct <= 0 || read_pct >= 100 || out->read_iops <= 0 || out->write_iops <= 0)
		return;
	double r = read_pct / 100.0, g = 1073741824.0;
	double ops = 1.0 / (r / out->read_iops + (1 - r) / out->write_iops);
	out->read_iops = ops * r;
	out->write_iops = ops * (1 - r);
	out->read_gibps = out->read_iops * (double)bs / g;
	out->write_gibps = out->write_iops * (double)bs / g;
}

/* ------------------------------------------------------------ redis */

/* The reference's database: redis-benchmark writes keys "key:<12 digits>" into it (SET over
 * -r keys), and they must go afterwards without touching anything else. It used to be db
 * 15, emptied with FLUSHDB afterwards: whatever else lived there - the tier's own objects
 * when the tier used db 15 - was erased. Now it is the highest of dbs 15..1 that is not the
 * tier's and holds no key at all (so that every key:* there afterwards is the reference's),
 * and afterwards only its keys are deleted. -EBUSY: no such database. */
#define REF_KEY_PATTERN "key:*"

static redisContext *ref_connect(const char *host, int port)
{
	struct timeval tv = {5, 0};
	redisContext *c = redisConnectWithTimeout(host, port, tv);
	if (c && c->err) {
		redisFree(c);
		return NULL;
	}
	if (c)
		redisSetTimeout(c, tv);
	return c;
}

/* An integer reply of cmd on db (-1: none). */
static long long ref_int(redisContext *c, int db, const char *cmd)
{
	redisReply *r = redisCommand(c, "SELECT %d", db);
	bool ok = r && r->type == REDIS_REPLY_STATUS;
	freeReplyObject(r);
	if (!ok)
		return -1;
	r = redisCommand(c, cmd);
	long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
	freeReplyObject(r);
	return v;
}

static int ref_pick_db(const char *host, int port, int tier_db)
{
	redisContext *c = ref_connect(host, port);
	if (!c)
		return -ECONNREFUSED;
	int db = -EBUSY;
	for (int d = 15; d >= 1 && db < 0; d--)
		if (d != tier_db && ref_int(c, d, "DBSIZE") == 0)
			db = d;
	redisFree(c);
	return db;
}

/* Delete the reference's keys from db (SCAN MATCH key:*, then DEL), within a bounded number
 * of SCAN calls. */
static int ref_drop_keys(const char *host, int port, int db)
{
	redisContext *c = ref_connect(host, port);
	if (!c)
		return -ECONNREFUSED;
	long long size = ref_int(c, db, "DBSIZE");
	int rc = size < 0 ? -EIO : 0;
	char cursor[32] = "0";
	for (long long calls = 0; rc == 0 && calls < 4 * (size / 1000 + 1) + 64; calls++) {
		redisReply *r = redisCommand(c, "SCAN %s MATCH %s COUNT 1000", cursor,
					     REF_KEY_PATTERN);
		if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
		    r->element[0]->type != REDIS_REPLY_STRING ||
		    r->element[1]->type != REDIS_REPLY_ARRAY) {
			freeReplyObject(r);
			rc = -EIO;
			break;
		}
		snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
		redisReply *keys = r->element[1];
		for (size_t i = 0; i < keys->elements; i++)
			if (keys->element[i]->type == REDIS_REPLY_STRING)
				redisAppendCommand(c, "DEL %b", keys->element[i]->str,
						   (size_t)keys->element[i]->len);
		for (size_t i = 0; i < keys->elements; i++) {
			redisReply *d = NULL;
			if (keys->element[i]->type != REDIS_REPLY_STRING)
				continue;
			if (redisGetReply(c, (void **)&d) != REDIS_OK)
				rc = -EIO;
			freeReplyObject(d);
		}
		freeReplyObject(r);
		if (!strcmp(cursor, "0"))
			break;
	}
	redisFree(c);
	return rc;
}

/* One redis-benchmark run of n SETs then n GETs: rates (requests/s), p99s (µs) and p50s. */
static int redis_bench_once(const char *host, int port, int db, unsigned qd, unsigned threads,
			    size_t bs, size_t n, size_t n_keys, double *set_rps, double *get_rps,
			    double *set_p99, double *get_p99, struct phase_result *out)
{
	char a_port[16], a_c[16], a_d[32], a_n[32], a_r[32], a_t[16], a_db[16];
	snprintf(a_port, sizeof(a_port), "%d", port);
	snprintf(a_db, sizeof(a_db), "%d", db);
	snprintf(a_c, sizeof(a_c), "%u", qd);
	snprintf(a_d, sizeof(a_d), "%zu", bs);
	snprintf(a_n, sizeof(a_n), "%zu", n);
	snprintf(a_r, sizeof(a_r), "%zu", n_keys);
	/* As many client threads as the tier has I/O threads (redis.connections, at most one
	 * per request in flight): with one thread the client, not the server, was the limit
	 * (1.5-1.9x "ratios" before 2026-12-01, docs/BENCHMARKS.md). */
	snprintf(a_t, sizeof(a_t), "%u", KVT_MAX(1u, KVT_MIN(threads, qd)));
	char *argv[] = {"redis-benchmark", "-h", (char *)host, "-p", a_port, "--dbnum", a_db,
			"-c", a_c, "--threads", a_t, "-d", a_d, "-n", a_n, "-r", a_r, "-t",
			"set,get", "--csv", NULL};
	char *csv = run_capture(argv, NULL);
	if (!csv)
		return -EIO;
	*set_rps = *get_rps = *set_p99 = *get_p99 = 0;
	char *save = NULL;
	for (char *line = strtok_r(csv, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		/* "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",
		 * "p99_latency_ms","max_latency_ms" */
		double v[7] = {0};
		char name[16];
		if (sscanf(line, "\"%15[A-Z]\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\"", name,
			   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) < 2)
			continue;
		if (!strcmp(name, "SET")) {
			*set_rps = v[0];
			*set_p99 = v[5] * 1000;
			out->write_p50 = v[3] * 1000;
		} else if (!strcmp(name, "GET")) {
			*get_rps = v[0];
			*get_p99 = v[5] * 1000;
			out->read_p50 = v[3] * 1000;
		}
	}
	free(csv);
	return 0;
}

int bench_ref_redis(const char *url, size_t bs, size_t n_keys, unsigned qd, unsigned threads,
		    double seconds, int read_pct, struct phase_result *out)
{
	struct kvt_redis_url u; /* the tier's own parse: the same server and database */
	if (kvt__redis_url_parse(url, &u) < 0)
		return -EINVAL;
	/* redis-benchmark takes a password only as -a on its command line, where `ps` shows it
	 * to every user: with a password there is no reference. */
	bool has_pass = u.pass[0];
	memset(u.pass, 0, sizeof(u.pass));
	if (has_pass)
		return -EPERM;
	const char *host = u.host;
	int port = u.port;
	int db = ref_pick_db(host, port, u.db);
	if (db < 0)
		return db;
	/* redis-benchmark is not time-based: it runs -n requests of each command. A first run
	 * sized at ~1 GB/s (at least the key space) measures the rate; when it took less than
	 * 80 % of the 2 x `seconds` the two commands are given, it runs again with -n scaled to
	 * them, so that its start-up and first SETs into new keys weigh as little as the
	 * tier's ramp does. */
	size_t n = (size_t)(seconds * 1e9 / (double)bs);
	if (n < n_keys)
		n = n_keys;
	double set_rps = 0, get_rps = 0, set_p99 = 0, get_p99 = 0;
	for (int attempt = 0; attempt < 2; attempt++) {
		uint64_t t0 = kvt__now_ns();
		int rc = redis_bench_once(host, port, db, qd, threads, bs, n, n_keys, &set_rps,
					  &get_rps, &set_p99, &get_p99, out);
		if (rc < 0) {
			ref_drop_keys(host, port, db);
			return rc;
		}
		double took = (double)(kvt__now_ns() - t0) / 1e9;
		if (took >= 1.6 * seconds || took <= 0)
			break;
		n = (size_t)((double)n * KVT_MIN(2 * seconds / took, 20.0));
	}
	/* The reference's keys live in a database of their own: drop only them. */
	if (ref_drop_keys(host, port, db) < 0)
		fprintf(stderr, "kvtier bench: the reference's keys (" REF_KEY_PATTERN ") in redis "
				"db %d could not all be deleted\n", db);
	if (!set_rps && !get_rps)
		return -EIO;
	/* A mixed load gets each operation's share of the time: harmonic combination. */
	double r = read_pct / 100.0, g = 1073741824.0;
	double t_per_op = (r > 0 ? r / get_rps : 0) + (r < 1 ? (1 - r) / set_rps : 0);
	double ops = 1.0 / t_per_op;
	out->read_iops = ops * r;
	out->write_iops = ops * (1 - r);
	out->read_gibps = out->read_iops * (double)bs / g;
	out->write_gibps = out->write_iops * (double)bs / g;
	out->read_p99 = out->read_p999 = get_p99;
	out->write_p99 = out->write_p999 = set_p99;
	return 0;
}

/* ------------------------------------------------------------ s3 */

/* A curl config string: quoted, with \ and " escaped. */
static void curl_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

/* Write curl's config: credentials and options once, then n transfers of object
 * kvt-ref/<i mod n_keys>, uploads of `body` when it is not NULL. */
static int s3_config(const char *path, const char *endpoint, const char *bucket,
		     const char *region, unsigned qd, size_t n, size_t n_keys, const char *body)
{
	const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
	FILE *f = private_file(path);
	if (!f)
		return -errno;
	char sig[300];
	snprintf(sig, sizeof(sig), "aws:amz:%s:s3", region);
	fputs("silent\nshow-error\nno-progress-meter\nparallel\nparallel-immediate\n", f);
	fprintf(f, "parallel-max = %u\n", qd);
	fputs("header = \"x-amz-content-sha256: UNSIGNED-PAYLOAD\"\n", f);
	fputs("write-out = \"%{time_total}\\n\"\n", f);
	fputs("aws-sigv4 = ", f);
	curl_str(f, sig);
	fputs("\nuser = ", f);
	char cred[1024];
	snprintf(cred, sizeof(cred), "%s:%s", ak, sk);
	curl_str(f, cred);
	fputc('\n', f);
	char url[4096];
	for (size_t i = 0; i < n; i++) {
		snprintf(url, sizeof(url), "%s/%s/kvt-ref/%zu", endpoint, bucket, i % n_keys);
		fputs("url = ", f);
		curl_str(f, url);
		fputs("\noutput = \"/dev/null\"\n", f);
		if (body) {
			fputs("upload-file = ", f);
			curl_str(f, body);
			fputc('\n', f);
		}
	}
	return fclose(f) ? -EIO : 0;
}

/* Run one curl over cfg. Timed from its first completion (so start-up and the parsing of
 * its config are not measured): transfers completing in [first + ramp, first + ramp +
 * seconds] count; curl is stopped at the window's end. seconds <= 0: run to the end,
 * counting nothing. */
static int s3_run(const char *cfg, double ramp, double seconds, struct lat *l, double *secs)
{
	/* curl's stdout is a pipe, so stdio would hold its -w lines in a 4 KiB buffer until
	 * it fills: line-buffer it, so each line arrives when its transfer completes. */
	char *argv[] = {"stdbuf", "-oL", "curl", "-K", (char *)cfg, NULL};
	int fd;
	pid_t pid = spawn_child(argv, NULL, &fd, NULL);
	if (pid < 0)
		return (int)pid;
	char buf[65536];
	size_t have = 0;
	uint64_t first = 0, w0 = 0, w1 = 0, last = 0;
	/* no completion at all by then: give up (a dead endpoint must not hang the bench) */
	uint64_t give_up = kvt__now_ns() + (uint64_t)((ramp + KVT_MAX(seconds, 0) + 30) * 1e9);
	bool stopped = false;
	for (;;) {
		int to = -1;
		uint64_t now = kvt__now_ns();
		if (first && seconds > 0) {
			if (now >= w1)
				break;
			to = (int)((w1 - now) / 1000000) + 1;
		} else if (!first) {
			if (now >= give_up)
				break;
			to = (int)((give_up - now) / 1000000) + 1;
		}
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int pr = poll(&p, 1, to);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr == 0)
			continue;
		ssize_t got = read(fd, buf + have, sizeof(buf) - 1 - have);
		if (got <= 0)
			break;
		now = kvt__now_ns();
		have += (size_t)got;
		buf[have] = 0;
		char *line = buf, *nl;
		while ((nl = strchr(line, '\n'))) {
			*nl = 0;
			if (!first) {
				first = now;
				w0 = first + (uint64_t)(ramp * 1e9);
				w1 = w0 + (uint64_t)(seconds * 1e9);
			}
			if (seconds > 0 && now >= w0 && now <= w1) {
				lat_add(l, strtod(line, NULL) * 1e6);
				last = now;
			}
			line = nl + 1;
		}
		have = strlen(line);
		memmove(buf, line, have);
	}
	if (seconds > 0 && first && kvt__now_ns() < w1) {
		w1 = last; /* curl ran out of transfers before the window closed */
	} else if ((seconds > 0 && first) || !first) {
		kill(pid, SIGTERM);
		stopped = true;
	}
	close(fd);
	int st = wait_child(pid);
	*secs = first && w1 > w0 ? (double)(w1 - w0) / 1e9 : 0;
	if (!first || (!stopped && st != 0))
		return -EIO;
	return 0;
}

int bench_ref_s3(const char *endpoint, const char *bucket, const char *region, size_t bs,
		 size_t n_keys, unsigned qd, double ramp, double seconds, int read_pct,
		 struct phase_result *out)
{
	/* curl takes the keys from the environment and needs an endpoint: without them there
	 * is no reference (-ENOKEY: declined, not failed; cmd_bench says why) */
	if (!getenv("AWS_ACCESS_KEY_ID") || !getenv("AWS_SECRET_ACCESS_KEY") || !*endpoint ||
	    !*bucket)
		return -ENOKEY;
	char dir[] = "/tmp/kvt-s3ref-XXXXXX";
	if (!mkdtemp(dir))
		return -errno;
	char body[512], cfg[512];
	int rc = 0;
	snprintf(body, sizeof(body), "%s/body", dir);
	FILE *f = private_file(body);
	if (!f) {
		rc = -errno;
		goto out;
	}
	for (size_t i = 0; i < bs; i++)
		fputc((int)(i * 131 % 251), f);
	if (fclose(f)) {
		rc = -EIO;
		goto out;
	}
	/* Enough transfers for the window at 4 GB/s or 4000 requests/s, whichever is fewer
	 * bytes; if curl runs out first, the window ends at its last completion. */
	double rate = KVT_MIN(4e9 / (double)bs, 4000.0);
	size_t n = (size_t)((ramp + seconds) * rate) + qd;
	n = KVT_MIN(n, (size_t)200000);
	double g = 1073741824.0;
	/* Writes first: they create the objects the reads fetch. */
	for (int phase = 0; phase < 2; phase++) {
		bool reads = phase == 1;
		if (reads && read_pct == 0)
			break;
		/* A read-only phase still needs the objects: uploaded once, untimed. */
		bool untimed = !reads && read_pct == 100;
		struct lat l = {0};
		double secs = 0;
		snprintf(cfg, sizeof(cfg), "%s/cfg%d", dir, phase);
		if ((rc = s3_config(cfg, endpoint, bucket, region, qd, untimed ? n_keys : n, n_keys,
				    reads ? NULL : body)) < 0 ||
		    (rc = s3_run(cfg, ramp, untimed ? 0 : seconds, &l, &secs)) < 0) {
			free(l.v);
			goto out;
		}
		unlink(cfg);
		if (untimed) {
			free(l.v);
			continue;
		}
		lat_sort(&l);
		double ops = secs > 0 ? (double)l.n / secs : 0;
		if (reads) {
			out->read_iops = ops;
			out->read_gibps = ops * (double)bs / g;
			out->read_p50 = lat_pct(&l, 50);
			out->read_p99 = lat_pct(&l, 99);
			out->read_p999 = lat_pct(&l, 99.9);
		} else {
			out->write_iops = ops;
			out->write_gibps = ops * (double)bs / g;
			out->write_p50 = lat_pct(&l, 50);
			out->write_p99 = lat_pct(&l, 99);
			out->write_p999 = lat_pct(&l, 99.9);
		}
		free(l.v);
	}
	mix_harmonic(out, read_pct, bs);
out:
	remove_tree(dir);
	return rc;
}

/* ------------------------------------------------------------ rados */

static double after(const char *text, const char *label)
{
	const char *p = strstr(text, label);
	return p ? strtod(p + strlen(label), NULL) : 0;
}

/* rados bench's summary: bandwidth (MiB/s) and IOPS; it reports only an average latency
 * (given as the p50) and a maximum (as the p99 and p99.9). */
static void rados_bench_result(const char *text, double *gibps, double *iops, double *p50,
			       double *p99, double *p999)
{
	*gibps = after(text, "Bandwidth (MB/sec):") * 1048576.0 / 1073741824.0;
	*iops = after(text, "Average IOPS:");
	*p50 = after(text, "Average Latency(s):") * 1e6;
	*p99 = *p999 = after(text, "Max latency(s):") * 1e6;
}

/* The read set: n_objs objects of bs bytes, as the tier's working set, written once per
 * run and untimed, as the tier's is. Reading what a timed write had just made instead
 * (thousands of objects against the tier's hundreds, the OSD still busy with them) read
 * 0-24 % slower on the bench-all cluster (docs/BENCHMARKS.md, "RADOS reads: the same
 * set"). */
int bench_ref_rados_layout(const char *pool, size_t bs, size_t n_objs, unsigned qd)
{
	char a_b[32], a_t[16], a_n[32];
	snprintf(a_b, sizeof(a_b), "%zu", bs);
	snprintf(a_t, sizeof(a_t), "%u", qd);
	snprintf(a_n, sizeof(a_n), "%zu", n_objs ? n_objs : 1);
	char *argv[] = {"rados", "-p", (char *)pool, "bench", "600", "write", "-b", a_b, "-t", a_t,
			"--no-cleanup", "--max-objects", a_n, "--run-name", "kvt-ref-read", NULL};
	return run_quiet(argv) == 0 ? 0 : -EIO;
}

/* Remove a rados bench run's objects. */
static void rados_cleanup(const char *pool, const char *run)
{
	char *argv[] = {"rados", "-p", (char *)pool, "cleanup", "--run-name", (char *)run, NULL};
	if (run_quiet(argv) != 0)
		fprintf(stderr, "kvtier bench: rados cleanup of %s failed\n", run);
}

void bench_ref_rados_remove(const char *pool)
{
	rados_cleanup(pool, "kvt-ref-read");
}

int bench_ref_rados(const char *pool, size_t bs, unsigned qd, double seconds, int read_pct,
		    struct phase_result *out)
{
	char a_s[16], a_b[32], a_t[16];
	int secs = seconds < 1 ? 1 : (int)(seconds + 0.5);
	snprintf(a_s, sizeof(a_s), "%d", secs);
	snprintf(a_b, sizeof(a_b), "%zu", bs);
	snprintf(a_t, sizeof(a_t), "%u", qd);
	/* Reads (over bench_ref_rados_layout's set), then writes of new objects, each alone
	 * at the full queue depth; a mixed phase combines
	 * them harmonically (mix_harmonic). Two rados bench processes at once, the depth
	 * split 11:5, overlapped reads and writes as the tier's mixed phase does, but did
	 * not keep its mix: reads, being faster, made 85 % of the bytes against the tier's
	 * 70 % of operations. */
	char *rargv[] = {"rados", "-p", (char *)pool, "bench", a_s, "rand", "-t", a_t,
			 "--run-name", "kvt-ref-read", NULL};
	char *wargv[] = {"rados", "-p", (char *)pool, "bench", a_s, "write", "-b", a_b,
			 "-t", a_t, "--no-cleanup", "--run-name", "kvt-ref", NULL};
	char *r = read_pct > 0 ? run_capture(rargv, NULL) : NULL;
	char *w = read_pct < 100 ? run_capture(wargv, NULL) : NULL;
	if (r)
		rados_bench_result(r, &out->read_gibps, &out->read_iops, &out->read_p50,
				   &out->read_p99, &out->read_p999);
	if (w)
		rados_bench_result(w, &out->write_gibps, &out->write_iops, &out->write_p50,
				   &out->write_p99, &out->write_p999);
	free(r);
	free(w);
	if (read_pct < 100) /* the timed write's new objects */
		rados_cleanup(pool, "kvt-ref");
	mix_harmonic(out, read_pct, bs);
	return out->write_gibps > 0 || out->read_gibps > 0 ? 0 : -EIO;
}
