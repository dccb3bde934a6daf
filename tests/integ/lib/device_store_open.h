/*
 * device_store_open.h - the store the device-layer integration tests run on: a DRAM
 * store of the given geometry (bf16, no huge pages), optionally with a MAC and encryption at
 * rest and a deeper nvme tier, and a poll until an op has completed. Shared by
 * device_store.c, device_store_pageable.c and device_store_status.c, with their CHECK
 * (its messages start with the DSO_TEST each defines before including it); uses
 * tests/unit/device_common.h's struct tr_done.
 */
#ifndef KVT_TEST_DEVICE_STORE_OPEN_H
#define KVT_TEST_DEVICE_STORE_OPEN_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvtier.h"

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, DSO_TEST ": %s:%d: check failed: %s\n", __FILE__,          \
				__LINE__, #c);                                                     \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

/* The tests' geometry: 4 layers of 8 KV heads, head_dim wide, 64-token chunks, bf16. */
static inline struct kvt_geometry dso_geometry(uint32_t head_dim)
{
	return (struct kvt_geometry){.layers = 4,
				     .kv_heads = 8,
				     .head_dim = head_dim,
				     .chunk_tokens = 64,
				     .dtype = KVT_DTYPE_BF16,
				     .kind = KVT_KIND_KV};
}

/* protect: with a MAC and encryption at rest (keys from the environment); nvme_dir: a
 * deeper nvme tier there (NULL: DRAM only) */
static inline struct kvt_store *dso_open_store(const struct kvt_geometry *g, bool protect,
						 const char *nvme_dir)
{
	struct kvt_config *cfg;
	struct kvt_store *s;
	char v[32];
	CHECK(kvt_config_create(&cfg) == 0);
	CHECK(kvt_config_set(cfg, "store.tiers", "dram", NULL, 0) == 0);
	CHECK(kvt_config_set(cfg, "dram.bytes", "64MiB", NULL, 0) == 0);
	CHECK(kvt_config_set(cfg, "dram.hugepages", "false", NULL, 0) == 0);
	snprintf(v, sizeof(v), "%u", g->layers);
	CHECK(kvt_config_set(cfg, "model.layers", v, NULL, 0) == 0);
	snprintf(v, sizeof(v), "%u", g->kv_heads);
	CHECK(kvt_config_set(cfg, "model.kv_heads", v, NULL, 0) == 0);
	snprintf(v, sizeof(v), "%u", g->head_dim);
	CHECK(kvt_config_set(cfg, "model.head_dim", v, NULL, 0) == 0);
	snprintf(v, sizeof(v), "%u", g->chunk_tokens);
	CHECK(kvt_config_set(cfg, "model.chunk_tokens", v, NULL, 0) == 0);
	CHECK(kvt_config_set(cfg, "model.dtype", "bf16", NULL, 0) == 0);
	if (nvme_dir) {
		CHECK(kvt_config_set(cfg, "store.tiers", "dram,nvme", NULL, 0) == 0);
		CHECK(kvt_config_set(cfg, "nvme.dirs", nvme_dir, NULL, 0) == 0);
		CHECK(kvt_config_set(cfg, "nvme.bytes", "256MiB", NULL, 0) == 0);
	}
	if (protect) {
		setenv("KVT_DEVICE_TEST_KEY",
		       "8f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0", 1);
		CHECK(kvt_config_set(cfg, "security.mac_key_env", "KVT_DEVICE_TEST_KEY", NULL, 0) == 0);
		CHECK(kvt_config_set(cfg, "security.encryption_key_env", "KVT_DEVICE_TEST_KEY", NULL,
				     0) == 0);
	}
	CHECK(kvt_store_open(cfg, &s) == 0);
	kvt_config_destroy(cfg);
	return s;
}

/* Poll s until d has counted calls completions (fails after about 10 s). */
static inline void poll_until(struct kvt_store *s, struct tr_done *d, int calls)
{
	for (int i = 0; i < 1000 && d->calls < calls; i++)
		kvt_poll(s, 10);
	CHECK(d->calls == calls);
}

#endif
