/*
 * cmd_calibrate.c - `kvtier calibrate`: measure each configured tier's first-byte latency
 * and read/write bandwidth on this machine, through the public API only, and save them as
 * the INI profile the cost model reads (cost.profile). Numbers from the real chain - page
 * cache, O_DIRECT, network and all - are what restore-or-recompute decisions need, not a
 * data sheet.
 *
 * Method, per tier: DRAM is timed with the full chain (puts land in DRAM; gets hit DRAM).
 * A deeper tier T is timed with a chain "dram,T" whose DRAM pool holds only a few objects
 * and does not promote: puts plus a flush measure writing T (write-behind), gets that
 * report tier T measure reading it, and whole reads of one-token chunks (a header and one
 * aligned block per layer) measure its latency (the median, less what bandwidth explains).
 * Calibration objects use fresh random keys and are removed at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "cost.h"
#include "open_path.h"

#define CMD "calibrate"

static void usage(FILE *f)
{
	fprintf(
	    f, "usage: kvtier calibrate [--dir D] [--tiers dram,nvme,...] [--config FILE]\n"
	       "                        [--set key=value]... [--objects N] [--out FILE] [--json]\n"
	       "\n"
	       "  --objects N   chunks written and read per tier (default 8)\n"
	       "  --out FILE    profile to write (default kvtier-profile.ini); point cost.profile\n"
	       "                at it\n");
}

static double secs(uint64_t t0)
{
	return (double)(kvt__now_ns() - t0) / 1e9;
}

static void make_key(uint64_t salt, unsigned i, struct kvt_key *k)
{
	uint64_t x = salt + i * 0x9e3779b97f4a7c15ull;
	for (int w = 0; w < 4; w++) {
		x += 0x9e3779b97f4a7c15ull;
		uint64_t z = x;
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		memcpy(k->bytes + 8 * w, &z, 8);
	}
}

/* Put n chunks, waiting out back-pressure by flushing. 0 or -errno. */
static int put_all(struct kvt_store *s, uint64_t salt, unsigned n, uint32_t tokens, const void *buf,
		   size_t len)
{
	for (unsigned i = 0; i < n; i++) {
		struct kvt_key k;
		make_key(salt, i, &k);
		int rc;
		for (int tries = 0; tries < 100; tries++) {
			rc = kvt_put_sync(s, &k, NULL, tokens, buf, len);
			if (rc != -ENOSPC && rc != -EAGAIN)
				break;
			kvt_flush_sync(s);
		}
		if (rc < 0 && rc != -EEXIST)
			return rc;
	}
	return 0;
}

static void remove_all(struct kvt_store *s, uint64_t salt, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct kvt_key k;
		make_key(salt, i, &k);
		kvt_remove_sync(s, &k);
	}
}

/* Time one tier: reads and latency only count gets served by tier `want`. */
static int measure(struct kvt_store *s, int want, unsigned n, uint64_t salt,
		   struct kvt_tier_profile *p)
{
	const struct kvt_geometry *g = kvt_store_geometry(s);
	uint32_t tokens = g->chunk_tokens;
	size_t len = kvt_payload_bytes(g, tokens);
	unsigned char *buf = malloc(len);
	double *lat = calloc(n, sizeof(double));
	int rc = -ENOMEM;
	if (!buf || !lat)
		goto out;
	for (size_t i = 0; i < len; i++)
		buf[i] = (unsigned char)(i * 131 + salt);

	uint64_t t0 = kvt__now_ns();
	if ((rc = put_all(s, salt, n, tokens, buf, len)) < 0)
		goto out;
	if (want > 0 && (rc = kvt_flush_sync(s)) < 0)
		goto out;
	double wt = secs(t0);
	p->write_Bps = wt > 0 ? (double)len * n / wt : 0;

	double rt = 0;
	uint64_t rbytes = 0;
	for (unsigned i = 0; i < n; i++) {
		struct kvt_key k;
		struct kvt_result res;
		make_key(salt, i, &k);
		t0 = kvt__now_ns();
		rc = kvt_get_sync(s, &k, 0, 0, buf, len, &res);
		double r = secs(t0);
		if (rc >= 0 && res.tier == want) {
			rt += r;
			rbytes += res.bytes;
		}
	}
	if (!rbytes) {
		rc = -ENOENT; /* nothing was served by this tier */
		goto out;
	}
	p->read_Bps = (double)rbytes / rt;

	/* latency: whole reads of one-token chunks (a header and one aligned block per layer),
	 * minus what the bandwidth explains */
	uint64_t lsalt = salt ^ 0x4c4154454e4359ull;
	size_t small = kvt_payload_bytes(g, 1);
	if ((rc = put_all(s, lsalt, n, 1, buf, small)) < 0)
		goto out;
	if (want > 0 && (rc = kvt_flush_sync(s)) < 0)
		goto out;
	unsigned nl = 0;
	for (unsigned i = 0; i < n; i++) {
		struct kvt_key k;
		struct kvt_result res;
		make_key(lsalt, i, &k);
		t0 = kvt__now_ns();
		rc = kvt_get_sync(s, &k, 0, 0, buf, len, &res);
		double l = secs(t0);
		if (rc >= 0 && res.tier == want)
			lat[nl++] = l;
	}
	remove_all(s, lsalt, n);
	if (!nl) {
		rc = -ENOENT;
		goto out;
	}
	qsort(lat, nl, sizeof(double), kvt__cmp_double);
	p->latency_s = lat[nl / 2] - (double)kvt_object_bytes(g, 1) / p->read_Bps;
	if (p->latency_s < lat[0] * 0.1)
		p->latency_s = lat[0] * 0.1;
	p->measured = true;
	rc = 0;
out:
	free(buf);
	free(lat);
	return rc;
}

enum { O_OUT = CLI_O_FIRST_FREE, O_OBJECTS };

struct cal_args {
	const char *out_path;
	unsigned long long objects;
};

static int cal_opt(void *arg, int c, const char *v)
{
	struct cal_args *a = arg;
	uint64_t x;
	switch (c) {
	case 'h':
		usage(stdout);
		return 1;
	case O_OUT:
		a->out_path = v;
		return 0;
	default: /* O_OBJECTS; digits only: strtoull alone reads " -1" as 2^64 - 1 */
		if (kvt__parse_u64(v, &x) < 0 || !x || x > 100000)
			return cli_fail(CMD, "--objects: '%s' is not 1..100000", v), -1;
		a->objects = x;
		return 0;
	}
}

int kvt_cmd_calibrate(int argc, char **argv)
{
	static const struct option extra[] = {{"out", required_argument, NULL, O_OUT},
					      {"objects", required_argument, NULL, O_OBJECTS},
					      {NULL, 0, NULL, 0}};
	struct cli_store_opts so = {0};
	struct cal_args ca = {"kvtier-profile.ini", 8};
	int first = cli_getopt(CMD, argc, argv, &so, extra, cal_opt, &ca);
	if (first == -2)
		return 0;
	if (first < 0)
		return 2;
	if (first < argc)
		return cli_fail(CMD, "unexpected argument '%s' (see --help)", argv[first]), 2;
	const char *out_path = ca.out_path;
	unsigned long long objects = ca.objects;
	/* before measuring: a FIFO would hold the write in open() (src/open_path.h) */
	const char *unfit = kvt__path_unfit(out_path, true);
	if (unfit)
		return cli_fail(CMD, "--out %s: %s, not a regular file", out_path, unfit), 2;
	struct kvt_config *cfg = cli_config(&so);
	if (!cfg)
		return 2;
	int rc = 1, n = 0;
	struct kvt_tier_profile prof[KVT_MAX_TIERS];
	char chain[256], err[200];
	if (kvt_config_get(cfg, "store.tiers", chain, sizeof(chain)) < 0) {
		cli_fail(CMD, "store.tiers is too long");
		goto out;
	}
	/* the DRAM tier with the chain as configured */
	struct kvt_store *s = NULL;
	int orc = kvt_store_open(cfg, &s);
	if (orc < 0) {
		cli_fail(CMD, "cannot open the store: %s", kvt_strerror(orc));
		goto out;
	}
	n = kvt_store_tier_count(s);
	char names[KVT_MAX_TIERS][16];
	for (int i = 0; i < n; i++) {
		snprintf(names[i], sizeof(names[i]), "%s", kvt_store_tier_name(s, i));
		kvt__tier_profile_default(names[i], &prof[i]);
	}
	const struct kvt_geometry *g = kvt_store_geometry(s);
	uint64_t obj = kvt_object_bytes(g, g->chunk_tokens);
	uint64_t salt = kvt__now_ns();
	if (!so.json)
		printf("calibrating %d tier(s) with %llu chunks of %.1f MiB\n", n, objects,
		       (double)kvt_payload_bytes(g, g->chunk_tokens) / 1048576.0);
	if (!strcmp(names[0], "dram")) {
		int m = measure(s, 0, (unsigned)objects, salt, &prof[0]);
		if (m < 0)
			fprintf(stderr, "kvtier calibrate: dram: %s (default kept)\n",
				kvt_strerror(m));
		remove_all(s, salt, (unsigned)objects);
	}
	kvt_store_close(s);

	/* each deeper tier behind a DRAM pool too small to serve the reads */
	for (int i = 0; i < n; i++) {
		if (!strcmp(names[i], "dram"))
			continue;
		struct kvt_config *c2 = NULL;
		char tiers[160], dram[32];
		snprintf(tiers, sizeof(tiers), "dram,%s", names[i]);
		snprintf(dram, sizeof(dram), "%llu", (unsigned long long)(3 * obj + 4096));
		if (kvt__config_copy(cfg, &c2) < 0 ||
		    kvt_config_set(c2, "store.tiers", tiers, err, sizeof(err)) ||
		    kvt_config_set(c2, "store.promote", "false", err, sizeof(err)) ||
		    kvt_config_set(c2, "dram.bytes", dram, err, sizeof(err))) {
			kvt_config_destroy(c2);
			cli_fail(CMD, "%s: %s", names[i], err);
			goto out;
		}
		salt += 1000003;
		orc = kvt_store_open(c2, &s);
		kvt_config_destroy(c2);
		if (orc < 0) {
			fprintf(stderr, "kvtier calibrate: %s: cannot open: %s (default kept)\n",
				names[i], kvt_strerror(orc));
			continue;
		}
		int m = measure(s, 1, (unsigned)objects, salt, &prof[i]);
		if (m < 0)
			fprintf(stderr, "kvtier calibrate: %s: %s (default kept)\n", names[i],
				kvt_strerror(m));
		remove_all(s, salt, (unsigned)objects);
		kvt_store_close(s);
	}

	const char *what;
	int fd = kvt__open_path(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0666, true, &what);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
	if (!f && fd >= 0)
		close(fd);
	if (!f || kvt__profile_write(f, prof, n) < 0 || fclose(f)) {
		if (what)
			cli_fail(CMD, "--out %s: %s, not a regular file", out_path, what);
		else
			cli_fail(CMD, "%s: cannot write the profile", out_path);
		goto out;
	}
	if (so.json) {
		printf("{\"profile\":");
		cli_json_str(stdout, out_path);
		printf(",\"tiers\":[");
		for (int i = 0; i < n; i++) {
			printf("%s{\"tier\":", i ? "," : "");
			cli_json_str(stdout, prof[i].name);
			printf(",\"measured\":%s,\"latency_us\":%.3f,\"read_gbps\":%.4f,"
			       "\"write_gbps\":%.4f}",
			       prof[i].measured ? "true" : "false", prof[i].latency_s * 1e6,
			       prof[i].read_Bps / 1e9, prof[i].write_Bps / 1e9);
		}
		printf("]}\n");
	} else {
		for (int i = 0; i < n; i++)
			printf("%-6s latency %9.1f us  read %8.3f GB/s  write %8.3f GB/s%s\n",
			       prof[i].name, prof[i].latency_s * 1e6, prof[i].read_Bps / 1e9,
			       prof[i].write_Bps / 1e9, prof[i].measured ? "" : "  (default)");
		printf("profile written to %s (set cost.profile = %s)\n", out_path, out_path);
	}
	rc = 0;
out:
	kvt_config_destroy(cfg);
	return rc;
}
