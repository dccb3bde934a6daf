/*
 * bench_ref.c - the references `kvtier bench` measures each tier against, in the same run:
 * the standard tool for each storage system, driven at the same object size and
 * concurrency, so that a ratio says how much of the system's speed kvtier delivers.
 *   dram:  memcpy shaped like the tier's copies
 *   nvme, fs: fio with io_uring and O_DIRECT, same block size, queue depth and file count
 *   redis: redis-benchmark (SET, then GET over the same key space)
 *   s3:    one curl process with --parallel (keep-alive, SigV4), PUTs then GETs
 *   rados: rados bench (write, then rand)
 * Each runs as a child process; output is parsed for throughput and latency.
 */
#include <errno.h>
#include <math.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static char *run_capture(const char *cmd)
{
	FILE *f = popen(cmd, "r");
	if (!f)
		return NULL;
	size_t cap = 1 << 20, n = 0, got;
	char *out = malloc(cap);
	if (!out) {
		pclose(f);
		return NULL;
	}
	while ((got = fread(out + n, 1, cap - 1 - n, f)) > 0) {
		n += got;
		if (n == cap - 1) {
			char *bigger = realloc(out, cap * 2);
			if (!bigger)
				break;
			out = bigger;
			cap *= 2;
		}
	}
	out[n] = 0;
	if (pclose(f) != 0) {
		free(out);
		return NULL;
	}
	return out;
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

int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double lat_pct(struct lat *l, double p)
{
	if (!l->n)
		return 0;
	size_t i = (size_t)ceil(p / 100.0 * (double)l->n);
	if (i)
		i--;
	return l->v[i < l->n ? i : l->n - 1];
}


void lat_sort(struct lat *l)
{
	if (l->n) /* qsort(NULL, 0, ...) is UB */
		qsort(l->v, l->n, sizeof(double), cmp_double);
}

/* ------------------------------------------------------------ memcpy and fio */

/* memcpy shaped like the DRAM tier's copies: a get copies a random slot of the working set
 * into one of qd caller buffers, a put copies a caller buffer into a random slot. */
void bench_ref_memcpy(size_t chunk, size_t n_bufs, unsigned qd, double seconds, int read_pct,
		       struct phase_result *out)
{
	char *pool = NULL, *user = NULL;
	if (posix_memalign((void **)&pool, KVT_ALIGN, chunk * n_bufs) ||
	    posix_memalign((void **)&user, KVT_ALIGN, chunk * qd)) {
		free(pool);
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
	lat_sort(&rl); /* not qsort: a phase may have no reads or no writes */
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
	free(pool);
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

/* fio with io_uring + O_DIRECT, bs = the object size, n_files files of that size in dir. */
int bench_ref_fio(const char *dir, size_t bs, size_t n_files, unsigned qd, double seconds,
		   int read_pct, struct phase_result *out)
{
	char path[4096], cmd[8192];
	snprintf(path, sizeof(path), "%s/fio-ref", dir);
	mkdir(path, 0755);
	/* Writes: like the tier, which creates a new file per object (and removes the one it
	 * replaces), fio creates each file on open and unlinks it after writing it. Reads and
	 * mixed loads: random I/O over preallocated files of one object each. */
	const char *rw = read_pct >= 100 ? "randread" : read_pct <= 0 ? "write" : "randrw";
	const char *fresh = read_pct <= 0 ? "--create_on_open=1 --fallocate=none --unlink=1 "
					    "--unlink_each_loop=1 "
					  : "";
	snprintf(cmd, sizeof(cmd),
		 "fio --name=ref --directory='%s' --ioengine=io_uring --direct=1 --bs=%zu "
		 "--iodepth=%u --rw=%s --rwmixread=%d --nrfiles=%zu --filesize=%zu --size=%zu %s"
		 "--time_based --runtime=%.0f --ramp_time=1 --group_reporting "
		 "--percentile_list=50:99:99.9 --output-format=json 2>/dev/null",
		 path, bs, qd, rw, read_pct > 0 && read_pct < 100 ? read_pct : 50, n_files, bs,
		 bs * n_files, fresh, ceil(seconds));
	FILE *f = popen(cmd, "r");
	if (!f)
		return -errno;
	size_t cap = 1 << 20, n = 0;
	char *json = malloc(cap);
	if (!json) {
		pclose(f);
		return -ENOMEM;
	}
	size_t got;
	while ((got = fread(json + n, 1, cap - 1 - n, f)) > 0)
		n += got;
	json[n] = 0;
	int st = pclose(f);
	if (st != 0 || !strstr(json, "\"jobs\"")) {
		free(json);
		return -EIO;
	}
	const char *rd = strstr(json, "\"read\" :"), *wr = strstr(json, "\"write\" :");
	double g = 1073741824.0;
	if (rd) {
		out->read_gibps = json_num_after(rd, "\"read\"", "\"bw_bytes\"") / g;
		out->read_iops = json_num_after(rd, "\"read\"", "\"iops\"");
		out->read_p50 = json_num_after(rd, "\"clat_ns\"", "\"50.000000\"") / 1000.0;
		out->read_p99 = json_num_after(rd, "\"clat_ns\"", "\"99.000000\"") / 1000.0;
		out->read_p999 = json_num_after(rd, "\"clat_ns\"", "\"99.900000\"") / 1000.0;
	}
	if (wr) {
		out->write_gibps = json_num_after(wr, "\"write\"", "\"bw_bytes\"") / g;
		out->write_iops = json_num_after(wr, "\"write\"", "\"iops\"");
		out->write_p50 = json_num_after(wr, "\"clat_ns\"", "\"50.000000\"") / 1000.0;
		out->write_p99 = json_num_after(wr, "\"clat_ns\"", "\"99.000000\"") / 1000.0;
		out->write_p999 = json_num_after(wr, "\"clat_ns\"", "\"99.900000\"") / 1000.0;
	}
	free(json);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	if (system(cmd) != 0)
		fprintf(stderr, "kvtier bench: could not remove %s\n", path);
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

/* redis://[:password@]host:port[/db] */
static int parse_redis_url(const char *url, char *host, size_t hl, int *port, char *pass,
			   size_t pl)
{
	if (strncmp(url, "redis://", 8))
		return -EINVAL;
	const char *p = url + 8, *at = strchr(p, '@');
	pass[0] = 0;
	if (at) {
		const char *colon = memchr(p, ':', (size_t)(at - p));
		const char *pw = colon ? colon + 1 : p;
		snprintf(pass, pl, "%.*s", (int)(at - pw), pw);
		p = at + 1;
	}
	const char *colon = strchr(p, ':');
	*port = 6379;
	if (colon) {
		snprintf(host, hl, "%.*s", (int)(colon - p), p);
		*port = atoi(colon + 1);
	} else {
		size_t n = strcspn(p, "/");
		snprintf(host, hl, "%.*s", (int)n, p);
	}
	return 0;
}

int bench_ref_redis(const char *url, size_t bs, size_t n_keys, unsigned qd, double seconds,
		    int read_pct, struct phase_result *out)
{
	char host[256], pass[256], cmd[2048], auth[300] = "";
	int port;
	if (parse_redis_url(url, host, sizeof(host), &port, pass, sizeof(pass)) < 0)
		return -EINVAL;
	if (pass[0])
		snprintf(auth, sizeof(auth), "-a '%s' --no-auth-warning", pass);
	/* About as many requests as fit in `seconds` at ~1 GB/s, at least the key space. */
	size_t n = (size_t)(seconds * 1e9 / (double)bs);
	if (n < n_keys)
		n = n_keys;
	snprintf(cmd, sizeof(cmd),
		 "redis-benchmark -h %s -p %d %s --dbnum 15 -c %u -d %zu -n %zu -r %zu -t set,get "
		 "--csv 2>/dev/null",
		 host, port, auth, qd, bs, n, n_keys);
	char *csv = run_capture(cmd);
	if (!csv)
		return -EIO;
	double set_rps = 0, get_rps = 0, set_p99 = 0, get_p99 = 0;
	for (char *line = strtok(csv, "\n"); line; line = strtok(NULL, "\n")) {
		/* "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",
		 * "p99_latency_ms","max_latency_ms" */
		double v[7] = {0};
		char name[16];
		if (sscanf(line, "\"%15[A-Z]\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\"", name,
			   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) < 2)
			continue;
		if (!strcmp(name, "SET")) {
			set_rps = v[0];
			set_p99 = v[5] * 1000;
			out->write_p50 = v[3] * 1000;
		} else if (!strcmp(name, "GET")) {
			get_rps = v[0];
			get_p99 = v[5] * 1000;
			out->read_p50 = v[3] * 1000;
		}
	}
	free(csv);
	/* The reference's keys live in db 15, apart from the tier's: drop only them. */
	snprintf(cmd, sizeof(cmd), "redis-cli -h %s -p %d %s -n 15 flushdb >/dev/null 2>&1", host,
		 port, auth);
	if (system(cmd) != 0)
		fprintf(stderr, "kvtier bench: redis-cli flushdb failed\n");
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

int bench_ref_s3(const char *endpoint, const char *bucket, const char *region, size_t bs,
		 size_t n_keys, unsigned qd, double seconds, int read_pct, struct phase_result *out)
{
	const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
	if (!ak || !sk || !*endpoint || !*bucket)
		return -EINVAL;
	char dir[] = "/tmp/kvt-s3ref-XXXXXX";
	if (!mkdtemp(dir))
		return -errno;
	char path[512], cmd[4096];
	snprintf(path, sizeof(path), "%s/body", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return -errno;
	for (size_t i = 0; i < bs; i++)
		fputc((int)(i * 131 % 251), f);
	fclose(f);
	/* One curl, `qd` transfers in flight over reused connections. Writes first (they
	 * create the objects the reads fetch), each phase as many objects as the key space. */
	double g = 1073741824.0;
	for (int phase = 0; phase < 2; phase++) {
		bool reads = phase == 1;
		if (reads && read_pct == 0)
			continue;
		snprintf(path, sizeof(path), "%s/cfg%d", dir, phase);
		f = fopen(path, "w");
		if (!f)
			return -errno;
		size_t n = n_keys;
		for (size_t i = 0; i < n; i++) {
			fprintf(f, "url = \"%s/%s/kvt-ref/%zu\"\n", endpoint, bucket, i);
			if (reads)
				fprintf(f, "output = \"/dev/null\"\n");
			else
				fprintf(f, "upload-file = \"%s/body\"\noutput = \"/dev/null\"\n", dir);
		}
		fclose(f);
		snprintf(cmd, sizeof(cmd),
			 "curl -s -S --no-progress-meter --parallel --parallel-immediate --parallel-max %u -K '%s' "
			 "--aws-sigv4 'aws:amz:%s:s3' --user '%s:%s' -H "
			 "'x-amz-content-sha256: UNSIGNED-PAYLOAD' -w '%%{time_total}\\n'",
			 qd, path, region, ak, sk);
		uint64_t t0 = kvt__now_ns();
		char *times = run_capture(cmd);
		double secs = (double)(kvt__now_ns() - t0) / 1e9;
		if (!times)
			return -EIO;
		struct lat l = {0};
		for (char *line = strtok(times, "\n"); line; line = strtok(NULL, "\n"))
			lat_add(&l, strtod(line, NULL) * 1e6);
		free(times);
		lat_sort(&l);
		double ops = (double)l.n / secs;
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
	(void)seconds;
	mix_harmonic(out, read_pct, bs);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "kvtier bench: could not remove %s\n", dir);
	return 0;
}

/* ------------------------------------------------------------ rados */

static double after(const char *text, const char *label)
{
	const char *p = strstr(text, label);
	return p ? strtod(p + strlen(label), NULL) : 0;
}

int bench_ref_rados(const char *pool, size_t bs, unsigned qd, double seconds, int read_pct,
		    struct phase_result *out)
{
	char cmd[1024];
	int secs = seconds < 1 ? 1 : (int)(seconds + 0.5);
	snprintf(cmd, sizeof(cmd),
		 "rados -p '%s' bench %d write -b %zu -t %u --no-cleanup --run-name kvt-ref "
		 "2>/dev/null",
		 pool, secs, bs, qd);
	char *w = run_capture(cmd);
	if (!w)
		return -EIO;
	double g = 1073741824.0, mib = 1048576.0;
	out->write_gibps = after(w, "Bandwidth (MB/sec):") * mib / g;
	out->write_iops = after(w, "Average IOPS:");
	out->write_p50 = after(w, "Average Latency(s):") * 1e6;
	out->write_p99 = out->write_p999 = after(w, "Max latency(s):") * 1e6;
	free(w);
	if (read_pct > 0) {
		snprintf(cmd, sizeof(cmd),
			 "rados -p '%s' bench %d rand -t %u --run-name kvt-ref 2>/dev/null", pool,
			 secs, qd);
		char *r = run_capture(cmd);
		if (r) {
			out->read_gibps = after(r, "Bandwidth (MB/sec):") * mib / g;
			out->read_iops = after(r, "Average IOPS:");
			out->read_p50 = after(r, "Average Latency(s):") * 1e6;
			out->read_p99 = out->read_p999 = after(r, "Max latency(s):") * 1e6;
			free(r);
		}
	}
	snprintf(cmd, sizeof(cmd), "rados -p '%s' cleanup --run-name kvt-ref >/dev/null 2>&1",
		 pool);
	if (system(cmd) != 0)
		fprintf(stderr, "kvtier bench: rados cleanup failed\n");
	if (read_pct == 0)
		out->read_gibps = 0;
	if (read_pct == 100)
		out->write_gibps = 0;
	mix_harmonic(out, read_pct, bs);
	return out->write_gibps > 0 || out->read_gibps > 0 ? 0 : -EIO;
}
