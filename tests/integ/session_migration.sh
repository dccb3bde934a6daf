#!/usr/bin/env bash
# Session migration and cross-node reuse with no extra configuration: instance A stores a
# conversation's KV; instance B - its own empty DRAM and NVMe, pointed at the same shared
# tier - resumes it bit-exact from the shared tier, and keeps a local copy (promotion), so
# its next resume is served from its own NVMe. Shown for the shared-directory tier always,
# and for Redis when redis-server is installed (started here on 127.0.0.1).
set -euo pipefail
. "$(dirname "$0")/lib/jq.sh"
K="$KVT_BIN/kvtier"
T=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-migrate-XXXXXX")
cleanup() { [ -n "${RPID:-}" ] && kill -9 "$RPID" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
SMALL=(--set model.layers=4 --set model.kv_heads=2 --set model.head_dim=64 --set dram.bytes=64MiB)
check() { # tiers-json-name expected-count json
	echo "$3" | jqe ".hit_chunks == 33 and .prefill_tokens == 0 and .bad == 0 and .tiers.$1 == $2" >/dev/null ||
		{ echo "unexpected: $3"; exit 1; }
}
run() { # shared-tier-name extra-args...
	local tier=$1; shift
	"$K" session save --synthetic 8400 --seed 7 --tiers "dram,nvme,$tier" --dir "$T/a-$tier" "${SMALL[@]}" "$@" >/dev/null
	out=$("$K" session resume --synthetic 8400 --seed 7 --tiers "dram,nvme,$tier" --dir "$T/b-$tier" "${SMALL[@]}" "$@" --json)
	check "$tier" 33 "$out"
	out=$("$K" session resume --synthetic 8400 --seed 7 --tiers "dram,nvme,$tier" --dir "$T/b-$tier" "${SMALL[@]}" "$@" --json)
	check nvme 33 "$out"
	# Another conversation sharing the first 4096 tokens reuses those 16 chunks only.
	out=$("$K" session resume --synthetic 4100 --seed 7 --tiers "dram,nvme,$tier" --dir "$T/c-$tier" "${SMALL[@]}" "$@" --json)
	echo "$out" | jqe '.hit_chunks == 16 and .prefill_tokens == 4 and .bad == 0' >/dev/null || { echo "prefix reuse: $out"; exit 1; }
	# A different tenant salt sees nothing.
	out=$("$K" session resume --synthetic 8400 --seed 7 --tiers "dram,nvme,$tier" --dir "$T/d-$tier" "${SMALL[@]}" "$@" --set model.tenant=other --json)
	echo "$out" | jqe '.hit_chunks == 0' >/dev/null || { echo "tenant isolation: $out"; exit 1; }
	echo "session_migration: $tier ok"
}
mkdir -p "$T/shared"
run fs --set fs.dir="$T/shared"
if command -v redis-server >/dev/null; then
	PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no --dir "$T" >/dev/null 2>&1 &
	RPID=$!
	for i in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
	run redis --set redis.url="redis://127.0.0.1:$PORT"
else
	echo "session_migration: redis-server not installed, redis part skipped"
fi
