#!/usr/bin/env bash
# kvtier calibrate measures each tier and writes the profile the cost model reads;
# crossover uses it; a malformed profile is one clear error; and the store's admission
# uses it: with a tier too slow to beat recompute nothing is written there, with a fast one
# everything is.
set -euo pipefail
. "$(dirname "$0")/lib/jq.sh"
K="$KVT_BIN/kvtier"
T=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-calib-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "calibrate: $*"; exit 1; }
SMALL=(--set model.layers=4 --set model.kv_heads=2 --set model.head_dim=64 --set dram.bytes=64MiB)

"$K" calibrate --dir "$T/d" "${SMALL[@]}" --objects 4 --out "$T/p.ini" --json | tail -1 |
	jqe '[.tiers[] | select(.measured and .read_gbps > 0 and .write_gbps > 0 and .latency_us > 0)] | length == 2' >/dev/null ||
	fail "calibrate did not measure dram and nvme"
grep -q '^\[tier.nvme\]' "$T/p.ini" || fail "profile has no nvme section"
out=$("$K" crossover --model llama3.1-8b --gpu h100-sxm --tiers dram,nvme --set cost.profile="$T/p.ini")
echo "$out" | grep -E '^nvme' | grep -vq 'default profile' || fail "crossover ignored the profile: $out"

printf '[tier.nvme]\nread_gbps = fast\n' > "$T/bad.ini"
if err=$("$K" crossover --model llama3.1-8b --gpu h100-sxm --set cost.profile="$T/bad.ini" 2>&1); then
	fail "a malformed profile was accepted"
fi
grep -q "bad.ini" <<<"$err" || fail "unclear error: $err"

# Admission from the cost model (llama3.1-8b on an H100): NVMe at 10 MB/s never beats
# recompute, at 1000 GB/s it always does.
printf '[tier.nvme]\nlatency_us = 100\nread_gbps = 0.01\nwrite_gbps = 0.01\n' > "$T/slow.ini"
printf '[tier.nvme]\nlatency_us = 1\nread_gbps = 1000\nwrite_gbps = 1000\n' > "$T/fast.ini"
# A save that admission kept out of every persistent tier says so (exit 4).
rc=0; "$K" session save --synthetic 4096 --dir "$T/slow" --set cost.profile="$T/slow.ini" >/dev/null 2>&1 || rc=$?
[ "$rc" = 4 ] || fail "a save that stored nothing exited $rc, not 4"
"$K" stat --dir "$T/slow" --json | jqe '.tiers[1].objects == 0' >/dev/null || fail "slow tier was written"
"$K" session save --synthetic 4096 --dir "$T/fast" --set cost.profile="$T/fast.ini" >/dev/null
"$K" stat --dir "$T/fast" --json | jqe '.tiers[1].objects == 16' >/dev/null || fail "fast tier was not written"
echo "calibrate: ok"
