#!/bin/bash
# replay_cli.sh - the replay and crossover commands end to end: generated and file traces,
# the JSON last line that scripts depend on, Belady as a bound, the trace round trip, a
# malformed trace failing with its line number, and crossover's break-even table.
# Exit 0 pass, 1 fail, 77 skip (no kvtier binary or no jq).
set -u
. "$(dirname "$0")/lib/jq.sh"
KVT=${KVT_BIN:-build}/kvtier
[ -x "$KVT" ] || { echo "skip: $KVT not built"; exit 77; }
command -v jq >/dev/null || { echo "skip: jq missing"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# a generated workload, two policies, Belady; the last line is the JSON object
"$KVT" replay --workload rag --requests 2000 --simulate --policy pslru,lru --dram-tokens 65536 \
	--nvme-tokens 0 --belady --save-trace "$tmp/rag.jsonl" --json > "$tmp/out" || fail "replay rag"
j=$(tail -1 "$tmp/out")
echo "$j" | jqe '.requests == 2000 and (.block_hit_ratio > 0) and (.token_hit_ratio > 0)
	and (.belady_block_hit_ratio >= .block_hit_ratio) and (.nvme_hit_ratio == 0)
	and (.policies | length == 2)' > /dev/null || fail "rag json: $j"
echo "$j" | jqe '.policies[0].block_hit_ratio > .policies[1].block_hit_ratio' > /dev/null ||
	fail "pslru should beat lru on small-cache rag: $j"

# the saved trace replays to the same numbers
j2=$("$KVT" replay --trace "$tmp/rag.jsonl" --simulate --policy pslru,lru --dram-tokens 65536 \
	--nvme-tokens 0 --json | tail -1)
[ "$(echo "$j" | jq .block_hit_ratio)" = "$(echo "$j2" | jq .block_hit_ratio)" ] ||
	fail "saved trace replays differently"

# the Mooncake-shaped conversation workload through the file parser: the default policy
# (hda) gives the same numbers from the saved file as from the generator, and is not below LRU
j=$("$KVT" replay --workload conversation --requests 3000 --simulate --policy hda,lru \
	--dram-tokens 1000000 --nvme-tokens 0 --save-trace "$tmp/conv.jsonl" --json | tail -1)
j2=$("$KVT" replay --trace "$tmp/conv.jsonl" --simulate --dram-tokens 1000000 --nvme-tokens 0 \
	--json | tail -1)
[ "$(echo "$j" | jq .block_hit_ratio)" = "$(echo "$j2" | jq .block_hit_ratio)" ] ||
	fail "conversation trace replays differently: $j / $j2"
echo "$j2" | jqe '.policy == "hda" and .requests == 3000' > /dev/null || fail "default: $j2"
echo "$j" | jqe '.policies[0].block_hit_ratio >= .policies[1].block_hit_ratio - 0.005' \
	> /dev/null || fail "hd below lru on conversation: $j"

# two tiers: the per-tier ratios add up
j=$("$KVT" replay --workload chat --requests 3000 --simulate --dram-tokens 32768 \
	--nvme-tokens 2097152 --json | tail -1)
echo "$j" | jqe '(.dram_hit_ratio + .nvme_hit_ratio - .block_hit_ratio | fabs) < 1e-5
	and .nvme_hit_ratio > 0 and .ttft_p50_ms <= .nocache_ttft_p50_ms' > /dev/null ||
	fail "chat two tiers: $j"

# NVMe admission: the config key and the flag are one rule (admission.predict), which
# writes fewer bytes than writing everything; bytes per hit are reported
ja=$("$KVT" replay --workload chat --requests 3000 --simulate --dram-tokens 32768 \
	--nvme-tokens 2097152 --json | tail -1)
jk=$("$KVT" replay --workload chat --requests 3000 --simulate --dram-tokens 32768 \
	--nvme-tokens 2097152 --set admission.predict=chain --json | tail -1)
jf=$("$KVT" replay --workload chat --requests 3000 --simulate --dram-tokens 32768 \
	--nvme-tokens 2097152 --admit-predict chain --json | tail -1)
[ "$(echo "$jk" | jq -c '[.block_hit_ratio, .nvme_write_bytes]')" = \
	"$(echo "$jf" | jq -c '[.block_hit_ratio, .nvme_write_bytes]')" ] ||
	fail "admission.predict=chain differs from --admit-predict chain: $jk / $jf"
echo "$jf" | jqe --argjson all "$ja" '.nvme_write_bytes < $all.nvme_write_bytes
	and .nvme_bytes_written_per_any_hit > 0 and .nvme_bytes_written_per_hit > 0' \
	> /dev/null || fail "predict=chain: $jf (all: $ja)"
"$KVT" replay --workload chat --simulate --admit-predict maybe 2> /dev/null &&
	fail "--admit-predict maybe accepted"

# the fleet: one GPU under the conversation load warns; auto sizes it; 0 GPUs is refused
"$KVT" replay --workload conversation --requests 2000 --simulate --model llama3.1-70b \
	--dram-tokens 1000000 --nvme-tokens 0 --gpus 1 --json > "$tmp/one" 2> "$tmp/one.err" ||
	fail "gpus 1"
grep -q "warning: 1 GPU at" "$tmp/one.err" || fail "no overload warning: $(cat "$tmp/one.err")"
j=$("$KVT" replay --workload conversation --requests 2000 --simulate --model llama3.1-70b \
	--dram-tokens 1000000 --nvme-tokens 0 --json 2> "$tmp/auto.err" | tail -1)
echo "$j" | jqe '.gpus > 1 and .nocache_gpu_utilization <= 0.8' > /dev/null || fail "auto: $j"
[ -s "$tmp/auto.err" ] && fail "auto-sized fleet warned: $(cat "$tmp/auto.err")"
"$KVT" replay --workload chat --simulate --gpus 0 2> /dev/null && fail "--gpus 0 accepted"

# a malformed trace: exit 1 and the line number
printf '{"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [1]}\n{"timestamp": 1, "input_length": 100}\n' > "$tmp/bad.jsonl"
if "$KVT" replay --trace "$tmp/bad.jsonl" --simulate 2> "$tmp/err"; then fail "bad trace accepted"; fi
grep -q 'line 2: missing field "output_length"' "$tmp/err" || fail "error: $(cat "$tmp/err")"

# crossover: NVMe breaks even at once for a 70B model, S3 much later for an 8B one
j=$("$KVT" crossover --model llama3.1-70b --gpu h100 --json)
echo "$j" | jqe '.tiers[] | select(.tier == "nvme") | .breakeven_tokens <= 16' > /dev/null ||
	fail "crossover 70b: $j"
j=$("$KVT" crossover --model llama3.1-8b --gpu h200 --json)
echo "$j" | jqe '(.tiers[] | select(.tier == "s3") | .breakeven_tokens) > 10000' > /dev/null ||
	fail "crossover 8b: $j"
"$KVT" crossover --model nope 2> /dev/null && fail "unknown model accepted"
echo "pass"
exit 0
