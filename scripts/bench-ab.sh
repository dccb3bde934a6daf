#!/usr/bin/env bash
# Before/after of an NVMe write-path change: two kvtier binaries run the same write-phase
# `kvtier bench --tier nvme` (each with its fio reference) alternately, on a fresh directory
# each time, for fsync none and data, three repeats, so both see the same noise on a shared
# machine. One JSON line per run (rep, fsync, bin, load average, the bench's JSON) in OUT.
#   [FSYNCS="none data"] [EXTRA="--set k=v ..."] scripts/bench-ab.sh OUT.jsonl CHUNK QD \
#     SET_BYTES SECONDS OLD_BIN NEW_BIN [DIR]
# (EXTRA="--set nvme.log_max=256K --set nvme.bytes=..." measures the small-object log)
# Medians: jq -s 'group_by(.fsync + .bin)[] | {k: (.[0].fsync + " " + .[0].bin),
#   ratio: (map(.r.write_ratio) | sort | .[1])}' OUT.jsonl
set -euo pipefail
OUT=$1 CH=$2 QD=$3 SET=$4 SECS=$5 A=$6 B=$7
D=${8:-/var/tmp/kvt-bench-ab}
trap 'rm -rf "$D"' EXIT
for rep in 1 2 3; do
	for f in ${FSYNCS:-none data}; do
		for bin in "$A" "$B"; do
			rm -rf "$D"
			mkdir -p "$D"
			# shellcheck disable=SC2086 # EXTRA is words
			line=$("$bin" bench --tier nvme --dir "$D/k" --chunk-bytes "$CH" --queue-depth "$QD" \
				--set-bytes "$SET" --read-pct 0 --fsync "$f" --seconds "$SECS" --rounds 3 --json \
				${EXTRA:-} 2>/dev/null | tail -1)
			jq -c --argjson rep "$rep" --arg fsync "$f" --arg bin "$bin" \
				--arg load "$(cut -d' ' -f1 /proc/loadavg)" \
				'{rep: $rep, fsync: $fsync, bin: $bin, load: $load, r: .}' <<<"$line" >>"$OUT"
		done
	done
done
