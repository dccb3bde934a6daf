/* kvt-test-labels: slow
 *
 * store_crash.c - crash recovery through the whole store. A child process puts chunks at
 * full speed through a DRAM + NVMe store (write-through, so NVMe writes are in flight all
 * the time) and is killed with SIGKILL at a random moment. The parent reopens the store on
 * the same directory: every object the NVMe tier lists must read back through kvt_get with
 * exactly the bytes that were put, and `kvtier verify` must find no bad object. Repeated
 * many times with different kill points, half of them with NVMe's small-object log
 * (nvme.log_max: chunks go into batches in log segments instead of a file each).
 */
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "engine.h"
#include "store_key.h"
#include "testlib.h"
#include "tier.h"

static size_t PAYLOAD;

/* The payload's seed is derived from the key, so the parent knows what each object must
 * hold without any record from the dead child. */
static uint64_t seed_of(const struct kvt_key *k)
{
	uint64_t s;
	memcpy(&s, k->bytes, sizeof(s));
	return s;
}

static void noop_cb(void *arg, const struct kvt_result *res)
{
	(void)arg;
	(void)res;
}

static void child(const char *dir, int iter)
{
	struct kvt_config *c = test_config("dram,nvme", dir);
	test_set(c, "nvme.fsync", iter % 2 ? "data" : "none");
	if (iter / 2 % 2)
		test_set(c, "nvme.log_max", "1MiB");
	struct kvt_store *s;
	if (kvt_store_open(c, &s) < 0)
		_exit(3);
	const struct kvt_geometry *g = kvt_store_geometry(s);
	PAYLOAD = kvt_payload_bytes(g, g->chunk_tokens);
	void *buf = malloc(PAYLOAD);
	struct kvt_key prev, key;
	for (uint32_t i = 0;; i++) {
		uint32_t tok[2] = {(uint32_t)iter, i};
		kvt_key_next(kvt_store_ns_id(s), i ? &prev : NULL, tok, 2, &key);
		test_fill(buf, PAYLOAD, seed_of(&key));
		while (kvt_put(s, &key, i ? &prev : NULL, g->chunk_tokens, buf, PAYLOAD, noop_cb,
			       NULL) == -EAGAIN)
			kvt_poll(s, 1);
		/* Drain completions now and then; the copy is made before put returns. */
		kvt_poll(s, 0);
		prev = key;
	}
}

struct collected {
	struct kvt_key keys[4096];
	int n;
};

static int collect(void *arg, const struct kvt_key *key, uint64_t bytes)
{
	struct collected *c = arg;
	(void)bytes;
	if (c->n < 4096)
		c->keys[c->n++] = *key;
	return 0;
}

static const struct collected *g_col;

static int cmp_idx(const void *a, const void *b)
{
	return memcmp(&g_col->keys[*(const int *)a], &g_col->keys[*(const int *)b],
		      sizeof(struct kvt_key));
}

static int cmp_find(const void *k, const void *b)
{
	return memcmp(k, &g_col->keys[*(const int *)b], sizeof(struct kvt_key));
}

/* The tier lists storage keys (src/store_key.h), kvt_get takes the key the child put:
 * rebuild the children's keys of every round so far and keep those whose storage key is
 * listed (out[j] for col->keys[j]). Returns how many listed objects were identified. */
static int user_keys(const uint8_t *ns, int rounds, const struct collected *col,
		     struct kvt_key *out)
{
	static int idx[4096];
	g_col = col;
	for (int j = 0; j < col->n; j++)
		idx[j] = j;
	qsort(idx, (size_t)col->n, sizeof(idx[0]), cmp_idx);
	int found = 0;
	for (int it = 0; it <= rounds && found < col->n; it++) {
		struct kvt_key prev, key, sk;
		for (uint32_t i = 0, misses = 0; misses < 1024; i++) {
			uint32_t tok[2] = {(uint32_t)it, i};
			kvt_key_next(ns, i ? &prev : NULL, tok, 2, &key);
			kvt__storage_key(ns, &key, &sk);
			int *hit = bsearch(&sk, idx, (size_t)col->n, sizeof(idx[0]), cmp_find);
			if (hit) {
				out[*hit] = key;
				found++;
				misses = 0;
			} else {
				misses++;
			}
			prev = key;
		}
	}
	return found;
}

int main(void)
{
	char *dir = test_tmpdir("crash");
	int iters = getenv("KVT_CRASH_ITERS") ? atoi(getenv("KVT_CRASH_ITERS")) : 25;
	srand((unsigned)time(NULL));
	uint64_t total_checked = 0, log_checked = 0;
	for (int it = 0; it < iters; it++) {
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0)
			child(dir, it);
		usleep(20000 + (useconds_t)(rand() % 250000));
		kill(pid, SIGKILL);
		int st;
		waitpid(pid, &st, 0);
		CHECK(WIFSIGNALED(st));

		/* Reopen with NVMe only: what is on the drive must be whole or absent. */
		struct kvt_config *c = test_config("nvme", dir);
		/* This test is about torn objects, not deadlines: a CI disk shared with other
		 * jobs may stall a read past the default deadline, which would be a miss. */
		test_set(c, "store.deadline_floor_ms", "5000");
		test_set(c, "store.tier_timeout_ms", "30000");
		struct kvt_store *s;
		CHECK_RC(kvt_store_open(c, &s), 0);
		const struct kvt_geometry *g = kvt_store_geometry(s);
		PAYLOAD = kvt_payload_bytes(g, g->chunk_tokens);
		struct kvt_tier *t = kvt__store_tier(s, 0);
		static struct collected col;
		col.n = 0;
		CHECK_RC(t->ops->scan(t, collect, &col), 0);
		static struct kvt_key ukeys[4096];
		CHECK_EQ(user_keys(kvt_store_ns_id(s), it, &col, ukeys), col.n);
		void *buf = malloc(PAYLOAD);
		for (int i = 0; i < col.n; i++) {
			struct kvt_result res;
			int rc = kvt_get_sync(s, &ukeys[i], 0, 0, buf, PAYLOAD, &res);
			if (rc != 0 || !test_check(buf, PAYLOAD, seed_of(&ukeys[i]))) {
				fprintf(stderr, "iteration %d: listed object %d of %d is %s\n", it, i,
					col.n, rc ? kvt_strerror(rc) : "wrong bytes");
				return 1;
			}
		}
		struct kvt_stats stt;
		kvt_stats(s, &stt);
		CHECK(stt.tier[0].checksum_failures == 0);
		total_checked += (uint64_t)col.n;
		if (it / 2 % 2)
			log_checked += (uint64_t)col.n;
		free(buf);
		kvt_store_close(s);
		kvt_config_destroy(c);
		/* Start each round from a store of bounded size; not after the last, whose
		 * store `kvtier verify` checks below (an emptied directory is no store). */
		if (col.n > 2000 && it + 1 < iters) {
			test_rmdir(dir);
			mkdir(dir, 0755);
		}
	}
	/* The CLI agrees: nothing bad on the drive. */
	char cmd[8192];
	snprintf(cmd, sizeof(cmd),
		 "\"$KVT_BIN/kvtier\" verify --dir '%s' --set model.layers=4 --set model.kv_heads=2 "
		 "--set model.head_dim=64 --set model.chunk_tokens=16 --set model.name=test-model "
		 "--tiers nvme --json | tail -1 | grep -q '\"bad\":0'",
		 dir);
	if (getenv("KVT_BIN"))
		CHECK(system(cmd) == 0);
	test_rmdir(dir);
	free(dir);
	printf("store_crash: %d kills, %llu objects checked (%llu after a run with the log), none "
	       "torn\n",
	       iters, (unsigned long long)total_checked, (unsigned long long)log_checked);
	CHECK(total_checked > 0 && (iters < 4 || log_checked > 0));
	return 0;
}
