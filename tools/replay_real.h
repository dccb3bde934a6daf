/*
 * replay_real.h - `kvtier replay` without --simulate: the same trace through the real
 * store (DRAM + NVMe on a local directory), with bytes of the model's size times --scale.
 */
#ifndef KVT_REPLAY_REAL_H
#define KVT_REPLAY_REAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"
#include "trace.h"

struct replay_real_opts {
	const char *dir;    /* nvme.dirs */
	const char *source; /* trace file or workload name, for the report */
	double scale;
	uint64_t dram_tokens, nvme_tokens;
	uint32_t gpus; /* prefill GPUs; 0: sized to the trace (kvt__sim_auto_gpus) */
	bool prefetch, json;
	void (*progress)(void *arg, uint64_t done, uint64_t total);
};

/* cfg: the command's configuration (its --config/--set already applied); cost: the cost
 * model for tiers "dram,nvme". Prints the report (JSON last line with json). Returns the
 * exit code: 0 ok, 1 failure (one line on stderr). */
int replay_real_run(const struct replay_real_opts *o, const struct kvt_trace *t,
		    struct kvt_config *cfg, const struct kvt_cost *cost);

/* The report's fleet line, and the warning on stderr above 100 % load (hint: what to do)
 * or when the load is unbounded (INFINITY: all requests arrive at once). */
void replay_print_load(uint32_t gpus, double util, double util0, size_t requests, const char *hint);
/* A load for JSON: "%.4f", or null when it is unbounded. */
const char *replay_json_load(double util, char *buf, size_t len);

#endif
