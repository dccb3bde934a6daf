#!/usr/bin/env bash
# kvt-test-labels: server
# bench_full_ceph.sh - `kvtier bench --tier s3` against a Ceph cluster that is full (issue
# #8: the same command never returned; a full Ceph blocks its writers forever, so only
# kvtier's own deadlines can end the calls). A private single-node Ceph with RGW on free
# loopback ports, its full ratios lowered so that a few hundred MiB fill it; the bucket is
# made while there is room, then the cluster is filled with `rados bench` until the
# monitors flag it full. The bench must then print its JSON within --seconds + ramp + the
# tier deadline + the close bound + slack, count its failed writes, exit non-zero, and say
# why in one line.
# Exit 0 pass, 1 fail, 77 skip (Ceph or RGW missing: a failure under CI=true).
set -euo pipefail
. "$(dirname "$0")/lib/jq.sh"
for b in ceph-mon ceph-osd radosgw rados ceph jq; do
	command -v $b >/dev/null || { echo "SKIP: $b is not installed (KVT_WITH_CEPH=1 scripts/deps.sh)"; exit 77; }
done
: "${KVT_BIN:?KVT_BIN (the build directory) is not set}"
SRC=${KVT_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
K="$KVT_BIN/kvtier"
T=$(mktemp -d /tmp/kvt-fullceph-XXXXXX)
C=$T/ceph
FILLER=""
cleanup() {
	local rc=$?
	if [ -n "$FILLER" ]; then kill "$FILLER" 2>/dev/null || true; fi
	"$SRC/scripts/ceph/stop-ceph.sh" "$C" >/dev/null 2>&1 || true
	rm -rf "$T" || true
	exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
fail() { echo "FAIL: $*"; exit 1; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ms() { echo $(( ${EPOCHREALTIME/./} / 1000 )); }

rc=0
RGW=1 RGW_PORT=$(port) MON_V2=$(port) MON_V1=$(port) MEMSTORE_BYTES=$((512 << 20)) \
	WATCH_PID=$$ "$SRC/scripts/ceph/start-ceph.sh" "$C" > "$T/start.log" 2>&1 || rc=$?
if [ $rc != 0 ]; then
	cat "$T/start.log"
	[ $rc = 77 ] && { echo "SKIP: Ceph cannot start here"; exit 77; }
	fail "start-ceph.sh exited $rc"
fi
# shellcheck disable=SC1091
. "$C/env"
export KVTIER_S3_BUCKET=kvt-full
SECS=4
SYNC_MS=3000
CEIL_MS=3000
COMMON=(--tier s3 --chunk-bytes 8M --queue-depth 8 --read-pct 0 --rounds 1 --no-ref --json
	--set store.tier_timeout_ms=$CEIL_MS --set store.sync_timeout_ms=$SYNC_MS)

# While there is room: the bucket is made and writes succeed.
timeout 120 "$K" bench "${COMMON[@]}" --seconds 1 --set-bytes 64M >"$T/ok.json" 2>"$T/ok.err" ||
	fail "bench on a healthy cluster: $(tail -3 "$T/ok.err")"
tail -1 "$T/ok.json" | jqe '.errors == 0 and .write_iops > 0' >/dev/null ||
	fail "healthy cluster: $(tail -1 "$T/ok.json")"

# Fill it: full at 30 % of the OSD (about 150 MiB of data).
ceph osd set-nearfull-ratio 0.2 >/dev/null 2>&1
ceph osd set-backfillfull-ratio 0.25 >/dev/null 2>&1
ceph osd set-full-ratio 0.3 >/dev/null 2>&1
ceph osd pool create fill 8 >/dev/null 2>&1
ceph osd pool set fill size 1 --yes-i-really-mean-it >/dev/null 2>&1 || true
rados -p fill bench 120 write -b 4194304 -t 4 --no-cleanup >"$T/fill.log" 2>&1 &
FILLER=$!
full=0
for _ in $(seq 1 120); do
	if ceph health detail 2>/dev/null | grep -qw "OSD_FULL"; then full=1; break; fi
	sleep 1
done
[ $full = 1 ] || fail "the cluster never became full: $(ceph health detail 2>&1 | head -5)"
echo "full: $(ceph health 2>&1 | head -1)"
kill "$FILLER" 2>/dev/null || true # it is blocked on the full cluster
FILLER=

# The issue's command, on the full cluster.
t0=$(ms)
"$K" bench "${COMMON[@]}" --seconds $SECS >"$T/out" 2>"$T/err" &
bench=$!
for _ in $(seq 1 600); do # 60 s at most
	[ -s "$T/out" ] && break
	kill -0 $bench 2>/dev/null || break
	sleep 0.1
done
took=$(( $(ms) - t0 ))
brc=0
if ! timeout 60 tail --pid=$bench -f /dev/null; then fail "bench still running 60 s after its result"; fi
wait $bench || brc=$?
echo "bench on a full cluster: JSON after $took ms (--seconds $SECS), exit $brc"
limit=$(( SECS * 1000 + 500 + CEIL_MS + SYNC_MS + 8000 ))
[ "$took" -lt "$limit" ] || fail "took $took ms (limit $limit)"
j=$(tail -1 "$T/out")
echo "$j" | jqe '.tier == "s3" and .errors > 0' >/dev/null ||
	fail "no JSON with the failed writes counted: $j; $(tail -3 "$T/err")"
[ $brc != 0 ] || fail "exit status 0 with failures"
grep -q "operations failed" "$T/err" || fail "no failure reported: $(tail -3 "$T/err")"
echo "ok: $(echo "$j" | jq -c '{errors, deadline_misses, write_iops}')"
