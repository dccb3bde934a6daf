/*
 * gpu_check.cu - the device layer's check on a real NVIDIA GPU (bench/gpu_check.sh runs it).
 *
 * 1. Correctness, cuda backend: for every layout (FlashAttention, FlashInfer, MLA), full
 *    and partial chunks, TP=1 and TP=2/TP=4 ranks on one GPU, gather device blocks into a
 *    pinned object and scatter it into other, poisoned blocks; compare byte for byte with
 *    the reference model of tests/unit/device_common.h. Fresh random data and block ids each
 *    round. The gather depends on an engine event recorded after a slow kernel that writes
 *    the final data: the object must hold that data, not what the blocks held before.
 * 2. Bandwidth: a Llama-3-8B-shaped cache (32 layers, 8 KV heads, dim 128, bf16, 256-token
 *    chunks, 16-token blocks). Device->host gathers and host->device scatters of many
 *    chunks, against plain cudaMemcpyAsync of the same bytes between the same pinned
 *    buffers and one device buffer, in the same run. Target: ratio >= 0.9.
 *
 * Prints one summary line starting "gpu_check:". Exit 0 when every round trip matched
 * (the bandwidth target is reported in the line), 1 on a mismatch or error, 77 without a
 * GPU.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "../tests/unit/device_common.h"
}

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "gpu_check: %s:%d %s: %s\n", __FILE__, __LINE__, #x,       \
				cudaGetErrorString(e_));                                           \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)
#define REQ(x)                                                                                     \
	do {                                                                                       \
		int r_ = (x);                                                                      \
		if (r_ < 0) {                                                                      \
			fprintf(stderr, "gpu_check: %s:%d %s = %d (%s)\n", __FILE__, __LINE__, #x, \
				r_, kvt_strerror(r_));                                             \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The "engine's compute": spin for a while, then write the final data into the layer. */
__global__ void slow_write(uint8_t *dst, const uint8_t *src, size_t n, long long spin)
{
	long long t0 = clock64();
	while (clock64() - t0 < spin)
		;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = src[i];
}

/* A rank on the GPU plus its host mirror for the reference checks. */
struct grank {
	struct tr_rank host; /* desc + host copies of the layers (the model's view) */
	void *dbase[KVT_MAX_LAYERS];
	struct kvt_device *dev;
};

static void grank_open(struct grank *r, const struct kvt_geometry *g, uint32_t layout, uint32_t bs,
		       uint32_t nb, uint32_t h0, uint32_t h1, uint8_t poison)
{
	memset(r, 0, sizeof(*r));
	struct kvt_device_desc *d = &r->host.desc;
	d->size = sizeof(*d);
	d->geometry = *g;
	d->layout = layout;
	d->block_size = bs;
	d->num_blocks = nb;
	d->head_begin = h0;
	d->head_end = h1;
	d->cuda_device = 0;
	r->host.layer_bytes = tr_layer_tensor_bytes(d);
	for (uint32_t l = 0; l < g->layers; l++) {
		r->host.base[l] = malloc(r->host.layer_bytes);
		memset(r->host.base[l], poison, r->host.layer_bytes);
		CK(cudaMalloc(&r->dbase[l], r->host.layer_bytes));
		CK(cudaMemset(r->dbase[l], poison, r->host.layer_bytes));
	}
	d->layer_base = r->dbase;
	REQ(kvt_device_open(NULL, "cuda", d, &r->dev));
	d->layer_base = r->host.base;
}

static void grank_to_host(struct grank *r)
{
	for (uint32_t l = 0; l < r->host.desc.geometry.layers; l++)
		CK(cudaMemcpy(r->host.base[l], r->dbase[l], r->host.layer_bytes,
			      cudaMemcpyDeviceToHost));
}

static void grank_close(struct grank *r)
{
	kvt_device_close(r->dev);
	for (uint32_t l = 0; l < r->host.desc.geometry.layers; l++) {
		cudaFree(r->dbase[l]);
		free(r->host.base[l]);
	}
}

static size_t g_bad, g_rounds;

/* Writers (head splits w[]) gather into one pinned object; readers (splits rd[]) scatter. */
static void round_trip(const struct kvt_geometry *g, uint32_t layout, uint32_t bs, uint32_t n,
		       const uint32_t *w, uint32_t nw, const uint32_t *rd, uint32_t nr,
		       uint64_t seed)
{
	uint32_t nb = 4 * g->chunk_tokens / bs, nblk = (n + bs - 1) / bs;
	uint32_t *ids = (uint32_t *)malloc(4 * nblk * sizeof(uint32_t));
	size_t llen = g->layers * kvt_layer_bytes(g, n), olen = kvt_object_bytes(g, n);
	uint8_t *early = (uint8_t *)malloc(llen), *late = (uint8_t *)malloc(llen), *obj;
	tr_fill(&seed, early, llen);
	tr_fill(&seed, late, llen);
	CK(cudaMallocHost((void **)&obj, olen));
	memset(obj, 0xA5, olen);
	struct grank rk[4];
	struct kvt_device_op *op[4];
	cudaStream_t engine;
	cudaEvent_t ev;
	CK(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking));
	CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));

	static uint8_t *stage[4][KVT_MAX_LAYERS];
	for (uint32_t i = 0; i < nw; i++) {
		grank_open(&rk[i], g, layout, bs, nb, w[i], w[i + 1], 0x11);
		tr_shuffled_ids(&seed, nb, ids + i * nblk, nblk);
		/* The blocks hold "early" data; the engine's kernel will write "late". */
		tr_rank_load_logical(&rk[i].host, early, n, ids + i * nblk);
		for (uint32_t l = 0; l < g->layers; l++)
			CK(cudaMemcpy(rk[i].dbase[l], rk[i].host.base[l], rk[i].host.layer_bytes,
				      cudaMemcpyHostToDevice));
		tr_rank_load_logical(&rk[i].host, late, n, ids + i * nblk);
		for (uint32_t l = 0; l < g->layers; l++) {
			CK(cudaMalloc((void **)&stage[i][l], rk[i].host.layer_bytes));
			CK(cudaMemcpy(stage[i][l], rk[i].host.base[l], rk[i].host.layer_bytes,
				      cudaMemcpyHostToDevice));
		}
	}
	/* The engine's compute: a spin (~25 ms), then the writes; the event follows it. */
	for (uint32_t i = 0; i < nw; i++)
		for (uint32_t l = 0; l < g->layers; l++)
			slow_write<<<64, 256, 0, engine>>>((uint8_t *)rk[i].dbase[l], stage[i][l],
							   rk[i].host.layer_bytes,
							   i == 0 && l == 0 ? 50000000LL : 0);
	CK(cudaGetLastError());
	CK(cudaEventRecord(ev, engine));
	struct kvt_device_dep dep = {KVT_DEP_CUDA_EVENT, (void *)ev};
	for (uint32_t i = 0; i < nw; i++)
		REQ(kvt_device_gather(rk[i].dev, ids + i * nblk, nblk, n, obj, olen, &dep, &op[i]));
	/* The event is still pending (the spin): nothing may have been copied. */
	if (cudaEventQuery(ev) == cudaErrorNotReady && kvt_device_op_layers_done(op[0]) != 0) {
		fprintf(stderr, "gpu_check: a gather completed a layer before its dependency\n");
		g_bad++;
	}
	for (uint32_t i = 0; i < nw; i++) {
		REQ(kvt_device_op_wait(op[i], 60000));
		kvt_device_op_free(op[i]);
		for (uint32_t l = 0; l < g->layers; l++)
			cudaFree(stage[i][l]);
		grank_close(&rk[i]);
	}
	size_t bad = tr_obj_check(obj, olen, g, late, n, 0, g->kv_heads, 0xA5);
	for (uint32_t i = 0; i < nr; i++) {
		grank_open(&rk[i], g, layout, bs, nb, rd[i], rd[i + 1], 0xA5);
		tr_shuffled_ids(&seed, nb, ids + i * nblk, nblk);
		REQ(kvt_device_scatter(rk[i].dev, obj, olen, n, ids + i * nblk, nblk, NULL,
				       &op[i]));
	}
	for (uint32_t i = 0; i < nr; i++) {
		for (uint32_t l = 0; l < g->layers; l++)
			REQ(kvt_device_op_wait_layer(op[i], l, 60000));
		REQ(kvt_device_op_wait(op[i], 60000));
		kvt_device_op_free(op[i]);
		grank_to_host(&rk[i]);
		bad += tr_rank_check(&rk[i].host, late, n, ids + i * nblk, 0xA5);
		grank_close(&rk[i]);
	}
	if (bad)
		fprintf(stderr, "gpu_check: layout %u n %u: %zu wrong bytes\n", layout, n, bad);
	g_bad += bad;
	g_rounds++;
	cudaEventDestroy(ev);
	cudaStreamDestroy(engine);
	cudaFreeHost(obj);
	free(early);
	free(late);
	free(ids);
}

static void correctness(void)
{
	struct kvt_geometry kv = {8, 8, 128, 256, KVT_DTYPE_BF16, KVT_KIND_KV};
	struct kvt_geometry mla = {6, 1, 576, 256, KVT_DTYPE_BF16, KVT_KIND_MLA};
	const uint32_t all[2] = {0, 8}, tp2[3] = {0, 4, 8}, tp4[5] = {0, 2, 4, 6, 8};
	const uint32_t one[2] = {0, 1};
	uint64_t seed = (uint64_t)time(NULL) | 1; /* fresh inputs each run (printed) */
	fprintf(stderr, "gpu_check: seed %llu\n", (unsigned long long)seed);
	uint32_t lay[2] = {KVT_LAYOUT_FLASH_ATTN, KVT_LAYOUT_FLASHINFER};
	for (int i = 0; i < 2; i++) {
		round_trip(&kv, lay[i], 16, 256, all, 1, all, 1, seed += 101);
		round_trip(&kv, lay[i], 16, 200, all, 1, all, 1, seed += 101); /* partial */
		round_trip(&kv, lay[i], 16, 256, tp2, 2, all, 1, seed += 101); /* TP2 -> TP1 */
		round_trip(&kv, lay[i], 16, 256, tp2, 2, tp4, 4, seed += 101); /* TP2 -> TP4 */
		round_trip(&kv, lay[i], 32, 97, all, 1, tp2, 2, seed += 101);  /* TP1 -> TP2 */
	}
	round_trip(&mla, KVT_LAYOUT_MLA, 64, 256, one, 1, one, 1, seed += 101);
	round_trip(&mla, KVT_LAYOUT_MLA, 64, 130, one, 1, one, 1, seed += 101);
}

/* ----------------------------------------------------------- bandwidth */

struct bw {
	double d2h, d2h_ref, h2d, h2d_ref; /* GiB/s */
};

static struct bw bandwidth(uint32_t chunks)
{
	const struct kvt_geometry g = {32, 8, 128, 256, KVT_DTYPE_BF16, KVT_KIND_KV};
	const uint32_t bs = 16, nb = 4096, nblk = 256 / bs, nbuf = 16;
	size_t olen = kvt_object_bytes(&g, 256), payload = g.layers * kvt_layer_bytes(&g, 256);
	struct grank r;
	memset(&r, 0, sizeof(r));
	struct kvt_device_desc d = {sizeof(d), g, KVT_LAYOUT_FLASH_ATTN, bs, nb, 0, 8, 0, NULL};
	size_t lb = tr_layer_tensor_bytes(&d);
	for (uint32_t l = 0; l < g.layers; l++) {
		CK(cudaMalloc(&r.dbase[l], lb));
		CK(cudaMemset(r.dbase[l], (int)l, lb));
	}
	d.layer_base = r.dbase;
	REQ(kvt_device_open(NULL, "cuda", &d, &r.dev));
	uint8_t *obj[16], *ref_dev;
	for (uint32_t i = 0; i < nbuf; i++)
		CK(cudaMallocHost((void **)&obj[i], olen));
	CK(cudaMalloc((void **)&ref_dev, payload));
	uint64_t seed = 3;
	uint32_t *ids = (uint32_t *)malloc(chunks * nblk * sizeof(uint32_t));
	for (uint32_t c = 0; c < chunks; c++)
		tr_shuffled_ids(&seed, nb, ids + c * nblk, nblk);
	struct kvt_device_op **op =
	    (struct kvt_device_op **)malloc(chunks * sizeof(struct kvt_device_op *));
	struct bw out;
	double gib = (double)chunks * payload / (1024.0 * 1024 * 1024);
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

	for (int dir = 0; dir < 2; dir++) {
		/* warm-up */
		for (uint32_t c = 0; c < 4; c++) {
			if (!dir)
				REQ(kvt_device_gather(r.dev, ids, nblk, 256, obj[c], olen, NULL,
						      &op[c]));
			else
				REQ(kvt_device_scatter(r.dev, obj[c], olen, 256, ids, nblk, NULL,
						       &op[c]));
		}
		for (uint32_t c = 0; c < 4; c++) {
			REQ(kvt_device_op_wait(op[c], 60000));
			kvt_device_op_free(op[c]);
		}
		double t0 = now_s();
		for (uint32_t c = 0; c < chunks; c++) {
			uint32_t *cid = ids + c * nblk;
			if (!dir)
				REQ(kvt_device_gather(r.dev, cid, nblk, 256, obj[c % nbuf], olen,
						      NULL, &op[c]));
			else
				REQ(kvt_device_scatter(r.dev, obj[c % nbuf], olen, 256, cid, nblk,
						       NULL, &op[c]));
		}
		for (uint32_t c = 0; c < chunks; c++) {
			REQ(kvt_device_op_wait(op[c], 60000));
			kvt_device_op_free(op[c]);
		}
		double ours = gib / (now_s() - t0);
		/* Reference: the same bytes, one plain cudaMemcpyAsync per chunk, pinned memory. */
		t0 = now_s();
		for (uint32_t c = 0; c < chunks; c++) {
			if (!dir)
				CK(cudaMemcpyAsync(obj[c % nbuf] + KVT_HEADER_BYTES, ref_dev,
						   payload, cudaMemcpyDeviceToHost, s));
			else
				CK(cudaMemcpyAsync(ref_dev, obj[c % nbuf] + KVT_HEADER_BYTES,
						   payload, cudaMemcpyHostToDevice, s));
		}
		CK(cudaStreamSynchronize(s));
		double ref = gib / (now_s() - t0);
		if (!dir) {
			out.d2h = ours;
			out.d2h_ref = ref;
		} else {
			out.h2d = ours;
			out.h2d_ref = ref;
		}
	}
	cudaStreamDestroy(s);
	kvt_device_close(r.dev);
	for (uint32_t l = 0; l < g.layers; l++)
		cudaFree(r.dbase[l]);
	for (uint32_t i = 0; i < nbuf; i++)
		cudaFreeHost(obj[i]);
	cudaFree(ref_dev);
	free(ids);
	free(op);
	return out;
}

int main(int argc, char **argv)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		printf("gpu_check: skipped=1 reason=no_gpu\n");
		return 77;
	}
	uint32_t chunks = argc > 1 ? (uint32_t)atoi(argv[1]) : 128; /* 128 x 32 MiB = 4 GiB */
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	double t0 = now_s();
	correctness();
	struct bw b = bandwidth(chunks);
	double rd = b.d2h / b.d2h_ref, rh = b.h2d / b.h2d_ref;
	bool target = rd >= 0.9 && rh >= 0.9;
	for (char *p = prop.name; *p; p++)
		if (*p == ' ')
			*p = '_';
	printf("gpu_check: ok=%d rounds=%zu wrong_bytes=%zu gpu=%s d2h_gibs=%.2f d2h_ref_gibs=%.2f "
	       "d2h_ratio=%.3f h2d_gibs=%.2f h2d_ref_gibs=%.2f h2d_ratio=%.3f target_0.9=%s "
	       "chunks=%u seconds=%.1f\n",
	       g_bad == 0, g_rounds, g_bad, prop.name, b.d2h, b.d2h_ref, rd, b.h2d, b.h2d_ref, rh,
	       target ? "met" : "missed", chunks, now_s() - t0);
	return g_bad ? 1 : 0;
}
