/*
 * cmd_store.c - inspecting and repairing a store: `ls`, `stat`, `verify`, `rm`. They open
 * the store like any engine would (so `--dir D` is all a local store needs) and reach the
 * tiers' object listings through the tier vtable's scan.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "dram.h"
#include "engine.h"
#include "format.h"
#include "tier.h"

static int parse_common(const char *cmd, struct cli_store_opts *o, int argc, char **argv,
			const char *usage, int (*extra)(void *arg, int argc, char **argv, int *i),
			void *arg)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("%s", usage);
			exit(0);
		}
		int r = cli_store_opt(o, argc, argv, &i);
		if (r < 0)
			return -1;
		if (r > 0)
			continue;
		if (extra && (r = extra(arg, argc, argv, &i)) != 0) {
			if (r < 0)
				return -1;
			continue;
		}
		cli_fail(cmd, "unknown option '%s' (see --help)", argv[i]);
		return -1;
	}
	return 0;
}

#define COMMON_HELP                                                                        \
	"  --dir D          store directory (nvme.dirs = D; no config file needed)\n"         \
	"  --config FILE    configuration file (docs/CONFIG.md)\n"                              \
	"  --tiers LIST     tier chain, e.g. dram,nvme\n"                                        \
	"  --set KEY=VALUE  any configuration key (repeatable)\n"                               \
	"  --json           machine-readable output\n"

/* ------------------------------------------------------------ ls */

struct ls_ctx {
	const char *tier;
	bool json;
	uint64_t n, bytes;
};

static int ls_one(void *arg, const struct kvt_key *key, uint64_t bytes)
{
	struct ls_ctx *c = arg;
	char hex[65];
	kvt_key_to_hex(key, hex);
	if (c->json)
		printf("{\"key\":\"%s\",\"tier\":\"%s\",\"bytes\":%llu}\n", hex, c->tier,
		       (unsigned long long)bytes);
	else
		printf("%s  %-6s %12llu\n", hex, c->tier, (unsigned long long)bytes);
	c->n++;
	c->bytes += bytes;
	return 0;
}

int kvt_cmd_ls(int argc, char **argv)
{
	struct cli_store_opts o = {0};
	if (parse_common("ls", &o, argc, argv,
			 "usage: kvtier ls [options]\n"
			 "List the objects of every tier that can list them (one per line: key, "
			 "tier, bytes;\nwith --json one JSON object per line, then a summary "
			 "object).\n" COMMON_HELP,
			 NULL, NULL) < 0)
		return 2;
	struct kvt_store *s = cli_open_store(&o);
	if (!s)
		return 1;
	uint64_t n = 0, bytes = 0;
	for (int i = 0; i < kvt_store_tier_count(s); i++) {
		struct ls_ctx c = {kvt_store_tier_name(s, i), o.json, 0, 0};
		struct kvt_tier *t = kvt__store_tier(s, i);
		if (t && t->ops->scan)
			t->ops->scan(t, ls_one, &c);
		else if (!t && kvt__store_dram(s))
			kvt__dram_scan(kvt__store_dram(s), ls_one, &c);
		n += c.n;
		bytes += c.bytes;
	}
	if (o.json)
		printf("{\"objects\":%llu,\"bytes\":%llu}\n", (unsigned long long)n,
		       (unsigned long long)bytes);
	else
		fprintf(stderr, "%llu objects, %llu bytes\n", (unsigned long long)n,
			(unsigned long long)bytes);
	kvt_store_close(s);
	return 0;
}

/* ------------------------------------------------------------ stat */

int kvt_cmd_stat(int argc, char **argv)
{
	struct cli_store_opts o = {0};
	if (parse_common("stat", &o, argc, argv,
			 "usage: kvtier stat [options]\n"
			 "Open the store and print per-tier counters (objects, bytes, capacity, "
			 "I/O, evictions,\nchecksum failures).\n" COMMON_HELP,
			 NULL, NULL) < 0)
		return 2;
	struct kvt_store *s = cli_open_store(&o);
	if (!s)
		return 1;
	struct kvt_stats st;
	kvt_stats(s, &st);
	if (o.json) {
		printf("{\"version\":\"%s\",\"tiers\":[", kvt_version());
		for (uint32_t i = 0; i < st.n_tiers; i++) {
			struct kvt_tier_stats *t = &st.tier[i];
			printf("%s{\"name\":\"%s\",\"objects\":%llu,\"bytes\":%llu,"
			       "\"capacity_bytes\":%llu,\"reads\":%llu,\"writes\":%llu,"
			       "\"evictions\":%llu,\"checksum_failures\":%llu,\"errors\":%llu}",
			       i ? "," : "", t->name, (unsigned long long)t->objects,
			       (unsigned long long)t->bytes, (unsigned long long)t->capacity_bytes,
			       (unsigned long long)t->reads, (unsigned long long)t->writes,
			       (unsigned long long)t->evictions,
			       (unsigned long long)t->checksum_failures,
			       (unsigned long long)t->errors);
		}
		printf("]}\n");
	} else {
		printf("kvtier %s\n%-8s %10s %14s %14s %10s %10s %10s %8s\n", kvt_version(), "tier",
		       "objects", "bytes", "capacity", "reads", "writes", "evictions", "badcrc");
		for (uint32_t i = 0; i < st.n_tiers; i++) {
			struct kvt_tier_stats *t = &st.tier[i];
			printf("%-8s %10llu %14llu %14llu %10llu %10llu %10llu %8llu\n", t->name,
			       (unsigned long long)t->objects, (unsigned long long)t->bytes,
			       (unsigned long long)t->capacity_bytes, (unsigned long long)t->reads,
			       (unsigned long long)t->writes, (unsigned long long)t->evictions,
			       (unsigned long long)t->checksum_failures);
		}
	}
	kvt_store_close(s);
	return 0;
}

/* ------------------------------------------------------------ verify */

struct sync_io {
	pthread_mutex_t m;
	pthread_cond_t c;
	bool done;
	int rc;
};

static void sync_io_cb(void *arg, int64_t rc)
{
	struct sync_io *w = arg;
	pthread_mutex_lock(&w->m);
	w->rc = rc;
	w->done = true;
	pthread_cond_signal(&w->c);
	pthread_mutex_unlock(&w->m);
}

/* Run one tier call to completion on this thread. */
static int sync_io_wait(struct sync_io *w, int rc)
{
	if (rc == 0) {
		pthread_mutex_lock(&w->m);
		while (!w->done)
			pthread_cond_wait(&w->c, &w->m);
		pthread_mutex_unlock(&w->m);
		rc = w->rc;
	}
	return rc;
}

struct key_list {
	struct kvt_key *keys;
	uint64_t *bytes;
	size_t n, cap;
};

static int collect(void *arg, const struct kvt_key *key, uint64_t bytes)
{
	struct key_list *l = arg;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 1024;
		struct kvt_key *k = realloc(l->keys, cap * sizeof(*k));
		uint64_t *b = realloc(l->bytes, cap * sizeof(*b));
		if (!k || !b) {
			free(k ? k : l->keys);
			free(b ? b : l->bytes);
			l->keys = NULL;
			l->bytes = NULL;
			return -ENOMEM;
		}
		l->keys = k;
		l->bytes = b;
		l->cap = cap;
	}
	l->keys[l->n] = *key;
	l->bytes[l->n++] = bytes;
	return 0;
}

struct verify_opts {
	bool drop;
};

static int verify_extra(void *arg, int argc, char **argv, int *i)
{
	struct verify_opts *v = arg;
	if (!strcmp(argv[*i], "--drop")) {
		v->drop = true;
		return 1;
	}
	return 0;
}

int kvt_cmd_verify(int argc, char **argv)
{
	struct cli_store_opts o = {0};
	struct verify_opts v = {0};
	if (parse_common("verify", &o, argc, argv,
			 "usage: kvtier verify [--drop] [options]\n"
			 "Read every object of every listable tier and check its header and layer "
			 "CRCs.\nBad objects are reported (and removed with --drop). With --json the "
			 "last line is\n{\"objects\":N,\"bad\":M,\"dropped\":D}. Exit status 0 if "
			 "none is bad, 3 otherwise.\n"
			 "  --drop           remove the bad objects\n" COMMON_HELP,
			 verify_extra, &v) < 0)
		return 2;
	/* Verify the media, not a cache of it: no DRAM tier. */
	struct kvt_store *s = cli_open_store(&o);
	if (!s)
		return 1;
	uint64_t objects = 0, bad = 0, dropped = 0;
	uint64_t max = 0;
	for (int i = 0; i < kvt_store_tier_count(s); i++) {
		struct kvt_tier *t = kvt__store_tier(s, i);
		if (!t || !t->ops->scan)
			continue;
		struct key_list l = {0};
		if (t->ops->scan(t, collect, &l) < 0) {
			free(l.keys);
			free(l.bytes);
			kvt_store_close(s);
			return cli_fail("verify", "tier %s: listing failed", kvt_store_tier_name(s, i));
		}
		/* Objects of any geometry may share a directory: read each at its listed size
		 * (bounded by store.max_object_bytes), not this store's chunk size. */
		max = t->object_max;
		for (size_t k = 0; k < l.n; k++)
			if (l.bytes[k] > max && l.bytes[k] <= (4ull << 30))
				max = KVT_ALIGN_UP(l.bytes[k], KVT_ALIGN);
		void *buf = NULL;
		if (posix_memalign(&buf, KVT_ALIGN, max)) {
			kvt_store_close(s);
			return cli_fail("verify", "out of memory");
		}
		for (size_t k = 0; k < l.n; k++) {
			struct sync_io w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0};
			uint64_t want = KVT_ALIGN_UP(KVT_MAX(l.bytes[k], (uint64_t)KVT_HEADER_BYTES), KVT_ALIGN);
			struct kvt_seg seg = {0, KVT_MIN(want, max), buf};
			int rc = sync_io_wait(&w, t->ops->read(t, &l.keys[k], &seg, 1, sync_io_cb, &w));
			const char *why = NULL;
			struct kvt_header h;
			struct kvt_expect exp = {.key = &l.keys[k]};
			if (rc == -ENOENT)
				continue; /* removed meanwhile */
			objects++;
			if (rc < 0)
				why = kvt_strerror(rc);
			else if (kvt__object_verify(buf, (uint64_t)rc, &exp, &h) < 0)
				why = (uint64_t)rc < KVT_HEADER_BYTES ? "truncated" : "corrupt";
			if (!why)
				continue;
			bad++;
			char hex[65];
			kvt_key_to_hex(&l.keys[k], hex);
			if (o.json)
				printf("{\"key\":\"%s\",\"tier\":\"%s\",\"error\":\"%s\"}\n", hex,
				       kvt_store_tier_name(s, i), why);
			else
				printf("BAD %s %s: %s\n", kvt_store_tier_name(s, i), hex, why);
			if (v.drop) {
				struct sync_io r = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0};
				if (sync_io_wait(&r, t->ops->remove(t, &l.keys[k], sync_io_cb, &r)) == 0)
					dropped++;
			}
		}
		free(buf);
		free(l.keys);
		free(l.bytes);
	}
	if (o.json)
		printf("{\"objects\":%llu,\"bad\":%llu,\"dropped\":%llu}\n",
		       (unsigned long long)objects, (unsigned long long)bad,
		       (unsigned long long)dropped);
	else
		printf("%llu objects checked, %llu bad, %llu dropped\n", (unsigned long long)objects,
		       (unsigned long long)bad, (unsigned long long)dropped);
	kvt_store_close(s);
	return bad ? 3 : 0;
}

/* ------------------------------------------------------------ rm */

int kvt_cmd_rm(int argc, char **argv)
{
	struct cli_store_opts o = {0};
	const char *keys[256];
	int n = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("usage: kvtier rm [options] KEY...\n"
			       "Remove chunks (64-hex-digit keys) from every tier.\n" COMMON_HELP);
			return 0;
		}
		int r = cli_store_opt(&o, argc, argv, &i);
		if (r < 0)
			return 2;
		if (r > 0)
			continue;
		if (argv[i][0] == '-')
			return cli_fail("rm", "unknown option '%s' (see --help)", argv[i]), 2;
		if (n == 256)
			return cli_fail("rm", "at most 256 keys per call"), 2;
		keys[n++] = argv[i];
	}
	if (!n)
		return cli_fail("rm", "no key given (see --help)"), 2;
	struct kvt_key k[256];
	for (int i = 0; i < n; i++)
		if (kvt_key_from_hex(keys[i], &k[i]) < 0)
			return cli_fail("rm", "'%s' is not a 64-hex-digit key", keys[i]), 2;
	struct kvt_store *s = cli_open_store(&o);
	if (!s)
		return 1;
	int missing = 0;
	for (int i = 0; i < n; i++) {
		int rc = kvt_remove_sync(s, &k[i]);
		if (o.json)
			printf("{\"key\":\"%s\",\"removed_from\":%d}\n", keys[i], rc < 0 ? 0 : rc);
		else
			printf("%s: removed from %d tier(s)\n", keys[i], rc < 0 ? 0 : rc);
		if (rc <= 0)
			missing++;
	}
	kvt_store_close(s);
	return missing ? 4 : 0;
}
