#!/usr/bin/env bash
# Runs every tier's benchmark against its reference, in one go, and prints one JSON line
# per run (the figures of docs/BENCHMARKS.md come from here). Starts its own redis-server
# and single-node Ceph (RADOS + RGW) on 127.0.0.1 and stops them at the end.
#   scripts/bench-all.sh [SECONDS_PER_PHASE] [OUT.jsonl]
#   KVT_BENCH_TIERS="dram nvme fs redis s3 rados" (default all), KVT_BENCH_DIR (/var/tmp)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECS=${1:-9}
OUT=${2:-/dev/stdout}
B=$("$ROOT/scripts/build.sh" release)
K="$B/kvtier"
W=$(mktemp -d "${KVT_BENCH_DIR:-/var/tmp}/kvt-bench-XXXXXX")
TIERS=${KVT_BENCH_TIERS:-dram nvme fs redis s3 rados}
RPID=""
cleanup() {
	[ -n "$RPID" ] && kill "$RPID" 2>/dev/null
	[ -f "$W/ceph/env" ] && "$ROOT/scripts/ceph/stop-ceph.sh" "$W/ceph" >/dev/null 2>&1
	rm -rf "$W"
}
trap cleanup EXIT
run() { echo "== kvtier bench $*" >&2; "$K" bench "$@" --seconds "$SECS" --json | tail -1 >> "$OUT"; }
for t in $TIERS; do
	case $t in
	dram) run --tier dram --chunk-bytes 2M ;;
	nvme) run --tier nvme --dir "$W/nvme" --chunk-bytes 2M --queue-depth 32 --set-bytes 2G ;;
	fs) run --tier fs --dir "$W/fs" --chunk-bytes 2M --queue-depth 16 --set-bytes 1G ;;
	redis)
		PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
		redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no --dir "$W" >/dev/null 2>&1 &
		RPID=$!
		for i in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
		KVTIER_REDIS_URL=redis://127.0.0.1:$PORT run --tier redis --chunk-bytes 1M --queue-depth 16 --set-bytes 512M
		kill "$RPID"; RPID="" ;;
	s3|rados)
		if [ ! -f "$W/ceph/env" ]; then
			OBJECTSTORE=bluestore "$ROOT/scripts/ceph/start-ceph.sh" "$W/ceph" >/dev/null
			ceph -c "$W/ceph/ceph.conf" osd pool create kvtier-bench 8 >/dev/null 2>&1
			ceph -c "$W/ceph/ceph.conf" osd pool application enable kvtier-bench rados >/dev/null 2>&1
		fi
		# shellcheck disable=SC1091
		source "$W/ceph/env"
		if [ "$t" = s3 ]; then
			KVTIER_S3_BUCKET=kvtier-bench run --tier s3 --chunk-bytes 1M --queue-depth 16 --set-bytes 256M
		else
			KVTIER_RADOS_POOL=kvtier-bench run --tier rados --chunk-bytes 1M --queue-depth 16 --set-bytes 256M
		fi ;;
	esac
done
