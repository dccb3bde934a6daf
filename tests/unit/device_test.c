/*
 * device_test.c - the device layer on the emu backend, checked against the reference model
 * of tests/unit/device_common.h: every layout round trips byte for byte (random data,
 * poisoned destinations, shuffled block ids, partial last chunk, every dtype), tensor
 * parallel writers and readers of different widths agree, a copy never starts before its
 * dependency, layers complete in order, and the throttle holds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
/* cmocka needs the three above first */
#include <cmocka.h>
#include <time.h>
#include <unistd.h>

#include "device_common.h"

#define POISON 0xA5

static struct kvt_geometry geo_kv(uint8_t dtype)
{
	struct kvt_geometry g = {.layers = 4,
				 .kv_heads = 8,
				 .head_dim = 16,
				 .chunk_tokens = 64,
				 .dtype = dtype,
				 .kind = KVT_KIND_KV};
	return g;
}

static struct kvt_geometry geo_mla(void)
{
	struct kvt_geometry g = {.layers = 3,
				 .kv_heads = 1,
				 .head_dim = 72,
				 .chunk_tokens = 64,
				 .dtype = KVT_DTYPE_FP16,
				 .kind = KVT_KIND_MLA};
	return g;
}

static uint8_t *obj_new(const struct kvt_geometry *g, uint32_t n, size_t *len)
{
	*len = kvt_object_bytes(g, n);
	uint8_t *o = malloc(*len);
	memset(o, POISON, *len);
	return o;
}

static uint8_t *logical_new(const struct kvt_geometry *g, uint32_t n, uint64_t *seed)
{
	size_t len = g->layers * kvt_layer_bytes(g, n);
	uint8_t *p = malloc(len);
	tr_fill(seed, p, len);
	return p;
}

/* One writer (all heads) gathers, one reader scatters into poisoned blocks. */
static void round_trip(const struct kvt_geometry *g, uint32_t layout, uint32_t bs, uint32_t n,
		       uint64_t seed)
{
	uint32_t nb = 2 * g->chunk_tokens / bs + 3, nblk = (n + bs - 1) / bs;
	uint32_t ids_w[256], ids_r[256];
	struct tr_rank w, r;
	size_t len;
	tr_shuffled_ids(&seed, nb, ids_w, nblk);
	tr_shuffled_ids(&seed, nb, ids_r, nblk);
	uint8_t *logical = logical_new(g, n, &seed);
	assert_int_equal(tr_rank_open(&w, NULL, g, layout, bs, nb, 0, g->kv_heads, 0, &seed), 0);
	assert_int_equal(tr_rank_open(&r, NULL, g, layout, bs, nb, 0, g->kv_heads, POISON, NULL),
			 0);
	assert_string_equal(kvt_device_backend(w.dev), "emu");
	tr_rank_load_logical(&w, logical, n, ids_w);
	uint8_t *obj = obj_new(g, n, &len);

	struct kvt_device_op *op;
	assert_int_equal(kvt_device_gather(w.dev, ids_w, nblk, n, obj, len, NULL, &op), 0);
	assert_int_equal(kvt_device_op_wait(op, 10000), 0);
	assert_int_equal(kvt_device_op_layers_done(op), g->layers);
	kvt_device_op_free(op);
	/* Exactly the dense bytes of each layer, nothing in the header or the padding. */
	assert_int_equal(tr_obj_check(obj, len, g, logical, n, 0, g->kv_heads, POISON), 0);

	assert_int_equal(kvt_device_scatter(r.dev, obj, len, n, ids_r, nblk, NULL, &op), 0);
	assert_int_equal(kvt_device_op_wait(op, 10000), 0);
	kvt_device_op_free(op);
	/* Target rows hold the data; every other byte (other blocks, rows past n in the last
	 * block) is still poison. */
	assert_int_equal(tr_rank_check(&r, logical, n, ids_r, POISON), 0);

	free(obj);
	free(logical);
	tr_rank_close(&w);
	tr_rank_close(&r);
}

static void test_flash_attn(void **state)
{
	struct kvt_geometry g = geo_kv(KVT_DTYPE_BF16);
	for (uint64_t i = 1; i <= 3; i++) /* fresh random data and block ids each time */
		round_trip(&g, KVT_LAYOUT_FLASH_ATTN, 16, 64, 0x1234 * i);
}

static void test_flashinfer(void **state)
{
	struct kvt_geometry g = geo_kv(KVT_DTYPE_BF16);
	for (uint64_t i = 1; i <= 3; i++)
		round_trip(&g, KVT_LAYOUT_FLASHINFER, 16, 64, 0x777 * i);
}

static void test_mla(void **state)
{
	struct kvt_geometry g = geo_mla();
	for (uint64_t i = 1; i <= 3; i++)
		round_trip(&g, KVT_LAYOUT_MLA, 16, 64, 0x4242 * i);
}

static void test_partial_last_chunk(void **state)
{
	struct kvt_geometry g = geo_kv(KVT_DTYPE_FP16), m = geo_mla();
	round_trip(&g, KVT_LAYOUT_FLASH_ATTN, 16, 59, 11); /* last block 11 of 16 rows */
	round_trip(&g, KVT_LAYOUT_FLASHINFER, 16, 1, 12);  /* a single token */
	round_trip(&g, KVT_LAYOUT_FLASHINFER, 8, 63, 13);
	round_trip(&m, KVT_LAYOUT_MLA, 16, 33, 14);
}

static void test_dtypes_and_block_sizes(void **state)
{
	uint8_t dts[] = {KVT_DTYPE_FP8, KVT_DTYPE_FP16, KVT_DTYPE_FP32};
	for (size_t i = 0; i < sizeof(dts); i++) {
		struct kvt_geometry g = geo_kv(dts[i]);
		round_trip(&g, KVT_LAYOUT_FLASH_ATTN, 1, 64, 100 + i);	/* one token per block */
		round_trip(&g, KVT_LAYOUT_FLASHINFER, 64, 40, 200 + i); /* one block per chunk */
	}
}

/* ---------------------------------------------------------------- TP */

struct tp_split {
	uint32_t n;
	uint32_t h[5]; /* boundaries h[0]=0 .. h[n]=kv_heads */
};

/* Ranks of `wr` write their slices into one object (all at once); it must then hold the
 * whole logical KV; ranks of `rd` read their slices back into poisoned blocks. */
static void tp_case(uint32_t layout, const struct tp_split *wr, const struct tp_split *rd,
		    uint32_t n, uint64_t seed)
{
	struct kvt_geometry g = geo_kv(KVT_DTYPE_BF16);
	uint32_t bs = 16, nb = 12, nblk = (n + bs - 1) / bs;
	uint8_t *logical = logical_new(&g, n, &seed);
	size_t len;
	uint8_t *obj = obj_new(&g, n, &len);
	struct tr_rank ranks[4];
	uint32_t ids[4][8];
	struct kvt_device_op *ops[4];

	for (uint32_t i = 0; i < wr->n; i++) {
		tr_shuffled_ids(&seed, nb, ids[i], nblk);
		assert_int_equal(tr_rank_open(&ranks[i], NULL, &g, layout, bs, nb, wr->h[i],
					      wr->h[i + 1], 0x11, NULL),
				 0);
		tr_rank_load_logical(&ranks[i], logical, n, ids[i]);
	}
	if (wr->n > 1) {
		/* One rank alone writes only its own slice of the object. */
		assert_int_equal(
		    kvt_device_gather(ranks[0].dev, ids[0], nblk, n, obj, len, NULL, &ops[0]), 0);
		assert_int_equal(kvt_device_op_wait(ops[0], 10000), 0);
		kvt_device_op_free(ops[0]);
		assert_int_equal(tr_obj_check(obj, len, &g, logical, n, wr->h[0], wr->h[1], POISON),
				 0);
	}
	for (uint32_t i = 0; i < wr->n; i++)
		assert_int_equal(
		    kvt_device_gather(ranks[i].dev, ids[i], nblk, n, obj, len, NULL, &ops[i]), 0);
	for (uint32_t i = 0; i < wr->n; i++) {
		assert_int_equal(kvt_device_op_wait(ops[i], 10000), 0);
		kvt_device_op_free(ops[i]);
		tr_rank_close(&ranks[i]);
	}
	assert_int_equal(tr_obj_check(obj, len, &g, logical, n, 0, g.kv_heads, POISON), 0);

	for (uint32_t i = 0; i < rd->n; i++) {
		tr_shuffled_ids(&seed, nb, ids[i], nblk);
		assert_int_equal(tr_rank_open(&ranks[i], NULL, &g, layout, bs, nb, rd->h[i],
					      rd->h[i + 1], POISON, NULL),
				 0);
		assert_int_equal(
		    kvt_device_scatter(ranks[i].dev, obj, len, n, ids[i], nblk, NULL, &ops[i]), 0);
	}
	for (uint32_t i = 0; i < rd->n; i++) {
		assert_int_equal(kvt_device_op_wait(ops[i], 10000), 0);
		kvt_device_op_free(ops[i]);
		assert_int_equal(tr_rank_check(&ranks[i], logical, n, ids[i], POISON), 0);
		tr_rank_close(&ranks[i]);
	}
	free(obj);
	free(logical);
}

static void test_tp(void **state)
{
	const struct tp_split tp1 = {1, {0, 8}}, tp2 = {2, {0, 4, 8}}, tp4 = {4, {0, 2, 4, 6, 8}},
			      uneven = {2, {0, 3, 8}};
	uint32_t layouts[] = {KVT_LAYOUT_FLASH_ATTN, KVT_LAYOUT_FLASHINFER};
	for (int i = 0; i < 2; i++) {
		uint64_t s = 900 + i * 10;
		tp_case(layouts[i], &tp2, &tp1, 64, s + 1); /* TP=2 writes, TP=1 reads */
		tp_case(layouts[i], &tp2, &tp4, 64, s + 2); /* TP=2 writes, TP=4 reads */
		tp_case(layouts[i], &tp1, &tp2, 64, s + 3); /* and vice versa */
		tp_case(layouts[i], &tp4, &tp2, 50, s + 4); /* partial chunk too */
		tp_case(layouts[i], &uneven, &tp4, 37, s + 5);
	}
}

/* ---------------------------------------------------------- dependency */

static void test_dependency(void **state)
{
	struct kvt_geometry g = geo_kv(KVT_DTYPE_BF16);
	uint64_t seed = 77;
	uint32_t n = 64, bs = 16, nb = 8, ids[4], ids_r[4];
	struct tr_rank w, r;
	struct kvt_emu_event *ev;
	struct kvt_device_op *op;
	size_t len;
	tr_shuffled_ids(&seed, nb, ids, 4);
	tr_shuffled_ids(&seed, nb, ids_r, 4);
	uint8_t *early = logical_new(&g, n, &seed), *late = logical_new(&g, n, &seed);
	uint8_t *obj = obj_new(&g, n, &len);
	assert_int_equal(tr_rank_open(&w, NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 0, 8, 0, NULL),
			 0);
	tr_rank_load_logical(&w, early, n, ids);
	assert_int_equal(kvt_emu_event_create(&ev), 0);

	/* The engine issues the copy while its kernel still writes the blocks. */
	struct kvt_device_dep dep = {KVT_DEP_EMU_EVENT, ev};
	assert_int_equal(kvt_device_gather(w.dev, ids, 4, n, obj, len, &dep, &op), 0);
	usleep(100 * 1000);
	assert_int_equal(kvt_device_op_wait(op, 0), -ETIMEDOUT);
	assert_int_equal(kvt_device_op_layers_done(op), 0);
	assert_int_equal(tr_obj_check(obj, len, &g, early, n, 0, 0, POISON), 0); /* untouched */
	tr_rank_load_logical(&w, late, n, ids); /* the "kernel" finishes writing */
	kvt_emu_event_signal(ev);
	assert_int_equal(kvt_device_op_wait(op, 10000), 0);
	kvt_device_op_free(op);
	assert_int_equal(tr_obj_check(obj, len, &g, late, n, 0, 8, POISON), 0);

	/* A scatter waits too: the destination blocks are untouched until the signal. */
	kvt_emu_event_reset(ev);
	assert_int_equal(
	    tr_rank_open(&r, NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 0, 8, POISON, NULL), 0);
	assert_int_equal(kvt_device_scatter(r.dev, obj, len, n, ids_r, 4, &dep, &op), 0);
	usleep(50 * 1000);
	assert_int_equal(kvt_device_op_wait_layer(op, 0, 0), -ETIMEDOUT);
	assert_int_equal(tr_rank_check(&r, late, 0, ids_r, POISON), 0); /* all poison */
	kvt_emu_event_signal(ev);
	assert_int_equal(kvt_device_op_wait(op, 10000), 0);
	kvt_device_op_free(op);
	assert_int_equal(tr_rank_check(&r, late, n, ids_r, POISON), 0);

	/* A dependency kind this backend cannot honour is refused, never ignored. */
	struct kvt_device_dep cuda = {KVT_DEP_CUDA_EVENT, ev};
	assert_int_equal(kvt_device_gather(w.dev, ids, 4, n, obj, len, &cuda, &op), -EINVAL);
	struct kvt_device_dep nul = {KVT_DEP_EMU_EVENT, NULL};
	assert_int_equal(kvt_device_gather(w.dev, ids, 4, n, obj, len, &nul, &op), -EINVAL);

	/* A handle freed before its op ran: the op still completes and cleans up. */
	kvt_emu_event_reset(ev);
	assert_int_equal(kvt_device_gather(w.dev, ids, 4, n, obj, len, &dep, &op), 0);
	kvt_device_op_free(op);
	kvt_emu_event_signal(ev);
	tr_rank_close(&w); /* waits for it */
	tr_rank_close(&r);
	kvt_emu_event_destroy(ev);
	free(obj);
	free(early);
	free(late);
}

/* The dependency is the one the call saw, as cudaStreamWaitEvent at the call would take
 * it: a copy issued once its event was signalled does not also wait for work the engine
 * starts on that event afterwards (reset, to be signalled at the end of the next step),
 * even when the copy queue is still busy with an earlier op at that time. The old emu
 * looked at the event only when its worker reached the op (and the cuda backend records
 * a KVT_DEP_CUDA_STREAM when it submits, which for kvt_device_load is later, on another
 * thread): the copy then hung until the engine's next step. */
static void test_dependency_at_call(void **state)
{
	struct kvt_geometry g = geo_kv(KVT_DTYPE_BF16);
	uint64_t seed = 91;
	uint32_t n = 64, bs = 16, nb = 8, ids[4];
	struct tr_rank w;
	struct kvt_emu_event *busy, *ev;
	struct kvt_device_op *a, *b;
	size_t len;
	tr_shuffled_ids(&seed, nb, ids, 4);
	uint8_t *logical = logical_new(&g, n, &seed);
	uint8_t *obj_a = obj_new(&g, n, &len), *obj_b = obj_new(&g, n, &len);
	assert_int_equal(tr_rank_open(&w, NULL, &g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 0, 8, 0, NULL),
			 0);
	tr_rank_load_logical(&w, logical, n, ids);
	assert_int_equal(kvt_emu_event_create(&busy), 0);
	assert_int_equal(kvt_emu_event_create(&ev), 0);
	struct kvt_device_dep dep_busy = {KVT_DEP_EMU_EVENT, busy}, dep = {KVT_DEP_EMU_EVENT, ev};
	for (int dir = 0; dir < 2; dir++) {
		/* a holds the queue of this direction until busy is signalled */
		if (dir == 0) {
			assert_int_equal(
			    kvt_device_gather(w.dev, ids, 4, n, obj_a, len, &dep_busy, &a), 0);
		} else {
			assert_int_equal(
			    kvt_device_scatter(w.dev, obj_b, len, n, ids, 4, &dep_busy, &a), 0);
		}
		kvt_emu_event_signal(ev); /* the engine's reads/writes of the blocks are done */
		if (dir == 0) {
			assert_int_equal(kvt_device_gather(w.dev, ids, 4, n, obj_b, len, &dep, &b),
					 0);
		} else {
			assert_int_equal(kvt_device_scatter(w.dev, obj_b, len, n, ids, 4, &dep, &b),
					 0);
		}
		kvt_emu_event_reset(ev); /* its next step starts, signalled much later */
		kvt_emu_event_signal(busy);
		assert_int_equal(kvt_device_op_wait(a, 10000), 0);
		int rc = kvt_device_op_wait(b, 2000);
		print_message("  %s issued after its dependency completed, the event reset "
			      "after the call: %s\n",
			      dir ? "scatter" : "gather",
			      rc == 0 ? "ran" : "waited for the next signal");
		assert_int_equal(rc, 0);
		kvt_emu_event_signal(ev); /* (old code: lets b finish before the next round) */
		assert_int_equal(kvt_device_op_wait(b, 10000), 0);
		kvt_device_op_free(a);
		kvt_device_op_free(b);
		kvt_emu_event_reset(busy);
		kvt_emu_event_reset(ev);
		if (dir == 0)
			assert_int_equal(tr_obj_check(obj_b, len, &g, logical, n, 0, 8, POISON), 0);
	}
	assert_int_equal(tr_rank_check(&w, logical, n, ids, 0), 0); /* scattered back as is */
	tr_rank_close(&w);
	kvt_emu_event_destroy(busy);
	kvt_emu_event_destroy(ev);
	free(obj_a);
	free(obj_b);
	free(logical);
}

/* ----------------------------------------------------- layer order, throttle */

static struct kvt_config *cfg_gbps(const char *gbps)
{
	struct kvt_config *cfg;
	assert_int_equal(kvt_config_create(&cfg), 0);
	assert_int_equal(kvt_config_set(cfg, "device.emu_gbps", gbps, NULL, 0), 0);
	return cfg;
}

static void test_layer_order(void **state)
{
	struct kvt_geometry g = {.layers = 8,
				 .kv_heads = 8,
				 .head_dim = 64,
				 .chunk_tokens = 64,
				 .dtype = KVT_DTYPE_BF16,
				 .kind = KVT_KIND_KV};
	uint64_t seed = 5;
	uint32_t n = 64, ids[4];
	struct tr_rank r;
	size_t len;
	tr_shuffled_ids(&seed, 8, ids, 4);
	uint8_t *logical = logical_new(&g, n, &seed), *obj = obj_new(&g, n, &len);
	for (uint32_t l = 0; l < g.layers; l++)
		for (uint32_t p = 0; p < 2; p++)
			for (uint32_t t = 0; t < n; t++)
				memcpy(obj + tr_obj_off(&g, n, l, p, t, 0),
				       logical + tr_logical_off(&g, n, l, p, t, 0), 8 * 64 * 2);
	/* 128 KiB per layer at 10 MB/s: ~13 ms per layer, ~105 ms in all. */
	struct kvt_config *cfg = cfg_gbps("0.01");
	assert_int_equal(
	    tr_rank_open(&r, cfg, &g, KVT_LAYOUT_FLASHINFER, 16, 8, 0, 8, POISON, NULL), 0);
	struct kvt_device_op *op;
	assert_int_equal(kvt_device_scatter(r.dev, obj, len, n, ids, 4, NULL, &op), 0);
	uint32_t seen = 0;
	for (uint32_t l = 0; l < g.layers; l++) {
		assert_int_equal(kvt_device_op_wait_layer(op, l, 10000), 0);
		uint32_t done = kvt_device_op_layers_done(op);
		assert_true(done >= l + 1);
		assert_true(done >= seen); /* never goes back */
		seen = done;
		if (l == 0) /* attention on layer 0 could start long before the last layer */
			assert_true(done < g.layers);
		/* Layer l is completely in place when its wait returns. */
		assert_int_equal(tr_rank_check_layers(&r, logical, n, ids, POISON, l, l + 1), 0);
	}
	assert_int_equal(kvt_device_op_wait(op, 10000), 0);
	assert_int_equal(kvt_device_op_wait_layer(op, g.layers, 0), -EINVAL);
	kvt_device_op_free(op);
	tr_rank_close(&r);
	kvt_config_destroy(cfg);
	free(obj);
	free(logical);
}

static double seconds_for(struct kvt_config *cfg, uint32_t ops, uint64_t *bytes)
{
	struct kvt_geometry g = {.layers = 8,
				 .kv_heads = 8,
				 .head_dim = 128,
				 .chunk_tokens = 64,
				 .dtype = KVT_DTYPE_BF16,
				 .kind = KVT_KIND_KV};
	uint64_t seed = 9;
	uint32_t ids[4] = {3, 0, 2, 1};
	struct tr_rank r;
	size_t len;
	uint8_t *obj = obj_new(&g, 64, &len);
	assert_int_equal(tr_rank_open(&r, cfg, &g, KVT_LAYOUT_FLASH_ATTN, 16, 4, 0, 8, 0, &seed),
			 0);
	struct kvt_device_op *op[16];
	uint64_t t0 = kvt__now_ns();
	for (uint32_t i = 0; i < ops; i++)
		assert_int_equal(kvt_device_gather(r.dev, ids, 4, 64, obj, len, NULL, &op[i]), 0);
	for (uint32_t i = 0; i < ops; i++) {
		assert_int_equal(kvt_device_op_wait(op[i], 30000), 0);
		kvt_device_op_free(op[i]);
	}
	double s = (double)(kvt__now_ns() - t0) / 1e9;
	*bytes = (uint64_t)ops * g.layers * kvt_layer_bytes(&g, 64);
	tr_rank_close(&r);
	free(obj);
	return s;
}

/* The throttle holds: copies at a link speed take at least their bytes over that speed,
 * and at most that plus the copying itself (slack for sleeps and scheduling). The speed is
 * 100 MB/s, or less where an unthrottled run shows that copying would take more than a
 * fifth of the throttled time (a sanitizer, a throttled CI core): so the throttle, not the
 * CPU, sets the time being checked. */
static void test_throttle(void **state)
{
	uint64_t bytes;
	struct kvt_config *cfg = cfg_gbps("0");
	double fast = seconds_for(cfg, 8, &bytes); /* 8 x 2 MiB = 16.8 MB */
	kvt_config_destroy(cfg);
	print_message("unthrottled: %.1f ms (%.2f GB/s)\n", fast * 1e3, bytes / fast / 1e9);
	double gbps = 0.1; /* ~168 ms */
	if ((double)bytes / (gbps * 1e9) < 5 * fast)
		gbps = (double)bytes / (5 * fast) / 1e9;
	char v[32];
	snprintf(v, sizeof(v), "%.6g", gbps);
	cfg = cfg_gbps(v);
	double s = seconds_for(cfg, 8, &bytes);
	double expect = (double)bytes / (atof(v) * 1e9);
	print_message("throttle: %.1f MB in %.1f ms at %s GB/s (expected %.1f ms)\n", bytes / 1e6,
		      s * 1e3, v, expect * 1e3);
	assert_true(s >= 0.9 * expect);
	assert_true(s <= 2 * expect + 2 * fast + 0.2);
	assert_true(fast < s);
	kvt_config_destroy(cfg);
}

/* ------------------------------------------------------------- arguments */

static void test_bad_arguments(void **state)
{
	struct kvt_geometry g = geo_kv(KVT_DTYPE_BF16);
	struct tr_rank r;
	size_t len;
	uint8_t *obj = obj_new(&g, 64, &len);
	struct kvt_device_op *op = NULL;
	assert_int_equal(tr_rank_open(&r, NULL, &g, KVT_LAYOUT_FLASH_ATTN, 16, 8, 2, 6, 0, NULL),
			 0);
	uint32_t ids[5] = {0, 1, 2, 3, 8};
	assert_int_equal(kvt_device_gather(r.dev, ids + 1, 4, 64, obj, len, NULL, &op), -EINVAL);
	assert_int_equal(kvt_device_gather(r.dev, ids, 3, 64, obj, len, NULL, &op), -EINVAL);
	assert_int_equal(kvt_device_gather(r.dev, ids, 4, 65, obj, len, NULL, &op), -EINVAL);
	assert_int_equal(kvt_device_gather(r.dev, ids, 4, 0, obj, len, NULL, &op), -EINVAL);
	assert_int_equal(kvt_device_gather(r.dev, ids, 4, 64, obj, len - 1, NULL, &op), -EINVAL);
	assert_int_equal(kvt_device_scatter(r.dev, NULL, len, 64, ids, 4, NULL, &op), -EINVAL);
	assert_null(op);
	tr_rank_close(&r);

	struct kvt_device *dev;
	void *base[KVT_MAX_LAYERS] = {obj, obj, obj, obj};
	struct kvt_device_desc d = {sizeof(d), g, KVT_LAYOUT_FLASH_ATTN, 16, 8, 0, 8, 0, base};
	assert_int_equal(kvt_device_open(NULL, "emu", &d, &dev), 0);
	kvt_device_close(dev);
	struct kvt_device_desc b = d;
	b.head_end = 9; /* more heads than the model */
	assert_int_equal(kvt_device_open(NULL, "emu", &b, &dev), -EINVAL);
	b = d;
	b.head_begin = 4;
	b.head_end = 4;
	assert_int_equal(kvt_device_open(NULL, "emu", &b, &dev), -EINVAL);
	b = d;
	b.block_size = 48; /* chunk_tokens must be a multiple */
	assert_int_equal(kvt_device_open(NULL, "emu", &b, &dev), -EINVAL);
	b = d;
	b.layout = KVT_LAYOUT_MLA; /* MLA layout needs an MLA geometry */
	assert_int_equal(kvt_device_open(NULL, "emu", &b, &dev), -EINVAL);
	b = d;
	b.size = 8;
	assert_int_equal(kvt_device_open(NULL, "emu", &b, &dev), -EINVAL);
	b = d;
	base[3] = NULL;
	assert_int_equal(kvt_device_open(NULL, "emu", &b, &dev), -EINVAL);
	base[3] = obj;
	assert_int_equal(kvt_device_open(NULL, "bogus", &d, &dev), -EINVAL);
	free(obj);
}

/* The block ids are checked before one is read: a NULL array, or an n_blocks that does
 * not match n_tokens (more than the caller's array holds), is -EINVAL. The op used to copy
 * n_blocks ids first: NULL crashed, 1000 ids of a 4-id array read past it (ASan:
 * heap-buffer-overflow), 2^28 ids allocated 1 GiB and read past the heap. */
static void test_bad_block_ids(void **state)
{
	struct kvt_geometry g = geo_kv(KVT_DTYPE_BF16);
	struct tr_rank r;
	size_t len;
	uint8_t *obj = obj_new(&g, 64, &len);
	struct kvt_device_op *op = NULL;
	assert_int_equal(tr_rank_open(&r, NULL, &g, KVT_LAYOUT_FLASH_ATTN, 16, 8, 0, 8, 0, NULL),
			 0);
	uint32_t *ids = malloc(4 * sizeof(uint32_t)); /* 64 tokens, blocks of 16: 4 ids */
	for (uint32_t i = 0; i < 4; i++)
		ids[i] = i;
	const uint32_t bad[] = {1000, 1u << 28, UINT32_MAX, 5, 0};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(kvt_device_gather(r.dev, ids, bad[i], 64, obj, len, NULL, &op),
				 -EINVAL);
		assert_int_equal(kvt_device_scatter(r.dev, obj, len, 64, ids, bad[i], NULL, &op),
				 -EINVAL);
	}
	assert_int_equal(kvt_device_gather(r.dev, NULL, 4, 64, obj, len, NULL, &op), -EINVAL);
	assert_int_equal(kvt_device_scatter(r.dev, obj, len, 64, NULL, 4, NULL, &op), -EINVAL);
	assert_int_equal(kvt_device_gather(r.dev, NULL, 1u << 28, 64, obj, len, NULL, &op),
			 -EINVAL);
	assert_null(op);
	/* the right count still works */
	assert_int_equal(kvt_device_gather(r.dev, ids, 4, 64, obj, len, NULL, &op), 0);
	assert_int_equal(kvt_device_op_wait(op, 10000), 0);
	kvt_device_op_free(op);
	tr_rank_close(&r);
	free(ids);
	free(obj);
}

static void test_backend_choice(void **state)
{
	struct kvt_geometry g = geo_kv(KVT_DTYPE_BF16);
	uint8_t mem[64];
	void *base[4] = {mem, mem, mem, mem};
	struct kvt_device_desc d = {sizeof(d), g, KVT_LAYOUT_FLASH_ATTN, 16, 1, 0, 8, 0, base};
	struct kvt_device *dev;
	struct kvt_config *cfg;
	assert_int_equal(kvt_config_create(&cfg), 0);
	char buf[32];
	assert_true(kvt_config_get(cfg, "device.backend", buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "auto");
	assert_int_equal(kvt_config_set(cfg, "device.backend", "gpu", NULL, 0), -EINVAL);
	assert_int_equal(kvt_config_set(cfg, "device.emu_gbps", "-1", NULL, 0), -EINVAL);
	/* auto picks cuda only when it is built in and sees a GPU. */
	assert_int_equal(kvt_device_open(cfg, NULL, &d, &dev), 0);
	bool gpu = kvt__dev_backend_available("cuda");
	assert_string_equal(kvt_device_backend(dev), gpu ? "cuda" : "emu");
	kvt_device_close(dev);
	if (!gpu)
		assert_int_equal(kvt_device_open(cfg, "cuda", &d, &dev), -ENODEV);
	assert_int_equal(kvt_config_set(cfg, "device.backend", "emu", NULL, 0), 0);
	assert_int_equal(kvt_device_open(cfg, NULL, &d, &dev), 0);
	assert_string_equal(kvt_device_backend(dev), "emu");
	/* emu device memory helpers, used by tests and checks */
	void *p;
	uint8_t in[100], out[100];
	memset(in, 7, sizeof(in));
	assert_int_equal(kvt__dev_mem_alloc(dev, sizeof(in), &p), 0);
	assert_int_equal(kvt__dev_mem_to_dev(dev, p, in, sizeof(in)), 0);
	assert_int_equal(kvt__dev_mem_to_host(dev, out, p, sizeof(out)), 0);
	assert_memory_equal(in, out, sizeof(in));
	kvt__dev_mem_free(dev, p);
	assert_int_equal(kvt_device_host_register(dev, in, sizeof(in)), 0);
	assert_int_equal(kvt_device_host_unregister(dev, in), 0);
	kvt_device_close(dev);
	kvt_config_destroy(cfg);
}

static void test_no_leaks(void **state)
{
	uint64_t before = kvt__alloc_bytes();
	struct kvt_geometry g = geo_kv(KVT_DTYPE_BF16);
	round_trip(&g, KVT_LAYOUT_FLASH_ATTN, 16, 30, 3);
	assert_int_equal(kvt__alloc_bytes(), before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_flash_attn),
	    cmocka_unit_test(test_flashinfer),
	    cmocka_unit_test(test_mla),
	    cmocka_unit_test(test_partial_last_chunk),
	    cmocka_unit_test(test_dtypes_and_block_sizes),
	    cmocka_unit_test(test_tp),
	    cmocka_unit_test(test_dependency),
	    cmocka_unit_test(test_dependency_at_call),
	    cmocka_unit_test(test_layer_order),
	    cmocka_unit_test(test_throttle),
	    cmocka_unit_test(test_bad_arguments),
	    cmocka_unit_test(test_bad_block_ids),
	    cmocka_unit_test(test_backend_choice),
	    cmocka_unit_test(test_no_leaks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
