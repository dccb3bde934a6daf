#!/usr/bin/env bash
# Before/after of a RADOS I/O-path change: `kvtier bench --tier rados` write phase (each
# run with its own `rados bench write` reference, 3 rounds back to back; READ_PCT=100: the
# read phase against `rados bench rand`) for several
# variants in turn, three repeats, so all see the same noise on a shared machine. A variant
# is "BINARY" or "BINARY|--set key=value ...". Needs a cluster: source its env (CEPH_CONF,
# CEPH_KEYRING) and set KVTIER_RADOS_POOL. One JSON line per run (rep, variant, load
# average, the bench's JSON) in OUT.
#   [REPS="1 2 3"] [READ_PCT=0|100] scripts/bench-ab-rados.sh OUT.jsonl CHUNK QD SET_BYTES SECONDS VARIANT...
# Medians: jq -s 'group_by(.variant)[] | {v: .[0].variant,
#   ratio: (map(.r.write_ratio) | sort | .[1]), gibps: (map(.r.write_gibps) | sort | .[1])}' OUT
# (read_ratio and read_gibps with READ_PCT=100)
set -euo pipefail
OUT=$1 CH=$2 QD=$3 SET=$4 SECS=$5
shift 5
for rep in ${REPS:-1 2 3}; do
	for v in "$@"; do
		bin=${v%%|*}
		extra=""
		[ "$bin" != "$v" ] && extra=${v#*|}
		# shellcheck disable=SC2086
		line=$("$bin" bench --tier rados --chunk-bytes "$CH" --queue-depth "$QD" \
			--set-bytes "$SET" --read-pct "${READ_PCT:-0}" --seconds "$SECS" --rounds 3 --json $extra \
			2>>"$OUT.err" | tail -1)
		jq -c --argjson rep "$rep" --arg variant "$v" \
			--arg load "$(cut -d' ' -f1 /proc/loadavg)" \
			'{rep: $rep, variant: $variant, load: $load, r: .}' <<<"$line" >>"$OUT"
	done
done
