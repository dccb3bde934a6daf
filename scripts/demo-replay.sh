#!/usr/bin/env bash
# demo-replay.sh KVTIER DATA_DIR - the README's main job: a built-in multi-turn chat workload
# replayed with real bytes through the store on a local directory (llama3.1-8b KV at 1% of
# its size, so it fits a laptop disk), three ways: DRAM only, DRAM + NVMe, and the no-cache
# baseline the cost model gives for the same queue; then the restore-vs-recompute crossover
# table. About a minute on a 2-core machine.
#   KVT_DEMO_REQUESTS  requests to replay (default 1500)
set -euo pipefail
K=${1:?usage: demo-replay.sh KVTIER DATA_DIR}
DIR=${2:?usage: demo-replay.sh KVTIER DATA_DIR}/replay-demo
N=${KVT_DEMO_REQUESTS:-1500}
MODEL=llama3.1-8b
GPU=h100-sxm
DRAM=131072   # tokens: 256 blocks, smaller than the workload's working set
NVME=2097152  # tokens: room for all of it
rm -rf "$DIR"
mkdir -p "$DIR"
run() { # name, extra args
	local name=$1
	shift
	"$K" replay --workload chat --requests "$N" --model "$MODEL" --gpu "$GPU" \
		--dir "$DIR/$name" --json "$@" | tail -1 > "$DIR/$name.json"
}
echo "== replay: $N requests of multi-turn chat, $MODEL on $GPU, real bytes at scale 0.01"
run dram --dram-tokens $DRAM --nvme-tokens 0
run dram+nvme --dram-tokens $DRAM --nvme-tokens $NVME
run sim --dram-tokens $DRAM --nvme-tokens $NVME --simulate
printf '%-10s %7s %7s %7s %7s %9s %9s %11s %8s\n' tiers blocks tokens dram nvme \
	'TTFT p50' 'TTFT p99' 'NVMe write' 'wall'
jq -r '"none       " + ("-" | .*0) + "      -       -       -       -" +
	(" \(.nocache_ttft_p50_ms | floor | tostring) ms" | .[0:10] | " " * (10 - length) + .) +
	(" \(.nocache_ttft_p99_ms | floor | tostring) ms" | " " * (10 - length) + .)' \
	"$DIR/dram.json"
for c in dram dram+nvme; do
	jq -r --arg c "$c" '[$c, .block_hit_ratio, .token_hit_ratio, .dram_token_hit_ratio,
		.nvme_token_hit_ratio, .ttft_p50_ms, .ttft_p99_ms, (.nvme_write_bytes / 1048576),
		.elapsed_s] | @tsv' "$DIR/$c.json" |
		awk -F'\t' '{printf "%-10s %7.3f %7.3f %7.3f %7.3f %6.0f ms %6.0f ms %7.0f MiB %6.1f s\n",
			$1, $2, $3, $4, $5, $6, $7, $8, $9}'
done
jq -r '"simulated  block hit ratio \(.block_hit_ratio) with the same capacities (real: " ' \
	"$DIR/sim.json" | tr -d '\n'
jq -r '"\(.block_hit_ratio))"' "$DIR/dram+nvme.json"
jq -r '"measured restore \(.restore_gibps) GiB/s, puts \(.put_gibps) GiB/s; " +
	"checksum failures \(.checksum_failures), wrong bytes served \(.payload_mismatches)"' \
	"$DIR/dram+nvme.json"
echo "What each tier bought: DRAM alone serves the hot prefixes; NVMe holds the"
echo "conversations DRAM evicted, so their next turns restore instead of recomputing."
echo
echo "== crossover: when restoring a prefix beats recomputing it ($MODEL on $GPU)"
"$K" crossover --model "$MODEL" --gpu "$GPU" --tiers dram,nvme
rm -rf "$DIR"
