#!/usr/bin/env bash
# Runs every tier's benchmark against its reference, in one go, and prints one JSON line
# per run (the tables of docs/BENCHMARKS.md come from one run of this script). Each line
# is `kvtier bench ... --json` plus "run" (its name) and "cmd" (the exact command).
# Starts its own redis-server and single-node Ceph (RADOS + RGW, bluestore) on 127.0.0.1,
# holding /tmp/kvt-ceph.lock while Ceph runs, and stops them at the end.
#   scripts/bench-all.sh [SECONDS_PER_PHASE] [OUT.jsonl]
#   KVT_BENCH_TIERS="dram nvme fs redis s3 rados" (default all; "mlperf" adds the MLPerf
#   KV workload, option 2 at full size), KVT_BENCH_DIR (/var/tmp), KVT_BENCH_ROUNDS (3)
# The local tiers run twice: --fsync none and the shipped default (nvme.fsync / fs.fsync
# = data, against fio --fdatasync=1 and, the same guarantee as kvtier's, fio --sync=dsync).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECS=${1:-6}
OUT=${2:-/dev/stdout}
ROUNDS=${KVT_BENCH_ROUNDS:-3}
B=$("$ROOT/scripts/build.sh" release | tail -1)
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
# Runs that printed no result, or exited non-zero (errors, or reference rounds that
# failed: their line still goes out, with errors / ref_failed_rounds): named at the end,
# and the script exits 1, so that a row missing from a table is never silent.
FAILED=()
# keep NAME CMD: the last line of stdin (a bench's output) as a JSON line with the run's
# name and command, or NAME noted as failed
keep() {
	local line
	line=$(tail -1)
	if jq -e . >/dev/null 2>&1 <<<"$line"; then
		jq -c --arg run "$1" --arg cmd "$2" '{run: $run, cmd: $cmd} + .' <<<"$line" >> "$OUT"
	else
		FAILED+=("$1 (no result)")
	fi
}
# run NAME ARGS...: one kvtier bench, its JSON line with the run's name and command
run() {
	local name=$1; shift
	local cmd="kvtier bench $* --seconds $SECS --rounds $ROUNDS --json" rc=0
	echo "== $name: $cmd" >&2
	"$K" bench "$@" --seconds "$SECS" --rounds "$ROUNDS" --json > "$W/out" || rc=$?
	keep "$name" "$cmd" < "$W/out"
	[ "$rc" = 0 ] || FAILED+=("$name (exit $rc)")
	rm -rf "$W/nvme" "$W/fs" "$W/out"
}
for t in $TIERS; do
	case $t in
	dram) run dram --tier dram --chunk-bytes 2M ;;
	nvme)
		for f in none data; do
			run "nvme-2M-qd32-fsync-$f" --tier nvme --dir "$W/nvme" --chunk-bytes 2M --queue-depth 32 --set-bytes 2G --fsync $f
			run "nvme-32M-qd8-fsync-$f" --tier nvme --dir "$W/nvme" --chunk-bytes 32M --queue-depth 8 --set-bytes 2G --fsync $f
			run "nvme-64K-qd32-fsync-$f" --tier nvme --dir "$W/nvme" --chunk-bytes 64K --queue-depth 32 --set-bytes 1G --fsync $f
			# the small-object log (nvme.log_max, off by default), given the disk whose
			# live capacity holds the same 1 GiB working set: 37 segments of 64 MiB, of
			# which (37 - 2) / (1 + nvme.log_spare_pct 100 %) hold live objects
			run "nvme-64K-qd32-log-fsync-$f" --tier nvme --dir "$W/nvme" --chunk-bytes 64K --queue-depth 32 --set-bytes 1G --fsync $f --set nvme.log_max=256K --set nvme.bytes=2483027968
			# writes only, every one into capacity no object used before (an empty store
			# much larger than what one phase writes): issue #11's "from an empty store"
			run "nvme-32M-qd8-first-fill-fsync-$f" --tier nvme --dir "$W/nvme" --chunk-bytes 32M --queue-depth 8 --set-bytes 12G --read-pct 0 --fsync $f
		done ;;
	fs)
		for f in none data; do
			run "fs-2M-qd16-fsync-$f" --tier fs --dir "$W/fs" --chunk-bytes 2M --queue-depth 16 --set-bytes 1G --fsync $f
		done ;;
	redis)
		PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
		redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no --dir "$W" >/dev/null 2>&1 &
		RPID=$!
		for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
		KVTIER_REDIS_URL=redis://127.0.0.1:$PORT run redis-1M-qd16 --tier redis --chunk-bytes 1M --queue-depth 16 --set-bytes 512M
		kill "$RPID"; RPID="" ;;
	s3|rados)
		if [ ! -f "$W/ceph/env" ]; then
			exec 9>/tmp/kvt-ceph.lock
			flock 9 # one Ceph at a time on this machine: fixed ports
			OBJECTSTORE=bluestore WATCH_PID=$$ "$ROOT/scripts/ceph/start-ceph.sh" "$W/ceph" >/dev/null
			ceph -c "$W/ceph/ceph.conf" osd pool create kvtier-bench 8 >/dev/null 2>&1
			ceph -c "$W/ceph/ceph.conf" osd pool application enable kvtier-bench rados >/dev/null 2>&1
		fi
		# shellcheck disable=SC1091
		source "$W/ceph/env"
		if [ "$t" = s3 ]; then
			KVTIER_S3_BUCKET=kvtier-bench run s3-1M-qd16 --tier s3 --chunk-bytes 1M --queue-depth 16 --set-bytes 256M
		else
			KVTIER_RADOS_POOL=kvtier-bench run rados-1M-qd16 --tier rados --chunk-bytes 1M --queue-depth 16 --set-bytes 256M
		fi ;;
	mlperf)
		cmd="kvtier bench --workload mlperf-kv --option 2 --seconds $((SECS * 5)) --dir $W/ml --json"
		echo "== mlperf: $cmd" >&2
		rc=0
		"$K" bench --workload mlperf-kv --option 2 --seconds $((SECS * 5)) --dir "$W/ml" --json > "$W/out" || rc=$?
		keep mlperf-kv-option-2 "$cmd" < "$W/out"
		[ "$rc" = 0 ] || FAILED+=("mlperf-kv-option-2 (exit $rc)")
		rm -rf "$W/ml" "$W/out" ;;
	*) echo "bench-all: unknown tier '$t'" >&2; exit 2 ;;
	esac
done
if [ ${#FAILED[@]} -gt 0 ]; then
	echo "bench-all: ${#FAILED[@]} run(s) failed: ${FAILED[*]}" >&2
	exit 1
fi
