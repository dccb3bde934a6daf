#!/bin/bash
# kvt-test-labels: server
# bench_harness.sh - `kvtier bench` and its references measure the same I/O shape and say
# how: the fsync mode is the configured one (shipped default: data, fio --fdatasync=1) or
# the one asked for, bytes in flight are queue depth x object on both sides, fio's file set
# is laid out once and removed at the end, a directory whose name has a quote, a space and
# a colon works (no shell, no fio directory-list parsing), an earlier run's objects are
# reported, the Redis password never appears on any process's command line, and who goes
# first alternates by round.
# Exit 0 pass, 1 fail, 77 skip (no kvtier binary).
set -u
. "$(dirname "$0")/lib/jq.sh"
KVT=${KVT_BIN:-build}/kvtier
[ -x "$KVT" ] || { echo "skip: $KVT not built"; exit 77; }
for c in jq fio redis-server redis-benchmark; do
	command -v $c >/dev/null || { echo "FAIL: $c missing (scripts/deps.sh installs it)"; exit 1; }
done
base=${KVT_TEST_DIR:-/tmp}
mkdir -p "$base"
tmp=$(mktemp -d "$base/bench-harness-XXXXXX")
RPID=""
trap '[ -n "$RPID" ] && kill $RPID 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
small=(--chunk-bytes 256K --set-bytes 16M --queue-depth 4 --seconds 0.6 --rounds 1 --ramp 0.1)

# (a) default durability: the configured nvme.fsync (data), fio with --fdatasync=1, whose
# fdatasync latency (timed apart from its writes by fio) is reported next to its write's,
# and fio with --sync=dsync (each write durable at completion, kvtier's guarantee) for the
# phases that write; the device's requests in flight are reported for both sides
d="$tmp/it's a:dir"
j=$("$KVT" bench --tier nvme --dir "$d" "${small[@]}" --json 2>"$tmp/err" | tail -1) ||
	fail "nvme bench: $(cat "$tmp/err")"
echo "$j" | jqe '.fsync == "data" and (.reference | test("fdatasync=1")) and .settle == 3
	and .object_bytes == 266240 and .bytes_in_flight == 4 * 266240
	and .write_gibps > 0 and .read_gibps > 0 and .ref_write_gibps > 0
	and .ref_read_gibps > 0 and .ref_write_p50_us > 0 and .read_ratio > 0
	and .ref_write_sync_p50_us > 0 and .ref_write_sync_p99_us >= .ref_write_sync_p50_us
	and .write_sync_p50_us == null
	and .dsync_write_ratio > 0 and .dsync_mixed_ratio > 0 and .ref_dsync_write_gibps > 0
	and .ref_dsync_mixed_read_gibps > 0 and .dsync_read_ratio == null
	and .dev_write_inflight > 0 and .ref_dev_write_inflight > 0
	and .read_phase_dev_read_inflight > 0 and .read_phase_ref_dev_read_inflight > 0
	and (.dev_discard_mib | type) == "number" and (.ref_dev_discard_mib | type) == "number"
	and .errors == 0 and .checksum_failures == 0' >/dev/null || fail "default fsync: $j"
[ -e "$d/fio-ref" ] && fail "fio's file set was left in $d"
echo "default: $(echo "$j" | jq -c '{fsync,reference,write_ratio,read_ratio}')"

# (b) --fsync none is said, and fio runs without fsync; the earlier run's objects are
# reported; the rest asked for (--settle) is the one taken, and none without a reference
j=$("$KVT" bench --tier nvme --dir "$d" "${small[@]}" --read-pct 0 --fsync none --settle 0.5 \
	--json 2>"$tmp/err" | tail -1) || fail "fsync none: $(cat "$tmp/err")"
echo "$j" | jqe '.fsync == "none" and (.reference | test("fdatasync") | not)
	and .write_gibps > 0 and .ref_write_gibps > 0 and .settle == 0.5
	and .ref_write_sync_p50_us == null and .dsync_run_ratio == null' >/dev/null ||
	fail "fsync none: $j"
grep -q "already holds" "$tmp/err" || fail "no warning about a non-empty store: $(cat "$tmp/err")"
j=$("$KVT" bench --tier nvme --dir "$d" "${small[@]}" --read-pct 0 --fsync none --no-ref \
	--json 2>"$tmp/err" | tail -1) || fail "--no-ref: $(cat "$tmp/err")"
echo "$j" | jqe '.settle == 0 and .write_gibps > 0 and (.ref_write_gibps // 0) == 0' \
	>/dev/null || fail "--no-ref rested or measured a reference: $j"

# (c) bad options: one line, exit 2
"$KVT" bench --tier nvme --dir "$d" --fsync sometimes >/dev/null 2>"$tmp/err" && fail "--fsync sometimes accepted"
[ "$(wc -l <"$tmp/err")" = 1 ] || fail "--fsync error is not one line: $(cat "$tmp/err")"
"$KVT" bench --tier redis --fsync none >/dev/null 2>&1 && fail "--fsync accepted for redis"
"$KVT" bench --tier nvme --dir "$d" --ramp -1 >/dev/null 2>&1 && fail "--ramp -1 accepted"
"$KVT" bench --tier nvme --dir "$d" --settle -1 >/dev/null 2>"$tmp/err" && fail "--settle -1 accepted"
grep -q "settle: '-1' is not in" "$tmp/err" || fail "--settle -1: $(cat "$tmp/err")"

# (d) a Redis password stays off every command line (the server reads it from a file)
PW="kvt-secret-$RANDOM$RANDOM"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'port %s\nbind 127.0.0.1\nsave ""\nappendonly no\nrequirepass %s\ndir %s\n' \
	"$PORT" "$PW" "$tmp" >"$tmp/redis.conf"
redis-server "$tmp/redis.conf" >/dev/null 2>&1 &
RPID=$!
for _ in $(seq 50); do REDISCLI_AUTH=$PW redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
KVTIER_REDIS_URL="redis://:$PW@127.0.0.1:$PORT" "$KVT" bench --tier redis --chunk-bytes 64K \
	--set-bytes 4M --queue-depth 4 --seconds 1 --rounds 1 --json >"$tmp/out" 2>"$tmp/err" &
BPID=$!
seen=0
while kill -0 $BPID 2>/dev/null; do
	for f in /proc/[0-9]*/cmdline; do
		{ tr '\0' ' ' <"$f"; } 2>/dev/null | grep -q -- "$PW" && { seen=1; echo "password in $f: $(tr '\0' ' ' <"$f")"; }
	done
	sleep 0.05
done
wait $BPID || fail "redis bench with a password: $(cat "$tmp/err")"
[ $seen = 0 ] || fail "the Redis password appeared on a command line"
grep -q "no reference" "$tmp/err" || fail "no word about the skipped reference: $(cat "$tmp/err")"
grep -q -- "$PW" "$tmp/out" "$tmp/err" && fail "the password was printed"
tail -1 "$tmp/out" | jqe '.write_gibps > 0 and .read_gibps > 0 and .errors == 0' >/dev/null ||
	fail "redis bench: $(tail -1 "$tmp/out")"
# (e) one server request per write, as redis-benchmark's SET (issue #11): writes are SETs over
# working-set keys, never DEL then SET; the only DELs remove the working set at the end,
# and nothing of it is left
st=$(REDISCLI_AUTH=$PW redis-cli -p "$PORT" info commandstats | tr -d '\r')
dels=$(echo "$st" | sed -n 's/^cmdstat_del:calls=\([0-9]*\),.*/\1/p')
sets=$(echo "$st" | sed -n 's/^cmdstat_set:calls=\([0-9]*\),.*/\1/p')
objs=$(tail -1 "$tmp/out" | jq .objects)
[ "${dels:-0}" = "$objs" ] || fail "redis bench: $dels DELs, expected $objs (the working set's removal)"
[ "${sets:-0}" -gt "$objs" ] || fail "redis bench: $sets SETs for a working set of $objs"
left=$(REDISCLI_AUTH=$PW redis-cli -p "$PORT" dbsize | tr -d '\r')
[ "$left" = 0 ] || fail "redis bench left $left keys"

# (f) the reference client is as parallel as the tier: redis-benchmark runs on as many threads
# as the tier has connections (redis.connections, 4; with one thread the client was the
# limit and the "ratio" read 1.5-1.9x, docs/BENCHMARKS.md). No password, so it runs.
PORT2=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$PORT2" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >/dev/null 2>&1 &
RPID2=$!
trap 'kill $RPID $RPID2 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do redis-cli -p "$PORT2" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
# redis-benchmark's arguments, recorded by a wrapper first on PATH (the bench starts it with
# posix_spawnp): sampling /proc missed its short runs on a loaded machine
mkdir -p "$tmp/shim"
: >"$tmp/refargs"
printf '#!/bin/sh\necho "redis-benchmark $*" >>"%s"\nexec "%s" "$@"\n' "$tmp/refargs" \
	"$(command -v redis-benchmark)" >"$tmp/shim/redis-benchmark"
chmod +x "$tmp/shim/redis-benchmark"
PATH="$tmp/shim:$PATH" KVTIER_REDIS_URL="redis://127.0.0.1:$PORT2" "$KVT" bench --tier redis \
	--chunk-bytes 256K --set-bytes 8M --queue-depth 8 --seconds 1 --rounds 1 --json \
	>"$tmp/out2" 2>"$tmp/err2" || fail "redis bench: $(cat "$tmp/err2")"
grep -q -- "--threads 4 " "$tmp/refargs" || fail "redis-benchmark not on 4 threads: $(sort -u "$tmp/refargs")"
tail -1 "$tmp/out2" | jqe '.ref_write_gibps > 0 and .ref_read_gibps > 0 and .errors == 0' >/dev/null ||
	fail "redis bench reference: $(tail -1 "$tmp/out2")"

# (g) fio's I/O buffers are the same kind of memory as kvtier's: started on a 2 MiB
# boundary (--iomem_align=2m) and offered to transparent huge pages (glibc.malloc.hugetlb=1
# in its environment). Without the alignment a 32 x 68 KiB buffer got no huge page and
# kvtier's 64 KiB reads (from buffers carved out of 2 MiB regions) read 1.15-1.45x fio.
# (fio's command line and environment, recorded by a wrapper first on PATH, as in (f))
: >"$tmp/fioargs"
printf '#!/bin/sh\necho "fio $* | GLIBC_TUNABLES=$GLIBC_TUNABLES" >>"%s"\nexec "%s" "$@"\n' \
	"$tmp/fioargs" "$(command -v fio)" >"$tmp/shim/fio"
chmod +x "$tmp/shim/fio"
PATH="$tmp/shim:$PATH" "$KVT" bench --tier nvme --dir "$tmp/g" --chunk-bytes 64K --set-bytes 8M \
	--queue-depth 8 --seconds 1 --rounds 1 --read-pct 100 --json >"$tmp/out3" 2>"$tmp/err3" ||
	fail "nvme bench for (g): $(cat "$tmp/err3")"
grep -q -- "--iomem_align=2m .*glibc.malloc.hugetlb=1" "$tmp/fioargs" ||
	fail "fio without 2 MiB-aligned huge-page buffers: $(sort -u "$tmp/fioargs")"
# (h) who goes first alternates by round: kvtier in odd rounds, the reference in even ones
# (the side that runs second inherits the first one's aftermath, e.g. a server's background
# work after a write round). fio's wrapper counts the store's files written since fio last
# ran: with 3 rounds, the second reference run follows the first with no kvtier slice
# between them, the third follows two (fio runs: the layout, then rounds 1, 2, 3).
: >"$tmp/order"
touch "$tmp/mark"
printf '#!/bin/sh\nn=$(find "%s" -path "*/fio-ref" -prune -o -type f -newer "%s" -print | wc -l)\ntouch "%s"\necho "$n" >>"%s"\nexec "%s" "$@"\n' \
	"$tmp/h" "$tmp/mark" "$tmp/mark" "$tmp/order" "$(command -v fio)" >"$tmp/shim/fio"
chmod +x "$tmp/shim/fio"
PATH="$tmp/shim:$PATH" "$KVT" bench --tier fs --dir "$tmp/h" --chunk-bytes 256K --set-bytes 8M \
	--queue-depth 4 --seconds 1.2 --rounds 3 --ramp 0.1 --read-pct 0 --fsync none --json \
	>"$tmp/out4" 2>"$tmp/err4" || fail "fs bench for (h): $(cat "$tmp/err4")"
order=$(tr '\n' ' ' <"$tmp/order")
read -r -a n <<<"$order"
[ ${#n[@]} -eq 4 ] && [ "${n[1]}" -gt 0 ] && [ "${n[2]}" -eq 0 ] && [ "${n[3]}" -gt 0 ] ||
	fail "rounds not alternating who goes first: store files written before each fio run: $order"
echo "pass"
