#!/usr/bin/env bash
# kvtierd vs in-process DRAM (issue 13): `kvtier bench --tier dram` with 32 MiB chunks, two
# clients at once (each its own keys), first each with its own in-process store, then both
# attached to one kvtierd (store.daemon), whose gets are copied through the client's region
# and then from its shared DRAM pool. Prints the summed GiB/s and the ratios to in-process.
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
# Each client has its own keys (--key-set): through one daemon they share a store, and a
# put of a key the other client just stored would be skipped (content addressing), which
# would make writes look cheaper than they are. Phases: write, read, mixed 70/30.
run2() { # name extra-args...
	local n=$1; shift
	"$B/kvtier" bench --tier dram --chunk-bytes 32M --seconds "$SEC" --key-set 1 --no-ref --json "$@" >"$T/$n.1.json" &
	local p1=$!
	"$B/kvtier" bench --tier dram --chunk-bytes 32M --seconds "$SEC" --key-set 2 --no-ref --json "$@" >"$T/$n.2.json" &
	local p2=$!
	wait "$p1" || echo "client 1 of $n: exit $?"
	wait "$p2" || echo "client 2 of $n: exit $?"
}
# The daemon twice: gets copied through the client's region (dram.shared=false, the design
# before the shared pool), then straight from the daemon's shared DRAM pool (the default).
daemon_run() { # name dram.shared
	"$B/kvtierd" --dir "$T/d$1" --socket "$T/s$1.sock" --tiers dram --set dram.bytes=1536MiB \
		--set dram.shared="$2" "${GEO[@]}" 2>"$T/daemon$1.log" &
	DPID=$!
	for i in $(seq 100); do [ -S "$T/s$1.sock" ] && break; sleep 0.05; done
	run2 "$1" --set store.daemon="$T/s$1.sock"
	kill "$DPID"; wait "$DPID" 2>/dev/null || true; DPID=
}
run2 inproc
daemon_run region false
daemon_run shared true
sum() { jq -s "map(.$2) | add" "$T/$1.1.json" "$T/$1.2.json"; }
ratio() { echo "if ($1 == 0) 0 else $2 / $1" | bc -l; }
for m in read_gibps write_gibps mixed_read_gibps mixed_write_gibps read_p50_us write_p50_us errors; do
	i=$(sum inproc "$m"); r=$(sum region "$m"); d=$(sum shared "$m")
	printf '%-18s two clients, sum: in-process %8.2f  daemon region %8.2f (%.2f)  daemon shared pool %8.2f (%.2f)\n' \
		"$m" "$i" "$r" "$(ratio "$i" "$r")" "$d" "$(ratio "$i" "$d")"
done
