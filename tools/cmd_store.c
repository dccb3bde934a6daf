/*
 * cmd_store.c - inspecting and repairing a store: `ls`, `stat`, `verify`, `rm`. They open
 * the store like any engine would (so `--dir D` is all a local store needs) and reach the
 * tiers' object listings through the tier vtable's scan.
 *
 * Inspection changes nothing: ls, stat and verify open the store with store.read_only, so
 * no tier creates, locks, cleans up, evicts or writes anything, a live writer may keep the
 * store open meanwhile, a read-only mount works, and a path that is not a store is an
 * error. Only `verify --drop` and `rm` open it for writing. verify reads each object in
 * windows of at most 8 MiB (one read for most objects) so its memory does not depend on
 * what a file's size claims, and applies the one definition of a sound object that get
 * applies (kvt__object_verify, then kvt__object_authenticate's MAC check when the store has
 * a MAC key): a header that decodes for its key, every layer's CRC, and the MAC; bytes past
 * the header's object size are not part of the object.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "dram.h"
#include "engine.h"
#include "config.h"
#include "format.h"
#include "protect.h"
#include "tier.h"

#define VERIFY_PIECE (8u << 20) /* bytes of an object read and checked at a time */

static uint64_t sync_ms = 30000; /* store.sync_timeout_ms of the store opened */

/* verify_object's answer when a read did not answer within sync_ms (the buffer it read
 * into must then be left allocated: the tier may still write into it). */
static const char TIMED_OUT[] = "timed out";

/* Inspection: open every tier read-only (see the top of the file). */
static struct kvt_store *open_inspect(struct cli_store_opts *o, const char *cmd)
{
	if (o->n_sets >= (int)(sizeof(o->sets) / sizeof(o->sets[0]))) {
		cli_fail(cmd, "too many --set options");
		return NULL;
	}
	o->sets[o->n_sets++] = "store.read_only=true";
	struct kvt_store *s = cli_open_store(o);
	o->n_sets--;
	if (s)
		sync_ms = kvt__store_sync_timeout_ms(s);
	return s;
}

/* The options of ls, stat, verify and rm: the store options plus verify's --drop
 * (cli_getopt). Returns the index of the first operand (rm's keys), or -1 after one
 * error line; --help prints usage and exits. */
enum { O_DROP = CLI_O_FIRST_FREE };

struct common_args {
	const char *usage;
	bool *drop; /* NULL: --drop is not an option of this command */
};

static int common_opt(void *arg, int c, const char *v)
{
	struct common_args *a = arg;
	(void)v;
	if (c == 'h') {
		printf("%s", a->usage);
		return 1;
	}
	*a->drop = true; /* O_DROP: only in the table when drop is given */
	return 0;
}

static int parse_common(const char *cmd, struct cli_store_opts *o, int argc, char **argv,
			const char *usage, bool *drop)
{
	static const struct option with_drop[] = {{"drop", no_argument, NULL, O_DROP},
						  {NULL, 0, NULL, 0}};
	struct common_args a = {usage, drop};
	int first = cli_getopt(cmd, argc, argv, o, drop ? with_drop : NULL, common_opt, &a);
	if (first == -2)
		exit(0);
	return first;
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
	int first = parse_common("ls", &o, argc, argv,
			 "usage: kvtier ls [options]\n"
			 "List the objects of every tier that can list them (one per line: key, "
			 "tier, bytes;\nwith --json one JSON object per line, then a summary "
			 "object).\n" COMMON_HELP,
			 NULL);
	if (first < 0)
		return 2;
	if (first < argc)
		return cli_fail("ls", "unexpected argument '%s' (see --help)", argv[first]), 2;
	struct kvt_store *s = open_inspect(&o, "ls");
	if (!s)
		return 1;
	uint64_t n = 0, bytes = 0;
	for (int i = 0; i < kvt_store_tier_count(s); i++) {
		struct ls_ctx c = {kvt_store_tier_name(s, i), o.json, 0, 0};
		struct kvt_tier *t = kvt__store_tier(s, i);
		if (t && t->ops->scan) {
			int rc = kvt__tier_scan_bounded(t, ls_one, &c, sync_ms);
			if (rc < 0) {
				int r = cli_fail("ls", "tier %s: listing failed: %s", c.tier,
						kvt_strerror(rc));
				kvt_store_close(s); /* after the message: a stuck tier makes it wait */
				return r;
			}
		} else if (t) {
			fprintf(stderr, "ls: tier %s cannot list its objects (skipped)\n", c.tier);
		} else if (kvt__store_dram(s)) {
			kvt__dram_scan(kvt__store_dram(s), ls_one, &c);
		}
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

struct sync_io;
static struct sync_io *sync_io_new(void);
static void sync_io_cb(void *arg, int64_t rc);
static int64_t sync_io_wait(struct sync_io *w, int64_t rc);

/* Whether a tier answers: one existence check of a key no one stores, bounded by
 * store.sync_timeout_ms. Counters alone cannot tell a dead server from an idle one (a
 * network tier connects on first use). 0, or the -errno the tier answered. */
static int probe_tier(struct kvt_tier *t, int i)
{
	static const struct kvt_key nobody; /* all zero: never a content address */
	static uint8_t present[KVT_MAX_TIERS]; /* a late answer may still write it: static */
	struct sync_io *w = sync_io_new();
	if (!w)
		return -ENOMEM;
	int rc = (int)sync_io_wait(w, t->ops->exists(t, &nobody, 1, &present[i], sync_io_cb, w));
	return rc < 0 ? rc : 0;
}

int kvt_cmd_stat(int argc, char **argv)
{
	struct cli_store_opts o = {0};
	int first = parse_common("stat", &o, argc, argv,
			 "usage: kvtier stat [options]\n"
			 "Open the store and print per-tier counters (objects, bytes, capacity, "
			 "I/O, evictions,\nchecksum failures).\n" COMMON_HELP,
			 NULL);
	if (first < 0)
		return 2;
	if (first < argc)
		return cli_fail("stat", "unexpected argument '%s' (see --help)", argv[first]), 2;
	struct kvt_store *s = open_inspect(&o, "stat");
	if (!s)
		return 1;
	struct kvt_stats st;
	kvt_stats(s, &st);
	int probe[KVT_MAX_TIERS] = {0}, unreachable = 0;
	for (uint32_t i = 0; i < st.n_tiers && i < KVT_MAX_TIERS; i++) {
		struct kvt_tier *t = kvt__store_tier(s, (int)i);
		if (t && (probe[i] = probe_tier(t, (int)i)) < 0) {
			cli_fail("stat", "tier %s does not answer: %s", st.tier[i].name,
				 kvt_strerror(probe[i]));
			unreachable++;
		}
	}
	if (o.json) {
		printf("{\"version\":\"%s\",\"tiers\":[", kvt_version());
		for (uint32_t i = 0; i < st.n_tiers; i++) {
			struct kvt_tier_stats *t = &st.tier[i];
			printf("%s{\"name\":\"%s\",\"objects\":%llu,\"bytes\":%llu,"
			       "\"capacity_bytes\":%llu,\"reads\":%llu,\"writes\":%llu,"
			       "\"evictions\":%llu,\"checksum_failures\":%llu,\"errors\":%llu,"
			       "\"deadline_misses\":%llu,\"pool_bytes\":%llu,\"late_held_bytes\":%llu,"
			       "\"reachable\":%s}",
			       i ? "," : "", t->name, (unsigned long long)t->objects,
			       (unsigned long long)t->bytes, (unsigned long long)t->capacity_bytes,
			       (unsigned long long)t->reads, (unsigned long long)t->writes,
			       (unsigned long long)t->evictions,
			       (unsigned long long)t->checksum_failures,
			       (unsigned long long)t->errors, (unsigned long long)t->deadline_misses,
			       (unsigned long long)t->pool_bytes,
			       (unsigned long long)kvt__store_late_held(s, (int)i, NULL),
			       probe[i] < 0 ? "false" : "true");
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
		for (uint32_t i = 0; i < st.n_tiers; i++)
			if (st.tier[i].pool_bytes) /* nvme.preallocate: held, and no object's */
				printf("%s: %llu bytes of preallocated slots free (counted in its "
				       "capacity)\n",
				       st.tier[i].name, (unsigned long long)st.tier[i].pool_bytes);
	}
	fflush(stdout); /* before a close that may wait for the late tier */
	kvt_store_close(s);
	return unreachable ? 1 : 0;
}

/* ------------------------------------------------------------ verify */

/* One tier call waited for on this thread, at most store.sync_timeout_ms: a tier on a
 * hung device answers late or never, so the wait is shared with the callback (two
 * references) and whoever lets go last frees it. After -ETIMEDOUT the tier may still
 * write into the call's buffer: the caller must leave it allocated. */
struct sync_io {
	pthread_mutex_t m;
	pthread_cond_t c;
	bool done;
	int refs;
	int64_t rc; /* a read's length may exceed 2 GiB */
};

static struct sync_io *sync_io_new(void)
{
	struct sync_io *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	pthread_mutex_init(&w->m, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->c, &ca);
	pthread_condattr_destroy(&ca);
	w->refs = 2;
	return w;
}

static void sync_io_put(struct sync_io *w)
{
	pthread_mutex_lock(&w->m);
	bool last = --w->refs == 0;
	pthread_mutex_unlock(&w->m);
	if (last) {
		pthread_mutex_destroy(&w->m);
		pthread_cond_destroy(&w->c);
		free(w);
	}
}

static void sync_io_cb(void *arg, int64_t rc)
{
	struct sync_io *w = arg;
	pthread_mutex_lock(&w->m);
	w->rc = rc;
	w->done = true;
	pthread_cond_signal(&w->c);
	pthread_mutex_unlock(&w->m);
	sync_io_put(w);
}

/* After submitting (rc: the submit's result): the call's result, or -ETIMEDOUT. */
static int64_t sync_io_wait(struct sync_io *w, int64_t rc)
{
	if (rc < 0) { /* the callback never runs */
		sync_io_put(w);
		sync_io_put(w);
		return rc;
	}
	struct timespec end;
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += (time_t)(sync_ms / 1000);
	end.tv_nsec += (long)(sync_ms % 1000) * 1000000L;
	if (end.tv_nsec >= 1000000000L) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&w->m);
	while (!w->done && pthread_cond_timedwait(&w->c, &w->m, &end) != ETIMEDOUT)
		;
	rc = w->done ? w->rc : -ETIMEDOUT;
	pthread_mutex_unlock(&w->m);
	sync_io_put(w);
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

static int64_t read_sync(struct kvt_tier *t, const struct kvt_key *key, uint64_t off, uint64_t len,
		     void *buf)
{
	struct sync_io *w = sync_io_new();
	if (!w)
		return -ENOMEM;
	struct kvt_seg seg = {off, len, buf};
	return sync_io_wait(w, t->ops->read(t, key, &seg, 1, sync_io_cb, w));
}

/* A window of an object in buf: bytes [start, start + len). Objects up to VERIFY_PIECE
 * take one read; larger ones are read a window at a time as the layers need them. */
struct window {
	uint64_t start, len;
};

static int window_at(struct kvt_tier *t, const struct kvt_key *key, void *buf, struct window *w,
		     uint64_t pos)
{
	uint64_t start = pos & ~(uint64_t)(KVT_ALIGN - 1);
	int64_t rc = read_sync(t, key, start, VERIFY_PIECE, buf);
	if (rc < 0)
		return (int)rc;
	w->start = start;
	w->len = (uint64_t)rc;
	return 0;
}

/* Check one object through its tier. NULL if sound, "" if it is gone (removed meanwhile),
 * else why it is bad (in why[], or a constant). listed: its size in the tier's listing
 * (UINT64_MAX: unknown). buf holds VERIFY_PIECE bytes. */
static const char *verify_object(struct kvt_tier *t, const struct kvt_key *key, uint64_t listed,
				 const struct kvt_protect *prot, void *buf, char *why, size_t whylen)
{
	if (listed == 0)
		return "empty (0 bytes)";
	if (listed < KVT_HEADER_BYTES) {
		snprintf(why, whylen, "truncated (%llu bytes, shorter than a header)",
			 (unsigned long long)listed);
		return why;
	}
	struct window w = {0, 0};
	int rc = window_at(t, key, buf, &w, 0);
	if (rc == -ENOENT)
		return "";
	if (rc == -ETIMEDOUT)
		return TIMED_OUT;
	if (rc < 0)
		return kvt_strerror(rc);
	if (w.len == 0)
		return "empty (0 bytes)";
	if (w.len < KVT_HEADER_BYTES)
		return "truncated (shorter than a header)";
	struct kvt_header h;
	struct kvt_expect exp = {.key = key}; /* any namespace or geometry; format bounds */
	if (kvt__header_decode(buf, &h, &exp) < 0)
		return "corrupt header";
	/* With a MAC key, what get would drop (a MAC that does not verify) is bad here too; an
	 * object without a MAC (-EACCES) is a miss for get and kept, so it is not bad. */
	struct kvt_mac_stream *mac = NULL;
	if (kvt__mac_stream_begin(prot, buf, &h, &mac) == -EIO)
		return "cannot check the MAC (OpenSSL failed)";
	const char *bad = NULL;
	uint64_t lb = kvt_layer_bytes(&h.geometry, h.n_tokens);
	for (uint32_t l = 0; l < h.geometry.layers && !bad; l++) {
		uint32_t crc = 0;
		uint64_t pos = h.layer_offset[l], end = pos + lb;
		while (pos < end) {
			if (pos < w.start || pos >= w.start + w.len) {
				rc = window_at(t, key, buf, &w, pos);
				if (rc < 0) {
					bad = rc == -ENOENT	 ? ""
					      : rc == -ETIMEDOUT ? TIMED_OUT
								 : kvt_strerror(rc);
					break;
				}
				if (pos >= w.start + w.len) {
					snprintf(why, whylen,
						 "truncated (the header says %llu bytes; layer %u "
						 "is cut short)",
						 (unsigned long long)h.object_bytes, l);
					bad = why;
					break;
				}
			}
			uint64_t n = KVT_MIN(end, w.start + w.len) - pos;
			const uint8_t *p = (const uint8_t *)buf + (pos - w.start);
			crc = kvt__crc32c(crc, p, (size_t)n);
			if (mac && kvt__mac_stream_update(mac, p, (size_t)n) < 0) {
				bad = "cannot check the MAC (OpenSSL failed)";
				break;
			}
			pos += n;
		}
		if (!bad && crc != h.layer_crc[l]) {
			snprintf(why, whylen, "corrupt (layer %u checksum mismatch)", l);
			bad = why;
		}
	}
	if (bad || !mac) {
		kvt__mac_stream_free(mac);
		return bad;
	}
	rc = kvt__mac_stream_end(mac, &h);
	if (rc == -EBADMSG)
		return "forged or damaged (MAC mismatch: get drops it)";
	return rc < 0 ? "cannot check the MAC (OpenSSL failed)" : NULL;
}

struct anomaly_ctx {
	const char *tier;
	bool json;
	uint64_t n;
};

static void anomaly_print(void *arg, const char *path, const char *why)
{
	struct anomaly_ctx *c = arg;
	if (c->json) {
		printf("{\"path\":");
		cli_json_str(stdout, path);
		printf(",\"tier\":\"%s\",\"error\":", c->tier);
		cli_json_str(stdout, why);
		printf("}\n");
	} else {
		printf("BAD %s %s: %s (not an object file; never removed by --drop)\n", c->tier,
		       path, why);
	}
	c->n++;
}

struct bad_obj {
	int tier;
	struct kvt_key key;
};

/* --drop: reopen for writing and remove what is still bad (a writer may have replaced an
 * object since it was checked: it is checked again first). */
static int drop_bad(struct cli_store_opts *o, const struct bad_obj *bad, size_t n,
		    const struct kvt_protect *prot, uint64_t *dropped)
{
	struct kvt_store *s = cli_open_store(o);
	if (!s)
		return -1;
	sync_ms = kvt__store_sync_timeout_ms(s);
	void *buf = NULL;
	if (posix_memalign(&buf, KVT_ALIGN, VERIFY_PIECE)) {
		kvt_store_close(s);
		return -1;
	}
	char why[160];
	for (size_t k = 0; k < n; k++) {
		struct kvt_tier *t = kvt__store_tier(s, bad[k].tier);
		if (!t)
			continue;
		struct kvt_key key = bad[k].key;
		const char *w = verify_object(t, &key, UINT64_MAX, prot, buf, why, sizeof(why));
		if (w == TIMED_OUT) { /* buf stays allocated: the tier may still fill it */
			kvt_store_close(s);
			return -ETIMEDOUT;
		}
		if (!w || !*w)
			continue; /* sound now, or gone */
		struct sync_io *r = sync_io_new();
		if (r && sync_io_wait(r, t->ops->remove(t, &key, sync_io_cb, r)) == 0)
			(*dropped)++;
	}
	free(buf);
	kvt_store_close(s);
	return 0;
}

int kvt_cmd_verify(int argc, char **argv)
{
	struct cli_store_opts o = {0};
	bool drop = false;
	int first = parse_common("verify", &o, argc, argv,
			 "usage: kvtier verify [--drop] [options]\n"
			 "Read every object of every listable tier and check its header and layer "
			 "CRCs,\nand report entries that cannot be objects (symlinks, directories) "
			 "and damage that\nvoids the NVMe tier's log. Changes nothing "
			 "unless --drop is given.\nWith --json the last line is "
			 "{\"objects\":N,\"bad\":M,\"dropped\":D}.\nExit status 0 if none is "
			 "bad, 3 otherwise.\n"
			 "  --drop           remove the bad objects (not symlinks or directories)\n"
			 COMMON_HELP,
			 &drop);
	if (first < 0)
		return 2;
	if (first < argc)
		return cli_fail("verify", "unexpected argument '%s' (see --help)", argv[first]), 2;
	struct kvt_store *s = open_inspect(&o, "verify");
	if (!s)
		return 1;
	/* The store's MAC key, if any (the open above checked the key configuration). */
	struct kvt_protect *prot = NULL;
	struct kvt_config *pcfg = cli_config(&o);
	int prc = pcfg ? kvt__protect_open(pcfg, kvt__cfg_log(pcfg), &prot) : -EINVAL;
	if (pcfg)
		kvt_config_destroy(pcfg);
	if (prc < 0) {
		int r = cli_fail("verify", "cannot load the store's keys");
		kvt_store_close(s); /* after the message: a stuck tier makes it wait */
		return r;
	}
	uint64_t objects = 0, bad = 0, dropped = 0;
	struct bad_obj *bads = NULL;
	size_t nbads = 0;
	void *buf = NULL;
	if (posix_memalign(&buf, KVT_ALIGN, VERIFY_PIECE)) {
		kvt__protect_close(prot);
		int r = cli_fail("verify", "out of memory");
		kvt_store_close(s); /* after the message: a stuck tier makes it wait */
		return r;
	}
	char why[160];
	for (int i = 0; i < kvt_store_tier_count(s); i++) {
		struct kvt_tier *t = kvt__store_tier(s, i);
		const char *tname = kvt_store_tier_name(s, i);
		if (t && !t->ops->scan)
			fprintf(stderr, "verify: tier %s cannot list its objects (skipped)\n", tname);
		if (!t || !t->ops->scan)
			continue;
		struct key_list l = {0};
		int src = kvt__tier_scan_bounded(t, collect, &l, sync_ms);
		if (src < 0 || (l.n && !l.keys)) {
			free(l.keys);
			free(l.bytes);
			free(buf);
			free(bads);
			kvt__protect_close(prot);
			int r = cli_fail("verify", "tier %s: listing failed: %s", tname,
					kvt_strerror(src < 0 ? src : -ENOMEM));
			kvt_store_close(s); /* after the message: a stuck tier makes it wait */
			return r;
		}
		for (size_t k = 0; k < l.n; k++) {
			const char *w =
			    verify_object(t, &l.keys[k], l.bytes[k], prot, buf, why, sizeof(why));
			if (w && !*w)
				continue; /* removed meanwhile */
			if (w == TIMED_OUT) { /* buf stays allocated: the tier may still fill it */
				free(l.keys);
				free(l.bytes);
				free(bads);
				kvt__protect_close(prot);
				int r = cli_fail("verify", "tier %s: a read did not answer within %llu "
						"ms (store.sync_timeout_ms)", tname,
						(unsigned long long)sync_ms);
				kvt_store_close(s); /* after the message: a stuck tier makes it wait */
				return r;
			}
			objects++;
			if (!w)
				continue;
			bad++;
			char hex[65];
			kvt_key_to_hex(&l.keys[k], hex);
			if (o.json) {
				printf("{\"key\":\"%s\",\"tier\":\"%s\",\"error\":", hex, tname);
				cli_json_str(stdout, w);
				printf("}\n");
			} else {
				printf("BAD %s %s: %s\n", tname, hex, w);
			}
			struct bad_obj *nb = realloc(bads, (nbads + 1) * sizeof(*nb));
			if (nb) {
				bads = nb;
				bads[nbads++] = (struct bad_obj){i, l.keys[k]};
			}
		}
		free(l.keys);
		free(l.bytes);
		if (t->ops->scan_anomalies) {
			struct anomaly_ctx c = {tname, o.json, 0};
			int arc = kvt__tier_scan_anomalies_bounded(t, anomaly_print, &c, sync_ms);
			if (arc < 0) {
				free(buf);
				free(bads);
				kvt__protect_close(prot);
				int r = cli_fail("verify", "tier %s: checking entries failed: %s",
						tname, kvt_strerror(arc));
				kvt_store_close(s); /* after the message: a stuck tier makes it wait */
				return r;
			}
			bad += c.n;
		}
	}
	free(buf);
	kvt_store_close(s);
	int drc = drop && nbads ? drop_bad(&o, bads, nbads, prot, &dropped) : 0;
	kvt__protect_close(prot);
	if (drc < 0) {
		free(bads);
		if (drc == -ETIMEDOUT)
			return cli_fail("verify", "--drop: a read did not answer within %llu ms "
					"(store.sync_timeout_ms)", (unsigned long long)sync_ms);
		return cli_fail("verify", "cannot open the store for --drop");
	}
	free(bads);
	if (o.json)
		printf("{\"objects\":%llu,\"bad\":%llu,\"dropped\":%llu}\n",
		       (unsigned long long)objects, (unsigned long long)bad,
		       (unsigned long long)dropped);
	else
		printf("%llu objects checked, %llu bad, %llu dropped\n", (unsigned long long)objects,
		       (unsigned long long)bad, (unsigned long long)dropped);
	return bad ? 3 : 0;
}

/* ------------------------------------------------------------ rm */

int kvt_cmd_rm(int argc, char **argv)
{
	struct cli_store_opts o = {0};
	const char *keys[256];
	int n = 0;
	int first = parse_common("rm", &o, argc, argv,
				 "usage: kvtier rm [options] KEY...\n"
				 "Remove chunks (64-hex-digit keys) from every tier.\n" COMMON_HELP,
				 NULL);
	if (first < 0)
		return 2;
	for (int i = first; i < argc; i++) {
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
		int rc = kvt__store_remove_stored_sync(s, &k[i]); /* the stored name, as ls shows */
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
