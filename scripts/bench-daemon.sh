#!/usr/bin/env bash
# kvtierd vs in-process DRAM (issue 13): `kvtier bench --tier dram` with 32 MiB chunks, two
# clients at once, first each with its own in-process store, then both attached to one
# kvtierd (store.daemon). Prints each run's GiB/s and the daemon/in-process ratios.
# Usage: scripts/bench-daemon.sh [seconds-per-phase] (default 4). Needs build/ (release).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${KVT_BIN:-$ROOT/build}
SEC=${1:-4}
T=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-bench-daemon-XXXXXX")
cleanup() { [ -n "${DPID:-}" ] && kill "$DPID" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
# The geometry kvtier bench derives for --chunk-bytes 32M (MLA, bf16, 256 tokens, 32 layers).
GEO=(--set model.kind=mla --set model.kv_heads=1 --set model.dtype=bf16 --set model.chunk_tokens=256
     --set model.layers=32 --set model.head_dim=2048 --set model.name=kvtier-bench)
# Reads and writes are separate runs: the two clients share one keyspace through the
# daemon, and a write replaces an object (remove, then put), which the other client's read
# of that key would see as a miss in a mixed phase.
run2() { # name read-pct extra-args...
	local n=$1 pct=$2; shift 2
	"$B/kvtier" bench --tier dram --chunk-bytes 32M --seconds "$SEC" --read-pct "$pct" --no-ref --json "$@" >"$T/$n.$pct.1.json" &
	local p1=$!
	"$B/kvtier" bench --tier dram --chunk-bytes 32M --seconds "$SEC" --read-pct "$pct" --no-ref --json "$@" >"$T/$n.$pct.2.json" &
	local p2=$!
	wait "$p1" || echo "client 1 of $n $pct: exit $?"
	wait "$p2" || echo "client 2 of $n $pct: exit $?"
}
run2 inproc 100
run2 inproc 0
"$B/kvtierd" --dir "$T/d" --socket "$T/s.sock" --tiers dram --set dram.bytes=1GiB "${GEO[@]}" 2>"$T/daemon.log" &
DPID=$!
for i in $(seq 100); do [ -S "$T/s.sock" ] && break; sleep 0.05; done
run2 daemon 100 --set store.daemon="$T/s.sock"
run2 daemon 0 --set store.daemon="$T/s.sock"
sum() { jq -s "map(.$3) | add" "$T/$1.$2.1.json" "$T/$1.$2.2.json"; }
for x in "100 read_gibps" "0 write_gibps" "100 read_p50_us" "0 write_p50_us" "100 errors" "0 errors"; do
	set -- $x
	i=$(sum inproc "$1" "$2"); d=$(sum daemon "$1" "$2")
	printf '%-14s two clients, sum: in-process %9.2f  daemon %9.2f  ratio %.2f\n' "$2" "$i" "$d" \
		"$(echo "if ($i == 0) 0 else $d / $i" | bc -l)"
done
